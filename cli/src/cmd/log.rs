//! `tacho log verify | dump | stats`: tooling for the raw log.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use tacho_log_format::{
    CommitPayload, FrameType, SEGMENT_HEADER_LEN, SealPayload, SegmentHeader, decode_frame,
};
use tacho_schema::{Event, EventBody, kind_name, time_to_rfc3339};
use tacho_store::vfs::{RealFs, Vfs};
use tacho_store::{Severity, StoreReport, hex};

use crate::error::CliError;
use crate::home::open_store;
use crate::output::{Out, bytes, thousands};

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Check every checksum, chain step, sequence number and payload; print the head
    /// digest to keep. Exit 1 on any error.
    Verify(VerifyArgs),
    /// Print the frames of a session's segments, or of one segment file.
    Dump(DumpArgs),
    /// Count segments, events, batches and bytes, by kind.
    Stats(StatsArgs),
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
    }
}

/// Runs `f` on every session, with a progress line on a terminal for long runs.
fn each_session(deep: bool, only: Option<&str>, quiet: bool) -> Result<StoreReport, CliError> {
    let store = open_store()?;
    let sessions = match only {
        Some(s) => vec![store.resolve_session(s)?],
        None => store.sessions()?,
    };
    let show = !quiet && std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut last = started;
    let mut report = StoreReport::default();
    for (i, s) in sessions.iter().enumerate() {
        if show && last.elapsed() > Duration::from_millis(250) {
            eprint!(
                "\r{} {}/{} sessions",
                if deep { "verifying" } else { "counting" },
                i,
                sessions.len()
            );
            last = Instant::now();
        }
        report.streams.push(store.verify_session(s, deep)?);
    }
    if show && started.elapsed() > Duration::from_millis(250) {
        eprint!("\r\x1b[K");
    }
    Ok(report)
}

fn finding_json(f: &tacho_store::Finding) -> serde_json::Value {
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
    let report = each_session(true, a.session.as_deref(), a.json)?;
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
        return Err(CliError::Findings(format!(
            "verification failed with {errors} error(s)"
        )));
    }
    Ok(())
}

fn stats(a: StatsArgs) -> Result<(), CliError> {
    let report = each_session(false, None, a.json)?;
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
    let snapshots = match crate::home::data_dir()?
        .join("snapshots")
        .join("HEAD")
        .exists()
    {
        true => Some(crate::snapshots::open_snapshots()?.usage()?),
        false => None,
    };
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
    let files: Vec<PathBuf> = match (&a.file, &a.session) {
        (Some(f), _) => vec![f.clone()],
        (None, Some(given)) => {
            let store = open_store()?;
            let s = &store.resolve_session(given)?;
            let segs = store.segments(s)?;
            match a.segment {
                Some(i) => vec![
                    segs.get(i)
                        .ok_or_else(|| {
                            CliError::NotFound(format!(
                                "session {s} has {} segment(s); there is no segment {i}",
                                segs.len()
                            ))
                        })?
                        .path
                        .clone(),
                ],
                None => segs.into_iter().map(|s| s.path).collect(),
            }
        }
        (None, None) => return Err(CliError::Input("give a session or --file".into())),
    };
    let session = match &a.session {
        Some(s) => open_store()?.resolve_session(s)?,
        None => String::new(),
    };
    let mut damaged = false;
    for path in files {
        // The engine's reader returns an aligned copy: rkyv payloads need alignment.
        let data = RealFs
            .read(&path, false)
            .map_err(|e| CliError::Io(format!("{}: {e}", path.display())))?;
        damaged |= dump_segment(&mut out, &path, &data, &session, a.json)?;
    }
    out.finish()?;
    if damaged {
        return Err(CliError::Findings(
            "the dump stopped at damaged bytes".into(),
        ));
    }
    Ok(())
}

fn dump_segment(
    out: &mut Out,
    path: &Path,
    buf: &[u8],
    session: &str,
    json: bool,
) -> Result<bool, CliError> {
    let header = match SegmentHeader::decode(buf) {
        Ok(h) => h,
        Err(e) => {
            if json {
                out.json(&serde_json::json!({"type":"damage","segment":path.display().to_string(),"offset":0,"error":e.to_string()}))?;
            } else {
                out.line(format!("{}: damaged header: {e}", path.display()))?;
            }
            return Ok(true);
        }
    };
    if json {
        out.json(&serde_json::json!({
            "type": "segment", "segment": path.display().to_string(), "format_version": header.format_version,
            "segment_index": header.segment_index, "first_seq": header.first_seq,
            "prev_chain": hex(&header.prev_chain), "first_time": time_to_rfc3339(header.first_time_unix_ns),
            "bytes": buf.len(),
        }))?;
    } else {
        out.line(format!(
            "== {} (segment {}, format v{}, first seq {}, {} bytes, first event at {})",
            path.display(),
            header.segment_index,
            header.format_version,
            header.first_seq,
            buf.len(),
            time_to_rfc3339(header.first_time_unix_ns)
        ))?;
    }
    let mut off = SEGMENT_HEADER_LEN;
    while off < buf.len() {
        let f = match decode_frame(buf, off) {
            Ok(f) => f,
            Err(tacho_log_format::FrameError::Zeroed) if buf[off..].iter().all(|&b| b == 0) => {
                let free = buf.len() - off;
                if json {
                    out.json(&serde_json::json!({"type": "free", "offset": off, "bytes": free}))?;
                } else {
                    out.line(format!(
                        "@{off:<8} FREE   {free} bytes of zeros ahead of the data"
                    ))?;
                }
                break;
            }
            Err(e) => {
                if json {
                    out.json(&serde_json::json!({"type":"damage","segment":path.display().to_string(),"offset":off,"error":e.to_string()}))?;
                } else {
                    out.line(format!(
                        "@{off:<8} DAMAGED: {e} ({} bytes to the end)",
                        buf.len() - off
                    ))?;
                }
                return Ok(true);
            }
        };
        let h = f.header;
        match h.frame_type {
            FrameType::Event => {
                let body = EventBody::decode(h.kind, h.kind_version, f.payload);
                let (ev_json, err) = match body {
                    Ok(body) => (
                        Event {
                            session: session.to_string(),
                            time_unix_ns: h.time_unix_ns,
                            body,
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
                    }))?;
                } else {
                    out.line(format!(
                        "@{off:<8} EVENT  seq={} {} v{} len={} crc={:08x} {}",
                        h.seq,
                        kind_label(h.kind),
                        h.kind_version,
                        h.frame_len,
                        h.crc,
                        err.unwrap_or_else(|| ev_json.to_string())
                    ))?;
                }
            }
            FrameType::Commit | FrameType::Seal => {
                let (name, chain, first, count, n) = if h.frame_type == FrameType::Commit {
                    let c = CommitPayload::decode(f.payload);
                    (
                        "commit",
                        c.map(|c| c.chain),
                        c.map(|c| c.first_seq),
                        c.map(|c| c.event_count),
                        c.map(|c| c.span_len),
                    )
                } else {
                    let s = SealPayload::decode(f.payload);
                    (
                        "seal",
                        s.map(|s| s.chain),
                        s.map(|s| s.first_seq),
                        s.map(|s| s.event_count),
                        s.map(|s| s.sealed_len),
                    )
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
        off = f.end();
    }
    Ok(false)
}
