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
const RECENT_IDS: usize = 512;

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
    /// line still being written is read next time). Returns the responses now
    /// complete; with `finish`, the held-back one too.
    pub fn catch_up(&mut self, path: &Path, finish: bool) -> std::io::Result<Vec<Usage>> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        if len < self.offset {
            // The file was replaced or cut: start again (counted ids prevent doubles).
            self.offset = 0;
        }
        f.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        f.take(len - self.offset).read_to_end(&mut buf)?;
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(nl) = buf
            .get(start..)
            .and_then(|b| b.iter().position(|&c| c == b'\n'))
        {
            let end = start + nl;
            if let Some(line) = buf.get(start..end)
                && let Some(u) = self.line(line)
            {
                out.push(u);
            }
            start = end + 1;
        }
        self.offset += start as u64;
        if finish && let Some(u) = self.finish() {
            out.push(u);
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
        let got = c.catch_up(&p, false).unwrap_or_default();
        assert!(got.is_empty(), "msg_a may still grow: {got:?}");
        // The rest of msg_b arrives: msg_a is complete (another response follows).
        writeln!(f, "{b}").ok();
        let got = c.catch_up(&p, false).unwrap_or_default();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].message_id.as_str(), got[0].output_tokens),
            ("msg_a", 9)
        );
        assert_eq!(got[0].request_id.as_deref(), Some("req_msg_a"));
        // A repeated line of msg_a later is not counted again; the end flushes msg_b.
        writeln!(f, "{}", line("msg_a", 9)).ok();
        let got = c.catch_up(&p, true).unwrap_or_default();
        let ids: Vec<_> = got.iter().map(|u| u.message_id.as_str()).collect();
        assert_eq!(ids, ["msg_b"]);
        assert_eq!(c.bad_lines, 0);
        assert_eq!(
            c.offset,
            std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0)
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
