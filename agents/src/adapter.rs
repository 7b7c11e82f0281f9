//! The seam between tacho and one coding agent: everything tacho knows about an
//! agent is one [`Adapter`], in a module of its own ([`crate::claude_code`],
//! [`crate::codex`]); the hook, install, status, uninstall and import paths ask the
//! adapter and never which agent it is (as jj's `trait Backend`).
//!
//! An adapter is a unit struct with a `&'static` instance; [`crate::Agent`] is a
//! `Copy` handle on it, and [`crate::Agent::ALL`] is the registry: the one list of the
//! agents tacho records (the command line's agent names, `tacho hooks status`, the
//! hook state directories are all read from it).
//!
//! What an agent must say ([`Adapter`]'s required methods): its name, where its
//! settings file is per scope, the hook events tacho registers, and how a transcript
//! is imported. What it may
//! say (the provided methods, whose defaults are Claude Code's conventions, which
//! Codex, Gemini CLI, Qwen Code, Factory Droid and Copilot's PascalCase hooks share):
//! aliases, its configuration-directory variables, its scopes, how tacho's entries are
//! installed, a note after installing, how a payload is read (an agent whose payload
//! or event names differ turns them into the shared vocabulary there), which tools can
//! change files, whether its tool results wait for its transcript, how a stop is
//! refused and let through, whether it reports the end of a session, and how its live
//! transcript is read for token usage.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use crate::hook::{HookPayload, PayloadError, ToolKind};
use crate::import::Transcript;
use crate::transcript::{Caught, Cursor};

/// Where a settings file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The user's own settings (every project).
    User,
    /// The project's shared settings (committed).
    Project,
    /// The project's settings for this machine only (Claude Code's
    /// `settings.local.json`).
    Local,
}

impl Scope {
    /// Every scope, in the order `tacho hooks status` lists them.
    pub const ALL: [Scope; 3] = [Scope::User, Scope::Project, Scope::Local];

    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "user" => Some(Scope::User),
            "project" => Some(Scope::Project),
            "local" => Some(Scope::Local),
            _ => None,
        }
    }

    /// The word on the command line (`--scope <name>`).
    pub fn name(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project => "project",
            Scope::Local => "local",
        }
    }
}

/// The places settings files and transcripts are looked for: the environment, given
/// by the caller.
#[derive(Debug, Clone, Default)]
pub struct Places {
    pub home: Option<PathBuf>,
    /// The project: the Git work tree holding the current directory, else it.
    pub project: PathBuf,
    /// No Git work tree holds the current directory: `project` is only the current
    /// directory, no project's settings.
    pub outside_work_tree: bool,
    /// The (non-empty) values of the variables the adapters name
    /// ([`Adapter::env_vars`], like `CLAUDE_CONFIG_DIR` or `CODEX_HOME`).
    pub vars: BTreeMap<String, PathBuf>,
}

impl Places {
    /// From the process environment and the current directory: `HOME` and every
    /// variable an agent of the registry names.
    pub fn from_env() -> std::io::Result<Places> {
        let cwd = std::env::current_dir()?;
        let work_tree = cwd
            .ancestors()
            .find(|d| d.join(".git").exists())
            .map(Path::to_path_buf);
        let outside_work_tree = work_tree.is_none();
        let project = work_tree.unwrap_or_else(|| cwd.clone());
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let vars = crate::Agent::ALL
            .iter()
            .flat_map(|a| a.env_vars())
            .filter_map(|k| Some(((*k).to_owned(), var(k)?)))
            .collect();
        Ok(Places {
            home: var("HOME").or_else(dirs::home_dir),
            project,
            outside_work_tree,
            vars,
        })
    }

    /// An environment variable's value, if set and not empty.
    pub fn var(&self, name: &str) -> Option<&Path> {
        self.vars.get(name).map(PathBuf::as_path)
    }

    /// The settings file `file` of an agent whose user scope is `<config dir>/file`
    /// (the directory `$<var>` when `var` names a set variable, else `~/<dir>`) and whose
    /// project scope is `<project>/<dir>/file`, with no local scope.
    pub fn user_and_project_file(
        &self,
        scope: Scope,
        var: Option<&str>,
        dir: &str,
        file: &str,
    ) -> Result<PathBuf, PlaceError> {
        Ok(match scope {
            Scope::User => match var {
                Some(v) => self.config_dir(v, dir)?,
                None => self.home.as_ref().ok_or(PlaceError::NoHome)?.join(dir),
            }
            .join(file),
            Scope::Project => self.project.join(dir).join(file),
            Scope::Local => return Err(PlaceError::NoScope),
        })
    }

    /// `$<var>`, else `~/<dir>`: an agent's configuration directory.
    pub fn config_dir(&self, var: &str, dir: &str) -> Result<PathBuf, PlaceError> {
        match self.var(var) {
            Some(d) => Ok(d.to_path_buf()),
            None => Ok(self.home.as_ref().ok_or(PlaceError::NoHome)?.join(dir)),
        }
    }
}

/// Why a settings file has no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error("no home directory (set HOME)")]
    NoHome,
    /// The agent has no settings file of this scope ([`Adapter::scopes`]).
    #[error("no settings file of this scope")]
    NoScope,
}

/// One hook event tacho registers: its name, the matcher it needs (tool events match
/// every tool) and a timeout in the agent's unit (seconds; Gemini CLI's milliseconds).
pub type HookEvent = (&'static str, Option<&'static str>, u64);

/// How tacho's hook is put into an agent's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installation {
    /// Entries in the `hooks` object of a JSON settings file, one group per event:
    /// `{"hooks": {"<Event>": [{"matcher": "…", "hooks": [{"type": "command",
    /// "command": "<tacho> hook <agent>", "timeout": N}]}]}}` (Claude Code's shape,
    /// which Codex, Gemini CLI, Qwen Code, Factory Droid and Copilot read too).
    /// [`crate::settings`] merges them in and takes them out.
    ///
    /// Another way of installing is a variant here, with its writer beside
    /// [`crate::settings`] and its branch in the app's install.
    HooksObject,
    /// Executables named after the events in a hooks directory (Cline): the
    /// "settings file" is that directory, and tacho's are small scripts of its own,
    /// `<dir>/<Event>`, each running `<tacho> hook <agent>`
    /// ([`crate::executables`] writes and recognises them). A file of that name that is
    /// not tacho's script is the user's: never replaced nor removed.
    EventExecutables,
    /// A plugin file of tacho's own (OpenCode, Kilo Code: a JavaScript module in the
    /// agent's plugin directory, [`Adapter::settings_file`]) that hands each event to
    /// `<tacho> hook <agent>` on stdin and maps the answer back. [`crate::plugin`]
    /// writes it and knows it again; the file is tacho's whole or not at all (a file
    /// there that is not tacho's plugin is never touched).
    PluginFile,
}

/// A conversation forked before a call ([`Adapter::fork_session`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fork {
    /// The new session file's bytes.
    pub bytes: Vec<u8>,
    /// Other calls of the model response the cut falls before, made before the call
    /// it was asked for (a response with several calls is cut whole): the fork drops
    /// them too.
    pub dropped_calls: Vec<String>,
}

/// One coding agent, as tacho records it. Implemented by a unit struct in the
/// agent's module; [`crate::Agent`] wraps a `&'static dyn Adapter`.
pub trait Adapter: Sync + std::fmt::Debug {
    // --- Its name ---

    /// The name used on the command line (`tacho hook <name>`), in recorded events
    /// (`session.start`'s `agent` and `source`), in hook state directories and in
    /// `tacho hooks status`. Never changes once released.
    fn name(&self) -> &'static str;

    /// Other names the command line accepts for it.
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }

    // --- Where its settings are, and how tacho's hooks go in ---

    /// The environment variables naming its configuration directory, read into
    /// [`Places::vars`] (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`).
    fn env_vars(&self) -> &'static [&'static str] {
        &[]
    }

    /// The scopes it has a settings file for.
    fn scopes(&self) -> &'static [Scope] {
        &[Scope::User, Scope::Project]
    }

    /// Its settings file at `scope` ([`PlaceError::NoScope`] for a scope not in
    /// [`Adapter::scopes`]).
    fn settings_file(&self, places: &Places, scope: Scope) -> Result<PathBuf, PlaceError>;

    /// How tacho's hook is installed.
    fn installation(&self) -> Installation {
        Installation::HooksObject
    }

    /// The settings file is tacho's own (a file of the agent's hooks directory named
    /// for tacho): an uninstall that leaves it empty removes it, backup and all.
    fn settings_file_is_tachos(&self) -> bool {
        false
    }

    /// The hook events tacho registers.
    fn hook_events(&self) -> &'static [HookEvent];

    /// What to tell the user after installing (a trust prompt to answer, say).
    fn install_note(&self) -> Option<&'static str> {
        None
    }

    /// What to tell the user after installing at `scope` (Copilot: repository hooks
    /// load in `-p` mode only in a trusted folder); [`Adapter::install_note`] by default.
    fn install_note_for(&self, scope: Scope) -> Option<&'static str> {
        let _ = scope;
        self.install_note()
    }

    // --- Its hook payloads ---

    /// Reads one payload into the shared vocabulary [`crate::hook::map_payload`] maps:
    /// Claude Code's envelope and event names (`SessionStart`, `PreToolUse`,
    /// `PostToolUse`, `Stop`, `SessionEnd`, …). An agent with other field or event
    /// names (Gemini CLI's `BeforeTool`/`AfterAgent`, Copilot's camelCase, Cline's
    /// `taskId`) renames them here. A tool event without a call id is paired with
    /// the oldest open call of the same tool and input, else the latest (as
    /// `map_payload` does).
    fn parse_payload(&self, bytes: &[u8]) -> Result<HookPayload, PayloadError> {
        HookPayload::parse(bytes)
    }

    /// What a tool call can change: nothing, these files (targeted snapshots), or
    /// anything (a full snapshot before and after it). The default knows Claude
    /// Code's tools and Codex's (`apply_patch`, its read-only tools); an agent whose
    /// tools have other names says which of its tools write which files.
    fn tool_kind(&self, tool: &str, input: Option<&Value>) -> ToolKind {
        crate::hook::tool_kind(tool, input)
    }

    /// Whether its tool results lack what its transcript holds (Codex: a shell's exit
    /// code and full output are in the rollout only). Then the transcript is read
    /// before each payload is mapped, and a `PostToolUse` whose call output the
    /// transcript does not hold yet is recorded later (at the next event, or at the
    /// stop), its snapshot taken at once.
    fn results_from_transcript(&self) -> bool {
        false
    }

    /// Whether its transcript names every tool call it makes by the id its hooks
    /// report (Claude Code's `tool_use` blocks): then a call the hooks reported that
    /// the transcript never names — a payload piped to `tacho hook` from its shell —
    /// is recorded as unconfirmed at its stop, and never counts as verification.
    fn transcript_confirms_calls(&self) -> bool {
        false
    }

    /// Whether it writes its last replies to its transcript after its last hook
    /// (Copilot CLI buffers the file until it exits; Qwen Code writes the reply it
    /// stops after concurrently with its `Stop` hook): then the session's end waits
    /// until the transcript stopped growing, so that their usage is counted.
    fn writes_transcript_late(&self) -> bool {
        false
    }

    /// Whether a failing tool fires its post-tool hook. One whose failures fire none
    /// (Factory Droid) has them read from its transcript ([`Adapter::read_transcript`]'s
    /// `outputs`, keyed by the hook's call ids): an open call whose output it holds is
    /// recorded as failed at the next event.
    fn failed_calls_fire_post_hook(&self) -> bool {
        true
    }

    // --- Its transcripts ---

    /// Reads what its live transcript (the payload's `transcript_path`) gained since
    /// `cursor`: token usage once per model response, and call outputs where
    /// [`Adapter::results_from_transcript`]. By default a transcript of JSON lines
    /// whose usage [`crate::transcript::usage_of`] reads (Claude Code's, Qwen Code's,
    /// Copilot's).
    fn read_transcript(
        &self,
        cursor: &mut Cursor,
        path: &Path,
        finish: bool,
    ) -> std::io::Result<Caught> {
        cursor.catch_up(path, finish, false)
    }

    /// Where `tacho import <agent>` looks without paths (every `*.jsonl` under it).
    fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError>;

    /// Every place `tacho import <agent>` looks without paths: its
    /// [`Adapter::import_root`], and others the agent keeps sessions in (Codex's
    /// `archived_sessions`); the caller skips those that do not exist.
    fn import_roots(&self, places: &Places) -> Result<Vec<PathBuf>, PlaceError> {
        Ok(vec![self.import_root(places)?])
    }

    /// Whether a file found under a directory given to `tacho import` (or under
    /// [`Adapter::import_root`]) is one of its transcripts: `*.jsonl` by default (an
    /// agent that also wrote whole JSON documents, like Gemini CLI once, says so).
    fn is_transcript(&self, path: &Path) -> bool {
        path.extension().is_some_and(|e| e == "jsonl")
    }

    /// A file of this agent's that tacho does not read, with the format it reads
    /// instead (issue 43: Cline's VS Code task folders were imported as "1 unchanged"):
    /// `tacho import` reports it as a failure and reads nothing of it. `listed`: the
    /// file was found under a directory (one file per unread folder is enough), not
    /// named.
    fn unread_format(&self, _path: &Path, _listed: bool) -> Option<String> {
        None
    }

    /// One whole transcript, read for `tacho import` (each event with its dedup key).
    fn import_transcript(&self, path: &Path, bytes: &[u8]) -> Transcript;

    /// The sessions one file found for `tacho import` holds: by default the one
    /// transcript it is ([`Adapter::import_transcript`] on its bytes, read without
    /// blocking, a regular file only). An agent that keeps every session in one
    /// database (OpenCode's SQLite) reads them all here.
    fn import_file(&self, path: &Path) -> std::io::Result<Vec<Transcript>> {
        let bytes = crate::transcript::read_transcript_file(path)?;
        Ok(vec![self.import_transcript(path, &bytes)])
    }

    // --- Its stop, and its end ---

    /// What the hook prints to send the agent back to work when the completion gate
    /// refuses its stop; `None` for an agent whose stop cannot be refused (Cline's
    /// `TaskComplete`, OpenCode without a stop hook): the gate then only records.
    fn stop_block(&self, reason: &str) -> Option<String> {
        Some(serde_json::json!({"decision": "block", "reason": reason}).to_string() + "\n")
    }

    /// What the hook prints when it lets a stop through (Codex wants `{}`).
    fn stop_pass(&self) -> &'static str {
        ""
    }

    // --- Its conversation, forked for a rollback ---

    /// The agent's own file of session `session`'s conversation, which it can resume
    /// (`None`: the agent keeps none tacho can fork, or it is not there).
    fn session_file(&self, _places: &Places, _session: &str) -> Option<PathBuf> {
        None
    }

    /// The conversation of `bytes` (the agent's session file) up to just before the
    /// model response that made call `before_call`, as the file of a new session
    /// `new_id`: what `session rollback --conversation` writes beside the original,
    /// which it never changes.
    fn fork_session(
        &self,
        _bytes: &[u8],
        _before_call: &str,
        _new_id: &str,
    ) -> Result<Fork, String> {
        Err(format!(
            "{} keeps no conversation tacho can fork",
            self.name()
        ))
    }

    /// The file name of a forked session `new_id` beside `original` (the agent's own
    /// naming: Claude Code names a transcript by its session id).
    fn forked_file_name(&self, _original: &Path, new_id: &str) -> String {
        format!("{new_id}.jsonl")
    }

    /// The command that resumes session `id`, run in the workspace.
    fn resume_command(&self, _id: &str) -> Option<String> {
        None
    }

    /// Whether it reports a session's end (`SessionEnd`). One that does not (Codex)
    /// has its session ended by tacho when a stop is let through; a later turn
    /// continues as a new session `<id>.2`, whose parent that one is.
    fn reports_session_end(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Agent;
    use crate::hook::{Action, HookState, map_payload};
    use tacho_schema::EventBody;

    /// An agent shaped like Gemini CLI (other event names, tool names of its own, no
    /// call ids), outside the registry: its module alone makes the shared mapping
    /// record it.
    #[derive(Debug)]
    struct Shaped;

    impl Adapter for Shaped {
        fn name(&self) -> &'static str {
            "shaped"
        }
        fn settings_file(&self, places: &Places, _: Scope) -> Result<PathBuf, PlaceError> {
            Ok(places.project.join(".shaped/settings.json"))
        }
        fn hook_events(&self) -> &'static [HookEvent] {
            &[("BeforeTool", Some("*"), 30), ("AfterTool", Some("*"), 30)]
        }
        fn parse_payload(&self, bytes: &[u8]) -> Result<HookPayload, PayloadError> {
            let mut p = HookPayload::parse(bytes)?;
            p.hook_event_name = match p.hook_event_name.as_str() {
                "BeforeTool" => "PreToolUse".into(),
                "AfterTool" => "PostToolUse".into(),
                "AfterAgent" => "Stop".into(),
                other => other.into(),
            };
            Ok(p)
        }
        fn tool_kind(&self, tool: &str, input: Option<&Value>) -> ToolKind {
            match (tool, input.and_then(|i| i.get("file_path")?.as_str())) {
                ("write_file", Some(p)) => ToolKind::Files(vec![p.to_owned()]),
                ("read_file", _) => ToolKind::ReadOnly,
                _ => ToolKind::Anything,
            }
        }
        fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError> {
            places.config_dir("SHAPED_HOME", ".shaped")
        }
        fn import_transcript(&self, path: &Path, bytes: &[u8]) -> Transcript {
            crate::import::read_claude_transcript(path, bytes)
        }
        fn stop_block(&self, _: &str) -> Option<String> {
            None
        }
    }

    static SHAPED: Shaped = Shaped;

    #[test]
    fn an_agent_is_its_module_alone() {
        let agent = Agent(&SHAPED);
        assert_eq!(Agent::parse("shaped"), None, "not in the registry");
        let mut st = HookState::default();
        let mut map = |v: Value| {
            let p = agent
                .parse_payload(v.to_string().as_bytes())
                .unwrap_or_default();
            map_payload(agent, &p, &mut st)
        };
        let event = |name: &str, tool: &str, file: &str| {
            serde_json::json!({"session_id": "g-1", "cwd": "/w", "hook_event_name": name,
                "tool_name": tool, "tool_input": {"file_path": file}})
        };
        // No call ids: the result is paired with the call before it; the write is a
        // step with targeted snapshots; the read is no step.
        let a = map(event("BeforeTool", "write_file", "/w/a.txt"));
        let step = a.iter().find_map(|a| match a {
            Action::Snapshot {
                paths,
                before_step: Some(s),
                ..
            } => Some((paths.clone(), *s)),
            _ => None,
        });
        assert_eq!(step, Some((vec!["/w/a.txt".to_owned()], 1)), "{a:?}");
        let a = map(event("AfterTool", "write_file", "/w/a.txt"));
        assert!(
            a.iter().any(|a| matches!(
                a,
                Action::Event {
                    body: EventBody::StepFinish(_),
                    ..
                }
            )),
            "{a:?}"
        );
        let a = map(event("BeforeTool", "read_file", "/w/a.txt"));
        assert!(
            !a.iter().any(|a| matches!(
                a,
                Action::Event {
                    body: EventBody::StepStart(_),
                    ..
                }
            )),
            "{a:?}"
        );
        let gated = a
            .iter()
            .chain(&map(event("AfterAgent", "", "")))
            .any(|a| matches!(a, Action::Gate { .. }));
        assert!(gated, "its stop reaches the gate");
        assert_eq!(agent.stop_block("not done"), None);
        assert_eq!(
            Agent::ClaudeCode.stop_block("r").as_deref(),
            Some("{\"decision\":\"block\",\"reason\":\"r\"}\n")
        );
    }
}
