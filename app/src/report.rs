//! `tacho audit report`: what a reviewer reads about one session, gathered from the
//! log (graph, risk, goals, integrity) and the snapshot store (the files changed,
//! with their diffs). Rendering is `render::report`.

use tacho_git::snapshot::{FileDiff, relative_path};
use tacho_projections::{ExecutionGraph, RiskAssessment, RollbackPoints};
use tacho_schema::EventBody;
use tacho_store::StoreError;

use crate::{GoalStatus, SessionGraph, Tacho};

/// Everything the report shows.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    pub session: String,
    pub graph: ExecutionGraph,
    pub risk: RiskAssessment,
    pub goals: Vec<GoalStatus>,
    /// Why the goals could not be assessed, if so.
    pub goals_note: Option<String>,
    /// The files the session changed: exactly those the risk assessment counts (the
    /// graph's `files`), with their line counts, in path order.
    pub files: Vec<ChangedFile>,
    /// The workspace's changes from the session's first snapshot to its last (the
    /// diffs of `files`).
    pub changes: Vec<FileDiff>,
    /// The two snapshots compared (first, last).
    pub changes_between: Option<(String, String)>,
    /// Why no diff can be shown, if so.
    pub changes_note: Option<String>,
    pub integrity: Integrity,
    /// The session's events could be read to their end (else only the integrity
    /// section has anything to say).
    pub readable: bool,
    pub generated_unix_ns: i64,
    /// The inputs and outputs of the first [`CALLS_SHOWN`] tool calls, in graph order,
    /// each cut to [`SHOWN_BYTES_MAX`] (the log keeps them whole; `audit export` gives
    /// them whole).
    pub calls: Vec<CallIo>,
    /// Tool calls past the first [`CALLS_SHOWN`], whose inputs and outputs are left out.
    pub calls_hidden: usize,
    /// Every decision on a goal (completion accepted or refused, pause, resume, block).
    pub gates: Vec<GateDecision>,
    /// Where the session can be rolled back to.
    pub rollback: RollbackPoints,
    /// Sessions recorded as this one's children (subagents, branches).
    pub children: Vec<ChildSession>,
    /// tacho's rollbacks that undid this session's changes (alone, or with the
    /// session it belongs to), oldest first.
    pub rolled_back_by: Vec<RolledBackBy>,
}

/// A rollback tacho applied to a session: the rollback's own session, when, and what
/// it did to the files (its `rollback.applied`, which only tacho writes).
#[derive(Debug, Clone, serde::Serialize)]
pub struct RolledBackBy {
    pub session: String,
    pub at_unix_ns: i64,
    /// The session named as the one rolled back (this one, or its ancestor).
    pub rolled_back: String,
    /// To the snapshot before this step (none: the session's first snapshot).
    pub before_step: Option<u64>,
    pub restored: u64,
    pub deleted: u64,
    pub recreated: u64,
    pub modes: u64,
    /// Paths it left as they were (a conflict, or a failure).
    pub skipped: usize,
}

/// Tool calls whose inputs and outputs a report shows (the first ones): bounds the
/// report and a server's memory whatever the session's length.
pub const CALLS_SHOWN: usize = 2000;
/// A tool input or output longer than this is cut in a report.
pub const SHOWN_BYTES_MAX: usize = 64 * 1024;

/// A tool call's input (pretty-printed when it is JSON) and output, as a report shows
/// them.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CallIo {
    pub call_id: String,
    pub input: Option<String>,
    pub input_cut: bool,
    pub output: Option<String>,
    pub output_cut: bool,
}

/// A decision on a goal, as recorded.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GateDecision {
    pub seq: u64,
    pub time_unix_ns: i64,
    pub goal: String,
    pub action: tacho_schema::GoalAction,
    pub accepted: bool,
    /// A resume: a `pause` update not accepted (the pause no longer holds). Shown as
    /// a resume, not as a refused pause.
    pub resume: bool,
    pub reason: Option<String>,
    pub details: Vec<String>,
}

/// A child session, by id and title.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ChildSession {
    pub session: String,
    pub title: Option<String>,
}

/// `s` cut to at most `max` bytes on a character boundary, and whether it was cut.
fn cut(s: String, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (s.get(..end).unwrap_or_default().to_string(), true)
}

/// How a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileChangeKind {
    Created,
    Deleted,
    Renamed,
    Modified,
    /// Only its kind changed (executable bit, file and link).
    Mode,
}

impl FileChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FileChangeKind::Created => "created",
            FileChangeKind::Deleted => "deleted",
            FileChangeKind::Renamed => "renamed",
            FileChangeKind::Modified => "modified",
            FileChangeKind::Mode => "mode",
        }
    }
}

/// One file the session changed, as the risk assessment counts it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ChangedFile {
    /// The name the graph keeps it under: the path an edit event used, else the
    /// workspace-relative path the snapshots show.
    pub path: String,
    pub change: FileChangeKind,
    /// For a rename an edit event reported: the path it had.
    pub renamed_from: Option<String>,
    pub lines_added: u64,
    pub lines_removed: u64,
    /// Edit events that named it (0: seen only in the snapshots).
    pub edits: u64,
    /// Seen changing in the snapshots with no edit event naming it.
    pub observed: bool,
    /// The path of its entry in `changes`, when the snapshots show it changed from
    /// the first to the last.
    pub diff: Option<String>,
}

/// What the record's verification found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Integrity {
    pub events: u64,
    pub batches: u64,
    /// The chain value after the last batch, hex: what a verified copy must end with.
    pub head: String,
    /// Every finding of the log, replay and projection checks (empty: verified).
    pub findings: Vec<String>,
}

impl Tacho {
    /// The report of a session. A record that does not verify still gets its report:
    /// the findings, and whatever could be read (nothing of the session when its
    /// events could not be read to their end).
    pub fn report(&self, session: &crate::SessionId) -> Result<Report, StoreError> {
        let v = self.verify_session(session)?;
        let SessionGraph { graph, risk } = SessionGraph::of(match v.read_error {
            None => self.graph(session)?,
            Some(_) => tacho_projections::ExecutionGraph::new(session),
        });
        let (goals, goals_note) = match (&v.read_error, self.goal_statuses(session)) {
            (None, Ok(g)) => (g, None),
            (None, Err(e)) => (Vec::new(), Some(e.to_string())),
            (Some(_), _) => (Vec::new(), None),
        };
        let mut findings: Vec<String> = v
            .log_errors()
            .map(|f| format!("{} (offset {})", f.message, f.offset.unwrap_or(0)))
            .collect();
        if let Some(e) = &v.read_error {
            findings.push(format!(
                "the session could not be read to its end, so nothing of it is shown: {e}"
            ));
        }
        findings.extend(
            v.replay
                .findings
                .iter()
                .map(|f| format!("event #{}: {}", f.seq, f.message)),
        );
        if let crate::ProjectionCheck::Failed { problem, .. } = &v.projection {
            findings.push(format!("stored projection: {problem}"));
        }
        let integrity = Integrity {
            events: v.log.events,
            batches: v.log.batches,
            head: tacho_store::hex(&v.log.chain),
            findings,
        };
        let (changes, changes_between, changes_note) = self.net_changes(&graph);
        let (calls, gates) = if v.read_error.is_none() {
            self.calls_and_gates(session, &graph)?
        } else {
            (Vec::new(), Vec::new())
        };
        let calls_total: usize = graph.steps.iter().map(|s| s.tools.len()).sum();
        let (children, rolled_back_by) = self
            .related(session, graph.workspace.as_deref())
            .unwrap_or_default();
        let files = changed_files(&graph, &changes);
        Ok(Report {
            calls,
            calls_hidden: calls_total.saturating_sub(CALLS_SHOWN),
            gates,
            rollback: RollbackPoints::from_graph(&graph),
            children,
            rolled_back_by,
            session: session.to_string(),
            graph,
            risk,
            goals,
            goals_note,
            files,
            changes,
            changes_between,
            changes_note,
            integrity,
            readable: v.read_error.is_none(),
            generated_unix_ns: self.now(),
        })
    }

    /// The sessions recorded as `session`'s children (newest first), and tacho's
    /// rollbacks of it (oldest first): read from the session index (parents, sources
    /// and workspaces), then the own events of the rollback sessions of its workspace
    /// (a rollback is made in the workspace it restores).
    fn related(
        &self,
        session: &str,
        workspace: Option<&str>,
    ) -> Result<(Vec<ChildSession>, Vec<RolledBackBy>), StoreError> {
        let mut children = Vec::new();
        let mut rollbacks = Vec::new();
        self.session_index()?.for_each_newest_first(|e| {
            if let Some(f) = e.facts() {
                if f.parent.as_deref() == Some(session) {
                    children.push(ChildSession {
                        session: e.session().to_string(),
                        title: f.title.clone(),
                    });
                }
                if f.source.as_deref() == Some("tacho-rollback")
                    && workspace.is_some()
                    && f.workspace.as_deref() == workspace
                {
                    rollbacks.push(e.session().to_string());
                }
            }
            true
        });
        let mut by = Vec::new();
        for id in rollbacks {
            // A rollback that does not read is not named here (its own page says why).
            let Ok(events) = self.events(&id) else {
                continue;
            };
            for e in events {
                if let EventBody::RollbackApplied(r) = e.event.body
                    && (r.rolled_back == session || r.sessions.iter().any(|s| s == session))
                {
                    by.push(RolledBackBy {
                        session: id.clone(),
                        at_unix_ns: e.event.time_unix_ns,
                        rolled_back: r.rolled_back,
                        before_step: r.before_step,
                        restored: r.restored,
                        deleted: r.deleted,
                        recreated: r.recreated,
                        modes: r.modes,
                        skipped: r.skipped.len(),
                    });
                }
            }
        }
        by.sort_by(|a, b| (a.at_unix_ns, &a.session).cmp(&(b.at_unix_ns, &b.session)));
        Ok((children, by))
    }

    /// The inputs and outputs of the calls a report shows, and the goal decisions.
    fn calls_and_gates(
        &self,
        session: &str,
        g: &ExecutionGraph,
    ) -> Result<(Vec<CallIo>, Vec<GateDecision>), StoreError> {
        let order: Vec<&str> = g
            .steps
            .iter()
            .flat_map(|s| s.tools.iter())
            .take(CALLS_SHOWN)
            .map(|c| c.call_id.as_str())
            .collect();
        let mut io: std::collections::BTreeMap<&str, CallIo> = order
            .iter()
            .map(|id| {
                (
                    *id,
                    CallIo {
                        call_id: (*id).to_string(),
                        ..CallIo::default()
                    },
                )
            })
            .collect();
        let mut gates = Vec::new();
        self.for_each_event(session, |e| match e.event.body {
            EventBody::ToolCall(c) => {
                if let (Some(slot), Some(i)) = (io.get_mut(c.call_id.as_str()), c.input) {
                    let pretty = serde_json::from_str::<serde_json::Value>(&i)
                        .ok()
                        .and_then(|v| serde_json::to_string_pretty(&v).ok())
                        .unwrap_or(i);
                    (slot.input, slot.input_cut) = {
                        let (t, c) = cut(pretty, SHOWN_BYTES_MAX);
                        (Some(t), c)
                    };
                }
            }
            EventBody::ToolResult(r) => {
                if let (Some(slot), Some(o)) = (io.get_mut(r.call_id.as_str()), r.output)
                    && slot.output.is_none()
                {
                    let (t, c) = cut(o, SHOWN_BYTES_MAX);
                    (slot.output, slot.output_cut) = (Some(t), c);
                }
            }
            EventBody::GoalUpdate(u) => gates.push(GateDecision {
                seq: e.seq,
                time_unix_ns: e.event.time_unix_ns,
                goal: u.goal,
                resume: u.action == tacho_schema::GoalAction::Pause && !u.accepted,
                action: u.action,
                accepted: u.accepted,
                reason: u.reason,
                details: u.details,
            }),
            _ => {}
        })?;
        let calls = order.iter().filter_map(|id| io.remove(id)).collect();
        Ok((calls, gates))
    }

    /// The changes from the first snapshot of the session's (first) workspace to its
    /// last, with diffs.
    fn net_changes(
        &self,
        g: &ExecutionGraph,
    ) -> (Vec<FileDiff>, Option<(String, String)>, Option<String>) {
        let Some(first) = g.snapshots.first() else {
            let note = (!g.files.is_empty()).then(|| {
                "No diff can be shown: the session recorded no snapshot, so the files are those its edit events reported.".to_string()
            });
            return (Vec::new(), None, note);
        };
        let Some(last) = g.snapshots.iter().rfind(|s| s.workspace == first.workspace) else {
            return (Vec::new(), None, None);
        };
        let between = Some((first.id.clone(), last.id.clone()));
        if first.id == last.id {
            let note = (!g.files.is_empty()).then(|| {
                "No diff can be shown: the session's snapshots are all the same (or it recorded one), so the files are those its edit events reported.".to_string()
            });
            return (Vec::new(), between, note);
        }
        match self
            .snapshots()
            .and_then(|s| s.unified_diff(&first.id, &last.id))
        {
            Ok(d) => (d, between, None),
            Err(e) => (
                Vec::new(),
                between,
                Some(format!("the snapshot store could not be read: {e}")),
            ),
        }
    }
}

/// The graph's files (what the risk assessment counts), each with the snapshots' diff
/// that shows it, when there is one.
fn changed_files(g: &ExecutionGraph, changes: &[FileDiff]) -> Vec<ChangedFile> {
    let ws = g
        .snapshots
        .first()
        .map(|s| s.workspace.as_str())
        .or(g.workspace.as_deref())
        .map(std::path::Path::new);
    g.files
        .iter()
        .map(|(path, f)| {
            let rel = ws
                .and_then(|ws| relative_path(ws, path).ok())
                .unwrap_or_else(|| path.clone());
            ChangedFile {
                path: path.clone(),
                change: if f.deleted {
                    FileChangeKind::Deleted
                } else if f.created {
                    FileChangeKind::Created
                } else if f.renamed_from.is_some() {
                    FileChangeKind::Renamed
                } else if f.mode_changed && f.lines_added + f.lines_removed == 0 {
                    FileChangeKind::Mode
                } else {
                    FileChangeKind::Modified
                },
                renamed_from: f.renamed_from.clone(),
                lines_added: f.lines_added,
                lines_removed: f.lines_removed,
                edits: f.edits,
                observed: f.observed,
                diff: changes
                    .iter()
                    .find(|c| c.path == rel)
                    .map(|c| c.path.clone()),
            }
        })
        .collect()
}
