//! The review-receipts verifier: a good set of rounds passes, and each rule, broken,
//! is reported. Regression tests are run by the verifier with the real vitest
//! (installed by `npm ci` in tests/review; skipped outside CI when it is absent).

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use tacho_tests::git::git;

use std::path::{Path, PathBuf};

use tacho_goals::review::{ReviewOptions, verify_reviews};

const TESTS: &str = r#"import { describe, test, expect } from 'vitest';
describe('limits', () => {
  test('rejects overflow', () => {
    expect(() => { throw new RangeError('overflow'); }).toThrow(RangeError);
  });
  test('keeps totals', () => { expect(1 + 2).toBe(3); });
  test('is broken', () => { expect(1).toBe(2); });
  test.skip('is skipped', () => {});
  test('twice', () => {});
});
describe('limits', () => { test('twice', () => {}); });
let calls = 0;
// Passes only when retried: the project's config asks for retries, the verifier
// runs with none.
test('flaky', () => { calls += 1; expect(calls).toBe(2); });
"#;

/// The real vitest of tests/review, or `None` (skipped outside CI) when it is not
/// installed.
fn vitest_modules() -> Option<PathBuf> {
    let nm = tacho_tests::repo_root().join("tests/review/node_modules");
    if nm.join(".bin/vitest").exists() {
        return Some(nm);
    }
    tacho_tests::skip_without(&format!(
        "vitest is not installed: run `npm ci` in {}",
        tacho_tests::repo_root().join("tests/review").display()
    ));
    None
}

struct Setup {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    root: PathBuf,
    /// The commits reviewed by round 1 and round 2.
    c1: String,
    c2: String,
}

/// A repository reviewed twice: round 1 (on the first commit) requested changes with
/// findings F1, F2 (claude) and F3 (codex); the second commit fixes them and round 2
/// approves it. F1 and F3 are fixed, each with a vitest regression test; F2 is
/// rejected with evidence.
fn setup(modules: Option<&Path>) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("tests/review")).unwrap();
    let ws = ws.canonicalize().unwrap();
    if let Some(m) = modules {
        std::os::unix::fs::symlink(m, ws.join("node_modules")).unwrap();
    }
    git(&ws, &["init", "-q"]);
    std::fs::write(ws.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(ws.join("tests/review/limits.test.js"), TESTS).unwrap();
    std::fs::write(
        ws.join("vitest.config.mjs"),
        "export default { test: { retry: 3 } };\n",
    )
    .unwrap();
    std::fs::write(ws.join(".gitignore"), "reviews/\nnode_modules\n").unwrap();
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-qm", "init"]);
    let c1 = git(&ws, &["rev-parse", "HEAD"]);
    std::fs::write(ws.join("src/lib.rs"), "pub fn f() -> u8 { 1 }\n").unwrap();
    git(&ws, &["commit", "-qam", "fix F1 and F3"]);
    let c2 = git(&ws, &["rev-parse", "HEAD"]);
    let root = ws.join("reviews");
    std::fs::create_dir_all(root.join("round-01")).unwrap();
    std::fs::create_dir_all(root.join("round-02")).unwrap();
    std::fs::write(root.join("review.json"), r#"{"sourcePaths": ["src"]}"#).unwrap();
    std::fs::write(
        root.join("round-01/round.json"),
        format!(
            r#"{{"commit": "{c1}", "reviewers": [
                {{"name": "claude", "exitCode": 0, "verdicts": ["request_changes"], "findings": ["F1", "F2"]}},
                {{"name": "codex", "exitCode": 0, "verdicts": ["request_changes"], "findings": ["F3"]}}]}}"#
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("round-02/round.json"),
        format!(
            r#"{{"commit": "{c2}", "reviewers": [
                {{"name": "claude", "exitCode": 0, "verdicts": ["approve"], "findings": []}},
                {{"name": "codex", "exitCode": 0, "verdicts": ["approve"]}}]}}"#
        ),
    )
    .unwrap();
    std::fs::write(root.join("dispositions.json"), DISPOSITIONS).unwrap();
    Setup {
        _tmp: tmp,
        ws,
        root,
        c1,
        c2,
    }
}

const DISPOSITIONS: &str = r#"[
  {"round": "round-01", "cli": "claude", "id": "F1", "status": "fixed", "evidence": "overflow now raises RangeError", "regression": {"file": "tests/review/limits.test.js", "fullName": "limits rejects overflow"}},
  {"round": "round-01", "cli": "claude", "id": "F2", "status": "rejected", "evidence": "the input is validated upstream (src/lib.rs:1)"},
  {"round": "round-01", "cli": "codex", "id": "F3", "status": "fixed", "evidence": "totals are summed once", "regression": {"file": "tests/review/limits.test.js", "fullName": "limits keeps totals"}}
]"#;

fn problems(root: &Path, ws: &Path) -> Vec<String> {
    problems_with(root, ws, &ReviewOptions::default())
}

fn problems_with(root: &Path, ws: &Path, opts: &ReviewOptions) -> Vec<String> {
    verify_reviews(root, ws, opts)
        .unwrap()
        .problems
        .into_iter()
        .map(|p| format!("{}: {}", p.at, p.problem))
        .collect()
}

#[test]
fn good_receipts_pass_with_the_tests_run_by_vitest() {
    let Some(m) = vitest_modules() else { return };
    let s = setup(Some(&m));
    let r = verify_reviews(&s.root, &s.ws, &ReviewOptions::default()).unwrap();
    assert!(r.problems.is_empty(), "{:?}", r.problems);
    assert_eq!(r.rounds, ["round-01", "round-02"]);
    assert_eq!((r.reviewers, r.findings, r.tests_checked), (4, 3, 2));
}

#[test]
fn each_broken_disposition_rule_is_reported() {
    let Some(m) = vitest_modules() else { return };
    let s = setup(Some(&m));
    let d = s.root.join("dispositions.json");
    let f1 = "dispositions.json[0] round-01/claude/F1";
    let file = "tests/review/limits.test.js";
    let table: Vec<(String, String)> = vec![
        (
            // An identical duplicate.
            DISPOSITIONS.replacen(
                "\n]",
                r#",
  {"round": "round-01", "cli": "claude", "id": "F2", "status": "rejected", "evidence": "the input is validated upstream (src/lib.rs:1)"}
]"#,
                1,
            ),
            "dispositions.json[3] round-01/claude/F2: a second disposition of the same finding (duplicates fail, identical or not)".into(),
        ),
        (
            DISPOSITIONS.replacen(r#""overflow now raises RangeError""#, r#""  ""#, 1),
            format!("{f1}: fixed without evidence"),
        ),
        (
            DISPOSITIONS.replacen(
                r#", "regression": {"file": "tests/review/limits.test.js", "fullName": "limits rejects overflow"}"#,
                "",
                1,
            ),
            format!("{f1}: fixed without a regression {{file, fullName}}"),
        ),
        (
            DISPOSITIONS.replacen(r#""file": "tests/review/limits.test.js""#, r#""file": "src/lib.rs""#, 1),
            format!("{f1}: regression file \"src/lib.rs\" is not a literal repository path under the test directory \"tests\""),
        ),
        (
            DISPOSITIONS.replacen(r#""file": "tests/review/limits.test.js""#, r#""file": "tests/review/*.test.js""#, 1),
            format!("{f1}: regression file \"tests/review/*.test.js\" is not a literal repository path under the test directory \"tests\""),
        ),
        (
            DISPOSITIONS.replacen(r#""file": "tests/review/limits.test.js""#, r#""file": "tests/../src/lib.rs""#, 1),
            format!("{f1}: regression file \"tests/../src/lib.rs\" is not a literal repository path under the test directory \"tests\""),
        ),
        (
            DISPOSITIONS.replacen("limits rejects overflow", "limits is broken", 1),
            format!("{f1}: regression test {file} \"limits is broken\" did not pass (failed)"),
        ),
        (
            DISPOSITIONS.replacen("limits rejects overflow", "limits is skipped", 1),
            format!("{f1}: regression test {file} \"limits is skipped\" did not pass (skipped)"),
        ),
        (
            DISPOSITIONS.replacen("limits rejects overflow", "limits twice", 1),
            format!("{f1}: regression test {file} \"limits twice\" is ambiguous: 2 assertions have that name (passed, passed); it must pass exactly once"),
        ),
        (
            // Would pass on the config's retry; the verifier runs with retries 0.
            DISPOSITIONS.replacen("limits rejects overflow", "flaky", 1),
            format!("{f1}: regression test {file} \"flaky\" did not pass (failed)"),
        ),
        (
            DISPOSITIONS.replacen("limits rejects overflow", "limits rejects underflow", 1),
            format!("{f1}: regression test {file} \"limits rejects underflow\" was not run"),
        ),
        (
            DISPOSITIONS.replacen(r#""status": "rejected""#, r#""status": "ignored""#, 1),
            "dispositions.json[1] round-01/claude/F2: status \"ignored\" is neither fixed nor rejected".into(),
        ),
        (
            DISPOSITIONS.replacen(r#""id": "F2""#, r#""id": "F9""#, 1),
            "dispositions.json[1] round-01/claude/F9: claude reported no finding F9 in round round-01\nround-01/claude/F2: the finding has no disposition".into(),
        ),
        (
            DISPOSITIONS.replacen(r#",
  {"round": "round-01", "cli": "claude", "id": "F2", "status": "rejected", "evidence": "the input is validated upstream (src/lib.rs:1)"}"#, "", 1),
            "round-01/claude/F2: the finding has no disposition".into(),
        ),
    ];
    for (json, want) in table {
        std::fs::write(&d, &json).unwrap();
        assert_eq!(problems(&s.root, &s.ws).join("\n"), want);
    }
    std::fs::write(&d, DISPOSITIONS).unwrap();
    assert_eq!(problems(&s.root, &s.ws), Vec::<String>::new());
}

/// A finding marked fixed needs a newer revision and a later review round than the
/// one that found it.
#[test]
fn a_fix_needs_a_newer_revision_and_round() {
    let Some(m) = vitest_modules() else { return };
    let s = setup(Some(&m));
    let r1 = s.root.join("round-01/round.json");
    // Round 2 reviewed the same revision as round 1.
    let r2 = s.root.join("round-02/round.json");
    let second = std::fs::read_to_string(&r2).unwrap();
    git(&s.ws, &["reset", "-q", "--hard", &s.c1]);
    std::fs::write(&r2, second.replace(&s.c2, &s.c1)).unwrap();
    let want = |id: &str, n: usize, cli: &str| {
        format!(
            "dispositions.json[{n}] round-01/{cli}/{id}: fixed, but no later review round reviewed a newer revision than {}",
            s.c1
        )
    };
    assert_eq!(
        problems(&s.root, &s.ws),
        [want("F1", 0, "claude"), want("F3", 2, "codex")]
    );
    // Round 2 reviewed another commit, but not a newer one: one beside the first.
    git(&s.ws, &["checkout", "-q", "--orphan", "other"]);
    git(&s.ws, &["commit", "-qm", "unrelated"]);
    let other = git(&s.ws, &["rev-parse", "HEAD"]);
    std::fs::write(&r2, second.replace(&s.c2, &other)).unwrap();
    assert_eq!(
        problems(&s.root, &s.ws),
        [want("F1", 0, "claude"), want("F3", 2, "codex")]
    );
    // Found in the last round: no round can show the fix.
    git(&s.ws, &["reset", "-q", "--hard", &s.c2]);
    std::fs::write(&r2, &second).unwrap();
    std::fs::remove_dir_all(s.root.join("round-02")).unwrap();
    std::fs::write(
        &r1,
        std::fs::read_to_string(&r1).unwrap().replace(&s.c1, &s.c2),
    )
    .unwrap();
    let got = problems(&s.root, &s.ws);
    assert!(
        got.iter().any(|p| p.starts_with(
            "dispositions.json[0] round-01/claude/F1: fixed, but no later review round"
        )),
        "{got:?}"
    );
}

#[test]
fn reviewer_and_revision_rules_are_reported() {
    let Some(m) = vitest_modules() else { return };
    let s = setup(Some(&m));
    let r2 = s.root.join("round-02/round.json");
    let good = std::fs::read_to_string(&r2).unwrap();
    let table: Vec<(String, &str)> = vec![
        (
            good.replacen(r#""exitCode": 0, "#, "", 1),
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
    ];
    for (json, want) in table {
        std::fs::write(&r2, &json).unwrap();
        assert_eq!(problems(&s.root, &s.ws), [want.to_string()], "{want}");
    }
    std::fs::write(&r2, &good).unwrap();
    std::fs::write(s.ws.join("src/lib.rs"), "pub fn f() { }\n").unwrap();
    assert_eq!(
        problems(&s.root, &s.ws),
        ["src/lib.rs: uncommitted change under the declared source paths or the test directory"]
    );
    git(&s.ws, &["commit", "-qam", "later"]);
    let now = git(&s.ws, &["rev-parse", "HEAD"]);
    assert_eq!(
        problems(&s.root, &s.ws),
        [format!(
            "round-02: the last round reviewed {}, but HEAD is {now}",
            s.c2
        )]
    );
}

/// The runner is configurable (an option of the command, never a workspace file):
/// any program writing a Jest-shaped JSON report (here a shell script standing in for
/// one), with the same exactly-once rule; so is the test directory.
#[test]
fn the_runner_and_test_directory_are_options() {
    let s = setup(None);
    let report =
        r#"{"testResults": [{"name": "WS/tests/review/limits.test.js", "assertionResults": [
        {"fullName": "limits rejects overflow", "status": "passed"},
        {"fullName": "limits keeps totals", "status": "passed"},
        {"fullName": "limits keeps totals", "status": "failed"}]}]}"#
            .replace("WS", &s.ws.display().to_string());
    std::fs::write(s.ws.join("report.json"), report).unwrap();
    let runner = |argv: &[&str]| ReviewOptions {
        runner: argv.iter().map(|a| a.to_string()).collect(),
        ..ReviewOptions::default()
    };
    let opts = runner(&["sh", "-c", "cp report.json \"$0\"", "{report}", "{files}"]);
    assert_eq!(
        problems_with(&s.root, &s.ws, &opts),
        [
            "dispositions.json[2] round-01/codex/F3: regression test tests/review/limits.test.js \"limits keeps totals\" is ambiguous: 2 assertions have that name (passed, failed); it must pass exactly once"
        ]
    );
    let got = problems_with(&s.root, &s.ws, &runner(&["sh", "-c", "exit 3", "{report}"]));
    assert!(
        got.len() == 1 && got[0].starts_with("runner: sh wrote no report"),
        "{got:?}"
    );
    let opts = ReviewOptions {
        test_directory: "spec".into(),
        ..opts
    };
    let got = problems_with(&s.root, &s.ws, &opts);
    assert!(
        got.contains(&"dispositions.json[0] round-01/claude/F1: regression file \"tests/review/limits.test.js\" is not a literal repository path under the test directory \"spec\"".to_string()),
        "{got:?}"
    );
}

#[test]
fn no_rounds_is_never_success() {
    let s = setup(None);
    std::fs::remove_dir_all(s.root.join("round-01")).unwrap();
    std::fs::remove_dir_all(s.root.join("round-02")).unwrap();
    assert_eq!(
        problems(&s.root, &s.ws),
        [".: no review round (a directory with round.json): there is nothing to verify"]
    );
}

/// Review files are the workspace's, which the agent writes: a FIFO in place of one
/// is reported, never waited on (it used to block the verifier forever).
#[test]
fn a_fifo_in_place_of_a_review_file_does_not_block() {
    let s = setup(None);
    let (root, ws) = (s.root.clone(), s.ws.clone());
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
