//! `tacho gc`: drop snapshots that no recorded session references, delete the objects
//! only they held, and pack the rest.

use clap::Args;
use tacho_app::render::snapshots as render;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Report what would be dropped; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: GcArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let g = tacho.gc(a.dry_run)?;
    let mut out = Out::new();
    if a.json {
        out.typed("gc", &g)?;
        return out.finish();
    }
    for w in render::gc_warnings(&g) {
        eprintln!("{w}");
    }
    out.line(render::gc(&g).trim_end())?;
    out.finish()
}
