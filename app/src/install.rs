//! `tacho hooks install|uninstall|status`: tacho's hook entries in each agent's
//! settings file, merged in and taken out without touching anything else.
//!
//! A file that is not valid JSON is never rewritten. Writes are atomic (a temporary
//! file beside it, synced, renamed), keep the file's owner, mode and every value as
//! written, and the previous file is kept as `<name>.tacho-backup`. How links are
//! treated (a repository's refused, a user's followed and said) is
//! [`crate::userfile`]'s.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tacho_agents::Agent;
use tacho_agents::settings::{self, SettingsError};

use crate::error::{ErrorKind, Field, Kind, Namer, neutral};
use crate::userfile::{Owner, SettingsFile, UserFileError};

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
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "user" => Some(Scope::User),
            "project" => Some(Scope::Project),
            "local" => Some(Scope::Local),
            _ => None,
        }
    }
}

/// The places settings files are looked for: the environment, given by the caller.
#[derive(Debug, Clone, Default)]
pub struct Places {
    pub home: Option<PathBuf>,
    /// `CLAUDE_CONFIG_DIR`.
    pub claude_config_dir: Option<PathBuf>,
    /// `CODEX_HOME`.
    pub codex_home: Option<PathBuf>,
    /// The project: the Git work tree holding the current directory, else it.
    pub project: PathBuf,
}

impl Places {
    /// From the process environment and the current directory.
    pub fn from_env() -> std::io::Result<Places> {
        let cwd = std::env::current_dir()?;
        let project = cwd
            .ancestors()
            .find(|d| d.join(".git").exists())
            .map_or_else(|| cwd.clone(), Path::to_path_buf);
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Ok(Places {
            home: var("HOME").or_else(dirs::home_dir),
            claude_config_dir: var("CLAUDE_CONFIG_DIR"),
            codex_home: var("CODEX_HOME"),
            project,
        })
    }

    /// The settings file of `agent` at `scope`.
    pub fn settings_file(&self, agent: Agent, scope: Scope) -> Result<PathBuf, InstallError> {
        let home = || self.home.clone().ok_or(InstallError::NoHome);
        Ok(match (agent, scope) {
            (Agent::ClaudeCode, Scope::User) => match &self.claude_config_dir {
                Some(d) => d.join("settings.json"),
                None => home()?.join(".claude").join("settings.json"),
            },
            (Agent::ClaudeCode, Scope::Project) => {
                self.project.join(".claude").join("settings.json")
            }
            (Agent::ClaudeCode, Scope::Local) => {
                self.project.join(".claude").join("settings.local.json")
            }
            (Agent::Codex, Scope::User) => match &self.codex_home {
                Some(d) => d.join("hooks.json"),
                None => home()?.join(".codex").join("hooks.json"),
            },
            (Agent::Codex, Scope::Project) => self.project.join(".codex").join("hooks.json"),
            (Agent::Codex, Scope::Local) => return Err(InstallError::NoLocalScope),
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("no home directory (set HOME)")]
    NoHome,
    #[error("{}", neutral(self))]
    NoLocalScope,
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the path of this tacho is not UTF-8: {0}")]
    ExePath(PathBuf),
    #[error(transparent)]
    File(#[from] UserFileError),
}

impl Kind for InstallError {
    fn kind(&self) -> ErrorKind {
        match self {
            InstallError::Settings(_) | InstallError::NoLocalScope => ErrorKind::Input,
            InstallError::NoHome | InstallError::Io { .. } | InstallError::ExePath(_) => {
                ErrorKind::Io
            }
            InstallError::File(e) => e.kind(),
        }
    }

    fn field(&self) -> Option<Field> {
        match self {
            InstallError::NoLocalScope => Some(Field::Scope),
            InstallError::File(e) => e.field(),
            _ => None,
        }
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        match self {
            InstallError::NoLocalScope => {
                let scope = name.field(Field::Scope);
                write!(
                    f,
                    "codex has no local scope: use {scope} user or {scope} project"
                )
            }
            InstallError::File(e) => e.fmt_named(f, name),
            other => fmt::Display::fmt(other, f),
        }
    }
}

/// Which of the two an [`Installed`] answers: its record's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HooksOp {
    HooksInstall,
    HooksUninstall,
}

/// What install or uninstall did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Serialize)]
pub struct Installed {
    #[serde(rename = "type")]
    pub kind: HooksOp,
    pub agent: &'static str,
    pub scope: Scope,
    pub file: PathBuf,
    pub changed: bool,
    pub dry_run: bool,
    /// The command the hooks run.
    pub command: String,
    pub events: Vec<String>,
    /// The previous file, kept.
    pub backup: Option<PathBuf>,
    /// The file written when `file` is a link (the user's own, to a regular file): its
    /// target.
    pub written_through: Option<PathBuf>,
    /// The file's text after the change.
    #[serde(skip)]
    pub text: String,
    pub note: Option<String>,
}

/// One settings file's state.
#[derive(Debug, Clone, Serialize)]
pub struct HookStatus {
    pub agent: &'static str,
    pub scope: Scope,
    pub file: PathBuf,
    pub exists: bool,
    /// Events with a tacho handler.
    pub events: Vec<String>,
    /// The tacho programs the handlers run.
    pub commands: Vec<String>,
    /// Whether every handler runs this tacho.
    pub points_here: bool,
    /// Whether every installed program exists.
    pub programs_exist: bool,
    pub problem: Option<String>,
}

/// `tacho hooks status`: the tacho hooks should run, and every settings file's state.
/// The `hooks_status` record.
#[derive(Debug, Clone, Serialize)]
pub struct HooksStatus {
    /// This tacho (what an install would make the hooks run).
    pub tacho: String,
    pub files: Vec<HookStatus>,
}

/// Whose the settings file of `scope` is: the user's, or the project's repository's.
fn owner(places: &Places, scope: Scope) -> Owner<'_> {
    match scope {
        Scope::User => Owner::User,
        Scope::Project | Scope::Local => Owner::Repository(&places.project),
    }
}

fn codex_note(agent: Agent) -> Option<String> {
    (agent == Agent::Codex).then(|| {
        "Codex asks you to trust new or changed hooks before it runs them: start codex once and approve tacho's hooks (review them with /hooks)".to_string()
    })
}

/// The program path hooks should run: this tacho.
pub fn this_tacho() -> Result<String, InstallError> {
    let exe = std::env::current_exe().map_err(|source| InstallError::Io {
        path: PathBuf::from("/proc/self/exe"),
        source,
    })?;
    exe.to_str()
        .map(str::to_owned)
        .ok_or_else(|| InstallError::ExePath(exe.clone()))
}

/// What an edit of a settings file did.
struct Edited {
    file: PathBuf,
    changed: bool,
    backup: Option<PathBuf>,
    written_through: Option<PathBuf>,
    text: String,
}

/// Reads the settings file of `agent` at `scope`, applies `edit` (which says whether
/// it changed anything) and, unless `dry_run`, writes a changed file back with a
/// backup. A file that is not JSON is refused before anything is written.
fn edit_settings(
    places: &Places,
    agent: Agent,
    scope: Scope,
    dry_run: bool,
    edit: impl FnOnce(
        &str,
        &mut serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, SettingsError>,
) -> Result<Edited, InstallError> {
    let file = places.settings_file(agent, scope)?;
    let name = file.display().to_string();
    let current = SettingsFile::read(&file, owner(places, scope))?;
    let mut s = settings::parse(&name, current.text())?;
    let changed = edit(&name, &mut s)?;
    let text = settings::render(&s)?;
    let backup = if changed && !dry_run {
        current.replace(&text)?
    } else {
        None
    };
    Ok(Edited {
        file,
        changed,
        backup,
        written_through: current.written_through().map(Path::to_path_buf),
        text,
    })
}

/// Merges tacho's hooks for `agent` into the settings file at `scope` (with `watch`,
/// hooks that keep a watcher of the session's workspace running).
pub fn install_hooks(
    places: &Places,
    agent: Agent,
    scope: Scope,
    tacho: &str,
    dry_run: bool,
    watch: bool,
) -> Result<Installed, InstallError> {
    let command = settings::command_for(tacho, agent, watch);
    let e = edit_settings(places, agent, scope, dry_run, |name, s| {
        settings::install(name, s, agent, &command)
    })?;
    Ok(Installed {
        kind: HooksOp::HooksInstall,
        agent: agent.name(),
        scope,
        file: e.file,
        changed: e.changed,
        dry_run,
        command,
        events: settings::events(agent)
            .iter()
            .map(|(e, _, _)| (*e).to_owned())
            .collect(),
        backup: e.backup,
        written_through: e.written_through,
        text: e.text,
        note: codex_note(agent),
    })
}

/// Takes tacho's hooks for `agent` out of the settings file at `scope`.
pub fn uninstall_hooks(
    places: &Places,
    agent: Agent,
    scope: Scope,
    dry_run: bool,
) -> Result<Installed, InstallError> {
    let mut before = Vec::new();
    let e = edit_settings(places, agent, scope, dry_run, |name, s| {
        before = settings::installed(s, agent);
        Ok(settings::uninstall(name, s, agent)? > 0)
    })?;
    Ok(Installed {
        kind: HooksOp::HooksUninstall,
        agent: agent.name(),
        scope,
        file: e.file,
        changed: e.changed,
        dry_run,
        command: String::new(),
        events: before.into_iter().map(|(e, _)| e).collect(),
        backup: e.backup,
        written_through: e.written_through,
        text: e.text,
        note: None,
    })
}

/// What is installed where, for every agent and scope, against `tacho` (the program
/// hooks should run: [`this_tacho`]).
pub fn hooks_status(places: &Places, tacho: &str) -> HooksStatus {
    let mut out = Vec::new();
    for agent in [Agent::ClaudeCode, Agent::Codex] {
        for scope in [Scope::User, Scope::Project, Scope::Local] {
            let Ok(file) = places.settings_file(agent, scope) else {
                continue;
            };
            let name = file.display().to_string();
            let (text, exists) = match SettingsFile::read(&file, owner(places, scope)) {
                Ok(f) => {
                    let exists = f.exists();
                    (f.into_text(), exists)
                }
                Err(e) => {
                    out.push(HookStatus {
                        agent: agent.name(),
                        scope,
                        file,
                        exists: true,
                        events: Vec::new(),
                        commands: Vec::new(),
                        points_here: false,
                        programs_exist: false,
                        problem: Some(e.to_string()),
                    });
                    continue;
                }
            };
            let (found, problem) = match settings::parse(&name, &text) {
                Ok(s) => (settings::installed(&s, agent), None),
                Err(e) => (Vec::new(), Some(e.to_string())),
            };
            let mut commands: Vec<String> = found.iter().map(|(_, p)| p.clone()).collect();
            commands.sort();
            commands.dedup();
            out.push(HookStatus {
                agent: agent.name(),
                scope,
                file,
                exists,
                events: found.iter().map(|(e, _)| e.clone()).collect(),
                points_here: !commands.is_empty() && commands.iter().all(|c| c == tacho),
                programs_exist: commands.iter().all(|c| Path::new(c).is_file()),
                commands,
                problem,
            });
        }
    }
    HooksStatus {
        tacho: tacho.to_owned(),
        files: out,
    }
}
