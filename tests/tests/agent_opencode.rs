//! OpenCode (npm `opencode-ai`) and Kilo Code (npm `@kilocode/cli`), real CLIs, pinned,
//! run offline against the mock's Chat Completions API with the plugin `tacho hooks
//! install` wrote: their tool calls (ids are the model's), a shell step rolled back
//! byte for byte, tokens equal to what the mock served and to ccusage (live, and
//! imported from the agent's SQLite database), and the plugin file's own rules.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

mod common;

use std::path::{Path, PathBuf};

use common::{
    Env, assert_one_stop_blocked_and_no_problem, assert_tokens_as_ccusage, ccusage_json,
    chat_served, graph_tools, npm_bin, num, roll_back_step_that_changed, run_offline,
};
use tacho_tests::{run, tacho};

/// One agent of the OpenCode family: its name, its CLI, its config file, its project
/// directory and the variable ccusage reads its data from.
struct Family {
    name: &'static str,
    bin: &'static str,
    config: &'static str,
    project_dir: &'static str,
    ccusage_var: &'static str,
}

const OPENCODE: Family = Family {
    name: "opencode",
    bin: "opencode",
    config: "opencode.json",
    project_dir: ".opencode",
    ccusage_var: "OPENCODE_DATA_DIR",
};

const KILO: Family = Family {
    name: "kilo",
    bin: "kilo",
    config: "kilo.json",
    project_dir: ".kilo",
    ccusage_var: "KILO_DATA_DIR",
};

/// The agent's isolated home and its XDG directories.
fn xdg(home: &Path) -> Vec<(&'static str, PathBuf)> {
    vec![
        ("HOME", home.to_path_buf()),
        ("XDG_CONFIG_HOME", home.join(".config")),
        ("XDG_DATA_HOME", home.join(".local/share")),
        ("XDG_CACHE_HOME", home.join(".cache")),
        ("XDG_STATE_HOME", home.join(".local/state")),
    ]
}

/// `tacho ARGS` in the workspace, with the agent's home and XDG directories.
fn tacho_in(
    tacho_home: &Path,
    agent_home: &Path,
    ws: &Path,
    args: &[&str],
) -> (i32, String, String) {
    let mut c = tacho(tacho_home);
    c.current_dir(ws).args(args);
    for (k, v) in xdg(agent_home) {
        c.env(k, v);
    }
    run(c)
}

fn json_of(r: (i32, String, String)) -> serde_json::Value {
    let (code, out, err) = r;
    assert_eq!(code, 0, "{out}{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The agent's configuration: the mock as an OpenAI-compatible provider (its port
/// filled in by the shell), every tool allowed, nothing fetched.
fn config() -> String {
    serde_json::json!({
        "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "Mock",
            "options": {"baseURL": "http://127.0.0.1:@PORT@/v1", "apiKey": "mock-key"},
            "models": {"mock-model": {"name": "Mock Model", "tool_call": true}}}},
        "model": "mock/mock-model",
        "small_model": "mock/mock-model",
        "autoupdate": false,
        "share": "disabled",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow"}
    })
    .to_string()
}

/// What the mock served to the requests that carried tools (the agent's title
/// request, without tools, is recorded nowhere by the agent, so by tacho neither).
fn served_with_tools(dir: &Path) -> (u64, u64, u64) {
    let log = std::fs::read_to_string(dir.join("requests.log")).unwrap_or_default();
    let with_tools: String = log
        .lines()
        .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| v["tools"] == true))
        .map(|l| format!("{l}\n"))
        .collect();
    let path = dir.join("requests-with-tools.log");
    std::fs::write(&path, with_tools).unwrap();
    chat_served(&path)
}

/// Runs the agent's CLI (`run --format json`) offline on `script`, configured for the
/// mock, in the workspace, with its isolated home: `None` where it cannot run.
fn run_agent(
    f: &Family,
    bin: &Path,
    e: &Env,
    home: &Path,
    script: &serde_json::Value,
) -> Option<std::process::Output> {
    std::fs::write(e.dir.join("config.json"), config()).unwrap();
    let cmd = format!(
        r#"sed "s/@PORT@/$PORT/" "$DIR/config.json" > "$WS/{}" && cd "$WS" && timeout 300 "$BIN" run --format json "Make the value the answer""#,
        f.config
    );
    let mut envs: Vec<(&str, std::ffi::OsString)> = xdg(home)
        .into_iter()
        .map(|(k, v)| (k, v.into_os_string()))
        .collect();
    envs.extend([
        ("WS", e.ws.clone().into_os_string()),
        ("BIN", bin.as_os_str().to_owned()),
        ("npm_config_offline", "true".into()),
        ("OPENCODE_DISABLE_MODELS_FETCH", "1".into()),
        ("OPENCODE_DISABLE_AUTOUPDATE", "1".into()),
        ("NO_COLOR", "1".into()),
    ]);
    let envs: Vec<(&str, &std::ffi::OsStr)> =
        envs.iter().map(|(k, v)| (*k, v.as_os_str())).collect();
    let out = run_offline(&e.dir, script, &e.home, &cmd, &envs)?;
    assert!(
        out.status.success(),
        "{}: {}{}",
        f.name,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(out)
}

fn records_through_its_plugin(f: &Family) {
    let Some(bin) = npm_bin(f.bin) else {
        return;
    };
    let Some(ccusage) = npm_bin("ccusage") else {
        return;
    };
    let e = Env::new();
    // A project's plugin lives in a Git work tree (outside one it is refused).
    tacho_tests::git::git(&e.ws, &["init", "-q"]);
    let home = e.dir.join("agent-home");
    std::fs::create_dir_all(&home).unwrap();
    // A plugin of the user's own, beside tacho's: never touched.
    let plugins = e.ws.join(f.project_dir).join("plugin");
    std::fs::create_dir_all(&plugins).unwrap();
    let mine = "export const Mine = async () => ({})\n";
    std::fs::write(plugins.join("mine.js"), mine).unwrap();

    let install = ["hooks", "install", f.name, "--scope", "project"];
    let (code, out, err) = tacho_in(&e.home, &home, &e.ws, &install);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("installed tacho's {} hooks", f.name)),
        "{out}"
    );
    let (_, out, _) = tacho_in(&e.home, &home, &e.ws, &install);
    assert!(out.contains("nothing changed"), "{out}");
    let plugin = plugins.join("tacho.js");
    let status = json_of(tacho_in(
        &e.home,
        &home,
        &e.ws,
        &["hooks", "status", "--json"],
    ));
    let row = status["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["agent"] == f.name && r["scope"] == "project")
        .cloned()
        .unwrap_or_else(|| panic!("{status}"));
    assert_eq!(row["file"], plugin.display().to_string(), "{row}");
    assert_eq!(row["points_here"], true, "{row}");
    assert!(row["events"].as_array().unwrap().len() >= 5, "{row}");

    let value = e.ws.join("src/value.txt").display().to_string();
    let hello = e.ws.join("hello.txt").display().to_string();
    let script = serde_json::json!([
        [{"text": "Reading."}, {"tool": "read", "input": {"filePath": value}}],
        [{"tool": "edit", "input": {"filePath": value, "oldString": "41", "newString": "42"}}],
        [{"tool": "bash", "input": {"command": "echo made > made.txt && rm -f gone.txt", "description": "write and delete"}}],
        [{"tool": "write", "input": {"filePath": hello, "content": "hello\n"}}],
        [{"tool": "bash", "input": {"command": "echo about-to-fail; exit 3", "description": "fail"}}],
        [{"text": "Done."}]
    ]);
    let started = std::time::Instant::now();
    let Some(out) = run_agent(f, &bin, &e, &home, &script) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{} ran in {:?}", f.name, started.elapsed());
    assert_eq!(std::fs::read_to_string(&value).unwrap(), "42\n", "{stdout}");
    assert!(e.ws.join("made.txt").exists() && !e.ws.join("gone.txt").exists());
    let log = std::fs::read_to_string(e.home.join("logs/hooks.log")).unwrap_or_default();
    assert!(log.trim().is_empty(), "hook problems:\n{log}");

    // One session, the agent's own id, every tool call with its status.
    let (code, sessions, err) = tacho_in(&e.home, &home, &e.ws, &["session", "list", "--json"]);
    assert_eq!(code, 0, "{err}");
    let ids: Vec<String> = sessions
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|s| s["session"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids.len(), 1, "{sessions}");
    let session = ids[0].clone();
    assert!(session.starts_with("ses_"), "{session}");
    let g = json_of(tacho_in(
        &e.home,
        &home,
        &e.ws,
        &["graph", &session, "--format", "json"],
    ));
    let tools = graph_tools(&g);
    let ok = |t: &str| (t.to_string(), "ok".to_string());
    assert_eq!(
        tools,
        [
            ok("read"),
            ok("edit"),
            ok("bash"),
            ok("write"),
            ("bash".to_string(), "error".to_string()),
        ],
        "{g}"
    );
    // Tokens: what the mock served to the requests with tools, and ccusage's figures.
    let (input, cached, output) = served_with_tools(&e.dir);
    assert!(input > 0 && cached > 0 && output > 0);
    let t = &g["tokens"];
    assert_eq!(
        (num(&t["in"]), num(&t["cache_read"]), num(&t["out"])),
        (input, cached, output),
        "live: {t}"
    );
    let data = home.join(".local/share").join(f.name);
    let cc = ccusage_json(&ccusage, &[f.name, "session"], f.ccusage_var, &data);
    let row = cc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["sessionId"] == session.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("{cc}"));
    assert_tokens_as_ccusage(t, &row);

    // Roll back the shell command's step: its files come back, the edit before stays.
    roll_back_step_that_changed(&e, &session, "made.txt");
    assert!(!e.ws.join("made.txt").exists());
    assert_eq!(std::fs::read(e.ws.join("gone.txt")).unwrap(), b"bye\n");
    assert_eq!(std::fs::read(&value).unwrap(), b"42\n");

    // Importing its database into a fresh store gives the same calls and tokens; again,
    // nothing.
    let fresh = e.dir.join("fresh-home");
    let import = || {
        json_of(tacho_in(
            &fresh,
            &home,
            &e.ws,
            &["import", f.name, "--json"],
        ))
    };
    let first = import();
    assert_eq!(num(&first["files"]), 1, "{first}");
    assert!(num(&first["events_added"]) > 0, "{first}");
    assert_eq!(first["unknown_entries"], serde_json::json!({}), "{first}");
    let again = import();
    assert_eq!(num(&again["events_added"]), 0, "{again}");
    let g = json_of(tacho_in(
        &fresh,
        &home,
        &e.ws,
        &["graph", &session, "--format", "json"],
    ));
    let t = &g["tokens"];
    assert_eq!(
        (num(&t["in"]), num(&t["cache_read"]), num(&t["out"])),
        (input, cached, output),
        "imported: {t}"
    );
    assert_tokens_as_ccusage(t, &row);

    // Uninstalling removes tacho's plugin only.
    let (code, out, err) = tacho_in(
        &e.home,
        &home,
        &e.ws,
        &["hooks", "uninstall", f.name, "--scope", "project"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(!plugin.exists());
    assert_eq!(
        std::fs::read_to_string(plugins.join("mine.js")).unwrap(),
        mine
    );
}

/// The real OpenCode CLI (npm `opencode-ai` 1.18.33).
#[test]
fn opencode_recorded_through_its_plugin_with_rollback_and_tokens_as_served() {
    records_through_its_plugin(&OPENCODE);
}

/// The real Kilo Code CLI (npm `@kilocode/cli` 7.7.7): as OpenCode.
#[test]
fn kilo_recorded_through_its_plugin_with_rollback_and_tokens_as_served() {
    records_through_its_plugin(&KILO);
}

/// tacho writes its plugin file only as a regular file of its own: a user's file at
/// its place, and a link there, are refused and named; uninstall leaves them be.
#[test]
fn the_plugin_file_is_tachos_own() {
    let e = Env::new();
    // A project's settings live in a Git work tree (outside one they are refused).
    tacho_tests::git::git(&e.ws, &["init", "-q"]);
    let home = e.dir.join("agent-home");
    let user_plugins = home.join(".config/opencode/plugin");
    std::fs::create_dir_all(&user_plugins).unwrap();
    let theirs = user_plugins.join("tacho.js");
    std::fs::write(&theirs, "// someone else's\n").unwrap();
    for op in ["install", "uninstall"] {
        let (code, out, err) = tacho_in(&e.home, &home, &e.ws, &["hooks", op, "opencode"]);
        assert_ne!(code, 0, "{op}: {out}{err}");
        assert!(
            err.contains(&theirs.display().to_string()) && err.contains("not tacho's plugin"),
            "{op}: {err}"
        );
        assert_eq!(
            std::fs::read_to_string(&theirs).unwrap(),
            "// someone else's\n"
        );
    }
    // A link at its place, even to a file of tacho's: not a file tacho made.
    std::fs::remove_file(&theirs).unwrap();
    let (code, out, err) = tacho_in(&e.home, &home, &e.ws, &["hooks", "install", "kilo"]);
    assert_eq!(code, 0, "{out}{err}");
    let kilo_plugin = home.join(".config/kilo/plugin/tacho.js");
    assert!(kilo_plugin.is_file());
    std::os::unix::fs::symlink(&kilo_plugin, &theirs).unwrap();
    let (code, out, err) = tacho_in(&e.home, &home, &e.ws, &["hooks", "install", "opencode"]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("symbolic link"), "{err}");
    assert!(
        std::fs::symlink_metadata(&theirs)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // A repository's plugin directory that is a link is refused too.
    std::os::unix::fs::symlink(&user_plugins, e.ws.join(".kilo")).unwrap();
    let (code, out, err) = tacho_in(
        &e.home,
        &home,
        &e.ws,
        &["hooks", "install", "kilo", "--scope", "project"],
    );
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("link"), "{err}");
    // Status says what is where.
    let status = json_of(tacho_in(
        &e.home,
        &home,
        &e.ws,
        &["hooks", "status", "--json"],
    ));
    let kilo_user = status["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["agent"] == "kilo" && r["scope"] == "user")
        .cloned()
        .unwrap();
    assert_eq!(kilo_user["points_here"], true, "{kilo_user}");
    let (code, out, err) = tacho_in(&e.home, &home, &e.ws, &["hooks", "uninstall", "kilo"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!kilo_plugin.exists());
}

/// The completion gate with the real Kilo Code CLI, which has no stop hook: the agent
/// creates an assured goal on its own session, stops before the goal's check ran, the
/// plugin sends the gate's refusal back as a prompt and `kilo run` goes back to work,
/// runs the check, and its next stop completes the goal. (OpenCode's `run` stores such
/// a prompt and exits: only its server or TUI would work on it.)
#[test]
fn kilo_stop_gate_sends_it_back_once_through_its_plugin() {
    let Some(bin) = npm_bin(KILO.bin) else {
        return;
    };
    let e = Env::new();
    tacho_tests::git::git(&e.ws, &["init", "-q"]);
    let home = e.dir.join("agent-home");
    std::fs::create_dir_all(&home).unwrap();
    let install = ["hooks", "install", "kilo", "--scope", "project"];
    let (code, out, err) = tacho_in(&e.home, &home, &e.ws, &install);
    assert_eq!(code, 0, "{out}{err}");
    std::fs::write(e.dir.join("plan.md"), tacho_tests::PARITY_PLAN).unwrap();
    let tacho_path = tacho_tests::tacho_bin().display().to_string();
    let session = format!(
        r#""$('{tacho_path}' session list --json | sed -n 's/.*"session":"\([^"]*\)".*/\1/p' | head -n1)""#
    );
    let plan = e.dir.join("plan.md").display().to_string();
    let script = serde_json::json!([
        [{"tool": "bash", "input": {"command": format!("'{tacho_path}' goal create --session {session} --plan '{plan}' --assure"), "description": "records a goal"}}],
        [{"text": "Done."}],
        {"until_text": "cannot complete",
         "then": [{"tool": "bash", "input": {"command": format!("sed -i s/41/42/ src/value.txt && '{tacho_path}' goal check parity --session {session}"), "description": "runs the check"}}],
         "else": [{"text": "the gate did not block"}]},
        [{"text": "Checked: done."}]
    ]);
    if run_agent(&KILO, &bin, &e, &home, &script).is_none() {
        return;
    }
    assert_one_stop_blocked_and_no_problem(&e);
    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/value.txt")).unwrap(),
        "42\n"
    );
    let (code, sessions, err) = tacho_in(&e.home, &home, &e.ws, &["session", "list", "--json"]);
    assert_eq!(code, 0, "{err}");
    let session: String = sessions
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|s| s["session"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("{sessions}"));
    let st = json_of(tacho_in(
        &e.home,
        &home,
        &e.ws,
        &["goal", "status", "--session", &session, "--json"],
    ));
    assert_eq!(st["completed"], true, "{st}");
}
