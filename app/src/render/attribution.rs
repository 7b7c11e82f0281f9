//! `tacho attribution --summary`: each commit's changed lines by origin, for people.

use std::fmt::Write;

use crate::attribution::{CommitAttribution, LineOrigin};

/// One block per commit: each file's ranges with who wrote them.
pub fn summary(c: &CommitAttribution) -> String {
    let mut o = String::new();
    let short = c.commit.get(..12).unwrap_or(&c.commit);
    let sessions = if c.sessions.is_empty() {
        "no linked session".to_owned()
    } else {
        format!("session(s) {}", c.sessions.join(", "))
    };
    let _ = writeln!(o, "commit {short} ({sessions})");
    if c.files.is_empty() {
        let _ = writeln!(o, "  no text lines changed");
    }
    for f in &c.files {
        // A file name may hold a newline: escaped, it cannot forge a line.
        let _ = writeln!(o, "  {}", f.path.escape_debug());
        for r in &f.ranges {
            let lines = if r.start_line == r.end_line {
                format!("line {}", r.start_line)
            } else {
                format!("lines {}-{}", r.start_line, r.end_line)
            };
            let who = match &r.origin {
                LineOrigin::Ai {
                    step,
                    call_seq,
                    tool,
                    ..
                } => format!(
                    "agent: {}call #{call_seq}{}",
                    step.map(|s| format!("step {s}, ")).unwrap_or_default(),
                    tool.as_deref()
                        .map(|t| format!(" ({t})"))
                        .unwrap_or_default()
                ),
                LineOrigin::Human { between, .. } => format!(
                    "user: changed between tool calls (events #{}..#{})",
                    between.0, between.1
                ),
                LineOrigin::Unknown => {
                    "unknown: no snapshot of a linked session explains it".into()
                }
                LineOrigin::Mixed { origins } => format!(
                    "mixed: {} linked sessions say different things of it",
                    origins.len()
                ),
            };
            let _ = writeln!(o, "    {lines}: {who}");
        }
    }
    o
}
