//! A goal check runs in the environment frozen with its goal (SPEC §12.2), not in the
//! shell of whoever asks for the run: a fake program first on the agent's PATH, or
//! `MAKEFLAGS`, `LD_PRELOAD`, `GIT_DIR`, `PYTEST_ADDOPTS` set in the agent's shell,
//! cannot make a check pass; a program on the frozen PATH replaced after the freeze
//! makes its receipt count for nothing, and the gate says why.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tacho_tests::{run, run_with_stdin, tacho};

const PLAN: &str = r#"# Tests pass
Goal kind: bugfix

## Acceptance criteria
- AC1: the unit tests pass
- AC2: the tool agrees

## Verification plan
Run the checks.

## Non-goals
- anything else

## Assumed scope
src/

## Assurance contract
```json
{"version": 1, "sourcePaths": ["src", "checks"], "checks": [
 {"id": "unit-tests", "acceptanceIds": ["AC1"], "command": "cargo test --offline", "purpose": "the unit tests pass", "environment": "the developer's toolchain"},
 {"id": "clean-env", "acceptanceIds": ["AC1"], "command": "sh checks/env.sh", "purpose": "no variable of the agent's shell reaches the check", "environment": "the frozen environment", "guard": true},
 {"id": "tool", "acceptanceIds": ["AC2"], "command": "mytool verify", "purpose": "the tool agrees", "environment": "the developer's tools"}]}
```
"#;

fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// (data directory, workspace, the developer's tool directory); the workspace has no
/// `Cargo.toml`, so the real `cargo test` fails.
fn setup(tmp: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let home = tmp.join("home");
    let ws = tmp.join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("checks")).unwrap();
    let ws = ws.canonicalize().unwrap();
    std::fs::write(ws.join("src/lib.txt"), "x\n").unwrap();
    std::fs::write(
        ws.join("checks/env.sh"),
        "test -z \"${MAKEFLAGS}${LD_PRELOAD}${GIT_DIR}${PYTEST_ADDOPTS}\"\n",
    )
    .unwrap();
    std::fs::write(ws.join("plan.md"), PLAN).unwrap();
    let tools = tmp.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    script(&tools.join("mytool"), "echo checking; exit 1");
    let line = format!(
        r#"{{"type":"session.start","session":"ses_env","workspace":"{}"}}"#,
        ws.display()
    );
    let (code, _, err) = run_with_stdin(&home, &["record", "--snapshots", "off"], &line);
    assert_eq!(code, 0, "{err}");
    (home, ws, tools)
}

fn path_with(first: &Path) -> String {
    format!(
        "{}:{}",
        first.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `tacho ARGS` from the workspace with PATH `path` and the extra variables.
fn t(home: &Path, ws: &Path, path: &str, vars: &[(&str, &str)], args: &[&str]) -> (i32, String) {
    let mut c = tacho(home);
    c.current_dir(ws).env("PATH", path).args(args);
    for (k, v) in vars {
        c.env(k, v);
    }
    let (code, out, err) = run(c);
    (code, format!("{out}{err}"))
}

fn state(home: &Path, ws: &Path, path: &str, check: &str) -> (String, String) {
    let (_, out) = t(
        home,
        ws,
        path,
        &[],
        &["goal", "status", "--session", "ses_env", "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == check)
        .unwrap()
        .clone();
    (
        c["state"].as_str().unwrap().to_owned(),
        c["why"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn the_agents_path_and_variables_do_not_reach_a_check() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws, tools) = setup(tmp.path());
    let user_path = path_with(&tools);
    let (code, out) = t(
        &home,
        &ws,
        &user_path,
        &[],
        &[
            "goal",
            "create",
            "--plan",
            "plan.md",
            "--session",
            "ses_env",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}");

    // The agent's shell: a fake cargo first on PATH, and variables that change what
    // programs do.
    let fake = tmp.path().join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    script(&fake.join("cargo"), "echo \"test result: ok. 42 passed\"");
    script(&fake.join("mytool"), "exit 0");
    let agent_path = format!("{}:{user_path}", fake.display());
    let agent_vars = [
        ("MAKEFLAGS", "-n"),
        ("LD_PRELOAD", "/nonexistent/libfake.so"),
        ("GIT_DIR", "/nonexistent/.git"),
        ("PYTEST_ADDOPTS", "-k nothing"),
    ];
    let check = |id: &str| {
        t(
            &home,
            &ws,
            &agent_path,
            &agent_vars,
            &["goal", "check", id, "--session", "ses_env", "--json"],
        )
    };

    // The fake cargo is not run: the real one (or none) fails without a Cargo.toml.
    let (code, out) = check("unit-tests");
    assert_ne!(code, 0, "the fake cargo passed the check: {out}");
    assert!(!out.contains("42 passed"), "{out}");
    let (st, why) = state(&home, &ws, &agent_path, "unit-tests");
    assert_eq!(st, "failed", "{why}");

    // None of the agent's variables reach the check.
    let (code, out) = check("clean-env");
    assert_eq!(
        code, 0,
        "a variable of the agent's shell reached the check: {out}"
    );
    assert_eq!(state(&home, &ws, &agent_path, "clean-env").0, "passed");

    // The receipt binds the environment: its digest is the goal's, and the programs
    // it resolved are the frozen PATH's, never the agent's.
    let (_, out) = check("tool");
    let receipt: serde_json::Value = serde_json::from_str(
        out.lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("{out}")),
    )
    .unwrap();
    let programs = receipt["receipt"]["programs"].as_array().unwrap();
    let tool = format!("{}", tools.join("mytool").display());
    assert!(
        programs
            .iter()
            .any(|p| p.as_str().unwrap().ends_with(&format!("  {tool}"))),
        "{programs:?}"
    );
    assert!(
        !programs
            .iter()
            .any(|p| p.as_str().unwrap().contains(&fake.display().to_string())),
        "{programs:?}"
    );
    assert!(receipt["receipt"]["environment_digest"].is_string());
    assert_eq!(state(&home, &ws, &agent_path, "tool").0, "failed");

    // The gate refuses.
    let (code, out) = t(
        &home,
        &ws,
        &agent_path,
        &agent_vars,
        &["goal", "complete", "--session", "ses_env"],
    );
    assert_eq!(code, 1, "{out}");
}

#[test]
fn a_program_replaced_on_the_frozen_path_earns_no_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws, tools) = setup(tmp.path());
    let first = tmp.path().join("first");
    std::fs::create_dir_all(&first).unwrap();
    let user_path = format!("{}:{}", first.display(), path_with(&tools));
    let (code, out) = t(
        &home,
        &ws,
        &user_path,
        &[],
        &[
            "goal",
            "create",
            "--plan",
            "plan.md",
            "--session",
            "ses_env",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}");
    // The agent can write into a directory of the frozen PATH: it replaces the tool.
    script(&tools.join("mytool"), "exit 0");
    let (code, out) = t(
        &home,
        &ws,
        &user_path,
        &[],
        &["goal", "check", "tool", "--session", "ses_env"],
    );
    assert_ne!(code, 0, "a replaced program passed the check: {out}");
    assert!(
        out.contains(&format!(
            "  not in the frozen environment: ran programs other than those frozen with the goal: {} changed since the goal was frozen",
            tools.join("mytool").display()
        )),
        "{out}"
    );
    let (st, why) = state(&home, &ws, &user_path, "tool");
    assert_eq!(st, "failed", "{why}");
    assert!(
        why.contains(&format!(
            "{} changed since the goal was frozen",
            tools.join("mytool").display()
        )),
        "{why}"
    );
    // A program put in a directory that comes earlier on the frozen PATH (empty when
    // the goal was frozen) is not the frozen program either.
    script(&tools.join("mytool"), "echo checking; exit 1");
    script(&tmp.path().join("first/mytool"), "exit 0");
    let (code, out) = t(
        &home,
        &ws,
        &user_path,
        &[],
        &["goal", "check", "tool", "--session", "ses_env"],
    );
    assert_ne!(
        code, 0,
        "a program planted on the frozen PATH passed: {out}"
    );
    let (st, why) = state(&home, &ws, &user_path, "tool");
    assert_eq!(st, "failed", "{why}");
    assert!(
        why.contains(&format!(
            "{} is not a program the goal froze",
            tmp.path().join("first/mytool").display()
        )),
        "{why}"
    );
}

#[test]
fn status_shows_each_checks_environment_and_the_frozen_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws, tools) = setup(tmp.path());
    let user_path = path_with(&tools);
    let (code, out) = t(
        &home,
        &ws,
        &user_path,
        &[("MAKEFLAGS", "-n")],
        &[
            "goal",
            "create",
            "--plan",
            "plan.md",
            "--session",
            "ses_env",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let (_, out) = t(
        &home,
        &ws,
        "/usr/bin:/bin",
        &[],
        &["goal", "status", "--session", "ses_env", "--json"],
    );
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["checks"][0]["environment"], "the developer's toolchain");
    let env: Vec<&str> = v["environment"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    // The PATH of whoever froze the goal, not of whoever asks; nothing else of theirs.
    assert!(
        env.contains(&format!("PATH={user_path}").as_str()),
        "{env:?}"
    );
    assert!(env.contains(&"TERM=dumb"), "{env:?}");
    assert!(!env.iter().any(|e| e.starts_with("MAKEFLAGS=")), "{env:?}");
    assert!(v["environment_digest"].is_string());
    let tool = format!("  {}", tools.join("mytool").display());
    assert!(
        v["programs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p.as_str().unwrap().ends_with(&tool)),
        "{}",
        v["programs"]
    );
    let (_, text) = t(
        &home,
        &ws,
        "/usr/bin:/bin",
        &[],
        &["goal", "status", "--session", "ses_env"],
    );
    assert!(
        text.contains(&format!("Checks run with PATH={user_path}")),
        "{text}"
    );
}

#[test]
fn variables_a_plan_names_are_frozen_with_the_goal() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws, tools) = setup(tmp.path());
    let user_path = path_with(&tools);
    std::fs::write(
        ws.join("checks/target.sh"),
        "test \"$TARGET_DB\" = staging\n",
    )
    .unwrap();
    let plan = PLAN.replace(
        r#""environment": "the frozen environment", "guard": true}"#,
        r#""environment": "the frozen environment", "guard": true},
 {"id": "target", "acceptanceIds": ["AC1"], "command": "sh checks/target.sh", "purpose": "runs against staging", "environment": "the staging database", "variables": ["TARGET_DB"], "guard": true}"#,
    );
    std::fs::write(ws.join("plan.md"), plan).unwrap();
    // Not set where the goal is frozen: refused, naming it.
    let create = [
        "goal",
        "create",
        "--plan",
        "plan.md",
        "--session",
        "ses_env",
    ];
    let (code, out) = t(&home, &ws, &user_path, &[], &create);
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("check target names the variable TARGET_DB, which is not set"),
        "{out}"
    );
    let (code, out) = t(&home, &ws, &user_path, &[("TARGET_DB", "staging")], &create);
    assert_eq!(code, 0, "{out}");
    // The agent's value does not reach the check; the frozen one does.
    let (code, out) = t(
        &home,
        &ws,
        &user_path,
        &[("TARGET_DB", "production")],
        &["goal", "check", "target", "--session", "ses_env"],
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(state(&home, &ws, &user_path, "target").0, "passed");
}

/// The issue's example end to end through the Claude Code hook: a fake `cargo` first
/// on the agent's PATH does not get the agent past the Stop gate.
#[test]
fn the_stop_gate_holds_an_agent_with_a_fake_cargo() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws, tools) = setup(tmp.path());
    let user_path = path_with(&tools);
    // Only the unit tests: the one check the fake cargo would pass.
    let one = format!(
        "{}```json\n{}\n```\n",
        PLAN.split("```json").next().unwrap(),
        r#"{"version": 1, "sourcePaths": ["src", "checks"], "checks": [{"id": "unit-tests", "acceptanceIds": ["AC1", "AC2"], "command": "cargo test --offline", "purpose": "the unit tests pass", "environment": "the developer's toolchain"}]}"#
    );
    std::fs::write(ws.join("plan.md"), &one).unwrap();
    let hook = |path: &str, event: &str| {
        let payload = serde_json::json!({"session_id": "ses_stop", "transcript_path": tmp.path().join("none.jsonl"), "cwd": ws, "hook_event_name": event}).to_string();
        let mut c = tacho(&home);
        c.current_dir(&ws)
            .env("PATH", path)
            .args(["hook", "claude-code"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), payload.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    hook(&user_path, "SessionStart");
    let (code, out) = t(
        &home,
        &ws,
        &user_path,
        &[],
        &[
            "goal",
            "create",
            "--plan",
            "plan.md",
            "--session",
            "ses_stop",
        ],
    );
    assert_eq!(code, 0, "{out}\n{one}");
    let fake = tmp.path().join("fake");
    std::fs::create_dir_all(&fake).unwrap();
    script(&fake.join("cargo"), "echo \"test result: ok. 42 passed\"");
    let agent_path = format!("{}:{user_path}", fake.display());
    let (code, out) = t(
        &home,
        &ws,
        &agent_path,
        &[],
        &["goal", "check", "unit-tests", "--session", "ses_stop"],
    );
    assert_ne!(code, 0, "the fake cargo passed: {out}");
    let stop = hook(&agent_path, "Stop");
    assert!(
        stop.contains("\"decision\":\"block\"") && stop.contains("unit-tests"),
        "the Stop gate let the agent go: {stop:?}"
    );
}
