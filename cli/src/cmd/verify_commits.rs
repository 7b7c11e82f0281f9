//! `tacho verify-commits`: the commit-range verifier for goal checks.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tacho_app::types::Merges;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum MergesArg {
    /// A merge commit in the range is a violation.
    Reject,
    /// Check a merge against its first parent only.
    FirstParent,
    /// Check a merge against every parent.
    All,
}

#[derive(Debug, Args)]
pub struct VerifyCommitsArgs {
    /// The commit the range starts after (an ancestor of HEAD).
    #[arg(long)]
    pub baseline: String,
    /// Paths (repository-relative prefixes) every change must stay under.
    #[arg(long)]
    pub allow: Vec<String>,
    /// Paths no change may touch.
    #[arg(long)]
    pub forbid: Vec<String>,
    #[arg(long, value_enum, default_value = "reject")]
    pub merges: MergesArg,
    /// The repository's work tree (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: VerifyCommitsArgs) -> Result<(), CliError> {
    let merges = match a.merges {
        MergesArg::Reject => Merges::Reject,
        MergesArg::FirstParent => Merges::FirstParent,
        MergesArg::All => Merges::All,
    };
    let r = tacho_app::verify_commits(
        a.workspace.as_deref(),
        &a.baseline,
        &a.allow,
        &a.forbid,
        merges,
    )?;
    let mut out = Out::new();
    if a.json {
        out.typed("commit_report", &r)?;
    } else {
        out.line(tacho_app::render::verifiers::commits(&r).trim_end())?;
    }
    out.finish()?;
    if r.violations.is_empty() {
        Ok(())
    } else {
        Err(CliError::findings(format!(
            "{} violation(s) in the commit range",
            r.violations.len()
        )))
    }
}
