//! Gemini CLI (`gemini`, npm `@google/gemini-cli`): Claude Code's `hooks` object in
//! `settings.json` (user: `~/.gemini/settings.json`, the home being `$GEMINI_CLI_HOME`
//! when set; project: `.gemini/settings.json`; no local scope) with timeouts in
//! milliseconds, event names of its own (`BeforeAgent`, `BeforeTool`, `AfterTool`,
//! `AfterAgent`) turned into the shared vocabulary here, tool hooks without a call id
//! (a result is paired with the open call of its tool and input, as Factory Droid's
//! are: Gemini CLI runs the calls of one reply at once), a failing shell
//! reported as a success (its exit code only in the output's `Exit Code: N` line), a
//! stop refused with `{"decision": "deny"}`, and transcripts under
//! `~/.gemini/tmp/<project>/chats/`: today append-only JSON Lines (`$set`,
//! `$rewindTo`, a message appended again under its id replaces it), earlier one JSON
//! document per session (`session-*.json` with `messages[]`). Token usage is on its
//! `gemini` messages: `tokens {input, output, cached, thoughts, tool, total}`.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_schema::{AgentNotice, EditOp, EventBody, FileEdit, ToolCall, ToolResult, ToolStatus};

use crate::adapter::{Adapter, HookEvent, PlaceError, Places, Scope};
use crate::hook::{HookPayload, PayloadError, ToolKind, str_field, tool_target};
use crate::import::{Transcript, json_lines, start_event};
use crate::transcript::{Usage, open_transcript};
use crate::{Agent, session_id_from};

#[derive(Debug)]
pub struct Gemini;

/// The variable Gemini CLI takes as its home directory (`<it>/.gemini`).
const HOME_VAR: &str = "GEMINI_CLI_HOME";

/// Gemini CLI's tools that change no file in the workspace (its memory file and task
/// tracker live under `~/.gemini`; a subagent's own tools fire their own hooks).
const READ_ONLY: &[&str] = &[
    "read_file",
    "read_many_files",
    "list_directory",
    "glob",
    "grep_search",
    "search_file_content",
    "web_fetch",
    "google_web_search",
    "write_todos",
    "save_memory",
    "ask_user",
    "enter_plan_mode",
    "exit_plan_mode",
    "get_internal_docs",
    "activate_skill",
    "list_mcp_resources",
    "read_mcp_resource",
    "update_topic",
    "complete_task",
    "tracker_get_task",
    "tracker_list_tasks",
    "tracker_visualize",
    "invoke_agent",
];

/// Its shell, whose failures are reported as successes ([`shell_failure`]).
const SHELL: &str = "run_shell_command";

/// Its tools that write one file, named by `file_path`.
const FILE_TOOLS: &[&str] = &["write_file", "replace"];

/// The `.gemini` directory of the user: `$GEMINI_CLI_HOME/.gemini`, else `~/.gemini`.
fn gemini_dir(places: &Places) -> Result<PathBuf, PlaceError> {
    let home = places
        .var(HOME_VAR)
        .or(places.home.as_deref())
        .ok_or(PlaceError::NoHome)?;
    Ok(home.join(".gemini"))
}

impl Adapter for Gemini {
    fn name(&self) -> &'static str {
        "gemini"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["gemini-cli"]
    }

    fn env_vars(&self) -> &'static [&'static str] {
        &[HOME_VAR]
    }

    fn settings_file(&self, places: &Places, scope: Scope) -> Result<PathBuf, PlaceError> {
        match scope {
            Scope::User => Ok(gemini_dir(places)?.join("settings.json")),
            Scope::Project => Ok(places.project.join(".gemini").join("settings.json")),
            Scope::Local => Err(PlaceError::NoScope),
        }
    }

    /// The events tacho records, with Gemini's timeouts, in milliseconds. Not
    /// `PreCompress` (it fires before every model request, compressing or not), nor
    /// the model events (`BeforeModel`, `AfterModel` once per streamed chunk,
    /// `BeforeToolSelection`): the transcript has each reply once, with its tokens.
    fn hook_events(&self) -> &'static [HookEvent] {
        &[
            ("SessionStart", None, 10_000),
            ("BeforeAgent", None, 10_000),
            ("BeforeTool", Some("*"), 30_000),
            ("AfterTool", Some("*"), 30_000),
            ("Notification", None, 10_000),
            ("AfterAgent", None, 60_000),
            ("SessionEnd", None, 10_000),
        ]
    }

    /// Gemini's events in the shared vocabulary: `BeforeAgent` is a prompt,
    /// `BeforeTool`/`AfterTool` a tool's start and end (a failure when its response
    /// holds an `error`, or a shell's output ends with a non-zero `Exit Code:` or a
    /// `Signal:`), `AfterAgent` a stop (its `prompt_response` the last message), a
    /// `ToolPermission` notification a permission request. A tool's output is its
    /// `llmContent`, what the model was given.
    fn parse_payload(&self, bytes: &[u8]) -> Result<HookPayload, PayloadError> {
        let mut p = HookPayload::parse(bytes)?;
        let raw: Value = serde_json::from_slice(bytes).map_err(PayloadError::Json)?;
        let name = std::mem::take(&mut p.hook_event_name);
        let event = match name.as_str() {
            "BeforeAgent" => "UserPromptSubmit",
            "BeforeTool" => "PreToolUse",
            "AfterTool" => "PostToolUse",
            "AfterAgent" => {
                p.prompt = None; // the session's first prompt, again
                p.last_assistant_message = raw
                    .get("prompt_response")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                "Stop"
            }
            "Notification" => {
                if p.notification_type.as_deref() == Some("ToolPermission") {
                    p.notification_type = Some("permission_prompt".into());
                }
                "Notification"
            }
            other => other,
        };
        p.hook_event_name = event.to_owned();
        if event == "PostToolUse" {
            let resp = p.tool_response.take();
            let text = resp
                .as_ref()
                .and_then(|r| r.get("llmContent"))
                .map(parts_text);
            let error = resp
                .as_ref()
                .and_then(|r| r.get("error"))
                .filter(|e| !e.is_null())
                .map(|e| {
                    e.get("message")
                        .and_then(Value::as_str)
                        .map_or_else(|| e.to_string(), str::to_owned)
                })
                .or_else(|| {
                    (p.tool_name.as_deref() == Some(SHELL))
                        .then(|| text.as_deref().and_then(shell_failure))
                        .flatten()
                });
            if let Some(e) = error {
                p.hook_event_name = "PostToolUseFailure".into();
                p.error = Some(Value::String(e));
            }
            p.tool_response = text.map(Value::String).or(resp);
        }
        Ok(p)
    }

    fn tool_kind(&self, tool: &str, input: Option<&Value>) -> ToolKind {
        match (tool, str_field(input, "file_path")) {
            (t, Some(f)) if FILE_TOOLS.contains(&t) => ToolKind::Files(vec![f.to_owned()]),
            (t, _) if READ_ONLY.contains(&t) => ToolKind::ReadOnly,
            _ => ToolKind::Anything,
        }
    }

    fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError> {
        Ok(gemini_dir(places)?.join("tmp"))
    }

    /// `session-*.jsonl`, the old `session-*.json`, and a subagent's
    /// `chats/<session>/<agent>.jsonl`.
    fn is_transcript(&self, path: &Path) -> bool {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        let in_chats = path
            .ancestors()
            .skip(1)
            .take(2)
            .any(|d| d.file_name().is_some_and(|n| n == "chats"));
        (name.starts_with("session-") && (name.ends_with(".jsonl") || name.ends_with(".json")))
            || (in_chats && name.ends_with(".jsonl"))
    }

    fn import_transcript(&self, path: &Path, bytes: &[u8]) -> Transcript {
        read_gemini_transcript(path, bytes, project_root(path))
    }

    fn stop_block(&self, reason: &str) -> Option<String> {
        Some(serde_json::json!({"decision": "deny", "reason": reason}).to_string() + "\n")
    }
}

/// The text of a Gemini `PartListUnion`: a string, a part's `text`, or the `text` of
/// each part of a list, joined by newlines.
fn parts_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| match p {
                Value::String(s) => Some(s.as_str()),
                other => other.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(_) => v
            .get("text")
            .and_then(Value::as_str)
            .map_or_else(|| v.to_string(), str::to_owned),
        _ => String::new(),
    }
}

/// A shell's failure from the lines Gemini CLI puts after its output (`Error:`,
/// `Exit Code: N` when N is not 0, `Signal:`, `Background PIDs:`, `Process Group
/// PGID:`, in a `<untrusted_context>` wrapper): `Exit Code: N` or `Signal: S`. Only
/// that trailer is read, so a command that prints such a line does not fail.
fn shell_failure(text: &str) -> Option<String> {
    const TRAILER: &[&str] = &[
        "Error: ",
        "Signal: ",
        "Background PIDs: ",
        "Process Group PGID: ",
    ];
    let mut lines = text.trim_end().lines().rev();
    let mut line = lines.next()?;
    if line.trim() == "</untrusted_context>" {
        line = lines.next()?;
    }
    loop {
        let l = line.trim();
        if let Some(code) = l.strip_prefix("Exit Code: ") {
            return (code.trim() != "0").then(|| l.to_owned());
        }
        // `Signal: 0` (or `(none)`), as Gemini CLI prints it since January 2026 for
        // every command, says no signal came: a trailer line like the others.
        if let Some(sig) = l.strip_prefix("Signal: ")
            && !matches!(sig.trim(), "0" | "(none)")
        {
            return Some(l.to_owned());
        }
        if !TRAILER.iter().any(|t| l.starts_with(t)) {
            return None;
        }
        line = lines.next()?;
    }
}

/// The exit code of a failure [`shell_failure`] found.
fn exit_code(failure: &str) -> Option<i64> {
    failure.strip_prefix("Exit Code: ")?.trim().parse().ok()
}

/// The token usage of one `gemini` message (a transcript line or an entry of a
/// document's `messages`): `tokens.input` counts the cached tokens, which tacho's input
/// does not; the tool-use prompt is input; thoughts are output (billed as output), so
/// that the four counts add up to `tokens.total`. Named by the message's id.
pub fn usage(message: &Value) -> Option<Usage> {
    if message.get("type").and_then(Value::as_str) != Some("gemini") {
        return None;
    }
    let tokens = message.get("tokens").filter(|t| t.is_object())?;
    let n = |k: &str| tokens.get(k).and_then(Value::as_u64).unwrap_or(0);
    let cached = n("cached");
    Some(Usage {
        message_id: message.get("id")?.as_str()?.to_owned(),
        request_id: None,
        model: message
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned),
        input_tokens: n("input").saturating_sub(cached).saturating_add(n("tool")),
        output_tokens: n("output").saturating_add(n("thoughts")),
        cache_read: cached,
        cache_write: 0,
        stop_reason: None,
        time_unix_ns: message
            .get("timestamp")
            .and_then(|t| tacho_schema::parse_ts(t).ok()),
    })
}

/// The project a transcript belongs to: the `.project_root` file Gemini CLI keeps in
/// the project's directory under `~/.gemini/tmp/` (the chats directory's parent, or
/// its grandparent for a subagent), an absolute path. Read as a transcript is (a
/// regular file, without blocking), at most 4 KiB.
fn project_root(transcript: &Path) -> Option<String> {
    transcript.ancestors().skip(2).take(2).find_map(|dir| {
        let mut f = open_transcript(&dir.join(".project_root")).ok()?;
        let mut text = String::new();
        f.by_ref().take(4096).read_to_string(&mut text).ok()?;
        let root = text.trim();
        Path::new(root).is_absolute().then(|| root.to_owned())
    })
}

/// One thing of a transcript, in its order: a message (by id), or a rewind.
enum Entry {
    Message(String),
    Rewind(String, i64),
}

/// A conversation read from either layout: its metadata and its messages, each once
/// (the last version of an id, at the place it first had), in order.
#[derive(Default)]
struct Conversation {
    meta: BTreeMap<String, Value>,
    messages: BTreeMap<String, Value>,
    order: Vec<Entry>,
}

impl Conversation {
    /// A message written (again): its last version is the one kept.
    fn message(&mut self, m: &Value) -> bool {
        let Some(id) = m.get("id").and_then(Value::as_str) else {
            return false;
        };
        if self.messages.insert(id.to_owned(), m.clone()).is_none() {
            self.order.push(Entry::Message(id.to_owned()));
        }
        true
    }

    /// Metadata (the first line, a `$set`, or the old document's fields).
    fn metadata(&mut self, fields: &serde_json::Map<String, Value>) {
        for (k, v) in fields {
            if k != "messages" {
                self.meta.insert(k.clone(), v.clone());
            }
        }
        if let Some(ms) = fields.get("messages").and_then(Value::as_array) {
            for m in ms {
                self.message(m);
            }
        }
    }

    fn meta_str(&self, k: &str) -> Option<&str> {
        self.meta.get(k).and_then(Value::as_str)
    }
}

/// Reads a Gemini CLI transcript: today's JSON Lines (`session-*.jsonl`, or a
/// subagent's `chats/<session>/<agent>.jsonl`, which becomes a child session
/// `<session>.<agent>`), or the earlier JSON document (`session-*.json`). The user's
/// prompts (the session context and tool results aside), each `gemini` message's
/// tokens, and its `toolCalls` as calls and results (numbered `call-<n>` in order, as
/// the hooks number them; the status from `status` and a shell's `Exit Code:`), with
/// the files `write_file` and `replace` changed. A message written again under its id
/// (with its tool calls, or copied by a `$set` of all messages) counts once, with its
/// last version. A `$rewindTo` is recorded as a notice: what it drops from the
/// conversation did happen, and stays recorded (an import before the rewind recorded
/// it too). Several files of one session (a resume in a later minute, the `.jsonl`
/// Gemini CLI writes beside an old `.json`) share ids, so importing them all adds each
/// event once.
pub fn read_gemini_transcript(path: &Path, bytes: &[u8], workspace: Option<String>) -> Transcript {
    let mut t = Transcript::default();
    let mut c = Conversation::default();
    let document = path.extension().is_some_and(|e| e == "json");
    if document {
        t.lines = 1;
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(doc)) => c.metadata(&doc),
            Ok(_) => {
                t.bad_lines = 1;
                t.broken = Some("a JSON document, but not a conversation object".into());
            }
            Err(e) => {
                t.bad_lines = 1;
                t.broken = Some(format!("not a whole JSON document: {e}"));
            }
        }
    } else {
        for (_, record, time) in json_lines(bytes, &mut t) {
            if let Some(id) = record.get("$rewindTo").and_then(Value::as_str) {
                c.order.push(Entry::Rewind(id.to_owned(), time));
            } else if let Some(set) = record.get("$set").and_then(Value::as_object) {
                c.metadata(set);
            } else if record.get("id").and_then(Value::as_str).is_some() {
                c.message(&record);
            } else if let Some(m) = record.as_object().filter(|m| m.contains_key("sessionId")) {
                c.metadata(m);
            } else {
                *t.unknown.entry("(no id)".into()).or_default() += 1;
                *t.skipped.entry("(no id) (unknown)".into()).or_default() += 1;
            }
        }
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let start = c
        .meta
        .get("startTime")
        .and_then(|v| tacho_schema::parse_ts(v).ok())
        .unwrap_or(0);
    // A subagent's transcript is `chats/<session>/<agent>.jsonl`.
    let parent = (c.meta_str("kind") == Some("subagent"))
        .then(|| path.parent()?.file_name())
        .flatten()
        .map(|p| session_id_from(&p.to_string_lossy()));
    t.session = match (&parent, c.meta_str("sessionId")) {
        (Some(p), _) => session_id_from(&format!("{p}.{stem}")),
        (None, Some(id)) => session_id_from(id),
        (None, None) => session_id_from(&stem),
    };
    t.parent = parent;
    t.workspace = workspace;
    t.events.push((
        start,
        start_event(Agent::Gemini, None, t.workspace.clone(), t.parent.clone()),
    ));
    let mut calls = 0u64;
    for entry in &c.order {
        match entry {
            Entry::Rewind(id, time) => t.events.push((
                *time,
                EventBody::AgentNotice(AgentNotice {
                    notice: "rewind".into(),
                    message: Some(format!("the conversation was rewound to before {id}")),
                    agent: None,
                }),
            )),
            Entry::Message(id) => {
                if let Some(m) = c.messages.get(id) {
                    message_events(m, &mut t, &mut calls);
                }
            }
        }
    }
    t
}

/// The events of one message.
fn message_events(m: &Value, t: &mut Transcript, calls: &mut u64) {
    let time = m
        .get("timestamp")
        .and_then(|v| tacho_schema::parse_ts(v).ok())
        .or_else(|| t.events.last().map(|e| e.0))
        .unwrap_or(0);
    let kind = m.get("type").and_then(Value::as_str).unwrap_or("(none)");
    match kind {
        "user" => {
            let text = m.get("content").map(parts_text).unwrap_or_default();
            let label = if text.trim().is_empty() {
                "user (tool results)"
            } else if text.trim_start().starts_with('<') {
                "user (context)"
            } else {
                t.events.push((
                    time,
                    EventBody::AgentNotice(AgentNotice {
                        notice: "prompt".into(),
                        message: Some(text),
                        agent: None,
                    }),
                ));
                return;
            };
            *t.skipped.entry(label.into()).or_default() += 1;
        }
        "gemini" => {
            if let Some(u) = usage(m) {
                t.events.push((time, EventBody::LlmResponse(u.event())));
            }
            for call in m
                .get("toolCalls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                *calls += 1;
                tool_events(call, &format!("call-{calls}"), time, t);
            }
        }
        "info" | "error" | "warning" => {
            *t.skipped.entry(format!("message {kind}")).or_default() += 1;
        }
        other => {
            *t.unknown.entry(other.to_owned()).or_default() += 1;
            *t.skipped.entry(format!("{other} (unknown)")).or_default() += 1;
        }
    }
}

/// A tool call of a `gemini` message: its call, its result, and the file it wrote.
fn tool_events(call: &Value, id: &str, time: i64, t: &mut Transcript) {
    let tool = call
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    let input = call.get("args").cloned();
    let target = tool_target(&tool, input.as_ref());
    t.events.push((
        time,
        EventBody::ToolCall(ToolCall {
            call_id: id.to_owned(),
            tool: tool.clone(),
            target,
            input: input.as_ref().map(Value::to_string),
            agent: None,
        }),
    ));
    let response = call
        .get("result")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|p| p.pointer("/functionResponse/response"));
    let text = |k: &str| response.and_then(|r| r.get(k)).map(parts_text);
    let output = text("output").or_else(|| text("error"));
    let status = call.get("status").and_then(Value::as_str).unwrap_or("");
    let failure = match status {
        "error" | "cancelled" => Some(text("error").unwrap_or_else(|| status.to_owned())),
        _ if tool == SHELL => output.as_deref().and_then(shell_failure),
        _ => None,
    };
    let end = call
        .get("timestamp")
        .and_then(|v| tacho_schema::parse_ts(v).ok())
        .unwrap_or(time);
    t.events.push((
        end,
        EventBody::ToolResult(ToolResult {
            call_id: id.to_owned(),
            status: match (status, &failure) {
                ("cancelled", _) => ToolStatus::Cancelled,
                (_, Some(_)) => ToolStatus::Error,
                _ => ToolStatus::Ok,
            },
            duration_ms: None,
            exit_code: failure.as_deref().and_then(exit_code),
            error: failure.map(|e| e.lines().next().unwrap_or("").to_owned()),
            output,
        }),
    ));
    let display = call.get("resultDisplay");
    // The path as the model gave it when relative (to the workspace, where Gemini CLI
    // resolves it), else the absolute path Gemini CLI wrote, within the workspace
    // when it is known: the same in either layout.
    let file = str_field(input.as_ref(), "file_path")
        .filter(|f| Path::new(f).is_relative())
        .or_else(|| {
            display
                .and_then(|d| d.get("filePath"))
                .and_then(Value::as_str)
        })
        .or_else(|| str_field(input.as_ref(), "file_path"));
    if let (true, Some(file), Some(stat)) = (
        FILE_TOOLS.contains(&tool.as_str()) && status == "success",
        file,
        display.and_then(|d| d.get("diffStat")),
    ) {
        let n = |k: &str| stat.get(k).and_then(Value::as_u64);
        let path = match t
            .workspace
            .as_deref()
            .map(|w| Path::new(file).strip_prefix(w))
        {
            Some(Ok(rel)) if !rel.as_os_str().is_empty() => rel.display().to_string(),
            _ => file.to_owned(),
        };
        let created = display.and_then(|d| d.get("isNewFile")) == Some(&Value::Bool(true));
        t.events.push((
            end,
            EventBody::FileEdit(FileEdit {
                path,
                op: if created {
                    EditOp::Create
                } else {
                    EditOp::Modify
                },
                from: None,
                tool: Some(tool),
                call_id: Some(id.to_owned()),
                lines_added: n("model_added_lines"),
                lines_removed: n("model_removed_lines"),
            }),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{Action, events_and_prompts, map_all};

    fn fixture(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/agents/fixtures/gemini")
            .join(rel)
    }

    fn read(rel: &str) -> Vec<u8> {
        let p = fixture(rel);
        std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    const SESSION: &str = "59d4f035-56e2-46de-b7fd-01059292e909";
    const TRANSCRIPT: &str =
        "home/.gemini/tmp/workspace/chats/session-2026-12-02T09-09-59d4f035.jsonl";

    /// The payloads the real CLI sent (`hooks.jsonl`), of the events tacho registers.
    fn payloads(rel: &str) -> Vec<Vec<u8>> {
        let registered: Vec<&str> = Gemini.hook_events().iter().map(|e| e.0).collect();
        String::from_utf8_lossy(&read(rel))
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|l| l.get("payload").cloned())
            .filter(|v| {
                v.get("hook_event_name")
                    .and_then(Value::as_str)
                    .is_some_and(|e| registered.contains(&e))
            })
            .map(|v| v.to_string().into_bytes())
            .collect()
    }

    /// What the mock served (`requests.jsonl`'s `gemini_usage`), in tacho's terms:
    /// (input without the cached tokens, cached, output with thoughts, total).
    fn served(rel: &str) -> (u64, u64, u64, u64) {
        let mut s = (0, 0, 0, 0);
        for l in String::from_utf8_lossy(&read(rel)).lines() {
            let v: Value = serde_json::from_str(l).unwrap_or_default();
            let n = |k: &str| v["gemini_usage"][k].as_u64().unwrap_or(0);
            let cached = n("cachedContentTokenCount");
            s.0 += n("promptTokenCount") - cached;
            s.1 += cached;
            s.2 += n("candidatesTokenCount") + n("thoughtsTokenCount");
            s.3 += n("totalTokenCount");
        }
        s
    }

    fn tokens(t: &Transcript) -> (usize, u64, u64, u64) {
        t.events
            .iter()
            .filter_map(|(_, e)| match e {
                EventBody::LlmResponse(r) => Some(r),
                _ => None,
            })
            .fold((0, 0, 0, 0), |s, r| {
                (
                    s.0 + 1,
                    s.1 + r.tokens_in,
                    s.2 + r.cache_read,
                    s.3 + r.tokens_out,
                )
            })
    }

    fn results(events: &[&EventBody]) -> Vec<(String, ToolStatus, Option<i64>)> {
        events
            .iter()
            .filter_map(|e| match e {
                EventBody::ToolResult(r) => Some((r.call_id.clone(), r.status, r.exit_code)),
                _ => None,
            })
            .collect()
    }

    /// The captured run's results, hooks and transcript alike: the failing shell was
    /// reported as a success, and its `Exit Code: 3` says not.
    fn captured_results() -> Vec<(String, ToolStatus, Option<i64>)> {
        let ok = |id: &str| (id.to_owned(), ToolStatus::Ok, None);
        vec![
            ok("call-1"),
            ok("call-2"),
            ok("call-3"),
            ("call-4".into(), ToolStatus::Error, Some(3)),
        ]
    }

    #[test]
    fn the_real_payloads_map_to_prompts_calls_results_steps_and_stops() {
        let (actions, st) = map_all(Agent::Gemini, &payloads("hooks.jsonl"));
        let (events, prompts) = events_and_prompts(&actions);
        assert_eq!(
            prompts,
            [
                Some("Please tidy notes.txt and write a summary."),
                Some("KEEP WORKING: run the checks once more")
            ]
        );
        let calls: Vec<(&str, &str)> = events
            .iter()
            .filter_map(|e| match e {
                EventBody::ToolCall(c) => Some((c.call_id.as_str(), c.tool.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(
            calls,
            [
                ("call-1", "run_shell_command"),
                ("call-2", "write_file"),
                ("call-3", "replace"),
                ("call-4", "run_shell_command")
            ]
        );
        assert_eq!(results(&events), captured_results());
        let out = events.iter().find_map(|e| match e {
            EventBody::ToolResult(r) if r.call_id == "call-1" => r.output.clone(),
            _ => None,
        });
        assert!(
            out.as_deref()
                .is_some_and(|o| o.contains("Output: line one final\nline two")),
            "{out:?}"
        );
        // Each call is a step: the shells snapshot everything, the writes their file.
        let before = crate::hook::before_step_snapshots(&actions);
        assert_eq!(
            before,
            [
                (vec![], 1),
                (vec!["summary.md".to_owned()], 2),
                (vec!["notes.txt".to_owned()], 3),
                (vec![], 4)
            ]
        );
        let finished: Vec<(u64, Option<&str>)> = events
            .iter()
            .filter_map(|e| match e {
                EventBody::StepFinish(f) => Some((f.step, f.reason.as_deref())),
                _ => None,
            })
            .collect();
        assert_eq!(
            finished,
            [
                (1, Some("done")),
                (2, Some("done")),
                (3, Some("done")),
                (4, Some("failed"))
            ]
        );
        // Both stops reach the gate; the second says it was sent back already.
        let gates: Vec<bool> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Gate {
                    already_blocked, ..
                } => Some(*already_blocked),
                _ => None,
            })
            .collect();
        assert_eq!(gates, [false, true]);
        assert!(
            events.iter().any(|e| matches!(e, EventBody::SessionEnd(_))),
            "{events:?}"
        );
        assert!(st.unknown_events.is_empty(), "{:?}", st.unknown_events);
    }

    /// Gemini CLI runs the calls of one reply at once, and its hooks race: in a real
    /// run (0.61.0) the four calls of one reply were reported `BeforeTool` A, read, B,
    /// ls and `AfterTool` ls, B, read, A. Each result is paired with its own call by
    /// its tool and input; the two shells share one step, which ends with the last.
    #[test]
    fn parallel_calls_are_paired_by_their_tool_and_input() {
        let tool = |event: &str, name: &str, input: Value, out: &str| {
            let mut v = serde_json::json!({"session_id": "g-par", "cwd": "/w",
                "hook_event_name": event, "tool_name": name, "tool_input": input});
            if event == "AfterTool" {
                v["tool_response"] = serde_json::json!({"llmContent": out});
            }
            v.to_string().into_bytes()
        };
        let a = serde_json::json!({"command": "sleep 1; echo A"});
        let b = serde_json::json!({"command": "echo B"});
        let read = serde_json::json!({"file_path": "x.txt"});
        let ls = serde_json::json!({"dir_path": "."});
        let shell = "run_shell_command";
        let payloads = [
            tool("BeforeTool", shell, a.clone(), ""),
            tool("BeforeTool", "read_file", read.clone(), ""),
            tool("BeforeTool", shell, b.clone(), ""),
            tool("BeforeTool", "list_directory", ls.clone(), ""),
            tool("AfterTool", "list_directory", ls, "listing"),
            tool("AfterTool", shell, b, "Output: B\nExit Code: 1"),
            tool("AfterTool", "read_file", read, "x"),
            tool("AfterTool", shell, a, "Output: A"),
        ];
        let (actions, st) = map_all(Agent::Gemini, &payloads);
        let (events, _) = events_and_prompts(&actions);
        let outputs: Vec<(&str, ToolStatus, Option<&str>)> = events
            .iter()
            .filter_map(|e| match e {
                EventBody::ToolResult(r) => {
                    Some((r.call_id.as_str(), r.status, r.output.as_deref()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            outputs,
            [
                ("call-4", ToolStatus::Ok, Some("listing")),
                ("call-3", ToolStatus::Error, Some("Output: B\nExit Code: 1")),
                ("call-2", ToolStatus::Ok, Some("x")),
                ("call-1", ToolStatus::Ok, Some("Output: A")),
            ]
        );
        let steps: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                EventBody::StepStart(s) => Some(format!("start {}", s.step)),
                EventBody::StepFinish(f) => Some(format!("finish {} {:?}", f.step, f.reason)),
                _ => None,
            })
            .collect();
        assert_eq!(steps, ["start 1", "finish 1 Some(\"failed\")"]);
        assert!(
            st.main.awaiting.is_empty() && st.main.open.is_empty(),
            "{st:?}"
        );
    }

    #[test]
    fn tool_failures_and_the_shell_trailer() {
        let after = |resp: Value| {
            let v = serde_json::json!({"session_id": "g", "hook_event_name": "AfterTool",
                "tool_name": "run_shell_command", "tool_input": {"command": "x"},
                "tool_response": resp});
            Gemini
                .parse_payload(v.to_string().as_bytes())
                .unwrap_or_else(|e| panic!("{e}"))
        };
        let p = after(
            serde_json::json!({"llmContent": "<untrusted_context>\nOutput: ok\nProcess Group PGID: 5\n</untrusted_context>"}),
        );
        assert_eq!((p.hook_event_name.as_str(), p.error), ("PostToolUse", None));
        // Gemini CLI of January 2026: every command ends `Exit Code: 0`, `Signal: 0`
        // (issue 43: six of six successful calls were recorded failed).
        for ok in [
            "Output: fine\nError: (none)\nExit Code: 0\nSignal: 0\nBackground PIDs: (none)\nProcess Group PGID: 4242",
            "Output: fine\nExit Code: 0\nSignal: (none)",
            "Output: fine\nSignal: 0\nExit Code: 0",
        ] {
            assert_eq!(shell_failure(ok), None, "{ok}");
        }
        assert_eq!(
            shell_failure("Output: x\nExit Code: 1\nSignal: 0").as_deref(),
            Some("Exit Code: 1")
        );
        // A command printing "Exit Code: 3" itself, then succeeding: no failure.
        let p = after(
            serde_json::json!({"llmContent": "Output: Exit Code: 3\nExit Code: 3\nfine\nProcess Group PGID: 5"}),
        );
        assert_eq!(p.hook_event_name, "PostToolUse");
        let p = after(
            serde_json::json!({"llmContent": "Output: x\nError: boom\nExit Code: 2\nSignal: 15\nProcess Group PGID: 5"}),
        );
        assert_eq!(p.hook_event_name, "PostToolUseFailure");
        assert_eq!(p.error, Some(Value::String("Signal: 15".into())));
        let p = after(
            serde_json::json!({"llmContent": [{"text": "Output: x"}, {"text": "Exit Code: 7"}]}),
        );
        assert_eq!(p.error, Some(Value::String("Exit Code: 7".into())));
        assert_eq!(exit_code("Exit Code: 7"), Some(7));
        // Another tool's output that ends so (a file read) is no failure.
        let v = serde_json::json!({"session_id": "g", "hook_event_name": "AfterTool",
            "tool_name": "read_file", "tool_input": {"file_path": "log.txt"},
            "tool_response": {"llmContent": "Output: x\nExit Code: 7"}});
        let p = Gemini
            .parse_payload(v.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.hook_event_name.as_str(), p.error), ("PostToolUse", None));
        // A tool's own error.
        let p = after(
            serde_json::json!({"llmContent": "Tool execution blocked: no",
            "returnDisplay": "x", "error": {"type": "execution_failed", "message": "no"}}),
        );
        assert_eq!(
            (p.hook_event_name.as_str(), p.error),
            ("PostToolUseFailure", Some(Value::String("no".into())))
        );
        assert_eq!(
            p.tool_response,
            Some(Value::String("Tool execution blocked: no".into()))
        );
    }

    #[test]
    fn live_tokens_are_counted_once_per_message_and_equal_what_was_served() {
        let mut cursor = crate::transcript::Cursor::default();
        let c = Gemini
            .read_transcript(&mut cursor, &fixture(TRANSCRIPT), true)
            .unwrap_or_else(|e| panic!("{e}"));
        let (input, cached, output, total) = served("requests.jsonl");
        assert_eq!((input, cached, output, total), (3600, 2400, 370, 6370));
        let sum = |f: fn(&Usage) -> u64| c.usages.iter().map(f).sum::<u64>();
        assert_eq!(c.usages.len(), 6);
        assert_eq!(
            (
                sum(|u| u.input_tokens),
                sum(|u| u.cache_read),
                sum(|u| u.output_tokens)
            ),
            (input, cached, output)
        );
        let again = Gemini
            .read_transcript(&mut cursor, &fixture(TRANSCRIPT), true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.usages, []);
    }

    #[test]
    fn a_session_imports_with_its_prompts_calls_results_edits_and_tokens() {
        let path = fixture(TRANSCRIPT);
        let t = Gemini.import_transcript(&path, &read(TRANSCRIPT));
        assert_eq!(t.session, SESSION);
        assert_eq!(
            t.workspace.as_deref(),
            Some("/WORKSPACE"),
            "its .project_root"
        );
        assert_eq!((t.bad_lines, t.partial_tail), (0, 0));
        assert!(t.unknown.is_empty(), "{:?}", t.unknown);
        let events: Vec<&EventBody> = t.events.iter().map(|(_, e)| e).collect();
        assert_eq!(events.first().map(|e| e.kind_name()), Some("session.start"));
        assert_eq!(results(&events), captured_results());
        let edits: Vec<(&str, EditOp, Option<u64>, Option<u64>)> = events
            .iter()
            .filter_map(|e| match e {
                EventBody::FileEdit(f) => {
                    Some((f.path.as_str(), f.op, f.lines_added, f.lines_removed))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            edits,
            [
                ("summary.md", EditOp::Create, Some(2), Some(0)),
                ("notes.txt", EditOp::Modify, Some(1), Some(1))
            ]
        );
        let prompts = events
            .iter()
            .filter(|e| matches!(e, EventBody::AgentNotice(n) if n.notice == "prompt"))
            .count();
        assert_eq!(
            prompts, 2,
            "the prompt and the stop's reason, not the context"
        );
        let (input, cached, output, _) = served("requests.jsonl");
        assert_eq!(tokens(&t), (6, input, cached, output));
        // Read in order: a result after its call.
        let call = t
            .events
            .iter()
            .position(|(_, e)| matches!(e, EventBody::ToolCall(c) if c.call_id == "call-1"));
        let result = t
            .events
            .iter()
            .position(|(_, e)| matches!(e, EventBody::ToolResult(r) if r.call_id == "call-1"));
        assert!(call < result && call.is_some(), "{call:?} {result:?}");
    }

    /// The same tokens a ccusage row has for this session (ccusage 20.0.24, committed
    /// beside the capture): input and cached alike, and the same total; ccusage leaves
    /// the thoughts out of its output tokens, tacho counts them as output (they are
    /// billed as output), so tacho's output is ccusage's plus the thoughts.
    #[test]
    fn tokens_agree_with_ccusage() {
        let row: Value = serde_json::from_slice(&read("ccusage-session.json")).unwrap_or_default();
        let row = &row["sessions"][0];
        let t = Gemini.import_transcript(&fixture(TRANSCRIPT), &read(TRANSCRIPT));
        let (_, input, cached, output) = tokens(&t);
        let n = |k: &str| row[k].as_u64().unwrap_or(u64::MAX);
        assert_eq!((input, cached), (n("inputTokens"), n("cacheReadTokens")));
        assert_eq!(input + cached + output, n("totalTokens"));
        assert_eq!(
            output,
            n("outputTokens") + 60,
            "the 6 replies' 10 thoughts each"
        );
    }

    #[test]
    fn the_old_layout_imports_the_same_and_a_resume_adds_its_turn_once() {
        let legacy = "legacy/session-2026-12-02T09-09-59d4f035.json";
        let t = Gemini.import_transcript(&fixture(legacy), &read(legacy));
        assert_eq!(t.session, SESSION);
        let (input, cached, output, _) = served("requests.jsonl");
        assert_eq!(tokens(&t), (6, input, cached, output));
        let new = Gemini.import_transcript(&fixture(TRANSCRIPT), &read(TRANSCRIPT));
        let keys = |t: &Transcript| -> Vec<Option<String>> {
            t.events
                .iter()
                .map(|(_, e)| crate::import::dedup_key(e))
                .collect()
        };
        assert_eq!(keys(&t), keys(&new), "both layouts give the same events");
        // After a resume with 0.61.0: the `.json` unchanged, its `.jsonl` copy with the
        // new turn, and a stray `.jsonl` of the resume's minute. Every file is of the
        // one session; imported together, each event counts once (by its id), and the
        // tokens are the served ones: the old run's and the resumed turn's.
        let dir = fixture("legacy/after-resume/chats");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| Gemini.is_transcript(p))
            .collect();
        files.sort();
        assert_eq!(files.len(), 3, "{files:?}");
        let mut seen = std::collections::BTreeSet::new();
        let mut all = Transcript::default();
        for f in &files {
            let bytes = std::fs::read(f).unwrap_or_default();
            let t = Gemini.import_transcript(f, &bytes);
            assert_eq!(t.session, SESSION, "{}", f.display());
            assert_eq!(t.bad_lines, 0);
            for (at, e) in t.events {
                if crate::import::dedup_key(&e).is_none_or(|k| seen.insert(k)) {
                    all.events.push((at, e));
                }
            }
        }
        let resumed = served("legacy/after-resume/requests.jsonl");
        assert_eq!(
            tokens(&all),
            (7, input + resumed.0, cached + resumed.1, output + resumed.2)
        );
        let (_, i, c, o) = tokens(&all);
        assert_eq!(
            i + c + o,
            7430,
            "not ccusage's 13800: it counts both copies"
        );
    }

    #[test]
    fn appended_again_set_and_rewind() {
        let lines = [
            r#"{"sessionId":"s-9","projectHash":"h","startTime":"2026-12-02T09:00:00Z","lastUpdated":"2026-12-02T09:00:00Z","kind":"main"}"#,
            r#"{"$set":{"messages":[{"id":"u0","timestamp":"2026-12-02T09:00:00Z","type":"user","content":[{"text":"<session_context>x</session_context>"}]}]}}"#,
            r#"{"id":"u1","timestamp":"2026-12-02T09:00:01Z","type":"user","content":"first"}"#,
            r#"{"id":"g1","timestamp":"2026-12-02T09:00:02Z","type":"gemini","content":"","tokens":{"input":100,"output":5,"cached":40,"thoughts":2,"tool":3,"total":110}}"#,
            r#"{"id":"g1","timestamp":"2026-12-02T09:00:02Z","type":"gemini","content":"","tokens":{"input":100,"output":5,"cached":40,"thoughts":2,"tool":3,"total":110},"toolCalls":[{"id":"x","name":"run_shell_command","args":{"command":"false"},"status":"error","result":[{"functionResponse":{"response":{"error":"bad"}}}]}]}"#,
            r#"{"$rewindTo":"g1"}"#,
            r#"{"id":"g2","timestamp":"2026-12-02T09:00:05Z","type":"gemini","content":"again","tokens":null}"#,
            r#"{"id":"i1","type":"info","content":"note"}"#,
            r#"{"id":"z1","type":"brand-new"}"#,
            r#"{"what":"else"}"#,
            "not json",
        ];
        let text = lines.join("\n") + "\n";
        let t =
            read_gemini_transcript(Path::new("/t/chats/session-x.jsonl"), text.as_bytes(), None);
        assert_eq!(t.session, "s-9");
        let kinds: Vec<&str> = t.events.iter().map(|(_, e)| e.kind_name()).collect();
        assert_eq!(
            kinds,
            [
                "session.start",
                "agent.notice",
                "llm.response",
                "tool.call",
                "tool.result",
                "agent.notice"
            ]
        );
        assert_eq!(
            tokens(&t),
            (1, 63, 40, 7),
            "tool-use prompt is input, thoughts output"
        );
        assert!(matches!(&t.events[4].1, EventBody::ToolResult(r)
            if r.status == ToolStatus::Error && r.error.as_deref() == Some("bad")));
        assert!(matches!(&t.events[5].1, EventBody::AgentNotice(n) if n.notice == "rewind"));
        assert_eq!(t.bad_lines, 1);
        assert_eq!(t.unknown.get("brand-new"), Some(&1));
        assert_eq!(t.unknown.get("(no id)"), Some(&1));
        assert_eq!(t.skipped.get("message info"), Some(&1));
        assert_eq!(t.skipped.get("user (context)"), Some(&1));
        // A subagent's transcript is a child session of the directory's session.
        let sub = r#"{"sessionId":"a7","projectHash":"h","startTime":"2026-12-02T09:00:00Z","kind":"subagent"}"#;
        let t = read_gemini_transcript(
            Path::new("/t/chats/s-9/agent-a7.jsonl"),
            format!("{sub}\n").as_bytes(),
            None,
        );
        assert_eq!(
            (t.session.as_str(), t.parent.as_deref()),
            ("s-9.agent-a7", Some("s-9"))
        );
        // A document that is not JSON is one damaged line.
        let t = read_gemini_transcript(Path::new("/t/session-y.json"), b"{", None);
        assert_eq!((t.bad_lines, t.session.as_str()), (1, "session-y"));
    }

    #[test]
    fn settings_scopes_transcripts_and_the_stop() {
        let mut places = Places {
            home: Some("/h".into()),
            project: "/p".into(),
            ..Places::default()
        };
        let f = |p: &Places, s| Gemini.settings_file(p, s);
        assert_eq!(
            f(&places, Scope::User),
            Ok("/h/.gemini/settings.json".into())
        );
        assert_eq!(
            f(&places, Scope::Project),
            Ok("/p/.gemini/settings.json".into())
        );
        assert_eq!(f(&places, Scope::Local), Err(PlaceError::NoScope));
        assert_eq!(Gemini.import_root(&places), Ok("/h/.gemini/tmp".into()));
        places.vars.insert(HOME_VAR.into(), "/g".into());
        assert_eq!(
            f(&places, Scope::User),
            Ok("/g/.gemini/settings.json".into())
        );
        assert_eq!(Gemini.import_root(&places), Ok("/g/.gemini/tmp".into()));
        for (p, yes) in [
            ("/t/w/chats/session-2026-12-02T09-09-59d4f035.jsonl", true),
            ("/t/w/chats/session-2026-12-02T09-09-59d4f035.json", true),
            ("/t/w/chats/59d4f035/agent-1.jsonl", true),
            ("/t/w/logs.json", false),
            ("/t/w/other.jsonl", false),
        ] {
            assert_eq!(Gemini.is_transcript(Path::new(p)), yes, "{p}");
        }
        let block = Gemini.stop_block("not done").unwrap_or_default();
        let v: Value = serde_json::from_str(&block).unwrap_or_default();
        assert_eq!(
            (v["decision"].as_str(), v["reason"].as_str()),
            (Some("deny"), Some("not done"))
        );
        assert_eq!(Agent::parse("gemini"), Some(Agent::Gemini));
        assert!(
            Gemini.hook_events().iter().all(|e| e.2 >= 1000),
            "milliseconds"
        );
    }
}
