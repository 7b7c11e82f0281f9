//! Log-level tooling: verifying or counting every stream, and dumping segments.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde::{Serialize, Serializer};
use tacho_log_format::FrameType;
use tacho_schema::{Event, EventView, kind_name};
use tacho_store::dump::{DumpFrame, SegmentDump, dump_file};
use tacho_store::{
    EventVisitor, Finding, SegmentInfo, Severity, StoreError, StoreReport, StreamReport, hex,
};

use crate::error::kinds;
use crate::index::{Deferred, index_head_differs};
use crate::snapshots::{SnapshotOpError, SnapshotStoreUsage};
use crate::{SessionId, Tacho};

/// Why a dump could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("session {session} has {count} segment(s); there is no segment {index}")]
    NoSegment {
        session: String,
        count: usize,
        index: usize,
    },
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Nothing was ever recorded in the data directory.
#[derive(Debug, thiserror::Error)]
#[error(
    "no tacho data in {}: nothing was ever recorded there (is TACHO_HOME right?)",
    .0.display()
)]
pub struct NoData(pub PathBuf);

kinds!(NoData { NoData(_) => NotFound });

kinds!(DumpError {
    DumpError::NoSegment { .. } => NotFound,
    DumpError::Read { .. } => Io,
    DumpError::Store(e) => e.kind(),
});

/// A segment file's path (or a pack's, with the segment's offset and length in it),
/// read and walked.
pub fn dump_segment_file(path: &Path, range: Option<(u64, u64)>) -> Result<SegmentDump, DumpError> {
    dump_file(path, range).map_err(|source| DumpError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// How serious a finding of `log verify` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingSeverity {
    /// The log is not what was written.
    Error,
    /// Not a fault: for example an uncommitted tail that the next writer cuts.
    Warning,
}

impl From<Severity> for FindingSeverity {
    fn from(s: Severity) -> Self {
        match s {
            Severity::Error => FindingSeverity::Error,
            Severity::Warning => FindingSeverity::Warning,
        }
    }
}

impl std::fmt::Display for FindingSeverity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FindingSeverity::Error => "error",
            FindingSeverity::Warning => "warning",
        })
    }
}

/// One finding of `log verify`: a stream's, or the store's (its index, its packs, its
/// prune record). The `finding` record.
#[derive(Debug, Clone, Serialize)]
pub struct LogFinding {
    pub severity: FindingSeverity,
    pub session: String,
    pub segment: Option<String>,
    pub offset: Option<u64>,
    pub message: String,
}

impl From<&Finding> for LogFinding {
    fn from(f: &Finding) -> Self {
        LogFinding {
            severity: f.severity.into(),
            session: f.session.clone(),
            segment: f.segment.as_ref().map(|p| p.display().to_string()),
            offset: f.offset,
            message: f.message.clone(),
        }
    }
}

/// A stream's head as verified: its events before any error and the chain value after
/// them. The `head` record.
#[derive(Debug, Clone, Serialize)]
pub struct StreamHead {
    pub session: String,
    pub events: u64,
    /// The chain value, hex.
    pub head: String,
    /// Whether, and by whom, the session's head is signed (SPEC §16.3).
    pub signature: crate::SignatureStatus,
}

/// The totals of a verification. The `summary` record of `log verify`.
#[derive(Debug, Clone, Serialize)]
pub struct LogVerifySummary {
    pub ok: bool,
    pub errors: usize,
    pub warnings: usize,
    pub sessions: usize,
    pub segments: u64,
    pub events: u64,
    pub bytes: u64,
    /// Hex of the store digest; none when there are errors.
    pub store_digest: Option<String>,
}

/// `tacho log verify`: every finding, every stream's head, and the totals.
#[derive(Debug, Clone, Serialize)]
pub struct LogVerification {
    pub findings: Vec<LogFinding>,
    pub heads: Vec<StreamHead>,
    pub summary: LogVerifySummary,
}

impl LogVerification {
    /// The view of a deep verification's report.
    pub fn from_report(r: &StoreReport) -> Self {
        let findings: Vec<LogFinding> = r.findings().map(LogFinding::from).collect();
        let errors = r
            .findings()
            .filter(|f| f.severity == Severity::Error)
            .count();
        let t = Totals::of(r);
        LogVerification {
            summary: LogVerifySummary {
                ok: errors == 0,
                errors,
                warnings: findings.len() - errors,
                sessions: r.streams.len(),
                segments: t.segments,
                events: t.events,
                bytes: t.bytes,
                store_digest: (errors == 0).then(|| hex(&r.store_digest())),
            },
            heads: r
                .streams
                .iter()
                .map(|s| StreamHead {
                    session: s.session.clone(),
                    events: s.next_seq,
                    head: hex(&s.chain),
                    signature: crate::SignatureStatus::Unsigned,
                })
                .collect(),
            findings,
        }
    }
}

/// Sums over every stream of a report.
#[derive(Default)]
struct Totals {
    segments: u64,
    sealed_segments: u64,
    events: u64,
    batches: u64,
    bytes: u64,
    free_bytes: u64,
}

impl Totals {
    fn of(r: &StoreReport) -> Self {
        r.streams.iter().fold(Totals::default(), |t, s| Totals {
            segments: t.segments + s.segments,
            sealed_segments: t.sealed_segments + s.sealed_segments,
            events: t.events + s.events,
            batches: t.batches + s.batches,
            bytes: t.bytes + s.bytes,
            free_bytes: t.free_bytes + s.free_bytes,
        })
    }
}

/// Event counts by kind, in kind id order, written as one JSON object (kind name →
/// count; an unknown kind as `unknown(ID)`).
#[derive(Debug, Clone, Default)]
pub struct KindCounts(pub Vec<(String, u64)>);

impl Serialize for KindCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, n)| (k, n)))
    }
}

/// A kind id's name; `unknown(ID)` for a kind this tacho does not know.
pub fn kind_label(k: u16) -> String {
    match kind_name(k) {
        "unknown" => format!("unknown({k})"),
        n => n.to_string(),
    }
}

/// `tacho log stats`: what the log holds, and the snapshot store's space. The `stats`
/// record.
#[derive(Debug, Clone, Serialize)]
pub struct LogStats {
    pub sessions: usize,
    pub segments: u64,
    pub sealed_segments: u64,
    pub events: u64,
    pub batches: u64,
    pub bytes: u64,
    /// Zeros kept ahead of the data of open segments.
    pub free_bytes: u64,
    pub events_by_kind: KindCounts,
    /// None when there is no snapshot store (stats never creates it).
    pub snapshot_store: Option<SnapshotStoreUsage>,
}

impl LogStats {
    /// The view of a counting report and the snapshot store's space.
    pub fn from_report(r: &StoreReport, snapshot_store: Option<SnapshotStoreUsage>) -> Self {
        let t = Totals::of(r);
        let mut by_kind: BTreeMap<u16, u64> = BTreeMap::new();
        for s in &r.streams {
            for (k, n) in s.by_kind.iter() {
                *by_kind.entry(k).or_default() += n;
            }
        }
        LogStats {
            sessions: r.streams.len(),
            segments: t.segments,
            sealed_segments: t.sealed_segments,
            events: t.events,
            batches: t.batches,
            bytes: t.bytes,
            free_bytes: t.free_bytes,
            events_by_kind: KindCounts(
                by_kind
                    .into_iter()
                    .map(|(k, n)| (kind_label(k), n))
                    .collect(),
            ),
            snapshot_store,
        }
    }
}

/// `tacho log reindex`: sessions indexed, and how long it took. The `reindex` record.
#[derive(Debug, Clone, Serialize)]
pub struct Reindexed {
    pub sessions: usize,
    pub ms: u128,
}

/// One record of `tacho log dump`, tagged by its `type`: a segment's header, then its
/// frames in order.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DumpRecord {
    Segment {
        /// The segment file, or the pack that holds it.
        segment: String,
        /// Where the segment starts in its pack, for a packed one (the frames' offsets
        /// are the segment's own).
        pack_offset: Option<u64>,
        format_version: u16,
        segment_index: u64,
        first_seq: u64,
        prev_chain: String,
        first_time_unix_ns: i64,
        bytes: usize,
    },
    /// Where the walk stopped.
    Damage {
        segment: String,
        offset: usize,
        error: String,
        /// Bytes from the damage to the end; none for a damaged header.
        remaining: Option<usize>,
    },
    /// Zeros from here to the end.
    Free { offset: usize, bytes: usize },
    Event {
        offset: usize,
        seq: u64,
        kind: String,
        kind_version: u16,
        len: u32,
        /// The frame's CRC, 8 hex digits.
        crc: String,
        /// The event in its JSON form (SPEC §5.1); null when it does not decode.
        event: serde_json::Value,
        /// Why the payload does not decode.
        error: Option<String>,
    },
    Commit {
        offset: usize,
        last_seq: u64,
        first_seq: Option<u64>,
        events: Option<u64>,
        chain: String,
        span_len: Option<u64>,
    },
    Seal {
        offset: usize,
        last_seq: u64,
        first_seq: Option<u64>,
        events: Option<u64>,
        chain: String,
        sealed_len: Option<u64>,
    },
}

/// One segment dumped: its records, and whether the walk stopped at damaged bytes.
#[derive(Debug, Clone)]
pub struct DumpedSegment {
    pub records: Vec<DumpRecord>,
    pub damaged: bool,
}

/// The records of a segment's dump. `session` names the events (empty for a file
/// dumped by path).
pub fn dump_records(
    path: &Path,
    packed_at: Option<u64>,
    d: &SegmentDump,
    session: &str,
) -> DumpedSegment {
    let segment = path.display().to_string();
    let header = match &d.header {
        Ok(h) => h,
        Err(e) => {
            return DumpedSegment {
                records: vec![DumpRecord::Damage {
                    segment,
                    offset: 0,
                    error: e.to_string(),
                    remaining: None,
                }],
                damaged: true,
            };
        }
    };
    let mut records = Vec::with_capacity(d.frames.len() + 1);
    records.push(DumpRecord::Segment {
        segment: segment.clone(),
        pack_offset: packed_at,
        format_version: header.format_version,
        segment_index: header.segment_index,
        first_seq: header.first_seq,
        prev_chain: hex(&header.prev_chain),
        first_time_unix_ns: header.first_time_unix_ns,
        bytes: d.len,
    });
    for f in &d.frames {
        records.push(match f {
            DumpFrame::Free { offset, bytes } => DumpRecord::Free {
                offset: *offset,
                bytes: *bytes,
            },
            DumpFrame::Damage {
                offset,
                error,
                remaining,
            } => DumpRecord::Damage {
                segment: segment.clone(),
                offset: *offset,
                error: error.to_string(),
                remaining: Some(*remaining),
            },
            DumpFrame::Event {
                offset,
                header: h,
                body,
            } => {
                let (event, error) = match body.as_ref() {
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
                DumpRecord::Event {
                    offset: *offset,
                    seq: h.seq,
                    kind: kind_label(h.kind),
                    kind_version: h.kind_version,
                    len: h.frame_len,
                    crc: format!("{:08x}", h.crc),
                    event,
                    error,
                }
            }
            DumpFrame::Chain {
                offset,
                header: h,
                chain,
                first_seq,
                events,
                len,
            } => {
                let chain = chain.map(|c| hex(&c)).unwrap_or_default();
                if h.frame_type == FrameType::Commit {
                    DumpRecord::Commit {
                        offset: *offset,
                        last_seq: h.seq,
                        first_seq: *first_seq,
                        events: *events,
                        chain,
                        span_len: *len,
                    }
                } else {
                    DumpRecord::Seal {
                        offset: *offset,
                        last_seq: h.seq,
                        first_seq: *first_seq,
                        events: *events,
                        chain,
                        sealed_len: *len,
                    }
                }
            }
        });
    }
    DumpedSegment {
        records,
        damaged: d.damaged(),
    }
}

/// Reads and walks one segment of a session (`session` names its events; empty for a
/// file dumped by path): `tacho log dump`, one segment at a time.
pub fn dump_segment(seg: &SegmentInfo, session: &str) -> Result<DumpedSegment, DumpError> {
    let d = dump_segment_file(&seg.path, seg.packed)?;
    Ok(dump_records(
        &seg.path,
        seg.packed.map(|r| r.0),
        &d,
        session,
    ))
}

impl Tacho {
    /// Whether anything was ever recorded here; `NoData` otherwise (for commands whose
    /// answer about an empty store would mislead, such as a digest of nothing).
    pub fn require_data(&self) -> Result<(), NoData> {
        if self.log().exists() {
            Ok(())
        } else {
            Err(NoData(self.data_dir().to_path_buf()))
        }
    }

    /// Verifies (`deep`: every checksum, chain step, sequence number and payload) or
    /// counts every stream, or one, on every core. `progress(done, total)` hears how
    /// many sessions are done. A deep check of the whole store also checks the session
    /// index against the streams (see `Tacho::check_index_entry`).
    pub fn verify_store(
        &self,
        deep: bool,
        only: Option<&SessionId>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<StoreReport, StoreError> {
        // The index is read before the store is listed: a stream is verified as listed
        // (a packed session whose first append made its directory after the listing
        // is read as its packed prefix), so a listing taken before the index could
        // miss events whose head the index already records.
        let index = match (deep, only) {
            (true, None) => Some(self.log().index_checked()?).filter(|v| v.complete()),
            _ => None,
        };
        // A pass over every stream lists the store once (its stream directories, lock
        // files and packs); each stream is then verified as listed.
        let listing = match only {
            Some(_) => None,
            None => Some(self.log().listing()?),
        };
        let sessions = match (only, &listing) {
            (Some(s), _) => vec![s.to_string()],
            (None, Some(l)) => l.sessions().to_vec(),
            (None, None) => self.log().sessions()?,
        };
        // (Read once: each entry's check needs it.)
        let rules_current = index.is_some() && self.facts_rules_current();
        let total = sessions.len();
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        // Each worker holds a sender: the channel closes the moment the last worker ends,
        // which wakes this thread at once (no polling sleep to wait out at the end).
        let (finished, ended) = std::sync::mpsc::channel::<()>();
        let deferred: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
        let slots: Vec<Mutex<Option<Result<StreamReport, StoreError>>>> =
            sessions.iter().map(|_| Mutex::new(None)).collect();
        let work = |_finished: std::sync::mpsc::Sender<()>| {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(s) = sessions.get(i) else { break };
                let r = match &index {
                    // One read of the stream both verifies it and folds the facts
                    // its index entry is checked against.
                    Some(v) => {
                        let entry = v.get(s);
                        // The events are folded only for an entry with facts to
                        // compare with them (`check_index_entry` folds them later
                        // if an entry read again has some).
                        let mut g = entry
                            .as_ref()
                            .is_some_and(|e| rules_current && e.fresh_facts().is_some())
                            .then(|| tacho_projections::ExecutionGraph::new(s));
                        let mut source = None;
                        let visit: EventVisitor<'_> = &mut |seq, at, e| {
                            let Some(g) = g.as_mut() else { return };
                            if let (0, EventView::SessionStart { source: from, .. }) = (seq, e) {
                                source = from.map(str::to_owned);
                            }
                            g.apply_view(seq, at, e)
                        };
                        let verified = match &listing {
                            Some(l) => self.log().verify_listed_visiting(l, s, visit),
                            None => self.log().verify_session_visiting(s, visit),
                        };
                        verified.map(|mut r| {
                            // A head that differs is checked again once every
                            // stream is read: a writer may have appended since
                            // the index was.
                            match entry {
                                // (No entry: a session created after the index was
                                // read, whose writer recorded it since.)
                                before @ None => deferred
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .push(Deferred {
                                        slot: i,
                                        before,
                                        folded: g,
                                        source,
                                    }),
                                Some(before) if index_head_differs(&before, &r) => deferred
                                    .lock()
                                    .unwrap_or_else(|e| e.into_inner())
                                    .push(Deferred {
                                        slot: i,
                                        before: Some(before),
                                        folded: g,
                                        source,
                                    }),
                                entry => r.findings.extend(self.check_index_entry(
                                    entry,
                                    &r,
                                    g,
                                    source,
                                    rules_current,
                                )),
                            }
                            r
                        })
                    }
                    None => match &listing {
                        Some(l) => self.log().verify_listed(l, s, deep),
                        None => self.log().verify_session(s, deep),
                    },
                };
                if let Some(slot) = slots.get(i) {
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        // The checks of the store as a whole need no stream: this thread makes them
        // while the workers verify the streams (they were a serial tenth of a pass).
        let store_checks = || -> Result<(Vec<Finding>, Option<String>), StoreError> {
            let mut out = Vec::new();
            if let Some(v) = &index {
                out.extend(self.check_index_store(v, &sessions));
            }
            if only.is_some() {
                return Ok((out, None));
            }
            // A stream directory deleted whole: its lock's checkpoint still counts the
            // events its writers synced (lost data, not a stale index).
            let mut listed = sessions.clone();
            listed.sort();
            out.extend(self.log().streams_lost(&listed)?);
            out.extend(self.log().verify_packs());
            let (findings, head) = self.check_prune_record()?;
            out.extend(findings);
            Ok((out, head))
        };
        let store_checked = std::thread::scope(|scope| {
            for _ in 0..threads.min(total).max(1) {
                let finished = finished.clone();
                scope.spawn(|| work(finished));
            }
            drop(finished);
            let checked = store_checks();
            // Then this thread only reports progress, until the last worker ends.
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                ended.recv_timeout(std::time::Duration::from_millis(50))
            {
                progress(done.load(Ordering::Relaxed), total);
            }
            checked
        });
        progress(total, total);
        let mut report = StoreReport::default();
        for slot in slots {
            match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
                Some(r) => report.streams.push(r?),
                None => {
                    return Err(StoreError::NotFound(
                        "(a session verified by no thread)".into(),
                    ));
                }
            }
        }
        if index.is_some() {
            let deferred = deferred.into_inner().unwrap_or_else(|e| e.into_inner());
            if !deferred.is_empty() {
                let fresh = self.log().index_checked()?;
                self.recheck_index_entries(&fresh, deferred, &mut report.streams);
            }
        }
        let (findings, head) = store_checked?;
        report.store.extend(findings);
        report.prune_head = head;
        Ok(report)
    }

    /// `tacho log verify`: a deep verification of every stream (or one) as its view.
    pub fn verify_log(
        &self,
        only: Option<&SessionId>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<LogVerification, StoreError> {
        let mut v = LogVerification::from_report(&self.verify_store(true, only, progress)?);
        // Signatures are kept only for pushed and fetched sessions.
        if self.data_dir().join("remote").is_dir() {
            let allowed = self.allowed_signers();
            for h in &mut v.heads {
                h.signature = self.signature_with(&h.session, allowed.as_deref())?;
                if matches!(h.signature, crate::SignatureStatus::Bad { .. }) {
                    v.summary.errors += 1;
                    v.summary.ok = false;
                    v.summary.store_digest = None;
                }
            }
        }
        Ok(v)
    }

    /// `tacho log stats`: every stream counted, and the snapshot store's space (when
    /// there is a store: stats never creates one).
    pub fn log_stats(
        &self,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<LogStats, SnapshotOpError> {
        let report = self.verify_store(false, None, progress)?;
        let usage = self.snapshot_usage()?.map(|u| SnapshotStoreUsage::from(&u));
        Ok(LogStats::from_report(&report, usage))
    }

    /// `tacho log reindex`: the session index rebuilt from the streams.
    pub fn reindex(&self) -> Result<Reindexed, StoreError> {
        let started = Instant::now();
        let sessions = self.rebuild_index()?;
        Ok(Reindexed {
            sessions,
            ms: started.elapsed().as_millis(),
        })
    }

    /// The segments of a session (resolved), or only the one at `index`.
    pub fn segment_paths(
        &self,
        session: &str,
        index: Option<usize>,
    ) -> Result<Vec<SegmentInfo>, DumpError> {
        let segs = self.log().segments(session)?;
        Ok(match index {
            Some(i) => vec![
                segs.get(i)
                    .ok_or_else(|| DumpError::NoSegment {
                        session: session.to_owned(),
                        count: segs.len(),
                        index: i,
                    })?
                    .clone(),
            ],
            None => segs,
        })
    }
}
