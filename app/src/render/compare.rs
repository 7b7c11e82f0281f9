//! `session compare` in text.

use tacho_projections::{Comparison, StepPair};

use super::{duration, thousands};

fn arrow(a: i64, b: i64) -> &'static str {
    match b.cmp(&a) {
        std::cmp::Ordering::Greater => " ↑",
        std::cmp::Ordering::Less => " ↓",
        std::cmp::Ordering::Equal => "",
    }
}

/// One pair of aligned steps.
pub fn step_pair(p: &StepPair) -> String {
    match p {
        StepPair::Same { a, b } => format!("A step {a} = B step {b}"),
        StepPair::Differs { a, b, differences } => {
            format!("A step {a} vs B step {b}: {}", differences.join("; "))
        }
        StepPair::OnlyInA { a, tools } => format!("A step {a} has no counterpart in B ({tools})"),
        StepPair::OnlyInB { b, tools } => format!("B step {b} has no counterpart in A ({tools})"),
    }
}

/// The comparison: risk, the runs, files, decision paths, events by type, and the
/// step alignment when there is one.
pub fn text(c: &Comparison) -> String {
    let line = "-".repeat(40);
    let mut o = String::new();
    let mut put = |s: String| {
        o.push_str(&s);
        o.push('\n');
    };
    put(format!(
        "Comparing A = {} with B = {}\n",
        c.a.session, c.b.session
    ));
    put(format!("Risk Comparison\n{line}"));
    let d = c.b.score as i64 - c.a.score as i64;
    put(format!(
        "Score: {} → {} ({d:+}){}",
        c.a.score,
        c.b.score,
        arrow(c.a.score as i64, c.b.score as i64)
    ));
    put(format!(
        "Level: {} → {}",
        c.a.level.as_str(),
        c.b.level.as_str()
    ));
    put(format!("Files: {} → {}", c.a.files, c.b.files));
    put(format!("Failures: {} → {}\n", c.a.failures, c.b.failures));
    put(format!("Run\n{line}"));
    put(format!("Steps: {} → {}", c.a.steps, c.b.steps));
    put(format!(
        "Tool calls: {} → {}",
        c.a.tool_calls, c.b.tool_calls
    ));
    put(format!(
        "Tokens: {} in / {} out → {} in / {} out",
        thousands(c.a.tokens_in),
        thousands(c.a.tokens_out),
        thousands(c.b.tokens_in),
        thousands(c.b.tokens_out)
    ));
    let dur = |d: Option<u64>| d.map_or("-".into(), duration);
    put(format!(
        "Duration: {} → {}\n",
        dur(c.a.duration_ms),
        dur(c.b.duration_ms)
    ));
    put(format!("Files changed\n{line}"));
    put(format!("In both: {}", c.files_in_both.len()));
    for (name, files) in [
        ("Only in A", &c.files_only_in_a),
        ("Only in B", &c.files_only_in_b),
    ] {
        put(format!(
            "{name}: {}",
            if files.is_empty() {
                "-".into()
            } else {
                files.join(", ")
            }
        ));
    }
    put(format!("\nDecision path\n{line}"));
    for (name, s) in [("A", &c.a), ("B", &c.b)] {
        let routes = if s.routes.is_empty() {
            "no routing".into()
        } else {
            s.routes.join(", ")
        };
        put(format!("{name}: {routes}"));
        put(format!(
            "   tools: {}",
            if s.tool_chain.is_empty() {
                "-"
            } else {
                &s.tool_chain
            }
        ));
    }
    put(format!("\nEvents by type\n{line}"));
    for (k, (x, y)) in &c.events_by_kind {
        put(format!("{k:<18} {x:>6} → {y}"));
    }
    if let Some(pairs) = &c.alignment {
        put(format!("\nStep alignment (by tools and targets)\n{line}"));
        let divergences = pairs.iter().filter(|p| p.is_divergence()).count();
        match pairs.iter().find(|p| p.is_divergence()) {
            None => put("The runs take the same steps: no divergence.".into()),
            Some(first) => put(format!(
                "First divergence: {}; {divergences} divergence(s) in all",
                step_pair(first)
            )),
        }
        for p in pairs {
            let mark = if p.is_divergence() { "≠" } else { "=" };
            put(format!("  {mark} {}", step_pair(p)));
        }
    }
    o
}
