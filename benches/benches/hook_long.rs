//! `tacho hook claude-code`, whole process, in a long session (issue 31): the prompt
//! hook and a Bash call's PreToolUse (a full snapshot) in sessions whose open segment
//! holds about 8 MB and 16 MB (tool results of 200 kB each, recorded through the hooks
//! as Claude Code sends them), against the same hooks in a fresh session — the
//! baseline, measured in the same run. Target: a long session's hook within 1.3× of
//! the fresh session's, with no read that grows with the session (what a hook reads
//! is counted by `app/tests/hook_reads.rs`). The `Stop` hook is measured too: it
//! reads the session once, to confirm its calls from the log (not held to the target).
//!
//! `cargo bench -p tacho-benches --bench hook_long` (build the binary first:
//! `cargo build --release -p tacho-cli`; `TACHO_BIN` overrides it). Under `cargo test`
//! each case runs once, in sessions of 0.4 and 0.8 MB. Skipped without `git`.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use tacho_benches::hooks::{committed_workspace, git_ok, run_hook, tacho_bin};

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// A tool result of this size, as Claude Code sends a Read of a large file.
const RESULT_BYTES: usize = 200_000;

fn payload(session: &str, ws: &Path, event: &str, extra: Value) -> String {
    let mut p = json!({"session_id": session, "transcript_path": "/nonexistent", "cwd": ws, "hook_event_name": event});
    if let (Some(m), Value::Object(e)) = (p.as_object_mut(), extra) {
        m.extend(e);
    }
    p.to_string()
}

/// Starts `session` and records `results` Read calls of [`RESULT_BYTES`] through the
/// hooks.
fn session_of(bin: &Path, home: &Path, ws: &Path, session: &str, results: usize) {
    run_hook(
        bin,
        "claude-code",
        home,
        ws,
        &payload(session, ws, "SessionStart", json!({})),
    );
    let output = "r".repeat(RESULT_BYTES);
    let file = ws.join("README.md");
    for i in 0..results {
        let id = format!("read{i}");
        let input = json!({"file_path": file});
        let pre = json!({"tool_name": "Read", "tool_input": input, "tool_use_id": id});
        run_hook(
            bin,
            "claude-code",
            home,
            ws,
            &payload(session, ws, "PreToolUse", pre),
        );
        let post = json!({"tool_name": "Read", "tool_input": input, "tool_use_id": id,
            "tool_response": {"type": "text", "file": {"filePath": file, "content": output}}});
        run_hook(
            bin,
            "claude-code",
            home,
            ws,
            &payload(session, ws, "PostToolUse", post),
        );
    }
}

/// The bytes of `session`'s stream under `home`.
fn stream_bytes(home: &Path) -> Vec<(String, u64)> {
    let streams = home.join("log/streams");
    let mut out = Vec::new();
    for d in std::fs::read_dir(streams).unwrap() {
        let d = d.unwrap();
        let bytes = std::fs::read_dir(d.path())
            .unwrap()
            .map(|f| f.unwrap().metadata().unwrap().len())
            .sum();
        out.push((d.file_name().to_string_lossy().into_owned(), bytes));
    }
    out
}

fn benches(c: &mut Criterion) {
    if !git_ok() {
        eprintln!("skipped: no git");
        return;
    }
    let bin = tacho_bin();
    let (files, sizes) = if bench_mode() {
        (1_000, [("8 MB", 40), ("16 MB", 80)])
    } else {
        (100, [("8 MB", 2), ("16 MB", 4)])
    };
    let tmp = tempfile::tempdir().unwrap();
    let (ws, _) = committed_workspace(tmp.path(), files);
    let home = tmp.path().join("home");
    // Sessions are set up outside the measurement.
    let mut sessions = vec![("fresh".to_owned(), "long-fresh".to_owned())];
    session_of(&bin, &home, &ws, "long-fresh", 0);
    for (name, results) in sizes {
        let id = format!("long-{}", name.replace(" ", "").to_lowercase());
        session_of(&bin, &home, &ws, &id, results);
        sessions.push((format!("{name} session"), id));
    }
    for (stream, bytes) in stream_bytes(&home) {
        eprintln!("{stream}: {:.1} MB", bytes as f64 / 1e6);
    }
    let n = AtomicU64::new(0);
    let next = || n.fetch_add(1, Ordering::Relaxed);
    let mut group = c.benchmark_group("hook_long");
    group.sample_size(if bench_mode() { 60 } else { 10 });
    for (name, id) in &sessions {
        group.bench_function(format!("prompt, {name}"), |b| {
            b.iter(|| {
                let p = json!({"prompt": format!("p{}", next())});
                run_hook(
                    &bin,
                    "claude-code",
                    &home,
                    &ws,
                    &payload(id, &ws, "UserPromptSubmit", p),
                )
            })
        });
    }
    for (name, id) in &sessions {
        // Each call is also finished (its PostToolUse, not timed), so that the session's
        // open calls do not pile up from sample to sample.
        group.bench_function(format!("Bash PreToolUse (full snapshot), {name}"), |b| {
            b.iter_custom(|iters| {
                let mut spent = std::time::Duration::ZERO;
                for _ in 0..iters {
                    let call = format!("bash{}", next());
                    let input = json!({"command": "make"});
                    let pre =
                        json!({"tool_name": "Bash", "tool_input": input, "tool_use_id": call});
                    let started = std::time::Instant::now();
                    run_hook(
                        &bin,
                        "claude-code",
                        &home,
                        &ws,
                        &payload(id, &ws, "PreToolUse", pre),
                    );
                    spent += started.elapsed();
                    let post = json!({"tool_name": "Bash", "tool_input": input, "tool_use_id": call,
                        "tool_response": {"stdout": "ok", "stderr": "", "interrupted": false}});
                    run_hook(
                        &bin,
                        "claude-code",
                        &home,
                        &ws,
                        &payload(id, &ws, "PostToolUse", post),
                    );
                }
                spent
            })
        });
    }
    // The stop: it confirms the session's calls from the log (SPEC §3.1), one pass
    // over the session's events, once a turn. Measured, not held to the target.
    for (name, id) in &sessions {
        group.bench_function(format!("Stop (calls confirmed from the log), {name}"), |b| {
            b.iter(|| {
                let p = json!({"stop_hook_active": false, "last_assistant_message": format!("s{}", next())});
                run_hook(&bin, "claude-code", &home, &ws, &payload(id, &ws, "Stop", p))
            })
        });
    }
    group.finish();
}

criterion_group!(hook_long_benches, benches);
criterion_main!(hook_long_benches);
