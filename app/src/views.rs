//! The read side: one query per read command, each returning a typed view that every
//! frontend renders (text with [`crate::render`], JSON with [`crate::record`]). Every
//! view of a session starts from [`SessionGraph`]: the one graph of the session (the
//! stored projection brought up to date, with what its snapshots show merged in) and
//! the one risk assessment of that graph. No frontend folds events or scores risk.

use std::collections::BTreeMap;

use serde::Serialize;
use tacho_projections::audit::{AuditFold, Placement, Span};
use tacho_projections::{Comparison, ExecutionGraph, RiskAssessment, ToolNode, assess, compare};
use tacho_schema::{Decision, EndReason, EventBody, GoalAction, ToolStatus, VerificationStatus};
use tacho_store::StoreError;

use crate::{SessionId, Tacho};

/// A session's graph with its risk assessment: what every view of one session is
/// made from, so that every frontend shows the same facts.
#[derive(Debug, Clone)]
pub struct SessionGraph {
    pub graph: ExecutionGraph,
    pub risk: RiskAssessment,
}

impl SessionGraph {
    /// The assessment of a finished graph (folded, with the snapshots' changes merged
    /// in). The only place the application assesses risk (the session index keeps only
    /// the score and level, from `risk_score`: the same rules without the factors' text).
    pub(crate) fn of(graph: ExecutionGraph) -> Self {
        let risk = assess(&graph);
        SessionGraph { graph, risk }
    }
}

/// One line of `session trace`: an event that says something about how the session
/// went, with whether the risk score weighs it.
#[derive(Debug, Clone, Serialize)]
pub struct TraceRow {
    pub seq: u64,
    /// Time since the session's first event (`+m:ss.mmm`).
    pub at: String,
    pub time_unix_ns: i64,
    /// `start`, `route`, `model`, `tool`, `verify`, `error`, `denied`, `goal`, `check`,
    /// `gate`, `pause`, `resume`, `block`, `end`.
    pub kind: &'static str,
    pub text: String,
    /// What the risk score weighs: failures, errors, denials, refused completions,
    /// pauses and blocks.
    pub flagged: bool,
}

/// `session trace`: the session's timeline, with its graph and risk.
#[derive(Debug, Clone)]
pub struct Trace {
    pub session: SessionId,
    pub rows: Vec<TraceRow>,
    pub assessed: SessionGraph,
}

impl Tacho {
    /// The graph of a session with its risk assessment (see [`SessionGraph`]).
    pub fn session_graph(&self, session: &SessionId) -> Result<SessionGraph, StoreError> {
        Ok(SessionGraph::of(self.graph(session)?))
    }

    /// `tacho risk`: the session's risk assessment.
    pub fn risk(&self, session: &SessionId) -> Result<RiskAssessment, StoreError> {
        Ok(self.session_graph(session)?.risk)
    }

    /// `session compare`: two sessions side by side; `deep` aligns their steps.
    pub fn compare(
        &self,
        a: &SessionId,
        b: &SessionId,
        deep: bool,
    ) -> Result<Comparison, StoreError> {
        let (ga, gb) = (self.session_graph(a)?, self.session_graph(b)?);
        let (ka, kb) = (self.kinds(a)?, self.kinds(b)?);
        Ok(compare(
            (&ga.graph, &ga.risk, &ka),
            (&gb.graph, &gb.risk, &kb),
            deep,
        ))
    }

    /// A session's events counted by kind.
    fn kinds(&self, session: &str) -> Result<BTreeMap<String, u64>, StoreError> {
        let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
        self.for_each_event(session, |e| {
            *kinds
                .entry(e.event.body.kind_name().to_string())
                .or_default() += 1;
        })?;
        Ok(kinds)
    }

    /// `session trace`: every event that tells how the session went, in order.
    pub fn trace(&self, session: &SessionId) -> Result<Trace, StoreError> {
        let assessed = self.session_graph(session)?;
        let mut rows = Vec::new();
        {
            let results: BTreeMap<&str, &ToolNode> = assessed
                .graph
                .tools()
                .map(|(_, t)| (t.call_id.as_str(), t))
                .collect();
            let mut start = None;
            let mut responses_seen = std::collections::BTreeSet::new();
            self.for_each_event(session, |e| {
                let t = e.event.time_unix_ns;
                let start = *start.get_or_insert(t);
                if let Some((kind, text, flagged)) =
                    trace_row(&e.event.body, &results, &mut responses_seen)
                {
                    rows.push(TraceRow {
                        seq: e.seq,
                        at: crate::render::since(start, t).trim().to_string(),
                        time_unix_ns: t,
                        kind,
                        text,
                        flagged,
                    });
                }
            })?;
        }
        Ok(Trace {
            session: session.clone(),
            rows,
            assessed,
        })
    }
}

/// The trace line of one event, if it has one: (kind, text, flagged).
fn trace_row(
    body: &EventBody,
    results: &BTreeMap<&str, &ToolNode>,
    responses_seen: &mut std::collections::BTreeSet<String>,
) -> Option<(&'static str, String, bool)> {
    Some(match body {
        EventBody::SessionStart(s) => (
            "start",
            format!(
                "{}{}",
                s.agent.as_deref().unwrap_or("-"),
                s.title
                    .as_ref()
                    .map(|t| format!(" \"{t}\""))
                    .unwrap_or_default()
            ),
            false,
        ),
        EventBody::AgentRoute(r) => (
            "route",
            crate::render::route(r.from.as_deref(), &r.to),
            false,
        ),
        EventBody::LlmResponse(r) => {
            let repeat = r
                .response_id
                .as_ref()
                .is_some_and(|id| !responses_seen.insert(id.clone()));
            let text = if repeat {
                format!(
                    "{} usage repeated for response {} (counted once)",
                    r.request_id,
                    r.response_id.as_deref().unwrap_or("")
                )
            } else {
                format!(
                    "{} {} → {}/{} tokens{}",
                    r.request_id,
                    r.model.as_deref().unwrap_or(""),
                    r.tokens_in,
                    r.tokens_out,
                    r.latency_ms.map(|l| format!(", {l}ms")).unwrap_or_default()
                )
            };
            ("model", text, r.error.is_some())
        }
        EventBody::ToolCall(c) => {
            let node = results.get(c.call_id.as_str());
            let status = node.and_then(|t| t.status);
            let dur = node.and_then(|t| t.duration_ms);
            let err = node.and_then(|t| t.error.as_deref());
            let outcome = match status {
                Some(ToolStatus::Ok) => "OK".to_string(),
                Some(s) => format!("FAILED ({s})"),
                None => "NO RESULT".to_string(),
            };
            (
                "tool",
                format!(
                    "{} {}  {outcome}{}{}",
                    c.tool,
                    c.target.as_deref().unwrap_or(""),
                    dur.map(|d| format!(" {d}ms")).unwrap_or_default(),
                    err.map(|e| format!(": {}", e.lines().next().unwrap_or("")))
                        .unwrap_or_default()
                ),
                status.is_none_or(|s| s != ToolStatus::Ok),
            )
        }
        EventBody::VerificationRun(v) => (
            "verify",
            format!("{} {}", v.command, v.status),
            v.status != VerificationStatus::Passed,
        ),
        EventBody::Error(er) => (
            "error",
            er.message.lines().next().unwrap_or("").to_string(),
            true,
        ),
        EventBody::PermissionReply(p) if p.decision == Decision::Deny => {
            ("denied", p.request_id.clone(), true)
        }
        EventBody::GoalCreated(gc) => (
            "goal",
            format!("{} {}: {}", gc.goal, gc.kind, gc.title),
            false,
        ),
        EventBody::GoalCheckRun(r) => (
            "check",
            format!(
                "{} {}{}",
                r.check,
                if r.passed { "passed" } else { "failed" },
                r.exit_code
                    .map(|c| format!(" (exit {c})"))
                    .unwrap_or_else(|| {
                        if r.timed_out {
                            " (timed out)".into()
                        } else {
                            String::new()
                        }
                    })
            ),
            !r.passed,
        ),
        EventBody::GoalUpdate(u) => {
            let reason = u.reason.clone().unwrap_or_default();
            match (u.action, u.accepted) {
                (GoalAction::Complete, true) => {
                    ("gate", format!("completion accepted: {reason}"), false)
                }
                (GoalAction::Complete, false) => {
                    ("gate", format!("completion refused: {reason}"), true)
                }
                (GoalAction::Pause, true) => ("pause", reason, true),
                // A pause not accepted is a resume (`tacho goal resume`).
                (GoalAction::Pause, false) => ("resume", reason, false),
                (GoalAction::Block, _) => ("block", reason, true),
                (GoalAction::Clear, _) => ("clear", reason, false),
            }
        }
        EventBody::SessionEnd(en) => match en.reason {
            EndReason::GateBlocked => (
                "gate",
                "completion gate blocked the session".to_string(),
                true,
            ),
            r => ("end", r.to_string(), r != EndReason::Completed),
        },
        _ => return None,
    })
}

/// A session read for an audit export: how many events were handed out, and where
/// the log ended (an error names damage after the events handed out).
#[derive(Debug)]
pub struct AuditRead {
    pub events: u64,
    pub end: Result<tacho_store::ReadEnd, StoreError>,
}

impl Tacho {
    /// Streams a session's events, each with where it sits in the session's audit trace
    /// (its span and parent, SPEC's audit schema) and the session's parent session:
    /// what `audit export` writes, a record per event.
    pub fn audit_events(
        &self,
        session: &str,
        mut f: impl FnMut(tacho_store::StoredEvent, &Placement, Option<&str>),
    ) -> AuditRead {
        let mut fold = AuditFold::new(session, false);
        let mut events = 0u64;
        let end = self.for_each_event(session, |e| {
            let p = fold.apply(e.seq, &e.event);
            f(e, &p, fold.parent_session());
            events += 1;
        });
        AuditRead { events, end }
    }

    /// Streams a session's audit spans (session, steps, tool calls, model calls,
    /// events) as they finish, then the ones still open at the end of what could be
    /// read: what `audit otlp` sends.
    pub fn audit_spans(&self, session: &str, mut f: impl FnMut(Span)) -> AuditRead {
        let mut fold = AuditFold::new(session, true);
        let mut events = 0u64;
        let end = self.for_each_event(session, |e| {
            events += 1;
            fold.apply(e.seq, &e.event);
            for s in fold.take_finished() {
                f(s);
            }
        });
        for s in fold.finish() {
            f(s);
        }
        AuditRead { events, end }
    }
}
