//! `tacho session rollback` in text: the recoverable points, and a plan with what was
//! applied.

use tacho_git::rollback::Action;
use tacho_projections::RollbackPoints;
use tacho_schema::time_to_rfc3339;

use super::{duration, short_id, thousands};
use crate::rollback::{PlanFile, RollbackView};

/// "step 1" or "steps 1, 3".
fn steps_named(steps: &[u64]) -> String {
    let list: Vec<String> = steps.iter().map(u64::to_string).collect();
    format!(
        "{} {}",
        if steps.len() == 1 { "step" } else { "steps" },
        list.join(", ")
    )
}

/// `--list`: the baseline and each step with the snapshot before it.
pub fn points(p: &RollbackPoints) -> String {
    let mut o = format!("Rollback points of {}\n", p.session);
    let label = if p.without_before_state.is_empty() {
        "baseline"
    } else {
        "first"
    };
    match &p.baseline {
        Some(b) => o.push_str(&format!(
            "  {label:<13} snapshot {}  {}  ({} files)   tacho session rollback {}\n",
            short_id(&b.id),
            time_to_rfc3339(b.at_unix_ns),
            thousands(b.files),
            p.session
        )),
        None => o.push_str("  no snapshot was recorded: nothing can be restored\n"),
    }
    if !p.without_before_state.is_empty() {
        o.push_str(&format!(
            "  no before-state: {} (no snapshot was taken before; what changed before the first snapshot cannot be undone)\n",
            steps_named(&p.without_before_state)
        ));
    }
    o.push_str(&format!(
        "  {:<6} {:<20} {:>8} {:>6} {:>16} {:<14} FILES\n",
        "STEP", "STARTED", "TIME", "TOOLS", "TOKENS IN/OUT", "SNAPSHOT"
    ));
    for pt in &p.points {
        o.push_str(&format!(
            "  {:<6} {:<20} {:>8} {:>6} {:>16} {:<14} {}\n",
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
        ));
    }
    if !p.unclaimed.is_empty() {
        o.push_str(
            "  Changes no tool call made (undo each on its own):
",
        );
        for u in &p.unclaimed {
            o.push_str(&format!(
                "  {:<6} between events #{} and #{}, found {}   {}\n",
                u.index,
                u.after_seq,
                u.before_seq,
                time_to_rfc3339(u.found_unix_ns)
                    .get(..19)
                    .unwrap_or_default(),
                u.undo
            ));
            for f in &u.files {
                o.push_str(&format!(
                    "           {:<9} {} (+{} -{})\n",
                    f.change, f.path, f.lines_added, f.lines_removed
                ));
            }
        }
    }
    o
}

/// A plan (a dry run, or one not confirmed), and what was applied when it was.
pub fn plan(h: &RollbackView) -> String {
    let point = match (h.unclaimed, h.before_step, h.without_before_state.first()) {
        (Some(n), _, _) => format!("before its unclaimed change {n} (only that change's files)"),
        (None, Some(n), _) => format!("before step {n}"),
        (None, None, None) => "the session's baseline".into(),
        (None, None, Some(_)) => "its first snapshot".into(),
    };
    let mut o = format!(
        "Rollback of {} to {point} (snapshot {}, {})\n",
        h.session,
        short_id(&h.to_snapshot),
        time_to_rfc3339(h.to_snapshot_at_unix_ns)
    );
    o.push_str(&format!("Workspace: {}\n", h.workspace));
    if !h.paths.is_empty() {
        o.push_str(&format!(
            "Only files at or under: {} (the rest stays as it is)\n",
            h.paths.join(", ")
        ));
    }
    o.push_str(&format!(
        "Workspace now: snapshot {} ({} files) — rolling back can be undone from it\n",
        short_id(&h.pre_snapshot),
        thousands(h.pre_snapshot_files)
    ));
    if h.sessions.len() > 1 {
        o.push_str("Child sessions in the same workspace, included:\n");
        for m in h.sessions.iter().skip(1) {
            o.push_str(&format!(
                "  {m}{}\n",
                if h.running.contains(m) {
                    " (still running)"
                } else {
                    ""
                }
            ));
        }
    }
    for e in &h.excluded_sessions {
        o.push_str(&format!(
            "Excluded child session {}: worked in {}\n",
            e.session, e.workspace
        ));
    }
    if !h.without_before_state.is_empty() {
        let n = h.without_before_state.len();
        o.push_str(&format!(
            "note: {} {} no before-state (no snapshot was taken before {}): what {} changed before snapshot {} stays as it is\n",
            steps_named(&h.without_before_state),
            if n == 1 { "has" } else { "have" },
            if n == 1 { "it" } else { "them" },
            if n == 1 { "it" } else { "they" },
            short_id(&h.to_snapshot)
        ));
    }
    if h.no_later_snapshot {
        o.push_str("note: no snapshot after this point; changes are known from edit events only\n");
    }
    o.push('\n');
    if h.plan.is_empty() && h.conflicts.is_empty() {
        o.push_str(
            "Nothing to change: every file the session changed is as it was at that point.\n",
        );
    } else if h.plan.is_empty() {
        o.push_str(&format!(
            "Nothing can be restored as planned: {} file(s) conflict (below).\n",
            h.conflicts.len()
        ));
    }
    for i in &h.plan {
        let detail = match i.action {
            Action::Mode => {
                let show = |e: Option<&PlanFile>| {
                    e.map_or("-".to_string(), |e| match &e.mode {
                        Some(m) => format!("{} {m}", e.kind),
                        None => e.kind.to_string(),
                    })
                };
                format!(" ({} → {})", show(i.now.as_ref()), show(i.then.as_ref()))
            }
            _ => String::new(),
        };
        o.push_str(&format!(
            "  {:<9} {}{detail}{}\n",
            i.action.as_str(),
            i.path,
            if i.forced {
                "  (forced over an outside change)"
            } else {
                ""
            }
        ));
    }
    for c in &h.conflicts {
        o.push_str(&format!(
            "  conflict  {}: {}; left alone{}\n",
            c.path,
            c.reason,
            if c.forceable {
                " (--force restores it)"
            } else {
                ""
            }
        ));
    }
    o.push_str(&format!(
        "\n{} restore, {} mode, {} delete, {} recreate, {} conflict(s), {} already as at that point\n",
        h.count(Action::Restore),
        h.count(Action::Mode),
        h.count(Action::Delete),
        h.count(Action::Recreate),
        h.conflicts.len(),
        h.already_restored
    ));
    if h.unclaimed.is_some() {
        o.push_str("Only the change's files are touched; one changed again since the change was found is a conflict (--force restores it).\n");
    } else {
        o.push_str("Files changed outside the session before its last snapshot, and files never snapshotted, cannot be restored this way.\n");
    }
    match &h.applied {
        None => o.push_str("(dry run: nothing was changed)\n"),
        Some(d) => {
            for f in &d.failed {
                o.push_str(&format!("  FAILED    {}: {}\n", f.path, f.reason));
            }
            let left = if h.conflicts.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} conflict(s) left alone (listed above)",
                    h.conflicts.len()
                )
            };
            match &d.recorded_session {
                Some(id) => o.push_str(&format!(
                    "Applied {} of {} change(s){left}. Recorded as session {id} (undo: tacho session rollback {id} --yes).\n",
                    d.done,
                    h.plan.len(),
                )),
                None => o.push_str(&format!(
                    "Nothing to change{left}: nothing was done, and nothing was recorded.\n"
                )),
            }
        }
    }
    if let Some(c) = &h.conversation {
        let verb = if c.written {
            "forked"
        } else {
            "would be forked"
        };
        o.push_str(&format!(
            "Conversation {verb} before call {} as {} session {} ({}; the original {} is unchanged)\n",
            c.before_call, c.agent, c.session, c.file, c.from
        ));
        if c.written && !c.resume.is_empty() {
            o.push_str(&format!("Resume it: {}\n", c.resume));
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollback::{AppliedView, Elsewhere, PlanChange, PlanConflict, PlanFile};
    use tacho_git::rollback::Conflict;

    fn file(kind: &'static str) -> Option<PlanFile> {
        Some(PlanFile {
            kind,
            blob: "b".into(),
            mode: Some(if kind == "executable" { "755" } else { "644" }.into()),
        })
    }

    /// Every part of a plan's text: children (one running), an excluded child, steps
    /// without a before-state, no later snapshot, a forced change, a mode change, both
    /// kinds of conflict, and a failure when applied.
    #[test]
    fn a_plan_says_everything_it_holds() {
        let mut v = RollbackView {
            session: "ses_p".into(),
            workspace: "/w".into(),
            to_snapshot: "0123456789abcdef".into(),
            to_snapshot_at_unix_ns: 0,
            before_step: None,
            unclaimed: None,
            paths: vec!["src".into(), "README.md".into()],
            pre_snapshot: "fedcba9876543210".into(),
            pre_snapshot_files: 1234,
            sessions: vec!["ses_p".into(), "ses_c1".into(), "ses_c2".into()],
            excluded_sessions: vec![Elsewhere {
                session: "ses_x".into(),
                workspace: "/else".into(),
            }],
            running: vec!["ses_c2".into()],
            without_before_state: vec![1, 3],
            no_later_snapshot: true,
            plan: vec![
                PlanChange {
                    path: "a.rs".into(),
                    action: Action::Restore,
                    now: file("file"),
                    then: file("file"),
                    forced: true,
                },
                PlanChange {
                    path: "run.sh".into(),
                    action: Action::Mode,
                    now: file("executable"),
                    then: file("file"),
                    forced: false,
                },
            ],
            conflicts: vec![
                PlanConflict {
                    path: "b.rs".into(),
                    reason: "changed outside the session".into(),
                    forceable: true,
                },
                PlanConflict {
                    path: "c.bin".into(),
                    reason: "never snapshotted".into(),
                    forceable: false,
                },
            ],
            already_restored: 2,
            applied: None,
            conversation: None,
        };
        assert_eq!(
            plan(&v),
            "Rollback of ses_p to its first snapshot (snapshot 0123456789ab, 1970-01-01T00:00:00Z)
Workspace: /w
Only files at or under: src, README.md (the rest stays as it is)
Workspace now: snapshot fedcba987654 (1,234 files) — rolling back can be undone from it
Child sessions in the same workspace, included:
  ses_c1
  ses_c2 (still running)
Excluded child session ses_x: worked in /else
note: steps 1, 3 have no before-state (no snapshot was taken before them): what they changed before snapshot 0123456789ab stays as it is
note: no snapshot after this point; changes are known from edit events only

  restore   a.rs  (forced over an outside change)
  mode      run.sh (executable 755 → file 644)
  conflict  b.rs: changed outside the session; left alone (--force restores it)
  conflict  c.bin: never snapshotted; left alone

1 restore, 1 mode, 0 delete, 0 recreate, 2 conflict(s), 2 already as at that point
Files changed outside the session before its last snapshot, and files never snapshotted, cannot be restored this way.
(dry run: nothing was changed)
"
        );
        v.applied = Some(AppliedView {
            done: 1,
            failed: vec![Conflict {
                path: "run.sh".into(),
                reason: "changed since planning".into(),
                forceable: false,
            }],
            removed_dirs: Vec::new(),
            recorded_session: Some("ses_r".into()),
            post_snapshot: "0".into(),
        });
        assert!(plan(&v).ends_with(
            "  FAILED    run.sh: changed since planning
Applied 1 of 2 change(s); 2 conflict(s) left alone (listed above). Recorded as session ses_r (undo: tacho session rollback ses_r --yes).
"
        ));
    }
}
