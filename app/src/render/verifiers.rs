//! `tacho verify-commits` and `tacho review verify` in text.

use crate::types::{CommitReport, ReviewReport};

use super::prefix;

/// The commit range's verdict: what was checked, each violation, or `ok`.
pub fn commits(r: &CommitReport) -> String {
    let mut o = format!(
        "{}..{}: {} commit(s), {} changed path(s) checked\n",
        prefix(&r.baseline, 12),
        prefix(&r.head, 12),
        r.commits.len(),
        r.paths_checked
    );
    for v in &r.violations {
        o.push_str(&format!(
            "  VIOLATION {}{}: {}\n",
            v.commit.as_deref().map_or("range", |c| prefix(c, 12)),
            v.path.as_ref().map(|p| format!(" {p}")).unwrap_or_default(),
            v.reason
        ));
    }
    if r.violations.is_empty() {
        o.push_str("ok\n");
    }
    o
}

/// The review receipts' verdict: what was checked, each problem, or `ok`.
pub fn reviews(r: &ReviewReport) -> String {
    let mut o = format!(
        "{} round(s), {} reviewer run(s), {} finding(s), {} regression test(s) checked\n",
        r.rounds.len(),
        r.reviewers,
        r.findings,
        r.tests_checked
    );
    for p in &r.problems {
        o.push_str(&format!("  PROBLEM {}: {}\n", p.at, p.problem));
    }
    if r.problems.is_empty() {
        o.push_str("ok\n");
    }
    o
}
