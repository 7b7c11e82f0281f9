//! The pages: data gathered through the application layer, rendered by the compiled
//! templates in `templates/`.

use std::collections::BTreeMap;

use askama::Template;
use axum::http::StatusCode;
use tacho_app::render::{duration, thousands, tool_duration};
use tacho_app::{Kind, ListFilter, Tacho};
use tacho_schema::time_to_rfc3339;

use crate::svg;

/// Sessions on the index.
const INDEX_ROWS: usize = 500;

use tacho_app::render::session::{status as status_text, when as time};

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    status: u16,
    message: &'a str,
}

pub fn error_page(status: StatusCode, message: &str) -> (StatusCode, String) {
    let page = ErrorPage {
        status: status.as_u16(),
        message,
    };
    (
        status,
        page.render()
            .unwrap_or_else(|e| format!("error {status}: {message} ({e})")),
    )
}

pub struct IndexRow {
    pub id: String,
    pub started: String,
    pub agent: String,
    pub title: String,
    pub risk: String,
    pub risk_class: String,
    pub tokens: String,
    pub status: String,
    pub damaged: Option<String>,
}

#[derive(Template)]
#[template(path = "index.html")]
struct IndexPage {
    rows: Vec<IndexRow>,
    more: bool,
    chart: String,
}

pub fn index(t: &Tacho) -> (StatusCode, String) {
    let rows = match t.list_sessions_showing(&ListFilter::default(), INDEX_ROWS) {
        Ok(r) => r,
        Err(e) => return error_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let mut per_day: BTreeMap<String, u64> = BTreeMap::new();
    for r in &rows {
        if let Some(t) = r.summary.started_unix_ns {
            let day = time_to_rfc3339(t).chars().take(10).collect::<String>();
            let day_total = per_day.entry(day).or_default();
            *day_total = day_total
                .saturating_add(r.summary.tokens_in)
                .saturating_add(r.summary.tokens_out);
        }
    }
    let days: Vec<(String, u64)> = per_day.into_iter().rev().take(60).rev().collect();
    let more = rows.len() > INDEX_ROWS;
    let page = IndexPage {
        rows: rows
            .into_iter()
            .take(INDEX_ROWS)
            .map(|r| {
                let s = r.summary;
                IndexRow {
                    started: time(s.started_unix_ns),
                    agent: s.agent.unwrap_or_default(),
                    title: s.title.unwrap_or_default(),
                    risk: format!("{} {}", r.risk_level.as_str(), r.risk_score),
                    risk_class: r.risk_level.as_str().to_lowercase(),
                    tokens: format!("{} / {}", thousands(s.tokens_in), thousands(s.tokens_out)),
                    status: status_text(s.status),
                    damaged: r.damaged,
                    id: s.session,
                }
            })
            .collect(),
        more,
        chart: svg::tokens_per_day(&days),
    };
    render(&page)
}

fn render(t: &impl Template) -> (StatusCode, String) {
    match t.render() {
        Ok(s) => (StatusCode::OK, s),
        Err(e) => error_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

pub struct CallView {
    pub seq: u64,
    pub tool: String,
    pub target: String,
    pub status: String,
    pub failed: bool,
    pub time: String,
    pub error: String,
    pub input: String,
    pub output: String,
    pub output_cut: bool,
}

pub struct StepView {
    pub number: u64,
    pub title: String,
    pub duration: String,
    pub tokens: String,
    pub calls: Vec<CallView>,
}

pub struct DiffLine {
    pub class: &'static str,
    pub text: String,
}

pub struct FileView {
    pub path: String,
    pub change: String,
    pub added: u64,
    pub removed: u64,
    pub diff: Vec<DiffLine>,
    /// Why `diff` is empty, if it is.
    pub no_diff: &'static str,
}

pub struct CheckView {
    pub id: String,
    pub state: String,
    pub why: String,
    pub receipt: String,
}

pub struct GoalView {
    pub title: String,
    pub id: String,
    pub state: String,
    pub digest: String,
    pub checks: Vec<CheckView>,
}

pub struct GateView {
    pub seq: u64,
    pub time: String,
    pub action: String,
    /// `accepted`, `refused`, or `resumed` (a resume is no refused pause).
    pub outcome: &'static str,
    /// Shown as good (accepted, or a resume).
    pub accepted: bool,
    pub reason: String,
    pub details: Vec<String>,
}

pub struct PointView {
    pub step: u64,
    pub time: String,
    pub files: String,
    pub command: String,
}

#[derive(Template)]
#[template(path = "session.html")]
struct SessionPage {
    id: String,
    title: String,
    running: bool,
    readable: bool,
    facts: Vec<(String, String)>,
    risk_level: String,
    risk_class: String,
    risk_score: u32,
    readiness: String,
    factors: Vec<(String, u32, String, String)>,
    disclaimer: String,
    timeline: String,
    steps: Vec<StepView>,
    files: Vec<FileView>,
    changes_note: String,
    verifications: Vec<(u64, String, String, String, bool, String)>,
    goals: Vec<GoalView>,
    gates: Vec<GateView>,
    points: Vec<PointView>,
    /// Changes no tool call made (SPEC §8.1): (number, event range, files, command).
    unclaimed: Vec<(usize, String, String, String)>,
    baseline_command: String,
    children: Vec<(String, String)>,
    /// tacho's rollbacks of this session: (rollback session, time, what it did).
    rolled_back_by: Vec<(String, String, String)>,
    /// The sessions this one (a rollback tacho applied) rolled back.
    rollback_of: Vec<String>,
    /// Tool calls not shown (past the first [`CALLS_SHOWN`]).
    calls_hidden: usize,
    findings: Vec<String>,
    head: String,
    events: u64,
}

pub fn session(t: &Tacho, given: &str) -> (StatusCode, String) {
    if tacho_schema::validate_session_id(given).is_err() {
        return error_page(StatusCode::NOT_FOUND, "no such session");
    }
    let id = match t.resolve_session(given) {
        Ok(id) => id,
        Err(e) => {
            let status = match e.kind() {
                tacho_app::ErrorKind::NotFound => StatusCode::NOT_FOUND,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            return error_page(status, &e.to_string());
        }
    };
    let r = match t.report(&id) {
        Ok(r) => r,
        Err(e) => return error_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let g = &r.graph;
    let io: BTreeMap<&str, &tacho_app::CallIo> =
        r.calls.iter().map(|c| (c.call_id.as_str(), c)).collect();
    let gates = r
        .gates
        .iter()
        .map(|d| GateView {
            seq: d.seq,
            time: time(Some(d.time_unix_ns)),
            action: if d.resume {
                "resume".into()
            } else {
                d.action.to_string()
            },
            outcome: match (d.resume, d.accepted) {
                (true, _) => "resumed",
                (false, true) => "accepted",
                (false, false) => "refused",
            },
            accepted: d.accepted || d.resume,
            reason: d.reason.clone().unwrap_or_default(),
            details: d.details.clone(),
        })
        .collect();
    let mut budget = tacho_app::CALLS_SHOWN;
    let steps = g
        .steps
        .iter()
        .map(|s| StepView {
            number: s.number,
            title: s.title.clone().unwrap_or_default(),
            duration: s.duration_ms().map_or("unfinished".into(), duration),
            tokens: format!(
                "{} in / {} out",
                thousands(s.tokens.input),
                thousands(s.tokens.output)
            ),
            calls: s
                .tools
                .iter()
                .take({
                    let n = budget.min(s.tools.len());
                    budget -= n;
                    n
                })
                .map(|c| {
                    let shown = io.get(c.call_id.as_str());
                    CallView {
                        seq: c.seq,
                        tool: c.tool.clone(),
                        target: c.target.clone().unwrap_or_default(),
                        status: c
                            .status
                            .map(|s| s.to_string())
                            .unwrap_or_else(|| "no result".into()),
                        failed: c.status.is_some_and(|s| s != tacho_schema::ToolStatus::Ok),
                        time: c.duration_ms.map_or(String::new(), tool_duration),
                        error: c.error.clone().unwrap_or_default(),
                        input: shown.and_then(|s| s.input.clone()).unwrap_or_default(),
                        output: shown.and_then(|s| s.output.clone()).unwrap_or_default(),
                        output_cut: shown.is_some_and(|s| s.output_cut),
                    }
                })
                .collect(),
        })
        .collect();
    // The files the risk assessment counts, each with its diff when the snapshots
    // show one.
    let files = r
        .files
        .iter()
        .map(|f| {
            let c = f
                .diff
                .as_deref()
                .and_then(|p| r.changes.iter().find(|c| c.path == p));
            (f, c)
        })
        .map(|(f, c)| FileView {
            path: f.path.clone(),
            change: f.change.as_str().to_string(),
            added: f.lines_added,
            removed: f.lines_removed,
            no_diff: match c {
                Some(_) => "binary, a link or a mode change: no text diff",
                None if r.changes_between.is_some() && r.changes_note.is_none() => {
                    "no change between the first snapshot and the last"
                }
                None => "no diff",
            },
            diff: c
                .and_then(|c| c.unified.as_deref())
                .unwrap_or("")
                .lines()
                .map(|l| DiffLine {
                    class: if l.starts_with("+++") || l.starts_with("---") {
                        "hdr"
                    } else if l.starts_with('+') {
                        "add"
                    } else if l.starts_with('-') {
                        "del"
                    } else if l.starts_with("@@") {
                        "hunk"
                    } else {
                        "ctx"
                    },
                    text: l.to_string(),
                })
                .collect(),
        })
        .collect();
    let points = r
        .rollback
        .points
        .iter()
        .filter(|pt| pt.snapshot.is_some())
        .map(|pt| PointView {
            step: pt.step,
            time: time(Some(pt.started_unix_ns)),
            files: pt.files.join(", "),
            command: format!("tacho session rollback {id} --step {} --dry-run", pt.step),
        })
        .collect();
    let unclaimed = r
        .rollback
        .unclaimed
        .iter()
        .map(|u| {
            (
                u.index,
                format!("#{}..#{}", u.after_seq, u.before_seq),
                u.files
                    .iter()
                    .map(|f| {
                        format!(
                            "{} ({}, +{} -{})",
                            f.path, f.change, f.lines_added, f.lines_removed
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                format!("{} --dry-run", u.undo),
            )
        })
        .collect();
    let children = r
        .children
        .iter()
        .map(|c| (c.session.clone(), c.title.clone().unwrap_or_default()))
        .collect();
    let mut facts = vec![
        ("Agents".to_string(), g.agents.join(", ")),
        ("Project".into(), g.project.clone().unwrap_or_default()),
        ("Workspace".into(), g.workspace.clone().unwrap_or_default()),
        ("Started".into(), time(g.started_unix_ns)),
        (
            "Status".into(),
            match g.end_reason {
                Some(reason) => format!("{reason} at {}", time(g.ended_unix_ns)),
                None => "running (no end recorded)".into(),
            },
        ),
        (
            "Duration".into(),
            g.duration_ms().map_or("-".into(), duration),
        ),
        (
            "Tokens".into(),
            format!(
                "{} in / {} out (cache read {}, write {}), {} model calls",
                thousands(g.tokens.input),
                thousands(g.tokens.output),
                thousands(g.tokens.cache_read),
                thousands(g.tokens.cache_write),
                g.model_calls
            ),
        ),
    ];
    if let Some(p) = &g.parent {
        facts.push(("Parent session".into(), p.clone()));
    }
    if let Some(b) = &g.branch {
        facts.push((
            "Branch of".into(),
            format!("{} (its events through #{})", b.parent, b.through_seq),
        ));
    }
    for route in &g.routes {
        facts.push((
            "Route".into(),
            format!(
                "{} ({})",
                tacho_app::render::route(route.from.as_deref(), &route.to),
                route.reason.clone().unwrap_or_default()
            ),
        ));
    }
    let page = SessionPage {
        title: g.title.clone().unwrap_or_else(|| id.to_string()),
        running: r.readable && g.end_reason.is_none(),
        readable: r.readable,
        facts,
        risk_level: r.risk.level.as_str().to_string(),
        risk_class: r.risk.level.as_str().to_lowercase(),
        risk_score: r.risk.score,
        readiness: r.risk.readiness.as_str().to_string(),
        factors: r
            .risk
            .factors
            .iter()
            .map(|f| {
                (
                    f.id.to_string(),
                    f.weight,
                    f.evidence.clone(),
                    f.mitigation.to_string(),
                )
            })
            .collect(),
        disclaimer: r.risk.disclaimer.to_string(),
        timeline: svg::timeline(g),
        steps,
        files,
        changes_note: r.changes_note.clone().unwrap_or_default(),
        // The verification runs the risk assessment weighed.
        verifications: r
            .risk
            .verification_runs
            .iter()
            .map(|v| {
                (
                    v.seq,
                    v.step.map_or("-".into(), |s| s.to_string()),
                    v.command.clone(),
                    format!(
                        "{} ({})",
                        if v.passed { "passed" } else { "failed" },
                        v.source.as_str()
                    ),
                    !v.passed,
                    v.duration_ms.map_or(String::new(), tool_duration),
                )
            })
            .collect(),
        goals: r
            .goals
            .iter()
            .map(|gs| GoalView {
                title: gs.title.clone(),
                id: gs.goal.clone(),
                state: if gs.completed {
                    "completed".into()
                } else if let Some(b) = &gs.blocked {
                    format!("blocked: {b}")
                } else if let Some(p) = &gs.paused {
                    format!("paused: {p}")
                } else if gs.can_complete {
                    format!(
                        "not completed; the gate would accept it now: {}",
                        gs.completion_reason
                    )
                } else {
                    format!("not completed: {}", gs.completion_reason)
                },
                digest: gs.contract_digest.clone(),
                checks: gs
                    .checks
                    .iter()
                    .map(|c| CheckView {
                        id: c.id.clone(),
                        state: c.state.to_string(),
                        why: c.why.clone().unwrap_or_default(),
                        receipt: c.receipt_seq.map_or(String::new(), |s| format!("#{s}")),
                    })
                    .collect(),
            })
            .collect(),
        gates,
        points,
        unclaimed,
        baseline_command: if g.snapshots.is_empty() {
            String::new()
        } else {
            format!("tacho session rollback {id} --dry-run")
        },
        children,
        rolled_back_by: r
            .rolled_back_by
            .iter()
            .map(|b| {
                let mut what = vec![match b.before_step {
                    Some(step) => format!("to before step {step}"),
                    None => "to its first snapshot".to_string(),
                }];
                if b.rolled_back != r.session {
                    what.push(format!("with the session it belongs to, {}", b.rolled_back));
                }
                for (n, done) in [
                    (b.restored, "restored"),
                    (b.deleted, "deleted"),
                    (b.recreated, "recreated"),
                    (b.modes, "mode(s) set back"),
                ] {
                    if n > 0 {
                        what.push(format!("{n} file(s) {done}"));
                    }
                }
                if b.skipped > 0 {
                    what.push(format!("{} path(s) left as they were", b.skipped));
                }
                (b.session.clone(), time(Some(b.at_unix_ns)), what.join(", "))
            })
            .collect(),
        rollback_of: g.rollbacks_of.clone(),
        calls_hidden: r.calls_hidden,
        findings: r.integrity.findings.clone(),
        head: r.integrity.head.clone(),
        events: r.integrity.events,
        id: id.into_string(),
    };
    render(&page)
}
