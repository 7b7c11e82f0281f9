//! `tacho attribution BASE..HEAD`: who wrote each line the range's commits changed, as
//! Agent Trace records (JSON Lines, one per commit).

use std::path::PathBuf;

use clap::Args;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct AttributionArgs {
    /// The range, as git spells it: BASE..HEAD.
    pub range: String,
    /// The repository's work tree (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// One line per file and origin for people, instead of the records.
    #[arg(long, conflicts_with = "json")]
    pub summary: bool,
    /// tacho's own `attribution` records (each range's origin, step and call) instead
    /// of Agent Trace's.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: AttributionArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let commits = tacho.attribution(&a.range, a.workspace.as_deref())?;
    let mut out = Out::new();
    for c in &commits {
        if a.json {
            out.typed("attribution", c)?;
        } else if a.summary {
            out.line(tacho_app::render::attribution::summary(c).trim_end())?;
        } else {
            out.line(
                serde_json::to_string(&c.agent_trace())
                    .map_err(|e| CliError::from(std::io::Error::other(e)))?,
            )?;
        }
    }
    out.finish()
}
