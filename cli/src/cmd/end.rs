//! `tacho session end`: record the end of a session whose agent recorded none.

use clap::Args;
use tacho_schema::EndReason;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct EndArgs {
    /// The session (its id, or any unique prefix of it).
    pub session: String,
    /// How it ended: aborted, completed, error, step_limit, stalled, budget_limited or
    /// gate_blocked.
    #[arg(long, default_value = "aborted")]
    pub reason: String,
    /// Why, recorded with the end (default: that `tacho session end` recorded it).
    #[arg(long)]
    pub message: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: EndArgs) -> Result<(), CliError> {
    let reason = EndReason::from_name(&a.reason).ok_or_else(|| {
        CliError::input(format!(
            "--reason {:?}: one of {}",
            a.reason,
            EndReason::NAMES.join(", ")
        ))
    })?;
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let ended = tacho.end_session(&session, reason, a.message)?;
    let mut out = Out::new();
    if a.json {
        out.typed("session_end", &ended)?;
    } else {
        out.line(tacho_app::render::session::ended(&ended).trim_end())?;
    }
    out.finish()
}
