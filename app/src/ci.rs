//! `tacho ci verify BASE..HEAD` (SPEC §17.3): for each commit of a pull request's range,
//! the sessions that made it — linked by what tacho saw itself (`git.commits`), never
//! by what a commit says about itself — each verified, signed, scored for risk, and
//! its assured goals' receipts checked against the committed tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tacho_git::fingerprint::tree_fingerprint;
use tacho_git::snapshot::{SnapshotError, relative_path};
use tacho_goals::commits::{CommitsError, commit_range};
use tacho_store::StoreError;

use crate::Tacho;
use crate::error::kinds;
use crate::findings::CiRule;
use crate::signing::SignatureStatus;

/// What a pipeline requires beyond verified sessions.
#[derive(Debug, Clone, Copy, Default)]
pub struct CiPolicy {
    /// Every commit must be linked to a session.
    pub require_session: bool,
    /// Every linked session must be signed.
    pub require_signature: bool,
    /// Run each assured goal's frozen checks again on the committed tree, red/green
    /// against the range's base, and fail a check whose result differs from its
    /// receipt.
    pub rerun: bool,
}

/// Why the range could not be checked at all.
#[derive(Debug, thiserror::Error)]
pub enum CiError {
    #[error("{0:?}: give the range as BASE..HEAD")]
    BadRange(String),
    /// The range names no commits to state anything about (`attest`, `attribution`).
    #[error("nothing to state about the range: {0}")]
    NoRange(String),
    #[error("the current directory: {0}")]
    CurrentDir(#[source] std::io::Error),
    #[error(transparent)]
    Commits(#[from] CommitsError),
    #[error(transparent)]
    Repository(#[from] SnapshotError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

kinds!(CiError {
    CiError::BadRange(_) | CiError::NoRange(_) => Input,
    CiError::CurrentDir(_) => Io,
    CiError::Commits(CommitsError::BadBaseline(_) | CommitsError::BadRevision(_)) => Input,
    CiError::Commits(CommitsError::Repository(e)) => e.kind(),
    CiError::Repository(e) => e.kind(),
    CiError::Store(e) => e.kind(),
});

/// One commit of the range and the sessions that saw it made.
#[derive(Debug, Clone, Serialize)]
pub struct CiCommit {
    pub commit: String,
    pub tree: String,
    pub summary: String,
    /// The sessions whose `git.commits` list this commit (with this tree).
    pub sessions: Vec<String>,
    /// Why a session of `sessions` does not link it (SPEC §17.3): the commit was not
    /// made while one of its steps ran (it arrived by a fast-forward, a reset or from
    /// another work tree), or `tacho record` wrote the session for an agent whose
    /// sessions tacho's hooks record. Empty when every one links it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_linked_by: Vec<String>,
    /// Some session links it.
    pub linked: bool,
    /// The sessions of `sessions` that link it (made while one of their steps ran, by
    /// hooks): what attribution follows.
    #[serde(skip)]
    pub(crate) linked_by: Vec<String>,
    #[serde(skip)]
    pub(crate) committed_unix: Option<i64>,
}

/// One assured goal of a linked session, against the newest commit it made.
#[derive(Debug, Clone, Serialize)]
pub struct CiGoal {
    pub goal: String,
    pub title: String,
    pub completed: bool,
    /// The commit the receipts were compared with.
    pub commit: String,
    /// The fingerprint of that commit's tree over the goal's source paths.
    pub committed_fingerprint: Option<String>,
    /// Checks whose latest receipt has another fingerprint (or none).
    pub mismatched_checks: Vec<String>,
    /// Each check's latest receipt's proof, as `CHECK: PROOF` (SPEC §12.2, red/green;
    /// `none` for a receipt from before clean rooms).
    pub proofs: Vec<String>,
    /// Files outside the change that differ from the goal's start, as the checks'
    /// latest receipts found them (`M`/`A`/`D PATH`): tests, fixtures, configuration,
    /// check scripts edited after the freeze.
    pub changed_since_freeze: Vec<String>,
    /// The contract's `changePaths` (what "without the change" put back).
    pub change_paths: Vec<String>,
    /// Each revision or replacement of the goal's contract since it was first frozen,
    /// newest first: its correction and what it weakened (SPEC §12.3).
    pub revisions: Vec<String>,
    /// Each check's latest receipt, against the committed tree.
    pub checks: Vec<CiCheck>,
    /// The contract's checks with no receipt at all.
    pub unchecked: Vec<String>,
    /// With `--rerun`: each check run again by CI, against its latest receipt.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rerun: Vec<crate::ci_rerun::CiRerun>,
    /// Completed, and every check's receipt matches the committed tree.
    pub ok: bool,
    pub reason: String,
}

/// One check of an assured goal: its latest receipt, and whether it holds for the
/// committed tree.
#[derive(Debug, Clone, Serialize)]
pub struct CiCheck {
    pub check: String,
    /// The command the receipt ran (the frozen contract's).
    pub command: String,
    /// The event that holds the receipt.
    pub receipt_seq: u64,
    pub passed: bool,
    pub exit_code: Option<i64>,
    /// What the receipt proves (SPEC §12.2): `red_green`, `guard`, `unable_to_fail`,
    /// `guard_failed`, `unproven`, or none (a receipt from before clean rooms).
    pub proof: Option<String>,
    /// The exit code of the run without the change, when there was one.
    pub red_exit_code: Option<i64>,
    /// Why the receipt proves nothing, when it does not.
    pub problem: Option<String>,
    /// The fingerprint of the files it ran on.
    pub fingerprint: Option<String>,
    /// That fingerprint is the committed tree's.
    pub matches_commit: bool,
    pub contract_digest: String,
}

impl CiCheck {
    /// The receipt holds for the committed tree: passed, proves something, and ran on
    /// exactly the committed files.
    pub fn holds(&self) -> bool {
        self.passed && self.problem.is_none() && self.matches_commit
    }
}

/// One linked session.
#[derive(Debug, Clone, Serialize)]
pub struct CiSession {
    pub session: String,
    pub agent: Option<String>,
    pub title: Option<String>,
    /// Every checksum, chain step and sequence number of its log checks out.
    pub verified: bool,
    pub findings: Vec<String>,
    /// Whether, and by whom, its head is signed (SPEC §16.3).
    pub signature: SignatureStatus,
    pub risk_level: Option<String>,
    pub risk_score: Option<u32>,
    /// The factors of its risk assessment, with the paths each is about.
    pub risk_factors: Vec<tacho_projections::RiskFactor>,
    /// Its workspace: what the factors' paths are relative to.
    pub workspace: Option<String>,
    /// Its log's head when verified: how many events, and the chain value after them.
    pub events: u64,
    pub chain_head: Option<String>,
    pub goals: Vec<CiGoal>,
    /// The commits of the range it made, newest first.
    pub commits: Vec<String>,
    /// `tacho record` wrote it (its `session.start`'s source): what the agent reported,
    /// not what tacho's hooks saw.
    pub agent_reported: bool,
    /// When its steps ran (ns since the epoch, start and end): the times a commit it
    /// made falls in.
    #[serde(skip)]
    windows: Vec<(i64, i64)>,
}

/// One rule the range breaks, and the commit or session it is about.
#[derive(Debug, Clone, Serialize)]
pub struct CiFailure {
    /// Which rule it breaks.
    pub rule: CiRule,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub reason: String,
}

impl CiFailure {
    fn range(reason: String) -> Self {
        CiFailure {
            rule: CiRule::Range,
            commit: None,
            session: None,
            reason,
        }
    }

    fn session(rule: CiRule, session: &str, reason: String) -> Self {
        CiFailure {
            rule,
            commit: None,
            session: Some(session.to_owned()),
            reason,
        }
    }
}

/// `tacho ci verify`'s answer.
#[derive(Debug, Clone, Serialize)]
pub struct CiReport {
    pub baseline: String,
    pub head: String,
    pub commits: Vec<CiCommit>,
    pub sessions: Vec<CiSession>,
    /// Each rule the range breaks under the policy.
    pub failures: Vec<CiFailure>,
    pub require_session: bool,
    pub require_signature: bool,
}

impl CiReport {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// Why the range holds no commit to state anything about (a revision that names no
    /// commit, a BASE that is not an ancestor, an empty range), if so.
    pub fn no_range(&self) -> Option<CiError> {
        let why = self
            .failures
            .iter()
            .find(|f| f.rule == CiRule::Range)
            .map(|f| f.reason.clone())
            .or_else(|| {
                self.commits
                    .is_empty()
                    .then(|| "it holds no commit".to_owned())
            })?;
        Some(CiError::NoRange(why))
    }

    pub fn unlinked(&self) -> impl Iterator<Item = &CiCommit> {
        self.commits.iter().filter(|c| !c.linked)
    }
}

/// Whether, and by whom, `session` is signed (against git's allowed signers file of the
/// current directory, SPEC §16.3); a session that cannot be resolved or read is `bad`.
fn session_signature(tacho: &Tacho, session: &str) -> SignatureStatus {
    tacho
        .resolve_session(session)
        .map_err(|e| e.to_string())
        .and_then(|id| tacho.signature(&id).map_err(|e| e.to_string()))
        .unwrap_or_else(|reason| SignatureStatus::Bad { reason })
}

impl Tacho {
    /// Checks the commits of `range` (`BASE..HEAD`) of the repository holding
    /// `workspace` (default: the current directory) under `policy`.
    pub fn ci_verify(
        &self,
        range: &str,
        workspace: Option<&Path>,
        policy: CiPolicy,
    ) -> Result<CiReport, CiError> {
        let Some((base, head)) = range
            .split_once("..")
            .filter(|(b, h)| !b.is_empty() && !h.is_empty() && !h.starts_with('.'))
        else {
            return Err(CiError::BadRange(range.to_owned()));
        };
        let ws = match workspace {
            Some(w) => w.to_path_buf(),
            None => std::env::current_dir().map_err(CiError::CurrentDir)?,
        };
        let ws = tacho_git::snapshot::canonical_workspace(&ws)?;
        let walked = commit_range(&ws, base, head)?;
        let mut report = CiReport {
            baseline: walked.baseline,
            head: walked.head,
            commits: Vec::new(),
            sessions: Vec::new(),
            failures: Vec::new(),
            require_session: policy.require_session,
            require_signature: policy.require_signature,
        };
        if let Some(problem) = walked.problem {
            report.failures.push(CiFailure::range(problem));
            return Ok(report);
        }
        let read = self.commit_links()?;
        let links = read.links;
        let mut by_session: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for c in walked.commits {
            let sessions: Vec<String> = links
                .get(&c.commit)
                .map(|l| {
                    l.iter()
                        .filter(|l| l.tree == c.tree)
                        .map(|l| l.session.clone())
                        .collect()
                })
                .unwrap_or_default();
            for s in &sessions {
                let made = by_session.entry(s.clone()).or_default();
                if !made.contains(&c.commit) {
                    made.push(c.commit.clone());
                }
            }
            report.commits.push(CiCommit {
                commit: c.commit,
                tree: c.tree,
                summary: c.summary,
                linked: !sessions.is_empty(),
                sessions,
                not_linked_by: Vec::new(),
                linked_by: Vec::new(),
                committed_unix: c.committed_unix,
            });
        }
        for (session, made) in by_session {
            let rerun = policy.rerun.then_some(report.baseline.as_str());
            let s = self.ci_session(&ws, session, made, rerun);
            report.sessions.push(s);
        }
        for c in &mut report.commits {
            for s in report
                .sessions
                .iter()
                .filter(|s| c.sessions.contains(&s.session))
            {
                match not_made_by(c, s) {
                    Some(why) => c.not_linked_by.push(why),
                    None => c.linked_by.push(s.session.clone()),
                }
            }
            c.linked = c.sessions.len() > c.not_linked_by.len();
        }
        // A damaged log may hide the links it held: the commits it made would show as
        // unlinked. Tampered evidence fails the range whichever commits it made.
        for (session, why) in read.damaged {
            if !report.sessions.iter().any(|s| s.session == session) {
                report.failures.push(CiFailure::session(
                    CiRule::SessionDamaged,
                    &session,
                    format!("session {session} does not verify (its commits may show as unlinked): {why}"),
                ));
            }
        }
        let failures = policy_failures(&report, policy);
        report.failures.extend(failures);
        Ok(report)
    }

    /// One linked session; with `rerun` (the range's base) its goals' checks are run
    /// again.
    fn ci_session(
        &self,
        ws: &Path,
        session: String,
        commits: Vec<String>,
        rerun: Option<&str>,
    ) -> CiSession {
        let mut s = CiSession {
            signature: session_signature(self, &session),
            session,
            agent: None,
            title: None,
            verified: false,
            findings: Vec::new(),
            risk_level: None,
            risk_score: None,
            risk_factors: Vec::new(),
            workspace: None,
            events: 0,
            chain_head: None,
            goals: Vec::new(),
            commits,
            agent_reported: false,
            windows: Vec::new(),
        };
        if let Ok(Some(first)) = self.log().first_event(&s.session)
            && let tacho_schema::EventBody::SessionStart(start) = &first.body
        {
            s.agent_reported = start
                .source
                .as_deref()
                .is_some_and(|src| src.starts_with(crate::ingest::RECORD_SOURCE));
        }
        // Evidence for others: folded from the log itself, never from a stored
        // projection or cached diff the watched agent could have rewritten.
        let evidence = self.evidence_graph(&s.session).ok();
        if let Some(g) = &evidence {
            let last = g.ended_unix_ns.or(g.last_event_unix_ns).unwrap_or(i64::MAX);
            s.windows = g
                .steps
                .iter()
                .enumerate()
                .map(|(i, st)| {
                    let next = g.steps.get(i + 1).map(|n| n.started_unix_ns);
                    let end = st.finished_unix_ns.or(next).unwrap_or(last);
                    (st.started_unix_ns, end.max(st.started_unix_ns))
                })
                .collect();
        }
        match self.log().verify_session(&s.session, true) {
            Ok(r) => {
                s.findings = r.findings.iter().map(|f| f.message.clone()).collect();
                s.verified = s.findings.is_empty();
                s.events = r.next_seq;
                s.chain_head = Some(tacho_store::hex(&r.chain));
            }
            Err(e) => s.findings.push(e.to_string()),
        }
        if !s.verified {
            return s; // nothing a damaged log says is evidence
        }
        let id = match self.resolve_session(&s.session) {
            Ok(id) => id,
            Err(e) => {
                s.findings.push(e.to_string());
                s.verified = false;
                return s;
            }
        };
        // Kept for its goals below: folded once.
        let mut own_graph = None;
        match evidence {
            Some(g) => {
                let summary = tacho_projections::SessionSummary::from_graph(&g);
                let crate::SessionGraph { risk, graph } = crate::SessionGraph::of(g);
                own_graph = Some(graph);
                s.agent = summary.agent;
                s.title = summary.title;
                s.risk_level = Some(risk.level.as_str().to_owned());
                s.risk_score = Some(risk.score);
                s.risk_factors = risk.factors;
                s.workspace = summary.workspace;
            }
            None => s
                .findings
                .push(format!("session {}: its graph cannot be read", s.session)),
        }
        let newest = s.commits.first().cloned().unwrap_or_default();
        // The session's goals and those of the sessions it continues: an agent that
        // ended its session from its shell leaves its goals to the continuation.
        for part in self.continued_chain(id.as_str()) {
            let part = crate::SessionId::resolved(part);
            // Who made each act on a goal (the agent from inside a call, or not).
            let graph = match own_graph.take_if(|g| g.session == part.as_str()) {
                Some(g) => Some(g),
                None => self.evidence_graph(part.as_str()).ok(),
            };
            let by = |seq: u64| -> String {
                let Some(g) = &graph else {
                    return "by whom unknown (the session's graph cannot be read)".into();
                };
                let call = g
                    .goals
                    .events
                    .iter()
                    .find(|e| e.seq == seq)
                    .and_then(|e| e.during_call);
                tacho_projections::asked_by(g, call)
            };
            match self.goals(&part) {
                Ok((_, goals)) => {
                    for g in goals
                        .goals
                        .iter()
                        .filter(|g| g.created.assured && g.revised_by.is_none())
                    {
                        let mut goal = ci_goal(ws, g, &newest);
                        goal.revisions = revisions(&goals, g, &by);
                        if let Some((why, seq)) = &g.cleared {
                            // Set aside, its work never proven: CI cannot tell who
                            // cleared it (an agent's background job can run `goal
                            // clear` after ending its session), so it fails closed.
                            goal.ok = false;
                            goal.reason = format!(
                                "cleared at #{seq} ({why}), {}: an assured goal set aside is not proven, whoever cleared it",
                                by(*seq)
                            );
                        } else if !g.completed {
                            goal.reason = not_completed(g, &by);
                        }
                        if let Some(base) = rerun {
                            goal.rerun = self.rerun_goal(ws, g, &newest, base);
                            let contradicted: Vec<&str> = goal
                                .rerun
                                .iter()
                                .filter(|r| !r.agrees)
                                .map(|r| r.check.as_str())
                                .collect();
                            if !contradicted.is_empty() {
                                goal.ok = false;
                                goal.reason = format!(
                                    "CI contradicts the receipts of {}, whatever the agent's machine said",
                                    contradicted.join(", ")
                                );
                            }
                        }
                        s.goals.push(goal);
                    }
                }
                Err(e) => s.findings.push(e.to_string()),
            }
        }
        s
    }
}

/// The revisions that led to goal `g`, newest first: `REVISION of OLD: "CORRECTION"`,
/// with what each weakened.
fn revisions(
    gs: &tacho_projections::Goals,
    g: &tacho_projections::GoalState,
    by: &dyn Fn(u64) -> String,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut now = g;
    while let Some(old_id) = now.created.revises.as_deref() {
        let Some(old) = gs.goals.iter().find(|x| x.created.goal == old_id) else {
            break;
        };
        let weakened = tacho_projections::weakening(
            old.created.assurance.as_deref(),
            now.created.assurance.as_deref(),
        );
        out.push(format!(
            "revision {} replaced {} {}: \"{}\"{}",
            now.created.revision,
            old.created.goal,
            by(now.created_seq),
            now.created.correction.as_deref().unwrap_or(""),
            if weakened.is_empty() {
                String::new()
            } else {
                format!("; weakened: {}", weakened.join("; "))
            }
        ));
        now = old;
        if out.len() > 100 {
            break;
        }
    }
    out
}

/// Why a goal is not completed, in words: paused as stalled, blocked (and who asked
/// for the block), or just not completed.
fn not_completed(g: &tacho_projections::GoalState, by: &dyn Fn(u64) -> String) -> String {
    if let Some(p) = &g.paused {
        format!("not completed: paused as stalled ({p})")
    } else if let Some(b) = &g.blocked {
        format!(
            "not completed: marked blocked {} ({b})",
            by(g.blocked_seq.unwrap_or(0))
        )
    } else {
        "not completed".into()
    }
}

/// An assured goal against commit `commit`: completed, and each check's latest receipt
/// bound to the fingerprint that commit's tree has.
fn ci_goal(ws: &Path, g: &tacho_projections::GoalState, commit: &str) -> CiGoal {
    let gws = PathBuf::from(&g.created.workspace);
    let edited: Vec<String> = g
        .edited
        .keys()
        .filter_map(|p| relative_path(&gws, p).ok())
        .collect();
    let mut goal = CiGoal {
        goal: g.created.goal.clone(),
        title: g.created.title.clone(),
        completed: g.completed,
        commit: commit.to_owned(),
        committed_fingerprint: None,
        mismatched_checks: Vec::new(),
        proofs: g
            .receipts
            .iter()
            .map(|(check, (_, r))| format!("{check}: {}", r.proof.as_deref().unwrap_or("none")))
            .collect(),
        changed_since_freeze: {
            let mut all: Vec<String> = g
                .receipts
                .values()
                .flat_map(|(_, r)| r.changed_since_freeze.iter().cloned())
                .collect();
            all.sort_by(|a, b| a.get(2..).cmp(&b.get(2..)));
            all.dedup();
            all
        },
        change_paths: g.assurance().map(|a| a.change_paths).unwrap_or_default(),
        revisions: Vec::new(),
        checks: g
            .receipts
            .iter()
            .map(|(check, (seq, r))| CiCheck {
                check: check.clone(),
                command: r.command.clone(),
                receipt_seq: *seq,
                passed: r.passed,
                exit_code: r.exit_code,
                proof: r.proof.clone(),
                red_exit_code: r.red_exit_code,
                problem: tacho_projections::proof_problem(&g.created, r),
                fingerprint: r
                    .fingerprint_after
                    .clone()
                    .or_else(|| r.fingerprint_before.clone()),
                matches_commit: false,
                contract_digest: r.contract_digest.clone(),
            })
            .collect(),
        unchecked: g
            .assurance()
            .map(|a| {
                a.checks
                    .iter()
                    .map(|c| c.id.clone())
                    .filter(|id| !g.receipts.contains_key(id))
                    .collect()
            })
            .unwrap_or_default(),
        rerun: Vec::new(),
        ok: false,
        reason: String::new(),
    };
    let fp = match tree_fingerprint(ws, commit, &g.source_paths(), &edited) {
        Ok(Ok(fp)) => fp,
        Ok(Err(why)) => {
            goal.reason = format!("no fingerprint of the committed tree: {why}");
            return goal;
        }
        Err(e) => {
            goal.reason = format!("no fingerprint of the committed tree: {e}");
            return goal;
        }
    };
    // A receipt that proves nothing (unable to fail, from before clean rooms for a goal
    // with a start snapshot) counts as not passed, whatever it recorded.
    for c in &mut goal.checks {
        c.matches_commit = c.fingerprint.as_deref() == Some(fp.as_str());
        if !c.holds() {
            goal.mismatched_checks.push(c.check.clone());
        }
    }
    goal.committed_fingerprint = Some(fp);
    goal.ok = goal.completed && goal.mismatched_checks.is_empty() && !g.receipts.is_empty();
    goal.reason = if !goal.completed {
        "not completed".into()
    } else if g.receipts.is_empty() {
        "completed without receipts".into()
    } else if goal.mismatched_checks.is_empty() {
        "completed; every receipt matches the committed tree".into()
    } else {
        format!(
            "the committed tree is not what the receipts of {} saw",
            goal.mismatched_checks.join(", ")
        )
    };
    goal
}

/// How far a commit's time may lie outside a step of the session that saw it: Git
/// keeps whole seconds.
const COMMIT_TIME_SLACK_NS: i64 = 2_000_000_000;

/// Why session `s` does not link commit `c` (SPEC §17.3), if so: `tacho record` wrote
/// it for an agent whose sessions tacho's hooks record, or the commit was not made
/// while one of its steps ran (it arrived: a fast-forward, a reset, another work tree,
/// or a commit made between its steps).
fn not_made_by(c: &CiCommit, s: &CiSession) -> Option<String> {
    if s.agent_reported
        && let Some(agent) = s.agent.as_deref()
        && hooked_agent(agent)
    {
        return Some(format!(
            "session {} names {agent}, whose sessions tacho's hooks record, but `tacho record` wrote it: what an agent reports links no commit",
            s.session
        ));
    }
    let Some(t) = c.committed_unix.map(|t| t.saturating_mul(1_000_000_000)) else {
        return Some(format!(
            "commit {} has no committer time to place in session {}",
            short_id(&c.commit),
            s.session
        ));
    };
    let during = s.windows.iter().any(|(a, b)| {
        t >= a.saturating_sub(COMMIT_TIME_SLACK_NS) && t <= b.saturating_add(COMMIT_TIME_SLACK_NS)
    });
    (!during).then(|| {
        format!(
            "commit {} ({}) was not made while a step of session {} ran: it arrived by a fast-forward, a reset or from another work tree, or was made between its steps",
            short_id(&c.commit),
            tacho_schema::time_to_rfc3339(t),
            s.session
        )
    })
}

/// Whether `name` names an agent tacho's hooks record, however it is spelled (case,
/// `_` or spaces for `-`, spaces around).
fn hooked_agent(name: &str) -> bool {
    let norm: String = name
        .trim()
        .chars()
        .map(|c| match c {
            '_' | ' ' | '.' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    tacho_agents::Agent::parse(&norm).is_some()
        || tacho_agents::Agent::ALL
            .iter()
            .any(|a| norm.contains(a.name()) || a.aliases().iter().any(|x| norm.contains(x)))
}

fn short_id(c: &str) -> &str {
    c.get(..12).unwrap_or(c)
}

/// The rules the report breaks: unverified sessions and assured goals always; unlinked
/// commits and unsigned sessions when the policy requires them.
fn policy_failures(r: &CiReport, policy: CiPolicy) -> Vec<CiFailure> {
    let mut f = Vec::new();
    for s in &r.sessions {
        if !s.verified {
            f.push(CiFailure::session(
                CiRule::SessionUnverified,
                &s.session,
                format!(
                    "session {} does not verify: {}",
                    s.session,
                    s.findings
                        .first()
                        .map(String::as_str)
                        .unwrap_or("unreadable")
                ),
            ));
        }
        if policy.require_signature && !matches!(s.signature, SignatureStatus::Signed { .. }) {
            f.push(CiFailure::session(
                CiRule::SessionUnsigned,
                &s.session,
                format!(
                    "session {} is not signed by an allowed key: {}",
                    s.session,
                    s.signature.describe()
                ),
            ));
        }
        for g in s.goals.iter().filter(|g| !g.ok) {
            f.push(CiFailure::session(
                CiRule::GoalNotProven,
                &s.session,
                format!(
                    "assured goal {} of session {}: {}",
                    g.goal, s.session, g.reason
                ),
            ));
        }
    }
    if policy.require_session {
        for c in r.unlinked() {
            f.push(CiFailure {
                rule: CiRule::CommitUnlinked,
                commit: Some(c.commit.clone()),
                session: None,
                reason: if c.not_linked_by.is_empty() {
                    format!("commit {} is linked to no session", c.commit)
                } else {
                    format!(
                        "commit {} is linked to no session: {}",
                        c.commit,
                        c.not_linked_by.join("; ")
                    )
                },
            });
        }
    }
    f
}
