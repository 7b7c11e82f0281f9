//! The review-receipts verifier (`tacho review verify --root DIR`, BRIEF §3): external
//! review rounds are evidence only if every rule holds. A non-empty review log is never
//! success by itself.
//!
//! Layout (SPEC.md §12.6):
//!
//! ```text
//! DIR/review.json        {"sourcePaths": ["src", ...]}
//! DIR/<round>/round.json {"commit": SHA, "reviewers": [{"name", "exitCode",
//!                         "verdicts": [..], "findings": ["F1", ...]}]}
//! DIR/dispositions.json  [{"round", "cli", "id", "status": "fixed"|"rejected",
//!                         "evidence", "regression"?: {"file", "fullName"}}]
//! ```
//!
//! Rounds are the subdirectories holding a `round.json`, in name order (`round-01`,
//! `round-02`, ...); the last one is the current round. The regression tests of fixed
//! findings are run by the verifier itself (vitest by default, retries 0), never read
//! from reports someone else wrote. The test directory and the runner are options of
//! the command (so a frozen check command fixes them), not files in the workspace.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use tacho_git::snapshot::scan;
use tacho_git::snapshot::{SnapshotError, read_regular};

/// The longest review declaration, round, disposition list or runner report read (each
/// is read without blocking, and only when it is a regular file).
const FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// The longest source file compared with its committed blob.
const SOURCE_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// The default runner: the project's vitest, without retries, writing its JSON report.
pub const DEFAULT_RUNNER: &[&str] = &[
    "node_modules/.bin/vitest",
    "run",
    "--retry=0",
    "--reporter=json",
    "--outputFile={report}",
    "{files}",
];

/// How regression tests are found and run: options of the command, so that the check
/// command a plan freezes fixes them (the workspace's files are the agent's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewOptions {
    /// Regression test files must be literal paths under it.
    pub test_directory: String,
    /// argv; `{report}` becomes the path of the Jest-shaped JSON report the runner must
    /// write, a lone `{files}` the test files to run. A relative program path with a
    /// `/` is the workspace's.
    pub runner: Vec<String>,
}

impl Default for ReviewOptions {
    fn default() -> Self {
        ReviewOptions {
            test_directory: "tests".into(),
            runner: DEFAULT_RUNNER.iter().map(|s| s.to_string()).collect(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReviewFile {
    source_paths: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Round {
    commit: String,
    reviewers: Vec<Reviewer>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Reviewer {
    name: String,
    exit_code: Option<i64>,
    #[serde(default)]
    verdicts: Vec<String>,
    /// The ids of the findings this reviewer reported in this round.
    #[serde(default)]
    findings: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Disposition {
    round: String,
    cli: String,
    id: String,
    status: String,
    #[serde(default)]
    evidence: Option<String>,
    #[serde(default)]
    regression: Option<Regression>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Regression {
    file: String,
    full_name: String,
}

/// One broken rule, where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReviewProblem {
    /// The file or round it is about.
    pub at: String,
    pub problem: String,
}

/// The verdict of the verifier.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReviewReport {
    pub rounds: Vec<String>,
    pub reviewers: usize,
    pub findings: usize,
    pub tests_checked: usize,
    pub problems: Vec<ReviewProblem>,
}

const VERDICTS: &[&str] = &["approve", "request_changes", "comment"];

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    let b = read_regular(path, FILE_BYTES_MAX).map_err(|e| format!("cannot be read: {e}"))?;
    serde_json::from_slice(&b).map_err(|e| format!("invalid: {e}"))
}

/// A literal repository path under `dir`: relative, no `.`/`..` parts, no glob or
/// filter syntax (a runner would take it as a pattern).
fn literal_under(file: &str, dir: &str) -> bool {
    let dir = dir.trim_end_matches('/');
    !file.starts_with('/')
        && !file.contains(['*', '?', '[', ']', '{', '}', '\\'])
        && file
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
        && !dir.is_empty()
        && file.starts_with(&format!("{dir}/"))
}

/// Verifies the review receipts under `root` against the repository of `workspace`.
pub fn verify_reviews(
    root: &Path,
    workspace: &Path,
    opts: &ReviewOptions,
) -> Result<ReviewReport, SnapshotError> {
    let mut report = ReviewReport {
        rounds: Vec::new(),
        reviewers: 0,
        findings: 0,
        tests_checked: 0,
        problems: Vec::new(),
    };
    let mut problems: Vec<ReviewProblem> = Vec::new();
    let mut problem = |at: &str, p: String| {
        problems.push(ReviewProblem {
            at: at.to_owned(),
            problem: p,
        })
    };
    let ws = tacho_git::snapshot::canonical_workspace(workspace)?;
    let review: Option<ReviewFile> = match read_json(&root.join("review.json")) {
        Ok(r) => Some(r),
        Err(e) => {
            problem("review.json", e);
            None
        }
    };
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| SnapshotError::io(root, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("round.json").is_file())
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        problem(
            ".",
            "no review round (a directory with round.json): there is nothing to verify".into(),
        );
    }
    // Round name → (its position, its commit, reviewer → findings reported).
    type Found = BTreeMap<String, BTreeSet<String>>;
    let mut rounds: BTreeMap<String, (usize, String, Found)> = BTreeMap::new();
    let mut last_commit = None;
    for (i, dir) in dirs.iter().enumerate() {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        report.rounds.push(name.clone());
        let round: Round = match read_json(&dir.join("round.json")) {
            Ok(r) => r,
            Err(e) => {
                problem(&format!("{name}/round.json"), e);
                continue;
            }
        };
        last_commit = Some(round.commit.clone());
        if round.reviewers.is_empty() {
            problem(&name, "no reviewer".into());
        }
        let mut found = Found::new();
        for r in &round.reviewers {
            report.reviewers += 1;
            let at = format!("{name}/{}", r.name);
            if found.contains_key(&r.name) {
                problem(&at, "the reviewer appears twice in the round".into());
            }
            match r.exit_code {
                None => problem(
                    &at,
                    "no exit code recorded: the reviewer's run cannot be shown to have finished"
                        .into(),
                ),
                Some(0) => {}
                Some(c) => problem(&at, format!("the reviewer exited with {c}")),
            }
            match r.verdicts.as_slice() {
                [v] if VERDICTS.contains(&v.as_str()) => {}
                [v] => problem(
                    &at,
                    format!("verdict {v:?} is not one of {}", VERDICTS.join(", ")),
                ),
                [] => problem(&at, "no final verdict".into()),
                vs => problem(
                    &at,
                    format!("{} verdicts; exactly one final verdict is needed", vs.len()),
                ),
            }
            let ids = found.entry(r.name.clone()).or_default();
            for f in &r.findings {
                report.findings += 1;
                if !ids.insert(f.clone()) {
                    problem(&format!("{at}/{f}"), "the finding is reported twice".into());
                }
            }
        }
        rounds.insert(name, (i, round.commit, found));
    }
    // Every finding has exactly one disposition, and each disposition is of a finding.
    let dispositions: Vec<Disposition> = if dirs.is_empty() {
        Vec::new()
    } else {
        match read_json(&root.join("dispositions.json")) {
            Ok(d) => d,
            Err(e) => {
                problem("dispositions.json", e);
                Vec::new()
            }
        }
    };
    let ctx = scan::git_context(&ws)?;
    let mut disposed: BTreeSet<(String, String, String)> = BTreeSet::new();
    // Fixed findings whose regression test is to be run: (where, regression).
    let mut to_run: Vec<(String, Regression)> = Vec::new();
    for (n, d) in dispositions.iter().enumerate() {
        let at = format!("dispositions.json[{n}] {}/{}/{}", d.round, d.cli, d.id);
        let key = (d.round.clone(), d.cli.clone(), d.id.clone());
        if !disposed.insert(key) {
            problem(
                &at,
                "a second disposition of the same finding (duplicates fail, identical or not)"
                    .into(),
            );
            continue;
        }
        let Some((pos, commit, found)) = rounds.get(&d.round) else {
            problem(&at, format!("there is no round {:?}", d.round));
            continue;
        };
        if !found.get(&d.cli).is_some_and(|ids| ids.contains(&d.id)) {
            problem(
                &at,
                format!(
                    "{} reported no finding {} in round {}",
                    d.cli, d.id, d.round
                ),
            );
            continue;
        }
        if d.evidence.as_deref().is_none_or(|e| e.trim().is_empty()) {
            problem(&at, format!("{} without evidence", d.status));
        }
        match d.status.as_str() {
            "rejected" => {}
            "fixed" => {
                // The fix is shown by a later round on a newer revision.
                let newer = rounds
                    .values()
                    .any(|(p, c, _)| p > pos && descends(ctx.as_ref(), commit, c));
                if !newer {
                    problem(
                        &at,
                        format!(
                            "fixed, but no later review round reviewed a newer revision than {commit}"
                        ),
                    );
                }
                match &d.regression {
                    None => problem(&at, "fixed without a regression {file, fullName}".into()),
                    Some(r) if r.full_name.trim().is_empty() => {
                        problem(&at, "the regression's fullName is blank".into())
                    }
                    Some(r) if !literal_under(&r.file, &opts.test_directory) => problem(
                        &at,
                        format!(
                            "regression file {:?} is not a literal repository path under the test directory {:?}",
                            r.file, opts.test_directory
                        ),
                    ),
                    Some(r) => to_run.push((at.clone(), r.clone())),
                }
            }
            other => problem(
                &at,
                format!("status {other:?} is neither fixed nor rejected"),
            ),
        }
    }
    for (round, (_, _, found)) in &rounds {
        for (cli, ids) in found {
            for id in ids {
                if !disposed.contains(&(round.clone(), cli.clone(), id.clone())) {
                    problem(
                        &format!("{round}/{cli}/{id}"),
                        "the finding has no disposition".into(),
                    );
                }
            }
        }
    }
    // The regression tests, run here: each referenced assertion passes exactly once.
    if !to_run.is_empty() {
        let files: BTreeSet<String> = to_run.iter().map(|(_, r)| r.file.clone()).collect();
        match run_tests(&ws, &opts.runner, &files) {
            Err(e) => problem("runner", e),
            Ok(results) => {
                for (at, r) in &to_run {
                    report.tests_checked += 1;
                    let seen = results
                        .get(&(r.file.clone(), r.full_name.clone()))
                        .map_or(&[][..], Vec::as_slice);
                    let t = format!("{} {:?}", r.file, r.full_name);
                    match seen {
                        [s] if s == "passed" => {}
                        [] => problem(at, format!("regression test {t} was not run")),
                        [s] => problem(at, format!("regression test {t} did not pass ({s})")),
                        more => problem(
                            at,
                            format!(
                                "regression test {t} is ambiguous: {} assertions have that name ({}); it must pass exactly once",
                                more.len(),
                                more.join(", ")
                            ),
                        ),
                    }
                }
            }
        }
    }
    // The last round must be about the commit being verified, with nothing uncommitted
    // under the declared source paths.
    match (&ctx, last_commit) {
        (None, _) => problem(".", "the workspace is not inside a Git repository".into()),
        (Some(ctx), Some(c)) => {
            let head = ctx
                .repo
                .head_id()
                .map(|h| h.to_string())
                .unwrap_or_default();
            if !head.starts_with(&c) || c.len() < 7 {
                problem(
                    report.rounds.last().map_or(".", String::as_str),
                    format!("the last round reviewed {c}, but HEAD is {head}"),
                );
            }
            if let Some(review) = &review {
                let mut paths = review.source_paths.clone();
                paths.push(opts.test_directory.clone());
                for change in uncommitted(ctx, &paths)? {
                    problem(
                        &change,
                        "uncommitted change under the declared source paths or the test directory"
                            .into(),
                    );
                }
            }
        }
        (Some(_), None) => {}
    }
    report.problems = problems;
    Ok(report)
}

/// Whether commit `later` is a newer revision than `earlier`: both name commits of
/// the repository and `earlier` is a proper ancestor of `later`.
fn descends(ctx: Option<&scan::GitContext>, earlier: &str, later: &str) -> bool {
    let Some(ctx) = ctx else { return false };
    let id = |rev: &str| {
        ctx.repo
            .rev_parse_single(rev)
            .ok()
            .and_then(|i| i.object().ok())
            .and_then(|o| o.peel_to_commit().ok())
            .map(|c| c.id)
    };
    match (id(earlier), id(later)) {
        (Some(e), Some(l)) if e != l => ctx
            .repo
            .merge_base(e, l)
            .ok()
            .flatten()
            .is_some_and(|m| m.detach() == e),
        _ => false,
    }
}

/// Runs the test files with the runner (vitest by default) from the workspace root and
/// reads its Jest-shaped JSON report: (file, fullName) → the status of each assertion
/// with that name.
#[allow(clippy::type_complexity)]
fn run_tests(
    ws: &Path,
    template: &[String],
    files: &BTreeSet<String>,
) -> Result<BTreeMap<(String, String), Vec<String>>, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let out = dir.path().join("report.json");
    let mut argv: Vec<String> = Vec::new();
    for w in template {
        if w == "{files}" {
            argv.extend(files.iter().cloned());
        } else {
            argv.push(w.replace("{report}", &out.display().to_string()));
        }
    }
    let Some((program, args)) = argv.split_first() else {
        return Err("the runner command is empty".into());
    };
    let program_path = if program.contains('/') && !program.starts_with('/') {
        ws.join(program)
    } else {
        PathBuf::from(program)
    };
    let run = std::process::Command::new(&program_path)
        .args(args)
        .current_dir(ws)
        .env("CI", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", program_path.display()))?;
    let text = read_regular(&out, FILE_BYTES_MAX).map_err(|e| {
        let tail: String = String::from_utf8_lossy(&run.stderr)
            .chars()
            .rev()
            .take(400)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!(
            "{} wrote no report ({e}; exit {:?}): {tail}",
            program_path.display(),
            run.status.code()
        )
    })?;
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct JsonReport {
        test_results: Vec<FileResult>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct FileResult {
        name: String,
        #[serde(default)]
        assertion_results: Vec<Assertion>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Assertion {
        full_name: String,
        status: String,
    }
    let parsed: JsonReport = serde_json::from_slice(&text)
        .map_err(|e| format!("the runner's report is not a Jest-shaped JSON report: {e}"))?;
    let mut results: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for f in parsed.test_results {
        let name = Path::new(&f.name);
        let rel = name
            .strip_prefix(ws)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or(f.name.clone());
        for a in f.assertion_results {
            results
                .entry((rel.clone(), a.full_name))
                .or_default()
                .push(a.status);
        }
    }
    Ok(results)
}

/// Paths under `source_paths` whose content differs from HEAD's: modified, added
/// (untracked, not ignored) or deleted.
fn uncommitted(
    ctx: &scan::GitContext,
    source_paths: &[String],
) -> Result<Vec<String>, SnapshotError> {
    let repo = &ctx.repo;
    fn git(
        what: &str,
        e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> SnapshotError {
        SnapshotError::git(what, e)
    }
    let head_tree = repo
        .head_commit()
        .map_err(|e| git("reading HEAD", e))?
        .tree_id()
        .map_err(|e| git("reading HEAD", e))?
        .detach();
    let tree = repo
        .find_tree(head_tree)
        .map_err(|e| git("reading HEAD", e))?;
    let mut committed: BTreeMap<String, gix::ObjectId> = BTreeMap::new();
    for r in tree
        .traverse()
        .breadthfirst
        .files()
        .map_err(|e| git("reading HEAD", e))?
    {
        if !r.mode.is_tree() {
            let p = r.filepath.to_string();
            if let Some(rel) = p.strip_prefix(&ctx.prefix) {
                committed.insert(rel.to_owned(), r.oid);
            }
        }
    }
    let under = |p: &str| {
        source_paths.iter().any(|s| {
            let s = s.trim_end_matches('/');
            p == s || p.starts_with(&format!("{s}/"))
        })
    };
    let listing = scan::list_git(ctx, source_paths)?;
    let workdir = repo
        .workdir()
        .map(Path::to_path_buf)
        .unwrap_or_default()
        .join(ctx.prefix.trim_end_matches('/'));
    let mut changed = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for p in listing.paths() {
        seen.insert(p.to_owned());
        let abs = workdir.join(p);
        let now = match std::fs::symlink_metadata(&abs) {
            Ok(m) if m.file_type().is_symlink() => std::fs::read_link(&abs)
                .ok()
                .map(|t| t.into_os_string().into_encoded_bytes()),
            // Bounded, without blocking: a file over the limit counts as changed.
            Ok(_) => read_regular(&abs, SOURCE_BYTES_MAX).ok(),
            Err(_) => None,
        };
        let now = now
            .map(|d| gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::object::Kind::Blob, &d))
            .transpose()
            .map_err(|e| git("hashing", e))?;
        if now != committed.get(p).copied() {
            changed.push(p.to_owned());
        }
    }
    for p in committed.keys() {
        if under(p) && !seen.contains(p) {
            changed.push(p.clone());
        }
    }
    changed.sort();
    changed.dedup();
    Ok(changed)
}
