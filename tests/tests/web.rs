//! `tacho run-report`: the local web report as a whole process, over raw HTTP (so
//! that the `Host` header and paths can be anything), and in headless Chromium with
//! every non-loopback name unresolvable. Chromium comes from Debian's `chromium`
//! package (`.ci/run` installs it); without it the browser test says so and passes,
//! except in CI (`CI` set), where it fails.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tacho_tests::{run, tacho};

/// A running `tacho run-report`, stopped when dropped.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(home: &Path) -> Server {
    serve_env(home, &[])
}

/// `serve` with environment settings (the connection limits).
fn serve_env(home: &Path, env: &[(&str, &str)]) -> Server {
    let mut c = tacho(home);
    c.envs(env.iter().copied());
    c.args(["run-report", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "serving http://127.0.0.1:PORT/ ..."
    let port = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    Server { child, port }
}

/// (status, headers, body) of one request.
fn request(port: u16, method: &str, path: &str, host: &str) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn get(port: u16, path: &str) -> (u16, String, String) {
    request(port, "GET", path, &format!("127.0.0.1:{port}"))
}

/// The demo's session (real snapshots) and a second one whose segment is damaged.
fn store(dir: &Path) -> (PathBuf, String) {
    let home = tacho_tests::demo_store(dir);
    let ex = tacho_tests::example_session().replace("ses_01jdemo8xk4rate1imit0000a", "ses_broken");
    // A second copy, cut before its end: still running.
    let live: String = ex
        .replace("ses_broken", "ses_live")
        .lines()
        .take(20)
        .map(|l| format!("{l}\n"))
        .collect();
    let (code, _, err) = tacho_tests::run_with_stdin(&home, &["record"], &(ex.clone() + &live));
    assert_eq!(code, 0, "{err}");
    let mut c = tacho(&home);
    c.args(["log", "dump", "ses_broken", "--json"]);
    let (_, dump, _) = run(c);
    let frames: Vec<serde_json::Value> = dump
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // (A packed segment starts `pack_offset` bytes into its pack.)
    let seg = PathBuf::from(frames[0]["segment"].as_str().unwrap());
    let base = frames[0]["pack_offset"].as_u64().unwrap_or(0);
    let f = &frames[10];
    let at = (base + f["offset"].as_u64().unwrap() + f["len"].as_u64().unwrap() / 2) as usize;
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[at] ^= 0x20;
    std::fs::write(&seg, bytes).unwrap();
    let mut c = tacho(&home);
    c.args(["session", "list", "--json"]);
    let (_, out, _) = run(c);
    let id = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| {
            v["session"]
                .as_str()
                .is_some_and(|s| s.starts_with("ses_0"))
        })
        .unwrap()["session"]
        .as_str()
        .unwrap()
        .to_string();
    (home, id)
}

#[test]
fn the_report_server_answers_its_own_host_only_serves_no_files_and_shows_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let (home, id) = store(tmp.path());
    let srv = serve(&home);
    let p = srv.port;

    let (status, head, body) = get(p, "/");
    assert_eq!(status, 200);
    assert!(
        head.contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    assert!(head.contains("x-frame-options: deny"));
    assert!(body.contains(&id) && body.contains("ses_broken"), "{body}");
    assert!(body.contains("Tokens per day") && body.contains("<svg"));

    let (status, head, body) = get(p, &format!("/s/{}", &id[..12]));
    assert_eq!(status, 200, "{body}");
    assert!(head.contains("content-security-policy"));
    for fact in [
        "Add per-client rate limiting to the public API",
        "Step 3: Run the test suite",
        "npm test",
        "+  app.use(&#39;/v1&#39;, rateLimit({ perMinute: 120 }), router);",
        "tacho session rollback",
        "chain head",
        "files_changed",
    ] {
        assert!(body.contains(fact), "{fact} missing");
    }
    assert!(!body.contains("<script"), "no script on the page");
    assert!(
        !body.contains("http-equiv=\"refresh\""),
        "an ended session stays still"
    );
    // A running session's page refreshes itself (without a script).
    let (status, _, body) = get(p, "/s/ses_live");
    assert_eq!(status, 200);
    assert!(
        body.contains("<meta http-equiv=\"refresh\" content=\"5\">"),
        "{body}"
    );

    // DNS rebinding: a name that resolves to 127.0.0.1 is still refused.
    let (status, _, _) = request(p, "GET", "/", &format!("evil.example:{p}"));
    assert_eq!(status, 421);
    let (status, _, _) = request(p, "GET", "/", "127.0.0.1");
    assert_eq!(status, 421, "the port is part of the host");
    let (status, _, _) = request(p, "GET", "/", &format!("localhost:{p}"));
    assert_eq!(status, 200);

    // No path reaches a file.
    for path in [
        "/../../../../etc/passwd",
        "/s/..%2F..%2F..%2Fetc%2Fpasswd",
        "/s/%2e%2e/%2e%2e/etc/passwd",
        "/static/../Cargo.toml",
        "/s/ses_broken/../../log",
    ] {
        let (status, _, body) = get(p, path);
        assert_eq!(status, 404, "{path}");
        assert!(!body.contains("root:"), "{path}");
    }
    // Unknown session, other methods.
    let (status, _, body) = get(p, "/s/nosuch");
    assert_eq!(status, 404);
    assert!(body.contains("nosuch"), "{body}");
    let (status, _, _) = request(p, "POST", "/", &format!("127.0.0.1:{p}"));
    assert_eq!(status, 405);
    let (status, _, _) = request(p, "DELETE", &format!("/s/{id}"), &format!("127.0.0.1:{p}"));
    assert_eq!(status, 405);

    // A damaged session is shown as such.
    let (status, _, body) = get(p, "/s/ses_broken");
    assert_eq!(status, 200);
    assert!(body.contains("The record does not verify"), "{body}");
}

fn chromium() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Runs headless Chromium on `url` with every non-loopback name unresolvable: returns
/// the rendered DOM and writes a screenshot.
fn browse(chrome: &Path, profile: &Path, url: &str, shot: &Path) -> String {
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "--window-size=1280,1800",
    ];
    let out = std::process::Command::new(chrome)
        .args(common)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(url)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    let status = std::process::Command::new(chrome)
        .args(common)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        std::fs::metadata(shot).unwrap().len() > 10_000,
        "an empty screenshot"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_report_renders_in_headless_chromium_with_the_network_off() {
    let Some(chrome) = chromium() else {
        let msg = "the browser test needs Debian's chromium (.ci/run installs it)";
        tacho_tests::skip_without(msg);
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let (home, id) = store(tmp.path());
    let srv = serve(&home);
    let base = format!("http://127.0.0.1:{}", srv.port);
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dom = browse(
        &chrome,
        &tmp.path().join("profile"),
        &format!("{base}/"),
        &shots.join("run-report-index.png"),
    );
    assert!(dom.contains("id=\"sessions\""), "{dom}");
    assert!(dom.contains(&id) && dom.contains("ses_broken"));
    assert!(dom.contains("id=\"tokens-chart\""));
    let dom = browse(
        &chrome,
        &tmp.path().join("profile"),
        &format!("{base}/s/{id}"),
        &shots.join("run-report-session.png"),
    );
    // The key facts, from the DOM the browser built.
    assert!(dom.contains("Add per-client rate limiting to the public API"));
    assert!(
        dom.contains("id=\"timeline\"") && dom.contains("class=\"row fail\""),
        "the failed test run is drawn"
    );
    assert!(dom.contains("id=\"risk\">LOW"), "{dom}");
    assert!(dom.contains("src/middleware/rate-limit.ts"));
    assert!(dom.contains("id=\"verifications\""));
    assert!(dom.contains("id=\"rollback\""));
    eprintln!("screenshots in {}", shots.display());
}

/// A session with more tool calls than a page shows: the first 2,000 are shown, the
/// page says how many more there are (and where to get them).
#[test]
fn a_long_session_page_shows_the_first_calls_and_says_how_many_more() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let mut input = String::from(
        "{\"type\":\"session.start\",\"session\":\"ses_long\",\"ts\":1795166043000}\n{\"type\":\"step.start\",\"session\":\"ses_long\",\"ts\":1795166043001,\"step\":1}\n",
    );
    for i in 0..2100 {
        input.push_str(&format!(
            "{{\"type\":\"tool.call\",\"session\":\"ses_long\",\"ts\":{},\"call_id\":\"c{i}\",\"tool\":\"read\",\"target\":\"f{i}\"}}\n{{\"type\":\"tool.result\",\"session\":\"ses_long\",\"ts\":{},\"call_id\":\"c{i}\",\"status\":\"ok\",\"output\":\"out {i}\"}}\n",
            1795166044000i64 + i,
            1795166044000i64 + i
        ));
    }
    let (code, _, err) =
        tacho_tests::run_with_stdin(&home, &["record", "--snapshots", "off"], &input);
    assert_eq!(code, 0, "{err}");
    let srv = serve(&home);
    let (status, _, body) = get(srv.port, "/s/ses_long");
    assert_eq!(status, 200);
    assert_eq!(body.matches("<tr class=\"call\">").count(), 2000);
    assert!(
        body.contains("out 1999") && !body.contains("out 2000<"),
        "outputs of shown calls only"
    );
    assert!(
        body.contains("… and 100 more tool calls"),
        "the page says so"
    );
}

/// Whether the server has closed `s` (or answered and closed it), waiting at most
/// `within`; what it sent meanwhile is appended to `got`.
fn closed_within(s: &mut TcpStream, within: Duration, got: &mut Vec<u8>) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

fn home_with_a_session(dir: &Path) -> PathBuf {
    let home = dir.join("home");
    let (code, _, err) = tacho_tests::run_with_stdin(
        &home,
        &["record", "--snapshots", "off"],
        "{\"type\":\"session.start\",\"session\":\"ses_one\",\"ts\":1795166043000}\n",
    );
    assert_eq!(code, 0, "{err}");
    home
}

/// A connection that sends nothing, one that trickles its request head (slowloris) and
/// a kept-alive one left idle are all closed after the header timeout
/// (`TACHO_WEB_HEADER_TIMEOUT_MS`, here 1 s); the server still answers, and still
/// refuses heads and URIs that are too large.
#[test]
fn the_report_server_closes_silent_slow_and_idle_connections() {
    let tmp = tempfile::tempdir().unwrap();
    let home = home_with_a_session(tmp.path());
    let srv = serve_env(&home, &[("TACHO_WEB_HEADER_TIMEOUT_MS", "1000")]);
    let p = srv.port;
    let limit = Duration::from_secs(4);

    // Nothing sent.
    let mut silent = TcpStream::connect(("127.0.0.1", p)).unwrap();
    let t = Instant::now();
    assert!(
        closed_within(&mut silent, limit, &mut Vec::new()),
        "silent connection kept"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t.elapsed()
    );

    // A head trickled a line every 100 ms, never finished.
    let mut slow = TcpStream::connect(("127.0.0.1", p)).unwrap();
    write!(slow, "GET / HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n").unwrap();
    let t = Instant::now();
    let mut closed = false;
    for i in 0..40 {
        if slow
            .write_all(format!("X-Slow-{i}: a\r\n").as_bytes())
            .is_err()
            || closed_within(&mut slow, Duration::from_millis(100), &mut Vec::new())
        {
            closed = true;
            break;
        }
    }
    assert!(
        closed,
        "a trickled head kept the connection for {:?}",
        t.elapsed()
    );
    assert!(t.elapsed() < limit, "{:?}", t.elapsed());

    // Kept alive after an answer, then idle.
    let mut kept = TcpStream::connect(("127.0.0.1", p)).unwrap();
    write!(
        kept,
        "GET /s/ses_one HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    assert!(
        closed_within(&mut kept, limit, &mut got),
        "idle connection kept"
    );
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );

    // Still answering, still refusing what it refused.
    assert_eq!(get(p, "/").0, 200);
    assert_eq!(request(p, "GET", "/", "evil.example").0, 421);
    assert_eq!(get(p, &format!("/{}", "a".repeat(70_000))).0, 414);
    let mut big = TcpStream::connect(("127.0.0.1", p)).unwrap();
    write!(big, "GET / HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n").unwrap();
    for i in 0..200 {
        write!(big, "X-Many-{i}: a\r\n").unwrap();
    }
    big.write_all(b"\r\n").unwrap();
    let mut got = Vec::new();
    closed_within(&mut big, limit, &mut got);
    assert!(
        got.starts_with(b"HTTP/1.1 431"),
        "{}",
        String::from_utf8_lossy(&got)
    );
}

/// At most `TACHO_WEB_MAX_CONNECTIONS` (here 3) connections are served at once; the
/// next waits, unanswered, and is answered as soon as one of the others closes.
#[test]
fn the_report_server_serves_at_most_its_connection_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let home = home_with_a_session(tmp.path());
    let srv = serve_env(&home, &[("TACHO_WEB_MAX_CONNECTIONS", "3")]);
    let p = srv.port;
    let mut held: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", p)).unwrap();
            write!(s, "GET / HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    // Each held connection is accepted (in order) before the next one is made.
    std::thread::sleep(Duration::from_millis(300));
    let mut next = TcpStream::connect(("127.0.0.1", p)).unwrap();
    write!(
        next,
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    assert!(
        !closed_within(&mut next, Duration::from_millis(1500), &mut got) && got.is_empty(),
        "a fourth connection was served: {}",
        String::from_utf8_lossy(&got)
    );
    drop(held.pop());
    assert!(closed_within(&mut next, Duration::from_secs(10), &mut got));
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    drop(held);
    for _ in 0..5 {
        assert_eq!(get(p, "/").0, 200);
    }

    // A limit that is not a positive integer is refused, by name.
    let mut c = tacho(&home);
    c.env("TACHO_WEB_MAX_CONNECTIONS", "0").arg("run-report");
    let (code, _, err) = run(c);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("TACHO_WEB_MAX_CONNECTIONS"), "{err}");
}

/// A client that asks for a large page and does not read it holds the connection
/// only until the idle timeout (`TACHO_WEB_IDLE_TIMEOUT_MS`, here 1 s): the answer is
/// cut there, whatever the header timeout.
#[test]
fn the_report_server_closes_a_connection_where_nothing_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    // About 8 MB of page: more than the socket buffers hold.
    let out = "o".repeat(60_000);
    let mut input =
        String::from("{\"type\":\"session.start\",\"session\":\"ses_big\",\"ts\":1795166043000}\n");
    for i in 0..140 {
        input.push_str(&format!(
            "{{\"type\":\"tool.call\",\"session\":\"ses_big\",\"ts\":{t},\"call_id\":\"c{i}\",\"tool\":\"read\",\"target\":\"f{i}\"}}\n{{\"type\":\"tool.result\",\"session\":\"ses_big\",\"ts\":{t},\"call_id\":\"c{i}\",\"status\":\"ok\",\"output\":\"{out}\"}}\n",
            t = 1795166044000i64 + i,
        ));
    }
    let (code, _, err) =
        tacho_tests::run_with_stdin(&home, &["record", "--snapshots", "off"], &input);
    assert_eq!(code, 0, "{err}");
    let srv = serve_env(
        &home,
        &[
            ("TACHO_WEB_HEADER_TIMEOUT_MS", "60000"),
            ("TACHO_WEB_IDLE_TIMEOUT_MS", "1000"),
        ],
    );
    let p = srv.port;
    let mut s = TcpStream::connect(("127.0.0.1", p)).unwrap();
    write!(
        s,
        "GET /s/ses_big HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    // The head, once the page is made (bounded: 30 s)...
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before its head");
        got.extend_from_slice(&buf[..n]);
    }
    // ...then nothing read for longer than the idle timeout.
    std::thread::sleep(Duration::from_millis(3000));
    assert!(closed_within(&mut s, Duration::from_secs(20), &mut got));
    let text = String::from_utf8_lossy(&got);
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_string())
        })
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(length > 8_000_000, "a large page: {length}");
    assert!(
        body.len() < length,
        "the answer was not cut: {} of {length} bytes",
        body.len()
    );
    assert_eq!(get(p, "/").0, 200);
}

/// What `tacho run-report` opens on (the first line it prints): the latest session's
/// page by default, as the brief says; the index with `--index`, or when no session
/// was recorded yet.
#[test]
fn run_report_opens_the_latest_session_and_the_index_on_request() {
    let first_line = |home: &Path, args: &[&str]| {
        let mut c = tacho(home);
        c.arg("run-report")
            .args(args)
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = c.spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let _ = child.kill();
        let _ = child.wait();
        line
    };
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    let line = first_line(&empty, &[]);
    assert!(line.contains("/ (127.0.0.1 only"), "{line}");
    let home = tacho_tests::demo_store(&tmp.path().join("demo"));
    let (_, list, _) = {
        let mut c = tacho(&home);
        c.args(["session", "list", "--json", "--limit", "1"]);
        run(c)
    };
    let latest: serde_json::Value = serde_json::from_str(list.lines().next().unwrap()).unwrap();
    let latest = latest["session"].as_str().unwrap();
    let line = first_line(&home, &[]);
    assert!(line.contains(&format!("/s/{latest} ")), "{line}");
    let line = first_line(&home, &["--index"]);
    assert!(line.contains("/ (127.0.0.1 only"), "{line}");
}

/// A session whose changes tacho rolled back says so at the top of its page, naming
/// the rollback (a link), when, and what it did; the rollback's own page names the
/// session it rolled back. In headless Chromium too, when it is installed.
#[test]
fn a_rolled_back_sessions_page_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tacho_tests::demo_store(tmp.path());
    let mut c = tacho(&home);
    c.args(["session", "list", "--json"]);
    let (_, out, _) = run(c);
    let id =
        serde_json::from_str::<serde_json::Value>(out.lines().next().unwrap()).unwrap()["session"]
            .as_str()
            .unwrap()
            .to_string();
    let srv = serve(&home);
    let (status, _, before) = get(srv.port, &format!("/s/{id}"));
    assert_eq!(status, 200);
    assert!(!before.contains("id=\"rolled-back\""), "{before}");
    let mut c = tacho(&home);
    c.args(["session", "rollback", &id, "--yes", "--json"]);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{out}{err}");
    let done: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let rb = done["applied"]["recorded_session"]
        .as_str()
        .unwrap_or_else(|| panic!("no rollback session in {out}"))
        .to_string();
    let (status, _, page) = get(srv.port, &format!("/s/{id}"));
    assert_eq!(status, 200);
    let at = page
        .find("id=\"rolled-back\"")
        .unwrap_or_else(|| panic!("{page}"));
    let notice = &page[at..at + page[at..].find("</div>").unwrap()];
    assert!(
        notice.contains("changes were rolled back")
            && notice.contains(&format!("<a href=\"/s/{rb}\">"))
            && notice.contains("to its first snapshot")
            && notice.contains("1 file(s) restored, 2 file(s) deleted"),
        "{notice}"
    );
    let (status, _, rb_page) = get(srv.port, &format!("/s/{rb}"));
    assert_eq!(status, 200);
    assert!(
        rb_page.contains("id=\"rollback-of\"")
            && rb_page.contains(&format!("<a href=\"/s/{id}\">")),
        "{rb_page}"
    );
    if let Some(chrome) = chromium() {
        let dom = browse(
            &chrome,
            &tmp.path().join("profile"),
            &format!("http://127.0.0.1:{}/s/{id}", srv.port),
            &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("run-report-rolled-back.png"),
        );
        assert!(
            dom.contains("id=\"rolled-back\"") && dom.contains(&rb),
            "{dom}"
        );
    }
}
