//! `tacho demo`: tacho's main job on its embedded default. It makes a sample repository,
//! records a realistic agent session that edits it (with snapshots of its files at every
//! step), then shows the graph, the risk assessment, the replay verification, the
//! rollback points and a rollback dry run.

use std::path::{Path, PathBuf};

use clap::Args;
use tacho_projections::assess;
use tacho_schema::{EventBody, parse_json_line};
use tacho_store::Durability;

use crate::cmd::graph::{load_graph, markdown};
use crate::cmd::record::new_session_id;
use crate::cmd::replay;
use crate::cmd::risk::render;
use crate::error::CliError;
use crate::home::open_store;
use crate::output::Out;

/// The bundled example session: an architect plans per-client rate limiting, a coder
/// writes it, a test run fails, the coder fixes the bug, the tests pass.
const SESSION: &str = include_str!("../../../examples/sessions/rate-limit.jsonl");

/// The sample repository before the agent starts.
const REPO: &[(&str, &str)] = &[
    (
        "package.json",
        "{\n  \"name\": \"shop-api\",\n  \"private\": true,\n  \"scripts\": { \"test\": \"jest\" }\n}\n",
    ),
    (
        "src/api.ts",
        "import express from 'express';\nimport { router } from './routes';\n\nexport function createApp() {\n  const app = express();\n  app.use(express.json());\n  app.use('/v1', router);\n  return app;\n}\n",
    ),
    (
        "src/routes.ts",
        "import { Router } from 'express';\nimport { listOrders, createOrder } from './orders';\n\nexport const router = Router();\nrouter.get('/orders', listOrders);\nrouter.post('/orders', createOrder);\n",
    ),
    (
        "src/orders.ts",
        "export function listOrders(_req: any, res: any) { res.json([]); }\nexport function createOrder(req: any, res: any) { res.status(201).json(req.body); }\n",
    ),
    (
        "test/orders.test.ts",
        "test('lists orders', async () => { /* ... */ });\n",
    ),
];

/// What the agent's edits write, by the call id of the tool call that made them.
const EDITS: &[(&str, &str, &str)] = &[
    (
        "toolu_04",
        "src/middleware/rate-limit.ts",
        "const buckets = new Map<string, { tokens: number; at: number }>();\n\nexport function rateLimit(opts: { perMinute: number }) {\n  return (req: any, res: any, next: any) => {\n    const key = req.id;\n    const now = Date.now();\n    const b = buckets.get(key) ?? { tokens: opts.perMinute, at: now };\n    b.tokens = Math.min(opts.perMinute, b.tokens + ((now - b.at) / 60000) * opts.perMinute);\n    b.at = now;\n    if (b.tokens < 1) return res.status(429).end();\n    b.tokens -= 1;\n    buckets.set(key, b);\n    next();\n  };\n}\n",
    ),
    (
        "toolu_05",
        "src/api.ts",
        "import express from 'express';\nimport { router } from './routes';\nimport { rateLimit } from './middleware/rate-limit';\n\nexport function createApp() {\n  const app = express();\n  app.use(express.json());\n  app.use('/v1', rateLimit({ perMinute: 120 }), router);\n  return app;\n}\n",
    ),
    (
        "toolu_06",
        "test/rate-limit.test.ts",
        "test('returns 429 after 120 requests in a minute', async () => { /* ... */ });\n",
    ),
    (
        "toolu_08",
        "src/middleware/rate-limit.ts",
        "const buckets = new Map<string, { tokens: number; at: number }>();\n\nfunction clientId(req: any): string {\n  return req.get('x-api-key') ?? req.ip;\n}\n\nexport function rateLimit(opts: { perMinute: number }) {\n  return (req: any, res: any, next: any) => {\n    const key = clientId(req);\n    const now = Date.now();\n    const b = buckets.get(key) ?? { tokens: opts.perMinute, at: now };\n    b.tokens = Math.min(opts.perMinute, b.tokens + ((now - b.at) / 60000) * opts.perMinute);\n    b.at = now;\n    if (b.tokens < 1) return res.status(429).end();\n    b.tokens -= 1;\n    buckets.set(key, b);\n    next();\n  };\n}\n",
    ),
];

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to create the sample repository (default: a new directory under the
    /// system's temporary directory). It is kept, so you can look at it.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

fn write_file(root: &Path, rel: &str, text: &str) -> Result<(), CliError> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| CliError::Io(format!("{}: {e}", parent.display())))?;
    }
    std::fs::write(&path, text).map_err(|e| CliError::Io(format!("{}: {e}", path.display())))
}

pub fn run(a: DemoArgs) -> Result<(), CliError> {
    let session = new_session_id();
    let repo = a
        .dir
        .unwrap_or_else(|| std::env::temp_dir().join(format!("tacho-demo-{session}")));
    if repo.exists() && std::fs::read_dir(&repo).map_or(true, |mut d| d.next().is_some()) {
        return Err(CliError::Input(format!(
            "{} exists and is not empty; give --dir an empty or new directory",
            repo.display()
        )));
    }
    for (rel, text) in REPO {
        write_file(&repo, rel, text)?;
    }
    let workspace = std::fs::canonicalize(&repo).unwrap_or(repo.clone());

    // The session, re-timed so that it ends now, in this sample repository.
    let mut events = Vec::new();
    for (i, line) in SESSION.lines().enumerate() {
        let p = parse_json_line(line, i + 1)
            .map_err(|e| CliError::Io(format!("embedded session: {e}")))?;
        events.push((p.time_unix_ns.unwrap_or(0), p.body));
    }
    let last = events.last().map_or(0, |e| e.0);
    let now = crate::cmd::record::now_unix_ns();
    let store = open_store()?;
    let snaps = crate::snapshots::open_snapshots()?;
    let mut w = store.writer(&session)?;
    // Snapshots as `tacho record` takes them: a baseline, one before each step, and a
    // final one, of the files as they are at that moment.
    let snapshot = |w: &mut tacho_store::Writer,
                    t: i64,
                    point: crate::snapshots::AutoPoint|
     -> Result<(), CliError> {
        if let Some((reason, step)) = point {
            let (snap, ws) = crate::snapshots::take(&snaps, &workspace, &[])?;
            let body = crate::snapshots::taken_event(&snap, &ws, reason, step);
            w.append(t, &body, Durability::Sync)?;
        }
        Ok(())
    };
    for (t, mut body) in events {
        if let EventBody::SessionStart(s) = &mut body {
            s.workspace = Some(workspace.display().to_string());
            s.source = Some("tacho-demo".into());
        }
        // The agent's edits happen in the repository as they are recorded.
        if let EventBody::FileEdit(f) = &body
            && let Some((_, rel, text)) = EDITS
                .iter()
                .find(|(id, rel, _)| f.call_id.as_deref() == Some(*id) && *rel == f.path)
        {
            write_file(&workspace, rel, text)?;
        }
        let at = now - (last - t);
        let (before, after) = crate::snapshots::auto_points(&body);
        snapshot(&mut w, at, before)?;
        w.append(at, &body, Durability::Sync)?;
        snapshot(&mut w, at, after)?;
    }
    drop(w);

    let mut out = Out::new();
    out.line(format!(
        "Recorded a demo session {session} in {}",
        store.root().display()
    ))?;
    out.line(format!("Sample repository: {}\n", workspace.display()))?;
    let g = load_graph(&store, &session)?;
    let risk = assess(&g);
    out.line(markdown(&g, &risk).trim_end())?;
    out.line("\n## Risk\n")?;
    out.line(render(&risk, true).trim_end())?;
    out.line("\n## Replay verification\n")?;
    let failed = replay::verify(&store, &session, false, &mut out)?;
    out.line("\n## Rollback points\n")?;
    out.flush()?;
    let rollback = |list: bool, dry_run: bool| crate::cmd::rollback::RollbackArgs {
        session: session.clone(),
        list,
        dry_run,
        step: None,
        yes: false,
        force: false,
        json: false,
    };
    crate::cmd::rollback::run(rollback(true, false))?;
    out.line("\n## Rollback dry run (the whole session)\n")?;
    out.flush()?;
    crate::cmd::rollback::run(rollback(false, true))?;
    let short = &session[..12];
    out.line(format!(
        "\nTry next:\n  tacho graph {short} --format mermaid\n  tacho session replay {short} --mode summary\n  tacho session rollback {short} --step 3 --dry-run\n  tacho session list"
    ))?;
    out.finish()?;
    if failed > 0 {
        return Err(CliError::Findings(format!(
            "the demo session failed verification with {failed} finding(s)"
        )));
    }
    Ok(())
}
