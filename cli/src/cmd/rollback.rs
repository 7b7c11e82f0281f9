//! `tacho session rollback`: restore a workspace to a point of a session.
//!
//! The application layer plans it (the point's snapshot, the snapshots and edit events
//! after it, in the session and in child sessions that worked in the same directory,
//! and the workspace as it is now); `--dry-run` prints the plan; `--yes` applies it and
//! records the rollback as a session of its own, which can itself be rolled back.

use clap::Args;
use tacho_app::render::rollback as render;
use tacho_app::types::RollbackPoints;
use tacho_app::{Done, Prepared};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The session (its id, or any unique prefix of it).
    pub session: String,
    /// List the recoverable points (steps with a snapshot before them).
    #[arg(long, conflicts_with_all = ["dry_run", "yes", "force", "unclaimed", "path"])]
    pub list: bool,
    /// Print the plan and change nothing.
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,
    /// Restore the state before step N's changes (default: the session's baseline).
    #[arg(long, conflicts_with = "unclaimed")]
    pub step: Option<u64>,
    /// Undo only unclaimed change N (a change no tool call made, numbered as `--list`
    /// shows them): its files go back to the snapshot before it.
    #[arg(long, conflicts_with = "path")]
    pub unclaimed: Option<usize>,
    /// Restore only the files at or under PATH (a file or a directory, relative to the
    /// workspace as the plan names files, or absolute under it); repeatable.
    #[arg(long, value_name = "PATH")]
    pub path: Vec<String>,
    /// Apply the plan.
    #[arg(long)]
    pub yes: bool,
    /// Also restore files that changed outside the session since its last snapshot.
    #[arg(long)]
    pub force: bool,
    /// Also fork the agent's conversation as it stood before step N, as a new session
    /// of the agent beside the original (which is never changed), and print the
    /// command that resumes it (Claude Code, Codex).
    #[arg(long, requires = "step", conflicts_with_all = ["unclaimed", "list"])]
    pub conversation: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: RollbackArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let mut out = Out::new();
    if a.list {
        print_points(&tacho.rollback_points(&session)?, a.json, &mut out)?;
        return out.finish();
    }
    let p = match a.unclaimed {
        Some(n) => tacho.plan_unclaimed_rollback(&session, n, a.force, a.dry_run)?,
        None => tacho.plan_rollback_within(&session, a.step, &a.path, a.force, a.dry_run)?,
    };
    // The fork is prepared (read and cut) before anything is shown or applied, and
    // written before the files are touched: whatever fails of it fails first.
    let mut fork = match a.conversation {
        true => Some(tacho.prepare_fork(&p)?),
        false => None,
    };
    if a.dry_run || !a.yes {
        print_plan(
            &p,
            None,
            fork.as_ref().map(|f| f.view.clone()),
            a.json,
            &mut out,
        )?;
        out.finish()?;
        if a.dry_run || !confirmed(&p, a.conversation, a.json)? {
            return Ok(());
        }
        out = Out::new();
    }
    if let Some(f) = fork.as_mut() {
        tacho.write_fork(f)?;
    }
    let done = tacho.apply_rollback(&p)?;
    print_plan(&p, Some(&done), fork.map(|f| f.view), a.json, &mut out)?;
    out.finish()?;
    let failed = done.applied.failed.len();
    let conflicts = p.plan.conflicts.len();
    if failed + conflicts > 0 {
        return Err(CliError::findings(format!(
            "{failed} file(s) could not be restored and {conflicts} were left alone as conflicts (listed above); the workspace before the rollback is snapshot {}",
            p.pre.id
        )));
    }
    Ok(())
}

/// Without `--yes`: on a terminal, asks whether to apply the plan just shown;
/// otherwise says how to apply it. Nothing is changed unless the answer is yes.
fn confirmed(p: &tacho_app::Prepared, fork: bool, json: bool) -> Result<bool, CliError> {
    use std::io::{BufRead, IsTerminal, Write};
    let stdin = std::io::stdin();
    if json || !stdin.is_terminal() || !std::io::stderr().is_terminal() {
        eprintln!(
            "nothing was changed: this is the plan; pass --yes to apply it (or --dry-run to only look)"
        );
        return Ok(false);
    }
    if p.plan.items.is_empty() && !fork {
        eprintln!("nothing to apply");
        return Ok(false);
    }
    eprint!("Apply this plan to {}? [y/N] ", p.workspace.display());
    std::io::stderr().flush().map_err(CliError::from)?;
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(CliError::from)?;
    let yes = matches!(answer.trim(), "y" | "Y" | "yes" | "Yes");
    if !yes {
        eprintln!("nothing was changed");
    }
    Ok(yes)
}

/// The recoverable points of a session.
pub fn print_points(p: &RollbackPoints, json: bool, out: &mut Out) -> Result<(), CliError> {
    if json {
        return out.typed("rollback_points", p);
    }
    out.line(render::points(p).trim_end())
}

/// A rollback's plan, and what was applied when it was.
pub fn print_plan(
    h: &Prepared,
    applied: Option<&Done>,
    conversation: Option<tacho_app::ConversationFork>,
    json: bool,
    out: &mut Out,
) -> Result<(), CliError> {
    let mut v = h.view(applied);
    v.conversation = conversation;
    if json {
        return out.typed(v.record_type(), &v);
    }
    out.line(render::plan(&v).trim_end())
}
