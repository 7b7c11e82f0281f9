//! A risk assessment in text.

use tacho_projections::RiskAssessment;

/// The text form of an assessment.
pub fn text(r: &RiskAssessment, explain: bool) -> String {
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
