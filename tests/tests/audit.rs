//! `tacho audit export` and `tacho audit otlp`, whole processes on a recorded store.
//!
//! The OpenTelemetry checks decode what tacho sends with the official
//! `opentelemetry-proto` Python package and recompute every id from SPEC §14.2
//! (`tests/audit/otlp_check.py`, in `tests/audit/.venv` as `.ci/run` makes it); without
//! that venv they say so and pass, except in CI (`CI` set), where they fail.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_tests::{run, run_with_stdin, tacho};

const EXAMPLE: &str = "ses_01jdemo8xk4rate1imit0000a";

/// A store of 13 sessions: the bundled example under 10 names (half of them started
/// five days later), one without its tool results (a lower risk), a child session
/// of the first, and one cut off in the middle (still running, a call left open).
fn store(dir: &Path) -> PathBuf {
    let home = dir.join("home");
    let ex = tacho_tests::example_session();
    let mut input = String::new();
    for i in 0..10 {
        let mut s = ex.replace(EXAMPLE, &format!("ses_a{i:03}"));
        if i % 2 == 1 {
            s = s.replace("2026-11-20T", "2026-11-25T");
        }
        input.push_str(&s);
    }
    input.push_str(
        &ex.replace(EXAMPLE, "ses_low")
            .lines()
            .filter(|l| !l.contains("\"tool.result\""))
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    );
    input.push_str(&ex.replace(EXAMPLE, "ses_child").replacen(
        "\"source\":\"claude-code\"",
        "\"source\":\"claude-code\",\"parent\":\"ses_a000\"",
        1,
    ));
    let cut: Vec<&str> = ex.lines().collect();
    for l in cut.iter().take(cut.len() / 2) {
        input.push_str(&l.replace(EXAMPLE, "ses_running"));
        input.push('\n');
    }
    // Batches of 16 lines: a session's record is several batches (chain steps).
    let (code, _, err) = run_with_stdin(&home, &["record", "--batch-lines", "16"], &input);
    assert_eq!(code, 0, "{err}");
    home
}

fn audit(home: &Path, args: &[&str]) -> (i32, String, String) {
    let mut c = tacho(home);
    c.arg("audit").args(args);
    run(c)
}

fn records(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn sessions_of(recs: &[Value]) -> BTreeSet<String> {
    recs.iter()
        .map(|r| r["session"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn export_streams_every_event_once_with_stable_ids() {
    let tmp = tempfile::tempdir().unwrap();
    let home = store(tmp.path());
    let (code, out, err) = audit(&home, &["export", "--all"]);
    assert_eq!(code, 0, "{err}");
    let recs = records(&out);
    // Every event of every session, in order, each once.
    let mut by_session: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in &recs {
        assert_eq!(r["schema"], "tacho.audit/1");
        by_session
            .entry(r["session"].as_str().unwrap().into())
            .or_default()
            .push(r["seq"].as_u64().unwrap());
    }
    assert_eq!(by_session.len(), 13);
    for (s, seqs) in &by_session {
        let n = tacho_tests::event_count(&home, s);
        assert_eq!(seqs, &(0..n as u64).collect::<Vec<_>>(), "{s}");
    }
    // Exporting again gives the same bytes (ids are derived, not random).
    let (_, again, _) = audit(&home, &["export", "--all"]);
    assert_eq!(out, again);

    let a0: Vec<&Value> = recs.iter().filter(|r| r["session"] == "ses_a000").collect();
    let a1: Vec<&Value> = recs.iter().filter(|r| r["session"] == "ses_a001").collect();
    assert_ne!(a0[0]["trace_id"], a1[0]["trace_id"], "a trace per session");
    assert!(a0.iter().all(|r| r["trace_id"] == a0[0]["trace_id"]));
    // A tool call and its result share a span, nested in the step open at the call.
    let call = a0.iter().find(|r| r["type"] == "tool.call").unwrap();
    let result = a0
        .iter()
        .find(|r| r["type"] == "tool.result" && r["call_id"] == call["call_id"])
        .unwrap();
    assert_eq!(call["span_id"], result["span_id"]);
    assert_eq!(result["tool"], call["tool"]);
    let step = a0
        .iter()
        .find(|r| r["type"] == "step.start" && r["step"] == call["step"])
        .unwrap();
    assert_eq!(call["parent_span_id"], step["span_id"]);
    assert_eq!(
        step["parent_span_id"], a0[0]["span_id"],
        "steps nest in the session"
    );
    assert!(a0[0]["parent_span_id"].is_null());
    // Original times, and tokens with the cache apart.
    let resp = a0.iter().find(|r| r["type"] == "llm.response").unwrap();
    assert_eq!(resp["time"], "2026-11-20T09:14:06.31Z");
    assert_eq!(
        resp["tokens"],
        serde_json::json!({"input": 12263, "output": 587, "cache_read": 9800, "cache_write": 2100})
    );
    // The failed tool call says so; its full output is there.
    let failed = a0
        .iter()
        .find(|r| r["type"] == "tool.result" && r["status"] == "error")
        .unwrap();
    assert!(failed["output"].as_str().unwrap().len() > 20);
    assert_eq!(failed["output_truncated"], false);
    // The child names its parent session on every record.
    assert!(
        recs.iter()
            .filter(|r| r["session"] == "ses_child")
            .all(|r| r["parent_session"] == "ses_a000")
    );
}

#[test]
fn export_selects_by_session_time_and_risk_and_cuts_output_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let home = store(tmp.path());
    // One session, by prefix.
    let (code, out, err) = audit(&home, &["export", "ses_chi"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        sessions_of(&records(&out)),
        BTreeSet::from(["ses_child".to_string()])
    );
    // --since: the sessions started on or after the date, as `session list` has them.
    let (_, out, _) = audit(&home, &["export", "--all", "--since", "2026-11-22"]);
    let since = sessions_of(&records(&out));
    assert_eq!(
        since,
        ["ses_a001", "ses_a003", "ses_a005", "ses_a007", "ses_a009"]
            .map(String::from)
            .into()
    );
    // --risk: those `session list --risk` shows, not the lower-risk one.
    let (_, out, _) = audit(&home, &["export", "--all", "--risk", "medium"]);
    let risky = sessions_of(&records(&out));
    let mut c = tacho(&home);
    c.args(["session", "list", "--risk", "medium", "--json"]);
    let (_, listed, _) = run(c);
    assert_eq!(risky, sessions_of(&records(&listed)));
    assert!(!risky.contains("ses_low") && risky.contains("ses_a000"));
    // --max-output cuts and says how long the output was.
    let (_, out, _) = audit(&home, &["export", "ses_a000", "--max-output", "10"]);
    let cut: Vec<Value> = records(&out)
        .into_iter()
        .filter(|r| r["output_truncated"] == true)
        .collect();
    assert!(!cut.is_empty());
    for r in &cut {
        assert!(r["output"].as_str().unwrap().len() <= 10);
        assert!(r["output_bytes"].as_u64().unwrap() > 10);
    }
    // Bad input: a clear error, nothing written.
    let target = tmp.path().join("out.jsonl");
    let (code, _, err) = audit(
        &home,
        &[
            "export",
            "--all",
            "--risk",
            "severe",
            "-o",
            target.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("severe"), "{err}");
    assert!(!target.exists());
    let (code, _, err) = audit(&home, &["export", "nosuch"]);
    assert_eq!(code, 4, "{err}");
    // --output writes the file whole, with the same records as stdout.
    let (code, _, err) = audit(&home, &["export", "--all", "-o", target.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let (_, stdout, _) = audit(&home, &["export", "--all"]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), stdout);
}

/// A session damaged in the middle is exported up to the damaged batch, followed by an
/// `export.error` record; the others whole; exit 1.
#[test]
fn export_of_a_damaged_session_stops_at_the_damage_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let home = store(tmp.path());
    let seg = std::fs::read_dir(home.join("log/streams/ses_a002"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "tseg"))
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(&seg, &bytes).unwrap();
    let (code, out, err) = audit(&home, &["export", "--all"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ses_a002"), "{err}");
    let recs = records(&out);
    let errors: Vec<&Value> = recs
        .iter()
        .filter(|r| r["type"] == "export.error")
        .collect();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["session"], "ses_a002");
    let kept = recs
        .iter()
        .filter(|r| r["session"] == "ses_a002" && r["type"] != "export.error")
        .count() as u64;
    assert_eq!(errors[0]["next_seq"], kept);
    assert!(kept > 0 && kept < 48, "{kept}");
    assert_eq!(
        recs.iter().filter(|r| r["session"] == "ses_a003").count(),
        48
    );
}

/// The JSON Lines records and the OTLP spans agree: every record's span is a span of
/// the trace export, with the record's trace.
#[test]
fn export_records_name_the_spans_of_the_trace_export() {
    let tmp = tempfile::tempdir().unwrap();
    let home = store(tmp.path());
    let (_, out, _) = audit(&home, &["export", "--all"]);
    let file = tmp.path().join("traces.jsonl");
    let (code, _, err) = audit(&home, &["otlp", "--all", "--file", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let mut spans = BTreeSet::new();
    for line in std::fs::read_to_string(&file).unwrap().lines() {
        let req: Value = serde_json::from_str(line).unwrap();
        for rs in req["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                for s in ss["spans"].as_array().unwrap() {
                    spans.insert((
                        s["traceId"].as_str().unwrap().to_string(),
                        s["spanId"].as_str().unwrap().to_string(),
                    ));
                }
            }
        }
    }
    let recs = records(&out);
    for r in &recs {
        let key = (
            r["trace_id"].as_str().unwrap().to_string(),
            r["span_id"].as_str().unwrap().to_string(),
        );
        assert!(spans.contains(&key), "{r}");
    }
    // The running session's open spans are exported, marked unfinished.
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("tacho.unfinished"));
}

fn otlp_check(scenario: &str) {
    let python = tacho_tests::repo_root().join("tests/audit/.venv/bin/python");
    if !python.exists() {
        let msg =
            "the OTLP checks need opentelemetry-proto in tests/audit/.venv (.ci/run installs it)";
        tacho_tests::skip_without(msg);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let home = store(tmp.path());
    let out = std::process::Command::new(&python)
        .arg(tacho_tests::repo_root().join("tests/audit/otlp_check.py"))
        .arg(tacho_tests::tacho_bin())
        .arg(scenario)
        .arg("100")
        .env_clear()
        .env("TACHO_HOME", &home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    if scenario != "reject" {
        assert_eq!(v["sessions"], 13, "{v}");
        assert!(v["tools"].as_u64().unwrap() >= 100, "{v}");
    }
    if matches!(scenario, "protobuf" | "json") {
        assert!(v["requests"].as_u64().unwrap() > 1, "batched: {v}");
    }
}

#[test]
fn otlp_over_http_protobuf_decodes_with_the_official_package_and_matches_the_log() {
    otlp_check("protobuf");
}

#[test]
fn otlp_over_http_json_decodes_with_the_official_package_and_matches_the_log() {
    otlp_check("json");
}

#[test]
fn otlp_retries_a_503_and_delivers_everything() {
    otlp_check("retry");
}

#[test]
fn otlp_never_retries_a_400() {
    otlp_check("reject");
}

#[test]
fn otlp_file_is_otlp_json_the_official_package_reads() {
    otlp_check("file");
}

/// A collector stand-in on 127.0.0.1 that answers every request with `answer` (one
/// request per connection) and keeps the head of each request it read. The accept loop
/// ends when the server is dropped, or after a minute at most.
struct Fake {
    port: u16,
    heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Fake {
    fn start(answer: impl Fn(u16) -> Vec<u8> + Send + 'static) -> Fake {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (h, st) = (heads.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while !st.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                let Ok((mut s, _)) = listener.accept() else {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    continue;
                };
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .unwrap();
                let mut raw = Vec::new();
                let mut buf = [0u8; 8192];
                let head_end = loop {
                    if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                        break Some(i + 4);
                    }
                    match s.read(&mut buf) {
                        Ok(n) if n > 0 && raw.len() < 1 << 20 => raw.extend_from_slice(&buf[..n]),
                        _ => break None,
                    }
                };
                let Some(head_end) = head_end else { continue };
                let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while raw.len() < head_end + len {
                    match s.read(&mut buf) {
                        Ok(n) if n > 0 => raw.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                h.lock().unwrap().push(head);
                let _ = s.write_all(&answer(port));
            }
        });
        Fake {
            port,
            heads,
            stop,
            thread: Some(thread),
        }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn http_answer(status: &str, headers: &str, body: &[u8]) -> Vec<u8> {
    let mut a = format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    a.extend_from_slice(body);
    a
}

/// `audit otlp` to `port` with a secret in a flag and one in the environment.
fn otlp_to(home: &Path, port: u16, extra: &[&str]) -> (i32, String, String) {
    let mut c = tacho(home);
    c.args(["audit", "otlp", "--endpoint"])
        .arg(format!("http://127.0.0.1:{port}"))
        .args(["--header", "x-api-key=SECRET-FLAG", "--all"])
        .args(extra)
        .env("OTEL_EXPORTER_OTLP_HEADERS", "x-team-token=SECRET-ENV");
    run(c)
}

/// OTLP defines no redirects: a collector answering 302 to another origin gets the
/// export refused (exit 5, the location named), and the other origin sees nothing —
/// not the spans, not the secret headers.
#[test]
fn otlp_follows_no_redirect_and_fails_naming_the_location() {
    let tmp = tempfile::tempdir().unwrap();
    let home = store(tmp.path());
    let other = Fake::start(|_| http_answer("200 OK", "", b""));
    let to = other.port;
    for status in [
        "302 Found",
        "307 Temporary Redirect",
        "308 Permanent Redirect",
    ] {
        let collector = Fake::start(move |_| {
            http_answer(
                status,
                &format!("Location: http://127.0.0.1:{to}/v1/traces\r\n"),
                b"",
            )
        });
        let (code, out, err) = otlp_to(&home, collector.port, &[]);
        let location = format!("http://127.0.0.1:{to}/v1/traces");
        assert_eq!(code, 5, "{status}: {out}{err}");
        assert!(
            err.contains("redirect") && err.contains(&location),
            "{status}: {err}"
        );
        assert!(!out.contains("sent "), "{status}: {out}");
        let got = collector.heads();
        assert_eq!(got.len(), 1, "{status}: a redirect is not retried: {got:?}");
        assert!(got[0].contains("secret-flag") && got[0].contains("secret-env"));
    }
    assert_eq!(
        other.heads(),
        Vec::<String>::new(),
        "the other origin got nothing"
    );
}

/// What a collector answers reaches the terminal without its control characters
/// (no escape sequence can retitle the window, clear it or hide text) and cut short.
#[test]
fn otlp_echoes_no_control_characters_from_the_collector() {
    let tmp = tempfile::tempdir().unwrap();
    let home = store(tmp.path());
    let nasty = "\u{1b}]0;owned\u{7}\u{1b}[2Jbad request\u{9b}31m\u{202e}gnp.exe\r";
    let plain = |s: &str| {
        !s.chars()
            .any(|c| c.is_control() && c != '\n' || c == '\u{202e}')
    };

    // Rejected (400): the body is shown, escaped and cut.
    let body = format!("{nasty}{}", "x".repeat(5000));
    let collector = Fake::start(move |_| http_answer("400 Bad Request", "", body.as_bytes()));
    let (code, _, err) = otlp_to(&home, collector.port, &[]);
    assert_eq!(code, 5, "{err}");
    assert!(
        err.contains("bad request") && err.contains("HTTP 400"),
        "{err}"
    );
    assert!(plain(&err), "{err:?}");
    assert!(err.len() < 2000, "cut: {} bytes", err.len());

    // A redirect's location (an ESC there is refused by the HTTP parser already; C1 and
    // bidirectional characters are not).
    let collector = Fake::start(move |_| {
        http_answer(
            "301 Moved Permanently",
            "Location: http://127.0.0.1:1/\u{9b}2J\u{202e}txt.exe\r\n",
            b"",
        )
    });
    let (code, _, err) = otlp_to(&home, collector.port, &[]);
    assert_eq!(code, 5, "{err}");
    assert!(err.contains("redirect") && plain(&err), "{err:?}");

    // Partial success: the collector's message, in text and in JSON.
    let msg = serde_json::json!({
        "partialSuccess": {"rejectedSpans": "0", "errorMessage": nasty}
    })
    .to_string();
    let collector = Fake::start(move |_| {
        http_answer(
            "200 OK",
            "Content-Type: application/json\r\n",
            msg.as_bytes(),
        )
    });
    for json in [false, true] {
        let mut extra = vec!["--protocol", "http/json"];
        if json {
            extra.push("--json");
        }
        let (code, out, err) = otlp_to(&home, collector.port, &extra);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("sent ") || json, "{out}");
        assert!(plain(&out) && plain(&err), "{out:?}{err:?}");
        assert!(
            err.contains("bad request") || out.contains("bad request"),
            "{out}{err}"
        );
    }
}

/// The OTLP JSON mapping writes 64-bit integers as strings: a collector's partial
/// success in that form (as the collector itself writes it) counts, and exits 1.
#[test]
fn otlp_json_partial_success_with_a_string_count_is_a_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let home = store(tmp.path());
    for (answer, code) in [
        (
            r#"{"partialSuccess":{"rejectedSpans":"7","errorMessage":"too old"}}"#,
            1,
        ),
        (r#"{"partialSuccess":{"rejectedSpans":7}}"#, 1),
        (r#"{}"#, 0),
    ] {
        let collector = Fake::start(move |_| {
            http_answer(
                "200 OK",
                "Content-Type: application/json\r\n",
                answer.as_bytes(),
            )
        });
        let (got, out, err) = otlp_to(&home, collector.port, &["--protocol", "http/json"]);
        assert_eq!(got, code, "{answer}: {out}{err}");
        if code == 1 {
            assert!(err.contains("rejected 7 span(s)"), "{err}");
        }
    }
}

/// The demo's session (real snapshots, a failed and a passing test run) as a report.
fn demo(dir: &Path) -> (PathBuf, String) {
    let home = tacho_tests::demo_store(dir);
    let mut c = tacho(&home);
    c.args(["session", "list", "--json"]);
    let (_, out, _) = run(c);
    let id = records(&out)[0]["session"].as_str().unwrap().to_string();
    (home, id)
}

#[test]
fn report_shows_what_a_reviewer_needs_from_the_log_and_the_snapshots() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, id) = demo(tmp.path());
    let (code, md, err) = audit(&home, &["report", &id[..10]]);
    assert_eq!(code, 0, "{err}");
    for section in [
        "## Session",
        "## Goal",
        "## Routing",
        "## Actions",
        "## Files changed",
        "## Validation",
        "## Risk",
        "## Token usage",
        "## Record integrity",
    ] {
        assert!(md.contains(section), "{section} missing:\n{md}");
    }
    // Files changed come from the snapshots, with real diffs.
    assert!(md.contains("+++ b/src/middleware/rate-limit.ts"), "{md}");
    assert!(
        md.contains("+  app.use('/v1', rateLimit({ perMinute: 120 }), router);"),
        "{md}"
    );
    // The failed and the passing test run, each as the risk assessment weighed it:
    // the demo records it as a shell call and as a `verification.run`.
    for (from, result) in [
        ("shell call", "failed"),
        ("recorded run", "failed"),
        ("shell call", "passed"),
        ("recorded run", "passed"),
    ] {
        assert!(
            md.contains(&format!("| `npm test` | {from} | {result} |")),
            "{from} {result}: {md}"
        );
    }
    // Tokens as `session show` has them; the chain head as `log verify` prints it.
    let mut c = tacho(&home);
    c.args(["session", "show", &id, "--json"]);
    let (_, show, _) = run(c);
    let show: Value = serde_json::from_str(show.trim()).unwrap();
    let tokens_in = show["tokens_in"].as_u64().unwrap();
    let with_commas = tacho_app::render::thousands(tokens_in);
    assert!(
        md.contains(&format!("| {with_commas} |")),
        "{with_commas}\n{md}"
    );
    let mut c = tacho(&home);
    c.args(["log", "verify", "--session", &id, "--json"]);
    let (_, verify, _) = run(c);
    let head = records(&verify)
        .into_iter()
        .find_map(|r| r["head"].as_str().map(str::to_string))
        .expect("log verify prints the head");
    assert!(md.contains(&format!("chain head `{head}`")), "{head}\n{md}");
    assert!(md.contains(&format!("tacho session replay {id} --mode export")));

    // JSON: the same facts for a program.
    let (code, json, err) = audit(&home, &["report", &id, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(v["type"], "report");
    assert_eq!(v["integrity"]["head"], head.as_str());
    assert_eq!(v["graph"]["tokens"]["in"], tokens_in);
    assert!(
        v["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "src/middleware/rate-limit.ts" && c["change"] == "created")
    );

    // HTML: one self-contained file, nothing fetched, nothing run.
    let file = tmp.path().join("report.html");
    let (code, _, err) = audit(
        &home,
        &[
            "report",
            &id,
            "--format",
            "html",
            "-o",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let html = std::fs::read_to_string(&file).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("default-src 'none'"));
    assert!(!html.contains("<script") && !html.contains(" src=") && !html.contains("<link"));
    assert!(html.contains("<h2>Files changed</h2>") && html.contains("rate-limit.ts"));
}

#[test]
fn report_shows_goal_receipts_and_a_record_that_does_not_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = tacho_tests::parity_workspace(tmp.path(), "ses_goal");
    let in_ws = |args: &[&str]| {
        let mut c = tacho(&home);
        c.current_dir(&ws).args(args);
        run(c)
    };
    let (code, out, err) = in_ws(&[
        "goal",
        "create",
        "--assure",
        "--plan",
        "plan.md",
        "--session",
        "ses_goal",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let goal = serde_json::from_str::<Value>(out.trim()).unwrap()["goal"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    let (code, out, _) = in_ws(&["goal", "check", "parity", "--session", "ses_goal", "--json"]);
    assert_eq!(code, 0, "{out}");
    let seq = serde_json::from_str::<Value>(out.trim()).unwrap()["seq"]
        .as_u64()
        .unwrap();
    let (code, md, err) = in_ws(&["audit", "report", "ses_goal"]);
    assert_eq!(code, 0, "{err}");
    assert!(md.contains(&format!("`{goal}`")), "{md}");
    assert!(
        md.contains(&format!("| `parity` | passed | event #{seq} |")),
        "{md}"
    );
    assert!(md.contains("assured"), "{md}");

    // A forged byte in the receipt's frame: the report still answers, says the record
    // does not verify, exit 1.
    let mut c = tacho(&home);
    c.args(["log", "dump", "ses_goal", "--json"]);
    let (_, dump, _) = run(c);
    let dump = records(&dump);
    let seg = PathBuf::from(dump[0]["segment"].as_str().unwrap());
    let frame = dump.iter().rfind(|r| r["type"] == "event").unwrap();
    let at = (frame["offset"].as_u64().unwrap() + frame["len"].as_u64().unwrap() / 2) as usize;
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[at] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    let (code, md, err) = in_ws(&["audit", "report", "ses_goal"]);
    assert_eq!(code, 1, "{md}{err}");
    assert!(md.contains("**The record does not verify:**"), "{md}");
}

/// Sessions for the prune test: dates relative to now (the rule is an age).
fn prune_store(dir: &Path) -> PathBuf {
    let home = dir.join("home");
    let ex = tacho_tests::example_session();
    let day = |ago: i64| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            - ago * 86_400;
        // The example's date, moved: 2026-11-20 becomes the day `ago` days back.
        tacho_schema::time_to_rfc3339(t * 1_000_000_000)
            .get(..10)
            .unwrap()
            .to_string()
    };
    let session = |id: &str, ago: i64, low: bool, parent: Option<&str>, ended: bool| {
        let mut lines: Vec<String> = ex
            .replace(EXAMPLE, id)
            .replace("2026-11-20", &day(ago))
            .lines()
            .filter(|l| !(low && l.contains("\"tool.result\"")))
            .filter(|l| ended || !l.contains("\"session.end\""))
            .map(str::to_string)
            .collect();
        if let Some(p) = parent {
            lines[0] = lines[0].replacen(
                "\"source\":\"claude-code\"",
                &format!("\"source\":\"claude-code\",\"parent\":\"{p}\""),
                1,
            );
        }
        lines.join("\n") + "\n"
    };
    let input = [
        session("ses_old_m", 30, false, None, true),
        session("ses_old_l", 30, true, None, true),
        session("ses_parent", 30, true, None, true),
        session("ses_kid", 1, true, Some("ses_parent"), true),
        session("ses_run", 30, true, None, false),
        session("ses_new", 1, true, None, true),
    ]
    .concat();
    let (code, _, err) = run_with_stdin(&home, &["record"], &input);
    assert_eq!(code, 0, "{err}");
    home
}

/// Every pack of the store, as (lossy) text.
fn packed_bytes(home: &Path) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(home.join("log/packs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "tpack") {
            all.push_str(&String::from_utf8_lossy(&std::fs::read(p).unwrap()));
        }
    }
    all
}

fn verify_json(home: &Path) -> (i32, Vec<Value>) {
    let mut c = tacho(home);
    c.args(["log", "verify", "--json"]);
    let (code, out, _) = run(c);
    (code, records(&out))
}

#[test]
fn prune_removes_whole_old_sessions_after_recording_them_and_verify_checks_the_record() {
    let tmp = tempfile::tempdir().unwrap();
    let home = prune_store(tmp.path());
    // A stored projection to remove with its session.
    let mut c = tacho(&home);
    c.args(["graph", "ses_old_l"]);
    assert_eq!(run(c).0, 0);
    let projection = home.join("log/projections/ses_old_l.json");
    assert!(projection.exists());
    let (_, before) = verify_json(&home);
    let head_before = before
        .iter()
        .find(|r| r["session"] == "ses_old_l" && r["head"].is_string())
        .unwrap()["head"]
        .clone();

    // Dry run: names everything, removes nothing.
    let (code, out, err) = audit(
        &home,
        &[
            "prune",
            "--days",
            "7",
            "--keep-risk",
            "medium",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let dry: Value = serde_json::from_str(out.trim()).unwrap();
    // (The input recorded its new sessions into a pack: no stream directories.)
    assert!(packed_bytes(&home).contains("ses_old_l"));
    let (code, out, err) = audit(
        &home,
        &["prune", "--days", "7", "--keep-risk", "medium", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let done: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(dry["removed"], done["removed"]);
    let removed: Vec<&str> = done["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session"].as_str().unwrap())
        .collect();
    assert_eq!(removed, ["ses_old_l"]);
    assert_eq!(done["removed"][0]["head"], head_before);
    let kept: BTreeMap<String, String> = done["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["session"].as_str().unwrap().to_string(),
                k["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(kept["ses_old_m"].contains("risk"), "{kept:?}");
    assert!(
        kept["ses_parent"].contains("ancestor of kept session ses_kid"),
        "{kept:?}"
    );
    assert!(kept["ses_run"].contains("running"), "{kept:?}");
    assert!(!kept.contains_key("ses_new") && !kept.contains_key("ses_kid"));
    // The whole session is gone: stream, lock, projection, index entry; the pack that
    // held it was written again without it, and holds the others still.
    assert!(!home.join("log/streams/ses_old_l").exists());
    let packed = packed_bytes(&home);
    assert!(!packed.contains("ses_old_l") && packed.contains("ses_old_m"));
    assert!(!home.join("log/locks/ses_old_l.lock").exists());
    assert!(!projection.exists());
    let mut c = tacho(&home);
    c.args(["session", "list", "--json"]);
    let (_, list, _) = run(c);
    assert_eq!(sessions_of(&records(&list)).len(), 5);
    assert!(!list.contains("ses_old_l"));
    // The store verifies; its digest now covers the prune record.
    let (code, after) = verify_json(&home);
    assert_eq!(code, 0, "{after:?}");

    // A prune record edited, or removed: log verify finds it.
    let log = home.join("log/pruned.log");
    let text = std::fs::read_to_string(&log).unwrap();
    std::fs::write(
        &log,
        text.replace("\"session\":\"ses_old_l\"", "\"session\":\"ses_old_x\""),
    )
    .unwrap();
    let (code, found) = verify_json(&home);
    assert_eq!(code, 1);
    assert!(
        found.iter().any(|r| r["message"]
            .as_str()
            .is_some_and(|m| m.contains("digest does not match"))),
        "{found:?}"
    );
    std::fs::write(&log, &text).unwrap();
    assert_eq!(verify_json(&home).0, 0);

    // An interrupted prune (recorded, not removed): verify warns, the next prune
    // finishes it.
    let store = tacho_store::Store::open(home.join("log"), Default::default()).unwrap();
    let (code, before) = verify_json(&home);
    assert_eq!(code, 0);
    let new = before
        .iter()
        .find(|r| r["session"] == "ses_new" && r["head"].is_string())
        .unwrap();
    let new_head = new["head"].as_str().unwrap().to_string();
    store
        .record_prune(
            1,
            "interrupted on purpose",
            vec![tacho_store::PrunedSession {
                session: "ses_new".into(),
                next_seq: new["events"].as_u64().unwrap(),
                head: new_head,
                started_unix_ns: None,
                last_event_unix_ns: None,
            }],
        )
        .unwrap();
    let (code, found) = verify_json(&home);
    assert_eq!(code, 0, "a warning, not an error: {found:?}");
    assert!(
        found.iter().any(|r| r["message"]
            .as_str()
            .is_some_and(|m| m.contains("interrupted prune"))),
        "{found:?}"
    );
    let (code, out, err) = audit(&home, &["prune", "--days", "7", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["finished"], serde_json::json!(["ses_new"]));
    assert!(!home.join("log/streams/ses_new").exists());
    assert_eq!(verify_json(&home).0, 0);
}

/// Sessions are rendered on every core, a window ahead of the one written, and one too
/// large to hold ahead is streamed in its turn: the output is, byte for byte, the
/// sessions exported one by one, in order.
#[test]
fn export_of_many_sessions_in_parallel_equals_exporting_them_one_by_one() {
    let tmp = tempfile::tempdir().unwrap();
    let home = store(tmp.path());
    // A session whose records pass 1 MiB (a 2 MB tool output).
    let big = format!(
        concat!(
            r#"{{"type":"session.start","session":"ses_big","ts":"2026-11-19T00:00:00Z"}}"#,
            "\n",
            r#"{{"type":"tool.call","session":"ses_big","ts":"2026-11-19T00:00:01Z","call_id":"c","tool":"bash"}}"#,
            "\n",
            r#"{{"type":"tool.result","session":"ses_big","ts":"2026-11-19T00:00:02Z","call_id":"c","status":"ok","output":"{}"}}"#,
            "\n",
            r#"{{"type":"session.end","session":"ses_big","ts":"2026-11-19T00:00:03Z","reason":"completed"}}"#,
            "\n",
        ),
        "x".repeat(2 << 20)
    );
    let (code, _, err) = run_with_stdin(&home, &["record"], &big);
    assert_eq!(code, 0, "{err}");
    let (code, all, err) = audit(&home, &["export", "--all"]);
    assert_eq!(code, 0, "{err}");
    let order: Vec<String> = {
        let mut seen = Vec::new();
        for r in records(&all) {
            let s = r["session"].as_str().unwrap().to_string();
            if seen.last() != Some(&s) {
                seen.push(s);
            }
        }
        seen
    };
    assert_eq!(order.len(), 14);
    assert_eq!(order[0], "ses_big", "oldest first");
    let mut one_by_one = String::new();
    for s in &order {
        let (code, out, err) = audit(&home, &["export", s]);
        assert_eq!(code, 0, "{err}");
        one_by_one.push_str(&out);
    }
    assert!(
        all == one_by_one,
        "the parallel export differs from one by one"
    );

    // The same for the trace export (the big session's span carries its 2 MB output):
    // the spans, in order, are those of the sessions exported one by one.
    let spans_of = |args: &[&str]| -> Vec<Value> {
        let file = tmp.path().join("t.jsonl");
        let mut all_args = vec!["otlp"];
        all_args.extend_from_slice(args);
        all_args.extend_from_slice(&["--max-output", "3000000", "--file", file.to_str().unwrap()]);
        let (code, _, err) = audit(&home, &all_args);
        assert_eq!(code, 0, "{err}");
        let mut spans = Vec::new();
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            let req: Value = serde_json::from_str(line).unwrap();
            for rs in req["resourceSpans"].as_array().unwrap() {
                for ss in rs["scopeSpans"].as_array().unwrap() {
                    spans.extend(ss["spans"].as_array().unwrap().iter().cloned());
                }
            }
        }
        spans
    };
    let together = spans_of(&["--all"]);
    let mut apart = Vec::new();
    for s in &order {
        apart.extend(spans_of(&[s.as_str()]));
    }
    assert_eq!(together.len(), apart.len());
    assert!(
        together == apart,
        "the parallel trace export differs from one by one"
    );
    assert!(
        together
            .iter()
            .any(|s| s.to_string().contains(&"x".repeat(2 << 20))),
        "the big output is in a span"
    );
}

/// Issue 47 (14): a session damaged after the index folded it (a byte changed in its
/// log) is kept by the dry run and the real prune alike, which then removes the rest.
#[test]
fn prune_keeps_a_session_damaged_since_it_was_indexed_in_the_dry_run_too() {
    let tmp = tempfile::tempdir().unwrap();
    let home = prune_store(tmp.path());
    // One more old session, alone: a stream of its own (not in a pack).
    let ex = tacho_tests::example_session();
    let old = {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            - 30 * 86_400;
        tacho_schema::time_to_rfc3339(t * 1_000_000_000)
            .get(..10)
            .unwrap()
            .to_string()
    };
    let lines = ex.replace(EXAMPLE, "ses_old_x").replace("2026-11-20", &old);
    let (code, _, err) = run_with_stdin(&home, &["record"], &lines);
    assert_eq!(code, 0, "{err}");
    let mut c = tacho(&home);
    c.args(["session", "list", "--json"]);
    assert_eq!(run(c).0, 0, "the index folds it");
    let dir = home.join("log/streams/ses_old_x");
    let seg = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "tseg"))
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[128 + 40] ^= 1;
    std::fs::write(&seg, &bytes).unwrap();
    let kept_damaged = |v: &Value| {
        v["kept"].as_array().unwrap().iter().any(|k| {
            k["session"] == "ses_old_x" && k["reason"].as_str().unwrap().contains("damaged")
        })
    };
    let (code, out, err) = audit(&home, &["prune", "--days", "7", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{err}");
    let dry: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(kept_damaged(&dry), "{dry}");
    let (code, out, err) = audit(&home, &["prune", "--days", "7", "--json"]);
    assert_eq!(code, 0, "{err}");
    let done: Value = serde_json::from_str(out.trim()).unwrap();
    assert!(kept_damaged(&done), "{done}");
    assert_eq!(dry["removed"], done["removed"]);
    assert!(!done["removed"].as_array().unwrap().is_empty(), "{done}");
    assert!(dir.exists(), "the damaged session is still there");
}

/// Issue 47 (13): a branch copies its parent's events up to its point; the audit
/// records count each model response once — the parent's — so that a warehouse's
/// token sums (docs/warehouse) do not count the copies twice.
#[test]
fn a_branchs_copied_responses_are_counted_once() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let (code, _, err) = run_with_stdin(&home, &["record"], &tacho_tests::example_session());
    assert_eq!(code, 0, "{err}");
    let mut c = tacho(&home);
    c.args([
        "session",
        "branch",
        EXAMPLE,
        "--from",
        "step 3",
        "--id",
        "ses_branch",
    ]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    let sum = |args: &[&str]| -> (u64, u64) {
        let (code, out, err) = audit(&home, args);
        assert_eq!(code, 0, "{err}");
        records(&out)
            .iter()
            .filter(|r| r["type"] == "llm.response")
            .fold((0, 0), |(n, t), r| {
                let input = r["tokens"]["input"].as_u64();
                (n + 1, t + input.unwrap_or(0))
            })
    };
    let (parent_responses, parent_input) = sum(&["export", EXAMPLE]);
    let (branch_responses, branch_input) = sum(&["export", "ses_branch"]);
    assert!(
        parent_input > 0 && branch_responses > 0,
        "{parent_responses}"
    );
    assert_eq!(
        branch_input, 0,
        "the branch's responses are copies of the parent's"
    );
    let (_, all_input) = sum(&["export", "--all"]);
    assert_eq!(all_input, parent_input);
    // The branch goes on with a response of its own; a branch of the branch copies
    // the branch's own `session.branch` among its events, and that response after
    // them: every copy is still a copy.
    let own = r#"{"type":"llm.response","session":"ses_branch","request_id":"req_own","response_id":"msg_own","model":"m","tokens_in":1000,"tokens_out":10}"#;
    let (code, _, err) = run_with_stdin(&home, &["record", "--snapshots", "off"], own);
    assert_eq!(code, 0, "{err}");
    let (_, branch_input) = sum(&["export", "ses_branch"]);
    assert_eq!(branch_input, 1000);
    let mut c = tacho(&home);
    c.args(["session", "branch", "ses_branch", "--id", "ses_branch2"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    let (responses2, input2) = sum(&["export", "ses_branch2"]);
    assert!(responses2 > 0);
    assert_eq!(input2, 0);
}
