//! What already happened: a transcript read into tacho's events. Each agent's reader
//! is in its module ([`crate::claude_code`], [`crate::codex`]), behind
//! [`crate::Adapter::import_transcript`]; here are what they share (the JSON Lines
//! reader, the session start, the dedup key). Claude Code's:
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
use tacho_schema::{EventBody, SessionStart};
// The readers' tests, kept here, name it.
#[cfg(test)]
use tacho_schema::ToolStatus;

use crate::Agent;

// The readers live in their agents' modules.
pub use crate::claude_code::read_claude_transcript;
pub use crate::codex::read_codex_rollout;

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

pub(crate) fn text_of(content: &Value) -> String {
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
pub(crate) fn json_lines<'b>(bytes: &'b [u8], t: &mut Transcript) -> Vec<(&'b [u8], Value, i64)> {
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

/// Starts a transcript's session from the first entry naming it (`sessionId`, with its
/// `cwd`): the session itself, or for a subagent's transcript (`subagent`: from its
/// file name, unless the entry names an `agentId`) the child `<main>.<agentId>` of it.
/// Records its `session.start` at `time` (`name`: the agent it says, else `agent`'s).
pub(crate) fn start_transcript_session(
    t: &mut Transcript,
    entry: &Value,
    session: &str,
    subagent: Option<&String>,
    agent: Agent,
    name: Option<String>,
    time: i64,
) {
    let main = crate::session_id_from(session);
    match subagent {
        Some(a) => {
            let id = entry
                .get("agentId")
                .and_then(Value::as_str)
                .map_or_else(|| a.clone(), str::to_owned);
            t.session = crate::session_id_from(&format!("{main}.{id}"));
            t.parent = Some(main);
        }
        None => t.session = main,
    }
    t.workspace = entry.get("cwd").and_then(Value::as_str).map(str::to_owned);
    t.events.push((
        time,
        start_event(agent, name, t.workspace.clone(), t.parent.clone()),
    ));
}

/// An imported session's `session.start`.
pub(crate) fn start_event(
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

/// A prompt of the user's, imported.
pub(crate) fn prompt_event(text: String) -> EventBody {
    EventBody::AgentNotice(tacho_schema::AgentNotice {
        notice: "prompt".into(),
        message: Some(text),
        agent: None,
    })
}

/// A file a tool call created (`created`) or modified, with the lines it added and
/// removed when known, imported.
pub(crate) fn file_edit_event(
    path: String,
    created: bool,
    tool: &str,
    call_id: &str,
    (lines_added, lines_removed): (Option<u64>, Option<u64>),
) -> EventBody {
    EventBody::FileEdit(tacho_schema::FileEdit {
        path,
        op: if created {
            tacho_schema::EditOp::Create
        } else {
            tacho_schema::EditOp::Modify
        },
        from: None,
        tool: Some(tool.to_owned()),
        call_id: Some(call_id.to_owned()),
        lines_added,
        lines_removed,
    })
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
