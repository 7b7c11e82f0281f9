//! Space accounting and garbage collection of the snapshot store.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

use gix::ObjectId;

use super::{SnapshotError, SnapshotStore, check_id};

/// How much space the snapshot store takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreUsage {
    pub snapshots: u64,
    pub loose_objects: u64,
    /// Bytes of loose objects as stored (compressed), and as allocated on disk.
    pub loose_bytes: u64,
    pub loose_disk_bytes: u64,
    pub packs: u64,
    pub pack_bytes: u64,
}

impl StoreUsage {
    /// Everything the store occupies on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.loose_disk_bytes + self.pack_bytes
    }
}

/// What `gc` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcReport {
    pub before: StoreUsage,
    pub after: StoreUsage,
    /// Snapshots whose refs were deleted (no retained session references them).
    pub dropped_snapshots: Vec<String>,
    /// Objects (loose or packed) no kept snapshot reaches, deleted.
    pub pruned_objects: u64,
    /// Objects a kept snapshot reaches, all written into one new pack (the store's
    /// only one afterwards besides any in `unreadable_packs`, with no loose objects
    /// left).
    pub packed_objects: u64,
    /// Kept snapshots whose tree, or an object under it, is missing from the store:
    /// reported every time, never a reason to fail.
    pub incomplete_snapshots: Vec<String>,
    /// Packs whose index cannot be read (`path: error`): left where they are, and
    /// their objects neither counted nor copied.
    pub unreadable_packs: Vec<String>,
}

/// How long `gc` waits for snapshot writers to finish before it gives up.
pub const GC_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Held by whoever takes snapshots, from before the first object is written until what
/// it took is recorded in a session; `gc` holds it exclusively. So gc never drops a
/// snapshot, or objects of one, that is being written or not yet recorded.
#[derive(Debug)]
pub struct WriteGuard {
    _file: std::fs::File,
}

impl SnapshotStore {
    fn lock_file(&self) -> Result<std::fs::File, SnapshotError> {
        let path = self.root().join("tacho-gc.lock");
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| SnapshotError::io(&path, e))
    }

    /// A shared hold on the store for writing snapshots (see [`WriteGuard`]).
    pub fn write_guard(&self) -> Result<WriteGuard, SnapshotError> {
        let file = self.lock_file()?;
        file.lock_shared()
            .map_err(|e| SnapshotError::io(&self.root().join("tacho-gc.lock"), e))?;
        Ok(WriteGuard { _file: file })
    }

    /// [`SnapshotStore::write_guard`] if it can be had now (`None` while gc holds the
    /// store).
    pub fn try_write_guard(&self) -> Result<Option<WriteGuard>, SnapshotError> {
        let file = self.lock_file()?;
        match file.try_lock_shared() {
            Ok(()) => Ok(Some(WriteGuard { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(SnapshotError::io(&self.root().join("tacho-gc.lock"), e))
            }
        }
    }
}

impl SnapshotStore {
    /// Measures the store.
    pub fn usage(&self) -> Result<StoreUsage, SnapshotError> {
        use std::os::unix::fs::MetadataExt;
        let mut u = StoreUsage {
            snapshots: self.snapshot_ids()?.len() as u64,
            ..StoreUsage::default()
        };
        let objects = self.root().join("objects");
        for (_, path) in loose_objects(&objects)? {
            if let Ok(m) = std::fs::symlink_metadata(&path) {
                u.loose_objects += 1;
                u.loose_bytes += m.len();
                u.loose_disk_bytes += m.blocks() * 512;
            }
        }
        let packs = objects.join("pack");
        if let Ok(rd) = std::fs::read_dir(&packs) {
            for e in rd.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if let Ok(m) = e.metadata() {
                    if name.ends_with(".pack") {
                        u.packs += 1;
                    }
                    if name.ends_with(".pack") || name.ends_with(".idx") {
                        u.pack_bytes += m.blocks() * 512;
                    }
                }
            }
        }
        Ok(u)
    }

    /// Deletes the snapshots not in `keep` (and, with them, the objects only they
    /// held), then packs what is left. With `dry_run`, only reports what it would drop.
    pub fn gc(&self, keep: &HashSet<String>, dry_run: bool) -> Result<GcReport, SnapshotError> {
        self.gc_with(|| Ok(keep.clone()), dry_run)
    }

    /// Like [`SnapshotStore::gc`], with the snapshots to keep computed by `keep` once
    /// gc holds its lock. Computed before, a snapshot taken and recorded in between
    /// would be dropped although a session references it: writers hold their guard
    /// until their snapshot is recorded, so under the lock every snapshot a session
    /// will reference is already in the log.
    pub fn gc_with<E>(
        &self,
        keep: impl FnOnce() -> Result<HashSet<String>, E>,
        dry_run: bool,
    ) -> Result<GcReport, E>
    where
        E: From<SnapshotError>,
    {
        let _lock = self.gc_lock()?;
        let keep = keep()?;
        Ok(self.sweep(&keep, dry_run)?)
    }

    /// Takes gc's exclusive lock: no snapshot is being written or waits to be
    /// recorded while gc decides (writers hold the shared side, `write_guard`).
    fn gc_lock(&self) -> Result<std::fs::File, SnapshotError> {
        let waited = std::time::Instant::now();
        loop {
            match self.try_gc_lock()? {
                Some(lock) => return Ok(lock),
                None if waited.elapsed() < GC_WAIT => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                None => {
                    return Err(SnapshotError::Busy(
                        "snapshots are being taken and not yet recorded (a `tacho record`, snapshot or rollback is running); gc changed nothing — run it again when they have finished".into(),
                    ));
                }
            }
        }
    }

    /// gc's exclusive lock if it is free now (`None` while snapshots are being written).
    fn try_gc_lock(&self) -> Result<Option<std::fs::File>, SnapshotError> {
        let lock = self.lock_file()?;
        match lock.try_lock() {
            Ok(()) => Ok(Some(lock)),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(SnapshotError::io(&self.root().join("tacho-gc.lock"), e))
            }
        }
    }

    /// Drops the snapshots not in `keep`, then writes every object a kept snapshot
    /// reaches into one new pack and deletes everything else (old packs, loose
    /// objects). Called under gc's lock.
    fn sweep(&self, keep: &HashSet<String>, dry_run: bool) -> Result<GcReport, SnapshotError> {
        let before = self.usage()?;
        let ids = self.snapshot_ids()?;
        let dropped: Vec<String> = ids
            .iter()
            .filter(|id| !keep.contains(*id))
            .cloned()
            .collect();
        let kept: Vec<&String> = ids.iter().filter(|id| keep.contains(*id)).collect();
        let repo = self.repo()?;
        let mut reachable: HashSet<ObjectId> = HashSet::new();
        let mut incomplete = Vec::new();
        let mut paths = Paths::new();
        for id in &kept {
            let Ok(oid) = ObjectId::from_hex(id.as_bytes()) else {
                continue;
            };
            if !reach_named(&repo, oid, &mut reachable, Some(&mut paths))? {
                incomplete.push((*id).clone());
            }
        }
        // What `tacho push` and `tacho fetch` wrote stays while their refs do.
        crate::remote::reach_session_commits(&repo, &mut reachable)?;
        let objects = self.root().join("objects");
        let loose = loose_objects(&objects)?;
        // Every object the store holds, loose or packed. A pack whose index cannot be
        // read stays as it is: what it holds is unknown, and gix cannot read it either
        // (a kept snapshot that needs it is incomplete).
        let mut held: HashSet<ObjectId> = loose.iter().map(|(id, _)| *id).collect();
        let mut packs = Vec::new();
        let mut unreadable_packs = Vec::new();
        for p in self.packs()? {
            let idx = p.with_extension("idx");
            match gix_pack::index::File::at(&idx, gix::hash::Kind::Sha1) {
                Ok(index) => {
                    held.extend(index.iter().map(|e| e.oid));
                    packs.push(p);
                }
                Err(e) => unreadable_packs.push(format!("{}: {e}", idx.display())),
            }
        }
        let kept: Vec<ObjectId> = held
            .iter()
            .filter(|id| reachable.contains(*id))
            .copied()
            .collect();
        // Every kept loose object must hash to its id before anything is packed or
        // removed: a pack indexes an object by the id of what it holds, so one swapped
        // for another valid object would be packed under that other id and the swap
        // (the evidence, and the snapshot's file) silently lost. gc stops instead.
        {
            let repo = self.repo()?;
            let kept_set: HashSet<&ObjectId> = kept.iter().collect();
            for (id, path) in loose.iter().filter(|(id, _)| kept_set.contains(id)) {
                let obj = repo.find_object(*id).map_err(|e| {
                    SnapshotError::git(format!("reading {} before packing", path.display()), e)
                })?;
                check_id(*id, obj.kind, &obj.data).map_err(|e| {
                    SnapshotError::Repository(format!(
                        "{e} ({}); gc stopped and changed nothing",
                        path.display()
                    ))
                })?;
            }
        }
        let mut report = GcReport {
            before: before.clone(),
            after: before,
            dropped_snapshots: dropped.clone(),
            pruned_objects: (held.len() - kept.len()) as u64,
            packed_objects: 0,
            incomplete_snapshots: incomplete,
            unreadable_packs,
        };
        if dry_run {
            return Ok(report);
        }
        for id in &dropped {
            let name = SnapshotStore::ref_name(id);
            let path = self.root().join(&name);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(SnapshotError::io(&path, e)),
            }
        }
        // Everything kept goes into one new pack; then the old packs and every loose
        // object (kept ones are in the new pack, the rest no snapshot reaches) go.
        report.packed_objects = kept.len() as u64;
        let wanted = kept.clone();
        let new = self.write_pack_of(kept, &paths)?;
        // The new pack is indexed by what it holds: every kept id must be there before
        // anything else goes (an object a pack held under another id's name, swapped
        // in an old pack, would be lost here). Otherwise the new pack goes, and gc
        // stops having changed nothing but the refs it dropped.
        if let Some(pack) = &new {
            let idx = pack.with_extension("idx");
            let index = gix_pack::index::File::at(&idx, gix::hash::Kind::Sha1)
                .map_err(|e| SnapshotError::git(format!("reading {}", idx.display()), e))?;
            if let Some(lost) = wanted.iter().find(|id| index.lookup(*id).is_none()) {
                self.remove_packs(std::iter::once(pack), None)?;
                return Err(SnapshotError::Repository(format!(
                    "object {lost} is not in the pack gc wrote: a pack held other content under its id; gc stopped before deleting any object"
                )));
            }
        }
        self.remove_packs(packs.iter(), new.as_ref())?;
        for (_, path) in &loose {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(SnapshotError::io(path, e)),
            }
        }
        // The fan-out directories stay (SnapshotStore::open makes all 256 once): later
        // snapshots write loose objects into them. What a snapshot's pack writer left
        // when it was killed goes (a temporary file, a pack without its index): no
        // writer runs while gc holds the store.
        if let Ok(rd) = std::fs::read_dir(self.pack_dir()) {
            for e in rd.flatten() {
                let path = e.path();
                let name = e.file_name().to_string_lossy().into_owned();
                let orphan = name.ends_with(".pack") && !path.with_extension("idx").exists();
                if name.starts_with(".tmp-tacho-") || orphan {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        report.after = self.usage()?;
        Ok(report)
    }
}

/// Where a tree walk first met each object: whether it is a tree, and its path from
/// the snapshot's root (empty for a root tree). gc stores the versions of one path as
/// deltas of one another.
pub(crate) type Paths = HashMap<ObjectId, (bool, Vec<u8>)>;

/// Adds every object `tree` reaches (itself, its subtrees and blobs) to `seen`;
/// whether all of them are present (`false`: the snapshot is incomplete, gc goes on).
pub(crate) fn reach(
    repo: &gix::Repository,
    tree: ObjectId,
    seen: &mut HashSet<ObjectId>,
) -> Result<bool, SnapshotError> {
    reach_named(repo, tree, seen, None)
}

/// [`reach`], noting in `paths` where each object newly seen was met.
fn reach_named(
    repo: &gix::Repository,
    tree: ObjectId,
    seen: &mut HashSet<ObjectId>,
    mut paths: Option<&mut Paths>,
) -> Result<bool, SnapshotError> {
    let mut complete = true;
    let mut stack = vec![(tree, Vec::new())];
    while let Some((t, path)) = stack.pop() {
        if !seen.insert(t) {
            continue;
        }
        if !repo.has_object(t) {
            complete = false;
            continue;
        }
        let tree = repo
            .find_tree(t)
            .map_err(|e| SnapshotError::git(format!("reading tree {t}"), e))?;
        for entry in tree.iter() {
            let entry = entry.map_err(|e| SnapshotError::git(format!("reading tree {t}"), e))?;
            let oid = entry.oid().to_owned();
            let child = || {
                let mut p = path.clone();
                if !p.is_empty() {
                    p.push(b'/');
                }
                p.extend_from_slice(entry.filename());
                p
            };
            if entry.mode().is_tree() {
                stack.push((oid, if paths.is_some() { child() } else { Vec::new() }));
            } else {
                complete &= repo.has_object(oid);
                if seen.insert(oid)
                    && let Some(paths) = paths.as_mut()
                {
                    paths.insert(oid, (false, child()));
                }
            }
        }
        if let Some(paths) = paths.as_mut() {
            paths.insert(t, (true, path));
        }
    }
    Ok(complete)
}

/// The loose objects under `objects/`: (id, file).
fn loose_objects(objects: &Path) -> Result<Vec<(ObjectId, std::path::PathBuf)>, SnapshotError> {
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(objects) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(SnapshotError::io(objects, e)),
    };
    let mut dirs = BTreeSet::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
            dirs.insert(name);
        }
    }
    for d in dirs {
        let dir = objects.join(&d);
        let rd = std::fs::read_dir(&dir).map_err(|e| SnapshotError::io(&dir, e))?;
        for e in rd.flatten() {
            let rest = e.file_name().to_string_lossy().into_owned();
            if let Ok(oid) = ObjectId::from_hex(format!("{d}{rest}").as_bytes()) {
                out.push((oid, e.path()));
            }
        }
    }
    Ok(out)
}
