//! Support for the end-to-end tests: find the `tacho` binary that cargo built, and run
//! it hermetically (cleared environment, a scratch `TACHO_HOME`).

pub mod git;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `tacho` binary of this build. Cargo builds it before any test runs because
/// `tacho-cli` has integration tests; `TACHO_BIN` overrides the lookup.
pub fn tacho_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TACHO_BIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/<test binary> → target/<profile>/tacho
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    let bin = profile_dir.join(format!("tacho{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test --workspace` (which builds it) or set TACHO_BIN",
        bin.display()
    );
    bin
}

/// A `tacho` command with a clean environment and `TACHO_HOME` set to `home`.
pub fn tacho(home: &Path) -> Command {
    let mut c = Command::new(tacho_bin());
    c.env_clear()
        .env("TACHO_HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    c
}

/// Runs a command and returns (exit code, stdout, stderr).
pub fn run(mut c: Command) -> (i32, String, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = c.output().expect("spawn tacho");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// A test that needs a tool `.ci/run` installs and this machine lacks: says it skipped
/// (the caller then returns), except in CI (`CI` set), where a missing tool fails it.
pub fn skip_without(msg: &str) {
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("skipped: {msg}");
}

/// The repository root (for the bundled examples and fixtures).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the repository")
        .to_path_buf()
}

/// The body of the segment-decoder fuzz target (`fuzz/fuzz_targets/segment_decoder.rs`),
/// kept here so that `cargo test` replays the committed corpus and every crash artifact
/// through exactly the same code. It must never panic, whatever the bytes.
pub fn fuzz_segment_decoder(data: &[u8]) {
    use tacho_log_format::{ScanLimits, Scanner, decode_frame, find_commit_after};
    use tacho_schema::EventBody;

    // Segments are read into aligned memory; do the same.
    let mut buf = rkyv::util::AlignedVec::<16>::with_capacity(data.len());
    buf.extend_from_slice(data);
    for verify_chain in [true, false] {
        let mut scan = Scanner::new(&buf, ScanLimits { verify_chain });
        let mut events = 0u64;
        while let Some(batch) = scan.next_batch() {
            for f in batch.events {
                let h = f.header;
                let _ = EventBody::validate(h.kind, h.kind_version, f.payload);
                if let Ok(body) = EventBody::decode(h.kind, h.kind_version, f.payload) {
                    let _ = body.encode();
                }
                events += 1;
            }
        }
        let end = scan.end().expect("a finished scan has an end");
        assert_eq!(scan.event_count(), events);
        if let tacho_log_format::SegmentEnd::Damaged(d) = end {
            assert!(d.valid_len <= buf.len());
            let _ = d.error.to_string();
        }
    }
    // Frames at arbitrary aligned offsets, and the committed-frame search.
    for off in (0..buf.len()).step_by(8).take(256) {
        let _ = decode_frame(&buf, off);
    }
    let _ = find_commit_after(&buf, 0);
}

/// Runs `tacho ARGS` with `input` on stdin; returns (exit code, stdout, stderr).
pub fn run_with_stdin(home: &Path, args: &[&str], input: &str) -> (i32, String, String) {
    let mut c = tacho(home);
    c.args(args);
    run_input(c, input)
}

/// Runs a command with `input` on stdin; returns (exit code, stdout, stderr).
pub fn run_input(mut c: Command, input: &str) -> (i32, String, String) {
    use std::io::Write;
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("spawn tacho");
    if let Some(mut stdin) = child.stdin.take() {
        // A tacho that stops at a bad line stops reading: the rest is not wanted.
        match stdin.write_all(input.as_bytes()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("write stdin: {e}"),
            _ => {}
        }
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("wait for tacho");
    (
        status.code().unwrap_or(-1),
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

/// A workspace whose parity check fails (the value is 41), its plan
/// ([`PARITY_PLAN`] in `plan.md`), and a recorded session working in it: (data
/// directory, workspace).
pub fn parity_workspace(tmp: &Path, session: &str) -> (PathBuf, PathBuf) {
    let home = tmp.join("home");
    let ws = tmp.join("ws");
    std::fs::create_dir_all(ws.join("src")).expect("create src");
    std::fs::create_dir_all(ws.join("checks")).expect("create checks");
    let ws = ws.canonicalize().expect("canonical workspace");
    std::fs::write(ws.join("src/value.txt"), "41\n").expect("write value");
    std::fs::write(
        ws.join("checks/parity.sh"),
        "test \"$(head -n1 src/value.txt)\" = \"42\"\n",
    )
    .expect("write check");
    std::fs::write(ws.join("plan.md"), PARITY_PLAN).expect("write plan");
    let line = format!(
        r#"{{"type":"session.start","session":"{session}","workspace":"{}"}}"#,
        ws.display()
    );
    let (code, _, err) = run_with_stdin(&home, &["record", "--snapshots", "off"], &line);
    assert_eq!(code, 0, "{err}");
    (home, ws)
}

/// The bundled example session (`examples/sessions/rate-limit.jsonl`), as text.
pub fn example_session() -> String {
    std::fs::read_to_string(repo_root().join("examples/sessions/rate-limit.jsonl"))
        .expect("read the bundled example")
}

/// `tacho demo` run into `dir/repo` with its data under `dir/home` (a realistic
/// session with real snapshots); returns the data directory.
pub fn demo_store(dir: &Path) -> PathBuf {
    let home = dir.join("home");
    let mut c = tacho(&home);
    c.args(["demo", "--dir"]).arg(dir.join("repo"));
    let (code, _, err) = run(c);
    assert_eq!(code, 0, "{err}");
    home
}

/// How many events `log dump` shows for a session.
pub fn event_count(home: &Path, session: &str) -> usize {
    let mut c = tacho(home);
    c.args(["log", "dump", session, "--json"]);
    let (_, out, _) = run(c);
    out.lines()
        .filter(|l| l.contains("\"type\":\"event\""))
        .count()
}

/// A goal plan with an assurance contract: one check, `parity`, that passes when the
/// first line of `src/value.txt` is 42 (`sh checks/parity.sh`). Used by the goal and
/// agent tests.
pub const PARITY_PLAN: &str = r#"# Value is the answer
Goal kind: bugfix

## Acceptance criteria
- AC1: src/value.txt holds 42

## Verification plan
Run the parity check.

## Non-goals
- anything else

## Assumed scope
src/

## Assurance contract
```json
{"version": 1, "sourcePaths": ["src", "checks"], "checks": [{"id": "parity", "acceptanceIds": ["AC1"], "command": "sh checks/parity.sh", "purpose": "the value is right", "environment": "the workspace, no services"}]}
```
"#;

/// The raw HTTP answer to `GET` of the run-report page of `session` (a `tacho
/// run-report SESSION --port 0` started for it, stopped after the one request).
pub fn run_report_page(home: &Path, session: &str) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut c = tacho(home);
    c.args(["run-report", session, "--port", "0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = c.spawn().expect("start tacho run-report");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read its first line");
    // "serving http://127.0.0.1:PORT/s/ID ..."
    let (port, path) = line
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.split_once('/'))
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    let port: u16 = port.parse().expect("a port");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("read the answer");
    let _ = child.kill();
    let _ = child.wait();
    raw
}

/// Speaks MCP to `tacho mcp` over stdio (JSON-RPC, one message a line), from `ws`:
/// initializes, then makes each tool call (`{name, arguments}`) in turn and returns
/// each answer's `result`.
pub fn mcp_calls(home: &Path, ws: &Path, calls: &[serde_json::Value]) -> Vec<serde_json::Value> {
    use std::io::{BufRead, Write};
    use std::process::Stdio;
    let mut c = tacho(home);
    c.current_dir(ws)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = c.spawn().expect("start tacho mcp");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut send = |v: serde_json::Value| writeln!(stdin, "{v}").expect("send");
    let mut answer = |id: u64| loop {
        let line = lines.next().expect("an answer").expect("read an answer");
        let v: serde_json::Value = serde_json::from_str(&line).expect("JSON-RPC");
        if v["id"] == id {
            return v;
        }
    };
    send(serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "tacho-tests", "version": "0"},
        },
    }));
    assert_eq!(answer(0)["result"]["serverInfo"]["name"], "tacho");
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let mut results = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let id = i as u64 + 1;
        send(serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": call,
        }));
        results.push(answer(id)["result"].clone());
    }
    drop(stdin);
    let _ = child.wait();
    results
}

/// Writes `data` to `rel` under `dir`, making its directories.
pub fn write_file(dir: &Path, rel: &str, data: &str) {
    let p = dir.join(rel);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("making a test file's directory");
    }
    std::fs::write(p, data).expect("writing a test file");
}

/// Waits past the racy window of what was just written (files, Git's index): file
/// times are trusted only once they are older than a scan by 100 ms.
pub fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(150));
}
