//! What the hooks record under what real agents do: tool calls that overlap (Claude
//! Code runs tools in parallel), hooks killed halfway (the agent's timeout), and a
//! watched agent that turns `tacho record` or a long id against its own recording.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::PathBuf;
use std::process::Stdio;

use tacho_tests::{run, tacho};

struct Env {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    transcript: PathBuf,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let ws = dir.join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/a.txt"), "a\n").unwrap();
        std::fs::write(ws.join("src/b.txt"), "b\n").unwrap();
        let transcript = dir.join("t.jsonl");
        std::fs::write(&transcript, "").unwrap();
        Env {
            home: dir.join("home"),
            ws,
            transcript,
            _tmp: tmp,
        }
    }

    fn tacho(&self, args: &[&str]) -> (i32, String, String) {
        let mut c = tacho(&self.home);
        c.current_dir(&self.ws).args(args);
        run(c)
    }

    fn tacho_in(&self, args: &[&str], input: &str) -> (i32, String, String) {
        let mut c = tacho(&self.home);
        c.current_dir(&self.ws)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn payload(&self, session: &str, event: &str, extra: serde_json::Value) -> String {
        let mut v = serde_json::json!({
            "session_id": session,
            "cwd": self.ws.display().to_string(),
            "hook_event_name": event,
            "transcript_path": self.transcript.display().to_string(),
        });
        if let (Some(m), serde_json::Value::Object(x)) = (v.as_object_mut(), extra) {
            m.extend(x);
        }
        v.to_string()
    }

    /// Sends Claude Code's `event` to `tacho hook claude-code`, which must exit 0 and
    /// report no problem; returns its stdout.
    fn send(&self, session: &str, event: &str, extra: serde_json::Value) -> String {
        let (code, out, err) = self.tacho_in(
            &["hook", "claude-code"],
            &self.payload(session, event, extra),
        );
        assert_eq!(code, 0, "{err}");
        assert!(err.is_empty(), "{event}: {err}");
        out
    }

    fn verify(&self, session: &str) -> (i32, String) {
        let (code, out, err) = self.tacho(&["session", "replay", session, "--mode", "verify"]);
        (code, out + &err)
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let (code, out, err) = self.tacho(args);
        assert_eq!(code, 0, "tacho {args:?}: {out}{err}");
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    fn usage(&self, id: &str, tokens: u64) {
        let line = format!(
            "{{\"type\":\"assistant\",\"message\":{{\"id\":\"{id}\",\"usage\":{{\"input_tokens\":{tokens},\"output_tokens\":1}}}}}}\n"
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.transcript)
            .unwrap();
        std::io::Write::write_all(&mut f, line.as_bytes()).unwrap();
    }
}

fn pre(tool: &str, id: &str, input: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"tool_name": tool, "tool_use_id": id, "tool_input": input})
}

fn post(tool: &str, id: &str, input: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"tool_name": tool, "tool_use_id": id, "tool_input": input, "tool_response": {"stdout": "", "stderr": "", "interrupted": false}})
}

/// Claude Code runs tools in parallel: Pre A, Pre B, Post B, Post A. The overlapping
/// calls are one step (SPEC §13.2), so the record verifies, and rolling that step back
/// undoes both calls.
#[test]
fn overlapping_tool_calls_verify_and_roll_back_together() {
    let e = Env::new();
    let s = "par-1";
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let a_in = serde_json::json!({"command": "echo A >> src/a.txt"});
    let b_in = serde_json::json!({"file_path": e.ws.join("src/b.txt").display().to_string(), "old_string": "b", "new_string": "B"});
    e.send(s, "PreToolUse", pre("Bash", "A", a_in.clone()));
    e.send(s, "PreToolUse", pre("Edit", "B", b_in.clone()));
    std::fs::write(e.ws.join("src/b.txt"), "B\n").unwrap();
    e.send(s, "PostToolUse", post("Edit", "B", b_in));
    std::fs::write(e.ws.join("src/a.txt"), "a\nA\n").unwrap();
    e.send(s, "PostToolUse", post("Bash", "A", a_in));
    // A third call after both: a step of its own.
    let c_in = serde_json::json!({"command": "echo C > src/c.txt"});
    e.send(s, "PreToolUse", pre("Bash", "C", c_in.clone()));
    std::fs::write(e.ws.join("src/c.txt"), "C\n").unwrap();
    e.send(s, "PostToolUse", post("Bash", "C", c_in));
    e.send(s, "SessionEnd", serde_json::json!({"reason": "other"}));

    let (code, out) = e.verify(s);
    assert_eq!(code, 0, "{out}");
    let points = e.json(&["session", "rollback", s, "--list", "--json"]);
    let steps: Vec<u64> = points["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2], "{points}");
    // Undo step 2 (C only), then step 1 (A and B together).
    let (code, out, err) = e.tacho(&["session", "rollback", s, "--step", "2", "--yes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!e.ws.join("src/c.txt").exists());
    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/a.txt")).unwrap(),
        "a\nA\n"
    );
    let (code, out, err) = e.tacho(&["session", "rollback", s, "--step", "1", "--yes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/a.txt")).unwrap(),
        "a\n"
    );
    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/b.txt")).unwrap(),
        "b\n"
    );
}

/// Many hooks of one session at once, in every order the threads give: the record
/// still verifies with no finding, every call paired with its result.
#[test]
fn concurrent_hooks_of_one_session_verify() {
    let e = Env::new();
    let s = "par-many";
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    std::thread::scope(|scope| {
        for i in 0..16 {
            let e = &e;
            scope.spawn(move || {
                let id = format!("call-{i}");
                let input = serde_json::json!({"command": format!("echo {i}")});
                e.send(s, "PreToolUse", pre("Bash", &id, input.clone()));
                e.send(s, "PostToolUse", post("Bash", &id, input));
            });
        }
    });
    e.send(s, "SessionEnd", serde_json::json!({"reason": "other"}));
    let (code, out) = e.verify(s);
    assert_eq!(code, 0, "{out}");
    let (_, summary, _) = e.tacho(&["session", "replay", s, "--mode", "summary"]);
    assert_eq!(summary.matches("tool.result").count(), 16, "{summary}");
}

/// A hook killed by the agent's timeout after its events were committed and before
/// its state was written leaves a state that is valid JSON but stale: the next hook
/// sees that the log moved past the state's head and folds in what it missed, so
/// nothing is counted twice and steps stay in balance.
#[test]
fn a_stale_hook_state_is_caught_up_from_the_log() {
    let e = Env::new();
    let s = "stale-1";
    e.usage("m1", 10);
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let state = e.home.join("agents/claude-code/stale-1.json");
    let old = std::fs::read(&state).unwrap();
    // This hook's events are committed, but its state "was never written".
    e.usage("m2", 100);
    let a_in = serde_json::json!({"command": "true"});
    e.send(s, "PreToolUse", pre("Bash", "A", a_in.clone()));
    std::fs::write(&state, &old).unwrap();
    e.send(s, "PostToolUse", post("Bash", "A", a_in));
    e.usage("m3", 1000);
    e.send(s, "SessionEnd", serde_json::json!({"reason": "other"}));
    let (code, out) = e.verify(s);
    assert_eq!(code, 0, "{out}");
    let g = e.json(&["graph", s, "--format", "json"]);
    assert_eq!(
        g["tokens"]["in"].as_u64(),
        Some(1110),
        "each response once: {}",
        g["tokens"]
    );
}
