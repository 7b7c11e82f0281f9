//! `tacho push` and `tacho fetch`: sessions through the user's Git remotes.

use clap::Args;
use tacho_app::PushOptions;
use tacho_app::render::remote as render;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The remote (a name of the repository's remotes, or a URL; default `origin`),
    /// then sessions (ids or unique prefixes) of this repository's workspace. A first
    /// word that is no remote but a session is a session, pushed to `origin`.
    #[arg(value_name = "REMOTE|SESSION")]
    pub words: Vec<String>,
    /// Every session recorded in this repository's workspace.
    #[arg(long)]
    pub all: bool,
    /// Say what would be pushed; the remote is not changed.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct FetchArgs {
    /// The remote (a name of the repository's remotes, or a URL); default `origin`.
    pub remote: Option<String>,
    #[arg(long)]
    pub json: bool,
}

fn cwd() -> Result<std::path::PathBuf, CliError> {
    std::env::current_dir().map_err(|e| CliError::input(format!("the current directory: {e}")))
}

pub fn push(a: PushArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let cwd = cwd()?;
    let (remote, sessions) = tacho.push_words(&cwd, &a.words)?;
    if a.all && !sessions.is_empty() {
        return Err(CliError::input(
            "--all pushes every session of the workspace: name sessions or give --all, not both",
        ));
    }
    let o = tacho.push(&PushOptions {
        cwd,
        remote,
        sessions,
        all: a.all,
        dry_run: a.dry_run,
    })?;
    let mut out = Out::new();
    if a.json {
        out.typed("push", &o)?;
    } else {
        out.line(render::push(&o).trim_end())?;
    }
    out.finish()?;
    match o.rejected() {
        0 => Ok(()),
        n => Err(CliError::findings(format!(
            "the remote rejected {n} sessions"
        ))),
    }
}

pub fn fetch(a: FetchArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let o = tacho.fetch(&cwd()?, a.remote.as_deref())?;
    let mut out = Out::new();
    if a.json {
        out.typed("fetch", &o)?;
    } else {
        out.line(render::fetch(&o).trim_end())?;
    }
    out.finish()?;
    match o.refused() {
        0 => Ok(()),
        n => Err(CliError::findings(format!(
            "{n} sessions were refused (nothing of them was stored)"
        ))),
    }
}
