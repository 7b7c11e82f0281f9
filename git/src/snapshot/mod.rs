//! The snapshot store: file contents of workspaces, kept as Git objects in a bare
//! repository in tacho's data directory, written in-process with gix.
//!
//! A snapshot is a Git tree. Its id is the tree's object id and it is kept alive by the
//! ref `refs/snapshots/<id>`. Identical content is one object however many snapshots
//! hold it. The project's work tree and its own `.git/` are only ever read.
//!
//! See SPEC.md §10 for what a snapshot holds and what it leaves out.

mod cache;
mod delta;
mod diff;
mod full;
mod gc;
mod modes;
mod mounts;
mod pack;
mod paths;
pub mod scan;
pub(crate) mod stat;
mod targeted;
mod tree;
mod types;
pub mod watch;
mod watched;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use stat::FileStat;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use gix::ObjectId;
use gix::object::tree::EntryKind;

pub use diff::{
    ChangeKind, FileDiff, LINE_DIFF_BYTES_MAX, LineChanges, PathChange, carry_lines,
    changed_line_ranges, line_changes, text as blob_text, text_lines,
};
pub(crate) use gc::reach as reach_tree;
pub use gc::{GC_WAIT, GcReport, StoreUsage, WriteGuard};
pub use modes::{MODES_NAME, perms_of};
pub(crate) use mounts::{pseudo_fs_of, pseudo_mounts_under, under_mount};
pub use pack::{PACK_BYTES_MAX, PACK_MIN_FILES};
pub use paths::{canonical_workspace, head_commit, relative_path, snapshot_workspace};
pub(crate) use tree::open_regular;
pub use tree::read_regular;
pub use types::*;

use full::*;

use paths::*;
pub(crate) use paths::{gone, linked_parent};
pub(crate) use scan::slash_path;
use tree::*;

/// `id`'s object must hash to `id`: the store is a directory the agent can write, and
/// an object file replaced by another valid object is refused, never read as what its
/// id names (blobs, the trees of `files`, the trees a new snapshot is built on).
pub(crate) fn check_id(
    id: ObjectId,
    kind: gix::object::Kind,
    data: &[u8],
) -> Result<(), SnapshotError> {
    let actual = gix::objs::compute_hash(gix::hash::Kind::Sha1, kind, data)
        .map_err(|e| SnapshotError::git(format!("hashing {kind} {id}"), e))?;
    if actual != id {
        return Err(SnapshotError::Repository(format!(
            "{kind} {id} holds content whose id is {actual}: the object was replaced or damaged"
        )));
    }
    Ok(())
}

/// The snapshot store of a data directory.
#[derive(Clone)]
pub struct SnapshotStore {
    root: PathBuf,
    cache_dir: PathBuf,
    /// Opened at first use: a snapshot the workspace's watcher takes needs no handle
    /// in the process that asked (opening one is half of such a process's own work).
    repo: std::sync::OnceLock<gix::ThreadSafeRepository>,
    max_file_bytes: u64,
    pack_bytes_max: usize,
    pack_min_files: usize,
    /// Threads that read and hash files: one per core unless set, asked of the system
    /// at first use (the answer reads cgroup files; most processes never need it).
    threads: std::sync::OnceLock<usize>,
    /// Objects this handle wrote into small packs: a handle lists the packs only when
    /// it opens or misses an object, so without this it would take what it just
    /// wrote for missing and write it again (a watcher's next snapshot).
    batched: std::sync::Arc<std::sync::Mutex<HashSet<ObjectId>>>,
}

/// Creates the store's repository once, however many processes try at the same time:
/// each initialises a repository of its own beside `root` and renames it into place;
/// the first rename wins and the others open what it made.
fn init_once(root: &Path) -> Result<(), SnapshotError> {
    let parent = root.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| SnapshotError::io(parent, e))?;
    let tmp = parent.join(format!(
        ".{}.init-{}-{}",
        root.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("snapshots"),
        std::process::id(),
        now_ns()
    ));
    gix::init_bare(&tmp)
        .map_err(|e| SnapshotError::git(format!("creating {}", tmp.display()), e))?;
    // Git's sample hooks (22 KB): no hook ever runs in this store.
    let _ = std::fs::remove_dir_all(tmp.join("hooks"));
    // The 256 directories of loose objects, made once here (gc leaves them): a store
    // whose first snapshot was a pack would otherwise make them one by one in later
    // snapshots, each as dear as an object.
    for i in 0..=255u8 {
        let d = tmp.join("objects").join(format!("{i:02x}"));
        std::fs::create_dir_all(&d).map_err(|e| SnapshotError::io(&d, e))?;
    }
    match std::fs::rename(&tmp, root) {
        Ok(()) => Ok(()),
        Err(_) => {
            // Another process made it first (or an empty directory stood there).
            let _ = std::fs::remove_dir_all(&tmp);
            if root.join("HEAD").exists() {
                return Ok(());
            }
            // An empty directory: take its place.
            std::fs::remove_dir(root).map_err(|e| SnapshotError::io(root, e))?;
            init_once(root)
        }
    }
}

impl SnapshotStore {
    /// Opens (creating it if needed) the store at `root`, a bare Git repository, with
    /// derived caches under `cache_dir`.
    pub fn open(
        root: impl Into<PathBuf>,
        cache_dir: impl Into<PathBuf>,
    ) -> Result<Self, SnapshotError> {
        let root = root.into();
        if !root.join("HEAD").exists() {
            init_once(&root)?;
        }
        Ok(SnapshotStore {
            root,
            cache_dir: cache_dir.into(),
            repo: std::sync::OnceLock::new(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            pack_bytes_max: pack::PACK_BYTES_MAX,
            pack_min_files: pack::PACK_MIN_FILES,
            threads: std::sync::OnceLock::new(),
            batched: Default::default(),
        })
    }

    /// Sets the per-file size limit.
    pub fn with_max_file_bytes(mut self, n: u64) -> Self {
        self.max_file_bytes = n;
        self
    }

    /// Sets how many compressed bytes of a snapshot's new objects one pack holds
    /// (default [`PACK_BYTES_MAX`]); a snapshot with more writes several.
    pub fn with_pack_bytes_max(mut self, n: usize) -> Self {
        self.pack_bytes_max = n.max(1);
        self
    }

    /// Sets how many files a snapshot must read to write its new objects as packs
    /// (default [`PACK_MIN_FILES`]; 0: every snapshot writes a pack, as the benchmark
    /// that measured it against loose objects does).
    pub fn with_pack_min_files(mut self, n: usize) -> Self {
        self.pack_min_files = n;
        self
    }

    /// Sets how many threads read and hash files (default: one per core).
    pub fn with_threads(mut self, n: usize) -> Self {
        self.threads = std::sync::OnceLock::from(n.max(1));
        self
    }

    /// How many threads read and hash files.
    pub(crate) fn threads(&self) -> usize {
        *self
            .threads
            .get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// The bare repository's directory (what `git --git-dir` takes).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// This store with the same settings and a handle of its repository opened anew
    /// at first use: one that knows only the packs there are then (a watcher's, kept
    /// across gc).
    pub(crate) fn reopened(&self) -> Self {
        SnapshotStore {
            repo: std::sync::OnceLock::new(),
            batched: Default::default(),
            ..self.clone()
        }
    }

    /// A handle of the store's repository (opened at the first call).
    pub(crate) fn repo(&self) -> Result<gix::Repository, SnapshotError> {
        if let Some(r) = self.repo.get() {
            return Ok(r.to_thread_local());
        }
        let options = gix::open::Options::isolated()
            .config_overrides([format!("core.looseCompression={COMPRESSION_LEVEL}")]);
        let repo = gix::open_opts(&self.root, options)
            .map_err(|e| SnapshotError::git(format!("opening {}", self.root.display()), e))?;
        Ok(self.repo.get_or_init(|| repo.into_sync()).to_thread_local())
    }

    /// Whether the store holds `id` as this handle knows it: in a pack or loose object
    /// it listed, or in a small pack it wrote itself. No listing of the packs again on
    /// a miss: a first snapshot misses on every file, and a blob that only a pack
    /// written meanwhile by another process holds is merely stored twice.
    pub(crate) fn has(&self, repo: &gix::Repository, id: &ObjectId) -> bool {
        repo.objects.exists_without_refresh(id) || self.batched.lock().is_ok_and(|b| b.contains(id))
    }

    /// Notes objects this handle wrote into a small pack.
    pub(crate) fn note_batched(&self, ids: impl Iterator<Item = ObjectId>) {
        if let Ok(mut b) = self.batched.lock() {
            b.extend(ids);
        }
    }

    /// The ref that keeps a snapshot alive.
    pub fn ref_name(id: &str) -> String {
        format!("refs/snapshots/{id}")
    }

    /// What a scan of `workspace` works with.
    fn scanning(&self, workspace: &Path) -> Result<Scanning, SnapshotError> {
        let workspace = snapshot_workspace(workspace)?;
        let ws_text = workspace
            .to_str()
            .ok_or_else(|| SnapshotError::NotUtf8(workspace.clone()))?
            .to_owned();
        Ok(Scanning {
            cache_paths: cache::paths(&self.cache_dir, &workspace),
            skip: self.own_dir_inside(&workspace),
            ws_text,
            workspace,
        })
    }

    /// Takes a snapshot of `workspace`. `skip` names a directory inside it (relative)
    /// that is never snapshotted, such as tacho's own data directory.
    pub fn take(&self, workspace: &Path, scope: &Scope) -> Result<Snapshot, SnapshotError> {
        // gc waits while objects are written and the ref is made (callers hold their
        // own guard on top, until the snapshot is recorded).
        let _guard = self.write_guard()?;
        let Scanning {
            workspace,
            ws_text,
            cache_paths,
            skip,
        } = self.scanning(workspace)?;
        // Named paths are checked whatever scan follows: a bad one is an error even when
        // there is no earlier snapshot to update and a full scan is taken instead.
        if let Scope::Paths(paths) = scope {
            for p in paths {
                relative_path(&workspace, p)?;
            }
        }
        match scope {
            Scope::Paths(paths) => match cache::load_head(&cache_paths.head) {
                Some(head)
                    if self
                        .repo()?
                        .has_object(ObjectId::from_bytes_or_panic(&head.tree)) =>
                {
                    self.take_paths(&workspace, head, paths, skip.as_deref(), &cache_paths)
                }
                _ => self.take_full(
                    &workspace,
                    &ws_text,
                    skip.as_deref(),
                    &cache_paths,
                    full::WatcherUse::Ask,
                ),
            },
            Scope::Full => self.take_full(
                &workspace,
                &ws_text,
                skip.as_deref(),
                &cache_paths,
                full::WatcherUse::Ask,
            ),
        }
    }

    /// A full snapshot of `workspace` that this process reads itself whatever the
    /// workspace's watcher says, with the watcher's own snapshot of the same moment
    /// compared with it: the paths the watcher's left as they were though they had
    /// changed before it was asked are [`Checked::missed`] (SPEC.md §10.6). A watcher
    /// learns only what inotify reports, and a write through a hard link from outside
    /// the workspace or through a shared mapping raises no event there: a check at each
    /// turn's end keeps the record true all the same, and makes such a write evidence.
    /// Without a watcher it is a full scan and nothing more.
    pub fn take_checked(&self, workspace: &Path) -> Result<Checked, SnapshotError> {
        let _guard = self.write_guard()?;
        let Scanning {
            workspace,
            ws_text,
            cache_paths,
            skip,
        } = self.scanning(workspace)?;
        let asked_ns = now_ns();
        let reply = watch::socket_path(&self.cache_dir, &workspace)
            .exists()
            .then(|| watch::served_snapshot(&self.cache_dir, &workspace, self.max_file_bytes))
            .flatten();
        let token = reply.as_ref().map(|r| r.token);
        let served = reply
            .and_then(|r| r.snapshot)
            .and_then(watch::ServedSnapshot::into_snapshot);
        let own = self.take_full(
            &workspace,
            &ws_text,
            skip.as_deref(),
            &cache_paths,
            full::WatcherUse::Checking(token),
        )?;
        let missed = match &served {
            Some(s) if s.tree != own.tree => self
                .diff(&s.id, &own.id)?
                .into_iter()
                .filter(|c| changed_before(&workspace, &c.path, asked_ns))
                .map(|c| c.path)
                .collect(),
            _ => Vec::new(),
        };
        Ok(Checked {
            served: served.map(|s| s.id),
            snapshot: own,
            missed,
        })
    }

    /// Runs a watcher of `workspace` in this thread until it is asked to stop, the
    /// workspace goes away or (with `idle`) no scan asked for that long; full scans of the workspace by any process of this store
    /// then look only at the paths it saw change. `ready` is called once it answers.
    pub fn watch(
        &self,
        workspace: &Path,
        idle: Option<std::time::Duration>,
        ready: impl FnOnce(),
    ) -> Result<(), watch::WatchError> {
        let workspace = snapshot_workspace(workspace)?;
        let skip = self.own_dir_inside(&workspace);
        watch::serve(self, &workspace, skip, idle, ready)
    }

    /// The status of `workspace`'s watcher, if one runs.
    pub fn watch_status(
        &self,
        workspace: &Path,
    ) -> Result<Option<watch::WatchStatus>, SnapshotError> {
        let workspace = canonical_workspace(workspace)?;
        Ok(watch::status(&self.cache_dir, &workspace))
    }

    /// Whether a watcher of `workspace` runs (its lock is held; nothing is asked).
    pub fn watch_running(&self, workspace: &Path) -> Result<bool, SnapshotError> {
        let workspace = canonical_workspace(workspace)?;
        Ok(watch::is_running(&self.cache_dir, &workspace))
    }

    /// Every running watcher of this store's workspaces.
    pub fn watchers(&self) -> Vec<watch::WatchStatus> {
        watch::running(&self.cache_dir)
    }

    /// Stops `workspace`'s watcher; whether one was running.
    pub fn watch_stop(&self, workspace: &Path) -> Result<bool, SnapshotError> {
        let workspace = canonical_workspace(workspace)?;
        Ok(watch::stop(&self.cache_dir, &workspace))
    }

    /// Where a watcher of `workspace` (canonical) started in the background writes.
    pub fn watch_log(&self, workspace: &Path) -> PathBuf {
        watch::socket_path(&self.cache_dir, workspace).with_extension("log")
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

    /// Writes the new objects of a snapshot that still wait in memory, then its ref.
    fn keep(&self, tree: ObjectId, writes: pack::Writes) -> Result<(), SnapshotError> {
        self.flush(writes)?;
        self.make_ref(tree)
    }

    /// Points `refs/snapshots/<tree>` at the tree (unless it does already).
    pub(crate) fn make_ref(&self, tree: ObjectId) -> Result<(), SnapshotError> {
        let repo = self.repo()?;
        let name = Self::ref_name(&tree.to_hex().to_string());
        if let Ok(Some(r)) = repo.try_find_reference(name.as_str())
            && r.target().try_id() == Some(tree.as_ref())
        {
            return Ok(());
        }
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
        let repo = self.repo()?;
        match repo.find_object(oid) {
            Ok(o) if o.kind == gix::object::Kind::Tree => Ok(oid),
            _ => Err(SnapshotError::Missing(id.to_owned())),
        }
    }

    /// The files of a snapshot.
    ///
    /// Every tree object read is checked against its id, as every blob is
    /// ([`SnapshotStore::blob`]): the store is a directory the agent can write, and a
    /// tree object swapped for another valid one would otherwise plan a rollback to
    /// other contents, each of them a genuine blob.
    pub fn files(&self, tree: ObjectId) -> Result<Files, SnapshotError> {
        let repo = self.repo()?;
        let mut out = Files::new();
        let mut modes = modes::Modes::default();
        let mut pending: Vec<(String, ObjectId)> = vec![(String::new(), tree)];
        while let Some((prefix, id)) = pending.pop() {
            let obj = match repo.find_object(id) {
                Ok(o) if o.kind == gix::object::Kind::Tree => o,
                _ if prefix.is_empty() => {
                    return Err(SnapshotError::Missing(id.to_hex().to_string()));
                }
                Ok(o) => {
                    return Err(SnapshotError::Repository(format!(
                        "{prefix}: tree {id} is a {} in the snapshot store",
                        o.kind
                    )));
                }
                Err(e) => return Err(SnapshotError::git(format!("reading tree {id}"), e)),
            };
            check_id(id, gix::object::Kind::Tree, &obj.data)?;
            for entry in gix::objs::TreeRefIter::from_bytes(&obj.data, gix::hash::Kind::Sha1) {
                let e = entry.map_err(|e| SnapshotError::git(format!("reading tree {id}"), e))?;
                if prefix.is_empty()
                    && let Some(id) = modes::entry_of(e.filename, e.mode, e.oid.to_owned())?
                {
                    modes = modes::read(&repo, id)?;
                    continue;
                }
                let name = std::str::from_utf8(e.filename)
                    .map_err(|e| SnapshotError::git("non-UTF-8 path in a snapshot", e))?;
                let path = match prefix.is_empty() {
                    true => name.to_string(),
                    false => format!("{prefix}/{name}"),
                };
                if e.mode.is_tree() {
                    pending.push((path, e.oid.to_owned()));
                } else if let Some(kind) = FileKind::from_git_mode(e.mode.value() as u32) {
                    out.insert(path, FileEntry::plain(kind, e.oid.to_owned()));
                }
            }
        }
        modes::check(&modes, &out, tree)?;
        for (path, e) in out.iter_mut() {
            e.perms = modes.perms(path, e.kind);
        }
        Ok(out)
    }

    /// What snapshot `snapshot` holds at `path` (workspace-relative, `/`-separated): one
    /// lookup along the path, not a walk of the tree.
    pub fn entry(&self, snapshot: &str, path: &str) -> Result<Option<FileEntry>, SnapshotError> {
        let tree = self.resolve(snapshot)?;
        let repo = self.repo()?;
        let tree = repo
            .find_tree(tree)
            .map_err(|_| SnapshotError::Missing(tree.to_hex().to_string()))?;
        let found = tree
            .lookup_entry_by_path(path)
            .map_err(|e| SnapshotError::git(format!("looking up {path} in tree {}", tree.id), e))?;
        let Some(mut entry) = found.and_then(|e| {
            FileKind::from_git_mode(e.mode().value() as u32)
                .map(|kind| FileEntry::plain(kind, e.object_id()))
        }) else {
            return Ok(None);
        };
        if let Some(m) = tree.find_entry(modes::MODES_NAME)
            && let Some(id) = modes::entry_of(modes::MODES_NAME, m.mode(), m.object_id())?
        {
            let modes = modes::read(&repo, id)?;
            let perms = modes.perms(path, entry.kind);
            if (entry.kind == FileKind::Link && modes.files.contains_key(path))
                || (entry.kind != FileKind::Link && FileKind::of_file_mode(perms) != entry.kind)
            {
                return Err(SnapshotError::Repository(format!(
                    "snapshot {snapshot}: its modes entry gives {path:?} bits {perms:o}, which a {} cannot have",
                    entry.kind.as_str()
                )));
            }
            entry.perms = perms;
        }
        Ok(Some(entry))
    }

    /// Calls `f` with the path and bytes of each regular file or link of snapshot
    /// `tree` whose blob is not in `skip`, adding it there (each blob once, whichever
    /// snapshot holds it first): what a push publishes that a scan must read.
    pub fn for_each_new_blob(
        &self,
        tree: ObjectId,
        skip: &mut std::collections::HashSet<ObjectId>,
        f: &mut dyn FnMut(&str, &[u8]),
    ) -> Result<(), SnapshotError> {
        for (path, entry) in self.files(tree)? {
            if skip.insert(entry.oid) {
                let bytes = self.blob(entry.oid)?;
                f(&path, &bytes);
            }
        }
        Ok(())
    }

    /// The content of a blob, checked against its id: an object file replaced by another
    /// (valid) object is refused, never read as the content the tree names.
    pub fn blob(&self, oid: ObjectId) -> Result<Vec<u8>, SnapshotError> {
        let repo = self.repo()?;
        let mut blob = repo
            .find_blob(oid)
            .map_err(|e| SnapshotError::git(format!("reading blob {oid}"), e))?;
        let data = blob.take_data();
        check_id(oid, gix::object::Kind::Blob, &data)?;
        Ok(data)
    }

    /// The ids of every snapshot the store keeps (its `refs/snapshots/*`).
    pub fn snapshot_ids(&self) -> Result<Vec<String>, SnapshotError> {
        let repo = self.repo()?;
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

/// The zlib level of the objects a snapshot writes, loose or packed. zlib-rs's level 1
/// (what Git's `core.looseCompression` defaults to) is a faster strategy than zlib's
/// and compresses worse: a 1 MiB text file took 71,352 bytes against Git's 42,908.
/// Its level 2 is zlib's level 1: 42,805 bytes, in 2.3 ms where level 1 took 1.9.
pub(crate) const COMPRESSION_LEVEL: i32 = 2;

/// [`COMPRESSION_LEVEL`] as gix takes it.
pub(crate) fn compression() -> gix::zlib::Compression {
    gix::zlib::Compression::new(COMPRESSION_LEVEL).unwrap_or(gix::zlib::Compression::BEST_SPEED)
}

/// The id the store gives a blob holding `data` (Git's: SHA-1 of the blob), in hex.
pub fn blob_id(data: &[u8]) -> String {
    gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::object::Kind::Blob, data)
        .map_or_else(|_| String::new(), |id| id.to_hex().to_string())
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

/// A workspace as a scan takes it: its path as snapshots name it, that path as text,
/// its cache files, and tacho's own directory inside it (never snapshotted).
struct Scanning {
    workspace: PathBuf,
    ws_text: String,
    cache_paths: cache::CachePaths,
    skip: Option<String>,
}

/// Whether the change at `rel` in `workspace` (a path a watcher's snapshot and a scan
/// disagree on) was made before `asked_ns`: its status (or, for a path gone, its
/// directory's) changed before then. A change made while the two were taken is no one's
/// miss. The kernel stamps changes with a clock that lags by up to a tick: a change this
/// close before the watcher was asked counts as made during it.
fn changed_before(workspace: &Path, rel: &str, asked_ns: i64) -> bool {
    const TICK_NS: i64 = 20_000_000;
    let mut at = workspace.join(rel);
    let meta = loop {
        match std::fs::symlink_metadata(&at) {
            Ok(m) => break Some(m),
            Err(_) if at.pop() && at.starts_with(workspace) => continue,
            Err(_) => break None,
        }
    };
    use std::os::unix::fs::MetadataExt;
    meta.is_some_and(|m| {
        m.ctime()
            .saturating_mul(1_000_000_000)
            .saturating_add(m.ctime_nsec())
            < asked_ns - TICK_NS
    })
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
    watched: bool,
) -> Result<Snapshot, SnapshotError> {
    let mut tree_bytes = [0u8; 20];
    tree_bytes.copy_from_slice(tree.as_bytes());
    let head = cache::Head {
        tree: tree_bytes,
        files,
        bytes,
    };
    if cache::load_head(&cache_paths.head) != Some(head) {
        cache::save_head(&cache_paths.head, &head)?;
    }
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
        watched,
    })
}
