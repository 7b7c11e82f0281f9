//! One hook payload of Claude Code or Codex, mapped to what tacho records.
//!
//! Both agents send one JSON object on stdin per hook event with `session_id`,
//! `transcript_path`, `cwd` and `hook_event_name`; tool events add `tool_name`,
//! `tool_input` and `tool_use_id`; `PostToolUse` adds `tool_response`, Claude Code's
//! `PostToolUseFailure` carries `error` instead; subagent events carry `agent_id` and
//! `agent_type`. Unknown fields are ignored and unknown events are recorded as a
//! notice, so a newer agent version never breaks recording.
//!
//! The mapping:
//! - `SessionStart` → `session.start` (the agent's session id is tacho's; a
//!   conversation resumed after it ended continues as a new session `<id>.2`, … whose
//!   parent is the previous one); `resume`, `clear` and `compact` starts of a running
//!   session are notices.
//! - `UserPromptSubmit` → `agent.notice` `prompt`.
//! - A tool that can change files gets a step of its own: a snapshot before it
//!   (targeted to the path for Edit, Write, MultiEdit, NotebookEdit and `apply_patch`;
//!   a full scan for Bash, MCP and unknown tools), `step.start`, `tool.call`; after it
//!   `tool.result`, `file.edit` for file tools, a snapshot after it and `step.finish`.
//!   So `tacho session rollback --step N` undoes one tool call, shell commands
//!   included. Tools that only read get `tool.call` and `tool.result`, no step.
//! - `SubagentStart`/`SubagentStop` → a child session (parent: the main one) started
//!   and ended, and `agent.route` in the parent; tool events carrying `agent_id` are
//!   recorded in the child.
//! - `PreCompact`, `Notification`, `Stop`, `SubagentStop` → notices; a notification
//!   that asks for permission, and `PermissionRequest`, → `permission.ask`.
//! - `SessionEnd` → `session.end` with its reason.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tacho_schema::{
    AgentNotice, AgentRoute, EditOp, EndReason, EventBody, FileEdit, LlmResponse, PermissionAsk,
    SessionEnd, SessionStart, SnapshotReason, StepFinish, StepStart, ToolCall, ToolResult,
    ToolStatus,
};

use crate::patch::{PatchOp, patch_files};
use crate::transcript::{CallOutput, Cursor};
use crate::{Agent, session_id_from};

/// The longest step title or notice kept from a prompt or command, in characters.
const TITLE_CHARS_MAX: usize = 120;

/// A hook payload: the fields tacho reads (others are ignored).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct HookPayload {
    pub session_id: String,
    pub hook_event_name: String,
    #[serde(default)]
    pub transcript_path: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub model: Option<Value>,
    #[serde(default)]
    pub tool_name: Option<String>,
    #[serde(default)]
    pub tool_input: Option<Value>,
    #[serde(default)]
    pub tool_use_id: Option<String>,
    #[serde(default)]
    pub tool_response: Option<Value>,
    #[serde(default)]
    pub error: Option<Value>,
    #[serde(default)]
    pub is_interrupt: Option<bool>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub prompt: Option<String>,
    #[serde(default)]
    pub stop_hook_active: Option<bool>,
    #[serde(default)]
    pub last_assistant_message: Option<String>,
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub agent_type: Option<String>,
    #[serde(default)]
    pub agent_transcript_path: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub notification_type: Option<String>,
    #[serde(default)]
    pub trigger: Option<String>,
    /// The session that started this one as a subagent (Factory Droid's child
    /// sessions): recorded as its `parent`.
    #[serde(default)]
    pub calling_session_id: Option<String>,
}

/// Why a payload cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    #[error("the hook payload is not JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// Whole JSON, but not of a hook payload's shape (a field missing or of another
    /// type): issue 47, once said "not JSON".
    #[error("the hook payload is JSON but not a hook payload: {0}")]
    Shape(#[source] serde_json::Error),
    #[error("the hook payload has no {0}")]
    Missing(&'static str),
}

impl HookPayload {
    pub fn parse(bytes: &[u8]) -> Result<HookPayload, PayloadError> {
        let p: HookPayload = serde_json::from_slice(bytes).map_err(|e| {
            // serde names a missing field in its message; keep it.
            match e.classify() {
                serde_json::error::Category::Data => PayloadError::Shape(e),
                _ => PayloadError::Json(e),
            }
        })?;
        if p.session_id.trim().is_empty() {
            return Err(PayloadError::Missing("session_id"));
        }
        if p.hook_event_name.trim().is_empty() {
            return Err(PayloadError::Missing("hook_event_name"));
        }
        Ok(p)
    }
}

/// One session's recording state (the main one, or a subagent's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Track {
    pub session: String,
    pub started: bool,
    pub ended: bool,
    /// The last step number used.
    pub steps: u64,
    /// Open steps by tool call id.
    pub open: BTreeMap<String, u64>,
    /// Tool calls recorded, by id (so that a result without its call is told apart).
    pub calls: Vec<String>,
    /// Open calls whose after-snapshot is taken (their result waits).
    #[serde(default)]
    pub snapshotted: std::collections::BTreeSet<String>,
    /// The step open now: calls that can change files and overlap (an agent running
    /// tools in parallel) share it, and it finishes with the last of them.
    #[serde(default)]
    pub open_step: Option<u64>,
    /// The calls still open when the session ended (ids).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub open_at_end: Vec<String>,
    /// Whether a call of the open step failed.
    #[serde(default)]
    pub open_step_failed: bool,
    /// Calls reported without an id of the agent's (Factory Droid, Gemini CLI), waiting
    /// for their result: (the id tacho gave, `call_fingerprint` of the tool and its
    /// input). A result is paired with the oldest of them with its tool and input
    /// (calls run in parallel end in any order), else with the latest.
    #[serde(default)]
    pub awaiting: Vec<(String, String)>,
    /// The highest `n` of the ids `call-<n>` given so far (`calls` keeps only the
    /// recent ids, so its length cannot number calls).
    #[serde(default)]
    pub numbered: u64,
}

impl Track {
    /// The step open now (older states kept only the calls' steps).
    fn current_step(&self) -> Option<u64> {
        self.open_step.or_else(|| self.open.values().max().copied())
    }

    /// Remembers a call id (recent ids are enough to tell a repeated report from a
    /// new call); false when it was known.
    fn remember_call(&mut self, call_id: &str) -> bool {
        if self.calls.iter().any(|c| c == call_id) {
            return false;
        }
        self.calls.push(call_id.to_owned());
        if self.calls.len() > CALLS_KEPT {
            let extra = self.calls.len() - CALLS_KEPT;
            self.calls.drain(..extra);
        }
        true
    }

    /// Folds in one event of this track's session that the hook did not record
    /// itself (or recorded without keeping its state: a hook killed halfway).
    fn observe(&mut self, agent: Agent, body: &EventBody) {
        match body {
            EventBody::SessionStart(_) => self.started = true,
            EventBody::SessionEnd(_) => {
                self.ended = true;
                self.open_at_end = self.open.keys().cloned().collect();
                self.open.clear();
                self.open_step = None;
            }
            EventBody::StepStart(s) => {
                self.started = true;
                self.steps = self.steps.max(s.step);
                self.open_step = Some(s.step);
                self.open_step_failed = false;
            }
            EventBody::StepFinish(f) => {
                self.open.retain(|_, s| *s != f.step);
                if self.open_step == Some(f.step) {
                    self.open_step = None;
                }
            }
            EventBody::ToolCall(c) => {
                self.remember_call(&c.call_id);
                if let Some(n) = c
                    .call_id
                    .strip_prefix("call-")
                    .and_then(|n| n.parse::<u64>().ok())
                {
                    self.numbered = self.numbered.max(n);
                }
                let input = c
                    .input
                    .as_deref()
                    .and_then(|i| serde_json::from_str::<Value>(i).ok());
                if let Some(step) = self.open_step
                    && agent.tool_kind(&c.tool, input.as_ref()) != ToolKind::ReadOnly
                {
                    self.open.insert(c.call_id.clone(), step);
                }
            }
            EventBody::ToolResult(r) => {
                self.open.remove(&r.call_id);
                self.snapshotted.remove(&r.call_id);
                self.awaiting.retain(|(c, _)| *c != r.call_id);
                if r.status != ToolStatus::Ok && self.open_step.is_some() {
                    self.open_step_failed = true;
                }
            }
            _ => {}
        }
    }
}

/// What a hook process keeps between the events of one agent session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HookState {
    pub main: Track,
    /// How many times the conversation was resumed after it ended.
    pub continuations: u32,
    pub subagents: BTreeMap<String, Track>,
    pub transcript: Cursor,
    pub subagent_transcripts: BTreeMap<String, Cursor>,
    /// Permission requests numbered in this session.
    pub permission_asks: u64,
    /// Stops the completion gate blocked.
    pub gate_blocks: u32,
    /// Payloads whose event was unknown, by name.
    pub unknown_events: BTreeMap<String, u64>,
    /// Each session's next sequence number in the log when this state was written:
    /// a log that moved past it (a hook killed after its events were committed and
    /// before its state was written, a goal check, `tacho session end`) is folded in
    /// before the next payload ([`HookState::observe`]).
    #[serde(default)]
    pub heads: BTreeMap<String, u64>,
    /// Codex: tool outputs read from the rollout and not yet matched with their
    /// `PostToolUse` (whose `tool_response` carries no exit code).
    #[serde(default)]
    pub call_outputs: BTreeMap<String, CallOutput>,
    /// Codex: `PostToolUse` payloads whose output the rollout did not hold yet; their
    /// result is recorded when it does (at the latest at the next stop).
    #[serde(default)]
    pub deferred: Vec<HookPayload>,
    /// Whether the main session has a goal (a `goal.created` the log holds for it):
    /// `Some(false)` lets the completion gate pass a stop without reading the session;
    /// `None` (not known: a state written before this was kept) has it read the log.
    #[serde(default)]
    pub goals: Option<bool>,
    /// HEAD as each session last saw it (its last `git.commits`; `None`: none yet), kept
    /// with `heads` so that a hook need not read the session to find it (SPEC.md §17.2).
    /// A session missing here (a state written before this was kept) has it read from
    /// the log.
    #[serde(default)]
    pub observed_heads: BTreeMap<String, Option<String>>,
    /// Each session's last snapshot a hook took (its id): what a tool output's copy of
    /// a whole file is checked against before it is stored as a reference to it.
    #[serde(default)]
    pub last_snapshot: BTreeMap<String, String>,
    /// For an agent whose transcript names its calls
    /// ([`crate::Adapter::transcript_confirms_calls`]): its transcript has named at
    /// least one call (so a call it does not name is missing from it, not a transcript
    /// of another shape). Which calls it named is read again at each stop, with the
    /// calls from the log: nothing of it is kept here.
    #[serde(default)]
    pub transcript_names_calls: bool,
    /// Calls that were running when an earlier session of the conversation ended (id
    /// → that session): the next payload of one says the end came from inside it.
    #[serde(default)]
    pub cut_calls: BTreeMap<String, String>,
    /// Each session's todo list as its calls left it (for the tools that change it a
    /// piece at a time: `crate::todo`).
    #[serde(default)]
    pub todos: BTreeMap<String, crate::todo::TodoTracker>,
    /// The main session's transcript, as its first payload named it: the only file
    /// read for the main session (its usage, its calls' outputs, the calls it names).
    /// A payload piped with another `transcript_path` could name a file made to
    /// confirm a made-up call or to give a real one another exit code (issue 42).
    #[serde(default)]
    pub confirming_transcript: Option<String>,
    /// Other transcripts payloads named for the main session (not read), each
    /// recorded once.
    #[serde(default)]
    pub transcripts_elsewhere: Vec<String>,
    /// The main session's end, held back: its agent writes its last replies to its
    /// transcript after its last hook ([`crate::Adapter::writes_transcript_late`]).
    /// Recorded, after the usage those replies hold, by `tacho hook AGENT --finish`
    /// once the transcript stopped growing, or by the session's next hook.
    #[serde(default)]
    pub end_pending: Option<tacho_schema::SessionEnd>,
}

impl HookState {
    /// The main session's transcript for a payload that named `named`: the one its
    /// first payload named; and, when `named` is another not met before, `named`
    /// (to be recorded: a transcript of the agent's choosing is never read).
    pub fn session_transcript(&mut self, named: &str) -> (String, Option<String>) {
        let own = self
            .confirming_transcript
            .get_or_insert_with(|| named.to_owned())
            .clone();
        let elsewhere = (own != named
            && !self.transcripts_elsewhere.iter().any(|t| t == named)
            && self.transcripts_elsewhere.len() < ELSEWHERE_KEPT)
            .then(|| {
                self.transcripts_elsewhere.push(named.to_owned());
                named.to_owned()
            });
        (own, elsewhere)
    }

    /// Calls the main session's transcript named (read just now).
    pub fn calls_named(&mut self, ids: &[String]) {
        self.transcript_names_calls |= !ids.is_empty();
    }

    /// The track recording `session`, if this state has one.
    pub fn track_mut(&mut self, session: &str) -> Option<&mut Track> {
        if self.main.session == session {
            return Some(&mut self.main);
        }
        self.subagents.values_mut().find(|t| t.session == session)
    }

    /// Folds in one event that the log holds for `session` past this state's head.
    pub fn observe(&mut self, agent: Agent, session: &str, body: &EventBody) {
        if let EventBody::LlmResponse(r) = body
            && self.main.session == session
        {
            observe_usage(&mut self.transcript, r);
        }
        if let EventBody::GoalCreated(_) = body
            && self.main.session == session
        {
            self.goals = Some(true);
        }
        if let EventBody::TodoUpdate(_) = body {
            self.todos
                .entry(session.to_string())
                .or_default()
                .observe(body);
        }
        // A snapshot recorded by something else (`tacho snapshot --session`).
        if let EventBody::SnapshotTaken(t) = body {
            self.last_snapshot
                .insert(session.to_string(), t.snapshot.clone());
        }
        if let Some(t) = self.track_mut(session) {
            t.observe(agent, body);
        }
    }
}

/// Folds a model response the log holds into `cursor`: its id counts as counted and,
/// for Codex, the cumulative total it was counted from is advanced, so that reading
/// the transcript again never counts it twice.
fn observe_usage(cursor: &mut Cursor, r: &LlmResponse) {
    let id = r
        .response_id
        .clone()
        .unwrap_or_else(|| r.request_id.clone());
    if let Some(total) = id
        .strip_prefix("codex-usage-")
        .or_else(|| id.strip_prefix(crate::droid::USAGE_ID_PREFIX))
        .and_then(|t| t.parse::<u64>().ok())
    {
        let mut t = cursor.codex_total.unwrap_or_default();
        if total > t[4] {
            let add = |a: u64, b: u64| a.saturating_add(b);
            t[0] = add(t[0], add(r.tokens_in, r.cache_read));
            t[1] = add(t[1], r.cache_read);
            t[2] = add(t[2], r.cache_write);
            t[3] = add(t[3], r.tokens_out);
            t[4] = total;
            cursor.codex_total = Some(t);
        }
    }
    cursor.remember(&id);
}

/// How many recent tool call ids a track keeps.
const CALLS_KEPT: usize = 512;

/// How many calls without the agent's id a track keeps waiting for their result.
const AWAITING_KEPT: usize = 64;

/// What tells a call without an id from the other calls open at once: its tool and
/// its input (the same in the agent's pre- and post-tool payloads), as a BLAKE3 digest.
fn call_fingerprint(tool: &str, input: Option<&Value>) -> String {
    let mut h = blake3::Hasher::new();
    h.update(tool.as_bytes());
    h.update(&[0]);
    h.update(input.map(Value::to_string).unwrap_or_default().as_bytes());
    h.finalize()
        .to_hex()
        .get(..32)
        .unwrap_or_default()
        .to_owned()
}

/// How many other transcripts named for the main session a state records.
const ELSEWHERE_KEPT: usize = 16;

/// How many rollout outputs a state keeps waiting for their `PostToolUse`.
const CALL_OUTPUTS_KEPT: usize = 256;

/// One thing to record, in order.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // a handful per hook event; boxing buys nothing
pub enum Action {
    Event {
        session: String,
        body: EventBody,
    },
    /// A snapshot of the session's workspace: of `paths` only (targeted), or of the
    /// whole workspace when `paths` is empty.
    Snapshot {
        session: String,
        paths: Vec<String>,
        reason: SnapshotReason,
        before_step: Option<u64>,
    },
    /// Read the transcript's new token usage into the session (`finish`: the session
    /// stops, count the response held back too).
    Tokens {
        session: String,
        transcript: String,
        subagent: Option<String>,
        finish: bool,
    },
    /// The completion gate: a stop the session's assured goal may refuse.
    Gate {
        session: String,
        already_blocked: bool,
    },
}

/// How a tool is snapshotted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolKind {
    /// Reads only: no snapshot, no step.
    ReadOnly,
    /// Changes these paths only: targeted snapshots.
    Files(Vec<String>),
    /// Can change anything (a shell, an MCP server, a tool tacho does not know).
    Anything,
}

const READ_ONLY_TOOLS: &[&str] = &[
    "Read",
    "Glob",
    "Grep",
    "LS",
    "WebFetch",
    "WebSearch",
    "TodoWrite",
    "TodoRead",
    "TaskCreate",
    "TaskUpdate",
    "TaskList",
    "TaskGet",
    "Task",
    "Agent",
    "ExitPlanMode",
    "EnterPlanMode",
    "BashOutput",
    "TaskOutput",
    "ListMcpResourcesTool",
    "ReadMcpResourceTool",
    "AskUserQuestion",
    "Skill",
    "ToolSearch",
    "view_image",
    "update_plan",
    "web_search",
];

pub(crate) fn str_field<'a>(input: Option<&'a Value>, key: &str) -> Option<&'a str> {
    input?.get(key)?.as_str()
}

/// Codex's `apply_patch` under the names other agents give the same tool (Factory
/// Droid's `ApplyPatch`, OpenCode's `apply_patch` and `patch`): one rule for the files
/// a patch touches (issue 43: their patches recorded no file).
fn patch_tool_name(tool: &str) -> &str {
    match tool {
        "ApplyPatch" | "patch" => "apply_patch",
        t => t,
    }
}

/// The patch text of an `apply_patch` input: a string input, or the first string
/// field that holds a patch.
fn patch_text(input: Option<&Value>) -> Option<&str> {
    match input? {
        Value::String(s) => Some(s.as_str()),
        Value::Object(m) => m
            .values()
            .filter_map(Value::as_str)
            .find(|s| s.trim_start().starts_with("*** Begin Patch")),
        _ => None,
    }
}

/// What a tool can change, by the names Claude Code and Codex give their tools (the
/// default of [`crate::Adapter::tool_kind`]).
pub fn tool_kind(tool: &str, input: Option<&Value>) -> ToolKind {
    match patch_tool_name(tool) {
        "Edit" | "Write" | "MultiEdit" => str_field(input, "file_path")
            .map_or(ToolKind::Anything, |p| ToolKind::Files(vec![p.to_owned()])),
        "NotebookEdit" => str_field(input, "notebook_path")
            .map_or(ToolKind::Anything, |p| ToolKind::Files(vec![p.to_owned()])),
        "apply_patch" => match patch_text(input).and_then(patch_files) {
            Some(files) if !files.is_empty() => {
                let mut paths = Vec::new();
                for f in files {
                    if let PatchOp::MoveTo { from } = &f.op {
                        paths.push(from.clone());
                    }
                    paths.push(f.path);
                }
                ToolKind::Files(paths)
            }
            _ => ToolKind::Anything,
        },
        t if READ_ONLY_TOOLS.contains(&t) => ToolKind::ReadOnly,
        _ => ToolKind::Anything,
    }
}

fn clip(s: &str, chars: usize) -> String {
    let line = s
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() <= chars {
        line.to_owned()
    } else {
        let mut out: String = line.chars().take(chars.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// What a tool call is about: its file, command, pattern or address.
pub(crate) fn tool_target(tool: &str, input: Option<&Value>) -> Option<String> {
    if patch_tool_name(tool) == "apply_patch" {
        let files = patch_text(input).and_then(patch_files)?;
        return Some(
            files
                .iter()
                .map(|f| f.path.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        );
    }
    [
        "file_path",
        "notebook_path",
        // OpenCode's file tools.
        "filePath",
        "command",
        "cmd",
        "commands",
        "path",
        "dir_path",
        "pattern",
        "url",
        "query",
        "description",
    ]
    .iter()
    .find_map(|k| match input?.get(*k)? {
        Value::String(s) => Some(clip(s, 400)),
        // Codex's shell tool gives the command as an argument vector.
        Value::Array(a) => Some(clip(
            &a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
            400,
        )),
        _ => None,
    })
}

/// A tool's output as text: a shell's stdout and stderr, a file read's content, a
/// string as it is, anything else as JSON. Never cut.
fn output_text(tool: &str, resp: &Value) -> String {
    match resp {
        Value::String(s) => s.clone(),
        Value::Object(m) if m.contains_key("stdout") || m.contains_key("stderr") => {
            let out = m.get("stdout").and_then(Value::as_str).unwrap_or("");
            let err = m.get("stderr").and_then(Value::as_str).unwrap_or("");
            match (out.is_empty(), err.is_empty()) {
                (_, true) => out.to_owned(),
                (true, false) => err.to_owned(),
                (false, false) => format!("{out}\n{err}"),
            }
        }
        Value::Object(m) if tool == "Read" => m
            .get("file")
            .and_then(|f| f.get("content"))
            .and_then(Value::as_str)
            .map_or_else(|| resp.to_string(), str::to_owned),
        other => other.to_string(),
    }
}

/// "Exit code 3" (Claude Code's shell failure), a line "Exit Code: 3" (Qwen
/// Code's), or "Command exited with code 3" (Cline's, also bracketed) → 3.
pub(crate) fn exit_code_of(error: &str) -> Option<i64> {
    let number = |rest: &str| {
        rest.split(|c: char| !c.is_ascii_digit() && c != '-')
            .next()?
            .parse()
            .ok()
    };
    if let Some(rest) = error.trim().strip_prefix("Exit code ") {
        return number(rest);
    }
    if let Some(rest) = error.lines().find_map(|l| {
        l.trim()
            .trim_start_matches('[')
            .strip_prefix("Command exited with code ")
    }) {
        return number(rest);
    }
    error
        .lines()
        .find_map(|l| l.trim().strip_prefix("Exit Code: "))
        .and_then(number)
}

/// Lines added and removed by an edit, from Claude Code's `structuredPatch`.
fn patch_counts(resp: Option<&Value>) -> (Option<u64>, Option<u64>) {
    let Some(hunks) = resp
        .and_then(|r| r.get("structuredPatch"))
        .and_then(Value::as_array)
    else {
        return (None, None);
    };
    let (mut add, mut del) = (0u64, 0u64);
    for h in hunks {
        for l in h
            .get("lines")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match l.as_str().and_then(|s| s.chars().next()) {
                Some('+') => add += 1,
                Some('-') => del += 1,
                _ => {}
            }
        }
    }
    (Some(add), Some(del))
}

fn end_reason(reason: Option<&str>) -> EndReason {
    match reason {
        Some("error") => EndReason::Error,
        Some("aborted" | "interrupted") => EndReason::Aborted,
        _ => EndReason::Completed,
    }
}

fn model_name(model: Option<&Value>) -> Option<String> {
    match model? {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => m
            .get("id")
            .or_else(|| m.get("display_name"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        _ => None,
    }
}

/// The snapshots taken before a step among `actions`: (paths, step) — for the
/// adapters' tests.
#[cfg(test)]
pub(crate) fn before_step_snapshots(actions: &[Action]) -> Vec<(Vec<String>, u64)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Snapshot {
                paths,
                before_step: Some(s),
                ..
            } => Some((paths.clone(), *s)),
            _ => None,
        })
        .collect()
}

/// Maps one payload to what to record, updating `state`.
pub fn map_payload(agent: Agent, p: &HookPayload, state: &mut HookState) -> Vec<Action> {
    let mut out = map_payload_events(agent, p, state);
    // A call that changed the agent's todo list is followed by the list (`todo.update`).
    crate::todo::insert_after(&mut out, |a| match a {
        Action::Event {
            session,
            body: EventBody::ToolCall(c),
        } => state
            .todos
            .entry(session.clone())
            .or_default()
            .on_call(agent.name(), c)
            .map(|body| Action::Event {
                session: session.clone(),
                body,
            }),
        _ => None,
    });
    out
}

fn map_payload_events(agent: Agent, p: &HookPayload, state: &mut HookState) -> Vec<Action> {
    let mut out = Vec::new();
    let main_id = session_id_from(&p.session_id);
    if state.main.session.is_empty() {
        state.main.session = main_id.clone();
    }
    let event = p.hook_event_name.as_str();
    // A conversation resumed after its session ended continues as a new session.
    if state.main.ended && event != "SessionEnd" {
        state.continuations += 1;
        let parent = state.main.session.clone();
        for call in std::mem::take(&mut state.main.open_at_end) {
            state.cut_calls.insert(call, parent.clone());
        }
        let id = session_id_from(&format!("{main_id}.{}", state.continuations + 1));
        state.main = Track {
            session: id,
            ..Track::default()
        };
        start(agent, p, &mut state.main, Some(parent), &mut out);
    }
    // A payload of a call that was running when an earlier session of the
    // conversation ended: the call went on, so the end came from inside it, not from
    // the agent's exit — whatever payloads were piped in between.
    if let Some(id) = &p.tool_use_id
        && let Some(parent) = state.cut_calls.remove(id)
    {
        out.push(Action::Event {
            session: state.main.session.clone(),
            body: EventBody::Error(tacho_schema::ErrorEvent {
                message: format!(
                    "session {parent} was ended while call {id} ran, and the call went on: it was ended from inside that call (tacho session end, or a SessionEnd payload piped to tacho hook)"
                ),
                code: Some(tacho_schema::SESSION_ENDED_MID_CALL.into()),
                source: Some("tacho".into()),
                fatal: false,
            }),
        });
    }
    if !state.main.started {
        let caller = p.calling_session_id.as_deref().map(session_id_from);
        start(agent, p, &mut state.main, caller, &mut out);
    }
    let main = state.main.session.clone();
    if agent.results_from_transcript() {
        resolve_deferred(
            agent,
            state,
            matches!(event, "Stop" | "SessionEnd"),
            &mut out,
        );
    }
    if !agent.failed_calls_fire_post_hook() {
        close_failed_calls(agent, state, &mut out);
    }
    let notice = |out: &mut Vec<Action>, session: &str, notice: &str, message: Option<String>| {
        out.push(Action::Event {
            session: session.to_owned(),
            body: EventBody::AgentNotice(AgentNotice {
                notice: notice.to_owned(),
                message,
                agent: None,
            }),
        });
    };
    match event {
        "SessionStart" => {
            // A fresh start was recorded above; resuming, clearing or compacting a
            // running session is worth a line.
            if let Some(src) = p.source.as_deref().filter(|s| *s != "startup")
                && !out.iter().any(|a| {
                    matches!(
                        a,
                        Action::Event {
                            body: EventBody::SessionStart(_),
                            ..
                        }
                    )
                })
            {
                notice(&mut out, &main, src, None);
            }
        }
        // An empty prompt is none (Qwen Code fires one before every model request).
        "UserPromptSubmit" => {
            if p.prompt.as_deref().is_none_or(|t| !t.trim().is_empty()) {
                notice(&mut out, &main, "prompt", p.prompt.clone());
            }
        }
        "PreToolUse" | "PostToolUse" | "PostToolUseFailure" => {
            let known = match (event, &p.tool_use_id) {
                ("PostToolUse", Some(id)) => state.call_outputs.remove(id),
                _ => None,
            };
            let track = match p.agent_id.as_deref() {
                Some(a) => subagent(agent, p, state, a, &mut out),
                None => &mut state.main,
            };
            if event == "PreToolUse" {
                tool_call(agent, p, track, &mut out);
            } else if agent.results_from_transcript() && known.is_none() && event == "PostToolUse" {
                // The rollout does not hold the call's output yet: the workspace is
                // snapshotted now, the result recorded once its exit code is known.
                snapshot_after(agent, p, track, &mut out);
                state.deferred.push(p.clone());
            } else {
                tool_result(agent, p, known, track, &mut out);
            }
        }
        "PermissionRequest" => {
            state.permission_asks += 1;
            let tool = p.tool_name.clone();
            out.push(Action::Event {
                session: main.clone(),
                body: EventBody::PermissionAsk(PermissionAsk {
                    request_id: format!("perm-{}", state.permission_asks),
                    permission: tool.clone().unwrap_or_else(|| "tool".into()),
                    target: tool
                        .as_deref()
                        .and_then(|t| tool_target(t, p.tool_input.as_ref())),
                    tool,
                    call_id: p.tool_use_id.clone(),
                }),
            });
        }
        "Notification" => {
            if p.notification_type.as_deref() == Some("permission_prompt") {
                state.permission_asks += 1;
                out.push(Action::Event {
                    session: main.clone(),
                    body: EventBody::PermissionAsk(PermissionAsk {
                        request_id: format!("perm-{}", state.permission_asks),
                        permission: p.message.clone().unwrap_or_else(|| "permission".into()),
                        tool: None,
                        call_id: None,
                        target: None,
                    }),
                });
            } else {
                let kind = p.notification_type.as_deref().unwrap_or("notification");
                notice(&mut out, &main, kind, p.message.clone());
            }
        }
        "PreCompact" => {
            let how = p.trigger.as_deref().unwrap_or("auto");
            notice(&mut out, &main, "compaction", Some(how.to_owned()));
        }
        // (Codex: after the compaction its `PreCompact` announced.)
        "PostCompact" => {
            let how = p.trigger.as_deref().unwrap_or("auto");
            notice(&mut out, &main, "compacted", Some(how.to_owned()));
        }
        "SubagentStart" => {
            if let Some(a) = p.agent_id.as_deref() {
                subagent(agent, p, state, a, &mut out);
            }
        }
        "SubagentStop" => {
            if let Some(a) = p.agent_id.as_deref() {
                let transcript = p.agent_transcript_path.clone();
                let track = subagent(agent, p, state, a, &mut out);
                let session = track.session.clone();
                if let Some(t) = transcript {
                    out.push(Action::Tokens {
                        session: session.clone(),
                        transcript: t,
                        subagent: Some(a.to_owned()),
                        finish: true,
                    });
                }
                finish_open_steps(track, &mut out);
                if !track.ended {
                    track.ended = true;
                    out.push(Action::Event {
                        session,
                        body: EventBody::SessionEnd(SessionEnd {
                            reason: EndReason::Completed,
                            message: p.last_assistant_message.as_deref().map(|m| clip(m, 400)),
                        }),
                    });
                }
            }
        }
        "Stop" => {
            notice(
                &mut out,
                &main,
                "stop",
                p.last_assistant_message.as_deref().map(|m| clip(m, 400)),
            );
        }
        "SessionEnd" => {}
        other => {
            *state.unknown_events.entry(other.to_owned()).or_default() += 1;
            notice(&mut out, &main, &format!("hook:{}", clip(other, 60)), None);
        }
    }
    // Token usage, caught up at every event of the main session (the transcript may
    // lag the hook); counted in full when the session stops or ends.
    let stops = matches!(event, "Stop" | "SessionEnd");
    if let Some(t) = &p.transcript_path {
        out.push(Action::Tokens {
            session: main.clone(),
            transcript: t.clone(),
            subagent: None,
            finish: stops,
        });
    }
    if event == "Stop" {
        out.push(Action::Gate {
            session: main.clone(),
            already_blocked: p.stop_hook_active.unwrap_or(false),
        });
    }
    if event == "SessionEnd" {
        state.main.open_at_end = state.main.open.keys().cloned().collect();
        finish_open_steps(&mut state.main, &mut out);
        for track in state
            .subagents
            .values_mut()
            .filter(|t| t.started && !t.ended)
        {
            finish_open_steps(track, &mut out);
            track.ended = true;
            out.push(Action::Event {
                session: track.session.clone(),
                body: EventBody::SessionEnd(SessionEnd {
                    reason: EndReason::Aborted,
                    message: Some("the main session ended first".into()),
                }),
            });
        }
        if !state.main.ended {
            state.main.ended = true;
            out.push(Action::Event {
                session: main,
                body: EventBody::SessionEnd(SessionEnd {
                    reason: end_reason(p.reason.as_deref()),
                    message: p.reason.as_ref().map(|r| format!("{agent}: {r}")),
                }),
            });
        }
    }
    out
}

fn start(
    agent: Agent,
    p: &HookPayload,
    track: &mut Track,
    parent: Option<String>,
    out: &mut Vec<Action>,
) {
    track.started = true;
    out.push(Action::Event {
        session: track.session.clone(),
        body: EventBody::SessionStart(SessionStart {
            agent: Some(agent.name().to_owned()),
            model: model_name(p.model.as_ref()),
            workspace: p.cwd.clone(),
            project: p
                .cwd
                .as_deref()
                .and_then(|c| std::path::Path::new(c).file_name())
                .map(|n| n.to_string_lossy().into_owned()),
            parent,
            title: None,
            source: Some(agent.name().to_owned()),
        }),
    });
    // The baseline: what a rollback of the whole session restores.
    out.push(Action::Snapshot {
        session: track.session.clone(),
        paths: Vec::new(),
        reason: SnapshotReason::Baseline,
        before_step: None,
    });
}

/// A subagent of `main`: its session (`<main>.<agent_id>`) and the `agent.route` the
/// main session records for it (`kind`: the agent type it names, else `subagent`).
/// The hooks record it at the subagent's start, an import at the call that started it;
/// both record the same route, so importing a session the hooks recorded adds none.
pub fn subagent_route(
    agent: Agent,
    main: &str,
    agent_id: &str,
    kind: Option<&str>,
) -> (String, EventBody) {
    let child = session_id_from(&format!("{main}.{agent_id}"));
    let route = EventBody::AgentRoute(AgentRoute {
        from: Some(agent.name().to_owned()),
        to: kind.unwrap_or("subagent").to_owned(),
        reason: Some(format!("subagent {agent_id} (session {child})")),
    });
    (child, route)
}

/// The track of a subagent, started (with a route in the main session) on first use.
fn subagent<'s>(
    agent: Agent,
    p: &HookPayload,
    state: &'s mut HookState,
    agent_id: &str,
    out: &mut Vec<Action>,
) -> &'s mut Track {
    let main = state.main.session.clone();
    let track = state.subagents.entry(agent_id.to_owned()).or_default();
    if !track.started {
        let (child, route) = subagent_route(agent, &main, agent_id, p.agent_type.as_deref());
        track.session = child;
        track.started = true;
        let kind = p.agent_type.clone().unwrap_or_else(|| "subagent".into());
        out.push(Action::Event {
            session: main.clone(),
            body: route,
        });
        out.push(Action::Event {
            session: track.session.clone(),
            body: EventBody::SessionStart(SessionStart {
                agent: Some(kind),
                model: model_name(p.model.as_ref()),
                workspace: p.cwd.clone(),
                project: None,
                parent: Some(main),
                title: None,
                source: Some(agent.name().to_owned()),
            }),
        });
    }
    track
}

fn tool_call(agent: Agent, p: &HookPayload, track: &mut Track, out: &mut Vec<Action>) {
    let tool = p.tool_name.clone().unwrap_or_else(|| "unknown".into());
    let call_id = p.tool_use_id.clone().unwrap_or_else(|| {
        // A state written before `numbered` was kept numbers on from its calls.
        track.numbered = track.numbered.max(track.calls.len() as u64) + 1;
        format!("call-{}", track.numbered)
    });
    if !track.remember_call(&call_id) {
        return; // the same call reported twice
    }
    if p.tool_use_id.is_none() {
        let fingerprint = call_fingerprint(&tool, p.tool_input.as_ref());
        track.awaiting.push((call_id.clone(), fingerprint));
        if track.awaiting.len() > AWAITING_KEPT {
            track.awaiting.remove(0);
        }
    }
    let input = p.tool_input.as_ref();
    let target = tool_target(&tool, input);
    let kind = agent.tool_kind(&tool, input);
    if kind != ToolKind::ReadOnly {
        let paths = match &kind {
            ToolKind::Files(p) => p.clone(),
            _ => Vec::new(),
        };
        // A call that starts while another that can change files runs (tools run in
        // parallel) joins its step: the step's before-state is taken before the first
        // of them, and this call's own paths before it runs.
        let joined = track.current_step().filter(|_| !track.open.is_empty());
        let step = joined.unwrap_or(track.steps + 1);
        track.open.insert(call_id.clone(), step);
        out.push(Action::Snapshot {
            session: track.session.clone(),
            paths,
            reason: SnapshotReason::Step,
            before_step: Some(step),
        });
        if joined.is_none() {
            track.steps = step;
            track.open_step = Some(step);
            track.open_step_failed = false;
            out.push(Action::Event {
                session: track.session.clone(),
                body: EventBody::StepStart(StepStart {
                    step,
                    agent: Some(agent.name().to_owned()),
                    title: Some(match &target {
                        Some(t) => format!("{tool}: {}", clip(t, TITLE_CHARS_MAX)),
                        None => tool.clone(),
                    }),
                }),
            });
        }
    }
    out.push(Action::Event {
        session: track.session.clone(),
        body: EventBody::ToolCall(ToolCall {
            call_id,
            tool,
            target,
            input: input.map(Value::to_string),
            agent: p.agent_type.clone(),
        }),
    });
}

/// `known`: what the agent's own record says the call returned (Codex's rollout: the
/// exit code its hook payload lacks).
fn tool_result(
    agent: Agent,
    p: &HookPayload,
    known: Option<CallOutput>,
    track: &mut Track,
    out: &mut Vec<Action>,
) {
    let tool = p.tool_name.clone().unwrap_or_else(|| "unknown".into());
    let Some(call_id) = p
        .tool_use_id
        .clone()
        .or_else(|| {
            let fingerprint = call_fingerprint(&tool, p.tool_input.as_ref());
            let waiting = &track.awaiting;
            waiting
                .iter()
                .find(|(_, f)| *f == fingerprint)
                .or(waiting.last())
                .map(|(c, _)| c.clone())
        })
        .or_else(|| track.calls.last().cloned())
    else {
        return;
    };
    track.awaiting.retain(|(c, _)| *c != call_id);
    if !track.calls.contains(&call_id) {
        // No PreToolUse was seen (the hook was installed mid-call, say): record the
        // call now, so that the result has one.
        tool_call(agent, p, track, out);
    }
    let failed = p.hook_event_name == "PostToolUseFailure"
        || known
            .as_ref()
            .is_some_and(|k| k.exit_code.is_some_and(|c| c != 0));
    let error = p.error.as_ref().map(|e| match e {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    let status = if !failed {
        ToolStatus::Ok
    } else if p.is_interrupt == Some(true) {
        ToolStatus::Cancelled
    } else {
        ToolStatus::Error
    };
    let resp = p.tool_response.as_ref();
    let known_code = known.as_ref().and_then(|k| k.exit_code);
    let error = error.or_else(|| {
        known_code
            .filter(|c| *c != 0)
            .map(|c| format!("Exit code {c}"))
    });
    // An empty response (Codex's) says nothing: the rollout's output is the output.
    let empty = resp.is_none_or(|r| r.is_null() || r.as_str() == Some(""));
    let output = match (&known, empty) {
        (Some(k), true) => Some(k.output.clone()),
        _ => resp.map(|r| output_text(&tool, r)),
    };
    let exit_code = known_code
        .or_else(|| error.as_deref().and_then(exit_code_of))
        .or(
            // Codex reports a shell's exit code in its response.
            resp.and_then(|r| r.get("exit_code").or_else(|| r.get("exitCode")))
                .and_then(Value::as_i64),
        );
    out.push(Action::Event {
        session: track.session.clone(),
        body: EventBody::ToolResult(ToolResult {
            call_id: call_id.clone(),
            status,
            duration_ms: p.duration_ms,
            error,
            output,
            exit_code,
        }),
    });
    if !failed {
        file_edits(&tool, p, &call_id, track, out);
    }
    let snapshotted = track.snapshotted.remove(&call_id);
    if let Some(step) = track.open.remove(&call_id) {
        if !snapshotted {
            out.push(after_snapshot(agent, &tool, p, track));
        }
        track.open_step_failed |= failed;
        // The step finishes with the last of its calls.
        if !track.open.values().any(|s| *s == step) {
            let failed = std::mem::take(&mut track.open_step_failed);
            if track.open_step == Some(step) {
                track.open_step = None;
            }
            out.push(Action::Event {
                session: track.session.clone(),
                body: EventBody::StepFinish(StepFinish {
                    step,
                    reason: Some(if failed { "failed" } else { "done" }.into()),
                }),
            });
        }
    }
}

/// The snapshot after a tool call that can change files.
fn after_snapshot(agent: Agent, tool: &str, p: &HookPayload, track: &Track) -> Action {
    let paths = match agent.tool_kind(tool, p.tool_input.as_ref()) {
        ToolKind::Files(p) => p,
        _ => Vec::new(),
    };
    Action::Snapshot {
        session: track.session.clone(),
        paths,
        reason: SnapshotReason::Step,
        before_step: None,
    }
}

/// Takes the snapshot after a call whose result is recorded later.
fn snapshot_after(agent: Agent, p: &HookPayload, track: &mut Track, out: &mut Vec<Action>) {
    let Some(id) = &p.tool_use_id else { return };
    if track.open.contains_key(id) && track.snapshotted.insert(id.clone()) {
        let tool = p.tool_name.clone().unwrap_or_else(|| "unknown".into());
        out.push(after_snapshot(agent, &tool, p, track));
    }
}

/// Records the deferred Codex results whose output the rollout now holds (all of
/// them with `force`, the output unknown for those it still lacks).
fn resolve_deferred(agent: Agent, state: &mut HookState, force: bool, out: &mut Vec<Action>) {
    let waiting = std::mem::take(&mut state.deferred);
    for p in waiting {
        let known = p
            .tool_use_id
            .as_ref()
            .and_then(|id| state.call_outputs.remove(id));
        if known.is_none() && !force {
            state.deferred.push(p);
            continue;
        }
        let track = match p.agent_id.as_deref() {
            Some(a) => state.subagents.entry(a.to_owned()).or_default(),
            None => &mut state.main,
        };
        tool_result(agent, &p, known, track, out);
    }
    if state.call_outputs.len() > CALL_OUTPUTS_KEPT {
        let extra = state.call_outputs.len() - CALL_OUTPUTS_KEPT;
        let old: Vec<String> = state.call_outputs.keys().take(extra).cloned().collect();
        for k in old {
            state.call_outputs.remove(&k);
        }
    }
}

/// Records the failures the transcript holds for the main session's open calls (an
/// agent whose failing tools fire no post-tool hook: Factory Droid), each as a
/// `PostToolUseFailure` would: its error, output and exit code, the snapshot after it.
fn close_failed_calls(agent: Agent, state: &mut HookState, out: &mut Vec<Action>) {
    let open: Vec<String> = state
        .main
        .open
        .keys()
        .filter(|id| state.call_outputs.contains_key(*id))
        .cloned()
        .collect();
    for id in open {
        let Some(known) = state.call_outputs.remove(&id) else {
            continue;
        };
        let error = known.output.lines().next().unwrap_or("error").to_owned();
        let p = HookPayload {
            hook_event_name: "PostToolUseFailure".into(),
            session_id: state.main.session.clone(),
            tool_use_id: Some(id),
            error: Some(Value::String(error)),
            ..HookPayload::default()
        };
        tool_result(agent, &p, Some(known), &mut state.main, out);
    }
}

fn file_edits(tool: &str, p: &HookPayload, call_id: &str, track: &Track, out: &mut Vec<Action>) {
    for edit in edits_of(
        tool,
        p.tool_input.as_ref(),
        p.tool_response.as_ref(),
        p.cwd.as_deref(),
        call_id,
    ) {
        out.push(Action::Event {
            session: track.session.clone(),
            body: EventBody::FileEdit(edit),
        });
    }
}

/// The files a successful call of `tool` changed, with the lines it added and removed
/// where its input or response tells them: Claude Code's `Edit`/`MultiEdit`/`Write`/
/// `NotebookEdit` (`file_path` or `notebook_path`; lines from the response's
/// `structuredPatch`, or a created file's `content`), Factory Droid's `Create`/`Edit`/
/// `MultiEdit` (its response, a JSON text, says `linesAdded`/`linesRemoved`; a created
/// file's lines are its input's `content`), Codex's `apply_patch` (the patch's own
/// `+`/`-` lines, §13.3). Paths inside `cwd` are made relative to it, as snapshots see
/// them. The hooks and the importers both record these, so a session's edits read the
/// same whichever recorded them.
pub fn edits_of(
    tool: &str,
    input: Option<&Value>,
    response: Option<&Value>,
    cwd: Option<&str>,
    call_id: &str,
) -> Vec<FileEdit> {
    let tool = patch_tool_name(tool);
    // Paths inside the workspace are recorded relative to it, as snapshots see them.
    let relative = |path: String| match cwd.map(std::path::Path::new) {
        Some(cwd) => match std::path::Path::new(&path).strip_prefix(cwd) {
            Ok(r) if !r.as_os_str().is_empty() => r.display().to_string(),
            _ => path,
        },
        None => path,
    };
    // A response given as JSON text (Factory Droid's) is read as that JSON.
    let parsed = match response {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok(),
        _ => None,
    };
    let resp = parsed.as_ref().or(response);
    let edit = |path: String, op: EditOp, from: Option<String>, added, removed| FileEdit {
        path: relative(path),
        op,
        from: from.map(relative),
        tool: Some(tool.to_owned()),
        call_id: Some(call_id.to_owned()),
        lines_added: added,
        lines_removed: removed,
    };
    match tool {
        "Edit" | "MultiEdit" | "Write" | "NotebookEdit" | "Create" => {
            let Some(path) = str_field(input, "file_path").or(str_field(input, "notebook_path"))
            else {
                return Vec::new();
            };
            let created = tool == "Create" || str_field(resp, "type") == Some("create");
            let (mut added, mut removed) = patch_counts(resp);
            if let (Some(a), Some(r)) = (
                resp.and_then(|r| r.get("linesAdded"))
                    .and_then(Value::as_u64),
                resp.and_then(|r| r.get("linesRemoved"))
                    .and_then(Value::as_u64),
            ) {
                (added, removed) = (Some(a), Some(r));
            }
            // A created file without a patch: its lines are all added.
            if created && added.unwrap_or(0) == 0 {
                let content = str_field(resp, "content").or(str_field(input, "content"));
                if let Some(c) = content {
                    (added, removed) = (Some(c.lines().count() as u64), Some(0));
                }
            }
            let op = if created {
                EditOp::Create
            } else {
                EditOp::Modify
            };
            vec![edit(path.to_owned(), op, None, added, removed)]
        }
        "apply_patch" => patch_text(input)
            .and_then(patch_files)
            .unwrap_or_default()
            .into_iter()
            .map(|f| {
                let (op, from) = match f.op {
                    PatchOp::Add => (EditOp::Create, None),
                    PatchOp::Delete => (EditOp::Delete, None),
                    PatchOp::Update => (EditOp::Modify, None),
                    PatchOp::MoveTo { from } => (EditOp::Rename, Some(from)),
                };
                edit(f.path, op, from, Some(f.lines_added), Some(f.lines_removed))
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn finish_open_steps(track: &mut Track, out: &mut Vec<Action>) {
    let steps: std::collections::BTreeSet<u64> =
        std::mem::take(&mut track.open).into_values().collect();
    track.open_step = None;
    track.open_step_failed = false;
    for step in steps {
        out.push(Action::Event {
            session: track.session.clone(),
            body: EventBody::StepFinish(StepFinish {
                step,
                reason: Some("interrupted".into()),
            }),
        });
    }
}

/// Maps `payloads` (raw, as an agent sends them) in order with one state, as the hook
/// does: what they record, and the state left (the adapters' tests on real captures).
#[cfg(test)]
pub(crate) fn map_all(agent: Agent, payloads: &[Vec<u8>]) -> (Vec<Action>, HookState) {
    let mut st = HookState::default();
    let mut actions = Vec::new();
    for p in payloads {
        let p = agent
            .parse_payload(p)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(p)));
        actions.extend(map_payload(agent, &p, &mut st));
    }
    (actions, st)
}

/// The events among `actions`.
#[cfg(test)]
pub(crate) fn events_of(actions: &[Action]) -> Vec<&EventBody> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Event { body, .. } => Some(body),
            _ => None,
        })
        .collect()
}

/// The events among `actions`, and the prompts among them.
#[cfg(test)]
pub(crate) fn events_and_prompts(actions: &[Action]) -> (Vec<&EventBody>, Vec<Option<&str>>) {
    let events = events_of(actions);
    let prompts = events
        .iter()
        .filter_map(|e| match e {
            EventBody::AgentNotice(n) if n.notice == "prompt" => Some(n.message.as_deref()),
            _ => None,
        })
        .collect();
    (events, prompts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(v: Value) -> HookPayload {
        HookPayload::parse(v.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn base(event: &str) -> Value {
        serde_json::json!({
            "session_id": "s-1", "transcript_path": "/t.jsonl", "cwd": "/w",
            "hook_event_name": event
        })
    }

    fn with(mut v: Value, extra: Value) -> Value {
        if let (Some(m), Value::Object(e)) = (v.as_object_mut(), extra) {
            m.extend(e);
        }
        v
    }

    fn kinds(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                Action::Event { body, .. } => body.kind_name().to_owned(),
                Action::Snapshot {
                    paths, before_step, ..
                } => {
                    format!(
                        "snapshot{}{}",
                        if paths.is_empty() {
                            "(full)"
                        } else {
                            "(targeted)"
                        },
                        before_step
                            .map(|s| format!(" before {s}"))
                            .unwrap_or_default()
                    )
                }
                Action::Tokens { finish, .. } => {
                    format!("tokens{}", if *finish { "(finish)" } else { "" })
                }
                Action::Gate { .. } => "gate".into(),
            })
            .collect()
    }

    #[test]
    fn a_shell_command_is_a_step_with_full_snapshots_around_it() {
        let mut st = HookState::default();
        let a = map_payload(
            Agent::ClaudeCode,
            &payload(with(
                base("SessionStart"),
                serde_json::json!({"source": "startup"}),
            )),
            &mut st,
        );
        assert_eq!(kinds(&a), ["session.start", "snapshot(full)", "tokens"]);
        let pre = with(
            base("PreToolUse"),
            serde_json::json!({"tool_name": "Bash", "tool_input": {"command": "rm x"}, "tool_use_id": "t1"}),
        );
        let a = map_payload(Agent::ClaudeCode, &payload(pre), &mut st);
        assert_eq!(
            kinds(&a),
            [
                "snapshot(full) before 1",
                "step.start",
                "tool.call",
                "tokens"
            ]
        );
        let post = with(
            base("PostToolUseFailure"),
            serde_json::json!({"tool_name": "Bash", "tool_input": {"command": "rm x"}, "tool_use_id": "t1", "error": "Exit code 1", "duration_ms": 7}),
        );
        let a = map_payload(Agent::ClaudeCode, &payload(post), &mut st);
        assert_eq!(
            kinds(&a),
            ["tool.result", "snapshot(full)", "step.finish", "tokens"]
        );
        match &a[0] {
            Action::Event {
                body: EventBody::ToolResult(r),
                ..
            } => {
                assert_eq!(
                    (r.status, r.exit_code, r.duration_ms),
                    (ToolStatus::Error, Some(1), Some(7))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn file_tools_get_targeted_snapshots_and_edits_reads_get_no_step() {
        let mut st = HookState::default();
        let edit = serde_json::json!({"tool_name": "Edit", "tool_input": {"file_path": "/w/a.rs", "old_string": "a", "new_string": "b"}, "tool_use_id": "t2"});
        let a = map_payload(
            Agent::ClaudeCode,
            &payload(with(base("PreToolUse"), edit.clone())),
            &mut st,
        );
        assert_eq!(
            kinds(&a),
            [
                "session.start",
                "snapshot(full)",
                "snapshot(targeted) before 1",
                "step.start",
                "tool.call",
                "tokens"
            ]
        );
        let resp = serde_json::json!({"tool_response": {"filePath": "/w/a.rs", "structuredPatch": [{"lines": ["-a", "+b", "+c"]}]}});
        let a = map_payload(
            Agent::ClaudeCode,
            &payload(with(with(base("PostToolUse"), edit), resp)),
            &mut st,
        );
        assert_eq!(
            kinds(&a),
            [
                "tool.result",
                "file.edit",
                "snapshot(targeted)",
                "step.finish",
                "tokens"
            ]
        );
        match &a[1] {
            Action::Event {
                body: EventBody::FileEdit(f),
                ..
            } => {
                assert_eq!(
                    (f.lines_added, f.lines_removed, f.op),
                    (Some(2), Some(1), EditOp::Modify)
                );
            }
            other => panic!("{other:?}"),
        }
        let read = serde_json::json!({"tool_name": "Read", "tool_input": {"file_path": "/w/a.rs"}, "tool_use_id": "t3"});
        let a = map_payload(
            Agent::ClaudeCode,
            &payload(with(base("PreToolUse"), read)),
            &mut st,
        );
        assert_eq!(kinds(&a), ["tool.call", "tokens"]);
    }

    #[test]
    fn a_codex_patch_snapshots_exactly_its_paths() {
        let mut st = HookState::default();
        let patch = "*** Begin Patch\n*** Update File: src/a.rs\n*** Move to: src/b.rs\n-x\n+y\n*** Add File: c.txt\n+c\n*** End Patch\n";
        let pre = with(
            base("PreToolUse"),
            serde_json::json!({"tool_name": "apply_patch", "tool_input": {"command": patch}, "tool_use_id": "c1"}),
        );
        let a = map_payload(Agent::Codex, &payload(pre), &mut st);
        let paths = a.iter().find_map(|a| match a {
            Action::Snapshot {
                paths,
                before_step: Some(_),
                ..
            } => Some(paths.clone()),
            _ => None,
        });
        assert_eq!(
            paths,
            Some(vec![
                "src/a.rs".to_string(),
                "src/b.rs".into(),
                "c.txt".into()
            ])
        );
    }

    #[test]
    fn subagents_are_child_sessions_and_the_end_closes_everything() {
        let mut st = HookState::default();
        map_payload(Agent::ClaudeCode, &payload(base("SessionStart")), &mut st);
        let pre = with(
            base("PreToolUse"),
            serde_json::json!({"tool_name": "Write", "tool_input": {"file_path": "/w/n"}, "tool_use_id": "t9", "agent_id": "ag1", "agent_type": "Explore"}),
        );
        let a = map_payload(Agent::ClaudeCode, &payload(pre), &mut st);
        assert_eq!(
            kinds(&a)[..3],
            [
                "agent.route",
                "session.start",
                "snapshot(targeted) before 1"
            ]
        );
        let child = st
            .subagents
            .get("ag1")
            .map(|t| t.session.clone())
            .unwrap_or_default();
        assert_eq!(child, "s-1.ag1");
        let a = map_payload(
            Agent::ClaudeCode,
            &payload(with(
                base("SessionEnd"),
                serde_json::json!({"reason": "other"}),
            )),
            &mut st,
        );
        assert_eq!(
            kinds(&a),
            [
                "tokens(finish)",
                "step.finish",
                "session.end",
                "session.end"
            ]
        );
        // The conversation resumed: a new session continues it.
        let a = map_payload(
            Agent::ClaudeCode,
            &payload(with(
                base("SessionStart"),
                serde_json::json!({"source": "resume"}),
            )),
            &mut st,
        );
        match &a[0] {
            Action::Event {
                session,
                body: EventBody::SessionStart(s),
            } => {
                assert_eq!(session, "s-1.2");
                assert_eq!(s.parent.as_deref(), Some("s-1"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stop_asks_the_gate_and_counts_tokens_in_full() {
        let mut st = HookState::default();
        let a = map_payload(
            Agent::ClaudeCode,
            &payload(with(
                base("Stop"),
                serde_json::json!({"stop_hook_active": true}),
            )),
            &mut st,
        );
        assert_eq!(
            kinds(&a),
            [
                "session.start",
                "snapshot(full)",
                "agent.notice",
                "tokens(finish)",
                "gate"
            ]
        );
        assert!(matches!(
            a.last(),
            Some(Action::Gate {
                already_blocked: true,
                ..
            })
        ));
    }

    /// Calls without an id are numbered on past the recent ids a track keeps.
    #[test]
    fn calls_without_ids_are_numbered_past_the_ids_kept() {
        let mut st = HookState::default();
        let n = CALLS_KEPT + 10;
        let mut ids = std::collections::BTreeSet::new();
        for i in 0..n {
            let input = serde_json::json!({"file_path": format!("/w/{i}")});
            for event in ["PreToolUse", "PostToolUse"] {
                let p = with(
                    base(event),
                    serde_json::json!({"tool_name": "Read", "tool_input": input}),
                );
                for a in map_payload(Agent::Droid, &payload(p), &mut st) {
                    if let Action::Event {
                        body: EventBody::ToolCall(c),
                        ..
                    } = a
                    {
                        ids.insert(c.call_id);
                    }
                }
            }
        }
        assert_eq!(ids.len(), n);
        assert!(ids.contains(&format!("call-{n}")));
        assert!(st.main.awaiting.is_empty());
    }

    #[test]
    fn bad_payloads_are_named() {
        assert!(HookPayload::parse(b"{").is_err());
        assert!(HookPayload::parse(br#"{"hook_event_name":"Stop"}"#).is_err());
        assert!(HookPayload::parse(br#"{"session_id":"","hook_event_name":"Stop"}"#).is_err());
        let mut st = HookState::default();
        let a = map_payload(Agent::ClaudeCode, &payload(base("SomethingNew")), &mut st);
        assert_eq!(
            kinds(&a),
            ["session.start", "snapshot(full)", "agent.notice", "tokens"]
        );
        assert_eq!(st.unknown_events.get("SomethingNew"), Some(&1));
    }
}
