//! What kind of failure an error is. Frontends decide on kinds (the CLI maps them to
//! its exit codes, MCP to tool errors), never on message text.

use tacho_git::snapshot::SnapshotError;
use tacho_store::StoreError;

/// The kinds of failure, each with its documented exit code in the CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Verification found problems, a check failed, the gate refused, or the log is
    /// corrupt (exit 1).
    Findings,
    /// Bad input: a malformed event line, a rejected event, a bad argument (exit 2).
    Input,
    /// Another process is writing the same session (exit 3).
    Busy,
    /// No such session, goal or snapshot (exit 4).
    NotFound,
    /// An I/O error (exit 5).
    Io,
}

/// An error that knows its kind.
pub trait Kind {
    fn kind(&self) -> ErrorKind;
}

impl Kind for StoreError {
    fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Io { .. } | StoreError::Poisoned(_) => ErrorKind::Io,
            StoreError::Busy { .. } => ErrorKind::Busy,
            StoreError::Corrupt { .. } | StoreError::Lost { .. } => ErrorKind::Findings,
            StoreError::NotFound(_)
            | StoreError::UnknownSession { .. }
            | StoreError::AmbiguousSession { .. } => ErrorKind::NotFound,
            StoreError::BadSessionId(_) | StoreError::Rejected { .. } => ErrorKind::Input,
            StoreError::GroupNotTakenBack { .. } => ErrorKind::Io,
        }
    }
}

impl Kind for SnapshotError {
    fn kind(&self) -> ErrorKind {
        match self {
            SnapshotError::Workspace { .. }
            | SnapshotError::RefusedWorkspace { .. }
            | SnapshotError::BadPath { .. }
            | SnapshotError::NotUtf8(_) => ErrorKind::Input,
            SnapshotError::Missing(_) => ErrorKind::NotFound,
            SnapshotError::Busy(_) => ErrorKind::Busy,
            SnapshotError::Io { .. }
            | SnapshotError::Git { .. }
            | SnapshotError::Repository(_)
            | SnapshotError::Internal(_) => ErrorKind::Io,
        }
    }
}

impl Kind for std::io::Error {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Io
    }
}

/// Declares `Kind` for an operation's error enum: the listed variants have the given
/// kinds, and wrapped lower-level errors (`Store`, `Snapshot`, …) keep theirs.
macro_rules! kinds {
    ($ty:ty { $($pat:pat => $kind:expr),* $(,)? }) => {
        impl $crate::error::Kind for $ty {
            fn kind(&self) -> $crate::error::ErrorKind {
                #[allow(unused_imports)]
                use $crate::error::ErrorKind::*;
                match self {
                    $($pat => $kind),*
                }
            }
        }
    };
}
pub(crate) use kinds;
