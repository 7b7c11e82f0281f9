//! `tacho log verify | dump | stats`: tooling for the raw log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Subcommand};
use tacho_app::render::{bytes, thousands};
use tacho_app::types::{DumpFrame, FrameHeader, SegmentDump, Severity, StoreReport, hex};
use tacho_app::{Tacho, dump_segment_file};
use tacho_schema::{Event, kind_name, time_to_rfc3339};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Check every checksum, chain step, sequence number and payload; print the head
    /// digest to keep. Exit 1 on any error.
    Verify(VerifyArgs),
    /// Print the frames of a session's segments, or of one segment file.
    Dump(DumpArgs),
    /// Count segments, events, batches and bytes, by kind.
    Stats(StatsArgs),
    /// Rebuild the session index from the streams (derived data; `log verify` says when
    /// it disagrees with them).
    Reindex(ReindexArgs),
}

#[derive(Debug, Args)]
pub struct ReindexArgs {
    /// One JSON object: sessions indexed and milliseconds taken.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Verify one session only (default: every session).
    #[arg(long)]
    pub session: Option<String>,
    /// JSON Lines: one object per finding, one per session head, then a summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// The session whose segments to dump.
    #[arg(required_unless_present = "file")]
    pub session: Option<String>,
    /// Only the segment with this index (0 is the first).
    #[arg(long)]
    pub segment: Option<usize>,
    /// Dump a segment file by path instead (it need not be in the store).
    #[arg(long, conflicts_with = "session")]
    pub file: Option<PathBuf>,
    /// One JSON object per frame.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: LogCommand) -> Result<(), CliError> {
    match c {
        LogCommand::Verify(a) => verify(a),
        LogCommand::Dump(a) => dump(a),
        LogCommand::Stats(a) => stats(a),
        LogCommand::Reindex(a) => reindex(a),
    }
}

fn reindex(a: ReindexArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    tacho.require_data()?;
    let started = std::time::Instant::now();
    let sessions = tacho.rebuild_index()?;
    let ms = started.elapsed().as_millis();
    let mut out = Out::new();
    if a.json {
        out.json(&serde_json::json!({"type": "reindex", "sessions": sessions, "ms": ms}))?;
    } else {
        out.line(format!("indexed {sessions} session(s) in {ms} ms"))?;
    }
    out.finish()
}

/// Verifies or counts every session (or one), with a progress bar on a terminal for
/// runs that take more than a moment.
fn each_session(
    tacho: &Tacho,
    deep: bool,
    only: Option<&tacho_app::SessionId>,
    quiet: bool,
) -> Result<StoreReport, CliError> {
    let bar = crate::output::progress_bar(
        if deep {
            "verifying {pos}/{len} sessions"
        } else {
            "counting {pos}/{len} sessions"
        },
        None,
        quiet,
    );
    let started = std::time::Instant::now();
    let report = tacho.verify_store(deep, only, &mut |done, total| {
        // Only for work that takes longer than a moment.
        if started.elapsed() > Duration::from_millis(250) {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        }
    });
    bar.finish_and_clear();
    Ok(report?)
}

fn finding_json(f: &tacho_app::types::Finding) -> serde_json::Value {
    serde_json::json!({
        "type": "finding",
        "severity": match f.severity { Severity::Error => "error", Severity::Warning => "warning" },
        "session": f.session,
        "segment": f.segment.as_ref().map(|p| p.display().to_string()),
        "offset": f.offset,
        "message": f.message,
    })
}

fn totals(r: &StoreReport) -> (u64, u64, u64, u64) {
    r.streams.iter().fold((0, 0, 0, 0), |(s, e, b, n), x| {
        (s + x.segments, e + x.events, b + x.bytes, n + x.batches)
    })
}

fn verify(a: VerifyArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    tacho.require_data()?;
    let only = a
        .session
        .as_deref()
        .map(|s| tacho.resolve_session(s))
        .transpose()?;
    let report = each_session(&tacho, true, only.as_ref(), a.json)?;
    let (segments, events, size, _) = totals(&report);
    let errors = report
        .findings()
        .filter(|f| f.severity == Severity::Error)
        .count();
    let warnings = report.findings().count() - errors;
    let digest = hex(&report.store_digest());
    let mut out = Out::new();
    if a.json {
        for f in report.findings() {
            out.json(&finding_json(f))?;
        }
        for s in &report.streams {
            out.json(&serde_json::json!({
                "type": "head", "session": s.session, "events": s.next_seq, "head": hex(&s.chain),
            }))?;
        }
        out.json(&serde_json::json!({
            "type": "summary", "ok": errors == 0, "errors": errors, "warnings": warnings,
            "sessions": report.streams.len(), "segments": segments, "events": events,
            "bytes": size, "store_digest": (errors == 0).then_some(digest),
        }))?;
    } else {
        for f in report.findings() {
            let sev = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            let seg = f.segment.as_deref().map(Path::display);
            match (seg, f.offset) {
                (Some(p), Some(o)) => out.line(format!(
                    "{sev}: session {}: {p} at offset {o}: {}",
                    f.session, f.message
                ))?,
                (Some(p), None) => {
                    out.line(format!("{sev}: session {}: {p}: {}", f.session, f.message))?
                }
                _ => out.line(format!("{sev}: session {}: {}", f.session, f.message))?,
            }
        }
        if let [one] = report.streams.as_slice() {
            if errors == 0 {
                out.line(format!(
                    "session {} head: {} events, chain {}",
                    one.session,
                    one.next_seq,
                    hex(&one.chain)
                ))?;
            } else {
                out.line(format!(
                    "session {}: {} events verified before the first error",
                    one.session, one.next_seq
                ))?;
            }
        }
        out.line(format!(
            "checked {} session(s), {} segment(s), {} events, {}: {}",
            report.streams.len(),
            segments,
            thousands(events),
            bytes(size),
            if errors == 0 {
                "every checksum, chain step, sequence number and payload is intact".to_string()
            } else {
                format!("{errors} error(s)")
            }
        ))?;
        if errors == 0 {
            out.line(format!("store digest: {digest}"))?;
            out.line("keep the digest elsewhere: the chain detects edits inside the log, a digest kept outside it also detects a rewrite of the whole log")?;
        } else {
            out.line("no store digest: the log has errors")?;
        }
    }
    out.finish()?;
    if errors > 0 {
        return Err(CliError::findings(format!(
            "verification failed with {errors} error(s)"
        )));
    }
    Ok(())
}

fn stats(a: StatsArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let report = each_session(&tacho, false, None, a.json)?;
    let (segments, events, size, batches) = totals(&report);
    let mut by_kind: BTreeMap<u16, u64> = BTreeMap::new();
    let mut sealed = 0;
    let mut free = 0;
    for s in &report.streams {
        sealed += s.sealed_segments;
        free += s.free_bytes;
        for (k, n) in &s.by_kind {
            *by_kind.entry(*k).or_default() += n;
        }
    }
    // The snapshot store, when there is one (stats never creates it).
    let snapshots = tacho.snapshot_usage()?;
    let mut out = Out::new();
    if a.json {
        let kinds: serde_json::Map<String, serde_json::Value> = by_kind
            .iter()
            .map(|(k, n)| (kind_label(*k), (*n).into()))
            .collect();
        out.json(&serde_json::json!({
            "type": "stats", "sessions": report.streams.len(), "segments": segments,
            "sealed_segments": sealed, "events": events, "batches": batches, "bytes": size,
            "free_bytes": free,
            "events_by_kind": kinds,
            "snapshot_store": snapshots.map(|u| serde_json::json!({
                "snapshots": u.snapshots,
                "loose_objects": u.loose_objects,
                "loose_bytes": u.loose_bytes,
                "loose_disk_bytes": u.loose_disk_bytes,
                "packs": u.packs,
                "pack_bytes": u.pack_bytes,
                "disk_bytes": u.disk_bytes(),
            })),
        }))?;
        return out.finish();
    }
    out.line(format!(
        "sessions:  {}",
        thousands(report.streams.len() as u64)
    ))?;
    out.line(format!(
        "segments:  {} ({} sealed)",
        thousands(segments),
        thousands(sealed)
    ))?;
    out.line(format!("events:    {}", thousands(events)))?;
    out.line(format!("batches:   {}", thousands(batches)))?;
    out.line(format!("bytes:     {} ({})", thousands(size), bytes(size)))?;
    out.line(format!(
        "free:      {} (zeros kept ahead of the data of open segments)",
        bytes(free)
    ))?;
    if let Some(per) = size.checked_div(events) {
        out.line(format!("per event: {per} bytes on disk"))?;
        out.line("events by kind:")?;
        for (k, n) in &by_kind {
            out.line(format!("  {:<18} {:>12}", kind_label(*k), thousands(*n)))?;
        }
    }
    if let Some(u) = snapshots {
        out.line(format!(
            "snapshots: {} in the snapshot store, {} on disk ({} loose objects, {} pack(s) of {}); `tacho gc` packs it",
            thousands(u.snapshots),
            bytes(u.disk_bytes()),
            thousands(u.loose_objects),
            u.packs,
            bytes(u.pack_bytes)
        ))?;
    }
    out.finish()
}

fn kind_label(k: u16) -> String {
    match kind_name(k) {
        "unknown" => format!("unknown({k})"),
        n => n.to_string(),
    }
}

fn dump(a: DumpArgs) -> Result<(), CliError> {
    let mut out = Out::new();
    let (segments, session): (Vec<tacho_app::SegmentInfo>, String) = match (&a.file, &a.session) {
        (Some(f), _) => (
            vec![tacho_app::SegmentInfo {
                path: f.clone(),
                first_seq: 0,
                packed: None,
            }],
            String::new(),
        ),
        (None, Some(given)) => {
            let tacho = crate::open()?;
            let s = tacho.resolve_session(given)?;
            (tacho.segment_paths(&s, a.segment)?, s.into_string())
        }
        (None, None) => return Err(CliError::input("give a session or --file")),
    };
    let mut damaged = false;
    for seg in segments {
        let (path, range) = (seg.path, seg.packed);
        let d = dump_segment_file(&path, range)?;
        print_segment(&mut out, &path, range.map(|r| r.0), &d, &session, a.json)?;
        damaged |= d.damaged();
    }
    out.finish()?;
    if damaged {
        return Err(CliError::findings("the dump stopped at damaged bytes"));
    }
    Ok(())
}

/// One segment's dump; a packed one (`packed_at`: where it starts in its pack) is named
/// by its pack and that offset (the frames' offsets are the segment's own).
fn print_segment(
    out: &mut Out,
    path: &Path,
    packed_at: Option<u64>,
    d: &SegmentDump,
    session: &str,
    json: bool,
) -> Result<(), CliError> {
    let header = match &d.header {
        Ok(h) => h,
        Err(e) => {
            if json {
                out.json(&serde_json::json!({"type":"damage","segment":path.display().to_string(),"offset":0,"error":e.to_string()}))?;
            } else {
                out.line(format!("{}: damaged header: {e}", path.display()))?;
            }
            return Ok(());
        }
    };
    if json {
        out.json(&serde_json::json!({
            "type": "segment", "segment": path.display().to_string(), "pack_offset": packed_at,
            "format_version": header.format_version,
            "segment_index": header.segment_index, "first_seq": header.first_seq,
            "prev_chain": hex(&header.prev_chain), "first_time": time_to_rfc3339(header.first_time_unix_ns),
            "bytes": d.len,
        }))?;
    } else {
        out.line(format!(
            "== {}{} (segment {}, format v{}, first seq {}, {} bytes, first event at {})",
            path.display(),
            packed_at.map(|at| format!(" at {at}")).unwrap_or_default(),
            header.segment_index,
            header.format_version,
            header.first_seq,
            d.len,
            time_to_rfc3339(header.first_time_unix_ns)
        ))?;
    }
    for f in &d.frames {
        match f {
            DumpFrame::Free {
                offset: off,
                bytes: free,
            } => {
                if json {
                    out.json(&serde_json::json!({"type": "free", "offset": off, "bytes": free}))?;
                } else {
                    out.line(format!(
                        "@{off:<8} FREE   {free} bytes of zeros ahead of the data"
                    ))?;
                }
            }
            DumpFrame::Damage {
                offset: off,
                error: e,
                remaining,
            } => {
                if json {
                    out.json(&serde_json::json!({"type":"damage","segment":path.display().to_string(),"offset":off,"error":e.to_string()}))?;
                } else {
                    out.line(format!(
                        "@{off:<8} DAMAGED: {e} ({remaining} bytes to the end)"
                    ))?;
                }
            }
            DumpFrame::Event {
                offset: off,
                header: h,
                body,
            } => print_event(out, *off, h, body, session, json)?,
            DumpFrame::Chain {
                offset: off,
                header: h,
                chain,
                first_seq: first,
                events: count,
                len: n,
            } => {
                let name = if h.frame_type == tacho_app::types::FrameType::Commit {
                    "commit"
                } else {
                    "seal"
                };
                let chain = chain.map(|c| hex(&c)).unwrap_or_default();
                if json {
                    out.json(&serde_json::json!({
                        "type": name, "offset": off, "last_seq": h.seq, "first_seq": first,
                        "events": count, "chain": chain,
                        if name == "commit" { "span_len" } else { "sealed_len" }: n,
                    }))?;
                } else {
                    out.line(format!(
                        "@{off:<8} {:<6} seqs {}..={} ({} events) chain={chain}",
                        name.to_uppercase(),
                        first.unwrap_or(0),
                        h.seq,
                        count.unwrap_or(0)
                    ))?;
                }
            }
        }
    }
    Ok(())
}

fn print_event(
    out: &mut Out,
    off: usize,
    h: &FrameHeader,
    body: &Result<tacho_schema::EventBody, tacho_schema::SchemaError>,
    session: &str,
    json: bool,
) -> Result<(), CliError> {
    let (ev_json, err) = match body {
        Ok(body) => (
            Event {
                session: session.to_string(),
                time_unix_ns: h.time_unix_ns,
                body: body.clone(),
            }
            .to_json(),
            None,
        ),
        Err(e) => (serde_json::Value::Null, Some(e.to_string())),
    };
    if json {
        out.json(&serde_json::json!({
            "type": "event", "offset": off, "seq": h.seq, "kind": kind_label(h.kind),
            "kind_version": h.kind_version, "len": h.frame_len, "crc": format!("{:08x}", h.crc),
            "event": ev_json, "error": err,
        }))
    } else {
        out.line(format!(
            "@{off:<8} EVENT  seq={} {} v{} len={} crc={:08x} {}",
            h.seq,
            kind_label(h.kind),
            h.kind_version,
            h.frame_len,
            h.crc,
            err.unwrap_or_else(|| ev_json.to_string())
        ))
    }
}
