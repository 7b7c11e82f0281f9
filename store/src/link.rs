//! How a segment's header must continue its stream: the one place that checks it, for
//! the writer, the readers and verification alike.

use tacho_log_format::{ChainValue, SegmentHeader, StreamId};

/// What a segment's header is checked against. `None` fields are not known to the
/// caller and not checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected {
    pub stream: StreamId,
    /// The first sequence number in the segment's file name.
    pub name_seq: u64,
    pub index: Option<u64>,
    /// Where the previous segment ended: its next sequence number.
    pub next_seq: Option<u64>,
    /// The previous segment's final chain value.
    pub prev_chain: Option<ChainValue>,
}

/// Every way `h` fails to continue the stream as expected; empty when it does.
pub(crate) fn header_problems(h: &SegmentHeader, e: &Expected) -> Vec<String> {
    let mut out = Vec::new();
    if h.stream != e.stream {
        out.push("segment belongs to another stream".to_string());
    }
    if h.first_seq != e.name_seq {
        out.push(format!(
            "header says first seq {}, file name says {}",
            h.first_seq, e.name_seq
        ));
    }
    if let Some(i) = e.index
        && h.segment_index != i
    {
        out.push(format!(
            "segment index {} where {i} was expected",
            h.segment_index
        ));
    }
    if let Some(next) = e.next_seq
        && h.first_seq != next
    {
        out.push(format!(
            "sequence gap: segment starts at {}, previous segments end at {next} (a segment is missing or misnamed)",
            h.first_seq
        ));
    }
    if let Some(c) = e.prev_chain
        && h.prev_chain != c
    {
        out.push("header does not carry the previous segment's chain value (a segment was removed, replaced or reordered)".to_string());
    }
    out
}
