#![allow(clippy::unwrap_used)]

//! Snapshots the workspace's watcher takes itself (SPEC.md §10.6): complete after gc
//! rewrote the packs its long-lived store handle had open, and a watcher that does not
//! take snapshots (one an earlier tacho started) is still asked what changed.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;

use tacho_git::snapshot::{Scope, Snapshot, SnapshotStore, watch};
use tacho_tests::git::git;
use tacho_tests::{settle, write_file as write};

struct Setup {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    root: PathBuf,
}

impl Setup {
    /// A committed repository of 100 files (a first snapshot of it writes a pack).
    fn new() -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        for i in 0..100 {
            write(
                &ws,
                &format!("src/m{}/f{i}.rs", i % 5),
                &format!("fn f{i}() {{}}\n"),
            );
        }
        let ws = ws.canonicalize().unwrap();
        git(&ws, &["init", "-q"]);
        git(&ws, &["add", "-A"]);
        git(&ws, &["commit", "-qm", "base"]);
        settle();
        Setup {
            root: tmp.path().join("home"),
            ws,
            _tmp: tmp,
        }
    }

    fn store(&self) -> SnapshotStore {
        SnapshotStore::open(self.root.join("snapshots"), self.root.join("cache")).unwrap()
    }

    fn take(&self) -> Snapshot {
        let store = self.store();
        let _guard = store.write_guard().unwrap();
        store.take(&self.ws, &Scope::Full).unwrap()
    }

    /// A watcher of the workspace on a thread of its own, once it answers.
    fn start_watcher(&self) -> std::thread::JoinHandle<()> {
        let (tx, rx) = mpsc::channel();
        let (root, ws) = (self.root.clone(), self.ws.clone());
        let watcher = std::thread::spawn(move || {
            let store = SnapshotStore::open(root.join("snapshots"), root.join("cache")).unwrap();
            store.watch(&ws, None, || tx.send(()).unwrap()).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        watcher
    }

    /// Every object the snapshot store's refs reach is there (`git fsck`).
    fn assert_complete(&self) {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(self.root.join("snapshots"))
            .args(["fsck", "--connectivity-only", "--no-dangling"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the snapshot store misses objects:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn snapshots_a_watcher_takes_after_gc_name_only_objects_the_store_holds() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let s = Setup::new();
    let first = s.take(); // a full scan, written as a pack
    assert!(!first.watched);

    let watcher = s.start_watcher();
    // Takes the watcher's token; from here on the watcher takes the snapshots.
    s.take();
    let same = s.take();
    assert!(same.watched, "{same:?}");
    assert_eq!(same.id, first.id);

    // The file changes: the watcher's store handle now knows the first pack. (Whether
    // this snapshot read it or the watcher did as it was written depends on timing.)
    write(&s.ws, "src/m0/f0.rs", "fn changed() {}\n");
    let changed = s.take();
    assert!(changed.watched && changed.id != first.id, "{changed:?}");

    // gc keeps only the changed snapshot: the first snapshot's blob of f0 goes with
    // the pack that held it.
    let report = s
        .store()
        .gc(&HashSet::from([changed.id.clone()]), false)
        .unwrap();
    assert!(report.pruned_objects >= 1, "{report:?}");

    // Back to the first content: its blob must be written again, not taken as present
    // in the pack that gc removed.
    write(&s.ws, "src/m0/f0.rs", "fn f0() {}\n");
    let back = s.take();
    assert!(back.watched, "{back:?}");
    assert_eq!(back.id, first.id);
    s.assert_complete();

    assert!(s.store().watch_stop(&s.ws).unwrap());
    watcher.join().unwrap();
}

#[test]
fn a_watcher_that_takes_no_snapshots_is_asked_what_changed() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let s = Setup::new();
    let first = s.take();
    // A watcher as an earlier tacho ran it: it knows "since" and nothing else.
    let socket = watch::socket_path(&s.root.join("cache"), &s.ws);
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let listener = UnixListener::bind(&socket).unwrap();
    // It names what it watches, as every watcher's answer does.
    let (ws, cache) = (s.ws.clone(), s.root.join("cache").canonicalize().unwrap());
    let server = std::thread::spawn(move || {
        let mut ops = Vec::new();
        for _ in 0..2 {
            let (stream, _) = listener.accept().unwrap();
            let mut line = String::new();
            BufReader::new(&stream).read_line(&mut line).unwrap();
            let req: serde_json::Value = serde_json::from_str(&line).unwrap();
            let op = req["op"].as_str().unwrap().to_owned();
            let reply = if op == "since" {
                serde_json::json!({"token": {"instance": 7, "generation": 2}, "paths": null,
                    "workspace": ws, "cache_dir": cache})
            } else {
                serde_json::json!({"error": format!("unknown variant `{op}`")})
            };
            (&stream)
                .write_all(format!("{reply}\n").as_bytes())
                .unwrap();
            ops.push(op);
        }
        ops
    });
    write(&s.ws, "src/m1/f1.rs", "fn other() {}\n");
    let snap = s.take();
    assert_eq!(server.join().unwrap(), ["snapshot", "since"]);
    // "Unknown": a full scan, which sees the change.
    assert!(!snap.watched, "{snap:?}");
    assert_ne!(snap.id, first.id);
    assert_eq!(snap.files_read, 1, "{snap:?}");
}

/// A file the watcher hashed as soon as it was written, then written again (same size)
/// before the snapshot: the snapshot holds what the file holds now, as a full scan
/// that checks every file sees it.
#[test]
fn a_file_written_again_after_the_watcher_hashed_it_is_read_again() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let s = Setup::new();
    s.take();
    let watcher = s.start_watcher();
    s.take();
    let reference = |round: usize| {
        SnapshotStore::open(
            s.root.join("snapshots"),
            s.root.join(format!("ref-{round}")),
        )
        .unwrap()
        .take(&s.ws, &Scope::Full)
        .unwrap()
    };
    for round in 0..12 {
        let path = format!("src/m{}/f{}.rs", round % 5, round * 7 % 100);
        write(&s.ws, &path, &format!("fn first_{round:04}() {{}}\n"));
        // Long enough for the watcher to hash it.
        std::thread::sleep(std::time::Duration::from_millis(if round % 2 == 0 {
            60
        } else {
            5
        }));
        write(&s.ws, &path, &format!("fn again_{round:04}() {{}}\n"));
        let snap = s.take();
        assert!(snap.watched, "{snap:?}");
        assert_eq!(snap.id, reference(round).id, "round {round}");
    }
    s.assert_complete();
    assert!(s.store().watch_stop(&s.ws).unwrap());
    watcher.join().unwrap();
}

/// Issue 42 (3): tacho's own watcher of another workspace, its socket moved into this
/// workspace's place, passes every check of the process behind it (it is this very
/// program): it is told apart by what it says it watches, not believed, and recorded.
#[test]
fn a_watcher_of_another_workspace_on_this_ones_socket_is_not_believed() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let s = Setup::new();
    let first = s.take();
    let other = s.ws.parent().unwrap().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let other = other.canonicalize().unwrap();
    for i in 0..100 {
        write(
            &other,
            &format!("src/m{}/f{i}.rs", i % 5),
            &format!("fn f{i}() {{}}\n"),
        );
    }
    let (tx, rx) = mpsc::channel();
    let (root, o) = (s.root.clone(), other.clone());
    let _watcher = std::thread::spawn(move || {
        let store = SnapshotStore::open(root.join("snapshots"), root.join("cache")).unwrap();
        store.watch(&o, None, || tx.send(()).unwrap()).unwrap();
    });
    rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    let cache = s.root.join("cache");
    std::fs::rename(
        watch::socket_path(&cache, &other),
        watch::socket_path(&cache, &s.ws),
    )
    .unwrap();
    let _ = watch::take_impostors();
    write(&s.ws, "src/m1/f1.rs", "fn changed() {}\n");
    let snap = s.take();
    assert!(!snap.watched, "{snap:?}");
    assert_ne!(snap.id, first.id, "the change is in the snapshot");
    let said = watch::take_impostors();
    assert!(
        said.iter()
            .any(|w| w.contains("watches") && w.contains("other")),
        "{said:?}"
    );
    let _ = watch::stop(&cache, &s.ws);
}

/// Issue 42 (3), red team F: a file of the workspace written through a hard link from
/// outside it raises no event where the watcher looks, so the watcher's snapshot keeps
/// the old content. The check at a turn's end reads the workspace itself: its snapshot
/// holds the new content, and the path is named as missed. A change made while the
/// check runs is not.
#[test]
fn a_write_through_a_hard_link_from_outside_is_caught_by_the_checked_snapshot() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let s = Setup::new();
    let _first = s.take();
    let _watcher = s.start_watcher();
    s.take();
    let served = s.take();
    assert!(served.watched, "{served:?}");
    let outside = s.ws.parent().unwrap().join("outside.rs");
    std::fs::hard_link(s.ws.join("src/m2/f2.rs"), &outside).unwrap();
    std::fs::write(&outside, "fn through_the_link() {}\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let store = s.store();
    let again = {
        let _guard = store.write_guard().unwrap();
        store.take(&s.ws, &Scope::Full).unwrap()
    };
    assert!(again.watched, "{again:?}");
    assert_eq!(again.id, served.id, "the watcher never learnt of the write");
    let checked = store.take_checked(&s.ws).unwrap();
    assert_eq!(checked.served.as_deref(), Some(served.id.as_str()));
    assert_eq!(checked.missed, ["src/m2/f2.rs"]);
    assert_ne!(checked.snapshot.id, served.id);
    let files = store.files(checked.snapshot.tree).unwrap();
    let now = Command::new("git")
        .arg("hash-object")
        .arg(s.ws.join("src/m2/f2.rs"))
        .output()
        .unwrap();
    assert_eq!(
        files["src/m2/f2.rs"].oid.to_string(),
        String::from_utf8_lossy(&now.stdout).trim(),
        "the checked snapshot holds what the file holds now"
    );
    // Nothing missed when the watcher saw everything.
    write(&s.ws, "src/m3/f3.rs", "fn seen() {}\n");
    settle();
    let checked = store.take_checked(&s.ws).unwrap();
    assert!(checked.served.is_some());
    assert!(checked.missed.is_empty(), "{:?}", checked.missed);
    // The check leaves the watcher's token in place: the next snapshot is its again.
    write(&s.ws, "src/m4/f4.rs", "fn later() {}\n");
    let after = s.take();
    assert!(after.watched, "{after:?}");
    assert_ne!(after.id, checked.snapshot.id, "{after:?}");
    let _ = watch::stop(&s.root.join("cache"), &s.ws);
}

/// Red team: a file written through a shared writable mapping, twice — once to have
/// its new times read by a scan, then again through the still-dirty page, which the
/// kernel does not stamp until the page is written back (about 30 s) and which raises
/// no inotify event. The check at a turn's end reads again every file changed within
/// that window: its snapshot holds what the file holds now.
#[test]
fn a_write_through_a_shared_mapping_is_read_by_the_checked_snapshot() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let python = Command::new("python3").arg("-c").arg("pass").status();
    if !python.is_ok_and(|s| s.success()) {
        tacho_tests::skip_without("python3");
        return;
    }
    let s = Setup::new();
    let _first = s.take();
    let _watcher = s.start_watcher();
    s.take();
    let path = s.ws.join("src/m3/f3.rs");
    let script = "import mmap,sys,os\nf=open(sys.argv[1],'r+b')\nm=mmap.mmap(f.fileno(),0)\nm[0:1]=m[0:1]\nprint('dirty',flush=True)\nsys.stdin.readline()\nm[0:6]=b'PWNED!'\nprint('again',flush=True)\nsys.stdin.readline()\n";
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "dirty");
    std::thread::sleep(std::time::Duration::from_millis(200));
    // A scan records the file's new times (and its unchanged content).
    let store = s.store();
    let before = store.take_checked(&s.ws).unwrap();
    writeln!(stdin).unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "again");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let checked = store.take_checked(&s.ws).unwrap();
    writeln!(stdin).unwrap();
    let _ = child.wait();
    let files = store.files(checked.snapshot.tree).unwrap();
    let now = Command::new("git")
        .arg("hash-object")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        files["src/m3/f3.rs"].oid.to_string(),
        String::from_utf8_lossy(&now.stdout).trim(),
        "the checked snapshot holds what the mapping wrote"
    );
    assert_ne!(checked.snapshot.id, before.snapshot.id);
    let _ = watch::stop(&s.root.join("cache"), &s.ws);
}

/// The packs in the store's pack directory.
fn pack_count(root: &std::path::Path) -> usize {
    std::fs::read_dir(root.join("snapshots/objects/pack"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "pack")
        })
        .count()
}

#[test]
fn a_watchers_small_packs_are_merged_and_every_snapshot_still_reads_back() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let s = Setup::new();
    s.take(); // a full scan, written as a pack
    // A small pack a crash tore (they are not synced): an empty index and pack. It
    // loses only what it held; snapshots and merges go on around it.
    let torn = s
        .root
        .join("snapshots/objects/pack/pack-0000000000000000000000000000000000000000");
    std::fs::write(torn.with_extension("pack"), b"").unwrap();
    std::fs::write(torn.with_extension("idx"), b"").unwrap();
    let watcher = s.start_watcher();
    s.take(); // takes the watcher's token
    // Each step changes five files in five directories: five blobs and six trees, a
    // small pack of the watcher's (or two, when it hashed some ahead).
    let mut taken = Vec::new();
    let mut most = 0;
    for step in 0..24 {
        let mut contents = Vec::new();
        for m in 0..5 {
            let rel = format!("src/m{m}/f{m}.rs");
            let text = format!("fn step_{step}_{m}() {{}}\n");
            write(&s.ws, &rel, &text);
            contents.push((rel, text));
        }
        let snap = s.take();
        assert!(snap.watched, "step {step}: {snap:?}");
        taken.push((snap, contents));
        // Never idle here: merged all the same once 16 gathered (a store handle has
        // room for 32 packs; beyond, the watcher would miss its own objects).
        let packs = pack_count(&s.root);
        assert!(packs <= 18, "step {step}: {packs} packs");
        most = most.max(packs);
    }
    assert!(
        most >= 4,
        "the watcher wrote no small packs ({most} packs at most)"
    );
    // 24 steps wrote at least 24 small packs; once the watcher is idle, 8 or more
    // left are merged too (awaited: the watcher does it on its own time). Fewer stay
    // until more gather: at most 7 small ones, beside the torn pack.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while pack_count(&s.root) > 8 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} packs: the small packs were not merged",
            pack_count(&s.root)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Every snapshot reads back, through tacho and through git.
    let store = s.store();
    for (snap, contents) in &taken {
        let files = store.files(snap.tree).unwrap();
        for (rel, text) in contents {
            let entry = files.get(rel).unwrap_or_else(|| panic!("{rel} missing"));
            assert_eq!(store.blob(entry.oid).unwrap(), text.as_bytes(), "{rel}");
        }
    }
    assert!(
        torn.with_extension("idx").exists(),
        "the torn pack is gc's to report"
    );
    std::fs::remove_file(torn.with_extension("idx")).unwrap();
    std::fs::remove_file(torn.with_extension("pack")).unwrap();
    s.assert_complete();
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(s.root.join("snapshots"))
        .args(["fsck", "--strict", "--no-dangling"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(s.store().watch_stop(&s.ws).unwrap());
    watcher.join().unwrap();
}
