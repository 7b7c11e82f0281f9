//! `session list` and `session show` in text.

use tacho_projections::SessionStatus;
use tacho_schema::time_to_rfc3339;

use super::{duration, thousands};
use crate::{SessionDetail, SessionRow, project_of};

/// A session's status in words: `running`, or how it ended.
pub fn status(s: SessionStatus) -> String {
    match s {
        SessionStatus::Running => "running".into(),
        SessionStatus::Ended(r) => r.to_string(),
    }
}

/// A time as `2026-12-02 07:53:12` (UTC), or `-`.
pub fn when(t: Option<i64>) -> String {
    t.map(|t| {
        time_to_rfc3339(t)
            .chars()
            .take(19)
            .collect::<String>()
            .replace('T', " ")
    })
    .unwrap_or_else(|| "-".into())
}

/// The listing's table (damaged rows are left out: the frontend says them apart).
pub fn table(rows: &[SessionRow]) -> String {
    // As wide as the longest id shown (36-character UUIDs of Claude Code, Gemini and
    // Codex among them), so that the columns line up.
    let w = rows
        .iter()
        .filter(|r| r.damaged.is_none())
        .map(|r| r.summary.session.chars().count())
        .max()
        .unwrap_or(0)
        .max("SESSION".len());
    let mut o = format!(
        "{:<w$} {:<20} {:>7} {:>6} {:>6} {:>14}  {:<13} {:<15} {}\n",
        "SESSION",
        "STARTED",
        "EVENTS",
        "TOOLS",
        "FAILED",
        "TOKENS IN/OUT",
        "RISK",
        "STATUS",
        "AGENT / TITLE"
    );
    for r in rows.iter().filter(|r| r.damaged.is_none()) {
        let s = &r.summary;
        let who = match (&s.agent, &s.title) {
            (Some(a), Some(t)) => format!("{a}: {t}"),
            (Some(a), None) => a.clone(),
            (None, Some(t)) => t.clone(),
            (None, None) => String::new(),
        };
        o.push_str(&format!(
            "{:<w$} {:<20} {:>7} {:>6} {:>6} {:>14}  {:<13} {:<15} {}\n",
            s.session,
            when(s.started_unix_ns),
            thousands(s.events),
            s.tool_calls,
            s.tool_failures,
            format!("{}/{}", thousands(s.tokens_in), thousands(s.tokens_out)),
            format!("{} {}", r.risk_level.as_str(), r.risk_score),
            status(s.status),
            who
        ));
    }
    o
}

/// One session's headline.
pub fn show(d: &SessionDetail) -> String {
    let (s, g, r) = (&d.summary, &d.graph, &d.risk);
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let mut o = String::new();
    let mut put = |line: String| {
        o.push_str(&line);
        o.push('\n');
    };
    put(format!("Session   {}", s.session));
    put(format!("Title     {}", opt(&s.title)));
    put(format!(
        "Agents    {}",
        if g.agents.is_empty() {
            "-".into()
        } else {
            g.agents.join(", ")
        }
    ));
    put(format!("Workspace {}", opt(&s.workspace)));
    put(format!(
        "Project   {}",
        project_of(s).unwrap_or_else(|| "-".into())
    ));
    if let Some(p) = &s.parent {
        put(format!("Parent    {p}"));
    }
    if let Some(origin) = &d.origin {
        put(format!("Fetched   from {} ({})", origin.remote, origin.url));
    }
    put(format!("Signature {}", d.signature.describe()));
    put(format!(
        "Started   {}",
        s.started_unix_ns.map_or("-".into(), time_to_rfc3339)
    ));
    put(format!(
        "Status    {}{}",
        status(s.status),
        g.duration_ms()
            .map(|d| format!(" after {}", duration(d)))
            .unwrap_or_default()
    ));
    put(format!(
        "Activity  {} events, {} steps, {} tool calls ({} failed), {} model calls",
        thousands(s.events),
        g.steps.len(),
        s.tool_calls,
        s.tool_failures,
        g.model_calls
    ));
    put(format!(
        "Tokens    {} in / {} out, cache read {}, cache write {}",
        thousands(g.tokens.input),
        thousands(g.tokens.output),
        thousands(g.tokens.cache_read),
        thousands(g.tokens.cache_write)
    ));
    put(format!("Files     {} changed", r.files_changed));
    put(format!(
        "Risk      {} ({}/100), {}",
        r.level.as_str(),
        r.score,
        r.readiness.as_str()
    ));
    put(format!("Log       {} segment(s)", d.segments));
    o
}

/// `session branch`: the new session and what it took.
pub fn branched(b: &crate::Branched) -> String {
    format!(
        "branched {} through event #{} into {} ({} events copied; {} is unchanged)\n",
        b.parent, b.through_seq, b.session, b.copied, b.parent
    )
}

/// `session end`: each session ended, the asked one and its unended descendants.
pub fn ended(e: &crate::Ended) -> String {
    let mut o = String::new();
    for s in &e.ended {
        let how = if s.session == e.session {
            e.reason.as_str()
        } else {
            "aborted, with its ancestor"
        };
        o.push_str(&format!(
            "ended {} ({how}) at event #{}\n",
            s.session, s.seq
        ));
    }
    o
}
