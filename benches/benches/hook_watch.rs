//! Issue 31, rows 4 and 5: full snapshots at shell-command frequency in large
//! repositories, whole processes (release binary), each beside Git's own checkpoint of
//! the same repository in the same run (`git add -A && git write-tree` with a private
//! index, `GIT_INDEX_FILE`).
//!
//! - `hook_bash_50k`: a Bash call (its `PreToolUse` and `PostToolUse` hooks, a full
//!   snapshot each) in a committed Git repository of 50,000 generated files, hooks as
//!   `tacho hooks install` installs them by default: the session's first hook (its
//!   baseline) starts the workspace's watcher. The first call (the watcher just
//!   started: its first scan is a full one), later calls unchanged and after 10
//!   edits, and the same with `--no-watch` hooks (what every call cost before).
//!   Target: ≤ 30 ms after the first call.
//! - `snapshot_watched_5k`: `tacho snapshot` in a committed repository of 5,000 files
//!   with the watcher running, unchanged and after 10 edits. Target: ≥ 5× faster than
//!   Git's two processes.
//!
//! `cargo bench -p tacho-benches --bench hook_watch` (build the binary first:
//! `cargo build --release -p tacho-cli`; `TACHO_BIN` overrides where it is looked for).
//! Under `cargo test` each case runs once on 300 files (with `TACHO_WATCH_FILES`
//! lowered so that they start a watcher too). Skipped without `git`.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    BatchSize, BenchmarkGroup, Criterion, SamplingMode, criterion_group, criterion_main,
};
use tacho_benches::hooks::{committed_workspace, git_ok, tacho_bin};
use tacho_benches::{edit_files, shadow_git};

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// A repository, a data directory and the files to edit.
struct Setup {
    _tmp: tempfile::TempDir,
    bin: PathBuf,
    ws: PathBuf,
    home: PathBuf,
    index: PathBuf,
    ten: Vec<String>,
}

impl Setup {
    fn new(files: usize) -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let (ws, paths) = committed_workspace(tmp.path(), files);
        let step = (paths.len() / 10).max(1);
        let ten = paths.iter().step_by(step).take(10).cloned().collect();
        Setup {
            bin: tacho_bin(),
            home: tmp.path().join("home"),
            index: tmp.path().join("git-index"),
            ws,
            ten,
            _tmp: tmp,
        }
    }

    fn tacho(&self) -> Command {
        let mut c = Command::new(&self.bin);
        c.current_dir(&self.ws).env("TACHO_HOME", &self.home);
        if !bench_mode() {
            // 300 files stand for 50,000: they start a watcher too.
            c.env("TACHO_WATCH_FILES", "100");
        }
        c
    }

    /// One hook process (`tacho hook claude-code ARGS`) with an event on stdin.
    fn hook(&self, args: &[&str], session: &str, event: &str, call: u64) {
        let payload = serde_json::json!({"session_id": session, "transcript_path": "/nonexistent", "cwd": self.ws, "hook_event_name": event, "tool_name": "Bash", "tool_input": {"command": "make"}, "tool_use_id": format!("b{call}"), "tool_response": {"stdout": "", "stderr": "", "interrupted": false}});
        let mut c = self.tacho();
        c.args(["hook", "claude-code"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(payload.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "tacho hook {event}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A Bash call: its two hooks.
    fn bash(&self, args: &[&str], session: &str, call: u64) {
        self.hook(args, session, "PreToolUse", call);
        self.hook(args, session, "PostToolUse", call);
    }

    fn watch(&self, what: &str) -> bool {
        let mut c = self.tacho();
        c.args(["watch", what])
            .arg(&self.ws)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        c.status().unwrap().success()
    }

    /// A session's start, whose baseline starts the watcher; returns once it answers.
    fn start_session(&self, session: &str) {
        self.hook(&[], session, "SessionStart", 0);
        let until = Instant::now() + Duration::from_secs(120);
        while !self.watch("status") {
            assert!(Instant::now() < until, "the hooks started no watcher");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `tacho snapshot` of the workspace, whole process; whether the watcher answered.
    fn snapshot(&self) -> bool {
        let out = self
            .tacho()
            .args(["snapshot", "--json", "--workspace"])
            .arg(&self.ws)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["watched"] == serde_json::json!(true)
    }

    fn git(&self) {
        shadow_git::snapshot_in_repo(&self.ws, &self.index).unwrap();
    }
}

fn hook_bash(c: &mut Criterion) {
    let s = Setup::new(if bench_mode() { 50_000 } else { 300 });
    let n = AtomicU64::new(1);
    let call = || n.fetch_add(1, Ordering::Relaxed);
    let mut round = 0u64;
    let mut g = c.benchmark_group(format!(
        "hook_bash_{}",
        if bench_mode() { "50k" } else { "300" }
    ));
    g.sample_size(10).sampling_mode(SamplingMode::Flat);
    // The first call of a session: its baseline started the watcher, which has not
    // answered a scan yet. Each sample is a new session with a new watcher.
    let sessions = AtomicU64::new(0);
    g.bench_function("tacho Pre+Post, first call (watcher just started)", |b| {
        b.iter_batched(
            || {
                s.watch("stop");
                let id = format!("first-{}", sessions.fetch_add(1, Ordering::Relaxed));
                s.start_session(&id);
                id
            },
            |id| s.bash(&[], &id, call()),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("tacho Pre+Post, later calls, unchanged", |b| {
        b.iter(|| s.bash(&[], "first-0", call()))
    });
    g.bench_function("tacho Pre+Post, later calls, after 10 edits", |b| {
        b.iter_batched(
            || {
                round += 1;
                edit_files(&s.ws, &s.ten, round).unwrap();
            },
            |()| s.bash(&[], "first-0", call()),
            BatchSize::PerIteration,
        )
    });
    s.watch("stop");
    g.bench_function("tacho Pre+Post --no-watch, unchanged", |b| {
        b.iter(|| s.bash(&["--no-watch"], "first-0", call()))
    });
    g.bench_function("tacho Pre+Post --no-watch, after 10 edits", |b| {
        b.iter_batched(
            || {
                round += 1;
                edit_files(&s.ws, &s.ten, round).unwrap();
            },
            |()| s.bash(&["--no-watch"], "first-0", call()),
            BatchSize::PerIteration,
        )
    });
    s.git();
    git_baseline(&mut g, &s, &mut round);
    g.finish();
}

/// The baseline of both groups: Git's own checkpoint of the same repository
/// (`git add -A && git write-tree`, private index), unchanged and after 10 edits.
fn git_baseline(g: &mut BenchmarkGroup<'_, WallTime>, s: &Setup, round: &mut u64) {
    g.bench_function(
        "git add -A && git write-tree (private index), unchanged",
        |b| b.iter(|| s.git()),
    );
    g.bench_function(
        "git add -A && git write-tree (private index), after 10 edits",
        |b| {
            b.iter_batched(
                || {
                    *round += 1;
                    edit_files(&s.ws, &s.ten, *round).unwrap();
                },
                |()| s.git(),
                BatchSize::PerIteration,
            )
        },
    );
}

fn snapshot_watched(c: &mut Criterion) {
    let s = Setup::new(if bench_mode() { 5_000 } else { 300 });
    assert!(!s.snapshot(), "no watcher yet");
    assert!(s.watch("start"));
    s.snapshot(); // takes the watcher's token
    let mut round = 0u64;
    let mut g = c.benchmark_group(format!(
        "snapshot_watched_{}",
        if bench_mode() { "5k" } else { "300" }
    ));
    g.sample_size(if bench_mode() { 40 } else { 10 });
    g.bench_function("tacho snapshot, watcher running, unchanged", |b| {
        b.iter(|| assert!(s.snapshot()))
    });
    g.bench_function("tacho snapshot, watcher running, after 10 edits", |b| {
        b.iter_batched(
            || {
                round += 1;
                edit_files(&s.ws, &s.ten, round).unwrap();
            },
            |()| assert!(s.snapshot()),
            BatchSize::PerIteration,
        )
    });
    s.watch("stop");
    s.git();
    git_baseline(&mut g, &s, &mut round);
    g.finish();
}

fn benches(c: &mut Criterion) {
    if !git_ok() {
        eprintln!("skipped: no git");
        return;
    }
    snapshot_watched(c);
    hook_bash(c);
}

criterion_group!(hook_watch, benches);
criterion_main!(hook_watch);
