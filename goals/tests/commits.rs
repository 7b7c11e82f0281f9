//! The commit-range verifier on repositories built with the real `git`.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use tacho_tests::git::git;

use std::path::Path;

use tacho_goals::commits::{Merges, verify_commits};

fn commit(ws: &Path, files: &[(&str, Option<&str>)], msg: &str) -> String {
    for (p, content) in files {
        let path = ws.join(p);
        match content {
            Some(c) => {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, c).unwrap();
            }
            None => {
                std::fs::remove_file(path).unwrap();
            }
        }
    }
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-qm", msg]);
    git(ws, &["rev-parse", "HEAD"])
}

fn repo() -> (tempfile::TempDir, std::path::PathBuf, String) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    git(&ws, &["init", "-q", "-b", "main"]);
    let base = commit(
        &ws,
        &[
            ("src/a.rs", Some("a")),
            ("legacy/schema.sql", Some("s")),
            ("README", Some("r")),
        ],
        "base",
    );
    (tmp, ws, base)
}

fn reasons(r: &tacho_goals::commits::CommitReport) -> Vec<String> {
    r.violations
        .iter()
        .map(|v| format!("{} {}", v.path.clone().unwrap_or_default(), v.reason))
        .collect()
}

#[test]
fn changes_inside_the_allowed_scope_pass() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let (_t, ws, base) = repo();
    commit(&ws, &[("src/b.rs", Some("b"))], "add b");
    commit(&ws, &[("src/a.rs", Some("a2"))], "edit a");
    let r = verify_commits(
        &ws,
        &base,
        &["src".into()],
        &["legacy".into()],
        Merges::Reject,
    )
    .unwrap();
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.commits.len(), 2);
    assert_eq!(r.paths_checked, 2);
}

#[test]
fn deletions_and_both_sides_of_renames_are_examined() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let (_t, ws, base) = repo();
    // A rename out of the forbidden area shows as its deletion there.
    git(&ws, &["mv", "legacy/schema.sql", "src/schema.sql"]);
    git(&ws, &["commit", "-qm", "move schema"]);
    commit(&ws, &[("README", None)], "drop readme");
    let r = verify_commits(
        &ws,
        &base,
        &["src".into()],
        &["legacy".into()],
        Merges::Reject,
    )
    .unwrap();
    assert_eq!(
        reasons(&r),
        [
            "README deleted outside the allowed scopes",
            "legacy/schema.sql deleted in a forbidden scope"
        ]
    );
}

#[test]
fn merges_are_handled_as_chosen() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let (_t, ws, base) = repo();
    git(&ws, &["checkout", "-q", "-b", "side"]);
    commit(&ws, &[("legacy/x.sql", Some("x"))], "side change");
    git(&ws, &["checkout", "-q", "main"]);
    commit(&ws, &[("src/c.rs", Some("c"))], "main change");
    git(&ws, &["merge", "-q", "--no-ff", "-m", "merge side", "side"]);
    let reject = verify_commits(&ws, &base, &[], &["legacy".into()], Merges::Reject).unwrap();
    assert!(
        reasons(&reject)
            .iter()
            .any(|r| r.contains("merge commit with 2 parents")),
        "{:?}",
        reasons(&reject)
    );
    // The side branch's own commit is in the range either way.
    assert!(reasons(&reject).contains(&"legacy/x.sql added in a forbidden scope".to_string()));
    let first = verify_commits(&ws, &base, &[], &["legacy".into()], Merges::FirstParent).unwrap();
    // Against its first parent, the merge brings legacy/x.sql in.
    assert_eq!(
        reasons(&first)
            .iter()
            .filter(|r| r.starts_with("legacy/x.sql"))
            .count(),
        2
    );
    let all = verify_commits(&ws, &base, &[], &["src".into()], Merges::All).unwrap();
    assert!(
        reasons(&all).iter().any(|r| r.starts_with("src/c.rs")),
        "{:?}",
        reasons(&all)
    );
}

#[test]
fn the_baseline_must_be_an_ancestor_and_the_range_not_empty() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let (_t, ws, base) = repo();
    let r = verify_commits(&ws, &base, &[], &[], Merges::Reject).unwrap();
    assert_eq!(
        reasons(&r),
        [format!(" the range {base}..{base} holds no commit")]
    );
    git(&ws, &["checkout", "-q", "-b", "other"]);
    let other = commit(&ws, &[("src/o.rs", Some("o"))], "other");
    git(&ws, &["checkout", "-q", "main"]);
    commit(&ws, &[("src/m.rs", Some("m"))], "main");
    let r = verify_commits(&ws, &other, &[], &[], Merges::Reject).unwrap();
    assert!(
        reasons(&r)[0].contains("is not an ancestor of HEAD"),
        "{:?}",
        reasons(&r)
    );
    let r = verify_commits(&ws, "no-such-ref", &[], &[], Merges::Reject).unwrap();
    assert_eq!(
        reasons(&r),
        [" baseline no-such-ref does not name a commit of this repository"]
    );
}

/// The range is git's `BASELINE..HEAD`: commits reachable from HEAD and not from the
/// baseline, compared with `git rev-list` on merged histories where HEAD merges
/// branches that forked before the baseline (issue 28).
#[test]
fn the_range_is_gits_baseline_to_head() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let rev_list = |ws: &Path, range: &str| -> Vec<String> {
        sorted(
            git(ws, &["rev-list", range])
                .lines()
                .map(str::to_owned)
                .collect(),
        )
    };
    // root → p1 → p2 → baseline on main; `old` forks at root, `older` at p1; HEAD
    // merges both, with a main commit between.
    let (_t, ws, root) = repo();
    git(&ws, &["checkout", "-q", "-b", "old"]);
    commit(&ws, &[("src/old.rs", Some("o"))], "old side");
    git(&ws, &["checkout", "-q", "main"]);
    commit(&ws, &[("src/p1.rs", Some("1"))], "p1");
    git(&ws, &["checkout", "-q", "-b", "older"]);
    commit(&ws, &[("src/older.rs", Some("o"))], "older side");
    commit(&ws, &[("src/older2.rs", Some("o"))], "older side 2");
    git(&ws, &["checkout", "-q", "main"]);
    commit(&ws, &[("src/p2.rs", Some("2"))], "p2");
    let baseline = commit(&ws, &[("src/b.rs", Some("b"))], "baseline");
    git(&ws, &["merge", "-q", "--no-ff", "-m", "merge old", "old"]);
    let after_one = git(&ws, &["rev-parse", "HEAD"]);
    commit(&ws, &[("src/c.rs", Some("c"))], "main after");
    git(
        &ws,
        &["merge", "-q", "--no-ff", "-m", "merge older", "older"],
    );
    for (base, head) in [
        (baseline.as_str(), "HEAD"),
        (root.as_str(), "HEAD"),
        (baseline.as_str(), after_one.as_str()),
    ] {
        git(&ws, &["checkout", "-q", "--detach", head]);
        let want = rev_list(&ws, &format!("{base}..HEAD"));
        let r = verify_commits(&ws, base, &[], &[], Merges::All).unwrap();
        assert_eq!(sorted(r.commits.clone()), want, "{base}..{head}");
        assert!(
            reasons(&r).is_empty() || !want.is_empty(),
            "{:?}",
            reasons(&r)
        );
    }
    // The first case is the one of the issue: git counts the merge and the side
    // commits, never a commit from before the baseline.
    git(&ws, &["checkout", "-q", "main"]);
    let r = verify_commits(&ws, &baseline, &[], &[], Merges::All).unwrap();
    assert!(!r.commits.contains(&root), "{:?}", r.commits);
}
