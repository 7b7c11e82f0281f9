//! Paths: the workspace, its HEAD, caller-named paths made relative and kept inside,
//! and links judged by their text.

use super::*;

/// The HEAD commit of the Git repository holding `workspace`, read with gix; `None`
/// outside Git or before the first commit.
pub fn head_commit(workspace: &Path) -> Result<Option<String>, SnapshotError> {
    let ws = canonical_workspace(workspace)?;
    let Some(ctx) = scan::git_context(&ws)? else {
        return Ok(None);
    };
    Ok(ctx.repo.head_id().ok().map(|id| id.to_hex().to_string()))
}

/// The absolute, symlink-free path of an existing workspace directory.
pub fn canonical_workspace(workspace: &Path) -> Result<PathBuf, SnapshotError> {
    let ws = workspace
        .canonicalize()
        .map_err(|e| SnapshotError::Workspace {
            path: workspace.to_path_buf(),
            reason: e.to_string(),
        })?;
    if !ws.is_dir() {
        return Err(SnapshotError::Workspace {
            path: ws,
            reason: "not a directory".into(),
        });
    }
    Ok(ws)
}

/// [`canonical_workspace`], refused when it is `/`, the home directory or a directory
/// of a pseudo file system ([`SnapshotError::RefusedWorkspace`]): what snapshots and
/// watchers look at, which walk the whole workspace.
pub fn snapshot_workspace(workspace: &Path) -> Result<PathBuf, SnapshotError> {
    let ws = canonical_workspace(workspace)?;
    match super::mounts::refused_workspace(&ws) {
        Some(reason) => Err(SnapshotError::RefusedWorkspace { path: ws, reason }),
        None => Ok(ws),
    }
}

/// A path named by a caller, made relative to the workspace: absolute paths must lie
/// inside it; `..`, empty components and `.git` are refused.
pub fn relative_path(workspace: &Path, path: &str) -> Result<String, SnapshotError> {
    let bad = |reason: &str| SnapshotError::BadPath {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let p = Path::new(path);
    let respelled;
    let rel = if p.is_absolute() {
        match p.strip_prefix(workspace) {
            Ok(rel) => rel,
            // Another spelling of the workspace (a symbolic link on the way, `.`):
            // resolve the part that exists, keep the rest as written.
            Err(_) => {
                respelled = resolve_existing_prefix(p);
                respelled
                    .strip_prefix(workspace)
                    .map_err(|_| bad("outside the workspace"))?
            }
        }
    } else {
        p
    };
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            std::path::Component::Normal(s) => {
                let s = s.to_str().ok_or_else(|| bad("not UTF-8"))?;
                if s == ".git" {
                    return Err(bad("inside .git"));
                }
                out.push(s);
            }
            std::path::Component::CurDir => {}
            _ => return Err(bad("leaves the workspace (`..` or a root)")),
        }
    }
    if out.is_empty() {
        return Err(bad("names the workspace itself"));
    }
    Ok(out.join("/"))
}

/// `p` with its longest existing ancestor made canonical (links resolved) and the rest
/// appended as written; `p` itself when nothing of it resolves.
fn resolve_existing_prefix(p: &Path) -> PathBuf {
    let mut head = p;
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = head.canonicalize() {
            return rest.iter().rev().fold(real, |acc, c| acc.join(c));
        }
        match (head.parent(), head.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                head = parent;
            }
            _ => return p.to_path_buf(),
        }
    }
}

/// Whether a link at `rel` (workspace-relative) with this target points outside the
/// workspace, judged on the text of the target (links are never followed).
pub(super) fn link_leaves(rel: &str, target: &Path) -> bool {
    if target.is_absolute() {
        return true;
    }
    // Depth of the link's directory below the workspace root.
    let mut depth = rel.split('/').count() as i64 - 1;
    for c in target.components() {
        match c {
            std::path::Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            std::path::Component::Normal(_) => depth += 1,
            std::path::Component::CurDir => {}
            _ => return true,
        }
    }
    false
}

/// Whether a failed `lstat` says the path is not there: missing, or a component on
/// the way is no longer a directory (`d/x` after `d` became a file) — gone, not
/// unreadable.
pub(crate) fn gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

pub(super) fn bad_tree_path(path: &str, e: impl std::fmt::Display) -> SnapshotError {
    SnapshotError::BadPath {
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// The first parent of `rel` (workspace-relative, `/` separators) that is a symbolic
/// link (or anything else a walk cannot go through but a file), if there is one. A
/// parent that is missing or a regular file makes the path gone, which the caller's
/// `lstat` says (`ENOENT`, `ENOTDIR`): `None`.
pub(crate) fn linked_parent(workspace: &Path, rel: &str) -> Option<String> {
    let mut at = String::new();
    let parts: Vec<&str> = rel.split('/').collect();
    for part in parts.iter().take(parts.len().saturating_sub(1)) {
        if !at.is_empty() {
            at.push('/');
        }
        at.push_str(part);
        match std::fs::symlink_metadata(workspace.join(&at)) {
            Ok(m) if m.file_type().is_dir() => {}
            // Missing, or a file now (`d/x` after `d` became one): the path is gone,
            // which the caller handles.
            Ok(m) if m.file_type().is_file() => return None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            _ => return Some(at),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn links_that_climb_out_are_outside() {
        assert!(link_leaves("a", Path::new("/etc/passwd")));
        assert!(link_leaves("a", Path::new("../x")));
        assert!(link_leaves("d/a", Path::new("../../x")));
        assert!(!link_leaves("d/a", Path::new("../x")));
        assert!(!link_leaves("d/a", Path::new("e/../../x")));
        assert!(link_leaves("d/a", Path::new("e/../../../x")));
    }

    #[test]
    pub(super) fn caller_paths_stay_inside() {
        let ws = Path::new("/w");
        assert_eq!(relative_path(ws, "a/./b").unwrap(), "a/b");
        assert_eq!(relative_path(ws, "/w/a").unwrap(), "a");
        assert!(relative_path(ws, "../a").is_err());
        assert!(relative_path(ws, "a/../../b").is_err());
        assert!(relative_path(ws, "/etc/passwd").is_err());
        assert!(relative_path(ws, ".git/config").is_err());
        assert!(relative_path(ws, ".").is_err());
    }

    #[test]
    fn another_spelling_of_the_workspace_is_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        let ws = ws.canonicalize().unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&ws, &link).unwrap();
        for spelled in [
            link.join("src/new.txt"),
            link.join("./src/new.txt"),
            ws.join("./src/new.txt"),
        ] {
            assert_eq!(
                relative_path(&ws, spelled.to_str().unwrap()).unwrap(),
                "src/new.txt",
                "{}",
                spelled.display()
            );
        }
        let outside = tmp.path().join("elsewhere/f.txt");
        assert!(relative_path(&ws, outside.to_str().unwrap()).is_err());
    }
}
