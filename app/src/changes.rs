//! What the session's snapshots show changed, merged into its graph: changes made by
//! shell commands (or anything that reported no edit) count like reported edits, and
//! changes no tool call claims (SPEC §8.1) are recorded apart.

use tacho_git::snapshot::{ChangeKind, SnapshotError, relative_path};
use tacho_projections::{
    ExecutionGraph, ObservedChange, UnclaimedChange, UnclaimedFile, verification_kind,
};

/// What the snapshots show: changes a tool call claims, and those none claims.
#[derive(Debug, Default)]
pub(crate) struct Observed {
    pub claimed: Vec<ObservedChange>,
    pub unclaimed: Vec<UnclaimedChange>,
}

fn change_name(c: ChangeKind) -> &'static str {
    match c {
        ChangeKind::Created => "created",
        ChangeKind::Modified => "modified",
        ChangeKind::Deleted => "deleted",
        ChangeKind::Mode => "mode",
    }
}

use crate::Tacho;

/// Who made the changes between two consecutive snapshots (seqs `a`, `b`) of a
/// session: whether a tool call claims them (`ExecutionGraph::claimed_between`), the
/// step that started between them (the last), and that step's last tool call before
/// `b` that is not a verification run (the call that most plausibly made them), else
/// `b` itself.
pub(crate) struct PairOrigin<'g> {
    pub claimed: bool,
    pub step: Option<&'g tacho_projections::StepNode>,
    pub seq: u64,
}

pub(crate) fn pair_origin(g: &ExecutionGraph, a: u64, b: u64) -> PairOrigin<'_> {
    let claimed = g.claimed_between(a, b);
    let step = g.steps.iter().rfind(|s| s.start_seq > a && s.start_seq < b);
    let seq = step
        .and_then(|s| {
            s.tools
                .iter()
                .filter(|t| t.seq < b)
                .filter(|t| {
                    t.target
                        .as_deref()
                        .is_none_or(|c| verification_kind(c).is_none())
                })
                .map(|t| t.seq)
                .next_back()
        })
        .unwrap_or(b);
    PairOrigin { claimed, step, seq }
}

impl Tacho {
    /// The changes between consecutive snapshots of the session's workspace, each
    /// attributed to the step it happened in and to that step's last tool call that is
    /// not a verification run (the call that most plausibly made it), else to the
    /// later snapshot. A change between two snapshots no tool call claims
    /// (`ExecutionGraph::claimed_between`) is not attributed: it is returned apart.
    /// Sessions without two snapshots have nothing to add.
    /// `fresh`: diffs computed from the snapshot objects, never read from the cache
    /// (evidence for others).
    pub(crate) fn observed_changes(
        &self,
        g: &ExecutionGraph,
        fresh: bool,
    ) -> Result<Observed, SnapshotError> {
        let Some(first) = g.snapshots.first() else {
            return Ok(Observed::default());
        };
        let ws = std::path::PathBuf::from(&first.workspace);
        let snaps: Vec<_> = g
            .snapshots
            .iter()
            .filter(|s| s.workspace == first.workspace)
            .collect();
        if snaps.len() < 2 {
            return Ok(Observed::default());
        }
        let store = self.snapshots()?;
        // The keys edit events used, by workspace-relative path.
        let keys: std::collections::BTreeMap<String, String> = g
            .files
            .keys()
            .filter_map(|k| relative_path(&ws, k).ok().map(|r| (r, k.clone())))
            .collect();
        let mut out = Observed::default();
        for pair in snaps.windows(2) {
            let [a, b] = pair else { continue };
            if a.id == b.id {
                continue;
            }
            let PairOrigin { claimed, step, seq } = pair_origin(g, a.seq, b.seq);
            let mut unclaimed = Vec::new();
            let diff = if fresh {
                store.diff_uncached(&a.id, &b.id)?
            } else {
                store.diff(&a.id, &b.id)?
            };
            for c in diff {
                let key = keys.get(&c.path).cloned().unwrap_or_else(|| c.path.clone());
                // Nothing running claims it, and no edit event named the file then.
                if !claimed && !g.edited_between(&key, a.seq, b.seq) {
                    unclaimed.push(UnclaimedFile {
                        change: change_name(c.change).to_owned(),
                        path: c.path,
                        lines_added: c.lines_added,
                        lines_removed: c.lines_removed,
                    });
                    continue;
                }
                out.claimed.push(ObservedChange {
                    key,
                    created: c.change == ChangeKind::Created,
                    deleted: c.change == ChangeKind::Deleted,
                    mode_only: c.change == ChangeKind::Mode,
                    lines_added: c.lines_added,
                    lines_removed: c.lines_removed,
                    seq,
                    step_start_seq: step.map(|s| s.start_seq),
                });
            }
            if !unclaimed.is_empty() {
                out.unclaimed.push(UnclaimedChange {
                    after_seq: a.seq,
                    before_seq: b.seq,
                    from_snapshot: a.id.clone(),
                    to_snapshot: b.id.clone(),
                    found_unix_ns: b.at_unix_ns,
                    files: unclaimed,
                });
            }
        }
        Ok(out)
    }
}
