//! One answer per question (issue 29): a single session, whose edits only snapshots
//! saw, with shell test runs and a revised goal, asked through every frontend — `graph`,
//! `risk`, `session trace`, `session show`, `session list`, `audit report` in every
//! format, the run-report page and MCP's `get_goal` — gets the same risk score and
//! level, readiness, changed files and verification verdict everywhere.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;

use serde_json::{Value, json};
use tacho_tests::{PARITY_PLAN, run, tacho};

const S: &str = "ses_one_answer";

struct Env {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
}

impl Env {
    fn tacho(&self, args: &[&str]) -> (i32, String, String) {
        let mut c = tacho(&self.home);
        c.current_dir(&self.ws).args(args);
        run(c)
    }

    /// The JSON Lines a query printed (it must succeed).
    fn records(&self, args: &[&str]) -> Vec<Value> {
        let (code, out, err) = self.tacho(args);
        assert_eq!(code, 0, "tacho {args:?}: {err}");
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{args:?}: {e}: {l}")))
            .collect()
    }

    fn record(&self, line: &str) {
        let mut c = tacho(&self.home);
        c.args(["record", "--session", S])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(line.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "record {line}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The session: step 1's shell command changes `src/value.txt` and creates
/// `src/extra.txt` (no file.edit event: only the snapshots see it); step 2 runs
/// `npm test`; a goal frozen before step 1 has its check pass after them, then it is
/// revised, and completing the revision is refused.
fn session() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("checks")).unwrap();
    let ws = ws.canonicalize().unwrap();
    std::fs::write(ws.join("src/value.txt"), "41\n").unwrap();
    std::fs::write(
        ws.join("checks/parity.sh"),
        "test \"$(head -n1 src/value.txt)\" = \"42\"\n",
    )
    .unwrap();
    std::fs::write(ws.join("plan.md"), PARITY_PLAN).unwrap();
    std::fs::write(
        ws.join("plan2.md"),
        PARITY_PLAN.replace("holds 42", "holds exactly 42"),
    )
    .unwrap();
    let e = Env {
        _tmp: tmp,
        home,
        ws,
    };
    e.record(&format!(
        r#"{{"type":"session.start","workspace":"{}","agent":"coder","title":"one answer"}}"#,
        e.ws.display()
    ));
    // Frozen before the work: its check fails at the goal's start (SPEC §12.2).
    let (code, out, err) = e.tacho(&[
        "goal",
        "create",
        "--assure",
        "--plan",
        "plan.md",
        "--session",
        S,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    e.record(r#"{"type":"step.start","step":1}"#);
    e.record(r#"{"type":"tool.call","call_id":"c1","tool":"Bash","target":"sed -i s/41/42/ src/value.txt && echo more > src/extra.txt"}"#);
    std::fs::write(e.ws.join("src/value.txt"), "42\n").unwrap();
    std::fs::write(e.ws.join("src/extra.txt"), "more\n").unwrap();
    e.record(r#"{"type":"tool.result","call_id":"c1","status":"ok","duration_ms":12}"#);
    e.record(r#"{"type":"step.finish","step":1}"#);
    e.record(r#"{"type":"step.start","step":2}"#);
    e.record(r#"{"type":"tool.call","call_id":"c2","tool":"Bash","target":"npm test"}"#);
    e.record(r#"{"type":"tool.result","call_id":"c2","status":"ok","duration_ms":900,"output":"2 passing"}"#);
    e.record(r#"{"type":"step.finish","step":2}"#);
    for args in [
        &["goal", "check", "parity", "--session", S][..],
        &[
            "goal",
            "revise",
            "AC1 was ambiguous",
            "--plan",
            "plan2.md",
            "--session",
            S,
        ],
    ] {
        let (code, out, err) = e.tacho(args);
        assert_eq!(code, 0, "tacho {args:?}: {out}{err}");
    }
    // The revision's check has no receipt yet: the gate refuses to complete it.
    let (code, out, err) = e.tacho(&["goal", "complete", "--session", S]);
    assert_eq!(code, 1, "{out}{err}");
    e
}

/// The facts every frontend must agree on.
#[derive(Debug, PartialEq)]
struct Facts {
    score: u64,
    level: String,
    readiness: String,
    files: Vec<String>,
    verified: bool,
}

/// The readiness words the text renderers use for a JSON readiness value.
fn readiness_words(r: &str) -> String {
    r.replace('_', " ")
}

fn contains_all(text: &str, what: &str, needles: &[String]) {
    for n in needles {
        assert!(text.contains(n.as_str()), "{what} lacks {n:?}:\n{text}");
    }
}

#[test]
fn one_session_gives_the_same_answer_through_every_frontend() {
    let e = session();
    let risk = e.records(&["risk", S, "--json"]).remove(0);
    let files: Vec<String> = risk["factors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "files_changed")
        .map(|f| {
            f["paths"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    let truth = Facts {
        score: risk["score"].as_u64().unwrap(),
        level: risk["level"].as_str().unwrap().to_string(),
        readiness: risk["readiness"].as_str().unwrap().to_string(),
        files: files.clone(),
        verified: risk["verified"].as_bool().unwrap(),
    };
    // The session is what it is meant to be: both files changed (seen by snapshots
    // only), the shell test run counted, the revised goal not completed.
    assert_eq!(files, ["src/extra.txt", "src/value.txt"], "{risk}");
    assert_eq!(risk["files_changed"], 2);
    assert!(truth.verified, "npm test ran after the edit: {risk}");
    assert_eq!(
        truth.readiness, "blocked",
        "the revised goal is open: {risk}"
    );

    // graph --json
    let graph = e.records(&["graph", S, "--json"]).remove(0);
    let mut graph_files: Vec<String> = graph["files"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    graph_files.sort();
    assert_eq!(
        Facts {
            score: graph["risk"]["score"].as_u64().unwrap(),
            level: graph["risk"]["level"].as_str().unwrap().into(),
            readiness: graph["risk"]["readiness"].as_str().unwrap().into(),
            files: graph_files,
            verified: graph["risk"]["verified"].as_bool().unwrap(),
        },
        truth,
        "graph: {graph}"
    );

    // session trace --json: its risk record is the risk assessment itself.
    let trace = e.records(&["session", "trace", S, "--json"]);
    let trace_risk = trace.iter().find(|r| r["type"] == "risk").unwrap();
    assert_eq!(trace_risk, &risk, "trace");
    assert!(
        trace.iter().any(|r| r["kind"] == "check"),
        "goal events on the trace"
    );

    // session show --json
    let show = e.records(&["session", "show", S, "--json"]).remove(0);
    assert_eq!(
        Facts {
            score: show["risk_score"].as_u64().unwrap(),
            level: show["risk_level"].as_str().unwrap().into(),
            readiness: show["readiness"].as_str().unwrap().into(),
            files: serde_json::from_value(show["files"].clone()).unwrap(),
            verified: show["verified"].as_bool().unwrap(),
        },
        truth,
        "show: {show}"
    );

    // session list --json (the session index's facts)
    let list = e.records(&["session", "list", "--json"]);
    let row = list.iter().find(|r| r["session"] == S).unwrap();
    assert_eq!(row["risk_score"].as_u64(), Some(truth.score), "{row}");
    assert_eq!(
        row["risk_level"].as_str(),
        Some(truth.level.as_str()),
        "{row}"
    );
    assert_eq!(
        row["files_edited"].as_u64(),
        Some(truth.files.len() as u64),
        "{row}"
    );

    // audit report, every format
    let report = e.records(&["audit", "report", S, "--json"]).remove(0);
    assert_eq!(report["type"], "report");
    // (A record's `type` tags the record, not the facts nested in another one.)
    let mut untagged = risk.clone();
    untagged.as_object_mut().unwrap().remove("type");
    assert_eq!(report["risk"], untagged, "report --json");
    let (code, md, err) = e.tacho(&["audit", "report", S]);
    assert_eq!(code, 0, "{err}");
    let (code, html, err) = e.tacho(&["audit", "report", S, "--format", "html"]);
    assert_eq!(code, 0, "{err}");
    let headline = format!("{} ({}/100)", truth.level, truth.score);
    let words = readiness_words(&truth.readiness);
    for (what, text) in [("markdown", &md), ("html", &html)] {
        contains_all(text, what, &truth.files);
        contains_all(
            text,
            what,
            &[headline.clone(), words.clone(), "npm test".into()],
        );
        for wrong in ["No file changed", "No verification"] {
            assert!(!text.contains(wrong), "{what} says {wrong:?}:\n{text}");
        }
    }

    // the run-report page
    let page = tacho_tests::run_report_page(&e.home, S);
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    contains_all(
        &page,
        "the session page",
        &[
            format!("{} {}", truth.level, truth.score),
            format!("readiness {words}"),
            "npm test".into(),
        ],
    );
    contains_all(&page, "the session page", &truth.files);
    assert!(!page.contains("No file changed"), "{page}");

    // MCP get_goal: the same record as `goal status --json`; the goal it shows is the
    // revision (not completed, its check missing on this revision).
    let answer = tacho_tests::mcp_calls(
        &e.home,
        &e.ws,
        &[json!({"name": "get_goal", "arguments": {"session": "ses_one"}})],
    )
    .remove(0);
    assert_eq!(answer["isError"], false, "{answer}");
    let mcp = answer["structuredContent"].clone();
    let cli = e
        .records(&["goal", "status", "--session", S, "--json"])
        .remove(0);
    assert_eq!(mcp, cli, "MCP get_goal and goal status --json");
    assert_eq!(mcp["revision"], 2, "{mcp}");
    assert_eq!(mcp["completed"], false);
    assert_eq!(mcp["can_complete"], false);
}
