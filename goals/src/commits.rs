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
    #[error("{0:?}: not a revision; give a commit id, branch, tag or revision expression in ASCII")]
    BadRevision(String),
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
    let (repo, walked) = walk_range(workspace, baseline, "HEAD")?;
    let mut report = CommitReport {
        baseline: walked.baseline,
        head: walked.head,
        commits: walked.commits.iter().map(|c| c.to_string()).collect(),
        paths_checked: 0,
        violations: Vec::new(),
    };
    if let Some(reason) = walked.problem {
        report.violations.push(Violation {
            commit: None,
            path: None,
            reason,
        });
        return Ok(report);
    }
    check_paths(&repo, &mut report, allow, forbid, merges)?;
    Ok(report)
}

/// One commit of a range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RangeCommit {
    pub commit: String,
    pub tree: String,
    pub parents: Vec<String>,
    /// The first line of its message.
    pub summary: String,
    /// When it was committed (its committer's time, seconds since the epoch), as
    /// the commit says: what whoever made it chose.
    pub committed_unix: Option<i64>,
}

/// The commits of `baseline..head` (git's meaning), newest first, or why the range
/// has none (`problem`: a baseline that is no commit or no ancestor, an empty range).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommitRange {
    pub baseline: String,
    pub head: String,
    pub commits: Vec<RangeCommit>,
    pub problem: Option<String>,
}

/// The commits of `baseline..head` in the repository holding `workspace`, each with
/// its tree, parents and summary.
pub fn commit_range(
    workspace: &Path,
    baseline: &str,
    head: &str,
) -> Result<CommitRange, CommitsError> {
    for r in [baseline, head] {
        if r.is_empty() || !r.chars().all(|c| c.is_ascii_graphic()) {
            return Err(CommitsError::BadRevision(r.to_owned()));
        }
    }
    let (repo, walked) = walk_range(workspace, baseline, head)?;
    let mut commits = Vec::with_capacity(walked.commits.len());
    for id in &walked.commits {
        let c = repo
            .find_commit(*id)
            .map_err(|e| git("reading a commit", e))?;
        let tree = c.tree_id().map_err(|e| git("reading a commit", e))?;
        let summary = c
            .message()
            .map(|m| m.summary().to_string())
            .unwrap_or_default();
        commits.push(RangeCommit {
            commit: id.to_string(),
            tree: tree.to_string(),
            parents: c.parent_ids().map(|p| p.to_string()).collect(),
            summary,
            committed_unix: c
                .committer()
                .ok()
                .and_then(|s| s.time().ok())
                .map(|t| t.seconds),
        });
    }
    Ok(CommitRange {
        baseline: walked.baseline,
        head: walked.head,
        commits,
        problem: walked.problem,
    })
}

/// One file that differs from a range's baseline to its head, repository-relative.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RangeChange {
    pub path: String,
    /// Not in the head's tree.
    pub deleted: bool,
    /// The head's lines that differ, as 1-based inclusive ranges (a deletion as the
    /// line after it); empty for a deleted, binary or too large file.
    pub lines: Vec<(u32, u32)>,
    /// Of those, the lines the range added or rewrote (no deletion marks): what a
    /// line attribution attributes.
    pub written: Vec<(u32, u32)>,
}

/// The files that differ from `baseline` (`None`: the empty tree) to `head` (commits
/// of the repository holding `workspace`), in path order, and the repository's work
/// tree (what the paths are relative to).
pub fn range_changes(
    workspace: &Path,
    baseline: Option<&str>,
    head: &str,
) -> Result<(std::path::PathBuf, Vec<RangeChange>), CommitsError> {
    let (ws, repo) = repository(workspace)?;
    let top = repo
        .workdir()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| ws.clone());
    let old = match baseline {
        Some(b) => tree_files(&repo, b)?,
        None => BTreeMap::new(),
    };
    let new = tree_files(&repo, head)?;
    // A blob too large to diff is never read whole (the range's author chose its size).
    let blob = |id: ObjectId| -> Result<Option<Vec<u8>>, CommitsError> {
        let size = repo
            .find_header(id)
            .map_err(|e| git("reading a blob's header", e))?
            .size();
        if size > tacho_git::snapshot::LINE_DIFF_BYTES_MAX as u64 {
            return Ok(None);
        }
        Ok(Some(
            repo.find_object(id)
                .map_err(|e| git("reading a blob", e))?
                .detach()
                .data,
        ))
    };
    // A gitlink (a submodule's commit) has no blob here; its lines are the submodule's.
    let is_blob = |mode: u32| mode & 0o170000 != 0o160000;
    let mut out = Vec::new();
    for (path, (mode, id)) in new.iter().filter(|(p, _)| plain_path(p)) {
        let before = match old.get(path) {
            Some((m, o)) if o == id && m == mode => continue,
            Some((m, o)) if is_blob(*m) => blob(*o)?,
            _ => Some(Vec::new()),
        };
        let after = if is_blob(*mode) { blob(*id)? } else { None };
        let changes = match (before, after) {
            (Some(b), Some(a)) => tacho_git::snapshot::line_changes(&b, &a).unwrap_or_default(),
            _ => Default::default(),
        };
        out.push(RangeChange {
            path: path.clone(),
            deleted: false,
            lines: changes.regions,
            written: changes.written,
        });
    }
    for path in old
        .keys()
        .filter(|p| !new.contains_key(*p) && plain_path(p))
    {
        out.push(RangeChange {
            path: path.clone(),
            deleted: true,
            lines: Vec::new(),
            written: Vec::new(),
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((top, out))
}

/// The first file (in path order) of revision `rev`'s tree in the repository holding
/// `workspace`: where a finding about no file can still be placed. `None` when the
/// revision or its tree holds none.
pub fn first_file(workspace: &Path, rev: &str) -> Option<String> {
    let (_, repo) = repository(workspace).ok()?;
    tree_files(&repo, rev)
        .ok()?
        .into_keys()
        .find(|p| plain_path(p))
}

/// A tree can name anything: `..` or `.` is no path of a work tree, and none is
/// reported (a SARIF location or attribution path must stay in the repository).
fn plain_path(p: &str) -> bool {
    p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// The canonical workspace and the repository holding it.
fn repository(workspace: &Path) -> Result<(std::path::PathBuf, gix::Repository), CommitsError> {
    let ws = tacho_git::snapshot::canonical_workspace(workspace)?;
    let ctx = scan::git_context(&ws)?.ok_or_else(|| SnapshotError::Workspace {
        path: ws.clone(),
        reason: "not inside a Git repository".into(),
    })?;
    Ok((ws, ctx.repo))
}

/// The files of revision `rev`'s tree.
fn tree_files(
    repo: &gix::Repository,
    rev: &str,
) -> Result<BTreeMap<String, (u32, ObjectId)>, CommitsError> {
    let commit = repo
        .rev_parse_single(rev)
        .map_err(|_| CommitsError::BadRevision(rev.to_owned()))?
        .object()
        .and_then(|o| o.peel_to_commit())
        .map_err(|_| CommitsError::BadRevision(rev.to_owned()))?;
    let tree = commit.tree_id().map_err(|e| git("reading a commit", e))?;
    Ok(files(repo, tree.detach())?)
}

/// A range walked: its ends resolved, its commits newest first, or its problem.
struct Walked {
    baseline: String,
    head: String,
    commits: Vec<ObjectId>,
    problem: Option<String>,
}

fn walk_range(
    workspace: &Path,
    baseline: &str,
    head_rev: &str,
) -> Result<(gix::Repository, Walked), CommitsError> {
    let (_, repo) = repository(workspace)?;
    let mut walked = Walked {
        baseline: baseline.to_owned(),
        head: head_rev.to_owned(),
        commits: Vec::new(),
        problem: None,
    };
    let commit_of = |rev: &str| match repo.rev_parse_single(rev) {
        Ok(id) => match id.object().and_then(|o| o.peel_to_commit()) {
            Ok(c) => Ok(c.id),
            Err(_) => Err(format!("{rev} is not a commit")),
        },
        Err(_) => Err(format!("{rev} does not name a commit of this repository")),
    };
    let head = match head_rev {
        "HEAD" => repo.head_id().map_err(|e| git("reading HEAD", e))?.detach(),
        rev => match commit_of(rev) {
            Ok(id) => id,
            Err(reason) => {
                walked.problem = Some(format!("head {reason}"));
                return Ok((repo, walked));
            }
        },
    };
    walked.head = head.to_string();
    let base = match commit_of(baseline) {
        Ok(id) => id,
        Err(reason) => {
            walked.problem = Some(format!("baseline {reason}"));
            return Ok((repo, walked));
        }
    };
    walked.baseline = base.to_string();
    let mb = repo
        .merge_base(base, head)
        .ok()
        .flatten()
        .map(|id| id.detach());
    if mb != Some(base) {
        walked.problem = Some(format!("baseline {base} is not an ancestor of HEAD {head}"));
        return Ok((repo, walked));
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
            walked.commits.push(info.id);
        }
    }
    if walked.commits.is_empty() {
        walked.problem = Some(format!("the range {base}..{head} holds no commit"));
    }
    Ok((repo, walked))
}

/// The path rules over every commit of a walked range.
fn check_paths(
    repo: &gix::Repository,
    report: &mut CommitReport,
    allow: &[String],
    forbid: &[String],
    merges: Merges,
) -> Result<(), CommitsError> {
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
    Ok(())
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
