//! Hooks start the workspace's watcher themselves when a full snapshot lists many files
//! (SPEC.md §13.1, issue 31): a workspace over the threshold gets one from its first
//! hook; one under it never does; `--no-watch` (as installed by `hooks install
//! --no-watch`) and `TACHO_NO_WATCH` keep any from starting. The threshold is lowered
//! with `TACHO_WATCH_FILES` so that a small repository can stand for a large one.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tacho_tests::{git, run, tacho};

const FILES: usize = 40;

struct Env {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
}

impl Env {
    /// A Git repository of [`FILES`] committed files (`None` without git).
    fn new() -> Option<Env> {
        if !git::have_git() {
            tacho_tests::skip_without("git");
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let ws = tmp.path().join("repo");
        for i in 0..FILES {
            let p = ws.join(format!("d{}/f{i}.txt", i % 4));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, format!("file {i}\n")).unwrap();
        }
        let ws = ws.canonicalize().unwrap();
        git::git(&ws, &["init", "-q"]);
        git::git(&ws, &["add", "-A"]);
        git::git(&ws, &["commit", "-q", "-m", "files"]);
        // Past the racy window of the index `git commit` wrote (SPEC §10.6: a scan that
        // cannot trust it asks the watcher to list the workspace again), as for any
        // workspace a moment after a commit; the hooks are quick enough to fall in it.
        std::thread::sleep(std::time::Duration::from_millis(150));
        Some(Env {
            _tmp: tmp,
            home,
            ws,
        })
    }

    /// Runs `tacho ARGS` with `env` and an event of `session` on stdin.
    fn hook(&self, args: &[&str], env: &[(&str, &str)], session: &str, event: &str) {
        let payload = serde_json::json!({"session_id": session, "transcript_path": "/nonexistent", "cwd": self.ws, "hook_event_name": event, "tool_name": "Bash", "tool_input": {"command": "make"}, "tool_use_id": format!("{session}-call")});
        let mut c = tacho(&self.home);
        c.args(args)
            .current_dir(&self.ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(payload.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{args:?} {event}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A session's first hooks: its start (the baseline, a full snapshot) and a shell
    /// command (a full snapshot before it).
    fn session(&self, args: &[&str], env: &[(&str, &str)], session: &str) {
        for event in ["SessionStart", "PreToolUse", "PostToolUse"] {
            self.hook(args, env, session, event);
        }
    }

    /// Whether a hook process started a watcher: it opens the watcher's log before it
    /// spawns it, and returns only after that.
    fn watcher_spawned(&self) -> bool {
        let dir = self.home.join("cache/snapshots/watch");
        std::fs::read_dir(&dir).is_ok_and(|d| {
            d.filter_map(Result::ok)
                .any(|e| e.path().extension().is_some_and(|x| x == "log"))
        })
    }

    fn watch(&self, what: &str) -> i32 {
        let mut c = tacho(&self.home);
        c.args(["watch", what]).arg(&self.ws);
        run(c).0
    }

    fn wait_for_watcher(&self) {
        let until = Instant::now() + Duration::from_secs(20);
        while self.watch("status") != 0 {
            assert!(Instant::now() < until, "no watcher started");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn files_env(n: usize) -> String {
    n.to_string()
}

#[test]
fn a_workspace_over_the_threshold_gets_a_watcher_from_its_first_hook() {
    let Some(e) = Env::new() else { return };
    let over = files_env(FILES);
    e.hook(
        &["hook", "claude-code"],
        &[("TACHO_WATCH_FILES", &over)],
        "big-1",
        "SessionStart",
    );
    assert!(e.watcher_spawned(), "the baseline started a watcher");
    e.wait_for_watcher();
    // The next full snapshots are the watcher's: the first takes its token, the next
    // looks only at what changed.
    e.hook(
        &["hook", "claude-code"],
        &[("TACHO_WATCH_FILES", &over)],
        "big-1",
        "PreToolUse",
    );
    std::fs::write(e.ws.join("d1/f1.txt"), "changed\n").unwrap();
    let mut c = tacho(&e.home);
    c.args(["snapshot", "--json", "--workspace"]).arg(&e.ws);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let snap: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // (The changed file is read by this snapshot, or already by the watcher as it was
    // written: never every file.)
    assert_eq!(
        (&snap["watched"], &snap["walked"]),
        (&serde_json::json!(true), &serde_json::json!(false)),
        "{snap}"
    );
    assert!(snap["files_read"].as_u64().unwrap() <= 1, "{snap}");
    // Later hooks find it running: still one.
    e.hook(
        &["hook", "claude-code"],
        &[("TACHO_WATCH_FILES", &over)],
        "big-1",
        "PostToolUse",
    );
    let mut c = tacho(&e.home);
    c.args(["watch", "list", "--json"]);
    assert_eq!(run(c).1.lines().count(), 1);
    assert_eq!(e.watch("stop"), 0);
}

#[test]
fn a_workspace_under_the_threshold_gets_none() {
    let Some(e) = Env::new() else { return };
    // One file more than the workspace has; and the default (1,000).
    e.session(
        &["hook", "claude-code"],
        &[("TACHO_WATCH_FILES", &files_env(FILES + 1))],
        "small-1",
    );
    e.session(&["hook", "claude-code"], &[], "small-2");
    assert!(!e.watcher_spawned());
    assert_eq!(e.watch("status"), 4);
}

#[test]
fn the_opt_outs_hold() {
    let Some(e) = Env::new() else { return };
    let over = files_env(FILES);
    // Hooks installed with --no-watch.
    e.session(
        &["hook", "claude-code", "--no-watch"],
        &[("TACHO_WATCH_FILES", &over)],
        "out-1",
    );
    // TACHO_NO_WATCH, even for hooks installed with --watch.
    for args in [
        &["hook", "claude-code"][..],
        &["hook", "claude-code", "--watch"],
    ] {
        e.session(
            args,
            &[("TACHO_WATCH_FILES", &over), ("TACHO_NO_WATCH", "1")],
            "out-2",
        );
    }
    assert!(!e.watcher_spawned());
    assert_eq!(e.watch("status"), 4);
}

/// `hooks install --no-watch` installs `tacho hook <agent> --no-watch`, still tacho's
/// own: installing again without it replaces it.
#[test]
fn hooks_install_no_watch() {
    let Some(e) = Env::new() else { return };
    let cfg = e.home.join("claude");
    let install = |extra: &[&str]| {
        let mut c = tacho(&e.home);
        c.args(["hooks", "install", "claude-code", "--json"])
            .args(extra)
            .env("CLAUDE_CONFIG_DIR", &cfg)
            .current_dir(&e.ws);
        let (code, out, err) = run(c);
        assert_eq!(code, 0, "{out}{err}");
        std::fs::read_to_string(cfg.join("settings.json")).unwrap()
    };
    let settings = install(&["--no-watch"]);
    assert!(
        settings.contains(" hook claude-code --no-watch\""),
        "{settings}"
    );
    let settings = install(&[]);
    assert!(!settings.contains("--no-watch"), "{settings}");
    assert!(settings.contains(" hook claude-code\""), "{settings}");
    let mut c = tacho(&e.home);
    c.args(["hooks", "install", "claude-code", "--watch", "--no-watch"])
        .env("CLAUDE_CONFIG_DIR", &cfg);
    assert_ne!(run(c).0, 0, "--watch and --no-watch together are refused");
}

/// Issue 42 (3): a process of the user binds the watcher's socket and answers every
/// snapshot with the session's first tree. It is not tacho's watcher (another
/// executable), so nothing it says is used: the shell's edit is in the record, and
/// the record says something posed as the watcher.
#[test]
fn a_fake_watcher_is_not_believed_and_is_recorded() {
    let Some(e) = Env::new() else { return };
    let Ok(python) = which_python() else { return };
    let none = [("TACHO_NO_WATCH", "1")];
    e.hook(&["hook", "claude-code"], &none, "fake-1", "SessionStart");
    let mut c = tacho(&e.home);
    c.args(["audit", "export", "fake-1"]);
    let (_, export, _) = run(c);
    let first = export
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["event"]["snapshot"].as_str().map(str::to_owned))
        .unwrap_or_else(|| panic!("{export}"));
    let key = blake3::hash(e.ws.as_os_str().as_encoded_bytes()).to_hex();
    let dir = e.home.join("cache/snapshots/watch");
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join(format!("{}.sock", &key[..32]));
    let reply = serde_json::json!({"token": {"instance": 7, "generation": 1},
        "snapshot": {"tree": first, "files": FILES, "bytes": 1, "files_read": 0,
        "bytes_read": 0, "objects_written": 0, "excluded": []}, "paths": []});
    let script = format!(
        "import socket,os,sys\ns=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen(8)\nprint('ready',flush=True)\nwhile True:\n  c,_=s.accept()\n  c.makefile().readline()\n  c.sendall(b'{}\\n')\n  c.close()\n",
        reply.to_string().replace('\\', "\\\\").replace('\'', "\\'")
    );
    let mut fake = std::process::Command::new(python)
        .args(["-c", &script])
        .arg(&sock)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(fake.stdout.as_mut().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    e.hook(&["hook", "claude-code"], &none, "fake-1", "PreToolUse");
    std::fs::write(e.ws.join("d1/f1.txt"), "changed by the shell\n").unwrap();
    e.hook(&["hook", "claude-code"], &none, "fake-1", "PostToolUse");
    let _ = fake.kill();
    let _ = fake.wait();
    let mut c = tacho(&e.home);
    c.args(["risk", "fake-1", "--json"]);
    let (_, risk, _) = run(c);
    let risk: serde_json::Value = serde_json::from_str(risk.trim()).unwrap();
    let ids: Vec<&str> = risk["factors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&"watcher_impostor"), "{risk:#}");
    let mut c = tacho(&e.home);
    c.args(["session", "show", "fake-1", "--json"]);
    let (_, show, _) = run(c);
    assert!(
        show.contains("d1/f1.txt"),
        "the shell's edit is recorded: {show}"
    );
}

fn which_python() -> Result<&'static str, ()> {
    let ok = std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok("python3")
    } else {
        tacho_tests::skip_without("python3");
        Err(())
    }
}

/// Issue 42 (3): the real tacho binary as the watcher, with a library of the user's
/// preloaded into it (code the asking tacho does not run): not believed either, and
/// recorded. The same watcher without it is believed.
#[test]
fn a_watcher_with_a_preloaded_library_is_not_believed() {
    let Some(e) = Env::new() else { return };
    let gcc = std::process::Command::new("gcc").arg("--version").output();
    if !gcc.is_ok_and(|o| o.status.success()) {
        tacho_tests::skip_without("gcc");
        return;
    }
    let lib = e.home.parent().unwrap().join("evil.so");
    let src = e.home.parent().unwrap().join("evil.c");
    std::fs::write(&src, "int tacho_test_evil(void) { return 42; }\n").unwrap();
    let built = std::process::Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .unwrap();
    assert!(built.success());
    let none = [("TACHO_NO_WATCH", "1")];
    e.hook(&["hook", "claude-code"], &none, "pre-1", "SessionStart");
    let mut c = tacho(&e.home);
    c.args(["watch", "start"])
        .arg(&e.ws)
        .env("LD_PRELOAD", &lib);
    // (`watch start` itself runs preloaded too: it answers its own status.)
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    e.hook(&["hook", "claude-code"], &none, "pre-1", "PreToolUse");
    std::fs::write(e.ws.join("d2/f2.txt"), "changed by the shell\n").unwrap();
    e.hook(&["hook", "claude-code"], &none, "pre-1", "PostToolUse");
    let mut c = tacho(&e.home);
    c.args(["watch", "stop"]).arg(&e.ws).env("LD_PRELOAD", &lib);
    let _ = run(c);
    let mut c = tacho(&e.home);
    c.args(["risk", "pre-1", "--json"]);
    let (_, risk, _) = run(c);
    assert!(risk.contains("\"watcher_impostor\""), "{risk}");
    assert!(risk.contains("runs code this process does not"), "{risk}");
    let mut c = tacho(&e.home);
    c.args(["session", "show", "pre-1", "--json"]);
    let (_, show, _) = run(c);
    assert!(
        show.contains("d2/f2.txt"),
        "the shell's edit is recorded: {show}"
    );
}

/// Issue 42 (3), red team F: with tacho's own watcher serving the workspace, the shell
/// writes a file of it through a hard link made outside it: no event reaches the
/// watcher, and its snapshots keep the old content. At the turn's end (Stop) the hook
/// reads the workspace itself: the record holds the change, and risk shows that the
/// watcher missed it.
#[test]
fn a_write_the_watcher_never_saw_is_caught_at_the_turns_end() {
    let Some(e) = Env::new() else { return };
    e.watch("start");
    e.wait_for_watcher();
    e.session(&["hook", "claude-code"], &[], "link-1");
    let outside = e.home.parent().unwrap().join("outside.txt");
    std::fs::hard_link(e.ws.join("d3/f3.txt"), &outside).unwrap();
    e.hook(&["hook", "claude-code"], &[], "link-1", "PreToolUse");
    std::fs::write(&outside, "written through the link\n").unwrap();
    e.hook(&["hook", "claude-code"], &[], "link-1", "PostToolUse");
    std::thread::sleep(Duration::from_millis(100));
    let mut c = tacho(&e.home);
    c.args(["session", "show", "link-1", "--json"]);
    let (_, show, _) = run(c);
    assert!(
        !show.contains("d3/f3.txt"),
        "the watcher's snapshots miss the write: {show}"
    );
    e.hook(&["hook", "claude-code"], &[], "link-1", "Stop");
    assert_eq!(e.watch("stop"), 0);
    let mut c = tacho(&e.home);
    c.args(["risk", "link-1", "--json"]);
    let (_, risk, _) = run(c);
    assert!(risk.contains("\"watcher_missed\""), "{risk}");
    assert!(risk.contains("d3/f3.txt"), "{risk}");
    // Seen first at the turn's end, after the call: a change no tool call made.
    let mut c = tacho(&e.home);
    c.args(["graph", "link-1", "--json"]);
    let (_, graph, _) = run(c);
    let graph: serde_json::Value = serde_json::from_str(graph.trim()).unwrap();
    assert_eq!(
        graph["unclaimed"][0]["files"][0]["path"], "d3/f3.txt",
        "the write is recorded: {graph:#}"
    );
}
