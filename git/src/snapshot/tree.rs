//! Reading and hashing files on all threads, editing trees in memory, and writing
//! the new objects.

use super::*;

/// Files read per hashing thread at least. Below it (a snapshot of a few changed
/// files) they are read on the calling thread, with no thread started. Measured with
/// the watcher after 10 edits: two threads took the hashing (reading, compressing and
/// writing each blob) from about 1.0 to 0.7 ms, worth the starts.
const FILES_PER_THREAD: usize = 8;

impl SnapshotStore {
    /// Reads, hashes and stores the files at `to_read` (indexes into `entries`) on all
    /// threads, filling in their blob ids and modes. Returns counters and the files
    /// that could not be snapshotted.
    pub(super) fn hash_files(
        &self,
        workspace: &Path,
        entries: &mut [(String, CacheEntry)],
        to_read: &[(usize, FileStat)],
        writes: &pack::Writes,
    ) -> Result<(ReadCounters, Vec<(usize, ExcludeReason)>), SnapshotError> {
        if to_read.is_empty() {
            // Nothing to read (a scan the watcher answered with nothing changed): no
            // thread, no repository handle.
            return Ok((ReadCounters::default(), Vec::new()));
        }
        let next = AtomicUsize::new(0);
        // A thread for every `FILES_PER_THREAD` files at most: starting one costs about
        // what reading a few small files does; up to that many are read here.
        let threads = self
            .threads()
            .min(to_read.len().div_ceil(FILES_PER_THREAD))
            .max(1);
        let shared: &[(String, CacheEntry)] = entries;
        // Opened here once (each thread takes its own handle of it).
        self.repo()?;
        type Outcome = Result<(usize, Result<(CacheEntry, bool), ExcludeReason>), SnapshotError>;
        let work = || -> Vec<Outcome> {
            let mut out = Vec::new();
            let repo = match self.repo() {
                Ok(r) => r,
                Err(e) => {
                    out.push(Err(e));
                    return out;
                }
            };
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some((i, meta)) = to_read.get(k) else {
                    break;
                };
                let path = &shared[*i].0;
                out.push(store_file(self, &repo, writes, workspace, path, meta).map(|r| (*i, r)));
            }
            out
        };
        let results: Vec<Vec<Outcome>> = if threads == 1 {
            vec![work()]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            vec![Err(SnapshotError::Internal("a hashing thread panicked"))]
                        })
                    })
                    .collect()
            })
        };
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
    pub(super) fn edit_tree<'e>(
        &self,
        repo: &mut gix::Repository,
        base: Option<ObjectId>,
        upserts: impl Iterator<Item = (&'e str, &'e CacheEntry)>,
        removals: impl Iterator<Item = &'e str>,
        modes: modes::ModesUpdate<'_>,
        writes: &pack::Writes,
    ) -> Result<ObjectId, SnapshotError> {
        let upserts: Vec<(&str, &CacheEntry)> = upserts.collect();
        let removals: Vec<&str> = removals.collect();
        // Every tree the edit reads (the base, the subtrees along the edited paths) is
        // checked against its id: a tree object swapped in the store would otherwise
        // pass its content into this snapshot under new, genuine ids.
        let root: gix::objs::Tree = match base {
            Some(id) => {
                let t = repo
                    .find_tree(id)
                    .map_err(|e| SnapshotError::git(format!("reading tree {id}"), e))?;
                check_id(id, gix::object::Kind::Tree, &t.data)?;
                t.decode()
                    .map(Into::into)
                    .map_err(|e| SnapshotError::git(format!("reading tree {id}"), e))?
            }
            None => gix::objs::Tree::empty(),
        };
        // The modes entry: the base's, then the new one's.
        let mut base_modes = None;
        for e in &root.entries {
            if let Some(id) = modes::entry_of(e.filename.as_slice(), e.mode, e.oid)? {
                base_modes = Some(id);
            }
        }
        let new_modes = modes::updated(
            &modes,
            match (&modes, base_modes) {
                (modes::ModesUpdate::Edit, Some(id)) => modes::read(repo, id)?,
                _ => modes::Modes::default(),
            },
            &upserts,
            &removals,
        );
        let new_modes = modes::encode(&new_modes);
        repo.objects.enable_object_memory();
        let tree = {
            // The handle itself, not a clone: a clone starts with an empty object
            // cache, and would read again every tree the caller already read.
            let checked = Checked(&repo.objects);
            let mut editor = gix::objs::tree::Editor::new(root, &checked, gix::hash::Kind::Sha1);
            // Removals first: a file that became a directory (`f` gone, `f/inner` new)
            // would otherwise lose the new directory to the removal of `f`.
            for &path in &removals {
                editor
                    .remove(path.split('/'))
                    .map_err(|err| bad_tree_path(path, err))?;
            }
            for &(path, e) in &upserts {
                let kind = FileKind::from_git_mode(e.git_mode).unwrap_or(FileKind::Regular);
                editor
                    .upsert(
                        path.split('/'),
                        kind.entry_kind(),
                        ObjectId::from_bytes_or_panic(&e.oid),
                    )
                    .map_err(|err| bad_tree_path(path, err))?;
            }
            let name = [gix::bstr::BStr::new(modes::MODES_NAME)];
            let bad_modes = |err| bad_tree_path("(the modes entry)", err);
            match new_modes {
                Some(data) => {
                    let id = gix::objs::compute_hash(
                        gix::hash::Kind::Sha1,
                        gix::object::Kind::Blob,
                        &data,
                    )
                    .map_err(|e| SnapshotError::git("hashing the modes entry", e))?;
                    if base_modes != Some(id) {
                        repo.write_blob(&data)
                            .map_err(|e| SnapshotError::git("writing the modes entry", e))?;
                        editor
                            .upsert(name, EntryKind::Blob, id)
                            .map_err(bad_modes)?;
                    }
                }
                None if base_modes.is_some() => {
                    editor.remove(name).map_err(bad_modes)?;
                }
                None => {}
            }
            editor
                .write(|t| repo.write_object(t).map(gix::Id::detach))
                .map_err(|e| SnapshotError::git("writing a tree", e))?
        };
        self.persist(repo.objects.take_object_memory(), writes)?;
        Ok(tree)
    }

    /// Writes objects kept in memory to the store, on all threads.
    pub(super) fn persist(
        &self,
        memory: Option<gix::odb::memory::Storage>,
        writes: &pack::Writes,
    ) -> Result<(), SnapshotError> {
        let Some(memory) = memory else { return Ok(()) };
        let objects: Vec<(&ObjectId, &(gix::object::Kind, Vec<u8>))> = memory.iter().collect();
        let next = AtomicUsize::new(0);
        let threads = self.threads().min(objects.len()).max(1);
        let write = || -> Result<(), SnapshotError> {
            let repo = self.repo()?;
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some((id, (kind, data))) = objects.get(k) else {
                    return Ok(());
                };
                if !self.has(&repo, id) {
                    writes.put(self, &repo, *kind, data, **id, None)?;
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
}

#[derive(Default)]
pub(super) struct ReadCounters {
    pub(super) files: u64,
    pub(super) bytes: u64,
    pub(super) written: u64,
}

/// Opens a file of the workspace for reading without ever blocking or following a
/// link (`O_NONBLOCK | O_NOFOLLOW | O_NOCTTY`: a FIFO swapped in after the listing
/// would otherwise wait for a writer forever), and checks through the descriptor that
/// it is a regular file. Returns the file and its metadata, or why it is left out.
/// (What is then read is bounded by the caller: a regular file of a pseudo file system
/// can say 0 bytes and never end.)
pub(crate) fn open_regular(
    abs: &Path,
) -> std::io::Result<Result<(std::fs::File, FileStat), ExcludeReason>> {
    use rustix::fs::OFlags;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(
            (OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32,
        )
        .open(abs)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Ok(Err(ExcludeReason::Special));
    }
    Ok(Ok((f, FileStat::of(&m))))
}

/// Reads a file someone else may have put in the way (a review declaration, a test
/// report): opened without blocking, read only when its descriptor is a regular file,
/// and at most `limit` bytes — one more is an `InvalidData` error naming the limit,
/// whatever the stat says. Links are followed, as `std::fs::read` does.
pub fn read_regular(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use rustix::fs::OFlags;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY).bits() as i32)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut data = Vec::new();
    f.take(limit.saturating_add(1)).read_to_end(&mut data)?;
    if data.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than the limit of {limit} bytes"),
        ));
    }
    Ok(data)
}

/// Reads one file or link without following links and stores its blob. A file that
/// changes while being read is retried, then reported.
pub(super) fn store_file(
    store: &SnapshotStore,
    repo: &gix::Repository,
    writes: &pack::Writes,
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
            let (mut f, opened) = match open_regular(&abs) {
                Ok(Ok(f)) => f,
                Ok(Err(reason)) => return Ok(Err(reason)),
                Err(e) => return Ok(Err(ExcludeReason::Unreadable(e.to_string()))),
            };
            // Bounded by what is read, not by what the stat said: a file of a pseudo
            // file system says 0 bytes and may never end.
            let limit = store.max_file_bytes;
            let mut data = Vec::with_capacity(opened.len().min(limit) as usize);
            if let Err(e) = f
                .by_ref()
                .take(limit.saturating_add(1))
                .read_to_end(&mut data)
            {
                return Ok(Err(ExcludeReason::Unreadable(e.to_string())));
            }
            if data.len() as u64 > limit {
                return Ok(Err(ExcludeReason::TooLarge(limit)));
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
        let written = if store.has(repo, &oid) {
            false
        } else {
            writes.put(store, repo, gix::object::Kind::Blob, &data, oid, Some(rel))?;
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

/// The object store, every object it hands out checked against its id.
struct Checked<'r>(&'r dyn gix::objs::Find);

impl gix::objs::Find for Checked<'_> {
    fn try_find<'a>(
        &self,
        id: &gix::oid,
        buffer: &'a mut Vec<u8>,
    ) -> gix::error::Result<Option<gix::objs::Data<'a>>> {
        let Some(d) = self.0.try_find(id, buffer)? else {
            return Ok(None);
        };
        check_id(id.to_owned(), d.kind, d.data)
            .map_err(|e| gix::error::Message::from(e.to_string()))?;
        Ok(Some(d))
    }
}
