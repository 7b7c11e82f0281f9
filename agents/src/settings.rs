//! tacho's entries in an agent's hook settings file: merged in, taken out, and read
//! back, keeping every other hook and key as it was.
//!
//! This is [`crate::adapter::Installation::HooksObject`]: `{"hooks": {"<Event>":
//! [{"matcher": "…", "hooks": [{"type": "command", "command": "…", "timeout": N}]}]}}`
//! (Claude Code in `settings.json`, Codex in `hooks.json`). tacho's handlers are the ones whose
//! command runs `<tacho> hook <agent>`; everything else is never touched.

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::Agent;
use crate::adapter::HookEvent;

/// The hook events tacho installs for `agent` ([`crate::Adapter::hook_events`]), with
/// the matcher they need (tool events match every tool) and a timeout in the agent's
/// unit.
pub fn events(agent: Agent) -> &'static [HookEvent] {
    agent.hook_events()
}

/// Why a settings file cannot be changed.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(
        "{path}: line {line}, column {column}: {message}; the file was left as it is (fix it, or move it away, and run the command again)"
    )]
    Malformed {
        path: String,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{path}: {what} is not {expected}; the file was left as it is")]
    Shape {
        path: String,
        what: String,
        expected: &'static str,
    },
    #[error("the settings could not be written back as JSON ({0}); the file was left as it is")]
    Render(String),
}

/// Parses a settings file's text (empty text is an empty object). Comments are not
/// JSON, and a file rewritten without them would lose them, so they are refused like
/// any other syntax error.
///
/// Every number is kept as written: one that serde_json would print otherwise (an
/// integer beyond 64 bits, `1.10`, `1e3`, `-0`) is held as its text behind a marker
/// that [`render`] writes back verbatim. serde_json's `arbitrary_precision` would do
/// this for the whole build, and it changes how numbers deserialize through
/// internally tagged enums and `flatten`, which the schema uses.
pub fn parse(path: &str, text: &str) -> Result<Map<String, Value>, SettingsError> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    let malformed = |e: serde_json::Error| {
        let near = text
            .lines()
            .nth(e.line().saturating_sub(1))
            .map(str::trim_start)
            .unwrap_or("");
        let message = if near.starts_with("//") || near.starts_with("/*") {
            format!(
                "{e} (comments are not JSON; tacho does not rewrite a file it would have to drop them from)"
            )
        } else {
            e.to_string()
        };
        SettingsError::Malformed {
            path: path.to_owned(),
            line: e.line(),
            column: e.column(),
            message,
        }
    };
    let raw: &RawValue = serde_json::from_str(text).map_err(malformed)?;
    let v = exact(raw).map_err(|e| match e {
        Exact::Json(e) => malformed(e),
        Exact::Marker => SettingsError::Shape {
            path: path.to_owned(),
            what: "a string of the file".into(),
            expected: "free of tacho's number marker (U+0000 followed by `tacho-exact-number:`)",
        },
    })?;
    match v {
        Value::Object(m) => Ok(m),
        _ => Err(SettingsError::Shape {
            path: path.to_owned(),
            what: "the file".into(),
            expected: "a JSON object",
        }),
    }
}

/// What stands before a number's text in a string that holds it (see [`parse`]).
const NUMBER: &str = "\u{0}tacho-exact-number:";

enum Exact {
    Json(serde_json::Error),
    Marker,
}

/// An object's members in order, each left as its text.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> serde::Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<Members<'de>, A::Error> {
                let mut out = Vec::new();
                while let Some(e) = m.next_entry::<String, &'de RawValue>()? {
                    out.push(e);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A JSON value from its text, with every number that serde_json would print
/// differently held as its text (see [`parse`]).
fn exact(raw: &RawValue) -> Result<Value, Exact> {
    let s = raw.get();
    let marked = |t: &str| t.contains(NUMBER);
    match s.as_bytes().first() {
        Some(b'{') => {
            let members: Members<'_> = serde_json::from_str(s).map_err(Exact::Json)?;
            let mut m = Map::new();
            for (k, v) in members.0 {
                if marked(&k) {
                    return Err(Exact::Marker);
                }
                m.insert(k, exact(v)?);
            }
            Ok(Value::Object(m))
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(s).map_err(Exact::Json)?;
            items
                .into_iter()
                .map(exact)
                .collect::<Result<_, _>>()
                .map(Value::Array)
        }
        Some(b'-' | b'0'..=b'9') => {
            let n: Value = serde_json::from_str(s).map_err(Exact::Json)?;
            if serde_json::to_string(&n).is_ok_and(|again| again == s) {
                Ok(n)
            } else {
                Ok(Value::String(format!("{NUMBER}{s}")))
            }
        }
        _ => {
            let v: Value = serde_json::from_str(s).map_err(Exact::Json)?;
            if v.as_str().is_some_and(marked) {
                return Err(Exact::Marker);
            }
            Ok(v)
        }
    }
}

/// A value serialized with every held number written back as its text.
struct Verbatim<'a>(&'a Value);

impl serde::Serialize for Verbatim<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap, SerializeSeq};
        match self.0 {
            Value::String(t) => match t.strip_prefix(NUMBER) {
                Some(n) => RawValue::from_string(n.to_owned())
                    .map_err(S::Error::custom)?
                    .serialize(s),
                None => t.serialize(s),
            },
            Value::Array(a) => {
                let mut q = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    q.serialize_element(&Verbatim(v))?;
                }
                q.end()
            }
            Value::Object(o) => {
                let mut m = s.serialize_map(Some(o.len()))?;
                for (k, v) in o {
                    m.serialize_entry(k, &Verbatim(v))?;
                }
                m.end()
            }
            v => v.serialize(s),
        }
    }
}

/// Whether tacho's hooks start a watcher of the session's workspace (SPEC.md §13.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HookWatch {
    /// When a full snapshot of the workspace checked many files (`tacho hook <agent>`).
    #[default]
    Auto,
    /// Always (`tacho hook <agent> --watch`).
    Always,
    /// Never (`tacho hook <agent> --no-watch`).
    Never,
}

impl HookWatch {
    /// The argument of `tacho hook <agent>` that asks for it, if any.
    pub fn flag(self) -> Option<&'static str> {
        match self {
            HookWatch::Auto => None,
            HookWatch::Always => Some("--watch"),
            HookWatch::Never => Some("--no-watch"),
        }
    }

    /// The mode a trailing argument of `tacho hook <agent>` asks for.
    pub fn from_flag(flag: &str) -> Option<HookWatch> {
        [HookWatch::Always, HookWatch::Never]
            .into_iter()
            .find(|w| w.flag() == Some(flag))
    }

    /// The mode of an installed command line (or script) ending in its flag.
    pub fn of_command(command: &str) -> HookWatch {
        command
            .trim_end()
            .rsplit(' ')
            .next()
            .and_then(HookWatch::from_flag)
            .unwrap_or_default()
    }
}

/// The command line tacho installs for `agent`, with `watch`'s flag
/// (`tacho hook <agent> [--watch|--no-watch]`).
pub fn command_for(tacho: &str, agent: Agent, watch: HookWatch) -> String {
    let flag = watch.flag().map(|f| format!(" {f}")).unwrap_or_default();
    format!("{} hook {}{flag}", shell_quote(tacho), agent.name())
}

/// `s` as one word of a POSIX shell command line (quoted only when it needs it).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:=@".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Whether a handler's command is tacho's hook for `agent`; returns the tacho path it
/// runs.
pub fn tacho_command(command: &str, agent: Agent) -> Option<String> {
    let suffix = format!(" hook {}", agent.name());
    let command = command.trim();
    let command = HookWatch::of_command(command)
        .flag()
        .and_then(|f| command.strip_suffix(f))
        .map_or(command, str::trim_end);
    let program = command.strip_suffix(&suffix)?.trim();
    let unquoted = program
        .strip_prefix('\'')
        .and_then(|p| p.strip_suffix('\''))
        .map(|p| p.replace(r"'\''", "'"))
        .unwrap_or_else(|| program.to_owned());
    let name = std::path::Path::new(&unquoted).file_name()?.to_str()?;
    name.starts_with("tacho").then_some(unquoted)
}

fn hooks_object<'m>(
    path: &str,
    settings: &'m mut Map<String, Value>,
) -> Result<&'m mut Map<String, Value>, SettingsError> {
    let hooks = settings
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    hooks.as_object_mut().ok_or_else(|| SettingsError::Shape {
        path: path.to_owned(),
        what: "`hooks`".into(),
        expected: "an object",
    })
}

/// Removes tacho's handlers for `agent` from one event's groups; drops groups left
/// empty. Returns how many handlers were removed.
fn remove_from(groups: &mut Vec<Value>, agent: Agent) -> usize {
    let mut removed = 0;
    for g in groups.iter_mut() {
        if let Some(hs) = g.get_mut("hooks").and_then(Value::as_array_mut) {
            let before = hs.len();
            hs.retain(|h| {
                h.get("command")
                    .and_then(Value::as_str)
                    .and_then(|c| tacho_command(c, agent))
                    .is_none()
            });
            removed += before - hs.len();
        }
    }
    groups.retain(|g| {
        g.get("hooks")
            .and_then(Value::as_array)
            .is_none_or(|hs| !hs.is_empty())
    });
    removed
}

/// Merges tacho's handlers into `settings`: afterwards each event has exactly one
/// tacho handler, running `command`, in a group of its own. Returns whether anything
/// changed (installing twice changes nothing).
pub fn install(
    path: &str,
    settings: &mut Map<String, Value>,
    agent: Agent,
    command: &str,
) -> Result<bool, SettingsError> {
    let before = Value::Object(settings.clone());
    let hooks = hooks_object(path, settings)?;
    for (event, matcher, timeout) in events(agent) {
        let groups = hooks
            .entry(*event)
            .or_insert_with(|| Value::Array(Vec::new()));
        let Some(groups) = groups.as_array_mut() else {
            return Err(SettingsError::Shape {
                path: path.to_owned(),
                what: format!("`hooks.{event}`"),
                expected: "an array",
            });
        };
        let mut group = Map::new();
        if let Some(m) = matcher {
            group.insert("matcher".into(), Value::String((*m).into()));
        }
        let mut handler = Map::new();
        handler.insert("type".into(), "command".into());
        handler.insert("command".into(), command.into());
        handler.insert("timeout".into(), (*timeout).into());
        group.insert("hooks".into(), Value::Array(vec![Value::Object(handler)]));
        let wanted = Value::Object(group);
        // Already there exactly, once: keep the file as it is.
        let ours: Vec<&Value> = groups
            .iter()
            .filter(|g| {
                g.get("hooks").and_then(Value::as_array).is_some_and(|hs| {
                    hs.iter().any(|h| {
                        h.get("command")
                            .and_then(Value::as_str)
                            .and_then(|c| tacho_command(c, agent))
                            .is_some()
                    })
                })
            })
            .collect();
        if ours.len() == 1 && ours[0] == &wanted {
            continue;
        }
        remove_from(groups, agent);
        groups.push(wanted);
    }
    Ok(Value::Object(settings.clone()) != before)
}

/// Takes tacho's handlers for `agent` out; events left with no group are removed, and
/// `hooks` too when it is left empty. Returns how many handlers were removed.
pub fn uninstall(
    path: &str,
    settings: &mut Map<String, Value>,
    agent: Agent,
) -> Result<usize, SettingsError> {
    let Some(hooks) = settings.get_mut("hooks") else {
        return Ok(0);
    };
    let Some(hooks) = hooks.as_object_mut() else {
        return Err(SettingsError::Shape {
            path: path.to_owned(),
            what: "`hooks`".into(),
            expected: "an object",
        });
    };
    let mut removed = 0;
    for groups in hooks.values_mut() {
        if let Some(groups) = groups.as_array_mut() {
            removed += remove_from(groups, agent);
        }
    }
    if removed > 0 {
        hooks.retain(|_, g| g.as_array().is_none_or(|a| !a.is_empty()));
        if hooks.is_empty() {
            settings.remove("hooks");
        }
    }
    Ok(removed)
}

/// tacho's handlers found in `settings`: (event, the tacho path its command runs).
pub fn installed(settings: &Map<String, Value>, agent: Agent) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Some(hooks) = settings.get("hooks").and_then(Value::as_object) else {
        return out;
    };
    for (event, groups) in hooks {
        for g in groups.as_array().into_iter().flatten() {
            for h in g
                .get("hooks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(p) = h
                    .get("command")
                    .and_then(Value::as_str)
                    .and_then(|c| tacho_command(c, agent))
                {
                    out.push((event.clone(), p));
                }
            }
        }
    }
    out
}

/// Why tacho's handlers in `settings` cannot record what they should, as the agent
/// reads the file: all hooks disabled, a tool event's matcher that no longer matches
/// every tool, a timeout shorter than tacho's (the hook is killed before it records),
/// an event left without tacho's handler. Empty when they can fire (or when none is
/// installed here).
pub fn firing_problems(settings: &Map<String, Value>, agent: Agent) -> Vec<String> {
    let mut out = Vec::new();
    if settings.get("disableAllHooks").and_then(Value::as_bool) == Some(true) {
        out.push("`disableAllHooks` is true: the agent runs no hook".into());
    }
    let found = installed(settings, agent);
    if found.is_empty() {
        return out;
    }
    let hooks = settings.get("hooks").and_then(Value::as_object);
    for (event, matcher, timeout) in events(agent) {
        let mut ours = 0;
        for g in hooks
            .and_then(|h| h.get(*event))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for h in g
                .get("hooks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|h| {
                    h.get("command")
                        .and_then(Value::as_str)
                        .and_then(|c| tacho_command(c, agent))
                        .is_some()
                })
            {
                ours += 1;
                let m = g.get("matcher").and_then(Value::as_str);
                if let Some(want) = matcher
                    && !matches!(m, None | Some("") | Some("*"))
                    && m != Some(*want)
                {
                    out.push(format!(
                        "{event}: matcher `{}` (tacho's: `{want}`): calls of other tools are not recorded",
                        m.unwrap_or_default()
                    ));
                }
                if let Some(t) = h.get("timeout").and_then(Value::as_f64)
                    && t < *timeout as f64
                {
                    out.push(format!(
                        "{event}: timeout {t} (tacho's: {timeout}): the hook is killed before it records"
                    ));
                }
            }
        }
        if ours == 0 {
            out.push(format!("{event}: no tacho handler"));
        }
    }
    out
}

/// The text written back: two-space indented JSON with a final newline.
pub fn render(settings: &Map<String, Value>) -> Result<String, SettingsError> {
    let v = Value::Object(settings.clone());
    let mut s = serde_json::to_string_pretty(&Verbatim(&v))
        .map_err(|e| SettingsError::Render(e.to_string()))?;
    s.push('\n');
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CMD: &str = "/opt/tacho/bin/tacho hook claude-code";

    #[test]
    fn install_keeps_everything_else_and_is_idempotent() {
        let text = r#"{"model":"opus","hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[{"type":"command","command":"./guard.sh"}]}]},"env":{"A":"1"}}"#;
        let mut s = parse("s.json", text).unwrap_or_default();
        assert!(install("s.json", &mut s, Agent::ClaudeCode, CMD).unwrap_or(false));
        let once = render(&s).unwrap_or_default();
        assert!(!install("s.json", &mut s, Agent::ClaudeCode, CMD).unwrap_or(true));
        assert_eq!(render(&s).unwrap_or_default(), once);
        let v: Value = serde_json::from_str(&once).unwrap_or_default();
        assert_eq!(v["model"], "opus");
        assert_eq!(v["env"]["A"], "1");
        let pre = v["hooks"]["PreToolUse"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(pre.len(), 2, "the user's guard and tacho's");
        assert_eq!(pre[0]["hooks"][0]["command"], "./guard.sh");
        assert_eq!(
            installed(&s, Agent::ClaudeCode).len(),
            events(Agent::ClaudeCode).len()
        );
        // A tacho moved elsewhere: install replaces the stale command, once.
        assert!(
            install(
                "s.json",
                &mut s,
                Agent::ClaudeCode,
                "/new/tacho hook claude-code"
            )
            .unwrap_or(false)
        );
        let paths: Vec<_> = installed(&s, Agent::ClaudeCode)
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        assert!(paths.iter().all(|p| p == "/new/tacho"), "{paths:?}");
        assert_eq!(paths.len(), events(Agent::ClaudeCode).len());
        // Uninstall gives back exactly the user's file.
        let removed = uninstall("s.json", &mut s, Agent::ClaudeCode).unwrap_or(0);
        assert_eq!(removed, events(Agent::ClaudeCode).len());
        let back: Value = serde_json::from_str(text).unwrap_or_default();
        assert_eq!(Value::Object(s), back);
    }

    #[test]
    fn numbers_are_written_back_as_they_were() {
        // In the layout render writes, so the whole text can be compared.
        let text = [
            "{",
            "  \"big\": 123456789012345678901234567890,",
            "  \"f\": [",
            "    1.10,",
            "    1e3,",
            "    -0,",
            "    0.1,",
            "    2.5E-7",
            "  ],",
            "  \"n\": {",
            "    \"t\": 30,",
            "    \"u\": -18446744073709551617",
            "  }",
            "}\n",
        ]
        .join("\n");
        let text = text.as_str();
        let mut s = parse("s.json", text).unwrap_or_default();
        assert_eq!(render(&s).unwrap_or_default(), text);
        assert!(install("s.json", &mut s, Agent::ClaudeCode, CMD).unwrap_or(false));
        assert!(uninstall("s.json", &mut s, Agent::ClaudeCode).unwrap_or(0) > 0);
        assert_eq!(render(&s).unwrap_or_default(), text);
        // A string that holds the marker is refused, not mistaken for a number.
        assert!(parse("s.json", "{\"a\": \"\\u0000tacho-exact-number:1\"}").is_err());
    }

    #[test]
    fn malformed_files_and_comments_are_refused_with_their_place() {
        let e = parse("s.json", "{\n  // mine\n  \"a\": 1\n}")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("line 2") && e.contains("comments are not JSON"),
            "{e}"
        );
        let e = parse("s.json", "{\"a\": 1,,}")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("s.json: line 1, column"), "{e}");
        assert!(parse("s.json", "[1]").is_err());
        let mut m = parse("s.json", r#"{"hooks": []}"#).unwrap_or_default();
        assert!(install("s.json", &mut m, Agent::ClaudeCode, CMD).is_err());
    }

    #[test]
    fn commands_are_recognised_quoted_or_not() {
        assert_eq!(
            tacho_command(CMD, Agent::ClaudeCode).as_deref(),
            Some("/opt/tacho/bin/tacho")
        );
        let q = command_for("/home/me/my tools/tacho", Agent::Codex, HookWatch::Auto);
        assert_eq!(q, "'/home/me/my tools/tacho' hook codex");
        assert_eq!(
            tacho_command(&q, Agent::Codex).as_deref(),
            Some("/home/me/my tools/tacho")
        );
        let w = command_for("/opt/tacho/bin/tacho", Agent::ClaudeCode, HookWatch::Always);
        assert_eq!(w, "/opt/tacho/bin/tacho hook claude-code --watch");
        assert_eq!(
            tacho_command(&w, Agent::ClaudeCode).as_deref(),
            Some("/opt/tacho/bin/tacho")
        );
        let n = command_for("/opt/tacho/bin/tacho", Agent::ClaudeCode, HookWatch::Never);
        assert_eq!(n, "/opt/tacho/bin/tacho hook claude-code --no-watch");
        assert_eq!(HookWatch::of_command(&n), HookWatch::Never);
        assert_eq!(HookWatch::of_command(&w), HookWatch::Always);
        assert_eq!(HookWatch::of_command(&q), HookWatch::Auto);
        assert_eq!(
            tacho_command(&n, Agent::ClaudeCode).as_deref(),
            Some("/opt/tacho/bin/tacho")
        );
        assert_eq!(tacho_command(&q, Agent::ClaudeCode), None);
        assert_eq!(tacho_command("./guard.sh hook codex", Agent::Codex), None);
    }
}
