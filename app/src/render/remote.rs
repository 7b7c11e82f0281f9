//! The text of `tacho push` and `tacho fetch`.

use crate::remote::{FetchOutcome, FetchState, PushOutcome, PushState};

/// One line per session, then a summary.
pub fn push(o: &PushOutcome) -> String {
    let mut out = String::new();
    for s in &o.sessions {
        let state = match s.outcome {
            PushState::New => "new",
            PushState::Updated => "updated",
            PushState::UpToDate => "up to date",
            PushState::Rejected => "REJECTED",
        };
        out.push_str(&format!(
            "{}  {state}  {} events, {} bytes, {} snapshots, {}{}\n",
            s.session,
            s.events,
            s.record_bytes,
            s.snapshots,
            s.signature.describe(),
            if s.outcome == PushState::Rejected && !s.detail.is_empty() {
                format!(" ({})", s.detail)
            } else {
                String::new()
            }
        ));
    }
    let count = |st| o.sessions.iter().filter(|s| s.outcome == st).count();
    out.push_str(&format!(
        "{}{} sessions of {} to {}: {} new, {} updated, {} up to date, {} rejected\n",
        if o.dry_run { "would push " } else { "pushed " },
        o.sessions.len(),
        o.workspace,
        o.remote,
        count(PushState::New),
        count(PushState::Updated),
        count(PushState::UpToDate),
        count(PushState::Rejected),
    ));
    out
}

/// One line per session (a refused one with what failed), then a summary.
pub fn fetch(o: &FetchOutcome) -> String {
    let mut out = String::new();
    for s in &o.sessions {
        match s.outcome {
            FetchState::Refused => out.push_str(&format!(
                "{}  REFUSED: {}\n",
                s.session,
                s.reason.as_deref().unwrap_or("")
            )),
            st => out.push_str(&format!(
                "{}  {}  {} events, {}\n",
                s.session,
                if st == FetchState::Stored {
                    "stored"
                } else {
                    "up to date"
                },
                s.events,
                s.signature.describe()
            )),
        }
    }
    let count = |st| o.sessions.iter().filter(|s| s.outcome == st).count();
    out.push_str(&format!(
        "fetched {} sessions from {} ({}): {} stored, {} up to date, {} refused\n",
        o.sessions.len(),
        o.remote,
        o.url,
        count(FetchState::Stored),
        count(FetchState::UpToDate),
        count(FetchState::Refused),
    ));
    out
}
