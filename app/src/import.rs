//! `tacho import claude-code|codex`: transcripts of sessions that already happened
//! (Claude Code transcripts, Codex rollouts), recorded through the one ingest path.
//!
//! Idempotent: every imported event carries the agent's own id, and only events whose
//! id the session does not hold yet are appended — importing again adds nothing, and a
//! transcript that grew adds only its new part. A session that already ended (recorded
//! by hooks, say) takes nothing more: what the transcript has beyond it is reported.
//!
//! A session reads like it happened: a transcript's events are recorded in the order
//! of their times ([`Transcript::in_time_order`]). A transcript that has not grown for
//! [`ImportOptions::stale_after`] gets a `session.end` saying it was inferred
//! ([`tacho_agents::import::inferred_end`]); found grown by a later import, it goes on
//! as a new session `<id>.2` (`.3`, …) whose parent is the one that was ended.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tacho_agents::Agent;
use tacho_agents::import::{
    Transcript, dedup_key, end_the_agent_wrote, inferred_end, is_inferred_end,
};
use tacho_agents::session_id_from;
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
    /// Sessions given a `session.end` inferred from a stale transcript.
    pub sessions_ended_inferred: u64,
    /// Sessions whose transcript grew after their inferred end: continued as
    /// `<id>.2`, `.3`, … (counted in `sessions_created` too).
    pub sessions_continued: u64,
    /// Transcript lines that were not JSON.
    pub bad_lines: u64,
    /// Files whose last line had no newline yet (left for the next import).
    pub partial_lines: u64,
    /// Where damaged lines are (the first [`tacho_agents::import::DAMAGE_KEPT`] of
    /// each file, at most [`DAMAGE_LISTED`] in all): file, 1-based line, byte offset,
    /// why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub damage: Vec<ImportDamage>,
    /// Entries not recorded, by type (known noise and unknown types).
    pub skipped_entries: BTreeMap<String, u64>,
    /// Of those, the entry types this tacho does not know, by type.
    pub unknown_entries: BTreeMap<String, u64>,
    /// Files that could not be imported, with why.
    pub failed: Vec<ImportFailure>,
    /// Sessions that received events.
    pub sessions: Vec<String>,
}

/// How `tacho import` reads transcripts.
#[derive(Debug, Clone, Copy)]
pub struct ImportOptions {
    /// A transcript that has not grown (by its modification time) for this long is
    /// taken as finished: its session gets an inferred `session.end`. `None`: never.
    pub stale_after: Option<Duration>,
}

/// The default of [`ImportOptions::stale_after`] (`tacho import --stale-after`,
/// `TACHO_IMPORT_STALE_AFTER`): 30 minutes, longer than an agent waits on a model or
/// a tool, shorter than a working session's pauses are usually counted in.
pub const STALE_AFTER_DEFAULT: Duration = Duration::from_secs(30 * 60);

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            stale_after: Some(STALE_AFTER_DEFAULT),
        }
    }
}

/// A duration as `tacho import --stale-after` and `TACHO_IMPORT_STALE_AFTER` take it:
/// [`whole_duration`], or `never` (`None`).
pub fn parse_stale_after(s: &str) -> Result<Option<Duration>, String> {
    if s == "never" {
        return Ok(None);
    }
    whole_duration(s)
        .map(Some)
        .ok_or_else(|| format!("{s:?}: a number with s, m or h (such as 30m), or never"))
}

/// A whole number of seconds, minutes or hours (`90s`, `30m`, `8h`), as durations are
/// given on tacho's command line (`--stale-after`, `watch --idle`).
pub fn whole_duration(s: &str) -> Option<Duration> {
    let secs = match s.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        _ => return None,
    };
    s.get(..s.len() - 1)?
        .parse::<u64>()
        .ok()?
        .checked_mul(secs)
        .map(Duration::from_secs)
}

/// How many damaged lines an import report lists (all are counted in `bad_lines`).
pub const DAMAGE_LISTED: usize = 100;

/// One damaged line of a transcript.
#[derive(Debug, Clone, Serialize)]
pub struct ImportDamage {
    pub file: PathBuf,
    pub line: u64,
    pub offset: u64,
    pub reason: String,
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
            } else if ft.is_file()
                && (agent.is_transcript(&p) || agent.unread_format(&p, true).is_some())
            {
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
struct Planned {
    session: String,
    exists: bool,
    fresh: Vec<(i64, EventBody)>,
    /// Of `fresh`, the events tacho adds itself (an end inferred or written by the
    /// agent's shutdown record): counted apart from the transcript's.
    own: u64,
}

/// Since when a transcript has not grown, when that is longer than the stale time.
#[derive(Debug, Clone)]
struct Stale {
    /// Its modification time, RFC 3339.
    since: String,
    /// The stale time, as given (`30m`).
    after: String,
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
        self.sessions_ended_inferred += other.sessions_ended_inferred;
        self.sessions_continued += other.sessions_continued;
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
        opts: &ImportOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> ImportReport {
        let mut report = ImportReport {
            kind: "import",
            agent: agent.name(),
            ..ImportReport::default()
        };
        let mut chunk: Vec<(&PathBuf, Transcript, Option<Stale>)> = Vec::new();
        let mut chunk_events = 0;
        for (i, file) in files.iter().enumerate() {
            progress(i, files.len());
            report.files += 1;
            if let Some(why) = agent.unread_format(file, false) {
                report.failed.push(ImportFailure {
                    file: file.clone(),
                    error: why,
                });
                continue;
            }
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
            // (One modification time for the file: every session of a database file is
            // as stale as the file.)
            let stale = self.stale(file, opts);
            for mut t in transcripts {
                // A document that is not whole is a failure of its file, never a
                // session read as empty.
                if let Some(why) = t.broken.take() {
                    report.bad_lines += t.bad_lines;
                    report.failed.push(ImportFailure {
                        file: file.clone(),
                        error: why,
                    });
                    continue;
                }
                t.in_time_order();
                t.with_todo_updates(agent.name());
                for (line, offset, reason) in std::mem::take(&mut t.damage) {
                    if report.damage.len() < DAMAGE_LISTED {
                        report.damage.push(ImportDamage {
                            file: file.clone(),
                            line,
                            offset,
                            reason,
                        });
                    }
                }
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
                let again = chunk.iter().any(|(_, c, _)| c.session == t.session);
                if again
                    || chunk.len() >= CHUNK_TRANSCRIPTS
                    || chunk_events + t.events.len() > CHUNK_EVENTS
                {
                    self.import_chunk(std::mem::take(&mut chunk), &mut report);
                    chunk_events = 0;
                }
                chunk_events += t.events.len();
                chunk.push((file, t, stale.clone()));
            }
        }
        self.import_chunk(chunk, &mut report);
        progress(files.len(), files.len());
        report
    }

    /// Whether `file` has not grown for the stale time: since when, and that time.
    fn stale(&self, file: &Path, opts: &ImportOptions) -> Option<Stale> {
        let after = opts.stale_after?;
        let modified = std::fs::metadata(file).ok()?.modified().ok()?;
        let mtime_ns = i64::try_from(
            modified
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_nanos(),
        )
        .ok()?;
        let idle_ns = self.now().saturating_sub(mtime_ns);
        let after_ns = i64::try_from(after.as_nanos()).unwrap_or(i64::MAX);
        (idle_ns >= after_ns).then(|| Stale {
            since: tacho_schema::time_to_rfc3339(mtime_ns),
            after: duration_text(after),
        })
    }

    /// Imports `chunk` through one ingest, or transcript by transcript if that fails.
    fn import_chunk(
        &self,
        chunk: Vec<(&PathBuf, Transcript, Option<Stale>)>,
        report: &mut ImportReport,
    ) {
        if chunk.len() > 1 {
            let mut tentative = ImportReport::default();
            let together = (|| {
                let mut planned = Vec::new();
                for (_, t, stale) in &chunk {
                    if let Some(p) = self.plan(t, stale.as_ref(), &mut tentative)? {
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
        for (file, t, stale) in &chunk {
            let one = self.plan(t, stale.as_ref(), report).and_then(|p| {
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

    /// What `t` adds to its session; `None` when nothing (counted in `report`). A
    /// session whose end was inferred and whose transcript has events it lacks goes on
    /// as `<id>.2` (then `.3`, …), holding what the sessions before it hold; a `stale`
    /// transcript's session that has not ended gets an inferred end.
    fn plan(
        &self,
        t: &Transcript,
        stale: Option<&Stale>,
        report: &mut ImportReport,
    ) -> Result<Option<Planned>, String> {
        let mut session = t.session.clone();
        let mut held: BTreeSet<String> = BTreeSet::new();
        let mut continues: Option<String> = None;
        let mut generation = 1u32;
        // The time of the last event the session holds.
        let mut latest: i64;
        let (exists, ended) = loop {
            let exists = self.log().has_session(&session);
            let (mut ended, mut inferred) = (false, false);
            latest = 0;
            if exists {
                self.log()
                    .read_session(&session, |e| {
                        if let Some(k) = dedup_key(&e.event.body) {
                            held.insert(k);
                        }
                        latest = latest.max(e.event.time_unix_ns);
                        ended = matches!(e.event.body, EventBody::SessionEnd(_));
                        inferred = is_inferred_end(&e.event.body);
                    })
                    .map_err(|e| e.to_string())?;
            }
            let grown = t
                .events
                .iter()
                .filter_map(|(_, b)| dedup_key(b))
                .any(|k| !held.contains(&k));
            if !(ended && inferred && grown) {
                break (exists, ended);
            }
            generation += 1;
            continues = Some(std::mem::replace(
                &mut session,
                session_id_from(&format!("{}.{generation}", t.session)),
            ));
        };
        let mut fresh = Vec::new();
        for (time, body) in &t.events {
            if let EventBody::SessionStart(start) = body {
                if exists {
                    report.events_already_recorded += 1;
                    continue;
                }
                let mut start = start.clone();
                if let Some(previous) = &continues {
                    start.parent = Some(previous.clone());
                }
                fresh.push((*time, EventBody::SessionStart(start)));
            } else if let Some(k) = dedup_key(body)
                && !held.insert(k)
            {
                report.events_already_recorded += 1;
            } else {
                fresh.push((*time, body.clone()));
            }
        }
        // A continuation starts with the first event it takes.
        if continues.is_some()
            && let Some(first) = fresh.get(1).map(|(t, _)| *t)
            && let Some((time, _)) = fresh.first_mut()
        {
            *time = first;
        }
        if ended {
            report.events_after_end += fresh.len() as u64;
            report.sessions_unchanged += 1;
            return Ok(None);
        }
        // A file that names a session and nothing done in it (Qwen Code's
        // `usage_record.jsonl` beside its transcripts) starts none: the session starts
        // with the transcript of what it did, at that transcript's time.
        let adds = fresh
            .iter()
            .any(|(_, b)| !matches!(b, EventBody::SessionStart(_)));
        if !adds && !exists {
            report.sessions_unchanged += 1;
            return Ok(None);
        }
        // A session whose hooks keep its state is theirs to end (the agent may be
        // waiting on its user); `tacho session end` ends one whose agent died.
        let hooked = self.hook_recorder(&session).is_some();
        let stale = stale.filter(|_| !hooked);
        let mut own = 0;
        if let Some((at, what)) = t.ended_by_agent.as_ref().filter(|_| !hooked) {
            // The agent wrote its own end (Copilot CLI's `session.shutdown`).
            fresh.push((latest.max(*at), end_the_agent_wrote(what)));
            report.sessions_ended_inferred += 1;
            own += 1;
        } else if let Some(stale) = stale {
            // At its last event, the transcript's or one recorded otherwise.
            let last = t
                .events
                .last()
                .map_or(latest, |(time, _)| latest.max(*time));
            fresh.push((
                last,
                inferred_end(t.has_unanswered_calls(), &stale.since, &stale.after),
            ));
            report.sessions_ended_inferred += 1;
            own += 1;
        } else if fresh.is_empty() {
            report.sessions_unchanged += 1;
            return Ok(None);
        }
        if continues.is_some() {
            report.sessions_continued += 1;
        }
        Ok(Some(Planned {
            session,
            exists,
            fresh,
            own,
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
                    .event(0, p.session.clone(), *time, body.clone())
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
        // The transcript's events; an end tacho infers is said apart ("given an
        // inferred end"), so that a second import's "already recorded" is this count.
        report.events_added += (p.fresh.len() as u64).saturating_sub(p.own);
        if p.exists {
            report.sessions_extended += 1;
        } else {
            report.sessions_created += 1;
        }
        report.sessions.push(p.session.clone());
    }
}

/// A stale time in words, as it is given (`30m`, `2h`, `90s`).
fn duration_text(d: Duration) -> String {
    let s = d.as_secs();
    if s > 0 && s.is_multiple_of(3_600) {
        format!("{}h", s / 3_600)
    } else if s > 0 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}
