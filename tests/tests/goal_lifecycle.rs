//! Goal assurance through the binary, the rest of the goal's life (BRIEF §3): the
//! plan size advisory, what status and receipts disclose about the fingerprint, what
//! each check carries, `goal replace` (also raced) and `goal resume`.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::{Path, PathBuf};

use tacho_tests::PARITY_PLAN as PLAN;
use tacho_tests::parity_workspace;
use tacho_tests::{run, run_with_stdin, tacho};

const S: &str = "ses_life";

fn t(home: &Path, ws: &Path, args: &[&str]) -> (i32, String, String) {
    let mut c = tacho(home);
    c.current_dir(ws).args(args);
    run(c)
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// A workspace, a session and an assured goal frozen from the parity plan.
fn setup(tmp: &Path) -> (PathBuf, PathBuf) {
    let (home, ws) = parity_workspace(tmp, S);
    let (code, _, err) = t(
        &home,
        &ws,
        &["goal", "create", "--plan", "plan.md", "--session", S],
    );
    assert_eq!(code, 0, "{err}");
    (home, ws)
}

fn status(home: &Path, ws: &Path, goal: Option<&str>) -> serde_json::Value {
    let mut args = vec!["goal", "status", "--session", S, "--json"];
    if let Some(g) = goal {
        args.extend(["--goal", g]);
    }
    let (_, out, _) = t(home, ws, &args);
    json(&out)
}

/// The parity plan grown past the advisory size (still under the hard limit).
fn large_plan() -> String {
    let mut extra = String::new();
    while PLAN.len() + extra.len() < 7_500 {
        extra.push_str("- nothing about the other files of the repository changes\n");
    }
    PLAN.replace("- anything else\n", &format!("- anything else\n{extra}"))
}

#[test]
fn a_plan_over_the_advisory_size_is_frozen_with_an_advisory() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = parity_workspace(tmp.path(), S);
    let large = large_plan();
    assert!(large.len() > 7_168 && large.len() <= 8_192);
    std::fs::write(ws.join("large.md"), &large).unwrap();
    let (code, out, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--plan",
            "large.md",
            "--session",
            S,
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let advisory = v["advisory"].as_str().unwrap();
    assert!(
        advisory.contains(&format!("{} bytes", large.len())) && advisory.contains("7,168"),
        "{advisory}"
    );
    // In text too.
    let (code, out, err) = t(
        &home,
        &ws,
        &["goal", "create", "--plan", "large.md", "--session", S],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("advisory:") && out.contains("7,168"), "{out}");
    // A plan under the size has none.
    let (_, out, _) = t(
        &home,
        &ws,
        &[
            "goal",
            "create",
            "--plan",
            "plan.md",
            "--session",
            S,
            "--json",
        ],
    );
    assert!(json(&out)["advisory"].is_null(), "{out}");
    // Revise and replace say so too.
    let (code, out, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "revise",
            "more non-goals",
            "--plan",
            "large.md",
            "--session",
            S,
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(json(&out)["advisory"].as_str().unwrap().contains("7,168"));
    let (code, out, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "replace",
            "a new objective",
            "--plan",
            "large.md",
            "--session",
            S,
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(json(&out)["advisory"].as_str().unwrap().contains("7,168"));
}

#[test]
fn status_and_receipts_disclose_additional_and_external_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = setup(tmp.path());
    std::fs::create_dir_all(ws.join("notes")).unwrap();
    std::fs::write(ws.join("notes/extra.txt"), "x\n").unwrap();
    let scratch = tmp.path().join("scratch/draft.txt");
    for path in [
        ws.join("notes/extra.txt"),
        ws.join("src/value.txt"),
        scratch.clone(),
    ] {
        let edit = format!(
            "{{\"type\":\"file.edit\",\"session\":\"{S}\",\"path\":\"{}\",\"op\":\"modify\"}}\n",
            path.display()
        );
        let (code, _, err) = run_with_stdin(&home, &["record", "--snapshots", "off"], &edit);
        assert_eq!(code, 0, "{err}");
    }
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    let (code, out, err) = t(
        &home,
        &ws,
        &["goal", "check", "parity", "--session", S, "--json"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let receipt = json(&out);
    let additional = serde_json::json!(["notes/extra.txt"]);
    let external = serde_json::json!([scratch.display().to_string()]);
    assert_eq!(receipt["additional_paths"], additional, "{out}");
    assert_eq!(receipt["external_paths_left_out"], external, "{out}");
    let s = status(&home, &ws, None);
    assert_eq!(s["additional_paths"], additional);
    assert_eq!(s["external_paths_left_out"], external);
    // The additional file really is part of the fingerprint.
    std::fs::write(ws.join("notes/extra.txt"), "y\n").unwrap();
    assert_eq!(status(&home, &ws, None)["checks"][0]["state"], "stale");
    // In text.
    let (_, out, _) = t(&home, &ws, &["goal", "status", "--session", S]);
    assert!(
        out.contains("Also fingerprinted (reported by edits): notes/extra.txt"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "Left out (outside the workspace): {}",
            scratch.display()
        )),
        "{out}"
    );
    let (_, out, _) = t(&home, &ws, &["goal", "check", "parity", "--session", S]);
    assert!(out.contains("also fingerprinted: notes/extra.txt"), "{out}");
    assert!(out.contains("left out (outside the workspace)"), "{out}");
}

#[test]
fn status_carries_each_checks_contract() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = parity_workspace(tmp.path(), S);
    std::fs::write(
        ws.join("plan.md"),
        PLAN.replace(
            r#""sourcePaths": ["src", "checks"], "#,
            r#""sourcePaths": ["src", "checks"], "sources": [{"role": "requirement", "reference": "the ticket"}], "#,
        ),
    )
    .unwrap();
    let (code, _, err) = t(
        &home,
        &ws,
        &["goal", "create", "--plan", "plan.md", "--session", S],
    );
    assert_eq!(code, 0, "{err}");
    let c = &status(&home, &ws, None)["checks"][0];
    assert_eq!(c["command"], "sh checks/parity.sh");
    assert_eq!(c["purpose"], "the value is right");
    assert_eq!(c["source_paths"], serde_json::json!(["src", "checks"]));
    assert_eq!(
        c["sources"],
        serde_json::json!([{"role": "requirement", "reference": "the ticket"}])
    );
    assert_eq!(c["recent_evidence"], serde_json::json!([]));
    let mut receipts = Vec::new();
    for _ in 0..7 {
        let (_, out, _) = t(
            &home,
            &ws,
            &["goal", "check", "parity", "--session", S, "--json"],
        );
        receipts.push(json(&out)["seq"].as_u64().unwrap());
    }
    let newest_first: Vec<u64> = receipts.iter().rev().take(5).copied().collect();
    assert_eq!(
        status(&home, &ws, None)["checks"][0]["recent_evidence"],
        serde_json::json!(newest_first)
    );
    let (_, out, _) = t(&home, &ws, &["goal", "status", "--session", S]);
    assert!(out.contains("purpose: the value is right"), "{out}");
    assert!(
        out.contains(&format!("recent receipts: #{}", receipts[6])),
        "{out}"
    );
    assert!(out.contains("command: sh checks/parity.sh"), "{out}");
}

#[test]
fn replace_keeps_assurance_and_one_replacement_takes_over() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = setup(tmp.path());
    let old = status(&home, &ws, None);
    let old_id = old["goal"].as_str().unwrap().to_owned();
    // A replacement without a contract is refused: assurance is kept, and the old
    // goal stays the current one.
    let plain = PLAN
        .split("## Assurance contract")
        .next()
        .unwrap()
        .to_owned();
    std::fs::write(ws.join("plain.md"), plain).unwrap();
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "replace",
            "do it differently",
            "--plan",
            "plain.md",
            "--session",
            S,
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("plain.md"), "{err}");
    assert_eq!(status(&home, &ws, None)["goal"], old_id.as_str());

    std::fs::write(
        ws.join("plan2.md"),
        PLAN.replace("Value is the answer", "Value is the other answer"),
    )
    .unwrap();
    let (code, out, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "replace",
            "the value must come from the ticket",
            "--plan",
            "plan2.md",
            "--session",
            S,
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let rep = json(&out);
    assert_eq!(rep["replaces"], old_id.as_str());
    let new = status(&home, &ws, None);
    assert_eq!(new["goal"], rep["goal"]);
    assert_eq!(new["assured"], true);
    assert_eq!(new["revises"], old_id.as_str());
    assert_eq!(new["title"], "Value is the other answer");
    assert_eq!(status(&home, &ws, Some(&old_id))["revised_by"], rep["goal"]);
    // A second replacement of the same goal does not take over.
    let (code, _, err) = t(
        &home,
        &ws,
        &[
            "goal",
            "replace",
            "again",
            "--plan",
            "plan2.md",
            "--session",
            S,
            "--goal",
            &old_id,
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("already replaced by"), "{err}");
    assert_eq!(status(&home, &ws, None)["goal"], rep["goal"]);
}

#[test]
fn racing_replacements_let_exactly_one_take_over() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = setup(tmp.path());
    let old_id = status(&home, &ws, None)["goal"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(ws.join("plan2.md"), PLAN).unwrap();
    let children: Vec<_> = (0..6)
        .map(|i| {
            let mut c = tacho(&home);
            c.current_dir(&ws)
                .args(["goal", "replace", &format!("replacement {i}")])
                .args(["--plan", "plan2.md", "--session", S, "--goal", &old_id])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    let outcomes: Vec<_> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    let won = outcomes.iter().filter(|o| o.status.success()).count();
    assert_eq!(won, 1, "exactly one replacement takes over");
    for o in outcomes.iter().filter(|o| !o.status.success()) {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("already replaced by"), "{err}");
    }
    let (_, out, _) = t(&home, &ws, &["log", "dump", S, "--json"]);
    assert_eq!(out.matches("\"kind\":\"goal.created\"").count(), 2, "{out}");
}

#[test]
fn resume_lifts_a_pause_and_only_a_pause() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = setup(tmp.path());
    let (code, _, err) = t(&home, &ws, &["goal", "resume", "--session", S]);
    assert_eq!(code, 2);
    assert!(err.contains("is not paused"), "{err}");
    for _ in 0..3 {
        t(&home, &ws, &["goal", "complete", "--session", S]);
    }
    assert!(status(&home, &ws, None)["paused"].is_string());
    let (code, out, err) = t(&home, &ws, &["goal", "resume", "--session", S]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("resumed"), "{out}");
    assert!(status(&home, &ws, None)["paused"].is_null());
    // Issue 47 (16): the report says it was a resume, not a refused pause.
    let (code, out, err) = t(&home, &ws, &["audit", "report", S, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let gates = report["gates"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"));
    let last = gates.last().unwrap();
    assert_eq!(
        (last["action"].as_str(), last["resume"].as_bool()),
        (Some("pause"), Some(true)),
        "{last}"
    );
    assert!(
        gates.iter().filter(|g| g["resume"] == true).count() == 1,
        "{report}"
    );
    // And so does the run-report page: "resume … resumed", not "pause … refused".
    let page = report_page(&home, &format!("/s/{S}"));
    assert!(
        page.contains("<td>resume</td>") && page.contains(">resumed</span>"),
        "{page}"
    );
    // Resumed, the goal holds again: the next refused attempt does not pause it at
    // once (the stall count starts over).
    let (_, _, err) = t(&home, &ws, &["goal", "complete", "--session", S]);
    assert!(!err.contains("goal paused"), "{err}");
    assert!(status(&home, &ws, None)["paused"].is_null());
    // A failed replacement plan leaves the previous contract resumable.
    for _ in 0..2 {
        t(&home, &ws, &["goal", "complete", "--session", S]);
    }
    assert!(status(&home, &ws, None)["paused"].is_string());
    std::fs::write(ws.join("bad.md"), "# no kind\n").unwrap();
    let (code, _, _) = t(
        &home,
        &ws,
        &["goal", "replace", "x", "--plan", "bad.md", "--session", S],
    );
    assert_eq!(code, 2);
    let (code, _, err) = t(&home, &ws, &["goal", "resume", "--session", S, "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(status(&home, &ws, None)["paused"].is_null());
}

/// The body of one page of `tacho run-report` on `home`.
fn report_page(home: &Path, path: &str) -> String {
    use std::io::{BufRead, Read, Write};
    let mut c = tacho(home);
    c.args(["run-report", "--port", "0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    raw
}
