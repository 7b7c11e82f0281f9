//! `tacho snapshot`: store the workspace's files now (for adapters and users).

use std::path::PathBuf;

use clap::Args;
use tacho_app::SnapshotRequest;
use tacho_app::render::snapshots as render;

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
    let mut out = Out::new();
    if a.json {
        out.typed("snapshot", &o)?;
    } else {
        out.line(render::snapshot(&o).trim_end())?;
    }
    out.finish()
}
