//! `tacho audit prune`: whole sessions older than a retention period removed — their
//! streams, stored projections, lock files and index entries — after a record of the
//! removal (which sessions, their final heads, when, why) is made durable; then the
//! snapshots nothing references any more (SPEC §14.5).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use tacho_projections::RiskLevel;
use tacho_store::{PrunedSession, StoreError, hex};

use crate::Tacho;
use crate::error::{ErrorKind, Field, Kind, Namer, neutral};
use crate::snapshots::{GcOutcome, SnapshotOpError};

/// Sessions locked and removed at a time (each holds its lock file open meanwhile).
const CHUNK: usize = 256;

/// Why a prune could not run.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    #[error("{}", neutral(self))]
    BadRisk(String),
    #[error("{}", neutral(self))]
    BadDays,
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the sessions were removed, but not the snapshots only they referenced: {0}")]
    Snapshots(#[from] SnapshotOpError),
}

impl Kind for PruneError {
    fn kind(&self) -> ErrorKind {
        match self {
            PruneError::BadRisk(_) | PruneError::BadDays => ErrorKind::Input,
            PruneError::Store(e) => e.kind(),
            PruneError::Snapshots(e) => e.kind(),
        }
    }

    fn field(&self) -> Option<Field> {
        match self {
            PruneError::BadRisk(_) => Some(Field::KeepRisk),
            PruneError::BadDays => Some(Field::Days),
            _ => None,
        }
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        match self {
            PruneError::BadRisk(given) => write!(
                f,
                "{} {given:?} is not one of low, medium, high, critical",
                name.field(Field::KeepRisk)
            ),
            PruneError::BadDays => write!(f, "{} must be at least 1", name.field(Field::Days)),
            other => fmt::Display::fmt(other, f),
        }
    }
}

/// What to prune.
#[derive(Debug, Clone, Default)]
pub struct PruneOptions {
    /// Sessions whose last event is older than this many days.
    pub days: u64,
    /// Keep sessions at or above this risk level.
    pub keep_risk: Option<String>,
    /// Also sessions that never recorded their end (imports, crashed agents); by
    /// default they count as running and are kept.
    pub include_unended: bool,
    pub dry_run: bool,
}

/// A session kept although it is old enough, and why.
#[derive(Debug, Clone, Serialize)]
pub struct Kept {
    pub session: String,
    pub reason: String,
}

/// What a prune did (or, dry, would do).
#[derive(Debug, Clone, Serialize)]
pub struct PruneOutcome {
    pub dry_run: bool,
    /// Sessions whose last event is before this time were candidates.
    pub cutoff_unix_ns: i64,
    pub removed: Vec<PrunedSession>,
    pub kept: Vec<Kept>,
    /// Sessions an earlier, interrupted prune had recorded as removed: removed now.
    pub finished: Vec<String>,
    /// The digests of the prune records written.
    pub records: Vec<String>,
    /// Snapshots dropped and bytes reclaimed by the gc that followed.
    pub snapshots_dropped: Option<usize>,
    pub bytes_reclaimed: Option<u64>,
}

struct Candidate {
    session: String,
    next_seq: u64,
    head: String,
    started: Option<i64>,
    last: Option<i64>,
}

impl Tacho {
    /// Prunes the store as `opts` says.
    pub fn prune(&self, opts: &PruneOptions) -> Result<PruneOutcome, PruneError> {
        if opts.days == 0 {
            return Err(PruneError::BadDays);
        }
        let keep_rank = match &opts.keep_risk {
            Some(r) => Some(crate::index::rank_of(
                RiskLevel::parse(r).ok_or_else(|| PruneError::BadRisk(r.clone()))?,
            )),
            None => None,
        };
        let now = self.now();
        let cutoff = now.saturating_sub(
            i64::try_from(opts.days)
                .unwrap_or(i64::MAX)
                .saturating_mul(86_400_000_000_000),
        );
        let view = self.session_index()?;
        let mut entries = Vec::new();
        view.for_each_newest_first(|e| {
            entries.push(e.to_owned());
            true
        });
        // Old enough, and why some of those stay.
        let mut prune: BTreeMap<String, Candidate> = BTreeMap::new();
        let mut kept: BTreeMap<String, String> = BTreeMap::new();
        let mut parents: BTreeMap<String, String> = BTreeMap::new();
        let mut young: Vec<String> = Vec::new();
        for e in &entries {
            let Some(f) = e.facts.as_ref().map(|f| &f.facts) else {
                continue;
            };
            if let Some(p) = &f.parent {
                parents.insert(e.session.clone(), p.clone());
            }
            let last = f.last_event_unix_ns.or(f.started_unix_ns);
            if last.is_none_or(|t| t >= cutoff) {
                young.push(e.session.clone());
                continue;
            }
            let why = if f.damaged.is_some() {
                Some("damaged: it does not verify (`tacho log verify`), and pruning would remove the evidence".to_string())
            } else if f.end_reason.is_none() && !opts.include_unended {
                Some(
                    "running: no session.end recorded (--include-unended prunes such sessions)"
                        .to_string(),
                )
            } else if keep_rank.is_some_and(|k| f.risk_level >= k) {
                Some(format!(
                    "risk {} is at or above --keep-risk",
                    crate::index::level_of(f.risk_level).as_str()
                ))
            } else {
                None
            };
            match why {
                Some(w) => {
                    kept.insert(e.session.clone(), w);
                }
                None => {
                    prune.insert(
                        e.session.clone(),
                        Candidate {
                            session: e.session.clone(),
                            next_seq: e.next_seq,
                            head: hex(&e.head),
                            started: f.started_unix_ns,
                            last,
                        },
                    );
                }
            }
        }
        // Each candidate read through, in the dry run as in the real one: the index
        // says what it knew when the session was folded, and damage since (a changed
        // byte) keeps a session as it keeps one the index knows damaged.
        let candidates: Vec<String> = prune.keys().cloned().collect();
        for session in candidates {
            let damage = match self.log().verify_session(&session, true) {
                Ok(r) => r.findings.first().map(|f| f.message.clone()),
                Err(e) => Some(e.to_string()),
            };
            if let Some(why) = damage {
                prune.remove(&session);
                kept.insert(
                    session,
                    format!(
                        "damaged: it does not verify ({why}), and pruning would remove the evidence"
                    ),
                );
            }
        }
        // A kept session's ancestors stay, with it.
        let mut stack: Vec<String> = young.into_iter().chain(kept.keys().cloned()).collect();
        let mut seen = BTreeSet::new();
        while let Some(s) = stack.pop() {
            if !seen.insert(s.clone()) {
                continue;
            }
            if let Some(p) = parents.get(&s) {
                if prune.remove(p).is_some() {
                    kept.insert(p.clone(), format!("an ancestor of kept session {s}"));
                }
                stack.push(p.clone());
            }
        }
        let mut out = PruneOutcome {
            dry_run: opts.dry_run,
            cutoff_unix_ns: cutoff,
            removed: Vec::new(),
            kept: kept
                .into_iter()
                .map(|(session, reason)| Kept { session, reason })
                .collect(),
            finished: Vec::new(),
            records: Vec::new(),
            snapshots_dropped: None,
            bytes_reclaimed: None,
        };
        if opts.dry_run {
            out.removed = prune.into_values().map(pruned).collect();
            return Ok(out);
        }
        out.finished = self.finish_interrupted()?;
        let reason = format!(
            "last event older than {} day(s) (before {}){}{}",
            opts.days,
            tacho_schema::time_to_rfc3339(cutoff),
            opts.keep_risk
                .as_ref()
                .map(|r| format!(", keeping risk {} and above", r.to_uppercase()))
                .unwrap_or_default(),
            if opts.include_unended {
                ", sessions without an end included"
            } else {
                ""
            }
        );
        let candidates: Vec<Candidate> = prune.into_values().collect();
        for chunk in candidates.chunks(CHUNK) {
            // Each session locked, and unchanged since the index said so.
            let mut held = Vec::new();
            for c in chunk {
                match self.log().try_writer(&c.session) {
                    Ok(w) if w.next_seq() == c.next_seq && hex(&w.head()) == c.head => {
                        held.push((c, w))
                    }
                    Ok(_) => out.kept.push(Kept {
                        session: c.session.clone(),
                        reason: "it grew while the prune ran".into(),
                    }),
                    Err(StoreError::Busy { .. }) => out.kept.push(Kept {
                        session: c.session.clone(),
                        reason: "being written right now".into(),
                    }),
                    Err(e) => return Err(e.into()),
                }
            }
            if held.is_empty() {
                continue;
            }
            let sessions: Vec<PrunedSession> = held.iter().map(|(c, _)| pruned_ref(c)).collect();
            let record = self.log().record_prune(now, &reason, sessions.clone())?;
            out.records.push(record.digest);
            let (removed, writers): (Vec<_>, Vec<_>) = held.into_iter().unzip();
            tacho_store::remove_streams(writers)?;
            for c in removed {
                self.remove_projection(&c.session);
                self.remove_hook_state(&c.session);
            }
            out.removed.extend(sessions);
        }
        if (!out.removed.is_empty() || !out.finished.is_empty()) && self.has_snapshot_store() {
            let gc: GcOutcome = self.gc(false)?;
            let size = |u: &crate::types::StoreUsage| u.loose_disk_bytes + u.pack_bytes;
            out.snapshots_dropped = Some(gc.report.dropped_snapshots.len());
            out.bytes_reclaimed =
                Some(size(&gc.report.before).saturating_sub(size(&gc.report.after)));
        }
        Ok(out)
    }

    /// Removes the sessions an interrupted prune recorded and did not remove (those
    /// whose stream is still exactly as recorded).
    fn finish_interrupted(&self) -> Result<Vec<String>, PruneError> {
        let (records, _) = self.log().prune_records()?;
        let mut done = Vec::new();
        for p in records.iter().flat_map(|r| r.sessions.iter()) {
            if !self.log().has_session(&p.session) {
                continue;
            }
            if let Ok(w) = self.log().try_writer(&p.session)
                && w.next_seq() == p.next_seq
                && hex(&w.head()) == p.head
            {
                w.remove_stream()?;
                self.remove_projection(&p.session);
                self.remove_hook_state(&p.session);
                done.push(p.session.clone());
            }
        }
        Ok(done)
    }

    fn remove_projection(&self, session: &str) {
        let path = crate::projection::path(self.log(), session);
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            self.note(&format!(
                "note: {}: the stored projection was not removed: {e}",
                path.display()
            ));
        }
    }

    /// Findings about the prune record for `log verify`: its own checks, and sessions
    /// recorded as removed that are still there as recorded (an interrupted prune).
    pub(crate) fn check_prune_record(
        &self,
    ) -> Result<(Vec<tacho_store::Finding>, Option<String>), StoreError> {
        let (records, mut findings) = self.log().prune_records()?;
        for p in records.iter().flat_map(|r| r.sessions.iter()) {
            if !self.log().has_session(&p.session) {
                continue;
            }
            if self
                .log()
                .head_at(&p.session, p.next_seq)
                .ok()
                .flatten()
                .map(|h| hex(&h))
                == Some(p.head.clone())
            {
                findings.push(tacho_store::Finding {
                    severity: tacho_store::Severity::Warning,
                    session: p.session.clone(),
                    segment: Some(self.log().prune_log_path()),
                    offset: None,
                    message: "recorded as pruned but still present: an interrupted prune (`tacho audit prune` finishes it)".into(),
                });
            }
        }
        Ok((findings, records.last().map(|r| r.digest.clone())))
    }
}

fn pruned(c: Candidate) -> PrunedSession {
    pruned_ref(&c)
}

fn pruned_ref(c: &Candidate) -> PrunedSession {
    PrunedSession {
        session: c.session.clone(),
        next_seq: c.next_seq,
        head: c.head.clone(),
        started_unix_ns: c.started,
        last_event_unix_ns: c.last,
    }
}
