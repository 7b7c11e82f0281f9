#![allow(clippy::unwrap_used)]

//! `tacho watch` as a user runs it: a background watcher of a Git workspace that the
//! snapshots of every `tacho` process (the hooks', `tacho snapshot`) then ask.

use std::path::Path;
use std::time::{Duration, Instant};

use tacho_tests::git::git;
use tacho_tests::{run, tacho};

fn json(home: &Path, args: &[&str]) -> (i32, serde_json::Value) {
    let mut c = tacho(home);
    c.args(args);
    let (code, out, err) = run(c);
    let v =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("tacho {args:?}: {e}: {out} {err}"));
    (code, v)
}

/// Whether a process is gone (or a zombie nobody reaped yet).
fn gone(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

#[test]
fn a_background_watcher_serves_every_process_and_stops() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    for i in 0..30 {
        let p = ws.join(format!("src/d{}/f{i}.txt", i % 3));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, format!("file {i}\n")).unwrap();
    }
    git(&ws, &["init", "-q"]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-qm", "base"]);
    let ws_arg = ws.to_str().unwrap();

    let (code, _) = json(&home, &["watch", "status", ws_arg, "--json"]);
    assert_eq!(code, 4, "no watcher yet");
    let (code, started) = json(&home, &["watch", "start", ws_arg, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(started["started"], true);
    let pid = started["pid"].as_u64().unwrap();
    assert_ne!(pid, u64::from(std::process::id()));
    // A second start finds it running.
    let (_, again) = json(&home, &["watch", "start", ws_arg, "--json"]);
    assert_eq!(again["started"], false);
    assert_eq!(again["pid"], pid);

    let snap = |home: &Path| json(home, &["snapshot", "--workspace", ws_arg, "--json"]).1;
    let first = snap(&home);
    assert_eq!(first["watched"], false, "nothing to ask with yet");
    // Past the racy window of the index `git commit` wrote.
    std::thread::sleep(Duration::from_millis(150));
    snap(&home);
    std::fs::write(ws.join("src/d1/f1.txt"), "edited\n").unwrap();
    std::fs::write(ws.join("src/d2/new.txt"), "new\n").unwrap();
    let edited = snap(&home);
    assert_eq!(edited["watched"], true, "{edited}");
    assert_eq!(edited["walked"], false);
    assert_eq!(edited["files"], 31);
    // The same snapshot as a scan that checks every file (another data directory).
    let reference = snap(&tmp.path().join("other-home"));
    assert_eq!(reference["watched"], false);
    assert_eq!(edited["snapshot"], reference["snapshot"]);
    let unchanged = snap(&home);
    assert_eq!(unchanged["watched"], true);
    assert_eq!(unchanged["objects_written"], 0);
    assert_eq!(unchanged["snapshot"], edited["snapshot"]);

    let (code, status) = json(&home, &["watch", "status", ws_arg, "--json"]);
    assert_eq!(code, 0);
    assert_eq!(status["running"], true);
    assert!(
        status["watcher"]["answered"].as_u64().unwrap() >= 4,
        "{status}"
    );
    // Its start, as every time in tacho's JSON: Unix nanoseconds and RFC 3339.
    let w = &status["watcher"];
    assert_eq!(
        w["started_unix_ns"].as_i64().unwrap(),
        w["started_unix"].as_i64().unwrap() * 1_000_000_000,
        "{status}"
    );
    assert!(w["started"].as_str().unwrap().ends_with('Z'), "{status}");

    // Every running watcher, one JSON line each.
    let mut c = tacho(&home);
    c.args(["watch", "list", "--json"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(listed.len(), 1, "{out}");
    assert_eq!(listed[0]["watcher"]["pid"], pid);

    let (code, stopped) = json(&home, &["watch", "stop", ws_arg, "--json"]);
    assert_eq!((code, &stopped["stopped"]), (0, &serde_json::json!(true)));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(pid) {
        assert!(Instant::now() < deadline, "the watcher {pid} did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, _) = json(&home, &["watch", "status", ws_arg, "--json"]);
    assert_eq!(code, 4);
    std::fs::write(ws.join("src/d0/f0.txt"), "after the watcher\n").unwrap();
    let after = snap(&home);
    assert_eq!(after["watched"], false);
    assert_eq!(
        after["snapshot"],
        snap(&tmp.path().join("third-home"))["snapshot"]
    );

    // A watcher no scan asks stops after its idle time.
    let (_, started) = json(&home, &["watch", "start", ws_arg, "--idle", "1s", "--json"]);
    let pid = started["pid"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(pid) {
        assert!(
            Instant::now() < deadline,
            "the idle watcher {pid} did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = std::fs::read_dir(home.join("cache/snapshots/watch"))
        .unwrap()
        .flatten()
        .find(|e| e.path().extension().is_some_and(|x| x == "log"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .unwrap();
    assert!(log.contains("no scan asked for 1 s"), "{log}");
    let mut c = tacho(&home);
    c.args(["watch", "start", ws_arg, "--idle", "soon"]);
    let (code, _, err) = run(c);
    assert_eq!(code, 2, "{err}");

    // A watcher whose workspace is deleted exits by itself.
    let (_, started) = json(&home, &["watch", "start", ws_arg, "--json"]);
    let pid = started["pid"].as_u64().unwrap();
    std::fs::remove_dir_all(&ws).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(pid) {
        assert!(
            Instant::now() < deadline,
            "the watcher {pid} outlived its workspace"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Bad input: a workspace that does not exist.
    let mut c = tacho(&home);
    c.args(["watch", "start", ws_arg]);
    let (code, _, err) = run(c);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(ws_arg), "{err}");
}
