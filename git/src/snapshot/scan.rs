//! Which files of a workspace a snapshot considers.
//!
//! Inside a Git repository: what `git ls-files --cached --others --exclude-standard`
//! lists (the index, plus untracked files that no ignore rule matches), read in-process
//! with gix. Outside Git: every file, honouring `.gitignore` and `.ignore` files. In both,
//! nested repositories and special files are not followed and are reported.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use gix::bstr::ByteSlice;

use super::{ExcludeReason, Excluded, SnapshotError};

/// The candidate paths of a workspace, relative to it, with `/` separators, sorted,
/// with their metadata (not following links) when the walk already read it.
pub struct Listing {
    pub(crate) paths: Vec<(String, Option<super::stat::FileStat>)>,
    pub(crate) excluded: Vec<Excluded>,
    /// Every directory the walk read (the workspace is `""`) and every nested
    /// repository it pruned, with its metadata. While none of them changes, and no
    /// ignore file does, the same walk would list the same paths. Empty when the walk
    /// cannot be repeated this way (after an error, or a listing of named paths).
    pub(crate) dirs: Vec<super::cache::DirStamp>,
    /// Inside Git, the files besides those directories that decide the listing: the
    /// index and the ignore rules from outside the workspace (see [`git_guards`]).
    pub(crate) guards: Vec<super::cache::GuardStamp>,
}

impl Listing {
    /// The listed paths (relative to the workspace, `/` separators, sorted).
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.paths.iter().map(|(p, _)| p.as_str())
    }
}

/// How the workspace sits in its Git repository.
pub struct GitContext {
    pub repo: gix::Repository,
    /// The workspace's path inside the repository's work tree (`""` at its root), with a
    /// trailing `/` when not empty.
    pub prefix: String,
}

fn git_err(
    what: &str,
    e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
) -> SnapshotError {
    SnapshotError::git(what, e)
}

/// The `.git` (a directory, or the file of a linked work tree) at or nearest above
/// `workspace`, if any.
pub(crate) fn dot_git(workspace: &Path) -> Option<std::path::PathBuf> {
    workspace
        .ancestors()
        .map(|d| d.join(".git"))
        .find(|g| g.exists())
}

/// The blob ids of the trees the repository holding `workspace` has from its remotes
/// (the tips of `refs/remotes/*`, at most [`PUBLISHED_REFS_MAX`]): content a remote
/// already holds. Empty without a repository or a remote-tracking ref. (Not HEAD's
/// tree: a local commit may never be pushed.)
pub fn published_blobs(workspace: &Path) -> std::collections::HashSet<gix::ObjectId> {
    let mut out = std::collections::HashSet::new();
    let Ok(Some(ctx)) = git_context(workspace) else {
        return out;
    };
    let Ok(refs) = ctx.repo.references() else {
        return out;
    };
    let Ok(remotes) = refs.prefixed("refs/remotes/") else {
        return out;
    };
    let mut trees = std::collections::HashSet::new();
    for r in remotes.flatten().take(PUBLISHED_REFS_MAX) {
        let mut r = r;
        let Ok(commit) = r.peel_to_commit() else {
            continue;
        };
        let Ok(tree) = commit.tree() else {
            continue;
        };
        if !trees.insert(tree.id) {
            continue;
        }
        if let Ok(records) = tree.traverse().breadthfirst.files() {
            out.extend(
                records
                    .into_iter()
                    .filter(|r| !r.mode.is_tree())
                    .map(|r| r.oid),
            );
        }
    }
    out
}

/// How many remote-tracking refs [`published_blobs`] reads.
pub const PUBLISHED_REFS_MAX: usize = 64;

/// Opens the Git repository that holds `workspace`, if any. A repository found above
/// the workspace counts; the workspace is then a prefix inside it.
pub fn git_context(workspace: &Path) -> Result<Option<GitContext>, SnapshotError> {
    // Only a `.git` at or above the workspace makes it a Git workspace; gix's
    // discovery would also accept a bare repository, which has no work tree.
    if dot_git(workspace).is_none() {
        return Ok(None);
    }
    let repo = match gix::discover(workspace) {
        Ok(r) => r,
        Err(_) => return Ok(None),
    };
    let Some(workdir) = repo.workdir() else {
        return Ok(None);
    };
    let workdir = workdir
        .canonicalize()
        .map_err(|e| SnapshotError::io(workdir, e))?;
    let rel = workspace.strip_prefix(&workdir).map_err(|_| {
        SnapshotError::Repository(format!(
            "{} is not inside the work tree {} of its repository",
            workspace.display(),
            workdir.display()
        ))
    })?;
    let mut prefix = slash_path(rel).ok_or_else(|| SnapshotError::NotUtf8(rel.to_path_buf()))?;
    if !prefix.is_empty() {
        prefix.push('/');
    }
    Ok(Some(GitContext { repo, prefix }))
}

/// A relative path as a `/`-separated string; `None` if it is not UTF-8.
pub(crate) fn slash_path(p: &Path) -> Option<String> {
    let mut out = String::new();
    for c in p.components() {
        if let Component::Normal(s) = c {
            if !out.is_empty() {
                out.push('/');
            }
            out.push_str(s.to_str()?);
        }
    }
    Some(out)
}

/// Lists a workspace. `skip` is a directory inside it that belongs to tacho (its data
/// directory) and is never snapshotted.
pub(crate) fn list(
    workspace: &Path,
    skip: Option<&str>,
    threads: usize,
) -> Result<Listing, SnapshotError> {
    let mut listing = match git_context(workspace)? {
        Some(ctx) => list_git(&ctx, &[])?,
        None => list_plain(workspace, threads)?,
    };
    if let Some(skip) = skip {
        let dir = format!("{skip}/");
        listing.paths.retain(|p| !p.0.starts_with(&dir));
        // tacho's own directory changes at every record: what lies in it is never
        // listed, so its directories decide nothing.
        listing
            .dirs
            .retain(|d| d.path != skip && !d.path.starts_with(&dir));
    }
    Ok(listing)
}

/// A repository path made workspace-relative: `None` outside the workspace, and for a
/// name that is not UTF-8 (which is listed as excluded).
fn inside<'a>(
    full: &'a gix::bstr::BStr,
    prefix: &str,
    excluded: &mut Vec<Excluded>,
) -> Option<&'a str> {
    let rel = full.strip_prefix(prefix.as_bytes())?;
    match rel.to_str() {
        Ok(rel) => Some(rel),
        Err(_) => {
            excluded.push(Excluded::new(
                rel.to_str_lossy().into_owned(),
                ExcludeReason::NotUtf8,
            ));
            None
        }
    }
}

/// What Git would list under the workspace: tracked files (whether or not they still
/// exist) and untracked files no ignore rule matches. With `within` (workspace-relative
/// paths), only what lies at or under one of them.
pub fn list_git(ctx: &GitContext, within: &[String]) -> Result<Listing, SnapshotError> {
    let repo = &ctx.repo;
    let prefix = ctx.prefix.as_str();
    let wanted = |rel: &str| {
        within.is_empty()
            || within.iter().any(|w| {
                rel == w
                    || (rel.starts_with(w.as_str()) && rel.as_bytes().get(w.len()) == Some(&b'/'))
            })
    };
    let index = repo
        .index_or_empty()
        .map_err(|e| git_err("reading the index", e))?;
    let mut paths = BTreeSet::new();
    let mut excluded = Vec::new();
    for entry in index.entries() {
        let Some(rel) = inside(entry.path(&index), prefix, &mut excluded) else {
            continue;
        };
        if !wanted(rel) {
            continue;
        }
        if entry.mode == gix::index::entry::Mode::COMMIT {
            excluded.push(Excluded::new(
                rel.to_owned(),
                ExcludeReason::NestedRepository,
            ));
            continue;
        }
        paths.insert(rel.to_owned());
    }

    let interrupt = AtomicBool::new(false);
    let options = repo
        .dirwalk_options()
        .map_err(|e| git_err("dirwalk options", e))?
        .emit_tracked(false)
        .emit_ignored(None)
        .emit_pruned(false)
        .emit_empty_directories(false)
        .recurse_repositories(false)
        .emit_untracked(gix::dir::walk::EmissionMode::Matching);
    // Literal pathspecs (names are never globs) from the top of the work tree: gix
    // would otherwise read them relative to the current directory, as git does.
    let patterns: Vec<gix::bstr::BString> = if within.is_empty() {
        if prefix.is_empty() {
            Vec::new()
        } else {
            vec![format!(":(top,literal){}", prefix.trim_end_matches('/')).into()]
        }
    } else {
        within
            .iter()
            .map(|w| format!(":(top,literal){prefix}{w}").into())
            .collect()
    };
    // Mounts of pseudo file systems in the work tree are never walked into.
    let mut walked = Walked::default();
    if let Some(workdir) = repo.workdir().and_then(|w| w.canonicalize().ok()) {
        walked.prune = super::pseudo_mounts_under(&workdir)
            .into_iter()
            .map(|(rel, fs)| (gix::bstr::BString::from(rel), fs))
            .collect();
    }
    repo.dirwalk(&index, patterns, &interrupt, options, &mut walked)
        .map_err(|e| git_err("walking the work tree", e))?;
    let mut repeatable = within.is_empty();
    let mut dirs = vec![String::new()];
    for d in &walked.dirs {
        match d.strip_prefix(prefix.as_bytes()).map(|r| r.to_str()) {
            Some(Ok(rel)) => dirs.push(rel.to_owned()),
            Some(Err(_)) => repeatable = false,
            // Above the workspace (on the way down to it): its ignore files are guards.
            None => {}
        }
    }
    for (mount, fs) in &walked.pruned {
        if let Some(rel) = inside(mount.as_ref(), prefix, &mut excluded)
            && wanted(rel)
        {
            excluded.push(Excluded::new(
                rel.to_owned(),
                ExcludeReason::PseudoFileSystem(fs.clone()),
            ));
        }
    }
    let pruned = std::mem::take(&mut walked.pruned);
    // Tracked paths below such a mount (the index can name anything) are left out too
    // (almost never any: no pass over the listing then).
    if !pruned.is_empty() {
        paths.retain(|p| {
            let full = format!("{prefix}{p}");
            !pruned.iter().any(|(m, _)| {
                full.as_bytes() == m.as_slice()
                    || (full.as_bytes().starts_with(m.as_slice())
                        && full.as_bytes().get(m.len()) == Some(&b'/'))
            })
        });
    }
    for (entry, _) in walked.collect.unorded_entries {
        if entry.status != gix::dir::entry::Status::Untracked {
            continue;
        }
        let Some(rel) = inside(entry.rela_path.as_ref(), prefix, &mut excluded) else {
            continue;
        };
        if !wanted(rel) {
            continue;
        }
        use gix::dir::entry::Kind;
        match entry.disk_kind {
            Some(Kind::File | Kind::Symlink) => {
                paths.insert(rel.to_owned());
            }
            Some(Kind::Repository) => {
                dirs.push(rel.to_owned());
                excluded.push(Excluded::new(
                    rel.to_owned(),
                    ExcludeReason::NestedRepository,
                ))
            }
            Some(Kind::Untrackable) => {
                excluded.push(Excluded::new(rel.to_owned(), ExcludeReason::Special))
            }
            // Empty untracked directories hold nothing to restore.
            Some(Kind::Directory) | None => {}
        }
    }
    let (dirs, guards) = if repeatable {
        let root = workspace_of(ctx)?;
        let stamps = stamp_dirs(&root, dirs);
        match (stamps, git_guards(ctx)) {
            (Some(d), Some(g)) => (d, g),
            _ => (Vec::new(), Vec::new()),
        }
    } else {
        (Vec::new(), Vec::new())
    };
    Ok(Listing {
        paths: paths.into_iter().map(|p| (p, None)).collect(),
        excluded,
        dirs,
        guards,
    })
}

/// A walk that notes every directory it reads.
#[derive(Default)]
struct Walked {
    collect: gix::dir::walk::delegate::Collect,
    /// Repository-relative.
    dirs: Vec<gix::bstr::BString>,
    /// Mount points of pseudo file systems (repository-relative, with their type):
    /// never recursed into.
    prune: Vec<(gix::bstr::BString, String)>,
    /// Those the walk met.
    pruned: Vec<(gix::bstr::BString, String)>,
}

impl gix::dir::walk::Delegate for Walked {
    fn emit(
        &mut self,
        entry: gix::dir::EntryRef<'_>,
        collapsed_directory_status: Option<gix::dir::entry::Status>,
    ) -> gix::dir::walk::Action {
        self.collect.emit(entry, collapsed_directory_status)
    }

    fn can_recurse(
        &mut self,
        entry: gix::dir::EntryRef<'_>,
        for_deletion: Option<gix::dir::walk::ForDeletionMode>,
        worktree_root_is_repository: bool,
    ) -> bool {
        let recurse = entry.status.can_recurse(
            entry.disk_kind,
            entry.pathspec_match,
            for_deletion,
            worktree_root_is_repository,
        );
        if recurse
            && let Some(m) = self
                .prune
                .iter()
                .find(|(m, _)| m.as_slice() == entry.rela_path.as_ref() as &[u8])
        {
            self.pruned.push(m.clone());
            return false;
        }
        if recurse {
            self.dirs.push(entry.rela_path.clone().into_owned());
        }
        recurse
    }
}

/// The workspace directory of a Git context.
fn workspace_of(ctx: &GitContext) -> Result<PathBuf, SnapshotError> {
    let workdir = ctx
        .repo
        .workdir()
        .ok_or_else(|| SnapshotError::Repository("the repository has no work tree".into()))?;
    Ok(workdir.join(ctx.prefix.trim_end_matches('/')))
}

/// The metadata of directories (workspace-relative), sorted; `None` when one cannot
/// be read (the walk is then not repeated).
fn stamp_dirs(workspace: &Path, mut dirs: Vec<String>) -> Option<Vec<super::cache::DirStamp>> {
    dirs.sort_unstable();
    dirs.dedup();
    dirs.into_iter()
        .map(|d| {
            let m = super::stat::lstat(&workspace.join(&d)).ok()?;
            Some(super::cache::DirStamp::of(d, &m))
        })
        .collect()
}

/// The files outside the listing whose content decides what a Git walk lists: the
/// index (what is tracked), `info/exclude`, the user's excludes file (configured, or
/// Git's default), the configuration files that can name another one, and the
/// `.gitignore` files of the directories between the work tree's root and the
/// workspace. Missing ones are stamped as missing: creating one changes the listing
/// too. `None` when a path is not UTF-8 or cannot be examined.
fn git_guards(ctx: &GitContext) -> Option<Vec<super::cache::GuardStamp>> {
    let repo = &ctx.repo;
    let mut files: Vec<PathBuf> = vec![
        repo.index_path(),
        repo.common_dir().join("info").join("exclude"),
        repo.common_dir().join("config"),
        repo.git_dir().join("config.worktree"),
        PathBuf::from("/etc/gitconfig"),
    ];
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    if let Some(h) = &home {
        files.push(h.join(".gitconfig"));
    }
    if let Some(x) = &xdg {
        files.push(x.join("git").join("config"));
        files.push(x.join("git").join("ignore"));
    }
    if let Some(p) = std::env::var_os("GIT_CONFIG_GLOBAL") {
        files.push(PathBuf::from(p));
    }
    if let Ok(Some(p)) = repo.config_snapshot().trusted_path("core.excludesFile") {
        files.push(p);
    }
    let workdir = repo.workdir()?;
    let mut dir = workdir.to_path_buf();
    files.push(dir.join(".gitignore"));
    for c in Path::new(ctx.prefix.trim_end_matches('/')).components() {
        dir.push(c);
        files.push(dir.join(".gitignore"));
    }
    files.sort();
    files.dedup();
    files
        .iter()
        .map(|f| super::cache::GuardStamp::now(f))
        .collect()
}

fn list_plain(workspace: &Path, threads: usize) -> Result<Listing, SnapshotError> {
    // A directory on another device than the workspace is a mount point: one of a
    // pseudo file system is never walked into.
    let root_dev = super::stat::lstat(workspace)
        .map_err(|e| SnapshotError::io(workspace, e))?
        .dev;
    let nested: Arc<Mutex<Vec<PathBuf>>> = Arc::default();
    let seen = Arc::clone(&nested);
    let walk = ignore::WalkBuilder::new(workspace)
        .standard_filters(false)
        .hidden(false)
        .git_ignore(true)
        .git_global(false)
        .git_exclude(false)
        .ignore(true)
        .parents(false)
        .require_git(false)
        .follow_links(false)
        .threads(threads)
        .filter_entry(move |e| {
            let is_dir = e.file_type().is_some_and(|t| t.is_dir());
            if is_dir && e.depth() > 0 && e.path().join(".git").exists() {
                if let Ok(mut n) = seen.lock() {
                    n.push(e.path().to_path_buf());
                }
                return false;
            }
            // A `.git` file or directory (a worktree pointer) is Git's, not the project's.
            e.depth() == 0 || e.file_name() != ".git"
        })
        .build_parallel();
    // Each walker thread lists and stats its entries; results meet once at the end.
    let found: Mutex<Vec<Found>> = Mutex::new(Vec::new());
    walk.run(|| {
        let mut local = Local {
            found: &found,
            items: Vec::new(),
        };
        Box::new(move |item| {
            let (found, local) = (local.found, &mut local.items);
            let entry = match item {
                Ok(e) => e,
                Err(e) => {
                    let path = error_path(&e)
                        .and_then(|p| p.strip_prefix(workspace).ok().and_then(slash_path))
                        .unwrap_or_default();
                    local.push(Found::Excluded(Excluded::new(
                        path,
                        ExcludeReason::Unreadable(e.to_string()),
                    )));
                    local.push(Found::Unrepeatable);
                    flush(found, local);
                    return ignore::WalkState::Continue;
                }
            };
            if entry.depth() == 0 {
                match entry.metadata() {
                    Ok(m) => local.push(Found::Dir(super::cache::DirStamp::of(
                        String::new(),
                        &super::stat::FileStat::of(&m),
                    ))),
                    Err(_) => local.push(Found::Unrepeatable),
                }
                return ignore::WalkState::Continue;
            }
            let Ok(rel) = entry.path().strip_prefix(workspace) else {
                return ignore::WalkState::Continue;
            };
            let Some(rel) = slash_path(rel) else {
                local.push(Found::Excluded(Excluded::new(
                    rel.to_string_lossy().into_owned(),
                    ExcludeReason::NotUtf8,
                )));
                return ignore::WalkState::Continue;
            };
            match entry.file_type() {
                Some(t) if t.is_dir() => match entry.metadata() {
                    Ok(m) => {
                        let stat = super::stat::FileStat::of(&m);
                        let pseudo = if stat.dev == root_dev {
                            None
                        } else {
                            super::pseudo_fs_of(entry.path())
                        };
                        local.push(Found::Dir(super::cache::DirStamp::of(rel.clone(), &stat)));
                        if let Some(fs) = pseudo {
                            local.push(Found::Excluded(Excluded::new(
                                rel,
                                ExcludeReason::PseudoFileSystem(fs.to_owned()),
                            )));
                            return ignore::WalkState::Skip;
                        }
                    }
                    Err(_) => local.push(Found::Unrepeatable),
                },
                Some(t) if t.is_file() || t.is_symlink() => {
                    local.push(Found::Path(
                        rel,
                        entry.metadata().ok().map(|m| super::stat::FileStat::of(&m)),
                    ));
                }
                _ => local.push(Found::Excluded(Excluded::new(rel, ExcludeReason::Special))),
            }
            if local.len() >= 256 {
                flush(found, local);
            }
            ignore::WalkState::Continue
        })
    });
    let mut paths = Vec::new();
    let mut excluded = Vec::new();
    let mut dirs = Vec::new();
    let mut repeatable = true;
    for f in found.into_inner().unwrap_or_default() {
        match f {
            Found::Path(p, m) => paths.push((p, m)),
            Found::Excluded(x) => excluded.push(x),
            Found::Dir(d) => dirs.push(d),
            Found::Unrepeatable => repeatable = false,
        }
    }
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    let nested = nested.lock().map(|n| n.clone()).unwrap_or_default();
    for dir in nested {
        if let Some(rel) = dir.strip_prefix(workspace).ok().and_then(slash_path) {
            match std::fs::symlink_metadata(&dir) {
                Ok(m) => dirs.push(super::cache::DirStamp::of(
                    rel.clone(),
                    &super::stat::FileStat::of(&m),
                )),
                Err(_) => repeatable = false,
            }
            excluded.push(Excluded::new(rel, ExcludeReason::NestedRepository));
        }
    }
    if !repeatable {
        dirs.clear();
    }
    dirs.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Listing {
        paths,
        excluded,
        dirs,
        guards: Vec::new(),
    })
}

/// What a walker thread found.
enum Found {
    Path(String, Option<super::stat::FileStat>),
    Excluded(Excluded),
    Dir(super::cache::DirStamp),
    /// Something the walk could not read: the next scan walks again.
    Unrepeatable,
}

/// A walker thread's findings not yet handed over; handed over when the walk ends
/// (the visitor is dropped) too.
struct Local<'a> {
    found: &'a Mutex<Vec<Found>>,
    items: Vec<Found>,
}

impl Drop for Local<'_> {
    fn drop(&mut self) {
        flush(self.found, &mut self.items);
    }
}

/// Hands a walker thread's findings over.
fn flush(found: &Mutex<Vec<Found>>, local: &mut Vec<Found>) {
    if let Ok(mut f) = found.lock() {
        f.append(local);
    }
}

fn error_path(e: &ignore::Error) -> Option<&Path> {
    match e {
        ignore::Error::WithPath { path, .. } => Some(path),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        _ => None,
    }
}

/// The rules that decide what a full listing includes, for asking about many paths:
/// inside Git the ignore rules are read once (building them reads the exclude files
/// and the configuration), and the index only when an ignored path may be tracked.
pub(crate) struct Rules<'a> {
    workspace: &'a Path,
    git: Option<(&'a GitContext, gix::AttributeStack<'a>)>,
}

impl<'a> Rules<'a> {
    pub(crate) fn new(
        workspace: &'a Path,
        git: Option<&'a GitContext>,
    ) -> Result<Self, SnapshotError> {
        let git = match git {
            Some(ctx) => {
                let empty = gix::index::State::new(ctx.repo.object_hash());
                let excludes = ctx
                    .repo
                    .excludes(
                        &empty,
                        None,
                        gix::worktree::stack::state::ignore::Source::WorktreeThenIdMappingIfNotSkipped,
                    )
                    .map_err(|e| git_err("reading ignore rules", e))?;
                Some((ctx, excludes))
            }
            None => None,
        };
        Ok(Rules { workspace, git })
    }

    /// Whether a path the caller named explicitly (a targeted snapshot) is one a full
    /// listing would include: tracked, or not ignored.
    pub(crate) fn is_listed(&mut self, rel: &str) -> Result<bool, SnapshotError> {
        if rel.split('/').any(|c| c == ".git") {
            return Ok(false);
        }
        if !self.ignored(rel, false)? {
            return Ok(true);
        }
        match &self.git {
            // Ignored but tracked files are still snapshotted, as Git keeps them.
            Some((ctx, _)) => {
                let index = ctx
                    .repo
                    .index_or_empty()
                    .map_err(|e| git_err("reading the index", e))?;
                let full = format!("{}{rel}", ctx.prefix);
                Ok(index.entry_by_path(full.as_str().into()).is_some())
            }
            None => Ok(false),
        }
    }

    /// Whether the ignore rules a full listing applies ignore the directory `rel`
    /// (files tracked beneath it aside): a walk would not read it.
    pub(crate) fn is_ignored_dir(&mut self, rel: &str) -> Result<bool, SnapshotError> {
        Ok(rel.split('/').any(|c| c == ".git") || self.ignored(rel, true)?)
    }

    /// Whether the ignore rules a full listing applies ignore `rel`, a directory when
    /// `is_dir` (rules such as `build/` match only directories).
    fn ignored(&mut self, rel: &str, is_dir: bool) -> Result<bool, SnapshotError> {
        let Some((ctx, excludes)) = &mut self.git else {
            return Ok(ignored_plain(self.workspace, rel, is_dir));
        };
        let full = format!("{}{rel}", ctx.prefix);
        let mode = is_dir.then_some(gix::index::entry::Mode::DIR);
        Ok(excludes
            .at_entry(full.as_str(), mode)
            .map_err(|e| git_err("reading ignore rules", e))?
            .is_excluded())
    }
}

/// Whether `.gitignore`/`.ignore` files between the workspace root and `rel` ignore it
/// (the rules `list_plain` applies while walking), `rel` being a directory when
/// `last_is_dir`.
fn ignored_plain(workspace: &Path, rel: &str, last_is_dir: bool) -> bool {
    let comps: Vec<&str> = rel.split('/').collect();
    // Walk down: a directory that is ignored hides everything beneath it.
    for depth in 1..=comps.len() {
        let is_dir = depth < comps.len() || last_is_dir;
        let mut verdict = None;
        for top in 0..depth {
            let dir = workspace.join(comps[..top].join("/"));
            let sub = comps[top..depth].join("/");
            for name in [".gitignore", ".ignore"] {
                let file = dir.join(name);
                if !file.is_file() {
                    continue;
                }
                let mut b = ignore::gitignore::GitignoreBuilder::new(&dir);
                if b.add(&file).is_some() {
                    continue;
                }
                if let Ok(gi) = b.build() {
                    match gi.matched(&sub, is_dir) {
                        ignore::Match::Ignore(_) => verdict = Some(true),
                        ignore::Match::Whitelist(_) => verdict = Some(false),
                        ignore::Match::None => {}
                    }
                }
            }
        }
        if verdict == Some(true) {
            return true;
        }
    }
    false
}
