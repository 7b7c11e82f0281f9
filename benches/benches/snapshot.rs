//! Snapshots and restores against what users run today: the `git` program with a
//! separate git directory (`git --git-dir=S --work-tree=W add -A` then `write-tree`;
//! restore with `read-tree` then `checkout-index -a -f`), in the same run, on the same
//! generated workspace.
//!
//! `cargo bench -p tacho-benches --bench snapshot` uses 10,000 files / 200 MB; under
//! `cargo test` each case runs once on 300 files. `TACHO_BENCH_SNAPSHOT_FILES` and
//! `TACHO_BENCH_SNAPSHOT_MB` set the size. Skipped when `git` is not installed.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tacho_benches::{edit_files, generate_workspace, shadow_git};
use tacho_git::rollback::{self, PlanInput};
use tacho_git::snapshot::{Scope, SnapshotStore};

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn size() -> (usize, u64) {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let (files, mb) = if bench_mode() {
        (10_000, 200)
    } else {
        (300, 3)
    };
    (
        env("TACHO_BENCH_SNAPSHOT_FILES").map_or(files, |v| v as usize),
        env("TACHO_BENCH_SNAPSHOT_MB").unwrap_or(mb),
    )
}

fn git(git_dir: &Path, work: &Path, args: &[&str]) -> String {
    shadow_git::run(git_dir, work, args).unwrap()
}

fn git_init(git_dir: &Path) {
    shadow_git::init(git_dir).unwrap()
}

fn git_snapshot(git_dir: &Path, work: &Path) -> String {
    shadow_git::snapshot(git_dir, work).unwrap()
}

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    paths: Vec<String>,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let ws = root.join("ws");
    let (files, mb) = size();
    let paths = generate_workspace(&ws, files, mb * 1024 * 1024).unwrap();
    // Let the racy window pass, as it has for any workspace a while after a checkout.
    std::thread::sleep(Duration::from_millis(200));
    Fixture {
        _tmp: tmp,
        root,
        ws: ws.canonicalize().unwrap(),
        paths,
    }
}

fn fresh_dir(root: &Path, name: &str) -> PathBuf {
    let d = root.join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn benches(c: &mut Criterion) {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("git is not installed: the snapshot benchmarks compare against it; skipped");
        return;
    }
    let f = fixture();
    let (files, mb) = size();
    let label = format!("{files} files, {mb} MB");

    // 1. The first snapshot of a workspace: an empty store, no cache.
    {
        let mut g = c.benchmark_group(format!("snapshot_first ({label})"));
        g.sample_size(10)
            .measurement_time(Duration::from_secs(if bench_mode() { 60 } else { 1 }));
        let mut n = 0u64;
        g.bench_function("tacho (gix, all cores)", |b| {
            b.iter_batched(
                || {
                    n += 1;
                    let s = fresh_dir(&f.root, "first-store");
                    let cache = fresh_dir(&f.root, "first-cache");
                    SnapshotStore::open(s, cache).unwrap()
                },
                |store| store.take(&f.ws, &Scope::Full).unwrap(),
                BatchSize::PerIteration,
            )
        });
        g.bench_function("git add -A + write-tree", |b| {
            b.iter_batched(
                || {
                    let d = fresh_dir(&f.root, "first-git");
                    git_init(&d);
                    d
                },
                |d| git_snapshot(&d, &f.ws),
                BatchSize::PerIteration,
            )
        });
        g.finish();
    }

    // Warm stores for the incremental cases.
    let store = SnapshotStore::open(f.root.join("store"), f.root.join("cache")).unwrap();
    store.take(&f.ws, &Scope::Full).unwrap();
    let git_dir = f.root.join("git");
    git_init(&git_dir);
    git_snapshot(&git_dir, &f.ws);
    let step = (f.paths.len() / 10).max(1);
    let ten: Vec<String> = f.paths.iter().step_by(step).take(10).cloned().collect();
    let mut round = 0u64;

    // 2. A full-scan snapshot after an agent edited 10 files.
    {
        let mut g = c.benchmark_group(format!("snapshot_after_10_edits ({label})"));
        g.sample_size(20);
        g.bench_function("tacho full scan (stat cache)", |b| {
            b.iter_batched(
                || {
                    round += 1;
                    edit_files(&f.ws, &ten, round).unwrap();
                },
                |()| store.take(&f.ws, &Scope::Full).unwrap(),
                BatchSize::PerIteration,
            )
        });
        g.bench_function("tacho targeted (the 10 reported paths)", |b| {
            b.iter_batched(
                || {
                    round += 1;
                    edit_files(&f.ws, &ten, round).unwrap();
                },
                |()| store.take(&f.ws, &Scope::Paths(ten.clone())).unwrap(),
                BatchSize::PerIteration,
            )
        });
        g.bench_function("git add -A + write-tree", |b| {
            b.iter_batched(
                || {
                    round += 1;
                    edit_files(&f.ws, &ten, round).unwrap();
                },
                |()| git_snapshot(&git_dir, &f.ws),
                BatchSize::PerIteration,
            )
        });
        g.finish();
    }

    // 3. Restoring 100 changed files. tacho does what `session rollback` does: a
    // snapshot of the workspace first, one plan, then only the changed files; git
    // reads the tree into its index and checks every file out.
    {
        let hundred: Vec<String> = f
            .paths
            .iter()
            .step_by((f.paths.len() / 100).max(1))
            .take(100)
            .cloned()
            .collect();
        let base = store.take(&f.ws, &Scope::Full).unwrap();
        let base_files = store.files(base.tree).unwrap();
        let git_base = git_snapshot(&git_dir, &f.ws);
        let mut g = c.benchmark_group(format!("restore_100_changed ({label})"));
        g.sample_size(10);
        g.bench_function("tacho rollback (snapshot + plan + apply)", |b| {
            b.iter_batched(
                || {
                    round += 1;
                    edit_files(&f.ws, &hundred, round).unwrap();
                    let after = store.take(&f.ws, &Scope::Full).unwrap();
                    store.files(after.tree).unwrap()
                },
                |after| {
                    let now = store.take(&f.ws, &Scope::Full).unwrap();
                    let current = store.files(now.tree).unwrap();
                    let none = BTreeSet::new();
                    let plan = rollback::plan(&PlanInput {
                        target: &base_files,
                        later: vec![&after],
                        edited: &none,
                        edited_after_last: &none,
                        current: &current,
                        unprotected: &BTreeMap::new(),
                        force: false,
                        only: None,
                        within: &[],
                        unclaimed: &Default::default(),
                    });
                    assert_eq!(plan.items.len(), hundred.len());
                    let applied = rollback::apply(&store, &f.ws, &plan).unwrap();
                    assert!(applied.failed.is_empty());
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function("git read-tree + checkout-index -a -f", |b| {
            b.iter_batched(
                || {
                    round += 1;
                    edit_files(&f.ws, &hundred, round).unwrap();
                },
                |()| {
                    git(&git_dir, &f.ws, &["read-tree", &git_base]);
                    git(&git_dir, &f.ws, &["checkout-index", "-a", "-f"]);
                },
                BatchSize::PerIteration,
            )
        });
        g.finish();
    }
}

/// The same cases with the workspace inside its own Git repository (everything
/// committed), where most users are: tacho's full scan, unchanged and after 10 edits
/// (without and with a watcher of the workspace running), and the targeted snapshot,
/// in-process and — with the release binary built — as whole `tacho snapshot`
/// processes, as a hook runs them, against `git add -A && git write-tree` in that
/// repository with a private index (two processes). At git/git's shape (4,856 files, 40 MB) under `--bench`;
/// `TACHO_BENCH_GIT_FILES` and `TACHO_BENCH_GIT_MB` set the size (100,000 files is
/// the other case).
fn inside_git(c: &mut Criterion) {
    if Command::new("git").arg("--version").output().is_err() {
        return;
    }
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    let (files, mb) = if bench_mode() { (4_856, 40) } else { (300, 3) };
    let files = env("TACHO_BENCH_GIT_FILES").map_or(files, |v| v as usize);
    let mb = env("TACHO_BENCH_GIT_MB").unwrap_or(mb);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let ws = root.join("repo");
    let paths = generate_workspace(&ws, files, mb * 1024 * 1024).unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &["commit", "-qm", "base"],
    ] {
        tacho_benches::git_in(&ws, args);
    }
    std::thread::sleep(Duration::from_millis(200));
    let label = format!("{files} files, {mb} MB, inside Git");
    // A store handle per snapshot, as each hook process opens one.
    // `TACHO_BENCH_PACK_MIN_FILES=0` makes every snapshot write a pack (SPEC.md §10.5
    // compares that with loose objects).
    let pack_min_files = env("TACHO_BENCH_PACK_MIN_FILES")
        .map_or(tacho_git::snapshot::PACK_MIN_FILES, |v| v as usize);
    let take_in = |cache: &str, scope: &Scope| {
        SnapshotStore::open(root.join("store"), root.join(cache))
            .unwrap()
            .with_pack_min_files(pack_min_files)
            .take(&ws, scope)
            .unwrap()
    };
    let take = |scope: &Scope| take_in("cache", scope);
    // A watcher of the workspace (what `tacho watch start` runs) serves the scans whose
    // stat cache is `wcache` (a watcher belongs to one cache directory); `cache` has
    // none.
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (root, ws) = (root.clone(), ws.clone());
        std::thread::spawn(move || {
            let store = SnapshotStore::open(root.join("store"), root.join("wcache")).unwrap();
            store.watch(&ws, None, || tx.send(()).unwrap()).unwrap();
        });
    }
    rx.recv().unwrap();
    let watched = || take_in("wcache", &Scope::Full);
    take(&Scope::Full);
    watched();
    let index = root.join("private-index");
    shadow_git::snapshot_in_repo(&ws, &index).unwrap();
    // Whole `tacho snapshot` processes (what a hook pays), with a store of their own,
    // when the release binary is there: `git` is measured as processes too.
    let bin = tacho_benches::scale::tacho_bin();
    let process = |paths: &[String]| {
        if let Some(bin) = &bin {
            let status = Command::new(bin)
                .arg("snapshot")
                .args(paths)
                .current_dir(&ws)
                .env("TACHO_HOME", root.join("process-home"))
                .stdout(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
        }
    };
    process(&[]);
    // Settled: the last scan lies outside the racy window.
    std::thread::sleep(Duration::from_millis(200));
    take(&Scope::Full);
    watched();
    process(&[]);
    shadow_git::snapshot_in_repo(&ws, &index).unwrap();
    {
        let mut g = c.benchmark_group(format!("snapshot_unchanged ({label})"));
        g.sample_size(20);
        g.bench_function("tacho full scan", |b| {
            b.iter(|| {
                let s = take(&Scope::Full);
                assert_eq!(s.files_read, 0);
            })
        });
        g.bench_function("tacho full scan, watcher running", |b| {
            b.iter(|| {
                let s = watched();
                assert!(s.watched && s.files_read == 0);
            })
        });
        if bin.is_some() {
            g.bench_function("tacho snapshot, whole process", |b| b.iter(|| process(&[])));
        }
        g.bench_function("git add -A + write-tree (own index)", |b| {
            b.iter(|| shadow_git::snapshot_in_repo(&ws, &index).unwrap())
        });
        // What any scan without a watcher must do at least: without one, only a file's
        // metadata tells that its content may have changed. The cheapest way known
        // here: on every core, each directory opened once (`O_PATH`) and its files
        // stat'ed through it (`fstatat`), no path resolved twice. Not a snapshot: the
        // floor both rows above stand on.
        g.bench_function("floor: fstatat of every file, all cores", |b| {
            let mut by_dir: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for p in &paths {
                let (dir, name) = p.rsplit_once('/').unwrap_or(("", p));
                by_dir.entry(dir).or_default().push(name);
            }
            let groups: Vec<(PathBuf, Vec<&str>)> = by_dir
                .into_iter()
                .map(|(d, names)| (ws.join(d), names))
                .collect();
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            let share = groups.len().div_ceil(threads);
            b.iter(|| {
                std::thread::scope(|s| {
                    for part in groups.chunks(share) {
                        s.spawn(move || {
                            use rustix::fs::{AtFlags, Mode, OFlags};
                            for (dir, names) in part {
                                let fd = rustix::fs::open(
                                    dir,
                                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                                    Mode::empty(),
                                )
                                .unwrap();
                                for name in names {
                                    rustix::fs::statat(&fd, *name, AtFlags::SYMLINK_NOFOLLOW)
                                        .unwrap();
                                }
                            }
                        });
                    }
                })
            })
        });
        g.finish();
    }
    let step = (paths.len() / 10).max(1);
    let ten: Vec<String> = paths.iter().step_by(step).take(10).cloned().collect();
    let mut round = 0u64;
    let mut g = c.benchmark_group(format!("snapshot_after_10_edits ({label})"));
    g.sample_size(20);
    g.bench_function("tacho full scan", |b| {
        b.iter_batched(
            || {
                round += 1;
                edit_files(&ws, &ten, round).unwrap();
            },
            |()| take(&Scope::Full),
            BatchSize::PerIteration,
        )
    });
    g.bench_function("tacho full scan, watcher running", |b| {
        b.iter_batched(
            || {
                round += 1;
                edit_files(&ws, &ten, round).unwrap();
            },
            |()| {
                let s = watched();
                // The watcher may have hashed the 10 files ahead, and taken the
                // snapshot itself: then this one reads none (SPEC §10.6).
                assert!(s.watched && s.files_read <= 10, "{s:?}");
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("tacho targeted (the 10 reported paths)", |b| {
        b.iter_batched(
            || {
                round += 1;
                edit_files(&ws, &ten, round).unwrap();
            },
            |()| take(&Scope::Paths(ten.clone())),
            BatchSize::PerIteration,
        )
    });
    if bin.is_some() {
        g.bench_function("tacho snapshot, whole process", |b| {
            b.iter_batched(
                || {
                    round += 1;
                    edit_files(&ws, &ten, round).unwrap();
                },
                |()| process(&[]),
                BatchSize::PerIteration,
            )
        });
        g.bench_function("tacho snapshot PATHS (targeted), whole process", |b| {
            b.iter_batched(
                || {
                    round += 1;
                    edit_files(&ws, &ten, round).unwrap();
                },
                |()| process(&ten),
                BatchSize::PerIteration,
            )
        });
    }
    g.bench_function("git add -A + write-tree (own index)", |b| {
        b.iter_batched(
            || {
                round += 1;
                edit_files(&ws, &ten, round).unwrap();
            },
            |()| shadow_git::snapshot_in_repo(&ws, &index).unwrap(),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(snapshot, benches, inside_git);
criterion_main!(snapshot);
