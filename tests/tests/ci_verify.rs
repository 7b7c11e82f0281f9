//! `tacho ci verify` on real repositories with real hooks: commits linked to the
//! sessions whose hooks saw HEAD move, unlinked commits, a session whose log lost a
//! byte; Markdown and JUnit outputs (JUnit parsed as XML by python3); and the secret
//! scan a push makes, with its recorded allowance.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tacho_tests::git::{git, have_git};
use tacho_tests::{run, tacho};

struct Env {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    home: PathBuf,
    ws: PathBuf,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let ws = dir.join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::write(ws.join("src/a.txt"), "a\n").unwrap();
        git(&ws, &["init", "-q", "-b", "main"]);
        git(&ws, &["add", "-A"]);
        git(&ws, &["commit", "-q", "-m", "base"]);
        std::fs::write(dir.join("t.jsonl"), "").unwrap();
        Env {
            home: dir.join("home"),
            dir,
            ws,
            _tmp: tmp,
        }
    }

    fn tacho(&self, args: &[&str]) -> (i32, String, String) {
        let mut c = tacho(&self.home);
        c.current_dir(&self.ws).args(args);
        run(c)
    }

    /// Sends Claude Code's `event` to `tacho hook claude-code` (exit 0, no problem).
    fn send(&self, session: &str, event: &str, extra: serde_json::Value) {
        let mut v = serde_json::json!({
            "session_id": session,
            "cwd": self.ws.display().to_string(),
            "hook_event_name": event,
            "transcript_path": self.dir.join("t.jsonl").display().to_string(),
        });
        if let (Some(m), serde_json::Value::Object(x)) = (v.as_object_mut(), extra) {
            m.extend(x);
        }
        let mut c = tacho(&self.home);
        c.current_dir(&self.ws)
            .args(["hook", "claude-code"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), v.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(err.is_empty(), "{event}: {err}");
    }

    /// A Bash call of the agent: its hooks before and after, `work` done between
    /// them (what the command did), `output` what it printed.
    fn bash(&self, session: &str, id: &str, command: &str, output: &str, work: impl FnOnce()) {
        let input = serde_json::json!({ "command": command });
        self.send(
            session,
            "PreToolUse",
            serde_json::json!({"tool_name": "Bash", "tool_use_id": id, "tool_input": input}),
        );
        work();
        self.send(
            session,
            "PostToolUse",
            serde_json::json!({"tool_name": "Bash", "tool_use_id": id, "tool_input": input,
                "tool_response": {"stdout": output, "stderr": "", "interrupted": false}}),
        );
    }

    fn commit(&self, file: &str, text: &str, message: &str) -> String {
        std::fs::write(self.ws.join(file), text).unwrap();
        git(&self.ws, &["add", "-A"]);
        git(&self.ws, &["commit", "-q", "-m", message]);
        git(&self.ws, &["rev-parse", "HEAD"])
    }

    /// The one session recorded.
    fn session(&self) -> String {
        let (code, out, err) = self.tacho(&["session", "list", "--json"]);
        assert_eq!(code, 0, "{err}");
        let rows: Vec<serde_json::Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 1, "{out}");
        rows[0]["session"].as_str().unwrap().to_owned()
    }

    fn ci(&self, args: &[&str]) -> (i32, serde_json::Value, String) {
        let mut all = vec!["ci", "verify"];
        all.extend_from_slice(args);
        all.push("--json");
        let (code, out, err) = self.tacho(&all);
        let v = serde_json::from_str(out.trim()).unwrap_or(serde_json::Value::Null);
        (code, v, err)
    }
}

/// `python3 -c` of `script` with `arg`: its stdout, or None without python3.
fn python(script: &str, arg: &Path) -> Option<String> {
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(arg)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

#[test]
fn commits_are_linked_by_the_hooks_and_checked_with_exit_codes() {
    if !have_git() {
        return tacho_tests::skip_without("git");
    }
    let env = Env::new();
    let base = git(&env.ws, &["rev-parse", "HEAD"]);
    env.send(
        "s1",
        "SessionStart",
        serde_json::json!({"source": "startup"}),
    );
    let session = env.session();
    // The agent commits through its shell: the hook after the call sees HEAD move.
    let mut linked = String::new();
    env.bash("s1", "t1", "git commit -am fix", "[main] fix", || {
        linked = env.commit("src/a.txt", "fixed\n", "fix: the agent's commit");
    });
    // A commit no session saw, then a commit whose message claims the session.
    let outside = env.commit("src/b.txt", "b\n", "made by hand, cc @octocat");
    let claimed = env.commit(
        "src/c.txt",
        "c\n",
        &format!("claims a session\n\nTacho-Session: {session}"),
    );

    // The linked commit alone: passes, naming its session.
    let (code, r, err) = env.ci(&[&format!("{base}..{linked}"), "--require-session"]);
    assert_eq!(code, 0, "{err}{r}");
    assert_eq!(r["commits"][0]["commit"], linked.as_str());
    assert_eq!(r["commits"][0]["sessions"][0], session.as_str());
    assert_eq!(r["sessions"][0]["verified"], true);
    assert_eq!(r["sessions"][0]["signature"]["status"], "unsigned");
    assert!(r["sessions"][0]["risk_level"].is_string(), "{r}");

    // The whole range: two commits no session saw made (a trailer is a claim, not a
    // link). Without --require-session that passes; with it, exit 1 naming both.
    let range = format!("{base}..HEAD");
    let (code, r, err) = env.ci(&[&range]);
    assert_eq!(code, 0, "{err}{r}");
    assert_eq!(r["commits"].as_array().unwrap().len(), 3);
    let (code, r, err) = env.ci(&[&range, "--require-session"]);
    assert_eq!(code, 1, "{err}{r}");
    let failed: Vec<&str> = r["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["commit"].as_str().unwrap())
        .collect();
    assert_eq!(failed, vec![claimed.as_str(), outside.as_str()]);
    // Unsigned sessions fail --require-signature.
    let (code, r, _) = env.ci(&[&format!("{base}..{linked}"), "--require-signature"]);
    assert_eq!(code, 1, "{r}");
    assert!(
        r["failures"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("not signed")
    );

    // Markdown and JUnit of the failing run, written to files.
    let md = env.dir.join("ci.md");
    let junit = env.dir.join("junit.xml");
    let (code, _, err) = env.tacho(&[
        "ci",
        "verify",
        &range,
        "--require-session",
        "--markdown",
        md.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.starts_with("## tacho ci verify: ❌ failed"), "{md}");
    assert!(md.contains("2 unlinked commit(s)"), "{md}");
    assert!(
        md.contains(&format!(
            "| `{}` | fix: the agent's commit |",
            &linked[..12]
        )),
        "{md}"
    );
    assert!(md.contains(&format!("`{session}`")), "{md}");
    assert!(md.contains("| **unlinked** |"), "{md}");
    // The agent's commit message mentions nobody in the comment (issue 42).
    assert!(md.contains("cc @\u{200B}octocat"), "{md}");
    assert!(!md.contains("@octocat"), "{md}");
    let parsed = python(
        "import sys, xml.etree.ElementTree as E\n\
         r = E.parse(sys.argv[1]).getroot()\n\
         s = r.find('testsuite')\n\
         print(r.tag, s.get('tests'), s.get('failures'))\n\
         for c in s.findall('testcase'):\n\
         \x20   print(c.get('classname'), c.get('name').split()[0], len(c.findall('failure')))",
        &junit,
    );
    if let Some(parsed) = parsed {
        let want = format!(
            "testsuites 4 2\ntacho.commits {} 1\ntacho.commits {} 1\ntacho.commits {} 0\ntacho.sessions {session} 0\n",
            &claimed[..12],
            &outside[..12],
            &linked[..12]
        );
        assert_eq!(parsed, want);
    }

    // A byte of the session's log altered: the session does not verify, exit 1.
    let dir = env.home.join("log/streams").join(&session);
    let seg = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "tseg"))
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[128 + 40] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    let (code, r, err) = env.ci(&[&format!("{base}..{linked}")]);
    assert_eq!(code, 1, "{err}{r}");
    // The damage is in the first frame: the link behind it is lost with it, so the
    // commit shows unlinked and the damaged session fails the range by itself.
    assert_eq!(r["failures"][0]["session"], session.as_str(), "{err}{r}");
    assert!(
        r["failures"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("does not verify"),
        "{r}"
    );

    // A range that is not one: input error, exit 2.
    let (code, _, err) = env.tacho(&["ci", "verify", &base]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("BASE..HEAD"), "{err}");
}

#[test]
fn the_secret_scan_refuses_a_token_until_an_allowance_is_recorded() {
    if !have_git() {
        return tacho_tests::skip_without("git");
    }
    let env = Env::new();
    env.send(
        "s2",
        "SessionStart",
        serde_json::json!({"source": "startup"}),
    );
    let session = env.session();
    env.bash(
        "s2",
        "t1",
        "cat .env",
        &format!(
            "PATH=/bin\nGITHUB_TOKEN=ghp_{}\n",
            "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI2kL4"
        ),
        || {},
    );
    let (code, out, err) = env.tacho(&["session", "secrets", &session, "--json"]);
    assert_eq!(code, 1, "{err}");
    let scan: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let f = &scan["findings"][0];
    assert_eq!(scan["findings"].as_array().unwrap().len(), 1, "{scan}");
    assert_eq!(f["session"], session.as_str());
    assert_eq!(f["event"], "tool.result");
    assert_eq!(f["kind"], "github-pat");
    assert_eq!(
        (f["field"].as_str(), f["line"].as_u64()),
        (Some("output"), Some(2))
    );
    assert!(
        !out.contains("9cE1gI2kL4"),
        "the secret itself is never shown: {out}"
    );
    assert!(err.contains("not allowed"), "{err}");
    let seq = f["seq"].as_u64().unwrap().to_string();

    // Not while the session runs: the agent in it could allow its own (issue 42).
    let (code, _, err) = env.tacho(&["session", "secrets", &session, "--allow", &seq]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is still running"), "{err}");
    let (code, _, err) = env.tacho(&["session", "end", &session]);
    assert_eq!(code, 0, "{err}");
    // An event without a secret cannot be allowed; the one with it can, and the
    // allowance is an event of the session, under its hash chain.
    let (code, _, err) = env.tacho(&["session", "secrets", &session, "--allow", "0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nothing to allow"), "{err}");
    let (code, out, err) = env.tacho(&[
        "session",
        "secrets",
        &session,
        "--allow",
        &seq,
        "--reason",
        "a revoked token",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let allowed: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(allowed["allowed"].as_u64().unwrap().to_string(), seq);
    let (code, out, err) = env.tacho(&["session", "secrets", &session, "--json"]);
    assert_eq!(code, 0, "{err}");
    let scan: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (scan["blocking"].as_u64(), &scan["findings"][0]["allowed"]),
        (Some(0), &serde_json::json!(true))
    );
    let (code, out, _) = env.tacho(&["log", "dump", &session]);
    assert_eq!(code, 0);
    assert!(
        out.contains("\"type\":\"secret.allowed\"") && out.contains("a revoked token"),
        "{out}"
    );
    let (code, out, err) = env.tacho(&["log", "verify", "--session", &session]);
    assert_eq!(code, 0, "{out}{err}");
    // The agent cannot forge one through `tacho record`: it is evidence.
    let forged = format!("{{\"type\":\"secret.allowed\",\"session\":\"{session}\",\"seq\":1}}\n");
    let (code, _, err) = tacho_tests::run_with_stdin(&env.home, &["record"], &forged);
    assert_eq!(code, 2, "{err}");
}

/// Records a finished shell call in `session` through `tacho record` (live: HEAD is
/// read after it).
fn shell_call(home: &Path, session: &str, id: &str) {
    let lines = format!(
        "{{\"type\":\"tool.call\",\"session\":\"{session}\",\"call_id\":\"{id}\",\"tool\":\"bash\",\"input\":{{\"command\":\"git commit\"}}}}\n\
         {{\"type\":\"tool.result\",\"session\":\"{session}\",\"call_id\":\"{id}\",\"status\":\"ok\"}}\n"
    );
    let (code, _, err) = tacho_tests::run_with_stdin(home, &["record"], &lines);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn an_assured_goal_passes_only_when_its_receipts_saw_the_committed_tree() {
    if !have_git() {
        return tacho_tests::skip_without("git");
    }
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = tacho_tests::parity_workspace(tmp.path(), "ses_gci");
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "base"]);
    let base = git(&ws, &["rev-parse", "HEAD"]);
    shell_call(&home, "ses_gci", "c0"); // tacho reads HEAD: the base
    let t = |args: &[&str]| {
        let mut c = tacho(&home);
        c.current_dir(&ws).args(args);
        run(c)
    };
    let (code, _, err) = t(&[
        "goal",
        "create",
        "--assure",
        "--plan",
        "plan.md",
        "--session",
        "ses_gci",
    ]);
    assert_eq!(code, 0, "{err}");
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    let (code, _, err) = t(&["goal", "check", "parity", "--session", "ses_gci"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = t(&["goal", "complete", "--session", "ses_gci"]);
    assert_eq!(code, 0, "{out}{err}");
    git(&ws, &["commit", "-q", "-am", "fix the value"]);
    let fixed = git(&ws, &["rev-parse", "HEAD"]);
    shell_call(&home, "ses_gci", "c1");

    let ci = |range: &str| {
        let (code, out, err) = t(&["ci", "verify", range, "--require-session", "--json"]);
        let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
        (code, r, err)
    };
    let (code, r, err) = ci(&format!("{base}..{fixed}"));
    assert_eq!(code, 0, "{err}{r}");
    let goal = &r["sessions"][0]["goals"][0];
    assert_eq!(goal["ok"], true, "{r}");
    assert_eq!(goal["commit"], fixed.as_str());

    // The session commits a change after the receipts: the committed tree is not what
    // they saw, so the goal does not pass the range.
    std::fs::write(ws.join("src/value.txt"), "42\n# after the check\n").unwrap();
    git(&ws, &["commit", "-q", "-am", "a change after the check"]);
    let later = git(&ws, &["rev-parse", "HEAD"]);
    shell_call(&home, "ses_gci", "c2");
    let (code, r, err) = ci(&format!("{base}..{later}"));
    assert_eq!(code, 1, "{err}{r}");
    let goal = &r["sessions"][0]["goals"][0];
    assert_eq!(
        (goal["ok"].as_bool(), goal["commit"].as_str()),
        (Some(false), Some(later.as_str())),
        "{r}"
    );
    assert_eq!(goal["mismatched_checks"], serde_json::json!(["parity"]));
    let reason = r["failures"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("not what the receipts of parity saw"),
        "{reason}"
    );
}

impl Env {
    /// `tacho record` of one JSON line (exit 0).
    fn record(&self, session: &str, line: &str) {
        let mut c = tacho(&self.home);
        c.current_dir(&self.ws)
            .args(["record", "--session", session])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), line.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Issue 42 (4): links come only from what tacho saw made. A session `tacho record`
/// wrote in the name of Claude Code (whose sessions the hooks record) links nothing;
/// a commit made before the session and brought in by `git merge --ff-only` while a
/// made-up session watched is not linked by it. A commit an agent-reported session
/// saw made during its step is linked, and shown as agent-reported.
#[test]
fn only_commits_made_during_a_session_are_linked_by_it() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let e = Env::new();
    let base = git(&e.ws, &["rev-parse", "HEAD"]).trim().to_owned();
    let ws = e.ws.display().to_string();
    let ci = |e: &Env| {
        let head = git(&e.ws, &["rev-parse", "HEAD"]).trim().to_owned();
        let (code, out, err) = e.tacho(&[
            "ci",
            "verify",
            &format!("{base}..{head}"),
            "--require-session",
            "--json",
        ]);
        (
            code,
            serde_json::from_str::<serde_json::Value>(out.trim())
                .unwrap_or_else(|x| panic!("{x}: {out}{err}")),
        )
    };
    // A branch made an hour before any session.
    git(&e.ws, &["checkout", "-q", "-b", "out"]);
    std::fs::write(e.ws.join("src/out.txt"), "made outside\n").unwrap();
    git(&e.ws, &["add", "-A"]);
    let mut c = std::process::Command::new("git");
    c.current_dir(&e.ws)
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .args(["commit", "-q", "-m", "outside"]);
    assert!(c.status().unwrap().success());
    git(&e.ws, &["checkout", "-q", "main"]);
    // A made-up session watches the fast-forward.
    e.record(
        "ses_made_up",
        &format!(r#"{{"type":"session.start","workspace":"{ws}","agent":"coder"}}"#),
    );
    git(&e.ws, &["merge", "-q", "--ff-only", "out"]);
    e.record("ses_made_up", r#"{"type":"step.start","step":1}"#);
    e.record("ses_made_up", r#"{"type":"step.finish","step":1}"#);
    let (code, v) = ci(&e);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["commits"][0]["sessions"][0], "ses_made_up", "{v:#}");
    assert_eq!(v["commits"][0]["linked"], false, "{v:#}");
    let why = v["commits"][0]["not_linked_by"][0].as_str().unwrap();
    assert!(
        why.contains("was not made while a step of session ses_made_up ran"),
        "{why}"
    );
    assert!(v["failures"].to_string().contains("fast-forward"), "{v:#}");

    // A session recorded in Claude Code's name, whose commit was made in its step.
    e.record("ses_claimed", &format!(r#"{{"type":"session.start","workspace":"{ws}","agent":"Claude_Code ","source":"claude-code"}}"#));
    e.record("ses_claimed", r#"{"type":"step.start","step":1}"#);
    std::fs::write(e.ws.join("src/b.txt"), "b\n").unwrap();
    git(&e.ws, &["add", "-A"]);
    git(&e.ws, &["commit", "-q", "-m", "claimed"]);
    e.record("ses_claimed", r#"{"type":"step.finish","step":1}"#);
    e.record(
        "ses_claimed",
        r#"{"type":"session.end","reason":"completed"}"#,
    );
    let (_, v) = ci(&e);
    let claimed = &v["commits"][0];
    assert_eq!(claimed["linked"], false, "{v:#}");
    assert!(
        claimed["not_linked_by"][0].as_str().unwrap().contains(
            "names Claude_Code , whose sessions tacho's hooks record, but `tacho record` wrote it"
        ),
        "{v:#}"
    );
    let s = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session"] == "ses_claimed")
        .unwrap();
    assert_eq!(s["agent_reported"], true, "{v:#}");

    // An agent-reported session of an agent tacho has no hooks for links the commit
    // made during its step; the range still fails for the fast-forwarded one.
    e.record(
        "ses_coder",
        &format!(r#"{{"type":"session.start","workspace":"{ws}","agent":"coder"}}"#),
    );
    e.record("ses_coder", r#"{"type":"step.start","step":1}"#);
    std::fs::write(e.ws.join("src/c.txt"), "c\n").unwrap();
    git(&e.ws, &["add", "-A"]);
    git(&e.ws, &["commit", "-q", "-m", "coder"]);
    e.record("ses_coder", r#"{"type":"step.finish","step":1}"#);
    e.record(
        "ses_coder",
        r#"{"type":"session.end","reason":"completed"}"#,
    );
    let (code, v) = ci(&e);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(v["commits"][0]["linked"], true, "{v:#}");
    assert_eq!(v["commits"][0]["sessions"][0], "ses_coder", "{v:#}");
    let (_, md, _) = e.tacho(&[
        "ci",
        "verify",
        &format!("{base}..HEAD"),
        "--require-session",
    ]);
    assert!(md.contains("agent-reported"), "{md}");
}

/// `tests/standards/.venv`'s python (`.ci/run` makes it), or why not.
fn standards_python() -> Option<PathBuf> {
    let python = tacho_tests::repo_root().join("tests/standards/.venv/bin/python");
    if python.exists() {
        Some(python)
    } else {
        tacho_tests::skip_without(
            "the standards' readers need tests/standards/.venv (securesystemslib, in-toto-attestation, jsonschema; .ci/run installs them)",
        );
        None
    }
}

/// `tests/standards/check.py ARGS`: (exit code, stdout as JSON, stderr).
fn standards_check(python: &Path, args: &[&Path]) -> (i32, serde_json::Value, String) {
    let out = std::process::Command::new(python)
        .arg(tacho_tests::repo_root().join("tests/standards/check.py"))
        .args(args)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 44 (1, 4): a range's evidence as the standards' own readers take it. `tacho
/// attest` signs in-toto statements in DSSE envelopes with an SSH Ed25519 key:
/// securesystemslib verifies each against the public key, in-toto's model parses the
/// statements (the Test Result PASSED while the receipts hold for the committed tree,
/// FAILED once a commit changed what they saw), and a byte changed in a predicate
/// fails verification. `ci verify --format sarif` validates against the OASIS schema
/// and GitHub's rules, each finding at the file and lines the range changed.
#[test]
fn a_ranges_evidence_reads_as_in_toto_and_sarif_by_their_own_readers() {
    if !have_git() {
        return tacho_tests::skip_without("git");
    }
    let Some(python) = standards_python() else {
        return;
    };
    let keygen = Path::new("/usr/bin/ssh-keygen");
    if !keygen.exists() {
        return tacho_tests::skip_without("ssh-keygen");
    }
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = tacho_tests::parity_workspace(tmp.path(), "ses_att");
    git(&ws, &["init", "-q", "-b", "main"]);
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "base"]);
    let base = git(&ws, &["rev-parse", "HEAD"]);
    shell_call(&home, "ses_att", "c0");
    let t = |args: &[&str]| {
        let mut c = tacho(&home);
        c.current_dir(&ws).args(args);
        run(c)
    };
    let (code, out, err) = t(&[
        "goal",
        "create",
        "--assure",
        "--plan",
        "plan.md",
        "--session",
        "ses_att",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let goal = serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()["goal"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    let (code, _, err) = t(&["goal", "check", "parity", "--session", "ses_att"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = t(&["goal", "complete", "--session", "ses_att"]);
    assert_eq!(code, 0, "{out}{err}");
    git(&ws, &["commit", "-q", "-am", "fix the value"]);
    let fixed = git(&ws, &["rev-parse", "HEAD"]);
    shell_call(&home, "ses_att", "c1");

    let key = tmp.path().join("id_ed25519");
    let made = std::process::Command::new(keygen)
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "", "-f"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(made.success());
    let public = tmp.path().join("id_ed25519.pub");
    let attest = |range: &str, extra: &[&str], file: &str| -> PathBuf {
        let mut args = vec!["attest", range];
        args.extend_from_slice(extra);
        let (code, out, err) = t(&args);
        assert_eq!(code, 0, "{err}");
        let path = tmp.path().join(file);
        std::fs::write(&path, out).unwrap();
        path
    };

    // The receipts hold for the committed tree: PASSED, the check by name, its
    // receipt held to the commit's tree; the subjects are the commit and its tree.
    let k = key.to_str().unwrap();
    let good = attest(&format!("{base}..{fixed}"), &["--key", k], "good.jsonl");
    let (code, v, err) = standards_check(&python, &[Path::new("attest"), &good, &public]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["envelopes"], 2, "{v}");
    let st = &v["statements"];
    assert_eq!(
        st[0]["type"],
        "https://tacho.invalid/attestation/ci-sessions/v1"
    );
    assert_eq!(
        st[1]["type"],
        "https://in-toto.io/attestation/test-result/v0.1"
    );
    assert_eq!(st[1]["result"], "PASSED", "{v}");
    assert_eq!(
        st[1]["passed"],
        serde_json::json!([format!("{goal}/parity")])
    );
    let tree = git(&ws, &["rev-parse", &format!("{fixed}^{{tree}}")]);
    assert_eq!(
        st[1]["configuration"][0]["digest"],
        serde_json::json!({"gitTree": tree})
    );
    assert_eq!(
        st[0]["subjects"],
        serde_json::json!([{"gitCommit": fixed}, {"gitTree": tree}])
    );
    // A byte changed in a predicate: every envelope fails securesystemslib.
    let (code, v, err) = standards_check(&python, &[Path::new("tamper"), &good, &public]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (v["envelopes"].as_u64(), v["rejected"].as_u64()),
        (Some(2), Some(2)),
        "{v}"
    );
    // Another key's public half does not verify them.
    let other = tmp.path().join("other");
    assert!(
        std::process::Command::new(keygen)
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&other)
            .status()
            .unwrap()
            .success()
    );
    let (code, _, err) = standards_check(
        &python,
        &[Path::new("attest"), &good, &tmp.path().join("other.pub")],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("VerificationError"), "{err}");

    // A commit after the check: the receipts no longer hold, FAILED. Unsigned
    // statements (for a pipeline that signs them itself) read the same.
    std::fs::write(ws.join("src/value.txt"), "42\n# after the check\n").unwrap();
    git(&ws, &["commit", "-q", "-am", "a change after the check"]);
    let later = git(&ws, &["rev-parse", "HEAD"]);
    shell_call(&home, "ses_att", "c2");
    let range = format!("{base}..{later}");
    let bad = attest(&range, &["--unsigned"], "bad.jsonl");
    assert!(
        std::fs::read_to_string(&bad)
            .unwrap()
            .contains("\"signatures\":[]")
    );
    let (code, v, err) = standards_check(&python, &[Path::new("attest-unsigned"), &bad]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["statements"][1]["result"], "FAILED", "{v}");
    assert_eq!(
        v["statements"][1]["failed"],
        serde_json::json!([format!("{goal}/parity")])
    );
    // Without --key or --unsigned, and no git signing key: refused, naming both.
    let (code, _, err) = t(&["attest", &range]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--key") && err.contains("--unsigned"), "{err}");

    // SARIF: valid for the schema and GitHub; the check that no longer holds and the
    // goal it fails are placed at the lines the range changed.
    let sarif = tmp.path().join("ci.sarif");
    let attested = tmp.path().join("ci.jsonl");
    let (code, out, err) = t(&[
        "ci",
        "verify",
        &range,
        "--format",
        "sarif",
        "--sarif",
        sarif.to_str().unwrap(),
        "--attest",
        attested.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(out.trim(), std::fs::read_to_string(&sarif).unwrap().trim());
    assert!(err.contains("unsigned"), "{err}");
    let (code, v, err) = standards_check(&python, &[Path::new("sarif"), &sarif]);
    assert_eq!(code, 0, "{err}");
    let results = v["results"].as_array().unwrap();
    for rule in ["tacho/ci/goal_not_proven", "tacho/ci/check_not_holding"] {
        let r = results
            .iter()
            .find(|r| r["rule"] == rule)
            .unwrap_or_else(|| panic!("no {rule}: {v}"));
        assert_eq!(
            (
                r["level"].as_str(),
                r["uri"].as_str(),
                r["startLine"].as_u64()
            ),
            (Some("error"), Some("src/value.txt"), Some(1)),
            "{v}"
        );
    }
    let (code, v, err) = standards_check(&python, &[Path::new("attest-unsigned"), &attested]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["statements"][1]["result"], "FAILED", "{v}");
    // The validator can fail: a level SARIF does not have.
    let text = std::fs::read_to_string(&sarif).unwrap().replacen(
        "\"level\": \"error\"",
        "\"level\": \"fatal\"",
        1,
    );
    std::fs::write(&sarif, text).unwrap();
    let (code, _, err) = standards_check(&python, &[Path::new("sarif"), &sarif]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("fatal"), "{err}");

    // A risk factor about a file the range changed is placed at that file's lines:
    // a security-sensitive file the session edited, committed.
    std::fs::create_dir_all(ws.join("src/auth")).unwrap();
    std::fs::write(ws.join("src/auth/token.txt"), "one\ntwo\n").unwrap();
    let edit = format!(
        "{{\"type\":\"file.edit\",\"session\":\"ses_att\",\"path\":\"{}/src/auth/token.txt\",\"op\":\"create\"}}\n",
        ws.display()
    );
    let (code, _, err) = tacho_tests::run_with_stdin(&home, &["record"], &edit);
    assert_eq!(code, 0, "{err}");
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "a token"]);
    shell_call(&home, "ses_att", "c3");
    let (_, out, err) = t(&[
        "ci",
        "verify",
        &format!("{base}..HEAD"),
        "--format",
        "sarif",
    ]);
    std::fs::write(&sarif, out).unwrap();
    let (code, v, err2) = standards_check(&python, &[Path::new("sarif"), &sarif]);
    assert_eq!(code, 0, "{err}{err2}");
    let r = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "tacho/risk/security_sensitive")
        .unwrap_or_else(|| panic!("{v}"))
        .clone();
    assert_eq!(
        (
            r["uri"].as_str(),
            r["startLine"].as_u64(),
            r["level"].as_str()
        ),
        (Some("src/auth/token.txt"), Some(1), Some("warning")),
        "{v}"
    );
    // The same from a clone at another path (CI's checkout): the session's paths are
    // read from the repository's top.
    let clone = tmp.path().join("ci-clone");
    git(
        tmp.path(),
        &["clone", "-q", ws.to_str().unwrap(), clone.to_str().unwrap()],
    );
    let (_, out, _) = t(&[
        "ci",
        "verify",
        &format!("{base}..HEAD"),
        "--format",
        "sarif",
        "--workspace",
        clone.to_str().unwrap(),
    ]);
    assert!(
        out.contains("tacho/risk/security_sensitive") && out.contains("src/auth/token.txt"),
        "{out}"
    );

    // A signing key git names that cannot sign (its private half in no agent): the
    // attestation is written unsigned, said, and the verdict stands.
    git(&ws, &["config", "gpg.format", "ssh"]);
    let line = std::fs::read_to_string(&public).unwrap();
    git(
        &ws,
        &[
            "config",
            "user.signingkey",
            &format!("key::{}", line.trim()),
        ],
    );
    let (code, _, err) = t(&[
        "ci",
        "verify",
        &range,
        "--attest",
        attested.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "the range's verdict: {err}");
    assert!(
        err.contains("left unsigned") && err.contains("ssh-agent"),
        "{err}"
    );
    assert!(
        std::fs::read_to_string(&attested)
            .unwrap()
            .contains("\"signatures\":[]")
    );
}

/// Issue 44 (2): who wrote each line, through Claude Code's real hooks. In one file a
/// shell command (`sed -i`) rewrites line 1, the Edit tool line 3, and the user line 5
/// between two tool calls; the agent then commits. `tacho attribution` gives each
/// line its author (the two calls, the user) and nothing else, in Agent Trace records
/// the specification's schema accepts. (A rule of modification times — a file changed
/// within 3 s of a tool call is the agent's — would give the user's line, written here
/// within a second of the Edit, to the agent.)
#[test]
fn each_line_of_a_commit_is_attributed_to_the_call_or_the_user_that_wrote_it() {
    if !have_git() {
        return tacho_tests::skip_without("git");
    }
    let Some(python) = standards_python() else {
        return;
    };
    let env = Env::new();
    let f = env.ws.join("src/f.txt");
    std::fs::write(&f, "one\ntwo\nthree\nfour\nfive\nsix\n").unwrap();
    git(&env.ws, &["add", "-A"]);
    git(&env.ws, &["commit", "-q", "-m", "the file"]);
    let base = git(&env.ws, &["rev-parse", "HEAD"]);
    env.send(
        "s1",
        "SessionStart",
        serde_json::json!({"source": "startup"}),
    );
    env.send(
        "s1",
        "UserPromptSubmit",
        serde_json::json!({"prompt": "shout the odd lines"}),
    );
    env.bash("s1", "t1", "sed -i 's/^one$/ONE/' src/f.txt", "", || {
        let out = std::process::Command::new("sed")
            .args(["-i", "s/^one$/ONE/"])
            .arg(&f)
            .status()
            .unwrap();
        assert!(out.success());
    });
    let input = serde_json::json!({"file_path": f.display().to_string(), "old_string": "three", "new_string": "THREE"});
    env.send(
        "s1",
        "PreToolUse",
        serde_json::json!({"tool_name": "Edit", "tool_use_id": "t2", "tool_input": input}),
    );
    std::fs::write(&f, "ONE\ntwo\nTHREE\nfour\nfive\nsix\n").unwrap();
    env.send(
        "s1",
        "PostToolUse",
        serde_json::json!({"tool_name": "Edit", "tool_use_id": "t2", "tool_input": input,
            "tool_response": {"filePath": f.display().to_string()}}),
    );
    // The user, between two tool calls.
    std::fs::write(&f, "ONE\ntwo\nTHREE\nfour\nFIVE\nsix\n").unwrap();
    let mut head = String::new();
    env.bash("s1", "t3", "git commit -am shout", "[main] shout", || {
        git(&env.ws, &["commit", "-q", "-am", "shout"]);
        head = git(&env.ws, &["rev-parse", "HEAD"]);
    });
    env.send("s1", "Stop", serde_json::json!({"stop_hook_active": false}));
    let session = env.session();

    let range = format!("{base}..{head}");
    let (code, out, err) = env.tacho(&["attribution", &range, "--json"]);
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["sessions"], serde_json::json!([session]), "{r}");
    let ranges = &r["files"][0]["ranges"];
    let got: Vec<(u64, &str, Option<&str>)> = ranges
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["start_line"].as_u64().unwrap(),
                x["origin"].as_str().unwrap(),
                x["tool"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (1, "ai", Some("Bash")),
            (3, "ai", Some("Edit")),
            (5, "human", None)
        ],
        "{r}"
    );
    assert_eq!(r["files"][0]["path"], "src/f.txt");

    // The Agent Trace records: valid for the specification's schema, same lines.
    let (code, out, err) = env.tacho(&["attribution", &range]);
    assert_eq!(code, 0, "{err}");
    let file = env.dir.join("trace.jsonl");
    std::fs::write(&file, &out).unwrap();
    let (code, v, err) = standards_check(&python, &[Path::new("agent-trace"), &file]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        v["records"][0]["files"]["src/f.txt"],
        serde_json::json!([[1, 1, "ai"], [3, 3, "ai"], [5, 5, "human"]]),
        "{v}"
    );
    assert_eq!(v["records"][0]["revision"], head.as_str());
    let record: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        record["files"][0]["conversations"][0]["url"],
        format!("tacho:session/{session}")
    );
    // The schema can fail: a contributor type it does not have.
    std::fs::write(&file, out.replacen("\"human\"", "\"bot\"", 1)).unwrap();
    let (code, _, err) = standards_check(&python, &[Path::new("agent-trace"), &file]);
    assert_eq!(code, 1, "{err}");

    // In CI the repository is a clone at another path, and the session names the
    // developer's: the same lines, the same authors.
    let clone = env.dir.join("ci-clone");
    git(
        &env.dir,
        &[
            "clone",
            "-q",
            env.ws.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    let (code, out, err) = env.tacho(&[
        "attribution",
        &range,
        "--json",
        "--workspace",
        clone.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let there: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(there["files"], r["files"], "{there}");

    // For people: each range and who wrote it.
    let (_, summary, _) = env.tacho(&["attribution", &range, "--summary"]);
    eprintln!("{summary}");
    assert!(summary.contains("line 5: user"), "{summary}");
    assert!(summary.contains("line 1: agent"), "{summary}");
}

/// Red team (issue 44): the stored projection is derived data in the data directory,
/// which the watched agent can rewrite. A commit dated outside every step is not
/// linked; widening the stored projection's step so that it covers the commit changes
/// nothing: `ci verify` and `attest` fold the log itself.
#[test]
fn an_edited_stored_projection_links_nothing() {
    if !have_git() {
        return tacho_tests::skip_without("git");
    }
    let env = Env::new();
    let base = git(&env.ws, &["rev-parse", "HEAD"]);
    env.send(
        "s1",
        "SessionStart",
        serde_json::json!({"source": "startup"}),
    );
    env.bash("s1", "t1", "git commit -am old", "[main] old", || {
        std::fs::write(env.ws.join("src/a.txt"), "changed\n").unwrap();
        // Committed with a date a day before the session: made outside its steps.
        let out = std::process::Command::new("git")
            .current_dir(&env.ws)
            .env("GIT_COMMITTER_DATE", "2001-01-01T00:00:00Z")
            .args(["commit", "-q", "-am", "dated before the session"])
            .output()
            .unwrap();
        assert!(out.status.success());
    });
    env.send("s1", "Stop", serde_json::json!({"stop_hook_active": false}));
    let session = env.session();
    let range = format!("{base}..HEAD");
    let (code, r, err) = env.ci(&[&range, "--require-session"]);
    assert_eq!(code, 1, "{err}{r}");
    assert_eq!(r["commits"][0]["linked"], false, "{r}");
    // The stored projection, written by a query, then widened to every time.
    let (code, _, err) = env.tacho(&["graph", &session]);
    assert_eq!(code, 0, "{err}");
    let file = env.home.join(format!("log/projections/{session}.json"));
    let mut p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    for step in p["graph"]["steps"].as_array_mut().unwrap() {
        step["started_unix_ns"] = serde_json::json!(0);
    }
    std::fs::write(&file, p.to_string()).unwrap();
    let (code, r, err) = env.ci(&[&range, "--require-session"]);
    assert_eq!(code, 1, "{err}{r}");
    assert_eq!(r["commits"][0]["linked"], false, "{r}");
    let (code, out, err) = env.tacho(&["attest", &range, "--unsigned", "--json"]);
    assert_eq!(code, 0, "{err}");
    let a: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        a["statements"][0]["predicate"]["commits"][0]["linked"], false,
        "{a}"
    );
}

/// Red team (issue 44): a second session, made up from the agent's shell by piping
/// hook payloads (its id sorting first), that saw the commit too does not take the
/// agent's lines away: every linked session is followed, and the real one explains
/// them. A range of a submodule, an empty commit and no range at all: exit codes and
/// SARIF locations a reader can use; a key file that is a FIFO is refused at once.
#[test]
fn attribution_and_evidence_hold_against_the_agents_tricks() {
    if !have_git() {
        return tacho_tests::skip_without("git");
    }
    let env = Env::new();
    let base = git(&env.ws, &["rev-parse", "HEAD"]);
    env.send(
        "s1",
        "SessionStart",
        serde_json::json!({"source": "startup"}),
    );
    env.bash("s1", "t1", "echo more >> src/a.txt", "", || {
        std::fs::write(env.ws.join("src/a.txt"), "a\nmore\nand more\n").unwrap();
    });
    // The made-up session starts, then the commit happens inside its "call".
    env.send(
        "0000",
        "SessionStart",
        serde_json::json!({"source": "startup"}),
    );
    env.bash("0000", "x1", "git commit -am work", "", || {
        git(&env.ws, &["commit", "-q", "-am", "work"]);
    });
    env.bash("s1", "t2", "true", "", || {});
    let head = git(&env.ws, &["rev-parse", "HEAD"]);
    let range = format!("{base}..{head}");
    let (code, r, err) = env.ci(&[&range]);
    assert_eq!(code, 0, "{err}");
    let mut linked: Vec<&str> = r["commits"][0]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    linked.sort_unstable();
    assert_eq!(linked.len(), 2, "both saw it: {r}");
    let (code, out, err) = env.tacho(&["attribution", &range, "--json"]);
    assert_eq!(code, 0, "{err}");
    let a: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let origins: Vec<(u64, &str)> = a["files"][0]["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["start_line"].as_u64().unwrap(),
                x["origin"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(origins, vec![(2, "ai")], "{a}");

    // No range: nothing to attest or attribute (exit 2), never an empty subject.
    for cmd in ["attest", "attribution"] {
        let mut args = vec![cmd, "HEAD..HEAD"];
        if cmd == "attest" {
            args.push("--unsigned");
        }
        let (code, out, err) = env.tacho(&args);
        assert_eq!(code, 2, "{cmd}: {out}{err}");
        assert!(err.contains("nothing to state about the range"), "{err}");
    }

    // A submodule added and an empty commit: SARIF and attribution still answer, and
    // every SARIF result has a location.
    let sub = git(&env.ws, &["rev-parse", "HEAD"]);
    git(
        &env.ws,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{sub},vendor/lib"),
        ],
    );
    git(&env.ws, &["commit", "-q", "-m", "a submodule"]);
    git(&env.ws, &["commit", "-q", "--allow-empty", "-m", "nothing"]);
    let range = format!("{head}..HEAD");
    let (code, _, err) = env.tacho(&["attribution", &range]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = env.tacho(&[
        "ci",
        "verify",
        &range,
        "--require-session",
        "--format",
        "sarif",
    ]);
    assert_eq!(code, 1, "{err}");
    let sarif: serde_json::Value = serde_json::from_str(&out).unwrap();
    let results = sarif["runs"][0]["results"].as_array().unwrap();
    assert!(!results.is_empty(), "{sarif}");
    for r in results {
        let loc = &r["locations"][0]["physicalLocation"];
        assert!(loc["artifactLocation"]["uri"].is_string(), "{r}");
        assert!(loc["region"]["startLine"].as_u64().is_some(), "{r}");
    }

    // A key file that is a FIFO (a repository's .git/config can name one): refused
    // at once, not waited on.
    let fifo = env.dir.join("key.fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (code, _, err) = env.tacho(&["attest", &range, "--key", fifo.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a regular file"), "{err}");
}
