//! Subagents and imports that read like the session, with the real Claude Code CLI
//! (npm `@anthropic-ai/claude-code`, pinned in `tests/agents/package.json`) run offline
//! against the loopback mock (`tests/agents/mock_messages_api.py`): the main agent
//! delegates to a subagent (`Agent`), which runs a shell command; then it edits a file
//! and runs a command that takes seconds. Recorded live by tacho's hooks and imported
//! from the transcripts the CLI wrote: the subagent is a child session with its own
//! tokens, the parent's graph names it, the imported session reads in time order with
//! its edit's lines counted, a stale transcript gets an inferred end, and a transcript
//! that grows after it (the conversation resumed) goes on as `<id>.2`. The committed
//! captures of the other agents (`tests/agents/fixtures/`) import in time order too.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use tacho_tests::{run, tacho};

const S: &str = "5e551011-aaaa-4bbb-8ccc-000000000030";

/// The mock's script. The subagent's requests are told apart by what their last user
/// message holds: its task (`SUBTASK`), then its shell command's output (`SUBDONE`).
/// Turns 4 and 5 answer the resumed conversation.
fn script(value: &str) -> serde_json::Value {
    serde_json::json!([
        {"until_text": "SUBTASK",
         "then": [{"tool": "Bash", "input": {"command": "echo SUBDONE; echo from-subagent >> notes.txt", "description": "append"}}],
         "else": [{"text": "Delegating."}, {"tool": "Agent", "input": {"description": "append a line", "prompt": "SUBTASK: append a line to notes.txt with the shell, then report.", "subagent_type": "general-purpose", "run_in_background": false}}]},
        {"until_text": "SUBDONE",
         "then": [{"text": "Subagent: appended the line."}],
         "else": [{"tool": "Edit", "input": {"file_path": value, "old_string": "41", "new_string": "42\n43"}}]},
        [{"tool": "Bash", "input": {"command": "sleep 2; echo slept", "description": "wait"}}],
        [{"text": "Done."}],
        [{"tool": "Bash", "input": {"command": "echo again >> notes.txt", "description": "once more"}}],
        [{"text": "Done again."}]
    ])
}

/// Runs the Claude Code CLI offline on `prompt` (`args` after it), the mock's ids
/// numbered from `first_id`; its JSON result.
fn claude_offline(e: &Env, prompt: &str, args: &str, first_id: &str) -> Option<serde_json::Value> {
    let claude = npm_bin("claude")?;
    // The mock of an earlier run left its port file: the new one writes its own.
    let _ = std::fs::remove_file(e.dir.join("port"));
    let value = e.ws.join("src/value.txt").display().to_string();
    let command = format!(
        r#"cd "$WS" && ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT" "$CLAUDE" -p "{prompt}" {args} --dangerously-skip-permissions --output-format json"#
    );
    let out = run_offline(
        &e.dir,
        &script(&value),
        &e.home,
        &command,
        &[
            ("WS", e.ws.as_os_str()),
            ("CLAUDE", claude.as_os_str()),
            ("ANTHROPIC_API_KEY", "anything".as_ref()),
            ("CLAUDE_CONFIG_DIR", e.cfg.as_os_str()),
            ("DISABLE_TELEMETRY", "1".as_ref()),
            ("DISABLE_AUTOUPDATER", "1".as_ref()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".as_ref()),
            ("IS_SANDBOX", "1".as_ref()),
            ("MOCK_ID_START", first_id.as_ref()),
        ],
    )?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "claude: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}")))
}

/// `tacho ARGS` against the data directory `home`, which must succeed: its JSON.
fn json_in(home: &Path, e: &Env, args: &[&str]) -> serde_json::Value {
    let mut c = tacho(home);
    c.current_dir(&e.ws)
        .env("CLAUDE_CONFIG_DIR", &e.cfg)
        .env_remove("TACHO_IMPORT_STALE_AFTER")
        .args(args);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "tacho {args:?}: {out}{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Every session's events, as `session replay --mode summary --json` gives them.
fn events(home: &Path, session: &str) -> Vec<serde_json::Value> {
    let mut c = tacho(home);
    c.args(["session", "replay", session, "--mode", "summary", "--json"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The times of a session's events never go back.
fn assert_in_time_order(evs: &[serde_json::Value], session: &str) {
    let times: Vec<i64> = evs
        .iter()
        .map(|v| tacho_schema::parse_ts(&v["ts"]).unwrap())
        .collect();
    for w in times.windows(2) {
        assert!(w[0] <= w[1], "{session}: {} after {}\n{evs:#?}", w[1], w[0]);
    }
}

/// The bytes of every file of the log, by path: what an import that adds nothing
/// must leave as it was.
fn log_bytes(home: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![home.join("log")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.display().to_string(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The sessions `session list --json` lists.
fn listed(home: &Path) -> Vec<serde_json::Value> {
    let mut c = tacho(home);
    c.args(["session", "list", "--json"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    out.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .collect()
}

/// An import's report says it added nothing, and the log's bytes are `before`'s.
fn assert_added_nothing(
    report: &serde_json::Value,
    home: &Path,
    before: &BTreeMap<String, Vec<u8>>,
) {
    assert_eq!(num(&report["events_added"]), 0, "{report}");
    assert_eq!(num(&report["sessions_ended_inferred"]), 0, "{report}");
    assert!(
        log_bytes(home) == *before,
        "an import that adds nothing wrote: {report}"
    );
}

#[test]
fn claude_code_subagent_is_a_child_session_live_and_imported_in_time_order() {
    if npm_bin("claude").is_none() {
        return;
    }
    let e = Env::new();
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code"]);
    assert_eq!(code, 0, "{out}{err}");
    let Some(result) = claude_offline(&e, "Do the task", &format!("--session-id {S}"), "0") else {
        return;
    };
    assert_eq!(
        std::fs::read_to_string(e.ws.join("notes.txt")).unwrap(),
        "from-subagent\n"
    );
    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/value.txt")).unwrap(),
        "42\n43\n"
    );
    let log = std::fs::read_to_string(e.home.join("logs/hooks.log")).unwrap_or_default();
    assert!(log.is_empty(), "hook problems:\n{log}");
    // What the model served: the result's `usage` is the main agent's, `modelUsage`
    // counts the subagent's requests too.
    let main_in = num(&result["usage"]["input_tokens"]);
    let main_out = num(&result["usage"]["output_tokens"]);
    let all = result["modelUsage"].as_object().unwrap();
    let all_in: u64 = all.values().map(|m| num(&m["inputTokens"])).sum();
    let all_out: u64 = all.values().map(|m| num(&m["outputTokens"])).sum();
    let (sub_in, sub_out) = (all_in - main_in, all_out - main_out);
    assert!(sub_in > 0 && sub_out > 0, "{result}");

    // Live: the subagent is a child session with its own call and tokens, and the
    // parent's graph routes to it.
    let check = |home: &Path, how: &str| {
        let kids: Vec<serde_json::Value> = listed(home)
            .into_iter()
            .filter(|s| s["parent"] == S)
            .collect();
        assert_eq!(kids.len(), 1, "{how}: {kids:?}");
        let kid = kids[0]["session"].as_str().unwrap().to_owned();
        assert!(kid.starts_with(&format!("{S}.")), "{how}: {kid}");
        assert_eq!(kids[0]["agent"], "general-purpose", "{how}: its type");
        assert_eq!(
            (num(&kids[0]["tokens_in"]), num(&kids[0]["tokens_out"])),
            (sub_in, sub_out),
            "{how}: the subagent's tokens"
        );
        let g = json_in(home, &e, &["graph", &kid, "--format", "json"]);
        let tools: Vec<&str> = g["steps"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|s| s["tools"].as_array().unwrap())
            .map(|t| t["tool"].as_str().unwrap())
            .collect();
        assert_eq!(tools, ["Bash"], "{how}: {g}");
        let g = json_in(home, &e, &["graph", S, "--format", "json"]);
        assert_eq!(
            (num(&g["tokens"]["in"]), num(&g["tokens"]["out"])),
            (main_in, main_out),
            "{how}: the main agent's tokens"
        );
        let routes = g["routes"].as_array().unwrap();
        assert!(
            routes
                .iter()
                .any(|r| r["reason"].as_str().unwrap_or("").contains(&kid)),
            "{how}: the parent names its child: {g}"
        );
        let value = g["files"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(k, _)| k.ends_with("src/value.txt"))
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{how}: {g}"));
        assert_eq!(
            (num(&value["lines_added"]), num(&value["lines_removed"])),
            (2, 1),
            "{how}: the edit's lines"
        );
        (kid, g)
    };
    let (live_kid, _) = check(&e.home, "live");

    // Imported into a fresh store: the same child, tokens, route and lines; every
    // session in time order, so the duration covers the two-second command.
    let fresh = e.dir.join("fresh-home");
    let import = |args: &[&str]| {
        let mut a = vec!["import", "claude-code", "--json"];
        a.extend_from_slice(args);
        json_in(&fresh, &e, &a)
    };
    let first = import(&["--stale-after", "never"]);
    assert_eq!(num(&first["sessions_created"]), 2, "{first}");
    let not_ended = json_in(&fresh, &e, &["graph", S, "--format", "json"]);
    assert_eq!(
        not_ended["end_reason"],
        serde_json::Value::Null,
        "{not_ended}"
    );
    assert_eq!(num(&first["sessions_ended_inferred"]), 0, "{first}");
    let (kid, g) = check(&fresh, "imported");
    assert_eq!(kid, live_kid, "the same child session live and imported");
    for s in [S, kid.as_str()] {
        assert_in_time_order(&events(&fresh, s), s);
    }
    let bash = g["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["tools"].as_array().unwrap())
        .find(|t| t["target"].as_str().unwrap_or("").starts_with("sleep 2"))
        .unwrap_or_else(|| panic!("{g}"))
        .clone();
    let (started, duration) = (num(&g["started_unix_ns"]), num(&g["duration_ms"]));
    assert!(duration >= 2_000, "{duration} ms: {g}");
    assert!(
        started + duration * 1_000_000 >= num(&bash["started_unix_ns"]) + 2_000_000_000,
        "the duration covers the command's result: {g}"
    );
    assert_eq!(g["end_reason"], serde_json::Value::Null, "{g}");

    // Importing again adds nothing and leaves the log's bytes as they were.
    let before = log_bytes(&fresh);
    assert_added_nothing(&import(&["--stale-after", "never"]), &fresh, &before);

    // Stale: the transcripts have not grown for a second, so both sessions get an
    // inferred end, once.
    std::thread::sleep(Duration::from_millis(1_100));
    let ended = import(&["--stale-after", "1s"]);
    assert_eq!(num(&ended["sessions_ended_inferred"]), 2, "{ended}");
    let g = json_in(&fresh, &e, &["graph", S, "--format", "json"]);
    assert_eq!(g["end_reason"], "completed", "{g}");
    let end = events(&fresh, S).pop().unwrap();
    assert_eq!(end["type"], "session.end", "{end}");
    assert!(
        end.to_string().contains("inferred by tacho import"),
        "{end}"
    );
    let status: Vec<serde_json::Value> = listed(&fresh)
        .into_iter()
        .filter(|s| s["session"] == S)
        .map(|s| s["status"].clone())
        .collect();
    assert_eq!(status, ["completed"], "no longer listed as running");
    let before = log_bytes(&fresh);
    assert_added_nothing(&import(&["--stale-after", "1s"]), &fresh, &before);

    // The conversation resumes: its transcript grows after the inferred end, and the
    // next import goes on as `<id>.2`, child of the ended one, with the new call only.
    if claude_offline(&e, "Once more", &format!("--resume {S}"), "1000").is_none() {
        return;
    }
    assert_eq!(
        std::fs::read_to_string(e.ws.join("notes.txt")).unwrap(),
        "from-subagent\nagain\n"
    );
    let grown = import(&["--stale-after", "1h"]);
    assert_eq!(num(&grown["sessions_continued"]), 1, "{grown}");
    assert!(
        grown["unknown_entries"].as_object().unwrap().is_empty(),
        "{grown}"
    );
    let next = format!("{S}.2");
    // The hooks named the resumed conversation the same way.
    let live = json_in(&e.home, &e, &["graph", &next, "--format", "json"]);
    assert_eq!(live["parent"], S, "{live}");
    let g = json_in(&fresh, &e, &["graph", &next, "--format", "json"]);
    assert_eq!(g["parent"], S, "{g}");
    let tools: Vec<String> = g["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["tools"].as_array().unwrap())
        .map(|t| format!("{} {}", t["tool"], t["target"]))
        .collect();
    assert_eq!(tools.len(), 1, "only the new call: {tools:?}");
    assert!(tools[0].contains("echo again"), "{tools:?}");
    assert_in_time_order(&events(&fresh, &next), &next);
    let again = import(&["--stale-after", "1h"]);
    assert_eq!(num(&again["events_added"]), 0, "{again}");
}

/// The committed captures of the other agents with imports (Qwen Code, Factory
/// Droid, with their subagent runs) import in time order, with their edits' lines
/// counted, idempotently; stale, they end once.
#[test]
fn committed_captures_import_in_time_order_with_edit_lines() {
    let fixtures = agents_dir().join("fixtures");
    let e = Env::new();
    for (agent, homes) in [
        ("qwen-code", ["qwen-code/home", "qwen-code/subagent/home"]),
        ("droid", ["droid/home", "droid/subagent/home"]),
    ] {
        let home = e.dir.join(format!("home-{agent}"));
        let dirs: Vec<String> = homes
            .iter()
            .map(|h| fixtures.join(h).display().to_string())
            .collect();
        let import = |stale: &str| {
            let mut a = vec!["import", agent, "--json", "--stale-after", stale];
            a.extend(dirs.iter().map(String::as_str));
            json_in(&home, &e, &a)
        };
        let first = import("never");
        assert!(num(&first["sessions_created"]) >= 3, "{agent}: {first}");
        let sessions: Vec<String> = first["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect();
        let mut edits = Vec::new();
        for s in &sessions {
            let evs = events(&home, s);
            assert_in_time_order(&evs, s);
            let g = json_in(&home, &e, &["graph", s, "--format", "json"]);
            for (path, f) in g["files"].as_object().unwrap() {
                edits.push((
                    path.rsplit('/').next().unwrap_or("").to_owned(),
                    num(&f["lines_added"]),
                    num(&f["lines_removed"]),
                ));
            }
        }
        // Droid: `Create` of a one-line file, then an `Edit` of that line (one file,
        // two edits); Qwen Code: `write_file` and `edit` of its file.
        assert!(
            edits.iter().any(|(_, a, r)| *a > 0 && *r > 0),
            "{agent}: edits with lines: {edits:?}"
        );
        if agent == "droid" {
            assert!(
                edits.contains(&("hello.txt".to_owned(), 2, 1)),
                "{agent}: {edits:?}"
            );
        }
        let before = log_bytes(&home);
        assert_added_nothing(&import("never"), &home, &before);
        // The captures are files of the checkout, older than a second.
        std::thread::sleep(Duration::from_millis(1_100));
        let ended = import("1s");
        assert_eq!(
            num(&ended["sessions_ended_inferred"]),
            sessions.len() as u64,
            "{agent}: {ended}"
        );
        for s in &sessions {
            let evs = events(&home, s);
            assert_in_time_order(&evs, s);
            assert_eq!(evs.last().unwrap()["type"], "session.end", "{s}");
        }
        // Ended, they no longer list as running.
        let running: Vec<serde_json::Value> = listed(&home)
            .into_iter()
            .filter(|s| s["status"] == "running")
            .collect();
        assert!(running.is_empty(), "{agent}: {running:?}");
        let before = log_bytes(&home);
        assert_added_nothing(&import("1s"), &home, &before);
    }
}

/// A session whose hooks keep its state is theirs to end: an import of its stale
/// transcript adds what is new but no inferred end (its agent may be waiting on its
/// user); a session without hooks gets one.
#[test]
fn an_import_leaves_the_end_of_a_hooked_session_to_its_hooks() {
    let e = Env::new();
    let ws = e.ws.display().to_string();
    let write = |id: &str| {
        let lines = [
            serde_json::json!({"type": "user", "sessionId": id, "cwd": ws, "timestamp": "2026-11-20T09:00:00Z", "message": {"content": "go"}}),
            serde_json::json!({"type": "assistant", "sessionId": id, "timestamp": "2026-11-20T09:00:01Z", "message": {"id": format!("m-{id}"), "usage": {"input_tokens": 5, "output_tokens": 1}, "content": [{"type": "text", "text": "waiting"}]}}),
        ];
        let path = e.dir.join(format!("{id}.jsonl"));
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&path, text).unwrap();
        path
    };
    let hooked = write("hooked-1");
    let plain = write("plain-1");
    e.send(
        "hooked-1",
        "UserPromptSubmit",
        serde_json::json!({"prompt": "go", "transcript_path": hooked.display().to_string()}),
    );
    std::thread::sleep(Duration::from_millis(1_100));
    let r = json_in(
        &e.home,
        &e,
        &[
            "import",
            "claude-code",
            "--json",
            "--stale-after",
            "1s",
            hooked.to_str().unwrap(),
            plain.to_str().unwrap(),
        ],
    );
    assert_eq!(num(&r["sessions_ended_inferred"]), 1, "{r}");
    let status = |s: &str| {
        listed(&e.home)
            .into_iter()
            .find(|l| l["session"] == s)
            .map(|l| l["status"].clone())
            .unwrap_or_else(|| panic!("{s} not listed"))
    };
    assert_eq!(status("hooked-1"), "running");
    assert_eq!(status("plain-1"), "completed");
}
