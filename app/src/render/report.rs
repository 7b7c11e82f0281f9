//! The audit report of a session: Markdown, and the same document as one
//! self-contained HTML file (no script, no external request: the page's
//! Content-Security-Policy forbids both).

use std::fmt::Write;

use tacho_projections::{ExecutionGraph, ToolNode};
use tacho_schema::time_to_rfc3339;

use super::{duration, route, thousands, tool_duration};
use crate::report::Report;

/// Text as Markdown inline content, also inside a table cell: the characters that
/// start emphasis, code, links, HTML, entities or cells escaped (and one that would
/// start a heading or list item), line breaks as spaces.
pub fn md(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 8);
    for (i, c) in s.chars().enumerate() {
        match c {
            '\n' | '\r' | '\t' => o.push(' '),
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '~' | '&' => {
                o.push('\\');
                o.push(c);
            }
            '#' | '+' | '-' if i == 0 => {
                o.push('\\');
                o.push(c);
            }
            c => o.push(c),
        }
    }
    o
}

/// A fenced code block whose fence is longer than any run of backticks in `body`.
fn fenced(o: &mut String, info: &str, body: &str) {
    let mut longest = 0;
    let mut run = 0;
    for c in body.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest.max(2) + 1);
    let _ = writeln!(o, "{fence}{info}");
    o.push_str(body);
    if !body.ends_with('\n') {
        o.push('\n');
    }
    let _ = writeln!(o, "{fence}\n");
}

fn time(ns: Option<i64>) -> String {
    ns.map_or("-".into(), time_to_rfc3339)
}

fn tool_status(g: &ExecutionGraph, t: &ToolNode) -> String {
    match t.status {
        Some(s) => s.to_string(),
        None if g.end_reason.is_some() => "interrupted".into(),
        None => "running".into(),
    }
}

/// The report as Markdown.
pub fn markdown(r: &Report) -> String {
    let g = &r.graph;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "# Audit report: {}\n",
        md(g.title.as_deref().unwrap_or(&r.session))
    );
    if r.readable {
        let _ = writeln!(
            o,
            "Risk **{} ({}/100)**, readiness {}; record {}.\n",
            r.risk.level.as_str(),
            r.risk.score,
            r.risk.readiness.as_str(),
            if r.integrity.findings.is_empty() {
                "verified"
            } else {
                "**does not verify**"
            }
        );
        body(r, &mut o);
    } else {
        o.push_str("The record **does not verify**, and the session's events could not be read to their end: nothing of it is shown but what its verification found.\n\n");
    }
    integrity(r, &mut o);
    o
}

/// Everything but the record's integrity.
fn body(r: &Report, o: &mut String) {
    let g = &r.graph;
    o.push_str("## Session\n\n| | |\n|---|---|\n");
    let row = |o: &mut String, k: &str, v: String| {
        let _ = writeln!(o, "| {k} | {v} |");
    };
    row(o, "Session", format!("`{}`", r.session));
    row(o, "Title", md(g.title.as_deref().unwrap_or("-")));
    row(
        o,
        "Agents",
        if g.agents.is_empty() {
            "-".into()
        } else {
            md(&g.agents.join(", "))
        },
    );
    row(o, "Project", md(g.project.as_deref().unwrap_or("-")));
    row(o, "Workspace", md(g.workspace.as_deref().unwrap_or("-")));
    if let Some(p) = &g.parent {
        row(o, "Parent session", format!("`{p}`"));
    }
    if let Some(b) = &g.branch {
        row(
            o,
            "Branch of",
            format!("`{}` through event #{}", b.parent, b.through_seq),
        );
    }
    row(o, "Started", time(g.started_unix_ns));
    row(
        o,
        "Ended",
        match (g.end_reason, g.ended_unix_ns) {
            (Some(reason), t) => format!("{} ({reason})", time(t)),
            (None, _) => "not recorded (running, or the end was not recorded)".into(),
        },
    );
    row(o, "Duration", g.duration_ms().map_or("-".into(), duration));
    row(
        o,
        "Steps, tool calls, model calls",
        format!(
            "{}, {}, {}",
            g.steps.len(),
            g.steps.iter().map(|s| s.tools.len()).sum::<usize>(),
            g.model_calls
        ),
    );
    row(
        o,
        "Permission prompts (denied)",
        format!("{} ({})", g.permission_asks, g.permission_denials),
    );
    o.push('\n');

    o.push_str("## Goal\n\n");
    if let Some(n) = &r.goals_note {
        let _ = writeln!(o, "{}\n", md(n));
    }
    for gs in &r.goals {
        let _ = writeln!(
            o,
            "**{}** (`{}`, revision {}){}: {}.\n",
            md(&gs.title),
            gs.goal,
            gs.revision,
            if gs.assured { ", assured" } else { "" },
            goal_state(gs)
        );
        let _ = writeln!(o, "Contract digest `{}`.\n", gs.contract_digest);
        if let Some(why) = &gs.no_fresh_evidence {
            let _ = writeln!(o, "No fresh evidence can be produced now: {}\n", md(why));
        }
        if !gs.checks.is_empty() {
            o.push_str(
                "| check | state (against the source now) | receipt | why |\n|---|---|---|---|\n",
            );
            for c in &gs.checks {
                let _ = writeln!(
                    o,
                    "| `{}` | {} | {} | {} |",
                    c.id,
                    c.state,
                    c.receipt_seq.map_or("-".into(), |s| format!("event #{s}")),
                    c.why.as_deref().map_or("".into(), md)
                );
            }
            o.push('\n');
        }
    }
    if r.goals.is_empty() && r.goals_note.is_none() {
        o.push_str("No goal was set for this session.\n\n");
    }

    if !g.routes.is_empty() {
        o.push_str("## Routing\n\n");
        for rt in &g.routes {
            let _ = writeln!(
                o,
                "- {} {}{}",
                time(Some(rt.at_unix_ns)),
                md(&route(rt.from.as_deref(), &rt.to)),
                rt.reason
                    .as_ref()
                    .map(|x| format!(": {}", md(x)))
                    .unwrap_or_default()
            );
        }
        o.push('\n');
    }

    o.push_str("## Actions\n\n");
    if g.steps.is_empty() {
        o.push_str("No step was recorded.\n\n");
    }
    for s in &g.steps {
        let _ = writeln!(
            o,
            "### Step {}{}{}\n",
            s.number,
            s.title
                .as_ref()
                .map(|t| format!(": {}", md(t)))
                .unwrap_or_default(),
            match s.duration_ms() {
                Some(ms) => format!(" ({})", duration(ms)),
                None => " (unfinished)".into(),
            }
        );
        if !s.tools.is_empty() {
            o.push_str("| # | tool | target | result | time |\n|---|---|---|---|---|\n");
            for t in &s.tools {
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {}{} | {} |",
                    t.seq,
                    md(&t.tool),
                    t.target.as_deref().map_or("".into(), md),
                    tool_status(g, t),
                    t.error
                        .as_ref()
                        .map(|e| format!(": {}", md(e.lines().next().unwrap_or(""))))
                        .unwrap_or_default(),
                    t.duration_ms.map_or("".into(), tool_duration)
                );
            }
            o.push('\n');
        }
        for e in g.errors.iter().filter(|e| e.step == Some(s.number)) {
            let _ = writeln!(
                o,
                "- error{}: {}",
                if e.fatal { " (fatal)" } else { "" },
                md(&e.message)
            );
        }
        let _ = writeln!(
            o,
            "Tokens: {} in, {} out ({} model calls).\n",
            thousands(s.tokens.input),
            thousands(s.tokens.output),
            s.model_calls
        );
    }

    files_changed(r, o);
    unclaimed(r, o);
    validation(r, o);

    o.push_str("## Risk\n\n");
    let _ = writeln!(
        o,
        "**{} ({}/100)**, confidence {}, readiness {}: {} file(s), {} line(s) changed, {} failed tool call(s); verified after the last edit: {}.\n",
        r.risk.level.as_str(),
        r.risk.score,
        format!("{:?}", r.risk.confidence).to_lowercase(),
        r.risk.readiness.as_str(),
        r.risk.files_changed,
        r.risk.lines_changed,
        r.risk.tool_failures,
        if r.risk.verified { "yes" } else { "no" }
    );
    if r.risk.factors.is_empty() {
        o.push_str("No risk factor applies.\n\n");
    } else {
        o.push_str("| factor | weight | evidence | mitigation |\n|---|---|---|---|\n");
        for f in &r.risk.factors {
            let _ = writeln!(
                o,
                "| {} | +{} | {} | {} |",
                f.id,
                f.weight,
                md(&f.evidence),
                md(f.mitigation)
            );
        }
        o.push('\n');
    }
    let _ = writeln!(o, "{}\n", md(r.risk.disclaimer));

    o.push_str("## Token usage\n\n| input | output | cache read | cache write | model calls |\n|---|---|---|---|---|\n");
    let _ = writeln!(
        o,
        "| {} | {} | {} | {} | {} |\n",
        thousands(g.tokens.input),
        thousands(g.tokens.output),
        thousands(g.tokens.cache_read),
        thousands(g.tokens.cache_write),
        g.model_calls
    );
    o.push_str(
        "Input excludes cached tokens; a response repeated under one response id counts once.\n\n",
    );
}

/// A goal's state in words: completed, cleared, blocked, paused, or not completed with the
/// reason the completion gate would give now (`completion_reason`).
fn goal_state(gs: &crate::GoalStatus) -> String {
    if gs.completed {
        "completed".to_string()
    } else if let Some(c) = &gs.cleared {
        format!("cleared by the user ({})", md(c))
    } else if let Some(b) = &gs.blocked {
        format!("blocked ({})", md(b))
    } else if let Some(p) = &gs.paused {
        format!("paused ({})", md(p))
    } else if gs.can_complete {
        format!(
            "not completed; the gate would accept it now: {}",
            md(&gs.completion_reason)
        )
    } else {
        format!("not completed: {}", md(&gs.completion_reason))
    }
}

/// The files the risk assessment counts, with their line counts, then the snapshots'
/// diffs of them (or why there is none).
fn files_changed(r: &Report, o: &mut String) {
    o.push_str("## Files changed\n\n");
    if r.files.is_empty() {
        o.push_str("No file changed.\n\n");
    } else {
        let _ = writeln!(
            o,
            "{} file(s), {} line(s) added or removed (what the risk assessment counts).\n",
            r.files.len(),
            r.risk.lines_changed
        );
        o.push_str("| file | change | + | - | seen in |\n|---|---|---|---|---|\n");
        for f in &r.files {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                md(&f.path),
                match &f.renamed_from {
                    Some(from) => format!("{} from {}", f.change.as_str(), md(from)),
                    None => f.change.as_str().to_string(),
                },
                f.lines_added,
                f.lines_removed,
                match f.edits {
                    0 => "snapshots".to_string(),
                    n => format!("{n} edit event(s)"),
                }
            );
        }
        o.push('\n');
    }
    if let Some(n) = &r.changes_note {
        let _ = writeln!(o, "{}\n", md(n));
    }
    if r.changes.is_empty() {
        return;
    }
    if let Some((a, b)) = &r.changes_between {
        let _ = writeln!(
            o,
            "Diffs from snapshot `{}` (the session's first) to `{}` (its last):\n",
            super::short_id(a),
            super::short_id(b)
        );
    }
    let mut shown = std::collections::BTreeSet::new();
    for f in &r.files {
        let Some(c) = f
            .diff
            .as_deref()
            .and_then(|p| r.changes.iter().find(|c| c.path == p))
        else {
            let _ = writeln!(
                o,
                "{}: no change between the first snapshot and the last (changed back, or outside the snapshots' workspace).\n",
                md(&f.path)
            );
            continue;
        };
        shown.insert(c.path.as_str());
        diff_of(o, &f.path, c);
    }
    // The snapshots show a change the graph does not count among the files: one no
    // tool call made (its own section), or its merge failed (a note said why). Shown,
    // and said.
    let unclaimed: std::collections::BTreeSet<&str> = r
        .graph
        .unclaimed
        .iter()
        .flat_map(|u| u.files.iter().map(|f| f.path.as_str()))
        .collect();
    for c in r
        .changes
        .iter()
        .filter(|c| !shown.contains(c.path.as_str()))
    {
        let _ = writeln!(
            o,
            "{}: {}.\n",
            md(&c.path),
            if unclaimed.contains(c.path.as_str()) {
                "changed by no tool call (see Changes no tool call made)"
            } else {
                "changed between the snapshots, not counted by the risk assessment"
            }
        );
        diff_of(o, &c.path, c);
    }
}

/// The changes between snapshots no tool call claims (SPEC §8.1), each with the
/// command that undoes it.
fn unclaimed(r: &Report, o: &mut String) {
    if r.rollback.unclaimed.is_empty() {
        return;
    }
    o.push_str("## Changes no tool call made\n\n");
    o.push_str("Changed between two snapshots while no tool call was running: the user, another process, or a tool whose hooks did not fire. Not counted among the files changed; each can be undone on its own.\n\n");
    o.push_str(
        "| # | between events | file | change | + | - | undo |\n|---|---|---|---|---|---|---|\n",
    );
    for u in &r.rollback.unclaimed {
        for f in &u.files {
            let _ = writeln!(
                o,
                "| {} | #{}..#{} | {} | {} | {} | {} | `{}` |",
                u.index,
                u.after_seq,
                u.before_seq,
                md(&f.path),
                f.change,
                f.lines_added,
                f.lines_removed,
                u.undo
            );
        }
    }
    o.push('\n');
}

fn diff_of(o: &mut String, path: &str, c: &tacho_git::snapshot::FileDiff) {
    match &c.unified {
        Some(d) => fenced(o, "diff", d),
        None => {
            let _ = writeln!(
                o,
                "{}: binary, a link, or a mode change (no text diff).\n",
                md(path)
            );
        }
    }
}

/// The verification runs the risk assessment weighed, as it weighed them.
fn validation(r: &Report, o: &mut String) {
    o.push_str("## Validation\n\n");
    let runs = &r.risk.verification_runs;
    if runs.is_empty() {
        o.push_str("No verification run (tests, build, lint, goal check) was recorded.\n\n");
        return;
    }
    o.push_str("| # | step | command | from | result | time |\n|---|---|---|---|---|---|\n");
    for v in runs {
        let _ = writeln!(
            o,
            "| {} | {} | `{}` | {} | {} | {} |",
            v.seq,
            v.step.map_or("-".into(), |s| s.to_string()),
            v.command.replace('`', "'").replace('|', "\\|"),
            match (&v.check, &v.goal) {
                (Some(c), Some(g)) => format!("goal check `{c}` of `{g}`"),
                _ => v.source.as_str().to_string(),
            },
            if v.passed { "passed" } else { "failed" },
            v.duration_ms.map_or("".into(), tool_duration)
        );
    }
    let _ = writeln!(
        o,
        "\nVerified after the last edit: {}.\n",
        if r.risk.verified { "yes" } else { "no" }
    );
}

/// The record's integrity and how to check it independently.
fn integrity(r: &Report, o: &mut String) {
    let g = &r.graph;
    o.push_str("## Record integrity\n\n");
    let i = &r.integrity;
    let _ = writeln!(
        o,
        "{} event(s) in {} batch(es); chain head `{}`.\n",
        i.events, i.batches, i.head
    );
    if i.findings.is_empty() {
        o.push_str("Every checksum, chain step, sequence number and payload verified, as did the replay checks (results against calls, steps balanced).\n\n");
    } else {
        o.push_str("**The record does not verify:**\n\n");
        for f in &i.findings {
            let _ = writeln!(o, "- {}", md(f));
        }
        o.push('\n');
    }
    o.push_str("To verify independently, export the record as a package and check it on any machine; its head must equal the one above:\n\n");
    fenced(
        o,
        "sh",
        &format!(
            "tacho session replay {s} --mode export --output {s}.tacho\ntacho session replay --mode verify --package {s}.tacho\n",
            s = r.session
        ),
    );
    if !g.snapshots.is_empty() {
        let _ = writeln!(
            o,
            "Rollback points: `tacho session rollback {} --list`.\n",
            r.session
        );
    }
    let _ = writeln!(
        o,
        "---\nGenerated by tacho {} at {}.",
        env!("CARGO_PKG_VERSION"),
        time_to_rfc3339(r.generated_unix_ns)
    );
}

const STYLE: &str = "body{font:15px/1.5 system-ui,-apple-system,Segoe UI,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1f2328}\
h1{font-size:1.6rem}h2{border-bottom:1px solid #d0d7de;padding-bottom:.2rem;margin-top:2rem}\
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:left;vertical-align:top}\
code{background:#f6f8fa;padding:0 .2rem;border-radius:3px}pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;font-size:13px}\
pre code{padding:0}";

/// The report as one self-contained HTML document: the Markdown rendered (raw HTML in
/// it shown as text, never interpreted), with an inline style sheet and a policy that
/// forbids scripts and every request.
pub fn html(r: &Report) -> String {
    let body = html_of(&markdown(r));
    let title = escape_title(r.graph.title.as_deref().unwrap_or(&r.session));
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>tacho audit report: {title}</title>\n<style>{STYLE}</style></head>\n<body>\n{body}</body></html>\n"
    )
}

/// Markdown (with tables) to HTML; raw HTML in it becomes text.
fn html_of(markdown: &str) -> String {
    use pulldown_cmark::{Event, Options, Parser, html};
    let parser = Parser::new_ext(markdown, Options::ENABLE_TABLES).map(|e| match e {
        Event::Html(s) | Event::InlineHtml(s) => Event::Text(s),
        other => other,
    });
    let mut body = String::with_capacity(markdown.len() * 2);
    html::push_html(&mut body, parser);
    body
}

/// Text for the `<title>` element.
fn escape_title(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an agent wrote stays text: no emphasis, link, HTML or table cell comes out
    /// of it, in Markdown or in the HTML made from it.
    #[test]
    fn recorded_text_cannot_become_markup() {
        let evil = "# <script>alert(1)</script> *x* [a](http://e.x) | cell &amp; `c`";
        let m = md(evil);
        let html_out = html_of(&format!("| a |\n|---|\n| {m} |\n"));
        assert!(!html_out.contains("<script>"), "{html_out}");
        assert!(
            !html_out.contains("<em>") && !html_out.contains("<a "),
            "{html_out}"
        );
        assert_eq!(html_out.matches("<td>").count(), 1, "{html_out}");
        assert!(html_out.contains("&amp;amp;"), "{html_out}");
        let mut f = String::new();
        fenced(&mut f, "diff", "a ``` b ```` c\n");
        assert!(f.starts_with("`````diff\n"), "{f}");
    }
}
