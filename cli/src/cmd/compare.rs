//! `tacho session compare`: two runs side by side, and with `--deep` their steps
//! aligned against each other.

use clap::Args;
use tacho_app::render::{duration, thousands};
use tacho_projections::{StepPair, assess, compare};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Run A (an id or a unique prefix).
    pub a: String,
    /// Run B (an id or a unique prefix).
    pub b: String,
    /// Align the steps of A and B and report where and how they diverge.
    #[arg(long)]
    pub deep: bool,
    /// The comparison as one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn arrow(a: i64, b: i64) -> &'static str {
    match b.cmp(&a) {
        std::cmp::Ordering::Greater => " ↑",
        std::cmp::Ordering::Less => " ↓",
        std::cmp::Ordering::Equal => "",
    }
}

pub fn run(a: CompareArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let (sa, sb) = (tacho.resolve_session(&a.a)?, tacho.resolve_session(&a.b)?);
    let (ga, ka) = tacho.graph_and_kinds(&sa)?;
    let (gb, kb) = tacho.graph_and_kinds(&sb)?;
    let (ra, rb) = (assess(&ga), assess(&gb));
    let c = compare((&ga, &ra, &ka), (&gb, &rb, &kb), a.deep);
    let mut out = Out::new();
    if a.json {
        out.typed("comparison", &c)?;
        return out.finish();
    }
    let line = "-".repeat(40);
    out.line(format!(
        "Comparing A = {} with B = {}\n",
        c.a.session, c.b.session
    ))?;
    out.line(format!("Risk Comparison\n{line}"))?;
    let d = c.b.score as i64 - c.a.score as i64;
    out.line(format!(
        "Score: {} → {} ({d:+}){}",
        c.a.score,
        c.b.score,
        arrow(c.a.score as i64, c.b.score as i64)
    ))?;
    out.line(format!(
        "Level: {} → {}",
        c.a.level.as_str(),
        c.b.level.as_str()
    ))?;
    out.line(format!("Files: {} → {}", c.a.files, c.b.files))?;
    out.line(format!("Failures: {} → {}\n", c.a.failures, c.b.failures))?;
    out.line(format!("Run\n{line}"))?;
    out.line(format!("Steps: {} → {}", c.a.steps, c.b.steps))?;
    out.line(format!(
        "Tool calls: {} → {}",
        c.a.tool_calls, c.b.tool_calls
    ))?;
    out.line(format!(
        "Tokens: {} in / {} out → {} in / {} out",
        thousands(c.a.tokens_in),
        thousands(c.a.tokens_out),
        thousands(c.b.tokens_in),
        thousands(c.b.tokens_out)
    ))?;
    let dur = |d: Option<u64>| d.map_or("-".into(), duration);
    out.line(format!(
        "Duration: {} → {}\n",
        dur(c.a.duration_ms),
        dur(c.b.duration_ms)
    ))?;
    out.line(format!("Files changed\n{line}"))?;
    out.line(format!("In both: {}", c.files_in_both.len()))?;
    for (name, files) in [
        ("Only in A", &c.files_only_in_a),
        ("Only in B", &c.files_only_in_b),
    ] {
        out.line(format!(
            "{name}: {}",
            if files.is_empty() {
                "-".into()
            } else {
                files.join(", ")
            }
        ))?;
    }
    out.line(format!("\nDecision path\n{line}"))?;
    for (name, s) in [("A", &c.a), ("B", &c.b)] {
        let routes = if s.routes.is_empty() {
            "no routing".into()
        } else {
            s.routes.join(", ")
        };
        out.line(format!("{name}: {routes}"))?;
        out.line(format!(
            "   tools: {}",
            if s.tool_chain.is_empty() {
                "-"
            } else {
                &s.tool_chain
            }
        ))?;
    }
    out.line(format!("\nEvents by type\n{line}"))?;
    for (k, (x, y)) in &c.events_by_kind {
        out.line(format!("{k:<18} {x:>6} → {y}"))?;
    }
    if let Some(pairs) = &c.alignment {
        out.line(format!("\nStep alignment (by tools and targets)\n{line}"))?;
        let divergences = pairs.iter().filter(|p| p.is_divergence()).count();
        match pairs.iter().find(|p| p.is_divergence()) {
            None => out.line("The runs take the same steps: no divergence.")?,
            Some(first) => out.line(format!(
                "First divergence: {}; {divergences} divergence(s) in all",
                describe(first)
            ))?,
        }
        for p in pairs {
            let mark = if p.is_divergence() { "≠" } else { "=" };
            out.line(format!("  {mark} {}", describe(p)))?;
        }
    }
    out.finish()
}

fn describe(p: &StepPair) -> String {
    match p {
        StepPair::Same { a, b } => format!("A step {a} = B step {b}"),
        StepPair::Differs { a, b, differences } => {
            format!("A step {a} vs B step {b}: {}", differences.join("; "))
        }
        StepPair::OnlyInA { a, tools } => format!("A step {a} has no counterpart in B ({tools})"),
        StepPair::OnlyInB { b, tools } => format!("B step {b} has no counterpart in A ({tools})"),
    }
}
