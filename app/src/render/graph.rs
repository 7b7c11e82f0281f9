//! The execution graph in text: Markdown, a Mermaid flowchart, the topology and the
//! timeline (SPEC.md §8). Pure functions of a graph and its risk assessment.

use tacho_projections::{ExecutionGraph, RiskAssessment, StepNode, ToolNode};
use tacho_schema::time_to_rfc3339;

use super::{duration, route, since, thousands, tool_duration};

/// The graph as JSON (schema `tacho.graph.v1`) with its duration and risk headline.
pub fn json(g: &ExecutionGraph, risk: &RiskAssessment) -> serde_json::Value {
    let mut v = serde_json::to_value(g).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("duration_ms".into(), g.duration_ms().into());
        o.insert(
            "risk".into(),
            serde_json::json!({
                "score": risk.score,
                "level": risk.level,
                "readiness": risk.readiness,
                "verified": risk.verified,
            }),
        );
    }
    v
}

fn status(g: &ExecutionGraph, t: &ToolNode) -> String {
    match t.status {
        Some(s) => s.to_string(),
        None if g.end_reason.is_some() => "interrupted".into(),
        None => "running".into(),
    }
}

fn tool_line(g: &ExecutionGraph, t: &ToolNode) -> String {
    let mut s = t.tool.clone();
    if let Some(target) = &t.target {
        s.push_str(": ");
        s.push_str(&one_line(target, 80));
    }
    s.push_str(" → ");
    s.push_str(&status(g, t));
    if let Some(ms) = t.duration_ms {
        s.push_str(&format!(" ({})", tool_duration(ms)));
    }
    if let Some(e) = &t.error {
        s.push_str(": ");
        s.push_str(&one_line(e, 80));
    }
    s
}

/// The first line of `s`, cut to `max` characters.
fn one_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > max || s.contains('\n') {
        let cut: String = line.chars().take(max).collect();
        format!("{cut}…")
    } else {
        line.to_string()
    }
}

fn step_heading(s: &StepNode) -> String {
    let mut h = format!("Step {}", s.number);
    if s.implicit {
        h.push_str(" (outside any recorded step)");
    }
    match s.duration_ms() {
        Some(ms) => h.push_str(&format!(" ({})", duration(ms))),
        None => h.push_str(" (unfinished)"),
    }
    h
}

pub fn markdown(g: &ExecutionGraph, risk: &RiskAssessment) -> String {
    let mut o = String::new();
    o.push_str(&format!("## Session {}\n", g.session));
    if let Some(t) = &g.title {
        o.push_str(&format!("{t}\n"));
    }
    match (&g.branch, &g.parent) {
        (Some(b), _) => o.push_str(&format!(
            "Branch of {} (its events through #{} copied)\n",
            b.parent, b.through_seq
        )),
        (None, Some(p)) => o.push_str(&format!("Parent: {p}\n")),
        (None, None) => {}
    }
    for r in &g.rollbacks_of {
        o.push_str(&format!("Rollback of {r}\n"));
    }
    if let Some(t) = &g.todos {
        let open: Vec<&str> = t.open().map(|i| i.content.as_str()).collect();
        o.push_str(&format!(
            "Todos: {} ({} open{}), as of event #{}\n",
            t.items.len(),
            open.len(),
            open.first()
                .map(|f| format!(": {}", f.lines().next().unwrap_or("")))
                .unwrap_or_default(),
            t.seq
        ));
    }
    if !g.snapshots.is_empty() {
        o.push_str(&format!(
            "Snapshots: {} (rollback points: tacho session rollback {} --list)\n",
            g.snapshots.len(),
            g.session
        ));
    }
    o.push_str(&format!(
        "Duration: {} | Risk: {} ({}/100) | Tokens: {} in / {} out (cache read {}, cache write {})\n",
        g.duration_ms().map_or("-".into(), duration),
        risk.level.as_str(),
        risk.score,
        thousands(g.tokens.input),
        thousands(g.tokens.output),
        thousands(g.tokens.cache_read),
        thousands(g.tokens.cache_write),
    ));
    if !g.agents.is_empty() {
        o.push_str(&format!("Agents: {}\n", g.agents.join(", ")));
    }
    for r in &g.routes {
        o.push_str(&format!(
            "Route: {}{}\n",
            route(r.from.as_deref(), &r.to),
            r.reason
                .as_ref()
                .map(|x| format!(" ({})", one_line(x, 100)))
                .unwrap_or_default()
        ));
    }
    for s in &g.steps {
        o.push_str(&format!(
            "### {} | tokens: {}/{}\n",
            step_heading(s),
            s.tokens.input,
            s.tokens.output
        ));
        for t in &s.tools {
            o.push_str(&format!("- {}\n", tool_line(g, t)));
        }
        for v in g.verifications.iter().filter(|v| v.step == Some(s.number)) {
            o.push_str(&format!("- verification: {} → {}\n", v.command, v.status));
        }
        for e in g.errors.iter().filter(|e| e.step == Some(s.number)) {
            o.push_str(&format!("- error: {}\n", one_line(&e.message, 100)));
        }
    }
    if !g.files.is_empty() {
        o.push_str("### Files changed\n");
        for (path, f) in &g.files {
            let what = if f.deleted {
                "deleted"
            } else if f.created {
                "created"
            } else if f.renamed_from.is_some() {
                "renamed"
            } else {
                "modified"
            };
            // A file the session created has no lines of before: what its edits added
            // and took away again nets out to its lines now.
            let lines = if f.created && !f.deleted {
                format!("+{}", f.lines_added.saturating_sub(f.lines_removed))
            } else {
                format!("+{} -{}", f.lines_added, f.lines_removed)
            };
            o.push_str(&format!("- {path} ({what}, {lines})\n"));
        }
    }
    if !g.unclaimed.is_empty() {
        o.push_str("### Changes no tool call made\n");
        for (i, u) in g.unclaimed.iter().enumerate() {
            o.push_str(&format!(
                "{}. between events #{} and #{} (snapshots {} → {}; undo: `tacho session rollback {} --unclaimed {}`)\n",
                i + 1,
                u.after_seq,
                u.before_seq,
                super::short_id(&u.from_snapshot),
                super::short_id(&u.to_snapshot),
                g.session,
                i + 1
            ));
            for f in &u.files {
                o.push_str(&format!(
                    "   - {} ({}, +{} -{})\n",
                    f.path, f.change, f.lines_added, f.lines_removed
                ));
            }
        }
    }
    match g.end_reason {
        Some(r) => o.push_str(&format!("Ended: {r}\n")),
        None => o.push_str("Ended: not yet (running, or the end was not recorded)\n"),
    }
    o
}

/// Escapes text for a quoted Mermaid label: quotes, angle brackets and ampersands
/// become Mermaid entity codes; line breaks become `<br/>`.
pub fn mermaid_label(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => o.push_str("#quot;"),
            '<' => o.push_str("#lt;"),
            '>' => o.push_str("#gt;"),
            '&' => o.push_str("#amp;"),
            '#' => o.push_str("#35;"),
            '\n' => o.push_str("<br/>"),
            '\r' | '`' => {}
            c => o.push(c),
        }
    }
    o
}

pub fn mermaid(g: &ExecutionGraph, risk: &RiskAssessment) -> String {
    let mut o = String::from("flowchart TD\n");
    let head = format!(
        "Session {}\n{} · {} {}/100",
        g.session,
        g.duration_ms().map_or("-".into(), duration),
        risk.level.as_str(),
        risk.score
    );
    o.push_str(&format!("    session[\"{}\"]\n", mermaid_label(&head)));
    let mut prev = "session".to_string();
    let mut failed = Vec::new();
    for (si, s) in g.steps.iter().enumerate() {
        let id = format!("s{si}");
        let label = format!(
            "{}{}\n{}/{} tokens",
            step_heading(s),
            s.agent
                .as_ref()
                .map(|a| format!(" · {a}"))
                .unwrap_or_default(),
            s.tokens.input,
            s.tokens.output
        );
        o.push_str(&format!("    {id}[\"{}\"]\n", mermaid_label(&label)));
        o.push_str(&format!("    {prev} --> {id}\n"));
        for (ti, t) in s.tools.iter().enumerate() {
            let tid = format!("s{si}t{ti}");
            let label = format!(
                "{}{}\n{}{}",
                t.tool,
                t.target
                    .as_ref()
                    .map(|x| format!(": {}", one_line(x, 60)))
                    .unwrap_or_default(),
                status(g, t),
                t.duration_ms
                    .map(|ms| format!(" · {}", tool_duration(ms)))
                    .unwrap_or_default()
            );
            o.push_str(&format!("    {tid}[\"{}\"]\n", mermaid_label(&label)));
            o.push_str(&format!("    {id} --> {tid}\n"));
            if t.status
                .is_some_and(|st| st != tacho_schema::ToolStatus::Ok)
            {
                failed.push(tid);
            }
        }
        prev = id;
    }
    if !failed.is_empty() {
        o.push_str("    classDef failed fill:#fdd,stroke:#c00,color:#600\n");
        o.push_str(&format!("    class {} failed\n", failed.join(",")));
    }
    o
}

pub fn topology(g: &ExecutionGraph) -> String {
    let mut o = String::new();
    o.push_str(&format!("Session {}\n\nAgents\n", g.session));
    for a in &g.agents {
        let steps = g
            .steps
            .iter()
            .filter(|s| s.agent.as_deref() == Some(a))
            .count();
        let tools = g
            .tools()
            .filter(|(_, t)| t.agent.as_deref() == Some(a))
            .count();
        o.push_str(&format!("  {a}: {steps} step(s), {tools} tool call(s)\n"));
    }
    if !g.routes.is_empty() {
        o.push_str("\nRoutes\n");
        for r in &g.routes {
            o.push_str(&format!("  {}\n", route(r.from.as_deref(), &r.to)));
        }
    }
    // Steps run one after another, so every step is on the critical path; inside a
    // step, its longest tool call is what the step waited for.
    let total = g.duration_ms().unwrap_or(0).max(1);
    o.push_str("\nCritical path (steps in order; in each, the longest tool call)\n");
    let mut path = Vec::new();
    for s in &g.steps {
        let ms = s.duration_ms().unwrap_or(0);
        o.push_str(&format!(
            "  {} {:>5.1}%  {}{}\n",
            step_heading(s),
            ms as f64 * 100.0 / total as f64,
            s.agent.as_deref().unwrap_or(""),
            s.title
                .as_ref()
                .map(|t| format!(": {t}"))
                .unwrap_or_default()
        ));
        if let Some(t) = s
            .tools
            .iter()
            .max_by_key(|t| (t.duration_ms.unwrap_or(0), std::cmp::Reverse(t.seq)))
        {
            o.push_str(&format!("      └─ {}\n", tool_line(g, t)));
            path.push(format!(
                "{} {}",
                t.tool,
                t.target
                    .as_deref()
                    .map(|x| one_line(x, 30))
                    .unwrap_or_default()
            ));
        }
    }
    if !path.is_empty() {
        o.push_str(&format!("\nPath: {}\n", path.join(" → ")));
    }
    o
}

pub fn timeline(g: &ExecutionGraph) -> String {
    let start = g.started_unix_ns.unwrap_or(0);
    let rel = |t: i64| since(start, t);
    let mut rows: Vec<(i64, u64, String)> = Vec::new();
    if let Some(t) = g.started_unix_ns {
        rows.push((t, 0, format!("session start ({})", time_to_rfc3339(t))));
    }
    for s in &g.steps {
        rows.push((
            s.started_unix_ns,
            s.start_seq,
            format!(
                "{} start{}",
                step_heading(s),
                s.agent
                    .as_ref()
                    .map(|a| format!(" [{a}]"))
                    .unwrap_or_default()
            ),
        ));
        for t in &s.tools {
            rows.push((t.started_unix_ns, t.seq, format!("  {}", tool_line(g, t))));
        }
    }
    for r in &g.routes {
        rows.push((
            r.at_unix_ns,
            r.seq,
            format!("route {}", route(r.from.as_deref(), &r.to)),
        ));
    }
    for v in &g.verifications {
        rows.push((
            v.at_unix_ns,
            v.seq,
            format!("verification {} → {}", v.command, v.status),
        ));
    }
    for e in &g.errors {
        rows.push((
            e.at_unix_ns,
            e.seq,
            format!(
                "{}error: {}",
                if e.fatal { "FATAL " } else { "" },
                one_line(&e.message, 100)
            ),
        ));
    }
    for (i, u) in g.unclaimed.iter().enumerate() {
        let paths: Vec<&str> = u.files.iter().map(|f| f.path.as_str()).collect();
        rows.push((
            u.found_unix_ns,
            u.before_seq,
            format!(
                "changes no tool call made ({}, since event #{}): {}",
                i + 1,
                u.after_seq,
                paths.join(", ")
            ),
        ));
    }
    if let (Some(t), Some(r)) = (g.ended_unix_ns, g.end_reason) {
        rows.push((t, u64::MAX, format!("session end: {r}")));
    }
    rows.sort_by_key(|r| (r.1, r.0));
    rows.iter()
        .map(|(t, _, s)| format!("{} {s}\n", rel(*t)))
        .collect()
}
