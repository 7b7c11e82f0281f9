//! `tacho audit export`: one JSON record per event (SPEC §14.1), streamed.

use std::io::Write;

use serde::Serialize;
use tacho_app::AuditRead;
use tacho_app::Tacho;
use tacho_app::types::StoredEvent;
use tacho_app::types::audit::{AUDIT_SCHEMA, Placement, id_hex, trace_id};
use tacho_schema::{EventBody, time_to_rfc3339};

use crate::{AHEAD_BYTES_MAX, Ahead, ExportError, Exported, Progress, Rendered, in_order};

/// Options of a JSON Lines export.
#[derive(Debug, Clone, Default)]
pub struct JsonlOptions {
    /// Cut tool and verification output to this many bytes (at a character boundary);
    /// the record says it was cut and how long the output was.
    pub max_output: Option<usize>,
}

/// Token usage of a model response, cache reads and writes apart.
#[derive(Debug, Serialize)]
struct Tokens {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
}

/// One audit record. Every key is always present (null when it does not apply), so
/// the records load as rows with fixed columns.
#[derive(Debug, Serialize)]
struct Record<'a> {
    schema: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    trace_id: &'a str,
    span_id: String,
    parent_span_id: Option<String>,
    session: &'a str,
    parent_session: Option<&'a str>,
    seq: u64,
    time: String,
    time_unix_ns: i64,
    step: Option<u64>,
    agent: Option<&'a str>,
    tool: Option<&'a str>,
    call_id: Option<&'a str>,
    target: Option<&'a str>,
    status: Option<&'static str>,
    duration_ms: Option<u64>,
    model: Option<&'a str>,
    tokens: Option<Tokens>,
    output: Option<&'a str>,
    output_bytes: Option<u64>,
    output_truncated: bool,
    /// The event in its own JSON form (SPEC §5.1) without its output (above); null
    /// for a kind this tacho does not know.
    event: Option<&'a EventBody>,
}

/// A session that could not be read to its end: what was exported of it stops here.
#[derive(Debug, Serialize)]
struct ErrorRecord<'a> {
    schema: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    session: &'a str,
    /// The events exported before the damage (their `seq` are 0..next_seq).
    next_seq: u64,
    error: String,
}

/// The outcome a record reports: a tool's status, a check's verdict, how a session
/// ended.
fn status_of(body: &EventBody) -> Option<&'static str> {
    Some(match body {
        EventBody::ToolResult(r) => r.status.as_str(),
        EventBody::VerificationRun(v) => v.status.as_str(),
        EventBody::SessionEnd(e) => e.reason.as_str(),
        EventBody::LlmResponse(r) => {
            if r.error.is_some() {
                "error"
            } else {
                "ok"
            }
        }
        EventBody::GoalCheckRun(c) => {
            if c.passed {
                "passed"
            } else {
                "failed"
            }
        }
        EventBody::GoalUpdate(u) => {
            if u.accepted {
                "accepted"
            } else {
                "refused"
            }
        }
        EventBody::PermissionReply(r) => r.decision.as_str(),
        EventBody::Error(e) => {
            if e.fatal {
                "fatal"
            } else {
                "error"
            }
        }
        _ => return None,
    })
}

fn ns_to_ms(ns: i64) -> u64 {
    u64::try_from(ns / 1_000_000).unwrap_or(0)
}

/// `s` cut to at most `max` bytes, at a character boundary.
pub(crate) fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default()
}

/// Appends one event's record (a line) to `out`.
fn write_record(
    out: &mut Vec<u8>,
    trace: &str,
    parent_session: Option<&str>,
    mut e: StoredEvent,
    p: &Placement,
    opts: &JsonlOptions,
) -> std::io::Result<()> {
    let output = match &mut e.event.body {
        EventBody::ToolResult(r) => r.output.take(),
        EventBody::VerificationRun(v) => v.output.take(),
        _ => None,
    };
    let body = &e.event.body;
    let (shown, truncated) = match (&output, opts.max_output) {
        (Some(o), Some(max)) if o.len() > max => (Some(cut(o, max)), true),
        (o, _) => (o.as_deref(), false),
    };
    let span_ms = p.span_duration_ns.map(ns_to_ms);
    let (call_id, target, tool, model, duration_ms) = match body {
        EventBody::ToolCall(c) => (Some(c.call_id.as_str()), None, None, None, None),
        EventBody::ToolResult(r) => (
            Some(r.call_id.as_str()),
            None,
            None,
            None,
            r.duration_ms.or(span_ms),
        ),
        EventBody::FileEdit(f) => (
            f.call_id.as_deref(),
            Some(f.path.as_str()),
            f.tool.as_deref(),
            None,
            None,
        ),
        EventBody::PermissionAsk(a) => (
            a.call_id.as_deref(),
            a.target.as_deref(),
            a.tool.as_deref(),
            None,
            None,
        ),
        EventBody::VerificationRun(v) => {
            (None, Some(v.command.as_str()), None, None, v.duration_ms)
        }
        EventBody::LlmRequest(r) => (None, None, None, Some(r.model.as_str()), None),
        EventBody::LlmResponse(r) => (
            None,
            None,
            None,
            r.model.as_deref(),
            r.latency_ms.or(span_ms),
        ),
        EventBody::GoalCheckRun(c) => (
            None,
            Some(c.command.as_str()),
            None,
            None,
            Some(ns_to_ms(c.ended_unix_ns.saturating_sub(c.started_unix_ns))),
        ),
        EventBody::StepFinish(_) | EventBody::SessionEnd(_) => (None, None, None, None, span_ms),
        _ => (None, None, None, None, None),
    };
    let tokens = match body {
        EventBody::LlmResponse(r) if !p.repeated_response => Some(Tokens {
            input: r.tokens_in,
            output: r.tokens_out,
            cache_read: r.cache_read,
            cache_write: r.cache_write,
        }),
        _ => None,
    };
    let record = Record {
        schema: AUDIT_SCHEMA,
        kind: body.kind_name(),
        trace_id: trace,
        span_id: id_hex(&p.span),
        parent_span_id: p.parent.map(|s| id_hex(&s)),
        session: &e.event.session,
        parent_session,
        seq: e.seq,
        time: time_to_rfc3339(e.event.time_unix_ns),
        time_unix_ns: e.event.time_unix_ns,
        step: p.step,
        agent: p.agent.as_deref(),
        tool: p.tool.as_deref().or(tool),
        call_id,
        target: p.target.as_deref().or(target),
        status: status_of(body),
        duration_ms,
        model,
        tokens,
        output: shown,
        output_bytes: output.as_ref().map(|o| o.len() as u64),
        output_truncated: truncated,
        event: match body {
            EventBody::Unknown { .. } => None,
            b => Some(b),
        },
    };
    serde_json::to_writer(&mut *out, &record)?;
    out.push(b'\n');
    Ok(())
}

/// Renders one session's records (and, if it is damaged, its `export.error` record)
/// through `emit`, a record at a time.
fn render_session(
    tacho: &Tacho,
    session: &str,
    opts: &JsonlOptions,
    emit: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<Rendered> {
    let trace = id_hex(&trace_id(session));
    let mut io_error: Option<std::io::Error> = None;
    let mut line = Vec::with_capacity(4096);
    let AuditRead { events, end: read } = tacho.audit_events(session, |e, p, parent| {
        if io_error.is_some() {
            return;
        }
        // One write per record: serde's many small writes stay in this buffer.
        line.clear();
        let written =
            write_record(&mut line, &trace, parent, e, p, opts).and_then(|()| emit(&line));
        if let Err(err) = written {
            io_error = Some(err);
        }
    });
    if let Some(e) = io_error {
        return Err(e);
    }
    let damage = match read {
        Ok(_) => None,
        Err(err) => {
            line.clear();
            serde_json::to_writer(
                &mut line,
                &ErrorRecord {
                    schema: AUDIT_SCHEMA,
                    kind: "export.error",
                    session,
                    next_seq: events,
                    error: err.to_string(),
                },
            )
            .map_err(std::io::Error::from)?;
            line.push(b'\n');
            emit(&line)?;
            Some(err.to_string())
        }
    };
    Ok(Rendered { events, damage })
}

/// Streams the records of `sessions` (in that order) to `out`. A session that cannot
/// be read to its end gets an `export.error` record after what could be read, and
/// is counted in [`Exported::damaged`]; the others are exported whole. Sessions are
/// rendered on every core (a bounded ordered pipeline); the output is the same bytes as
/// rendering them one by one.
pub fn export_jsonl(
    tacho: &Tacho,
    sessions: &[String],
    opts: &JsonlOptions,
    out: &mut dyn Write,
    progress: &mut Progress<'_>,
) -> Result<Exported, ExportError> {
    let mut done = Exported::default();
    let work = |i: usize| {
        let Some(session) = sessions.get(i) else {
            return Ahead::Large;
        };
        let mut buf = Vec::new();
        match render_session(tacho, session, opts, &mut |b| {
            if buf.len() + b.len() > AHEAD_BYTES_MAX {
                return Err(std::io::Error::other("too large to make ahead"));
            }
            buf.extend_from_slice(b);
            Ok(())
        }) {
            Ok(r) => Ahead::Ready((buf, r)),
            Err(_) => Ahead::Large,
        }
    };
    in_order(
        sessions.len(),
        work,
        |i, ahead| -> Result<(), ExportError> {
            let session = sessions.get(i).map_or("", String::as_str);
            let r = match ahead {
                Ahead::Ready((bytes, r)) => {
                    out.write_all(&bytes)?;
                    r
                }
                Ahead::Large => render_session(tacho, session, opts, &mut |b| out.write_all(b))?,
            };
            done.add(session, r);
            progress(i + 1, sessions.len(), done.events);
            Ok(())
        },
    )?;
    out.flush()?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn cuts_at_a_character_boundary() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("héllo", 3), "hé");
        assert_eq!(cut("abc", 10), "abc");
        assert_eq!(cut("", 0), "");
    }
}
