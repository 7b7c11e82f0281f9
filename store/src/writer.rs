//! Appending to a session's stream: the lock, recovery on open, batches, rotation.

use std::path::PathBuf;

use tacho_log_format::{
    COMMIT_PAYLOAD_LEN, Chain, ChainValue, CommitPayload, DamageClass, FORMAT_VERSION,
    FRAME_HEADER_LEN, FRAME_PAYLOAD_BYTES_MAX, SEGMENT_HEADER_LEN, ScanLimits, Scanner,
    SealPayload, SegmentEnd, SegmentHeader, StreamId, encode_commit_frame, encode_event_frame,
    encode_seal_frame, padded_len, segment_file_name,
};
use tacho_schema::EventBody;

use crate::link::{Expected, header_problems};
use crate::store::SegLoc;
use crate::store::{Store, StoreError};
use crate::vfs::{FileStamp, LockError, LockGuard, SegmentBytes, VfsFile};

/// The length of a commit frame: the last bytes of an open segment's committed data.
const COMMIT_FRAME_LEN: usize = padded_len(FRAME_HEADER_LEN + COMMIT_PAYLOAD_LEN);

/// What a writer taking up from a stamped mark reads after the mark at first: when it
/// is all zeros, nothing was written after the mark (SPEC.md §4.4), and the rest of
/// the free space is not read.
const STAMPED_TAIL_READ: u64 = 4096;

/// Checks events that would get sequence numbers from `base` on against the stream
/// rules (`session.start` first and nowhere else): the index of the first that breaks
/// one, and why.
pub(crate) fn check_rules<'a>(
    base: u64,
    bodies: impl IntoIterator<Item = &'a EventBody>,
) -> Result<(), (usize, String)> {
    for (i, body) in bodies.into_iter().enumerate() {
        let seq = base + i as u64;
        let is_start = matches!(body, EventBody::SessionStart(_));
        if seq == 0 && !is_start {
            return Err((
                i,
                format!(
                    "the first event of a session must be session.start, not {}",
                    body.kind_name()
                ),
            ));
        }
        if seq != 0 && is_start {
            return Err((
                i,
                format!("session.start may only be the first event (this would be event {seq})"),
            ));
        }
    }
    Ok(())
}

/// An event to append: its time and body, wherever the caller keeps them (an ingest
/// appends its queued items as they are, without copying each into a tuple).
pub trait EventRef {
    fn time_unix_ns(&self) -> i64;
    fn body(&self) -> &EventBody;
}

impl EventRef for (i64, EventBody) {
    fn time_unix_ns(&self) -> i64 {
        self.0
    }
    fn body(&self) -> &EventBody {
        &self.1
    }
}

/// Adds the event frames of `events` (sequence numbers from `first_seq`) to `buf`,
/// encoding each payload in the reused `scratch`; the reason when one does not encode
/// or is larger than a frame holds (nothing is written yet then).
pub(crate) fn encode_frames<E: EventRef>(
    buf: &mut Vec<u8>,
    scratch: &mut rkyv::util::AlignedVec,
    first_seq: u64,
    events: &[E],
) -> Result<(), String> {
    let mut payload = std::mem::take(scratch);
    for (i, e) in events.iter().enumerate() {
        let body = e.body();
        let (kind, version) = body.encode_into(&mut payload).map_err(|e| e.to_string())?;
        if payload.len() > FRAME_PAYLOAD_BYTES_MAX as usize {
            return Err(format!(
                "a {} event of {} bytes exceeds the limit of {FRAME_PAYLOAD_BYTES_MAX} bytes",
                body.kind_name(),
                payload.len()
            ));
        }
        encode_event_frame(
            buf,
            kind,
            version,
            first_seq + i as u64,
            e.time_unix_ns(),
            &payload,
        );
    }
    // (A scratch grown by a very large event is not kept.)
    if payload.capacity() <= PAYLOAD_SCRATCH_KEPT {
        *scratch = payload;
    }
    Ok(())
}

/// When an append is durable. Chosen at every call site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The batch is synced (fdatasync) before the append returns. One sync per call, so
    /// [`Writer::append_batch`] with many events is group commit.
    Sync,
    /// The batch is handed to the OS and not synced: it survives a crash of the process
    /// but maybe not of the machine.
    Buffered,
}

/// What recovery did when a writer opened a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub segment: PathBuf,
    /// Where the torn tail started (the end of the last committed batch).
    pub offset: u64,
    /// How many bytes were cut.
    pub truncated_bytes: u64,
    pub reason: String,
}

/// Where an appended batch landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendReceipt {
    pub first_seq: u64,
    pub last_seq: u64,
    /// The stream's chain value after the batch: its head.
    pub chain: ChainValue,
}

/// The segment a writer appends to.
#[derive(Debug)]
struct OpenSegment {
    file: Box<dyn VfsFile>,
    path: PathBuf,
    index: u64,
    first_seq: u64,
    /// Bytes of data: where the next batch is written (0 until the header is written
    /// with the first batch).
    len: u64,
    /// The file's length: data, then zeros (free space) up to here.
    allocated: u64,
    events: u64,
    /// The header bytes while the segment has no committed batch: the first chain step
    /// of a segment covers its header.
    span_prefix: Option<[u8; SEGMENT_HEADER_LEN]>,
    /// Whether the file's directory entry has been synced. A segment created by a
    /// buffered append has not; the next sync of any kind must cover it, or a synced
    /// batch could vanish with its file.
    entry_durable: bool,
    /// Whether the stream directory's own entry (in `streams/`) is durable: not yet
    /// for a stream this segment created.
    dir_entry_durable: bool,
    /// CRC-32 of the segment's data, `[0, len)`: what the checkpoint mark vouches for.
    prefix_crc: u32,
    /// CRC-32 of the last commit frame (the data's last [`COMMIT_FRAME_LEN`] bytes).
    commit_crc: u32,
}

/// The writer's checkpoint of a stream: the end of its last segment's last committed
/// batch, verified, with the stream's state there and a CRC-32 of every byte before it.
/// Kept in the stream's lock file after the holder's record, written (not synced) after
/// every batch. The next
/// writer whose last segment still starts with exactly those bytes (same CRC) scans only
/// what follows, instead of re-reading and re-hashing the whole segment: opening a
/// writer costs a CRC pass, not a chain pass, whatever the session's length. Any doubt
/// (no mark, a torn or stale one, another segment, other bytes) means a full scan.
///
/// Cheaper still, when every batch up to the mark was synced before it was written: the
/// segment file's stamp then (length, device, inode, modification and status-change
/// times) and the CRC-32 of its last commit frame. A next writer that finds the same
/// stamp and the same last commit frame reads only the segment's header and what
/// follows the mark — a few kilobytes, whatever the session's length. What this gives
/// up is written in SPEC.md §4.3: a change to the bytes before the last commit frame
/// that leaves the file's stamp as it was (bit rot, or a writer outside tacho that puts
/// the times back within the clock's granularity) is found by readers and `log verify`
/// (every chain step is checked there), not by the next writer. The mark also keeps a
/// digest of the stamps of the stream's sealed segments, which its writer checked (or
/// wrote): while they are unchanged, the next writer does not read them again.
///
/// It also says how far the stream was **committed durably**: `durable_next_seq`, the
/// stream's length at the last sync any writer of it made (carried from mark to mark).
/// A stream found shorter than that lost acknowledged events: no writer appends to
/// it, and `log verify` reports it (SPEC.md §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    pub(crate) segment_first_seq: u64,
    len: u64,
    prefix_crc: u32,
    next_seq: u64,
    chain: ChainValue,
    events: u64,
    last_kind: Option<u16>,
    pub(crate) durable_next_seq: u64,
    /// The segment file's stamp when the mark was written, when everything up to the
    /// mark was durable then (else the default stamp, which no file has).
    stamp: FileStamp,
    /// CRC-32 of the segment's last commit frame, which ends at `len`.
    commit_crc: u32,
    /// Digest of the sealed segments' stamps ([`sealed_digest`]), 0 when unknown.
    sealed: u64,
}

const MARK_MAGIC: &[u8; 8] = b"TMARK v3";
const MARK_LEN: usize = 8 + 8 + 8 + 4 + 8 + 32 + 8 + 4 + 8 + FileStamp::ENCODED_LEN + 4 + 8 + 4;

impl Mark {
    fn encode(&self) -> [u8; MARK_LEN] {
        let mut b = [0u8; MARK_LEN];
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            b[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(MARK_MAGIC);
        put(&self.segment_first_seq.to_le_bytes());
        put(&self.len.to_le_bytes());
        put(&self.prefix_crc.to_le_bytes());
        put(&self.next_seq.to_le_bytes());
        put(&self.chain);
        put(&self.events.to_le_bytes());
        let kind = self.last_kind.map_or(u32::MAX, u32::from);
        put(&kind.to_le_bytes());
        put(&self.durable_next_seq.to_le_bytes());
        put(&self.stamp.encode());
        put(&self.commit_crc.to_le_bytes());
        put(&self.sealed.to_le_bytes());
        let crc = crc32fast::hash(&b[..MARK_LEN - 4]);
        b[MARK_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Mark> {
        let b = b.get(..MARK_LEN)?;
        let (body, crc) = b.split_at(MARK_LEN - 4);
        if crc32fast::hash(body).to_le_bytes() != crc || body.get(..8)? != MARK_MAGIC {
            return None;
        }
        let u64_at = |i: usize| Some(u64::from_le_bytes(body.get(i..i + 8)?.try_into().ok()?));
        let u32_at = |i: usize| Some(u32::from_le_bytes(body.get(i..i + 4)?.try_into().ok()?));
        let kind = u32_at(76)?;
        Some(Mark {
            segment_first_seq: u64_at(8)?,
            len: u64_at(16)?,
            prefix_crc: u32_at(24)?,
            next_seq: u64_at(28)?,
            chain: body.get(36..68)?.try_into().ok()?,
            events: u64_at(68)?,
            last_kind: u16::try_from(kind).ok(),
            durable_next_seq: u64_at(80)?,
            stamp: FileStamp::decode(body.get(88..88 + FileStamp::ENCODED_LEN)?)?,
            commit_crc: u32_at(128)?,
            sealed: u64_at(132)?,
        })
    }

    /// What is missing when a stream whose segments end as `stream_end` says (the
    /// first sequence number and data length of its last segment, `None` for no
    /// segment at all) holds `next_seq` events, short of what this mark says was
    /// committed durably; `None` when the stream holds all of it.
    pub(crate) fn shortfall(
        &self,
        next_seq: u64,
        stream_end: Option<(u64, u64)>,
    ) -> Option<String> {
        if next_seq >= self.durable_next_seq {
            return None;
        }
        let missing = self.durable_next_seq - next_seq;
        let mut detail = format!(
            "the writer's checkpoint says {} events were committed durably (up to seq {}), the stream holds {next_seq}: {missing} event{} missing",
            self.durable_next_seq,
            self.durable_next_seq - 1,
            if missing == 1 { " is" } else { "s are" }
        );
        let seg = segment_file_name(self.segment_first_seq);
        match stream_end {
            None => detail.push_str(" (the stream has no segment left)"),
            Some((first, _)) if first < self.segment_first_seq => {
                detail.push_str(&format!(" (segment {seg} is missing)"));
            }
            Some((first, len)) if first == self.segment_first_seq && len < self.len => {
                detail.push_str(&format!(
                    " (segment {seg} ends its committed data at byte {len}, the checkpoint at byte {})",
                    self.len
                ));
            }
            Some(_) => {}
        }
        Some(detail)
    }
}

/// The least and the most free space a writer keeps ahead of its data.
const FREE_SPACE_BYTES_MIN: u64 = 16 * 1024;
const FREE_SPACE_BYTES_MAX: u64 = 1024 * 1024;

impl OpenSegment {
    /// Writes `data` at the end of the segment's data. When it does not fit in the free
    /// space, the file is first extended with zeros, by as much free space as the
    /// segment holds data (16 KiB to 1 MiB): a sync of a write that does not change the
    /// file's length does not have to commit the length through the filesystem's
    /// journal, and costs about a third less (SPEC.md §4.1). Not on the first write of
    /// a new segment: creating the file commits through the journal anyway, and a
    /// stream written once (a bulk import) would write the zeros and cut them again.
    /// Without `reserve` (a staged piece of a batch) the file only grows by the data.
    fn write(&mut self, data: &[u8], reserve: bool) -> std::io::Result<()> {
        let end = self.len + data.len() as u64;
        if reserve && end > self.allocated && self.allocated > 0 {
            let free = end.clamp(FREE_SPACE_BYTES_MIN, FREE_SPACE_BYTES_MAX);
            let target = end + free;
            let zeros = vec![0u8; (target - self.allocated) as usize];
            self.file.write_at(self.allocated, &zeros)?;
            self.allocated = target;
        }
        self.file.write_at(self.len, data)?;
        self.allocated = self.allocated.max(end);
        Ok(())
    }

    /// Gives the free space back: the file ends at its data.
    fn trim(&mut self) -> std::io::Result<()> {
        if self.allocated != self.len {
            self.file.set_len(self.len)?;
            self.allocated = self.len;
        }
        Ok(())
    }

    /// Syncs the file's data and, the first time, its directory entry.
    fn make_durable(
        &mut self,
        vfs: &dyn crate::vfs::Vfs,
        dir: &std::path::Path,
    ) -> std::io::Result<()> {
        self.file.sync_data()?;
        if !self.entry_durable {
            vfs.sync_dir(dir)?;
            self.entry_durable = true;
        }
        // A new stream's directory entry, synced with its first batch (not when it is
        // created: a group of new streams makes all of them durable in one sync).
        if !self.dir_entry_durable {
            if let Some(parent) = dir.parent() {
                vfs.sync_dir(parent)?;
            }
            self.dir_entry_durable = true;
        }
        Ok(())
    }
}

/// A batch written but not committed yet: its chain step so far and what it holds.
#[derive(Debug)]
struct Staged {
    step: Chain,
    span_len: u64,
    first_seq: u64,
    count: u64,
    last_kind: Option<u16>,
    ended: bool,
}

/// Staged frames are written once this many bytes of them wait in memory (and at the
/// commit): an ingest with 64 writers open holds at most 16 MiB of them.
const STAGED_BYTES_WRITTEN: usize = 256 * 1024;

/// The largest payload scratch a writer keeps between batches.
const PAYLOAD_SCRATCH_KEPT: usize = 1 << 20;

/// The only writer of one session's stream while it lives (it holds the stream's lock).
#[derive(Debug)]
pub struct Writer {
    session: String,
    stream: StreamId,
    dir: PathBuf,
    lock: Box<dyn LockGuard>,
    store: Store,
    /// `None` when the next append starts a new segment: a new stream, or after a seal.
    seg: Option<OpenSegment>,
    /// Index of the open segment, or of the next one to start.
    seg_index: u64,
    chain: ChainValue,
    next_seq: u64,
    buf: Vec<u8>,
    /// Scratch for one event's payload, reused from event to event.
    payload: rkyv::util::AlignedVec,
    poisoned: bool,
    recovered: Vec<Recovery>,
    /// The kind of the stream's last event, when the writer has seen it (`None` for an
    /// empty stream, or when its last segment holds no event).
    last_kind: Option<u16>,
    /// Where the last batch this writer appended starts (its segment and the data
    /// length before it), until it is taken back or the writer appends again.
    last_batch: Option<(PathBuf, u64)>,
    resumed_from_mark: bool,
    /// It took up from the mark by the segment file's stamp, without reading the
    /// segment before the mark.
    resumed_by_stamp: bool,
    /// This writer recorded in the session index that it writes the stream (a
    /// `Dirty` record, synced before its first frame); it records the head when done.
    indexed: bool,
    /// Batches were appended since the stream was last synced.
    unsynced: bool,
    /// Events written and not committed yet ([`Writer::stage`]).
    staged: Option<Staged>,
    /// How many events of the stream are known committed durably: synced by this
    /// writer, or by an earlier one as its checkpoint says. The stream is never shorter
    /// (else events were removed from its end, and this writer refuses it).
    durable_next_seq: u64,
    /// The digest of the stamps of the sealed segments before the open one (whose first
    /// sequence number is the key), which this writer checked or wrote.
    sealed: Option<(u64, u64)>,
}

/// A digest of the stamps of `segs` (sealed segments, packed ones by their pack's
/// stamp and place in it); `None` when one cannot be stamped.
fn sealed_digest(store: &Store, segs: &[SegLoc]) -> Option<u64> {
    let mut h = blake3::Hasher::new();
    for s in segs {
        let stamp = store.vfs.stamp(&s.path).ok()?;
        let (at, len) = s.range().unwrap_or((u64::MAX, u64::MAX));
        h.update(&s.first_seq.to_le_bytes());
        h.update(&at.to_le_bytes());
        h.update(&len.to_le_bytes());
        h.update(&stamp.encode());
    }
    let d = h.finalize();
    let first: [u8; 8] = d.as_bytes().get(..8)?.try_into().ok()?;
    // (0 says "unknown" in a mark.)
    Some(u64::from_le_bytes(first).max(1))
}

impl Store {
    /// Opens the stream of `session` for appending. Nothing is created until the first
    /// append. Waits up to the store's lock timeout for another writer of the same
    /// session, then fails with [`StoreError::Busy`]. Repairs a torn tail and reports
    /// it in [`Writer::recovered`].
    pub fn writer(&self, session: &str) -> Result<Writer, StoreError> {
        self.writer_waiting(session, self.opts.lock_timeout)
    }

    /// Like [`Store::writer`], without waiting: `Busy` at once when another writer holds
    /// the session (so a caller can tell a session being written from an abandoned one).
    pub fn try_writer(&self, session: &str) -> Result<Writer, StoreError> {
        self.writer_waiting(session, std::time::Duration::ZERO)
    }

    fn writer_waiting(
        &self,
        session: &str,
        timeout: std::time::Duration,
    ) -> Result<Writer, StoreError> {
        tacho_schema::validate_session_id(session).map_err(StoreError::BadSessionId)?;
        let lock_path = self.lock_path(session);
        let mut lock = self.vfs.lock(&lock_path, timeout);
        // The first writer of a store makes its directories (checked only then: a
        // writer per session of a bulk import would otherwise ask each time).
        if matches!(&lock, Err(LockError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound) {
            for dir in [self.root().join("locks"), self.root().join("streams")] {
                self.vfs
                    .create_dir_all(&dir)
                    .map_err(|e| StoreError::io(&dir, e))?;
            }
            // A new store: its index starts complete.
            self.index_begin()?;
            lock = self.vfs.lock(&lock_path, timeout);
        }
        let lock = lock.map_err(|e| match e {
            LockError::Busy { holder } => StoreError::Busy {
                session: session.to_string(),
                holder: holder.unwrap_or_else(|| "unknown process".into()),
                waited_ms: timeout.as_millis(),
            },
            LockError::Io(e) => StoreError::io(&lock_path, e),
        })?;
        let mut w = Writer {
            session: session.to_string(),
            stream: StreamId::of_name(session),
            dir: self.stream_dir(session),
            lock,
            store: self.clone(),
            seg: None,
            seg_index: 0,
            chain: [0; 32],
            next_seq: 0,
            buf: Vec::new(),
            payload: rkyv::util::AlignedVec::new(),
            poisoned: false,
            recovered: Vec::new(),
            last_kind: None,
            last_batch: None,
            resumed_from_mark: false,
            resumed_by_stamp: false,
            indexed: false,
            unsynced: false,
            staged: None,
            durable_next_seq: 0,
            sealed: None,
        };
        while !w.resume()? {}
        Ok(w)
    }
}

/// Appends one batch to each writer, all recorded or none: every batch is written,
/// then (with [`Durability::Sync`]) every stream is synced; a failure anywhere takes
/// back the batches already written, so a failed group leaves every stream as it was.
/// One crash can still leave some batches of the group durable and not others: each
/// batch is atomic on its own stream, the group only against errors.
pub fn append_group(
    group: &mut [(&mut Writer, &[(i64, EventBody)])],
    durability: Durability,
) -> Result<Vec<AppendReceipt>, StoreError> {
    let mut writers: Vec<&mut Writer> = group.iter_mut().map(|(w, _)| &mut **w).collect();
    mark_written(&mut writers)?;
    group_commit(group, durability, |w, events| {
        w.append_batch(events, Durability::Buffered)
    })
}

/// Commits what each writer has staged ([`Writer::stage`]) as one group, as
/// [`append_group`] appends: all committed or none (writers with nothing staged are
/// left out). Returns a receipt per writer that had a batch staged, in order.
pub fn commit_group(
    writers: &mut [&mut Writer],
    durability: Durability,
) -> Result<Vec<AppendReceipt>, StoreError> {
    let mut group: Vec<(&mut Writer, ())> = writers
        .iter_mut()
        .filter(|w| w.has_staged())
        .map(|w| (&mut **w, ()))
        .collect();
    group_commit(&mut group, durability, |w, ()| {
        w.commit(Durability::Buffered)
    })
}

/// Records in the session index, with one synced append, that each of `writers` not
/// yet marked writes its stream (what a writer does before its first frame, done once
/// for a group).
pub fn mark_written(writers: &mut [&mut Writer]) -> Result<(), StoreError> {
    let Some(store) = writers.first().map(|w| w.store.clone()) else {
        return Ok(());
    };
    let dirty: Vec<crate::index::Record> = writers
        .iter()
        .filter(|w| !w.indexed)
        .map(|w| crate::index::Record::Dirty {
            session: w.session.clone(),
        })
        .collect();
    if dirty.is_empty() {
        return Ok(());
    }
    store.index_append(&dirty, true)?;
    for w in writers.iter_mut() {
        w.indexed = true;
    }
    Ok(())
}

/// Runs `commit` (which appends or commits one buffered batch) on every writer of the
/// group, then makes the group durable at once; a failure anywhere takes back every
/// batch of the group.
fn group_commit<T>(
    group: &mut [(&mut Writer, T)],
    durability: Durability,
    mut commit: impl FnMut(&mut Writer, &T) -> Result<AppendReceipt, StoreError>,
) -> Result<Vec<AppendReceipt>, StoreError> {
    let mut receipts = Vec::with_capacity(group.len());
    let mut failed = None;
    for (w, batch) in group.iter_mut() {
        match commit(w, batch) {
            Ok(r) => receipts.push(r),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    if failed.is_none() && durability == Durability::Sync {
        // One durability point for the whole group: a filesystem sync costs one
        // journal commit, where a sync per file and per new directory costs one each.
        failed = match group.first() {
            Some((w, _)) if group.len() > 1 => {
                let (vfs, root) = (w.store.vfs.clone(), w.store.root.clone());
                match vfs.sync_fs(&root) {
                    Ok(()) => {
                        for (w, _) in group.iter_mut() {
                            w.synced_by_group();
                        }
                        None
                    }
                    Err(e) => Some(StoreError::io(&root, e)),
                }
            }
            _ => group.iter_mut().find_map(|(w, _)| w.sync().err()),
        };
    }
    let Some(error) = failed else {
        return Ok(receipts);
    };
    let mut kept = Vec::new();
    let mut detail = String::new();
    // Batches staged after the failure are never committed.
    for (w, _) in group.iter_mut().skip(receipts.len() + 1) {
        w.abort_staged();
    }
    // The writer that failed took its own batch back; those before it committed theirs.
    for (w, _) in group.iter_mut().take(receipts.len() + 1) {
        if let Err(e) = w.take_back_last_batch() {
            kept.push(w.session.clone());
            if detail.is_empty() {
                detail = e.to_string();
            }
        }
    }
    if kept.is_empty() {
        Err(error)
    } else {
        Err(StoreError::GroupNotTakenBack {
            error: Box::new(error),
            sessions: kept,
            detail,
        })
    }
}

impl Writer {
    /// Looks at the stream's last segment and takes up where it ends. Returns `false`
    /// when it repaired a torn tail and the stream must be looked at again.
    fn resume(&mut self) -> Result<bool, StoreError> {
        // The previous writer's checkpoint: where it left off, and how much of the
        // stream was committed durably (read before the stream, which only grows).
        let checkpoint = self.read_mark();
        if let Some(m) = &checkpoint {
            self.durable_next_seq = self.durable_next_seq.max(m.durable_next_seq);
        }
        let segs = match self.store.segment_files(&self.session) {
            Ok(s) => s,
            Err(StoreError::NotFound(_)) => return self.check_not_short(&checkpoint, 0, None),
            Err(e) => return Err(e),
        };
        let Some(last) = segs.last().cloned() else {
            return self.check_not_short(&checkpoint, 0, None);
        };
        if let Some((last, sealed)) = segs.split_last()
            && !sealed.is_empty()
        {
            // Sealed segments are never written again: while their stamps are those a
            // previous writer checked them (or wrote them) with, they are not read.
            let digest = sealed_digest(&self.store, sealed);
            let vouched = digest.is_some()
                && checkpoint.as_ref().is_some_and(|m| {
                    m.segment_first_seq == last.first_seq && Some(m.sealed) == digest
                });
            if !vouched {
                self.check_stream_links()?;
            }
            self.sealed = digest.map(|d| (last.first_seq, d));
        }
        if last.packed.is_some() {
            self.resume_after_pack(&last)?;
            return self.check_not_short(
                &checkpoint,
                self.next_seq,
                Some((last.first_seq, u64::MAX)),
            );
        }
        // The segment as its stamp vouches for it (its header and what follows the
        // mark), else read whole.
        let stamped = self.stamped_tail(checkpoint.as_ref(), &last)?;
        let by_stamp = stamped.is_some();
        let bytes = match stamped {
            Some(b) => b,
            None => self.store.read_segment(&last, false)?,
        };
        let (name_seq, path) = (last.first_seq, last.path);
        let limits = ScanLimits { verify_chain: true };
        // Where the last writer left off, when the segment still starts with exactly
        // the bytes it vouched for (by their CRC, or by the file's stamp and the last
        // commit frame): only what follows is scanned.
        let mark = checkpoint.filter(|m| {
            m.segment_first_seq == name_seq
                && (by_stamp
                    || bytes
                        .get(..m.len as usize)
                        .is_some_and(|prefix| crc32fast::hash(prefix) == m.prefix_crc))
        });
        let resumed = mark.and_then(|m| {
            Scanner::resume_at(
                &bytes,
                limits,
                m.len as usize,
                m.chain,
                m.next_seq,
                m.events,
            )
        });
        self.resumed_from_mark = resumed.is_some();
        self.resumed_by_stamp = by_stamp && resumed.is_some();
        if resumed.is_some() {
            self.last_kind = mark.and_then(|m| m.last_kind);
        }
        // Else everything is scanned, the chain checked too: a writer never appends
        // after committed data that was changed (a forged batch is corruption, not a
        // torn tail).
        let mut scan = resumed.unwrap_or_else(|| Scanner::new(&bytes, limits));
        while let Some(b) = scan.next_batch() {
            if let Some(f) = b.events.last() {
                self.last_kind = Some(f.header.kind);
            }
        }
        let corrupt = |offset: usize, detail: String| StoreError::Corrupt {
            path: path.clone(),
            offset: offset as u64,
            detail,
        };
        let header = scan.header().cloned();
        if let Some(h) = &header {
            // Only the last segment is read here: its links to earlier ones are for
            // readers and verification to check.
            let expected = Expected {
                stream: self.stream,
                name_seq,
                index: None,
                next_seq: None,
                prev_chain: None,
            };
            if let Some(problem) = header_problems(h, &expected).into_iter().next() {
                return Err(corrupt(0, problem));
            }
        }
        // Committed events removed from the end (a segment deleted, committed bytes cut
        // or zeroed) look like a shorter stream, or a torn tail: refused before anything
        // is repaired. (Corruption is refused below, naming the damage.)
        let corruption = matches!(scan.end(), Some(SegmentEnd::Damaged(d)) if d.class == DamageClass::Corruption);
        if !corruption {
            let recovered = if header.is_some() {
                scan.next_seq()
            } else {
                name_seq
            };
            self.check_not_short(
                &checkpoint,
                recovered,
                Some((name_seq, scan.valid_len() as u64)),
            )?;
        }
        match (scan.end().cloned(), header) {
            (Some(SegmentEnd::Damaged(d)), _) if d.class == DamageClass::Corruption => {
                Err(corrupt(
                    d.error.offset(),
                    format!(
                        "{} (committed data follows; run `tacho log verify`)",
                        d.error
                    ),
                ))
            }
            (Some(SegmentEnd::Damaged(d)), header) => {
                // A torn write: nothing committed follows it. Cut it off.
                self.recovered.push(Recovery {
                    segment: path.clone(),
                    offset: d.valid_len as u64,
                    truncated_bytes: (bytes.len() - d.valid_len) as u64,
                    reason: d.error.to_string(),
                });
                if header.is_none() || scan.event_count() == 0 {
                    // No committed batch (maybe not even a whole header). Segments are
                    // created together with their first batch, so removing the file
                    // only undoes an unfinished creation.
                    self.remove_segment(&path)?;
                } else {
                    self.cut_segment(&path, d.valid_len as u64)?;
                }
                Ok(false)
            }
            (Some(SegmentEnd::Sealed { seal, .. }), Some(h)) => {
                self.seg_index = h.segment_index + 1;
                self.next_seq = h.first_seq + seal.event_count;
                self.chain = seal.chain;
                Ok(true)
            }
            (Some(SegmentEnd::Open { len }), Some(h)) if scan.event_count() > 0 => {
                let file = self
                    .store
                    .vfs
                    .open_append(&path, false)
                    .map_err(|e| StoreError::io(&path, e))?;
                self.seg_index = h.segment_index;
                self.next_seq = scan.next_seq();
                self.chain = scan.chain();
                let same_mark = mark.filter(|m| m.len == len as u64);
                // (Bytes before a mark taken up may not have been read: its CRC goes on.)
                let prefix_crc = match mark.filter(|m| m.len <= len as u64) {
                    Some(m) => {
                        let mut crc = crc32fast::Hasher::new_with_initial_len(m.prefix_crc, m.len);
                        crc.update(bytes.get(m.len as usize..len).unwrap_or_default());
                        crc.finalize()
                    }
                    None => crc32fast::hash(bytes.get(..len).unwrap_or_default()),
                };
                let commit_crc = crc32fast::hash(
                    bytes
                        .get(len.saturating_sub(COMMIT_FRAME_LEN)..len)
                        .unwrap_or_default(),
                );
                self.seg = Some(OpenSegment {
                    file,
                    path,
                    index: h.segment_index,
                    first_seq: h.first_seq,
                    len: len as u64,
                    allocated: bytes.len() as u64,
                    events: scan.event_count(),
                    span_prefix: None,
                    entry_durable: true,
                    dir_entry_durable: true,
                    prefix_crc,
                    commit_crc,
                });
                if same_mark.is_none() {
                    self.write_mark();
                }
                Ok(true)
            }
            (Some(SegmentEnd::Open { .. }), Some(_)) => {
                // A header without a batch: an unfinished creation, as above.
                self.recovered.push(Recovery {
                    segment: path.clone(),
                    offset: 0,
                    truncated_bytes: bytes.len() as u64,
                    reason: "segment holds no committed batch".into(),
                });
                self.remove_segment(&path)?;
                Ok(false)
            }
            (end, _) => Err(corrupt(0, format!("unexpected segment state {end:?}"))),
        }
    }

    /// The last segment `seg` as far as a writer needs it when the checkpoint's stamp
    /// vouches for it: its header and its bytes from the mark's last commit frame on,
    /// at their offsets in a buffer as long as the file (zeros between, never looked
    /// at: the scan resumes at the mark). When the first [`STAMPED_TAIL_READ`] bytes
    /// after the mark are zeros, the rest of the free space is taken as zeros unread:
    /// nothing was written after the mark (its stamp says so, and after a crash a file
    /// keeps a prefix of the writes after its last sync, §4.2: a later batch would
    /// begin right at the mark). `None` — read the segment whole — unless the mark is
    /// of this segment, everything up to it was durable when it was written, the
    /// file's stamp is the mark's and its last commit frame is too.
    fn stamped_tail(
        &self,
        checkpoint: Option<&Mark>,
        seg: &SegLoc,
    ) -> Result<Option<SegmentBytes>, StoreError> {
        let Some(m) = checkpoint else {
            return Ok(None);
        };
        let vfs = self.store.vfs.as_ref();
        let usable = m.segment_first_seq == seg.first_seq
            && seg.packed.is_none()
            && m.stamp != FileStamp::default()
            && m.durable_next_seq >= m.next_seq
            && m.len >= (SEGMENT_HEADER_LEN + COMMIT_FRAME_LEN) as u64
            && m.len <= m.stamp.len
            && vfs.stamp(&seg.path).is_ok_and(|s| s == m.stamp);
        if !usable {
            return Ok(None);
        }
        let io = |e| StoreError::io(&seg.path, e);
        let header = vfs
            .read_range(&seg.path, 0, SEGMENT_HEADER_LEN as u64)
            .map_err(io)?;
        let from = m.len - COMMIT_FRAME_LEN as u64;
        let short = (COMMIT_FRAME_LEN as u64 + STAMPED_TAIL_READ).min(m.stamp.len - from);
        let mut tail = vfs.read_range(&seg.path, from, short).map_err(io)?;
        let unwritten = tail
            .get(COMMIT_FRAME_LEN..)
            .is_some_and(|after| after.iter().all(|&b| b == 0));
        if !unwritten && short < m.stamp.len - from {
            tail = vfs
                .read_range(&seg.path, from, m.stamp.len - from)
                .map_err(io)?;
        }
        let same_commit = tail
            .get(..COMMIT_FRAME_LEN)
            .is_some_and(|c| crc32fast::hash(c) == m.commit_crc);
        if header.len() != SEGMENT_HEADER_LEN || !same_commit {
            return Ok(None);
        }
        // An anonymous map: its zero pages cost nothing until written.
        let len = usize::try_from(m.stamp.len).unwrap_or(usize::MAX);
        let mut buf = memmap2::MmapMut::map_anon(len).map_err(io)?;
        let from = from as usize;
        let tail_len = tail.len().min(len - from);
        buf[..SEGMENT_HEADER_LEN].copy_from_slice(&header);
        buf[from..from + tail_len].copy_from_slice(&tail[..tail_len]);
        Ok(Some(SegmentBytes::Mapped(
            buf.make_read_only().map_err(io)?,
        )))
    }

    /// Refuses a stream that holds fewer than the events known committed durably
    /// (`next_seq`, its last segment's first sequence number and committed length as
    /// recovered); `Ok(true)` otherwise, for [`Writer::resume`] to return.
    fn check_not_short(
        &self,
        checkpoint: &Option<Mark>,
        next_seq: u64,
        stream_end: Option<(u64, u64)>,
    ) -> Result<bool, StoreError> {
        // With no checkpoint to go by (its lock file new or replaced, a stream continued
        // from a pack), the session index's head: recorded only once durable, never
        // moved back. Read only then, and only for a stream that exists: a writer per
        // new session would otherwise read the whole index. (An index that does not
        // read is derived data: it vouches for nothing.)
        if checkpoint.is_none()
            && stream_end.is_some()
            && let Ok(view) = self.store.index()
            && let Some(e) = view.get(&self.session)
            && e.next_seq > next_seq
            && e.next_seq > self.durable_next_seq
        {
            return Err(StoreError::Lost {
                session: self.session.clone(),
                detail: format!(
                    "the session index recorded {} events (head {}), the stream holds {next_seq}: {} missing",
                    e.next_seq,
                    faster_hex::hex_string(&e.head),
                    e.next_seq - next_seq
                ),
            });
        }
        if next_seq >= self.durable_next_seq {
            return Ok(true);
        }
        // This writer's own syncs, or the checkpoint it read, vouch for what is missing.
        let detail = match checkpoint {
            Some(m) if m.durable_next_seq == self.durable_next_seq => {
                m.shortfall(next_seq, stream_end)
            }
            _ => None,
        }
        .unwrap_or_else(|| {
            format!(
                "{} events were committed durably, the stream holds {next_seq}",
                self.durable_next_seq
            )
        });
        Err(StoreError::Lost {
            session: self.session.clone(),
            detail,
        })
    }

    /// Takes up after a stream whose last segment is packed: it must be sealed (a pack
    /// is never written again), and the next batch starts a segment file.
    fn resume_after_pack(&mut self, seg: &crate::store::SegLoc) -> Result<(), StoreError> {
        let bytes = self.store.read_segment(seg, true)?;
        let mut scan = Scanner::new(&bytes, ScanLimits { verify_chain: true });
        while let Some(b) = scan.next_batch() {
            if let Some(f) = b.events.last() {
                self.last_kind = Some(f.header.kind);
            }
        }
        let corrupt = |offset: usize, detail: String| StoreError::Corrupt {
            path: seg.path.clone(),
            offset: seg.base() + offset as u64,
            detail,
        };
        let Some(h) = scan.header().cloned() else {
            return Err(corrupt(0, "a packed segment without a valid header".into()));
        };
        let expected = Expected {
            stream: self.stream,
            name_seq: seg.first_seq,
            index: None,
            next_seq: None,
            prev_chain: None,
        };
        if let Some(problem) = header_problems(&h, &expected).into_iter().next() {
            return Err(corrupt(0, problem));
        }
        match scan.end() {
            Some(SegmentEnd::Sealed { seal, .. }) => {
                self.seg_index = h.segment_index + 1;
                self.next_seq = h.first_seq + seal.event_count;
                self.chain = seal.chain;
                Ok(())
            }
            Some(SegmentEnd::Damaged(d)) => Err(corrupt(d.error.offset(), d.error.to_string())),
            _ => Err(corrupt(
                bytes.len(),
                "a packed segment is not sealed".into(),
            )),
        }
    }

    /// A writer never appends to a damaged stream. The last segment is checked in full
    /// by [`Writer::resume`]; the sealed ones before it are checked here for every
    /// checksum, their structure and their links (sequence numbers, segment indexes and
    /// chain values carried from seal to header) — what any accidental damage breaks.
    /// Recomputing their chain (what a forgery with recomputed checksums needs) is left
    /// to readers and `log verify`: it costs a hash of the whole stream per open.
    /// (A torn tail of the last segment is a warning there, which `resume` repairs.)
    fn check_stream_links(&self) -> Result<(), StoreError> {
        // (Without the checkpoint check: `resume` makes it, with the writer's error.)
        let report = self
            .store
            .verify_session_checked(&self.session, false, false)?;
        let damage = report
            .findings
            .into_iter()
            .find(|f| f.severity == crate::verify::Severity::Error);
        match damage {
            Some(f) => Err(StoreError::Corrupt {
                path: f.segment.unwrap_or_else(|| self.dir.clone()),
                offset: f.offset.unwrap_or(0),
                detail: format!(
                    "{} (the stream is damaged; nothing is appended \
                     to it — run `tacho log verify`)",
                    f.message
                ),
            }),
            None => Ok(()),
        }
    }

    /// The session this writer appends to.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// Torn tails that were repaired when the writer opened.
    pub fn recovered(&self) -> &[Recovery] {
        &self.recovered
    }

    /// The sequence number the next event gets (= number of events in the stream).
    /// Whether the stream's last event is `session.end`: `None` when the writer has not
    /// seen the last event (it lies in an earlier segment).
    pub fn ended(&self) -> Option<bool> {
        if let Some(staged) = &self.staged {
            return Some(staged.ended);
        }
        if self.next_seq == 0 {
            return Some(false);
        }
        self.last_kind
            .map(|k| tacho_schema::kind_name(k) == "session.end")
    }

    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Nothing to record in the index when this writer is dropped, and nothing left
    /// in its checkpoint, durably: the stream is being removed (retention), and a
    /// checkpoint that outlived it would vouch for events no longer there.
    pub(crate) fn forget_head(&mut self) -> Result<(), StoreError> {
        self.indexed = false;
        self.durable_next_seq = 0;
        let path = self.store.lock_path(&self.session);
        self.lock
            .write_note(&[0; MARK_LEN])
            .and_then(|()| self.lock.sync_note())
            .map_err(|e| StoreError::io(&path, e))
    }

    /// The chain value after the last committed batch.
    pub fn head(&self) -> ChainValue {
        self.chain
    }

    /// Checks the stream rules for a batch that would be appended (or staged) next,
    /// after what is staged, without appending: the first event of a session is
    /// `session.start`, and `session.start` appears nowhere else. On failure, returns
    /// the index in the batch and why.
    pub fn check_batch<'a>(
        &self,
        bodies: impl IntoIterator<Item = &'a EventBody>,
    ) -> Result<(), (usize, String)> {
        check_rules(
            self.next_seq + self.staged.as_ref().map_or(0, |s| s.count),
            bodies,
        )
    }

    /// Appends one event as its own batch.
    pub fn append(
        &mut self,
        time_unix_ns: i64,
        body: &EventBody,
        durability: Durability,
    ) -> Result<AppendReceipt, StoreError> {
        self.append_batch(
            std::slice::from_ref(&(time_unix_ns, body.clone())),
            durability,
        )
    }

    /// Appends events as one batch: all of them become visible and durable together,
    /// or none does. Events are `(time in ns since the epoch, body)`. Header (for a new
    /// segment), event frames and commit frame go to the file in one write.
    pub fn append_batch(
        &mut self,
        events: &[(i64, EventBody)],
        durability: Durability,
    ) -> Result<AppendReceipt, StoreError> {
        if self.staged.is_some() {
            return Err(self.reject("a batch is staged: commit it first".into()));
        }
        // Cleared first: a batch that fails before it is written must not leave the
        // previous batch named for a group to take back.
        self.last_batch = None;
        self.stage(events)?;
        self.commit(durability)
    }

    /// Adds events to the batch that [`Writer::commit`] makes visible and durable, all
    /// together (SPEC.md §4.1), without committing them. Their frames wait in memory
    /// until `STAGED_BYTES_WRITTEN` of them do, then go after the stream's data: a
    /// batch of any size is written as it comes, in pieces, and a small one in one write
    /// with its commit. Nothing staged is visible to readers, and a crash before the
    /// commit leaves a torn tail that the next writer cuts. Returns the sequence number
    /// of the first event; on an error, everything staged is taken back.
    pub fn stage<E: EventRef>(&mut self, events: &[E]) -> Result<u64, StoreError> {
        let r = self.encode_staged(events).and_then(|first| {
            if self.buf.len() >= STAGED_BYTES_WRITTEN {
                self.write_buf(false)?;
                self.buf.clear();
            }
            Ok(first)
        });
        if r.is_err() {
            self.abort_staged();
        }
        r
    }

    /// Commits what is staged as one batch: the commit frame is written after it (its
    /// chain step covers everything staged), then, for [`Durability::Sync`], synced.
    /// Only then are the events visible and the batch acknowledged. On an error the
    /// batch is taken back.
    pub fn commit(&mut self, durability: Durability) -> Result<AppendReceipt, StoreError> {
        let r = self.write_commit(durability);
        if r.is_err() {
            self.abort_staged();
        }
        r
    }

    /// Whether events are staged and not committed yet.
    pub fn has_staged(&self) -> bool {
        self.staged.is_some()
    }

    /// Checks `events` after what is staged and encodes their frames after what waits
    /// in the buffer (after a new segment's header, the first time), adding them to the
    /// staged batch and its chain step; nothing is written yet. Returns the first
    /// event's sequence number.
    fn encode_staged<E: EventRef>(&mut self, events: &[E]) -> Result<u64, StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned(self.session.clone()));
        }
        let Some(first_time) = events.first().map(E::time_unix_ns) else {
            return Err(self.reject("an empty batch cannot be appended".into()));
        };
        // Check everything before writing anything.
        if let Err((_, reason)) = self.check_batch(events.iter().map(E::body)) {
            return Err(self.reject(reason));
        }
        if !self.indexed {
            self.store.index_append(
                &[crate::index::Record::Dirty {
                    session: self.session.clone(),
                }],
                true,
            )?;
            self.indexed = true;
        }
        let first_seq = self.next_seq + self.staged.as_ref().map_or(0, |s| s.count);
        if self.staged.is_none() {
            self.buf.clear();
        }
        let start = self.buf.len();
        encode_frames(&mut self.buf, &mut self.payload, first_seq, events)
            .map_err(|reason| self.reject(reason))?;
        if self.seg.is_none() {
            self.start_segment(first_time)?;
        }
        let Some(seg) = self.seg.as_mut() else {
            return Err(StoreError::Poisoned(self.session.clone()));
        };
        let staged = self.staged.get_or_insert_with(|| Staged {
            step: Chain::start(&self.chain),
            span_len: 0,
            first_seq,
            count: 0,
            last_kind: None,
            ended: false,
        });
        if staged.count == 0 {
            // Where the batch begins, to take it back (0: the batch creates the segment).
            self.last_batch = Some((seg.path.clone(), seg.len));
        }
        // A new segment's header is part of its first batch's span, and is written with
        // it: creating the segment costs no write of its own.
        let frames_len = self.buf.len() - start;
        if let Some(h) = seg.span_prefix.take() {
            staged.step.update(&h);
            staged.span_len += h.len() as u64;
            self.buf.splice(start..start, h);
        }
        let frames_at = self.buf.len() - frames_len;
        staged
            .step
            .update(self.buf.get(frames_at..).unwrap_or_default());
        staged.span_len += frames_len as u64;
        staged.count += events.len() as u64;
        staged.last_kind = events.last().map(|e| e.body().kind_id());
        staged.ended = matches!(events.last().map(E::body), Some(EventBody::SessionEnd(_)));
        Ok(first_seq)
    }

    /// Writes the buffer at the end of the open segment's data. Staged pieces
    /// (`reserve` false) only extend the file by themselves; free space is reserved by
    /// the write that commits.
    fn write_buf(&mut self, reserve: bool) -> Result<(), StoreError> {
        let Some(seg) = self.seg.as_mut() else {
            return Err(StoreError::Poisoned(self.session.clone()));
        };
        if let Err(e) = seg.write(&self.buf, reserve) {
            seg.allocated = u64::MAX; // unknown after a failed write
            if seg.trim().is_err() {
                self.poisoned = true;
            }
            return Err(StoreError::io(&seg.path, e));
        }
        let mut crc = crc32fast::Hasher::new_with_initial_len(seg.prefix_crc, seg.len);
        crc.update(&self.buf);
        seg.prefix_crc = crc.finalize();
        seg.len += self.buf.len() as u64;
        Ok(())
    }

    /// Adds the commit frame of what is staged to the buffer, writes the buffer, makes
    /// it as durable as asked, and takes the batch as committed.
    fn write_commit(&mut self, durability: Durability) -> Result<AppendReceipt, StoreError> {
        let Some(staged) = self.staged.as_ref() else {
            return Err(self.reject("nothing is staged to commit".into()));
        };
        let chain = staged.step.finish();
        let (first_seq, count, ended) = (staged.first_seq, staged.count, staged.ended);
        encode_commit_frame(
            &mut self.buf,
            &CommitPayload {
                chain,
                first_seq,
                event_count: count,
                span_len: staged.span_len,
            },
        );
        let commit_crc = crc32fast::hash(
            self.buf
                .get(self.buf.len().saturating_sub(COMMIT_FRAME_LEN)..)
                .unwrap_or_default(),
        );
        // (No free space is reserved for a session that ends here: it takes no more.)
        self.write_buf(!ended)?;
        let Some(seg) = self.seg.as_mut() else {
            return Err(StoreError::Poisoned(self.session.clone()));
        };
        seg.commit_crc = commit_crc;
        // A session that ended takes no more events: give its free space back.
        if ended && let Err(e) = seg.trim() {
            self.poisoned = true;
            return Err(StoreError::io(&seg.path, e));
        }
        if durability == Durability::Sync
            && let Err(e) = seg.make_durable(self.store.vfs.as_ref(), &self.dir)
        {
            // After a failed fsync the page cache cannot be trusted: stop here.
            self.poisoned = true;
            return Err(StoreError::io(&seg.path, e));
        }
        self.unsynced = durability != Durability::Sync;
        seg.events += count;
        self.next_seq += count;
        if durability == Durability::Sync {
            self.durable_next_seq = self.next_seq;
        }
        self.last_kind = self.staged.take().and_then(|s| s.last_kind);
        self.chain = chain;
        let full = seg.len >= self.store.opts.segment_bytes_max;
        self.write_mark();
        if full {
            self.seal()?;
        }
        Ok(AppendReceipt {
            first_seq,
            last_seq: first_seq + count - 1,
            chain,
        })
    }

    /// Takes back what is staged (the file is cut to where the batch began, and the
    /// writer reads its state from the stream again); poisons the writer when that
    /// fails (the next open cuts the torn tail).
    fn abort_staged(&mut self) {
        // (Frames still waiting in the buffer were never written.)
        self.buf.clear();
        if self.staged.take().is_some() && self.take_back_last_batch().is_err() {
            self.poisoned = true;
        }
    }

    /// Takes back the last batch this writer appended, as if it had never been
    /// (for a group of batches that must all be recorded or none, see
    /// [`append_group`]). Its segment is cut back to where the batch began —
    /// removed when the batch created it, with the stream's directory when the stream
    /// is left empty — and the writer reloads its state from the stream.
    pub fn take_back_last_batch(&mut self) -> Result<(), StoreError> {
        let Some((path, offset)) = self.last_batch.take() else {
            return Ok(());
        };
        // Drop the open file before cutting it; `resume` opens it again.
        self.seg = None;
        if offset == 0 {
            self.remove_segment(&path)?;
        } else {
            self.cut_segment(&path, offset)?;
        }
        self.seg_index = 0;
        self.chain = [0; 32];
        self.next_seq = 0;
        self.last_kind = None;
        while !self.resume()? {}
        Ok(())
    }

    fn read_mark(&mut self) -> Option<Mark> {
        Mark::decode(&self.lock.read_note().ok()?)
    }

    /// Writes the checkpoint of the open segment's state now. Best effort and not
    /// synced: a mark that is lost, torn or stale only costs the next writer a full
    /// scan (a stale one still vouches for a true prefix of an append-only segment).
    fn write_mark(&mut self) {
        let Some(seg) = &self.seg else { return };
        if seg.events == 0 {
            return;
        }
        let first_seq = seg.first_seq;
        // The sealed segments before this one: checked when this writer opened, or
        // written by it. Stamped once per segment.
        if self.sealed.is_none_or(|(at, _)| at != first_seq) {
            self.sealed = self
                .store
                .segment_files(&self.session)
                .ok()
                .and_then(|segs| {
                    let before: Vec<SegLoc> = segs
                        .into_iter()
                        .filter(|s| s.first_seq < first_seq)
                        .collect();
                    sealed_digest(&self.store, &before).map(|d| (first_seq, d))
                });
        }
        let Some(seg) = &self.seg else { return };
        // A stamp vouches only for data that was durable when it was taken: a crash
        // can leave a file's length and times with data that never reached the disk.
        let stamp = if self.durable_next_seq >= self.next_seq {
            self.store.vfs.stamp(&seg.path).unwrap_or_default()
        } else {
            FileStamp::default()
        };
        let mark = Mark {
            segment_first_seq: seg.first_seq,
            len: seg.len,
            prefix_crc: seg.prefix_crc,
            next_seq: self.next_seq,
            chain: self.chain,
            events: seg.events,
            last_kind: self.last_kind,
            durable_next_seq: self.durable_next_seq,
            stamp,
            commit_crc: seg.commit_crc,
            sealed: self.sealed.map_or(0, |(_, d)| d),
        }
        .encode();
        let _ = self.lock.write_note(&mark);
    }

    /// Whether this writer took up from the checkpoint mark (scanning only what
    /// followed it) rather than scanning its last segment whole.
    pub fn resumed_from_mark(&self) -> bool {
        self.resumed_from_mark
    }

    /// Whether it took up from the mark by the segment file's stamp and last commit
    /// frame, reading only the segment's header and what follows the mark.
    pub fn resumed_by_stamp(&self) -> bool {
        self.resumed_by_stamp
    }

    /// Cuts a segment back to `len` bytes and syncs it.
    fn cut_segment(&self, path: &std::path::Path, len: u64) -> Result<(), StoreError> {
        let mut f = self
            .store
            .vfs
            .open_append(path, false)
            .map_err(|e| StoreError::io(path, e))?;
        f.set_len(len)
            .and_then(|()| f.sync_data())
            .map_err(|e| StoreError::io(path, e))
    }

    /// Removes a segment that holds no acknowledged batch, and the stream's directory
    /// when nothing else is in it.
    fn remove_segment(&self, path: &std::path::Path) -> Result<(), StoreError> {
        let vfs = self.store.vfs.as_ref();
        vfs.remove_file(path)
            .and_then(|()| vfs.sync_dir(&self.dir))
            .map_err(|e| StoreError::io(path, e))?;
        if vfs.list_dir(&self.dir).is_ok_and(|names| names.is_empty()) {
            let parent = self.store.streams_dir();
            vfs.remove_dir(&self.dir)
                .and_then(|()| vfs.sync_dir(&parent))
                .map_err(|e| StoreError::io(&self.dir, e))?;
        }
        Ok(())
    }

    /// Everything this writer appended was made durable by a sync of the filesystem.
    fn synced_by_group(&mut self) {
        if let Some(seg) = self.seg.as_mut() {
            seg.entry_durable = true;
            seg.dir_entry_durable = true;
        }
        self.unsynced = false;
        self.durable_next_seq = self.next_seq;
        self.write_mark();
    }

    /// Syncs everything appended so far (after [`Durability::Buffered`] appends).
    pub fn sync(&mut self) -> Result<(), StoreError> {
        if let Some(seg) = self.seg.as_mut() {
            seg.make_durable(self.store.vfs.as_ref(), &self.dir)
                .map_err(|e| StoreError::io(&seg.path, e))?;
        }
        self.unsynced = false;
        self.durable_next_seq = self.next_seq;
        self.write_mark();
        Ok(())
    }

    fn reject(&self, reason: String) -> StoreError {
        StoreError::Rejected {
            session: self.session.clone(),
            reason,
        }
    }

    /// Creates the next segment file (and the stream's directory, for a new stream).
    /// Its header is written together with the first batch.
    fn start_segment(&mut self, first_time_unix_ns: i64) -> Result<(), StoreError> {
        let created_dir = self
            .store
            .vfs
            .create_dir_all(&self.dir)
            .map_err(|e| StoreError::io(&self.dir, e))?;
        if created_dir && self.next_seq == 0 {
            self.check_not_packed()?;
        }
        let path = self.dir.join(segment_file_name(self.next_seq));
        let header = SegmentHeader {
            format_version: FORMAT_VERSION,
            stream: self.stream,
            segment_index: self.seg_index,
            first_seq: self.next_seq,
            prev_chain: self.chain,
            first_time_unix_ns,
        }
        .encode();
        let file = self
            .store
            .vfs
            .open_append(&path, true)
            .map_err(|e| StoreError::io(&path, e))?;
        self.seg = Some(OpenSegment {
            file,
            path,
            index: self.seg_index,
            first_seq: self.next_seq,
            len: 0,
            allocated: 0,
            events: 0,
            span_prefix: Some(header),
            entry_durable: false,
            dir_entry_durable: !created_dir,
            prefix_crc: 0,
            commit_crc: 0,
        });
        Ok(())
    }

    /// A new stream's directory was just created: unless a pack published meanwhile
    /// holds the session (looked for under the pack lock, which a publisher holds from
    /// its own check of stream directories until its pack is in place), the stream is
    /// this writer's. Otherwise the directory goes again and the batch is refused.
    fn check_not_packed(&mut self) -> Result<(), StoreError> {
        let packed = {
            let _shared = self.store.pack_lock(false)?;
            !self.store.packed_segments(&self.session)?.is_empty()
        };
        if !packed {
            return Ok(());
        }
        let vfs = self.store.vfs.as_ref();
        let _ = vfs.remove_dir(&self.dir);
        while !self.resume()? {}
        Err(self.reject(
            "another process recorded this session (in a pack) while this writer was open; nothing was appended".into(),
        ))
    }

    /// Seals the current segment; the next append starts a new one. The seal is synced,
    /// so a sealed segment is never written again.
    fn seal(&mut self) -> Result<(), StoreError> {
        let Some(mut seg) = self.seg.take() else {
            return Ok(());
        };
        // The file is cut to its data before the seal is written, so that no crash can
        // leave zeros after a seal.
        if let Err(e) = seg.trim() {
            self.poisoned = true;
            return Err(StoreError::io(&seg.path, e));
        }
        self.buf.clear();
        encode_seal_frame(
            &mut self.buf,
            &SealPayload {
                chain: self.chain,
                first_seq: seg.first_seq,
                event_count: seg.events,
                sealed_len: seg.len,
            },
        );
        let sealed = seg
            .file
            .write_at(seg.len, &self.buf)
            .and_then(|()| seg.make_durable(self.store.vfs.as_ref(), &self.dir));
        if let Err(e) = sealed {
            self.poisoned = true;
            return Err(StoreError::io(&seg.path, e));
        }
        self.seg_index = seg.index + 1;
        Ok(())
    }
}

/// Closes writers, recording all their heads in the session index with one append
/// (what each writer's drop does on its own, with a file open and an append each),
/// before any of their locks is released.
pub fn close_writers(writers: impl IntoIterator<Item = Writer>) {
    let mut writers: Vec<Writer> = writers.into_iter().collect();
    let Some(store) = writers.first().map(|w| w.store.clone()) else {
        return;
    };
    let heads: Vec<crate::index::Record> = writers
        .iter_mut()
        .filter_map(|w| w.take_head_record())
        .collect();
    if let Ok(len) = store.index_append(&heads, false)
        && len > crate::index::LOG_BYTES_WRITER_COMPACTS
    {
        let _ = store.index_compact();
    }
    drop(writers);
}

impl Writer {
    /// The index record of this writer's head, once: `None` when there is nothing to
    /// record (not indexed, poisoned, or not durable yet).
    fn take_head_record(&mut self) -> Option<crate::index::Record> {
        // A head is recorded only when durable: the index never claims more than a
        // crash keeps.
        if !self.indexed || self.poisoned || self.unsynced {
            return None;
        }
        self.indexed = false;
        Some(crate::index::Record::Head {
            session: self.session.clone(),
            next_seq: self.next_seq,
            head: self.chain,
        })
    }
}

impl Drop for Writer {
    /// Records the stream's head in the session index (clearing the `Dirty` mark of
    /// this writer). Best effort: a head not recorded (or not durable yet) leaves the
    /// entry dirty, and the next reader heals it from the stream.
    fn drop(&mut self) {
        // What was staged and never committed is taken back now rather than left for
        // the next writer to cut.
        self.abort_staged();
        let Some(head) = self.take_head_record() else {
            return;
        };
        if let Ok(len) = self.store.index_append(&[head], false)
            && len > crate::index::LOG_BYTES_WRITER_COMPACTS
        {
            let _ = self.store.index_compact();
        }
    }
}
