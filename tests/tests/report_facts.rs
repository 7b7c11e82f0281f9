//! The audit report says what the risk assessment counts (issue 29, "one answer per
//! question"): the files changed, the verification runs weighed (recorded runs, shell
//! calls of test runners, goal checks), and for a goal what the completion gate would
//! say. Each test asks one session through `risk` and `audit report` (Markdown and
//! JSON) and compares.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::{Path, PathBuf};

use tacho_tests::{PARITY_PLAN, parity_workspace, run, run_with_stdin, tacho};

fn t(home: &Path, ws: &Path, args: &[&str]) -> (i32, String, String) {
    let mut c = tacho(home);
    c.current_dir(ws).args(args);
    run(c)
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Records `lines` (JSON Lines, one event each) into `session`, without snapshots.
fn record(home: &Path, session: &str, lines: &[String]) {
    let (code, _, err) = run_with_stdin(
        home,
        &["record", "--session", session, "--snapshots", "off"],
        &lines.join("\n"),
    );
    assert_eq!(code, 0, "{err}");
}

/// The Markdown of one `## TITLE` section of a report, up to the next section.
fn section<'a>(md: &'a str, title: &str) -> &'a str {
    let head = format!("\n## {title}\n");
    let start = md
        .find(&head)
        .unwrap_or_else(|| panic!("no section {title}: {md}"));
    let rest = &md[start + head.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The risk assessment's changed files, in full.
fn risk_paths(risk: &serde_json::Value) -> Vec<String> {
    risk["factors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "files_changed")
        .map(|f| {
            f["paths"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

struct Asked {
    risk: serde_json::Value,
    markdown: String,
    report: serde_json::Value,
}

fn ask(home: &Path, ws: &Path, session: &str) -> Asked {
    let (code, out, err) = t(home, ws, &["risk", session, "--json"]);
    assert_eq!(code, 0, "{err}");
    let risk = json(&out);
    let (code, markdown, err) = t(home, ws, &["audit", "report", session]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = t(home, ws, &["audit", "report", session, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    Asked {
        risk,
        markdown,
        report: json(&out),
    }
}

/// The `run-report` page of `session` (the same report, as a web page), with its
/// tags taken out.
fn page_text(home: &Path, session: &str) -> String {
    let raw = tacho_tests::run_report_page(home, session);
    let mut text = String::new();
    let mut in_tag = false;
    for ch in raw.split_once("\r\n\r\n").map_or("", |(_, b)| b).chars() {
        match ch {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                text.push(' ');
            }
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The part of `text` from `from` up to `to`.
fn between<'a>(text: &'a str, from: &str, to: &str) -> &'a str {
    let start = text
        .find(from)
        .unwrap_or_else(|| panic!("no {from}: {text}"));
    let rest = &text[start..];
    &rest[..rest.find(to).unwrap_or(rest.len())]
}

/// The report's list of changed files, as its JSON gives it.
fn report_paths(report: &serde_json::Value) -> Vec<String> {
    report["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files in the report: {report}"))
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_owned())
        .collect()
}

/// A session recorded without snapshots: three files from edit events, and `npm test`
/// run through the shell after them. The report lists the three files risk counts,
/// with their line counts, says that no diff can be shown, and lists the shell run as
/// the verification risk weighed.
#[test]
fn a_report_without_snapshots_shows_the_files_and_runs_risk_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let s = "ses_facts1";
    let ev = |body: &str| format!(r#"{{"session":"{s}",{body}}}"#);
    let lines = vec![
        ev(&format!(
            r#""type":"session.start","workspace":"{}""#,
            ws.display()
        )),
        ev(r#""type":"step.start","step":1"#),
        ev(r#""type":"tool.call","call_id":"c1","tool":"Edit","target":"src/a.ts""#),
        ev(
            r#""type":"file.edit","path":"src/a.ts","op":"modify","lines_added":3,"lines_removed":1"#,
        ),
        ev(r#""type":"tool.result","call_id":"c1","status":"ok""#),
        ev(r#""type":"file.edit","path":"src/b.ts","op":"create","lines_added":10"#),
        ev(r#""type":"file.edit","path":"test/a.test.ts","op":"create","lines_added":5"#),
        ev(r#""type":"tool.call","call_id":"c2","tool":"Bash","target":"npm test""#),
        ev(r#""type":"tool.result","call_id":"c2","status":"ok""#),
        ev(r#""type":"step.finish","step":1"#),
        ev(r#""type":"session.end","reason":"completed""#),
    ];
    let (code, _, err) =
        run_with_stdin(&home, &["record", "--snapshots", "off"], &lines.join("\n"));
    assert_eq!(code, 0, "{err}");
    let a = ask(&home, &ws, s);
    assert_eq!(a.risk["files_changed"], 3, "{}", a.risk);
    assert_eq!(a.risk["verified"], true, "{}", a.risk);

    let files = section(&a.markdown, "Files changed");
    assert!(!files.contains("No file changed"), "{files}");
    for (path, added, removed) in [
        ("src/a.ts", 3, 1),
        ("src/b.ts", 10, 0),
        ("test/a.test.ts", 5, 0),
    ] {
        let row = files
            .lines()
            .find(|l| l.starts_with(&format!("| {path} |")))
            .unwrap_or_else(|| panic!("{path} is not listed: {files}"));
        assert!(row.contains(&format!("| {added} | {removed} |")), "{row}");
    }
    assert!(
        files.contains("No diff can be shown") && files.contains("no snapshot"),
        "{files}"
    );
    let validation = section(&a.markdown, "Validation");
    assert!(!validation.contains("No verification"), "{validation}");
    assert!(validation.contains("npm test"), "{validation}");

    assert_eq!(report_paths(&a.report), risk_paths(&a.risk));
    let runs = a.risk["verification_runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["command"], "npm test");
    assert_eq!(runs[0]["source"], "shell");
    assert_eq!(runs[0]["passed"], true);
    assert_eq!(
        a.report["risk"]["verification_runs"],
        a.risk["verification_runs"]
    );

    // The run-report page says the same.
    let page = page_text(&home, s);
    let files = between(&page, "Files changed", "Risk");
    assert!(!files.contains("No file changed"), "{files}");
    for path in ["src/a.ts", "src/b.ts", "test/a.test.ts"] {
        assert!(files.contains(path), "{path}: {files}");
    }
    let runs = between(&page, "Verification runs", "Goals");
    assert!(!runs.contains("No verification"), "{runs}");
    assert!(
        runs.contains("npm test") && runs.contains("passed"),
        "{runs}"
    );
}

/// With snapshots, an edit event that named its file by an absolute path: risk counts
/// the file under that name, and so does the report, with the snapshots' diff.
#[test]
fn a_report_with_snapshots_lists_the_files_under_the_names_risk_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws: PathBuf = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let ws = ws.canonicalize().unwrap();
    std::fs::write(ws.join("src/a.txt"), "one\n").unwrap();
    std::fs::write(ws.join("src/b.txt"), "two\n").unwrap();
    let s = "ses_facts2";
    record(
        &home,
        s,
        &[format!(
            r#"{{"type":"session.start","workspace":"{}"}}"#,
            ws.display()
        )],
    );
    let snap = |home: &Path| {
        let (code, _, err) = t(home, &ws, &["snapshot", "--session", s]);
        assert_eq!(code, 0, "{err}");
    };
    snap(&home);
    std::fs::write(ws.join("src/a.txt"), "one\nmore\n").unwrap();
    std::fs::write(ws.join("src/b.txt"), "three\n").unwrap();
    record(
        &home,
        s,
        &[format!(
            r#"{{"type":"file.edit","path":"{}","op":"modify","lines_added":1}}"#,
            ws.join("src/a.txt").display()
        )],
    );
    snap(&home);
    let a = ask(&home, &ws, s);
    let risk = risk_paths(&a.risk);
    // `src/b.txt` changed with no tool call running and no edit event naming it: it
    // is no tool's change (SPEC §8.1), apart from the files.
    assert_eq!(risk.len(), 1, "{}", a.risk);
    assert_eq!(
        a.report["graph"]["unclaimed"][0]["files"][0]["path"], "src/b.txt",
        "{}",
        a.report["graph"]
    );
    assert_eq!(report_paths(&a.report), risk);
    let files = section(&a.markdown, "Files changed");
    for p in &risk {
        assert!(files.contains(&format!("| {p} |")), "{p}: {files}");
    }
    assert!(files.contains("```diff"), "{files}");
}

/// A goal check that passed after the last edit is verification: risk says verified,
/// and the report's validation lists the receipt.
#[test]
fn a_goal_check_that_passed_after_the_last_edit_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let s = "ses_facts3";
    let (home, ws) = parity_workspace(tmp.path(), s);
    let (code, _, err) = t(
        &home,
        &ws,
        &["goal", "create", "--plan", "plan.md", "--session", s],
    );
    assert_eq!(code, 0, "{err}");
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    record(
        &home,
        s,
        &[r#"{"type":"file.edit","path":"src/value.txt","op":"modify","lines_added":1,"lines_removed":1}"#.into()],
    );
    let (code, _, err) = t(&home, &ws, &["goal", "check", "--session", s, "parity"]);
    assert_eq!(code, 0, "{err}");
    let a = ask(&home, &ws, s);
    assert_eq!(a.risk["verified"], true, "{}", a.risk);
    let ids: Vec<&str> = a.risk["factors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(!ids.contains(&"unverified"), "{ids:?}");
    let runs = a.risk["verification_runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["source"], "goal_check");
    assert_eq!(runs[0]["command"], "sh checks/parity.sh");
    let validation = section(&a.markdown, "Validation");
    assert!(
        validation.contains("sh checks/parity.sh") && validation.contains("goal check"),
        "{validation}"
    );
}

/// A goal without a contract: the report words its state as the gate would (the plain
/// rule), not as if checks had passed.
#[test]
fn an_unassured_goal_is_reported_with_the_gates_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let s = "ses_facts4";
    let (home, ws) = parity_workspace(tmp.path(), s);
    let plain = PARITY_PLAN
        .split("## Assurance contract")
        .next()
        .unwrap()
        .to_owned();
    std::fs::write(ws.join("plain.md"), plain).unwrap();
    let (code, _, err) = t(
        &home,
        &ws,
        &["goal", "create", "--plan", "plain.md", "--session", s],
    );
    assert_eq!(code, 0, "{err}");
    record(
        &home,
        s,
        &[r#"{"type":"verification.run","command":"cargo test","status":"passed"}"#.into()],
    );
    let (_, out, _) = t(&home, &ws, &["goal", "status", "--session", s, "--json"]);
    let status = json(&out);
    assert_eq!(status["assured"], false, "{status}");
    assert_eq!(status["can_complete"], true, "{status}");
    let reason = status["completion_reason"].as_str().unwrap();
    let a = ask(&home, &ws, s);
    let goal = section(&a.markdown, "Goal");
    assert!(!goal.contains("every check passes"), "{goal}");
    assert!(goal.contains(reason), "{reason}: {goal}");
}

/// The session index keeps each session's risk among its facts. Facts computed by an
/// older tacho, whose rules gave another score (here: before a goal check counted as
/// verification), are computed again: `session list` shows the score `risk` gives,
/// and `log verify` does not call the index damaged for it. Facts of the rules in
/// force are checked as ever.
#[test]
fn index_facts_of_older_rules_are_computed_again() {
    let tmp = tempfile::tempdir().unwrap();
    let s = "ses_facts5";
    let (home, ws) = parity_workspace(tmp.path(), s);
    let (code, _, err) = t(
        &home,
        &ws,
        &["goal", "create", "--plan", "plan.md", "--session", s],
    );
    assert_eq!(code, 0, "{err}");
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    record(
        &home,
        s,
        &[r#"{"type":"file.edit","path":"src/value.txt","op":"modify","lines_added":1,"lines_removed":1}"#.into()],
    );
    let (code, _, err) = t(&home, &ws, &["goal", "check", "--session", s, "parity"]);
    assert_eq!(code, 0, "{err}");
    let list = |home: &Path| {
        let (code, out, err) = t(home, &ws, &["session", "list", "--json"]);
        assert_eq!(code, 0, "{err}");
        json(out.lines().next().unwrap())["risk_score"]
            .as_u64()
            .unwrap()
    };
    let now = list(&home);
    let (_, out, _) = t(&home, &ws, &["risk", s, "--json"]);
    assert_eq!(now, json(&out)["score"].as_u64().unwrap());
    // Facts at the session's head with another score, as the index holds them.
    let forge = |home: &Path, by: u32| {
        let store =
            tacho_store::Store::open(home.join("log"), tacho_store::StoreOptions::default())
                .unwrap();
        let entry = store.index().unwrap().get(s).unwrap();
        let mut at = entry.facts.unwrap();
        at.facts.risk_score += by;
        store
            .index_append(
                &[tacho_store::index::Record::Facts {
                    session: s.into(),
                    at,
                }],
                true,
            )
            .unwrap();
    };
    // The index as an older tacho left it: the score its rules gave (the goal check
    // not counted: unverified, +15), and no record of the rules.
    forge(&home, 15);
    let _ = std::fs::remove_file(home.join("log/index/facts.rules"));
    let (code, out, err) = t(&home, &ws, &["log", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(list(&home), now);
    // Facts of the rules in force that differ from the events are damage.
    forge(&home, 1);
    let (code, out, err) = t(&home, &ws, &["log", "verify"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(format!("{out}{err}").contains("facts differ"), "{out}{err}");
}
