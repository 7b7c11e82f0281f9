//! Cline CLI (`cline`, npm `cline`, a Bun binary with its core packages readable
//! beside it). Its hooks are executables named after the event (`TaskStart`,
//! `PreToolUse`, `PostToolUse`, `TaskComplete`, …) in a hooks directory — tacho writes
//! small scripts of its own there ([`Installation::EventExecutables`]): the user's
//! `~/.cline/hooks` (`$CLINE_DIR/hooks`) or the project's `.clinerules/hooks`. Cline
//! also reads `.cline/hooks` and `~/Documents/Cline/Hooks`; tacho does not write there.
//!
//! Its payload is its own (read here into the shared vocabulary): `hookName`
//! (`agent_start`, `tool_call`, `tool_result`, `agent_end`, …), `taskId` (not the
//! session), `sessionContext.rootSessionId` (the session: the directory name under
//! `~/.cline/data/sessions/`), `workspaceInfo.rootPath`, `tool_call {id, name, input}`
//! and `tool_result {id, name, input, output, durationMs}`. A failing shell command is
//! an output item with `success: false` and `error: "Command exited with code N"`
//! while the payload's own `postToolUse.success` stays true.
//!
//! No payload carries token usage nor a transcript path: the session's messages file
//! `<sessions>/<id>/<id>.messages.json` (one JSON document, rewritten as the session
//! goes) holds every assistant message with its `metrics` (input tokens with the
//! cached ones, cache reads and writes, output), one per model call, keyed by the
//! message's id. The hook names that file as the payload's transcript, and each
//! message is counted once. `TaskComplete` runs detached after the task ended and
//! cannot send the agent back: [`Adapter::stop_block`] is `None`, the completion gate
//! only records; no session end is reported, so tacho ends the session at that stop.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_schema::{AgentNotice, EventBody, ToolCall, ToolResult, ToolStatus};

use crate::adapter::{Adapter, HookEvent, Installation, PlaceError, Places, Scope};
use crate::hook::{HookPayload, PayloadError, ToolKind, exit_code_of, str_field, tool_target};
use crate::import::{Transcript, file_edit_event, prompt_event, start_event};
use crate::transcript::{Caught, Cursor, READ_BYTES_MAX, Usage, open_transcript};
use crate::{Agent, session_id_from};

#[derive(Debug)]
pub struct Cline;

/// Cline's tools that change nothing.
const READ_ONLY: &[&str] = &[
    "read_files",
    "search_codebase",
    "fetch_web_content",
    "ask_question",
    "team_status",
    "team_list_runs",
    "team_read_mailbox",
    "team_mission_log",
    "team_list_outcomes",
];

/// The variables that move Cline's directories (read from its core package's
/// `resolveClineDir`, `resolveClineDataDir`, `resolveSessionDataDir`).
const ENV_VARS: &[&str] = &["CLINE_DIR", "CLINE_DATA_DIR", "CLINE_SESSION_DATA_DIR"];

/// How long the hook at the task's end waits for the messages file to hold the last
/// reply (Cline writes it concurrently with the detached `TaskComplete` hook).
const LAST_REPLY_WAIT_MS: u64 = 3000;

impl Adapter for Cline {
    fn name(&self) -> &'static str {
        "cline"
    }

    fn env_vars(&self) -> &'static [&'static str] {
        ENV_VARS
    }

    /// The hooks directory (not a file): `$CLINE_DIR/hooks` (else `~/.cline/hooks`)
    /// for the user, `<project>/.clinerules/hooks` for the project.
    fn settings_file(&self, places: &Places, scope: Scope) -> Result<PathBuf, PlaceError> {
        match scope {
            Scope::User => Ok(places.config_dir("CLINE_DIR", ".cline")?.join("hooks")),
            Scope::Project => Ok(places.project.join(".clinerules").join("hooks")),
            Scope::Local => Err(PlaceError::NoScope),
        }
    }

    fn installation(&self) -> Installation {
        Installation::EventExecutables
    }

    /// The events Cline dispatches to hook files (its `PreCompact` and `Notification`
    /// files are never run: no hook event maps to them). Matchers and timeouts do not
    /// apply to executables.
    fn hook_events(&self) -> &'static [HookEvent] {
        &[
            ("TaskStart", None, 0),
            ("TaskResume", None, 0),
            ("UserPromptSubmit", None, 0),
            ("PreToolUse", None, 0),
            ("PostToolUse", None, 0),
            ("TaskComplete", None, 0),
            ("TaskCancel", None, 0),
            ("TaskError", None, 0),
            ("SessionShutdown", None, 0),
        ]
    }

    fn install_note(&self) -> Option<&'static str> {
        Some(
            "Cline's TaskComplete hook runs after the task ended and cannot send it back: the completion gate only records for Cline",
        )
    }

    /// Cline's payload (`hookName`); one already in the shared vocabulary (Claude
    /// Code's envelope: `hook_event_name`, `session_id`) is read as it is.
    fn parse_payload(&self, bytes: &[u8]) -> Result<HookPayload, PayloadError> {
        let raw: Value = serde_json::from_slice(bytes).map_err(PayloadError::Json)?;
        if raw.get("hookName").is_none() && raw.get("hook_event_name").is_some() {
            return HookPayload::parse(bytes);
        }
        let places = env_places();
        read_payload(&raw, sessions_dir(&places).ok().as_deref())
    }

    fn tool_kind(&self, tool: &str, input: Option<&Value>) -> ToolKind {
        match tool {
            "editor" => str_field(input, "path")
                .map_or(ToolKind::Anything, |p| ToolKind::Files(vec![p.to_owned()])),
            t if READ_ONLY.contains(&t) => ToolKind::ReadOnly,
            _ => ToolKind::Anything,
        }
    }

    /// `path` is the session's messages file (named by [`Cline::parse_payload`]).
    /// With `finish` (the task ended), the last reply is waited for a moment.
    fn read_transcript(
        &self,
        cursor: &mut Cursor,
        path: &Path,
        finish: bool,
    ) -> std::io::Result<Caught> {
        let mut waited_ms = 0;
        let doc = loop {
            let doc = read_messages_file(path);
            let done = match &doc {
                Ok(d) => !finish || ends_with_reply(d),
                // Being replaced: tried again at the end only. A file that is not
                // there is not waited for (Cline writes it from the first reply on,
                // long before the task ends).
                Err(e) => !finish || e.kind() != std::io::ErrorKind::InvalidData,
            };
            if done || waited_ms >= LAST_REPLY_WAIT_MS {
                break doc?;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
            waited_ms += 100;
        };
        Ok(usages_since(cursor, &doc))
    }

    fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError> {
        sessions_dir(places)
    }

    /// The CLI's `<id>.messages.json`, and a VS Code extension task folder's
    /// `ui_messages.json` (issue 43: the data its users have).
    fn is_transcript(&self, path: &Path) -> bool {
        path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            (n.ends_with(MESSAGES_SUFFIX) && n.len() > MESSAGES_SUFFIX.len())
                || n == TASK_UI_MESSAGES
        })
    }

    /// A task folder's other files, given by name: the folder is read through its
    /// `ui_messages.json`.
    fn unread_format(&self, path: &Path, listed: bool) -> Option<String> {
        let name = path.file_name()?.to_str()?;
        let other =
            !listed && matches!(name, "api_conversation_history.json" | "task_metadata.json");
        other.then(|| {
            format!(
                "{} is a file of a Cline VS Code extension task folder: tacho reads the folder through its {TASK_UI_MESSAGES} (give the folder or that file)",
                path.display()
            )
        })
    }

    /// The CLI's sessions, and the VS Code extension's task folders (Linux and macOS
    /// places of VS Code's global storage; those that exist).
    fn import_roots(&self, places: &Places) -> Result<Vec<PathBuf>, PlaceError> {
        let mut roots = vec![self.import_root(places)?];
        if let Some(home) = &places.home {
            for code in [".config/Code/User", "Library/Application Support/Code/User"] {
                roots.push(
                    home.join(code)
                        .join("globalStorage/saoudrizwan.claude-dev/tasks"),
                );
            }
        }
        Ok(roots)
    }

    fn import_transcript(&self, path: &Path, bytes: &[u8]) -> Transcript {
        if path.file_name().is_some_and(|n| n == TASK_UI_MESSAGES) {
            return read_cline_task(path, bytes);
        }
        // The session file beside it gives the workspace; without it (or unreadable)
        // the session imports without one.
        let session = read_session_file(&session_file_of(path)).ok();
        read_cline_session(path, bytes, session.as_ref())
    }

    fn stop_block(&self, _reason: &str) -> Option<String> {
        None
    }

    fn reports_session_end(&self) -> bool {
        false
    }
}

/// The file of a VS Code extension task folder (`tasks/<id>/`) tacho reads: what the
/// extension showed, with each model request's usage.
pub const TASK_UI_MESSAGES: &str = "ui_messages.json";

/// Reads a Cline VS Code extension task folder through its `ui_messages.json`: the
/// session is the folder's name (the task id), started at its first message. Each
/// `api_req_started` is one model request (`tokensIn`, `tokensOut`, `cacheReads`,
/// `cacheWrites`, its model from `modelInfo`); each `tool` (`readFile`,
/// `editedExistingFile`, `newFileCreated`, …) a call with its result, an edit for the
/// two that write; each `command` a shell call with no result (the folder does not say
/// how it ended; its `command_output` is a notice); a `diff_error` or `error` fails the
/// tool call before it; the first
/// `text` is the prompt. The workspace is what a tool's absolute `content` path adds
/// to its relative `path`.
pub fn read_cline_task(path: &Path, bytes: &[u8]) -> Transcript {
    let mut t = Transcript::default();
    let ui: Vec<Value> = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Array(a)) => a,
        Ok(_) => {
            t.broken = Some("not a list of messages".into());
            return t;
        }
        Err(e) => {
            t.bad_lines += 1;
            t.broken = Some(format!("not a whole JSON document: {e}"));
            return t;
        }
    };
    t.lines = 1;
    let id = path
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    t.session = session_id_from(&id);
    let ts = |m: &Value| m.get("ts").and_then(Value::as_i64).map(|ms| ms * 1_000_000);
    let json_text = |m: &Value| -> Option<Value> {
        serde_json::from_str(m.get("text").and_then(Value::as_str)?).ok()
    };
    t.workspace = ui.iter().filter_map(json_text).find_map(|j| {
        let rel = j.get("path")?.as_str()?;
        let abs = j.get("content")?.as_str()?;
        let ws = abs.strip_suffix(rel)?.strip_suffix('/')?;
        (abs.starts_with('/') && !rel.is_empty()).then(|| ws.to_owned())
    });
    let start = ui.iter().find_map(ts).unwrap_or(0);
    t.events.push((
        start,
        start_event(Agent::Cline, None, t.workspace.clone(), None),
    ));
    let mut time = start;
    let mut n = 0u64;
    // The shell call waiting for its output; the tool call whose result waits for the
    // next message (a `diff_error` or `error` fails it), with the edit it makes if not.
    let mut command: Option<String> = None;
    let mut tool_open: Option<(String, i64, Option<EventBody>)> = None;
    let mut prompted = false;
    for m in &ui {
        time = ts(m).unwrap_or(time);
        let kind = m
            .get("say")
            .or_else(|| m.get("ask"))
            .and_then(Value::as_str)
            .unwrap_or("(none)");
        let text = m.get("text").and_then(Value::as_str).unwrap_or("");
        let failure = matches!(kind, "diff_error" | "error")
            .then(|| text.lines().next().unwrap_or(kind).to_owned());
        if let Some((id, at, edit)) = tool_open.take() {
            let failed = failure.is_some();
            task_result(&mut t, &id, at, failure.clone(), None);
            if let (false, Some(e)) = (failed, edit) {
                t.events.push((at, e));
            }
            if failed {
                continue;
            }
        }
        let mut call = |t: &mut Transcript, tool: &str, target: Option<String>, input: String| {
            n += 1;
            let id = format!("task-call-{n}");
            t.events.push((
                time,
                EventBody::ToolCall(ToolCall {
                    call_id: id.clone(),
                    tool: tool.to_owned(),
                    target,
                    input: Some(input),
                    agent: None,
                }),
            ));
            id
        };
        match kind {
            "text" if !prompted && !text.trim().is_empty() => {
                prompted = true;
                t.events.push((time, prompt_event(text.to_owned())));
            }
            "api_req_started" => {
                let Some(j) = json_text(m) else {
                    *t.skipped
                        .entry("api_req_started (no usage)".into())
                        .or_default() += 1;
                    continue;
                };
                // A request still running has no usage yet: left for a later import.
                if j.get("tokensIn").is_none() && j.get("tokensOut").is_none() {
                    *t.skipped
                        .entry("api_req_started (running)".into())
                        .or_default() += 1;
                    continue;
                }
                let u = |k: &str| j.get(k).and_then(Value::as_u64).unwrap_or(0);
                let rid = format!(
                    "cline-task-{}",
                    m.get("ts").and_then(Value::as_i64).unwrap_or(0)
                );
                t.events.push((
                    time,
                    EventBody::LlmResponse(tacho_schema::LlmResponse {
                        request_id: rid.clone(),
                        response_id: Some(rid),
                        model: m
                            .pointer("/modelInfo/modelId")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        tokens_in: u("tokensIn"),
                        tokens_out: u("tokensOut"),
                        cache_read: u("cacheReads"),
                        cache_write: u("cacheWrites"),
                        latency_ms: None,
                        stop_reason: None,
                        error: None,
                    }),
                ));
            }
            "tool" if m.get("partial") != Some(&Value::Bool(true)) => {
                let Some(j) = json_text(m) else {
                    *t.skipped.entry("tool (not JSON)".into()).or_default() += 1;
                    continue;
                };
                let tool = j.get("tool").and_then(Value::as_str).unwrap_or("tool");
                let file = j
                    .get("path")
                    .and_then(Value::as_str)
                    .map(|r| match &t.workspace {
                        Some(ws) if !r.starts_with('/') => format!("{ws}/{r}"),
                        _ => r.to_owned(),
                    });
                let id = call(&mut t, tool, file.clone(), j.to_string());
                let create = tool == "newFileCreated";
                let edit = file
                    .filter(|_| create || tool == "editedExistingFile")
                    .map(|f| file_edit_event(f, create, tool, &id, (None, None)));
                tool_open = Some((id, time, edit));
            }
            // A command: a call. The folder does not say how it ended (its output has
            // no exit status): it gets no result, so it never counts as a passing (or
            // failing) run; its output is kept as a notice.
            "command" if !text.is_empty() => {
                let id = call(
                    &mut t,
                    "execute_command",
                    Some(text.to_owned()),
                    text.to_owned(),
                );
                command = Some(id);
            }
            "command_output" => match &command {
                Some(id) => t.events.push((
                    time,
                    EventBody::AgentNotice(AgentNotice {
                        notice: "command_output".into(),
                        message: Some(format!("{id}: {}", clip_output(text))),
                        agent: None,
                    }),
                )),
                None => {
                    *t.skipped
                        .entry("command_output (no command)".into())
                        .or_default() += 1
                }
            },
            "diff_error" | "error" => {
                *t.skipped.entry(format!("{kind} (no call)")).or_default() += 1;
            }
            other => *t.skipped.entry(other.to_owned()).or_default() += 1,
        }
    }
    // (A last tool still open waits for what follows it, a task still running: a
    // later import records its result.)
    t
}

/// At most 2,000 characters of a command's output, for its notice.
fn clip_output(text: &str) -> String {
    let mut out: String = text.chars().take(2_000).collect();
    if out.len() < text.len() {
        out.push('…');
    }
    out
}

/// A task folder's tool result: failed with `failed`'s message, else ok.
fn task_result(
    t: &mut Transcript,
    id: &str,
    time: i64,
    failed: Option<String>,
    output: Option<String>,
) {
    t.events.push((
        time,
        EventBody::ToolResult(ToolResult {
            call_id: id.to_owned(),
            status: if failed.is_some() {
                ToolStatus::Error
            } else {
                ToolStatus::Ok
            },
            duration_ms: None,
            exit_code: None,
            error: failed,
            output,
        }),
    ));
}

/// What names a session's messages file: `<id>.messages.json`.
pub const MESSAGES_SUFFIX: &str = ".messages.json";

/// The largest session file read (`<id>.json`, a few kilobytes).
const SESSION_FILE_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// The places of the hook's environment: Cline runs its hooks with its own, so its
/// directory variables and `HOME` are the ones it wrote the session with.
fn env_places() -> Places {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    Places {
        home: var("HOME").or_else(dirs::home_dir),
        project: PathBuf::new(),
        outside_work_tree: true,
        vars: ENV_VARS
            .iter()
            .filter_map(|k| Some(((*k).to_owned(), var(k)?)))
            .collect(),
    }
}

/// Where Cline keeps its sessions: `$CLINE_SESSION_DATA_DIR`, else
/// `$CLINE_DATA_DIR/sessions`, else `<$CLINE_DIR or ~/.cline>/data/sessions`.
pub fn sessions_dir(places: &Places) -> Result<PathBuf, PlaceError> {
    if let Some(d) = places.var("CLINE_SESSION_DATA_DIR") {
        return Ok(d.to_path_buf());
    }
    if let Some(d) = places.var("CLINE_DATA_DIR") {
        return Ok(d.join("sessions"));
    }
    Ok(places
        .config_dir("CLINE_DIR", ".cline")?
        .join("data")
        .join("sessions"))
}

/// A session id that names a directory below the sessions directory: a plain name
/// (a payload is untrusted: `..` or a `/` would name a file elsewhere).
fn plain_name(id: &str) -> Option<&str> {
    let ok = !id.is_empty()
        && id != "."
        && id != ".."
        && id.len() <= 200
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    ok.then_some(id)
}

/// Reads one Cline payload (parsed) into the shared vocabulary; `sessions`: where its
/// messages file is looked for.
pub fn read_payload(raw: &Value, sessions: Option<&Path>) -> Result<HookPayload, PayloadError> {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let hook = s(raw, "hookName").ok_or(PayloadError::Missing("hookName"))?;
    let session = raw
        .get("sessionContext")
        .and_then(|c| s(c, "rootSessionId"))
        .or_else(|| s(raw, "taskId"))
        .filter(|id| !id.trim().is_empty())
        .ok_or(PayloadError::Missing("sessionContext.rootSessionId"))?;
    // A subagent's events carry the agent that spawned it.
    let subagent = raw
        .get("parent_agent_id")
        .and_then(Value::as_str)
        .and_then(|_| s(raw, "agent_id"));
    let mut p = HookPayload {
        hook_event_name: match hook.as_str() {
            "agent_start" if subagent.is_some() => "SubagentStart",
            "agent_end" if subagent.is_some() => "SubagentStop",
            "agent_start" | "agent_resume" => "SessionStart",
            "prompt_submit" => "UserPromptSubmit",
            "tool_call" => "PreToolUse",
            "tool_result" => "PostToolUse",
            "agent_end" => "Stop",
            "agent_abort" | "agent_error" | "session_shutdown" => "SessionEnd",
            "pre_compact" => "PreCompact",
            other => other,
        }
        .to_owned(),
        cwd: raw
            .get("workspaceInfo")
            .and_then(|w| s(w, "rootPath"))
            .or_else(|| {
                raw.get("workspaceRoots")
                    .and_then(|r| r.get(0))
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            }),
        transcript_path: sessions.zip(plain_name(&session)).map(|(d, id)| {
            d.join(id)
                .join(format!("{id}{MESSAGES_SUFFIX}"))
                .display()
                .to_string()
        }),
        agent_id: subagent,
        agent_type: None,
        session_id: session,
        ..HookPayload::default()
    };
    match hook.as_str() {
        "agent_resume" => p.source = Some("resume".into()),
        "agent_abort" => p.reason = Some("aborted".into()),
        "agent_error" => p.reason = Some("error".into()),
        "session_shutdown" => p.reason = Some("shutdown".into()),
        "prompt_submit" => {
            p.prompt = raw
                .get("userPromptSubmit")
                .and_then(|u| s(u, "prompt"))
                .map(|t| user_text(&t));
        }
        "agent_end" => {
            p.last_assistant_message = raw.get("turn").and_then(|t| s(t, "outputText"));
        }
        "pre_compact" => p.trigger = Some("auto".into()),
        _ => {}
    }
    // The task's prompt is not in its start payload: it is the session file's.
    if hook == "agent_start"
        && p.agent_id.is_none()
        && let Some(path) = &p.transcript_path
        && let Ok(doc) = read_session_file(&session_file_of(Path::new(path)))
        && let Some(prompt) = s(&doc, "prompt").filter(|t| !t.trim().is_empty())
    {
        p.hook_event_name = "UserPromptSubmit".into();
        p.prompt = Some(prompt);
    }
    let call = raw.get("tool_call").or_else(|| raw.get("tool_result"));
    if let Some(c) = call {
        p.tool_name = s(c, "name");
        p.tool_use_id = s(c, "id");
        p.tool_input = c.get("input").cloned();
        p.duration_ms = c.get("durationMs").and_then(Value::as_u64);
    }
    if let Some(out) = raw.get("tool_result").and_then(|r| r.get("output")) {
        let o = tool_output(out);
        if let Some(error) = o.error {
            p.hook_event_name = "PostToolUseFailure".into();
            p.error = Some(Value::String(error));
        }
        p.tool_response = Some(Value::String(o.text));
    }
    Ok(p)
}

/// What a tool returned, read from Cline's output (a list of `{query, result,
/// success, error?}` for `run_commands`, one such object for `editor`, sometimes that
/// object as JSON text, or any other value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The full output: each command's result (after a `$ <command>` line when there
    /// are several).
    pub text: String,
    /// Why it failed, when an item says `success: false`.
    pub error: Option<String>,
}

pub fn tool_output(out: &Value) -> Output {
    let parsed;
    let out = match out {
        Value::String(t) => match serde_json::from_str::<Value>(t) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) => {
                parsed = v;
                &parsed
            }
            _ => {
                return Output {
                    text: t.clone(),
                    error: None,
                };
            }
        },
        v => v,
    };
    let items: Vec<&Value> = match out {
        Value::Array(a) => a.iter().collect(),
        Value::Object(m) if m.contains_key("result") || m.contains_key("success") => vec![out],
        other => {
            return Output {
                text: other.to_string(),
                error: None,
            };
        }
    };
    let mut text = String::new();
    let mut errors = Vec::new();
    for item in &items {
        let result = match item.get("result") {
            Some(Value::String(r)) => r.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        };
        if items.len() > 1 {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "$ {}\n",
                item.get("query").and_then(Value::as_str).unwrap_or("")
            ));
        }
        text.push_str(&result);
        if item.get("success") == Some(&Value::Bool(false)) {
            let why = item
                .get("error")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| result.lines().next().map(str::to_owned))
                .unwrap_or_else(|| "failed".into());
            errors.push(why);
        }
    }
    Output {
        text,
        error: (!errors.is_empty()).then(|| errors.join("; ")),
    }
}

/// The user's words of a Cline user message (`<user_input mode="act">…</user_input>`).
fn user_text(text: &str) -> String {
    let t = text.trim();
    match t.strip_prefix("<user_input") {
        Some(rest) => {
            let inner = rest.split_once('>').map_or(rest, |(_, r)| r);
            inner
                .strip_suffix("</user_input>")
                .unwrap_or(inner)
                .trim()
                .to_owned()
        }
        None => t.to_owned(),
    }
}

/// `<dir>/<id>.messages.json` → `<dir>/<id>.json`.
pub fn session_file_of(messages: &Path) -> PathBuf {
    let name = messages
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(MESSAGES_SUFFIX))
        .unwrap_or("session");
    messages.with_file_name(format!("{name}.json"))
}

/// A JSON document read as a transcript is (a regular file, without blocking), at
/// most `max` bytes; a bigger one is refused.
fn read_json_doc(path: &Path, max: u64) -> std::io::Result<Value> {
    let f = open_transcript(path)?;
    let mut bytes = Vec::new();
    f.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: larger than {max} bytes", path.display()),
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// A session's `<id>.json` (its prompt, workspace, model, usage totals).
pub fn read_session_file(path: &Path) -> std::io::Result<Value> {
    read_json_doc(path, SESSION_FILE_BYTES_MAX)
}

/// A session's `<id>.messages.json`; an empty file (made, not written yet) holds no
/// messages.
pub fn read_messages_file(path: &Path) -> std::io::Result<Value> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == 0 => Ok(Value::Null),
        _ => read_json_doc(path, READ_BYTES_MAX),
    }
}

fn messages(doc: &Value) -> &[Value] {
    doc.get("messages")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Whether the last message is a reply of the model (the task's end was written).
fn ends_with_reply(doc: &Value) -> bool {
    messages(doc)
        .last()
        .is_some_and(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// One model call's usage, from an assistant message with `metrics`: Cline's
/// `inputTokens` include the cached ones, tacho's input does not.
pub fn usage_of(message: &Value) -> Option<Usage> {
    if message.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    let m = message.get("metrics")?;
    let id = message.get("id").and_then(Value::as_str)?;
    let n = |k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0);
    let cache_read = n("cacheReadTokens");
    Some(Usage {
        message_id: id.to_owned(),
        request_id: None,
        model: message
            .get("modelInfo")
            .and_then(|i| i.get("id"))
            .and_then(Value::as_str)
            .map(str::to_owned),
        input_tokens: n("inputTokens").saturating_sub(cache_read),
        output_tokens: n("outputTokens"),
        cache_read,
        cache_write: n("cacheWriteTokens"),
        stop_reason: None,
        time_unix_ns: time_of(message),
    })
}

/// A message's `ts` (milliseconds since the epoch) in nanoseconds.
fn time_of(message: &Value) -> Option<i64> {
    message
        .get("ts")
        .and_then(Value::as_i64)
        .and_then(|ms| ms.checked_mul(1_000_000))
}

/// The usages of the messages past the cursor: `offset` counts the messages read, and
/// `tail` fingerprints the id of the last one, so that a file rewritten shorter or
/// otherwise (a compaction) is read again from its start ([`Caught::rewritten`]).
fn usages_since(cursor: &mut Cursor, doc: &Value) -> Caught {
    let all = messages(doc);
    let id_at = |i: u64| {
        usize::try_from(i)
            .ok()
            .and_then(|i| all.get(i))
            .and_then(|m| m.get("id"))
            .and_then(Value::as_str)
            .map(fnv1a)
    };
    let mut caught = Caught::default();
    let same = cursor.offset == 0
        || cursor.offset.checked_sub(1).and_then(id_at) == cursor.tail
            && cursor.offset <= all.len() as u64;
    if !same {
        cursor.offset = 0;
        caught.rewritten = true;
    }
    let from = usize::try_from(cursor.offset).unwrap_or(usize::MAX);
    for m in all.iter().skip(from) {
        if let Some(u) = usage_of(m)
            && cursor.remember(&u.message_id)
        {
            caught.usages.push(u);
        }
    }
    cursor.offset = all.len() as u64;
    cursor.tail = cursor.offset.checked_sub(1).and_then(id_at);
    caught
}

// --- Import: a whole session read into events ---

/// Reads a Cline session (`<id>.messages.json`, with its `<id>.json` as `session`):
/// the session starts (in the session file's workspace, a child of its
/// `parent_session_id` for a subagent); the user's words are a prompt; `tool_use`
/// blocks are calls (the model's ids, as the hooks record them) and `tool_result`
/// blocks their results (failed when an item says so, with its exit code); each
/// assistant message's `metrics` is one model response.
pub fn read_cline_session(path: &Path, bytes: &[u8], session: Option<&Value>) -> Transcript {
    let mut t = Transcript::default();
    let doc: Value = match serde_json::from_slice(bytes) {
        Ok(d) => d,
        Err(e) => {
            t.bad_lines += 1;
            t.broken = Some(format!("not a whole JSON document: {e}"));
            return t;
        }
    };
    t.lines = 1;
    let s = |v: Option<&Value>, k: &str| {
        v.and_then(|v| v.get(k))
            .and_then(Value::as_str)
            .filter(|x| !x.trim().is_empty())
            .map(str::to_owned)
    };
    let stem = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_suffix(MESSAGES_SUFFIX))
        .map(str::to_owned);
    let id = s(Some(&doc), "sessionId")
        .or_else(|| s(session, "session_id"))
        .or(stem)
        .unwrap_or_default();
    t.session = session_id_from(&id);
    t.workspace = s(session, "workspace_root").or_else(|| s(session, "cwd"));
    t.parent = s(session, "parent_session_id").map(|p| session_id_from(&p));
    let all = messages(&doc);
    let start = all
        .first()
        .and_then(time_of)
        .or_else(|| {
            s(session, "started_at").and_then(|v| tacho_schema::parse_ts(&Value::String(v)).ok())
        })
        .unwrap_or(0);
    t.events.push((
        start,
        start_event(Agent::Cline, None, t.workspace.clone(), t.parent.clone()),
    ));
    let mut time = start;
    let mut calls = std::collections::BTreeSet::new();
    for m in all {
        time = time_of(m).unwrap_or(time);
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let blocks: Vec<Value> = match m.get("content") {
            Some(Value::Array(b)) => b.clone(),
            Some(Value::String(text)) => vec![serde_json::json!({"type": "text", "text": text})],
            _ => Vec::new(),
        };
        for block in &blocks {
            match (role, block.get("type").and_then(Value::as_str)) {
                ("user", Some("text")) => {
                    let text = user_text(block.get("text").and_then(Value::as_str).unwrap_or(""));
                    if text.is_empty() {
                        *t.skipped.entry("message (empty)".into()).or_default() += 1;
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
                ("assistant", Some("tool_use")) => {
                    let (Some(id), Some(name)) = (
                        block.get("id").and_then(Value::as_str),
                        block.get("name").and_then(Value::as_str),
                    ) else {
                        *t.skipped.entry("tool_use (no id)".into()).or_default() += 1;
                        continue;
                    };
                    calls.insert(id.to_owned());
                    let input = block.get("input").cloned().unwrap_or(Value::Null);
                    // As the hooks record it.
                    let target = tool_target(name, Some(&input));
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
                ("user", Some("tool_result")) => {
                    let Some(id) = block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .filter(|id| calls.contains(*id))
                    else {
                        *t.skipped.entry("tool_result (no call)".into()).or_default() += 1;
                        continue;
                    };
                    let o = tool_output(block.get("content").unwrap_or(&Value::Null));
                    let failed =
                        o.error.is_some() || block.get("is_error") == Some(&Value::Bool(true));
                    t.events.push((
                        time,
                        EventBody::ToolResult(ToolResult {
                            call_id: id.to_owned(),
                            status: if failed {
                                ToolStatus::Error
                            } else {
                                ToolStatus::Ok
                            },
                            duration_ms: None,
                            exit_code: o.error.as_deref().and_then(exit_code_of),
                            error: o.error,
                            output: Some(o.text),
                        }),
                    ));
                }
                ("assistant", Some("text" | "thinking" | "reasoning")) => {}
                (r, k) => {
                    *t.skipped
                        .entry(format!("{r} {}", k.unwrap_or("(no type)")))
                        .or_default() += 1;
                }
            }
        }
        if let Some(u) = usage_of(m) {
            t.events.push((time, EventBody::LlmResponse(u.event())));
        }
    }
    t
}

/// A whole session (`<id>.messages.json` and its `<id>.json`), read for a test or a
/// tool.
pub fn read_session(path: &Path) -> std::io::Result<Transcript> {
    let bytes = crate::transcript::read_transcript_file(path)?;
    Ok(Cline.import_transcript(path, &bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{Action, HookState, map_payload};
    use tacho_schema::LlmResponse;

    fn fixture(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/agents/fixtures/cline")
            .join(rel)
    }

    /// The committed capture's hook payloads, as the hook reads them (the messages
    /// file looked for under the fixture's home).
    fn captured() -> Vec<(String, HookPayload)> {
        let text = std::fs::read_to_string(fixture("hooks.jsonl")).unwrap_or_default();
        let sessions = fixture("home/.cline/data/sessions");
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| {
                let p = read_payload(&v["payload"], Some(&sessions))
                    .unwrap_or_else(|e| panic!("{e}: {v}"));
                (v["event"].as_str().unwrap_or("").to_owned(), p)
            })
            .collect()
    }

    fn messages_file() -> PathBuf {
        fixture("home/.cline/data/sessions/1796202629393_0uwa0/1796202629393_0uwa0.messages.json")
    }

    #[test]
    fn captured_payloads_map_to_the_shared_vocabulary() {
        let all = captured();
        let names: Vec<(&str, &str)> = all
            .iter()
            .map(|(e, p)| (e.as_str(), p.hook_event_name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("TaskStart", "UserPromptSubmit"),
                ("PreToolUse", "PreToolUse"),
                ("PostToolUse", "PostToolUse"),
                ("PreToolUse", "PreToolUse"),
                ("PostToolUse", "PostToolUse"),
                ("PreToolUse", "PreToolUse"),
                ("PostToolUse", "PostToolUse"),
                ("PreToolUse", "PreToolUse"),
                ("PostToolUse", "PostToolUseFailure"),
                ("TaskComplete", "Stop"),
            ]
        );
        for (_, p) in &all {
            assert_eq!(p.session_id, "1796202629393_0uwa0");
            assert_eq!(p.cwd.as_deref(), Some("/WORKSPACE"));
            assert_eq!(
                p.transcript_path.as_deref().map(Path::new),
                Some(messages_file().as_path())
            );
        }
        // The prompt is the session file's.
        assert_eq!(
            all[0].1.prompt.as_deref(),
            Some("Please tidy notes.txt and write a summary.")
        );
        let post = &all[2].1;
        assert_eq!(post.tool_use_id.as_deref(), Some("call_mock_0001"));
        assert_eq!(post.tool_name.as_deref(), Some("run_commands"));
        assert_eq!(post.duration_ms, Some(96));
        assert_eq!(
            post.tool_response,
            Some(Value::String("line one final\nline two\n".into()))
        );
        let failed = &all[8].1;
        assert_eq!(
            failed.error,
            Some(Value::String("Command exited with code 3".into()))
        );
        assert_eq!(
            failed.tool_response,
            Some(Value::String(
                "[Command exited with code 3]\nabout to fail\n".into()
            ))
        );
        assert_eq!(
            all[9].1.last_assistant_message.as_deref(),
            Some("Done: notes.txt is final, summary.md written.")
        );
    }

    #[test]
    fn the_shell_and_the_editor_are_steps_and_the_failure_keeps_its_exit_code() {
        let mut st = HookState::default();
        let mut actions = Vec::new();
        for (_, p) in captured() {
            actions.extend(map_payload(Agent::Cline, &p, &mut st));
        }
        let events = crate::hook::events_of(&actions);
        let steps = events
            .iter()
            .filter(|b| matches!(b, EventBody::StepStart(_)))
            .count();
        assert_eq!(steps, 4, "every call can change files: {events:?}");
        let targeted: Vec<&Vec<String>> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Snapshot {
                    paths,
                    before_step: Some(_),
                    ..
                } => Some(paths),
                _ => None,
            })
            .collect();
        assert_eq!(targeted.len(), 4);
        assert!(targeted[0].is_empty(), "the shell: a full snapshot");
        assert_eq!(targeted[1], &vec!["/WORKSPACE/summary.md".to_owned()]);
        let results: Vec<(ToolStatus, Option<i64>, Option<u64>)> = events
            .iter()
            .filter_map(|b| match b {
                EventBody::ToolResult(r) => Some((r.status, r.exit_code, r.duration_ms)),
                _ => None,
            })
            .collect();
        assert_eq!(results.len(), 4);
        assert!(
            matches!(results[3], (ToolStatus::Error, Some(3), Some(_))),
            "{results:?}"
        );
        assert!(
            results[..3].iter().all(|r| r.0 == ToolStatus::Ok),
            "{results:?}"
        );
        // Tokens are read at every event; the task's end reaches the gate.
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, Action::Tokens { finish: true, .. }))
        );
        assert!(actions.iter().any(|a| matches!(a, Action::Gate { .. })));
        assert_eq!(Cline.stop_block("not done"), None);
    }

    #[test]
    fn tokens_are_counted_once_per_reply_as_served() {
        let mut cursor = Cursor::default();
        let c = Cline
            .read_transcript(&mut cursor, &messages_file(), true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.usages.len(), 5);
        let sum = |f: fn(&Usage) -> u64| c.usages.iter().map(f).sum::<u64>();
        // Served (requests.jsonl): prompt 5000 with 2000 cached, completion 260.
        assert_eq!(sum(|u| u.input_tokens), 3000);
        assert_eq!(sum(|u| u.cache_read), 2000);
        assert_eq!(sum(|u| u.output_tokens), 260);
        let again = Cline
            .read_transcript(&mut cursor, &messages_file(), true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(again.usages.is_empty() && !again.rewritten, "{again:?}");
        // A file rewritten (shorter) is read again from its start, flagged.
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut doc = read_messages_file(&messages_file()).unwrap_or_else(|e| panic!("{e}"));
        if let Some(m) = doc.get_mut("messages").and_then(Value::as_array_mut) {
            m.truncate(3);
        }
        let short = tmp.path().join("s.messages.json");
        std::fs::write(&short, doc.to_string()).unwrap_or_else(|e| panic!("{e}"));
        let c = Cline
            .read_transcript(&mut cursor, &short, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            c.rewritten && c.usages.is_empty(),
            "ids already counted: {c:?}"
        );
    }

    #[test]
    fn a_session_imports_with_its_calls_results_prompt_and_tokens() {
        let t = read_session(&messages_file()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.session, "1796202629393_0uwa0");
        assert_eq!(t.workspace.as_deref(), Some("/WORKSPACE"));
        let kinds: Vec<&str> = t.events.iter().map(|(_, b)| b.kind_name()).collect();
        assert_eq!(kinds.first(), Some(&"session.start"));
        let prompt = t.events.iter().find_map(|(_, b)| match b {
            EventBody::AgentNotice(n) if n.notice == "prompt" => n.message.clone(),
            _ => None,
        });
        assert_eq!(
            prompt.as_deref(),
            Some("Please tidy notes.txt and write a summary.")
        );
        let calls: Vec<(String, String)> = t
            .events
            .iter()
            .filter_map(|(_, b)| match b {
                EventBody::ToolCall(c) => Some((c.call_id.clone(), c.tool.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(calls.len(), 4);
        assert_eq!(calls[0], ("call_mock_0001".into(), "run_commands".into()));
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
                (ToolStatus::Ok, None),
                (ToolStatus::Ok, None),
                (ToolStatus::Ok, None),
                (ToolStatus::Error, Some(3))
            ]
        );
        let responses: Vec<&LlmResponse> = t
            .events
            .iter()
            .filter_map(|(_, b)| match b {
                EventBody::LlmResponse(r) => Some(r),
                _ => None,
            })
            .collect();
        assert_eq!(responses.len(), 5);
        assert!(responses.iter().all(|r| {
            r.response_id
                .as_deref()
                .is_some_and(|id| id.starts_with("msg_"))
        }));
        let total = |f: fn(&LlmResponse) -> u64| responses.iter().map(|r| f(r)).sum::<u64>();
        // The session file's total: inputTokens 5000 (2000 of them cached), output 260.
        let session =
            read_session_file(&session_file_of(&messages_file())).unwrap_or_else(|e| panic!("{e}"));
        let u = &session["metadata"]["usage"];
        assert_eq!(
            total(|r| r.tokens_in) + total(|r| r.cache_read),
            u["inputTokens"].as_u64().unwrap_or(0)
        );
        assert_eq!(
            total(|r| r.cache_read),
            u["cacheReadTokens"].as_u64().unwrap_or(0)
        );
        assert_eq!(
            total(|r| r.tokens_out),
            u["outputTokens"].as_u64().unwrap_or(0)
        );
        assert!(Cline.is_transcript(&messages_file()));
        assert!(!Cline.is_transcript(&session_file_of(&messages_file())));
    }

    #[test]
    fn a_session_id_that_is_no_plain_name_names_no_file() {
        for bad in ["..", "../../etc", "a/b", ""] {
            let raw = serde_json::json!({"hookName": "tool_call", "taskId": "t",
                "sessionContext": {"rootSessionId": bad}});
            let p = read_payload(&raw, Some(Path::new("/s")));
            assert!(
                p.as_ref().map_or(true, |p| p.transcript_path.is_none()),
                "{bad}: {p:?}"
            );
        }
        let raw = serde_json::json!({"hookName": "tool_call", "sessionContext": {}});
        assert!(matches!(
            read_payload(&raw, None),
            Err(PayloadError::Missing(_))
        ));
        assert!(matches!(
            read_payload(&serde_json::json!({"taskId": "t"}), None),
            Err(PayloadError::Missing("hookName"))
        ));
    }
}
