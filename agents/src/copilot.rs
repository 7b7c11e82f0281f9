//! GitHub Copilot CLI (`copilot`, npm `@github/copilot`): Claude-style PascalCase hooks
//! in a hooks file of tacho's own (user: `~/.copilot/hooks/tacho.json`, or under
//! `$COPILOT_HOME`; project: `.github/hooks/tacho.json`, which `-p` mode loads only in a
//! trusted folder), whose payloads are Claude Code's snake_case envelope with the tool
//! names mapped to Claude's (`Bash`, `Write` for `create`, `Edit`, `Agent` for `task`),
//! the result in `tool_result {result_type, text_result_for_llm}`, no tool-call id (a
//! result is paired with the open call), a failing shell reported as `success` (its
//! exit code only in the text), `transcript_path` only at `Stop`, a stop refused with
//! `{"decision": "block"}` (exit 2 is ignored), and subagents whose payloads carry
//! `session_id` = their `agent_id` and `parent_agent_id` (recorded as child sessions).
//! The transcript is `~/.copilot/session-state/<id>/events.jsonl`, one event a line,
//! with a `session.usage_record` per model request (input includes cache reads).
//!
//! Why PascalCase and not Copilot's own camelCase events: camelCase payloads do not name
//! their event (it is known only from which command ran), so each event would need a
//! command line of its own; PascalCase payloads carry `hook_event_name` and read as the
//! shared vocabulary, with the one `tacho hook copilot` command in the same `hooks`
//! object Claude Code's settings have.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_schema::{AgentNotice, EditOp, EventBody, FileEdit, ToolCall, ToolResult, ToolStatus};

use crate::adapter::{Adapter, HookEvent, PlaceError, Places, Scope};
use crate::hook::{HookPayload, PayloadError, ToolKind, str_field, tool_target};
use crate::import::{Transcript, json_lines, start_event};
use crate::transcript::{Usage, usage_of};
use crate::{Agent, session_id_from};

#[derive(Debug)]
pub struct Copilot;

/// The variable naming Copilot's configuration directory (else `~/.copilot`).
const HOME_VAR: &str = "COPILOT_HOME";

/// tacho's hooks file, in the user's hooks directory or the repository's.
const HOOKS_FILE: &str = "tacho.json";

/// Copilot's tools (by its own names, and by the Claude names its PascalCase hooks
/// give them) that change no file. A subagent's (`task`, `Agent`) own tools are
/// recorded, and snapshotted, in its session.
const READ_ONLY: &[&str] = &[
    "view",
    "Read",
    "grep",
    "Grep",
    "glob",
    "Glob",
    "task",
    "Agent",
    "read_agent",
    "list_agents",
    "read_bash",
    "list_bash",
    "web_fetch",
    "WebFetch",
    "web_search",
    "WebSearch",
    "report_intent",
    "fetch_copilot_cli_documentation",
];

/// The tool names Copilot's PascalCase hooks were seen to report for its own tools
/// (its own name → the hook's): the import records these too, so that a session reads
/// the same live and imported.
const HOOK_NAMES: &[(&str, &str)] = &[
    ("bash", "Bash"),
    ("create", "Write"),
    ("edit", "Edit"),
    ("task", "Agent"),
    ("view", "Read"),
];

impl Adapter for Copilot {
    fn name(&self) -> &'static str {
        "copilot"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["github-copilot"]
    }

    fn env_vars(&self) -> &'static [&'static str] {
        &[HOME_VAR]
    }

    fn settings_file_is_tachos(&self) -> bool {
        true
    }

    /// A hooks file of tacho's own: Copilot reads every `*.json` of its hooks
    /// directories, so nothing of the user's is rewritten.
    fn settings_file(&self, places: &Places, scope: Scope) -> Result<PathBuf, PlaceError> {
        match scope {
            Scope::User => Ok(places
                .config_dir(HOME_VAR, ".copilot")?
                .join("hooks")
                .join(HOOKS_FILE)),
            Scope::Project => Ok(places.project.join(".github/hooks").join(HOOKS_FILE)),
            Scope::Local => Err(PlaceError::NoScope),
        }
    }

    /// `PermissionRequest` is left out: it fires before every tool even when all are
    /// allowed (`--yolo`), with a camelCase payload, and says nothing the call does not.
    fn hook_events(&self) -> &'static [HookEvent] {
        &[
            ("SessionStart", None, 10),
            ("UserPromptSubmit", None, 10),
            ("PreToolUse", Some("*"), 30),
            ("PostToolUse", Some("*"), 30),
            ("PostToolUseFailure", Some("*"), 30),
            ("PreCompact", None, 10),
            ("SubagentStop", None, 30),
            ("Stop", None, 60),
            ("SessionEnd", None, 10),
        ]
    }

    fn install_note_for(&self, scope: Scope) -> Option<&'static str> {
        (scope == Scope::Project).then_some(
            "copilot -p loads the repository's .github/hooks only in a trusted folder: add the repository to \"trusted_folders\" in ~/.copilot/config.json (or answer the trust prompt of an interactive copilot), or set COPILOT_ALLOW_ALL=true or GITHUB_COPILOT_PROMPT_MODE_REPO_HOOKS=true; the user scope's hooks (~/.copilot/hooks) always load",
        )
    }

    fn parse_payload(&self, bytes: &[u8]) -> Result<HookPayload, PayloadError> {
        let mut p = HookPayload::parse(bytes)?;
        let raw: Value = serde_json::from_slice(bytes).map_err(PayloadError::Json)?;
        read_tool_result(&mut p, raw.get("tool_result"));
        // A subagent's payloads name it as their session (`session_id` = `agent_id`)
        // and its caller as `parent_agent_id`: it is a session of its own, a child of
        // its caller's. Its stop is its end; its `transcript_path` is the caller's,
        // whose usage records hold the subagent's requests too (counted there once).
        let parent = raw.get("parent_agent_id").and_then(Value::as_str);
        if let (Some(agent), Some(parent)) = (p.agent_id.take(), parent)
            && agent == p.session_id
        {
            p.calling_session_id = Some(parent.to_owned());
            p.transcript_path = None;
            if p.hook_event_name == "Stop" {
                p.hook_event_name = "SessionEnd".into();
            }
        }
        Ok(p)
    }

    fn tool_kind(&self, tool: &str, input: Option<&Value>) -> ToolKind {
        match tool {
            "create" | "edit" | "Write" | "Edit" => str_field(input, "path")
                .or_else(|| str_field(input, "file_path"))
                .map_or(ToolKind::Anything, |p| ToolKind::Files(vec![p.to_owned()])),
            t if READ_ONLY.contains(&t) => ToolKind::ReadOnly,
            _ => ToolKind::Anything,
        }
    }

    fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError> {
        Ok(places
            .config_dir(HOME_VAR, ".copilot")?
            .join("session-state"))
    }

    /// `<session>/events.jsonl` only (a session directory holds other files).
    fn is_transcript(&self, path: &Path) -> bool {
        path.file_name().is_some_and(|n| n == "events.jsonl")
    }

    /// It buffers `events.jsonl` and writes it as it exits, after its `SessionEnd`
    /// hook (issue 43: a fast run recorded no token at all).
    fn writes_transcript_late(&self) -> bool {
        true
    }

    fn import_transcript(&self, path: &Path, bytes: &[u8]) -> Transcript {
        read_copilot_events(path, bytes)
    }
}

/// Reads `tool_result {result_type, text_result_for_llm}` into the shared vocabulary:
/// the text is the response; a result that is not `success`, or a shell whose text says
/// it exited with another code than 0 (Copilot reports those as `success`), is a
/// `PostToolUseFailure` with its error.
fn read_tool_result(p: &mut HookPayload, result: Option<&Value>) {
    let Some(result) = result else {
        return;
    };
    let text = result
        .get("text_result_for_llm")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let kind = result.get("result_type").and_then(Value::as_str);
    let shell = matches!(p.tool_name.as_deref(), Some("Bash" | "bash"));
    let error = match (kind, shell.then(|| shell_exit_code(&text)).flatten()) {
        (Some("success") | None, Some(code)) if code != 0 => Some(format!("Exit code {code}")),
        (Some("success") | None, _) => None,
        (Some(other), _) => Some(match text.lines().find(|l| !l.trim().is_empty()) {
            Some(line) => format!("{other}: {line}"),
            None => other.to_owned(),
        }),
    };
    if let Some(e) = error
        && p.hook_event_name == "PostToolUse"
    {
        p.hook_event_name = "PostToolUseFailure".into();
        p.error = Some(Value::String(e));
    }
    p.tool_response = Some(Value::String(text));
}

/// The exit code in a shell's text: its last line, which Copilot writes as `<shellId:
/// N completed with exit code K>` (what the command printed comes before it).
pub fn shell_exit_code(text: &str) -> Option<i64> {
    let last = text.lines().rev().find(|l| !l.trim().is_empty())?.trim();
    let inner = last.strip_prefix("<shellId: ")?.strip_suffix('>')?;
    let (_, code) = inner.split_once(" completed with exit code ")?;
    code.trim().parse().ok()
}

/// One `session.usage_record` line's model request: `usage.inputTokens` includes the
/// cache reads, which tacho keeps apart. Named by the record's own `id`.
pub fn usage_record(entry: &Value) -> Option<Usage> {
    let u = entry.get("data")?.get("usage")?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let s = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let cache_read = n("cacheReadTokens");
    Some(Usage {
        message_id: s(entry.get("id")).or_else(|| s(u.get("apiCallId")))?,
        request_id: s(u.get("apiCallId")),
        model: s(u.get("model")),
        // Copilot's input count holds the cache's reads and writes alike.
        input_tokens: n("inputTokens")
            .saturating_sub(cache_read)
            .saturating_sub(n("cacheWriteTokens")),
        output_tokens: n("outputTokens"),
        cache_read,
        cache_write: n("cacheWriteTokens"),
        stop_reason: s(u.get("finishReason")),
        time_unix_ns: entry
            .get("timestamp")
            .and_then(|t| tacho_schema::parse_ts(t).ok()),
    })
}

/// Entry types read and not recorded (known noise): an entry type not here and not
/// read is reported as unknown.
const NOISE: &[&str] = &[
    "hook.start",
    "hook.end",
    "assistant.turn_start",
    "assistant.turn_end",
    "assistant.message",
    "system.message",
    "session.permissions_changed",
    "session.model_change",
    "session.shutdown",
    "subagent.configured",
    "subagent.completed",
];

/// A call read from the transcript: the id the hooks give it, its tool, and when it
/// started.
struct Call {
    id: String,
    tool: String,
    started: i64,
    /// Copilot's own name of the tool (`edit`, `create`) and its arguments: the file
    /// an edit changed when its result names none (before `fileEdits`).
    own: String,
    path: Option<String>,
}

/// Reads a Copilot session (`~/.copilot/session-state/<id>/events.jsonl`):
/// `session.start` starts it; `user.message` is a prompt; `tool.execution_start` a
/// call and `tool.execution_complete` its result (failed when not `success` or when
/// `shellExecution.exitCode` is not 0; its duration from the two times) with a
/// `file.edit` per `fileEdits` entry; `session.usage_record` a model response.
///
/// Calls are numbered as the hooks number them (`call-<n>`, the main agent's in
/// order). A subagent has no file of its own: its events are in its caller's, marked
/// with the `parentToolCallId` of the `task` call; they are recorded in the caller's
/// session with the subagent's type as their agent and ids `<task call>.call-<n>`
/// (live, the hooks record them in a child session).
pub fn read_copilot_events(path: &Path, bytes: &[u8]) -> Transcript {
    let mut t = Transcript::default();
    let mut time = 0i64;
    let mut calls: BTreeMap<String, Call> = BTreeMap::new();
    // Per caller (`None`: the main agent): calls numbered so far.
    let mut numbered: BTreeMap<Option<String>, u64> = BTreeMap::new();
    // The subagents running, by their `task` call: their type.
    let mut subagents: BTreeMap<String, String> = BTreeMap::new();
    // The type of the subagent started last (whose prompt comes next).
    let mut started_last: Option<String> = None;
    // Before `session.usage_record` (Copilot CLI up to 1.0.8x): the usage of each
    // `session.shutdown`'s `modelMetrics`, and each message's `outputTokens` for a
    // session that never shut down (issue 43: every such session imported 0 tokens).
    let mut usage_records = false;
    let mut shutdowns: Vec<(i64, String, Value)> = Vec::new();
    let mut outputs: Vec<(i64, String, u64)> = Vec::new();
    for (_, entry, at) in json_lines(bytes, &mut t) {
        time = at;
        let kind = entry
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("(none)");
        let data = entry.get("data").cloned().unwrap_or(Value::Null);
        let s = |k: &str| data.get(k).and_then(Value::as_str);
        let caller = s("parentToolCallId").map(str::to_owned);
        let agent = caller.as_ref().and_then(|c| subagents.get(c)).cloned();
        match kind {
            "session.start" if t.session.is_empty() => {
                t.session = session_id_from(s("sessionId").unwrap_or_default());
                t.workspace = data
                    .pointer("/context/cwd")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                t.events.push((
                    time,
                    start_event(Agent::Copilot, None, t.workspace.clone(), None),
                ));
            }
            "user.message" => {
                let text = s("content").unwrap_or("");
                if text.trim().is_empty() {
                    *t.skipped.entry("user.message (empty)".into()).or_default() += 1;
                    continue;
                }
                // A subagent's prompt comes from its caller (`source: agent-<id>`).
                let from_agent = s("source").is_some_and(|src| src.starts_with("agent-"));
                t.events.push((
                    time,
                    EventBody::AgentNotice(AgentNotice {
                        notice: "prompt".into(),
                        message: Some(text.to_owned()),
                        agent: from_agent.then(|| started_last.clone()).flatten(),
                    }),
                ));
            }
            "subagent.started" => {
                if let Some(call) = s("toolCallId") {
                    let name = s("agentType").or(s("agentName")).unwrap_or("subagent");
                    subagents.insert(call.to_owned(), name.to_owned());
                    started_last = Some(name.to_owned());
                }
                *t.skipped.entry(kind.to_owned()).or_default() += 1;
            }
            "tool.execution_start" => {
                let (Some(model_id), Some(name)) = (s("toolCallId"), s("toolName")) else {
                    *t.skipped.entry(format!("{kind} (no call id)")).or_default() += 1;
                    continue;
                };
                let n = numbered.entry(caller.clone()).or_default();
                *n += 1;
                let id = match &caller {
                    Some(c) => format!("{c}.call-{n}"),
                    None => format!("call-{n}"),
                };
                let tool = HOOK_NAMES
                    .iter()
                    .find(|(own, _)| *own == name)
                    .map_or(name, |(_, hook)| *hook)
                    .to_owned();
                let input = data.get("arguments").cloned();
                t.events.push((
                    time,
                    EventBody::ToolCall(ToolCall {
                        call_id: id.clone(),
                        target: tool_target(&tool, input.as_ref()),
                        tool: tool.clone(),
                        input: input.map(|i| i.to_string()),
                        agent: agent.clone(),
                    }),
                ));
                let path = data
                    .pointer("/arguments/path")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                calls.insert(
                    model_id.to_owned(),
                    Call {
                        id,
                        tool,
                        started: time,
                        own: name.to_owned(),
                        path,
                    },
                );
            }
            "tool.execution_complete" => {
                let Some(call) = s("toolCallId").and_then(|id| calls.remove(id)) else {
                    *t.skipped.entry(format!("{kind} (no call)")).or_default() += 1;
                    continue;
                };
                subagents.remove(s("toolCallId").unwrap_or_default());
                push_result(&mut t, &data, &call, time);
            }
            "session.shutdown" => {
                let how = s("shutdownType").unwrap_or("shutdown");
                t.ended_by_agent = Some((time, format!("session.shutdown ({how})")));
                if let Some(m) = data.get("modelMetrics") {
                    let id = entry
                        .get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("shutdown")
                        .to_owned();
                    shutdowns.push((time, id, m.clone()));
                }
                *t.skipped.entry(kind.to_owned()).or_default() += 1;
            }
            "assistant.message" => {
                if let (Some(id), Some(n)) = (
                    s("messageId"),
                    data.get("outputTokens").and_then(Value::as_u64),
                ) && n > 0
                {
                    outputs.push((time, id.to_owned(), n));
                }
                *t.skipped.entry(kind.to_owned()).or_default() += 1;
            }
            "session.usage_record" => match usage_of(&entry) {
                Some(u) => {
                    usage_records = true;
                    t.events.push((
                        u.time_unix_ns.unwrap_or(time),
                        EventBody::LlmResponse(u.event()),
                    ));
                }
                None => *t.skipped.entry(format!("{kind} (no usage)")).or_default() += 1,
            },
            k if NOISE.contains(&k) => *t.skipped.entry(k.to_owned()).or_default() += 1,
            other => {
                *t.unknown.entry(other.to_owned()).or_default() += 1;
                *t.skipped.entry(format!("{other} (unknown)")).or_default() += 1;
            }
        }
    }
    if !usage_records {
        usage_before_records(&mut t, &shutdowns, &outputs);
    }
    if t.session.is_empty() {
        // No `session.start` (a cut file): the session is its directory's name.
        let dir = path
            .parent()
            .and_then(Path::file_name)
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        t.session = session_id_from(&dir);
        t.events
            .insert(0, (time, start_event(Agent::Copilot, None, None, None)));
    }
    // Its end only when nothing came after it (a resumed session shuts down again).
    if let Some((at, _)) = &t.ended_by_agent
        && t.events.iter().any(|(time, _)| time > at)
    {
        t.ended_by_agent = None;
    }
    t
}

/// The usage of a session whose Copilot CLI wrote no `session.usage_record`: one model
/// response per model of each `session.shutdown`'s `modelMetrics` (a resumed session
/// shuts down once per run; input without the cache's reads and writes, which its
/// `inputTokens` includes), named `<shutdown id>:<model>`; without any shutdown (the
/// process was killed), each message's `outputTokens`, output only.
fn usage_before_records(
    t: &mut Transcript,
    shutdowns: &[(i64, String, Value)],
    outputs: &[(i64, String, u64)],
) {
    let response = |id: String, model: Option<String>, (i, o, r, w): (u64, u64, u64, u64)| {
        EventBody::LlmResponse(tacho_schema::LlmResponse {
            request_id: id.clone(),
            response_id: Some(id),
            model,
            tokens_in: i,
            tokens_out: o,
            cache_read: r,
            cache_write: w,
            latency_ms: None,
            stop_reason: None,
            error: None,
        })
    };
    for (time, id, metrics) in shutdowns {
        for (model, m) in metrics.as_object().into_iter().flatten() {
            let n = |k: &str| {
                m.pointer(&format!("/usage/{k}"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
            };
            let (input, read, write) = (
                n("inputTokens"),
                n("cacheReadTokens"),
                n("cacheWriteTokens"),
            );
            let tokens = (
                input.saturating_sub(read).saturating_sub(write),
                n("outputTokens"),
                read,
                write,
            );
            if tokens == (0, 0, 0, 0) {
                continue;
            }
            t.events.push((
                *time,
                response(format!("{id}:{model}"), Some(model.clone()), tokens),
            ));
        }
    }
    if shutdowns.is_empty() {
        for (time, id, out) in outputs {
            t.events
                .push((*time, response(id.clone(), None, (0, *out, 0, 0))));
        }
    }
}

/// A `tool.execution_complete`'s result, and the files it says it edited.
fn push_result(t: &mut Transcript, data: &Value, call: &Call, time: i64) {
    let success = data
        .get("success")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let output = data
        .pointer("/result/content")
        .and_then(Value::as_str)
        .map(str::to_owned);
    // Where a version says how a shell command exited: `shellExecution.exitCode`, else
    // `toolTelemetry.metrics.exit_code` (1.0.2x–1.0.6x, issue 43: real failures read
    // as successes), else the `<shellId: N completed with exit code K>` line that ends
    // its text, as the hooks read it. Copilot reports all of them as `success`.
    let shell = matches!(call.tool.as_str(), "Bash" | "bash");
    let exit_code = data
        .pointer("/shellExecution/exitCode")
        .or_else(|| data.pointer("/toolTelemetry/metrics/exit_code"))
        .and_then(Value::as_i64)
        .or_else(|| {
            shell
                .then(|| output.as_deref().and_then(shell_exit_code))
                .flatten()
        });
    let failure = data
        .pointer("/error/message")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let failed = !success || exit_code.is_some_and(|c| c != 0);
    let error = failed.then(|| match (exit_code, &failure) {
        (Some(c), _) if c != 0 => format!("Exit code {c}"),
        (_, Some(m)) => m.lines().next().unwrap_or("error").to_owned(),
        _ => "failed".to_owned(),
    });
    let duration_ms = u64::try_from(time.saturating_sub(call.started) / 1_000_000).ok();
    t.events.push((
        time,
        EventBody::ToolResult(ToolResult {
            call_id: call.id.clone(),
            status: if failed {
                ToolStatus::Error
            } else {
                ToolStatus::Ok
            },
            duration_ms,
            error,
            output: output.or(failure),
            exit_code,
        }),
    ));
    if failed {
        return;
    }
    let mut edited = |path: &str, create: bool| {
        t.events.push((
            time,
            EventBody::FileEdit(FileEdit {
                path: path.to_owned(),
                op: if create {
                    EditOp::Create
                } else {
                    EditOp::Modify
                },
                from: None,
                tool: Some(call.tool.clone()),
                call_id: Some(call.id.clone()),
                lines_added: None,
                lines_removed: None,
            }),
        ));
    };
    match data.get("fileEdits") {
        // Before `fileEdits` (Copilot CLI up to 1.0.8x): an `edit` or `create` changed
        // the file its arguments name (issue 43: no file in 8 real sessions, 5 of
        // which edited).
        None => {
            if let ("edit" | "create", Some(path)) = (call.own.as_str(), &call.path) {
                edited(path, call.own == "create");
            }
        }
        Some(edits) => {
            for edit in edits.as_array().into_iter().flatten() {
                if let Some(file) = edit.get("path").and_then(Value::as_str) {
                    edited(
                        file,
                        edit.get("kind").and_then(Value::as_str) == Some("create"),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{Action, HookState, map_payload};

    fn fixture_path(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/agents/fixtures/copilot")
            .join(rel)
    }

    fn fixture(rel: &str) -> String {
        let path = fixture_path(rel);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The payloads the real CLI sent (`hooks.jsonl`: one line per hook call, its
    /// stdin) for the events tacho registers.
    fn payloads(rel: &str) -> Vec<Vec<u8>> {
        let registered: Vec<&str> = Copilot.hook_events().iter().map(|e| e.0).collect();
        fixture(rel)
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|l| l.get("stdin").cloned())
            .filter(|v| {
                v.get("hook_event_name")
                    .and_then(Value::as_str)
                    .is_some_and(|e| registered.contains(&e))
            })
            .map(|v| v.to_string().into_bytes())
            .collect()
    }

    /// The one session directory's `events.jsonl` under a fixture's home.
    fn events_file(rel: &str) -> PathBuf {
        let dir = fixture_path(rel).join("home/.copilot/session-state");
        let Some(session) = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| e.path().is_dir())
        else {
            panic!("no session under {}", dir.display())
        };
        session.path().join("events.jsonl")
    }

    /// What the mock served (its log's `served` usage), summed: input without the
    /// cached tokens, cached, output.
    fn served(rel: &str) -> (u64, u64, u64) {
        let mut sum = (0, 0, 0);
        for l in fixture(rel).lines() {
            let Ok(v) = serde_json::from_str::<Value>(l) else {
                continue;
            };
            let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
            let cached = n("/served/prompt_tokens_details/cached_tokens");
            sum.0 += n("/served/prompt_tokens") - cached;
            sum.1 += cached;
            sum.2 += n("/served/completion_tokens");
        }
        sum
    }

    /// ccusage's totals on the same data: input (without cached), cached, output.
    fn ccusage(rel: &str) -> (u64, u64, u64) {
        let v: Value = serde_json::from_str(&fixture(rel)).unwrap_or_default();
        let n = |k: &str| v["totals"][k].as_u64().unwrap_or(0);
        (n("inputTokens"), n("cacheReadTokens"), n("outputTokens"))
    }

    /// A session file imported.
    fn read_session_file(path: &Path) -> std::io::Result<Transcript> {
        let bytes = crate::transcript::read_transcript_file(path)?;
        Ok(Copilot.import_transcript(path, &bytes))
    }

    /// The (call id, tool) of each call among `events`.
    fn calls<'e>(events: impl IntoIterator<Item = &'e EventBody>) -> Vec<(&'e str, &'e str)> {
        events
            .into_iter()
            .filter_map(|e| match e {
                EventBody::ToolCall(c) => Some((c.call_id.as_str(), c.tool.as_str())),
                _ => None,
            })
            .collect()
    }

    /// The calls of the captured runs, as the hooks and the import record them.
    const CALLS: [(&str, &str); 5] = [
        ("call-1", "Bash"),
        ("call-2", "Write"),
        ("call-3", "Edit"),
        ("call-4", "Bash"),
        ("call-5", "Bash"),
    ];

    fn events(actions: &[Action]) -> Vec<&EventBody> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Event { body, .. } => Some(body),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_real_payloads_map_to_calls_results_steps_and_the_gate() {
        let agent = Agent::Copilot;
        let mut st = HookState::default();
        let mut actions = Vec::new();
        for p in payloads("pascal/hooks.jsonl") {
            let p = agent
                .parse_payload(&p)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&p)));
            actions.extend(map_payload(agent, &p, &mut st));
        }
        let events = events(&actions);
        let prompts: Vec<Option<&str>> = events
            .iter()
            .filter_map(|e| match e {
                EventBody::AgentNotice(n) if n.notice == "prompt" => Some(n.message.as_deref()),
                _ => None,
            })
            .collect();
        assert_eq!(
            prompts,
            [
                Some("Edit notes.txt, write hello.txt, then run a failing command."),
                Some("REFUSED-ONCE: append a line to notes.txt before you stop.")
            ]
        );
        assert_eq!(calls(events.iter().copied()), CALLS);
        // The failing shell was reported as `success`: its exit code is in the text.
        let results: Vec<(&str, ToolStatus, Option<i64>)> = events
            .iter()
            .filter_map(|e| match e {
                EventBody::ToolResult(r) => Some((r.call_id.as_str(), r.status, r.exit_code)),
                _ => None,
            })
            .collect();
        assert_eq!(
            results,
            [
                ("call-1", ToolStatus::Ok, None),
                ("call-2", ToolStatus::Ok, None),
                ("call-3", ToolStatus::Ok, None),
                ("call-4", ToolStatus::Error, Some(3)),
                ("call-5", ToolStatus::Ok, None),
            ]
        );
        let failed = events.iter().find_map(|e| match e {
            EventBody::ToolResult(r) if r.call_id == "call-4" => {
                Some((r.error.clone(), r.output.clone()))
            }
            _ => None,
        });
        assert_eq!(
            failed,
            Some((
                Some("Exit code 3".to_owned()),
                Some("about-to-fail\n<shellId: 1 completed with exit code 3>".to_owned())
            ))
        );
        // Every tool that can change files is a step: the shells whole, `create` and
        // `edit` their file.
        let before = crate::hook::before_step_snapshots(&actions);
        let hello = vec!["/WORKSPACE/hello.txt".to_owned()];
        assert_eq!(
            before,
            [
                (vec![], 1),
                (hello.clone(), 2),
                (hello, 3),
                (vec![], 4),
                (vec![], 5)
            ]
        );
        let gates: Vec<bool> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Gate {
                    already_blocked, ..
                } => Some(*already_blocked),
                _ => None,
            })
            .collect();
        assert_eq!(gates, [false, true], "both stops reach the gate");
        assert!(st.main.ended, "SessionEnd ends it");
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, EventBody::AgentNotice(n) if n.notice.starts_with("hook:"))),
            "{events:?}"
        );
    }

    /// Issue 43: Copilot CLI before `session.usage_record` and `fileEdits` (shapes of
    /// real 1.0.2 and 1.0.75 files): usage from `session.shutdown`'s `modelMetrics`
    /// (input without cache reads and writes), from messages' `outputTokens` when it
    /// never shut down; an `edit`/`create` changed the file its arguments name.
    #[test]
    fn sessions_before_usage_records_and_file_edits_are_read() {
        let head = [
            r#"{"type":"session.start","data":{"sessionId":"old1","copilotVersion":"1.0.2","context":{"cwd":"/w"}},"id":"e0","timestamp":"2026-03-07T15:20:00.000Z"}"#,
            r#"{"type":"user.message","data":{"content":"fix it"},"id":"e1","timestamp":"2026-03-07T15:20:01.000Z"}"#,
            r#"{"type":"assistant.message","data":{"messageId":"dca91a42","content":"x","toolRequests":[],"outputTokens":373},"id":"e2","timestamp":"2026-03-07T15:23:45.175Z"}"#,
            r#"{"type":"tool.execution_start","data":{"toolCallId":"tc1","toolName":"edit","arguments":{"path":"/w/src/a.py","old_str":"a","new_str":"b"}},"id":"e3","timestamp":"2026-03-07T15:23:46.000Z"}"#,
            r#"{"type":"tool.execution_complete","data":{"toolCallId":"tc1","success":true,"result":{"content":"File /w/src/a.py updated with changes."}},"id":"e4","timestamp":"2026-03-07T15:23:47.000Z"}"#,
            r#"{"type":"tool.execution_start","data":{"toolCallId":"tc2","toolName":"create","arguments":{"path":"/w/src/b.py","file_text":"x"}},"id":"e5","timestamp":"2026-03-07T15:23:48.000Z"}"#,
            r#"{"type":"tool.execution_complete","data":{"toolCallId":"tc2","success":false,"error":{"message":"exists"}},"id":"e6","timestamp":"2026-03-07T15:23:49.000Z"}"#,
        ]
        .join("\n");
        let shutdown = r#"{"type":"session.shutdown","data":{"shutdownType":"routine","modelMetrics":{"claude-opus-4.6-1m":{"requests":{"count":53,"cost":24},"usage":{"inputTokens":1627935,"outputTokens":16655,"cacheReadTokens":1424086,"cacheWriteTokens":0}},"claude-sonnet-5":{"requests":{"count":1,"cost":1},"usage":{"inputTokens":24210,"outputTokens":4,"cacheReadTokens":0,"cacheWriteTokens":24208}}}},"id":"sd1","timestamp":"2026-03-07T15:30:00.000Z"}"#;
        let responses = |t: &Transcript| -> Vec<(u64, u64, u64, u64)> {
            t.events
                .iter()
                .filter_map(|(_, b)| match b {
                    EventBody::LlmResponse(r) => {
                        Some((r.tokens_in, r.tokens_out, r.cache_read, r.cache_write))
                    }
                    _ => None,
                })
                .collect()
        };
        let t = read_copilot_events(
            Path::new("/c/old1/events.jsonl"),
            format!("{head}\n{shutdown}\n").as_bytes(),
        );
        assert_eq!(
            responses(&t),
            [(203_849, 16_655, 1_424_086, 0), (2, 4, 0, 24_208)]
        );
        let edits: Vec<(&str, EditOp)> = t
            .events
            .iter()
            .filter_map(|(_, b)| match b {
                EventBody::FileEdit(f) => Some((f.path.as_str(), f.op)),
                _ => None,
            })
            .collect();
        assert_eq!(
            edits,
            [("/w/src/a.py", EditOp::Modify)],
            "the failed create edits nothing"
        );
        // Killed before it shut down: its messages' output tokens.
        let t = read_copilot_events(
            Path::new("/c/old1/events.jsonl"),
            format!("{head}\n").as_bytes(),
        );
        assert_eq!(responses(&t), [(0, 373, 0, 0)]);
    }

    #[test]
    fn tokens_are_the_usage_records_and_equal_what_was_served_and_ccusage() {
        for rel in ["pascal", "."] {
            let served = served(&format!("{rel}/mock.log"));
            assert_eq!(served, (4760, 2800, 360), "{rel}");
            assert_eq!(ccusage(&format!("{rel}/ccusage.json")), served, "{rel}");
            let path = events_file(rel);
            // Live: read as the hook reads it at each stop.
            let mut cursor = crate::transcript::Cursor::default();
            let caught = Agent::Copilot
                .read_transcript(&mut cursor, &path, true)
                .unwrap_or_else(|e| panic!("{e}"));
            let sum = |u: &[Usage]| {
                u.iter().fold((0, 0, 0), |s, u| {
                    (
                        s.0 + u.input_tokens,
                        s.1 + u.cache_read,
                        s.2 + u.output_tokens,
                    )
                })
            };
            assert_eq!(caught.usages.len(), 7, "{rel}");
            assert_eq!(sum(&caught.usages), served, "{rel}");
            let again = Agent::Copilot
                .read_transcript(&mut cursor, &path, true)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(again.usages, [], "{rel}: read again, nothing new");
            // Imported: the same.
            let t = read_session_file(&path).unwrap_or_else(|e| panic!("{e}"));
            let tokens = t.events.iter().fold((0, 0, 0), |s, (_, e)| match e {
                EventBody::LlmResponse(r) => {
                    (s.0 + r.tokens_in, s.1 + r.cache_read, s.2 + r.tokens_out)
                }
                _ => s,
            });
            assert_eq!(tokens, served, "{rel}");
        }
    }

    #[test]
    fn a_session_imports_with_calls_results_durations_edits_and_prompts() {
        let t = read_session_file(&events_file("pascal")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.session, "6ad6a608-123b-45da-a3f1-fd191eb38473");
        assert_eq!(t.workspace.as_deref(), Some("/WORKSPACE"));
        // Numbered and named as the hooks record them.
        assert_eq!(calls(t.events.iter().map(|(_, e)| e)), CALLS);
        let results: Vec<(&str, ToolStatus, Option<i64>, bool)> = t
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                EventBody::ToolResult(r) => Some((
                    r.call_id.as_str(),
                    r.status,
                    r.exit_code,
                    r.duration_ms.is_some_and(|d| d > 0),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            results,
            [
                ("call-1", ToolStatus::Ok, Some(0), true),
                ("call-2", ToolStatus::Ok, None, true),
                ("call-3", ToolStatus::Ok, None, true),
                ("call-4", ToolStatus::Error, Some(3), true),
                ("call-5", ToolStatus::Ok, Some(0), true),
            ]
        );
        let edits: Vec<(&str, EditOp, Option<&str>)> = t
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                EventBody::FileEdit(f) => Some((f.path.as_str(), f.op, f.call_id.as_deref())),
                _ => None,
            })
            .collect();
        assert_eq!(
            edits,
            [
                ("/WORKSPACE/hello.txt", EditOp::Create, Some("call-2")),
                ("/WORKSPACE/hello.txt", EditOp::Modify, Some("call-3"))
            ]
        );
        let prompts = t
            .events
            .iter()
            .filter(|(_, e)| matches!(e, EventBody::AgentNotice(n) if n.notice == "prompt"))
            .count();
        assert_eq!(prompts, 2, "the prompt and the refusal's reason");
        assert!(t.unknown.is_empty(), "{:?}", t.unknown);
        assert_eq!(t.bad_lines, 0);
        assert!(Copilot.is_transcript(Path::new("/s/x/events.jsonl")));
        assert!(!Copilot.is_transcript(Path::new("/s/x/other.jsonl")));
    }

    #[test]
    fn a_subagents_hooks_record_a_child_session_of_its_caller() {
        let agent = Agent::Copilot;
        // One hook state per session, as the hook keeps them.
        let mut states: BTreeMap<String, HookState> = BTreeMap::new();
        let mut starts = Vec::new();
        let mut ends = Vec::new();
        let mut tools = Vec::new();
        let mut gates = 0;
        for p in payloads("pascal/subagent/hooks.jsonl") {
            let p = agent
                .parse_payload(&p)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&p)));
            let st = states.entry(p.session_id.clone()).or_default();
            for a in map_payload(agent, &p, st) {
                match a {
                    Action::Event {
                        session,
                        body: EventBody::SessionStart(s),
                    } => starts.push((session, s.parent)),
                    Action::Event {
                        session,
                        body: EventBody::SessionEnd(_),
                    } => ends.push(session),
                    Action::Event {
                        session,
                        body: EventBody::ToolCall(c),
                    } => tools.push((session, c.tool)),
                    Action::Gate { .. } => gates += 1,
                    Action::Tokens { session, .. } => {
                        assert_eq!(session, "b379e61d-0df2-4192-8d4f-995e034f7f82")
                    }
                    _ => {}
                }
            }
        }
        let caller = "b379e61d-0df2-4192-8d4f-995e034f7f82";
        let child = states
            .keys()
            .find(|k| *k != caller)
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            starts,
            [
                (caller.to_owned(), None),
                (child.clone(), Some(caller.to_owned()))
            ]
        );
        assert_eq!(
            tools,
            [
                (caller.to_owned(), "Agent".to_owned()),
                (child.clone(), "Bash".to_owned())
            ]
        );
        assert_eq!(ends, [child, caller.to_owned()], "its stop ends the child");
        assert_eq!(gates, 1, "the caller's stop only");
    }

    #[test]
    fn a_subagents_events_import_into_its_callers_session() {
        let path = events_file("pascal/subagent");
        let t = read_session_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let calls: Vec<(String, String, Option<String>)> = t
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                EventBody::ToolCall(c) => {
                    Some((c.call_id.clone(), c.tool.clone(), c.agent.clone()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            calls,
            [
                ("call-1".to_owned(), "Agent".to_owned(), None),
                (
                    "call_mock_0001.call-1".to_owned(),
                    "Bash".to_owned(),
                    Some("general-purpose".to_owned())
                ),
            ]
        );
        let served = served("pascal/subagent/mock.log");
        assert_eq!(ccusage("pascal/subagent/ccusage.json"), served);
        let tokens = t.events.iter().fold((0, 0, 0), |s, (_, e)| match e {
            EventBody::LlmResponse(r) => {
                (s.0 + r.tokens_in, s.1 + r.cache_read, s.2 + r.tokens_out)
            }
            _ => s,
        });
        assert_eq!(tokens, served, "the subagent's requests are its caller's");
        let prompts: Vec<Option<&str>> = t
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                EventBody::AgentNotice(n) if n.notice == "prompt" => Some(n.agent.as_deref()),
                _ => None,
            })
            .collect();
        assert_eq!(prompts, [None, Some("general-purpose")]);
        assert!(t.unknown.is_empty(), "{:?}", t.unknown);
    }

    #[test]
    fn a_failing_or_denied_result_is_a_failure() {
        let payload = |result: Value| {
            serde_json::json!({"hook_event_name": "PostToolUse", "session_id": "s",
                "tool_name": "Bash", "tool_input": {"command": "x"}, "tool_result": result})
            .to_string()
        };
        let read = |v: Value| {
            Copilot
                .parse_payload(payload(v).as_bytes())
                .unwrap_or_default()
        };
        let p = read(serde_json::json!({"result_type": "success",
            "text_result_for_llm": "ok\n<shellId: 4 completed with exit code 0>"}));
        assert_eq!((p.hook_event_name.as_str(), p.error), ("PostToolUse", None));
        let p = read(serde_json::json!({"result_type": "denied",
            "text_result_for_llm": "The user denied it."}));
        assert_eq!(p.hook_event_name, "PostToolUseFailure");
        assert_eq!(p.error, Some(Value::from("denied: The user denied it.")));
        assert_eq!(
            shell_exit_code("<shellId: 1 completed with exit code 127>"),
            Some(127)
        );
        assert_eq!(
            shell_exit_code("x\n<shellId: 1 completed with exit code -1>"),
            Some(-1)
        );
        assert_eq!(
            shell_exit_code("<shellId: 2 started in the background>"),
            None
        );
        // Only its last line, and only a shell's.
        assert_eq!(
            shell_exit_code("<shellId: 1 completed with exit code 3>\nmore output"),
            None
        );
        let p = Copilot
            .parse_payload(
                serde_json::json!({"hook_event_name": "PostToolUse", "session_id": "s",
                    "tool_name": "view", "tool_input": {"path": "/w/log.txt"},
                    "tool_result": {"result_type": "success",
                        "text_result_for_llm": "1. <shellId: 9 completed with exit code 1>"}})
                .to_string()
                .as_bytes(),
            )
            .unwrap_or_default();
        assert_eq!((p.hook_event_name.as_str(), p.error), ("PostToolUse", None));
        assert!(Copilot.parse_payload(b"{\"hookName\": \"x\"}").is_err());
    }

    /// Issue 43, found in the real-transcript corpus (1.0.64): a shell command that
    /// exited 1 or 128 is `success: true`; its exit code is in `toolTelemetry` (or
    /// only in the `<shellId …>` line of its text). Both are failures.
    #[test]
    fn a_shell_exit_code_from_telemetry_or_text_fails_the_call() {
        let start = |id: &str| {
            format!(
                r#"{{"type":"tool.execution_start","data":{{"toolCallId":"{id}","toolName":"bash","arguments":{{"command":"git -C x branch"}}}},"id":"s{id}","timestamp":"2026-06-25T02:00:01.000Z"}}"#
            )
        };
        let lines = [
            r#"{"type":"session.start","data":{"sessionId":"s1","copilotVersion":"1.0.64","context":{"cwd":"/w"}},"id":"e0","timestamp":"2026-06-25T02:00:00.000Z"}"#.to_owned(),
            start("t1"),
            r#"{"type":"tool.execution_complete","data":{"toolCallId":"t1","success":true,"result":{"content":"\n<shellId: 51 completed with exit code 128>"},"toolTelemetry":{"properties":{"shell_error_category":"command_nonzero_exit"},"metrics":{"exit_code":128}}},"id":"c1","timestamp":"2026-06-25T02:00:03.000Z"}"#.to_owned(),
            start("t2"),
            r#"{"type":"tool.execution_complete","data":{"toolCallId":"t2","success":true,"result":{"content":"oops\n<shellId: 50 completed with exit code 1>"}},"id":"c2","timestamp":"2026-06-25T02:00:04.000Z"}"#.to_owned(),
            start("t3"),
            r#"{"type":"tool.execution_complete","data":{"toolCallId":"t3","success":true,"result":{"content":"main\n<shellId: 52 completed with exit code 0>"},"toolTelemetry":{"metrics":{"exit_code":0}}},"id":"c3","timestamp":"2026-06-25T02:00:05.000Z"}"#.to_owned(),
        ]
        .join("\n");
        let t = read_copilot_events(Path::new("/c/s1/events.jsonl"), lines.as_bytes());
        let results: Vec<(ToolStatus, Option<i64>)> = t
            .events
            .iter()
            .filter_map(|(_, b)| match b {
                EventBody::ToolResult(r) => Some((r.status, r.exit_code)),
                _ => None,
            })
            .collect();
        assert_eq!(
            results,
            [
                (ToolStatus::Error, Some(128)),
                (ToolStatus::Error, Some(1)),
                (ToolStatus::Ok, Some(0))
            ]
        );
    }

    #[test]
    fn hooks_files_per_scope_and_the_trust_note() {
        let mut places = Places {
            home: Some("/h".into()),
            project: "/p".into(),
            ..Places::default()
        };
        let f = |places: &Places, s| Copilot.settings_file(places, s);
        assert_eq!(
            f(&places, Scope::User),
            Ok("/h/.copilot/hooks/tacho.json".into())
        );
        assert_eq!(
            f(&places, Scope::Project),
            Ok("/p/.github/hooks/tacho.json".into())
        );
        assert_eq!(f(&places, Scope::Local), Err(PlaceError::NoScope));
        assert_eq!(
            Copilot.import_root(&places),
            Ok("/h/.copilot/session-state".into())
        );
        places.vars.insert(HOME_VAR.into(), "/c".into());
        assert_eq!(f(&places, Scope::User), Ok("/c/hooks/tacho.json".into()));
        assert_eq!(Copilot.import_root(&places), Ok("/c/session-state".into()));
        assert!(
            Copilot
                .install_note_for(Scope::Project)
                .is_some_and(|n| n.contains("trusted_folders"))
        );
        assert_eq!(Copilot.install_note_for(Scope::User), None);
        assert_eq!(Agent::parse("copilot"), Some(Agent::Copilot));
        assert_eq!(Agent::parse("github-copilot"), Some(Agent::Copilot));
    }
}
