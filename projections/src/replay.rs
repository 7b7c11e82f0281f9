//! The consistency checks of replay verification that look at what events mean:
//! every tool result has its call, every call its result (or is reported as
//! interrupted), steps start and finish in balance, the session starts once and ends
//! at most once. (Checksums, the chain and sequence numbers are the engine's checks.)

use std::collections::BTreeMap;

use serde::Serialize;
use tacho_schema::{Event, EventBody};

/// Which rule a finding breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayRule {
    /// Tool calls and results pair up.
    Pairing,
    /// Steps start and finish in balance.
    Steps,
    /// One start, first; at most one end, last.
    Lifecycle,
    /// Every goal receipt agrees with the frozen plan of its goal: goal, revision,
    /// contract digest, check id and command; a passed one, with the environment and
    /// programs frozen with the goal.
    Evidence,
}

/// One problem, at the event where it shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayFinding {
    pub seq: u64,
    pub rule: ReplayRule,
    pub message: String,
}

/// A call that never got a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Interrupted {
    pub seq: u64,
    pub call_id: String,
    pub tool: String,
}

/// The fold behind `session replay --mode verify`'s semantic checks.
#[derive(Debug, Clone, Default)]
pub struct ReplayCheck {
    findings: Vec<ReplayFinding>,
    /// call id → (seq, tool, result seen)
    calls: BTreeMap<String, (u64, String, bool)>,
    /// the open step: (number, seq of its start)
    open_step: Option<(u64, u64)>,
    ended: bool,
    events: u64,
    tool_results: u64,
    /// goal id → (revision, contract digest, check id → command), as frozen.
    goals: BTreeMap<String, (u32, String, BTreeMap<String, String>)>,
    /// goal id → its frozen environment binding (digest and programs; SPEC §12.2).
    bindings: BTreeMap<String, tacho_schema::GoalCreated>,
    receipts: u64,
}

/// What the checks found once every event is in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    pub events: u64,
    /// Tool results checked against their calls: all of them.
    pub tool_results_checked: u64,
    /// Goal receipts checked against their frozen plans: all of them.
    pub receipts_checked: u64,
    pub findings: Vec<ReplayFinding>,
    /// Calls without a result in a session that ended (reported, not a fault).
    pub interrupted: Vec<Interrupted>,
    /// Calls without a result in a session still running.
    pub pending: Vec<Interrupted>,
}

impl ReplayCheck {
    pub fn new() -> Self {
        Self::default()
    }

    fn find(&mut self, seq: u64, rule: ReplayRule, message: String) {
        self.findings.push(ReplayFinding { seq, rule, message });
    }

    /// Folds in the event with sequence number `seq`.
    pub fn apply(&mut self, seq: u64, ev: &Event) {
        self.events += 1;
        if self.ended && !matches!(ev.body, EventBody::SessionEnd(_)) {
            self.find(
                seq,
                ReplayRule::Lifecycle,
                format!("{} after session.end", ev.body.kind_name()),
            );
        }
        match &ev.body {
            EventBody::SessionStart(_) if seq != 0 => self.find(
                seq,
                ReplayRule::Lifecycle,
                "session.start that is not the first event".into(),
            ),
            EventBody::SessionEnd(_) => {
                if self.ended {
                    self.find(seq, ReplayRule::Lifecycle, "a second session.end".into());
                }
                self.ended = true;
                if let Some((n, at)) = self.open_step.take() {
                    self.find(
                        seq,
                        ReplayRule::Steps,
                        format!("step {n} (started at event {at}) never finished"),
                    );
                }
            }
            EventBody::StepStart(s) => {
                if let Some((n, at)) = self.open_step {
                    self.find(
                        seq,
                        ReplayRule::Steps,
                        format!("step {} starts while step {n} (started at event {at}) has not finished", s.step),
                    );
                }
                self.open_step = Some((s.step, seq));
            }
            EventBody::StepFinish(s) => match self.open_step.take() {
                Some((n, _)) if n == s.step => {}
                Some((n, at)) => self.find(
                    seq,
                    ReplayRule::Steps,
                    format!(
                        "step {} finishes, but the open step is {n} (started at event {at})",
                        s.step
                    ),
                ),
                None => self.find(
                    seq,
                    ReplayRule::Steps,
                    format!("step {} finishes without having started", s.step),
                ),
            },
            EventBody::ToolCall(c) => {
                if let Some((first, _, _)) = self.calls.get(&c.call_id) {
                    let first = *first;
                    self.find(
                        seq,
                        ReplayRule::Pairing,
                        format!("call id {} was already used at event {first}", c.call_id),
                    );
                } else {
                    self.calls
                        .insert(c.call_id.clone(), (seq, c.tool.clone(), false));
                }
            }
            EventBody::ToolResult(r) => {
                self.tool_results += 1;
                match self.calls.get_mut(&r.call_id) {
                    None => self.find(
                        seq,
                        ReplayRule::Pairing,
                        format!("tool result for call {} that was never made", r.call_id),
                    ),
                    Some((_, _, seen)) if *seen => self.find(
                        seq,
                        ReplayRule::Pairing,
                        format!("a second result for call {}", r.call_id),
                    ),
                    Some((_, _, seen)) => *seen = true,
                }
            }
            EventBody::GoalCreated(g) => {
                let checks = g
                    .assurance
                    .as_deref()
                    .and_then(tacho_schema::Assurance::from_json)
                    .map(|a| a.checks.into_iter().map(|c| (c.id, c.command)).collect())
                    .unwrap_or_default();
                self.goals.insert(
                    g.goal.clone(),
                    (g.revision, g.contract_digest.clone(), checks),
                );
                self.bindings.insert(
                    g.goal.clone(),
                    tacho_schema::GoalCreated {
                        environment_digest: g.environment_digest.clone(),
                        programs: g.programs.clone(),
                        ..tacho_schema::GoalCreated::default()
                    },
                );
            }
            EventBody::GoalCheckRun(r) => {
                self.receipts += 1;
                let problem = match self.goals.get(&r.goal) {
                    None => Some(format!(
                        "receipt of check {} for goal {}, which this session never created",
                        r.check, r.goal
                    )),
                    Some((revision, digest, _))
                        if *revision != r.revision || *digest != r.contract_digest =>
                    {
                        Some(format!(
                            "receipt of check {} names revision {} and contract {}, but goal {} froze revision {revision} with contract {digest}",
                            r.check, r.revision, r.contract_digest, r.goal
                        ))
                    }
                    Some((_, _, checks)) => match checks.get(&r.check) {
                        None => Some(format!(
                            "receipt of check {}, which the frozen plan of goal {} does not declare",
                            r.check, r.goal
                        )),
                        Some(command) if *command != r.command => Some(format!(
                            "receipt of check {} ran {:?}, but the frozen plan's command is {command:?}",
                            r.check, r.command
                        )),
                        // tacho never records a pass for a run outside the frozen
                        // environment: a passed receipt that says so was not its own.
                        Some(_) if r.passed => self
                            .bindings
                            .get(&r.goal)
                            .and_then(|c| crate::goals::environment_mismatch(c, r))
                            .map(|why| {
                                format!("receipt of check {} says passed, but {why}", r.check)
                            }),
                        Some(_) => None,
                    },
                };
                if let Some(p) = problem {
                    self.find(seq, ReplayRule::Evidence, p);
                }
            }
            _ => {}
        }
    }

    /// The report. Calls without results are interrupted when the session ended, and
    /// pending while it runs.
    pub fn finish(&self) -> ReplayReport {
        let open: Vec<Interrupted> = self
            .calls
            .iter()
            .filter(|(_, (_, _, seen))| !seen)
            .map(|(id, (seq, tool, _))| Interrupted {
                seq: *seq,
                call_id: id.clone(),
                tool: tool.clone(),
            })
            .collect();
        let mut open = open;
        open.sort_by_key(|i| i.seq);
        let (interrupted, pending) = if self.ended {
            (open, Vec::new())
        } else {
            (Vec::new(), open)
        };
        ReplayReport {
            events: self.events,
            tool_results_checked: self.tool_results,
            receipts_checked: self.receipts,
            findings: self.findings.clone(),
            interrupted,
            pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tacho_schema::{
        EndReason, SessionEnd, SessionStart, StepFinish, StepStart, ToolCall, ToolResult,
    };

    #[test]
    fn receipts_must_agree_with_their_frozen_plan() {
        use tacho_schema::{GoalCheckRun, GoalCreated};
        let goal = EventBody::GoalCreated(GoalCreated {
            goal: "g".into(),
            revision: 1,
            contract_digest: "d".into(),
            assurance: Some(r#"{"version":1,"sourcePaths":["."],"checks":[{"id":"c","acceptanceIds":["AC1"],"command":"make c","purpose":"p"}]}"#.into()),
            ..GoalCreated::default()
        });
        let receipt = |goal: &str, check: &str, command: &str, digest: &str| {
            EventBody::GoalCheckRun(GoalCheckRun {
                goal: goal.into(),
                revision: 1,
                check: check.into(),
                command: command.into(),
                contract_digest: digest.into(),
                ..GoalCheckRun::default()
            })
        };
        let r = run(vec![
            EventBody::SessionStart(SessionStart::default()),
            goal,
            receipt("g", "c", "make c", "d"),
            receipt("g", "c", "true", "d"),
            receipt("g", "x", "make c", "d"),
            receipt("g", "c", "make c", "other"),
            receipt("h", "c", "make c", "d"),
        ]);
        assert_eq!(r.receipts_checked, 5);
        let found: Vec<(u64, ReplayRule)> = r.findings.iter().map(|f| (f.seq, f.rule)).collect();
        assert_eq!(
            found,
            [3, 4, 5, 6].map(|s| (s, ReplayRule::Evidence)),
            "{:?}",
            r.findings
        );
    }

    #[test]
    fn a_passed_receipt_must_carry_the_frozen_environment() {
        use tacho_schema::{GoalCheckRun, GoalCreated};
        let goal = EventBody::GoalCreated(GoalCreated {
            goal: "g".into(),
            revision: 1,
            contract_digest: "d".into(),
            assurance: Some(r#"{"version":1,"sourcePaths":["."],"checks":[{"id":"c","acceptanceIds":["AC1"],"command":"make c","purpose":"p","environment":"e"}]}"#.into()),
            environment_digest: Some("e1".into()),
            programs: vec!["aa  /usr/bin/make".into()],
            ..GoalCreated::default()
        });
        let receipt = |env: &str, program: &str, passed: bool| {
            EventBody::GoalCheckRun(GoalCheckRun {
                goal: "g".into(),
                revision: 1,
                check: "c".into(),
                command: "make c".into(),
                contract_digest: "d".into(),
                environment_digest: Some(env.into()),
                programs: vec![program.into()],
                passed,
                ..GoalCheckRun::default()
            })
        };
        let r = run(vec![
            EventBody::SessionStart(SessionStart::default()),
            goal,
            receipt("e1", "aa  /usr/bin/make", true),
            receipt("e2", "aa  /usr/bin/make", true),
            receipt("e1", "bb  /tmp/fake/make", true),
            // Not passed: what tacho itself records for a run in another environment.
            receipt("e1", "bb  /tmp/fake/make", false),
        ]);
        let found: Vec<(u64, ReplayRule)> = r.findings.iter().map(|f| (f.seq, f.rule)).collect();
        assert_eq!(
            found,
            [3, 4].map(|s| (s, ReplayRule::Evidence)),
            "{:?}",
            r.findings
        );
    }

    fn run(bodies: Vec<EventBody>) -> ReplayReport {
        let mut c = ReplayCheck::new();
        for (i, body) in bodies.into_iter().enumerate() {
            c.apply(
                i as u64,
                &Event {
                    session: "s".into(),
                    time_unix_ns: 0,
                    body,
                },
            );
        }
        c.finish()
    }
    fn call(id: &str) -> EventBody {
        EventBody::ToolCall(ToolCall {
            call_id: id.into(),
            tool: "read".into(),
            ..Default::default()
        })
    }
    fn result(id: &str) -> EventBody {
        EventBody::ToolResult(ToolResult {
            call_id: id.into(),
            ..Default::default()
        })
    }
    fn step(n: u64) -> EventBody {
        EventBody::StepStart(StepStart {
            step: n,
            ..Default::default()
        })
    }
    fn done(n: u64) -> EventBody {
        EventBody::StepFinish(StepFinish {
            step: n,
            reason: None,
        })
    }
    fn start() -> EventBody {
        EventBody::SessionStart(SessionStart::default())
    }
    fn end() -> EventBody {
        EventBody::SessionEnd(SessionEnd {
            reason: EndReason::Completed,
            message: None,
        })
    }

    #[test]
    fn a_clean_session_has_no_findings() {
        let r = run(vec![
            start(),
            step(1),
            call("a"),
            result("a"),
            done(1),
            end(),
        ]);
        assert!(r.findings.is_empty());
        assert_eq!(r.tool_results_checked, 1);
    }

    #[test]
    fn every_result_is_paired_and_every_call_accounted_for() {
        let r = run(vec![
            start(),
            call("a"),
            result("a"),
            result("a"),
            result("ghost"),
            call("b"),
            end(),
        ]);
        let msgs: Vec<_> = r
            .findings
            .iter()
            .map(|f| (f.seq, f.message.as_str()))
            .collect();
        assert_eq!(
            msgs,
            vec![
                (3, "a second result for call a"),
                (4, "tool result for call ghost that was never made")
            ]
        );
        assert_eq!(r.tool_results_checked, 3);
        assert_eq!(r.interrupted.len(), 1);
        assert_eq!(r.interrupted[0].call_id, "b");
        let r = run(vec![start(), call("b")]);
        assert_eq!(r.pending.len(), 1);
        assert!(r.interrupted.is_empty());
    }

    #[test]
    fn steps_must_balance() {
        let r = run(vec![
            start(),
            step(1),
            step(2),
            done(3),
            done(4),
            step(5),
            end(),
            call("x"),
        ]);
        let msgs: Vec<_> = r.findings.iter().map(|f| f.seq).collect();
        assert_eq!(msgs, vec![2, 3, 4, 6, 7]);
    }
}
