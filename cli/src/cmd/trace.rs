//! `tacho session trace`: a risk-scored timeline of a session from its events, or with
//! `--logs`, an analysis of conventional log files (for operational problems).

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use tacho_projections::{ExecutionGraph, assess};
use tacho_schema::{EndReason, EventBody, ToolStatus};

use tacho_app::render::{route, since, thousands, tool_duration};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The session (its id, or any unique prefix of it).
    #[arg(required_unless_present = "logs")]
    pub session: Option<String>,
    /// Analyse log files (JSON Lines or text; a file or a directory) instead of events.
    #[arg(long)]
    pub logs: Option<PathBuf>,
    /// Operations at least this slow are listed (milliseconds).
    #[arg(long, default_value_t = 1000)]
    pub slow_ms: u64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: TraceArgs) -> Result<(), CliError> {
    let mut out = Out::new();
    if let Some(path) = &a.logs {
        let report = tacho_app::analyse_logs(path, a.slow_ms)?;
        if a.json {
            out.typed("log_report", &report)?;
        } else {
            out.line(render_logs(&report).trim_end())?;
        }
        return out.finish();
    }
    let tacho = crate::open()?;
    let session = tacho.resolve_session(a.session.as_deref().unwrap_or_default())?;
    let events = tacho.events(&session)?;
    let mut g = ExecutionGraph::new(&session);
    for e in &events {
        g.apply(e.seq, &e.event);
    }
    let risk = assess(&g);
    // Results by call id, to print each call once with its outcome.
    let results: BTreeMap<&str, &tacho_projections::ToolNode> =
        g.tools().map(|(_, t)| (t.call_id.as_str(), t)).collect();
    let start = events.first().map_or(0, |e| e.event.time_unix_ns);
    let mut responses_seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    let mut rows = Vec::new();
    for e in &events {
        let at = since(start, e.event.time_unix_ns);
        let (tag, text, flag) = match &e.event.body {
            EventBody::SessionStart(s) => (
                "START",
                format!(
                    "{}{}",
                    s.agent.as_deref().unwrap_or("-"),
                    s.title
                        .as_ref()
                        .map(|t| format!(" \"{t}\""))
                        .unwrap_or_default()
                ),
                "",
            ),
            EventBody::AgentRoute(r) => ("ROUTE", route(r.from.as_deref(), &r.to), ""),
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
                ("MODEL", text, if r.error.is_some() { "!" } else { "" })
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
                let failed = status.is_none_or(|s| s != ToolStatus::Ok);
                (
                    "TOOL",
                    format!(
                        "{} {}  {outcome}{}{}",
                        c.tool,
                        c.target.as_deref().unwrap_or(""),
                        dur.map(|d| format!(" {d}ms")).unwrap_or_default(),
                        err.map(|e| format!(": {}", e.lines().next().unwrap_or("")))
                            .unwrap_or_default()
                    ),
                    if failed { "!" } else { "" },
                )
            }
            EventBody::VerificationRun(v) => (
                "VERIFY",
                format!("{} {}", v.command, v.status),
                if v.status == tacho_schema::VerificationStatus::Passed {
                    ""
                } else {
                    "!"
                },
            ),
            EventBody::Error(er) => (
                "ERROR",
                er.message.lines().next().unwrap_or("").to_string(),
                "!",
            ),
            EventBody::PermissionReply(p) if p.decision == tacho_schema::Decision::Deny => {
                ("DENIED", p.request_id.clone(), "!")
            }
            EventBody::GoalCreated(gc) => {
                ("GOAL", format!("{} {}: {}", gc.goal, gc.kind, gc.title), "")
            }
            EventBody::GoalCheckRun(r) => (
                "CHECK",
                format!(
                    "{} {}{}",
                    r.check,
                    if r.passed { "passed" } else { "failed" },
                    r.exit_code
                        .map(|c| format!(" (exit {c})"))
                        .unwrap_or_else(|| if r.timed_out {
                            " (timed out)".into()
                        } else {
                            String::new()
                        })
                ),
                if r.passed { "" } else { "!" },
            ),
            EventBody::GoalUpdate(u) => {
                let reason = u.reason.clone().unwrap_or_default();
                match (u.action, u.accepted) {
                    (tacho_schema::GoalAction::Complete, true) => {
                        ("GATE", format!("completion accepted: {reason}"), "")
                    }
                    (tacho_schema::GoalAction::Complete, false) => {
                        ("GATE", format!("completion refused: {reason}"), "!")
                    }
                    (tacho_schema::GoalAction::Pause, true) => ("PAUSE", reason, "!"),
                    // A pause not accepted is a resume (`tacho goal resume`).
                    (tacho_schema::GoalAction::Pause, false) => ("RESUME", reason, ""),
                    (tacho_schema::GoalAction::Block, _) => ("BLOCK", reason, "!"),
                }
            }
            EventBody::SessionEnd(en) => match en.reason {
                EndReason::GateBlocked => (
                    "GATE",
                    "completion gate blocked the session".to_string(),
                    "!",
                ),
                r => (
                    "END",
                    r.to_string(),
                    if r == EndReason::Completed { "" } else { "!" },
                ),
            },
            _ => continue,
        };
        rows.push((e.seq, at, tag, text, flag));
    }
    if a.json {
        for (seq, at, tag, text, flag) in &rows {
            out.json(&serde_json::json!({"type": "trace", "seq": seq, "at": at.trim(), "kind": tag.to_lowercase(), "text": text, "flagged": !flag.is_empty()}))?;
        }
        out.json(&serde_json::json!({"type": "risk", "score": risk.score, "level": risk.level}))?;
        return out.finish();
    }
    out.line(format!(
        "Trace of session {session} | Risk: {} ({}/100)",
        risk.level.as_str(),
        risk.score
    ))?;
    for (_, at, tag, text, flag) in &rows {
        out.line(format!("{at} {flag:1} {tag:<7} {text}"))?;
    }
    let failed = g
        .tools()
        .filter(|(_, t)| t.status.is_some_and(|s| s != ToolStatus::Ok))
        .count();
    let slowest = g.tools().max_by_key(|(_, t)| t.duration_ms.unwrap_or(0));
    out.line(format!(
        "\n{} tool calls ({failed} failed), {} model calls ({} in / {} out tokens), {} route(s), {} error(s){}",
        g.tools().count(),
        g.model_calls,
        thousands(g.tokens.input),
        thousands(g.tokens.output),
        g.routes.len(),
        g.errors.len(),
        slowest
            .and_then(|(_, t)| t.duration_ms.map(|d| format!("; slowest call: {} {} {}", t.tool, t.target.as_deref().unwrap_or(""), tool_duration(d))))
            .unwrap_or_default()
    ))?;
    out.line(
        "Lines marked ! are what the risk score weighs: failures, errors, denials, refused completions, pauses and blocks.",
    )?;
    out.finish()
}

fn render_logs(r: &tacho_app::LogReport) -> String {
    let mut o = format!(
        "{} line(s) in {} file(s), {} of them JSON\n",
        thousands(r.lines),
        r.files.len(),
        thousands(r.json_lines)
    );
    o.push_str("By level: ");
    o.push_str(
        &r.levels
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    o.push('\n');
    if !r.top_errors.is_empty() {
        o.push_str("\nMost frequent errors:\n");
        for (msg, n) in &r.top_errors {
            o.push_str(&format!("  {n:>6}× {msg}\n"));
        }
    }
    if !r.slow.is_empty() {
        o.push_str("\nSlowest operations:\n");
        for (ms, loc, msg) in &r.slow {
            o.push_str(&format!("  {:>8} {loc}  {msg}\n", tool_duration(*ms)));
        }
    }
    o
}
