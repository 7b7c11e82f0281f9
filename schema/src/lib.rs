//! The event schema, version 1.
//!
//! Every event kind is a plain struct with two encodings: JSON through serde (what
//! `tacho record` reads and `--json` prints) and rkyv (the payload of an event frame in
//! the log). The kind's numeric id and schema version travel in the frame header, so a
//! payload never needs to say what it is, adding a kind never changes existing payloads,
//! and a reader meets kinds from a newer tacho as [`EventBody::Unknown`] instead of
//! failing. SPEC.md §"Event schema" documents every field.
//!
//! This crate knows nothing about frames, segments or files.

mod goal;
mod json;
mod kinds;
mod view;

pub use goal::{Assurance, Check, Setup, Source, kind_makes_guards, path_within, test_like};
pub use json::{JsonError, ParsedLine, parse_json_line, parse_rfc3339, parse_ts, time_to_rfc3339};
pub use kinds::*;
pub use view::{EventView, Paths};

/// Longest accepted session id, in bytes.
pub const SESSION_ID_BYTES_MAX: usize = 128;

/// The `error` code tacho writes (source `tacho`) at the start of a continuation
/// (`<id>.N`) when the payload that started it belongs to a tool call that was still
/// running when the session before it ended: that session was ended from inside the
/// call — `tacho session end`, or a `SessionEnd` payload piped to `tacho hook` from the
/// agent's shell — since a call that goes on was not cut by the agent's own exit.
pub const SESSION_ENDED_MID_CALL: &str = "session_ended_mid_call";

/// One recorded event: which session, when, and what.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub session: String,
    /// Nanoseconds since the Unix epoch, UTC.
    pub time_unix_ns: i64,
    pub body: EventBody,
}

/// Why an event payload could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("payload of kind {kind} ({name}) version {version} does not decode: {reason}")]
    BadPayload {
        kind: u16,
        name: &'static str,
        version: u16,
        reason: String,
    },
    #[error("kind {kind} ({name}) has no schema version {version} (this tacho knows 1..={known})")]
    UnknownVersion {
        kind: u16,
        name: &'static str,
        version: u16,
        known: u16,
    },
    #[error("event could not be encoded: {0}")]
    Encode(String),
}

/// Checks that a session id is usable: 1 to 128 bytes of ASCII letters, digits, `.`,
/// `_` and `-`, not starting with `.` or `-`. Ids are printed, typed and abbreviated by
/// users, so they stay printable and shell-friendly.
pub fn validate_session_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("session id is empty".into());
    }
    if id.len() > SESSION_ID_BYTES_MAX {
        return Err(format!(
            "session id is {} bytes long; the limit is {SESSION_ID_BYTES_MAX}",
            id.len()
        ));
    }
    if id.starts_with('.') || id.starts_with('-') {
        return Err(format!("session id {id:?} starts with `{}`", &id[..1]));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "session id {id:?} contains {c:?}; use letters, digits, `.`, `_` and `-`"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids() {
        assert!(validate_session_id("ses_01jf8xk").is_ok());
        assert!(validate_session_id("3f2a-UUID.like_id").is_ok());
        assert!(validate_session_id("").is_err());
        assert!(validate_session_id("../x").is_err());
        assert!(validate_session_id("a/b").is_err());
        assert!(validate_session_id("-rf").is_err());
        assert!(validate_session_id(&"a".repeat(129)).is_err());
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// The rkyv bytes of one payload, pinned. rkyv's layout depends on cargo features
    /// (endianness, alignment, pointer width) that any crate in the graph can switch;
    /// the workspace names them explicitly, and this test catches any drift.
    #[test]
    fn tool_call_payload_bytes_are_pinned() {
        let body = EventBody::ToolCall(ToolCall {
            call_id: "c1".into(),
            tool: "read".into(),
            target: Some("src/api.ts".into()),
            input: None,
            agent: None,
        });
        let (kind, version, bytes) = body.encode().unwrap();
        assert_eq!((kind, version), (8, 1));
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "7372632f6170692e747300006331ffffffffffff72656164ffffffff010000008a000000e0ffffff000000000000000000000000000000000000000000000000"
        );
        assert_eq!(EventBody::decode(kind, version, &bytes).unwrap(), body);
    }

    #[test]
    fn archived_primitives_have_the_pinned_layout() {
        assert_eq!(
            std::mem::size_of::<rkyv::Archived<usize>>(),
            4,
            "pointer_width_32"
        );
        assert_eq!(std::mem::align_of::<rkyv::Archived<u64>>(), 8, "aligned");
        assert_eq!(
            rkyv::to_bytes::<rkyv::rancor::Error>(&0x0102_0304u32)
                .unwrap()
                .as_slice(),
            [4, 3, 2, 1],
            "little_endian"
        );
    }

    /// SPEC §5.3 gives every kind's archived size, alignment and field offsets: this
    /// is that table, checked against the real archived types (the table in SPEC.md is
    /// generated from the same struct definitions; the independent reader decodes real
    /// payloads with it).
    #[test]
    fn archived_layouts_are_the_ones_spec_5_3_gives() {
        use rkyv::Archived;
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(size_of::<Archived<SessionStart>>(), 84, "session.start");
        assert_eq!(align_of::<Archived<SessionStart>>(), 4, "session.start");
        assert_eq!(
            offset_of!(ArchivedSessionStart, agent),
            0,
            "session.start.agent"
        );
        assert_eq!(
            offset_of!(ArchivedSessionStart, model),
            12,
            "session.start.model"
        );
        assert_eq!(
            offset_of!(ArchivedSessionStart, workspace),
            24,
            "session.start.workspace"
        );
        assert_eq!(
            offset_of!(ArchivedSessionStart, project),
            36,
            "session.start.project"
        );
        assert_eq!(
            offset_of!(ArchivedSessionStart, parent),
            48,
            "session.start.parent"
        );
        assert_eq!(
            offset_of!(ArchivedSessionStart, title),
            60,
            "session.start.title"
        );
        assert_eq!(
            offset_of!(ArchivedSessionStart, source),
            72,
            "session.start.source"
        );
        assert_eq!(size_of::<Archived<SessionEnd>>(), 16, "session.end");
        assert_eq!(align_of::<Archived<SessionEnd>>(), 4, "session.end");
        assert_eq!(
            offset_of!(ArchivedSessionEnd, reason),
            0,
            "session.end.reason"
        );
        assert_eq!(
            offset_of!(ArchivedSessionEnd, message),
            4,
            "session.end.message"
        );
        assert_eq!(size_of::<Archived<AgentRoute>>(), 32, "agent.route");
        assert_eq!(align_of::<Archived<AgentRoute>>(), 4, "agent.route");
        assert_eq!(offset_of!(ArchivedAgentRoute, from), 0, "agent.route.from");
        assert_eq!(offset_of!(ArchivedAgentRoute, to), 12, "agent.route.to");
        assert_eq!(
            offset_of!(ArchivedAgentRoute, reason),
            20,
            "agent.route.reason"
        );
        assert_eq!(size_of::<Archived<LlmRequest>>(), 52, "llm.request");
        assert_eq!(align_of::<Archived<LlmRequest>>(), 4, "llm.request");
        assert_eq!(
            offset_of!(ArchivedLlmRequest, request_id),
            0,
            "llm.request.request_id"
        );
        assert_eq!(
            offset_of!(ArchivedLlmRequest, model),
            8,
            "llm.request.model"
        );
        assert_eq!(
            offset_of!(ArchivedLlmRequest, agent),
            16,
            "llm.request.agent"
        );
        assert_eq!(
            offset_of!(ArchivedLlmRequest, provider),
            28,
            "llm.request.provider"
        );
        assert_eq!(
            offset_of!(ArchivedLlmRequest, summary),
            40,
            "llm.request.summary"
        );
        assert_eq!(size_of::<Archived<LlmResponse>>(), 104, "llm.response");
        assert_eq!(align_of::<Archived<LlmResponse>>(), 8, "llm.response");
        assert_eq!(
            offset_of!(ArchivedLlmResponse, request_id),
            0,
            "llm.response.request_id"
        );
        assert_eq!(
            offset_of!(ArchivedLlmResponse, response_id),
            8,
            "llm.response.response_id"
        );
        assert_eq!(
            offset_of!(ArchivedLlmResponse, model),
            20,
            "llm.response.model"
        );
        assert_eq!(
            offset_of!(ArchivedLlmResponse, tokens_in),
            32,
            "llm.response.tokens_in"
        );
        assert_eq!(
            offset_of!(ArchivedLlmResponse, tokens_out),
            40,
            "llm.response.tokens_out"
        );
        assert_eq!(
            offset_of!(ArchivedLlmResponse, cache_read),
            48,
            "llm.response.cache_read"
        );
        assert_eq!(
            offset_of!(ArchivedLlmResponse, cache_write),
            56,
            "llm.response.cache_write"
        );
        assert_eq!(
            offset_of!(ArchivedLlmResponse, latency_ms),
            64,
            "llm.response.latency_ms"
        );
        assert_eq!(
            offset_of!(ArchivedLlmResponse, stop_reason),
            80,
            "llm.response.stop_reason"
        );
        assert_eq!(
            offset_of!(ArchivedLlmResponse, error),
            92,
            "llm.response.error"
        );
        assert_eq!(size_of::<Archived<StepStart>>(), 32, "step.start");
        assert_eq!(align_of::<Archived<StepStart>>(), 8, "step.start");
        assert_eq!(offset_of!(ArchivedStepStart, step), 0, "step.start.step");
        assert_eq!(offset_of!(ArchivedStepStart, agent), 8, "step.start.agent");
        assert_eq!(offset_of!(ArchivedStepStart, title), 20, "step.start.title");
        assert_eq!(size_of::<Archived<StepFinish>>(), 24, "step.finish");
        assert_eq!(align_of::<Archived<StepFinish>>(), 8, "step.finish");
        assert_eq!(offset_of!(ArchivedStepFinish, step), 0, "step.finish.step");
        assert_eq!(
            offset_of!(ArchivedStepFinish, reason),
            8,
            "step.finish.reason"
        );
        assert_eq!(size_of::<Archived<ToolCall>>(), 52, "tool.call");
        assert_eq!(align_of::<Archived<ToolCall>>(), 4, "tool.call");
        assert_eq!(
            offset_of!(ArchivedToolCall, call_id),
            0,
            "tool.call.call_id"
        );
        assert_eq!(offset_of!(ArchivedToolCall, tool), 8, "tool.call.tool");
        assert_eq!(offset_of!(ArchivedToolCall, target), 16, "tool.call.target");
        assert_eq!(offset_of!(ArchivedToolCall, input), 28, "tool.call.input");
        assert_eq!(offset_of!(ArchivedToolCall, agent), 40, "tool.call.agent");
        assert_eq!(size_of::<Archived<ToolResult>>(), 72, "tool.result");
        assert_eq!(align_of::<Archived<ToolResult>>(), 8, "tool.result");
        assert_eq!(
            offset_of!(ArchivedToolResult, call_id),
            0,
            "tool.result.call_id"
        );
        assert_eq!(
            offset_of!(ArchivedToolResult, status),
            8,
            "tool.result.status"
        );
        assert_eq!(
            offset_of!(ArchivedToolResult, duration_ms),
            16,
            "tool.result.duration_ms"
        );
        assert_eq!(
            offset_of!(ArchivedToolResult, error),
            32,
            "tool.result.error"
        );
        assert_eq!(
            offset_of!(ArchivedToolResult, output),
            44,
            "tool.result.output"
        );
        assert_eq!(
            offset_of!(ArchivedToolResult, exit_code),
            56,
            "tool.result.exit_code"
        );
        assert_eq!(size_of::<Archived<PermissionAsk>>(), 52, "permission.ask");
        assert_eq!(align_of::<Archived<PermissionAsk>>(), 4, "permission.ask");
        assert_eq!(
            offset_of!(ArchivedPermissionAsk, request_id),
            0,
            "permission.ask.request_id"
        );
        assert_eq!(
            offset_of!(ArchivedPermissionAsk, permission),
            8,
            "permission.ask.permission"
        );
        assert_eq!(
            offset_of!(ArchivedPermissionAsk, tool),
            16,
            "permission.ask.tool"
        );
        assert_eq!(
            offset_of!(ArchivedPermissionAsk, call_id),
            28,
            "permission.ask.call_id"
        );
        assert_eq!(
            offset_of!(ArchivedPermissionAsk, target),
            40,
            "permission.ask.target"
        );
        assert_eq!(
            size_of::<Archived<PermissionReply>>(),
            24,
            "permission.reply"
        );
        assert_eq!(
            align_of::<Archived<PermissionReply>>(),
            4,
            "permission.reply"
        );
        assert_eq!(
            offset_of!(ArchivedPermissionReply, request_id),
            0,
            "permission.reply.request_id"
        );
        assert_eq!(
            offset_of!(ArchivedPermissionReply, decision),
            8,
            "permission.reply.decision"
        );
        assert_eq!(
            offset_of!(ArchivedPermissionReply, by),
            12,
            "permission.reply.by"
        );
        assert_eq!(size_of::<Archived<ErrorEvent>>(), 36, "error");
        assert_eq!(align_of::<Archived<ErrorEvent>>(), 4, "error");
        assert_eq!(offset_of!(ArchivedErrorEvent, message), 0, "error.message");
        assert_eq!(offset_of!(ArchivedErrorEvent, code), 8, "error.code");
        assert_eq!(offset_of!(ArchivedErrorEvent, source), 20, "error.source");
        assert_eq!(offset_of!(ArchivedErrorEvent, fatal), 32, "error.fatal");
        assert_eq!(
            size_of::<Archived<VerificationRun>>(),
            72,
            "verification.run"
        );
        assert_eq!(
            align_of::<Archived<VerificationRun>>(),
            8,
            "verification.run"
        );
        assert_eq!(
            offset_of!(ArchivedVerificationRun, command),
            0,
            "verification.run.command"
        );
        assert_eq!(
            offset_of!(ArchivedVerificationRun, status),
            8,
            "verification.run.status"
        );
        assert_eq!(
            offset_of!(ArchivedVerificationRun, exit_code),
            16,
            "verification.run.exit_code"
        );
        assert_eq!(
            offset_of!(ArchivedVerificationRun, duration_ms),
            32,
            "verification.run.duration_ms"
        );
        assert_eq!(
            offset_of!(ArchivedVerificationRun, r#kind),
            48,
            "verification.run.kind"
        );
        assert_eq!(
            offset_of!(ArchivedVerificationRun, output),
            60,
            "verification.run.output"
        );
        assert_eq!(size_of::<Archived<FileEdit>>(), 80, "file.edit");
        assert_eq!(align_of::<Archived<FileEdit>>(), 8, "file.edit");
        assert_eq!(offset_of!(ArchivedFileEdit, path), 0, "file.edit.path");
        assert_eq!(offset_of!(ArchivedFileEdit, op), 8, "file.edit.op");
        assert_eq!(offset_of!(ArchivedFileEdit, from), 12, "file.edit.from");
        assert_eq!(offset_of!(ArchivedFileEdit, tool), 24, "file.edit.tool");
        assert_eq!(
            offset_of!(ArchivedFileEdit, call_id),
            36,
            "file.edit.call_id"
        );
        assert_eq!(
            offset_of!(ArchivedFileEdit, lines_added),
            48,
            "file.edit.lines_added"
        );
        assert_eq!(
            offset_of!(ArchivedFileEdit, lines_removed),
            64,
            "file.edit.lines_removed"
        );
        assert_eq!(size_of::<Archived<SnapshotTaken>>(), 80, "snapshot.taken");
        assert_eq!(align_of::<Archived<SnapshotTaken>>(), 8, "snapshot.taken");
        assert_eq!(
            offset_of!(ArchivedSnapshotTaken, snapshot),
            0,
            "snapshot.taken.snapshot"
        );
        assert_eq!(
            offset_of!(ArchivedSnapshotTaken, workspace),
            8,
            "snapshot.taken.workspace"
        );
        assert_eq!(
            offset_of!(ArchivedSnapshotTaken, reason),
            16,
            "snapshot.taken.reason"
        );
        assert_eq!(
            offset_of!(ArchivedSnapshotTaken, before_step),
            24,
            "snapshot.taken.before_step"
        );
        assert_eq!(
            offset_of!(ArchivedSnapshotTaken, files),
            40,
            "snapshot.taken.files"
        );
        assert_eq!(
            offset_of!(ArchivedSnapshotTaken, bytes),
            48,
            "snapshot.taken.bytes"
        );
        assert_eq!(
            offset_of!(ArchivedSnapshotTaken, targeted),
            56,
            "snapshot.taken.targeted"
        );
        assert_eq!(
            offset_of!(ArchivedSnapshotTaken, excluded),
            60,
            "snapshot.taken.excluded"
        );
        assert_eq!(
            offset_of!(ArchivedSnapshotTaken, excluded_total),
            72,
            "snapshot.taken.excluded_total"
        );
        assert_eq!(
            size_of::<Archived<RollbackApplied>>(),
            96,
            "rollback.applied"
        );
        assert_eq!(
            align_of::<Archived<RollbackApplied>>(),
            8,
            "rollback.applied"
        );
        assert_eq!(
            offset_of!(ArchivedRollbackApplied, rolled_back),
            0,
            "rollback.applied.rolled_back"
        );
        assert_eq!(
            offset_of!(ArchivedRollbackApplied, to_snapshot),
            8,
            "rollback.applied.to_snapshot"
        );
        assert_eq!(
            offset_of!(ArchivedRollbackApplied, before_step),
            16,
            "rollback.applied.before_step"
        );
        assert_eq!(
            offset_of!(ArchivedRollbackApplied, pre_snapshot),
            32,
            "rollback.applied.pre_snapshot"
        );
        assert_eq!(
            offset_of!(ArchivedRollbackApplied, sessions),
            40,
            "rollback.applied.sessions"
        );
        assert_eq!(
            offset_of!(ArchivedRollbackApplied, restored),
            48,
            "rollback.applied.restored"
        );
        assert_eq!(
            offset_of!(ArchivedRollbackApplied, modes),
            56,
            "rollback.applied.modes"
        );
        assert_eq!(
            offset_of!(ArchivedRollbackApplied, deleted),
            64,
            "rollback.applied.deleted"
        );
        assert_eq!(
            offset_of!(ArchivedRollbackApplied, recreated),
            72,
            "rollback.applied.recreated"
        );
        assert_eq!(
            offset_of!(ArchivedRollbackApplied, skipped),
            80,
            "rollback.applied.skipped"
        );
        assert_eq!(
            offset_of!(ArchivedRollbackApplied, forced),
            88,
            "rollback.applied.forced"
        );
        assert_eq!(size_of::<Archived<SessionBranch>>(), 40, "session.branch");
        assert_eq!(align_of::<Archived<SessionBranch>>(), 8, "session.branch");
        assert_eq!(
            offset_of!(ArchivedSessionBranch, parent),
            0,
            "session.branch.parent"
        );
        assert_eq!(
            offset_of!(ArchivedSessionBranch, through_seq),
            8,
            "session.branch.through_seq"
        );
        assert_eq!(
            offset_of!(ArchivedSessionBranch, point),
            16,
            "session.branch.point"
        );
        assert_eq!(
            offset_of!(ArchivedSessionBranch, copied),
            32,
            "session.branch.copied"
        );
        assert_eq!(size_of::<Archived<GoalCreated>>(), 168, "goal.created");
        assert_eq!(align_of::<Archived<GoalCreated>>(), 4, "goal.created");
        assert_eq!(
            offset_of!(ArchivedGoalCreated, goal),
            0,
            "goal.created.goal"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, revision),
            8,
            "goal.created.revision"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, title),
            12,
            "goal.created.title"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, r#kind),
            20,
            "goal.created.kind"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, objective),
            28,
            "goal.created.objective"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, assured),
            40,
            "goal.created.assured"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, contract_digest),
            44,
            "goal.created.contract_digest"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, baseline),
            52,
            "goal.created.baseline"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, workspace),
            64,
            "goal.created.workspace"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, plan),
            72,
            "goal.created.plan"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, assurance),
            80,
            "goal.created.assurance"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, revises),
            92,
            "goal.created.revises"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, previous_digest),
            104,
            "goal.created.previous_digest"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, correction),
            116,
            "goal.created.correction"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, environment),
            128,
            "goal.created.environment"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, environment_digest),
            136,
            "goal.created.environment_digest"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, programs),
            148,
            "goal.created.programs"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCreated, start_snapshot),
            156,
            "goal.created.start_snapshot"
        );
        // Version 2, read by its own decoder.
        assert_eq!(
            size_of::<Archived<kinds::GoalCreatedV2>>(),
            156,
            "goal.created v2"
        );
        // Version 1, read by its own decoder.
        assert_eq!(
            size_of::<Archived<kinds::GoalCreatedV1>>(),
            128,
            "goal.created v1"
        );
        assert_eq!(size_of::<Archived<GoalCheckRun>>(), 296, "goal.check");
        assert_eq!(align_of::<Archived<GoalCheckRun>>(), 8, "goal.check");
        assert_eq!(offset_of!(ArchivedGoalCheckRun, goal), 0, "goal.check.goal");
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, revision),
            8,
            "goal.check.revision"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, check),
            12,
            "goal.check.check"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, contract_digest),
            20,
            "goal.check.contract_digest"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, workspace),
            28,
            "goal.check.workspace"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, command),
            36,
            "goal.check.command"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, started_unix_ns),
            48,
            "goal.check.started_unix_ns"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, ended_unix_ns),
            56,
            "goal.check.ended_unix_ns"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, exit_code),
            64,
            "goal.check.exit_code"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, timed_out),
            80,
            "goal.check.timed_out"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, stdout_digest),
            84,
            "goal.check.stdout_digest"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, stderr_digest),
            92,
            "goal.check.stderr_digest"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, output_tail),
            100,
            "goal.check.output_tail"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, fingerprint_before),
            112,
            "goal.check.fingerprint_before"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, fingerprint_after),
            124,
            "goal.check.fingerprint_after"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, no_evidence),
            136,
            "goal.check.no_evidence"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, passed),
            148,
            "goal.check.passed"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, environment_digest),
            152,
            "goal.check.environment_digest"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, programs),
            164,
            "goal.check.programs"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, clean_room),
            172,
            "goal.check.clean_room"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, proof),
            176,
            "goal.check.proof"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, proof_note),
            188,
            "goal.check.proof_note"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, red_scope),
            200,
            "goal.check.red_scope"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, red_exit_code),
            216,
            "goal.check.red_exit_code"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, red_timed_out),
            232,
            "goal.check.red_timed_out"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, red_inputs),
            236,
            "goal.check.red_inputs"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, red_reused),
            248,
            "goal.check.red_reused"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, changed_since_freeze),
            264,
            "goal.check.changed_since_freeze"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, setup_inputs),
            272,
            "goal.check.setup_inputs"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckRun, setup_digest),
            284,
            "goal.check.setup_digest"
        );
        assert_eq!(
            size_of::<Archived<kinds::GoalCheckRunV2>>(),
            176,
            "goal.check v2"
        );
        assert_eq!(
            size_of::<Archived<kinds::GoalCheckRunV1>>(),
            152,
            "goal.check v1"
        );
        assert_eq!(size_of::<Archived<GoalUpdate>>(), 72, "goal.update");
        assert_eq!(align_of::<Archived<GoalUpdate>>(), 4, "goal.update");
        assert_eq!(offset_of!(ArchivedGoalUpdate, goal), 0, "goal.update.goal");
        assert_eq!(
            offset_of!(ArchivedGoalUpdate, revision),
            8,
            "goal.update.revision"
        );
        assert_eq!(
            offset_of!(ArchivedGoalUpdate, action),
            12,
            "goal.update.action"
        );
        assert_eq!(
            offset_of!(ArchivedGoalUpdate, accepted),
            13,
            "goal.update.accepted"
        );
        assert_eq!(
            offset_of!(ArchivedGoalUpdate, reason),
            16,
            "goal.update.reason"
        );
        assert_eq!(
            offset_of!(ArchivedGoalUpdate, details),
            28,
            "goal.update.details"
        );
        assert_eq!(
            offset_of!(ArchivedGoalUpdate, block_kind),
            36,
            "goal.update.block_kind"
        );
        assert_eq!(
            offset_of!(ArchivedGoalUpdate, required_change),
            48,
            "goal.update.required_change"
        );
        assert_eq!(
            offset_of!(ArchivedGoalUpdate, evidence),
            60,
            "goal.update.evidence"
        );
        assert_eq!(
            offset_of!(ArchivedGoalUpdate, no_independent_work),
            68,
            "goal.update.no_independent_work"
        );
        assert_eq!(
            size_of::<Archived<GoalCheckStart>>(),
            20,
            "goal.check_start"
        );
        assert_eq!(
            align_of::<Archived<GoalCheckStart>>(),
            4,
            "goal.check_start"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckStart, goal),
            0,
            "goal.check_start.goal"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckStart, revision),
            8,
            "goal.check_start.revision"
        );
        assert_eq!(
            offset_of!(ArchivedGoalCheckStart, check),
            12,
            "goal.check_start.check"
        );
        assert_eq!(size_of::<Archived<AgentNotice>>(), 32, "agent.notice");
        assert_eq!(align_of::<Archived<AgentNotice>>(), 4, "agent.notice");
        assert_eq!(
            offset_of!(ArchivedAgentNotice, notice),
            0,
            "agent.notice.notice"
        );
        assert_eq!(
            offset_of!(ArchivedAgentNotice, message),
            8,
            "agent.notice.message"
        );
        assert_eq!(
            offset_of!(ArchivedAgentNotice, agent),
            20,
            "agent.notice.agent"
        );
        assert_eq!(size_of::<Archived<SecretAllowed>>(), 32, "secret.allowed");
        assert_eq!(align_of::<Archived<SecretAllowed>>(), 8, "secret.allowed");
        assert_eq!(offset_of!(ArchivedSecretAllowed, seq), 0);
        assert_eq!(offset_of!(ArchivedSecretAllowed, kinds), 8);
        assert_eq!(offset_of!(ArchivedSecretAllowed, reason), 16);
        assert_eq!(size_of::<Archived<GitCommits>>(), 48, "git.commits");
        assert_eq!(align_of::<Archived<GitCommits>>(), 8, "git.commits");
        assert_eq!(offset_of!(ArchivedGitCommits, workspace), 0);
        assert_eq!(offset_of!(ArchivedGitCommits, head), 8);
        assert_eq!(offset_of!(ArchivedGitCommits, previous), 16);
        assert_eq!(offset_of!(ArchivedGitCommits, commits), 28);
        assert_eq!(offset_of!(ArchivedGitCommits, commits_total), 40);
        assert_eq!(size_of::<Archived<ObservedCommit>>(), 16);
        assert_eq!(offset_of!(ArchivedObservedCommit, commit), 0);
        assert_eq!(offset_of!(ArchivedObservedCommit, tree), 8);
        assert_eq!(size_of::<Archived<TodoUpdate>>(), 32, "todo.update");
        assert_eq!(align_of::<Archived<TodoUpdate>>(), 4, "todo.update");
        assert_eq!(offset_of!(ArchivedTodoUpdate, todos), 0);
        assert_eq!(offset_of!(ArchivedTodoUpdate, call_id), 8);
        assert_eq!(offset_of!(ArchivedTodoUpdate, agent), 20);
        assert_eq!(size_of::<Archived<TodoItem>>(), 24);
        assert_eq!(align_of::<Archived<TodoItem>>(), 4);
        assert_eq!(offset_of!(ArchivedTodoItem, content), 0);
        assert_eq!(offset_of!(ArchivedTodoItem, status), 8);
        assert_eq!(offset_of!(ArchivedTodoItem, id), 12);
        assert_eq!(size_of::<Archived<ExcludedPath>>(), 16);
        assert_eq!(offset_of!(ArchivedExcludedPath, path), 0);
        assert_eq!(offset_of!(ArchivedExcludedPath, reason), 8);
    }
}
