//! Inputs that once panicked the binary. Each is now a clear error with exit 2 that
//! names the input, and nothing is written.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::Path;

use tacho_tests::git::git;
use tacho_tests::{run, run_with_stdin, tacho};

fn record(home: &Path, input: &str) -> (i32, String, String) {
    run_with_stdin(home, &["record", "--snapshots", "off"], input)
}

#[test]
fn a_non_ascii_baseline_is_bad_input() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "-q"]);
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    git(&ws, &["add", "a.txt"]);
    git(&ws, &["commit", "-q", "-m", "a"]);
    // 13 bytes: byte 12 falls inside a character, where the report once was cut.
    let mut c = tacho(&tmp.path().join("home"));
    c.args(["verify-commits", "--baseline", "aéééééé", "--workspace"])
        .arg(&ws);
    let (code, out, err) = run(c);
    assert_eq!(code, 2, "{out}{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("--baseline \"aéééééé\": not a revision"),
        "{err}"
    );
}

#[test]
fn an_overflowing_snapshot_time_is_bad_input_and_records_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let input = format!(
        "{{\"type\":\"session.start\",\"session\":\"ses_ts\",\"workspace\":\"{0}\"}}\n{{\"type\":\"snapshot.take\",\"session\":\"ses_ts\",\"workspace\":\"{0}\",\"ts\":9223372036854775}}\n",
        ws.display()
    );
    let (code, _, err) = record(&home, &input);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains(
            "stdin: line 2: snapshot.take: field `ts`: 9223372036854775 ms is out of range\nnothing was recorded"
        ),
        "{err}"
    );
    assert_eq!(tacho_tests::event_count(&home, "ses_ts"), 0);
}

#[test]
fn revising_a_goal_with_a_malformed_digest_is_refused_before_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    std::fs::write(
        ws.join("plan.md"),
        "# A plan\nGoal kind: bugfix\n\n## Acceptance criteria\n- AC1: it works\n",
    )
    .unwrap();
    // A goal whose digest tacho never made, in a log an older tacho wrote (it
    // accepted goal events from outside; `record` now refuses them).
    let store = tacho_store::Store::open(home.join("log"), Default::default()).unwrap();
    let mut w = store.writer("ses_rev").unwrap();
    for line in [
        format!(
            r#"{{"type":"session.start","workspace":"{}"}}"#,
            ws.display()
        ),
        format!(
            r#"{{"type":"goal.created","goal":"goal_x","revision":1,"title":"t","kind":"bugfix","contract_digest":"é","workspace":"{}","plan":"p"}}"#,
            ws.display()
        ),
    ] {
        let body = tacho_schema::parse_json_line(&line, 1).unwrap().body;
        w.append(1, &body, tacho_store::Durability::Sync).unwrap();
    }
    drop(w);
    let before = tacho_tests::event_count(&home, "ses_rev");
    let mut c = tacho(&home);
    c.current_dir(&ws).args([
        "goal",
        "revise",
        "the plan was wrong",
        "--plan",
        "plan.md",
        "--session",
        "ses_rev",
    ]);
    let (code, out, err) = run(c);
    assert_eq!(code, 2, "{out}{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("goal goal_x records \"é\" as its contract digest"),
        "{err}"
    );
    assert_eq!(
        tacho_tests::event_count(&home, "ses_rev"),
        before,
        "nothing was written"
    );
}
