//! `tacho record`: JSON Lines events in, batches appended.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, ValueEnum};
use tacho_schema::{EventBody, parse_json_line};
use tacho_store::{Durability, Writer, hex};

use crate::error::CliError;
use crate::home::open_store;
use crate::output::Out;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DurabilityArg {
    /// Every batch is synced to disk before it is reported as recorded.
    Sync,
    /// Batches are handed to the OS without a sync (faster; a machine crash may lose them).
    Buffered,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// JSON Lines file to read; stdin when absent or `-`.
    pub file: Option<PathBuf>,
    /// Session id for lines that have no `session` field.
    #[arg(long)]
    pub session: Option<String>,
    /// Record under fresh session ids: each session of the input gets a new id
    /// (printed), so the same file can be recorded again.
    #[arg(long, conflicts_with = "session")]
    pub new_session: bool,
    #[arg(long, value_enum, default_value = "sync")]
    pub durability: DurabilityArg,
    /// Lines per batch. 0 (the default) makes the whole input one batch: all of it is
    /// recorded or none of it. With N > 0, a bad line rejects its batch and stops;
    /// earlier batches stay recorded.
    #[arg(long, default_value_t = 0)]
    pub batch_lines: usize,
    /// Print one JSON object per committed batch on stdout, as soon as it is recorded
    /// (an acknowledgement a streaming producer can wait for).
    #[arg(long)]
    pub json: bool,
    /// Snapshots of the session's workspace (when it exists on this machine): `auto`
    /// takes one after session.start (the baseline), before each step.start and
    /// before session.end; `off` only on `snapshot.take` lines.
    #[arg(long, value_enum, default_value = "auto")]
    pub snapshots: SnapshotsArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SnapshotsArg {
    Auto,
    Off,
}

/// A `snapshot.take` line: not an event but a request to take a snapshot now, which is
/// recorded as a `snapshot.taken` event.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotRequest {
    #[serde(rename = "type")]
    _type: String,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    ts: Option<serde_json::Value>,
    #[serde(default)]
    workspace: Option<String>,
    #[serde(default)]
    before_step: Option<u64>,
    /// Only these paths (reported by an edit tool), on top of the last snapshot.
    #[serde(default)]
    paths: Vec<String>,
}

struct Pending {
    line: usize,
    session: String,
    time_unix_ns: i64,
    body: EventBody,
}

#[derive(Default)]
struct Total {
    first_seq: Option<u64>,
    last_seq: u64,
    events: u64,
}

struct Recorder {
    store: tacho_store::Store,
    /// With `--json`: one acknowledgement per committed batch, written (and flushed)
    /// as soon as the batch is durable as requested.
    acks: Option<Out>,
    durability: Durability,
    source: String,
    writers: BTreeMap<String, Writer>,
    totals: BTreeMap<String, Total>,
    recorded: u64,
    auto_snapshots: bool,
    snapshots: Option<tacho_git::snapshot::SnapshotStore>,
    /// Each session's workspace, when it is a directory on this machine.
    workspaces: BTreeMap<String, Option<PathBuf>>,
}

/// Now, in nanoseconds since the epoch.
pub fn now_unix_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// A fresh, time-ordered session id: `ses_` and a lower-case ULID.
pub fn new_session_id() -> String {
    format!("ses_{}", ulid::Ulid::generate().to_string().to_lowercase())
}

impl Recorder {
    /// The workspace of `session`: from a `session.start` seen in this input, else
    /// from the log.
    fn workspace(&mut self, session: &str) -> Result<Option<PathBuf>, CliError> {
        if let Some(w) = self.workspaces.get(session) {
            return Ok(w.clone());
        }
        let w = if self.store.has_session(session) {
            crate::snapshots::session_workspace(&self.store, session)?
                .map(PathBuf::from)
                .filter(|p| p.is_dir())
        } else {
            None
        };
        self.workspaces.insert(session.to_string(), w.clone());
        Ok(w)
    }

    /// Takes a snapshot of `workspace` now and returns its event.
    fn snapshot(
        &mut self,
        workspace: &std::path::Path,
        paths: &[String],
        reason: tacho_schema::SnapshotReason,
        before_step: Option<u64>,
    ) -> Result<EventBody, CliError> {
        if self.snapshots.is_none() {
            self.snapshots = Some(crate::snapshots::open_snapshots()?);
        }
        let store = self
            .snapshots
            .as_ref()
            .ok_or_else(|| CliError::Io("snapshot store vanished".into()))?;
        let (snap, ws) = crate::snapshots::take(store, workspace, paths)?;
        Ok(crate::snapshots::taken_event(
            &snap,
            &ws,
            reason,
            before_step,
        ))
    }

    /// Queues `p`, with the snapshots that automatic mode takes around it.
    fn push(&mut self, p: Pending, batch: &mut Vec<Pending>) -> Result<(), CliError> {
        if let EventBody::SessionStart(s) = &p.body {
            let w = s
                .workspace
                .as_ref()
                .map(PathBuf::from)
                .filter(|w| w.is_dir());
            self.workspaces.insert(p.session.clone(), w);
        }
        let (before, after) = crate::snapshots::auto_points(&p.body);
        let ws = if self.auto_snapshots && (before.is_some() || after.is_some()) {
            self.workspace(&p.session)?
        } else {
            None
        };
        let (line, session, time) = (p.line, p.session.clone(), p.time_unix_ns);
        if let Some(ws) = &ws {
            self.auto_snapshot(ws, before, line, &session, time, batch);
            batch.push(p);
            self.auto_snapshot(ws, after, line, &session, time, batch);
        } else {
            batch.push(p);
        }
        Ok(())
    }

    /// Takes an automatic snapshot and queues its event. A snapshot that cannot be
    /// taken never costs the events: it is reported on stderr and left out.
    fn auto_snapshot(
        &mut self,
        ws: &std::path::Path,
        when: crate::snapshots::AutoPoint,
        line: usize,
        session: &str,
        time_unix_ns: i64,
        batch: &mut Vec<Pending>,
    ) {
        let Some((reason, step)) = when else { return };
        match self.snapshot(ws, &[], reason, step) {
            Ok(body) => batch.push(Pending {
                line,
                session: session.to_owned(),
                time_unix_ns,
                body,
            }),
            Err(e) => eprintln!(
                "note: line {line}: no {reason} snapshot of {} for session {session}: {e}",
                ws.display()
            ),
        }
    }

    fn writer(&mut self, session: &str) -> Result<&mut Writer, CliError> {
        if !self.writers.contains_key(session) {
            let w = self.store.writer(session)?;
            for r in w.recovered() {
                eprintln!(
                    "note: session {session}: cut a torn tail of {} bytes at offset {} of {} ({})",
                    r.truncated_bytes,
                    r.offset,
                    r.segment.display(),
                    r.reason
                );
            }
            self.writers.insert(session.to_string(), w);
        }
        self.writers
            .get_mut(session)
            .ok_or_else(|| CliError::Io("writer vanished".into()))
    }

    /// Checks a whole batch against every session's rules, then appends it, one
    /// session-batch per session.
    fn flush(&mut self, batch: &mut Vec<Pending>) -> Result<(), CliError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut groups: BTreeMap<String, Vec<Pending>> = BTreeMap::new();
        for p in batch.drain(..) {
            groups.entry(p.session.clone()).or_default().push(p);
        }
        // Writers open in id order, so two recorders never wait for each other in a cycle.
        for (session, items) in &groups {
            let source = self.source.clone();
            let w = self.writer(session)?;
            if let Err((i, reason)) = w.check_batch(items.iter().map(|p| &p.body)) {
                return Err(CliError::Input(format!(
                    "{source}: line {}: {reason}",
                    items[i].line
                )));
            }
        }
        for (session, items) in groups {
            let events: Vec<(i64, EventBody)> = items
                .into_iter()
                .map(|p| (p.time_unix_ns, p.body))
                .collect();
            let durability = self.durability;
            let receipt = self.writer(&session)?.append_batch(&events, durability)?;
            if let Some(out) = self.acks.as_mut() {
                out.json(&serde_json::json!({
                    "type": "recorded",
                    "session": session,
                    "events": events.len(),
                    "first_seq": receipt.first_seq,
                    "last_seq": receipt.last_seq,
                    "head": hex(&receipt.chain),
                }))?;
                out.flush()?;
            }
            let t = self.totals.entry(session).or_default();
            t.first_seq.get_or_insert(receipt.first_seq);
            t.last_seq = receipt.last_seq;
            t.events += events.len() as u64;
            self.recorded += events.len() as u64;
        }
        Ok(())
    }
}

pub fn run(a: RecordArgs) -> Result<(), CliError> {
    if let Some(s) = &a.session {
        tacho_schema::validate_session_id(s)
            .map_err(|e| CliError::Input(format!("--session: {e}")))?;
    }
    let (input, source): (Box<dyn BufRead>, String) = match &a.file {
        Some(p) if p.as_os_str() != "-" => {
            let f = std::fs::File::open(p)
                .map_err(|e| CliError::Input(format!("{}: {e}", p.display())))?;
            (Box::new(BufReader::new(f)), p.display().to_string())
        }
        _ => (
            Box::new(BufReader::new(std::io::stdin().lock())),
            "stdin".to_string(),
        ),
    };
    let mut rec = Recorder {
        store: open_store()?,
        durability: match a.durability {
            DurabilityArg::Sync => Durability::Sync,
            DurabilityArg::Buffered => Durability::Buffered,
        },
        acks: a.json.then(Out::new),
        source: source.clone(),
        writers: BTreeMap::new(),
        totals: BTreeMap::new(),
        recorded: 0,
        auto_snapshots: a.snapshots == SnapshotsArg::Auto,
        snapshots: None,
        workspaces: BTreeMap::new(),
    };
    let mut renamed: BTreeMap<Option<String>, String> = BTreeMap::new();
    let mut batch: Vec<Pending> = Vec::new();
    let result = (|| -> Result<(), CliError> {
        for (i, line) in input.lines().enumerate() {
            let line_no = i + 1;
            let text =
                line.map_err(|e| CliError::Input(format!("{source}: line {line_no}: {e}")))?;
            if text.trim().is_empty() {
                continue;
            }
            if text.contains("\"snapshot.take\"")
                && let Ok(req) = serde_json::from_str::<SnapshotRequest>(&text)
                && req._type == "snapshot.take"
            {
                let session = if a.new_session {
                    renamed
                        .entry(req.session.clone())
                        .or_insert_with(new_session_id)
                        .clone()
                } else {
                    req.session
                        .clone()
                        .or_else(|| a.session.clone())
                        .ok_or_else(|| {
                            CliError::Input(format!(
                                "{source}: line {line_no}: snapshot.take: no session"
                            ))
                        })?
                };
                let ws = match &req.workspace {
                    Some(w) => Some(PathBuf::from(w)),
                    None => rec.workspace(&session)?,
                };
                let ws = ws.ok_or_else(|| {
                    CliError::Input(format!(
                        "{source}: line {line_no}: snapshot.take: no `workspace`, and session {session} names none that exists here"
                    ))
                })?;
                let reason = if req.before_step.is_some() {
                    tacho_schema::SnapshotReason::Step
                } else {
                    tacho_schema::SnapshotReason::Manual
                };
                let body = rec
                    .snapshot(&ws, &req.paths, reason, req.before_step)
                    .map_err(|e| {
                        CliError::Input(format!("{source}: line {line_no}: snapshot.take: {e}"))
                    })?;
                let time_unix_ns = match &req.ts {
                    Some(serde_json::Value::Number(n)) => n.as_i64().map(|ms| ms * 1_000_000),
                    Some(serde_json::Value::String(t)) => tacho_schema::parse_rfc3339(t).ok(),
                    _ => None,
                }
                .unwrap_or_else(now_unix_ns);
                batch.push(Pending {
                    line: line_no,
                    session,
                    time_unix_ns,
                    body,
                });
                continue;
            }
            let mut parsed = parse_json_line(&text, line_no)
                .map_err(|e| CliError::Input(format!("{source}: {e}")))?;
            let session = if a.new_session {
                let fresh = renamed
                    .entry(parsed.session.clone())
                    .or_insert_with(new_session_id)
                    .clone();
                // A parent recorded in the same input is renamed with it; a session
                // without a parent keeps none.
                if let EventBody::SessionStart(s) = &mut parsed.body
                    && let Some(parent) = s.parent.take()
                {
                    let fresh_parent = renamed.get(&Some(parent.clone())).cloned();
                    s.parent = Some(fresh_parent.unwrap_or(parent));
                }
                fresh
            } else {
                parsed.session.or_else(|| a.session.clone()).ok_or_else(|| {
                    CliError::Input(format!(
                        "{source}: line {line_no}: no session: give the line a `session` field, or pass --session or --new-session"
                    ))
                })?
            };
            rec.push(
                Pending {
                    line: line_no,
                    session,
                    time_unix_ns: parsed.time_unix_ns.unwrap_or_else(now_unix_ns),
                    body: parsed.body,
                },
                &mut batch,
            )?;
            if a.batch_lines > 0 && batch.len() >= a.batch_lines {
                rec.flush(&mut batch)?;
            }
        }
        rec.flush(&mut batch)
    })();
    if let Err(e) = result {
        let e = match e {
            CliError::Input(m) => CliError::Input(if rec.recorded == 0 {
                format!("{m}\nnothing was recorded")
            } else {
                format!(
                    "{m}\nthat batch was not recorded; {} events of earlier batches were",
                    rec.recorded
                )
            }),
            other => other,
        };
        return Err(e);
    }
    if let Some(out) = rec.acks.take() {
        return out.finish();
    }
    for (session, t) in &rec.totals {
        eprintln!(
            "recorded {} event(s) in session {session} (seq {}..={})",
            t.events,
            t.first_seq.unwrap_or(0),
            t.last_seq
        );
    }
    if rec.totals.is_empty() {
        eprintln!("no events in {source}");
    }
    Ok(())
}
