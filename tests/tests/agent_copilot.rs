//! GitHub Copilot CLI (npm `@github/copilot`, pinned in tests/agents) recorded through
//! the hooks `tacho hooks install copilot` wrote, run for real, offline, against the
//! mock's Chat Completions API.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

mod common;

use std::ffi::OsString;
use std::path::Path;
use std::time::Instant;

use common::*;
use tacho_tests::{run, tacho, tacho_bin};

const SESSION: &str = "5e551011-aaaa-4bbb-8ccc-00000000c0b1";

/// `tacho` with `HOME` = Copilot's isolated home (where `~/.copilot` is), in `dir`.
fn tacho_in(tacho_home: &Path, home: &Path, dir: &Path, args: &[&str]) -> (i32, String, String) {
    let mut c = tacho(tacho_home);
    c.current_dir(dir).env("HOME", home).args(args);
    run(c)
}

/// The environment the CLI runs in: its isolated home (and XDG directories under it),
/// the mock as its provider (no GitHub token), the workspace, `$SESSION` (for
/// `--session-id`).
fn copilot_env(e: &Env, copilot: &Path, home: &Path) -> Vec<(&'static str, OsString)> {
    let s = |v: &str| OsString::from(v);
    vec![
        ("WS", e.ws.clone().into_os_string()),
        ("COPILOT", copilot.as_os_str().to_owned()),
        ("SESSION", s(SESSION)),
        ("HOME", home.as_os_str().to_owned()),
        ("XDG_CONFIG_HOME", home.join(".config").into_os_string()),
        ("XDG_STATE_HOME", home.join(".local/state").into_os_string()),
        ("XDG_CACHE_HOME", home.join(".cache").into_os_string()),
        ("COPILOT_PROVIDER_API_KEY", s("mock-key")),
        ("COPILOT_PROVIDER_TYPE", s("openai")),
        ("COPILOT_PROVIDER_WIRE_API", s("completions")),
        ("COPILOT_MODEL", s("mock-model")),
        ("COPILOT_OFFLINE", s("true")),
    ]
}

/// A workspace and an isolated home for Copilot (`~/.copilot`) with tacho's hooks
/// installed at the user scope: (the workspace, the home, what the install said).
fn with_user_hooks() -> (Env, std::path::PathBuf, String) {
    let e = Env::new();
    let chome = e.dir.join("copilot-home");
    std::fs::create_dir_all(chome.join(".copilot")).unwrap();
    let (code, out, err) = tacho_in(&e.home, &chome, &e.ws, &["hooks", "install", "copilot"]);
    assert_eq!(code, 0, "{out}{err}");
    (e, chome, out)
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The real Copilot CLI with the hooks `tacho hooks install copilot` wrote into its
/// isolated `~/.copilot/hooks/`: its tool calls (a failing shell, which Copilot reports
/// as a success, recorded as failed with its exit code), a shell step rolled back byte
/// for byte, tokens equal to what the mock served (live and imported) and to ccusage's,
/// and the stop gate sending it back once. `hooks install --scope project` says what
/// `-p` mode needs to load the repository's hooks.
#[test]
fn copilot_recorded_through_hooks_with_rollback_tokens_and_the_stop_gate() {
    let Some(copilot) = npm_bin("copilot") else {
        return;
    };
    let Some(ccusage) = npm_bin("ccusage") else {
        return;
    };
    // The user scope: a hooks file of tacho's own, written once.
    let (e, chome, out) = with_user_hooks();
    assert!(out.contains("installed tacho's copilot hooks"), "{out}");
    assert!(!out.contains("note:"), "no note for the user scope: {out}");
    let (_, out, _) = tacho_in(&e.home, &chome, &e.ws, &["hooks", "install", "copilot"]);
    assert!(out.contains("nothing changed"), "{out}");
    let file = chome.join(".copilot/hooks/tacho.json");
    let hooks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(hooks["hooks"]["PreToolUse"][0]["matcher"], "*", "{hooks}");
    assert!(hooks["hooks"]["Stop"].is_array(), "{hooks}");
    // The project scope, in a repository of its own: the note says what -p mode needs.
    let repo = e.dir.join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let (code, out, err) = tacho_in(
        &e.home,
        &chome,
        &repo,
        &["hooks", "install", "copilot", "--scope", "project"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(repo.join(".github/hooks/tacho.json").is_file(), "{out}");
    assert!(
        out.contains(
            "note: copilot -p loads the repository's .github/hooks only in a trusted folder"
        ) && out.contains("trusted_folders"),
        "{out}"
    );
    let (code, out, err) = tacho_in(
        &e.home,
        &chome,
        &repo,
        &["hooks", "uninstall", "copilot", "--scope", "project"],
    );
    assert_eq!(code, 0, "{out}{err}");
    // tacho's own hooks file, left empty, is gone, with no backup of it (issue 47, 15).
    let left: Vec<_> = std::fs::read_dir(repo.join(".github/hooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // The session exists before the agent starts (Copilot takes its id), with an
    // assured goal whose check has not run.
    assured_session(&e, SESSION, "copilot");

    let value = e.ws.join("src/value.txt").display().to_string();
    let hello = e.ws.join("hello.txt").display().to_string();
    let tacho_path = tacho_bin().display().to_string();
    let sh = |command: &str| serde_json::json!({"tool": "bash", "input": {"command": command, "description": "run", "mode": "sync"}});
    let script = serde_json::json!([
        [{"text": "Reading."}, {"tool": "view", "input": {"path": value}}],
        [{"tool": "edit", "input": {"path": value, "old_str": "41", "new_str": "42"}}],
        [sh("echo made > made.txt && rm -f gone.txt")],
        [{"tool": "create", "input": {"path": hello, "file_text": "hello\n"}}],
        [sh("echo about-to-fail; exit 3")],
        [{"text": "Done."}],
        {"until_text": "cannot complete",
         "then": [sh(&format!("'{tacho_path}' goal check parity --session {SESSION}"))],
         "else": [{"text": "the gate did not block"}]},
        [{"text": "Checked: done."}]
    ]);
    let cmd = r#"cd "$WS" && COPILOT_PROVIDER_BASE_URL="http://127.0.0.1:$PORT/v1" timeout 300 "$COPILOT" -p "Make the value the answer" --yolo --no-ask-user --output-format json --session-id "$SESSION""#;
    let started = Instant::now();
    let envs = copilot_env(&e, &copilot, &chome);
    let envs: Vec<(&str, &std::ffi::OsStr)> =
        envs.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let Some(out) = run_offline(&e.dir, &script, &e.home, cmd, &envs) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "copilot: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("copilot ran in {:?}", started.elapsed());
    assert!(!stdout.contains("the gate did not block"), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/value.txt")).unwrap(),
        "42\n",
        "{stdout}"
    );
    assert!(e.ws.join("made.txt").exists() && !e.ws.join("gone.txt").exists());
    assert_one_stop_blocked_and_no_problem(&e);

    // Every tool call, by the names Copilot's hooks give them; the failing shell, which
    // Copilot reports as a success, failed with its exit code.
    let g = e.json(&["graph", SESSION, "--format", "json"]);
    let tools = graph_tools(&g);
    let ok = |t: &str| (t.to_string(), "ok".to_string());
    assert_eq!(
        tools,
        [
            ok("Read"),
            ok("Edit"),
            ok("Bash"),
            ok("Write"),
            ("Bash".to_string(), "error".to_string()),
            ok("Bash"),
        ],
        "{g}"
    );
    // Tokens: what the mock served, the last reply too. Copilot writes `events.jsonl`
    // behind a buffer it does not flush while a hook runs, and the last reply's usage
    // record comes right before the stop hook: the session's end waits until the file
    // stopped growing (issue 43). The import below counts every request, as ccusage
    // does.
    let log = e.dir.join("requests.log");
    let (input, cached, output) = chat_served(&log);
    assert!(cached > 0);
    let ended = graph_once_ended(&e, SESSION);
    assert_live_tokens_served(&ended["tokens"], &log);
    // ccusage's view of the same session (compared with the import below).
    let cc = ccusage_json(&ccusage, &["copilot", "session"], "HOME", &chome);
    let row = cc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionId"] == SESSION)
        .unwrap_or_else(|| panic!("{cc}"));
    // The gate sent it back once; the check then ran and completion was accepted.
    let st = e.json(&["goal", "status", "--session", SESSION, "--json"]);
    assert_eq!(st["completed"], true, "{st}");

    // Roll back the shell command's step: its files come back, the edit before stays.
    roll_back_step_that_changed(&e, SESSION, "made.txt");
    assert!(!e.ws.join("made.txt").exists());
    assert_eq!(std::fs::read(e.ws.join("gone.txt")).unwrap(), b"bye\n");
    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/value.txt")).unwrap(),
        "42\n"
    );

    // Importing ~/.copilot/session-state into a fresh store gives the same calls and
    // tokens; again, nothing.
    let fresh = e.dir.join("fresh-home");
    let import = || {
        let (code, out, err) = tacho_in(&fresh, &chome, &e.ws, &["import", "copilot", "--json"]);
        assert_eq!(code, 0, "{out}{err}");
        json(&out)
    };
    let first = import();
    assert!(num(&first["events_added"]) > 0, "{first}");
    assert_eq!(first["unknown_entries"], serde_json::json!({}), "{first}");
    let again = import();
    assert_eq!(num(&again["events_added"]), 0, "{again}");
    let (code, out, err) = tacho_in(
        &fresh,
        &chome,
        &e.ws,
        &["graph", SESSION, "--format", "json"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let g = json(&out);
    let t = &g["tokens"];
    assert_eq!(
        (num(&t["in"]), num(&t["cache_read"]), num(&t["out"])),
        (input, cached, output),
        "imported: {t}"
    );
    assert_tokens_as_ccusage(t, row);
}

/// The repository's hooks file is written by tacho's rules for a repository: a
/// `.github` or `.github/hooks` that links elsewhere, or a `tacho.json` that links to a
/// file of the user's, gets nothing written through it; without links it installs, and
/// uninstalling leaves no tacho handler.
#[test]
fn copilot_a_repository_link_on_the_way_to_its_hooks_file_is_refused() {
    use std::os::unix::fs::symlink;
    let e = Env::new();
    let home = e.dir.join("user");
    let repo = e.dir.join("repo");
    let elsewhere = e.dir.join("elsewhere");
    for d in [&home, &repo.join(".git"), &elsewhere] {
        std::fs::create_dir_all(d).unwrap();
    }
    let install = || {
        tacho_in(
            &e.home,
            &home,
            &repo,
            &["hooks", "install", "copilot", "--scope", "project"],
        )
    };
    let github = repo.join(".github");
    symlink(&elsewhere, &github).unwrap();
    let (code, out, err) = install();
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains(".github") && err.contains("link"), "{err}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    std::fs::remove_file(&github).unwrap();
    std::fs::create_dir_all(&github).unwrap();
    symlink(&elsewhere, github.join("hooks")).unwrap();
    let (code, out, err) = install();
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("hooks") && err.contains("link"), "{err}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    std::fs::remove_file(github.join("hooks")).unwrap();
    std::fs::create_dir_all(github.join("hooks")).unwrap();
    let mine = home.join("mine.json");
    std::fs::write(&mine, "{\"mine\": 1}\n").unwrap();
    symlink(&mine, github.join("hooks/tacho.json")).unwrap();
    let (code, out, err) = install();
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("tacho.json") && err.contains("link"), "{err}");
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "{\"mine\": 1}\n");

    std::fs::remove_file(github.join("hooks/tacho.json")).unwrap();
    let (code, out, err) = install();
    assert_eq!(code, 0, "{out}{err}");
    let written = std::fs::read_to_string(github.join("hooks/tacho.json")).unwrap();
    assert!(written.contains("hook copilot"), "{written}");
    let (code, out, err) = tacho_in(
        &e.home,
        &home,
        &repo,
        &["hooks", "uninstall", "copilot", "--scope", "project"],
    );
    assert_eq!(code, 0, "{out}{err}");
    // tacho's own file, left with nothing in it, is removed (issue 47, 15).
    assert!(!github.join("hooks/tacho.json").exists());
}

/// A subagent (`task`) of the real CLI is a child session of its caller, under its own
/// agent id, with its shell step; rolling the caller back whole follows the child into
/// the same workspace and undoes the subagent's change too.
#[test]
fn copilot_subagent_is_a_child_session_rolled_back_with_its_caller() {
    let Some(copilot) = npm_bin("copilot") else {
        return;
    };
    let (e, chome, _) = with_user_hooks();
    let sh = serde_json::json!({"tool": "bash", "input": {"command": "echo from-subagent > sub.txt", "description": "write", "mode": "sync"}});
    let task = serde_json::json!({"tool": "task", "input": {"description": "write a file", "prompt": "SUBTASK: write sub.txt with the shell, then report.", "agent_type": "general-purpose", "name": "writer"}});
    let script = serde_json::json!([
        {"until_text": "SUBTASK", "then": [sh], "else": [task]},
        {"until_text": "SUBTASK", "then": [{"text": "Subagent: wrote it."}], "else": [{"text": "Main: done."}]}
    ]);
    let cmd = r#"cd "$WS" && COPILOT_PROVIDER_BASE_URL="http://127.0.0.1:$PORT/v1" timeout 300 "$COPILOT" -p "Delegate it" --yolo --no-ask-user --output-format json"#;
    let envs = copilot_env(&e, &copilot, &chome);
    let envs: Vec<(&str, &std::ffi::OsStr)> =
        envs.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let Some(out) = run_offline(&e.dir, &script, &e.home, cmd, &envs) else {
        return;
    };
    assert!(
        out.status.success(),
        "copilot: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(e.ws.join("sub.txt").exists());
    let log = std::fs::read_to_string(e.home.join("logs/hooks.log")).unwrap_or_default();
    assert!(log.is_empty(), "hook problems:\n{log}");
    let main = std::fs::read_dir(chome.join(".copilot/session-state"))
        .unwrap()
        .flatten()
        // (Copilot keeps `.session-operation-locks` there too: a session is a
        // directory with its events.)
        .find(|d| d.path().join("events.jsonl").is_file())
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .unwrap();
    let plan = e.json(&["session", "rollback", &main, "--dry-run", "--json"]);
    let sessions: Vec<String> = plan["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sessions.len(), 2, "{plan}");
    assert_eq!(sessions[0], main, "{plan}");
    let child = e.json(&["graph", &sessions[1], "--format", "json"]);
    assert_eq!(child["parent"], main.as_str(), "{child}");
    assert_eq!(child["end_reason"], "completed", "{child}");
    assert_eq!(
        graph_tools(&child),
        [("Bash".to_string(), "ok".to_string())]
    );
    // (Its end waits until Copilot's buffered file stopped growing.)
    let g = graph_once_ended(&e, &main);
    assert_eq!(graph_tools(&g), [("Agent".to_string(), "ok".to_string())]);
    let (code, out, err) = e.tacho(&["session", "rollback", &main, "--yes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!e.ws.join("sub.txt").exists(), "{out}");
}
