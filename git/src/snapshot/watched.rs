//! A full scan with the workspace watcher's answer (SPEC.md §10.6): only the paths it
//! saw change since the stat cache's token are looked at; every other path is as the
//! cache has it.

use std::collections::{BTreeSet, HashSet};

use super::full::{differs, old_exclusions, same_stat, watch_question};
use super::*;

/// More changed paths than this and a scan checks every file instead: looking each up
/// (and asking the ignore rules about new ones) would cost more.
const WATCHED_PATHS_MAX: usize = 2_000;

/// While the paths changed since the stat cache was written are few — at most one per
/// `DEFER_RATIO` cached files and `DEFER_PATHS_MAX`, with at most `DEFER_BYTES_MAX` read
/// — the cache is left as it is, with its older token: the next scan is told of them
/// again and reads them again, which costs less than rewriting a cache of every file
/// at each snapshot (about 0.2 µs per file against 30 µs per file read again).
const DEFER_RATIO: usize = 150;
const DEFER_PATHS_MAX: usize = 128;
const DEFER_BYTES_MAX: u64 = 1 << 20;

/// A file a watcher hashed (and whose blob it wrote) as soon as inotify said it was
/// written, before any snapshot asked: its entry as read, whether the blob was new,
/// and how many events the watcher had read when it began (SPEC.md §10.6).
#[derive(Debug, Clone)]
pub(crate) struct HashedAhead {
    pub entry: CacheEntry,
    pub written: bool,
    pub seq: u64,
}

/// At most this many files are hashed ahead per wake of the watcher (more is a build
/// or a checkout: the snapshot reads them), each at most this large.
pub(crate) const AHEAD_FILES_MAX: usize = 64;
const AHEAD_BYTES_MAX: u64 = 1 << 20;

/// The stat cache as a watcher holds it between the snapshots it takes: the file's
/// bytes and its metadata when read; read again once the file is another.
pub(crate) struct HeldCache {
    stamp: FileStat,
    cache: cache::Checked,
}

impl SnapshotStore {
    /// Hashes `paths` of `workspace` now and stores their blobs (what a watcher does as
    /// files are written): only files the held stat cache lists (a file the snapshot
    /// would read again), regular files or links of at most 1 MiB. Nothing when no
    /// cache is held. Failures are left to the snapshot, which meets them itself.
    pub(crate) fn hash_ahead(
        &self,
        workspace: &Path,
        skip: Option<&str>,
        held: Option<&HeldCache>,
        paths: &[String],
    ) -> Vec<(String, CacheEntry, bool)> {
        let Some(held) = held else {
            return Vec::new();
        };
        let old = held.cache.get();
        let Ok(repo) = self.repo() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let writes = pack::Writes::Batch(Default::default());
        for p in paths {
            if watch::never_snapshotted(p, skip) || cache::find(old, p).is_none() {
                continue;
            }
            let Ok(m) = stat::lstat(&workspace.join(p)) else {
                continue;
            };
            if m.is_dir() || m.size > AHEAD_BYTES_MAX || self.unsupported(&m).is_some() {
                continue;
            }
            if let Ok(Ok((e, written))) = tree::store_file(self, &repo, &writes, workspace, p, &m) {
                out.push((p.clone(), e, written));
            }
        }
        // Nothing hashed ahead is kept unless its blob was written.
        if self.flush(writes).is_err() {
            return Vec::new();
        }
        out
    }

    /// A full snapshot of `workspace` taken by its watcher for a scan that asked (the
    /// asker holds the write guard): `since` is the watcher's own answer to what
    /// changed since the stat cache's token (with whether to list the workspace again
    /// first), which it is asked exactly once, with the files it hashed ahead that no
    /// event came for since; `held` is the stat cache it keeps. `ahead_of_time`: for no
    /// scan yet (after files were hashed ahead) — then never when the workspace must be
    /// listed again, nor without a token to ask with (`since` is not asked).
    /// `None` when only a walk can tell: the asker scans with the token `since` gave.
    pub(crate) fn take_served(
        &self,
        workspace: &Path,
        skip: Option<&str>,
        held: &mut Option<HeldCache>,
        ahead_of_time: bool,
        since: impl FnOnce(
            Option<watch::Token>,
            bool,
        ) -> (
            watch::Token,
            Option<Vec<String>>,
            HashMap<String, HashedAhead>,
        ),
    ) -> Result<Option<Snapshot>, SnapshotError> {
        let trace = Trace::new();
        let cache_paths = cache::paths(&self.cache_dir, workspace);
        let now = stat::lstat(&cache_paths.stat).ok();
        if held.as_ref().map(|h| h.stamp) != now || now.is_none() {
            *held = workspace.to_str().and_then(|ws| {
                let (loaded, stamp) = cache::Loaded::read_stamped(&cache_paths.stat)?;
                Some(HeldCache {
                    stamp,
                    cache: cache::Checked::new(loaded, ws)?,
                })
            });
        }
        trace.mark("s:cache");
        let archived = held.as_ref().map(|h| (h.cache.get(), h.cache.totals));
        let q = watch_question(workspace, archived.map(|a| a.0));
        if ahead_of_time && (!q.rules_same || q.since.is_none()) {
            // Only a scan asks for the workspace to be listed again.
            return Ok(None);
        }
        let (token, paths, ahead) = since(q.since, !q.rules_same);
        trace.mark("s:since");
        let taken = match (archived, paths) {
            (Some((old, totals)), Some(changed)) if q.rules_same => self.take_watched(
                workspace,
                skip,
                &cache_paths,
                old,
                Some(totals),
                &changed,
                &ahead,
                token,
                &trace,
            )?,
            _ => None,
        };
        // A cache file this snapshot wrote is read by the next one.
        if held.as_ref().map(|h| h.stamp) != stat::lstat(&cache_paths.stat).ok() {
            *held = None;
        }
        trace.mark("s:taken");
        Ok(taken)
    }

    /// The snapshot, or `None` when only a walk can tell: a directory appeared, went or
    /// was replaced; an ignore file changed; a new file lies where the last walk did not
    /// read; too many changes; the cache's tree is gone. `old_totals` are the cache's
    /// entry count and total size when the caller keeps them (a watcher); `ahead` the
    /// files it hashed since their last change (used while their metadata is the same
    /// and their blob is in the store).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn take_watched(
        &self,
        workspace: &Path,
        skip: Option<&str>,
        cache_paths: &cache::CachePaths,
        old: &cache::ArchivedCacheFile,
        old_totals: Option<(i64, i64)>,
        changed: &[String],
        ahead: &HashMap<String, HashedAhead>,
        token: watch::Token,
        trace: &Trace,
    ) -> Result<Option<Snapshot>, SnapshotError> {
        if old.dirs.is_empty() || old.entries.is_empty() || changed.len() > WATCHED_PATHS_MAX {
            return Ok(None);
        }
        let mut repo = self.repo()?;
        let base = ObjectId::from_bytes_or_panic(&old.tree);
        if !repo.has_object(base) {
            return Ok(None);
        }
        let scan_start_ns = now_ns();
        let trusted_before = old.scan_start_ns.to_native() - cache::RACY_NS;
        let dirs: HashSet<&str> = old.dirs.iter().map(|d| d.path.as_str()).collect();
        let extra: HashSet<&str> = old.listed_extra.iter().map(|p| p.as_str()).collect();
        let listed_excluded: Vec<cache::ListedExclusion> =
            rkyv::deserialize::<_, rkyv::rancor::Error>(&old.listed_excluded)
                .map_err(|e| SnapshotError::git("reading the stat cache", e))?;
        let left_out: HashSet<&str> = listed_excluded.iter().map(|x| x.path.as_str()).collect();
        // The changed paths, and those the last scan listed but left out (too large,
        // unreadable): their fate is decided again, as a full scan would.
        let mut look: BTreeSet<&str> = extra.iter().copied().collect();
        for p in changed {
            let p = p.as_str();
            if watch::never_snapshotted(p, skip) {
                continue;
            }
            let name = p.rsplit('/').next().unwrap_or(p);
            if name == ".gitignore" || name == ".ignore" || dirs.contains(p) || left_out.contains(p)
            {
                return Ok(None);
            }
            look.insert(p);
        }
        // What the cache holds of those paths (looked up, not the whole cache built).
        let olds: HashMap<&str, CacheEntry> = look
            .iter()
            .filter_map(|p| cache::find(old, p).map(|e| (*p, e)))
            .collect();
        let old_index: HashMap<&str, &CacheEntry> = olds.iter().map(|(p, e)| (*p, e)).collect();
        // Each looked-at path now: `Some` listed with this metadata, `None` not listed.
        let mut now: Vec<(&str, Option<FileStat>)> = Vec::with_capacity(look.len());
        let mut new_paths = Vec::new();
        for p in look {
            let was_listed = old_index.contains_key(p) || extra.contains(p);
            match stat::lstat(&workspace.join(p)) {
                Err(e) if gone(&e) => {
                    if was_listed {
                        now.push((p, None));
                    }
                }
                Err(_) => return Ok(None),
                Ok(m) if m.is_dir() => return Ok(None),
                Ok(m) if was_listed => now.push((p, Some(m))),
                Ok(m) => {
                    // A new path: listed as a walk would list it, when the last walk
                    // read its directory.
                    let parent = p.rfind('/').map_or("", |i| &p[..i]);
                    if !dirs.contains(parent) {
                        return Ok(None);
                    }
                    new_paths.push((p, m));
                }
            }
        }
        // New paths are asked of the listing's rules, read once for all of them.
        if !new_paths.is_empty() {
            let git = scan::git_context(workspace)?;
            let mut rules = scan::Rules::new(workspace, git.as_ref())?;
            for (p, m) in new_paths {
                if rules.is_listed(p)? {
                    now.push((p, Some(m)));
                }
            }
            now.sort_by(|a, b| a.0.cmp(b.0));
        }
        trace.mark("w:look");

        let mut excluded = old_exclusions(&listed_excluded);
        // Listed paths that stay out of the snapshot (too large, unreadable).
        let mut extra_now: Vec<String> = Vec::new();
        let mut removals: Vec<String> = Vec::new();
        let mut entries: Vec<(String, CacheEntry)> = Vec::new();
        let mut to_read: Vec<(usize, FileStat)> = Vec::new();
        let mut used_ahead: Vec<&HashedAhead> = Vec::new();
        for (p, m) in &now {
            let was = old_index.get(p);
            let Some(m) = m else {
                if was.is_some() {
                    removals.push((*p).to_owned());
                }
                continue;
            };
            if let Some(reason) = self.unsupported(m) {
                excluded.push(Excluded::new((*p).to_owned(), reason));
                extra_now.push((*p).to_owned());
                if was.is_some() {
                    removals.push((*p).to_owned());
                }
                continue;
            }
            let mut stat = stat_entry("", m);
            if let Some(c) = was
                && same_stat(c, &stat)
                && c.mtime_ns < trusted_before
            {
                stat.git_mode = c.git_mode;
                stat.oid = c.oid;
                entries.push(((*p).to_owned(), stat));
                continue;
            }
            if let Some(a) = ahead.get(*p)
                && same_stat(&a.entry, &stat)
                && a.entry.git_mode != 0
                // (With a refresh of the pack list on a miss: a blob hashed ahead may lie
                // in a pack written since this handle listed them.)
                && gix::objs::Exists::exists(
                    &repo.objects,
                    &ObjectId::from_bytes_or_panic(&a.entry.oid),
                )
            {
                stat.git_mode = a.entry.git_mode;
                stat.oid = a.entry.oid;
                stat.size = a.entry.size;
                used_ahead.push(a);
                entries.push(((*p).to_owned(), stat));
                continue;
            }
            to_read.push((entries.len(), *m));
            entries.push(((*p).to_owned(), stat));
        }
        let writes = pack::Writes::batched(self, to_read.len());
        let (mut read, problems) = self.hash_files(workspace, &mut entries, &to_read, &writes)?;
        // Read for this snapshot, only earlier.
        for a in used_ahead {
            read.files += 1;
            read.bytes += a.entry.size;
            read.written += u64::from(a.written);
        }
        trace.mark("w:hash");
        let mut failed = HashSet::new();
        for (i, reason) in problems {
            failed.insert(i);
            let p = entries[i].0.clone();
            excluded.push(Excluded::new(p.clone(), reason));
            if old_index.contains_key(p.as_str()) {
                removals.push(p.clone());
            }
            extra_now.push(p);
        }
        let good: Vec<(&str, &CacheEntry)> = entries
            .iter()
            .enumerate()
            .filter(|(i, _)| !failed.contains(i))
            .map(|(_, (p, e))| (p.as_str(), e))
            .collect();
        let upserts: Vec<(&str, &CacheEntry)> = good
            .iter()
            .filter(|(p, e)| old_index.get(p).is_none_or(|c| differs(c, e)))
            .copied()
            .collect();
        let tree = if upserts.is_empty() && removals.is_empty() {
            base
        } else {
            repo.object_cache_size(Some(8 * 1024 * 1024));
            self.edit_tree(
                &mut repo,
                Some(base),
                upserts.into_iter(),
                removals.iter().map(String::as_str),
                modes::ModesUpdate::Edit,
                &writes,
            )?
        };
        trace.mark("w:tree");
        self.keep(tree, writes)?;

        let (mut files, mut bytes) = old_totals.unwrap_or_else(|| cache::totals(old));
        for p in &removals {
            if let Some(c) = old_index.get(p.as_str()) {
                files -= 1;
                bytes -= c.size as i64;
            }
        }
        for (p, e) in &good {
            match old_index.get(p) {
                Some(c) => bytes += e.size as i64 - c.size as i64,
                None => {
                    files += 1;
                    bytes += e.size as i64;
                }
            }
        }

        let defer = changed.len() <= DEFER_PATHS_MAX
            && changed.len() * DEFER_RATIO <= old.entries.len()
            && read.bytes <= DEFER_BYTES_MAX;
        if !defer {
            // The stat cache as a full scan would leave it, with the new token.
            let old = cache::owned(old);
            let mut by_path: HashMap<&str, Option<&CacheEntry>> =
                removals.iter().map(|p| (p.as_str(), None)).collect();
            for (p, e) in &good {
                by_path.insert(p, Some(e));
            }
            let mut fresh_entries: Vec<CacheEntry> = Vec::with_capacity(old.entries.len());
            for e in &old.entries {
                match by_path.remove(e.path.as_str()) {
                    Some(Some(n)) => fresh_entries.push(CacheEntry {
                        path: e.path.clone(),
                        ..n.clone()
                    }),
                    Some(None) => {}
                    None => fresh_entries.push(e.clone()),
                }
            }
            let mut added = false;
            for (p, n) in by_path {
                if let Some(n) = n {
                    fresh_entries.push(CacheEntry {
                        path: p.to_owned(),
                        ..n.clone()
                    });
                    added = true;
                }
            }
            if added {
                fresh_entries.sort_unstable_by(|a, b| a.path.cmp(&b.path));
            }
            extra_now.sort_unstable();
            extra_now.dedup();
            let mut tree_bytes = [0u8; 20];
            tree_bytes.copy_from_slice(tree.as_bytes());
            cache::save(
                &cache_paths.stat,
                &cache::CacheFile {
                    version: cache::CACHE_VERSION,
                    workspace: old.workspace.clone(),
                    tree: tree_bytes,
                    scan_start_ns,
                    entries: fresh_entries,
                    listed_extra: extra_now,
                    listed_excluded,
                    dirs: old.dirs.clone(),
                    guards: old.guards.clone(),
                    watch_instance: token.instance,
                    watch_gen: token.generation,
                },
            )?;
            trace.mark("w:cache save");
        }
        finish(
            cache_paths,
            tree,
            files.max(0) as u64,
            bytes.max(0) as u64,
            read,
            excluded,
            true,
            false,
            true,
        )
        .map(Some)
    }
}
