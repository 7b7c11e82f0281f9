//! Codex: hooks in `hooks.json` (user: `$CODEX_HOME` or `~/.codex`; project:
//! `.codex/hooks.json`; no local scope), Claude Code's payload envelope but results
//! without exit codes (the rollout holds them), no `SessionEnd` (a stop the gate lets
//! through ends the session), a `Stop` hook that must print JSON, and rollouts under
//! `$CODEX_HOME/sessions` with cumulative token counts.

use std::path::{Path, PathBuf};

use crate::adapter::{Adapter, HookEvent, PlaceError, Places, Scope};
use crate::import::{Transcript, read_codex_rollout};
use crate::transcript::{Caught, Cursor};

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
        Ok(match scope {
            Scope::User => places.config_dir(HOME_VAR, ".codex")?.join("hooks.json"),
            Scope::Project => places.project.join(".codex").join("hooks.json"),
            Scope::Local => return Err(PlaceError::NoScope),
        })
    }

    fn hook_events(&self) -> &'static [HookEvent] {
        &[
            ("SessionStart", None, 10),
            ("UserPromptSubmit", None, 10),
            ("PreToolUse", Some("*"), 30),
            ("PostToolUse", Some("*"), 30),
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

    fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError> {
        Ok(places.config_dir(HOME_VAR, ".codex")?.join("sessions"))
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
