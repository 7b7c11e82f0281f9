//! Codex: hooks in `hooks.json` (user: `$CODEX_HOME` or `~/.codex`; project:
//! `.codex/hooks.json`; no local scope), Claude Code's payload envelope but results
//! without exit codes (the rollout holds them), no `SessionEnd` (a stop the gate lets
//! through ends the session), a `Stop` hook that must print JSON, and rollouts under
//! `$CODEX_HOME/sessions` with cumulative token counts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_schema::{AgentNotice, EventBody, ToolCall, ToolResult, ToolStatus};

use crate::adapter::{Adapter, Fork, HookEvent, PlaceError, Places, Scope};
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

    fn session_file(&self, places: &Places, session: &str) -> Option<PathBuf> {
        // `<id>.2`, a continuation tacho started, is the same rollout.
        let id = session.split('.').next().unwrap_or(session);
        if id.len() != 36 || !id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
            return None;
        }
        let suffix = format!("-{id}.jsonl");
        // `sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`.
        let mut dirs = vec![(self.import_root(places).ok()?, 0)];
        while let Some((dir, depth)) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(t) = e.file_type() else { continue };
                let name = e.file_name();
                let name = name.to_string_lossy();
                if t.is_dir() && depth < 3 {
                    dirs.push((e.path(), depth + 1));
                } else if t.is_file() && name.starts_with("rollout-") && name.ends_with(&suffix) {
                    return Some(e.path());
                }
            }
        }
        None
    }

    fn fork_session(&self, bytes: &[u8], before_call: &str, new_id: &str) -> Result<Fork, String> {
        fork_codex_rollout(bytes, before_call, new_id)
    }

    fn forked_file_name(&self, original: &Path, new_id: &str) -> String {
        // `rollout-<time>-<id>.jsonl`, as Codex names them (it finds a session by it).
        let name = original
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match name
            .strip_suffix(".jsonl")
            .and_then(|s| s.get(..s.len().saturating_sub(36)))
        {
            Some(prefix) if prefix.starts_with("rollout-") => format!("{prefix}{new_id}.jsonl"),
            _ => format!("rollout-{new_id}.jsonl"),
        }
    }

    fn resume_command(&self, id: &str) -> Option<String> {
        Some(format!("codex resume {id}"))
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

/// A Codex rollout's `bytes` up to the start of the model response that made call
/// `before_call` (its `function_call`, and the reasoning, assistant message and other
/// calls of the same response before it, with their `event_msg` echoes), the
/// `session_meta` id made `new_id`: the conversation before the model made that call,
/// which `codex resume NEW_ID` continues. Lines kept are as they were but for that id.
pub fn fork_codex_rollout(bytes: &[u8], before_call: &str, new_id: &str) -> Result<Fork, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("the rollout is not UTF-8: {e}"))?;
    let lines: Vec<&str> = text.lines().collect();
    let values: Vec<Option<Value>> = lines.iter().map(|l| serde_json::from_str(l).ok()).collect();
    let kind = |v: &Value| -> (String, String) {
        let t = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let p = v
            .pointer("/payload/type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        (t, p)
    };
    let call = values
        .iter()
        .position(|v| {
            v.as_ref().is_some_and(|v| {
                kind(v).0 == "response_item"
                    && v.pointer("/payload/call_id").and_then(Value::as_str) == Some(before_call)
                    && !kind(v).1.ends_with("_output")
            })
        })
        .ok_or_else(|| format!("call {before_call} is not in the rollout"))?;
    // Back over what the same response wrote before the call.
    let of_the_response = |v: &Value| {
        let (t, p) = kind(v);
        match t.as_str() {
            "response_item" => {
                matches!(
                    p.as_str(),
                    "reasoning"
                        | "function_call"
                        | "custom_tool_call"
                        | "local_shell_call"
                        | "web_search_call"
                ) || (p == "message"
                    && v.pointer("/payload/role").and_then(Value::as_str) == Some("assistant"))
            }
            "event_msg" => matches!(
                p.as_str(),
                "agent_message"
                    | "agent_reasoning"
                    | "agent_reasoning_raw_content"
                    | "agent_reasoning_section_break"
            ),
            _ => false,
        }
    };
    let mut cut = call;
    while cut > 0 && values[cut - 1].as_ref().is_some_and(of_the_response) {
        cut -= 1;
    }
    // Calls the same response made before this one, cut with it.
    let dropped_calls: Vec<String> = values
        .iter()
        .take(call)
        .skip(cut)
        .flatten()
        .filter(|v| kind(v).0 == "response_item" && !kind(v).1.ends_with("_output"))
        .filter_map(|v| {
            v.pointer("/payload/call_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    let mut out = Vec::new();
    let (mut meta, mut users) = (false, 0);
    for (i, line) in lines.iter().take(cut).enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut v = values[i]
            .clone()
            .ok_or_else(|| format!("line {}: not JSON", i + 1))?;
        let (t, p) = kind(&v);
        // The user's own messages: Codex files its context (the environment, AGENTS.md,
        // instructions) as user messages too, each opened by a tag or that heading.
        let context = |v: &Value| {
            let text = v
                .pointer("/payload/content/0/text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .trim_start();
            text.starts_with('<') || text.starts_with("# AGENTS.md")
        };
        if (t == "event_msg" && p == "user_message")
            || (t == "response_item"
                && p == "message"
                && v.pointer("/payload/role").and_then(Value::as_str) == Some("user")
                && !context(&v))
        {
            users += 1;
        }
        if t == "session_meta" && !meta {
            meta = true;
            match v.pointer_mut("/payload/id") {
                Some(id) => *id = Value::String(new_id.to_owned()),
                None => return Err(format!("line {}: a session_meta without its id", i + 1)),
            }
            // Newer versions name it twice.
            if let Some(id) = v.pointer_mut("/payload/session_id") {
                *id = Value::String(new_id.to_owned());
            }
            out.extend_from_slice(v.to_string().as_bytes());
        } else {
            out.extend_from_slice(line.as_bytes());
        }
        out.push(b'\n');
    }
    if !meta {
        return Err("no session_meta before the call".into());
    }
    if users == 0 {
        return Err(format!(
            "nothing of the conversation comes before call {before_call}"
        ));
    }
    Ok(Fork {
        bytes: out,
        dropped_calls,
    })
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

#[cfg(test)]
mod fork_tests {
    use super::*;

    /// Real rollouts of several Codex versions (tests/corpus): found by session id
    /// under `CODEX_HOME`, and forked before each call: the new id everywhere the old
    /// one was, a prefix of the original but for it, no line of the response that made
    /// the call, every call kept with its output.
    #[test]
    fn real_rollouts_fork_before_each_call() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/files/codex");
        let mut forked = 0;
        for version in std::fs::read_dir(&corpus).unwrap().flatten() {
            for case in std::fs::read_dir(version.path()).unwrap().flatten() {
                let home = case.path().join(".codex");
                let places = Places {
                    home: None,
                    project: case.path(),
                    outside_work_tree: true,
                    vars: [(HOME_VAR.to_owned(), home.clone())].into(),
                };
                let mut stack = vec![home.join("sessions")];
                let mut files = Vec::new();
                while let Some(d) = stack.pop() {
                    for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                        if e.path().is_dir() {
                            stack.push(e.path());
                        } else if e.path().extension().is_some_and(|x| x == "jsonl") {
                            files.push(e.path());
                        }
                    }
                }
                for file in files {
                    let bytes = std::fs::read(&file).unwrap();
                    let text = String::from_utf8(bytes.clone()).unwrap();
                    let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
                    let id = first["payload"]["id"].as_str().unwrap().to_owned();
                    assert_eq!(Codex.session_file(&places, &id), Some(file.clone()));
                    assert_eq!(
                        Codex.session_file(&places, &format!("{id}.2")),
                        Some(file.clone())
                    );
                    let new_id = "00000000-0000-4000-8000-000000000001";
                    let name = Codex.forked_file_name(&file, new_id);
                    assert!(
                        name.starts_with("rollout-") && name.ends_with(&format!("-{new_id}.jsonl")),
                        "{name}"
                    );
                    let calls: Vec<String> = text
                        .lines()
                        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                        .filter(|v| {
                            v["type"] == "response_item" && v["payload"]["type"] == "function_call"
                        })
                        .filter_map(|v| v["payload"]["call_id"].as_str().map(str::to_owned))
                        .collect();
                    // A dozen calls of each rollout, spread over it.
                    let every = calls.len().div_ceil(12).max(1);
                    for (k, call) in calls.iter().enumerate().step_by(every) {
                        let out = match Codex.fork_session(&bytes, call, new_id) {
                            Ok(out) => out.bytes,
                            Err(e) => {
                                assert_eq!(k, 0, "{e}");
                                continue;
                            }
                        };
                        forked += 1;
                        let kept = String::from_utf8(out).unwrap();
                        let meta: Value =
                            serde_json::from_str(kept.lines().next().unwrap()).unwrap();
                        assert_eq!(meta["payload"]["id"], new_id);
                        assert!(
                            !meta.to_string().contains(&id),
                            "the old id is gone: {meta}"
                        );
                        assert!(!kept.contains(&format!("\"call_id\":\"{call}\"")), "{call}");
                        let original: Vec<&str> = text.lines().collect();
                        for (i, l) in kept.lines().enumerate().skip(1) {
                            assert_eq!(l, original[i]);
                        }
                        // Every call kept has its output kept.
                        for earlier in &calls[..k] {
                            let tag = format!("\"call_id\":\"{earlier}\"");
                            assert!(
                                kept.matches(&tag).count() != 1,
                                "{earlier} without its output"
                            );
                        }
                    }
                }
            }
        }
        assert!(forked > 20, "{forked}");
    }
}
