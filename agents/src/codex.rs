//! Codex: hooks in `hooks.json` (user: `$CODEX_HOME` or `~/.codex`; project:
//! `.codex/hooks.json`; no local scope), Claude Code's payload envelope but results
//! without exit codes (the rollout holds them), no `SessionEnd` (a stop the gate lets
//! through ends the session), a `Stop` hook that must print JSON, and rollouts under
//! `$CODEX_HOME/sessions` with cumulative token counts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_schema::{AgentNotice, EventBody, ToolCall, ToolResult, ToolStatus};

use crate::adapter::{Adapter, HookEvent, PlaceError, Places, Scope};
use crate::hook::edits_of;
use crate::import::{Transcript, json_lines, start_event};
use crate::transcript::{Caught, Cursor};
use crate::{Agent, session_id_from};

/// The variable naming Codex's configuration directory.
const HOME_VAR: &str = "CODEX_HOME";

#[derive(Debug)]
pub struct Codex;

impl Adapter for Codex {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn env_vars(&self) -> &'static [&'static str] {
        &[HOME_VAR]
    }

    fn scopes(&self) -> &'static [Scope] {
        &[Scope::User, Scope::Project]
    }

    fn settings_file(&self, places: &Places, scope: Scope) -> Result<PathBuf, PlaceError> {
        places.user_and_project_file(scope, Some(HOME_VAR), ".codex", "hooks.json")
    }

    fn hook_events(&self) -> &'static [HookEvent] {
        &[
            ("SessionStart", None, 10),
            ("UserPromptSubmit", None, 10),
            ("PreToolUse", Some("*"), 30),
            ("PostToolUse", Some("*"), 30),
            ("PermissionRequest", Some("*"), 10),
            ("PreCompact", None, 10),
            ("PostCompact", None, 10),
            ("SubagentStart", None, 10),
            ("SubagentStop", None, 30),
            ("Stop", None, 60),
        ]
    }

    fn install_note(&self) -> Option<&'static str> {
        Some(
            "Codex asks you to trust new or changed hooks before it runs them: start codex once and approve tacho's hooks (review them with /hooks)",
        )
    }

    /// Codex's hook payloads carry no exit code: its rollout does.
    fn results_from_transcript(&self) -> bool {
        true
    }

    fn read_transcript(
        &self,
        cursor: &mut Cursor,
        path: &Path,
        finish: bool,
    ) -> std::io::Result<Caught> {
        cursor.catch_up(path, finish, true)
    }

    /// Its rollout names every call by the `call_id` its hooks report.
    fn transcript_confirms_calls(&self) -> bool {
        true
    }

    fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError> {
        Ok(places.config_dir(HOME_VAR, ".codex")?.join("sessions"))
    }

    /// Its sessions, and the rollouts it archived (`archived_sessions/`, which
    /// ccusage reads too: issue 43).
    fn import_roots(&self, places: &Places) -> Result<Vec<PathBuf>, PlaceError> {
        let home = places.config_dir(HOME_VAR, ".codex")?;
        Ok(vec![home.join("sessions"), home.join("archived_sessions")])
    }

    fn import_transcript(&self, path: &Path, bytes: &[u8]) -> Transcript {
        read_codex_rollout(path, bytes)
    }

    fn stop_pass(&self) -> &'static str {
        "{}\n"
    }

    fn reports_session_end(&self) -> bool {
        false
    }
}

// --- Import: a whole transcript read into events ---

/// Reads a Codex rollout (`$CODEX_HOME/sessions/**/rollout-*.jsonl`): `session_meta`
/// starts the session; user messages are prompts (Codex's own context blocks are
/// skipped); `function_call` and `custom_tool_call` items are tool calls, joined with
/// their outputs by `call_id` (exit code read from the output text); usage is counted
/// from increases of `token_count`'s `total_token_usage`.
pub fn read_codex_rollout(path: &Path, bytes: &[u8]) -> Transcript {
    let mut t = Transcript::default();
    let mut cursor = Cursor::default();
    let mut time = 0i64;
    // The calls read so far, by id: their tool and input (an `apply_patch` edits what
    // its patch says once its output shows it succeeded).
    let mut calls: BTreeMap<String, (String, Value)> = BTreeMap::new();
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
            let edits = match calls.get(&id) {
                Some((tool, input)) if !failed => {
                    edits_of(tool, Some(input), None, t.workspace.as_deref(), &id)
                }
                _ => Vec::new(),
            };
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
            for edit in edits {
                t.events.push((time, EventBody::FileEdit(edit)));
            }
            continue;
        }
        match (kind, ptype) {
            ("session_meta", _) if t.session.is_empty() => {
                let id = payload
                    .get("id")
                    .or_else(|| payload.get("session_id"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                // A subagent's rollout (`source: {"subagent": {"thread_spawn":
                // {"parent_thread_id": …}}}`) is a child session of its parent's,
                // named as the hooks name it: `<parent>.<its thread id>`.
                let spawn = payload.pointer("/source/subagent/thread_spawn");
                let parent = spawn
                    .and_then(|s| s.get("parent_thread_id"))
                    .and_then(Value::as_str)
                    .map(session_id_from);
                t.session = match &parent {
                    Some(p) => session_id_from(&format!("{p}.{id}")),
                    None => session_id_from(id),
                };
                t.workspace = payload
                    .get("cwd")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let role = parent.as_ref().map(|_| {
                    spawn
                        .and_then(|s| s.get("agent_role").or_else(|| s.get("agent_nickname")))
                        .and_then(Value::as_str)
                        .unwrap_or("subagent")
                        .to_owned()
                });
                t.events.push((
                    time,
                    start_event(Agent::Codex, role, t.workspace.clone(), parent),
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
                calls.insert(id.to_owned(), (name.to_owned(), input.clone()));
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
