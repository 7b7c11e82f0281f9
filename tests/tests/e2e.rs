//! End-to-end tests: real `tacho` processes, killed, racing and reading a store
//! written by format version 1.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tacho_schema::{EventBody, parse_json_line};
use tacho_store::{Durability, Severity, Store, StoreOptions, hex};
use tacho_tests::{repo_root, run, tacho};

fn store(home: &Path) -> Store {
    Store::open(home.join("log"), StoreOptions::default()).unwrap()
}

fn start_line(session: &str) -> String {
    format!(
        r#"{{"type":"session.start","session":"{session}","ts":"2026-11-30T10:00:00Z","agent":"coder"}}"#
    )
}

fn call_line(session: &str, tag: &str, i: u64, pad: usize) -> String {
    format!(
        r#"{{"type":"tool.call","session":"{session}","ts":{},"call_id":"{tag}-{i}","tool":"bash","target":"{}"}}"#,
        1_796_032_800_000u64 + i,
        "x".repeat(pad)
    )
}

fn call_id(body: &EventBody) -> Option<&str> {
    match body {
        EventBody::ToolCall(c) => Some(&c.call_id),
        _ => None,
    }
}

fn errors(store: &Store, session: &str) -> Vec<String> {
    store
        .verify_session(session, true)
        .unwrap()
        .findings
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.message)
        .collect()
}

/// Spawns `tacho record --json` reading from a pipe.
fn spawn_recorder(home: &Path, args: &[&str], lock_timeout_ms: u64) -> Child {
    tacho(home)
        .args(["record", "--json"])
        .args(args)
        .env("TACHO_LOCK_TIMEOUT_MS", lock_timeout_ms.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Collects `recorded` acknowledgements from a recorder's stdout on a thread.
fn ack_reader(child: &mut Child) -> mpsc::Receiver<serde_json::Value> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    rx
}

/// SIGKILL real recorder processes while they append, with batches of one event and
/// of seven. Every batch acknowledged on stdout was synced, so it must survive; the
/// torn tail left by the kill is repaired by the next writer; the log verifies.
/// `TACHO_KILL_ITERATIONS` raises the number of rounds (CI runs a few).
#[test]
fn sigkill_mid_append_loses_no_acknowledged_batch() {
    let rounds: u64 = std::env::var("TACHO_KILL_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let session = "ses_kill";
    let mut torn_tails = 0;
    for round in 0..rounds {
        let home = tempfile::tempdir().unwrap();
        let batch = if round % 2 == 0 { "1" } else { "7" };
        let mut child = spawn_recorder(
            home.path(),
            &["--session", session, "--batch-lines", batch],
            10_000,
        );
        let mut stdin = child.stdin.take().unwrap();
        let acks = ack_reader(&mut child);
        let feeder = std::thread::spawn(move || {
            let _ = writeln!(stdin, "{}", start_line(session));
            for i in 1..200_000u64 {
                if writeln!(
                    stdin,
                    "{}",
                    call_line(session, "c", i, (i % 37) as usize * 20)
                )
                .is_err()
                {
                    break;
                }
            }
        });
        // Wait for a first acknowledgement (a kill before any proves nothing), let it
        // run for a while longer, then kill it without warning.
        let mut acked_last: Option<u64> = acks
            .recv_timeout(Duration::from_secs(10))
            .ok()
            .and_then(|v| v["last_seq"].as_u64());
        let run_for = Duration::from_millis(30 + (round * 37) % 120);
        let started = Instant::now();
        while started.elapsed() < run_for {
            if let Ok(v) = acks.recv_timeout(Duration::from_millis(5)) {
                acked_last = v["last_seq"].as_u64().or(acked_last);
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // Acknowledgements printed before the kill count too.
        while let Ok(v) = acks.recv_timeout(Duration::from_millis(200)) {
            acked_last = v["last_seq"].as_u64().or(acked_last);
        }
        feeder.join().unwrap();
        let acked_last = acked_last.expect("the recorder acknowledged nothing before the kill");

        let st = store(home.path());
        assert!(
            errors(&st, session).is_empty(),
            "round {round}: {:?}",
            errors(&st, session)
        );
        let mut n = 0u64;
        st.read_session(session, |e| {
            assert_eq!(e.seq, n);
            if e.seq > 0 {
                let id = format!("c-{}", e.seq);
                assert_eq!(call_id(&e.event.body), Some(id.as_str()), "round {round}");
            }
            n += 1;
        })
        .unwrap();
        assert!(
            n > acked_last,
            "round {round}: {n} events survived, seq {acked_last} was acknowledged"
        );
        // The next writer repairs whatever tail the kill left, then the log is spotless.
        let w = st.writer(session).unwrap();
        assert_eq!(w.next_seq(), n);
        torn_tails += w.recovered().len();
        drop(w);
        let rep = st.verify_session(session, true).unwrap();
        assert!(rep.findings.is_empty(), "round {round}: {:?}", rep.findings);
    }
    eprintln!("{rounds} kills, {torn_tails} left a torn tail that was repaired");
}

/// One `tacho record` input of many sessions under a low open-files limit, recorded
/// both ways: as one input (its new sessions go into packs of up to 512 sessions here,
/// `TACHO_PACK_SESSIONS_MAX`, so a full pack is published and a new one begun) and
/// with `--batch-lines`
/// (a stream per session, at most 64 writers open at once). Every session is recorded,
/// none twice, the store verifies, and both stores have the same digest: a packed
/// session has the events, sequence numbers and chain head it would have in a stream
/// of its own. Before writers were bounded, the input failed with "Too many open
/// files" (a writer per session stayed open). `TACHO_MANY_SESSIONS=50000` runs issue
/// 13's size.
#[test]
fn an_input_of_many_sessions_stays_within_the_open_files_limit() {
    let n: usize = std::env::var("TACHO_MANY_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("many.jsonl");
    let mut text = String::new();
    for i in 0..n {
        text.push_str(&format!(
            "{{\"type\":\"session.start\",\"session\":\"ses_many_{i:06}\",\"ts\":{}}}\n{{\"type\":\"session.end\",\"session\":\"ses_many_{i:06}\",\"ts\":{},\"reason\":\"completed\"}}\n",
            1_000 + i,
            2_000 + i
        ));
    }
    std::fs::write(&input, text).unwrap();
    let mut digests = Vec::new();
    const PACK_SESSIONS: usize = 512;
    for (layout, flags) in [("packed", ""), ("streams", "--batch-lines 100000000")] {
        let home = tmp.path().join(layout);
        let mut c = std::process::Command::new("sh");
        c.env_clear()
            .env("TACHO_HOME", &home)
            .env("TACHO_PACK_SESSIONS_MAX", PACK_SESSIONS.to_string())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .arg("-c")
            .arg(format!(
                "ulimit -n 256 && exec \"$0\" record --snapshots off {flags} \"$1\""
            ))
            .arg(tacho_tests::tacho_bin())
            .arg(&input);
        let (code, out, err) = run(c);
        assert_eq!(code, 0, "{layout}: {out}{err}");
        let dirs = std::fs::read_dir(home.join("log/streams")).unwrap().count();
        let packs = std::fs::read_dir(home.join("log/packs"))
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "tpack")
                })
                .count()
            })
            .unwrap_or(0);
        // (Past 16 packs, the smaller ones are merged after a publication.)
        let expected_packs = n.div_ceil(PACK_SESSIONS);
        if layout == "packed" {
            assert_eq!(dirs, 0, "{layout}");
            assert!(
                (1..=expected_packs.min(tacho_store::PACKS_BEFORE_MERGE + 1)).contains(&packs)
                    && (expected_packs == 1 || packs > 1),
                "{layout}: {packs} packs for {n} sessions"
            );
        } else {
            assert_eq!((dirs, packs), (n, 0), "{layout}");
        }
        let store = Store::open(home.join("log"), StoreOptions::default()).unwrap();
        let sessions = store.sessions().unwrap();
        assert_eq!(sessions.len(), n, "{layout}");
        let report = store.verify_all(true).unwrap();
        assert!(report.is_clean(), "{layout}");
        assert_eq!(
            report.streams.iter().map(|s| s.events).sum::<u64>(),
            2 * n as u64
        );
        digests.push(report.store_digest());
        // Every session's head reached the session index when it was recorded, with
        // the facts of its session: no entry is left for the first listing to read
        // and fold.
        let index = store.index().unwrap();
        assert_eq!(index.entries().len(), n);
        for e in index.entries() {
            assert!(!e.dirty && e.next_seq == 2, "{layout}: {e:?}");
            let facts = e.fresh_facts().expect("facts recorded with the head");
            assert_eq!(facts.events, 2, "{layout}: {e:?}");
        }
        // And `log verify` finds them equal to the facts folded from the events.
        let mut c = std::process::Command::new(tacho_tests::tacho_bin());
        c.env("TACHO_HOME", &home).args(["log", "verify"]);
        let (code, out, err) = run(c);
        assert_eq!(code, 0, "{layout}: {out}{err}");
    }
    assert_eq!(digests[0], digests[1]);
}

#[test]
fn concurrent_processes_record_different_sessions() {
    let home = tempfile::tempdir().unwrap();
    let per = 300u64;
    let mut children = Vec::new();
    for p in 0..4 {
        let s = format!("ses_par{p}");
        let mut child = spawn_recorder(home.path(), &["--batch-lines", "5"], 10_000);
        let mut stdin = child.stdin.take().unwrap();
        let lines: Vec<String> = std::iter::once(start_line(&s))
            .chain((1..per).map(|i| call_line(&s, "c", i, 64)))
            .collect();
        let feeder = std::thread::spawn(move || {
            for l in lines {
                writeln!(stdin, "{l}").unwrap();
            }
        });
        children.push((s, child, feeder));
    }
    let st = store(home.path());
    for (s, child, feeder) in children {
        feeder.join().unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{s}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut n = 0;
        st.read_session(&s, |_| n += 1).unwrap();
        assert_eq!(n, per);
        assert!(errors(&st, &s).is_empty());
    }
    assert_eq!(st.sessions().unwrap().len(), 4);
}

/// Hook processes of parallel tool calls write the same session. They must take turns:
/// a writer that cannot get the session within its timeout fails with exit code 3 and
/// names the holder; writers that can wait do so, and their batches never interleave.
#[test]
fn writers_of_the_same_session_take_turns_and_never_interleave() {
    let home = tempfile::tempdir().unwrap();
    let s = "ses_same";
    let mut first = tacho(home.path());
    first.args(["record", "-"]).stdin(Stdio::piped());
    let mut first = first.spawn().unwrap();
    writeln!(first.stdin.as_mut().unwrap(), "{}", start_line(s)).unwrap();
    drop(first.stdin.take());
    assert!(first.wait().unwrap().success());

    // A holds the session open: it has recorded one batch and keeps reading stdin.
    let mut holder = spawn_recorder(home.path(), &["--session", s, "--batch-lines", "1"], 10_000);
    let holder_pid = holder.id();
    let acks = ack_reader(&mut holder);
    writeln!(
        holder.stdin.as_mut().unwrap(),
        "{}",
        call_line(s, "hold", 1, 0)
    )
    .unwrap();
    acks.recv_timeout(Duration::from_secs(20))
        .expect("holder recorded its batch");

    // B cannot wait long enough.
    let mut impatient = tacho(home.path());
    impatient
        .args(["record", "--session", s, "-"])
        .env("TACHO_LOCK_TIMEOUT_MS", "300")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut b = impatient.spawn().unwrap();
    writeln!(b.stdin.as_mut().unwrap(), "{}", call_line(s, "b", 1, 0)).unwrap();
    drop(b.stdin.take());
    let out = b.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("being written by another process"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("pid {holder_pid}")), "{stderr}");

    // C1..C3 can wait; they start while A still holds the session.
    let per = 40u64;
    let mut waiting = Vec::new();
    for p in 0..3 {
        let mut c = spawn_recorder(home.path(), &["--session", s], 30_000);
        let mut stdin = c.stdin.take().unwrap();
        let tag = format!("w{p}");
        for i in 0..per {
            writeln!(stdin, "{}", call_line(s, &tag, i, 200)).unwrap();
        }
        drop(stdin); // the whole input is one batch
        waiting.push(c);
    }
    std::thread::sleep(Duration::from_millis(200));
    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    for c in waiting {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let st = store(home.path());
    assert!(errors(&st, s).is_empty());
    let mut ids = Vec::new();
    st.read_session(s, |e| {
        if let Some(id) = call_id(&e.event.body) {
            ids.push(id.to_string());
        }
    })
    .unwrap();
    assert_eq!(ids.len() as u64, 1 + 3 * per);
    assert_eq!(ids[0], "hold-1");
    // Each waiting writer's batch is one contiguous run, in its own order.
    for chunk in ids[1..].chunks(per as usize) {
        let tag = chunk[0].split('-').next().unwrap().to_string();
        let expect: Vec<String> = (0..per).map(|i| format!("{tag}-{i}")).collect();
        assert_eq!(chunk, expect.as_slice());
    }
}

#[test]
fn a_malformed_line_is_located_and_nothing_is_recorded() {
    let home = tempfile::tempdir().unwrap();
    let file = home.path().join("bad.jsonl");
    std::fs::write(
        &file,
        format!(
            "{}\n{}\n{{\"type\":\"tool.result\",\"session\":\"ses_bad\",\"call_id\":\"c-1\",\"status\":\"fine\"}}\n",
            start_line("ses_bad"),
            call_line("ses_bad", "c", 1, 0)
        ),
    )
    .unwrap();
    let mut c = tacho(home.path());
    c.args(["record"]).arg(&file);
    let (code, stdout, stderr) = run(c);
    assert_eq!(code, 2, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("bad.jsonl: line 3, column"), "{stderr}");
    assert!(stderr.contains("unknown variant `fine`"), "{stderr}");
    assert!(stderr.contains("nothing was recorded"), "{stderr}");
    assert!(store(home.path()).sessions().unwrap().is_empty());
}

// ---------------------------------------------------------------------------------
// Format version 1, forever.

fn fixture_dir() -> PathBuf {
    repo_root().join("tests/fixtures/store-v1")
}

/// The digest of the committed v1 fixture store. It never changes: a change means the
/// bytes of version 1 are no longer read as they were written.
const STORE_V1_DIGEST: &str = "d24c4d7d1b8566774ddd2841a660f49c9d4171bab1e1e67c2b276b43d9c2c9a2";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The events of the fixture: the bundled example session, and a long synthetic session
/// of every kind written with small segments, so the fixture has sealed segments too.
/// (session, its events, how many events per appended batch)
type FixtureSession = (String, Vec<(i64, EventBody)>, usize);

fn fixture_sources() -> Vec<FixtureSession> {
    let text = std::fs::read_to_string(fixture_dir().join("sources/rate-limit.jsonl")).unwrap();
    let mut a = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let p = parse_json_line(l, i + 1).unwrap();
        a.push((p.time_unix_ns.unwrap(), p.body));
    }
    let text = std::fs::read_to_string(fixture_dir().join("sources/all-kinds.jsonl")).unwrap();
    let mut b = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let p = parse_json_line(l, i + 1).unwrap();
        b.push((p.time_unix_ns.unwrap(), p.body));
    }
    vec![
        ("ses_01jdemo8xk4rate1imit0000a".into(), a, 7),
        ("ses_fixture_all_kinds".into(), b, 3),
    ]
}

/// The store a fixture is written into (small segments, so it has sealed ones), only
/// when asked to and never over an existing fixture.
fn new_fixture_store(root: &Path) -> Store {
    assert_eq!(std::env::var("TACHO_WRITE_FIXTURE").as_deref(), Ok("1"));
    assert!(
        !root.exists(),
        "{} exists: a fixture is never rewritten",
        root.display()
    );
    Store::open(
        root,
        StoreOptions {
            segment_bytes_max: 2048,
            ..StoreOptions::default()
        },
    )
    .unwrap()
}

/// Writes the fixture store. Only ever run to create a new version's fixture:
/// `TACHO_WRITE_FIXTURE=1 cargo test -p tacho-tests write_fixture_store -- --ignored`.
#[test]
#[ignore]
fn write_fixture_store() {
    let root = fixture_dir().join("log");
    let st = new_fixture_store(&root);
    for (session, events, batch) in fixture_sources() {
        let mut w = st.writer(&session).unwrap();
        for chunk in events.chunks(batch) {
            w.append_batch(chunk, Durability::Sync).unwrap();
        }
    }
    std::fs::remove_dir_all(root.join("locks")).unwrap();
    println!(
        "digest {}",
        hex(&st.verify_all(true).unwrap().store_digest())
    );
}

/// A copy of a golden store, checked: it verifies clean with the digest pinned for it,
/// holds the fixture's sessions event for event, and the CLI prints the same digest.
fn golden_store(fixture: &Path, digest: &str) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture.join("log"), &dir.path().join("log"));
    let st = store(dir.path());
    let report = st.verify_all(true).unwrap();
    assert!(
        report.is_clean() && st.verify_packs().is_empty(),
        "{:?}",
        report.findings().collect::<Vec<_>>()
    );
    assert_eq!(hex(&report.store_digest()), digest);
    let sources = fixture_sources();
    assert_eq!(st.sessions().unwrap().len(), sources.len());
    for (session, events, _) in sources {
        let mut read = Vec::new();
        st.read_session(&session, |e| {
            read.push((e.event.time_unix_ns, e.event.body))
        })
        .unwrap();
        assert_eq!(read, events, "{session}");
    }
    let mut c = tacho(dir.path());
    c.args(["log", "verify"]);
    let (code, stdout, stderr) = run(c);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains(digest));
    (dir, st)
}

#[test]
fn golden_store_v1_reads_forever() {
    let (_dir, st) = golden_store(&fixture_dir(), STORE_V1_DIGEST);
    // The long session spans sealed segments.
    let segs = st.segments("ses_fixture_all_kinds").unwrap();
    assert!(segs.len() >= 3, "{} segments", segs.len());
}

fn packed_fixture_dir() -> PathBuf {
    repo_root().join("tests/fixtures/store-v1-packed")
}

/// The digest of the committed v1 store with a pack (SPEC.md §1.1).
const PACKED_V1_DIGEST: &str = "da8089b95810bc6a4380c5eb04d2cc68222363f058f725ca20b679c0999a08d1";

/// The events of the fixture sessions that the packed fixture writes with a writer
/// after the pack: the example's last 8.
const PACKED_FIXTURE_TAIL: usize = 8;

/// Writes the packed fixture store: the fixture's sessions in one pack, staged in
/// pieces that interleave the sessions (so each has several packed segments), then
/// the example's last events appended by a writer after its packed segments. Only
/// ever run once: `TACHO_WRITE_FIXTURE=1 cargo test -p tacho-tests
/// write_packed_fixture_store -- --ignored`.
#[test]
#[ignore]
fn write_packed_fixture_store() {
    let root = packed_fixture_dir().join("log");
    let st = new_fixture_store(&root);
    let sources = fixture_sources();
    let (a, a_events, a_batch) = &sources[0];
    let (b, b_events, b_batch) = &sources[1];
    let (a_packed, a_tail) = a_events.split_at(a_events.len() - PACKED_FIXTURE_TAIL);
    let mut pack = st.pack_builder();
    let mut a_chunks = a_packed.chunks(*a_batch);
    let mut b_chunks = b_events.chunks(*b_batch);
    loop {
        let (x, y) = (a_chunks.next(), b_chunks.next());
        if x.is_none() && y.is_none() {
            break;
        }
        if let Some(x) = x {
            pack.stage(a, x).unwrap();
        }
        if let Some(y) = y {
            pack.stage(b, y).unwrap();
        }
    }
    pack.publish().unwrap();
    st.writer(a)
        .unwrap()
        .append_batch(a_tail, Durability::Sync)
        .unwrap();
    for d in ["locks", "index"] {
        std::fs::remove_dir_all(root.join(d)).unwrap();
    }
    std::fs::remove_file(root.join("packs/.lock")).unwrap();
    println!(
        "digest {}",
        hex(&st.verify_all(true).unwrap().store_digest())
    );
}

#[test]
fn golden_packed_store_v1_reads_forever() {
    let (_dir, st) = golden_store(&packed_fixture_dir(), PACKED_V1_DIGEST);
    for (session, _, _) in fixture_sources() {
        let segs = st.segments(&session).unwrap();
        assert!(segs.len() >= 3, "{session}: {} segments", segs.len());
    }
    // The example continues after its packed segments in a segment file.
    let segs = st.segments("ses_01jdemo8xk4rate1imit0000a").unwrap();
    assert!(segs.last().unwrap().packed.is_none());
    assert!(segs[..segs.len() - 1].iter().all(|s| s.packed.is_some()));
}

/// Replays the fuzz corpus and every crash artifact ever found through the fuzz
/// target's body, so a fixed crash stays fixed without running the fuzzer.
#[test]
fn fuzz_corpus_and_artifacts_replay_without_panics() {
    let mut replayed = 0;
    for dir in ["fuzz/corpus", "fuzz/artifacts"] {
        let Ok(targets) = std::fs::read_dir(repo_root().join(dir)) else {
            continue;
        };
        for target in targets {
            let target = target.unwrap().path();
            if !target.is_dir() {
                continue;
            }
            for input in std::fs::read_dir(&target).unwrap() {
                let path = input.unwrap().path();
                if path.is_file() {
                    let data = std::fs::read(&path).unwrap();
                    tacho_tests::fuzz_segment_decoder(&data);
                    replayed += 1;
                }
            }
        }
    }
    assert!(replayed >= 50, "only {replayed} corpus inputs found");
}

/// Every JSON line shown in SPEC.md is a valid event: the document cannot drift from
/// the schema.
#[test]
fn spec_examples_parse() {
    let spec = std::fs::read_to_string(repo_root().join("SPEC.md")).unwrap();
    let mut in_json = false;
    let mut parsed = 0;
    for (i, line) in spec.lines().enumerate() {
        if line.starts_with("```json") {
            in_json = true;
        } else if line.starts_with("```") {
            in_json = false;
        } else if in_json && !line.trim().is_empty() {
            let p = parse_json_line(line, i + 1).unwrap_or_else(|e| panic!("SPEC.md: {e}"));
            assert!(p.session.is_some() && p.time_unix_ns.is_some());
            parsed += 1;
        }
    }
    assert!(parsed >= 5, "{parsed} examples");
}

mod incremental {
    use super::*;
    use proptest::prelude::*;
    use tacho_projections::{ExecutionGraph, SessionSummary, assess};

    fn fixture_store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&fixture_dir().join("log"), &dir.path().join("log"));
        let st = store(dir.path());
        (dir, st)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Projections brought up to date in random chunks, each read from its log
        /// position (whole segments before it are skipped), equal the projection built
        /// in one pass.
        #[test]
        fn chunked_projections_equal_one_pass(cuts in proptest::collection::vec(0u64..120, 0..8)) {
            let (_dir, st) = fixture_store();
            for session in ["ses_fixture_all_kinds", "ses_01jdemo8xk4rate1imit0000a"] {
                let mut whole = ExecutionGraph::new(session);
                st.read_session(session, |e| whole.apply(e.seq, &e.event)).unwrap();
                let mut cuts = cuts.clone();
                cuts.sort();
                cuts.push(u64::MAX);
                let mut g = ExecutionGraph::new(session);
                for end in cuts {
                    let from = g.next_seq;
                    st.read_session_from(session, from, |e| {
                        if e.seq < end {
                            assert_eq!(e.seq, g.next_seq, "events arrive in order, none skipped");
                            g.apply(e.seq, &e.event);
                        }
                    })
                    .unwrap();
                }
                prop_assert_eq!(&g, &whole);
                // Built from borrowed views of the payloads, in place: the same graph.
                let mut viewed = ExecutionGraph::new(session);
                st.read_session_views(session, 0, |seq, at, v| viewed.apply_view(seq, at, v)).unwrap();
                prop_assert_eq!(&viewed, &whole);
                prop_assert_eq!(SessionSummary::from_graph(&g), SessionSummary::from_graph(&whole));
                prop_assert_eq!(
                    serde_json::to_string(&assess(&g)).unwrap(),
                    serde_json::to_string(&assess(&whole)).unwrap()
                );
            }
        }
    }
}

/// `tacho graph --format mermaid` renders: every diagram, including one whose labels
/// hold quotes, brackets, `#`, backticks, HTML and line breaks, goes through the real
/// Mermaid parser (npm `mermaid`, run by Node; `.ci/run` installs it into
/// `tests/mermaid/`). Without Node or that install the test says so and passes,
/// except in CI (`CI` set), where it fails.
#[test]
fn mermaid_output_parses_with_the_real_mermaid_parser() {
    let dir = repo_root().join("tests/mermaid");
    let node_ok = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !node_ok || !dir.join("node_modules/mermaid").is_dir() {
        let msg = "the Mermaid check needs Node and `npm ci` in tests/mermaid (.ci/run does both)";
        tacho_tests::skip_without(msg);
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let hostile = concat!(
        "{\"type\":\"session.start\",\"ts\":1000,\"agent\":\"a \\\"quoted\\\" <agent>\",\"title\":\"#1 `tick` & [brackets] {braces}\"}\n",
        "{\"type\":\"step.start\",\"ts\":1001,\"step\":1,\"agent\":\"x-->y\"}\n",
        "{\"type\":\"tool.call\",\"ts\":1002,\"call_id\":\"c1\",\"tool\":\"bash\",\"target\":\"echo \\\"a|b\\\" > out; grep -E '[0-9]+' <in>\\nsecond line\"}\n",
        "{\"type\":\"tool.result\",\"ts\":1003,\"call_id\":\"c1\",\"status\":\"error\",\"error\":\"<script>alert(1)</script>\"}\n",
        "{\"type\":\"tool.call\",\"ts\":1004,\"call_id\":\"c2\",\"tool\":\"read\",\"target\":\"src/%23weird#file;name().ts\"}\n",
        "{\"type\":\"step.finish\",\"ts\":1005,\"step\":1}\n",
        "{\"type\":\"session.end\",\"ts\":1006,\"reason\":\"aborted\"}\n",
    );
    let mut rec = tacho(home.path());
    rec.args(["record", "--session", "ses_hostile", "-"])
        .stdin(Stdio::piped());
    let mut child = rec.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(hostile.as_bytes())
        .unwrap();
    assert!(child.wait().unwrap().success());
    for src in ["rate-limit.jsonl", "all-kinds.jsonl"] {
        let mut c = tacho(home.path());
        c.args(["record"])
            .arg(fixture_dir().join("sources").join(src));
        assert_eq!(run(c).0, 0);
    }
    let mut files = Vec::new();
    for s in ["ses_hostile", "ses_01jdemo", "ses_fixture"] {
        let mut c = tacho(home.path());
        c.args(["graph", s, "--format", "mermaid"]);
        let (code, out, err) = run(c);
        assert_eq!(code, 0, "{err}");
        let f = home.path().join(format!("{s}.mmd"));
        std::fs::write(&f, out).unwrap();
        files.push(f);
    }
    let out = std::process::Command::new("node")
        .arg(dir.join("check.mjs"))
        .args(&files)
        .current_dir(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("ok ").count(), 3, "{text}");
}

/// A closed stdout is a normal exit for every kind of output, JSON included
/// (`tacho fingerprint --json | head -1`).
#[test]
fn a_closed_stdout_is_success_for_json_output_too() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    for i in 0..200 {
        std::fs::write(ws.join(format!("file-{i:03}.txt")), "x").unwrap();
    }
    for args in [
        vec!["fingerprint", "--json"],
        vec!["fingerprint"],
        vec!["session", "list", "--json"],
        vec!["log", "stats", "--json"],
    ] {
        let mut c = tacho_tests::tacho(&tmp.path().join("home"));
        c.current_dir(&ws)
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = c.spawn().unwrap();
        // The reader goes away before tacho writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A record that cannot be read to its end is not called paired or balanced: replay
/// verification says those checks were not made.
#[test]
fn replay_verify_of_an_unreadable_record_checks_nothing_it_did_not_read() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let example = tacho_tests::repo_root().join("examples/sessions/rate-limit.jsonl");
    let mut c = tacho_tests::tacho(&home);
    c.args(["record", "--snapshots", "off", "--batch-lines", "1"])
        .arg(&example);
    let (code, _, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let dir = std::fs::read_dir(home.join("log/streams"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let seg = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&seg, bytes).unwrap();
    let mut c = tacho_tests::tacho(&home);
    c.args([
        "session",
        "replay",
        "ses_01jdemo8xk4rate1imit0000a",
        "--mode",
        "verify",
    ]);
    let (code, out, _) = run(c);
    assert_eq!(code, 1, "{out}");
    assert!(!out.contains("paired with their calls: ok"), "{out}");
    assert!(
        out.contains("tool results paired with their calls: NOT CHECKED"),
        "{out}"
    );
}

/// Every `--json` output is JSON Lines whose records carry a `type`, with each Unix
/// nanosecond time beside its RFC 3339 form.
#[test]
fn every_json_record_has_a_type_and_readable_times() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let ws = ws.canonicalize().unwrap();
    let input = format!(
        "{}\n{}\n{}\n{}\n{}\n",
        format_args!(
            r#"{{"type":"session.start","session":"ses_j","workspace":"{}","agent":"a"}}"#,
            ws.display()
        ),
        r#"{"type":"step.start","session":"ses_j","step":1}"#,
        r#"{"type":"tool.call","session":"ses_j","call_id":"c","tool":"bash","target":"cargo test"}"#,
        r#"{"type":"tool.result","session":"ses_j","call_id":"c","status":"ok"}"#,
        r#"{"type":"step.finish","session":"ses_j","step":1}"#,
    );
    let (code, _, err) = tacho_tests::run_with_stdin(&home, &["record", "--json"], &input);
    assert_eq!(code, 0, "{err}");
    let ws_arg = ws.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["session", "list", "--json"],
        vec!["session", "show", "ses_j", "--json"],
        vec!["graph", "ses_j", "--format", "json"],
        vec!["risk", "ses_j", "--json"],
        vec!["session", "replay", "ses_j", "--mode", "verify", "--json"],
        vec!["session", "replay", "ses_j", "--mode", "execute"],
        vec![
            "session",
            "replay",
            "ses_j",
            "--mode",
            "reconstruct",
            "--json",
        ],
        vec!["session", "compare", "ses_j", "ses_j", "--json"],
        vec!["session", "trace", "ses_j", "--json"],
        vec!["session", "rollback", "ses_j", "--list", "--json"],
        vec!["session", "branch", "ses_j", "--json"],
        vec!["log", "verify", "--json"],
        vec!["log", "stats", "--json"],
        vec!["log", "dump", "ses_j", "--json"],
        vec!["snapshot", "--workspace", ws_arg, "--json"],
        vec!["gc", "--dry-run", "--json"],
        vec!["fingerprint", "--workspace", ws_arg, "--json"],
    ];
    for args in commands {
        let mut c = tacho(&home);
        c.args(&args);
        let (code, out, err) = run(c);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!out.trim().is_empty(), "{args:?}");
        for line in out.lines() {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{args:?}: {e}: {line}"));
            assert!(v["type"].is_string(), "{args:?}: no type: {line}");
            if let Some(ns) = v.get("started_unix_ns").and_then(|t| t.as_i64()) {
                assert!(v["started"].is_string(), "{args:?}: {line}");
                assert!(ns > 0);
            }
        }
    }
}

/// The help texts name every mode and state there is.
#[test]
fn help_texts_name_every_mode_and_state() {
    let home = tempfile::tempdir().unwrap();
    let help = |args: &[&str]| {
        let mut c = tacho(home.path());
        c.args(args);
        run(c).1
    };
    let top = help(&["--help"]);
    assert!(
        top.contains("Sessions: list, show, replay, compare, trace, roll back and branch them"),
        "{top}"
    );
    let session = help(&["session", "--help"]);
    for mode in ["summary", "verify", "reconstruct", "execute", "export"] {
        assert!(session.contains(mode), "{mode}: {session}");
    }
    let goal = help(&["goal", "--help"]);
    assert!(
        goal.contains("passed, failed, stale, running, missing"),
        "{goal}"
    );
}

/// A package holds a whole session exactly as export writes it; anything else — no
/// segment, only a header, a segment cut inside a batch, zeros after the data, a
/// non-zero reserved field, the same segment twice — is a finding, never "intact".
#[test]
fn a_package_must_be_what_export_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let example = repo_root().join("examples/sessions/rate-limit.jsonl");
    let mut c = tacho(&home);
    c.args(["record", "--snapshots", "off", "--batch-lines", "1"])
        .arg(&example);
    assert_eq!(run(c).0, 0);
    let pkg = tmp.path().join("good.tacho");
    let mut c = tacho(&home);
    c.args([
        "session",
        "replay",
        "ses_01jdemo",
        "--mode",
        "export",
        "--output",
    ])
    .arg(&pkg);
    let (code, _, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let good = std::fs::read(&pkg).unwrap();
    // Layout: magic 8, version 2, reserved 2, count 4, id length 2, id, then per
    // segment first_seq 8, length 8, bytes; then the 32-byte digest of all before it.
    let id_len = u16::from_le_bytes([good[16], good[17]]) as usize;
    let head = 18 + id_len;
    let seg_len = u64::from_le_bytes(good[head + 8..head + 16].try_into().unwrap()) as usize;
    let seg = &good[head + 16..head + 16 + seg_len];
    let build = |reserved: u16, segs: &[(u64, &[u8])]| -> Vec<u8> {
        let mut b = good[..10].to_vec();
        b.extend_from_slice(&reserved.to_le_bytes());
        b.extend_from_slice(&(segs.len() as u32).to_le_bytes());
        b.extend_from_slice(&good[16..head]);
        for (first, data) in segs {
            b.extend_from_slice(&first.to_le_bytes());
            b.extend_from_slice(&(data.len() as u64).to_le_bytes());
            b.extend_from_slice(data);
        }
        let d = blake3::Hasher::new_derive_key("tacho replay package v1")
            .update(&b)
            .finalize();
        b.extend_from_slice(d.as_bytes());
        b
    };
    assert_eq!(
        build(0, &[(0, seg)]),
        good,
        "the layout as the test reads it"
    );
    let mut zeros = seg.to_vec();
    zeros.extend(std::iter::repeat_n(0u8, 4096));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("no segment", build(0, &[])),
        ("only a header", build(0, &[(0, &seg[..128])])),
        (
            "cut inside a batch",
            build(0, &[(0, &seg[..seg.len() / 2])]),
        ),
        ("zeros after the data", build(0, &[(0, &zeros)])),
        ("reserved field", build(7, &[(0, seg)])),
        ("a segment twice", build(0, &[(0, seg), (0, seg)])),
    ];
    for (what, bytes) in cases {
        let p = tmp.path().join("bad.tacho");
        std::fs::write(&p, bytes).unwrap();
        let mut c = tacho(&home);
        c.args(["session", "replay", "--mode", "verify", "--package"])
            .arg(&p);
        let (code, out, err) = run(c);
        assert_eq!(code, 1, "{what}: {out}{err}");
        assert!(!out.contains("intact"), "{what}: {out}");
    }
}

/// Many recorders starting at once on a fresh data directory: the snapshot store is
/// created once, and every session gets its baseline snapshot.
#[test]
fn first_use_of_the_snapshot_store_is_safe_under_concurrency() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let ws = ws.canonicalize().unwrap();
    let children: Vec<_> = (0..12)
        .map(|i| {
            let mut c = tacho(&home);
            c.args(["record", "--session", &format!("ses_c{i:02}")])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = c.spawn().unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(
                    format!(
                        r#"{{"type":"session.start","workspace":"{}"}}"#,
                        ws.display()
                    )
                    .as_bytes(),
                )
                .unwrap();
            child
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(!err.contains("no baseline snapshot"), "{err}");
    }
    for i in 0..12 {
        let mut c = tacho(&home);
        c.args([
            "session",
            "rollback",
            &format!("ses_c{i:02}"),
            "--list",
            "--json",
        ]);
        let (code, out, err) = run(c);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert!(v["baseline"]["id"].is_string(), "session {i}: {v}");
    }
}

/// Reading under a mistyped data directory creates nothing there, and `log verify`
/// says there is no data instead of printing a digest of nothing.
#[test]
fn a_missing_data_directory_is_reported_and_left_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("typo");
    for args in [vec!["session", "list"], vec!["log", "stats"]] {
        let mut c = tacho(&home);
        c.args(&args);
        let (code, _, err) = run(c);
        assert_eq!(code, 0, "{args:?}: {err}");
    }
    let mut c = tacho(&home);
    c.args(["log", "verify"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 4, "{out}{err}");
    assert!(err.contains("no tacho data in"), "{err}");
    assert!(!out.contains("store digest"), "{out}");
    assert!(
        !home.exists(),
        "nothing was created under the mistyped directory"
    );
}

/// Committed events cut from the end of a session's stream (the stream reads well,
/// only shorter): `log verify` fails naming what is missing, instead of passing, and
/// the next `tacho record` for the session appends nothing and says why.
#[test]
fn events_cut_from_the_end_of_a_stream_fail_verify_and_refuse_the_next_record() {
    let home = tempfile::tempdir().unwrap();
    let s = "ses_cut";
    let lines: Vec<String> = std::iter::once(start_line(s))
        .chain((1..8).map(|i| call_line(s, "c", i, 20)))
        .collect();
    let (code, _, err) = tacho_tests::run_with_stdin(
        home.path(),
        &["record", "--batch-lines", "1"],
        &(lines.join("\n") + "\n"),
    );
    assert_eq!(code, 0, "{err}");
    let seg = store(home.path()).segments(s).unwrap()[0].path.clone();
    let bytes = std::fs::read(&seg).unwrap();
    let mut scan =
        tacho_log_format::Scanner::new(&bytes, tacho_log_format::ScanLimits { verify_chain: true });
    let mut ends = Vec::new();
    while scan.next_batch().is_some() {
        ends.push(scan.valid_len());
    }
    assert_eq!(ends.len(), 8);
    // The last three batches gone, at a batch's end.
    std::fs::write(&seg, &bytes[..ends[4]]).unwrap();
    let cut = std::fs::read(&seg).unwrap();
    let (code, _, err) =
        tacho_tests::run_with_stdin(home.path(), &["record"], &(call_line(s, "d", 9, 5) + "\n"));
    assert_ne!(
        code, 0,
        "record appended to a stream short of committed events"
    );
    assert!(err.contains(s) && err.contains("missing"), "{err}");
    assert_eq!(std::fs::read(&seg).unwrap(), cut, "the stream was changed");
    let (code, out, err) = run({
        let mut c = tacho(home.path());
        c.args(["log", "verify"]);
        c
    });
    assert_ne!(
        code, 0,
        "verify passed a stream short of 3 events: {out}{err}"
    );
    assert!(
        format!("{out}{err}").contains("3 events are missing"),
        "{out}{err}"
    );
}
