//! Rollback and its orchestration: which sessions a rollback includes, the snapshots
//! and edit events after the point, the workspace as it is now, one plan that both a
//! dry run and the real run use, and the rollback recorded as a session of its own
//! (which can itself be rolled back).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tacho_git::rollback::{self, Action, Applied, Conflict, Plan, PlanInput};
use tacho_git::snapshot::{FileEntry, FileKind, Files, Snapshot, SnapshotError, relative_path};
use tacho_projections::{ExecutionGraph, RollbackPoints, SnapshotNode};
use tacho_schema::{
    EndReason, EventBody, EventView, ExcludedPath, RollbackApplied, SessionEnd, SessionStart,
    SnapshotReason,
};
use tacho_store::{Durability, StoreError};

use crate::Tacho;
use crate::error::{ErrorKind, Kind, Namer, Operation, neutral};
use crate::snapshots::{SnapshotOpError, taken_event};

/// Why a rollback could not be planned or applied.
#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    #[error("session {session} has no step {step} (steps: {range})")]
    NoStep {
        session: String,
        step: u64,
        range: String,
    },
    #[error("{}", neutral(self))]
    NoSnapshotBefore { session: String, step: u64 },
    #[error("session {0} recorded no snapshot: files it changed cannot be restored this way")]
    NoSnapshot(String),
    #[error(
        "session {session} has no unclaimed change {n} ({total} recorded; `--list` shows them)"
    )]
    NoUnclaimed {
        session: String,
        n: usize,
        total: usize,
    },
    #[error("{}", neutral(self))]
    Running(Vec<String>),
    #[error(
        "the workspace {} now resolves to {}: a directory on the way was replaced by a symbolic link since the session; refusing to write there",
        recorded.display(),
        now.display()
    )]
    WorkspaceMoved { recorded: PathBuf, now: PathBuf },
    #[error("a rollback of this workspace is in progress (session {0}); wait for it to finish")]
    InProgress(String),
    #[error(
        "session {session} was fetched from {remote}: its workspace path ({workspace}) is what that remote's record says, and a rollback writes only into a workspace this machine recorded; restore its files by hand from `tacho session rollback {session} --list`"
    )]
    Fetched {
        session: String,
        remote: String,
        workspace: String,
    },
    /// A `--path` that is not a path inside the workspace.
    #[error(
        "{given:?} is not a path inside the workspace {workspace} ({why}; give it relative to the workspace, as `--list` and the plan name files, or absolute under it)"
    )]
    BadPath {
        given: String,
        workspace: String,
        why: String,
    },
    /// `--conversation`: there is no conversation to fork at that point.
    #[error("no conversation of session {session} to fork: {why}")]
    NoConversation { session: String, why: String },
    /// `--conversation`: the agent's session file could not be read or the fork not
    /// written.
    #[error("{}: {source}", path.display())]
    ConversationIo {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Take(#[from] SnapshotOpError),
}

impl Kind for RollbackError {
    fn kind(&self) -> ErrorKind {
        match self {
            RollbackError::InProgress(_) => ErrorKind::Busy,
            RollbackError::Store(e) => e.kind(),
            RollbackError::Snapshot(e) => e.kind(),
            RollbackError::Take(e) => e.kind(),
            RollbackError::NoStep { .. }
            | RollbackError::NoSnapshotBefore { .. }
            | RollbackError::NoSnapshot(_)
            | RollbackError::NoUnclaimed { .. }
            | RollbackError::Running(_)
            | RollbackError::WorkspaceMoved { .. }
            | RollbackError::Fetched { .. }
            | RollbackError::BadPath { .. }
            | RollbackError::NoConversation { .. } => ErrorKind::Input,
            RollbackError::ConversationIo { .. } => ErrorKind::Io,
        }
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        match self {
            RollbackError::NoSnapshotBefore { session, step } => write!(
                f,
                "no snapshot was recorded before step {step} of {session}: that point cannot be restored (see {})",
                name.operation(Operation::ListRollbackPoints)
            ),
            RollbackError::Running(sessions) => write!(
                f,
                "refusing to roll back while included sessions are still running: {} (if their agent has stopped without recording its end, {} records it; {} shows the plan)",
                sessions.join(", "),
                name.operation(Operation::EndSession),
                name.operation(Operation::PlanRollback)
            ),
            RollbackError::Take(e) => e.fmt_named(f, name),
            other => fmt::Display::fmt(other, f),
        }
    }
}

/// A fork prepared and not yet written ([`Tacho::prepare_fork`]).
pub struct PreparedFork {
    pub view: ConversationFork,
    bytes: Vec<u8>,
    /// The directory of the agent's session file, held open.
    dir: std::os::fd::OwnedFd,
    dir_path: PathBuf,
    name: String,
}

/// The agent's conversation forked at a rollback's point (`--conversation`): a new
/// session of the agent's own, beside the original, which is never changed.
#[derive(Debug, Clone, Serialize)]
pub struct ConversationFork {
    pub agent: String,
    /// The agent's file of the session's conversation.
    pub from: String,
    /// The new file (written only when the rollback is applied).
    pub file: String,
    /// The new session's id, and the command that resumes it in the workspace.
    pub session: String,
    pub resume: String,
    /// The conversation ends just before the model response that made this call (the
    /// step's first).
    pub before_call: String,
    pub written: bool,
}

/// A session whose changes the rollback includes.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    /// Still running (no `session.end`).
    pub running: bool,
    /// Paths of edit events: (seq, time, workspace-relative path).
    edits: Vec<(u64, i64, String)>,
    graph: ExecutionGraph,
}

/// The included sessions, the excluded descendants, and the rollback sessions of the
/// same workspace (candidates for `own_rollbacks`).
type Family = (Vec<Member>, Vec<Elsewhere>, Vec<String>);

/// One of tacho's own rollbacks: when, and each file it changed as it left it.
struct OwnRollback {
    at: i64,
    changed: BTreeMap<String, Option<FileEntry>>,
}

/// A descendant session that worked in another directory: excluded, but named.
#[derive(Debug, Clone, Serialize)]
pub struct Elsewhere {
    pub session: String,
    pub workspace: String,
}

/// A rollback planned: everything a dry run shows and the real run applies.
#[derive(Debug)]
pub struct Prepared {
    pub session: String,
    /// The workspace, canonical.
    pub workspace: PathBuf,
    /// The point restored to.
    pub target: SnapshotNode,
    pub step: Option<u64>,
    /// The unclaimed change undone (`--unclaimed N`): only its files.
    pub unclaimed: Option<usize>,
    /// Only files at or under these (`--path`); all when empty.
    pub paths: Vec<String>,
    /// The session first, then its descendants in the same workspace.
    pub members: Vec<Member>,
    pub elsewhere: Vec<Elsewhere>,
    /// The workspace as it is now: rolling back can be undone from it.
    pub pre: Snapshot,
    /// No snapshot after the point: changes are known from edit events only.
    pub no_later: bool,
    /// Steps that began before the point restored to and have no snapshot before
    /// them (a whole-session rollback of a session whose first snapshot failed):
    /// what they changed before it stays.
    pub without_before_state: Vec<u64>,
    pub plan: Plan,
    pub force: bool,
    /// Holds the snapshot store until the rollback is recorded (or not applied): gc
    /// cannot drop the workspace-now snapshot in between.
    _guard: tacho_git::snapshot::WriteGuard,
}

impl Prepared {
    pub fn running(&self) -> impl Iterator<Item = &str> {
        self.members
            .iter()
            .filter(|m| m.running)
            .map(|m| m.id.as_str())
    }
}

/// A rollback applied and recorded.
#[derive(Debug)]
pub struct Done {
    pub applied: Applied,
    /// The session that records the rollback (roll it back to undo this one); `None`
    /// when the plan changed nothing: nothing was done, so nothing is recorded.
    pub session: Option<String>,
    /// The workspace after the rollback.
    pub post: String,
}

/// What a file is (or will be) in a plan: its kind, blob and permission bits.
#[derive(Debug, Clone, Serialize)]
pub struct PlanFile {
    /// `file`, `executable` or `symlink`.
    pub kind: &'static str,
    pub blob: String,
    /// The permission bits in octal (`"600"`, `"755"`); absent for a link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

impl From<FileEntry> for PlanFile {
    fn from(e: FileEntry) -> Self {
        PlanFile {
            kind: e.kind.as_str(),
            blob: e.oid.to_string(),
            mode: (e.kind != FileKind::Link).then(|| format!("{:o}", e.perms)),
        }
    }
}

/// One change of a plan.
#[derive(Debug, Clone, Serialize)]
pub struct PlanChange {
    pub path: String,
    pub action: Action,
    pub now: Option<PlanFile>,
    pub then: Option<PlanFile>,
    /// Changed outside the session, included because of `--force`.
    pub forced: bool,
}

/// A file a plan leaves alone.
#[derive(Debug, Clone, Serialize)]
pub struct PlanConflict {
    pub path: String,
    pub reason: String,
    /// The file changed outside the session: `--force` would restore it.
    pub forceable: bool,
}

/// What applying the plan did.
#[derive(Debug, Clone, Serialize)]
pub struct AppliedView {
    /// Changes applied.
    pub done: usize,
    /// Changes not applied: refused, failed, or changed since planning.
    pub failed: Vec<Conflict>,
    /// Directories removed because the rollback emptied them.
    pub removed_dirs: Vec<String>,
    /// The session that records the rollback (roll it back to undo this one); `None`:
    /// the plan changed nothing, and nothing was recorded.
    pub recorded_session: Option<String>,
    /// The workspace after the rollback.
    pub post_snapshot: String,
}

/// A rollback's plan, and what was applied when it was: the `rollback_plan` record
/// (dry run, or not confirmed) or the `rollback` record (applied).
#[derive(Debug, Clone, Serialize)]
pub struct RollbackView {
    pub session: String,
    pub workspace: String,
    /// The point restored to: its snapshot and when it was taken.
    pub to_snapshot: String,
    pub to_snapshot_at_unix_ns: i64,
    pub before_step: Option<u64>,
    /// The unclaimed change undone (`--unclaimed N`): only its files are restored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unclaimed: Option<usize>,
    /// Only files at or under these paths are restored (`--path`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The workspace as it was before the rollback (it can be undone from it).
    pub pre_snapshot: String,
    pub pre_snapshot_files: u64,
    /// The session first, then its descendants in the same workspace.
    pub sessions: Vec<String>,
    pub excluded_sessions: Vec<Elsewhere>,
    /// Included sessions still running.
    pub running: Vec<String>,
    pub without_before_state: Vec<u64>,
    /// No snapshot after the point: changes are known from edit events only.
    pub no_later_snapshot: bool,
    pub plan: Vec<PlanChange>,
    pub conflicts: Vec<PlanConflict>,
    /// Files the session changed that are already as they were at the point.
    pub already_restored: u64,
    pub applied: Option<AppliedView>,
    /// The agent's conversation forked at the point (`--conversation`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationFork>,
}

impl RollbackView {
    /// The record's type: `rollback` once applied, else `rollback_plan`.
    pub fn record_type(&self) -> &'static str {
        if self.applied.is_some() {
            "rollback"
        } else {
            "rollback_plan"
        }
    }

    /// How many changes of the plan take this action.
    pub fn count(&self, action: Action) -> usize {
        self.plan.iter().filter(|i| i.action == action).count()
    }
}

impl Prepared {
    /// The plan as a view, with what was applied when it was.
    pub fn view(&self, applied: Option<&Done>) -> RollbackView {
        RollbackView {
            session: self.session.clone(),
            workspace: self.workspace.display().to_string(),
            to_snapshot: self.target.id.clone(),
            to_snapshot_at_unix_ns: self.target.at_unix_ns,
            before_step: self.step,
            unclaimed: self.unclaimed,
            paths: self.paths.clone(),
            pre_snapshot: self.pre.id.clone(),
            pre_snapshot_files: self.pre.files,
            sessions: self.members.iter().map(|m| m.id.clone()).collect(),
            excluded_sessions: self.elsewhere.clone(),
            running: self.running().map(str::to_owned).collect(),
            without_before_state: self.without_before_state.clone(),
            no_later_snapshot: self.no_later,
            plan: self
                .plan
                .items
                .iter()
                .map(|i| PlanChange {
                    path: i.path.clone(),
                    action: i.action,
                    now: i.now.map(PlanFile::from),
                    then: i.then.map(PlanFile::from),
                    forced: i.forced,
                })
                .collect(),
            conflicts: self
                .plan
                .conflicts
                .iter()
                .map(|c| PlanConflict {
                    path: c.path.clone(),
                    reason: c.reason.clone(),
                    forceable: c.forceable,
                })
                .collect(),
            already_restored: self.plan.already,
            applied: applied.map(|d| AppliedView {
                done: d.applied.done.len(),
                failed: d.applied.failed.clone(),
                removed_dirs: d.applied.removed_dirs.clone(),
                recorded_session: d.session.clone(),
                post_snapshot: d.post.clone(),
            }),
            conversation: None,
        }
    }
}

fn step_range(p: &RollbackPoints) -> String {
    match (p.points.first(), p.points.last()) {
        (Some(a), Some(b)) => format!("{}..={}", a.step, b.step),
        _ => "none".into(),
    }
}

impl Tacho {
    /// The conversation of `p`'s session as it stood just before its point (step N's
    /// first tool call: the model response that made it is cut, with all after it),
    /// as a new session of the agent's own that the user can resume, prepared: read
    /// and cut, nothing written. Its directory is held open from here until it is
    /// written ([`Tacho::write_fork`]), so nothing swapped in on the way meanwhile
    /// redirects the write. Claude Code and Codex: the agent must keep a session file
    /// its adapter can fork ([`tacho_agents::Adapter::fork_session`]).
    pub fn prepare_fork(&self, p: &Prepared) -> Result<PreparedFork, RollbackError> {
        let none = |why: String| RollbackError::NoConversation {
            session: p.session.clone(),
            why,
        };
        let step = p.step.ok_or_else(|| {
            none(
                "the point is the session's start, and a conversation is forked before a step"
                    .into(),
            )
        })?;
        let g = self.graph(&p.session)?;
        let call = g
            .steps
            .iter()
            .find(|s| s.number == step)
            .and_then(|s| s.tools.first())
            .map(|t| t.call_id.clone())
            .ok_or_else(|| none(format!("step {step} made no tool call")))?;
        let agent_name = g
            .agents
            .first()
            .cloned()
            .ok_or_else(|| none("its agent is not recorded".into()))?;
        let agent = tacho_agents::Agent::parse(&agent_name)
            .ok_or_else(|| none(format!("{agent_name} is not an agent tacho records")))?;
        let places = tacho_agents::adapter::Places::from_env().map_err(|source| {
            RollbackError::ConversationIo {
                path: PathBuf::from("."),
                source,
            }
        })?;
        let from = agent.session_file(&places, &p.session).ok_or_else(|| {
            none(format!(
                "{agent_name} keeps no session file of it here that tacho can fork"
            ))
        })?;
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source: std::io::Error| RollbackError::ConversationIo { path, source }
        };
        let (dir, name) = match (from.parent(), from.file_name().and_then(|n| n.to_str())) {
            (Some(d), Some(n)) => (d.to_path_buf(), n.to_owned()),
            _ => {
                return Err(none(format!(
                    "{}: not a file in a directory",
                    from.display()
                )));
            }
        };
        use rustix::fs::{Mode, OFlags};
        let dir_fd = rustix::fs::open(
            &dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io(&dir)(e.into()))?;
        let bytes = read_regular_at(&dir_fd, &name).map_err(io(&from))?;
        let id = new_uuid();
        let fork = agent
            .fork_session(&bytes, &call, &id)
            .map_err(|why| none(format!("{}: {why}", from.display())))?;
        // A response with several calls is cut whole: refused when that drops a call
        // an earlier step made (the files keep its change; the conversation would not).
        let earlier: Vec<(u64, &str)> = g
            .steps
            .iter()
            .filter(|s| s.number < step)
            .flat_map(|s| s.tools.iter().map(move |t| (s.number, t.call_id.as_str())))
            .filter(|(_, c)| fork.dropped_calls.iter().any(|d| d == c))
            .collect();
        if let Some((m, _)) = earlier.first() {
            return Err(none(format!(
                "step {step}'s call was made in one model response with step {m}'s, and a conversation is cut before a whole response: fork it before step {m}"
            )));
        }
        let new_name = agent.forked_file_name(&from, &id);
        let file = dir.join(&new_name);
        let ws = p.workspace.display().to_string();
        // Printed for the user to run: only for a workspace path without control
        // characters (a terminal shows those otherwise than they run).
        let resume = match agent.resume_command(&id) {
            Some(c) if !ws.chars().any(char::is_control) => {
                format!("cd -- {} && {c}", tacho_agents::settings::shell_quote(&ws))
            }
            _ => String::new(),
        };
        Ok(PreparedFork {
            view: ConversationFork {
                agent: agent_name,
                from: printable_path(&from),
                file: printable_path(&file),
                session: id,
                resume,
                before_call: call,
                written: false,
            },
            bytes: fork.bytes,
            dir: dir_fd,
            dir_path: dir,
            name: new_name,
        })
    }

    /// Writes a prepared fork: a new file in the directory held open (a temporary
    /// name, `O_EXCL`, no link followed, mode 0600, synced, then renamed to its name
    /// without replacing anything, and the directory synced); the original is never
    /// opened for writing. Nothing is left behind when it fails.
    pub fn write_fork(&self, f: &mut PreparedFork) -> Result<(), RollbackError> {
        use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags};
        use std::io::Write;
        let path = f.dir_path.join(&f.name);
        let io = |source: std::io::Error| RollbackError::ConversationIo {
            path: path.clone(),
            source,
        };
        let tmp = format!(".tacho-fork-{}-{}.tmp", std::process::id(), f.view.session);
        let fd = rustix::fs::openat(
            &f.dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io(e.into()))?;
        let written = (|| {
            let mut file = std::fs::File::from(fd);
            file.write_all(&f.bytes)?;
            file.sync_all()?;
            rustix::fs::renameat_with(
                &f.dir,
                tmp.as_str(),
                &f.dir,
                f.name.as_str(),
                RenameFlags::NOREPLACE,
            )?;
            rustix::fs::fsync(&f.dir)?;
            Ok::<_, std::io::Error>(())
        })();
        if let Err(e) = written {
            let _ = rustix::fs::unlinkat(&f.dir, tmp.as_str(), AtFlags::empty());
            return Err(io(e));
        }
        f.view.written = true;
        Ok(())
    }

    /// The recoverable points of a session: steps with the snapshot before them.
    pub fn rollback_points(&self, session: &str) -> Result<RollbackPoints, StoreError> {
        Ok(RollbackPoints::from_graph(&self.graph(session)?))
    }

    /// Plans restoring `session`'s workspace to the state before step `step` (default:
    /// the baseline). Included sessions still running are refused unless
    /// `allow_running` (a dry run only looks).
    pub fn plan_rollback(
        &self,
        session: &str,
        step: Option<u64>,
        force: bool,
        allow_running: bool,
    ) -> Result<Prepared, RollbackError> {
        self.plan_to(session, step, None, &[], force, allow_running)
    }

    /// [`Tacho::plan_rollback`] of only the files at or under `paths` (files or
    /// directories, relative to the workspace or absolute under it): the same plan,
    /// conflict rules and recording, restricted to them; undone as a whole rollback
    /// is (its session records the workspace before it).
    pub fn plan_rollback_within(
        &self,
        session: &str,
        step: Option<u64>,
        paths: &[String],
        force: bool,
        allow_running: bool,
    ) -> Result<Prepared, RollbackError> {
        self.plan_to(session, step, None, paths, force, allow_running)
    }

    /// Plans undoing unclaimed change `n` of `session` (SPEC §8.1, from 1 as `--list`
    /// numbers them): only its files go back to their state in the snapshot before it.
    /// The last known state of those files is the snapshot that found the change, so
    /// a file changed again since (by a tool, or anyone) is a conflict unless `force`.
    pub fn plan_unclaimed_rollback(
        &self,
        session: &str,
        n: usize,
        force: bool,
        allow_running: bool,
    ) -> Result<Prepared, RollbackError> {
        self.plan_to(session, None, Some(n), &[], force, allow_running)
    }

    fn plan_to(
        &self,
        session: &str,
        step: Option<u64>,
        unclaimed: Option<usize>,
        paths: &[String],
        force: bool,
        allow_running: bool,
    ) -> Result<Prepared, RollbackError> {
        let graph = self.graph(session)?;
        // A session fetched from a remote names whatever workspace that remote's
        // record says (`~/.ssh`, another user's checkout): nothing is written there.
        if let Some(origin) = self.origin(session) {
            return Err(RollbackError::Fetched {
                session: session.to_owned(),
                remote: origin.remote,
                workspace: graph.workspace.clone().unwrap_or_default(),
            });
        }
        let points = RollbackPoints::from_graph(&graph);
        // The change undone on its own: from its earlier snapshot to the one that
        // found it.
        let change = match unclaimed {
            Some(n) => {
                let u = points
                    .unclaimed(n)
                    .ok_or_else(|| RollbackError::NoUnclaimed {
                        session: session.to_owned(),
                        n,
                        total: points.unclaimed.len(),
                    })?;
                let node = |seq: u64| graph.snapshots.iter().find(|s| s.seq == seq).cloned();
                let paths: BTreeSet<String> = u.files.iter().map(|f| f.path.clone()).collect();
                match (node(u.after_seq), node(u.before_seq)) {
                    (Some(from), Some(to)) => Some((from, to, paths)),
                    _ => {
                        return Err(RollbackError::NoUnclaimed {
                            session: session.to_owned(),
                            n,
                            total: points.unclaimed.len(),
                        });
                    }
                }
            }
            None => None,
        };
        let target = match (step, &change) {
            (_, Some((from, _, _))) => from.clone(),
            (Some(n), None) => {
                let p = points.step(n).ok_or_else(|| RollbackError::NoStep {
                    session: session.to_owned(),
                    step: n,
                    range: step_range(&points),
                })?;
                p.snapshot
                    .clone()
                    .ok_or_else(|| RollbackError::NoSnapshotBefore {
                        session: session.to_owned(),
                        step: n,
                    })?
            }
            (None, None) => points
                .baseline
                .clone()
                .ok_or_else(|| RollbackError::NoSnapshot(session.to_owned()))?,
        };
        let ws_path = PathBuf::from(&target.workspace);
        // Each `--path` as plans name files: the rule every path an agent or a user
        // names to the snapshot store follows.
        let within = paths
            .iter()
            .map(|p| {
                relative_path(&ws_path, p).map_err(|e| RollbackError::BadPath {
                    given: p.clone(),
                    workspace: target.workspace.clone(),
                    why: e.to_string(),
                })
            })
            .collect::<Result<Vec<String>, RollbackError>>()?;

        // The session, and descendants that worked in the very same directory.
        let (mut members, mut elsewhere, rollback_sessions) =
            self.members(session, graph, &target.workspace, &ws_path)?;
        let closed = self.close_interrupted(&rollback_sessions, session, allow_running)?;
        // A cut-short rollback among the members (the undo it printed, run right after
        // it was killed) is running no more: read the members again.
        if members.iter().any(|m| closed.contains(&m.id)) {
            (members, elsewhere, _) =
                self.members(session, self.graph(session)?, &target.workspace, &ws_path)?;
        }
        let running: Vec<String> = members
            .iter()
            .filter(|m| m.running)
            .map(|m| m.id.clone())
            .collect();
        if !running.is_empty() && !allow_running {
            return Err(RollbackError::Running(running));
        }

        let snaps = self.snapshots()?;
        let target_files = snaps.files(snaps.resolve(&target.id)?)?;
        // Snapshots after the point, oldest first, across the included sessions.
        let mut later: Vec<(i64, u64, String)> = Vec::new();
        for m in members.iter().filter(|_| change.is_none()) {
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
        if let Some((_, to, _)) = &change {
            // Undoing one change: the snapshot that found it is the files' known state.
            later.push((to.at_unix_ns, to.seq, to.id.clone()));
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
        // tacho's own rollbacks of these sessions since their last snapshot are not
        // outside changes: the files they changed are known as they left them.
        if let Some(mut known) = later_files.last().cloned().filter(|_| change.is_none()) {
            let mut moved = false;
            for r in self.own_rollbacks(&rollback_sessions, &members)? {
                if last_time.is_some_and(|t| r.at <= t) {
                    continue;
                }
                for (path, entry) in r.changed {
                    match entry {
                        Some(e) => known.insert(path, e),
                        None => known.remove(&path),
                    };
                    moved = true;
                }
            }
            if moved {
                later_files.push(known);
            }
        }
        let mut edited = BTreeSet::new();
        let mut edited_after_last = BTreeSet::new();
        for m in members.iter().filter(|_| change.is_none()) {
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
        // Files a change no tool call made touched after the point (the user's, another
        // process's): a whole rollback names them as conflicts rather than take them
        // back (SPEC §10.4) — unless an edit event of the sessions names them too. Only
        // in sessions that report their calls or steps: one that reports neither (files
        // changing under a bare `tacho record`) has every change as its own.
        let mut unclaimed_paths: BTreeMap<String, String> = BTreeMap::new();
        let reports_activity =
            |g: &ExecutionGraph| g.steps.iter().any(|s| !s.implicit || !s.tools.is_empty());
        for m in members
            .iter()
            .filter(|m| change.is_none() && reports_activity(&m.graph))
        {
            for u in RollbackPoints::from_graph(&m.graph).unclaimed {
                let after = if m.id == session {
                    u.after_seq >= target.seq
                } else {
                    u.found_unix_ns >= target.at_unix_ns
                };
                if !after {
                    continue;
                }
                for f in u.files.iter().filter(|f| !edited.contains(&f.path)) {
                    unclaimed_paths.entry(f.path.clone()).or_insert_with(|| {
                        format!(
                            "changed by no tool call of the session (its unclaimed change {} of {}): left alone unless --force, or undone alone with --unclaimed",
                            u.index, m.id
                        )
                    });
                }
            }
        }

        // The recorded workspace is canonical: if it resolves elsewhere now, a link
        // replaced part of it, and writes would land outside it.
        if let Ok(now) = ws_path.canonicalize()
            && now != ws_path
        {
            return Err(RollbackError::WorkspaceMoved {
                recorded: ws_path,
                now,
            });
        }
        let guard = self.snapshot_guard()?;
        let (pre, ws) = self.take_snapshot(&ws_path, &[])?;
        let current = snaps.files(pre.tree)?;
        let unprotected: BTreeMap<String, String> = pre
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
            force,
            // Undoing one change: its files only (others the snapshots differ in were
            // claimed by an edit event).
            only: change.as_ref().map(|(_, _, paths)| paths),
            within: &within,
            unclaimed: &unclaimed_paths,
        });
        Ok(Prepared {
            session: session.to_owned(),
            workspace: ws,
            target,
            step,
            unclaimed,
            paths: within,
            members,
            elsewhere,
            pre,
            no_later: later_files.is_empty(),
            without_before_state: if step.is_none() && unclaimed.is_none() {
                points.without_before_state.clone()
            } else {
                Vec::new()
            },
            plan,
            force,
            _guard: guard,
        })
    }

    /// Applies a planned rollback and records it as a session of its own: its baseline
    /// is the workspace before the rollback, so rolling that session back undoes this
    /// one.
    pub fn apply_rollback(&self, p: &Prepared) -> Result<Done, RollbackError> {
        // A plan with nothing to change changes nothing: no session records it (it
        // would only add a rollback to undo and a risk badge to the list).
        if p.plan.items.is_empty() {
            return Ok(Done {
                applied: Applied::default(),
                session: None,
                post: p.pre.id.clone(),
            });
        }
        let snaps = self.snapshots()?;
        let id = self.new_session_id();
        let ws = p.workspace.display().to_string();
        // The intent first, durably, before the first file is touched: a rollback cut
        // short (killed, crashed) leaves a session that names the workspace as it was
        // before, so the next run can say so and the user can undo it; and gc keeps that
        // snapshot, which a session now references. The writer is held to the end, so
        // a rollback in progress is never taken for an abandoned one.
        let mut w = self.log().writer(&id)?;
        let t = self.now();
        w.append_batch(
            &[
                (
                    t,
                    EventBody::SessionStart(SessionStart {
                        agent: Some("tacho".into()),
                        workspace: Some(ws.clone()),
                        title: Some(match (p.unclaimed, p.paths.is_empty()) {
                            (Some(n), _) => {
                                format!("rollback of {} (unclaimed change {n})", p.session)
                            }
                            (None, false) => {
                                format!("rollback of {} (only {})", p.session, p.paths.join(", "))
                            }
                            (None, true) => format!("rollback of {}", p.session),
                        }),
                        source: Some("tacho-rollback".into()),
                        ..SessionStart::default()
                    }),
                ),
                (
                    t,
                    taken_event(&p.pre, &p.workspace, SnapshotReason::PreRollback, None),
                ),
            ],
            Durability::Sync,
        )?;
        let applied = rollback::apply(snaps, &p.workspace, &p.plan)?;
        let (post, _) = self.take_snapshot(&p.workspace, &[])?;
        let done = |a: Action| applied.done.iter().filter(|i| i.action == a).count() as u64;
        let mut skipped: Vec<ExcludedPath> = p
            .plan
            .conflicts
            .iter()
            .chain(&applied.failed)
            .map(|c| ExcludedPath {
                path: c.path.clone(),
                reason: c.reason.clone(),
            })
            .collect();
        skipped.sort_by(|a, b| a.path.cmp(&b.path));
        let t = self.now();
        let events = vec![
            (
                t,
                EventBody::RollbackApplied(RollbackApplied {
                    rolled_back: p.session.clone(),
                    to_snapshot: p.target.id.clone(),
                    before_step: p.step,
                    pre_snapshot: p.pre.id.clone(),
                    sessions: p.members.iter().map(|m| m.id.clone()).collect(),
                    restored: done(Action::Restore),
                    modes: done(Action::Mode),
                    deleted: done(Action::Delete),
                    recreated: done(Action::Recreate),
                    skipped,
                    forced: p.force,
                }),
            ),
            (
                self.now(),
                taken_event(&post, &p.workspace, SnapshotReason::Final, None),
            ),
            (
                self.now(),
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
        w.append_batch(&events, Durability::Sync)?;
        Ok(Done {
            applied,
            session: Some(id),
            post: post.id,
        })
    }

    /// Rollbacks of this workspace that were cut short (no `session.end`, and no
    /// process writing them): each is closed as interrupted, so it can be rolled back
    /// (undone), and the user is told. A rollback still in progress is refused.
    fn close_interrupted(
        &self,
        candidates: &[String],
        session: &str,
        look_only: bool,
    ) -> Result<Vec<String>, RollbackError> {
        let mut closed = Vec::new();
        for id in candidates {
            let events = self.events(id)?;
            if events
                .iter()
                .any(|e| matches!(e.event.body, EventBody::SessionEnd(_)))
            {
                continue;
            }
            let mut w = match self.log().try_writer(id) {
                Ok(w) => w,
                Err(StoreError::Busy { .. }) => {
                    return Err(RollbackError::InProgress(id.clone()));
                }
                Err(e) => return Err(e.into()),
            };
            let pre = events.iter().find_map(|e| match &e.event.body {
                EventBody::SnapshotTaken(t) if t.reason == SnapshotReason::PreRollback => {
                    Some(t.snapshot.clone())
                }
                _ => None,
            });
            let applied = events
                .iter()
                .any(|e| matches!(e.event.body, EventBody::RollbackApplied(_)));
            if look_only {
                self.note(&format!(
                    "note: rollback {id} was interrupted before it finished; a real run records that, and then `tacho session rollback {id} --yes` undoes it"
                ));
                continue;
            }
            // The workspace as the cut-short rollback left it: with it, rolling this
            // session back (to its `pre_rollback` snapshot) knows what to restore.
            let mut closing = Vec::new();
            if let Some(ws) = events.iter().find_map(|e| match &e.event.body {
                EventBody::SessionStart(s) => s.workspace.clone(),
                _ => None,
            }) {
                let ws = PathBuf::from(ws);
                let _guard = self.snapshot_guard()?;
                let (now, path) = self.take_snapshot(&ws, &[])?;
                closing.push((
                    self.now(),
                    taken_event(&now, &path, SnapshotReason::Final, None),
                ));
            }
            closing.push((
                self.now(),
                EventBody::SessionEnd(SessionEnd {
                    reason: EndReason::Error,
                    message: Some(
                        "interrupted: the rollback was cut short (killed or crashed)".into(),
                    ),
                }),
            ));
            w.append_batch(&closing, Durability::Sync)?;
            closed.push(id.clone());
            self.note(&format!(
                "note: rollback {id} was interrupted{} before it finished{}; undo it with `tacho session rollback {id} --yes`, or run the rollback of {session} again to finish it",
                if applied { " after its files were written" } else { "" },
                pre.map(|p| format!(" (the workspace before it is snapshot {p})"))
                    .unwrap_or_default()
            ));
        }
        Ok(closed)
    }

    /// The session and its descendants in the same workspace; also the descendants
    /// elsewhere (excluded, but named).
    fn members(
        &self,
        session: &str,
        graph: ExecutionGraph,
        workspace: &str,
        ws_path: &Path,
    ) -> Result<Family, StoreError> {
        // Parents and sources come from the session index (one file, brought up to
        // date), not from every session's first event.
        let mut children: BTreeMap<String, Vec<(String, Option<String>)>> = BTreeMap::new();
        let mut rollback_sessions = Vec::new();
        for e in self.session_index()?.entries() {
            let Some(f) = e.facts.map(|at| at.facts) else {
                continue;
            };
            if f.source.as_deref() == Some("tacho-rollback")
                && f.workspace.as_deref() == Some(workspace)
            {
                rollback_sessions.push(e.session.clone());
            }
            if let Some(p) = f.parent {
                children
                    .entry(p)
                    .or_default()
                    .push((e.session, f.workspace));
            }
        }
        let mut out = vec![self.member(session.to_string(), graph, ws_path)?];
        let mut elsewhere = Vec::new();
        let mut queue = vec![session.to_string()];
        let mut seen = BTreeSet::from([session.to_string()]);
        while let Some(p) = queue.pop() {
            for (c, ws) in children.get(&p).cloned().unwrap_or_default() {
                if !seen.insert(c.clone()) {
                    continue;
                }
                if ws.as_deref() == Some(workspace) {
                    let g = self.graph(&c)?;
                    out.push(self.member(c.clone(), g, ws_path)?);
                    queue.push(c);
                } else {
                    elsewhere.push(Elsewhere {
                        session: c,
                        workspace: ws.unwrap_or_else(|| "(no workspace)".into()),
                    });
                }
            }
        }
        Ok((out, elsewhere, rollback_sessions))
    }

    /// tacho's own rollbacks of any of `members` — and of those rollbacks, and so on
    /// (an undo is a rollback of a rollback) — in time order: the files each one
    /// changed, as it left them. The record of a rollback is evidence (only tacho
    /// writes `rollback.applied`); a session that merely calls itself one is not taken
    /// for one.
    fn own_rollbacks(
        &self,
        candidates: &[String],
        members: &[Member],
    ) -> Result<Vec<OwnRollback>, RollbackError> {
        let mut found = Vec::new();
        for id in candidates {
            let mut applied = None;
            let mut post = None;
            for e in self.events(id)? {
                match e.event.body {
                    EventBody::RollbackApplied(r) => applied = Some((e.event.time_unix_ns, r)),
                    EventBody::SnapshotTaken(t) if t.reason == SnapshotReason::Final => {
                        post = Some(t.snapshot)
                    }
                    _ => {}
                }
            }
            if let (Some((at, r)), Some(post)) = (applied, post) {
                found.push((at, id.clone(), r, post));
            }
        }
        found.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut ours: BTreeSet<String> = members.iter().map(|m| m.id.clone()).collect();
        let snaps = self.snapshots()?;
        let mut out = Vec::new();
        for (at, id, r, post) in found {
            if !ours.contains(&r.rolled_back) && !r.sessions.iter().any(|s| ours.contains(s)) {
                continue;
            }
            ours.insert(id);
            let before = snaps.files(snaps.resolve(&r.pre_snapshot)?)?;
            let after = snaps.files(snaps.resolve(&post)?)?;
            let skipped: BTreeSet<&str> = r.skipped.iter().map(|x| x.path.as_str()).collect();
            let changed: BTreeMap<String, Option<FileEntry>> = before
                .keys()
                .chain(after.keys())
                .filter(|p| before.get(*p) != after.get(*p) && !skipped.contains(p.as_str()))
                .map(|p| (p.clone(), after.get(p).copied()))
                .collect();
            out.push(OwnRollback { at, changed });
        }
        Ok(out)
    }

    fn member(&self, id: String, graph: ExecutionGraph, ws: &Path) -> Result<Member, StoreError> {
        let mut edits = Vec::new();
        self.log().read_session_views(&id, 0, |seq, at, v| {
            if let EventView::FileEdit { path, from, .. } = *v {
                for p in [Some(path), from].into_iter().flatten() {
                    if let Ok(rel) = relative_path(ws, p) {
                        edits.push((seq, at, rel));
                    }
                }
            }
        })?;
        Ok(Member {
            id,
            running: graph.end_reason.is_none(),
            edits,
            graph,
        })
    }
}

/// A new UUID (version 7: a millisecond time and random bits, the layout of a ULID)
/// in its usual text: the id agents give their sessions.
fn new_uuid() -> String {
    let mut b = ulid::Ulid::generate().to_bytes();
    b[6] = (b[6] & 0x0f) | 0x70;
    b[8] = (b[8] & 0x3f) | 0x80;
    crate::attribution::uuid_text(&b)
}

/// Reads the regular file `name` of the directory `dir` without following a link or
/// blocking (a FIFO put there), a regular file only.
fn read_regular_at(dir: &std::os::fd::OwnedFd, name: &str) -> std::io::Result<Vec<u8>> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut out = Vec::new();
    std::fs::File::from(fd).read_to_end(&mut out)?;
    Ok(out)
}

/// A path as text for a terminal: control characters escaped.
fn printable_path(p: &Path) -> String {
    p.display()
        .to_string()
        .chars()
        .flat_map(|c| match c.is_control() {
            true => c.escape_unicode().collect::<Vec<_>>(),
            false => vec![c],
        })
        .collect()
}
