//! `tacho audit prune` in text.

use std::path::Path;

use tacho_schema::time_to_rfc3339;

use super::{bytes, prefix};
use crate::PruneOutcome;

/// What was (or would be) removed, what was kept and why, and where it is recorded
/// (`log_dir`: the log's directory, which holds the removal record).
pub fn outcome(r: &PruneOutcome, log_dir: &Path) -> String {
    let verb = if r.dry_run { "would remove" } else { "removed" };
    let mut o = format!(
        "{verb} {} session(s) whose last event is before {}\n",
        r.removed.len(),
        time_to_rfc3339(r.cutoff_unix_ns)
    );
    for s in &r.removed {
        o.push_str(&format!(
            "  {}  {} event(s), head {}\n",
            s.session,
            s.next_seq,
            prefix(&s.head, 16)
        ));
    }
    if !r.kept.is_empty() {
        o.push_str(&format!("kept {} old session(s):\n", r.kept.len()));
        for k in &r.kept {
            o.push_str(&format!("  {}  {}\n", k.session, k.reason));
        }
    }
    if !r.finished.is_empty() {
        o.push_str(&format!(
            "finished an interrupted prune: {} session(s) removed\n",
            r.finished.len()
        ));
    }
    if let (Some(n), Some(b)) = (r.snapshots_dropped, r.bytes_reclaimed) {
        o.push_str(&format!("snapshots: {n} dropped, {} reclaimed\n", bytes(b)));
    }
    if !r.records.is_empty() {
        o.push_str(&format!(
            "recorded in {} (`tacho log verify` checks it)\n",
            log_dir.join(tacho_store::PRUNE_LOG).display()
        ));
    }
    o
}
