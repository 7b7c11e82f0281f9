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

    /// Turns "architect" into "brchitect" in the example session's first event and
    /// fixes up that frame's CRC, as someone quietly editing the log would. Returns the
    /// segment and its bytes as forged.
    fn forge_first_event(&self) -> (PathBuf, Vec<u8>) {
        let seg = self
            .home
            .path()
            .join("log/streams")
            .join(EXAMPLE_SESSION)
            .join("00000000000000000000.tseg");
        let mut bytes = std::fs::read(&seg).unwrap();
        let at = bytes.windows(9).position(|w| w == b"architect").unwrap();
        bytes[at] = b'b';
        let len = u32::from_le_bytes(bytes[128..132].try_into().unwrap()) as usize;
        let mut crc = Crc32::new();
        crc.update(&bytes[128..132]);
        crc.update(&bytes[136..128 + len]);
        let c = crc.finish();
        bytes[132..136].copy_from_slice(&c.to_le_bytes());
        std::fs::write(&seg, &bytes).unwrap();
        (seg, bytes)
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
            SESSION                       STARTED               EVENTS  TOOLS FAILED  TOKENS IN/OUT  RISK          STATUS          AGENT / TITLE
            ses_x                         2026-11-30 08:00:00        2      1      0            0/0  LOW 5         running         coder: Fix the flaky test
            ses_01jdemo8xk4rate1imit0000a 2026-11-20 09:14:03       48      9      1   99,380/4,860  MEDIUM 20     completed       architect: Add per-client rate limiting to the public API
            --- stderr
        "#]],
    );
    env.check(
        &["session", "list", "--json"],
        None,
        expect![[r#"
            exit: 0
            --- stdout
            {"type":"session","session":"ses_x","started_unix_ns":1796025600000000000,"started":"2026-11-30T08:00:00Z","last_event_unix_ns":1796025601000000000,"last_event":"2026-11-30T08:00:01Z","status":"running","agent":"coder","title":"Fix the flaky test","workspace":null,"project":null,"parent":null,"events":2,"steps":1,"tool_calls":1,"tool_failures":0,"files_edited":0,"tokens_in":0,"tokens_out":0,"risk_score":5,"risk_level":"LOW"}
            {"type":"session","session":"ses_01jdemo8xk4rate1imit0000a","started_unix_ns":1795166043120000000,"started":"2026-11-20T09:14:03.12Z","last_event_unix_ns":1795166101120000000,"last_event":"2026-11-20T09:15:01.12Z","status":"completed","agent":"architect","title":"Add per-client rate limiting to the public API","workspace":"/home/dev/shop-api","project":"shop-api","parent":null,"events":48,"steps":4,"tool_calls":9,"tool_failures":1,"files_edited":3,"tokens_in":99380,"tokens_out":4860,"risk_score":20,"risk_level":"MEDIUM"}
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
            session ses_01jdemo8xk4rate1imit0000a head: 48 events, chain 5bef8f2828c7149cbcdc5012c11d8793f38cbca528dfe1dae35d098d4e37dcd5
            session ses_01jdemo8xk4rate1imit0000a: unsigned
            checked 1 session(s), 1 segment(s), 48 events, 6.8 KiB: every checksum, chain step, sequence number and payload is intact
            store digest: 1a1939f9e212ffaa4747673414e3cd9b332faab3c56c0f42de6b67ff58868cc4
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
            {"type":"stats","sessions":1,"segments":1,"sealed_segments":0,"events":48,"batches":1,"bytes":6928,"free_bytes":0,"events_by_kind":{"session.start":1,"session.end":1,"agent.route":1,"llm.request":5,"llm.response":6,"step.start":4,"step.finish":4,"tool.call":9,"tool.result":9,"permission.ask":1,"permission.reply":1,"verification.run":2,"file.edit":4},"snapshot_store":null}
            --- stderr
        "#]],
    );
    let dump = env.run(&["log", "dump", EXAMPLE_SESSION, "--json"], None);
    let lines: Vec<&str> = dump.lines().collect();
    expect![[r#"
        exit: 0
        --- stdout
        {"type":"segment","segment":"$TACHO_HOME/log/streams/ses_01jdemo8xk4rate1imit0000a/00000000000000000000.tseg","pack_offset":null,"format_version":1,"segment_index":0,"first_seq":0,"prev_chain":"0000000000000000000000000000000000000000000000000000000000000000","first_time_unix_ns":1795166043120000000,"first_time":"2026-11-20T09:14:03.12Z","bytes":6928}
        {"type":"event","offset":128,"seq":0,"kind":"session.start","kind_version":1,"len":244,"crc":"bfa123e8","event":{"type":"session.start","session":"ses_01jdemo8xk4rate1imit0000a","ts":"2026-11-20T09:14:03.12Z","agent":"architect","model":"claude-sonnet-4-5","workspace":"/home/dev/shop-api","project":"shop-api","title":"Add per-client rate limiting to the public API","source":"tacho-record (it said: claude-code)"},"error":null}"#]]
    .assert_eq(&lines[..4].join("\n"));
    // The last frame of the open segment is the commit of the only batch.
    let stderr_at = lines.iter().position(|l| *l == "--- stderr").unwrap();
    assert!(
        lines[stderr_at - 1].starts_with(
            "{\"type\":\"commit\",\"offset\":6840,\"last_seq\":47,\"first_seq\":0,\"events\":48,"
        ),
        "{dump}"
    );
}

#[test]
fn verify_locates_an_edit_and_fails() {
    let env = Env::new();
    env.record_example();
    env.forge_first_event();
    env.check(
        &["log", "verify"],
        None,
        expect![[r#"
            exit: 1
            --- stdout
            error: session ses_01jdemo8xk4rate1imit0000a: $TACHO_HOME/log/streams/ses_01jdemo8xk4rate1imit0000a/00000000000000000000.tseg at offset 6840: hash chain broken at the commit frame at offset 6840: stored 5bef8f2828c7149cbcdc5012c11d8793f38cbca528dfe1dae35d098d4e37dcd5, computed 7f59e63375a8bd44e9217c5ce160317b2f63c37425348018728628223c210b6f (bytes of this batch were changed)
            session ses_01jdemo8xk4rate1imit0000a: 0 events verified before the first error
            session ses_01jdemo8xk4rate1imit0000a: unsigned
            checked 1 session(s), 1 segment(s), 0 events, 6.8 KiB: 1 error(s)
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

fn fixture_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/store-v1/sources")
        .join(name)
}

/// Every format of `graph` and `risk` on the bundled example session, by id prefix.
#[test]
fn graph_and_risk_formats_on_the_example_session() {
    let env = Env::new();
    env.record_example();
    env.check(&["graph", "ses_01jdemo"], None, expect![[r#"
        exit: 0
        --- stdout
        ## Session ses_01jdemo8xk4rate1imit0000a
        Add per-client rate limiting to the public API
        Duration: 58s | Risk: MEDIUM (20/100) | Tokens: 99,380 in / 4,860 out (cache read 85,129, cache write 8,627)
        Agents: architect, coder
        Route: architect → coder (Plan ready: add a token-bucket middleware in src/middleware/rate-limit.ts and mount it before the ro…)
        ### Step 1 (8s) | tokens: 12263/587
        - read: src/api.ts → ok (5ms)
        - grep: rateLimit → ok (12ms)
        - read: src/routes.ts → ok (7ms)
        ### Step 2 (7s) | tokens: 18410/2231
        - write: src/middleware/rate-limit.ts → ok (20ms)
        - edit: src/api.ts → ok (14ms)
        - write: test/rate-limit.test.ts → ok (11ms)
        ### Step 3 (11s) | tokens: 21544/312
        - bash: npm test → error (6.4s): 1 test failed
        - verification: npm test → failed
        ### Step 4 (6s) | tokens: 23112/1040
        - edit: src/middleware/rate-limit.ts → ok (12ms)
        - bash: npm test → ok (6.3s)
        - verification: npm test → passed
        ### Files changed
        - src/api.ts (modified, +2 -1)
        - src/middleware/rate-limit.ts (created, +55)
        - test/rate-limit.test.ts (created, +61)
        Ended: completed
        --- stderr
    "#]]);
    env.check(
        &["graph", "ses_01jdemo", "--format", "mermaid"],
        None,
        expect![[r#"
        exit: 0
        --- stdout
        flowchart TD
            session["Session ses_01jdemo8xk4rate1imit0000a<br/>58s · MEDIUM 20/100"]
            s0["Step 1 (8s) · architect<br/>12263/587 tokens"]
            session --> s0
            s0t0["read: src/api.ts<br/>ok · 5ms"]
            s0 --> s0t0
            s0t1["grep: rateLimit<br/>ok · 12ms"]
            s0 --> s0t1
            s0t2["read: src/routes.ts<br/>ok · 7ms"]
            s0 --> s0t2
            s1["Step 2 (7s) · coder<br/>18410/2231 tokens"]
            s0 --> s1
            s1t0["write: src/middleware/rate-limit.ts<br/>ok · 20ms"]
            s1 --> s1t0
            s1t1["edit: src/api.ts<br/>ok · 14ms"]
            s1 --> s1t1
            s1t2["write: test/rate-limit.test.ts<br/>ok · 11ms"]
            s1 --> s1t2
            s2["Step 3 (11s) · coder<br/>21544/312 tokens"]
            s1 --> s2
            s2t0["bash: npm test<br/>error · 6.4s"]
            s2 --> s2t0
            s3["Step 4 (6s) · coder<br/>23112/1040 tokens"]
            s2 --> s3
            s3t0["edit: src/middleware/rate-limit.ts<br/>ok · 12ms"]
            s3 --> s3t0
            s3t1["bash: npm test<br/>ok · 6.3s"]
            s3 --> s3t1
            classDef failed fill:#fdd,stroke:#c00,color:#600
            class s2t0 failed
        --- stderr
    "#]],
    );
    env.check(
        &["graph", "ses_01jdemo", "--format", "topology"],
        None,
        expect![[r#"
        exit: 0
        --- stdout
        Session ses_01jdemo8xk4rate1imit0000a

        Agents
          architect: 1 step(s), 3 tool call(s)
          coder: 3 step(s), 6 tool call(s)

        Routes
          architect → coder

        Critical path (steps in order; in each, the longest tool call)
          Step 1 (8s)  13.8%  architect: Survey the request path
              └─ grep: rateLimit → ok (12ms)
          Step 2 (7s)  13.0%  coder: Write the middleware
              └─ write: src/middleware/rate-limit.ts → ok (20ms)
          Step 3 (11s)  19.3%  coder: Run the test suite
              └─ bash: npm test → error (6.4s): 1 test failed
          Step 4 (6s)  10.9%  coder: Fix the bucket key and rerun
              └─ bash: npm test → ok (6.3s)

        Path: grep rateLimit → write src/middleware/rate-limit.ts → bash npm test → bash npm test
        --- stderr
    "#]],
    );
    env.check(
        &["graph", "ses_01jdemo", "--format", "timeline"],
        None,
        expect![[r#"
        exit: 0
        --- stdout
        +  0:00.000 session start (2026-11-20T09:14:03.12Z)
        +  0:03.200 Step 1 (8s) start [architect]
        +  0:03.210   read: src/api.ts → ok (5ms)
        +  0:03.230   grep: rateLimit → ok (12ms)
        +  0:03.250   read: src/routes.ts → ok (7ms)
        +  0:11.230 route architect → coder
        +  0:19.840 Step 2 (7s) start [coder]
        +  0:19.850   write: src/middleware/rate-limit.ts → ok (20ms)
        +  0:19.890   edit: src/api.ts → ok (14ms)
        +  0:19.920   write: test/rate-limit.test.ts → ok (11ms)
        +  0:30.120 Step 3 (11s) start [coder]
        +  0:34.910   bash: npm test → error (6.4s): 1 test failed
        +  0:41.290 verification npm test → failed
        +  0:47.030 Step 4 (6s) start [coder]
        +  0:47.040   edit: src/middleware/rate-limit.ts → ok (12ms)
        +  0:47.070   bash: npm test → ok (6.3s)
        +  0:53.370 verification npm test → passed
        +  0:58.000 session end: completed
        --- stderr
    "#]],
    );
    env.check(&["risk", "ses_01jdemo", "--explain"], None, expect![[r#"
        exit: 0
        --- stdout
        Risk: MEDIUM (20/100) | confidence: high | readiness: ready
        Session ses_01jdemo8xk4rate1imit0000a: 3 file(s) changed, 123 line(s), 1 failed tool call(s), verified after the last edit: yes

        Factors:
          +7   files_changed: 3 file(s) changed: src/api.ts, src/middleware/rate-limit.ts, test/rate-limit.test.ts
                mitigation: Review every changed file; split unrelated changes into separate pull requests.
          +4   tool_failures: 1 failed tool call(s): step 3 bash npm test
                mitigation: Check that every failure was resolved, not worked around.
          +5   no_diff_snapshot: no file snapshot was recorded, so the diff cannot be checked against the edits the agent reported
                mitigation: Record snapshots (adapters take them at step boundaries) so the real diff can be reviewed.
          +4   api_surface: 1 file(s) of the API surface changed: src/api.ts
                mitigation: Check callers and compatibility; document the change.

        The score is a review aid, not a probability and not a statement that the code is safe: a LOW score on unverified changes still means unverified.
        --- stderr
    "#]]);
    env.check(&["risk", "ses_01jdemo"], None, expect![[r#"
        exit: 0
        --- stdout
        Risk: MEDIUM (20/100) | confidence: high | readiness: ready
        Session ses_01jdemo8xk4rate1imit0000a: 3 file(s) changed, 123 line(s), 1 failed tool call(s), verified after the last edit: yes
        Factors: files_changed +7, tool_failures +4, no_diff_snapshot +5, api_surface +4 (--explain for evidence and mitigations)

        The score is a review aid, not a probability and not a statement that the code is safe: a LOW score on unverified changes still means unverified.
        --- stderr
    "#]]);
    let json = env.run(&["graph", "ses_01jdemo", "--format", "json"], None);
    let line = json.lines().find(|l| l.starts_with('{')).unwrap();
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["schema"], "tacho.graph.v1");
    assert_eq!(v["tokens"]["in"], 99380);
    assert_eq!(v["steps"].as_array().unwrap().len(), 4);
    assert_eq!(v["steps"][2]["tools"][0]["status"], "error");
    assert_eq!(v["risk"]["level"], "MEDIUM");
    let risk = env.run(&["risk", "ses_01jdemo", "--json"], None);
    let line = risk.lines().find(|l| l.starts_with('{')).unwrap();
    let r: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(r["score"], v["risk"]["score"]);
    assert!(
        r["disclaimer"]
            .as_str()
            .unwrap()
            .contains("still means unverified")
    );
}

/// The fixture session of every kind: implicit steps, repeated usage, errors,
/// permissions, renames and a budget-limited end.
#[test]
fn graph_and_risk_on_the_session_of_every_kind() {
    let env = Env::new();
    let src = fixture_source("all-kinds.jsonl");
    let out = env.run(&["record", src.to_str().unwrap()], None);
    assert!(out.starts_with("exit: 0"), "{out}");
    env.check(&["graph", "ses_fixture"], None, expect![[r#"
        exit: 0
        --- stdout
        ## Session ses_fixture_all_kinds
        Every kind — 全部
        Parent: ses_parent_1
        Duration: 15s | Risk: HIGH (50/100) | Tokens: 78,000 in / 2,886 out (cache read 39,000, cache write 78)
        Agents: planner, builder, reviewer
        Route: → builder
        Route: builder → reviewer (review)
        ### Step 1 (959ms) | tokens: 1000/37
        - shell: cargo test → error (11ms): failure 1
        - verification: cargo test --workspace → failed
        ### Step 2 (959ms) | tokens: 2000/74
        - shell: cargo test → denied (22ms): failure 2
        - verification: cargo test --workspace → error
        ### Step 3 (1s) | tokens: 3000/111
        - shell: cargo test → cancelled (33ms): failure 3
        - verification: cargo test --workspace → skipped
        ### Step 4 (1s) | tokens: 4000/148
        - shell: cargo test → timeout (44ms): failure 4
        - verification: cargo test --workspace → passed
        ### Step 5 (959ms) | tokens: 5000/185
        - shell: cargo test → ok (55ms)
        - verification: cargo test --workspace → failed
        ### Step 6 (1s) | tokens: 6000/222
        - shell: cargo test → error (66ms): failure 6
        - verification: cargo test --workspace → error
        ### Step 7 (1s) | tokens: 7000/259
        - shell: cargo test → denied (77ms): failure 7
        - verification: cargo test --workspace → skipped
        - error: rate limited by provider
        ### Step 8 (1s) | tokens: 8000/296
        - shell: cargo test → cancelled (88ms): failure 8
        - verification: cargo test --workspace → passed
        ### Step 9 (1s) | tokens: 9000/333
        - shell: cargo test → timeout (99ms): failure 9
        - verification: cargo test --workspace → failed
        ### Step 10 (959ms) | tokens: 10000/370
        - shell: cargo test → ok (110ms)
        - verification: cargo test --workspace → error
        ### Step 11 (959ms) | tokens: 11000/407
        - shell: cargo test → error (121ms): failure 11
        - verification: cargo test --workspace → skipped
        ### Step 12 (1s) | tokens: 12000/444
        - shell: cargo test → denied (132ms): failure 12
        - verification: cargo test --workspace → passed
        ### Files changed
        - src/m1.rs (modified, +1 -0)
        - src/m10.rs (deleted, +10 -5)
        - src/m11.rs (renamed, +11 -5)
        - src/m12.rs (created, +6)
        - src/m2.rs (deleted, +2 -1)
        - src/m3.rs (renamed, +3 -1)
        - src/m4.rs (created, +2)
        - src/m5.rs (modified, +5 -2)
        - src/m6.rs (deleted, +6 -3)
        - src/m7.rs (renamed, +7 -3)
        - src/m8.rs (created, +4)
        - src/m9.rs (modified, +9 -4)
        Ended: budget_limited
        --- stderr
    "#]]);
    env.check(&["risk", "ses_fixture", "--explain"], None, expect![[r#"
        exit: 0
        --- stdout
        Risk: HIGH (50/100) | confidence: high | readiness: needs review
        Session ses_fixture_all_kinds: 12 file(s) changed, 114 line(s), 10 failed tool call(s), verified after the last edit: yes

        Factors:
          +20  files_changed: 12 file(s) changed: src/m1.rs, src/m10.rs, src/m11.rs, src/m12.rs, src/m2.rs, ...
                mitigation: Review every changed file; split unrelated changes into separate pull requests.
          +20  tool_failures: 10 failed tool call(s): step 1 shell cargo test; step 2 shell cargo test; step 3 shell cargo test
                mitigation: Check that every failure was resolved, not worked around.
          +5   no_diff_snapshot: no file snapshot was recorded, so the diff cannot be checked against the edits the agent reported
                mitigation: Record snapshots (adapters take them at step boundaries) so the real diff can be reviewed.
          +5   run_ending: the session ran out of budget
                mitigation: Treat the work as unfinished until it is completed and verified.

        The score is a review aid, not a probability and not a statement that the code is safe: a LOW score on unverified changes still means unverified.
        --- stderr
    "#]]);
}

/// `tacho demo` makes a real sample repository, records the session into the default
/// store (here `TACHO_HOME`), applies the agent's edits, and verifies the record.
#[test]
fn demo_records_a_verified_session_and_edits_a_real_repository() {
    let env = Env::new();
    let repo = env.home.path().join("demo-repo");
    let out = env.run(&["demo", "--dir", repo.to_str().unwrap()], None);
    assert!(out.starts_with("exit: 0"), "{out}");
    for section in [
        "## Session ses_",
        "### Step 4",
        "## Risk",
        "Factors:",
        "still means unverified",
        "## Replay verification",
        "Result: the record is intact and consistent",
    ] {
        assert!(out.contains(section), "missing {section:?} in {out}");
    }
    let api = std::fs::read_to_string(repo.join("src/api.ts")).unwrap();
    assert!(api.contains("rateLimit({ perMinute: 120 })"), "{api}");
    let mw = std::fs::read_to_string(repo.join("src/middleware/rate-limit.ts")).unwrap();
    assert!(
        mw.contains("const key = clientId(req);"),
        "the fix of step 4 is applied: {mw}"
    );
    assert!(repo.join("package.json").is_file());
    let list = env.run(&["session", "list", "--json"], None);
    assert_eq!(
        list.lines().filter(|l| l.starts_with('{')).count(),
        1,
        "{list}"
    );
    assert!(list.contains("\"status\":\"completed\""), "{list}");
    assert!(env.run(&["log", "verify"], None).starts_with("exit: 0"));
    // A second run refuses a directory that is not empty.
    let again = env.run(&["demo", "--dir", repo.to_str().unwrap()], None);
    assert!(again.starts_with("exit: 2"), "{again}");
}

#[test]
fn replay_modes() {
    let env = Env::new();
    env.record_example();
    env.check(
        &["session", "replay", "ses_01jdemo", "--mode", "verify"],
        None,
        expect![[r#"
            exit: 0
            --- stdout
            Replay verification of session ses_01jdemo8xk4rate1imit0000a
              checksums, hash chain, sequence numbers: ok (48 events in 1 segment(s))
              tool results paired with their calls: ok (all 9 results checked, none skipped)
              steps balanced, one start, nothing after the end: ok
              stored projections: none stored, so none to compare with a rebuild
              head: 48 events, chain 5bef8f2828c7149cbcdc5012c11d8793f38cbca528dfe1dae35d098d4e37dcd5
              last event: 2026-11-20T09:15:01.12Z
            Result: the record is intact and consistent
            --- stderr
        "#]],
    );
    let summary = env.run(
        &["session", "replay", "ses_01jdemo", "--mode", "summary"],
        None,
    );
    expect![[r#"
        exit: 0
        --- stdout
        #0     +  0:00.000 session.start     architect: Add per-client rate limiting to the public API
        #1     +  0:00.040 llm.request       req_01 claude-sonnet-4-5
        #2     +  0:03.190 llm.response      req_01 12263/587 tokens in 3150ms
        #3     +  0:03.200 step.start        step 1: Survey the request path
        #4     +  0:03.210 tool.call         toolu_01 read src/api.ts
        #5     +  0:03.215 tool.result       toolu_01 ok 5ms"#]].assert_eq(&summary.lines().take(8).collect::<Vec<_>>().join("\n"));
    let rec = env.run(
        &[
            "session",
            "replay",
            "ses_01jdemo",
            "--mode",
            "reconstruct",
            "--json",
        ],
        None,
    );
    let steps: Vec<serde_json::Value> = rec
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(steps.len(), 5, "before the first step, then steps 1 to 4");
    let total: usize = steps
        .iter()
        .map(|s| s["events"].as_array().unwrap().len())
        .sum();
    assert_eq!(total, 48, "every event once");
    // Execute: per step, the calls to expect with inputs and recorded results; usage
    // attributed as in the graph.
    let exec = env.run(
        &["session", "replay", "ses_01jdemo", "--mode", "execute"],
        None,
    );
    let records: Vec<serde_json::Value> = exec
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // A header (what to start from), the steps, an end record (how the run ended).
    assert_eq!(records.len(), 6, "{exec}");
    let (header, end) = (&records[0], &records[5]);
    assert_eq!(header["type"], "expect_session");
    assert_eq!(header["agent"], "architect");
    assert_eq!(header["model"], "claude-sonnet-4-5");
    assert_eq!(header["steps"], 4);
    assert_eq!(end["type"], "expect_end");
    assert_eq!(end["end_reason"], "completed");
    assert_eq!(end["tool_calls"], 9);
    let steps = &records[1..5];
    assert!(steps.iter().all(|s| s["type"] == "expect_step"));
    assert_eq!(steps[0]["tokens_in"], 12263);
    assert_eq!(steps[2]["tool_calls"][0]["input"]["command"], "npm test");
    assert_eq!(steps[2]["tool_calls"][0]["expected"]["status"], "error");
    assert_eq!(steps[3]["tool_calls"][1]["expected"]["exit_code"], 0);
    // A record whose events do not pair up fails verification, each finding located.
    let bad = concat!(
        "{\"type\":\"session.start\",\"ts\":1000}\n",
        "{\"type\":\"step.start\",\"ts\":1001,\"step\":1}\n",
        "{\"type\":\"tool.call\",\"ts\":1002,\"call_id\":\"a\",\"tool\":\"read\"}\n",
        "{\"type\":\"tool.result\",\"ts\":1003,\"call_id\":\"ghost\",\"status\":\"ok\"}\n",
        "{\"type\":\"step.finish\",\"ts\":1004,\"step\":2}\n",
        "{\"type\":\"session.end\",\"ts\":1005,\"reason\":\"error\"}\n",
    );
    assert!(
        env.run(&["record", "--session", "ses_bad", "-"], Some(bad))
            .starts_with("exit: 0")
    );
    env.check(
        &["session", "replay", "ses_bad", "--mode", "verify"],
        None,
        expect![[r#"
            exit: 1
            --- stdout
            finding: event 3: tool result for call ghost that was never made
            finding: event 4: step 2 finishes, but the open step is 1 (started at event 1)
            Replay verification of session ses_bad
              checksums, hash chain, sequence numbers: ok (6 events in 1 segment(s))
              tool results paired with their calls: FAILED (all 1 results checked, none skipped)
              interrupted: call a (read) at event 2 has no result
              steps balanced, one start, nothing after the end: FAILED
              stored projections: none stored, so none to compare with a rebuild
              head: 6 events, chain 9a08543a6cb63d9e633e40ea8f903358e4af2034a6b323e663d7649845bb3a00
              last event: 1970-01-01T00:00:01.005Z
            Result: 2 finding(s)
            --- stderr
            error: replay verification of session ses_bad failed with 2 finding(s)
        "#]],
    );
}

#[test]
fn compare_two_runs() {
    let env = Env::new();
    env.record_example();
    let src = fixture_source("all-kinds.jsonl");
    assert!(
        env.run(&["record", src.to_str().unwrap()], None)
            .starts_with("exit: 0")
    );
    env.check(
        &["session", "compare", "ses_01jdemo", "ses_fixture", "--deep"],
        None,
        expect![[r#"
            exit: 0
            --- stdout
            Comparing A = ses_01jdemo8xk4rate1imit0000a with B = ses_fixture_all_kinds

            Risk Comparison
            ----------------------------------------
            Score: 20 → 50 (+30) ↑
            Level: MEDIUM → HIGH
            Files: 3 → 12
            Failures: 1 → 10

            Run
            ----------------------------------------
            Steps: 4 → 12
            Tool calls: 9 → 12
            Tokens: 99,380 in / 4,860 out → 78,000 in / 2,886 out
            Duration: 58s → 15s

            Files changed
            ----------------------------------------
            In both: 0
            Only in A: src/api.ts, src/middleware/rate-limit.ts, test/rate-limit.test.ts
            Only in B: src/m1.rs, src/m10.rs, src/m11.rs, src/m12.rs, src/m2.rs, src/m3.rs, src/m4.rs, src/m5.rs, src/m6.rs, src/m7.rs, src/m8.rs, src/m9.rs

            Decision path
            ----------------------------------------
            A: architect → coder
               tools: read → grep → read → write → edit → write → bash → edit → bash
            B: → builder, builder → reviewer
               tools: shell×12

            Events by type
            ----------------------------------------
            agent.route             1 → 2
            error                   0 → 2
            file.edit               4 → 12
            llm.request             5 → 12
            llm.response            6 → 15
            permission.ask          1 → 4
            permission.reply        1 → 4
            session.end             1 → 1
            session.start           1 → 1
            step.finish             4 → 12
            step.start              4 → 12
            tool.call               9 → 12
            tool.result             9 → 12
            verification.run        2 → 12

            Step alignment (by tools and targets)
            ----------------------------------------
            First divergence: B step 1 has no counterpart in A (shell); 16 divergence(s) in all
              ≠ B step 1 has no counterpart in A (shell)
              ≠ B step 2 has no counterpart in A (shell)
              ≠ B step 3 has no counterpart in A (shell)
              ≠ B step 4 has no counterpart in A (shell)
              ≠ B step 5 has no counterpart in A (shell)
              ≠ B step 6 has no counterpart in A (shell)
              ≠ B step 7 has no counterpart in A (shell)
              ≠ B step 8 has no counterpart in A (shell)
              ≠ B step 9 has no counterpart in A (shell)
              ≠ B step 10 has no counterpart in A (shell)
              ≠ B step 11 has no counterpart in A (shell)
              ≠ B step 12 has no counterpart in A (shell)
              ≠ A step 1 has no counterpart in B (read → grep → read)
              ≠ A step 2 has no counterpart in B (write → edit → write)
              ≠ A step 3 has no counterpart in B (bash)
              ≠ A step 4 has no counterpart in B (edit → bash)
            --- stderr
        "#]],
    );
    // A run compared with a copy of itself does not diverge.
    let ex = example();
    let copy = env.run(
        &["record", "--new-session", "--json", ex.to_str().unwrap()],
        None,
    );
    let id = copy
        .lines()
        .find(|l| l.starts_with('{'))
        .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .unwrap()["session"]
        .as_str()
        .unwrap()
        .to_string();
    let same = env.run(
        &["session", "compare", "ses_01jdemo", &id, "--deep", "--json"],
        None,
    );
    let v: serde_json::Value =
        serde_json::from_str(same.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
    let pairs = v["alignment"].as_array().unwrap();
    assert_eq!(pairs.len(), 4);
    assert!(pairs.iter().all(|p| p["kind"] == "same"), "{same}");
    assert_eq!(v["a"]["score"], v["b"]["score"]);
}

#[test]
fn session_show_and_list_filters() {
    let env = Env::new();
    env.record_example();
    let src = fixture_source("all-kinds.jsonl");
    assert!(
        env.run(&["record", src.to_str().unwrap()], None)
            .starts_with("exit: 0")
    );
    env.check(
        &["session", "show", "ses_01jdemo"],
        None,
        expect![[r#"
            exit: 0
            --- stdout
            Session   ses_01jdemo8xk4rate1imit0000a
            Title     Add per-client rate limiting to the public API
            Agents    architect, coder
            Workspace /home/dev/shop-api
            Project   shop-api
            Signature unsigned
            Started   2026-11-20T09:14:03.12Z
            Status    completed after 58s
            Activity  48 events, 4 steps, 9 tool calls (1 failed), 5 model calls
            Tokens    99,380 in / 4,860 out, cache read 85,129, cache write 8,627
            Files     3 changed
            Risk      MEDIUM (20/100), ready
            Log       1 segment(s)
            --- stderr
        "#]],
    );
    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["session", "list", "--json"];
        all.extend_from_slice(args);
        env.run(&all, None)
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["session"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(ids(&[]).len(), 2);
    assert_eq!(ids(&["--risk", "high"]), vec!["ses_fixture_all_kinds"]);
    assert_eq!(ids(&["--risk", "LOW"]).len(), 2);
    assert_eq!(
        ids(&["--since", "2026-11-25"]),
        vec!["ses_fixture_all_kinds"]
    );
    assert_eq!(
        ids(&["--since", "2026-11-20T09:00:00Z", "--project", "shop-api"]),
        vec!["ses_01jdemo8xk4rate1imit0000a"]
    );
    assert!(ids(&["--project", "nope"]).is_empty());
    env.check(
        &["session", "list", "--since", "yesterday"],
        None,
        expect![[r#"
        exit: 2
        --- stdout
        --- stderr
        error: --since "yesterday" is not a date (2026-08-01), an RFC 3339 time or an age (30m, 12h, 7d)
    "#]],
    );
    env.check(
        &["session", "list", "--risk", "severe"],
        None,
        expect![[r#"
        exit: 2
        --- stdout
        --- stderr
        error: --risk "severe" is not one of low, medium, high, critical
    "#]],
    );
    env.check(
        &["session", "show", "ses_"],
        None,
        expect![[r#"
        exit: 4
        --- stdout
        --- stderr
        error: "ses_" matches 2 sessions: ses_01jdemo8xk4rate1imit0000a, ses_fixture_all_kinds
    "#]],
    );
}

/// What CI runs on a pull request: a package exported on one machine verifies on
/// another, with no store there; a changed byte fails it.
#[test]
fn exported_packages_verify_without_the_store() {
    let env = Env::new();
    env.record_example();
    // Another machine: its own empty data directory, where the package is copied.
    let elsewhere = Env::new();
    let pkg = elsewhere.home.path().join("session.tacho");
    let out = env.run(
        &[
            "session",
            "replay",
            "ses_01jdemo",
            "--mode",
            "export",
            "--output",
            pkg.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.starts_with("exit: 0"), "{out}");
    elsewhere.check(
        &[
            "session",
            "replay",
            "--mode",
            "verify",
            "--package",
            pkg.to_str().unwrap(),
        ],
        None,
        expect![[r#"
            exit: 0
            --- stdout
            Package $TACHO_HOME/session.tacho: digest ok
            Replay verification of session ses_01jdemo8xk4rate1imit0000a
              checksums, hash chain, sequence numbers: ok (48 events in 1 segment(s))
              tool results paired with their calls: ok (all 9 results checked, none skipped)
              steps balanced, one start, nothing after the end: ok
              stored projections: none stored, so none to compare with a rebuild
              head: 48 events, chain 5bef8f2828c7149cbcdc5012c11d8793f38cbca528dfe1dae35d098d4e37dcd5
              last event: 2026-11-20T09:15:01.12Z
            Result: the record is intact and consistent
            --- stderr
        "#]],
    );
    let mut bytes = std::fs::read(&pkg).unwrap();
    bytes[500] ^= 0x20;
    std::fs::write(&pkg, bytes).unwrap();
    let bad = elsewhere.run(
        &[
            "session",
            "replay",
            "--mode",
            "verify",
            "--package",
            pkg.to_str().unwrap(),
        ],
        None,
    );
    assert!(bad.starts_with("exit: 1"), "{bad}");
    assert!(bad.contains("the package digest does not match"), "{bad}");
}

#[test]
fn trace_of_a_session_and_of_log_files() {
    let env = Env::new();
    env.record_example();
    env.check(&["session", "trace", "ses_01jdemo"], None, expect![[r#"
        exit: 0
        --- stdout
        Trace of session ses_01jdemo8xk4rate1imit0000a | Risk: MEDIUM (20/100)
        +  0:00.000   START   architect "Add per-client rate limiting to the public API"
        +  0:03.190   MODEL   req_01 claude-sonnet-4-5 → 12263/587 tokens, 3150ms
        +  0:03.210   TOOL    read src/api.ts  OK 5ms
        +  0:03.230   TOOL    grep rateLimit  OK 12ms
        +  0:03.250   TOOL    read src/routes.ts  OK 7ms
        +  0:11.230   ROUTE   architect → coder
        +  0:19.830   MODEL   req_02 claude-sonnet-4-5 → 18410/2231 tokens, 8570ms
        +  0:19.850   TOOL    write src/middleware/rate-limit.ts  OK 20ms
        +  0:19.890   TOOL    edit src/api.ts  OK 14ms
        +  0:19.920   TOOL    write test/rate-limit.test.ts  OK 11ms
        +  0:30.110   MODEL   req_03 claude-sonnet-4-5 → 21544/312 tokens, 2690ms
        +  0:30.112   MODEL   req_03 usage repeated for response msg_03 (counted once)
        +  0:34.910 ! TOOL    bash npm test  FAILED (error) 6370ms: 1 test failed
        +  0:41.290 ! VERIFY  npm test failed
        +  0:47.020   MODEL   req_04 claude-sonnet-4-5 → 23112/1040 tokens, 5700ms
        +  0:47.040   TOOL    edit src/middleware/rate-limit.ts  OK 12ms
        +  0:47.070   TOOL    bash npm test  OK 6290ms
        +  0:53.370   VERIFY  npm test passed
        +  0:57.950   MODEL   req_05 claude-sonnet-4-5 → 24051/690 tokens, 4550ms
        +  0:58.000   END     completed

        9 tool calls (1 failed), 5 model calls (99,380 in / 4,860 out tokens), 1 route(s), 0 error(s); slowest call: bash npm test 6.4s
        Lines marked ! are what the risk score weighs: failures, errors, denials, refused completions, pauses and blocks.
        --- stderr
    "#]]);
    let logs = env.home.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(
        logs.join("app.log"),
        "2026-11-30T10:00:01Z INFO server started\n2026-11-30T10:00:02Z ERROR db timeout after 3000ms on shard 7\n2026-11-30T10:00:03Z ERROR db timeout after 3100ms on shard 2\n2026-11-30T10:00:04Z WARN GET /orders took 1840ms\n",
    )
    .unwrap();
    std::fs::write(
        logs.join("svc.jsonl"),
        "{\"level\":\"error\",\"msg\":\"payment 9f8e7d6c5b4a failed\",\"duration_ms\":12}\n{\"level\":\"info\",\"msg\":\"ok\",\"latency_ms\":2400}\nnot json\n",
    )
    .unwrap();
    env.check(
        &["session", "trace", "--logs", logs.to_str().unwrap()],
        None,
        expect![[r#"
            exit: 0
            --- stdout
            7 line(s) in 2 file(s), 2 of them JSON
            By level: error 3, info 2, unknown 1, warn 1

            Most frequent errors:
                   2× db timeout after Nms on shard N
                   1× payment N failed

            Slowest operations:
                  3.1s $TACHO_HOME/logs/app.log:3  db timeout after 3100ms on shard 2
                  3.0s $TACHO_HOME/logs/app.log:2  db timeout after 3000ms on shard 7
                  2.4s $TACHO_HOME/logs/svc.jsonl:2  ok
                  1.8s $TACHO_HOME/logs/app.log:4  GET /orders took 1840ms
            --- stderr
        "#]],
    );
}

/// Stored projections: made on first use, brought up to date from where they stopped,
/// derived only (deleting one changes nothing), and checked against a rebuild.
#[test]
fn stored_projections_are_incremental_derived_and_verified() {
    let env = Env::new();
    let start = "{\"type\":\"session.start\",\"ts\":1000,\"agent\":\"coder\"}\n{\"type\":\"step.start\",\"ts\":1001,\"step\":1}\n{\"type\":\"tool.call\",\"ts\":1002,\"call_id\":\"a\",\"tool\":\"read\",\"target\":\"src/a.rs\"}\n";
    assert!(
        env.run(&["record", "--session", "ses_inc", "-"], Some(start))
            .starts_with("exit: 0")
    );
    let stored = env.home.path().join("log/projections/ses_inc.json");
    let first = env.run(&["graph", "ses_inc", "--format", "json"], None);
    assert!(stored.is_file(), "the graph is stored on first use");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stored).unwrap()).unwrap();
    assert_eq!(v["graph"]["next_seq"], 3);
    // More events: the stored graph is brought up to date from event 3 on.
    let more = "{\"type\":\"tool.result\",\"ts\":1003,\"call_id\":\"a\",\"status\":\"ok\",\"duration_ms\":4}\n{\"type\":\"file.edit\",\"ts\":1004,\"path\":\"src/a.rs\",\"op\":\"modify\"}\n{\"type\":\"step.finish\",\"ts\":1005,\"step\":1}\n";
    assert!(
        env.run(&["record", "--session", "ses_inc", "-"], Some(more))
            .starts_with("exit: 0")
    );
    let updated = env.run(&["graph", "ses_inc", "--format", "json"], None);
    assert_ne!(first, updated);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stored).unwrap()).unwrap();
    assert_eq!(v["graph"]["next_seq"], 6);
    // Deleting it loses nothing: a rebuild prints the same.
    std::fs::remove_file(&stored).unwrap();
    assert_eq!(
        env.run(&["graph", "ses_inc", "--format", "json"], None),
        updated
    );
    assert!(
        env.run(&["session", "replay", "ses_inc", "--mode", "verify"], None)
            .contains("stored projections: ok")
    );
    // An edited projection is caught by verification...
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stored).unwrap()).unwrap();
    v["graph"]["steps"][0]["tools"][0]["status"] = "error".into();
    std::fs::write(&stored, v.to_string()).unwrap();
    let out = env.run(&["session", "replay", "ses_inc", "--mode", "verify"], None);
    assert!(
        out.starts_with("exit: 1") && out.contains("differs from a rebuild"),
        "{out}"
    );
    // ...and one the log does not back (another head) is not used: it is rebuilt.
    v["graph"]["steps"][0]["tools"][0]["status"] = "ok".into();
    v["head"] = "00".repeat(32).into();
    std::fs::write(&stored, v.to_string()).unwrap();
    assert_eq!(
        env.run(&["graph", "ses_inc", "--format", "json"], None),
        updated
    );
    assert!(
        env.run(&["session", "replay", "ses_inc", "--mode", "verify"], None)
            .starts_with("exit: 0")
    );
}

#[test]
fn json_forms_of_show_and_trace() {
    let env = Env::new();
    env.record_example();
    let parse = |out: String| -> Vec<serde_json::Value> {
        assert!(out.starts_with("exit: 0"), "{out}");
        out.lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let show = parse(env.run(&["session", "show", "ses_01jdemo", "--json"], None));
    assert_eq!(show.len(), 1);
    assert_eq!(show[0]["type"], "session");
    assert_eq!(show[0]["agents"], serde_json::json!(["architect", "coder"]));
    assert_eq!(show[0]["cache_read"], 85129);
    assert_eq!(show[0]["readiness"], "ready");
    let trace = parse(env.run(&["session", "trace", "ses_01jdemo", "--json"], None));
    assert_eq!(trace.last().unwrap()["type"], "risk");
    let flagged: Vec<&str> = trace
        .iter()
        .filter(|t| t["flagged"] == true)
        .map(|t| t["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        flagged,
        vec!["tool", "verify"],
        "the failed test run and its verification"
    );
    let logs = env.home.path().join("x.log");
    std::fs::write(&logs, "ERROR boom 1\nERROR boom 2\nINFO fine\n").unwrap();
    let r = parse(env.run(
        &[
            "session",
            "trace",
            "--logs",
            logs.to_str().unwrap(),
            "--json",
        ],
        None,
    ));
    assert_eq!(r[0]["levels"]["error"], 2);
    assert_eq!(r[0]["top_errors"][0], serde_json::json!(["boom N", 2]));
}

/// Bad input never panics: an empty store, a session still being written, a corrupt
/// segment each get a clear message and their documented exit code.
#[test]
fn empty_store_running_session_and_corrupt_segment() {
    let env = Env::new();
    env.check(
        &["session", "list"],
        None,
        expect![[r#"
        exit: 0
        --- stdout
        --- stderr
        no sessions recorded yet (store: $TACHO_HOME/log)
    "#]],
    );
    env.check(
        &["graph", "ses_none"],
        None,
        expect![[r#"
        exit: 4
        --- stdout
        --- stderr
        error: no session matches "ses_none"
    "#]],
    );
    // A session still being written: what is committed so far, marked running.
    let running = "{\"type\":\"session.start\",\"ts\":1000}\n{\"type\":\"step.start\",\"ts\":1001,\"step\":1}\n{\"type\":\"tool.call\",\"ts\":1002,\"call_id\":\"a\",\"tool\":\"bash\",\"target\":\"make\"}\n";
    assert!(
        env.run(&["record", "--session", "ses_live", "-"], Some(running))
            .starts_with("exit: 0")
    );
    let g = env.run(&["graph", "ses_live"], None);
    assert!(
        g.contains("bash: make → running") && g.contains("Ended: not yet"),
        "{g}"
    );
    // A corrupt committed byte: exit 1, naming the segment and the offset.
    env.record_example();
    let seg = env
        .home
        .path()
        .join("log/streams")
        .join(EXAMPLE_SESSION)
        .join("00000000000000000000.tseg");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[400] ^= 0x01;
    std::fs::write(&seg, bytes).unwrap();
    std::fs::remove_dir_all(env.home.path().join("log/projections")).ok();
    env.check(&["graph", "ses_01jdemo"], None, expect![[r#"
        exit: 1
        --- stdout
        --- stderr
        error: corruption in $TACHO_HOME/log/streams/ses_01jdemo8xk4rate1imit0000a/00000000000000000000.tseg at offset 376: frame at offset 376: frame checksum mismatch: stored 0xd0e2225c, computed 0xa4e4d8c9
    "#]]);
}

/// Queries answer only from verified data: a payload forged with a recomputed checksum
/// is refused by graph and risk at its offset. `session list` answers from the session
/// index, recorded before the forgery, but a stream whose files changed since it last
/// verified is verified again: the listing names the damaged session (exit 1) and
/// still lists the others, before and after the index is rebuilt; `log verify` finds
/// the forgery too.
#[test]
fn queries_refuse_a_forged_payload_and_list_the_rest() {
    let env = Env::new();
    env.record_example();
    let other = env.run(
        &["record", "--session", "ses_other", "-"],
        Some("{\"type\":\"session.start\",\"ts\":\"2026-11-30T08:00:00Z\",\"agent\":\"coder\"}\n"),
    );
    assert!(other.starts_with("exit: 0"), "{other}");
    env.forge_first_event();
    for args in [
        vec!["graph", EXAMPLE_SESSION],
        vec!["risk", EXAMPLE_SESSION],
    ] {
        let out = env.run(&args, None);
        assert!(out.starts_with("exit: 1"), "{args:?}: {out}");
        assert!(out.contains("hash chain broken"), "{args:?}: {out}");
        assert!(!out.contains("brchitect"), "{args:?}: {out}");
    }
    let verify = env.run(&["log", "verify"], None);
    assert!(verify.starts_with("exit: 1"), "{verify}");
    assert!(verify.contains("hash chain broken"), "{verify}");
    for reindexed in [false, true] {
        if reindexed {
            env.run(&["log", "reindex"], None);
        }
        let list = env.run(&["session", "list"], None);
        assert!(list.starts_with("exit: 1"), "{list}");
        assert!(list.contains("ses_other"), "{list}");
        assert!(
            list.contains(&format!(
                "warning: session {EXAMPLE_SESSION} is damaged and left out"
            )) && list.contains("hash chain broken"),
            "{list}"
        );
    }
}

/// A bit flipped in a committed batch after the session was listed (the index then
/// describes the stream as it was): the next listing says the session is damaged, where
/// and why, exits 1, and still lists the others, as JSON too; every listing after
/// says so again.
#[test]
fn a_listing_marks_a_stream_changed_since_it_was_indexed() {
    let env = Env::new();
    env.record_example();
    let other = env.run(
        &["record", "--session", "ses_other", "-"],
        Some("{\"type\":\"session.start\",\"ts\":\"2026-11-30T08:00:00Z\",\"agent\":\"coder\"}\n"),
    );
    assert!(other.starts_with("exit: 0"), "{other}");
    let list = env.run(&["session", "list"], None);
    assert!(list.starts_with("exit: 0"), "{list}");
    let seg = env
        .home
        .path()
        .join("log/streams")
        .join(EXAMPLE_SESSION)
        .join("00000000000000000000.tseg");
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[400] ^= 0x01;
    std::fs::write(&seg, bytes).unwrap();
    for _ in 0..2 {
        let list = env.run(&["session", "list"], None);
        assert!(list.starts_with("exit: 1"), "{list}");
        assert!(list.contains("ses_other"), "{list}");
        assert!(
            list.contains(&format!(
                "warning: session {EXAMPLE_SESSION} is damaged and left out"
            )) && list.contains("00000000000000000000.tseg at offset 376")
                && list.contains("frame checksum mismatch"),
            "{list}"
        );
    }
    let json = env.run(&["session", "list", "--json"], None);
    assert!(json.starts_with("exit: 1"), "{json}");
    assert!(
        json.contains(&format!(
            "\"session\":\"{EXAMPLE_SESSION}\",\"status\":\"damaged\",\"damage\":"
        )),
        "{json}"
    );
}

/// A writer never appends after committed data that was changed: recording into a
/// session whose last batch was forged (checksum recomputed) is refused, and nothing
/// is cut.
#[test]
fn a_forged_stream_is_not_appended_to() {
    let env = Env::new();
    env.record_example();
    let (seg, bytes) = env.forge_first_event();
    let out = env.run(
        &["record", "--session", EXAMPLE_SESSION, "-"],
        Some("{\"type\":\"error\",\"message\":\"late\"}\n"),
    );
    assert!(out.starts_with("exit: 1"), "{out}");
    assert!(out.contains("hash chain broken"), "{out}");
    assert_eq!(
        std::fs::read(&seg).unwrap(),
        bytes,
        "nothing was cut or appended"
    );
}

/// `graph` takes `--json` as every query does: the same record as `--format json`.
#[test]
fn graph_takes_json_like_every_query() {
    let env = Env::new();
    env.record_example();
    let json = env.run(&["graph", "ses_01jdemo", "--json"], None);
    assert!(json.starts_with("exit: 0"), "{json}");
    assert!(json.contains("\"type\":\"graph\""), "{json}");
    assert_eq!(
        json,
        env.run(&["graph", "ses_01jdemo", "--format", "json"], None)
    );
    let both = env.run(
        &["graph", "ses_01jdemo", "--json", "--format", "mermaid"],
        None,
    );
    assert!(both.starts_with("exit: 2"), "{both}");
}

/// A command group (`tacho log`) keeps its description and, run without a subcommand,
/// prints its help and exits 2, as clap's nested subcommands did before groups were
/// deferred.
#[test]
fn a_command_group_without_its_subcommand_shows_its_help() {
    let env = Env::new();
    env.check(&["log"], None, expect![[r#"
        exit: 2
        --- stdout
        --- stderr
        Log-level tooling: verify, dump and count the raw segments

        Usage: tacho log <COMMAND>

        Commands:
          verify   Check every checksum, chain step, sequence number and payload; print the head digest to keep. Exit 1 on any error
          dump     Print the frames of a session's segments, or of one segment file
          stats    Count segments, events, batches and bytes, by kind
          reindex  Rebuild the session index from the streams (derived data; `log verify` says when it disagrees with them)
          help     Print this message or the help of the given subcommand(s)

        Options:
          -h, --help  Print help
    "#]]);
    let help = env.run(&["session", "--help"], None);
    assert!(
        help.starts_with(
            "exit: 0\n--- stdout\nSessions: list, show, replay, compare, trace, roll back and branch them\n"
        ),
        "{help}"
    );
    let unknown = env.run(&["goal", "nonesuch"], None);
    assert!(
        unknown.starts_with("exit: 2\n") && unknown.contains("unrecognized subcommand 'nonesuch'"),
        "{unknown}"
    );
}

/// Issue 47 (4): the README's usage block names every command of `tacho --help`, and
/// each agent argument there names every agent the command accepts.
#[test]
fn the_readmes_usage_block_names_every_command_and_agent() {
    let env = Env::new();
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let block = readme
        .split("```sh\ntacho demo")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .map(|b| format!("tacho demo{b}"))
        .unwrap();
    let help = env.run(&["--help"], None);
    let commands: Vec<&str> = help
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() > 20, "{help}");
    for c in &commands {
        assert!(
            block.lines().any(|l| l.starts_with(&format!("tacho {c} "))
                || l == format!("tacho {c}")
                || l.starts_with(&format!("tacho {c}  "))),
            "the README's usage block has no line for `tacho {c}`"
        );
    }
    let import = env.run(&["import", "--help"], None);
    let agents: Vec<&str> = import
        .split("[possible values: ")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .unwrap()
        .split(", ")
        .collect();
    assert_eq!(agents.len(), 9, "{import}");
    for prefix in ["tacho hooks install", "tacho hook ", "tacho import "] {
        let line = block
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line"));
        let named = if line.contains("AGENT") {
            block.lines().find(|l| l.contains("AGENT:")).unwrap_or(line)
        } else {
            line
        };
        for a in &agents {
            assert!(
                named.contains(a),
                "`{prefix}` in the README does not name {a}: {named}"
            );
        }
    }
}

/// Issue 47 (10): arguments a command would ignore are refused, and a missing choice
/// names both of its forms.
#[test]
fn arguments_a_command_would_ignore_are_refused() {
    let env = Env::new();
    let trace = env.run(&["session", "trace", "s1", "--logs", "/nonexistent"], None);
    assert!(
        trace.starts_with("exit: 2\n") && trace.contains("cannot be used with '--logs"),
        "{trace}"
    );
    let export = env.run(&["audit", "export", "s1", "--since", "7d"], None);
    assert!(
        export.starts_with("exit: 2\n") && export.contains("cannot be used with '--since"),
        "{export}"
    );
    let export = env.run(&["audit", "export", "s1", "--risk", "high"], None);
    assert!(export.starts_with("exit: 2\n"), "{export}");
    let none = env.run(&["audit", "export"], None);
    assert!(
        none.starts_with("exit: 2\n") && none.contains("<SESSION|--all>"),
        "{none}"
    );
    // With --all the filters hold.
    let all = env.run(&["audit", "export", "--all", "--since", "7d"], None);
    assert!(all.starts_with("exit: 0\n"), "{all}");
}

/// Issue 47 (2): `session list`'s columns line up whatever the ids' lengths (the
/// 36-character UUIDs of Claude Code, Gemini and Codex).
#[test]
fn session_list_columns_line_up_for_long_ids() {
    let env = Env::new();
    let uuid = "5e551011-aaaa-4bbb-8ccc-000000000001";
    for id in ["s1", uuid] {
        let line = format!(r#"{{"type":"session.start","session":"{id}","agent":"coder"}}"#);
        let out = env.run(&["record", "--snapshots", "off"], Some(&line));
        assert!(out.starts_with("exit: 0\n"), "{out}");
    }
    let out = env.run(&["session", "list"], None);
    let rows: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("SESSION"))
        .take_while(|l| !l.starts_with("---"))
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    let started: Vec<usize> = rows
        .iter()
        .map(|l| l.find("STARTED").or_else(|| l.find("20")).unwrap())
        .collect();
    assert!(started.iter().all(|&c| c == started[0]), "{out}");
    assert!(started[0] > uuid.len(), "{out}");
}

/// Issue 47 (1): without TACHO_HOME, `tacho demo` keeps a store of its own and says
/// where, and how to remove it; the user's own store gets nothing, and the commands
/// it suggests read the demo's store.
#[test]
fn demo_keeps_a_store_of_its_own_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let run = |args: &[&str], extra: Option<(&str, &str)>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tacho"));
        c.env_clear()
            .env("HOME", &home)
            .env("TMPDIR", tmp.path())
            .args(args);
        if let Some((k, v)) = extra {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let repo = tmp.path().join("repo");
    let (code, out) = run(&["demo", "--dir", repo.to_str().unwrap()], None);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("The demo keeps a store of its own"), "{out}");
    let store = out
        .lines()
        .find_map(|l| {
            l.strip_prefix("The demo keeps a store of its own (your store is untouched): ")
        })
        .unwrap()
        .to_owned();
    assert!(
        out.contains(&format!(
            "rm -rf {} {store}",
            repo.canonicalize().unwrap().display()
        )),
        "{out}"
    );
    assert!(
        !home.join(".local/share/tacho").exists(),
        "the user's store is untouched"
    );
    assert!(
        out.contains(&format!("TACHO_HOME={store} tacho session list")),
        "{out}"
    );
    let (code, list) = run(&["session", "list", "--json"], Some(("TACHO_HOME", &store)));
    assert_eq!(code, 0);
    assert_eq!(list.lines().count(), 1, "{list}");
}
