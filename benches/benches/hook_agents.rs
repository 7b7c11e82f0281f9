//! Every agent's hook, whole process, as its real CLI runs it: the hook payloads its
//! real CLI sent in the captured runs (`tests/agents/fixtures/<agent>/hooks.jsonl`,
//! Copilot's PascalCase capture) replayed through `tacho hook <agent>` as one
//! session, in a generated Git repository of 5,000 files (committed), beside Claude
//! Code's session of the same shape (start, prompt, Read, Edit, Bash, stop). Every agent
//! of the registry with a capture is measured: an adapter added with its capture is
//! benchmarked with no change here.
//!
//! The budget is Claude Code's (issue 12): an event without a snapshot under 5 ms, one
//! with a snapshot under 30 ms. Criterion times each agent's whole session (a fresh
//! session id each iteration); the hook processes are also timed one by one, and the
//! run ends with a table per agent: the median of its events without a snapshot and
//! with one (the session's start, a tool that can change files), against Claude Code's
//! in the same run.
//!
//! `cargo bench -p tacho-benches --bench hook_agents` (build the binary first:
//! `cargo build --release -p tacho-cli`; `TACHO_BIN` overrides it). Under `cargo test`
//! every agent's session runs once on 300 files. Skipped without `git`.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::Value;
use tacho_agents::Agent;
use tacho_agents::hook::ToolKind;
use tacho_benches::hooks::{committed_workspace, git_ok, run_hook_with, tacho_bin};

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/agents/fixtures")
}

/// Whether a hook event takes a snapshot (the session's start takes the baseline; a
/// tool that can change files, one before and one after).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Cost {
    NoSnapshot,
    Snapshot,
}

/// One agent's captured session, ready to replay: each payload with its cost.
struct Replay {
    agent: Agent,
    /// The captured session id, replaced by a fresh one in every replay.
    session: String,
    payloads: Vec<(String, Cost)>,
}

/// The capture of `agent`'s real CLI, if there is one: the hook payloads as its CLI
/// sent them, in order. A capture line holds the payload as `stdin` (a hook command's
/// input), as `payload` beside `env` (a hook script's), or is itself what tacho's
/// plugin forwards (`event`, `payload`: OpenCode, Kilo Code).
fn capture(agent: Agent, ws: &str, home: &str) -> Option<Replay> {
    let dir = fixtures().join(agent.name());
    let file = [dir.join("pascal/hooks.jsonl"), dir.join("hooks.jsonl")]
        .into_iter()
        .find(|f| f.exists())?;
    let text = std::fs::read_to_string(&file).unwrap();
    let mut payloads = Vec::new();
    let mut session = None;
    for line in text.lines() {
        let Ok(mut v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let payload = if let Some(p) = v.get("stdin") {
            p.clone()
        } else if v.get("env").is_some() {
            v["payload"].clone()
        } else {
            v["directory"] = "/WORKSPACE".into();
            v["database"] = format!("/HOME/.local/share/{0}/{0}.db", agent.name()).into();
            v
        };
        let raw = payload
            .to_string()
            .replace("/WORKSPACE", ws)
            .replace("/HOME", home);
        // What the adapter does not take (an event tacho does not install) is skipped,
        // as the agent would not send it to tacho.
        let Ok(p) = agent.parse_payload(raw.as_bytes()) else {
            continue;
        };
        let tool_event = matches!(
            p.hook_event_name.as_str(),
            "PreToolUse" | "PostToolUse" | "PostToolUseFailure"
        );
        let changes = p.tool_name.as_deref().is_some_and(|t| {
            !matches!(
                agent.tool_kind(t, p.tool_input.as_ref()),
                ToolKind::ReadOnly
            )
        });
        let cost = if p.hook_event_name == "SessionStart" || (tool_event && changes) {
            Cost::Snapshot
        } else {
            Cost::NoSnapshot
        };
        session.get_or_insert(p.session_id);
        payloads.push((raw, cost));
    }
    Some(Replay {
        agent,
        session: session?,
        payloads,
    })
}

/// Claude Code's session of the same shape, as its hooks send it.
fn claude_code(ws: &str, target: &str) -> Replay {
    let ev = |event: &str, extra: Value| {
        let mut v = serde_json::json!({"session_id": "bench-claude", "transcript_path": "/nonexistent", "cwd": ws, "hook_event_name": event});
        if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        v.to_string()
    };
    let read = serde_json::json!({"tool_name": "Read", "tool_input": {"file_path": target}, "tool_use_id": "r1"});
    let edit = serde_json::json!({"tool_name": "Edit", "tool_input": {"file_path": target, "old_string": "a", "new_string": "b"}, "tool_use_id": "e1"});
    let bash = serde_json::json!({"tool_name": "Bash", "tool_input": {"command": "make"}, "tool_use_id": "b1"});
    let with = |mut v: Value, k: &str, x: Value| {
        v[k] = x;
        v
    };
    let payloads = vec![
        (
            ev("SessionStart", serde_json::json!({"source": "startup"})),
            Cost::Snapshot,
        ),
        (
            ev("UserPromptSubmit", serde_json::json!({"prompt": "fix it"})),
            Cost::NoSnapshot,
        ),
        (ev("PreToolUse", read.clone()), Cost::NoSnapshot),
        (
            ev("PostToolUse", with(read, "tool_response", "text".into())),
            Cost::NoSnapshot,
        ),
        (ev("PreToolUse", edit.clone()), Cost::Snapshot),
        (
            ev("PostToolUse", with(edit, "tool_response", "ok".into())),
            Cost::Snapshot,
        ),
        (ev("PreToolUse", bash.clone()), Cost::Snapshot),
        (
            ev("PostToolUse", with(bash, "tool_response", "done".into())),
            Cost::Snapshot,
        ),
        (ev("Stop", serde_json::json!({})), Cost::NoSnapshot),
    ];
    Replay {
        agent: Agent::ClaudeCode,
        session: "bench-claude".into(),
        payloads,
    }
}

fn median(v: &mut [Duration]) -> Option<Duration> {
    v.sort();
    v.get(v.len() / 2).copied()
}

fn benches(c: &mut Criterion) {
    if !git_ok() {
        eprintln!("skipped: no git");
        return;
    }
    let bin = tacho_bin();
    let files = if bench_mode() { 5_000 } else { 300 };
    let tmp = tempfile::tempdir().unwrap();
    let (ws, paths) = committed_workspace(tmp.path(), files);
    let home = tmp.path().join("home");
    let agent_home = tmp.path().join("agent-home");
    std::fs::create_dir_all(&agent_home).unwrap();
    let ws_s = ws.display().to_string();
    let target = ws.join(&paths[paths.len() / 2]).display().to_string();
    let mut replays = vec![claude_code(&ws_s, &target)];
    replays.extend(
        Agent::ALL
            .iter()
            .filter_map(|&a| capture(a, &ws_s, &agent_home.display().to_string())),
    );
    let n = AtomicU64::new(0);
    let times: Mutex<BTreeMap<(String, Cost), Vec<Duration>>> = Mutex::new(BTreeMap::new());

    let mut group = c.benchmark_group("hook_agents");
    group.sample_size(10);
    for r in &replays {
        let name = format!(
            "{}: a captured session ({} events)",
            r.agent.name(),
            r.payloads.len()
        );
        group.bench_function(name, |b| {
            b.iter(|| {
                let fresh = format!("bench-{}", n.fetch_add(1, Ordering::Relaxed));
                for (p, cost) in &r.payloads {
                    let p = p.replace(&r.session, &fresh);
                    let t = Instant::now();
                    run_hook_with(
                        &bin,
                        r.agent.name(),
                        &home,
                        &ws,
                        &p,
                        &[("HOME", agent_home.as_path())],
                    );
                    times
                        .lock()
                        .unwrap()
                        .entry((r.agent.name().to_owned(), *cost))
                        .or_default()
                        .push(t.elapsed());
                }
            })
        });
    }
    group.finish();

    // The budget, per agent: medians of single hook processes, and against Claude Code.
    let mut times = times.into_inner().unwrap();
    let mut claude = BTreeMap::new();
    for cost in [Cost::NoSnapshot, Cost::Snapshot] {
        if let Some(v) = times.get_mut(&("claude-code".to_owned(), cost)) {
            claude.insert(cost, median(v));
        }
    }
    eprintln!("hook_agents: median per hook process (ratio to Claude Code's)");
    for ((agent, cost), v) in &mut times {
        let m = median(v).unwrap_or_default();
        let base = claude.get(cost).copied().flatten().unwrap_or_default();
        eprintln!(
            "  {agent:<12} {:<12} {:>8.2} ms  ×{:.2}  ({} events)",
            match cost {
                Cost::NoSnapshot => "no snapshot",
                Cost::Snapshot => "snapshot",
            },
            m.as_secs_f64() * 1e3,
            m.as_secs_f64() / base.as_secs_f64().max(1e-9),
            v.len()
        );
    }
}

criterion_group!(hook_agents, benches);
criterion_main!(hook_agents);
