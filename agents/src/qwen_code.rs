//! Qwen Code (npm `@qwen-code/qwen-code`): Claude Code's `hooks` object in
//! `settings.json` (user: `~/.qwen/settings.json`; project: `.qwen/settings.json`; no
//! local scope), Claude Code's payload envelope with tools of its own names
//! (`run_shell_command`, `write_file`, `edit`, …), the model's call id in
//! `tool_call_id` (its `tool_use_id` is an id of its own, not in the transcript), a
//! failing shell reported by `PostToolUseFailure` with its exit code only as text,
//! an empty `UserPromptSubmit` before every model request, no `SessionEnd` in `-p`
//! mode, and a JSONL transcript under `~/.qwen/projects/<slug>/chats/` whose replies
//! carry Gemini's `usageMetadata` (the prompt count includes the cached tokens).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_schema::{AgentNotice, EditOp, EventBody, FileEdit, ToolCall, ToolResult, ToolStatus};

use crate::adapter::{Adapter, HookEvent, PlaceError, Places, Scope};
use crate::hook::{HookPayload, PayloadError, ToolKind};
use crate::import::{Transcript, json_lines, start_event, start_transcript_session};
use crate::transcript::usage_of;
use crate::{Agent, session_id_from};

#[derive(Debug)]
pub struct QwenCode;

/// Qwen Code's tools that change no file (its own memory file aside).
const READ_ONLY: &[&str] = &[
    "read_file",
    "read_many_files",
    "list_directory",
    "glob",
    "grep_search",
    "web_fetch",
    "web_search",
    "todo_write",
    "save_memory",
    "exit_plan_mode",
    // The subagent's own tools are recorded (and snapshotted) in its session.
    "agent",
    "task",
];

impl Adapter for QwenCode {
    fn name(&self) -> &'static str {
        "qwen-code"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["qwen"]
    }

    fn scopes(&self) -> &'static [Scope] {
        &[Scope::User, Scope::Project]
    }

    fn settings_file(&self, places: &Places, scope: Scope) -> Result<PathBuf, PlaceError> {
        places.user_and_project_file(scope, None, ".qwen", "settings.json")
    }

    fn hook_events(&self) -> &'static [HookEvent] {
        &[
            ("SessionStart", None, 10),
            ("UserPromptSubmit", None, 10),
            ("PreToolUse", Some("*"), 30),
            ("PostToolUse", Some("*"), 30),
            ("PostToolUseFailure", Some("*"), 30),
            ("PreCompact", None, 10),
            ("SubagentStart", None, 10),
            ("SubagentStop", None, 30),
            ("Stop", None, 60),
            // Interactive sessions report their end; `-p` runs do not.
            ("SessionEnd", None, 10),
        ]
    }

    /// Its transcript names every call by the model's call id (`functionCall.id`),
    /// which its hooks report as `tool_call_id`.
    fn transcript_confirms_calls(&self) -> bool {
        true
    }

    /// The model's call id (`tool_call_id`, the transcript's) pairs a call with its
    /// result; a shell's response is its `llmContent` text.
    fn parse_payload(&self, bytes: &[u8]) -> Result<HookPayload, PayloadError> {
        let mut p = HookPayload::parse(bytes)?;
        let raw: Value = serde_json::from_slice(bytes).map_err(PayloadError::Json)?;
        if let Some(id) = raw.get("tool_call_id").and_then(Value::as_str) {
            p.tool_use_id = Some(id.to_owned());
        }
        if let Some(text) = p
            .tool_response
            .as_ref()
            .and_then(|r| r.get("llmContent"))
            .and_then(Value::as_str)
        {
            p.tool_response = Some(Value::String(text.to_owned()));
        }
        Ok(p)
    }

    fn tool_kind(&self, tool: &str, input: Option<&Value>) -> ToolKind {
        let file = input
            .and_then(|i| i.get("file_path"))
            .and_then(Value::as_str);
        match (tool, file) {
            ("write_file" | "edit", Some(f)) => ToolKind::Files(vec![f.to_owned()]),
            (t, _) if READ_ONLY.contains(&t) => ToolKind::ReadOnly,
            _ => ToolKind::Anything,
        }
    }

    /// Its JSON Lines files but the per-session summary `~/.qwen/usage_record.jsonl`
    /// (found when a directory above `projects/` is imported): it repeats what the
    /// transcripts hold.
    fn is_transcript(&self, path: &Path) -> bool {
        path.extension().is_some_and(|e| e == "jsonl")
            && path.file_name().is_none_or(|n| n != "usage_record.jsonl")
    }

    fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError> {
        Ok(places
            .home
            .as_ref()
            .ok_or(PlaceError::NoHome)?
            .join(".qwen")
            .join("projects"))
    }

    fn import_transcript(&self, path: &Path, bytes: &[u8]) -> Transcript {
        read_qwen_transcript(path, bytes)
    }

    /// `-p` runs fire no `SessionEnd`: a stop the gate lets through ends the session.
    /// Its last replies reach its transcript after its last hook (issue 43).
    fn writes_transcript_late(&self) -> bool {
        true
    }

    fn reports_session_end(&self) -> bool {
        false
    }
}

/// Reads a Qwen Code transcript (`~/.qwen/projects/<slug>/chats/<session>.jsonl`, or a
/// subagent's `subagents/<session>/agent-<id>.jsonl`, which becomes a child session):
/// the user's prompts, each `functionCall` as a tool call joined with its
/// `tool_result` by id (the exit code from `resultDisplay.exitCode`), and the token
/// usage of each reply (`usageMetadata`).
pub fn read_qwen_transcript(path: &Path, bytes: &[u8]) -> Transcript {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let agent_file = stem.strip_prefix("agent-").map(str::to_owned);
    let mut t = Transcript::default();
    let mut calls: BTreeMap<String, (String, Option<Value>)> = BTreeMap::new();
    let mut time = 0i64;
    for (_, entry, at) in json_lines(bytes, &mut t) {
        time = at;
        let kind = entry
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("(none)");
        if t.session.is_empty()
            && let Some(sid) = entry.get("sessionId").and_then(Value::as_str)
        {
            start_transcript_session(
                &mut t,
                &entry,
                sid,
                agent_file.as_ref(),
                Agent::QwenCode,
                None,
                time,
            );
        }
        let parts: Vec<Value> = entry
            .pointer("/message/parts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        match kind {
            "user" => {
                let text: Vec<&str> = parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                let text = text.join("\n");
                if text.trim().is_empty() {
                    *t.skipped.entry("user (empty)".into()).or_default() += 1;
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
            "assistant" => {
                if let Some(u) = usage_of(&entry) {
                    t.events.push((
                        u.time_unix_ns.unwrap_or(time),
                        EventBody::LlmResponse(u.event()),
                    ));
                }
                for call in parts.iter().filter_map(|p| p.get("functionCall")) {
                    let (Some(id), Some(name)) = (
                        call.get("id").and_then(Value::as_str),
                        call.get("name").and_then(Value::as_str),
                    ) else {
                        continue;
                    };
                    let input = call.get("args").cloned();
                    let target = input.as_ref().and_then(|i| {
                        ["file_path", "command", "path", "pattern", "url", "query"]
                            .iter()
                            .find_map(|k| i.get(*k).and_then(Value::as_str))
                            .map(|s| s.lines().next().unwrap_or("").chars().take(400).collect())
                    });
                    calls.insert(id.to_owned(), (name.to_owned(), input.clone()));
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
            "tool_result" => {
                let Some(res) = entry.get("toolCallResult") else {
                    continue;
                };
                let Some(id) = res.get("callId").and_then(Value::as_str) else {
                    continue;
                };
                let failed = res.get("status").and_then(Value::as_str) == Some("error");
                let exit_code = res
                    .pointer("/resultDisplay/exitCode")
                    .and_then(Value::as_i64);
                let response = parts
                    .iter()
                    .find_map(|p| p.pointer("/functionResponse/response"));
                let text = |k: &str| {
                    response
                        .and_then(|r| r.get(k))
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                };
                let error = failed.then(|| text("error")).flatten();
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
                        error: error
                            .as_deref()
                            .map(|e| e.lines().next().unwrap_or("").to_owned()),
                        output: text("output").or(error),
                        exit_code,
                    }),
                ));
                if let (false, Some((tool, input))) = (failed, calls.get(id))
                    && let ("write_file" | "edit", Some(file)) = (
                        tool.as_str(),
                        input
                            .as_ref()
                            .and_then(|i| i.get("file_path"))
                            .and_then(Value::as_str),
                    )
                {
                    let diff = res
                        .pointer("/resultDisplay/fileDiff")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    let created = diff.contains("@@ -0,0 ");
                    let (added, removed) = diff_counts(diff);
                    t.events.push((
                        time,
                        EventBody::FileEdit(FileEdit {
                            path: file.to_owned(),
                            op: if created {
                                EditOp::Create
                            } else {
                                EditOp::Modify
                            },
                            from: None,
                            tool: Some(tool.clone()),
                            call_id: Some(id.to_owned()),
                            lines_added: (!diff.is_empty()).then_some(added),
                            lines_removed: (!diff.is_empty()).then_some(removed),
                        }),
                    ));
                }
            }
            "system" => {
                let sub = entry.get("subtype").and_then(Value::as_str).unwrap_or("");
                *t.skipped.entry(format!("system {sub}")).or_default() += 1;
            }
            other => {
                *t.unknown.entry(other.to_owned()).or_default() += 1;
                *t.skipped.entry(format!("{other} (unknown)")).or_default() += 1;
            }
        }
    }
    if t.session.is_empty() {
        t.session = session_id_from(&stem);
        t.events
            .insert(0, (time, start_event(Agent::QwenCode, None, None, None)));
    }
    t
}

/// Lines added and removed by a unified diff (its `+++`/`---` headers aside).
pub(crate) fn diff_counts(diff: &str) -> (u64, u64) {
    let (mut add, mut del) = (0u64, 0u64);
    for l in diff.lines() {
        if l.starts_with("+++") || l.starts_with("---") {
            continue;
        }
        if l.starts_with('+') {
            add += 1;
        } else if l.starts_with('-') {
            del += 1;
        }
    }
    (add, del)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{Action, events_and_prompts, map_all};

    fn fixture(rel: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/agents/fixtures/qwen-code")
            .join(rel);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The payloads the real CLI sent (`hooks.jsonl`: one line per hook call, its
    /// stdin), of the events tacho registers.
    fn payloads(rel: &str) -> Vec<Vec<u8>> {
        let registered: Vec<&str> = QwenCode.hook_events().iter().map(|e| e.0).collect();
        String::from_utf8_lossy(&fixture(rel))
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

    fn transcript() -> (PathBuf, Vec<u8>) {
        let name =
            "home/.qwen/projects/-WORKSPACE/chats/21ebc8b2-9c1a-4ee3-87e5-1fe95a22f629.jsonl";
        (PathBuf::from(name), fixture(name))
    }

    /// What the mock served (its log's `served` usage), summed: prompt (cached
    /// included), cached, completion.
    fn served(rel: &str) -> (u64, u64, u64) {
        let mut sum = (0, 0, 0);
        for l in String::from_utf8_lossy(&fixture(rel)).lines() {
            let Ok(v) = serde_json::from_str::<Value>(l) else {
                continue;
            };
            let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
            sum.0 += n("/served/prompt_tokens");
            sum.1 += n("/served/prompt_tokens_details/cached_tokens");
            sum.2 += n("/served/completion_tokens");
        }
        sum
    }

    #[test]
    fn its_usage_summary_is_not_a_transcript() {
        let home = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/agents/fixtures/qwen-code/home/.qwen");
        assert!(home.join("usage_record.jsonl").exists());
        assert!(!QwenCode.is_transcript(&home.join("usage_record.jsonl")));
        assert!(QwenCode.is_transcript(&home.join("projects/-WORKSPACE/chats/s.jsonl")));
    }

    #[test]
    fn the_real_payloads_map_to_calls_results_and_snapshots() {
        let (actions, _) = map_all(Agent::QwenCode, &payloads("hooks.jsonl"));
        // The prompt and the block reason are prompts; the empty prompts before each
        // request are not.
        let (events, prompts) = events_and_prompts(&actions);
        assert_eq!(
            prompts,
            vec![
                Some("Edit notes.txt, write hello.txt, then run a failing command."),
                Some("REFUSED-ONCE: append a line to notes.txt before you stop.")
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
            vec![
                ("call_mock_0001", "run_shell_command"),
                ("call_mock_0003", "write_file"),
                ("call_mock_0005", "edit"),
                ("call_mock_0007", "run_shell_command"),
                ("call_mock_0010", "run_shell_command"),
            ]
        );
        let results: Vec<(&str, ToolStatus, Option<i64>)> = events
            .iter()
            .filter_map(|e| match e {
                EventBody::ToolResult(r) => Some((r.call_id.as_str(), r.status, r.exit_code)),
                _ => None,
            })
            .collect();
        assert_eq!(
            results,
            vec![
                ("call_mock_0001", ToolStatus::Ok, None),
                ("call_mock_0003", ToolStatus::Ok, None),
                ("call_mock_0005", ToolStatus::Ok, None),
                ("call_mock_0007", ToolStatus::Error, Some(3)),
                ("call_mock_0010", ToolStatus::Ok, None),
            ]
        );
        let shell_output = events.iter().find_map(|e| match e {
            EventBody::ToolResult(r) if r.call_id == "call_mock_0001" => r.output.clone(),
            _ => None,
        });
        assert!(
            shell_output
                .as_deref()
                .is_some_and(|o| o.starts_with("Command: sed -i")),
            "{shell_output:?}"
        );
        // Every call that can change files is a step: the shells whole, the write and
        // the edit their file.
        let before = crate::hook::before_step_snapshots(&actions);
        let hello = vec!["/WORKSPACE/hello.txt".to_owned()];
        assert_eq!(
            before,
            vec![
                (vec![], 1),
                (hello.clone(), 2),
                (hello, 3),
                (vec![], 4),
                (vec![], 5)
            ]
        );
        assert_eq!(
            actions
                .iter()
                .filter(|a| matches!(a, Action::Gate { .. }))
                .count(),
            2,
            "both stops reach the gate"
        );
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, EventBody::AgentNotice(n) if n.notice.starts_with("hook:"))),
            "{events:?}"
        );
    }

    #[test]
    fn the_transcript_counts_what_the_mock_served() {
        let (path, bytes) = transcript();
        let mut cursor = crate::transcript::Cursor::default();
        let dir = std::env::temp_dir().join(format!("tacho-qwen-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let file = dir.join("t.jsonl");
        std::fs::write(&file, &bytes).unwrap_or_default();
        let caught = QwenCode
            .read_transcript(&mut cursor, &file, true)
            .unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);
        let (prompt, cached, out) = served("mock.log");
        assert_eq!((prompt, cached, out), (7560, 2800, 360));
        let sum =
            |f: fn(&crate::transcript::Usage) -> u64| caught.usages.iter().map(f).sum::<u64>();
        assert_eq!(caught.usages.len(), 7);
        assert_eq!(
            (
                sum(|u| u.input_tokens),
                sum(|u| u.cache_read),
                sum(|u| u.output_tokens)
            ),
            (prompt - cached, cached, out),
            "tacho's input excludes cache reads"
        );
        // The import reads the same.
        let t = QwenCode.import_transcript(&path, &bytes);
        let (mut i, mut c, mut o, mut n) = (0, 0, 0, 0);
        for (_, e) in &t.events {
            if let EventBody::LlmResponse(r) = e {
                i += r.tokens_in;
                c += r.cache_read;
                o += r.tokens_out;
                n += 1;
            }
        }
        assert_eq!((n, i, c, o), (7, prompt - cached, cached, out));
        assert_eq!(t.session, "21ebc8b2-9c1a-4ee3-87e5-1fe95a22f629");
        assert_eq!(t.workspace.as_deref(), Some("/WORKSPACE"));
    }

    #[test]
    fn the_import_reads_calls_results_and_edits() {
        let (path, bytes) = transcript();
        let t = QwenCode.import_transcript(&path, &bytes);
        let results: Vec<(&str, ToolStatus, Option<i64>)> = t
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                EventBody::ToolResult(r) => Some((r.call_id.as_str(), r.status, r.exit_code)),
                _ => None,
            })
            .collect();
        assert_eq!(
            results,
            vec![
                ("call_mock_0001", ToolStatus::Ok, Some(0)),
                ("call_mock_0003", ToolStatus::Ok, None),
                ("call_mock_0005", ToolStatus::Ok, None),
                ("call_mock_0007", ToolStatus::Error, Some(3)),
                ("call_mock_0010", ToolStatus::Ok, Some(0)),
            ]
        );
        let edits: Vec<(EditOp, Option<u64>, Option<u64>)> = t
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                EventBody::FileEdit(f) => Some((f.op, f.lines_added, f.lines_removed)),
                _ => None,
            })
            .collect();
        assert_eq!(
            edits,
            vec![
                (EditOp::Create, Some(1), Some(0)),
                (EditOp::Modify, Some(1), Some(1))
            ]
        );
        assert!(t.unknown.is_empty(), "{:?}", t.unknown);
        assert_eq!(t.bad_lines, 0);
    }

    #[test]
    fn a_subagent_transcript_is_a_child_session() {
        let dir = "subagent/home/.qwen/projects/-WORKSPACE/subagents";
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/agents/fixtures/qwen-code")
            .join(dir);
        let file = walk(&root).into_iter().find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("agent-"))
        });
        let Some(file) = file else {
            panic!("no subagent transcript under {}", root.display())
        };
        let bytes = std::fs::read(&file).unwrap_or_default();
        let t = QwenCode.import_transcript(&file, &bytes);
        let parent = t.parent.clone().unwrap_or_default();
        assert!(!parent.is_empty());
        assert!(
            t.session.starts_with(&format!("{parent}.")),
            "{}",
            t.session
        );
        let tokens: u64 = t
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                EventBody::LlmResponse(r) => Some(r.tokens_in + r.cache_read),
                _ => None,
            })
            .sum();
        assert_eq!(
            tokens, 2060,
            "the subagent's prompt tokens (cached included)"
        );
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }

    #[test]
    fn settings_scopes_and_the_stop() {
        let places = Places {
            home: Some(PathBuf::from("/h")),
            project: PathBuf::from("/p"),
            ..Places::default()
        };
        assert_eq!(
            QwenCode.settings_file(&places, Scope::User),
            Ok(PathBuf::from("/h/.qwen/settings.json"))
        );
        assert_eq!(
            QwenCode.settings_file(&places, Scope::Project),
            Ok(PathBuf::from("/p/.qwen/settings.json"))
        );
        assert_eq!(
            QwenCode.settings_file(&places, Scope::Local),
            Err(PlaceError::NoScope)
        );
        assert_eq!(
            QwenCode.import_root(&places),
            Ok(PathBuf::from("/h/.qwen/projects"))
        );
        assert_eq!(Agent::parse("qwen-code"), Some(Agent::QwenCode));
        let block = QwenCode.stop_block("check failed").unwrap_or_default();
        let v: Value = serde_json::from_str(&block).unwrap_or_default();
        assert_eq!(v["decision"], "block");
        assert!(!QwenCode.reports_session_end());
    }
}
