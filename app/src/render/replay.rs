//! `tacho session replay` in text: the summary, the step stream, a verification and an
//! export.

use std::path::Path;

use tacho_projections::ReplayRule;
use tacho_schema::{EventBody, time_to_rfc3339};
use tacho_store::StoredEvent;

use super::event::describe;
use super::since;
use crate::replay::{
    CheckName, Exported, Reconstruction, ReplayVerifyFinding, Stage, Verification,
};

/// `--mode summary`: one line per event, with its time since the first.
pub fn summary(all: &[StoredEvent]) -> String {
    let start = all.first().map_or(0, |e| e.event.time_unix_ns);
    let mut o = String::new();
    for e in all {
        o.push_str(&format!(
            "#{:<5} {} {:<17} {}\n",
            e.seq,
            since(start, e.event.time_unix_ns),
            e.event.body.kind_name(),
            describe(&e.event.body)
        ));
    }
    o
}

/// `--mode reconstruct`: each step with its events whole (a call's input, a result's
/// output and error).
pub fn reconstruction(r: &Reconstruction) -> String {
    let mut o = String::new();
    for g in &r.steps {
        match g.step {
            Some(n) => o.push_str(&format!("== step {n}\n")),
            None => o.push_str("== before the first step\n"),
        }
        for e in &g.events {
            o.push_str(&format!(
                "  #{:<5} {:<17} {}\n",
                e.seq,
                e.event.body.kind_name(),
                describe(&e.event.body)
            ));
            match &e.event.body {
                EventBody::ToolCall(c) => {
                    if let Some(input) = &c.input {
                        o.push_str(&format!("         input: {input}\n"));
                    }
                }
                EventBody::ToolResult(r) => {
                    if let Some(out) = r.output.as_ref().filter(|o| !o.is_empty()) {
                        for l in out.lines() {
                            o.push_str(&format!("         | {l}\n"));
                        }
                    }
                    if let Some(err) = &r.error {
                        o.push_str(&format!("         error: {err}\n"));
                    }
                }
                _ => {}
            }
        }
    }
    o
}

/// One finding of a verification, as one line.
pub fn finding(f: &ReplayVerifyFinding) -> String {
    let location = f.location.as_deref().unwrap_or_default();
    match f.check {
        CheckName::Stage(Stage::Log | Stage::Projection) => {
            format!("finding: {location}: {}", f.message)
        }
        CheckName::Stage(Stage::Package) => format!("finding: package: {}", f.message),
        CheckName::Stage(Stage::Read) => format!("finding: {}", f.message),
        CheckName::Rule(_) => format!("finding: event {}: {}", f.seq.unwrap_or(0), f.message),
    }
}

/// A verification: its findings, then each check's verdict and the head. `package`:
/// the package verified (its digest was checked), when it was one.
pub fn verification(v: &Verification, package: Option<&Path>) -> String {
    let mut o = String::new();
    if let Some(p) = package {
        o.push_str(&format!("Package {}: digest ok\n", p.display()));
    }
    for f in v.findings() {
        o.push_str(&finding(&f));
        o.push('\n');
    }
    let s = v.summary();
    let report = &v.replay;
    let log = &v.log;
    let ok = |b: bool| if b { "ok" } else { "FAILED" };
    let log_ok = v.log_errors().next().is_none();
    o.push_str(&format!("Replay verification of session {}\n", v.session));
    o.push_str(&format!(
        "  checksums, hash chain, sequence numbers: {} ({} events in {} segment(s))\n",
        ok(log_ok),
        s.events,
        s.segments
    ));
    if !s.read_to_end {
        // What was read is not the record: nothing about it can be called ok.
        o.push_str(&format!(
            "  tool results paired with their calls: NOT CHECKED (the record could not be read to its end; {} results seen before that)\n",
            s.tool_results_checked
        ));
        o.push_str("  steps balanced, one start, nothing after the end: NOT CHECKED\n");
    } else {
        o.push_str(&format!(
            "  tool results paired with their calls: {} (all {} results checked, none skipped)\n",
            ok(v.rules_hold(&[ReplayRule::Pairing])),
            s.tool_results_checked
        ));
        for i in &report.interrupted {
            o.push_str(&format!(
                "  interrupted: call {} ({}) at event {} has no result\n",
                i.call_id, i.tool, i.seq
            ));
        }
        if s.pending > 0 {
            o.push_str(&format!(
                "  running: {} call(s) without a result yet\n",
                s.pending
            ));
        }
        o.push_str(&format!(
            "  steps balanced, one start, nothing after the end: {}\n",
            ok(v.rules_hold(&[ReplayRule::Steps, ReplayRule::Lifecycle]))
        ));
        let evidence_ok = v.rules_hold(&[ReplayRule::Evidence]);
        if s.receipts_checked > 0 || !evidence_ok {
            o.push_str(&format!(
                "  goal receipts agree with their frozen plans: {} ({} checked)\n",
                ok(evidence_ok),
                s.receipts_checked
            ));
        }
    }
    o.push_str(&format!("  stored projections: {}\n", s.stored_projection));
    if log_ok {
        o.push_str(&format!(
            "  head: {} events, chain {}\n",
            log.next_seq, s.head
        ));
    }
    if let Some(t) = s.last_event_unix_ns {
        o.push_str(&format!("  last event: {}\n", time_to_rfc3339(t)));
    }
    if s.ok {
        o.push_str("Result: the record is intact and consistent\n");
    } else {
        o.push_str(&format!("Result: {} finding(s)\n", s.findings));
    }
    o
}

/// What `--mode export` says once the package is written.
pub fn exported(x: &Exported) -> String {
    format!(
        "exported session {}: {} events, head {}, {} bytes{}",
        x.session,
        x.events,
        x.head,
        x.bytes,
        x.output
            .as_ref()
            .map(|p| format!(" to {p}"))
            .unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tacho_projections::{Interrupted, ReplayFinding, ReplayReport};
    use tacho_store::{Finding, Severity, StoreError, StreamReport};

    use super::*;
    use crate::replay::ProjectionCheck;

    fn verification(read_error: Option<StoreError>) -> Verification {
        Verification {
            session: "ses_v".into(),
            log: StreamReport {
                session: "ses_v".into(),
                next_seq: 9,
                events: 9,
                segments: 2,
                findings: vec![Finding {
                    severity: Severity::Error,
                    session: "ses_v".into(),
                    segment: Some(PathBuf::from("/log/s.tseg")),
                    offset: Some(128),
                    message: "frame checksum mismatch".into(),
                }],
                ..StreamReport::default()
            },
            read_error,
            replay: ReplayReport {
                events: 9,
                tool_results_checked: 3,
                receipts_checked: 1,
                findings: vec![ReplayFinding {
                    seq: 5,
                    rule: ReplayRule::Evidence,
                    message: "goal g1: receipt for an unknown check".into(),
                }],
                interrupted: vec![Interrupted {
                    seq: 4,
                    call_id: "c1".into(),
                    tool: "Bash".into(),
                }],
                pending: Vec::new(),
            },
            projection: ProjectionCheck::Failed {
                location: PathBuf::from("/proj/ses_v"),
                problem: "differs from a rebuild".into(),
            },
            last_event_unix_ns: Some(1_000_000_000),
            package_findings: vec!["3 bytes of zeros after the committed data".into()],
        }
    }

    /// Every finding, in the order of the JSON records, then each check's verdict.
    #[test]
    fn a_verification_says_every_finding_and_verdict() {
        assert_eq!(
            super::verification(&verification(None), Some(Path::new("/p.tpkg"))),
            "Package /p.tpkg: digest ok
finding: /log/s.tseg at offset 128: frame checksum mismatch
finding: package: 3 bytes of zeros after the committed data
finding: /proj/ses_v: differs from a rebuild
finding: event 5: goal g1: receipt for an unknown check
Replay verification of session ses_v
  checksums, hash chain, sequence numbers: FAILED (9 events in 2 segment(s))
  tool results paired with their calls: ok (all 3 results checked, none skipped)
  interrupted: call c1 (Bash) at event 4 has no result
  steps balanced, one start, nothing after the end: ok
  goal receipts agree with their frozen plans: FAILED (1 checked)
  stored projections: FAILED
  last event: 1970-01-01T00:00:01Z
Result: 4 finding(s)
"
        );
        // What could not be read to its end is not called ok.
        let text = super::verification(
            &verification(Some(StoreError::NotFound("ses_v".into()))),
            None,
        );
        assert!(
            text.contains("finding: the session could not be read to its end: "),
            "{text}"
        );
        assert!(
            text.contains("  steps balanced, one start, nothing after the end: NOT CHECKED\n"),
            "{text}"
        );
        assert!(text.ends_with("Result: 5 finding(s)\n"), "{text}");
    }
}
