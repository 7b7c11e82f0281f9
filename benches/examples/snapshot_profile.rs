//! Times the phases of an incremental snapshot (for profiling; run with
//! `TACHO_SNAPSHOT_TRACE=1 cargo run --release -p tacho-benches --example snapshot_profile`;
//! with the argument `git` the workspace is a Git repository with everything committed,
//! with `watch` a watcher of it runs (`tacho watch`),
//! `FILES` sets its size, `KB` the average file and `ROUNDS` the rounds of edits).

#![allow(clippy::unwrap_used)]

use std::time::Instant;

use tacho_benches::{edit_files, generate_workspace};
use tacho_git::snapshot::{Scope, SnapshotStore};

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let files: usize = std::env::var("FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let kb: u64 = std::env::var("KB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let paths = generate_workspace(&ws, files, files as u64 * kb * 1024).unwrap();
    let ws = ws.canonicalize().unwrap();
    if std::env::args().any(|a| a == "git") {
        for args in [
            &["init", "-q"][..],
            &["add", "-A"],
            &["commit", "-qm", "base"],
        ] {
            tacho_benches::git_in(&ws, args);
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    if std::env::args().any(|a| a == "watch") {
        // A watcher of the workspace, as `tacho watch start` runs one.
        let (tx, rx) = std::sync::mpsc::channel();
        let (root, w) = (tmp.path().to_path_buf(), ws.clone());
        std::thread::spawn(move || {
            let store = SnapshotStore::open(root.join("s"), root.join("c")).unwrap();
            store.watch(&w, None, || tx.send(()).unwrap()).unwrap();
        });
        rx.recv().unwrap();
    }
    let store = SnapshotStore::open(tmp.path().join("s"), tmp.path().join("c")).unwrap();
    let t = Instant::now();
    store.take(&ws, &Scope::Full).unwrap();
    println!("first: {:?}", t.elapsed());
    std::thread::sleep(std::time::Duration::from_millis(200));
    let t = Instant::now();
    store.take(&ws, &Scope::Full).unwrap();
    println!("second: {:?}", t.elapsed());
    let t = Instant::now();
    store.take(&ws, &Scope::Full).unwrap();
    println!("unchanged: {:?}", t.elapsed());
    let ten: Vec<String> = paths
        .iter()
        .step_by((files / 10).max(1))
        .take(10)
        .cloned()
        .collect();
    drop(store);
    // A store handle per snapshot, as each hook process opens one.
    let take = |scope: &Scope| {
        SnapshotStore::open(tmp.path().join("s"), tmp.path().join("c"))
            .unwrap()
            .take(&ws, scope)
            .unwrap();
    };
    let rounds: u64 = std::env::var("ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    for round in 0..rounds {
        edit_files(&ws, &ten, round).unwrap();
        let t = Instant::now();
        take(&Scope::Full);
        println!("full after 10 edits: {:?}", t.elapsed());
        edit_files(&ws, &ten, round + 100).unwrap();
        let t = Instant::now();
        take(&Scope::Paths(ten.clone()));
        println!("targeted: {:?}", t.elapsed());
    }
}
