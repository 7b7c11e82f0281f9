//! `tacho ci verify BASE..HEAD`: a pull request's commits, the sessions that made them,
//! and whether the pipeline may pass.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use tacho_app::userfile::OutputFile;
use tacho_app::{CiPolicy, CiReport};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Subcommand)]
pub enum CiCommand {
    /// For each commit of BASE..HEAD, the sessions tacho saw make it — verified,
    /// signed, their risk and assured goals — as text, Markdown (a pull-request
    /// comment), JUnit XML, SARIF (code scanning: each finding at its file and lines)
    /// or JSON. Exits 1 when a rule is broken.
    Verify(VerifyArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    Text,
    Markdown,
    Junit,
    Sarif,
    Json,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The range, as git spells it: BASE..HEAD (commits reachable from HEAD, not BASE).
    pub range: String,
    /// Every commit must be linked to a recorded session.
    #[arg(long)]
    pub require_session: bool,
    /// Every linked session must be signed.
    #[arg(long)]
    pub require_signature: bool,
    /// Run each assured goal's frozen checks again, in clean rooms made from the
    /// committed tree, red/green against BASE; a check whose result differs from its
    /// receipt fails the range.
    #[arg(long)]
    pub rerun: bool,
    /// What to print on stdout.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// The same as --format json.
    #[arg(long)]
    pub json: bool,
    /// Also write the Markdown summary to this file.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,
    /// Also write JUnit XML to this file.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write SARIF 2.1.0 to this file.
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<PathBuf>,
    /// Also write the range's attestation (`tacho attest`: DSSE envelopes, JSON Lines)
    /// to this file, signed with git's user.signingkey when one is set, unsigned
    /// otherwise (for a pipeline that signs it itself).
    #[arg(long, value_name = "FILE")]
    pub attest: Option<PathBuf>,
    /// The repository's work tree (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
}

pub fn run(c: CiCommand) -> Result<(), CliError> {
    match c {
        CiCommand::Verify(a) => verify(a),
    }
}

fn write_file(path: &std::path::Path, text: &str) -> Result<(), CliError> {
    let mut f = OutputFile::create(path)?;
    f.write_all(text.as_bytes()).map_err(CliError::output)?;
    f.commit()?;
    Ok(())
}

fn verify(a: VerifyArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let policy = CiPolicy {
        require_session: a.require_session,
        require_signature: a.require_signature,
        rerun: a.rerun,
    };
    let r: CiReport = tacho.ci_verify(&a.range, a.workspace.as_deref(), policy)?;
    use tacho_app::render::ci;
    if let Some(path) = &a.markdown {
        write_file(path, &ci::markdown(&r))?;
    }
    if let Some(path) = &a.junit {
        write_file(path, &ci::junit(&r))?;
    }
    let wants_sarif = a.sarif.is_some() || (!a.json && matches!(a.format, Format::Sarif));
    let findings = match wants_sarif {
        true => Some(tacho.ci_findings(&r, a.workspace.as_deref())?),
        false => None,
    };
    if let (Some(path), Some(f)) = (&a.sarif, &findings) {
        write_file(path, &ci::sarif(f))?;
    }
    if let Some(path) = &a.attest {
        attest_to(&tacho, &r, a.workspace.as_deref(), path)?;
    }
    let mut out = Out::new();
    match (a.json, a.format) {
        (true, _) | (_, Format::Json) => out.typed("ci_report", &r)?,
        (_, Format::Sarif) => match &findings {
            Some(f) => out.line(ci::sarif(f))?,
            None => out.typed("ci_report", &r)?,
        },
        (_, Format::Text) => out.line(ci::text(&r).trim_end())?,
        (_, Format::Markdown) => out.line(ci::markdown(&r).trim_end())?,
        (_, Format::Junit) => out.line(ci::junit(&r).trim_end())?,
    }
    out.finish()?;
    if r.passed() {
        Ok(())
    } else {
        Err(CliError::findings(format!(
            "{} check(s) of the range failed",
            r.failures.len()
        )))
    }
}

/// `--attest FILE`: the range's attestation, signed with git's signing key when it
/// can sign, unsigned (with a note) when there is none or it cannot: the verdict never
/// depends on the key. A range with no commit has nothing to state: no file, a note.
fn attest_to(
    tacho: &tacho_app::Tacho,
    r: &CiReport,
    workspace: Option<&std::path::Path>,
    path: &std::path::Path,
) -> Result<(), CliError> {
    if let Some(e) = r.no_range() {
        eprintln!("note: no attestation written: {e}");
        return Ok(());
    }
    let unsigned = |why: String| -> Result<tacho_app::Attestation, CliError> {
        eprintln!("note: the attestation is left unsigned: {why}");
        Ok(tacho_app::attestation(r, None)?)
    };
    let att = match tacho.attest_signer(workspace, tacho_app::AttestKey::Git) {
        Ok(Some(key)) => match tacho_app::attestation(r, Some(&key)) {
            Ok(a) => a,
            Err(e) => unsigned(e.to_string())?,
        },
        Ok(None) => unsigned("no key".into())?,
        Err(tacho_app::AttestError::NoKey) => {
            unsigned("git's user.signingkey (with gpg.format ssh) is not set".into())?
        }
        Err(e) => unsigned(e.to_string())?,
    };
    let mut lines = String::new();
    for e in &att.envelopes {
        lines.push_str(
            &serde_json::to_string(e).map_err(|e| CliError::from(std::io::Error::other(e)))?,
        );
        lines.push('\n');
    }
    write_file(path, &lines)?;
    if let Some(k) = &att.key {
        eprintln!(
            "attestation written to {}, signed by {}",
            path.display(),
            k.fingerprint
        );
    }
    Ok(())
}
