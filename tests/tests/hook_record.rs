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

/// The watched agent has a shell and `tacho record`: it cannot end its own recorded
/// session (nor move its time back so that prune takes it). A session the hooks
/// record takes its events from them only; an event earlier than its session's start
/// is refused from any input; and a session ended behind the hooks' back (`tacho
/// session end`) is continued, not silenced.
#[test]
fn the_agent_cannot_silence_its_own_recording() {
    let e = Env::new();
    let s = "silence-1";
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let forged =
        "{\"type\":\"session.end\",\"reason\":\"completed\",\"ts\":\"2001-01-01T00:00:01Z\"}\n";
    let (code, out, err) = e.tacho_in(&["record", "--session", s], forged);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("recorded by tacho's claude-code hooks"),
        "{err}"
    );
    // Nor through a subagent's or a continuation's id.
    let (code, _, err) = e.tacho_in(&["record", "--session", "silence-1.agent-x"], forged);
    assert_ne!(code, 0, "{err}");
    // Recording goes on.
    let a_in = serde_json::json!({"command": "echo A >> src/a.txt"});
    e.send(s, "PreToolUse", pre("Bash", "A", a_in.clone()));
    e.send(s, "PostToolUse", post("Bash", "A", a_in));
    let (_, summary, _) = e.tacho(&["session", "replay", s, "--mode", "summary"]);
    assert!(summary.contains("tool.result"), "{summary}");
    assert!(!summary.contains("session.end"), "{summary}");
    let (code, out, err) = e.tacho(&["audit", "prune", "--days", "90"]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, list, _) = e.tacho(&["session", "list", "--json"]);
    assert!(list.contains(&format!("\"session\":\"{s}\"")), "{list}");

    // An outside session cannot end before it began, in one input or a later one.
    let start =
        "{\"type\":\"session.start\",\"session\":\"rec-1\",\"ts\":\"2026-11-20T09:00:00Z\"}\n";
    let early_end = "{\"type\":\"session.end\",\"session\":\"rec-1\",\"reason\":\"completed\",\"ts\":\"2026-11-20T08:59:59Z\"}\n";
    let (code, _, err) = e.tacho_in(&["record"], &format!("{start}{early_end}"));
    assert_ne!(code, 0);
    assert!(
        err.contains("line 2") && err.contains("earlier than the start"),
        "{err}"
    );
    let (code, _, err) = e.tacho_in(&["record"], start);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = e.tacho_in(&["record"], early_end);
    assert_ne!(code, 0);
    assert!(err.contains("earlier than the start"), "{err}");
    let end = early_end.replace("08:59:59", "09:00:01");
    let (code, _, err) = e.tacho_in(&["record"], &end);
    assert_eq!(code, 0, "{err}");

    // Ended behind the hooks' back: the next payload continues as `<id>.2`.
    let (code, out, err) = e.tacho(&["session", "end", s]);
    assert_eq!(code, 0, "{out}{err}");
    let b_in = serde_json::json!({"command": "echo B >> src/b.txt"});
    e.send(s, "PreToolUse", pre("Bash", "B", b_in.clone()));
    e.send(s, "PostToolUse", post("Bash", "B", b_in));
    let (_, summary, _) = e.tacho(&["session", "replay", "silence-1.2", "--mode", "summary"]);
    assert!(summary.contains("tool.result"), "{summary}");
    let (code, out) = e.verify(s);
    assert_eq!(code, 0, "{out}");
    let (code, out) = e.verify("silence-1.2");
    assert_eq!(code, 0, "{out}");
}

/// Session ids up to the SPEC's limit work whatever their case (a stream's directory
/// name spells each upper-case letter with two bytes), and ids derived from a long one
/// (a subagent's `<id>.<agent>`, a continuation's `<id>.2`) never collapse into it: a
/// SubagentStop ends the subagent, not the main session.
#[test]
fn long_session_ids_work_and_derived_ids_stay_apart() {
    let e = Env::new();
    for s in [
        "A".repeat(128),
        "Ab".repeat(64),
        format!("{}x", "z".repeat(126)),
    ] {
        e.send(&s, "SessionStart", serde_json::json!({"source": "startup"}));
        e.send(
            &s,
            "SubagentStart",
            serde_json::json!({"agent_id": "helper-1", "agent_type": "general"}),
        );
        let a_in = serde_json::json!({"command": "true"});
        let mut call = pre("Bash", "A", a_in.clone());
        call["agent_id"] = "helper-1".into();
        e.send(&s, "PreToolUse", call);
        let mut done = post("Bash", "A", a_in);
        done["agent_id"] = "helper-1".into();
        e.send(&s, "PostToolUse", done);
        e.send(
            &s,
            "SubagentStop",
            serde_json::json!({"agent_id": "helper-1"}),
        );
        e.send(
            &s,
            "UserPromptSubmit",
            serde_json::json!({"prompt": "go on"}),
        );
        let (code, out) = e.verify(&s);
        assert_eq!(code, 0, "{out}");
        let (_, summary, _) = e.tacho(&["session", "replay", &s, "--mode", "summary"]);
        assert!(
            !summary.contains("session.end"),
            "the main session goes on: {summary}"
        );
        assert!(summary.contains("prompt"), "{summary}");
        let (_, list, _) = e.tacho(&["session", "list", "--json"]);
        let children = list.matches(&format!("\"parent\":\"{s}\"")).count();
        assert_eq!(children, 1, "one subagent session: {list}");
        // `tacho record` takes such an id too, and a second input continues it.
        let id = format!("{}R", &s[..127]);
        let start = format!("{{\"type\":\"session.start\",\"session\":\"{id}\"}}\n");
        let (code, _, err) = e.tacho_in(&["record"], &start);
        assert_eq!(code, 0, "{err}");
        let more = format!("{{\"type\":\"agent.notice\",\"session\":\"{id}\",\"notice\":\"n\"}}\n");
        let (code, _, err) = e.tacho_in(&["record"], &more);
        assert_eq!(code, 0, "{err}");
        let (code, out) = e.verify(&id);
        assert_eq!(code, 0, "{out}");
    }
}

/// The registry (`Agent::ALL`) is the one list of agents: every agent in it is a value
/// of `tacho hook` and `tacho hooks install`, has its hook answered, and is listed by
/// `tacho hooks status` at every scope it has (and no other).
#[test]
fn every_agent_of_the_registry_is_on_the_command_line_and_in_hooks_status() {
    use tacho_app::agents::Agent;
    let e = Env::new();
    // A project's settings live in a Git work tree (outside one they are refused).
    tacho_tests::git::git(&e.ws, &["init", "-q"]);
    // Settings files under a home of the test's own.
    let home = e.home.join("user");
    std::fs::create_dir_all(&home).unwrap();
    let run = |args: &[&str], input: Option<&str>| {
        let mut c = tacho(&e.home);
        c.current_dir(&e.ws).env("HOME", &home).args(args);
        if let Some(input) = input {
            let mut f = tempfile::NamedTempFile::new().unwrap();
            std::io::Write::write_all(&mut f, input.as_bytes()).unwrap();
            c.stdin(std::fs::File::open(f.path()).unwrap());
        }
        run(c)
    };
    let (code, help, err) = run(&["hook", "--help"], None);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(&["hooks", "status", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let status: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let files = status["files"].as_array().unwrap();
    let mut listed = 0;
    for agent in Agent::ALL {
        let name = agent.name();
        assert!(
            help.contains(name),
            "{name} is not in `tacho hook --help`: {help}"
        );
        // Its hook runs and exits 0: by its name (the fast path) and its aliases
        // (through clap).
        let payload = e.payload(
            &format!("reg-{name}"),
            "SessionStart",
            serde_json::json!({}),
        );
        for word in std::iter::once(&name).chain(agent.aliases()) {
            assert_eq!(Agent::parse(word), Some(*agent));
            let (code, _, err) = run(&["hook", word], Some(&payload));
            assert_eq!(code, 0, "hook {word}: {err}");
            assert!(err.is_empty(), "hook {word}: {err}");
        }
        let scopes: Vec<&str> = files
            .iter()
            .filter(|f| f["agent"] == name)
            .map(|f| f["scope"].as_str().unwrap())
            .collect();
        let want: Vec<&str> = agent.scopes().iter().map(|s| s.name()).collect();
        assert_eq!(scopes, want, "{name} in `tacho hooks status`: {status}");
        listed += scopes.len();
        for scope in ["user", "project", "local"] {
            let args = [
                "hooks",
                "install",
                name,
                "--scope",
                scope,
                "--dry-run",
                "--json",
            ];
            let (code, out, err) = run(&args, None);
            if want.contains(&scope) {
                assert_eq!(code, 0, "{name} {scope}: {out}{err}");
            } else {
                assert_ne!(code, 0, "{name} {scope}: {out}");
                assert!(
                    err.contains(&format!("{name} has no {scope} scope")),
                    "{err}"
                );
            }
        }
    }
    assert_eq!(
        listed,
        files.len(),
        "an agent outside the registry: {status}"
    );
}

/// Issue 42 (15): payloads the agent pipes to `tacho hook` cannot grow
/// `logs/hooks.log` without bound nor put terminal control bytes in it: a parser's
/// message that quotes a 300 KB field is clipped, control characters replaced.
#[test]
fn the_hook_log_is_bounded_and_holds_no_control_bytes() {
    let home = tempfile::tempdir().unwrap();
    let field = format!("\u{1b}[2J\u{1b}]0;owned\u{7}{}", "A".repeat(300_000));
    let payload = serde_json::json!({"session_id": "s1", "hook_event_name": "Stop", "stop_hook_active": field}).to_string();
    for _ in 0..5 {
        let (code, _, err) = tacho_tests::run_input(
            {
                let mut c = tacho(home.path());
                c.args(["hook", "claude-code"]);
                c
            },
            &payload,
        );
        assert_eq!(code, 0);
        assert!(err.len() < 1_000, "{} bytes on stderr", err.len());
    }
    let log = std::fs::read(home.path().join("logs/hooks.log")).unwrap();
    assert!(log.len() < 5 * 5_000, "{} bytes", log.len());
    assert!(
        !log.iter().any(|b| b.is_ascii_control() && *b != b'\n'),
        "control bytes in the log"
    );
    assert_eq!(log.iter().filter(|b| **b == b'\n').count(), 5);
}

/// Issue 42 (8): hook files that never run. The agent narrows the matcher of a tool
/// event to `NoSuchTool`, shortens Stop's timeout to 0.001 s, and a cloned project's
/// `settings.local.json` sets `disableAllHooks`: `hooks status` no longer says
/// "installed" but why each handler cannot fire.
#[test]
fn hooks_status_says_when_installed_hooks_cannot_fire() {
    let e = Env::new();
    // A project's settings live in a Git work tree (outside one they are refused).
    tacho_tests::git::git(&e.ws, &["init", "-q"]);
    let home = e.home.join("user");
    std::fs::create_dir_all(&home).unwrap();
    let run = |args: &[&str]| {
        let mut c = tacho(&e.home);
        c.current_dir(&e.ws).env("HOME", &home).args(args);
        run(c)
    };
    let (code, out, err) = run(&["hooks", "install", "claude-code", "--scope", "project"]);
    assert_eq!(code, 0, "{out}{err}");
    let file = e.ws.join(".claude/settings.json");
    let status = |scope: &str| {
        let (code, out, err) = run(&["hooks", "status", "--json"]);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["agent"] == "claude-code" && f["scope"] == scope)
            .cloned()
            .unwrap()
    };
    assert_eq!(status("project")["cannot_fire"], serde_json::json!([]));
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    v["hooks"]["PreToolUse"][0]["matcher"] = "NoSuchTool".into();
    v["hooks"]["Stop"][0]["hooks"][0]["timeout"] = 0.001.into();
    std::fs::write(&file, v.to_string()).unwrap();
    std::fs::write(
        e.ws.join(".claude/settings.local.json"),
        r#"{"disableAllHooks": true}"#,
    )
    .unwrap();
    let s = status("project");
    let why: Vec<&str> = s["cannot_fire"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert!(
        why.iter()
            .any(|w| w.starts_with("PreToolUse: matcher `NoSuchTool`")),
        "{why:?}"
    );
    assert!(
        why.iter().any(|w| w.starts_with("Stop: timeout 0.001")),
        "{why:?}"
    );
    assert!(
        why.iter().any(
            |w| w.contains("`disableAllHooks` is true in") && w.contains("settings.local.json")
        ),
        "{why:?}"
    );
    let (_, text, _) = run(&["hooks", "status"]);
    assert!(text.contains("installed, but cannot fire"), "{text}");
    // Every agent's hook file, of every scope, is one risk names when a session edits
    // it (`agent_hooks_edited`).
    let (_, out, _) = run(&["hooks", "status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for f in v["files"].as_array().unwrap() {
        let path = f["file"].as_str().unwrap();
        let probe = if path.ends_with("hooks") {
            format!("{path}/any")
        } else {
            path.to_owned()
        };
        assert!(
            tacho_projections::is_agent_hook_file(&probe),
            "{} {}: {probe} is not among risk's agent hook files",
            f["agent"],
            f["scope"]
        );
    }
    assert!(!tacho_projections::is_agent_hook_file("src/settings.json"));
    // A session whose agent edited its hook file from its shell is flagged.
    let session = "ses_hookedit";
    let lines = [
        serde_json::json!({"type": "session.start", "session": session, "workspace": e.ws}),
        serde_json::json!({"type": "file.edit", "session": session, "path": ".claude/settings.local.json", "op": "create"}),
    ];
    let mut c = tacho(&e.home);
    c.args(["record"]);
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let (code, _, err) = tacho_tests::run_input(c, &input);
    assert_eq!(code, 0, "{err}");
    let (_, risk, _) = run(&["risk", session, "--json"]);
    let risk: serde_json::Value = serde_json::from_str(risk.trim()).unwrap();
    assert!(
        risk["factors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["id"] == "agent_hooks_edited"),
        "{risk:#}"
    );
}

/// Issue 43: a read-only call before the session's first step (Claude Code's `Read`,
/// Qwen Code's `read_file`) lands in an implicit step numbered 1, like the first
/// recorded step after it. What the shell then changed in step 1 belongs to the
/// recorded step — its rollback point lists the files — never to the read.
#[test]
fn changes_of_the_first_step_after_a_read_are_that_steps() {
    let e = Env::new();
    let s = "read-1";
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let file = e.ws.join("src/a.txt").display().to_string();
    let read = serde_json::json!({"file_path": file});
    e.send(s, "PreToolUse", pre("Read", "r1", read.clone()));
    e.send(s, "PostToolUse", post("Read", "r1", read));
    let shell = serde_json::json!({"command": "echo more >> src/a.txt"});
    e.send(s, "PreToolUse", pre("Bash", "b1", shell.clone()));
    std::fs::write(e.ws.join("src/a.txt"), "a\nmore\n").unwrap();
    e.send(s, "PostToolUse", post("Bash", "b1", shell));
    let points = e.json(&["session", "rollback", s, "--list", "--json"]);
    let text = points.to_string();
    let steps: Vec<&serde_json::Value> = points["points"]
        .as_array()
        .unwrap_or_else(|| panic!("{text}"))
        .iter()
        .collect();
    assert_eq!(steps.len(), 1, "{text}");
    assert_eq!(steps[0]["step"], 1, "{text}");
    assert_eq!(
        steps[0]["files"],
        serde_json::json!(["src/a.txt"]),
        "{text}"
    );
}

/// A Codex session driven through `tacho hook codex`, with its rollout written by the
/// test as Codex writes it.
struct Codex {
    e: Env,
    session: &'static str,
    rollout: PathBuf,
}

impl Codex {
    fn new(session: &'static str) -> Codex {
        let e = Env::new();
        let rollout = e.transcript.clone();
        let c = Codex {
            e,
            session,
            rollout,
        };
        c.send("SessionStart", serde_json::json!({"source": "startup"}));
        c
    }

    fn send(&self, event: &str, extra: serde_json::Value) {
        let (code, _, err) = self.e.tacho_in(
            &["hook", "codex"],
            &self.e.payload(self.session, event, extra),
        );
        assert_eq!(code, 0, "{event}: {err}");
    }

    fn roll(&self, path: &std::path::Path, item: serde_json::Value) {
        let line = serde_json::json!({"timestamp": "2026-12-07T00:00:00Z", "type": "response_item", "payload": item});
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        std::io::Write::write_all(&mut f, format!("{line}\n").as_bytes()).unwrap();
    }

    fn call_line(&self, id: &str, cmd: &str) {
        let args = serde_json::json!({"cmd": cmd}).to_string();
        self.roll(
            &self.rollout,
            serde_json::json!({"type": "function_call", "name": "exec_command", "arguments": args, "call_id": id}),
        );
    }

    fn output_line(&self, path: &std::path::Path, id: &str, code: i32) {
        self.roll(
            path,
            serde_json::json!({"type": "function_call_output", "call_id": id, "output": format!("Process exited with code {code}\nOutput:\n")}),
        );
    }

    fn bash(&self, event: &str, id: &str, cmd: &str, extra: serde_json::Value) {
        let mut v = serde_json::json!({"tool_name": "Bash", "tool_input": {"command": cmd}, "tool_use_id": id, "tool_response": ""});
        if let (Some(m), serde_json::Value::Object(x)) = (v.as_object_mut(), extra) {
            m.extend(x);
        }
        self.send(event, v);
    }

    fn risk(&self) -> serde_json::Value {
        self.e.json(&["risk", self.session, "--json"])
    }
}

fn factor<'a>(risk: &'a serde_json::Value, id: &str) -> Option<&'a str> {
    risk["factors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .map(|f| f["evidence"].as_str().unwrap_or(""))
}

/// Issue 42 (9), red team: the agent forges a real call's result. Its real test run
/// fails; from inside it, it pipes a payload naming a rollout of its own that says the
/// run exited 0 (Codex's results come from its rollout, written after the hook). Only
/// the session's own rollout is read: the run is recorded failed, and the payload that
/// named another is shown.
#[test]
fn a_forged_rollout_named_by_a_piped_payload_is_never_read() {
    let c = Codex::new("cx-forge");
    c.call_line("call_3", "python3 -m pytest -q");
    c.bash(
        "PreToolUse",
        "call_3",
        "python3 -m pytest -q",
        serde_json::json!({}),
    );
    let fake = c.e.home.parent().unwrap().join("fake-rollout.jsonl");
    c.output_line(&fake, "call_3", 0);
    c.send(
        "UserPromptSubmit",
        serde_json::json!({"prompt": "", "transcript_path": fake.display().to_string()}),
    );
    c.bash(
        "PostToolUse",
        "call_3",
        "python3 -m pytest -q",
        serde_json::json!({}),
    );
    c.output_line(&c.rollout, "call_3", 1);
    c.send("Stop", serde_json::json!({"stop_hook_active": false}));
    let risk = c.risk();
    assert_eq!(risk["verified"], false, "{risk:#}");
    assert!(factor(&risk, "verification_failed").is_some(), "{risk:#}");
    let acted = factor(&risk, "agent_acted_on_tacho").unwrap_or_else(|| panic!("{risk:#}"));
    assert!(acted.contains("fake-rollout.jsonl"), "{acted}");
}

/// Issue 42 (9), red team: the agent pipes a made-up passing test run, then edits the
/// hook state file (or deletes it) so that nothing is left waiting for confirmation.
/// At the stop the calls are taken from the log and the rollout read whole: the
/// made-up call is unconfirmed all the same.
#[test]
fn a_made_up_call_is_unconfirmed_whatever_the_hook_state_says() {
    for tamper in ["edit", "delete"] {
        let c = Codex::new(if tamper == "edit" {
            "cx-edit"
        } else {
            "cx-delete"
        });
        c.call_line("call_1", "echo hi");
        c.bash("PreToolUse", "call_1", "echo hi", serde_json::json!({}));
        c.output_line(&c.rollout, "call_1", 0);
        c.bash("PostToolUse", "call_1", "echo hi", serde_json::json!({}));
        c.call_line("call_2", "sh pipe.sh");
        c.bash("PreToolUse", "call_2", "sh pipe.sh", serde_json::json!({}));
        // From inside call_2: a made-up pair with a result of its own.
        c.bash(
            "PreToolUse",
            "call_fake",
            "python3 -m pytest -q",
            serde_json::json!({}),
        );
        c.bash(
            "PostToolUse",
            "call_fake",
            "python3 -m pytest -q",
            serde_json::json!({"tool_response": "1 passed"}),
        );
        let state = c.e.home.join(format!("agents/codex/{}.json", c.session));
        assert!(state.exists(), "{}", state.display());
        if tamper == "edit" {
            let mut v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
            v["unconfirmed"] = serde_json::json!({});
            v["named_calls"] = serde_json::json!(["call_fake"]);
            std::fs::write(&state, v.to_string()).unwrap();
        } else {
            std::fs::remove_file(&state).unwrap();
        }
        c.output_line(&c.rollout, "call_2", 0);
        c.bash("PostToolUse", "call_2", "sh pipe.sh", serde_json::json!({}));
        c.send("Stop", serde_json::json!({"stop_hook_active": false}));
        let risk = c.risk();
        assert_eq!(risk["verified"], false, "{tamper}: {risk:#}");
        if tamper == "delete" {
            // The state held the made-up call's result, waiting for the rollout: lost
            // with it, so the call never ended and counts for nothing.
            let runs = risk["verification_runs"].to_string();
            assert!(!runs.contains("pytest"), "{risk:#}");
            continue;
        }
        let f = factor(&risk, "calls_unconfirmed").unwrap_or_else(|| panic!("{tamper}: {risk:#}"));
        assert!(f.contains("call_fake"), "{tamper}: {f}");
        assert!(
            !f.contains("call_1") && !f.contains("call_2"),
            "{tamper}: {f}"
        );
    }
}

/// Issue 43: an agent that writes its last reply after its last hook (Qwen Code) has
/// its session's end held back until its transcript stopped growing, recorded by the
/// process the stop hook leaves behind. So for every turn: the second, recorded as the
/// continuation `<id>.2` (its hook state stays under the first's id), ends too.
#[test]
fn every_turn_of_an_agent_that_writes_late_ends() {
    let e = Env::new();
    let s = "late-1";
    let send = |event: &str, extra: serde_json::Value| {
        let (code, _, err) = e.tacho_in(&["hook", "qwen-code"], &e.payload(s, event, extra));
        assert_eq!(code, 0, "{event}: {err}");
    };
    let ended = |session: &str| {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (_, out, _) = e.tacho(&["session", "show", session, "--json"]);
            if out.contains("\"status\":\"completed\"") {
                return true;
            }
            if std::time::Instant::now() > until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    send("SessionStart", serde_json::json!({"source": "startup"}));
    send("UserPromptSubmit", serde_json::json!({"prompt": "first"}));
    send("Stop", serde_json::json!({"stop_hook_active": false}));
    assert!(ended(s), "the first turn ended");
    send("UserPromptSubmit", serde_json::json!({"prompt": "second"}));
    send("Stop", serde_json::json!({"stop_hook_active": false}));
    assert!(ended(&format!("{s}.2")), "the second turn ended");
}

/// Review: a made-up call whose id holds a space (`"fake 1"`) is recorded unconfirmed
/// under the one-word id the record uses (`fake_1`), so its run never counts as
/// verification.
#[test]
fn a_call_id_with_a_space_is_unconfirmed_all_the_same() {
    let e = Env::new();
    let s = "space-1";
    let line = serde_json::json!({"type": "assistant", "message": {"id": "m1", "role": "assistant",
        "content": [{"type": "tool_use", "id": "real_1", "name": "Bash", "input": {"command": "ls"}}],
        "usage": {"input_tokens": 1, "output_tokens": 1}}});
    std::fs::write(&e.transcript, format!("{line}\n")).unwrap();
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let ls = serde_json::json!({"command": "ls"});
    e.send(s, "PreToolUse", pre("Bash", "real_1", ls.clone()));
    e.send(s, "PostToolUse", post("Bash", "real_1", ls));
    let pytest = serde_json::json!({"command": "python3 -m pytest -q"});
    e.send(s, "PreToolUse", pre("Bash", "fake 1", pytest.clone()));
    e.send(s, "PostToolUse", post("Bash", "fake 1", pytest));
    e.send(s, "Stop", serde_json::json!({"stop_hook_active": false}));
    let risk = e.json(&["risk", s, "--json"]);
    let text = risk.to_string();
    assert!(text.contains("call fake_1 (Bash"), "{risk:#}");
    assert!(!text.contains("pytest\",\"passed\":true"), "{risk:#}");
    assert_eq!(risk["verified"], false, "{risk:#}");
}

/// Issue 47 (17): Claude Code's `TodoWrite` (its input as Claude Code 2.x sends it)
/// is recorded as the call and, right after it, the list it wrote (`todo.update`);
/// the graph shows the last list, and the record verifies.
#[test]
fn a_todo_tools_list_is_recorded_and_shown() {
    let e = Env::new();
    let s = "todo-1";
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let todos = |second: &str| {
        serde_json::json!({"todos": [
            {"content": "Read the code", "status": "completed", "activeForm": "Reading the code"},
            {"content": "Fix the bug", "status": second, "activeForm": "Fixing the bug"}
        ]})
    };
    e.send(
        s,
        "PreToolUse",
        pre("TodoWrite", "t1", todos("in_progress")),
    );
    e.send(
        s,
        "PostToolUse",
        post("TodoWrite", "t1", todos("in_progress")),
    );
    e.send(s, "PreToolUse", pre("TodoWrite", "t2", todos("completed")));
    e.send(
        s,
        "PostToolUse",
        post("TodoWrite", "t2", todos("completed")),
    );
    let (code, dump, err) = e.tacho(&["log", "dump", s, "--json"]);
    assert_eq!(code, 0, "{err}");
    let kinds: Vec<String> = dump
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some(v["kind"].as_str()?.to_string()))
        .filter(|k| k == "tool.call" || k == "todo.update")
        .collect();
    assert_eq!(
        kinds,
        ["tool.call", "todo.update", "tool.call", "todo.update"],
        "{dump}"
    );
    let g = e.json(&["graph", s, "--format", "json"]);
    assert_eq!(
        g["todos"]["items"],
        serde_json::json!([
            {"content": "Read the code", "status": "completed"},
            {"content": "Fix the bug", "status": "completed"}
        ]),
        "{g}"
    );
    let (code, out) = e.verify(s);
    assert_eq!(code, 0, "{out}");
}

/// Claude Code 2.1.17 on: tasks created one by one, then updated by id, recorded as
/// the whole list each time — also after the hook's state file is lost (the list and
/// its numbering are folded again from the log). The task tools take no snapshot.
#[test]
fn claude_codes_task_tools_are_followed_across_a_lost_hook_state() {
    let e = Env::new();
    let s = "tasks-1";
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    for (id, subject) in [("c1", "Add the sampler"), ("c2", "Wire it up")] {
        let input = serde_json::json!({"subject": subject, "description": "…", "activeForm": "…"});
        e.send(s, "PreToolUse", pre("TaskCreate", id, input.clone()));
        e.send(s, "PostToolUse", post("TaskCreate", id, input));
    }
    for f in std::fs::read_dir(e.home.join("agents/claude-code")).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let update = serde_json::json!({"taskId": "2", "status": "completed"});
    e.send(s, "PreToolUse", pre("TaskUpdate", "u1", update.clone()));
    e.send(s, "PostToolUse", post("TaskUpdate", "u1", update));
    let create = serde_json::json!({"subject": "Third"});
    e.send(s, "PreToolUse", pre("TaskCreate", "c3", create.clone()));
    e.send(s, "PostToolUse", post("TaskCreate", "c3", create));
    let g = e.json(&["graph", s, "--format", "json"]);
    assert_eq!(
        g["todos"]["items"],
        serde_json::json!([
            {"content": "Add the sampler", "status": "pending", "id": "1"},
            {"content": "Wire it up", "status": "completed", "id": "2"},
            {"content": "Third", "status": "pending", "id": "3"}
        ]),
        "{g}"
    );
    assert!(g["snapshots"].as_array().map_or(0, Vec::len) <= 1, "{g}");
    let (code, out) = e.verify(s);
    assert_eq!(code, 0, "{out}");
}

/// Issue 46 (5): a change the user makes during a turn, between calls that snapshot
/// only the file they edit, is seen at the turn's end (a full snapshot at `Stop`, with
/// no watcher) and listed apart as a change no tool call made — where before no
/// snapshot ever held it.
#[test]
fn a_users_change_between_edit_calls_is_seen_at_the_turns_end() {
    let e = Env::new();
    let s = "user-1";
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let a = e.ws.join("src/a.txt").display().to_string();
    let edit = serde_json::json!({"file_path": a, "old_string": "a", "new_string": "A"});
    e.send(s, "PreToolUse", pre("Edit", "e1", edit.clone()));
    std::fs::write(e.ws.join("src/a.txt"), "A\n").unwrap();
    e.send(s, "PostToolUse", post("Edit", "e1", edit));
    // The user, between two calls of the agent.
    std::fs::write(e.ws.join("src/b.txt"), "the user's\n").unwrap();
    let edit = serde_json::json!({"file_path": a, "old_string": "A", "new_string": "AA"});
    e.send(s, "PreToolUse", pre("Edit", "e2", edit.clone()));
    std::fs::write(e.ws.join("src/a.txt"), "AA\n").unwrap();
    e.send(s, "PostToolUse", post("Edit", "e2", edit));
    e.send(s, "Stop", serde_json::json!({"stop_hook_active": false}));
    let g = e.json(&["graph", s, "--format", "json"]);
    let unclaimed: Vec<&str> = g["unclaimed"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|u| u["files"].as_array().into_iter().flatten())
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(unclaimed, ["src/b.txt"], "{g}");
    assert!(
        g["files"].get("src/b.txt").is_none(),
        "the user's change is not the session's: {g}"
    );
    // A whole rollback names it as a conflict instead of taking it back, unless forced.
    let plan = e.json(&["session", "rollback", s, "--dry-run", "--json"]);
    let planned: Vec<&str> = plan["plan"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["path"].as_str())
        .collect();
    assert_eq!(planned, ["src/a.txt"], "{plan}");
    let conflict = &plan["conflicts"][0];
    assert_eq!(conflict["path"], "src/b.txt", "{plan}");
    assert_eq!(conflict["forceable"], true, "{plan}");
    assert!(
        conflict["reason"]
            .as_str()
            .is_some_and(|r| r.contains("changed by no tool call of the session")),
        "{plan}"
    );
    let forced = e.json(&["session", "rollback", s, "--dry-run", "--force", "--json"]);
    assert_eq!(forced["plan"].as_array().map(Vec::len), Some(2), "{forced}");
}

/// A change the user makes after the agent's last turn, before the session ends, is
/// seen too: the session's end takes a full snapshot (before its end event), so the
/// change is listed apart, not met first by a rollback as a plain conflict.
#[test]
fn a_users_change_after_the_last_turn_is_seen_at_the_sessions_end() {
    let e = Env::new();
    let s = "user-2";
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let a = e.ws.join("src/a.txt").display().to_string();
    let edit = serde_json::json!({"file_path": a, "old_string": "a", "new_string": "A"});
    e.send(s, "PreToolUse", pre("Edit", "e1", edit.clone()));
    std::fs::write(e.ws.join("src/a.txt"), "A\n").unwrap();
    e.send(s, "PostToolUse", post("Edit", "e1", edit));
    e.send(s, "Stop", serde_json::json!({"stop_hook_active": false}));
    // The user, after the agent's last turn.
    std::fs::write(e.ws.join("src/c.txt"), "the user's, later\n").unwrap();
    e.send(
        s,
        "SessionEnd",
        serde_json::json!({"reason": "prompt_input_exit"}),
    );
    let g = e.json(&["graph", s, "--format", "json"]);
    let unclaimed: Vec<&str> = g["unclaimed"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|u| u["files"].as_array().into_iter().flatten())
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(unclaimed, ["src/c.txt"], "{g}");
    assert!(g["files"].get("src/c.txt").is_none(), "{g}");
    // The end's snapshot comes right before the end, which stays the last event.
    let (code, jsonl, err) = e.tacho(&["audit", "export", s]);
    assert_eq!(code, 0, "{err}");
    let kinds: Vec<String> = jsonl
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| match v["event"]["reason"].as_str() {
            Some(r) => format!("{}:{r}", v["type"].as_str().unwrap_or("?")),
            None => v["type"].as_str().unwrap_or("?").to_string(),
        })
        .collect();
    let n = kinds.len();
    assert!(n > 2, "{jsonl}");
    assert_eq!(
        kinds[n - 2..],
        ["snapshot.taken:final", "session.end:completed"],
        "{kinds:?}"
    );
    let plan = e.json(&["session", "rollback", s, "--dry-run", "--json"]);
    let conflict = &plan["conflicts"][0];
    assert_eq!(conflict["path"], "src/c.txt", "{plan}");
    assert!(
        conflict["reason"]
            .as_str()
            .is_some_and(|r| r.contains("changed by no tool call of the session")),
        "{plan}"
    );
}

/// Red team: the user removes a directory holding a 0600 file between turns, then the
/// agent writes a file of that name. The edit's targeted snapshots drop the directory
/// from the tree but keep its file's record in the modes entry, so tacho records a
/// snapshot it then refuses to read ("its modes entry names "cfg/secret", which is not
/// a file of it"): no rollback of the session can be planned any more.
#[test]
fn a_directory_replaced_by_a_written_file_leaves_the_session_rollbackable() {
    use std::os::unix::fs::PermissionsExt;
    let e = Env::new();
    let s = "redteam-dir";
    std::fs::create_dir(e.ws.join("cfg")).unwrap();
    std::fs::write(e.ws.join("cfg/secret"), "TOKEN=1\n").unwrap();
    std::fs::set_permissions(
        e.ws.join("cfg/secret"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    // The user, while the agent waits.
    std::fs::remove_dir_all(e.ws.join("cfg")).unwrap();
    let file = e.ws.join("cfg").display().to_string();
    let write = serde_json::json!({"file_path": file, "content": "plain"});
    e.send(s, "PreToolUse", pre("Write", "w1", write.clone()));
    std::fs::write(e.ws.join("cfg"), "plain").unwrap();
    e.send(s, "PostToolUse", post("Write", "w1", write));
    e.send(s, "Stop", serde_json::json!({"stop_hook_active": false}));
    e.send(
        s,
        "SessionEnd",
        serde_json::json!({"reason": "prompt_input_exit"}),
    );
    let (code, out, err) = e.tacho(&["session", "rollback", s, "--dry-run", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("modes entry"), "{err}");
}

/// `session rollback --step N --conversation` with Claude Code's hooks and a transcript
/// of its shape in `CLAUDE_CONFIG_DIR` (the real CLI's run is in `agents.rs`): the dry
/// run writes nothing; a fork before a call that shares its model response with an
/// earlier step's is refused (exit 2) before any file is touched; the fork before the
/// shell step holds the edit and its result, not the shell call, every line the new
/// session's, beside the original, which is unchanged; a session file reached through
/// a linked project directory is never used.
#[test]
fn a_conversation_is_forked_before_a_step_and_never_across_a_shared_response() {
    let e = Env::new();
    let s = "5e551011-aaaa-4bbb-8ccc-00000000f0c1";
    let cfg = e.home.with_file_name("claude-config");
    let project = cfg.join("projects").join("-ws");
    std::fs::create_dir_all(&project).unwrap();
    let line = |v: serde_json::Value| v.to_string() + "\n";
    let original: String = [
        line(serde_json::json!({"type": "user", "sessionId": s, "uuid": "u1", "message": {"role": "user", "content": "Fix it"}})),
        line(serde_json::json!({"type": "assistant", "sessionId": s, "uuid": "a1", "message": {"id": "msg_1", "role": "assistant", "content": [{"type": "tool_use", "id": "e1", "name": "Edit", "input": {}}]}})),
        line(serde_json::json!({"type": "user", "sessionId": s, "uuid": "u2", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "e1", "content": "ok"}]}})),
        line(serde_json::json!({"type": "assistant", "sessionId": s, "uuid": "a2", "message": {"id": "msg_2", "role": "assistant", "content": [{"type": "tool_use", "id": "b1", "name": "Bash", "input": {}}]}})),
        line(serde_json::json!({"type": "assistant", "sessionId": s, "uuid": "a3", "message": {"id": "msg_2", "role": "assistant", "content": [{"type": "tool_use", "id": "b2", "name": "Bash", "input": {}}]}})),
        line(serde_json::json!({"type": "user", "sessionId": s, "uuid": "u3", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b1", "content": ""}, {"type": "tool_result", "tool_use_id": "b2", "content": ""}]}})),
    ]
    .concat();
    let transcript = project.join(format!("{s}.jsonl"));
    std::fs::write(&transcript, &original).unwrap();

    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let a = e.ws.join("src/a.txt").display().to_string();
    let edit = serde_json::json!({"file_path": a, "old_string": "a", "new_string": "A"});
    e.send(s, "PreToolUse", pre("Edit", "e1", edit.clone()));
    std::fs::write(e.ws.join("src/a.txt"), "A\n").unwrap();
    e.send(s, "PostToolUse", post("Edit", "e1", edit));
    for (id, file) in [("b1", "one.txt"), ("b2", "two.txt")] {
        let cmd = serde_json::json!({"command": format!("echo x > {file}")});
        e.send(s, "PreToolUse", pre("Bash", id, cmd.clone()));
        std::fs::write(e.ws.join(file), "x\n").unwrap();
        e.send(s, "PostToolUse", post("Bash", id, cmd));
    }
    e.send(s, "Stop", serde_json::json!({"stop_hook_active": false}));
    e.send(
        s,
        "SessionEnd",
        serde_json::json!({"reason": "prompt_input_exit"}),
    );
    let g = e.json(&["graph", s, "--format", "json"]);
    let step_of = |call: &str| {
        g["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|st| st["tools"][0]["call_id"] == call)
            .unwrap_or_else(|| panic!("{call}: {g}"))["number"]
            .as_u64()
            .unwrap()
            .to_string()
    };
    let (b1, b2) = (step_of("b1"), step_of("b2"));
    let rollback = |args: &[&str]| {
        let mut c = tacho(&e.home);
        c.current_dir(&e.ws)
            .env("CLAUDE_CONFIG_DIR", &cfg)
            .args(["session", "rollback", s])
            .args(args);
        run(c)
    };
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&project)
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    // The dry run: what it would write, nothing written.
    let (code, out, err) = rollback(&["--step", &b1, "--conversation", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{err}");
    let dry: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(dry["conversation"]["written"], false, "{dry}");
    assert_eq!(listing(), [format!("{s}.jsonl")]);
    // b2 was made in one response with b1: cut before that response, the fork would
    // lose b1's call while the files keep its change. Refused, nothing touched.
    let (code, _, err) = rollback(&["--step", &b2, "--conversation", "--yes"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("fork it before step {b1}")), "{err}");
    assert!(e.ws.join("two.txt").exists(), "nothing rolled back");
    assert_eq!(listing(), [format!("{s}.jsonl")]);
    // Before the shell step: the files and the conversation.
    let (code, out, err) = rollback(&["--step", &b1, "--conversation", "--yes", "--json"]);
    assert_eq!(code, 0, "{err}");
    let done: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let fork = &done["conversation"];
    assert_eq!(fork["written"], true, "{done}");
    assert!(!e.ws.join("one.txt").exists() && !e.ws.join("two.txt").exists());
    assert_eq!(std::fs::read_to_string(&transcript).unwrap(), original);
    let new_id = fork["session"].as_str().unwrap();
    let forked = std::fs::read_to_string(project.join(format!("{new_id}.jsonl"))).unwrap();
    let kept: Vec<serde_json::Value> = forked
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(kept.len(), 3, "{forked}");
    assert!(kept.iter().all(|v| v["sessionId"] == new_id), "{forked}");
    assert!(
        forked.contains("\"tool_use_id\":\"e1\"") && !forked.contains("\"b1\""),
        "{forked}"
    );
    use std::os::unix::fs::PermissionsExt;
    let bits = std::fs::metadata(project.join(format!("{new_id}.jsonl")))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(bits, 0o600);
    assert_eq!(
        listing().len(),
        2,
        "no temporary file left: {:?}",
        listing()
    );
    assert!(
        fork["resume"]
            .as_str()
            .unwrap()
            .contains(&format!("claude --resume {new_id}"))
    );

    // A session file reached through a linked project directory is not used.
    let elsewhere = e.home.with_file_name("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::rename(&transcript, elsewhere.join(format!("{s}.jsonl"))).unwrap();
    std::os::unix::fs::symlink(&elsewhere, cfg.join("projects").join("linked")).unwrap();
    let (code, _, err) = rollback(&["--step", &b1, "--conversation", "--dry-run"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("keeps no session file"), "{err}");
}

/// An Edit's result carries the whole file as it was before the edit (Claude Code's
/// `originalFile`, on every edit): stored once, as a reference to the file the call's
/// before-snapshot holds, and given back byte for byte where the output is replayed. A
/// copy that is not exactly the snapshot's file stays in the record whole.
#[test]
fn a_whole_file_in_an_edit_result_is_stored_once_and_replayed_byte_for_byte() {
    let e = Env::new();
    let s = "f11ec09e-aaaa-4bbb-8ccc-00000000f0c1";
    // Quotes, backslashes, tabs, a control character and non-ASCII: JSON escapes all.
    let big: String = (0..3000)
        .map(|i| format!("line {i} \"q\" \\ \t \u{1} é\n"))
        .collect();
    std::fs::write(e.ws.join("src/a.txt"), &big).unwrap();
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let a = e.ws.join("src/a.txt").display().to_string();
    let mut responses = Vec::new();
    for (id, old, new, original) in [
        ("e1", "line 5 ", "LINE 5 ", big.clone()),
        // The agent's copy is not the file the snapshot holds: kept whole.
        ("e2", "line 6 ", "LINE 6 ", big.replace("line 7 ", "other ")),
    ] {
        let edit = serde_json::json!({"file_path": a, "old_string": old, "new_string": new});
        e.send(s, "PreToolUse", pre("Edit", id, edit.clone()));
        let now = std::fs::read_to_string(e.ws.join("src/a.txt")).unwrap();
        std::fs::write(e.ws.join("src/a.txt"), now.replacen(old, new, 1)).unwrap();
        let resp = serde_json::json!({
            "filePath": a, "oldString": old, "newString": new, "originalFile": original,
            "structuredPatch": [{"oldStart": 6, "oldLines": 1, "newStart": 6, "newLines": 1,
                                 "lines": [format!("-{old}"), format!("+{new}")]}],
            "userModified": false, "replaceAll": false,
        });
        e.send(
            s,
            "PostToolUse",
            serde_json::json!({"tool_name": "Edit", "tool_use_id": id, "tool_input": edit,
                               "tool_response": resp}),
        );
        responses.push((id, resp.to_string()));
    }
    // What the log holds: the reference for e1, the whole copy for e2.
    let stored = |id: &str| stored_and_expected(&e, s, id).0;
    let e1 = stored("e1");
    assert!(e1.contains("\"tacho:file\"") && e1.len() < 2000, "{e1}");
    let e2 = stored("e2");
    assert!(
        e2 == responses[1].1,
        "e2's copy differs from the file: kept whole"
    );

    // A shell that prints e1's record (the agent copying it from the log): its output
    // is its own, never expanded into the file.
    let cmd = serde_json::json!({"command": "cat copied.json"});
    e.send(s, "PreToolUse", pre("Bash", "b1", cmd.clone()));
    e.send(
        s,
        "PostToolUse",
        serde_json::json!({"tool_name": "Bash", "tool_use_id": "b1", "tool_input": cmd,
                           "tool_response": {"stdout": e1, "stderr": "", "interrupted": false}}),
    );
    responses.push(("b1", e1.clone()));
    e.send(s, "Stop", serde_json::json!({"stop_hook_active": false}));
    assert_eq!(e.verify(s).0, 0, "{}", e.verify(s).1);

    // Replayed as the agent gave it, byte for byte.
    for (id, original) in &responses {
        let (_, out) = stored_and_expected(&e, s, id);
        assert!(&out == original, "{id}: the replayed output differs");
    }
}

/// What the log holds as a call's output, and what `--mode execute` expects of it.
fn stored_and_expected(e: &Env, s: &str, id: &str) -> (String, String) {
    let find = |mode: &str, list: &str, field: &dyn Fn(&serde_json::Value) -> Option<String>| {
        let (code, out, err) = e.tacho(&["session", "replay", s, "--mode", mode, "--json"]);
        assert_eq!(code, 0, "{err}");
        out.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .flat_map(|v| v[list].as_array().cloned().unwrap_or_default())
            .find(|ev| ev["call_id"] == id && field(ev).is_some())
            .and_then(|ev| field(&ev))
            .unwrap_or_else(|| panic!("no {mode} output of {id}"))
    };
    let stored = find("reconstruct", "events", &|ev| {
        (ev["type"] == "tool.result")
            .then(|| ev["output"].as_str().map(str::to_owned))
            .flatten()
    });
    let expected = find("execute", "tool_calls", &|c| {
        c["expected"]["output"].as_str().map(str::to_owned)
    });
    (stored, expected)
}

/// An Edit of `src/a.txt` (made on disk) with `resp` as its response.
fn edit_call(e: &Env, s: &str, id: &str, resp: &serde_json::Value) {
    let a = e.ws.join("src/a.txt").display().to_string();
    let edit = serde_json::json!({"file_path": a, "old_string": "x", "new_string": "y"});
    e.send(s, "PreToolUse", pre("Edit", id, edit.clone()));
    let now = std::fs::read_to_string(e.ws.join("src/a.txt")).unwrap();
    std::fs::write(e.ws.join("src/a.txt"), format!("{now}{id}\n")).unwrap();
    e.send(
        s,
        "PostToolUse",
        serde_json::json!({"tool_name": "Edit", "tool_use_id": id, "tool_input": edit,
                           "tool_response": resp}),
    );
}

/// The agent pipes its own PostToolUse payload to `tacho hook` (it runs as the user):
/// an Edit of `src/a.txt` whose response holds a reference object copied from the
/// record of an earlier edit. A reference is expanded only when it names the snapshot
/// the session took last before the result (this one names an earlier) and a path the
/// call edited, each path once: the agent's response replays as it gave it. (Before,
/// any snapshot of the session passed: 48 KiB of file the agent never gave, and a
/// response of thousands of references expanded to thousands of copies.)
#[test]
fn a_reference_the_agent_wrote_in_an_edit_response_is_never_expanded() {
    let e = Env::new();
    let s = "f11ec09e-aaaa-4bbb-8ccc-00000000f0c2";
    let big: String = (0..3000).map(|i| format!("line {i} of a.txt\n")).collect();
    std::fs::write(e.ws.join("src/a.txt"), &big).unwrap();
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let a = e.ws.join("src/a.txt").display().to_string();
    edit_call(
        &e,
        s,
        "e1",
        &serde_json::json!({"filePath": a, "originalFile": big}),
    );
    let (e1, _) = stored_and_expected(&e, s, "e1");
    let reference: serde_json::Value =
        serde_json::from_str::<serde_json::Value>(&e1).unwrap()["originalFile"].clone();
    assert!(reference.get("tacho:file").is_some(), "{e1}");
    // The agent's own response: the reference object as it read it from the record.
    let forged = serde_json::json!({"filePath": a, "note": reference});
    edit_call(&e, s, "f1", &forged);
    e.send(s, "Stop", serde_json::json!({"stop_hook_active": false}));
    let (_, expected) = stored_and_expected(&e, s, "f1");
    let given = forged.to_string();
    assert!(
        expected == given,
        "the agent's response ({} bytes) replays as {} bytes",
        given.len(),
        expected.len()
    );
}

/// An Edit response nested as deep as a hook payload may be (126 objects in the
/// payload's `tool_response`; one more and the hook refuses the payload), the whole
/// file at the bottom. A reference adds two levels, past what serde_json reads (128):
/// such an output is recorded whole (a shorter one is kept only if it reads back into
/// the output), and replays byte for byte.
#[test]
fn a_whole_file_deep_in_a_response_is_replayed_byte_for_byte() {
    let e = Env::new();
    let s = "f11ec09e-aaaa-4bbb-8ccc-00000000f0c3";
    let big: String = (0..3000).map(|i| format!("line {i} of a.txt\n")).collect();
    std::fs::write(e.ws.join("src/a.txt"), &big).unwrap();
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let mut resp = serde_json::json!({"originalFile": big});
    for _ in 0..125 {
        resp = serde_json::json!({ "n": resp });
    }
    edit_call(&e, s, "d1", &resp);
    e.send(s, "Stop", serde_json::json!({"stop_hook_active": false}));
    let (stored, expected) = stored_and_expected(&e, s, "d1");
    let given = resp.to_string();
    assert!(
        expected == given,
        "replayed {} bytes for the agent's {} (stored {} bytes, a reference: {})",
        expected.len(),
        given.len(),
        stored.len(),
        stored.contains("tacho:file")
    );
}

/// A snapshot recorded in the session between an Edit's `PreToolUse` and its result by
/// something else (`tacho snapshot --session`) is the one the result's copy of the file
/// is checked against, as the replay checks it: still stored once, still replayed byte
/// for byte.
#[test]
fn a_snapshot_recorded_between_a_call_and_its_result_is_the_one_a_copy_is_checked_against() {
    let e = Env::new();
    let s = "f11ec09e-aaaa-4bbb-8ccc-00000000f0c4";
    let big: String = (0..3000).map(|i| format!("line {i} of a.txt\n")).collect();
    std::fs::write(e.ws.join("src/a.txt"), &big).unwrap();
    e.send(s, "SessionStart", serde_json::json!({"source": "startup"}));
    let a = e.ws.join("src/a.txt").display().to_string();
    let edit = serde_json::json!({"file_path": a, "old_string": "line 5 ", "new_string": "L5 "});
    e.send(s, "PreToolUse", pre("Edit", "e1", edit.clone()));
    // Another file changes, and the user snapshots the workspace into the session.
    std::fs::write(e.ws.join("src/b.txt"), "changed\n").unwrap();
    let (code, _, err) = e.tacho(&["snapshot", "--session", s]);
    assert_eq!(code, 0, "{err}");
    std::fs::write(e.ws.join("src/a.txt"), big.replacen("line 5 ", "L5 ", 1)).unwrap();
    let resp = serde_json::json!({"filePath": a, "oldString": "line 5 ", "newString": "L5 ",
                                  "originalFile": big, "userModified": false});
    e.send(
        s,
        "PostToolUse",
        serde_json::json!({"tool_name": "Edit", "tool_use_id": "e1", "tool_input": edit,
                           "tool_response": resp}),
    );
    e.send(s, "Stop", serde_json::json!({"stop_hook_active": false}));
    let (stored, expected) = stored_and_expected(&e, s, "e1");
    assert!(
        stored.contains("\"tacho:file\""),
        "stored whole: {} bytes",
        stored.len()
    );
    let given = resp.to_string();
    assert!(
        expected == given,
        "replayed {} bytes for {}",
        expected.len(),
        given.len()
    );
}
