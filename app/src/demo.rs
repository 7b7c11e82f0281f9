//! `tacho demo`: tacho's main job on its embedded default. It makes a sample
//! repository and records a realistic agent session that edits it, through the same
//! ingest path as `tacho record` (so with snapshots of its files at every step).

use std::fmt;
use std::path::{Path, PathBuf};

use tacho_schema::{EventBody, JsonError, parse_json_line};
use tacho_store::Durability;

use crate::Tacho;
use crate::error::{ErrorKind, Field, Kind, Namer, neutral};
use crate::ingest::{Ingest, IngestError, IngestOptions};

/// The bundled example session: an architect plans per-client rate limiting, a coder
/// writes it, a test run fails, the coder fixes the bug, the tests pass.
const SESSION: &str = include_str!("../../examples/sessions/rate-limit.jsonl");

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

/// Why the demo could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("{}", neutral(self))]
    NotEmpty(PathBuf),
    #[error("{}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("embedded session: {0}")]
    Embedded(#[source] JsonError),
    #[error(transparent)]
    Ingest(#[from] IngestError),
}

impl Kind for DemoError {
    fn kind(&self) -> ErrorKind {
        match self {
            DemoError::NotEmpty(_) => ErrorKind::Input,
            DemoError::Write { .. } | DemoError::Embedded(_) => ErrorKind::Io,
            DemoError::Ingest(e) => e.kind(),
        }
    }

    fn field(&self) -> Option<Field> {
        match self {
            DemoError::NotEmpty(_) => Some(Field::Dir),
            DemoError::Ingest(e) => e.field(),
            _ => None,
        }
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        match self {
            DemoError::NotEmpty(dir) => write!(
                f,
                "{} exists and is not empty; give {} an empty or new directory",
                dir.display(),
                name.field(Field::Dir)
            ),
            DemoError::Ingest(e) => e.fmt_named(f, name),
            other => fmt::Display::fmt(other, f),
        }
    }
}

/// The demo session recorded.
#[derive(Debug, Clone)]
pub struct Demo {
    pub session: crate::SessionId,
    /// The sample repository, canonical.
    pub workspace: PathBuf,
}

fn write_file(root: &Path, rel: &str, text: &str) -> Result<(), DemoError> {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| DemoError::Write {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    std::fs::write(&path, text).map_err(|source| DemoError::Write { path, source })
}

impl Tacho {
    /// Makes the sample repository in `dir` (default: a new directory under the
    /// system's temporary directory; it is kept) and records the bundled session in it,
    /// re-timed to end now, the agent's edits happening in the repository as they are
    /// recorded.
    pub fn record_demo(&self, dir: Option<PathBuf>) -> Result<Demo, DemoError> {
        let session = self.new_session_id();
        let repo =
            dir.unwrap_or_else(|| std::env::temp_dir().join(format!("tacho-demo-{session}")));
        if repo.exists() && std::fs::read_dir(&repo).map_or(true, |mut d| d.next().is_some()) {
            return Err(DemoError::NotEmpty(repo));
        }
        for (rel, text) in REPO {
            write_file(&repo, rel, text)?;
        }
        let workspace = std::fs::canonicalize(&repo).unwrap_or(repo.clone());

        let mut events = Vec::new();
        for (i, line) in SESSION.lines().enumerate() {
            let p = parse_json_line(line, i + 1).map_err(DemoError::Embedded)?;
            events.push((p.time_unix_ns.unwrap_or(0), p.body));
        }
        let last = events.last().map_or(0, |e| e.0);
        let now = self.now();
        // Event by event, as an agent's hooks would record it.
        let mut ingest = Ingest::new(
            self,
            IngestOptions {
                source: "demo".into(),
                session: None,
                new_session: false,
                durability: Durability::Sync,
                batch_lines: 1,
                auto_snapshots: true,
                pack_new_sessions: false,
                outside: true,
            },
            |_| Ok(()),
        )?;
        for (i, (t, mut body)) in events.into_iter().enumerate() {
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
            ingest.event(i + 1, session.clone(), now - (last - t), body)?;
        }
        ingest.finish().map_err(|e| e.error)?;
        Ok(Demo {
            session: crate::SessionId::resolved(session),
            workspace,
        })
    }
}
