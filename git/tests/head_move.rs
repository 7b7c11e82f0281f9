#![allow(clippy::unwrap_used)]

//! HEAD as tacho reads it for commit links (SPEC.md §17.2): a reading that finds HEAD
//! where it was, whether told by the loose files or by the repository, and every move
//! — a commit, a detached HEAD, a packed ref, a linked work tree.

use std::path::Path;

use tacho_git::head::head_move;
use tacho_tests::git::git;

fn commit(repo: &Path, name: &str) -> String {
    std::fs::write(repo.join(name), name).unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-qm", name]);
    git(repo, &["rev-parse", "HEAD"])
}

#[test]
fn head_is_read_the_same_however_it_is_stored() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(repo.join("sub")).unwrap();
    let repo = repo.canonicalize().unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    let first = commit(&repo, "a");
    let sub = repo.join("sub");

    // The first reading names HEAD; reading it again finds it where it was.
    let m = head_move(&sub, None, 10).unwrap().unwrap();
    assert_eq!(m.head, first);
    assert!(m.commits.is_empty());
    assert_eq!(head_move(&sub, Some(&first), 10).unwrap(), None);

    // A commit is a move, with the commit listed.
    let second = commit(&repo, "b");
    let m = head_move(&sub, Some(&first), 10).unwrap().unwrap();
    assert_eq!(m.head, second);
    assert_eq!(m.commits.len(), 1);
    assert_eq!(m.commits[0].0, second);

    // Packed refs: no loose ref file to read, the same answers.
    git(&repo, &["pack-refs", "--all"]);
    assert!(!repo.join(".git/refs/heads/main").exists());
    assert_eq!(head_move(&sub, Some(&second), 10).unwrap(), None);
    let m = head_move(&sub, Some(&first), 10).unwrap().unwrap();
    assert_eq!(m.head, second);

    // A detached HEAD at the first commit.
    git(&repo, &["checkout", "-q", "--detach", &first]);
    assert_eq!(head_move(&sub, Some(&first), 10).unwrap(), None);
    let m = head_move(&sub, Some(&second), 10).unwrap().unwrap();
    assert_eq!(m.head, first);
    assert!(m.commits.is_empty(), "going back lists no commit: {m:?}");
    git(&repo, &["checkout", "-q", "main"]);

    // A linked work tree (`.git` is a file there) moves on its own branch.
    let linked = tmp.path().join("linked");
    git(
        &repo,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "side",
            linked.to_str().unwrap(),
        ],
    );
    let linked = linked.canonicalize().unwrap();
    assert_eq!(head_move(&linked, Some(&second), 10).unwrap(), None);
    let third = commit(&linked, "c");
    let m = head_move(&linked, Some(&second), 10).unwrap().unwrap();
    assert_eq!(m.head, third);
    assert_eq!(head_move(&sub, Some(&second), 10).unwrap(), None);
}
