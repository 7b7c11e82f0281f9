//! Issue 43: real transcripts as the test corpus. `tests/corpus/sessions.json` lists
//! real sessions users' agents wrote (public repositories' Entire checkpoint branches),
//! each with its agent version, source, licence and the facts read from the file itself
//! by `tests/corpus/facts.py` (an independent reader): tokens, tool calls, failed calls,
//! files edited, first and last times, and ccusage's totals. The files whose licence
//! allows it are committed under `tests/corpus/files/`; for the rest only the facts are.
//!
//! Each committed session is imported as a new user would (`tacho import AGENT DIR`,
//! a fresh store, an empty home) and must say what the file says, nothing phantom:
//! tokens, calls, failures, files edited, first and last times; importing again adds
//! nothing; and where ccusage (pinned in `tests/agents`) reads the agent, its totals
//! for the same files equal the facts, unless the session's notes say how they differ.
//!
//! `TACHO_CORPUS=DIR` (a directory holding the same `files/` tree, as fetched from the
//! sources listed) runs every session of the list, committed or not.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_tests::{run, tacho};

#[derive(Debug)]
struct Source {
    repo: String,
    licence: String,
}

#[derive(Debug)]
struct Entry {
    agent: String,
    version: String,
    source: Source,
    committed: bool,
    /// The directory (or file) `tacho import` is given, relative to the corpus root.
    path: String,
    expect: Value,
    ccusage: Option<Value>,
    notes: Vec<String>,
}

impl Entry {
    fn of(v: &Value) -> Entry {
        let s = |v: &Value| v.as_str().unwrap_or_else(|| panic!("{v}")).to_owned();
        Entry {
            agent: s(&v["agent"]),
            version: s(&v["version"]),
            source: Source {
                repo: s(&v["source"]["repo"]),
                licence: s(&v["source"]["licence"]),
            },
            committed: v["committed"].as_bool().unwrap_or(false),
            path: s(&v["path"]),
            expect: v["expect"].clone(),
            ccusage: Some(v["ccusage"].clone()).filter(|c| !c.is_null()),
            notes: v["notes"].as_array().into_iter().flatten().map(s).collect(),
        }
    }
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

fn entries() -> Vec<Entry> {
    let text = std::fs::read_to_string(corpus_dir().join("sessions.json")).unwrap();
    let list: Vec<Value> = serde_json::from_str(&text).unwrap();
    list.iter().map(Entry::of).collect()
}

/// What a fresh store holds after importing one session's transcript.
#[derive(Debug, Default)]
struct Got {
    tokens: [u64; 4],
    tool_calls: u64,
    tool_failures: u64,
    files: BTreeSet<String>,
    first: Option<String>,
    last: Option<String>,
    /// Every session it holds has ended.
    ended: bool,
}

/// Instants of RFC 3339 times, so that `…39.22Z` and `…39.220Z` are one.
fn instant(t: &str) -> i64 {
    tacho_schema::parse_ts(&Value::String(t.to_owned())).unwrap_or_else(|e| panic!("{t}: {e}"))
}

/// Imports `e` into a fresh store: what it recorded, or the import's error.
fn import(e: &Entry, root: &Path) -> Result<Got, String> {
    let tmp = tempfile::tempdir().unwrap();
    let (home, user) = (tmp.path().join("tacho"), tmp.path().join("user"));
    std::fs::create_dir_all(&user).unwrap();
    let path = root.join(&e.path);
    let import = || {
        let mut c = tacho(&home);
        c.env("HOME", &user)
            .args(["import", &e.agent])
            .arg(&path)
            .args(["--json", "--stale-after", "never"]);
        run(c)
    };
    let (code, out, err) = import();
    if code != 0 {
        return Err(format!("import exit {code}: {out}{err}"));
    }
    let (_, again, _) = import();
    let again: Value = serde_json::from_str(again.trim().lines().last().unwrap_or("{}")).unwrap();
    if again["events_added"] != 0 {
        return Err(format!("importing again added events: {again}"));
    }
    let mut c = tacho(&home);
    c.args(["session", "list", "--json", "--limit", "1000"]);
    let (_, list, _) = run(c);
    let mut got = Got {
        ended: true,
        ..Got::default()
    };
    for line in list.lines() {
        let Ok(s) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(id) = s["session"].as_str() else {
            continue;
        };
        let mut c = tacho(&home);
        c.args(["session", "show", id, "--json"]);
        let (_, show, _) = run(c);
        let s: Value = serde_json::from_str(show.trim()).unwrap();
        let n = |k: &str| s[k].as_u64().unwrap_or(0);
        for (i, k) in ["tokens_in", "tokens_out", "cache_read", "cache_write"]
            .iter()
            .enumerate()
        {
            got.tokens[i] += n(k);
        }
        got.ended &= s["status"] != "running";
        got.tool_calls += n("tool_calls");
        got.tool_failures += n("tool_failures");
        for f in s["files"].as_array().into_iter().flatten() {
            if let Some(f) = f.as_str().or_else(|| f["path"].as_str()) {
                got.files.insert(f.to_owned());
            }
        }
        let (first, last) = (s["started"].as_str(), s["last_event"].as_str());
        if let Some(t) = first
            && got.first.as_deref().is_none_or(|g| instant(t) < instant(g))
        {
            got.first = Some(t.to_owned());
        }
        if let Some(t) = last
            && got.last.as_deref().is_none_or(|g| instant(t) > instant(g))
        {
            got.last = Some(t.to_owned());
        }
    }
    Ok(got)
}

/// How `got` differs from what the file says (empty: not at all).
fn differences(e: &Entry, got: &Result<Got, String>) -> Vec<String> {
    let x = &e.expect;
    if x["unread_format"] == true {
        return match got {
            Err(msg) if msg.contains("which tacho does not read") => Vec::new(),
            Err(msg) => vec![format!("refused without naming the format: {msg}")],
            Ok(_) => vec!["a format tacho does not read was imported".into()],
        };
    }
    let got = match got {
        Ok(g) => g,
        Err(msg) => return vec![msg.clone()],
    };
    let mut out = Vec::new();
    let mut same = |what: &str, ours: u64, theirs: &Value| {
        if let Some(t) = theirs.as_u64()
            && t != ours
        {
            out.push(format!("{what}: tacho {ours}, the file {t}"));
        }
    };
    for (i, k) in ["input", "output", "cache_read", "cache_write"]
        .iter()
        .enumerate()
    {
        same(k, got.tokens[i], &x[*k]);
    }
    same("tool calls", got.tool_calls, &x["tool_calls"]);
    same("failed calls", got.tool_failures, &x["tool_failures"]);
    same("files edited", got.files.len() as u64, &x["files_edited"]);
    if x["ended"] == true && !got.ended {
        out.push("the agent wrote its end, and the session is still running".into());
    }
    let at = |t: &Option<String>| t.as_deref().map(instant);
    if let Some(first) = x["first"].as_str()
        && at(&got.first) != Some(instant(first))
    {
        out.push(format!("first: tacho {:?}, the file {first}", got.first));
    }
    if let Some(last) = x["last"].as_str()
        && at(&got.last) != Some(instant(last))
    {
        out.push(format!("last: tacho {:?}, the file {last}", got.last));
    }
    // The file's last line may be bookkeeping after the last event (Codex's
    // `task_complete`, Copilot's `session.shutdown`): nothing later than it.
    if let Some(last) = x["last_at_most"].as_str()
        && at(&got.last).is_none_or(|g| g > instant(last))
    {
        out.push(format!(
            "last: tacho {:?}, after the file's end {last}",
            got.last
        ));
    }
    out
}

/// ccusage's totals for `e`'s files (input, output, cache read, cache write), where
/// ccusage reads the agent.
fn ccusage_totals(ccusage: &Path, e: &Entry, root: &Path) -> Option<[u64; 4]> {
    let dir = root.join(&e.path);
    // (An OpenCode session is given as its export, under its home's `export/`.)
    let home: PathBuf = root.join(e.path.split('/').take(4).collect::<Vec<_>>().join("/"));
    let (args, var, at): (&[&str], &str, PathBuf) = match e.agent.as_str() {
        "claude-code" => (&["session"], "CLAUDE_CONFIG_DIR", dir.join(".claude")),
        "codex" => (&["codex", "session"], "CODEX_HOME", dir.join(".codex")),
        "copilot" => (&["copilot", "session"], "HOME", dir),
        "gemini" => (
            &["gemini", "session"],
            "GEMINI_DATA_DIR",
            dir.join(".gemini"),
        ),
        "opencode" => (
            &["opencode", "session"],
            "OPENCODE_DATA_DIR",
            home.join(".local/share/opencode"),
        ),
        _ => return None,
    };
    let v = common::ccusage_json(ccusage, args, var, &at);
    let mut t = [0u64; 4];
    // (`sessions` for the other agents, `session` for Claude Code's.)
    let rows = v["sessions"].as_array().or(v["session"].as_array());
    for row in rows.into_iter().flatten() {
        for (i, k) in [
            "inputTokens",
            "outputTokens",
            "cacheReadTokens",
            "cacheCreationTokens",
        ]
        .iter()
        .enumerate()
        {
            t[i] += row[*k].as_u64().unwrap_or(0);
        }
    }
    Some(t)
}

#[derive(Default)]
struct Tally {
    sessions: usize,
    versions: BTreeSet<String>,
    exact: usize,
    ccusage: usize,
    ccusage_equal: usize,
}

#[test]
fn real_transcripts_import_as_the_files_say() {
    let all = entries();
    let extra = std::env::var_os("TACHO_CORPUS").map(PathBuf::from);
    let ccusage = common::npm_bin("ccusage");
    let mut problems = Vec::new();
    let mut tally: BTreeMap<String, Tally> = BTreeMap::new();
    for e in &all {
        assert!(
            !e.committed || matches!(e.source.licence.as_str(), "MIT" | "Apache-2.0"),
            "{} {} from {} is committed under {}",
            e.agent,
            e.version,
            e.source.repo,
            e.source.licence
        );
        let root = match (&extra, e.committed) {
            (Some(dir), _) => dir.clone(),
            (None, true) => corpus_dir(),
            (None, false) => continue,
        };
        let got = import(e, &root);
        let diff = differences(e, &got);
        let t = tally.entry(e.agent.clone()).or_default();
        t.sessions += 1;
        t.versions.insert(e.version.clone());
        if diff.is_empty() {
            t.exact += 1;
        } else {
            problems.push(format!(
                "{} {} ({}, {}): {}",
                e.agent,
                e.version,
                e.source.repo,
                e.path,
                diff.join("; ")
            ));
        }
        // ccusage reads the same files as the facts say it does (recorded in the list
        // when the corpus was made); and the facts are ccusage's unless a note says
        // how the two count differently.
        if let (Some(cc), Some(recorded)) = (&ccusage, &e.ccusage)
            && let Some(now) = ccusage_totals(cc, e, &root)
        {
            t.ccusage += 1;
            let recorded: Vec<u64> = ["input", "output", "cache_read", "cache_write"]
                .iter()
                .map(|k| recorded[*k].as_u64().unwrap_or(0))
                .collect();
            let expect: Vec<u64> = ["input", "output", "cache_read", "cache_write"]
                .iter()
                .map(|k| e.expect[*k].as_u64().unwrap_or(0))
                .collect();
            if now.as_slice() != recorded.as_slice() {
                problems.push(format!(
                    "{} {}: ccusage now says {now:?}, the list {recorded:?}",
                    e.agent, e.version
                ));
            } else if now.as_slice() == expect.as_slice() {
                t.ccusage_equal += 1;
            } else if !e.notes.iter().any(|n| n.contains("ccusage")) {
                problems.push(format!(
                    "{} {}: ccusage {now:?}, the file {expect:?}, and no note says why",
                    e.agent, e.version
                ));
            }
        }
    }
    eprintln!("agent: sessions, versions, as the file says, ccusage run, ccusage equal");
    for (agent, t) in &tally {
        eprintln!(
            "{agent}: {}, {}, {}, {}, {}",
            t.sessions,
            t.versions.len(),
            t.exact,
            t.ccusage,
            t.ccusage_equal
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The committed corpus holds several versions of each agent whose real sessions
    // could be found under a licence that allows it (Copilot CLI: two; the rest of
    // the list names no licence, so only their facts are here).
    for (agent, at_least) in [("claude-code", 3), ("codex", 3), ("copilot", 2)] {
        let versions: BTreeSet<&str> = all
            .iter()
            .filter(|e| e.committed && e.agent == agent)
            .map(|e| e.version.as_str())
            .collect();
        assert!(versions.len() >= at_least, "{agent}: {versions:?}");
    }
}

/// Issue 47 (7): importing a real transcript twice — what the first import added is
/// what the second finds already recorded, and the inferred end is said apart.
#[test]
fn a_second_import_finds_what_the_first_added() {
    let file = corpus_dir().join(
        "files/claude-code/2.1.62/f6b7329a/.claude/projects/-home-christso-projects-agentv/f6b7329a-914c-4f62-8090-4e29b032b173.jsonl",
    );
    let tmp = tempfile::tempdir().unwrap();
    // A copy that has not grown for long (a fresh checkout's files are new): the
    // import infers its end.
    let copy = tmp.path().join("t.jsonl");
    std::fs::copy(&file, &copy).unwrap();
    let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    std::fs::File::options()
        .append(true)
        .open(&copy)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let import = || {
        let mut c = tacho(&tmp.path().join("home"));
        c.args(["import", "claude-code", "--json"]).arg(&copy);
        let (code, out, err) = run(c);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(out.lines().next().unwrap()).unwrap()
    };
    let first = import();
    let second = import();
    let added = first["events_added"].as_u64().unwrap();
    assert!(added > 40, "{first}");
    assert_eq!(first["sessions_ended_inferred"], 1, "{first}");
    assert_eq!(second["events_added"], 0, "{second}");
    assert_eq!(
        second["events_already_recorded"].as_u64(),
        Some(added),
        "{first}\n{second}"
    );
}
