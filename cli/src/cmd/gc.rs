//! `tacho gc`: drop snapshots that no recorded session references, delete the objects
//! only they held, and pack the rest.

use clap::Args;
use tacho_app::render::{bytes, thousands};
use tacho_app::types::StoreUsage;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Report what would be dropped; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: GcArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let g = tacho.gc(a.dry_run)?;
    let r = &g.report;
    let mut out = Out::new();
    if a.json {
        let usage = |u: &StoreUsage| {
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
            "type": "gc",
            "dry_run": g.dry_run,
            "referenced_snapshots": g.referenced,
            "dropped_snapshots": r.dropped_snapshots,
            "pruned_objects": r.pruned_objects,
            "packed_objects": r.packed_objects,
            "before": usage(&r.before),
            "after": usage(&r.after),
            "incomplete_snapshots": r.incomplete_snapshots,
            "unreadable_packs": r.unreadable_packs,
        }))?;
        return out.finish();
    }
    if !r.incomplete_snapshots.is_empty() {
        eprintln!(
            "warning: {} snapshot(s) that sessions reference are missing objects (they cannot be fully restored): {}",
            r.incomplete_snapshots.len(),
            r.incomplete_snapshots.join(", ")
        );
    }
    for pack in &r.unreadable_packs {
        eprintln!(
            "warning: a pack of the snapshot store cannot be read and was left as it is (what it holds is not restorable): {pack}"
        );
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
