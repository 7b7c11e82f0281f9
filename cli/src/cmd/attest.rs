//! `tacho attest BASE..HEAD`: what `ci verify` finds for a range, as in-toto
//! statements in DSSE envelopes (JSON Lines), signed with your SSH Ed25519 key.

use std::path::PathBuf;

use clap::Args;
use tacho_app::AttestKey;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct AttestArgs {
    /// The range, as git spells it: BASE..HEAD.
    pub range: String,
    /// The Ed25519 key that signs, as git's user.signingkey takes one: a private key
    /// file (signed in process when unencrypted), a public key file or
    /// `key::<public key>` (signed by ssh-agent). Default: git's user.signingkey
    /// (gpg.format ssh).
    #[arg(long, conflicts_with = "unsigned")]
    pub key: Option<String>,
    /// No signature: statements for a pipeline that signs them itself (Sigstore).
    #[arg(long)]
    pub unsigned: bool,
    /// The repository's work tree (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Print the statements themselves (`attestation` records with each statement,
    /// its envelope and the key), not the envelopes.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: AttestArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let key = match (&a.key, a.unsigned) {
        (_, true) => AttestKey::Unsigned,
        (Some(k), false) => AttestKey::Given(k),
        (None, false) => AttestKey::Git,
    };
    let att = tacho.attest(&a.range, a.workspace.as_deref(), key)?;
    let mut out = Out::new();
    if a.json {
        out.typed("attestation", &att)?;
    } else {
        for e in &att.envelopes {
            out.line(
                serde_json::to_string(e).map_err(|e| CliError::from(std::io::Error::other(e)))?,
            )?;
        }
    }
    out.finish()?;
    match &att.key {
        Some(k) => eprintln!(
            "{} envelope(s) signed by {} (keyid {})",
            att.envelopes.len(),
            k.fingerprint,
            k.keyid
        ),
        None => eprintln!("{} envelope(s), unsigned", att.envelopes.len()),
    }
    Ok(())
}
