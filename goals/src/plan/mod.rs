//! Goal plans: the Markdown a goal is created from, its assurance contract, the
//! validation rules of BRIEF §3 and the contract digest.
//!
//! A plan is Markdown: a `# title`, a `Goal kind:` line, then `## Acceptance criteria`
//! (`- AC1: ...`), `## Verification plan`, `## Non-goals`, `## Assumed scope`, and
//! `## Assurance contract` holding the assurance JSON in a fenced block. Everything here
//! is pure: the caller supplies the HEAD commit for `{BASELINE}`.

use std::collections::{BTreeMap, BTreeSet};

use tacho_schema::Assurance;

mod digest;
mod markdown;
mod rules;

use crate::secrets::credential;
pub use digest::{
    CONTRACT_DIGEST_VERSION, contract_digest, contract_digest_matches, contract_digest_v1,
    contract_digest_version,
};
use markdown::*;
use rules::*;

/// The rendered plan's limit.
pub const MAX_PLAN_BYTES: usize = 8192;

/// The size a plan should aim to stay under: a larger one is frozen with an advisory
/// (BRIEF §3, "Plan size advisory"); [`MAX_PLAN_BYTES`] stays the hard limit.
pub const ADVISORY_PLAN_BYTES: usize = 7168;

/// A parsed, validated plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub title: String,
    pub kind: String,
    /// Acceptance id → its text, in plan order.
    pub acceptance: Vec<(String, String)>,
    pub assurance: Option<Assurance>,
    /// The plan as submitted, with `{BASELINE}` replaced.
    pub markdown: String,
    /// The commit `{BASELINE}` stood for, when the plan used it.
    pub baseline: Option<String>,
}

/// What a plan is checked against besides itself.
pub struct Submission<'a> {
    pub markdown: &'a str,
    /// The goal's objective (a remote it names may be used as a before-state).
    pub objective: &'a str,
    /// The workspace's HEAD commit, if it has one.
    pub head: Option<&'a str>,
    /// Whether the goal is assured (then the plan must have a contract).
    pub assure: bool,
}

/// A rule a plan breaks: where, and what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    /// 1-based line of the plan, when the rule is about one.
    pub line: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "plan line {l}: {}", self.message),
            None => write!(f, "plan: {}", self.message),
        }
    }
}

impl std::error::Error for PlanError {}

fn err(line: Option<usize>, message: impl Into<String>) -> PlanError {
    PlanError {
        line,
        message: message.into(),
    }
}

/// What the rules for new plans say about one check's command, if it breaks one
/// (`check ID can hide a failure: …`, `check ID is too weak to prove anything: …`, a
/// moving remote before-state). A plan frozen before a rule existed keeps its digest;
/// `goal status` and the completion gate show this as a warning.
pub fn check_command_problem(id: &str, command: &str, objective: &str) -> Option<String> {
    command_problem(id, command, objective)
}

/// Parses and validates a plan. Every rule of BRIEF §3 is checked; the first broken
/// one is returned.
pub fn validate(sub: &Submission<'_>) -> Result<Plan, PlanError> {
    validate_with(sub, true)
}

/// Reads a plan that was frozen already, for checking its contract digest: every rule
/// but the rules about check commands (weak checks, hidden failure, remote
/// before-states), which a plan frozen before them need not keep — it keeps its
/// digest, and that digest is still checked.
pub fn read_frozen(sub: &Submission<'_>) -> Result<Plan, PlanError> {
    validate_with(sub, false)
}

fn validate_with(sub: &Submission<'_>, command_rules: bool) -> Result<Plan, PlanError> {
    // Secrets first: a plan that carries a credential is never stored.
    for (i, line) in sub.markdown.lines().enumerate() {
        if let Some(what) = credential(line) {
            return Err(err(
                Some(i + 1),
                format!(
                    "looks like it contains a credential ({what}); remove it and refer to it by name instead"
                ),
            ));
        }
    }
    let markdown = match sub.markdown.contains("{BASELINE}") {
        false => sub.markdown.to_owned(),
        true => match sub.head {
            Some(h) => sub.markdown.replace("{BASELINE}", h),
            None => {
                return Err(err(
                    None,
                    "the plan uses {BASELINE}, but the workspace has no HEAD commit to stand for it; commit first",
                ));
            }
        },
    };
    let baseline = sub
        .markdown
        .contains("{BASELINE}")
        .then(|| sub.head.unwrap_or_default().to_owned());
    let size = markdown.len();
    if size > MAX_PLAN_BYTES {
        return Err(err(
            None,
            format!(
                "the rendered plan is {size} bytes, {} over the limit of {MAX_PLAN_BYTES}: remove at least {} bytes and resubmit the whole plan (plans are never truncated)",
                size - MAX_PLAN_BYTES,
                size - MAX_PLAN_BYTES
            ),
        ));
    }
    let sections = sections(&markdown);
    let title = markdown
        .lines()
        .find_map(|l| l.strip_prefix("# "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| err(Some(1), "the plan needs a title: a first heading `# ...`"))?
        .to_owned();
    let kind = markdown
        .lines()
        .find_map(|l| l.strip_prefix("Goal kind:"))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| err(None, "the plan needs a `Goal kind: ...` line"))?
        .to_owned();
    let (ac_line, ac_text) = sections
        .get("acceptance criteria")
        .ok_or_else(|| err(None, "the plan needs a `## Acceptance criteria` section"))?;
    let mut acceptance: Vec<(String, String)> = Vec::new();
    for (k, l) in ac_text.lines().enumerate() {
        let Some(item) = l.trim_start().strip_prefix("- ") else {
            continue;
        };
        let line = ac_line + 1 + k;
        let (id, text) = item.split_once(':').ok_or_else(|| {
            err(
                Some(line),
                "an acceptance criterion reads `- AC1: what must hold`",
            )
        })?;
        let id = id.trim().trim_matches('*').to_owned();
        if !is_acceptance_id(&id) {
            return Err(err(
                Some(line),
                format!("`{id}` is not an acceptance id like AC1"),
            ));
        }
        if acceptance.iter().any(|(a, _)| *a == id) {
            return Err(err(Some(line), format!("acceptance id {id} appears twice")));
        }
        acceptance.push((id, text.trim().to_owned()));
    }
    if acceptance.is_empty() {
        return Err(err(
            Some(*ac_line),
            "the acceptance criteria list no `- AC1: ...` item",
        ));
    }
    for s in ["verification plan", "non-goals", "assumed scope"] {
        if !sections.contains_key(s) {
            return Err(err(
                None,
                format!("the plan needs a `## {}` section", heading(s)),
            ));
        }
    }
    let assurance = match sections.get("assurance contract") {
        None if sub.assure => {
            return Err(err(
                None,
                "an assured goal needs an `## Assurance contract` section with the assurance JSON",
            ));
        }
        None => None,
        Some((line, text)) => Some(parse_assurance(*line, text)?),
    };
    if let Some(a) = &assurance {
        check_assurance(a, &kind, &acceptance, sub.objective, command_rules)?;
    }
    Ok(Plan {
        title,
        kind,
        acceptance,
        assurance,
        markdown,
        baseline,
    })
}
