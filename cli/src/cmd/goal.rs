//! `tacho goal ...`: frozen plans, checks run by id with receipts, the status of each
//! check, and the completion gate (BRIEF §3). The operations are the application
//! layer's (`tacho_app::Tacho::create_goal` and friends); this module renders them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use tacho_app::render::prefix;
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
    }
}

/// The plan size advisory, if any, as a line of text output.
fn advisory(out: &mut Out, advisory: Option<&String>) -> Result<(), CliError> {
    if let Some(a) = advisory {
        out.line(format!("  advisory: {a}"))?;
    }
    Ok(())
}

/// What a fingerprint covered beyond the plan, as lines of text output.
fn disclose(
    out: &mut Out,
    additional: &[String],
    external: &[String],
    labels: [&str; 2],
) -> Result<(), CliError> {
    if !additional.is_empty() {
        out.line(format!("{}: {}", labels[0], additional.join(", ")))?;
    }
    if !external.is_empty() {
        out.line(format!("{}: {}", labels[1], external.join(", ")))?;
    }
    Ok(())
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
    out.line(format!(
        "goal {} (revision {}) replaces {}: contract {} → {}; {}",
        v.goal,
        v.revision,
        v.replaces,
        prefix(&v.previous_digest, 16),
        prefix(&v.contract_digest, 16),
        if v.assured {
            "assured: completion is earned by its checks"
        } else {
            "no assurance contract (the replaced goal had none)"
        }
    ))?;
    advisory(&mut out, v.advisory.as_ref())?;
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
        out.line(format!(
            "goal {} resumed (it was paused: {})",
            v.goal, v.was_paused
        ))?;
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
    out.line(format!(
        "goal {} frozen in session {}: {} (contract {})",
        v.goal,
        v.session,
        v.title,
        prefix(&v.contract_digest, 16)
    ))?;
    match &v.check_commands {
        Some(cs) => {
            for c in cs {
                out.line(format!("  check {}: {}", c.id, c.command))?;
            }
        }
        None => out.line("  no assurance contract: completion follows the plain rule")?,
    }
    advisory(&mut out, v.advisory.as_ref())?;
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
        out.line(format!(
            "goal {} blocked ({}): {} — needs: {}",
            v.goal, a.kind, a.reason, a.required_change
        ))?;
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
        out.line(format!(
            "goal {} (revision {}) replaces {}: contract {} → {}; earlier receipts cannot satisfy it",
            v.goal,
            v.revision,
            v.revises,
            prefix(&v.previous_digest, 16),
            prefix(&v.contract_digest, 16)
        ))?;
        advisory(&mut out, v.advisory.as_ref())?;
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
    let verdict = if v.passed { "passed" } else { "failed" };
    let r = &v.receipt;
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
    } else {
        out.line(format!(
            "check {} {verdict} (exit {}{}), receipt #{} in session {}",
            a.check,
            r.exit_code.map_or("none".into(), |c| c.to_string()),
            if r.timed_out { ", timed out" } else { "" },
            v.seq,
            v.session
        ))?;
        if let Some(w) = &v.unbound {
            out.line(format!("  not in the frozen environment: {w}"))?;
        }
        if let Some(w) = &r.no_evidence {
            out.line(format!("  no fresh evidence: {w}"))?;
        } else if r.fingerprint_before != r.fingerprint_after {
            out.line("  the source changed while the check ran")?;
        }
        disclose(
            &mut out,
            &v.additional_paths,
            &v.external_paths_left_out,
            ["  also fingerprinted", "  left out (outside the workspace)"],
        )?;
    }
    out.finish()?;
    if v.passed {
        Ok(())
    } else {
        Err(CliError::findings(format!("check {} {verdict}", a.check)))
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
    } else if v.accepted {
        out.line(format!("goal {} completed: {}", v.goal, v.reason))?;
    } else {
        out.line(format!(
            "completion of goal {} refused: {}",
            v.goal, v.reason
        ))?;
        for o in &v.open {
            out.line(format!("  {o}"))?;
        }
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

/// Where `goal status` says the checks run (SPEC §12.2).
fn environment_line(v: &tacho_app::GoalStatus) -> String {
    let path = v
        .environment
        .iter()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or("-");
    match &v.environment_digest {
        Some(d) => format!(
            "Checks run with PATH={path} and {} other variables frozen with the goal (environment {}), {} programs bound; nothing else of the caller's shell.",
            v.environment.len().saturating_sub(1),
            prefix(d, 16),
            v.programs.len()
        ),
        None => "Frozen before check environments were: checks run with the caller's PATH, HOME, LANG, LC_ALL, TZ and USER, and receipts bind no environment.".to_string(),
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
    out.line(format!("Goal {}: {}", v.goal, v.title))?;
    if !v.assured {
        out.line("No assurance contract: this goal's completion is not earned by checks.")?;
    }
    out.line(format!("Contract: {}", v.contract_digest))?;
    match &v.fingerprint {
        Some(fp) => out.line(format!("Source now: {}", prefix(fp, 16)))?,
        None => out.line(format!(
            "Source now: no fresh evidence ({})",
            v.no_fresh_evidence.as_deref().unwrap_or_default()
        ))?,
    }
    for c in &v.checks {
        let why = c
            .why
            .as_ref()
            .map(|w| format!(" — {w}"))
            .unwrap_or_default();
        let evidence = c
            .receipt_seq
            .map(|s| format!(" (receipt #{s})"))
            .unwrap_or_default();
        out.line(format!("  {:<8} {}{why}{evidence}", c.state, c.id))?;
        out.line(format!("           purpose: {}", c.purpose))?;
        out.line(format!("           command: {}", c.command))?;
        if !c.recent_evidence.is_empty() {
            let seqs: Vec<String> = c.recent_evidence.iter().map(|s| format!("#{s}")).collect();
            out.line(format!("           recent receipts: {}", seqs.join(", ")))?;
        }
    }
    if v.assured {
        out.line(environment_line(&v))?;
    }
    if let Some(c) = v.checks.first() {
        out.line(format!("Source paths: {}", c.source_paths.join(", ")))?;
        for s in &c.sources {
            out.line(format!("Source ({}): {}", s.role, s.reference))?;
        }
    }
    disclose(
        &mut out,
        &v.additional_paths,
        &v.external_paths_left_out,
        [
            "Also fingerprinted (reported by edits)",
            "Left out (outside the workspace)",
        ],
    )?;
    if let Some(r) = &v.revises {
        out.line(format!(
            "Revision {} of {r} (correction: {})",
            v.revision,
            v.correction.as_deref().unwrap_or("-")
        ))?;
    }
    if let Some(n) = &v.revised_by {
        out.line(format!(
            "Replaced by revision {n}: its receipts do not count here."
        ))?;
    }
    if let Some(b) = &v.blocked {
        out.line(format!("Blocked: {b}"))?;
    }
    if let Some(p) = &v.paused {
        out.line(format!("Paused: {p}"))?;
    }
    for w in &v.warnings {
        out.line(format!("Warning: {w}"))?;
    }
    out.line(if v.completed {
        "Completed.".to_string()
    } else if v.can_complete {
        format!("Can complete: {}.", v.completion_reason)
    } else {
        format!("Cannot complete yet: {}.", v.completion_reason)
    })?;
    out.finish()
}
