//! The session index, through real `tacho` processes: every query answers the same
//! after the index is deleted; a tampered index is what listings show and what
//! `log verify` reports; many writers creating sessions while `session list` runs.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tacho_store::index::{FactsAt, Record};
use tacho_store::{Store, StoreOptions};
use tacho_tests::{repo_root, run, run_with_stdin, tacho};

fn store(home: &Path) -> Store {
    Store::open(home.join("log"), StoreOptions::default()).unwrap()
}

fn ok(home: &Path, args: &[&str]) -> String {
    let (code, out, err) = run({
        let mut c = tacho(home);
        c.args(args);
        c
    });
    assert_eq!(code, 0, "tacho {args:?}: {err}");
    out
}

/// Sessions of several shapes: the bundled example (ended, files, a failure), a
/// running one, a child of it in another project, one started earlier.
fn record_sessions(home: &Path) {
    let example = repo_root().join("examples/sessions/rate-limit.jsonl");
    ok(home, &["record", example.to_str().unwrap()]);
    let lines = [
        r#"{"type":"session.start","session":"ses_parent","ts":"2026-11-30T08:00:00Z","agent":"coder","title":"Fix the flaky test","workspace":"/home/dev/web","source":"claude-code"}"#,
        r#"{"type":"tool.call","session":"ses_parent","ts":"2026-11-30T08:00:01Z","call_id":"c1","tool":"bash","target":"cargo test"}"#,
        r#"{"type":"tool.result","session":"ses_parent","ts":"2026-11-30T08:00:09Z","call_id":"c1","status":"error"}"#,
        r#"{"type":"session.start","session":"ses_child","ts":"2026-11-30T08:01:00Z","agent":"tester","parent":"ses_parent","project":"other"}"#,
        r#"{"type":"session.start","session":"ses_early","ts":"2026-10-01T08:00:00Z","agent":"coder"}"#,
        r#"{"type":"session.end","session":"ses_early","ts":"2026-10-01T09:00:00Z","reason":"aborted"}"#,
    ];
    let (code, _, err) = run_with_stdin(home, &["record"], &(lines.join("\n") + "\n"));
    assert_eq!(code, 0, "{err}");
}

const QUERIES: &[&[&str]] = &[
    &["session", "list", "--json"],
    &["session", "list"],
    &["session", "list", "--limit", "2", "--json"],
    &["session", "list", "--risk", "medium", "--json"],
    &["session", "list", "--since", "2026-11-25", "--json"],
    &["session", "list", "--project", "web", "--json"],
    &["session", "show", "ses_01jdemo", "--json"],
    &["risk", "ses_pa", "--json"],
    &["graph", "ses_ch", "--format", "json"],
];

fn answers(home: &Path) -> Vec<String> {
    QUERIES.iter().map(|q| ok(home, q)).collect()
}

fn index_dir(home: &Path) -> std::path::PathBuf {
    home.join("log").join("index")
}

#[test]
fn every_query_answers_the_same_after_the_index_is_deleted() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    record_sessions(home);
    // A new store's index starts complete: what the writers and `record` appended
    // (heads, and facts folded while recording) is the whole index, read without
    // looking at any stream.
    assert!(
        index_dir(home).join("sessions.snap").is_file(),
        "a new store starts its index"
    );
    let mut recorded = store(home).index().unwrap().entries();
    let first = answers(home);
    let listed: Vec<serde_json::Value> = first[0]
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = listed
        .iter()
        .map(|r| r["session"].as_str().unwrap())
        .collect();
    // Newest first.
    assert_eq!(
        ids,
        [
            "ses_child",
            "ses_parent",
            "ses_01jdemo8xk4rate1imit0000a",
            "ses_early"
        ]
    );
    std::fs::remove_dir_all(index_dir(home)).unwrap();
    assert_eq!(answers(home), first, "answers after a rebuild");
    // The entries rebuilt from the streams are the ones recorded.
    let mut rebuilt_entries = store(home).index().unwrap().entries();
    recorded.sort_by(|a, b| a.session.cmp(&b.session));
    rebuilt_entries.sort_by(|a, b| a.session.cmp(&b.session));
    assert_eq!(
        rebuilt_entries, recorded,
        "the index recorded is the one rebuilt"
    );
    let built = std::fs::read(index_dir(home).join("sessions.snap")).unwrap();

    // `log reindex` gives the same bytes again; verification agrees with it.
    ok(home, &["log", "reindex"]);
    assert_eq!(
        std::fs::read(index_dir(home).join("sessions.snap")).unwrap(),
        built
    );
    ok(home, &["log", "verify"]);
}

#[test]
fn listings_read_the_index_and_verification_checks_it() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();
    record_sessions(home);
    ok(home, &["session", "list"]);
    // Facts that claim the session's current head but are not what its events say.
    let st = store(home);
    let entry = st.index().unwrap().get("ses_early").unwrap();
    let mut facts = entry.fresh_facts().unwrap().clone();
    facts.risk_score = 99;
    facts.risk_level = 3;
    st.index_append(
        &[Record::Facts {
            session: "ses_early".into(),
            at: FactsAt {
                next_seq: entry.next_seq,
                head: entry.head,
                facts,
            },
        }],
        true,
    )
    .unwrap();
    let listed = ok(home, &["session", "list", "--risk", "critical", "--json"]);
    assert!(
        listed.contains(r#""session":"ses_early""#) && listed.contains(r#""risk_score":99"#),
        "the listing reads the index: {listed}"
    );
    let (code, out, _) = run({
        let mut c = tacho(home);
        c.args(["log", "verify", "--json"]);
        c
    });
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("the session index's facts differ from the events")
            && out.contains(r#""session":"ses_early""#),
        "{out}"
    );
    ok(home, &["log", "reindex"]);
    ok(home, &["log", "verify"]);
    assert_eq!(
        ok(home, &["session", "list", "--risk", "critical", "--json"]),
        ""
    );
    // A head the stream never had (ahead of it), which no writer moves while
    // verification runs: checked again after the streams are read, it stands.
    let entry = st.index().unwrap().get("ses_early").unwrap();
    st.index_append(
        &[Record::Head {
            session: "ses_early".into(),
            next_seq: entry.next_seq + 5,
            head: [7; 32],
        }],
        true,
    )
    .unwrap();
    let (code, out, _) = run({
        let mut c = tacho(home);
        c.args(["log", "verify", "--json"]);
        c
    });
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "the session index says {} events (head {})",
            entry.next_seq + 5,
            "07".repeat(32)
        )),
        "{out}"
    );
    ok(home, &["log", "reindex"]);
    ok(home, &["log", "verify"]);
}

/// 16 processes at a time create sessions (one `tacho record` each, as hooks do: a
/// pack each, merged as they pile up) while `session list` runs in a loop, compacting
/// the index each time, with `log verify` and a read of a listed session: every
/// listing succeeds, never shows a session twice, never loses one it showed, and the
/// last one shows them all; verification and reads never fail.
#[test]
fn sixteen_writers_creating_sessions_while_listing() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().to_path_buf();
    const WRITERS: usize = 16;
    const EACH: usize = 24;
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let lister = {
        let home = home.clone();
        let stop = stop.clone();
        let started = started.clone();
        std::thread::spawn(move || {
            let mut seen: BTreeSet<String> = BTreeSet::new();
            let mut listings = 0;
            // Lists until the writers are done, and at least once while they write.
            while !(stop.load(Ordering::Relaxed) && listings >= 2) {
                let t0 = std::time::Instant::now();
                // Compacting at every listing races compaction with the appenders.
                let done = tacho(&home)
                    .args(["session", "list", "--json"])
                    .env("TACHO_INDEX_COMPACT_BYTES", "1")
                    .output()
                    .unwrap();
                assert!(
                    done.status.success(),
                    "session list: {}",
                    String::from_utf8_lossy(&done.stderr)
                );
                let out = String::from_utf8(done.stdout).unwrap();
                let ids: Vec<String> = out
                    .lines()
                    .map(|l| {
                        let v: serde_json::Value = serde_json::from_str(l).unwrap();
                        assert_ne!(v["status"], "damaged", "{l}");
                        v["session"].as_str().unwrap().to_string()
                    })
                    .collect();
                let now: BTreeSet<String> = ids.iter().cloned().collect();
                assert_eq!(now.len(), ids.len(), "a session listed twice: {ids:?}");
                assert!(
                    seen.is_subset(&now),
                    "sessions vanished: {:?}",
                    seen.difference(&now).collect::<Vec<_>>()
                );
                seen = now;
                // Verification and reads race the packs' merges too: a pack removed
                // after it was listed is never an error.
                let verified = tacho(&home)
                    .args(["log", "verify", "--json"])
                    .output()
                    .unwrap();
                assert!(
                    verified.status.success() || seen.is_empty(),
                    "log verify: {}{}",
                    String::from_utf8_lossy(&verified.stdout),
                    String::from_utf8_lossy(&verified.stderr)
                );
                if let Some(s) = seen.iter().next() {
                    let g = tacho(&home)
                        .args(["graph", s, "--format", "json"])
                        .output()
                        .unwrap();
                    assert!(
                        g.status.success(),
                        "graph {s}: {}",
                        String::from_utf8_lossy(&g.stderr)
                    );
                }
                listings += 1;
                started.store(true, Ordering::Relaxed);
                eprintln!(
                    "listing {listings}: {} rows in {:?}",
                    seen.len(),
                    t0.elapsed()
                );
            }
        })
    };
    while !started.load(Ordering::Relaxed) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let home = home.clone();
            std::thread::spawn(move || {
                for i in 0..EACH {
                    let s = format!("ses_w{w:02}_{i:02}");
                    let input = format!(
                        "{{\"type\":\"session.start\",\"session\":\"{s}\",\"ts\":\"2026-11-30T10:{w:02}:{i:02}Z\",\"agent\":\"coder\"}}\n\
                         {{\"type\":\"tool.call\",\"session\":\"{s}\",\"ts\":\"2026-11-30T10:{w:02}:{i:02}.5Z\",\"call_id\":\"c\",\"tool\":\"bash\"}}\n"
                    );
                    let (code, _, err) = run_with_stdin(&home, &["record"], &input);
                    assert_eq!(code, 0, "{s}: {err}");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    lister.join().unwrap();
    let out = ok(&home, &["session", "list", "--json"]);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), WRITERS * EACH);
    assert!(rows.iter().all(|r| r["events"] == 2), "{out}");
    let ids: BTreeSet<&str> = rows
        .iter()
        .map(|r| r["session"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), WRITERS * EACH);
    ok(&home, &["log", "verify"]);
}

/// Processes appending to sessions that exist (one `tacho record` each, as hooks do:
/// a `Dirty` record, the batch, a `Head` record) while `log verify` runs in a loop:
/// verification reads the index before it reads the streams, and a stream that grew
/// meanwhile is not a finding; at the end everything verifies.
#[test]
fn writers_extending_sessions_while_verifying() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().to_path_buf();
    const WRITERS: usize = 8;
    const EACH: usize = 20;
    let starts: String = (0..WRITERS)
        .map(|w| {
            format!(
                "{{\"type\":\"session.start\",\"session\":\"ses_x{w:02}\",\"ts\":\"2026-11-30T10:00:{w:02}Z\",\"agent\":\"coder\"}}\n"
            )
        })
        .collect();
    let (code, _, err) = run_with_stdin(&home, &["record"], &starts);
    assert_eq!(code, 0, "{err}");
    let stop = Arc::new(AtomicBool::new(false));
    let verifier = {
        let home = home.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut runs = 0;
            while !stop.load(Ordering::Relaxed) || runs < 2 {
                let verified = tacho(&home)
                    .args(["log", "verify", "--json"])
                    .output()
                    .unwrap();
                assert!(
                    verified.status.success(),
                    "log verify while sessions grow: {}{}",
                    String::from_utf8_lossy(&verified.stdout),
                    String::from_utf8_lossy(&verified.stderr)
                );
                runs += 1;
            }
            runs
        })
    };
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let home = home.clone();
            std::thread::spawn(move || {
                for i in 0..EACH {
                    let input = format!(
                        "{{\"type\":\"tool.call\",\"session\":\"ses_x{w:02}\",\"ts\":\"2026-11-30T10:01:{i:02}Z\",\"call_id\":\"c{i}\",\"tool\":\"bash\"}}\n"
                    );
                    let (code, _, err) = run_with_stdin(&home, &["record"], &input);
                    assert_eq!(code, 0, "ses_x{w:02} #{i}: {err}");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let runs = verifier.join().unwrap();
    eprintln!("{runs} verifications while {WRITERS} writers appended");
    let out = ok(&home, &["session", "list", "--json"]);
    assert!(
        out.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .all(|r| r["events"] == EACH as u64 + 1),
        "{out}"
    );
    ok(&home, &["log", "verify"]);
}
