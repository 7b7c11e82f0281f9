//! Audit spans: a session's events as a tree of spans, the shape both audit exports
//! (JSON Lines and OpenTelemetry) give them.
//!
//! A session is a trace. Its root span is the session itself; a step is a span inside
//! it; a tool call (call to result), a model call (request to response) are spans
//! inside the step that was open when they began; every other event is a span of its
//! own, without duration unless it reports one. Ids are derived from the session id and
//! the sequence number of the event that opened the span (SPEC §14.2), so exporting
//! the same events twice gives the same ids, and a backend that deduplicates takes a
//! re-export as a no-op.
//!
//! The fold streams: it keeps only the spans still open (their opening events), so a
//! session of any length is exported in the memory of its widest moment.

use std::collections::{BTreeMap, BTreeSet};

use tacho_schema::{Event, EventBody};

/// The schema of audit records and span attributes (SPEC §14).
pub const AUDIT_SCHEMA: &str = "tacho.audit/1";

/// A trace id: 16 bytes, never all zero.
pub type TraceId = [u8; 16];
/// A span id: 8 bytes, never all zero.
pub type SpanId = [u8; 8];

/// The sequence number standing for the session's root span (no event has it).
const ROOT_KEY: u64 = u64::MAX;

/// The trace id of a session: the first 16 bytes of BLAKE3 in key-derivation mode
/// (context `tacho audit trace v1`) of the session id.
pub fn trace_id(session: &str) -> TraceId {
    let digest = blake3::derive_key("tacho audit trace v1", session.as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    nonzero(&mut id);
    id
}

/// The id of the span an event opened: the first 8 bytes of BLAKE3 in key-derivation
/// mode (context `tacho audit span v1`) of the session id, a zero byte and the event's
/// sequence number (8 bytes, little-endian). The root span uses 2^64 - 1.
pub fn span_id(session: &str, seq: u64) -> SpanId {
    SpanIds::new(session).of(seq)
}

/// The span ids of one session: the hasher of the session's prefix, kept, so that
/// each id costs one compression instead of deriving the context key again.
#[derive(Debug, Clone)]
pub struct SpanIds(blake3::Hasher);

impl SpanIds {
    pub fn new(session: &str) -> SpanIds {
        let mut h = blake3::Hasher::new_derive_key("tacho audit span v1");
        h.update(session.as_bytes());
        h.update(&[0]);
        SpanIds(h)
    }

    /// The id of the span opened by event `seq` (2^64 - 1: the root).
    pub fn of(&self, seq: u64) -> SpanId {
        let mut h = self.0.clone();
        h.update(&seq.to_le_bytes());
        let digest = h.finalize();
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest.as_bytes()[..8]);
        nonzero(&mut id);
        id
    }
}

/// The session's root span.
pub fn root_span_id(session: &str) -> SpanId {
    span_id(session, ROOT_KEY)
}

/// OpenTelemetry forbids all-zero ids; one in 2^64 derivations would give one.
fn nonzero(id: &mut [u8]) {
    if id.iter().all(|b| *b == 0)
        && let Some(last) = id.last_mut()
    {
        *last = 1;
    }
}

/// What a span stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    /// The session: `invoke_agent`.
    Session,
    /// A step.
    Step,
    /// A tool call: `execute_tool`.
    Tool,
    /// A model call: `chat`.
    Chat,
    /// Any other event.
    Event,
}

/// Where an event sits in the span tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The span the event belongs to (the one it opened, closed, or is).
    pub span: SpanId,
    /// That span's parent (`None` for the root).
    pub parent: Option<SpanId>,
    /// The innermost step open when the span began.
    pub step: Option<u64>,
    /// The agent acting: the event's own, else its step's, else the session's.
    pub agent: Option<String>,
    /// For a tool call and its result: the call's tool and target.
    pub tool: Option<String>,
    pub target: Option<String>,
    /// For an event that closes a span: the time from its opening event.
    pub span_duration_ns: Option<i64>,
    /// A model response repeating one already seen (same `response_id`), or one a
    /// branch copied from its parent: its usage was counted with the first (the
    /// parent's), and it is a plain event here.
    pub repeated_response: bool,
}

/// A finished span: its opening event and, when it had one, the closing event.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub id: SpanId,
    pub parent: Option<SpanId>,
    pub kind: SpanKind,
    pub start_unix_ns: i64,
    pub end_unix_ns: i64,
    pub step: Option<u64>,
    pub agent: Option<String>,
    /// The sequence number of the opening event (`None` for a root without
    /// `session.start`).
    pub open_seq: Option<u64>,
    pub open: Option<EventBody>,
    pub close_seq: Option<u64>,
    pub close: Option<EventBody>,
    /// The session's record ended with the span still open.
    pub unfinished: bool,
}

#[derive(Debug)]
struct Open {
    span: Span,
}

/// The streaming fold. Feed events in order with [`AuditFold::apply`]; with
/// `keep_spans`, finished spans queue up for [`AuditFold::take_finished`].
#[derive(Debug)]
pub struct AuditFold {
    session: String,
    ids: SpanIds,
    keep_spans: bool,
    root: Open,
    root_seen: bool,
    session_agent: Option<String>,
    parent_session: Option<String>,
    /// Open steps, innermost last: (step number, span).
    steps: Vec<(u64, Open)>,
    /// Open tool calls by call id, open model calls by request id.
    calls: BTreeMap<String, Open>,
    requests: BTreeMap<String, Open>,
    /// Response ids seen, so that a repeated response is not a second model call.
    responses: BTreeSet<String>,
    /// Events still to come that a `session.branch` copied from its parent: the
    /// parent's, whose model responses the parent counts.
    copies_left: u64,
    finished: Vec<Span>,
    last_unix_ns: Option<i64>,
}

impl AuditFold {
    pub fn new(session: &str, keep_spans: bool) -> Self {
        AuditFold {
            session: session.to_string(),
            ids: SpanIds::new(session),
            keep_spans,
            root: Open {
                span: Span {
                    id: root_span_id(session),
                    parent: None,
                    kind: SpanKind::Session,
                    start_unix_ns: 0,
                    end_unix_ns: 0,
                    step: None,
                    agent: None,
                    open_seq: None,
                    open: None,
                    close_seq: None,
                    close: None,
                    unfinished: true,
                },
            },
            root_seen: false,
            session_agent: None,
            parent_session: None,
            steps: Vec::new(),
            calls: BTreeMap::new(),
            requests: BTreeMap::new(),
            responses: BTreeSet::new(),
            copies_left: 0,
            finished: Vec::new(),
            last_unix_ns: None,
        }
    }

    pub fn trace_id(&self) -> TraceId {
        trace_id(&self.session)
    }

    /// The session that delegated this one (from `session.start`).
    pub fn parent_session(&self) -> Option<&str> {
        self.parent_session.as_deref()
    }

    /// The span new spans nest in, with its step number and agent.
    fn enclosing(&self) -> (SpanId, Option<u64>, Option<String>) {
        match self.steps.last() {
            Some((n, o)) => (
                o.span.id,
                Some(*n),
                o.span.agent.clone().or_else(|| self.session_agent.clone()),
            ),
            None => (self.root.span.id, None, self.session_agent.clone()),
        }
    }

    fn finish_span(&mut self, span: Span) {
        if self.keep_spans {
            self.finished.push(span);
        }
    }

    /// Places one event (`seq` its sequence number) and closes what it closes.
    pub fn apply(&mut self, seq: u64, event: &Event) -> Placement {
        let t = event.time_unix_ns;
        let copy = self.copies_left > 0;
        self.copies_left = self.copies_left.saturating_sub(1);
        // A branch's own `session.branch` (a branch of a branch copies its parent's
        // too, among the copies: that one says nothing of this session's copies).
        if let EventBody::SessionBranch(b) = &event.body
            && !copy
        {
            self.copies_left = b.copied;
        }
        if !self.root_seen {
            self.root_seen = true;
            self.root.span.start_unix_ns = t;
        }
        self.last_unix_ns = Some(self.last_unix_ns.map_or(t, |l| l.max(t)));
        let (parent, step, agent) = self.enclosing();
        let own_agent = event_agent(&event.body);
        let mut placement = Placement {
            span: self.ids.of(seq),
            parent: Some(parent),
            step,
            agent: own_agent.clone().or(agent),
            tool: None,
            target: None,
            span_duration_ns: None,
            repeated_response: false,
        };
        let opened = |kind: SpanKind, agent: Option<String>| Span {
            id: placement.span,
            parent: Some(parent),
            kind,
            start_unix_ns: t,
            end_unix_ns: t,
            step,
            agent,
            open_seq: Some(seq),
            open: Some(event.body.clone()),
            close_seq: None,
            close: None,
            unfinished: true,
        };
        match &event.body {
            EventBody::SessionStart(s) if self.root.span.open.is_none() => {
                self.session_agent = s.agent.clone();
                self.parent_session = s.parent.clone();
                let r = &mut self.root.span;
                r.agent = s.agent.clone();
                r.open_seq = Some(seq);
                r.open = Some(event.body.clone());
                placement.span = r.id;
                placement.parent = None;
                placement.step = None;
                placement.agent = s.agent.clone();
            }
            EventBody::SessionEnd(_) if self.root.span.close.is_none() => {
                let r = &mut self.root.span;
                r.end_unix_ns = t;
                r.close_seq = Some(seq);
                r.close = Some(event.body.clone());
                r.unfinished = false;
                placement.span = r.id;
                placement.parent = None;
                placement.step = None;
                placement.span_duration_ns = Some(t.saturating_sub(r.start_unix_ns));
            }
            EventBody::StepStart(s) => {
                let span = opened(
                    SpanKind::Step,
                    s.agent.clone().or(self.session_agent.clone()),
                );
                placement.step = Some(s.step);
                self.steps.push((s.step, Open { span }));
            }
            EventBody::StepFinish(f) => self.finish_step(f.step, seq, event, &mut placement),
            EventBody::ToolCall(c) => {
                let span = opened(SpanKind::Tool, placement.agent.clone());
                placement.tool = Some(c.tool.clone());
                placement.target = c.target.clone();
                if let Some(old) = self.calls.insert(c.call_id.clone(), Open { span }) {
                    self.finish_span(old.span);
                }
            }
            EventBody::ToolResult(r) => match self.calls.remove(&r.call_id) {
                Some(o) => {
                    let mut s = o.span;
                    self.close_pair(&mut s, &mut placement, seq, event);
                    if let Some(EventBody::ToolCall(c)) = &s.open {
                        placement.tool = Some(c.tool.clone());
                        placement.target = c.target.clone();
                    }
                    self.finish_span(s);
                }
                None => self.point(seq, event, &placement),
            },
            EventBody::LlmRequest(r) => {
                let span = opened(SpanKind::Chat, placement.agent.clone());
                if let Some(old) = self.requests.insert(r.request_id.clone(), Open { span }) {
                    self.finish_span(old.span);
                }
            }
            EventBody::LlmResponse(r)
                if copy
                    || r.response_id
                        .as_ref()
                        .is_some_and(|id| !self.responses.insert(id.clone())) =>
            {
                placement.repeated_response = true;
                self.point(seq, event, &placement);
            }
            EventBody::LlmResponse(r) => match self.requests.remove(&r.request_id) {
                Some(o) => {
                    let mut s = o.span;
                    self.close_pair(&mut s, &mut placement, seq, event);
                    self.finish_span(s);
                }
                None => {
                    let mut span = opened(SpanKind::Chat, placement.agent.clone());
                    if let Some(ms) = r.latency_ms {
                        span.start_unix_ns = t.saturating_sub(ms_to_ns(ms));
                    }
                    span.unfinished = false;
                    self.finish_span(span);
                }
            },
            _ => self.point(seq, event, &placement),
        }
        placement
    }

    /// Closes step `step`'s span with its `step.finish`, and the steps left open inside
    /// it; a finish of no open step is a point of its own.
    fn finish_step(&mut self, step: u64, seq: u64, event: &Event, placement: &mut Placement) {
        let t = event.time_unix_ns;
        let Some(i) = self.steps.iter().rposition(|(n, _)| *n == step) else {
            self.point(seq, event, placement);
            return;
        };
        // Steps left open inside it end with it.
        while self.steps.len() > i + 1 {
            if let Some((_, inner)) = self.steps.pop() {
                let mut s = inner.span;
                s.end_unix_ns = t;
                self.finish_span(s);
            }
        }
        if let Some((n, o)) = self.steps.pop() {
            let mut s = o.span;
            placement.span = s.id;
            placement.parent = s.parent;
            placement.step = Some(n);
            placement.agent = s.agent.clone();
            placement.span_duration_ns = Some(t.saturating_sub(s.start_unix_ns));
            s.end_unix_ns = t;
            s.close_seq = Some(seq);
            s.close = Some(event.body.clone());
            s.unfinished = false;
            self.finish_span(s);
        }
    }

    /// Closes a tool or model call's span with its result.
    fn close_pair(&self, s: &mut Span, placement: &mut Placement, seq: u64, event: &Event) {
        let t = event.time_unix_ns;
        placement.span = s.id;
        placement.parent = s.parent;
        placement.step = s.step;
        placement.agent = s.agent.clone();
        placement.span_duration_ns = Some(t.saturating_sub(s.start_unix_ns));
        s.end_unix_ns = t.max(s.start_unix_ns);
        s.close_seq = Some(seq);
        s.close = Some(event.body.clone());
        s.unfinished = false;
    }

    /// An event that is a span of its own (with the duration it reports).
    fn point(&mut self, seq: u64, event: &Event, placement: &Placement) {
        if !self.keep_spans {
            return;
        }
        let t = event.time_unix_ns;
        let (start, end) = match &event.body {
            EventBody::VerificationRun(v) => {
                (t.saturating_sub(v.duration_ms.map_or(0, ms_to_ns)), t)
            }
            EventBody::GoalCheckRun(c) if c.started_unix_ns <= c.ended_unix_ns => {
                (c.started_unix_ns, c.ended_unix_ns)
            }
            _ => (t, t),
        };
        self.finished.push(Span {
            id: placement.span,
            parent: placement.parent,
            kind: SpanKind::Event,
            start_unix_ns: start,
            end_unix_ns: end,
            step: placement.step,
            agent: placement.agent.clone(),
            open_seq: Some(seq),
            open: Some(event.body.clone()),
            close_seq: None,
            close: None,
            unfinished: false,
        });
    }

    /// The spans finished since the last call, in the order they finished.
    pub fn take_finished(&mut self) -> Vec<Span> {
        std::mem::take(&mut self.finished)
    }

    /// Ends the fold: spans still open end at the session's last event, marked
    /// unfinished (tool calls and model calls first, in the order they began, then
    /// steps innermost first), then the root span. Returns nothing when the session
    /// had no event.
    pub fn finish(mut self) -> Vec<Span> {
        let Some(last) = self.last_unix_ns else {
            return Vec::new();
        };
        let mut out = std::mem::take(&mut self.finished);
        let mut calls: Vec<Span> = std::mem::take(&mut self.calls)
            .into_values()
            .chain(std::mem::take(&mut self.requests).into_values())
            .map(|o| o.span)
            .collect();
        calls.sort_by_key(|s| s.open_seq);
        for mut s in calls {
            s.end_unix_ns = last.max(s.start_unix_ns);
            out.push(s);
        }
        while let Some((_, o)) = self.steps.pop() {
            let mut s = o.span;
            s.end_unix_ns = last.max(s.start_unix_ns);
            out.push(s);
        }
        let mut root = self.root.span;
        if root.unfinished {
            root.end_unix_ns = last;
        }
        out.push(root);
        out
    }
}

fn ms_to_ns(ms: u64) -> i64 {
    i64::try_from(ms)
        .unwrap_or(i64::MAX / 1_000_000)
        .saturating_mul(1_000_000)
}

/// The agent an event names itself.
fn event_agent(body: &EventBody) -> Option<String> {
    match body {
        EventBody::SessionStart(s) => s.agent.clone(),
        EventBody::LlmRequest(r) => r.agent.clone(),
        EventBody::StepStart(s) => s.agent.clone(),
        EventBody::ToolCall(c) => c.agent.clone(),
        EventBody::AgentNotice(n) => n.agent.clone(),
        EventBody::AgentRoute(r) => Some(r.to.clone()),
        _ => None,
    }
}

/// Lower-case hexadecimal of an id.
pub fn id_hex(id: &[u8]) -> String {
    let mut s = String::with_capacity(id.len() * 2);
    for b in id {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
    s
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;
    use tacho_schema::*;

    fn ev(t: i64, body: EventBody) -> Event {
        Event {
            session: "s1".into(),
            time_unix_ns: t,
            body,
        }
    }

    fn session() -> Vec<Event> {
        vec![
            ev(
                10,
                EventBody::SessionStart(SessionStart {
                    agent: Some("build".into()),
                    ..Default::default()
                }),
            ),
            ev(
                20,
                EventBody::StepStart(StepStart {
                    step: 1,
                    agent: None,
                    title: None,
                }),
            ),
            ev(
                30,
                EventBody::ToolCall(ToolCall {
                    call_id: "c1".into(),
                    tool: "bash".into(),
                    target: None,
                    input: None,
                    agent: None,
                }),
            ),
            ev(
                35,
                EventBody::FileEdit(FileEdit {
                    path: "a.rs".into(),
                    op: EditOp::default(),
                    from: None,
                    tool: None,
                    call_id: None,
                    lines_added: None,
                    lines_removed: None,
                }),
            ),
            ev(
                40,
                EventBody::ToolResult(ToolResult {
                    call_id: "c1".into(),
                    status: ToolStatus::Ok,
                    duration_ms: None,
                    error: None,
                    output: None,
                    exit_code: None,
                }),
            ),
            ev(
                50,
                EventBody::ToolCall(ToolCall {
                    call_id: "c2".into(),
                    tool: "read".into(),
                    target: None,
                    input: None,
                    agent: None,
                }),
            ),
        ]
    }

    #[test]
    fn pairs_share_a_span_nested_in_their_step_and_open_spans_end_unfinished() {
        let mut f = AuditFold::new("s1", true);
        let placed: Vec<Placement> = session()
            .iter()
            .enumerate()
            .map(|(i, e)| f.apply(i as u64, e))
            .collect();
        let root = root_span_id("s1");
        assert_eq!(placed[0].span, root);
        assert_eq!(placed[0].parent, None);
        assert_eq!(placed[1].parent, Some(root));
        let step = placed[1].span;
        assert_eq!(placed[2].parent, Some(step));
        assert_eq!(
            placed[4].span, placed[2].span,
            "result shares the call's span"
        );
        assert_eq!(placed[4].tool.as_deref(), Some("bash"));
        assert_eq!(placed[4].span_duration_ns, Some(10));
        assert_eq!(
            placed[3].parent,
            Some(step),
            "a point event inside the step"
        );
        assert_eq!(placed[2].agent.as_deref(), Some("build"));
        assert_eq!(placed[2].step, Some(1));

        let mut spans = f.take_finished();
        spans.extend(f.finish());
        let kinds: Vec<(SpanKind, bool)> = spans.iter().map(|s| (s.kind, s.unfinished)).collect();
        assert_eq!(
            kinds,
            vec![
                (SpanKind::Event, false),
                (SpanKind::Tool, false),
                (SpanKind::Tool, true),
                (SpanKind::Step, true),
                (SpanKind::Session, true),
            ]
        );
        let call = &spans[1];
        assert_eq!((call.start_unix_ns, call.end_unix_ns), (30, 40));
        assert_eq!(spans[2].end_unix_ns, 50, "open spans end at the last event");
        assert_eq!(spans[4].start_unix_ns, 10);
    }

    #[test]
    fn ids_are_derived_from_session_and_sequence() {
        assert_eq!(trace_id("s1"), trace_id("s1"));
        assert_ne!(trace_id("s1"), trace_id("s2"));
        assert_ne!(span_id("s1", 1), span_id("s1", 2));
        assert_ne!(span_id("s1", 1), span_id("s2", 1));
        assert_eq!(id_hex(&[0, 0xab, 0x0f]), "00ab0f");
        // Pinned: exported ids must not change between versions (SPEC §14.2).
        assert_eq!(id_hex(&trace_id("s1")), "65d4b66d95fba4d583b294d9bd7fb258");
        assert_eq!(id_hex(&span_id("s1", 0)), "416a193d34ab4bcc");
        assert_eq!(id_hex(&root_span_id("s1")), "ab822c494e705117");
    }
}
