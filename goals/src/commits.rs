//! The commit-range verifier users put into their checks (BRIEF §3): the baseline is an
//! ancestor of HEAD, the range is not empty, and every commit's changed paths —
//! all of them, deletions and both sides of renames, never path-filtered — stay inside
//! the allowed scopes and out of the forbidden ones. Merge commits are handled as the
//! caller chooses. Read in-process with gix.

use std::collections::BTreeMap;
use std::path::Path;

use gix::ObjectId;
use serde::Serialize;

use tacho_git::snapshot::SnapshotError;
use tacho_git::snapshot::scan;

/// What to do with merge commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merges {
    /// A merge commit in the range is a violation.
    Reject,
    /// A merge is checked against its first parent only.
    FirstParent,
    /// A merge is checked against every parent.
    All,
}

/// One rule broken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// The commit, when the violation is about one.
    pub commit: Option<String>,
    pub path: Option<String>,
    pub reason: String,
}

/// What was checked and what broke.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommitReport {
    pub baseline: String,
    pub head: String,
    /// The commits of the range, newest first.
    pub commits: Vec<String>,
    pub paths_checked: usize,
    pub violations: Vec<Violation>,
}

fn git(
    what: &str,
    e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
) -> SnapshotError {
    SnapshotError::git(what, e)
}

/// Why the commit range could not be checked (a range that breaks a rule is a
/// report with violations, not an error).
#[derive(Debug, thiserror::Error)]
pub enum CommitsError {
    #[error(
        "--baseline {0:?}: not a revision; give a commit id, branch, tag or revision expression in ASCII"
    )]
    BadBaseline(String),
    #[error(transparent)]
    Repository(#[from] SnapshotError),
}

/// Checks the commits between `baseline` and HEAD of the repository holding
/// `workspace`. Scopes are repository-relative path prefixes (a directory or a file).
pub fn verify_commits(
    workspace: &Path,
    baseline: &str,
    allow: &[String],
    forbid: &[String],
    merges: Merges,
) -> Result<CommitReport, CommitsError> {
    // Revision syntax is ASCII; anything else is a typo or a paste gone wrong, and
    // the report echoes the baseline, so it must be text every reader can cut.
    if baseline.is_empty() || !baseline.chars().all(|c| c.is_ascii_graphic()) {
        return Err(CommitsError::BadBaseline(baseline.to_owned()));
    }
    let ws = tacho_git::snapshot::canonical_workspace(workspace)?;
    let ctx = scan::git_context(&ws)?.ok_or_else(|| SnapshotError::Workspace {
        path: ws.clone(),
        reason: "not inside a Git repository".into(),
    })?;
    let repo = &ctx.repo;
    let head = repo.head_id().map_err(|e| git("reading HEAD", e))?.detach();
    let mut report = CommitReport {
        baseline: baseline.to_owned(),
        head: head.to_string(),
        commits: Vec::new(),
        paths_checked: 0,
        violations: Vec::new(),
    };
    let fail = |report: &mut CommitReport, reason: String| {
        report.violations.push(Violation {
            commit: None,
            path: None,
            reason,
        });
    };
    let base = match repo.rev_parse_single(baseline) {
        Ok(id) => match id.object().and_then(|o| o.peel_to_commit()) {
            Ok(c) => c.id,
            Err(_) => {
                fail(&mut report, format!("baseline {baseline} is not a commit"));
                return Ok(report);
            }
        },
        Err(_) => {
            fail(
                &mut report,
                format!("baseline {baseline} does not name a commit of this repository"),
            );
            return Ok(report);
        }
    };
    report.baseline = base.to_string();
    let mb = repo
        .merge_base(base, head)
        .ok()
        .flatten()
        .map(|id| id.detach());
    if mb != Some(base) {
        fail(
            &mut report,
            format!("baseline {base} is not an ancestor of HEAD {head}"),
        );
        return Ok(report);
    }
    // git's `BASE..HEAD`: commits reachable from HEAD and not from the baseline. A
    // walk with the baseline hidden is not enough on its own: when HEAD merges a
    // branch that forked before the baseline, that walk can reach a commit older than
    // the baseline before learning it is hidden. So every commit reachable from the
    // baseline is collected first and left out (linear in the history, read once).
    let behind: std::collections::HashSet<ObjectId> = repo
        .rev_walk([base])
        .all()
        .map_err(|e| git("walking the baseline's history", e))?
        .map(|info| info.map(|i| i.id))
        .collect::<Result<_, _>>()
        .map_err(|e| git("walking the baseline's history", e))?;
    let walk = repo
        .rev_walk([head])
        .with_hidden([base])
        .all()
        .map_err(|e| git("walking the range", e))?;
    for info in walk {
        let info = info.map_err(|e| git("walking the range", e))?;
        if !behind.contains(&info.id) {
            report.commits.push(info.id.to_string());
        }
    }
    if report.commits.is_empty() {
        fail(
            &mut report,
            format!("the range {base}..{head} holds no commit"),
        );
        return Ok(report);
    }
    for c in report.commits.clone() {
        let id = ObjectId::from_hex(c.as_bytes()).map_err(|e| git("commit id", e))?;
        let commit = repo
            .find_commit(id)
            .map_err(|e| git("reading a commit", e))?;
        let parents: Vec<ObjectId> = commit.parent_ids().map(|p| p.detach()).collect();
        let tree = files(
            repo,
            commit
                .tree_id()
                .map_err(|e| git("reading a commit", e))?
                .detach(),
        )?;
        let against: Vec<ObjectId> = match (parents.len(), merges) {
            (0, _) => Vec::new(),
            (1, _) => parents.clone(),
            (_, Merges::Reject) => {
                report.violations.push(Violation {
                    commit: Some(c.clone()),
                    path: None,
                    reason: format!(
                        "merge commit with {} parents (merges are rejected)",
                        parents.len()
                    ),
                });
                continue;
            }
            (_, Merges::FirstParent) => parents[..1].to_vec(),
            (_, Merges::All) => parents.clone(),
        };
        let mut changed: BTreeMap<String, &'static str> = BTreeMap::new();
        if against.is_empty() {
            for p in tree.keys() {
                changed.insert(p.clone(), "added");
            }
        }
        for p in against {
            let pc = repo
                .find_commit(p)
                .map_err(|e| git("reading a parent", e))?;
            let ptree = files(
                repo,
                pc.tree_id()
                    .map_err(|e| git("reading a parent", e))?
                    .detach(),
            )?;
            for (path, id) in &tree {
                match ptree.get(path) {
                    None => {
                        changed.insert(path.clone(), "added");
                    }
                    Some(old) if old != id => {
                        changed.entry(path.clone()).or_insert("modified");
                    }
                    _ => {}
                }
            }
            for path in ptree.keys() {
                if !tree.contains_key(path) {
                    changed.insert(path.clone(), "deleted");
                }
            }
        }
        report.paths_checked += changed.len();
        for (path, how) in changed {
            let inside = |scopes: &[String]| {
                scopes.iter().any(|s| {
                    let s = s.trim_end_matches('/');
                    path == s || path.starts_with(&format!("{s}/"))
                })
            };
            if inside(forbid) {
                report.violations.push(Violation {
                    commit: Some(c.clone()),
                    path: Some(path.clone()),
                    reason: format!("{how} in a forbidden scope"),
                });
            } else if !allow.is_empty() && !inside(allow) {
                report.violations.push(Violation {
                    commit: Some(c.clone()),
                    path: Some(path.clone()),
                    reason: format!("{how} outside the allowed scopes"),
                });
            }
        }
    }
    Ok(report)
}

/// Every file of a tree: path → (mode, blob id).
fn files(
    repo: &gix::Repository,
    tree: ObjectId,
) -> Result<BTreeMap<String, (u32, ObjectId)>, SnapshotError> {
    let tree = repo.find_tree(tree).map_err(|e| git("reading a tree", e))?;
    let mut out = BTreeMap::new();
    for r in tree
        .traverse()
        .breadthfirst
        .files()
        .map_err(|e| git("reading a tree", e))?
    {
        if r.mode.is_tree() {
            continue;
        }
        out.insert(r.filepath.to_string(), (r.mode.value() as u32, r.oid));
    }
    Ok(out)
}
