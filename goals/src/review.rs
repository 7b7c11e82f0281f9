//! The review-receipts verifier (`tacho review verify --root DIR`, BRIEF §3): external
//! review rounds are evidence only if every rule holds. A non-empty review log is never
//! success by itself.
//!
//! Layout (SPEC.md §12.6):
//!
//! ```text
//! DIR/review.json           {"sourcePaths": ["src", ...]}
//! DIR/<round>/round.json    {"commit": SHA, "reviewers": [{"name", "exitCode",
//!                            "verdicts": [..], "findings": [{"id", "disposition":
//!                            "fixed"|"rejected", "test"?, "evidence"?}]}]}
//! DIR/<round>/**/*.xml      JUnit XML reports of the tests run in that round
//! ```
//!
//! Rounds are the subdirectories holding a `round.json`, in name order (`round-01`,
//! `round-02`, ...); the last one is the current round.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use tacho_git::snapshot::scan;
use tacho_git::snapshot::{SnapshotError, read_regular};

/// The longest review declaration, round or test report read (each is read without
/// blocking, and only when it is a regular file).
const FILE_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// The longest source file compared with its committed blob.
const SOURCE_BYTES_MAX: u64 = 256 * 1024 * 1024;

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
    #[serde(default)]
    findings: Vec<Finding>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Finding {
    id: String,
    disposition: String,
    #[serde(default)]
    test: Option<String>,
    #[serde(default)]
    evidence: Option<String>,
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

/// Verifies the review receipts under `root` against the repository of `workspace`.
pub fn verify_reviews(root: &Path, workspace: &Path) -> Result<ReviewReport, SnapshotError> {
    let mut report = ReviewReport {
        rounds: Vec::new(),
        reviewers: 0,
        findings: 0,
        tests_checked: 0,
        problems: Vec::new(),
    };
    let mut problem = |at: &str, p: String| {
        report.problems.push(ReviewProblem {
            at: at.to_owned(),
            problem: p,
        })
    };
    let review_path = root.join("review.json");
    let review: Option<ReviewFile> = match read_regular(&review_path, FILE_BYTES_MAX) {
        Ok(b) => match serde_json::from_slice(&b) {
            Ok(r) => Some(r),
            Err(e) => {
                problem("review.json", format!("not a review declaration: {e}"));
                None
            }
        },
        Err(e) => {
            problem("review.json", format!("cannot be read: {e}"));
            None
        }
    };
    let mut rounds: Vec<PathBuf> = std::fs::read_dir(root)
        .map_err(|e| SnapshotError::io(root, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("round.json").is_file())
        .collect();
    rounds.sort();
    if rounds.is_empty() {
        problem(
            ".",
            "no review round (a directory with round.json): there is nothing to verify".into(),
        );
    }
    let mut last_commit = None;
    for dir in &rounds {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        report.rounds.push(name.clone());
        let round: Round = match read_regular(&dir.join("round.json"), FILE_BYTES_MAX)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            Ok(r) => r,
            Err(e) => {
                problem(&format!("{name}/round.json"), format!("invalid: {e}"));
                continue;
            }
        };
        last_commit = Some(round.commit.clone());
        if round.reviewers.is_empty() {
            problem(&name, "no reviewer".into());
        }
        let tests = junit_results(dir);
        // A finding (by id) has one disposition in a round, whoever reports it.
        let mut dispositions: BTreeMap<&str, &str> = BTreeMap::new();
        for r in &round.reviewers {
            report.reviewers += 1;
            let at = format!("{name}/{}", r.name);
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
            for f in &r.findings {
                report.findings += 1;
                let at = format!("{at}/{}", f.id);
                match dispositions.insert(f.id.as_str(), f.disposition.as_str()) {
                    Some(other) if other != f.disposition => problem(
                        &at,
                        format!(
                            "finding {} is both {other:?} and {:?}: one finding has one disposition",
                            f.id, f.disposition
                        ),
                    ),
                    _ => {}
                }
                match (f.disposition.as_str(), &f.test, &f.evidence) {
                    ("fixed", Some(t), _) if !t.trim().is_empty() => {
                        report.tests_checked += 1;
                        let seen = tests.get(t.as_str()).map_or(&[][..], Vec::as_slice);
                        match seen {
                            [true] => {}
                            [] => problem(
                                &at,
                                format!("regression test {t} was not run in this round"),
                            ),
                            [false] => problem(&at, format!("regression test {t} did not pass")),
                            more => problem(
                                &at,
                                format!(
                                    "regression test {t} ran {} times; it must pass exactly once",
                                    more.len()
                                ),
                            ),
                        }
                    }
                    ("fixed", _, _) => problem(&at, "fixed without a regression test id".into()),
                    ("rejected", _, Some(e)) if !e.trim().is_empty() => {}
                    ("rejected", _, _) => problem(&at, "rejected without evidence".into()),
                    (d, _, _) => problem(
                        &at,
                        format!("disposition {d:?} is neither fixed nor rejected"),
                    ),
                }
            }
        }
    }
    // The last round must be about the commit being verified, with nothing uncommitted
    // under the declared source paths.
    let ws = tacho_git::snapshot::canonical_workspace(workspace)?;
    let ctx = scan::git_context(&ws)?;
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
                for change in uncommitted(ctx, &review.source_paths)? {
                    problem(
                        &change,
                        "uncommitted change under the declared source paths".into(),
                    );
                }
            }
        }
        (Some(_), None) => {}
    }
    Ok(report)
}

/// Test id → pass/fail of each run of it, from every JUnit XML file under `dir`. A test
/// is known by `name`, `classname::name` and `classname.name`.
fn junit_results(dir: &Path) -> BTreeMap<String, Vec<bool>> {
    let mut out: BTreeMap<String, Vec<bool>> = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "xml")
                && let Ok(text) = read_regular(&p, FILE_BYTES_MAX)
                    .and_then(|b| String::from_utf8(b).map_err(std::io::Error::other))
            {
                for (class, name, passed) in testcases(&text) {
                    let mut ids = vec![name.clone()];
                    if !class.is_empty() {
                        ids.push(format!("{class}::{name}"));
                        ids.push(format!("{class}.{name}"));
                    }
                    for id in ids {
                        out.entry(id).or_default().push(passed);
                    }
                }
            }
        }
    }
    out
}

/// (classname, name, passed) of each `<testcase>`; a failure, error or skipped child
/// means not passed.
fn testcases(xml: &str) -> Vec<(String, String, bool)> {
    use quick_xml::events::Event;
    let mut r = quick_xml::Reader::from_str(xml);
    let mut out = Vec::new();
    let mut open: Option<(String, String, bool)> = None;
    loop {
        match r.read_event() {
            Ok(Event::Start(e)) | Ok(Event::Empty(e)) if e.name().into_inner() == "testcase" => {
                let attr = |k: &str| {
                    e.attributes()
                        .flatten()
                        .find(|a| a.key.into_inner() == k)
                        .and_then(|a| {
                            a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                                .ok()
                                .map(|v| v.into_owned())
                        })
                        .unwrap_or_default()
                };
                let case = (attr("classname"), attr("name"), true);
                if let Some(c) = open.take() {
                    out.push(c);
                }
                open = Some(case);
            }
            Ok(Event::Start(e)) | Ok(Event::Empty(e))
                if matches!(e.name().into_inner(), "failure" | "error" | "skipped") =>
            {
                if let Some(c) = open.as_mut() {
                    c.2 = false;
                }
            }
            Ok(Event::End(e)) if e.name().into_inner() == "testcase" => {
                if let Some(c) = open.take() {
                    out.push(c);
                }
            }
            Ok(Event::Eof) | Err(_) => break,
            _ => {}
        }
    }
    if let Some(c) = open.take() {
        out.push(c);
    }
    out
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
