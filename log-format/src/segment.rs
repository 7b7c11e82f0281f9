//! The segment header and segment file names.

use crate::chain::ChainValue;

/// The first eight bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"TACHOSEG";
/// The only format version so far. Readers accept every version they know; see SPEC.md.
pub const FORMAT_VERSION: u16 = 1;
/// Size of the segment header in bytes.
pub const SEGMENT_HEADER_LEN: usize = 128;

const HEADER_CRC_OFFSET: usize = SEGMENT_HEADER_LEN - 4;
const HEADER_RESERVED: std::ops::Range<usize> = 88..HEADER_CRC_OFFSET;

/// 16 bytes that identify a stream: the first 16 bytes of BLAKE3 over its name.
///
/// It binds each segment to the stream it belongs to, so that a segment copied into
/// another stream's directory is detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId(pub [u8; 16]);

impl StreamId {
    /// The identity of the stream called `name`.
    pub fn of_name(name: &str) -> Self {
        // `blake3::derive_key("tacho stream id v1", name)`, with the context's key
        // computed once rather than on every call (readers compute a stream id per
        // session, several times in a pass over a store).
        static CONTEXT: std::sync::OnceLock<blake3::hazmat::ContextKey> =
            std::sync::OnceLock::new();
        let context =
            CONTEXT.get_or_init(|| blake3::hazmat::hash_derive_key_context("tacho stream id v1"));
        use blake3::hazmat::HasherExt;
        let hash = blake3::Hasher::new_from_context_key(context)
            .update(name.as_bytes())
            .finalize();
        let mut id = [0u8; 16];
        id.copy_from_slice(&hash.as_bytes()[..16]);
        StreamId(id)
    }
}

/// The decoded segment header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentHeader {
    pub format_version: u16,
    pub stream: StreamId,
    /// 0 for the first segment of a stream, then 1, 2, ...
    pub segment_index: u64,
    /// Sequence number of the first event this segment holds.
    pub first_seq: u64,
    /// The chain value at the end of the previous segment (zeros for segment 0).
    pub prev_chain: ChainValue,
    /// Time of the segment's first event, in nanoseconds since the Unix epoch. Taken
    /// from the event, not the clock, so that the same events give the same bytes.
    pub first_time_unix_ns: i64,
}

/// Why a segment header could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("segment header is incomplete: {have} of {SEGMENT_HEADER_LEN} bytes")]
    Truncated { have: usize },
    #[error("segment header is all zeros")]
    Zeroed,
    #[error("bad magic {found:02x?}: not a tacho segment")]
    BadMagic { found: [u8; 8] },
    #[error("segment header checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error(
        "format version {found} is not supported by this tacho (it reads versions 1..={FORMAT_VERSION}); upgrade tacho"
    )]
    UnsupportedVersion { found: u16 },
    #[error("segment header field `{field}` has an invalid value {value}")]
    BadField { field: &'static str, value: u64 },
}

impl SegmentHeader {
    /// Encodes the header as SPEC.md §"Segment header" lays it out.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN] {
        let mut b = [0u8; SEGMENT_HEADER_LEN];
        b[0..8].copy_from_slice(&SEGMENT_MAGIC);
        b[8..10].copy_from_slice(&self.format_version.to_le_bytes());
        b[10..12].copy_from_slice(&(SEGMENT_HEADER_LEN as u16).to_le_bytes());
        // 12..16: flags, zero in version 1.
        b[16..32].copy_from_slice(&self.stream.0);
        b[32..40].copy_from_slice(&self.segment_index.to_le_bytes());
        b[40..48].copy_from_slice(&self.first_seq.to_le_bytes());
        b[48..80].copy_from_slice(&self.prev_chain);
        b[80..88].copy_from_slice(&self.first_time_unix_ns.to_le_bytes());
        let crc = crc32fast::hash(&b[..HEADER_CRC_OFFSET]);
        b[HEADER_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks a header from the first bytes of a segment.
    pub fn decode(bytes: &[u8]) -> Result<Self, HeaderError> {
        if bytes.len() < SEGMENT_HEADER_LEN {
            if bytes.iter().all(|&x| x == 0) {
                return Err(HeaderError::Zeroed);
            }
            return Err(HeaderError::Truncated { have: bytes.len() });
        }
        let b = &bytes[..SEGMENT_HEADER_LEN];
        if b.iter().all(|&x| x == 0) {
            return Err(HeaderError::Zeroed);
        }
        let magic: [u8; 8] = arr(&b[0..8]);
        if magic != SEGMENT_MAGIC {
            return Err(HeaderError::BadMagic { found: magic });
        }
        let stored = u32::from_le_bytes(arr(&b[HEADER_CRC_OFFSET..]));
        let computed = crc32fast::hash(&b[..HEADER_CRC_OFFSET]);
        if stored != computed {
            return Err(HeaderError::CrcMismatch { stored, computed });
        }
        let format_version = u16::from_le_bytes(arr(&b[8..10]));
        if format_version == 0 || format_version > FORMAT_VERSION {
            return Err(HeaderError::UnsupportedVersion {
                found: format_version,
            });
        }
        let header_len = u16::from_le_bytes(arr(&b[10..12]));
        if usize::from(header_len) != SEGMENT_HEADER_LEN {
            return Err(HeaderError::BadField {
                field: "header_len",
                value: u64::from(header_len),
            });
        }
        let flags = u32::from_le_bytes(arr(&b[12..16]));
        if flags != 0 {
            return Err(HeaderError::BadField {
                field: "flags",
                value: u64::from(flags),
            });
        }
        if b[HEADER_RESERVED].iter().any(|&x| x != 0) {
            return Err(HeaderError::BadField {
                field: "reserved",
                value: 1,
            });
        }
        Ok(SegmentHeader {
            format_version,
            stream: StreamId(arr(&b[16..32])),
            segment_index: u64::from_le_bytes(arr(&b[32..40])),
            first_seq: u64::from_le_bytes(arr(&b[40..48])),
            prev_chain: arr(&b[48..80]),
            first_time_unix_ns: i64::from_le_bytes(arr(&b[80..88])),
        })
    }
}

/// The file name of the segment whose first event has sequence number `first_seq`:
/// twenty decimal digits, so that names sort in sequence order.
pub fn segment_file_name(first_seq: u64) -> String {
    format!("{first_seq:020}.tseg")
}

/// The first sequence number encoded in a segment file name, or `None` when the name
/// is not a segment file name.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".tseg")?;
    if digits.len() != 20 || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Copies a slice of known length into an array. Callers index with constant ranges of
/// the right size, so the length always matches.
pub(crate) fn arr<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&s[..N]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SegmentHeader {
        SegmentHeader {
            format_version: 1,
            stream: StreamId::of_name("ses_demo"),
            segment_index: 3,
            first_seq: 4096,
            prev_chain: [0xab; 32],
            first_time_unix_ns: 1_764_504_000_000_000_000,
        }
    }

    #[test]
    fn header_round_trips_and_rejects_every_single_bit_flip() {
        let h = sample();
        let bytes = h.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok(h));
        for bit in 0..SEGMENT_HEADER_LEN * 8 {
            let mut b = bytes;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(
                SegmentHeader::decode(&b).is_err(),
                "bit {bit} flip accepted"
            );
        }
    }

    #[test]
    fn file_names_sort_and_parse() {
        assert_eq!(segment_file_name(42), "00000000000000000042.tseg");
        assert_eq!(
            parse_segment_file_name("00000000000000000042.tseg"),
            Some(42)
        );
        assert_eq!(parse_segment_file_name("42.tseg"), None);
        assert_eq!(parse_segment_file_name("LOCK"), None);
        assert!(segment_file_name(9) < segment_file_name(10));
    }

    #[test]
    fn short_and_zeroed_headers() {
        assert_eq!(SegmentHeader::decode(&[0u8; 40]), Err(HeaderError::Zeroed));
        assert_eq!(SegmentHeader::decode(&[0u8; 128]), Err(HeaderError::Zeroed));
        let b = sample().encode();
        assert_eq!(
            SegmentHeader::decode(&b[..100]),
            Err(HeaderError::Truncated { have: 100 })
        );
    }
}
