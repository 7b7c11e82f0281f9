//! The source fingerprint: one digest over the actual bytes of the files a goal's
//! checks depend on, so that a receipt can say "this passed on exactly this source".
//!
//! Which files (BRIEF §3): under each declared source path, inside Git, the tracked
//! files and the untracked files that are not ignored (what `git ls-files --cached
//! --others --exclude-standard -- PATH` lists); a path named explicitly as a file is
//! included even when ignored; outside Git every file under the path, and a missing path
//! as missing. Files that edit events reported are added like explicit files.
//!
//! Anything that cannot be read as plain, stable file content (a link, a nested
//! repository, a special file, a path escaping the workspace, an unreadable file, a file
//! that changes while it is read) means there is **no fresh evidence**, with the path
//! and the reason: a fingerprint is never computed over part of the source.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Serialize;

use crate::snapshot::scan::{self, slash_path};
use crate::snapshot::stat::{self, FileStat};
use crate::snapshot::{ExcludeReason, SnapshotError, relative_path};

/// At most this many entries.
pub const MAX_ENTRIES: usize = 20_000;
/// At most this many bytes of content.
pub const MAX_BYTES: u64 = 128 * 1024 * 1024;

/// One fingerprinted path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    pub path: String,
    /// `file` or `missing`.
    pub kind: &'static str,
    pub size: u64,
    pub executable: bool,
    /// BLAKE3 of the content, hex; empty for a missing path.
    pub content: String,
}

/// At most this many problems are listed by name; the rest are counted.
pub const MAX_LISTED_PROBLEMS: usize = 20;

/// One path that stands in the way of a fingerprint, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The path at fault (workspace-relative, or as given when it escapes).
    pub path: String,
    pub reason: String,
}

/// Why no fresh evidence can be produced: every problem found, so that a user can fix
/// them in one pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NoEvidence {
    /// The first problem.
    pub path: String,
    pub reason: String,
    /// The problems, the first one first, at most `MAX_LISTED_PROBLEMS`.
    pub problems: Vec<Problem>,
    /// How many problems there are in all.
    pub total: usize,
}

impl std::fmt::Display for NoEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", p.path, p.reason)?;
        }
        if self.total > self.problems.len() {
            write!(f, "; and {} more", self.total - self.problems.len())?;
        }
        Ok(())
    }
}

/// The problems found so far.
#[derive(Default)]
struct Problems(Vec<Problem>, usize);

impl Problems {
    fn add(&mut self, path: impl Into<String>, reason: impl Into<String>) {
        self.1 += 1;
        if self.0.len() < MAX_LISTED_PROBLEMS {
            self.0.push(Problem {
                path: path.into(),
                reason: reason.into(),
            });
        }
    }

    fn refusal(self) -> Option<Fingerprint> {
        let first = self.0.first()?.clone();
        Some(Fingerprint::NoFreshEvidence(NoEvidence {
            path: first.path,
            reason: first.reason,
            problems: self.0,
            total: self.1,
        }))
    }
}

/// A fingerprint, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fingerprint {
    Fresh {
        /// Hex of BLAKE3-derive("tacho source fingerprint v1", canonical entries).
        digest: String,
        entries: Vec<Entry>,
        bytes: u64,
    },
    NoFreshEvidence(NoEvidence),
}

/// A refusal for one reason about the whole set (a limit).
fn none(path: impl Into<String>, reason: impl Into<String>) -> Fingerprint {
    let p = Problem {
        path: path.into(),
        reason: reason.into(),
    };
    Fingerprint::NoFreshEvidence(NoEvidence {
        path: p.path.clone(),
        reason: p.reason.clone(),
        problems: vec![p],
        total: 1,
    })
}

/// Fingerprints `source_paths` (workspace-relative; `.` is the whole workspace) and
/// the explicitly named `files` of `workspace`, reading on `threads` threads.
pub fn fingerprint(
    workspace: &Path,
    source_paths: &[String],
    files: &[String],
    threads: usize,
) -> Result<Fingerprint, SnapshotError> {
    // `/`, the home directory and pseudo file systems are refused, as for snapshots.
    let ws = crate::snapshot::snapshot_workspace(workspace)?;
    // path → explicit (named as a file: included even when ignored)
    let mut wanted: BTreeMap<String, bool> = BTreeMap::new();
    let mut dirs: Vec<String> = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    let git = scan::git_context(&ws)?;
    let mut problems = Problems::default();
    let named = source_paths
        .iter()
        .map(|p| (p, false))
        .chain(files.iter().map(|p| (p, true)));
    for (given, from_edit) in named {
        let rel = if given == "." || given.is_empty() {
            String::new()
        } else {
            match relative_path(&ws, given) {
                Ok(r) => r,
                Err(e) => {
                    problems.add(given.clone(), format!("escapes the workspace: {e}"));
                    continue;
                }
            }
        };
        if let Some(link) = crate::snapshot::linked_parent(&ws, &rel) {
            problems.add(link, "is a symbolic link (a parent of a source path)");
            continue;
        }
        let m = if rel.is_empty() {
            stat::lstat(&ws)
        } else {
            stat::lstat(&ws.join(&rel))
        };
        match m {
            Err(e) if crate::snapshot::gone(&e) => {
                // Outside Git a missing path is part of the state; inside Git the
                // index decides (a deleted tracked file is listed, as missing).
                if git.is_none() || from_edit {
                    missing.push(rel);
                } else {
                    dirs.push(rel);
                }
            }
            Err(e) => problems.add(rel, format!("unreadable: {e}")),
            Ok(m) if m.is_symlink() => problems.add(rel, "is a symbolic link"),
            Ok(m) if m.is_file() => {
                wanted.insert(rel, true);
            }
            Ok(m) if m.is_dir() => dirs.push(rel),
            Ok(_) => problems.add(rel, "is a special file"),
        }
    }

    // Directories: Git's list, or everything.
    if !dirs.is_empty() {
        let listing = match &git {
            Some(ctx) => {
                let within: Vec<String> = if dirs.iter().any(String::is_empty) {
                    Vec::new()
                } else {
                    dirs.clone()
                };
                scan::list_git(ctx, &within)?
            }
            None => {
                let mut all = scan::Listing {
                    paths: Vec::new(),
                    excluded: Vec::new(),
                    dirs: Vec::new(),
                    guards: Vec::new(),
                };
                for d in &dirs {
                    walk_all(&ws, d, &mut all)?;
                }
                all
            }
        };
        for x in &listing.excluded {
            let reason = match &x.reason {
                ExcludeReason::NestedRepository => "is a nested Git repository".to_string(),
                ExcludeReason::Special => "is a special file".to_string(),
                ExcludeReason::NotUtf8 => "has a name that is not UTF-8".to_string(),
                ExcludeReason::PseudoFileSystem(fs) => {
                    format!("is a {fs} mount, a pseudo file system that holds no user files")
                }
                other => other.to_string(),
            };
            problems.add(x.path.clone(), reason);
        }
        for (p, _) in listing.paths {
            wanted.entry(p).or_insert(false);
        }
    }
    for m in missing {
        wanted.entry(m).or_insert(true);
    }
    if wanted.len() > MAX_ENTRIES {
        return Ok(none(
            source_paths.join(" "),
            format!(
                "{} entries, more than the limit of {MAX_ENTRIES}: declare narrower source paths",
                wanted.len()
            ),
        ));
    }

    // Read and hash on all threads.
    let paths: Vec<(&String, bool)> = wanted.iter().map(|(p, e)| (p, *e)).collect();
    let next = AtomicUsize::new(0);
    let threads = threads.max(1).min(paths.len().div_ceil(16).max(1));
    let results: Vec<Vec<(usize, Result<Entry, Problem>)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (next, paths, ws) = (&next, &paths, &ws);
                s.spawn(move || {
                    let mut out = Vec::new();
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some((p, explicit)) = paths.get(k) else {
                            break;
                        };
                        out.push((k, read_entry(ws, p, *explicit)));
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let mut entries: Vec<Option<Entry>> = vec![None; paths.len()];
    let mut results: Vec<(usize, Result<Entry, Problem>)> = results.into_iter().flatten().collect();
    results.sort_by_key(|r| r.0);
    for (k, r) in results {
        match r {
            Ok(e) => entries[k] = Some(e),
            Err(why) => problems.add(why.path, why.reason),
        }
    }
    if let Some(refusal) = problems.refusal() {
        return Ok(refusal);
    }
    let entries: Vec<Entry> = entries.into_iter().flatten().collect();
    let bytes: u64 = entries.iter().fold(0u64, |n, e| n.saturating_add(e.size));
    if bytes > MAX_BYTES {
        return Ok(none(
            source_paths.join(" "),
            format!("{bytes} bytes of content, more than the limit of {MAX_BYTES}"),
        ));
    }
    Ok(Fingerprint::Fresh {
        digest: digest(&entries),
        entries,
        bytes,
    })
}

/// The digest of entries (sorted by path): for each, the path's length (u32 LE) and
/// bytes, a kind byte (1 file, 2 missing), an executable byte, the size (u64 LE) and
/// the 32-byte content hash (zeros when missing).
pub fn digest(entries: &[Entry]) -> String {
    let mut h = blake3::Hasher::new_derive_key("tacho source fingerprint v1");
    for e in entries {
        h.update(&(e.path.len() as u32).to_le_bytes());
        h.update(e.path.as_bytes());
        h.update(&[if e.kind == "file" { 1 } else { 2 }, e.executable as u8]);
        h.update(&e.size.to_le_bytes());
        let mut content = [0u8; 32];
        if let Ok(c) = blake3::Hash::from_hex(&e.content) {
            content = *c.as_bytes();
        }
        h.update(&content);
    }
    h.finalize().to_hex().to_string()
}

/// Outside Git: every entry under `dir`, recursively, without ignore rules. Links and
/// special files are listed as found; nested repositories are reported.
fn walk_all(ws: &Path, dir: &str, out: &mut scan::Listing) -> Result<(), SnapshotError> {
    let root = if dir.is_empty() {
        ws.to_path_buf()
    } else {
        ws.join(dir)
    };
    // Mounts of pseudo file systems below the workspace are never walked into.
    let pseudo = crate::snapshot::pseudo_mounts_under(ws);
    let mut stack = vec![root];
    while let Some(d) = stack.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| SnapshotError::io(&d, e))?;
        for e in rd {
            let e = e.map_err(|e| SnapshotError::io(&d, e))?;
            let p = e.path();
            let Some(rel) = p.strip_prefix(ws).ok().and_then(slash_path) else {
                out.excluded.push(crate::snapshot::Excluded::new(
                    p.to_string_lossy().into_owned(),
                    ExcludeReason::NotUtf8,
                ));
                continue;
            };
            let t = e.file_type().map_err(|e| SnapshotError::io(&p, e))?;
            if t.is_dir() {
                if let Some((_, fs)) = crate::snapshot::under_mount(&rel, &pseudo) {
                    out.excluded.push(crate::snapshot::Excluded::new(
                        rel,
                        ExcludeReason::PseudoFileSystem(fs.clone()),
                    ));
                    continue;
                }
                if e.file_name() == ".git" || p.join(".git").exists() {
                    out.excluded.push(crate::snapshot::Excluded::new(
                        if e.file_name() == ".git" {
                            rel.rsplit_once('/')
                                .map_or(String::new(), |(a, _)| a.to_owned())
                        } else {
                            rel
                        },
                        ExcludeReason::NestedRepository,
                    ));
                    continue;
                }
                stack.push(p);
            } else {
                out.paths.push((rel, None));
            }
        }
    }
    Ok(())
}

/// Reads one path without following links and hashes it; the file must look the same
/// before and after the read.
/// The entry of `rel`; `explicit` when the path was named as a file (an edit's, or a
/// source path), not listed from a directory (Git's index or a walk).
fn read_entry(ws: &Path, rel: &str, explicit: bool) -> Result<Entry, Problem> {
    let fail = |reason: String| Problem {
        path: rel.to_owned(),
        reason,
    };
    let missing = || Entry {
        path: rel.to_owned(),
        kind: "missing",
        size: 0,
        executable: false,
        content: String::new(),
    };
    let abs = ws.join(rel);
    let before = match stat::lstat(&abs) {
        Ok(m) => m,
        // Not there: also when a directory on the way is a file now (`d/x` after `d`
        // became one).
        Err(e) if crate::snapshot::gone(&e) => {
            return Ok(missing());
        }
        Err(e) => return Err(fail(format!("unreadable: {e}"))),
    };
    if before.is_symlink() {
        return Err(fail("is a symbolic link".into()));
    }
    if before.is_dir() {
        // A file Git's index lists that is a directory now: the file is deleted, as
        // Git sees it, and what the directory holds is listed by the walk.
        if !explicit {
            return Ok(missing());
        }
        return Err(fail("is a directory where a file was expected".into()));
    }
    if !before.is_file() {
        return Err(fail("is a special file".into()));
    }
    if before.size > MAX_BYTES {
        // Over the limit by itself: the whole fingerprint is refused for its size
        // (the sum of the entries' sizes), so the content is not read at all.
        return Ok(Entry {
            path: rel.to_owned(),
            kind: "file",
            size: before.size,
            executable: before.executable(),
            content: String::new(),
        });
    }
    // Without blocking (a FIFO swapped in since the lstat) and only a regular file.
    let f = match crate::snapshot::open_regular(&abs) {
        Ok(Ok((f, _))) => f,
        Ok(Err(_)) => return Err(fail("is a special file".into())),
        Err(e) => return Err(fail(format!("unreadable: {e}"))),
    };
    // Bounded by the bytes read, not by the stat: a file of a pseudo file system says
    // 0 bytes and may never end.
    let mut f = f.take(MAX_BYTES + 1);
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| fail(format!("unreadable: {e}")))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        h.update(buf.get(..n).unwrap_or_default());
    }
    let f = f.into_inner();
    let after = f
        .metadata()
        .map(|m| FileStat::of(&m))
        .map_err(|e| fail(format!("unreadable: {e}")))?;
    let changed =
        after.size != before.size || after.mtime_ns != before.mtime_ns || after.ino != before.ino;
    // More than its size said: a file that grew while read (a writer appending), or
    // one whose size says nothing (a pseudo file that never ends).
    if size > MAX_BYTES && !changed {
        return Err(fail(format!(
            "more than the limit of {MAX_BYTES} bytes of content when read (its size says {})",
            before.size
        )));
    }
    if changed || size != after.size {
        return Err(fail("changed while it was being read".into()));
    }
    Ok(Entry {
        path: rel.to_owned(),
        kind: "file",
        size,
        executable: before.executable(),
        content: h.finalize().to_hex().to_string(),
    })
}

/// The fingerprint a workspace would have if its files were exactly commit `commit`'s
/// tree (SPEC §17.3): the same entries as [`fingerprint`] — the files under `paths`
/// and the `files` named, workspace-relative, a named file the tree lacks `missing`
/// — read from the repository holding `workspace`, never from the work tree. `Err`
/// says why there is none: a link or a submodule under a source path, a path
/// escaping the workspace, too many entries or bytes.
pub fn tree_fingerprint(
    workspace: &Path,
    commit: &str,
    paths: &[String],
    files: &[String],
) -> Result<Result<String, String>, SnapshotError> {
    let contents = match tree_contents(workspace, commit, paths, files)? {
        Ok(c) => c,
        Err(why) => return Ok(Err(why)),
    };
    let entries: Vec<Entry> = contents
        .into_iter()
        .map(|(path, c)| match c {
            None => Entry {
                path,
                kind: "missing",
                size: 0,
                executable: false,
                content: String::new(),
            },
            Some((executable, bytes)) => Entry {
                path,
                kind: "file",
                size: bytes.len() as u64,
                executable,
                content: blake3::hash(&bytes).to_hex().to_string(),
            },
        })
        .collect();
    Ok(Ok(digest(&entries)))
}

/// The repository holding `workspace`, and commit id `commit` (hex).
fn commit_of(
    workspace: &Path,
    commit: &str,
) -> Result<(scan::GitContext, gix::ObjectId), SnapshotError> {
    let ctx = scan::git_context(workspace)?.ok_or_else(|| SnapshotError::Workspace {
        path: workspace.to_path_buf(),
        reason: "not inside a Git repository".into(),
    })?;
    let id = gix::ObjectId::from_hex(commit.as_bytes())
        .map_err(|e| SnapshotError::git("commit id", e))?;
    Ok((ctx, id))
}

/// The tree of commit `id`.
fn commit_tree(repo: &gix::Repository, id: gix::ObjectId) -> Result<gix::Tree<'_>, SnapshotError> {
    repo.find_commit(id)
        .map_err(|e| SnapshotError::git("reading a commit", e))?
        .tree()
        .map_err(|e| SnapshotError::git("reading a commit's tree", e))
}

/// The content of `path` (repository-relative) in commit `commit` of the repository
/// holding `workspace`: one lookup along the path, no walk of the tree. `None` when
/// the commit has no regular file there, or one larger than `limit` bytes (never read).
pub fn file_at(
    workspace: &Path,
    commit: &str,
    path: &str,
    limit: u64,
) -> Result<Option<Vec<u8>>, SnapshotError> {
    let git = |what: &str, e: Box<dyn std::error::Error + Send + Sync>| SnapshotError::git(what, e);
    let (ctx, id) = commit_of(workspace, commit)?;
    let repo = &ctx.repo;
    let tree = commit_tree(repo, id)?;
    let Some(entry) = tree
        .lookup_entry_by_path(path)
        .map_err(|e| git("looking up a path", e.into()))?
    else {
        return Ok(None);
    };
    if !entry.mode().is_blob() {
        return Ok(None);
    }
    let size = repo
        .find_header(entry.object_id())
        .map_err(|e| git("reading a blob's header", e.into()))?
        .size();
    if size > limit {
        return Ok(None);
    }
    let blob = repo
        .find_object(entry.object_id())
        .map_err(|e| git("reading a blob", e.into()))?;
    Ok(Some(blob.detach().data))
}

/// One file of a commit's tree, workspace-relative.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeFile {
    pub path: String,
    pub executable: bool,
    pub bytes: Vec<u8>,
}

/// The files [`tree_fingerprint`] reads of commit `commit` (the missing ones left
/// out), with their content: what a clean room made from a commit holds.
pub fn tree_files(
    workspace: &Path,
    commit: &str,
    paths: &[String],
    files: &[String],
) -> Result<Result<Vec<TreeFile>, String>, SnapshotError> {
    Ok(tree_contents(workspace, commit, paths, files)?.map(|c| {
        c.into_iter()
            .filter_map(|(path, c)| {
                c.map(|(executable, bytes)| TreeFile {
                    path,
                    executable,
                    bytes,
                })
            })
            .collect()
    }))
}

/// Path → `None` (missing) or (executable, content), as [`tree_fingerprint`] lists them.
type Contents = BTreeMap<String, Option<(bool, Vec<u8>)>>;

fn tree_contents(
    workspace: &Path,
    commit: &str,
    paths: &[String],
    files: &[String],
) -> Result<Result<Contents, String>, SnapshotError> {
    let git = |what: &str, e: Box<dyn std::error::Error + Send + Sync>| SnapshotError::git(what, e);
    let (ctx, id) = commit_of(workspace, commit)?;
    let repo = &ctx.repo;
    let tree = commit_tree(repo, id)?;
    // Every blob of the tree under the workspace: workspace-relative path → entry.
    let mut blobs: BTreeMap<String, (gix::objs::tree::EntryMode, gix::ObjectId)> = BTreeMap::new();
    for r in tree
        .traverse()
        .breadthfirst
        .files()
        .map_err(|e| git("reading a tree", e.into()))?
    {
        let full = r.filepath.to_string();
        if r.mode.is_tree() {
            continue;
        }
        if let Some(rel) = full.strip_prefix(&ctx.prefix) {
            blobs.insert(rel.to_owned(), (r.mode, r.oid));
        }
    }
    let mut entries: Contents = BTreeMap::new();
    let mut bytes = 0u64;
    let mut add =
        |path: &str, entries: &mut Contents| -> Result<Result<(), String>, SnapshotError> {
            let Some((mode, oid)) = blobs.get(path) else {
                entries.insert(path.to_owned(), None);
                return Ok(Ok(()));
            };
            if mode.is_link() {
                return Ok(Err(format!("{path}: is a symbolic link")));
            }
            if mode.is_commit() {
                return Ok(Err(format!("{path}: is a submodule")));
            }
            let mut blob = repo
                .find_blob(*oid)
                .map_err(|e| git("reading a blob", e.into()))?;
            bytes += blob.data.len() as u64;
            if bytes > MAX_BYTES {
                return Ok(Err(format!("more than {MAX_BYTES} bytes of content")));
            }
            entries.insert(
                path.to_owned(),
                Some((mode.is_executable(), blob.take_data())),
            );
            Ok(Ok(()))
        };
    let escapes =
        |p: &str| Path::new(p).is_absolute() || p.split('/').any(|c| c == ".." || c == ".git");
    for p in paths {
        let p = p.trim_start_matches("./").trim_end_matches('/');
        if escapes(p) {
            return Ok(Err(format!("{p}: escapes the workspace")));
        }
        let under: Vec<String> = if p.is_empty() || p == "." {
            blobs.keys().cloned().collect()
        } else if blobs.contains_key(p) {
            vec![p.to_owned()]
        } else {
            let dir = format!("{p}/");
            let under: Vec<String> = blobs
                .keys()
                .filter(|k| k.starts_with(&dir))
                .cloned()
                .collect();
            // A directory the tree lacks contributes nothing, as `git ls-files` lists
            // nothing under it.
            under
        };
        for path in under {
            if let Err(why) = add(&path, &mut entries)? {
                return Ok(Err(why));
            }
        }
    }
    for f in files {
        if escapes(f) {
            return Ok(Err(format!("{f}: escapes the workspace")));
        }
        if !entries.contains_key(f.as_str())
            && let Err(why) = add(f, &mut entries)?
        {
            return Ok(Err(why));
        }
    }
    if entries.len() > MAX_ENTRIES {
        return Ok(Err(format!("more than {MAX_ENTRIES} entries")));
    }
    Ok(Ok(entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digest of a fixed set of entries, pinned: it must be the same on every
    /// machine and in every version that claims format v1.
    #[test]
    fn the_digest_is_pinned() {
        let entries = vec![
            Entry {
                path: "src/a.rs".into(),
                kind: "file",
                size: 3,
                executable: false,
                content: blake3::hash(b"abc").to_hex().to_string(),
            },
            Entry {
                path: "src/gone.rs".into(),
                kind: "missing",
                size: 0,
                executable: false,
                content: String::new(),
            },
        ];
        assert_eq!(
            digest(&entries),
            "caaf416ff377bb2e33d2f4a23e9395e6a0c90b759afa9660bccf5b3c67298388"
        );
    }
}
