//! `tacho session secrets`: the secret scan a push makes, to check before pushing, and
//! the recorded allowance that lets one event through.

use clap::Args;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct SecretsArgs {
    /// The session (its id, or any unique prefix of it).
    pub session: String,
    /// Let this event (its sequence number) leave the machine despite the secrets
    /// found in it: recorded in the session as `secret.allowed`.
    #[arg(long, value_name = "SEQ")]
    pub allow: Option<u64>,
    /// Why the event may leave (recorded with --allow).
    #[arg(long, requires = "allow")]
    pub reason: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: SecretsArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let mut out = Out::new();
    if let Some(seq) = a.allow {
        let allowed = tacho.allow_secret(&session, seq, a.reason)?;
        if a.json {
            out.typed("secret_allowed", &allowed)?;
        } else {
            out.line(tacho_app::render::secrets::allowed(&allowed).trim_end())?;
        }
        return out.finish();
    }
    let scan = tacho.secret_scan(&session)?;
    if a.json {
        out.typed("secret_scan", &scan)?;
    } else {
        out.line(tacho_app::render::secrets::scan(&scan).trim_end())?;
    }
    out.finish()?;
    if scan.blocking == 0 {
        Ok(())
    } else {
        Err(CliError::findings(format!(
            "{} secret(s) in session {} not allowed: a push refuses them (see --allow)",
            scan.blocking, scan.session
        )))
    }
}
