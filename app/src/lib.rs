//! tacho's application layer: every operation a frontend offers, over the log store
//! (`tacho-store`), the Git side (`tacho-git`), goal rules (`tacho-goals`) and the
//! pure folds (`tacho-projections`). The CLI, the MCP server and the frontends to come
//! (hooks, importers, exporters, the report) call these and nothing below them:
//! only this crate appends events, runs Git or decides policy.
//!
//! Operations are methods of [`Tacho`] (the opened data directory with its clock, id
//! source and notes sink). They return typed results (`Serialize` where a frontend
//! prints them as JSON) and one error enum per operation; [`error::Kind`] says what
//! kind of failure an error is, so frontends decide on kinds, never on message text,
//! and lets each frontend word the fields and operations an error names
//! ([`error::Words`]): no error says a CLI flag. Operations on one session take a
//! [`SessionId`], which the frontend resolved once from what its user gave.
//! [`render`] turns results into text.

mod attest;
mod attribution;
mod branch;
mod changes;
mod checkenv;
mod ci;
mod ci_rerun;
mod context;
mod demo;
mod end;
pub mod error;
pub mod file_copies;
mod findings;
mod goals;
mod hook_scripts;
mod hooks;
mod id;
pub mod import;
mod index;
mod ingest;
pub mod install;
mod links;
mod logs;
mod logtools;
mod projection;
mod proof;
mod prune;
pub mod record;
mod remote;
pub mod render;
mod replay;
mod report;
mod rollback;
pub mod runner;
mod secrets;
mod sessions;
pub mod signing;
mod snapshots;
pub mod userfile;
mod verifiers;
mod views;

pub use attest::{AttestError, AttestKey, Attestation, AttestingKey, Envelope, attestation};
pub use attribution::{
    AGENT_TRACE_VERSION, AttributedFile, AttributedRange, CommitAttribution, LineOrigin,
};
pub use branch::{BranchError, Branched};
pub use ci::{CiCheck, CiCommit, CiError, CiFailure, CiGoal, CiPolicy, CiReport, CiSession};
pub use ci_rerun::CiRerun;
pub use context::{Clock, Config, Ids, Notes, OpenError, StderrNotes, SystemClock, Tacho, UlidIds};
pub use demo::{Demo, DemoError};
pub use end::{EndError, Ended, EndedSession};
pub use error::{ErrorKind, Kind};
pub use findings::{CiFinding, CiFindings, CiRule, FindingLevel, FindingRule};
pub use goals::{
    BLOCK_KINDS, BlockRequest, Blocked, CHANGED_DIFFS_MAX, ChangedDiff, CheckCommand, CheckStatus,
    Cleared, Completion, CreateRequest, Frozen, GoalError, GoalStatus, Receipt, ReplaceRequest,
    Replaced, Resumed, Revised, Stall, read_plan,
};
pub use hooks::{GATE_BLOCKS_MAX, HookAnswer};
pub use id::SessionId;
pub use ingest::{
    BatchAck, Ingest, IngestError, IngestOptions, Ingested, LINE_BYTES_MAX, RecordError,
    SessionTotal,
};
pub use logs::{LogReport, LogsError, analyse_logs};
pub use logtools::{DumpError, NoData, dump_segment_file};

// The views of the log tools, replay, rollback, snapshots, gc, the watcher and the
// fingerprint (what their queries return; `render` turns them into text).
pub use logtools::{
    DumpRecord, DumpedSegment, FindingSeverity, KindCounts, LogFinding, LogStats, LogVerification,
    LogVerifySummary, Reindexed, StreamHead, dump_records, dump_segment, kind_label,
};
pub use replay::{
    CheckName, Exported, Reconstruction, ReplayVerifyFinding, ReplayVerifySummary, Stage,
    StepEvents, event_json,
};
pub use rollback::{
    AppliedView, ConversationFork, PlanChange, PlanConflict, PlanFile, PreparedFork, RollbackView,
};
pub use snapshots::{
    SnapshotStoreUsage, WatchStarted, WatchState, WatchStopped, Watcher, WatcherStatus,
};
pub use verifiers::FingerprintView;

pub use prune::{Kept, PruneError, PruneOptions, PruneOutcome};
pub use replay::{
    ExpectCall, ExpectEnd, ExpectHeader, ExpectStep, Expectations, Expected, ProjectionCheck,
    ReplayError, Verification, verify_package,
};
pub use report::{
    CALLS_SHOWN, CallIo, ChangedFile, ChildSession, FileChangeKind, GateDecision, Integrity,
    Report, RolledBackBy, SHOWN_BYTES_MAX,
};
pub use rollback::{Done, Elsewhere, Member, Prepared, RollbackError};
pub use secrets::{SecretAllowance, SecretFinding, SecretScan, SecretsError};
pub use sessions::{ListError, ListFilter, SessionDetail, SessionRow, project_of};
pub use snapshots::{
    GcOutcome, SnapshotOpError, SnapshotOutcome, SnapshotRequest, WATCH_AUTO_FILES,
    watch_auto_files,
};
/// One segment of a stream (a file, or a range of a pack), as `log dump` reads it.
pub use tacho_store::SegmentInfo;
pub use verifiers::{ReviewOptions, WorkspaceOpError, fingerprint, verify_commits, verify_reviews};
pub use views::{AuditRead, SessionGraph, Trace, TraceRow};

/// The agents tacho records (from `tacho-agents`).
pub mod agents {
    pub use tacho_agents::Agent;
    pub use tacho_agents::settings::HookWatch;
}

/// Types of the layers below that appear in results, re-exported so that frontends
/// depend on this crate alone for them.
pub mod types {
    pub use tacho_git::fingerprint::{Entry as FingerprintEntry, Fingerprint, NoEvidence};
    pub use tacho_git::rollback::{Action, Applied, Conflict, Plan, PlanItem};
    pub use tacho_git::snapshot::watch::WatchStatus;
    pub use tacho_git::snapshot::{
        ChangeKind, FileDiff, GcReport, Snapshot, SnapshotError, StoreUsage,
    };
    pub use tacho_goals::commits::{CommitReport, Merges, Violation};
    pub use tacho_goals::review::ReviewReport;
    pub use tacho_log_format::{ChainValue, FrameHeader, FrameType, HeaderError};
    pub use tacho_projections::{
        Comparison, ExecutionGraph, GoalEventNode, GoalMark, Readiness, ReplayRule, RiskAssessment,
        RiskLevel, RollbackPoints, SessionStatus, SessionSummary, StepPair,
    };

    /// The audit trace's ids and records (what exporters write; the fold that makes
    /// them is the application's: [`crate::Tacho::audit_events`], [`crate::Tacho::audit_spans`]).
    pub mod audit {
        pub use tacho_projections::audit::{
            AUDIT_SCHEMA, Placement, Span, SpanId, SpanKind, TraceId, id_hex, root_span_id,
            trace_id,
        };
    }
    pub use tacho_store::dump::{DumpFrame, SegmentDump};
    pub use tacho_store::{
        Durability, Finding, PRUNE_LOG, PrunedSession, ReadEnd, Severity, StoreError, StoreReport,
        StoredEvent, StreamReport, hex,
    };
}
pub use remote::{
    DEFAULT_REMOTE, FetchOutcome, FetchState, FetchedSession, Origin, PushError, PushOptions,
    PushOutcome, PushState, PushedSession, RemoteRecord,
};
pub use signing::SignatureStatus;
