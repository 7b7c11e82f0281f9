//! tacho's plugin file, for an agent that loads plugins instead of running hook
//! commands (OpenCode, Kilo Code: [`crate::adapter::Installation::PluginFile`]).
//!
//! The file is tacho's own, whole: [`render`] writes it, [`installed`] knows it again by
//! its first line (`// tacho-plugin v1 <agent> …`) and reads back the command it runs.
//! A file at its place that [`installed`] does not know is not tacho's, and is never
//! replaced or removed (the application layer refuses, naming it).
//!
//! The plugin hands each event of the agent's [`crate::Adapter::hook_events`] to
//! `<tacho> hook <agent>` as one JSON object on stdin (`{"event", "payload",
//! "directory", "database"}`, read by [`crate::opencode::parse_plugin_payload`]) and
//! waits for the answer (`spawnSync`, at most the event's timeout): the agent cannot
//! exit halfway through a hook, and events are recorded in their order. A
//! `{"decision": "block", "reason"}` answer is mapped back: thrown in
//! `tool.execute.before` (the tool does not run), sent as a new prompt of the session
//! at `session.idle` (the agent's only way back to work; the next idle then says
//! `stop_hook_active`).

use crate::Agent;
use crate::settings::HookWatch;

/// What the first line of tacho's plugin file starts with.
pub const MARKER: &str = "// tacho-plugin v1";

/// The plugin file running `argv` (`<tacho> hook <agent> [--watch|--no-watch]`) for `agent`.
pub fn render(agent: Agent, argv: &[String]) -> String {
    let name = agent.name();
    let waits: Vec<String> = agent
        .hook_events()
        .iter()
        .map(|(event, _, timeout)| format!("{}: {}", js(event), timeout.saturating_mul(1000)))
        .collect();
    let data = format!("{name}/{name}.db");
    format!(
        r#"{MARKER} {name}: written by `tacho hooks install {name}`, removed by `tacho hooks uninstall {name}`.
// tacho rewrites this file whole: edit nothing here.
//
// Hands each event below to tacho ({command}, one JSON object on stdin:
// {{"event", "payload", "directory", "database"}}) and waits for its answer: a tool
// tacho refuses is not run, and a stop it refuses is sent back as a prompt.
import {{ spawnSync }} from "node:child_process"
import {{ homedir }} from "node:os"

const TACHO = {argv}
const WAIT_MS = {{ {waits} }}
const DATA = {data}

function database() {{
  const base = process.env.XDG_DATA_HOME || (process.env.HOME || homedir()) + "/.local/share"
  return base + "/" + DATA
}}

function tacho(event, payload, directory, extra) {{
  const r = spawnSync(TACHO[0], TACHO.slice(1), {{
    input: JSON.stringify({{ event, payload, directory, database: database(), ...extra }}),
    encoding: "utf8",
    timeout: WAIT_MS[event],
    stdio: ["pipe", "pipe", "pipe"],
  }})
  if (r.error || r.status !== 0 || !r.stdout || !r.stdout.trim()) return null
  try {{
    return JSON.parse(r.stdout)
  }} catch {{
    return null
  }}
}}

function refusal(answer) {{
  if (!answer || answer.decision !== "block") return null
  return String(answer.reason || "refused by tacho")
}}

export const Tacho = async ({{ client, directory }}) => {{
  const started = new Map()
  const failed = new Set()
  const busy = new Set()
  const refused = new Set()
  return {{
    event: async ({{ event }}) => {{
      const p = event.properties || {{}}
      if (event.type === "session.created") {{
        tacho("event:session.created", event, directory)
      }} else if (event.type === "message.part.updated") {{
        const part = p.part || {{}}
        if (part.type === "tool" && part.state && part.state.status === "error" && !failed.has(part.callID)) {{
          failed.add(part.callID)
          started.delete(part.callID)
          tacho("event:message.part.updated", event, directory)
        }}
      }} else if (event.type === "session.idle" && busy.has(p.sessionID)) {{
        busy.delete(p.sessionID)
        const again = refused.has(p.sessionID)
        const reason = refusal(tacho("event:session.idle", event, directory, {{ stop_hook_active: again }}))
        if (reason === null) {{
          refused.delete(p.sessionID)
          return
        }}
        refused.add(p.sessionID)
        await client.session.prompt({{ path: {{ id: p.sessionID }}, body: {{ parts: [{{ type: "text", text: reason }}] }} }})
      }}
    }},
    "chat.message": async (input, output) => {{
      busy.add(input.sessionID)
      tacho("chat.message", {{ input, output }}, directory)
    }},
    "tool.execute.before": async (input, output) => {{
      busy.add(input.sessionID)
      started.set(input.callID, Date.now())
      const reason = refusal(tacho("tool.execute.before", {{ input, output }}, directory))
      if (reason !== null) throw new Error(reason)
    }},
    "tool.execute.after": async (input, output) => {{
      const t0 = started.get(input.callID)
      started.delete(input.callID)
      const duration_ms = t0 === undefined ? undefined : Date.now() - t0
      tacho("tool.execute.after", {{ input, output, duration_ms }}, directory)
    }},
  }}
}}
"#,
        command = argv.join(" "),
        argv = js(&argv),
        waits = waits.join(", "),
        data = js(&data),
    )
}

/// A value written into the plugin as JavaScript (JSON is JavaScript: a string's
/// quotes and backslashes are escaped, never a way out of it).
fn js(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// The command (`<tacho> hook <agent> …`, as arguments) of tacho's plugin file for
/// `agent`, when `text` is one; `None` when it is not tacho's.
pub fn installed(text: &str, agent: Agent) -> Option<Vec<String>> {
    let first = text.lines().next()?;
    let rest = first.strip_prefix(MARKER)?.strip_prefix(' ')?;
    if !rest.strip_prefix(agent.name())?.starts_with(':') {
        return None;
    }
    let argv = text
        .lines()
        .find_map(|l| l.strip_prefix("const TACHO = "))?;
    let argv: Vec<String> = serde_json::from_str(argv).ok()?;
    (argv.len() >= 3 && argv.get(1).map(String::as_str) == Some("hook")).then_some(argv)
}

/// Whether `text` is tacho's plugin file of any agent (another agent's, say: still
/// tacho's, never a user's).
pub fn is_tacho_plugin(text: &str) -> bool {
    text.lines().next().is_some_and(|l| l.starts_with(MARKER))
}

/// The arguments the plugin runs for `agent`: `<tacho> hook <agent>`, with `watch`'s flag.
pub fn argv_for(tacho: &str, agent: Agent, watch: HookWatch) -> Vec<String> {
    let mut v = vec![tacho.to_owned(), "hook".into(), agent.name().to_owned()];
    v.extend(watch.flag().map(String::from));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_is_known_again_by_its_agent_and_runs_its_command() {
        let argv = argv_for("/opt/it's tacho/tacho", Agent::OpenCode, HookWatch::Always);
        let text = render(Agent::OpenCode, &argv);
        assert_eq!(installed(&text, Agent::OpenCode), Some(argv.clone()));
        assert_eq!(installed(&text, Agent::Kilo), None, "another agent's");
        assert!(is_tacho_plugin(&text));
        // The quote in the path is JSON-escaped, not a way out of the string.
        assert!(
            text.contains(r#"const TACHO = ["/opt/it's tacho/tacho","hook","opencode","--watch"]"#)
        );
        for (event, _, timeout) in Agent::OpenCode.hook_events() {
            assert!(
                text.contains(&format!("\"{event}\": {}", timeout * 1000)),
                "{event}"
            );
        }
        assert!(text.contains(r#"const DATA = "opencode/opencode.db""#));
        let kilo = render(Agent::Kilo, &argv_for("/t", Agent::Kilo, HookWatch::Auto));
        assert!(kilo.contains(r#"const DATA = "kilo/kilo.db""#));
        assert_eq!(installed(&kilo, Agent::Kilo).map(|a| a.len()), Some(3));
        // A user's plugin is not tacho's.
        let mine = "export const Mine = async () => ({})\n";
        assert_eq!(installed(mine, Agent::OpenCode), None);
        assert!(!is_tacho_plugin(mine));
        assert_eq!(installed("", Agent::OpenCode), None);
    }
}
