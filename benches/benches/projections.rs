//! Building every projection (session summary, execution graph, risk) for a whole
//! store, against the same folds fed from SQLite rows of JSON, in the same run.
//!
//! `cargo bench -p tacho-benches --bench projections` builds a 1,000,000-event store
//! (1,000 sessions of 1,000 events) first; under `cargo test` it runs once on 10,000.
//! `TACHO_BENCH_PROJECTION_EVENTS` sets the size.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rusqlite::Connection;
use tacho_benches::realistic_session;
use tacho_projections::{ExecutionGraph, SessionSummary, assess};
use tacho_schema::{Event, EventBody};
use tacho_store::{Durability, Store, StoreOptions};

const PER_SESSION: u64 = 1_000;

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// Folds one session's events into every projection; returns something that depends
/// on all of them, so nothing is optimised away.
fn project(session: &str, events: impl IntoIterator<Item = (u64, Event)>) -> u64 {
    let mut g = ExecutionGraph::new(session);
    for (seq, e) in events {
        g.apply(seq, &e);
    }
    summarize(&g)
}

/// The summary and the risk of a built graph, folded into one number.
fn summarize(g: &ExecutionGraph) -> u64 {
    let s = SessionSummary::from_graph(g);
    u64::from(assess(g).score) + s.tokens_in + g.tools().count() as u64
}

fn projections(c: &mut Criterion) {
    let total: u64 = std::env::var("TACHO_BENCH_PROJECTION_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if bench_mode() { 1_000_000 } else { 10_000 });
    let sessions = (total / PER_SESSION).max(1);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("tacho"), StoreOptions::default()).unwrap();
    let db = Connection::open(dir.path().join("events.db")).unwrap();
    db.pragma_update(None, "journal_mode", "WAL").unwrap();
    db.pragma_update(None, "synchronous", "OFF").unwrap();
    db.execute_batch(
        "CREATE TABLE events (session TEXT NOT NULL, seq INTEGER NOT NULL, ts INTEGER NOT NULL,
         type TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session, seq));",
    )
    .unwrap();
    let events = realistic_session(PER_SESSION);
    for k in 0..sessions {
        let id = format!("ses_{k:06}");
        let mut w = store.writer(&id).unwrap();
        for chunk in events.chunks(250) {
            w.append_batch(chunk, Durability::Buffered).unwrap();
        }
        let tx = db.unchecked_transaction().unwrap();
        {
            let mut ins = tx
                .prepare_cached("INSERT INTO events VALUES (?1, ?2, ?3, ?4, ?5)")
                .unwrap();
            for (seq, (t, body)) in events.iter().enumerate() {
                let json = serde_json::to_string(body).unwrap();
                ins.execute(rusqlite::params![id, seq as i64, t, body.kind_name(), json])
                    .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    let n = sessions * PER_SESSION;
    assert_eq!(
        from_log(&store),
        from_sqlite(&db),
        "both paths build the same projections"
    );

    let mut g = c.benchmark_group("build_all_projections");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(n));
    g.bench_function(format!("tacho_log/{n}"), |b| b.iter(|| from_log(&store)));
    g.bench_function(format!("sqlite_json_rows/{n}"), |b| {
        b.iter(|| from_sqlite(&db))
    });
    g.finish();
}

fn from_log(store: &Store) -> u64 {
    let mut acc = 0u64;
    for id in store.sessions().unwrap() {
        // How tacho builds projections: borrowed views of the payloads, in place.
        let mut g = ExecutionGraph::new(&id);
        store
            .read_session_views(&id, 0, |seq, at, v| g.apply_view(seq, at, v))
            .unwrap();
        acc += summarize(&g);
    }
    acc
}

fn from_sqlite(db: &Connection) -> u64 {
    let mut acc = 0u64;
    let mut stmt = db
        .prepare_cached("SELECT session, seq, ts, body FROM events ORDER BY session, seq")
        .unwrap();
    let mut rows = stmt.query([]).unwrap();
    let mut current: Option<String> = None;
    let mut evs: Vec<(u64, Event)> = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        let session: String = row.get(0).unwrap();
        if current.as_deref() != Some(session.as_str()) {
            if let Some(s) = current.take() {
                acc += project(&s, std::mem::take(&mut evs));
            }
            current = Some(session.clone());
        }
        let body: String = row.get(3).unwrap();
        let body: EventBody = serde_json::from_str(&body).unwrap();
        evs.push((
            row.get::<_, i64>(1).unwrap() as u64,
            Event {
                session,
                time_unix_ns: row.get(2).unwrap(),
                body,
            },
        ));
    }
    if let Some(s) = current {
        acc += project(&s, evs);
    }
    acc
}

/// `tacho risk <session>` as a whole process on a store of 10,000 sessions (under
/// `cargo test`: 200), with `tacho --version` (the cost of starting the process at all)
/// in the same run. Needs the release binary: `cargo build --release -p tacho-cli`.
fn risk_process(c: &mut Criterion) {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(|d| d.parent()).unwrap().join("tacho");
    if !bin.exists() {
        eprintln!(
            "risk_process: {} is missing; run `cargo build --release -p tacho-cli` first",
            bin.display()
        );
        return;
    }
    let sessions: u64 = if bench_mode() { 10_000 } else { 200 };
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("log"), StoreOptions::default()).unwrap();
    let events = realistic_session(100);
    for k in 0..sessions {
        let mut w = store.writer(&format!("ses_{k:06}")).unwrap();
        w.append_batch(&events, Durability::Buffered).unwrap();
    }
    let target = format!("ses_{:06}", sessions / 2);
    let run = |args: &[&str]| {
        tacho_benches::run_ok(
            std::process::Command::new(&bin)
                .args(args)
                .env("TACHO_HOME", dir.path()),
        )
    };
    let mut g = c.benchmark_group(format!("risk_process_{sessions}_sessions"));
    g.sample_size(50).measurement_time(Duration::from_secs(5));
    g.bench_function("tacho_risk", |b| b.iter(|| run(&["risk", &target])));
    g.bench_function("tacho_version_process_floor", |b| {
        b.iter(|| run(&["--version"]))
    });
    g.finish();
}

criterion_group!(benches, projections, risk_process);
criterion_main!(benches);
