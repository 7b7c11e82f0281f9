//! Hermetic CLI snapshot tests: a cleared environment, a scratch store, and stdout,
//! stderr and the exit code snapshotted together. `UPDATE_EXPECT=1 cargo test -p
//! tacho-cli` rewrites the expectations in place after an intended change.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use expect_test::{Expect, expect};

const EXAMPLE_SESSION: &str = "ses_01jdemo8xk4rate1imit0000a";

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sessions/rate-limit.jsonl")
}

struct Env {
    home: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Env {
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// Runs tacho and renders exit code, stdout and stderr, with the scratch store's
    /// path replaced by `$TACHO_HOME`.
    fn run(&self, args: &[&str], stdin: Option<&str>) -> String {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tacho"));
        c.env_clear()
            .env("TACHO_HOME", self.home.path())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
        drop(input);
        let out = child.wait_with_output().unwrap();
        let home = self.home.path().display().to_string();
        let clean = |b: &[u8]| String::from_utf8_lossy(b).replace(&home, "$TACHO_HOME");
        format!(
            "exit: {}\n--- stdout\n{}--- stderr\n{}",
            out.status.code().unwrap_or(-1),
            clean(&out.stdout),
            clean(&out.stderr)
        )
    }

    fn check(&self, args: &[&str], stdin: Option<&str>, expect: Expect) {
        expect.assert_eq(&self.run(args, stdin));
    }

    fn record_example(&self) {
        let ex = example();
        let out = self.run(&["record", ex.to_str().unwrap()], None);
        assert!(out.starts_with("exit: 0"), "{out}");
    }
}

#[test]
fn record_then_list() {
    let env = Env::new();
    env.check(
        &["record", "--session", "ses_x", "-"],
        Some("{\"type\":\"session.start\",\"ts\":\"2026-11-30T08:00:00Z\",\"agent\":\"coder\",\"title\":\"Fix the flaky test\"}\n\n{\"type\":\"tool.call\",\"ts\":1796025601000,\"call_id\":\"c1\",\"tool\":\"read\",\"target\":\"src/lib.rs\"}\n"),
        expect![[r#"
            exit: 0
            --- stdout
            --- stderr
            recorded 2 event(s) in session ses_x (seq 0..=1)
        "#]],
    );
    env.record_example();
    env.check(
        &["session", "list"],
        None,
        expect![[r#"
            exit: 0
            --- stdout
            SESSION                        STARTED               EVENTS  TOOLS FAILED  TOKENS IN/OUT  STATUS          AGENT / TITLE
            ses_01jdemo8xk4rate1imit0000a  2026-11-20 09:14:03       48      9      1   99,380/4,860  completed       architect: Add per-client rate limiting to the public API
            ses_x                          2026-11-30 08:00:00        2      1      0            0/0  running         coder: Fix the flaky test
            --- stderr
        "#]],
    );
    env.check(
        &["session", "list", "--json"],
        None,
        expect![[r#"
            exit: 0
            --- stdout
            {"type":"session","session":"ses_01jdemo8xk4rate1imit0000a","started_unix_ns":1795166043120000000,"last_event_unix_ns":1795166101120000000,"status":"completed","agent":"architect","title":"Add per-client rate limiting to the public API","workspace":"/home/dev/shop-api","parent":null,"events":48,"steps":4,"tool_calls":9,"tool_failures":1,"files_edited":3,"tokens_in":99380,"tokens_out":4860,"started":"2026-11-20T09:14:03.12Z"}
            {"type":"session","session":"ses_x","started_unix_ns":1796025600000000000,"last_event_unix_ns":1796025601000000000,"status":"running","agent":"coder","title":"Fix the flaky test","workspace":null,"parent":null,"events":2,"steps":0,"tool_calls":1,"tool_failures":0,"files_edited":0,"tokens_in":0,"tokens_out":0,"started":"2026-11-30T08:00:00Z"}
            --- stderr
        "#]],
    );
}

#[test]
fn bad_input_is_located_and_records_nothing() {
    let env = Env::new();
    env.check(
        &["record", "--session", "ses_y", "-"],
        Some("{\"type\":\"session.start\"}\n{\"type\":\"tool.call\",\"call_id\":\"c1\"}\n"),
        expect![[r#"
            exit: 2
            --- stdout
            --- stderr
            error: stdin: line 2, column 1: missing field `tool`
            nothing was recorded
        "#]],
    );
    env.check(
        &["record", "-"],
        Some("{\"type\":\"session.start\"}\n"),
        expect![[r#"
            exit: 2
            --- stdout
            --- stderr
            error: stdin: line 1: no session: give the line a `session` field, or pass --session or --new-session
            nothing was recorded
        "#]],
    );
    env.check(
        &["record", "--session", "ses_y", "-"],
        Some("{\"type\":\"step.start\",\"step\":1}\n"),
        expect![[r#"
            exit: 2
            --- stdout
            --- stderr
            error: stdin: line 1: the first event of a session must be session.start, not step.start
            nothing was recorded
        "#]],
    );
    env.check(
        &["record", "--session", "ses_y", "--batch-lines", "1", "-"],
        Some("{\"type\":\"session.start\"}\n{\"type\":\"step.start\",\"step\":1}\n{\"type\":\"step.start\",\"step\":\"two\"}\n"),
        expect![[r#"
            exit: 2
            --- stdout
            --- stderr
            error: stdin: line 3, column 22: field `step`: invalid type: string "two", expected u64
            that batch was not recorded; 2 events of earlier batches were
        "#]],
    );
    env.check(
        &["log", "dump", "ses_nope"],
        None,
        expect![[r#"
            exit: 4
            --- stdout
            --- stderr
            error: no session matches "ses_nope"
        "#]],
    );
}

#[test]
fn log_verify_stats_and_dump() {
    let env = Env::new();
    env.record_example();
    env.check(
        &["log", "verify"],
        None,
        expect![[r#"
            exit: 0
            --- stdout
            session ses_01jdemo8xk4rate1imit0000a head: 48 events, chain ee83ff59a8a214e1a02b69d1826540743d74281332dbec34e8a5b7433ef2d23a
            checked 1 session(s), 1 segment(s), 48 events, 6.7 KiB: every checksum, chain step, sequence number and payload is intact
            store digest: 73efab69e5587c63398d33ecc6e0820d231e6a28cfb5620940a2dc37dbed43a6
            keep the digest elsewhere: the chain detects edits inside the log, a digest kept outside it also detects a rewrite of the whole log
            --- stderr
        "#]],
    );
    env.check(
        &["log", "stats", "--json"],
        None,
        expect![[r#"
            exit: 0
            --- stdout
            {"type":"stats","sessions":1,"segments":1,"sealed_segments":0,"events":48,"batches":1,"bytes":6904,"free_bytes":0,"events_by_kind":{"session.start":1,"session.end":1,"agent.route":1,"llm.request":5,"llm.response":6,"step.start":4,"step.finish":4,"tool.call":9,"tool.result":9,"permission.ask":1,"permission.reply":1,"verification.run":2,"file.edit":4}}
            --- stderr
        "#]],
    );
    let dump = env.run(&["log", "dump", EXAMPLE_SESSION, "--json"], None);
    let lines: Vec<&str> = dump.lines().collect();
    expect![[r#"
        exit: 0
        --- stdout
        {"type":"segment","segment":"$TACHO_HOME/log/streams/ses_01jdemo8xk4rate1imit0000a/00000000000000000000.tseg","format_version":1,"segment_index":0,"first_seq":0,"prev_chain":"0000000000000000000000000000000000000000000000000000000000000000","first_time":"2026-11-20T09:14:03.12Z","bytes":6904}
        {"type":"event","offset":128,"seq":0,"kind":"session.start","kind_version":1,"len":220,"crc":"a9bfbf76","event":{"type":"session.start","session":"ses_01jdemo8xk4rate1imit0000a","ts":"2026-11-20T09:14:03.12Z","agent":"architect","model":"claude-sonnet-4-5","workspace":"/home/dev/shop-api","project":"shop-api","title":"Add per-client rate limiting to the public API","source":"claude-code"},"error":null}"#]]
    .assert_eq(&lines[..4].join("\n"));
    // The last frame of the open segment is the commit of the only batch.
    let stderr_at = lines.iter().position(|l| *l == "--- stderr").unwrap();
    assert!(
        lines[stderr_at - 1].starts_with(
            "{\"type\":\"commit\",\"offset\":6816,\"last_seq\":47,\"first_seq\":0,\"events\":48,"
        ),
        "{dump}"
    );
}

#[test]
fn verify_locates_an_edit_and_fails() {
    let env = Env::new();
    env.record_example();
    let seg = env
        .home
        .path()
        .join("log/streams")
        .join(EXAMPLE_SESSION)
        .join("00000000000000000000.tseg");
    let mut bytes = std::fs::read(&seg).unwrap();
    // Turn "architect" into "brchitect" in the first event's payload and fix up that
    // frame's CRC, as someone quietly editing the log would.
    let at = bytes.windows(9).position(|w| w == b"architect").unwrap();
    bytes[at] = b'b';
    let len = u32::from_le_bytes(bytes[128..132].try_into().unwrap()) as usize;
    let mut crc = Crc32::new();
    crc.update(&bytes[128..132]);
    crc.update(&bytes[136..128 + len]);
    let c = crc.finish();
    bytes[132..136].copy_from_slice(&c.to_le_bytes());
    std::fs::write(&seg, bytes).unwrap();
    env.check(
        &["log", "verify"],
        None,
        expect![[r#"
            exit: 1
            --- stdout
            error: session ses_01jdemo8xk4rate1imit0000a: $TACHO_HOME/log/streams/ses_01jdemo8xk4rate1imit0000a/00000000000000000000.tseg at offset 6816: hash chain broken at the commit frame at offset 6816: stored ee83ff59a8a214e1a02b69d1826540743d74281332dbec34e8a5b7433ef2d23a, computed e78f792886b50fc47da410c93fc981cb75360fe8697e9c17f7e1ee1ae1792e91 (bytes of this batch were changed)
            session ses_01jdemo8xk4rate1imit0000a: 0 events verified before the first error
            checked 1 session(s), 1 segment(s), 0 events, 6.7 KiB: 1 error(s)
            no store digest: the log has errors
            --- stderr
            error: verification failed with 1 error(s)
        "#]],
    );
}

/// CRC-32 (ISO-HDLC), bit by bit: an independent implementation for the test.
struct Crc32(u32);
impl Crc32 {
    fn new() -> Self {
        Crc32(0xffff_ffff)
    }
    fn update(&mut self, data: &[u8]) {
        for &b in data {
            self.0 ^= u32::from(b);
            for _ in 0..8 {
                let mask = (!(self.0 & 1)).wrapping_add(1);
                self.0 = (self.0 >> 1) ^ (0xedb8_8320 & mask);
            }
        }
    }
    fn finish(&self) -> u32 {
        !self.0
    }
}

/// `--new-session` renames every session of the input; a parent recorded in the same
/// input is renamed with it, and a session without a parent keeps none.
#[test]
fn new_session_renames_parents_with_their_children() {
    let env = Env::new();
    let input = concat!(
        "{\"type\":\"session.start\",\"session\":\"p1\",\"ts\":1000,\"title\":\"parent\"}\n",
        "{\"type\":\"session.start\",\"session\":\"c1\",\"ts\":2000,\"parent\":\"p1\",\"title\":\"child\"}\n",
        "{\"type\":\"session.start\",\"session\":\"c2\",\"ts\":3000,\"parent\":\"elsewhere\",\"title\":\"foreign parent\"}\n",
        "{\"type\":\"session.start\",\"ts\":4000,\"title\":\"no id, no parent\"}\n",
    );
    let out = env.run(&["record", "--new-session", "--json", "-"], Some(input));
    assert!(out.starts_with("exit: 0"), "{out}");
    let list = env.run(&["session", "list", "--json"], None);
    let rows: Vec<serde_json::Value> = list
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 4, "{list}");
    let by_title = |t: &str| rows.iter().find(|r| r["title"] == t).unwrap();
    let parent_id = by_title("parent")["session"].as_str().unwrap();
    assert!(parent_id.starts_with("ses_") && parent_id != "p1");
    assert_eq!(by_title("child")["parent"], parent_id);
    assert_eq!(by_title("foreign parent")["parent"], "elsewhere");
    assert_eq!(
        by_title("no id, no parent")["parent"],
        serde_json::Value::Null
    );
    assert_eq!(by_title("parent")["parent"], serde_json::Value::Null);
}
