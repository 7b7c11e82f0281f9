//! Token usage from a Claude Code transcript (JSON Lines under the config directory's
//! `projects/`).
//!
//! One model response is written as several lines (one per content block) that share
//! `message.id` (and `requestId`, where the version writes it): it is counted once,
//! with the usage of its last line. A hook reads the transcript from the offset it
//! kept, and the transcript may lag the hook, so the response whose lines are being
//! written is held back until a later line shows it is complete, or until the session
//! stops ([`Cursor::finish`]).
//!
//! A transcript path comes from the agent's payload, so it is read as untrusted: it
//! is opened without blocking and must be a regular file ([`open_transcript`]); one
//! call reads at most [`READ_BYTES_MAX`] bytes from the kept offset (the next call
//! goes on), and a line longer than [`LINE_BYTES_MAX`] is skipped as damaged without
//! being held in memory.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};
use tacho_schema::LlmResponse;

/// How many recently counted response ids a cursor remembers, so that a line of an
/// already counted response seen again is not counted twice.
const RECENT_IDS: usize = 512;

/// At most this many bytes of a transcript are read by one [`Cursor::catch_up`]; what
/// lies beyond is read by the next calls.
pub const READ_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// A transcript line longer than this is skipped (counted as damaged).
pub const LINE_BYTES_MAX: usize = 32 * 1024 * 1024;

/// How many bytes before the kept offset are compared to tell a transcript that grew
/// from one that was rewritten.
const TAIL_BYTES: u64 = 4096;

/// What a file is, in words, when it is not a regular file.
fn kind_of(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

/// Why `path`, of type `ft`, cannot be a transcript; `None` for a regular file.
pub fn not_a_transcript(path: &Path, ft: std::fs::FileType) -> Option<String> {
    (!ft.is_file()).then(|| {
        format!(
            "{} is {}, not a transcript file",
            path.display(),
            kind_of(ft)
        )
    })
}

/// Opens a transcript for reading without ever blocking: `O_NONBLOCK` (opening a FIFO
/// with no writer would wait forever), `O_NOCTTY`, and then the descriptor's own type
/// must be a regular file — anything else is refused with an `InvalidInput` error that
/// names the path and what it is.
pub fn open_transcript(path: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::OFlags;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC).bits() as i32)
        .open(path)?;
    let ft = f.metadata()?.file_type();
    if let Some(why) = not_a_transcript(path, ft) {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, why));
    }
    Ok(f)
}

/// A whole transcript file (for imports), opened as [`open_transcript`] does.
pub fn read_transcript_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut f = open_transcript(path)?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A small JSON document an agent keeps beside its transcript (Factory Droid's
/// `<id>.settings.json`, Claude Code's `agent-<id>.meta.json`), opened as a transcript
/// is (a regular file, without blocking) and read up to [`SIDE_FILE_BYTES_MAX`]: a
/// bigger one is not the agent's.
pub fn read_side_json(path: &Path) -> std::io::Result<serde_json::Value> {
    let mut f = open_transcript(path)?;
    let mut bytes = Vec::new();
    (&mut f).take(SIDE_FILE_BYTES_MAX).read_to_end(&mut bytes)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// At most this many bytes of a file beside a transcript are read.
pub const SIDE_FILE_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// The first newline of `bytes`. Blocks without one are passed over with
/// `<[u8]>::contains`, which runs std's word-at-a-time search (fast even in a build
/// without optimisations, which the tests run); only a block holding one is looked
/// into byte by byte.
fn newline(bytes: &[u8]) -> Option<usize> {
    let mut base = 0;
    for block in bytes.chunks(4096) {
        if block.contains(&b'\n') {
            return block.iter().position(|&c| c == b'\n').map(|p| base + p);
        }
        base += block.len();
    }
    None
}

/// FNV-1a, 64 bits.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

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
    /// FNV-1a of the (up to 4,096) bytes before `offset`: when they differ, the
    /// transcript was rewritten, not appended to.
    #[serde(default)]
    pub tail: Option<u64>,
    /// Inside a line longer than [`LINE_BYTES_MAX`], skipped up to its newline.
    #[serde(default)]
    pub skipping: bool,
    /// After a rewrite, the offset up to which lines may repeat responses counted
    /// before it (more than the recent ids remember): the caller checks them against
    /// what it recorded ([`Caught::rewritten`]).
    #[serde(default)]
    pub recheck_until: u64,
    /// Factory Droid: the tool uses read so far (its hooks number calls by order).
    #[serde(default)]
    pub calls_seen: u64,
    /// Factory Droid: the calls read without their result yet, the model's id → the
    /// hook's (`call-<n>`).
    #[serde(default)]
    pub open_calls: std::collections::BTreeMap<String, String>,
    /// Claude Code: the request each recent response id came with, first seen (the
    /// most recent [`RECENT_IDS`]): a line of the same response id from another
    /// request is a replay the API billed again (`/btw`).
    #[serde(default)]
    pub requests: Vec<(String, String)>,
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
    /// The transcript was rewritten and is being read again from its start: the
    /// usages may hold responses counted long ago, which the caller must drop by
    /// their ids.
    pub rewritten: bool,
    /// Bytes of the transcript left unread by this call ([`READ_BYTES_MAX`]).
    pub behind: u64,
    /// The ids of the tool calls the messages read make (Claude Code's `tool_use`
    /// blocks, Codex's call items): what confirms that a call the hooks reported was
    /// the agent's.
    pub call_ids: Vec<String>,
}

/// The ids of the tool calls an assistant message of a transcript makes (Claude
/// Code's `{"type":"assistant","message":{"content":[{"type":"tool_use","id":…}]}}`,
/// Qwen Code's `{"message":{"parts":[{"functionCall":{"id":…}}]}}`).
pub fn tool_use_ids(entry: &serde_json::Value) -> impl Iterator<Item = String> + '_ {
    let message = entry.get("message");
    let blocks = |key: &str| {
        message
            .and_then(|m| m.get(key))
            .and_then(|c| c.as_array())
            .into_iter()
            .flatten()
    };
    let claude = blocks("content")
        .filter(|b| b.get("type").and_then(|t| t.as_str()) == Some("tool_use"))
        .filter_map(|b| b.get("id"));
    let qwen = blocks("parts").filter_map(|b| b.get("functionCall")?.get("id"));
    claude
        .chain(qwen)
        .filter_map(|i| i.as_str().map(str::to_owned))
}

/// Reads Codex's text of a command's output: "Process exited with code N" and what
/// follows "Output:".
pub fn codex_call_output(text: &str) -> CallOutput {
    // The header before `Output:` only: what the command printed says nothing. Codex
    // says `Process exited with code N` (`exec_command`) or, from 0.118 on,
    // `Exit code: N` (`shell_command`, issue 43: fifteen failed runs read as passed).
    let header = text.split("\nOutput:\n").next().unwrap_or(text);
    let exit_code = header.lines().find_map(|l| {
        let l = l.trim();
        l.strip_prefix("Process exited with code ")
            .or_else(|| l.strip_prefix("Exit code: "))
            .and_then(|n| n.trim().parse().ok())
    });
    let output = match text.find("\nOutput:\n") {
        Some(i) if exit_code.is_some() => {
            text.get(i + "\nOutput:\n".len()..).unwrap_or("").to_owned()
        }
        _ => text.to_owned(),
    };
    // A patch Codex refused says so in words, with no exit code of its own (issue 43:
    // fourteen phantom edits of patches never applied): it failed.
    let exit_code = exit_code.or_else(|| {
        text.trim_start()
            .starts_with("apply_patch verification failed")
            .then_some(1)
    });
    CallOutput { exit_code, output }
}

/// Reads the model response of one transcript line, if it is one: Claude Code's
/// `message.usage`, Qwen Code's `usageMetadata` (one line per reply, named by its
/// `uuid`; Gemini's counts, whose prompt count includes the cached tokens), Gemini
/// CLI's `tokens` on a `gemini` message ([`crate::gemini::usage`]), or Copilot's
/// `session.usage_record` ([`crate::copilot::usage_record`]).
pub fn usage_of(entry: &serde_json::Value) -> Option<Usage> {
    match entry.get("type").and_then(|t| t.as_str()) {
        Some("assistant") => {}
        Some("gemini") => return crate::gemini::usage(entry),
        Some("session.usage_record") => return crate::copilot::usage_record(entry),
        _ => return None,
    }
    let s = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
    if let Some(meta) = entry.get("usageMetadata") {
        let n = |k: &str| meta.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
        let cached = n("cachedContentTokenCount");
        return Some(Usage {
            message_id: entry.get("uuid")?.as_str()?.to_owned(),
            request_id: None,
            model: s(entry.get("model")),
            input_tokens: n("promptTokenCount").saturating_sub(cached),
            // Qwen's `candidatesTokenCount` is the API's completion tokens, its
            // reasoning (`thoughtsTokenCount`) included.
            output_tokens: n("candidatesTokenCount"),
            cache_read: cached,
            cache_write: 0,
            stop_reason: None,
            time_unix_ns: entry
                .get("timestamp")
                .and_then(|t| tacho_schema::parse_ts(t).ok()),
        });
    }
    let msg = entry.get("message")?;
    let id = msg.get("id")?.as_str()?;
    let usage = msg.get("usage")?;
    let n = |k: &str| usage.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
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
        self.codex_line_calls(line, &mut Vec::new())
    }

    /// [`Cursor::codex_line`], with the id of the tool call the line makes (a
    /// `function_call`, `custom_tool_call` or `local_shell_call` item's `call_id`, the
    /// id Codex's hooks report) added to `calls`.
    fn codex_line_calls(
        &mut self,
        line: &[u8],
        calls: &mut Vec<String>,
    ) -> (Option<Usage>, Option<(String, CallOutput)>) {
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
                self.remember(&id);
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
            (
                Some("response_item"),
                Some("function_call" | "custom_tool_call" | "local_shell_call"),
            ) => {
                if let Some(id) = payload
                    .and_then(|p| p.get("call_id"))
                    .and_then(|c| c.as_str())
                {
                    calls.push(id.to_owned());
                }
                (None, None)
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
        self.line_calls(line, &mut Vec::new())
    }

    /// [`Cursor::line`], with the ids of the tool calls the line's message makes
    /// (Claude Code's `tool_use` blocks) added to `calls`.
    fn line_calls(&mut self, line: &[u8], calls: &mut Vec<String>) -> Option<Usage> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let Ok(entry) = serde_json::from_slice::<serde_json::Value>(line) else {
            self.bad_lines += 1;
            return None;
        };
        calls.extend(tool_use_ids(&entry));
        let mut u = usage_of(&entry)?;
        // A side question (`/btw`) replays a response: the same message id from another
        // request, which the API billed again. It is a response of its own,
        // `<message id>@<request id>` (ccusage counts the message once).
        if let Some(req) = u.request_id.clone() {
            match self.requests.iter().find(|(id, _)| *id == u.message_id) {
                Some((_, first)) if *first != req => {
                    u.message_id = format!("{}@{req}", u.message_id);
                }
                Some(_) => {}
                None => {
                    self.requests.push((u.message_id.clone(), req));
                    if self.requests.len() > RECENT_IDS {
                        let extra = self.requests.len() - RECENT_IDS;
                        self.requests.drain(..extra);
                    }
                }
            }
        }
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
        self.remember(&u.message_id).then_some(u)
    }

    /// Remembers a response id as counted (the most recent `RECENT_IDS` are kept);
    /// false when it was counted already.
    pub fn remember(&mut self, id: &str) -> bool {
        if self.counted.iter().any(|c| c == id) {
            return false;
        }
        self.counted.push(id.to_owned());
        if self.counted.len() > RECENT_IDS {
            let extra = self.counted.len() - RECENT_IDS;
            self.counted.drain(..extra);
        }
        true
    }

    /// Reads what the transcript gained since the last call: complete lines only (a
    /// line still being written is read next time), at most [`READ_BYTES_MAX`] bytes
    /// (the next call goes on). `codex` reads a Codex rollout instead of a Claude Code
    /// transcript. With `finish`, the response held back is counted too, once the
    /// whole transcript is read.
    ///
    /// A transcript shorter than the offset, or whose bytes before the offset are no
    /// longer those read, was rewritten: it is read again from its start, and
    /// [`Caught::rewritten`] says its responses must be checked against those counted.
    pub fn catch_up(&mut self, path: &Path, finish: bool, codex: bool) -> std::io::Result<Caught> {
        let mut f = open_transcript(path)?;
        let len = f.metadata()?.len();
        let mut out = Caught::default();
        if self.offset > 0 && !self.same_prefix(&f, len) {
            self.recheck_until = self.recheck_until.max(self.offset);
            self.offset = 0;
            self.skipping = false;
        }
        out.rewritten = self.offset < self.recheck_until;
        f.seek(SeekFrom::Start(self.offset))?;
        let budget = len.saturating_sub(self.offset).min(READ_BYTES_MAX);
        let mut reader = f.by_ref().take(budget);
        let mut chunk = vec![0u8; (budget as usize).clamp(1, 1 << 20)];
        // The line being gathered (its start is at `self.offset`).
        let mut line: Vec<u8> = Vec::new();
        loop {
            let n = match reader.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let mut rest = chunk.get(..n).unwrap_or_default();
            while let Some(nl) = newline(rest) {
                let (head, tail) = rest.split_at(nl);
                let consumed = (line.len() + head.len() + 1) as u64;
                if self.skipping {
                    self.skipping = false;
                    self.bad_lines += 1;
                } else if line.is_empty() {
                    self.feed(head, codex, &mut out);
                } else if line.len() + head.len() > LINE_BYTES_MAX {
                    self.bad_lines += 1;
                } else {
                    line.extend_from_slice(head);
                    self.feed(&line, codex, &mut out);
                }
                self.offset += consumed;
                line.clear();
                rest = tail.get(1..).unwrap_or_default();
            }
            if self.skipping {
                self.offset += rest.len() as u64;
            } else if line.len() + rest.len() > LINE_BYTES_MAX {
                // Too long to be a line worth holding: skipped up to its newline,
                // which a later call may be the one to meet.
                self.offset += (line.len() + rest.len()) as u64;
                line = Vec::new();
                self.skipping = true;
            } else {
                line.extend_from_slice(rest);
            }
        }
        // At the end (a session's stop, an import), a last line complete but for its
        // newline is read too (issue 43: a cut rollout lost its last response): a
        // whole JSON value, which a line still being written is not.
        if finish
            && !self.skipping
            && !line.is_empty()
            && self.offset + line.len() as u64 == len
            && serde_json::from_slice::<serde::de::IgnoredAny>(&line).is_ok()
        {
            self.feed(&line, codex, &mut out);
            self.offset += line.len() as u64;
            line.clear();
        }
        out.behind = len.saturating_sub(self.offset + line.len() as u64);
        self.tail = self.tail_hash(&f)?;
        if self.offset >= self.recheck_until {
            self.recheck_until = 0;
        }
        // The held-back response is complete only once nothing is left unread.
        if finish
            && out.behind == 0
            && let Some(u) = self.finish()
        {
            out.usages.push(u);
        }
        Ok(out)
    }

    /// Feeds one complete line into what this call gained.
    fn feed(&mut self, line: &[u8], codex: bool, out: &mut Caught) {
        if codex {
            let (u, o) = self.codex_line_calls(line, &mut out.call_ids);
            out.usages.extend(u);
            out.outputs.extend(o);
        } else if let Some(u) = self.line_calls(line, &mut out.call_ids) {
            out.usages.push(u);
        }
    }

    /// FNV-1a of the bytes of `f` before the offset (up to [`TAIL_BYTES`]).
    fn tail_hash(&self, f: &std::fs::File) -> std::io::Result<Option<u64>> {
        if self.offset == 0 {
            return Ok(None);
        }
        let n = self.offset.min(TAIL_BYTES);
        let mut buf = vec![0u8; n as usize];
        match f.read_exact_at(&mut buf, self.offset - n) {
            Ok(()) => Ok(Some(fnv1a(&buf))),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether `f` (of `len` bytes) still holds what was read before the offset: it
    /// is at least that long and ends there as it did. A cursor kept by an earlier
    /// version has no tail to compare: only the length is checked.
    fn same_prefix(&self, f: &std::fs::File, len: u64) -> bool {
        if len < self.offset {
            return false;
        }
        match self.tail {
            None => true,
            Some(h) => matches!(self.tail_hash(f), Ok(Some(now)) if now == h),
        }
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

    /// Issue 43: a side question (`/btw`) replays a response — the same message id,
    /// another request id — and the API bills the request again: it is counted as a
    /// response of its own; a later line of either request is not counted again.
    #[test]
    fn a_replay_from_another_request_is_billed_again() {
        let with_request =
            |id: &str, req: &str, out: u64| line(id, out).replace(&format!("req_{id}"), req);
        let mut c = Cursor::default();
        let mut got = Vec::new();
        for l in [
            with_request("msg_a", "req_1", 5),
            with_request("msg_a", "req_1", 9),
            with_request("msg_a", "req_2", 7),
            with_request("msg_a", "req_1", 9),
            with_request("msg_b", "req_3", 2),
        ] {
            got.extend(c.line(l.as_bytes()));
        }
        got.extend(c.finish());
        let ids: Vec<(&str, u64)> = got
            .iter()
            .map(|u| (u.message_id.as_str(), u.output_tokens))
            .collect();
        assert_eq!(ids, [("msg_a", 9), ("msg_a@req_2", 7), ("msg_b", 2)]);
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
        // A patch Codex refused to apply: failed, so it edits nothing.
        let o = codex_call_output(
            "apply_patch verification failed: Failed to find expected lines in src/x.rs",
        );
        assert_eq!(o.exit_code, Some(1));
        // Codex 0.118's `shell_command` header; a line the command printed is no header.
        let o = codex_call_output("Exit code: 1\nWall time: 0.2 seconds\nOutput:\nFAILED\n");
        assert_eq!((o.exit_code, o.output.as_str()), (Some(1), "FAILED\n"));
        let o = codex_call_output("Exit code: 0\nWall time: 0 seconds\nOutput:\nExit code: 9\n");
        assert_eq!(o.exit_code, Some(0));
        let o =
            codex_call_output("Process exited with code 0\nOutput:\nProcess exited with code 4\n");
        assert_eq!(o.exit_code, Some(0));
    }

    /// Issue 43: at a session's end, a last line complete but for its newline is read
    /// (once); before the end it waits for its newline.
    #[test]
    fn a_whole_last_line_is_read_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let line = |id: &str, out: u64| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"{id}","usage":{{"input_tokens":1,"output_tokens":{out}}}}}}}"#
            )
        };
        std::fs::write(&path, format!("{}\n{}", line("a", 1), line("b", 2))).unwrap();
        let mut c = Cursor::default();
        let early = c.catch_up(&path, false, false).unwrap();
        assert_eq!(
            early.usages.len(),
            0,
            "a is held back, b has no newline yet"
        );
        let end = c.catch_up(&path, true, false).unwrap();
        let outs: Vec<u64> = end.usages.iter().map(|u| u.output_tokens).collect();
        assert_eq!(outs, [1, 2]);
        assert_eq!(c.catch_up(&path, true, false).unwrap().usages.len(), 0);
    }

    /// Runs `f` on a thread of its own; `None` when it has not returned after 5 s
    /// (the thread is left behind: the test fails anyway).
    fn within_5s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(5)).ok()
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join("t.jsonl");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &p,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap_or_else(|e| panic!("mkfifo: {e}"));
        let q = p.clone();
        let got = within_5s(move || Cursor::default().catch_up(&q, true, false).map(|_| ()))
            .unwrap_or_else(|| panic!("catch_up of a FIFO blocked"));
        let e = got
            .err()
            .unwrap_or_else(|| panic!("a FIFO was read as a transcript"));
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(
            e.to_string().contains("is a FIFO, not a transcript file"),
            "{e}"
        );
        let q = p.clone();
        let got = within_5s(move || read_transcript_file(&q).map(|_| ()))
            .unwrap_or_else(|| panic!("reading a FIFO blocked"));
        assert!(got.is_err());
    }

    #[test]
    fn one_call_reads_a_bounded_part_and_skips_an_endless_line() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join("t.jsonl");
        let mib = 1024 * 1024u64;
        {
            // 100 MiB of zeros (sparse, no disk), a newline, then one response.
            let mut f = std::fs::File::create(&p).unwrap_or_else(|e| panic!("{e}"));
            f.set_len(100 * mib).unwrap_or_else(|e| panic!("{e}"));
            f.seek(SeekFrom::End(0)).unwrap_or_else(|e| panic!("{e}"));
            write!(f, "\n{}\n{}\n", line("m1", 1), line("m2", 2)).ok();
        }
        let mut c = Cursor::default();
        let got = c
            .catch_up(&p, true, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(got.usages.is_empty());
        assert_eq!(c.offset, 64 * mib, "one call reads at most 64 MiB");
        let got = c
            .catch_up(&p, true, false)
            .unwrap_or_else(|e| panic!("{e}"));
        let ids: Vec<_> = got.usages.iter().map(|u| u.message_id.as_str()).collect();
        assert_eq!(ids, ["m1", "m2"]);
        assert_eq!(c.bad_lines, 1, "the endless line is one damaged line");
    }

    #[test]
    fn a_rewritten_transcript_is_read_again_and_said_so() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join("t.jsonl");
        let text: String = (0..3).map(|i| line(&format!("m{i}"), i) + "\n").collect();
        std::fs::write(&p, &text).unwrap_or_else(|e| panic!("{e}"));
        let mut c = Cursor::default();
        let got = c
            .catch_up(&p, false, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!got.rewritten);
        // Appended to: read on from the offset.
        let grown = text.clone() + &line("m3", 3) + "\n";
        std::fs::write(&p, &grown).unwrap_or_else(|e| panic!("{e}"));
        let got = c
            .catch_up(&p, false, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!got.rewritten);
        // Rewritten, longer than the offset but different before it.
        let other: String = (0..6).map(|i| line(&format!("x{i}"), i) + "\n").collect();
        std::fs::write(&p, &other).unwrap_or_else(|e| panic!("{e}"));
        let got = c
            .catch_up(&p, false, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(got.rewritten);
        let ids: Vec<_> = got.usages.iter().map(|u| u.message_id.as_str()).collect();
        assert_eq!(ids, ["m3", "x0", "x1", "x2", "x3", "x4"]);
        assert_eq!(
            c.bad_lines, 0,
            "read from its start, not from the middle of a line"
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
