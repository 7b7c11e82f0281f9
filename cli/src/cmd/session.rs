//! `tacho session ...`.

use clap::{Args, Subcommand};
use tacho_app::ListFilter;
use tacho_app::render::session;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// List recorded sessions, newest first.
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
    /// The secrets a push would refuse (tokens, keys, passwords in events), and
    /// --allow SEQ to let one event through (recorded).
    Secrets(crate::cmd::secrets::SecretsArgs),
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
        SessionCommand::Secrets(a) => crate::cmd::secrets::run(a),
    }
}

fn list(a: ListArgs) -> Result<(), CliError> {
    let filter = ListFilter {
        since: a.since.clone(),
        risk: a.risk.clone(),
        project: a.project.clone(),
    };
    let tacho = crate::open()?;
    let listed = tacho.list_sessions(&filter, a.limit)?;
    let damaged: Vec<(&str, &str)> = listed
        .iter()
        .filter_map(|r| Some((r.summary.session.as_str(), r.damaged.as_deref()?)))
        .collect();
    let mut out = Out::new();
    if a.json {
        // The sound sessions, then the damaged ones.
        for r in listed.iter().filter(|r| r.damaged.is_none()) {
            out.typed("session", r)?;
        }
        for r in listed.iter().filter(|r| r.damaged.is_some()) {
            out.typed("session", r)?;
        }
        out.finish()?;
        return damaged_exit(&damaged);
    }
    for (id, why) in &damaged {
        eprintln!("warning: session {id} is damaged and left out: {why}");
    }
    if listed.is_empty() {
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
    out.line(session::table(&listed).trim_end())?;
    out.finish()?;
    damaged_exit(&damaged)
}

/// A listing that had to leave damaged sessions out answers for the others, then
/// exits 1 (a finding), naming how many.
fn damaged_exit(damaged: &[(&str, &str)]) -> Result<(), CliError> {
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
    let mut out = Out::new();
    if a.json {
        out.typed("session", &d)?;
    } else {
        out.line(session::show(&d).trim_end())?;
    }
    out.finish()
}
