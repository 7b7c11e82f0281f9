//! Rollback points: where a session can be restored to, joined with what each step did.

use serde::Serialize;

use crate::graph::{ExecutionGraph, SnapshotNode, Tokens, UnclaimedFile};

/// A step and the snapshot that holds the workspace as it was before the step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RollbackPoint {
    pub step: u64,
    pub started_unix_ns: i64,
    pub duration_ms: Option<u64>,
    pub tools: u64,
    pub tokens: Tokens,
    /// Files edit events reported during the step.
    pub files: Vec<String>,
    /// The latest snapshot recorded before the step started; `None` means the step
    /// cannot be targeted (nothing was snapshotted before it).
    pub snapshot: Option<SnapshotNode>,
}

/// A change no tool call made (SPEC §8.1), undoable on its own: restoring its files
/// to their state in the earlier snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnclaimedPoint {
    /// Its number in the list, from 1 (`--unclaimed N`).
    pub index: usize,
    pub after_seq: u64,
    pub before_seq: u64,
    pub from_snapshot: String,
    pub to_snapshot: String,
    pub found_unix_ns: i64,
    pub files: Vec<UnclaimedFile>,
    /// The command that undoes it.
    pub undo: String,
}

/// Every point of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RollbackPoints {
    pub session: String,
    pub workspace: Option<String>,
    /// The first snapshot: what a whole-session rollback restores. It is the
    /// session's true baseline only when no step precedes it (see
    /// `without_before_state`).
    pub baseline: Option<SnapshotNode>,
    pub points: Vec<RollbackPoint>,
    /// Steps with no snapshot before them (the session's first snapshot failed or
    /// came late): no rollback can undo what they changed before the first snapshot.
    pub without_before_state: Vec<u64>,
    /// Changes no tool call made, each undoable on its own.
    pub unclaimed: Vec<UnclaimedPoint>,
}

impl RollbackPoints {
    /// The points of a session's graph.
    pub fn from_graph(g: &ExecutionGraph) -> Self {
        // Implicit steps (tool calls outside any recorded step) are not points: their
        // numbers are the graph's, not the agent's, and may repeat a recorded one.
        let points = g
            .steps
            .iter()
            .filter(|s| !s.implicit)
            .map(|s| RollbackPoint {
                step: s.number,
                started_unix_ns: s.started_unix_ns,
                duration_ms: s.duration_ms(),
                tools: s.tools.len() as u64,
                tokens: s.tokens,
                files: s.edits.clone(),
                snapshot: g
                    .snapshots
                    .iter()
                    .rev()
                    .find(|n| n.seq < s.start_seq)
                    .cloned(),
            })
            .collect::<Vec<RollbackPoint>>();
        RollbackPoints {
            session: g.session.clone(),
            workspace: g.workspace.clone(),
            baseline: g.snapshots.first().cloned(),
            without_before_state: points
                .iter()
                .filter(|p| p.snapshot.is_none())
                .map(|p| p.step)
                .collect(),
            points,
            unclaimed: g
                .unclaimed
                .iter()
                .enumerate()
                .map(|(i, u)| UnclaimedPoint {
                    index: i + 1,
                    after_seq: u.after_seq,
                    before_seq: u.before_seq,
                    from_snapshot: u.from_snapshot.clone(),
                    to_snapshot: u.to_snapshot.clone(),
                    found_unix_ns: u.found_unix_ns,
                    files: u.files.clone(),
                    undo: format!("tacho session rollback {} --unclaimed {}", g.session, i + 1),
                })
                .collect(),
        }
    }

    /// The point of step `n`.
    pub fn step(&self, n: u64) -> Option<&RollbackPoint> {
        self.points.iter().find(|p| p.step == n)
    }

    /// Unclaimed change `n` (from 1).
    pub fn unclaimed(&self, n: usize) -> Option<&UnclaimedPoint> {
        self.unclaimed.iter().find(|u| u.index == n)
    }
}
