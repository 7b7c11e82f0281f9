//! The risk assessment: a deterministic heuristic over a session's execution graph.
//!
//! It is a review aid, not a probability, and not a statement that code is safe. Every
//! point of the score comes from a named factor with its evidence and a mitigation.
//! The factors are one table, [`FACTORS`] (id, weight rule, evidence, mitigation):
//! the assessment runs it, and whatever explains a factor reads it.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use aho_corasick::AhoCorasick;
use serde::Serialize;
use tacho_schema::{EndReason, ToolStatus, VerificationStatus};

use crate::graph::{ErrorNode, ExecutionGraph, GoalMark, StepNode, ToolNode};

/// Always shown with a score.
pub const RISK_DISCLAIMER: &str = "The score is a review aid, not a probability and not a statement that the code is safe: a LOW score on unverified changes still means unverified.";

/// Score bands, as the leading tool draws them so that scores mean the same to users
/// who switch: LOW < 20, MEDIUM < 45, HIGH < 70, CRITICAL >= 70.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum RiskLevel {
    Low,
    Medium,
    High,
    Critical,
}

impl RiskLevel {
    pub fn of_score(score: u32) -> Self {
        match score {
            0..=19 => RiskLevel::Low,
            20..=44 => RiskLevel::Medium,
            45..=69 => RiskLevel::High,
            _ => RiskLevel::Critical,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RiskLevel::Low => "LOW",
            RiskLevel::Medium => "MEDIUM",
            RiskLevel::High => "HIGH",
            RiskLevel::Critical => "CRITICAL",
        }
    }

    /// Parses `low`, `MEDIUM`, ... (for `--risk` filters).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_uppercase().as_str() {
            "LOW" => Some(RiskLevel::Low),
            "MEDIUM" => Some(RiskLevel::Medium),
            "HIGH" => Some(RiskLevel::High),
            "CRITICAL" => Some(RiskLevel::Critical),
            _ => None,
        }
    }
}

/// How much the evidence supports the score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    Low,
    Medium,
    High,
}

/// What the change needs before it can be merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness {
    Ready,
    NeedsValidation,
    NeedsReview,
    Blocked,
}

impl Readiness {
    pub fn as_str(self) -> &'static str {
        match self {
            Readiness::Ready => "ready",
            Readiness::NeedsValidation => "needs validation",
            Readiness::NeedsReview => "needs review",
            Readiness::Blocked => "blocked",
        }
    }
}

/// One contribution to the score.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RiskFactor {
    /// A stable identifier (`files_changed`, `security_sensitive`, ...).
    pub id: &'static str,
    pub weight: u32,
    /// One line for people (long lists are shortened here, never in `paths`).
    pub evidence: String,
    pub mitigation: &'static str,
    /// Every path the factor is about, in full.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// Where a verification run the assessment weighed comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VerificationSource {
    /// A `verification.run` event.
    Recorded,
    /// A shell tool call whose command runs a known test runner, build, linter or
    /// type checker.
    Shell,
    /// A goal check's receipt (`goal.check`).
    GoalCheck,
}

impl VerificationSource {
    pub fn as_str(self) -> &'static str {
        match self {
            VerificationSource::Recorded => "recorded run",
            VerificationSource::Shell => "shell call",
            VerificationSource::GoalCheck => "goal check",
        }
    }
}

/// One verification run the assessment weighed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerificationEvidence {
    /// The event it is dated by: the `verification.run`, the tool result, the receipt.
    pub seq: u64,
    pub command: String,
    pub passed: bool,
    pub source: VerificationSource,
    /// The step it ran in, when it ran in one.
    pub step: Option<u64>,
    pub duration_ms: Option<u64>,
    /// For a goal check: the goal and the check id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
}

/// The assessment of one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RiskAssessment {
    pub session: String,
    pub score: u32,
    pub level: RiskLevel,
    pub confidence: Confidence,
    pub readiness: Readiness,
    pub factors: Vec<RiskFactor>,
    pub files_changed: u64,
    pub lines_changed: u64,
    pub tool_failures: u64,
    pub verified: bool,
    /// Every verification run weighed, in log order: what `verified`,
    /// `verification_failed` and `edited_after_verification` rest on.
    pub verification_runs: Vec<VerificationEvidence>,
    pub disclaimer: &'static str,
}

/// Path fragments that mark security-sensitive files.
const SENSITIVE: &[&str] = &[
    "auth",
    "secret",
    "credential",
    "passw",
    "token",
    "session",
    "cookie",
    "permission",
    "oauth",
    "jwt",
    "crypto",
    "private_key",
    "id_rsa",
    "keystore",
    ".pem",
    ".key",
    "iam",
    "policy",
    "acl",
    "sudo",
    "ssh",
];
/// Whole path components or file names that are security-sensitive.
const SENSITIVE_NAMES: &[&str] = &[
    ".env",
    ".npmrc",
    ".pypirc",
    ".netrc",
    "jenkinsfile",
    ".gitlab-ci.yml",
    "dockerfile",
];
/// Directories of CI configuration.
const CI_DIRS: &[&str] = &[
    ".github/workflows/",
    ".circleci/",
    ".buildkite/",
    ".gitlab/",
];
/// Top-level directories that accompany code rather than being areas of their own.
const COMPANION_AREAS: &[&str] = &[
    "test",
    "tests",
    "spec",
    "specs",
    "__tests__",
    "testdata",
    "fixtures",
    "doc",
    "docs",
    "examples",
    "benches",
];
/// Path fragments that mark a public API surface.
const API: &[&str] = &[
    "api",
    "route",
    "handler",
    "controller",
    "endpoint",
    "openapi",
    "swagger",
    "graphql",
    ".proto",
    "schema",
    "public",
    "/lib.rs",
    "index.ts",
    "index.js",
    "__init__.py",
    ".d.ts",
];

/// Whether a path is security-sensitive (auth, secrets, keys, tokens, credentials,
/// sessions, cookies, permissions, `.env`, CI configuration, ...).
pub fn is_security_sensitive(path: &str) -> bool {
    // (What lower-casing the path and comparing it with each lower-case fragment and
    // name would say, without a copy of the path or a search per fragment.)
    static FRAGMENTS: LazyLock<Option<AhoCorasick>> =
        LazyLock::new(|| fragments(SENSITIVE.iter().chain(CI_DIRS)));
    let name = path.rsplit('/').next().unwrap_or(path);
    contains_any(&FRAGMENTS, path, || SENSITIVE.iter().chain(CI_DIRS))
        || SENSITIVE_NAMES.iter().any(|n| name.eq_ignore_ascii_case(n))
        || name
            .as_bytes()
            .get(..5)
            .is_some_and(|b| b.eq_ignore_ascii_case(b".env."))
}

/// Where the agents tacho records keep their hook and plugin files (any file there,
/// not only tacho's): an edit of one in a session can switch the recorder off
/// (`disableAllHooks`, a narrowed matcher, a plugin removed). A test checks that every
/// settings file `tacho hooks status` lists is among them.
const AGENT_HOOK_FILES: &[&str] = &[
    "/.claude/settings.json",
    "/.claude/settings.local.json",
    "/.codex/hooks.json",
    "/.codex/config.toml",
    "/.factory/settings.json",
    "/.qwen/settings.json",
    "/.gemini/settings.json",
    "/.github/hooks/",
    "/.copilot/hooks/",
    "/.clinerules/hooks/",
    "/.cline/hooks/",
    "/.opencode/plugin/",
    "/opencode/plugin/",
    "/.kilo/plugin/",
    "/kilo/plugin/",
];

/// Whether `path` (workspace-relative or absolute) is one of an agent's hook or
/// plugin files ([`AGENT_HOOK_FILES`]).
pub fn is_agent_hook_file(path: &str) -> bool {
    let p = format!("/{}", path.trim_start_matches('/'));
    AGENT_HOOK_FILES.iter().any(|f| {
        if f.ends_with('/') {
            p.contains(f)
        } else {
            p.ends_with(f)
        }
    })
}

/// Whether a path looks like part of an API surface.
pub fn is_api_surface(path: &str) -> bool {
    static FRAGMENTS: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| fragments(API));
    contains_any(&FRAGMENTS, path, || API.iter())
}

/// One automaton finding any of `patterns` (lower-case ASCII) ignoring ASCII case.
fn fragments<'p>(patterns: impl IntoIterator<Item = &'p &'static str>) -> Option<AhoCorasick> {
    AhoCorasick::builder()
        .ascii_case_insensitive(true)
        .build(patterns)
        .ok()
}

/// Whether `path`, lower-cased (ASCII), contains one of the fragments: by their
/// automaton, or (should it not have been built) one search each.
fn contains_any<'p, I: Iterator<Item = &'p &'static str>>(
    automaton: &Option<AhoCorasick>,
    path: &str,
    patterns: impl FnOnce() -> I,
) -> bool {
    match automaton {
        Some(a) => a.is_match(path),
        None => {
            let p = path.to_ascii_lowercase();
            patterns().any(|s| p.contains(s))
        }
    }
}

/// Whether a shell command runs tests, a build, a linter or a type checker, and which.
/// Recognises the common runners of many ecosystems.
pub fn verification_kind(command: &str) -> Option<&'static str> {
    crate::shell::commands(command).iter().find_map(|c| {
        let words: Vec<&str> = c.iter().map(String::as_str).collect();
        command_kind(&words)
    })
}

/// What one simple command (its words) verifies, if anything.
fn command_kind(words: &[&str]) -> Option<&'static str> {
    let has = |i: usize, w: &str| words.get(i).is_some_and(|x| *x == w);
    for (i, w) in words.iter().enumerate() {
        let tool = w.rsplit('/').next().unwrap_or(w);
        let kind = match tool {
            "cargo" => match words.get(i + 1).copied() {
                Some("test" | "nextest") => Some("test"),
                Some("build" | "check") => Some("build"),
                Some("clippy" | "fmt") => Some("lint"),
                _ => None,
            },
            "go" => match words.get(i + 1).copied() {
                Some("test") => Some("test"),
                Some("build") => Some("build"),
                Some("vet") => Some("lint"),
                _ => None,
            },
            "npm" | "pnpm" | "yarn" | "bun" => {
                let sub = if has(i + 1, "run") {
                    words.get(i + 2)
                } else {
                    words.get(i + 1)
                };
                match sub.copied() {
                    Some(s) if s.starts_with("test") => Some("test"),
                    Some("build") => Some("build"),
                    Some("lint") => Some("lint"),
                    Some("typecheck" | "tsc") => Some("typecheck"),
                    _ => None,
                }
            }
            "pytest" | "jest" | "vitest" | "mocha" | "rspec" | "phpunit" | "ctest" | "tox"
            | "nox" => Some("test"),
            "tsc" | "mypy" | "pyright" => Some("typecheck"),
            "eslint" | "ruff" | "flake8" | "pylint" | "golangci-lint" | "rubocop" => Some("lint"),
            "python" | "python3" if has(i + 1, "-m") => match words.get(i + 2).copied() {
                Some("pytest" | "unittest") => Some("test"),
                Some("mypy") => Some("typecheck"),
                _ => None,
            },
            "mvn" | "./mvnw" | "mvnw" => words[i + 1..].iter().find_map(|w| match *w {
                "test" | "verify" | "install" => Some("test"),
                "package" | "compile" => Some("build"),
                _ => None,
            }),
            "gradle" | "./gradlew" | "gradlew" => words[i + 1..].iter().find_map(|w| match *w {
                "test" | "check" => Some("test"),
                "build" | "assemble" => Some("build"),
                _ => None,
            }),
            "make" => match words.get(i + 1).copied() {
                Some("test" | "check") => Some("test"),
                None | Some("build" | "all") => Some("build"),
                _ => None,
            },
            "dotnet" | "swift" | "deno" | "mix" | "bazel" | "zig" => {
                match words.get(i + 1).copied() {
                    Some("test") => Some("test"),
                    Some("build") => Some("build"),
                    _ => None,
                }
            }
            "rake" if has(i + 1, "test") => Some("test"),
            _ => None,
        };
        if kind.is_some() {
            return kind;
        }
    }
    None
}

/// The command of a tool call that is a verification run: a shell call whose command
/// runs a known test runner, build, linter or type checker. (Whether it counts, and
/// as passed or failed, is its result's status: see [`shell_run_passed`].)
pub fn shell_verification<'a>(tool: &str, target: Option<&'a str>) -> Option<&'a str> {
    // A run whose command can mask its status (`pytest || true`, `pytest | tee log`,
    // `pytest; echo done`: the agent's shell has no errexit or pipefail) says nothing
    // either way, whatever its exit code: read by the parser goal checks are frozen
    // under.
    shell_command(tool, target)
        .filter(|c| verification_kind(c).is_some() && tacho_shell::masks_status(c).is_none())
}

/// What a shell verification run's result says: passed, failed, or (denied,
/// cancelled: it never ran) no evidence either way.
pub fn shell_run_passed(status: ToolStatus) -> Option<bool> {
    match status {
        ToolStatus::Ok => Some(true),
        ToolStatus::Error | ToolStatus::Timeout => Some(false),
        _ => None,
    }
}

/// The command a tool call ran, when it is a shell call: its target.
fn shell_command<'a>(tool: &str, target: Option<&'a str>) -> Option<&'a str> {
    // (Compared without a lowercased copy: every tool call of a session asks.) The
    // shells of the agents tacho records: Claude Code's, Codex's, Copilot CLI's and
    // OpenCode's `Bash`/`bash`, Gemini CLI's and Qwen Code's `run_shell_command`,
    // Factory Droid's `Execute`, Cline's `execute_command`.
    [
        "bash",
        "shell",
        "sh",
        "exec",
        "run",
        "terminal",
        "command",
        "run_shell_command",
        "execute",
        "execute_command",
        "powershell",
    ]
    .iter()
    .any(|n| tool.eq_ignore_ascii_case(n))
    .then_some(target)
    .flatten()
}

/// Assesses a session from its execution graph.
pub fn assess(g: &ExecutionGraph) -> RiskAssessment {
    assess_with(g, true)
}

/// A session's risk score and level alone: [`assess`]'s rules, without the text and
/// paths of its factors (what the session index keeps, computed for every session a
/// listing or `log verify` folds).
pub fn risk_score(g: &ExecutionGraph) -> (u32, RiskLevel) {
    let r = assess_with(g, false);
    (r.score, r.level)
}

/// The code of the `error` tacho writes for a hook that waited out its budget for a
/// lock and recorded nothing.
pub const HOOK_LOCK_HELD: &str = "hook_lock_held";

/// The `error` code of a tool call the hooks reported that the agent's own transcript
/// never named by the turn's end (SPEC §3.1): a payload piped to `tacho hook`, not a
/// call the agent made. Its message is [`unconfirmed_call_message`].
pub const CALL_UNCONFIRMED: &str = "call_unconfirmed";

/// The `error` code of a payload that named another transcript for the main session
/// than the one its first payload named (SPEC §3.1): written by tacho, which read the
/// session's own; an act of whoever piped the payload.
pub const TRANSCRIPT_ELSEWHERE: &str = "transcript_elsewhere";

/// The message of a [`CALL_UNCONFIRMED`] error: `call ID (WHAT) …`.
pub fn unconfirmed_call_message(call_id: &str, what: &str) -> String {
    format!(
        "call {call_id} ({what}) was reported to tacho's hooks but is not in the agent's transcript: not a call the agent made; it never counts as verification"
    )
}

/// The call id a [`CALL_UNCONFIRMED`] error names.
pub fn unconfirmed_call_id(message: &str) -> Option<&str> {
    message.strip_prefix("call ")?.split(' ').next()
}

/// The call ids the session's `error`s mark unconfirmed.
pub fn unconfirmed_calls(g: &ExecutionGraph) -> BTreeSet<&str> {
    g.errors
        .iter()
        .filter(|e| e.code.as_deref() == Some(CALL_UNCONFIRMED))
        .filter_map(|e| unconfirmed_call_id(&e.message))
        .collect()
}

/// The `error` code of a process that answered on a workspace's watcher socket and
/// was not tacho's watcher (SPEC §10.6): written by tacho, which then read the
/// workspace itself.
pub const WATCHER_IMPOSTOR: &str = "watcher_impostor";

/// The `error` code of a turn's end at which the workspace's watcher served a snapshot
/// that left out changes made before it was asked, which a scan of tacho's own read
/// (SPEC §10.6): written by tacho, whose record holds the scan's snapshot.
pub const WATCHER_MISSED: &str = "watcher_missed";

/// [`assess`], with the factors' evidence and paths only when `detail` (the weights,
/// score, level and readiness are the same either way).
fn assess_with(g: &ExecutionGraph, detail: bool) -> RiskAssessment {
    let facts = Facts::of(g, detail);
    // A rollback tacho applied restores an earlier state: what it changed is not an
    // agent's work to review (the session it rolled back is scored for that), so only
    // what concerns the act itself weighs — how it ended, changes no tool call made
    // while it ran, hook files it restored, tacho obstructed.
    let rollback = is_tachos_rollback(g);
    let factors: Vec<RiskFactor> = FACTORS
        .iter()
        .filter(|rule| rule.scores_rollbacks || !rollback)
        .filter_map(|rule| rule.assess(&facts))
        .collect();
    let score = factors.iter().map(|f| f.weight).sum::<u32>().min(100);
    let level = RiskLevel::of_score(score);
    let n_files = facts.files.len() as u64;
    let confidence = match (n_files > 0, !facts.runs.is_empty()) {
        (true, true) => Confidence::High,
        (true, false) | (false, true) => Confidence::Medium,
        (false, false) => Confidence::Low,
    };
    let verified = facts.verified();
    let readiness = readiness(&facts, level, verified);
    RiskAssessment {
        session: g.session.clone(),
        score,
        level,
        confidence,
        readiness,
        factors,
        files_changed: n_files,
        lines_changed: facts.lines,
        tool_failures: failed_calls(g).count() as u64,
        verified,
        verification_runs: facts.runs,
        disclaimer: RISK_DISCLAIMER,
    }
}

/// What the change needs before it can be merged (SPEC §8.2): blocked by the gate, a
/// failed last run or an open current goal; else validation of unverified changes;
/// else review of a high score, security-sensitive files or changes no tool call made.
fn readiness(facts: &Facts<'_>, level: RiskLevel, verified: bool) -> Readiness {
    let g = facts.g;
    let failed_last = matches!(facts.last_run(), Some((_, false, _)));
    let goal_open = g.goals.open_goals().next().is_some();
    let sensitive = facts.files.iter().any(|f| is_security_sensitive(f));
    if g.end_reason == Some(EndReason::GateBlocked) || failed_last || goal_open {
        Readiness::Blocked
    } else if !facts.files.is_empty() && !verified {
        Readiness::NeedsValidation
    } else if level >= RiskLevel::High || sensitive || !g.unclaimed.is_empty() {
        Readiness::NeedsReview
    } else {
        Readiness::Ready
    }
}

/// One risk factor: its id, how it weighs, the evidence it rests on and what to do
/// about it. [`FACTORS`] holds every one; the assessment and every explanation of a
/// factor read it there.
#[derive(Debug, Clone, Copy)]
pub struct FactorRule {
    /// The stable identifier ([`RiskFactor::id`]).
    pub id: &'static str,
    /// How much it adds to the score, from what its evidence counts.
    pub weight: Weight,
    /// What a reviewer should do about it ([`RiskFactor::mitigation`]).
    pub mitigation: &'static str,
    /// Whether it weighs in a rollback tacho applied (`session rollback`): not the
    /// factors about an agent's work, which a rollback only undoes (the session it
    /// rolled back is scored for that work).
    pub scores_rollbacks: bool,
    /// What the factor finds in a session, if it applies.
    evidence: fn(&Facts<'_>) -> Option<Evidence>,
}

impl FactorRule {
    /// The factor as it applies to a session, if it does.
    fn assess(&self, facts: &Facts<'_>) -> Option<RiskFactor> {
        let found = (self.evidence)(facts)?;
        Some(RiskFactor {
            id: self.id,
            weight: self.weight.of(&found)?,
            evidence: found.text,
            mitigation: self.mitigation,
            paths: found.paths,
        })
    }
}

/// How a factor weighs, from what its evidence counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// The same whenever the factor applies.
    Fixed(u32),
    /// `tenths` of a point per `unit` counted (rounded down), at most `max`.
    Per {
        tenths: u64,
        unit: &'static str,
        max: u32,
    },
    /// [`Weight::Per`], and `extra` points more when `when` holds.
    PerPlus {
        tenths: u64,
        unit: &'static str,
        extra: u32,
        when: &'static str,
        max: u32,
    },
    /// By how far a count goes: the weight of the highest threshold it is over (the
    /// factor applies only over the lowest).
    Over(&'static [(u64, u32)]),
    /// By how the session ended (`None`: its end was not recorded); an ending not
    /// listed weighs nothing, and the factor does not apply.
    Ending(&'static [(Option<EndReason>, u32)]),
}

impl Weight {
    /// The weight of a factor with this evidence; `None` when the rule says the factor
    /// does not apply.
    fn of(&self, found: &Evidence) -> Option<u32> {
        let per = |tenths: u64, max: u32| {
            (found.count.saturating_mul(tenths) / 10).min(u64::from(max)) as u32
        };
        match *self {
            Weight::Fixed(w) => Some(w),
            Weight::Per { tenths, max, .. } => Some(per(tenths, max)),
            Weight::PerPlus {
                tenths, extra, max, ..
            } => {
                let base = found.count.saturating_mul(tenths) / 10;
                let plus = if found.plus { u64::from(extra) } else { 0 };
                Some((base + plus).min(u64::from(max)) as u32)
            }
            Weight::Over(tiers) => tiers
                .iter()
                .rev()
                .find(|(over, _)| found.count > *over)
                .map(|&(_, w)| w),
            Weight::Ending(endings) => endings
                .iter()
                .find(|(end, _)| *end == found.ending)
                .map(|&(_, w)| w),
        }
    }
}

/// The rule in words, as SPEC §8.2's table gives it (a test holds the two together).
impl std::fmt::Display for Weight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let points = |tenths: u64| match tenths % 10 {
            0 => format!("{}", tenths / 10),
            r => format!("{}.{r}", tenths / 10),
        };
        match *self {
            Weight::Fixed(w) => write!(f, "{w}"),
            Weight::Per { tenths, unit, max } => {
                write!(f, "{} per {unit}, at most {max}", points(tenths))
            }
            Weight::PerPlus {
                tenths,
                unit,
                extra,
                when,
                max,
            } => write!(
                f,
                "{} per {unit}, {extra} more when {when}, at most {max}",
                points(tenths)
            ),
            Weight::Over(tiers) => {
                let mut tiers = tiers.iter();
                if let Some((_, w)) = tiers.next() {
                    write!(f, "{w}")?;
                }
                for (over, w) in tiers {
                    write!(f, ", or {w} over {}", thousands(*over))?;
                }
                Ok(())
            }
            Weight::Ending(endings) => {
                // Endings of the same weight together: `10 stalled, aborted or error`.
                let mut groups: Vec<(u32, Vec<&str>)> = Vec::new();
                for (end, w) in endings {
                    let name = end.map_or("not ended", |e| e.as_str());
                    match groups.last_mut() {
                        Some((last, names)) if last == w => names.push(name),
                        _ => groups.push((*w, vec![name])),
                    }
                }
                let groups: Vec<String> = groups
                    .iter()
                    .map(|(w, names)| {
                        let names = match names.split_last() {
                            Some((last, [])) => last.to_string(),
                            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                            None => String::new(),
                        };
                        format!("{w} {}", names.replace('_', " "))
                    })
                    .collect();
                f.write_str(&groups.join("; "))
            }
        }
    }
}

/// `1234567` as `1,234,567`: how every count is printed for people.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Every risk factor, in the order an assessment lists them (SPEC §8.2 documents
/// each; a test holds the two together).
pub static FACTORS: &[FactorRule] = &[
    FactorRule {
        id: "files_changed",
        weight: Weight::Per {
            tenths: 25,
            unit: "file",
            max: 20,
        },
        mitigation: "Review every changed file; split unrelated changes into separate pull requests.",
        scores_rollbacks: false,
        evidence: evidence::files_changed,
    },
    FactorRule {
        id: "lines_changed",
        weight: Weight::Over(&[(500, 5), (2000, 10)]),
        mitigation: "Large diffs hide mistakes: review in parts, or ask the agent for smaller steps.",
        scores_rollbacks: false,
        evidence: evidence::lines_changed,
    },
    FactorRule {
        id: "cross_area",
        weight: Weight::Per {
            tenths: 50,
            unit: "extra top-level area",
            max: 15,
        },
        mitigation: "Have an owner of each area review its part.",
        scores_rollbacks: false,
        evidence: evidence::cross_area,
    },
    FactorRule {
        id: "tool_failures",
        weight: Weight::Per {
            tenths: 40,
            unit: "failed call",
            max: 20,
        },
        mitigation: "Check that every failure was resolved, not worked around.",
        scores_rollbacks: true,
        evidence: evidence::tool_failures,
    },
    FactorRule {
        id: "unverified",
        weight: Weight::Fixed(15),
        mitigation: "Run the test suite on the change before merging.",
        scores_rollbacks: false,
        evidence: evidence::unverified,
    },
    FactorRule {
        id: "verification_failed",
        weight: Weight::Fixed(20),
        mitigation: "Fix the failure and run the verification again.",
        scores_rollbacks: true,
        evidence: evidence::verification_failed,
    },
    FactorRule {
        id: "edited_after_verification",
        weight: Weight::Fixed(10),
        mitigation: "Run the verification again on the final state.",
        scores_rollbacks: false,
        evidence: evidence::edited_after_verification,
    },
    FactorRule {
        id: "no_diff_snapshot",
        weight: Weight::Fixed(5),
        mitigation: "Record snapshots (adapters take them at step boundaries) so the real diff can be reviewed.",
        scores_rollbacks: false,
        evidence: evidence::no_diff_snapshot,
    },
    FactorRule {
        id: "unclaimed_changes",
        weight: Weight::Fixed(10),
        mitigation: "Find out who made these changes (the user, another process, a tool whose hooks did not fire); undo one with tacho session rollback --unclaimed N.",
        scores_rollbacks: true,
        evidence: evidence::unclaimed_changes,
    },
    FactorRule {
        id: "api_surface",
        weight: Weight::Per {
            tenths: 40,
            unit: "file",
            max: 12,
        },
        mitigation: "Check callers and compatibility; document the change.",
        scores_rollbacks: false,
        evidence: evidence::api_surface,
    },
    FactorRule {
        id: "security_sensitive",
        weight: Weight::Per {
            tenths: 80,
            unit: "file",
            max: 24,
        },
        mitigation: "Ask for a security review of these files.",
        scores_rollbacks: false,
        evidence: evidence::security_sensitive,
    },
    FactorRule {
        id: "agent_hooks_edited",
        weight: Weight::Fixed(20),
        mitigation: "Read the change (tacho hooks status says whether the hooks can still fire): an agent that edits its hook files can switch its own recording off.",
        scores_rollbacks: true,
        evidence: evidence::agent_hooks_edited,
    },
    FactorRule {
        id: "run_ending",
        weight: Weight::Ending(&[
            (Some(EndReason::GateBlocked), 15),
            (Some(EndReason::StepLimit), 10),
            (Some(EndReason::Stalled), 10),
            (Some(EndReason::Aborted), 10),
            (Some(EndReason::Error), 10),
            (Some(EndReason::BudgetLimited), 5),
            (None, 5),
        ]),
        mitigation: "Treat the work as unfinished until it is completed and verified.",
        scores_rollbacks: true,
        evidence: evidence::run_ending,
    },
    FactorRule {
        id: "changed_after_freeze",
        weight: Weight::Per {
            tenths: 50,
            unit: "file",
            max: 15,
        },
        mitigation: "Read the diff of each against the goal's start (tacho goal status): a weakened test or check script lets a goal complete without the work.",
        scores_rollbacks: true,
        evidence: evidence::changed_after_freeze,
    },
    FactorRule {
        id: "goal_revised",
        weight: Weight::PerPlus {
            tenths: 50,
            unit: "revision",
            extra: 10,
            when: "one weakened the contract",
            max: 20,
        },
        mitigation: "Read each revision's correction and what it weakened (tacho goal status): a contract rewritten during the work can let the goal complete without it.",
        scores_rollbacks: true,
        evidence: evidence::goal_revised,
    },
    FactorRule {
        id: "agent_acted_on_tacho",
        weight: Weight::Per {
            tenths: 100,
            unit: "act",
            max: 25,
        },
        mitigation: "The agent changed what tacho holds it to, from inside its own tool calls: read each act (tacho session show), undo what you did not ask for, and rerun the checks in CI (ci verify --rerun).",
        scores_rollbacks: true,
        evidence: evidence::agent_acted_on_tacho,
    },
    FactorRule {
        id: "goal_cleared",
        weight: Weight::Per {
            tenths: 50,
            unit: "goal",
            max: 15,
        },
        mitigation: "A cleared goal was set aside without its work being proven: read why (tacho goal status --goal ID) and make sure the work it asked for is not needed.",
        scores_rollbacks: true,
        evidence: evidence::goal_cleared,
    },
    FactorRule {
        id: "calls_unconfirmed",
        weight: Weight::Fixed(20),
        mitigation: "Tool calls were reported to tacho that the agent's own transcript does not hold: payloads piped to tacho hook from its shell. None counts as verification; look for the command that piped them.",
        scores_rollbacks: true,
        evidence: evidence::calls_unconfirmed,
    },
    FactorRule {
        id: "watcher_missed",
        weight: Weight::Fixed(15),
        mitigation: "Files changed without a change event in the workspace (written through a hard link from outside it, or a shared mapping): the turn's end snapshot holds them, but the snapshots between may not; find what wrote them and rerun the checks in CI (ci verify --rerun).",
        scores_rollbacks: true,
        evidence: evidence::watcher_missed,
    },
    FactorRule {
        id: "watcher_impostor",
        weight: Weight::Fixed(20),
        mitigation: "Something answered on the watcher's socket in tacho's place: tacho read the workspace itself, so the record holds, but look for the process (it may be the agent's) and rerun the checks in CI (ci verify --rerun).",
        scores_rollbacks: true,
        evidence: evidence::watcher_impostor,
    },
    FactorRule {
        id: "recorder_obstructed",
        weight: Weight::Fixed(20),
        mitigation: "Something held tacho's lock while the agent worked: what the agent did then is missing from the record. Look for a process of the agent's holding it (flock) and rerun the checks in CI (ci verify --rerun).",
        scores_rollbacks: true,
        evidence: evidence::recorder_obstructed,
    },
    FactorRule {
        id: "goal_not_completed",
        weight: Weight::Fixed(15),
        mitigation: "Make the goal's checks pass (tacho goal status) before calling the work done.",
        scores_rollbacks: true,
        evidence: evidence::goal_not_completed,
    },
];

/// The rule of the factor `id`.
pub fn factor_rule(id: &str) -> Option<&'static FactorRule> {
    FACTORS.iter().find(|r| r.id == id)
}

/// What every factor reads of a session, worked out once.
struct Facts<'g> {
    g: &'g ExecutionGraph,
    /// Whether the factors' evidence and paths are wanted (else only their weights).
    detail: bool,
    /// The changed files' paths.
    files: Vec<&'g String>,
    /// Lines added and removed, over every changed file.
    lines: u64,
    /// Recorded runs, shell calls of known test runners and builds, and goal checks'
    /// receipts ([`verification_runs`]).
    runs: Vec<VerificationEvidence>,
    /// The event of the last file edit.
    last_edit: Option<u64>,
}

impl<'g> Facts<'g> {
    fn of(g: &'g ExecutionGraph, detail: bool) -> Self {
        Facts {
            g,
            detail,
            files: g.files.keys().collect(),
            lines: g
                .files
                .values()
                .map(|f| f.lines_added + f.lines_removed)
                .sum(),
            runs: verification_runs(g),
            last_edit: g.files.values().map(|f| f.last_edit_seq).max(),
        }
    }

    /// The last verification run: its event, whether it passed, its command.
    fn last_run(&self) -> Option<(u64, bool, &String)> {
        self.runs.last().map(|r| (r.seq, r.passed, &r.command))
    }

    /// The last run passed after the last edit.
    fn verified(&self) -> bool {
        match (self.last_run(), self.last_edit) {
            (Some((seq, true, _)), Some(edit)) => seq > edit,
            (Some((_, true, _)), None) => true,
            _ => false,
        }
    }

    /// A factor's evidence in words, when [`Facts::detail`].
    fn text(&self, words: impl FnOnce() -> String) -> String {
        if self.detail { words() } else { String::new() }
    }

    /// A factor's paths, when [`Facts::detail`].
    fn paths(&self, paths: &[&String]) -> Vec<String> {
        if self.detail {
            paths.iter().map(|p| p.to_string()).collect()
        } else {
            Vec::new()
        }
    }

    /// The session's `error`s of one code.
    fn errors(&self, code: &str) -> Vec<&'g ErrorNode> {
        self.g
            .errors
            .iter()
            .filter(|e| e.code.as_deref() == Some(code))
            .collect()
    }
}

/// What a factor found in a session.
struct Evidence {
    /// What the weight counts: files, lines, failed calls, areas beyond the first, ...
    count: u64,
    /// For [`Weight::PerPlus`]: whether its `when` holds.
    plus: bool,
    /// For [`Weight::Ending`]: how the session ended.
    ending: Option<EndReason>,
    /// One line for people (empty without [`Facts::detail`]).
    text: String,
    /// Every path the factor is about (empty without [`Facts::detail`]).
    paths: Vec<String>,
}

impl Evidence {
    /// `count` things, shown by `text` and `paths`.
    fn of(count: usize, text: String, paths: Vec<String>) -> Self {
        Evidence {
            count: count as u64,
            plus: false,
            ending: None,
            text,
            paths,
        }
    }

    /// A factor that applies, shown by `text` alone.
    fn says(text: String) -> Self {
        Evidence::of(1, text, Vec::new())
    }
}

/// At most five paths, then `...`.
fn shortened<S: AsRef<str>>(paths: &[S]) -> String {
    let mut s: Vec<&str> = paths.iter().take(5).map(AsRef::as_ref).collect();
    if paths.len() > 5 {
        s.push("...");
    }
    s.join(", ")
}

/// The tool calls that did not end `ok`.
fn failed_calls(g: &ExecutionGraph) -> impl Iterator<Item = (&StepNode, &ToolNode)> {
    g.tools()
        .filter(|(_, t)| t.status.is_some_and(|s| s != ToolStatus::Ok))
}

/// Each factor's evidence ([`FactorRule::evidence`]): `None` when it does not apply.
mod evidence {
    use std::collections::{BTreeMap, BTreeSet};

    use tacho_schema::EndReason;

    use super::{
        CALL_UNCONFIRMED, COMPANION_AREAS, Evidence, Facts, HOOK_LOCK_HELD, TRANSCRIPT_ELSEWHERE,
        WATCHER_IMPOSTOR, WATCHER_MISSED, asked_by, failed_calls, is_agent_hook_file,
        is_api_surface, is_security_sensitive, shortened,
    };
    use crate::graph::{ErrorNode, GoalEventNode, GoalMark};

    pub(super) fn files_changed(f: &Facts<'_>) -> Option<Evidence> {
        let files = &f.files;
        (!files.is_empty()).then(|| {
            Evidence::of(
                files.len(),
                f.text(|| format!("{} file(s) changed: {}", files.len(), shortened(files))),
                f.paths(files),
            )
        })
    }

    /// Applies over the lowest threshold of its rule, which weighs the count.
    pub(super) fn lines_changed(f: &Facts<'_>) -> Option<Evidence> {
        let lines = f.lines;
        Some(Evidence {
            count: lines,
            ..Evidence::says(f.text(|| format!("{lines} lines added or removed")))
        })
    }

    /// Top-level areas of the change. Tests and docs travel with the code they cover,
    /// so they are not areas of their own.
    pub(super) fn cross_area(f: &Facts<'_>) -> Option<Evidence> {
        let areas: BTreeSet<&str> = f
            .files
            .iter()
            .filter(|p| p.contains('/'))
            .map(|p| p.split('/').next().unwrap_or(p))
            .filter(|a| !COMPANION_AREAS.contains(&a.to_ascii_lowercase().as_str()))
            .collect();
        (areas.len() > 1).then(|| {
            Evidence::of(
                areas.len() - 1,
                f.text(|| {
                    format!(
                        "changes span {} top-level areas: {}",
                        areas.len(),
                        areas.iter().copied().collect::<Vec<_>>().join(", ")
                    )
                }),
                Vec::new(),
            )
        })
    }

    pub(super) fn tool_failures(f: &Facts<'_>) -> Option<Evidence> {
        let failures: Vec<_> = failed_calls(f.g).collect();
        (!failures.is_empty()).then(|| {
            let text = f.text(|| {
                let shown: Vec<String> = failures
                    .iter()
                    .take(3)
                    .map(|(s, t)| {
                        let target = t.target.as_ref().map(|x| format!(" {x}"));
                        format!("step {} {}{}", s.number, t.tool, target.unwrap_or_default())
                    })
                    .collect();
                format!(
                    "{} failed tool call(s): {}",
                    failures.len(),
                    shown.join("; ")
                )
            });
            Evidence::of(failures.len(), text, Vec::new())
        })
    }

    /// Verification: recorded runs, shell calls of known test runners and builds, and
    /// goal checks' receipts. Files changed, and none ran.
    pub(super) fn unverified(f: &Facts<'_>) -> Option<Evidence> {
        (f.last_run().is_none() && f.last_edit.is_some()).then(|| {
            Evidence::says(f.text(|| {
                "files changed and no verification run (test, build, lint or goal check) was recorded".into()
            }))
        })
    }

    pub(super) fn verification_failed(f: &Facts<'_>) -> Option<Evidence> {
        match f.last_run() {
            Some((_, false, cmd)) => Some(Evidence::says(
                f.text(|| format!("the last verification failed: {cmd}")),
            )),
            _ => None,
        }
    }

    pub(super) fn edited_after_verification(f: &Facts<'_>) -> Option<Evidence> {
        match (f.last_run(), f.last_edit) {
            (Some((seq, true, cmd)), Some(edit)) if seq < edit => {
                Some(Evidence::says(f.text(|| {
                    format!("files changed after the last passing run ({cmd})")
                })))
            }
            _ => None,
        }
    }

    pub(super) fn no_diff_snapshot(f: &Facts<'_>) -> Option<Evidence> {
        (!f.files.is_empty() && f.g.snapshots.is_empty()).then(|| {
            Evidence::says(f.text(|| {
                "no file snapshot was recorded, so the diff cannot be checked against the edits the agent reported".into()
            }))
        })
    }

    pub(super) fn unclaimed_changes(f: &Facts<'_>) -> Option<Evidence> {
        let unclaimed = &f.g.unclaimed;
        if unclaimed.is_empty() {
            return None;
        }
        let paths: Vec<String> = unclaimed
            .iter()
            .flat_map(|u| u.files.iter().map(|p| p.path.clone()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let text = f.text(|| {
            let ranges: Vec<String> = unclaimed
                .iter()
                .map(|u| format!("#{}..#{}", u.after_seq, u.before_seq))
                .collect();
            format!(
                "{} file(s) changed with no tool call running (between events {}): {}",
                paths.len(),
                ranges.join(", "),
                shortened(&paths)
            )
        });
        let paths = if f.detail { paths } else { Vec::new() };
        Some(Evidence::of(1, text, paths))
    }

    /// The changed files `is` picks, shown after `what`.
    fn files_that(
        f: &Facts<'_>,
        is: fn(&str) -> bool,
        what: fn(usize, String) -> String,
    ) -> Option<Evidence> {
        let picked: Vec<&String> = f.files.iter().copied().filter(|p| is(p)).collect();
        (!picked.is_empty()).then(|| {
            Evidence::of(
                picked.len(),
                f.text(|| what(picked.len(), shortened(&picked))),
                f.paths(&picked),
            )
        })
    }

    pub(super) fn api_surface(f: &Facts<'_>) -> Option<Evidence> {
        files_that(f, is_api_surface, |n, list| {
            format!("{n} file(s) of the API surface changed: {list}")
        })
    }

    pub(super) fn security_sensitive(f: &Facts<'_>) -> Option<Evidence> {
        files_that(f, is_security_sensitive, |_, list| {
            format!("security-sensitive path(s) touched: {list}")
        })
    }

    pub(super) fn agent_hooks_edited(f: &Facts<'_>) -> Option<Evidence> {
        files_that(f, is_agent_hook_file, |_, list| {
            format!("an agent's hook or plugin file changed in the session: {list}")
        })
    }

    /// How the run ended, whatever it was: the rule weighs each ending.
    pub(super) fn run_ending(f: &Facts<'_>) -> Option<Evidence> {
        let words = match f.g.end_reason {
            Some(EndReason::GateBlocked) => "the completion gate blocked the session",
            Some(EndReason::StepLimit) => "the session hit its step limit",
            Some(EndReason::Stalled) => "the session stalled",
            Some(EndReason::Aborted) => "the session was aborted",
            Some(EndReason::Error) => "the session ended with an error",
            Some(EndReason::BudgetLimited) => "the session ran out of budget",
            Some(EndReason::Completed) => "the session completed",
            None => "the session has not ended (running, or its end was not recorded)",
        };
        Some(Evidence {
            ending: f.g.end_reason,
            ..Evidence::says(f.text(|| words.into()))
        })
    }

    /// Goal assurance: files outside a goal's change (tests, fixtures, configuration,
    /// check scripts) edited since its plan was frozen, as each check's latest receipt
    /// found them: a weakened test is how a goal completes without the work.
    pub(super) fn changed_after_freeze(f: &Facts<'_>) -> Option<Evidence> {
        let mut latest: BTreeMap<(&str, &str), &Vec<String>> = BTreeMap::new();
        for e in &f.g.goals.events {
            if let Some(check) = &e.check {
                latest.insert((e.goal.as_str(), check.as_str()), &e.changed_since_freeze);
            }
        }
        // `M PATH`, `A PATH`, `D PATH`.
        let edited: BTreeSet<&str> = latest
            .values()
            .flat_map(|v| v.iter().map(String::as_str))
            .collect();
        if edited.is_empty() {
            return None;
        }
        let shown: Vec<&str> = edited.iter().copied().collect();
        let text = f.text(|| {
            format!(
                "{} file(s) outside the goal's change edited after its plan was frozen: {}",
                shown.len(),
                shortened(&shown)
            )
        });
        let paths = if f.detail {
            edited
                .iter()
                .filter_map(|p| p.get(2..))
                .map(str::to_owned)
                .collect()
        } else {
            Vec::new()
        };
        Some(Evidence::of(edited.len(), text, paths))
    }

    /// Goal contracts rewritten after the freeze (`goal revise`, `goal replace`, from
    /// the user or the agent's shell): each is shown, with what it weakened.
    pub(super) fn goal_revised(f: &Facts<'_>) -> Option<Evidence> {
        let revisions: Vec<&GoalEventNode> =
            f.g.goals
                .events
                .iter()
                .filter(|e| e.revises.is_some())
                .collect();
        if revisions.is_empty() {
            return None;
        }
        let text = f.text(|| {
            let each: Vec<String> = revisions.iter().map(|e| revision(f, e)).collect();
            each.join("; ")
        });
        Some(Evidence {
            plus: revisions.iter().any(|e| !e.weakened.is_empty()),
            ..Evidence::of(revisions.len(), text, Vec::new())
        })
    }

    /// One revision in words: what it replaced, its correction, who asked, what it
    /// weakened.
    fn revision(f: &Facts<'_>, e: &GoalEventNode) -> String {
        format!(
            "goal {} revised as {} at #{} ({}), {}{}",
            e.revises.as_deref().unwrap_or("?"),
            e.goal,
            e.seq,
            e.correction.as_deref().unwrap_or("no correction given"),
            asked_by(f.g, e.during_call),
            if e.weakened.is_empty() {
                String::new()
            } else {
                format!(": weakened — {}", e.weakened.join("; "))
            }
        )
    }

    /// The agent acting on tacho from inside its own tool calls (its shell, or tacho's
    /// MCP server): a contract revised, a goal blocked or resumed, the session ended
    /// while one of its calls ran. The record's order proves it: tacho wrote these
    /// between that call's start and its result (SPEC §3.1).
    pub(super) fn agent_acted_on_tacho(f: &Facts<'_>) -> Option<Evidence> {
        let g = f.g;
        let mut acts: Vec<String> = g
            .goals
            .events
            .iter()
            .filter_map(|e| {
                let what = match e.mark {
                    GoalMark::Created if e.revises.is_some() => "revised",
                    GoalMark::Blocked => "marked blocked",
                    GoalMark::Resumed => "resumed from its pause",
                    GoalMark::Cleared => "cleared",
                    _ => return None,
                };
                let call = e.during_call?;
                Some(format!(
                    "goal {} {what} at #{} {}",
                    e.goal,
                    e.seq,
                    asked_by(g, Some(call))
                ))
            })
            .collect();
        // The session before this continuation was ended from inside a call of the
        // agent's that went on (written by tacho as the continuation started).
        acts.extend(
            g.errors
                .iter()
                .filter(|e| {
                    matches!(
                        e.code.as_deref(),
                        Some(tacho_schema::SESSION_ENDED_MID_CALL | TRANSCRIPT_ELSEWHERE)
                    )
                })
                .map(|e| e.message.clone()),
        );
        (!acts.is_empty()).then(|| Evidence::of(acts.len(), f.text(|| acts.join("; ")), Vec::new()))
    }

    /// Goals set aside by the user (`goal clear`): never silent.
    pub(super) fn goal_cleared(f: &Facts<'_>) -> Option<Evidence> {
        let cleared: Vec<&GoalEventNode> =
            f.g.goals
                .events
                .iter()
                .filter(|e| e.mark == GoalMark::Cleared)
                .collect();
        (!cleared.is_empty()).then(|| {
            let text = f.text(|| {
                cleared
                    .iter()
                    .map(|e| format!("goal {} cleared at #{}", e.goal, e.seq))
                    .collect::<Vec<_>>()
                    .join("; ")
            });
            Evidence::of(cleared.len(), text, Vec::new())
        })
    }

    /// Tool calls the hooks reported that the agent's own transcript never named.
    pub(super) fn calls_unconfirmed(f: &Facts<'_>) -> Option<Evidence> {
        let made_up = f.errors(CALL_UNCONFIRMED);
        (!made_up.is_empty()).then(|| {
            Evidence::says(f.text(|| {
                made_up
                    .iter()
                    .take(5)
                    .map(|e| e.message.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            }))
        })
    }

    /// `errors` of one code in words: how many times `what`, and the first.
    fn first_of(f: &Facts<'_>, errors: &[&ErrorNode], what: &str) -> Option<Evidence> {
        (!errors.is_empty()).then(|| {
            Evidence::says(f.text(|| {
                format!(
                    "{} {what} (first at #{}): {}",
                    errors.len(),
                    errors.first().map_or(0, |e| e.seq),
                    errors.first().map_or("", |e| e.message.as_str())
                )
            }))
        })
    }

    pub(super) fn watcher_missed(f: &Facts<'_>) -> Option<Evidence> {
        first_of(
            f,
            &f.errors(WATCHER_MISSED),
            "turn end(s) where the watcher had not seen changes a scan found",
        )
    }

    pub(super) fn watcher_impostor(f: &Facts<'_>) -> Option<Evidence> {
        first_of(
            f,
            &f.errors(WATCHER_IMPOSTOR),
            "time(s) a process posed as tacho's watcher of the workspace",
        )
    }

    /// The recorder obstructed: hooks that waited out their budget for a lock another
    /// process held, and recorded nothing of what they saw (written by tacho once the
    /// lock freed, SPEC §3.1). What happened meanwhile is missing from this record.
    pub(super) fn recorder_obstructed(f: &Facts<'_>) -> Option<Evidence> {
        first_of(
            f,
            &f.errors(HOOK_LOCK_HELD),
            "hook(s) of the agent waited out their budget for a lock another process held and recorded nothing",
        )
    }

    /// Goal assurance: a refused completion that no later completion made good means
    /// the goal's own checks say the work is not done. Only current goals count: a
    /// goal replaced by a revision settles nothing (its completion does not complete
    /// the replacement).
    pub(super) fn goal_not_completed(f: &Facts<'_>) -> Option<Evidence> {
        let goals = &f.g.goals;
        let open: Vec<_> = goals.open_goals().collect();
        (!open.is_empty()).then(|| {
            Evidence::says(f.text(|| {
                let mut what = Vec::new();
                for (id, t) in &open {
                    if t.completions_refused > 0 {
                        what.push(format!(
                            "the completion gate refused goal {id} {} time(s)",
                            t.completions_refused
                        ));
                    }
                    if t.paused > 0 {
                        what.push(format!("goal {id} was paused as stalled"));
                    }
                    if t.blocked > 0 {
                        what.push(format!("goal {id} was marked blocked"));
                    }
                }
                format!(
                    "{}, and no completion was accepted ({} receipt(s), {} failed)",
                    what.join("; "),
                    goals.receipts,
                    goals.receipts_failed
                )
            }))
        })
    }
}

/// The session is a rollback tacho applied (`session rollback`): it records the
/// rollback (`rollback.applied`, evidence only tacho writes), and no agent but tacho
/// acted in it.
fn is_tachos_rollback(g: &ExecutionGraph) -> bool {
    !g.rollbacks_of.is_empty() && !g.agents.is_empty() && g.agents.iter().all(|a| a == "tacho")
}

/// The verification runs of a session, in log order: recorded `verification.run`
/// events (skipped ones are no evidence), shell calls of known runners that ran (a
/// denied or cancelled call never did), and goal checks' receipts.
fn verification_runs(g: &ExecutionGraph) -> Vec<VerificationEvidence> {
    let mut runs: Vec<VerificationEvidence> = g
        .verifications
        .iter()
        .filter(|v| v.status != VerificationStatus::Skipped)
        .map(|v| VerificationEvidence {
            seq: v.seq,
            command: v.command.clone(),
            passed: v.status == VerificationStatus::Passed,
            source: VerificationSource::Recorded,
            step: v.step,
            duration_ms: v.duration_ms,
            goal: None,
            check: None,
        })
        .collect();
    let unconfirmed = unconfirmed_calls(g);
    for (s, t) in g.tools() {
        let Some(passed) = t.status.and_then(shell_run_passed) else {
            continue;
        };
        if unconfirmed.contains(t.call_id.as_str()) {
            continue;
        }
        if let (Some(cmd), Some(res)) = (
            shell_verification(&t.tool, t.target.as_deref()),
            t.result_seq,
        ) {
            runs.push(VerificationEvidence {
                seq: res,
                command: cmd.to_string(),
                passed,
                source: VerificationSource::Shell,
                step: Some(s.number),
                duration_ms: t.duration_ms,
                goal: None,
                check: None,
            });
        }
    }
    for e in &g.goals.events {
        let passed = match e.mark {
            GoalMark::CheckPassed => true,
            GoalMark::CheckFailed => false,
            _ => continue,
        };
        runs.push(VerificationEvidence {
            seq: e.seq,
            command: e.command.clone().unwrap_or_default(),
            passed,
            source: VerificationSource::GoalCheck,
            step: e.step,
            duration_ms: None,
            goal: Some(e.goal.clone()),
            check: e.check.clone(),
        });
    }
    runs.sort_by_key(|r| r.seq);
    runs
}

/// Who a goal act or a session end came from, in words: from inside the agent's
/// tool call `call` (its `tool.call` seq) while it ran, or between the agent's calls
/// (the user, or a process of theirs: the record cannot tell which).
pub fn asked_by(g: &ExecutionGraph, call: Option<u64>) -> String {
    match call {
        Some(seq) => match g.tools().find(|(_, t)| t.seq == seq) {
            Some((_, t)) => format!("from inside the agent's {} call #{seq}", t.tool),
            None => format!("from inside the agent's call #{seq}"),
        },
        None => "between the agent's tool calls".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn bands() {
        assert_eq!(RiskLevel::of_score(0), RiskLevel::Low);
        assert_eq!(RiskLevel::of_score(19), RiskLevel::Low);
        assert_eq!(RiskLevel::of_score(20), RiskLevel::Medium);
        assert_eq!(RiskLevel::of_score(44), RiskLevel::Medium);
        assert_eq!(RiskLevel::of_score(45), RiskLevel::High);
        assert_eq!(RiskLevel::of_score(69), RiskLevel::High);
        assert_eq!(RiskLevel::of_score(70), RiskLevel::Critical);
    }

    #[test]
    fn verification_commands_of_many_ecosystems() {
        for (cmd, kind) in [
            ("cargo test --workspace", Some("test")),
            ("cargo nextest run", Some("test")),
            ("go test ./...", Some("test")),
            ("npm test", Some("test")),
            ("pnpm run test:unit", Some("test")),
            ("yarn build", Some("build")),
            ("npx vitest run", Some("test")),
            ("python -m pytest -q", Some("test")),
            ("pytest tests/", Some("test")),
            ("mvn -q verify", Some("test")),
            ("./gradlew check", Some("test")),
            ("make test", Some("test")),
            ("cd api && npm run lint", Some("lint")),
            ("tsc --noEmit", Some("typecheck")),
            ("bundle exec rspec", Some("test")),
            ("dotnet test", Some("test")),
            ("ls -la", None),
            ("cat Makefile", None),
            ("git test-thing", None),
        ] {
            assert_eq!(verification_kind(cmd), kind, "{cmd}");
        }
    }

    use tacho_schema::{
        EditOp, Event, EventBody, FileEdit, SessionEnd, SessionStart, ToolCall, ToolResult,
        VerificationRun,
    };

    fn graph(bodies: Vec<EventBody>) -> ExecutionGraph {
        let mut g = ExecutionGraph::new("s");
        let mut all = vec![EventBody::SessionStart(SessionStart::default())];
        all.extend(bodies);
        for (i, body) in all.into_iter().enumerate() {
            g.apply(
                i as u64,
                &Event {
                    session: "s".into(),
                    time_unix_ns: i as i64 * 1_000_000,
                    body,
                },
            );
        }
        g
    }
    fn edit(path: &str) -> EventBody {
        EventBody::FileEdit(FileEdit {
            path: path.into(),
            op: EditOp::Modify,
            lines_added: Some(3),
            ..Default::default()
        })
    }
    fn shell(id: &str, cmd: &str, status: ToolStatus) -> Vec<EventBody> {
        vec![
            EventBody::ToolCall(ToolCall {
                call_id: id.into(),
                tool: "bash".into(),
                target: Some(cmd.into()),
                ..Default::default()
            }),
            EventBody::ToolResult(ToolResult {
                call_id: id.into(),
                status,
                ..Default::default()
            }),
        ]
    }
    fn end(reason: EndReason) -> EventBody {
        EventBody::SessionEnd(SessionEnd {
            reason,
            message: None,
        })
    }
    fn has(r: &RiskAssessment, id: &str) -> bool {
        r.factors.iter().any(|f| f.id == id)
    }

    #[test]
    fn unverified_edits_need_validation_even_when_the_score_is_low() {
        let r = assess(&graph(vec![edit("src/a.rs"), end(EndReason::Completed)]));
        assert!(has(&r, "unverified"));
        assert_eq!(r.level, RiskLevel::Medium);
        assert_eq!(r.readiness, Readiness::NeedsValidation);
        assert!(!r.verified);
        assert!(r.disclaimer.contains("unverified"));
    }

    #[test]
    fn a_passing_run_after_the_last_edit_verifies() {
        let mut b = vec![edit("src/a.rs")];
        b.extend(shell("c1", "cargo test", ToolStatus::Ok));
        b.push(end(EndReason::Completed));
        let r = assess(&graph(b));
        assert!(r.verified);
        assert!(!has(&r, "unverified"));
        assert_eq!(r.readiness, Readiness::Ready);
        assert_eq!(r.level, RiskLevel::Low);
    }

    /// Every agent's shell runs verification (issue 42, red team: Gemini CLI's and
    /// Qwen Code's `run_shell_command`, Droid's `Execute` and Cline's
    /// `execute_command` never counted, while a piped payload naming `Bash` did).
    #[test]
    fn every_agents_shell_runs_verification() {
        for tool in ["Bash", "run_shell_command", "Execute", "execute_command"] {
            let mut b = vec![edit("src/a.rs")];
            let mut run = shell("c1", "pytest -q", ToolStatus::Ok);
            if let Some(EventBody::ToolCall(c)) = run.first_mut() {
                c.tool = tool.into();
            }
            b.extend(run);
            let r = assess(&graph(b));
            assert!(r.verified, "{tool}: {:?}", r.factors);
        }
    }

    #[test]
    fn an_edit_after_the_last_passing_run_is_flagged() {
        let mut b = shell("c1", "go test ./...", ToolStatus::Ok);
        b.push(edit("src/a.go"));
        b.push(end(EndReason::Completed));
        let r = assess(&graph(b));
        assert!(has(&r, "edited_after_verification"));
        assert_eq!(r.readiness, Readiness::NeedsValidation);
    }

    /// Issue 42 (9): a run whose command can mask its status is no verification,
    /// whatever its exit code (the agent's shell has no errexit or pipefail).
    #[test]
    fn a_run_that_masks_its_status_is_no_evidence() {
        for masked in ["pytest || true", "pytest | tail -3", "npm test; echo done"] {
            let mut b = vec![edit("src/a.rs")];
            b.extend(shell("c1", masked, ToolStatus::Ok));
            let r = assess(&graph(b));
            assert!(has(&r, "unverified"), "{masked}: {:?}", r.factors);
            assert!(r.verification_runs.is_empty(), "{masked}");
        }
        let mut b = vec![edit("src/a.rs")];
        b.extend(shell("c1", "cd src && pytest -q", ToolStatus::Ok));
        assert!(!has(&assess(&graph(b)), "unverified"));
    }

    #[test]
    fn a_denied_test_run_is_no_evidence() {
        let mut b = vec![edit("src/a.rs")];
        b.extend(shell("c1", "cargo test", ToolStatus::Denied));
        let r = assess(&graph(b));
        assert!(has(&r, "unverified"), "{:?}", r.factors);
    }

    #[test]
    fn the_score_alone_is_the_assessments_score() {
        let mut failing = vec![edit("src/a.rs"), edit("web/index.ts")];
        failing.extend(shell("c1", "cargo test", ToolStatus::Error));
        let mut passing = vec![edit("src/auth/login.rs"), edit("include/api.h")];
        passing.extend(shell("c2", "pytest -q", ToolStatus::Ok));
        passing.push(edit("docs/x.md"));
        let sessions = [
            vec![],
            vec![end(EndReason::Completed)],
            failing,
            passing,
            (0..40).map(|i| edit(&format!("d{i}/f.rs"))).collect(),
            vec![
                goal_created("g1", None),
                goal_update("g1", tacho_schema::GoalAction::Complete, false),
                end(EndReason::GateBlocked),
            ],
        ];
        let mut scores = std::collections::BTreeSet::new();
        for bodies in sessions {
            let g = graph(bodies);
            let full = assess(&g);
            assert_eq!(risk_score(&g), (full.score, full.level));
            assert!(full.factors.iter().all(|f| !f.evidence.is_empty()));
            scores.insert(full.score);
        }
        // (Sessions of different scores: the comparison is not of one value.)
        assert!(scores.len() >= 4, "{scores:?}");
    }

    #[test]
    fn failed_verification_and_a_blocked_gate_block() {
        let r = assess(&graph(vec![
            edit("src/a.rs"),
            EventBody::VerificationRun(VerificationRun {
                command: "npm test".into(),
                status: VerificationStatus::Failed,
                ..Default::default()
            }),
        ]));
        assert!(has(&r, "verification_failed"));
        assert_eq!(r.readiness, Readiness::Blocked);
        let r = assess(&graph(vec![end(EndReason::GateBlocked)]));
        assert!(has(&r, "run_ending"));
        assert_eq!(r.readiness, Readiness::Blocked);
    }

    #[test]
    fn security_sensitive_changes_need_review() {
        let mut b = vec![edit("src/auth/login.ts"), edit(".github/workflows/ci.yml")];
        b.extend(shell("c1", "npm test", ToolStatus::Ok));
        b.push(end(EndReason::Completed));
        let r = assess(&graph(b));
        let f = r
            .factors
            .iter()
            .find(|f| f.id == "security_sensitive")
            .unwrap();
        assert_eq!(f.weight, 16);
        assert!(f.evidence.contains("src/auth/login.ts"));
        assert_eq!(r.readiness, Readiness::NeedsReview);
    }

    #[test]
    fn sensitive_and_api_paths() {
        assert!(is_security_sensitive("src/auth/login.ts"));
        assert!(is_security_sensitive(".env"));
        assert!(is_security_sensitive("config/.env.production"));
        assert!(is_security_sensitive(".github/workflows/ci.yml"));
        assert!(is_security_sensitive("src/middleware/session.ts"));
        assert!(!is_security_sensitive("src/orders/list.ts"));
        assert!(is_api_surface("src/api.ts"));
        assert!(is_api_surface("proto/orders.proto"));
        assert!(!is_api_surface("test/orders.test.ts"));
    }

    fn goal_created(goal: &str, revises: Option<&str>) -> EventBody {
        EventBody::GoalCreated(tacho_schema::GoalCreated {
            goal: goal.into(),
            revises: revises.map(Into::into),
            ..Default::default()
        })
    }
    fn goal_update(goal: &str, action: tacho_schema::GoalAction, accepted: bool) -> EventBody {
        EventBody::GoalUpdate(tacho_schema::GoalUpdate {
            goal: goal.into(),
            action,
            accepted,
            ..Default::default()
        })
    }
    fn receipt(goal: &str, passed: bool) -> EventBody {
        EventBody::GoalCheckRun(tacho_schema::GoalCheckRun {
            goal: goal.into(),
            check: "parity".into(),
            command: "sh checks/parity.sh".into(),
            exit_code: Some(if passed { 0 } else { 1 }),
            passed,
            ..Default::default()
        })
    }

    /// A goal check's receipt is a verification run: one that passed after the last
    /// edit verifies the change, one that failed last fails it.
    #[test]
    fn a_goal_check_after_the_last_edit_is_verification() {
        let r = assess(&graph(vec![
            goal_created("goal_1", None),
            edit("src/a.rs"),
            receipt("goal_1", true),
            goal_update("goal_1", tacho_schema::GoalAction::Complete, true),
            end(EndReason::Completed),
        ]));
        assert!(r.verified, "{r:?}");
        assert!(!has(&r, "unverified"), "{r:?}");
        assert_eq!(r.readiness, Readiness::Ready);
        assert_eq!(r.confidence, Confidence::High);
        let r = assess(&graph(vec![
            goal_created("goal_1", None),
            edit("src/a.rs"),
            receipt("goal_1", false),
        ]));
        assert!(has(&r, "verification_failed"), "{r:?}");
        assert_eq!(r.readiness, Readiness::Blocked);
    }

    /// The pause of the goal that is current blocks; the pause of a goal a revision
    /// replaced settles nothing, nor does a pause lifted by a resume and then a
    /// completion.
    #[test]
    fn a_paused_current_revision_blocks_and_a_replaced_one_does_not() {
        use tacho_schema::GoalAction::{Complete, Pause};
        let verified = |mut b: Vec<EventBody>| {
            b.push(edit("src/a.rs"));
            b.extend(shell("t", "cargo test", ToolStatus::Ok));
            b.push(end(EndReason::Completed));
            assess(&graph(b))
        };
        // goal_1 stalled and was replaced; goal_2, the current one, stalled too.
        let stalled = |g: &str| {
            vec![
                goal_update(g, Complete, false),
                goal_update(g, Complete, false),
                goal_update(g, Complete, false),
                goal_update(g, Pause, true),
            ]
        };
        let mut b = vec![goal_created("goal_1", None)];
        b.extend(stalled("goal_1"));
        b.push(goal_created("goal_2", Some("goal_1")));
        let replaced_only = verified(b.clone());
        assert!(
            !has(&replaced_only, "goal_not_completed"),
            "{replaced_only:?}"
        );
        assert_eq!(replaced_only.readiness, Readiness::Ready);
        b.extend(stalled("goal_2"));
        let r = verified(b.clone());
        assert!(has(&r, "goal_not_completed"), "{r:?}");
        assert_eq!(r.readiness, Readiness::Blocked);
        let f = r.factors.iter().find(|f| f.id == "goal_not_completed");
        let evidence = f.map(|f| f.evidence.as_str()).unwrap_or_default();
        assert!(evidence.contains("goal goal_2 was paused"), "{evidence}");
        assert!(!evidence.contains("goal_1"), "{evidence}");
        // A pause alone (no refusal in this record) blocks as well.
        let r = verified(vec![
            goal_created("goal_1", None),
            goal_update("goal_1", Pause, true),
        ]);
        assert_eq!(r.readiness, Readiness::Blocked, "{r:?}");
        // Resumed, checked and completed: ready.
        b.push(goal_update("goal_2", Pause, false));
        b.push(receipt("goal_2", true));
        b.push(goal_update("goal_2", Complete, true));
        let r = verified(b);
        assert!(!has(&r, "goal_not_completed"), "{r:?}");
        assert_eq!(r.readiness, Readiness::Ready, "{r:?}");
    }

    /// A log written before completing a replaced goal was refused: the earlier
    /// goal's accepted completion does not make its stalled revision ready.
    #[test]
    fn readiness_comes_from_the_current_revision() {
        use tacho_schema::{GoalAction, GoalCreated, GoalUpdate};
        let created = |goal: &str, revises: Option<&str>| {
            EventBody::GoalCreated(GoalCreated {
                goal: goal.into(),
                revises: revises.map(Into::into),
                ..Default::default()
            })
        };
        let update = |goal: &str, action: GoalAction, accepted: bool| {
            EventBody::GoalUpdate(GoalUpdate {
                goal: goal.into(),
                action,
                accepted,
                ..Default::default()
            })
        };
        let r = assess(&graph(vec![
            created("goal_1", None),
            created("goal_2", Some("goal_1")),
            update("goal_1", GoalAction::Complete, true),
            update("goal_2", GoalAction::Complete, false),
            update("goal_2", GoalAction::Pause, true),
            end(EndReason::Completed),
        ]));
        assert!(has(&r, "goal_not_completed"), "{r:?}");
        assert_eq!(r.readiness, Readiness::Blocked);
        // The replacement completed: ready, whatever the earlier goal's events said.
        let r = assess(&graph(vec![
            created("goal_1", None),
            update("goal_1", GoalAction::Complete, false),
            created("goal_2", Some("goal_1")),
            update("goal_2", GoalAction::Complete, true),
            end(EndReason::Completed),
        ]));
        assert!(!has(&r, "goal_not_completed"), "{r:?}");
    }

    /// SPEC §8.2 documents this table: the same factors, each weight rule in the same
    /// words (the lowest threshold of a count in its "when"), and the same factors a
    /// rollback of tacho's is not scored by.
    #[test]
    fn the_specs_factor_table_is_the_table() {
        let spec = include_str!("../../SPEC.md");
        let section = spec
            .split("### 8.2 ")
            .nth(1)
            .and_then(|s| s.split("\n### ").next())
            .expect("SPEC §8.2");
        let rows: BTreeMap<&str, Vec<&str>> = section
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| {
                let (id, rest) = l.split_once("` | ")?;
                Some((id, rest.trim_end_matches(" |").split(" | ").collect()))
            })
            .collect();
        let documented: BTreeMap<&str, &str> =
            rows.iter().map(|(id, cells)| (*id, cells[0])).collect();
        let table: BTreeMap<&str, String> = FACTORS
            .iter()
            .map(|r| (r.id, r.weight.to_string()))
            .collect();
        let table: BTreeMap<&str, &str> = table.iter().map(|(id, w)| (*id, w.as_str())).collect();
        assert_eq!(documented, table);
        for rule in FACTORS {
            if let Weight::Over(&[(lowest, _), ..]) = rule.weight {
                let when = rows[rule.id][1];
                assert!(
                    when.contains(&format!("more than {}", thousands(lowest))),
                    "{}: {when}",
                    rule.id
                );
            }
        }
        let rollback = section
            .split("A rollback tacho applied")
            .nth(1)
            .and_then(|s| s.split(" do not weigh").next())
            .and_then(|s| s.split(" so ").nth(1))
            .expect("SPEC §8.2 on rollbacks");
        let unscored: BTreeSet<&str> = rollback.split('`').skip(1).step_by(2).collect();
        let table: BTreeSet<&str> = FACTORS
            .iter()
            .filter(|r| !r.scores_rollbacks)
            .map(|r| r.id)
            .collect();
        assert_eq!(unscored, table);
    }
}
