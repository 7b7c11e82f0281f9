//! The one ingest path: JSON Lines (or typed events) in, validated batches appended,
//! with automatic snapshots at step boundaries. `tacho record` and `tacho demo` use
//! it, and so will hooks and importers.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use tacho_schema::{
    EventBody, GitCommits, JsonError, ObservedCommit, Provenance, SnapshotReason, parse_json_line,
};
use tacho_store::{Durability, StoreError, Writer, hex};

use crate::Tacho;
use crate::error::{ErrorKind, Field, Kind, Named, Namer, neutral};
use crate::snapshots::{AutoPoint, SnapshotOpError, auto_points, taken_event};

/// The longest input line accepted: the largest event payload, with room for its JSON
/// form (escaping can double a string). A longer line is refused before it is held.
pub const LINE_BYTES_MAX: usize = 2 * tacho_log_format::FRAME_PAYLOAD_BYTES_MAX as usize + 4096;

/// The next line of `input` (numbered from `*line`, which it advances), at most `cap`
/// bytes; `None` at the end.
fn next_capped_line(
    input: &mut impl std::io::BufRead,
    cap: usize,
    line: &mut usize,
) -> Option<(usize, std::io::Result<String>)> {
    use std::io::{BufRead, Read};
    *line += 1;
    let mut buf = Vec::new();
    let read = input.take(cap as u64 + 1).read_until(b'\n', &mut buf);
    let r = match read {
        Ok(0) => return None,
        Ok(_) if buf.len() > cap && buf.last() != Some(&b'\n') => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("longer than {cap} bytes: an event line is at most that"),
        )),
        Ok(_) => {
            if buf.last() == Some(&b'\n') {
                buf.pop();
                if buf.last() == Some(&b'\r') {
                    buf.pop();
                }
            }
            String::from_utf8(buf)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()))
        }
        Err(e) => Err(e),
    };
    Some((*line, r))
}

/// How to ingest.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Names the input in error messages (a path, or `stdin`).
    pub source: String,
    /// The session of lines that have no `session` field.
    pub session: Option<String>,
    /// Each session of the input gets a fresh id (a parent recorded in the same input
    /// is renamed with it), so the same input can be recorded again.
    pub new_session: bool,
    pub durability: Durability,
    /// Events per batch; 0 makes the whole input one batch.
    pub batch_lines: usize,
    /// Take a baseline after `session.start`, one before each `step.start` and a final
    /// one before `session.end`, when the session's workspace exists here.
    pub auto_snapshots: bool,
    /// Write the sessions a one-batch input creates, once it spans sessions, into packs
    /// (SPEC.md §1.1): for bulk inputs (`tacho record`), not for a hook that records a
    /// subagent's session beside its parent's.
    pub pack_new_sessions: bool,
    /// The input comes from outside tacho (`tacho record`): events for a session that
    /// tacho's hooks record are refused, and so is an event earlier than its
    /// session's start (SPEC §3.1).
    pub outside: bool,
}

/// The `source` of a session `tacho record` started (its `session.start`): the
/// agent's own report, never what tacho's hooks saw.
pub const RECORD_SOURCE: &str = "tacho-record";

impl IngestOptions {
    /// What tacho records itself (a hook's events, imported transcripts, ends): every
    /// event given to the ingest in one batch, synced, named by `source`, without
    /// snapshots or packs.
    pub fn one_batch(source: impl Into<String>) -> Self {
        IngestOptions {
            source: source.into(),
            session: None,
            new_session: false,
            durability: Durability::Sync,
            batch_lines: 0,
            auto_snapshots: false,
            pack_new_sessions: false,
            outside: false,
        }
    }
}

/// A committed batch of one session.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BatchAck {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub session: String,
    pub events: usize,
    pub first_seq: u64,
    pub last_seq: u64,
    /// The chain value after the batch.
    pub head: String,
}

/// What one session received.
#[derive(Debug, Clone, Default)]
pub struct SessionTotal {
    pub first_seq: Option<u64>,
    pub last_seq: u64,
    pub events: u64,
}

/// Why ingesting stopped.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("{}", neutral(self))]
    BadSession(String),
    #[error("{source_name}: line {line}: {error}")]
    Read {
        source_name: String,
        line: usize,
        #[source]
        error: std::io::Error,
    },
    #[error("{source_name}: {error}")]
    Parse {
        source_name: String,
        #[source]
        error: JsonError,
    },
    #[error("{}", neutral(self))]
    NoSession { source_name: String, line: usize },
    #[error("{source_name}: line {line}: snapshot.take: no session")]
    SnapshotNoSession { source_name: String, line: usize },
    #[error(
        "{source_name}: line {line}: snapshot.take: no `workspace`, and session {session} names none that exists here"
    )]
    SnapshotNoWorkspace {
        source_name: String,
        line: usize,
        session: String,
    },
    #[error("{source_name}: line {line}: snapshot.take: field `ts`: {reason}")]
    SnapshotTime {
        source_name: String,
        line: usize,
        reason: String,
    },
    #[error("{source_name}: line {line}: snapshot.take: {error}")]
    Snapshot {
        source_name: String,
        line: usize,
        #[source]
        error: Box<SnapshotOpError>,
    },
    /// An evidence kind from outside: only tacho writes those.
    #[error(
        "{source_name}: line {line}: `{kind}` is evidence that only tacho writes (snapshots, rollbacks, branches, goals and their receipts); it is not accepted from outside"
    )]
    Evidence {
        source_name: String,
        line: usize,
        kind: &'static str,
    },
    /// The store refused the batch (sequence, lifecycle): nothing of it was written.
    #[error("{source_name}: line {line}: {reason}")]
    Rejected {
        source_name: String,
        line: usize,
        reason: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The acknowledgement of a committed batch could not be delivered.
    #[error("acknowledging a batch: {0}")]
    Ack(#[source] std::io::Error),
}

impl Kind for IngestError {
    fn kind(&self) -> ErrorKind {
        match self {
            IngestError::Store(e) => e.kind(),
            IngestError::Ack(_) => ErrorKind::Io,
            // Bytes that are not text are the input's fault; any other read error is
            // the machine's.
            IngestError::Read { error, .. } => match error.kind() {
                std::io::ErrorKind::InvalidData => ErrorKind::Input,
                _ => ErrorKind::Io,
            },
            IngestError::Snapshot { error, .. } => error.kind(),
            IngestError::BadSession(_)
            | IngestError::Parse { .. }
            | IngestError::NoSession { .. }
            | IngestError::SnapshotNoSession { .. }
            | IngestError::SnapshotNoWorkspace { .. }
            | IngestError::SnapshotTime { .. }
            | IngestError::Evidence { .. }
            | IngestError::Rejected { .. } => ErrorKind::Input,
        }
    }

    fn field(&self) -> Option<Field> {
        match self {
            IngestError::BadSession(_) | IngestError::NoSession { .. } => Some(Field::Session),
            _ => None,
        }
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        match self {
            IngestError::BadSession(why) => write!(f, "{}: {why}", name.field(Field::Session)),
            IngestError::NoSession { source_name, line } => write!(
                f,
                "{source_name}: line {line}: no session: give the line a `session` field, or pass {} or {}",
                name.field(Field::Session),
                name.field(Field::NewSession)
            ),
            other => fmt::Display::fmt(other, f),
        }
    }
}

/// An ingest that stopped, with what it had recorded before.
#[derive(Debug, thiserror::Error)]
pub struct RecordError {
    #[source]
    pub error: IngestError,
    /// Events of earlier batches that are recorded.
    pub recorded: u64,
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_named(f, &crate::error::Neutral)
    }
}

impl Kind for RecordError {
    fn kind(&self) -> ErrorKind {
        self.error.kind()
    }

    fn field(&self) -> Option<Field> {
        self.error.field()
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        let error = Named(&self.error, name);
        // What was recorded is said for the input's errors and for a read or a
        // snapshot that failed mid-way (the store's own errors say it themselves).
        let partial = matches!(
            self.error,
            IngestError::Read { .. } | IngestError::Snapshot { .. }
        );
        if self.error.kind() != ErrorKind::Input && !partial {
            return write!(f, "{error}");
        }
        if self.recorded == 0 {
            write!(f, "{error}\nnothing was recorded")
        } else {
            write!(
                f,
                "{error}\nthat batch was not recorded; {} events of earlier batches were",
                self.recorded
            )
        }
    }
}

/// A `snapshot.take` line: not an event but a request to take a snapshot now, which is
/// recorded as a `snapshot.taken` event.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotTake {
    /// Always `snapshot.take` (checked before this is read).
    #[serde(rename = "type")]
    _kind: String,
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

/// A line read and parsed, not yet taken in: what can be done apart from the ingest.
#[allow(clippy::large_enum_variant)] // nearly every line is an event: boxing it would allocate per line
enum ParsedInput {
    Blank,
    Take(SnapshotTake),
    Event(tacho_schema::ParsedLine),
}

/// Parses one line of input (`line` is 1-based).
fn parse_input(source_name: &str, line: usize, text: &str) -> Result<ParsedInput, IngestError> {
    if text.trim().is_empty() {
        return Ok(ParsedInput::Blank);
    }
    if text.contains("\"snapshot.take\"")
        && serde_json::from_str::<serde_json::Value>(text)
            .is_ok_and(|v| v["type"] == "snapshot.take")
    {
        return serde_json::from_str::<SnapshotTake>(text)
            .map(ParsedInput::Take)
            .map_err(|e| IngestError::Rejected {
                source_name: source_name.to_owned(),
                line,
                reason: format!("snapshot.take: {e}"),
            });
    }
    parse_json_line(text, line)
        .map(ParsedInput::Event)
        .map_err(|error| IngestError::Parse {
            source_name: source_name.to_owned(),
            error,
        })
}

/// The most sessions appended as one group: an input spanning up to this many
/// sessions is recorded whole or not at all; a larger one group by group.
pub const GROUP_SESSIONS_MAX: usize = 64;

/// The most writers an ingest keeps open (two files each).
pub const WRITERS_OPEN_MAX: usize = 64;

/// Chunks of input lines read ahead of the ingest, at most ([`Ingest::lines`]).
const CHUNKS_IN_FLIGHT: usize = 8;

/// Queued events are written (staged, not committed) once this many wait, whatever the
/// batch size (`batch_lines` 0, or larger than this): a batch is never held whole in
/// memory.
const STAGE_EVENTS: usize = 4096;

/// The most events an ingest holds folded at once (over all its open sessions; about
/// 60 bytes each). A session that would take the folds past it is not folded: its
/// facts are computed from its stream when the index first needs them, so memory stays
/// bounded by this however long the input's sessions are.
pub const FOLD_EVENTS_MAX: u64 = 200_000;

/// Turns the stream rules' verdict on `items` (`checked`: the index of the first that
/// breaks one, and why) into the input's error at that line, and refuses anything
/// after a `session.end` (`ended`: whether the session had ended before `items`).
fn check_items(
    source_name: &str,
    session: &str,
    checked: Result<(), (usize, String)>,
    mut ended: bool,
    items: &[Pending],
) -> Result<(), IngestError> {
    let rejected = |line: usize, reason: String| IngestError::Rejected {
        source_name: source_name.to_owned(),
        line,
        reason,
    };
    if let Err((i, reason)) = checked {
        return Err(rejected(items.get(i).map_or(0, |p| p.line), reason));
    }
    for p in items {
        if ended {
            return Err(rejected(
                p.line,
                format!(
                    "session {session} has ended: a {} after session.end is refused",
                    p.body.kind_name()
                ),
            ));
        }
        ended = matches!(p.body, EventBody::SessionEnd(_));
    }
    Ok(())
}

/// About the most bytes of one pack (the most sessions are the store's
/// `pack_sessions_max`): a larger input's new sessions go into several, each published
/// (and acknowledged) when full.
pub const PACK_BYTES_MAX: u64 = 256 << 20;

/// The most workspace spellings an ingest remembers.
const CANONICAL_KEPT: usize = 1024;

/// Hears of each committed batch; an error stops the ingest.
type OnBatch<'t> = Box<dyn FnMut(&BatchAck) -> std::io::Result<()> + 't>;

struct Pending {
    line: usize,
    session: String,
    time_unix_ns: i64,
    body: EventBody,
}

/// Queued events are staged as they are queued (an event body is ~300 bytes: copying
/// each into a tuple first was a third of a bulk ingest's main thread).
impl tacho_store::EventRef for Pending {
    fn time_unix_ns(&self) -> i64 {
        self.time_unix_ns
    }
    fn body(&self) -> &EventBody {
        &self.body
    }
}

/// An ingest in progress. Feed it lines or events; batches are appended as they fill
/// (every `batch_lines` events) and at [`Ingest::finish`].
pub struct Ingest<'t> {
    tacho: &'t Tacho,
    opts: IngestOptions,
    on_batch: OnBatch<'t>,
    writers: BTreeMap<String, Writer>,
    totals: BTreeMap<String, SessionTotal>,
    recorded: u64,
    /// Each session's workspace, when it is a directory on this machine.
    workspaces: BTreeMap<String, Option<PathBuf>>,
    /// With `new_session`: the input's session ids and their fresh ids.
    renamed: BTreeMap<Option<String>, String>,
    batch: Vec<Pending>,
    /// Held from the first snapshot taken until the ingest ends: gc cannot drop a
    /// snapshot that waits in a batch to be recorded.
    guard: Option<tacho_git::snapshot::WriteGuard>,
    /// Whether a session has ended, for sessions whose writer did not see their last
    /// event (it lies in an earlier segment).
    ended: BTreeMap<String, bool>,
    /// Automatic snapshots that could not be taken (the events were recorded).
    missed_snapshots: u64,
    /// Why (the gravest: an I/O error over a refused workspace).
    missed_kind: Option<crate::ErrorKind>,
    /// Sessions this ingest has seen whole from their first event, folded as their
    /// batches are appended: their facts go to the session index when their writer
    /// closes, so that the first listing after a large import need not read them all.
    folds: BTreeMap<String, Fold>,
    /// Events held in `folds` (each fold's `graph.next_seq`), at most `fold_budget`.
    folded: u64,
    fold_budget: u64,
    /// Events staged to their streams and not committed yet.
    staged_events: usize,
    /// New sessions of a one-batch input that spans sessions: written into one pack,
    /// published when the input ends (SPEC.md §1.1).
    pack: Option<tacho_store::PackBuilder>,
    /// The index facts of packed sessions that ended (encoded), for when the pack is
    /// published.
    pack_facts: Vec<u8>,
    /// Workspaces as spelt in the input, and their canonical paths.
    canonical: BTreeMap<String, Option<PathBuf>>,
    /// An outside input's sessions: when each started, when known (at most
    /// [`STARTS_KEPT`]).
    starts: BTreeMap<String, i64>,
    /// An outside input's sessions that exist in the log and were found not to be
    /// recorded by hooks.
    not_hooked: BTreeSet<String>,
    /// Read HEAD of each session's repository at its start, tool results, steps and
    /// end, and record the commits new since (SPEC §17.2).
    observe_commits: bool,
    /// HEAD as last read for each session (`None`: not read yet in the session).
    heads: BTreeMap<String, Option<String>>,
}

/// The most commits one `git.commits` lists (the rest are counted).
const OBSERVED_COMMITS_MAX: usize = 1_000;

/// The most session start times an outside ingest remembers.
const STARTS_KEPT: usize = 65_536;

/// A session folded from its first event on.
struct Fold {
    graph: tacho_projections::ExecutionGraph,
    /// Its `session.start`'s `source`.
    source: Option<String>,
}

/// What an ingest recorded.
#[derive(Debug, Clone, Default)]
pub struct Ingested {
    /// What each session received.
    pub totals: BTreeMap<String, SessionTotal>,
    /// Automatic snapshots that could not be taken (each reported as a note): the
    /// events were recorded, but those points of the workspace are not protected.
    pub missed_snapshots: u64,
    /// Why they could not: `Input` when each workspace was refused (the home
    /// directory, a path that is no directory), else the error's kind (`Io`).
    pub missed_kind: Option<crate::ErrorKind>,
}

impl<'t> Ingest<'t> {
    /// Starts an ingest. `on_batch` hears of every committed batch as soon as it is as
    /// durable as asked.
    pub fn new(
        tacho: &'t Tacho,
        opts: IngestOptions,
        on_batch: impl FnMut(&BatchAck) -> std::io::Result<()> + 't,
    ) -> Result<Ingest<'t>, IngestError> {
        if let Some(s) = &opts.session {
            tacho_schema::validate_session_id(s)
                .map_err(|e| IngestError::BadSession(e.to_string()))?;
        }
        let opts_auto = opts.auto_snapshots;
        Ok(Ingest {
            tacho,
            opts,
            on_batch: Box::new(on_batch),
            writers: BTreeMap::new(),
            totals: BTreeMap::new(),
            recorded: 0,
            workspaces: BTreeMap::new(),
            renamed: BTreeMap::new(),
            batch: Vec::new(),
            guard: None,
            ended: BTreeMap::new(),
            missed_snapshots: 0,
            missed_kind: None,
            folds: BTreeMap::new(),
            folded: 0,
            fold_budget: FOLD_EVENTS_MAX,
            staged_events: 0,
            pack: None,
            pack_facts: Vec::new(),
            canonical: BTreeMap::new(),
            starts: BTreeMap::new(),
            not_hooked: BTreeSet::new(),
            observe_commits: opts_auto,
            heads: BTreeMap::new(),
        })
    }

    /// Reads HEAD of each session's repository as events come and records the commits
    /// new since (live recording: hooks; `tacho record` with automatic snapshots does
    /// so already).
    pub fn observing_commits(mut self) -> Self {
        self.observe_commits = true;
        self
    }

    /// HEAD as `session` last saw it, known to the caller (the hook state): the log is
    /// then not read to find its last `git.commits`.
    pub fn knowing_head(&mut self, session: &str, head: Option<String>) {
        self.heads.insert(session.to_owned(), head);
    }

    /// HEAD as each session observed so far last saw it.
    pub fn observed_heads(&self) -> &BTreeMap<String, Option<String>> {
        &self.heads
    }

    /// Holds at most `events` events folded at once instead of `FOLD_EVENTS_MAX`.
    pub fn with_fold_budget(mut self, events: u64) -> Self {
        self.fold_budget = events;
        self
    }

    /// Events recorded so far.
    pub fn recorded(&self) -> u64 {
        self.recorded
    }

    fn fresh_id(&mut self, given: Option<String>) -> String {
        let tacho = self.tacho;
        self.renamed
            .entry(given)
            .or_insert_with(|| tacho.new_session_id())
            .clone()
    }

    /// One line of JSON Lines input (`line` is 1-based; blank lines are skipped).
    pub fn line(&mut self, line: usize, text: &str) -> Result<(), IngestError> {
        let parsed = parse_input(&self.opts.source, line, text)?;
        self.take_in(line, parsed)
    }

    /// Every line of `input`, in order, each as [`Ingest::line`] takes it. One thread
    /// reads lines and hands them over in chunks of up to 1,024 (a chunk goes early
    /// when the next read could wait, so a live stream is taken in as it comes); two
    /// more parse chunks side by side; this one takes the parsed lines in, in input
    /// order. At most `CHUNKS_IN_FLIGHT` chunks are read ahead. The first error in
    /// input order stops the ingest (the reading thread is left to end with the
    /// process if it waits on input).
    pub fn lines<R: std::io::Read + Send + 'static>(
        &mut self,
        input: R,
    ) -> Result<(), IngestError> {
        use std::sync::mpsc::sync_channel;
        type Raw = Vec<(usize, std::io::Result<String>)>;
        type Parsed = Vec<(usize, Result<ParsedInput, IngestError>)>;
        const CHUNK_LINES: usize = 1024;
        const PARSERS: usize = 2;
        // A chunk is read only with a token, and its token comes back once it is taken
        // in: what is read ahead stays bounded, however the parsers interleave.
        let (token_tx, token_rx) = sync_channel::<()>(CHUNKS_IN_FLIGHT);
        for _ in 0..CHUNKS_IN_FLIGHT {
            let _ = token_tx.send(());
        }
        let (raw_tx, raw_rx) = sync_channel::<(u64, Raw)>(CHUNKS_IN_FLIGHT);
        let raw_rx = std::sync::Arc::new(std::sync::Mutex::new(raw_rx));
        let (parsed_tx, parsed_rx) = sync_channel::<(u64, Parsed)>(CHUNKS_IN_FLIGHT);
        std::thread::spawn(move || {
            let mut input = std::io::BufReader::with_capacity(256 * 1024, input);
            let mut line = 0;
            let mut index = 0u64;
            let mut chunk: Raw = Vec::with_capacity(CHUNK_LINES);
            loop {
                let next = next_capped_line(&mut input, LINE_BYTES_MAX, &mut line);
                let end = next.is_none();
                let failed = next.as_ref().is_some_and(|(_, r)| r.is_err());
                chunk.extend(next);
                // (A chunk is sent when full, at the end or an error, or before a read
                // that may wait; reading ends when nobody takes chunks any more.)
                if end || failed || chunk.len() >= CHUNK_LINES || input.buffer().is_empty() {
                    if !chunk.is_empty()
                        && (token_rx.recv().is_err()
                            || raw_tx.send((index, std::mem::take(&mut chunk))).is_err())
                    {
                        return;
                    }
                    index += 1;
                }
                if end || failed {
                    return;
                }
            }
        });
        for _ in 0..PARSERS {
            let (raw_rx, parsed_tx) = (raw_rx.clone(), parsed_tx.clone());
            let source = self.opts.source.clone();
            std::thread::spawn(move || {
                loop {
                    let next = match raw_rx.lock() {
                        Ok(rx) => rx.recv(),
                        Err(_) => return,
                    };
                    let Ok((index, raw)) = next else { return };
                    let parsed: Parsed = raw
                        .into_iter()
                        .map(|(n, text)| {
                            let r = match text {
                                Ok(text) => parse_input(&source, n, &text),
                                Err(error) => Err(IngestError::Read {
                                    source_name: source.clone(),
                                    line: n,
                                    error,
                                }),
                            };
                            (n, r)
                        })
                        .collect();
                    if parsed_tx.send((index, parsed)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(parsed_tx);
        let mut next = 0u64;
        let mut waiting: BTreeMap<u64, Parsed> = BTreeMap::new();
        for (index, parsed) in parsed_rx {
            waiting.insert(index, parsed);
            while let Some(chunk) = waiting.remove(&next) {
                next += 1;
                for (line, parsed) in chunk {
                    self.take_in(line, parsed?)?;
                }
                let _ = token_tx.send(());
            }
        }
        Ok(())
    }

    /// Takes in one parsed line.
    fn take_in(&mut self, line: usize, parsed: ParsedInput) -> Result<(), IngestError> {
        let mut parsed = match parsed {
            ParsedInput::Blank => return Ok(()),
            ParsedInput::Take(req) => return self.snapshot_take(line, req),
            ParsedInput::Event(p) => p,
        };
        let source_name = &self.opts.source;
        let session = if self.opts.new_session {
            let fresh = self.fresh_id(parsed.session.clone());
            // A parent recorded in the same input is renamed with it; a session
            // without a parent keeps none.
            if let EventBody::SessionStart(s) = &mut parsed.body
                && let Some(parent) = s.parent.take()
            {
                let fresh_parent = self.renamed.get(&Some(parent.clone())).cloned();
                s.parent = Some(fresh_parent.unwrap_or(parent));
            }
            fresh
        } else {
            parsed
                .session
                .or_else(|| self.opts.session.clone())
                .ok_or_else(|| IngestError::NoSession {
                    source_name: source_name.clone(),
                    line,
                })?
        };
        let time_unix_ns = parsed.time_unix_ns.unwrap_or_else(|| self.tacho.now());
        self.event(line, session, time_unix_ns, parsed.body)
    }

    fn snapshot_take(&mut self, line: usize, req: SnapshotTake) -> Result<(), IngestError> {
        let source_name = self.opts.source.clone();
        let session = if self.opts.new_session {
            self.fresh_id(req.session.clone())
        } else {
            req.session
                .clone()
                .or_else(|| self.opts.session.clone())
                .ok_or_else(|| IngestError::SnapshotNoSession {
                    source_name: source_name.clone(),
                    line,
                })?
        };
        let time_unix_ns = match &req.ts {
            Some(v) => tacho_schema::parse_ts(v).map_err(|reason| IngestError::SnapshotTime {
                source_name: source_name.clone(),
                line,
                reason,
            })?,
            None => self.tacho.now(),
        };
        let reason = if req.before_step.is_some() {
            SnapshotReason::Step
        } else {
            SnapshotReason::Manual
        };
        let ws = req.workspace.as_ref().map(PathBuf::from);
        self.snapshot(
            line,
            session,
            ws,
            time_unix_ns,
            &req.paths,
            reason,
            req.before_step,
        )
        .map(drop)
    }

    /// Takes a snapshot of `session`'s workspace (or of `workspace`) — of `paths`
    /// only, relative to the workspace, or of everything when empty — and queues its
    /// event; the snapshot's id. From the first snapshot until the ingest ends, gc
    /// waits.
    #[allow(clippy::too_many_arguments)] // each is one fact of the snapshot event
    pub fn snapshot(
        &mut self,
        line: usize,
        session: String,
        workspace: Option<PathBuf>,
        time_unix_ns: i64,
        paths: &[String],
        reason: SnapshotReason,
        before_step: Option<u64>,
    ) -> Result<String, IngestError> {
        let source_name = self.opts.source.clone();
        let ws = match workspace {
            Some(w) => Some(w),
            None => self.workspace(&session)?,
        };
        let ws = ws.ok_or_else(|| IngestError::SnapshotNoWorkspace {
            source_name: source_name.clone(),
            line,
            session: session.clone(),
        })?;
        self.hold_snapshots(line)?;
        let (snap, ws) =
            self.tacho
                .take_snapshot(&ws, paths)
                .map_err(|error| IngestError::Snapshot {
                    source_name,
                    line,
                    error: Box::new(error),
                })?;
        self.batch.push(Pending {
            line,
            session,
            time_unix_ns,
            body: taken_event(&snap, &ws, reason, before_step),
        });
        Ok(snap.id)
    }

    /// From the first snapshot until the ingest ends, gc waits.
    fn hold_snapshots(&mut self, line: usize) -> Result<(), IngestError> {
        if self.guard.is_none() {
            self.guard =
                Some(
                    self.tacho
                        .snapshot_guard()
                        .map_err(|error| IngestError::Snapshot {
                            source_name: self.opts.source.clone(),
                            line,
                            error: Box::new(error),
                        })?,
                );
        }
        Ok(())
    }

    /// A full snapshot of `workspace` that tacho reads itself, checked against its
    /// watcher's (SPEC.md §10.6), queued as a snapshot of `session` (for `reason`);
    /// the paths the watcher missed.
    pub fn checked_snapshot(
        &mut self,
        session: &str,
        workspace: &Path,
        time_unix_ns: i64,
        reason: SnapshotReason,
    ) -> Result<(String, Vec<String>), IngestError> {
        self.hold_snapshots(0)?;
        let (checked, ws) = self
            .tacho
            .take_checked_snapshot(workspace)
            .map_err(|error| IngestError::Snapshot {
                source_name: self.opts.source.clone(),
                line: 0,
                error: Box::new(error),
            })?;
        self.batch.push(Pending {
            line: 0,
            session: session.to_owned(),
            time_unix_ns,
            body: taken_event(&checked.snapshot, &ws, reason, None),
        });
        Ok((checked.snapshot.id.clone(), checked.missed))
    }

    /// One typed event from outside, with the snapshots automatic mode takes around
    /// it. Evidence kinds are refused: tacho writes those itself.
    pub fn event(
        &mut self,
        line: usize,
        session: String,
        time_unix_ns: i64,
        body: EventBody,
    ) -> Result<(), IngestError> {
        if body.provenance() == Provenance::Tacho {
            return Err(IngestError::Evidence {
                source_name: self.opts.source.clone(),
                line,
                kind: body.kind_name(),
            });
        }
        let mut body = body;
        if let EventBody::SessionStart(s) = &mut body
            && self.opts.outside
        {
            // What produced the events is tacho's to say: an outside input is agent-
            // reported, whatever it calls itself (SPEC §17.3: its links do not stand
            // for an agent tacho's hooks record).
            s.source = Some(match s.source.take() {
                Some(said) if said != RECORD_SOURCE => {
                    let said: String = said.chars().filter(|c| !c.is_control()).take(60).collect();
                    format!("{RECORD_SOURCE} (it said: {said})")
                }
                _ => RECORD_SOURCE.to_owned(),
            });
        }
        if let EventBody::SessionStart(s) = &mut body {
            // One spelling of the workspace for everything that follows (snapshots,
            // edits, receipts): canonical — links resolved, no `.` or trailing slash —
            // when it is a directory here; as reported otherwise.
            let w = s.workspace.as_ref().and_then(|w| self.canonical(w));
            if let Some(w) = &w {
                s.workspace = Some(w.display().to_string());
            }
            self.workspaces.insert(session.clone(), w);
        }
        let (before, after) = auto_points(&body);
        let ws = if self.opts.auto_snapshots && (before.is_some() || after.is_some()) {
            self.workspace(&session)?
        } else {
            None
        };
        if let Some(ws) = &ws {
            self.auto_snapshot(ws, before, line, &session, time_unix_ns);
        }
        let after_session = ws.as_ref().map(|_| session.clone());
        // Whether HEAD is read before (`Some(true)`) or after (`Some(false)`) the event.
        let observe = match &body {
            _ if !self.observe_commits => None,
            EventBody::SessionEnd(_) => Some(true),
            EventBody::SessionStart(_) | EventBody::ToolResult(_) | EventBody::StepStart(_) => {
                Some(false)
            }
            _ => None,
        };
        let observe_after = match observe {
            Some(true) => {
                self.observe_head(line, &session, time_unix_ns);
                None
            }
            Some(false) => Some(session.clone()),
            None => None,
        };
        self.batch.push(Pending {
            line,
            session,
            time_unix_ns,
            body,
        });
        if let (Some(ws), Some(session)) = (&ws, after_session) {
            self.auto_snapshot(ws, after, line, &session, time_unix_ns);
        }
        if let Some(session) = observe_after {
            self.observe_head(line, &session, time_unix_ns);
        }
        let in_batch = self.batch.len() + self.staged_events;
        if self.opts.batch_lines > 0 && in_batch >= self.opts.batch_lines {
            self.flush()?;
        } else if self.batch.len() >= STAGE_EVENTS {
            self.stage()?;
        }
        Ok(())
    }

    /// A workspace as spelt in a `session.start`, canonical, when it is a directory
    /// here (remembered: a bulk input names the same few workspaces again and again).
    fn canonical(&mut self, workspace: &str) -> Option<PathBuf> {
        if let Some(c) = self.canonical.get(workspace) {
            return c.clone();
        }
        let c = Path::new(workspace)
            .canonicalize()
            .ok()
            .filter(|w| w.is_dir());
        if self.canonical.len() >= CANONICAL_KEPT {
            self.canonical.clear();
        }
        self.canonical.insert(workspace.to_owned(), c.clone());
        c
    }

    /// The workspace of `session`: from a `session.start` seen in this input, else
    /// from the log.
    pub fn workspace(&mut self, session: &str) -> Result<Option<PathBuf>, IngestError> {
        if let Some(w) = self.workspaces.get(session) {
            return Ok(w.clone());
        }
        let w = self.tacho.session_workspace(session)?;
        self.workspaces.insert(session.to_string(), w.clone());
        Ok(w)
    }

    /// Counts an automatic snapshot that could not be taken, and keeps the gravest
    /// reason: an I/O error over a refused workspace.
    fn missed(&mut self, kind: crate::ErrorKind) {
        use crate::ErrorKind;
        self.missed_snapshots += 1;
        self.missed_kind = Some(match (self.missed_kind, kind) {
            (Some(ErrorKind::Input) | None, k) => k,
            (Some(k), _) => k,
        });
    }

    /// Takes an automatic snapshot and queues its event. A snapshot that cannot be
    /// taken never costs the events: it is reported as a note and left out.
    fn auto_snapshot(
        &mut self,
        ws: &Path,
        when: AutoPoint,
        line: usize,
        session: &str,
        time_unix_ns: i64,
    ) {
        let Some((reason, step)) = when else { return };
        if self.guard.is_none() {
            match self.tacho.snapshot_guard() {
                Ok(g) => self.guard = Some(g),
                Err(e) => {
                    self.missed(e.kind());
                    self.tacho.note(&format!(
                        "note: line {line}: no {reason} snapshot of {} for session {session}: {e}",
                        ws.display()
                    ));
                    return;
                }
            }
        }
        match self.tacho.take_snapshot(ws, &[]) {
            Ok((snap, path)) => self.batch.push(Pending {
                line,
                session: session.to_owned(),
                time_unix_ns,
                body: taken_event(&snap, &path, reason, step),
            }),
            Err(e) => {
                self.missed(e.kind());
                self.tacho.note(&format!(
                    "note: line {line}: no {reason} snapshot of {} for session {session}: {e}",
                    ws.display()
                ));
            }
        }
    }

    /// Reads HEAD of `session`'s repository and queues a `git.commits` when it is not
    /// what this session last saw (SPEC §17.2). Like a snapshot, a reading that fails
    /// never costs the events: it is a note.
    fn observe_head(&mut self, line: usize, session: &str, time_unix_ns: i64) {
        let ws = match self.workspace(session) {
            Ok(Some(ws)) => ws,
            _ => return,
        };
        let previous = match self.heads.get(session) {
            Some(p) => p.clone(),
            // What its last committed `git.commits` says (none for a new session).
            None => self.tacho.last_observed_head(session),
        };
        match tacho_git::head::head_move(&ws, previous.as_deref(), OBSERVED_COMMITS_MAX) {
            Ok(Some(m)) => {
                self.heads.insert(session.to_owned(), Some(m.head.clone()));
                self.batch.push(Pending {
                    line,
                    session: session.to_owned(),
                    time_unix_ns,
                    body: EventBody::GitCommits(GitCommits {
                        workspace: m.work_tree,
                        head: m.head,
                        previous,
                        commits: m
                            .commits
                            .into_iter()
                            .map(|(commit, tree)| ObservedCommit { commit, tree })
                            .collect(),
                        commits_total: m.total,
                    }),
                });
            }
            Ok(None) => {
                self.heads.insert(session.to_owned(), previous);
            }
            Err(e) => self.tacho.note(&format!(
                "note: line {line}: HEAD of {} not read for session {session}: {e}",
                ws.display()
            )),
        }
    }

    fn writer(&mut self, session: &str) -> Result<&mut Writer, IngestError> {
        let tacho = self.tacho;
        match self.writers.entry(session.to_string()) {
            Entry::Occupied(o) => Ok(o.into_mut()),
            Entry::Vacant(v) => {
                let w = tacho.log().writer(session)?;
                for r in w.recovered() {
                    tacho.note(&format!(
                        "note: session {session}: cut a torn tail of {} bytes at offset {} of {} ({})",
                        r.truncated_bytes,
                        r.offset,
                        r.segment.display(),
                        r.reason
                    ));
                }
                Ok(v.insert(w))
            }
        }
    }

    /// The sequence number `session`'s next event gets (its writer is opened, and kept
    /// for what this ingest appends).
    pub fn next_seq(&mut self, session: &str) -> Result<u64, IngestError> {
        Ok(self.writer(session)?.next_seq())
    }

    /// The provenance rules of an outside input (SPEC §3.1): a session that tacho's
    /// hooks record takes no event from it (`existing`: the log holds the session), and
    /// no event is earlier than its session's start.
    fn check_outside(
        &mut self,
        session: &str,
        items: &[Pending],
        existing: bool,
    ) -> Result<(), IngestError> {
        if !self.opts.outside {
            return Ok(());
        }
        let first_line = items.first().map_or(0, |p| p.line);
        let rejected = |line: usize, reason: String| IngestError::Rejected {
            source_name: self.opts.source.clone(),
            line,
            reason,
        };
        if existing && !self.not_hooked.contains(session) {
            if let Some(agent) = self.tacho.hook_recorder(session) {
                return Err(rejected(
                    first_line,
                    format!(
                        "session {session} is recorded by tacho's {agent} hooks: its events, its end included, come from them and are not accepted from outside (a session whose agent died is ended with `tacho session end`)"
                    ),
                ));
            }
            self.not_hooked.insert(session.to_owned());
        }
        if let Some(first) = items.first()
            && matches!(first.body, EventBody::SessionStart(_))
        {
            if self.starts.len() >= STARTS_KEPT {
                self.starts.clear();
            }
            self.starts.insert(session.to_owned(), first.time_unix_ns);
        }
        let start = match self.starts.get(session) {
            Some(t) => Some(*t),
            None if existing => {
                let t = self
                    .tacho
                    .log()
                    .first_event(session)?
                    .map(|e| e.time_unix_ns);
                if let Some(t) = t {
                    self.starts.insert(session.to_owned(), t);
                }
                t
            }
            None => None,
        };
        if let Some(start) = start
            && let Some(p) = items.iter().find(|p| p.time_unix_ns < start)
        {
            return Err(rejected(
                p.line,
                format!(
                    "{} at {} is earlier than the start of session {session} ({}): no event may move a session's time before its start",
                    p.body.kind_name(),
                    tacho_schema::time_to_rfc3339(p.time_unix_ns),
                    tacho_schema::time_to_rfc3339(start)
                ),
            ));
        }
        Ok(())
    }

    /// Whether `session` (whose next event would be `next`) has ended.
    fn has_ended(&mut self, session: &str, next: u64) -> Result<bool, IngestError> {
        if let Some(e) = self.ended.get(session) {
            return Ok(*e);
        }
        let mut ended = false;
        if next > 0 {
            self.tacho.log().read_session_from(session, next - 1, |e| {
                ended = matches!(e.event.body, EventBody::SessionEnd(_));
            })?;
        }
        self.ended.insert(session.to_owned(), ended);
        Ok(ended)
    }

    /// Checks the queued events against every session's rules, then appends them, one
    /// batch per session (with what was staged before), as groups of at most
    /// `GROUP_SESSIONS_MAX` sessions (each group recorded whole or not at all). Open
    /// writers stay bounded whatever the number of sessions: at most
    /// `WRITERS_OPEN_MAX`, each a lock file and a segment.
    pub fn flush(&mut self) -> Result<(), IngestError> {
        self.stage()?;
        self.commit_staged()
    }

    /// Writes the queued events to their streams without committing them (they join
    /// the batch the next [`Ingest::flush`] commits), so that a batch of any size is
    /// never held in memory. When more sessions come than writers may stay open, what
    /// is staged is committed first, as a group, and those writers are closed.
    fn stage(&mut self) -> Result<(), IngestError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        // (The next batch is likely as long as this one.)
        let next = Vec::with_capacity(self.batch.len());
        let mut pending = std::mem::replace(&mut self.batch, next);
        // New sessions of a one-batch input that spans sessions go to the pack.
        let spans = pending
            .first()
            .is_some_and(|f| pending.iter().any(|p| p.session != f.session))
            || !self.writers.is_empty()
            || !self.totals.is_empty();
        if self.opts.pack_new_sessions
            && self.opts.batch_lines == 0
            && (spans || self.pack.is_some())
        {
            pending = self.stage_runs_into_pack(pending)?;
        }
        let mut rest: Vec<(String, Vec<Pending>)> = match pending.first() {
            None => Vec::new(),
            // One session (the usual case): its events as they are, not moved one by one.
            Some(first) if pending.iter().all(|p| p.session == first.session) => {
                vec![(first.session.clone(), pending)]
            }
            _ => {
                let mut by_session: BTreeMap<String, Vec<Pending>> = BTreeMap::new();
                for p in pending {
                    by_session.entry(p.session.clone()).or_default().push(p);
                }
                by_session.into_iter().collect()
            }
        };
        while !rest.is_empty() {
            let later = rest.split_off(rest.len().min(GROUP_SESSIONS_MAX));
            let group = std::mem::replace(&mut rest, later);
            let opening = group
                .iter()
                .filter(|(s, _)| !self.writers.contains_key(s))
                .count();
            if self.writers.len() + opening > WRITERS_OPEN_MAX {
                self.commit_staged()?;
                // Closing a writer releases its lock; what it knew of its stream's end
                // is read again by the next one. What was learnt of the sessions goes
                // too (read from the log if they come back): memory does not grow with
                // the number of sessions seen.
                self.close_writers();
                self.ended.clear();
                self.workspaces.clear();
                self.starts.clear();
                self.not_hooked.clear();
            }
            self.stage_group(group)?;
        }
        Ok(())
    }

    /// Checks one group of sessions' events and stages them.
    fn stage_group(&mut self, groups: Vec<(String, Vec<Pending>)>) -> Result<(), IngestError> {
        // Writers open in id order, so two ingests never wait for each other in a cycle.
        for (session, items) in &groups {
            let w = self.writer(session)?;
            let checked = w.check_batch(items.iter().map(|p| &p.body));
            // Nothing after session.end, as nothing before session.start. The writer
            // has read the stream's tail already (and knows what it staged); only when
            // its last event lies in an earlier segment is it read again.
            let (next, known) = (w.next_seq(), w.ended());
            let ended = match known {
                Some(e) => e,
                None => self.has_ended(session, next)?,
            };
            check_items(&self.opts.source, session, checked, ended, items)?;
            self.check_outside(session, items, next > 0)?;
        }
        // One synced index append marks every new stream of the group as written.
        let mut writers: Vec<&mut Writer> = self
            .writers
            .iter_mut()
            .filter(|(s, _)| groups.iter().any(|(g, _)| g == *s))
            .map(|(_, w)| w)
            .collect();
        tacho_store::mark_written(&mut writers)?;
        for (session, items) in groups {
            let w = self.writer(&session)?;
            let first_seq = w.stage(&items)?;
            self.staged_events += items.len();
            self.fold(&session, first_seq, &items);
        }
        Ok(())
    }

    /// Adds the events of new sessions to the pack, run by run of one session as they
    /// come (not grouped: the pack takes sessions in any order); returns the others,
    /// in order. A session is packed when the pack holds it already, or when it is new
    /// to the store and this ingest has no writer for it.
    fn stage_runs_into_pack(&mut self, pending: Vec<Pending>) -> Result<Vec<Pending>, IngestError> {
        // Runs are staged from where they lie; only the others are moved, at the end.
        let mut keep: Vec<bool> = Vec::new();
        let mut start = 0;
        while let Some(first) = pending.get(start) {
            let session = first.session.clone();
            let end = pending
                .get(start..)
                .and_then(|rest| rest.iter().position(|p| p.session != session))
                .map_or(pending.len(), |n| start + n);
            // A pack grown large is published before it takes another session: what
            // an ingest holds for its pack stays bounded, as groups of writers do.
            let sessions_max = self.tacho.log().options().pack_sessions_max;
            if self.pack.as_ref().is_some_and(|p| {
                !p.contains(&session)
                    && (p.sessions() >= sessions_max || p.bytes() >= PACK_BYTES_MAX)
            }) {
                self.publish_pack()?;
            }
            let tacho = self.tacho;
            let pack = self.pack.get_or_insert_with(|| tacho.log().pack_builder());
            if pack.contains(&session)
                || (!self.writers.contains_key(&session) && pack.is_new(&session)?)
            {
                self.stage_packed(&session, pending.get(start..end).unwrap_or_default())?;
            } else {
                keep.resize(pending.len(), false);
                keep.get_mut(start..end)
                    .into_iter()
                    .flatten()
                    .for_each(|k| *k = true);
            }
            start = end;
        }
        if keep.is_empty() {
            return Ok(Vec::new());
        }
        Ok(pending
            .into_iter()
            .zip(keep)
            .filter_map(|(p, k)| k.then_some(p))
            .collect())
    }

    /// Checks a new session's events and adds them to the pack.
    fn stage_packed(&mut self, session: &str, items: &[Pending]) -> Result<(), IngestError> {
        let tacho = self.tacho;
        let pack = self.pack.get_or_insert_with(|| tacho.log().pack_builder());
        let checked = pack.check_batch(session, items.iter().map(|p| &p.body));
        check_items(
            &self.opts.source,
            session,
            checked,
            pack.ended(session),
            items,
        )?;
        self.check_outside(session, items, false)?;
        let pack = self.pack.get_or_insert_with(|| tacho.log().pack_builder());
        let ended = matches!(items.last(), Some(p) if matches!(p.body, EventBody::SessionEnd(_)));
        let first_seq = pack.stage(session, items)?;
        self.fold(session, first_seq, items);
        // A session that ended takes no more events: its segment is sealed now and
        // what the index will know of it is computed now, not held folded until the
        // pack is published.
        if ended
            && let Some(pack) = self.pack.as_mut()
            && let Some(head) = pack.close(session)?
            && let Some(facts) = self.facts_at(session, head)
        {
            tacho_store::index::encode_record(&facts, &mut self.pack_facts)?;
        }
        Ok(())
    }

    /// Publishes the pack of new sessions, acknowledges each, and gives the session
    /// index the facts of those folded whole.
    fn publish_pack(&mut self) -> Result<(), IngestError> {
        let Some(pack) = self.pack.take() else {
            return Ok(());
        };
        let receipts = pack.publish()?;
        // What was learnt of the published sessions goes (read from the log if they
        // come back), as when writers close.
        self.workspaces.clear();
        let mut facts = Vec::new();
        for (session, receipt) in receipts {
            let events = receipt.last_seq - receipt.first_seq + 1;
            facts.extend(self.facts_at(&session, (events, receipt.chain)));
            self.acknowledge(session, &receipt)?;
        }
        let encoded = std::mem::take(&mut self.pack_facts);
        let appended = self
            .tacho
            .log()
            .index_append(&facts, false)
            .and_then(|_| self.tacho.log().index_append_encoded(&encoded, false));
        if let Err(e) = appended {
            self.tacho
                .note(&format!("note: the session index was not updated: {e}"));
        }
        Ok(())
    }

    /// Commits what every open writer has staged, as one group (all or none), and
    /// acknowledges each session's batch.
    fn commit_staged(&mut self) -> Result<(), IngestError> {
        let (sessions, mut writers): (Vec<String>, Vec<&mut Writer>) = self
            .writers
            .iter_mut()
            .filter(|(_, w)| w.has_staged())
            .map(|(s, w)| (s.clone(), w))
            .unzip();
        self.staged_events = 0;
        if writers.is_empty() {
            return Ok(());
        }
        let receipts = tacho_store::commit_group(&mut writers, self.opts.durability)?;
        for (session, receipt) in sessions.into_iter().zip(receipts) {
            self.acknowledge(session, &receipt)?;
        }
        Ok(())
    }

    /// Counts a committed batch of `session` and acknowledges it.
    fn acknowledge(
        &mut self,
        session: String,
        receipt: &tacho_store::AppendReceipt,
    ) -> Result<(), IngestError> {
        let events = receipt.last_seq - receipt.first_seq + 1;
        let t = self.totals.entry(session.clone()).or_default();
        t.first_seq.get_or_insert(receipt.first_seq);
        t.last_seq = receipt.last_seq;
        t.events += events;
        self.recorded += events;
        (self.on_batch)(&BatchAck {
            kind: "recorded",
            session,
            events: events as usize,
            first_seq: receipt.first_seq,
            last_seq: receipt.last_seq,
            head: hex(&receipt.chain),
        })
        .map_err(IngestError::Ack)
    }

    /// Folds a session's appended batch (its first event `first_seq`) into what this
    /// ingest knows of it: a session seen from its first event on, with nothing
    /// appended by anyone else in between, is folded whole.
    fn fold<E: tacho_store::EventRef>(&mut self, session: &str, first_seq: u64, events: &[E]) {
        let within = self.folded + events.len() as u64 <= self.fold_budget;
        let fold = match self.folds.entry(session.to_owned()) {
            Entry::Occupied(o) if within && o.get().graph.next_seq == first_seq => o.into_mut(),
            Entry::Occupied(o) => {
                self.folded = self.folded.saturating_sub(o.remove().graph.next_seq);
                return;
            }
            Entry::Vacant(v) if within && first_seq == 0 => v.insert(Fold {
                graph: tacho_projections::ExecutionGraph::new(session),
                source: None,
            }),
            Entry::Vacant(_) => return,
        };
        self.folded += events.len() as u64;
        for (i, e) in events.iter().enumerate() {
            let seq = first_seq + i as u64;
            let body = e.body();
            if let (0, EventBody::SessionStart(s)) = (seq, body) {
                fold.source = s.source.clone();
            }
            fold.graph.apply_view(seq, e.time_unix_ns(), &body.view());
        }
    }

    /// Lets go of `session`'s fold; its index facts when it was folded whole up to
    /// `head` (events, chain value).
    fn facts_at(
        &mut self,
        session: &str,
        head: (u64, [u8; 32]),
    ) -> Option<tacho_store::index::Record> {
        let f = self.folds.remove(session)?;
        self.folded = self.folded.saturating_sub(f.graph.next_seq);
        (f.graph.next_seq == head.0).then(|| self.tacho.facts_record(f.graph, f.source, head))
    }

    /// Closes every open writer: their heads go to the session index in one append,
    /// then the facts of the sessions folded whole (for exactly those heads).
    fn close_writers(&mut self) {
        let writers = std::mem::take(&mut self.writers);
        let mut facts = Vec::new();
        for (session, w) in &writers {
            facts.extend(self.facts_at(session, (w.next_seq(), w.head())));
        }
        tacho_store::close_writers(writers.into_values());
        if let Err(e) = self.tacho.log().index_append(&facts, false) {
            self.tacho
                .note(&format!("note: the session index was not updated: {e}"));
        }
    }

    /// Appends what is queued and returns what each session received.
    pub fn finish(mut self) -> Result<Ingested, RecordError> {
        let flushed = self.flush().and_then(|()| self.publish_pack());
        self.close_writers();
        match flushed {
            Ok(()) => Ok(Ingested {
                totals: std::mem::take(&mut self.totals),
                missed_snapshots: self.missed_snapshots,
                missed_kind: self.missed_kind,
            }),
            Err(error) => Err(RecordError {
                error,
                recorded: self.recorded,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::next_capped_line;

    /// Every line `next_capped_line` gives until its first error (where `Ingest::lines`
    /// stops reading).
    fn capped(mut input: &[u8], cap: usize) -> Vec<(usize, Result<String, String>)> {
        let mut line = 0;
        let mut out = Vec::new();
        while let Some((n, r)) = next_capped_line(&mut input, cap, &mut line) {
            let failed = r.is_err();
            out.push((n, r.map_err(|e| e.to_string())));
            if failed {
                break;
            }
        }
        out
    }

    #[test]
    fn lines_longer_than_the_cap_are_refused_before_they_are_held() {
        let input = b"{\"a\":1}\n0123456789abcdef0123\nnever read\n";
        let got = capped(&input[..], 16);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], (1, Ok("{\"a\":1}".to_string())));
        assert_eq!(got[1].0, 2);
        assert!(
            got[1]
                .1
                .as_ref()
                .unwrap_err()
                .contains("longer than 16 bytes")
        );
        let crlf: Vec<_> = capped(&b"x\r\ny"[..], 16)
            .into_iter()
            .map(|(_, r)| r.unwrap())
            .collect();
        assert_eq!(crlf, ["x", "y"]);
    }
}
