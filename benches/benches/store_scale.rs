//! The store at the scale importers and hooks give it, as whole `tacho` processes,
//! against SQLite (WAL, one JSON row per event) in the same run:
//!
//! - bulk ingest: one `tacho record` input of 200,000 events as 4,167 sessions of 48
//!   (the bundled example, renamed), and as one session; SQLite parses every line and
//!   inserts it with `synchronous=FULL`, in one transaction for the input (what
//!   `tacho record` promises: all of the input or none of it) and in one transaction
//!   per session;
//! - `tacho log verify` of the bulk store against reading and parsing the same events
//!   back from SQLite;
//! - queries on a store of many sessions (`session list --limit 50`, `session list
//!   --risk HIGH --since 7d --json`, `risk <prefix>`, and `tacho --version`: the cost of
//!   starting a process at all), with a verification of that store against SQLite.
//!
//! - peak memory of `tacho record --batch-lines 1000` over a 1 GB input, as one
//!   session and as sessions of 48 events (printed, from `/usr/bin/time -v`).
//!
//! `cargo bench -p tacho-benches --bench store_scale` (needs the release binary:
//! `cargo build --release -p tacho-cli`); the query store has 10,000 sessions, and
//! `TACHO_SCALE_SESSIONS=100000` gives the 100,000 (5 million events; building
//! it takes a few minutes). Under `cargo test` everything runs once on a few sessions.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tacho_benches::scale::{
    bulk_input, example_lines, large_input, sqlite_ingest, sqlite_read_all, tacho_bin,
};
use tacho_benches::{json_line, realistic_session};
use tacho_store::{Durability, Store, StoreOptions};

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn tacho(bin: &Path, home: &Path, args: &[&str]) {
    tacho_benches::run_ok(Command::new(bin).args(args).env("TACHO_HOME", home));
}

/// One session of `events` events: the example's start, its middle repeated, its end.
fn one_session_input(path: &Path, events: usize) {
    let lines = example_lines();
    let (first, rest) = lines.split_first().unwrap();
    let (last, middle) = rest.split_last().unwrap();
    let mut text = format!("{first}\n");
    for l in middle.iter().cycle().take(events - 2) {
        text.push_str(l);
        text.push('\n');
    }
    text.push_str(last);
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

fn fresh(dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    dir.to_path_buf()
}

fn bulk(c: &mut Criterion) {
    let Some(bin) = tacho_bin() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (sessions, one) = if bench_mode() {
        (4_167, 200_000)
    } else {
        (10, 500)
    };
    let input = root.join("bulk.jsonl");
    let events = bulk_input(&input, sessions);
    let single = root.join("one.jsonl");
    one_session_input(&single, one);
    let db = root.join("bulk.db");

    let mut runs = 0u64;
    let cases: [(String, &Path); 2] = [
        (
            format!("record_{events}_events_as_{sessions}_sessions"),
            &input,
        ),
        (format!("record_{one}_events_as_1_session"), &single),
    ];
    for (name, file) in cases {
        let mut g = c.benchmark_group(name);
        g.sample_size(10)
            .measurement_time(Duration::from_secs(if bench_mode() { 30 } else { 1 }));
        g.bench_function("tacho record (whole process)", |b| {
            // A new store each time, the previous one deleted first (untimed), as the
            // SQLite side deletes its database before each run: otherwise every earlier
            // run's data would still wait to be written back while this one syncs. (A
            // store of streams is thousands of files, whose deletion slowed the file
            // system for a while; the bulk input's sessions are packed now, a few files.)
            b.iter_batched(
                || {
                    let _ = std::fs::remove_dir_all(root.join(format!("home{runs}")));
                    runs += 1;
                    fresh(&root.join(format!("home{runs}")))
                },
                |home| {
                    tacho(
                        &bin,
                        &home,
                        &["record", "--snapshots", "off", &file.to_string_lossy()],
                    )
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function("sqlite FULL, one transaction", |b| {
            b.iter(|| sqlite_ingest(file, &db, false))
        });
        g.bench_function("sqlite FULL, a transaction per session", |b| {
            b.iter(|| sqlite_ingest(file, &db, true))
        });
        g.finish();
    }

    // Verification of the bulk store.
    let home = fresh(&root.join("home"));
    tacho(
        &bin,
        &home,
        &["record", "--snapshots", "off", &input.to_string_lossy()],
    );
    sqlite_ingest(&input, &db, false);
    assert_eq!(sqlite_read_all(&db), events);
    verify(c, &bin, &home, &db, sessions as u64);
}

/// `tacho log verify` of a store against reading and parsing its events from SQLite.
fn verify(c: &mut Criterion, bin: &Path, home: &Path, db: &Path, sessions: u64) {
    let mut g = c.benchmark_group(format!("verify_{sessions}_sessions"));
    g.sample_size(10);
    g.bench_function("tacho log verify (whole process, all cores)", |b| {
        b.iter(|| tacho(bin, home, &["log", "verify"]))
    });
    g.bench_function("sqlite read + JSON parse", |b| {
        b.iter(|| sqlite_read_all(db))
    });
    g.finish();
}

/// A store of `n` realistic sessions of 48 events, started over the last 30 days, and
/// the same events in SQLite.
fn query_store(root: &Path, n: u64) -> (PathBuf, PathBuf) {
    let home = root.join("qhome");
    let store = Store::open(home.join("log"), StoreOptions::default()).unwrap();
    let db = root.join("q.db");
    let mut sql = tacho_benches::SqliteLog::create(&db, false).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let span = 30 * 86_400 * 1_000_000_000i64;
    let events = realistic_session(48);
    for k in 0..n {
        let id = query_id(k);
        let start = now - span + span / n as i64 * k as i64;
        let batch: Vec<_> = events.iter().map(|(t, b)| (start + t, b.clone())).collect();
        let mut w = store.writer(&id).unwrap();
        w.append_batch(&batch, Durability::Buffered).unwrap();
        let lines: Vec<String> = batch
            .iter()
            .enumerate()
            .map(|(i, (_, b))| json_line(&id, i as u64, b))
            .collect();
        sql.append(&id, "event", &lines).unwrap();
        if k % 10_000 == 9_999 {
            eprintln!("query store: {} sessions", k + 1);
        }
    }
    (home, db)
}

/// The id of the k-th session of the query store (distinct for distinct `k`: the
/// multiplier is odd).
fn query_id(k: u64) -> String {
    format!("ses_q{:016x}", k.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

fn queries(c: &mut Criterion) {
    let Some(bin) = tacho_bin() else { return };
    let n: u64 = std::env::var("TACHO_SCALE_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench_mode() { 10_000 } else { 20 });
    let tmp = tempfile::tempdir().unwrap();
    let (home, db) = query_store(tmp.path(), n);
    // The first listing builds the index (from every stream); the rest read it.
    tacho(&bin, &home, &["session", "list", "--limit", "1"]);
    // A unique prefix: ids are spread over 64 bits, and 12 hex digits tell 100,000
    // of them apart.
    let prefix = query_id(n / 2)[..17].to_owned();
    let mut g = c.benchmark_group(format!("queries_{n}_sessions"));
    g.sample_size(30);
    let cases: [(&str, Vec<&str>); 4] = [
        (
            "tacho session list --limit 50",
            vec!["session", "list", "--limit", "50"],
        ),
        (
            "tacho session list --risk HIGH --since 7d --json",
            vec![
                "session", "list", "--risk", "HIGH", "--since", "7d", "--json",
            ],
        ),
        (
            "tacho risk <prefix> --json",
            vec!["risk", prefix.as_str(), "--json"],
        ),
        ("tacho --version (process floor)", vec!["--version"]),
    ];
    for (name, args) in &cases {
        g.bench_function(*name, |b| b.iter(|| tacho(&bin, &home, args)));
    }
    g.finish();
    verify(c, &bin, &home, &db, n);
}

/// Peak memory of `tacho record --batch-lines 1000` over a large input (1 GB under
/// `cargo bench`; the target is under 100 MB), in both shapes: one long session, and
/// sessions of 48 events (the example's, 97,000 of them: the store's session index,
/// rewritten as it grows, is then the largest thing held).
fn memory(_: &mut Criterion) {
    let Some(bin) = tacho_bin() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let bytes: u64 = if bench_mode() {
        1_000_000_000
    } else {
        2_000_000
    };
    for one_session in [true, false] {
        let input = tmp.path().join("large.jsonl");
        let events = large_input(&input, bytes, one_session);
        let home = tmp.path().join(if one_session { "one" } else { "many" });
        let args = [
            "record",
            "--snapshots",
            "off",
            "--batch-lines",
            "1000",
            &input.to_string_lossy(),
        ];
        let shape = if one_session {
            "one session".to_string()
        } else {
            format!("{} sessions", events / 48)
        };
        match tacho_benches::peak_kib(&bin, &home, &args) {
            Some(kib) => eprintln!(
                "store_scale: `tacho record --batch-lines 1000` of {} MB ({events} events, {shape}): peak RSS {:.1} MB",
                bytes / 1_000_000,
                kib as f64 / 1024.0
            ),
            None => eprintln!("store_scale: /usr/bin/time is missing; peak memory not measured"),
        }
        let _ = std::fs::remove_file(&input);
    }
}

criterion_group!(benches, bulk, queries, memory);
criterion_main!(benches);
