//! The per-session summary that listings show.

use std::collections::BTreeSet;

use serde::Serialize;
use tacho_schema::{EndReason, Event, EventBody, ToolStatus};

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
    /// Model responses already counted, so usage repeated for one response counts once.
    #[serde(skip)]
    responses_seen: BTreeSet<String>,
    #[serde(skip)]
    files_seen: BTreeSet<String>,
}

impl SessionSummary {
    /// An empty summary of `session`.
    pub fn new(session: &str) -> Self {
        SessionSummary {
            session: session.to_string(),
            started_unix_ns: None,
            last_event_unix_ns: None,
            status: SessionStatus::Running,
            agent: None,
            title: None,
            workspace: None,
            project: None,
            parent: None,
            events: 0,
            steps: 0,
            tool_calls: 0,
            tool_failures: 0,
            files_edited: 0,
            tokens_in: 0,
            tokens_out: 0,
            responses_seen: BTreeSet::new(),
            files_seen: BTreeSet::new(),
        }
    }

    /// Folds one event in. Events must come in sequence order.
    pub fn apply(&mut self, ev: &Event) {
        self.events += 1;
        self.last_event_unix_ns = Some(ev.time_unix_ns);
        match &ev.body {
            EventBody::SessionStart(s) => {
                self.started_unix_ns = Some(ev.time_unix_ns);
                self.agent.clone_from(&s.agent);
                self.title.clone_from(&s.title);
                self.workspace.clone_from(&s.workspace);
                self.project.clone_from(&s.project);
                self.parent.clone_from(&s.parent);
            }
            EventBody::SessionEnd(e) => self.status = SessionStatus::Ended(e.reason),
            EventBody::StepStart(_) => self.steps += 1,
            EventBody::ToolCall(_) => self.tool_calls += 1,
            EventBody::ToolResult(r) if r.status != ToolStatus::Ok => {
                self.tool_failures += 1;
            }
            EventBody::LlmResponse(r) => {
                let fresh = match &r.response_id {
                    Some(id) => self.responses_seen.insert(id.clone()),
                    None => true,
                };
                if fresh {
                    self.tokens_in += r.tokens_in;
                    self.tokens_out += r.tokens_out;
                }
            }
            EventBody::FileEdit(f) if self.files_seen.insert(f.path.clone()) => {
                self.files_edited += 1;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tacho_schema::{LlmResponse, SessionEnd, SessionStart};

    fn ev(t: i64, body: EventBody) -> Event {
        Event {
            session: "s".into(),
            time_unix_ns: t,
            body,
        }
    }

    #[test]
    fn repeated_usage_of_one_response_counts_once() {
        let mut s = SessionSummary::new("s");
        s.apply(&ev(1, EventBody::SessionStart(SessionStart::default())));
        let usage = |id: &str| {
            EventBody::LlmResponse(LlmResponse {
                request_id: "r".into(),
                response_id: Some(id.into()),
                tokens_in: 100,
                tokens_out: 7,
                ..LlmResponse::default()
            })
        };
        s.apply(&ev(2, usage("m1")));
        s.apply(&ev(3, usage("m1")));
        s.apply(&ev(4, usage("m2")));
        s.apply(&ev(
            5,
            EventBody::SessionEnd(SessionEnd {
                reason: EndReason::StepLimit,
                message: None,
            }),
        ));
        assert_eq!((s.tokens_in, s.tokens_out), (200, 14));
        assert_eq!(s.status, SessionStatus::Ended(EndReason::StepLimit));
        assert_eq!(s.events, 5);
        assert_eq!(s.last_event_unix_ns, Some(5));
    }
}
