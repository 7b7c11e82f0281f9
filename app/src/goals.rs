//! Goal assurance operations (BRIEF §3): freeze a plan, run a frozen check and record
//! its receipt, each check's state, the completion gate with the stall rule, block and
//! revise. `tacho goal …` and the MCP server call these, with the session they resolved
//! once from what their user gave ([`SessionId`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tacho_git::fingerprint::{Entry, Fingerprint, fingerprint};
use tacho_git::snapshot::{SnapshotError, head_commit, relative_path};
use tacho_goals::{Plan, PlanError, Submission, contract_digest, validate};
use tacho_projections::{CheckState, GoalState, Goals, check_states, environment_mismatch};
use tacho_schema::{
    EventBody, GoalAction, GoalCheckRun, GoalCheckStart, GoalCreated, GoalUpdate, SnapshotReason,
    Source,
};
use tacho_store::{Durability, StoreError};

use crate::checkenv;
use crate::error::{ErrorKind, Field, Kind, Namer, Operation, neutral};
use crate::proof::{self, ProofRun};
use crate::runner::{self, Ran, RunError};
use crate::{SessionId, Tacho};

/// The kinds a block can name.
pub const BLOCK_KINDS: &[&str] = &["external_dependency", "authorization", "user_input"];

/// Why a goal operation failed (a refused completion and a failed check are results,
/// not errors).
#[derive(Debug, thiserror::Error)]
pub enum GoalError {
    #[error("{}: {source}", path.display())]
    ReadPlan {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("workspace {}: {source}", path.display())]
    Workspace {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the current directory: {0}")]
    CurrentDir(#[source] std::io::Error),
    #[error("{source_name}: {error}")]
    Plan {
        source_name: String,
        #[source]
        error: PlanError,
    },
    #[error("{}", neutral(self))]
    NoGoal { session: String },
    #[error("session {session} has no goal matching {given:?}")]
    NoSuchGoal { session: String, given: String },
    #[error("goal {goal} has no check {check:?}; its checks: {}", checks.join(", "))]
    NoSuchCheck {
        goal: String,
        check: String,
        checks: Vec<String>,
    },
    #[error("{}", neutral(self))]
    BadBlockKind { given: String },
    #[error("{}", neutral(self))]
    IndependentWorkRemains,
    /// A block's reason or required change says nothing.
    #[error("{}", neutral(self))]
    Empty(Field),
    #[error("the reason for the replacement must say something")]
    EmptyReplaceReason,
    #[error("{}", neutral(self))]
    NotAReceipt {
        seq: u64,
        session: String,
        goal: String,
        receipts: Vec<u64>,
    },
    #[error("goal {0} is completed: a completed goal is not revised; create a new goal")]
    Completed(String),
    #[error("{}", neutral(self))]
    Superseded { goal: String, by: String },
    #[error("goal {goal} was already revised by {by}; revise that one")]
    AlreadyRevised { goal: String, by: String },
    #[error("the correction must say what was wrong")]
    EmptyCorrection,
    #[error(
        "goal {goal} records {digest:?} as its contract digest, which is not a contract digest of a version tacho knows (SPEC §12.1); it cannot be revised"
    )]
    MalformedDigest { goal: String, digest: String },
    #[error(
        "goal {goal} was already replaced by {by}: this replacement does not take over (replace {by} instead)"
    )]
    AlreadyReplaced { goal: String, by: String },
    #[error(
        "goal {goal} {what} while its replacement was prepared: the replacement does not take over"
    )]
    ChangedMeanwhile { goal: String, what: &'static str },
    #[error("goal {0} is completed: a completed goal is not replaced; create a new goal")]
    CompletedNotReplaced(String),
    #[error("goal {goal} is not cleared: {why}")]
    NotCleared { goal: String, why: String },
    #[error("goal {goal} is not paused{}; there is nothing to resume", why.map(|w| format!(" ({w})")).unwrap_or_default())]
    NotPaused {
        goal: String,
        why: Option<&'static str>,
    },
    #[error("goal {goal} was replaced by {by}: resume or work on {by} instead")]
    ReplacedNotResumed { goal: String, by: String },
    #[error(
        "check {check} names the variable {name}, which is not set where the goal is frozen (SPEC §12.2): set it, or leave it out of the plan"
    )]
    UnsetVariable { check: String, name: String },
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error("making a check's clean room: {0}")]
    Room(#[from] tacho_git::room::RoomError),
}

impl Kind for GoalError {
    fn kind(&self) -> ErrorKind {
        match self {
            GoalError::NoGoal { .. } | GoalError::NoSuchGoal { .. } => ErrorKind::NotFound,
            // A plan file or workspace that is not there, not a regular file, too large
            // or not text is the input's fault (exit 2); one that cannot be read is an
            // I/O error (exit 5), as every other read.
            GoalError::ReadPlan { source, .. } | GoalError::Workspace { source, .. } => {
                match source.kind() {
                    std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::InvalidInput
                    | std::io::ErrorKind::InvalidData
                    | std::io::ErrorKind::NotADirectory => ErrorKind::Input,
                    _ => ErrorKind::Io,
                }
            }
            GoalError::CurrentDir(_) | GoalError::Run(_) | GoalError::Room(_) => ErrorKind::Io,
            GoalError::Store(e) => e.kind(),
            GoalError::Snapshot(e) => e.kind(),
            GoalError::Plan { .. }
            | GoalError::NoSuchCheck { .. }
            | GoalError::BadBlockKind { .. }
            | GoalError::IndependentWorkRemains
            | GoalError::Empty(_)
            | GoalError::EmptyReplaceReason
            | GoalError::NotAReceipt { .. }
            | GoalError::Completed(_)
            | GoalError::Superseded { .. }
            | GoalError::AlreadyRevised { .. }
            | GoalError::EmptyCorrection
            | GoalError::MalformedDigest { .. }
            | GoalError::AlreadyReplaced { .. }
            | GoalError::ChangedMeanwhile { .. }
            | GoalError::CompletedNotReplaced(_)
            | GoalError::NotCleared { .. }
            | GoalError::NotPaused { .. }
            | GoalError::ReplacedNotResumed { .. }
            | GoalError::UnsetVariable { .. } => ErrorKind::Input,
        }
    }

    fn field(&self) -> Option<Field> {
        match self {
            GoalError::BadBlockKind { .. } => Some(Field::BlockKind),
            GoalError::IndependentWorkRemains => Some(Field::NoIndependentWork),
            GoalError::Empty(field) => Some(*field),
            GoalError::NotAReceipt { .. } => Some(Field::Evidence),
            GoalError::Superseded { .. } => Some(Field::Goal),
            _ => None,
        }
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        match self {
            GoalError::BadBlockKind { given } => write!(
                f,
                "{} {given:?}: one of {}",
                name.field(Field::BlockKind),
                BLOCK_KINDS.join(", ")
            ),
            GoalError::IndependentWorkRemains => write!(
                f,
                "a goal is blocked only when no independent work remains: pass {} to state it, or keep working",
                name.field(Field::NoIndependentWork)
            ),
            GoalError::Empty(field) => write!(f, "{} must say something", name.field(*field)),
            GoalError::NoGoal { session } => write!(
                f,
                "session {session} has no goal; create one with {}",
                name.operation(Operation::CreateGoal)
            ),
            GoalError::NotAReceipt {
                seq,
                session,
                goal,
                receipts,
            } => write!(
                f,
                "{} {seq}: event #{seq} of session {session} is not a receipt of goal {goal} (its receipts: {})",
                name.field(Field::Evidence),
                if receipts.is_empty() {
                    "none yet".to_string()
                } else {
                    receipts
                        .iter()
                        .map(|s| format!("#{s}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
            GoalError::Superseded { goal, by } => write!(
                f,
                "goal {goal} was replaced by revision {by}: calls made for it cannot end its replacement; use {} {by}",
                name.field(Field::Goal)
            ),
            other => fmt::Display::fmt(other, f),
        }
    }
}

/// A check of a frozen plan, as `goal create` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct CheckCommand {
    pub id: String,
    pub command: String,
}

/// A frozen goal.
#[derive(Debug, Clone, Serialize)]
pub struct Frozen {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub goal: String,
    pub session: String,
    pub title: String,
    pub contract_digest: String,
    pub baseline: Option<String>,
    /// The check ids; `None` without an assurance contract.
    pub checks: Option<Vec<String>>,
    pub check_commands: Option<Vec<CheckCommand>>,
    pub seq: u64,
    /// Said when the plan is larger than the advisory size (a warning, not a refusal).
    pub advisory: Option<String>,
    /// What a reviewer should know about what the goal's receipts can prove (SPEC
    /// §12.2): e.g. advice to name `changePaths`.
    pub proof_advice: Vec<String>,
}

/// A revision of a goal.
#[derive(Debug, Clone, Serialize)]
pub struct Revised {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub goal: String,
    pub revises: String,
    pub revision: u32,
    pub contract_digest: String,
    pub previous_digest: String,
    pub seq: u64,
    /// Said when the plan is larger than the advisory size.
    pub advisory: Option<String>,
}

/// A goal marked blocked.
#[derive(Debug, Clone, Serialize)]
pub struct Blocked {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub goal: String,
    pub seq: u64,
}

/// A check's receipt, recorded.
#[derive(Debug, Clone, Serialize)]
pub struct Receipt {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub session: String,
    pub seq: u64,
    pub passed: bool,
    pub receipt: GoalCheckRun,
    /// Files fingerprinted beyond the plan's source paths: those edit events reported.
    pub additional_paths: Vec<String>,
    /// Paths edit events reported outside the workspace, left out of the fingerprint.
    pub external_paths_left_out: Vec<String>,
    /// Why the run is not bound to the environment frozen with the goal, if it is not
    /// (then it did not pass, whatever its exit code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unbound: Option<String>,
}

/// One check's state against the source now.
#[derive(Debug, Clone, Serialize)]
pub struct CheckStatus {
    pub id: String,
    pub state: &'static str,
    pub why: Option<String>,
    pub receipt_seq: Option<u64>,
    /// From the frozen plan: what the check runs and asserts, and the source it covers.
    pub command: String,
    pub purpose: String,
    pub source_paths: Vec<String>,
    pub sources: Vec<Source>,
    /// The event numbers of the check's most recent receipts (at most
    /// `RECENT_EVIDENCE`), newest first.
    pub recent_evidence: Vec<u64>,
    /// The plan's description of where the check runs (required in new plans).
    pub environment: Option<String>,
    /// A regression guard (must pass without the change and with it), declared or by
    /// the goal kind.
    pub guard: bool,
    /// What the latest receipt proves (`red_green`, `guard`, `unable_to_fail`,
    /// `guard_failed`, `unproven`; absent for a receipt from before clean rooms), and
    /// in words.
    pub proof: Option<String>,
    pub proof_words: Option<String>,
    /// Whether the latest receipt ran in a clean room.
    pub clean_room: Option<bool>,
    /// Files outside the change that differ from the goal's start, as the latest
    /// receipt found them (`M`/`A`/`D PATH`): tests, fixtures, configuration, the
    /// check's scripts edited after the freeze.
    pub changed_since_freeze: Vec<String>,
}

/// How many receipts a check's status lists as its recent evidence.
pub const RECENT_EVIDENCE: usize = 5;

/// A goal's status.
#[derive(Debug, Clone, Serialize)]
pub struct GoalStatus {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub session: String,
    pub goal: String,
    pub title: String,
    pub revision: u32,
    pub assured: bool,
    pub contract_digest: String,
    pub completed: bool,
    pub blocked: Option<String>,
    pub paused: Option<String>,
    /// Set aside by the user (`goal clear`): the reason and where.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cleared: Option<String>,
    pub revised_by: Option<String>,
    pub revises: Option<String>,
    pub correction: Option<String>,
    /// The source fingerprint now, or why there is no fresh evidence.
    pub fingerprint: Option<String>,
    pub no_fresh_evidence: Option<String>,
    pub checks: Vec<CheckStatus>,
    pub can_complete: bool,
    /// Files fingerprinted beyond the plan's source paths: those edit events reported.
    pub additional_paths: Vec<String>,
    /// Paths edit events reported outside the workspace, left out of the fingerprint.
    pub external_paths_left_out: Vec<String>,
    /// Checks of a plan frozen before a rule that now refuses them (see
    /// `check_warnings`).
    pub warnings: Vec<String>,
    /// Why (or why not): the reason `goal complete` would record now.
    pub completion_reason: String,
    /// The environment checks run in, frozen with the goal (`NAME=VALUE`), its digest,
    /// and the programs its commands resolved to then (`BLAKE3-HEX  PATH`): a receipt
    /// counts only with that digest and those programs. Empty for a goal frozen before
    /// check environments were (SPEC §12.2).
    pub environment: Vec<String>,
    pub environment_digest: Option<String>,
    pub programs: Vec<String>,
    /// The contract's `changePaths`: what a check's run without the change puts back
    /// as it was at the goal's start (empty: every source path is put back).
    pub change_paths: Vec<String>,
    /// The snapshot taken when the goal was frozen (absent for a goal frozen before
    /// start snapshots, whose receipts cannot be proven able to fail).
    pub start_snapshot: Option<String>,
    /// The diff of each file outside the change edited since the freeze (as the
    /// checks' latest receipts list them) against the start snapshot, as the workspace
    /// has it now: at most [`CHANGED_DIFFS_MAX`] files; `unified` is `None` for a file
    /// that is not text.
    pub changed_diffs: Vec<ChangedDiff>,
    /// For a session recorded by an agent whose stop cannot be refused (Cline): that
    /// the completion gate refused its stop and could only record it.
    pub stop_not_refusable: Option<String>,
}

/// How many files `goal status` shows the diff of (the rest are named).
pub const CHANGED_DIFFS_MAX: usize = 20;

/// A file outside a goal's change edited since the freeze, and its diff.
#[derive(Debug, Clone, Serialize)]
pub struct ChangedDiff {
    pub path: String,
    pub unified: Option<String>,
}

/// The completion gate's answer.
#[derive(Debug, Clone, Serialize)]
pub struct Completion {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub session: String,
    pub goal: String,
    pub accepted: bool,
    pub reason: String,
    /// Every check not passed, and why.
    pub open: Vec<String>,
    /// The stall rule's hint (second fruitless attempt) or pause (third), in words.
    pub note: Option<String>,
    /// What the stall rule did, if anything: what callers decide on (never `note`).
    pub stall: Option<Stall>,
    /// Checks of a plan frozen before a rule that now refuses them (see
    /// `check_warnings`).
    pub warnings: Vec<String>,
}

/// What the stall rule did at a refused completion attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stall {
    /// The second fruitless attempt: a recovery hint.
    Hint,
    /// The third: the goal is paused (it no longer holds the agent at a stop).
    Paused,
}

/// What `goal block` states.
#[derive(Debug, Clone)]
pub struct BlockRequest<'a> {
    pub kind: &'a str,
    pub reason: &'a str,
    pub required_change: &'a str,
    /// Receipts (event numbers of this goal's `goal.check` events) it rests on.
    pub evidence: &'a [u64],
    pub no_independent_work: bool,
}

impl BlockRequest<'_> {
    /// What a block states, checked before anything is looked up (a frontend checks
    /// it before it resolves the session, so a wrong statement is said first).
    pub fn check(&self) -> Result<(), GoalError> {
        if !BLOCK_KINDS.contains(&self.kind) {
            return Err(GoalError::BadBlockKind {
                given: self.kind.to_owned(),
            });
        }
        if !self.no_independent_work {
            return Err(GoalError::IndependentWorkRemains);
        }
        for (what, v) in [
            (Field::Reason, self.reason),
            (Field::RequiredChange, self.required_change),
        ] {
            if v.trim().is_empty() {
                return Err(GoalError::Empty(what));
            }
        }
        Ok(())
    }
}

/// What `goal create` is given.
#[derive(Debug, Clone)]
pub struct CreateRequest<'a> {
    pub session: &'a SessionId,
    /// The plan's Markdown.
    pub markdown: &'a str,
    /// Names the plan in error messages.
    pub source_name: &'a str,
    pub objective: Option<String>,
    pub assure: bool,
    /// Default: the session's workspace, else the current directory.
    pub workspace: Option<PathBuf>,
}

/// Reads a plan file: a regular file (a FIFO would block), and no larger than a plan
/// can be (its limit applies to the plan as frozen; a file eight times that size cannot
/// fit), so nothing large is read only to be refused.
pub fn read_plan(path: &Path) -> Result<String, GoalError> {
    const FILE_BYTES_MAX: u64 = 8 * tacho_goals::plan::MAX_PLAN_BYTES as u64;
    let bad = |source: std::io::Error| GoalError::ReadPlan {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(bad)?;
    if !meta.is_file() {
        return Err(bad(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        )));
    }
    if meta.len() > FILE_BYTES_MAX {
        return Err(bad(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} bytes; a plan is at most {} bytes",
                meta.len(),
                tacho_goals::plan::MAX_PLAN_BYTES
            ),
        )));
    }
    // Opened without blocking and checked again through the descriptor: a FIFO put in
    // the file's place since the stat is refused, not waited on.
    let bytes = tacho_git::snapshot::read_regular(path, FILE_BYTES_MAX).map_err(bad)?;
    String::from_utf8(bytes)
        .map_err(|e| bad(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

/// Validates a plan; `{BASELINE}` becomes the workspace's HEAD.
fn validate_plan(
    markdown: &str,
    source_name: &str,
    ws: &Path,
    objective: &str,
    assure: bool,
) -> Result<Plan, GoalError> {
    let head = head_commit(ws)?;
    validate(&Submission {
        markdown,
        objective,
        head: head.as_deref(),
        assure,
    })
    .map_err(|error| GoalError::Plan {
        source_name: source_name.to_owned(),
        error,
    })
}

/// The fingerprint the goal's receipts are bound to: its source paths plus the files
/// edit events reported since it was created, with its entries. `Err` says why there
/// is no fresh evidence.
fn goal_fingerprint_entries(
    g: &GoalState,
) -> Result<Result<(String, Vec<Entry>), String>, SnapshotError> {
    let ws = PathBuf::from(&g.created.workspace);
    let edited: Vec<String> = g
        .edited
        .keys()
        .filter_map(|p| relative_path(&ws, p).ok())
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(
        match fingerprint(&ws, &g.source_paths(), &edited, threads)? {
            Fingerprint::Fresh {
                digest, entries, ..
            } => Ok((digest, entries)),
            Fingerprint::NoFreshEvidence(w) => Err(w.to_string()),
        },
    )
}

/// The digest of [`goal_fingerprint_entries`].
fn goal_fingerprint(g: &GoalState) -> Result<Result<String, String>, SnapshotError> {
    Ok(goal_fingerprint_entries(g)?.map(|(d, _)| d))
}

/// The source now, each check's state, the checks not passed, and whether the goal can
/// complete.
struct Assessed {
    now: Result<String, String>,
    states: Vec<(String, CheckState)>,
    open: Vec<String>,
    can_complete: bool,
}

/// The one completion decision, `(accepted, reason)`: `goal status` shows it and `goal
/// complete` records it, so they never disagree.
fn decide(g: &GoalState, states: &[(String, CheckState)], open: &[String]) -> (bool, String) {
    if let Some(by) = &g.revised_by {
        return (
            false,
            format!("replaced by revision {by}: its calls cannot complete this goal"),
        );
    }
    if let Some((why, seq)) = &g.cleared {
        return (
            false,
            format!("cleared by the user at #{seq} ({why}): a cleared goal does not complete"),
        );
    }
    if !g.created.assured {
        // No contract: the plain rule, and the answer says so.
        return match g.plain_rule() {
            Ok(()) => (
                true,
                "no assurance contract; the plain rule holds: a verification passed after the last edit".to_string(),
            ),
            Err(why) => (
                false,
                format!("no assurance contract; the plain rule does not hold: {why}"),
            ),
        };
    }
    if states.is_empty() {
        return (
            false,
            "the assurance contract declares no check that could pass".to_string(),
        );
    }
    if open.is_empty() {
        (
            true,
            "every check passed on the source as it is now".to_string(),
        )
    } else {
        (
            false,
            format!("{} of {} checks not passed", open.len(), states.len()),
        )
    }
}

fn assess_goal(g: &GoalState) -> Result<Assessed, SnapshotError> {
    let now = goal_fingerprint(g)?;
    let states = check_states(g, now.as_deref().map_err(String::as_str));
    let open: Vec<String> = states
        .iter()
        .filter(|(_, s)| *s != CheckState::Passed)
        .map(|(id, s)| match s {
            CheckState::Failed(w) | CheckState::Stale(w) => format!("{id}: {} ({w})", s.name()),
            other => format!("{id}: {}", other.name()),
        })
        .collect();
    let can_complete = decide(g, &states, &open).0;
    Ok(Assessed {
        now,
        states,
        open,
        can_complete,
    })
}

/// The checks of a goal's frozen plan that the rules for new plans refuse (one that
/// can hide a failure, a weak check such as a lone path-filtered `git log`): a plan
/// frozen before a rule keeps its digest and its goal can still complete, but status
/// and the completion gate say so.
pub fn check_warnings(g: &GoalState) -> Vec<String> {
    let objective = g.created.objective.as_deref().unwrap_or_default();
    let mut out: Vec<String> = g
        .check_ids()
        .iter()
        .filter_map(|(id, command)| tacho_goals::check_command_problem(id, command, objective))
        .map(|w| {
            format!("{w} (the plan was frozen before this rule and keeps its digest; its receipts cannot prove that the check would have failed)")
        })
        .collect();
    out.extend(proof_warnings(g));
    out
}

/// What a reviewer should know about what the goal's receipts can prove (SPEC §12.2,
/// red/green): a `changePaths` entry that looks like a test, fixture or check script
/// (red/green would then compare old tests with new ones over unchanged code); a
/// contract without `changePaths` (its run without the change is the whole baseline
/// tree: it catches checks that test nothing, not a weakened test); a goal kind that
/// makes every check a guard; a goal frozen before start snapshots.
pub fn proof_warnings(g: &GoalState) -> Vec<String> {
    let Some(a) = g.assurance().filter(|_| g.created.assured) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for p in a.change_paths.iter().filter(|p| tacho_schema::test_like(p)) {
        out.push(format!(
            "changePaths names {p}, which looks like a test, fixture or check script: a run without the change then puts back old tests over unchanged code and proves nothing about the implementation"
        ));
    }
    let commands: Vec<&str> = a.checks.iter().map(|c| c.command.as_str()).collect();
    for p in &a.change_paths {
        if let Some(c) = commands.iter().find(|c| {
            c.split_whitespace()
                .any(|w| tacho_schema::path_within(w, p))
        }) {
            out.push(format!(
                "changePaths names {p}, which the check command `{c}` runs: a check whose own script is the change can be red/green without testing anything"
            ));
        }
    }
    if a.change_paths.is_empty() {
        out.push("the contract names no changePaths: a check's run without the change puts back every source path as at the goal's start, which catches checks that test nothing but not a weakened test; name the implementation the goal changes in changePaths".into());
    }
    if tacho_schema::kind_makes_guards(&g.created.kind) {
        out.push(format!(
            "goal kind {:?} makes every check a regression guard: receipts prove the checks passed before and after, not that the change did anything",
            g.created.kind
        ));
    }
    if g.created.start_snapshot.is_none() {
        out.push("the goal was frozen before tacho took a snapshot at freeze: no check can be proven able to fail; revise the goal to freeze one".into());
    }
    out
}

/// A goal replaced by a revision takes no call that could end a goal: its
/// replacement is the goal now.
fn not_superseded(g: &GoalState) -> Result<(), GoalError> {
    match &g.revised_by {
        Some(by) => Err(GoalError::Superseded {
            goal: g.created.goal.clone(),
            by: by.clone(),
        }),
        None => Ok(()),
    }
}

fn pick<'a>(gs: &'a Goals, session: &str, id: Option<&str>) -> Result<&'a GoalState, GoalError> {
    gs.find(id).ok_or_else(|| match id {
        Some(given) => GoalError::NoSuchGoal {
            session: session.to_owned(),
            given: given.to_owned(),
        },
        None => GoalError::NoGoal {
            session: session.to_owned(),
        },
    })
}

/// A goal's status: each check's state against the source now.
fn status_of(session: String, g: &GoalState) -> Result<GoalStatus, GoalError> {
    let a = assess_goal(g)?;
    let (additional_paths, external_paths_left_out) = disclosure(g);
    Ok(GoalStatus {
        kind: "goal_status",
        session,
        goal: g.created.goal.clone(),
        title: g.created.title.clone(),
        revision: g.created.revision,
        assured: g.created.assured,
        contract_digest: g.created.contract_digest.clone(),
        completed: g.completed,
        blocked: g.blocked.clone(),
        paused: g.paused.clone(),
        cleared: g
            .cleared
            .as_ref()
            .map(|(why, seq)| format!("{why} (#{seq})")),
        revised_by: g.revised_by.clone(),
        revises: g.created.revises.clone(),
        correction: g.created.correction.clone(),
        fingerprint: a.now.as_ref().ok().cloned(),
        no_fresh_evidence: a.now.as_ref().err().cloned(),
        checks: a
            .states
            .iter()
            .map(|(id, s)| CheckStatus {
                id: id.clone(),
                state: s.name(),
                why: match s {
                    CheckState::Failed(w) | CheckState::Stale(w) => Some(w.clone()),
                    CheckState::Running(at) => {
                        Some(format!("started at event #{at}, no receipt yet"))
                    }
                    _ => None,
                },
                receipt_seq: g.receipts.get(id).map(|r| r.0),
                ..check_contract(g, id)
            })
            .collect(),
        can_complete: a.can_complete,
        additional_paths,
        external_paths_left_out,
        warnings: check_warnings(g),
        completion_reason: decide(g, &a.states, &a.open).1,
        environment: g.created.environment.clone(),
        environment_digest: g.created.environment_digest.clone(),
        programs: g.created.programs.clone(),
        change_paths: g.assurance().map(|a| a.change_paths).unwrap_or_default(),
        start_snapshot: g.created.start_snapshot.clone(),
        changed_diffs: Vec::new(),
        stop_not_refusable: None,
    })
}

/// The advisory for a plan larger than [`tacho_goals::plan::ADVISORY_PLAN_BYTES`]
/// (frozen all the same: only [`tacho_goals::plan::MAX_PLAN_BYTES`] refuses).
pub fn plan_advisory(rendered: &str) -> Option<String> {
    use tacho_goals::plan::{ADVISORY_PLAN_BYTES, MAX_PLAN_BYTES};
    let size = rendered.len();
    (size > ADVISORY_PLAN_BYTES).then(|| {
        format!(
            "the rendered plan is {size} bytes, {} over the advised {} bytes: a shorter plan is easier to check (frozen all the same; the limit is {} bytes)",
            size - ADVISORY_PLAN_BYTES,
            tacho_projections::thousands(ADVISORY_PLAN_BYTES as u64),
            tacho_projections::thousands(MAX_PLAN_BYTES as u64)
        )
    })
}

/// A check's entry in a status with what the frozen plan says of it (its command,
/// purpose, the plan's source paths and sources); `missing` until the status fills in
/// the state.
fn check_contract(g: &GoalState, id: &str) -> CheckStatus {
    let a = g.assurance();
    let check = a
        .as_ref()
        .and_then(|a| a.checks.iter().find(|c| c.id == id));
    let latest = g.receipts.get(id).map(|(_, r)| r);
    CheckStatus {
        id: id.to_owned(),
        state: CheckState::Missing.name(),
        why: None,
        receipt_seq: None,
        command: check.map(|c| c.command.clone()).unwrap_or_default(),
        purpose: check.map(|c| c.purpose.clone()).unwrap_or_default(),
        environment: check.and_then(|c| c.environment.clone()),
        source_paths: a
            .as_ref()
            .map(|a| a.source_paths.clone())
            .unwrap_or_default(),
        sources: a.map(|a| a.sources).unwrap_or_default(),
        recent_evidence: g
            .receipt_history
            .get(id)
            .map(|seqs| seqs.iter().rev().take(RECENT_EVIDENCE).copied().collect())
            .unwrap_or_default(),
        guard: proof::is_guard(g, id),
        proof: latest.and_then(|r| r.proof.clone()),
        proof_words: latest.and_then(|r| {
            r.proof
                .as_deref()
                .map(|p| proof::proof_words(p, r.red_scope.as_deref()))
        }),
        clean_room: latest.map(|r| r.clean_room),
        changed_since_freeze: latest
            .map(|r| r.changed_since_freeze.clone())
            .unwrap_or_default(),
    }
}

/// What the goal's fingerprint covers beyond its plan (BRIEF §3, "Disclosure"): the
/// files edit events reported that lie outside every declared source path (each
/// fingerprinted as a file, workspace-relative), and the reported paths outside the
/// workspace, which are left out (as reported). Both sorted.
pub fn disclosure(g: &GoalState) -> (Vec<String>, Vec<String>) {
    let ws = PathBuf::from(&g.created.workspace);
    let declared: Vec<String> = g
        .source_paths()
        .iter()
        .map(|p| p.trim_start_matches("./").trim_end_matches('/').to_owned())
        .collect();
    let covered = |rel: &str| {
        declared.iter().any(|d| {
            d.is_empty()
                || d == "."
                || rel == d
                || rel
                    .strip_prefix(d.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
    };
    let (mut additional, mut external) = (Vec::new(), Vec::new());
    for p in g.edited.keys() {
        match relative_path(&ws, p) {
            Ok(rel) if !covered(&rel) => additional.push(rel),
            Ok(_) => {}
            Err(_) if outside_workspace(&ws, p) => external.push(p.clone()),
            // Inside the workspace but not a file a fingerprint can name (`.git`):
            // neither fingerprinted nor external.
            Err(_) => {}
        }
    }
    additional.sort();
    additional.dedup();
    (additional, external)
}

/// Whether a reported path lies outside the workspace: leaving it through `..`, or
/// absolute and under no spelling of it.
fn outside_workspace(ws: &Path, p: &str) -> bool {
    let path = Path::new(p);
    path.components()
        .any(|c| matches!(c, std::path::Component::ParentDir))
        || (path.is_absolute() && !path.starts_with(ws))
}

/// The environment frozen with a goal (SPEC §12.2): this process's values of the
/// frozen names, their digest, and the programs the plan's check commands resolve to
/// through that `PATH` now. The rest of the `goal.created` is the caller's.
fn frozen_environment(plan: &Plan, ws: &Path) -> Result<GoalCreated, GoalError> {
    let mut variables: Vec<&str> = Vec::new();
    for c in plan.assurance.iter().flat_map(|a| &a.checks) {
        for v in &c.variables {
            if checkenv::process_var(v).is_none() {
                return Err(GoalError::UnsetVariable {
                    check: c.id.clone(),
                    name: v.clone(),
                });
            }
            variables.push(v);
        }
    }
    let environment = checkenv::freeze_from_process(&variables);
    let mut names: Vec<String> = Vec::new();
    for c in plan.assurance.iter().flat_map(|a| &a.checks) {
        for n in checkenv::program_names(&c.command, runner::shell()) {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    let mut programs = checkenv::resolve(&names, &environment, ws);
    programs.sort();
    Ok(GoalCreated {
        environment_digest: Some(checkenv::digest(&environment)),
        programs,
        environment,
        ..GoalCreated::default()
    })
}

/// The environment a check of `g` runs in: the one frozen with it, or for a goal
/// frozen before environments were (an empty `environment`), the frozen names' values
/// in this process (still everything else cleared).
fn check_environment(g: &GoalState) -> Vec<String> {
    if g.created.environment.is_empty() {
        checkenv::freeze_from_process(&[])
    } else {
        g.created.environment.clone()
    }
}

impl Tacho {
    /// The session's id and its goals, folded from its log.
    pub(crate) fn goals(&self, session: &SessionId) -> Result<(String, Goals), GoalError> {
        let mut g = Goals::default();
        self.log()
            .read_session(session, |e| g.apply(e.seq, &e.event))?;
        Ok((session.to_string(), g))
    }

    fn append_goal_event(&self, session: &str, body: EventBody) -> Result<u64, GoalError> {
        let r = self
            .log()
            .writer(session)?
            .append(self.now(), &body, Durability::Sync)?;
        Ok(r.last_seq)
    }

    /// Takes the snapshot a new assured goal starts from and records it in the session
    /// (a `snapshot.taken`, so that gc keeps it): the state a check's run "without the
    /// change" puts back. `None`, with a note, when no snapshot can be taken there (a
    /// refused workspace): the goal's checks then cannot be proven able to fail, and
    /// its gate stays closed.
    fn start_snapshot(&self, session: &str, ws: &Path) -> Result<Option<String>, GoalError> {
        let taken = (|| {
            let _guard = self.snapshot_guard()?;
            let (snap, ws) = self.take_snapshot(ws, &[])?;
            let body = crate::snapshots::taken_event(&snap, &ws, SnapshotReason::Manual, None);
            Ok::<_, crate::snapshots::SnapshotOpError>((snap.id, body))
        })();
        match taken {
            Ok((id, body)) => {
                self.append_goal_event(session, body)?;
                Ok(Some(id))
            }
            Err(e) => {
                self.note(&format!(
                    "no snapshot could be taken at freeze ({e}): this goal's checks cannot be proven able to fail"
                ));
                Ok(None)
            }
        }
    }

    /// The `goal.created` of a validated plan, under a fresh goal id.
    fn freeze(
        &self,
        plan: &Plan,
        objective: Option<String>,
        assured: bool,
        ws: &Path,
        revision: u32,
    ) -> Result<GoalCreated, GoalError> {
        Ok(GoalCreated {
            goal: self.new_goal_id(),
            revision,
            title: plan.title.clone(),
            kind: plan.kind.clone(),
            objective,
            assured,
            contract_digest: contract_digest(plan),
            baseline: plan.baseline.clone(),
            workspace: ws.display().to_string(),
            plan: plan.markdown.clone(),
            assurance: plan
                .assurance
                .as_ref()
                .and_then(|x| serde_json::to_string(x).ok()),
            ..frozen_environment(plan, ws)?
        })
    }

    /// Freezes a plan as a goal of a session.
    pub fn create_goal(&self, req: CreateRequest<'_>) -> Result<Frozen, GoalError> {
        let session = req.session.to_string();
        let ws = match req.workspace {
            Some(w) => w,
            None => match self.recorded_workspace(&session)? {
                Some(w) => PathBuf::from(w),
                None => std::env::current_dir().map_err(GoalError::CurrentDir)?,
            },
        };
        let ws = ws.canonicalize().map_err(|source| GoalError::Workspace {
            path: ws.clone(),
            source,
        })?;
        let plan = validate_plan(
            req.markdown,
            req.source_name,
            &ws,
            req.objective.as_deref().unwrap_or(""),
            req.assure,
        )?;
        // A contract makes the goal assured: its checks, not a promise, decide
        // completion. `assure` only makes a contract required.
        let assured = req.assure || plan.assurance.is_some();
        let mut created = self.freeze(&plan, req.objective, assured, &ws, 1)?;
        if assured {
            created.start_snapshot = self.start_snapshot(&session, &ws)?;
        }
        let (goal, digest) = (created.goal.clone(), created.contract_digest.clone());
        let seq = self.append_goal_event(&session, EventBody::GoalCreated(created))?;
        let proof_advice = self
            .goals(&SessionId::resolved(session.clone()))?
            .1
            .find(Some(&goal))
            .map(proof_warnings)
            .unwrap_or_default();
        let checks = plan.assurance.as_ref().map(|x| x.checks.clone());
        Ok(Frozen {
            kind: "goal",
            goal,
            session,
            title: plan.title,
            contract_digest: digest,
            baseline: plan.baseline,
            checks: checks
                .as_ref()
                .map(|cs| cs.iter().map(|c| c.id.clone()).collect()),
            check_commands: checks.map(|cs| {
                cs.into_iter()
                    .map(|c| CheckCommand {
                        id: c.id,
                        command: c.command,
                    })
                    .collect()
            }),
            seq,
            advisory: plan_advisory(&plan.markdown),
            proof_advice,
        })
    }

    /// Marks a goal blocked.
    pub fn block_goal(
        &self,
        session: &SessionId,
        goal: Option<&str>,
        req: &BlockRequest<'_>,
    ) -> Result<Blocked, GoalError> {
        req.check()?;
        let (session, gs) = self.goals(session)?;
        let g = pick(&gs, &session, goal)?;
        not_superseded(g)?;
        let mut all = Vec::new();
        self.log().read_session(&session, |e| {
            if let EventBody::GoalCheckRun(r) = &e.event.body
                && r.goal == g.created.goal
            {
                all.push(e.seq);
            }
        })?;
        if let Some(seq) = req.evidence.iter().find(|ev| !all.contains(ev)) {
            return Err(GoalError::NotAReceipt {
                seq: *seq,
                session,
                goal: g.created.goal.clone(),
                receipts: all,
            });
        }
        let body = EventBody::GoalUpdate(GoalUpdate {
            goal: g.created.goal.clone(),
            revision: g.created.revision,
            action: GoalAction::Block,
            accepted: true,
            reason: Some(req.reason.to_owned()),
            block_kind: Some(req.kind.to_owned()),
            required_change: Some(req.required_change.to_owned()),
            evidence: req.evidence.to_vec(),
            no_independent_work: true,
            ..GoalUpdate::default()
        });
        let seq = self.append_goal_event(&session, body)?;
        Ok(Blocked {
            kind: "goal_blocked",
            goal: g.created.goal.clone(),
            seq,
        })
    }

    /// Replaces a goal's plan after a correction: a new goal, revision and digest
    /// linked to the old one; the old receipts cannot satisfy it.
    pub fn revise_goal(
        &self,
        session_id: &SessionId,
        goal: Option<&str>,
        correction: &str,
        plan_path: &Path,
    ) -> Result<Revised, GoalError> {
        let (session, gs) = self.goals(session_id)?;
        let old = pick(&gs, &session, goal)?;
        if old.completed {
            return Err(GoalError::Completed(old.created.goal.clone()));
        }
        if let Some(n) = &old.revised_by {
            return Err(GoalError::AlreadyRevised {
                goal: old.created.goal.clone(),
                by: n.clone(),
            });
        }
        if correction.trim().is_empty() {
            return Err(GoalError::EmptyCorrection);
        }
        // The revision links to the old digest: refuse before writing anything when
        // the recorded one is not a digest at all.
        let digest = &old.created.contract_digest;
        if tacho_goals::contract_digest_version(digest).is_none() {
            return Err(GoalError::MalformedDigest {
                goal: old.created.goal.clone(),
                digest: digest.clone(),
            });
        }
        let ws = PathBuf::from(&old.created.workspace);
        let objective = old.created.objective.clone().unwrap_or_default();
        let markdown = read_plan(plan_path)?;
        let plan = validate_plan(
            &markdown,
            &plan_path.display().to_string(),
            &ws,
            &objective,
            old.created.assured,
        )?;
        let revision = old.created.revision.saturating_add(1);
        let mut created = self.freeze(
            &plan,
            old.created.objective.clone(),
            old.created.assured,
            &ws,
            revision,
        )?;
        created.revises = Some(old.created.goal.clone());
        created.previous_digest = Some(old.created.contract_digest.clone());
        created.correction = Some(correction.to_owned());
        // The goal started where it started: a revision keeps its start snapshot.
        created.start_snapshot = match &old.created.start_snapshot {
            Some(s) => Some(s.clone()),
            None if created.assured => self.start_snapshot(&session, &ws)?,
            None => None,
        };
        let (goal, digest) = (created.goal.clone(), created.contract_digest.clone());
        // Revised only if no other revision (or completion) came first: read again
        // under the session's writer, so that two revisions at once leave one.
        let mut w = self.log().writer(&session)?;
        let (_, gs_now) = self.goals(session_id)?;
        let now = pick(&gs_now, &session, Some(&old.created.goal))?;
        if let Some(n) = &now.revised_by {
            return Err(GoalError::AlreadyRevised {
                goal: old.created.goal.clone(),
                by: n.clone(),
            });
        }
        if now.completed {
            return Err(GoalError::Completed(old.created.goal.clone()));
        }
        let seq = w
            .append(
                self.now(),
                &EventBody::GoalCreated(created),
                Durability::Sync,
            )?
            .last_seq;
        drop(w);
        Ok(Revised {
            kind: "goal",
            goal,
            revises: old.created.goal.clone(),
            revision,
            contract_digest: digest,
            previous_digest: old.created.contract_digest.clone(),
            seq,
            advisory: plan_advisory(&plan.markdown),
        })
    }

    /// Runs a frozen check by id and records its receipt. The check's output goes to
    /// stderr.
    pub fn run_check(
        &self,
        session: &SessionId,
        goal: Option<&str>,
        check: &str,
        timeout: Duration,
    ) -> Result<Receipt, GoalError> {
        let (session, gs) = self.goals(session)?;
        let g = pick(&gs, &session, goal)?;
        let checks = g.check_ids();
        let Some((_, command)) = checks.iter().find(|(id, _)| *id == check) else {
            return Err(GoalError::NoSuchCheck {
                goal: g.created.goal.clone(),
                check: check.to_owned(),
                checks: checks.into_iter().map(|c| c.0).collect(),
            });
        };
        let ws = PathBuf::from(&g.created.workspace);
        // Recorded first, so that `goal status` shows the check as running meanwhile.
        self.append_goal_event(
            &session,
            EventBody::GoalCheckStart(GoalCheckStart {
                goal: g.created.goal.clone(),
                revision: g.created.revision,
                check: check.to_owned(),
            }),
        )?;
        let before = goal_fingerprint_entries(g)?;
        let started = self.now();
        let env = check_environment(g);
        let env_digest = checkenv::digest(&env);
        let mut proof = ProofRun::default();
        let mut setup_run = proof::SetupRun::default();
        let mut no_evidence = before.as_ref().err().cloned();
        let mut ran: Option<Ran> = None;
        let mut programs = Vec::new();
        if let Ok((_, entries)) = &before {
            let parent = proof::rooms_dir(self.data_dir());
            let git = proof::room_git(&ws);
            let green_files = proof::green_files(&ws, entries);
            let setup_plan = g.assurance().and_then(|a| a.setup);
            let keep = proof::kept(setup_plan.as_ref());
            match proof::make_room(&parent, &ws, &green_files, git.as_ref(), &keep)? {
                Err(why) => no_evidence = Some(why),
                Ok(room) => {
                    let mut trusted = proof::recorded_setups(g);
                    if let Some(setup) = &setup_plan {
                        let run = self.provide_setup(setup, &room, &env, &mut trusted, timeout)?;
                        setup_run = run.clone();
                        no_evidence = run.failed;
                    }
                    self.note(&format!(
                        "running check {check} in a clean room of {} file(s) ({}): {command}",
                        entries.iter().filter(|e| e.kind == "file").count(),
                        room.work().display()
                    ));
                    if no_evidence.is_some() {
                        // The setup failed: the check did not run.
                    } else {
                        let (green, resolved) = proof::run_in(&room, command, &env, timeout)?;
                        programs = resolved;
                        // What the check ran on is what was placed there, or it proves
                        // nothing (a process of the user's may write into the room).
                        if let Some(path) = room.changed(&green_files) {
                            no_evidence = Some(format!(
                                "{path} changed in the clean room while the check ran"
                            ));
                        } else if green.exit_code == Some(0) && !green.timed_out {
                            proof = self.red_run(
                                &proof::GreenRun {
                                    g,
                                    check,
                                    command,
                                    env: &env,
                                    env_digest: &env_digest,
                                    programs: &programs,
                                    entries,
                                    git: git.as_ref(),
                                    timeout,
                                    setup: setup_plan.as_ref(),
                                },
                                room,
                                &mut trusted,
                            )?;
                        }
                        ran = Some(green);
                    }
                }
            }
        }
        let ended = self.now();
        let after = goal_fingerprint(g)?;
        if no_evidence.is_none()
            && let Err(w) = &after
        {
            no_evidence = Some(w.clone());
        }
        let before = before.map(|(d, _)| d);
        let empty = || blake3::Hasher::new().finalize().to_hex().to_string();
        let (exit_code, timed_out, stdout_digest, stderr_digest, tail) = match ran {
            Some(r) => (
                r.exit_code,
                r.timed_out,
                r.stdout_digest,
                r.stderr_digest,
                Some(r.tail),
            ),
            None => (None, false, empty(), empty(), None),
        };
        let passed = exit_code == Some(0)
            && !timed_out
            && no_evidence.is_none()
            && before == after
            && proof::proof_holds(proof.proof.as_deref());
        let receipt = GoalCheckRun {
            goal: g.created.goal.clone(),
            revision: g.created.revision,
            check: check.to_owned(),
            contract_digest: g.created.contract_digest.clone(),
            workspace: g.created.workspace.clone(),
            command: command.clone(),
            started_unix_ns: started,
            ended_unix_ns: ended,
            exit_code,
            timed_out,
            stdout_digest,
            stderr_digest,
            output_tail: tail,
            fingerprint_before: before.ok(),
            fingerprint_after: after.ok(),
            no_evidence,
            passed,
            environment_digest: Some(env_digest),
            programs,
            clean_room: true,
            proof: proof.proof,
            proof_note: proof.note,
            red_scope: proof.scope,
            red_exit_code: proof.red_exit_code,
            red_timed_out: proof.red_timed_out,
            red_inputs: proof.inputs,
            red_reused: proof.reused,
            changed_since_freeze: proof.changed_since_freeze,
            setup_inputs: setup_run.inputs,
            setup_digest: setup_run.digest,
        };
        // A run with programs other than the frozen ones is not a pass (the gate would
        // refuse it anyway; the receipt says so itself).
        let mut receipt = receipt;
        let unbound = environment_mismatch(&g.created, &receipt);
        if unbound.is_some() {
            receipt.passed = false;
        }
        let passed = receipt.passed;
        let seq = self.append_goal_event(&session, EventBody::GoalCheckRun(receipt.clone()))?;
        let (additional_paths, external_paths_left_out) = disclosure(g);
        Ok(Receipt {
            kind: "receipt",
            session,
            seq,
            passed,
            receipt,
            additional_paths,
            external_paths_left_out,
            unbound,
        })
    }

    /// Each check's state against the source now.
    pub fn goal_status(
        &self,
        session: &SessionId,
        goal: Option<&str>,
    ) -> Result<GoalStatus, GoalError> {
        let (session, gs) = self.goals(session)?;
        let g = pick(&gs, &session, goal)?;
        self.agent_status(session.clone(), g)
    }

    /// The status of every goal of a session, in the order they were created.
    pub fn goal_statuses(&self, session: &SessionId) -> Result<Vec<GoalStatus>, GoalError> {
        let (session, gs) = self.goals(session)?;
        gs.goals
            .iter()
            .map(|g| self.agent_status(session.clone(), g))
            .collect()
    }

    /// A goal's status, saying so when the agent recording the session cannot be sent
    /// back at its stop ([`tacho_agents::Adapter::stop_block`] is `None`: Cline) and
    /// the completion gate refused a completion there: the agent stopped anyway.
    fn agent_status(&self, session: String, g: &GoalState) -> Result<GoalStatus, GoalError> {
        let mut st = status_of(session, g)?;
        st.changed_diffs = self.changed_diffs(g);
        let refused = g
            .completions
            .iter()
            .filter(|(_, accepted)| !accepted)
            .count();
        if refused > 0
            && !g.completed
            && let Some(agent) = self.hook_recorder(&st.session)
            && agent.stop_block("").is_none()
        {
            st.stop_not_refusable = Some(format!(
                "{agent} cannot be sent back at its stop: the completion gate refused {refused} completion attempt(s) and could only record them; the agent stopped with the goal not completed"
            ));
        }
        Ok(st)
    }

    /// The diffs of the files outside the change that the checks' latest receipts found
    /// edited since the freeze, against the start snapshot (SPEC §12.2).
    fn changed_diffs(&self, g: &GoalState) -> Vec<ChangedDiff> {
        let Some(start) = g.created.start_snapshot.as_deref() else {
            return Vec::new();
        };
        let mut paths: Vec<&str> = g
            .receipts
            .values()
            .flat_map(|(_, r)| r.changed_since_freeze.iter().filter_map(|l| l.get(2..)))
            .collect();
        paths.sort_unstable();
        paths.dedup();
        let ws = PathBuf::from(&g.created.workspace);
        let Ok(store) = self.snapshots() else {
            return Vec::new();
        };
        paths
            .into_iter()
            .take(CHANGED_DIFFS_MAX)
            .map(|path| {
                // Read as a snapshot reads a file: a regular file only, bounded.
                let file = ws.join(path);
                let now = tacho_git::snapshot::read_regular(
                    &file,
                    tacho_git::snapshot::LINE_DIFF_BYTES_MAX as u64,
                )
                .ok();
                // There but unreadable as text (too large, not a regular file): no diff,
                // never shown as deleted.
                let unreadable = now.is_none() && std::fs::symlink_metadata(&file).is_ok();
                ChangedDiff {
                    path: path.to_owned(),
                    unified: match unreadable {
                        true => None,
                        false => store.path_diff(start, path, now.as_deref()).ok().flatten(),
                    },
                }
            })
            .collect()
    }

    /// The completion gate, with the stall rule: attempts that bring no new passing
    /// evidence get a hint on the second and pause the goal on the third, disclosing
    /// the unfinished work.
    pub fn complete_goal(
        &self,
        session: &SessionId,
        goal: Option<&str>,
    ) -> Result<Completion, GoalError> {
        let (session, gs) = self.goals(session)?;
        let g = pick(&gs, &session, goal)?;
        not_superseded(g)?;
        let a = assess_goal(g)?;
        let (accepted, reason) = decide(g, &a.states, &a.open);
        let warnings = check_warnings(g);
        let reason = match warnings.is_empty() {
            true => reason,
            false => format!("{reason}; warning: {}", warnings.join("; ")),
        };
        let body = EventBody::GoalUpdate(GoalUpdate {
            goal: g.created.goal.clone(),
            revision: g.created.revision,
            action: GoalAction::Complete,
            accepted,
            reason: Some(reason.clone()),
            details: a.open.clone(),
            ..GoalUpdate::default()
        });
        let mut w = self.log().writer(&session)?;
        w.append(self.now(), &body, Durability::Sync)?;
        let fruitless = if accepted {
            0
        } else {
            g.fruitless_attempts() + 1
        };
        let mut note = None;
        let mut stall = None;
        if fruitless == 2 {
            stall = Some(Stall::Hint);
            let checks = g.assurance().is_some_and(|a| !a.checks.is_empty());
            note = Some(if checks {
                "hint: a completion attempt needs new passing evidence: run the checks listed (tacho goal check ID) after fixing what they report"
            } else {
                "hint: a completion attempt needs new passing evidence: this goal has no checks, so run the project's tests or build (a verification run) after the last edit, and fix what they report"
            }.to_string());
        } else if fruitless >= 3 && g.paused.is_none() {
            let why =
                format!("stalled: {fruitless} completion attempts without new passing evidence");
            w.append(
                self.now(),
                &EventBody::GoalUpdate(GoalUpdate {
                    goal: g.created.goal.clone(),
                    revision: g.created.revision,
                    action: GoalAction::Pause,
                    accepted: true,
                    reason: Some(why.clone()),
                    details: a.open.clone(),
                    ..GoalUpdate::default()
                }),
                Durability::Sync,
            )?;
            stall = Some(Stall::Paused);
            note = Some(format!(
                "goal paused ({why}); unfinished work: {}",
                a.open.join("; ")
            ));
        }
        Ok(Completion {
            kind: "completion",
            session,
            goal: g.created.goal.clone(),
            accepted,
            reason,
            open: a.open,
            note,
            stall,
            warnings,
        })
    }
}

/// A replacement that took over.
#[derive(Debug, Clone, Serialize)]
pub struct Replaced {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub goal: String,
    pub session: String,
    pub replaces: String,
    pub revision: u32,
    pub assured: bool,
    pub contract_digest: String,
    pub previous_digest: String,
    pub checks: Vec<String>,
    pub seq: u64,
    /// Said when the plan is larger than the advisory size.
    pub advisory: Option<String>,
}

/// A goal set aside by the user (`goal clear`).
#[derive(Debug, Clone, Serialize)]
pub struct Cleared {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub goal: String,
    pub session: String,
    pub reason: String,
    /// The `goal.update` recorded.
    pub seq: u64,
}

/// A paused goal, resumed.
#[derive(Debug, Clone, Serialize)]
pub struct Resumed {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub goal: String,
    pub session: String,
    /// The pause lifted.
    pub was_paused: String,
    pub seq: u64,
}

/// What `goal replace` is given.
#[derive(Debug, Clone)]
pub struct ReplaceRequest<'a> {
    pub session: &'a SessionId,
    /// The goal replaced (default: the session's latest).
    pub goal: Option<&'a str>,
    /// Why the goal is replaced.
    pub reason: &'a str,
    pub plan_path: &'a Path,
    /// The replacement's objective (default: the replaced goal's).
    pub objective: Option<String>,
}

/// What changed about a goal between two reads of the log, if anything that keeps a
/// replacement prepared in between from taking over.
fn changed_meanwhile(before: &GoalState, now: &GoalState) -> Option<&'static str> {
    if now.completed && !before.completed {
        Some("was completed")
    } else if now.blocked.is_some() && now.blocked != before.blocked {
        Some("was blocked")
    } else if now.paused.is_some() && now.paused != before.paused {
        Some("was paused")
    } else {
        None
    }
}

impl Tacho {
    /// Replaces a goal with a new plan (BRIEF §3, "Replace and resume"): recorded as a
    /// `goal.created` linked to the old goal like a revision, with the old goal's
    /// assurance kept (an assured goal's replacement needs a contract). A plan that
    /// fails validation writes nothing, so the old goal stays as it was (resumable if
    /// paused). The log is read again under the session's writer lock before the
    /// replacement is appended: when another replacement took over meanwhile, or the
    /// old goal was paused, blocked or completed, this one does not take over.
    pub fn replace_goal(&self, req: ReplaceRequest<'_>) -> Result<Replaced, GoalError> {
        let (session, gs) = self.goals(req.session)?;
        let old = pick(&gs, &session, req.goal)?.clone();
        let old_id = old.created.goal.clone();
        if old.completed {
            return Err(GoalError::CompletedNotReplaced(old_id));
        }
        if let Some(by) = &old.revised_by {
            return Err(GoalError::AlreadyReplaced {
                goal: old_id,
                by: by.clone(),
            });
        }
        if req.reason.trim().is_empty() {
            return Err(GoalError::EmptyReplaceReason);
        }
        let digest = &old.created.contract_digest;
        if tacho_goals::contract_digest_version(digest).is_none() {
            return Err(GoalError::MalformedDigest {
                goal: old_id,
                digest: digest.clone(),
            });
        }
        let ws = PathBuf::from(&old.created.workspace);
        let objective = req.objective.or_else(|| old.created.objective.clone());
        let markdown = read_plan(req.plan_path)?;
        let plan = validate_plan(
            &markdown,
            &req.plan_path.display().to_string(),
            &ws,
            objective.as_deref().unwrap_or(""),
            old.created.assured,
        )?;
        let assured = old.created.assured || plan.assurance.is_some();
        let revision = old.created.revision.saturating_add(1);
        let mut created = self.freeze(&plan, objective, assured, &ws, revision)?;
        created.revises = Some(old_id.clone());
        created.previous_digest = Some(old.created.contract_digest.clone());
        created.correction = Some(req.reason.to_owned());
        // A replacement continues the same work: it keeps the start snapshot.
        created.start_snapshot = match &old.created.start_snapshot {
            Some(s) => Some(s.clone()),
            None if created.assured => self.start_snapshot(&session, &ws)?,
            None => None,
        };
        let (goal, new_digest) = (created.goal.clone(), created.contract_digest.clone());

        // Taken over only if nothing happened to the old goal since it was read.
        let mut w = self.log().writer(&session)?;
        let (_, gs_now) = self.goals(req.session)?;
        let now = pick(&gs_now, &session, Some(&old_id))?;
        if let Some(by) = &now.revised_by {
            return Err(GoalError::AlreadyReplaced {
                goal: old_id,
                by: by.clone(),
            });
        }
        if let Some(what) = changed_meanwhile(&old, now) {
            return Err(GoalError::ChangedMeanwhile { goal: old_id, what });
        }
        let seq = w
            .append(
                self.now(),
                &EventBody::GoalCreated(created),
                Durability::Sync,
            )?
            .last_seq;
        Ok(Replaced {
            kind: "goal_replaced",
            goal,
            session,
            replaces: old_id,
            revision,
            assured,
            contract_digest: new_digest,
            previous_digest: old.created.contract_digest.clone(),
            checks: plan
                .assurance
                .map(|a| a.checks.into_iter().map(|c| c.id).collect())
                .unwrap_or_default(),
            seq,
            advisory: plan_advisory(&plan.markdown),
        })
    }

    /// Sets a goal aside (`tacho goal clear`): records a `goal.update` `clear` with the
    /// reason, after which the goal holds no one and every view says it was cleared
    /// (SPEC §12.3). The user's act, never the agent's: refused while the agent's hooks
    /// still record the conversation, and for a session the agent ended from inside
    /// one of its own tool calls. A completed, replaced or cleared goal is not cleared.
    pub fn clear_goal(
        &self,
        session: &SessionId,
        goal: Option<&str>,
        reason: &str,
    ) -> Result<Cleared, GoalError> {
        let (session, gs) = self.goals(session)?;
        let g = pick(&gs, &session, goal)?;
        let id = g.created.goal.clone();
        let refuse = |why: String| GoalError::NotCleared {
            goal: id.clone(),
            why,
        };
        if reason.trim().is_empty() {
            return Err(GoalError::Empty(Field::Reason));
        }
        if let Some(by) = &g.revised_by {
            return Err(refuse(format!("it was replaced by {by}")));
        }
        if g.completed {
            return Err(refuse("it is completed".into()));
        }
        if let Some((_, seq)) = &g.cleared {
            return Err(refuse(format!("it was cleared already (#{seq})")));
        }
        // The agent may be the one asking while its hooks record the conversation: the
        // session, or the continuation its next payload started.
        // (Read from the log, not from the hooks' state file, which the agent can
        // delete: a session not ended is running, whoever records it.)
        let graph = self.graph(session.as_str())?;
        if graph.ended_unix_ns.is_none() {
            let who = match self.hook_recorder(session.as_str()) {
                Some(agent) => format!("{agent}'s hooks still record session {session}"),
                None => format!("session {session} has not ended"),
            };
            return Err(refuse(format!(
                "{who}: the agent working in it could be the one asking — end it first (tacho session end {session}), or give the goal a new contract with tacho goal replace"
            )));
        }
        // Every continuation after it (`<id>.N`, …): none may still run, and none may
        // say an end of the conversation came from inside a call.
        let mut next = crate::hooks::next_continuation(session.as_str());
        for _ in 0..1_000 {
            if !self.log().has_session(&next) {
                break;
            }
            let cont = self.graph(&next)?;
            // The agent's call went on after the end: the end came from inside it.
            if let Some(e) = cont
                .errors
                .iter()
                .find(|e| e.code.as_deref() == Some(tacho_schema::SESSION_ENDED_MID_CALL))
            {
                return Err(refuse(format!(
                    "{}: the agent ended it, so its goal stays",
                    e.message
                )));
            }
            if cont.ended_unix_ns.is_none() {
                return Err(refuse(format!(
                    "the conversation goes on as session {next}, which has not ended: end it first"
                )));
            }
            next = crate::hooks::next_continuation(&next);
        }
        let seq = self.append_goal_event(
            &session,
            EventBody::GoalUpdate(GoalUpdate {
                goal: id.clone(),
                revision: g.created.revision,
                action: GoalAction::Clear,
                accepted: true,
                reason: Some(reason.trim().to_owned()),
                ..GoalUpdate::default()
            }),
        )?;
        Ok(Cleared {
            kind: "goal_cleared",
            goal: id,
            session,
            reason: reason.trim().to_owned(),
            seq,
        })
    }

    /// Resumes a paused goal: records a `goal.update` `pause` that is not accepted
    /// (the pause no longer holds), after which the goal holds the agent again and the
    /// stall count starts over. A replaced or completed goal is not resumed.
    pub fn resume_goal(
        &self,
        session: &SessionId,
        goal: Option<&str>,
    ) -> Result<Resumed, GoalError> {
        let (session, gs) = self.goals(session)?;
        let g = pick(&gs, &session, goal)?;
        let id = g.created.goal.clone();
        if let Some(by) = &g.revised_by {
            return Err(GoalError::ReplacedNotResumed {
                goal: id,
                by: by.clone(),
            });
        }
        if g.completed {
            return Err(GoalError::NotPaused {
                goal: id,
                why: Some("it is completed"),
            });
        }
        let Some(was_paused) = g.paused.clone() else {
            return Err(GoalError::NotPaused {
                goal: id,
                why: g
                    .blocked
                    .as_ref()
                    .map(|_| "it is blocked, which a resume does not lift"),
            });
        };
        let seq = self.append_goal_event(
            &session,
            EventBody::GoalUpdate(GoalUpdate {
                goal: id.clone(),
                revision: g.created.revision,
                action: GoalAction::Pause,
                accepted: false,
                reason: Some(format!("resumed (was paused: {was_paused})")),
                ..GoalUpdate::default()
            }),
        )?;
        Ok(Resumed {
            kind: "goal_resumed",
            goal: id,
            session,
            was_paused,
            seq,
        })
    }
}
