#![allow(clippy::unwrap_used)]

//! The snapshot store and rollback, checked against the real `git` program where it is
//! installed (`git --git-dir=<store> ls-tree`, `git ls-files`, `git fsck`).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use tacho_tests::git::git_bytes as git;

use proptest::prelude::*;
use tacho_git::rollback::{self, Action, PlanInput};
use tacho_git::safefs::Root;
use tacho_git::snapshot::{ExcludeReason, Files, Scope, SnapshotStore};

#[path = "snapshot/gc_deltas.rs"]
mod gc_deltas;
#[path = "snapshot/modes_attacks.rs"]
mod modes_attacks;
#[path = "snapshot/small_pack_attacks.rs"]
mod small_pack_attacks;

struct Env {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    store: SnapshotStore,
}

fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let store = SnapshotStore::open(
        tmp.path().join("home/snapshots"),
        tmp.path().join("home/cache"),
    )
    .unwrap();
    Env {
        _tmp: tmp,
        ws,
        store,
    }
}

fn write(ws: &Path, rel: &str, data: &str) {
    let p = ws.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

fn chmod(ws: &Path, rel: &str, mode: u32) {
    std::fs::set_permissions(ws.join(rel), std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `git ls-tree -r` of a snapshot, through the real git: path → (mode, oid).
fn ls_tree(store: &SnapshotStore, id: &str) -> BTreeMap<String, (String, String)> {
    let out = git(
        store.root(),
        &[
            "--git-dir",
            store.root().to_str().unwrap(),
            "ls-tree",
            "-r",
            "-z",
            &format!("refs/snapshots/{id}"),
        ],
    );
    let mut m = BTreeMap::new();
    let mut modes = None;
    for rec in out.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let tab = rec.iter().position(|b| *b == b'\t').unwrap();
        let meta = std::str::from_utf8(&rec[..tab]).unwrap();
        let parts: Vec<&str> = meta.split(' ').collect();
        if rec[tab + 1..] == *tacho_git::snapshot::MODES_NAME {
            modes = Some(parts[2].to_owned());
            continue;
        }
        let path = String::from_utf8(rec[tab + 1..].to_vec()).unwrap();
        m.insert(path, (parts[0].to_owned(), parts[2].to_owned()));
    }
    // The modes entry, read by git and parsed here (SPEC.md §10.1): each file it names
    // has those permission bits instead of the 644 or 755 of its tree entry.
    if let Some(oid) = modes {
        let blob = git(
            store.root(),
            &[
                "--git-dir",
                store.root().to_str().unwrap(),
                "cat-file",
                "blob",
                &oid,
            ],
        );
        let nl = blob.iter().position(|b| *b == b'\n').unwrap();
        let header = std::str::from_utf8(&blob[..nl]).unwrap();
        let usual: Vec<&str> = header
            .strip_prefix("tacho.modes 1 ")
            .unwrap()
            .split(' ')
            .collect();
        // The usual bits of each kind, for every file the records do not name.
        for (mode, _) in m.values_mut() {
            match mode.as_str() {
                "100644" => *mode = format!("100{}", usual[0]),
                "100755" => *mode = format!("100{}", usual[1]),
                _ => {}
            }
        }
        let body = &blob[nl + 1..];
        for rec in body.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            let rec = std::str::from_utf8(rec).unwrap();
            let (bits, path) = rec.split_once(' ').unwrap();
            let entry = m.get_mut(path).expect("the modes entry names a file");
            assert_ne!(entry.0, "120000", "a link has no mode entry");
            entry.0 = format!("100{bits}");
        }
    }
    m
}

fn fsck(store: &SnapshotStore) {
    git(
        store.root(),
        &[
            "--git-dir",
            store.root().to_str().unwrap(),
            "fsck",
            "--strict",
            "--no-dangling",
        ],
    );
}

fn fsck_if_git(store: &SnapshotStore) {
    if tacho_tests::git::need_git() {
        fsck(store);
    }
}

/// What is on disk under `ws` (not following links, skipping `.git`), as git would
/// record it: path → (mode, blob id).
fn disk(ws: &Path) -> BTreeMap<String, (String, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (String, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            if e.file_name() == ".git" {
                continue;
            }
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_str().unwrap().to_owned();
            let (mode, data) = if m.file_type().is_symlink() {
                (
                    "120000",
                    std::fs::read_link(&p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                )
            } else if m.is_dir() {
                walk(root, &p, out);
                continue;
            } else if !m.is_file() {
                continue;
            } else {
                // Exact permission bits, as snapshots keep them.
                let mode = format!("100{:o}", m.permissions().mode() & 0o777);
                out.insert(rel, (mode, gix_hash(&std::fs::read(&p).unwrap())));
                continue;
            };
            let oid = gix_hash(&data);
            out.insert(rel, (mode.to_owned(), oid));
        }
    }
    let mut out = BTreeMap::new();
    walk(ws, ws, &mut out);
    out
}

fn gix_hash(data: &[u8]) -> String {
    // The Git blob id, computed independently of the engine.
    use std::io::Write;
    let mut h = Command::new("git")
        .args(["hash-object", "--stdin", "--no-filters"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    h.stdin.take().unwrap().write_all(data).unwrap();
    let out = h.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn a_snapshot_holds_what_git_ls_files_lists() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let e = env();
    let ws = &e.ws;
    git(ws, &["init", "-q"]);
    write(ws, ".gitignore", "*.log\nbuild/\n!keep.log\n");
    write(ws, "src/main.rs", "fn main() {}\n");
    write(ws, "src/.gitignore", "gen/\n");
    write(ws, "src/gen/out.rs", "generated\n");
    write(ws, "src/lib.rs", "pub fn f() {}\n");
    write(ws, "debug.log", "noise\n");
    write(ws, "keep.log", "kept by negation\n");
    write(ws, "build/app", "binary\n");
    write(ws, "run.sh", "#!/bin/sh\necho hi\n");
    chmod(ws, "run.sh", 0o755);
    write(ws, "forced.log", "tracked although ignored\n");
    git(ws, &["add", "src/main.rs", ".gitignore"]);
    git(ws, &["add", "-f", "forced.log"]);
    git(ws, &["commit", "-qm", "init"]);
    write(ws, "untracked.txt", "new\n");
    std::os::unix::fs::symlink("src/main.rs", ws.join("link-inside")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ws.join("link-outside")).unwrap();
    write(ws, "vendor/dep/file.txt", "nested\n");
    git(&ws.join("vendor/dep"), &["init", "-q"]);
    let fifo = ws.join("pipe");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());

    let snap = e.store.take(ws, &Scope::Full).unwrap();
    let tree = ls_tree(&e.store, &snap.id);
    let listed = git(
        ws,
        &[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    );
    let mut expected: BTreeSet<String> = listed
        .split(|b| *b == 0)
        .filter(|r| !r.is_empty())
        .map(|r| String::from_utf8(r.to_vec()).unwrap())
        .collect();
    // git lists the nested repository as a directory; tacho reports it instead.
    expected.retain(|p| !p.starts_with("vendor/dep"));
    expected.remove("link-outside");
    expected.remove("pipe");
    assert_eq!(tree.keys().cloned().collect::<BTreeSet<_>>(), expected);
    let on_disk = disk(ws);
    for (path, (mode, oid)) in &tree {
        assert_eq!(
            on_disk.get(path),
            Some(&(mode.clone(), oid.clone())),
            "{path}"
        );
    }
    let reasons: BTreeMap<&str, &ExcludeReason> = snap
        .excluded
        .iter()
        .map(|x| (x.path.as_str(), &x.reason))
        .collect();
    assert_eq!(
        reasons.get("link-outside"),
        Some(&&ExcludeReason::LinkOutside)
    );
    assert_eq!(
        reasons.get("vendor/dep"),
        Some(&&ExcludeReason::NestedRepository)
    );
    assert_eq!(reasons.get("pipe"), Some(&&ExcludeReason::Special));
    // The project's own repository was only read.
    let status = git(ws, &["status", "--porcelain"]);
    assert!(
        String::from_utf8(status)
            .unwrap()
            .contains("?? untracked.txt")
    );
    fsck(&e.store);
}

#[test]
fn outside_git_every_file_but_ignored_ones() {
    let e = env();
    let ws = &e.ws;
    write(ws, ".gitignore", "target/\n*.tmp\n");
    write(ws, "a.txt", "a\n");
    write(ws, "x.tmp", "ignored\n");
    write(ws, "target/debug/bin", "ignored\n");
    write(ws, "docs/.ignore", "draft.md\n");
    write(ws, "docs/draft.md", "ignored\n");
    write(ws, "docs/final.md", "kept\n");
    let snap = e.store.take(ws, &Scope::Full).unwrap();
    let files = e.store.files(snap.tree).unwrap();
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [".gitignore", "a.txt", "docs/.ignore", "docs/final.md"]
    );
    if tacho_tests::git::need_git() {
        fsck(&e.store);
    }
}

#[test]
fn an_incremental_snapshot_reads_only_changed_files() {
    let e = env();
    let ws = &e.ws;
    for i in 0..50 {
        write(ws, &format!("d{}/f{i}.txt", i % 5), &format!("file {i}\n"));
    }
    // File times must be older than the racy window for the cache to trust them.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(5);
    for i in 0..50 {
        let f = std::fs::File::options()
            .write(true)
            .open(ws.join(format!("d{}/f{i}.txt", i % 5)))
            .unwrap();
        f.set_modified(old).unwrap();
    }
    let first = e.store.take(ws, &Scope::Full).unwrap();
    assert_eq!(first.files_read, 50);
    std::thread::sleep(std::time::Duration::from_millis(150));
    write(ws, "d0/f0.txt", "changed\n");
    write(ws, "d1/new.txt", "new\n");
    std::fs::remove_file(ws.join("d2/f2.txt")).unwrap();
    let second = e.store.take(ws, &Scope::Full).unwrap();
    assert_eq!(
        second.files_read, 2,
        "only the changed and the new file are read"
    );
    assert_eq!(second.files, 50);
    // The same tree as a scan with no cache, and as a targeted snapshot.
    let fresh = SnapshotStore::open(e.store.root(), e._tmp.path().join("other-cache")).unwrap();
    assert_eq!(fresh.take(ws, &Scope::Full).unwrap().tree, second.tree);

    write(ws, "d3/f3.txt", "edited by a tool\n");
    write(ws, "d4/made.txt", "made by a tool\n");
    std::fs::remove_file(ws.join("d1/new.txt")).unwrap();
    let targeted = e
        .store
        .take(
            ws,
            &Scope::Paths(vec![
                "d3/f3.txt".into(),
                format!("{}/d4/made.txt", ws.display()),
                "d1/new.txt".into(),
            ]),
        )
        .unwrap();
    assert!(!targeted.full_scan);
    assert_eq!(targeted.files_read, 2);
    let full = fresh.take(ws, &Scope::Full).unwrap();
    assert_eq!(targeted.tree, full.tree);
    // A targeted path that is ignored is not added.
    write(ws, ".gitignore", "*.bak\n");
    write(ws, "x.bak", "ignored\n");
    let t = e
        .store
        .take(ws, &Scope::Paths(vec![".gitignore".into(), "x.bak".into()]))
        .unwrap();
    assert_eq!(t.tree, fresh.take(ws, &Scope::Full).unwrap().tree);
    fsck_if_git(&e.store);
}

/// Sets every file and directory time under `ws` a while back, as for a workspace
/// that has not been touched for some seconds (outside the racy window).
fn age(ws: &Path) {
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10);
    fn walk(p: &Path, t: std::time::SystemTime) {
        for e in std::fs::read_dir(p).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walk(&e.path(), t);
            }
            if !e.file_type().unwrap().is_symlink() {
                std::fs::File::open(e.path())
                    .unwrap()
                    .set_modified(t)
                    .unwrap();
            }
        }
    }
    walk(ws, old);
    std::fs::File::open(ws).unwrap().set_modified(old).unwrap();
}

#[test]
fn the_last_walk_is_reused_only_while_nothing_it_depends_on_changed() {
    let e = env();
    let ws = &e.ws;
    write(ws, ".gitignore", "*.log\n");
    write(ws, "src/a.rs", "a\n");
    write(ws, "src/b.rs", "b\n");
    write(ws, "x.log", "ignored\n");
    age(ws);
    let first = e.store.take(ws, &Scope::Full).unwrap();
    assert!(first.walked);
    std::thread::sleep(std::time::Duration::from_millis(150));
    // Content edits in place do not change directories: the listing is reused.
    write(ws, "src/a.rs", "a2\n");
    let s = e.store.take(ws, &Scope::Full).unwrap();
    assert!(!s.walked);
    assert_eq!(s.files_read, 1);
    // A new file changes its directory: walked again, and found.
    write(ws, "src/c.rs", "c\n");
    let s = e.store.take(ws, &Scope::Full).unwrap();
    assert!(s.walked);
    assert!(e.store.files(s.tree).unwrap().contains_key("src/c.rs"));
    // An ignore file edited in place (its directory unchanged): walked again, with the
    // new rules.
    age(ws);
    e.store.take(ws, &Scope::Full).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert!(!e.store.take(ws, &Scope::Full).unwrap().walked);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(ws.join(".gitignore"))
        .unwrap();
    drop(f);
    std::fs::write(ws.join(".gitignore"), "*.rs\n").unwrap();
    let s = e.store.take(ws, &Scope::Full).unwrap();
    assert!(s.walked);
    let paths: Vec<String> = e.store.files(s.tree).unwrap().into_keys().collect();
    assert_eq!(paths, [".gitignore", "x.log"]);
    fsck_if_git(&e.store);
}

#[test]
fn targeted_paths_cannot_leave_the_workspace() {
    let e = env();
    write(&e.ws, "a", "a");
    e.store.take(&e.ws, &Scope::Full).unwrap();
    for bad in ["../x", "/etc/passwd", "a/../../x", ".git/config"] {
        let err = e
            .store
            .take(&e.ws, &Scope::Paths(vec![bad.into()]))
            .unwrap_err();
        assert!(err.to_string().contains("invalid path"), "{bad}: {err}");
    }
    fsck_if_git(&e.store);
}

/// A targeted snapshot never goes through a symbolic link to a directory, outside the
/// workspace or inside it: the path is reported as not protected, and the tree keeps
/// the link as a link.
#[test]
fn targeted_paths_through_links_are_not_protected() {
    for in_git in [false, true] {
        if in_git && !tacho_tests::git::need_git() {
            continue;
        }
        let e = env();
        if in_git {
            git(&e.ws, &["init", "-q"]);
        }
        let outside = e._tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "outside secret").unwrap();
        std::os::unix::fs::symlink(&outside, e.ws.join("outlink")).unwrap();
        write(&e.ws, "realdir/file.txt", "v1");
        std::os::unix::fs::symlink("realdir", e.ws.join("inlink")).unwrap();
        if in_git {
            git(&e.ws, &["add", "-A"]);
        }
        let full = e.store.take(&e.ws, &Scope::Full).unwrap();
        write(&e.ws, "realdir/file.txt", "v2");
        let snap = e
            .store
            .take(
                &e.ws,
                &Scope::Paths(vec!["outlink/secret.txt".into(), "inlink/file.txt".into()]),
            )
            .unwrap();
        let reasons: Vec<(String, String)> = snap
            .excluded
            .iter()
            .map(|x| (x.path.clone(), x.reason.to_string()))
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    "inlink/file.txt".to_string(),
                    "reached through the symbolic link inlink".to_string()
                ),
                (
                    "outlink/secret.txt".to_string(),
                    "reached through the symbolic link outlink".to_string()
                ),
            ],
            "in git: {in_git}"
        );
        // Nothing changed in the tree: the links are links, nothing outside is stored.
        assert_eq!(ls_tree(&e.store, &snap.id), ls_tree(&e.store, &full.id));
        let tree = ls_tree(&e.store, &snap.id);
        assert!(
            !tree
                .keys()
                .any(|p| p.starts_with("outlink/") || p.starts_with("inlink/"))
        );
        assert_eq!(tree["inlink"].0, "120000", "in git: {in_git}");
        fsck_if_git(&e.store);
    }
}

// ---------------------------------------------------------------------------------
// Rollback

/// Rolls `ws` back to `points[k]`, as a session that took all of `points` would.
fn rollback_to(
    e: &Env,
    points: &[Files],
    k: usize,
    force: bool,
) -> (rollback::Plan, rollback::Applied) {
    let (plan, applied, _) = rollback_with_excluded(e, points, k, force);
    (plan, applied)
}

/// Like `rollback_to`, also returning the paths the pre-rollback snapshot excluded.
fn rollback_with_excluded(
    e: &Env,
    points: &[Files],
    k: usize,
    force: bool,
) -> (rollback::Plan, rollback::Applied, Vec<String>) {
    let now = e.store.take(&e.ws, &Scope::Full).unwrap();
    let excluded = now.excluded.iter().map(|x| x.path.clone()).collect();
    let unprotected = now
        .excluded
        .iter()
        .map(|x| (x.path.clone(), x.reason.to_string()))
        .collect();
    let current = e.store.files(now.tree).unwrap();
    let none = BTreeSet::new();
    let plan = rollback::plan(&PlanInput {
        target: &points[k],
        later: points[k + 1..].iter().collect(),
        edited: &none,
        edited_after_last: &none,
        current: &current,
        unprotected: &unprotected,
        force,
        only: None,
        within: &[],
        unclaimed: &Default::default(),
    });
    let applied = rollback::apply(&e.store, &e.ws, &plan).unwrap();
    (plan, applied, excluded)
}

#[derive(Debug, Clone)]
enum Op {
    Write(u8, u8),
    Delete(u8),
    Rename(u8, u8),
    Exec(u8, bool),
    /// Permission bits other than 644 and 755 (a secret's 0600, a read-only 0400, ...).
    Chmod(u8, u32),
    /// A file turned into a directory holding a file (`rm f && mkdir f && echo x >
    /// f/inner`), or a directory into a file (`rm -rf d && echo x > d`).
    FileToDir(u8),
    DirToFile(u8),
    Link(u8, u8),
    Snapshot,
}

fn name(n: u8) -> String {
    // A few directories, so that creating and emptying them is exercised.
    match n % 4 {
        0 => format!("f{n}"),
        1 => format!("d{}/f{n}", n % 3),
        2 => format!("d{}/e/f{n}", n % 2),
        _ => format!("top{n}.txt"),
    }
}

fn apply_op(ws: &Path, op: &Op) {
    match *op {
        Op::Write(n, v) => {
            let p = ws.join(name(n));
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
                std::fs::remove_file(&p).unwrap();
            }
            // A read-only file (Chmod) is written as an agent would: made writable.
            if std::fs::symlink_metadata(&p)
                .is_ok_and(|m| m.is_file() && m.permissions().readonly())
            {
                chmod(ws, &name(n), 0o644);
            }
            // A parent turned into a file, or the path into a directory (FileToDir,
            // DirToFile): nothing to write there.
            if std::fs::create_dir_all(p.parent().unwrap()).is_err() || p.is_dir() {
                return;
            }
            std::fs::write(&p, format!("content {v}\n").repeat(v as usize % 7 + 1)).unwrap();
        }
        Op::Delete(n) => {
            let _ = std::fs::remove_file(ws.join(name(n)));
        }
        Op::Rename(a, b) => {
            let (pa, pb) = (ws.join(name(a)), ws.join(name(b)));
            if std::fs::symlink_metadata(&pa).is_ok()
                && !pb.is_dir()
                && std::fs::create_dir_all(pb.parent().unwrap()).is_ok()
            {
                let _ = std::fs::rename(&pa, &pb);
            }
        }
        Op::Exec(n, on) => {
            let p = ws.join(name(n));
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
                chmod(ws, &name(n), if on { 0o755 } else { 0o644 });
            }
        }
        Op::FileToDir(n) => {
            let p = ws.join(name(n));
            if std::fs::symlink_metadata(&p).is_ok_and(|m| !m.is_dir()) {
                std::fs::remove_file(&p).unwrap();
                std::fs::create_dir(&p).unwrap();
                std::fs::write(p.join("inner"), format!("was {}\n", name(n))).unwrap();
            }
        }
        Op::DirToFile(n) => {
            let d = ws.join(format!("d{}", n % 3));
            if d.is_dir() {
                std::fs::remove_dir_all(&d).unwrap();
                std::fs::write(&d, "a file now\n").unwrap();
            }
        }
        Op::Chmod(n, mode) => {
            let p = ws.join(name(n));
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
                chmod(ws, &name(n), mode);
            }
        }
        Op::Link(n, to) => {
            let p = ws.join(name(n));
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                return;
            }
            if std::fs::symlink_metadata(&p).is_ok() {
                std::fs::remove_file(&p).unwrap();
            }
            if std::fs::create_dir_all(p.parent().unwrap()).is_err() {
                return;
            }
            // Relative to the workspace root, so every link stays inside.
            let depth = name(n).matches('/').count();
            let target = format!("{}{}", "../".repeat(depth), name(to));
            std::os::unix::fs::symlink(target, &p).unwrap();
        }
        Op::Snapshot => {}
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..16, any::<u8>()).prop_map(|(n, v)| Op::Write(n, v)),
        2 => (0u8..16).prop_map(Op::Delete),
        1 => (0u8..16, 0u8..16).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => (0u8..16, any::<bool>()).prop_map(|(n, b)| Op::Exec(n, b)),
        1 => (0u8..16, prop::sample::select(vec![0o600u32, 0o400, 0o640, 0o700, 0o750, 0o664]))
            .prop_map(|(n, m)| Op::Chmod(n, m)),
        1 => (0u8..16).prop_map(Op::FileToDir),
        1 => (0u8..16).prop_map(Op::DirToFile),
        1 => (0u8..16, 0u8..16).prop_map(|(n, t)| Op::Link(n, t)),
        2 => Just(Op::Snapshot),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Rolling back to any snapshot gives the workspace of that snapshot, byte for
    /// byte (checked with the real git against the store), and leaves files changed
    /// outside the session alone.
    #[test]
    fn rollback_restores_any_point(ops in proptest::collection::vec(op(), 1..40), pick in any::<prop::sample::Index>(), outside in any::<bool>()) {
        let e = env();
        let git = tacho_tests::git::need_git();
        let mut points: Vec<Files> = Vec::new();
        let mut ids = Vec::new();
        let base = e.store.take(&e.ws, &Scope::Full).unwrap();
        points.push(e.store.files(base.tree).unwrap());
        ids.push(base.id);
        for op in &ops {
            apply_op(&e.ws, op);
            if matches!(op, Op::Snapshot) {
                let s = e.store.take(&e.ws, &Scope::Full).unwrap();
                points.push(e.store.files(s.tree).unwrap());
                ids.push(s.id);
            }
        }
        let last = e.store.take(&e.ws, &Scope::Full).unwrap();
        points.push(e.store.files(last.tree).unwrap());
        ids.push(last.id);
        // A file written by someone else after the session's last snapshot.
        if outside {
            write(&e.ws, "outside.txt", "not the session's\n");
        }
        let k = pick.index(points.len());
        let before = disk(&e.ws);
        let (plan, applied, excluded) = rollback_with_excluded(&e, &points, k, false);
        prop_assert!(applied.failed.is_empty(), "{:?}", applied.failed);
        let mut now = disk(&e.ws);
        // What the snapshot could not hold (here: links that a rename made point
        // outside) is not restored, and not touched either.
        for path in &excluded {
            prop_assert_eq!(now.remove(path), before.get(path).cloned());
        }
        let mut want: BTreeMap<String, (String, String)> = if git {
            ls_tree(&e.store, &ids[k])
        } else {
            points[k].iter().map(|(p, f)| (p.clone(), (String::new(), f.oid.to_string()))).collect()
        };
        for path in &excluded {
            want.remove(path);
        }
        if outside {
            prop_assert!(plan.items.iter().all(|i| i.path != "outside.txt"));
            want.insert("outside.txt".into(), now["outside.txt"].clone());
        }
        if git {
            prop_assert_eq!(&now, &want);
            fsck(&e.store);
        } else {
            prop_assert_eq!(now.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
        }
    }
}

#[test]
fn dry_run_and_real_run_use_one_plan() {
    let e = env();
    write(&e.ws, "keep.txt", "same\n");
    write(&e.ws, "mod.txt", "before\n");
    write(&e.ws, "gone.txt", "will be deleted\n");
    write(&e.ws, "exec.sh", "#!/bin/sh\n");
    let p0 = e
        .store
        .files(e.store.take(&e.ws, &Scope::Full).unwrap().tree)
        .unwrap();
    write(&e.ws, "mod.txt", "after\n");
    std::fs::remove_file(e.ws.join("gone.txt")).unwrap();
    write(&e.ws, "new/dir/made.txt", "created\n");
    chmod(&e.ws, "exec.sh", 0o755);
    let p1 = e
        .store
        .files(e.store.take(&e.ws, &Scope::Full).unwrap().tree)
        .unwrap();
    let (plan, applied) = rollback_to(&e, &[p0, p1], 0, false);
    let actions: Vec<(&str, Action)> = plan
        .items
        .iter()
        .map(|i| (i.path.as_str(), i.action))
        .collect();
    assert_eq!(
        actions,
        [
            ("exec.sh", Action::Mode),
            ("gone.txt", Action::Recreate),
            ("mod.txt", Action::Restore),
            ("new/dir/made.txt", Action::Delete)
        ]
    );
    assert_eq!(applied.done.len(), 4);
    assert_eq!(applied.removed_dirs, ["new/dir", "new"]);
    assert!(!e.ws.join("new").exists());
    assert_eq!(
        std::fs::read_to_string(e.ws.join("mod.txt")).unwrap(),
        "before\n"
    );
    assert_eq!(
        std::fs::metadata(e.ws.join("exec.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o644
    );
    fsck_if_git(&e.store);
}

/// A Git tree keeps 644 and 755 only; a snapshot keeps every file's permission bits,
/// through full and targeted snapshots, and a rollback puts them back: a 0600 secret
/// the session rewrote, deleted 0400 and 0600 files, a 0700 script, and a file the
/// session only made world-readable. A workspace of plain bits has no modes entry
/// (its snapshot is the tree it always was), and git's own fsck accepts the entry.
#[test]
fn a_rollback_puts_back_exact_permission_bits() {
    let e = env();
    let perms = |rel: &str| {
        std::fs::symlink_metadata(e.ws.join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    write(&e.ws, "plain.txt", "plain\n");
    let plain = e.store.take(&e.ws, &Scope::Full).unwrap();
    if tacho_tests::git::need_git() {
        assert_eq!(ls_tree(&e.store, &plain.id).len(), 1);
    }
    write(&e.ws, ".env", "TOKEN=secret\n");
    write(&e.ws, "ro.txt", "read only\n");
    write(&e.ws, "private.txt", "mine\n");
    write(&e.ws, "run.sh", "#!/bin/sh\n");
    write(&e.ws, "shared.txt", "not for others\n");
    chmod(&e.ws, ".env", 0o600);
    chmod(&e.ws, "ro.txt", 0o400);
    chmod(&e.ws, "private.txt", 0o600);
    chmod(&e.ws, "run.sh", 0o700);
    chmod(&e.ws, "shared.txt", 0o640);
    let p0 = e.store.take(&e.ws, &Scope::Full).unwrap();
    let files0 = e.store.files(p0.tree).unwrap();
    assert_eq!(files0[".env"].perms, 0o600);
    assert_eq!(files0["run.sh"].perms, 0o700);
    assert_eq!(files0["plain.txt"].perms, 0o644);
    assert_eq!(
        e.store.entry(&p0.id, "ro.txt").unwrap().unwrap().perms,
        0o400
    );
    if tacho_tests::git::need_git() {
        assert_eq!(ls_tree(&e.store, &p0.id), disk(&e.ws));
    }
    // The session's changes, recorded by targeted snapshots as hooks take them.
    write(&e.ws, ".env", "TOKEN=leaked\n");
    std::fs::remove_file(e.ws.join("ro.txt")).unwrap();
    std::fs::remove_file(e.ws.join("private.txt")).unwrap();
    write(&e.ws, "run.sh", "#!/bin/sh\necho changed\n");
    chmod(&e.ws, "shared.txt", 0o644);
    let named = [".env", "ro.txt", "private.txt", "run.sh", "shared.txt"];
    let p1 = e
        .store
        .take(
            &e.ws,
            &Scope::Paths(named.iter().map(|p| p.to_string()).collect()),
        )
        .unwrap();
    assert!(!p1.full_scan);
    let files1 = e.store.files(p1.tree).unwrap();
    assert_eq!(files1[".env"].perms, 0o600, "a rewrite keeps the bits");
    assert_eq!(files1["shared.txt"].perms, 0o644);
    assert!(!files1.contains_key("ro.txt"));
    // A full scan of the same workspace reads the same: here it picks other usual
    // bits (most regular files are 0644 again, not 0600), so it is another tree.
    let full1 = e.store.take(&e.ws, &Scope::Full).unwrap();
    assert_eq!(e.store.files(full1.tree).unwrap(), files1);

    let (plan, applied) = rollback_to(&e, &[files0, files1], 0, false);
    assert!(applied.failed.is_empty(), "{:?}", applied.failed);
    let actions: Vec<(&str, Action)> = plan
        .items
        .iter()
        .map(|i| (i.path.as_str(), i.action))
        .collect();
    assert_eq!(
        actions,
        [
            (".env", Action::Restore),
            ("private.txt", Action::Recreate),
            ("ro.txt", Action::Recreate),
            ("run.sh", Action::Restore),
            ("shared.txt", Action::Mode),
        ]
    );
    assert_eq!(perms(".env"), 0o600);
    assert_eq!(perms("ro.txt"), 0o400);
    assert_eq!(perms("private.txt"), 0o600);
    assert_eq!(perms("run.sh"), 0o700);
    assert_eq!(perms("shared.txt"), 0o640);
    assert_eq!(perms("plain.txt"), 0o644);
    // Back where it was: the same snapshot as the point.
    assert_eq!(e.store.take(&e.ws, &Scope::Full).unwrap().id, p0.id);
    // Back to plain bits everywhere: the modes entry goes.
    for p in [".env", "ro.txt", "private.txt", "shared.txt"] {
        chmod(&e.ws, p, 0o644);
    }
    chmod(&e.ws, "run.sh", 0o755);
    let again = e.store.take(&e.ws, &Scope::Full).unwrap();
    if tacho_tests::git::need_git() {
        assert_eq!(ls_tree(&e.store, &again.id), disk(&e.ws));
        assert_eq!(ls_tree(&e.store, &again.id).len(), 6);
        fsck(&e.store);
    }
}

/// A step that turns a file into a directory, and a directory into a file, is
/// snapshotted as it is (the file inside the new directory was lost from the tree: the
/// removal of `f` was applied after the upsert of `f/inner`; and `d/x` under the new
/// file `d` was left out as unreadable, "Not a directory") and rolled back exactly,
/// in a Git work tree whose index still names the old paths and outside Git, by full
/// and by targeted snapshots.
#[test]
fn a_file_turned_into_a_directory_and_back_is_rolled_back() {
    for in_git in [true, false] {
        if in_git && !tacho_tests::git::need_git() {
            continue;
        }
        let e = env();
        write(&e.ws, "f", "a file\n");
        write(&e.ws, "d/x", "in a directory\n");
        write(&e.ws, "keep", "kept\n");
        if in_git {
            git(&e.ws, &["init", "-q"]);
            git(&e.ws, &["add", "-A"]);
            git(
                &e.ws,
                &[
                    "-c",
                    "user.name=t",
                    "-c",
                    "user.email=t@t",
                    "commit",
                    "-qm",
                    "init",
                ],
            );
        }
        let p0 = e.store.take(&e.ws, &Scope::Full).unwrap();
        let before = disk(&e.ws);
        std::fs::remove_file(e.ws.join("f")).unwrap();
        write(&e.ws, "f/inner", "now inside\n");
        std::fs::remove_dir_all(e.ws.join("d")).unwrap();
        write(&e.ws, "d", "now a file\n");
        let after = disk(&e.ws);
        for scope in [
            Scope::Full,
            Scope::Paths(vec!["f/inner".into(), "d".into(), "d/x".into(), "f".into()]),
        ] {
            let p1 = e.store.take(&e.ws, &scope).unwrap();
            assert!(
                p1.excluded.is_empty(),
                "in git: {in_git}: {:?}",
                p1.excluded
            );
            let files1 = e.store.files(p1.tree).unwrap();
            let got: BTreeSet<&str> = files1.keys().map(String::as_str).collect();
            assert_eq!(
                got,
                BTreeSet::from(["d", "f/inner", "keep"]),
                "in git: {in_git}, {scope:?}"
            );
            if in_git {
                assert_eq!(ls_tree(&e.store, &p1.id), after);
            }
        }
        let files0 = e.store.files(p0.tree).unwrap();
        let files1 = e
            .store
            .files(e.store.take(&e.ws, &Scope::Full).unwrap().tree)
            .unwrap();
        let (_, applied) = rollback_to(&e, &[files0, files1.clone()], 0, false);
        assert!(
            applied.failed.is_empty(),
            "in git: {in_git}: {:?}",
            applied.failed
        );
        assert_eq!(disk(&e.ws), before, "in git: {in_git}");
        assert_eq!(e.store.take(&e.ws, &Scope::Full).unwrap().id, p0.id);
        // And forward again: the undo is a rollback the other way.
        let now = e
            .store
            .files(e.store.take(&e.ws, &Scope::Full).unwrap().tree)
            .unwrap();
        let (_, applied) = rollback_to(&e, &[files1, now], 0, false);
        assert!(
            applied.failed.is_empty(),
            "in git: {in_git}: {:?}",
            applied.failed
        );
        assert_eq!(disk(&e.ws), after, "in git: {in_git}");
    }
}

/// A workspace made under umask 002 (every file 0664, every script 0775, as a checkout
/// on a system with user-private groups) has a modes entry of a header and no record,
/// whatever its size, and keeps it so through targeted snapshots; a 0600 file in it is
/// the one record.
#[test]
fn a_workspace_of_group_writable_files_has_a_small_modes_entry() {
    let e = env();
    for k in 0..200 {
        write(&e.ws, &format!("src/f{k}.rs"), &format!("// {k}\n"));
        chmod(&e.ws, &format!("src/f{k}.rs"), 0o664);
    }
    write(&e.ws, "run.sh", "#!/bin/sh\n");
    chmod(&e.ws, "run.sh", 0o775);
    let modes_blob = |id: &str| -> Vec<u8> {
        let repo = gix::open(e.store.root()).unwrap();
        let tree = repo
            .find_tree(gix::ObjectId::from_hex(id.as_bytes()).unwrap())
            .unwrap();
        let entry = tree.find_entry(tacho_git::snapshot::MODES_NAME).unwrap();
        repo.find_blob(entry.object_id()).unwrap().data.clone()
    };
    let s0 = e.store.take(&e.ws, &Scope::Full).unwrap();
    assert_eq!(modes_blob(&s0.id), b"tacho.modes 1 664 775\n");
    // A new file made the same way, by a targeted snapshot: still no record.
    write(&e.ws, "src/new.rs", "// new\n");
    chmod(&e.ws, "src/new.rs", 0o664);
    write(&e.ws, "key", "secret\n");
    chmod(&e.ws, "key", 0o600);
    let s1 = e
        .store
        .take(
            &e.ws,
            &Scope::Paths(vec!["src/new.rs".into(), "key".into()]),
        )
        .unwrap();
    assert!(!s1.full_scan);
    assert_eq!(modes_blob(&s1.id), b"tacho.modes 1 664 775\n600 key\0");
    let files = e.store.files(s1.tree).unwrap();
    assert_eq!(files["src/new.rs"].perms, 0o664);
    assert_eq!(files["run.sh"].perms, 0o775);
    assert_eq!(files["key"].perms, 0o600);
    // The full scan of the same files is the same snapshot.
    assert_eq!(e.store.take(&e.ws, &Scope::Full).unwrap().id, s1.id);
}

/// A modes entry that does not hold (damaged, naming a path the snapshot lacks) makes
/// the snapshot unreadable, never read as plain bits.
#[test]
fn a_damaged_modes_entry_is_refused() {
    let e = env();
    write(&e.ws, "a.txt", "a\n");
    chmod(&e.ws, "a.txt", 0o600);
    let snap = e.store.take(&e.ws, &Scope::Full).unwrap();
    assert_eq!(e.store.files(snap.tree).unwrap()["a.txt"].perms, 0o600);
    // A tree naming a modes entry that lists a file it does not have.
    let repo = gix::open(e.store.root()).unwrap();
    let bad = repo
        .write_blob(b"tacho.modes 1 644 755\n600 b.txt\0")
        .unwrap()
        .detach();
    let tree = repo
        .find_tree(snap.tree)
        .unwrap()
        .decode()
        .unwrap()
        .to_owned();
    let mut tree: gix::objs::Tree = tree;
    for entry in &mut tree.entries {
        if entry.filename.as_slice() == tacho_git::snapshot::MODES_NAME {
            entry.oid = bad;
        }
    }
    let forged = repo.write_object(&tree).unwrap().detach();
    let err = e.store.files(forged).unwrap_err().to_string();
    assert!(err.contains("b.txt"), "{err}");
    let junk = repo.write_blob(b"not modes").unwrap().detach();
    for entry in &mut tree.entries {
        if entry.filename.as_slice() == tacho_git::snapshot::MODES_NAME {
            entry.oid = junk;
        }
    }
    let forged = repo.write_object(&tree).unwrap().detach();
    let err = e.store.files(forged).unwrap_err().to_string();
    assert!(err.contains("modes"), "{err}");
}

#[test]
fn conflicts_are_left_alone_unless_forced() {
    let e = env();
    write(&e.ws, "a.txt", "1\n");
    let p0 = e
        .store
        .files(e.store.take(&e.ws, &Scope::Full).unwrap().tree)
        .unwrap();
    write(&e.ws, "a.txt", "2 by the session\n");
    let p1 = e
        .store
        .files(e.store.take(&e.ws, &Scope::Full).unwrap().tree)
        .unwrap();
    write(&e.ws, "a.txt", "3 by the user\n");
    let points = [p0, p1];
    let (plan, applied) = rollback_to(&e, &points, 0, false);
    assert!(plan.items.is_empty());
    assert_eq!(plan.conflicts.len(), 1);
    assert_eq!(
        plan.conflicts[0].reason,
        "changed outside the session after its last snapshot"
    );
    assert!(applied.done.is_empty());
    assert_eq!(
        std::fs::read_to_string(e.ws.join("a.txt")).unwrap(),
        "3 by the user\n"
    );
    let (plan, _) = rollback_to(&e, &points, 0, true);
    assert!(plan.items[0].forced);
    assert_eq!(std::fs::read_to_string(e.ws.join("a.txt")).unwrap(), "1\n");
    fsck_if_git(&e.store);
}

// ---------------------------------------------------------------------------------
// Escapes

#[test]
fn a_symlinked_parent_is_refused() {
    let e = env();
    let outside = e._tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, e.ws.join("sub")).unwrap();
    let root = Root::open(&e.ws).unwrap();
    let err = root.write_file("sub/evil.txt", b"x", 0o644).unwrap_err();
    assert_eq!(
        err.to_string(),
        "refusing \"sub/evil.txt\": `sub` is a symbolic link"
    );
    assert!(!outside.join("evil.txt").exists());
    let err = root.remove("sub/anything").unwrap_err();
    assert!(
        err.to_string().contains("`sub` is a symbolic link"),
        "{err}"
    );
}

#[test]
fn dot_dot_and_absolute_paths_are_refused() {
    let e = env();
    let root = Root::open(&e.ws).unwrap();
    let err = root.write_file("../escape.txt", b"x", 0o644).unwrap_err();
    assert_eq!(
        err.to_string(),
        "refusing \"../escape.txt\": `..` component leaves the workspace"
    );
    let err = root.write_file("/tmp/escape.txt", b"x", 0o644).unwrap_err();
    assert_eq!(
        err.to_string(),
        "refusing \"/tmp/escape.txt\": absolute path"
    );
    assert!(!e._tmp.path().join("escape.txt").exists());
}

#[test]
fn a_link_swapped_in_after_planning_does_not_redirect_writes() {
    let e = env();
    write(&e.ws, "dir/file.txt", "original\n");
    let p0 = e
        .store
        .files(e.store.take(&e.ws, &Scope::Full).unwrap().tree)
        .unwrap();
    write(&e.ws, "dir/file.txt", "changed by the session\n");
    let p1 = e
        .store
        .files(e.store.take(&e.ws, &Scope::Full).unwrap().tree)
        .unwrap();
    let current = p1.clone();
    let none = BTreeSet::new();
    let plan = rollback::plan(&PlanInput {
        target: &p0,
        later: vec![&p1],
        edited: &none,
        edited_after_last: &none,
        current: &current,
        unprotected: &BTreeMap::new(),
        force: false,
        only: None,
        within: &[],
        unclaimed: &Default::default(),
    });
    assert_eq!(plan.items.len(), 1);
    // Between plan and apply, `dir` becomes a link to a directory outside holding a
    // file of the same name and content.
    let outside = e._tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("file.txt"), "changed by the session\n").unwrap();
    std::fs::remove_dir_all(e.ws.join("dir")).unwrap();
    std::os::unix::fs::symlink(&outside, e.ws.join("dir")).unwrap();
    let applied = rollback::apply(&e.store, &e.ws, &plan).unwrap();
    assert!(applied.done.is_empty());
    assert_eq!(applied.failed.len(), 1);
    assert!(
        applied.failed[0]
            .reason
            .contains("`dir` is a symbolic link"),
        "{:?}",
        applied.failed
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("file.txt")).unwrap(),
        "changed by the session\n"
    );
    fsck_if_git(&e.store);
}

#[test]
fn a_file_replaced_by_a_link_after_planning_is_left_alone() {
    let e = env();
    write(&e.ws, "f.txt", "one\n");
    let p0 = e
        .store
        .files(e.store.take(&e.ws, &Scope::Full).unwrap().tree)
        .unwrap();
    write(&e.ws, "f.txt", "two\n");
    let p1 = e
        .store
        .files(e.store.take(&e.ws, &Scope::Full).unwrap().tree)
        .unwrap();
    let none = BTreeSet::new();
    let plan = rollback::plan(&PlanInput {
        target: &p0,
        later: vec![&p1],
        edited: &none,
        edited_after_last: &none,
        current: &p1,
        unprotected: &BTreeMap::new(),
        force: false,
        only: None,
        within: &[],
        unclaimed: &Default::default(),
    });
    let secret = e._tmp.path().join("secret");
    std::fs::write(&secret, "two\n").unwrap();
    std::fs::remove_file(e.ws.join("f.txt")).unwrap();
    std::os::unix::fs::symlink(&secret, e.ws.join("f.txt")).unwrap();
    let applied = rollback::apply(&e.store, &e.ws, &plan).unwrap();
    assert_eq!(
        applied.failed[0].reason,
        "changed since the plan was made; left alone"
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "two\n");
    fsck_if_git(&e.store);
}

/// A workspace (or a directory above it) that is now a symbolic link is refused, not
/// followed; a file hard-linked to one outside changes its mode alone.
#[test]
fn the_writer_follows_no_link_to_the_workspace_and_changes_no_outside_mode() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let real = base.join("real");
    std::fs::create_dir_all(real.join("ws")).unwrap();
    std::os::unix::fs::symlink(&real, base.join("link")).unwrap();
    assert!(
        Root::open(&base.join("link/ws")).is_err(),
        "a linked parent"
    );
    std::os::unix::fs::symlink(real.join("ws"), base.join("wslink")).unwrap();
    assert!(
        Root::open(&base.join("wslink")).is_err(),
        "a linked workspace"
    );
    let root = Root::open(&real.join("ws")).unwrap();

    let outside = base.join("outside.txt");
    std::fs::write(&outside, "shared\n").unwrap();
    std::fs::hard_link(&outside, real.join("ws/inside.txt")).unwrap();
    root.set_perms("inside.txt", 0o755).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o111;
    assert_eq!(mode(&outside), 0, "the outside name keeps its mode");
    assert_ne!(mode(&real.join("ws/inside.txt")), 0);
    assert_eq!(
        std::fs::read_to_string(real.join("ws/inside.txt")).unwrap(),
        "shared\n"
    );
}

/// Inside Git the last walk is reused too, and given up as soon as anything that
/// decides Git's listing changes, even where no directory of the workspace does: the
/// index (`git add -f` of an ignored file), the repository's exclude file, and a
/// `.gitignore` above the workspace. After each change the snapshot lists what
/// `git ls-files -co --exclude-standard` lists.
#[test]
fn inside_git_the_last_walk_is_reused_only_while_the_listing_cannot_change() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let e = env();
    let repo = &e.ws;
    let ws = repo.join("app");
    git(repo, &["init", "-q"]);
    write(repo, ".gitignore", "*.log\n");
    write(&ws, "src/a.rs", "a\n");
    write(&ws, "readme.md", "untracked\n");
    write(&ws, "forced.log", "ignored\n");
    write(&ws, "gen/out.log", "only ignored files here\n");
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-qm", "init"]);
    let listed = |ws: &Path| -> BTreeSet<String> {
        let out = git(ws, &["ls-files", "-z", "-co", "--exclude-standard"]);
        out.split(|b| *b == 0)
            .filter(|r| !r.is_empty())
            .map(|r| String::from_utf8(r.to_vec()).unwrap())
            .collect()
    };
    let snapshot = |walked: bool| {
        let s = e.store.take(&ws, &Scope::Full).unwrap();
        assert_eq!(s.walked, walked);
        let got: BTreeSet<String> = e.store.files(s.tree).unwrap().into_keys().collect();
        assert_eq!(got, listed(&ws), "walked: {walked}");
    };
    // Settled: the second scan reuses the walk.
    let settle = || {
        age(repo);
        e.store.take(&ws, &Scope::Full).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(150));
        snapshot(false);
    };
    settle();
    // Content edited in place: reused.
    write(&ws, "src/a.rs", "a2\n");
    snapshot(false);

    // The index alone: an ignored file added by force.
    git(&ws, &["add", "-f", "forced.log"]);
    snapshot(true);
    settle();
    // A directory holding only ignored files gets a new file.
    write(&ws, "gen/new.rs", "new\n");
    snapshot(true);
    settle();
    // The repository's exclude file, edited in place.
    write(repo, ".git/info/exclude", "*.rs\n");
    snapshot(true);
    settle();
    // A `.gitignore` above the workspace, edited in place.
    write(repo, ".gitignore", "*.log\n*.md\n");
    snapshot(true);
    settle();
    fsck(&e.store);
}

/// gc leaves one pack and nothing loose, and drops what only dropped snapshots held
/// wherever it lies: in the pack an earlier gc wrote too. Every kept snapshot reads back
/// whole, and `git fsck` agrees.
#[test]
fn gc_rewrites_the_store_into_one_pack_and_drops_packed_objects_too() {
    let e = env();
    let ws = &e.ws;
    for k in 0..10 {
        write(ws, &format!("d{k}/f.txt"), &format!("file {k}\n"));
    }
    // (snapshot, what its files held)
    let mut taken = Vec::new();
    let snap = |round: usize| {
        let path = format!("d{}/f.txt", round % 10);
        write(ws, &path, &format!("round {round}\n"));
        let s = e.store.take(ws, &Scope::Full).unwrap();
        (s.tree, disk_text(ws))
    };
    for round in 0..10 {
        taken.push(snap(round));
    }
    let reads_back = |taken: &[(gix::ObjectId, BTreeMap<String, String>)]| {
        for (tree, want) in taken {
            let files = e.store.files(*tree).unwrap();
            let got: BTreeMap<String, String> = files
                .iter()
                .map(|(p, f)| {
                    let text = String::from_utf8(e.store.blob(f.oid).unwrap()).unwrap();
                    (p.clone(), text)
                })
                .collect();
            assert_eq!(&got, want);
        }
    };
    let ids = |t: &[(gix::ObjectId, BTreeMap<String, String>)]| -> HashSet<String> {
        t.iter().map(|(id, _)| id.to_string()).collect()
    };
    // Everything kept: packed.
    let first = e.store.gc(&ids(&taken), false).unwrap();
    assert_eq!(first.pruned_objects, 0);
    assert_eq!((first.after.packs, first.after.loose_objects), (1, 0));
    // More snapshots (loose), then a gc that keeps only the later ones: what only the
    // early, packed snapshots held goes too.
    for round in 10..20 {
        taken.push(snap(round));
    }
    let kept = &taken[10..];
    let report = e.store.gc(&ids(kept), false).unwrap();
    assert!(report.pruned_objects >= 10, "{report:?}");
    assert_eq!((report.after.packs, report.after.loose_objects), (1, 0));
    reads_back(kept);
    fsck_if_git(&e.store);
    // Nothing more to drop.
    let again = e.store.gc(&ids(kept), false).unwrap();
    assert_eq!(again.pruned_objects, 0);
    assert_eq!(again.packed_objects, report.packed_objects);
    assert_eq!(again.after.packs, 1);
}

/// Every file under `ws` (skipping `.git`) with its text.
fn disk_text(ws: &Path) -> BTreeMap<String, String> {
    disk(ws)
        .into_keys()
        .map(|p| {
            let text = std::fs::read_to_string(ws.join(&p)).unwrap();
            (p, text)
        })
        .collect()
}

/// A snapshot that reads many files writes its new objects as packs (one per
/// `pack_bytes_max` of compressed objects), a small one loose objects; both read back
/// whole, as git reads them, and gc and `git fsck` agree.
#[test]
fn a_large_snapshot_writes_packs_and_a_small_one_loose_objects() {
    use tacho_git::snapshot::PACK_MIN_FILES;
    let e = env();
    let ws = &e.ws;
    let files = PACK_MIN_FILES + 36;
    for k in 0..files {
        // Unlike contents, so every file is an object of its own, 1 KB or so compressed.
        let text: String = (0..400)
            .map(|i| format!("{:x}", (k * 7919 + i * 31) % 4093))
            .collect();
        write(ws, &format!("d{}/f{k}.txt", k % 7), &text);
    }
    // Outside the racy window, so the next scan reads only what changes.
    age(ws);
    // A store handle whose packs hold about 16 objects.
    let store = SnapshotStore::open(e.store.root(), e.store.root().with_file_name("cache2"))
        .unwrap()
        .with_pack_bytes_max(16 * 1024);
    let first = store.take(ws, &Scope::Full).unwrap();
    let usage = store.usage().unwrap();
    assert_eq!(usage.loose_objects, 0, "{usage:?}");
    assert!(usage.packs >= 4, "{usage:?}");
    assert_eq!(first.objects_written, files as u64);
    let want = disk(ws);
    assert_eq!(want.len(), files);
    if tacho_tests::git::need_git() {
        assert_eq!(ls_tree(&store, &first.id), want);
        fsck(&store);
        // Each index is byte for byte the one git makes for its pack.
        let pack_dir = store.root().join("objects/pack");
        let mut compared = 0;
        for entry in std::fs::read_dir(&pack_dir).unwrap() {
            let pack = entry.unwrap().path();
            if pack.extension().is_none_or(|x| x != "pack") {
                continue;
            }
            let theirs = e._tmp.path().join("git.idx");
            git(
                store.root(),
                &[
                    "index-pack",
                    "-o",
                    theirs.to_str().unwrap(),
                    pack.to_str().unwrap(),
                ],
            );
            let ours = std::fs::read(pack.with_extension("idx")).unwrap();
            assert!(
                ours == std::fs::read(&theirs).unwrap(),
                "{}",
                pack.display()
            );
            std::fs::remove_file(&theirs).unwrap();
            compared += 1;
        }
        assert_eq!(compared, usage.packs);
    }
    for (path, f) in store.files(first.tree).unwrap() {
        let on_disk = std::fs::read(ws.join(&path)).unwrap();
        assert_eq!(store.blob(f.oid).unwrap(), on_disk, "{path}");
    }
    // Two edits: loose objects (two blobs and the trees above them), no new pack: the
    // choice goes by the files a snapshot reads.
    write(ws, "d1/f1.txt", "one\n");
    write(ws, "d2/f2.txt", "two\n");
    let second = store.take(ws, &Scope::Full).unwrap();
    let after = store.usage().unwrap();
    assert_eq!(after.packs, usage.packs);
    assert_eq!(after.loose_objects, 5, "{after:?}");
    assert_eq!(second.files_read, 2);
    if tacho_tests::git::need_git() {
        assert_eq!(ls_tree(&store, &second.id), disk(ws));
        fsck(&store);
    }
    // gc keeps both in one pack.
    let ids: HashSet<String> = [first.id.clone(), second.id.clone()].into();
    let report = store.gc(&ids, false).unwrap();
    assert_eq!((report.after.packs, report.after.loose_objects), (1, 0));
    for s in [&first, &second] {
        assert_eq!(store.files(s.tree).unwrap().len(), files);
    }
    fsck_if_git(&store);
}

/// A pack whose index cannot be read (an empty one, as a crash or a full disk can leave
/// it) does not stop gc: gc names it, leaves it where it is, and packs the rest. Every
/// kept snapshot reads back whole, before and after.
#[test]
fn gc_names_a_pack_it_cannot_read_and_packs_the_rest() {
    let e = env();
    let ws = &e.ws;
    let mut taken = Vec::new();
    for k in 0..5 {
        write(ws, &format!("d{k}/f.txt"), &format!("file {k}\n"));
        let s = e.store.take(ws, &Scope::Full).unwrap();
        taken.push((s.tree, disk_text(ws)));
    }
    let keep: HashSet<String> = taken.iter().map(|(id, _)| id.to_string()).collect();
    e.store.gc(&keep, false).unwrap();
    let pack_dir = e.store.root().join("objects/pack");
    let broken = pack_dir.join(format!("pack-{}.pack", "0".repeat(40)));
    std::fs::write(&broken, b"").unwrap();
    std::fs::write(broken.with_extension("idx"), b"").unwrap();
    write(ws, "d0/f.txt", "after\n");
    let s = e.store.take(ws, &Scope::Full).unwrap();
    taken.push((s.tree, disk_text(ws)));
    let keep: HashSet<String> = taken.iter().map(|(id, _)| id.to_string()).collect();
    let report = e.store.gc(&keep, false).unwrap();
    assert_eq!(report.unreadable_packs.len(), 1, "{report:?}");
    assert!(
        report.unreadable_packs[0].contains(&format!("pack-{}.idx", "0".repeat(40))),
        "{report:?}"
    );
    assert!(report.incomplete_snapshots.is_empty(), "{report:?}");
    assert!(broken.exists() && broken.with_extension("idx").exists());
    // The readable packs and the loose objects became one pack beside it.
    assert_eq!((report.after.packs, report.after.loose_objects), (2, 0));
    for (tree, want) in &taken {
        let files = e.store.files(*tree).unwrap();
        let got: BTreeMap<String, String> = files
            .iter()
            .map(|(p, f)| {
                (
                    p.clone(),
                    String::from_utf8(e.store.blob(f.oid).unwrap()).unwrap(),
                )
            })
            .collect();
        assert_eq!(&got, want);
    }
}

/// Makes the loose object `id` of `store` hold the loose object `with`'s bytes (another
/// valid object, as an agent that writes the store could swap in); returns what it
/// held.
fn swap_object(store: &SnapshotStore, id: &str, with: &str) -> Vec<u8> {
    let loose = |id: &str| store.root().join("objects").join(&id[..2]).join(&id[2..]);
    assert!(
        loose(id).exists() && loose(with).exists(),
        "{id} {with}: not loose"
    );
    let kept = std::fs::read(loose(id)).unwrap();
    std::fs::set_permissions(loose(id), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(loose(id), std::fs::read(loose(with)).unwrap()).unwrap();
    kept
}

/// gc packs what snapshots keep: a loose object swapped for another valid object of
/// the store was packed under the id of what it held, so the swap, the evidence of it
/// and the snapshot's file were silently lost (found by the head-to-head benchmark,
/// benches/peers). gc now stops, names the object, and changes nothing; a read still
/// refuses it.
#[test]
fn gc_refuses_to_pack_a_swapped_object() {
    let e = env();
    write(&e.ws, "a.txt", "original content of a\n");
    write(&e.ws, "b.txt", "content of b\n");
    let snap = e.store.take(&e.ws, &Scope::Full).unwrap();
    let files = e.store.files(snap.tree).unwrap();
    let (a, b) = (
        files["a.txt"].oid.to_string(),
        files["b.txt"].oid.to_string(),
    );
    swap_object(&e.store, &a, &b);
    let keep: HashSet<String> = [snap.id.clone()].into();
    let before = e.store.usage().unwrap();
    let err = e.store.gc(&keep, false).unwrap_err().to_string();
    assert!(
        err.contains(&a) && err.contains("gc stopped and changed nothing"),
        "{err}"
    );
    let after = e.store.usage().unwrap();
    assert_eq!(after.loose_objects, before.loose_objects);
    assert_eq!(after.packs, before.packs);
    let read = e.store.blob(files["a.txt"].oid).unwrap_err().to_string();
    assert!(read.contains("replaced or damaged"), "{read}");
}

/// Issue 46 (4): objects read from the snapshot store are checked against their ids.
/// A loose tree object swapped for another valid tree (of a later snapshot), or a
/// blob swapped for another blob, would make a rollback write other contents and exit
/// 0; reading either is refused, naming the object.
#[test]
fn a_swapped_object_of_the_store_is_refused() {
    let e = env();
    let ws = &e.ws;
    write(ws, "a.txt", "one\n");
    write(ws, "sub/b.txt", "b\n");
    let first = e.store.take(ws, &Scope::Full).unwrap();
    write(ws, "a.txt", "two\n");
    write(ws, "sub/b.txt", "B\n");
    let second = e.store.take(ws, &Scope::Full).unwrap();
    let before = e.store.files(first.tree).unwrap();
    let after = e.store.files(second.tree).unwrap();
    // The subtree `sub` of each snapshot, found by the one file it holds.
    let subtree = |snap: &tacho_git::snapshot::Snapshot| {
        let out = git(
            ws,
            &[
                "--git-dir",
                &e.store.root().display().to_string(),
                "ls-tree",
                &snap.tree.to_string(),
                "sub",
            ],
        );
        String::from_utf8_lossy(&out)
            .split_whitespace()
            .nth(2)
            .unwrap_or_default()
            .to_string()
    };
    if tacho_tests::git::need_git() {
        let (t1, t2) = (subtree(&first), subtree(&second));
        let kept = swap_object(&e.store, &t1, &t2);
        let err = e.store.files(first.tree).unwrap_err().to_string();
        assert!(
            err.contains(&t1) && err.contains("replaced or damaged"),
            "{err}"
        );
        let loose = e.store.root().join("objects").join(&t1[..2]).join(&t1[2..]);
        std::fs::write(loose, kept).unwrap();
        assert_eq!(e.store.files(first.tree).unwrap(), before);
    }
    // A blob swapped for another.
    let (b1, b2) = (
        before["a.txt"].oid.to_string(),
        after["a.txt"].oid.to_string(),
    );
    swap_object(&e.store, &b1, &b2);
    let err = e.store.blob(before["a.txt"].oid).unwrap_err().to_string();
    assert!(
        err.contains(&b1) && err.contains("replaced or damaged"),
        "{err}"
    );
}

/// The next snapshot is built on the last one's tree: a tree object swapped in the
/// store is refused there too, not carried into a new snapshot under genuine ids.
#[test]
fn a_swapped_base_tree_is_not_built_upon() {
    let e = env();
    let ws = &e.ws;
    write(ws, "a.txt", "one\n");
    write(ws, "sub/b.txt", "b\n");
    let first = e.store.take(ws, &Scope::Full).unwrap();
    write(ws, "a.txt", "two\n");
    let second = e.store.take(ws, &Scope::Full).unwrap();
    // The last snapshot's root holds the first one's content now.
    swap_object(&e.store, &second.tree.to_string(), &first.tree.to_string());
    write(ws, "sub/b.txt", "B\n");
    for scope in [Scope::Full, Scope::Paths(vec!["sub/b.txt".into()])] {
        match e.store.take(ws, &scope) {
            Err(err) => assert!(err.to_string().contains("replaced or damaged"), "{err}"),
            Ok(s) => {
                // Built from scratch instead (the cache's base unusable): what it holds
                // is the workspace, not the swapped tree's content.
                let files = e.store.files(s.tree).unwrap();
                let a = e.store.blob(files["a.txt"].oid).unwrap();
                assert_eq!(a, b"two\n", "{scope:?}");
            }
        }
    }
}
