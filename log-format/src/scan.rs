//! Walking a segment: frames, batches, sequence numbers, the chain, and where it ends.
//!
//! The scanner is pure: it takes the bytes of one segment and reports the committed
//! batches it finds and how the segment ends. Deciding what to do about a damaged end
//! (truncate a torn tail, or refuse to go on) is the engine's business; the scanner
//! only classifies the damage, by the one fact that separates the two cases: whether
//! any committed frame follows it.

use crate::FRAME_ALIGN;
use crate::chain::{ChainValue, chain_step};
use crate::frame::{
    COMMIT_PAYLOAD_LEN, CommitPayload, FRAME_HEADER_LEN, FrameError, FrameRef, FrameType,
    SealPayload, decode_frame,
};
use crate::segment::{HeaderError, SEGMENT_HEADER_LEN, SegmentHeader};

/// Limits a scanner enforces beyond the format's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanLimits {
    /// Recompute every chain step (verification) or trust the stored chain values
    /// (the writer's quick structural scan on open, which still checks every checksum).
    pub verify_chain: bool,
}

/// Everything that can be wrong at a point in a segment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    #[error("segment header: {0}")]
    Header(HeaderError),
    #[error("frame at offset {offset}: {error}")]
    Frame { offset: usize, error: FrameError },
    #[error("event at offset {offset} has sequence number {found}, expected {expected}")]
    UnexpectedSeq {
        offset: usize,
        expected: u64,
        found: u64,
    },
    #[error("commit frame at offset {offset} ends an empty batch")]
    EmptyBatch { offset: usize },
    #[error("commit frame at offset {offset}: {what} is {found}, expected {expected}")]
    CommitMismatch {
        offset: usize,
        what: &'static str,
        expected: u64,
        found: u64,
    },
    #[error(
        "hash chain broken at the commit frame at offset {offset}: stored {}, computed {} (bytes of this batch were changed)",
        faster_hex::hex_string(stored),
        faster_hex::hex_string(computed)
    )]
    ChainMismatch {
        offset: usize,
        stored: ChainValue,
        computed: ChainValue,
    },
    #[error("seal frame at offset {offset}: {what} is {found}, expected {expected}")]
    SealMismatch {
        offset: usize,
        what: &'static str,
        expected: u64,
        found: u64,
    },
    #[error("seal frame at offset {offset} does not carry the segment's chain value")]
    SealChainMismatch { offset: usize },
    #[error("{len} bytes follow the seal frame at offset {offset}")]
    DataAfterSeal { offset: usize, len: usize },
    #[error("{events} event(s) from offset {offset} on are not followed by a commit frame")]
    UncommittedBatch { offset: usize, events: usize },
}

impl ScanError {
    /// Offset in the segment where the problem is.
    pub fn offset(&self) -> usize {
        match self {
            ScanError::Header(_) => 0,
            ScanError::Frame { offset, .. }
            | ScanError::UnexpectedSeq { offset, .. }
            | ScanError::EmptyBatch { offset }
            | ScanError::CommitMismatch { offset, .. }
            | ScanError::ChainMismatch { offset, .. }
            | ScanError::SealMismatch { offset, .. }
            | ScanError::SealChainMismatch { offset }
            | ScanError::DataAfterSeal { offset, .. }
            | ScanError::UncommittedBatch { offset, .. } => *offset,
        }
    }
}

/// Whether committed data follows a damaged spot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageClass {
    /// No valid commit or seal frame follows: the damaged bytes were never
    /// acknowledged. At the end of a stream's last segment this is a torn write.
    Uncommitted,
    /// A valid commit or seal frame follows, so committed data is damaged. Always an
    /// error, wherever it is.
    Corruption,
}

/// Where and why a segment stops being valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Length of the valid prefix: the end of the last good commit frame, or of the
    /// header when no batch was committed (0 when the header itself is bad).
    pub valid_len: usize,
    pub class: DamageClass,
    pub error: ScanError,
}

/// How a segment ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SegmentEnd {
    /// An open segment: its data ends at `len`, right after a commit frame (or the
    /// header); anything after `len` is zeros (free space).
    Open { len: usize },
    /// The segment ends with a valid seal frame.
    Sealed { seal: SealPayload, len: usize },
    /// The segment is damaged from some point on.
    Damaged(Damage),
}

/// A committed batch, as the scanner hands it out.
#[derive(Debug)]
pub struct Batch<'s, 'a> {
    pub first_seq: u64,
    /// Offset of the batch's commit frame.
    pub commit_offset: usize,
    /// The chain value after the batch.
    pub chain: ChainValue,
    /// The batch's event frames, in order.
    pub events: &'s [FrameRef<'a>],
}

/// Looks for a valid commit or seal frame at any aligned offset from `from` on.
///
/// A damaged spot followed by one is corruption; a damaged spot followed by none is an
/// unacknowledged write. Only 8-byte aligned offsets can hold frames, and commit and
/// seal frames have a fixed length and type, so the search rejects almost every offset
/// after reading five bytes.
pub fn find_commit_after(buf: &[u8], from: usize) -> Option<usize> {
    let want_len = (FRAME_HEADER_LEN + COMMIT_PAYLOAD_LEN) as u32;
    let mut off = from.div_ceil(FRAME_ALIGN) * FRAME_ALIGN;
    while off + FRAME_HEADER_LEN + COMMIT_PAYLOAD_LEN <= buf.len() {
        let len = u32::from_le_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]]);
        let ty = buf[off + 8];
        if len == want_len
            && (ty == FrameType::Commit as u8 || ty == FrameType::Seal as u8)
            && decode_frame(buf, off).is_ok()
        {
            return Some(off);
        }
        off += FRAME_ALIGN;
    }
    None
}

/// Walks the frames of one segment.
#[derive(Debug)]
pub struct Scanner<'a> {
    buf: &'a [u8],
    limits: ScanLimits,
    header: Option<SegmentHeader>,
    pos: usize,
    /// End of the last committed batch (or of the header).
    valid_len: usize,
    chain: ChainValue,
    next_seq: u64,
    events: u64,
    frames: Vec<FrameRef<'a>>,
    end: Option<SegmentEnd>,
}

impl<'a> Scanner<'a> {
    /// Starts scanning `buf`, the whole content of a segment file.
    pub fn new(buf: &'a [u8], limits: ScanLimits) -> Self {
        let mut s = Scanner {
            buf,
            limits,
            header: None,
            pos: 0,
            valid_len: 0,
            chain: [0; 32],
            next_seq: 0,
            events: 0,
            frames: Vec::new(),
            end: None,
        };
        match SegmentHeader::decode(buf) {
            Ok(h) => {
                s.chain = h.prev_chain;
                s.next_seq = h.first_seq;
                s.pos = SEGMENT_HEADER_LEN;
                s.valid_len = SEGMENT_HEADER_LEN;
                s.header = Some(h);
            }
            Err(e) => s.fail(0, ScanError::Header(e)),
        }
        s
    }

    /// Starts scanning `buf` at `pos`: the end of a committed batch that a writer
    /// verified before, with the stream's state after it (`chain`, `next_seq`, and the
    /// segment's `events` so far). The header is decoded again; the bytes between it and
    /// `pos` are not looked at. `None` when the header is bad or `pos` cannot be the end
    /// of a batch (not past the header, not aligned, past the end) — scan from the
    /// start then.
    pub fn resume_at(
        buf: &'a [u8],
        limits: ScanLimits,
        pos: usize,
        chain: ChainValue,
        next_seq: u64,
        events: u64,
    ) -> Option<Self> {
        let mut s = Scanner::new(buf, limits);
        let fits = s.header.is_some()
            && s.end.is_none()
            && pos > SEGMENT_HEADER_LEN
            && pos.is_multiple_of(FRAME_ALIGN)
            && pos <= buf.len()
            && events > 0;
        if !fits {
            return None;
        }
        s.pos = pos;
        s.valid_len = pos;
        s.chain = chain;
        s.next_seq = next_seq;
        s.events = events;
        Some(s)
    }

    /// The decoded header, when it is valid.
    pub fn header(&self) -> Option<&SegmentHeader> {
        self.header.as_ref()
    }

    /// The chain value after the last committed batch so far.
    pub fn chain(&self) -> ChainValue {
        self.chain
    }

    /// The sequence number the next event must have.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Events in the committed batches so far.
    pub fn event_count(&self) -> u64 {
        self.events
    }

    /// End of the last committed batch so far.
    pub fn valid_len(&self) -> usize {
        self.valid_len
    }

    /// How the segment ends; `Some` once [`Scanner::next_batch`] has returned `None`.
    pub fn end(&self) -> Option<&SegmentEnd> {
        self.end.as_ref()
    }

    fn fail(&mut self, damage_at: usize, error: ScanError) {
        let class = match error {
            // A commit frame that is itself valid but disagrees with the data it covers
            // can only mean that committed bytes changed.
            ScanError::ChainMismatch { .. }
            | ScanError::CommitMismatch { .. }
            | ScanError::EmptyBatch { .. }
            | ScanError::SealMismatch { .. }
            | ScanError::SealChainMismatch { .. }
            | ScanError::DataAfterSeal { .. } => DamageClass::Corruption,
            _ => match find_commit_after(self.buf, damage_at + 1) {
                Some(_) => DamageClass::Corruption,
                None => DamageClass::Uncommitted,
            },
        };
        self.frames.clear();
        self.end = Some(SegmentEnd::Damaged(Damage {
            valid_len: self.valid_len,
            class,
            error,
        }));
    }

    /// The next committed batch, or `None` at the end of the segment (see
    /// [`Scanner::end`]). Events of a batch are only handed out once its commit frame
    /// has been found and checked.
    pub fn next_batch(&mut self) -> Option<Batch<'_, 'a>> {
        if self.end.is_some() {
            return None;
        }
        self.frames.clear();
        let batch_first_seq = self.next_seq;
        let mut seq = self.next_seq;
        loop {
            if self.pos == self.buf.len() {
                if self.frames.is_empty() {
                    self.end = Some(SegmentEnd::Open { len: self.pos });
                } else {
                    let offset = self.frames[0].offset;
                    let events = self.frames.len();
                    self.fail(offset, ScanError::UncommittedBatch { offset, events });
                }
                return None;
            }
            let offset = self.pos;
            let frame = match decode_frame(self.buf, offset) {
                Ok(f) => f,
                Err(FrameError::Zeroed)
                    if self.frames.is_empty() && self.buf[offset..].iter().all(|&b| b == 0) =>
                {
                    // Zeros after the last commit are free space: writers extend an
                    // open segment with zeros ahead of time (SPEC.md §4.1).
                    self.end = Some(SegmentEnd::Open { len: offset });
                    return None;
                }
                Err(error) => {
                    self.fail(offset, ScanError::Frame { offset, error });
                    return None;
                }
            };
            match frame.header.frame_type {
                FrameType::Event => {
                    if frame.header.seq != seq {
                        self.fail(
                            offset,
                            ScanError::UnexpectedSeq {
                                offset,
                                expected: seq,
                                found: frame.header.seq,
                            },
                        );
                        return None;
                    }
                    seq += 1;
                    self.pos = frame.end();
                    self.frames.push(frame);
                }
                FrameType::Commit => {
                    let Some(c) = CommitPayload::decode(frame.payload) else {
                        self.fail(offset, ScanError::EmptyBatch { offset });
                        return None;
                    };
                    if let Err(e) = self.check_commit(&frame, &c, batch_first_seq) {
                        self.fail(offset, e);
                        return None;
                    }
                    self.chain = c.chain;
                    self.next_seq = seq;
                    self.events += c.event_count;
                    self.pos = frame.end();
                    self.valid_len = self.pos;
                    return Some(Batch {
                        first_seq: batch_first_seq,
                        commit_offset: offset,
                        chain: c.chain,
                        events: &self.frames,
                    });
                }
                FrameType::Seal => {
                    if !self.frames.is_empty() {
                        let first = self.frames[0].offset;
                        let events = self.frames.len();
                        self.fail(
                            first,
                            ScanError::UncommittedBatch {
                                offset: first,
                                events,
                            },
                        );
                        return None;
                    }
                    match self.check_seal(&frame) {
                        Ok(seal) => {
                            self.end = Some(SegmentEnd::Sealed {
                                seal,
                                len: frame.end(),
                            });
                        }
                        Err(e) => self.fail(offset, e),
                    }
                    return None;
                }
            }
        }
    }

    fn check_commit(
        &self,
        frame: &FrameRef<'_>,
        c: &CommitPayload,
        batch_first_seq: u64,
    ) -> Result<(), ScanError> {
        let offset = frame.offset;
        let count = self.frames.len() as u64;
        if count == 0 {
            return Err(ScanError::EmptyBatch { offset });
        }
        let mismatch = |what, expected, found| {
            if expected == found {
                Ok(())
            } else {
                Err(ScanError::CommitMismatch {
                    offset,
                    what,
                    expected,
                    found,
                })
            }
        };
        mismatch("first_seq", batch_first_seq, c.first_seq)?;
        mismatch("event_count", count, c.event_count)?;
        mismatch("seq", batch_first_seq + count - 1, frame.header.seq)?;
        let span_start = self.valid_len_span_start();
        mismatch("span_len", (offset - span_start) as u64, c.span_len)?;
        if self.limits.verify_chain {
            let computed = chain_step(&self.chain, &self.buf[span_start..offset]);
            if computed != c.chain {
                return Err(ScanError::ChainMismatch {
                    offset,
                    stored: c.chain,
                    computed,
                });
            }
        }
        Ok(())
    }

    /// The span of a batch starts where the previous commit frame ended, or at the very
    /// start of the segment for its first batch (so the header is chained too).
    fn valid_len_span_start(&self) -> usize {
        if self.valid_len == SEGMENT_HEADER_LEN && self.events == 0 {
            0
        } else {
            self.valid_len
        }
    }

    fn check_seal(&self, frame: &FrameRef<'_>) -> Result<SealPayload, ScanError> {
        let offset = frame.offset;
        let s = SealPayload::decode(frame.payload).ok_or(ScanError::SealMismatch {
            offset,
            what: "payload length",
            expected: 56,
            found: frame.payload.len() as u64,
        })?;
        let first_seq = self.header.as_ref().map_or(0, |h| h.first_seq);
        let mismatch = |what, expected, found| {
            if expected == found {
                Ok(())
            } else {
                Err(ScanError::SealMismatch {
                    offset,
                    what,
                    expected,
                    found,
                })
            }
        };
        mismatch("first_seq", first_seq, s.first_seq)?;
        mismatch("event_count", self.events, s.event_count)?;
        mismatch("seq", self.next_seq.wrapping_sub(1), frame.header.seq)?;
        mismatch("sealed_len", offset as u64, s.sealed_len)?;
        if s.chain != self.chain {
            return Err(ScanError::SealChainMismatch { offset });
        }
        if frame.end() != self.buf.len() {
            return Err(ScanError::DataAfterSeal {
                offset: frame.end(),
                len: self.buf.len() - frame.end(),
            });
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{encode_commit_frame, encode_event_frame, encode_seal_frame};
    use crate::segment::StreamId;

    const VERIFY: ScanLimits = ScanLimits { verify_chain: true };

    /// Builds a segment with the given batch sizes, the way the engine writes one.
    fn build(batches: &[usize], seal: bool) -> Vec<u8> {
        let header = SegmentHeader {
            format_version: 1,
            stream: StreamId::of_name("s"),
            segment_index: 0,
            first_seq: 0,
            prev_chain: [0; 32],
            first_time_unix_ns: 0,
        };
        let mut buf = header.encode().to_vec();
        let mut chain = [0u8; 32];
        let mut seq = 0u64;
        let mut span_start = 0usize;
        for &n in batches {
            let first = seq;
            for _ in 0..n {
                encode_event_frame(&mut buf, 1, 1, seq, seq as i64 * 10, &[seq as u8; 13]);
                seq += 1;
            }
            chain = chain_step(&chain, &buf[span_start..]);
            let span_len = (buf.len() - span_start) as u64;
            encode_commit_frame(
                &mut buf,
                &CommitPayload {
                    chain,
                    first_seq: first,
                    event_count: n as u64,
                    span_len,
                },
            );
            span_start = buf.len();
        }
        if seal {
            let sealed_len = buf.len() as u64;
            encode_seal_frame(
                &mut buf,
                &SealPayload {
                    chain,
                    first_seq: 0,
                    event_count: seq,
                    sealed_len,
                },
            );
        }
        buf
    }

    fn scan_all(buf: &[u8]) -> (Vec<u64>, SegmentEnd) {
        let mut s = Scanner::new(buf, VERIFY);
        let mut seqs = Vec::new();
        while let Some(b) = s.next_batch() {
            seqs.extend(b.events.iter().map(|f| f.header.seq));
        }
        (seqs, s.end().cloned().unwrap())
    }

    #[test]
    fn clean_open_and_sealed_segments() {
        let (seqs, end) = scan_all(&build(&[1, 3, 2], false));
        assert_eq!(seqs, vec![0, 1, 2, 3, 4, 5]);
        assert!(matches!(end, SegmentEnd::Open { .. }));
        let (seqs, end) = scan_all(&build(&[2, 2], true));
        assert_eq!(seqs.len(), 4);
        assert!(matches!(end, SegmentEnd::Sealed { .. }));
    }

    #[test]
    fn zeros_after_the_last_commit_are_free_space() {
        let mut buf = build(&[1, 2], false);
        let data_len = buf.len();
        buf.resize(data_len + 5000, 0);
        let (seqs, end) = scan_all(&buf);
        assert_eq!(seqs.len(), 3);
        assert_eq!(end, SegmentEnd::Open { len: data_len });
        // A non-zero byte in the free space is not free space.
        buf[data_len + 4000] = 1;
        let (_, end) = scan_all(&buf);
        assert!(matches!(
            end,
            SegmentEnd::Damaged(Damage {
                class: DamageClass::Uncommitted,
                ..
            })
        ));
    }

    #[test]
    fn every_truncation_is_uncommitted_and_keeps_the_committed_prefix() {
        let full = build(&[1, 3, 2], false);
        let (all, _) = scan_all(&full);
        for cut in 0..full.len() {
            let (seqs, end) = scan_all(&full[..cut]);
            assert!(all.starts_with(&seqs));
            match end {
                SegmentEnd::Open { len } => assert_eq!(len, cut),
                SegmentEnd::Damaged(d) => {
                    assert_eq!(d.class, DamageClass::Uncommitted, "cut {cut}: {d:?}");
                    assert!(d.valid_len <= cut);
                }
                SegmentEnd::Sealed { .. } => panic!("cut {cut} sealed"),
            }
        }
    }

    #[test]
    fn a_bit_flip_in_committed_data_is_corruption() {
        let full = build(&[2, 2, 2], true);
        for bit in 0..full.len() * 8 {
            let mut b = full.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            let (_, end) = scan_all(&b);
            match end {
                SegmentEnd::Damaged(d) => {
                    // Damage to the seal frame itself is the one spot with no committed
                    // frame after it; everything else is covered by a later commit.
                    let in_seal = bit / 8 >= full.len() - 88;
                    if !in_seal {
                        assert_eq!(d.class, DamageClass::Corruption, "bit {bit}: {d:?}");
                    }
                }
                other => panic!("bit {bit} flip not detected: {other:?}"),
            }
        }
    }

    #[test]
    fn an_edit_with_recomputed_crc_breaks_the_chain() {
        let mut full = build(&[2, 2], false);
        // Change a payload byte of the first event, then fix up its CRC.
        let off = SEGMENT_HEADER_LEN;
        full[off + 32] ^= 0xff;
        let len = u32::from_le_bytes(full[off..off + 4].try_into().unwrap()) as usize;
        let mut h = crc32fast::Hasher::new();
        h.update(&full[off..off + 4]);
        h.update(&full[off + 8..off + len]);
        full[off + 4..off + 8].copy_from_slice(&h.finalize().to_le_bytes());
        let (_, end) = scan_all(&full);
        let SegmentEnd::Damaged(d) = end else {
            panic!("edit not detected")
        };
        assert!(matches!(d.error, ScanError::ChainMismatch { .. }), "{d:?}");
        assert_eq!(d.class, DamageClass::Corruption);
    }

    #[test]
    fn structural_scan_trusts_stored_chain_values() {
        let mut full = build(&[2], false);
        let n = full.len();
        // Corrupt the chain value inside the commit payload and fix its CRC.
        let commit = n - 88;
        full[commit + 32] ^= 1;
        let mut h = crc32fast::Hasher::new();
        h.update(&full[commit..commit + 4]);
        h.update(&full[commit + 8..commit + 88]);
        full[commit + 4..commit + 8].copy_from_slice(&h.finalize().to_le_bytes());
        let mut s = Scanner::new(
            &full,
            ScanLimits {
                verify_chain: false,
            },
        );
        assert!(s.next_batch().is_some());
        let mut s = Scanner::new(&full, VERIFY);
        assert!(s.next_batch().is_none());
    }
}
