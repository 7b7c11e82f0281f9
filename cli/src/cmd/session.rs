//! `tacho session ...`.

use clap::{Args, Subcommand};
use tacho_projections::{SessionStatus, SessionSummary};
use tacho_schema::time_to_rfc3339;

use crate::error::CliError;
use crate::home::open_store;
use crate::output::{Out, thousands};

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// List recorded sessions, oldest first.
    List(ListArgs),
    /// Rebuild a session from its events (never re-running anything): summary, verify
    /// or reconstruct.
    Replay(crate::cmd::replay::ReplayArgs),
    /// Compare two runs: risk, files, failures, decision paths; --deep aligns their steps.
    Compare(crate::cmd::compare::CompareArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// One JSON object per session (JSON Lines) instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: SessionCommand) -> Result<(), CliError> {
    match c {
        SessionCommand::List(a) => list(a),
        SessionCommand::Replay(a) => crate::cmd::replay::run(a),
        SessionCommand::Compare(a) => crate::cmd::compare::run(a),
    }
}

fn status_text(s: SessionStatus) -> String {
    match s {
        SessionStatus::Running => "running".into(),
        SessionStatus::Ended(r) => r.to_string(),
    }
}

fn list(a: ListArgs) -> Result<(), CliError> {
    let store = open_store()?;
    let mut summaries = Vec::new();
    for id in store.sessions()? {
        let mut s = SessionSummary::new(&id);
        store.read_session(&id, |e| s.apply(&e.event))?;
        summaries.push(s);
    }
    summaries.sort_by(|a, b| (a.started_unix_ns, &a.session).cmp(&(b.started_unix_ns, &b.session)));
    let mut out = Out::new();
    if a.json {
        for s in &summaries {
            let fields = match serde_json::to_value(s) {
                Ok(serde_json::Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            };
            let mut o = serde_json::Map::new();
            o.insert("type".into(), "session".into());
            for (k, v) in fields {
                o.insert(k, v);
            }
            o.insert("status".into(), status_text(s.status).into());
            o.insert(
                "started".into(),
                s.started_unix_ns.map(time_to_rfc3339).into(),
            );
            out.json(&serde_json::Value::Object(o))?;
        }
        return out.finish();
    }
    if summaries.is_empty() {
        eprintln!(
            "no sessions recorded yet (store: {})",
            store.root().display()
        );
        return out.finish();
    }
    out.line(format!(
        "{:<30} {:<20} {:>7} {:>6} {:>6} {:>14}  {:<15} {}",
        "SESSION",
        "STARTED",
        "EVENTS",
        "TOOLS",
        "FAILED",
        "TOKENS IN/OUT",
        "STATUS",
        "AGENT / TITLE"
    ))?;
    for s in &summaries {
        let started = s
            .started_unix_ns
            .map(|t| {
                time_to_rfc3339(t)
                    .chars()
                    .take(19)
                    .collect::<String>()
                    .replace('T', " ")
            })
            .unwrap_or_else(|| "-".into());
        let who = match (&s.agent, &s.title) {
            (Some(a), Some(t)) => format!("{a}: {t}"),
            (Some(a), None) => a.clone(),
            (None, Some(t)) => t.clone(),
            (None, None) => String::new(),
        };
        out.line(format!(
            "{:<30} {:<20} {:>7} {:>6} {:>6} {:>14}  {:<15} {}",
            s.session,
            started,
            thousands(s.events),
            s.tool_calls,
            s.tool_failures,
            format!("{}/{}", thousands(s.tokens_in), thousands(s.tokens_out)),
            status_text(s.status),
            who
        ))?;
    }
    out.finish()
}
