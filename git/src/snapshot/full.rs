//! A full scan: list the workspace (or reuse the last walk), stat every path, read
//! only what changed since the stat cache, and edit the previous tree.

use super::*;

/// What a full scan does with the workspace's watcher.
pub(super) enum WatcherUse {
    /// Ask it (it takes the snapshot, or says what changed).
    Ask,
    /// Ask nothing: the scan checks what the watcher answered with this token.
    Checking(Option<watch::Token>),
}

impl SnapshotStore {
    pub(super) fn take_full(
        &self,
        workspace: &Path,
        ws_text: &str,
        skip: Option<&str>,
        cache_paths: &cache::CachePaths,
        watcher: WatcherUse,
    ) -> Result<Snapshot, SnapshotError> {
        let scan_start_ns = now_ns();
        let trace = Trace::new();
        // With a watcher running, it takes the snapshot itself: it holds the stat cache
        // in memory and knows what changed. When it cannot (only a walk can tell), this
        // scan stores its token. (No socket, no watcher: nothing is asked.) A scan that
        // checks the watcher reads every file's status itself, and stores the token of
        // the watcher's answer it checks (this scan is newer than it).
        let checking = matches!(watcher, WatcherUse::Checking(_));
        let (watcher, checked_token) = match &watcher {
            WatcherUse::Ask => (
                watch::socket_path(&self.cache_dir, workspace).exists(),
                None,
            ),
            WatcherUse::Checking(token) => (false, *token),
        };
        // A checking scan reads again every file changed lately enough that a shared
        // writable mapping of it may hold writes its times do not show yet.
        let mapped_before = match checking {
            true => scan_start_ns.saturating_sub(cache::mapped_write_window_ns()),
            false => i64::MAX,
        };
        let served = watcher
            .then(|| watch::served_snapshot(&self.cache_dir, workspace, self.max_file_bytes))
            .flatten();
        trace.mark("served");
        let served_token = match served {
            Some(r) => match r.snapshot.and_then(watch::ServedSnapshot::into_snapshot) {
                Some(snap) => return Ok(snap),
                None => Some(r.token),
            },
            None => checked_token,
        };
        let loaded = cache::Loaded::read(&cache_paths.stat);
        let archived = loaded.as_ref().and_then(|l| l.get(ws_text));
        let trusted_before = archived.map_or(0, |a| a.scan_start_ns.to_native()) - cache::RACY_NS;
        trace.mark("cache read");
        let answer = match served_token {
            Some(token) => Some(watch::Answer { token, paths: None }),
            // A watcher that does not take snapshots (one started by an earlier tacho)
            // is asked only what changed.
            None if watcher => {
                let q = watch_question(workspace, archived);
                let answer =
                    watch::changes_since(&self.cache_dir, workspace, q.since, !q.rules_same);
                if let (Some(a), Some(old), true) = (&answer, archived, q.rules_same)
                    && let Some(changed) = &a.paths
                    && let Some(snap) = self.take_watched(
                        workspace,
                        skip,
                        cache_paths,
                        old,
                        None,
                        changed,
                        &HashMap::new(),
                        a.token,
                        &trace,
                    )?
                {
                    return Ok(snap);
                }
                answer
            }
            None => None,
        };
        let old = archived.map(cache::owned).unwrap_or_default();
        trace.mark("cache load");
        let reused = reuse_listing(workspace, &old, trusted_before);
        let walked = reused.is_none();
        let listing = match reused {
            Some(l) => l,
            None => scan::list(workspace, skip, self.threads())?,
        };
        trace.mark("list");
        // Listed paths that stay out of the entries (gone, a directory, left out): with
        // the entries, the listing the cache keeps.
        let mut listed_extra: Vec<String> = Vec::new();
        let listed_excluded: Vec<cache::ListedExclusion> = listing
            .excluded
            .iter()
            .filter_map(listed_exclusion)
            .collect();
        let dirs = listing.dirs;
        let guards = listing.guards;
        let mut excluded = listing.excluded;
        let metas = stat_all(workspace, listing.paths, self.threads());
        // The cache's blob ids are trusted only while the store still holds them: with
        // the last tree gone (gc dropped it), each reused id is looked up, and a file
        // whose blob is missing is read again. A snapshot never names a missing object.
        let mut repo = self.repo()?;
        let base = ObjectId::from_bytes_or_panic(&old.tree);
        let base_ok = !old.entries.is_empty() && repo.has_object(base);
        let mut entries: Vec<(String, CacheEntry)> = Vec::with_capacity(metas.len());
        let mut to_read: Vec<(usize, FileStat)> = Vec::new();
        // The listing and the cache's entries are both sorted by path: the entry of
        // each listed path is found by walking the two in step.
        let mut cursor = 0;
        for (path, meta) in metas {
            let meta = match meta {
                Ok(m) => m,
                // Deleted since it was listed (or a tracked file that is gone).
                Err(e) if gone(&e) => {
                    listed_extra.push(path);
                    continue;
                }
                Err(e) => {
                    excluded.push(Excluded::new(
                        path.clone(),
                        ExcludeReason::Unreadable(e.to_string()),
                    ));
                    listed_extra.push(path);
                    continue;
                }
            };
            if meta.is_dir() {
                listed_extra.push(path);
                continue;
            }
            if let Some(reason) = self.unsupported(&meta) {
                excluded.push(Excluded::new(path.clone(), reason));
                listed_extra.push(path);
                continue;
            }
            let mut stat = stat_entry("", &meta);
            let mut cached = None;
            while let Some(c) = old.entries.get(cursor) {
                match c.path.as_str().cmp(path.as_str()) {
                    std::cmp::Ordering::Less => cursor += 1,
                    std::cmp::Ordering::Equal => {
                        cached = Some(c);
                        break;
                    }
                    std::cmp::Ordering::Greater => break,
                }
            }
            if let Some(c) = cached
                && same_stat(c, &stat)
                && c.mtime_ns < trusted_before
                && c.ctime_ns < mapped_before
                && (base_ok || repo.has_object(ObjectId::from_bytes_or_panic(&c.oid)))
            {
                stat.git_mode = c.git_mode;
                stat.oid = c.oid;
                entries.push((path, stat));
                continue;
            }
            to_read.push((entries.len(), meta));
            entries.push((path, stat));
        }
        trace.mark("lstat");
        let writes = pack::Writes::for_reads(self, to_read.len());
        let (read, problems) = self.hash_files(workspace, &mut entries, &to_read, &writes)?;
        trace.mark("hash");
        let mut failed = std::collections::HashSet::new();
        for (i, reason) in problems {
            failed.insert(i);
            excluded.push(Excluded::new(entries[i].0.clone(), reason));
            listed_extra.push(entries[i].0.clone());
        }
        listed_extra.sort_unstable();
        let entries: Vec<CacheEntry> = entries
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !failed.contains(i))
            .map(|(_, (path, mut e))| {
                e.path = path;
                e
            })
            .collect();

        // Edit the previous tree where there is one: only changed directories are
        // rewritten.
        repo.object_cache_size(Some(8 * 1024 * 1024));
        // Trees are built in memory and written to disk on all threads afterwards.
        repo.objects.enable_object_memory();
        // Only what changed since the cached tree is edited into it: one merge of the
        // two sorted lists.
        let (upserts, removals) = if base_ok {
            changes(&old.entries, &entries)
        } else {
            (
                entries.iter().map(|e| (e.path.as_str(), e)).collect(),
                Vec::new(),
            )
        };
        let upserts = upserts.into_iter();
        let tree = self.edit_tree(
            &mut repo,
            base_ok.then_some(base),
            upserts,
            removals.into_iter(),
            modes::ModesUpdate::Whole(&entries),
            &writes,
        )?;
        trace.mark("tree");
        self.keep(tree, writes)?;
        trace.mark("ref");

        let files = entries.len() as u64;
        let bytes = entries.iter().map(|e| e.size).sum();
        let mut tree_bytes = [0u8; 20];
        tree_bytes.copy_from_slice(tree.as_bytes());
        let fresh = cache::CacheFile {
            version: cache::CACHE_VERSION,
            workspace: ws_text.to_owned(),
            tree: tree_bytes,
            scan_start_ns,
            listed_extra,
            entries,
            listed_excluded,
            dirs,
            guards,
            watch_instance: answer.as_ref().map_or(0, |a| a.token.instance),
            watch_gen: answer.as_ref().map_or(0, |a| a.token.generation),
        };
        // An unchanged workspace keeps its cache file as it is (rewriting it is a
        // third of an unchanged scan) — when nothing in it is within the racy window
        // of the scan it came from, so that keeping the older scan time costs no
        // re-read later.
        let settled = |m: i64, c: i64| m < trusted_before && c < trusted_before;
        let unchanged = base_ok
            && read.files == 0
            && fresh.tree == old.tree
            && fresh.entries == old.entries
            && fresh.listed_extra == old.listed_extra
            && fresh.listed_excluded == old.listed_excluded
            && fresh.dirs == old.dirs
            && fresh.guards == old.guards
            && fresh.guards.iter().all(|g| settled(g.mtime_ns, g.ctime_ns))
            && fresh.dirs.iter().all(|d| settled(d.mtime_ns, d.ctime_ns))
            && fresh
                .entries
                .iter()
                .all(|e| settled(e.mtime_ns, e.ctime_ns));
        // A new watcher token (or none, once the watcher is gone) is saved.
        let token_same = answer.as_ref().map_or(0, |a| a.token.instance) == old.watch_instance
            && answer.as_ref().map_or(0, |a| a.token.generation) == old.watch_gen;
        if !unchanged || !token_same {
            cache::save(&cache_paths.stat, &fresh)?;
        }
        trace.mark("cache save");
        finish(
            cache_paths,
            tree,
            files,
            bytes,
            read,
            excluded,
            true,
            walked,
            false,
        )
    }
}

/// The metadata (not following links) of every listed path, on `threads` threads;
/// what the walk already read is kept. Paths are sorted, so the files of a directory
/// come together and are looked up through one descriptor of it.
pub(super) fn stat_all(
    workspace: &Path,
    paths: Vec<(String, Option<FileStat>)>,
    threads: usize,
) -> Vec<(String, std::io::Result<FileStat>)> {
    // Runs of paths that share a directory and have no metadata yet.
    let mut groups: Vec<std::ops::Range<usize>> = Vec::new();
    fn dir_of(p: &str) -> &str {
        p.rfind('/').map_or("", |i| &p[..i])
    }
    let mut i = 0;
    while i < paths.len() {
        let mut j = i + 1;
        if paths[i].1.is_none() {
            let d = dir_of(&paths[i].0);
            while j < paths.len() && paths[j].1.is_none() && dir_of(&paths[j].0) == d {
                j += 1;
            }
        }
        groups.push(i..j);
        i = j;
    }
    let stat_group = |r: std::ops::Range<usize>| -> Vec<std::io::Result<FileStat>> {
        let group = &paths[r];
        if let Some(m) = group[0].1 {
            return vec![Ok(m)];
        }
        let dir = dir_of(&group[0].0);
        let names: Vec<&str> = group
            .iter()
            .map(|(p, _)| p.rsplit('/').next().unwrap_or(p))
            .collect();
        stat::lstat_in(&workspace.join(dir), &names)
    };
    let missing = paths.iter().filter(|p| p.1.is_none()).count();
    let results: Vec<std::io::Result<FileStat>> = if missing < 512 || threads < 2 {
        groups.into_iter().flat_map(stat_group).collect()
    } else {
        // Contiguous shares of the groups, one per thread, joined in order.
        let share = groups.len().div_ceil(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = groups
                .chunks(share)
                .map(|c| {
                    let c = c.to_vec();
                    s.spawn(move || c.into_iter().flat_map(stat_group).collect::<Vec<_>>())
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        })
    };
    paths.into_iter().map(|(p, _)| p).zip(results).collect()
}

/// The last walk's listing, when repeating the walk would give the same: it was a walk
/// that read every directory, no directory has changed since (and none changed within
/// the racy window before that scan), no ignore file changed, and inside Git none of
/// the files that decide its listing (the index, exclude files, configuration) did:
/// Git's untracked cache relies on the same facts.
pub(super) fn reuse_listing(
    workspace: &Path,
    old: &cache::CacheFile,
    trusted_before: i64,
) -> Option<scan::Listing> {
    if old.dirs.is_empty() {
        return None;
    }
    for d in &old.dirs {
        let m = stat::lstat(&workspace.join(&d.path)).ok()?;
        let now = cache::DirStamp::of(d.path.clone(), &m);
        if now != *d || d.mtime_ns >= trusted_before || !m.is_dir() {
            return None;
        }
    }
    for g in &old.guards {
        let now = cache::GuardStamp::now(Path::new(&g.path))?;
        if now != *g || g.mtime_ns >= trusted_before {
            return None;
        }
    }
    let mut listed: Vec<&str> = old
        .entries
        .iter()
        .map(|e| e.path.as_str())
        .chain(old.listed_extra.iter().map(String::as_str))
        .collect();
    if !old.listed_extra.is_empty() {
        listed.sort_unstable();
    }
    for p in &listed {
        let name = p.rsplit('/').next().unwrap_or(p);
        if name == ".gitignore" || name == ".ignore" {
            let c = cache::entry(old, p)?;
            let m = stat::lstat(&workspace.join(p)).ok()?;
            if !same_stat(c, &stat_entry("", &m)) || c.mtime_ns >= trusted_before {
                return None;
            }
        }
    }
    Some(scan::Listing {
        paths: listed.into_iter().map(|p| (p.to_owned(), None)).collect(),
        excluded: old_exclusions(&old.listed_excluded),
        dirs: old.dirs.clone(),
        guards: old.guards.clone(),
    })
}

/// What the last walk left out, as it reported it.
pub(super) fn old_exclusions(listed_excluded: &[cache::ListedExclusion]) -> Vec<Excluded> {
    listed_excluded
        .iter()
        .map(|x| {
            let reason = match x.code {
                0 => ExcludeReason::Special,
                1 => ExcludeReason::NestedRepository,
                3 => ExcludeReason::NotUtf8,
                4 => ExcludeReason::PseudoFileSystem(x.detail.clone()),
                _ => ExcludeReason::Unreadable(x.detail.clone()),
            };
            Excluded::new(x.path.clone(), reason)
        })
        .collect()
}

/// A walk's exclusion as the cache keeps it.
pub(super) fn listed_exclusion(x: &Excluded) -> Option<cache::ListedExclusion> {
    let (code, detail) = match &x.reason {
        ExcludeReason::Special => (0, String::new()),
        ExcludeReason::NestedRepository => (1, String::new()),
        ExcludeReason::Unreadable(e) => (2, e.clone()),
        ExcludeReason::NotUtf8 => (3, String::new()),
        ExcludeReason::PseudoFileSystem(fs) => (4, fs.clone()),
        _ => return None,
    };
    Some(cache::ListedExclusion {
        path: x.path.clone(),
        code,
        detail,
    })
}

/// What differs between two path-sorted entry lists: (set in `new`, gone from `old`).
#[allow(clippy::type_complexity)]
pub(super) fn changes<'a>(
    old: &'a [CacheEntry],
    new: &'a [CacheEntry],
) -> (Vec<(&'a str, &'a CacheEntry)>, Vec<&'a str>) {
    let (mut set, mut gone) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        match (old.get(i), new.get(j)) {
            (Some(o), Some(n)) if o.path == n.path => {
                if differs(o, n) {
                    set.push((n.path.as_str(), n));
                }
                i += 1;
                j += 1;
            }
            (Some(o), Some(n)) if o.path < n.path => {
                gone.push(o.path.as_str());
                i += 1;
            }
            (Some(o), None) => {
                gone.push(o.path.as_str());
                i += 1;
            }
            (_, Some(n)) => {
                set.push((n.path.as_str(), n));
                j += 1;
            }
            (None, None) => break,
        }
    }
    (set, gone)
}

/// Whether a snapshot holds `new` otherwise than `old`: content, kind or permission
/// bits.
pub(super) fn differs(old: &CacheEntry, new: &CacheEntry) -> bool {
    old.oid != new.oid
        || old.git_mode != new.git_mode
        || modes::perms_of(old.mode) != modes::perms_of(new.mode)
}

pub(super) fn same_stat(a: &CacheEntry, b: &CacheEntry) -> bool {
    a.size == b.size
        && a.mtime_ns == b.mtime_ns
        && a.ctime_ns == b.ctime_ns
        && a.ino == b.ino
        && a.dev == b.dev
        && a.mode == b.mode
}

/// What a scan asks the workspace's watcher, from the stat cache: whether the files
/// that decide the listing are as the cache saw them (otherwise the watcher lists the
/// workspace again first), and the token the cache reflects.
pub(super) struct WatchQuestion {
    pub rules_same: bool,
    pub since: Option<watch::Token>,
}

pub(super) fn watch_question(
    workspace: &Path,
    archived: Option<&cache::ArchivedCacheFile>,
) -> WatchQuestion {
    let trusted_before = archived.map_or(0, |a| a.scan_start_ns.to_native()) - cache::RACY_NS;
    // (A guard inside the workspace, its `.gitignore`, is one the watcher reports.)
    let guards: Vec<cache::GuardStamp> = archived
        .and_then(|a| {
            rkyv::deserialize::<Vec<cache::GuardStamp>, rkyv::rancor::Error>(&a.guards).ok()
        })
        .unwrap_or_default();
    let rules_same = guards.iter().all(|g| {
        cache::GuardStamp::now(Path::new(&g.path)).as_ref() == Some(g)
            && (g.mtime_ns < trusted_before
                || Path::new(&g.path)
                    .strip_prefix(workspace)
                    .is_ok_and(|r| !r.components().any(|c| c.as_os_str() == ".git")))
    });
    let since = archived
        .filter(|a| a.watch_instance.to_native() != 0)
        .map(|a| watch::Token {
            instance: a.watch_instance.to_native(),
            generation: a.watch_gen.to_native(),
        });
    WatchQuestion { rules_same, since }
}
