//! Append and verification throughput of tacho's log against the baselines, in one run.
//!
//! `cargo bench -p tacho-benches` runs everything (a few minutes). Under `cargo test`
//! (no `--bench` argument) criterion runs every benchmark once on small inputs, as a
//! smoke test. `TACHO_BENCH_EVENTS` sets the size of the verification store.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use tacho_benches::{JsonlLog, SqliteLog, event_of_size, json_line, session_start};
use tacho_schema::EventBody;
use tacho_store::{Durability, Store, StoreOptions};

const SIZES: [usize; 3] = [200, 1024, 4096];
const BATCH: usize = 100;

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn batch_of(size: usize, first: u64) -> Vec<(i64, EventBody)> {
    (0..BATCH as u64)
        .map(|i| (i as i64, event_of_size(first + i, size)))
        .collect()
}

/// Durable group commit and OS-buffered appends, 100 events per batch.
fn append(c: &mut Criterion) {
    for sync in [true, false] {
        let mode = if sync { "sync" } else { "buffered" };
        let mut g = c.benchmark_group(format!("append_{mode}_batch{BATCH}"));
        g.sample_size(20)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(3));
        for size in SIZES {
            g.throughput(Throughput::Elements(BATCH as u64));
            let batch = batch_of(size, 1);
            let lines: Vec<String> = batch
                .iter()
                .enumerate()
                .map(|(i, (_, b))| json_line("ses_bench", i as u64, b))
                .collect();

            g.bench_function(BenchmarkId::new("tacho", size), |b| {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
                let mut w = store.writer("ses_bench").unwrap();
                w.append(0, &session_start(), Durability::Sync).unwrap();
                let d = if sync {
                    Durability::Sync
                } else {
                    Durability::Buffered
                };
                b.iter(|| w.append_batch(&batch, d).unwrap());
            });
            g.bench_function(BenchmarkId::new("jsonl_serde", size), |b| {
                let dir = tempfile::tempdir().unwrap();
                let mut log = JsonlLog::create(&dir.path().join("t.jsonl")).unwrap();
                // The baseline serializes its events too, as a recorder must.
                b.iter(|| {
                    let lines: Vec<String> = batch
                        .iter()
                        .enumerate()
                        .map(|(i, (_, e))| json_line("ses_bench", i as u64, e))
                        .collect();
                    log.append(&lines, sync).unwrap()
                });
            });
            g.bench_function(BenchmarkId::new("sqlite_wal_json", size), |b| {
                let dir = tempfile::tempdir().unwrap();
                let mut db = SqliteLog::create(&dir.path().join("t.db"), sync).unwrap();
                b.iter(|| {
                    let lines: Vec<String> = batch
                        .iter()
                        .enumerate()
                        .map(|(i, (_, e))| json_line("ses_bench", i as u64, e))
                        .collect();
                    db.append("ses_bench", "tool.result", &lines).unwrap()
                });
            });
            drop(lines);
        }
        g.finish();
    }
}

/// A full verification scan (checksums, chain, validating every payload) against
/// reading the same events back from SQLite or JSON Lines and parsing their JSON.
fn verify(c: &mut Criterion) {
    let events: u64 = std::env::var("TACHO_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench_mode() { 200_000 } else { 2_000 });
    for size in SIZES {
        // Roughly the same bytes for every size.
        let n = (events * 200 / size as u64).max(BATCH as u64);
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("tacho"), StoreOptions::default()).unwrap();
        let one_core = Store::open(
            dir.path().join("tacho"),
            StoreOptions {
                verify_threads: 1,
                ..StoreOptions::default()
            },
        )
        .unwrap();
        let mut w = store.writer("ses_bench").unwrap();
        w.append(0, &session_start(), Durability::Buffered).unwrap();
        let mut db = SqliteLog::create(&dir.path().join("t.db"), false).unwrap();
        let jsonl_path = dir.path().join("t.jsonl");
        let mut jsonl = JsonlLog::create(&jsonl_path).unwrap();
        let mut seq = 1;
        while seq < n {
            let batch = batch_of(size, seq);
            w.append_batch(&batch, Durability::Buffered).unwrap();
            let lines: Vec<String> = batch
                .iter()
                .enumerate()
                .map(|(i, (_, b))| json_line("ses_bench", seq + i as u64, b))
                .collect();
            db.append("ses_bench", "tool.result", &lines).unwrap();
            jsonl.append(&lines, false).unwrap();
            seq += BATCH as u64;
        }
        w.sync().unwrap();
        drop(w);
        let report = store.verify_session("ses_bench", true).unwrap();
        assert!(report.findings.is_empty());
        let bytes = report.bytes;
        let total = report.events;

        let mut g = c.benchmark_group("verify_scan_bytes");
        g.sample_size(10).measurement_time(Duration::from_secs(4));
        g.throughput(Throughput::Bytes(bytes));
        g.bench_function(BenchmarkId::new("tacho_verify_1_thread", size), |b| {
            b.iter(|| one_core.verify_session("ses_bench", true).unwrap())
        });
        g.bench_function(BenchmarkId::new("tacho_verify_all_cores", size), |b| {
            b.iter(|| store.verify_session("ses_bench", true).unwrap())
        });
        g.finish();

        let mut g = c.benchmark_group("read_back_events");
        g.sample_size(10).measurement_time(Duration::from_secs(4));
        g.throughput(Throughput::Elements(total));
        g.bench_function(BenchmarkId::new("tacho_verify_1_thread", size), |b| {
            b.iter(|| one_core.verify_session("ses_bench", true).unwrap())
        });
        g.bench_function(BenchmarkId::new("tacho_verify_all_cores", size), |b| {
            b.iter(|| store.verify_session("ses_bench", true).unwrap())
        });
        g.bench_function(BenchmarkId::new("tacho_read_owned", size), |b| {
            b.iter(|| {
                let mut k = 0u64;
                store.read_session("ses_bench", |_| k += 1).unwrap();
                k
            })
        });
        g.bench_function(BenchmarkId::new("sqlite_wal_json", size), |b| {
            b.iter(|| db.read_all("ses_bench").unwrap())
        });
        g.bench_function(BenchmarkId::new("jsonl_serde", size), |b| {
            b.iter(|| JsonlLog::read_all(&jsonl_path).unwrap())
        });
        g.finish();
        let t = Instant::now();
        let _ = store.verify_session("ses_bench", true).unwrap();
        eprintln!(
            "verify store for {size} B events: {} events, {} bytes, one pass {:?}",
            total,
            bytes,
            t.elapsed()
        );
    }
}

criterion_group!(benches, append, verify);
criterion_main!(benches);
