//! Real agents recorded through their hooks: the Claude Code CLI (npm
//! `@anthropic-ai/claude-code`, pinned in `tests/agents/package.json`) runs offline
//! against a loopback mock of the Messages API (`tests/agents/mock_messages_api.py`,
//! streaming SSE) with tacho's hooks installed by `tacho hooks install`. Then graph,
//! risk, replay, a rollback of one shell command, the Stop gate, and an import of the
//! same transcript checked against `ccusage` (npm, pinned); and one model message with
//! several tool calls, which Claude Code runs partly at once. Factory Droid (npm
//! `@factory/cli-linux-x64`, `droid exec`) runs the same way against the mock's Chat
//! Completions as a `customModels` entry (the `droid_` tests).
//!
//! `.ci/run` installs them (`npm install` in `tests/agents`, from its lockfile). Without Node, Python or that
//! install the tests say so and pass, except in CI (`CI` set), where they fail.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use tacho_tests::PARITY_PLAN as PLAN;
use tacho_tests::{run, tacho, tacho_bin};

/// A scripted Claude Code session: read, edit, a shell command that writes and
/// deletes files, a failing command, a stop the gate blocks, the check, a stop the
/// gate lets through.
#[test]
fn claude_code_recorded_through_hooks_with_rollback_and_the_stop_gate() {
    let Some(claude) = npm_bin("claude") else {
        return;
    };
    let e = Env::new();
    // Install into the config directory: twice, the second changes nothing.
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("installed tacho's claude-code hooks"), "{out}");
    let (_, out, _) = e.tacho(&["hooks", "install", "claude-code"]);
    assert!(out.contains("nothing changed"), "{out}");
    // With --watch: the hooks keep a watcher of the workspace (checked at the end).
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code", "--watch"]);
    assert_eq!(code, 0, "{out}{err}");
    let status = e.json(&["hooks", "status", "--json"]);
    let user = &status["files"][0];
    assert_eq!(user["scope"], "user");
    assert_eq!(user["points_here"], true, "{status}");

    // The session exists before the agent starts, with an assured goal.
    assured_session(&e, SESSION, "claude-code");
    let ws = e.ws.display().to_string();

    let value = e.ws.join("src/value.txt").display().to_string();
    let tacho_path = tacho_bin().display().to_string();
    let script = serde_json::json!([
        [{"text": "Reading."}, {"tool": "Read", "input": {"file_path": value}}],
        [{"tool": "Edit", "input": {"file_path": value, "old_string": "41", "new_string": "42"}}],
        [{"tool": "Bash", "input": {"command": "echo made > made.txt && rm -f gone.txt", "description": "write and delete"}}],
        [{"tool": "Bash", "input": {"command": "false", "description": "fail"}}],
        [{"text": "Done."}],
        {"until_text": "cannot complete",
         "then": [{"tool": "Bash", "input": {"command": format!("'{tacho_path}' goal check parity --session {SESSION}"), "description": "run the check"}}],
         "else": [{"text": "the gate did not block"}]},
        [{"text": "Checked: done."}]
    ]);
    let mock = Mock::start(&e.dir, &script);
    let result = e.claude(&claude, &mock, SESSION, "Make the value the answer");
    drop(mock);

    // The agent did it all; the hooks logged no problem.
    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/value.txt")).unwrap(),
        "42\n"
    );
    assert!(e.ws.join("made.txt").exists() && !e.ws.join("gone.txt").exists());
    assert_one_stop_blocked_and_no_problem(&e);

    // The graph: every tool call, the failure, the files, and the tokens Claude Code
    // itself reported.
    let g = e.json(&["graph", SESSION, "--format", "json"]);
    let tools: Vec<String> = g["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["tools"].as_array().unwrap().iter())
        .map(|t| t["tool"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(tools, ["Read", "Edit", "Bash", "Bash", "Bash"], "{g}");
    let files: Vec<&str> = g["files"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for f in ["src/value.txt", "made.txt", "gone.txt"] {
        assert!(files.contains(&f), "{f} not in {files:?}");
    }
    let usage = &result["usage"];
    let t = &g["tokens"];
    assert_eq!(num(&t["in"]), num(&usage["input_tokens"]), "{t} vs {usage}");
    assert_eq!(
        num(&t["out"]),
        num(&usage["output_tokens"]),
        "{t} vs {usage}"
    );
    assert_eq!(
        num(&t["cache_read"]),
        num(&usage["cache_read_input_tokens"])
    );
    assert_eq!(
        num(&t["cache_write"]),
        num(&usage["cache_creation_input_tokens"])
    );
    assert!(num(&t["in"]) > 0);

    // The gate blocked once, then the check passed and completion was accepted.
    let st = e.json(&["goal", "status", "--session", SESSION, "--json"]);
    assert_eq!(st["completed"], true, "{st}");
    let (_, trace, _) = e.tacho(&["session", "replay", SESSION, "--mode", "summary"]);
    let refused = trace
        .lines()
        .filter(|l| l.contains("goal.update") && l.contains("complete") && l.contains("refused"))
        .count();
    assert!(refused >= 1, "{trace}");

    // Verification, risk.
    let (code, out, err) = e.tacho(&["session", "replay", SESSION, "--mode", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
    let risk = e.json(&["risk", SESSION, "--json"]);
    let factors: Vec<&str> = risk["factors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap_or(""))
        .collect();
    assert!(factors.contains(&"tool_failures"), "{risk}");
    // Every call the hooks saw is one the real agent's transcript names (issue 42 (9)).
    assert!(!factors.contains(&"calls_unconfirmed"), "{risk}");
    assert!(
        factors.iter().all(|f| *f != "agent_acted_on_tacho"),
        "{risk}"
    );

    // The real agent's record through the exporters: the report names the completed
    // goal, the trace export carries every tool call and the graph's output tokens, the
    // JSON Lines export every event.
    let (code, md, err) = e.tacho(&["audit", "report", SESSION]);
    assert_eq!(code, 0, "{err}");
    assert!(md.contains("## Goal") && md.contains("completed"), "{md}");
    let traces = e.dir.join("traces.jsonl");
    let (code, _, err) = e.tacho(&["audit", "otlp", SESSION, "--file", traces.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let g = e.json(&["graph", SESSION, "--format", "json"]);
    let (mut out_tokens, mut tool_spans) = (0u64, 0u64);
    for line in std::fs::read_to_string(&traces).unwrap().lines() {
        let req: serde_json::Value = serde_json::from_str(line).unwrap();
        for span in req["resourceSpans"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["scopeSpans"].as_array().unwrap())
            .flat_map(|s| s["spans"].as_array().unwrap())
        {
            if span["name"].as_str().unwrap().starts_with("execute_tool ") {
                tool_spans += 1;
            }
            for a in span["attributes"].as_array().unwrap() {
                if a["key"] == "gen_ai.usage.output_tokens" {
                    out_tokens += a["value"]["intValue"]
                        .as_str()
                        .unwrap()
                        .parse::<u64>()
                        .unwrap();
                }
            }
        }
    }
    let calls: u64 = g["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["tools"].as_array().unwrap().len() as u64)
        .sum();
    assert_eq!(tool_spans, calls, "every tool call is an execute_tool span");
    assert_eq!(
        out_tokens,
        num(&g["tokens"]["out"]),
        "output tokens as the graph counts them"
    );
    let (code, jsonl, err) = e.tacho(&["audit", "export", SESSION]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(jsonl.lines().count() as u64, num(&g["events"]));
    // And the independent reader (SPEC alone) reads the real agent's record as tacho
    // does.
    let python = tacho_tests::repo_root().join("tests/audit/.venv/bin/python");
    if python.exists() {
        let out = std::process::Command::new(&python)
            .arg(tacho_tests::repo_root().join("tests/spec-reader/read.py"))
            .arg(&e.home)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let theirs: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|v: &serde_json::Value| v["session"] == SESSION)
            .collect();
        let (_, ours, _) = e.tacho(&["session", "replay", SESSION, "--mode", "summary", "--json"]);
        let ours: Vec<serde_json::Value> = ours
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(theirs, ours);
    }

    // Roll back the shell command's step: its files come back, the edit before stays.
    roll_back_the_shell_step(&e, SESSION);
    // The hooks (installed with --watch) started a watcher of the workspace, and the
    // full snapshots the hooks took asked it what changed.
    let (code, out, _) = e.tacho(&["watch", "status", &ws, "--json"]);
    assert_eq!(code, 0, "a hook started a watcher: {out}");
    let served: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(num(&served["watcher"]["answered"]) > 0, "{served}");
    assert_eq!(e.tacho(&["watch", "stop", &ws]).0, 0);

    // Importing the same transcript into a fresh store gives the token totals
    // ccusage reports for it; importing again adds nothing.
    let Some(ccusage) = npm_bin("ccusage") else {
        return;
    };
    let fresh = e.dir.join("fresh-home");
    let import = |args: &[&str]| {
        let mut c = tacho(&fresh);
        c.env("CLAUDE_CONFIG_DIR", &e.cfg).args(args);
        let (code, out, err) = run(c);
        assert_eq!(code, 0, "{out}{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    let first = import(&["import", "claude-code", "--json"]);
    assert!(num(&first["events_added"]) > 0, "{first}");
    let again = import(&["import", "claude-code", "--json"]);
    assert_eq!(num(&again["events_added"]), 0, "{again}");
    let cc = ccusage_json(&ccusage, &["session"], "CLAUDE_CONFIG_DIR", &e.cfg);
    let row = cc["session"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["period"] == SESSION || r["sessionId"] == SESSION)
        .unwrap_or_else(|| panic!("{cc}"))
        .clone();
    let mut c = tacho(&fresh);
    c.args(["graph", SESSION, "--format", "json"]);
    let (_, out, _) = run(c);
    let g: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let t = &g["tokens"];
    assert_tokens_as_ccusage(t, &row);
    // And they equal what the hooks recorded live.
    assert_eq!(num(&t["in"]), num(&usage["input_tokens"]));
}

/// The real Codex CLI (npm `@openai/codex`, pinned) against the mock's Responses API,
/// with tacho's hooks installed by `tacho hooks install codex` (the test passes
/// `--dangerously-bypass-hook-trust`; a user approves the hooks once in Codex). Its
/// hook payloads carry no exit code: the result waits for the rollout's.
/// Codex's configuration in `codex_home`: the model served by `mock`.
/// The real Claude Code edits a 50 KB file: its `Edit` result carries the whole file as
/// it was (`originalFile`), which the call's before-snapshot holds. The record keeps a
/// reference to it (SPEC §5.4), and the replay gives the file back in its place.
#[test]
fn claude_code_edit_results_keep_the_whole_file_once_and_replay_it() {
    let Some(claude) = npm_bin("claude") else {
        return;
    };
    let e = Env::new();
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code"]);
    assert_eq!(code, 0, "{out}{err}");
    let session = "5e551011-aaaa-4bbb-8ccc-00000000a0f1";
    let big: String = (0..2000)
        .map(|i| format!("const VALUE_{i}: u32 = {i};\n"))
        .collect();
    std::fs::write(e.ws.join("src/big.rs"), &big).unwrap();
    let path = e.ws.join("src/big.rs").display().to_string();
    let script = serde_json::json!([
        [{"tool": "Read", "input": {"file_path": path}}],
        [{"tool": "Edit", "input": {"file_path": path, "old_string": "VALUE_7: u32 = 7;", "new_string": "VALUE_7: u32 = 70;"}}],
        [{"text": "Done."}]
    ]);
    let mock = Mock::start(&e.dir, &script);
    e.claude(&claude, &mock, session, "Make value 7 seventy");
    drop(mock);
    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/big.rs")).unwrap(),
        big.replacen("VALUE_7: u32 = 7;", "VALUE_7: u32 = 70;", 1)
    );
    let (code, out, err) = e.tacho(&["session", "replay", session, "--mode", "verify"]);
    assert_eq!(code, 0, "{out}{err}");

    // The record: the Edit's result holds a reference, not the 50 KB.
    let (code, events, err) = e.tacho(&[
        "session",
        "replay",
        session,
        "--mode",
        "reconstruct",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let events: Vec<serde_json::Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .flat_map(|v| v["events"].as_array().cloned().unwrap_or_default())
        .collect();
    let call = events
        .iter()
        .find(|ev| ev["type"] == "tool.call" && ev["tool"] == "Edit")
        .and_then(|ev| ev["call_id"].as_str())
        .expect("an Edit call")
        .to_owned();
    let stored = events
        .iter()
        .find(|ev| ev["type"] == "tool.result" && ev["call_id"] == call.as_str())
        .and_then(|ev| ev["output"].as_str())
        .expect("its result")
        .to_owned();
    assert!(
        stored.contains("\"tacho:file\"") && stored.len() < 8 * 1024,
        "{} bytes stored: {}",
        stored.len(),
        stored.chars().take(300).collect::<String>()
    );

    // The replay: the file back in its place, the rest as Claude Code gave it.
    let (code, expect, err) =
        e.tacho(&["session", "replay", session, "--mode", "execute", "--json"]);
    assert_eq!(code, 0, "{err}");
    let replayed = expect
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .flat_map(|v| v["tool_calls"].as_array().cloned().unwrap_or_default())
        .find(|c| c["call_id"] == call.as_str())
        .and_then(|c| c["expected"]["output"].as_str().map(str::to_owned))
        .expect("the Edit's expectation");
    let replayed: serde_json::Value = serde_json::from_str(&replayed).unwrap();
    assert!(
        replayed["originalFile"] == big.as_str(),
        "the file is not back in its place"
    );
    let mut stored: serde_json::Value = serde_json::from_str(&stored).unwrap();
    stored["originalFile"] = serde_json::Value::String(big.clone());
    assert_eq!(stored, replayed);
}

fn codex_config(codex_home: &Path, mock: &Mock) {
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"gpt-5-codex\"\nmodel_provider = \"mock\"\n[model_providers.mock]\nname = \"mock\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nenv_key = \"MOCK_KEY\"\nwire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 0\n",
            mock.port
        ),
    )
    .unwrap();
}

/// Runs `codex exec` offline against the mock serving `script`, with tacho's hooks
/// installed (and trusted for the run) in a `CODEX_HOME` of its own, which it returns.
fn codex_exec(codex: &Path, e: &Env, script: &serde_json::Value) -> PathBuf {
    let codex_home = e.dir.join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    let mock = Mock::start(&e.dir, script);
    codex_config(&codex_home, &mock);
    let mut c = tacho(&e.home);
    c.env("CODEX_HOME", &codex_home)
        .args(["hooks", "install", "codex"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("trust"), "the trust step is named: {out}");
    let tacho_dir = tacho_bin().parent().unwrap().to_path_buf();
    let out = Command::new(codex)
        .current_dir(&e.ws)
        .args([
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
        ])
        .args(["--dangerously-bypass-hook-trust", "Make the change"])
        .env("CODEX_HOME", &codex_home)
        .env("MOCK_KEY", "x")
        .env("TACHO_HOME", &e.home)
        .env(
            "PATH",
            format!(
                "{}:{}",
                tacho_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "codex: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(mock);
    codex_home
}

#[test]
fn codex_recorded_through_hooks_and_imported_like_ccusage_counts() {
    let Some(codex) = npm_bin("codex") else {
        return;
    };
    let e = Env::new();
    let script = serde_json::json!([
        [{"tool": "exec_command", "input": {"cmd": "echo made > made.txt && rm gone.txt"}}],
        [{"tool": "exec_command", "input": {"cmd": "false"}}],
        [{"text": "Done."}]
    ]);
    let codex_home = codex_exec(&codex, &e, &script);
    assert!(e.ws.join("made.txt").exists() && !e.ws.join("gone.txt").exists());
    let log = std::fs::read_to_string(e.home.join("logs/hooks.log")).unwrap_or_default();
    assert!(log.is_empty(), "hook problems:\n{log}");

    let list = e.json(&["session", "list", "--json"]);
    let session = list["session"]
        .as_str()
        .unwrap_or_else(|| panic!("{list}"))
        .to_string();
    let g = e.json(&["graph", &session, "--format", "json"]);
    let results = graph_tools(&g);
    assert_eq!(
        results,
        [
            ("Bash".to_string(), "ok".to_string()),
            ("Bash".into(), "error".into())
        ],
        "the failing command's exit code comes from the rollout: {g}"
    );
    let n = g["steps"][0]["number"].as_u64().unwrap().to_string();
    let (code, out, err) = e.tacho(&["session", "rollback", &session, "--step", &n, "--yes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        e.ws.join("gone.txt").exists() && !e.ws.join("made.txt").exists(),
        "{out}"
    );

    // Tokens: the hooks, an import of the rollout into a fresh store, and ccusage agree.
    let Some(ccusage) = npm_bin("ccusage") else {
        return;
    };
    let cc = ccusage_json(&ccusage, &["codex", "session"], "CODEX_HOME", &codex_home);
    let row = cc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["sessionId"]
                .as_str()
                .is_some_and(|s| s.contains(&session))
        })
        .unwrap_or_else(|| panic!("{cc}"))
        .clone();
    let fresh = e.dir.join("fresh-home");
    let import = || {
        let mut c = tacho(&fresh);
        c.env("CODEX_HOME", &codex_home)
            .args(["import", "codex", "--json"]);
        let (code, out, err) = run(c);
        assert_eq!(code, 0, "{out}{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    assert!(num(&import()["events_added"]) > 0);
    assert_eq!(
        num(&import()["events_added"]),
        0,
        "importing again adds nothing"
    );
    let mut c = tacho(&fresh);
    c.args(["graph", &session, "--format", "json"]);
    let (_, out, _) = run(c);
    let imported: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for t in [&g["tokens"], &imported["tokens"]] {
        assert_tokens_as_ccusage(t, &row);
    }
    assert!(num(&g["tokens"]["in"]) > 0);
}

/// The conversation rollback with the real Codex CLI: two shell commands; rolling back
/// to before the second with `--conversation` writes a new rollout of Codex's own
/// (the original unchanged), and `codex exec resume NEW` continues from after the
/// first command (the mock answers by the number of model outputs the input holds).
#[test]
fn codex_rollback_forks_the_conversation_to_resume() {
    let Some(codex) = npm_bin("codex") else {
        return;
    };
    let e = Env::new();
    let script = serde_json::json!([
        [{"tool": "exec_command", "input": {"cmd": "echo one > one.txt"}}],
        [{"tool": "exec_command", "input": {"cmd": "echo two > two.txt"}}],
        [{"text": "Done."}]
    ]);
    let codex_home = codex_exec(&codex, &e, &script);
    assert!(e.ws.join("two.txt").exists());
    let list = e.json(&["session", "list", "--json"]);
    let session = list["session"]
        .as_str()
        .unwrap_or_else(|| panic!("{list}"))
        .to_string();
    let g = e.json(&["graph", &session, "--format", "json"]);
    let second = &g["steps"][1];
    let n = second["number"].as_u64().unwrap().to_string();
    let call = second["tools"][0]["call_id"].as_str().unwrap().to_owned();
    let tacho_codex = |args: &[&str]| {
        let mut c = tacho(&e.home);
        c.current_dir(&e.ws)
            .env("CODEX_HOME", &codex_home)
            .args(args);
        run(c)
    };
    let (code, out, err) = tacho_codex(&[
        "session",
        "rollback",
        &session,
        "--step",
        &n,
        "--conversation",
        "--yes",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let done: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let fork = &done["conversation"];
    assert_eq!(fork["written"], true, "{done}");
    assert_eq!(fork["before_call"], call.as_str(), "{done}");
    assert!(!e.ws.join("two.txt").exists() && e.ws.join("one.txt").exists());
    let from = fork["from"].as_str().unwrap();
    let original = std::fs::read_to_string(from).unwrap();
    assert!(original.contains(&call), "the original keeps the call");
    let new_id = fork["session"].as_str().unwrap().to_owned();
    let forked = std::fs::read_to_string(fork["file"].as_str().unwrap()).unwrap();
    assert!(!forked.contains(&call) && forked.contains(&new_id));
    assert!(
        fork["resume"]
            .as_str()
            .unwrap()
            .ends_with(&format!("codex resume {new_id}")),
        "{fork}"
    );

    let resume_script = serde_json::json!([
        [{"text": "wrong: no conversation"}],
        [{"text": "resumed after the first command"}],
        [{"text": "wrong: the whole conversation"}],
        [{"text": "wrong: the whole conversation"}]
    ]);
    let dir = e.dir.join("resume");
    std::fs::create_dir_all(&dir).unwrap();
    let mock = Mock::start(&dir, &resume_script);
    codex_config(&codex_home, &mock);
    let out = Command::new(&codex)
        .current_dir(&e.ws)
        .args([
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
        ])
        .args(["resume", &new_id, "go on"])
        .env("CODEX_HOME", &codex_home)
        .env("MOCK_KEY", "x")
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    drop(mock);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "codex resume: {stdout}{stderr}");
    assert!(
        stdout.contains("resumed after the first command"),
        "{stdout}{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(from).unwrap(),
        original,
        "the original is unchanged"
    );
}

/// Issue 42 (9) with the real Codex CLI: from its shell the agent pipes a made-up
/// `PreToolUse`/`PostToolUse` pair for a test run that never happened to `tacho hook
/// codex`. Its rollout names every call it made by the `call_id` its hooks report: at
/// its stop the made-up call is recorded unconfirmed (risk `calls_unconfirmed`) and
/// never counts as verification; its real calls are confirmed.
#[test]
fn codex_a_call_piped_from_its_shell_is_unconfirmed() {
    let Some(codex) = npm_bin("codex") else {
        return;
    };
    let e = Env::new();
    let ws = e.ws.display().to_string();
    // (By its full path: Codex runs commands in a login shell, whose PATH is the
    // system's.)
    let bin = tacho_bin().display().to_string();
    let pipe = format!(
        "sid=$({bin} session list --json | python3 -c 'import sys,json; print(json.loads(sys.stdin.readline())[\"session\"])') && for ev in PreToolUse PostToolUse; do printf '{{\"session_id\":\"%s\",\"cwd\":\"{ws}\",\"hook_event_name\":\"%s\",\"tool_name\":\"Bash\",\"tool_input\":{{\"command\":\"python3 -m pytest -q\"}},\"tool_use_id\":\"call_madeup\",\"tool_response\":\"1 passed\"}}' \"$sid\" \"$ev\" | {bin} hook codex; done"
    );
    let script = serde_json::json!([
        [{"tool": "exec_command", "input": {"cmd": "echo made > made.txt"}}],
        [{"tool": "exec_command", "input": {"cmd": pipe}}],
        [{"text": "Done."}]
    ]);
    codex_exec(&codex, &e, &script);
    assert!(e.ws.join("made.txt").exists());
    let list = e.json(&["session", "list", "--json"]);
    let session = list["session"]
        .as_str()
        .unwrap_or_else(|| panic!("{list}"))
        .to_string();
    let risk = e.json(&["risk", &session, "--json"]);
    assert_only_the_made_up_call_is_unconfirmed(&risk, "call_madeup");
}

/// Bad input never breaks the agent and never half-writes: a malformed payload, an
/// unknown event, a missing transcript, a transcript cut mid-line, and settings files
/// with comments or a syntax error.
#[test]
fn bad_hook_input_is_named_and_nothing_is_half_written() {
    let e = Env::new();
    let hook = |agent: &str, input: &str| e.hook(agent, input);
    // Malformed: exit 0 (the agent goes on), a clear message, nothing recorded.
    let (code, out, err) = hook("claude-code", "{\"session_id\": ");
    assert_eq!((code, out.as_str()), (0, ""));
    assert!(
        err.contains("nothing recorded: the hook payload is not JSON"),
        "{err}"
    );
    let (code, _, err) = hook("claude-code", r#"{"hook_event_name":"Stop"}"#);
    assert_eq!(code, 0);
    assert!(err.contains("session_id"), "{err}");
    // Whole JSON without a session id is named as such, never "not JSON" (issue 47).
    assert!(err.contains("is JSON but not a hook payload"), "{err}");
    assert!(!err.contains("is not JSON"), "{err}");
    let (_, out, _) = e.tacho(&["session", "list", "--json"]);
    assert!(!out.contains("\"session\":"), "nothing recorded: {out}");
    let log = std::fs::read_to_string(e.home.join("logs/hooks.log")).unwrap_or_default();
    assert_eq!(log.lines().count(), 2, "{log}");

    // An unknown event and a missing transcript: recorded as far as they go.
    let ws = e.ws.display().to_string();
    let missing = e.dir.join("no-such-transcript.jsonl").display().to_string();
    let payload = |event: &str| {
        serde_json::json!({"session_id": "bad-input-1", "transcript_path": missing, "cwd": ws, "hook_event_name": event}).to_string()
    };
    assert_eq!(hook("claude-code", &payload("SessionStart")).0, 0);
    assert_eq!(hook("claude-code", &payload("BrandNewEvent")).0, 0);
    let (_, trace, _) = e.tacho(&["session", "replay", "bad-input-1", "--mode", "summary"]);
    assert!(
        trace.contains("agent.notice") && trace.contains("hook:BrandNewEvent"),
        "{trace}"
    );
    // Codex's Stop must print JSON when it lets the agent go.
    let (code, out, _) = hook(
        "codex",
        &payload("Stop").replace("bad-input-1", "bad-input-2"),
    );
    assert_eq!((code, out.trim()), (0, "{}"));

    // A transcript cut mid-line: the complete lines are read, the rest waits.
    let t = e.dir.join("t.jsonl");
    std::fs::write(
        &t,
        "{\"type\":\"assistant\",\"sessionId\":\"cut-1\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":7,\"output_tokens\":3}}}\n{\"type\":\"assistant\",\"message\":{\"id\":\"m2\",\"usa",
    )
    .unwrap();
    let (code, out, err) = e.tacho(&["import", "claude-code", &t.display().to_string(), "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (num(&r["partial_lines"]), num(&r["bad_lines"])),
        (1, 0),
        "{r}"
    );
    let g = e.json(&["graph", "cut-1", "--format", "json"]);
    assert_eq!(num(&g["tokens"]["in"]), 7);

    // Settings with a comment, or a syntax error: refused, the file untouched.
    for (text, want) in [
        (
            "{\n  // mine\n  \"model\": \"opus\"\n}\n",
            "comments are not JSON",
        ),
        ("{\"model\": \"opus\",,}\n", "line 1, column"),
    ] {
        std::fs::create_dir_all(&e.cfg).unwrap();
        let f = e.cfg.join("settings.json");
        std::fs::write(&f, text).unwrap();
        let (code, out, err) = e.tacho(&["hooks", "install", "claude-code"]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains(want) && err.contains("left as it is"), "{err}");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), text);
        assert!(!e.cfg.join("settings.json.tacho-backup").exists());
    }
    // A good file: merged, backed up, and uninstall gives it back.
    let f = e.cfg.join("settings.json");
    let mine = "{\"model\": \"opus\", \"hooks\": {\"Stop\": [{\"hooks\": [{\"type\": \"command\", \"command\": \"./mine.sh\"}]}]}}";
    std::fs::write(&f, mine).unwrap();
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code", "--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        mine,
        "a dry run writes nothing"
    );
    assert_eq!(e.tacho(&["hooks", "install", "claude-code"]).0, 0);
    assert_eq!(
        std::fs::read_to_string(e.cfg.join("settings.json.tacho-backup")).unwrap(),
        mine
    );
    assert_eq!(e.tacho(&["hooks", "uninstall", "claude-code"]).0, 0);
    let back: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert_eq!(
        back,
        serde_json::from_str::<serde_json::Value>(mine).unwrap()
    );
}

/// A hook state file lost or torn by a crash is rebuilt from the log: no second
/// `session.start`, open steps still close, and no response is counted twice.
#[test]
fn a_torn_hook_state_is_rebuilt_from_the_log() {
    let e = Env::new();
    let transcript = e.dir.join("t.jsonl");
    let usage = |id: &str| {
        format!(
            "{{\"type\":\"assistant\",\"message\":{{\"id\":\"{id}\",\"usage\":{{\"input_tokens\":10,\"output_tokens\":2}}}}}}\n"
        )
    };
    std::fs::write(&transcript, usage("m1") + &usage("m2")).unwrap();
    let t = transcript.display().to_string();
    let send = |event: &str, extra: serde_json::Value| {
        let mut extra = extra;
        if let Some(m) = extra.as_object_mut() {
            m.insert("transcript_path".into(), t.clone().into());
        }
        e.send("torn-1", event, extra).1
    };
    send("SessionStart", serde_json::json!({"source": "startup"}));
    send(
        "PreToolUse",
        serde_json::json!({"tool_name": "Bash", "tool_input": {"command": "touch x"}, "tool_use_id": "t1"}),
    );
    let state = e.home.join("agents/claude-code/torn-1.json");
    for torn in ["{\"main\": {\"sess", ""] {
        std::fs::write(&state, torn).unwrap();
        let err = send("UserPromptSubmit", serde_json::json!({"prompt": "again"}));
        assert!(
            torn.is_empty() || err.contains("starting from the log"),
            "{err}"
        );
    }
    send(
        "PostToolUse",
        serde_json::json!({"tool_name": "Bash", "tool_input": {"command": "touch x"}, "tool_use_id": "t1", "tool_response": {"stdout": ""}}),
    );
    std::fs::remove_file(&state).unwrap();
    send("SessionEnd", serde_json::json!({"reason": "other"}));
    let (code, out, err) = e.tacho(&["session", "replay", "torn-1", "--mode", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
    let g = e.json(&["graph", "torn-1", "--format", "json"]);
    assert_eq!(
        num(&g["tokens"]["in"]),
        20,
        "m1 and m2 once each: {}",
        g["tokens"]
    );
    let (_, trace, _) = e.tacho(&["session", "replay", "torn-1", "--mode", "summary"]);
    assert_eq!(trace.matches("session.start").count(), 1, "{trace}");
    assert_eq!(trace.matches("step.finish").count(), 1, "{trace}");
}

/// The Stop gate never holds an agent forever: with a check that keeps failing, the
/// stall rule pauses the goal after three refused completions and the gate lets the
/// agent stop; blocks never exceed the hook's own bound either.
#[test]
fn the_stop_gate_lets_go_after_the_stall_rule_pauses_the_goal() {
    let e = Env::new();
    let session = "gate-loop-1";
    let send = |event: &str, extra: serde_json::Value| e.send(session, event, extra).0;
    send("SessionStart", serde_json::json!({"source": "startup"}));
    assure_goal(&e, session);
    let mut blocked = 0;
    for i in 0..8 {
        let out = send("Stop", serde_json::json!({"stop_hook_active": i > 0}));
        if out.contains("\"decision\":\"block\"") {
            blocked += 1;
            assert!(out.contains("parity"), "the open check is named: {out}");
        } else {
            assert_eq!(out, "", "let through: nothing on stdout");
            break;
        }
    }
    assert!(
        (1..=tacho_app::GATE_BLOCKS_MAX).contains(&blocked),
        "blocked {blocked} times"
    );
    let st = e.json(&["goal", "status", "--session", session, "--json"]);
    assert!(
        st["paused"].is_string(),
        "the stall rule paused the goal: {st}"
    );
}

/// `tacho hooks install --watch` installs hooks that keep a watcher of the session's
/// workspace: the first hook starts one (not waiting for it), later hooks find it, and
/// full snapshots are then served by it; hooks without `--watch` start none.
#[test]
fn hooks_with_watch_keep_a_watcher_of_the_workspace() {
    let e = Env::new();
    let ws = e.ws.display().to_string();
    // Installed with --watch: the command says so, and is still recognised as tacho's.
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code", "--watch", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let installed: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let command = installed["command"].as_str().unwrap().to_owned();
    assert!(command.ends_with(" hook claude-code --watch"), "{command}");
    let settings = std::fs::read_to_string(e.cfg.join("settings.json")).unwrap();
    assert!(settings.contains("hook claude-code --watch"), "{settings}");
    // Installed again without: replaced, not added.
    assert_eq!(e.tacho(&["hooks", "install", "claude-code"]).0, 0);
    let settings = std::fs::read_to_string(e.cfg.join("settings.json")).unwrap();
    assert!(!settings.contains("--watch"), "{settings}");
    assert_eq!(
        settings.matches(" hook claude-code").count(),
        installed["events"].as_array().unwrap().len(),
        "{settings}"
    );

    let payload = |session: &str, event: &str| {
        serde_json::json!({"session_id": session, "transcript_path": e.dir.join("none.jsonl"), "cwd": ws, "hook_event_name": event}).to_string()
    };
    let status = || e.tacho(&["watch", "status", &ws, "--json"]);
    // Without --watch: no watcher.
    assert_eq!(e.hook("claude-code", &payload("w-0", "SessionStart")).0, 0);
    assert_eq!(status().0, 4, "no watcher without --watch");
    // With it: the first hook starts one.
    let (code, _, err) = e.hook_with(
        &["hook", "claude-code", "--watch"],
        &payload("w-1", "SessionStart"),
    );
    assert_eq!(code, 0, "{err}");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while status().0 != 0 {
        assert!(std::time::Instant::now() < until, "no watcher started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Later hooks find it; one watcher runs.
    for event in ["UserPromptSubmit", "Stop"] {
        let (code, _, err) =
            e.hook_with(&["hook", "claude-code", "--watch"], &payload("w-1", event));
        assert_eq!(code, 0, "{err}");
    }
    let (_, listed, _) = e.tacho(&["watch", "list", "--json"]);
    assert_eq!(listed.lines().count(), 1, "{listed}");
    // Full snapshots are served by it (the first after it started takes its token).
    let snapshot = || {
        let (code, out, err) = e.tacho(&["snapshot", "--workspace", &ws, "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    snapshot();
    std::fs::write(e.ws.join("src/value.txt"), "42\n").unwrap();
    let snap = snapshot();
    // (The changed file is read by this snapshot, or already by the watcher as it was
    // written: SPEC §10.6.)
    assert_eq!(
        (&snap["watched"], &snap["walked"]),
        (&serde_json::json!(true), &serde_json::json!(false)),
        "{snap}"
    );
    assert!(snap["files_read"].as_u64().unwrap() <= 1, "{snap}");
    assert_eq!(e.tacho(&["watch", "stop", &ws]).0, 0);
}

/// Claude Code answers one model message holding several tool calls by running its
/// concurrency-safe calls (Read, Glob, Grep, read-only shell commands) at once and the
/// others (Write, Edit, any other command) one at a time, in the message's order. A
/// shell command can change files as far as tacho knows, so two read-only commands run
/// at once overlap in the record (`PreToolUse` A and B before either `PostToolUse`):
/// they share one step and the record verifies (SPEC §13.2). The writers of the same
/// message (a command appending to one.txt, a Write over two.txt) follow, and rolling
/// back the shared step restores both files byte for byte.
#[test]
fn claude_code_parallel_tool_calls_of_one_message_verify_and_roll_back() {
    let Some(claude) = npm_bin("claude") else {
        return;
    };
    let e = Env::new();
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code"]);
    assert_eq!(code, 0, "{out}{err}");
    // Bytes a text round trip would change: a CR, a non-UTF-8 byte, a NUL, no final
    // newline.
    let one_before: &[u8] = b"one\r\n\xff\x00end";
    let two_before: &[u8] = b"old two";
    std::fs::write(e.ws.join("one.txt"), one_before).unwrap();
    std::fs::write(e.ws.join("two.txt"), two_before).unwrap();
    let two = e.ws.join("two.txt").display().to_string();
    const S: &str = "5e551011-aaaa-4bbb-8ccc-000000000027";
    // One assistant message with five tool calls: a Read (Claude Code writes only a
    // file it has read), two read-only commands, then the two writers.
    let script = serde_json::json!([
        [{"text": "All at once."},
         {"tool": "Read", "input": {"file_path": two}},
         {"tool": "Bash", "input": {"command": "cat src/value.txt", "description": "read the value"}},
         {"tool": "Bash", "input": {"command": "ls src", "description": "list src"}},
         {"tool": "Bash", "input": {"command": "printf 'more\\n' >> one.txt", "description": "append"}},
         {"tool": "Write", "input": {"file_path": two, "content": "two\n"}}],
        [{"text": "Done."}]
    ]);
    let mock = Mock::start(&e.dir, &script);
    e.claude(&claude, &mock, S, "Do five things");
    drop(mock);
    let log = std::fs::read_to_string(e.home.join("logs/hooks.log")).unwrap_or_default();
    assert!(log.trim().is_empty(), "hook problems:\n{log}");
    // Both writers ran.
    let mut one_after = one_before.to_vec();
    one_after.extend_from_slice(b"more\n");
    assert_eq!(std::fs::read(e.ws.join("one.txt")).unwrap(), one_after);
    assert_eq!(std::fs::read(&two).unwrap(), b"two\n");

    // The order the hooks saw, as recorded: (type, "tool: command or path", step).
    let (code, jsonl, err) = e.tacho(&["audit", "export", S]);
    assert_eq!(code, 0, "{err}");
    let calls: Vec<(String, String, Option<u64>)> = jsonl
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "tool.call" || v["type"] == "tool.result")
        .map(|v| {
            let kind = v["type"].as_str().unwrap_or("").to_string();
            let target = v["target"].as_str().unwrap_or("");
            let target = target
                .strip_prefix(&format!("{}/", e.ws.display()))
                .unwrap_or(target);
            let tool = v["tool"].as_str().unwrap_or("");
            (kind, format!("{tool}: {target}"), v["step"].as_u64())
        })
        .collect();
    let shown: Vec<String> = calls
        .iter()
        .map(|(k, t, s)| format!("{k} {t} (step {s:?})"))
        .collect();
    let shown = shown.join("\n");
    eprintln!("the hooks saw, in this order:\n{shown}");
    assert_eq!(calls.len(), 10, "five calls, five results:\n{shown}");
    let at = |kind: &str, target: &str| {
        calls
            .iter()
            .position(|(k, t, _)| k == kind && t == target)
            .unwrap_or_else(|| panic!("no {kind} of {target}:\n{shown}"))
    };
    // The two read-only commands overlapped: both started before either finished.
    let (cat, ls) = ("Bash: cat src/value.txt", "Bash: ls src");
    let last_call = at("tool.call", cat).max(at("tool.call", ls));
    let first_result = at("tool.result", cat).min(at("tool.result", ls));
    assert!(last_call < first_result, "no overlap:\n{shown}");

    // The record verifies, and its report says so.
    let (code, out, err) = e.tacho(&["session", "replay", S, "--mode", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, md, err) = e.tacho(&["audit", "report", S]);
    assert_eq!(code, 0, "{err}");
    assert!(!md.contains("does not verify"), "{md}");
    assert!(md.contains("record verified"), "{md}");
    // They share one step; the writers ran after them, one at a time, each in a step
    // of its own.
    let step_of = |target: &str| calls[at("tool.call", target)].2;
    let shared = step_of(cat).unwrap_or_else(|| panic!("no step:\n{shown}"));
    assert_eq!(step_of(ls), Some(shared), "{shown}");
    let (append, write) = ("Bash: printf 'more\\n' >> one.txt", "Write: two.txt");
    assert!(at("tool.call", append) > first_result, "{shown}");
    assert!(
        at("tool.result", append) < at("tool.call", write),
        "{shown}"
    );
    assert!(step_of(append) > Some(shared), "{shown}");
    assert!(step_of(write) > step_of(append), "{shown}");

    // Rolling back the shared step restores the workspace from before it: both files
    // as they were, byte for byte.
    let n = shared.to_string();
    let (code, out, err) = e.tacho(&["session", "rollback", S, "--step", &n, "--yes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        std::fs::read(e.ws.join("one.txt")).unwrap(),
        one_before,
        "{out}"
    );
    assert_eq!(std::fs::read(&two).unwrap(), two_before, "{out}");
}

/// A rollback to a step can fork the conversation too (issue 46, item 7): the real
/// Claude Code CLI edits, then runs a shell command; rolling back to before that
/// command with `--conversation` restores the files and writes a new session of
/// Claude Code's own holding the conversation up to the response that made the call;
/// the original transcript is not changed; and `claude --resume NEW -p` continues it
/// from there (the mock answers by the number of assistant messages the request holds:
/// the edit's, and the one Claude Code adds after a tool's result). The dry run writes
/// nothing.
#[test]
fn claude_code_rollback_forks_the_conversation_to_resume() {
    let Some(claude) = npm_bin("claude") else {
        return;
    };
    let e = Env::new();
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code"]);
    assert_eq!(code, 0, "{out}{err}");
    let value = e.ws.join("src/value.txt").display().to_string();
    let script = serde_json::json!([
        [{"tool": "Edit", "input": {"file_path": value, "old_string": "41", "new_string": "42"}}],
        [{"tool": "Bash", "input": {"command": "echo made > made.txt", "description": "write"}}],
        [{"text": "Done."}]
    ]);
    let mock = Mock::start(&e.dir, &script);
    e.claude(&claude, &mock, SESSION, "Make the value the answer");
    drop(mock);
    assert!(e.ws.join("made.txt").exists());
    let transcript = std::fs::read_dir(e.cfg.join("projects"))
        .unwrap()
        .flatten()
        .map(|d| d.path().join(format!("{SESSION}.jsonl")))
        .find(|p| p.exists())
        .expect("Claude Code's transcript");
    let original = std::fs::read(&transcript).unwrap();

    // The shell step, and the call that made it.
    let g = e.json(&["graph", SESSION, "--format", "json"]);
    let step = g["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["tools"][0]["tool"] == "Bash")
        .unwrap_or_else(|| panic!("no shell step: {g}"));
    let n = step["number"].as_u64().unwrap().to_string();
    let call = step["tools"][0]["call_id"].as_str().unwrap().to_owned();
    // The dry run says what it would fork and writes nothing.
    let dry = e.json(&[
        "session",
        "rollback",
        SESSION,
        "--step",
        &n,
        "--conversation",
        "--dry-run",
        "--json",
    ]);
    assert_eq!(dry["conversation"]["written"], false, "{dry}");
    assert_eq!(dry["conversation"]["before_call"], call.as_str(), "{dry}");
    let listing = || {
        std::fs::read_dir(transcript.parent().unwrap())
            .unwrap()
            .count()
    };
    let files_before = listing();
    assert!(
        !Path::new(dry["conversation"]["file"].as_str().unwrap()).exists(),
        "the dry run writes nothing"
    );
    let done = e.json(&[
        "session",
        "rollback",
        SESSION,
        "--step",
        &n,
        "--conversation",
        "--yes",
        "--json",
    ]);
    let fork = &done["conversation"];
    assert_eq!(fork["written"], true, "{done}");
    assert_eq!(listing(), files_before + 1, "one file more: the fork");
    assert!(
        !e.ws.join("made.txt").exists(),
        "the files are rolled back too"
    );
    assert_eq!(
        std::fs::read(&transcript).unwrap(),
        original,
        "the original is unchanged"
    );
    let new_id = fork["session"].as_str().unwrap().to_owned();
    let forked = std::fs::read_to_string(fork["file"].as_str().unwrap()).unwrap();
    assert!(!forked.contains(&call), "cut before the call");
    assert!(!forked.contains(SESSION), "every line is the new session's");
    assert!(
        fork["resume"]
            .as_str()
            .unwrap()
            .ends_with(&format!("claude --resume {new_id}")),
        "{fork}"
    );
    // Text too.
    let (_, text, _) = e.tacho(&[
        "session",
        "rollback",
        SESSION,
        "--step",
        &n,
        "--conversation",
        "--dry-run",
    ]);
    assert!(
        text.contains("Conversation would be forked before call"),
        "{text}"
    );

    // Claude Code resumes it where it was cut: the edit's assistant message and the
    // one Claude Code adds itself after a tool's result ("No response requested.").
    let resume_script = serde_json::json!([
        [{"text": "wrong: no conversation"}],
        [{"text": "wrong: no conversation"}],
        [{"text": "resumed after the edit"}],
        [{"text": "wrong: the whole conversation"}],
        [{"text": "wrong: the whole conversation"}]
    ]);
    let dir = e.dir.join("resume");
    std::fs::create_dir_all(&dir).unwrap();
    let mock = Mock::start(&dir, &resume_script);
    let result = e.claude_with(&claude, &mock, &["--resume", &new_id], "go on");
    drop(mock);
    let log = std::fs::read_to_string(dir.join("requests.log")).unwrap();
    assert_eq!(
        result["result"], "resumed after the edit",
        "{result}\n{log}"
    );
    // The request held the edit's result.
    assert!(log.contains("has been updated"), "{log}");
    assert_eq!(
        std::fs::read(&transcript).unwrap(),
        original,
        "still unchanged"
    );
}

/// The Factory Droid binary (npm `@factory/cli-linux-x64`, which links no `bin`), or
/// why it cannot run.
fn droid_bin() -> Option<PathBuf> {
    let p = agents_dir().join("node_modules/@factory/cli-linux-x64/bin/droid");
    let py = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if p.exists() && py {
        return Some(p);
    }
    tacho_tests::skip_without(
        "the Factory Droid test needs Python 3 and `npm install` in tests/agents (.ci/run does both); droid is missing",
    );
    None
}

/// The tokens the mock served, from its log (`served`, Chat Completions usage):
/// (input without the cached part, cached, output).
fn droid_served(log: &Path) -> (u64, u64, u64) {
    let mut s = (0, 0, 0);
    for l in std::fs::read_to_string(log).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let u = &v["served"];
        let cached = num(&u["prompt_tokens_details"]["cached_tokens"]);
        s.0 += num(&u["prompt_tokens"]) - cached;
        s.1 += cached;
        s.2 += num(&u["completion_tokens"]);
    }
    s
}

/// `tacho ARGS` with `HOME` set (Droid's user settings are `~/.factory/settings.json`).
fn droid_tacho(e: &Env, args: &[&str]) -> (i32, String, String) {
    let mut c = tacho(&e.home);
    c.current_dir(&e.ws)
        .env("HOME", e.dir.join("user"))
        .args(args);
    run(c)
}

/// The real Factory Droid CLI (`droid exec`) against the mock's Chat Completions, as a
/// `customModels` entry, with the hooks `tacho hooks install droid` wrote: every tool
/// call with its result (the failing one, which fires no post-tool hook, read from the
/// transcript), a shell step rolled back byte for byte, tokens equal to what the mock
/// served, and `tacho import droid` of the same session.
#[test]
fn droid_recorded_through_hooks_with_rollback_and_tokens_as_served() {
    let Some(droid) = droid_bin() else {
        return;
    };
    let e = Env::new();
    let user = e.dir.join("user");
    let factory = user.join(".factory");
    std::fs::create_dir_all(&factory).unwrap();
    std::fs::write(e.ws.join("notes.txt"), "old line\n").unwrap();
    // The model first (the mock's port is known once it runs), then tacho's hooks
    // merged into the same file.
    let ws = e.ws.display().to_string();
    let script = serde_json::json!([
        [{"text": "Writing hello.txt."},
         {"tool": "Create", "input": {"file_path": format!("{ws}/hello.txt"), "content": "hello\n"}}],
        [{"tool": "Edit", "input": {"file_path": format!("{ws}/hello.txt"), "old_str": "hello", "new_str": "hello again"}}],
        [{"tool": "Execute", "input": {"command": "sed -i 's/old/new/' notes.txt && echo made > made.txt && rm -f gone.txt", "riskLevelReason": "edits files", "riskLevel": "low"}}],
        [{"tool": "Execute", "input": {"command": "echo about-to-fail; exit 3", "riskLevelReason": "fails", "riskLevel": "low"}}],
        [{"text": "Done."}]
    ]);
    let mock = Mock::start(&e.dir, &script);
    let settings = serde_json::json!({"customModels": [{
        "model": "mock-model", "displayName": "Mock",
        "baseUrl": format!("http://127.0.0.1:{}/v1", mock.port), "apiKey": "mock-key",
        "provider": "generic-chat-completion-api", "maxOutputTokens": 4096}]});
    std::fs::write(factory.join("settings.json"), settings.to_string()).unwrap();
    let (code, out, err) = droid_tacho(&e, &["hooks", "install", "droid"]);
    assert_eq!(code, 0, "{out}{err}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(factory.join("settings.json")).unwrap())
            .unwrap();
    assert_eq!(written["customModels"], settings["customModels"], "kept");
    assert!(written["hooks"]["PreToolUse"].is_array(), "{written}");
    let (_, out, _) = droid_tacho(&e, &["hooks", "install", "droid"]);
    assert!(out.contains("nothing changed"), "{out}");

    let tacho_dir = tacho_bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        tacho_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(&droid)
        .current_dir(&e.ws)
        .args([
            "exec",
            "--auto",
            "high",
            "-m",
            "custom:mock-model",
            "-o",
            "stream-json",
        ])
        .arg("Edit notes.txt, write hello.txt, then run a failing command.")
        .env_clear()
        .env("HOME", &user)
        .env("PATH", path)
        .env("TACHO_HOME", &e.home)
        .env("FACTORY_AIRGAP_ENABLED", "true")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    drop(mock);
    assert!(
        out.status.success(),
        "droid: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(e.ws.join("notes.txt")).unwrap(),
        "new line\n"
    );
    let log = std::fs::read_to_string(e.home.join("logs/hooks.log")).unwrap_or_default();
    assert!(log.trim().is_empty(), "hook problems:\n{log}");

    // The session is droid's own id: its transcript's name.
    let sessions = factory.join("sessions");
    let transcript = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|f| f.path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .unwrap_or_else(|| panic!("no transcript under {}", sessions.display()));
    let session = transcript
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();

    // Every call, with its result; the failing one an error with its exit code.
    let g = e.json(&["graph", &session, "--format", "json"]);
    let tools: Vec<&serde_json::Value> = g["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["tools"].as_array().unwrap().iter())
        .collect();
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["tool"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, ["Create", "Edit", "Execute", "Execute"], "{g}");
    let (_, trace, _) = e.tacho(&["session", "replay", &session, "--mode", "summary"]);
    let results = trace.lines().filter(|l| l.contains("tool.result")).count();
    assert_eq!(results, 4, "{trace}");
    assert!(
        trace
            .lines()
            .any(|l| l.contains("tool.result") && l.contains("error")),
        "{trace}"
    );
    let files: Vec<&str> = g["files"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    for f in ["notes.txt", "made.txt", "gone.txt", "hello.txt"] {
        assert!(files.contains(&f), "{f} not in {files:?}");
    }

    // Tokens: what the mock served, counted from droid's session totals.
    let (input, cached, output) = droid_served(&e.dir.join("requests.log"));
    let t = &g["tokens"];
    assert_eq!(
        (num(&t["in"]), num(&t["cache_read"]), num(&t["out"])),
        (input, cached, output),
        "{t}"
    );
    assert!(input > 0 && output > 0);

    // Roll back the shell step: notes.txt, made.txt and gone.txt as before it, byte for
    // byte; hello.txt (the steps before it) stays.
    roll_back_step_that_changed(&e, &session, "made.txt");
    assert_eq!(
        std::fs::read(e.ws.join("notes.txt")).unwrap(),
        b"old line\n"
    );
    assert!(!e.ws.join("made.txt").exists());
    assert_eq!(std::fs::read(e.ws.join("gone.txt")).unwrap(), b"bye\n");
    assert_eq!(
        std::fs::read_to_string(e.ws.join("hello.txt")).unwrap(),
        "hello again\n"
    );

    // The same session imported into a fresh store: its calls and the same tokens;
    // a second import adds nothing.
    let fresh = e.dir.join("fresh-home");
    let import = || {
        let mut c = tacho(&fresh);
        c.env("HOME", &user).args(["import", "droid", "--json"]);
        let (code, out, err) = run(c);
        assert_eq!(code, 0, "{out}{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    assert!(num(&import()["events_added"]) > 0);
    assert_eq!(
        num(&import()["events_added"]),
        0,
        "importing again adds nothing"
    );
    let mut c = tacho(&fresh);
    c.args(["graph", &session, "--format", "json"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    let ig: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let it = &ig["tokens"];
    assert_eq!(
        (num(&it["in"]), num(&it["cache_read"]), num(&it["out"])),
        (input, cached, output),
        "{it}"
    );
    // And they are ccusage's for the same session.
    let Some(ccusage) = npm_bin("ccusage") else {
        return;
    };
    let cc = ccusage_json(&ccusage, &["droid", "session"], "HOME", &user);
    let row = cc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sessionId"] == session.as_str())
        .unwrap_or_else(|| panic!("{session} not in {cc}"));
    assert_tokens_as_ccusage(it, row);
}

/// The completion gate with the real Factory Droid CLI: the agent creates an assured
/// goal on its own session (its id is its transcript's name), stops before the goal's
/// check ran, is sent back once by the Stop hook, runs the check, and its next stop
/// completes the goal.
#[test]
fn droid_stop_gate_sends_it_back_once_when_a_check_is_missing() {
    let Some(droid) = droid_bin() else {
        return;
    };
    let e = Env::new();
    let user = e.dir.join("user");
    let factory = user.join(".factory");
    std::fs::create_dir_all(&factory).unwrap();
    std::fs::write(e.dir.join("plan.md"), PLAN).unwrap();
    let tacho_path = tacho_bin().display().to_string();
    let session = r#""$(basename "$(ls "$HOME"/.factory/sessions/*/*.jsonl)" .jsonl)""#;
    let plan = e.dir.join("plan.md").display().to_string();
    let script = serde_json::json!([
        [{"tool": "Execute", "input": {"command": format!("'{tacho_path}' goal create --session {session} --plan '{plan}' --assure"), "riskLevelReason": "records a goal", "riskLevel": "low"}}],
        [{"text": "Done."}],
        {"until_text": "cannot complete",
         "then": [{"tool": "Execute", "input": {"command": format!("sed -i s/41/42/ src/value.txt && '{tacho_path}' goal check parity --session {session}"), "riskLevelReason": "runs the check", "riskLevel": "low"}}],
         "else": [{"text": "the gate did not block"}]},
        [{"text": "Checked: done."}]
    ]);
    let mock = Mock::start(&e.dir, &script);
    let settings = serde_json::json!({"customModels": [{
        "model": "mock-model", "displayName": "Mock",
        "baseUrl": format!("http://127.0.0.1:{}/v1", mock.port), "apiKey": "mock-key",
        "provider": "generic-chat-completion-api", "maxOutputTokens": 4096}]});
    std::fs::write(factory.join("settings.json"), settings.to_string()).unwrap();
    let (code, out, err) = droid_tacho(&e, &["hooks", "install", "droid"]);
    assert_eq!(code, 0, "{out}{err}");
    let path = format!(
        "{}:{}",
        tacho_bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(&droid)
        .current_dir(&e.ws)
        .args([
            "exec",
            "--auto",
            "high",
            "-m",
            "custom:mock-model",
            "-o",
            "stream-json",
        ])
        .arg("Make the value the answer")
        .env_clear()
        .env("HOME", &user)
        .env("PATH", path)
        .env("TACHO_HOME", &e.home)
        .env("FACTORY_AIRGAP_ENABLED", "true")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    drop(mock);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "droid: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("the gate did not block"), "{stdout}");
    assert_one_stop_blocked_and_no_problem(&e);
    let session = std::fs::read_dir(factory.join("sessions"))
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|f| f.path())
        .find(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .and_then(|p| Some(p.file_stem()?.to_string_lossy().into_owned()))
        .unwrap();
    let st = e.json(&["goal", "status", "--session", &session, "--json"]);
    assert_eq!(st["completed"], true, "{st}");
}

const QWEN_SESSION: &str = "5e551011-aaaa-4bbb-8ccc-00000000a030";

/// Runs the Qwen Code CLI as the fixture's `run.sh` does, offline (outside a network
/// namespace, where the network is closed, its first request waited for its 8-minute
/// timeout here).
fn qwen_run_offline(
    qwen: &Path,
    dir: &Path,
    ws: &Path,
    qhome: &Path,
    tacho_home: &Path,
    script: &serde_json::Value,
) -> Option<std::process::Output> {
    let cmd = r#"cd "$WS" && OPENAI_BASE_URL="http://127.0.0.1:$PORT/v1" timeout 300 "$QWEN" --auth-type openai --yolo -o stream-json --session-id "$SESSION" -p "Make the value the answer""#;
    run_offline(
        dir,
        script,
        tacho_home,
        cmd,
        &[
            ("WS", ws.as_os_str()),
            ("QWEN", qwen.as_os_str()),
            ("SESSION", QWEN_SESSION.as_ref()),
            ("HOME", qhome.as_os_str()),
            ("OPENAI_API_KEY", "mock-key".as_ref()),
            ("OPENAI_MODEL", "mock-model".as_ref()),
            ("QWEN_CODE_SUPPRESS_YOLO_WARNING", "1".as_ref()),
        ],
    )
}

/// The real Qwen Code CLI (npm `@qwen-code/qwen-code`, pinned) against the mock's Chat
/// Completions API, with the hooks `tacho hooks install qwen-code` wrote into its
/// isolated `~/.qwen/settings.json`: its tool calls (ids are the model's), a shell
/// step rolled back byte for byte, tokens equal to what the mock served (live and
/// imported; ccusage counts Qwen's cached tokens twice, so the mock is the reference),
/// and the stop gate sending it back once.
#[test]
fn qwen_code_recorded_through_hooks_with_rollback_and_the_stop_gate() {
    let Some(qwen) = npm_bin("qwen") else {
        return;
    };
    let e = Env::new();
    let qhome = e.dir.join("qwen-home");
    std::fs::create_dir_all(qhome.join(".qwen")).unwrap();
    // The user's own settings stay: tacho merges its hooks in.
    std::fs::write(
        qhome.join(".qwen/settings.json"),
        r#"{"privacy": {"usageStatisticsEnabled": false}, "telemetry": {"enabled": false}, "general": {"disableAutoUpdate": true, "disableUpdateNag": true}}"#,
    )
    .unwrap();
    let (code, out, err) =
        tacho_in_home(&e.home, &qhome, &e.ws, &["hooks", "install", "qwen-code"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("installed tacho's qwen-code hooks"), "{out}");
    let (_, out, _) = tacho_in_home(&e.home, &qhome, &e.ws, &["hooks", "install", "qwen-code"]);
    assert!(out.contains("nothing changed"), "{out}");
    let settings: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(qhome.join(".qwen/settings.json")).unwrap())
            .unwrap();
    assert_eq!(settings["telemetry"]["enabled"], false, "{settings}");
    assert!(
        settings["hooks"]["PostToolUseFailure"].is_array(),
        "{settings}"
    );

    // The session exists before the agent starts (Qwen takes its id), with an assured
    // goal whose check has not run.
    assured_session(&e, QWEN_SESSION, "qwen-code");

    let value = e.ws.join("src/value.txt").display().to_string();
    let hello = e.ws.join("hello.txt").display().to_string();
    let tacho_path = tacho_bin().display().to_string();
    let script = serde_json::json!([
        [{"text": "Reading."}, {"tool": "read_file", "input": {"file_path": value}}],
        [{"tool": "edit", "input": {"file_path": value, "old_string": "41", "new_string": "42"}}],
        [{"tool": "run_shell_command", "input": {"command": "echo made > made.txt && rm -f gone.txt", "description": "write and delete"}}],
        [{"tool": "write_file", "input": {"file_path": hello, "content": "hello\n"}}],
        [{"tool": "run_shell_command", "input": {"command": "echo about-to-fail; exit 3", "description": "fail"}}],
        [{"text": "Done."}],
        {"until_text": "cannot complete",
         "then": [{"tool": "run_shell_command", "input": {"command": format!("'{tacho_path}' goal check parity --session {QWEN_SESSION}"), "description": "run the check"}}],
         "else": [{"text": "the gate did not block"}]},
        [{"text": "Checked: done."}]
    ]);
    let Some(out) = qwen_run_offline(&qwen, &e.dir, &e.ws, &qhome, &e.home, &script) else {
        return;
    };
    assert!(
        out.status.success(),
        "qwen: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/value.txt")).unwrap(),
        "42\n",
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(e.ws.join("made.txt").exists() && !e.ws.join("gone.txt").exists());
    assert_one_stop_blocked_and_no_problem(&e);

    // Every tool call, by Qwen's names, the failure with its exit code.
    let g = e.json(&["graph", QWEN_SESSION, "--format", "json"]);
    let tools = graph_tools(&g);
    let ok = |t: &str| (t.to_string(), "ok".to_string());
    assert_eq!(
        tools,
        [
            ok("read_file"),
            ok("edit"),
            ok("run_shell_command"),
            ok("write_file"),
            ("run_shell_command".to_string(), "error".to_string()),
            ok("run_shell_command"),
        ],
        "{g}"
    );
    // Tokens: what the mock served, the last reply too. Qwen Code writes the reply
    // after which it stops to its transcript concurrently with the `Stop` hook (most
    // runs after it): the session's end waits until the transcript stopped growing
    // (issue 43).
    let log = e.dir.join("requests.log");
    let (input, cached, output) = chat_served(&log);
    let ended = graph_once_ended(&e, QWEN_SESSION);
    assert_live_tokens_served(&ended["tokens"], &log);
    // The gate sent it back once; the check then ran and completion was accepted.
    let st = e.json(&["goal", "status", "--session", QWEN_SESSION, "--json"]);
    assert_eq!(st["completed"], true, "{st}");

    // Each step lists the files it changed: the edit's (after a read, issue 43).
    let points = e.json(&["session", "rollback", QWEN_SESSION, "--list", "--json"]);
    let files: Vec<&serde_json::Value> = points["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["files"])
        .collect();
    assert_eq!(files[0], &serde_json::json!(["src/value.txt"]), "{points}");
    assert_eq!(files[2], &serde_json::json!(["hello.txt"]), "{points}");
    // Roll back the shell command's step: its files come back, the edit before stays.
    roll_back_the_shell_step(&e, QWEN_SESSION);

    // Importing ~/.qwen/projects into a fresh store gives the same tokens; again, nothing.
    let fresh = e.dir.join("fresh-home");
    let (_, g) = import_twice(
        |args| tacho_in_home(&fresh, &qhome, &e.ws, args),
        "qwen-code",
        QWEN_SESSION,
    );
    assert_eq!(graph_tokens(&g), (input, cached, output), "imported: {g}");
    // Importing into the store the hooks recorded completes the session's usage: the
    // last reply the hooks may have missed, once (issue 43).
    for _ in 0..2 {
        let (code, out, err) =
            tacho_in_home(&e.home, &qhome, &e.ws, &["import", "qwen-code", "--json"]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let g = e.json(&["graph", QWEN_SESSION, "--format", "json"]);
    assert_eq!(graph_tokens(&g), (input, cached, output), "completed: {g}");
    // Every call was the agent's: its transcript names them all.
    let risk = e.json(&["risk", QWEN_SESSION, "--json"]);
    assert!(!risk.to_string().contains("calls_unconfirmed"), "{risk:#}");
}

/// Issue 42 (9) with the real Qwen Code CLI: from its shell the agent pipes a made-up
/// `PreToolUse`/`PostToolUse` pair for a test run that never happened to `tacho hook
/// qwen-code`. Its transcript names every call it made by the model's call id (what
/// its hooks report as `tool_call_id`): the made-up call is unconfirmed and never
/// counts as verification; the real one is confirmed.
#[test]
fn qwen_code_a_call_piped_from_its_shell_is_unconfirmed() {
    let Some(qwen) = npm_bin("qwen") else {
        return;
    };
    let e = Env::new();
    let qhome = e.dir.join("qwen-home");
    std::fs::create_dir_all(qhome.join(".qwen")).unwrap();
    let (code, out, err) =
        tacho_in_home(&e.home, &qhome, &e.ws, &["hooks", "install", "qwen-code"]);
    assert_eq!(code, 0, "{out}{err}");
    let bin = tacho_bin().display().to_string();
    let ws = e.ws.display().to_string();
    let pipe = format!(
        "for ev in PreToolUse PostToolUse; do printf '{{\"session_id\":\"{QWEN_SESSION}\",\"cwd\":\"{ws}\",\"hook_event_name\":\"%s\",\"tool_name\":\"run_shell_command\",\"tool_input\":{{\"command\":\"python3 -m pytest -q\"}},\"tool_call_id\":\"call_madeup\",\"tool_response\":{{\"llmContent\":\"1 passed\"}}}}' \"$ev\" | '{bin}' hook qwen-code; done"
    );
    let script = serde_json::json!([
        [{"tool": "run_shell_command", "input": {"command": "echo made > made.txt", "description": "write"}}],
        [{"tool": "run_shell_command", "input": {"command": pipe, "description": "pipe"}}],
        [{"text": "Done."}]
    ]);
    let Some(out) = qwen_run_offline(&qwen, &e.dir, &e.ws, &qhome, &e.home, &script) else {
        return;
    };
    assert!(
        out.status.success(),
        "qwen: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(e.ws.join("made.txt").exists());
    let risk = e.json(&["risk", QWEN_SESSION, "--json"]);
    assert_only_the_made_up_call_is_unconfirmed(&risk, "call_madeup");
}

/// Issue 42 (1, 6) with the real Claude Code CLI: the agent ends its own session from
/// its shell (`tacho session end`), then pipes five `Stop` payloads to `tacho hook`
/// from one Bash call. The continuation carries the open goal and says the session was
/// ended from inside a call; the piped stops count for nothing (no pause); the agent's
/// real stop is refused.
#[test]
fn claude_code_cannot_end_its_session_or_pipe_stops_to_escape_the_gate() {
    let Some(claude) = npm_bin("claude") else {
        return;
    };
    let e = Env::new();
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code"]);
    assert_eq!(code, 0, "{out}{err}");
    assured_session(&e, SESSION, "claude-code");
    let tacho_path = tacho_bin().display().to_string();
    let stop = e.dir.join("stop.json");
    std::fs::write(
        &stop,
        serde_json::json!({"session_id": SESSION, "cwd": e.ws, "hook_event_name": "Stop",
            "transcript_path": "/dev/null"})
        .to_string(),
    )
    .unwrap();
    let script = serde_json::json!([
        [{"tool": "Bash", "input": {"command": format!("'{tacho_path}' session end {SESSION}"), "description": "end my session"}}],
        [{"tool": "Bash", "input": {"command": format!("for i in 1 2 3 4 5; do '{tacho_path}' hook claude-code < '{}'; done", stop.display()), "description": "stop five times"}}],
        [{"text": "Done."}],
        {"until_text": "cannot complete",
         "then": [{"text": "Still not done."}],
         "else": [{"text": "the gate did not block"}]},
    ]);
    let mock = Mock::start(&e.dir, &script);
    let _ = e.claude(&claude, &mock, SESSION, "Make the value the answer");
    drop(mock);

    let cont = format!("{SESSION}.2");
    let risk = e.json(&["risk", &cont, "--json"]);
    let acted = risk["factors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "agent_acted_on_tacho")
        .unwrap_or_else(|| panic!("{risk:#}"));
    assert!(
        acted["evidence"]
            .as_str()
            .unwrap()
            .contains(&format!("session {SESSION} was ended while call")),
        "{acted}"
    );
    // The goal holds: not completed; the five piped stops were refused as no stops of
    // the agent's and counted for nothing, so its first real stop was refused as a
    // completion attempt (not paused as a fourth fruitless one), and only its real
    // stops (three, then the pause it is told of) count towards the stall rule.
    let st = e.json(&["goal", "status", "--session", SESSION, "--json"]);
    assert_eq!(st["completed"], false, "{st}");
    let log = std::fs::read_to_string(e.home.join("logs/hooks.log")).unwrap_or_default();
    let piped = |l: &&str| l.contains("a stop arrived while tool call(s)");
    assert_eq!(
        log.lines()
            .filter(|l| piped(l) && !l.contains("stop blocked"))
            .count(),
        5,
        "{log}"
    );
    let real: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("stop blocked") && !piped(l))
        .collect();
    assert!(
        real.first().is_some_and(|l| l.contains("cannot complete")),
        "{log}"
    );
    let (_, trace, _) = e.tacho(&["session", "replay", SESSION, "--mode", "summary"]);
    let (_, trace2, _) = e.tacho(&["session", "replay", &cont, "--mode", "summary"]);
    let refused = format!("{trace}{trace2}")
        .lines()
        .filter(|l| l.contains("goal.update") && l.contains("complete") && l.contains("refused"))
        .count();
    assert!((1..=3).contains(&refused), "{trace}{trace2}");
    // The real agent's own calls are all confirmed by its transcript.
    for s in [SESSION, cont.as_str()] {
        let risk = e.json(&["risk", s, "--json"]);
        assert!(!risk.to_string().contains("calls_unconfirmed"), "{risk:#}");
    }
}

/// Issue 42 (2) with the real Claude Code CLI: the agent holds its session's hook lock
/// from its shell (`flock … sleep &`). The hook after that call waits out its budget
/// and records nothing; the next hook that gets the lock records the obstruction; the
/// agent's stop is refused while its assured goal is open.
#[test]
fn claude_code_holding_its_hook_lock_is_recorded_and_does_not_escape_the_gate() {
    let Some(claude) = npm_bin("claude") else {
        return;
    };
    if Command::new("flock").arg("--version").output().is_err() {
        tacho_tests::skip_without("flock");
        return;
    }
    let e = Env::new();
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code"]);
    assert_eq!(code, 0, "{out}{err}");
    assured_session(&e, SESSION, "claude-code");
    let lock = e.home.join(format!("agents/claude-code/{SESSION}.lock"));
    let script = serde_json::json!([
        [{"tool": "Bash", "input": {"command": format!("(flock '{}' sleep 23 >/dev/null 2>&1 &)", lock.display()), "description": "hold the lock"}}],
        [{"text": "Done."}],
        {"until_text": "cannot complete",
         "then": [{"text": "Still not done."}],
         "else": [{"text": "the gate did not block"}]},
    ]);
    let mock = Mock::start(&e.dir, &script);
    let _ = e.claude(&claude, &mock, SESSION, "Make the value the answer");
    drop(mock);
    let risk = e.json(&["risk", SESSION, "--json"]);
    assert!(
        risk.to_string().contains("\"recorder_obstructed\""),
        "{risk:#}"
    );
    let st = e.json(&["goal", "status", "--session", SESSION, "--json"]);
    assert_eq!(st["completed"], false, "{st}");
    let log = std::fs::read_to_string(e.home.join("logs/hooks.log")).unwrap_or_default();
    assert!(
        log.contains("waiting for another hook of the session"),
        "{log}"
    );
    assert!(log.contains("stop blocked"), "{log}");
}
