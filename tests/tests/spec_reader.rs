//! The independent reader (`tests/spec-reader/read.py`, Python written from SPEC.md
//! alone) against tacho: on the golden store of every released format version and on a
//! freshly recorded store holding every kind, its events equal what `tacho session
//! replay SESSION --mode summary --json` prints; on an exported package too; and any
//! changed byte makes it exit 1. It needs Python with `blake3` (in `tests/audit/.venv`
//! as `.ci/run` makes it); without it the tests say so and pass, except in CI.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_store::{Durability, Store, StoreOptions};
use tacho_tests::{run, run_with_stdin, tacho};

fn python() -> Option<PathBuf> {
    let p = tacho_tests::repo_root().join("tests/audit/.venv/bin/python");
    if p.exists() {
        Some(p)
    } else {
        tacho_tests::skip_without(
            "the spec reader needs Python with blake3 in tests/audit/.venv (.ci/run installs it)",
        );
        None
    }
}

/// (exit code, events, stderr) of the reader on `path`.
fn read(python: &Path, path: &Path) -> (i32, Vec<Value>, String) {
    let out = std::process::Command::new(python)
        .arg(tacho_tests::repo_root().join("tests/spec-reader/read.py"))
        .arg(path)
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (
        out.status.code().unwrap_or(-1),
        events,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What tacho prints for every session of the store, sessions in id order.
fn tacho_summary(home: &Path) -> Vec<Value> {
    let mut c = tacho(home);
    c.args(["session", "list", "--json"]);
    let (_, out, _) = run(c);
    let mut ids: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["session"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    ids.sort();
    let mut all = Vec::new();
    for id in ids {
        let mut c = tacho(home);
        c.args(["session", "replay", &id, "--mode", "summary", "--json"]);
        let (code, out, err) = run(c);
        assert_eq!(code, 0, "{err}");
        all.extend(
            out.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    all
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

#[test]
fn the_spec_reader_reads_the_golden_store_as_tacho_does() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(
        &tacho_tests::repo_root().join("tests/fixtures/store-v1/log"),
        &tmp.path().join("log"),
    );
    let (code, events, err) = read(&py, tmp.path());
    assert_eq!(code, 0, "{err}");
    assert!(events.len() > 100);
    assert_eq!(events, tacho_summary(tmp.path()));
}

#[test]
fn the_spec_reader_reads_the_packed_golden_store_as_tacho_does() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(
        &tacho_tests::repo_root().join("tests/fixtures/store-v1-packed/log"),
        &tmp.path().join("log"),
    );
    let (code, events, err) = read(&py, tmp.path());
    assert_eq!(code, 0, "{err}");
    assert!(events.len() > 100);
    assert_eq!(events, tacho_summary(tmp.path()));
    // A changed byte in the pack's table of contents is found.
    let packs = tmp.path().join("log/packs");
    let pack = std::fs::read_dir(&packs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&pack).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&pack, bytes).unwrap();
    let (code, _, err) = read(&py, tmp.path());
    assert_eq!(code, 1);
    assert!(err.contains("table of contents CRC"), "{err}");
}

/// A store with every kind: the demo (snapshots, evidence), the bundled example, the
/// fixture of the kinds added after version 1's golden store (written as tacho writes
/// evidence), and a child session.
fn every_kind(dir: &Path) -> PathBuf {
    let home = tacho_tests::demo_store(dir);
    let ex = tacho_tests::example_session();
    let extra = concat!(
        r#"{"type":"session.start","session":"ses_err","ts":"2026-11-21T10:00:00Z","agent":"a \"quoted\" é agent"}"#,
        "\n",
        r#"{"type":"error","session":"ses_err","ts":"2026-11-21T10:00:01.5Z","message":"boom\nsecond line","code":"E42","fatal":true}"#,
        "\n",
        r#"{"type":"tool.call","session":"ses_err","ts":1795255202000,"call_id":"c","tool":"bash","input":{"command":"ls","n":[1,2.5,null,true]}}"#,
        "\n",
        r#"{"type":"session.end","session":"ses_err","ts":"2026-11-21T10:00:03Z","reason":"error"}"#,
        "\n",
    );
    let ex = ex + extra;
    let (code, _, err) = run_with_stdin(&home, &["record", "--batch-lines", "7"], &ex);
    assert_eq!(code, 0, "{err}");
    let added =
        std::fs::read_to_string(tacho_tests::repo_root().join("tests/fixtures/kinds-added.jsonl"))
            .unwrap();
    let store = Store::open(home.join("log"), StoreOptions::default()).unwrap();
    let mut events = Vec::new();
    let mut session = String::new();
    for (i, line) in added.lines().enumerate() {
        let p = tacho_schema::parse_json_line(line, i + 1).unwrap();
        session = p.session.unwrap();
        events.push((p.time_unix_ns.unwrap(), p.body));
    }
    let mut w = store.writer(&session).unwrap();
    w.append_batch(&events[..3], Durability::Sync).unwrap();
    w.append_batch(&events[3..], Durability::Sync).unwrap();
    drop(w);
    home
}

#[test]
fn the_spec_reader_reads_every_kind_as_tacho_does_and_finds_a_changed_byte() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let home = every_kind(tmp.path());
    let (code, events, err) = read(&py, &home);
    assert_eq!(code, 0, "{err}");
    let kinds: std::collections::BTreeSet<&str> =
        events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.len(), tacho_schema::KINDS.len(), "{kinds:?}");
    assert_eq!(events, tacho_summary(&home));

    // An exported package reads the same.
    let id = events
        .iter()
        .find(|e| e["session"].as_str().unwrap().starts_with("ses_0"))
        .unwrap()["session"]
        .as_str()
        .unwrap()
        .to_string();
    let pkg = tmp.path().join("s.tacho");
    let mut c = tacho(&home);
    c.args(["session", "replay", &id, "--mode", "export", "--output"])
        .arg(&pkg);
    assert_eq!(run(c).0, 0);
    let (code, from_pkg, err) = read(&py, &pkg);
    assert_eq!(code, 0, "{err}");
    let want: Vec<&Value> = events
        .iter()
        .filter(|e| e["session"] == id.as_str())
        .collect();
    assert_eq!(from_pkg.iter().collect::<Vec<_>>(), want);

    // A torn tail (bytes of a batch never committed, after the last commit): a
    // warning, for the reader as for tacho, and the same events.
    let mut c = tacho(&home);
    c.args(["log", "dump", "ses_err", "--json"]);
    let (_, dump, _) = run(c);
    let frames: Vec<Value> = dump
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seg = PathBuf::from(frames[0]["segment"].as_str().unwrap());
    let first_event = frames.iter().find(|f| f["type"] == "event").unwrap();
    let (at, len) = (
        first_event["offset"].as_u64().unwrap() as usize,
        first_event["len"].as_u64().unwrap() as usize,
    );
    let last_commit = frames.iter().rfind(|f| f["type"] == "commit").unwrap();
    let end = last_commit["offset"].as_u64().unwrap() as usize + 88;
    let mut bytes = std::fs::read(&seg).unwrap();
    let torn: Vec<u8> = bytes[at..at + len / 2].to_vec();
    if bytes.len() < end + torn.len() {
        bytes.resize(end + torn.len(), 0);
    }
    bytes[end..end + torn.len()].copy_from_slice(&torn);
    std::fs::write(&seg, &bytes).unwrap();
    let (code, torn_read, err) = read(&py, &home);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning") && err.contains("torn"), "{err}");
    assert_eq!(torn_read, events);

    // One changed byte in a payload: exit 1, naming where.
    let seg = std::fs::read_dir(home.join("log/streams/ses_01jdemo8xk4rate1imit0000a"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[128 + 40] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    let (code, _, err) = read(&py, &home);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("00000000000000000000.tseg@128"), "{err}");
    // A changed byte in the package: its digest.
    let mut p = std::fs::read(&pkg).unwrap();
    let mid = p.len() / 2;
    p[mid] ^= 1;
    std::fs::write(&pkg, &p).unwrap();
    let (code, _, err) = read(&py, &pkg);
    assert_eq!(code, 1);
    assert!(err.contains("package digest"), "{err}");
}

/// The source fingerprint recomputed from SPEC §11 by `fingerprint.py` equals tacho's,
/// on a directory outside Git with nested files, an executable and an empty file.
#[test]
fn the_fingerprint_recomputed_from_the_spec_equals_tachos() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(ws.join("src/deep/er")).unwrap();
    std::fs::write(ws.join("src/a.txt"), "a\n").unwrap();
    std::fs::write(ws.join("src/deep/er/é.md"), "ü\n".repeat(1000)).unwrap();
    std::fs::write(ws.join("empty"), "").unwrap();
    std::fs::write(ws.join("run.sh"), "#!/bin/sh\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(ws.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = tacho(&tmp.path().join("home"));
    c.current_dir(&ws).args(["fingerprint", ".", "--json"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["entries"].as_array().unwrap().len(), 4);
    let py_out = std::process::Command::new(py)
        .arg(tacho_tests::repo_root().join("tests/spec-reader/fingerprint.py"))
        .arg(&ws)
        .output()
        .unwrap();
    assert!(py_out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&py_out.stdout).trim(),
        v["digest"].as_str().unwrap()
    );
}
