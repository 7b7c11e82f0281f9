//! `tacho session branch`: fork a session's saved state into a new session.

use clap::Args;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct BranchArgs {
    /// The session to fork (its id, or any unique prefix of it).
    pub session: String,
    /// Where to fork: `step N` (or just `N`: everything before step N), `#SEQ`
    /// (everything through event SEQ), or a model request id (through its response).
    /// Default: the whole session, without its end.
    #[arg(long)]
    pub from: Option<String>,
    /// The new session's id (default: a fresh one).
    #[arg(long)]
    pub id: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: BranchArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let parent = tacho.resolve_session(&a.session)?;
    let b = tacho.branch(&parent, a.from.as_deref(), a.id)?;
    let mut out = Out::new();
    if a.json {
        out.typed("branch", &b)?;
    } else {
        out.line(tacho_app::render::session::branched(&b).trim_end())?;
    }
    out.finish()
}
