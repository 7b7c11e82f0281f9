//! `tacho session compare`: two runs side by side, and with `--deep` their steps
//! aligned against each other.

use clap::Args;
use tacho_app::render::compare;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Run A (an id or a unique prefix).
    pub a: String,
    /// Run B (an id or a unique prefix).
    pub b: String,
    /// Align the steps of A and B and report where and how they diverge.
    #[arg(long)]
    pub deep: bool,
    /// The comparison as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: CompareArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let (sa, sb) = (tacho.resolve_session(&a.a)?, tacho.resolve_session(&a.b)?);
    let c = tacho.compare(&sa, &sb, a.deep)?;
    let mut out = Out::new();
    if a.json {
        out.typed("comparison", &c)?;
    } else {
        out.line(compare::text(&c).trim_end())?;
    }
    out.finish()
}
