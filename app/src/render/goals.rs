//! Goal assurance in text: `goal create`, `check`, `status`, `complete`, `block`,
//! `revise`, `replace` and `resume`.

use crate::{
    BlockRequest, Blocked, Cleared, Completion, Frozen, GoalStatus, Receipt, Replaced, Resumed,
    Revised,
};

use super::prefix;

/// Lines collected into one text.
#[derive(Default)]
struct Lines(String);

impl Lines {
    fn put(&mut self, s: impl AsRef<str>) {
        self.0.push_str(s.as_ref());
        self.0.push('\n');
    }
    /// The plan size advisory, if any.
    fn advisory(&mut self, advisory: Option<&String>) {
        if let Some(a) = advisory {
            self.put(format!("  advisory: {a}"));
        }
    }
    /// What a fingerprint covered beyond the plan.
    fn disclose(&mut self, additional: &[String], external: &[String], labels: [&str; 2]) {
        if !additional.is_empty() {
            self.put(format!("{}: {}", labels[0], additional.join(", ")));
        }
        if !external.is_empty() {
            self.put(format!("{}: {}", labels[1], external.join(", ")));
        }
    }
}

/// `goal create`.
pub fn frozen(v: &Frozen) -> String {
    let mut o = Lines::default();
    o.put(format!(
        "goal {} frozen in session {}: {} (contract {})",
        v.goal,
        v.session,
        v.title,
        prefix(&v.contract_digest, 16)
    ));
    match &v.check_commands {
        Some(cs) => {
            for c in cs {
                o.put(format!("  check {}: {}", c.id, c.command));
            }
        }
        None => o.put("  no assurance contract: completion follows the plain rule"),
    }
    for a in &v.proof_advice {
        o.put(format!("  advice: {a}"));
    }
    o.advisory(v.advisory.as_ref());
    o.0
}

/// `goal replace`.
pub fn replaced(v: &Replaced) -> String {
    let mut o = Lines::default();
    o.put(format!(
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
    ));
    o.advisory(v.advisory.as_ref());
    o.0
}

/// `goal revise`.
pub fn revised(v: &Revised) -> String {
    let mut o = Lines::default();
    o.put(format!(
        "goal {} (revision {}) replaces {}: contract {} → {}; earlier receipts cannot satisfy it",
        v.goal,
        v.revision,
        v.revises,
        prefix(&v.previous_digest, 16),
        prefix(&v.contract_digest, 16)
    ));
    o.advisory(v.advisory.as_ref());
    o.0
}

/// `goal clear`.
pub fn cleared(v: &Cleared) -> String {
    format!(
        "goal {} cleared ({}): it holds no one any more; the record keeps it (#{})\n",
        v.goal, v.reason, v.seq
    )
}

/// `goal resume`.
pub fn resumed(v: &Resumed) -> String {
    format!(
        "goal {} resumed (it was paused: {})\n",
        v.goal, v.was_paused
    )
}

/// `goal block`, with what was asked.
pub fn blocked(v: &Blocked, req: &BlockRequest) -> String {
    format!(
        "goal {} blocked ({}): {} — needs: {}\n",
        v.goal, req.kind, req.reason, req.required_change
    )
}

/// `goal check`: the verdict and what the receipt binds.
pub fn receipt(v: &Receipt) -> String {
    let r = &v.receipt;
    let mut o = Lines::default();
    // A run that exited 0 and still failed says why first, not "failed (exit 0)".
    let why = (!v.passed && r.exit_code == Some(0) && !r.timed_out).then(|| {
        if let Some(w) = &v.unbound {
            format!("not in the frozen environment: {w}")
        } else if let Some(w) = &r.no_evidence {
            format!("no fresh evidence: {w}")
        } else if r.fingerprint_before != r.fingerprint_after {
            "the source changed while it ran".to_string()
        } else if let Some(p) = &r.proof {
            tacho_projections::proof_words(p, r.red_scope.as_deref())
        } else {
            "not passed".to_string()
        }
    });
    o.put(match why {
        Some(why) => format!(
            "check {} failed: {why} (its command exited 0), receipt #{} in session {}",
            r.check, v.seq, v.session
        ),
        None => format!(
            "check {} {} (exit {}{}), receipt #{} in session {}",
            r.check,
            if v.passed { "passed" } else { "failed" },
            r.exit_code.map_or("none".into(), |c| c.to_string()),
            if r.timed_out { ", timed out" } else { "" },
            v.seq,
            v.session
        ),
    });
    if let Some(w) = &v.unbound {
        o.put(format!("  not in the frozen environment: {w}"));
    }
    if let Some(w) = &r.no_evidence {
        o.put(format!("  no fresh evidence: {w}"));
    } else if r.fingerprint_before != r.fingerprint_after {
        o.put("  the source changed while the check ran");
    }
    if r.clean_room {
        o.put("  ran in a clean room: the fingerprinted files only, outside the workspace");
    }
    if let Some(p) = &r.proof {
        let reused = r
            .red_reused
            .map(|s| format!(" (run without the change reused from receipt #{s})"))
            .unwrap_or_default();
        o.put(format!(
            "  proof: {}{reused}",
            tacho_projections::proof_words(p, r.red_scope.as_deref())
        ));
        if let Some(n) = &r.proof_note {
            o.put(format!("  why: {n}"));
        }
    }
    if !r.changed_since_freeze.is_empty() {
        o.put(format!(
            "  changed outside the change since the freeze: {}",
            r.changed_since_freeze.join(", ")
        ));
    }
    o.disclose(
        &v.additional_paths,
        &v.external_paths_left_out,
        ["  also fingerprinted", "  left out (outside the workspace)"],
    );
    o.0
}

/// `goal complete`: the gate's answer.
pub fn completion(v: &Completion) -> String {
    let mut o = Lines::default();
    if v.accepted {
        o.put(format!("goal {} completed: {}", v.goal, v.reason));
    } else {
        o.put(format!(
            "completion of goal {} refused: {}",
            v.goal, v.reason
        ));
        for open in &v.open {
            o.put(format!("  {open}"));
        }
    }
    o.0
}

/// Where `goal status` says the checks run (SPEC §12.2).
fn environment_line(v: &GoalStatus) -> String {
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

/// `goal status`: each check's state, the source, the environment, and whether the
/// goal can complete.
pub fn status(v: &GoalStatus) -> String {
    let mut o = Lines::default();
    o.put(format!("Goal {}: {}", v.goal, v.title));
    if !v.assured {
        o.put("No assurance contract: this goal's completion is not earned by checks.");
    }
    o.put(format!("Contract: {}", v.contract_digest));
    // A goal without checks binds no receipt to its source: no fingerprint to show.
    let fingerprinted = v.assured || !v.checks.is_empty();
    match &v.fingerprint {
        _ if !fingerprinted => {}
        Some(fp) => o.put(format!("Source now: {}", prefix(fp, 16))),
        None => o.put(format!(
            "Source now: no fresh evidence ({})",
            v.no_fresh_evidence.as_deref().unwrap_or_default()
        )),
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
        o.put(format!("  {:<8} {}{why}{evidence}", c.state, c.id));
        o.put(format!("           purpose: {}", c.purpose));
        o.put(format!("           command: {}", c.command));
        if c.guard {
            o.put("           guard: must pass without the change and with it");
        }
        if let Some(p) = &c.proof_words {
            o.put(format!("           proof: {p}"));
        } else if c.clean_room == Some(false) {
            o.put("           proof: none (ran in the workspace, before clean rooms)");
        }
        if !c.changed_since_freeze.is_empty() {
            o.put(format!(
                "           changed since the freeze (outside the change): {}",
                c.changed_since_freeze.join(", ")
            ));
        }
        if !c.recent_evidence.is_empty() {
            let seqs: Vec<String> = c.recent_evidence.iter().map(|s| format!("#{s}")).collect();
            o.put(format!("           recent receipts: {}", seqs.join(", ")));
        }
    }
    if v.assured {
        o.put(environment_line(v));
    }
    if let Some(c) = v.checks.first() {
        o.put(format!("Source paths: {}", c.source_paths.join(", ")));
        if v.assured {
            o.put(match v.change_paths.is_empty() {
                true => "Change paths: none named (a run without the change puts back every source path as at the goal's start)".to_string(),
                false => format!("Change paths: {}", v.change_paths.join(", ")),
            });
        }
        for s in &c.sources {
            o.put(format!("Source ({}): {}", s.role, s.reference));
        }
    }
    if fingerprinted {
        o.disclose(
            &v.additional_paths,
            &v.external_paths_left_out,
            [
                "Also fingerprinted (reported by edits)",
                "Left out (outside the workspace)",
            ],
        );
    }
    if let Some(r) = &v.revises {
        o.put(format!(
            "Revision {} of {r} (correction: {})",
            v.revision,
            v.correction.as_deref().unwrap_or("-")
        ));
    }
    if let Some(n) = &v.revised_by {
        o.put(format!(
            "Replaced by revision {n}: its receipts do not count here."
        ));
    }
    if let Some(c) = &v.cleared {
        o.put(format!("Cleared by the user: {c}"));
    }
    if let Some(b) = &v.blocked {
        o.put(format!("Blocked: {b}"));
    }
    if let Some(p) = &v.paused {
        o.put(format!("Paused: {p}"));
    }
    for w in &v.warnings {
        o.put(format!("Warning: {w}"));
    }
    for d in &v.changed_diffs {
        match &d.unified {
            Some(u) => {
                o.put(format!(
                    "Changed since the freeze, outside the change: {}",
                    d.path
                ));
                for l in u.lines() {
                    o.put(format!("  {l}"));
                }
            }
            None => o.put(format!(
                "Changed since the freeze, outside the change: {} (not text)",
                d.path
            )),
        }
    }
    if let Some(n) = &v.stop_not_refusable {
        o.put(format!("Not enforced: {n}."));
    }
    o.put(if v.completed {
        "Completed.".to_string()
    } else if v.can_complete {
        format!("Can complete: {}.", v.completion_reason)
    } else {
        format!("Cannot complete yet: {}.", v.completion_reason)
    });
    o.0
}
