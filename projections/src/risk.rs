//! The risk assessment: a deterministic heuristic over a session's execution graph.
//!
//! It is a review aid, not a probability, and not a statement that code is safe. Every
//! point of the score comes from a named factor with its evidence and a mitigation.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use aho_corasick::AhoCorasick;
use serde::Serialize;
use tacho_schema::{EndReason, ToolStatus, VerificationStatus};

use crate::graph::{ExecutionGraph, GoalMark};

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

/// [`assess`], with the factors' evidence and paths only when `detail` (the weights,
/// score, level and readiness are the same either way).
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

fn assess_with(g: &ExecutionGraph, detail: bool) -> RiskAssessment {
    let text = |f: &dyn Fn() -> String| if detail { f() } else { String::new() };
    let owned = |v: &[&String]| -> Vec<String> {
        if detail {
            v.iter().map(|f| f.to_string()).collect()
        } else {
            Vec::new()
        }
    };
    let mut factors = Vec::new();
    let files: Vec<&String> = g.files.keys().collect();
    let n_files = files.len() as u64;
    let lines: u64 = g
        .files
        .values()
        .map(|f| f.lines_added + f.lines_removed)
        .sum();
    let list = |v: &[&String]| -> String {
        let mut s: Vec<&str> = v.iter().take(5).map(|x| x.as_str()).collect();
        if v.len() > 5 {
            s.push("...");
        }
        s.join(", ")
    };

    if n_files > 0 {
        factors.push(RiskFactor {
            id: "files_changed",
            weight: (n_files as u32 * 5 / 2).min(20),
            evidence: text(&|| format!("{n_files} file(s) changed: {}", list(&files))),
            mitigation: "Review every changed file; split unrelated changes into separate pull requests.",
            paths: owned(&files),
        });
    }
    if lines > 500 {
        factors.push(RiskFactor {
            id: "lines_changed",
            weight: if lines > 2000 { 10 } else { 5 },
            evidence: text(&|| format!("{lines} lines added or removed")),
            mitigation: "Large diffs hide mistakes: review in parts, or ask the agent for smaller steps.",
            paths: Vec::new(),
        });
    }
    // Top-level areas of the change. Tests and docs travel with the code they cover,
    // so they are not areas of their own.
    let areas: BTreeSet<&str> = files
        .iter()
        .filter(|f| f.contains('/'))
        .map(|f| f.split('/').next().unwrap_or(f))
        .filter(|a| !COMPANION_AREAS.contains(&a.to_ascii_lowercase().as_str()))
        .collect();
    if areas.len() > 1 {
        factors.push(RiskFactor {
            id: "cross_area",
            weight: ((areas.len() as u32 - 1) * 5).min(15),
            evidence: text(&|| {
                format!(
                    "changes span {} top-level areas: {}",
                    areas.len(),
                    areas.iter().copied().collect::<Vec<_>>().join(", ")
                )
            }),
            mitigation: "Have an owner of each area review its part.",
            paths: Vec::new(),
        });
    }
    let failures: Vec<_> = g
        .tools()
        .filter(|(_, t)| t.status.is_some_and(|s| s != ToolStatus::Ok))
        .collect();
    if !failures.is_empty() {
        factors.push(RiskFactor {
            id: "tool_failures",
            weight: (failures.len() as u32 * 4).min(20),
            evidence: text(&|| {
                format!(
                    "{} failed tool call(s): {}",
                    failures.len(),
                    failures
                        .iter()
                        .take(3)
                        .map(|(s, t)| format!(
                            "step {} {}{}",
                            s.number,
                            t.tool,
                            t.target
                                .as_ref()
                                .map(|x| format!(" {x}"))
                                .unwrap_or_default()
                        ))
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            }),
            mitigation: "Check that every failure was resolved, not worked around.",
            paths: Vec::new(),
        });
    }
    // Verification: recorded runs, shell calls of known test runners and builds, and
    // goal checks' receipts.
    let runs = verification_runs(g);
    let last_edit = g.files.values().map(|f| f.last_edit_seq).max();
    let last_run = runs.last().map(|r| (r.seq, r.passed, &r.command));
    let verified = match (last_run, last_edit) {
        (Some((seq, true, _)), Some(edit)) => seq > edit,
        (Some((_, true, _)), None) => true,
        _ => false,
    };
    match (last_run, last_edit) {
        (None, Some(_)) => factors.push(RiskFactor {
            id: "unverified",
            weight: 15,
            evidence: text(&|| "files changed and no verification run (test, build, lint or goal check) was recorded".into()),
            mitigation: "Run the test suite on the change before merging.",
            paths: Vec::new(),
        }),
        (Some((_, false, cmd)), _) => factors.push(RiskFactor {
            id: "verification_failed",
            weight: 20,
            evidence: text(&|| format!("the last verification failed: {cmd}")),
            mitigation: "Fix the failure and run the verification again.",
            paths: Vec::new(),
        }),
        (Some((seq, true, cmd)), Some(edit)) if seq < edit => factors.push(RiskFactor {
            id: "edited_after_verification",
            weight: 10,
            evidence: text(&|| format!("files changed after the last passing run ({cmd})")),
            mitigation: "Run the verification again on the final state.",
            paths: Vec::new(),
        }),
        _ => {}
    }
    if n_files > 0 && g.snapshots.is_empty() {
        factors.push(RiskFactor {
            id: "no_diff_snapshot",
            weight: 5,
            evidence: text(&|| "no file snapshot was recorded, so the diff cannot be checked against the edits the agent reported".into()),
            mitigation: "Record snapshots (adapters take them at step boundaries) so the real diff can be reviewed.",
            paths: Vec::new(),
        });
    }
    if !g.unclaimed.is_empty() {
        let paths: Vec<String> = g
            .unclaimed
            .iter()
            .flat_map(|u| u.files.iter().map(|f| f.path.clone()))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        let ranges: Vec<String> = g
            .unclaimed
            .iter()
            .map(|u| format!("#{}..#{}", u.after_seq, u.before_seq))
            .collect();
        let shown: Vec<&String> = paths.iter().collect();
        factors.push(RiskFactor {
            id: "unclaimed_changes",
            weight: 10,
            evidence: text(&|| format!(
                "{} file(s) changed with no tool call running (between events {}): {}",
                paths.len(),
                ranges.join(", "),
                list(&shown)
            )),
            mitigation: "Find out who made these changes (the user, another process, a tool whose hooks did not fire); undo one with tacho session rollback --unclaimed N.",
            paths: if detail { paths } else { Vec::new() },
        });
    }
    let api: Vec<&String> = files
        .iter()
        .copied()
        .filter(|f| is_api_surface(f))
        .collect();
    if !api.is_empty() {
        factors.push(RiskFactor {
            id: "api_surface",
            weight: (api.len() as u32 * 4).min(12),
            evidence: text(&|| {
                format!(
                    "{} file(s) of the API surface changed: {}",
                    api.len(),
                    list(&api)
                )
            }),
            mitigation: "Check callers and compatibility; document the change.",
            paths: owned(&api),
        });
    }
    let sensitive: Vec<&String> = files
        .iter()
        .copied()
        .filter(|f| is_security_sensitive(f))
        .collect();
    if !sensitive.is_empty() {
        factors.push(RiskFactor {
            id: "security_sensitive",
            weight: (sensitive.len() as u32 * 8).min(24),
            evidence: text(&|| format!("security-sensitive path(s) touched: {}", list(&sensitive))),
            mitigation: "Ask for a security review of these files.",
            paths: owned(&sensitive),
        });
    }
    let hook_files: Vec<&String> = files
        .iter()
        .copied()
        .filter(|f| is_agent_hook_file(f))
        .collect();
    if !hook_files.is_empty() {
        factors.push(RiskFactor {
            id: "agent_hooks_edited",
            weight: 20,
            evidence: text(&|| {
                format!(
                    "an agent's hook or plugin file changed in the session: {}",
                    list(&hook_files)
                )
            }),
            mitigation: "Read the change (tacho hooks status says whether the hooks can still fire): an agent that edits its hook files can switch its own recording off.",
            paths: owned(&hook_files),
        });
    }
    let ending = match g.end_reason {
        Some(EndReason::GateBlocked) => Some((15, "the completion gate blocked the session")),
        Some(EndReason::StepLimit) => Some((10, "the session hit its step limit")),
        Some(EndReason::Stalled) => Some((10, "the session stalled")),
        Some(EndReason::Aborted) => Some((10, "the session was aborted")),
        Some(EndReason::Error) => Some((10, "the session ended with an error")),
        Some(EndReason::BudgetLimited) => Some((5, "the session ran out of budget")),
        Some(EndReason::Completed) => None,
        None => Some((
            5,
            "the session has not ended (running, or its end was not recorded)",
        )),
    };
    if let Some((weight, evidence)) = ending {
        factors.push(RiskFactor {
            id: "run_ending",
            weight,
            evidence: text(&|| evidence.into()),
            mitigation: "Treat the work as unfinished until it is completed and verified.",
            paths: Vec::new(),
        });
    }
    // Goal assurance: files outside a goal's change (tests, fixtures, configuration,
    // check scripts) edited since its plan was frozen, as each check's latest receipt
    // found them: a weakened test is how a goal completes without the work.
    let mut latest: std::collections::BTreeMap<(&str, &str), &Vec<String>> =
        std::collections::BTreeMap::new();
    for e in &g.goals.events {
        if let Some(check) = &e.check {
            latest.insert((e.goal.as_str(), check.as_str()), &e.changed_since_freeze);
        }
    }
    let edited: BTreeSet<&str> = latest
        .values()
        .flat_map(|v| v.iter().map(String::as_str))
        .collect();
    if !edited.is_empty() {
        let shown: Vec<String> = edited.iter().map(|p| p.to_string()).collect();
        factors.push(RiskFactor {
            id: "changed_after_freeze",
            weight: (edited.len() as u32 * 5).min(15),
            evidence: text(&|| {
                format!(
                    "{} file(s) outside the goal's change edited after its plan was frozen: {}",
                    shown.len(),
                    list(&shown.iter().collect::<Vec<_>>())
                )
            }),
            mitigation: "Read the diff of each against the goal's start (tacho goal status): a weakened test or check script lets a goal complete without the work.",
            paths: if detail {
                edited.iter().filter_map(|p| p.get(2..)).map(str::to_owned).collect()
            } else {
                Vec::new()
            },
        });
    }
    // Goal contracts rewritten after the freeze (`goal revise`, `goal replace`, from
    // the user or the agent's shell): each is shown, with what it weakened.
    let revisions: Vec<&crate::graph::GoalEventNode> = g
        .goals
        .events
        .iter()
        .filter(|e| e.revises.is_some())
        .collect();
    if !revisions.is_empty() {
        let weakened = revisions.iter().any(|e| !e.weakened.is_empty());
        factors.push(RiskFactor {
            id: "goal_revised",
            weight: (revisions.len() as u32 * 5 + if weakened { 10 } else { 0 }).min(20),
            evidence: text(&|| {
                revisions
                    .iter()
                    .map(|e| {
                        format!(
                            "goal {} revised as {} at #{} ({}), {}{}",
                            e.revises.as_deref().unwrap_or("?"),
                            e.goal,
                            e.seq,
                            e.correction.as_deref().unwrap_or("no correction given"),
                            asked_by(g, e.during_call),
                            if e.weakened.is_empty() {
                                String::new()
                            } else {
                                format!(": weakened — {}", e.weakened.join("; "))
                            }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            }),
            mitigation: "Read each revision's correction and what it weakened (tacho goal status): a contract rewritten during the work can let the goal complete without it.",
            paths: Vec::new(),
        });
    }
    // The agent acting on tacho from inside its own tool calls (its shell, or tacho's
    // MCP server): a contract revised, a goal blocked or resumed, the session ended
    // while one of its calls ran. The record's order proves it: tacho wrote these
    // between that call's start and its result (SPEC §3.1).
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
    if !acts.is_empty() {
        factors.push(RiskFactor {
            id: "agent_acted_on_tacho",
            weight: (acts.len() as u32 * 10).min(25),
            evidence: text(&|| acts.join("; ")),
            mitigation: "The agent changed what tacho holds it to, from inside its own tool calls: read each act (tacho session show), undo what you did not ask for, and rerun the checks in CI (ci verify --rerun).",
            paths: Vec::new(),
        });
    }
    // Goals set aside by the user (`goal clear`): never silent.
    let cleared: Vec<&crate::graph::GoalEventNode> = g
        .goals
        .events
        .iter()
        .filter(|e| e.mark == GoalMark::Cleared)
        .collect();
    if !cleared.is_empty() {
        factors.push(RiskFactor {
            id: "goal_cleared",
            weight: (cleared.len() as u32 * 5).min(15),
            evidence: text(&|| {
                cleared
                    .iter()
                    .map(|e| format!("goal {} cleared at #{}", e.goal, e.seq))
                    .collect::<Vec<_>>()
                    .join("; ")
            }),
            mitigation: "A cleared goal was set aside without its work being proven: read why (tacho goal status --goal ID) and make sure the work it asked for is not needed.",
            paths: Vec::new(),
        });
    }
    // The recorder obstructed: hooks that waited out their budget for a lock another
    // process held, and recorded nothing of what they saw (written by tacho once the
    // lock freed, SPEC §3.1). What happened meanwhile is missing from this record.
    let held: Vec<&crate::graph::ErrorNode> = g
        .errors
        .iter()
        .filter(|e| e.code.as_deref() == Some(HOOK_LOCK_HELD))
        .collect();
    let made_up: Vec<&crate::graph::ErrorNode> = g
        .errors
        .iter()
        .filter(|e| e.code.as_deref() == Some(CALL_UNCONFIRMED))
        .collect();
    if !made_up.is_empty() {
        factors.push(RiskFactor {
            id: "calls_unconfirmed",
            weight: 20,
            evidence: text(&|| {
                made_up
                    .iter()
                    .take(5)
                    .map(|e| e.message.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            }),
            mitigation: "Tool calls were reported to tacho that the agent's own transcript does not hold: payloads piped to tacho hook from its shell. None counts as verification; look for the command that piped them.",
            paths: Vec::new(),
        });
    }
    let missed: Vec<&crate::graph::ErrorNode> = g
        .errors
        .iter()
        .filter(|e| e.code.as_deref() == Some(WATCHER_MISSED))
        .collect();
    if !missed.is_empty() {
        factors.push(RiskFactor {
            id: "watcher_missed",
            weight: 15,
            evidence: text(&|| {
                format!(
                    "{} turn end(s) where the watcher had not seen changes a scan found (first at #{}): {}",
                    missed.len(),
                    missed.first().map_or(0, |e| e.seq),
                    missed.first().map_or("", |e| e.message.as_str())
                )
            }),
            mitigation: "Files changed without a change event in the workspace (written through a hard link from outside it, or a shared mapping): the turn's end snapshot holds them, but the snapshots between may not; find what wrote them and rerun the checks in CI (ci verify --rerun).",
            paths: Vec::new(),
        });
    }
    let impostors: Vec<&crate::graph::ErrorNode> = g
        .errors
        .iter()
        .filter(|e| e.code.as_deref() == Some(WATCHER_IMPOSTOR))
        .collect();
    if !impostors.is_empty() {
        factors.push(RiskFactor {
            id: "watcher_impostor",
            weight: 20,
            evidence: text(&|| {
                format!(
                    "{} time(s) a process posed as tacho's watcher of the workspace (first at #{}): {}",
                    impostors.len(),
                    impostors.first().map_or(0, |e| e.seq),
                    impostors.first().map_or("", |e| e.message.as_str())
                )
            }),
            mitigation: "Something answered on the watcher's socket in tacho's place: tacho read the workspace itself, so the record holds, but look for the process (it may be the agent's) and rerun the checks in CI (ci verify --rerun).",
            paths: Vec::new(),
        });
    }
    if !held.is_empty() {
        factors.push(RiskFactor {
            id: "recorder_obstructed",
            weight: 20,
            evidence: text(&|| {
                format!(
                    "{} hook(s) of the agent waited out their budget for a lock another process held and recorded nothing (first at #{}): {}",
                    held.len(),
                    held.first().map_or(0, |e| e.seq),
                    held.first().map_or("", |e| e.message.as_str())
                )
            }),
            mitigation: "Something held tacho's lock while the agent worked: what the agent did then is missing from the record. Look for a process of the agent's holding it (flock) and rerun the checks in CI (ci verify --rerun).",
            paths: Vec::new(),
        });
    }
    // Goal assurance: a refused completion that no later completion made good means
    // the goal's own checks say the work is not done.
    // Only current goals count: a goal replaced by a revision settles nothing (its
    // completion does not complete the replacement).
    let goals = &g.goals;
    let open: Vec<(&String, &crate::graph::GoalTally)> = goals.open_goals().collect();
    let goal_open = !open.is_empty();
    if goal_open {
        factors.push(RiskFactor {
            id: "goal_not_completed",
            weight: 15,
            evidence: text(&|| {
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
            }),
            mitigation: "Make the goal's checks pass (tacho goal status) before calling the work done.",
            paths: Vec::new(),
        });
    }
    // A rollback tacho applied restores an earlier state: what it changed is not an
    // agent's work to review (the session it rolled back is scored for that), so only
    // what concerns the act itself weighs — how it ended, changes no tool call made
    // while it ran, hook files it restored, tacho obstructed.
    if is_tachos_rollback(g) {
        factors.retain(|f| !ROLLBACK_UNSCORED.contains(&f.id));
    }
    let score = factors.iter().map(|f| f.weight).sum::<u32>().min(100);
    let level = RiskLevel::of_score(score);
    let confidence = match (n_files > 0, !runs.is_empty()) {
        (true, true) => Confidence::High,
        (true, false) | (false, true) => Confidence::Medium,
        (false, false) => Confidence::Low,
    };
    let failed_last = matches!(last_run, Some((_, false, _)));
    let readiness = if g.end_reason == Some(EndReason::GateBlocked) || failed_last || goal_open {
        Readiness::Blocked
    } else if n_files > 0 && !verified {
        Readiness::NeedsValidation
    } else if level >= RiskLevel::High || !sensitive.is_empty() || !g.unclaimed.is_empty() {
        Readiness::NeedsReview
    } else {
        Readiness::Ready
    };
    RiskAssessment {
        session: g.session.clone(),
        score,
        level,
        confidence,
        readiness,
        factors,
        files_changed: n_files,
        lines_changed: lines,
        tool_failures: failures.len() as u64,
        verified,
        verification_runs: runs,
        disclaimer: RISK_DISCLAIMER,
    }
}

/// The factors a rollback of tacho's is not scored by: those about the work of an
/// agent, which a rollback only undoes.
const ROLLBACK_UNSCORED: &[&str] = &[
    "files_changed",
    "lines_changed",
    "cross_area",
    "unverified",
    "edited_after_verification",
    "no_diff_snapshot",
    "api_surface",
    "security_sensitive",
];

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
}
