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
    /// A single-document transcript (Gemini's `.json`, an OpenCode export, Cline's
    /// `messages.json`) that is not a whole JSON document: why, with where. Nothing of
    /// it is read; `tacho import` reports the file as failed (issue 43: such a session
    /// was lost with exit 0 and "unchanged").
    pub broken: Option<String>,
    /// Where the first [`DAMAGE_KEPT`] damaged lines are: 1-based line number, byte
    /// offset of the line, and why it was not read.
    pub damage: Vec<(u64, u64, String)>,
    /// Bytes of a last line without its newline, left unread.
    pub partial_tail: u64,
    pub lines: u64,
    /// The agent wrote its session's end as the transcript's last entry (Copilot CLI's
    /// `session.shutdown`): when, and what it said. An import ends the session there
    /// unless its hooks keep it (SPEC §13.4).
    pub ended_by_agent: Option<(i64, String)>,
}

impl Transcript {
    /// Puts the events in the order of their times (stable: events of the same time
    /// keep the transcript's order), `session.start` first (at the earliest time).
    /// A reader emits some events after later ones (a model response's usage is known
    /// complete only once the next response begins, after the results of its tool
    /// calls); a session must read in the order things happened.
    pub fn in_time_order(&mut self) {
        let start = self
            .events
            .iter()
            .position(|(_, b)| matches!(b, EventBody::SessionStart(_)))
            .map(|i| self.events.remove(i));
        self.events.sort_by_key(|(time, _)| *time);
        if let Some((time, body)) = start {
            let first = self.events.first().map_or(time, |(t, _)| *t);
            self.events.insert(0, (time.min(first), body));
        }
    }

    /// Adds the list each call of `agent` (its name) that changed its todo list left
    /// (`todo.update`, right after the call).
    pub fn with_todo_updates(&mut self, agent: &str) {
        crate::todo::with_todo_updates(agent, &mut self.events);
    }

    /// Whether a tool call it holds has no result (the agent stopped mid-call).
    pub fn has_unanswered_calls(&self) -> bool {
        let answered: std::collections::BTreeSet<&str> = self
            .events
            .iter()
            .filter_map(|(_, b)| match b {
                EventBody::ToolResult(r) => Some(r.call_id.as_str()),
                _ => None,
            })
            .collect();
        self.events.iter().any(
            |(_, b)| matches!(b, EventBody::ToolCall(c) if !answered.contains(c.call_id.as_str())),
        )
    }
}

/// What begins the `message` of a `session.end` an import inferred (SPEC §13.4): the
/// transcript had not grown for the import's stale time, so its agent is taken to be
/// gone. A later import that finds the transcript grown continues the session as
/// `<id>.2` (then `.3`, …) rather than leave it ended with events after its end.
pub const INFERRED_END: &str = "inferred by tacho import: ";

/// The `session.end` an import infers for a stale transcript: `aborted` when a call
/// it holds never got its result (the agent stopped mid-call), else `completed`;
/// `message` says it was inferred, since when the transcript has not grown and after
/// how long a transcript is taken as stale.
pub fn inferred_end(unanswered_calls: bool, idle_since: &str, stale_after: &str) -> EventBody {
    EventBody::SessionEnd(tacho_schema::SessionEnd {
        reason: if unanswered_calls {
            tacho_schema::EndReason::Aborted
        } else {
            tacho_schema::EndReason::Completed
        },
        message: Some(format!(
            "{INFERRED_END}the transcript has not grown since {idle_since} (stale after {stale_after})"
        )),
    })
}

/// The `session.end` an import records where the transcript's last entry is the
/// agent's own end (`what` it wrote): an inferred end (a later import that finds the
/// transcript grown continues the session as `<id>.2`), `completed`.
pub fn end_the_agent_wrote(what: &str) -> EventBody {
    EventBody::SessionEnd(tacho_schema::SessionEnd {
        reason: tacho_schema::EndReason::Completed,
        message: Some(format!("{INFERRED_END}the transcript ends with {what}")),
    })
}

/// Whether `body` is a `session.end` an import inferred.
pub fn is_inferred_end(body: &EventBody) -> bool {
    matches!(body, EventBody::SessionEnd(e)
        if e.message.as_deref().is_some_and(|m| m.starts_with(INFERRED_END)))
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

/// How many damaged lines a transcript locates (all are counted).
pub const DAMAGE_KEPT: usize = 20;

/// Counts a damaged line into `t`, located while fewer than [`DAMAGE_KEPT`] are.
pub(crate) fn damaged(t: &mut Transcript, line: u64, offset: u64, why: String) {
    t.bad_lines += 1;
    if t.damage.len() < DAMAGE_KEPT {
        t.damage.push((line, offset, why));
    }
}

/// Gives the events read before any line carried a time (time 0: Factory Droid's
/// `session_start` has no `timestamp`) the time of the first event after them that
/// has one, so that a session does not start on 1970-01-01 (issue 43). Events of a
/// transcript with no time at all keep 0.
pub(crate) fn backfill_times(t: &mut Transcript) {
    let mut next = 0i64;
    for (time, _) in t.events.iter_mut().rev() {
        if *time > 0 {
            next = *time;
        } else {
            *time = next;
        }
    }
}

/// The complete lines of a transcript parsed as JSON, each with its time (the last
/// `timestamp` seen so far, in ns since the epoch), counting into `t` the lines, those
/// that are not JSON, and the bytes of a last line without its newline (left for the
/// next import) — unless that line is a whole JSON value, which a line still being
/// written is not: it is read (issue 43: a cut rollout lost its last response; events
/// keep their keys, so an import that reads it again adds nothing).
pub(crate) fn json_lines<'b>(bytes: &'b [u8], t: &mut Transcript) -> Vec<(&'b [u8], Value, i64)> {
    let mut body_end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    if bytes
        .get(body_end..)
        .is_some_and(|tail| !tail.is_empty() && serde_json::from_slice::<Value>(tail).is_ok())
    {
        body_end = bytes.len();
    }
    t.partial_tail = (bytes.len() - body_end) as u64;
    let mut out = Vec::new();
    let mut time = 0i64;
    let mut offset = 0u64;
    for (n, raw) in bytes
        .get(..body_end)
        .unwrap_or_default()
        .split(|&b| b == b'\n')
        .enumerate()
    {
        let at = offset;
        offset += raw.len() as u64 + 1;
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
            Err(e) => damaged(t, n as u64 + 1, at, format!("not JSON: {e}")),
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
        EventBody::AgentRoute(r) => Some(format!(
            "route:{}:{}",
            r.to,
            fnv1a_64(r.reason.as_deref().unwrap_or(""))
        )),
        EventBody::TodoUpdate(t) => t.call_id.as_ref().map(|c| format!("todo:{c}")),
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

    /// Issue 43: a last line complete but for its newline (a cut rollout's last
    /// response) is read; a line still being written is left for the next import.
    #[test]
    fn a_whole_last_line_without_its_newline_is_read() {
        let head = r#"{"type":"user","sessionId":"abc","cwd":"/w","timestamp":"2026-11-20T09:00:00Z","message":{"role":"user","content":"Fix it"}}"#;
        let last = r#"{"type":"assistant","sessionId":"abc","timestamp":"2026-11-20T09:00:01Z","message":{"id":"m9","model":"x","usage":{"input_tokens":5,"output_tokens":3},"content":[{"type":"text","text":"done"}]}}"#;
        let t = read_claude_transcript(
            Path::new("/p/abc.jsonl"),
            format!("{head}\n{last}").as_bytes(),
        );
        assert_eq!(t.partial_tail, 0);
        assert!(
            t.events
                .iter()
                .any(|(_, b)| matches!(b, EventBody::LlmResponse(r) if r.tokens_out == 3)),
            "{:?}",
            t.events
        );
        let cut = &last[..last.len() - 5];
        let t = read_claude_transcript(
            Path::new("/p/abc.jsonl"),
            format!("{head}\n{cut}").as_bytes(),
        );
        assert_eq!(t.partial_tail, cut.len() as u64);
        assert!(
            !t.events
                .iter()
                .any(|(_, b)| matches!(b, EventBody::LlmResponse(_)))
        );
    }

    /// Issue 43: a subagent's rollout (Codex marks it in `session_meta.source`) is a
    /// child session of its parent's, named as the hooks name a subagent's track.
    /// (The shape is Codex's `SessionSource::SubAgent(ThreadSpawn)` as it serializes;
    /// no real subagent rollout was found in the corpus.)
    #[test]
    fn a_codex_subagent_rollout_is_a_child_session() {
        let line = r#"{"timestamp":"2026-11-20T09:00:00Z","type":"session_meta","payload":{"id":"child-1","cwd":"/w","source":{"subagent":{"thread_spawn":{"parent_thread_id":"parent-1","depth":1,"agent_role":"explorer"}}}}}"#;
        let t = read_codex_rollout(
            Path::new("/s/rollout-c.jsonl"),
            format!("{line}\n").as_bytes(),
        );
        assert_eq!(t.session, "parent-1.child-1");
        match &t.events[0].1 {
            EventBody::SessionStart(s) => {
                assert_eq!(s.parent.as_deref(), Some("parent-1"));
                assert_eq!(s.agent.as_deref(), Some("explorer"));
            }
            other => panic!("{other:?}"),
        }
        // A rollout of the user's own session has none.
        let line = r#"{"timestamp":"2026-11-20T09:00:00Z","type":"session_meta","payload":{"id":"main-1","cwd":"/w","source":"cli"}}"#;
        let t = read_codex_rollout(
            Path::new("/s/rollout-m.jsonl"),
            format!("{line}\n").as_bytes(),
        );
        assert_eq!(t.session, "main-1");
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
    fn events_are_put_in_time_order_with_the_start_first() {
        // Claude Code's usage of a response is known complete only at the next
        // response, after its tool's result: read in order, it lands after the result.
        let lines = [
            r#"{"type":"queue-operation","sessionId":"abc","timestamp":"2026-11-20T09:00:00Z"}"#,
            r#"{"type":"user","sessionId":"abc","cwd":"/w","timestamp":"2026-11-20T09:00:01Z","message":{"content":"go"}}"#,
            r#"{"type":"assistant","sessionId":"abc","timestamp":"2026-11-20T09:00:02Z","message":{"id":"m1","usage":{"input_tokens":5,"output_tokens":1},"content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"sleep 9"}}]}}"#,
            r#"{"type":"user","sessionId":"abc","timestamp":"2026-11-20T09:00:11Z","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":""}]}}"#,
            r#"{"type":"assistant","sessionId":"abc","timestamp":"2026-11-20T09:00:12Z","message":{"id":"m2","usage":{"input_tokens":5,"output_tokens":1},"content":[{"type":"text","text":"done"}]}}"#,
        ];
        let mut t = read_claude_transcript(
            Path::new("/p/abc.jsonl"),
            (lines.join("\n") + "\n").as_bytes(),
        );
        let kinds =
            |t: &Transcript| -> Vec<&str> { t.events.iter().map(|(_, b)| b.kind_name()).collect() };
        assert_eq!(
            kinds(&t),
            [
                "session.start",
                "agent.notice",
                "tool.call",
                "tool.result",
                "llm.response",
                "llm.response"
            ],
            "as read"
        );
        assert_eq!(
            t.workspace.as_deref(),
            Some("/w"),
            "the start names the cwd"
        );
        t.in_time_order();
        assert_eq!(
            kinds(&t),
            [
                "session.start",
                "agent.notice",
                "tool.call",
                "llm.response",
                "tool.result",
                "llm.response"
            ]
        );
        let times: Vec<i64> = t.events.iter().map(|(time, _)| *time).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    }

    #[test]
    fn edits_count_their_lines_from_what_each_transcript_holds() {
        // Claude Code: `structuredPatch`; a created file's `content`.
        let lines = [
            r#"{"type":"user","sessionId":"abc","cwd":"/w","timestamp":"2026-11-20T09:00:00Z","message":{"content":"go"}}"#,
            r#"{"type":"assistant","sessionId":"abc","timestamp":"2026-11-20T09:00:01Z","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Edit","input":{"file_path":"/w/a.rs"}},{"type":"tool_use","id":"t2","name":"Write","input":{"file_path":"/w/b.rs"}}]}}"#,
            r#"{"type":"user","sessionId":"abc","timestamp":"2026-11-20T09:00:02Z","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]},"toolUseResult":{"filePath":"/w/a.rs","structuredPatch":[{"lines":["-a","+b","+c"," d"]}]}}"#,
            r#"{"type":"user","sessionId":"abc","timestamp":"2026-11-20T09:00:03Z","message":{"content":[{"type":"tool_result","tool_use_id":"t2","content":"ok"}]},"toolUseResult":{"type":"create","filePath":"/w/b.rs","content":"x\ny\nz\n","structuredPatch":[]}}"#,
        ];
        let t = read_claude_transcript(
            Path::new("/p/abc.jsonl"),
            (lines.join("\n") + "\n").as_bytes(),
        );
        let edits = |t: &Transcript| -> Vec<(String, Option<u64>, Option<u64>)> {
            t.events
                .iter()
                .filter_map(|(_, b)| match b {
                    EventBody::FileEdit(f) => {
                        Some((f.path.clone(), f.lines_added, f.lines_removed))
                    }
                    _ => None,
                })
                .collect()
        };
        assert_eq!(
            edits(&t),
            [
                ("a.rs".into(), Some(2), Some(1)),
                ("b.rs".into(), Some(3), Some(0))
            ]
        );
        // Codex: the `apply_patch` text, once its output shows it applied.
        let patch =
            "*** Begin Patch\n*** Update File: src/x.rs\n@@\n-old\n+new\n+more\n*** End Patch";
        let lines = [
            r#"{"timestamp":"2026-11-20T09:00:00Z","type":"session_meta","payload":{"id":"c-1","cwd":"/w"}}"#.to_owned(),
            serde_json::json!({"timestamp":"2026-11-20T09:00:01Z","type":"response_item","payload":{"type":"custom_tool_call","name":"apply_patch","call_id":"p1","input":patch}}).to_string(),
            r#"{"timestamp":"2026-11-20T09:00:02Z","type":"response_item","payload":{"type":"custom_tool_call_output","call_id":"p1","output":"Success. Updated the following files:\nM src/x.rs\n"}}"#.to_owned(),
        ];
        let t = read_codex_rollout(
            Path::new("/s/rollout-x.jsonl"),
            (lines.join("\n") + "\n").as_bytes(),
        );
        assert_eq!(edits(&t), [("src/x.rs".into(), Some(2), Some(1))]);
        // A patch Codex refused: a failed result, and no edit (issue 43).
        let mut refused = lines.clone();
        refused[2] = r#"{"timestamp":"2026-11-20T09:00:02Z","type":"response_item","payload":{"type":"custom_tool_call_output","call_id":"p1","output":"apply_patch verification failed: Failed to find expected lines in src/x.rs"}}"#.to_owned();
        let t = read_codex_rollout(
            Path::new("/s/rollout-x.jsonl"),
            (refused.join("\n") + "\n").as_bytes(),
        );
        assert!(edits(&t).is_empty(), "{:?}", t.events);
        assert!(t.events.iter().any(|(_, b)| matches!(b, EventBody::ToolResult(r) if r.status == tacho_schema::ToolStatus::Error)));
    }

    #[test]
    fn an_inferred_end_says_so() {
        let end = inferred_end(false, "2026-11-20T09:00:00Z", "30m");
        assert!(is_inferred_end(&end));
        match &end {
            EventBody::SessionEnd(e) => assert_eq!(e.reason, tacho_schema::EndReason::Completed),
            other => panic!("{other:?}"),
        }
        match inferred_end(true, "t", "1s") {
            EventBody::SessionEnd(e) => assert_eq!(e.reason, tacho_schema::EndReason::Aborted),
            other => panic!("{other:?}"),
        }
        let told = EventBody::SessionEnd(tacho_schema::SessionEnd {
            reason: tacho_schema::EndReason::Completed,
            message: Some("claude-code: other".into()),
        });
        assert!(!is_inferred_end(&told));
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
