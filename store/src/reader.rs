//! Reading a session's stream without a lock.
//!
//! Readers see a consistent prefix: only batches whose commit frame they have read.
//! They never take the writer's lock, so they never block a writer. Sealed segments are
//! memory-mapped (they never change); the last segment is copied, up to the length seen
//! when it was opened, because a writer may truncate a torn tail of it, and a truncated
//! mapping would kill the reader with SIGBUS.

use std::path::PathBuf;

use tacho_log_format::{ChainValue, DamageClass, ScanLimits, Scanner, SegmentEnd, StreamId};
use tacho_schema::{Event, EventBody, EventView, SchemaError};

use crate::link::{Expected, header_problems};
use crate::store::{Store, StoreError};

/// An event with its position in the session's stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: u64,
    pub event: Event,
}

/// How a read ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadEnd {
    /// Number of events in the stream (the next sequence number).
    pub next_seq: u64,
    /// The chain value after the last committed batch.
    pub head: ChainValue,
    /// Bytes after the last committed batch that were not read: a batch being written
    /// right now, or a torn tail that the next writer will cut.
    pub uncommitted_bytes: u64,
}

/// How much of a first segment [`Store::first_event`] reads at first.
const FIRST_EVENT_READ: u64 = 4 * 1024;

/// One segment of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Its file, or the pack that holds it.
    pub path: PathBuf,
    pub first_seq: u64,
    /// For a packed segment: its offset and length in the pack.
    pub packed: Option<(u64, u64)>,
}

impl Store {
    /// The segment files of a session in sequence order.
    pub fn segments(&self, session: &str) -> Result<Vec<SegmentInfo>, StoreError> {
        Ok(self
            .segment_files(session)?
            .into_iter()
            .map(|s| SegmentInfo {
                packed: s.range(),
                path: s.path,
                first_seq: s.first_seq,
            })
            .collect())
    }

    /// The chain value after the committed batch whose last event is `next_seq - 1`
    /// (zeros for 0): what a projection built up to `next_seq` records, so that it can
    /// later check that the log still holds the events it was built from. `None` when
    /// `next_seq` is not at the end of a committed batch.
    pub fn head_at(&self, session: &str, next_seq: u64) -> Result<Option<ChainValue>, StoreError> {
        if next_seq == 0 {
            return Ok(Some([0; 32]));
        }
        let segs = self.segment_files(session)?;
        let Some(i) = segs.iter().rposition(|s| s.first_seq < next_seq) else {
            return Ok(None);
        };
        let bytes = self.read_segment(&segs[i], i + 1 < segs.len())?;
        let mut scan = Scanner::new(
            &bytes,
            ScanLimits {
                verify_chain: false,
            },
        );
        while let Some(batch) = scan.next_batch() {
            let last = batch.first_seq + batch.events.len() as u64 - 1;
            if last + 1 == next_seq {
                return Ok(Some(batch.chain));
            }
            if last + 1 > next_seq {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// The first event of `session` (its `session.start`), reading only the start of
    /// its first segment. `None` when the session has no committed event.
    pub fn first_event(&self, session: &str) -> Result<Option<Event>, StoreError> {
        let segs = self.segment_files(session)?;
        let Some(seg) = segs.first() else {
            return Ok(None);
        };
        // The first batch is near the start: a prefix of the file is read, longer until
        // the batch is whole in it (a session.start is a few hundred bytes), never the
        // whole of a long session's first segment.
        let mut want = FIRST_EVENT_READ;
        loop {
            let (bytes, whole) = match &seg.packed {
                None => {
                    let b = self
                        .vfs
                        .read_range(&seg.path, 0, want)
                        .map_err(|e| StoreError::io(&seg.path, e))?;
                    let whole = (b.len() as u64) < want;
                    (b, whole)
                }
                Some(_) => (self.read_segment(seg, true)?, true),
            };
            let mut scan = Scanner::new(
                &bytes,
                ScanLimits {
                    verify_chain: false,
                },
            );
            let Some(batch) = scan.next_batch() else {
                if whole {
                    return Ok(None);
                }
                want = want.saturating_mul(4);
                continue;
            };
            let Some(frame) = batch.events.first() else {
                return Ok(None);
            };
            let h = &frame.header;
            let body = EventBody::decode(h.kind, h.kind_version, frame.payload).map_err(|e| {
                StoreError::Corrupt {
                    path: seg.path.clone(),
                    offset: seg.base() + frame.offset as u64,
                    detail: e.to_string(),
                }
            })?;
            return Ok(Some(Event {
                session: session.to_string(),
                time_unix_ns: h.time_unix_ns,
                body,
            }));
        }
    }

    /// Calls `f` with every committed event of `session`, in order.
    pub fn read_session(
        &self,
        session: &str,
        f: impl FnMut(StoredEvent),
    ) -> Result<ReadEnd, StoreError> {
        self.read_session_from(session, 0, f)
    }

    /// Calls `f` with every committed event of `session` whose sequence number is at
    /// least `from_seq`. Segments that end before `from_seq` are not read at all, so
    /// catching up costs time proportional to what is new.
    pub fn read_session_from(
        &self,
        session: &str,
        from_seq: u64,
        mut f: impl FnMut(StoredEvent),
    ) -> Result<ReadEnd, StoreError> {
        self.read_frames(
            session,
            from_seq,
            |seq, time_unix_ns, kind, version, payload| {
                let body = EventBody::decode(kind, version, payload)?;
                f(StoredEvent {
                    seq,
                    event: Event {
                        session: session.to_string(),
                        time_unix_ns,
                        body,
                    },
                });
                Ok(())
            },
        )
    }

    /// Like [`Store::read_session_from`], but hands out borrowed views of the payloads,
    /// validated in place: nothing is copied or allocated per event. This is how
    /// projections are built from the log.
    pub fn read_session_views(
        &self,
        session: &str,
        from_seq: u64,
        mut f: impl FnMut(u64, i64, &EventView<'_>),
    ) -> Result<ReadEnd, StoreError> {
        self.read_frames(
            session,
            from_seq,
            |seq, time_unix_ns, kind, version, payload| {
                EventView::visit(kind, version, payload, |v| f(seq, time_unix_ns, v))
            },
        )
    }

    /// The reader behind both: every committed event frame from `from_seq` on, as
    /// (seq, time, kind, kind version, payload). A payload `f` cannot decode is
    /// corruption at that frame.
    fn read_frames(
        &self,
        session: &str,
        from_seq: u64,
        mut f: impl FnMut(u64, i64, u16, u16, &[u8]) -> Result<(), SchemaError>,
    ) -> Result<ReadEnd, StoreError> {
        let segs = self.segment_files(session)?;
        let stream = StreamId::of_name(session);
        let start = segs
            .iter()
            .rposition(|s| s.first_seq <= from_seq)
            .unwrap_or(0);
        let mut end = ReadEnd {
            next_seq: segs.get(start).map_or(0, |s| s.first_seq),
            head: [0; 32],
            uncommitted_bytes: 0,
        };
        let mut prev_chain: Option<ChainValue> = None;
        for (i, seg) in segs.iter().enumerate().skip(start) {
            // A packed segment is never the growing tail of its stream.
            let last = i + 1 == segs.len() && seg.packed.is_none();
            let mut bytes = self.read_segment(seg, !last)?;
            let corrupt = |offset: usize, detail: String| StoreError::Corrupt {
                path: seg.path.clone(),
                offset: seg.base() + offset as u64,
                detail,
            };
            // Every batch read is checked against its chain step: queries answer only
            // from verified data, and a payload forged with a recomputed checksum is
            // refused at its offset instead of shown.
            let limits = ScanLimits { verify_chain: true };
            // Where to go on after reading the open segment again (a write was in
            // progress where it looked damaged): the end of the last batch handed out.
            let mut resume: Option<crate::store::Resume> = None;
            let mut rereads = 0;
            let scan = loop {
                let resumed = resume.and_then(|(pos, chain, next, events)| {
                    Scanner::resume_at(&bytes, limits, pos, chain, next, events)
                });
                let fresh = resumed.is_none();
                if let Some((pos, _, _, events)) = resume
                    && fresh
                    && events > 0
                {
                    // (Committed bytes are never cut: the file was replaced or damaged.)
                    return Err(corrupt(
                        pos,
                        "the segment lost committed bytes while it was read".into(),
                    ));
                }
                let mut scan = resumed.unwrap_or_else(|| Scanner::new(&bytes, limits));
                if fresh && let Some(h) = scan.header() {
                    let expected = Expected {
                        stream,
                        name_seq: seg.first_seq,
                        index: Some(i as u64),
                        next_seq: Some(end.next_seq),
                        prev_chain,
                    };
                    if let Some(problem) = header_problems(h, &expected).into_iter().next() {
                        return Err(corrupt(0, problem));
                    }
                }
                while let Some(batch) = scan.next_batch() {
                    for frame in batch.events {
                        let seq = frame.header.seq;
                        if seq < from_seq {
                            continue;
                        }
                        let h = &frame.header;
                        f(seq, h.time_unix_ns, h.kind, h.kind_version, frame.payload)
                            .map_err(|e| corrupt(frame.offset, e.to_string()))?;
                    }
                }
                if let Some((again, at)) = self.reread_torn(seg, &bytes, &scan, last, rereads)? {
                    bytes = again;
                    resume = Some(at);
                    rereads += 1;
                    continue;
                }
                break scan;
            };
            // (A last segment without a whole header yet — a writer creating it — adds
            // nothing: the stream ends where the previous segment did.)
            if scan.header().is_some() {
                end.next_seq = scan.next_seq();
                end.head = scan.chain();
            }
            prev_chain = Some(scan.chain());
            match scan.end() {
                Some(SegmentEnd::Sealed { .. }) => {}
                Some(SegmentEnd::Open { .. }) if last => {}
                Some(SegmentEnd::Damaged(d)) if last && d.class == DamageClass::Uncommitted => {
                    end.uncommitted_bytes = (bytes.len() - d.valid_len) as u64;
                }
                Some(SegmentEnd::Damaged(d)) => {
                    return Err(corrupt(d.error.offset(), d.error.to_string()));
                }
                Some(SegmentEnd::Open { len }) => {
                    return Err(corrupt(
                        *len,
                        "segment is not sealed, but a later segment exists".into(),
                    ));
                }
                None => return Err(corrupt(0, "scan did not finish".into())),
            }
        }
        Ok(end)
    }
}
