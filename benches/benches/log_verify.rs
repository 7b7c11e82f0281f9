//! `tacho log verify` of 200,000 events (4,167 sessions of 48: the bundled example,
//! renamed), whole process, against what a user of the SQLite design runs to check the
//! same events — every row selected and its JSON parsed (WAL, one JSON row per event,
//! filled with `synchronous=FULL` as `store_scale`'s ingest does) — in the same run.
//!
//! Two stores of the same events: the sessions packed (what one `tacho record` input
//! writes), and each session in a stream directory of its own (what hooks write; made
//! by `tacho record --batch-lines 8`: six batches a session; then listed once, so that
//! its index entries have the facts `log verify` checks, as a listed store's do).
//! Throughput is the bytes `log verify` checks (its summary's `bytes`: every segment)
//! per second; after the criterion groups, the medians of 11 more runs of each side
//! and their ratio are printed.
//!
//! Beside them, the floor of any verifier of the same files, in this process (no
//! process start) on as many threads as `log verify` uses: every file it reads (under
//! `log/`: `streams/`, `packs/`, `locks/`, `index/`; not the projections, a cache)
//! read whole (`read`), then read and hashed with BLAKE3 and CRC32 (`read + hash`),
//! the least a check of checksums and a hash chain must do. Wall and CPU time are
//! printed: when the floor's wall time is above a tenth of SQLite's, 10 times SQLite is
//! out of reach for that layout on this machine, whatever the verifier does.
//!
//! `cargo build --release -p tacho-cli && cargo bench -p tacho-benches --bench
//! log_verify`. `TACHO_VERIFY_SESSIONS` sets the number of sessions. Under `cargo
//! test` everything runs once on 10 sessions.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tacho_benches::files_under;
use tacho_benches::scale::{bulk_input, sqlite_ingest, sqlite_read_all, tacho_bin};

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn tacho(bin: &Path, home: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new(bin)
        .args(args)
        .env("TACHO_HOME", home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tacho {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `tacho log verify --json`'s summary: (bytes checked, events); asserts it is clean.
fn verified(bin: &Path, home: &Path) -> (u64, u64) {
    let out = tacho(bin, home, &["log", "verify", "--json"]);
    let summary = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["type"] == "summary")
        .unwrap();
    assert_eq!(summary["ok"], true, "{summary}");
    (
        summary["bytes"].as_u64().unwrap(),
        summary["events"].as_u64().unwrap(),
    )
}

fn median_ms(runs: usize, mut f: impl FnMut()) -> f64 {
    let mut t: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Process CPU time (user + system) so far, in ms.
fn cpu_ms() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

/// Reads every file of `files` on `threads` threads, hashing each with BLAKE3 and
/// CRC32 when `hash`; returns the bytes read (and a digest, so nothing is skipped).
fn floor_pass(files: &[(u64, PathBuf)], threads: usize, hash: bool) -> (u64, u32) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let (mut bytes, mut mix) = (0u64, 0u32);
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((_, path)) = files.get(i) else { break };
                        let data = std::fs::read(path).unwrap();
                        bytes += data.len() as u64;
                        if hash {
                            let h = blake3::hash(&data);
                            mix ^= crc32fast::hash(&data) ^ u32::from(h.as_bytes()[0]);
                        }
                    }
                    (bytes, mix)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .fold((0, 0), |(b, m), (b2, m2)| (b + b2, m ^ m2))
    })
}

/// Medians of `runs` floor passes: (wall ms, CPU ms).
fn floor_ms(runs: usize, files: &[(u64, PathBuf)], threads: usize, hash: bool) -> (f64, f64) {
    let mut wall = Vec::new();
    let mut cpu = Vec::new();
    for _ in 0..runs {
        let (start, c0) = (Instant::now(), cpu_ms());
        std::hint::black_box(floor_pass(files, threads, hash));
        wall.push(start.elapsed().as_secs_f64() * 1e3);
        cpu.push(cpu_ms() - c0);
    }
    wall.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    (wall[wall.len() / 2], cpu[cpu.len() / 2])
}

fn verify(c: &mut Criterion) {
    let Some(bin) = tacho_bin() else { return };
    let sessions: usize = std::env::var("TACHO_VERIFY_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench_mode() { 4_167 } else { 10 });
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("bulk.jsonl");
    let events = bulk_input(&input, sessions);
    let input = input.to_string_lossy().into_owned();
    let db = tmp.path().join("bulk.db");
    sqlite_ingest(Path::new(&input), &db, false);
    assert_eq!(sqlite_read_all(&db), events);

    let packed = tmp.path().join("packed");
    tacho(&bin, &packed, &["record", "--snapshots", "off", &input]);
    let streams = tmp.path().join("streams");
    tacho(
        &bin,
        &streams,
        &[
            "record",
            "--snapshots",
            "off",
            "--durability",
            "buffered",
            "--batch-lines",
            "8",
            &input,
        ],
    );
    // The two shapes the bench means to compare.
    assert!(
        packed
            .join("log/packs")
            .read_dir()
            .unwrap()
            .next()
            .is_some()
    );
    assert!(!streams.join("log/packs").exists());
    // Streams written batch by batch leave their index entries without facts until a
    // listing computes them; a user's store has been listed, and `log verify` then
    // checks every entry's facts against the events: measured that way.
    tacho(&bin, &streams, &["session", "list", "--limit", "1"]);

    for (shape, home) in [("packed", &packed), ("streams", &streams)] {
        let (bytes, n) = verified(&bin, home);
        assert_eq!(n, events);
        let mut g = c.benchmark_group(format!("log_verify_{events}_events_{shape}"));
        g.sample_size(10)
            .measurement_time(Duration::from_secs(if bench_mode() { 10 } else { 1 }))
            .throughput(Throughput::Bytes(bytes));
        g.bench_function("tacho log verify (whole process, all cores)", |b| {
            b.iter(|| tacho(&bin, home, &["log", "verify"]))
        });
        g.bench_function("sqlite read + JSON parse", |b| {
            b.iter(|| sqlite_read_all(&db))
        });
        // The files `log verify` reads (the projections, a cache, it does not), largest
        // first.
        let mut files: Vec<_> = ["streams", "packs", "locks", "index"]
            .iter()
            .map(|d| home.join("log").join(d))
            .filter(|d| d.is_dir())
            .flat_map(|d| files_under(&d))
            .collect();
        files.sort_by_key(|f| std::cmp::Reverse(f.0));
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        g.bench_function("floor: read every file log verify reads", |b| {
            b.iter(|| floor_pass(&files, threads, false))
        });
        g.finish();
        let runs = if bench_mode() { 11 } else { 1 };
        let ours = median_ms(runs, || {
            tacho(&bin, home, &["log", "verify"]);
        });
        let theirs = median_ms(runs, || {
            sqlite_read_all(&db);
        });
        let (read_wall, read_cpu) = floor_ms(runs, &files, threads, false);
        let (hash_wall, hash_cpu) = floor_ms(runs, &files, threads, true);
        eprintln!(
            "log_verify {shape} floor ({} files, {threads} threads, in process): read \
             {read_wall:.1} ms wall, {read_cpu:.1} ms CPU; read + BLAKE3 + CRC32 \
             {hash_wall:.1} ms wall, {hash_cpu:.1} ms CPU; 10x sqlite needs {:.1} ms",
            files.len(),
            theirs / 10.0
        );
        eprintln!(
            "log_verify {shape}: {events} events, {sessions} sessions, {:.1} MB checked; \
             tacho log verify median {ours:.1} ms ({:.2} GB/s), sqlite read + parse median \
             {theirs:.1} ms: {:.1}x",
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / ours,
            theirs / ours
        );
    }
}

criterion_group!(benches, verify);
criterion_main!(benches);
