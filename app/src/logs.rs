//! `session trace --logs`: conventional log files (JSON Lines or text) analysed for
//! operational problems: lines by level, errors by message shape, the slowest
//! operations.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::kinds;

/// Why the logs could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LogsError {
    #[error("{}: no such file or directory", .0.display())]
    Missing(PathBuf),
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

kinds!(LogsError {
    LogsError::Missing(_) => Input,
    LogsError::Read { .. } => Io,
});

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

fn collect_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), LogsError> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|source| LogsError::Read {
                path: path.to_path_buf(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for e in entries {
            collect_files(&e, out)?;
        }
    } else if path.is_file() {
        out.push(path.to_path_buf());
    } else {
        return Err(LogsError::Missing(path.to_path_buf()));
    }
    Ok(())
}

/// Reads every log file under `path` and summarises it.
pub fn analyse_logs(path: &Path, slow_ms: u64) -> Result<LogReport, LogsError> {
    let mut files = Vec::new();
    collect_files(path, &mut files)?;
    let mut r = LogReport::default();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for f in &files {
        let bytes = std::fs::read(f).map_err(|source| LogsError::Read {
            path: f.clone(),
            source,
        })?;
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
