//! Replay: verification of a session's record (log checks, semantic checks, the stored
//! projection against a rebuild), the expectations for a harness that re-drives an
//! agent, and portable packages. Replay never re-runs the model or a tool.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Serialize, Serializer};
use tacho_projections::{ExecutionGraph, ReplayCheck, ReplayReport, ReplayRule};
use tacho_schema::{EventBody, ToolResult, ToolStatus};
use tacho_store::{
    PackageError, Severity, Store, StoreError, StoredEvent, StreamReport, hex, open_package,
};

use crate::Tacho;
use crate::error::{ErrorKind, Kind, Namer, Operation, neutral};
use crate::projection;

/// Why a replay operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{}", neutral(self))]
    Unverified(String),
    #[error("{}: {source}", path.display())]
    ReadPackage {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Package {
        path: PathBuf,
        #[source]
        source: PackageError,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Kind for ReplayError {
    fn kind(&self) -> ErrorKind {
        match self {
            ReplayError::Unverified(_) | ReplayError::Package { .. } => ErrorKind::Findings,
            ReplayError::ReadPackage { .. } => ErrorKind::Input,
            ReplayError::Store(e) => e.kind(),
        }
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        match self {
            ReplayError::Unverified(session) => write!(
                f,
                "session {session} does not verify; {} says where (a package of a damaged record would only fail elsewhere)",
                name.operation(Operation::VerifySession)
            ),
            other => fmt::Display::fmt(other, f),
        }
    }
}

/// The stored projection compared with a rebuild.
#[derive(Debug, Clone)]
pub enum ProjectionCheck {
    NoneStored,
    /// Equal to a rebuild up to this event.
    Equal {
        next_seq: u64,
    },
    /// Not backed by the log, or different from a rebuild.
    Failed {
        location: PathBuf,
        problem: String,
    },
}

impl ProjectionCheck {
    /// What the check found, in words (the `stored_projection` of the summary).
    pub fn describe(&self) -> String {
        match self {
            ProjectionCheck::NoneStored => {
                "none stored, so none to compare with a rebuild".to_string()
            }
            ProjectionCheck::Equal { next_seq } => {
                format!("ok (the execution graph up to event {next_seq} equals a rebuild)")
            }
            ProjectionCheck::Failed { .. } => "FAILED".to_string(),
        }
    }
}

/// The part of a verification a finding comes from: a stage, or a semantic rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum CheckName {
    Stage(Stage),
    Rule(ReplayRule),
}

/// The stages of a verification besides the semantic rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Checksums, hash chain, sequence numbers, payloads.
    Log,
    /// What export would not have produced.
    Package,
    /// The session could not be read to its end.
    Read,
    /// The stored projection against a rebuild.
    Projection,
}

/// One finding of a replay verification: the `finding` record.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayVerifyFinding {
    pub check: CheckName,
    /// The file (and offset) at fault, for the log and projection checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// The event where it shows, for a rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    pub message: String,
}

/// The totals of a replay verification: the `summary` record.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayVerifySummary {
    pub session: String,
    pub ok: bool,
    pub findings: usize,
    pub events: u64,
    pub segments: u64,
    pub tool_results_checked: u64,
    pub receipts_checked: u64,
    pub interrupted: usize,
    pub pending: usize,
    pub read_to_end: bool,
    /// The chain value after the events verified, hex.
    pub head: String,
    pub stored_projection: String,
    pub last_event_unix_ns: Option<i64>,
}

/// What verifying a session's record found.
#[derive(Debug)]
pub struct Verification {
    pub session: String,
    /// Checksums, hash chain, sequence numbers, payloads.
    pub log: StreamReport,
    /// The session could not be read to its end.
    pub read_error: Option<StoreError>,
    /// Tool results against their calls, balanced steps, one start and one end.
    pub replay: ReplayReport,
    pub projection: ProjectionCheck,
    pub last_event_unix_ns: Option<i64>,
    /// For a package: what export would not have produced (each a finding).
    pub package_findings: Vec<String>,
}

impl Verification {
    /// Log errors (warnings do not count).
    pub fn log_errors(&self) -> impl Iterator<Item = &tacho_store::Finding> {
        self.log
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
    }

    /// How many findings, of every check.
    pub fn failed(&self) -> usize {
        self.log_errors().count()
            + usize::from(self.read_error.is_some())
            + usize::from(matches!(self.projection, ProjectionCheck::Failed { .. }))
            + self.replay.findings.len()
            + self.package_findings.len()
    }

    /// Every finding, in order: the log's errors, the package's, the read's, the
    /// stored projection's, then each rule's.
    pub fn findings(&self) -> Vec<ReplayVerifyFinding> {
        let mut out = Vec::new();
        for f in self.log_errors() {
            out.push(ReplayVerifyFinding {
                check: CheckName::Stage(Stage::Log),
                location: Some(format!(
                    "{}{}",
                    f.segment
                        .as_ref()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                    f.offset
                        .map(|o| format!(" at offset {o}"))
                        .unwrap_or_default()
                )),
                seq: None,
                message: f.message.clone(),
            });
        }
        for f in &self.package_findings {
            out.push(ReplayVerifyFinding {
                check: CheckName::Stage(Stage::Package),
                location: None,
                seq: None,
                message: f.clone(),
            });
        }
        if let Some(e) = &self.read_error {
            out.push(ReplayVerifyFinding {
                check: CheckName::Stage(Stage::Read),
                location: None,
                seq: None,
                message: format!("the session could not be read to its end: {e}"),
            });
        }
        if let ProjectionCheck::Failed { location, problem } = &self.projection {
            out.push(ReplayVerifyFinding {
                check: CheckName::Stage(Stage::Projection),
                location: Some(location.display().to_string()),
                seq: None,
                message: problem.clone(),
            });
        }
        for f in &self.replay.findings {
            out.push(ReplayVerifyFinding {
                check: CheckName::Rule(f.rule),
                location: None,
                seq: Some(f.seq),
                message: f.message.clone(),
            });
        }
        out
    }

    /// Whether no finding breaks one of these rules.
    pub fn rules_hold(&self, rules: &[ReplayRule]) -> bool {
        !self.replay.findings.iter().any(|f| rules.contains(&f.rule))
    }

    /// The totals.
    pub fn summary(&self) -> ReplayVerifySummary {
        let failed = self.failed();
        ReplayVerifySummary {
            session: self.session.clone(),
            ok: failed == 0,
            findings: failed,
            events: self.log.events,
            segments: self.log.segments,
            tool_results_checked: self.replay.tool_results_checked,
            receipts_checked: self.replay.receipts_checked,
            interrupted: self.replay.interrupted.len(),
            pending: self.replay.pending.len(),
            read_to_end: self.read_error.is_none(),
            head: hex(&self.log.chain),
            stored_projection: self.projection.describe(),
            last_event_unix_ns: self.last_event_unix_ns,
        }
    }
}

/// What `--mode export` wrote: the `export` record.
#[derive(Debug, Clone, Serialize)]
pub struct Exported {
    pub session: String,
    /// The events the package holds, and the chain value after them (hex).
    pub events: u64,
    pub head: String,
    /// The package's size.
    pub bytes: usize,
    /// The file written; none for stdout.
    pub output: Option<String>,
}

impl Exported {
    /// The view of a package of `bytes` bytes made from the log's report, written to
    /// `output` (stdout when none).
    pub fn new(session: &str, log: &StreamReport, bytes: usize, output: Option<&Path>) -> Self {
        Exported {
            session: session.to_owned(),
            events: log.next_seq,
            head: hex(&log.chain),
            bytes,
            output: output.map(|p| p.display().to_string()),
        }
    }
}

/// An event in its JSON form (SPEC §5.1) with its sequence number: what `--mode
/// summary` and `--mode reconstruct` print of each event.
pub fn event_json(e: &StoredEvent) -> serde_json::Value {
    let mut v = e.event.to_json();
    if let Some(o) = v.as_object_mut() {
        o.insert("seq".into(), e.seq.into());
    }
    v
}

fn events_json<S: Serializer>(events: &[StoredEvent], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(events.iter().map(event_json))
}

/// The events of one step, from its `step.start` to the next step's (or those before
/// the first step: `step` none). The `step` record of `--mode reconstruct`.
#[derive(Debug, Clone, Serialize)]
pub struct StepEvents {
    pub step: Option<u64>,
    #[serde(serialize_with = "events_json")]
    pub events: Vec<StoredEvent>,
}

/// A session's events grouped into the step stream (`--mode reconstruct`).
#[derive(Debug, Clone)]
pub struct Reconstruction {
    pub session: String,
    /// What came before the first step (when anything did), then each step.
    pub steps: Vec<StepEvents>,
}

impl Reconstruction {
    /// Groups events into the step stream.
    pub fn new(session: &str, all: Vec<StoredEvent>) -> Self {
        let mut steps = vec![StepEvents {
            step: None,
            events: Vec::new(),
        }];
        for e in all {
            if let EventBody::StepStart(s) = &e.event.body {
                steps.push(StepEvents {
                    step: Some(s.step),
                    events: Vec::new(),
                });
            }
            if let Some(g) = steps.last_mut() {
                g.events.push(e);
            }
        }
        steps.retain(|g| !g.events.is_empty());
        Reconstruction {
            session: session.to_owned(),
            steps,
        }
    }
}

/// A tool call a re-driven agent is expected to make, with the recorded result.
#[derive(Debug, Clone, Serialize)]
pub struct ExpectCall {
    pub seq: u64,
    pub call_id: String,
    pub tool: String,
    pub target: Option<String>,
    pub input: Option<serde_json::Value>,
    pub expected: Option<Expected>,
}

/// The result a call got in the original run.
#[derive(Debug, Clone, Serialize)]
pub struct Expected {
    pub status: ToolStatus,
    pub exit_code: Option<i64>,
    pub error: Option<String>,
    pub output: Option<String>,
}

/// One step's expectations.
#[derive(Debug, Clone, Serialize)]
pub struct ExpectStep {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub session: String,
    pub step: u64,
    pub implicit: bool,
    pub agent: Option<String>,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub tool_calls: Vec<ExpectCall>,
}

/// What a re-driven run starts from: the first record of `--mode execute`.
#[derive(Debug, Clone, Serialize)]
pub struct ExpectHeader {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub session: String,
    pub workspace: Option<String>,
    pub agent: Option<String>,
    pub model: Option<String>,
    /// The snapshot to restore before re-driving (the session's first), if any.
    pub start_snapshot: Option<String>,
    pub steps: usize,
}

/// How the recorded run ended: the last record of `--mode execute`.
#[derive(Debug, Clone, Serialize)]
pub struct ExpectEnd {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub session: String,
    pub end_reason: Option<tacho_schema::EndReason>,
    pub steps: usize,
    pub tool_calls: usize,
    /// The snapshot of the workspace at the end (the last one recorded), if any.
    pub end_snapshot: Option<String>,
}

/// The expectations of a run for a harness that re-drives an agent.
#[derive(Debug, Clone)]
pub struct Expectations {
    pub header: ExpectHeader,
    pub steps: Vec<ExpectStep>,
    pub end: ExpectEnd,
}

/// Runs every check of a session's record in `store`.
/// A frozen goal whose contract digest is not its plan's, by the digest's own version
/// (SPEC §12.1). The plan is read without today's check-command rules (a plan frozen
/// before them keeps its digest, which is still checked); a plan that no longer reads
/// at all is not rechecked (the rules changed, not the record).
fn contract_finding(g: &tacho_schema::GoalCreated) -> Option<String> {
    let plan = tacho_goals::read_frozen(&tacho_goals::Submission {
        markdown: &g.plan,
        objective: g.objective.as_deref().unwrap_or(""),
        head: g.baseline.as_deref(),
        assure: g.assured,
    })
    .ok()?;
    match tacho_goals::contract_digest_matches(&plan, &g.contract_digest) {
        Some(true) => None,
        Some(false) => Some(format!(
            "goal {}: its contract digest {} is not the digest of its frozen plan",
            g.goal, g.contract_digest
        )),
        None => Some(format!(
            "goal {}: contract digest {} has a version this tacho does not know",
            g.goal, g.contract_digest
        )),
    }
}

fn verify(store: &Store, session: &str) -> Result<Verification, StoreError> {
    let log = store.verify_session(session, true)?;
    let mut check = ReplayCheck::new();
    let mut last = None;
    let mut contracts = Vec::new();
    let read = store.read_session(session, |e| {
        last = Some(e.event.time_unix_ns);
        check.apply(e.seq, &e.event);
        if let EventBody::GoalCreated(g) = e.event.body {
            contracts.push((e.seq, g));
        }
    });
    let mut replay = check.finish();
    for (seq, g) in contracts {
        if let Some(message) = contract_finding(&g) {
            replay.findings.push(tacho_projections::ReplayFinding {
                seq,
                rule: tacho_projections::ReplayRule::Evidence,
                message,
            });
        }
    }
    // A stored projection must be what a rebuild from the log gives.
    let mut projection = ProjectionCheck::NoneStored;
    if let Some((stored, head)) = projection::read_stored(store, session) {
        let backed = store
            .head_at(session, stored.next_seq)?
            .is_some_and(|h| hex(&h) == head);
        let location = projection::path(store, session);
        projection = if !backed {
            ProjectionCheck::Failed {
                location,
                problem: format!(
                    "the stored projection claims events 0..{} with head {head}, which the log does not hold",
                    stored.next_seq
                ),
            }
        } else if projection::rebuild(store, session, stored.next_seq)? != stored {
            ProjectionCheck::Failed {
                location,
                problem: format!(
                    "the stored projection (events 0..{}) differs from a rebuild from the log",
                    stored.next_seq
                ),
            }
        } else {
            ProjectionCheck::Equal {
                next_seq: stored.next_seq,
            }
        };
    }
    Ok(Verification {
        session: session.to_owned(),
        log,
        read_error: read.err(),
        replay,
        projection,
        last_event_unix_ns: last,
        package_findings: Vec::new(),
    })
}

/// Verifies a package (SPEC.md §9) without a store: its digest, then every check of
/// the session it holds.
pub fn verify_package(path: &Path) -> Result<Verification, ReplayError> {
    let bad = |source: std::io::Error| ReplayError::ReadPackage {
        path: path.to_path_buf(),
        source,
    };
    // A FIFO or a device would block or never end: a package is a regular file.
    if !std::fs::metadata(path).map_err(bad)?.is_file() {
        return Err(bad(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    let bytes = std::fs::read(path).map_err(bad)?;
    verify_package_bytes(&bytes)
        .map(|(v, _)| v)
        .map_err(|e| match e {
            PackageError::Store(e) => ReplayError::Store(e),
            source => ReplayError::Package {
                path: path.to_path_buf(),
                source,
            },
        })
}

/// Verifies a package's bytes: its digest, then every check of the session it holds;
/// with the package's store in memory.
pub(crate) fn verify_package_bytes(bytes: &[u8]) -> Result<(Verification, Store), PackageError> {
    let (store, session) = open_package(bytes)?;
    let mut v = verify(&store, &session)?;
    // Export writes whole sessions: every segment up to its last commit, nothing after
    // it, from `session.start` on. Anything else was not made by export.
    let mut extra = Vec::new();
    for f in &v.log.findings {
        if f.severity == Severity::Warning {
            extra.push(format!("{} (export writes no such thing)", f.message));
        }
    }
    if v.log.free_bytes > 0 {
        extra.push(format!(
            "{} bytes of zeros after the committed data (export writes none)",
            v.log.free_bytes
        ));
    }
    if v.log.events == 0 {
        extra.push("the package holds no events: a package holds a whole session".into());
    } else {
        let first = store.first_event(&session)?;
        if !matches!(first.map(|e| e.body), Some(EventBody::SessionStart(_))) {
            extra.push("the package's session does not begin with session.start".into());
        }
    }
    v.package_findings = extra;
    Ok((v, store))
}

impl Tacho {
    /// Verifies a session's record.
    pub fn verify_session(&self, session: &str) -> Result<Verification, StoreError> {
        verify(self.log(), session)
    }

    /// `--mode reconstruct`: the session's events in the step stream.
    pub fn reconstruct(&self, session: &str) -> Result<Reconstruction, StoreError> {
        Ok(Reconstruction::new(session, self.events(session)?))
    }

    /// A portable, self-verifying package of a session's record (refused for a record
    /// that does not verify), with the log's report.
    pub fn export_package(&self, session: &str) -> Result<(Vec<u8>, StreamReport), ReplayError> {
        let log = self.log().verify_session(session, true)?;
        if log.findings.iter().any(|f| f.severity == Severity::Error) {
            return Err(ReplayError::Unverified(session.to_owned()));
        }
        Ok((tacho_store::export_package(self.log(), session)?, log))
    }

    /// Per step, what a re-driven agent is expected to do: the calls, in order, with
    /// their inputs, and the results the original run got. Steps and their usage come
    /// from the execution graph, so the attribution is the same as in `tacho graph`.
    pub fn expectations(&self, session: &str) -> Result<Expectations, StoreError> {
        let mut g = ExecutionGraph::new(session);
        let mut model = None;
        let mut inputs: BTreeMap<String, Option<String>> = BTreeMap::new();
        let mut results: BTreeMap<String, ToolResult> = BTreeMap::new();
        // What a tool output's file references may name (SPEC §5.4): the session's
        // last snapshot before the result, and the paths the call edited.
        let mut last_snapshot: Option<String> = None;
        let mut snapshot_before: BTreeMap<String, String> = BTreeMap::new();
        let mut edited: BTreeMap<String, Vec<String>> = BTreeMap::new();
        self.log().read_session(session, |e| {
            g.apply(e.seq, &e.event);
            match e.event.body {
                EventBody::SessionStart(s) => model = s.model,
                EventBody::ToolCall(c) => {
                    inputs.insert(c.call_id, c.input);
                }
                EventBody::ToolResult(r) => {
                    if let Some(last) = &last_snapshot {
                        snapshot_before
                            .entry(r.call_id.clone())
                            .or_insert_with(|| last.clone());
                    }
                    results.entry(r.call_id.clone()).or_insert(r);
                }
                EventBody::SnapshotTaken(t) => {
                    last_snapshot = Some(t.snapshot);
                }
                EventBody::FileEdit(f) => {
                    if let Some(call) = f.call_id {
                        edited.entry(call).or_default().push(f.path);
                    }
                }
                _ => {}
            }
        })?;
        let steps: Vec<ExpectStep> = g
            .steps
            .iter()
            .map(|s| ExpectStep {
                kind: "expect_step",
                session: session.to_owned(),
                step: s.number,
                implicit: s.implicit,
                agent: s.agent.clone(),
                tokens_in: s.tokens.input,
                tokens_out: s.tokens.output,
                tool_calls: s
                    .tools
                    .iter()
                    .map(|t| ExpectCall {
                        seq: t.seq,
                        call_id: t.call_id.clone(),
                        tool: t.tool.clone(),
                        target: t.target.clone(),
                        input: inputs
                            .get(&t.call_id)
                            .and_then(|i| i.as_deref())
                            .and_then(|i| serde_json::from_str(i).ok()),
                        expected: results.get(&t.call_id).map(|r| Expected {
                            status: r.status,
                            exit_code: r.exit_code,
                            error: r.error.clone(),
                            // As the agent gave it: a whole file stored once is
                            // put back (left as its reference when it cannot be).
                            output: r.output.as_deref().map(|o| {
                                let paths = edited.get(&t.call_id).map_or(&[][..], Vec::as_slice);
                                let before = snapshot_before.get(&t.call_id).map(String::as_str);
                                self.tool_output(o, before, paths)
                                    .unwrap_or_else(|_| o.to_owned())
                            }),
                        }),
                    })
                    .collect(),
            })
            .collect();
        Ok(Expectations {
            header: ExpectHeader {
                kind: "expect_session",
                session: session.to_owned(),
                workspace: g.workspace.clone(),
                agent: g.agents.first().cloned(),
                model,
                start_snapshot: g.snapshots.first().map(|s| s.id.clone()),
                steps: steps.len(),
            },
            end: ExpectEnd {
                kind: "expect_end",
                session: session.to_owned(),
                end_reason: g.end_reason,
                steps: steps.len(),
                tool_calls: steps.iter().map(|s| s.tool_calls.len()).sum(),
                end_snapshot: g.snapshots.last().map(|s| s.id.clone()),
            },
            steps,
        })
    }
}
