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
use tacho_agents::import::{Transcript, dedup_key, read_claude_transcript, read_codex_rollout};
use tacho_schema::EventBody;
use tacho_store::Durability;

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

/// Every `*.jsonl` under `dir`, recursively (subagent transcripts included), sorted so
/// that a main session's transcript comes before its subagents'.
pub fn transcripts_under(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let ft = entry.file_type()?;
            let p = entry.path();
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() && p.extension().is_some_and(|e| e == "jsonl") {
                out.push(p);
            }
        }
    }
    // Main transcripts first (fewer path components under the project), then by name.
    out.sort_by_key(|p| (p.components().count(), p.clone()));
    Ok(out)
}

impl Tacho {
    /// Imports transcripts of `agent` (Claude Code transcripts, Codex rollouts).
    /// `progress` hears (files done, files in all).
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
        for (i, file) in files.iter().enumerate() {
            progress(i, files.len());
            report.files += 1;
            let bytes = match std::fs::read(file) {
                Ok(b) => b,
                Err(e) => {
                    report.failed.push(ImportFailure {
                        file: file.clone(),
                        error: e.to_string(),
                    });
                    continue;
                }
            };
            let t = match agent {
                Agent::ClaudeCode => read_claude_transcript(file, &bytes),
                Agent::Codex => read_codex_rollout(file, &bytes),
            };
            report.bad_lines += t.bad_lines;
            report.partial_lines += u64::from(t.partial_tail > 0);
            for (k, n) in &t.skipped {
                *report.skipped_entries.entry(k.clone()).or_default() += n;
            }
            if let Err(e) = self.import_transcript(&t, &mut report) {
                report.failed.push(ImportFailure {
                    file: file.clone(),
                    error: e,
                });
            }
        }
        progress(files.len(), files.len());
        report
    }

    fn import_transcript(&self, t: &Transcript, report: &mut ImportReport) -> Result<(), String> {
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
            fresh.push((*time, body.clone()));
        }
        if fresh.is_empty() {
            report.sessions_unchanged += 1;
            return Ok(());
        }
        if ended {
            report.events_after_end += fresh.len() as u64;
            report.sessions_unchanged += 1;
            return Ok(());
        }
        let opts = IngestOptions {
            source: format!("transcript of {}", t.session),
            session: None,
            new_session: false,
            durability: Durability::Sync,
            batch_lines: 0,
            auto_snapshots: false,
            pack_new_sessions: false,
        };
        let mut ingest = Ingest::new(self, opts, |_| Ok(())).map_err(|e| e.to_string())?;
        let n = fresh.len() as u64;
        for (time, body) in fresh {
            ingest
                .event(0, t.session.clone(), time, body)
                .map_err(|e| e.to_string())?;
        }
        ingest.finish().map_err(|e| e.error.to_string())?;
        report.events_added += n;
        if exists {
            report.sessions_extended += 1;
        } else {
            report.sessions_created += 1;
        }
        report.sessions.push(t.session.clone());
        Ok(())
    }
}
