//! Appending to a session's stream: the lock, recovery on open, batches, rotation.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use tacho_log_format::{
    Chain, ChainValue, CommitPayload, DamageClass, FORMAT_VERSION, FRAME_PAYLOAD_BYTES_MAX,
    SEGMENT_HEADER_LEN, ScanLimits, Scanner, SealPayload, SegmentEnd, SegmentHeader, StreamId,
    encode_commit_frame, encode_event_frame, encode_seal_frame, segment_file_name,
};
use tacho_schema::EventBody;

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

/// The only writer of one session's stream while it lives (it holds the stream's lock).
#[derive(Debug)]
pub struct Writer {
    session: String,
    stream: StreamId,
    dir: PathBuf,
    _lock: Box<dyn LockGuard>,
    store: Store,
    file: Box<dyn VfsFile>,
    seg_path: PathBuf,
    seg_index: u64,
    seg_first_seq: u64,
    seg_len: u64,
    seg_events: u64,
    /// The header bytes while the segment has no committed batch: the first chain step
    /// of a segment covers its header.
    span_prefix: Option<[u8; SEGMENT_HEADER_LEN]>,
    chain: ChainValue,
    next_seq: u64,
    buf: Vec<u8>,
    poisoned: bool,
    recovered: Vec<Recovery>,
}

fn now_unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

impl Store {
    /// Opens the stream of `session` for appending, creating it if needed. Waits up to
    /// the store's lock timeout for another writer of the same session, then fails with
    /// [`StoreError::Busy`]. Repairs a torn tail and reports it in [`Writer::recovered`].
    pub fn writer(&self, session: &str) -> Result<Writer, StoreError> {
        tacho_schema::validate_session_id(session).map_err(StoreError::BadSessionId)?;
        let dir = self.stream_dir(session);
        let created = self
            .vfs
            .create_dir_all(&dir)
            .map_err(|e| StoreError::io(&dir, e))?;
        if created {
            let parent = self.streams_dir();
            self.vfs
                .sync_dir(&parent)
                .map_err(|e| StoreError::io(&parent, e))?;
        }
        let lock_path = dir.join("LOCK");
        let lock = self
            .vfs
            .lock(&lock_path, self.opts.lock_timeout)
            .map_err(|e| match e {
                LockError::Busy { holder } => StoreError::Busy {
                    session: session.to_string(),
                    holder: holder.unwrap_or_else(|| "unknown process".into()),
                    waited_ms: self.opts.lock_timeout.as_millis(),
                },
                LockError::Io(e) => StoreError::io(&lock_path, e),
            })?;
        Writer::open_locked(self.clone(), session, dir, lock)
    }
}

impl Writer {
    fn open_locked(
        store: Store,
        session: &str,
        dir: PathBuf,
        lock: Box<dyn LockGuard>,
    ) -> Result<Writer, StoreError> {
        let stream = StreamId::of_name(session);
        let mut recovered = Vec::new();
        loop {
            let segs = store.segment_files(session)?;
            let Some((name_seq, path)) = segs.last().cloned() else {
                return Writer::start_segment(store, session, dir, lock, 0, 0, [0; 32], recovered);
            };
            let bytes = store
                .vfs
                .read(&path, false)
                .map_err(|e| StoreError::io(&path, e))?;
            let mut scan = Scanner::new(&bytes, ScanLimits { verify_chain: false });
            while scan.next_batch().is_some() {}
            let corrupt = |offset: usize, detail: String| StoreError::Corrupt {
                path: path.clone(),
                offset: offset as u64,
                detail,
            };
            let end = scan.end().cloned();
            let header = scan.header().cloned();
            if let Some(h) = &header {
                if h.stream != stream {
                    return Err(corrupt(0, "segment belongs to another stream".into()));
                }
                if h.first_seq != name_seq {
                    return Err(corrupt(
                        0,
                        format!("header says first seq {}, file name says {name_seq}", h.first_seq),
                    ));
                }
            }
            match (end, header) {
                (Some(SegmentEnd::Damaged(d)), _) if d.class == DamageClass::Corruption => {
                    return Err(corrupt(
                        d.error.offset(),
                        format!("{} (committed data follows; run `tacho log verify`)", d.error),
                    ));
                }
                (Some(SegmentEnd::Damaged(d)), header) => {
                    // A torn write: nothing committed follows it. Cut it off.
                    let cut = (bytes.len() - d.valid_len) as u64;
                    recovered.push(Recovery {
                        segment: path.clone(),
                        offset: d.valid_len as u64,
                        truncated_bytes: cut,
                        reason: d.error.to_string(),
                    });
                    if header.is_none() {
                        // The header itself is torn: the segment holds nothing. Remove
                        // it; the loop then continues from the previous segment.
                        store
                            .vfs
                            .remove_file(&path)
                            .map_err(|e| StoreError::io(&path, e))?;
                        store.vfs.sync_dir(&dir).map_err(|e| StoreError::io(&dir, e))?;
                        continue;
                    }
                    let mut f = store
                        .vfs
                        .open_append(&path, false)
                        .map_err(|e| StoreError::io(&path, e))?;
                    f.truncate(d.valid_len as u64)
                        .and_then(|()| f.sync_data())
                        .map_err(|e| StoreError::io(&path, e))?;
                    continue;
                }
                (Some(SegmentEnd::Sealed { seal, .. }), Some(h)) => {
                    // Crashed between sealing and starting the next segment.
                    return Writer::start_segment(
                        store,
                        session,
                        dir,
                        lock,
                        h.segment_index + 1,
                        h.first_seq + seal.event_count,
                        seal.chain,
                        recovered,
                    );
                }
                (Some(SegmentEnd::Open { len }), Some(h)) => {
                    let file = store
                        .vfs
                        .open_append(&path, false)
                        .map_err(|e| StoreError::io(&path, e))?;
                    let span_prefix = (scan.event_count() == 0).then(|| h.encode());
                    return Ok(Writer {
                        session: session.to_string(),
                        stream,
                        dir,
                        _lock: lock,
                        store,
                        file,
                        seg_path: path,
                        seg_index: h.segment_index,
                        seg_first_seq: h.first_seq,
                        seg_len: len as u64,
                        seg_events: scan.event_count(),
                        span_prefix,
                        chain: scan.chain(),
                        next_seq: scan.next_seq(),
                        buf: Vec::new(),
                        poisoned: false,
                        recovered,
                    });
                }
                (end, _) => {
                    return Err(corrupt(0, format!("unexpected segment state {end:?}")));
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn start_segment(
        store: Store,
        session: &str,
        dir: PathBuf,
        lock: Box<dyn LockGuard>,
        index: u64,
        first_seq: u64,
        prev_chain: ChainValue,
        recovered: Vec<Recovery>,
    ) -> Result<Writer, StoreError> {
        let stream = StreamId::of_name(session);
        let path = dir.join(segment_file_name(first_seq));
        let header = SegmentHeader {
            format_version: FORMAT_VERSION,
            stream,
            segment_index: index,
            first_seq,
            prev_chain,
            created_unix_ns: now_unix_ns(),
        }
        .encode();
        let mut file = store
            .vfs
            .open_append(&path, true)
            .map_err(|e| StoreError::io(&path, e))?;
        file.append(&header)
            .and_then(|()| file.sync_data())
            .map_err(|e| StoreError::io(&path, e))?;
        store.vfs.sync_dir(&dir).map_err(|e| StoreError::io(&dir, e))?;
        Ok(Writer {
            session: session.to_string(),
            stream,
            dir,
            _lock: lock,
            store,
            file,
            seg_path: path,
            seg_index: index,
            seg_first_seq: first_seq,
            seg_len: SEGMENT_HEADER_LEN as u64,
            seg_events: 0,
            span_prefix: Some(header),
            chain: prev_chain,
            next_seq: first_seq,
            buf: Vec::new(),
            poisoned: false,
            recovered,
        })
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
    pub fn next_seq(&self) -> u64 {
        self.next_seq
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
                    format!("session.start may only be the first event (this would be event {seq})"),
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
        self.append_batch(std::slice::from_ref(&(time_unix_ns, body.clone())), durability)
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
        let mut step = Chain::start(&self.chain);
        let mut span_len = self.buf.len() as u64;
        if let Some(h) = &self.span_prefix {
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

        if let Err(e) = self.file.append(&self.buf) {
            // Take back what part of the batch reached the file, so nothing is
            // half-written; if even that fails, the next open repairs the tail.
            if self.file.truncate(self.seg_len).is_err() {
                self.poisoned = true;
            }
            return Err(StoreError::io(&self.seg_path, e));
        }
        if durability == Durability::Sync {
            if let Err(e) = self.file.sync_data() {
                // After a failed fsync the page cache cannot be trusted: stop here.
                self.poisoned = true;
                return Err(StoreError::io(&self.seg_path, e));
            }
        }
        let receipt = AppendReceipt {
            first_seq: self.next_seq,
            last_seq: self.next_seq + events.len() as u64 - 1,
            chain,
        };
        self.seg_len += self.buf.len() as u64;
        self.seg_events += events.len() as u64;
        self.next_seq += events.len() as u64;
        self.chain = chain;
        self.span_prefix = None;
        if self.seg_len >= self.store.opts.segment_bytes_max {
            self.rotate()?;
        }
        Ok(receipt)
    }

    /// Syncs everything appended so far (after [`Durability::Buffered`] appends).
    pub fn sync(&mut self) -> Result<(), StoreError> {
        self.file
            .sync_data()
            .map_err(|e| StoreError::io(&self.seg_path, e))
    }

    fn reject(&self, reason: String) -> StoreError {
        StoreError::Rejected {
            session: self.session.clone(),
            reason,
        }
    }

    /// Seals the current segment and starts the next one. The seal is synced before the
    /// next segment exists, and the directory is synced after, so a crash leaves either
    /// a sealed last segment (the next open starts the new one) or both.
    fn rotate(&mut self) -> Result<(), StoreError> {
        self.buf.clear();
        encode_seal_frame(
            &mut self.buf,
            &SealPayload {
                chain: self.chain,
                first_seq: self.seg_first_seq,
                event_count: self.seg_events,
                sealed_len: self.seg_len,
            },
        );
        let sealed = self
            .file
            .append(&self.buf)
            .and_then(|()| self.file.sync_data());
        if let Err(e) = sealed {
            self.poisoned = true;
            return Err(StoreError::io(&self.seg_path, e));
        }
        let path = self.dir.join(segment_file_name(self.next_seq));
        let header = SegmentHeader {
            format_version: FORMAT_VERSION,
            stream: self.stream,
            segment_index: self.seg_index + 1,
            first_seq: self.next_seq,
            prev_chain: self.chain,
            created_unix_ns: now_unix_ns(),
        }
        .encode();
        let started = self
            .store
            .vfs
            .open_append(&path, true)
            .and_then(|mut f| {
                f.append(&header)?;
                f.sync_data()?;
                self.store.vfs.sync_dir(&self.dir)?;
                Ok(f)
            });
        match started {
            Ok(f) => {
                self.file = f;
                self.seg_path = path;
                self.seg_index += 1;
                self.seg_first_seq = self.next_seq;
                self.seg_len = SEGMENT_HEADER_LEN as u64;
                self.seg_events = 0;
                self.span_prefix = Some(header);
                Ok(())
            }
            Err(e) => {
                self.poisoned = true;
                Err(StoreError::io(&path, e))
            }
        }
    }
}
