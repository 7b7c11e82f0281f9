//! Claude Code: hooks in `settings.json` (user: `$CLAUDE_CONFIG_DIR` or `~/.claude`;
//! project: `.claude/settings.json`; local: `.claude/settings.local.json`), the
//! payloads [`crate::hook`] maps as they are, a JSONL transcript with one usage per
//! model response, and transcripts under `projects/` in its configuration directory.

use std::path::{Path, PathBuf};

use crate::adapter::{Adapter, HookEvent, PlaceError, Places, Scope};
use crate::import::{Transcript, read_claude_transcript};
use crate::transcript::{Caught, Cursor};

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

    fn read_transcript(
        &self,
        cursor: &mut Cursor,
        path: &Path,
        finish: bool,
    ) -> std::io::Result<Caught> {
        cursor.catch_up(path, finish, false)
    }

    fn import_root(&self, places: &Places) -> Result<PathBuf, PlaceError> {
        Ok(places
            .config_dir(CONFIG_DIR_VAR, ".claude")?
            .join("projects"))
    }

    fn import_transcript(&self, path: &Path, bytes: &[u8]) -> Transcript {
        read_claude_transcript(path, bytes)
    }
}
