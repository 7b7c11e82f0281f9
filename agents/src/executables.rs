//! tacho's hook scripts for an agent that runs executables named after its hook
//! events ([`crate::adapter::Installation::EventExecutables`]: Cline): the text of
//! each, and how one is told from a user's own file of the same name.
//!
//! A script is tacho's when its text is exactly what [`script`] writes for some tacho
//! path (and the agent): a shebang, tacho's marker line, a comment naming the event
//! and `exec <tacho> hook <agent>`. Anything else at that name is the user's hook,
//! which tacho neither replaces nor removes. The files themselves are written by the
//! application layer, with the safe writer every settings file goes through.

use crate::Agent;
use crate::settings::{HookWatch, command_for, tacho_command};

/// The line that marks a script as tacho's.
pub const MARKER: &str = "# Written by `tacho hooks install`; `tacho hooks uninstall` removes it. Edit it and it is yours.";

/// The script tacho installs for `event`, running `command`
/// ([`crate::settings::command_for`]).
pub fn script(command: &str, event: &str) -> String {
    format!(
        "#!/bin/sh\n{MARKER}\n# The {event} hook: its payload (stdin) goes to tacho, which records it.\nexec {command}\n"
    )
}

/// The script for `event` running `tacho` for `agent` (with `watch`'s flag).
pub fn script_for(tacho: &str, agent: Agent, watch: HookWatch, event: &str) -> String {
    script(&command_for(tacho, agent, watch), event)
}

/// Whether `text` is tacho's script for `agent` and `event`; returns the tacho path
/// it runs. Any other text (a user's hook, tacho's script edited) is `None`.
pub fn tacho_script(text: &str, agent: Agent, event: &str) -> Option<String> {
    let command = text
        .strip_prefix(&format!(
            "#!/bin/sh\n{MARKER}\n# The {event} hook: its payload (stdin) goes to tacho, which records it.\nexec "
        ))?
        .strip_suffix('\n')?;
    if command.contains('\n') {
        return None;
    }
    let tacho = tacho_command(command, agent)?;
    // Exactly what `script` writes for that path (a quoted path unquoted and quoted
    // again, a --watch or --no-watch kept).
    let watch = HookWatch::of_command(command);
    (script_for(&tacho, agent, watch, event) == text).then_some(tacho)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tacho_knows_its_scripts_and_nothing_else() {
        for (tacho, watch) in [
            ("/usr/bin/tacho", HookWatch::Auto),
            ("/opt/my tools/tacho", HookWatch::Always),
            ("/x/it's/tacho", HookWatch::Never),
        ] {
            let s = script_for(tacho, Agent::Cline, watch, "PreToolUse");
            assert!(s.starts_with("#!/bin/sh\n"), "{s}");
            assert_eq!(
                tacho_script(&s, Agent::Cline, "PreToolUse").as_deref(),
                Some(tacho),
                "{s}"
            );
            // Another event's name, another agent, an edit: not tacho's.
            assert_eq!(tacho_script(&s, Agent::Cline, "PostToolUse"), None);
            assert_eq!(tacho_script(&s, Agent::ClaudeCode, "PreToolUse"), None);
            let edited = s.replace("exec ", "echo hi\nexec ");
            assert_eq!(tacho_script(&edited, Agent::Cline, "PreToolUse"), None);
            let appended = format!("{s}rm -rf /\n");
            assert_eq!(tacho_script(&appended, Agent::Cline, "PreToolUse"), None);
        }
        assert_eq!(
            tacho_script("#!/bin/sh\necho mine\n", Agent::Cline, "PreToolUse"),
            None
        );
        assert_eq!(tacho_script("", Agent::Cline, "PreToolUse"), None);
    }
}
