//! The snapshot store of the data directory, and the events that record snapshots.

use std::path::{Path, PathBuf};

use tacho_git::snapshot::{MAX_LISTED_EXCLUSIONS, Scope, Snapshot, SnapshotError, SnapshotStore};
use tacho_schema::{EventBody, ExcludedPath, SnapshotReason, SnapshotTaken};
use tacho_store::Store;

use crate::error::CliError;
use crate::home::data_dir;

impl From<SnapshotError> for CliError {
    fn from(e: SnapshotError) -> Self {
        let text = e.to_string();
        match e {
            SnapshotError::Workspace { .. }
            | SnapshotError::BadPath { .. }
            | SnapshotError::NotUtf8(_) => CliError::Input(text),
            SnapshotError::Missing(_) => CliError::NotFound(text),
            SnapshotError::Io { .. } | SnapshotError::Git(_) => CliError::Io(text),
        }
    }
}

/// Opens `<data>/snapshots` (a bare Git repository), with its stat caches under
/// `<data>/cache/snapshots`.
pub fn open_snapshots() -> Result<SnapshotStore, CliError> {
    let home = data_dir()?;
    Ok(SnapshotStore::open(
        home.join("snapshots"),
        home.join("cache").join("snapshots"),
    )?)
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

/// Takes a snapshot of `workspace` (canonicalized), returning it with the path used.
pub fn take(
    store: &SnapshotStore,
    workspace: &Path,
    paths: &[String],
) -> Result<(Snapshot, PathBuf), CliError> {
    let ws = workspace
        .canonicalize()
        .map_err(|e| CliError::Input(format!("workspace {}: {e}", workspace.display())))?;
    let scope = if paths.is_empty() {
        Scope::Full
    } else {
        Scope::Paths(paths.to_vec())
    };
    let snap = store.take(&ws, &scope)?;
    Ok((snap, ws))
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

/// The workspace recorded in a session's `session.start`.
pub fn session_workspace(store: &Store, session: &str) -> Result<Option<String>, CliError> {
    Ok(match store.first_event(session)? {
        Some(e) => match e.body {
            EventBody::SessionStart(s) => s.workspace,
            _ => None,
        },
        None => None,
    })
}
