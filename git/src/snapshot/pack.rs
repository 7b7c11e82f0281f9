//! Writing packs: a large snapshot's new objects (put together in memory, a pack per
//! [`PACK_BYTES_MAX`]), the objects gc keeps copied into one pack with its index, and
//! removing packs.
//!
//! A small snapshot writes loose objects. Writing each small snapshot's objects as a
//! pack of its own was measured slower (SPEC.md §10.5): every process then maps every
//! pack, and the packs must be merged.

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

/// Where a snapshot's new objects go.
pub(super) enum Writes {
    /// One loose object each, as soon as it is known.
    Loose,
    /// Compressed on the thread that found it and kept in memory until there are
    /// [`PACK_BYTES_MAX`] or the snapshot ends, then written as one pack.
    Pack(Mutex<PackBuffer>),
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
            Writes::Pack(buffer) => buffer,
        };
        let entry = output::Entry::from_data(
            &output::Count::from_data(id, None),
            &gix::objs::Data::new(data, kind, gix::hash::Kind::Sha1),
            // The level of loose objects (gix's, and Git's core.looseCompression).
            gix::zlib::Compression::BEST_SPEED,
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
            store.write_pack_in_memory(entries)?;
        }
        Ok(())
    }
}

impl SnapshotStore {
    /// Writes what `writes` still holds in memory as one pack.
    pub(super) fn flush(&self, writes: Writes) -> Result<(), SnapshotError> {
        if let Writes::Pack(buffer) = writes {
            let entries = buffer
                .into_inner()
                .map_err(|_| SnapshotError::Internal("a pack buffer was poisoned"))?
                .entries;
            self.write_pack_in_memory(entries)?;
        }
        Ok(())
    }

    /// Writes `entries` as one pack with its index, both put together in memory: the
    /// pack first, then the index, each through a temporary file, synced, and a rename
    /// (a pack is read only once its index is there), then the directory is synced.
    /// Packs are synced as Git syncs them by default (`core.fsync`: everything but
    /// loose objects): a large snapshot is usually a session's first, the one a
    /// rollback returns to. Loose objects are not (one sync each would cost a hook
    /// more than the snapshot).
    fn write_pack_in_memory(&self, entries: Vec<output::Entry>) -> Result<(), SnapshotError> {
        if entries.is_empty() {
            return Ok(());
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
        place(&path, &pack)?;
        place(&path.with_extension("idx"), &idx)?;
        sync_dir(&dir)
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

    /// Writes one pack of `ids`, each copied from wherever the store holds it (a pack or
    /// a loose object); the new pack's path, `None` for no ids.
    pub(crate) fn write_pack_of(
        &self,
        ids: Vec<ObjectId>,
    ) -> Result<Option<PathBuf>, SnapshotError> {
        if ids.is_empty() {
            return Ok(None);
        }
        let repo = self.repo()?;
        let n = ids.len();
        // Few objects are not worth starting threads for.
        let threads = if n < 4096 { 1 } else { self.threads() };
        let mut db = repo.objects.clone().into_inner();
        // Locations stay valid only while no pack is unloaded.
        db.prevent_pack_unload();
        // Where a pack holds an object, its compressed bytes are copied as they are;
        // loose objects are decompressed and compressed again.
        let mut buf = Vec::new();
        let counts: Vec<output::Count> = ids
            .into_iter()
            .map(|id| {
                let at = gix_pack::Find::location_by_oid(&db, &id, &mut buf)
                    .ok()
                    .flatten();
                output::Count::from_data(id, at)
            })
            .collect();
        let entries = output::entry::iter_from_counts(
            counts,
            db,
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
        .map_err(|e| err("counting objects to pack", e))?;
        let dir = self.pack_dir();
        std::fs::create_dir_all(&dir).map_err(|e| SnapshotError::io(&dir, e))?;
        // The pack is streamed to a temporary file, then indexed into its final name.
        let tmp_path = dir.join(format!("tmp-tacho-{}.pack", std::process::id()));
        let file = std::fs::File::create(&tmp_path).map_err(|e| SnapshotError::io(&tmp_path, e))?;
        let result = (|| {
            let in_order = gix::parallel::InOrderIter::from(entries);
            let mut writer = output::bytes::FromEntriesIter::new(
                in_order,
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

/// Writes `bytes` to `path` through a temporary file beside it, synced, and a rename.
fn place(path: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".tmp-tacho-{}-{}",
        std::process::id(),
        super::now_ns()
    ));
    let result = std::fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_data()))
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(|e| SnapshotError::io(path, e))
}
