//! `tacho audit otlp`: sessions as OpenTelemetry traces (SPEC §14.3), to a collector
//! over OTLP/HTTP or to a file of OTLP JSON lines.
//!
//! Spans follow the OpenTelemetry GenAI semantic conventions at [`SEMCONV_SCHEMA_URL`]:
//! the session is `invoke_agent`, model calls are `chat` spans, tool calls are
//! `execute_tool` spans, steps and every other event are internal spans. Every span
//! carries the original times of its events, and its ids come from the span fold
//! (`tacho_projections::audit`): a re-export sends the same ids.

use std::io::{Read, Write};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Link, SpanKind as ProtoKind};
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use tacho_app::AuditRead;
use tacho_app::Tacho;
use tacho_app::types::audit::{self, SpanKind};
use tacho_schema::{EndReason, EventBody, ToolStatus, VerificationStatus};

use crate::{AHEAD_BYTES_MAX, Ahead, ExportError, Exported, Progress, Rendered, in_order};

/// The semantic conventions the spans follow (their `schema_url`). The GenAI cache
/// token attributes first appear in this version.
pub const SEMCONV_SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.40.0";

/// Spans per request.
pub const BATCH_SPANS: u32 = 512;

/// The wire encoding of OTLP/HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Protobuf,
    Json,
}

impl Protocol {
    pub fn parse(s: &str) -> Option<Protocol> {
        match s {
            "http/protobuf" => Some(Protocol::Protobuf),
            "http/json" => Some(Protocol::Json),
            _ => None,
        }
    }
}

/// Options of a trace export.
#[derive(Debug, Clone)]
pub struct OtlpOptions {
    /// Tool arguments and results are attached cut to this many bytes.
    pub max_output: usize,
    pub batch_spans: usize,
}

impl Default for OtlpOptions {
    fn default() -> Self {
        OtlpOptions {
            max_output: 4096,
            batch_spans: BATCH_SPANS as usize,
        }
    }
}

/// Where requests go.
pub trait Sink {
    /// The encoding it wants requests in.
    fn protocol(&self) -> Protocol;
    /// One `ExportTraceServiceRequest`, encoded (uncompressed).
    fn send(&mut self, request: &[u8]) -> Result<(), ExportError>;
}

/// OTLP JSON lines: one `ExportTraceServiceRequest` per line (the OTLP file format the
/// collector's file exporter writes).
pub struct FileSink<W: Write> {
    pub out: W,
}

impl<W: Write> FileSink<W> {
    pub fn new(out: W) -> Self {
        FileSink { out }
    }
}

impl<W: Write> Sink for FileSink<W> {
    fn protocol(&self) -> Protocol {
        Protocol::Json
    }

    fn send(&mut self, request: &[u8]) -> Result<(), ExportError> {
        self.out.write_all(request)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// Attributes under construction.
#[derive(Default)]
struct Attrs(Vec<KeyValue>);

impl Attrs {
    fn str(&mut self, key: &str, v: impl Into<String>) {
        self.0
            .push(kv(key, any_value::Value::StringValue(v.into())));
    }
    fn opt(&mut self, key: &str, v: Option<&str>) {
        if let Some(v) = v {
            self.str(key, v);
        }
    }
    fn int(&mut self, key: &str, v: u64) {
        self.0.push(kv(
            key,
            any_value::Value::IntValue(i64::try_from(v).unwrap_or(i64::MAX)),
        ));
    }
    fn bool(&mut self, key: &str, v: bool) {
        self.0.push(kv(key, any_value::Value::BoolValue(v)));
    }
    fn strs(&mut self, key: &str, v: &[&str]) {
        let values = v
            .iter()
            .map(|s| AnyValue {
                value: Some(any_value::Value::StringValue((*s).to_string())),
            })
            .collect();
        self.0
            .push(kv(key, any_value::Value::ArrayValue(ArrayValue { values })));
    }
    /// The event's scalar fields as `tacho.event.<field>` (strings cut to `max`).
    fn fields(&mut self, body: &EventBody, max: usize) {
        let Ok(serde_json::Value::Object(m)) = serde_json::to_value(body) else {
            return;
        };
        for (k, v) in m {
            let key = format!("tacho.event.{k}");
            match v {
                serde_json::Value::String(s) if k == "type" => self.str("tacho.event.type", s),
                serde_json::Value::String(s) => self.str(&key, crate::jsonl::cut(&s, max)),
                serde_json::Value::Bool(b) => self.bool(&key, b),
                serde_json::Value::Number(n) => match n.as_i64() {
                    Some(i) => self.0.push(kv(&key, any_value::Value::IntValue(i))),
                    None => self.0.push(kv(
                        &key,
                        any_value::Value::DoubleValue(n.as_f64().unwrap_or_default()),
                    )),
                },
                _ => {}
            }
        }
    }
}

/// The provider of a model call: as recorded, else from the model's family.
fn provider(recorded: Option<&str>, model: Option<&str>) -> Option<String> {
    if let Some(p) = recorded {
        return Some(p.to_string());
    }
    let m = model?.to_ascii_lowercase();
    Some(
        if m.starts_with("claude") {
            "anthropic"
        } else if m.starts_with("gpt")
            || m.starts_with("o1")
            || m.starts_with("o3")
            || m.starts_with("o4")
            || m.contains("codex")
        {
            "openai"
        } else if m.starts_with("gemini") {
            "gcp.gemini"
        } else {
            return None;
        }
        .to_string(),
    )
}

fn time(ns: i64) -> u64 {
    u64::try_from(ns).unwrap_or(0)
}

fn error_status(message: impl Into<String>) -> Option<Status> {
    Some(Status {
        message: message.into(),
        code: StatusCode::Error as i32,
    })
}

/// One finished span of the fold as an OTLP span.
pub fn to_proto(
    session: &str,
    trace: &audit::TraceId,
    s: &audit::Span,
    opts: &OtlpOptions,
) -> Span {
    let mut a = Attrs::default();
    let mut name = String::new();
    let mut kind = ProtoKind::Internal;
    let mut status = None;
    let mut links = Vec::new();
    a.str("tacho.session.id", session);
    if let Some(seq) = s.open_seq {
        a.int("tacho.event.seq", seq);
    }
    if let Some(seq) = s.close_seq {
        a.int("tacho.event.close_seq", seq);
    }
    if let Some(n) = s.step {
        a.int("tacho.step", n);
    }
    a.opt("gen_ai.agent.name", s.agent.as_deref());
    if s.unfinished {
        a.bool("tacho.unfinished", true);
    }
    match (s.kind, &s.open, &s.close) {
        (SpanKind::Session, open, close) => {
            name = match &s.agent {
                Some(agent) => format!("invoke_agent {agent}"),
                None => "invoke_agent".into(),
            };
            a.str("gen_ai.operation.name", "invoke_agent");
            a.str("gen_ai.conversation.id", session);
            if let Some(EventBody::SessionStart(st)) = open {
                a.opt("gen_ai.request.model", st.model.as_deref());
                a.opt("tacho.workspace", st.workspace.as_deref());
                a.opt("tacho.project", st.project.as_deref());
                a.opt("tacho.title", st.title.as_deref());
                a.opt("tacho.source", st.source.as_deref());
                if let Some(p) = &st.parent {
                    a.str("tacho.parent_session", p.as_str());
                    links.push(Link {
                        trace_id: audit::trace_id(p).to_vec(),
                        span_id: audit::root_span_id(p).to_vec(),
                        attributes: vec![kv(
                            "tacho.link",
                            any_value::Value::StringValue("parent_session".into()),
                        )],
                        ..Default::default()
                    });
                }
            }
            if let Some(EventBody::SessionEnd(e)) = close {
                a.str("tacho.end_reason", e.reason.as_str());
                if matches!(e.reason, EndReason::Error) {
                    a.str("error.type", "_OTHER");
                    status = error_status(e.message.clone().unwrap_or_default());
                }
            }
        }
        (SpanKind::Step, open, close) => {
            if let Some(EventBody::StepStart(st)) = open {
                name = format!("step {}", st.step);
                a.opt("tacho.step.title", st.title.as_deref());
            }
            if let Some(EventBody::StepFinish(f)) = close {
                a.opt("tacho.step.finish_reason", f.reason.as_deref());
            }
        }
        (SpanKind::Tool, open, close) => {
            a.str("gen_ai.operation.name", "execute_tool");
            a.str("gen_ai.conversation.id", session);
            if let Some(EventBody::ToolCall(c)) = open {
                name = format!("execute_tool {}", c.tool);
                a.str("gen_ai.tool.name", c.tool.as_str());
                a.str("gen_ai.tool.call.id", c.call_id.as_str());
                a.str("gen_ai.tool.type", "function");
                a.opt("tacho.tool.target", c.target.as_deref());
                if let Some(input) = &c.input {
                    a.str(
                        "gen_ai.tool.call.arguments",
                        crate::jsonl::cut(input, opts.max_output),
                    );
                }
            }
            if let Some(EventBody::ToolResult(r)) = close {
                a.str("tacho.tool.status", r.status.as_str());
                if let Some(code) = r.exit_code {
                    a.0.push(kv("tacho.tool.exit_code", any_value::Value::IntValue(code)));
                }
                if let Some(out) = &r.output {
                    a.str(
                        "gen_ai.tool.call.result",
                        crate::jsonl::cut(out, opts.max_output),
                    );
                    a.int("tacho.tool.output_bytes", out.len() as u64);
                }
                if r.status != ToolStatus::Ok {
                    a.str("error.type", r.status.as_str());
                    status = error_status(r.error.clone().unwrap_or_default());
                }
            }
        }
        (SpanKind::Chat, open, close) => {
            kind = ProtoKind::Client;
            a.str("gen_ai.operation.name", "chat");
            a.str("gen_ai.conversation.id", session);
            let mut model = None;
            let mut recorded_provider = None;
            let response = match (open, close) {
                (Some(EventBody::LlmRequest(r)), close) => {
                    model = Some(r.model.clone());
                    recorded_provider = r.provider.clone();
                    a.str("gen_ai.request.model", r.model.as_str());
                    a.str("tacho.request_id", r.request_id.as_str());
                    match close {
                        Some(EventBody::LlmResponse(resp)) => Some(resp),
                        _ => None,
                    }
                }
                (Some(EventBody::LlmResponse(resp)), _) => Some(resp),
                _ => None,
            };
            if let Some(r) = response {
                if model.is_none() {
                    model = r.model.clone();
                }
                a.opt("gen_ai.response.model", r.model.as_deref());
                a.opt("gen_ai.response.id", r.response_id.as_deref());
                // The convention counts cached tokens (read and written) as input;
                // tacho records them apart (SPEC §5.1).
                a.int(
                    "gen_ai.usage.input_tokens",
                    r.tokens_in
                        .saturating_add(r.cache_read)
                        .saturating_add(r.cache_write),
                );
                a.int("gen_ai.usage.output_tokens", r.tokens_out);
                a.int("gen_ai.usage.cache_read.input_tokens", r.cache_read);
                a.int("gen_ai.usage.cache_creation.input_tokens", r.cache_write);
                if let Some(reason) = &r.stop_reason {
                    a.strs("gen_ai.response.finish_reasons", &[reason.as_str()]);
                }
                if let Some(e) = &r.error {
                    a.str("error.type", "_OTHER");
                    status = error_status(e.as_str());
                }
            }
            a.opt(
                "gen_ai.provider.name",
                provider(recorded_provider.as_deref(), model.as_deref()).as_deref(),
            );
            name = match &model {
                Some(m) => format!("chat {m}"),
                None => "chat".into(),
            };
        }
        (SpanKind::Event, Some(body), _) => {
            name = body.kind_name().to_string();
            a.fields(body, opts.max_output);
            match body {
                EventBody::Error(e) => {
                    a.str("error.type", e.code.as_deref().unwrap_or("_OTHER"));
                    status = error_status(e.message.as_str());
                }
                EventBody::VerificationRun(v)
                    if matches!(
                        v.status,
                        VerificationStatus::Failed | VerificationStatus::Error
                    ) =>
                {
                    a.str("error.type", v.status.as_str());
                    status = error_status(format!("{} {}", v.command, v.status));
                }
                EventBody::GoalCheckRun(c) if !c.passed => {
                    a.str("error.type", "check_failed");
                    status = error_status(format!("check {} did not pass", c.check));
                }
                _ => {}
            }
        }
        (SpanKind::Event, None, _) => name = "event".into(),
    }
    if name.is_empty() {
        name = format!("{:?}", s.kind).to_ascii_lowercase();
    }
    Span {
        trace_id: trace.to_vec(),
        span_id: s.id.to_vec(),
        parent_span_id: s.parent.map(|p| p.to_vec()).unwrap_or_default(),
        name,
        kind: kind as i32,
        start_time_unix_nano: time(s.start_unix_ns),
        end_time_unix_nano: time(s.end_unix_ns.max(s.start_unix_ns)),
        attributes: a.0,
        links,
        status,
        ..Default::default()
    }
}

/// Requests under construction: encoded chunks of `ResourceSpans` (one session's
/// spans each, at most a batch), joined into one request when the batch is full.
struct Batcher<'s> {
    sink: &'s mut dyn Sink,
    pending: Vec<Vec<u8>>,
    spans: usize,
    limit: usize,
    pub requests: u64,
}

impl Batcher<'_> {
    fn add(&mut self, chunk: Vec<u8>, spans: usize) -> Result<(), ExportError> {
        if self.spans + spans > self.limit && !self.pending.is_empty() {
            self.flush()?;
        }
        self.pending.push(chunk);
        self.spans += spans;
        if self.spans >= self.limit {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ExportError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        // An ExportTraceServiceRequest is its `resource_spans` (field 1), each encoded
        // whole: in protobuf, the field encodings one after another; in the OTLP JSON
        // mapping, the array of their JSON forms.
        let body = match self.sink.protocol() {
            Protocol::Protobuf => self.pending.concat(),
            Protocol::Json => {
                let mut b = b"{\"resourceSpans\":[".to_vec();
                b.extend_from_slice(&self.pending.join(&b","[..]));
                b.extend_from_slice(b"]}");
                b
            }
        };
        self.pending.clear();
        self.spans = 0;
        self.requests += 1;
        self.sink.send(&body)
    }
}

/// Makes one session's spans, encoded in chunks of at most `limit` spans (one
/// `ResourceSpans` each), handed to `emit` as they fill.
fn render_session(
    tacho: &Tacho,
    session: &str,
    opts: &OtlpOptions,
    protocol: Protocol,
    emit: &mut dyn FnMut(Vec<u8>, usize) -> Result<(), ExportError>,
) -> Result<Rendered, ExportError> {
    let limit = opts.batch_spans.max(1);
    let trace = audit::trace_id(session);
    let mut chunk = resource_spans(session);
    let mut failed: Option<ExportError> = None;
    let mut push = |chunk: &mut ResourceSpans, span: Span| -> Result<(), ExportError> {
        let spans = &mut chunk.scope_spans[0].spans;
        spans.push(span);
        if spans.len() >= limit {
            let n = spans.len();
            emit(encode(chunk, protocol)?, n)?;
            chunk.scope_spans[0].spans.clear();
        }
        Ok(())
    };
    let AuditRead { events, end: read } = tacho.audit_spans(session, |s| {
        if failed.is_some() {
            return;
        }
        if let Err(err) = push(&mut chunk, to_proto(session, &trace, &s, opts)) {
            failed = Some(err);
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    let rest = chunk.scope_spans[0].spans.len();
    if rest > 0 {
        emit(encode(&chunk, protocol)?, rest)?;
    }
    Ok(Rendered {
        events,
        damage: read.err().map(|e| e.to_string()),
    })
}

/// One `ResourceSpans` as the request's field 1 (protobuf) or as JSON.
fn encode(rs: &ResourceSpans, protocol: Protocol) -> Result<Vec<u8>, ExportError> {
    Ok(match protocol {
        Protocol::Protobuf => {
            let mut b = Vec::with_capacity(rs.encoded_len() + 8);
            prost::encoding::message::encode(1, rs, &mut b);
            b
        }
        Protocol::Json => serde_json::to_vec(rs).map_err(std::io::Error::from)?,
    })
}

/// The resource and scope of one session's spans.
fn resource_spans(session: &str) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![
                kv(
                    "service.name",
                    any_value::Value::StringValue("tacho".into()),
                ),
                kv(
                    "tacho.session.id",
                    any_value::Value::StringValue(session.to_string()),
                ),
            ],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            scope: Some(InstrumentationScope {
                name: "tacho".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            }),
            spans: Vec::new(),
            schema_url: SEMCONV_SCHEMA_URL.into(),
        }],
        schema_url: SEMCONV_SCHEMA_URL.into(),
    }
}

/// Sends the traces of `sessions` (in that order) to `sink`, in batches of at most
/// `batch_spans` spans. Spans are made and encoded on every core
/// (a bounded ordered pipeline) and sent in session order. A session that cannot be read to
/// its end is sent up to its damage (its open spans end there, marked unfinished) and
/// counted in [`Exported::damaged`].
pub fn export_otlp(
    tacho: &Tacho,
    sessions: &[String],
    opts: &OtlpOptions,
    sink: &mut dyn Sink,
    progress: &mut Progress<'_>,
) -> Result<(Exported, u64), ExportError> {
    let protocol = sink.protocol();
    let mut done = Exported::default();
    let mut batch = Batcher {
        sink,
        pending: Vec::new(),
        spans: 0,
        limit: opts.batch_spans.max(1),
        requests: 0,
    };
    let work = |i: usize| {
        let Some(session) = sessions.get(i) else {
            return Ahead::Large;
        };
        let mut chunks: Vec<(Vec<u8>, usize)> = Vec::new();
        let mut bytes = 0usize;
        match render_session(tacho, session, opts, protocol, &mut |c, n| {
            bytes += c.len();
            if bytes > AHEAD_BYTES_MAX {
                return Err(ExportError::Write(std::io::Error::other(
                    "too large to make ahead",
                )));
            }
            chunks.push((c, n));
            Ok(())
        }) {
            Ok(r) => Ahead::Ready((chunks, r)),
            Err(_) => Ahead::Large,
        }
    };
    in_order(
        sessions.len(),
        work,
        |i, ahead| -> Result<(), ExportError> {
            let session = sessions.get(i).map_or("", String::as_str);
            let r = match ahead {
                Ahead::Ready((chunks, r)) => {
                    for (c, n) in chunks {
                        batch.add(c, n)?;
                    }
                    r
                }
                Ahead::Large => {
                    render_session(tacho, session, opts, protocol, &mut |c, n| batch.add(c, n))?
                }
            };
            done.add(session, r);
            progress(i + 1, sessions.len(), done.events);
            Ok(())
        },
    )?;
    batch.flush()?;
    Ok((done, batch.requests))
}

/// Why sending to a collector failed.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("{url}: the collector rejected the request (HTTP {status}): {body}")]
    Rejected {
        url: String,
        status: u16,
        body: String,
    },
    /// OTLP defines no redirects: one is not followed (the request and its headers go
    /// nowhere else) and fails the export.
    #[error(
        "{url}: the collector answered HTTP {status}, a redirect to {location}; OTLP has no redirects, so nothing was sent there (give the collector's own URL)"
    )]
    Redirected {
        url: String,
        status: u16,
        location: String,
    },
    #[error("{url}: still failing after {attempts} attempts: {last}")]
    GaveUp {
        url: String,
        attempts: u32,
        last: String,
    },
}

/// OTLP/HTTP: gzip, retries on 429, 502, 503 and 504 (and on connection failures)
/// with exponential backoff, honouring `Retry-After`; never on 400. Success is a 2xx
/// answer and nothing else; redirects are not followed (OTLP defines none, and the
/// user's headers must not reach another origin). Everything the collector says that
/// is shown is [`printable`] and cut.
pub struct HttpSink {
    agent: ureq::Agent,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub protocol: Protocol,
    pub max_attempts: u32,
    /// The first backoff; doubled at each retry, at most [`HttpSink::backoff_max`].
    pub backoff: Duration,
    pub backoff_max: Duration,
    /// Spans the collector reported rejecting (partial success), with its messages.
    pub rejected_spans: i64,
    pub messages: Vec<String>,
    pub retries: u32,
}

impl HttpSink {
    pub fn new(url: String, headers: Vec<(String, String)>, protocol: Protocol) -> HttpSink {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        HttpSink {
            agent,
            url,
            headers,
            protocol,
            max_attempts: 6,
            backoff: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            rejected_spans: 0,
            messages: Vec::new(),
            retries: 0,
        }
    }

    fn body(&self, request: &[u8]) -> Result<Vec<u8>, ExportError> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(request)?;
        Ok(gz.finish()?)
    }

    fn content_type(&self) -> &'static str {
        match self.protocol {
            Protocol::Protobuf => "application/x-protobuf",
            Protocol::Json => "application/json",
        }
    }

    /// Reads a success response's partial-success report, if any. An answer that is
    /// not an `ExportTraceServiceResponse` (an empty one is) is reported.
    fn partial(&mut self, bytes: &[u8]) {
        let response = match self.protocol {
            Protocol::Protobuf => ExportTraceServiceResponse::decode(bytes).ok(),
            Protocol::Json if bytes.iter().all(u8::is_ascii_whitespace) => {
                Some(ExportTraceServiceResponse::default())
            }
            Protocol::Json => serde_json::from_slice::<JsonResponse>(bytes)
                .ok()
                .map(JsonResponse::into_proto),
        };
        let Some(response) = response else {
            if self.messages.len() < MESSAGES_MAX {
                self.messages.push(format!(
                    "({} bytes that are not an OTLP ExportTraceServiceResponse)",
                    bytes.len()
                ));
            }
            return;
        };
        if let Some(p) = response.partial_success {
            // A negative count is nonsense and must not hide an earlier rejection.
            self.rejected_spans = self.rejected_spans.saturating_add(p.rejected_spans.max(0));
            if !p.error_message.is_empty() && self.messages.len() < MESSAGES_MAX {
                self.messages
                    .push(printable(&p.error_message, COLLECTOR_TEXT_MAX));
            }
        }
    }
}

/// At most this many characters of what a collector says are shown.
pub const COLLECTOR_TEXT_MAX: usize = 500;
/// At most this many partial-success messages are kept.
const MESSAGES_MAX: usize = 20;

/// `text` fit for a terminal: control characters (C0, DEL, C1 — escape sequences
/// start with them) and the bidirectional overrides that reorder what is shown are
/// written as `\u{..}` escapes, and the result is cut to `max` characters (`…` then
/// ends it). For anything a server says that tacho shows.
pub fn printable(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n >= max {
            out.push('…');
            break;
        }
        if c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// An `ExportTraceServiceResponse` in the OTLP JSON mapping, where a 64-bit integer is
/// a string (`"rejectedSpans":"7"`, as the collector writes it) or a number.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct JsonResponse {
    partial_success: Option<JsonPartial>,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct JsonPartial {
    rejected_spans: Option<serde_json::Value>,
    error_message: String,
}

impl JsonResponse {
    fn into_proto(self) -> ExportTraceServiceResponse {
        ExportTraceServiceResponse {
            partial_success: self.partial_success.map(|p| {
                let rejected_spans = match &p.rejected_spans {
                    Some(serde_json::Value::Number(n)) => n.as_i64().unwrap_or(i64::MAX),
                    Some(serde_json::Value::String(s)) => s.trim().parse().unwrap_or(i64::MAX),
                    _ => 0,
                };
                ExportTracePartialSuccess {
                    rejected_spans,
                    error_message: p.error_message,
                }
            }),
        }
    }
}

/// A `Retry-After` value: seconds, or an HTTP date.
fn retry_after(value: &str) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

impl Sink for HttpSink {
    fn protocol(&self) -> Protocol {
        self.protocol
    }

    fn send(&mut self, request: &[u8]) -> Result<(), ExportError> {
        let body = self.body(request)?;
        let mut wait = self.backoff;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut req = self
                .agent
                .post(&self.url)
                .header("Content-Type", self.content_type())
                .header("Content-Encoding", "gzip")
                .header("User-Agent", concat!("tacho/", env!("CARGO_PKG_VERSION")));
            for (k, v) in &self.headers {
                req = req.header(k.as_str(), v.as_str());
            }
            let (retryable, hint, last) = match req.send(&body[..]) {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    let hint = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(retry_after);
                    let mut bytes = Vec::new();
                    let _ = resp
                        .body_mut()
                        .as_reader()
                        .take(1 << 20)
                        .read_to_end(&mut bytes);
                    if (200..300).contains(&status) {
                        self.partial(&bytes);
                        return Ok(());
                    }
                    if (300..400).contains(&status) {
                        let location = resp
                            .headers()
                            .get("location")
                            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                        return Err(ExportError::Send(SendError::Redirected {
                            url: self.url.clone(),
                            status,
                            location: location.map_or_else(
                                || "nowhere (no Location)".into(),
                                |l| printable(&l, COLLECTOR_TEXT_MAX),
                            ),
                        }));
                    }
                    let text = printable(&String::from_utf8_lossy(&bytes), COLLECTOR_TEXT_MAX);
                    if matches!(status, 429 | 502 | 503 | 504) {
                        (true, hint, format!("HTTP {status}: {text}"))
                    } else {
                        return Err(ExportError::Send(SendError::Rejected {
                            url: self.url.clone(),
                            status,
                            body: text,
                        }));
                    }
                }
                // The network failing is worth another try; a URL, TLS or protocol
                // error is not.
                Err(
                    e @ (ureq::Error::Io(_)
                    | ureq::Error::Timeout(_)
                    | ureq::Error::HostNotFound
                    | ureq::Error::ConnectionFailed
                    | ureq::Error::BodyStalled),
                ) => (true, None, printable(&e.to_string(), COLLECTOR_TEXT_MAX)),
                Err(e) => (false, None, printable(&e.to_string(), COLLECTOR_TEXT_MAX)),
            };
            if !retryable || attempt >= self.max_attempts {
                return Err(ExportError::Send(SendError::GaveUp {
                    url: self.url.clone(),
                    attempts: attempt,
                    last,
                }));
            }
            self.retries += 1;
            std::thread::sleep(hint.unwrap_or(wait).min(self.backoff_max));
            wait = (wait * 2).min(self.backoff_max);
        }
    }
}

/// The traces endpoint: `--endpoint` (a base URL, or one already ending in
/// `/v1/traces`), else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, else
/// `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` appended.
pub fn endpoint(given: Option<&str>, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    let base = |b: &str| {
        let b = b.trim_end_matches('/');
        if b.ends_with("/v1/traces") {
            b.to_string()
        } else {
            format!("{b}/v1/traces")
        }
    };
    if let Some(g) = given {
        return Some(base(g));
    }
    if let Some(t) = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").filter(|s| !s.is_empty()) {
        return Some(t);
    }
    env("OTEL_EXPORTER_OTLP_ENDPOINT")
        .filter(|s| !s.is_empty())
        .map(|b| base(&b))
}

/// Checks a traces URL before anything is read or sent: http or https, and a URL.
pub fn check_endpoint(url: &str) -> Result<(), String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(format!(
            "endpoint {url:?} is not an http:// or https:// URL"
        ));
    }
    match url.parse::<ureq::http::Uri>() {
        Ok(u) if u.host().is_some_and(|h| !h.is_empty()) => Ok(()),
        Ok(_) => Err(format!("endpoint {url:?} names no host")),
        Err(e) => Err(format!("endpoint {url:?} is not a URL: {e}")),
    }
}

/// Headers from `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_TRACES_HEADERS`
/// (`k=v,k2=v2`, values percent-decoded), then the given `K=V` ones; a later one
/// replaces an earlier one of the same name.
pub fn headers(
    given: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut put = |k: &str, v: String| {
        let k = k.trim().to_string();
        out.retain(|(old, _)| !old.eq_ignore_ascii_case(&k));
        out.push((k, v));
    };
    for var in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        if let Some(list) = env(var) {
            for pair in list.split(',').filter(|p| !p.trim().is_empty()) {
                let (k, v) = pair
                    .split_once('=')
                    .ok_or_else(|| format!("{var}: {pair:?} is not key=value"))?;
                put(k, percent_decode(v.trim()));
            }
        }
    }
    for h in given {
        let (k, v) = h
            .split_once('=')
            .ok_or_else(|| format!("--header {h:?} is not K=V"))?;
        if k.trim().is_empty() {
            return Err(format!("--header {h:?} has no name"));
        }
        put(k, v.to_string());
    }
    Ok(out)
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_precedence() {
        let env = |k: &str| match k {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://c:4318/".to_string()),
            _ => None,
        };
        assert_eq!(
            endpoint(None, &env).as_deref(),
            Some("http://c:4318/v1/traces")
        );
        assert_eq!(
            endpoint(Some("http://x:1/v1/traces"), &env).as_deref(),
            Some("http://x:1/v1/traces")
        );
        let env2 = |k: &str| match k {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" => Some("http://t:9/custom".to_string()),
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://c:4318".to_string()),
            _ => None,
        };
        assert_eq!(endpoint(None, &env2).as_deref(), Some("http://t:9/custom"));
        assert_eq!(endpoint(None, &|_| None), None);
        assert!(check_endpoint("http://127.0.0.1:4318/v1/traces").is_ok());
        assert!(check_endpoint("https://collector.example/v1/traces").is_ok());
        assert!(check_endpoint("http://exa mple/v1/traces").is_err());
        assert!(check_endpoint("ftp://x/v1/traces").is_err());
        assert!(check_endpoint("http:///v1/traces").is_err());
    }

    #[test]
    fn headers_from_env_and_flags() {
        let env = |k: &str| match k {
            "OTEL_EXPORTER_OTLP_HEADERS" => Some("api-key=a%20b, x=1".to_string()),
            _ => None,
        };
        let h = headers(&["X=2".into()], &env).unwrap();
        assert_eq!(
            h,
            vec![("api-key".into(), "a b".into()), ("X".into(), "2".into())]
        );
        assert!(headers(&["nope".into()], &|_| None).is_err());
    }

    #[test]
    fn printable_escapes_controls_and_bidi_and_cuts() {
        assert_eq!(printable("ok: fine", 100), "ok: fine");
        assert_eq!(
            printable("\u{1b}[2Jx\u{7}\u{9b}\u{202e}y\n", 100),
            "\\u{1b}[2Jx\\u{7}\\u{9b}\\u{202e}y\\u{a}"
        );
        assert_eq!(printable("abcdef", 3), "abc…");
        assert_eq!(printable("é😀", 2), "é😀");
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
    }
}
