//! `tacho risk`: the deterministic risk heuristic of a session, factor by factor.

use clap::Args;
use tacho_projections::{RiskAssessment, assess};

use crate::cmd::graph::load_graph;
use crate::error::CliError;
use crate::home::open_store;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct RiskArgs {
    /// The session (its id, or any unique prefix of it).
    pub session: String,
    /// Every factor with its weight, evidence and mitigation.
    #[arg(long)]
    pub explain: bool,
    /// The assessment as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: RiskArgs) -> Result<(), CliError> {
    let store = open_store()?;
    let session = store.resolve_session(&a.session)?;
    let risk = assess(&load_graph(&store, &session)?);
    let mut out = Out::new();
    if a.json {
        out.json(&serde_json::to_value(&risk).map_err(|e| CliError::Io(e.to_string()))?)?;
    } else {
        out.line(render(&risk, a.explain).trim_end())?;
    }
    out.finish()
}

/// The text form of an assessment.
pub fn render(r: &RiskAssessment, explain: bool) -> String {
    let mut o = format!(
        "Risk: {} ({}/100) | confidence: {:?} | readiness: {}\n",
        r.level.as_str(),
        r.score,
        r.confidence,
        r.readiness.as_str()
    )
    .replace("confidence: High", "confidence: high")
    .replace("confidence: Medium", "confidence: medium")
    .replace("confidence: Low", "confidence: low");
    o.push_str(&format!(
        "Session {}: {} file(s) changed, {} line(s), {} failed tool call(s), verified after the last edit: {}\n",
        r.session,
        r.files_changed,
        r.lines_changed,
        r.tool_failures,
        if r.verified { "yes" } else { "no" }
    ));
    if r.factors.is_empty() {
        o.push_str("No risk factor applies.\n");
    } else if explain {
        o.push_str("\nFactors:\n");
        for f in &r.factors {
            o.push_str(&format!("  +{:<3} {}: {}\n", f.weight, f.id, f.evidence));
            o.push_str(&format!("        mitigation: {}\n", f.mitigation));
        }
    } else {
        let list: Vec<String> = r
            .factors
            .iter()
            .map(|f| format!("{} +{}", f.id, f.weight))
            .collect();
        o.push_str(&format!(
            "Factors: {} (--explain for evidence and mitigations)\n",
            list.join(", ")
        ));
    }
    o.push('\n');
    o.push_str(r.disclaimer);
    o.push('\n');
    o
}
