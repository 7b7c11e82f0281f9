//! `tacho session ...`.

use clap::{Args, Subcommand};
use tacho_app::render::{duration, thousands};
use tacho_app::{ListFilter, project_of};
use tacho_projections::{RiskLevel, SessionStatus, SessionSummary};
use tacho_schema::time_to_rfc3339;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// List recorded sessions, oldest first.
    List(ListArgs),
    /// One session's headline: who, where, when, how it ended, tokens, files, risk.
    Show(ShowArgs),
    /// Rebuild a session from its events (never re-running anything): summary, verify,
    /// reconstruct, execute (expectations for a harness) or export (a portable package).
    Replay(crate::cmd::replay::ReplayArgs),
    /// Compare two runs: risk, files, failures, decision paths; --deep aligns their steps.
    Compare(crate::cmd::compare::CompareArgs),
    /// A risk-scored timeline of a session; --logs analyses log files instead.
    Trace(crate::cmd::trace::TraceArgs),
    /// Restore the workspace to a point of a session (--list, --dry-run, --step N, --yes).
    Rollback(crate::cmd::rollback::RollbackArgs),
    /// Fork a session's saved state up to a point into a new session.
    Branch(crate::cmd::branch::BranchArgs),
    /// Record the end of a session whose agent recorded none (killed, or its host
    /// reports no end), and of its descendants, so that it can be rolled back.
    End(crate::cmd::end::EndArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only sessions started at or after this time (RFC 3339, or a date like 2026-08-01).
    #[arg(long)]
    pub since: Option<String>,
    /// Only sessions at or above this risk level (low, medium, high, critical).
    #[arg(long)]
    pub risk: Option<String>,
    /// Only sessions of this project (the `project` of session.start, or the last
    /// component of its workspace).
    #[arg(long)]
    pub project: Option<String>,
    /// At most this many sessions (the newest).
    #[arg(long)]
    pub limit: Option<usize>,
    /// One JSON object per session (JSON Lines) instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The session (its id, or any unique prefix of it).
    pub session: String,
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: SessionCommand) -> Result<(), CliError> {
    match c {
        SessionCommand::List(a) => list(a),
        SessionCommand::Show(a) => show(a),
        SessionCommand::Replay(a) => crate::cmd::replay::run(a),
        SessionCommand::Compare(a) => crate::cmd::compare::run(a),
        SessionCommand::Trace(a) => crate::cmd::trace::run(a),
        SessionCommand::Rollback(a) => crate::cmd::rollback::run(a),
        SessionCommand::Branch(a) => crate::cmd::branch::run(a),
        SessionCommand::End(a) => crate::cmd::end::run(a),
    }
}

fn status_text(s: SessionStatus) -> String {
    match s {
        SessionStatus::Running => "running".into(),
        SessionStatus::Ended(r) => r.to_string(),
    }
}

fn row_json(s: &SessionSummary, (score, level): &(u32, RiskLevel)) -> serde_json::Value {
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
    o.insert("risk_score".into(), (*score).into());
    o.insert("risk_level".into(), level.as_str().into());
    serde_json::Value::Object(o)
}

fn list(a: ListArgs) -> Result<(), CliError> {
    let filter = ListFilter {
        since: a.since.clone(),
        risk: a.risk.clone(),
        project: a.project.clone(),
    };
    let tacho = crate::open()?;
    let listed = tacho.list_sessions(&filter, a.limit)?;
    let damaged: Vec<(String, String)> = listed
        .iter()
        .filter_map(|r| Some((r.summary.session.clone(), r.damaged.clone()?)))
        .collect();
    let rows: Vec<(SessionSummary, (u32, RiskLevel))> = listed
        .into_iter()
        .filter(|r| r.damaged.is_none())
        .map(|r| (r.summary, (r.risk_score, r.risk_level)))
        .collect();
    let mut out = Out::new();
    if a.json {
        for (s, r) in &rows {
            out.json(&row_json(s, r))?;
        }
        for (id, why) in &damaged {
            out.json(&serde_json::json!({
                "type": "session", "session": id, "status": "damaged", "damage": why,
            }))?;
        }
        out.finish()?;
        return damaged_exit(&damaged);
    }
    for (id, why) in &damaged {
        eprintln!("warning: session {id} is damaged and left out: {why}");
    }
    if rows.is_empty() && damaged.is_empty() {
        let filtered = !filter.is_empty();
        eprintln!(
            "{} (store: {})",
            if filtered {
                "no session matches the filters"
            } else {
                "no sessions recorded yet"
            },
            tacho.log_dir().display()
        );
        return out.finish();
    }
    out.line(format!(
        "{:<30} {:<20} {:>7} {:>6} {:>6} {:>14}  {:<13} {:<15} {}",
        "SESSION",
        "STARTED",
        "EVENTS",
        "TOOLS",
        "FAILED",
        "TOKENS IN/OUT",
        "RISK",
        "STATUS",
        "AGENT / TITLE"
    ))?;
    for (s, r) in &rows {
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
            "{:<30} {:<20} {:>7} {:>6} {:>6} {:>14}  {:<13} {:<15} {}",
            s.session,
            started,
            thousands(s.events),
            s.tool_calls,
            s.tool_failures,
            format!("{}/{}", thousands(s.tokens_in), thousands(s.tokens_out)),
            format!("{} {}", r.1.as_str(), r.0),
            status_text(s.status),
            who
        ))?;
    }
    out.finish()?;
    damaged_exit(&damaged)
}

/// A listing that had to leave damaged sessions out answers for the others, then
/// exits 1 (a finding), naming how many.
fn damaged_exit(damaged: &[(String, String)]) -> Result<(), CliError> {
    if damaged.is_empty() {
        return Ok(());
    }
    Err(CliError::findings(format!(
        "{} session(s) are damaged (run `tacho log verify`); the others are listed",
        damaged.len()
    )))
}

fn show(a: ShowArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let id = tacho.resolve_session(&a.session)?;
    let d = tacho.show_session(&id)?;
    let (s, g, r, segments) = (&d.summary, &d.graph, &d.risk, d.segments);
    let mut out = Out::new();
    if a.json {
        let mut v = row_json(s, &(r.score, r.level));
        if let Some(o) = v.as_object_mut() {
            o.insert("duration_ms".into(), g.duration_ms().into());
            o.insert("agents".into(), g.agents.clone().into());
            o.insert(
                "files".into(),
                g.files.keys().cloned().collect::<Vec<_>>().into(),
            );
            o.insert("readiness".into(), r.readiness.as_str().into());
            o.insert("segments".into(), segments.into());
            o.insert("cache_read".into(), g.tokens.cache_read.into());
            o.insert("cache_write".into(), g.tokens.cache_write.into());
        }
        out.json(&v)?;
        return out.finish();
    }
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    out.line(format!("Session   {id}"))?;
    out.line(format!("Title     {}", opt(&s.title)))?;
    out.line(format!(
        "Agents    {}",
        if g.agents.is_empty() {
            "-".into()
        } else {
            g.agents.join(", ")
        }
    ))?;
    out.line(format!("Workspace {}", opt(&s.workspace)))?;
    out.line(format!(
        "Project   {}",
        project_of(s).unwrap_or_else(|| "-".into())
    ))?;
    if let Some(p) = &s.parent {
        out.line(format!("Parent    {p}"))?;
    }
    out.line(format!(
        "Started   {}",
        s.started_unix_ns.map_or("-".into(), time_to_rfc3339)
    ))?;
    out.line(format!(
        "Status    {}{}",
        status_text(s.status),
        g.duration_ms()
            .map(|d| format!(" after {}", duration(d)))
            .unwrap_or_default()
    ))?;
    out.line(format!(
        "Activity  {} events, {} steps, {} tool calls ({} failed), {} model calls",
        thousands(s.events),
        g.steps.len(),
        s.tool_calls,
        s.tool_failures,
        g.model_calls
    ))?;
    out.line(format!(
        "Tokens    {} in / {} out, cache read {}, cache write {}",
        thousands(g.tokens.input),
        thousands(g.tokens.output),
        thousands(g.tokens.cache_read),
        thousands(g.tokens.cache_write)
    ))?;
    out.line(format!("Files     {} changed", g.files.len()))?;
    out.line(format!(
        "Risk      {} ({}/100), {}",
        r.level.as_str(),
        r.score,
        r.readiness.as_str()
    ))?;
    out.line(format!("Log       {segments} segment(s)"))?;
    out.finish()
}
