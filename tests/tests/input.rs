//! Bad input is refused clearly, naming what is wrong, and nothing of it is recorded.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use tacho_tests::{run, run_with_stdin, tacho};

#[test]
fn nothing_is_accepted_after_session_end() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let rec = |input: &str| run_with_stdin(&home, &["record", "--session", "ses_end"], input);
    let (code, _, err) =
        rec("{\"type\":\"session.start\"}\n{\"type\":\"session.end\",\"reason\":\"completed\"}\n");
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = rec("{\"type\":\"tool.call\",\"call_id\":\"c\",\"tool\":\"bash\"}\n");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("session ses_end has ended: a tool.call after session.end is refused"),
        "{err}"
    );
    // Within one input too.
    let (code, _, err) = run_with_stdin(
        &home,
        &["record", "--session", "ses_end2"],
        "{\"type\":\"session.start\"}\n{\"type\":\"session.end\",\"reason\":\"completed\"}\n{\"type\":\"step.start\",\"step\":1}\n",
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("stdin: line 3:"), "{err}");
    assert_eq!(tacho_tests::event_count(&home, "ses_end"), 2);
}

#[test]
fn snapshot_take_lines_are_checked_whatever_scan_follows() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.display().to_string();
    let start =
        format!("{{\"type\":\"session.start\",\"session\":\"s\",\"workspace\":\"{ws}\"}}\n");
    for (line, want) in [
        (
            format!(
                "{{\"type\":\"snapshot.take\",\"session\":\"s\",\"workspace\":\"{ws}\",\"paths\":[\"../x\"]}}"
            ),
            "invalid path \"../x\"",
        ),
        (
            format!(
                "{{\"type\":\"snapshot.take\",\"session\":\"s\",\"workspace\":\"{ws}\",\"paths\":[\"/etc/passwd\"]}}"
            ),
            "invalid path \"/etc/passwd\"",
        ),
        (
            format!(
                "{{\"type\":\"snapshot.take\",\"session\":\"s\",\"workspace\":\"{ws}\",\"ts\":\"yesterday\"}}"
            ),
            "snapshot.take: field `ts`:",
        ),
        (
            format!(
                "{{\"type\":\"snapshot.take\",\"session\":\"s\",\"workspace\":\"{ws}\",\"path\":\"a\"}}"
            ),
            "snapshot.take: unknown field `path`",
        ),
    ] {
        let (code, _, err) = run_with_stdin(
            &home,
            &["record", "--snapshots", "off"],
            &format!("{start}{line}\n"),
        );
        assert_eq!(code, 2, "{line}: {err}");
        assert!(err.contains(want), "{line}: {err}");
        assert!(err.contains("nothing was recorded"), "{err}");
    }
}

#[test]
fn a_line_too_long_a_fifo_and_an_oversized_plan_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    // A plan far larger than a plan can be is refused without being read whole.
    let big = tmp.path().join("big.md");
    std::fs::write(&big, vec![b'x'; 200_000]).unwrap();
    let mut c = tacho(&home);
    c.args(["goal", "create", "--plan"])
        .arg(&big)
        .args(["--session", "s"]);
    let (code, _, err) = run(c);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("200000 bytes; a plan is at most 8192 bytes"),
        "{err}"
    );
    // A FIFO would block forever.
    let fifo = tmp.path().join("fifo");
    let ok = std::process::Command::new("mkfifo").arg(&fifo).status();
    if ok.is_ok_and(|s| s.success()) {
        for args in [
            vec!["goal", "create", "--session", "s", "--plan"],
            vec!["session", "replay", "--mode", "verify", "--package"],
        ] {
            let mut c = tacho(&home);
            c.args(&args).arg(&fifo);
            let (code, _, err) = run(c);
            assert_eq!(code, 2, "{args:?}: {err}");
            assert!(err.contains("not a regular file"), "{args:?}: {err}");
        }
    }
}

/// Lines are parsed ahead of the ingest (on another thread, in chunks): the first bad
/// line in input order is the one reported, wherever it falls, and nothing is recorded
/// — whether the line is malformed (found while parsing) or refused by the ingest
/// (found while taking it in), and whether a file or stdin is read.
#[test]
fn the_first_bad_line_is_reported_however_far_ahead_lines_are_parsed() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let good =
        |i: usize| format!("{{\"type\":\"tool.call\",\"call_id\":\"c{i}\",\"tool\":\"bash\"}}\n");
    for (bad_at, bad) in [
        (2500, "{\"type\":\"tool.call\",\n"),
        (1025, "{\"type\":\"nonsense\"}\n"),
        (3001, "{\"type\":\"snapshot.taken\",\"snapshot\":\"x\"}\n"),
    ] {
        // `line N:` or `line N, column C:`.
        let names = |err: &str| {
            err.contains(&format!("line {bad_at}:")) || err.contains(&format!("line {bad_at},"))
        };
        let mut input = String::from("{\"type\":\"session.start\"}\n");
        for i in 2..bad_at {
            input.push_str(&good(i));
        }
        input.push_str(bad);
        // Lines after it, a malformed one among them: never the one reported.
        for i in 0..2000 {
            input.push_str(&good(i));
        }
        input.push_str("not json\n");
        let session = format!("ses_bad{bad_at}");
        let (code, _, err) = run_with_stdin(&home, &["record", "--session", &session], &input);
        assert_eq!(code, 2, "{err}");
        assert!(names(&err), "line {bad_at}: {err}");
        assert!(err.contains("nothing was recorded"), "{err}");
        let file = tmp.path().join(format!("{session}.jsonl"));
        std::fs::write(&file, &input).unwrap();
        let mut c = tacho(&home);
        c.args(["record", "--session", &session]).arg(&file);
        let (code, _, err) = run(c);
        assert_eq!(code, 2, "{err}");
        assert!(names(&err), "line {bad_at}: {err}");
        let mut c = tacho(&home);
        c.args(["session", "list", "--json"]);
        let (_, out, _) = run(c);
        assert!(!out.contains(&session), "{out}");
    }
}

/// An input recorded as one batch (no `--batch-lines`) is written to the stream as it
/// is read, and committed at its end: one acknowledged batch, however long; a bad line
/// anywhere leaves the stream byte for byte as it was.
#[test]
fn a_long_input_is_one_batch_and_a_late_bad_line_leaves_the_stream_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let session = "ses_long_batch";
    let good =
        |i: usize| format!("{{\"type\":\"tool.call\",\"call_id\":\"c{i}\",\"tool\":\"bash\"}}\n");
    let mut first = String::from("{\"type\":\"session.start\"}\n");
    for i in 0..9 {
        first.push_str(&good(i));
    }
    let (code, _, err) = run_with_stdin(&home, &["record", "--session", session], &first);
    assert_eq!(code, 0, "{err}");
    let segment = || {
        let dir = home.join("log").join("streams").join(session);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert_eq!(files.len(), 1, "{files:?}");
        // The data; zeros after it are free space (SPEC.md §2), given back or not.
        let mut bytes = std::fs::read(&files[0]).unwrap();
        while bytes.last() == Some(&0) {
            bytes.pop();
        }
        bytes
    };
    let before = segment();
    let n = 10_000;
    let mut long = String::new();
    for i in 0..n {
        long.push_str(&good(100 + i));
    }
    // A bad line long after several thousand events were written to the stream.
    let bad = long.clone() + "{\"type\":\"tool.call\"}\n";
    let (code, _, err) = run_with_stdin(&home, &["record", "--session", session], &bad);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("line {}", n + 1)), "{err}");
    assert!(err.contains("nothing was recorded"), "{err}");
    let after = segment();
    assert!(
        after == before,
        "the stream is as it was: {} bytes of data, now {}",
        before.len(),
        after.len()
    );
    assert_eq!(tacho_tests::event_count(&home, session), 10);
    // Without it: one batch, acknowledged once.
    let (code, out, err) =
        run_with_stdin(&home, &["record", "--session", session, "--json"], &long);
    assert_eq!(code, 0, "{err}");
    let acks: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(acks.len(), 1, "{out}");
    assert_eq!(acks[0]["events"], n);
    assert_eq!(
        (acks[0]["first_seq"].as_u64(), acks[0]["last_seq"].as_u64()),
        (Some(10), Some(10 + n as u64 - 1))
    );
    assert_eq!(tacho_tests::event_count(&home, session), 10 + n);
    // `--batch-lines` larger than what is staged at a time: batches of exactly that.
    let (code, out, err) = run_with_stdin(
        &home,
        &[
            "record",
            "--session",
            session,
            "--json",
            "--batch-lines",
            "6000",
        ],
        &long,
    );
    assert_eq!(code, 0, "{err}");
    let sizes: Vec<u64> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["events"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(sizes, [6000, 4000], "{out}");
    let mut c = tacho(&home);
    c.args(["log", "verify"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
}

/// Issue 43: damage in a transcript is located — file, line, byte offset, why — in
/// text and `--json`; a single-document transcript that is not whole (Gemini's
/// `.json`) fails its file instead of importing as "unchanged".
#[test]
fn damaged_transcripts_are_located_and_a_broken_document_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let good = r#"{"type":"user","sessionId":"dmg1","cwd":"/w","timestamp":"2026-11-20T09:00:00Z","message":{"role":"user","content":"Fix it"}}"#;
    let file = tmp.path().join("dmg1.jsonl");
    std::fs::write(&file, format!("{good}\n{{\"type\": oops\n{good}\n")).unwrap();
    let mut c = tacho(&home);
    c.args(["import", "claude-code"]).arg(&file);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    let text = format!("{out}{err}");
    assert!(
        text.contains(&format!(
            "{}:2 (byte {}): not JSON",
            file.display(),
            good.len() + 1
        )),
        "{text}"
    );
    let mut c = tacho(&home);
    c.args(["import", "claude-code", "--json"]).arg(&file);
    let (_, out, _) = run(c);
    assert!(out.contains("\"damage\":[{"), "{out}");

    let doc = tmp.path().join("session-2026-01-01T00-00-dmg2.json");
    std::fs::write(
        &doc,
        r#"{"sessionId":"dmg2","messages":[{"id":"m1","type":"user","con"#,
    )
    .unwrap();
    let mut c = tacho(&home);
    c.args(["import", "gemini"]).arg(&doc);
    let (code, out, err) = run(c);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("not a whole JSON document"),
        "{out}{err}"
    );
}

/// Issue 43: `tacho import codex` without paths reads the rollouts Codex archived
/// (`archived_sessions/`, which ccusage reads too) beside its sessions.
#[test]
fn codex_archived_rollouts_are_imported() {
    let tmp = tempfile::tempdir().unwrap();
    let codex = tmp.path().join("codex");
    let rollout = |id: &str| {
        format!(
            "{}\n{}\n",
            serde_json::json!({"timestamp": "2026-11-20T09:00:00Z", "type": "session_meta", "payload": {"id": id, "cwd": "/w"}}),
            serde_json::json!({"timestamp": "2026-11-20T09:00:01Z", "type": "response_item", "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}})
        )
    };
    let live = codex.join("sessions/2026/11/20");
    let archived = codex.join("archived_sessions");
    std::fs::create_dir_all(&live).unwrap();
    std::fs::create_dir_all(&archived).unwrap();
    std::fs::write(live.join("rollout-a.jsonl"), rollout("cx-live")).unwrap();
    std::fs::write(archived.join("rollout-b.jsonl"), rollout("cx-archived")).unwrap();
    let home = tmp.path().join("home");
    let mut c = tacho(&home);
    c.args(["import", "codex", "--json"])
        .env("CODEX_HOME", &codex);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    let mut c = tacho(&home);
    c.args(["session", "list"]);
    let (_, list, _) = run(c);
    assert!(
        list.contains("cx-live") && list.contains("cx-archived"),
        "{list}"
    );
}
