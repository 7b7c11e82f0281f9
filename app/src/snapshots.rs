//! Snapshots of a workspace, the events that record them, and `gc`.

use crate::SessionId;
use serde::{Serialize, Serializer};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tacho_agents::settings::HookWatch;
use tacho_git::snapshot::watch::{WatchError, WatchStatus};
use tacho_git::snapshot::{
    Checked, GcReport, MAX_LISTED_EXCLUSIONS, Scope, Snapshot, SnapshotError, StoreUsage,
    WriteGuard,
};
use tacho_schema::{EventBody, EventView, ExcludedPath, SnapshotReason, SnapshotTaken};
use tacho_store::{Durability, StoreError};

use crate::Tacho;
use crate::error::kinds;

/// Why a snapshot could not be taken or recorded.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotOpError {
    #[error("workspace {}: {source}", path.display())]
    Workspace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the current directory: {0}")]
    CurrentDir(#[source] std::io::Error),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Watch(#[from] WatchError),
}

kinds!(SnapshotOpError {
    SnapshotOpError::Watch(WatchError::Running(_)) => Busy,
    SnapshotOpError::Watch(WatchError::Cannot(_)) => Io,
    SnapshotOpError::Watch(WatchError::Snapshot(e)) => e.kind(),
    SnapshotOpError::Workspace { .. } => Input,
    SnapshotOpError::CurrentDir(_) => Io,
    SnapshotOpError::Snapshot(e) => e.kind(),
    SnapshotOpError::Store(e) => e.kind(),
});

/// What `tacho snapshot` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct SnapshotRequest {
    /// Only these paths, on top of the workspace's last snapshot; every file when empty.
    pub paths: Vec<String>,
    /// The workspace: default the session's, else the current directory.
    pub workspace: Option<PathBuf>,
    /// Record the snapshot in this session.
    pub session: Option<SessionId>,
    /// The snapshot is the state before this step's changes.
    pub before_step: Option<u64>,
}

/// A snapshot taken (and perhaps recorded).
#[derive(Debug)]
pub struct SnapshotOutcome {
    pub snapshot: Snapshot,
    /// The workspace, canonical.
    pub workspace: PathBuf,
    /// The session it was recorded in, with the event's sequence number.
    pub recorded: Option<(String, u64)>,
    pub elapsed: Duration,
}

/// A snapshot to take: why, and which step it precedes.
pub type AutoPoint = Option<(SnapshotReason, Option<u64>)>;

/// Where automatic snapshots go around an event: (before it, after it). A baseline
/// after `session.start`, one before each `step.start`, a final one before
/// `session.end`.
pub fn auto_points(body: &EventBody) -> (AutoPoint, AutoPoint) {
    match body {
        EventBody::SessionStart(_) => (None, Some((SnapshotReason::Baseline, None))),
        EventBody::StepStart(s) => (Some((SnapshotReason::Step, Some(s.step))), None),
        EventBody::SessionEnd(_) => (Some((SnapshotReason::Final, None)), None),
        _ => (None, None),
    }
}

/// The event that records a snapshot.
pub fn taken_event(
    snap: &Snapshot,
    workspace: &Path,
    reason: SnapshotReason,
    before_step: Option<u64>,
) -> EventBody {
    EventBody::SnapshotTaken(SnapshotTaken {
        snapshot: snap.id.clone(),
        workspace: workspace.display().to_string(),
        reason,
        before_step,
        files: snap.files,
        bytes: snap.bytes,
        targeted: !snap.full_scan,
        excluded: snap
            .excluded
            .iter()
            .take(MAX_LISTED_EXCLUSIONS)
            .map(|x| ExcludedPath {
                path: x.path.clone(),
                reason: x.reason.to_string(),
            })
            .collect(),
        excluded_total: snap.excluded.len() as u64,
    })
}

impl Serialize for SnapshotOutcome {
    /// The `snapshot` record.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Excluded<'a> {
            path: &'a str,
            reason: String,
        }
        #[derive(Serialize)]
        struct Record<'a> {
            snapshot: &'a str,
            workspace: String,
            files: u64,
            bytes: u64,
            files_read: u64,
            bytes_read: u64,
            objects_written: u64,
            targeted: bool,
            walked: bool,
            watched: bool,
            excluded: Vec<Excluded<'a>>,
            session: Option<&'a str>,
            seq: Option<u64>,
            elapsed_ms: f64,
        }
        let snap = &self.snapshot;
        Record {
            snapshot: &snap.id,
            workspace: self.workspace.display().to_string(),
            files: snap.files,
            bytes: snap.bytes,
            files_read: snap.files_read,
            bytes_read: snap.bytes_read,
            objects_written: snap.objects_written,
            targeted: !snap.full_scan,
            walked: snap.walked,
            watched: snap.watched,
            excluded: snap
                .excluded
                .iter()
                .map(|x| Excluded {
                    path: &x.path,
                    reason: x.reason.to_string(),
                })
                .collect(),
            session: self.recorded.as_ref().map(|r| r.0.as_str()),
            seq: self.recorded.as_ref().map(|r| r.1),
            elapsed_ms: self.elapsed_ms(),
        }
        .serialize(s)
    }
}

impl SnapshotOutcome {
    /// How long taking the snapshot took, in milliseconds.
    pub fn elapsed_ms(&self) -> f64 {
        self.elapsed.as_secs_f64() * 1000.0
    }
}

/// The snapshot store's space (`log stats`, and `gc` before and after).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SnapshotStoreUsage {
    pub snapshots: u64,
    pub loose_objects: u64,
    /// Bytes of loose objects as stored (compressed), and as allocated on disk.
    pub loose_bytes: u64,
    pub loose_disk_bytes: u64,
    pub packs: u64,
    pub pack_bytes: u64,
    /// Everything the store occupies on disk.
    pub disk_bytes: u64,
}

impl From<&StoreUsage> for SnapshotStoreUsage {
    fn from(u: &StoreUsage) -> Self {
        SnapshotStoreUsage {
            snapshots: u.snapshots,
            loose_objects: u.loose_objects,
            loose_bytes: u.loose_bytes,
            loose_disk_bytes: u.loose_disk_bytes,
            packs: u.packs,
            pack_bytes: u.pack_bytes,
            disk_bytes: u.disk_bytes(),
        }
    }
}

/// What `gc` did (or would do). Serialised as the `gc` record.
#[derive(Debug)]
pub struct GcOutcome {
    pub dry_run: bool,
    /// Snapshots some recorded session references.
    pub referenced: usize,
    pub report: GcReport,
}

impl Serialize for GcOutcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Record<'a> {
            dry_run: bool,
            referenced_snapshots: usize,
            dropped_snapshots: &'a [String],
            pruned_objects: u64,
            packed_objects: u64,
            before: SnapshotStoreUsage,
            after: SnapshotStoreUsage,
            incomplete_snapshots: &'a [String],
            unreadable_packs: &'a [String],
        }
        let r = &self.report;
        Record {
            dry_run: self.dry_run,
            referenced_snapshots: self.referenced,
            dropped_snapshots: &r.dropped_snapshots,
            pruned_objects: r.pruned_objects,
            packed_objects: r.packed_objects,
            before: (&r.before).into(),
            after: (&r.after).into(),
            incomplete_snapshots: &r.incomplete_snapshots,
            unreadable_packs: &r.unreadable_packs,
        }
        .serialize(s)
    }
}

/// `tacho watch start`: the workspace's watcher, and whether this call started it.
/// The `watch` record.
#[derive(Debug, Clone, Serialize)]
pub struct WatchStarted {
    pub workspace: String,
    /// False when one was already running.
    pub started: bool,
    pub pid: u32,
    /// Directories watched.
    pub dirs: usize,
}

impl WatchStarted {
    pub fn new(workspace: &Path, status: &WatchStatus, started: bool) -> Self {
        WatchStarted {
            workspace: workspace.display().to_string(),
            started,
            pid: status.pid,
            dirs: status.dirs,
        }
    }
}

/// `tacho watch stop`: whether a watcher of the workspace ran (and was stopped). The
/// `watch_stop` record.
#[derive(Debug, Clone, Serialize)]
pub struct WatchStopped {
    pub workspace: String,
    pub stopped: bool,
}

/// A running watcher as it reports itself (SPEC §10.6), with its start also in Unix
/// nanoseconds (so that it has its RFC 3339 form beside it, as every time in a record).
#[derive(Debug, Clone, Serialize)]
pub struct WatcherStatus {
    #[serde(flatten)]
    pub status: WatchStatus,
    pub started_unix_ns: i64,
}

impl From<WatchStatus> for WatcherStatus {
    fn from(status: WatchStatus) -> Self {
        WatcherStatus {
            started_unix_ns: status.started_unix.saturating_mul(1_000_000_000),
            status,
        }
    }
}

/// `tacho watch status`: the workspace's watcher, if one runs. The `watch_status`
/// record.
#[derive(Debug, Clone, Serialize)]
pub struct WatchState {
    pub workspace: String,
    pub running: bool,
    pub watcher: Option<WatcherStatus>,
}

/// One running watcher of `tacho watch list`. The `watcher` record.
#[derive(Debug, Clone, Serialize)]
pub struct Watcher {
    pub watcher: WatcherStatus,
}

/// The files a full snapshot lists from which hooks start a watcher of the workspace
/// (SPEC.md §13.1): below it a full scan costs a hook a few milliseconds, not worth a
/// process of its own; from it the watcher halves a step (benches/peers: 17.4 → 8.9
/// ms at 5,000 files).
pub const WATCH_AUTO_FILES: u64 = 1_000;

/// [`WATCH_AUTO_FILES`], or `TACHO_WATCH_FILES` when it is a number.
pub fn watch_auto_files() -> u64 {
    std::env::var("TACHO_WATCH_FILES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(WATCH_AUTO_FILES)
}

/// Whether `TACHO_NO_WATCH` asks hooks never to start a watcher.
fn no_watch_env() -> bool {
    std::env::var_os("TACHO_NO_WATCH").is_some_and(|v| !v.is_empty() && v != "0")
}

/// `workspace` made canonical, as snapshots name it.
fn canonical(workspace: &Path) -> Result<PathBuf, SnapshotOpError> {
    workspace
        .canonicalize()
        .map_err(|source| SnapshotOpError::Workspace {
            path: workspace.to_path_buf(),
            source,
        })
}

impl Tacho {
    /// Takes a snapshot of `workspace` (canonicalized), returning it with the path used.
    /// A hold on the snapshot store until what is taken under it is recorded.
    pub(crate) fn snapshot_guard(&self) -> Result<WriteGuard, SnapshotOpError> {
        Ok(self.snapshots()?.write_guard()?)
    }

    pub(crate) fn take_snapshot(
        &self,
        workspace: &Path,
        paths: &[String],
    ) -> Result<(Snapshot, PathBuf), SnapshotOpError> {
        let ws = canonical(workspace)?;
        let scope = if paths.is_empty() {
            Scope::Full
        } else {
            Scope::Paths(paths.to_vec())
        };
        let snap = self.snapshots()?.take(&ws, &scope)?;
        if snap.full_scan
            && !snap.watched
            && let Ok(mut last) = self.unwatched_scan.lock()
        {
            *last = Some((ws.clone(), snap.files));
        }
        Ok((snap, ws))
    }

    /// A full snapshot of `workspace` (canonicalized) read by this process whatever
    /// the workspace's watcher says, with what the watcher missed, and the path used.
    pub(crate) fn take_checked_snapshot(
        &self,
        workspace: &Path,
    ) -> Result<(Checked, PathBuf), SnapshotOpError> {
        let ws = canonical(workspace)?;
        let checked = self.snapshots()?.take_checked(&ws)?;
        Ok((checked, ws))
    }

    /// Whether a watcher of `workspace` runs.
    pub(crate) fn watcher_runs(&self, workspace: &Path) -> bool {
        self.snapshots()
            .ok()
            .and_then(|s| s.watch_running(workspace).ok())
            .unwrap_or(false)
    }

    /// `tacho snapshot`: stores the workspace's files now, and records it in a session
    /// when asked.
    pub fn snapshot(&self, req: &SnapshotRequest) -> Result<SnapshotOutcome, SnapshotOpError> {
        let session = req.session.as_ref().map(SessionId::to_string);
        let workspace = match (&req.workspace, &session) {
            (Some(w), _) => w.clone(),
            (None, Some(s)) => match self.recorded_workspace(s)? {
                Some(w) => PathBuf::from(w),
                None => std::env::current_dir().map_err(SnapshotOpError::CurrentDir)?,
            },
            (None, None) => std::env::current_dir().map_err(SnapshotOpError::CurrentDir)?,
        };
        // Held until the snapshot is recorded: gc cannot drop it in between.
        let _guard = self.snapshots()?.write_guard()?;
        let started = Instant::now();
        let (snap, ws) = self.take_snapshot(&workspace, &req.paths)?;
        let elapsed = started.elapsed();
        let mut recorded = None;
        if let Some(s) = session {
            let reason = if req.before_step.is_some() {
                SnapshotReason::Step
            } else {
                SnapshotReason::Manual
            };
            let body = taken_event(&snap, &ws, reason, req.before_step);
            let receipt = self
                .log()
                .writer(&s)?
                .append(self.now(), &body, Durability::Sync)?;
            recorded = Some((s, receipt.last_seq));
        }
        Ok(SnapshotOutcome {
            snapshot: snap,
            workspace: ws,
            recorded,
            elapsed,
        })
    }

    /// The workspace a watcher command names: `path`, else the current directory;
    /// canonical, as snapshots name it.
    pub fn watch_workspace(&self, path: Option<&Path>) -> Result<PathBuf, SnapshotOpError> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => std::env::current_dir().map_err(SnapshotOpError::CurrentDir)?,
        };
        let ws = path
            .canonicalize()
            .map_err(|source| SnapshotOpError::Workspace {
                path: path.clone(),
                source,
            })?;
        if !ws.is_dir() {
            return Err(SnapshotOpError::Workspace {
                path,
                source: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
            });
        }
        Ok(ws)
    }

    /// `tacho watch run`: watches `workspace` (canonical) in this thread until stopped,
    /// the workspace goes away or (with `idle`) no scan asked for that long; full snapshots of it by any process then look only at
    /// the paths it saw change. `ready` is called once it answers.
    pub fn watch(
        &self,
        workspace: &Path,
        idle: Option<Duration>,
        ready: impl FnOnce(),
    ) -> Result<(), SnapshotOpError> {
        Ok(self.snapshots()?.watch(workspace, idle, ready)?)
    }

    /// The watcher of `workspace`, if one runs.
    pub fn watch_status(&self, workspace: &Path) -> Result<Option<WatchStatus>, SnapshotOpError> {
        Ok(self.snapshots()?.watch_status(workspace)?)
    }

    /// `tacho watch status`: the watcher of `workspace` (canonical), if one runs.
    pub fn watch_state(&self, workspace: &Path) -> Result<WatchState, SnapshotOpError> {
        let watcher = self.watch_status(workspace)?.map(WatcherStatus::from);
        Ok(WatchState {
            workspace: workspace.display().to_string(),
            running: watcher.is_some(),
            watcher,
        })
    }

    /// Whether a watcher of `workspace` runs, without asking it (a hook with
    /// `--watch` checks this at every event).
    pub fn watch_running(&self, workspace: &Path) -> Result<bool, SnapshotOpError> {
        Ok(self.snapshots()?.watch_running(workspace)?)
    }

    /// The workspace whose watcher a hook process starts after answering the agent, if
    /// any (SPEC.md §13.1): with [`HookWatch::Auto`], the workspace of a full snapshot
    /// this process took without a watcher when it listed at least
    /// [`watch_auto_files`] files; with [`HookWatch::Always`], `session`'s workspace;
    /// never with [`HookWatch::Never`] or `TACHO_NO_WATCH` set (not empty, not `0`);
    /// never when a watcher of it runs.
    pub fn hook_watch_wanted(&self, mode: HookWatch, session: Option<&str>) -> Option<PathBuf> {
        if no_watch_env() {
            return None;
        }
        let ws = match mode {
            HookWatch::Never => return None,
            HookWatch::Auto => {
                let last = self.unwatched_scan.lock().ok()?.clone();
                match last {
                    Some((ws, files)) if files >= watch_auto_files() => ws,
                    _ => return None,
                }
            }
            HookWatch::Always => self.session_workspace(session?).ok()??,
        };
        matches!(self.watch_running(&ws), Ok(false)).then_some(ws)
    }

    /// `tacho watch list`: every running watcher (none when there is no snapshot store).
    pub fn watchers(&self) -> Result<Vec<Watcher>, SnapshotOpError> {
        if !self.has_snapshot_store() {
            return Ok(Vec::new());
        }
        Ok(self
            .snapshots()?
            .watchers()
            .into_iter()
            .map(|s| Watcher { watcher: s.into() })
            .collect())
    }

    /// `tacho watch stop`: stops the watcher of `workspace`; whether one ran.
    pub fn watch_stop(&self, workspace: &Path) -> Result<WatchStopped, SnapshotOpError> {
        Ok(WatchStopped {
            workspace: workspace.display().to_string(),
            stopped: self.snapshots()?.watch_stop(workspace)?,
        })
    }

    /// Where a watcher started in the background writes what it has to say.
    pub fn watch_log(&self, workspace: &Path) -> Result<PathBuf, SnapshotOpError> {
        Ok(self.snapshots()?.watch_log(workspace))
    }

    /// The snapshot store's space, when there is a store (queries never create one).
    pub fn snapshot_usage(&self) -> Result<Option<StoreUsage>, SnapshotError> {
        if !self.has_snapshot_store() {
            return Ok(None);
        }
        Ok(Some(self.snapshots()?.usage()?))
    }

    /// Adds the snapshots a session references (taken, or rolled back to) to `keep`.
    pub(crate) fn referenced_snapshots(
        &self,
        session: &str,
        keep: &mut HashSet<String>,
    ) -> Result<(), StoreError> {
        self.log()
            .read_session_views(session, 0, |_, _, v| match *v {
                EventView::SnapshotTaken { snapshot, .. } => {
                    keep.insert(snapshot.to_string());
                }
                EventView::RollbackApplied { to_snapshot, .. } => {
                    keep.insert(to_snapshot.to_string());
                }
                _ => {}
            })?;
        Ok(())
    }

    /// `tacho gc`: drops snapshots that no recorded session references, deletes the
    /// objects only they held, and packs the rest; then compacts the log's index.
    pub fn gc(&self, dry_run: bool) -> Result<GcOutcome, SnapshotOpError> {
        let log = self.log();
        let mut referenced = 0;
        // Read under gc's lock: a snapshot recorded while gc waited is kept.
        let keep = || -> Result<HashSet<String>, SnapshotOpError> {
            let mut keep = HashSet::new();
            for id in log.sessions()? {
                self.referenced_snapshots(&id, &mut keep)?;
            }
            referenced = keep.len();
            Ok(keep)
        };
        let report = self.snapshots()?.gc_with(keep, dry_run)?;
        // The log's index (derived) is folded too: its appended records, one per
        // committed batch (260 bytes each), into the snapshot of it they amount to.
        if !dry_run {
            log.index_compact()?;
        }
        Ok(GcOutcome {
            dry_run,
            referenced,
            report,
        })
    }
}
