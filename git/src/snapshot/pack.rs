//! Writing packs: a large snapshot's new objects (put together in memory, a pack per
//! [`PACK_BYTES_MAX`]), the objects gc keeps copied into one pack with its index, and
//! removing packs.
//!
//! A small snapshot taken by a hook process writes loose objects. A watcher's
//! snapshots (and the files it hashes ahead) keep their new objects in memory and
//! write them as one small pack when there are more than [`BATCH_LOOSE_MAX`]: creating
//! a file is the dearest part of a small snapshot (SPEC.md §10.5). The watcher merges
//! the small packs when it is idle ([`SnapshotStore::merge_small_packs`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use gix::ObjectId;
use gix_pack::data::output;

use super::{SnapshotError, SnapshotStore};

fn err(
    what: &str,
    e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
) -> SnapshotError {
    SnapshotError::git(what, e)
}

/// A snapshot that reads at least this many files writes its new objects as packs (by
/// default; [`SnapshotStore::with_pack_min_files`]).
pub const PACK_MIN_FILES: usize = 64;

/// A pack is written once the compressed objects waiting for it reach this size (by
/// default; [`SnapshotStore::with_pack_bytes_max`]).
pub const PACK_BYTES_MAX: usize = 64 * 1024 * 1024;

/// A batch of at most this many new objects is written as loose objects, a larger one
/// as a pack: two files (a pack and its index) instead of one per object.
pub const BATCH_LOOSE_MAX: usize = 2;

/// A watcher merges its small packs (below [`SMALL_PACK_BYTES`]) into one once there are
/// this many and it has been idle for a moment ...
pub const MERGE_SMALL_PACKS_AT: usize = 8;

/// ... or once there are this many, idle or not: a store handle has room for at least
/// 32 packs (gix's slots, counted when it opens), and one that runs out of room takes
/// the objects of packs it cannot load for missing.
pub const MERGE_SMALL_PACKS_BUSY_AT: usize = 16;

/// A pack smaller than this, holding fewer than [`SMALL_PACK_OBJECTS`] objects, is a
/// small one, to be merged (a workspace's first snapshot of 50,000 files may well be
/// smaller than this: it is not merged again and again).
pub const SMALL_PACK_BYTES: u64 = 4 * 1024 * 1024;

/// See [`SMALL_PACK_BYTES`].
pub const SMALL_PACK_OBJECTS: u64 = 1024;

/// Where a snapshot's new objects go.
pub(super) enum Writes {
    /// One loose object each, as soon as it is known.
    Loose,
    /// Kept in memory (uncompressed) until the snapshot ends, then written as loose
    /// objects when there are at most [`BATCH_LOOSE_MAX`], otherwise as one pack, not
    /// synced (as loose objects are not).
    Batch(Mutex<Batch>),
    /// Compressed on the thread that found it and kept in memory until there are
    /// [`PACK_BYTES_MAX`] or the snapshot ends, then written as one pack.
    Pack(Mutex<PackBuffer>),
}

#[derive(Default)]
pub(super) struct Batch {
    ids: HashSet<ObjectId>,
    objects: Vec<(gix::object::Kind, Vec<u8>, ObjectId)>,
}

#[derive(Default)]
pub(super) struct PackBuffer {
    ids: HashSet<ObjectId>,
    entries: Vec<output::Entry>,
    bytes: usize,
}

impl Writes {
    /// Packs for a snapshot that reads at least `pack_min_files` files of `store`
    /// ([`PACK_MIN_FILES`] by default), loose objects for a smaller one.
    pub(super) fn for_reads(store: &SnapshotStore, files: usize) -> Self {
        if files >= store.pack_min_files {
            Writes::Pack(Mutex::default())
        } else {
            Writes::Loose
        }
    }

    /// Packs for a snapshot that reads at least `pack_min_files` files of `store`, a
    /// batch for a smaller one: what a watcher writes.
    pub(super) fn batched(store: &SnapshotStore, files: usize) -> Self {
        if files >= store.pack_min_files {
            Writes::Pack(Mutex::default())
        } else {
            Writes::Batch(Mutex::default())
        }
    }

    /// Stores one object the store does not hold yet; `file` names the file a blob
    /// holds, for errors.
    pub(super) fn put(
        &self,
        store: &SnapshotStore,
        repo: &gix::Repository,
        kind: gix::object::Kind,
        data: &[u8],
        id: ObjectId,
        file: Option<&str>,
    ) -> Result<(), SnapshotError> {
        let what = || match file {
            Some(f) => format!("writing the blob of {f}"),
            None => format!("writing object {id}"),
        };
        let buffer = match self {
            Writes::Loose => {
                use gix::prelude::Write;
                repo.objects
                    .write_buf_with_known_id(kind, data, id)
                    .map_err(|e| err(&what(), e))?;
                return Ok(());
            }
            Writes::Batch(batch) => {
                let mut b = batch
                    .lock()
                    .map_err(|_| SnapshotError::Internal("a batch of objects was poisoned"))?;
                if b.ids.insert(id) {
                    b.objects.push((kind, data.to_vec(), id));
                }
                return Ok(());
            }
            Writes::Pack(buffer) => buffer,
        };
        let entry = output::Entry::from_data(
            &output::Count::from_data(id, None),
            &gix::objs::Data::new(data, kind, gix::hash::Kind::Sha1),
            // The level of loose objects.
            super::compression(),
        )
        .map_err(|e| err(&what(), e))?;
        let mut b = buffer
            .lock()
            .map_err(|_| SnapshotError::Internal("a pack buffer was poisoned"))?;
        if b.ids.insert(id) {
            b.bytes += entry.compressed_data.len();
            b.entries.push(entry);
        }
        if b.bytes >= store.pack_bytes_max {
            let entries = std::mem::take(&mut b.entries);
            b.bytes = 0;
            // Written without the lock: the other threads go on compressing.
            drop(b);
            store.write_pack_in_memory(entries, true)?;
        }
        Ok(())
    }
}

impl SnapshotStore {
    /// Writes what `writes` still holds in memory as one pack.
    pub(super) fn flush(&self, writes: Writes) -> Result<(), SnapshotError> {
        match writes {
            Writes::Loose => Ok(()),
            Writes::Pack(buffer) => {
                let entries = buffer
                    .into_inner()
                    .map_err(|_| SnapshotError::Internal("a pack buffer was poisoned"))?
                    .entries;
                self.write_pack_in_memory(entries, true).map(drop)
            }
            Writes::Batch(batch) => {
                let objects = batch
                    .into_inner()
                    .map_err(|_| SnapshotError::Internal("a batch of objects was poisoned"))?
                    .objects;
                if objects.len() <= BATCH_LOOSE_MAX {
                    let repo = self.repo()?;
                    for (kind, data, id) in objects {
                        Writes::Loose.put(self, &repo, kind, &data, id, None)?;
                    }
                    return Ok(());
                }
                let entries = objects
                    .iter()
                    .map(|(kind, data, id)| {
                        output::Entry::from_data(
                            &output::Count::from_data(*id, None),
                            &gix::objs::Data::new(data, *kind, gix::hash::Kind::Sha1),
                            super::compression(),
                        )
                        .map_err(|e| err(&format!("writing object {id}"), e))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                self.write_pack_in_memory(entries, false)?;
                self.note_batched(objects.iter().map(|(_, _, id)| *id));
                Ok(())
            }
        }
    }

    /// Writes `entries` as one pack with its index, both put together in memory: the
    /// pack first, then the index, each through a temporary file and a rename (a pack
    /// is read only once its index is there). With `durable`, each file is synced
    /// before its rename and the directory after, as Git syncs packs by default
    /// (`core.fsync`: everything but loose objects): a large snapshot is usually a
    /// session's first, the one a rollback returns to. A watcher's small batch is not
    /// synced, as loose objects are not: a crash may tear it, and its objects are then
    /// lost as torn loose objects would be (gix skips an index it cannot read, gc
    /// reports the pack as unreadable, a merge leaves it alone).
    fn write_pack_in_memory(
        &self,
        entries: Vec<output::Entry>,
        durable: bool,
    ) -> Result<Option<PathBuf>, SnapshotError> {
        if entries.is_empty() {
            return Ok(None);
        }
        let n = u32::try_from(entries.len())
            .map_err(|_| SnapshotError::Internal("too many objects for one pack"))?;
        let ids: Vec<ObjectId> = entries.iter().map(|e| e.id).collect();
        let mut pack = Vec::new();
        // One entry per step, so each step's byte count is that entry's extent (the
        // first also carries the pack's header, the last step is the trailer).
        let mut writer = output::bytes::FromEntriesIter::new(
            entries.into_iter().map(|e| Ok(vec![e])),
            &mut pack,
            n,
            gix_pack::data::Version::V2,
            gix::hash::Kind::Sha1,
        );
        let mut extents = Vec::with_capacity(ids.len());
        let mut at = 0u64;
        for step in &mut writer {
            let len = step.map_err(|e| err("writing a pack", e))?;
            let start = if at == 0 { PACK_HEADER } else { at };
            extents.push((start, at + len));
            at += len;
        }
        let hash = writer
            .digest()
            .ok_or(SnapshotError::Internal("a pack was left unfinished"))?;
        drop(writer);
        // The last step wrote the trailer.
        extents.truncate(ids.len());
        let mut located = Vec::with_capacity(ids.len());
        for (id, (start, end)) in ids.into_iter().zip(extents) {
            let bytes = pack
                .get(start as usize..end as usize)
                .ok_or(SnapshotError::Internal("a pack entry outside its pack"))?;
            located.push((id, start, crc32fast::hash(bytes)));
        }
        let idx = index_v2(located, &hash)?;
        let dir = self.pack_dir();
        std::fs::create_dir_all(&dir).map_err(|e| SnapshotError::io(&dir, e))?;
        let path = dir.join(format!("pack-{hash}.pack"));
        place(&path, &pack, durable)?;
        place(&path.with_extension("idx"), &idx, durable)?;
        if durable {
            sync_dir(&dir)?;
        }
        Ok(Some(path))
    }

    pub(crate) fn pack_dir(&self) -> PathBuf {
        self.root().join("objects").join("pack")
    }

    /// The store's packs (their `.pack` files, each with its index), sorted.
    pub(crate) fn packs(&self) -> Result<Vec<PathBuf>, SnapshotError> {
        let dir = self.pack_dir();
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(SnapshotError::io(&dir, e)),
        };
        let mut out = Vec::new();
        for e in rd {
            let path = e.map_err(|e| SnapshotError::io(&dir, e))?.path();
            if path.extension().is_some_and(|x| x == "pack") && path.with_extension("idx").exists()
            {
                out.push(path);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Writes one pack of `ids`; the new pack's path, `None` for no ids.
    ///
    /// The versions of one path (`paths`, as a tree walk met them) are stored as deltas
    /// of one another, as `git gc` stores them ([`deltify`]). Every other object is
    /// copied from wherever the store holds it: from a pack as it is there (a delta
    /// too, when its base is copied alongside), a loose one compressed.
    pub(crate) fn write_pack_of(
        &self,
        ids: Vec<ObjectId>,
        paths: &super::gc::Paths,
    ) -> Result<Option<PathBuf>, SnapshotError> {
        if ids.is_empty() {
            return Ok(None);
        }
        let repo = self.repo()?;
        let n = ids.len();
        let (copied, chains) = delta_chains(&repo, ids, paths)?;
        // Few objects are not worth starting threads for.
        let threads = if copied.len() < 4096 {
            1
        } else {
            self.threads()
        };
        let mut db = repo.objects.clone().into_inner();
        // Locations stay valid only while no pack is unloaded.
        db.prevent_pack_unload();
        // Where a pack holds an object, its compressed bytes are copied as they are;
        // loose objects are decompressed and compressed again.
        let mut buf = Vec::new();
        let counts: Vec<output::Count> = copied
            .into_iter()
            .map(|id| {
                let at = gix_pack::Find::location_by_oid(&db, &id, &mut buf)
                    .ok()
                    .flatten();
                output::Count::from_data(id, at)
            })
            .collect();
        // The copied objects come first: gix numbers them (the bases of the deltas it
        // copies) from the pack's first entry. Each chain's entries follow, numbered
        // on from there.
        let mut first = counts.len();
        let copies = if counts.is_empty() {
            None
        } else {
            Some(gix::parallel::InOrderIter::from(
                output::entry::iter_from_counts(
                    counts,
                    db.clone(),
                    Box::new(gix::progress::Discard),
                    output::entry::iter_from_counts::Options {
                        thread_limit: Some(threads),
                        mode: output::entry::iter_from_counts::Mode::PackCopyAndBaseObjects,
                        allow_thin_pack: false,
                        chunk_size: 256,
                        version: gix_pack::data::Version::V2,
                        ..Default::default()
                    },
                )
                .map_err(|e| err("counting objects to pack", e))?,
            ))
        };
        let deltas = if chains.is_empty() {
            None
        } else {
            let jobs: Vec<(usize, Vec<ObjectId>)> = chains
                .into_iter()
                .map(|chain| {
                    let at = first;
                    first += chain.len();
                    (at, chain)
                })
                .collect();
            let threads = self.threads().min(jobs.len());
            Some(gix::parallel::InOrderIter::from(
                gix::parallel::Stepwise::new(
                    jobs.into_iter().enumerate(),
                    Some(threads),
                    |_| Vec::new(),
                    move |(seq, (at, chain)): (usize, (usize, Vec<ObjectId>)), buf: &mut Vec<u8>| {
                        deltify(&db, at, &chain, buf)
                            .map(|entries| (seq, entries))
                            .map_err(gix::Error::from_error)
                    },
                    gix::parallel::IdentityWithResult::<
                        (usize, Vec<output::Entry>),
                        gix::Error,
                    >::default(),
                ),
            ))
        };
        let entries = copies
            .into_iter()
            .flatten()
            .chain(deltas.into_iter().flatten());
        let dir = self.pack_dir();
        std::fs::create_dir_all(&dir).map_err(|e| SnapshotError::io(&dir, e))?;
        // The pack is streamed to a temporary file, then indexed into its final name.
        let tmp_path = dir.join(format!("tmp-tacho-{}.pack", std::process::id()));
        let file = std::fs::File::create(&tmp_path).map_err(|e| SnapshotError::io(&tmp_path, e))?;
        let result = (|| {
            let mut writer = output::bytes::FromEntriesIter::new(
                entries,
                std::io::BufWriter::new(file),
                u32::try_from(n)
                    .map_err(|_| SnapshotError::Internal("too many objects for one pack"))?,
                gix_pack::data::Version::V2,
                gix::hash::Kind::Sha1,
            );
            for step in &mut writer {
                step.map_err(|e| err("writing the pack", e))?;
            }
            let mut w = writer.into_write();
            std::io::Write::flush(&mut w).map_err(|e| SnapshotError::io(&tmp_path, e))?;
            w.into_inner()
                .map_err(|e| SnapshotError::io(&tmp_path, e.into_error()))?
                .sync_all()
                .map_err(|e| SnapshotError::io(&tmp_path, e))?;
            let mut input = std::io::BufReader::new(
                std::fs::File::open(&tmp_path).map_err(|e| SnapshotError::io(&tmp_path, e))?,
            );
            self.index_pack(&mut input, threads)
        })();
        let _ = std::fs::remove_file(&tmp_path);
        result
    }

    /// Copies a pack stream into the pack directory and indexes it; the pack's path.
    fn index_pack(
        &self,
        input: &mut dyn std::io::BufRead,
        threads: usize,
    ) -> Result<Option<PathBuf>, SnapshotError> {
        let dir = self.pack_dir();
        std::fs::create_dir_all(&dir).map_err(|e| SnapshotError::io(&dir, e))?;
        let interrupt = std::sync::atomic::AtomicBool::new(false);
        let out = gix_pack::Bundle::write_to_directory(
            input,
            Some(&dir),
            &mut gix::progress::Discard,
            &interrupt,
            None::<gix::objs::find::Never>,
            gix::hash::Kind::Sha1,
            gix_pack::bundle::write::Options {
                thread_limit: Some(threads),
                ..Default::default()
            },
        )
        .map_err(|e| err("indexing a pack", e))?;
        // gix marks a new pack to be kept from git's repacks; this store repacks its
        // own packs.
        if let Some(keep) = &out.keep_path {
            let _ = std::fs::remove_file(keep);
        }
        // gix renames the pack and its index into place without syncing them; gc
        // removes the objects they replace right after.
        for path in [out.data_path.as_ref(), out.index_path.as_ref()]
            .into_iter()
            .flatten()
        {
            std::fs::File::open(path)
                .and_then(|f| f.sync_all())
                .map_err(|e| SnapshotError::io(path, e))?;
        }
        sync_dir(&dir)?;
        Ok(out.data_path)
    }

    /// The store's small packs (below [`SMALL_PACK_BYTES`] and [`SMALL_PACK_OBJECTS`]:
    /// told by the index's size, 28 bytes an object past its 1,112 fixed ones), sorted.
    fn small_packs(&self) -> Result<Vec<PathBuf>, SnapshotError> {
        let mut small = Vec::new();
        for pack in self.packs()? {
            // Regular files only (never a link or a FIFO put there).
            let idx_small = std::fs::symlink_metadata(pack.with_extension("idx"))
                .is_ok_and(|m| m.is_file() && m.len() < 1112 + 28 * SMALL_PACK_OBJECTS);
            match std::fs::symlink_metadata(&pack) {
                Ok(m) if m.is_file() && m.len() < SMALL_PACK_BYTES && idx_small => small.push(pack),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(SnapshotError::io(&pack, e)),
            }
        }
        Ok(small)
    }

    /// Merges the store's small packs into one pack once there are at least `at`
    /// ([`MERGE_SMALL_PACKS_AT`] or [`MERGE_SMALL_PACKS_BUSY_AT`]: a watcher writes one
    /// per snapshot), under the store's write guard taken without waiting (as a
    /// snapshot writes: never while gc runs).
    /// Each object is copied as its pack holds it, once it decompressed and hashed to
    /// its id ([`copy_entries`]); the new pack is synced before they are deleted, so a snapshot
    /// written meanwhile that found an object in a small pack still finds it. A pack
    /// holding deltas (gc's) or one that cannot be read is left alone. How many packs
    /// were merged (0: none due, or gc holds the store).
    pub fn merge_small_packs(&self, at: usize) -> Result<usize, SnapshotError> {
        if self.small_packs()?.len() < at.max(2) {
            return Ok(0);
        }
        let Some(_guard) = self.try_write_guard()? else {
            return Ok(0);
        };
        let small = self.small_packs()?;
        if small.len() < 2 {
            return Ok(0);
        }
        // Each entry copied as its small pack holds it (a watcher's small packs hold
        // whole objects only), once checked against its id: the merged pack is indexed
        // by the ids the small packs' indexes give. A pack of deltas (gc's) is left as
        // it is, and so is a pack that fails a check (torn by a crash, small packs
        // being unsynced, or put there), for gc to report.
        let mut seen = HashSet::new();
        let mut entries = Vec::new();
        let mut merged = Vec::with_capacity(small.len());
        for pack in &small {
            if let Ok(true) = copy_entries(pack, &mut seen, &mut entries) {
                merged.push(pack.clone());
            }
        }
        if merged.len() < 2 {
            return Ok(0);
        }
        let new = self.write_pack_in_memory(entries, true)?;
        self.remove_packs(merged.iter(), new.as_ref())?;
        Ok(merged.len())
    }

    /// Deletes packs (with their index) other than `except`.
    pub(crate) fn remove_packs<'p>(
        &self,
        packs: impl Iterator<Item = &'p PathBuf>,
        except: Option<&PathBuf>,
    ) -> Result<(), SnapshotError> {
        for pack in packs {
            if Some(pack) == except {
                continue;
            }
            // The index first: a pack without one is invisible to readers.
            for path in [pack.with_extension("idx"), pack.clone()] {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(SnapshotError::io(&path, e)),
                }
            }
        }
        Ok(())
    }
}

/// Adds the entries of `pack` whose ids are not in `seen` to `out`, each with its
/// compressed bytes as the pack holds them; `false` (and nothing added) when the pack
/// holds a delta, whose base the copy could not keep where it was. Every entry is
/// checked first, as nothing else would check it before the pack that holds it goes:
/// the pack (a regular file, opened without following a link or waiting, read up to
/// [`SMALL_PACK_BYTES`]) must end with its own checksum, the one its index names, and
/// each entry must decompress to its size and hash to the id the index gives it. An
/// error leaves the pack out of the merge (and in the store).
fn copy_entries(
    pack: &Path,
    seen: &mut HashSet<ObjectId>,
    out: &mut Vec<output::Entry>,
) -> Result<bool, SnapshotError> {
    use std::io::Read;
    let idx = pack.with_extension("idx");
    let index = gix_pack::index::File::at(&idx, gix::hash::Kind::Sha1)
        .map_err(|e| err(&format!("reading {}", idx.display()), e))?;
    let damaged = |what: String| SnapshotError::Repository(format!("{}: {what}", pack.display()));
    let (file, _) = super::tree::open_regular(pack)
        .map_err(|e| SnapshotError::io(pack, e))?
        .map_err(|why| damaged(format!("not read: {why:?}")))?;
    let mut bytes = Vec::new();
    file.take(SMALL_PACK_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| SnapshotError::io(pack, e))?;
    if bytes.len() as u64 > SMALL_PACK_BYTES {
        return Err(damaged("larger than a small pack".into()));
    }
    let end_of_entries = bytes
        .len()
        .checked_sub(20)
        .ok_or_else(|| damaged("no trailer".into()))?;
    let (body, trailer) = bytes.split_at(end_of_entries);
    let mut hasher = gix::hash::hasher(gix::hash::Kind::Sha1);
    hasher.update(body);
    let sum = hasher
        .try_finalize()
        .map_err(|e| err("hashing a pack", e))?;
    if sum.as_bytes() != trailer || sum != index.pack_checksum() {
        return Err(damaged("its checksum is not its own or its index's".into()));
    }
    let end_of_entries = end_of_entries as u64;
    let mut located: Vec<(u64, ObjectId)> = index.iter().map(|e| (e.pack_offset, e.oid)).collect();
    located.sort_unstable();
    let mut inflate = gix::zlib::Inflate::default();
    let mut mine = Vec::with_capacity(located.len());
    for (k, (offset, id)) in located.iter().enumerate() {
        let end = located.get(k + 1).map_or(end_of_entries, |n| n.0);
        let corrupt = || damaged(format!("entry of {id} at {offset} is damaged"));
        let raw = bytes
            .get(*offset as usize..end as usize)
            .ok_or_else(corrupt)?;
        let entry = gix_pack::data::Entry::from_bytes(raw, *offset, gix::hash::Kind::Sha1)
            .map_err(|_| corrupt())?;
        let Some(kind) = entry.header.as_kind() else {
            return Ok(false);
        };
        let data = raw
            .get((entry.data_offset - offset) as usize..)
            .ok_or_else(corrupt)?;
        let size = usize::try_from(entry.decompressed_size).map_err(|_| corrupt())?;
        if size as u64 > SMALL_PACK_BYTES * 1024 {
            return Err(corrupt());
        }
        let mut object = vec![0u8; size];
        inflate.reset();
        match inflate.once(data, &mut object) {
            Ok((gix::zlib::Status::StreamEnd, used, written))
                if used == data.len() && written == size => {}
            _ => return Err(corrupt()),
        }
        if gix::objs::compute_hash(gix::hash::Kind::Sha1, kind, &object).ok() != Some(*id) {
            return Err(damaged(format!("entry at {offset} does not hold {id}")));
        }
        mine.push(output::Entry {
            id: *id,
            kind: output::entry::Kind::Base(kind),
            decompressed_size: size,
            compressed_data: data.to_vec(),
        });
    }
    for e in mine {
        if seen.insert(e.id) {
            out.push(e);
        }
    }
    Ok(true)
}

/// No delta chain is longer (git's default `pack.depth`): reading the deepest object
/// applies this many deltas.
const MAX_DELTA_DEPTH: usize = 50;

/// Smaller objects are stored whole: a delta would save next to nothing.
const MIN_DELTA_SIZE: u64 = 64;

/// Larger objects are stored whole (git's `core.bigFileThreshold`): a delta holds
/// both versions in memory.
const MAX_DELTA_SIZE: u64 = 512 << 20;

/// Splits `ids` into the objects gc copies as they are and the chains it deltifies:
/// the versions of one path (a tree's versions apart from a file's), when there are
/// two or more, each chain ordered largest first as git orders them (a delta that
/// removes is smaller than one that adds, and files tend to grow, so the newest
/// version is usually whole), equal sizes by id.
fn delta_chains(
    repo: &gix::Repository,
    ids: Vec<ObjectId>,
    paths: &super::gc::Paths,
) -> Result<(Vec<ObjectId>, Vec<Vec<ObjectId>>), SnapshotError> {
    let mut copied = Vec::new();
    let mut by_path: std::collections::HashMap<&(bool, Vec<u8>), Vec<ObjectId>> =
        std::collections::HashMap::new();
    for id in ids {
        match paths.get(&id) {
            Some(name) => by_path.entry(name).or_default().push(id),
            None => copied.push(id),
        }
    }
    let mut groups: Vec<_> = by_path.into_iter().collect();
    groups.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut chains = Vec::new();
    for (_, versions) in groups {
        if versions.len() < 2 {
            copied.extend(versions);
            continue;
        }
        let mut sized = Vec::with_capacity(versions.len());
        for id in versions {
            let size = repo
                .find_header(id)
                .map_err(|e| err(&format!("reading the header of {id}"), e))?
                .size();
            if (MIN_DELTA_SIZE..=MAX_DELTA_SIZE).contains(&size) {
                sized.push((size, id));
            } else {
                copied.push(id);
            }
        }
        match sized.len() {
            0 => {}
            1 => copied.extend(sized.into_iter().map(|(_, id)| id)),
            _ => {
                sized.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                chains.push(sized.into_iter().map(|(_, id)| id).collect());
            }
        }
    }
    Ok((copied, chains))
}

/// The pack entries of one chain of versions, the first numbered `first` in the pack:
/// each version a delta of the one before it when that delta is less than half its
/// size, otherwise whole (and the start of a new chain). A chain [`MAX_DELTA_DEPTH`]
/// deep goes on from its whole object, a new branch of depth 1.
fn deltify(
    db: &impl gix_pack::Find,
    first: usize,
    chain: &[ObjectId],
    buf: &mut Vec<u8>,
) -> Result<Vec<output::Entry>, SnapshotError> {
    struct Version {
        index: usize,
        kind: gix::object::Kind,
        data: Vec<u8>,
        depth: usize,
    }
    let mut out = Vec::with_capacity(chain.len());
    // The whole object the chain started from, and the version before.
    let mut root: Option<std::rc::Rc<Version>> = None;
    let mut last: Option<std::rc::Rc<Version>> = None;
    for (k, id) in chain.iter().enumerate() {
        let (kind, data) = match db
            .try_find(id, buf)
            .map_err(|e| err(&format!("reading {id} to pack it"), e))?
        {
            Some((obj, _)) => (obj.kind, obj.data.to_vec()),
            None => {
                return Err(SnapshotError::Repository(format!(
                    "object {id} went missing while gc packed it; gc stopped before deleting any object"
                )));
            }
        };
        let base = match &last {
            Some(v) if v.depth < MAX_DELTA_DEPTH => Some(v),
            _ => root.as_ref(),
        }
        .filter(|b| b.kind == kind);
        let delta = base.and_then(|b| {
            super::delta::encode(&b.data, &data, data.len() / 2).map(|d| (b.index, b.depth, d))
        });
        let count = output::Count::from_data(*id, None);
        let index = first + k;
        let version = match delta {
            Some((base_index, base_depth, delta)) => {
                let mut entry = output::Entry::from_data(
                    &count,
                    &gix::objs::Data::new(&delta, kind, gix::hash::Kind::Sha1),
                    gix::zlib::Compression::DEFAULT,
                )
                .map_err(|e| err(&format!("compressing the delta of {id}"), e))?;
                entry.kind = output::entry::Kind::DeltaRef {
                    object_index: base_index,
                };
                out.push(entry);
                std::rc::Rc::new(Version {
                    index,
                    kind,
                    data,
                    depth: base_depth + 1,
                })
            }
            None => {
                out.push(
                    output::Entry::from_data(
                        &count,
                        &gix::objs::Data::new(&data, kind, gix::hash::Kind::Sha1),
                        gix::zlib::Compression::DEFAULT,
                    )
                    .map_err(|e| err(&format!("compressing {id}"), e))?,
                );
                let whole = std::rc::Rc::new(Version {
                    index,
                    kind,
                    data,
                    depth: 0,
                });
                root = Some(whole.clone());
                whole
            }
        };
        last = Some(version);
    }
    Ok(out)
}

/// A pack's header: signature, version, number of objects.
const PACK_HEADER: u64 = 12;

/// A pack index, version 2 (Git's `gitformat-pack`), of entries (id, offset in the
/// pack, CRC-32 of the entry's bytes) of the pack whose trailer is `pack_hash`.
/// gix-pack writes indexes only by parsing a pack stream again; here every offset and
/// CRC is known already.
fn index_v2(
    mut entries: Vec<(ObjectId, u64, u32)>,
    pack_hash: &ObjectId,
) -> Result<Vec<u8>, SnapshotError> {
    entries.sort_by_key(|e| e.0);
    entries.dedup_by(|a, b| a.0 == b.0);
    let mut out = Vec::with_capacity(1072 + entries.len() * 28 + 40);
    out.extend_from_slice(b"\xfftOc");
    out.extend_from_slice(&2u32.to_be_bytes());
    let mut fanout = [0u32; 256];
    for (id, _, _) in &entries {
        fanout[usize::from(id.as_bytes()[0])] += 1;
    }
    let mut total = 0u32;
    for count in fanout {
        total += count;
        out.extend_from_slice(&total.to_be_bytes());
    }
    for (id, _, _) in &entries {
        out.extend_from_slice(id.as_bytes());
    }
    for (_, _, crc) in &entries {
        out.extend_from_slice(&crc.to_be_bytes());
    }
    // Offsets from 2^31 up go to a table of 64-bit offsets, named by their place in it.
    let mut large = Vec::new();
    for (_, offset, _) in &entries {
        let small = match u32::try_from(*offset) {
            Ok(o) if o < 0x8000_0000 => o,
            _ => {
                let k = u32::try_from(large.len())
                    .map_err(|_| SnapshotError::Internal("too many large pack offsets"))?;
                large.push(*offset);
                0x8000_0000 | k
            }
        };
        out.extend_from_slice(&small.to_be_bytes());
    }
    for offset in large {
        out.extend_from_slice(&offset.to_be_bytes());
    }
    out.extend_from_slice(pack_hash.as_bytes());
    let mut hasher = gix::hash::hasher(gix::hash::Kind::Sha1);
    hasher.update(&out);
    let own = hasher
        .try_finalize()
        .map_err(|e| err("hashing a pack index", e))?;
    out.extend_from_slice(own.as_bytes());
    Ok(out)
}

/// Syncs a directory (the names renamed into it).
fn sync_dir(dir: &Path) -> Result<(), SnapshotError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| SnapshotError::io(dir, e))
}

/// Writes `bytes` to `path` through a temporary file beside it (synced with `sync`) and
/// a rename.
fn place(path: &Path, bytes: &[u8], sync: bool) -> Result<(), SnapshotError> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".tmp-tacho-{}-{}",
        std::process::id(),
        super::now_ns()
    ));
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            if sync { f.sync_data() } else { Ok(()) }
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| SnapshotError::io(path, e))
}
