//! `tacho session replay`: rebuild a session from its events. Replay never re-runs the
//! model or a tool and never reproduces external state; it reads the log.

use clap::{Args, ValueEnum};
use tacho_app::render::{event::describe, since};
use tacho_app::types::ReplayRule;
use tacho_app::types::{StoredEvent, hex};
use tacho_app::{ProjectionCheck, Verification, verify_package};
use tacho_schema::{EventBody, time_to_rfc3339};

use crate::error::CliError;
use crate::output::Out;

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
            return Err(CliError::input("--package goes with --mode verify"));
        }
        let v = verify_package(path)?;
        if !a.json {
            out.line(format!("Package {}: digest ok", path.display()))?;
        }
        print_verification(&v, a.json, &mut out)?;
        return finish_verify(&v, out);
    }
    let tacho = crate::open()?;
    let session = tacho.resolve_session(a.session.as_deref().unwrap_or_default())?;
    match a.mode {
        ReplayMode::Summary => summary(&tacho.events(&session)?, a.json, &mut out)?,
        ReplayMode::Reconstruct => reconstruct(&tacho.events(&session)?, a.json, &mut out)?,
        ReplayMode::Export => return export(&tacho, &session, a.output.as_deref()),
        ReplayMode::Execute => {
            let x = tacho.expectations(&session)?;
            out.json(&x.header)?;
            for step in &x.steps {
                out.json(step)?;
            }
            out.json(&x.end)?;
        }
        ReplayMode::Verify => {
            let v = tacho.verify_session(&session)?;
            print_verification(&v, a.json, &mut out)?;
            return finish_verify(&v, out);
        }
    }
    out.finish()
}

fn finish_verify(v: &Verification, out: Out) -> Result<(), CliError> {
    out.finish()?;
    let failed = v.failed();
    if failed > 0 {
        return Err(CliError::findings(format!(
            "replay verification of session {} failed with {failed} finding(s)",
            v.session
        )));
    }
    Ok(())
}

fn export(
    tacho: &tacho_app::Tacho,
    session: &str,
    output: Option<&std::path::Path>,
) -> Result<(), CliError> {
    use std::io::{IsTerminal, Write};
    let stdout = std::io::stdout();
    if output.is_none() && stdout.is_terminal() {
        return Err(CliError::input(
            "the package is binary: give --output FILE or redirect stdout",
        ));
    }
    let (pkg, log) = tacho.export_package(session)?;
    match output {
        Some(path) => {
            // Written next to a file and renamed over it (never a half-written
            // package), into a device or FIFO in place: tacho-app's `userfile`.
            let mut file = tacho_app::userfile::OutputFile::create(path)?;
            file.write_all(&pkg).map_err(|e| {
                CliError::from(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                ))
            })?;
            file.commit()?;
        }
        None => {
            let mut stdout = stdout.lock();
            stdout.write_all(&pkg).map_err(CliError::output)?;
            stdout.flush().map_err(CliError::output)?;
        }
    }
    eprintln!(
        "exported session {session}: {} events, head {}, {} bytes{}",
        log.next_seq,
        hex(&log.chain),
        pkg.len(),
        output
            .map(|p| format!(" to {}", p.display()))
            .unwrap_or_default()
    );
    Ok(())
}

fn summary(all: &[StoredEvent], json: bool, out: &mut Out) -> Result<(), CliError> {
    let start = all.first().map_or(0, |e| e.event.time_unix_ns);
    for e in all {
        if json {
            out.event(&with_seq(e))?;
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

/// An event's JSON form with its sequence number.
fn with_seq(e: &StoredEvent) -> serde_json::Value {
    let mut v = e.event.to_json();
    if let Some(o) = v.as_object_mut() {
        o.insert("seq".into(), e.seq.into());
    }
    v
}

/// Groups events into the step stream: what came before the first step, then each step
/// from its start to the next step's start.
fn reconstruct(all: &[StoredEvent], json: bool, out: &mut Out) -> Result<(), CliError> {
    let mut groups: Vec<(Option<u64>, Vec<&StoredEvent>)> = vec![(None, Vec::new())];
    for e in all {
        if let EventBody::StepStart(s) = &e.event.body {
            groups.push((Some(s.step), Vec::new()));
        }
        if let Some(g) = groups.last_mut() {
            g.1.push(e);
        }
    }
    for (step, evs) in groups.iter().filter(|g| !g.1.is_empty()) {
        if json {
            let list: Vec<serde_json::Value> = evs.iter().map(|e| with_seq(e)).collect();
            out.json(&serde_json::json!({"type": "step", "step": step, "events": list}))?;
            continue;
        }
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
    Ok(())
}

/// Prints a verification's findings and summary.
pub fn print_verification(v: &Verification, json: bool, out: &mut Out) -> Result<(), CliError> {
    for f in v.log_errors() {
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
    for f in &v.package_findings {
        if json {
            out.json(&serde_json::json!({"type": "finding", "check": "package", "message": f}))?;
        } else {
            out.line(format!("finding: package: {f}"))?;
        }
    }
    if let Some(e) = &v.read_error {
        if json {
            out.json(&serde_json::json!({"type": "finding", "check": "read", "message": format!("the session could not be read to its end: {e}")}))?;
        } else {
            out.line(format!(
                "finding: the session could not be read to its end: {e}"
            ))?;
        }
    }
    let projection = match &v.projection {
        ProjectionCheck::NoneStored => "none stored, so none to compare with a rebuild".to_string(),
        ProjectionCheck::Equal { next_seq } => {
            format!("ok (the execution graph up to event {next_seq} equals a rebuild)")
        }
        ProjectionCheck::Failed { location, problem } => {
            if json {
                out.json(&serde_json::json!({"type": "finding", "check": "projection", "location": location.display().to_string(), "message": problem}))?;
            } else {
                out.line(format!("finding: {}: {problem}", location.display()))?;
            }
            "FAILED".to_string()
        }
    };
    let report = &v.replay;
    for f in &report.findings {
        if json {
            out.json(&serde_json::json!({"type": "finding", "check": f.rule, "seq": f.seq, "message": f.message}))?;
        } else {
            out.line(format!("finding: event {}: {}", f.seq, f.message))?;
        }
    }
    let failed = v.failed();
    let log = &v.log;
    if json {
        for i in &report.interrupted {
            out.json(&serde_json::json!({"type": "interrupted", "seq": i.seq, "call_id": i.call_id, "tool": i.tool}))?;
        }
        out.json(&serde_json::json!({
            "type": "summary", "session": v.session, "ok": failed == 0, "findings": failed,
            "events": log.events, "tool_results_checked": report.tool_results_checked,
            "receipts_checked": report.receipts_checked,
            "interrupted": report.interrupted.len(), "pending": report.pending.len(),
            "read_to_end": v.read_error.is_none(),
            "head": hex(&log.chain), "stored_projection": projection,
        }))?;
        return Ok(());
    }
    let ok = |b: bool| if b { "ok" } else { "FAILED" };
    let log_ok = v.log_errors().next().is_none();
    out.line(format!("Replay verification of session {}", v.session))?;
    out.line(format!(
        "  checksums, hash chain, sequence numbers: {} ({} events in {} segment(s))",
        ok(log_ok),
        log.events,
        log.segments
    ))?;
    if v.read_error.is_some() {
        // What was read is not the record: nothing about it can be called ok.
        out.line(format!(
            "  tool results paired with their calls: NOT CHECKED (the record could not be read to its end; {} results seen before that)",
            report.tool_results_checked
        ))?;
        out.line("  steps balanced, one start, nothing after the end: NOT CHECKED")?;
    } else {
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
                .any(|f| matches!(f.rule, ReplayRule::Steps | ReplayRule::Lifecycle)))
        ))?;
        let evidence_ok = !report
            .findings
            .iter()
            .any(|f| f.rule == ReplayRule::Evidence);
        if report.receipts_checked > 0 || !evidence_ok {
            out.line(format!(
                "  goal receipts agree with their frozen plans: {} ({} checked)",
                ok(evidence_ok),
                report.receipts_checked
            ))?;
        }
    }
    out.line(format!("  stored projections: {projection}"))?;
    if log_ok {
        out.line(format!(
            "  head: {} events, chain {}",
            log.next_seq,
            hex(&log.chain)
        ))?;
    }
    if let Some(t) = v.last_event_unix_ns {
        out.line(format!("  last event: {}", time_to_rfc3339(t)))?;
    }
    out.line(if failed == 0 {
        "Result: the record is intact and consistent".to_string()
    } else {
        format!("Result: {failed} finding(s)")
    })?;
    Ok(())
}
