//! `tacho session rollback`: restore a workspace to a point of a session.
//!
//! The command gathers what the planner needs from the log (the point's snapshot, the
//! snapshots and edit events after it, in the session and in child sessions that
//! worked in the same directory), takes a snapshot of the workspace as it is now, and
//! computes one plan. `--dry-run` prints it; `--yes` applies it and records the
//! rollback as a session of its own, which can itself be rolled back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::Args;
use tacho_git::rollback::{self, Action, Applied, Plan, PlanInput};
use tacho_git::snapshot::{Files, Snapshot, SnapshotStore, relative_path};
use tacho_projections::{ExecutionGraph, RollbackPoints, SnapshotNode};
use tacho_schema::{
    EndReason, EventBody, EventView, ExcludedPath, RollbackApplied, SessionEnd, SessionStart,
    SnapshotReason, time_to_rfc3339,
};
use tacho_store::{Durability, Store};

use crate::cmd::graph::duration;
use crate::cmd::record::new_session_id;
use crate::cmd::replay::short_id;
use crate::error::CliError;
use crate::home::open_store;
use crate::materialize;
use crate::output::{Out, thousands};
use crate::snapshots::{open_snapshots, taken_event};

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

/// A session whose changes the rollback includes.
struct Member {
    id: String,
    graph: ExecutionGraph,
    /// Paths of edit events: (seq, time, workspace-relative path).
    edits: Vec<(u64, i64, String)>,
}

pub fn run(a: RollbackArgs) -> Result<(), CliError> {
    let log = open_store()?;
    let session = log.resolve_session(&a.session)?;
    let graph = materialize::graph(&log, &session)?;
    let points = RollbackPoints::from_graph(&graph);
    if a.list {
        return list(&points, a.json);
    }
    let target = match a.step {
        Some(n) => {
            let p = points.step(n).ok_or_else(|| {
                CliError::Input(format!(
                    "session {session} has no step {n} (steps: {})",
                    step_range(&points)
                ))
            })?;
            p.snapshot.clone().ok_or_else(|| {
                CliError::Input(format!(
                    "no snapshot was recorded before step {n} of {session}: that point cannot be restored (see --list)"
                ))
            })?
        }
        None => points.baseline.clone().ok_or_else(|| {
            CliError::Input(format!(
                "session {session} recorded no snapshot: files it changed cannot be restored this way"
            ))
        })?,
    };
    let ws_path = PathBuf::from(&target.workspace);

    // The session, and descendants that worked in the very same directory.
    let (members, elsewhere) = members(&log, &session, graph, &target.workspace, &ws_path)?;
    let running: Vec<&str> = members
        .iter()
        .filter(|m| m.graph.end_reason.is_none())
        .map(|m| m.id.as_str())
        .collect();
    if !running.is_empty() && !a.dry_run {
        return Err(CliError::Input(format!(
            "refusing to roll back while included sessions are still running: {} (end them first, or use --dry-run to see the plan)",
            running.join(", ")
        )));
    }

    let snaps = open_snapshots()?;
    let target_tree = snaps.resolve(&target.id)?;
    let target_files = snaps.files(target_tree)?;
    // Snapshots after the point, oldest first, across the included sessions.
    let mut later: Vec<(i64, u64, String)> = Vec::new();
    for m in &members {
        for s in &m.graph.snapshots {
            let after = if m.id == session {
                s.seq > target.seq
            } else {
                s.at_unix_ns >= target.at_unix_ns
            };
            if after && s.workspace == target.workspace {
                later.push((s.at_unix_ns, s.seq, s.id.clone()));
            }
        }
    }
    later.sort();
    // Each tree once, at its last occurrence, so the last stays the latest state.
    let mut seen = BTreeSet::new();
    let mut ids: Vec<&str> = Vec::new();
    for (_, _, id) in later.iter().rev() {
        if seen.insert(id.as_str()) {
            ids.push(id);
        }
    }
    ids.reverse();
    let mut later_files: Vec<Files> = Vec::new();
    for id in ids {
        later_files.push(snaps.files(snaps.resolve(id)?)?);
    }
    let last_time = later.last().map(|l| l.0);
    let mut edited = BTreeSet::new();
    let mut edited_after_last = BTreeSet::new();
    for m in &members {
        for (seq, at, path) in &m.edits {
            let after = if m.id == session {
                *seq > target.seq
            } else {
                *at >= target.at_unix_ns
            };
            if !after {
                continue;
            }
            edited.insert(path.clone());
            if last_time.is_none_or(|t| *at > t) {
                edited_after_last.insert(path.clone());
            }
        }
    }

    let (now, ws) = crate::snapshots::take(&snaps, &ws_path, &[])?;
    let current = snaps.files(now.tree)?;
    let unprotected: BTreeMap<String, String> = now
        .excluded
        .iter()
        .map(|x| (x.path.clone(), x.reason.to_string()))
        .collect();
    let plan = rollback::plan(&PlanInput {
        target: &target_files,
        later: later_files.iter().collect(),
        edited: &edited,
        edited_after_last: &edited_after_last,
        current: &current,
        unprotected: &unprotected,
        force: a.force,
    });
    let header = Header {
        session: &session,
        workspace: &ws,
        target: &target,
        step: a.step,
        members: &members,
        elsewhere: &elsewhere,
        pre: &now,
        no_later: later_files.is_empty(),
    };
    if a.dry_run || !a.yes {
        print_plan(&header, &plan, None, a.json)?;
        if !a.dry_run {
            return Err(CliError::Input(
                "nothing was changed: this is the plan; pass --yes to apply it (or --dry-run to only look)".into(),
            ));
        }
        return Ok(());
    }
    let applied = rollback::apply(&snaps, &ws, &plan)?;
    let record = record_rollback(&log, &snaps, &header, &plan, &applied, a.force)?;
    print_plan(&header, &plan, Some((&applied, &record)), a.json)?;
    if !applied.failed.is_empty() {
        return Err(CliError::Findings(format!(
            "{} file(s) could not be restored (listed above); the workspace before the rollback is snapshot {}",
            applied.failed.len(),
            now.id
        )));
    }
    Ok(())
}

fn step_range(p: &RollbackPoints) -> String {
    match (p.points.first(), p.points.last()) {
        (Some(a), Some(b)) => format!("{}..={}", a.step, b.step),
        _ => "none".into(),
    }
}

/// Descendant sessions that worked in another directory: (session, workspace).
type Elsewhere = Vec<(String, String)>;

/// The session and its descendants in the same workspace; also the descendants
/// elsewhere (excluded, but named).
fn members(
    log: &Store,
    session: &str,
    graph: ExecutionGraph,
    workspace: &str,
    ws_path: &Path,
) -> Result<(Vec<Member>, Elsewhere), CliError> {
    let mut children: BTreeMap<String, Vec<(String, Option<String>)>> = BTreeMap::new();
    for id in log.sessions()? {
        if let Some(ev) = log.first_event(&id)?
            && let EventBody::SessionStart(s) = ev.body
            && let Some(p) = s.parent
        {
            children.entry(p).or_default().push((id, s.workspace));
        }
    }
    let mut out = vec![member(log, session.to_string(), graph, ws_path)?];
    let mut elsewhere = Vec::new();
    let mut queue = vec![session.to_string()];
    let mut seen = BTreeSet::from([session.to_string()]);
    while let Some(p) = queue.pop() {
        for (c, ws) in children.get(&p).cloned().unwrap_or_default() {
            if !seen.insert(c.clone()) {
                continue;
            }
            if ws.as_deref() == Some(workspace) {
                let g = materialize::graph(log, &c)?;
                out.push(member(log, c.clone(), g, ws_path)?);
                queue.push(c);
            } else {
                elsewhere.push((c, ws.unwrap_or_else(|| "(no workspace)".into())));
            }
        }
    }
    Ok((out, elsewhere))
}

fn member(log: &Store, id: String, graph: ExecutionGraph, ws: &Path) -> Result<Member, CliError> {
    let mut edits = Vec::new();
    log.read_session_views(&id, 0, |seq, at, v| {
        if let EventView::FileEdit { path, from, .. } = *v {
            for p in [Some(path), from].into_iter().flatten() {
                if let Ok(rel) = relative_path(ws, p) {
                    edits.push((seq, at, rel));
                }
            }
        }
    })?;
    Ok(Member { id, graph, edits })
}

struct Header<'a> {
    session: &'a str,
    workspace: &'a Path,
    target: &'a SnapshotNode,
    step: Option<u64>,
    members: &'a [Member],
    elsewhere: &'a [(String, String)],
    pre: &'a Snapshot,
    no_later: bool,
}

struct Recorded {
    session: String,
    post: String,
}

fn list(p: &RollbackPoints, json: bool) -> Result<(), CliError> {
    let mut out = Out::new();
    if json {
        out.json(&serde_json::to_value(p).map_err(|e| CliError::Io(e.to_string()))?)?;
        return out.finish();
    }
    out.line(format!("Rollback points of {}", p.session))?;
    match &p.baseline {
        Some(b) => out.line(format!(
            "  baseline      snapshot {}  {}  ({} files)   tacho session rollback {}",
            short_id(&b.id),
            time_to_rfc3339(b.at_unix_ns),
            thousands(b.files),
            p.session
        ))?,
        None => out.line("  no snapshot was recorded: nothing can be restored")?,
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
    out.finish()
}

fn print_plan(
    h: &Header<'_>,
    plan: &Plan,
    applied: Option<(&Applied, &Recorded)>,
    json: bool,
) -> Result<(), CliError> {
    let mut out = Out::new();
    if json {
        let item = |i: &rollback::PlanItem| {
            serde_json::json!({
                "path": i.path,
                "action": i.action.as_str(),
                "now": i.now.map(|e| serde_json::json!({"kind": e.kind.as_str(), "blob": e.oid.to_string()})),
                "then": i.then.map(|e| serde_json::json!({"kind": e.kind.as_str(), "blob": e.oid.to_string()})),
                "forced": i.forced,
            })
        };
        out.json(&serde_json::json!({
            "session": h.session,
            "workspace": h.workspace.display().to_string(),
            "to_snapshot": h.target.id,
            "before_step": h.step,
            "pre_snapshot": h.pre.id,
            "sessions": h.members.iter().map(|m| &m.id).collect::<Vec<_>>(),
            "excluded_sessions": h.elsewhere.iter().map(|(id, ws)| serde_json::json!({"session": id, "workspace": ws})).collect::<Vec<_>>(),
            "running": h.members.iter().filter(|m| m.graph.end_reason.is_none()).map(|m| &m.id).collect::<Vec<_>>(),
            "plan": plan.items.iter().map(item).collect::<Vec<_>>(),
            "conflicts": plan.conflicts,
            "already_restored": plan.already,
            "applied": applied.map(|(a, r)| serde_json::json!({
                "done": a.done.len(),
                "failed": a.failed,
                "removed_dirs": a.removed_dirs,
                "recorded_session": r.session,
                "post_snapshot": r.post,
            })),
        }))?;
        return out.finish();
    }
    let point = match h.step {
        Some(n) => format!("before step {n}"),
        None => "the session's baseline".into(),
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
                if m.graph.end_reason.is_none() {
                    " (still running)"
                } else {
                    ""
                }
            ))?;
        }
    }
    for (id, ws) in h.elsewhere {
        out.line(format!("Excluded child session {id}: worked in {ws}"))?;
    }
    if h.no_later {
        out.line("note: no snapshot after this point; changes are known from edit events only")?;
    }
    out.line("")?;
    if plan.items.is_empty() {
        out.line("Nothing to change: every file the session changed is as it was at that point.")?;
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
            if c.reason.starts_with("cannot") {
                ""
            } else {
                " (--force restores it)"
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
        Some((a, r)) => {
            for f in &a.failed {
                out.line(format!("  FAILED    {}: {}", f.path, f.reason))?;
            }
            out.line(format!(
                "Applied {} of {} change(s). Recorded as session {} (undo: tacho session rollback {} --yes).",
                a.done.len(),
                plan.items.len(),
                r.session,
                r.session
            ))?;
        }
    }
    out.finish()
}

/// Records the rollback as a session of its own: its baseline is the workspace before
/// the rollback, so rolling that session back undoes this one.
fn record_rollback(
    log: &Store,
    snaps: &SnapshotStore,
    h: &Header<'_>,
    plan: &Plan,
    applied: &Applied,
    forced: bool,
) -> Result<Recorded, CliError> {
    let id = new_session_id();
    let now = crate::cmd::record::now_unix_ns;
    let (post, _) = crate::snapshots::take(snaps, h.workspace, &[])?;
    let done = |a: Action| applied.done.iter().filter(|i| i.action == a).count() as u64;
    let mut skipped: Vec<ExcludedPath> = plan
        .conflicts
        .iter()
        .chain(&applied.failed)
        .map(|c| ExcludedPath {
            path: c.path.clone(),
            reason: c.reason.clone(),
        })
        .collect();
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    let ws = h.workspace.display().to_string();
    let t = now();
    let events = vec![
        (
            t,
            EventBody::SessionStart(SessionStart {
                agent: Some("tacho".into()),
                workspace: Some(ws.clone()),
                title: Some(format!("rollback of {}", h.session)),
                source: Some("tacho-rollback".into()),
                ..SessionStart::default()
            }),
        ),
        (
            t,
            taken_event(h.pre, h.workspace, SnapshotReason::PreRollback, None),
        ),
        (
            t,
            EventBody::RollbackApplied(RollbackApplied {
                rolled_back: h.session.to_string(),
                to_snapshot: h.target.id.clone(),
                before_step: h.step,
                pre_snapshot: h.pre.id.clone(),
                sessions: h.members.iter().map(|m| m.id.clone()).collect(),
                restored: done(Action::Restore),
                modes: done(Action::Mode),
                deleted: done(Action::Delete),
                recreated: done(Action::Recreate),
                skipped,
                forced,
            }),
        ),
        (
            now(),
            taken_event(&post, h.workspace, SnapshotReason::Final, None),
        ),
        (
            now(),
            EventBody::SessionEnd(SessionEnd {
                reason: if applied.failed.is_empty() {
                    EndReason::Completed
                } else {
                    EndReason::Error
                },
                message: None,
            }),
        ),
    ];
    log.writer(&id)?.append_batch(&events, Durability::Sync)?;
    Ok(Recorded {
        session: id,
        post: post.id,
    })
}
