//! `tacho session replay`: rebuild a session from its events. Replay never re-runs the
//! model or a tool and never reproduces external state; it reads the log.

use clap::{Args, ValueEnum};
use tacho_projections::{ReplayCheck, ReplayRule};
use tacho_schema::{EventBody, time_to_rfc3339};
use tacho_store::{Severity, Store, StoredEvent};

use crate::error::CliError;
use crate::home::open_store;
use crate::output::{Out, route, since};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReplayMode {
    /// One line per event.
    Summary,
    /// Check the record: checksums, hash chain, sequence numbers, every tool result
    /// against its call, balanced steps. Exit 1 on any finding.
    Verify,
    /// The step stream rebuilt from the events, each event whole.
    Reconstruct,
    /// The step stream as expectations for a program that re-drives an agent and
    /// compares (JSON Lines: per step, the tool calls to expect with their inputs and
    /// the recorded results). Nothing is re-run.
    Execute,
    /// One portable, self-verifying file with the session's record, which
    /// `--mode verify --package FILE` checks on another machine (SPEC.md §9).
    Export,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The session (its id, or any unique prefix of it).
    #[arg(required_unless_present = "package")]
    pub session: Option<String>,
    #[arg(long, value_enum)]
    pub mode: ReplayMode,
    /// With `--mode export`: the file to write (default: stdout).
    #[arg(long)]
    pub output: Option<std::path::PathBuf>,
    /// With `--mode verify`: verify an exported package instead of the store.
    #[arg(long, conflicts_with = "session")]
    pub package: Option<std::path::PathBuf>,
    /// JSON Lines instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ReplayArgs) -> Result<(), CliError> {
    let mut out = Out::new();
    if let Some(path) = &a.package {
        if !matches!(a.mode, ReplayMode::Verify) {
            return Err(CliError::Input("--package goes with --mode verify".into()));
        }
        let bytes =
            std::fs::read(path).map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?;
        let (store, session) = tacho_store::open_package(&bytes).map_err(|e| match e {
            tacho_store::PackageError::Store(e) => CliError::from(e),
            e => CliError::Findings(format!("{}: {e}", path.display())),
        })?;
        if !a.json {
            out.line(format!("Package {}: digest ok", path.display()))?;
        }
        return finish_verify(verify(&store, &session, a.json, &mut out)?, &session, out);
    }
    let store = open_store()?;
    let session = store.resolve_session(a.session.as_deref().unwrap_or_default())?;
    match a.mode {
        ReplayMode::Summary => summary(&store, &session, a.json, &mut out)?,
        ReplayMode::Reconstruct => reconstruct(&store, &session, a.json, &mut out)?,
        ReplayMode::Export => return export(&store, &session, a.output.as_deref()),
        ReplayMode::Execute => execute(&store, &session, &mut out)?,
        ReplayMode::Verify => {
            let failed = verify(&store, &session, a.json, &mut out)?;
            return finish_verify(failed, &session, out);
        }
    }
    out.finish()
}

fn finish_verify(failed: usize, session: &str, out: Out) -> Result<(), CliError> {
    out.finish()?;
    if failed > 0 {
        return Err(CliError::Findings(format!(
            "replay verification of session {session} failed with {failed} finding(s)"
        )));
    }
    Ok(())
}

fn export(store: &Store, session: &str, output: Option<&std::path::Path>) -> Result<(), CliError> {
    let log = store.verify_session(session, true)?;
    if log.findings.iter().any(|f| f.severity == Severity::Error) {
        return Err(CliError::Findings(format!(
            "session {session} does not verify; run `tacho session replay {session} --mode verify` (a package of a damaged record would only fail elsewhere)"
        )));
    }
    let pkg = tacho_store::export_package(store, session)?;
    match output {
        Some(path) => {
            // Written next to its final name, then renamed: never a half-written package.
            let tmp = path.with_extension("tmp-export");
            std::fs::write(&tmp, &pkg)
                .and_then(|()| std::fs::rename(&tmp, path))
                .map_err(|e| CliError::Io(format!("{}: {e}", path.display())))?;
        }
        None => {
            use std::io::{IsTerminal, Write};
            let mut stdout = std::io::stdout();
            if stdout.is_terminal() {
                return Err(CliError::Input(
                    "the package is binary: give --output FILE or redirect stdout".into(),
                ));
            }
            stdout.write_all(&pkg)?;
            stdout.flush()?;
        }
    }
    eprintln!(
        "exported session {session}: {} events, head {}, {} bytes{}",
        log.next_seq,
        tacho_store::hex(&log.chain),
        pkg.len(),
        output
            .map(|p| format!(" to {}", p.display()))
            .unwrap_or_default()
    );
    Ok(())
}

/// One short line about an event.
pub fn describe(body: &EventBody) -> String {
    match body {
        EventBody::SessionStart(s) => format!(
            "{}{}",
            s.agent.as_deref().unwrap_or("agent ?"),
            s.title
                .as_ref()
                .map(|t| format!(": {t}"))
                .unwrap_or_default()
        ),
        EventBody::SessionEnd(e) => e.reason.to_string(),
        EventBody::AgentRoute(r) => route(r.from.as_deref(), &r.to),
        EventBody::LlmRequest(r) => format!("{} {}", r.request_id, r.model),
        EventBody::LlmResponse(r) => format!(
            "{} {}/{} tokens{}",
            r.request_id,
            r.tokens_in,
            r.tokens_out,
            r.latency_ms
                .map(|l| format!(" in {l}ms"))
                .unwrap_or_default()
        ),
        EventBody::StepStart(s) => format!(
            "step {}{}",
            s.step,
            s.title
                .as_ref()
                .map(|t| format!(": {t}"))
                .unwrap_or_default()
        ),
        EventBody::StepFinish(s) => format!("step {}", s.step),
        EventBody::ToolCall(c) => format!(
            "{} {}{}",
            c.call_id,
            c.tool,
            c.target
                .as_ref()
                .map(|t| format!(" {t}"))
                .unwrap_or_default()
        ),
        EventBody::ToolResult(r) => format!(
            "{} {}{}",
            r.call_id,
            r.status,
            r.duration_ms.map(|d| format!(" {d}ms")).unwrap_or_default()
        ),
        EventBody::PermissionAsk(p) => format!("{} {}", p.request_id, p.permission),
        EventBody::PermissionReply(p) => format!("{} {}", p.request_id, p.decision),
        EventBody::Error(e) => e.message.lines().next().unwrap_or("").to_string(),
        EventBody::VerificationRun(v) => format!("{} {}", v.command, v.status),
        EventBody::FileEdit(f) => format!("{} {}", f.op, f.path),
        EventBody::SnapshotTaken(t) => format!(
            "{} {} ({} files{})",
            t.reason,
            short_id(&t.snapshot),
            t.files,
            t.before_step
                .map(|s| format!(", before step {s}"))
                .unwrap_or_default()
        ),
        EventBody::RollbackApplied(r) => format!(
            "{} to {}{}",
            r.rolled_back,
            short_id(&r.to_snapshot),
            r.before_step
                .map(|s| format!(" (before step {s})"))
                .unwrap_or_default()
        ),
        EventBody::SessionBranch(b) => {
            format!("branch of {} through #{}", b.parent, b.through_seq)
        }
        EventBody::GoalCreated(g) => format!("{} {}: {}", g.goal, g.kind, g.title),
        EventBody::GoalCheckRun(r) => format!(
            "{} {} {}{}",
            r.goal,
            r.check,
            if r.passed { "passed" } else { "failed" },
            r.exit_code
                .map(|c| format!(" (exit {c})"))
                .unwrap_or_default()
        ),
        EventBody::GoalCheckStart(c) => format!("{} {} started", c.goal, c.check),
        EventBody::GoalUpdate(u) => format!(
            "{} {} {}",
            u.goal,
            u.action,
            if u.accepted { "accepted" } else { "refused" }
        ),
        EventBody::Unknown { kind, version, .. } => format!("kind {kind} v{version}"),
    }
}

/// The first 12 hex digits of a snapshot id, as Git abbreviates.
pub fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

fn events(store: &Store, session: &str) -> Result<Vec<StoredEvent>, CliError> {
    let mut all = Vec::new();
    store.read_session(session, |e| all.push(e))?;
    Ok(all)
}

fn summary(store: &Store, session: &str, json: bool, out: &mut Out) -> Result<(), CliError> {
    let all = events(store, session)?;
    let start = all.first().map_or(0, |e| e.event.time_unix_ns);
    for e in &all {
        if json {
            let mut v = e.event.to_json();
            if let Some(o) = v.as_object_mut() {
                o.insert("seq".into(), e.seq.into());
            }
            out.json(&v)?;
        } else {
            out.line(format!(
                "#{:<5} {} {:<17} {}",
                e.seq,
                since(start, e.event.time_unix_ns),
                e.event.body.kind_name(),
                describe(&e.event.body)
            ))?;
        }
    }
    Ok(())
}

/// Groups events into the step stream: what came before the first step, then each step
/// from its start to the next step's start.
fn reconstruct(store: &Store, session: &str, json: bool, out: &mut Out) -> Result<(), CliError> {
    let all = events(store, session)?;
    let mut groups: Vec<(Option<u64>, Vec<&StoredEvent>)> = vec![(None, Vec::new())];
    for e in &all {
        if let EventBody::StepStart(s) = &e.event.body {
            groups.push((Some(s.step), Vec::new()));
        }
        if let Some(g) = groups.last_mut() {
            g.1.push(e);
        }
    }
    for (step, evs) in groups.iter().filter(|g| !g.1.is_empty()) {
        if json {
            let list: Vec<serde_json::Value> = evs
                .iter()
                .map(|e| {
                    let mut v = e.event.to_json();
                    if let Some(o) = v.as_object_mut() {
                        o.insert("seq".into(), e.seq.into());
                    }
                    v
                })
                .collect();
            out.json(&serde_json::json!({"type": "step", "step": step, "events": list}))?;
        } else {
            match step {
                Some(n) => out.line(format!("== step {n}"))?,
                None => out.line("== before the first step")?,
            }
            for e in evs {
                out.line(format!(
                    "  #{:<5} {:<17} {}",
                    e.seq,
                    e.event.body.kind_name(),
                    describe(&e.event.body)
                ))?;
                match &e.event.body {
                    EventBody::ToolCall(c) => {
                        if let Some(input) = &c.input {
                            out.line(format!("         input: {input}"))?;
                        }
                    }
                    EventBody::ToolResult(r) => {
                        if let Some(o) = r.output.as_ref().filter(|o| !o.is_empty()) {
                            for l in o.lines() {
                                out.line(format!("         | {l}"))?;
                            }
                        }
                        if let Some(err) = &r.error {
                            out.line(format!("         error: {err}"))?;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// Per step, what a re-driven agent is expected to do: the calls, in order, with their
/// inputs, and the results the original run got, for a harness to compare against.
/// Steps and their usage come from the execution graph, so the attribution is the same
/// as in `tacho graph`.
fn execute(store: &Store, session: &str, out: &mut Out) -> Result<(), CliError> {
    let mut g = tacho_projections::ExecutionGraph::new(session);
    let mut inputs: std::collections::BTreeMap<String, Option<String>> = Default::default();
    let mut results: std::collections::BTreeMap<String, tacho_schema::ToolResult> =
        Default::default();
    store.read_session(session, |e| {
        g.apply(e.seq, &e.event);
        match e.event.body {
            EventBody::ToolCall(c) => {
                inputs.insert(c.call_id, c.input);
            }
            EventBody::ToolResult(r) => {
                results.entry(r.call_id.clone()).or_insert(r);
            }
            _ => {}
        }
    })?;
    for s in &g.steps {
        let calls: Vec<serde_json::Value> = s
            .tools
            .iter()
            .map(|t| {
                let input = inputs
                    .get(&t.call_id)
                    .and_then(|i| i.as_deref())
                    .and_then(|i| serde_json::from_str::<serde_json::Value>(i).ok());
                let r = results.get(&t.call_id);
                serde_json::json!({
                    "seq": t.seq, "call_id": t.call_id, "tool": t.tool, "target": t.target,
                    "input": input,
                    "expected": r.map(|r| serde_json::json!({
                        "status": r.status, "exit_code": r.exit_code, "error": r.error, "output": r.output,
                    })),
                })
            })
            .collect();
        out.json(&serde_json::json!({
            "type": "expect_step", "session": session, "step": s.number, "implicit": s.implicit,
            "agent": s.agent, "tokens_in": s.tokens.input, "tokens_out": s.tokens.output,
            "tool_calls": calls,
        }))?;
    }
    Ok(())
}

/// Runs every check and prints the findings; returns how many there were.
pub fn verify(store: &Store, session: &str, json: bool, out: &mut Out) -> Result<usize, CliError> {
    let log = store.verify_session(session, true)?;
    let mut check = ReplayCheck::new();
    let mut last_time = None;
    let read = store.read_session(session, |e| {
        last_time = Some(e.event.time_unix_ns);
        check.apply(e.seq, &e.event)
    });
    let report = check.finish();
    let mut failed = 0;
    for f in log
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
    {
        failed += 1;
        let loc = format!(
            "{}{}",
            f.segment
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            f.offset
                .map(|o| format!(" at offset {o}"))
                .unwrap_or_default()
        );
        if json {
            out.json(&serde_json::json!({"type": "finding", "check": "log", "location": loc, "message": f.message}))?;
        } else {
            out.line(format!("finding: {loc}: {}", f.message))?;
        }
    }
    if let Err(e) = &read {
        failed += 1;
        out.line(format!(
            "finding: the session could not be read to its end: {e}"
        ))?;
    }
    // A stored projection must be what a rebuild from the log gives.
    let mut projection = "none stored, so none to compare with a rebuild".to_string();
    if let Some((stored, head)) = crate::materialize::read_stored(store, session) {
        let backed = store
            .head_at(session, stored.next_seq)?
            .is_some_and(|h| tacho_store::hex(&h) == head);
        let problem = if !backed {
            Some(format!(
                "the stored projection claims events 0..{} with head {head}, which the log does not hold",
                stored.next_seq
            ))
        } else if crate::materialize::rebuild(store, session, stored.next_seq)? != stored {
            Some(format!(
                "the stored projection (events 0..{}) differs from a rebuild from the log",
                stored.next_seq
            ))
        } else {
            None
        };
        match problem {
            Some(p) => {
                failed += 1;
                projection = "FAILED".into();
                if json {
                    out.json(&serde_json::json!({"type": "finding", "check": "projection", "location": crate::materialize::path(store, session).display().to_string(), "message": p}))?;
                } else {
                    out.line(format!(
                        "finding: {}: {p}",
                        crate::materialize::path(store, session).display()
                    ))?;
                }
            }
            None => {
                projection = format!(
                    "ok (the execution graph up to event {} equals a rebuild)",
                    stored.next_seq
                )
            }
        }
    }
    for f in &report.findings {
        failed += 1;
        if json {
            out.json(&serde_json::json!({"type": "finding", "check": f.rule, "seq": f.seq, "message": f.message}))?;
        } else {
            out.line(format!("finding: event {}: {}", f.seq, f.message))?;
        }
    }
    if json {
        for i in &report.interrupted {
            out.json(&serde_json::json!({"type": "interrupted", "seq": i.seq, "call_id": i.call_id, "tool": i.tool}))?;
        }
        out.json(&serde_json::json!({
            "type": "summary", "session": session, "ok": failed == 0, "findings": failed,
            "events": log.events, "tool_results_checked": report.tool_results_checked,
            "interrupted": report.interrupted.len(), "pending": report.pending.len(),
            "head": tacho_store::hex(&log.chain), "stored_projection": projection,
        }))?;
        return Ok(failed);
    }
    let ok = |b: bool| if b { "ok" } else { "FAILED" };
    let log_ok = !log.findings.iter().any(|f| f.severity == Severity::Error);
    out.line(format!("Replay verification of session {session}"))?;
    out.line(format!(
        "  checksums, hash chain, sequence numbers: {} ({} events in {} segment(s))",
        ok(log_ok),
        log.events,
        log.segments
    ))?;
    out.line(format!(
        "  tool results paired with their calls: {} (all {} results checked, none skipped)",
        ok(!report
            .findings
            .iter()
            .any(|f| f.rule == ReplayRule::Pairing)),
        report.tool_results_checked
    ))?;
    for i in &report.interrupted {
        out.line(format!(
            "  interrupted: call {} ({}) at event {} has no result",
            i.call_id, i.tool, i.seq
        ))?;
    }
    if !report.pending.is_empty() {
        out.line(format!(
            "  running: {} call(s) without a result yet",
            report.pending.len()
        ))?;
    }
    out.line(format!(
        "  steps balanced, one start, nothing after the end: {}",
        ok(!report
            .findings
            .iter()
            .any(|f| f.rule != ReplayRule::Pairing))
    ))?;
    out.line(format!("  stored projections: {projection}"))?;
    if log_ok {
        out.line(format!(
            "  head: {} events, chain {}",
            log.next_seq,
            tacho_store::hex(&log.chain)
        ))?;
    }
    if let Some(t) = last_time {
        out.line(format!("  last event: {}", time_to_rfc3339(t)))?;
    }
    out.line(if failed == 0 {
        "Result: the record is intact and consistent".to_string()
    } else {
        format!("Result: {failed} finding(s)")
    })?;
    Ok(failed)
}
