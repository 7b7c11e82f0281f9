//! `tacho risk`: the deterministic risk heuristic of a session, factor by factor.

use clap::Args;
use tacho_app::render::risk;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct RiskArgs {
    /// The session (its id, or any unique prefix of it).
    pub session: String,
    /// Every factor with its weight, evidence and mitigation.
    #[arg(long)]
    pub explain: bool,
    /// The assessment as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: RiskArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let r = tacho.risk(&session)?;
    let mut out = Out::new();
    if a.json {
        out.typed("risk", &r)?;
    } else {
        out.line(risk::text(&r, a.explain).trim_end())?;
    }
    out.finish()
}
