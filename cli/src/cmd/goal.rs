//! `tacho goal ...`: frozen plans, checks run by id with receipts, the status of each
//! check, and the completion gate (BRIEF §3). The operations are the application
//! layer's (`tacho_app::Tacho::create_goal` and friends); this module renders them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use tacho_app::render::goals;
use tacho_app::{BlockRequest, CreateRequest, ReplaceRequest, read_plan};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Subcommand)]
pub enum GoalCommand {
    /// Freeze a plan (Markdown with an assurance contract) as a goal of a session.
    Create(CreateArgs),
    /// Run a frozen check by its id and record the receipt.
    Check(CheckArgs),
    /// Each check's state (passed, failed, stale, running, missing) and whether the goal
    /// can complete.
    Status(StatusArgs),
    /// The completion gate: completes the goal only if every check passed on the
    /// source as it is now; otherwise names every check that did not, and why.
    Complete(StatusArgs),
    /// Mark the goal blocked by something outside the agent's reach.
    Block(BlockArgs),
    /// Replace the goal's plan after a correction: a new goal with a new contract; the
    /// old plan, digest and receipts stay in the record and cannot satisfy it.
    Revise(ReviseArgs),
    /// Replace the goal with a new plan (a new objective may come with it): the
    /// replacement keeps the goal's assurance, takes over only if no other replacement,
    /// pause, block or completion of the goal came first, and a plan that fails leaves
    /// the goal as it was.
    Replace(ReplaceArgs),
    /// Resume a paused goal: it holds the agent again and the stall count starts over.
    Resume(StatusArgs),
    /// Set a goal aside for good (the user's act, once its session ended): it holds no
    /// one any more, and every view says it was cleared.
    Clear(ClearArgs),
}

#[derive(Debug, Args)]
pub struct ClearArgs {
    #[arg(long)]
    pub session: String,
    /// The goal cleared (id or unique prefix; default the session's latest).
    #[arg(long)]
    pub goal: Option<String>,
    /// Why it is set aside.
    #[arg(long)]
    pub reason: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReplaceArgs {
    /// Why the goal is replaced.
    pub reason: String,
    #[arg(long)]
    pub plan: PathBuf,
    /// The replacement's objective (default: the replaced goal's).
    #[arg(long)]
    pub objective: Option<String>,
    #[arg(long)]
    pub session: String,
    /// The goal replaced (id or unique prefix; default the session's latest).
    #[arg(long)]
    pub goal: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct BlockArgs {
    #[arg(long)]
    pub session: String,
    #[arg(long)]
    pub goal: Option<String>,
    /// `external_dependency`, `authorization` or `user_input`.
    #[arg(long)]
    pub kind: String,
    #[arg(long)]
    pub reason: String,
    /// The change outside the agent's reach that would unblock the goal.
    #[arg(long)]
    pub required_change: String,
    /// Receipts (event numbers of `goal.check` events of this goal) the block rests on.
    #[arg(long = "evidence", required = true)]
    pub evidence: Vec<u64>,
    /// States that no independent work remains.
    #[arg(long)]
    pub no_independent_work: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ReviseArgs {
    /// What was wrong with the plan.
    pub correction: String,
    #[arg(long)]
    pub plan: PathBuf,
    #[arg(long)]
    pub session: String,
    #[arg(long)]
    pub goal: Option<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The plan (Markdown; see SPEC.md §12).
    #[arg(long)]
    pub plan: PathBuf,
    #[arg(long)]
    pub objective: Option<String>,
    /// Require an assurance contract. (A plan with a contract always makes an assured
    /// goal: its completion is earned by its checks.)
    #[arg(long)]
    pub assure: bool,
    /// The session the goal belongs to.
    #[arg(long)]
    pub session: String,
    /// The workspace (default: the session's, else the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The check id from the frozen plan.
    pub check: String,
    #[arg(long)]
    pub session: String,
    /// The goal (id or unique prefix; default the session's latest).
    #[arg(long)]
    pub goal: Option<String>,
    /// Seconds before the check is stopped and counted as failed.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(long)]
    pub session: String,
    #[arg(long)]
    pub goal: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: GoalCommand) -> Result<(), CliError> {
    match c {
        GoalCommand::Create(a) => create(a),
        GoalCommand::Check(a) => check(a),
        GoalCommand::Status(a) => status(a),
        GoalCommand::Complete(a) => complete(a),
        GoalCommand::Block(a) => block(a),
        GoalCommand::Revise(a) => revise(a),
        GoalCommand::Replace(a) => replace(a),
        GoalCommand::Resume(a) => resume(a),
        GoalCommand::Clear(a) => clear(a),
    }
}

fn clear(a: ClearArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let v = tacho.clear_goal(&session, a.goal.as_deref(), &a.reason)?;
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
    } else {
        out.line(goals::cleared(&v).trim_end())?;
    }
    out.finish()
}

fn replace(a: ReplaceArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let v = tacho.replace_goal(ReplaceRequest {
        session: &session,
        goal: a.goal.as_deref(),
        reason: &a.reason,
        plan_path: &a.plan,
        objective: a.objective.clone(),
    })?;
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
        return out.finish();
    }
    out.line(goals::replaced(&v).trim_end())?;
    out.finish()
}

fn resume(a: StatusArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let v = tacho.resume_goal(&session, a.goal.as_deref())?;
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
    } else {
        out.line(goals::resumed(&v).trim_end())?;
    }
    out.finish()
}

fn create(a: CreateArgs) -> Result<(), CliError> {
    let markdown = read_plan(&a.plan)?;
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let v = tacho.create_goal(CreateRequest {
        session: &session,
        markdown: &markdown,
        source_name: &a.plan.display().to_string(),
        objective: a.objective.clone(),
        assure: a.assure,
        workspace: a.workspace.clone(),
    })?;
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
        return out.finish();
    }
    out.line(goals::frozen(&v).trim_end())?;
    out.finish()
}

fn block(a: BlockArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let req = BlockRequest {
        kind: &a.kind,
        reason: &a.reason,
        required_change: &a.required_change,
        evidence: &a.evidence,
        no_independent_work: a.no_independent_work,
    };
    req.check()?;
    let session = tacho.resolve_session(&a.session)?;
    let v = tacho.block_goal(&session, a.goal.as_deref(), &req)?;
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
    } else {
        out.line(goals::blocked(&v, &req).trim_end())?;
    }
    out.finish()
}

fn revise(a: ReviseArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let v = tacho.revise_goal(&session, a.goal.as_deref(), &a.correction, &a.plan)?;
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
    } else {
        out.line(goals::revised(&v).trim_end())?;
    }
    out.finish()
}

fn check(a: CheckArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let v = tacho.run_check(
        &session,
        a.goal.as_deref(),
        &a.check,
        Duration::from_secs(a.timeout),
    )?;
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
    } else {
        out.line(goals::receipt(&v).trim_end())?;
    }
    out.finish()?;
    if v.passed {
        Ok(())
    } else {
        Err(CliError::findings(format!("check {} failed", a.check)))
    }
}

fn complete(a: StatusArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let v = tacho.complete_goal(&session, a.goal.as_deref())?;
    if let Some(n) = &v.note {
        eprintln!("{n}");
    }
    for w in &v.warnings {
        eprintln!("warning: {w}");
    }
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
    } else {
        out.line(goals::completion(&v).trim_end())?;
    }
    out.finish()?;
    if v.accepted {
        Ok(())
    } else {
        Err(CliError::findings(format!(
            "goal {} cannot complete yet",
            v.goal
        )))
    }
}

fn status(a: StatusArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let v = tacho.goal_status(&session, a.goal.as_deref())?;
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
        return out.finish();
    }
    out.line(goals::status(&v).trim_end())?;
    out.finish()
}
