//! The per-session summary that listings show: a view of the execution graph.

use serde::Serialize;
use tacho_schema::{EndReason, ToolStatus};

use crate::graph::ExecutionGraph;

/// Whether a session is still being recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// No `session.end` yet.
    Running,
    /// Ended, with the recorded reason.
    Ended(EndReason),
}

/// What `tacho session list` shows of a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    pub session: String,
    pub started_unix_ns: Option<i64>,
    pub last_event_unix_ns: Option<i64>,
    pub status: SessionStatus,
    /// The first agent of the session.
    pub agent: Option<String>,
    pub title: Option<String>,
    pub workspace: Option<String>,
    pub project: Option<String>,
    pub parent: Option<String>,
    pub events: u64,
    pub steps: u64,
    pub tool_calls: u64,
    pub tool_failures: u64,
    pub files_edited: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
}

impl SessionSummary {
    /// The summary of a session's graph. (The graph is the fold; this is a view of it,
    /// so the two can never disagree.)
    pub fn from_graph(g: &ExecutionGraph) -> Self {
        SessionSummary {
            session: g.session.clone(),
            started_unix_ns: g.started_unix_ns,
            last_event_unix_ns: g.last_event_unix_ns,
            status: g
                .end_reason
                .map_or(SessionStatus::Running, SessionStatus::Ended),
            agent: g.agents.first().cloned(),
            title: g.title.clone(),
            workspace: g.workspace.clone(),
            project: g.project.clone(),
            parent: g.parent.clone(),
            events: g.events,
            steps: g.steps.len() as u64,
            tool_calls: g.tools().count() as u64,
            tool_failures: g
                .tools()
                .filter(|(_, t)| t.status.is_some_and(|s| s != ToolStatus::Ok))
                .count() as u64,
            files_edited: g.files.len() as u64,
            tokens_in: g.tokens.input,
            tokens_out: g.tokens.output,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tacho_schema::{Event, EventBody, LlmResponse, SessionEnd, SessionStart};

    #[test]
    fn repeated_usage_of_one_response_counts_once() {
        let mut g = ExecutionGraph::new("s");
        let bodies = [
            EventBody::SessionStart(SessionStart::default()),
            EventBody::LlmResponse(LlmResponse {
                request_id: "r".into(),
                response_id: Some("m1".into()),
                tokens_in: 100,
                tokens_out: 7,
                ..Default::default()
            }),
            EventBody::LlmResponse(LlmResponse {
                request_id: "r".into(),
                response_id: Some("m1".into()),
                tokens_in: 100,
                tokens_out: 7,
                ..Default::default()
            }),
            EventBody::LlmResponse(LlmResponse {
                request_id: "r".into(),
                response_id: Some("m2".into()),
                tokens_in: 100,
                tokens_out: 7,
                ..Default::default()
            }),
            EventBody::SessionEnd(SessionEnd {
                reason: EndReason::StepLimit,
                message: None,
            }),
        ];
        for (i, body) in bodies.into_iter().enumerate() {
            g.apply(
                i as u64,
                &Event {
                    session: "s".into(),
                    time_unix_ns: i as i64 + 1,
                    body,
                },
            );
        }
        let s = SessionSummary::from_graph(&g);
        assert_eq!((s.tokens_in, s.tokens_out), (200, 14));
        assert_eq!(s.status, SessionStatus::Ended(EndReason::StepLimit));
        assert_eq!(s.events, 5);
        assert_eq!(s.last_event_unix_ns, Some(5));
    }

    #[test]
    fn token_totals_saturate_instead_of_wrapping() {
        let mut g = ExecutionGraph::new("s");
        let big = u64::MAX - 5;
        let bodies = [
            EventBody::SessionStart(SessionStart::default()),
            EventBody::LlmResponse(LlmResponse {
                request_id: "r1".into(),
                response_id: Some("m1".into()),
                tokens_in: big,
                tokens_out: big,
                cache_read: big,
                cache_write: big,
                ..Default::default()
            }),
            EventBody::StepStart(tacho_schema::StepStart {
                step: 1,
                ..Default::default()
            }),
            EventBody::LlmResponse(LlmResponse {
                request_id: "r2".into(),
                response_id: Some("m2".into()),
                tokens_in: big,
                tokens_out: 10,
                cache_read: big,
                cache_write: 10,
                ..Default::default()
            }),
            EventBody::LlmResponse(LlmResponse {
                request_id: "r3".into(),
                response_id: Some("m3".into()),
                tokens_in: big,
                tokens_out: big,
                cache_read: big,
                cache_write: big,
                ..Default::default()
            }),
        ];
        for (i, body) in bodies.into_iter().enumerate() {
            g.apply(
                i as u64,
                &Event {
                    session: "s".into(),
                    time_unix_ns: i as i64 + 1,
                    body,
                },
            );
        }
        let s = SessionSummary::from_graph(&g);
        assert_eq!((s.tokens_in, s.tokens_out), (u64::MAX, u64::MAX));
        assert_eq!(
            (g.tokens.cache_read, g.tokens.cache_write),
            (u64::MAX, u64::MAX)
        );
        let step = g.steps.iter().find(|s| s.number == 1);
        assert_eq!(step.map(|s| s.tokens.input), Some(u64::MAX));
    }
}
