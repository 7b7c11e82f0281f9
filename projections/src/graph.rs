//! The execution graph of a session: what the agent did, step by step.
//!
//! This is the graph of the run (steps, tool calls, routes, model calls), not a code
//! graph of the repository. It is a fold: [`ExecutionGraph::apply`] takes events in
//! sequence order, one at a time, and any split of the same events into chunks gives
//! the same graph.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tacho_schema::{
    EndReason, Event, EventView, GoalAction, SnapshotReason, ToolStatus, VerificationStatus,
};

/// The JSON schema identifier of [`ExecutionGraph`] (SPEC.md §8).
pub const GRAPH_SCHEMA: &str = "tacho.graph.v1";

/// Token usage, with cache reads and writes apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    #[serde(rename = "in")]
    pub input: u64,
    #[serde(rename = "out")]
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Tokens {
    /// Adds `o`, saturating: the numbers come from outside (an agent's transcript), and
    /// a sum that wrapped would show a tiny total for a huge one.
    fn add(&mut self, o: &Tokens) {
        self.input = self.input.saturating_add(o.input);
        self.output = self.output.saturating_add(o.output);
        self.cache_read = self.cache_read.saturating_add(o.cache_read);
        self.cache_write = self.cache_write.saturating_add(o.cache_write);
    }
}

/// One tool call and, once recorded, its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolNode {
    pub seq: u64,
    pub call_id: String,
    pub tool: String,
    pub target: Option<String>,
    pub agent: Option<String>,
    pub started_unix_ns: i64,
    /// `None` while no result is recorded (running, or interrupted).
    pub status: Option<ToolStatus>,
    pub result_seq: Option<u64>,
    pub duration_ms: Option<u64>,
    pub error: Option<String>,
}

/// A step: from `step.start` to `step.finish`. Tool calls outside any step open an
/// implicit step, so that nothing is left out of the graph.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepNode {
    pub number: u64,
    pub implicit: bool,
    pub agent: Option<String>,
    pub title: Option<String>,
    pub start_seq: u64,
    pub started_unix_ns: i64,
    pub finished_unix_ns: Option<i64>,
    /// The event that ended it: its `step.finish`, or the next `step.start` when it
    /// never finished; `None` while it is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_seq: Option<u64>,
    pub tokens: Tokens,
    pub model_calls: u64,
    pub tools: Vec<ToolNode>,
    pub errors: u64,
    /// Files edit events reported during the step, in first-edit order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<String>,
}

impl StepNode {
    /// Duration in milliseconds, when the step finished.
    pub fn duration_ms(&self) -> Option<u64> {
        self.finished_unix_ns
            .map(|f| (f.saturating_sub(self.started_unix_ns) / 1_000_000).max(0) as u64)
    }
}

/// A routing decision as `from → to`, or `→ to` when the origin was not recorded.
pub fn route_text(from: Option<&str>, to: &str) -> String {
    match from {
        Some(f) => format!("{f} → {to}"),
        None => format!("→ {to}"),
    }
}

/// A routing decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteNode {
    pub seq: u64,
    pub at_unix_ns: i64,
    pub from: Option<String>,
    pub to: String,
    pub reason: Option<String>,
}

/// An error event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorNode {
    pub seq: u64,
    pub at_unix_ns: i64,
    pub message: String,
    /// Its code, when the writer gave one (`hook_lock_held`: written by tacho for a
    /// hook that could not record, SPEC §3.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub fatal: bool,
    pub step: Option<u64>,
}

/// A verification run (test, build, lint ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerificationNode {
    pub seq: u64,
    pub at_unix_ns: i64,
    pub command: String,
    pub status: VerificationStatus,
    pub duration_ms: Option<u64>,
    pub step: Option<u64>,
}

/// What happened to one file: from recorded file edits, merged with what the session's
/// snapshots show (`ExecutionGraph::merge_observed`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    pub edits: u64,
    pub created: bool,
    pub deleted: bool,
    pub renamed_from: Option<String>,
    pub lines_added: u64,
    pub lines_removed: u64,
    pub last_edit_seq: u64,
    /// Seen changing in the session's snapshots with no edit event naming it (a shell
    /// command, a generator, anything that reported nothing).
    #[serde(default, skip_serializing_if = "is_false")]
    pub observed: bool,
    /// Only its kind changed (executable bit, file and link).
    #[serde(default, skip_serializing_if = "is_false")]
    pub mode_changed: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// What the session's goal events say, counted (the `Goals` projection has the detail).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalActivity {
    /// Receipts recorded, and how many of them failed.
    pub receipts: u64,
    pub receipts_failed: u64,
    /// Completion attempts the gate refused.
    pub completions_refused: u64,
    /// A goal was completed (the gate accepted).
    pub completed: bool,
    /// Goals paused by the stall rule, and goals marked blocked.
    pub paused: u64,
    pub blocked: u64,
    /// Goals set aside by the user (`goal clear`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cleared: u64,
    /// The same, per goal id: readiness comes from the goals that are current (not
    /// replaced by a revision), so an earlier goal's events never settle its
    /// replacement.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub by_goal: BTreeMap<String, GoalTally>,
    /// Every goal event, in log order: what the timeline marks, and the receipts the
    /// risk assessment weighs as verification runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<GoalEventNode>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a goal event was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GoalMark {
    /// `goal.created` (a revision too: `revises` names the goal it replaces).
    Created,
    /// A receipt (`goal.check`) that passed, or failed.
    CheckPassed,
    CheckFailed,
    /// A completion attempt the gate accepted, or refused.
    Accepted,
    Refused,
    /// Paused by the stall rule; resumed (the pause lifted).
    Paused,
    Resumed,
    /// Marked blocked.
    Blocked,
    /// Set aside by the user (`goal clear`).
    Cleared,
}

impl GoalMark {
    /// Its name in JSON (`check_passed`).
    pub fn name(self) -> &'static str {
        match self {
            GoalMark::Created => "created",
            GoalMark::CheckPassed => "check_passed",
            GoalMark::CheckFailed => "check_failed",
            GoalMark::Accepted => "accepted",
            GoalMark::Refused => "refused",
            GoalMark::Paused => "paused",
            GoalMark::Resumed => "resumed",
            GoalMark::Blocked => "blocked",
            GoalMark::Cleared => "cleared",
        }
    }

    /// The words for people.
    pub fn as_str(self) -> &'static str {
        match self {
            GoalMark::Created => "goal created",
            GoalMark::CheckPassed => "check passed",
            GoalMark::CheckFailed => "check failed",
            GoalMark::Accepted => "completion accepted",
            GoalMark::Refused => "completion refused",
            GoalMark::Paused => "goal paused",
            GoalMark::Resumed => "goal resumed",
            GoalMark::Blocked => "goal blocked",
            GoalMark::Cleared => "goal cleared",
        }
    }
}

/// One goal event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalEventNode {
    pub seq: u64,
    pub at_unix_ns: i64,
    pub goal: String,
    pub mark: GoalMark,
    /// For a receipt: the check and the command it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// For a revision: the goal it replaces, the correction given, and what it
    /// changed in the contract that lets less work pass ([`crate::goals::weakening`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revises: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correction: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weakened: Vec<String>,
    /// For a receipt: files outside the goal's change edited since its plan was frozen
    /// (`M`/`A`/`D PATH`, SPEC §12.2).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_since_freeze: Vec<String>,
    /// The step open when it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The agent's tool call (its `tool.call` seq) that was running when it was
    /// recorded: an act made from inside that call — the agent's shell or its MCP
    /// client — rather than by the user between calls ([`ExecutionGraph::running_call`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub during_call: Option<u64>,
}

/// What one goal's events say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GoalTally {
    pub completed: bool,
    pub completions_refused: u64,
    pub paused: u64,
    pub blocked: u64,
    /// Set aside by the user (`goal clear`): holds no one any more.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cleared: u64,
    /// Replaced by a revision (this goal id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revised_by: Option<String>,
}

impl GoalTally {
    /// Not completed nor cleared, and the gate refused it, it stalled or it was
    /// blocked.
    pub fn is_open(&self) -> bool {
        !self.completed
            && self.cleared == 0
            && (self.completions_refused > 0 || self.paused > 0 || self.blocked > 0)
    }
}

impl GoalActivity {
    pub fn is_empty(&self) -> bool {
        *self == GoalActivity::default()
    }

    /// The current goals (not replaced by a revision) that are open, by id.
    pub fn open_goals(&self) -> impl Iterator<Item = (&String, &GoalTally)> {
        self.by_goal
            .iter()
            .filter(|(_, t)| t.revised_by.is_none() && t.is_open())
    }
}

/// A change tacho saw between two of the session's snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedChange {
    /// The key of the file in `ExecutionGraph::files`: the path an edit event used for
    /// it when one did, else the workspace-relative path.
    pub key: String,
    pub created: bool,
    pub deleted: bool,
    pub mode_only: bool,
    pub lines_added: u64,
    pub lines_removed: u64,
    /// The event the change is attributed to (for "edited after the last verification").
    pub seq: u64,
    /// The step it happened in, when it happened in one: the sequence number of the
    /// step's start (an implicit step's number may repeat a recorded step's).
    pub step_start_seq: Option<u64>,
}

/// A change between two consecutive snapshots of the session's workspace that no tool
/// call claims (SPEC §8.1, "Changes no tool call made"): the user, another process,
/// or a tool whose hooks did not fire made it. It is its own fact, never merged into
/// `files`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnclaimedChange {
    /// The event numbers of the earlier and the later snapshot: the change happened
    /// between them.
    pub after_seq: u64,
    pub before_seq: u64,
    /// The earlier snapshot (the state an undo restores) and the later one.
    pub from_snapshot: String,
    pub to_snapshot: String,
    /// When the later snapshot was taken: the change was found then.
    pub found_unix_ns: i64,
    pub files: Vec<UnclaimedFile>,
}

/// One file of an unclaimed change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnclaimedFile {
    /// Relative to the workspace.
    pub path: String,
    /// `created`, `modified`, `deleted` or `mode`.
    pub change: String,
    pub lines_added: u64,
    pub lines_removed: u64,
}

/// A snapshot of the workspace recorded in the session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotNode {
    pub seq: u64,
    pub at_unix_ns: i64,
    /// The snapshot id (a Git tree id in the snapshot store).
    pub id: String,
    pub workspace: String,
    pub reason: SnapshotReason,
    /// Taken before this step's changes.
    pub before_step: Option<u64>,
    pub files: u64,
    pub targeted: bool,
}

/// Where a branched session came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchNode {
    pub parent: String,
    /// The parent's events 1..=through_seq were copied into this session.
    pub through_seq: u64,
}

/// The execution graph of one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionGraph {
    #[serde(skip_deserializing)]
    pub schema: &'static str,
    pub session: String,
    pub parent: Option<String>,
    pub title: Option<String>,
    pub workspace: Option<String>,
    pub project: Option<String>,
    pub started_unix_ns: Option<i64>,
    pub ended_unix_ns: Option<i64>,
    pub last_event_unix_ns: Option<i64>,
    pub end_reason: Option<EndReason>,
    /// The agent's tool call (its `tool.call` seq) that had not returned when the
    /// session ended: ended from inside it (`tacho session end`, or a `SessionEnd`
    /// payload piped to `tacho hook` from the agent's shell), or the agent quit while
    /// it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_during_call: Option<u64>,
    /// Results reported again for a call that already had one: (the repeated
    /// `tool.result`'s seq, the call's `tool.call` seq). The agent's hooks report one
    /// result per call; an earlier one was piped to `tacho hook` from inside the call,
    /// so what tacho recorded between the two came from inside it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repeated_results: Vec<(u64, u64)>,
    /// Agents in the order they first appear.
    pub agents: Vec<String>,
    pub tokens: Tokens,
    pub model_calls: u64,
    pub steps: Vec<StepNode>,
    pub routes: Vec<RouteNode>,
    pub errors: Vec<ErrorNode>,
    pub verifications: Vec<VerificationNode>,
    pub files: BTreeMap<String, FileChange>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<SnapshotNode>,
    /// Changes between snapshots that no tool call claims, in log order (merged in
    /// when the graph is read, like what the snapshots show; absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unclaimed: Vec<UnclaimedChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<BranchNode>,
    /// Sessions this one rolled back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollbacks_of: Vec<String>,
    /// Goal receipts and completion attempts (absent when the session has none).
    #[serde(default, skip_serializing_if = "GoalActivity::is_empty")]
    pub goals: GoalActivity,
    /// The agent's todo list as its last `todo.update` left it (absent when the agent
    /// reported none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub todos: Option<TodoList>,
    pub permission_asks: u64,
    pub permission_denials: u64,
    pub events: u64,
    /// Sequence number of the next event this graph expects: the log position it
    /// reflects.
    pub next_seq: u64,
    /// What the fold needs to go on from here; stored with the graph, not printed.
    #[serde(skip)]
    state: FoldState,
}

/// An agent's todo list, whole, as one `todo.update` reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoList {
    /// The `todo.update` that reported it.
    pub seq: u64,
    pub at_unix_ns: i64,
    pub items: Vec<TodoNode>,
}

impl TodoList {
    /// The items still to be done (pending or in progress).
    pub fn open(&self) -> impl Iterator<Item = &TodoNode> {
        self.items.iter().filter(|t| t.status.is_open())
    }
}

/// One item of a todo list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoNode {
    pub content: String,
    pub status: tacho_schema::TodoStatus,
    /// The agent's id for it, when it gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// The part of a graph that only the fold uses: stored with a materialized graph so
/// that bringing it up to date gives exactly what a rebuild gives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldState {
    /// Tokens of model responses seen before any step: they belong to the next step.
    pending_tokens: Tokens,
    pending_model_calls: u64,
    /// Response ids already counted (usage repeated for one response counts once).
    responses_seen: std::collections::BTreeSet<String>,
    /// call id → (step index, tool index), for pairing results with calls.
    open_calls: BTreeMap<String, (usize, usize)>,
    /// Index of the open step, if any.
    open_step: Option<usize>,
    current_agent: Option<String>,
    /// path (as the edit event spelled it) → the events that named it (`file.edit`
    /// `path` or `from`): what claims a file's change (SPEC §8.1).
    #[serde(default)]
    edit_seqs: BTreeMap<String, Vec<u64>>,
    /// goal id → its assurance contract (JSON text): what a revision is compared with.
    #[serde(default)]
    contracts: BTreeMap<String, String>,
    /// call id → (its `tool.call` seq, its first result's seq): a second result for
    /// it is a repeated one ([`ExecutionGraph::repeated_results`]).
    #[serde(default)]
    results_seen: BTreeMap<String, (u64, u64)>,
}

impl ExecutionGraph {
    /// The rule of SPEC §8.1: a change between the snapshots at `after_seq` and
    /// `before_seq` is claimed when some tool call was running between them (its
    /// `tool.call` before the later snapshot, and its result, if any, after the
    /// earlier one); when a step that records no tool call at all was open between
    /// them (its `step.start` before the later snapshot, its end, if any, after the
    /// earlier one: an agent that reports steps and edits, not calls); or when the
    /// session is one of tacho's rollbacks (the rollback made it). Otherwise nothing
    /// claims it: the user, another process, or a tool whose hooks did not fire made
    /// it.
    ///
    /// Only calls that can change files claim: those of recorded steps, where adapters
    /// put every such call (hooks open a step, with its before-snapshot, for each, and
    /// never for a read-only call, which lands in an implicit step). Calls of implicit
    /// steps claim only in a session that recorded no step at all, or when a subagent
    /// was started while they ran (an `agent.route` between the call and its result:
    /// the subagent's changes are that call's).
    pub fn claimed_between(&self, after_seq: u64, before_seq: u64) -> bool {
        let open =
            |start: u64, end: Option<u64>| start < before_seq && end.is_none_or(|e| e > after_seq);
        let stepped = self.steps.iter().any(|s| !s.implicit);
        let spawned = |t: &ToolNode| {
            self.routes
                .iter()
                .any(|r| r.seq > t.seq && t.result_seq.is_none_or(|e| r.seq < e))
        };
        !self.rollbacks_of.is_empty()
            || self.steps.iter().any(|s| {
                if s.tools.is_empty() {
                    (!s.implicit || !stepped) && open(s.start_seq, s.finish_seq)
                } else {
                    s.tools.iter().any(|t| {
                        (!s.implicit || !stepped || spawned(t)) && open(t.seq, t.result_seq)
                    })
                }
            })
    }

    /// Whether a `file.edit` event between the two snapshots named `key` (its path,
    /// or its `from`, as the event spelled it): the agent reported that change, so it
    /// is claimed too (SPEC §8.1).
    pub fn edited_between(&self, key: &str, after_seq: u64, before_seq: u64) -> bool {
        self.state
            .edit_seqs
            .get(key)
            .is_some_and(|v| v.iter().any(|&s| s > after_seq && s < before_seq))
    }

    /// Records changes no tool call claims (`claimed_between`), apart from `files`.
    pub fn merge_unclaimed(&mut self, changes: Vec<UnclaimedChange>) {
        self.unclaimed
            .extend(changes.into_iter().filter(|c| !c.files.is_empty()));
    }

    /// Merges what the session's snapshots show into the files and steps: a session
    /// scores the same whether its tools reported their edits or not. A file an edit
    /// event named keeps its edit count, and its line counts when the events reported
    /// any; a file only the snapshots show is marked `observed`. (Snapshots hold file
    /// contents outside the log, so this is done after the fold, by the caller that
    /// can read them; the fold and its stored form stay a function of the events.)
    /// Only changes a tool call claims come here (`merge_unclaimed` takes the rest).
    pub fn merge_observed(&mut self, changes: &[ObservedChange]) {
        let reported: std::collections::BTreeSet<String> = self
            .files
            .iter()
            .filter(|(_, f)| f.edits > 0 && f.lines_added + f.lines_removed > 0)
            .map(|(k, _)| k.clone())
            .collect();
        for c in changes {
            let f = self.files.entry(c.key.clone()).or_default();
            if f.edits == 0 {
                f.observed = true;
            }
            if !reported.contains(&c.key) {
                f.lines_added += c.lines_added;
                f.lines_removed += c.lines_removed;
            }
            f.created |= c.created && !f.deleted;
            f.deleted = c.deleted;
            f.mode_changed |= c.mode_only;
            f.last_edit_seq = f.last_edit_seq.max(c.seq);
            if let Some(start) = c.step_start_seq
                && let Some(s) = self.steps.iter_mut().find(|s| s.start_seq == start)
                && !s.edits.contains(&c.key)
            {
                s.edits.push(c.key.clone());
            }
        }
    }

    /// An empty graph of `session`.
    pub fn new(session: &str) -> Self {
        ExecutionGraph {
            schema: GRAPH_SCHEMA,
            session: session.to_string(),
            parent: None,
            title: None,
            workspace: None,
            project: None,
            started_unix_ns: None,
            ended_unix_ns: None,
            last_event_unix_ns: None,
            end_reason: None,
            ended_during_call: None,
            repeated_results: Vec::new(),
            agents: Vec::new(),
            tokens: Tokens::default(),
            model_calls: 0,
            steps: Vec::new(),
            routes: Vec::new(),
            errors: Vec::new(),
            verifications: Vec::new(),
            files: BTreeMap::new(),
            snapshots: Vec::new(),
            unclaimed: Vec::new(),
            branch: None,
            rollbacks_of: Vec::new(),
            todos: None,
            goals: GoalActivity::default(),
            permission_asks: 0,
            permission_denials: 0,
            events: 0,
            next_seq: 0,
            state: FoldState::default(),
        }
    }

    /// Total duration in milliseconds: start to end, or to the last event while the
    /// session runs.
    pub fn duration_ms(&self) -> Option<u64> {
        let start = self.started_unix_ns?;
        let end = self.ended_unix_ns.or(self.last_event_unix_ns)?;
        Some((end.saturating_sub(start) / 1_000_000).max(0) as u64)
    }

    /// The fold state, to store with the graph.
    pub fn fold_state(&self) -> &FoldState {
        &self.state
    }

    /// A graph read back from storage, with the fold state stored beside it, ready to
    /// take the events from `next_seq` on.
    pub fn resume(mut graph: ExecutionGraph, state: FoldState) -> Self {
        graph.schema = GRAPH_SCHEMA;
        graph.state = state;
        graph
    }

    /// Tool calls of the whole session, in order.
    pub fn tools(&self) -> impl Iterator<Item = (&StepNode, &ToolNode)> {
        self.steps
            .iter()
            .flat_map(|s| s.tools.iter().map(move |t| (s, t)))
    }

    /// Records a goal event (a `created` mark unless `fill` says otherwise).
    fn goal_event(&mut self, seq: u64, at: i64, goal: &str, fill: impl FnOnce(&mut GoalEventNode)) {
        let mut e = GoalEventNode {
            seq,
            at_unix_ns: at,
            goal: goal.to_string(),
            mark: GoalMark::Created,
            check: None,
            command: None,
            revises: None,
            correction: None,
            weakened: Vec::new(),
            changed_since_freeze: Vec::new(),
            step: self.state.open_step.map(|i| self.steps[i].number),
            during_call: self.running_call(),
        };
        fill(&mut e);
        self.goals.events.push(e);
    }

    /// The first tool call still running now, as the record has it: its `tool.call`
    /// is folded in, its result is not, and the step it belongs to is still open (a
    /// step ends with its last call, or where the next one starts). Anything tacho
    /// records meanwhile happened inside that call.
    pub fn running_call(&self) -> Option<u64> {
        self.first_open_call(self.state.open_step?)
    }

    /// The first call of step `step` (its index) with no result yet: its `tool.call`
    /// seq.
    fn first_open_call(&self, step: usize) -> Option<u64> {
        self.state
            .open_calls
            .values()
            .filter(|(si, _)| *si == step)
            .filter_map(|(si, ti)| self.steps.get(*si)?.tools.get(*ti))
            .map(|t| t.seq)
            .min()
    }

    fn note_agent(&mut self, agent: Option<&str>) {
        if let Some(a) = agent {
            if !self.agents.iter().any(|x| x == a) {
                self.agents.push(a.to_string());
            }
            if self.state.current_agent.as_deref() != Some(a) {
                self.state.current_agent = Some(a.to_string());
            }
        }
    }

    fn open_implicit_step(&mut self, seq: u64, at: i64) -> usize {
        let number = self.steps.last().map_or(1, |s| s.number + 1);
        self.start_step(number, true, None, None, seq, at)
    }

    fn start_step(
        &mut self,
        number: u64,
        implicit: bool,
        agent: Option<String>,
        title: Option<String>,
        seq: u64,
        at: i64,
    ) -> usize {
        let mut tokens = Tokens::default();
        tokens.add(&self.state.pending_tokens);
        self.state.pending_tokens = Tokens::default();
        self.steps.push(StepNode {
            number,
            implicit,
            agent: agent.or_else(|| self.state.current_agent.clone()),
            title,
            start_seq: seq,
            started_unix_ns: at,
            finished_unix_ns: None,
            finish_seq: None,
            tokens,
            model_calls: std::mem::take(&mut self.state.pending_model_calls),
            tools: Vec::new(),
            errors: 0,
            edits: Vec::new(),
        });
        let i = self.steps.len() - 1;
        self.state.open_step = Some(i);
        i
    }

    /// Folds in the event with sequence number `seq`. Events must come in order.
    pub fn apply(&mut self, seq: u64, ev: &Event) {
        self.apply_view(seq, ev.time_unix_ns, &ev.body.view());
    }

    /// Folds in a borrowed view of the event with sequence number `seq` at `at` (ns
    /// since the epoch): what building from the log uses, without owning the event.
    pub fn apply_view(&mut self, seq: u64, at: i64, ev: &EventView<'_>) {
        let own = |s: Option<&str>| s.map(str::to_string);
        self.events += 1;
        self.next_seq = seq + 1;
        self.last_event_unix_ns = Some(at);
        match *ev {
            EventView::SessionStart {
                agent,
                workspace,
                project,
                parent,
                title,
                source: _,
            } => {
                self.started_unix_ns = Some(at);
                self.parent = own(parent);
                self.title = own(title);
                self.workspace = own(workspace);
                self.project = own(project);
                self.note_agent(agent);
            }
            EventView::SessionEnd { reason } => {
                // A call of the last step with no result: the session ended inside
                // it (hooks finish the steps a `SessionEnd` interrupts just before).
                self.ended_during_call = self
                    .steps
                    .len()
                    .checked_sub(1)
                    .and_then(|last| self.first_open_call(last));
                self.ended_unix_ns = Some(at);
                self.end_reason = Some(reason);
                if let Some(i) = self.state.open_step.take() {
                    self.steps[i].finished_unix_ns.get_or_insert(at);
                    self.steps[i].finish_seq.get_or_insert(seq);
                }
            }
            EventView::AgentRoute { from, to, reason } => {
                if from.is_some() {
                    self.note_agent(from);
                }
                self.note_agent(Some(to));
                self.routes.push(RouteNode {
                    seq,
                    at_unix_ns: at,
                    from: own(from),
                    to: to.to_string(),
                    reason: own(reason),
                });
            }
            EventView::LlmRequest { agent } => self.note_agent(agent),
            EventView::LlmResponse {
                response_id,
                tokens_in,
                tokens_out,
                cache_read,
                cache_write,
            } => {
                let fresh = match response_id {
                    Some(id) => {
                        !self.state.responses_seen.contains(id)
                            && self.state.responses_seen.insert(id.to_string())
                    }
                    None => true,
                };
                if fresh {
                    let t = Tokens {
                        input: tokens_in,
                        output: tokens_out,
                        cache_read,
                        cache_write,
                    };
                    self.tokens.add(&t);
                    self.model_calls += 1;
                    match self.state.open_step {
                        Some(i) => {
                            self.steps[i].tokens.add(&t);
                            self.steps[i].model_calls += 1;
                        }
                        None => {
                            self.state.pending_tokens.add(&t);
                            self.state.pending_model_calls += 1;
                        }
                    }
                }
            }
            EventView::StepStart { step, agent, title } => {
                if let Some(i) = self.state.open_step.take() {
                    // A step that never finished ends where the next one starts.
                    self.steps[i].finished_unix_ns.get_or_insert(at);
                    self.steps[i].finish_seq.get_or_insert(seq);
                }
                self.note_agent(agent);
                self.start_step(step, false, own(agent), own(title), seq, at);
            }
            EventView::StepFinish { .. } => {
                if let Some(i) = self.state.open_step.take() {
                    self.steps[i].finished_unix_ns = Some(at);
                    self.steps[i].finish_seq = Some(seq);
                }
            }
            EventView::ToolCall {
                call_id,
                tool,
                target,
                agent,
            } => {
                self.note_agent(agent);
                let i = match self.state.open_step {
                    Some(i) => i,
                    None => self.open_implicit_step(seq, at),
                };
                let step = &mut self.steps[i];
                step.tools.push(ToolNode {
                    seq,
                    call_id: call_id.to_string(),
                    tool: tool.to_string(),
                    target: own(target),
                    agent: own(agent).or_else(|| step.agent.clone()),
                    started_unix_ns: at,
                    status: None,
                    result_seq: None,
                    duration_ms: None,
                    error: None,
                });
                self.state
                    .open_calls
                    .insert(call_id.to_string(), (i, step.tools.len() - 1));
            }
            EventView::ToolResult {
                call_id,
                status,
                duration_ms,
                error,
            } => {
                if let Some((si, ti)) = self.state.open_calls.get(call_id).copied() {
                    self.state.open_calls.remove(call_id);
                    let call_seq = self.steps[si].tools[ti].seq;
                    self.state
                        .results_seen
                        .insert(call_id.to_string(), (call_seq, seq));
                    let t = &mut self.steps[si].tools[ti];
                    t.status = Some(status);
                    t.result_seq = Some(seq);
                    t.error = own(error);
                    t.duration_ms = duration_ms.or_else(|| {
                        Some((at.saturating_sub(t.started_unix_ns) / 1_000_000).max(0) as u64)
                    });
                } else if let Some((call_seq, first)) =
                    self.state.results_seen.get(call_id).copied()
                {
                    // A second result: the first was piped from inside the call, so
                    // what tacho recorded after it came from inside the call too.
                    self.repeated_results.push((seq, call_seq));
                    for e in self.goals.events.iter_mut() {
                        if e.seq > first && e.during_call.is_none() {
                            e.during_call = Some(call_seq);
                        }
                    }
                }
            }
            EventView::PermissionAsk => self.permission_asks += 1,
            EventView::PermissionReply { decision } => {
                if decision == tacho_schema::Decision::Deny {
                    self.permission_denials += 1;
                }
            }
            EventView::Error {
                message,
                code,
                fatal,
            } => {
                let step = self.state.open_step.map(|i| {
                    self.steps[i].errors += 1;
                    self.steps[i].number
                });
                self.errors.push(ErrorNode {
                    seq,
                    at_unix_ns: at,
                    message: message.to_string(),
                    code: code.map(str::to_owned),
                    fatal,
                    step,
                });
            }
            EventView::VerificationRun {
                command,
                status,
                duration_ms,
            } => {
                self.verifications.push(VerificationNode {
                    seq,
                    at_unix_ns: at,
                    command: command.to_string(),
                    status,
                    duration_ms,
                    step: self.state.open_step.map(|i| self.steps[i].number),
                });
            }
            EventView::FileEdit {
                path,
                op,
                from,
                lines_added,
                lines_removed,
            } => {
                if let Some(i) = self.state.open_step {
                    let edits = &mut self.steps[i].edits;
                    if !edits.iter().any(|p| p == path) {
                        edits.push(path.to_string());
                    }
                }
                for p in std::iter::once(path).chain(from) {
                    self.state
                        .edit_seqs
                        .entry(p.to_string())
                        .or_default()
                        .push(seq);
                }
                let c = match self.files.get_mut(path) {
                    Some(c) => c,
                    None => self.files.entry(path.to_string()).or_default(),
                };
                c.edits += 1;
                c.last_edit_seq = seq;
                c.lines_added += lines_added.unwrap_or(0);
                c.lines_removed += lines_removed.unwrap_or(0);
                match op {
                    tacho_schema::EditOp::Create => c.created = true,
                    tacho_schema::EditOp::Delete => c.deleted = true,
                    tacho_schema::EditOp::Rename => c.renamed_from = own(from),
                    tacho_schema::EditOp::Modify => {}
                }
            }
            EventView::SnapshotTaken {
                snapshot,
                workspace,
                reason,
                before_step,
                files,
                targeted,
            } => self.snapshots.push(SnapshotNode {
                seq,
                at_unix_ns: at,
                id: snapshot.to_string(),
                workspace: workspace.to_string(),
                reason,
                before_step,
                files,
                targeted,
            }),
            EventView::SessionBranch {
                parent,
                through_seq,
            } => {
                self.branch = Some(BranchNode {
                    parent: parent.to_string(),
                    through_seq,
                })
            }
            EventView::RollbackApplied { rolled_back, .. } => {
                self.rollbacks_of.push(rolled_back.to_string())
            }
            EventView::GoalCheck {
                goal,
                check,
                command,
                passed,
                changed_since_freeze,
            } => {
                self.goals.receipts += 1;
                if !passed {
                    self.goals.receipts_failed += 1;
                }
                self.goal_event(seq, at, goal, |e| {
                    e.mark = if passed {
                        GoalMark::CheckPassed
                    } else {
                        GoalMark::CheckFailed
                    };
                    e.check = Some(check.to_string());
                    e.command = Some(command.to_string());
                    e.changed_since_freeze =
                        changed_since_freeze.iter().map(str::to_owned).collect();
                });
            }
            EventView::GoalUpdate {
                goal,
                action,
                accepted,
            } => {
                let t = self.goals.by_goal.entry(goal.to_string()).or_default();
                let mark = match (action, accepted) {
                    (GoalAction::Complete, true) => {
                        self.goals.completed = true;
                        t.completed = true;
                        GoalMark::Accepted
                    }
                    (GoalAction::Complete, false) => {
                        self.goals.completions_refused += 1;
                        t.completions_refused += 1;
                        GoalMark::Refused
                    }
                    (GoalAction::Pause, true) => {
                        self.goals.paused += 1;
                        t.paused += 1;
                        GoalMark::Paused
                    }
                    (GoalAction::Pause, false) => GoalMark::Resumed,
                    (GoalAction::Block, true) => {
                        self.goals.blocked += 1;
                        t.blocked += 1;
                        GoalMark::Blocked
                    }
                    // A block the gate did not take is no state of the goal.
                    (GoalAction::Block, false) => return,
                    (GoalAction::Clear, true) => {
                        self.goals.cleared += 1;
                        t.cleared += 1;
                        GoalMark::Cleared
                    }
                    (GoalAction::Clear, false) => return,
                };
                self.goal_event(seq, at, goal, |e| e.mark = mark);
            }
            EventView::Goal {
                goal,
                revises,
                assurance,
                correction,
            } => {
                self.goals.by_goal.entry(goal.to_string()).or_default();
                let mut weakened = Vec::new();
                if let Some(old) = revises {
                    self.goals
                        .by_goal
                        .entry(old.to_string())
                        .or_default()
                        .revised_by = Some(goal.to_string());
                    weakened = crate::goals::weakening(
                        self.state.contracts.get(old).map(String::as_str),
                        assurance,
                    );
                }
                if let Some(a) = assurance {
                    self.state.contracts.insert(goal.to_string(), a.to_string());
                }
                self.goal_event(seq, at, goal, |e| {
                    e.revises = own(revises);
                    e.correction = own(correction);
                    e.weakened = weakened;
                });
            }
            EventView::TodoUpdate { todos } => {
                self.todos = Some(TodoList {
                    seq,
                    at_unix_ns: at,
                    items: todos
                        .iter()
                        .map(|(content, status, id)| TodoNode {
                            content: content.to_string(),
                            status,
                            id: id.map(str::to_string),
                        })
                        .collect(),
                });
            }
            EventView::GoalCheckStart { .. }
            | EventView::AgentNotice { .. }
            | EventView::SecretAllowed { .. }
            | EventView::GitCommits { .. }
            | EventView::Unknown => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tacho_schema::{EventBody, GoalCheckRun, GoalCreated, GoalUpdate, StepStart};

    fn fold(bodies: Vec<EventBody>) -> ExecutionGraph {
        let mut g = ExecutionGraph::new("s");
        for (i, body) in bodies.into_iter().enumerate() {
            let e = Event {
                session: "s".into(),
                time_unix_ns: i as i64,
                body,
            };
            g.apply(i as u64, &e);
        }
        g
    }

    fn step(
        number: u64,
        start: u64,
        finish: Option<u64>,
        calls: &[(u64, Option<u64>)],
    ) -> StepNode {
        StepNode {
            number,
            implicit: false,
            agent: None,
            title: None,
            start_seq: start,
            started_unix_ns: start as i64,
            finished_unix_ns: finish.map(|f| f as i64),
            finish_seq: finish,
            tokens: Tokens::default(),
            model_calls: 0,
            tools: calls
                .iter()
                .map(|&(seq, result_seq)| ToolNode {
                    seq,
                    call_id: format!("c{seq}"),
                    tool: "bash".into(),
                    target: None,
                    agent: None,
                    started_unix_ns: seq as i64,
                    status: None,
                    result_seq,
                    duration_ms: None,
                    error: None,
                })
                .collect(),
            errors: 0,
            edits: Vec::new(),
        }
    }

    /// The rule of SPEC §8.1, as hooks record: snapshot 2 before step 1 (call 4,
    /// result 5), snapshot 6 after it, step.finish 7; snapshot 8 before step 2 (call
    /// 10, no result yet). Between a call's after-snapshot and the next call's
    /// before-snapshot nothing claims a change, though step 1 only finished at 7.
    #[test]
    fn a_change_is_claimed_only_while_a_call_runs() {
        let mut g = ExecutionGraph::new("s");
        g.steps = vec![
            step(1, 3, Some(7), &[(4, Some(5))]),
            step(2, 9, None, &[(10, None)]),
        ];
        assert!(
            !g.claimed_between(1, 2),
            "baseline to the first before-snapshot"
        );
        assert!(g.claimed_between(2, 6), "around call 4");
        assert!(!g.claimed_between(6, 8), "between the calls");
        assert!(
            g.claimed_between(8, 11),
            "call 10 has no result: it still runs"
        );
        assert!(
            g.claimed_between(12, 20),
            "and claims every change after it"
        );
        // A call whose result came exactly at the earlier snapshot ran before it.
        assert!(!g.claimed_between(5, 8));
        // A step that records no call claims while it is open; one with calls does not.
        g.steps = vec![step(1, 3, Some(7), &[])];
        assert!(g.claimed_between(2, 8));
        assert!(!g.claimed_between(7, 9), "it ended at 7");
        assert!(!g.claimed_between(1, 3), "it started at 3");
        g.steps = vec![step(1, 3, None, &[])];
        assert!(g.claimed_between(20, 30), "never finished: still open");
        // A read-only call (outside any recorded step: an implicit step) claims
        // nothing in a session that records steps, and claims in one that does not.
        let mut read = step(3, 7, None, &[(7, Some(7))]);
        read.implicit = true;
        g.steps = vec![step(1, 3, Some(5), &[(4, Some(5))]), read.clone()];
        assert!(!g.claimed_between(6, 8));
        g.steps = vec![read.clone()];
        assert!(g.claimed_between(6, 8));
        // A call outside any step during which a subagent started (a Task) claims.
        let mut task = read;
        task.tools[0].result_seq = Some(9);
        g.steps = vec![step(1, 3, Some(5), &[(4, Some(5))]), task];
        assert!(!g.claimed_between(6, 10));
        g.routes.push(RouteNode {
            seq: 8,
            at_unix_ns: 8,
            from: None,
            to: "sub".into(),
            reason: None,
        });
        assert!(g.claimed_between(6, 10));
        // A rollback session claims its own changes.
        g.steps.clear();
        assert!(!g.claimed_between(1, 2));
        g.rollbacks_of.push("other".into());
        assert!(g.claimed_between(1, 2));
    }

    /// An edit event claims its file's change between the snapshots around it (its
    /// path and a rename's `from`), and no other file's.
    #[test]
    fn an_edit_event_claims_only_its_file() {
        let g = fold(vec![
            EventBody::StepStart(StepStart {
                step: 1,
                ..Default::default()
            }),
            EventBody::FileEdit(tacho_schema::FileEdit {
                path: "b.txt".into(),
                op: tacho_schema::EditOp::Rename,
                from: Some("a.txt".into()),
                tool: None,
                call_id: None,
                lines_added: None,
                lines_removed: None,
            }),
        ]);
        assert!(g.edited_between("b.txt", 0, 2) && g.edited_between("a.txt", 0, 2));
        assert!(!g.edited_between("c.txt", 0, 2));
        assert!(!g.edited_between("b.txt", 1, 2) && !g.edited_between("b.txt", 0, 1));
    }

    /// A step's end is its `step.finish`, or the next `step.start` when it never
    /// finished.
    #[test]
    fn a_step_ends_at_its_finish_or_the_next_start() {
        let g = fold(vec![
            EventBody::StepStart(StepStart {
                step: 1,
                ..Default::default()
            }),
            EventBody::StepStart(StepStart {
                step: 2,
                ..Default::default()
            }),
        ]);
        assert_eq!(g.steps[0].finish_seq, Some(1));
        assert_eq!(g.steps[1].finish_seq, None);
    }

    /// Every goal event is listed in log order with what it was: a receipt with its
    /// check and command and the step it ran in, a revision with the goal it replaces;
    /// a check starting is no mark, nor a block the gate did not take.
    #[test]
    fn goal_events_are_listed_in_order() {
        let update = |action, accepted| {
            EventBody::GoalUpdate(GoalUpdate {
                goal: "goal_2".into(),
                action,
                accepted,
                ..Default::default()
            })
        };
        let g = fold(vec![
            EventBody::GoalCreated(GoalCreated {
                goal: "goal_1".into(),
                ..Default::default()
            }),
            EventBody::GoalCreated(GoalCreated {
                goal: "goal_2".into(),
                revises: Some("goal_1".into()),
                ..Default::default()
            }),
            EventBody::StepStart(StepStart {
                step: 4,
                ..Default::default()
            }),
            EventBody::GoalCheckStart(tacho_schema::GoalCheckStart {
                goal: "goal_2".into(),
                revision: 2,
                check: "a".into(),
            }),
            EventBody::GoalCheckRun(GoalCheckRun {
                goal: "goal_2".into(),
                check: "a".into(),
                command: "make a".into(),
                passed: true,
                ..Default::default()
            }),
            update(GoalAction::Complete, false),
            update(GoalAction::Pause, true),
            update(GoalAction::Pause, false),
            update(GoalAction::Block, false),
            update(GoalAction::Block, true),
            update(GoalAction::Complete, true),
        ]);
        let marks: Vec<(u64, &str, GoalMark)> = g
            .goals
            .events
            .iter()
            .map(|e| (e.seq, e.goal.as_str(), e.mark))
            .collect();
        assert_eq!(
            marks,
            [
                (0, "goal_1", GoalMark::Created),
                (1, "goal_2", GoalMark::Created),
                (4, "goal_2", GoalMark::CheckPassed),
                (5, "goal_2", GoalMark::Refused),
                (6, "goal_2", GoalMark::Paused),
                (7, "goal_2", GoalMark::Resumed),
                (9, "goal_2", GoalMark::Blocked),
                (10, "goal_2", GoalMark::Accepted),
            ]
        );
        let e = &g.goals.events;
        assert_eq!(e[1].revises.as_deref(), Some("goal_1"));
        assert_eq!(
            (e[2].check.as_deref(), e[2].command.as_deref(), e[2].step),
            (Some("a"), Some("make a"), Some(4))
        );
        // The JSON names are the marks' names.
        for ev in e {
            assert_eq!(
                serde_json::to_value(ev.mark).ok(),
                Some(serde_json::Value::from(ev.mark.name()))
            );
        }
    }
}
