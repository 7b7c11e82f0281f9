//! The README walked top to bottom as a new user would (issue 47): every command of
//! every `sh` block, in order, in a fresh `HOME` with no `TACHO_HOME` and no agent
//! configured, each must exit 0 (the README shows no failing command). What a test
//! cannot run is replaced or skipped by a rule named here, never silently:
//!
//! - `cargo run -q -p tacho-cli -- demo` runs the built `tacho demo`;
//! - `cargo test …` is this suite, `cargo install …` a release build of its own (the
//!   static one is `static_build.rs`'s, behind `TACHO_TEST_STATIC_BUILD`): skipped;
//! - an agent's own CLI (`claude`, `codex`, …: "work as usual") is stood in for by
//!   recording the bundled example session as that agent's (the agent tests run the
//!   real CLIs), and `<id-prefix>` is that session's id prefix;
//! - the usage block (options in brackets) is the synopsis, checked against `--help`
//!   by `cli/tests/cli.rs`: skipped;
//! - `duckdb` and Python's `duckdb` run when they are installed (`warehouse.rs` runs
//!   the same SQL files in any case);
//! - `tacho import AGENT` after a stand-in finds none of the agent's own files: it
//!   must say where it looked (exit 4).
//!
//! The commands run through `sh -c` (pipes and redirections as written) in a scratch
//! directory that has the repository's `docs/` and `examples/`, with `tacho` on `PATH`.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::process::Command;

/// The agents' own CLIs, as the README names them.
const AGENT_CLIS: &[(&str, &str)] = &[
    ("claude", "claude-code"),
    ("codex", "codex"),
    ("droid", "droid"),
    ("qwen", "qwen-code"),
    ("copilot", "copilot"),
    ("gemini", "gemini"),
    ("cline", "cline"),
    ("opencode", "opencode"),
];

/// One command of a block: its text, without the comment.
fn commands(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        let line = if pending.is_empty() {
            line.to_string()
        } else {
            format!("{pending}\n{line}")
        };
        // A single-quoted argument may span lines (the README's `python3 -c '…'`).
        if strip_comment(&line).matches('\'').count() % 2 == 1 {
            pending = line;
            continue;
        }
        pending.clear();
        let cmd = strip_comment(&line).trim().to_string();
        if !cmd.is_empty() {
            out.push(cmd);
        }
    }
    assert!(
        pending.is_empty(),
        "an unclosed quote in the README: {pending}"
    );
    out
}

/// `line` without a `#` comment outside quotes.
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    let mut prev = ' ';
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') if prev.is_whitespace() => return &line[..i],
            _ => {}
        }
        prev = c;
    }
    line
}

/// The `sh` blocks of a Markdown text, in order.
fn sh_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match &mut current {
            None if line.trim_end() == "```sh" => current = Some(String::new()),
            Some(b) if line.trim_end() == "```" => {
                blocks.push(std::mem::take(b));
                current = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None => {}
        }
    }
    blocks
}

fn has(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn every_readme_command_runs_in_a_fresh_home() {
    let root = tacho_tests::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    for dir in ["docs", "examples"] {
        std::os::unix::fs::symlink(root.join(dir), work.join(dir)).unwrap();
    }
    let bin = tacho_tests::tacho_bin();
    let bin_dir = bin.parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let python_duckdb = Command::new("python3")
        .args(["-c", "import duckdb"])
        .output()
        .is_ok_and(|o| o.status.success());
    let sh = |cmd: &str| -> (i32, String) {
        let out = Command::new("sh")
            .args(["-c", cmd])
            .current_dir(&work)
            .env_clear()
            .env("HOME", &home)
            .env("PATH", &path)
            .env("LANG", "C.UTF-8")
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let example = std::fs::read_to_string(root.join("examples/sessions/rate-limit.jsonl")).unwrap();
    let mut session: Option<String> = None;
    let mut ran = Vec::new();
    let mut skipped = Vec::new();
    for block in sh_blocks(&readme) {
        // The synopsis: options in brackets.
        if block.lines().any(|l| l.contains(" [--")) {
            skipped.push((
                "(the usage block)".to_string(),
                "the synopsis, checked against --help",
            ));
            continue;
        }
        for cmd in commands(&block) {
            let first = cmd.split_whitespace().next().unwrap_or("");
            let run = if cmd == "cargo run -q -p tacho-cli -- demo" {
                "tacho demo".to_string()
            } else if cmd.starts_with("cargo test") {
                skipped.push((cmd, "this test suite"));
                continue;
            } else if cmd.starts_with("cargo install") {
                skipped.push((cmd, "a release build of its own"));
                continue;
            } else if let Some((_, agent)) = AGENT_CLIS.iter().find(|(p, _)| *p == first) {
                // The agent works: a session recorded as its.
                let id = format!("ses_walk_{}", agent.replace('-', "_"));
                let input = example
                    .replace("ses_01jdemo8xk4rate1imit0000a", &id)
                    .replace("\"agent\":\"architect\"", &format!("\"agent\":\"{agent}\""));
                let file = work.join(format!("{id}.jsonl"));
                std::fs::write(&file, input).unwrap();
                session = Some(id);
                format!("tacho record {}", file.display())
            } else if first == "cat" && cmd.contains("| duckdb") && !has("duckdb") {
                skipped.push((cmd, "the DuckDB CLI is not installed"));
                continue;
            } else if first == "python3" && cmd.contains("duckdb") && !python_duckdb {
                skipped.push((cmd, "Python's duckdb is not installed"));
                continue;
            } else if first == "tacho" {
                match (
                    &session,
                    cmd.contains("<id-prefix>") || cmd.contains("<id>"),
                ) {
                    (Some(id), true) => cmd.replace("<id-prefix>", &id[..13]).replace("<id>", id),
                    (None, true) => panic!("{cmd}: no session recorded before it"),
                    (_, false) => cmd.clone(),
                }
            } else {
                cmd.clone()
            };
            let (code, out) = sh(&run);
            // An import reads what the agent itself wrote, which a stand-in does not
            // write: it must say where it looked (exit 4, no data), not fail otherwise.
            if cmd.starts_with("tacho import ") && code == 4 {
                assert!(
                    out.contains(&home.display().to_string()) && out.contains("no such file"),
                    "{cmd}: {out}"
                );
                skipped.push((cmd, "the agent's own data is not there (said, exit 4)"));
                continue;
            }
            assert_eq!(
                code, 0,
                "README command `{cmd}` (run as `{run}`) exited {code}:\n{out}"
            );
            ran.push(cmd);
        }
    }
    // What was walked: every block's tacho commands ran, and each skip has its rule.
    assert!(ran.iter().any(|c| c.contains("demo")), "{ran:?}");
    assert!(
        ran.iter()
            .filter(|c| c.starts_with("tacho hooks install"))
            .count()
            >= 8,
        "{ran:?}"
    );
    assert!(
        ran.iter().any(|c| c.starts_with("tacho graph <id-prefix>")),
        "{ran:?}"
    );
    for (cmd, why) in &skipped {
        eprintln!("skipped: {cmd} ({why})");
    }
    assert!(
        skipped.len() <= 7,
        "more README commands skipped than the rules above allow: {skipped:?}"
    );
    // Nothing was written into the user's real places: the fresh HOME holds it all.
    assert!(home.join(".claude/settings.json").exists());
    assert!(home.join(".local/share/tacho/log").exists());
}
