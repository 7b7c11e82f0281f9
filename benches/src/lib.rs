//! Workloads shared by the benchmarks: events of a chosen size, and the two baselines
//! users would otherwise have (JSON Lines through serde_json, and SQLite in WAL mode
//! with one JSON row per event, inserted many rows per statement and transaction).

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use rusqlite::Connection;
use tacho_schema::{Event, EventBody, ToolResult, ToolStatus};

/// A realistic event whose rkyv payload is about `size` bytes: a tool result, the
/// most common large event.
pub fn event_of_size(seq: u64, size: usize) -> EventBody {
    EventBody::ToolResult(ToolResult {
        call_id: format!("toolu_{seq:08}"),
        status: if seq.is_multiple_of(17) {
            ToolStatus::Error
        } else {
            ToolStatus::Ok
        },
        duration_ms: Some(seq % 900),
        error: None,
        output: Some(filler(seq, size.saturating_sub(64))),
        exit_code: Some(0),
    })
}

/// Text that looks like tool output (and does not compress to nothing).
fn filler(seq: u64, len: usize) -> String {
    let words = [
        "fn",
        "let",
        "src/api.ts",
        "ok",
        "test",
        "PASS",
        "=>",
        "{",
        "}",
        "429",
        "rate",
        "limit",
    ];
    let mut s = String::with_capacity(len + 16);
    let mut i = seq as usize;
    while s.len() < len {
        s.push_str(words[i % words.len()]);
        s.push(if i.is_multiple_of(9) { '\n' } else { ' ' });
        i = i.wrapping_mul(31).wrapping_add(7);
    }
    s.truncate(len);
    s
}

pub fn session_start() -> EventBody {
    EventBody::SessionStart(tacho_schema::SessionStart {
        agent: Some("bench".into()),
        ..Default::default()
    })
}

/// The JSON line of an event, as agents write transcripts and as the SQLite baseline
/// stores rows.
pub fn json_line(session: &str, seq: u64, body: &EventBody) -> String {
    Event {
        session: session.to_string(),
        time_unix_ns: 1_796_032_800_000_000_000 + seq as i64 * 1_000_000,
        body: body.clone(),
    }
    .to_json()
    .to_string()
}

/// Baseline 1: a JSON Lines file.
pub struct JsonlLog {
    file: File,
}

impl JsonlLog {
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(JsonlLog {
            file: File::options().create(true).append(true).open(path)?,
        })
    }

    /// Appends lines in one write; `sync` makes them durable (fdatasync).
    pub fn append(&mut self, lines: &[String], sync: bool) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
        for l in lines {
            buf.extend_from_slice(l.as_bytes());
            buf.push(b'\n');
        }
        self.file.write_all(&buf)?;
        if sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Reads every line back and parses its JSON (into a `serde_json::Value`, as a
    /// tool reading its own transcript would).
    pub fn read_all(path: &Path) -> std::io::Result<u64> {
        let mut n = 0;
        for line in BufReader::new(File::open(path)?).lines() {
            let v: serde_json::Value = serde_json::from_str(&line?)?;
            n += u64::from(v.is_object());
        }
        Ok(n)
    }
}

/// Baseline 2: SQLite in WAL mode, one JSON row per event, multi-row inserts.
pub struct SqliteLog {
    conn: Connection,
    seq: u64,
}

impl SqliteLog {
    /// `sync`: `synchronous=FULL` (every commit is durable), else `OFF` (OS-buffered).
    pub fn create(path: &Path, sync: bool) -> rusqlite::Result<Self> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", if sync { "FULL" } else { "OFF" })?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS events (
                 session TEXT NOT NULL, seq INTEGER NOT NULL, ts INTEGER NOT NULL,
                 type TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session, seq));",
        )?;
        Ok(SqliteLog { conn, seq: 0 })
    }

    /// Inserts a batch in one transaction with multi-row INSERT statements.
    pub fn append(&mut self, session: &str, kind: &str, lines: &[String]) -> rusqlite::Result<()> {
        const ROWS_PER_STATEMENT: usize = 100;
        let tx = self.conn.transaction()?;
        for chunk in lines.chunks(ROWS_PER_STATEMENT) {
            let mut sql = String::from("INSERT INTO events (session, seq, ts, type, body) VALUES ");
            for i in 0..chunk.len() {
                if i > 0 {
                    sql.push(',');
                }
                sql.push_str("(?,?,?,?,?)");
            }
            let mut stmt = tx.prepare_cached(&sql)?;
            let mut params: Vec<Box<dyn rusqlite::ToSql>> = Vec::with_capacity(chunk.len() * 5);
            for line in chunk {
                params.push(Box::new(session.to_string()));
                params.push(Box::new(self.seq as i64));
                params.push(Box::new(self.seq as i64));
                params.push(Box::new(kind.to_string()));
                params.push(Box::new(line.clone()));
                self.seq += 1;
            }
            stmt.execute(rusqlite::params_from_iter(params.iter()))?;
        }
        tx.commit()
    }

    /// Reads a session's rows back in order and parses each JSON body (into a
    /// `serde_json::Value`).
    pub fn read_all(&self, session: &str) -> rusqlite::Result<u64> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT body FROM events WHERE session = ?1 ORDER BY seq")?;
        let mut rows = stmt.query([session])?;
        let mut n = 0u64;
        while let Some(row) = rows.next()? {
            let body: String = row.get(0)?;
            let v: serde_json::Value = serde_json::from_str(&body)
                .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
            n += u64::from(v.is_object());
        }
        Ok(n)
    }
}

/// A realistic session of `n` events: steps of a model call, a few tool calls with
/// results (some failing), file edits, a verification run; then the end.
pub fn realistic_session(n: u64) -> Vec<(i64, EventBody)> {
    use tacho_schema::*;
    let mut out = vec![(0, session_start())];
    let mut step = 0u64;
    let mut i = 1u64;
    while i + 1 < n {
        let t = i as i64 * 1_000_000;
        let body = match i % 10 {
            1 => {
                step += 1;
                EventBody::StepStart(StepStart {
                    step,
                    agent: Some("coder".into()),
                    title: None,
                })
            }
            2 => EventBody::LlmResponse(LlmResponse {
                request_id: format!("r{step}"),
                response_id: Some(format!("m{step}")),
                model: Some("model".into()),
                tokens_in: 1000 + i,
                tokens_out: 50,
                cache_read: 900,
                cache_write: 10,
                latency_ms: Some(900),
                ..Default::default()
            }),
            3 | 5 => EventBody::ToolCall(ToolCall {
                call_id: format!("c{i}"),
                tool: if i % 20 == 3 {
                    "bash".into()
                } else {
                    "read".into()
                },
                target: Some(if i % 20 == 3 {
                    "cargo test".into()
                } else {
                    format!("src/m{}.rs", i % 50)
                }),
                input: Some(format!("{{\"path\":\"src/m{}.rs\"}}", i % 50)),
                agent: None,
            }),
            4 | 6 => EventBody::ToolResult(ToolResult {
                call_id: format!("c{}", i - 1),
                status: if i % 70 == 4 {
                    ToolStatus::Error
                } else {
                    ToolStatus::Ok
                },
                duration_ms: Some(i % 300),
                error: None,
                output: Some(filler(i, 120)),
                exit_code: Some(0),
            }),
            7 => EventBody::FileEdit(FileEdit {
                path: format!("src/m{}.rs", i % 50),
                op: EditOp::Modify,
                lines_added: Some(3),
                lines_removed: Some(1),
                ..Default::default()
            }),
            8 => EventBody::VerificationRun(VerificationRun {
                command: "cargo test".into(),
                status: VerificationStatus::Passed,
                duration_ms: Some(4000),
                ..Default::default()
            }),
            9 => EventBody::StepFinish(StepFinish { step, reason: None }),
            _ => EventBody::LlmRequest(LlmRequest {
                request_id: format!("r{step}"),
                model: "model".into(),
                ..Default::default()
            }),
        };
        out.push((t, body));
        i += 1;
    }
    out.push((
        i as i64 * 1_000_000,
        EventBody::SessionEnd(SessionEnd {
            reason: EndReason::Completed,
            message: None,
        }),
    ));
    out
}

/// A generated workspace for snapshot benchmarks: `files` text files of source-like
/// content (words from a small vocabulary, so they compress like code), `total_bytes`
/// in all, 100 files per directory two levels deep. Deterministic.
pub fn generate_workspace(
    dir: &Path,
    files: usize,
    total_bytes: u64,
) -> std::io::Result<Vec<String>> {
    let avg = (total_bytes / files.max(1) as u64).max(64);
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut paths = Vec::with_capacity(files);
    for i in 0..files {
        let rel = format!("d{:02}/s{}/f{i:05}.rs", i / 1000, (i / 100) % 10);
        let p = dir.join(&rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Sizes vary from half to one and a half times the average.
        rng = xorshift(rng);
        let size = avg / 2 + rng % avg.max(1);
        std::fs::write(&p, source_text(&mut rng, size as usize))?;
        paths.push(rel);
    }
    Ok(paths)
}

/// Rewrites `paths` with new content (round `round` makes it differ each time).
pub fn edit_files(dir: &Path, paths: &[String], round: u64) -> std::io::Result<()> {
    for (k, rel) in paths.iter().enumerate() {
        let p = dir.join(rel);
        let mut text = std::fs::read(&p)?;
        text.extend_from_slice(format!("// edit {round} {k}\n").as_bytes());
        std::fs::write(&p, text)?;
    }
    Ok(())
}

fn xorshift(mut x: u64) -> u64 {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    x
}

fn source_text(rng: &mut u64, size: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "fn",
        "let",
        "mut",
        "self",
        "return",
        "match",
        "impl",
        "pub",
        "struct",
        "if",
        "else",
        "for",
        "in",
        "while",
        "Ok(())",
        "Err(e)",
        "=>",
        "{",
        "}",
        "(",
        ");",
        "value",
        "index",
        "buffer",
        "len",
        "config",
        "request",
        "response",
        "handler",
        "user",
        "token",
        "cache",
        "0",
        "1",
        "42",
        "&",
        "->",
        "::",
        "Vec<u8>",
        "String",
        "Option<T>",
        "=",
        "+",
        "<",
        ">",
    ];
    let mut out = Vec::with_capacity(size + 16);
    while out.len() < size {
        *rng = xorshift(*rng);
        let w = WORDS[(*rng % WORDS.len() as u64) as usize];
        out.extend_from_slice(w.as_bytes());
        out.push(if (*rng).is_multiple_of(11) {
            b'\n'
        } else {
            b' '
        });
        // Identifiers with numbers, so files are not all alike.
        if (*rng).is_multiple_of(7) {
            out.extend_from_slice(format!("v{} ", (*rng >> 20) % 10_000).as_bytes());
        }
    }
    out
}

/// The baseline users run today for shadow snapshots: the `git` program with a separate
/// git directory, isolated from the user's configuration.
/// Runs `c` to its end; a failure panics with its stderr (a benchmark that cannot set
/// up should stop).
pub fn run_ok(c: &mut std::process::Command) {
    match c.output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("{c:?}: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("{c:?}: {e}"),
    }
}

/// Every regular file under `dir` with its length, largest first; a directory that
/// cannot be read panics (a benchmark that cannot measure should stop).
pub fn files_under(dir: &Path) -> Vec<(u64, std::path::PathBuf)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let entries = std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for e in entries {
            let (e, m) = match e.and_then(|e| Ok((e.path(), e.metadata()?))) {
                Ok(v) => v,
                Err(err) => panic!("{}: {err}", d.display()),
            };
            if m.is_dir() {
                todo.push(e);
            } else if m.is_file() {
                out.push((m.len(), e));
            }
        }
    }
    out.sort_by_key(|f| std::cmp::Reverse(f.0));
    out
}

/// Peak resident memory of a command, in KiB, from `/usr/bin/time -v`.
pub fn peak_kib(bin: &Path, home: &Path, args: &[&str]) -> Option<u64> {
    let out = std::process::Command::new("/usr/bin/time")
        .arg("-v")
        .arg(bin)
        .args(args)
        .env("TACHO_HOME", home)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .and_then(|v| v.trim().parse().ok())
}

/// `git ARGS` in the repository at `repo`, with an identity for commits.
pub fn git_in(repo: &Path, args: &[&str]) {
    run_ok(
        std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["-c", "user.name=b", "-c", "user.email=b@b"])
            .args(args),
    );
}

pub mod shadow_git {
    use std::path::Path;
    use std::process::Command;

    fn git() -> Command {
        let mut c = Command::new("git");
        c.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null");
        c
    }

    fn checked(mut c: Command, what: &str) -> std::io::Result<String> {
        let out = c.output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "git {what}: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// `git init --bare DIR`.
    pub fn init(git_dir: &Path) -> std::io::Result<()> {
        let mut c = git();
        c.args(["init", "-q", "--bare"]).arg(git_dir);
        checked(c, "init").map(|_| ())
    }

    /// `git --git-dir=G --work-tree=W ARGS...`, returning stdout.
    pub fn run(git_dir: &Path, work: &Path, args: &[&str]) -> std::io::Result<String> {
        let mut c = git();
        c.arg("--git-dir")
            .arg(git_dir)
            .arg("--work-tree")
            .arg(work)
            .args(args);
        checked(c, &args.join(" "))
    }

    /// Inside the workspace's own repository with a private index (`GIT_INDEX_FILE`),
    /// as a tool that must not disturb the user's staging area does: `add -A`, then
    /// `write-tree`; the tree id.
    pub fn snapshot_in_repo(work: &Path, index: &Path) -> std::io::Result<String> {
        for args in [&["add", "-A"][..], &["write-tree"][..]] {
            let mut c = git();
            c.arg("-C")
                .arg(work)
                .env("GIT_INDEX_FILE", index)
                .args(args);
            let out = checked(c, &args.join(" "))?;
            if args[0] == "write-tree" {
                return Ok(out);
            }
        }
        Ok(String::new())
    }

    /// A snapshot as a shadow repository takes one: `add -A`, then `write-tree`; the
    /// tree id.
    pub fn snapshot(git_dir: &Path, work: &Path) -> std::io::Result<String> {
        run(git_dir, work, &["add", "-A"])?;
        run(git_dir, work, &["write-tree"])
    }
}

/// Whole-process benchmarks at scale: the `tacho` binary, the bundled example as bulk
/// input, and the SQLite JSON-row store users would otherwise keep.
#[allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic
pub mod scale {
    use std::path::{Path, PathBuf};

    use rusqlite::Connection;

    /// The `tacho` binary next to this benchmark (release under `cargo bench`).
    pub fn tacho_bin() -> Option<PathBuf> {
        let exe = std::env::current_exe().ok()?;
        let bin = exe.parent()?.parent()?.join("tacho");
        if bin.exists() {
            Some(bin)
        } else {
            eprintln!(
                "{} is missing (its cases are skipped); run `cargo build --release -p tacho-cli` first",
                bin.display()
            );
            None
        }
    }

    /// The bundled example session's lines.
    pub fn example_lines() -> Vec<String> {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sessions/rate-limit.jsonl");
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `sessions` copies of the example, each under its own session id.
    pub fn bulk_input(path: &Path, sessions: usize) -> u64 {
        let lines = example_lines();
        let id = "ses_01jdemo8xk4rate1imit0000a";
        let mut text = String::new();
        let mut n = 0;
        for k in 0..sessions {
            let new = format!("ses_bulk{k:020}");
            for l in &lines {
                text.push_str(&l.replace(id, &new));
                text.push('\n');
                n += 1;
            }
        }
        std::fs::write(path, text).unwrap();
        n
    }

    /// At least `bytes` of input written to `path` as it is made (never held whole):
    /// copies of the example as sessions of their own, or, with `one_session`, the
    /// example's middle repeated inside one session. Returns the events written.
    pub fn large_input(path: &Path, bytes: u64, one_session: bool) -> u64 {
        use std::io::Write;
        let lines = example_lines();
        let id = "ses_01jdemo8xk4rate1imit0000a";
        let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
        let (mut written, mut events) = (0u64, 0u64);
        let mut put = |line: &str| {
            writeln!(out, "{line}").unwrap();
            written += line.len() as u64 + 1;
            events += 1;
            written
        };
        if one_session {
            let (first, rest) = lines.split_first().unwrap();
            let (last, middle) = rest.split_last().unwrap();
            put(first);
            'fill: loop {
                for l in middle {
                    if put(l) >= bytes {
                        break 'fill;
                    }
                }
            }
            put(last);
        } else {
            let mut k = 0u64;
            'sessions: loop {
                let new = format!("ses_bulk{k:020}");
                let mut total = 0;
                for l in &lines {
                    total = put(&l.replace(id, &new));
                }
                k += 1;
                if total >= bytes {
                    break 'sessions;
                }
            }
        }
        out.flush().unwrap();
        events
    }

    /// What a user of the SQLite design runs to check its events: every row read back
    /// (in order) and its JSON parsed. Returns the rows that parsed to an object.
    pub fn sqlite_read_all(db: &Path) -> u64 {
        let conn = Connection::open(db).unwrap();
        let mut stmt = conn
            .prepare("SELECT body FROM events ORDER BY session, seq")
            .unwrap();
        let mut rows = stmt.query([]).unwrap();
        let mut n = 0u64;
        while let Some(row) = rows.next().unwrap() {
            let body: String = row.get(0).unwrap();
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            n += u64::from(v.is_object());
        }
        n
    }

    /// What an importer writing SQLite does with the same input: parse every line (as
    /// `tacho record` validates every line), then insert it as a JSON row, durably
    /// (`synchronous=FULL`), committing once for the input or once per session.
    pub fn sqlite_ingest(input: &Path, db: &Path, tx_per_session: bool) {
        let _ = std::fs::remove_file(db);
        let _ = std::fs::remove_file(db.with_extension("db-wal"));
        let _ = std::fs::remove_file(db.with_extension("db-shm"));
        let mut conn = Connection::open(db).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        conn.execute_batch(
            "CREATE TABLE events (session TEXT NOT NULL, seq INTEGER NOT NULL,
                 type TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session, seq));",
        )
        .unwrap();
        let text = std::fs::read_to_string(input).unwrap();
        let mut tx = conn.transaction().unwrap();
        let mut current = String::new();
        let mut seq = 0i64;
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let session = v["session"].as_str().unwrap();
            let kind = v["type"].as_str().unwrap();
            if session != current {
                if tx_per_session && !current.is_empty() {
                    tx.commit().unwrap();
                    tx = conn.transaction().unwrap();
                }
                current = session.to_owned();
                seq = 0;
            }
            tx.prepare_cached(
                "INSERT INTO events (session, seq, type, body) VALUES (?1, ?2, ?3, ?4)",
            )
            .unwrap()
            .execute(rusqlite::params![session, seq, kind, line])
            .unwrap();
            seq += 1;
        }
        tx.commit().unwrap();
    }
}

/// `tacho hook <agent>` as agents run it, whole process (the hook benchmarks).
#[allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic
pub mod hooks {
    use std::io::Write;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};

    /// The tacho binary of this profile (`target/<profile>/tacho`), or `TACHO_BIN`.
    pub fn tacho_bin() -> PathBuf {
        if let Some(p) = std::env::var_os("TACHO_BIN") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().and_then(Path::parent).unwrap();
        let bin = dir.join("tacho");
        assert!(
            bin.exists(),
            "{} is missing: `cargo build --release -p tacho-cli` first, or set TACHO_BIN",
            bin.display()
        );
        bin
    }

    /// A generated workspace of `files` files (a source tree's shape) in `root/repo`,
    /// committed in a Git repository of its own: its path and its files.
    pub fn committed_workspace(root: &Path, files: usize) -> (PathBuf, Vec<String>) {
        let ws = root.join("repo");
        let paths = crate::generate_workspace(&ws, files, files as u64 * 2_000).unwrap();
        let ws = ws.canonicalize().unwrap();
        let g = |args: &[&str]| crate::git_in(&ws, args);
        g(&["init", "-q"]);
        g(&["add", "-A"]);
        g(&["commit", "-q", "-m", "init"]);
        // (Files written in the same instant as the index are racily clean to Git.)
        std::thread::sleep(std::time::Duration::from_millis(200));
        (ws, paths)
    }

    pub fn git_ok() -> bool {
        Command::new("git")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    /// Runs `tacho hook <agent>` in `ws` with `payload` on stdin and the store in
    /// `home`; panics unless it recorded without a problem.
    pub fn run_hook(bin: &Path, agent: &str, home: &Path, ws: &Path, payload: &str) {
        run_hook_with(bin, agent, home, ws, payload, &[]);
    }

    /// [`run_hook`] with more environment variables (an agent's `HOME`).
    pub fn run_hook_with(
        bin: &Path,
        agent: &str,
        home: &Path,
        ws: &Path,
        payload: &str,
        env: &[(&str, &Path)],
    ) {
        let mut c = Command::new(bin);
        c.args(["hook", agent])
            .current_dir(ws)
            .env("TACHO_HOME", home)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(payload.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "tacho hook {agent}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
