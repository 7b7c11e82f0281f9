//! `session trace` in text.

use crate::Trace;

use super::{thousands, tool_duration};

/// The trace: headline, one line per row (`!` where the risk score weighs it), totals.
pub fn text(t: &Trace) -> String {
    let (g, risk) = (&t.assessed.graph, &t.assessed.risk);
    let mut o = format!(
        "Trace of session {} | Risk: {} ({}/100)\n",
        t.session,
        risk.level.as_str(),
        risk.score
    );
    for r in &t.rows {
        let flag = if r.flagged { "!" } else { "" };
        o.push_str(&format!(
            "+{:>10} {flag:1} {:<7} {}\n",
            r.at.trim_start_matches('+'),
            r.kind.to_uppercase(),
            r.text
        ));
    }
    let failed = g
        .tools()
        .filter(|(_, t)| t.status.is_some_and(|s| s != tacho_schema::ToolStatus::Ok))
        .count();
    let slowest = g.tools().max_by_key(|(_, t)| t.duration_ms.unwrap_or(0));
    o.push_str(&format!(
        "\n{} tool calls ({failed} failed), {} model calls ({} in / {} out tokens), {} route(s), {} error(s){}\n",
        g.tools().count(),
        g.model_calls,
        thousands(g.tokens.input),
        thousands(g.tokens.output),
        g.routes.len(),
        g.errors.len(),
        slowest
            .and_then(|(_, t)| t.duration_ms.map(|d| format!(
                "; slowest call: {} {} {}",
                t.tool,
                t.target.as_deref().unwrap_or(""),
                tool_duration(d)
            )))
            .unwrap_or_default()
    ));
    o.push_str(
        "Lines marked ! are what the risk score weighs: failures, errors, denials, refused completions, pauses and blocks.\n",
    );
    o
}
