//! The secret scan and its allowances as text.

use std::fmt::Write;

use crate::secrets::{SecretAllowance, SecretFinding, SecretScan};

/// One finding on one line: where, what, and whether it is allowed.
pub fn finding(f: &SecretFinding) -> String {
    format!(
        "{} event {} ({}) {} line {} column {}: {} [{}]{}",
        f.session,
        f.seq,
        f.event,
        f.field,
        f.line,
        f.column,
        f.what,
        f.hint,
        if f.allowed { " (allowed)" } else { "" }
    )
}

/// `tacho session secrets`.
pub fn scan(s: &SecretScan) -> String {
    let mut t = String::new();
    if s.findings.is_empty() {
        let _ = writeln!(
            t,
            "session {}: no secrets found in {} events",
            s.session, s.events
        );
        return t;
    }
    let _ = writeln!(
        t,
        "session {}: {} secret(s) found in {} events, {} not allowed",
        s.session,
        s.findings.len(),
        s.events,
        s.blocking
    );
    for f in &s.findings {
        let _ = writeln!(t, "  {}", finding(f));
    }
    t
}

/// `tacho session secrets --allow`.
pub fn allowed(a: &SecretAllowance) -> String {
    format!(
        "event {} of session {} may leave the machine ({}): recorded as event {}\n",
        a.allowed,
        a.session,
        a.kinds.join(", "),
        a.seq
    )
}
