//! `tacho gc`: drop snapshots that no recorded session references, delete the objects
//! only they held, and pack the rest.

use std::collections::HashSet;

use clap::Args;
use tacho_schema::EventView;

use crate::error::CliError;
use crate::home::open_store;
use crate::output::{Out, bytes, thousands};
use crate::snapshots::open_snapshots;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Report what would be dropped; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: GcArgs) -> Result<(), CliError> {
    let log = open_store()?;
    let mut keep = HashSet::new();
    for id in log.sessions()? {
        log.read_session_views(&id, 0, |_, _, v| match *v {
            EventView::SnapshotTaken { snapshot, .. } => {
                keep.insert(snapshot.to_string());
            }
            EventView::RollbackApplied { to_snapshot, .. } => {
                keep.insert(to_snapshot.to_string());
            }
            _ => {}
        })?;
    }
    let snaps = open_snapshots()?;
    let r = snaps.gc(&keep, a.dry_run)?;
    let mut out = Out::new();
    if a.json {
        let usage = |u: &tacho_git::snapshot::StoreUsage| {
            serde_json::json!({
                "snapshots": u.snapshots,
                "loose_objects": u.loose_objects,
                "loose_disk_bytes": u.loose_disk_bytes,
                "packs": u.packs,
                "pack_bytes": u.pack_bytes,
                "disk_bytes": u.disk_bytes(),
            })
        };
        out.json(&serde_json::json!({
            "dry_run": a.dry_run,
            "referenced_snapshots": keep.len(),
            "dropped_snapshots": r.dropped_snapshots,
            "pruned_objects": r.pruned_objects,
            "packed_objects": r.packed_objects,
            "before": usage(&r.before),
            "after": usage(&r.after),
        }))?;
        return out.finish();
    }
    let verb = if a.dry_run { "would drop" } else { "dropped" };
    out.line(format!(
        "{verb} {} snapshot(s) no session references and {} object(s) only they held",
        thousands(r.dropped_snapshots.len() as u64),
        thousands(r.pruned_objects)
    ))?;
    if !a.dry_run {
        out.line(format!(
            "packed {} object(s); snapshot store {} → {} on disk ({} snapshots kept)",
            thousands(r.packed_objects),
            bytes(r.before.disk_bytes()),
            bytes(r.after.disk_bytes()),
            thousands(r.after.snapshots)
        ))?;
    }
    out.finish()
}
