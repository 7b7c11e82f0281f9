//! `tacho hook claude-code`, whole process, the way Claude Code runs it at every hook
//! event: a payload on stdin, inside a Git repository of 5,000 files (generated at
//! roughly a source tree's shape, committed). Targets (issue 12): an event without a
//! snapshot under 5 ms; one with a snapshot under 30 ms. In the same run, the costs a
//! user would otherwise pay: starting a process at all (`true`), and a shadow-git
//! checkpoint of the same repository (`git add -A && git write-tree`, own index).
//! The Bash case runs again with a watcher of the workspace (`tacho watch start`).
//!
//! `cargo bench -p tacho-benches --bench hook` (build the binary first:
//! `cargo build --release -p tacho-cli`; `TACHO_BIN` overrides where it is looked
//! for). Under `cargo test` each case runs once on 300 files. Skipped without `git`.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::{Criterion, criterion_group, criterion_main};
use tacho_benches::hooks::{committed_workspace, git_ok, run_hook, tacho_bin};
use tacho_benches::shadow_git;

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
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
    let ws_s = ws.display().to_string();
    let base = |event: &str| serde_json::json!({"session_id": "bench-hook-1", "transcript_path": "/nonexistent", "cwd": ws_s, "hook_event_name": event});
    let with = |mut v: serde_json::Value, extra: serde_json::Value| {
        if let (Some(m), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        v.to_string()
    };
    // The session starts (baseline snapshot) outside the measurement.
    run_hook(
        &bin,
        "claude-code",
        &home,
        &ws,
        &base("SessionStart").to_string(),
    );
    let n = AtomicU64::new(0);
    let next = || n.fetch_add(1, Ordering::Relaxed);
    let edit_target = ws.join(&paths[paths.len() / 2]).display().to_string();

    let mut group = c.benchmark_group("hook");
    group.sample_size(if bench_mode() { 60 } else { 10 });
    group.bench_function("process start (true)", |b| {
        b.iter(|| assert!(Command::new("true").status().unwrap().success()))
    });
    group.bench_function("prompt (no snapshot)", |b| {
        b.iter(|| {
            let p = with(
                base("UserPromptSubmit"),
                serde_json::json!({"prompt": format!("p{}", next())}),
            );
            run_hook(&bin, "claude-code", &home, &ws, &p)
        })
    });
    group.bench_function("Read call (no snapshot)", |b| {
        b.iter(|| {
            let id = format!("r{}", next());
            let p = with(base("PreToolUse"), serde_json::json!({"tool_name": "Read", "tool_input": {"file_path": edit_target}, "tool_use_id": id}));
            run_hook(&bin, "claude-code", &home, &ws, &p)
        })
    });
    group.bench_function("Edit call (targeted snapshot)", |b| {
        b.iter(|| {
            let id = format!("e{}", next());
            let p = with(base("PreToolUse"), serde_json::json!({"tool_name": "Edit", "tool_input": {"file_path": edit_target, "old_string": "a", "new_string": "b"}, "tool_use_id": id}));
            run_hook(&bin, "claude-code", &home, &ws, &p)
        })
    });
    group.bench_function("Bash call (full snapshot)", |b| {
        b.iter(|| {
            let id = format!("b{}", next());
            let p = with(base("PreToolUse"), serde_json::json!({"tool_name": "Bash", "tool_input": {"command": "make"}, "tool_use_id": id}));
            run_hook(&bin, "claude-code", &home, &ws, &p)
        })
    });
    // The same with a watcher of the workspace running (`tacho watch start`): the full
    // snapshot then looks only at what changed.
    tacho_benches::run_ok(
        Command::new(&bin)
            .args(["watch", "start"])
            .arg(&ws)
            .env("TACHO_HOME", &home),
    );
    group.bench_function("Bash call (full snapshot, watcher running)", |b| {
        b.iter(|| {
            let id = format!("w{}", next());
            let p = with(base("PreToolUse"), serde_json::json!({"tool_name": "Bash", "tool_input": {"command": "make"}, "tool_use_id": id}));
            run_hook(&bin, "claude-code", &home, &ws, &p)
        })
    });
    tacho_benches::run_ok(
        Command::new(&bin)
            .args(["watch", "stop"])
            .arg(&ws)
            .env("TACHO_HOME", &home),
    );
    let shadow = tmp.path().join("shadow.git");
    shadow_git::init(&shadow).unwrap();
    group.bench_function(
        "baseline: git add -A && git write-tree (shadow index)",
        |b| b.iter(|| shadow_git::snapshot(&shadow, &ws).unwrap()),
    );
    group.finish();
}

criterion_group!(hook_benches, benches);
criterion_main!(hook_benches);
