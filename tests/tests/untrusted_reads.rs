//! What an agent's payload names is read as untrusted (issue 27, items 6, 7 and 16):
//! a hook answers within a second and stays under 100 MB resident whatever its
//! `transcript_path` and `cwd` are — a FIFO, a 2 GB sparse file, `/proc/self`, `/` —
//! and records the session's events. The real `tacho hook claude-code` process is run,
//! its wall time taken here and its peak resident size by `/usr/bin/time` (the kernel's
//! `wait4` rusage), under a 2 GB address-space limit and a kill after 10 s, so that a
//! regression fails the test instead of eating the machine.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tacho_tests::{run, skip_without, tacho, tacho_bin};

/// What one measured hook process did.
#[derive(Debug)]
struct Measured {
    code: i32,
    wall: Duration,
    max_rss_kib: u64,
    stdout: String,
    stderr: String,
}

const TIME: &str = "/usr/bin/time";

static MEASURED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Makes the data directory and its snapshot store, as any earlier hook would have,
/// with a session of its own in an ordinary workspace.
fn warm_up(home: &Path) {
    if home.join("snapshots").exists() {
        return;
    }
    let ws = home.with_extension("warm");
    std::fs::create_dir_all(&ws).expect("warm-up workspace");
    let p = payload("warm-up", "SessionStart", &ws.display().to_string(), None);
    let (code, _, err) =
        tacho_tests::run_with_stdin(home, &["hook", "claude-code"], &p.to_string());
    assert_eq!(code, 0, "{err}");
    assert!(
        home.join("snapshots").exists(),
        "the warm-up made the store"
    );
}

/// Runs `tacho hook claude-code` with `payload` on stdin, measured; `None` (the test
/// is skipped) where `/usr/bin/time` or `timeout` is missing.
fn measured_hook(home: &Path, payload: &serde_json::Value) -> Option<Measured> {
    measured(
        home,
        &[],
        "",
        &["hook", "claude-code"],
        &payload.to_string(),
    )
}

/// Runs `tacho ARGS` with `stdin`, measured: under `wrap` (a program and its
/// arguments, to which `sh -c SCRIPT ...` is given), after the shell commands `setup`.
fn measured(
    home: &Path,
    wrap: &[&str],
    setup: &str,
    args: &[&str],
    stdin: &str,
) -> Option<Measured> {
    if !Path::new(TIME).exists() || !Path::new("/usr/bin/timeout").exists() {
        skip_without("/usr/bin/time and /usr/bin/timeout are needed to measure a hook");
        return None;
    }
    // One measured process at a time (the tests of this file run side by side on a
    // machine of two cores), in a data directory that exists already: a first
    // process creates the snapshot store, which every later hook finds made.
    let _one = MEASURED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    warm_up(home);
    let out_file = home.with_extension("time");
    let script = format!(
        r#"{setup} ulimit -v 2000000 && exec /usr/bin/time -f %M -o "$OUT" /usr/bin/timeout -s KILL 10 "$TACHO" "$@""#
    );
    let mut c = match wrap.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg("sh");
            c
        }
        None => Command::new("sh"),
    };
    c.env_clear()
        .env("TACHO_HOME", home)
        .env("OUT", &out_file)
        .env("TACHO", tacho_bin())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .arg("-c")
        .arg(script)
        .arg("sh")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = c.spawn().expect("spawn sh");
    if let Some(mut input) = child.stdin.take() {
        let _ = input.write_all(stdin.as_bytes());
    }
    let out = child.wait_with_output().expect("wait for tacho");
    let wall = started.elapsed();
    let time = std::fs::read_to_string(&out_file).unwrap_or_default();
    let _ = std::fs::remove_file(&out_file);
    let max_rss_kib = time
        .lines()
        .filter_map(|l| l.trim().parse::<u64>().ok())
        .next_back()
        .unwrap_or(u64::MAX);
    Some(Measured {
        code: out.status.code().unwrap_or(-1),
        wall,
        max_rss_kib,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned() + &time,
    })
}

/// The hook answered at once (0, under a second) and stayed small (under 100 MB).
fn assert_bounded(m: &Measured, what: &str) {
    assert_eq!(m.code, 0, "{what}: {m:?}");
    assert!(!m.stderr.contains("panicked"), "{what}: {}", m.stderr);
    assert!(
        m.wall < Duration::from_secs(1),
        "{what}: took {:?}: {m:?}",
        m.wall
    );
    assert!(
        m.max_rss_kib < 100 * 1000,
        "{what}: {} KiB resident: {m:?}",
        m.max_rss_kib
    );
}

fn payload(session: &str, event: &str, cwd: &str, transcript: Option<&Path>) -> serde_json::Value {
    let mut p = serde_json::json!({
        "session_id": session,
        "hook_event_name": event,
        "cwd": cwd,
        "source": "startup",
    });
    if let Some(t) = transcript {
        p["transcript_path"] = serde_json::json!(t.display().to_string());
    }
    if event == "PreToolUse" {
        p["tool_name"] = serde_json::json!("Bash");
        p["tool_use_id"] = serde_json::json!("call-1");
        p["tool_input"] = serde_json::json!({"command": "true"});
    }
    p
}

/// The kinds of a session's events, in order.
fn kinds(home: &Path, session: &str) -> Vec<String> {
    let mut c = tacho(home);
    c.args(["log", "dump", session, "--json"]);
    let (_, out, _) = run(c);
    out.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "event")
        .filter_map(|v| v["kind"].as_str().map(str::to_owned))
        .collect()
}

fn hooks_log(home: &Path) -> String {
    std::fs::read_to_string(home.join("logs").join("hooks.log")).unwrap_or_default()
}

fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo")
        .arg(p)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mkfifo {}", p.display());
}

fn scratch() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).expect("workspace");
    std::fs::write(ws.join("a.txt"), "a\n").expect("file");
    (dir, home, ws)
}

/// A FIFO as `transcript_path` used to hang the hook forever in `open`, holding the
/// session's lock: every later hook of the session then waited 20 s.
#[test]
fn a_fifo_transcript_neither_hangs_the_hook_nor_the_next_ones() {
    let (dir, home, ws) = scratch();
    let fifo = dir.path().join("t.jsonl");
    mkfifo(&fifo);
    let ws_text = ws.display().to_string();
    for (i, event) in ["SessionStart", "PreToolUse"].into_iter().enumerate() {
        let Some(m) = measured_hook(&home, &payload("f1", event, &ws_text, Some(&fifo))) else {
            return;
        };
        assert_bounded(&m, &format!("hook {i} ({event})"));
        assert!(m.stdout.is_empty(), "{m:?}");
    }
    let k = kinds(&home, "f1");
    assert_eq!(
        k,
        [
            "session.start",
            "snapshot.taken",
            "snapshot.taken",
            "step.start",
            "tool.call"
        ],
        "the events are recorded"
    );
    let log = hooks_log(&home);
    assert!(log.contains("is a FIFO, not a transcript file"), "{log}");
}

/// `/proc/self` (a pseudo file system: `pagemap` says 0 bytes and never ends) and `/`
/// (which holds `/proc`) are refused as workspaces: the session's events are recorded
/// without a snapshot, and the reason is logged once.
#[test]
fn a_proc_or_root_working_directory_is_not_snapshotted() {
    for (session, cwd, why) in [
        ("p1", "/proc/self", "pseudo file system"),
        ("p2", "/", "the root directory"),
    ] {
        let (_dir, home, _ws) = scratch();
        for (i, event) in ["SessionStart", "PreToolUse", "PreToolUse"]
            .into_iter()
            .enumerate()
        {
            let mut p = payload(session, event, cwd, None);
            p["tool_use_id"] = serde_json::json!(format!("call-{i}"));
            let Some(m) = measured_hook(&home, &p) else {
                return;
            };
            assert_bounded(&m, &format!("{cwd}: {event}"));
        }
        let k = kinds(&home, session);
        assert!(!k.iter().any(|k| k == "snapshot.taken"), "{cwd}: {k:?}");
        assert_eq!(
            k.first().map(String::as_str),
            Some("session.start"),
            "{k:?}"
        );
        assert_eq!(k.iter().filter(|k| *k == "tool.call").count(), 2, "{k:?}");
        let log = hooks_log(&home);
        assert_eq!(
            log.matches("refused as a workspace").count(),
            1,
            "{cwd}: {log}"
        );
        assert!(log.contains(why), "{cwd}: {log}");
    }
}

/// A 2 GB transcript used to be read whole at every event (24 s, 4.1 GB): a hook now
/// reads at most 64 MiB of it, and the next ones go on from there.
#[test]
fn a_huge_sparse_transcript_is_read_in_bounded_parts() {
    let (dir, home, ws) = scratch();
    let t = dir.path().join("t.jsonl");
    {
        let f = std::fs::File::create(&t).expect("transcript");
        f.set_len(2 << 30).expect("a sparse 2 GB file");
    }
    let ws_text = ws.display().to_string();
    for event in ["SessionStart", "PreToolUse"] {
        let Some(m) = measured_hook(&home, &payload("g1", event, &ws_text, Some(&t))) else {
            return;
        };
        assert_bounded(&m, event);
    }
    let k = kinds(&home, "g1");
    assert_eq!(
        k.first().map(String::as_str),
        Some("session.start"),
        "{k:?}"
    );
    assert!(k.iter().any(|k| k == "tool.call"), "{k:?}");
}

fn response_line(id: &str, pad: &str) -> String {
    format!(
        r#"{{"type":"assistant","timestamp":"2026-11-20T09:00:00Z","requestId":"req_{id}"{pad},"message":{{"id":"{id}","model":"m","usage":{{"input_tokens":10,"output_tokens":1}}}}}}"#
    )
}

/// A transcript rewritten under the hook (shorter than the kept offset) is read again
/// from its start; the hook's state remembers only the recent response ids, so the
/// older ones used to be recorded a second time.
#[test]
fn a_rewritten_transcript_records_each_response_once() {
    let (dir, home, ws) = scratch();
    let t = dir.path().join("t.jsonl");
    let first: String = (0..600)
        .map(|i| response_line(&format!("msg_{i:04}"), r#","pad":"xxxxxxxx""#) + "\n")
        .collect();
    std::fs::write(&t, &first).expect("transcript");
    let ws_text = ws.display().to_string();
    let (code, _, err) = tacho_tests::run_with_stdin(
        &home,
        &["hook", "claude-code"],
        &payload("r1", "SessionStart", &ws_text, Some(&t)).to_string(),
    );
    assert_eq!(code, 0, "{err}");
    // The same responses without the padding, and one more: shorter than the offset.
    let rewritten: String = (0..601)
        .map(|i| response_line(&format!("msg_{i:04}"), "") + "\n")
        .collect();
    assert!(rewritten.len() < first.len());
    std::fs::write(&t, &rewritten).expect("rewrite");
    let mut stop = payload("r1", "Stop", &ws_text, Some(&t));
    stop["stop_hook_active"] = serde_json::json!(false);
    let (code, _, err) =
        tacho_tests::run_with_stdin(&home, &["hook", "claude-code"], &stop.to_string());
    assert_eq!(code, 0, "{err}");
    let k = kinds(&home, "r1");
    assert_eq!(
        k.iter().filter(|k| *k == "llm.response").count(),
        601,
        "each response once; {}",
        hooks_log(&home)
    );
}

/// Whether `unshare -rmp` works here (user, mount and PID namespaces), where `/proc`
/// can be mounted without privileges; says it skips when not.
fn namespaces_work() -> bool {
    let probe = Command::new("unshare")
        .args(["-rmp", "--fork", "--mount-proc", "true"])
        .stderr(Stdio::null())
        .status();
    let ok = probe.is_ok_and(|s| s.success());
    if !ok {
        skip_without("user and mount namespaces (unshare -rmp) are needed to mount /proc");
    }
    ok
}

/// A workspace holding a mount of `/proc` (a chroot being built, say): the walk does not
/// go into it (the `/proc/<pid>/pagemap` files there say 0 bytes and never end), and
/// it is listed as left out. Run in a user and mount namespace of its own
/// (`unshare`), where mounting is allowed; skipped where namespaces are not.
#[test]
fn a_proc_mount_inside_the_workspace_is_not_walked() {
    let (_dir, home, ws) = scratch();
    std::fs::create_dir_all(ws.join("chroot").join("proc")).expect("mount point");
    if !namespaces_work() {
        return;
    }
    let ws_text = ws.display().to_string();
    // Twice: the second scan reuses the first one's listing.
    for scan in ["first", "second"] {
        let Some(m) = measured(
            &home,
            &["unshare", "-rmp", "--fork", "--mount-proc"],
            &format!("mount -t proc proc '{ws_text}/chroot/proc' &&"),
            &["snapshot", "--workspace", &ws_text, "--json"],
            "",
        ) else {
            return;
        };
        assert_bounded(&m, scan);
        let v: serde_json::Value = serde_json::from_str(m.stdout.trim()).expect("JSON");
        assert_eq!(v["files"], 1, "{scan}: {v}");
        let excluded = v["excluded"].to_string();
        assert!(
            excluded.contains(r#""path":"chroot/proc","reason":"a proc mount"#),
            "{scan}: {excluded}"
        );
    }
    // A file below the mount named on its own (a targeted snapshot) is not read.
    let Some(m) = measured(
        &home,
        &["unshare", "-rmp", "--fork", "--mount-proc"],
        &format!("mount -t proc proc '{ws_text}/chroot/proc' &&"),
        &[
            "snapshot",
            "--workspace",
            &ws_text,
            "--json",
            "chroot/proc/1/pagemap",
        ],
        "",
    ) else {
        return;
    };
    assert_bounded(&m, "targeted");
    let v: serde_json::Value = serde_json::from_str(m.stdout.trim()).expect("JSON");
    let excluded = v["excluded"].to_string();
    assert!(
        excluded.contains(r#""path":"chroot/proc/1/pagemap","reason":"a proc mount"#),
        "{excluded}"
    );
}

/// A fingerprint of a workspace holding a mount of `/proc` (outside Git: every file
/// beneath it) says why it has none, at once, instead of hashing `pagemap` forever.
#[test]
fn a_proc_mount_inside_the_workspace_is_not_fingerprinted() {
    let (_dir, home, ws) = scratch();
    std::fs::create_dir_all(ws.join("chroot").join("proc")).expect("mount point");
    if !namespaces_work() {
        return;
    }
    let ws_text = ws.display().to_string();
    let Some(m) = measured(
        &home,
        &["unshare", "-rmp", "--fork", "--mount-proc"],
        &format!("mount -t proc proc '{ws_text}/chroot/proc' &&"),
        &["fingerprint", "--workspace", &ws_text, "--json"],
        "",
    ) else {
        return;
    };
    assert_eq!(m.code, 1, "no fresh evidence: {m:?}");
    assert!(m.wall < Duration::from_secs(1), "took {:?}: {m:?}", m.wall);
    assert!(m.max_rss_kib < 100 * 1000, "{m:?}");
    let v: serde_json::Value = serde_json::from_str(m.stdout.trim()).expect("JSON");
    assert_eq!(v["path"], "chroot/proc", "{v}");
    assert_eq!(
        v["reason"], "is a proc mount, a pseudo file system that holds no user files",
        "{v}"
    );
}

/// `tacho import` of a FIFO said "no such file or directory"; it says what it is, at
/// once.
#[test]
fn importing_a_fifo_says_it_is_one() {
    let (dir, home, _ws) = scratch();
    let fifo = dir.path().join("t.jsonl");
    mkfifo(&fifo);
    let mut c = tacho(&home);
    c.args(["import", "claude-code"]).arg(&fifo);
    let started = Instant::now();
    let (code, _, err) = run(c);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_ne!(code, 0);
    assert!(
        err.contains(&format!(
            "{} is a FIFO, not a transcript file",
            fifo.display()
        )),
        "{err}"
    );
}
