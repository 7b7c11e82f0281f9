//! How the snapshot store grows: 1,000 incremental snapshots of a generated workspace,
//! each after an agent-like edit of 10 files, then `gc` (which packs), with the store's
//! size at each stage, beside what a shadow Git repository (`git add -A` +
//! `write-tree` into a separate git directory, then `git gc`) takes for the same edits.
//!
//! `cargo run --release -p tacho-benches --example snapshot_growth [-- FILES MB ROUNDS]`
//! (defaults: 10,000 files, 200 MB, 1,000 rounds).

#![allow(clippy::unwrap_used)] // a measurement that cannot set up should panic

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use tacho_benches::{edit_files, generate_workspace, shadow_git};
use tacho_git::snapshot::{Scope, SnapshotStore};

fn du(path: &Path) -> u64 {
    let out = Command::new("du").arg("-sb").arg(path).output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// What a shadow repository does per snapshot: stage everything, write the tree, and
/// keep it with a ref (as tacho does), so `git gc` keeps it too.
fn git_snapshot(git_dir: &Path, work: &Path) {
    let tree = shadow_git::snapshot(git_dir, work).unwrap();
    shadow_git::run(
        git_dir,
        work,
        &["update-ref", &format!("refs/snapshots/{tree}"), &tree],
    )
    .unwrap();
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let files = *args.first().unwrap_or(&10_000) as usize;
    let mb = *args.get(1).unwrap_or(&200);
    let rounds = *args.get(2).unwrap_or(&1_000);
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let paths = generate_workspace(&ws, files, mb * 1024 * 1024).unwrap();
    let ws = ws.canonicalize().unwrap();
    println!("workspace: {files} files, {} bytes", du(&ws));
    let store =
        SnapshotStore::open(tmp.path().join("snapshots"), tmp.path().join("cache")).unwrap();
    let git_dir = tmp.path().join("shadow.git");
    let with_git = Command::new("git").arg("--version").output().is_ok();
    if with_git {
        shadow_git::init(&git_dir).unwrap();
    }
    let t = Instant::now();
    let first = store.take(&ws, &Scope::Full).unwrap();
    println!(
        "first snapshot: {:.2} s, store {} bytes",
        t.elapsed().as_secs_f64(),
        du(store.root())
    );
    if with_git {
        git_snapshot(&git_dir, &ws);
    }
    let mut ids = HashSet::from([first.id]);
    let step = (paths.len() / 10).max(1);
    let t = Instant::now();
    for round in 0..rounds {
        let ten: Vec<String> = paths
            .iter()
            .skip(round as usize % step)
            .step_by(step)
            .take(10)
            .cloned()
            .collect();
        edit_files(&ws, &ten, round).unwrap();
        let s = store.take(&ws, &Scope::Full).unwrap();
        ids.insert(s.id);
        if with_git {
            git_snapshot(&git_dir, &ws);
        }
    }
    let elapsed = t.elapsed().as_secs_f64();
    let u = store.usage().unwrap();
    println!(
        "after {rounds} incremental snapshots ({:.1} ms per round, tacho and git together): {} snapshots, {} loose objects, store {} bytes ({} allocated on disk)",
        elapsed * 1000.0 / rounds as f64,
        u.snapshots,
        u.loose_objects,
        du(store.root()),
        u.disk_bytes()
    );
    if with_git {
        println!(
            "shadow git directory (loose): {} bytes (du -sb, as above)",
            du(&git_dir)
        );
    }
    let r = store.gc(&ids, false).unwrap();
    println!(
        "after tacho gc: {} packed, store {} bytes ({} allocated; {} loose objects left)",
        r.packed_objects,
        du(store.root()),
        r.after.disk_bytes(),
        r.after.loose_objects
    );
    if with_git {
        shadow_git::run(&git_dir, &ws, &["gc", "-q", "--prune=now"]).unwrap();
        println!("shadow git directory after git gc: {} bytes", du(&git_dir));
    }
}
