//! `tacho session trace`: a risk-scored timeline of a session from its events, or with
//! `--logs`, an analysis of conventional log files (for operational problems).

use std::path::PathBuf;

use clap::Args;
use tacho_app::render::{logs, trace};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The session (its id, or any unique prefix of it); or --logs.
    #[arg(required_unless_present = "logs", conflicts_with = "logs")]
    pub session: Option<String>,
    /// Analyse log files (JSON Lines or text; a file or a directory) instead of events.
    #[arg(long)]
    pub logs: Option<PathBuf>,
    /// Operations at least this slow are listed (milliseconds).
    #[arg(long, default_value_t = 1000)]
    pub slow_ms: u64,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: TraceArgs) -> Result<(), CliError> {
    let mut out = Out::new();
    if let Some(path) = &a.logs {
        let report = tacho_app::analyse_logs(path, a.slow_ms)?;
        if a.json {
            out.typed("log_report", &report)?;
        } else {
            out.line(logs::text(&report).trim_end())?;
        }
        return out.finish();
    }
    let tacho = crate::open()?;
    let session = tacho.resolve_session(a.session.as_deref().unwrap_or_default())?;
    let t = tacho.trace(&session)?;
    if a.json {
        for row in &t.rows {
            out.typed("trace", row)?;
        }
        // The session's risk assessment, as `tacho risk --json` prints it.
        out.typed("risk", &t.assessed.risk)?;
    } else {
        out.line(trace::text(&t).trim_end())?;
    }
    out.finish()
}
