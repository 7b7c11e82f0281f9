//! OpenCode (npm `opencode-ai`) and Kilo Code (npm `@kilocode/cli`, a fork of it with
//! the same plugin API): one adapter, parameterised by the agent's name, directories
//! and database ([`OPENCODE`], [`KILO`]).
//!
//! - **No hook commands: plugins.** tacho installs one plugin file of its own
//!   ([`crate::adapter::Installation::PluginFile`], written by [`crate::plugin`]) in
//!   `.opencode/plugin/` (project) or `$XDG_CONFIG_HOME/opencode/plugin/` (user; Kilo:
//!   `.kilo/`, `…/kilo/`). The plugin runs inside the agent (Bun) and hands each event
//!   tacho maps to `<tacho> hook <agent>` as one JSON object on stdin, `{"event",
//!   "payload", "directory", "database"}`, waiting for the answer: the plugin's hook
//!   names (`chat.message`, `tool.execute.before`, `tool.execute.after`) and the bus
//!   events it forwards as `event:<type>` (`session.created`, `session.idle`, and
//!   `message.part.updated` of a tool part that ended in an error), exactly as
//!   `tests/agents/fixtures/opencode/hooks.jsonl` logged them.
//! - **The mapping** ([`OpenCode::parse_payload`]): `session.created` → `SessionStart`
//!   (a subagent's session names its parent: `parentID`), `chat.message` →
//!   `UserPromptSubmit` (its text parts), `tool.execute.before/after` →
//!   `PreToolUse`/`PostToolUse` paired by the model's call id (`callID`), with the
//!   plugin's measured duration; a shell whose `metadata.exit` is not 0, and a tool part
//!   that ended in an error (a tool that threw: no `tool.execute.after` then), →
//!   `PostToolUseFailure`; `session.idle` → `Stop`. Its shell (`bash`) is snapshotted
//!   whole, `write` and `edit` their `filePath`.
//! - **No transcript file: a database.** Sessions, messages and parts are rows of a
//!   SQLite database (`$XDG_DATA_HOME/opencode/opencode.db`, WAL; Kilo's `kilo.db`),
//!   whose assistant messages carry each step's tokens. The hook's "transcript" is that
//!   session in the database (`<database>#<session id>`): read-only, at every event,
//!   each completed assistant message counted once. `tacho import` reads the whole
//!   database (every session, subagents as child sessions), or one session as
//!   `opencode export <id>` prints it.
//! - **Tokens**: a message's `input` excludes the cached tokens (`cache.read`), its
//!   `output` excludes `reasoning`; tacho's output is `output + reasoning`, so that
//!   input + cache read + output is what the model served.
//! - **The stop**: there is no stop hook. When the gate refuses a stop the plugin sends
//!   the reason as a new prompt (`client.session.prompt`): a server (`opencode serve`,
//!   the TUI) and Kilo Code's `run` go back to work; OpenCode's `run` stores the prompt
//!   and exits.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tacho_schema::{EventBody, ToolCall, ToolResult, ToolStatus};

use crate::adapter::{Adapter, HookEvent, Installation, PlaceError, Places, Scope};
use crate::hook::{HookPayload, PayloadError, ToolKind, tool_target};
use crate::import::{Transcript, file_edit_event, prompt_event, start_event};
use crate::qwen_code::diff_counts;
use crate::transcript::{Caught, Cursor, Usage};
use crate::{Agent, session_id_from};

/// OpenCode or one of its forks: where its files are.
#[derive(Debug)]
pub struct OpenCode {
    name: &'static str,
    /// Its directory in a project (`.opencode`).
    project_dir: &'static str,
    /// Its directory under the XDG configuration and data directories (`opencode`).
    xdg_dir: &'static str,
    /// Its database's file name in its data directory (`opencode.db`).
    database: &'static str,
}

pub const OPENCODE: OpenCode = OpenCode {
    name: "opencode",
    project_dir: ".opencode",
    xdg_dir: "opencode",
    database: "opencode.db",
};

pub const KILO: OpenCode = OpenCode {
    name: "kilo",
    project_dir: ".kilo",
    xdg_dir: "kilo",
    database: "kilo.db",
};

/// tacho's plugin file's name in the agent's plugin directory.
pub const PLUGIN_FILE: &str = "tacho.js";

/// Its tools that change no file.
const READ_ONLY: &[&str] = &[
    "read",
    "glob",
    "grep",
    "list",
    "todowrite",
    "todoread",
    "webfetch",
    "websearch",
    "codesearch",
    "skill",
    "question",
    "lsp",
    "kilo_local_recall",
    "board_read",
    // A subagent's own tools are recorded (and snapshotted) in its session.
    "task",
];

impl OpenCode {
    fn agent(&self) -> Agent {
        if self.name == KILO.name {
            Agent::Kilo
        } else {
            Agent::OpenCode
        }
    }
}

impl Adapter for OpenCode {
    fn name(&self) -> &'static str {
        self.name
    }

    fn aliases(&self) -> &'static [&'static str] {
        if self.name == KILO.name {
            &["kilocode", "kilo-code"]
        } else {
            &[]
        }
    }

    fn env_vars(&self) -> &'static [&'static str] {
        &["XDG_CONFIG_HOME", "XDG_DATA_HOME"]
    }

    /// tacho's plugin file: `<project>/.opencode/plugin/tacho.js`, or
    /// `$XDG_CONFIG_HOME/opencode/plugin/tacho.js` (`~/.config/…`).
    fn settings_file(&self, places: &Places, scope: Scope) -> Result<PathBuf, PlaceError> {
        let dir = match scope {
            Scope::User => places
                .config_dir("XDG_CONFIG_HOME", ".config")?
                .join(self.xdg_dir),
            Scope::Project => places.project.join(self.project_dir),
            Scope::Local => return Err(PlaceError::NoScope),
        };
        Ok(dir.join("plugin").join(PLUGIN_FILE))
    }

    fn installation(&self) -> Installation {
        Installation::PluginFile
    }

    /// The events the plugin hands to tacho (the timeout is how long it waits for the
    /// answer).
    fn hook_events(&self) -> &'static [HookEvent] {
        &[
            ("event:session.created", None, 10),
            ("chat.message", None, 10),
            ("tool.execute.before", None, 30),
            ("tool.execute.after", None, 30),
            ("event:message.part.updated", None, 30),
            ("event:session.idle", None, 60),
        ]
    }

    fn install_note(&self) -> Option<&'static str> {
        Some(
            "the plugin is loaded when the agent starts; it has no stop hook: a refused stop is sent back as a prompt, which `run` of OpenCode does not work on (a server or the TUI does)",
        )
    }

    fn parse_payload(&self, bytes: &[u8]) -> Result<HookPayload, PayloadError> {
        parse_plugin_payload(bytes)
    }

    fn tool_kind(&self, tool: &str, input: Option<&Value>) -> ToolKind {
        let file = input
            .and_then(|i| i.get("filePath"))
            .and_then(Value::as_str);
        match (tool, file) {
            ("write" | "edit" | "multiedit", Some(f)) => ToolKind::Files(vec![f.to_owned()]),
            ("apply_patch" | "patch", _) => crate::hook::tool_kind("apply_patch", input),
            (t, _) if READ_ONLY.contains(&t) => ToolKind::ReadOnly,
            _ => ToolKind::Anything,
        }
    }

    /// `path` is `<database>#<session id>`: the session's completed assistant messages
    /// not counted yet (with `finish`, those still open too), read from the messages
    /// created since the first one left uncounted last time.
    fn read_transcript(
        &self,
        cursor: &mut Cursor,
        path: &Path,
        finish: bool,
    ) -> std::io::Result<Caught> {
        let text = path.to_string_lossy();
        let Some((db, session)) = text.rsplit_once('#') else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{text}: not <database>#<session id>"),
            ));
        };
        let db = Path::new(db);
        let conn = open_database(db)?;
        let since = i64::try_from(cursor.offset).unwrap_or(i64::MAX);
        let rows = query(
            db,
            &conn,
            "select id, time_created, data from message where session_id = ?1 and time_created >= ?2 order by time_created, id",
            rusqlite::params![session, since],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                ))
            },
        )?;
        let mut out = Caught::default();
        let mut open_since: Option<i64> = None;
        let mut last = since;
        for (id, created, data) in rows {
            last = created;
            let Ok(m) = serde_json::from_str::<Value>(&data) else {
                cursor.bad_lines += 1;
                continue;
            };
            if m.get("role").and_then(Value::as_str) != Some("assistant") {
                continue;
            }
            let completed = m.pointer("/time/completed").is_some();
            if !completed && !finish {
                open_since.get_or_insert(created);
                continue;
            }
            if let Some(u) = usage(&id, &m)
                && cursor.remember(&id)
            {
                out.usages.push(u);
            }
        }
        cursor.offset = u64::try_from(open_since.unwrap_or(last)).unwrap_or(0);
        Ok(out)
    }

    /// `$XDG_DATA_HOME/opencode` (`~/.local/share/opencode`): its database.
    fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError> {
        Ok(places
            .config_dir("XDG_DATA_HOME", ".local/share")?
            .join(self.xdg_dir))
    }

    /// Its database (`opencode.db`) only: the JSON files beside it are not sessions.
    fn is_transcript(&self, path: &Path) -> bool {
        path.file_name().is_some_and(|n| n == self.database)
    }

    /// One session as `opencode export <id>` prints it: `{"info", "messages": [{"info",
    /// "parts"}]}`.
    fn import_transcript(&self, path: &Path, bytes: &[u8]) -> Transcript {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(doc) => {
                let info = doc.get("info").cloned().unwrap_or_default();
                let messages = doc
                    .get("messages")
                    .and_then(Value::as_array)
                    .map(|ms| {
                        ms.iter()
                            .map(|m| Message {
                                info: m.get("info").cloned().unwrap_or_default(),
                                parts: m
                                    .get("parts")
                                    .and_then(Value::as_array)
                                    .cloned()
                                    .unwrap_or_default(),
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                read_session(self.agent(), &info, messages)
            }
            Err(e) => {
                let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
                Transcript {
                    session: session_id_from(&stem.unwrap_or_default()),
                    events: vec![(0, start_event(self.agent(), None, None, None))],
                    bad_lines: 1,
                    broken: Some(format!("not a whole JSON document: {e}")),
                    lines: 1,
                    ..Transcript::default()
                }
            }
        }
    }

    /// Its database: every session in it (a SQLite file, known by its header);
    /// anything else is one exported session.
    fn import_file(&self, path: &Path) -> std::io::Result<Vec<Transcript>> {
        let mut head = [0u8; 16];
        let is_db = {
            use std::io::Read;
            let mut f = crate::transcript::open_transcript(path)?;
            f.read(&mut head)? == head.len() && &head == b"SQLite format 3\0"
        };
        if is_db {
            read_database(self.agent(), path)
        } else {
            let bytes = crate::transcript::read_transcript_file(path)?;
            Ok(vec![self.import_transcript(path, &bytes)])
        }
    }

    /// `run` fires no session end; a stop the gate lets through ends the session.
    fn reports_session_end(&self) -> bool {
        false
    }
}

/// Reads one payload of tacho's plugin: `{"event", "payload", "directory",
/// "database"}`, the payload being what the agent gave the plugin's hook (`{"input",
/// "output"}`) or the bus event (`{"type", "properties"}`). A payload without `event`
/// that names a `hook_event_name` is already in the shared vocabulary (Claude Code's
/// envelope: what a script of the user's, or `tacho hook`'s own tests, send) and is
/// read as it is, but for its `transcript_path`: this agent's transcript is a session
/// in its database, which only the plugin names.
pub fn parse_plugin_payload(bytes: &[u8]) -> Result<HookPayload, PayloadError> {
    let raw: Value = serde_json::from_slice(bytes).map_err(PayloadError::Json)?;
    let Some(event) = raw.get("event").and_then(Value::as_str) else {
        if raw.get("hook_event_name").is_some() {
            let mut p = HookPayload::parse(bytes)?;
            p.transcript_path = None;
            return Ok(p);
        }
        return Err(PayloadError::Missing("event"));
    };
    let payload = raw.get("payload").unwrap_or(&Value::Null);
    let input = payload.get("input");
    let output = payload.get("output");
    let props = payload.get("properties");
    fn s<'v>(v: Option<&'v Value>, k: &str) -> Option<&'v str> {
        v?.get(k)?.as_str()
    }
    let info = props.and_then(|p| p.get("info"));
    let part = props.and_then(|p| p.get("part"));
    let session = s(input, "sessionID")
        .or(s(props, "sessionID"))
        .or(s(part, "sessionID"))
        .or(s(info, "id"))
        .filter(|v| !v.trim().is_empty())
        .ok_or(PayloadError::Missing("sessionID"))?;
    let mut p = HookPayload {
        session_id: session.to_owned(),
        cwd: s(Some(&raw), "directory").map(str::to_owned),
        transcript_path: s(Some(&raw), "database").map(|d| format!("{d}#{session}")),
        ..HookPayload::default()
    };
    let name = match event {
        "event:session.created" => {
            p.source = Some("startup".into());
            if let Some(d) = s(info, "directory") {
                p.cwd = Some(d.to_owned());
            }
            p.calling_session_id = s(info, "parentID").map(str::to_owned);
            "SessionStart"
        }
        "chat.message" => {
            let parts = output.and_then(|o| o.get("parts"));
            p.prompt = Some(prompt_text(parts.and_then(Value::as_array)));
            "UserPromptSubmit"
        }
        "tool.execute.before" => {
            p.tool_name = s(input, "tool").map(str::to_owned);
            p.tool_use_id = s(input, "callID").map(str::to_owned);
            p.tool_input = output.and_then(|o| o.get("args")).cloned();
            "PreToolUse"
        }
        "tool.execute.after" => {
            p.tool_name = s(input, "tool").map(str::to_owned);
            p.tool_use_id = s(input, "callID").map(str::to_owned);
            p.tool_input = input.and_then(|i| i.get("args")).cloned();
            p.tool_response = output.and_then(|o| o.get("output")).cloned();
            p.duration_ms = payload.get("duration_ms").and_then(Value::as_u64);
            match output
                .and_then(|o| o.pointer("/metadata/exit"))
                .and_then(Value::as_i64)
            {
                Some(code) if code != 0 => {
                    p.error = Some(Value::String(format!("Exit code {code}")));
                    "PostToolUseFailure"
                }
                _ => "PostToolUse",
            }
        }
        // A tool part that ended in an error: a tool that threw (refused, or failed
        // before it ran) has no `tool.execute.after`.
        "event:message.part.updated"
            if s(part, "type") == Some("tool")
                && part.and_then(|t| t.pointer("/state/status")) == Some(&"error".into()) =>
        {
            let state = part.and_then(|t| t.get("state"));
            p.tool_name = s(part, "tool").map(str::to_owned);
            p.tool_use_id = s(part, "callID").map(str::to_owned);
            p.tool_input = state.and_then(|st| st.get("input")).cloned();
            p.error = state.and_then(|st| st.get("error")).cloned();
            p.duration_ms = duration_ms(state);
            "PostToolUseFailure"
        }
        "event:session.idle" => {
            p.stop_hook_active = raw.get("stop_hook_active").and_then(Value::as_bool);
            "Stop"
        }
        other => other,
    };
    p.hook_event_name = name.to_owned();
    Ok(p)
}

/// A user message's text: its text parts, but those the agent added itself
/// (`synthetic`) or left out of the conversation (`ignored`).
fn prompt_text(parts: Option<&Vec<Value>>) -> String {
    parts
        .into_iter()
        .flatten()
        .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
        .filter(|p| {
            !["synthetic", "ignored"]
                .iter()
                .any(|k| p.get(*k).and_then(Value::as_bool) == Some(true))
        })
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tool part's duration: `state.time.end - state.time.start` (milliseconds).
fn duration_ms(state: Option<&Value>) -> Option<u64> {
    let t = |k: &str| state?.pointer(&format!("/time/{k}"))?.as_u64();
    Some(t("end")?.saturating_sub(t("start")?))
}

/// The model usage of an assistant message: its `tokens`, `input` without the cached
/// tokens and `output` without `reasoning` (added back: tacho's output is all the
/// model generated). `None` for a message that used none (it failed before the
/// model answered).
fn usage(id: &str, m: &Value) -> Option<Usage> {
    let tk = m.get("tokens")?;
    let n = |p: &str| tk.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let u = Usage {
        message_id: id.to_owned(),
        request_id: None,
        model: m.get("modelID").and_then(Value::as_str).map(str::to_owned),
        input_tokens: n("/input"),
        output_tokens: n("/output").saturating_add(n("/reasoning")),
        cache_read: n("/cache/read"),
        cache_write: n("/cache/write"),
        stop_reason: m.get("finish").and_then(Value::as_str).map(str::to_owned),
        time_unix_ns: time_ns(m.pointer("/time/completed")),
    };
    let used = u.input_tokens + u.output_tokens + u.cache_read + u.cache_write;
    (used > 0).then_some(u)
}

fn time_ns(ms: Option<&Value>) -> Option<i64> {
    ms.and_then(|v| tacho_schema::parse_ts(v).ok())
}

/// Opens the agent's database read-only (another process, the agent, may be writing
/// it: WAL readers do not block it, and it does not block them). Only a regular file.
fn open_database(path: &Path) -> std::io::Result<rusqlite::Connection> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a regular file", path.display()),
        ));
    }
    let flags =
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn =
        rusqlite::Connection::open_with_flags(path, flags).map_err(|e| sql_error(path, e))?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(|e| sql_error(path, e))?;
    Ok(conn)
}

fn sql_error(path: &Path, e: rusqlite::Error) -> std::io::Error {
    std::io::Error::other(format!("{}: SQLite: {e}", path.display()))
}

/// The rows of one query, each mapped by `row`.
fn query<T>(
    path: &Path,
    conn: &rusqlite::Connection,
    sql: &str,
    params: impl rusqlite::Params,
    row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> std::io::Result<Vec<T>> {
    let mut stmt = conn.prepare(sql).map_err(|e| sql_error(path, e))?;
    let rows = stmt
        .query_map(params, row)
        .map_err(|e| sql_error(path, e))?;
    rows.collect::<rusqlite::Result<Vec<T>>>()
        .map_err(|e| sql_error(path, e))
}

/// A row's first three columns, as text; the third (a row's `data`) read leniently:
/// one row whose text is not valid UTF-8 never fails the whole database (issue 43: 0
/// of 9 sessions imported), its bad bytes replaced (U+FFFD) for the JSON reader, which
/// counts the row as damaged when that is not JSON any more.
fn three_texts(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, String)> {
    let data = match r.get_ref(2)? {
        rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => {
            String::from_utf8_lossy(b).into_owned()
        }
        _ => String::new(),
    };
    Ok((r.get(0)?, r.get(1)?, data))
}

/// One message with its parts (an export's shape; the database's rows are put in it).
struct Message {
    info: Value,
    parts: Vec<Value>,
}

/// Every session of a database: its `session`, `message` and `part` rows (the rows'
/// `data` is the export's JSON without the ids, which are columns).
fn read_database(agent: Agent, path: &Path) -> std::io::Result<Vec<Transcript>> {
    let conn = open_database(path)?;
    let sessions = query(
        path,
        &conn,
        "select id, parent_id, directory, title, time_created from session order by time_created, id",
        [],
        |r| {
            Ok(serde_json::json!({
                "id": r.get::<_, String>(0)?,
                "parentID": r.get::<_, Option<String>>(1)?,
                "directory": r.get::<_, Option<String>>(2)?,
                "title": r.get::<_, Option<String>>(3)?,
                "time": {"created": r.get::<_, i64>(4)?},
            }))
        },
    )?;
    let mut messages: BTreeMap<String, Vec<(String, Message)>> = BTreeMap::new();
    let mut bad: BTreeMap<String, u64> = BTreeMap::new();
    for (id, session, data) in query(
        path,
        &conn,
        "select id, session_id, data from message order by time_created, id",
        [],
        three_texts,
    )? {
        let Ok(mut info) = serde_json::from_str::<Value>(&data) else {
            *bad.entry(session).or_default() += 1;
            continue;
        };
        if let Some(m) = info.as_object_mut() {
            m.insert("id".into(), Value::String(id.clone()));
        }
        messages.entry(session).or_default().push((
            id,
            Message {
                info,
                parts: Vec::new(),
            },
        ));
    }
    let mut parts: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (message, session, data) in query(
        path,
        &conn,
        "select message_id, session_id, data from part order by id",
        [],
        three_texts,
    )? {
        match serde_json::from_str::<Value>(&data) {
            Ok(v) => parts.entry(message).or_default().push(v),
            Err(_) => *bad.entry(session).or_default() += 1,
        }
    }
    let mut out = Vec::new();
    for info in sessions {
        let id = info.get("id").and_then(Value::as_str).unwrap_or_default();
        let ms = messages
            .remove(id)
            .unwrap_or_default()
            .into_iter()
            .map(|(mid, mut m)| {
                m.parts = parts.remove(&mid).unwrap_or_default();
                m
            })
            .collect();
        let mut t = read_session(agent, &info, ms);
        t.bad_lines += bad.remove(id).unwrap_or(0);
        out.push(t);
    }
    Ok(out)
}

/// One session into tacho's events: its start (a subagent's names its parent), the
/// user's prompts, each tool part as a call and (once it ended) its result, the
/// files `write` and `edit` changed, and each assistant message's usage.
fn read_session(agent: Agent, info: &Value, messages: Vec<Message>) -> Transcript {
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let mut t = Transcript {
        session: session_id_from(&s(info, "id").unwrap_or_default()),
        parent: s(info, "parentID").map(|p| session_id_from(&p)),
        workspace: s(info, "directory"),
        ..Transcript::default()
    };
    let started = time_ns(info.pointer("/time/created")).unwrap_or(0);
    t.events.push((
        started,
        start_event(agent, None, t.workspace.clone(), t.parent.clone()),
    ));
    let mut time = started;
    let workspace = t.workspace.clone();
    for m in messages {
        t.lines += 1;
        time = time_ns(m.info.pointer("/time/created")).unwrap_or(time);
        match m.info.get("role").and_then(Value::as_str) {
            Some("user") => {
                let text = prompt_text(Some(&m.parts));
                if text.trim().is_empty() {
                    *t.skipped.entry("user (no text)".into()).or_default() += 1;
                    continue;
                }
                t.events.push((time, prompt_event(text)));
            }
            Some("assistant") => {
                for part in &m.parts {
                    match part.get("type").and_then(Value::as_str) {
                        Some("tool") => tool_part(part, workspace.as_deref(), time, &mut t),
                        Some(k) => *t.skipped.entry(format!("part {k}")).or_default() += 1,
                        None => *t.skipped.entry("part (no type)".into()).or_default() += 1,
                    }
                }
                let id = s(&m.info, "id").unwrap_or_default();
                if let Some(u) = usage(&id, &m.info) {
                    t.events.push((
                        u.time_unix_ns.unwrap_or(time),
                        EventBody::LlmResponse(u.event()),
                    ));
                }
            }
            other => {
                let k = other.unwrap_or("(none)").to_owned();
                *t.unknown.entry(k.clone()).or_default() += 1;
                *t.skipped.entry(format!("{k} (unknown)")).or_default() += 1;
            }
        }
    }
    t
}

/// A tool part: its call, and its result once it ended (`completed`, or `error`); a
/// shell is failed when its exit code is not 0.
fn tool_part(part: &Value, workspace: Option<&str>, time: i64, t: &mut Transcript) {
    let (Some(id), Some(tool)) = (
        part.get("callID").and_then(Value::as_str),
        part.get("tool").and_then(Value::as_str),
    ) else {
        *t.skipped
            .entry("tool part without call id".into())
            .or_default() += 1;
        return;
    };
    let state = part.get("state");
    let input = state.and_then(|s| s.get("input"));
    let at = |k: &str| time_ns(state.and_then(|s| s.pointer(&format!("/time/{k}"))));
    t.events.push((
        at("start").unwrap_or(time),
        EventBody::ToolCall(ToolCall {
            call_id: id.to_owned(),
            tool: tool.to_owned(),
            target: tool_target(tool, input),
            input: input.map(Value::to_string),
            agent: None,
        }),
    ));
    let status = state.and_then(|s| s.get("status")).and_then(Value::as_str);
    if !matches!(status, Some("completed" | "error")) {
        return;
    }
    let exit_code = state
        .and_then(|s| s.pointer("/metadata/exit"))
        .and_then(Value::as_i64);
    let error = state
        .and_then(|s| s.get("error"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            exit_code
                .filter(|c| *c != 0)
                .map(|c| format!("Exit code {c}"))
        });
    let failed = status == Some("error") || error.is_some();
    let output = state
        .and_then(|s| s.get("output"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    t.events.push((
        at("end").unwrap_or(time),
        EventBody::ToolResult(ToolResult {
            call_id: id.to_owned(),
            status: if failed {
                ToolStatus::Error
            } else {
                ToolStatus::Ok
            },
            duration_ms: duration_ms(state),
            error: error.map(|e| e.lines().next().unwrap_or("").to_owned()),
            output: output.or_else(|| state.and_then(|s| s.get("error")).map(|e| e.to_string())),
            exit_code,
        }),
    ));
    let file = input
        .and_then(|i| i.get("filePath"))
        .and_then(Value::as_str);
    if let (false, "write" | "edit", Some(file)) = (failed, tool, file) {
        let meta = state.and_then(|s| s.get("metadata"));
        let created = tool == "write" && meta.and_then(|m| m.get("exists")) == Some(&false.into());
        // The counts the edit gave, else those of its diff, else a new file's lines.
        let n = |k: &str| {
            meta.and_then(|m| m.pointer(&format!("/filediff/{k}")))
                .and_then(Value::as_u64)
        };
        let diff = meta.and_then(|m| m.get("diff")).and_then(Value::as_str);
        let content = input.and_then(|i| i.get("content")).and_then(Value::as_str);
        let (added, removed) = match (n("additions"), n("deletions"), diff, content) {
            (Some(a), Some(r), _, _) => (Some(a), Some(r)),
            (_, _, Some(d), _) => {
                let (a, r) = diff_counts(d);
                (Some(a), Some(r))
            }
            (_, _, None, Some(c)) if created => (Some(c.lines().count() as u64), Some(0)),
            _ => (None, None),
        };
        let path = workspace
            .and_then(|w| Path::new(file).strip_prefix(w).ok())
            .filter(|r| !r.as_os_str().is_empty())
            .map_or_else(|| file.to_owned(), |r| r.display().to_string());
        t.events.push((
            at("end").unwrap_or(time),
            file_edit_event(path, created, tool, id, (added, removed)),
        ));
    }
    // OpenCode ≥ 1.4 edits with patches (issue 43: 19 patches, no file recorded).
    if !failed && matches!(tool, "apply_patch" | "patch") {
        for edit in crate::hook::edits_of(tool, input, None, workspace, id) {
            t.events
                .push((at("end").unwrap_or(time), EventBody::FileEdit(edit)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{Action, HookState, map_payload};
    use tacho_schema::EditOp;

    fn fixture(agent: &str, rel: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/agents/fixtures")
            .join(agent)
            .join(rel);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn json(agent: &str, rel: &str) -> Value {
        serde_json::from_slice(&fixture(agent, rel)).unwrap_or_default()
    }

    /// What tacho's plugin would have sent for the events the capture's plugin logged
    /// (`hooks.jsonl`: `{"event", "payload"}`), of the events tacho's plugin forwards.
    fn payloads(agent: Agent) -> Vec<Vec<u8>> {
        let forwarded: Vec<&str> = agent.hook_events().iter().map(|e| e.0).collect();
        let db = format!("/HOME/.local/share/{0}/{0}.db", agent.name());
        String::from_utf8_lossy(&fixture(agent.name(), "hooks.jsonl"))
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| {
                l.get("event")
                    .and_then(Value::as_str)
                    .is_some_and(|e| forwarded.contains(&e))
            })
            // The plugin forwards a tool part only when it ended in an error.
            .filter(|l| {
                l["event"] != "event:message.part.updated"
                    || l.pointer("/payload/properties/part/state/status") == Some(&"error".into())
            })
            .map(|mut l| {
                l["directory"] = "/WORKSPACE".into();
                l["database"] = db.clone().into();
                l.to_string().into_bytes()
            })
            .collect()
    }

    /// A database made from the capture's dump (`<agent>.db.json`: each table's
    /// schema and rows, `data` parsed), in `dir`.
    fn database(agent: &str, dir: &Path) -> PathBuf {
        let dump = json(agent, &format!("{agent}.db.json"));
        let path = dir.join(format!("{agent}.db"));
        let conn = rusqlite::Connection::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let Some(tables) = dump.as_object() else {
            panic!("{agent}.db.json is not an object")
        };
        // The dump's tables come in name order, not in their references' order.
        conn.execute_batch("pragma foreign_keys = off")
            .unwrap_or_else(|e| panic!("{e}"));
        for (name, table) in tables {
            let schema = table["schema"].as_str().unwrap_or_default();
            conn.execute(schema, [])
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        for (name, table) in tables {
            for row in table["rows"].as_array().into_iter().flatten() {
                let Some(row) = row.as_object() else { continue };
                let cols: Vec<&String> = row.keys().collect();
                let sql = format!(
                    "insert into \"{name}\" ({}) values ({})",
                    cols.iter()
                        .map(|c| format!("\"{c}\""))
                        .collect::<Vec<_>>()
                        .join(", "),
                    (1..=cols.len())
                        .map(|i| format!("?{i}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let values: Vec<rusqlite::types::Value> = row
                    .values()
                    .map(|v| match v {
                        Value::Null => rusqlite::types::Value::Null,
                        Value::Bool(b) => rusqlite::types::Value::Integer(i64::from(*b)),
                        Value::Number(n) => match n.as_i64() {
                            Some(i) => rusqlite::types::Value::Integer(i),
                            None => rusqlite::types::Value::Real(n.as_f64().unwrap_or(0.0)),
                        },
                        Value::String(s) => rusqlite::types::Value::Text(s.clone()),
                        other => rusqlite::types::Value::Text(other.to_string()),
                    })
                    .collect();
                conn.execute(&sql, rusqlite::params_from_iter(values))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
        conn.execute_batch("pragma journal_mode = wal")
            .unwrap_or_else(|e| panic!("{e}"));
        path
    }

    /// What the mock served to the requests with tools (the title request is
    /// recorded nowhere): input without the cached tokens, cached, output.
    fn served(agent: &str) -> (u64, u64, u64) {
        let mut sum = (0, 0, 0);
        for l in String::from_utf8_lossy(&fixture(agent, "requests.jsonl")).lines() {
            let Ok(v) = serde_json::from_str::<Value>(l) else {
                continue;
            };
            if v["tools"] != true {
                continue;
            }
            let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
            let cached = n("/usage/prompt_tokens_details/cached_tokens");
            sum.0 += n("/usage/prompt_tokens") - cached;
            sum.1 += cached;
            sum.2 += n("/usage/completion_tokens");
        }
        sum
    }

    fn events(t: &Transcript) -> Vec<&EventBody> {
        t.events.iter().map(|(_, e)| e).collect()
    }

    fn tokens(events: &[&EventBody]) -> (u64, u64, u64) {
        events.iter().fold((0, 0, 0), |s, e| match e {
            EventBody::LlmResponse(r) => {
                (s.0 + r.tokens_in, s.1 + r.cache_read, s.2 + r.tokens_out)
            }
            _ => s,
        })
    }

    #[test]
    fn the_real_payloads_map_to_calls_results_and_snapshots() {
        for agent in [Agent::OpenCode, Agent::Kilo] {
            let mut st = HookState::default();
            let mut actions = Vec::new();
            for p in payloads(agent) {
                let p = agent
                    .parse_payload(&p)
                    .unwrap_or_else(|e| panic!("{agent} {e}: {}", String::from_utf8_lossy(&p)));
                assert_eq!(p.cwd.as_deref(), Some("/WORKSPACE"));
                actions.extend(map_payload(agent, &p, &mut st));
            }
            let events = crate::hook::events_of(&actions);
            let starts = events
                .iter()
                .filter(|e| matches!(e, EventBody::SessionStart(s) if s.workspace.as_deref() == Some("/WORKSPACE")))
                .count();
            assert_eq!(starts, 1, "{agent}: {events:?}");
            // The prompt (stored with its quotes), then the capture's refusal prompt.
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
                    Some("\"Please tidy notes.txt and write a summary.\""),
                    Some("KEEP WORKING: run the checks once more")
                ],
                "{agent}"
            );
            let results: Vec<(&str, ToolStatus, Option<i64>, bool)> = events
                .iter()
                .filter_map(|e| match e {
                    EventBody::ToolResult(r) => Some((
                        r.call_id.as_str(),
                        r.status,
                        r.exit_code,
                        r.output.as_deref().is_some_and(|o| !o.is_empty()),
                    )),
                    _ => None,
                })
                .collect();
            let calls: Vec<(&str, &str)> = events
                .iter()
                .filter_map(|e| match e {
                    EventBody::ToolCall(c) => Some((c.call_id.as_str(), c.tool.as_str())),
                    _ => None,
                })
                .collect();
            let tools: Vec<&str> = calls.iter().map(|c| c.1).collect();
            assert_eq!(tools, ["bash", "write", "edit", "bash"], "{agent}");
            assert!(
                calls.iter().all(|c| c.0.starts_with("call_mock_")),
                "{calls:?}"
            );
            let statuses: Vec<(ToolStatus, Option<i64>, bool)> =
                results.iter().map(|r| (r.1, r.2, r.3)).collect();
            assert_eq!(
                statuses,
                [
                    (ToolStatus::Ok, None, true),
                    (ToolStatus::Ok, None, true),
                    (ToolStatus::Ok, None, true),
                    (ToolStatus::Error, Some(3), true),
                ],
                "{agent}"
            );
            // Every call pairs with its result by the model's id.
            let ids: Vec<&str> = results.iter().map(|r| r.0).collect();
            assert_eq!(ids, calls.iter().map(|c| c.0).collect::<Vec<_>>());
            // The shells are snapshotted whole, write and edit their file.
            let before = crate::hook::before_step_snapshots(&actions);
            assert_eq!(
                before,
                [
                    (vec![], 1),
                    (vec!["/WORKSPACE/summary.md".to_owned()], 2),
                    (vec!["/WORKSPACE/notes.txt".to_owned()], 3),
                    (vec![], 4)
                ],
                "{agent}"
            );
            assert_eq!(
                actions
                    .iter()
                    .filter(|a| matches!(a, Action::Gate { .. }))
                    .count(),
                2,
                "{agent}: both idles reach the gate"
            );
            let transcript = actions.iter().find_map(|a| match a {
                Action::Tokens { transcript, .. } => Some(transcript.clone()),
                _ => None,
            });
            let db = format!("/HOME/.local/share/{0}/{0}.db#", agent.name());
            assert!(
                transcript
                    .as_deref()
                    .is_some_and(|t| t.starts_with(&db) && t.contains("#ses_")),
                "{transcript:?}"
            );
            assert!(st.unknown_events.is_empty(), "{:?}", st.unknown_events);
        }
    }

    /// A tool that threw (refused by a plugin, or failing before it ran) has no
    /// `tool.execute.after`: its part's error closes it.
    #[test]
    fn a_tool_part_in_error_is_a_failed_result() {
        let p = serde_json::json!({"event": "event:message.part.updated", "directory": "/w",
            "payload": {"type": "message.part.updated", "properties": {"sessionID": "ses_1",
                "part": {"type": "tool", "tool": "write", "callID": "c1", "sessionID": "ses_1",
                    "state": {"status": "error", "input": {"filePath": "/w/a"},
                        "error": "tacho says no writes", "time": {"start": 10, "end": 25}}}}}});
        let p = OPENCODE
            .parse_payload(p.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.hook_event_name, "PostToolUseFailure");
        assert_eq!(
            (p.tool_use_id.as_deref(), p.duration_ms),
            (Some("c1"), Some(15))
        );
        assert_eq!(p.error, Some("tacho says no writes".into()));
        // Without a session there is nothing to record it in.
        let none = serde_json::json!({"event": "chat.message", "payload": {"input": {}}});
        assert!(OPENCODE.parse_payload(none.to_string().as_bytes()).is_err());
        assert!(OPENCODE.parse_payload(b"not json").is_err());
        // The shared vocabulary is read as it is.
        let claude = serde_json::json!({"session_id": "s1", "hook_event_name": "SessionStart", "cwd": "/w", "transcript_path": "/w/t.jsonl"});
        let p = OPENCODE
            .parse_payload(claude.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (p.session_id.as_str(), p.hook_event_name.as_str()),
            ("s1", "SessionStart")
        );
        assert_eq!(p.transcript_path, None);
    }

    #[test]
    fn the_database_counts_what_the_mock_served_live_and_imported() {
        for agent in [Agent::OpenCode, Agent::Kilo] {
            let name = agent.name();
            let dir = std::env::temp_dir().join(format!("tacho-{name}-db-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap_or_default();
            let db = database(name, &dir);
            let info = json(name, "export.json");
            let sid = info
                .pointer("/info/id")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let served = served(name);
            // Live: the session's completed messages, each once.
            let target = PathBuf::from(format!("{}#{sid}", db.display()));
            let mut cursor = Cursor::default();
            let caught = agent
                .read_transcript(&mut cursor, &target, false)
                .unwrap_or_else(|e| panic!("{e}"));
            let sum = caught.usages.iter().fold((0, 0, 0), |s, u| {
                (
                    s.0 + u.input_tokens,
                    s.1 + u.cache_read,
                    s.2 + u.output_tokens,
                )
            });
            assert_eq!(sum, served, "{name} live");
            let again = agent
                .read_transcript(&mut cursor, &target, true)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(again.usages.is_empty(), "{name}: counted twice");
            // Imported: the database and the export read alike, and as ccusage counts.
            let from_db = agent.import_file(&db).unwrap_or_else(|e| panic!("{e}"));
            let _ = std::fs::remove_dir_all(&dir);
            assert_eq!(from_db.len(), 1, "{name}");
            let t = &from_db[0];
            assert_eq!(
                (t.session.as_str(), t.workspace.as_deref()),
                (sid, Some("/WORKSPACE"))
            );
            assert_eq!(tokens(&events(t)), served, "{name} imported");
            let cc = json(name, "ccusage-session.json");
            let n = |k: &str| cc.pointer(&format!("/totals/{k}")).and_then(Value::as_u64);
            assert_eq!(n("inputTokens"), Some(served.0));
            assert_eq!(n("cacheReadTokens"), Some(served.1));
            assert_eq!(n("totalTokens"), Some(served.0 + served.1 + served.2));
            let export =
                agent.import_transcript(Path::new("export.json"), &fixture(name, "export.json"));
            assert_eq!(
                events(&export),
                events(t),
                "{name}: the export reads as the database"
            );
            assert!(t.unknown.is_empty() && t.bad_lines == 0, "{:?}", t.unknown);
        }
    }

    /// Issue 43: one message row whose text is not valid UTF-8 does not fail the whole
    /// database: the session still imports, the row counted as damaged.
    #[test]
    fn a_row_that_is_not_utf8_fails_only_itself() {
        let name = Agent::OpenCode.name();
        let dir = std::env::temp_dir().join(format!("tacho-{name}-utf8-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_default();
        let db = database(name, &dir);
        let sid = json(name, "export.json")
            .pointer("/info/id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let conn = rusqlite::Connection::open(&db).unwrap_or_else(|e| panic!("{e}"));
        conn.execute(
            "insert into message (id, session_id, time_created, time_updated, data) values ('msg_bad', ?1, 1, 1, cast(x'7b22726f6c65223a22ff227d' as text))",
            [&sid],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        drop(conn);
        let from_db = Agent::OpenCode
            .import_file(&db)
            .unwrap_or_else(|e| panic!("one bad row failed the database: {e}"));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(from_db.len(), 1);
        assert_eq!(from_db[0].session, sid);
    }

    /// Issue 43: OpenCode's (and Droid's) patch tools edit the files their patch
    /// names; a patch that failed edits nothing.
    #[test]
    fn a_patch_edits_the_files_it_names() {
        let patch = "*** Begin Patch\n*** Add File: src/new.ts\n+a\n+b\n*** Update File: src/old.ts\n@@\n-x\n+y\n*** End Patch";
        let edits = |t: &Transcript| -> Vec<(String, EditOp)> {
            t.events
                .iter()
                .filter_map(|(_, b)| match b {
                    EventBody::FileEdit(f) => Some((f.path.clone(), f.op)),
                    _ => None,
                })
                .collect()
        };
        for (status, want) in [("completed", 2), ("error", 0)] {
            let part = serde_json::json!({"type": "tool", "tool": "apply_patch", "callID": "c9",
                "state": {"status": status, "input": {"patchText": patch}, "output": "ok"}});
            let mut t = Transcript::default();
            tool_part(&part, Some("/w"), 1, &mut t);
            let got = edits(&t);
            assert_eq!(got.len(), want, "{status}: {got:?}");
            if want > 0 {
                assert_eq!(
                    got,
                    [
                        ("src/new.ts".to_string(), EditOp::Create),
                        ("src/old.ts".to_string(), EditOp::Modify)
                    ]
                );
            }
        }
        let droid = crate::hook::edits_of(
            "ApplyPatch",
            Some(&serde_json::json!({ "input": patch })),
            None,
            Some("/w"),
            "c1",
        );
        assert_eq!(droid.len(), 2);
    }

    #[test]
    fn the_import_reads_calls_results_and_edits() {
        let t =
            OPENCODE.import_transcript(Path::new("x.json"), &fixture("opencode", "export.json"));
        let results: Vec<(ToolStatus, Option<i64>, Option<u64>)> = t
            .events
            .iter()
            .filter_map(|(_, e)| match e {
                EventBody::ToolResult(r) => Some((r.status, r.exit_code, r.duration_ms)),
                _ => None,
            })
            .collect();
        let codes: Vec<(ToolStatus, Option<i64>)> = results.iter().map(|r| (r.0, r.1)).collect();
        assert_eq!(
            codes,
            [
                (ToolStatus::Ok, Some(0)),
                (ToolStatus::Ok, None),
                (ToolStatus::Ok, None),
                (ToolStatus::Error, Some(3))
            ]
        );
        assert!(results.iter().all(|r| r.2.is_some()), "{results:?}");
        let edits: Vec<(&str, EditOp, Option<u64>, Option<u64>)> = t
            .events
            .iter()
            .filter_map(|(_, e)| match e {
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
        // Not an export: one damaged line, a session named after the file.
        let bad = OPENCODE.import_transcript(Path::new("/x/ses_9.json"), b"{");
        assert_eq!((bad.session.as_str(), bad.bad_lines), ("ses_9", 1));
    }

    #[test]
    fn places_and_the_registry() {
        let places = Places {
            home: Some(PathBuf::from("/h")),
            project: PathBuf::from("/p"),
            ..Places::default()
        };
        assert_eq!(
            Agent::OpenCode.settings_file(&places, Scope::User),
            Ok(PathBuf::from("/h/.config/opencode/plugin/tacho.js"))
        );
        assert_eq!(
            Agent::Kilo.settings_file(&places, Scope::Project),
            Ok(PathBuf::from("/p/.kilo/plugin/tacho.js"))
        );
        assert_eq!(
            Agent::Kilo.settings_file(&places, Scope::Local),
            Err(PlaceError::NoScope)
        );
        let xdg = Places {
            vars: [
                ("XDG_CONFIG_HOME".to_owned(), PathBuf::from("/c")),
                ("XDG_DATA_HOME".to_owned(), PathBuf::from("/d")),
            ]
            .into(),
            ..places.clone()
        };
        assert_eq!(
            Agent::Kilo.settings_file(&xdg, Scope::User),
            Ok(PathBuf::from("/c/kilo/plugin/tacho.js"))
        );
        // The plugin finds the database where the import looks for it.
        for (agent, adapter) in [(Agent::OpenCode, &OPENCODE), (Agent::Kilo, &KILO)] {
            let root = agent.import_root(&xdg).unwrap_or_default();
            let db = root.join(adapter.database);
            assert_eq!(db, PathBuf::from(format!("/d/{0}/{0}.db", agent.name())));
            assert!(agent.is_transcript(&db));
            assert!(!agent.is_transcript(&root.join("storage/session_diff/x.json")));
            assert_eq!(agent.installation(), Installation::PluginFile);
            assert!(!agent.reports_session_end());
        }
        assert_eq!(Agent::parse("kilocode"), Some(Agent::Kilo));
    }
}
