//! Verification and statistics of streams: every checksum, every chain step, every
//! sequence number and every payload, with each finding located.

use std::path::PathBuf;

use tacho_log_format::{ChainValue, DamageClass, ScanLimits, Scanner, SegmentEnd, StreamId};
use tacho_schema::{EventBody, EventView};

use crate::link::{Expected, header_problems};
use crate::store::{Listing, SegLoc, Store, StoreError};

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Not a fault: for example an uncommitted tail that the next writer cuts.
    Warning,
    /// The log is not what was written.
    Error,
}

/// One problem, with its location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub session: String,
    pub segment: Option<PathBuf>,
    pub offset: Option<u64>,
    pub message: String,
}

/// What verifying (or counting) one stream found.
#[derive(Debug, Clone, Default)]
pub struct StreamReport {
    pub session: String,
    /// The head: how many events the stream holds (verified before any error) and the
    /// chain value after them. Keep it elsewhere to detect a later rewrite.
    pub next_seq: u64,
    pub chain: ChainValue,
    pub findings: Vec<Finding>,
    pub segments: u64,
    pub sealed_segments: u64,
    pub events: u64,
    pub batches: u64,
    pub bytes: u64,
    /// Zeros kept ahead of the data in the last segment (free space).
    pub free_bytes: u64,
    /// Event count by kind id.
    pub by_kind: KindTally,
}

/// Event counts by kind id, in id order: a few entries per stream, kept in a vector
/// (a map per stream cost more to build and drop than the counting itself).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindTally(Vec<(u16, u64)>);

impl KindTally {
    /// Adds `n` events of kind `k`.
    pub fn add(&mut self, k: u16, n: u64) {
        match self.0.binary_search_by_key(&k, |(kind, _)| *kind) {
            Ok(i) => {
                if let Some((_, c)) = self.0.get_mut(i) {
                    *c += n;
                }
            }
            Err(i) => self.0.insert(i, (k, n)),
        }
    }

    /// (kind id, count), in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.0.iter().copied()
    }
}

/// What verifying (or counting) the whole store found.
#[derive(Debug, Clone, Default)]
pub struct StoreReport {
    pub streams: Vec<StreamReport>,
    /// Findings about the store as a whole (its session index, its prune record), not
    /// one stream.
    pub store: Vec<Finding>,
    /// The digest of the last prune record (hex), when the store was ever pruned.
    pub prune_head: Option<String>,
}

impl StoreReport {
    /// BLAKE3 over every stream's id, event count and head, in id order, then the
    /// digest of the last prune record if any. Equal digests mean equal stores, event
    /// for event; keep it to detect later edits.
    pub fn store_digest(&self) -> ChainValue {
        // (The bytes laid out first and hashed in one call: BLAKE3 hashes a long input
        // several chunks at a time, and four small updates per stream cost more.)
        let mut bytes = Vec::with_capacity(
            self.streams
                .iter()
                .map(|s| s.session.len() + 48)
                .sum::<usize>(),
        );
        for s in &self.streams {
            bytes.extend_from_slice(&(s.session.len() as u64).to_le_bytes());
            bytes.extend_from_slice(s.session.as_bytes());
            bytes.extend_from_slice(&s.next_seq.to_le_bytes());
            bytes.extend_from_slice(&s.chain);
        }
        let mut h = blake3::Hasher::new_derive_key("tacho store digest v1");
        h.update(&bytes);
        // A store never pruned keeps the digest it always had.
        if let Some(p) = &self.prune_head {
            h.update(b"pruned");
            h.update(p.as_bytes());
        }
        *h.finalize().as_bytes()
    }

    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.streams
            .iter()
            .flat_map(|s| s.findings.iter())
            .chain(self.store.iter())
    }

    /// True when no finding is an error.
    pub fn is_clean(&self) -> bool {
        self.findings().all(|f| f.severity < Severity::Error)
    }
}

/// What one segment's scan found, before it is linked to its neighbours.
#[derive(Debug)]
struct SegmentScan {
    header: Option<tacho_log_format::SegmentHeader>,
    /// (offset, message) of problems inside the segment, in offset order.
    errors: Vec<(usize, String)>,
    end: Option<SegmentEnd>,
    bytes: u64,
    events: u64,
    batches: u64,
    by_kind: KindTally,
    /// Sequence number and chain value after the last good batch.
    next_seq: u64,
    chain: ChainValue,
    /// Where the last good batch ends (or the header, or the seal).
    data_len: u64,
}

/// Below this many bytes a stream is verified on the calling thread.
const PARALLEL_VERIFY_BYTES_MIN: u64 = 1 << 20;

/// Hears every committed event of a stream being verified, in order, as (seq, time,
/// view), up to the first payload that does not validate.
pub type EventVisitor<'v> = &'v mut dyn FnMut(u64, i64, &EventView<'_>);

impl Store {
    /// Scans one segment in a single pass: checksums, structure, sequence numbers, and
    /// with `deep` every chain step and every payload.
    fn scan_segment(
        &self,
        seg: &SegLoc,
        last: bool,
        deep: bool,
        mut visit: Option<EventVisitor<'_>>,
    ) -> Result<SegmentScan, StoreError> {
        let mut bytes = self.read_segment(seg, !last)?;
        let limits = ScanLimits { verify_chain: deep };
        let mut out = SegmentScan {
            header: None,
            errors: Vec::new(),
            end: None,
            bytes: 0,
            events: 0,
            batches: 0,
            by_kind: KindTally::default(),
            next_seq: 0,
            chain: [0; 32],
            data_len: 0,
        };
        // Counting in an array avoids a map lookup per event on the hot path.
        let mut counts = [0u64; 64];
        // A stream's open segment is read again where it looks damaged while a write
        // may be in progress (`Store::reread_open_segment`), and scanned on from the
        // end of the last batch already counted.
        let open = last && seg.packed.is_none();
        let mut resume: Option<crate::store::Resume> = None;
        let mut rereads = 0;
        let scan = loop {
            let resumed = resume.and_then(|(pos, chain, next, events)| {
                Scanner::resume_at(&bytes, limits, pos, chain, next, events)
            });
            if let Some((pos, chain, next_seq, events)) = resume
                && resumed.is_none()
                && events > 0
            {
                // (Committed bytes are never cut: the file was replaced or damaged.)
                out.errors.push((
                    pos,
                    "the segment lost committed bytes while it was read".into(),
                ));
                (out.chain, out.next_seq, out.events, out.data_len) =
                    (chain, next_seq, events, pos as u64);
                break None;
            }
            let mut scan = match resumed {
                Some(s) => s,
                None => {
                    let s = Scanner::new(&bytes, limits);
                    out.header = s.header().cloned();
                    s
                }
            };
            out.bytes = bytes.len() as u64;
            while let Some(batch) = scan.next_batch() {
                out.batches += 1;
                for frame in batch.events {
                    let k = frame.header.kind;
                    match counts.get_mut(usize::from(k)) {
                        Some(c) => *c += 1,
                        None => out.by_kind.add(k, 1),
                    }
                    match &mut visit {
                        // Reading the view validates the payload as `validate` does.
                        Some(f) if deep && out.errors.is_empty() => {
                            let (seq, at) = (frame.header.seq, frame.header.time_unix_ns);
                            if let Err(e) =
                                EventView::visit(k, frame.header.kind_version, frame.payload, |v| {
                                    f(seq, at, v)
                                })
                            {
                                out.errors.push((frame.offset, e.to_string()));
                            }
                        }
                        _ => {
                            if deep
                                && let Err(e) =
                                    EventBody::validate(k, frame.header.kind_version, frame.payload)
                            {
                                out.errors.push((frame.offset, e.to_string()));
                            }
                        }
                    }
                }
            }
            if let Some((again, at)) = self.reread_torn(seg, &bytes, &scan, open, rereads)? {
                bytes = again;
                resume = Some(at);
                rereads += 1;
                continue;
            }
            break Some(scan);
        };
        for (k, n) in counts.iter().enumerate() {
            if *n > 0 {
                out.by_kind.add(k as u16, *n);
            }
        }
        let Some(scan) = scan else {
            return Ok(out);
        };
        out.events = scan.event_count();
        out.next_seq = scan.next_seq();
        out.chain = scan.chain();
        out.end = scan.end().cloned();
        out.data_len = match &out.end {
            Some(SegmentEnd::Open { len } | SegmentEnd::Sealed { len, .. }) => *len as u64,
            Some(SegmentEnd::Damaged(d)) => d.valid_len as u64,
            None => scan.valid_len() as u64,
        };
        Ok(out)
    }

    /// Verifies one session's stream. With `deep`, every chain step is recomputed and
    /// every payload validated; without, only checksums and structure are checked
    /// (what statistics need). Large streams are verified segment by segment on every
    /// core (`StoreOptions::verify_threads`); the links between segments are checked
    /// afterwards, in order.
    pub fn verify_session(&self, session: &str, deep: bool) -> Result<StreamReport, StoreError> {
        self.verify_session_with(session, deep, true, None, None)
    }

    /// [`Store::verify_session`] of a session of `listing`, as part of a pass over
    /// every stream: what the listing found is not looked for again, and what it did
    /// not find (a directory, a lock file created since) is not looked for at all —
    /// the stream is verified as it was listed.
    pub fn verify_listed(
        &self,
        listing: &Listing,
        session: &str,
        deep: bool,
    ) -> Result<StreamReport, StoreError> {
        self.verify_session_with(session, deep, true, None, Some(listing))
    }

    /// [`Store::verify_session`], with or without the check of the stream against its
    /// writer's checkpoint (a writer opening the stream makes that check itself).
    pub(crate) fn verify_session_checked(
        &self,
        session: &str,
        deep: bool,
        checkpoint: bool,
    ) -> Result<StreamReport, StoreError> {
        self.verify_session_with(session, deep, checkpoint, None, None)
    }

    /// The checkpoint a stream's writer left in its lock file (read without the lock),
    /// when it reads: how many events were committed durably.
    pub(crate) fn checkpoint(&self, session: &str) -> Option<crate::writer::Mark> {
        let note = self.vfs.peek_lock_note(&self.lock_path(session)).ok()?;
        crate::writer::Mark::decode(&note)
    }

    /// [`Store::verify_session`] (deep) that also hands every committed event to
    /// `visit` as it is validated, in order: one read of the stream for a check and a
    /// fold of its events. Its segments are then read one after another.
    pub fn verify_session_visiting(
        &self,
        session: &str,
        visit: EventVisitor<'_>,
    ) -> Result<StreamReport, StoreError> {
        self.verify_session_with(session, true, true, Some(visit), None)
    }

    /// [`Store::verify_session_visiting`] of a session of `listing` (see
    /// [`Store::verify_listed`]).
    pub fn verify_listed_visiting(
        &self,
        listing: &Listing,
        session: &str,
        visit: EventVisitor<'_>,
    ) -> Result<StreamReport, StoreError> {
        self.verify_session_with(session, true, true, Some(visit), Some(listing))
    }

    fn verify_session_with(
        &self,
        session: &str,
        deep: bool,
        check_mark: bool,
        mut visit: Option<EventVisitor<'_>>,
        listing: Option<&Listing>,
    ) -> Result<StreamReport, StoreError> {
        // Read before the stream: a writer appending meanwhile only adds to the stream
        // after what its checkpoint says. (A lock file the listing did not see was
        // created after it, by a writer whose appends the stream as listed lacks.)
        let checkpoint = match listing {
            _ if !check_mark => None,
            Some(l) if !l.has_lock(session) => None,
            _ => self.checkpoint(session),
        };
        let segs = self.segment_files_in(session, listing.map(|l| (l, checkpoint.is_some())))?;
        let n = segs.len();
        // Segments are at most `segment_bytes_max`, so the count tells the size.
        let large =
            (n as u64).saturating_mul(self.opts.segment_bytes_max) >= PARALLEL_VERIFY_BYTES_MIN;
        // Asked only for a stream worth threads: the answer reads cgroup files, several
        // system calls that a store of many small sessions would pay per session.
        let threads = if n > 1 && large && visit.is_none() {
            match self.opts.verify_threads {
                0 => std::thread::available_parallelism().map_or(1, |t| t.get()),
                t => t,
            }
            .min(n)
        } else {
            1
        };
        let scans: Vec<Result<SegmentScan, StoreError>> = if threads > 1 {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let mut slots: Vec<Option<Result<SegmentScan, StoreError>>> =
                (0..n).map(|_| None).collect();
            let done = std::sync::Mutex::new(&mut slots);
            std::thread::scope(|scope| {
                for _ in 0..threads {
                    scope.spawn(|| {
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(seg) = segs.get(i) else { break };
                            let r = self.scan_segment(seg, i + 1 == n, deep, None);
                            if let Ok(mut slots) = done.lock() {
                                slots[i] = Some(r);
                            }
                        }
                    });
                }
            });
            slots
                .into_iter()
                .map(|s| s.unwrap_or_else(|| Err(StoreError::Poisoned(session.to_string()))))
                .collect()
        } else {
            segs.iter()
                .enumerate()
                .map(|(i, seg)| {
                    let visit = visit.as_mut().map(|v| &mut **v as EventVisitor<'_>);
                    self.scan_segment(seg, i + 1 == n, deep, visit)
                })
                .collect()
        };

        let stream = StreamId::of_name(session);
        let mut r = StreamReport {
            session: session.to_string(),
            ..StreamReport::default()
        };
        // (Offsets are in the file: a packed segment's are past its start in the pack.)
        let push = |r: &mut StreamReport, sev, seg: &SegLoc, off: Option<u64>, msg: String| {
            r.findings.push(Finding {
                severity: sev,
                session: session.to_string(),
                segment: Some(seg.path.clone()),
                offset: off.map(|o| o + seg.base()),
                message: msg,
            })
        };
        let mut prev_chain: ChainValue = [0; 32];
        let mut expected_seq = 0u64;
        let mut stream_end = None;
        // Whether the previous segment was read to its end, so that the link to the next
        // one can be checked (after damage, it would only repeat the same error).
        let mut link_known = true;
        for (i, (seg, scan)) in segs.iter().zip(scans).enumerate() {
            let scan = scan?;
            // A packed segment is always sealed: never a stream's growing tail.
            let last = i + 1 == n && seg.packed.is_none();
            let path = seg;
            r.segments += 1;
            r.bytes += scan.bytes;
            if let Some(h) = &scan.header {
                let expected = Expected {
                    stream,
                    name_seq: seg.first_seq,
                    index: Some(i as u64),
                    next_seq: link_known.then_some(expected_seq),
                    prev_chain: link_known.then_some(prev_chain),
                };
                for problem in header_problems(h, &expected) {
                    push(&mut r, Severity::Error, path, Some(0), problem);
                }
            }
            // The head reported is the prefix verified before the first error.
            let intact_so_far = !r.findings.iter().any(|f| f.severity == Severity::Error);
            for (off, msg) in &scan.errors {
                push(
                    &mut r,
                    Severity::Error,
                    path,
                    Some(*off as u64),
                    msg.clone(),
                );
            }
            // (A last segment without a whole header yet — a writer creating it — adds
            // nothing: the head stays where the previous segment ended.)
            if intact_so_far && scan.header.is_some() {
                r.next_seq = scan.next_seq;
                r.chain = scan.chain;
            }
            r.batches += scan.batches;
            r.events += scan.events;
            for (k, c) in scan.by_kind.iter() {
                r.by_kind.add(k, c);
            }
            prev_chain = scan.chain;
            expected_seq = scan.next_seq;
            stream_end = Some((seg.first_seq, scan.data_len));
            link_known = matches!(
                scan.end,
                Some(SegmentEnd::Sealed { .. } | SegmentEnd::Open { .. })
            );
            match &scan.end {
                Some(SegmentEnd::Sealed { .. }) => r.sealed_segments += 1,
                Some(SegmentEnd::Open { len }) if last => r.free_bytes += scan.bytes - *len as u64,
                Some(SegmentEnd::Open { len }) => push(
                    &mut r,
                    Severity::Error,
                    path,
                    Some(*len as u64),
                    "segment is not sealed, but a later segment exists".into(),
                ),
                Some(SegmentEnd::Damaged(d)) if last && d.class == DamageClass::Uncommitted => {
                    push(
                        &mut r,
                        Severity::Warning,
                        path,
                        Some(d.valid_len as u64),
                        format!(
                            "{} uncommitted bytes at the tail ({}): a write in progress or a torn write, cut by the next writer",
                            scan.bytes - d.valid_len as u64,
                            d.error
                        ),
                    )
                }
                Some(SegmentEnd::Damaged(d)) => push(
                    &mut r,
                    Severity::Error,
                    path,
                    Some(d.error.offset() as u64),
                    match d.class {
                        DamageClass::Corruption => d.error.to_string(),
                        DamageClass::Uncommitted => {
                            format!("{} in a segment that is not the last one", d.error)
                        }
                    },
                ),
                None => {}
            }
        }
        // Committed events removed from the end (a last segment deleted, committed
        // bytes cut or zeroed) leave a stream that reads well, only shorter than what
        // its writers synced: an error, not a torn tail.
        let intact = !r.findings.iter().any(|f| f.severity == Severity::Error);
        if intact
            && let Some(m) = checkpoint
            && let Some(detail) = m.shortfall(r.next_seq, stream_end)
        {
            r.findings.push(Finding {
                severity: Severity::Error,
                session: session.to_string(),
                segment: Some(
                    self.stream_dir(session)
                        .join(tacho_log_format::segment_file_name(m.segment_first_seq)),
                ),
                offset: None,
                message: format!(
                    "committed events are missing from the end of the stream: {detail}"
                ),
            });
        }
        Ok(r)
    }

    /// Verifies (or counts, without `deep`) every stream of the store.
    pub fn verify_all(&self, deep: bool) -> Result<StoreReport, StoreError> {
        let mut report = StoreReport::default();
        let sessions = self.sessions()?;
        for s in &sessions {
            report.streams.push(self.verify_session(s, deep)?);
        }
        report.store.extend(self.streams_lost(&sessions)?);
        Ok(report)
    }

    /// Sessions whose stream is gone while their lock file's checkpoint says events of
    /// it were committed durably (a stream directory deleted). A session removed by
    /// retention has no lock file (its checkpoint is cleared first); one created after
    /// `listed` was taken is looked for again.
    pub fn streams_lost(&self, listed: &[String]) -> Result<Vec<Finding>, StoreError> {
        let dir = self.root().join("locks");
        let names = match self.vfs.list_dir(&dir) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(StoreError::io(&dir, e)),
        };
        let mut out = Vec::new();
        for name in names {
            let Some(session) = name
                .strip_suffix(".lock")
                .and_then(crate::store::stream_name_from_dir)
            else {
                continue;
            };
            if listed.binary_search(&session).is_ok() {
                continue;
            }
            let Some(m) = self.checkpoint(&session) else {
                continue;
            };
            if let Some(detail) = m.shortfall(0, None)
                && !self.has_session(&session)
            {
                out.push(Finding {
                    severity: Severity::Error,
                    session: session.clone(),
                    segment: Some(self.stream_dir(&session)),
                    offset: None,
                    message: format!("the session's stream is missing: {detail}"),
                });
            }
        }
        Ok(out)
    }
}
