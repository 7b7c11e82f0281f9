//! `tacho session rollback`: restore a workspace to a point of a session.
//!
//! The application layer plans it (the point's snapshot, the snapshots and edit events
//! after it, in the session and in child sessions that worked in the same directory,
//! and the workspace as it is now); `--dry-run` prints the plan; `--yes` applies it and
//! records the rollback as a session of its own, which can itself be rolled back.

use clap::Args;
use tacho_app::render::{duration, short_id, thousands};
use tacho_app::types::{Action, PlanItem, RollbackPoints};
use tacho_app::{Done, Prepared};
use tacho_schema::time_to_rfc3339;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The session (its id, or any unique prefix of it).
    pub session: String,
    /// List the recoverable points (steps with a snapshot before them).
    #[arg(long, conflicts_with_all = ["dry_run", "yes", "force"])]
    pub list: bool,
    /// Print the plan and change nothing.
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,
    /// Restore the state before step N's changes (default: the session's baseline).
    #[arg(long)]
    pub step: Option<u64>,
    /// Apply the plan.
    #[arg(long)]
    pub yes: bool,
    /// Also restore files that changed outside the session since its last snapshot.
    #[arg(long)]
    pub force: bool,
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
    let p = tacho.plan_rollback(&session, a.step, a.force, a.dry_run)?;
    if a.dry_run || !a.yes {
        print_plan(&p, None, a.json, &mut out)?;
        out.finish()?;
        if a.dry_run || !confirmed(&p, a.json)? {
            return Ok(());
        }
        out = Out::new();
    }
    let done = tacho.apply_rollback(&p)?;
    print_plan(&p, Some(&done), a.json, &mut out)?;
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
fn confirmed(p: &tacho_app::Prepared, json: bool) -> Result<bool, CliError> {
    use std::io::{BufRead, IsTerminal, Write};
    let stdin = std::io::stdin();
    if json || !stdin.is_terminal() || !std::io::stderr().is_terminal() {
        eprintln!(
            "nothing was changed: this is the plan; pass --yes to apply it (or --dry-run to only look)"
        );
        return Ok(false);
    }
    if p.plan.items.is_empty() {
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
    out.line(format!("Rollback points of {}", p.session))?;
    let label = if p.without_before_state.is_empty() {
        "baseline"
    } else {
        "first"
    };
    match &p.baseline {
        Some(b) => out.line(format!(
            "  {label:<13} snapshot {}  {}  ({} files)   tacho session rollback {}",
            short_id(&b.id),
            time_to_rfc3339(b.at_unix_ns),
            thousands(b.files),
            p.session
        ))?,
        None => out.line("  no snapshot was recorded: nothing can be restored")?,
    }
    if !p.without_before_state.is_empty() {
        out.line(format!(
            "  no before-state: {} (no snapshot was taken before; what changed before the first snapshot cannot be undone)",
            steps_named(&p.without_before_state)
        ))?;
    }
    out.line(format!(
        "  {:<6} {:<20} {:>8} {:>6} {:>16} {:<14} FILES",
        "STEP", "STARTED", "TIME", "TOOLS", "TOKENS IN/OUT", "SNAPSHOT"
    ))?;
    for pt in &p.points {
        out.line(format!(
            "  {:<6} {:<20} {:>8} {:>6} {:>16} {:<14} {}",
            pt.step,
            time_to_rfc3339(pt.started_unix_ns)
                .get(..19)
                .unwrap_or_default(),
            pt.duration_ms.map(duration).unwrap_or_else(|| "-".into()),
            pt.tools,
            format!(
                "{}/{}",
                thousands(pt.tokens.input),
                thousands(pt.tokens.output)
            ),
            pt.snapshot
                .as_ref()
                .map_or("- (none)".to_string(), |s| short_id(&s.id).to_string()),
            if pt.files.is_empty() {
                "-".to_string()
            } else {
                pt.files.join(", ")
            }
        ))?;
    }
    Ok(())
}

/// A rollback's plan, and what was applied when it was.
pub fn print_plan(
    h: &Prepared,
    applied: Option<&Done>,
    json: bool,
    out: &mut Out,
) -> Result<(), CliError> {
    let plan = &h.plan;
    if json {
        let item = |i: &PlanItem| {
            serde_json::json!({
                "path": i.path,
                "action": i.action.as_str(),
                "now": i.now.map(|e| serde_json::json!({"kind": e.kind.as_str(), "blob": e.oid.to_string()})),
                "then": i.then.map(|e| serde_json::json!({"kind": e.kind.as_str(), "blob": e.oid.to_string()})),
                "forced": i.forced,
            })
        };
        out.json(&serde_json::json!({
            "type": if applied.is_some() { "rollback" } else { "rollback_plan" },
            "session": h.session,
            "workspace": h.workspace.display().to_string(),
            "to_snapshot": h.target.id,
            "before_step": h.step,
            "pre_snapshot": h.pre.id,
            "sessions": h.members.iter().map(|m| &m.id).collect::<Vec<_>>(),
            "excluded_sessions": h.elsewhere.iter().map(|e| serde_json::json!({"session": e.session, "workspace": e.workspace})).collect::<Vec<_>>(),
            "running": h.running().collect::<Vec<_>>(),
            "without_before_state": h.without_before_state,
            "plan": plan.items.iter().map(item).collect::<Vec<_>>(),
            "conflicts": plan.conflicts,
            "already_restored": plan.already,
            "applied": applied.map(|d| serde_json::json!({
                "done": d.applied.done.len(),
                "failed": d.applied.failed,
                "removed_dirs": d.applied.removed_dirs,
                "recorded_session": d.session,
                "post_snapshot": d.post,
            })),
        }))?;
        return Ok(());
    }
    let point = match (h.step, h.without_before_state.first()) {
        (Some(n), _) => format!("before step {n}"),
        (None, None) => "the session's baseline".into(),
        (None, Some(_)) => "its first snapshot".into(),
    };
    out.line(format!(
        "Rollback of {} to {point} (snapshot {}, {})",
        h.session,
        short_id(&h.target.id),
        time_to_rfc3339(h.target.at_unix_ns)
    ))?;
    out.line(format!("Workspace: {}", h.workspace.display()))?;
    out.line(format!(
        "Workspace now: snapshot {} ({} files) — rolling back can be undone from it",
        short_id(&h.pre.id),
        thousands(h.pre.files)
    ))?;
    if h.members.len() > 1 {
        out.line("Child sessions in the same workspace, included:")?;
        for m in &h.members[1..] {
            out.line(format!(
                "  {}{}",
                m.id,
                if m.running { " (still running)" } else { "" }
            ))?;
        }
    }
    for e in &h.elsewhere {
        out.line(format!(
            "Excluded child session {}: worked in {}",
            e.session, e.workspace
        ))?;
    }
    if !h.without_before_state.is_empty() {
        let n = h.without_before_state.len();
        out.line(format!(
            "note: {} {} no before-state (no snapshot was taken before {}): what {} changed before snapshot {} stays as it is",
            steps_named(&h.without_before_state),
            if n == 1 { "has" } else { "have" },
            if n == 1 { "it" } else { "them" },
            if n == 1 { "it" } else { "they" },
            short_id(&h.target.id)
        ))?;
    }
    if h.no_later {
        out.line("note: no snapshot after this point; changes are known from edit events only")?;
    }
    out.line("")?;
    if plan.items.is_empty() && plan.conflicts.is_empty() {
        out.line("Nothing to change: every file the session changed is as it was at that point.")?;
    } else if plan.items.is_empty() {
        out.line(format!(
            "Nothing can be restored as planned: {} file(s) conflict (below).",
            plan.conflicts.len()
        ))?;
    }
    for i in &plan.items {
        let detail = match i.action {
            Action::Mode => format!(
                " ({} → {})",
                i.now.map_or("-", |e| e.kind.as_str()),
                i.then.map_or("-", |e| e.kind.as_str())
            ),
            _ => String::new(),
        };
        out.line(format!(
            "  {:<9} {}{detail}{}",
            i.action.as_str(),
            i.path,
            if i.forced {
                "  (forced over an outside change)"
            } else {
                ""
            }
        ))?;
    }
    for c in &plan.conflicts {
        out.line(format!(
            "  conflict  {}: {}; left alone{}",
            c.path,
            c.reason,
            if c.forceable {
                " (--force restores it)"
            } else {
                ""
            }
        ))?;
    }
    out.line(format!(
        "\n{} restore, {} mode, {} delete, {} recreate, {} conflict(s), {} already as at that point",
        plan.count(Action::Restore),
        plan.count(Action::Mode),
        plan.count(Action::Delete),
        plan.count(Action::Recreate),
        plan.conflicts.len(),
        plan.already
    ))?;
    out.line("Files changed outside the session before its last snapshot, and files never snapshotted, cannot be restored this way.")?;
    match applied {
        None => out.line("(dry run: nothing was changed)")?,
        Some(d) => {
            for f in &d.applied.failed {
                out.line(format!("  FAILED    {}: {}", f.path, f.reason))?;
            }
            let left = if plan.conflicts.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} conflict(s) left alone (listed above)",
                    plan.conflicts.len()
                )
            };
            out.line(format!(
                "Applied {} of {} change(s){left}. Recorded as session {} (undo: tacho session rollback {} --yes).",
                d.applied.done.len(),
                plan.items.len(),
                d.session,
                d.session
            ))?;
        }
    }
    Ok(())
}

/// "step 1" or "steps 1, 3".
fn steps_named(steps: &[u64]) -> String {
    let list: Vec<String> = steps.iter().map(u64::to_string).collect();
    format!(
        "{} {}",
        if steps.len() == 1 { "step" } else { "steps" },
        list.join(", ")
    )
}
