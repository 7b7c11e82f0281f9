//! What a reviewer should look at in a range, file by file (SPEC §17.4): the findings
//! of `tacho ci verify`, each placed at a file and lines of the range's head, for SARIF
//! (`--format sarif`, `--sarif FILE`) and for whatever else reads them (`--json`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use tacho_goals::commits::{RangeChange, range_changes};

use crate::Tacho;
use crate::ci::{CiError, CiFailure, CiReport, CiSession};

/// How much a finding matters (SARIF's `level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingLevel {
    /// A rule the range breaks: the pipeline fails on it.
    Error,
    /// Worth a reviewer's look.
    Warning,
    /// For the record.
    Note,
}

impl FindingLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            FindingLevel::Error => "error",
            FindingLevel::Warning => "warning",
            FindingLevel::Note => "note",
        }
    }
}

/// A kind of finding: what SARIF calls a rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FindingRule {
    /// `tacho/ci/<failure>` for a rule of `ci verify`'s policy, `tacho/risk/<factor>`
    /// for a factor of a session's risk assessment.
    pub id: String,
    /// One line: what it is.
    pub title: String,
    /// What a reviewer does about it.
    pub help: String,
}

/// The rules of `ci verify`'s policy (SPEC §17.3): what each failure breaks, with its
/// title and what a reviewer does about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CiRule {
    Range,
    SessionDamaged,
    SessionUnverified,
    SessionUnsigned,
    GoalNotProven,
    CommitUnlinked,
    CheckNotHolding,
}

impl CiRule {
    pub const ALL: &[CiRule] = &[
        CiRule::Range,
        CiRule::SessionDamaged,
        CiRule::SessionUnverified,
        CiRule::SessionUnsigned,
        CiRule::GoalNotProven,
        CiRule::CommitUnlinked,
        CiRule::CheckNotHolding,
    ];

    /// Its id (`tacho/ci/<id>` in SARIF).
    pub fn id(self) -> &'static str {
        match self {
            CiRule::Range => "range",
            CiRule::SessionDamaged => "session_damaged",
            CiRule::SessionUnverified => "session_unverified",
            CiRule::SessionUnsigned => "session_unsigned",
            CiRule::GoalNotProven => "goal_not_proven",
            CiRule::CommitUnlinked => "commit_unlinked",
            CiRule::CheckNotHolding => "check_not_holding",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            CiRule::Range => "The range cannot be checked",
            CiRule::SessionDamaged => {
                "A session's log does not verify, and may hide the commits it made"
            }
            CiRule::SessionUnverified => "A session that made commits of the range does not verify",
            CiRule::SessionUnsigned => {
                "A session that made commits of the range is not signed by an allowed key"
            }
            CiRule::GoalNotProven => {
                "An assured goal of a session is not proven for the committed tree"
            }
            CiRule::CommitUnlinked => "A commit no recorded session made",
            CiRule::CheckNotHolding => {
                "An assured goal's check whose receipt does not hold for the committed tree"
            }
        }
    }

    pub fn help(self) -> &'static str {
        match self {
            CiRule::Range => {
                "Give the range as BASE..HEAD, BASE an ancestor of HEAD, as the pipeline's checkout has them (fetch the whole history)."
            }
            CiRule::SessionDamaged => {
                "Fetch the session again from its remote (tacho fetch); a log that still fails was changed after it was written."
            }
            CiRule::SessionUnverified => {
                "Nothing a damaged log says is evidence: fetch the session again, or treat its commits as made outside any session."
            }
            CiRule::SessionUnsigned => {
                "Sign sessions with tacho push (git's user.signingkey, gpg.format ssh) and list the key in the allowed signers file of the base branch."
            }
            CiRule::GoalNotProven => {
                "Read the goal's reason: not completed, a receipt that proves nothing, or a committed tree other than the one its checks ran on."
            }
            CiRule::CommitUnlinked => {
                "Find out who made it: a commit made outside any session, or one that arrived by a fast-forward, a reset or another work tree."
            }
            CiRule::CheckNotHolding => {
                "A check that failed, could not fail without the change (unable_to_fail), or ran on other files than the ones committed: run it again (tacho goal check), or rerun it in CI (--rerun)."
            }
        }
    }
}

/// One thing a reviewer should look at, and where.
#[derive(Debug, Clone, Serialize)]
pub struct CiFinding {
    /// The id of its [`FindingRule`].
    pub rule: String,
    pub level: FindingLevel,
    pub message: String,
    /// Repository-relative, `/`-separated; `None` when the range changed no file.
    pub path: Option<String>,
    /// The head's lines it is about (1-based, inclusive); `None` for a deleted file.
    pub lines: Option<(u32, u32)>,
    /// The finding is about the range as a whole, placed at its first changed file.
    pub placed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// `ci verify`'s findings for a range: the report's failures, each unlinked commit,
/// each check that does not hold, and each risk factor of a linked session about a
/// file the range changed.
#[derive(Debug, Clone, Serialize)]
pub struct CiFindings {
    pub baseline: String,
    pub head: String,
    pub passed: bool,
    /// Every rule a finding names, in id order.
    pub rules: Vec<FindingRule>,
    pub findings: Vec<CiFinding>,
}

/// A risk factor at this weight or above is a warning, below it a note: one
/// security-sensitive file (8) is a warning, one file of the API surface (4) a note.
const WARNING_WEIGHT: u32 = 8;

impl Tacho {
    /// The findings of `report` (from [`Tacho::ci_verify`] of the same workspace),
    /// placed at the files and lines of its range.
    pub fn ci_findings(
        &self,
        report: &CiReport,
        workspace: Option<&Path>,
    ) -> Result<CiFindings, CiError> {
        let ws = match workspace {
            Some(w) => w.to_path_buf(),
            None => std::env::current_dir().map_err(CiError::CurrentDir)?,
        };
        let (top, changes) = if report.commits.is_empty() {
            (ws.clone(), Vec::new())
        } else {
            range_changes(&ws, Some(&report.baseline), &report.head)?
        };
        let mut f = findings(report, &top, &changes);
        // GitHub refuses a whole upload in which one result has no location: findings
        // of a range that changed no file go to the first file of the repository.
        let head = if report.commits.is_empty() {
            "HEAD"
        } else {
            report.head.as_str()
        };
        if f.findings.iter().any(|x| x.path.is_none())
            && let Some(first) = tacho_goals::commits::first_file(&ws, head)
        {
            for x in f.findings.iter_mut().filter(|x| x.path.is_none()) {
                x.path = Some(first.clone());
                x.lines = Some((1, 1));
            }
        }
        Ok(f)
    }
}

/// Where a range-wide finding goes: the first file the range changed (and its first
/// changed lines), the head's files first.
fn first_place(changes: &[RangeChange]) -> (Option<String>, Option<(u32, u32)>) {
    let first = changes
        .iter()
        .find(|c| !c.deleted)
        .or_else(|| changes.first());
    match first {
        Some(c) => (Some(c.path.clone()), place_lines(c)),
        None => (None, None),
    }
}

fn place_lines(c: &RangeChange) -> Option<(u32, u32)> {
    if c.deleted {
        return None;
    }
    Some(c.lines.first().copied().unwrap_or((1, 1)))
}

/// `path` as the session whose workspace is `session_ws` names it, relative to the
/// repository's work tree `top`, if it is inside it. A session recorded on another
/// machine (fetched for CI) names a workspace of that machine: its paths are read as
/// relative to the repository's top, where sessions are recorded.
fn repo_path(top: &Path, session_ws: Option<&str>, path: &str) -> Option<String> {
    let p = Path::new(path);
    let ws = session_ws.map(Path::new);
    let full: PathBuf = if p.is_absolute() {
        p.to_path_buf()
    } else {
        ws?.join(p)
    };
    let rel = match full.strip_prefix(top) {
        Ok(rel) => rel,
        Err(_) if ws.is_some_and(|w| w.strip_prefix(top).is_err()) => {
            full.strip_prefix(ws?).ok()?
        }
        Err(_) => return None,
    };
    let mut parts: Vec<String> = Vec::new();
    for c in rel.components() {
        match c {
            std::path::Component::Normal(s) => parts.push(s.to_str()?.to_owned()),
            std::path::Component::CurDir => {}
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

fn findings(report: &CiReport, top: &Path, changes: &[RangeChange]) -> CiFindings {
    let by_path: BTreeMap<&str, &RangeChange> =
        changes.iter().map(|c| (c.path.as_str(), c)).collect();
    let (first_path, first_lines) = first_place(changes);
    let placed = |rule: CiRule, level, message: String, f: &CiFailure| CiFinding {
        rule: format!("tacho/ci/{}", rule.id()),
        level,
        message,
        path: first_path.clone(),
        lines: first_lines,
        placed: true,
        session: f.session.clone(),
        commit: f.commit.clone(),
    };
    let mut out: Vec<CiFinding> = report
        .failures
        .iter()
        .map(|f| placed(f.rule, FindingLevel::Error, f.reason.clone(), f))
        .collect();
    // Unlinked commits the policy did not fail on are still worth a look.
    for c in report.unlinked() {
        if out
            .iter()
            .any(|f| f.commit.as_deref() == Some(c.commit.as_str()))
        {
            continue;
        }
        let f = CiFailure {
            rule: CiRule::CommitUnlinked,
            commit: Some(c.commit.clone()),
            session: None,
            reason: String::new(),
        };
        let why = if c.not_linked_by.is_empty() {
            String::new()
        } else {
            format!(": {}", c.not_linked_by.join("; "))
        };
        out.push(placed(
            CiRule::CommitUnlinked,
            FindingLevel::Warning,
            format!(
                "commit {} ({}) is linked to no session{why}",
                c.commit, c.summary
            ),
            &f,
        ));
    }
    for s in &report.sessions {
        session_findings(s, top, &by_path, &first_path, first_lines, &mut out);
    }
    let mut rules: BTreeMap<String, FindingRule> = BTreeMap::new();
    for f in &out {
        rules.entry(f.rule.clone()).or_insert_with(|| rule(f));
    }
    CiFindings {
        baseline: report.baseline.clone(),
        head: report.head.clone(),
        passed: report.passed(),
        rules: rules.into_values().collect(),
        findings: out,
    }
}

fn session_findings(
    s: &CiSession,
    top: &Path,
    by_path: &BTreeMap<&str, &RangeChange>,
    first_path: &Option<String>,
    first_lines: Option<(u32, u32)>,
    out: &mut Vec<CiFinding>,
) {
    for g in &s.goals {
        for c in g.checks.iter().filter(|c| !c.holds()) {
            let why = if !c.passed {
                match c.exit_code {
                    Some(code) => format!("failed (exit {code})"),
                    None => "failed (no exit code: a signal or a timeout)".into(),
                }
            } else if let Some(p) = &c.problem {
                format!("proves nothing: {p}")
            } else {
                "ran on other files than the committed tree's".into()
            };
            out.push(CiFinding {
                rule: format!("tacho/ci/{}", CiRule::CheckNotHolding.id()),
                level: FindingLevel::Error,
                message: format!(
                    "check {} of assured goal {} ({}), `{}`: {why}",
                    c.check, g.goal, g.title, c.command
                ),
                path: first_path.clone(),
                lines: first_lines,
                placed: true,
                session: Some(s.session.clone()),
                commit: Some(g.commit.clone()),
            });
        }
    }
    for factor in &s.risk_factors {
        let level = if factor.weight >= WARNING_WEIGHT {
            FindingLevel::Warning
        } else {
            FindingLevel::Note
        };
        for p in &factor.paths {
            let Some(rel) = repo_path(top, s.workspace.as_deref(), p) else {
                continue;
            };
            // Only files the range changed: what the pull request holds.
            let Some(change) = by_path.get(rel.as_str()) else {
                continue;
            };
            out.push(CiFinding {
                rule: format!("tacho/risk/{}", factor.id),
                level,
                message: format!(
                    "{rel}: {} (session {}, risk factor {}, weight {})",
                    factor.evidence, s.session, factor.id, factor.weight
                ),
                path: Some(rel.clone()),
                lines: place_lines(change),
                placed: false,
                session: Some(s.session.clone()),
                commit: None,
            });
        }
    }
}

/// The rule a finding names.
fn rule(f: &CiFinding) -> FindingRule {
    if let Some(id) = f.rule.strip_prefix("tacho/ci/")
        && let Some(r) = CiRule::ALL.iter().find(|r| r.id() == id)
    {
        return FindingRule {
            id: f.rule.clone(),
            title: r.title().into(),
            help: r.help().into(),
        };
    }
    let factor = f.rule.strip_prefix("tacho/risk/").unwrap_or(&f.rule);
    let help = tacho_projections::factor_rule(factor).map_or("", |r| r.mitigation);
    FindingRule {
        id: f.rule.clone(),
        title: format!("Risk factor {factor} of a session that made the range"),
        help: help.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_the_repository_and_nothing_outside_it() {
        let top = Path::new("/r");
        assert_eq!(
            repo_path(top, Some("/r/sub"), "a/b.rs").as_deref(),
            Some("sub/a/b.rs")
        );
        assert_eq!(
            repo_path(top, Some("/r"), "/r/x.rs").as_deref(),
            Some("x.rs")
        );
        assert_eq!(repo_path(top, Some("/r"), "/elsewhere/x.rs"), None);
        assert_eq!(repo_path(top, Some("/r"), "../x.rs"), None);
        assert_eq!(repo_path(top, None, "x.rs"), None);
        // A session of another machine: read from the repository's top.
        let ci = Path::new("/ci/clone");
        assert_eq!(
            repo_path(ci, Some("/home/dev/proj"), "/home/dev/proj/src/a.rs").as_deref(),
            Some("src/a.rs")
        );
        assert_eq!(
            repo_path(ci, Some("/home/dev/proj"), "src/a.rs").as_deref(),
            Some("src/a.rs")
        );
        assert_eq!(repo_path(ci, Some("/home/dev/proj"), "/etc/passwd"), None);
    }

    /// SPEC §17.4's table lists exactly the rules there are.
    #[test]
    fn the_specs_rule_table_is_the_rules() {
        let spec = include_str!("../../SPEC.md");
        let section = spec
            .split("### 17.4 ")
            .nth(1)
            .and_then(|s| s.split("\n### ").next())
            .expect("SPEC §17.4");
        let listed: Vec<&str> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `tacho/ci/"))
            .filter_map(|l| l.split('`').next())
            .collect();
        let rules: Vec<&str> = CiRule::ALL.iter().map(|r| r.id()).collect();
        assert_eq!(listed, rules);
    }
}
