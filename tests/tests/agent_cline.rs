//! Cline CLI (npm `cline`, pinned in `tests/agents/package.json`) recorded through the
//! hook scripts `tacho hooks install cline` writes (executables named after its
//! events, in its isolated `~/.cline/hooks`), run offline against the mock's Chat
//! Completions API; and the install, status and uninstall of those scripts beside a
//! user's own hooks, a symbolic link and a repository's linked hooks directory.
//!
//! Without Node, Python or the `npm install` in tests/agents the real-CLI test says so
//! and passes, except in CI (`CI` set), where it fails.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use tacho_tests::PARITY_PLAN as PLAN;
use tacho_tests::{run, tacho};

/// The events tacho installs a script for.
const EVENTS: [&str; 9] = [
    "TaskStart",
    "TaskResume",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "TaskComplete",
    "TaskCancel",
    "TaskError",
    "SessionShutdown",
];

/// `tacho` with `HOME` = Cline's isolated home (where `~/.cline` is), in `ws`.
fn cline_tacho(
    tacho_home: &Path,
    cline_home: &Path,
    ws: &Path,
    args: &[&str],
) -> (i32, String, String) {
    let mut c = tacho(tacho_home);
    c.current_dir(ws)
        .env("HOME", cline_home)
        .env_remove("CLINE_DIR")
        .env_remove("CLINE_DATA_DIR")
        .env_remove("CLINE_SESSION_DATA_DIR")
        .args(args);
    run(c)
}

/// The one session Cline wrote under `home` (its id names its directory).
fn the_session(home: &Path) -> String {
    let dir = home.join(".cline/data/sessions");
    let ids: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    ids[0].clone()
}

/// The real Cline CLI against the mock, with the scripts `tacho hooks install cline`
/// wrote: its tool calls with the model's ids, a failing shell command with its exit
/// code, a shell step rolled back byte for byte, tokens equal to what the mock served
/// (live, and imported into a fresh store, twice: nothing the second time), and a
/// completion gate that refuses the stop but cannot send Cline back — which `goal
/// status` says.
#[test]
fn cline_recorded_through_its_hook_scripts_with_rollback_and_tokens_as_served() {
    let Some(cline) = npm_bin("cline") else {
        return;
    };
    let e = Env::new();
    let chome = e.dir.join("cline-home");
    std::fs::create_dir_all(&chome).unwrap();
    let (code, out, err) = cline_tacho(&e.home, &chome, &e.ws, &["hooks", "install", "cline"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("installed tacho's cline hooks"), "{out}");
    assert!(out.contains("cannot send it back"), "{out}");
    let (_, out, _) = cline_tacho(&e.home, &chome, &e.ws, &["hooks", "install", "cline"]);
    assert!(out.contains("nothing changed"), "{out}");
    for ev in EVENTS {
        let p = chome.join(".cline/hooks").join(ev);
        let m = std::fs::symlink_metadata(&p).unwrap();
        assert!(m.is_file(), "{}", p.display());
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111,
            0o111
        );
    }

    std::fs::write(e.dir.join("plan.md"), PLAN).unwrap();
    let plan = e.dir.join("plan.md").display().to_string();
    let value = e.ws.join("src/value.txt").display().to_string();
    let hello = e.ws.join("hello.txt").display().to_string();
    // The goal is created from inside the session (Cline picks the session's id: the
    // name of its directory under ~/.cline/data/sessions).
    let goal = format!(
        r#"tacho goal create --session "$(basename "$HOME"/.cline/data/sessions/*)" --plan '{plan}' --assure"#
    );
    let script = serde_json::json!([
        [{"text": "Setting the goal."}, {"tool": "run_commands", "input": {"commands": [goal]}}],
        [{"tool": "read_files", "input": {"files": [{"path": value}]}}],
        [{"tool": "editor", "input": {"path": value, "old_text": "41", "new_text": "42"}}],
        [{"tool": "run_commands", "input": {"commands": ["echo made > made.txt && rm -f gone.txt"]}}],
        [{"tool": "editor", "input": {"path": hello, "new_text": "hello\n"}}],
        [{"tool": "run_commands", "input": {"commands": ["echo about-to-fail; exit 3"]}}],
        [{"text": "Done."}]
    ]);
    let cmd = r#""$CLINE" auth -p openai-compatible -b "http://127.0.0.1:$PORT/v1" -k mock-key -m mock-model >/dev/null && cd "$WS" && timeout 300 "$CLINE" --json "Make the value the answer""#;
    let started = Instant::now();
    let Some(out) = run_offline(
        &e.dir,
        &script,
        &e.home,
        cmd,
        &[
            ("WS", e.ws.as_os_str()),
            ("CLINE", cline.as_os_str()),
            ("HOME", chome.as_os_str()),
            ("CLINE_SESSION_BACKEND_MODE", "local".as_ref()),
            ("NO_COLOR", "1".as_ref()),
        ],
    ) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cline: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let session = the_session(&chome);
    // TaskComplete runs detached: wait for its hook to end the session.
    let until = Instant::now() + Duration::from_secs(30);
    let g = loop {
        let (code, out, _) = e.tacho(&["graph", &session, "--format", "json"]);
        if code == 0 {
            let g: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
            if g["ended"].is_string() {
                break g;
            }
        }
        assert!(Instant::now() < until, "the session did not end: {out}");
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("cline run and its hooks: {:?}", started.elapsed());
    assert_eq!(std::fs::read_to_string(&value).unwrap(), "42\n", "{stdout}");
    assert!(e.ws.join("made.txt").exists() && !e.ws.join("gone.txt").exists());
    let log = std::fs::read_to_string(e.home.join("logs/hooks.log")).unwrap_or_default();
    assert!(
        !log.lines()
            .any(|l| !l.contains("stop not blocked (cline cannot be sent back)")),
        "hook problems:\n{log}"
    );
    assert_eq!(log.matches("stop not blocked").count(), 1, "{log}");

    // Every tool call, by Cline's names; the failure with its exit code.
    let (_, summary, _) = e.tacho(&["session", "replay", &session, "--mode", "summary"]);
    let calls = graph_tools(&g);
    let ok = |t: &str| (t.to_string(), "ok".to_string());
    assert_eq!(
        calls,
        [
            ok("run_commands"),
            ok("read_files"),
            ok("editor"),
            ok("run_commands"),
            ok("editor"),
            ("run_commands".to_string(), "error".to_string()),
        ],
        "{g}\n{summary}"
    );
    assert!(
        summary.contains("prompt Make the value the answer"),
        "{summary}"
    );
    let failure = g["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["tools"].as_array().unwrap().iter())
        .find(|t| t["status"] == "error")
        .unwrap();
    assert!(
        failure.to_string().contains("Command exited with code 3"),
        "{failure}"
    );

    // Tokens: exactly what the mock served (every reply is in the messages file when
    // the detached TaskComplete hook reads it; it waits for the last one).
    let (input, cached, output) = chat_served(&e.dir.join("requests.log"));
    assert!(input > 0 && output > 0);
    eprintln!(
        "served (input without cached, cached, output): {:?}; recorded live: {:?}",
        (input, cached, output),
        graph_tokens(&g)
    );
    assert_eq!(
        graph_tokens(&g),
        (input, cached, output),
        "live: {}",
        g["tokens"]
    );

    // The gate refused the stop (parity never ran) and could not send Cline back:
    // `goal status` says so.
    let st = e.json(&["goal", "status", "--session", &session, "--json"]);
    assert_eq!(st["completed"], false, "{st}");
    let note = st["stop_not_refusable"]
        .as_str()
        .unwrap_or_else(|| panic!("{st}"));
    assert!(note.contains("cline cannot be sent back"), "{note}");
    let (_, text, _) = e.tacho(&["goal", "status", "--session", &session]);
    assert!(
        text.contains("Not enforced: cline cannot be sent back"),
        "{text}"
    );

    // Roll back to before the shell command's step: its files come back byte for byte,
    // the edit before it stays, the file written after it goes.
    let out = roll_back_step_that_changed(&e, &session, "made.txt");
    assert!(!e.ws.join("made.txt").exists(), "{out}");
    assert_eq!(
        std::fs::read_to_string(e.ws.join("gone.txt")).unwrap(),
        "bye\n"
    );
    assert_eq!(std::fs::read_to_string(&value).unwrap(), "42\n");
    assert!(!e.ws.join("hello.txt").exists(), "{out}");

    // Importing ~/.cline/data/sessions into a fresh store: the same calls and tokens;
    // again, nothing.
    let fresh = e.dir.join("fresh-home");
    let (_, gi) = import_twice(
        |args| tacho_in_home(&fresh, &chome, &e.ws, args),
        "cline",
        &session,
    );
    assert_eq!(
        graph_tokens(&gi),
        (input, cached, output),
        "imported: {}",
        gi["tokens"]
    );
    assert_eq!(graph_tools(&gi), graph_tools(&g), "imported: {gi}");

    // Uninstall takes tacho's scripts out, and nothing else.
    std::fs::write(chome.join(".cline/hooks/PreToolUse.sh"), "echo mine\n").unwrap();
    let (code, out, err) = cline_tacho(&e.home, &chome, &e.ws, &["hooks", "uninstall", "cline"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("removed tacho's cline hooks"), "{out}");
    let left: Vec<String> = std::fs::read_dir(chome.join(".cline/hooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["PreToolUse.sh"]);
}

/// A Cline home, a project (a Git work tree) and a tacho home, for the install tests.
fn install_env() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().canonicalize().unwrap();
    let (home, project, th) = (d.join("home"), d.join("project"), d.join("tacho"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(project.join(".git")).unwrap();
    (tmp, home, project, th)
}

/// A user's own `PreToolUse` hook: install refuses, naming it, and writes nothing;
/// status and uninstall leave it; a link at an event's name is refused too.
#[test]
fn a_users_own_hook_file_is_named_and_never_replaced() {
    let (_tmp, home, project, th) = install_env();
    let hooks = home.join(".cline/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let mine = hooks.join("PreToolUse");
    std::fs::write(&mine, "#!/bin/sh\necho mine\n").unwrap();
    let (code, out, err) = cline_tacho(&th, &home, &project, &["hooks", "install", "cline"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains(&mine.display().to_string()) && err.contains("of your own"),
        "{err}"
    );
    let names: Vec<String> = std::fs::read_dir(&hooks)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["PreToolUse"], "nothing written");
    let (code, out, err) = cline_tacho(&th, &home, &project, &["hooks", "uninstall", "cline"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("nothing changed"), "{out}");
    assert_eq!(
        std::fs::read_to_string(&mine).unwrap(),
        "#!/bin/sh\necho mine\n"
    );

    // A link at an event's name (to a script elsewhere) is not tacho's either.
    std::fs::remove_file(&mine).unwrap();
    let elsewhere = home.join("elsewhere.sh");
    std::fs::write(&elsewhere, "echo linked\n").unwrap();
    std::os::unix::fs::symlink(&elsewhere, hooks.join("PostToolUse")).unwrap();
    let (code, out, err) = cline_tacho(&th, &home, &project, &["hooks", "install", "cline"]);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("PostToolUse") && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&elsewhere).unwrap(),
        "echo linked\n"
    );
    assert!(!hooks.join("PreToolUse").exists(), "nothing written");

    // Without it, install writes the nine scripts; status reports them.
    std::fs::remove_file(hooks.join("PostToolUse")).unwrap();
    let (code, out, err) = cline_tacho(&th, &home, &project, &["hooks", "install", "cline"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = cline_tacho(&th, &home, &project, &["hooks", "status", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let st: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let row = st["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["agent"] == "cline" && f["scope"] == "user")
        .unwrap();
    assert_eq!(
        row["events"].as_array().unwrap().len(),
        EVENTS.len(),
        "{row}"
    );
    assert_eq!(row["points_here"], true, "{row}");
    assert_eq!(row["file"], hooks.display().to_string());
    // A script of tacho's edited by the user is the user's: kept on uninstall.
    let edited = hooks.join("TaskError");
    let text = std::fs::read_to_string(&edited).unwrap() + "echo mine too\n";
    std::fs::write(&edited, &text).unwrap();
    let (code, out, err) = cline_tacho(&th, &home, &project, &["hooks", "uninstall", "cline"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!hooks.join("PreToolUse").exists());
    assert_eq!(std::fs::read_to_string(&edited).unwrap(), text);
}

/// The project's hooks directory (`.clinerules/hooks`) is written as regular files; a
/// repository whose `.clinerules/hooks` is a symbolic link is refused, naming it, and
/// nothing is written through it.
#[test]
fn a_repositorys_linked_hooks_directory_is_refused() {
    let (_tmp, home, project, th) = install_env();
    let (code, out, err) = cline_tacho(
        &th,
        &home,
        &project,
        &["hooks", "install", "cline", "--scope", "project"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let dir = project.join(".clinerules/hooks");
    assert!(dir.join("TaskComplete").is_file(), "{out}");
    let (code, out, err) = cline_tacho(
        &th,
        &home,
        &project,
        &["hooks", "uninstall", "cline", "--scope", "project"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);

    std::fs::remove_dir_all(project.join(".clinerules")).unwrap();
    let target = home.join("target-dir");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::create_dir_all(project.join(".clinerules")).unwrap();
    std::os::unix::fs::symlink(&target, &dir).unwrap();
    let (code, out, err) = cline_tacho(
        &th,
        &home,
        &project,
        &["hooks", "install", "cline", "--scope", "project"],
    );
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains(&dir.display().to_string()) && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(&target).unwrap().count(),
        0,
        "nothing written through it"
    );
}

/// Issue 43: the data the Cline VS Code extension keeps — task folders of
/// `api_conversation_history.json`, `ui_messages.json`, `task_metadata.json` — is
/// imported through its `ui_messages.json`: the task is a session, each request's
/// usage a response, each tool and command a call, the two edit tools edits, a diff
/// error a failed call. (Lines shaped as the 3.51.0 task folder of the corpus, which
/// may not be committed; `TACHO_CORPUS` runs that one, tests/corpus/README.md.) The
/// folder's other files, given by name, are named as what they are.
#[test]
fn a_vs_code_task_folder_is_imported() {
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("tasks/1733000000000");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(
        task.join("api_conversation_history.json"),
        r#"[{"role":"user","content":[{"type":"text","text":"fix it"}]}]"#,
    )
    .unwrap();
    let tool = |t: &str, path: &str, content: &str| {
        serde_json::json!({"tool": t, "path": path, "content": content, "operationIsLocatedInWorkspace": true}).to_string()
    };
    let req = |i: u64, o: u64| {
        serde_json::json!({"request": "…", "tokensIn": i, "tokensOut": o, "cacheWrites": 5, "cacheReads": 100, "cost": 0.01}).to_string()
    };
    let model = serde_json::json!({"providerId": "anthropic", "modelId": "claude-sonnet-4-5-20250929", "mode": "act"});
    let ui = serde_json::json!([
        {"ts": 1733000000000u64, "type": "say", "say": "text", "text": "fix it"},
        {"ts": 1733000000100u64, "type": "say", "say": "api_req_started", "text": req(10, 20), "modelInfo": model},
        {"ts": 1733000000200u64, "type": "say", "say": "tool", "text": tool("readFile", "src/a.rs", "/w/src/a.rs"), "partial": false},
        {"ts": 1733000000300u64, "type": "say", "say": "api_req_started", "text": req(3, 40), "modelInfo": model},
        {"ts": 1733000000400u64, "type": "say", "say": "tool", "text": tool("editedExistingFile", "src/a.rs", "@@ -1 +1 @@"), "partial": false},
        {"ts": 1733000000500u64, "type": "say", "say": "diff_error", "text": "src/a.rs: no match"},
        {"ts": 1733000000600u64, "type": "say", "say": "tool", "text": tool("newFileCreated", "src/b.rs", "fn b() {}"), "partial": false},
        {"ts": 1733000000700u64, "type": "say", "say": "command", "text": "cargo test"},
        {"ts": 1733000000800u64, "type": "ask", "ask": "command_output", "text": "test result: ok"},
        {"ts": 1733000000900u64, "type": "say", "say": "completion_result", "text": "done"}
    ]);
    std::fs::write(task.join("ui_messages.json"), ui.to_string()).unwrap();
    std::fs::write(
        task.join("task_metadata.json"),
        r#"{"files_in_context":[]}"#,
    )
    .unwrap();
    let home = tmp.path().join("home");
    let mut c = tacho(&home);
    c.args(["import", "cline", "--json"])
        .arg(tmp.path().join("tasks"));
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    let mut c = tacho(&home);
    c.args(["session", "show", "1733000000000", "--json"]);
    let (code, show, err) = run(c);
    assert_eq!(code, 0, "{show}{err}");
    let s: serde_json::Value = serde_json::from_str(show.trim()).unwrap();
    let n = |k: &str| s[k].as_u64().unwrap();
    assert_eq!(
        (
            n("tokens_in"),
            n("tokens_out"),
            n("cache_read"),
            n("cache_write")
        ),
        (13, 60, 200, 10),
        "{s}"
    );
    // (The edit the diff error failed edits nothing.)
    assert_eq!(
        (n("tool_calls"), n("tool_failures"), n("files_edited")),
        (4, 1, 1),
        "{s}"
    );
    assert_eq!(s["files"], serde_json::json!(["/w/src/b.rs"]), "{s}");
    assert_eq!(s["workspace"], "/w", "{s}");
    // Again: nothing added.
    let mut c = tacho(&home);
    c.args(["import", "cline", "--json"])
        .arg(task.join("ui_messages.json"));
    let (_, out, _) = run(c);
    assert!(out.contains("\"events_added\":0"), "{out}");
    // Its other files, given by name.
    let mut c = tacho(&home);
    c.args(["import", "cline", "--json"])
        .arg(task.join("api_conversation_history.json"));
    let (code, out, err) = run(c);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("reads the folder through its ui_messages.json"),
        "{out}{err}"
    );
}
