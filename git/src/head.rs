//! HEAD of a workspace's repository as tacho reads it itself, and the commits new since
//! an earlier reading: how commits are linked to the session that made them (SPEC
//! §17.2). Read with gix; nothing is written.

use std::path::Path;

use gix::ObjectId;

use crate::snapshot::{SnapshotError, scan};

/// HEAD moved: where it is now, and the commits reachable from it and not from the
/// earlier HEAD (newest first, at most the number asked, each with its tree).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadMove {
    /// The work tree's top directory.
    pub work_tree: String,
    pub head: String,
    /// `(commit, tree)`.
    pub commits: Vec<(String, String)>,
    /// All such commits, when more than the listed ones.
    pub total: u64,
}

fn git(
    what: &str,
    e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
) -> SnapshotError {
    SnapshotError::git(what, e)
}

/// HEAD of the repository holding `workspace`, unless it is `previous` (or the
/// workspace is in no repository, or HEAD is unborn). With no `previous` (the first
/// reading) or a `previous` the repository does not hold, no commit is listed: what
/// came before tacho first read HEAD is not the session's.
pub fn head_move(
    workspace: &Path,
    previous: Option<&str>,
    max: usize,
) -> Result<Option<HeadMove>, SnapshotError> {
    // Most readings find HEAD where it was: told by two small files, without opening
    // the repository (a hook reads HEAD at every tool result).
    if previous.is_some() && loose_head(workspace).as_deref() == previous {
        return Ok(None);
    }
    let Some(ctx) = scan::git_context(workspace)? else {
        return Ok(None);
    };
    let repo = &ctx.repo;
    let Ok(head) = repo.head_id() else {
        return Ok(None); // unborn
    };
    let head = head.detach();
    if previous == Some(head.to_string().as_str()) {
        return Ok(None);
    }
    let work_tree = repo
        .workdir()
        .map(|w| w.display().to_string())
        .unwrap_or_default();
    let mut moved = HeadMove {
        work_tree,
        head: head.to_string(),
        commits: Vec::new(),
        total: 0,
    };
    let Some(prev) = previous
        .and_then(|p| ObjectId::from_hex(p.as_bytes()).ok())
        .filter(|p| repo.find_commit(*p).is_ok())
    else {
        return Ok(Some(moved));
    };
    let behind: std::collections::HashSet<ObjectId> = repo
        .rev_walk([prev])
        .all()
        .map_err(|e| git("walking the earlier HEAD's history", e))?
        .map(|info| info.map(|i| i.id))
        .collect::<Result<_, _>>()
        .map_err(|e| git("walking the earlier HEAD's history", e))?;
    let walk = repo
        .rev_walk([head])
        .with_hidden([prev])
        .all()
        .map_err(|e| git("walking the new commits", e))?;
    for info in walk {
        let info = info.map_err(|e| git("walking the new commits", e))?;
        if behind.contains(&info.id) {
            continue;
        }
        moved.total += 1;
        if moved.commits.len() < max {
            let c = repo
                .find_commit(info.id)
                .map_err(|e| git("reading a commit", e))?;
            let tree = c.tree_id().map_err(|e| git("reading a commit", e))?;
            moved.commits.push((info.id.to_string(), tree.to_string()));
        }
    }
    Ok(Some(moved))
}

/// HEAD's commit as Git reads it from the repository's own `.git` directory at or above
/// `workspace` when that takes no more than `HEAD` and one loose ref file (which Git
/// reads before `packed-refs`): `None` when it takes more (a `.git` file of a linked
/// work tree, a packed ref, a name Git would refuse), and the repository is opened.
fn loose_head(workspace: &Path) -> Option<String> {
    let git_dir = scan::dot_git(workspace)?;
    if !git_dir.is_dir() {
        return None;
    }
    let head = std::fs::read_to_string(git_dir.join("HEAD")).ok()?;
    let head = head.trim_end();
    let id = match head.strip_prefix("ref: ") {
        Some(name) => {
            let safe = name.starts_with("refs/heads/")
                && name
                    .split('/')
                    .all(|c| !c.is_empty() && c != "." && c != ".." && !c.starts_with('.'));
            if !safe {
                return None;
            }
            std::fs::read_to_string(git_dir.join(name)).ok()?
        }
        None => head.to_owned(),
    };
    let id = id.trim_end();
    (matches!(id.len(), 40 | 64) && id.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| id.to_ascii_lowercase())
}
