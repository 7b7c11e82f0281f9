//! Goal check status: a fold of a session's goal events (and the file edits that make
//! receipts stale) into, per goal, its frozen plan and each check's latest receipt;
//! then the state of each check against the source as it is now.

use std::collections::BTreeMap;

use serde::Serialize;
use tacho_schema::{Assurance, Event, EventBody, GoalAction, GoalCheckRun, GoalCreated};

/// One goal as the log has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoalState {
    pub created: GoalCreated,
    pub created_seq: u64,
    /// Check id → (seq, latest receipt).
    pub receipts: BTreeMap<String, (u64, GoalCheckRun)>,
    /// Paths edit events reported since the goal was created → the seq of the last edit.
    pub edited: BTreeMap<String, u64>,
    /// Completion attempts: (seq, accepted).
    pub completions: Vec<(u64, bool)>,
    pub completed: bool,
    /// Blocked (with the reason), paused (stalled), or replaced by a revision.
    pub blocked: Option<String>,
    /// The block's `goal.update` (its seq).
    pub blocked_seq: Option<u64>,
    pub paused: Option<String>,
    /// Set aside by the user (`goal clear`): the reason, and the clear's seq. A
    /// cleared goal holds no one (SPEC §12.3).
    pub cleared: Option<(String, u64)>,
    pub revised_by: Option<String>,
    /// The plain rule's inputs (goals without a contract): the last passing
    /// verification run since the goal was created (a `verification.run`, or a shell
    /// call of a known runner, as the risk assessment counts them).
    pub last_passing_verification: Option<u64>,
    /// The plain rule's other input: the items of the agent's todo list (the
    /// session's last `todo.update`, whenever it was reported) still open.
    pub open_todos: Vec<String>,
    /// Checks started whose receipt has not been recorded: check id → start seq.
    pub running: BTreeMap<String, u64>,
    /// The last resume (a `pause` update not accepted: the pause no longer holds).
    pub resumed: Option<u64>,
    /// Check id → the seqs of all its receipts, oldest first.
    pub receipt_history: BTreeMap<String, Vec<u64>>,
    /// The last receipt that failed otherwise than its check's receipt before it (its
    /// exit code, a timeout, why it was no evidence, or its proof changed): new
    /// evidence, which restarts the stall count.
    pub new_failing_evidence: Option<u64>,
}

impl GoalState {
    /// The plain rule for a goal without a contract: no open item on the agent's todo
    /// list, and a verification run passed after the last file edit. `Err` says why
    /// not.
    pub fn plain_rule(&self) -> Result<(), String> {
        if let Some(first) = self.open_todos.first() {
            return Err(format!(
                "the agent's todo list has {} open item(s) (first: {:?})",
                self.open_todos.len(),
                first.lines().next().unwrap_or("")
            ));
        }
        let last_edit = self.edited.values().max().copied();
        match (self.last_passing_verification, last_edit) {
            (None, _) => {
                Err("no passing verification run was recorded since the goal was created".into())
            }
            (Some(v), Some(e)) if e > v => {
                Err("files were edited after the last passing verification run".into())
            }
            _ => Ok(()),
        }
    }

    /// Refused completion attempts since the last passing receipt, the last receipt
    /// that failed otherwise than before (new evidence of progress), or the last
    /// resume: attempts that produced no new evidence.
    pub fn fruitless_attempts(&self) -> usize {
        let last_pass = self
            .receipts
            .values()
            .filter(|(_, r)| r.passed)
            .map(|(s, _)| *s)
            .max()
            .unwrap_or(0)
            .max(self.resumed.unwrap_or(0))
            .max(self.new_failing_evidence.unwrap_or(0));
        self.completions
            .iter()
            .filter(|(s, accepted)| *s > last_pass && !accepted)
            .count()
    }
}

/// What a revision (or replacement) changed in its goal's contract that lets less
/// work pass, in words (SPEC §12.3): the contract dropped, checks removed or made
/// guards, commands changed, acceptance criteria no longer checked, source paths
/// dropped, `changePaths` or the setup changed. Empty when it weakened nothing seen.
pub fn weakening(old: Option<&str>, new: Option<&str>) -> Vec<String> {
    let Some(o) = old.and_then(Assurance::from_json) else {
        return Vec::new();
    };
    let Some(n) = new.and_then(Assurance::from_json) else {
        return vec!["the assurance contract was dropped".into()];
    };
    let mut out = Vec::new();
    for c in &o.checks {
        match n.checks.iter().find(|x| x.id == c.id) {
            None => out.push(format!("check {} removed (`{}`)", c.id, c.command)),
            Some(x) => {
                if x.command != c.command {
                    out.push(format!(
                        "check {}: command `{}` became `{}`",
                        c.id, c.command, x.command
                    ));
                }
                if x.guard && !c.guard {
                    out.push(format!(
                        "check {} made a guard (need not fail before)",
                        c.id
                    ));
                }
            }
        }
    }
    let covered = |a: &Assurance| -> std::collections::BTreeSet<String> {
        a.checks
            .iter()
            .filter(|c| !c.guard)
            .flat_map(|c| c.acceptance_ids.iter().cloned())
            .collect()
    };
    for ac in covered(&o).difference(&covered(&n)) {
        out.push(format!(
            "acceptance criterion {ac} no longer checked red/green"
        ));
    }
    for p in o
        .source_paths
        .iter()
        .filter(|p| !n.source_paths.contains(p))
    {
        out.push(format!("source path {p} dropped"));
    }
    if !o.change_paths.is_empty() && o.change_paths != n.change_paths {
        out.push(format!(
            "changePaths [{}] became [{}]",
            o.change_paths.join(", "),
            n.change_paths.join(", ")
        ));
    }
    if o.setup.is_some() && o.setup != n.setup {
        out.push("the setup changed".into());
    }
    out
}

impl GoalState {
    /// The frozen assurance contract, typed (`None` without one, or when the recorded
    /// text is not a contract: such a goal has no checks that could pass).
    pub fn assurance(&self) -> Option<Assurance> {
        self.created
            .assurance
            .as_deref()
            .and_then(Assurance::from_json)
    }

    /// The check ids the frozen plan declares with their commands, in plan order.
    pub fn check_ids(&self) -> Vec<(String, String)> {
        self.assurance()
            .map(|a| a.checks.into_iter().map(|c| (c.id, c.command)).collect())
            .unwrap_or_default()
    }

    /// The declared source paths.
    pub fn source_paths(&self) -> Vec<String> {
        self.assurance().map(|a| a.source_paths).unwrap_or_default()
    }
}

/// Every goal of a session, in creation order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Goals {
    pub goals: Vec<GoalState>,
    /// Shell calls of known test runners, builds and linters waiting for their result
    /// (call ids): a passing one is a verification run, as the risk assessment counts.
    shell_runs: std::collections::BTreeSet<String>,
    /// Every passing verification run: its seq, and the call id of a shell run (which
    /// a later `call_unconfirmed` error takes back).
    passes: Vec<(u64, Option<String>)>,
    /// The open items of the agent's last todo list.
    open_todos: Vec<String>,
}

impl Goals {
    /// Folds in one event.
    pub fn apply(&mut self, seq: u64, e: &Event) {
        match &e.body {
            EventBody::GoalCreated(g) => {
                if let Some(old) = &g.revises
                    && let Some(o) = self.find_mut(old)
                {
                    o.revised_by = Some(g.goal.clone());
                }
                self.push_goal(seq, g)
            }
            EventBody::GoalCheckStart(c) => {
                if let Some(g) = self.find_mut(&c.goal) {
                    g.running.insert(c.check.clone(), seq);
                }
            }
            EventBody::VerificationRun(v)
                if v.status == tacho_schema::VerificationStatus::Passed =>
            {
                self.verification_passed(seq, None);
            }
            // A call the agent's transcript never named was not the agent's: its run
            // counts for nothing (SPEC §3.1).
            EventBody::Error(e) if e.code.as_deref() == Some(crate::risk::CALL_UNCONFIRMED) => {
                if let Some(id) = crate::risk::unconfirmed_call_id(&e.message) {
                    self.passes.retain(|(_, c)| c.as_deref() != Some(id));
                    for g in &mut self.goals {
                        g.last_passing_verification = self
                            .passes
                            .iter()
                            .map(|(s, _)| *s)
                            .filter(|s| *s > g.created_seq)
                            .max();
                    }
                }
            }
            EventBody::ToolCall(c)
                if crate::risk::shell_verification(&c.tool, c.target.as_deref()).is_some() =>
            {
                self.shell_runs.insert(c.call_id.clone());
            }
            EventBody::ToolResult(r) => {
                // Every result ends its call's wait, whatever it says.
                let shell_run = self.shell_runs.remove(&r.call_id);
                if shell_run && crate::risk::shell_run_passed(r.status) == Some(true) {
                    self.verification_passed(seq, Some(r.call_id.clone()));
                }
            }
            EventBody::GoalCheckRun(r) => {
                if let Some(g) = self.find_mut(&r.goal) {
                    g.running.remove(&r.check);
                    if r.passed {
                        g.paused = None;
                    } else {
                        // Output is no measure (timings change it every run): the
                        // outcome is — its exit code, a timeout, what made it no
                        // evidence, its proof.
                        let outcome = |x: &GoalCheckRun| {
                            (
                                x.exit_code,
                                x.timed_out,
                                x.no_evidence.is_some(),
                                x.proof.clone(),
                            )
                        };
                        let differs = g
                            .receipts
                            .get(&r.check)
                            .is_none_or(|(_, before)| outcome(before) != outcome(r));
                        if differs {
                            g.new_failing_evidence = Some(seq);
                        }
                    }
                    g.receipts.insert(r.check.clone(), (seq, r.clone()));
                    g.receipt_history
                        .entry(r.check.clone())
                        .or_default()
                        .push(seq);
                }
            }
            EventBody::GoalUpdate(u) => {
                if let Some(g) = self.find_mut(&u.goal) {
                    match u.action {
                        GoalAction::Complete => {
                            g.completions.push((seq, u.accepted));
                            g.completed |= u.accepted;
                        }
                        GoalAction::Clear if u.accepted => {
                            g.cleared = Some((u.reason.clone().unwrap_or_default(), seq));
                        }
                        GoalAction::Block if u.accepted => {
                            g.blocked = u.reason.clone();
                            g.blocked_seq = Some(seq);
                        }
                        GoalAction::Pause if u.accepted => g.paused = u.reason.clone(),
                        // A resume: the pause no longer holds.
                        GoalAction::Pause => {
                            g.paused = None;
                            g.resumed = Some(seq);
                        }
                        _ => {}
                    }
                }
            }
            EventBody::TodoUpdate(t) => {
                self.open_todos = t
                    .todos
                    .iter()
                    .filter(|i| i.status.is_open())
                    .map(|i| i.content.clone())
                    .collect();
                for g in &mut self.goals {
                    g.open_todos = self.open_todos.clone();
                }
            }
            EventBody::FileEdit(f) => {
                for g in &mut self.goals {
                    for p in [Some(&f.path), f.from.as_ref()].into_iter().flatten() {
                        g.edited.insert(p.clone(), seq);
                    }
                }
            }
            _ => {}
        }
    }

    /// A verification run passed at `seq`: the plain rule's input of every goal.
    fn verification_passed(&mut self, seq: u64, call: Option<String>) {
        self.passes.push((seq, call));
        for g in &mut self.goals {
            g.last_passing_verification = Some(seq);
        }
    }

    fn push_goal(&mut self, seq: u64, g: &GoalCreated) {
        self.goals.push(GoalState {
            created: g.clone(),
            created_seq: seq,
            receipts: BTreeMap::new(),
            edited: BTreeMap::new(),
            completions: Vec::new(),
            completed: false,
            blocked: None,
            blocked_seq: None,
            paused: None,
            cleared: None,
            revised_by: None,
            last_passing_verification: None,
            open_todos: self.open_todos.clone(),
            running: BTreeMap::new(),
            resumed: None,
            receipt_history: BTreeMap::new(),
            new_failing_evidence: None,
        });
    }

    fn find_mut(&mut self, goal: &str) -> Option<&mut GoalState> {
        self.goals.iter_mut().rev().find(|g| g.created.goal == goal)
    }

    /// A goal by id or unique prefix; the latest goal when `id` is `None`.
    pub fn find(&self, id: Option<&str>) -> Option<&GoalState> {
        match id {
            None => self.goals.last(),
            Some(id) => {
                let mut m = self.goals.iter().filter(|g| g.created.goal.starts_with(id));
                let first = m.next()?;
                m.next().is_none().then_some(first)
            }
        }
    }
}

/// The state of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "why", rename_all = "snake_case")]
pub enum CheckState {
    Passed,
    Failed(String),
    Stale(String),
    /// Started (at this event) and no receipt yet.
    Running(u64),
    Missing,
}

impl CheckState {
    pub fn name(&self) -> &'static str {
        match self {
            CheckState::Passed => "passed",
            CheckState::Failed(_) => "failed",
            CheckState::Stale(_) => "stale",
            CheckState::Running(_) => "running",
            CheckState::Missing => "missing",
        }
    }
}

/// What the source looks like now: a fingerprint digest, or why there is none.
pub type Current<'a> = Result<&'a str, &'a str>;

/// Each declared check's state, given the fingerprint of the source now.
pub fn check_states(g: &GoalState, now: Current<'_>) -> Vec<(String, CheckState)> {
    g.check_ids()
        .into_iter()
        .map(|(id, command)| {
            let state = match (g.running.get(&id), g.receipts.get(&id)) {
                (Some(start), _) => CheckState::Running(*start),
                (None, None) => CheckState::Missing,
                (None, Some((seq, r))) => receipt_state(g, *seq, r, &command, now),
            };
            (id, state)
        })
        .collect()
}

fn receipt_state(
    g: &GoalState,
    seq: u64,
    r: &GoalCheckRun,
    command: &str,
    now: Current<'_>,
) -> CheckState {
    let c = &g.created;
    if r.contract_digest != c.contract_digest || r.revision != c.revision {
        return CheckState::Stale("ran against another contract (the plan was revised)".into());
    }
    // Only the frozen command earns a pass: a receipt that ran anything else
    // contradicts its plan and counts for nothing.
    if r.command != command {
        return CheckState::Failed(format!(
            "the receipt ran {:?}, not the frozen plan's command",
            r.command
        ));
    }
    if r.workspace != c.workspace {
        return CheckState::Stale(format!("ran in another workspace ({})", r.workspace));
    }
    if let Some(why) = environment_mismatch(c, r) {
        return CheckState::Failed(why);
    }
    if let Some(why) = &r.no_evidence {
        return CheckState::Failed(format!("no fresh evidence: {why}"));
    }
    if r.timed_out {
        return CheckState::Failed("timed out".into());
    }
    if r.exit_code != Some(0) {
        return CheckState::Failed(match r.exit_code {
            Some(code) => format!("exit code {code}"),
            None => "killed by a signal".into(),
        });
    }
    if r.fingerprint_before != r.fingerprint_after {
        return CheckState::Failed("the source changed while the check ran".into());
    }
    if let Some(why) = proof_problem(c, r) {
        return CheckState::Failed(why);
    }
    if !r.passed {
        return CheckState::Failed("not passed".into());
    }
    if let Some((path, _)) = g.edited.iter().find(|(_, s)| **s > seq) {
        return CheckState::Stale(format!("{path} was edited after the check ran"));
    }
    match now {
        Err(why) => CheckState::Stale(format!("no fresh evidence now: {why}")),
        Ok(fp) if Some(fp) != r.fingerprint_after.as_deref() => {
            CheckState::Stale("the source changed since the check ran".into())
        }
        Ok(_) => CheckState::Passed,
    }
}

/// What a receipt proves (`goal.check`'s `proof`, SPEC §12.2 "Red/green"): failed
/// without the change and passed with it.
pub const RED_GREEN: &str = "red_green";
/// A regression guard that passed without the change and with it.
pub const GUARD: &str = "guard";
/// Passed without the change too: it proves nothing.
pub const UNABLE_TO_FAIL: &str = "unable_to_fail";
/// A regression guard that failed without the change.
pub const GUARD_FAILED: &str = "guard_failed";
/// No run without the change could be made.
pub const UNPROVEN: &str = "unproven";

/// Whether a receipt's proof lets its pass count.
pub fn proof_holds(proof: Option<&str>) -> bool {
    matches!(proof, Some(RED_GREEN | GUARD))
}

/// A receipt's proof in words (`red_scope` says what "without the change" was).
pub fn proof_words(proof: &str, red_scope: Option<&str>) -> String {
    let without = match red_scope {
        Some("baseline") => {
            "without the change (every source path but tests and check scripts as at the goal's start)"
        }
        _ => "without the change (changePaths as at the goal's start)",
    };
    match proof {
        RED_GREEN => format!("red/green: failed {without}, passed with it"),
        GUARD => format!("guard: passed {without} and with it"),
        UNABLE_TO_FAIL => format!("unable to fail: passed {without} too, so it proves nothing"),
        GUARD_FAILED => format!("guard failed {without}: a guard must pass before and after"),
        _ => "unproven: no run without the change could be made".to_string(),
    }
}

/// Why a passing receipt proves nothing, if so: its run without the change did not
/// go as the check's role asks, or (for a goal frozen with a start snapshot) it has
/// no such run at all — it ran in the workspace, before clean rooms. A goal frozen
/// before start snapshots keeps its receipts (views say they are unproven).
pub fn proof_problem(c: &GoalCreated, r: &GoalCheckRun) -> Option<String> {
    match r.proof.as_deref() {
        None if c.start_snapshot.is_some() => Some(
            "ran in the workspace, not in a clean room with a run without the change (a receipt from before clean rooms)".into(),
        ),
        None => None,
        Some(p) if proof_holds(Some(p)) => None,
        Some(p) => {
            let mut why = proof_words(p, r.red_scope.as_deref());
            if let Some(note) = &r.proof_note {
                why.push_str(&format!(" ({note})"));
            }
            Some(why)
        }
    }
}

/// Why a receipt was not taken in the environment frozen with its goal, if it was
/// not (SPEC §12.2): another environment digest, or a program that is not one the goal
/// froze (another file, or the same path with other content). A goal frozen before
/// environments were (no digest) binds nothing.
pub fn environment_mismatch(c: &GoalCreated, r: &GoalCheckRun) -> Option<String> {
    let frozen = c.environment_digest.as_deref()?;
    match r.environment_digest.as_deref() {
        None => {
            return Some(
                "the receipt records no environment; the goal froze one (a receipt from before environments were frozen)"
                    .into(),
            );
        }
        Some(d) if d != frozen => {
            return Some(format!(
                "ran in another environment (digest {d}, the goal froze {frozen})"
            ));
        }
        Some(_) => {}
    }
    let path_of = |line: &str| line.split_once("  ").map_or(line, |(_, p)| p).to_owned();
    let changed: Vec<String> = r
        .programs
        .iter()
        .filter(|p| !c.programs.contains(p))
        .map(|p| {
            let path = path_of(p);
            if p.starts_with("-  ") {
                format!("{path} was found nowhere on the frozen PATH")
            } else if c.programs.iter().any(|f| path_of(f) == path) {
                format!("{path} changed since the goal was frozen")
            } else {
                format!("{path} is not a program the goal froze")
            }
        })
        .collect();
    (!changed.is_empty()).then(|| {
        format!(
            "ran programs other than those frozen with the goal: {}",
            changed.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tacho_schema::{EditOp, FileEdit};

    fn ev(body: EventBody) -> Event {
        Event {
            session: "s".into(),
            time_unix_ns: 0,
            body,
        }
    }

    fn created() -> GoalCreated {
        GoalCreated {
            goal: "goal_1".into(),
            revision: 1,
            title: "t".into(),
            kind: "k".into(),
            assured: true,
            contract_digest: "d1".into(),
            workspace: "/w".into(),
            plan: "# t".into(),
            assurance: Some(r#"{"version":1,"sourcePaths":["src"],"checks":[{"id":"a","acceptanceIds":["AC1"],"command":"make a","purpose":"a"},{"id":"b","acceptanceIds":["AC1"],"command":"make b","purpose":"b"}]}"#.into()),
            ..GoalCreated::default()
        }
    }

    fn receipt(check: &str, exit: i64, fp: &str) -> GoalCheckRun {
        GoalCheckRun {
            goal: "goal_1".into(),
            revision: 1,
            check: check.into(),
            contract_digest: "d1".into(),
            workspace: "/w".into(),
            command: format!("make {check}"),
            exit_code: Some(exit),
            fingerprint_before: Some(fp.into()),
            fingerprint_after: Some(fp.into()),
            passed: exit == 0,
            ..GoalCheckRun::default()
        }
    }

    fn update(action: GoalAction, accepted: bool, reason: &str) -> EventBody {
        EventBody::GoalUpdate(tacho_schema::GoalUpdate {
            goal: "goal_1".into(),
            revision: 1,
            action,
            accepted,
            reason: Some(reason.into()),
            ..tacho_schema::GoalUpdate::default()
        })
    }

    /// The plain rule (a goal without a contract) takes the verification runs the risk
    /// assessment counts: a shell call of a known test runner that ran and passed
    /// after the last edit holds it as a `verification.run` does; a failed, denied or
    /// unrelated call does not, nor one before the last edit.
    #[test]
    fn the_plain_rule_counts_shell_test_runs_as_risk_does() {
        use tacho_schema::{ToolCall, ToolResult, ToolStatus};
        let plain = GoalCreated {
            assurance: None,
            assured: false,
            ..created()
        };
        let call = |id: &str, tool: &str, cmd: &str| {
            ev(EventBody::ToolCall(ToolCall {
                call_id: id.into(),
                tool: tool.into(),
                target: Some(cmd.into()),
                ..ToolCall::default()
            }))
        };
        let result = |id: &str, status| {
            ev(EventBody::ToolResult(ToolResult {
                call_id: id.into(),
                status,
                ..ToolResult::default()
            }))
        };
        let edit = ev(EventBody::FileEdit(FileEdit {
            path: "src/x.rs".into(),
            op: EditOp::Modify,
            ..FileEdit::default()
        }));
        let mut gs = Goals::default();
        gs.apply(1, &ev(EventBody::GoalCreated(plain)));
        gs.apply(2, &call("c1", "Bash", "npm test"));
        gs.apply(3, &result("c1", ToolStatus::Ok));
        gs.apply(4, &edit);
        let held = |gs: &Goals| gs.find(None).map(GoalState::plain_rule);
        assert!(matches!(held(&gs), Some(Err(_))), "a run before the edit");
        for (seq, id, tool, cmd, status) in [
            (5, "c2", "Bash", "npm test", ToolStatus::Error),
            (7, "c3", "Bash", "cargo test", ToolStatus::Denied),
            (9, "c4", "Bash", "ls -la", ToolStatus::Ok),
            (11, "c5", "Read", "npm test", ToolStatus::Ok),
        ] {
            gs.apply(seq, &call(id, tool, cmd));
            gs.apply(seq + 1, &result(id, status));
            assert!(matches!(held(&gs), Some(Err(_))), "{tool} {cmd} {status:?}");
        }
        gs.apply(13, &call("c6", "bash", "cd web && npm test"));
        gs.apply(14, &result("c6", ToolStatus::Ok));
        assert_eq!(held(&gs), Some(Ok(())));
    }

    /// Issue 47 (17): the plain rule's other half — no open item on the agent's todo
    /// list. The session's last list counts (one reported before the goal too); a
    /// later list with every item completed or cancelled lets the rule hold again.
    #[test]
    fn the_plain_rule_needs_no_open_todos() {
        use tacho_schema::{TodoItem, TodoStatus, TodoUpdate, VerificationRun, VerificationStatus};
        let plain = GoalCreated {
            assurance: None,
            assured: false,
            ..created()
        };
        let todos = |items: &[(&str, TodoStatus)]| {
            ev(EventBody::TodoUpdate(TodoUpdate {
                todos: items
                    .iter()
                    .map(|(c, s)| TodoItem {
                        content: (*c).into(),
                        status: *s,
                        id: None,
                    })
                    .collect(),
                ..TodoUpdate::default()
            }))
        };
        let passed = ev(EventBody::VerificationRun(VerificationRun {
            command: "npm test".into(),
            status: VerificationStatus::Passed,
            ..VerificationRun::default()
        }));
        let mut gs = Goals::default();
        gs.apply(
            1,
            &todos(&[
                ("Write the middleware", TodoStatus::Completed),
                ("Mount it", TodoStatus::InProgress),
            ]),
        );
        gs.apply(2, &ev(EventBody::GoalCreated(plain)));
        gs.apply(3, &passed);
        let held = |gs: &Goals| gs.find(None).map(GoalState::plain_rule);
        match held(&gs) {
            Some(Err(why)) => assert!(
                why.contains("1 open item(s)") && why.contains("Mount it"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        gs.apply(
            4,
            &todos(&[
                ("Write the middleware", TodoStatus::Completed),
                ("Mount it", TodoStatus::Pending),
                ("Run the tests", TodoStatus::Pending),
            ]),
        );
        assert!(matches!(held(&gs), Some(Err(w)) if w.contains("2 open item(s)")));
        gs.apply(
            5,
            &todos(&[
                ("Write the middleware", TodoStatus::Completed),
                ("Mount it", TodoStatus::Completed),
                ("Run the tests", TodoStatus::Cancelled),
            ]),
        );
        assert_eq!(held(&gs), Some(Ok(())));
    }

    /// Issue 42 (16): a receipt that fails otherwise than the one before it (another
    /// exit code, timeout, reason or proof: the agent is getting somewhere) restarts the
    /// stall count; the same failure again does not, whatever its output.
    #[test]
    fn new_failing_evidence_restarts_the_stall_count() {
        let mut gs = Goals::default();
        gs.apply(1, &ev(EventBody::GoalCreated(created())));
        gs.apply(2, &ev(EventBody::GoalCheckRun(receipt("a", 1, "f1"))));
        for seq in 3..5 {
            gs.apply(seq, &ev(update(GoalAction::Complete, false, "refused")));
        }
        assert_eq!(gs.find(None).unwrap().fruitless_attempts(), 2);
        // The same failure again: no progress.
        gs.apply(5, &ev(EventBody::GoalCheckRun(receipt("a", 1, "f1"))));
        gs.apply(6, &ev(update(GoalAction::Complete, false, "refused")));
        assert_eq!(gs.find(None).unwrap().fruitless_attempts(), 3);
        // The same exit code with other output (timings): still the same failure.
        let mut same = receipt("a", 1, "f2");
        same.stdout_digest = "1 failed in 0.04s".into();
        gs.apply(7, &ev(EventBody::GoalCheckRun(same)));
        assert_eq!(gs.find(None).unwrap().fruitless_attempts(), 3);
        // Another failure (another exit code): new evidence.
        gs.apply(8, &ev(EventBody::GoalCheckRun(receipt("a", 2, "f2"))));
        assert_eq!(gs.find(None).unwrap().fruitless_attempts(), 0);
        gs.apply(9, &ev(update(GoalAction::Complete, false, "refused")));
        assert_eq!(gs.find(None).unwrap().fruitless_attempts(), 1);
    }

    #[test]
    fn a_pause_not_accepted_is_a_resume_and_restarts_the_stall_count() {
        let mut gs = Goals::default();
        gs.apply(1, &ev(EventBody::GoalCreated(created())));
        for seq in 2..5 {
            gs.apply(seq, &ev(update(GoalAction::Complete, false, "refused")));
        }
        gs.apply(5, &ev(update(GoalAction::Pause, true, "stalled")));
        let g = gs.find(None).unwrap();
        assert_eq!(g.paused.as_deref(), Some("stalled"));
        assert_eq!(g.fruitless_attempts(), 3);
        gs.apply(6, &ev(update(GoalAction::Pause, false, "resumed")));
        let g = gs.find(None).unwrap();
        assert_eq!(g.paused, None);
        assert_eq!(g.fruitless_attempts(), 0);
        gs.apply(7, &ev(update(GoalAction::Complete, false, "refused")));
        assert_eq!(gs.find(None).unwrap().fruitless_attempts(), 1);
    }

    #[test]
    fn a_receipt_binds_the_frozen_environment_and_programs() {
        let mut bound = created();
        bound.environment_digest = Some("e1".into());
        bound.programs = vec!["aa  /usr/bin/make".into(), "bb  /bin/sh".into()];
        let mut ok = receipt("a", 0, "f1");
        ok.environment_digest = Some("e1".into());
        ok.programs = vec!["bb  /bin/sh".into(), "aa  /usr/bin/make".into()];
        assert_eq!(environment_mismatch(&bound, &ok), None);
        // A goal frozen before environments were binds nothing.
        assert_eq!(
            environment_mismatch(&created(), &receipt("a", 0, "f1")),
            None
        );
        let cases = [
            (
                None,
                vec![],
                "the receipt records no environment; the goal froze one (a receipt from before environments were frozen)",
            ),
            (
                Some("e2"),
                ok.programs.clone(),
                "ran in another environment (digest e2, the goal froze e1)",
            ),
            (
                Some("e1"),
                vec!["cc  /usr/bin/make".into()],
                "ran programs other than those frozen with the goal: /usr/bin/make changed since the goal was frozen",
            ),
            (
                Some("e1"),
                vec!["cc  /tmp/fake/make".into(), "-  cargo".into()],
                "ran programs other than those frozen with the goal: /tmp/fake/make is not a program the goal froze; cargo was found nowhere on the frozen PATH",
            ),
        ];
        for (digest, programs, why) in cases {
            let mut r = receipt("a", 0, "f1");
            r.environment_digest = digest.map(str::to_owned);
            r.programs = programs;
            assert_eq!(environment_mismatch(&bound, &r).as_deref(), Some(why));
            let mut gs = Goals::default();
            gs.apply(1, &ev(EventBody::GoalCreated(bound.clone())));
            gs.apply(2, &ev(EventBody::GoalCheckRun(r)));
            assert_eq!(
                check_states(gs.find(None).unwrap(), Ok("f1"))[0].1,
                CheckState::Failed(why.into())
            );
        }
    }

    #[test]
    fn a_receipt_that_ran_another_command_never_passes() {
        let mut gs = Goals::default();
        gs.apply(1, &ev(EventBody::GoalCreated(created())));
        let mut forged = receipt("a", 0, "f1");
        forged.command = "true".into();
        gs.apply(2, &ev(EventBody::GoalCheckRun(forged)));
        let g = gs.find(None).unwrap();
        assert_eq!(
            check_states(g, Ok("f1"))[0],
            (
                "a".into(),
                CheckState::Failed(
                    "the receipt ran \"true\", not the frozen plan's command".into()
                )
            )
        );
    }

    #[test]
    fn states_follow_receipts_edits_and_the_source() {
        let mut gs = Goals::default();
        gs.apply(1, &ev(EventBody::GoalCreated(created())));
        let g = gs.find(None).unwrap();
        assert_eq!(
            check_states(g, Ok("f1")),
            [
                ("a".into(), CheckState::Missing),
                ("b".into(), CheckState::Missing)
            ]
        );
        gs.apply(2, &ev(EventBody::GoalCheckRun(receipt("a", 1, "f1"))));
        gs.apply(3, &ev(EventBody::GoalCheckRun(receipt("b", 0, "f1"))));
        let g = gs.find(Some("goal")).unwrap();
        assert_eq!(
            check_states(g, Ok("f1")),
            [
                ("a".into(), CheckState::Failed("exit code 1".into())),
                ("b".into(), CheckState::Passed)
            ]
        );
        assert_eq!(
            check_states(g, Ok("f2"))[1].1,
            CheckState::Stale("the source changed since the check ran".into())
        );
        gs.apply(
            4,
            &ev(EventBody::FileEdit(FileEdit {
                path: "src/x.rs".into(),
                op: EditOp::Modify,
                ..FileEdit::default()
            })),
        );
        let g = gs.find(None).unwrap();
        assert_eq!(
            check_states(g, Ok("f1"))[1].1,
            CheckState::Stale("src/x.rs was edited after the check ran".into())
        );
        gs.apply(
            5,
            &ev(EventBody::GoalCheckStart(tacho_schema::GoalCheckStart {
                goal: "goal_1".into(),
                revision: 1,
                check: "a".into(),
            })),
        );
        assert_eq!(
            check_states(gs.find(None).unwrap(), Ok("f1"))[0].1,
            CheckState::Running(5)
        );
        let mut other = receipt("b", 0, "f1");
        other.contract_digest = "d0".into();
        gs.apply(5, &ev(EventBody::GoalCheckRun(other)));
        let g = gs.find(None).unwrap();
        assert_eq!(
            check_states(g, Ok("f1"))[1].1,
            CheckState::Stale("ran against another contract (the plan was revised)".into())
        );
    }
}
