//! Frames: the 32-byte frame header, event frames, commit frames and seal frames.

use crate::FRAME_ALIGN;
use crate::chain::ChainValue;
use crate::segment::arr;

/// Size of a frame header in bytes.
pub const FRAME_HEADER_LEN: usize = 32;
/// The largest payload one frame may carry (128 MiB). Tool output is stored whole, so
/// this is generous; an event larger than this is refused when appended, never cut.
pub const FRAME_PAYLOAD_BYTES_MAX: u32 = 128 * 1024 * 1024;
/// Payload size of a commit frame.
pub const COMMIT_PAYLOAD_LEN: usize = 56;
/// Payload size of a seal frame.
pub const SEAL_PAYLOAD_LEN: usize = 56;

const _: () = assert!(FRAME_PAYLOAD_BYTES_MAX as u64 + FRAME_HEADER_LEN as u64 <= u32::MAX as u64);

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameType {
    /// One typed event; the payload is the event's rkyv encoding.
    Event = 1,
    /// Ends a batch and advances the hash chain.
    Commit = 2,
    /// The last frame of a finished segment.
    Seal = 3,
}

impl FrameType {
    fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(FrameType::Event),
            2 => Some(FrameType::Commit),
            3 => Some(FrameType::Seal),
            _ => None,
        }
    }
}

/// The fields of a frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Header plus payload, without padding.
    pub frame_len: u32,
    pub crc: u32,
    pub frame_type: FrameType,
    /// The event kind (0 for commit and seal frames).
    pub kind: u16,
    /// The schema version of the event kind's payload (0 for commit and seal frames).
    pub kind_version: u16,
    /// Event: its sequence number. Commit and seal: the last event sequence number covered.
    pub seq: u64,
    /// Event: its time in nanoseconds since the Unix epoch. Commit and seal: 0.
    pub time_unix_ns: i64,
}

/// A decoded frame that borrows its payload from the segment bytes.
#[derive(Debug, Clone, Copy)]
pub struct FrameRef<'a> {
    /// Offset of the frame from the start of the segment.
    pub offset: usize,
    pub header: FrameHeader,
    pub payload: &'a [u8],
}

impl FrameRef<'_> {
    /// Offset of the next frame.
    pub fn end(&self) -> usize {
        self.offset + padded_len(self.header.frame_len as usize)
    }
}

/// Why the bytes at an offset are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("frame offset {offset} is not a multiple of {FRAME_ALIGN}")]
    Misaligned { offset: usize },
    #[error("incomplete frame: {need} bytes needed, {have} present")]
    Truncated { need: usize, have: usize },
    #[error("zero-filled bytes where a frame should start")]
    Zeroed,
    #[error("frame length {len} is out of range")]
    BadLength { len: u32 },
    #[error("frame checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("unknown frame type {found}")]
    BadType { found: u8 },
    #[error("frame field `{field}` has an invalid value {value}")]
    BadField { field: &'static str, value: u64 },
    #[error("padding after the frame is not zero")]
    NonZeroPadding,
}

/// `len` rounded up to the frame alignment.
pub const fn padded_len(len: usize) -> usize {
    len.div_ceil(FRAME_ALIGN) * FRAME_ALIGN
}

fn frame_crc(frame: &[u8]) -> u32 {
    // The checksum covers the length field and everything after the checksum field, so
    // a damaged length is caught as surely as a damaged payload.
    let mut h = crc32fast::Hasher::new();
    h.update(&frame[0..4]);
    h.update(&frame[8..]);
    h.finalize()
}

fn encode_frame(
    out: &mut Vec<u8>,
    frame_type: FrameType,
    kind: u16,
    kind_version: u16,
    seq: u64,
    time_unix_ns: i64,
    payload: &[u8],
) {
    let start = out.len();
    let frame_len = FRAME_HEADER_LEN + payload.len();
    out.extend_from_slice(&(frame_len as u32).to_le_bytes());
    out.extend_from_slice(&[0u8; 4]);
    out.push(frame_type as u8);
    out.push(0);
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&kind_version.to_le_bytes());
    out.extend_from_slice(&[0u8; 2]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&time_unix_ns.to_le_bytes());
    out.extend_from_slice(payload);
    let crc = frame_crc(&out[start..start + frame_len]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    out.resize(start + padded_len(frame_len), 0);
}

/// Appends an event frame to `out`. `out.len()` must be a multiple of [`FRAME_ALIGN`]
/// relative to the segment start. Panics if the payload exceeds
/// [`FRAME_PAYLOAD_BYTES_MAX`]: callers check the limit and return a typed error first.
pub fn encode_event_frame(
    out: &mut Vec<u8>,
    kind: u16,
    kind_version: u16,
    seq: u64,
    time_unix_ns: i64,
    payload: &[u8],
) {
    assert!(payload.len() <= FRAME_PAYLOAD_BYTES_MAX as usize);
    assert!(kind != 0, "event kind 0 is reserved");
    encode_frame(
        out,
        FrameType::Event,
        kind,
        kind_version,
        seq,
        time_unix_ns,
        payload,
    );
}

/// The payload of a commit frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitPayload {
    /// The chain value after this batch.
    pub chain: ChainValue,
    /// Sequence number of the batch's first event.
    pub first_seq: u64,
    /// Number of events in the batch (at least 1).
    pub event_count: u64,
    /// Number of bytes the chain step hashed (the span).
    pub span_len: u64,
}

/// The payload of a seal frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealPayload {
    /// The chain value at the end of the segment: the segment's digest.
    pub chain: ChainValue,
    /// Sequence number of the segment's first event (equals the header's).
    pub first_seq: u64,
    /// Number of events in the segment.
    pub event_count: u64,
    /// Offset of the seal frame, i.e. the segment's length without the seal.
    pub sealed_len: u64,
}

fn encode_chain_payload(chain: &ChainValue, a: u64, b: u64, c: u64) -> [u8; 56] {
    let mut p = [0u8; 56];
    p[0..32].copy_from_slice(chain);
    p[32..40].copy_from_slice(&a.to_le_bytes());
    p[40..48].copy_from_slice(&b.to_le_bytes());
    p[48..56].copy_from_slice(&c.to_le_bytes());
    p
}

/// Appends a commit frame for a batch.
pub fn encode_commit_frame(out: &mut Vec<u8>, c: &CommitPayload) {
    let last_seq = c.first_seq + c.event_count - 1;
    let p = encode_chain_payload(&c.chain, c.first_seq, c.event_count, c.span_len);
    encode_frame(out, FrameType::Commit, 0, 0, last_seq, 0, &p);
}

/// Appends a seal frame.
pub fn encode_seal_frame(out: &mut Vec<u8>, s: &SealPayload) {
    let last_seq = s.first_seq + s.event_count - 1;
    let p = encode_chain_payload(&s.chain, s.first_seq, s.event_count, s.sealed_len);
    encode_frame(out, FrameType::Seal, 0, 0, last_seq, 0, &p);
}

impl CommitPayload {
    /// Decodes a commit payload (the frame has been checked already).
    pub fn decode(p: &[u8]) -> Option<Self> {
        if p.len() != COMMIT_PAYLOAD_LEN {
            return None;
        }
        Some(CommitPayload {
            chain: arr(&p[0..32]),
            first_seq: u64::from_le_bytes(arr(&p[32..40])),
            event_count: u64::from_le_bytes(arr(&p[40..48])),
            span_len: u64::from_le_bytes(arr(&p[48..56])),
        })
    }
}

impl SealPayload {
    /// Decodes a seal payload (the frame has been checked already).
    pub fn decode(p: &[u8]) -> Option<Self> {
        if p.len() != SEAL_PAYLOAD_LEN {
            return None;
        }
        Some(SealPayload {
            chain: arr(&p[0..32]),
            first_seq: u64::from_le_bytes(arr(&p[32..40])),
            event_count: u64::from_le_bytes(arr(&p[40..48])),
            sealed_len: u64::from_le_bytes(arr(&p[48..56])),
        })
    }
}

/// Decodes and checks the frame that starts at `offset` of a segment's bytes.
///
/// Checks: alignment, completeness, length range, checksum, type, reserved fields,
/// the fixed shape of commit and seal frames, and zero padding. It does not check the
/// chain or sequence numbers; the [`crate::Scanner`] does.
pub fn decode_frame(buf: &[u8], offset: usize) -> Result<FrameRef<'_>, FrameError> {
    if !offset.is_multiple_of(FRAME_ALIGN) {
        return Err(FrameError::Misaligned { offset });
    }
    let rest = buf.get(offset..).unwrap_or(&[]);
    if rest.len() < FRAME_HEADER_LEN {
        if rest.iter().all(|&b| b == 0) {
            return Err(FrameError::Zeroed);
        }
        return Err(FrameError::Truncated {
            need: FRAME_HEADER_LEN,
            have: rest.len(),
        });
    }
    let frame_len = u32::from_le_bytes(arr(&rest[0..4]));
    if frame_len == 0 && rest[..FRAME_HEADER_LEN].iter().all(|&b| b == 0) {
        return Err(FrameError::Zeroed);
    }
    if (frame_len as usize) < FRAME_HEADER_LEN
        || frame_len > FRAME_PAYLOAD_BYTES_MAX + FRAME_HEADER_LEN as u32
    {
        return Err(FrameError::BadLength { len: frame_len });
    }
    let padded = padded_len(frame_len as usize);
    if rest.len() < padded {
        return Err(FrameError::Truncated {
            need: padded,
            have: rest.len(),
        });
    }
    let frame = &rest[..frame_len as usize];
    let stored = u32::from_le_bytes(arr(&frame[4..8]));
    let computed = frame_crc(frame);
    if stored != computed {
        return Err(FrameError::CrcMismatch { stored, computed });
    }
    let frame_type = FrameType::from_u8(frame[8]).ok_or(FrameError::BadType { found: frame[8] })?;
    let check_zero = |field: &'static str, v: u64| {
        if v == 0 {
            Ok(())
        } else {
            Err(FrameError::BadField { field, value: v })
        }
    };
    check_zero("flags", u64::from(frame[9]))?;
    check_zero(
        "reserved",
        u64::from(u16::from_le_bytes(arr(&frame[14..16]))),
    )?;
    let header = FrameHeader {
        frame_len,
        crc: stored,
        frame_type,
        kind: u16::from_le_bytes(arr(&frame[10..12])),
        kind_version: u16::from_le_bytes(arr(&frame[12..14])),
        seq: u64::from_le_bytes(arr(&frame[16..24])),
        time_unix_ns: i64::from_le_bytes(arr(&frame[24..32])),
    };
    match frame_type {
        FrameType::Event => {
            if header.kind == 0 {
                return Err(FrameError::BadField {
                    field: "kind",
                    value: 0,
                });
            }
        }
        FrameType::Commit | FrameType::Seal => {
            // Commit and seal frames are fully determined by the data they cover, so
            // that no byte of them can be edited without verification noticing.
            check_zero("kind", u64::from(header.kind))?;
            check_zero("kind_version", u64::from(header.kind_version))?;
            check_zero("time_unix_ns", header.time_unix_ns as u64)?;
            if frame_len as usize != FRAME_HEADER_LEN + COMMIT_PAYLOAD_LEN {
                return Err(FrameError::BadLength { len: frame_len });
            }
        }
    }
    if rest[frame_len as usize..padded].iter().any(|&b| b != 0) {
        return Err(FrameError::NonZeroPadding);
    }
    Ok(FrameRef {
        offset,
        header,
        payload: &frame[FRAME_HEADER_LEN..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_event_frame_bytes() {
        // SPEC.md §"Frames" documents exactly these bytes.
        let mut out = Vec::new();
        encode_event_frame(&mut out, 8, 1, 5, 1_000, b"abc");
        assert_eq!(
            out,
            [
                35, 0, 0, 0, // frame_len = 32 + 3
                0x0b, 0x07, 0x77, 0x26, // crc32 over bytes 0..4 and 8..35 (zlib.crc32 agrees)
                1, 0, // type = event, flags
                8, 0, 1, 0, 0, 0, // kind 8, kind_version 1, reserved
                5, 0, 0, 0, 0, 0, 0, 0, // seq
                0xe8, 3, 0, 0, 0, 0, 0, 0, // time_unix_ns = 1000
                b'a', b'b', b'c', 0, 0, 0, 0, 0, // payload + zero padding to 40
            ]
        );
        let f = decode_frame(&out, 0).unwrap();
        assert_eq!(f.payload, b"abc");
        assert_eq!(f.end(), 40);
    }

    #[test]
    fn every_bit_flip_of_a_frame_is_rejected() {
        let mut out = Vec::new();
        encode_event_frame(&mut out, 3, 1, 77, 123_456, b"payload bytes");
        for bit in 0..out.len() * 8 {
            let mut b = out.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_frame(&b, 0).is_err(), "flip of bit {bit} accepted");
        }
    }

    #[test]
    fn commit_frames_round_trip() {
        let c = CommitPayload {
            chain: [9; 32],
            first_seq: 10,
            event_count: 3,
            span_len: 999,
        };
        let mut out = Vec::new();
        encode_commit_frame(&mut out, &c);
        let f = decode_frame(&out, 0).unwrap();
        assert_eq!(f.header.frame_type, FrameType::Commit);
        assert_eq!(f.header.seq, 12);
        assert_eq!(CommitPayload::decode(f.payload), Some(c));
    }

    #[test]
    fn zero_and_short_input() {
        assert_eq!(decode_frame(&[0u8; 64], 0).unwrap_err(), FrameError::Zeroed);
        assert_eq!(decode_frame(&[0u8; 7], 0).unwrap_err(), FrameError::Zeroed);
        assert!(matches!(
            decode_frame(&[1u8; 7], 0).unwrap_err(),
            FrameError::Truncated { .. }
        ));
        assert!(matches!(
            decode_frame(&[0u8; 64], 4).unwrap_err(),
            FrameError::Misaligned { offset: 4 }
        ));
    }
}
