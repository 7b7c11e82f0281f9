//! `tacho hooks install|uninstall|status` for an agent whose hooks are executables
//! named after its events ([`Installation::EventExecutables`]: Cline): one small
//! script of tacho's per event in the agent's hooks directory.
//!
//! The scripts go through [`crate::userfile`] like every settings file (created
//! exclusively beside their name and renamed over it, never through a link a
//! repository put on the way; in the user's scope a linked hooks directory is the
//! user's own and is followed, as a linked settings file is). A file at an event's name
//! that is not tacho's script ([`tacho_agents::executables::tacho_script`]) is the
//! user's hook: install refuses before writing anything, naming it; uninstall leaves it.
//! A link at an event's name is never tacho's and is refused.
//!
//! [`Installation::EventExecutables`]: tacho_agents::adapter::Installation::EventExecutables

use std::path::{Path, PathBuf};

use tacho_agents::Agent;
use tacho_agents::executables::{script_for, tacho_script};
use tacho_agents::settings::command_for;

use crate::install::{
    HookStatus, HooksOp, InstallError, Installed, Places, Scope, owner, settings_file,
};
use crate::userfile::{SettingsFile, UserFileError};

/// The mode of a new script: executable by everyone, written by its owner.
const SCRIPT_MODE: u32 = 0o755;

/// Each event's file in `dir`, read (links refused).
fn read_all(
    places: &Places,
    agent: Agent,
    scope: Scope,
    dir: &Path,
) -> Result<Vec<(&'static str, PathBuf, SettingsFile)>, InstallError> {
    let mut out = Vec::new();
    for (event, _, _) in agent.hook_events() {
        let path = dir.join(event);
        let f = SettingsFile::read(&path, owner(places, scope))?;
        if f.written_through().is_some() {
            return Err(UserFileError::Refused {
                path,
                why: "is a symbolic link, not a hook script tacho wrote; tacho neither follows nor replaces it (remove it, or move it away, and run the command again)".into(),
            }
            .into());
        }
        out.push((*event, path, f));
    }
    Ok(out)
}

/// Writes tacho's script for every event of `agent` in its hooks directory at
/// `scope`, after checking that no event's name holds a file of the user's.
pub(crate) fn install(
    places: &Places,
    agent: Agent,
    scope: Scope,
    tacho: &str,
    dry_run: bool,
    watch: tacho_agents::settings::HookWatch,
) -> Result<Installed, InstallError> {
    let dir = settings_file(places, agent, scope)?;
    let files = read_all(places, agent, scope, &dir)?;
    let mut writes = Vec::new();
    let mut text = String::new();
    for (event, path, f) in &files {
        if f.exists() && tacho_script(f.text(), agent, event).is_none() {
            return Err(UserFileError::Refused {
                path: path.clone(),
                why: format!(
                    "is a {event} hook of your own, not tacho's script: tacho neither replaces nor removes it, and installed nothing (move it away, or run it from a differently named hook file such as {event}.sh, and run the command again)"
                ),
            }
            .into());
        }
        let script = script_for(tacho, agent, watch, event);
        text.push_str(&format!("--- {}\n{script}", path.display()));
        if f.text() != script || !f.exists() {
            writes.push((f, script));
        }
    }
    if !dry_run {
        for (f, script) in &writes {
            f.replace_own(script, SCRIPT_MODE)?;
        }
    }
    Ok(Installed {
        kind: HooksOp::HooksInstall,
        agent: agent.name(),
        scope,
        file: dir,
        changed: !writes.is_empty(),
        dry_run,
        command: command_for(tacho, agent, watch),
        events: files.iter().map(|(e, _, _)| (*e).to_owned()).collect(),
        backup: None,
        written_through: None,
        text,
        note: agent.install_note_for(scope).map(str::to_owned),
    })
}

/// Removes tacho's scripts of `agent` from its hooks directory at `scope`; every
/// other file stays.
pub(crate) fn uninstall(
    places: &Places,
    agent: Agent,
    scope: Scope,
    dry_run: bool,
) -> Result<Installed, InstallError> {
    let dir = settings_file(places, agent, scope)?;
    let files = read_all(places, agent, scope, &dir)?;
    let ours: Vec<&(&str, PathBuf, SettingsFile)> = files
        .iter()
        .filter(|(e, _, f)| f.exists() && tacho_script(f.text(), agent, e).is_some())
        .collect();
    // What the directory holds after: tacho's scripts gone, the user's files kept.
    let mut text = String::new();
    for (_, path, f) in &files {
        if !f.exists() {
            continue;
        }
        let what = if ours.iter().any(|(_, p, _)| p == path) {
            "tacho's script: removed"
        } else {
            "not tacho's: kept"
        };
        text.push_str(&format!("--- {} ({what})\n", path.display()));
    }
    if !dry_run {
        for (_, _, f) in &ours {
            f.remove_own()?;
        }
    }
    Ok(Installed {
        kind: HooksOp::HooksUninstall,
        agent: agent.name(),
        scope,
        file: dir,
        changed: !ours.is_empty(),
        dry_run,
        command: String::new(),
        events: ours.iter().map(|(e, _, _)| (*e).to_owned()).collect(),
        backup: None,
        written_through: None,
        text,
        note: None,
    })
}

/// The state of `agent`'s hooks directory at `scope`: the events with tacho's script
/// and the tacho paths they run.
pub(crate) fn status(
    places: &Places,
    agent: Agent,
    scope: Scope,
    file: PathBuf,
    tacho: &str,
) -> HookStatus {
    let mut st = HookStatus {
        agent: agent.name(),
        scope,
        exists: file.is_dir(),
        file: file.clone(),
        events: Vec::new(),
        commands: Vec::new(),
        points_here: false,
        programs_exist: false,
        cannot_fire: Vec::new(),
        problem: None,
    };
    match read_all(places, agent, scope, &file) {
        Ok(files) => {
            for (event, _, f) in &files {
                if let Some(t) = f
                    .exists()
                    .then(|| tacho_script(f.text(), agent, event))
                    .flatten()
                {
                    st.events.push((*event).to_owned());
                    st.commands.push(t);
                }
            }
        }
        Err(e) => st.problem = Some(e.to_string()),
    }
    st.commands.sort();
    st.commands.dedup();
    st.points_here = !st.commands.is_empty() && st.commands.iter().all(|c| c == tacho);
    st.programs_exist = st.commands.iter().all(|c| Path::new(c).is_file());
    st
}
