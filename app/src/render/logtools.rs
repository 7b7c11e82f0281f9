//! The log tools in text: `log verify`, `log stats`, `log dump`, `log reindex`.

use tacho_schema::time_to_rfc3339;

use super::{bytes, thousands};
use crate::logtools::{DumpRecord, LogFinding, LogStats, LogVerification, Reindexed};

/// One finding: `error: session S: FILE at offset N: message`.
pub fn finding(f: &LogFinding) -> String {
    match (&f.segment, f.offset) {
        (Some(p), Some(o)) => format!(
            "{}: session {}: {p} at offset {o}: {}",
            f.severity, f.session, f.message
        ),
        (Some(p), None) => format!("{}: session {}: {p}: {}", f.severity, f.session, f.message),
        _ => format!("{}: session {}: {}", f.severity, f.session, f.message),
    }
}

/// `tacho log verify`: the findings, the head of a single session, the totals and the
/// store digest to keep.
pub fn verification(v: &LogVerification) -> String {
    let s = &v.summary;
    let mut o = String::new();
    for f in &v.findings {
        o.push_str(&finding(f));
        o.push('\n');
    }
    if let [one] = v.heads.as_slice() {
        if s.ok {
            o.push_str(&format!(
                "session {} head: {} events, chain {}\n",
                one.session, one.events, one.head
            ));
        } else {
            o.push_str(&format!(
                "session {}: {} events verified before the first error\n",
                one.session, one.events
            ));
        }
    }
    let mut unsigned = 0;
    for h in &v.heads {
        match &h.signature {
            crate::SignatureStatus::Unsigned if v.heads.len() > 1 => unsigned += 1,
            sig => o.push_str(&format!("session {}: {}\n", h.session, sig.describe())),
        }
    }
    if unsigned > 0 && unsigned < v.heads.len() {
        o.push_str(&format!("{unsigned} other session(s) unsigned\n"));
    }
    o.push_str(&format!(
        "checked {} session(s), {} segment(s), {} events, {}: {}\n",
        s.sessions,
        s.segments,
        thousands(s.events),
        bytes(s.bytes),
        if s.ok {
            "every checksum, chain step, sequence number and payload is intact".to_string()
        } else {
            format!("{} error(s)", s.errors)
        }
    ));
    match &s.store_digest {
        Some(digest) => {
            o.push_str(&format!("store digest: {digest}\n"));
            o.push_str("keep the digest elsewhere: the chain detects edits inside the log, a digest kept outside it also detects a rewrite of the whole log\n");
        }
        None => o.push_str("no store digest: the log has errors\n"),
    }
    o
}

/// `tacho log stats`.
pub fn stats(s: &LogStats) -> String {
    let mut o = format!(
        "sessions:  {}\nsegments:  {} ({} sealed)\nevents:    {}\nbatches:   {}\nbytes:     {} ({})\nfree:      {} (zeros kept ahead of the data of open segments)\n",
        thousands(s.sessions as u64),
        thousands(s.segments),
        thousands(s.sealed_segments),
        thousands(s.events),
        thousands(s.batches),
        thousands(s.bytes),
        bytes(s.bytes),
        bytes(s.free_bytes)
    );
    if let Some(per) = s.bytes.checked_div(s.events) {
        o.push_str(&format!(
            "per event: {per} bytes on disk\nevents by kind:\n"
        ));
        for (k, n) in &s.events_by_kind.0 {
            o.push_str(&format!("  {:<18} {:>12}\n", k, thousands(*n)));
        }
    }
    if let Some(u) = &s.snapshot_store {
        o.push_str(&format!(
            "snapshots: {} in the snapshot store, {} on disk ({} loose objects, {} pack(s) of {}); `tacho gc` packs it\n",
            thousands(u.snapshots),
            bytes(u.disk_bytes),
            thousands(u.loose_objects),
            u.packs,
            bytes(u.pack_bytes)
        ));
    }
    o
}

/// `tacho log reindex`.
pub fn reindexed(r: &Reindexed) -> String {
    format!("indexed {} session(s) in {} ms\n", r.sessions, r.ms)
}

/// One record of `tacho log dump`, as one line.
pub fn dump_record(r: &DumpRecord) -> String {
    match r {
        DumpRecord::Segment {
            segment,
            pack_offset,
            format_version,
            segment_index,
            first_seq,
            first_time_unix_ns,
            bytes,
            ..
        } => format!(
            "== {segment}{} (segment {segment_index}, format v{format_version}, first seq {first_seq}, {bytes} bytes, first event at {})",
            pack_offset
                .map(|at| format!(" at {at}"))
                .unwrap_or_default(),
            time_to_rfc3339(*first_time_unix_ns)
        ),
        DumpRecord::Damage {
            segment,
            offset,
            error,
            remaining,
        } => match remaining {
            None => format!("{segment}: damaged header: {error}"),
            Some(remaining) => {
                format!("@{offset:<8} DAMAGED: {error} ({remaining} bytes to the end)")
            }
        },
        DumpRecord::Free { offset, bytes } => {
            format!("@{offset:<8} FREE   {bytes} bytes of zeros ahead of the data")
        }
        DumpRecord::Event {
            offset,
            seq,
            kind,
            kind_version,
            len,
            crc,
            event,
            error,
        } => format!(
            "@{offset:<8} EVENT  seq={seq} {kind} v{kind_version} len={len} crc={crc} {}",
            error.clone().unwrap_or_else(|| event.to_string())
        ),
        DumpRecord::Commit {
            offset,
            last_seq,
            first_seq,
            events,
            chain,
            ..
        } => chain_line(*offset, "COMMIT", *last_seq, *first_seq, *events, chain),
        DumpRecord::Seal {
            offset,
            last_seq,
            first_seq,
            events,
            chain,
            ..
        } => chain_line(*offset, "SEAL", *last_seq, *first_seq, *events, chain),
    }
}

fn chain_line(
    offset: usize,
    name: &str,
    last_seq: u64,
    first_seq: Option<u64>,
    events: Option<u64>,
    chain: &str,
) -> String {
    format!(
        "@{offset:<8} {name:<6} seqs {}..={last_seq} ({} events) chain={chain}",
        first_seq.unwrap_or(0),
        events.unwrap_or(0)
    )
}
