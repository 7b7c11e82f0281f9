//! A hook reads a bounded number of bytes of the log, whatever the session's length
//! (issue 31): the application's hook entry point driven over a store whose file
//! system counts what is read (`tacho_store::vfs::CountingFs`), in a session of about
//! 100 kB and one of about 12 MB — the prompt hook, a Bash call's PreToolUse and
//! PostToolUse (a full snapshot of the workspace) and the stop (the completion gate of
//! a session without a goal) read the same few kilobytes in both.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::Path;
use std::sync::Arc;

use tacho_app::agents::Agent;
use tacho_app::{Config, Notes, Tacho};
use tacho_store::vfs::{CountingFs, RealFs, Vfs};

#[derive(Default)]
struct Collected(std::sync::Mutex<Vec<String>>);

impl Notes for Collected {
    fn note(&self, text: &str) {
        self.0.lock().unwrap().push(text.to_owned());
    }
}

/// What one hook may read of the log: the stream's mark, its segment's header, last
/// commit frame and 4 KiB after it, the start of the session's first segment (its
/// workspace), the session index's appended records — none of which grows with the
/// session.
const HOOK_READ_BOUND: u64 = 16 * 1024;

fn payload(session: &str, ws: &Path, event: &str, extra: serde_json::Value) -> Vec<u8> {
    let mut p = serde_json::json!({
        "session_id": session,
        "transcript_path": ws.join("no-transcript.jsonl"),
        "cwd": ws,
        "hook_event_name": event,
    });
    if let (Some(m), serde_json::Value::Object(e)) = (p.as_object_mut(), extra) {
        m.extend(e);
    }
    p.to_string().into_bytes()
}

/// Runs one hook and returns the bytes of the log it read.
fn hook(t: &Tacho, counting: &CountingFs, p: &[u8]) -> u64 {
    counting.take_bytes_read();
    let a = t.hook(Agent::ClaudeCode, p);
    assert!(a.problems.is_empty(), "{:?}", a.problems);
    counting.take_bytes_read()
}

/// A session that the hooks recorded: started, then `results` Read calls whose
/// results are `size` bytes each.
fn grow(t: &Tacho, session: &str, ws: &Path, results: usize, size: usize) {
    let h = |event: &str, extra| {
        let a = t.hook(Agent::ClaudeCode, &payload(session, ws, event, extra));
        assert!(a.problems.is_empty(), "{:?}", a.problems);
    };
    h("SessionStart", serde_json::json!({}));
    let output = "z".repeat(size);
    for i in 0..results {
        let id = format!("r{i}");
        let input = serde_json::json!({"file_path": ws.join("a.txt")});
        h(
            "PreToolUse",
            serde_json::json!({"tool_name": "Read", "tool_input": input, "tool_use_id": id}),
        );
        h(
            "PostToolUse",
            serde_json::json!({"tool_name": "Read", "tool_input": input, "tool_use_id": id,
                "tool_response": {"file": {"content": output}}}),
        );
    }
}

#[test]
fn a_hook_reads_the_same_few_kilobytes_of_a_short_and_a_long_session() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    for i in 0..20 {
        std::fs::write(ws.join(format!("src/f{i}.rs")), format!("fn f{i}() {{}}\n")).unwrap();
    }
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let ws = ws.canonicalize().unwrap();
    // A Git repository, as users' are: the hooks read HEAD at every tool result to link
    // commits (SPEC.md §17.2), and must not read the session to know what it last saw.
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &["commit", "-q", "-m", "base"],
    ] {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}");
    }
    let counting = CountingFs::new(Arc::new(RealFs) as Arc<dyn Vfs>);
    let mut cfg = Config::from_env().unwrap();
    cfg.data_dir = dir.path().join("data");
    cfg.notes = Arc::new(Collected::default());
    cfg.vfs = Arc::new(counting.clone());
    let t = Tacho::open(cfg).unwrap();
    grow(&t, "short-1", &ws, 2, 50_000);
    grow(&t, "long-1", &ws, 60, 200_000);
    let log_bytes = |s: &str| -> u64 {
        t.segment_paths(s, None)
            .unwrap()
            .iter()
            .map(|seg| std::fs::metadata(&seg.path).unwrap().len())
            .sum()
    };
    assert!(log_bytes("short-1") < 200_000);
    assert!(log_bytes("long-1") > 12_000_000);
    let mut report = Vec::new();
    for session in ["short-1", "long-1"] {
        for round in 0..2 {
            let id = format!("b{round}");
            let bash = serde_json::json!({"command": "make"});
            let cases = [
                (
                    "prompt",
                    payload(
                        session,
                        &ws,
                        "UserPromptSubmit",
                        serde_json::json!({"prompt": format!("p{round}")}),
                    ),
                ),
                (
                    "Bash PreToolUse",
                    payload(
                        session,
                        &ws,
                        "PreToolUse",
                        serde_json::json!({"tool_name": "Bash", "tool_input": bash, "tool_use_id": id}),
                    ),
                ),
                (
                    "Bash PostToolUse",
                    payload(
                        session,
                        &ws,
                        "PostToolUse",
                        serde_json::json!({"tool_name": "Bash", "tool_input": bash, "tool_use_id": id,
                            "tool_response": {"stdout": "ok", "stderr": "", "interrupted": false}}),
                    ),
                ),
                (
                    "Stop",
                    payload(
                        session,
                        &ws,
                        "Stop",
                        serde_json::json!({"stop_hook_active": false}),
                    ),
                ),
            ];
            for (case, p) in cases {
                let read = hook(&t, &counting, &p);
                report.push(format!("{session} {case}: {read} bytes"));
                // A stop confirms the session's calls from the log (SPEC §3.1: not
                // from the hook state, a file the agent can edit): one pass over the
                // session, once a turn.
                let bound = match case {
                    "Stop" => HOOK_READ_BOUND + log_bytes(session),
                    _ => HOOK_READ_BOUND,
                };
                assert!(
                    read <= bound,
                    "{session} {case}: the hook read {read} bytes of the log"
                );
            }
        }
    }
    eprintln!("{}", report.join("\n"));
    // What the hooks appended is the session, whole and verified.
    let v = t.verify_log(None, &mut |_, _| {}).unwrap();
    assert!(v.findings.is_empty(), "{:?}", v.findings);
}
