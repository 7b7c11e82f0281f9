//! Projections: pure, deterministic folds from events to answers.
//!
//! Nothing here does I/O, reads a clock or iterates a hash map: the same events give
//! the same projection, byte for byte, on any machine. The engine feeds events in
//! order; a projection can be built in one pass or brought up to date from where it
//! left off, with the same result.

pub mod audit;
mod compare;
mod goals;
mod graph;
mod replay;
mod risk;
mod rollback;
pub mod shell;
mod summary;

pub use compare::{Comparison, Side, StepPair, align, compare};
pub use goals::{
    CheckState, Current, GUARD, GUARD_FAILED, GoalState, Goals, RED_GREEN, UNABLE_TO_FAIL,
    UNPROVEN, check_states, environment_mismatch, proof_holds, proof_problem, proof_words,
    weakening,
};
pub use graph::{
    BranchNode, ErrorNode, ExecutionGraph, FileChange, FoldState, GRAPH_SCHEMA, GoalActivity,
    GoalEventNode, GoalMark, GoalTally, ObservedChange, RouteNode, SnapshotNode, StepNode,
    TodoList, TodoNode, Tokens, ToolNode, UnclaimedChange, UnclaimedFile, VerificationNode,
    route_text,
};
pub use replay::{Interrupted, ReplayCheck, ReplayFinding, ReplayReport, ReplayRule};
pub use risk::{
    CALL_UNCONFIRMED, Confidence, FACTORS, FactorRule, HOOK_LOCK_HELD, RISK_DISCLAIMER, Readiness,
    RiskAssessment, RiskFactor, RiskLevel, TRANSCRIPT_ELSEWHERE, VerificationEvidence,
    VerificationSource, WATCHER_IMPOSTOR, WATCHER_MISSED, Weight, asked_by, assess, factor_rule,
    is_agent_hook_file, is_api_surface, is_security_sensitive, risk_score, thousands,
    unconfirmed_call_id, unconfirmed_call_message, unconfirmed_calls, verification_kind,
};
pub use rollback::{RollbackPoint, RollbackPoints, UnclaimedPoint};
pub use summary::{SessionStatus, SessionSummary};
