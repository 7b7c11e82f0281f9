#![allow(clippy::unwrap_used)]

//! The workspace watcher: full scans that take the changed paths from it give the same
//! snapshots as full scans that check every file, whatever happens in the workspace.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use tacho_git::snapshot::{Scope, Snapshot, SnapshotStore};
use tacho_tests::git::git;
use tacho_tests::{settle, write_file as write};

/// A small deterministic generator (the test must fail the same way twice).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

struct Watched {
    root: PathBuf,
    ws: PathBuf,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watched {
    fn store(&self) -> SnapshotStore {
        SnapshotStore::open(self.root.join("snapshots"), self.root.join("cache")).unwrap()
    }

    fn start(&mut self) {
        let (tx, rx) = mpsc::channel();
        let (root, ws) = (self.root.clone(), self.ws.clone());
        self.thread = Some(std::thread::spawn(move || {
            let store = SnapshotStore::open(root.join("snapshots"), root.join("cache")).unwrap();
            store.watch(&ws, None, || tx.send(()).unwrap()).unwrap();
        }));
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    }

    fn stop(&mut self) {
        assert!(self.store().watch_stop(&self.ws).unwrap());
        self.thread.take().unwrap().join().unwrap();
    }

    fn take(&self) -> Snapshot {
        self.store().take(&self.ws, &Scope::Full).unwrap()
    }

    /// A full scan that checks every file: a store with a cache of its own (and so no
    /// watcher).
    fn reference(&self, _round: usize) -> Snapshot {
        let cache = self.root.join("ref-cache");
        SnapshotStore::open(self.root.join("snapshots"), cache)
            .unwrap()
            .take(&self.ws, &Scope::Full)
            .unwrap()
    }
}

/// Where the workspace sits.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    /// Not in a Git repository.
    Plain,
    /// A Git repository of its own, everything committed.
    Repo,
    /// A directory inside a Git repository, with tacho's data directory inside it.
    SubdirWithHomeInside,
}

fn workspace() -> (tempfile::TempDir, Watched) {
    workspace_with(Layout::Repo)
}

fn workspace_with(layout: Layout) -> (tempfile::TempDir, Watched) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("ws");
    let ws = match layout {
        Layout::SubdirWithHomeInside => repo.join("pkg"),
        _ => repo.clone(),
    };
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    if layout == Layout::SubdirWithHomeInside {
        write(&repo, "outside/readme.txt", "outside the workspace\n");
    }
    for i in 0..40 {
        write(
            &ws,
            &format!("src/m{}/f{i}.rs", i % 4),
            &format!("fn f{i}() {{}}\n"),
        );
    }
    // Enough other files that a scan with a few changes leaves the stat cache as it is
    // (the next one is told of them again).
    for i in 0..600 {
        write(&ws, &format!("fill/d{}/g{i}.txt", i % 6), &format!("{i}\n"));
    }
    write(&ws, ".gitignore", "build/\nout*/\n*.log\n");
    write(&ws, "build/out.bin", "ignored");
    write(&ws, "build/kept.txt", "tracked inside an ignored directory");
    if layout != Layout::Plain {
        git(&repo, &["init", "-q"]);
        git(&repo, &["add", "-A"]);
        git(&ws, &["add", "-f", "build/kept.txt"]);
        git(&repo, &["commit", "-qm", "base"]);
    }
    // Past the racy window of the index Git just wrote (which would make a scan list
    // the workspace again), as for any workspace a moment after a commit.
    settle();
    let root = match layout {
        // tacho's data directory inside the workspace: never snapshotted, never watched.
        Layout::SubdirWithHomeInside => ws.join(".tacho-home"),
        _ => tmp.path().join("home"),
    };
    let w = Watched {
        root,
        ws,
        thread: None,
    };
    (tmp, w)
}

/// The workspace's directories (outside `.git` and the ignored `out*/`).
fn dirs(ws: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![ws.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            // Ignored directories (`out*/`) are no change of the listing.
            let name = e.file_name();
            let ignored = name.to_str().is_some_and(|n| n.starts_with("out"));
            if e.file_type().unwrap().is_dir() && name != ".git" && !ignored {
                stack.push(e.path());
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// One random change to the workspace; whether it is one the watcher's answer covers
/// without a walk (files written, made, removed or renamed in directories the last
/// walk read).
fn change(ws: &Path, rng: &mut Lcg, round: usize) -> bool {
    let m = rng.next(4);
    let f = rng.next(40);
    let file = format!("src/m{}/f{f}.rs", f % 4);
    match rng.next(15) {
        0..=3 => {
            write(ws, &file, &format!("edited in round {round}\n"));
            true
        }
        4 => {
            write(ws, &format!("src/m{m}/new{round}.rs"), "new\n");
            true
        }
        5 => {
            let _ = std::fs::remove_file(ws.join(&file));
            true
        }
        6 => {
            let _ = std::fs::rename(ws.join(&file), ws.join(format!("src/m{m}/moved{round}.rs")));
            true
        }
        7 => {
            if let Ok(meta) = std::fs::metadata(ws.join(&file)) {
                let mut p = meta.permissions();
                p.set_mode(p.mode() ^ 0o111);
                std::fs::set_permissions(ws.join(&file), p).unwrap();
            }
            true
        }
        8 => {
            write(ws, &format!("src/m{m}/noise{round}.log"), "ignored\n");
            true
        }
        9 => {
            write(
                ws,
                "build/kept.txt",
                &format!("tracked, edited in round {round}\n"),
            );
            true
        }
        10 => {
            // A new directory with files in it, made in one go.
            write(ws, &format!("src/d{round}/a/b.rs"), "deep\n");
            false
        }
        11 => {
            let _ = std::fs::remove_dir_all(ws.join(format!("src/m{m}")));
            false
        }
        12 => {
            // An ignore rule that changes what is listed.
            let rules = if round.is_multiple_of(2) {
                "build/\nout*/\n"
            } else {
                "build/\nout*/\n*.log\n"
            };
            write(ws, ".gitignore", rules);
            false
        }
        13 => {
            // A build's output: an ignored directory full of files, made and grown
            // (no change of the listing, nothing for the watcher to report).
            for k in 0..30 {
                write(ws, &format!("out{}/obj/{k}.o", round % 3), "object\n");
            }
            true
        }
        _ => {
            // A directory renamed, then a file written in its new place.
            let _ = std::fs::rename(
                ws.join(format!("src/m{m}")),
                ws.join(format!("src/r{round}")),
            );
            write(ws, &format!("src/r{round}/after.rs"), "after the rename\n");
            false
        }
    }
}

/// Random rounds of changes, each followed by a watched scan and a scan that checks
/// every file: they must agree, and rounds that only touched files must be watched.
fn random_rounds(w: &Watched, seed: u64) {
    let first = w.take();
    assert!(!first.watched, "the first scan has no token to ask with");
    let mut rng = Lcg(seed);
    let (mut watched, mut file_only_rounds) = (0, 0);
    for round in 0..80 {
        let mut files_only = true;
        for _ in 0..1 + rng.next(3) {
            let before = dirs(&w.ws);
            files_only &= change(&w.ws, &mut rng, round);
            // Writing into a removed directory makes it again.
            files_only &= dirs(&w.ws) == before;
        }
        let got = w.take();
        let want = w.reference(round);
        assert_eq!(got.id, want.id, "round {round}: the watched scan differs");
        assert_eq!(got.files, want.files, "round {round}");
        assert_eq!(got.bytes, want.bytes, "round {round}");
        if got.watched {
            watched += 1;
        }
        if files_only {
            file_only_rounds += 1;
            assert!(
                got.watched,
                "round {round}: only files changed, yet it walked"
            );
        }
    }
    assert!(
        watched >= file_only_rounds && file_only_rounds > 20,
        "{watched} {file_only_rounds}"
    );
    // An unchanged workspace: asked, nothing new written (what changed since the stat
    // cache was last written may be read again).
    let again = w.take();
    assert!(again.watched && again.objects_written == 0, "{again:?}");
    let same = w.take();
    assert_eq!(same.id, again.id);
}

#[test]
fn outside_git_watched_scans_equal_full_scans() {
    let (_tmp, mut w) = workspace_with(Layout::Plain);
    w.start();
    random_rounds(&w, 0x5eed);
    w.stop();
}

#[test]
fn a_subdirectory_of_a_repository_with_tacho_inside_it() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let (_tmp, mut w) = workspace_with(Layout::SubdirWithHomeInside);
    w.start();
    random_rounds(&w, 0xd1ce);
    // tacho's own writes inside the workspace (its log, caches, objects) are not
    // changes of the workspace.
    let status = w.store().watch_status(&w.ws).unwrap().unwrap();
    assert!(status.dirs > 6 && status.held < 400, "{status:?}");
    w.stop();
}

#[test]
fn watched_scans_equal_full_scans_through_random_changes() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let (_tmp, mut w) = workspace();
    w.start();
    random_rounds(&w, 0x7ac0);

    // Git's own changes that decide the listing (the index) make it walk, and agree.
    write(&w.ws, "build/forced.txt", "force-added");
    git(&w.ws, &["add", "-f", "build/forced.txt"]);
    settle();
    let got = w.take();
    assert_eq!(got.id, w.reference(1000).id);
    assert!(got.walked && !got.watched);
    write(&w.ws, "build/forced.txt", "edited after being force-added");
    let got = w.take();
    assert_eq!(got.id, w.reference(1001).id);
    assert!(
        got.watched,
        "the force-added file's directory is watched after the relist"
    );

    // Without the watcher, scans check every file again.
    w.stop();
    write(&w.ws, "src/after-stop.rs", "x");
    let got = w.take();
    assert!(!got.watched);
    assert_eq!(got.id, w.reference(1002).id);

    // A restarted watcher's tokens are new: the first scan walks, the next is watched.
    w.start();
    write(&w.ws, "src/after-restart.rs", "y");
    let got = w.take();
    assert!(!got.watched);
    assert_eq!(got.id, w.reference(1003).id);
    write(&w.ws, "src/after-restart.rs", "z");
    let got = w.take();
    assert!(got.watched);
    assert_eq!(got.id, w.reference(1004).id);
    w.stop();
}

#[test]
fn one_watcher_per_workspace_and_a_dead_ones_socket_is_harmless() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let (_tmp, mut w) = workspace();
    w.start();
    let status = w.store().watch_status(&w.ws).unwrap().unwrap();
    assert_eq!(status.pid, std::process::id());
    assert!(status.dirs >= 6, "{status:?}");
    // A second watcher of the same workspace is refused.
    let err = w.store().watch(&w.ws, None, || {}).unwrap_err();
    assert!(err.to_string().contains("already running"), "{err}");
    w.stop();
    assert!(w.store().watch_status(&w.ws).unwrap().is_none());
    // A socket file nobody listens on (a watcher that was killed): scans go on without.
    let sock = tacho_git::snapshot::watch::socket_path(&w.root.join("cache"), &w.ws);
    std::os::unix::net::UnixListener::bind(&sock).unwrap();
    write(&w.ws, "src/x.rs", "x");
    let got = w.take();
    assert!(!got.watched);
    assert_eq!(got.id, w.reference(0).id);
    // A new watcher replaces the stale socket.
    w.start();
    assert!(w.store().watch_status(&w.ws).unwrap().is_some());
    w.stop();
}
