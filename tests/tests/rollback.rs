//! Snapshots, rollback, branch and gc through the `tacho` binary, recorded the way a
//! hook-driven adapter records: one `tacho record` per event while files change.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tacho_tests::{run, tacho};

struct Env {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
}

fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    Env {
        _tmp: tmp,
        home,
        ws,
    }
}

impl Env {
    fn write(&self, rel: &str, text: &str) {
        let p = self.ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.ws.join(rel)).ok()
    }

    /// Records one line (as a hook would), failing the test on error.
    fn record(&self, session: &str, line: &str) {
        let mut c = tacho(&self.home);
        c.args(["record", "--session", session])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(line.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "record {line}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn tacho(&self, args: &[&str]) -> (i32, String, String) {
        let mut c = tacho(&self.home);
        c.args(args);
        run(c)
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let (code, out, err) = self.tacho(args);
        assert_eq!(code, 0, "tacho {args:?}: {err}");
        serde_json::from_str(out.lines().next().unwrap()).unwrap()
    }

    /// A session of two steps: step 1 edits `app.rs`, step 2 deletes `notes.txt`,
    /// creates `new/made.txt` and makes `run.sh` executable.
    fn session(&self, id: &str, end: bool) {
        self.write("app.rs", "fn main() {}\n");
        self.write("notes.txt", "notes\n");
        self.write("run.sh", "#!/bin/sh\n");
        let ws = self.ws.display();
        self.record(
            id,
            &format!(r#"{{"type":"session.start","workspace":"{ws}","agent":"coder"}}"#),
        );
        self.record(id, r#"{"type":"step.start","step":1}"#);
        self.write("app.rs", "fn main() { println!(\"hi\"); }\n");
        self.record(id, r#"{"type":"file.edit","path":"app.rs","op":"modify"}"#);
        self.record(id, r#"{"type":"step.finish","step":1}"#);
        self.record(id, r#"{"type":"step.start","step":2}"#);
        std::fs::remove_file(self.ws.join("notes.txt")).unwrap();
        self.write("new/made.txt", "made\n");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            self.ws.join("run.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        self.record(id, r#"{"type":"step.finish","step":2}"#);
        if end {
            self.record(id, r#"{"type":"session.end","reason":"completed"}"#);
        }
    }

    fn fsck(&self) {
        fsck(&self.home);
    }
}

fn executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o111 != 0
}

/// A secret the agent rewrote, files it deleted and a file it made world-readable
/// come back with their exact permission bits (a Git tree keeps only 644 and 755:
/// before, a 0600 secret came back 0644), through the real binary's steps and
/// rollback; the plan names the bits, and the undo puts the session's back.
#[test]
fn a_rollback_keeps_exact_permission_bits() {
    use std::os::unix::fs::PermissionsExt;
    let e = env();
    let chmod = |rel: &str, mode: u32| {
        std::fs::set_permissions(e.ws.join(rel), std::fs::Permissions::from_mode(mode)).unwrap()
    };
    let bits = |rel: &str| {
        std::fs::metadata(e.ws.join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    e.write(".env", "TOKEN=one\n");
    e.write("id_key", "-----KEY-----\n");
    e.write("ro.txt", "read only\n");
    e.write("shared.txt", "group only\n");
    chmod(".env", 0o600);
    chmod("id_key", 0o400);
    chmod("ro.txt", 0o444);
    chmod("shared.txt", 0o640);
    let ws = e.ws.display();
    let id = "ses_bits";
    e.record(
        id,
        &format!(r#"{{"type":"session.start","workspace":"{ws}","agent":"coder"}}"#),
    );
    e.record(id, r#"{"type":"step.start","step":1}"#);
    e.write(".env", "TOKEN=two\n");
    std::fs::remove_file(e.ws.join("id_key")).unwrap();
    std::fs::remove_file(e.ws.join("ro.txt")).unwrap();
    chmod("shared.txt", 0o644);
    e.record(id, r#"{"type":"file.edit","path":".env","op":"modify"}"#);
    e.record(id, r#"{"type":"step.finish","step":1}"#);
    e.record(id, r#"{"type":"session.end","reason":"completed"}"#);
    assert_eq!(
        bits(".env"),
        0o600,
        "the agent's write kept the file's bits"
    );

    let dry = e.json(&["session", "rollback", id, "--dry-run", "--json"]);
    let plan: Vec<(String, String, String)> = dry["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["path"].as_str().unwrap().to_owned(),
                i["action"].as_str().unwrap().to_owned(),
                i["then"]["mode"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String, String)> = [
        (".env", "restore", "600"),
        ("id_key", "recreate", "400"),
        ("ro.txt", "recreate", "444"),
        ("shared.txt", "mode", "640"),
    ]
    .iter()
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
    .collect();
    assert_eq!(plan, want, "{dry}");
    let (_, text, _) = e.tacho(&["session", "rollback", id, "--dry-run"]);
    assert!(text.contains("shared.txt (file 644 → file 640)"), "{text}");

    let done = e.json(&["session", "rollback", id, "--yes", "--json"]);
    assert_eq!(done["applied"]["done"], 4, "{done}");
    assert_eq!(e.read(".env").as_deref(), Some("TOKEN=one\n"));
    assert_eq!(bits(".env"), 0o600);
    assert_eq!(bits("id_key"), 0o400);
    assert_eq!(bits("ro.txt"), 0o444);
    assert_eq!(bits("shared.txt"), 0o640);
    // Undone: the session's state, bits included.
    let rb = done["applied"]["recorded_session"]
        .as_str()
        .unwrap()
        .to_string();
    let undo = e.json(&["session", "rollback", &rb, "--yes", "--json"]);
    assert_eq!(undo["applied"]["done"], 4, "{undo}");
    assert_eq!(e.read(".env").as_deref(), Some("TOKEN=two\n"));
    assert_eq!(bits(".env"), 0o600);
    assert_eq!(bits("shared.txt"), 0o644);
    assert_eq!(e.read("id_key"), None);
    e.fsck();
}

#[test]
fn record_snapshots_steps_and_rollback_restores_and_is_undoable() {
    let e = env();
    e.session("ses_rb", true);
    let points = e.json(&["session", "rollback", "ses_rb", "--list", "--json"]);
    assert_eq!(points["points"].as_array().unwrap().len(), 2);
    assert_eq!(points["points"][0]["files"][0], "app.rs");
    assert!(points["baseline"]["id"].is_string());
    assert_eq!(points["points"][1]["snapshot"]["before_step"], 2);

    // The dry run and the real run print the same plan.
    let dry = e.json(&[
        "session",
        "rollback",
        "ses_rb",
        "--step",
        "2",
        "--dry-run",
        "--json",
    ]);
    let plan: Vec<(String, String)> = dry["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["path"].as_str().unwrap().to_owned(),
                i["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        plan,
        [
            ("new/made.txt".into(), "delete".into()),
            ("notes.txt".into(), "recreate".into()),
            ("run.sh".into(), "mode".into())
        ]
    );
    assert!(
        e.read("new/made.txt").is_some(),
        "a dry run changes nothing"
    );
    // Without --yes (and no terminal to ask on) nothing happens either, and it says
    // how to apply the plan it showed.
    let (code, out, err) = e.tacho(&["session", "rollback", "ses_rb", "--step", "2"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("delete    new/made.txt"), "{out}");
    assert!(err.contains("pass --yes"), "{err}");
    assert!(e.read("new/made.txt").is_some(), "nothing was changed");

    let real = e.json(&[
        "session", "rollback", "ses_rb", "--step", "2", "--yes", "--json",
    ]);
    assert_eq!(real["plan"], dry["plan"]);
    assert_eq!(real["applied"]["done"], 3);
    assert_eq!(e.read("notes.txt").as_deref(), Some("notes\n"));
    assert!(e.read("new/made.txt").is_none() && !e.ws.join("new").exists());
    assert!(!executable(&e.ws.join("run.sh")));
    assert_eq!(
        e.read("app.rs").as_deref(),
        Some("fn main() { println!(\"hi\"); }\n"),
        "step 1's edit stays"
    );

    // The rollback is a session of its own; rolling it back undoes it.
    let undo_id = real["applied"]["recorded_session"]
        .as_str()
        .unwrap()
        .to_owned();
    // Issue 47 (12): it is not scored as an agent's work (the files it restored were
    // the rolled-back session's): no risk badge of its own.
    let risk = e.json(&["risk", &undo_id, "--json"]);
    assert_eq!(
        (risk["score"].as_u64(), risk["level"].as_str()),
        (Some(0), Some("LOW")),
        "{risk}"
    );
    let undo = e.json(&["session", "rollback", &undo_id, "--yes", "--json"]);
    assert_eq!(undo["applied"]["done"], 3);
    assert_eq!(e.read("new/made.txt").as_deref(), Some("made\n"));
    assert!(e.read("notes.txt").is_none());
    assert!(executable(&e.ws.join("run.sh")));

    // The whole session back to its baseline.
    e.json(&["session", "rollback", "ses_rb", "--yes", "--json"]);
    assert_eq!(e.read("app.rs").as_deref(), Some("fn main() {}\n"));
    // Issue 47 (12): the same rollback again changes nothing, and records nothing.
    let listed = |e: &Env| e.tacho(&["session", "list", "--json"]).1.lines().count();
    let before = listed(&e);
    let (code, out, err) = e.tacho(&["session", "rollback", "ses_rb", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Nothing to change: nothing was done, and nothing was recorded"),
        "{out}"
    );
    assert_eq!(
        listed(&e),
        before,
        "no session records a rollback that did nothing"
    );
    assert_eq!(e.read("notes.txt").as_deref(), Some("notes\n"));
    let (code, out, _) = e.tacho(&["session", "replay", &undo_id, "--mode", "verify"]);
    assert_eq!(code, 0, "{out}");
    e.fsck();
}

#[test]
fn a_running_session_is_refused_and_outside_changes_are_conflicts() {
    let e = env();
    e.session("ses_open", false);
    let (code, _, err) = e.tacho(&["session", "rollback", "ses_open", "--yes"]);
    assert_eq!(code, 2);
    assert!(err.contains("still running: ses_open"), "{err}");
    e.record("ses_open", r#"{"type":"session.end","reason":"completed"}"#);
    // Someone else edits a file the session created, after its last snapshot.
    e.write("new/made.txt", "edited by the user\n");
    let plan = e.json(&["session", "rollback", "ses_open", "--dry-run", "--json"]);
    assert_eq!(plan["conflicts"][0]["path"], "new/made.txt");
    // A run that leaves a conflict says so and exits non-zero.
    let (code, out, err) = e.tacho(&["session", "rollback", "ses_open", "--yes", "--json"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("1 were left alone as conflicts"), "{err}");
    let real: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(real["conflicts"][0]["path"], "new/made.txt");
    assert_eq!(
        e.read("new/made.txt").as_deref(),
        Some("edited by the user\n")
    );
    assert_eq!(e.read("app.rs").as_deref(), Some("fn main() {}\n"));
}

/// An agent killed before it recorded its end (its session and a subagent's left
/// without `session.end`): rollback refuses and names the way out; `tacho session end`
/// records the ends, the subagent's first, and the rollback then runs. Ending it again,
/// or with an unknown reason, is refused.
#[test]
fn session_end_closes_a_session_and_its_subagents_so_they_can_be_rolled_back() {
    let e = env();
    e.session("ses_killed", false);
    let ws = e.ws.display().to_string();
    e.record(
        "ses_killed_sub",
        &format!(r#"{{"type":"session.start","workspace":"{ws}","parent":"ses_killed"}}"#),
    );
    e.record(
        "ses_elsewhere",
        r#"{"type":"session.start","workspace":"/somewhere/else","parent":"ses_killed"}"#,
    );
    e.record(
        "ses_elsewhere",
        r#"{"type":"session.end","reason":"completed"}"#,
    );
    let (code, _, err) = e.tacho(&["session", "rollback", "ses_killed", "--yes"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("still running: ses_killed, ses_killed_sub")
            && err.contains("`tacho session end <session>`"),
        "{err}"
    );
    let (code, _, err) = e.tacho(&["session", "end", "ses_killed", "--reason", "crashed"]);
    assert_eq!(code, 2);
    assert!(err.contains("one of completed, aborted"), "{err}");
    let ended = e.json(&["session", "end", "ses_killed", "--json"]);
    assert_eq!(ended["type"], "session_end");
    assert_eq!(ended["session"], "ses_killed");
    assert_eq!(ended["reason"], "aborted");
    let sessions: Vec<&str> = ended["ended"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["session"].as_str().unwrap())
        .collect();
    // The one that had ended already is left alone.
    assert_eq!(sessions, ["ses_killed_sub", "ses_killed"]);
    let show = e.json(&["session", "show", "ses_killed", "--json"]);
    assert_eq!(show["status"], "aborted", "{show}");
    let show = e.json(&["session", "show", "ses_killed_sub", "--json"]);
    assert_eq!(show["status"], "aborted", "{show}");
    let (code, _, err) = e.tacho(&["session", "end", "ses_killed"]);
    assert_eq!(code, 2);
    assert!(err.contains("has already ended (aborted)"), "{err}");
    let (code, _, err) = e.tacho(&["session", "rollback", "ses_killed", "--yes"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(e.read("app.rs").as_deref(), Some("fn main() {}\n"));
    assert_eq!(e.read("notes.txt").as_deref(), Some("notes\n"));
    assert_eq!(e.read("new/made.txt"), None);
}

#[test]
fn child_sessions_in_the_same_directory_are_followed_others_are_not() {
    let e = env();
    e.session("ses_parent", false);
    let ws = e.ws.display().to_string();
    e.record(
        "ses_child",
        &format!(r#"{{"type":"session.start","workspace":"{ws}","parent":"ses_parent"}}"#),
    );
    e.record("ses_child", r#"{"type":"step.start","step":1}"#);
    e.write("child.txt", "by the child\n");
    e.record(
        "ses_child",
        r#"{"type":"session.end","reason":"completed"}"#,
    );
    e.record(
        "ses_away",
        r#"{"type":"session.start","workspace":"/somewhere/else","parent":"ses_parent"}"#,
    );
    e.record("ses_away", r#"{"type":"session.end","reason":"completed"}"#);
    e.record(
        "ses_parent",
        r#"{"type":"session.end","reason":"completed"}"#,
    );
    let plan = e.json(&["session", "rollback", "ses_parent", "--dry-run", "--json"]);
    assert_eq!(
        plan["sessions"],
        serde_json::json!(["ses_parent", "ses_child"])
    );
    assert_eq!(plan["excluded_sessions"][0]["session"], "ses_away");
    assert!(
        plan["plan"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["path"] == "child.txt" && i["action"] == "delete")
    );
    let (_, text, _) = e.tacho(&["session", "rollback", "ses_parent", "--dry-run"]);
    assert!(
        text.contains("Child sessions in the same workspace, included:\n  ses_child"),
        "{text}"
    );
    assert!(
        text.contains("Excluded child session ses_away: worked in /somewhere/else"),
        "{text}"
    );
}

#[test]
fn branch_forks_up_to_a_step_and_names_its_parent() {
    let e = env();
    e.session("ses_orig", true);
    let b = e.json(&[
        "session", "branch", "ses_orig", "--from", "step 2", "--id", "ses_fork", "--json",
    ]);
    assert_eq!(b["parent"], "ses_orig");
    let graph = e.json(&["graph", "ses_fork", "--format", "json"]);
    assert_eq!(graph["parent"], "ses_orig");
    assert_eq!(graph["branch"]["parent"], "ses_orig");
    assert_eq!(
        graph["steps"].as_array().unwrap().len(),
        1,
        "only step 1 is copied"
    );
    // The branch reads as the run it was cut from: it starts when that run started,
    // so its duration is that run's up to the cut, not "0ms".
    let orig = e.json(&["graph", "ses_orig", "--format", "json"]);
    assert_eq!(graph["started_unix_ns"], orig["started_unix_ns"]);
    assert!(
        graph["duration_ms"].as_u64().is_some_and(|d| d > 0),
        "{}",
        graph["duration_ms"]
    );
    let last_copied = graph["last_event_unix_ns"].as_i64().unwrap();
    assert!(last_copied <= orig["last_event_unix_ns"].as_i64().unwrap());
    let (_, list, _) = e.tacho(&["session", "list", "--json"]);
    let fork = list
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["session"] == "ses_fork")
        .unwrap();
    assert_eq!(fork["parent"], "ses_orig");
    // The original is untouched, and the branch carries its snapshots.
    let (code, _, _) = e.tacho(&["session", "replay", "ses_orig", "--mode", "verify"]);
    assert_eq!(code, 0);
    let pts = e.json(&["session", "rollback", "ses_fork", "--list", "--json"]);
    assert!(pts["baseline"]["id"].is_string());
    for bad in ["step 9", "#999", "nonsense"] {
        let (code, _, err) = e.tacho(&["session", "branch", "ses_orig", "--from", bad]);
        assert_eq!(code, 2, "{bad}: {err}");
    }
}

#[test]
fn snapshot_command_targeted_lines_gc_and_stats() {
    let e = env();
    let ws = e.ws.display().to_string();
    e.write("a.txt", "a\n");
    e.record(
        "ses_s",
        &format!(r#"{{"type":"session.start","workspace":"{ws}"}}"#),
    );
    e.write("b.txt", "b\n");
    // An adapter reports the path its edit tool wrote.
    e.record(
        "ses_s",
        r#"{"type":"snapshot.take","paths":["b.txt"],"before_step":1}"#,
    );
    let (_, dump, _) = e.tacho(&["session", "replay", "ses_s", "--mode", "summary"]);
    assert!(dump.contains("snapshot.taken    step"), "{dump}");
    let s = e.json(&["snapshot", "--session", "ses_s", "--json"]);
    assert_eq!(s["files"], 2);
    assert_eq!(s["seq"], 3);
    // A snapshot no session records is dropped by gc.
    e.write("c.txt", "c\n");
    let loose = e.json(&["snapshot", "--workspace", &ws, "--json"]);
    let gc = e.json(&["gc", "--json"]);
    assert_eq!(
        gc["dropped_snapshots"],
        serde_json::json!([loose["snapshot"]])
    );
    assert!(gc["packed_objects"].as_u64().unwrap() > 0);
    assert_eq!(gc["after"]["loose_objects"], 0);
    assert_eq!(gc["after"]["packs"], 1);
    e.fsck();
    // The session index's appended records are folded into its snapshot, which
    // still answers alike (and verifies against the streams).
    let appended =
        || std::fs::metadata(e.home.join("log/index/sessions.log")).map_or(0, |m| m.len());
    e.record("ses_s", r#"{"type":"agent.notice","notice":"x"}"#);
    let listed = e.json(&["session", "list", "--json"]);
    assert!(appended() > 0);
    e.json(&["gc", "--json"]);
    assert_eq!(appended(), 0, "gc left the index's appended records");
    assert_eq!(e.json(&["session", "list", "--json"]), listed);
    let (code, out, err) = e.tacho(&["log", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
    // Packed snapshots still restore.
    e.record("ses_s", r#"{"type":"session.end","reason":"completed"}"#);
    e.json(&["session", "rollback", "ses_s", "--yes", "--json"]);
    assert!(e.read("b.txt").is_none());
    let stats = e.json(&["log", "stats", "--json"]);
    assert!(stats["snapshot_store"]["snapshots"].as_u64().unwrap() >= 3);
    let (code, _, err) = e.tacho(&["snapshot", "--workspace", &ws, "../escape"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("leaves the workspace"), "{err}");
}

#[test]
fn a_snapshot_that_cannot_be_taken_never_costs_the_events() {
    let e = env();
    // The snapshot store cannot be created: a file is where its directory would be.
    std::fs::create_dir_all(&e.home).unwrap();
    std::fs::write(e.home.join("snapshots"), "in the way").unwrap();
    let ws = e.ws.display();
    let mut c = tacho(&e.home);
    c.args(["record", "--session", "ses_ok"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{{\"type\":\"session.start\",\"workspace\":\"{ws}\"}}\n{{\"type\":\"step.start\",\"step\":1}}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // The events are recorded; the missed snapshots are an error the user sees, of
    // its kind: the store cannot be written, an I/O error (exit 5).
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("note: line 1: no baseline snapshot of"),
        "{err}"
    );
    assert!(
        err.contains("2 automatic snapshot(s) could not be taken"),
        "{err}"
    );
    let (_, summary, _) = e.tacho(&["session", "replay", "ses_ok", "--mode", "summary"]);
    assert_eq!(
        summary.lines().count(),
        2,
        "both events recorded, no snapshot: {summary}"
    );
}

/// Stepping back one step at a time, then to the start: each rollback restores the
/// state before its step, tacho's own earlier rollbacks are not taken for outside
/// changes, and no run claims success while a conflict remains.
#[test]
fn stepping_back_one_step_at_a_time_restores_every_point() {
    let e = env();
    if tacho_tests::git::need_git() {
        tacho_tests::git::git(&e.ws, &["init", "-q"]);
    }
    e.write("f", "v0\n");
    e.write("g", "g0\n");
    let ws = e.ws.display();
    let id = "ses_steps";
    e.record(
        id,
        &format!(r#"{{"type":"session.start","workspace":"{ws}"}}"#),
    );
    for (step, f, g) in [(1, "v1", None), (2, "v2", Some("g2")), (3, "v3", None)] {
        e.record(id, &format!(r#"{{"type":"step.start","step":{step}}}"#));
        e.write("f", &format!("{f}\n"));
        if let Some(g) = g {
            e.write("g", &format!("{g}\n"));
        }
        e.record(id, &format!(r#"{{"type":"step.finish","step":{step}}}"#));
    }
    e.record(id, r#"{"type":"session.end","reason":"completed"}"#);
    let expect = |f: &str, g: &str| {
        assert_eq!(e.read("f").as_deref(), Some(format!("{f}\n").as_str()));
        assert_eq!(e.read("g").as_deref(), Some(format!("{g}\n").as_str()));
    };
    expect("v3", "g2");
    for (args, f, g) in [
        (vec!["--step", "3"], "v2", "g2"),
        (vec!["--step", "2"], "v1", "g0"),
        (vec!["--step", "1"], "v0", "g0"),
        (vec![], "v0", "g0"),
    ] {
        let mut cmd = vec!["session", "rollback", id, "--yes"];
        cmd.extend(args.iter().copied());
        let (code, out, err) = e.tacho(&cmd);
        assert_eq!(code, 0, "{cmd:?}: {out}{err}");
        assert!(!out.contains("  conflict  "), "{cmd:?}: {out}");
        assert!(out.contains(" 0 conflict(s)"), "{cmd:?}: {out}");
        expect(f, g);
    }
    e.fsck();
}

/// Changes made only by shell commands (no edit event names them) are seen in the
/// session's snapshots and count everywhere: risk, the graph's files, rollback points
/// and comparisons. The same session with its edits reported scores the same.
#[test]
fn changes_made_by_shell_commands_count_like_reported_edits() {
    let e = env();
    e.write("old.txt", "old\n");
    e.write("src/app.ts", "export {}\n");
    let ws = e.ws.display();
    let run = |id: &str, report: bool| {
        e.write("old.txt", "old\n");
        let _ = std::fs::remove_file(e.ws.join(".env"));
        let _ = std::fs::remove_dir_all(e.ws.join("src/auth"));
        e.record(
            id,
            &format!(r#"{{"type":"session.start","workspace":"{ws}","agent":"coder"}}"#),
        );
        e.record(id, r#"{"type":"step.start","step":1}"#);
        e.record(
            id,
            r#"{"type":"tool.call","call_id":"c1","tool":"bash","target":"echo KEY=1 > .env; mkdir -p src/auth; printf 'a\nb\n' > src/auth/token.ts; rm old.txt"}"#,
        );
        e.write(".env", "KEY=1\n");
        e.write("src/auth/token.ts", "a\nb\n");
        std::fs::remove_file(e.ws.join("old.txt")).unwrap();
        e.record(id, r#"{"type":"tool.result","call_id":"c1","status":"ok"}"#);
        if report {
            for (path, op) in [
                (".env", "create"),
                ("src/auth/token.ts", "create"),
                ("old.txt", "delete"),
            ] {
                e.record(
                    id,
                    &format!(r#"{{"type":"file.edit","path":"{path}","op":"{op}"}}"#),
                );
            }
        }
        e.record(id, r#"{"type":"step.finish","step":1}"#);
        e.record(id, r#"{"type":"session.end","reason":"completed"}"#);
    };
    run("ses_shell", false);
    let risk = e.json(&["risk", "ses_shell", "--json"]);
    assert_eq!(risk["files_changed"], 3, "{risk}");
    assert_eq!(risk["lines_changed"], 4, "{risk}");
    assert_ne!(risk["readiness"], "ready", "{risk}");
    let factors: Vec<&str> = risk["factors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert!(factors.contains(&"security_sensitive"), "{factors:?}");
    let graph = e.json(&["graph", "ses_shell", "--format", "json"]);
    assert_eq!(
        graph["files"][".env"]["observed"], true,
        "{}",
        graph["files"]
    );
    assert_eq!(graph["files"]["src/auth/token.ts"]["created"], true);
    assert_eq!(graph["files"]["src/auth/token.ts"]["lines_added"], 2);
    assert_eq!(graph["files"]["old.txt"]["deleted"], true);
    let (_, md, _) = e.tacho(&["graph", "ses_shell"]);
    assert!(md.contains("src/auth/token.ts"), "{md}");
    let points = e.json(&["session", "rollback", "ses_shell", "--list", "--json"]);
    assert_eq!(
        points["points"][0]["files"],
        serde_json::json!([".env", "old.txt", "src/auth/token.ts"])
    );
    // The same work with its edits reported: the same assessment.
    run("ses_reported", true);
    let reported = e.json(&["risk", "ses_reported", "--json"]);
    assert_eq!(reported["score"], risk["score"]);
    assert_eq!(reported["files_changed"], risk["files_changed"]);
    let cmp = e.json(&["session", "compare", "ses_shell", "ses_reported", "--json"]);
    assert_eq!(cmp["files_in_both"].as_array().unwrap().len(), 3, "{cmp}");
}

/// gc drops an unrecorded snapshot and its objects; the stat cache still names the
/// dropped blobs. The next snapshot must not reuse them: it reads the files again, so
/// every snapshot is whole and a rollback restores.
#[test]
fn gc_never_leaves_a_later_snapshot_pointing_at_dropped_content() {
    let e = env();
    e.write("notes.txt", "v1\n");
    // Written well before the scan, as at human speed: the stat cache trusts it.
    std::fs::File::options()
        .write(true)
        .open(e.ws.join("notes.txt"))
        .unwrap()
        .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        .unwrap();
    let ws = e.ws.display().to_string();
    let (code, _, err) = e.tacho(&["snapshot", "--workspace", &ws]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = e.tacho(&["gc", "--json"]);
    assert_eq!(code, 0, "{err}");
    let gc: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(gc["dropped_snapshots"].as_array().unwrap().len(), 1, "{gc}");
    e.record(
        "ses_gc",
        &format!(r#"{{"type":"session.start","workspace":"{ws}"}}"#),
    );
    e.write("notes.txt", "v2\n");
    e.record("ses_gc", r#"{"type":"session.end","reason":"completed"}"#);
    e.fsck();
    let (code, out, err) = e.tacho(&["session", "rollback", "ses_gc", "--yes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(e.read("notes.txt").as_deref(), Some("v1\n"));
    e.fsck();
}

/// `git fsck --strict` of the snapshot store under `home`: every object every ref
/// reaches is present and well formed.
fn fsck(home: &Path) {
    if Command::new("git").arg("--version").output().is_err() {
        return;
    }
    let out = Command::new("git")
        .arg("--git-dir")
        .arg(home.join("snapshots"))
        .args(["fsck", "--strict", "--no-dangling"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git fsck: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Snapshots recorded while gc runs over and over: none is lost, gc never fails, and
/// the store stays whole — `git fsck --strict` after every gc round, while snapshots
/// go on being taken, some of them written as packs. `TACHO_CAMPAIGN_SECS=60` runs the
/// campaign longer.
#[test]
fn gc_racing_snapshots_loses_none() {
    let e = env();
    e.write("a.txt", "a\n");
    let ws = e.ws.display().to_string();
    e.record(
        "ses_race",
        &format!(r#"{{"type":"session.start","workspace":"{ws}"}}"#),
    );
    let secs: u64 = std::env::var("TACHO_CAMPAIGN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let home = e.home.clone();
    let gc = std::thread::spawn(move || {
        let mut runs = 0;
        while std::time::Instant::now() < until {
            let mut c = tacho(&home);
            c.args(["gc"]);
            let (code, _, err) = run(c);
            assert!(code == 0 || code == 3, "gc exit {code}: {err}");
            // fsck reads objects and refs at different moments: it is run with the
            // writers paused (gc's own lock, which snapshot writers wait for), or a
            // ref written meanwhile looks like a missing object.
            let lock = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(home.join("snapshots/tacho-gc.lock"))
                .unwrap();
            lock.lock().unwrap();
            fsck(&home);
            drop(lock);
            runs += 1;
        }
        runs
    });
    let mut taken = 0;
    let mut n = 0;
    while std::time::Instant::now() < until {
        n += 1;
        e.write("a.txt", &format!("a {n}\n"));
        // Every third snapshot reads enough files to write its objects as a pack.
        if n % 3 == 0 {
            for k in 0..70 {
                e.write(&format!("many/f{k}.txt"), &format!("{k} {n}\n"));
            }
        }
        let (code, _, err) = e.tacho(&["snapshot", "--workspace", &ws, "--session", "ses_race"]);
        assert_eq!(code, 0, "{err}");
        taken += 1;
    }
    let gc_runs = gc.join().unwrap();
    assert!(taken > 0 && gc_runs > 0);
    // One more gc, then every recorded snapshot is whole.
    let (code, out, err) = e.tacho(&["gc", "--json"]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        report["incomplete_snapshots"],
        serde_json::json!([]),
        "{report}"
    );
    let graph = e.json(&["graph", "ses_race", "--format", "json"]);
    let snaps = graph["snapshots"].as_array().unwrap();
    assert_eq!(
        snaps.len(),
        taken + 1,
        "the baseline and every snapshot taken"
    );
    e.fsck();
    eprintln!(
        "{taken} snapshots recorded while gc ran {gc_runs} times, each followed by a clean \
         git fsck --strict: none lost"
    );
}

/// A workspace replaced by a symbolic link after its session: the rollback refuses to
/// write where the link points.
#[test]
fn a_workspace_replaced_by_a_link_is_not_rolled_back_through_it() {
    let e = env();
    e.session("ses_moved", true);
    let elsewhere = e._tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("keep.txt"), "mine\n").unwrap();
    let moved = e._tmp.path().join("ws-moved");
    std::fs::rename(&e.ws, &moved).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &e.ws).unwrap();
    let (code, out, err) = e.tacho(&["session", "rollback", "ses_moved", "--yes"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("now resolves to"), "{err}");
    let names: Vec<String> = std::fs::read_dir(&elsewhere)
        .unwrap()
        .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["keep.txt"], "nothing was written through the link");
}

/// `kill -9` during `rollback --yes` loses none of the user's work: the rollback's
/// intent (with the workspace as it was) is recorded before the first write, the next
/// run says the rollback was interrupted, and undoing it restores the workspace exactly.
/// `TACHO_CAMPAIGN_KILLS=100` runs more kills.
#[test]
fn a_rollback_killed_midway_can_be_undone() {
    let kills: u64 = std::env::var("TACHO_CAMPAIGN_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let mut interrupted = 0;
    for round in 0..kills {
        let e = env();
        let ws = e.ws.display().to_string();
        for i in 0..300 {
            e.write(&format!("f{i:03}.txt"), "v0\n");
        }
        e.record(
            "ses_k",
            &format!(r#"{{"type":"session.start","workspace":"{ws}"}}"#),
        );
        for i in 0..300 {
            e.write(&format!("f{i:03}.txt"), "v1 by the agent\n");
        }
        e.record("ses_k", r#"{"type":"session.end","reason":"completed"}"#);
        let before: Vec<Option<String>> =
            (0..300).map(|i| e.read(&format!("f{i:03}.txt"))).collect();
        let mut c = tacho(&e.home);
        c.args(["session", "rollback", "ses_k", "--yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = c.spawn().unwrap();
        // Spread over the run (about half a second in a debug build).
        std::thread::sleep(std::time::Duration::from_millis(40 + round * 73 % 420));
        let _ = child.kill();
        let status = child.wait().unwrap();
        // The next run tells of an interrupted rollback (a dry run only looks; a real
        // run records that it was cut short), which can then be undone.
        let (_, _, looked) = e.tacho(&["session", "rollback", "ses_k", "--dry-run"]);
        let (_, _, told) = e.tacho(&["session", "rollback", "ses_k"]);
        let (code, out, _) = e.tacho(&["session", "list", "--json"]);
        assert_eq!(code, 0);
        let rollbacks: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["title"] == "rollback of ses_k")
            .collect();
        if rollbacks.is_empty() {
            // Killed before it recorded anything: nothing was written either.
            assert_eq!(
                (0..300)
                    .map(|i| e.read(&format!("f{i:03}.txt")))
                    .collect::<Vec<_>>(),
                before,
                "round {round}"
            );
            continue;
        }
        let id = rollbacks[0]["session"].as_str().unwrap().to_owned();
        // Cut short (closed by the real run as an error), or finished before the kill.
        if rollbacks[0]["status"] == "error" {
            assert!(!status.success());
            assert!(
                looked.contains(&format!("rollback {id} was interrupted")),
                "{looked}"
            );
            assert!(
                told.contains(&format!("rollback {id} was interrupted")),
                "{told}"
            );
            interrupted += 1;
        }
        let (code, out, err) = e.tacho(&["session", "rollback", &id, "--yes"]);
        assert_eq!(code, 0, "round {round}: {out}{err}");
        let after: Vec<Option<String>> =
            (0..300).map(|i| e.read(&format!("f{i:03}.txt"))).collect();
        assert_eq!(after, before, "round {round}: the user's work is back");
        e.fsck();
    }
    eprintln!("{kills} kills during rollbacks, {interrupted} interrupted mid-way: no work lost");
}

/// The undo command a rollback prints works as printed after `kill -9` of that
/// rollback, with nothing run in between: the cut-short rollback's session is closed
/// by the undo itself (it was refused as "still running" before).
#[test]
fn the_printed_undo_works_right_after_a_killed_rollback() {
    let mut interrupted = 0;
    for round in 0..6u64 {
        let e = env();
        let ws = e.ws.display().to_string();
        for i in 0..300 {
            e.write(&format!("f{i:03}.txt"), "v0\n");
        }
        e.record(
            "ses_u",
            &format!(r#"{{"type":"session.start","workspace":"{ws}"}}"#),
        );
        for i in 0..300 {
            e.write(&format!("f{i:03}.txt"), "v1 by the agent\n");
        }
        e.record("ses_u", r#"{"type":"session.end","reason":"completed"}"#);
        let before: Vec<Option<String>> =
            (0..300).map(|i| e.read(&format!("f{i:03}.txt"))).collect();
        let mut c = tacho(&e.home);
        c.args(["session", "rollback", "ses_u", "--yes"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = c.spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(60 + round * 61 % 300));
        let _ = child.kill();
        let _ = child.wait();
        let (_, out, _) = e.tacho(&["session", "list", "--json"]);
        let Some(r) = out
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|r| r["title"] == "rollback of ses_u")
        else {
            continue;
        };
        let id = r["session"].as_str().unwrap().to_owned();
        if r["status"] == "running" {
            interrupted += 1;
        }
        let (code, out, err) = e.tacho(&["session", "rollback", &id, "--yes"]);
        assert_eq!(code, 0, "round {round}: {out}{err}");
        let after: Vec<Option<String>> =
            (0..300).map(|i| e.read(&format!("f{i:03}.txt"))).collect();
        assert_eq!(after, before, "round {round}: the user's work is back");
    }
    eprintln!("{interrupted} rollbacks undone right after being killed mid-way");
}

/// A session whose first snapshot was never taken (disk full, a hook killed before
/// it): its earliest snapshot comes after step 1 began, so step 1 has no before-state.
/// `--list`, the plan and its JSON name that step instead of calling the later
/// snapshot the baseline and leaving step 1's change in place without a word.
#[test]
fn steps_without_a_before_state_are_named() {
    let e = env();
    let ws = e.ws.display().to_string();
    e.write("a.txt", "a0\n");
    e.write("b.txt", "b0\n");
    let rec = |line: &str| {
        let mut c = tacho(&e.home);
        c.args(["record", "--session", "ses_nobase", "--snapshots", "off"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(line.as_bytes())
            .unwrap();
        assert!(child.wait_with_output().unwrap().status.success(), "{line}");
    };
    rec(&format!(r#"{{"type":"session.start","workspace":"{ws}"}}"#));
    rec(r#"{"type":"step.start","step":1}"#);
    e.write("a.txt", "a1\n");
    rec(r#"{"type":"step.finish","step":1}"#);
    rec(r#"{"type":"snapshot.take"}"#);
    rec(r#"{"type":"step.start","step":2}"#);
    e.write("b.txt", "b1\n");
    rec(r#"{"type":"step.finish","step":2}"#);
    rec(r#"{"type":"snapshot.take"}"#);
    rec(r#"{"type":"session.end","reason":"completed"}"#);

    let points = e.json(&["session", "rollback", "ses_nobase", "--list", "--json"]);
    assert_eq!(
        points["without_before_state"],
        serde_json::json!([1]),
        "{points}"
    );
    let (code, out, err) = e.tacho(&["session", "rollback", "ses_nobase", "--list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no before-state: step 1"), "{out}");
    assert!(!out.contains("baseline"), "{out}");
    let plan = e.json(&["session", "rollback", "ses_nobase", "--dry-run", "--json"]);
    assert_eq!(
        plan["without_before_state"],
        serde_json::json!([1]),
        "{plan}"
    );
    let (code, out, err) = e.tacho(&["session", "rollback", "ses_nobase", "--yes"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        (out.clone() + &err).contains("step 1 has no before-state"),
        "{out}{err}"
    );
    assert_eq!(e.read("b.txt").as_deref(), Some("b0\n"));
    assert_eq!(
        e.read("a.txt").as_deref(),
        Some("a1\n"),
        "step 1's change stays"
    );
}

/// The keys of a JSON object, sorted.
fn keys(v: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect();
    k.sort();
    k
}

/// A rollback's JSON carries every fact its text shows: when the point's snapshot was
/// taken (in both time forms), how many files the workspace-now snapshot holds,
/// whether there is a snapshot after the point, and whether `--force` would restore a
/// conflict.
#[test]
fn a_rollback_plan_in_json_says_what_its_text_says() {
    let e = env();
    e.session("ses_facts", true);
    e.write("new/made.txt", "edited by the user\n");
    let plan = e.json(&["session", "rollback", "ses_facts", "--dry-run", "--json"]);
    assert_eq!(plan["type"], "rollback_plan");
    let (_, text, _) = e.tacho(&["session", "rollback", "ses_facts", "--dry-run"]);
    let at = plan["to_snapshot_at"].as_str().unwrap();
    assert!(
        plan["to_snapshot_at_unix_ns"].as_i64().unwrap() > 0,
        "{plan}"
    );
    assert!(text.contains(at), "{at} not in {text}");
    let files = plan["pre_snapshot_files"].as_u64().unwrap();
    assert!(
        text.contains(&format!("({files} files) — rolling back can be undone")),
        "{text}"
    );
    assert_eq!(plan["no_later_snapshot"], false);
    assert_eq!(plan["conflicts"][0]["path"], "new/made.txt");
    assert_eq!(plan["conflicts"][0]["forceable"], true);
    assert!(text.contains("(--force restores it)"), "{text}");
}

/// `gc` and `log stats` describe the snapshot store's space with the same record.
#[test]
fn gc_and_stats_describe_the_snapshot_store_alike() {
    let e = env();
    e.session("ses_space", true);
    let stats = e.json(&["log", "stats", "--json"]);
    let gc = e.json(&["gc", "--dry-run", "--json"]);
    assert_eq!(keys(&gc["before"]), keys(&stats["snapshot_store"]));
    assert_eq!(keys(&gc["after"]), keys(&stats["snapshot_store"]));
    assert_eq!(gc["before"], stats["snapshot_store"]);
}

/// Replay verification's JSON summary has the facts of its text: the segments read
/// and the last event's time (in both forms).
#[test]
fn replay_verification_in_json_says_what_its_text_says() {
    let e = env();
    e.session("ses_verified", true);
    let (code, out, err) = e.tacho(&[
        "session",
        "replay",
        "ses_verified",
        "--mode",
        "verify",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let summary: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(summary["type"], "summary");
    let (_, text, _) = e.tacho(&["session", "replay", "ses_verified", "--mode", "verify"]);
    let segments = summary["segments"].as_u64().unwrap();
    assert!(
        text.contains(&format!("events in {segments} segment(s))")),
        "{text}"
    );
    assert!(
        summary["last_event_unix_ns"].as_i64().unwrap() > 0,
        "{summary}"
    );
    let last = summary["last_event"].as_str().unwrap();
    assert!(text.contains(&format!("last event: {last}")), "{text}");
}

/// A dumped segment's first event time is a `*_unix_ns` time with its RFC 3339 form
/// beside it, as every other time in tacho's JSON.
#[test]
fn a_dumped_segment_gives_its_time_in_both_forms() {
    let e = env();
    e.session("ses_dumped", true);
    let seg = e.json(&["log", "dump", "ses_dumped", "--json"]);
    assert_eq!(seg["type"], "segment");
    assert!(seg["first_time_unix_ns"].as_i64().unwrap() > 0, "{seg}");
    assert!(seg["first_time"].as_str().unwrap().ends_with('Z'), "{seg}");
}

/// `--mode export --output FILE --json` prints what was exported as a record; with
/// the package on stdout there is no room for one, and `--json` is refused.
#[test]
fn an_export_says_what_it_wrote_in_json() {
    let e = env();
    e.session("ses_exported", true);
    let pkg = e.home.with_file_name("ses_exported.tpkg");
    let pkg_arg = pkg.display().to_string();
    let x = e.json(&[
        "session",
        "replay",
        "ses_exported",
        "--mode",
        "export",
        "--output",
        &pkg_arg,
        "--json",
    ]);
    assert_eq!(x["type"], "export");
    assert_eq!(x["session"], "ses_exported");
    assert_eq!(
        x["bytes"].as_u64().unwrap(),
        std::fs::metadata(&pkg).unwrap().len()
    );
    assert_eq!(x["output"], pkg_arg);
    let verified = e.json(&[
        "session",
        "replay",
        "--mode",
        "verify",
        "--package",
        &pkg_arg,
        "--json",
    ]);
    // The first record of a package's verification (no finding, no interrupted
    // call): its summary, with the head the export named.
    assert_eq!(verified["head"], x["head"]);
    assert_eq!(verified["events"], x["events"]);
    let (code, _, err) = e.tacho(&[
        "session",
        "replay",
        "ses_exported",
        "--mode",
        "export",
        "--json",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--output"), "{err}");
}

/// Where a dump stops at damaged bytes, its JSON says how many bytes are left to the
/// end, as its text does (null for a damaged header, which ends the dump at once).
#[test]
fn a_dump_that_stops_at_damage_says_how_much_is_left_in_json_too() {
    let e = env();
    e.session("ses_damaged", true);
    let seg = e
        .home
        .join("log/streams/ses_damaged/00000000000000000000.tseg");
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.windows(5).position(|w| w == b"coder").unwrap();
    bytes[at] = b'k';
    std::fs::write(&seg, &bytes).unwrap();
    let (code, out, _) = e.tacho(&["log", "dump", "ses_damaged", "--json"]);
    assert_eq!(code, 1);
    let damage: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(damage["type"], "damage");
    let left = damage["remaining"].as_u64().unwrap();
    assert!(left > 0, "{damage}");
    let (_, text, _) = e.tacho(&["log", "dump", "ses_damaged"]);
    assert!(
        text.contains(&format!("({left} bytes to the end)")),
        "{text}"
    );
    // A header that does not decode: nothing is left to walk.
    std::fs::write(&seg, &bytes[..10]).unwrap();
    let arg = seg.display().to_string();
    let (code, out, _) = e.tacho(&["log", "dump", "--file", &arg, "--json"]);
    assert_eq!(code, 1);
    let damage: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(damage["type"], "damage");
    assert_eq!(damage["offset"], 0);
    assert!(damage["remaining"].is_null(), "{damage}");
}

/// Issue 30: a file that changes between two tool calls — after the first call's
/// after-snapshot, before the next call's before-snapshot, with no call running — is
/// no tool's change. It is recorded apart (graph, risk, rollback points, the audit
/// report), never among the tools' files, and undone on its own.
#[test]
fn a_change_no_tool_call_made_is_shown_apart_and_undone_on_its_own() {
    let e = env();
    e.write("a.txt", "a\n");
    e.write("b.txt", "b\n");
    e.write("notes.txt", "mine\n");
    let ws = e.ws.display();
    let id = "ses_gap";
    e.record(
        id,
        &format!(r#"{{"type":"session.start","workspace":"{ws}","agent":"coder"}}"#),
    );
    // Call 1, as a hook records it: the before-snapshot (automatic, before the
    // step), the call, the change, the result, the after-snapshot.
    e.record(id, r#"{"type":"step.start","step":1}"#);
    e.record(
        id,
        r#"{"type":"tool.call","call_id":"c1","tool":"Write","target":"a.txt"}"#,
    );
    e.write("a.txt", "a\nby the tool\n");
    e.record(id, r#"{"type":"tool.result","call_id":"c1","status":"ok"}"#);
    e.record(id, r#"{"type":"file.edit","path":"a.txt","op":"modify"}"#);
    e.record(id, r#"{"type":"snapshot.take"}"#);
    e.record(id, r#"{"type":"step.finish","step":1}"#);
    // Between the calls, no call that can change files running: the user edits a
    // file and makes another while the agent reads one (a read-only call, outside any
    // step, as hooks record it).
    e.write("notes.txt", "mine\nedited by hand\n");
    e.record(
        id,
        r#"{"type":"tool.call","call_id":"r1","tool":"Read","target":"a.txt"}"#,
    );
    e.write("scratch.txt", "scratch\n");
    e.record(id, r#"{"type":"tool.result","call_id":"r1","status":"ok"}"#);
    // Call 2.
    e.record(id, r#"{"type":"step.start","step":2}"#);
    e.record(
        id,
        r#"{"type":"tool.call","call_id":"c2","tool":"bash","target":"echo more >> b.txt"}"#,
    );
    e.write("b.txt", "b\nmore\n");
    e.record(id, r#"{"type":"tool.result","call_id":"c2","status":"ok"}"#);
    e.record(id, r#"{"type":"snapshot.take"}"#);
    e.record(id, r#"{"type":"step.finish","step":2}"#);
    e.record(id, r#"{"type":"session.end","reason":"completed"}"#);

    // The graph: the tools' files, and the unclaimed change apart.
    let graph = e.json(&["graph", id, "--format", "json"]);
    let files: Vec<&str> = graph["files"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(files, ["a.txt", "b.txt"], "{}", graph["files"]);
    let unclaimed = graph["unclaimed"].as_array().unwrap();
    assert_eq!(unclaimed.len(), 1, "{unclaimed:?}");
    let u = &unclaimed[0];
    let paths: Vec<(&str, &str)> = u["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["change"].as_str().unwrap()))
        .collect();
    assert_eq!(
        paths,
        [("notes.txt", "modified"), ("scratch.txt", "created")]
    );
    assert_eq!(u["files"][0]["lines_added"], 1);
    // Between the after-snapshot of call 1 and the before-snapshot of call 2.
    let snaps = graph["snapshots"].as_array().unwrap();
    let seq_of = |reason: &str, before: Option<u64>| {
        snaps
            .iter()
            .find(|s| s["reason"] == reason && s["before_step"].as_u64() == before)
            .unwrap()["seq"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(u["before_seq"].as_u64(), Some(seq_of("step", Some(2))));
    let c1_result = graph["steps"][0]["tools"][0]["result_seq"]
        .as_u64()
        .unwrap();
    assert!(u["after_seq"].as_u64().unwrap() > c1_result, "{u}");
    let steps_edits: Vec<&serde_json::Value> = graph["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["edits"])
        .collect();
    assert!(
        !serde_json::to_string(&steps_edits)
            .unwrap()
            .contains("notes.txt"),
        "{steps_edits:?}"
    );
    let (_, md, _) = e.tacho(&["graph", id]);
    let apart = md
        .split("Changes no tool call made")
        .nth(1)
        .unwrap_or_else(|| panic!("{md}"));
    assert!(
        apart.contains("notes.txt") && apart.contains("scratch.txt"),
        "{md}"
    );
    let (_, timeline, _) = e.tacho(&["graph", id, "--format", "timeline"]);
    assert!(
        timeline.contains("changes no tool call made (1, since event #")
            && timeline.contains("notes.txt, scratch.txt"),
        "{timeline}"
    );

    // Risk: a factor of its own, with the paths and the event range.
    let risk = e.json(&["risk", id, "--json"]);
    assert_eq!(risk["files_changed"], 2, "{risk}");
    let f = risk["factors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "unclaimed_changes")
        .unwrap_or_else(|| panic!("{risk}"));
    assert_eq!(f["paths"], serde_json::json!(["notes.txt", "scratch.txt"]));
    let range = format!("#{}..#{}", u["after_seq"], u["before_seq"]);
    assert!(f["evidence"].as_str().unwrap().contains(&range), "{f}");
    let (_, risk_text, _) = e.tacho(&["risk", id]);
    assert!(risk_text.contains("unclaimed_changes"), "{risk_text}");

    // Rollback points: listed with the command that undoes it.
    let points = e.json(&["session", "rollback", id, "--list", "--json"]);
    assert_eq!(points["unclaimed"][0]["files"], u["files"], "{points}");
    let undo = format!("tacho session rollback {id} --unclaimed 1");
    assert_eq!(points["unclaimed"][0]["undo"], undo.as_str(), "{points}");
    let (_, list, _) = e.tacho(&["session", "rollback", id, "--list"]);
    assert!(
        list.contains(&undo) && list.contains("scratch.txt"),
        "{list}"
    );

    // The audit report, Markdown and JSON.
    let (_, report, err) = e.tacho(&["audit", "report", id]);
    let apart = report
        .split("Changes no tool call made")
        .nth(1)
        .unwrap_or_else(|| panic!("{report}{err}"));
    assert!(apart.contains("scratch.txt"), "{report}");
    let report_json = e.json(&["audit", "report", id, "--json"]);
    assert_eq!(report_json["graph"]["unclaimed"], graph["unclaimed"]);
    let report_files: Vec<&str> = report_json["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(report_files, ["a.txt", "b.txt"]);
    let (_, html, _) = e.tacho(&["audit", "report", id, "--format", "html"]);
    assert!(html.contains("Changes no tool call made"), "{html}");
    // The run-report page renders the same report.
    let page = tacho_tests::run_report_page(&e.home, id);
    let apart = page
        .split("Changes no tool call made")
        .nth(1)
        .unwrap_or_else(|| panic!("{page}"));
    assert!(
        apart.contains("scratch.txt") && apart.contains(&undo),
        "{page}"
    );

    // Undone on its own: only the unclaimed change's files, byte for byte.
    let dry = e.json(&[
        "session",
        "rollback",
        id,
        "--unclaimed",
        "1",
        "--dry-run",
        "--json",
    ]);
    let plan: Vec<(&str, &str)> = dry["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["path"].as_str().unwrap(), i["action"].as_str().unwrap()))
        .collect();
    assert_eq!(plan, [("notes.txt", "restore"), ("scratch.txt", "delete")]);
    let real = e.json(&[
        "session",
        "rollback",
        id,
        "--unclaimed",
        "1",
        "--yes",
        "--json",
    ]);
    assert_eq!(real["applied"]["done"], 2, "{real}");
    assert_eq!(e.read("notes.txt").as_deref(), Some("mine\n"));
    assert!(e.read("scratch.txt").is_none());
    assert_eq!(e.read("a.txt").as_deref(), Some("a\nby the tool\n"));
    assert_eq!(e.read("b.txt").as_deref(), Some("b\nmore\n"));
    e.fsck();
}

/// An unclaimed change whose file changed again since is a conflict unless forced.
#[test]
fn undoing_an_unclaimed_change_refuses_a_file_changed_since() {
    let e = env();
    e.write("notes.txt", "mine\n");
    let ws = e.ws.display();
    let id = "ses_gap2";
    e.record(
        id,
        &format!(r#"{{"type":"session.start","workspace":"{ws}","agent":"coder"}}"#),
    );
    e.write("notes.txt", "mine\nby hand\n");
    e.record(id, r#"{"type":"step.start","step":1}"#);
    e.record(
        id,
        r#"{"type":"tool.call","call_id":"c1","tool":"bash","target":"echo tool >> notes.txt"}"#,
    );
    e.write("notes.txt", "mine\nby hand\ntool\n");
    e.record(id, r#"{"type":"tool.result","call_id":"c1","status":"ok"}"#);
    e.record(id, r#"{"type":"step.finish","step":1}"#);
    e.record(id, r#"{"type":"session.end","reason":"completed"}"#);
    let points = e.json(&["session", "rollback", id, "--list", "--json"]);
    assert_eq!(points["unclaimed"].as_array().unwrap().len(), 1, "{points}");
    let (code, out, _) = e.tacho(&[
        "session",
        "rollback",
        id,
        "--unclaimed",
        "1",
        "--yes",
        "--json",
    ]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        e.read("notes.txt").as_deref(),
        Some("mine\nby hand\ntool\n")
    );
    let forced = e.json(&[
        "session",
        "rollback",
        id,
        "--unclaimed",
        "1",
        "--yes",
        "--force",
        "--json",
    ]);
    assert_eq!(forced["applied"]["done"], 1, "{forced}");
    assert_eq!(e.read("notes.txt").as_deref(), Some("mine\n"));
}

/// Issue 47 (6): a workspace tacho refuses to snapshot (the home directory) costs no
/// event, and the exit code says bad input (2), not a verification error (1).
#[test]
fn a_refused_workspace_records_the_events_and_exits_as_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().canonicalize().unwrap().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut c = tacho(&tmp.path().join("data"));
    c.env("HOME", &home)
        .args(["record", "--session", "ses_home"])
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
                "{{\"type\":\"session.start\",\"workspace\":\"{}\"}}\n",
                home.display()
            )
            .as_bytes(),
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("home directory") && err.contains("recorded 1 event(s)"),
        "{err}"
    );
    let mut c = tacho(&tmp.path().join("data"));
    c.args(["session", "list", "--json"]);
    let (code, list, _) = run(c);
    assert_eq!(code, 0);
    assert!(list.contains("ses_home"), "{list}");
}

/// Issue 46 (6): `session rollback S --path P` restores only the files at or under P (a
/// file or a directory), with the same dry run, conflicts and recording as a whole
/// rollback, and is undone as one is; a path outside the workspace is refused.
#[test]
fn a_rollback_can_be_scoped_to_paths() {
    let e = env();
    e.session("ses_scoped", true);
    // The plan of the whole session touches four files; scoped to `new/`, one.
    let plan = e.json(&[
        "session",
        "rollback",
        "ses_scoped",
        "--path",
        "new",
        "--json",
    ]);
    let paths: Vec<&str> = plan["plan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["new/made.txt"], "{plan}");
    assert_eq!(plan["paths"], serde_json::json!(["new"]), "{plan}");
    let (_, text, _) = e.tacho(&[
        "session",
        "rollback",
        "ses_scoped",
        "--path",
        "new/",
        "--dry-run",
    ]);
    assert!(
        text.contains("Only files at or under: new (the rest stays as it is)"),
        "{text}"
    );
    // Applied, with an absolute path for the file: only those change.
    let abs = e.ws.join("app.rs").display().to_string();
    let done = e.json(&[
        "session",
        "rollback",
        "ses_scoped",
        "--path",
        "new",
        "--path",
        &abs,
        "--yes",
        "--json",
    ]);
    assert_eq!(done["applied"]["done"], 2, "{done}");
    assert_eq!(e.read("new/made.txt"), None);
    assert_eq!(e.read("app.rs").as_deref(), Some("fn main() {}\n"));
    assert_eq!(
        e.read("notes.txt"),
        None,
        "outside the paths: left as the session left it"
    );
    assert!(executable(&e.ws.join("run.sh")));
    // Undone as a whole rollback is: the rollback's own session rolled back.
    let rb = done["applied"]["recorded_session"]
        .as_str()
        .unwrap()
        .to_string();
    let title = e.json(&["session", "show", &rb, "--json"]);
    assert!(
        title
            .to_string()
            .contains("rollback of ses_scoped (only new, app.rs)"),
        "{title}"
    );
    let undo = e.json(&["session", "rollback", &rb, "--yes", "--json"]);
    assert_eq!(undo["applied"]["done"], 2, "{undo}");
    assert_eq!(e.read("new/made.txt").as_deref(), Some("made\n"));
    assert_eq!(
        e.read("app.rs").as_deref(),
        Some("fn main() { println!(\"hi\"); }\n")
    );
    // Not a path inside the workspace.
    for bad in ["../x", "/etc", "new/../app.rs", ""] {
        let (code, _, err) = e.tacho(&["session", "rollback", "ses_scoped", "--path", bad]);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(
            err.contains("is not a path inside the workspace"),
            "{bad}: {err}"
        );
    }
    // Not with --unclaimed or --list.
    let (code, _, _) = e.tacho(&[
        "session",
        "rollback",
        "ses_scoped",
        "--path",
        "new",
        "--list",
    ]);
    assert_eq!(code, 2);
    e.fsck();
}
