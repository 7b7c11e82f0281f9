//! Appending to a session's stream: the lock, recovery on open, batches, rotation.

use std::path::PathBuf;

use tacho_log_format::{
    Chain, ChainValue, CommitPayload, DamageClass, FORMAT_VERSION, FRAME_PAYLOAD_BYTES_MAX,
    SEGMENT_HEADER_LEN, ScanLimits, Scanner, SealPayload, SegmentEnd, SegmentHeader, StreamId,
    encode_commit_frame, encode_event_frame, encode_seal_frame, segment_file_name,
};
use tacho_schema::EventBody;

use crate::link::{Expected, header_problems};
use crate::store::{Store, StoreError};
use crate::vfs::{LockError, LockGuard, VfsFile};

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
}

/// The writer's checkpoint of a stream: the end of its last segment's last committed
/// batch, verified, with the stream's state there and a CRC-32 of every byte before it.
/// Kept in the stream's lock file after the holder's record, written (not synced) after
/// every batch. The next
/// writer whose last segment still starts with exactly those bytes (same CRC) scans only
/// what follows, instead of re-reading and re-hashing the whole segment: opening a
/// writer costs a CRC pass, not a chain pass, whatever the session's length. Any doubt
/// (no mark, a torn or stale one, another segment, other bytes) means a full scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    segment_first_seq: u64,
    len: u64,
    prefix_crc: u32,
    next_seq: u64,
    chain: ChainValue,
    events: u64,
    last_kind: Option<u16>,
}

const MARK_MAGIC: &[u8; 8] = b"TMARK v1";
const MARK_LEN: usize = 8 + 8 + 8 + 4 + 8 + 32 + 8 + 4 + 4;

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
        let crc = crc32fast::hash(&b[..MARK_LEN - 4]);
        b[MARK_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Mark> {
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
        })
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
    fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        let end = self.len + data.len() as u64;
        if end > self.allocated && self.allocated > 0 {
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
    poisoned: bool,
    recovered: Vec<Recovery>,
    /// The kind of the stream's last event, when the writer has seen it (`None` for an
    /// empty stream, or when its last segment holds no event).
    last_kind: Option<u16>,
    /// Where the last batch this writer appended starts (its segment and the data
    /// length before it), until it is taken back or the writer appends again.
    last_batch: Option<(PathBuf, u64)>,
    resumed_from_mark: bool,
    /// This writer recorded in the session index that it writes the stream (a
    /// `Dirty` record, synced before its first frame); it records the head when done.
    indexed: bool,
    /// Batches were appended since the stream was last synced.
    unsynced: bool,
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
            poisoned: false,
            recovered: Vec::new(),
            last_kind: None,
            last_batch: None,
            resumed_from_mark: false,
            indexed: false,
            unsynced: false,
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
    let mut receipts = Vec::with_capacity(group.len());
    let mut failed = None;
    // One synced index append says, for every stream of the group, that it is written.
    if let Some((w, _)) = group.first() {
        let store = w.store.clone();
        let dirty: Vec<crate::index::Record> = group
            .iter()
            .filter(|(w, _)| !w.indexed)
            .map(|(w, _)| crate::index::Record::Dirty {
                session: w.session.clone(),
            })
            .collect();
        store.index_append(&dirty, true)?;
        for (w, _) in group.iter_mut() {
            w.indexed = true;
        }
    }
    for (w, events) in group.iter_mut() {
        // Cleared first, so that a batch written before its append failed (say, while
        // sealing the segment) is taken back too, and nothing else is.
        w.last_batch = None;
        match w.append_batch(events, Durability::Buffered) {
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
        let segs = match self.store.segment_files(&self.session) {
            Ok(s) => s,
            Err(StoreError::NotFound(_)) => return Ok(true),
            Err(e) => return Err(e),
        };
        let Some((name_seq, path)) = segs.last().cloned() else {
            return Ok(true);
        };
        if segs.len() > 1 {
            self.check_stream_links()?;
        }
        let bytes = self
            .store
            .vfs
            .read(&path, false)
            .map_err(|e| StoreError::io(&path, e))?;
        let limits = ScanLimits { verify_chain: true };
        // Where the last writer left off, when the segment still starts with exactly
        // the bytes it vouched for: only what follows is scanned.
        let mark = self.read_mark().filter(|m| {
            m.segment_first_seq == name_seq
                && bytes
                    .get(..m.len as usize)
                    .is_some_and(|prefix| crc32fast::hash(prefix) == m.prefix_crc)
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
                let prefix_crc = match same_mark {
                    Some(m) => m.prefix_crc,
                    None => crc32fast::hash(bytes.get(..len).unwrap_or_default()),
                };
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

    /// A writer never appends to a damaged stream. The last segment is checked in full
    /// by [`Writer::resume`]; the sealed ones before it are checked here for every
    /// checksum, their structure and their links (sequence numbers, segment indexes and
    /// chain values carried from seal to header) — what any accidental damage breaks.
    /// Recomputing their chain (what a forgery with recomputed checksums needs) is left
    /// to readers and `log verify`: it costs a hash of the whole stream per open.
    /// (A torn tail of the last segment is a warning there, which `resume` repairs.)
    fn check_stream_links(&self) -> Result<(), StoreError> {
        let report = self.store.verify_session(&self.session, false)?;
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

    /// Nothing to record in the index when this writer is dropped.
    pub(crate) fn forget_head(&mut self) {
        self.indexed = false;
    }

    /// The chain value after the last committed batch.
    pub fn head(&self) -> ChainValue {
        self.chain
    }

    /// Checks the stream rules for a batch that would be appended next, without
    /// appending: the first event of a session is `session.start`, and `session.start`
    /// appears nowhere else. On failure, returns the index in the batch and why.
    pub fn check_batch<'a>(
        &self,
        bodies: impl IntoIterator<Item = &'a EventBody>,
    ) -> Result<(), (usize, String)> {
        for (i, body) in bodies.into_iter().enumerate() {
            let seq = self.next_seq + i as u64;
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
                    format!(
                        "session.start may only be the first event (this would be event {seq})"
                    ),
                ));
            }
        }
        Ok(())
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
    /// or none does. Events are `(time in ns since the epoch, body)`.
    pub fn append_batch(
        &mut self,
        events: &[(i64, EventBody)],
        durability: Durability,
    ) -> Result<AppendReceipt, StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned(self.session.clone()));
        }
        if events.is_empty() {
            return Err(self.reject("an empty batch cannot be appended".into()));
        }
        // Check everything before writing anything.
        if let Err((_, reason)) = self.check_batch(events.iter().map(|(_, b)| b)) {
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
        self.buf.clear();
        for (i, (time, body)) in events.iter().enumerate() {
            let (kind, version, payload) = body.encode().map_err(|e| self.reject(e.to_string()))?;
            if payload.len() > FRAME_PAYLOAD_BYTES_MAX as usize {
                return Err(self.reject(format!(
                    "a {} event of {} bytes exceeds the limit of {FRAME_PAYLOAD_BYTES_MAX} bytes",
                    body.kind_name(),
                    payload.len()
                )));
            }
            encode_event_frame(
                &mut self.buf,
                kind,
                version,
                self.next_seq + i as u64,
                *time,
                &payload,
            );
        }
        if self.seg.is_none() {
            self.start_segment(events[0].0)?;
        }
        let Some(seg) = self.seg.as_mut() else {
            return Err(StoreError::Poisoned(self.session.clone()));
        };
        let created = seg.len == 0;
        let mut step = Chain::start(&self.chain);
        let mut span_len = self.buf.len() as u64;
        if let Some(h) = &seg.span_prefix {
            step.update(h);
            span_len += SEGMENT_HEADER_LEN as u64;
        }
        step.update(&self.buf);
        let chain = step.finish();
        let commit = CommitPayload {
            chain,
            first_seq: self.next_seq,
            event_count: events.len() as u64,
            span_len,
        };
        encode_commit_frame(&mut self.buf, &commit);
        if created {
            // A new segment gets its header, first batch and commit in one write, so
            // that creating it costs no extra sync.
            if let Some(h) = &seg.span_prefix {
                self.buf.splice(0..0, h.iter().copied());
            }
        }
        if let Err(e) = seg.write(&self.buf) {
            // Take back what part of the batch reached the file, so nothing is
            // half-written; if even that fails, the next open repairs the tail.
            seg.allocated = u64::MAX; // unknown after a failed write
            if seg.trim().is_err() {
                self.poisoned = true;
            }
            let err = StoreError::io(&seg.path, e);
            if created {
                // A segment created for this batch (and a stream, for a new session)
                // is removed with it: no empty stream is left behind.
                let path = seg.path.clone();
                self.seg = None;
                if self.remove_segment(&path).is_err() {
                    self.poisoned = true;
                }
            }
            return Err(err);
        }
        self.last_batch = Some((seg.path.clone(), seg.len));
        let data_len = seg.len;
        let mut crc = crc32fast::Hasher::new_with_initial_len(seg.prefix_crc, data_len);
        crc.update(&self.buf);
        seg.prefix_crc = crc.finalize();
        seg.len += self.buf.len() as u64;
        // A session that ended takes no more events: give its free space back.
        let ended = matches!(events.last(), Some((_, EventBody::SessionEnd(_))));
        if ended && let Err(e) = seg.trim() {
            seg.len = data_len;
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
        let receipt = AppendReceipt {
            first_seq: self.next_seq,
            last_seq: self.next_seq + events.len() as u64 - 1,
            chain,
        };
        seg.events += events.len() as u64;
        seg.span_prefix = None;
        self.next_seq += events.len() as u64;
        self.last_kind = events.last().map(|(_, b)| b.kind_id());
        self.chain = chain;
        let full = seg.len >= self.store.opts.segment_bytes_max;
        self.write_mark();
        if full {
            self.seal()?;
        }
        Ok(receipt)
    }

    /// Takes back the last batch this writer appended, as if it had never been
    /// (for a group of batches that must all be recorded or none, see
    /// [`Store::append_group`]). Its segment is cut back to where the batch began —
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
        let mark = Mark {
            segment_first_seq: seg.first_seq,
            len: seg.len,
            prefix_crc: seg.prefix_crc,
            next_seq: self.next_seq,
            chain: self.chain,
            events: seg.events,
            last_kind: self.last_kind,
        }
        .encode();
        let _ = self.lock.write_note(&mark);
    }

    /// Whether this writer took up from the checkpoint mark (scanning only what
    /// followed it) rather than scanning its last segment whole.
    pub fn resumed_from_mark(&self) -> bool {
        self.resumed_from_mark
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
    }

    /// Syncs everything appended so far (after [`Durability::Buffered`] appends).
    pub fn sync(&mut self) -> Result<(), StoreError> {
        if let Some(seg) = self.seg.as_mut() {
            seg.make_durable(self.store.vfs.as_ref(), &self.dir)
                .map_err(|e| StoreError::io(&seg.path, e))?;
        }
        self.unsynced = false;
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
        });
        Ok(())
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
