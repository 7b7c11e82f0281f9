//! `tacho review verify`: the review-receipts verifier for goal checks.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Subcommand)]
pub enum ReviewCommand {
    /// Verify review rounds: reviewers' exit codes and single verdicts, every finding
    /// dispositioned once in dispositions.json: fixed (on a newer revision and round,
    /// with a regression test this command runs — vitest by default, retries 0 — that
    /// passes exactly once) or rejected with evidence; the last round on HEAD, nothing
    /// uncommitted under the sources or the test directory.
    Verify(VerifyArgs),
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The directory holding review.json, dispositions.json and one directory per round.
    #[arg(long)]
    pub root: PathBuf,
    /// The repository's work tree (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    /// Regression test files must be literal paths under this directory.
    #[arg(long, default_value = "tests")]
    pub test_dir: String,
    /// The test runner, after `--` (default: `node_modules/.bin/vitest run --retry=0
    /// --reporter=json --outputFile={report} {files}`). `{report}`: the Jest-shaped JSON
    /// report it must write; `{files}`: the test files.
    #[arg(last = true)]
    pub runner: Vec<String>,
}

pub fn run(c: ReviewCommand) -> Result<(), CliError> {
    let ReviewCommand::Verify(a) = c;
    let mut opts = tacho_app::ReviewOptions {
        test_directory: a.test_dir,
        ..Default::default()
    };
    if !a.runner.is_empty() {
        opts.runner = a.runner;
    }
    let r = tacho_app::verify_reviews(&a.root, a.workspace.as_deref(), &opts)?;
    let mut out = Out::new();
    if a.json {
        out.typed("review_report", &r)?;
    } else {
        out.line(tacho_app::render::verifiers::reviews(&r).trim_end())?;
    }
    out.finish()?;
    if r.problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::findings(format!(
            "{} problem(s) in the review receipts",
            r.problems.len()
        )))
    }
}
