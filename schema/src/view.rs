//! Borrowed views of events: what folds read, without owning a copy.
//!
//! A view is built from an owned [`EventBody`] or straight from a validated rkyv
//! payload in a segment, so that projections can be built from the log without
//! allocating a string for every field of every event (most of them, like tool
//! output, are never looked at).

use crate::kinds::*;
use crate::{EventBody, SchemaError};

/// The fields of an event that folds read, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventView<'a> {
    SessionStart {
        agent: Option<&'a str>,
        workspace: Option<&'a str>,
        project: Option<&'a str>,
        parent: Option<&'a str>,
        title: Option<&'a str>,
        source: Option<&'a str>,
    },
    SessionEnd {
        reason: EndReason,
    },
    AgentRoute {
        from: Option<&'a str>,
        to: &'a str,
        reason: Option<&'a str>,
    },
    LlmRequest {
        agent: Option<&'a str>,
    },
    LlmResponse {
        response_id: Option<&'a str>,
        tokens_in: u64,
        tokens_out: u64,
        cache_read: u64,
        cache_write: u64,
    },
    StepStart {
        step: u64,
        agent: Option<&'a str>,
        title: Option<&'a str>,
    },
    StepFinish {
        step: u64,
    },
    ToolCall {
        call_id: &'a str,
        tool: &'a str,
        target: Option<&'a str>,
        agent: Option<&'a str>,
    },
    ToolResult {
        call_id: &'a str,
        status: ToolStatus,
        duration_ms: Option<u64>,
        error: Option<&'a str>,
    },
    PermissionAsk,
    PermissionReply {
        decision: Decision,
    },
    Error {
        message: &'a str,
        code: Option<&'a str>,
        fatal: bool,
    },
    VerificationRun {
        command: &'a str,
        status: VerificationStatus,
        duration_ms: Option<u64>,
    },
    AgentNotice {
        notice: &'a str,
    },
    /// `secret.allowed`: an event let through the secret scan.
    SecretAllowed {
        seq: u64,
    },
    /// `git.commits`: HEAD as tacho read it, and how many commits were new.
    GitCommits {
        head: &'a str,
        commits_total: u64,
    },
    FileEdit {
        path: &'a str,
        op: EditOp,
        from: Option<&'a str>,
        lines_added: Option<u64>,
        lines_removed: Option<u64>,
    },
    SnapshotTaken {
        snapshot: &'a str,
        workspace: &'a str,
        reason: SnapshotReason,
        before_step: Option<u64>,
        files: u64,
        targeted: bool,
    },
    RollbackApplied {
        rolled_back: &'a str,
        to_snapshot: &'a str,
    },
    SessionBranch {
        parent: &'a str,
        through_seq: u64,
    },
    /// `goal.created`.
    Goal {
        goal: &'a str,
        /// The goal a `goal.created` revises (its replacement is the goal now).
        revises: Option<&'a str>,
        /// Its assurance contract (JSON text), and the correction a revision gives.
        assurance: Option<&'a str>,
        correction: Option<&'a str>,
    },
    /// `goal.check_start`: a frozen check began to run.
    GoalCheckStart {
        goal: &'a str,
    },
    /// `goal.check`: a receipt.
    GoalCheck {
        goal: &'a str,
        check: &'a str,
        /// The command the check ran.
        command: &'a str,
        passed: bool,
        /// Files outside the change edited since the goal was frozen (`M`/`A`/`D PATH`).
        changed_since_freeze: Paths<'a>,
    },
    /// `goal.update`: a completion attempt, a block or a pause.
    GoalUpdate {
        goal: &'a str,
        action: GoalAction,
        accepted: bool,
    },
    /// `todo.update`: the agent's todo list, whole.
    TodoUpdate {
        todos: Todos<'a>,
    },
    /// A kind this tacho does not know.
    Unknown,
}

impl EventBody {
    /// A borrowed view of this body.
    pub fn view(&self) -> EventView<'_> {
        match self {
            EventBody::SessionStart(s) => EventView::SessionStart {
                agent: s.agent.as_deref(),
                workspace: s.workspace.as_deref(),
                project: s.project.as_deref(),
                parent: s.parent.as_deref(),
                title: s.title.as_deref(),
                source: s.source.as_deref(),
            },
            EventBody::SessionEnd(e) => EventView::SessionEnd { reason: e.reason },
            EventBody::AgentRoute(r) => EventView::AgentRoute {
                from: r.from.as_deref(),
                to: &r.to,
                reason: r.reason.as_deref(),
            },
            EventBody::LlmRequest(r) => EventView::LlmRequest {
                agent: r.agent.as_deref(),
            },
            EventBody::LlmResponse(r) => EventView::LlmResponse {
                response_id: r.response_id.as_deref(),
                tokens_in: r.tokens_in,
                tokens_out: r.tokens_out,
                cache_read: r.cache_read,
                cache_write: r.cache_write,
            },
            EventBody::StepStart(s) => EventView::StepStart {
                step: s.step,
                agent: s.agent.as_deref(),
                title: s.title.as_deref(),
            },
            EventBody::StepFinish(s) => EventView::StepFinish { step: s.step },
            EventBody::ToolCall(c) => EventView::ToolCall {
                call_id: &c.call_id,
                tool: &c.tool,
                target: c.target.as_deref(),
                agent: c.agent.as_deref(),
            },
            EventBody::ToolResult(r) => EventView::ToolResult {
                call_id: &r.call_id,
                status: r.status,
                duration_ms: r.duration_ms,
                error: r.error.as_deref(),
            },
            EventBody::PermissionAsk(_) => EventView::PermissionAsk,
            EventBody::PermissionReply(r) => EventView::PermissionReply {
                decision: r.decision,
            },
            EventBody::Error(e) => EventView::Error {
                message: &e.message,
                code: e.code.as_deref(),
                fatal: e.fatal,
            },
            EventBody::VerificationRun(v) => EventView::VerificationRun {
                command: &v.command,
                status: v.status,
                duration_ms: v.duration_ms,
            },
            EventBody::AgentNotice(n) => EventView::AgentNotice { notice: &n.notice },
            EventBody::TodoUpdate(t) => EventView::TodoUpdate {
                todos: Todos::Owned(&t.todos),
            },
            EventBody::FileEdit(f) => EventView::FileEdit {
                path: &f.path,
                op: f.op,
                from: f.from.as_deref(),
                lines_added: f.lines_added,
                lines_removed: f.lines_removed,
            },
            EventBody::SnapshotTaken(t) => EventView::SnapshotTaken {
                snapshot: &t.snapshot,
                workspace: &t.workspace,
                reason: t.reason,
                before_step: t.before_step,
                files: t.files,
                targeted: t.targeted,
            },
            EventBody::RollbackApplied(r) => EventView::RollbackApplied {
                rolled_back: &r.rolled_back,
                to_snapshot: &r.to_snapshot,
            },
            EventBody::SessionBranch(b) => EventView::SessionBranch {
                parent: &b.parent,
                through_seq: b.through_seq,
            },
            EventBody::GoalCreated(g) => EventView::Goal {
                goal: &g.goal,
                revises: g.revises.as_deref(),
                assurance: g.assurance.as_deref(),
                correction: g.correction.as_deref(),
            },
            EventBody::GoalCheckRun(g) => EventView::GoalCheck {
                goal: &g.goal,
                check: &g.check,
                command: &g.command,
                passed: g.passed,
                changed_since_freeze: Paths::Owned(&g.changed_since_freeze),
            },
            EventBody::GoalUpdate(g) => EventView::GoalUpdate {
                goal: &g.goal,
                action: g.action,
                accepted: g.accepted,
            },
            EventBody::GoalCheckStart(g) => EventView::GoalCheckStart { goal: &g.goal },
            EventBody::SecretAllowed(a) => EventView::SecretAllowed { seq: a.seq },
            EventBody::GitCommits(c) => EventView::GitCommits {
                head: &c.head,
                commits_total: c.commits_total,
            },
            EventBody::Unknown { .. } => EventView::Unknown,
        }
    }
}

fn s(v: &rkyv::string::ArchivedString) -> &str {
    v.as_str()
}

fn os(v: &rkyv::option::ArchivedOption<rkyv::string::ArchivedString>) -> Option<&str> {
    v.as_ref().map(|x| x.as_str())
}

fn ou(v: &rkyv::option::ArchivedOption<rkyv::rend::u64_le>) -> Option<u64> {
    v.as_ref().map(|x| x.to_native())
}

/// Unit enums deserialize without fail from validated data; the default stands in for
/// the impossible.
fn e<T: rkyv::Archive + Default>(a: &T::Archived) -> T
where
    T::Archived: rkyv::Deserialize<T, rkyv::rancor::Strategy<rkyv::de::Pool, rkyv::rancor::Error>>,
{
    rkyv::deserialize::<T, rkyv::rancor::Error>(a).unwrap_or_default()
}

macro_rules! access {
    ($ty:ty, $kind:expr, $version:expr, $payload:expr) => {
        rkyv::access::<rkyv::Archived<$ty>, rkyv::rancor::Error>($payload).map_err(|err| {
            SchemaError::BadPayload {
                kind: $kind,
                name: kind_name($kind),
                version: $version,
                reason: err.to_string(),
            }
        })?
    };
}

/// The items of a todo list, read in place (archived) or from a decoded event.
#[derive(Clone, Copy)]
pub enum Todos<'a> {
    Archived(&'a rkyv::vec::ArchivedVec<crate::kinds::ArchivedTodoItem>),
    Owned(&'a [crate::kinds::TodoItem]),
}

impl<'a> Todos<'a> {
    /// The items (text, status, the agent's id), in order.
    pub fn iter(self) -> Box<dyn Iterator<Item = (&'a str, TodoStatus, Option<&'a str>)> + 'a> {
        match self {
            Todos::Archived(v) => Box::new(v.iter().map(|t| {
                (
                    t.content.as_str(),
                    e::<TodoStatus>(&t.status),
                    t.id.as_ref().map(|i| i.as_str()),
                )
            })),
            Todos::Owned(v) => Box::new(
                v.iter()
                    .map(|t| (t.content.as_str(), t.status, t.id.as_deref())),
            ),
        }
    }
}

impl PartialEq for Todos<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Todos<'_> {}

impl std::fmt::Debug for Todos<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A list of strings of an event, read in place (archived) or from a decoded event.
#[derive(Debug, Clone, Copy)]
pub enum Paths<'a> {
    Archived(&'a rkyv::vec::ArchivedVec<rkyv::string::ArchivedString>),
    Owned(&'a [String]),
}

impl<'a> Paths<'a> {
    /// The strings, in order.
    pub fn iter(self) -> Box<dyn Iterator<Item = &'a str> + 'a> {
        match self {
            Paths::Archived(v) => Box::new(v.iter().map(|s| s.as_str())),
            Paths::Owned(v) => Box::new(v.iter().map(String::as_str)),
        }
    }
}

impl PartialEq for Paths<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Paths<'_> {}

impl<'a> EventView<'a> {
    /// A view straight from a payload in a segment: validated (as
    /// [`EventBody::validate`] does), not copied. `payload` must be 8-byte aligned.
    /// Calls `f` with the view of a payload: read in place when it is in the current
    /// layout of its kind, else decoded by its version's decoder first (SPEC §6).
    pub fn visit<R>(
        kind: u16,
        version: u16,
        payload: &[u8],
        f: impl FnOnce(&EventView<'_>) -> R,
    ) -> Result<R, SchemaError> {
        if is_current_version(kind, version) {
            Ok(f(&EventView::from_archived(kind, version, payload)?))
        } else {
            let body = EventBody::decode(kind, version, payload)?;
            Ok(f(&body.view()))
        }
    }

    pub fn from_archived(kind: u16, version: u16, payload: &'a [u8]) -> Result<Self, SchemaError> {
        // Only the current layout is read in place; an earlier version goes through
        // its decoder ([`EventView::visit`]), an unknown one is refused.
        if !is_current_version(kind, version) {
            return Err(SchemaError::UnknownVersion {
                kind,
                name: kind_name(kind),
                version,
                known: current_version(kind).unwrap_or(0),
            });
        }
        Ok(match kind {
            1 => {
                let a = access!(SessionStart, kind, version, payload);
                EventView::SessionStart {
                    agent: os(&a.agent),
                    workspace: os(&a.workspace),
                    project: os(&a.project),
                    parent: os(&a.parent),
                    title: os(&a.title),
                    source: os(&a.source),
                }
            }
            2 => {
                let a = access!(SessionEnd, kind, version, payload);
                EventView::SessionEnd {
                    reason: e::<EndReason>(&a.reason),
                }
            }
            3 => {
                let a = access!(AgentRoute, kind, version, payload);
                EventView::AgentRoute {
                    from: os(&a.from),
                    to: s(&a.to),
                    reason: os(&a.reason),
                }
            }
            4 => {
                let a = access!(LlmRequest, kind, version, payload);
                EventView::LlmRequest {
                    agent: os(&a.agent),
                }
            }
            5 => {
                let a = access!(LlmResponse, kind, version, payload);
                EventView::LlmResponse {
                    response_id: os(&a.response_id),
                    tokens_in: a.tokens_in.to_native(),
                    tokens_out: a.tokens_out.to_native(),
                    cache_read: a.cache_read.to_native(),
                    cache_write: a.cache_write.to_native(),
                }
            }
            6 => {
                let a = access!(StepStart, kind, version, payload);
                EventView::StepStart {
                    step: a.step.to_native(),
                    agent: os(&a.agent),
                    title: os(&a.title),
                }
            }
            7 => {
                let a = access!(StepFinish, kind, version, payload);
                EventView::StepFinish {
                    step: a.step.to_native(),
                }
            }
            8 => {
                let a = access!(ToolCall, kind, version, payload);
                EventView::ToolCall {
                    call_id: s(&a.call_id),
                    tool: s(&a.tool),
                    target: os(&a.target),
                    agent: os(&a.agent),
                }
            }
            9 => {
                let a = access!(ToolResult, kind, version, payload);
                EventView::ToolResult {
                    call_id: s(&a.call_id),
                    status: e::<ToolStatus>(&a.status),
                    duration_ms: ou(&a.duration_ms),
                    error: os(&a.error),
                }
            }
            10 => {
                access!(PermissionAsk, kind, version, payload);
                EventView::PermissionAsk
            }
            11 => {
                let a = access!(PermissionReply, kind, version, payload);
                EventView::PermissionReply {
                    decision: e::<Decision>(&a.decision),
                }
            }
            12 => {
                let a = access!(ErrorEvent, kind, version, payload);
                EventView::Error {
                    message: s(&a.message),
                    code: os(&a.code),
                    fatal: a.fatal,
                }
            }
            13 => {
                let a = access!(VerificationRun, kind, version, payload);
                EventView::VerificationRun {
                    command: s(&a.command),
                    status: e::<VerificationStatus>(&a.status),
                    duration_ms: ou(&a.duration_ms),
                }
            }
            14 => {
                let a = access!(FileEdit, kind, version, payload);
                EventView::FileEdit {
                    path: s(&a.path),
                    op: e::<EditOp>(&a.op),
                    from: os(&a.from),
                    lines_added: ou(&a.lines_added),
                    lines_removed: ou(&a.lines_removed),
                }
            }
            15 => {
                let a = access!(SnapshotTaken, kind, version, payload);
                EventView::SnapshotTaken {
                    snapshot: s(&a.snapshot),
                    workspace: s(&a.workspace),
                    reason: e::<SnapshotReason>(&a.reason),
                    before_step: ou(&a.before_step),
                    files: a.files.to_native(),
                    targeted: a.targeted,
                }
            }
            16 => {
                let a = access!(RollbackApplied, kind, version, payload);
                EventView::RollbackApplied {
                    rolled_back: s(&a.rolled_back),
                    to_snapshot: s(&a.to_snapshot),
                }
            }
            17 => {
                let a = access!(SessionBranch, kind, version, payload);
                EventView::SessionBranch {
                    parent: s(&a.parent),
                    through_seq: a.through_seq.to_native(),
                }
            }
            18 => {
                let a = access!(GoalCreated, kind, version, payload);
                EventView::Goal {
                    goal: s(&a.goal),
                    revises: os(&a.revises),
                    assurance: os(&a.assurance),
                    correction: os(&a.correction),
                }
            }
            19 => {
                let a = access!(GoalCheckRun, kind, version, payload);
                EventView::GoalCheck {
                    goal: s(&a.goal),
                    check: s(&a.check),
                    command: s(&a.command),
                    passed: a.passed,
                    changed_since_freeze: Paths::Archived(&a.changed_since_freeze),
                }
            }
            20 => {
                let a = access!(GoalUpdate, kind, version, payload);
                EventView::GoalUpdate {
                    goal: s(&a.goal),
                    action: e::<GoalAction>(&a.action),
                    accepted: a.accepted,
                }
            }
            21 => EventView::GoalCheckStart {
                goal: s(&access!(GoalCheckStart, kind, version, payload).goal),
            },
            22 => EventView::AgentNotice {
                notice: s(&access!(AgentNotice, kind, version, payload).notice),
            },
            23 => EventView::SecretAllowed {
                seq: access!(SecretAllowed, kind, version, payload)
                    .seq
                    .to_native(),
            },
            24 => {
                let a = access!(GitCommits, kind, version, payload);
                EventView::GitCommits {
                    head: s(&a.head),
                    commits_total: a.commits_total.to_native(),
                }
            }
            25 => EventView::TodoUpdate {
                todos: Todos::Archived(&access!(TodoUpdate, kind, version, payload).todos),
            },
            _ => EventView::Unknown,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The view of a payload read in place equals the view of the decoded body, for
    /// every kind of the fixture session of every kind.
    #[test]
    fn archived_views_equal_owned_views() {
        // The golden v1 store's session of every kind, then the kinds added since.
        let text = concat!(
            include_str!("../../tests/fixtures/store-v1/sources/all-kinds.jsonl"),
            include_str!("../../tests/fixtures/kinds-added.jsonl")
        );
        let mut kinds = std::collections::BTreeSet::new();
        for (i, line) in text.lines().enumerate() {
            let body = crate::parse_json_line(line, i + 1).unwrap().body;
            let (kind, version, bytes) = body.encode().unwrap();
            let view = EventView::from_archived(kind, version, &bytes).unwrap();
            assert_eq!(view, body.view(), "line {}", i + 1);
            kinds.insert(kind);
        }
        assert_eq!(kinds.len(), KINDS.len(), "the fixture covers every kind");
    }
}
