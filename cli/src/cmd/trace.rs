//! `tacho session trace`: a risk-scored timeline of a session from its events, or with
//! `--logs`, an analysis of conventional log files (for operational problems).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use tacho_projections::{ExecutionGraph, assess};
use tacho_schema::{EndReason, EventBody, ToolStatus};

use crate::cmd::graph::tool_duration;
use crate::error::CliError;
use crate::home::open_store;
use crate::output::{Out, route, since, thousands};

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The session (its id, or any unique prefix of it).
    #[arg(required_unless_present = "logs")]
    pub session: Option<String>,
    /// Analyse log files (JSON Lines or text; a file or a directory) instead of events.
    #[arg(long)]
    pub logs: Option<PathBuf>,
    /// Operations at least this slow are listed (milliseconds).
    #[arg(long, default_value_t = 1000)]
    pub slow_ms: u64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: TraceArgs) -> Result<(), CliError> {
    let mut out = Out::new();
    if let Some(path) = &a.logs {
        let report = analyse_logs(path, a.slow_ms)?;
        if a.json {
            out.json(&serde_json::to_value(&report).map_err(|e| CliError::Io(e.to_string()))?)?;
        } else {
            out.line(render_logs(&report).trim_end())?;
        }
        return out.finish();
    }
    let store = open_store()?;
    let session = store.resolve_session(a.session.as_deref().unwrap_or_default())?;
    let mut events = Vec::new();
    let mut g = ExecutionGraph::new(&session);
    store.read_session(&session, |e| {
        g.apply(e.seq, &e.event);
        events.push(e);
    })?;
    let risk = assess(&g);
    // Results by call id, to print each call once with its outcome.
    let results: BTreeMap<&str, &tacho_projections::ToolNode> =
        g.tools().map(|(_, t)| (t.call_id.as_str(), t)).collect();
    let start = events.first().map_or(0, |e| e.event.time_unix_ns);
    let mut responses_seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut rows = Vec::new();
    for e in &events {
        let at = since(start, e.event.time_unix_ns);
        let (tag, text, flag) = match &e.event.body {
            EventBody::SessionStart(s) => (
                "START",
                format!(
                    "{}{}",
                    s.agent.as_deref().unwrap_or("-"),
                    s.title
                        .as_ref()
                        .map(|t| format!(" \"{t}\""))
                        .unwrap_or_default()
                ),
                "",
            ),
            EventBody::AgentRoute(r) => ("ROUTE", route(r.from.as_deref(), &r.to), ""),
            EventBody::LlmResponse(r) => {
                let repeat = r
                    .response_id
                    .as_ref()
                    .is_some_and(|id| !responses_seen.insert(id.clone()));
                let text = if repeat {
                    format!(
                        "{} usage repeated for response {} (counted once)",
                        r.request_id,
                        r.response_id.as_deref().unwrap_or("")
                    )
                } else {
                    format!(
                        "{} {} → {}/{} tokens{}",
                        r.request_id,
                        r.model.as_deref().unwrap_or(""),
                        r.tokens_in,
                        r.tokens_out,
                        r.latency_ms.map(|l| format!(", {l}ms")).unwrap_or_default()
                    )
                };
                ("MODEL", text, if r.error.is_some() { "!" } else { "" })
            }
            EventBody::ToolCall(c) => {
                let node = results.get(c.call_id.as_str());
                let status = node.and_then(|t| t.status);
                let dur = node.and_then(|t| t.duration_ms);
                let err = node.and_then(|t| t.error.as_deref());
                let outcome = match status {
                    Some(ToolStatus::Ok) => "OK".to_string(),
                    Some(s) => format!("FAILED ({s})"),
                    None => "NO RESULT".to_string(),
                };
                let failed = status.is_none_or(|s| s != ToolStatus::Ok);
                (
                    "TOOL",
                    format!(
                        "{} {}  {outcome}{}{}",
                        c.tool,
                        c.target.as_deref().unwrap_or(""),
                        dur.map(|d| format!(" {d}ms")).unwrap_or_default(),
                        err.map(|e| format!(": {}", e.lines().next().unwrap_or("")))
                            .unwrap_or_default()
                    ),
                    if failed { "!" } else { "" },
                )
            }
            EventBody::VerificationRun(v) => (
                "VERIFY",
                format!("{} {}", v.command, v.status),
                if v.status == tacho_schema::VerificationStatus::Passed {
                    ""
                } else {
                    "!"
                },
            ),
            EventBody::Error(er) => (
                "ERROR",
                er.message.lines().next().unwrap_or("").to_string(),
                "!",
            ),
            EventBody::PermissionReply(p) if p.decision == tacho_schema::Decision::Deny => {
                ("DENIED", p.request_id.clone(), "!")
            }
            EventBody::SessionEnd(en) => match en.reason {
                EndReason::GateBlocked => (
                    "GATE",
                    "completion gate blocked the session".to_string(),
                    "!",
                ),
                r => (
                    "END",
                    r.to_string(),
                    if r == EndReason::Completed { "" } else { "!" },
                ),
            },
            _ => continue,
        };
        rows.push((e.seq, at, tag, text, flag));
    }
    if a.json {
        for (seq, at, tag, text, flag) in &rows {
            out.json(&serde_json::json!({"type": "trace", "seq": seq, "at": at.trim(), "kind": tag.to_lowercase(), "text": text, "flagged": !flag.is_empty()}))?;
        }
        out.json(&serde_json::json!({"type": "risk", "score": risk.score, "level": risk.level}))?;
        return out.finish();
    }
    out.line(format!(
        "Trace of session {session} | Risk: {} ({}/100)",
        risk.level.as_str(),
        risk.score
    ))?;
    for (_, at, tag, text, flag) in &rows {
        out.line(format!("{at} {flag:1} {tag:<7} {text}"))?;
    }
    let failed = g
        .tools()
        .filter(|(_, t)| t.status.is_some_and(|s| s != ToolStatus::Ok))
        .count();
    let slowest = g.tools().max_by_key(|(_, t)| t.duration_ms.unwrap_or(0));
    out.line(format!(
        "\n{} tool calls ({failed} failed), {} model calls ({} in / {} out tokens), {} route(s), {} error(s){}",
        g.tools().count(),
        g.model_calls,
        thousands(g.tokens.input),
        thousands(g.tokens.output),
        g.routes.len(),
        g.errors.len(),
        slowest
            .and_then(|(_, t)| t.duration_ms.map(|d| format!("; slowest call: {} {} {}", t.tool, t.target.as_deref().unwrap_or(""), tool_duration(d))))
            .unwrap_or_default()
    ))?;
    out.line(
        "Lines marked ! are what the risk score weighs: failures, errors, denials, gate decisions.",
    )?;
    out.finish()
}

/// What `--logs` found.
#[derive(Debug, Default, serde::Serialize)]
pub struct LogReport {
    pub files: Vec<String>,
    pub lines: u64,
    pub json_lines: u64,
    /// Lines by level (`error`, `warn`, `info`, `debug`, `unknown`).
    pub levels: BTreeMap<String, u64>,
    /// Error messages with numbers and ids folded to `N`, and how often each occurred.
    pub top_errors: Vec<(String, u64)>,
    /// The slowest operations: (milliseconds, file:line, text).
    pub slow: Vec<(u64, String, String)>,
}

fn level_of(text: &str) -> &'static str {
    let up = text.to_ascii_uppercase();
    if [
        "FATAL",
        "PANIC",
        "ERROR",
        "EXCEPTION",
        "TRACEBACK",
        "CRITICAL",
    ]
    .iter()
    .any(|k| up.contains(k))
    {
        "error"
    } else if up.contains("WARN") {
        "warn"
    } else if up.contains("DEBUG") || up.contains("TRACE") {
        "debug"
    } else if up.contains("INFO") {
        "info"
    } else {
        "unknown"
    }
}

/// The message of a text log line: what follows its level word, when it has one (so
/// that timestamps and prefixes do not split one error into many).
fn message_of(line: &str) -> String {
    let up = line.to_ascii_uppercase();
    let keys = [
        "FATAL", "PANIC", "ERROR", "CRITICAL", "WARNING", "WARN", "INFO", "DEBUG", "TRACE",
    ];
    match keys
        .iter()
        .filter_map(|k| up.find(k).map(|i| (i, k.len())))
        .min()
    {
        Some((i, n)) => line[i + n..]
            .trim_start_matches([':', ']', ' ', '-', '\t'])
            .to_string(),
        None => line.to_string(),
    }
}

/// Replaces runs of digits and hex ids with `N`, so that messages group by shape.
fn shape(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut in_num = false;
    for word in msg.split_inclusive(|c: char| c.is_whitespace() || c == '/' || c == '=' || c == ':')
    {
        let core =
            word.trim_end_matches(|c: char| c.is_whitespace() || c == '/' || c == '=' || c == ':');
        let tail = &word[core.len()..];
        let is_id = core.len() >= 8 && core.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
        if is_id {
            out.push('N');
            out.push_str(tail);
            continue;
        }
        for c in word.chars() {
            if c.is_ascii_digit() {
                if !in_num {
                    out.push('N');
                }
                in_num = true;
            } else {
                in_num = false;
                out.push(c);
            }
        }
    }
    out.chars().take(160).collect()
}

/// A duration written in a text line: `took 1234ms`, `in 2.5s`, `duration=120ms`.
fn duration_in(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut best: Option<u64> = None;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric()) {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
                i += 1;
            }
            let num: f64 = lower[start..i].parse().unwrap_or(0.0);
            let rest = &lower[i..];
            let ms = if rest.starts_with("ms") {
                Some(num)
            } else if rest.starts_with('s')
                && !rest[1..].starts_with(|c: char| c.is_ascii_alphabetic())
            {
                Some(num * 1000.0)
            } else if rest.starts_with("min") {
                Some(num * 60_000.0)
            } else {
                None
            };
            if let Some(ms) = ms {
                best = Some(best.unwrap_or(0).max(ms as u64));
            }
        } else {
            i += 1;
        }
    }
    best
}

fn collect_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), CliError> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            collect_files(&e, out)?;
        }
    } else if path.is_file() {
        out.push(path.to_path_buf());
    } else {
        return Err(CliError::Input(format!(
            "{}: no such file or directory",
            path.display()
        )));
    }
    Ok(())
}

/// Reads every log file under `path` and summarises it.
pub fn analyse_logs(path: &Path, slow_ms: u64) -> Result<LogReport, CliError> {
    let mut files = Vec::new();
    collect_files(path, &mut files)?;
    let mut r = LogReport::default();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for f in &files {
        let bytes =
            std::fs::read(f).map_err(|e| CliError::Input(format!("{}: {e}", f.display())))?;
        let text = String::from_utf8_lossy(&bytes);
        r.files.push(f.display().to_string());
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            r.lines += 1;
            let (level, message, dur) = match serde_json::from_str::<serde_json::Value>(line) {
                Ok(serde_json::Value::Object(o)) => {
                    r.json_lines += 1;
                    let field = |keys: &[&str]| keys.iter().find_map(|k| o.get(*k));
                    let level = field(&["level", "severity", "lvl", "log.level"])
                        .and_then(|v| v.as_str())
                        .map(level_of)
                        .unwrap_or_else(|| level_of(line));
                    let message = field(&["msg", "message", "error", "event"])
                        .and_then(|v| v.as_str())
                        .unwrap_or(line)
                        .to_string();
                    let dur = field(&["duration_ms", "elapsed_ms", "latency_ms", "took_ms"])
                        .and_then(|v| v.as_f64())
                        .map(|v| v as u64)
                        .or_else(|| duration_in(&message));
                    (level, message, dur)
                }
                _ => (level_of(line), message_of(line), duration_in(line)),
            };
            *r.levels.entry(level.to_string()).or_default() += 1;
            if level == "error" {
                *errors.entry(shape(&message)).or_default() += 1;
            }
            if let Some(ms) = dur.filter(|ms| *ms >= slow_ms) {
                r.slow.push((
                    ms,
                    format!("{}:{}", f.display(), n + 1),
                    message.chars().take(120).collect(),
                ));
            }
        }
    }
    let mut top: Vec<(String, u64)> = errors.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(10);
    r.top_errors = top;
    r.slow.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    r.slow.truncate(10);
    Ok(r)
}

fn render_logs(r: &LogReport) -> String {
    let mut o = format!(
        "{} line(s) in {} file(s), {} of them JSON\n",
        thousands(r.lines),
        r.files.len(),
        thousands(r.json_lines)
    );
    o.push_str("By level: ");
    o.push_str(
        &r.levels
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    o.push('\n');
    if !r.top_errors.is_empty() {
        o.push_str("\nMost frequent errors:\n");
        for (msg, n) in &r.top_errors {
            o.push_str(&format!("  {n:>6}× {msg}\n"));
        }
    }
    if !r.slow.is_empty() {
        o.push_str("\nSlowest operations:\n");
        for (ms, loc, msg) in &r.slow {
            o.push_str(&format!("  {:>8} {loc}  {msg}\n", tool_duration(*ms)));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_group_by_shape() {
        assert_eq!(
            shape("timeout after 3000ms on shard 7"),
            "timeout after Nms on shard N"
        );
        assert_eq!(shape("request 9f8e7d6c5b4a failed"), "request N failed");
    }

    #[test]
    fn durations_in_text() {
        assert_eq!(duration_in("GET /orders took 1234ms"), Some(1234));
        assert_eq!(duration_in("finished in 2.5s"), Some(2500));
        assert_eq!(duration_in("took 2min"), Some(120_000));
        assert_eq!(duration_in("3 items, 45 users"), None);
        assert_eq!(duration_in("v1.2.3 ok"), None);
    }

    #[test]
    fn messages_of_text_lines() {
        assert_eq!(
            message_of("2026-11-30T10:00:02Z ERROR db timeout"),
            "db timeout"
        );
        assert_eq!(message_of("[WARN] slow"), "slow");
        assert_eq!(message_of("no level here"), "no level here");
    }

    #[test]
    fn levels() {
        assert_eq!(level_of("2026-11-30 ERROR db down"), "error");
        assert_eq!(level_of("thread 'main' panicked at"), "error");
        assert_eq!(level_of("WARN slow"), "warn");
        assert_eq!(level_of("hello"), "unknown");
    }
}
