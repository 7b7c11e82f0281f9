//! Operations on a workspace that need no store: the source fingerprint and the
//! verifiers goal checks call.

use std::path::{Path, PathBuf};

use serde::{Serialize, Serializer};
use tacho_git::fingerprint::{self, Entry, Fingerprint, Problem};
use tacho_git::snapshot::SnapshotError;
use tacho_goals::commits::{self, CommitReport, CommitsError, Merges};
pub use tacho_goals::review::ReviewOptions;
use tacho_goals::review::{self, ReviewReport};

use crate::error::kinds;

/// Why a workspace operation could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceOpError {
    #[error("the current directory: {0}")]
    CurrentDir(#[source] std::io::Error),
    #[error(transparent)]
    Commits(#[from] CommitsError),
    #[error(transparent)]
    Repository(#[from] SnapshotError),
}

kinds!(WorkspaceOpError {
    WorkspaceOpError::CurrentDir(_) => Io,
    WorkspaceOpError::Commits(CommitsError::BadBaseline(_) | CommitsError::BadRevision(_)) => Input,
    WorkspaceOpError::Commits(CommitsError::Repository(e)) => e.kind(),
    WorkspaceOpError::Repository(e) => e.kind(),
});

fn workspace_or_cwd(ws: Option<&Path>) -> Result<PathBuf, WorkspaceOpError> {
    match ws {
        Some(w) => Ok(w.to_path_buf()),
        None => std::env::current_dir().map_err(WorkspaceOpError::CurrentDir),
    }
}

/// The source fingerprint of `paths` (default: the whole workspace) plus `files`
/// (included even when ignored) of `workspace` (default: the current directory).
pub fn fingerprint(
    workspace: Option<&Path>,
    paths: &[String],
    files: &[String],
) -> Result<FingerprintView, WorkspaceOpError> {
    let ws = workspace_or_cwd(workspace)?;
    let paths = if paths.is_empty() && files.is_empty() {
        vec![".".to_string()]
    } else {
        paths.to_vec()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(FingerprintView(fingerprint::fingerprint(
        &ws, &paths, files, threads,
    )?))
}

/// `tacho fingerprint`'s answer: the fingerprint, or why there is none. Serialised as
/// the `fingerprint` record (`fresh` says which).
#[derive(Debug, Clone)]
pub struct FingerprintView(pub Fingerprint);

impl Serialize for FingerprintView {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Record<'a> {
            Fresh {
                fresh: bool,
                digest: &'a str,
                entries: &'a [Entry],
                bytes: u64,
            },
            None {
                fresh: bool,
                path: &'a str,
                reason: &'a str,
                problems: &'a [Problem],
                problems_total: usize,
            },
        }
        match &self.0 {
            Fingerprint::Fresh {
                digest,
                entries,
                bytes,
            } => Record::Fresh {
                fresh: true,
                digest,
                entries,
                bytes: *bytes,
            },
            Fingerprint::NoFreshEvidence(why) => Record::None {
                fresh: false,
                path: &why.path,
                reason: &why.reason,
                problems: &why.problems,
                problems_total: why.total,
            },
        }
        .serialize(s)
    }
}

/// Checks the commits after `baseline` up to HEAD of the repository holding
/// `workspace` (default: the current directory).
pub fn verify_commits(
    workspace: Option<&Path>,
    baseline: &str,
    allow: &[String],
    forbid: &[String],
    merges: Merges,
) -> Result<CommitReport, WorkspaceOpError> {
    let ws = workspace_or_cwd(workspace)?;
    Ok(commits::verify_commits(
        &ws, baseline, allow, forbid, merges,
    )?)
}

/// Checks review receipts under `root` against the repository holding `workspace`
/// (default: the current directory).
pub fn verify_reviews(
    root: &Path,
    workspace: Option<&Path>,
    opts: &review::ReviewOptions,
) -> Result<ReviewReport, WorkspaceOpError> {
    let ws = workspace_or_cwd(workspace)?;
    Ok(review::verify_reviews(root, &ws, opts)?)
}
