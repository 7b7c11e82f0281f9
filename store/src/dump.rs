//! A segment's frames one by one, for `tacho log dump`: what each frame says, where the
//! zero-filled free space starts, and where damage stops the walk. Unlike the scanner,
//! nothing is checked beyond each frame itself: this is a reading aid, not a verifier.

use std::path::Path;

use tacho_log_format::{
    ChainValue, CommitPayload, FrameError, FrameHeader, FrameType, HeaderError, SEGMENT_HEADER_LEN,
    SealPayload, SegmentHeader, decode_frame,
};
use tacho_schema::{EventBody, SchemaError};

use crate::vfs::{RealFs, Vfs};

/// One frame of a segment.
#[derive(Debug, Clone)]
pub enum DumpFrame {
    Event {
        offset: usize,
        header: FrameHeader,
        /// The payload decoded, or why it does not decode (boxed: events are large,
        /// the other frames small).
        body: Box<Result<EventBody, SchemaError>>,
    },
    /// A commit or seal frame; the payload fields are `None` when it does not decode.
    Chain {
        offset: usize,
        header: FrameHeader,
        chain: Option<ChainValue>,
        first_seq: Option<u64>,
        events: Option<u64>,
        /// Commit: the span the chain step hashed. Seal: the sealed length.
        len: Option<u64>,
    },
    /// Zeros from here to the end: free space kept ahead of the data.
    Free { offset: usize, bytes: usize },
    /// The walk stops here.
    Damage {
        offset: usize,
        error: FrameError,
        /// Bytes from the damage to the end.
        remaining: usize,
    },
}

/// A segment's header and frames.
#[derive(Debug, Clone)]
pub struct SegmentDump {
    pub len: usize,
    /// The header, or why it does not decode (then there are no frames).
    pub header: Result<SegmentHeader, HeaderError>,
    pub frames: Vec<DumpFrame>,
}

impl SegmentDump {
    /// Whether the walk stopped at damaged bytes.
    pub fn damaged(&self) -> bool {
        self.header.is_err() || matches!(self.frames.last(), Some(DumpFrame::Damage { .. }))
    }
}

/// Walks the frames of a segment's bytes.
pub fn dump_segment(buf: &[u8]) -> SegmentDump {
    let header = SegmentHeader::decode(buf);
    let mut frames = Vec::new();
    if header.is_ok() {
        let mut off = SEGMENT_HEADER_LEN;
        while off < buf.len() {
            let f = match decode_frame(buf, off) {
                Ok(f) => f,
                Err(FrameError::Zeroed)
                    if buf.get(off..).is_some_and(|r| r.iter().all(|&b| b == 0)) =>
                {
                    frames.push(DumpFrame::Free {
                        offset: off,
                        bytes: buf.len() - off,
                    });
                    break;
                }
                Err(error) => {
                    frames.push(DumpFrame::Damage {
                        offset: off,
                        error,
                        remaining: buf.len() - off,
                    });
                    break;
                }
            };
            let h = f.header;
            frames.push(match h.frame_type {
                FrameType::Event => DumpFrame::Event {
                    offset: off,
                    header: h,
                    body: Box::new(EventBody::decode(h.kind, h.kind_version, f.payload)),
                },
                FrameType::Commit | FrameType::Seal => {
                    // Both payloads: the chain value, the first event, the count, and a
                    // length (the span hashed, or the sealed length).
                    let fields = if h.frame_type == FrameType::Commit {
                        CommitPayload::decode(f.payload)
                            .map(|c| (c.chain, c.first_seq, c.event_count, c.span_len))
                    } else {
                        SealPayload::decode(f.payload)
                            .map(|s| (s.chain, s.first_seq, s.event_count, s.sealed_len))
                    };
                    DumpFrame::Chain {
                        offset: off,
                        header: h,
                        chain: fields.map(|x| x.0),
                        first_seq: fields.map(|x| x.1),
                        events: fields.map(|x| x.2),
                        len: fields.map(|x| x.3),
                    }
                }
            });
            off = f.end();
        }
    }
    SegmentDump {
        len: buf.len(),
        header,
        frames,
    }
}

/// Reads a segment file (an aligned copy: rkyv payloads need alignment), or the
/// `range` (offset, length) of a pack that holds one, and walks it.
pub fn dump_file(path: &Path, range: Option<(u64, u64)>) -> std::io::Result<SegmentDump> {
    let data = match range {
        Some((at, len)) => RealFs.read_range(path, at, len)?,
        None => RealFs.read(path, false)?,
    };
    Ok(dump_segment(&data))
}
