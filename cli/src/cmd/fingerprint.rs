//! `tacho fingerprint`: the source fingerprint goal checks are bound to, or why there
//! can be none (what a user runs to see why a receipt went stale).

use std::path::PathBuf;

use clap::Args;
use tacho_app::render::snapshots as render;
use tacho_app::types::Fingerprint;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct FingerprintArgs {
    /// Source paths, relative to the workspace (default: the whole workspace).
    pub paths: Vec<String>,
    /// Files to include even when ignored (what edit tools reported).
    #[arg(long = "file")]
    pub files: Vec<String>,
    /// The workspace root (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: FingerprintArgs) -> Result<(), CliError> {
    let fp = tacho_app::fingerprint(a.workspace.as_deref(), &a.paths, &a.files)?;
    let mut out = Out::new();
    if a.json {
        out.typed("fingerprint", &fp)?;
    } else if matches!(fp.0, Fingerprint::Fresh { .. }) {
        out.line(render::fingerprint(&fp.0).trim_end())?;
    }
    out.finish()?;
    match &fp.0 {
        Fingerprint::Fresh { .. } => Ok(()),
        Fingerprint::NoFreshEvidence(why) => {
            Err(CliError::findings(format!("no fresh evidence: {why}")))
        }
    }
}
