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
use tacho_agents::adapter::{Installation, PlaceError};
use tacho_agents::plugin;
use tacho_agents::settings::{self, SettingsError};

use crate::error::{ErrorKind, Field, Kind, Namer, neutral};
use crate::userfile::{Owner, SettingsFile, UserFileError};

/// Where a settings file is, and the places settings files are looked for (the
/// agents' own: [`tacho_agents::adapter`]).
pub use tacho_agents::adapter::{Places, Scope};

/// The settings file of `agent` at `scope`.
pub fn settings_file(places: &Places, agent: Agent, scope: Scope) -> Result<PathBuf, InstallError> {
    if scope != Scope::User && places.outside_work_tree {
        return Err(InstallError::NoWorkTree {
            dir: places.project.clone(),
            scope,
        });
    }
    agent.settings_file(places, scope).map_err(|e| match e {
        PlaceError::NoHome => InstallError::NoHome,
        PlaceError::NoScope => InstallError::NoScope { agent, scope },
    })
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("no home directory (set HOME)")]
    NoHome,
    /// The agent has no settings file of this scope.
    #[error("{}", neutral(self))]
    NoScope { agent: Agent, scope: Scope },
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
    /// A project's settings asked for outside any Git work tree.
    #[error(
        "{} is in no Git work tree: --scope {} writes a repository's settings; run it in the repository, or use --scope user",
        dir.display(),
        scope.name()
    )]
    NoWorkTree { dir: PathBuf, scope: Scope },
    #[error(transparent)]
    File(#[from] UserFileError),
}

impl Kind for InstallError {
    fn kind(&self) -> ErrorKind {
        match self {
            InstallError::Settings(_)
            | InstallError::NoScope { .. }
            | InstallError::NoWorkTree { .. } => ErrorKind::Input,
            InstallError::NoHome | InstallError::Io { .. } | InstallError::ExePath(_) => {
                ErrorKind::Io
            }
            InstallError::File(e) => e.kind(),
        }
    }

    fn field(&self) -> Option<Field> {
        match self {
            InstallError::NoScope { .. } => Some(Field::Scope),
            InstallError::File(e) => e.field(),
            _ => None,
        }
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        match self {
            InstallError::NoScope { agent, scope } => {
                let flag = name.field(Field::Scope);
                let scopes: Vec<String> = agent
                    .scopes()
                    .iter()
                    .map(|s| format!("{flag} {}", s.name()))
                    .collect();
                write!(
                    f,
                    "{agent} has no {} scope: use {}",
                    scope.name(),
                    scopes.join(" or ")
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
    /// Why the handlers installed cannot record what they should, as the agent reads
    /// its settings (all hooks disabled here or in another of its files, a matcher
    /// narrowed, a timeout shortened, an event without tacho's handler).
    pub cannot_fire: Vec<String>,
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
pub(crate) fn owner(places: &Places, scope: Scope) -> Owner<'_> {
    match scope {
        Scope::User => Owner::User,
        Scope::Project | Scope::Local => Owner::Repository(&places.project),
    }
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
    // A JSON settings file: the other ways of installing (tacho's hook scripts, its
    // plugin file) never come here: `install_hooks` and `uninstall_hooks` hand them to
    // `crate::hook_scripts` and the plugin's functions below.
    let file = settings_file(places, agent, scope)?;
    let name = file.display().to_string();
    let current = SettingsFile::read(&file, owner(places, scope))?;
    let mut s = settings::parse(&name, current.text())?;
    let changed = edit(&name, &mut s)?;
    let text = settings::render(&s)?;
    // tacho's own hooks file (Copilot's `tacho.json`) left empty is removed, not kept
    // as `{}` with a backup of tacho's hooks beside it.
    let own_and_empty = s.is_empty() && agent.settings_file_is_tachos();
    let backup = if changed && !dry_run && own_and_empty {
        current.remove_own()?;
        None
    } else if changed && !dry_run {
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

/// Merges tacho's hooks for `agent` into the settings file at `scope` (`watch`: when
/// the hooks start a watcher of the session's workspace).
pub fn install_hooks(
    places: &Places,
    agent: Agent,
    scope: Scope,
    tacho: &str,
    dry_run: bool,
    watch: settings::HookWatch,
) -> Result<Installed, InstallError> {
    let command = settings::command_for(tacho, agent, watch);
    match agent.installation() {
        Installation::HooksObject => {}
        Installation::EventExecutables => {
            return crate::hook_scripts::install(places, agent, scope, tacho, dry_run, watch);
        }
        Installation::PluginFile => {
            let argv = plugin::argv_for(tacho, agent, watch);
            return install_plugin(places, agent, scope, &argv, command, dry_run);
        }
    }
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
        events: event_names(agent),
        backup: e.backup,
        written_through: e.written_through,
        text: e.text,
        note: agent.install_note_for(scope).map(str::to_owned),
    })
}

/// Takes tacho's hooks for `agent` out of the settings file at `scope`.
pub fn uninstall_hooks(
    places: &Places,
    agent: Agent,
    scope: Scope,
    dry_run: bool,
) -> Result<Installed, InstallError> {
    match agent.installation() {
        Installation::HooksObject => {}
        Installation::EventExecutables => {
            return crate::hook_scripts::uninstall(places, agent, scope, dry_run);
        }
        Installation::PluginFile => return uninstall_plugin(places, agent, scope, dry_run),
    }
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

/// The names of the events tacho's hook hears from `agent`.
fn event_names(agent: Agent) -> Vec<String> {
    settings::events(agent)
        .iter()
        .map(|(e, _, _)| (*e).to_owned())
        .collect()
}

/// The mode of a new plugin file (the agent reads it; nobody runs it).
const PLUGIN_MODE: u32 = 0o644;

/// tacho's plugin file of `agent` at `scope`, read; refused when what is there is
/// not tacho's to write: a link (tacho never writes through a link it did not make) or
/// a file that is not its plugin (a user's own).
fn read_plugin(
    places: &Places,
    agent: Agent,
    scope: Scope,
) -> Result<(PathBuf, SettingsFile), InstallError> {
    let file = settings_file(places, agent, scope)?;
    let current = SettingsFile::read(&file, owner(places, scope))?;
    let why = if current.written_through().is_some() {
        Some(
            "is a symbolic link; tacho's plugin is a regular file of its own, and tacho never writes through a link it did not make (remove the link, and run the command again)",
        )
    } else if current.exists() && !plugin::is_tacho_plugin(current.text()) {
        Some(
            "is not tacho's plugin (its first line is not `// tacho-plugin v1 …`); tacho neither replaces nor removes it (move it away, and run the command again)",
        )
    } else {
        None
    };
    match why {
        Some(why) => Err(InstallError::File(UserFileError::Refused {
            path: file,
            why: why.to_owned(),
        })),
        None => Ok((file, current)),
    }
}

/// Writes tacho's plugin file for `agent` at `scope`, running `argv`.
fn install_plugin(
    places: &Places,
    agent: Agent,
    scope: Scope,
    argv: &[String],
    command: String,
    dry_run: bool,
) -> Result<Installed, InstallError> {
    let (file, current) = read_plugin(places, agent, scope)?;
    let text = plugin::render(agent, argv);
    let changed = current.text() != text;
    if changed && !dry_run {
        current.replace_own(&text, PLUGIN_MODE)?;
    }
    Ok(Installed {
        kind: HooksOp::HooksInstall,
        agent: agent.name(),
        scope,
        file,
        changed,
        dry_run,
        command,
        events: event_names(agent),
        backup: None,
        written_through: None,
        text,
        note: agent.install_note_for(scope).map(str::to_owned),
    })
}

/// Removes tacho's plugin file for `agent` at `scope` (only tacho's own).
fn uninstall_plugin(
    places: &Places,
    agent: Agent,
    scope: Scope,
    dry_run: bool,
) -> Result<Installed, InstallError> {
    let (file, current) = read_plugin(places, agent, scope)?;
    let ours = plugin::installed(current.text(), agent).is_some();
    if ours && !dry_run {
        current.remove_own()?;
    }
    Ok(Installed {
        kind: HooksOp::HooksUninstall,
        agent: agent.name(),
        scope,
        file,
        changed: ours,
        dry_run,
        command: String::new(),
        events: if ours { event_names(agent) } else { Vec::new() },
        backup: None,
        written_through: None,
        text: String::new(),
        note: None,
    })
}

/// What is installed where, for every agent and scope, against `tacho` (the program
/// hooks should run: [`this_tacho`]).
pub fn hooks_status(places: &Places, tacho: &str) -> HooksStatus {
    let mut out = Vec::new();
    let mut disabled: Vec<(&'static str, String)> = Vec::new();
    for &agent in Agent::ALL {
        for &scope in agent.scopes() {
            let Ok(file) = settings_file(places, agent, scope) else {
                continue;
            };
            if agent.installation() == Installation::EventExecutables {
                out.push(crate::hook_scripts::status(
                    places, agent, scope, file, tacho,
                ));
                continue;
            }
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
                        cannot_fire: Vec::new(),
                        problem: Some(e.to_string()),
                    });
                    continue;
                }
            };
            let mut cannot_fire = Vec::new();
            let (found, problem) = match agent.installation() {
                Installation::HooksObject => match settings::parse(&name, &text) {
                    Ok(s) => {
                        cannot_fire = settings::firing_problems(&s, agent);
                        if s.get("disableAllHooks")
                            .and_then(serde_json::Value::as_bool)
                            == Some(true)
                        {
                            disabled.push((agent.name(), name.clone()));
                        }
                        (settings::installed(&s, agent), None)
                    }
                    Err(e) => (Vec::new(), Some(e.to_string())),
                },
                // (Reported by `hook_scripts::status` above.)
                Installation::EventExecutables => (Vec::new(), None),
                Installation::PluginFile => match plugin::installed(&text, agent) {
                    Some(argv) => {
                        let program = argv.first().cloned().unwrap_or_default();
                        let found = event_names(agent)
                            .into_iter()
                            .map(|e| (e, program.clone()))
                            .collect();
                        (found, None)
                    }
                    None if exists => (
                        Vec::new(),
                        Some(format!("{name}: not tacho's plugin (left as it is)")),
                    ),
                    None => (Vec::new(), None),
                },
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
                cannot_fire,
                problem,
            });
        }
    }
    // All hooks disabled in one of an agent's files (a cloned project's
    // `settings.local.json`, say) silences its handlers in every other.
    for f in out.iter_mut().filter(|f| !f.events.is_empty()) {
        for (agent, file) in &disabled {
            let why = format!("`disableAllHooks` is true in {file}: the agent runs no hook");
            if *agent == f.agent
                && *file != f.file.display().to_string()
                && !f.cannot_fire.contains(&why)
            {
                f.cannot_fire.push(why);
            }
        }
    }
    HooksStatus {
        tacho: tacho.to_owned(),
        files: out,
    }
}
