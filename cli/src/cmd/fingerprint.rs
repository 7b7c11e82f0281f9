//! `tacho fingerprint`: the source fingerprint goal checks are bound to, or why there
//! can be none (what a user runs to see why a receipt went stale).

use std::path::PathBuf;

use clap::Args;
use tacho_app::render::{bytes, thousands};
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
    match fp {
        Fingerprint::Fresh {
            digest,
            entries,
            bytes: total,
        } => {
            if a.json {
                out.json(&serde_json::json!({
                    "type": "fingerprint",
                    "fresh": true,
                    "digest": digest,
                    "entries": entries,
                    "bytes": total,
                }))?;
                return out.finish();
            }
            for e in &entries {
                out.line(format!(
                    "{:<8} {:>10} {} {}  {}",
                    e.kind,
                    e.size,
                    if e.executable { "x" } else { "-" },
                    e.content.get(..16).unwrap_or("-"),
                    e.path
                ))?;
            }
            out.line(format!(
                "fingerprint {digest} ({} entries, {})",
                thousands(entries.len() as u64),
                bytes(total)
            ))?;
            out.finish()
        }
        Fingerprint::NoFreshEvidence(why) => {
            if a.json {
                out.json(&serde_json::json!({
                    "type": "fingerprint",
                    "fresh": false,
                    "path": why.path,
                    "reason": why.reason,
                    "problems": why.problems,
                    "problems_total": why.total,
                }))?;
                out.finish()?;
            }
            Err(CliError::findings(format!("no fresh evidence: {why}")))
        }
    }
}
