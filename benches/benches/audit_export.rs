//! Exporting a store of 1,000,000 events (20,834 sessions: the bundled example,
//! renamed) as whole `tacho` processes, against what a user would otherwise run in the
//! same run: `SELECT` every JSON row from the SQLite store (WAL, one row per event)
//! and serialise one JSON line per event, parsing the body as a record needs.
//!
//! - `tacho audit export --all -o FILE` (JSON Lines, `tacho.audit/1`);
//! - `tacho audit otlp --all --file FILE` (OTLP JSON lines);
//! - SQLite: `SELECT session, seq, body ... ORDER BY session, seq`, each body parsed
//!   and written as `{"session","seq","event"}` to a file.
//!
//! Afterwards each tacho command runs once more under `/usr/bin/time -v` and its peak
//! resident memory is printed: it does not grow with the store.
//!
//! `cargo bench -p tacho-benches --bench audit_export` (needs the release binary:
//! `cargo build --release -p tacho-cli`); `TACHO_EXPORT_SESSIONS` sets the number of
//! sessions (default 20,834). Under `cargo test` everything runs once on a few.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rusqlite::Connection;
use tacho_benches::scale::{bulk_input, sqlite_ingest, tacho_bin};

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// What a user's script does with the SQLite store: every row, its body parsed, one
/// JSON line written per event.
fn sqlite_export(db: &Path, out: &Path) -> u64 {
    let conn = Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT session, seq, body FROM events ORDER BY session, seq")
        .unwrap();
    let mut rows = stmt.query([]).unwrap();
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(out).unwrap());
    let mut n = 0u64;
    while let Some(row) = rows.next().unwrap() {
        let session: String = row.get(0).unwrap();
        let seq: i64 = row.get(1).unwrap();
        let body: String = row.get(2).unwrap();
        let event: serde_json::Value = serde_json::from_str(&body).unwrap();
        serde_json::to_writer(
            &mut w,
            &serde_json::json!({"session": session, "seq": seq, "event": event}),
        )
        .unwrap();
        w.write_all(b"\n").unwrap();
        n += 1;
    }
    w.flush().unwrap();
    n
}

fn export(c: &mut Criterion) {
    let Some(bin) = tacho_bin() else { return };
    let sessions: usize = std::env::var("TACHO_EXPORT_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench_mode() { 20_834 } else { 20 });
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("input.jsonl");
    let events = bulk_input(&input, sessions);
    let home = tmp.path().join("home");
    let db = tmp.path().join("events.db");
    tacho_benches::run_ok(
        Command::new(&bin)
            .args(["record", "--batch-lines", "100000"])
            .arg(&input)
            .env("TACHO_HOME", &home),
    );
    sqlite_ingest(&input, &db, false);
    std::fs::remove_file(&input).unwrap();
    let out = tmp.path().join("out.jsonl");
    let out_arg = out.to_str().unwrap().to_owned();

    let mut g = c.benchmark_group(format!("audit_export/{events}_events"));
    g.sample_size(10).measurement_time(Duration::from_secs(20));
    g.bench_function("tacho audit export --all -o", |b| {
        b.iter(|| {
            tacho_benches::run_ok(
                Command::new(&bin)
                    .args(["audit", "export", "--all", "-o", &out_arg])
                    .env("TACHO_HOME", &home),
            )
        })
    });
    g.bench_function("tacho audit otlp --all --file", |b| {
        b.iter(|| {
            tacho_benches::run_ok(
                Command::new(&bin)
                    .args(["audit", "otlp", "--all", "--file", &out_arg])
                    .env("TACHO_HOME", &home),
            )
        })
    });
    g.bench_function("sqlite select + serialise", |b| {
        b.iter(|| assert_eq!(sqlite_export(&db, &out), events))
    });
    g.finish();

    for args in [
        ["audit", "export", "--all", "-o", &out_arg],
        ["audit", "otlp", "--all", "--file", &out_arg],
    ] {
        match tacho_benches::peak_kib(&bin, &home, &args) {
            Some(kib) => eprintln!(
                "audit_export: `tacho {}` over {events} events: peak RSS {:.1} MB",
                args.join(" "),
                kib as f64 / 1024.0
            ),
            None => eprintln!("audit_export: /usr/bin/time is missing; peak memory not measured"),
        }
    }
}

criterion_group!(benches, export);
criterion_main!(benches);
