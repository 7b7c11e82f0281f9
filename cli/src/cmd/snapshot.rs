//! `tacho snapshot`: store the workspace's files now (for adapters and users).

use std::path::PathBuf;

use clap::Args;
use tacho_app::SnapshotRequest;
use tacho_app::render::{bytes, thousands};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Only these paths (what an edit tool reported), on top of the workspace's last
    /// snapshot; every file when none are given.
    pub paths: Vec<String>,
    /// The workspace: default the session's workspace, else the current directory.
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Record the snapshot in this session (a `snapshot.taken` event).
    #[arg(long)]
    pub session: Option<String>,
    /// The snapshot is the state before this step's changes.
    #[arg(long)]
    pub before_step: Option<u64>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: SnapshotArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = a
        .session
        .as_deref()
        .map(|s| tacho.resolve_session(s))
        .transpose()?;
    let o = tacho.snapshot(&SnapshotRequest {
        paths: a.paths,
        workspace: a.workspace,
        session,
        before_step: a.before_step,
    })?;
    let (snap, ws, elapsed) = (&o.snapshot, &o.workspace, o.elapsed);
    let session = o.recorded.as_ref().map(|r| r.0.clone());
    let recorded_seq = o.recorded.as_ref().map(|r| r.1);
    let mut out = Out::new();
    if a.json {
        out.json(&serde_json::json!({
            "type": "snapshot",
            "snapshot": snap.id,
            "workspace": ws.display().to_string(),
            "files": snap.files,
            "bytes": snap.bytes,
            "files_read": snap.files_read,
            "bytes_read": snap.bytes_read,
            "objects_written": snap.objects_written,
            "targeted": !snap.full_scan,
            "walked": snap.walked,
            "watched": snap.watched,
            "excluded": snap.excluded.iter().map(|x| serde_json::json!({
                "path": x.path, "reason": x.reason.to_string(),
            })).collect::<Vec<_>>(),
            "session": session,
            "seq": recorded_seq,
            "elapsed_ms": elapsed.as_secs_f64() * 1000.0,
        }))?;
        return out.finish();
    }
    out.line(format!(
        "snapshot {} of {}: {} files{}, {} read, {} new objects, {:.1} ms",
        snap.id,
        ws.display(),
        thousands(snap.files),
        if snap.full_scan {
            format!(" ({})", bytes(snap.bytes))
        } else {
            " (targeted)".into()
        },
        thousands(snap.files_read),
        thousands(snap.objects_written),
        elapsed.as_secs_f64() * 1000.0
    ))?;
    for x in &snap.excluded {
        out.line(format!("  not protected: {} ({})", x.path, x.reason))?;
    }
    if let (Some(s), Some(seq)) = (&session, recorded_seq) {
        out.line(format!("recorded in session {s} as event #{seq}"))?;
    }
    out.finish()
}
