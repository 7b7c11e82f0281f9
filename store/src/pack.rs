//! Packs: many sessions' first segments in one file (SPEC.md §1.1).
//!
//! A session that one input creates with many others gets its segments written into a
//! pack instead of a directory, a lock file and a segment file of its own: creating
//! those three per session dominated a bulk import. A packed segment is byte for byte
//! the sealed segment a stream directory would hold, so readers, verification and the
//! chain treat it as one; a pack is written beside its final name, synced and renamed,
//! so it appears whole or not at all. Later batches of a packed session continue in its
//! stream directory, after the packed segments.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tacho_log_format::{
    Chain, ChainValue, CommitPayload, FORMAT_VERSION, SealPayload, SegmentHeader, StreamId,
    encode_commit_frame, encode_seal_frame,
};
use tacho_schema::EventBody;

use crate::AppendReceipt;
use crate::store::{Store, StoreError};
use crate::vfs::{Released, SegmentBytes, VfsFile};
use crate::writer::EventRef;

const PACK_MAGIC: &[u8; 8] = b"TACHOPAK";
/// The pack header's length.
pub const PACK_HEADER_LEN: usize = 64;
/// One table-of-contents entry's length.
pub const PACK_ENTRY_LEN: usize = 56;
/// A pack's file name ends with this.
pub const PACK_SUFFIX: &str = ".tpack";
/// The default most sessions of one pack (`StoreOptions::pack_sessions_max`). Each
/// publication costs syncs of the pack, the session index and the directory, and a
/// listing for the next pack's new-session checks (15–20 ms), while each session a
/// pack may hold costs about 4 KiB of peak memory as it is built (SPEC.md §1.1).
pub const PACK_SESSIONS_MAX: usize = 8_192;
/// The lock that orders publishing a pack against creating a stream (under `packs/`).
const PACK_LOCK: &str = ".lock";
/// Sessions looked up with a stat of their stream directory each; beyond, the
/// directory is listed once (a stat costs about as much as 15 listed names).
const STAT_QUERIES_MAX: usize = 256;
/// Frames wait in memory until this many bytes of them do.
const BUF_BYTES_WRITTEN: usize = 256 * 1024;

/// One packed segment, as the table of contents names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PackEntry {
    pub stream: StreamId,
    pub segment_index: u64,
    pub first_seq: u64,
    pub offset: u64,
    pub len: u64,
    pub session: String,
}

impl PackEntry {
    fn key(&self) -> ([u8; 16], u64) {
        (self.stream.0, self.segment_index)
    }

    /// Whether the entry names a valid session id whose stream id it is filed under.
    fn names_its_stream(&self) -> bool {
        tacho_schema::validate_session_id(&self.session).is_ok()
            && StreamId::of_name(&self.session) == self.stream
    }
}

/// A pack's header, as read.
#[derive(Debug, Clone, Copy)]
struct PackHeader {
    entries: u64,
    toc_offset: u64,
    names_len: u64,
    toc_crc: u32,
}

fn encode_header(h: &PackHeader) -> [u8; PACK_HEADER_LEN] {
    let mut b = [0u8; PACK_HEADER_LEN];
    b[0..8].copy_from_slice(PACK_MAGIC);
    b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    b[10..12].copy_from_slice(&(PACK_HEADER_LEN as u16).to_le_bytes());
    b[16..24].copy_from_slice(&h.entries.to_le_bytes());
    b[24..32].copy_from_slice(&h.toc_offset.to_le_bytes());
    b[32..40].copy_from_slice(&h.names_len.to_le_bytes());
    b[40..44].copy_from_slice(&h.toc_crc.to_le_bytes());
    let crc = crc32fast::hash(&b[..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    b
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// The header of a pack of `len` bytes, checked: magic, version, CRC, reserved bytes,
/// and a table of contents that ends the file.
fn decode_header(b: &[u8], len: u64) -> Result<PackHeader, String> {
    let b = b
        .get(..PACK_HEADER_LEN)
        .ok_or("shorter than a pack header")?;
    if &b[0..8] != PACK_MAGIC {
        return Err("not a pack (bad magic)".into());
    }
    if u32_at(b, 60) != Some(crc32fast::hash(&b[..60])) {
        return Err("pack header checksum mismatch".into());
    }
    if u16_at(b, 8) != Some(FORMAT_VERSION) || u16_at(b, 10) != Some(PACK_HEADER_LEN as u16) {
        return Err(format!(
            "pack format version {} is not one this tacho reads",
            u16_at(b, 8).unwrap_or(0)
        ));
    }
    if b[12..16].iter().chain(&b[44..60]).any(|&x| x != 0) {
        return Err("reserved bytes of the pack header are not zero".into());
    }
    let h = PackHeader {
        entries: u64_at(b, 16).unwrap_or(0),
        toc_offset: u64_at(b, 24).unwrap_or(0),
        names_len: u64_at(b, 32).unwrap_or(0),
        toc_crc: u32_at(b, 40).unwrap_or(0),
    };
    let end = h
        .entries
        .checked_mul(PACK_ENTRY_LEN as u64)
        .and_then(|e| e.checked_add(h.toc_offset))
        .and_then(|e| e.checked_add(h.names_len));
    if h.toc_offset < PACK_HEADER_LEN as u64 || !h.toc_offset.is_multiple_of(8) || end != Some(len)
    {
        return Err(format!(
            "the table of contents ({} entries at {}, {} bytes of names) does not end the pack of {len} bytes",
            h.entries, h.toc_offset, h.names_len
        ));
    }
    Ok(h)
}

/// A published pack, mapped: its table of contents is searched in place.
#[derive(Debug)]
pub(crate) struct Pack {
    pub path: PathBuf,
    bytes: Arc<SegmentBytes>,
    header: PackHeader,
}

impl Pack {
    fn open(store: &Store, path: &Path) -> Result<Pack, StoreError> {
        let bytes = store.vfs.map(path).map_err(|e| StoreError::io(path, e))?;
        let header =
            decode_header(&bytes, bytes.len() as u64).map_err(|detail| StoreError::Corrupt {
                path: path.to_path_buf(),
                offset: 0,
                detail,
            })?;
        let pack = Pack {
            path: path.to_path_buf(),
            bytes: Arc::new(bytes),
            header,
        };
        // (A CRC pass over the table only: some 80 bytes a session, microseconds.)
        if !pack.toc_crc_ok() {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                offset: header.toc_offset,
                detail: "the pack's table of contents does not match its checksum".into(),
            });
        }
        Ok(pack)
    }

    /// Entry `i` of the table of contents; `None` when it is damaged (out of bounds,
    /// or a name that is not a session id).
    fn entry(&self, i: u64) -> Option<PackEntry> {
        let at = usize::try_from(self.header.toc_offset + i * PACK_ENTRY_LEN as u64).ok()?;
        let e = self.bytes.get(at..at + PACK_ENTRY_LEN)?;
        let names =
            usize::try_from(self.header.toc_offset + self.header.entries * PACK_ENTRY_LEN as u64)
                .ok()?;
        let name_at = names + u32_at(e, 48)? as usize;
        let name = self
            .bytes
            .get(name_at..name_at + usize::from(u16_at(e, 52)?))?;
        Some(PackEntry {
            stream: StreamId(e.get(0..16)?.try_into().ok()?),
            segment_index: u64_at(e, 16)?,
            first_seq: u64_at(e, 24)?,
            offset: u64_at(e, 32)?,
            len: u64_at(e, 40)?,
            session: std::str::from_utf8(name).ok()?.to_owned(),
        })
    }

    fn damaged(&self, i: u64) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            offset: self.header.toc_offset + i * PACK_ENTRY_LEN as u64,
            detail: format!("entry {i} of the pack's table of contents is damaged"),
        }
    }

    /// The entries of `session` (whose stream id is `stream`), in segment order (a
    /// binary search by stream id).
    fn find(&self, session: &str, stream: &StreamId) -> Result<Vec<PackEntry>, StoreError> {
        let key = |i: u64| -> Result<[u8; 16], StoreError> {
            let at = usize::try_from(self.header.toc_offset + i * PACK_ENTRY_LEN as u64)
                .map_err(|_| self.damaged(i))?;
            self.bytes
                .get(at..at + 16)
                .and_then(|k| k.try_into().ok())
                .ok_or_else(|| self.damaged(i))
        };
        let (mut lo, mut hi) = (0, self.header.entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if key(mid)? < stream.0 {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut out = Vec::new();
        while lo < self.header.entries && key(lo)? == stream.0 {
            let e = self.entry(lo).ok_or_else(|| self.damaged(lo))?;
            if e.session == session {
                out.push(e);
            }
            lo += 1;
        }
        Ok(out)
    }

    /// The sessions whose stream starts in this pack (the entries of first segments
    /// whose id hashes to their stream id), in table order. Hashing every id is most
    /// of the work: a large table is read on every core (a pass over a store waits for
    /// this listing before it starts).
    fn sessions(&self) -> Vec<String> {
        let listed = |from: u64, to: u64| -> Vec<String> {
            (from..to)
                .filter_map(|i| self.entry(i))
                .filter(|e| e.segment_index == 0 && e.names_its_stream())
                .map(|e| e.session)
                .collect()
        };
        let n = self.header.entries;
        if n < SESSIONS_PER_THREAD_MIN * 2 {
            return listed(0, n);
        }
        let threads = std::thread::available_parallelism()
            .map_or(1, |t| t.get() as u64)
            .min(n / SESSIONS_PER_THREAD_MIN);
        std::thread::scope(|s| {
            let parts: Vec<_> = (0..threads)
                .map(|t| s.spawn(move || listed(n * t / threads, n * (t + 1) / threads)))
                .collect();
            parts
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    }

    /// Every entry, in table order; `Err` at the first damaged one.
    pub fn entries(&self) -> Result<Vec<PackEntry>, StoreError> {
        (0..self.header.entries)
            .map(|i| self.entry(i).ok_or_else(|| self.damaged(i)))
            .collect()
    }

    /// Whether the table of contents has the CRC the header gives it.
    pub fn toc_crc_ok(&self) -> bool {
        let from = self.header.toc_offset as usize;
        self.bytes
            .get(from..)
            .is_some_and(|t| crc32fast::hash(t) == self.header.toc_crc)
    }
}

impl Pack {
    /// A segment's bytes, read in place in the pack's mapping (which the bytes hold):
    /// readable even after a merge removed the file, as long as they are held.
    pub(crate) fn segment(&self, at: u64, len: u64) -> Option<SegmentBytes> {
        SegmentBytes::range(&self.bytes, at, len)
    }
}

/// The packed segments of `session` in `packs` (see [`Store::packed_segments`]).
pub(crate) fn packed_in(
    packs: &[Arc<Pack>],
    session: &str,
) -> Result<Vec<(Arc<Pack>, PackEntry)>, StoreError> {
    // (The stream id is hashed once for every pack: a pass over a store asks this for
    // every session.)
    let stream = StreamId::of_name(session);
    let mut found: Vec<(Arc<Pack>, PackEntry)> = Vec::new();
    for p in packs {
        for e in p.find(session, &stream)? {
            found.push((p.clone(), e));
        }
    }
    // In segment order; a segment in two packs is taken from the first that has it
    // (the sort is stable, and `dedup` keeps the first of equal neighbours).
    found.sort_by_key(|(_, e)| e.segment_index);
    found.dedup_by_key(|(_, e)| e.segment_index);
    Ok(found)
}

/// The fewest table entries [`Pack::sessions`] gives a thread of its own (starting
/// a thread costs about what hashing a few dozen ids does).
const SESSIONS_PER_THREAD_MIN: u64 = 1024;

/// The packs a store holds, loaded as they are first needed.
#[derive(Debug, Default)]
pub(crate) struct PackCache {
    packs: BTreeMap<String, Arc<Pack>>,
}

impl Store {
    pub(crate) fn packs_dir(&self) -> PathBuf {
        self.root.join("packs")
    }

    /// The published packs, by file name (loaded once per process, and again when the
    /// directory names others).
    pub(crate) fn packs(&self) -> Result<Vec<Arc<Pack>>, StoreError> {
        self.load_packs(false)
    }

    /// The packs, loaded as [`Store::packs`] does; with `lenient`, those that do not
    /// open are left out (for listings: `log verify` reports them).
    fn load_packs(&self, lenient: bool) -> Result<Vec<Arc<Pack>>, StoreError> {
        let dir = self.packs_dir();
        // A pack listed and then removed before it was opened was merged (or rewritten)
        // meanwhile: the pack that replaces it was published before the removal, so
        // listing again finds it.
        let mut attempts = 0;
        'listing: loop {
            attempts += 1;
            let mut names = match self.vfs.list_dir(&dir) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(StoreError::io(&dir, e)),
            };
            names.retain(|n| n.ends_with(PACK_SUFFIX) && !n.starts_with('.'));
            names.sort();
            let mut cache = self
                .packs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            cache.packs.retain(|n, _| names.contains(n));
            let mut out = Vec::with_capacity(names.len());
            for n in names {
                let pack = match cache.packs.get(&n) {
                    Some(p) => p.clone(),
                    None => match Pack::open(self, &dir.join(&n)) {
                        Ok(p) => {
                            let p = Arc::new(p);
                            cache.packs.insert(n, p.clone());
                            p
                        }
                        Err(StoreError::Io { source, .. })
                            if source.kind() == std::io::ErrorKind::NotFound
                                && attempts < LISTING_ATTEMPTS =>
                        {
                            continue 'listing;
                        }
                        Err(_) if lenient => continue,
                        Err(e) => return Err(e),
                    },
                };
                out.push(pack);
            }
            return Ok(out);
        }
    }

    /// The packed segments of `session`, in segment order, each with its pack. A
    /// segment two packs both hold (a pack rewrite that a crash interrupted) counts
    /// once.
    pub(crate) fn packed_segments(
        &self,
        session: &str,
    ) -> Result<Vec<(Arc<Pack>, PackEntry)>, StoreError> {
        packed_in(&self.packs()?, session)
    }

    /// Every session some pack holds. A listing: a pack that does not open, or an
    /// entry that does not name its stream, is left out (`log verify` reports them).
    pub(crate) fn packed_sessions(&self) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        for p in self.load_packs(true)? {
            out.extend(p.sessions());
        }
        Ok(out)
    }

    /// Takes the lock that orders publishing packs (exclusive) against creating
    /// streams (shared); `None` when the store has no pack directory (no pack was ever
    /// published, and none is being: a publisher creates the directory before it locks).
    pub(crate) fn pack_lock(
        &self,
        exclusive: bool,
    ) -> Result<Option<Box<dyn Released>>, StoreError> {
        let dir = self.packs_dir();
        if !self.vfs.exists(&dir) {
            return Ok(None);
        }
        let path = dir.join(PACK_LOCK);
        self.vfs
            .lock_mode(&path, exclusive, self.opts.lock_timeout)
            .map(Some)
            .map_err(|e| match e {
                crate::vfs::LockError::Busy { holder } => StoreError::Busy {
                    session: "(packs)".into(),
                    holder: holder.unwrap_or_else(|| "another tacho process".into()),
                    waited_ms: self.opts.lock_timeout.as_millis(),
                },
                crate::vfs::LockError::Io(e) => StoreError::io(&path, e),
            })
    }

    /// Removes what pack builders of processes that died (killed, crashed) left in
    /// `packs/`: each builder names its file `.<pid>-<ns>.tmp` and removes it itself
    /// unless its process ends first. Only files over an hour old whose process is
    /// gone are removed (a process of another PID namespace sharing the store could
    /// look gone). Best effort, under the pack lock (exclusive).
    fn remove_abandoned_pack_files(&self) {
        let dir = self.packs_dir();
        let Ok(names) = self.vfs.list_dir(&dir) else {
            return;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        for name in names {
            let Some((pid, ns)) = name
                .strip_prefix('.')
                .and_then(|n| n.strip_suffix(".tmp"))
                .and_then(|n| n.split_once('-'))
                .and_then(|(p, t)| Some((p.parse::<i32>().ok()?, t.parse::<u128>().ok()?)))
            else {
                continue;
            };
            let old = now.saturating_sub(ns) > ABANDONED_AFTER.as_nanos();
            let gone = rustix::process::Pid::from_raw(pid).is_none_or(|p| {
                rustix::process::test_kill_process(p) == Err(rustix::io::Errno::SRCH)
            });
            if old && gone {
                let _ = self.vfs.remove_file(&dir.join(&name));
            }
        }
    }

    /// Starts a pack of new sessions.
    pub fn pack_builder(&self) -> PackBuilder {
        PackBuilder {
            store: self.clone(),
            tmp: self.packs_dir().join(format!(
                ".{}-{}.tmp",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            )),
            file: None,
            len: PACK_HEADER_LEN as u64,
            buf: Vec::new(),
            payload: rkyv::util::AlignedVec::new(),
            streams: BTreeMap::new(),
            open: None,
            entries: Vec::new(),
            poisoned: false,
            header: [0; PACK_HEADER_LEN],
            known: None,
            asked: 0,
            streams_listed: None,
        }
    }

    /// Writes a pack of `entries` (their segments copied from the bytes `segment`
    /// gives) and publishes it under its content name; the caller holds the pack lock.
    fn write_pack(
        &self,
        entries: &mut [PackEntry],
        mut segment: impl FnMut(&PackEntry) -> Result<SegmentBytes, StoreError>,
    ) -> Result<PathBuf, StoreError> {
        let mut b = self.pack_builder();
        for e in entries.iter_mut() {
            let bytes = segment(e)?;
            e.offset = b.len;
            e.len = bytes.len() as u64;
            b.buf.extend_from_slice(&bytes);
            b.len += bytes.len() as u64;
            if b.buf.len() >= BUF_BYTES_WRITTEN {
                b.write_buf()?;
            }
        }
        b.entries = entries.to_vec();
        b.finish_file()?;
        b.publish_file()
    }

    /// Findings about the packs themselves (their segments are verified with their
    /// sessions): a pack that does not open (its header or its table's checksum), a
    /// table whose order, names or ranges are wrong, a session that two packs hold.
    pub fn verify_packs(&self) -> Vec<crate::Finding> {
        let finding = |severity, path: &Path, offset: u64, message: String| crate::Finding {
            severity,
            session: "(packs)".into(),
            segment: Some(path.to_path_buf()),
            offset: Some(offset),
            message,
        };
        let error = crate::Severity::Error;
        let mut out = Vec::new();
        let dir = self.packs_dir();
        let names = match self.vfs.list_dir(&dir) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
            Err(e) => {
                out.push(finding(error, &dir, 0, e.to_string()));
                return out;
            }
        };
        let mut seen: BTreeMap<(String, u64), (PathBuf, u64)> = BTreeMap::new();
        let mut names: Vec<String> = names
            .into_iter()
            .filter(|n| n.ends_with(PACK_SUFFIX) && !n.starts_with('.'))
            .collect();
        names.sort();
        for n in names {
            let path = dir.join(&n);
            // A pack this pass already opened (the listing did, to find its sessions)
            // is checked as it was read, rather than mapped and checked a second time.
            let cached = self
                .packs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .packs
                .get(&n)
                .cloned();
            let opened = match cached {
                Some(p) => Ok(p),
                None => Pack::open(self, &path).map(Arc::new),
            };
            let pack = match opened {
                Ok(p) => p,
                // Removed since it was listed: merged into a pack published before.
                Err(StoreError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    continue;
                }
                Err(StoreError::Corrupt { offset, detail, .. }) => {
                    out.push(finding(error, &path, offset, detail));
                    continue;
                }
                Err(e) => {
                    out.push(finding(error, &path, 0, e.to_string()));
                    continue;
                }
            };
            let toc_at = pack.header.toc_offset;
            let entries = match pack.entries() {
                Ok(e) => e,
                Err(e) => {
                    out.push(finding(error, &path, toc_at, e.to_string()));
                    continue;
                }
            };
            let mut by_offset: Vec<&PackEntry> = entries.iter().collect();
            by_offset.sort_by_key(|e| e.offset);
            // The segments tile the pack from its header to its table of contents.
            let mut at = PACK_HEADER_LEN as u64;
            for e in by_offset {
                if e.offset != at || e.len == 0 {
                    out.push(finding(
                        error,
                        &path,
                        e.offset,
                        format!(
                            "segment {} of {} is not where the previous one ends ({at})",
                            e.segment_index, e.session
                        ),
                    ));
                }
                at = e.offset.saturating_add(e.len);
            }
            if at != toc_at {
                out.push(finding(
                    error,
                    &path,
                    at,
                    "the segments do not end where the table of contents begins".into(),
                ));
            }
            for (i, e) in entries.iter().enumerate() {
                let entry_at = toc_at + (i * PACK_ENTRY_LEN) as u64;
                if !e.names_its_stream() {
                    out.push(finding(
                        error,
                        &path,
                        entry_at,
                        format!("entry {i} names {:?}, not its stream", e.session),
                    ));
                }
                if i > 0 && entries.get(i - 1).is_some_and(|p| p.key() >= e.key()) {
                    out.push(finding(
                        error,
                        &path,
                        entry_at,
                        format!("entry {i} is out of order"),
                    ));
                }
                match seen.entry((e.session.clone(), e.segment_index)) {
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert((path.clone(), e.len));
                    }
                    std::collections::btree_map::Entry::Occupied(o) => {
                        let (other, len) = o.get();
                        out.push(finding(
                            if *len == e.len {
                                crate::Severity::Warning
                            } else {
                                error
                            },
                            &path,
                            entry_at,
                            format!(
                                "segment {} of {} is in {} too (a pack rewrite was interrupted; the first counts)",
                                e.segment_index,
                                e.session,
                                other.display()
                            ),
                        ));
                    }
                }
            }
        }
        out
    }

    /// Merges the smaller packs into one when there are more than
    /// [`PACKS_BEFORE_MERGE`]: from the smallest up, each pack joins while its segments
    /// take at most twice the bytes of those taken before it, so a large pack is left
    /// alone and a merge costs little against what it saves. The merged pack is
    /// published (synced, renamed, the directory synced) before the merged ones are
    /// removed: a crash leaves both, whose common segments count once, and the next
    /// merge takes them again. Returns how many packs were merged.
    pub fn merge_packs(&self) -> Result<usize, StoreError> {
        let _lock = self.pack_lock(true)?;
        let mut packs = self.packs()?;
        if packs.len() <= PACKS_BEFORE_MERGE {
            return Ok(0);
        }
        packs.sort_by(|a, b| {
            a.header
                .toc_offset
                .cmp(&b.header.toc_offset)
                .then_with(|| a.path.cmp(&b.path))
        });
        let mut total = 0u64;
        let mut taken = Vec::new();
        for p in packs {
            let size = p.header.toc_offset;
            if !taken.is_empty() && size > total.saturating_mul(2) {
                break;
            }
            total = total.saturating_add(size);
            taken.push(p);
        }
        if taken.len() < 2 {
            return Ok(0);
        }
        // Each segment once (an interrupted merge left some in two packs), read from
        // the pack it is taken from.
        let mut from: BTreeMap<([u8; 16], u64), (&Pack, u64)> = BTreeMap::new();
        let mut entries = Vec::new();
        for p in &taken {
            for e in p.entries()? {
                if let std::collections::btree_map::Entry::Vacant(v) = from.entry(e.key()) {
                    v.insert((p, e.offset));
                    entries.push(e);
                }
            }
        }
        self.write_pack(&mut entries, |e| {
            let unreadable = || StoreError::Corrupt {
                path: self.packs_dir(),
                offset: e.offset,
                detail: format!(
                    "segment {} of {} is not in its pack",
                    e.segment_index, e.session
                ),
            };
            // Read, not copied out of the mapping: a merge reads every byte of the
            // packs it takes, and each page it touched in a mapping would stay in this
            // process's resident memory until the end (the pack lock keeps the files).
            let (pack, offset) = from.get(&e.key()).ok_or_else(unreadable)?;
            self.vfs
                .read_range(&pack.path, *offset, e.len)
                .map_err(|err| StoreError::io(&pack.path, err))
        })?;
        let dir = self.packs_dir();
        for p in &taken {
            self.vfs
                .remove_file(&p.path)
                .map_err(|e| StoreError::io(&p.path, e))?;
        }
        self.vfs
            .sync_dir(&dir)
            .map_err(|e| StoreError::io(&dir, e))?;
        Ok(taken.len())
    }

    /// Removes `sessions` from every pack that holds them: each such pack is written
    /// again without them (published before the old one is removed: a crash leaves
    /// both, whose common segments count once) or removed when nothing is left.
    pub(crate) fn unpack(&self, sessions: &[String]) -> Result<(), StoreError> {
        if sessions.is_empty() {
            return Ok(());
        }
        let _lock = self.pack_lock(true)?;
        for p in self.packs()? {
            let all = p.entries()?;
            let mut keep: Vec<PackEntry> = all
                .iter()
                .filter(|e| !sessions.contains(&e.session))
                .cloned()
                .collect();
            if keep.len() == all.len() {
                continue;
            }
            if !keep.is_empty() {
                let path = p.path.clone();
                self.write_pack(&mut keep, |e| {
                    self.vfs
                        .read_range(&path, e.offset, e.len)
                        .map_err(|err| StoreError::io(&path, err))
                })?;
            }
            let dir = self.packs_dir();
            self.vfs
                .remove_file(&p.path)
                .and_then(|()| self.vfs.sync_dir(&dir))
                .map_err(|e| StoreError::io(&p.path, e))?;
        }
        Ok(())
    }
}

/// A packed session's state in a builder.
#[derive(Debug, Clone, Default)]
struct PackedStream {
    next_seq: u64,
    chain: ChainValue,
    /// Segments written so far (the next one's index).
    segments: u64,
    ended: bool,
}

/// The segment a builder is writing: one batch, sealed when the input moves on.
#[derive(Debug)]
struct OpenPacked {
    session: String,
    index: u64,
    first_seq: u64,
    /// Where it starts in the pack, and its bytes so far.
    start: u64,
    len: u64,
    step: Chain,
    span_len: u64,
    count: u64,
}

/// Writes new sessions into one pack; nothing is visible until [`PackBuilder::publish`].
///
/// Each session's events, as they come, go to a segment of its own in the pack file
/// (written beside its final name); when the input moves to another session the
/// segment is committed and sealed. A session that comes back later gets its next
/// segment. Memory holds one segment's unwritten frames and a few words per session.
#[derive(Debug)]
pub struct PackBuilder {
    store: Store,
    tmp: PathBuf,
    file: Option<Box<dyn VfsFile>>,
    /// The pack's length so far (the header is written last).
    len: u64,
    buf: Vec<u8>,
    payload: rkyv::util::AlignedVec,
    streams: BTreeMap<String, PackedStream>,
    open: Option<OpenPacked>,
    entries: Vec<PackEntry>,
    poisoned: bool,
    /// The header, once the file is finished (part of the pack's name).
    header: [u8; PACK_HEADER_LEN],
    /// The packs published when [`PackBuilder::is_new`] first looked.
    known: Option<Vec<Arc<Pack>>>,
    /// How often [`PackBuilder::is_new`] was asked, and the stream directories once
    /// listed.
    asked: usize,
    streams_listed: Option<std::collections::HashSet<String>>,
}

impl PackBuilder {
    /// Whether `session` is new to the store as this builder first saw it (no stream
    /// directory, in no pack published before its first look): a session to pack. A
    /// session created meanwhile is caught when the pack is published.
    pub fn is_new(&mut self, session: &str) -> Result<bool, StoreError> {
        // A stat per session, until so many are asked that listing `streams/` once
        // costs less.
        self.asked += 1;
        if self.asked == STAT_QUERIES_MAX {
            self.streams_listed = Some(self.store.stream_dirs()?);
        }
        let has_stream = match &self.streams_listed {
            Some(dirs) => dirs.contains(&crate::stream_dir_name(session)),
            None => self.store.vfs.exists(&self.store.stream_dir(session)),
        };
        if has_stream {
            return Ok(false);
        }
        let packs = match &self.known {
            Some(p) => p,
            None => self.known.insert(self.store.packs()?),
        };
        Ok(packed_in(packs, session)?.is_empty())
    }

    /// Commits and seals `session`'s segment now, if it is the one being written
    /// (a session that ended takes no more); its head: the events this pack holds of
    /// it and the chain value after them.
    pub fn close(&mut self, session: &str) -> Result<Option<(u64, ChainValue)>, StoreError> {
        if self.open.as_ref().is_some_and(|o| o.session == session) {
            self.close_open()?;
        }
        Ok(self.streams.get(session).map(|s| (s.next_seq, s.chain)))
    }

    /// Whether `session` is in this pack.
    pub fn contains(&self, session: &str) -> bool {
        self.streams.contains_key(session)
    }

    /// Whether `session`'s last event in this pack is `session.end`.
    pub fn ended(&self, session: &str) -> bool {
        self.streams.get(session).is_some_and(|s| s.ended)
    }

    /// Sessions in this pack.
    pub fn sessions(&self) -> usize {
        self.streams.len()
    }

    /// The pack's bytes so far.
    pub fn bytes(&self) -> u64 {
        self.len
    }

    /// The sequence number `session`'s next event gets here (0 for a session not in it).
    fn next_seq(&self, session: &str) -> u64 {
        let written = self.streams.get(session).map_or(0, |s| s.next_seq);
        match &self.open {
            Some(o) if o.session == session => written + o.count,
            _ => written,
        }
    }

    /// Checks `events` against the stream rules after what this pack holds of
    /// `session`: the index of the first that breaks one, and why.
    pub fn check_batch<'a>(
        &self,
        session: &str,
        bodies: impl IntoIterator<Item = &'a EventBody>,
    ) -> Result<(), (usize, String)> {
        crate::writer::check_rules(self.next_seq(session), bodies)
    }

    fn reject(session: &str, reason: String) -> StoreError {
        StoreError::Rejected {
            session: session.to_string(),
            reason,
        }
    }

    /// Adds `events` to `session`'s segment in the pack (a new session's first must be
    /// its `session.start`); the first event's sequence number. On an error the pack
    /// is given up (nothing of it is published).
    pub fn stage<E: EventRef>(&mut self, session: &str, events: &[E]) -> Result<u64, StoreError> {
        let r = self.stage_inner(session, events);
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    fn stage_inner<E: EventRef>(&mut self, session: &str, events: &[E]) -> Result<u64, StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned(session.to_string()));
        }
        tacho_schema::validate_session_id(session).map_err(StoreError::BadSessionId)?;
        let Some(first_time) = events.first().map(E::time_unix_ns) else {
            return Err(Self::reject(
                session,
                "an empty batch cannot be appended".into(),
            ));
        };
        if let Err((_, reason)) = self.check_batch(session, events.iter().map(E::body)) {
            return Err(Self::reject(session, reason));
        }
        if self.open.as_ref().is_some_and(|o| o.session != session) {
            self.close_open()?;
        }
        let first_seq = self.next_seq(session);
        if self.open.is_none() {
            let st = self.streams.entry(session.to_string()).or_default();
            let header = SegmentHeader {
                format_version: FORMAT_VERSION,
                stream: StreamId::of_name(session),
                segment_index: st.segments,
                first_seq: st.next_seq,
                prev_chain: st.chain,
                first_time_unix_ns: first_time,
            }
            .encode();
            let mut step = Chain::start(&st.chain);
            step.update(&header);
            self.buf.extend_from_slice(&header);
            self.open = Some(OpenPacked {
                session: session.to_string(),
                index: st.segments,
                first_seq: st.next_seq,
                start: self.len,
                len: header.len() as u64,
                step,
                span_len: header.len() as u64,
                count: 0,
            });
            self.len += header.len() as u64;
        }
        let start = self.buf.len();
        crate::writer::encode_frames(&mut self.buf, &mut self.payload, first_seq, events)
            .map_err(|reason| Self::reject(session, reason))?;
        let frames = self.buf.get(start..).unwrap_or_default();
        let n = frames.len() as u64;
        let Some(open) = self.open.as_mut() else {
            return Err(StoreError::Poisoned(session.to_string()));
        };
        open.step.update(frames);
        open.span_len += n;
        open.len += n;
        open.count += events.len() as u64;
        self.len += n;
        if let Some(st) = self.streams.get_mut(session) {
            st.ended = matches!(events.last().map(E::body), Some(EventBody::SessionEnd(_)));
        }
        let full = open.len >= self.store.opts.segment_bytes_max;
        if self.buf.len() >= BUF_BYTES_WRITTEN {
            self.write_buf()?;
        }
        if full {
            self.close_open()?;
        }
        Ok(first_seq)
    }

    /// Writes the waiting frames to the pack file (created with the first write).
    fn write_buf(&mut self) -> Result<(), StoreError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => {
                let dir = self.store.packs_dir();
                self.store
                    .vfs
                    .create_dir_all(&dir)
                    .map_err(|e| StoreError::io(&dir, e))?;
                let f = self
                    .store
                    .vfs
                    .open_append(&self.tmp, true)
                    .map_err(|e| StoreError::io(&self.tmp, e))?;
                self.file.insert(f)
            }
        };
        let at = self.len - self.buf.len() as u64;
        file.write_at(at, &self.buf)
            .map_err(|e| StoreError::io(&self.tmp, e))?;
        self.buf.clear();
        Ok(())
    }

    /// Commits and seals the open segment.
    fn close_open(&mut self) -> Result<(), StoreError> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let chain = open.step.finish();
        encode_commit_frame(
            &mut self.buf,
            &CommitPayload {
                chain,
                first_seq: open.first_seq,
                event_count: open.count,
                span_len: open.span_len,
            },
        );
        let sealed_len = open.len
            + (tacho_log_format::FRAME_HEADER_LEN + tacho_log_format::COMMIT_PAYLOAD_LEN) as u64;
        encode_seal_frame(
            &mut self.buf,
            &SealPayload {
                chain,
                first_seq: open.first_seq,
                event_count: open.count,
                sealed_len,
            },
        );
        let len = sealed_len
            + (tacho_log_format::FRAME_HEADER_LEN + tacho_log_format::SEAL_PAYLOAD_LEN) as u64;
        self.len = open.start + len;
        self.entries.push(PackEntry {
            stream: StreamId::of_name(&open.session),
            segment_index: open.index,
            first_seq: open.first_seq,
            offset: open.start,
            len,
            session: open.session.clone(),
        });
        let st = self.streams.entry(open.session).or_default();
        st.next_seq += open.count;
        st.chain = chain;
        st.segments += 1;
        Ok(())
    }

    /// Writes the table of contents and the header, and syncs the file.
    fn finish_file(&mut self) -> Result<(), StoreError> {
        self.close_open()?;
        self.entries.sort_by_key(PackEntry::key);
        let toc_offset = self.len;
        let mut names: Vec<u8> = Vec::new();
        let mut toc = Vec::with_capacity(self.entries.len() * PACK_ENTRY_LEN);
        for e in &self.entries {
            let name_at = u32::try_from(names.len())
                .map_err(|_| Self::reject(&e.session, "too many sessions for one pack".into()))?;
            toc.extend_from_slice(&e.stream.0);
            toc.extend_from_slice(&e.segment_index.to_le_bytes());
            toc.extend_from_slice(&e.first_seq.to_le_bytes());
            toc.extend_from_slice(&e.offset.to_le_bytes());
            toc.extend_from_slice(&e.len.to_le_bytes());
            toc.extend_from_slice(&name_at.to_le_bytes());
            toc.extend_from_slice(&(e.session.len() as u16).to_le_bytes());
            toc.extend_from_slice(&[0, 0]);
            names.extend_from_slice(e.session.as_bytes());
        }
        toc.extend_from_slice(&names);
        let header = PackHeader {
            entries: self.entries.len() as u64,
            toc_offset,
            names_len: names.len() as u64,
            toc_crc: crc32fast::hash(&toc),
        };
        self.buf.extend_from_slice(&toc);
        self.len += toc.len() as u64;
        self.write_buf()?;
        let Some(file) = self.file.as_mut() else {
            return Err(StoreError::Poisoned("(pack)".into()));
        };
        self.header = encode_header(&header);
        file.write_at(0, &self.header)
            .and_then(|()| file.sync_data())
            .map_err(|e| StoreError::io(&self.tmp, e))
    }

    /// Renames the finished file to its content name (the BLAKE3 of its table of
    /// contents) and syncs the directory; the caller holds the pack lock.
    fn publish_file(&mut self) -> Result<PathBuf, StoreError> {
        let mut id = blake3::Hasher::new_derive_key("tacho pack name v1");
        id.update(&self.header);
        for e in &self.entries {
            id.update(&e.stream.0);
            id.update(&e.segment_index.to_le_bytes());
            id.update(&e.len.to_le_bytes());
        }
        let name = format!(
            "{}{PACK_SUFFIX}",
            crate::hex(&id.finalize().as_bytes()[..16])
        );
        let dir = self.store.packs_dir();
        let path = dir.join(name);
        self.file = None;
        self.store
            .vfs
            .rename(&self.tmp, &path)
            .and_then(|()| self.store.vfs.sync_dir(&dir))
            .map_err(|e| StoreError::io(&path, e))?;
        Ok(path)
    }

    /// Publishes the pack: writes its table of contents, syncs it, marks its sessions
    /// in the session index, then — holding the pack lock, after checking that no
    /// session of it was created meanwhile by another process — renames it into
    /// place. Returns each session's receipt (all its events), in id order. On an error
    /// nothing of the pack is published.
    pub fn publish(mut self) -> Result<Vec<(String, AppendReceipt)>, StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned("(pack)".into()));
        }
        if self.streams.is_empty() {
            return Ok(Vec::new());
        }
        let store = self.store.clone();
        // A store this pack creates: its directories, and an index that starts complete.
        if !store.vfs.exists(&store.streams_dir()) {
            for dir in [store.root().join("locks"), store.streams_dir()] {
                store
                    .vfs
                    .create_dir_all(&dir)
                    .map_err(|e| StoreError::io(&dir, e))?;
            }
            store.index_begin()?;
        }
        // (A pack is always synced before it is renamed: a published pack is whole.)
        self.finish_file()?;
        let dirty: Vec<crate::index::Record> = self
            .streams
            .keys()
            .map(|s| crate::index::Record::Dirty { session: s.clone() })
            .collect();
        store.index_append(&dirty, true)?;
        {
            let _lock = store.pack_lock(true)?;
            let packs = store.packs()?;
            let listed = if self.streams.len() >= STAT_QUERIES_MAX {
                Some(store.stream_dirs()?)
            } else {
                None
            };
            for session in self.streams.keys() {
                let has_stream = match &listed {
                    Some(dirs) => dirs.contains(&crate::stream_dir_name(session)),
                    None => store.vfs.exists(&store.stream_dir(session)),
                };
                if has_stream || !packed_in(&packs, session)?.is_empty() {
                    return Err(Self::reject(
                        session,
                        "another process created this session while the input was being recorded; nothing of the input's new sessions was recorded".into(),
                    ));
                }
            }
            self.publish_file()?;
            store.remove_abandoned_pack_files();
        }

        let streams = std::mem::take(&mut self.streams);
        let heads: Vec<crate::index::Record> = streams
            .iter()
            .map(|(s, st)| crate::index::Record::Head {
                session: s.clone(),
                next_seq: st.next_seq,
                head: st.chain,
            })
            .collect();
        if let Ok(len) = store.index_append(&heads, false)
            && len > crate::index::LOG_BYTES_WRITER_COMPACTS
        {
            let _ = store.index_compact();
        }
        // Published whatever the merge does: a merge that fails leaves the packs as
        // they are, and the next publication tries again (log verify reads every pack
        // either way).
        let _ = store.merge_packs();
        Ok(streams
            .into_iter()
            .map(|(s, st)| {
                (
                    s,
                    AppendReceipt {
                        first_seq: 0,
                        last_seq: st.next_seq.saturating_sub(1),
                        chain: st.chain,
                    },
                )
            })
            .collect())
    }
}

/// How often the packs are listed again when one vanished between listing and
/// opening it (each time, a merge or rewrite finished in between).
const LISTING_ATTEMPTS: u32 = 8;

/// More published packs than this and the smaller ones are merged
/// ([`Store::merge_packs`], after each publication).
pub const PACKS_BEFORE_MERGE: usize = 16;

/// A pack builder's temporary file older than this whose process is gone was abandoned.
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

impl Drop for PackBuilder {
    /// A pack never published leaves nothing: its file is removed.
    fn drop(&mut self) {
        if self.file.take().is_some() || self.store.vfs.exists(&self.tmp) {
            let _ = self.store.vfs.remove_file(&self.tmp);
        }
    }
}
