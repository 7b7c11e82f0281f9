//! Claude Code: hooks in `settings.json` (user: `$CLAUDE_CONFIG_DIR` or `~/.claude`;
//! project: `.claude/settings.json`; local: `.claude/settings.local.json`), the
//! payloads [`crate::hook`] maps as they are, a JSONL transcript with one usage per
//! model response, and transcripts under `projects/` in its configuration directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_schema::{AgentNotice, EventBody, ToolCall, ToolResult, ToolStatus};

use crate::adapter::{Adapter, Fork, HookEvent, PlaceError, Places, Scope};
use crate::hook::{edits_of, subagent_route};
use crate::import::{Transcript, json_lines, start_event, start_transcript_session, text_of};
use crate::transcript::{Cursor, read_side_json, usage_of};
use crate::{Agent, session_id_from};

/// The variable naming Claude Code's configuration directory.
const CONFIG_DIR_VAR: &str = "CLAUDE_CONFIG_DIR";

#[derive(Debug)]
pub struct ClaudeCode;

impl Adapter for ClaudeCode {
    fn name(&self) -> &'static str {
        "claude-code"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["claude"]
    }

    fn transcript_confirms_calls(&self) -> bool {
        true
    }

    fn env_vars(&self) -> &'static [&'static str] {
        &[CONFIG_DIR_VAR]
    }

    fn scopes(&self) -> &'static [Scope] {
        &[Scope::User, Scope::Project, Scope::Local]
    }

    fn settings_file(&self, places: &Places, scope: Scope) -> Result<PathBuf, PlaceError> {
        Ok(match scope {
            Scope::User => places
                .config_dir(CONFIG_DIR_VAR, ".claude")?
                .join("settings.json"),
            Scope::Project => places.project.join(".claude").join("settings.json"),
            Scope::Local => places.project.join(".claude").join("settings.local.json"),
        })
    }

    fn hook_events(&self) -> &'static [HookEvent] {
        &[
            ("SessionStart", None, 10),
            ("UserPromptSubmit", None, 10),
            ("PreToolUse", Some("*"), 30),
            ("PostToolUse", Some("*"), 30),
            ("PostToolUseFailure", Some("*"), 30),
            ("Notification", None, 10),
            ("PreCompact", None, 10),
            ("SubagentStart", None, 10),
            ("SubagentStop", None, 30),
            ("Stop", None, 60),
            // Claude Code gives every SessionEnd hook 1.5 s in all by default.
            ("SessionEnd", None, 2),
        ]
    }

    fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError> {
        Ok(places
            .config_dir(CONFIG_DIR_VAR, ".claude")?
            .join("projects"))
    }

    fn session_file(&self, places: &Places, session: &str) -> Option<PathBuf> {
        // A transcript is `projects/<the workspace's escaped path>/<session id>.jsonl`;
        // only real directories are looked in (a link there could lead anywhere).
        if session.is_empty() || session.contains(['/', '\\', '\0']) || session.starts_with('.') {
            return None;
        }
        let root = self.import_root(places).ok()?;
        let name = format!("{session}.jsonl");
        std::fs::read_dir(&root)
            .ok()?
            .flatten()
            .filter(|d| d.file_type().is_ok_and(|t| t.is_dir()))
            .map(|d| d.path().join(&name))
            .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
    }

    fn fork_session(&self, bytes: &[u8], before_call: &str, new_id: &str) -> Result<Fork, String> {
        fork_claude_transcript(bytes, before_call, new_id)
    }

    fn resume_command(&self, id: &str) -> Option<String> {
        Some(format!("claude --resume {id}"))
    }

    fn import_transcript(&self, path: &Path, bytes: &[u8]) -> Transcript {
        let mut t = read_claude_transcript(path, bytes);
        // A subagent's type (the agent its hooks name at `SubagentStart`) is in
        // `agent-<id>.meta.json` beside its transcript; without it, its start names
        // Claude Code.
        if t.parent.is_some()
            && let Ok(meta) = read_side_json(&path.with_extension("meta.json"))
            && let Some(kind) = meta.get("agentType").and_then(Value::as_str)
        {
            for (_, body) in &mut t.events {
                if let EventBody::SessionStart(s) = body {
                    s.agent = Some(kind.to_owned());
                }
            }
        }
        t
    }
}

// --- A conversation forked for a rollback ---

/// Claude Code's transcript `bytes` up to the first line of the model response whose
/// content holds the `tool_use` `before_call` (a response is written a content block
/// a line, each line with the response's `message.id`), every `sessionId` made
/// `new_id`: the conversation as it stood before the model made that call, which
/// `claude --resume NEW_ID` continues. Every line kept must be JSON; at least one user
/// message must come before the call.
pub fn fork_claude_transcript(
    bytes: &[u8],
    before_call: &str,
    new_id: &str,
) -> Result<Fork, String> {
    let text =
        std::str::from_utf8(bytes).map_err(|e| format!("the transcript is not UTF-8: {e}"))?;
    let lines: Vec<&str> = text.lines().collect();
    let parsed = |i: usize, line: &str| -> Result<Value, String> {
        serde_json::from_str(line).map_err(|e| format!("line {}: not JSON: {e}", i + 1))
    };
    let message_id = |v: &Value| -> Option<String> {
        (v.get("type").and_then(Value::as_str) == Some("assistant"))
            .then(|| {
                v.pointer("/message/id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .flatten()
    };
    let makes_call = |v: &Value| {
        v.pointer("/message/content")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter().any(|b| {
                    b.get("type").and_then(Value::as_str) == Some("tool_use")
                        && b.get("id").and_then(Value::as_str) == Some(before_call)
                })
            })
    };
    // The response that made the call, then the first line of that response.
    let mut response = None;
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if makes_call(&v) {
            response = Some((i, message_id(&v)));
            break;
        }
    }
    let (call_line, id) =
        response.ok_or_else(|| format!("call {before_call} is not in the transcript"))?;
    let cut = match id {
        Some(id) => lines
            .iter()
            .position(|l| {
                serde_json::from_str::<Value>(l)
                    .ok()
                    .and_then(|v| message_id(&v))
                    .as_deref()
                    == Some(id.as_str())
            })
            .unwrap_or(call_line),
        None => call_line,
    };
    // Calls the same response made before this one, cut with it.
    let dropped_calls: Vec<String> = lines
        .iter()
        .take(call_line + 1)
        .skip(cut)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| {
            v.pointer("/message/content")
                .and_then(Value::as_array)
                .cloned()
        })
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .filter_map(|b| b.get("id").and_then(Value::as_str).map(str::to_owned))
        .take_while(|id| id != before_call)
        .collect();
    let mut out = Vec::new();
    let mut users = 0;
    for (i, line) in lines.iter().take(cut).enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut v = parsed(i, line)?;
        if v.get("type").and_then(Value::as_str) == Some("user") {
            users += 1;
        }
        if let Some(o) = v.as_object_mut()
            && o.contains_key("sessionId")
        {
            o.insert("sessionId".into(), Value::String(new_id.to_owned()));
        }
        out.extend_from_slice(v.to_string().as_bytes());
        out.push(b'\n');
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

// --- Import: a whole transcript read into events ---

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
    // The permission mode a resumed session starts in.
    "mode",
];

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
    // When each call was made: a subagent's route is recorded at its call.
    let mut call_times: BTreeMap<String, i64> = BTreeMap::new();
    let mut time = 0i64;
    let mut started = false;
    for (raw, entry, at) in json_lines(bytes, &mut t) {
        time = at;
        let kind = entry
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("(none)");
        // The session starts at its first conversation entry (or the first naming
        // its `cwd`): lines before it (`queue-operation`, …) name the session but not
        // its workspace.
        let converses = matches!(kind, "user" | "assistant") || entry.get("cwd").is_some();
        if !started
            && converses
            && let Some(sid) = entry.get("sessionId").and_then(Value::as_str)
        {
            started = true;
            let name = entry
                .get("agentType")
                .and_then(Value::as_str)
                .map(str::to_owned);
            start_transcript_session(
                &mut t,
                &entry,
                sid,
                agent_file.as_ref(),
                Agent::ClaudeCode,
                name,
                time,
            );
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
                    call_times.insert(id.to_owned(), time);
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
                    if is_error {
                        continue;
                    }
                    let response = entry.get("toolUseResult");
                    let cwd = t.workspace.as_deref();
                    for edit in edits_of(tool, input.as_ref(), response, cwd, id) {
                        t.events.push((time, EventBody::FileEdit(edit)));
                    }
                    // A subagent's call (`Agent`, `Task`): its result names the child
                    // session, whose transcript is a file of its own.
                    if let Some(agent_id) = response
                        .and_then(|r| r.get("agentId"))
                        .and_then(Value::as_str)
                    {
                        let kind = response
                            .and_then(|r| r.get("agentType"))
                            .and_then(Value::as_str);
                        let main = t.parent.as_deref().unwrap_or(&t.session);
                        let (_, route) = subagent_route(Agent::ClaudeCode, main, agent_id, kind);
                        t.events
                            .push((call_times.get(id).copied().unwrap_or(time), route));
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

#[cfg(test)]
mod fork_tests {
    use super::*;

    /// Real transcripts of six Claude Code versions (tests/corpus): found by session id
    /// under a configuration directory, and forked before each call they hold. Every
    /// fork is JSON lines of the new session only, a prefix of the original (line for
    /// line, but for the session id), holds no line of the response that made the
    /// call, and holds every call before it with its result.
    #[test]
    fn real_transcripts_fork_before_each_call() {
        let corpus =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus/files/claude-code");
        let mut forked = 0;
        for version in std::fs::read_dir(&corpus).unwrap().flatten() {
            for case in std::fs::read_dir(version.path()).unwrap().flatten() {
                let config = case.path().join(".claude");
                let places = Places {
                    home: None,
                    project: case.path(),
                    outside_work_tree: true,
                    vars: [(CONFIG_DIR_VAR.to_owned(), config.clone())].into(),
                };
                let projects = std::fs::read_dir(config.join("projects")).unwrap();
                let file = projects
                    .flatten()
                    .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
                    .map(|f| f.path())
                    .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
                    .unwrap();
                let session = file.file_stem().unwrap().to_str().unwrap().to_owned();
                assert_eq!(
                    ClaudeCode.session_file(&places, &session),
                    Some(file.clone())
                );
                assert_eq!(ClaudeCode.session_file(&places, "../x"), None);
                let bytes = std::fs::read(&file).unwrap();
                let text = String::from_utf8(bytes.clone()).unwrap();
                let calls: Vec<String> = text
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .filter(|v| v["type"] == "assistant")
                    .flat_map(|v| {
                        v["message"]["content"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                    })
                    .filter(|b| b["type"] == "tool_use")
                    .filter_map(|b| b["id"].as_str().map(str::to_owned))
                    .collect();
                assert!(!calls.is_empty(), "{}", file.display());
                for (k, call) in calls.iter().enumerate() {
                    let out = match ClaudeCode.fork_session(&bytes, call, "new-id") {
                        Ok(out) => out.bytes,
                        // A call in the first response: nothing of the user before it
                        // can happen only for the very first call.
                        Err(e) => {
                            assert_eq!(k, 0, "{e}");
                            continue;
                        }
                    };
                    forked += 1;
                    let kept: Vec<Value> = std::str::from_utf8(&out)
                        .unwrap()
                        .lines()
                        .map(|l| serde_json::from_str(l).unwrap())
                        .collect();
                    let original: Vec<Value> = text
                        .lines()
                        .filter(|l| !l.trim().is_empty())
                        .map(|l| serde_json::from_str(l).unwrap())
                        .collect();
                    for (a, b) in kept.iter().zip(&original) {
                        let mut b = b.clone();
                        if let Some(o) = b.as_object_mut()
                            && o.contains_key("sessionId")
                        {
                            o.insert("sessionId".into(), "new-id".into());
                        }
                        assert_eq!(a, &b);
                    }
                    let kept_text = String::from_utf8(out).unwrap();
                    assert!(!kept_text.contains(&format!("\"id\":\"{call}\"")), "{call}");
                    assert!(!kept_text.contains(&format!("\"sessionId\":\"{session}\"")));
                    for earlier in &calls[..k] {
                        // A call of the same response as this one is cut with it.
                        if kept_text.contains(&format!("\"id\":\"{earlier}\"")) {
                            assert!(
                                kept_text.contains(&format!("\"tool_use_id\":\"{earlier}\"")),
                                "{earlier} kept without its result"
                            );
                        }
                    }
                }
                assert!(ClaudeCode.fork_session(&bytes, "toolu_none", "n").is_err());
            }
        }
        assert!(forked > 20, "{forked}");
    }
}
