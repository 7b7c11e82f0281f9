//! Factory Droid (`droid`, npm `@factory/cli-linux-x64`): Claude Code's hooks and
//! payload envelope in `settings.json` (user: `~/.factory/settings.json`; project:
//! `.factory/settings.json`; no local scope), with its own tool names (`Execute`,
//! `Create`, `Edit`), no tool-call id in any payload (a result is paired with the open
//! call), no `PostToolUse` for a failing tool (its end is read from the transcript),
//! no `UserPromptSubmit` in `droid exec`, a stop refused with Claude Code's
//! `{"decision": "block"}`, and transcripts `~/.factory/sessions/<slug>/<id>.jsonl`
//! without usage: the session's cumulative token totals are in the sibling
//! `<id>.settings.json` (`tokenUsage`, input without the cached part), whose increases
//! are counted. Subagents are child sessions (`callingSessionId` on their first line).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_schema::{AgentNotice, EventBody, LlmResponse, ToolCall, ToolResult, ToolStatus};

use crate::adapter::{Adapter, HookEvent, PlaceError, Places, Scope};
use crate::hook::{ToolKind, edits_of, str_field};
use crate::import::{Transcript, json_lines, start_event, text_of};
use crate::transcript::{
    CallOutput, Caught, Cursor, LINE_BYTES_MAX, READ_BYTES_MAX, Usage, open_transcript,
    read_side_json, read_transcript_file,
};
use crate::{Agent, session_id_from};

#[derive(Debug)]
pub struct Droid;

/// Droid's tools that change nothing.
const READ_ONLY: &[&str] = &[
    "Read",
    "LS",
    "Grep",
    "Glob",
    "FetchUrl",
    "WebSearch",
    "TodoWrite",
];

/// The prefix of the response ids of the token increases counted from
/// `<id>.settings.json` (followed by the cumulative total they were counted at).
pub const USAGE_ID_PREFIX: &str = "droid-usage-";

impl Adapter for Droid {
    fn name(&self) -> &'static str {
        "droid"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["factory-droid"]
    }

    fn settings_file(&self, places: &Places, scope: Scope) -> Result<PathBuf, PlaceError> {
        places.user_and_project_file(scope, None, ".factory", "settings.json")
    }

    /// The events droid's settings schema accepts that tacho records
    /// (`UserPromptSubmit` fires for subagents' prompts, not in `droid exec`).
    fn hook_events(&self) -> &'static [HookEvent] {
        &[
            ("SessionStart", None, 10),
            ("UserPromptSubmit", None, 10),
            ("PreToolUse", Some("*"), 30),
            ("PostToolUse", Some("*"), 30),
            ("Notification", None, 10),
            ("PreCompact", None, 10),
            ("SubagentStop", None, 30),
            ("Stop", None, 60),
            ("SessionEnd", None, 10),
        ]
    }

    fn tool_kind(&self, tool: &str, input: Option<&Value>) -> ToolKind {
        match tool {
            "Create" | "Edit" | "MultiEdit" => str_field(input, "file_path")
                .map_or(ToolKind::Anything, |p| ToolKind::Files(vec![p.to_owned()])),
            "ApplyPatch" => crate::hook::tool_kind(tool, input),
            t if READ_ONLY.contains(&t) => ToolKind::ReadOnly,
            _ => ToolKind::Anything,
        }
    }

    /// A failing tool fires no `PostToolUse`: its end is in the transcript only.
    fn failed_calls_fire_post_hook(&self) -> bool {
        false
    }

    fn read_transcript(
        &self,
        cursor: &mut Cursor,
        path: &Path,
        _finish: bool,
    ) -> std::io::Result<Caught> {
        let mut caught = Caught {
            outputs: failed_calls(cursor, path)?,
            ..Caught::default()
        };
        match read_token_totals(path) {
            Ok(Some((totals, model))) => {
                caught.usages.extend(usage_increase(cursor, totals, model));
            }
            Ok(None) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(caught)
    }

    fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError> {
        Ok(places
            .home
            .as_ref()
            .ok_or(PlaceError::NoHome)?
            .join(".factory")
            .join("sessions"))
    }

    fn import_transcript(&self, path: &Path, bytes: &[u8]) -> Transcript {
        // A session without its settings file (or an unreadable one) imports
        // without tokens.
        let totals = read_token_totals(path).unwrap_or_default();
        read_droid_transcript(path, bytes, totals)
    }
}

/// A session's cumulative token totals: input (without cached), cached reads, cache
/// writes, output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub output: u64,
}

impl Totals {
    pub fn sum(&self) -> u64 {
        self.input
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
            .saturating_add(self.output)
    }
}

/// `<dir>/<id>.jsonl` → `<dir>/<id>.settings.json`.
pub fn settings_sibling(transcript: &Path) -> PathBuf {
    transcript.with_extension("settings.json")
}

/// Reads `tokenUsage` (and `model`) of a session's settings file, a JSON document of a
/// few kilobytes, opened as a transcript is (a regular file, without blocking).
/// `Ok(None)` when it has no `tokenUsage`.
pub fn read_token_totals(transcript: &Path) -> std::io::Result<Option<(Totals, Option<String>)>> {
    Ok(totals_of(&read_side_json(&settings_sibling(transcript))?))
}

/// The totals and model of a parsed `<id>.settings.json`.
pub fn totals_of(doc: &Value) -> Option<(Totals, Option<String>)> {
    let u = doc.get("tokenUsage")?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let totals = Totals {
        input: n("inputTokens"),
        cache_read: n("cacheReadTokens"),
        cache_write: n("cacheCreationTokens"),
        output: n("outputTokens"),
    };
    let model = doc.get("model").and_then(Value::as_str).map(str::to_owned);
    Some((totals, model))
}

/// What the totals gained since the cursor's: one usage (none when they did not grow).
/// The cursor keeps them as Codex's cumulative total is kept (input with cached,
/// cached, cache writes, output, sum), so that the log's responses fold back in.
fn usage_increase(cursor: &mut Cursor, now: Totals, model: Option<String>) -> Option<Usage> {
    let before = cursor.codex_total.unwrap_or_default();
    let sum = now.sum();
    if sum <= before[4] {
        return None;
    }
    let input_all = now.input.saturating_add(now.cache_read);
    let cache_read = now.cache_read.saturating_sub(before[1]);
    let usage = Usage {
        message_id: format!("{USAGE_ID_PREFIX}{sum}"),
        request_id: None,
        model,
        input_tokens: input_all
            .saturating_sub(before[0])
            .saturating_sub(cache_read),
        output_tokens: now.output.saturating_sub(before[3]),
        cache_read,
        cache_write: now.cache_write.saturating_sub(before[2]),
        stop_reason: None,
        time_unix_ns: None,
    };
    cursor.codex_total = Some([input_all, now.cache_read, now.cache_write, now.output, sum]);
    cursor.remember(&usage.message_id);
    Some(usage)
}

/// Reads the transcript from the cursor's offset (complete lines only, a bounded part
/// per call) and returns the failed tool results it gained, keyed by the ids the hook
/// gives Droid's calls: `call-<n>`, the n-th `tool_use` of the session (its payloads
/// carry no id; calls are paired by order), counted in `cursor.calls_seen`.
fn failed_calls(cursor: &mut Cursor, path: &Path) -> std::io::Result<Vec<(String, CallOutput)>> {
    let mut f = match open_transcript(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    if len < cursor.offset {
        // Rewritten: read again from the start, counting the calls again.
        cursor.offset = 0;
        cursor.calls_seen = 0;
        cursor.open_calls.clear();
    }
    f.seek(SeekFrom::Start(cursor.offset))?;
    let mut bytes = Vec::new();
    f.take(READ_BYTES_MAX).read_to_end(&mut bytes)?;
    let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    let mut out = Vec::new();
    let ids = &mut cursor.open_calls;
    for raw in bytes.get(..end).unwrap_or_default().split(|&b| b == b'\n') {
        if raw.len() > LINE_BYTES_MAX || raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let Ok(entry) = serde_json::from_slice::<Value>(raw) else {
            cursor.bad_lines += 1;
            continue;
        };
        for block in content_blocks(&entry) {
            match block.get("type").and_then(Value::as_str) {
                Some("tool_use") => {
                    cursor.calls_seen += 1;
                    if let Some(id) = block.get("id").and_then(Value::as_str) {
                        ids.insert(id.to_owned(), format!("call-{}", cursor.calls_seen));
                    }
                }
                Some("tool_result") if block.get("is_error") == Some(&Value::Bool(true)) => {
                    let hook_id = block
                        .get("tool_use_id")
                        .and_then(Value::as_str)
                        .and_then(|id| ids.remove(id));
                    if let Some(id) = hook_id {
                        out.push((id, call_output(block.get("content"))));
                    }
                }
                Some("tool_result") => {
                    if let Some(id) = block.get("tool_use_id").and_then(Value::as_str) {
                        ids.remove(id);
                    }
                }
                _ => {}
            }
        }
    }
    cursor.offset += end as u64;
    // Calls still waiting for their result (a few: tools run one at a time or a few
    // in parallel).
    while ids.len() > 64 {
        ids.pop_first();
    }
    Ok(out)
}

/// The content blocks of a transcript line's message.
fn content_blocks(entry: &Value) -> impl Iterator<Item = &Value> {
    entry
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A tool result's content as text, with the exit code of `[Process exited with code N]`.
fn call_output(content: Option<&Value>) -> CallOutput {
    let output = content.map(text_of).unwrap_or_default();
    let exit_code = output.lines().rev().find_map(|l| {
        l.trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .strip_prefix("Process exited with code ")
            .and_then(|n| n.trim().parse().ok())
    });
    CallOutput { exit_code, output }
}

// --- Import: a whole transcript read into events ---

/// Reads a Droid session (`~/.factory/sessions/<slug>/<id>.jsonl`): `session_start`
/// starts it (a child session of `callingSessionId` for a subagent); user text is a
/// prompt (droid's `<system-reminder>` context and the records of hook runs, which have
/// no content, are skipped); `tool_use` blocks are calls and `tool_result` blocks their
/// results (`is_error`, exit code from the text); the session's token totals from
/// `totals` (its `<id>.settings.json`) are one model response at its last time.
pub fn read_droid_transcript(
    path: &Path,
    bytes: &[u8],
    totals: Option<(Totals, Option<String>)>,
) -> Transcript {
    let mut t = Transcript::default();
    let mut time = 0i64;
    // Calls are numbered as the hooks number them (`call-<n>`), so that importing a
    // session the hooks recorded adds none twice.
    let mut calls: std::collections::BTreeMap<String, String> = Default::default();
    // Each call's tool and input, by the hooks' id: an edit is recorded with its result.
    let mut inputs: std::collections::BTreeMap<String, (String, Value)> = Default::default();
    for (_, entry, at) in json_lines(bytes, &mut t) {
        time = at;
        let kind = entry
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("(none)");
        match kind {
            "session_start" if t.session.is_empty() => {
                let s = |k: &str| entry.get(k).and_then(Value::as_str).map(str::to_owned);
                t.session = session_id_from(&s("id").unwrap_or_default());
                t.workspace = s("cwd");
                t.parent = s("callingSessionId").map(|p| session_id_from(&p));
                t.events.push((
                    time,
                    start_event(Agent::Droid, None, t.workspace.clone(), t.parent.clone()),
                ));
            }
            "message" => {
                let role = entry
                    .get("message")
                    .and_then(|m| m.get("role"))
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let mut any = false;
                for block in content_blocks(&entry) {
                    any = true;
                    match block.get("type").and_then(Value::as_str) {
                        Some("text") if role == "user" => {
                            let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                            if text.trim().is_empty() || text.trim_start().starts_with('<') {
                                *t.skipped.entry("message (context)".into()).or_default() += 1;
                                continue;
                            }
                            t.events.push((
                                time,
                                EventBody::AgentNotice(AgentNotice {
                                    notice: "prompt".into(),
                                    message: Some(text.to_owned()),
                                    agent: None,
                                }),
                            ));
                        }
                        Some("tool_use") => {
                            let (Some(id), Some(name)) = (
                                block.get("id").and_then(Value::as_str),
                                block.get("name").and_then(Value::as_str),
                            ) else {
                                continue;
                            };
                            let n = calls.len() + 1;
                            let id = calls
                                .entry(id.to_owned())
                                .or_insert_with(|| format!("call-{n}"))
                                .clone();
                            let input = block.get("input").cloned().unwrap_or(Value::Null);
                            let target = ["command", "file_path", "path", "url", "pattern"]
                                .iter()
                                .find_map(|k| input.get(*k).and_then(Value::as_str))
                                .map(|s| {
                                    s.lines().next().unwrap_or("").chars().take(400).collect()
                                });
                            inputs.insert(id.clone(), (name.to_owned(), input.clone()));
                            t.events.push((
                                time,
                                EventBody::ToolCall(ToolCall {
                                    call_id: id,
                                    tool: name.to_owned(),
                                    target,
                                    input: Some(input.to_string()),
                                    agent: None,
                                }),
                            ));
                        }
                        Some("tool_result") => {
                            let Some(id) = block
                                .get("tool_use_id")
                                .and_then(Value::as_str)
                                .and_then(|id| calls.get(id))
                                .cloned()
                            else {
                                *t.skipped.entry("tool_result (no call)".into()).or_default() += 1;
                                continue;
                            };
                            let failed = block.get("is_error") == Some(&Value::Bool(true));
                            let o = call_output(block.get("content"));
                            let error = failed
                                .then(|| o.output.lines().next().unwrap_or("error").to_owned());
                            let edits = match inputs.get(&id) {
                                Some((tool, input)) if !failed => edits_of(
                                    tool,
                                    Some(input),
                                    block.get("content"),
                                    t.workspace.as_deref(),
                                    &id,
                                ),
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
                                    error,
                                    exit_code: o.exit_code,
                                    output: Some(o.output),
                                }),
                            ));
                            for edit in edits {
                                t.events.push((time, EventBody::FileEdit(edit)));
                            }
                        }
                        _ => {
                            *t.skipped
                                .entry(format!("message {role} (text)"))
                                .or_default() += 1;
                        }
                    }
                }
                if !any {
                    *t.skipped.entry("message (hook run)".into()).or_default() += 1;
                }
            }
            other => *t.skipped.entry(other.to_owned()).or_default() += 1,
        }
    }
    if t.session.is_empty() {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        t.session = session_id_from(&stem);
        t.events
            .insert(0, (time, start_event(Agent::Droid, None, None, None)));
    }
    crate::import::backfill_times(&mut t);
    if let Some((totals, model)) = totals.filter(|(n, _)| n.sum() > 0) {
        let id = format!("{USAGE_ID_PREFIX}{}", totals.sum());
        t.events.push((
            time,
            EventBody::LlmResponse(LlmResponse {
                request_id: id.clone(),
                response_id: Some(id),
                model,
                tokens_in: totals.input,
                tokens_out: totals.output,
                cache_read: totals.cache_read,
                cache_write: totals.cache_write,
                latency_ms: None,
                stop_reason: None,
                error: None,
            }),
        ));
    }
    t
}

/// A whole session file, read for a test or a tool.
pub fn read_session_file(path: &Path) -> std::io::Result<Transcript> {
    let bytes = read_transcript_file(path)?;
    Ok(Droid.import_transcript(path, &bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{Action, HookState, map_payload};
    use std::collections::BTreeMap;

    fn fixture(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/agents/fixtures/droid")
            .join(rel)
    }

    const SESSION: &str = "768e5370-4681-4dcc-a4a3-c1fd84d53222";

    fn transcript() -> PathBuf {
        fixture(&format!(
            "home/.factory/sessions/-WORKSPACE/{SESSION}.jsonl"
        ))
    }

    /// What the mock served in the captured run (its log's `served`): uncached input,
    /// cached input, output.
    fn served() -> (u64, u64, u64) {
        let log = std::fs::read_to_string(fixture("mock.log")).unwrap_or_default();
        let mut s = (0, 0, 0);
        for l in log.lines() {
            let v: Value = serde_json::from_str(l).unwrap_or_default();
            let u = &v["served"];
            let cached = u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0);
            s.0 += u["prompt_tokens"].as_u64().unwrap_or(0) - cached;
            s.1 += cached;
            s.2 += u["completion_tokens"].as_u64().unwrap_or(0);
        }
        s
    }

    fn results(actions: &[Action]) -> Vec<ToolResult> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Event {
                    body: EventBody::ToolResult(r),
                    ..
                } => Some(r.clone()),
                _ => None,
            })
            .collect()
    }

    /// Issue 43: Droid's `session_start` carries no `timestamp`; the session starts
    /// at its first timed line, not on 1970-01-01.
    #[test]
    fn a_session_without_a_start_time_starts_at_its_first_timed_line() {
        let text = concat!(
            r#"{"type":"session_start","id":"d1","cwd":"/w"}"#,
            "\n",
            r#"{"type":"message","timestamp":"2026-11-20T09:00:01Z","message":{"role":"user","content":[{"type":"text","text":"go"}]}}"#,
            "\n"
        );
        let t = read_droid_transcript(Path::new("/p/d1.jsonl"), text.as_bytes(), None);
        let start = t
            .events
            .iter()
            .find(|(_, b)| matches!(b, EventBody::SessionStart(_)))
            .map(|(at, _)| *at);
        assert_eq!(
            start,
            tacho_schema::parse_ts(&Value::String("2026-11-20T09:00:01Z".into())).ok()
        );
    }

    #[test]
    fn the_captured_run_maps_to_calls_results_and_steps() {
        let agent = Agent::Droid;
        let hooks = std::fs::read_to_string(fixture("hooks.jsonl")).unwrap_or_default();
        let mut st = HookState::default();
        let mut all = Vec::new();
        for line in hooks.lines() {
            let v: Value = serde_json::from_str(line).unwrap_or_default();
            let p = agent
                .parse_payload(v["stdin"].to_string().as_bytes())
                .unwrap_or_else(|e| panic!("{e}: {line}"));
            // As the hook does: the transcript is read before the payload is mapped.
            let c = agent
                .read_transcript(&mut st.transcript, &transcript(), false)
                .unwrap_or_else(|e| panic!("{e}"));
            st.call_outputs.extend(c.outputs);
            all.extend(map_payload(agent, &p, &mut st));
        }
        let calls: Vec<(String, String)> = all
            .iter()
            .filter_map(|a| match a {
                Action::Event {
                    body: EventBody::ToolCall(c),
                    ..
                } => Some((c.call_id.clone(), c.tool.clone())),
                _ => None,
            })
            .collect();
        let names: Vec<&str> = calls.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(names, ["Execute", "Create", "Edit", "Execute", "Execute"]);
        // Every call has its result; the failing one (no PostToolUse fired) from the
        // transcript, with its exit code.
        let r = results(&all);
        let ids: Vec<&str> = r.iter().map(|r| r.call_id.as_str()).collect();
        assert_eq!(
            ids,
            ["call-1", "call-2", "call-3", "call-4", "call-5"],
            "{r:?}"
        );
        let failed: Vec<(&str, Option<i64>)> = r
            .iter()
            .filter(|r| r.status == ToolStatus::Error)
            .map(|r| (r.call_id.as_str(), r.exit_code))
            .collect();
        assert_eq!(failed, [("call-4", Some(3))]);
        assert!(
            r.iter()
                .find(|r| r.call_id == "call-4")
                .and_then(|r| r.output.as_deref())
                .is_some_and(|o| o.contains("about-to-fail")),
            "{r:?}"
        );
        // Five steps, each finished; Create and Edit snapshot their file only.
        let finished = all
            .iter()
            .filter(|a| {
                matches!(
                    a,
                    Action::Event {
                        body: EventBody::StepFinish(_),
                        ..
                    }
                )
            })
            .count();
        assert_eq!(finished, 5);
        let targeted: Vec<Vec<String>> = all
            .iter()
            .filter_map(|a| match a {
                Action::Snapshot {
                    paths,
                    before_step: Some(_),
                    ..
                } if !paths.is_empty() => Some(paths.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            targeted,
            [
                vec!["/WORKSPACE/hello.txt".to_owned()],
                vec!["/WORKSPACE/hello.txt".to_owned()]
            ]
        );
        assert!(all.iter().any(|a| matches!(a, Action::Gate { .. })));
        assert!(Agent::Droid.reports_session_end());
    }

    #[test]
    fn tokens_are_the_increases_of_the_settings_totals_and_equal_what_was_served() {
        let (input, cached, output) = served();
        assert!(input > 0 && output > 0, "the fixture's mock log");
        let mut cursor = Cursor::default();
        let c = Droid
            .read_transcript(&mut cursor, &transcript(), false)
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
        assert_eq!(sum(&c.usages), (input, cached, output));
        // Read again: nothing new.
        let again = Droid
            .read_transcript(&mut cursor, &transcript(), true)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.usages, []);
        // Totals that grow count by their increase.
        let mut c2 = Cursor::default();
        let t = |i, r, o| Totals {
            input: i,
            cache_read: r,
            cache_write: 0,
            output: o,
        };
        let a = usage_increase(&mut c2, t(100, 40, 10), None);
        let b = usage_increase(&mut c2, t(130, 80, 15), None);
        let none = usage_increase(&mut c2, t(130, 80, 15), None);
        let got: Vec<(u64, u64, u64)> = [a, b, none]
            .into_iter()
            .flatten()
            .map(|u| (u.input_tokens, u.cache_read, u.output_tokens))
            .collect();
        assert_eq!(got, [(100, 40, 10), (30, 40, 5)]);
    }

    #[test]
    fn a_session_imports_with_its_calls_results_prompt_and_tokens() {
        let t = read_session_file(&transcript()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.session, SESSION);
        assert_eq!(t.workspace.as_deref(), Some("/WORKSPACE"));
        let count = |k: &str| t.events.iter().filter(|(_, b)| b.kind_name() == k).count();
        assert_eq!(count("session.start"), 1);
        assert_eq!(count("tool.call"), 5, "{:?}", t.events);
        assert_eq!(count("tool.result"), 5);
        // Numbered as the hooks number them (the_captured_run_maps_to_calls_results_and_steps).
        let ids: Vec<String> = t
            .events
            .iter()
            .filter_map(|(_, b)| match b {
                EventBody::ToolResult(r) => Some(r.call_id.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(ids, ["call-1", "call-2", "call-3", "call-4", "call-5"]);
        let prompts: Vec<String> = t
            .events
            .iter()
            .filter_map(|(_, b)| match b {
                EventBody::AgentNotice(n) if n.notice == "prompt" => n.message.clone(),
                _ => None,
            })
            .collect();
        assert!(
            prompts
                .first()
                .is_some_and(|p| p.starts_with("Edit notes.txt")),
            "{prompts:?}"
        );
        let (input, cached, output) = served();
        let tokens: Vec<(u64, u64, u64)> = t
            .events
            .iter()
            .filter_map(|(_, b)| match b {
                EventBody::LlmResponse(r) => Some((r.tokens_in, r.cache_read, r.tokens_out)),
                _ => None,
            })
            .collect();
        assert_eq!(tokens, [(input, cached, output)]);
        assert_eq!(t.bad_lines, 0);
    }

    #[test]
    fn a_subagent_is_a_child_session_of_its_caller() {
        let dir = fixture("subagent/home/.factory/sessions/-WORKSPACE");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            panic!("{}", dir.display())
        };
        let mut parents = Vec::new();
        for e in entries.flatten() {
            let p = e.path();
            if Droid.is_transcript(&p) {
                let t = read_session_file(&p).unwrap_or_else(|e| panic!("{e}"));
                parents.push(t.parent.is_some());
            }
        }
        parents.sort();
        assert_eq!(parents, [false, true]);
    }

    #[test]
    fn a_subagents_hooks_record_a_child_session_of_its_caller() {
        let agent = Agent::Droid;
        let hooks = std::fs::read_to_string(fixture("subagent/hooks.jsonl")).unwrap_or_default();
        // One hook state per session, as the hook keeps them.
        let mut states: BTreeMap<String, HookState> = BTreeMap::new();
        let mut starts = Vec::new();
        for line in hooks.lines() {
            let v: Value = serde_json::from_str(line).unwrap_or_default();
            let p = agent
                .parse_payload(v["stdin"].to_string().as_bytes())
                .unwrap_or_else(|e| panic!("{e}: {line}"));
            let st = states.entry(p.session_id.clone()).or_default();
            for a in map_payload(agent, &p, st) {
                if let Action::Event {
                    session,
                    body: EventBody::SessionStart(s),
                } = a
                {
                    starts.push((session, s.parent));
                }
            }
        }
        let caller = "963e0748-e3c2-4ae8-a011-b1153559e02a";
        let child = "b6dfc415-1385-4a27-88fc-3a230f94173e";
        assert_eq!(
            starts,
            [
                (caller.to_owned(), None),
                (child.to_owned(), Some(caller.to_owned()))
            ]
        );
    }

    #[test]
    fn settings_files_per_scope() {
        let places = Places {
            home: Some("/h".into()),
            project: "/p".into(),
            ..Places::default()
        };
        let f = |s| Droid.settings_file(&places, s);
        assert_eq!(f(Scope::User), Ok("/h/.factory/settings.json".into()));
        assert_eq!(f(Scope::Project), Ok("/p/.factory/settings.json".into()));
        assert_eq!(f(Scope::Local), Err(PlaceError::NoScope));
        assert_eq!(
            Droid.import_root(&places),
            Ok("/h/.factory/sessions".into())
        );
        assert_eq!(Agent::parse("droid"), Some(Agent::Droid));
    }
}
