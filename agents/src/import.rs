//! What already happened: a Claude Code transcript read into tacho's events.
//!
//! A transcript is JSON Lines; the entries read are `user` (prompts, and the results
//! of tool calls) and `assistant` (tool calls, and model usage, counted once per
//! `message.id` as [`crate::transcript`] does). Every other entry type is known noise
//! (`attachment`, `system`, `summary`, …) or new: both are counted by type and
//! reported, never fatal. A line that is not JSON is counted as damaged; a last line
//! without its newline is still being written (or was cut) and is left for the next
//! import.
//!
//! Importing is idempotent because every event carries the agent's own id (tool call
//! ids, response ids, prompt ids): the application layer appends only events whose id
//! the session does not hold yet.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use tacho_schema::{
    AgentNotice, EditOp, EventBody, FileEdit, SessionStart, ToolCall, ToolResult, ToolStatus,
};

use crate::transcript::{Cursor, usage_of};
use crate::{Agent, session_id_from};

/// One transcript, read.
#[derive(Debug, Clone, Default)]
pub struct Transcript {
    pub session: String,
    /// The session this one is a subagent of.
    pub parent: Option<String>,
    pub workspace: Option<String>,
    /// Events in transcript order: (time in ns since the epoch, body).
    pub events: Vec<(i64, EventBody)>,
    /// Entries not recorded, by type (known noise and unknown types alike).
    pub skipped: BTreeMap<String, u64>,
    /// Of those, the entry types this tacho does not know (by type): what a frontend
    /// says is new, decided here, not by reading the labels of `skipped`.
    pub unknown: BTreeMap<String, u64>,
    pub bad_lines: u64,
    /// Bytes of a last line without its newline, left unread.
    pub partial_tail: u64,
    pub lines: u64,
}

/// Entry types Claude Code writes that carry nothing tacho records.
const NOISE: &[&str] = &[
    "attachment",
    "system",
    "summary",
    "queue-operation",
    "file-history-snapshot",
    "last-prompt",
    "api-request",
    "api-request-shape",
    "api-request-blob",
    "tools-used",
    "cost-state",
    "atis-latch",
    "progress",
];

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => b.get("text").and_then(Value::as_str).map(str::to_owned),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The complete lines of a transcript parsed as JSON, each with its time (the last
/// `timestamp` seen so far, in ns since the epoch), counting into `t` the lines, those
/// that are not JSON, and the bytes of a last line without its newline (left for the
/// next import).
fn json_lines<'b>(bytes: &'b [u8], t: &mut Transcript) -> Vec<(&'b [u8], Value, i64)> {
    let body_end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    t.partial_tail = (bytes.len() - body_end) as u64;
    let mut out = Vec::new();
    let mut time = 0i64;
    for raw in bytes
        .get(..body_end)
        .unwrap_or_default()
        .split(|&b| b == b'\n')
    {
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        t.lines += 1;
        match serde_json::from_slice::<Value>(raw) {
            Ok(v) => {
                if let Some(ts) = v
                    .get("timestamp")
                    .and_then(|v| tacho_schema::parse_ts(v).ok())
                {
                    time = ts;
                }
                out.push((raw, v, time));
            }
            Err(_) => t.bad_lines += 1,
        }
    }
    out
}

/// An imported session's `session.start`.
fn start_event(
    agent: Agent,
    name: Option<String>,
    workspace: Option<String>,
    parent: Option<String>,
) -> EventBody {
    EventBody::SessionStart(SessionStart {
        agent: Some(name.unwrap_or_else(|| agent.name().to_owned())),
        model: None,
        project: workspace
            .as_deref()
            .and_then(|w| Path::new(w).file_name())
            .map(|n| n.to_string_lossy().into_owned()),
        workspace,
        parent,
        title: None,
        source: Some(agent.name().to_owned()),
    })
}

/// Reads a Claude Code transcript. `path` names subagent transcripts
/// (`agent-<id>.jsonl`), which become child sessions of their main session.
pub fn read_claude_transcript(path: &Path, bytes: &[u8]) -> Transcript {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let agent_file = stem.strip_prefix("agent-").map(str::to_owned);
    let mut t = Transcript::default();
    let mut cursor = Cursor::default();
    let mut calls: BTreeMap<String, (String, Option<Value>)> = BTreeMap::new();
    let mut time = 0i64;
    let mut started = false;
    for (raw, entry, at) in json_lines(bytes, &mut t) {
        time = at;
        let kind = entry
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("(none)");
        if !started && let Some(sid) = entry.get("sessionId").and_then(Value::as_str) {
            started = true;
            let main = session_id_from(sid);
            match &agent_file {
                Some(a) => {
                    let id = entry
                        .get("agentId")
                        .and_then(Value::as_str)
                        .map_or_else(|| a.clone(), str::to_owned);
                    t.session = session_id_from(&format!("{main}.{id}"));
                    t.parent = Some(main);
                }
                None => t.session = main,
            }
            t.workspace = entry.get("cwd").and_then(Value::as_str).map(str::to_owned);
            let name = entry
                .get("agentType")
                .and_then(Value::as_str)
                .map(str::to_owned);
            t.events.push((
                time,
                start_event(
                    Agent::ClaudeCode,
                    name,
                    t.workspace.clone(),
                    t.parent.clone(),
                ),
            ));
        }
        match kind {
            "assistant" => {
                if let Some(u) = usage_of(&entry).and_then(|_| cursor.line(raw)) {
                    t.events.push((
                        u.time_unix_ns.unwrap_or(time),
                        EventBody::LlmResponse(u.event()),
                    ));
                }
                let blocks = entry
                    .pointer("/message/content")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for b in blocks {
                    if b.get("type").and_then(Value::as_str) != Some("tool_use") {
                        continue;
                    }
                    let (Some(id), Some(name)) = (
                        b.get("id").and_then(Value::as_str),
                        b.get("name").and_then(Value::as_str),
                    ) else {
                        continue;
                    };
                    let input = b.get("input").cloned();
                    calls.insert(id.to_owned(), (name.to_owned(), input.clone()));
                    let target = input.as_ref().and_then(|i| {
                        [
                            "file_path",
                            "notebook_path",
                            "command",
                            "path",
                            "pattern",
                            "url",
                        ]
                        .iter()
                        .find_map(|k| i.get(*k).and_then(Value::as_str))
                        .map(|s| s.lines().next().unwrap_or("").chars().take(400).collect())
                    });
                    t.events.push((
                        time,
                        EventBody::ToolCall(ToolCall {
                            call_id: id.to_owned(),
                            tool: name.to_owned(),
                            target,
                            input: input.map(|i| i.to_string()),
                            agent: None,
                        }),
                    ));
                }
            }
            "user" => {
                let content = entry
                    .pointer("/message/content")
                    .cloned()
                    .unwrap_or(Value::Null);
                let results: Vec<&Value> = content
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter(|b| {
                                b.get("type").and_then(Value::as_str) == Some("tool_result")
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if results.is_empty() {
                    let meta = entry
                        .get("isMeta")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    let text = text_of(&content);
                    if !meta && !text.trim().is_empty() {
                        t.events.push((
                            time,
                            EventBody::AgentNotice(AgentNotice {
                                notice: "prompt".into(),
                                message: Some(text),
                                agent: None,
                            }),
                        ));
                    } else {
                        *t.skipped.entry("user (meta)".into()).or_default() += 1;
                    }
                    continue;
                }
                for r in results {
                    let Some(id) = r.get("tool_use_id").and_then(Value::as_str) else {
                        continue;
                    };
                    let is_error = r.get("is_error").and_then(Value::as_bool).unwrap_or(false);
                    let output = text_of(r.get("content").unwrap_or(&Value::Null));
                    t.events.push((
                        time,
                        EventBody::ToolResult(ToolResult {
                            call_id: id.to_owned(),
                            status: if is_error {
                                ToolStatus::Error
                            } else {
                                ToolStatus::Ok
                            },
                            duration_ms: None,
                            error: is_error.then(|| output.lines().next().unwrap_or("").to_owned()),
                            output: Some(output),
                            exit_code: None,
                        }),
                    ));
                    let Some((tool, input)) = calls.get(id) else {
                        continue;
                    };
                    let path = input.as_ref().and_then(|i| {
                        i.get("file_path")
                            .or_else(|| i.get("notebook_path"))
                            .and_then(Value::as_str)
                    });
                    if let (false, Some(path), "Edit" | "MultiEdit" | "Write" | "NotebookEdit") =
                        (is_error, path, tool.as_str())
                    {
                        let res = entry.get("toolUseResult");
                        let created = res.and_then(|r| r.get("type")).and_then(Value::as_str)
                            == Some("create");
                        t.events.push((
                            time,
                            EventBody::FileEdit(FileEdit {
                                path: path.to_owned(),
                                op: if created {
                                    EditOp::Create
                                } else {
                                    EditOp::Modify
                                },
                                from: None,
                                tool: Some(tool.clone()),
                                call_id: Some(id.to_owned()),
                                lines_added: None,
                                lines_removed: None,
                            }),
                        ));
                    }
                }
            }
            other => {
                let key = if NOISE.contains(&other) {
                    other.to_owned()
                } else {
                    *t.unknown.entry(other.to_owned()).or_default() += 1;
                    format!("{other} (unknown)")
                };
                *t.skipped.entry(key).or_default() += 1;
            }
        }
    }
    if let Some(u) = cursor.finish() {
        t.events.push((
            u.time_unix_ns.unwrap_or(time),
            EventBody::LlmResponse(u.event()),
        ));
    }
    t.bad_lines += cursor.bad_lines;
    if t.session.is_empty() {
        // No entry named the session: the file name does.
        t.session = session_id_from(&stem);
        t.events
            .insert(0, (time, start_event(Agent::ClaudeCode, None, None, None)));
    }
    t
}

/// Reads a Codex rollout (`$CODEX_HOME/sessions/**/rollout-*.jsonl`): `session_meta`
/// starts the session; user messages are prompts (Codex's own context blocks are
/// skipped); `function_call` and `custom_tool_call` items are tool calls, joined with
/// their outputs by `call_id` (exit code read from the output text); usage is counted
/// from increases of `token_count`'s `total_token_usage`.
pub fn read_codex_rollout(path: &Path, bytes: &[u8]) -> Transcript {
    let mut t = Transcript::default();
    let mut cursor = Cursor::default();
    let mut time = 0i64;
    for (raw, entry, at) in json_lines(bytes, &mut t) {
        time = at;
        let kind = entry
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("(none)");
        let payload = entry.get("payload").cloned().unwrap_or(Value::Null);
        let ptype = payload.get("type").and_then(Value::as_str).unwrap_or("");
        let (usage, output) = cursor.codex_line(raw);
        if let Some(u) = usage {
            t.events.push((
                u.time_unix_ns.unwrap_or(time),
                EventBody::LlmResponse(u.event()),
            ));
            continue;
        }
        if let Some((id, o)) = output {
            let failed = o.exit_code.is_some_and(|c| c != 0);
            t.events.push((
                time,
                EventBody::ToolResult(ToolResult {
                    call_id: id,
                    status: if failed {
                        ToolStatus::Error
                    } else {
                        ToolStatus::Ok
                    },
                    duration_ms: None,
                    error: o
                        .exit_code
                        .filter(|c| *c != 0)
                        .map(|c| format!("Exit code {c}")),
                    output: Some(o.output),
                    exit_code: o.exit_code,
                }),
            ));
            continue;
        }
        match (kind, ptype) {
            ("session_meta", _) if t.session.is_empty() => {
                let id = payload
                    .get("id")
                    .or_else(|| payload.get("session_id"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                t.session = session_id_from(id);
                t.workspace = payload
                    .get("cwd")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                t.events.push((
                    time,
                    start_event(Agent::Codex, None, t.workspace.clone(), None),
                ));
            }
            ("response_item", "message") => {
                if payload.get("role").and_then(Value::as_str) != Some("user") {
                    *t.skipped
                        .entry("response_item message (not the user's)".into())
                        .or_default() += 1;
                    continue;
                }
                let text: String = payload
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join("\n");
                let context = text.trim_start().starts_with('<');
                if text.trim().is_empty() || context {
                    *t.skipped
                        .entry("response_item message (context)".into())
                        .or_default() += 1;
                    continue;
                }
                t.events.push((
                    time,
                    EventBody::AgentNotice(AgentNotice {
                        notice: "prompt".into(),
                        message: Some(text),
                        agent: None,
                    }),
                ));
            }
            ("response_item", "function_call" | "custom_tool_call") => {
                let (Some(id), Some(name)) = (
                    payload.get("call_id").and_then(Value::as_str),
                    payload.get("name").and_then(Value::as_str),
                ) else {
                    continue;
                };
                // Arguments are JSON text for functions, the raw input for custom tools.
                let input = match payload.get("arguments").or_else(|| payload.get("input")) {
                    Some(Value::String(a)) => serde_json::from_str::<Value>(a)
                        .unwrap_or_else(|_| Value::String(a.clone())),
                    Some(other) => other.clone(),
                    None => Value::Null,
                };
                let target = ["cmd", "command", "path", "file_path"]
                    .iter()
                    .find_map(|k| match input.get(*k) {
                        Some(Value::String(s)) => Some(s.clone()),
                        Some(Value::Array(a)) => Some(
                            a.iter()
                                .filter_map(Value::as_str)
                                .collect::<Vec<_>>()
                                .join(" "),
                        ),
                        _ => None,
                    })
                    .or_else(|| {
                        input
                            .as_str()
                            .and_then(|s| s.lines().nth(1))
                            .map(str::to_owned)
                    })
                    .map(|s| s.lines().next().unwrap_or("").chars().take(400).collect());
                t.events.push((
                    time,
                    EventBody::ToolCall(ToolCall {
                        call_id: id.to_owned(),
                        tool: name.to_owned(),
                        target,
                        input: Some(input.to_string()),
                        agent: None,
                    }),
                ));
            }
            _ => {
                let key = if ptype.is_empty() {
                    kind.to_owned()
                } else {
                    format!("{kind} {ptype}")
                };
                *t.skipped.entry(key).or_default() += 1;
            }
        }
    }
    t.bad_lines += cursor.bad_lines;
    if t.session.is_empty() {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        // rollout-<time>-<id>: the id is the last five dash-separated groups.
        let parts: Vec<&str> = stem.split('-').collect();
        let id = parts
            .len()
            .checked_sub(5)
            .and_then(|i| parts.get(i..))
            .map_or_else(|| stem.clone(), |p| p.join("-"));
        t.session = session_id_from(&id);
        t.events
            .insert(0, (time, start_event(Agent::Codex, None, None, None)));
    }
    t
}

/// The id an event carries that makes importing it twice a no-op (`None` for kinds
/// that are recorded once per session, like `session.start`).
pub fn dedup_key(body: &EventBody) -> Option<String> {
    match body {
        EventBody::ToolCall(c) => Some(format!("call:{}", c.call_id)),
        EventBody::ToolResult(r) => Some(format!("result:{}", r.call_id)),
        EventBody::LlmResponse(r) => Some(format!(
            "response:{}",
            r.response_id.as_deref().unwrap_or(&r.request_id)
        )),
        EventBody::FileEdit(f) => Some(format!(
            "edit:{}:{}",
            f.call_id.as_deref().unwrap_or(""),
            f.path
        )),
        EventBody::AgentNotice(n) => Some(format!(
            "notice:{}:{}",
            n.notice,
            fnv1a_64(n.message.as_deref().unwrap_or(""))
        )),
        _ => None,
    }
}

/// A short, stable fingerprint of a text (FNV-1a, 64 bits): enough to tell prompts
/// apart in one session without keeping them whole.
fn fnv1a_64(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_becomes_calls_results_prompts_and_usage() {
        let lines = [
            r#"{"type":"user","sessionId":"abc","cwd":"/w","timestamp":"2026-11-20T09:00:00Z","message":{"role":"user","content":"Fix it"}}"#,
            r#"{"type":"assistant","sessionId":"abc","timestamp":"2026-11-20T09:00:01Z","message":{"id":"m1","model":"x","usage":{"input_tokens":5,"output_tokens":1},"content":[{"type":"text","text":"ok"}]}}"#,
            r#"{"type":"assistant","sessionId":"abc","timestamp":"2026-11-20T09:00:02Z","message":{"id":"m1","model":"x","usage":{"input_tokens":5,"output_tokens":7},"content":[{"type":"tool_use","id":"t1","name":"Write","input":{"file_path":"/w/a"}}]}}"#,
            r#"{"type":"user","sessionId":"abc","timestamp":"2026-11-20T09:00:03Z","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"written"}]},"toolUseResult":{"type":"create"}}"#,
            r#"{"type":"brand-new-thing","sessionId":"abc"}"#,
            r#"{"type":"attachment"}"#,
            r#"not json"#,
            r#"{"type":"assistant","message":{"id":"m2""#,
        ];
        let text = lines.join("\n");
        let t = read_claude_transcript(Path::new("/p/abc.jsonl"), text.as_bytes());
        let kinds: Vec<_> = t.events.iter().map(|(_, b)| b.kind_name()).collect();
        assert_eq!(
            kinds,
            [
                "session.start",
                "agent.notice",
                "tool.call",
                "tool.result",
                "file.edit",
                "llm.response"
            ]
        );
        match &t.events[5].1 {
            EventBody::LlmResponse(r) => assert_eq!((r.tokens_in, r.tokens_out), (5, 7)),
            other => panic!("{other:?}"),
        }
        assert_eq!(t.session, "abc");
        assert_eq!(t.bad_lines, 1);
        assert!(t.partial_tail > 0);
        assert_eq!(t.skipped.get("brand-new-thing (unknown)"), Some(&1));
        assert_eq!(t.skipped.get("attachment"), Some(&1));
        assert_eq!(t.unknown.get("brand-new-thing"), Some(&1));
        assert_eq!(t.unknown.len(), 1);
    }

    #[test]
    fn a_codex_rollout_joins_calls_and_outputs_and_counts_usage_increases() {
        let lines = [
            r#"{"timestamp":"2026-11-20T09:00:00Z","type":"session_meta","payload":{"id":"01a2-x","cwd":"/w"}}"#,
            r#"{"timestamp":"2026-11-20T09:00:00Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>x</environment_context>"}]}}"#,
            r#"{"timestamp":"2026-11-20T09:00:01Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"do it"}]}}"#,
            r#"{"timestamp":"2026-11-20T09:00:02Z","type":"response_item","payload":{"type":"function_call","name":"exec_command","arguments":"{\"cmd\":\"false\"}","call_id":"c1"}}"#,
            r#"{"timestamp":"2026-11-20T09:00:03Z","type":"response_item","payload":{"type":"function_call_output","call_id":"c1","output":"Process exited with code 1\nOutput:\n"}}"#,
            r#"{"timestamp":"2026-11-20T09:00:03Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":100,"cached_input_tokens":40,"output_tokens":5,"total_tokens":105}}}}"#,
            r#"{"timestamp":"2026-11-20T09:00:03Z","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":100,"cached_input_tokens":40,"output_tokens":5,"total_tokens":105}}}}"#,
            r#"{"timestamp":"2026-11-20T09:00:04Z","type":"future_thing","payload":{}}"#,
        ];
        let text = lines.join("\n") + "\n";
        let t = read_codex_rollout(Path::new("/s/rollout-x.jsonl"), text.as_bytes());
        let kinds: Vec<_> = t.events.iter().map(|(_, b)| b.kind_name()).collect();
        assert_eq!(
            kinds,
            [
                "session.start",
                "agent.notice",
                "tool.call",
                "tool.result",
                "llm.response"
            ]
        );
        match &t.events[3].1 {
            EventBody::ToolResult(r) => {
                assert_eq!((r.status, r.exit_code), (ToolStatus::Error, Some(1)))
            }
            other => panic!("{other:?}"),
        }
        match &t.events[4].1 {
            EventBody::LlmResponse(r) => {
                assert_eq!((r.tokens_in, r.cache_read, r.tokens_out), (60, 40, 5))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(t.session, "01a2-x");
        assert_eq!(t.skipped.get("future_thing"), Some(&1));
    }

    #[test]
    fn subagent_transcripts_are_child_sessions() {
        let line = r#"{"type":"user","sessionId":"main1","agentId":"a7","isSidechain":true,"message":{"content":"look"}}"#;
        let t = read_claude_transcript(
            Path::new("/p/main1/subagents/agent-a7.jsonl"),
            format!("{line}\n").as_bytes(),
        );
        assert_eq!(t.session, "main1.a7");
        assert_eq!(t.parent.as_deref(), Some("main1"));
    }
}
