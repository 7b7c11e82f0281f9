//! The review-receipts verifier: a good set of rounds passes, and each rule, broken,
//! is reported.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use tacho_tests::git::git;

use std::path::Path;

use tacho_goals::review::verify_reviews;

/// A repository with one commit, and review receipts for it: round 1 requested
/// changes, round 2 approved with one finding fixed (its regression test passed once,
/// in nextest's and pytest's JUnit shapes) and one rejected with evidence.
fn setup() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    String,
) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    let ws = ws.canonicalize().unwrap();
    git(&ws, &["init", "-q"]);
    std::fs::write(ws.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(ws.join(".gitignore"), "reviews/\n").unwrap();
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-qm", "init"]);
    let head = git(&ws, &["rev-parse", "HEAD"]);
    let root = ws.join("reviews");
    std::fs::create_dir_all(root.join("round-01")).unwrap();
    std::fs::create_dir_all(root.join("round-02/junit")).unwrap();
    std::fs::write(root.join("review.json"), r#"{"sourcePaths": ["src"]}"#).unwrap();
    std::fs::write(
        root.join("round-01/round.json"),
        format!(r#"{{"commit": "{head}", "reviewers": [{{"name": "claude", "exitCode": 0, "verdicts": ["request_changes"], "findings": []}}]}}"#),
    )
    .unwrap();
    std::fs::write(
        root.join("round-02/round.json"),
        format!(
            r#"{{"commit": "{head}", "reviewers": [
                {{"name": "claude", "exitCode": 0, "verdicts": ["approve"], "findings": [
                    {{"id": "F1", "disposition": "fixed", "test": "tacho::tests::overflow_is_rejected"}},
                    {{"id": "F2", "disposition": "rejected", "evidence": "the input is validated upstream (src/lib.rs:1)"}}]}},
                {{"name": "codex", "exitCode": 0, "verdicts": ["approve"], "findings": [
                    {{"id": "F3", "disposition": "fixed", "test": "tests.test_api.test_limits"}}]}}]}}"#
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("round-02/junit/nextest.xml"),
        r#"<?xml version="1.0"?><testsuites><testsuite name="tacho"><testcase classname="tacho" name="tests::overflow_is_rejected" time="0.01"/><testcase classname="tacho" name="tests::other" time="0.01"><failure message="x"/></testcase></testsuite></testsuites>"#,
    )
    .unwrap();
    std::fs::write(
        root.join("round-02/junit/pytest.xml"),
        r#"<testsuite><testcase classname="tests.test_api" name="test_limits"></testcase></testsuite>"#,
    )
    .unwrap();
    (tmp, ws, root, head)
}

fn problems(root: &Path, ws: &Path) -> Vec<String> {
    verify_reviews(root, ws)
        .unwrap()
        .problems
        .into_iter()
        .map(|p| format!("{}: {}", p.at, p.problem))
        .collect()
}

#[test]
fn good_receipts_pass() {
    let (_t, ws, root, _) = setup();
    let r = verify_reviews(&root, &ws).unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(r.rounds, ["round-01", "round-02"]);
    assert_eq!((r.reviewers, r.findings, r.tests_checked), (3, 3, 2));
}

#[test]
fn each_broken_rule_is_reported() {
    let (_t, ws, root, head) = setup();
    let r2 = root.join("round-02/round.json");
    let good = std::fs::read_to_string(&r2).unwrap();
    let table: Vec<(String, &str)> = vec![
        (
            good.replacen(
                r#""exitCode": 0, "verdicts": ["approve"], "findings": [
                    {"id": "F1""#,
                r#""verdicts": ["approve"], "findings": [
                    {"id": "F1""#,
                1,
            ),
            "round-02/claude: no exit code recorded: the reviewer's run cannot be shown to have finished",
        ),
        (
            good.replacen(r#""exitCode": 0"#, r#""exitCode": 2"#, 1),
            "round-02/claude: the reviewer exited with 2",
        ),
        (
            good.replacen(r#"["approve"]"#, r#"["approve", "request_changes"]"#, 1),
            "round-02/claude: 2 verdicts; exactly one final verdict is needed",
        ),
        (
            good.replacen(r#"["approve"]"#, "[]", 1),
            "round-02/claude: no final verdict",
        ),
        (
            good.replacen(
                r#""test": "tacho::tests::overflow_is_rejected""#,
                r#""test": "tacho::tests::other""#,
                1,
            ),
            "round-02/claude/F1: regression test tacho::tests::other did not pass",
        ),
        (
            good.replacen(
                r#""test": "tacho::tests::overflow_is_rejected""#,
                r#""test": "tests::missing""#,
                1,
            ),
            "round-02/claude/F1: regression test tests::missing was not run in this round",
        ),
        (
            good.replacen(r#", "test": "tacho::tests::overflow_is_rejected""#, "", 1),
            "round-02/claude/F1: fixed without a regression test id",
        ),
        (
            good.replacen(
                r#", "evidence": "the input is validated upstream (src/lib.rs:1)""#,
                "",
                1,
            ),
            "round-02/claude/F2: rejected without evidence",
        ),
        (
            good.replacen(
                r#""disposition": "rejected""#,
                r#""disposition": "ignored""#,
                1,
            ),
            "round-02/claude/F2: disposition \"ignored\" is neither fixed nor rejected",
        ),
        (
            // One finding, two dispositions (one reviewer rejects it, another fixes it).
            good.replacen(
                r#"{"id": "F3", "disposition": "fixed""#,
                r#"{"id": "F2", "disposition": "fixed""#,
                1,
            ),
            "round-02/codex/F2: finding F2 is both \"rejected\" and \"fixed\": one finding has one disposition",
        ),
    ];
    for (json, want) in table {
        std::fs::write(&r2, &json).unwrap();
        assert_eq!(problems(&root, &ws), [want.to_string()], "{want}");
    }
    std::fs::write(&r2, &good).unwrap();
    // The same test seen twice.
    std::fs::write(
        root.join("round-02/junit/again.xml"),
        r#"<testsuite><testcase classname="tests.test_api" name="test_limits"/></testsuite>"#,
    )
    .unwrap();
    assert_eq!(
        problems(&root, &ws),
        [
            "round-02/codex/F3: regression test tests.test_api.test_limits ran 2 times; it must pass exactly once"
        ]
    );
    std::fs::remove_file(root.join("round-02/junit/again.xml")).unwrap();
    // A new commit after the last round.
    std::fs::write(ws.join("src/lib.rs"), "pub fn f() { }\n").unwrap();
    assert_eq!(
        problems(&root, &ws),
        ["src/lib.rs: uncommitted change under the declared source paths"]
    );
    git(&ws, &["commit", "-qam", "later"]);
    let now = git(&ws, &["rev-parse", "HEAD"]);
    assert_eq!(
        problems(&root, &ws),
        [format!(
            "round-02: the last round reviewed {head}, but HEAD is {now}"
        )]
    );
}

#[test]
fn no_rounds_is_never_success() {
    let (_t, ws, root, _) = setup();
    std::fs::remove_dir_all(root.join("round-01")).unwrap();
    std::fs::remove_dir_all(root.join("round-02")).unwrap();
    assert_eq!(
        problems(&root, &ws),
        [".: no review round (a directory with round.json): there is nothing to verify"]
    );
}

/// Review files are the workspace's, which the agent writes: a FIFO in place of one
/// is reported, never waited on (it used to block the verifier forever).
#[test]
fn a_fifo_in_place_of_a_review_file_does_not_block() {
    let (_t, ws, root, _) = setup();
    std::fs::remove_file(root.join("review.json")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(root.join("review.json"))
        .status()
        .unwrap();
    assert!(made.success());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(problems(&root, &ws));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(5))
        .expect("the verifier blocked on a FIFO");
    assert!(
        got.contains(&"review.json: cannot be read: not a regular file".to_string()),
        "{got:?}"
    );
}
