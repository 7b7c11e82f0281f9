//! Token usage from a Claude Code transcript (JSON Lines under the config directory's
//! `projects/`).
//!
//! One model response is written as several lines (one per content block) that share
//! `message.id` (and `requestId`, where the version writes it): it is counted once,
//! with the usage of its last line. A hook reads the transcript from the offset it
//! kept, and the transcript may lag the hook, so the response whose lines are being
//! written is held back until a later line shows it is complete, or until the session
//! stops ([`Cursor::finish`]).

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde::{Deserialize, Serialize};
use tacho_schema::LlmResponse;

/// How many recently counted response ids a cursor remembers, so that a line of an
/// already counted response seen again is not counted twice.
pub const RECENT_IDS: usize = 512;

/// One model response, as counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub message_id: String,
    pub request_id: Option<String>,
    pub model: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub stop_reason: Option<String>,
    /// The time of its last line, in ns since the epoch, when the line has one.
    pub time_unix_ns: Option<i64>,
}

impl Usage {
    pub fn event(&self) -> LlmResponse {
        LlmResponse {
            request_id: self
                .request_id
                .clone()
                .unwrap_or_else(|| self.message_id.clone()),
            response_id: Some(self.message_id.clone()),
            model: self.model.clone(),
            tokens_in: self.input_tokens,
            tokens_out: self.output_tokens,
            cache_read: self.cache_read,
            cache_write: self.cache_write,
            latency_ms: None,
            stop_reason: self.stop_reason.clone(),
            error: None,
        }
    }
}

/// Where reading a transcript stopped, kept between hook processes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Bytes read: the end of the last complete line.
    pub offset: u64,
    /// The response whose lines may not all be written yet.
    pub pending: Option<Usage>,
    /// Ids of responses already counted (the most recent ones).
    pub counted: Vec<String>,
    /// Lines that were not JSON (a transcript cut mid-line is only read to its last
    /// complete line, so these are damaged lines).
    pub bad_lines: u64,
    /// Codex: the session's cumulative usage so far (input, cached input, cache
    /// writes, output, total), whose increases are counted.
    #[serde(default)]
    pub codex_total: Option<[u64; 5]>,
    /// Codex: the model of the current turn.
    #[serde(default)]
    pub model: Option<String>,
}

/// What a Codex tool call returned, from its rollout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallOutput {
    pub exit_code: Option<i64>,
    pub output: String,
}

/// What reading a transcript gained.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caught {
    pub usages: Vec<Usage>,
    /// Codex: tool outputs by call id.
    pub outputs: Vec<(String, CallOutput)>,
}

/// Reads Codex's text of a command's output: "Process exited with code N" and what
/// follows "Output:".
pub fn codex_call_output(text: &str) -> CallOutput {
    let exit_code = text.lines().find_map(|l| {
        l.trim()
            .strip_prefix("Process exited with code ")
            .and_then(|n| n.trim().parse().ok())
    });
    let output = match text.find("\nOutput:\n") {
        Some(i) if exit_code.is_some() => {
            text.get(i + "\nOutput:\n".len()..).unwrap_or("").to_owned()
        }
        _ => text.to_owned(),
    };
    CallOutput { exit_code, output }
}

/// Reads the model response of one transcript line, if it is one.
pub fn usage_of(entry: &serde_json::Value) -> Option<Usage> {
    if entry.get("type").and_then(|t| t.as_str()) != Some("assistant") {
        return None;
    }
    let msg = entry.get("message")?;
    let id = msg.get("id")?.as_str()?;
    let usage = msg.get("usage")?;
    let n = |k: &str| usage.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    let s = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
    Some(Usage {
        message_id: id.to_owned(),
        request_id: s(entry.get("requestId")),
        model: s(msg.get("model")),
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cache_read: n("cache_read_input_tokens"),
        cache_write: n("cache_creation_input_tokens"),
        stop_reason: s(msg.get("stop_reason")),
        time_unix_ns: entry
            .get("timestamp")
            .and_then(|t| tacho_schema::parse_ts(t).ok()),
    })
}

impl Cursor {
    /// Feeds one complete line of a Codex rollout: usage is counted from increases of
    /// `total_token_usage` (Codex counts cached input inside input, and reasoning
    /// inside output; tacho's input excludes cache reads, as Anthropic's does), tool
    /// outputs are returned by call id.
    pub fn codex_line(&mut self, line: &[u8]) -> (Option<Usage>, Option<(String, CallOutput)>) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return (None, None);
        }
        let Ok(entry) = serde_json::from_slice::<serde_json::Value>(line) else {
            self.bad_lines += 1;
            return (None, None);
        };
        let payload = entry.get("payload");
        let ptype = payload.and_then(|p| p.get("type")).and_then(|t| t.as_str());
        match (entry.get("type").and_then(|t| t.as_str()), ptype) {
            (Some("turn_context"), _) => {
                if let Some(m) = payload
                    .and_then(|p| p.get("model"))
                    .and_then(|m| m.as_str())
                {
                    self.model = Some(m.to_owned());
                }
                (None, None)
            }
            (Some("event_msg"), Some("token_count")) => {
                let Some(t) = payload.and_then(|p| p.pointer("/info/total_token_usage")) else {
                    return (None, None);
                };
                let n = |k: &str| t.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
                let now = [
                    n("input_tokens"),
                    n("cached_input_tokens"),
                    n("cache_write_input_tokens"),
                    n("output_tokens"),
                    n("total_tokens"),
                ];
                let last = self.codex_total.unwrap_or_default();
                if now[4] <= last[4] {
                    return (None, None); // a repeat, or no new usage
                }
                self.codex_total = Some(now);
                let d = |i: usize| now[i].saturating_sub(last[i]);
                let id = format!("codex-usage-{}", now[4]);
                self.counted.push(id.clone());
                if self.counted.len() > RECENT_IDS {
                    let extra = self.counted.len() - RECENT_IDS;
                    self.counted.drain(..extra);
                }
                let usage = Usage {
                    message_id: id,
                    request_id: None,
                    model: self.model.clone(),
                    input_tokens: d(0).saturating_sub(d(1)),
                    output_tokens: d(3),
                    cache_read: d(1),
                    cache_write: d(2),
                    stop_reason: None,
                    time_unix_ns: entry
                        .get("timestamp")
                        .and_then(|t| tacho_schema::parse_ts(t).ok()),
                };
                (Some(usage), None)
            }
            (Some("response_item"), Some("function_call_output" | "custom_tool_call_output")) => {
                let Some(p) = payload else {
                    return (None, None);
                };
                let Some(id) = p.get("call_id").and_then(|c| c.as_str()) else {
                    return (None, None);
                };
                let text = match p.get("output") {
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(other) => other
                        .get("content")
                        .and_then(|c| c.as_str())
                        .map_or_else(|| other.to_string(), str::to_owned),
                    None => String::new(),
                };
                (None, Some((id.to_owned(), codex_call_output(&text))))
            }
            _ => (None, None),
        }
    }

    /// Feeds one complete line; returns a response that is now complete.
    pub fn line(&mut self, line: &[u8]) -> Option<Usage> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let Ok(entry) = serde_json::from_slice::<serde_json::Value>(line) else {
            self.bad_lines += 1;
            return None;
        };
        let u = usage_of(&entry)?;
        match &mut self.pending {
            Some(p) if p.message_id == u.message_id => {
                // A later line of the same response: its usage is the final one.
                *p = u;
                None
            }
            _ => {
                let done = self.pending.replace(u);
                done.and_then(|d| self.count(d))
            }
        }
    }

    /// The held-back response, at the end of a session (or of an import).
    pub fn finish(&mut self) -> Option<Usage> {
        let p = self.pending.take()?;
        self.count(p)
    }

    fn count(&mut self, u: Usage) -> Option<Usage> {
        if self.counted.contains(&u.message_id) {
            return None;
        }
        self.counted.push(u.message_id.clone());
        if self.counted.len() > RECENT_IDS {
            let extra = self.counted.len() - RECENT_IDS;
            self.counted.drain(..extra);
        }
        Some(u)
    }

    /// Reads what the transcript gained since the last call: complete lines only (a
    /// line still being written is read next time). `codex` reads a Codex rollout
    /// instead of a Claude Code transcript. With `finish`, the response held back is
    /// counted too.
    pub fn catch_up(&mut self, path: &Path, finish: bool, codex: bool) -> std::io::Result<Caught> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        if len < self.offset {
            // The file was replaced or cut: start again (counted ids prevent doubles).
            self.offset = 0;
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        f.take(len - self.offset).read_to_end(&mut buf)?;
        let mut out = Caught::default();
        let mut start = 0;
        while let Some(nl) = buf
            .get(start..)
            .and_then(|b| b.iter().position(|&c| c == b'\n'))
        {
            let end = start + nl;
            if let Some(line) = buf.get(start..end) {
                if codex {
                    let (u, o) = self.codex_line(line);
                    out.usages.extend(u);
                    out.outputs.extend(o);
                } else if let Some(u) = self.line(line) {
                    out.usages.push(u);
                }
            }
            start = end + 1;
        }
        self.offset += start as u64;
        if finish && let Some(u) = self.finish() {
            out.usages.push(u);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn line(id: &str, out: u64) -> String {
        format!(
            r#"{{"type":"assistant","timestamp":"2026-11-20T09:00:00Z","requestId":"req_{id}","message":{{"id":"{id}","model":"m","usage":{{"input_tokens":10,"output_tokens":{out},"cache_read_input_tokens":3,"cache_creation_input_tokens":2}}}}}}"#
        )
    }

    #[test]
    fn a_response_spanning_lines_is_counted_once_with_its_last_usage() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join("t.jsonl");
        let mut f = std::fs::File::create(&p).unwrap_or_else(|e| panic!("{e}"));
        let mut c = Cursor::default();
        // Two lines of msg_a, then half a line of msg_b.
        write!(
            f,
            "{}\n{}\n{{\"type\":\"user\"}}\n",
            line("msg_a", 5),
            line("msg_a", 9)
        )
        .ok();
        let half = line("msg_b", 4);
        let (a, b) = half.split_at(30);
        write!(f, "{a}").ok();
        let got = c
            .catch_up(&p, false, false)
            .map(|c| c.usages)
            .unwrap_or_default();
        assert!(got.is_empty(), "msg_a may still grow: {got:?}");
        // The rest of msg_b arrives: msg_a is complete (another response follows).
        writeln!(f, "{b}").ok();
        let got = c
            .catch_up(&p, false, false)
            .map(|c| c.usages)
            .unwrap_or_default();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].message_id.as_str(), got[0].output_tokens),
            ("msg_a", 9)
        );
        assert_eq!(got[0].request_id.as_deref(), Some("req_msg_a"));
        // A repeated line of msg_a later is not counted again; the end flushes msg_b.
        writeln!(f, "{}", line("msg_a", 9)).ok();
        let got = c
            .catch_up(&p, true, false)
            .map(|c| c.usages)
            .unwrap_or_default();
        let ids: Vec<_> = got.iter().map(|u| u.message_id.as_str()).collect();
        assert_eq!(ids, ["msg_b"]);
        assert_eq!(c.bad_lines, 0);
        assert_eq!(
            c.offset,
            std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0)
        );
    }

    #[test]
    fn codex_usage_is_counted_from_increases_of_the_total() {
        let tc = |input: u64, cached: u64, out: u64| {
            format!(
                r#"{{"timestamp":"2026-11-20T09:00:00Z","type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{input},"cached_input_tokens":{cached},"output_tokens":{out},"reasoning_output_tokens":1,"total_tokens":{}}}}}}}}}"#,
                input + out
            )
        };
        let mut c = Cursor::default();
        let (u, _) = c.codex_line(tc(1000, 400, 50).as_bytes());
        let u = u.unwrap_or_else(|| panic!("first usage"));
        assert_eq!(
            (u.input_tokens, u.cache_read, u.output_tokens),
            (600, 400, 50)
        );
        // Repeated (the same total): not counted again.
        assert!(c.codex_line(tc(1000, 400, 50).as_bytes()).0.is_none());
        let (u, _) = c.codex_line(tc(2500, 900, 80).as_bytes());
        let u = u.unwrap_or_else(|| panic!("second usage"));
        assert_eq!(
            (u.input_tokens, u.cache_read, u.output_tokens),
            (1000, 500, 30)
        );
        let out = br#"{"type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"Chunk ID: x\nProcess exited with code 3\nOutput:\nboom\n"}}"#;
        let (_, o) = c.codex_line(out);
        assert_eq!(
            o,
            Some((
                "c1".to_string(),
                CallOutput {
                    exit_code: Some(3),
                    output: "boom\n".into()
                }
            ))
        );
    }

    #[test]
    fn damaged_lines_are_counted_and_skipped() {
        let mut c = Cursor::default();
        assert!(c.line(b"{not json").is_none());
        assert!(c.line(line("m1", 1).as_bytes()).is_none());
        assert_eq!(c.bad_lines, 1);
        assert_eq!(c.finish().map(|u| u.message_id), Some("m1".into()));
    }
}
