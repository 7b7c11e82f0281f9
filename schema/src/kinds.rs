//! The event kinds of schema version 1.
//!
//! To add a kind: add a struct and one line to the `kinds!` table with a new, never
//! reused id. To change a kind: add a new struct version, bump its version in the table,
//! and keep decoding the old version (see SPEC.md §"Versioning").

use serde::{Deserialize, Serialize};

use crate::SchemaError;

/// Fields that hold arbitrary JSON are stored as compact JSON text.
pub mod json_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            None => s.serialize_none(),
            Some(text) => {
                let raw = serde_json::value::RawValue::from_string(text.clone())
                    .map_err(serde::ser::Error::custom)?;
                raw.serialize(s)
            }
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        let v = Option::<serde_json::Value>::deserialize(d)?;
        Ok(v.map(|v| v.to_string()))
    }
}

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident {
        $first:ident = $first_text:literal $(, $variant:ident = $text:literal)* $(,)?
    }) => {
        $(#[$m])*
        /// The first variant is the default.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
        #[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
        #[rkyv(compare(PartialEq), derive(Debug))]
        pub enum $name {
            #[default]
            #[serde(rename = $first_text)]
            $first,
            $(#[serde(rename = $text)] $variant),*
        }

        impl $name {
            /// The name used in JSON and in text output.
            pub fn as_str(self) -> &'static str {
                match self { $name::$first => $first_text, $($name::$variant => $text),* }
            }

            /// Every name, in declaration order.
            pub const NAMES: &'static [&'static str] = &[$first_text $(, $text)*];

            /// The variant with this name, as in JSON.
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $first_text => Some($name::$first),
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// How a session ended.
    EndReason {
        Completed = "completed",
        Aborted = "aborted",
        Error = "error",
        StepLimit = "step_limit",
        Stalled = "stalled",
        BudgetLimited = "budget_limited",
        GateBlocked = "gate_blocked",
    }
);

string_enum!(
    /// Outcome of a tool call.
    ToolStatus {
        Ok = "ok",
        Error = "error",
        Denied = "denied",
        Cancelled = "cancelled",
        Timeout = "timeout",
    }
);

string_enum!(
    /// A permission decision.
    Decision {
        Allow = "allow",
        AllowAlways = "allow_always",
        Deny = "deny",
    }
);

string_enum!(
    /// Outcome of a verification run (tests, build, lint, type check).
    VerificationStatus {
        Passed = "passed",
        Failed = "failed",
        Error = "error",
        Skipped = "skipped",
    }
);

string_enum!(
    /// What an edit tool did to a file.
    EditOp {
        Create = "create",
        Modify = "modify",
        Delete = "delete",
        Rename = "rename",
    }
);

string_enum!(
    /// Why a snapshot was taken.
    SnapshotReason {
        Step = "step",
        Baseline = "baseline",
        Final = "final",
        Manual = "manual",
        PreRollback = "pre_rollback",
    }
);

macro_rules! record_struct {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
        #[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name { $($(#[$fm])* pub $field: $ty),* }
    };
}

record_struct!(
    /// `session.start`: the first event of every session.
    SessionStart {
        #[serde(default, skip_serializing_if = "Option::is_none")] agent: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] model: Option<String>,
        /// Absolute path of the working directory.
        #[serde(default, skip_serializing_if = "Option::is_none")] workspace: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] project: Option<String>,
        /// The session that delegated this one.
        #[serde(default, skip_serializing_if = "Option::is_none")] parent: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] title: Option<String>,
        /// What produced the events: `claude-code`, `codex`, `tacho-import`, ...
        #[serde(default, skip_serializing_if = "Option::is_none")] source: Option<String>,
    }
);

record_struct!(
    /// `session.end`.
    SessionEnd {
        reason: EndReason,
        #[serde(default, skip_serializing_if = "Option::is_none")] message: Option<String>,
    }
);

record_struct!(
    /// `agent.route`: a routing decision between agents.
    AgentRoute {
        #[serde(default, skip_serializing_if = "Option::is_none")] from: Option<String>,
        to: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] reason: Option<String>,
    }
);

record_struct!(
    /// `llm.request`.
    LlmRequest {
        request_id: String,
        model: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] agent: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] provider: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] summary: Option<String>,
    }
);

record_struct!(
    /// `llm.response`, with token usage. `response_id` identifies the model's response
    /// so that usage repeated in several events is counted once.
    LlmResponse {
        request_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] response_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] model: Option<String>,
        #[serde(default)] tokens_in: u64,
        #[serde(default)] tokens_out: u64,
        #[serde(default)] cache_read: u64,
        #[serde(default)] cache_write: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")] latency_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")] stop_reason: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] error: Option<String>,
    }
);

record_struct!(
    /// `step.start`.
    StepStart {
        step: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")] agent: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] title: Option<String>,
    }
);

record_struct!(
    /// `step.finish`.
    StepFinish {
        step: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")] reason: Option<String>,
    }
);

record_struct!(
    /// `tool.call`.
    ToolCall {
        call_id: String,
        tool: String,
        /// The file, pattern or command the call is aimed at, for display.
        #[serde(default, skip_serializing_if = "Option::is_none")] target: Option<String>,
        /// The tool's input, any JSON value.
        #[serde(default, with = "json_text", skip_serializing_if = "Option::is_none")] input: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] agent: Option<String>,
    }
);

record_struct!(
    /// `tool.result`. The output is stored whole.
    ToolResult {
        call_id: String,
        status: ToolStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")] duration_ms: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")] error: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] output: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] exit_code: Option<i64>,
    }
);

record_struct!(
    /// `permission.ask`.
    PermissionAsk {
        request_id: String,
        permission: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] tool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] call_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] target: Option<String>,
    }
);

record_struct!(
    /// `permission.reply`.
    PermissionReply {
        request_id: String,
        decision: Decision,
        #[serde(default, skip_serializing_if = "Option::is_none")] by: Option<String>,
    }
);

record_struct!(
    /// `error`: an error outside any tool result.
    ErrorEvent {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] code: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] source: Option<String>,
        #[serde(default)] fatal: bool,
    }
);

record_struct!(
    /// `verification.run`: tests, a build, a linter or a type check.
    VerificationRun {
        command: String,
        status: VerificationStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")] exit_code: Option<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")] duration_ms: Option<u64>,
        /// `test`, `build`, `lint`, `typecheck`, ...
        #[serde(default, skip_serializing_if = "Option::is_none")] kind: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] output: Option<String>,
    }
);

record_struct!(
    /// `file.edit`: a file change reported by an edit tool.
    FileEdit {
        path: String,
        op: EditOp,
        /// The old path of a rename.
        #[serde(default, skip_serializing_if = "Option::is_none")] from: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] tool: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] call_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] lines_added: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")] lines_removed: Option<u64>,
    }
);

record_struct!(
    /// A path a snapshot left out, and why (special file, nested repository, link to
    /// outside, too large, unreadable, changed while read).
    ExcludedPath {
        path: String,
        reason: String,
    }
);

record_struct!(
    /// `snapshot.taken`: the workspace's files were stored in the snapshot store.
    SnapshotTaken {
        /// The snapshot's id: the Git tree id, kept by `refs/snapshots/<id>`.
        snapshot: String,
        /// Absolute path of the workspace.
        workspace: String,
        #[serde(default)] reason: SnapshotReason,
        /// Taken before this step's changes.
        #[serde(default, skip_serializing_if = "Option::is_none")] before_step: Option<u64>,
        #[serde(default)] files: u64,
        #[serde(default)] bytes: u64,
        /// Only the paths an edit tool reported were looked at.
        #[serde(default)] targeted: bool,
        #[serde(default, skip_serializing_if = "Vec::is_empty")] excluded: Vec<ExcludedPath>,
        /// All excluded paths, when more than the listed ones.
        #[serde(default)] excluded_total: u64,
    }
);

record_struct!(
    /// `rollback.applied`: a rollback of another session, recorded in a session of its
    /// own so that it can be rolled back too.
    RollbackApplied {
        /// The session rolled back.
        rolled_back: String,
        /// The snapshot restored.
        to_snapshot: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] before_step: Option<u64>,
        /// The workspace just before the rollback.
        pre_snapshot: String,
        /// Sessions whose changes were included (the session and its children).
        #[serde(default, skip_serializing_if = "Vec::is_empty")] sessions: Vec<String>,
        #[serde(default)] restored: u64,
        #[serde(default)] modes: u64,
        #[serde(default)] deleted: u64,
        #[serde(default)] recreated: u64,
        /// Files left alone (changed outside the session, or unsafe), with the reason.
        #[serde(default, skip_serializing_if = "Vec::is_empty")] skipped: Vec<ExcludedPath>,
        #[serde(default)] forced: bool,
    }
);

record_struct!(
    /// `session.branch`: this session is a fork of `parent`; the events that follow,
    /// up to the first that is not a copy, are the parent's events 1..=`through_seq`.
    SessionBranch {
        parent: String,
        through_seq: u64,
        /// The branch point as the user gave it (`step 3`, a message id, ...).
        #[serde(default, skip_serializing_if = "Option::is_none")] point: Option<String>,
        #[serde(default)] copied: u64,
    }
);

string_enum!(
    /// What a `goal.update` asks for. `clear` (goal.update v2): the goal set aside by
    /// the user (`tacho goal clear`); it holds no one any more, and every view says so.
    GoalAction {
        Complete = "complete",
        Block = "block",
        Pause = "pause",
        Clear = "clear",
    }
);

record_struct!(
    /// `goal.created`: a goal and its frozen plan.
    GoalCreated {
        /// `goal_` and a ULID.
        goal: String,
        #[serde(default)] revision: u32,
        title: String,
        kind: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] objective: Option<String>,
        #[serde(default)] assured: bool,
        contract_digest: String,
        /// The HEAD commit `{BASELINE}` stood for.
        #[serde(default, skip_serializing_if = "Option::is_none")] baseline: Option<String>,
        workspace: String,
        /// The plan as frozen (Markdown, at most 8,192 bytes).
        plan: String,
        /// The assurance object as canonical JSON text.
        #[serde(default, skip_serializing_if = "Option::is_none")] assurance: Option<String>,
        /// For a revision: the goal it replaces, that goal's contract digest, and the
        /// correction that motivated it.
        #[serde(default, skip_serializing_if = "Option::is_none")] revises: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] previous_digest: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] correction: Option<String>,
        /// Version 2: the environment checks run in, frozen with the goal, as
        /// `NAME=VALUE` entries sorted by name (SPEC §12.2); empty for a goal frozen
        /// before version 2.
        #[serde(default, skip_serializing_if = "Vec::is_empty")] environment: Vec<String>,
        /// Version 2: the digest of `environment`.
        #[serde(default, skip_serializing_if = "Option::is_none")] environment_digest: Option<String>,
        /// Version 2: the programs the checks' commands resolved to at freeze, as
        /// `BLAKE3-HEX  PATH` lines (`-  NAME` for a name found nowhere on the PATH).
        #[serde(default, skip_serializing_if = "Vec::is_empty")] programs: Vec<String>,
        /// Version 3: the snapshot of the workspace taken when the goal was frozen (its
        /// `snapshot.taken` precedes this event): the state a check's "without the
        /// change" run puts back (SPEC §12.2, red/green). A revision keeps its goal's.
        #[serde(default, skip_serializing_if = "Option::is_none")] start_snapshot: Option<String>,
    }
);

record_struct!(
    /// `goal.created` version 2 (before the start snapshot), read by
    /// [`old_versions`].
    GoalCreatedV2 {
        /// `goal_` and a ULID.
        goal: String,
        #[serde(default)] revision: u32,
        title: String,
        kind: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] objective: Option<String>,
        #[serde(default)] assured: bool,
        contract_digest: String,
        /// The HEAD commit `{BASELINE}` stood for.
        #[serde(default, skip_serializing_if = "Option::is_none")] baseline: Option<String>,
        workspace: String,
        /// The plan as frozen (Markdown, at most 8,192 bytes).
        plan: String,
        /// The assurance object as canonical JSON text.
        #[serde(default, skip_serializing_if = "Option::is_none")] assurance: Option<String>,
        /// For a revision: the goal it replaces, that goal's contract digest, and the
        /// correction that motivated it.
        #[serde(default, skip_serializing_if = "Option::is_none")] revises: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] previous_digest: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] correction: Option<String>,
        /// Version 2: the environment checks run in, frozen with the goal, as
        /// `NAME=VALUE` entries sorted by name (SPEC §12.2); empty for a goal frozen
        /// before version 2.
        #[serde(default, skip_serializing_if = "Vec::is_empty")] environment: Vec<String>,
        /// Version 2: the digest of `environment`.
        #[serde(default, skip_serializing_if = "Option::is_none")] environment_digest: Option<String>,
        /// Version 2: the programs the checks' commands resolved to at freeze, as
        /// `BLAKE3-HEX  PATH` lines (`-  NAME` for a name found nowhere on the PATH).
        #[serde(default, skip_serializing_if = "Vec::is_empty")] programs: Vec<String>,
    }
);

record_struct!(
    /// `goal.created` version 1 (before the frozen check environment), read by
    /// [`old_versions`].
    GoalCreatedV1 {
        /// `goal_` and a ULID.
        goal: String,
        #[serde(default)] revision: u32,
        title: String,
        kind: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] objective: Option<String>,
        #[serde(default)] assured: bool,
        contract_digest: String,
        /// The HEAD commit `{BASELINE}` stood for.
        #[serde(default, skip_serializing_if = "Option::is_none")] baseline: Option<String>,
        workspace: String,
        /// The plan as frozen (Markdown, at most 8,192 bytes).
        plan: String,
        /// The assurance object as canonical JSON text.
        #[serde(default, skip_serializing_if = "Option::is_none")] assurance: Option<String>,
        /// For a revision: the goal it replaces, that goal's contract digest, and the
        /// correction that motivated it.
        #[serde(default, skip_serializing_if = "Option::is_none")] revises: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] previous_digest: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] correction: Option<String>,
    }
);

record_struct!(
    /// `goal.check`: the receipt of one run of a frozen check.
    GoalCheckRun {
        goal: String,
        #[serde(default)] revision: u32,
        check: String,
        contract_digest: String,
        workspace: String,
        command: String,
        started_unix_ns: i64,
        ended_unix_ns: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")] exit_code: Option<i64>,
        #[serde(default)] timed_out: bool,
        /// BLAKE3 of the whole stdout and stderr.
        stdout_digest: String,
        stderr_digest: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] output_tail: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] fingerprint_before: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] fingerprint_after: Option<String>,
        /// Why no fresh evidence could be produced, if so.
        #[serde(default, skip_serializing_if = "Option::is_none")] no_evidence: Option<String>,
        #[serde(default)] passed: bool,
        /// Version 2: the digest of the environment the check ran in (SPEC §12.2).
        #[serde(default, skip_serializing_if = "Option::is_none")] environment_digest: Option<String>,
        /// Version 2: the programs the command resolved to when it ran, as
        /// `BLAKE3-HEX  PATH` lines (`-  NAME` for a name found nowhere on the PATH).
        #[serde(default, skip_serializing_if = "Vec::is_empty")] programs: Vec<String>,
        /// Version 3: the check ran in a clean room (a fresh directory outside the
        /// workspace holding exactly the fingerprinted files), not in the workspace.
        #[serde(default)] clean_room: bool,
        /// Version 3: what the receipt proves (SPEC §12.2, red/green): `red_green`
        /// (failed without the change, passed with it), `guard` (passed before and
        /// after), `unable_to_fail` (passed without the change too), `guard_failed`
        /// (a guard that failed without the change), `unproven` (no run without the
        /// change could be made; `proof_note` says why).
        #[serde(default, skip_serializing_if = "Option::is_none")] proof: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] proof_note: Option<String>,
        /// Version 3: what "without the change" put back: `change_paths` (the
        /// contract's `changePaths` as they were at the goal's start) or `baseline`
        /// (every fingerprinted path as it was at the goal's start).
        #[serde(default, skip_serializing_if = "Option::is_none")] red_scope: Option<String>,
        /// Version 3: the run without the change: its exit code (`None`: a signal or
        /// no run), whether it timed out, and the digest of its inputs (command,
        /// environment, files), by which an earlier run is reused.
        #[serde(default, skip_serializing_if = "Option::is_none")] red_exit_code: Option<i64>,
        #[serde(default)] red_timed_out: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")] red_inputs: Option<String>,
        /// Version 3: the receipt whose run without the change this one reused (same
        /// inputs), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")] red_reused: Option<u64>,
        /// Version 3: files outside the change that differ from the goal's start
        /// (tests, fixtures, configuration, the check's scripts), as `M PATH`,
        /// `A PATH` (added) or `D PATH` (deleted), sorted by path.
        #[serde(default, skip_serializing_if = "Vec::is_empty")] changed_since_freeze: Vec<String>,
        /// Version 3: the contract's setup (SPEC §12.2): the digest of its inputs
        /// (command, environment, the files it reads) and of the outputs the check ran
        /// with (made by this run, or taken from the cache an earlier receipt of the
        /// goal recorded with the same inputs and this digest).
        #[serde(default, skip_serializing_if = "Option::is_none")] setup_inputs: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] setup_digest: Option<String>,
    }
);

record_struct!(
    /// `goal.check` version 2 (before the clean room and red/green), read by
    /// [`old_versions`].
    GoalCheckRunV2 {
        goal: String,
        #[serde(default)] revision: u32,
        check: String,
        contract_digest: String,
        workspace: String,
        command: String,
        started_unix_ns: i64,
        ended_unix_ns: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")] exit_code: Option<i64>,
        #[serde(default)] timed_out: bool,
        /// BLAKE3 of the whole stdout and stderr.
        stdout_digest: String,
        stderr_digest: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] output_tail: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] fingerprint_before: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] fingerprint_after: Option<String>,
        /// Why no fresh evidence could be produced, if so.
        #[serde(default, skip_serializing_if = "Option::is_none")] no_evidence: Option<String>,
        #[serde(default)] passed: bool,
        /// Version 2: the digest of the environment the check ran in (SPEC §12.2).
        #[serde(default, skip_serializing_if = "Option::is_none")] environment_digest: Option<String>,
        /// Version 2: the programs the command resolved to when it ran, as
        /// `BLAKE3-HEX  PATH` lines (`-  NAME` for a name found nowhere on the PATH).
        #[serde(default, skip_serializing_if = "Vec::is_empty")] programs: Vec<String>,
    }
);

record_struct!(
    /// `goal.check` version 1 (before the environment binding), read by
    /// [`old_versions`].
    GoalCheckRunV1 {
        goal: String,
        #[serde(default)] revision: u32,
        check: String,
        contract_digest: String,
        workspace: String,
        command: String,
        started_unix_ns: i64,
        ended_unix_ns: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")] exit_code: Option<i64>,
        #[serde(default)] timed_out: bool,
        /// BLAKE3 of the whole stdout and stderr.
        stdout_digest: String,
        stderr_digest: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] output_tail: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] fingerprint_before: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] fingerprint_after: Option<String>,
        /// Why no fresh evidence could be produced, if so.
        #[serde(default, skip_serializing_if = "Option::is_none")] no_evidence: Option<String>,
        #[serde(default)] passed: bool,
    }
);

record_struct!(
    /// `goal.check_start`: a frozen check began to run (its receipt follows).
    GoalCheckStart {
        goal: String,
        #[serde(default)] revision: u32,
        check: String,
    }
);

record_struct!(
    /// `goal.update`: an attempt to complete or block a goal, and whether the gate let
    /// it through.
    GoalUpdate {
        goal: String,
        #[serde(default)] revision: u32,
        action: GoalAction,
        #[serde(default)] accepted: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")] reason: Option<String>,
        /// For a refusal, each check not passed and why.
        #[serde(default, skip_serializing_if = "Vec::is_empty")] details: Vec<String>,
        /// For `block`: `external_dependency`, `authorization` or `user_input`.
        #[serde(default, skip_serializing_if = "Option::is_none")] block_kind: Option<String>,
        /// For `block`: the change outside the agent's reach that would unblock it.
        #[serde(default, skip_serializing_if = "Option::is_none")] required_change: Option<String>,
        /// For `block`: the receipts (event numbers) the block rests on.
        #[serde(default, skip_serializing_if = "Vec::is_empty")] evidence: Vec<u64>,
        /// For `block`: the statement that no independent work remains.
        #[serde(default)] no_independent_work: bool,
    }
);

record_struct!(
    /// `secret.allowed`: the session's owner let one event that the secret scan flags
    /// leave the machine (`tacho session secrets --allow`, SPEC §17.1). Evidence: an
    /// agent cannot write it, and `log verify` covers it like every event.
    SecretAllowed {
        /// The event allowed (its sequence number in this session).
        seq: u64,
        /// The kinds of secret the scan found in it when it was allowed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")] kinds: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] reason: Option<String>,
    }
);

record_struct!(
    /// One commit tacho saw appear in a repository: the commit and its tree.
    ObservedCommit {
        commit: String,
        tree: String,
    }
);

record_struct!(
    /// `git.commits`: HEAD of the session's repository as tacho read it itself, and the
    /// commits new since it last read it in this session (SPEC §17.2).
    GitCommits {
        /// Absolute path of the repository's work tree.
        workspace: String,
        head: String,
        /// HEAD when tacho last read it in this session (absent: the first reading).
        #[serde(default, skip_serializing_if = "Option::is_none")] previous: Option<String>,
        /// Reachable from `head` and not from `previous`, newest first, at most 1,000.
        #[serde(default, skip_serializing_if = "Vec::is_empty")] commits: Vec<ObservedCommit>,
        #[serde(default)] commits_total: u64,
    }
);

macro_rules! kinds {
    ($($variant:ident($ty:ident) = $id:literal, $name:literal, v $version:literal, by $by:ident;)+) => {
        /// The body of an event: one variant per kind.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "type")]
        pub enum EventBody {
            $(#[serde(rename = $name)] $variant($ty),)+
            /// A kind this tacho does not know (written by a newer version). Kept as
            /// raw payload so it can still be verified and counted.
            #[serde(skip)]
            Unknown { kind: u16, version: u16, payload: Vec<u8> },
        }

        /// Every kind this tacho knows: (id, name, current schema version).
        pub const KINDS: &[(u16, &str, u16)] = &[$(($id, $name, $version)),+];

        /// Who may write a kind id (a kind this tacho does not know counts as evidence:
        /// it cannot be vouched for).
        pub fn kind_provenance(id: u16) -> Provenance {
            match id { $($id => Provenance::$by,)+ _ => Provenance::Tacho }
        }

        impl EventBody {
            /// Who may write this event: an agent (through any ingest path), or tacho
            /// alone (evidence).
            pub fn provenance(&self) -> Provenance {
                kind_provenance(self.kind_id())
            }

            /// The kind's numeric id, as stored in the frame header.
            pub fn kind_id(&self) -> u16 {
                match self { $(EventBody::$variant(_) => $id,)+ EventBody::Unknown { kind, .. } => *kind }
            }

            /// The kind's name (`tool.call`, ...).
            pub fn kind_name(&self) -> &'static str {
                kind_name(self.kind_id())
            }

            /// Encodes the body as (kind id, schema version, rkyv payload).
            pub fn encode(&self) -> Result<(u16, u16, rkyv::util::AlignedVec), SchemaError> {
                let mut bytes = rkyv::util::AlignedVec::new();
                let (kind, version) = self.encode_into(&mut bytes)?;
                Ok((kind, version, bytes))
            }

            /// Encodes the body's rkyv payload into `out` (cleared first; its capacity
            /// is reused, so a writer encoding many events allocates once) and returns
            /// (kind id, schema version).
            pub fn encode_into(
                &self,
                out: &mut rkyv::util::AlignedVec,
            ) -> Result<(u16, u16), SchemaError> {
                out.clear();
                match self {
                    $(EventBody::$variant(v) => {
                        *out = rkyv::api::high::to_bytes_in::<_, rkyv::rancor::Error>(
                            v,
                            std::mem::take(out),
                        )
                        .map_err(|e| SchemaError::Encode(e.to_string()))?;
                        Ok(($id, $version))
                    })+
                    EventBody::Unknown { kind, version, payload } => {
                        out.extend_from_slice(payload);
                        Ok((*kind, *version))
                    }
                }
            }

            /// Decodes a payload. `payload` must be 8-byte aligned in memory, as it is
            /// in a segment read from a memory map or an aligned buffer.
            pub fn decode(kind: u16, version: u16, payload: &[u8]) -> Result<Self, SchemaError> {
                match kind {
                    $($id => decode_versioned(kind, version, $version, payload, |p| {
                        rkyv::from_bytes::<$ty, rkyv::rancor::Error>(p)
                            .map(EventBody::$variant)
                            .map_err(|e| e.to_string())
                    }, old_versions(kind)),)+
                    _ => Ok(EventBody::Unknown { kind, version, payload: payload.to_vec() }),
                }
            }

            /// Checks a payload without building owned values (the validation that
            /// verification runs on every event). Unknown kinds pass: they belong to a
            /// newer tacho, and the frame checksum and chain still protect them.
            pub fn validate(kind: u16, version: u16, payload: &[u8]) -> Result<(), SchemaError> {
                match kind {
                    $($id => validate_versioned(kind, version, $version, payload, |p| {
                        rkyv::access::<rkyv::Archived<$ty>, rkyv::rancor::Error>(p)
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    }, old_versions(kind)),)+
                    _ => Ok(()),
                }
            }
        }

        impl EventBody {
        /// The body of kind `name` read straight from the text of a JSON object of
        /// its fields; `None` where it does not deserialize, which
        /// [`EventBody::from_json_fields`] then explains.
        pub fn from_json_text(name: &str, text: &str) -> Option<EventBody> {
            match name {
                $($name => serde_json::from_str::<$ty>(text).ok().map(EventBody::$variant),)+
                _ => None,
            }
        }

        /// The body of kind `name` read in one pass from a whole line (`text`), its
        /// envelope fields (`type`, `session`, `ts`) set aside in `envelope`; `None`
        /// where that does not work.
        pub(crate) fn from_enveloped_json<'a>(
            name: &str,
            text: &'a str,
            envelope: &mut crate::json::Envelope<'a>,
        ) -> Option<EventBody> {
            match name {
                $($name => crate::json::deserialize_enveloped::<$ty>(text, envelope)
                    .map(EventBody::$variant),)+
                _ => None,
            }
        }

        /// Builds a body from the fields of a JSON object whose `type` is `name`.
        /// Errors name the field (`step: invalid type ...`) and return its path.
        pub fn from_json_fields(
            name: &str,
            fields: serde_json::Value,
        ) -> Result<EventBody, FieldError> {
            match name {
                $($name => serde_path_to_error::deserialize::<_, $ty>(fields)
                    .map(EventBody::$variant)
                    .map_err(FieldError::from),)+
                other => Err(FieldError {
                    field: Some("type".into()),
                    message: format!(
                        "unknown event type `{other}`; known types: {}",
                        KINDS.iter().map(|k| k.1).collect::<Vec<_>>().join(", ")
                    ),
                }),
            }
        }
        }

        /// The name of a kind id, or `unknown` for ids this tacho does not know.
        pub fn kind_name(id: u16) -> &'static str {
            match id { $($id => $name,)+ _ => "unknown" }
        }

        /// The current schema version of a kind id (`None` for ids this tacho does not
        /// know).
        pub fn current_version(id: u16) -> Option<u16> {
            match id { $($id => Some($version),)+ _ => None }
        }
    };
}

record_struct!(
    /// Something the agent's host reported that is neither a model call nor a tool
    /// call: a user prompt, a context compaction, a resumed or cleared conversation, a
    /// notification, a stop. `notice` names it (`prompt`, `compaction`, `resume`,
    /// `clear`, `notification`, `stop`, `subagent_start`, `subagent_stop`, ...).
    AgentNotice {
        notice: String,
        #[serde(default, skip_serializing_if = "Option::is_none")] message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] agent: Option<String>,
    }
);

kinds! {
    SessionStart(SessionStart) = 1, "session.start", v 1, by Agent;
    SessionEnd(SessionEnd) = 2, "session.end", v 1, by Agent;
    AgentRoute(AgentRoute) = 3, "agent.route", v 1, by Agent;
    LlmRequest(LlmRequest) = 4, "llm.request", v 1, by Agent;
    LlmResponse(LlmResponse) = 5, "llm.response", v 1, by Agent;
    StepStart(StepStart) = 6, "step.start", v 1, by Agent;
    StepFinish(StepFinish) = 7, "step.finish", v 1, by Agent;
    ToolCall(ToolCall) = 8, "tool.call", v 1, by Agent;
    ToolResult(ToolResult) = 9, "tool.result", v 1, by Agent;
    PermissionAsk(PermissionAsk) = 10, "permission.ask", v 1, by Agent;
    PermissionReply(PermissionReply) = 11, "permission.reply", v 1, by Agent;
    Error(ErrorEvent) = 12, "error", v 1, by Agent;
    VerificationRun(VerificationRun) = 13, "verification.run", v 1, by Agent;
    FileEdit(FileEdit) = 14, "file.edit", v 1, by Agent;
    SnapshotTaken(SnapshotTaken) = 15, "snapshot.taken", v 1, by Tacho;
    RollbackApplied(RollbackApplied) = 16, "rollback.applied", v 1, by Tacho;
    SessionBranch(SessionBranch) = 17, "session.branch", v 1, by Tacho;
    GoalCreated(GoalCreated) = 18, "goal.created", v 3, by Tacho;
    GoalCheckRun(GoalCheckRun) = 19, "goal.check", v 3, by Tacho;
    GoalUpdate(GoalUpdate) = 20, "goal.update", v 2, by Tacho;
    GoalCheckStart(GoalCheckStart) = 21, "goal.check_start", v 1, by Tacho;
    AgentNotice(AgentNotice) = 22, "agent.notice", v 1, by Agent;
    SecretAllowed(SecretAllowed) = 23, "secret.allowed", v 1, by Tacho;
    GitCommits(GitCommits) = 24, "git.commits", v 1, by Tacho;
    TodoUpdate(TodoUpdate) = 25, "todo.update", v 1, by Agent;
}

string_enum!(
    /// Where an item of an agent's todo list stands.
    TodoStatus {
        Pending = "pending",
        InProgress = "in_progress",
        Completed = "completed",
        Cancelled = "cancelled",
    }
);

impl TodoStatus {
    /// Whether the item is still to be done (pending or in progress).
    pub fn is_open(self) -> bool {
        matches!(self, TodoStatus::Pending | TodoStatus::InProgress)
    }
}

record_struct!(
    /// One item of an agent's todo list.
    TodoItem {
        content: String,
        status: TodoStatus,
        /// The agent's id for it, when it gives one (Claude Code's tasks, Qwen
        /// Code's and OpenCode's todos).
        #[serde(default, skip_serializing_if = "Option::is_none")] id: Option<String>,
    }
);

record_struct!(
    /// `todo.update`: the agent's todo list (plan) as its todo tool last wrote it,
    /// whole: each update replaces the list before it.
    TodoUpdate {
        /// Empty: the agent cleared its list.
        #[serde(default, skip_serializing_if = "Vec::is_empty")] todos: Vec<TodoItem>,
        /// The tool call that wrote it.
        #[serde(default, skip_serializing_if = "Option::is_none")] call_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")] agent: Option<String>,
    }
);

/// Who may write an event kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Provenance {
    /// What an agent did: reported by the agent or its adapter, through any ingest
    /// path (`tacho record`, hooks, importers).
    Agent,
    /// Evidence: written by tacho itself (snapshots, rollbacks, branches, goals and
    /// their receipts), never accepted from an outside input.
    Tacho,
}

/// A JSON field that does not fit the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The first-level field the error is about, when known.
    pub field: Option<String>,
    pub message: String,
}

impl From<serde_path_to_error::Error<serde_json::Error>> for FieldError {
    fn from(e: serde_path_to_error::Error<serde_json::Error>) -> Self {
        let path = e.path().to_string();
        let message = e.inner().to_string();
        let field = (path != ".").then(|| path.split(['.', '[']).next().unwrap_or("").to_string());
        FieldError {
            message: match &field {
                // serde already names the field in these.
                Some(_) if message.starts_with("unknown field") => message,
                Some(_) => format!("field `{path}`: {message}"),
                None => message,
            },
            field,
        }
    }
}

/// How to read an earlier version of a kind: its payload decoded with the struct of
/// that version and turned into the current struct (fields added since get their
/// defaults), and validated without building values. SPEC §6.
pub struct OldVersion<T> {
    pub version: u16,
    pub decode: fn(&[u8]) -> Result<T, String>,
    pub validate: fn(&[u8]) -> Result<(), String>,
}

/// The earlier versions of every kind this tacho still reads. A kind gets an entry
/// here when its struct changes: the old struct is kept (renamed `...V1`), its version
/// in the `kinds!` table goes up, and this list maps the old version to a decoder.
/// `goal.created` and `goal.check` are at version 3 (2: the frozen check environment;
/// 3: the start snapshot, the clean room and red/green).
pub fn old_versions(kind: u16) -> &'static [OldVersion<EventBody>] {
    match kind {
        18 => &[
            OldVersion {
                version: 1,
                decode: goal_created_v1,
                validate: validate_v1::<GoalCreatedV1>,
            },
            OldVersion {
                version: 2,
                decode: goal_created_v2,
                validate: validate_v1::<GoalCreatedV2>,
            },
        ],
        19 => &[
            OldVersion {
                version: 1,
                decode: goal_check_v1,
                validate: validate_v1::<GoalCheckRunV1>,
            },
            OldVersion {
                version: 2,
                decode: goal_check_v2,
                validate: validate_v1::<GoalCheckRunV2>,
            },
        ],
        20 => &[OldVersion {
            version: 1,
            decode: goal_update_v1,
            validate: validate_v1::<GoalUpdate>,
        }],
        _ => &[],
    }
}

/// `goal.update` v1: the same layout; its action is never `clear` (added in v2, the
/// enum's tag the next value).
fn goal_update_v1(p: &[u8]) -> Result<EventBody, String> {
    let u = rkyv::from_bytes::<GoalUpdate, rkyv::rancor::Error>(p).map_err(|e| e.to_string())?;
    if u.action == GoalAction::Clear {
        return Err("goal.update v1 has no action clear".into());
    }
    Ok(EventBody::GoalUpdate(u))
}

fn validate_v1<T>(p: &[u8]) -> Result<(), String>
where
    T: rkyv::Archive,
    T::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, rkyv::rancor::Error>>,
{
    rkyv::access::<T::Archived, rkyv::rancor::Error>(p)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// `goal.created` v1: the same fields, without the frozen environment.
fn goal_created_v1(p: &[u8]) -> Result<EventBody, String> {
    let g = rkyv::from_bytes::<GoalCreatedV1, rkyv::rancor::Error>(p).map_err(|e| e.to_string())?;
    Ok(EventBody::GoalCreated(GoalCreated {
        goal: g.goal,
        revision: g.revision,
        title: g.title,
        kind: g.kind,
        objective: g.objective,
        assured: g.assured,
        contract_digest: g.contract_digest,
        baseline: g.baseline,
        workspace: g.workspace,
        plan: g.plan,
        assurance: g.assurance,
        revises: g.revises,
        previous_digest: g.previous_digest,
        correction: g.correction,
        ..GoalCreated::default()
    }))
}

/// `goal.created` v2: the same fields, without the start snapshot.
fn goal_created_v2(p: &[u8]) -> Result<EventBody, String> {
    let g = rkyv::from_bytes::<GoalCreatedV2, rkyv::rancor::Error>(p).map_err(|e| e.to_string())?;
    Ok(EventBody::GoalCreated(GoalCreated {
        goal: g.goal,
        revision: g.revision,
        title: g.title,
        kind: g.kind,
        objective: g.objective,
        assured: g.assured,
        contract_digest: g.contract_digest,
        baseline: g.baseline,
        workspace: g.workspace,
        plan: g.plan,
        assurance: g.assurance,
        revises: g.revises,
        previous_digest: g.previous_digest,
        correction: g.correction,
        environment: g.environment,
        environment_digest: g.environment_digest,
        programs: g.programs,
        ..GoalCreated::default()
    }))
}

/// `goal.check` v2: the same fields, run in the workspace, without red/green.
fn goal_check_v2(p: &[u8]) -> Result<EventBody, String> {
    let r =
        rkyv::from_bytes::<GoalCheckRunV2, rkyv::rancor::Error>(p).map_err(|e| e.to_string())?;
    Ok(EventBody::GoalCheckRun(GoalCheckRun {
        goal: r.goal,
        revision: r.revision,
        check: r.check,
        contract_digest: r.contract_digest,
        workspace: r.workspace,
        command: r.command,
        started_unix_ns: r.started_unix_ns,
        ended_unix_ns: r.ended_unix_ns,
        exit_code: r.exit_code,
        timed_out: r.timed_out,
        stdout_digest: r.stdout_digest,
        stderr_digest: r.stderr_digest,
        output_tail: r.output_tail,
        fingerprint_before: r.fingerprint_before,
        fingerprint_after: r.fingerprint_after,
        no_evidence: r.no_evidence,
        passed: r.passed,
        environment_digest: r.environment_digest,
        programs: r.programs,
        ..GoalCheckRun::default()
    }))
}

/// `goal.check` v1: the same fields, without the environment binding.
fn goal_check_v1(p: &[u8]) -> Result<EventBody, String> {
    let r =
        rkyv::from_bytes::<GoalCheckRunV1, rkyv::rancor::Error>(p).map_err(|e| e.to_string())?;
    Ok(EventBody::GoalCheckRun(GoalCheckRun {
        goal: r.goal,
        revision: r.revision,
        check: r.check,
        contract_digest: r.contract_digest,
        workspace: r.workspace,
        command: r.command,
        started_unix_ns: r.started_unix_ns,
        ended_unix_ns: r.ended_unix_ns,
        exit_code: r.exit_code,
        timed_out: r.timed_out,
        stdout_digest: r.stdout_digest,
        stderr_digest: r.stderr_digest,
        output_tail: r.output_tail,
        fingerprint_before: r.fingerprint_before,
        fingerprint_after: r.fingerprint_after,
        no_evidence: r.no_evidence,
        passed: r.passed,
        ..GoalCheckRun::default()
    }))
}

/// Decodes a payload of `kind` written at `version`: with the current struct when
/// `version` is `current`, with that version's own decoder when it is an earlier one
/// this tacho keeps, else refused (never read with another version's struct).
pub fn decode_versioned<T>(
    kind: u16,
    version: u16,
    current: u16,
    payload: &[u8],
    decode_current: impl FnOnce(&[u8]) -> Result<T, String>,
    old: &[OldVersion<T>],
) -> Result<T, SchemaError> {
    let decode = if version == current {
        return decode_current(payload).map_err(|e| bad(kind, version, e));
    } else {
        old.iter()
            .find(|o| o.version == version)
            .map(|o| o.decode)
            .ok_or_else(|| unknown_version(kind, version, current))?
    };
    decode(payload).map_err(|e| bad(kind, version, e))
}

/// Validates like [`decode_versioned`] decodes.
pub fn validate_versioned<T>(
    kind: u16,
    version: u16,
    current: u16,
    payload: &[u8],
    validate_current: impl FnOnce(&[u8]) -> Result<(), String>,
    old: &[OldVersion<T>],
) -> Result<(), SchemaError> {
    let validate = if version == current {
        return validate_current(payload).map_err(|e| bad(kind, version, e));
    } else {
        old.iter()
            .find(|o| o.version == version)
            .map(|o| o.validate)
            .ok_or_else(|| unknown_version(kind, version, current))?
    };
    validate(payload).map_err(|e| bad(kind, version, e))
}

/// Whether a payload of `kind` at `version` is in the current struct's layout (what a
/// zero-copy view can read); an earlier version is read through its decoder.
pub fn is_current_version(kind: u16, version: u16) -> bool {
    current_version(kind).is_none_or(|v| v == version)
}

fn unknown_version(kind: u16, version: u16, known: u16) -> SchemaError {
    SchemaError::UnknownVersion {
        kind,
        name: kind_name(kind),
        version,
        known,
    }
}

fn bad(kind: u16, version: u16, e: impl std::fmt::Display) -> SchemaError {
    SchemaError::BadPayload {
        kind,
        name: kind_name(kind),
        version,
        reason: e.to_string(),
    }
}

/// The id of a kind name, if this tacho knows it.
pub fn kind_id(name: &str) -> Option<u16> {
    KINDS
        .iter()
        .find(|(_, n, _)| *n == name)
        .map(|(id, _, _)| *id)
}
