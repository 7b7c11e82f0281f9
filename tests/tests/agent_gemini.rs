//! The real Gemini CLI (npm `@google/gemini-cli`, pinned in tests/agents) recorded by
//! the hooks `tacho hooks install gemini` wrote, run offline against the mock's Gemini
//! API.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

mod common;

use std::path::Path;

use common::{
    Env, assert_one_stop_blocked_and_no_problem, assured_session, ccusage_json, graph_tokens,
    graph_tools, import_twice, npm_bin, num, roll_back_the_shell_step, run_offline, tacho_in_home,
};
use tacho_tests::{run, tacho, tacho_bin};

const SESSION: &str = "5e551011-aaaa-4bbb-8ccc-00000000a031";

/// What the mock served, summed from its log's `gemini_usage`, in tacho's terms:
/// (input without the cached tokens, cached, output with the thoughts, requests).
fn served(log: &Path) -> (u64, u64, u64, u64) {
    let mut sum = (0, 0, 0, 0);
    for l in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else {
            continue;
        };
        let u = &v["gemini_usage"];
        let cached = num(&u["cachedContentTokenCount"]);
        sum.0 += num(&u["promptTokenCount"]) - cached;
        sum.1 += cached;
        sum.2 += num(&u["candidatesTokenCount"]) + num(&u["thoughtsTokenCount"]);
        sum.3 += 1;
    }
    sum
}

/// The real Gemini CLI against the mock's Gemini API, with the hooks `tacho hooks
/// install gemini` wrote into its isolated `~/.gemini/settings.json`: its tool calls
/// by Gemini's names (no call ids: paired by order), the failing shell Gemini reports
/// as a success recorded as failed with its exit code, a shell step rolled back byte
/// for byte, tokens equal to what the mock served (live and imported; ccusage agrees
/// on input, cached and total, and leaves the thoughts out of its output), and the
/// stop gate sending it back once.
#[test]
fn gemini_recorded_through_hooks_with_rollback_and_the_stop_gate() {
    let Some(gemini) = npm_bin("gemini") else {
        return;
    };
    let e = Env::new();
    let ghome = e.dir.join("gemini-home");
    std::fs::create_dir_all(ghome.join(".gemini")).unwrap();
    // The user's own settings stay: tacho merges its hooks in.
    std::fs::write(
        ghome.join(".gemini/settings.json"),
        r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}, "telemetry": {"enabled": false}, "privacy": {"usageStatisticsEnabled": false}, "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false}}"#,
    )
    .unwrap();
    let (code, out, err) = tacho_in_home(&e.home, &ghome, &e.ws, &["hooks", "install", "gemini"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("installed tacho's gemini hooks"), "{out}");
    let (_, out, _) = tacho_in_home(&e.home, &ghome, &e.ws, &["hooks", "install", "gemini"]);
    assert!(out.contains("nothing changed"), "{out}");
    let settings: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ghome.join(".gemini/settings.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        settings["security"]["auth"]["selectedType"], "gemini-api-key",
        "{settings}"
    );
    assert_eq!(
        settings["hooks"]["BeforeTool"][0]["hooks"][0]["timeout"], 30000,
        "milliseconds: {settings}"
    );
    let (code, out, err) = tacho_in_home(&e.home, &ghome, &e.ws, &["hooks", "status", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("gemini") && out.contains("AfterAgent"),
        "{out}"
    );

    // The session exists before the agent starts (it takes its id from
    // `--session-id`), with an assured goal whose check has not run.
    assured_session(&e, SESSION, "gemini");

    let value = e.ws.join("src/value.txt").display().to_string();
    let tacho_path = tacho_bin().display().to_string();
    let script = serde_json::json!([
        // Two calls in one reply: Gemini CLI runs them at once, its hooks race.
        [{"text": "Reading."}, {"tool": "read_file", "input": {"file_path": value}}, {"tool": "list_directory", "input": {"dir_path": "."}}],
        [{"tool": "replace", "input": {"file_path": value, "old_string": "41", "new_string": "42", "instruction": "Make it the answer"}}],
        [{"tool": "run_shell_command", "input": {"command": "echo made > made.txt && rm -f gone.txt", "description": "write and delete"}}],
        [{"tool": "write_file", "input": {"file_path": "hello.txt", "content": "hello\n"}}],
        [{"tool": "run_shell_command", "input": {"command": "echo about-to-fail; exit 3", "description": "fail"}}],
        [{"text": "Done."}],
        {"until_text": "cannot complete",
         "then": [{"tool": "run_shell_command", "input": {"command": format!("'{tacho_path}' goal check parity --session {SESSION}"), "description": "run the check"}}],
         "else": [{"text": "the gate did not block"}]},
        [{"text": "Checked: done."}]
    ]);
    let started = std::time::Instant::now();
    // As the fixture's `run.sh` runs it, offline.
    let cmd = r#"cd "$WS" && GOOGLE_GEMINI_BASE_URL="http://127.0.0.1:$PORT" timeout 300 "$GEMINI" -m gemini-2.5-flash --approval-mode yolo -o stream-json --session-id "$SESSION" -p "Make the value the answer""#;
    let envs = [
        ("WS", e.ws.as_os_str()),
        ("GEMINI", gemini.as_os_str()),
        ("SESSION", SESSION.as_ref()),
        ("HOME", ghome.as_os_str()),
        ("GEMINI_API_KEY", "mock-key".as_ref()),
        ("GEMINI_CLI_TRUST_WORKSPACE", "true".as_ref()),
        ("NO_COLOR", "1".as_ref()),
    ];
    let Some(out) = run_offline(&e.dir, &script, &e.home, cmd, &envs) else {
        return;
    };
    let took = started.elapsed();
    assert!(
        out.status.success(),
        "gemini: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("gemini ran in {took:?}");

    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/value.txt")).unwrap(),
        "42\n",
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(e.ws.join("made.txt").exists() && !e.ws.join("gone.txt").exists());
    assert_eq!(
        std::fs::read_to_string(e.ws.join("hello.txt")).unwrap(),
        "hello\n"
    );
    assert_one_stop_blocked_and_no_problem(&e);

    // Every tool call, by Gemini's names (the first two, run at once, in either
    // order), each with its own result, the failing shell with its exit code.
    let g = e.json(&["graph", SESSION, "--format", "json"]);
    let mut tools = graph_tools(&g);
    let ok = |t: &str| (t.to_string(), "ok".to_string());
    tools[..2].sort();
    assert_eq!(
        tools,
        [
            ok("list_directory"),
            ok("read_file"),
            ok("replace"),
            ok("run_shell_command"),
            ok("write_file"),
            ("run_shell_command".to_string(), "error".to_string()),
            ok("run_shell_command"),
        ],
        "{g}"
    );
    let failed = g["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["tools"].as_array().unwrap().iter())
        .find(|t| t["status"] == "error")
        .unwrap();
    assert_eq!(failed["error"], "Exit Code: 3", "{failed}");
    assert!(failed["duration_ms"].is_u64(), "{failed}");

    // Tokens: what the mock served, every reply (the transcript has each before the
    // hook that follows it, and `SessionEnd` counts the last).
    let (input, cached, output, requests) = served(&e.dir.join("requests.log"));
    assert!(requests >= 8 && input > 0 && output > 0, "{requests}");
    assert_eq!(graph_tokens(&g), (input, cached, output), "live: {g}");
    // The gate sent it back once; the check then ran and completion was accepted.
    let st = e.json(&["goal", "status", "--session", SESSION, "--json"]);
    assert_eq!(st["completed"], true, "{st}");

    // Roll back the shell command's step: its files come back, the edit before stays.
    roll_back_the_shell_step(&e, SESSION);

    // Importing ~/.gemini/tmp into a fresh store gives the same tokens; again, nothing.
    let fresh = e.dir.join("fresh-home");
    let (first, g) = import_twice(
        |args| tacho_in_home(&fresh, &ghome, &e.ws, args),
        "gemini",
        SESSION,
    );
    assert_eq!(num(&first["bad_lines"]), 0, "{first}");
    assert_eq!(first["unknown_entries"], serde_json::json!({}), "{first}");
    assert_eq!(graph_tokens(&g), (input, cached, output), "imported: {g}");
    // The same calls and statuses as the hooks recorded (the import adds no steps).
    let mut imported = graph_tools(&g);
    imported[..2].sort();
    assert_eq!(imported, tools, "{g}");
    assert_eq!(
        g["files"]["hello.txt"]["created"], true,
        "the workspace from .project_root: {g}"
    );

    // ccusage on the same data: the same input, cached and total tokens; its output
    // leaves the thoughts out (10 a reply here).
    if let Some(ccusage) = npm_bin("ccusage") {
        let c = ccusage_json(
            &ccusage,
            &["gemini", "session"],
            "GEMINI_DATA_DIR",
            &ghome.join(".gemini"),
        );
        let row = c["sessions"]
            .as_array()
            .and_then(|s| s.iter().find(|r| r["sessionId"] == SESSION))
            .unwrap_or_else(|| panic!("{c}"));
        assert_eq!(
            (num(&row["inputTokens"]), num(&row["cacheReadTokens"])),
            (input, cached),
            "{row}"
        );
        assert_eq!(num(&row["totalTokens"]), input + cached + output, "{row}");
        assert_eq!(num(&row["outputTokens"]) + 10 * requests, output, "{row}");
    }

    // Uninstalling gives the user's settings back.
    let (code, out, err) = tacho_in_home(&e.home, &ghome, &e.ws, &["hooks", "uninstall", "gemini"]);
    assert_eq!(code, 0, "{out}{err}");
    let settings: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ghome.join(".gemini/settings.json")).unwrap(),
    )
    .unwrap();
    assert!(settings.get("hooks").is_none(), "{settings}");
    assert_eq!(settings["telemetry"]["enabled"], false, "{settings}");
}

/// Where `tacho hooks install gemini` writes: `$GEMINI_CLI_HOME/.gemini/settings.json`
/// when it is set (Gemini CLI's home then), and a project's `.gemini/settings.json`
/// under the hostile-input rules of every repository settings file: a `.gemini` that
/// links elsewhere, or a `settings.json` that links to the user's settings, gets
/// nothing written through it.
#[test]
fn gemini_settings_places_and_repository_links() {
    let e = Env::new();
    // A project's settings live in a Git work tree (outside one they are refused).
    tacho_tests::git::git(&e.ws, &["init", "-q"]);
    let home = e.dir.join("home-dir");
    let gch = e.dir.join("gemini-cli-home");
    std::fs::create_dir_all(&home).unwrap();
    let install = |args: &[&str]| {
        let mut c = tacho(&e.home);
        c.current_dir(&e.ws)
            .env("HOME", &home)
            .env("GEMINI_CLI_HOME", &gch)
            .args(["hooks", "install", "gemini"])
            .args(args);
        run(c)
    };
    let (code, out, err) = install(&[]);
    assert_eq!(code, 0, "{out}{err}");
    let user = gch.join(".gemini/settings.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&user).unwrap()).unwrap();
    assert_eq!(
        v["hooks"]["AfterAgent"][0]["hooks"][0]["timeout"], 60000,
        "{v}"
    );
    assert!(
        !home.join(".gemini").exists(),
        "not in HOME when GEMINI_CLI_HOME is set"
    );

    let elsewhere = e.dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, e.ws.join(".gemini")).unwrap();
    let (code, out, err) = install(&["--scope", "project"]);
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "{out}{err}"
    );
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains(".gemini") && err.contains("link"), "{err}");

    std::fs::remove_file(e.ws.join(".gemini")).unwrap();
    std::fs::create_dir_all(e.ws.join(".gemini")).unwrap();
    let before = std::fs::read_to_string(&user).unwrap();
    std::os::unix::fs::symlink(&user, e.ws.join(".gemini/settings.json")).unwrap();
    let (code, out, err) = install(&["--scope", "project"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("settings.json") && err.contains("link"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&user).unwrap(), before);

    std::fs::remove_file(e.ws.join(".gemini/settings.json")).unwrap();
    let (code, out, err) = install(&["--scope", "project"]);
    assert_eq!(code, 0, "{out}{err}");
    let written = std::fs::read_to_string(e.ws.join(".gemini/settings.json")).unwrap();
    assert!(
        written.contains("hook gemini") && written.contains("BeforeTool"),
        "{written}"
    );
}
