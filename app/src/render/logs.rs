//! `session trace --logs` in text.

use crate::LogReport;

use super::{thousands, tool_duration};

/// The analysis in text: lines by level, the most frequent errors, the slowest
/// operations.
pub fn text(r: &LogReport) -> String {
    let mut o = format!(
        "{} line(s) in {} file(s), {} of them JSON\n",
        thousands(r.lines),
        r.files.len(),
        thousands(r.json_lines)
    );
    o.push_str("By level: ");
    o.push_str(
        &r.levels
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    o.push('\n');
    if !r.top_errors.is_empty() {
        o.push_str("\nMost frequent errors:\n");
        for (msg, n) in &r.top_errors {
            o.push_str(&format!("  {n:>6}× {msg}\n"));
        }
    }
    if !r.slow.is_empty() {
        o.push_str("\nSlowest operations:\n");
        for (ms, loc, msg) in &r.slow {
            o.push_str(&format!("  {:>8} {loc}  {msg}\n", tool_duration(*ms)));
        }
    }
    o
}
