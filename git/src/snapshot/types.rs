//! What a snapshot is: its result, its files, what it leaves out and why, and the
//! store's errors.

use super::*;

/// Files larger than this are not snapshotted (and are listed as excluded).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// At most this many excluded paths are listed by name in a snapshot's record; the
/// rest are counted.
pub const MAX_LISTED_EXCLUSIONS: usize = 1000;

/// Everything that can go wrong in the snapshot store.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A Git operation failed: what was being done, and gix's error.
    #[error("snapshot store: {what}: {source}")]
    Git {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// Someone else holds the store (gc waiting for snapshot writers).
    #[error("snapshot store: {0}")]
    Busy(String),
    /// The repository is not as a snapshot needs it.
    #[error("snapshot store: {0}")]
    Repository(String),
    /// Something that cannot happen with a healthy program did.
    #[error("snapshot store: {0}")]
    Internal(&'static str),
    #[error("path is not UTF-8: {}", .0.display())]
    NotUtf8(PathBuf),
    #[error("workspace {}: {reason}", path.display())]
    Workspace { path: PathBuf, reason: String },
    /// A directory that cannot be a workspace: `/`, the home directory, or one on a
    /// pseudo file system (a snapshot would read the whole machine, or files that
    /// never end).
    #[error("{} is refused as a workspace: it is {reason}", path.display())]
    RefusedWorkspace { path: PathBuf, reason: String },
    #[error("no snapshot {0} in the snapshot store")]
    Missing(String),
    #[error("invalid path {path:?}: {reason}")]
    BadPath { path: String, reason: String },
}

impl SnapshotError {
    /// A failed Git operation, keeping gix's error as the source.
    pub fn git(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        SnapshotError::Git {
            what: what.into(),
            source: source.into(),
        }
    }

    pub fn io(path: &Path, source: std::io::Error) -> Self {
        SnapshotError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Why a path of the workspace is not in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ExcludeReason {
    /// A FIFO, socket or device.
    Special,
    /// A directory holding its own repository (or a submodule).
    NestedRepository,
    /// A symbolic link whose target lies outside the workspace.
    LinkOutside,
    /// Larger than the store's per-file limit.
    TooLarge(u64),
    /// Could not be read.
    Unreadable(String),
    /// Kept changing while it was read.
    Unstable,
    /// The name is not UTF-8.
    NotUtf8,
    /// Named through a symbolic link to a directory (`link/file`): a full scan never
    /// goes through links, so neither does a targeted snapshot.
    ThroughLink(String),
    /// A mount of a pseudo file system (its type: `proc`, `sysfs`, ...), which holds no
    /// user files: never walked into nor read.
    PseudoFileSystem(String),
}

impl std::fmt::Display for ExcludeReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExcludeReason::Special => f.write_str("special file"),
            ExcludeReason::NestedRepository => f.write_str("nested repository"),
            ExcludeReason::LinkOutside => f.write_str("symbolic link to outside the workspace"),
            ExcludeReason::TooLarge(n) => write!(f, "larger than the limit ({n} bytes)"),
            ExcludeReason::Unreadable(e) => write!(f, "unreadable: {e}"),
            ExcludeReason::Unstable => f.write_str("changed while being read"),
            ExcludeReason::NotUtf8 => f.write_str("name is not UTF-8"),
            ExcludeReason::ThroughLink(link) => {
                write!(f, "reached through the symbolic link {link}")
            }
            ExcludeReason::PseudoFileSystem(fs) => {
                write!(
                    f,
                    "a {fs} mount, a pseudo file system that holds no user files"
                )
            }
        }
    }
}

/// A path left out of a snapshot, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Excluded {
    pub path: String,
    pub reason: ExcludeReason,
}

impl Excluded {
    pub(crate) fn new(path: impl Into<String>, reason: ExcludeReason) -> Self {
        Excluded {
            path: path.into(),
            reason,
        }
    }
}

/// How much of the workspace to look at.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every file (using the stat cache to skip unchanged ones).
    Full,
    /// Only these paths (relative to the workspace), on top of the workspace's previous
    /// snapshot. What adapters use when an edit tool reports the paths it wrote. Falls
    /// back to a full scan when the workspace has no previous snapshot.
    Paths(Vec<String>),
}

/// The result of taking a snapshot.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The tree id, in hex: the snapshot's id.
    pub id: String,
    pub tree: ObjectId,
    /// Files (and links) in the snapshot, and their total size.
    pub files: u64,
    pub bytes: u64,
    /// Files whose content was read for this snapshot (the rest came from the cache or
    /// the previous tree).
    pub files_read: u64,
    pub bytes_read: u64,
    /// Objects that were new to the store.
    pub objects_written: u64,
    pub excluded: Vec<Excluded>,
    /// Whether this was a full scan (a targeted request without a previous snapshot is
    /// one too).
    pub full_scan: bool,
    /// Whether a full scan walked the directories (rather than reusing the last walk's
    /// listing because no directory and no ignore file changed).
    pub walked: bool,
    /// Whether a full scan took the changed paths from the workspace's watcher instead
    /// of checking every file (see [`SnapshotStore::watch`]).
    pub watched: bool,
}

/// A snapshot read by this process itself, and what the workspace's watcher said
/// (see [`SnapshotStore::take_checked`]).
#[derive(Debug, Clone)]
pub struct Checked {
    pub snapshot: Snapshot,
    /// The watcher's snapshot of the same moment; `None` when no watcher served one.
    pub served: Option<String>,
    /// Paths the watcher's snapshot has as they were before a change made before it
    /// was asked (a change it never learnt of), in path order.
    pub missed: Vec<String>,
}

/// One file of a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileEntry {
    pub kind: FileKind,
    pub oid: ObjectId,
    /// The file's permission bits (`0o600`, `0o755`, ...; `rwx` for owner, group and
    /// others, nothing else), exactly as scanned: a Git tree keeps only 644 and 755,
    /// the snapshot's modes entry the rest (SPEC.md §10.1). 0 for a link.
    pub perms: u32,
}

impl FileEntry {
    /// An entry with the permission bits a Git tree entry of its kind implies.
    pub fn plain(kind: FileKind, oid: ObjectId) -> Self {
        FileEntry {
            kind,
            oid,
            perms: kind.plain_perms(),
        }
    }
}

/// What a snapshot holds at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    Regular,
    Executable,
    Link,
}

impl FileKind {
    pub(super) fn entry_kind(self) -> EntryKind {
        match self {
            FileKind::Regular => EntryKind::Blob,
            FileKind::Executable => EntryKind::BlobExecutable,
            FileKind::Link => EntryKind::Link,
        }
    }

    pub(super) fn git_mode(self) -> u32 {
        match self {
            FileKind::Regular => 0o100644,
            FileKind::Executable => 0o100755,
            FileKind::Link => 0o120000,
        }
    }

    pub(super) fn from_git_mode(mode: u32) -> Option<FileKind> {
        match mode {
            0o100644 => Some(FileKind::Regular),
            0o100755 => Some(FileKind::Executable),
            0o120000 => Some(FileKind::Link),
            _ => None,
        }
    }

    /// The permission bits a Git tree entry of this kind implies (`0o644`, `0o755`;
    /// 0 for a link): a snapshot's modes entry lists only the files that differ.
    pub fn plain_perms(self) -> u32 {
        match self {
            FileKind::Regular => 0o644,
            FileKind::Executable => 0o755,
            FileKind::Link => 0,
        }
    }

    /// The kind of a regular file with raw `st_mode` `mode`: executable when any of
    /// its execute bits is set (Git itself looks at the owner's only; a file whose
    /// owner cannot run it but others can is one tacho calls executable).
    pub fn of_file_mode(mode: u32) -> FileKind {
        if mode & 0o111 != 0 {
            FileKind::Executable
        } else {
            FileKind::Regular
        }
    }

    /// `file`, `executable` or `link`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::Regular => "file",
            FileKind::Executable => "executable",
            FileKind::Link => "link",
        }
    }
}

/// A snapshot's files by path.
pub type Files = BTreeMap<String, FileEntry>;
