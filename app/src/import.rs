//! `tacho import claude-code|codex`: transcripts of sessions that already happened
//! (Claude Code transcripts, Codex rollouts), recorded through the one ingest path.
//!
//! Idempotent: every imported event carries the agent's own id, and only events whose
//! id the session does not hold yet are appended — importing again adds nothing, and a
//! transcript that grew adds only its new part. A session that already ended (recorded
//! by hooks, say) takes nothing more: what the transcript has beyond it is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Serialize;
use tacho_agents::Agent;
use tacho_agents::import::{Transcript, dedup_key};
use tacho_schema::EventBody;

pub use tacho_agents::transcript::not_a_transcript;

use crate::context::Tacho;
use crate::ingest::{Ingest, IngestOptions};

/// What one import did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub agent: &'static str,
    pub files: u64,
    pub sessions_created: u64,
    pub sessions_extended: u64,
    pub sessions_unchanged: u64,
    pub events_added: u64,
    /// Events the log already held (imported before, or recorded by hooks).
    pub events_already_recorded: u64,
    /// Events not added because their session had ended.
    pub events_after_end: u64,
    /// Transcript lines that were not JSON.
    pub bad_lines: u64,
    /// Files whose last line had no newline yet (left for the next import).
    pub partial_lines: u64,
    /// Entries not recorded, by type (known noise and unknown types).
    pub skipped_entries: BTreeMap<String, u64>,
    /// Of those, the entry types this tacho does not know, by type.
    pub unknown_entries: BTreeMap<String, u64>,
    /// Files that could not be imported, with why.
    pub failed: Vec<ImportFailure>,
    /// Sessions that received events.
    pub sessions: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImportFailure {
    pub file: PathBuf,
    pub error: String,
}

/// Every transcript of `agent` under `dir` ([`tacho_agents::Adapter::is_transcript`]:
/// `*.jsonl`), recursively (subagent transcripts included), sorted so that a main
/// session's transcript comes before its subagents'.
pub fn transcripts_under(agent: Agent, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let ft = entry.file_type()?;
            let p = entry.path();
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() && agent.is_transcript(&p) {
                out.push(p);
            }
        }
    }
    // Main transcripts first (fewer path components under the project), then by name.
    out.sort_by_key(|p| (p.components().count(), p.clone()));
    Ok(out)
}

/// Transcripts imported together: one ingest, one group commit, and their new sessions
/// in one pack, up to this many transcripts or [`CHUNK_EVENTS`] events.
const CHUNK_TRANSCRIPTS: usize = 1024;
const CHUNK_EVENTS: usize = 100_000;

/// What one transcript adds: the events its session does not hold yet.
struct Planned<'t> {
    session: &'t str,
    exists: bool,
    fresh: Vec<(i64, &'t EventBody)>,
}

impl ImportReport {
    /// Adds what a chunk imported on its own reported.
    fn absorb(&mut self, other: ImportReport) {
        self.sessions_created += other.sessions_created;
        self.sessions_extended += other.sessions_extended;
        self.sessions_unchanged += other.sessions_unchanged;
        self.events_added += other.events_added;
        self.events_already_recorded += other.events_already_recorded;
        self.events_after_end += other.events_after_end;
        self.failed.extend(other.failed);
        self.sessions.extend(other.sessions);
    }
}

impl Tacho {
    /// Imports transcripts of `agent` (read by its adapter: Claude Code transcripts,
    /// Codex rollouts).
    /// `progress` hears (files done, files in all). Transcripts go in chunks through
    /// one ingest each (one group commit, new sessions in one pack); a chunk that
    /// fails is imported again transcript by transcript, so one bad transcript fails
    /// alone (nothing is added twice: events the log holds are skipped by their ids).
    pub fn import_transcripts(
        &self,
        agent: Agent,
        files: &[PathBuf],
        progress: &mut dyn FnMut(usize, usize),
    ) -> ImportReport {
        let mut report = ImportReport {
            kind: "import",
            agent: agent.name(),
            ..ImportReport::default()
        };
        let mut chunk: Vec<(&PathBuf, Transcript)> = Vec::new();
        let mut chunk_events = 0;
        for (i, file) in files.iter().enumerate() {
            progress(i, files.len());
            report.files += 1;
            // Opened without blocking, and only a regular file: a FIFO or a device
            // named as a transcript is reported, never waited on. One file may hold
            // many sessions (OpenCode's database).
            let transcripts = match agent.import_file(file) {
                Ok(t) => t,
                Err(e) => {
                    report.failed.push(ImportFailure {
                        file: file.clone(),
                        error: e.to_string(),
                    });
                    continue;
                }
            };
            for t in transcripts {
                report.bad_lines += t.bad_lines;
                report.partial_lines += u64::from(t.partial_tail > 0);
                for (k, n) in &t.skipped {
                    *report.skipped_entries.entry(k.clone()).or_default() += n;
                }
                for (k, n) in &t.unknown {
                    *report.unknown_entries.entry(k.clone()).or_default() += n;
                }
                // A session a transcript of this chunk already brings waits for the next
                // chunk: what it holds by then decides what is new.
                let again = chunk.iter().any(|(_, c)| c.session == t.session);
                if again
                    || chunk.len() >= CHUNK_TRANSCRIPTS
                    || chunk_events + t.events.len() > CHUNK_EVENTS
                {
                    self.import_chunk(std::mem::take(&mut chunk), &mut report);
                    chunk_events = 0;
                }
                chunk_events += t.events.len();
                chunk.push((file, t));
            }
        }
        self.import_chunk(chunk, &mut report);
        progress(files.len(), files.len());
        report
    }

    /// Imports `chunk` through one ingest, or transcript by transcript if that fails.
    fn import_chunk(&self, chunk: Vec<(&PathBuf, Transcript)>, report: &mut ImportReport) {
        if chunk.len() > 1 {
            let mut tentative = ImportReport::default();
            let together = (|| {
                let mut planned = Vec::new();
                for (_, t) in &chunk {
                    if let Some(p) = self.plan(t, &mut tentative)? {
                        planned.push(p);
                    }
                }
                self.ingest_planned(&planned, format!("{} transcripts", chunk.len()))?;
                count_added(&planned, &mut tentative);
                Ok::<(), String>(())
            })();
            if together.is_ok() {
                report.absorb(tentative);
                return;
            }
        }
        for (file, t) in &chunk {
            let one = self.plan(t, report).and_then(|p| {
                let Some(p) = p else { return Ok(()) };
                let planned = [p];
                self.ingest_planned(&planned, format!("transcript of {}", t.session))?;
                count_added(&planned, report);
                Ok(())
            });
            if let Err(error) = one {
                report.failed.push(ImportFailure {
                    file: (*file).clone(),
                    error,
                });
            }
        }
    }

    /// What `t` adds to its session; `None` when nothing (counted in `report`).
    fn plan<'t>(
        &self,
        t: &'t Transcript,
        report: &mut ImportReport,
    ) -> Result<Option<Planned<'t>>, String> {
        let exists = self.log().has_session(&t.session);
        let mut held: BTreeSet<String> = BTreeSet::new();
        let mut ended = false;
        if exists {
            self.log()
                .read_session(&t.session, |e| {
                    if let Some(k) = dedup_key(&e.event.body) {
                        held.insert(k);
                    }
                    ended = matches!(e.event.body, EventBody::SessionEnd(_));
                })
                .map_err(|e| e.to_string())?;
        }
        let mut fresh = Vec::new();
        for (time, body) in &t.events {
            if matches!(body, EventBody::SessionStart(_)) {
                if exists {
                    continue;
                }
            } else if let Some(k) = dedup_key(body)
                && !held.insert(k)
            {
                report.events_already_recorded += 1;
                continue;
            }
            fresh.push((*time, body));
        }
        if fresh.is_empty() {
            report.sessions_unchanged += 1;
            return Ok(None);
        }
        if ended {
            report.events_after_end += fresh.len() as u64;
            report.sessions_unchanged += 1;
            return Ok(None);
        }
        Ok(Some(Planned {
            session: &t.session,
            exists,
            fresh,
        }))
    }

    /// Records what `planned` adds through one ingest, made durable together; more
    /// than one transcript's new sessions go into one pack.
    fn ingest_planned(&self, planned: &[Planned], source: String) -> Result<(), String> {
        let opts = IngestOptions {
            pack_new_sessions: planned.len() > 1,
            outside: false,
            ..IngestOptions::one_batch(source)
        };
        let mut ingest = Ingest::new(self, opts, |_| Ok(())).map_err(|e| e.to_string())?;
        for p in planned {
            for (time, body) in &p.fresh {
                ingest
                    .event(0, p.session.to_owned(), *time, (*body).clone())
                    .map_err(|e| e.to_string())?;
            }
        }
        ingest.finish().map_err(|e| e.error.to_string())?;
        Ok(())
    }
}

/// Counts what `planned` added, once it is recorded.
fn count_added(planned: &[Planned], report: &mut ImportReport) {
    for p in planned {
        report.events_added += p.fresh.len() as u64;
        if p.exists {
            report.sessions_extended += 1;
        } else {
            report.sessions_created += 1;
        }
        report.sessions.push(p.session.to_owned());
    }
}
