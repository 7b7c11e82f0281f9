//! Writing packs: the objects gc keeps, copied into one pack with its index, and
//! removing packs.
//!
//! Snapshots write loose objects. Writing each small snapshot's objects as a pack of
//! its own was measured slower (SPEC.md §10.5): every process then maps every pack, and
//! the packs must be merged.

use std::path::PathBuf;

use gix::ObjectId;
use gix_pack::data::output;

use super::{SnapshotError, SnapshotStore};

fn err(
    what: &str,
    e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
) -> SnapshotError {
    SnapshotError::git(what, e)
}

impl SnapshotStore {
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
        let repo = self.repo();
        let n = ids.len();
        // Few objects are not worth starting threads for.
        let threads = if n < 4096 { 1 } else { self.threads };
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
