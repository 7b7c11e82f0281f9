//! Times the phases of an incremental snapshot (for profiling; run with
//! `TACHO_SNAPSHOT_TRACE=1 cargo run --release -p tacho-benches --example snapshot_profile`).

#![allow(clippy::unwrap_used)]

use std::time::Instant;

use tacho_benches::{edit_files, generate_workspace};
use tacho_git::snapshot::{Scope, SnapshotStore};

fn main() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let paths = generate_workspace(&ws, 10_000, 200 * 1024 * 1024).unwrap();
    let ws = ws.canonicalize().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let store = SnapshotStore::open(tmp.path().join("s"), tmp.path().join("c")).unwrap();
    let t = Instant::now();
    store.take(&ws, &Scope::Full).unwrap();
    println!("first: {:?}", t.elapsed());
    let ten: Vec<String> = paths.iter().step_by(1000).take(10).cloned().collect();
    for round in 0..5 {
        edit_files(&ws, &ten, round).unwrap();
        let t = Instant::now();
        store.take(&ws, &Scope::Full).unwrap();
        println!("full after 10 edits: {:?}", t.elapsed());
        edit_files(&ws, &ten, round + 100).unwrap();
        let t = Instant::now();
        store.take(&ws, &Scope::Paths(ten.clone())).unwrap();
        println!("targeted: {:?}", t.elapsed());
    }
}
