//! What real coding agents report, in tacho's schema.
//!
//! - [`adapter`]: the seam. Each agent is one module ([`claude_code`], [`codex`],
//!   [`droid`], [`qwen_code`], [`copilot`], [`gemini`], [`cline`], [`opencode`])
//!   implementing [`Adapter`]; [`Agent`] is a `Copy` handle on one, and
//!   [`Agent::ALL`] the registry, the one list of agents tacho records.
//! - [`hook`]: one hook payload of Claude Code or Codex (both send the same envelope:
//!   `session_id`, `transcript_path`, `cwd`, `hook_event_name`, and per event the tool,
//!   its input and response) mapped to the events and snapshots tacho records, with
//!   the little state a hook process keeps between events ([`hook::HookState`]).
//! - [`transcript`]: token usage read from a Claude Code transcript, from a kept
//!   offset, one count per model response.
//! - [`patch`]: the paths an `apply_patch` patch touches (Codex).
//! - [`settings`]: tacho's entries merged into (and taken out of) each agent's hook
//!   settings file, keeping everything else; [`executables`]: tacho's hook scripts for
//!   an agent that runs executables named after its events (Cline); [`plugin`]: tacho's
//!   plugin file for the agents that load plugins instead ([`opencode`]).
//!
//! Nothing here writes the log: the application layer records what these functions
//! return, through its one ingest path, which refuses evidence kinds.

pub mod adapter;
pub mod claude_code;
pub mod cline;
pub mod codex;
pub mod copilot;
pub mod droid;
pub mod executables;
pub mod gemini;
pub mod hook;
pub mod import;
pub mod opencode;
pub mod patch;
pub mod plugin;
pub mod qwen_code;
pub mod settings;
pub mod todo;
pub mod transcript;

pub use adapter::{Adapter, Fork};

/// One agent tacho records through its hooks: a `Copy` handle on its [`Adapter`]
/// (which it derefs to). Two agents are the same when their names are.
#[derive(Clone, Copy)]
pub struct Agent(&'static dyn Adapter);

#[allow(non_upper_case_globals)]
impl Agent {
    pub const ClaudeCode: Agent = Agent(&claude_code::ClaudeCode);
    pub const Cline: Agent = Agent(&cline::Cline);
    pub const Codex: Agent = Agent(&codex::Codex);
    pub const Copilot: Agent = Agent(&copilot::Copilot);
    pub const Droid: Agent = Agent(&droid::Droid);
    pub const Gemini: Agent = Agent(&gemini::Gemini);
    pub const QwenCode: Agent = Agent(&qwen_code::QwenCode);
    pub const OpenCode: Agent = Agent(&opencode::OPENCODE);
    pub const Kilo: Agent = Agent(&opencode::KILO);

    /// The registry: every agent tacho has an adapter for, in the order they are
    /// listed. Adding an agent is a module with its [`Adapter`], a constant above and
    /// an entry here.
    pub const ALL: &'static [Agent] = &[
        Agent::ClaudeCode,
        Agent::Codex,
        Agent::Droid,
        Agent::QwenCode,
        Agent::Copilot,
        Agent::Gemini,
        Agent::Cline,
        Agent::OpenCode,
        Agent::Kilo,
    ];

    /// The adapter behind it.
    pub fn adapter(self) -> &'static dyn Adapter {
        self.0
    }

    /// The name used on the command line and in recorded events.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// The agent of a name or alias.
    pub fn parse(s: &str) -> Option<Agent> {
        Agent::ALL
            .iter()
            .copied()
            .find(|a| a.name() == s || a.aliases().contains(&s))
    }
}

impl std::ops::Deref for Agent {
    type Target = dyn Adapter;
    fn deref(&self) -> &(dyn Adapter + 'static) {
        self.0
    }
}

impl PartialEq for Agent {
    fn eq(&self, other: &Agent) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Agent {}

impl PartialOrd for Agent {
    fn partial_cmp(&self, other: &Agent) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Agent {
    fn cmp(&self, other: &Agent) -> std::cmp::Ordering {
        self.name().cmp(other.name())
    }
}

impl std::hash::Hash for Agent {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.name().hash(h);
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Agent({})", self.name())
    }
}

impl std::fmt::Display for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A session id tacho accepts, made from an agent's id: characters outside letters,
/// digits, `.`, `_` and `-` become `-`, a leading `.` or `-` gets a `s` in front, and
/// the result is cut to the schema's limit.
pub fn session_id_from(raw: &str) -> String {
    let mut id: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if id.is_empty() || id.starts_with(['.', '-']) {
        id.insert(0, 's');
    }
    if id.len() > tacho_schema::SESSION_ID_BYTES_MAX {
        // Cut, with a digest of the whole id after it: two long ids that share their
        // first bytes (`<main>.<agent_id>`, `<main>.2` and `<main>`) stay apart.
        let digest = blake3::hash(raw.as_bytes()).to_hex();
        id.truncate(tacho_schema::SESSION_ID_BYTES_MAX - 17);
        id.push('-');
        id.push_str(digest.get(..16).unwrap_or_default());
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::{PlaceError, Places, Scope};

    /// Every agent of the registry has a name of its own, is found by its name and
    /// its aliases, and has a settings file at exactly the scopes it lists.
    #[test]
    fn the_registry_names_each_agent_once_with_its_scopes() {
        let places = Places {
            home: Some("/home/u".into()),
            project: "/p".into(),
            ..Places::default()
        };
        let mut words = Vec::new();
        for agent in Agent::ALL {
            assert!(!agent.hook_events().is_empty(), "{agent}");
            for word in std::iter::once(&agent.name()).chain(agent.aliases()) {
                assert_eq!(Agent::parse(word), Some(*agent));
                words.push(*word);
            }
            for scope in Scope::ALL {
                let file = agent.settings_file(&places, scope);
                if agent.scopes().contains(&scope) {
                    assert!(file.is_ok(), "{agent} {scope:?}: {file:?}");
                } else {
                    assert_eq!(file, Err(PlaceError::NoScope), "{agent} {scope:?}");
                }
            }
            assert!(agent.import_root(&places).is_ok(), "{agent}");
        }
        let n = words.len();
        words.sort_unstable();
        words.dedup();
        assert_eq!(words.len(), n, "a name or alias used twice: {words:?}");
        assert_eq!(Agent::parse("nobody"), None);
    }

    #[test]
    fn session_ids_are_made_valid() {
        for raw in [
            "f315c152-cf0f-4af4-a417-7602a53a305e",
            "-x",
            "a b/c",
            "",
            &"z".repeat(500),
        ] {
            let id = session_id_from(raw);
            assert!(
                tacho_schema::validate_session_id(&id).is_ok(),
                "{raw:?} → {id:?}"
            );
        }
        assert_eq!(
            session_id_from("f315c152-cf0f-4af4-a417-7602a53a305e"),
            "f315c152-cf0f-4af4-a417-7602a53a305e"
        );
        // A long id and the ids derived from it stay apart, and each is stable.
        let main = "Z".repeat(128);
        let ids: Vec<String> = [main.clone(), format!("{main}.2"), format!("{main}.a1")]
            .iter()
            .map(|r| session_id_from(r))
            .collect();
        assert_eq!(ids[0], main);
        assert_ne!(ids[1], ids[0]);
        assert_ne!(ids[2], ids[0]);
        assert_ne!(ids[1], ids[2]);
        assert_eq!(session_id_from(&format!("{main}.2")), ids[1]);
    }
}
