//! `tacho run-report`: the local web report as a whole process, over raw HTTP (so
//! that the `Host` header and paths can be anything), and in headless Chromium with
//! every non-loopback name unresolvable. Chromium comes from Debian's `chromium`
//! package (`.ci/run` installs it); without it the browser test says so and passes,
//! except in CI (`CI` set), where it fails.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

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
    let mut c = tacho(home);
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
