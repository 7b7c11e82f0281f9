//! The snapshot store: file contents of workspaces, kept as Git objects in a bare
//! repository in tacho's data directory, written in-process with gix.
//!
//! A snapshot is a Git tree. Its id is the tree's object id and it is kept alive by the
//! ref `refs/snapshots/<id>`. Identical content is one object however many snapshots
//! hold it. The project's work tree and its own `.git/` are only ever read.
//!
//! See SPEC.md §10 for what a snapshot holds and what it leaves out.

mod cache;
mod gc;
pub mod scan;
pub(crate) mod stat;

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use stat::FileStat;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use gix::ObjectId;
use gix::object::tree::EntryKind;

pub use gc::{GcReport, StoreUsage};
pub(crate) use scan::slash_path;

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
#[derive(Debug, Clone, PartialEq, Eq)]
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
        }
    }
}

/// A path left out of a snapshot, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
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
}

/// One file of a snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileEntry {
    pub kind: FileKind,
    pub oid: ObjectId,
}

/// What a snapshot holds at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    Regular,
    Executable,
    Link,
}

impl FileKind {
    fn entry_kind(self) -> EntryKind {
        match self {
            FileKind::Regular => EntryKind::Blob,
            FileKind::Executable => EntryKind::BlobExecutable,
            FileKind::Link => EntryKind::Link,
        }
    }

    fn git_mode(self) -> u32 {
        match self {
            FileKind::Regular => 0o100644,
            FileKind::Executable => 0o100755,
            FileKind::Link => 0o120000,
        }
    }

    fn from_git_mode(mode: u32) -> Option<FileKind> {
        match mode {
            0o100644 => Some(FileKind::Regular),
            0o100755 => Some(FileKind::Executable),
            0o120000 => Some(FileKind::Link),
            _ => None,
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

/// The snapshot store of a data directory.
pub struct SnapshotStore {
    root: PathBuf,
    cache_dir: PathBuf,
    repo: gix::ThreadSafeRepository,
    max_file_bytes: u64,
    threads: usize,
}

impl SnapshotStore {
    /// Opens (creating it if needed) the store at `root`, a bare Git repository, with
    /// derived caches under `cache_dir`.
    pub fn open(
        root: impl Into<PathBuf>,
        cache_dir: impl Into<PathBuf>,
    ) -> Result<Self, SnapshotError> {
        let root = root.into();
        let opts = || gix::open::Options::isolated();
        let repo = if root.join("HEAD").exists() {
            gix::open_opts(&root, opts())
        } else {
            std::fs::create_dir_all(&root).map_err(|e| SnapshotError::io(&root, e))?;
            gix::init_bare(&root).and_then(|_| gix::open_opts(&root, opts()))
        }
        .map_err(|e| SnapshotError::git(format!("opening {}", root.display()), e))?;
        Ok(SnapshotStore {
            root,
            cache_dir: cache_dir.into(),
            repo: repo.into_sync(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        })
    }

    /// Sets the per-file size limit.
    pub fn with_max_file_bytes(mut self, n: u64) -> Self {
        self.max_file_bytes = n;
        self
    }

    /// Sets how many threads read and hash files (default: one per core).
    pub fn with_threads(mut self, n: usize) -> Self {
        self.threads = n.max(1);
        self
    }

    /// The bare repository's directory (what `git --git-dir` takes).
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn repo(&self) -> gix::Repository {
        self.repo.to_thread_local()
    }

    /// The ref that keeps a snapshot alive.
    pub fn ref_name(id: &str) -> String {
        format!("refs/snapshots/{id}")
    }

    /// Takes a snapshot of `workspace`. `skip` names a directory inside it (relative)
    /// that is never snapshotted, such as tacho's own data directory.
    pub fn take(&self, workspace: &Path, scope: &Scope) -> Result<Snapshot, SnapshotError> {
        let workspace = canonical_workspace(workspace)?;
        let ws_text = workspace
            .to_str()
            .ok_or_else(|| SnapshotError::NotUtf8(workspace.clone()))?
            .to_owned();
        let cache_paths = cache::paths(&self.cache_dir, &workspace);
        let skip = self.own_dir_inside(&workspace);
        match scope {
            Scope::Paths(paths) => match cache::load_head(&cache_paths.head) {
                Some(head)
                    if self
                        .repo()
                        .has_object(ObjectId::from_bytes_or_panic(&head.tree)) =>
                {
                    self.take_paths(&workspace, head, paths, skip.as_deref(), &cache_paths)
                }
                _ => self.take_full(&workspace, &ws_text, skip.as_deref(), &cache_paths),
            },
            Scope::Full => self.take_full(&workspace, &ws_text, skip.as_deref(), &cache_paths),
        }
    }

    /// Why a listed file or link cannot be snapshotted, if it cannot: a special file,
    /// or a file over the size limit.
    fn unsupported(&self, meta: &FileStat) -> Option<ExcludeReason> {
        if !meta.is_file() && !meta.is_symlink() {
            Some(ExcludeReason::Special)
        } else if meta.is_file() && meta.len() > self.max_file_bytes {
            Some(ExcludeReason::TooLarge(self.max_file_bytes))
        } else {
            None
        }
    }

    /// The data directory's path relative to `workspace`, when it lies inside it.
    fn own_dir_inside(&self, workspace: &Path) -> Option<String> {
        let home = self.root.parent()?.canonicalize().ok()?;
        home.strip_prefix(workspace)
            .ok()
            .and_then(slash_path)
            .filter(|s| !s.is_empty())
    }

    fn take_full(
        &self,
        workspace: &Path,
        ws_text: &str,
        skip: Option<&str>,
        cache_paths: &cache::CachePaths,
    ) -> Result<Snapshot, SnapshotError> {
        let scan_start_ns = now_ns();
        let trace = Trace::new();
        let old = cache::load(&cache_paths.stat, ws_text);
        let old_index = cache::index(&old);
        let trusted_before = old.scan_start_ns - cache::RACY_NS;
        trace.mark("cache load");
        let reused = reuse_listing(workspace, &old, &old_index, trusted_before);
        let walked = reused.is_none();
        let listing = match reused {
            Some(l) => l,
            None => scan::list(workspace, skip, self.threads)?,
        };
        trace.mark("list");
        let listed: Vec<String> = listing.paths.iter().map(|p| p.0.clone()).collect();
        let listed_excluded: Vec<cache::ListedExclusion> = listing
            .excluded
            .iter()
            .filter_map(listed_exclusion)
            .collect();
        let dirs = listing.dirs;
        let mut excluded = listing.excluded;
        let metas = stat_all(workspace, listing.paths, self.threads);
        let mut entries: Vec<(String, CacheEntry)> = Vec::with_capacity(metas.len());
        let mut to_read: Vec<(usize, FileStat)> = Vec::new();
        for (path, meta) in metas {
            let meta = match meta {
                Ok(m) => m,
                // Deleted since it was listed (or a tracked file that is gone).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    excluded.push(Excluded::new(
                        path,
                        ExcludeReason::Unreadable(e.to_string()),
                    ));
                    continue;
                }
            };
            if meta.is_dir() {
                continue;
            }
            if let Some(reason) = self.unsupported(&meta) {
                excluded.push(Excluded::new(path, reason));
                continue;
            }
            let mut stat = stat_entry("", &meta);
            if let Some(c) = old_index.get(path.as_str())
                && same_stat(c, &stat)
                && c.mtime_ns < trusted_before
            {
                stat.git_mode = c.git_mode;
                stat.oid = c.oid;
                entries.push((path, stat));
                continue;
            }
            to_read.push((entries.len(), meta));
            entries.push((path, stat));
        }
        trace.mark("lstat");
        let (read, problems) = self.hash_files(workspace, &mut entries, &to_read)?;
        trace.mark("hash");
        let mut failed = std::collections::HashSet::new();
        for (i, reason) in problems {
            failed.insert(i);
            excluded.push(Excluded::new(entries[i].0.clone(), reason));
        }
        let entries: Vec<CacheEntry> = entries
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !failed.contains(i))
            .map(|(_, (path, mut e))| {
                e.path = path;
                e
            })
            .collect();

        // Edit the previous tree where there is one: only changed directories are
        // rewritten.
        let mut repo = self.repo();
        repo.object_cache_size(Some(8 * 1024 * 1024));
        // Trees are built in memory and written to disk on all threads afterwards.
        repo.objects.enable_object_memory();
        let base = ObjectId::from_bytes_or_panic(&old.tree);
        let base_ok = !old.entries.is_empty() && repo.has_object(base);
        // Only what changed since the cached tree is edited into it: one merge of the
        // two sorted lists.
        let (upserts, removals) = if base_ok {
            changes(&old.entries, &entries)
        } else {
            (
                entries.iter().map(|e| (e.path.as_str(), e)).collect(),
                Vec::new(),
            )
        };
        let upserts = upserts.into_iter();
        let tree = self.edit_tree(
            &mut repo,
            base_ok.then_some(base),
            upserts,
            removals.into_iter(),
        )?;
        trace.mark("tree");
        self.keep(tree)?;
        trace.mark("ref");

        let files = entries.len() as u64;
        let bytes = entries.iter().map(|e| e.size).sum();
        let mut tree_bytes = [0u8; 20];
        tree_bytes.copy_from_slice(tree.as_bytes());
        cache::save(
            &cache_paths.stat,
            &cache::CacheFile {
                version: cache::CACHE_VERSION,
                workspace: ws_text.to_owned(),
                tree: tree_bytes,
                scan_start_ns,
                listed_extra: {
                    // Both lists are sorted: what `entries` lacks, in one pass.
                    let mut kept = entries.iter().map(|e| e.path.as_str()).peekable();
                    listed
                        .into_iter()
                        .filter(|p| {
                            while kept.next_if(|k| *k < p.as_str()).is_some() {}
                            kept.next_if(|k| *k == p.as_str()).is_none()
                        })
                        .collect()
                },
                entries,
                listed_excluded,
                dirs,
            },
        )?;
        trace.mark("cache save");
        finish(
            cache_paths,
            tree,
            files,
            bytes,
            read,
            excluded,
            true,
            walked,
        )
    }

    fn take_paths(
        &self,
        workspace: &Path,
        head: cache::Head,
        paths: &[String],
        skip: Option<&str>,
        cache_paths: &cache::CachePaths,
    ) -> Result<Snapshot, SnapshotError> {
        let trace = Trace::new();
        let git = scan::git_context(workspace)?;
        trace.mark("t:git context");
        let mut excluded = Vec::new();
        let mut entries: Vec<(String, CacheEntry)> = Vec::new();
        let mut to_read = Vec::new();
        let mut removed = Vec::new();
        let mut rels = std::collections::BTreeSet::new();
        for p in paths {
            rels.insert(relative_path(workspace, p)?);
        }
        for rel in rels {
            if skip.is_some_and(|s| rel == s || rel.starts_with(&format!("{s}/"))) {
                continue;
            }
            let abs = workspace.join(&rel);
            let meta = match stat::lstat(&abs) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    removed.push(rel);
                    continue;
                }
                Err(e) => {
                    excluded.push(Excluded::new(rel, ExcludeReason::Unreadable(e.to_string())));
                    continue;
                }
            };
            if meta.is_dir() {
                // A directory appeared where the edit happened: only a full scan knows
                // what is inside it and which of it is ignored.
                let ws_text = workspace.to_str().unwrap_or_default().to_owned();
                return self.take_full(workspace, &ws_text, skip, cache_paths);
            }
            if !scan::is_listed(workspace, git.as_ref(), &rel)? {
                removed.push(rel);
                continue;
            }
            if let Some(reason) = self.unsupported(&meta) {
                excluded.push(Excluded::new(rel.clone(), reason));
                removed.push(rel);
                continue;
            }
            to_read.push((entries.len(), meta));
            let stat = stat_entry(&rel, &meta);
            entries.push((rel, stat));
        }
        trace.mark("t:check paths");
        let (read, problems) = self.hash_files(workspace, &mut entries, &to_read)?;
        trace.mark("t:hash");
        let mut failed = std::collections::HashSet::new();
        for (i, reason) in problems {
            failed.insert(i);
            removed.push(entries[i].0.clone());
            excluded.push(Excluded::new(entries[i].0.clone(), reason));
        }
        let mut repo = self.repo();
        // The counts and the editor read the same few trees.
        repo.object_cache_size(Some(8 * 1024 * 1024));
        let base = ObjectId::from_bytes_or_panic(&head.tree);
        // The counts move by what the named paths held before and hold now.
        let base_tree = repo
            .find_tree(base)
            .map_err(|e| SnapshotError::git(format!("reading tree {base}"), e))?;
        let mut files = head.files as i64;
        let mut bytes = head.bytes as i64;
        // The size of what the base held at a path, if it held a file there.
        let before = |path: &str| -> Result<Option<u64>, SnapshotError> {
            let old = base_tree
                .lookup_entry_by_path(path)
                .map_err(|e| SnapshotError::git(format!("reading tree {base}"), e))?;
            match old.filter(|o| !o.mode().is_tree()) {
                Some(old) => Ok(Some(
                    repo.find_header(old.object_id())
                        .map_err(|e| SnapshotError::git(format!("reading {path}"), e))?
                        .size(),
                )),
                None => Ok(None),
            }
        };
        for (i, (path, e)) in entries.iter().enumerate() {
            if !failed.contains(&i) {
                if let Some(size) = before(path)? {
                    files -= 1;
                    bytes -= size as i64;
                }
                files += 1;
                bytes += e.size as i64;
            }
        }
        for path in &removed {
            if let Some(size) = before(path)? {
                files -= 1;
                bytes -= size as i64;
            }
        }
        trace.mark("t:counts");
        drop(base_tree);
        let upserts = entries
            .iter()
            .enumerate()
            .filter(|(i, _)| !failed.contains(i))
            .map(|(_, (path, e))| (path.as_str(), e));
        let tree = self.edit_tree(
            &mut repo,
            Some(base),
            upserts,
            removed.iter().map(String::as_str),
        )?;
        trace.mark("t:tree");
        self.keep(tree)?;
        trace.mark("t:ref");
        let (files, bytes) = (files.max(0) as u64, bytes.max(0) as u64);
        finish(
            cache_paths,
            tree,
            files,
            bytes,
            read,
            excluded,
            false,
            false,
        )
    }

    /// Reads, hashes and stores the files at `to_read` (indexes into `entries`) on all
    /// threads, filling in their blob ids and modes. Returns counters and the files
    /// that could not be snapshotted.
    fn hash_files(
        &self,
        workspace: &Path,
        entries: &mut [(String, CacheEntry)],
        to_read: &[(usize, FileStat)],
    ) -> Result<(ReadCounters, Vec<(usize, ExcludeReason)>), SnapshotError> {
        let next = AtomicUsize::new(0);
        let threads = self.threads.min(to_read.len().div_ceil(8)).max(1);
        let shared: &[(String, CacheEntry)] = entries;
        type Outcome = Result<(usize, Result<(CacheEntry, bool), ExcludeReason>), SnapshotError>;
        let results: Vec<Vec<Outcome>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let next = &next;
                    s.spawn(move || {
                        let repo = self.repo();
                        let mut out = Vec::new();
                        loop {
                            let k = next.fetch_add(1, Ordering::Relaxed);
                            let Some((i, meta)) = to_read.get(k) else {
                                break;
                            };
                            let path = &shared[*i].0;
                            out.push(store_file(&repo, workspace, path, meta).map(|r| (*i, r)));
                        }
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        vec![Err(SnapshotError::Internal("a hashing thread panicked"))]
                    })
                })
                .collect()
        });
        let mut counters = ReadCounters::default();
        let mut problems = Vec::new();
        for r in results.into_iter().flatten() {
            let (i, r) = r?;
            match r {
                Ok((e, written)) => {
                    counters.files += 1;
                    counters.bytes += e.size;
                    counters.written += written as u64;
                    let path = std::mem::take(&mut entries[i].0);
                    entries[i] = (path, e);
                }
                Err(reason) => problems.push((i, reason)),
            }
        }
        Ok((counters, problems))
    }

    /// Edits `base` (or an empty tree): `upserts` set files, `removals` delete them.
    /// Changed trees are built in memory, then written on all threads. Entry names come
    /// from the file system and were checked when listed, and every blob was just
    /// stored, so gix's per-entry existence checks (a file lookup for every entry of
    /// every changed tree) are skipped by editing with gix-object's editor.
    fn edit_tree<'e>(
        &self,
        repo: &mut gix::Repository,
        base: Option<ObjectId>,
        upserts: impl Iterator<Item = (&'e str, &'e CacheEntry)>,
        removals: impl Iterator<Item = &'e str>,
    ) -> Result<ObjectId, SnapshotError> {
        let root = match base {
            Some(id) => repo
                .find_tree(id)
                .and_then(|t| t.decode().map(Into::into))
                .map_err(|e| SnapshotError::git(format!("reading tree {id}"), e))?,
            None => gix::objs::Tree::empty(),
        };
        repo.objects.enable_object_memory();
        let tree = {
            let find = repo.objects.clone();
            let mut editor = gix::objs::tree::Editor::new(root, &find, gix::hash::Kind::Sha1);
            for (path, e) in upserts {
                let kind = FileKind::from_git_mode(e.git_mode).unwrap_or(FileKind::Regular);
                editor
                    .upsert(
                        path.split('/'),
                        kind.entry_kind(),
                        ObjectId::from_bytes_or_panic(&e.oid),
                    )
                    .map_err(|err| bad_tree_path(path, err))?;
            }
            for path in removals {
                editor
                    .remove(path.split('/'))
                    .map_err(|err| bad_tree_path(path, err))?;
            }
            editor
                .write(|t| repo.write_object(t).map(gix::Id::detach))
                .map_err(|e| SnapshotError::git("writing a tree", e))?
        };
        self.persist(repo.objects.take_object_memory())?;
        Ok(tree)
    }

    /// Writes objects kept in memory to the store, on all threads.
    fn persist(&self, memory: Option<gix::odb::memory::Storage>) -> Result<(), SnapshotError> {
        let Some(memory) = memory else { return Ok(()) };
        let objects: Vec<(&ObjectId, &(gix::object::Kind, Vec<u8>))> = memory.iter().collect();
        let next = AtomicUsize::new(0);
        let threads = self.threads.min(objects.len()).max(1);
        let write = || -> Result<(), SnapshotError> {
            use gix::prelude::Write;
            let repo = self.repo();
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some((id, (kind, data))) = objects.get(k) else {
                    return Ok(());
                };
                if !repo.objects.exists_without_refresh(id) {
                    repo.objects
                        .write_buf_with_known_id(*kind, data, **id)
                        .map_err(|e| SnapshotError::git(format!("writing object {id}"), e))?;
                }
            }
        };
        std::thread::scope(|s| {
            let handles: Vec<_> = (1..threads).map(|_| s.spawn(write)).collect();
            let mine = write();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .chain([mine])
                .collect::<Result<Vec<()>, _>>()
                .map(|_| ())
        })
    }

    /// Points `refs/snapshots/<tree>` at the tree.
    fn keep(&self, tree: ObjectId) -> Result<(), SnapshotError> {
        let repo = self.repo();
        let name = Self::ref_name(&tree.to_hex().to_string());
        repo.reference(
            name.as_str(),
            tree,
            gix::refs::transaction::PreviousValue::Any,
            "snapshot",
        )
        .map_err(|e| SnapshotError::git(format!("writing {name}"), e))?;
        Ok(())
    }

    /// Parses a snapshot id and checks that the store has it.
    pub fn resolve(&self, id: &str) -> Result<ObjectId, SnapshotError> {
        let oid =
            ObjectId::from_hex(id.as_bytes()).map_err(|_| SnapshotError::Missing(id.to_owned()))?;
        let repo = self.repo();
        match repo.find_object(oid) {
            Ok(o) if o.kind == gix::object::Kind::Tree => Ok(oid),
            _ => Err(SnapshotError::Missing(id.to_owned())),
        }
    }

    /// The files of a snapshot.
    pub fn files(&self, tree: ObjectId) -> Result<Files, SnapshotError> {
        let repo = self.repo();
        let tree = repo
            .find_tree(tree)
            .map_err(|_| SnapshotError::Missing(tree.to_hex().to_string()))?;
        let records = tree
            .traverse()
            .breadthfirst
            .files()
            .map_err(|e| SnapshotError::git(format!("reading tree {}", tree.id), e))?;
        let mut out = Files::new();
        for r in records {
            let kind = match FileKind::from_git_mode(r.mode.value() as u32) {
                Some(k) => k,
                None => continue,
            };
            let path = String::from_utf8(r.filepath.into())
                .map_err(|e| SnapshotError::git("non-UTF-8 path in a snapshot", e))?;
            out.insert(path, FileEntry { kind, oid: r.oid });
        }
        Ok(out)
    }

    /// The content of a blob.
    pub fn blob(&self, oid: ObjectId) -> Result<Vec<u8>, SnapshotError> {
        let repo = self.repo();
        let mut blob = repo
            .find_blob(oid)
            .map_err(|e| SnapshotError::git(format!("reading blob {oid}"), e))?;
        Ok(blob.take_data())
    }

    /// The ids of every snapshot the store keeps (its `refs/snapshots/*`).
    pub fn snapshot_ids(&self) -> Result<Vec<String>, SnapshotError> {
        let repo = self.repo();
        let refs = repo
            .references()
            .map_err(|e| SnapshotError::git("listing refs", e))?;
        let iter = refs
            .prefixed("refs/snapshots/")
            .map_err(|e| SnapshotError::git("listing refs", e))?;
        let mut out = Vec::new();
        for r in iter {
            let r = r.map_err(|e| SnapshotError::git("listing refs", e))?;
            if let Some(id) = r
                .name()
                .as_bstr()
                .to_string()
                .strip_prefix("refs/snapshots/")
            {
                out.push(id.to_owned());
            }
        }
        out.sort();
        Ok(out)
    }
}

/// Phase timings on stderr when `TACHO_SNAPSHOT_TRACE` is set (for profiling).
struct Trace(Option<std::cell::Cell<std::time::Instant>>);

impl Trace {
    fn new() -> Self {
        Trace(
            std::env::var_os("TACHO_SNAPSHOT_TRACE")
                .map(|_| std::cell::Cell::new(std::time::Instant::now())),
        )
    }

    fn mark(&self, phase: &str) {
        if let Some(t) = &self.0 {
            let now = std::time::Instant::now();
            eprintln!(
                "  {phase}: {:.2} ms",
                (now - t.get()).as_secs_f64() * 1000.0
            );
            t.set(now);
        }
    }
}

#[derive(Default)]
struct ReadCounters {
    files: u64,
    bytes: u64,
    written: u64,
}

fn bad_tree_path(path: &str, e: impl std::fmt::Display) -> SnapshotError {
    SnapshotError::BadPath {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// The HEAD commit of the Git repository holding `workspace`, read with gix; `None`
/// outside Git or before the first commit.
pub fn head_commit(workspace: &Path) -> Result<Option<String>, SnapshotError> {
    let ws = canonical_workspace(workspace)?;
    let Some(ctx) = scan::git_context(&ws)? else {
        return Ok(None);
    };
    Ok(ctx.repo.head_id().ok().map(|id| id.to_hex().to_string()))
}

/// The absolute, symlink-free path of an existing workspace directory.
pub fn canonical_workspace(workspace: &Path) -> Result<PathBuf, SnapshotError> {
    let ws = workspace
        .canonicalize()
        .map_err(|e| SnapshotError::Workspace {
            path: workspace.to_path_buf(),
            reason: e.to_string(),
        })?;
    if !ws.is_dir() {
        return Err(SnapshotError::Workspace {
            path: ws,
            reason: "not a directory".into(),
        });
    }
    Ok(ws)
}

/// A path named by a caller, made relative to the workspace: absolute paths must lie
/// inside it; `..`, empty components and `.git` are refused.
pub fn relative_path(workspace: &Path, path: &str) -> Result<String, SnapshotError> {
    let bad = |reason: &str| SnapshotError::BadPath {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let p = Path::new(path);
    let rel = if p.is_absolute() {
        p.strip_prefix(workspace)
            .map_err(|_| bad("outside the workspace"))?
    } else {
        p
    };
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            std::path::Component::Normal(s) => {
                let s = s.to_str().ok_or_else(|| bad("not UTF-8"))?;
                if s == ".git" {
                    return Err(bad("inside .git"));
                }
                out.push(s);
            }
            std::path::Component::CurDir => {}
            _ => return Err(bad("leaves the workspace (`..` or a root)")),
        }
    }
    if out.is_empty() {
        return Err(bad("names the workspace itself"));
    }
    Ok(out.join("/"))
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

use cache::CacheEntry;

fn stat_entry(path: &str, m: &FileStat) -> CacheEntry {
    CacheEntry {
        path: path.to_owned(),
        size: m.size,
        mtime_ns: m.mtime_ns,
        ctime_ns: m.ctime_ns,
        ino: m.ino,
        dev: m.dev,
        mode: m.mode,
        git_mode: 0,
        oid: [0; 20],
    }
}

/// Records a snapshot as the workspace's last one and describes it.
#[allow(clippy::too_many_arguments)]
fn finish(
    cache_paths: &cache::CachePaths,
    tree: ObjectId,
    files: u64,
    bytes: u64,
    read: ReadCounters,
    mut excluded: Vec<Excluded>,
    full_scan: bool,
    walked: bool,
) -> Result<Snapshot, SnapshotError> {
    let mut tree_bytes = [0u8; 20];
    tree_bytes.copy_from_slice(tree.as_bytes());
    cache::save_head(
        &cache_paths.head,
        &cache::Head {
            tree: tree_bytes,
            files,
            bytes,
        },
    )?;
    excluded.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Snapshot {
        id: tree.to_hex().to_string(),
        tree,
        files,
        bytes,
        files_read: read.files,
        bytes_read: read.bytes,
        objects_written: read.written,
        excluded,
        full_scan,
        walked,
    })
}

/// The metadata (not following links) of every listed path, on `threads` threads;
/// what the walk already read is kept. Paths are sorted, so the files of a directory
/// come together and are looked up through one descriptor of it.
fn stat_all(
    workspace: &Path,
    paths: Vec<(String, Option<FileStat>)>,
    threads: usize,
) -> Vec<(String, std::io::Result<FileStat>)> {
    // Runs of paths that share a directory and have no metadata yet.
    let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
    let dir_of = |p: &str| p.rfind('/').map_or("", |i| &p[..i]).to_owned();
    let mut i = 0;
    while i < paths.len() {
        let mut j = i + 1;
        if paths[i].1.is_none() {
            let d = dir_of(&paths[i].0);
            while j < paths.len() && paths[j].1.is_none() && dir_of(&paths[j].0) == d {
                j += 1;
            }
        }
        groups.push(i..j);
        i = j;
    }
    let stat_group = |r: std::ops::Range<usize>| -> Vec<std::io::Result<FileStat>> {
        let group = &paths[r];
        if let Some(m) = group[0].1 {
            return vec![Ok(m)];
        }
        let dir = dir_of(&group[0].0);
        let names: Vec<&str> = group
            .iter()
            .map(|(p, _)| p.rsplit('/').next().unwrap_or(p))
            .collect();
        stat::lstat_in(&workspace.join(&dir), &names)
    };
    let missing = paths.iter().filter(|p| p.1.is_none()).count();
    let results: Vec<std::io::Result<FileStat>> = if missing < 512 || threads < 2 {
        groups.into_iter().flat_map(stat_group).collect()
    } else {
        // Contiguous shares of the groups, one per thread, joined in order.
        let share = groups.len().div_ceil(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = groups
                .chunks(share)
                .map(|c| {
                    let c = c.to_vec();
                    s.spawn(move || c.into_iter().flat_map(stat_group).collect::<Vec<_>>())
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    };
    paths.into_iter().map(|(p, _)| p).zip(results).collect()
}

/// The last walk's listing, when repeating the walk would give the same: it was a walk
/// outside Git that read every directory, no directory has changed since (and none
/// changed within the racy window before that scan), and no ignore file changed.
fn reuse_listing(
    workspace: &Path,
    old: &cache::CacheFile,
    old_index: &HashMap<&str, &CacheEntry>,
    trusted_before: i64,
) -> Option<scan::Listing> {
    if old.dirs.is_empty() {
        return None;
    }
    for d in &old.dirs {
        let m = stat::lstat(&workspace.join(&d.path)).ok()?;
        let now = cache::DirStamp::of(d.path.clone(), &m);
        if now != *d || d.mtime_ns >= trusted_before || !m.is_dir() {
            return None;
        }
    }
    let mut listed: Vec<&str> = old
        .entries
        .iter()
        .map(|e| e.path.as_str())
        .chain(old.listed_extra.iter().map(String::as_str))
        .collect();
    if !old.listed_extra.is_empty() {
        listed.sort_unstable();
    }
    for p in &listed {
        let name = p.rsplit('/').next().unwrap_or(p);
        if name == ".gitignore" || name == ".ignore" {
            let c = old_index.get(p)?;
            let m = stat::lstat(&workspace.join(p)).ok()?;
            if !same_stat(c, &stat_entry("", &m)) || c.mtime_ns >= trusted_before {
                return None;
            }
        }
    }
    let excluded = old
        .listed_excluded
        .iter()
        .map(|x| {
            let reason = match x.code {
                0 => ExcludeReason::Special,
                1 => ExcludeReason::NestedRepository,
                3 => ExcludeReason::NotUtf8,
                _ => ExcludeReason::Unreadable(x.detail.clone()),
            };
            Excluded::new(x.path.clone(), reason)
        })
        .collect();
    Some(scan::Listing {
        paths: listed.into_iter().map(|p| (p.to_owned(), None)).collect(),
        excluded,
        dirs: old.dirs.clone(),
    })
}

/// A walk's exclusion as the cache keeps it.
fn listed_exclusion(x: &Excluded) -> Option<cache::ListedExclusion> {
    let (code, detail) = match &x.reason {
        ExcludeReason::Special => (0, String::new()),
        ExcludeReason::NestedRepository => (1, String::new()),
        ExcludeReason::Unreadable(e) => (2, e.clone()),
        ExcludeReason::NotUtf8 => (3, String::new()),
        _ => return None,
    };
    Some(cache::ListedExclusion {
        path: x.path.clone(),
        code,
        detail,
    })
}

/// What differs between two path-sorted entry lists: (set in `new`, gone from `old`).
#[allow(clippy::type_complexity)]
fn changes<'a>(
    old: &'a [CacheEntry],
    new: &'a [CacheEntry],
) -> (Vec<(&'a str, &'a CacheEntry)>, Vec<&'a str>) {
    let (mut set, mut gone) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some(o), Some(n)) if o.path == n.path => {
                if o.oid != n.oid || o.git_mode != n.git_mode {
                    set.push((n.path.as_str(), n));
                }
                i += 1;
                j += 1;
            }
            (Some(o), Some(n)) if o.path < n.path => {
                gone.push(o.path.as_str());
                i += 1;
            }
            (Some(o), None) => {
                gone.push(o.path.as_str());
                i += 1;
            }
            (_, Some(n)) => {
                set.push((n.path.as_str(), n));
                j += 1;
            }
            (None, None) => break,
        }
    }
    (set, gone)
}

fn same_stat(a: &CacheEntry, b: &CacheEntry) -> bool {
    a.size == b.size
        && a.mtime_ns == b.mtime_ns
        && a.ctime_ns == b.ctime_ns
        && a.ino == b.ino
        && a.dev == b.dev
        && a.mode == b.mode
}

/// Reads one file or link without following links and stores its blob. A file that
/// changes while being read is retried, then reported.
fn store_file(
    repo: &gix::Repository,
    workspace: &Path,
    rel: &str,
    listed: &FileStat,
) -> Result<Result<(CacheEntry, bool), ExcludeReason>, SnapshotError> {
    let abs = workspace.join(rel);
    let mut meta = *listed;
    for _attempt in 0..3 {
        let (data, kind) = if meta.file_type().is_symlink() {
            let target = match std::fs::read_link(&abs) {
                Ok(t) => t,
                Err(e) => return Ok(Err(ExcludeReason::Unreadable(e.to_string()))),
            };
            if link_leaves(rel, &target) {
                return Ok(Err(ExcludeReason::LinkOutside));
            }
            (target.into_os_string().into_encoded_bytes(), FileKind::Link)
        } else {
            let mut f = match std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(
                    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32,
                )
                .open(&abs)
            {
                Ok(f) => f,
                Err(e) => return Ok(Err(ExcludeReason::Unreadable(e.to_string()))),
            };
            let mut data = Vec::with_capacity(meta.len() as usize);
            if let Err(e) = f.read_to_end(&mut data) {
                return Ok(Err(ExcludeReason::Unreadable(e.to_string())));
            }
            let after = match f.metadata() {
                Ok(m) => FileStat::of(&m),
                Err(e) => return Ok(Err(ExcludeReason::Unreadable(e.to_string()))),
            };
            if !same_stat(&stat_entry(rel, &after), &stat_entry(rel, &meta))
                || data.len() as u64 != after.len()
            {
                meta = after;
                continue;
            }
            let kind = if meta.executable() {
                FileKind::Executable
            } else {
                FileKind::Regular
            };
            (data, kind)
        };
        let oid = gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::object::Kind::Blob, &data)
            .map_err(|e| SnapshotError::git(format!("hashing {rel}"), e))?;
        // No refresh of the pack list on a miss: a first snapshot misses on every file,
        // and a blob that only a pack written meanwhile holds is merely stored twice.
        let written = if repo.objects.exists_without_refresh(&oid) {
            false
        } else {
            use gix::prelude::Write;
            repo.objects
                .write_buf_with_known_id(gix::object::Kind::Blob, &data, oid)
                .map_err(|e| SnapshotError::git(format!("writing the blob of {rel}"), e))?;
            true
        };
        let mut e = stat_entry(rel, &meta);
        e.size = data.len() as u64;
        e.git_mode = kind.git_mode();
        e.oid.copy_from_slice(oid.as_bytes());
        return Ok(Ok((e, written)));
    }
    Ok(Err(ExcludeReason::Unstable))
}

/// Whether a link at `rel` (workspace-relative) with this target points outside the
/// workspace, judged on the text of the target (links are never followed).
fn link_leaves(rel: &str, target: &Path) -> bool {
    if target.is_absolute() {
        return true;
    }
    // Depth of the link's directory below the workspace root.
    let mut depth = rel.split('/').count() as i64 - 1;
    for c in target.components() {
        match c {
            std::path::Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            std::path::Component::Normal(_) => depth += 1,
            std::path::Component::CurDir => {}
            _ => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_that_climb_out_are_outside() {
        assert!(link_leaves("a", Path::new("/etc/passwd")));
        assert!(link_leaves("a", Path::new("../x")));
        assert!(link_leaves("d/a", Path::new("../../x")));
        assert!(!link_leaves("d/a", Path::new("../x")));
        assert!(!link_leaves("d/a", Path::new("e/../../x")));
        assert!(link_leaves("d/a", Path::new("e/../../../x")));
    }

    #[test]
    fn caller_paths_stay_inside() {
        let ws = Path::new("/w");
        assert_eq!(relative_path(ws, "a/./b").unwrap(), "a/b");
        assert_eq!(relative_path(ws, "/w/a").unwrap(), "a");
        assert!(relative_path(ws, "../a").is_err());
        assert!(relative_path(ws, "a/../../b").is_err());
        assert!(relative_path(ws, "/etc/passwd").is_err());
        assert!(relative_path(ws, ".git/config").is_err());
        assert!(relative_path(ws, ".").is_err());
    }
}
