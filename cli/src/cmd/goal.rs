//! `tacho goal ...`: frozen plans, checks run by id with receipts, the status of each
//! check, and the completion gate (BRIEF §3).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use tacho_git::fingerprint::{Fingerprint, fingerprint};
use tacho_goals::{Submission, contract_digest, validate};
use tacho_projections::{CheckState, GoalState, Goals, check_states};
use tacho_schema::{EventBody, GoalAction, GoalCheckRun, GoalCheckStart, GoalCreated, GoalUpdate};
use tacho_store::{Durability, Store};

use crate::cmd::record::now_unix_ns;
use crate::error::CliError;
use crate::home::open_store;
use crate::output::Out;

#[derive(Debug, Subcommand)]
pub enum GoalCommand {
    /// Freeze a plan (Markdown with an assurance contract) as a goal of a session.
    Create(CreateArgs),
    /// Run a frozen check by its id and record the receipt.
    Check(CheckArgs),
    /// Each check's state (passed, failed, stale, missing) and whether the goal can
    /// complete.
    Status(StatusArgs),
    /// The completion gate: completes the goal only if every check passed on the
    /// source as it is now; otherwise names every check that did not, and why.
    Complete(StatusArgs),
    /// Mark the goal blocked by something outside the agent's reach.
    Block(BlockArgs),
    /// Replace the goal's plan after a correction: a new goal with a new contract; the
    /// old plan, digest and receipts stay in the record and cannot satisfy it.
    Revise(ReviseArgs),
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
    /// The goal must be earned by its checks (the plan needs an assurance contract).
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
        GoalCommand::Status(a) => status(a, false),
        GoalCommand::Complete(a) => status(a, true),
        GoalCommand::Block(a) => block(a),
        GoalCommand::Revise(a) => revise(a),
    }
}

fn create(a: CreateArgs) -> Result<(), CliError> {
    let log = open_store()?;
    let markdown = std::fs::read_to_string(&a.plan)
        .map_err(|e| CliError::Input(format!("{}: {e}", a.plan.display())))?;
    let v = create_goal(
        &log,
        &a.session,
        &markdown,
        &a.plan.display().to_string(),
        a.objective.clone(),
        a.assure,
        a.workspace.clone(),
    )?;
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
        return out.finish();
    }
    out.line(format!(
        "goal {} frozen in session {}: {} (contract {})",
        v["goal"].as_str().unwrap_or_default(),
        v["session"].as_str().unwrap_or_default(),
        v["title"].as_str().unwrap_or_default(),
        v["contract_digest"]
            .as_str()
            .unwrap_or_default()
            .get(..16)
            .unwrap_or_default()
    ))?;
    match v["check_commands"].as_array() {
        Some(cs) => {
            for c in cs {
                out.line(format!(
                    "  check {}: {}",
                    c["id"].as_str().unwrap_or_default(),
                    c["command"].as_str().unwrap_or_default()
                ))?;
            }
        }
        None => out.line("  no assurance contract: completion follows the plain rule")?,
    }
    out.finish()
}

/// Freezes a plan (Markdown text) as a goal of `session`: what `goal create` and the
/// MCP `create_goal` tool do. `source` names the plan in error messages.
pub fn create_goal(
    log: &Store,
    session: &str,
    markdown: &str,
    source: &str,
    objective: Option<String>,
    assure: bool,
    workspace: Option<PathBuf>,
) -> Result<serde_json::Value, CliError> {
    let session = log.resolve_session(session)?;
    let ws = match workspace {
        Some(w) => w,
        None => crate::snapshots::session_workspace(log, &session)?
            .map(PathBuf::from)
            .map_or_else(std::env::current_dir, Ok)?,
    };
    let ws = ws
        .canonicalize()
        .map_err(|e| CliError::Input(format!("workspace {}: {e}", ws.display())))?;
    let plan = validate_plan(
        markdown,
        source,
        &ws,
        objective.as_deref().unwrap_or(""),
        assure,
    )?;
    let created = freeze(&plan, objective, assure, &ws, 1);
    let (goal, digest) = (created.goal.clone(), created.contract_digest.clone());
    let receipt = log.writer(&session)?.append(
        now_unix_ns(),
        &EventBody::GoalCreated(created),
        Durability::Sync,
    )?;
    let checks = plan
        .assurance
        .as_ref()
        .map(|x| x.checks.clone())
        .unwrap_or_default();
    Ok(serde_json::json!({
        "type": "goal", "goal": goal, "session": session, "title": plan.title,
        "contract_digest": digest, "baseline": plan.baseline,
        "checks": plan.assurance.as_ref().map(|_| checks.iter().map(|c| c.id.clone()).collect::<Vec<_>>()),
        "check_commands": plan.assurance.as_ref().map(|_| checks.iter().map(|c| serde_json::json!({"id": c.id, "command": c.command})).collect::<Vec<_>>()),
        "seq": receipt.last_seq,
    }))
}

/// Validates a plan; `{BASELINE}` becomes the workspace's HEAD.
fn validate_plan(
    markdown: &str,
    source: &str,
    ws: &Path,
    objective: &str,
    assure: bool,
) -> Result<tacho_goals::Plan, CliError> {
    let head = tacho_git::snapshot::head_commit(ws)?;
    validate(&Submission {
        markdown,
        objective,
        head: head.as_deref(),
        assure,
    })
    .map_err(|e| CliError::Input(format!("{source}: {e}")))
}

/// The `goal.created` of a validated plan, under a fresh goal id.
fn freeze(
    plan: &tacho_goals::Plan,
    objective: Option<String>,
    assured: bool,
    ws: &Path,
    revision: u32,
) -> GoalCreated {
    GoalCreated {
        goal: format!("goal_{}", ulid::Ulid::generate().to_string().to_lowercase()),
        revision,
        title: plan.title.clone(),
        kind: plan.kind.clone(),
        objective,
        assured,
        contract_digest: contract_digest(plan),
        baseline: plan.baseline.clone(),
        workspace: ws.display().to_string(),
        plan: plan.markdown.clone(),
        assurance: plan
            .assurance
            .as_ref()
            .and_then(|x| serde_json::to_string(x).ok()),
        ..GoalCreated::default()
    }
}

fn block(a: BlockArgs) -> Result<(), CliError> {
    let log = open_store()?;
    let v = block_goal(
        &log,
        &a.session,
        a.goal.as_deref(),
        &a.kind,
        &a.reason,
        &a.required_change,
        &a.evidence,
        a.no_independent_work,
    )?;
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
    } else {
        out.line(format!(
            "goal {} blocked ({}): {} — needs: {}",
            v["goal"].as_str().unwrap_or_default(),
            a.kind,
            a.reason,
            a.required_change
        ))?;
    }
    out.finish()
}

/// Marks a goal blocked: what `goal block` and the MCP `update_goal` tool do.
#[allow(clippy::too_many_arguments)]
pub fn block_goal(
    log: &Store,
    session: &str,
    goal: Option<&str>,
    kind: &str,
    reason: &str,
    required_change: &str,
    evidence: &[u64],
    no_independent_work: bool,
) -> Result<serde_json::Value, CliError> {
    const KINDS: &[&str] = &["external_dependency", "authorization", "user_input"];
    if !KINDS.contains(&kind) {
        return Err(CliError::Input(format!(
            "--kind {:?}: one of {}",
            kind,
            KINDS.join(", ")
        )));
    }
    if !no_independent_work {
        return Err(CliError::Input(
            "a goal is blocked only when no independent work remains: pass --no-independent-work to state it, or keep working".into(),
        ));
    }
    for (what, v) in [("--reason", reason), ("--required-change", required_change)] {
        if v.trim().is_empty() {
            return Err(CliError::Input(format!("{what} must say something")));
        }
    }
    let (session, gs) = goals(log, session)?;
    let g = pick(&gs, &session, goal)?;
    let mut all = Vec::new();
    log.read_session(&session, |e| {
        if let EventBody::GoalCheckRun(r) = &e.event.body
            && r.goal == g.created.goal
        {
            all.push(e.seq);
        }
    })?;
    for ev in evidence {
        if !all.contains(ev) {
            return Err(CliError::Input(format!(
                "--evidence {ev}: event #{ev} of session {session} is not a receipt of goal {} (its receipts: {})",
                g.created.goal,
                if all.is_empty() {
                    "none yet".into()
                } else {
                    all.iter()
                        .map(|s| format!("#{s}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )));
        }
    }
    let body = EventBody::GoalUpdate(GoalUpdate {
        goal: g.created.goal.clone(),
        revision: g.created.revision,
        action: GoalAction::Block,
        accepted: true,
        reason: Some(reason.to_owned()),
        block_kind: Some(kind.to_owned()),
        required_change: Some(required_change.to_owned()),
        evidence: evidence.to_vec(),
        no_independent_work: true,
        ..GoalUpdate::default()
    });
    let r = log
        .writer(&session)?
        .append(now_unix_ns(), &body, Durability::Sync)?;
    Ok(serde_json::json!({"type": "goal_blocked", "goal": g.created.goal, "seq": r.last_seq}))
}

fn revise(a: ReviseArgs) -> Result<(), CliError> {
    let log = open_store()?;
    let (session, gs) = goals(&log, &a.session)?;
    let old = pick(&gs, &session, a.goal.as_deref())?;
    if old.completed {
        return Err(CliError::Input(format!(
            "goal {} is completed: a completed goal is not revised; create a new goal",
            old.created.goal
        )));
    }
    if let Some(n) = &old.revised_by {
        return Err(CliError::Input(format!(
            "goal {} was already revised by {n}; revise that one",
            old.created.goal
        )));
    }
    if a.correction.trim().is_empty() {
        return Err(CliError::Input(
            "the correction must say what was wrong".into(),
        ));
    }
    let ws = PathBuf::from(&old.created.workspace);
    let objective = old.created.objective.clone().unwrap_or_default();
    let markdown = std::fs::read_to_string(&a.plan)
        .map_err(|e| CliError::Input(format!("{}: {e}", a.plan.display())))?;
    let plan = validate_plan(
        &markdown,
        &a.plan.display().to_string(),
        &ws,
        &objective,
        old.created.assured,
    )?;
    let mut created = freeze(
        &plan,
        old.created.objective.clone(),
        old.created.assured,
        &ws,
        old.created.revision + 1,
    );
    created.revises = Some(old.created.goal.clone());
    created.previous_digest = Some(old.created.contract_digest.clone());
    created.correction = Some(a.correction.clone());
    let (goal, digest) = (created.goal.clone(), created.contract_digest.clone());
    let r = log.writer(&session)?.append(
        now_unix_ns(),
        &EventBody::GoalCreated(created),
        Durability::Sync,
    )?;
    let mut out = Out::new();
    if a.json {
        out.json(&serde_json::json!({
            "type": "goal", "goal": goal, "revises": old.created.goal, "revision": old.created.revision + 1,
            "contract_digest": digest, "previous_digest": old.created.contract_digest, "seq": r.last_seq,
        }))?;
    } else {
        out.line(format!(
            "goal {goal} (revision {}) replaces {}: contract {} → {}; earlier receipts cannot satisfy it",
            old.created.revision + 1,
            old.created.goal,
            &old.created.contract_digest[..16],
            &digest[..16]
        ))?;
    }
    out.finish()
}

/// The session (resolved from an id or prefix) and its goals, folded from its log.
fn goals(log: &Store, session: &str) -> Result<(String, Goals), CliError> {
    let session = log.resolve_session(session)?;
    let mut g = Goals::default();
    log.read_session(&session, |e| g.apply(e.seq, &e.event))?;
    Ok((session, g))
}

fn pick<'a>(gs: &'a Goals, session: &str, id: Option<&str>) -> Result<&'a GoalState, CliError> {
    gs.find(id).ok_or_else(|| {
        CliError::NotFound(match id {
            Some(id) => format!("session {session} has no goal matching {id:?}"),
            None => format!("session {session} has no goal; create one with `tacho goal create`"),
        })
    })
}

/// The fingerprint the goal's receipts are bound to: its source paths plus the files
/// edit events reported since it was created.
fn goal_fingerprint(g: &GoalState) -> Result<Fingerprint, CliError> {
    let ws = PathBuf::from(&g.created.workspace);
    let edited: Vec<String> = g
        .edited
        .keys()
        .filter_map(|p| tacho_git::snapshot::relative_path(&ws, p).ok())
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(fingerprint(&ws, &g.source_paths(), &edited, threads)?)
}

fn digest_of(fp: &Fingerprint) -> Result<String, String> {
    match fp {
        Fingerprint::Fresh { digest, .. } => Ok(digest.clone()),
        Fingerprint::NoFreshEvidence(w) => Err(format!("{}: {}", w.path, w.reason)),
    }
}

fn check(a: CheckArgs) -> Result<(), CliError> {
    let log = open_store()?;
    let v = run_check(&log, &a.session, a.goal.as_deref(), &a.check, a.timeout)?;
    let passed = v["passed"].as_bool().unwrap_or(false);
    let verdict = if passed { "passed" } else { "failed" };
    let r = &v["receipt"];
    let mut out = Out::new();
    if a.json {
        out.json(&v)?;
    } else {
        out.line(format!(
            "check {} {verdict} (exit {}{}), receipt #{} in session {}",
            a.check,
            r["exit_code"]
                .as_i64()
                .map_or("none".into(), |c| c.to_string()),
            if r["timed_out"].as_bool().unwrap_or(false) {
                ", timed out"
            } else {
                ""
            },
            v["seq"],
            v["session"].as_str().unwrap_or_default()
        ))?;
        if let Some(w) = r["no_evidence"].as_str() {
            out.line(format!("  no fresh evidence: {w}"))?;
        } else if r["fingerprint_before"] != r["fingerprint_after"] {
            out.line("  the source changed while the check ran")?;
        }
    }
    out.finish()?;
    if passed {
        Ok(())
    } else {
        Err(CliError::Findings(format!("check {} {verdict}", a.check)))
    }
}

/// Runs a frozen check by id and records its receipt: what `goal check` and the MCP
/// `verify_project` tool do. The check's output goes to stderr.
pub fn run_check(
    log: &Store,
    session: &str,
    goal: Option<&str>,
    check: &str,
    timeout_secs: u64,
) -> Result<serde_json::Value, CliError> {
    let (session, gs) = goals(log, session)?;
    let g = pick(&gs, &session, goal)?;
    let checks = g.check_ids();
    let Some((_, command)) = checks.iter().find(|(id, _)| *id == check) else {
        return Err(CliError::Input(format!(
            "goal {} has no check {:?}; its checks: {}",
            g.created.goal,
            check,
            checks
                .iter()
                .map(|c| c.0.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let ws = PathBuf::from(&g.created.workspace);
    // Recorded first, so that `goal status` shows the check as running meanwhile.
    log.writer(&session)?.append(
        now_unix_ns(),
        &EventBody::GoalCheckStart(GoalCheckStart {
            goal: g.created.goal.clone(),
            revision: g.created.revision,
            check: check.to_owned(),
        }),
        Durability::Sync,
    )?;
    let before = digest_of(&goal_fingerprint(g)?);
    let started = now_unix_ns();
    eprintln!("running check {check} in {}: {command}", ws.display());
    let run = run_command(command, &ws, Duration::from_secs(timeout_secs))?;
    let ended = now_unix_ns();
    let after = digest_of(&goal_fingerprint(g)?);
    let no_evidence = match (&before, &after) {
        (Err(w), _) | (_, Err(w)) => Some(w.clone()),
        _ => None,
    };
    let passed =
        run.exit_code == Some(0) && !run.timed_out && no_evidence.is_none() && before == after;
    let receipt = GoalCheckRun {
        goal: g.created.goal.clone(),
        revision: g.created.revision,
        check: check.to_owned(),
        contract_digest: g.created.contract_digest.clone(),
        workspace: g.created.workspace.clone(),
        command: command.clone(),
        started_unix_ns: started,
        ended_unix_ns: ended,
        exit_code: run.exit_code,
        timed_out: run.timed_out,
        stdout_digest: run.stdout_digest,
        stderr_digest: run.stderr_digest,
        output_tail: Some(run.tail),
        fingerprint_before: before.ok(),
        fingerprint_after: after.ok(),
        no_evidence,
        passed,
    };
    let r = log.writer(&session)?.append(
        now_unix_ns(),
        &EventBody::GoalCheckRun(receipt.clone()),
        Durability::Sync,
    )?;
    Ok(serde_json::json!({
        "type": "receipt", "session": session, "seq": r.last_seq, "passed": passed,
        "receipt": serde_json::to_value(&receipt).map_err(|e| CliError::Io(e.to_string()))?,
    }))
}

struct Ran {
    exit_code: Option<i64>,
    timed_out: bool,
    stdout_digest: String,
    stderr_digest: String,
    tail: String,
}

/// Runs `sh -c command` in `ws`, streaming its output to stderr, hashing all of it and
/// keeping the last 4 KiB; stops it after `timeout`.
fn run_command(command: &str, ws: &Path, timeout: Duration) -> Result<Ran, CliError> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(ws)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CliError::Io(format!("running the check: {e}")))?;
    let pump = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut h = blake3::Hasher::new();
            let mut tail: Vec<u8> = Vec::new();
            let mut buf = [0u8; 8192];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
                let _ = std::io::stderr().write_all(&buf[..n]);
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 8192 {
                    tail.drain(..tail.len() - 4096);
                }
            }
            (h.finalize().to_hex().to_string(), tail)
        })
    };
    let out = child.stdout.take().map(|s| pump(Box::new(s)));
    let err = child.stderr.take().map(|s| pump(Box::new(s)));
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| CliError::Io(e.to_string()))? {
            break s;
        }
        if start.elapsed() > timeout {
            timed_out = true;
            let _ = child.kill();
            break child.wait().map_err(|e| CliError::Io(e.to_string()))?;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let join = |h: Option<std::thread::JoinHandle<(String, Vec<u8>)>>| {
        h.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    let (stdout_digest, mut tail) = join(out);
    let (stderr_digest, etail) = join(err);
    tail.extend_from_slice(&etail);
    let tail = String::from_utf8_lossy(&tail[tail.len().saturating_sub(4096)..]).into_owned();
    Ok(Ran {
        exit_code: status.code().map(i64::from),
        timed_out,
        stdout_digest,
        stderr_digest,
        tail,
    })
}

fn status(a: StatusArgs, complete: bool) -> Result<(), CliError> {
    let log = open_store()?;
    let mut out = Out::new();
    if complete {
        let v = complete_goal(&log, &a.session, a.goal.as_deref())?;
        if let Some(n) = v["note"].as_str() {
            eprintln!("{n}");
        }
        let accepted = v["accepted"].as_bool().unwrap_or(false);
        let goal = v["goal"].as_str().unwrap_or_default().to_owned();
        let reason = v["reason"].as_str().unwrap_or_default();
        if a.json {
            out.json(&v)?;
        } else if accepted {
            out.line(format!("goal {goal} completed: {reason}"))?;
        } else {
            out.line(format!("completion of goal {goal} refused: {reason}"))?;
            for o in v["open"].as_array().into_iter().flatten() {
                out.line(format!("  {}", o.as_str().unwrap_or_default()))?;
            }
        }
        out.finish()?;
        return if accepted {
            Ok(())
        } else {
            Err(CliError::Findings(format!(
                "goal {goal} cannot complete yet"
            )))
        };
    }
    let v = goal_status(&log, &a.session, a.goal.as_deref())?;
    if a.json {
        out.json(&v)?;
        return out.finish();
    }
    let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    out.line(format!("Goal {}: {}", text("goal"), text("title")))?;
    if !v["assured"].as_bool().unwrap_or(false) {
        out.line("No assurance contract: this goal's completion is not earned by checks.")?;
    }
    out.line(format!("Contract: {}", text("contract_digest")))?;
    match v["fingerprint"].as_str() {
        Some(fp) => out.line(format!("Source now: {}", fp.get(..16).unwrap_or(fp)))?,
        None => out.line(format!(
            "Source now: no fresh evidence ({})",
            text("no_fresh_evidence")
        ))?,
    }
    for c in v["checks"].as_array().into_iter().flatten() {
        let why = c["why"]
            .as_str()
            .map(|w| format!(" — {w}"))
            .unwrap_or_default();
        let evidence = c["receipt_seq"]
            .as_u64()
            .map(|s| format!(" (receipt #{s})"))
            .unwrap_or_default();
        out.line(format!(
            "  {:<8} {}{why}{evidence}",
            c["state"].as_str().unwrap_or_default(),
            c["id"].as_str().unwrap_or_default()
        ))?;
    }
    if let Some(r) = v["revises"].as_str() {
        out.line(format!(
            "Revision {} of {r} (correction: {})",
            v["revision"],
            v["correction"].as_str().unwrap_or("-")
        ))?;
    }
    if let Some(n) = v["revised_by"].as_str() {
        out.line(format!(
            "Replaced by revision {n}: its receipts do not count here."
        ))?;
    }
    if let Some(b) = v["blocked"].as_str() {
        out.line(format!("Blocked: {b}"))?;
    }
    if let Some(p) = v["paused"].as_str() {
        out.line(format!("Paused: {p}"))?;
    }
    out.line(if v["completed"].as_bool().unwrap_or(false) {
        "Completed."
    } else if v["can_complete"].as_bool().unwrap_or(false) {
        "Can complete: every check passed on the source as it is now."
    } else {
        "Cannot complete yet."
    })?;
    out.finish()
}

/// Each check's state against the source now (`goal status`, MCP `get_goal`).
pub fn goal_status(
    log: &Store,
    session: &str,
    goal: Option<&str>,
) -> Result<serde_json::Value, CliError> {
    let (session, gs) = goals(log, session)?;
    let g = pick(&gs, &session, goal)?;
    let (now, states, _, can_complete) = assess_goal(g)?;
    Ok(serde_json::json!({
        "type": "goal_status",
        "session": session,
        "goal": g.created.goal,
        "title": g.created.title,
        "revision": g.created.revision,
        "assured": g.created.assured,
        "contract_digest": g.created.contract_digest,
        "completed": g.completed,
        "blocked": g.blocked,
        "paused": g.paused,
        "revised_by": g.revised_by,
        "revises": g.created.revises,
        "correction": g.created.correction,
        "fingerprint": now.as_ref().ok(),
        "no_fresh_evidence": now.as_ref().err(),
        "checks": states.iter().map(|(id, s)| serde_json::json!({
            "id": id,
            "state": s.name(),
            "why": match s {
                CheckState::Failed(w) | CheckState::Stale(w) => Some(w.clone()),
                CheckState::Running(at) => Some(format!("started at event #{at}, no receipt yet")),
                _ => None,
            },
            "receipt_seq": g.receipts.get(id).map(|r| r.0),
        })).collect::<Vec<_>>(),
        "can_complete": can_complete,
    }))
}

/// The source now, each check's state, the checks not passed, and whether the goal
/// can complete.
#[allow(clippy::type_complexity)]
fn assess_goal(
    g: &GoalState,
) -> Result<
    (
        Result<String, String>,
        Vec<(String, CheckState)>,
        Vec<String>,
        bool,
    ),
    CliError,
> {
    let now = digest_of(&goal_fingerprint(g)?);
    let states = check_states(g, now.as_deref().map_err(String::as_str));
    let open: Vec<String> = states
        .iter()
        .filter(|(_, s)| *s != CheckState::Passed)
        .map(|(id, s)| match s {
            CheckState::Failed(w) | CheckState::Stale(w) => format!("{id}: {} ({w})", s.name()),
            other => format!("{id}: {}", other.name()),
        })
        .collect();
    let can_complete = g.created.assured && open.is_empty() && !states.is_empty();
    Ok((now, states, open, can_complete))
}

/// The completion gate (`goal complete`, MCP `update_goal` with `complete`).
pub fn complete_goal(
    log: &Store,
    session: &str,
    goal: Option<&str>,
) -> Result<serde_json::Value, CliError> {
    let (session, gs) = goals(log, session)?;
    let g = pick(&gs, &session, goal)?;
    let (_, states, open, can_complete) = assess_goal(g)?;
    let (accepted, reason) = if !g.created.assured {
        // No contract: the plain rule, and the answer says so.
        match g.plain_rule() {
            Ok(()) => (
                true,
                "no assurance contract; the plain rule holds: a verification passed after the last edit".to_string(),
            ),
            Err(why) => (
                false,
                format!("no assurance contract; the plain rule does not hold: {why}"),
            ),
        }
    } else if can_complete {
        (
            true,
            "every check passed on the source as it is now".to_string(),
        )
    } else {
        (
            false,
            format!("{} of {} checks not passed", open.len(), states.len()),
        )
    };
    let body = EventBody::GoalUpdate(GoalUpdate {
        goal: g.created.goal.clone(),
        revision: g.created.revision,
        action: GoalAction::Complete,
        accepted,
        reason: Some(reason.clone()),
        details: open.clone(),
        ..GoalUpdate::default()
    });
    let mut w = log.writer(&session)?;
    w.append(now_unix_ns(), &body, Durability::Sync)?;
    // Stall: attempts that bring no new passing evidence. The second gets a hint;
    // the third pauses the goal and discloses the unfinished work.
    let fruitless = if accepted {
        0
    } else {
        g.fruitless_attempts() + 1
    };
    let mut stall_note = None;
    if fruitless == 2 {
        stall_note = Some("hint: a completion attempt needs new passing evidence: run the checks listed (tacho goal check ID) after fixing what they report".to_string());
    } else if fruitless >= 3 && g.paused.is_none() {
        let why = format!("stalled: {fruitless} completion attempts without new passing evidence");
        w.append(
            now_unix_ns(),
            &EventBody::GoalUpdate(GoalUpdate {
                goal: g.created.goal.clone(),
                revision: g.created.revision,
                action: GoalAction::Pause,
                accepted: true,
                reason: Some(why.clone()),
                details: open.clone(),
                ..GoalUpdate::default()
            }),
            Durability::Sync,
        )?;
        stall_note = Some(format!(
            "goal paused ({why}); unfinished work: {}",
            open.join("; ")
        ));
    }
    drop(w);
    if let Some(n) = &stall_note {
        eprintln!("{n}");
    }
    Ok(serde_json::json!({
        "type": "completion", "session": session, "goal": g.created.goal,
        "accepted": accepted, "reason": reason, "open": open, "note": stall_note,
    }))
}
