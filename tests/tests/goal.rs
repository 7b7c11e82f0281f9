//! Goal assurance end to end through the binary: a sample project whose check fails,
//! then passes after an edit, then goes stale after another edit; completion is
//! refused, then allowed.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use tacho_tests::{mcp_calls, run, tacho};

use tacho_tests::PARITY_PLAN as PLAN;
use tacho_tests::parity_workspace as workspace_and_session;

fn t(home: &Path, ws: &Path, args: &[&str]) -> (i32, String, String) {
    let mut c = tacho(home);
    c.current_dir(ws).args(args);
    run(c)
}

#[test]
fn a_goal_is_completed_only_by_fresh_passing_receipts() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = workspace_and_session(tmp.path(), "ses_goal");
    let (code, out, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--assure",
            "--plan",
            "plan.md",
            "--session",
            "ses_goal",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let created: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(created["checks"], serde_json::json!(["parity"]));

    // Fails: the value is wrong.
    let (code, _, _) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_goal"],
    );
    assert_eq!(code, 1);
    let (code, out, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_goal"]);
    assert_eq!(code, 1);
    assert!(out.contains("parity: failed (exit code 1)"), "{out}");

    // Passes after the fix.
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    let (code, out, err) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_goal", "--json"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let receipt: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(receipt["receipt"]["exit_code"], 0);
    assert_eq!(
        receipt["receipt"]["fingerprint_before"],
        receipt["receipt"]["fingerprint_after"]
    );
    let (_, out, _) = t(
        &home,
        &ws,
        &["goal", "status", "--session", "ses_goal", "--json"],
    );
    let status: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(status["checks"][0]["state"], "passed");
    assert_eq!(status["can_complete"], true);
    // The fingerprint the user can inspect is the one the receipt holds.
    let (_, out, _) = t(&home, &ws, &["fingerprint", "src", "checks", "--json"]);
    let fp: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(fp["digest"], receipt["receipt"]["fingerprint_after"]);

    // Stale after another edit, even one that keeps the check passing.
    std::fs::write(ws.join("src/value.txt"), "42\n# checked\n").unwrap();
    let (_, out, _) = t(
        &home,
        &ws,
        &["goal", "status", "--session", "ses_goal", "--json"],
    );
    let status: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(status["checks"][0]["state"], "stale");
    assert_eq!(
        status["checks"][0]["why"],
        "the source changed since the check ran"
    );
    let (code, out, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_goal"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("parity: stale (the source changed since the check ran)"),
        "{out}"
    );

    // A fresh passing run lets it complete.
    let (code, _, _) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_goal"],
    );
    assert_eq!(code, 0);
    let (code, out, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_goal"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("completed: every check passed"), "{out}");
    // Every attempt is in the record.
    let (_, out, _) = t(
        &home,
        &ws,
        &["session", "replay", "ses_goal", "--mode", "summary"],
    );
    assert_eq!(out.matches("goal.check ").count(), 3, "{out}");
    assert_eq!(out.matches("goal.update").count(), 3, "{out}");
    let (code, _, _) = t(
        &home,
        &ws,
        &["session", "replay", "ses_goal", "--mode", "verify"],
    );
    assert_eq!(code, 0);
}

#[test]
fn a_check_is_run_by_id_only_and_a_bad_plan_names_the_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = workspace_and_session(tmp.path(), "ses_bad");
    std::fs::write(
        ws.join("plan.md"),
        PLAN.replace("sh checks/parity.sh", "echo ok"),
    )
    .unwrap();
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--assure",
            "--plan",
            "plan.md",
            "--session",
            "ses_bad",
        ],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("check parity is too weak to prove anything: it only observes"),
        "{err}"
    );
    std::fs::write(ws.join("plan.md"), PLAN).unwrap();
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--assure",
            "--plan",
            "plan.md",
            "--session",
            "ses_bad",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = t(
        &home,
        &ws,
        &["goal", "check", "rm -rf /", "--session", "ses_bad"],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("has no check \"rm -rf /\"; its checks: parity"),
        "{err}"
    );
}

/// A workspace with a failing check, a session and an assured goal.
fn setup(tmp: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (home, ws) = workspace_and_session(tmp, "ses_g2");
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--assure",
            "--plan",
            "plan.md",
            "--session",
            "ses_g2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    (home, ws)
}

fn status(home: &Path, ws: &Path) -> serde_json::Value {
    let (_, out, _) = t(
        home,
        ws,
        &["goal", "status", "--session", "ses_g2", "--json"],
    );
    serde_json::from_str(out.trim()).unwrap()
}

#[test]
fn block_needs_kind_evidence_and_the_statement() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = setup(tmp.path());
    let base = [
        "goal",
        "block",
        "--session",
        "ses_g2",
        "--reason",
        "staging is down",
        "--required-change",
        "restore staging",
    ];
    let with = |extra: &[&str]| {
        let mut v: Vec<&str> = base.to_vec();
        v.extend_from_slice(extra);
        t(&home, &ws, &v)
    };
    let (code, _, err) = with(&[
        "--kind",
        "weather",
        "--evidence",
        "1",
        "--no-independent-work",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("one of external_dependency, authorization, user_input"),
        "{err}"
    );
    let (code, _, err) = with(&["--kind", "external_dependency", "--evidence", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("no independent work remains"), "{err}");
    let (code, _, err) = with(&[
        "--kind",
        "external_dependency",
        "--evidence",
        "1",
        "--no-independent-work",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("is not a receipt of goal"), "{err}");
    let (code, out, _) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_g2", "--json"],
    );
    assert_eq!(code, 1);
    let receipt: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let seq = receipt["seq"].to_string();
    let (code, _, err) = with(&[
        "--kind",
        "external_dependency",
        "--evidence",
        &seq,
        "--no-independent-work",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(status(&home, &ws)["blocked"], "staging is down");
}

#[test]
fn revise_gives_a_new_identity_that_old_receipts_cannot_satisfy() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = setup(tmp.path());
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    let (code, _, _) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_g2"],
    );
    assert_eq!(code, 0);
    let old = status(&home, &ws);
    assert_eq!(old["checks"][0]["state"], "passed");
    std::fs::write(
        ws.join("plan2.md"),
        PLAN.replace("holds 42", "holds exactly 42"),
    )
    .unwrap();
    let (code, out, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "revise",
            "AC1 was ambiguous",
            "--plan",
            "plan2.md",
            "--session",
            "ses_g2",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let rev: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(rev["revises"], old["goal"]);
    assert_eq!(rev["revision"], 2);
    assert_eq!(rev["previous_digest"], old["contract_digest"]);
    assert_ne!(rev["contract_digest"], old["contract_digest"]);
    let new = status(&home, &ws);
    assert_eq!(new["goal"], rev["goal"]);
    assert_eq!(
        new["checks"][0]["state"], "missing",
        "the old receipt does not count"
    );
    let (code, out, _) = t(
        &home,
        &ws,
        &[
            "goal",
            "status",
            "--session",
            "ses_g2",
            "--goal",
            old["goal"].as_str().unwrap(),
        ],
    );
    assert_eq!(code, 0);
    assert!(out.contains("Replaced by revision"), "{out}");
    let (code, _, _) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_g2"],
    );
    assert_eq!(code, 0);
    let (code, _, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_g2"]);
    assert_eq!(code, 0);
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "revise",
            "late",
            "--plan",
            "plan2.md",
            "--session",
            "ses_g2",
        ],
    );
    assert_eq!(code, 2);
    assert!(err.contains("a completed goal is not revised"), "{err}");
}

/// After a revision, the earlier goal's calls cannot end the replacement: completing
/// or blocking the old goal is refused, and readiness comes from the current revision
/// (issue 28).
#[test]
fn calls_for_a_revised_goal_do_not_end_its_replacement() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = setup(tmp.path());
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    let (code, out, _) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_g2", "--json"],
    );
    assert_eq!(code, 0);
    let receipt: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let old = status(&home, &ws);
    let old_id = old["goal"].as_str().unwrap().to_string();
    std::fs::write(
        ws.join("plan2.md"),
        PLAN.replace("holds 42", "holds exactly 42"),
    )
    .unwrap();
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "revise",
            "AC1 was ambiguous",
            "--plan",
            "plan2.md",
            "--session",
            "ses_g2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // The old goal's check passed on this very source, yet it cannot be completed.
    let (code, out, err) = t(
        &home,
        &ws,
        &["goal", "complete", "--session", "ses_g2", "--goal", &old_id],
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("was replaced by revision"), "{err}");
    let seq = receipt["seq"].to_string();
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "block",
            "--session",
            "ses_g2",
            "--goal",
            &old_id,
            "--kind",
            "user_input",
            "--reason",
            "r",
            "--required-change",
            "c",
            "--evidence",
            &seq,
            "--no-independent-work",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("was replaced by revision"), "{err}");
    let (_, out, _) = t(
        &home,
        &ws,
        &[
            "goal",
            "status",
            "--session",
            "ses_g2",
            "--goal",
            &old_id,
            "--json",
        ],
    );
    let old_now: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(old_now["completed"], false);
    assert_eq!(old_now["can_complete"], false);
    // Revision 2 stalls with its check missing: not ready.
    for _ in 0..3 {
        let (code, _, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_g2"]);
        assert_eq!(code, 1);
    }
    let new = status(&home, &ws);
    assert_eq!(new["revision"], 2);
    assert!(new["paused"].is_string(), "{new}");
    let (_, risk, _) = t(&home, &ws, &["risk", "ses_g2", "--json"]);
    let risk: serde_json::Value = serde_json::from_str(risk.trim()).unwrap();
    assert_eq!(risk["readiness"], "blocked", "{risk}");
}

#[test]
fn completion_attempts_without_new_evidence_pause_the_goal() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = setup(tmp.path());
    let (_, _, err1) = t(&home, &ws, &["goal", "complete", "--session", "ses_g2"]);
    assert!(!err1.contains("hint"), "{err1}");
    let (_, _, err2) = t(&home, &ws, &["goal", "complete", "--session", "ses_g2"]);
    assert!(
        err2.contains("hint: a completion attempt needs new passing evidence"),
        "{err2}"
    );
    let (_, _, err3) = t(&home, &ws, &["goal", "complete", "--session", "ses_g2"]);
    assert!(err3.contains("goal paused (stalled: 3 completion attempts without new passing evidence); unfinished work: parity: missing"), "{err3}");
    assert!(
        status(&home, &ws)["paused"]
            .as_str()
            .unwrap()
            .starts_with("stalled")
    );
    // New passing evidence resumes it.
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_g2"],
    );
    assert!(status(&home, &ws)["paused"].is_null());
}

#[test]
fn a_branch_carries_the_contract_but_not_the_receipts() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = setup(tmp.path());
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_g2"],
    );
    let (code, _, err) = t(
        &home,
        &ws,
        &["session", "branch", "ses_g2", "--id", "ses_g2_b"],
    );
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = t(
        &home,
        &ws,
        &["goal", "status", "--session", "ses_g2_b", "--json"],
    );
    let s: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(s["contract_digest"], status(&home, &ws)["contract_digest"]);
    assert_eq!(s["checks"][0]["state"], "missing");
}

/// The MCP server driven by the official Python MCP client (`pip install mcp`, in
/// `tests/mcp/.venv` as `.ci/run` makes it): initialize, list the tools, create a goal,
/// run a check by id, read the status, complete.
#[test]
fn the_mcp_server_works_with_the_official_python_client() {
    let python = tacho_tests::repo_root().join("tests/mcp/.venv/bin/python");
    if !python.exists() {
        let msg =
            "the MCP check needs the Python MCP client in tests/mcp/.venv (.ci/run installs it)";
        tacho_tests::skip_without(msg);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = workspace_and_session(tmp.path(), "ses_mcp");
    let out = std::process::Command::new(&python)
        .arg(tacho_tests::repo_root().join("tests/mcp/client.py"))
        .arg(tacho_tests::tacho_bin())
        .arg(&ws)
        .arg("ses_mcp")
        .env("TACHO_HOME", &home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["server"], "tacho");
    assert_eq!(
        v["tools"],
        serde_json::json!(["create_goal", "get_goal", "update_goal", "verify_project"])
    );
    assert_eq!(v["create_error"], false);
    assert_eq!(v["created"]["checks"], serde_json::json!(["parity"]));
    // Over MCP too, the advice to name what the goal changes.
    assert!(
        v["created"]["proof_advice"][0]
            .as_str()
            .unwrap_or_default()
            .starts_with("the contract names no changePaths"),
        "{v}"
    );
    assert_eq!(v["check_error"], false);
    assert_eq!(v["check"]["receipt"]["exit_code"], 0);
    assert_eq!(v["bad_check_error"], true);
    assert!(
        v["bad_check"]["text"]
            .as_str()
            .unwrap()
            .contains("has no check \"not-a-check\"")
    );
    // The refusal of a block names the argument (noIndependentWork), not a CLI flag.
    assert_eq!(v["block_error"], true);
    let block = v["block"]["text"].as_str().unwrap();
    assert!(
        block.contains("pass noIndependentWork to state it"),
        "{block}"
    );
    assert!(!block.contains("--"), "{block}");
    assert_eq!(v["status"]["checks"][0]["state"], "passed");
    // Each check carries what the frozen plan says of it.
    assert_eq!(v["status"]["checks"][0]["command"], "sh checks/parity.sh");
    assert_eq!(v["status"]["checks"][0]["purpose"], "the value is right");
    assert_eq!(
        v["status"]["checks"][0]["source_paths"],
        serde_json::json!(["src", "checks"])
    );
    assert_eq!(v["complete_error"], false);
    assert_eq!(v["complete"]["accepted"], true);
    // A completed goal is not resumed: the refusal says why.
    assert_eq!(v["resume_error"], true);
    assert!(
        v["resume"]["text"]
            .as_str()
            .unwrap()
            .contains("is not paused (it is completed)"),
        "{}",
        v["resume"]
    );
    // Assurance is opt-in (issue 42): a plan without a contract is a plain goal
    // (no checks); `assure: true` requires a contract.
    assert_eq!(v["plain_error"], false, "{}", v["plain"]);
    assert!(v["plain"]["checks"].is_null(), "{}", v["plain"]);
    assert_eq!(v["required_error"], true);
    // The same evidence as the CLI's: the receipt is in the session's log.
    let (code, out, _) = t(
        &home,
        &ws,
        &[
            "goal",
            "status",
            "--session",
            "ses_mcp",
            "--json",
            "--goal",
            v["created"]["goal"].as_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    let s: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(s["completed"], true);
}

/// A goal without a contract keeps the plain rule: a passing verification after the
/// last edit; its status says plainly that it has no contract.
#[test]
fn a_goal_without_a_contract_keeps_the_plain_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = workspace_and_session(tmp.path(), "ses_plain");
    let plain = PLAN.split("## Assurance contract").next().unwrap();
    std::fs::write(ws.join("plain.md"), plain).unwrap();
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--plan",
            "plain.md",
            "--session",
            "ses_plain",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = t(&home, &ws, &["goal", "status", "--session", "ses_plain"]);
    assert!(out.contains("No assurance contract"), "{out}");
    // Issue 47 (8): no receipt binds its source: no fingerprint of it is shown.
    assert!(
        !out.contains("Source now") && !out.contains("Also fingerprinted"),
        "{out}"
    );
    // Status and completion never disagree: status says what complete would decide.
    let agrees = |accepted: bool| {
        let (_, out, _) = t(
            &home,
            &ws,
            &["goal", "status", "--session", "ses_plain", "--json"],
        );
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["can_complete"], accepted, "{v}");
        let (_, text, _) = t(&home, &ws, &["goal", "status", "--session", "ses_plain"]);
        let line = if accepted {
            "Can complete"
        } else {
            "Cannot complete yet"
        };
        assert!(text.contains(line), "{text}");
    };
    agrees(false);
    let (code, out, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_plain"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("the plain rule does not hold: no passing verification run"),
        "{out}"
    );
    let record = |line: &str| {
        let mut rec = tacho(&home);
        rec.args(["record", "--session", "ses_plain", "--snapshots", "off"])
            .stdin(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = rec.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(line.as_bytes())
            .unwrap();
        assert!(child.wait().unwrap().success());
    };
    record(r#"{"type":"verification.run","command":"cargo test","status":"passed"}"#);
    record(r#"{"type":"file.edit","path":"src/value.txt","op":"modify"}"#);
    let (code, out, err) = t(&home, &ws, &["goal", "complete", "--session", "ses_plain"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("files were edited after the last passing verification run"),
        "{out}"
    );
    // The second fruitless attempt's hint names what this goal needs: it has no
    // checks to run.
    assert!(
        format!("{out}{err}").contains("this goal has no checks"),
        "{out}{err}"
    );
    agrees(false);
    // Issue 47 (17): the rule's other half — the agent's todo list has no open item.
    record(
        r#"{"type":"todo.update","todos":[{"content":"Fix the value","status":"completed"},{"content":"Update the docs","status":"in_progress"}],"call_id":"toolu_t1"}"#,
    );
    record(r#"{"type":"verification.run","command":"cargo test","status":"passed"}"#);
    agrees(false);
    let (code, out, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_plain"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("the agent's todo list has 1 open item(s) (first: \"Update the docs\")"),
        "{out}"
    );
    record(
        r#"{"type":"todo.update","todos":[{"content":"Fix the value","status":"completed"},{"content":"Update the docs","status":"cancelled"}],"call_id":"toolu_t2"}"#,
    );
    agrees(true);
    let (code, out, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_plain"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("no assurance contract; the plain rule holds"),
        "{out}"
    );
}

/// The receipt of the last `goal.check` of `ses_g2`, as `log dump --json` shows it.
fn last_receipt_json(home: &Path, ws: &Path) -> serde_json::Value {
    let (_, out, _) = t(home, ws, &["log", "dump", "ses_g2", "--json"]);
    out.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["kind"] == "goal.check")
        .unwrap()["event"]
        .clone()
}

#[test]
fn a_forged_receipt_is_refused_at_ingest_and_never_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = setup(tmp.path());
    let (code, _, _) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_g2"],
    );
    assert_eq!(code, 1, "the check fails: the value is 41");

    // The reproduction: the failed receipt, edited to pass, piped into `tacho record`.
    let mut forged = last_receipt_json(&home, &ws);
    forged["exit_code"] = 0.into();
    forged["passed"] = true.into();
    forged["command"] = "forged".into();
    let input = format!("{forged}\n");
    let (code, _, err) = tacho_tests::run_with_stdin(&home, &["record"], &input);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("stdin: line 1: `goal.check` is evidence that only tacho writes"),
        "{err}"
    );
    assert!(err.contains("nothing was recorded"), "{err}");
    // Every evidence kind is refused the same way.
    for kind in [
        r#"{"type":"snapshot.taken","snapshot":"4b825dc642cb6eb9a060e54bf8d69288fbee4904","workspace":"/w","reason":"manual","files":0,"bytes":0}"#,
        r#"{"type":"goal.update","goal":"g","revision":1,"action":"complete","accepted":true}"#,
        r#"{"type":"session.branch","parent":"p","through_seq":1,"copied":1}"#,
    ] {
        let (code, _, err) =
            tacho_tests::run_with_stdin(&home, &["record", "--session", "ses_g2"], kind);
        assert_eq!(code, 2, "{kind}: {err}");
        assert!(err.contains("is evidence that only tacho writes"), "{err}");
    }
    let (code, out, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_g2"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("parity: failed"), "{out}");

    // A receipt that reached the log anyway (an older tacho accepted them) counts for
    // nothing unless it agrees with the frozen plan, and replay verification names it.
    let store = tacho_store::Store::open(home.join("log"), Default::default()).unwrap();
    let (seq, _) = {
        let body = tacho_schema::parse_json_line(&forged.to_string(), 1)
            .unwrap()
            .body;
        let r = store
            .writer("ses_g2")
            .unwrap()
            .append(1, &body, tacho_store::Durability::Sync)
            .unwrap();
        (r.last_seq, ())
    };
    let (code, out, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_g2"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("the receipt ran \"forged\", not the frozen plan's command"),
        "{out}"
    );
    let (code, out, _) = t(
        &home,
        &ws,
        &["session", "replay", "ses_g2", "--mode", "verify"],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "finding: event {seq}: receipt of check parity ran \"forged\", but the frozen plan's command is \"sh checks/parity.sh\""
        )),
        "{out}"
    );
    assert!(
        out.contains("goal receipts agree with their frozen plans: FAILED (2 checked)"),
        "{out}"
    );
}

/// A check that outlives its timeout: its shell ignores TERM and a child it started
/// ignores TERM too and keeps the output pipe open. The runner ends the whole process
/// group and returns soon after the timeout, with a failed, timed-out receipt.
#[test]
fn a_timeout_ends_every_process_of_the_check() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = workspace_and_session(tmp.path(), "ses_slow");
    // A duration no other process of the machine sleeps for (this test's process id
    // as its fraction): what is left running is told apart from anyone else's `sleep`.
    let nap = format!("60.{}", std::process::id());
    std::fs::write(
        ws.join("checks/slow.sh"),
        format!("trap '' TERM\n(trap '' TERM; sleep {nap}; echo late) &\nsleep {nap}\n"),
    )
    .unwrap();
    std::fs::write(
        ws.join("plan.md"),
        PLAN.replace("\"parity\"", "\"slow\"")
            .replace("sh checks/parity.sh", "sh checks/slow.sh"),
    )
    .unwrap();
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--assure",
            "--plan",
            "plan.md",
            "--session",
            "ses_slow",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let started = std::time::Instant::now();
    let (code, out, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "check",
            "slow",
            "--session",
            "ses_slow",
            "--timeout",
            "1",
            "--json",
        ],
    );
    let took = started.elapsed();
    assert_eq!(code, 1, "{out}{err}");
    // 1 s timeout + 1 s TERM grace + the drain grace; the check itself would run 60 s.
    assert!(
        took < std::time::Duration::from_secs(15),
        "the check held the runner for {took:?}"
    );
    let receipt: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(receipt["receipt"]["timed_out"], true, "{out}");
    assert_eq!(receipt["passed"], false);
    // Nothing of the check is left running.
    let ps = std::process::Command::new("sh")
        .args([
            "-c",
            &format!(
                "command -v ps >/dev/null || {{ echo 0; exit; }}; ps -eo args | grep -c '[s]leep {}$' || true",
                nap.replace('.', "\\.")
            ),
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&ps.stdout).trim(), "0");
}

/// Results do not depend on the current directory nor on the spelling of the
/// workspace: run from a subdirectory, with the session's workspace and an edit
/// reported through a symbolic link (and a trailing slash), every source file counts.
#[test]
fn results_do_not_depend_on_the_current_directory_or_the_spelling_of_the_workspace() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("checks")).unwrap();
    let ws = ws.canonicalize().unwrap();
    tacho_tests::git::git(&ws, &["init", "-q"]);
    std::fs::write(ws.join(".gitignore"), "src/gen.txt\n").unwrap();
    // Wrong at the goal's start, fixed after: a check that passed at the start could
    // not fail (SPEC §12.2, red/green).
    std::fs::write(ws.join("src/value.txt"), "41\n").unwrap();
    tacho_tests::git::git(&ws, &["add", "-A"]);
    tacho_tests::git::git(&ws, &["commit", "-q", "-m", "base"]);
    // Untracked, not ignored: part of the source.
    std::fs::write(
        ws.join("checks/parity.sh"),
        "test \"$(head -n1 src/value.txt)\" = \"42\"\n",
    )
    .unwrap();
    // Ignored: part of the source only because an edit event names it.
    std::fs::write(ws.join("src/gen.txt"), "generated v1\n").unwrap();
    std::fs::write(ws.join("plan.md"), PLAN).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&ws, &link).unwrap();
    let input = format!(
        "{{\"type\":\"session.start\",\"session\":\"ses_cwd\",\"workspace\":\"{}/\"}}\n",
        link.display()
    );
    let (code, _, err) = tacho_tests::run_with_stdin(&home, &["record"], &input);
    assert_eq!(code, 0, "{err}");
    let sub = ws.join("checks");
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--assure",
            "--plan",
            "plan.md",
            "--session",
            "ses_cwd",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let edit = format!(
        "{{\"type\":\"file.edit\",\"session\":\"ses_cwd\",\"path\":\"{}/src/gen.txt\",\"op\":\"modify\"}}\n",
        link.display()
    );
    let (code, _, err) = tacho_tests::run_with_stdin(&home, &["record"], &edit);
    assert_eq!(code, 0, "{err}");
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    let (code, out, err) = t(
        &home,
        &sub,
        &["goal", "check", "parity", "--session", "ses_cwd"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let state = |home: &Path| {
        let (_, out, _) = t(
            home,
            &sub,
            &["goal", "status", "--session", "ses_cwd", "--json"],
        );
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        v["checks"][0]["state"].as_str().unwrap().to_owned()
    };
    assert_eq!(state(&home), "passed");
    // The same fingerprint from the workspace root and from a subdirectory.
    let fp = |cwd: &Path| {
        let mut c = tacho_tests::tacho(&home);
        c.current_dir(cwd).args([
            "fingerprint",
            "src",
            "checks",
            "--workspace",
            ws.to_str().unwrap(),
            "--json",
        ]);
        let (_, out, _) = run(c);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        (v["digest"].clone(), v["entries"].as_array().unwrap().len())
    };
    assert_eq!(fp(&ws), fp(&sub));
    assert_eq!(fp(&sub).1, 2, "src/value.txt and checks/parity.sh");
    // An edit of the untracked check script, seen from the subdirectory.
    std::fs::write(ws.join("checks/parity.sh"), "true\n").unwrap();
    assert_eq!(state(&home), "stale");
    std::fs::write(
        ws.join("checks/parity.sh"),
        "test \"$(head -n1 src/value.txt)\" = \"42\"\n",
    )
    .unwrap();
    assert_eq!(state(&home), "passed");
    // The ignored file named by an edit through the link is fingerprinted too.
    std::fs::write(ws.join("src/gen.txt"), "generated v2\n").unwrap();
    assert_eq!(state(&home), "stale");
    // The session's workspace is recorded in one spelling: the canonical one.
    let (_, out, _) = t(&home, &ws, &["session", "show", "ses_cwd", "--json"]);
    let show: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(show["workspace"], ws.display().to_string());
}

/// A plan with an assurance contract makes an assured goal, with or without
/// `--assure`: its completion is earned by its checks.
#[test]
fn a_contract_makes_the_goal_assured() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = workspace_and_session(tmp.path(), "ses_g2");
    let (code, _, err) = t(
        &home,
        &ws,
        &["goal", "create", "--plan", "plan.md", "--session", "ses_g2"],
    );
    assert_eq!(code, 0, "{err}");
    let s = status(&home, &ws);
    assert_eq!(s["assured"], true, "{s}");
    let (code, out, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_g2"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("parity: missing"), "{out}");
}

/// Goal events are part of the story: the trace shows receipts and gate decisions, and
/// a refused completion that nothing made good is a risk factor.
#[test]
fn trace_and_risk_show_goal_events() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = setup(tmp.path());
    let (code, _, _) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_g2"],
    );
    assert_eq!(code, 1);
    let (code, _, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_g2"]);
    assert_eq!(code, 1);
    let (_, trace, _) = t(&home, &ws, &["session", "trace", "ses_g2"]);
    assert!(
        trace.contains("! CHECK   parity failed (exit 1)"),
        "{trace}"
    );
    assert!(
        trace.contains("! GATE    completion refused: 1 of 1 checks not passed"),
        "{trace}"
    );
    let (_, risk, _) = t(&home, &ws, &["risk", "ses_g2", "--json"]);
    let risk: serde_json::Value = serde_json::from_str(risk.trim()).unwrap();
    let ids: Vec<&str> = risk["factors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"goal_not_completed"), "{ids:?}");
    assert_eq!(risk["readiness"], "blocked");
    // Made good: the check passes, the gate accepts, the factor goes.
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    let (code, _, _) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_g2"],
    );
    assert_eq!(code, 0);
    let (code, _, _) = t(&home, &ws, &["goal", "complete", "--session", "ses_g2"]);
    assert_eq!(code, 0);
    let (_, risk, _) = t(&home, &ws, &["risk", "ses_g2", "--json"]);
    assert!(!risk.contains("goal_not_completed"), "{risk}");
    let (_, trace, _) = t(&home, &ws, &["session", "trace", "ses_g2"]);
    assert!(trace.contains("  GATE    completion accepted"), "{trace}");
}

/// A frozen goal's contract digest is checked against its plan by replay verification,
/// whatever version made it: a version-1 digest (before RFC 8785) still verifies, a
/// digest that is not the plan's is a finding.
#[test]
fn contract_digests_of_every_version_are_checked_against_the_frozen_plan() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = workspace_and_session(tmp.path(), "ses_dig");
    let (code, out, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--assure",
            "--plan",
            "plan.md",
            "--session",
            "ses_dig",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let created: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let digest = created["contract_digest"].as_str().unwrap().to_string();
    assert!(digest.starts_with("v2:"), "{digest}");
    let verify = |home: &Path| {
        let mut c = tacho(home);
        c.args(["session", "replay", "ses_dig", "--mode", "verify"]);
        run(c)
    };
    assert_eq!(verify(&home).0, 0);

    // The same goal frozen by a tacho of digest version 1, and one with a digest that
    // is not its plan's.
    let store = tacho_store::Store::open(home.join("log"), Default::default()).unwrap();
    let mut frozen = None;
    store
        .read_session("ses_dig", |e| {
            if let tacho_schema::EventBody::GoalCreated(g) = e.event.body {
                frozen = Some(g);
            }
        })
        .unwrap();
    let frozen = frozen.unwrap();
    let plan = tacho_goals::validate(&tacho_goals::Submission {
        markdown: &frozen.plan,
        objective: "",
        head: None,
        assure: true,
    })
    .unwrap();
    let mut v1 = frozen.clone();
    v1.goal = "goal_v1".into();
    v1.contract_digest = tacho_goals::contract_digest_v1(&plan);
    let mut w = store.writer("ses_dig").unwrap();
    w.append(
        1,
        &tacho_schema::EventBody::GoalCreated(v1),
        tacho_store::Durability::Sync,
    )
    .unwrap();
    drop(w);
    let (code, out, err) = verify(&home);
    assert_eq!(code, 0, "a version-1 digest still verifies: {out}{err}");
    let mut forged = frozen;
    forged.goal = "goal_forged".into();
    forged.contract_digest = format!("v2:{}", "0".repeat(64));
    let mut w = store.writer("ses_dig").unwrap();
    w.append(
        2,
        &tacho_schema::EventBody::GoalCreated(forged),
        tacho_store::Durability::Sync,
    )
    .unwrap();
    drop(w);
    let (code, out, err) = verify(&home);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("goal goal_forged: its contract digest"),
        "{out}{err}"
    );
}

/// The parity plan with another check command (JSON-escaped into the contract).
fn plan_running(command: &str) -> String {
    PLAN.replace(
        "\"sh checks/parity.sh\"",
        &serde_json::to_string(command).unwrap(),
    )
}

/// Issue 28: with a check whose script exits 1, every wrapper is either refused at
/// freeze or fails when run (bash with errexit and pipefail), and the goal never
/// completes; honest forms still complete once the value is right.
#[test]
fn a_failing_check_never_completes_an_assured_goal_whatever_wraps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = workspace_and_session(tmp.path(), "ses_wrap");
    let c = "sh checks/parity.sh";
    let wrappers = [
        c.to_string(),
        format!("{c} 2>&1 | tail -20"),
        format!("{c} | tee out.log"),
        format!("{c} |& tee out.log"),
        format!("{c}; echo done"),
        format!("{c} > out.log 2>&1; echo $?"),
        format!("timeout 60 {c} | tail -1"),
        format!("cd . && {c} | cat"),
        format!("({c}) | cat"),
        format!("v=$({c}); echo got"),
        format!("bash -eo pipefail -c '{c} | cat; echo done'"),
        format!("{c} || echo failed"),
        format!("{c} || /bin/true"),
        format!("{c} || true"),
        format!("({c} || true)"),
        format!("{c} & wait"),
        format!("! {c}"),
        format!("if {c}; then :; fi"),
        format!("{c} && echo ok; echo done"),
        format!("{c}; exit 0"),
        format!("{c}; true"),
        format!("{c} || exit 0"),
        format!("sh -c '{c}; echo done'"),
        format!("bash -c '{c} | tail -20'"),
        format!("eval '{c} || true'"),
        format!("echo \"$({c})\""),
        format!("diff <({c}) out.log"),
        format!("set +e; {c}; echo done"),
        format!("trap 'exit 0' EXIT; {c}"),
        format!("while ! {c}; do break; done"),
        format!("for i in 1; do {c}; done"),
        format!("true() {{ :; }}; {c}"),
    ];
    // The environment cannot replace what the check's bash runs: a function
    // exported as `sh`, or a BASH_ENV script that does the same, is ignored (`-p`).
    std::fs::write(ws.join("plan.md"), plan_running(c)).unwrap();
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--plan",
            "plan.md",
            "--session",
            "ses_wrap",
        ],
    );
    assert_eq!(code, 0, "{err}");
    std::fs::write(tmp.path().join("env.sh"), "sh() { return 0; }\nset +e\n").unwrap();
    let mut cmd = tacho(&home);
    cmd.current_dir(&ws)
        .args(["goal", "check", "parity", "--session", "ses_wrap"])
        .env("BASH_FUNC_sh%%", "() { return 0; }")
        .env("BASH_ENV", tmp.path().join("env.sh"));
    let (code, out, err) = run(cmd);
    assert_eq!(code, 1, "the environment made the check pass: {out}{err}");
    // Nor can PATH choose the check's shell: bash is taken from a fixed path.
    let fake = tmp.path().join("fake");
    std::fs::create_dir(&fake).unwrap();
    for shell in ["sh", "bash"] {
        std::fs::write(fake.join(shell), "#!/bin/sh\nexit 0\n").unwrap();
        let mut p = std::fs::metadata(fake.join(shell)).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
        std::fs::set_permissions(fake.join(shell), p).unwrap();
    }
    std::fs::write(ws.join("plan.md"), plan_running("/bin/sh checks/parity.sh")).unwrap();
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--plan",
            "plan.md",
            "--session",
            "ses_wrap",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let path = format!(
        "{}:{}",
        fake.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = tacho(&home);
    cmd.current_dir(&ws)
        .args(["goal", "check", "parity", "--session", "ses_wrap"])
        .env("PATH", path);
    let (code, out, err) = run(cmd);
    assert_eq!(code, 1, "a shell on PATH made the check pass: {out}{err}");

    let (mut refused, mut failed) = (0, 0);
    for w in &wrappers {
        std::fs::write(ws.join("plan.md"), plan_running(w)).unwrap();
        let (code, _, err) = t(
            &home,
            &ws,
            &[
                "goal",
                "create",
                "--plan",
                "plan.md",
                "--session",
                "ses_wrap",
            ],
        );
        if code == 2 {
            assert!(
                err.contains("check parity can hide a failure: "),
                "{w}: {err}"
            );
            refused += 1;
            continue;
        }
        assert_eq!(code, 0, "{w}: {err}");
        let (code, out, err) = t(
            &home,
            &ws,
            &["goal", "check", "parity", "--session", "ses_wrap", "--json"],
        );
        assert_eq!(code, 1, "{w} passed: {out}{err}");
        let receipt: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(receipt["passed"], false, "{w}");
        let (code, out, err) = t(&home, &ws, &["goal", "complete", "--session", "ses_wrap"]);
        assert_eq!(code, 1, "{w} completed: {out}{err}");
        failed += 1;
    }
    assert_eq!((refused, failed), (21, 11));

    // Honest forms complete once the check passes: frozen while the value is wrong,
    // checked after the fix (a check that passed at the freeze could not fail).
    for honest in &wrappers[..11] {
        std::fs::write(ws.join("src/value.txt"), "41\n").unwrap();
        std::fs::write(ws.join("plan.md"), plan_running(honest)).unwrap();
        let (code, _, err) = t(
            &home,
            &ws,
            &[
                "goal",
                "create",
                "--plan",
                "plan.md",
                "--session",
                "ses_wrap",
            ],
        );
        assert_eq!(code, 0, "{honest}: {err}");
        std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
        let (code, out, err) = t(
            &home,
            &ws,
            &["goal", "check", "parity", "--session", "ses_wrap"],
        );
        assert_eq!(code, 0, "{honest}: {out}{err}");
        let (code, out, err) = t(&home, &ws, &["goal", "complete", "--session", "ses_wrap"]);
        assert_eq!(code, 0, "{honest}: {out}{err}");
        assert!(out.contains("completed: every check passed"), "{out}");
    }
}

/// A plan frozen before today's rules keeps its digest, and `goal status` and the
/// completion gate warn that its check can hide a failure (and that a lone
/// path-filtered `git log` proves nothing); the hiding check no longer completes it:
/// it passes without the change too.
#[test]
fn an_older_plan_whose_check_can_hide_failure_gets_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = workspace_and_session(tmp.path(), "ses_old");
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--plan",
            "plan.md",
            "--session",
            "ses_old",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // The same goal as an older tacho froze it, with checks today's rules refuse.
    let store = tacho_store::Store::open(home.join("log"), Default::default()).unwrap();
    let mut frozen = None;
    store
        .read_session("ses_old", |e| {
            if let tacho_schema::EventBody::GoalCreated(g) = e.event.body {
                frozen = Some(g);
            }
        })
        .unwrap();
    let frozen = frozen.unwrap();
    let mut plan = tacho_goals::validate(&tacho_goals::Submission {
        markdown: &frozen.plan,
        objective: "",
        head: None,
        assure: true,
    })
    .unwrap();
    let hiding = "sh checks/parity.sh || true";
    let mut assurance = plan.assurance.clone().unwrap();
    assurance.checks[0].command = hiding.into();
    let mut gitlog = assurance.checks[0].clone();
    gitlog.id = "logged".into();
    gitlog.command = "git log --oneline -- src".into();
    assurance.checks.push(gitlog);
    plan.assurance = Some(assurance.clone());
    // The contract's JSON line in the plan's Markdown.
    let json = serde_json::to_string(&assurance).unwrap();
    plan.markdown = frozen
        .plan
        .lines()
        .map(|l| {
            if l.starts_with("{\"version\"") {
                json.as_str()
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    assert!(plan.markdown.contains(hiding), "{}", plan.markdown);
    let mut old = frozen.clone();
    old.goal = "goal_old".into();
    // An older tacho froze no check environment either (goal.created v1).
    old.environment = Vec::new();
    old.environment_digest = None;
    old.programs = Vec::new();
    old.plan = plan.markdown.clone();
    old.assurance = Some(serde_json::to_string(&assurance).unwrap());
    old.contract_digest = tacho_goals::contract_digest(&plan);
    let mut w = store.writer("ses_old").unwrap();
    w.append(
        1,
        &tacho_schema::EventBody::GoalCreated(old.clone()),
        tacho_store::Durability::Sync,
    )
    .unwrap();
    drop(w);

    // Its digest is still checked by replay verification: a forged one is reported.
    let verify = || {
        let mut c = tacho(&home);
        c.args(["session", "replay", "ses_old", "--mode", "verify"]);
        run(c)
    };
    let (code, out, err) = verify();
    assert_eq!(code, 0, "{out}{err}");
    let mut forged = old.clone();
    forged.goal = "goal_forged".into();
    forged.contract_digest = format!("v2:{}", "0".repeat(64));
    let mut w = store.writer("ses_old").unwrap();
    w.append(
        2,
        &tacho_schema::EventBody::GoalCreated(forged),
        tacho_store::Durability::Sync,
    )
    .unwrap();
    drop(w);
    let (code, out, err) = verify();
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("goal goal_forged: its contract digest"),
        "{out}{err}"
    );
    // The older goal is the current one again.
    let mut w = store.writer("ses_old").unwrap();
    w.append(
        3,
        &tacho_schema::EventBody::GoalCreated(old.clone()),
        tacho_store::Durability::Sync,
    )
    .unwrap();
    drop(w);
    drop(store);

    let (code, out, err) = t(
        &home,
        &ws,
        &["goal", "status", "--session", "ses_old", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let status: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(status["goal"], "goal_old");
    assert_eq!(status["contract_digest"], old.contract_digest.as_str());
    let warnings: Vec<String> = status["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect();
    // The two refused checks, then what the receipts can prove (no changePaths).
    assert_eq!(warnings.len(), 3, "{warnings:?}");
    assert!(
        warnings[2].starts_with("the contract names no changePaths"),
        "{warnings:?}"
    );
    assert!(
        warnings[0]
            .starts_with("check parity can hide a failure: `||` before the command at column 24"),
        "{warnings:?}"
    );
    assert!(
        warnings[1]
            .starts_with("check logged is too weak to prove anything: a path-filtered `git log`"),
        "{warnings:?}"
    );
    let (_, text, _) = t(&home, &ws, &["goal", "status", "--session", "ses_old"]);
    assert!(
        text.contains("Warning: check parity can hide a failure"),
        "{text}"
    );

    // The hiding check exits 0 although the value is wrong (41), but it passes without
    // the change too: it cannot fail, so it proves nothing (SPEC §12.2, red/green),
    // whatever rule its plan was frozen under. The gate's answer carries the
    // warnings, recorded with it.
    let (code, out, err) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", "ses_old"],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.starts_with("check parity failed: unable to fail: passed without the change"),
        "{out}"
    );
    let (code, out, err) = t(&home, &ws, &["goal", "complete", "--session", "ses_old"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("warning: check parity can hide a failure"),
        "{err}"
    );
    assert!(
        out.contains("2 of 2 checks not passed; warning: check parity can hide a failure"),
        "{out}"
    );
}

/// An application error names the field it is about as each frontend's users know it:
/// MCP tells an agent the argument (`noIndependentWork`), the CLI the flag
/// (`--no-independent-work`); neither is told the other's word.
#[test]
fn mcp_names_its_arguments_and_the_cli_its_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = workspace_and_session(tmp.path(), "ses_names");
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--plan",
            "plan.md",
            "--session",
            "ses_names",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let blocked = |extra: serde_json::Value| {
        let mut args = serde_json::json!({
            "session": "ses_na", "status": "blocked", "kind": "external_dependency",
            "reason": "staging is down", "requiredChange": "restore staging", "evidence": [1],
        });
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        serde_json::json!({"name": "update_goal", "arguments": args})
    };
    let r = mcp_calls(
        &home,
        &ws,
        &[
            blocked(serde_json::json!({})),
            blocked(serde_json::json!({"kind": "weather", "noIndependentWork": true})),
            blocked(serde_json::json!({"requiredChange": " ", "noIndependentWork": true})),
            blocked(serde_json::json!({"noIndependentWork": true})),
            // What a block states is checked before the session is looked up.
            blocked(serde_json::json!({"session": "nope"})),
            // A prefix is resolved once, by the server, to the session.
            serde_json::json!({"name": "get_goal", "arguments": {"session": "ses_na"}}),
        ],
    );
    assert_eq!(
        r[5]["structuredContent"]["session"], "ses_names",
        "{}",
        r[5]
    );
    let r = &r[..5];
    let text = |v: &serde_json::Value| {
        assert_eq!(v["isError"], true, "{v}");
        v["content"][0]["text"].as_str().unwrap().to_owned()
    };
    let no_independent = text(&r[0]);
    assert!(
        no_independent.contains("pass noIndependentWork to state it"),
        "{no_independent}"
    );
    assert!(
        text(&r[1]).starts_with("kind \"weather\": one of"),
        "{}",
        text(&r[1])
    );
    assert_eq!(text(&r[2]), "requiredChange must say something");
    assert!(text(&r[3]).starts_with("evidence 1: event #1 of session ses_names"));
    assert_eq!(text(&r[4]), no_independent);
    for v in r {
        assert!(!text(v).contains("--"), "a CLI flag told to an agent: {v}");
    }

    // The CLI says the same with its flags.
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "block",
            "--session",
            "ses_na",
            "--kind",
            "external_dependency",
            "--reason",
            "staging is down",
            "--required-change",
            " ",
            "--evidence",
            "1",
        ],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("pass --no-independent-work to state it"),
        "{err}"
    );
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "block",
            "--session",
            "ses_na",
            "--kind",
            "external_dependency",
            "--reason",
            "staging is down",
            "--required-change",
            " ",
            "--evidence",
            "1",
            "--no-independent-work",
        ],
    );
    assert_eq!(code, 2);
    assert_eq!(err.trim(), "error: --required-change must say something");

    // An operation a message points to is each frontend's own: MCP's tool, the CLI's
    // command.
    let line = format!(
        r#"{{"type":"session.start","session":"ses_bare","workspace":"{}"}}"#,
        ws.display()
    );
    let (code, _, err) =
        tacho_tests::run_with_stdin(&home, &["record", "--snapshots", "off"], &line);
    assert_eq!(code, 0, "{err}");
    let r = mcp_calls(
        &home,
        &ws,
        &[serde_json::json!({"name": "get_goal", "arguments": {"session": "ses_bare"}})],
    );
    assert_eq!(
        text(&r[0]),
        "session ses_bare has no goal; create one with create_goal"
    );
    let (code, _, err) = t(&home, &ws, &["goal", "status", "--session", "ses_bare"]);
    assert_eq!(code, 4);
    assert_eq!(
        err.trim(),
        "error: session ses_bare has no goal; create one with `tacho goal create`"
    );
}
