//! The on-disk format of tacho's event log, and nothing else.
//!
//! This crate turns values into bytes and bytes into values. It knows nothing about
//! sessions, events, files, locks or clocks: the engine decides where bytes live and
//! when they are synced; the schema crate decides what a payload means. SPEC.md is the
//! normative description of every layout here; the golden-bytes tests in this crate
//! keep the two in agreement.
//!
//! A segment is a header followed by 8-byte aligned frames. Frames are events, commits
//! (one per appended batch, carrying the hash chain) and, at the very end of a finished
//! segment, a seal.

mod chain;
mod frame;
mod scan;
mod segment;

pub use chain::{Chain, ChainValue, chain_step};
pub use frame::{
    COMMIT_PAYLOAD_LEN, CommitPayload, FRAME_HEADER_LEN, FRAME_PAYLOAD_BYTES_MAX, FrameError,
    FrameHeader, FrameRef, FrameType, SEAL_PAYLOAD_LEN, SealPayload, decode_frame,
    encode_commit_frame, encode_event_frame, encode_seal_frame, padded_len,
};
pub use scan::{
    Batch, Damage, DamageClass, ScanError, ScanLimits, Scanner, SegmentEnd, find_commit_after,
};
pub use segment::{
    FORMAT_VERSION, HeaderError, SEGMENT_HEADER_LEN, SEGMENT_MAGIC, SegmentHeader, StreamId,
    parse_segment_file_name, segment_file_name,
};

/// Every frame starts at a multiple of this many bytes from the start of its segment.
///
/// Segments are read from page-aligned memory maps or from 16-byte aligned buffers, so
/// frame payloads (which start 32 bytes into a frame) are 8-byte aligned in memory,
/// which is what the rkyv payloads need.
pub const FRAME_ALIGN: usize = 8;

const _: () = assert!(FRAME_HEADER_LEN.is_multiple_of(FRAME_ALIGN));
const _: () = assert!(SEGMENT_HEADER_LEN.is_multiple_of(FRAME_ALIGN));
