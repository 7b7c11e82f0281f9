//! `tacho session replay`: rebuild a session from its events. Replay never re-runs the
//! model or a tool and never reproduces external state; it reads the log.

use clap::{Args, ValueEnum};
use tacho_app::render::replay as render;
use tacho_app::{Exported, Verification, event_json, verify_package};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReplayMode {
    /// One line per event.
    Summary,
    /// Check the record: checksums, hash chain, sequence numbers, every tool result
    /// against its call, balanced steps. Exit 1 on any finding.
    Verify,
    /// The step stream rebuilt from the events, each event whole.
    Reconstruct,
    /// The step stream as expectations for a program that re-drives an agent and
    /// compares (JSON Lines: per step, the tool calls to expect with their inputs and
    /// the recorded results). Nothing is re-run.
    Execute,
    /// One portable, self-verifying file with the session's record, which
    /// `--mode verify --package FILE` checks on another machine (SPEC.md §9).
    Export,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The session (its id, or any unique prefix of it).
    #[arg(required_unless_present = "package")]
    pub session: Option<String>,
    #[arg(long, value_enum)]
    pub mode: ReplayMode,
    /// With `--mode export`: the file to write (default: stdout).
    #[arg(long)]
    pub output: Option<std::path::PathBuf>,
    /// With `--mode verify`: verify an exported package instead of the store.
    #[arg(long, conflicts_with = "session")]
    pub package: Option<std::path::PathBuf>,
    /// JSON Lines instead of text (with `--mode export`: an `export` record on stdout
    /// for the package written to `--output`).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ReplayArgs) -> Result<(), CliError> {
    let mut out = Out::new();
    if let Some(path) = &a.package {
        if !matches!(a.mode, ReplayMode::Verify) {
            return Err(CliError::input("--package goes with --mode verify"));
        }
        let v = verify_package(path)?;
        if a.json {
            print_verification(&v, true, &mut out)?;
        } else {
            out.line(render::verification(&v, Some(path)).trim_end())?;
        }
        return finish_verify(&v, out);
    }
    let tacho = crate::open()?;
    let session = tacho.resolve_session(a.session.as_deref().unwrap_or_default())?;
    match a.mode {
        ReplayMode::Summary => {
            let all = tacho.events(&session)?;
            if a.json {
                for e in &all {
                    out.event(&event_json(e))?;
                }
            } else if !all.is_empty() {
                out.line(render::summary(&all).trim_end())?;
            }
        }
        ReplayMode::Reconstruct => {
            let r = tacho.reconstruct(&session)?;
            if a.json {
                for step in &r.steps {
                    out.typed("step", step)?;
                }
            } else if !r.steps.is_empty() {
                out.line(render::reconstruction(&r).trim_end())?;
            }
        }
        ReplayMode::Export => return export(&tacho, &session, a.output.as_deref(), a.json),
        ReplayMode::Execute => {
            // JSON Lines either way: the expectations are for a program.
            let x = tacho.expectations(&session)?;
            out.json(&x.header)?;
            for step in &x.steps {
                out.json(step)?;
            }
            out.json(&x.end)?;
        }
        ReplayMode::Verify => {
            let v = tacho.verify_session(&session)?;
            print_verification(&v, a.json, &mut out)?;
            return finish_verify(&v, out);
        }
    }
    out.finish()
}

fn finish_verify(v: &Verification, out: Out) -> Result<(), CliError> {
    out.finish()?;
    let failed = v.failed();
    if failed > 0 {
        return Err(CliError::findings(format!(
            "replay verification of session {} failed with {failed} finding(s)",
            v.session
        )));
    }
    Ok(())
}

fn export(
    tacho: &tacho_app::Tacho,
    session: &str,
    output: Option<&std::path::Path>,
    json: bool,
) -> Result<(), CliError> {
    use std::io::{IsTerminal, Write};
    let stdout = std::io::stdout();
    if output.is_none() && json {
        return Err(CliError::input(
            "--json with --mode export goes with --output FILE (without it, the package itself is what goes to stdout)",
        ));
    }
    if output.is_none() && stdout.is_terminal() {
        return Err(CliError::input(
            "the package is binary: give --output FILE or redirect stdout",
        ));
    }
    let (pkg, log) = tacho.export_package(session)?;
    match output {
        Some(path) => {
            // Written next to a file and renamed over it (never a half-written
            // package), into a device or FIFO in place: tacho-app's `userfile`.
            let mut file = tacho_app::userfile::OutputFile::create(path)?;
            file.write_all(&pkg).map_err(|e| {
                CliError::from(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                ))
            })?;
            file.commit()?;
        }
        None => {
            let mut stdout = stdout.lock();
            stdout.write_all(&pkg).map_err(CliError::output)?;
            stdout.flush().map_err(CliError::output)?;
        }
    }
    let x = Exported::new(session, &log, pkg.len(), output);
    if json {
        let mut out = Out::new();
        out.typed("export", &x)?;
        return out.finish();
    }
    eprintln!("{}", render::exported(&x));
    Ok(())
}

/// Prints a verification: its findings, the calls left without a result and the
/// totals (JSON Lines), or its text.
pub fn print_verification(v: &Verification, json: bool, out: &mut Out) -> Result<(), CliError> {
    if !json {
        return out.line(render::verification(v, None).trim_end());
    }
    for f in v.findings() {
        out.typed("finding", &f)?;
    }
    for i in &v.replay.interrupted {
        out.typed("interrupted", i)?;
    }
    out.typed("summary", &v.summary())
}
