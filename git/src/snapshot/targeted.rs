//! A targeted snapshot: only the named paths, on top of the workspace's last tree.

use super::*;

impl SnapshotStore {
    pub(super) fn take_paths(
        &self,
        workspace: &Path,
        head: cache::Head,
        paths: &[String],
        skip: Option<&str>,
        cache_paths: &cache::CachePaths,
    ) -> Result<Snapshot, SnapshotError> {
        let trace = Trace::new();
        let git = scan::git_context(workspace)?;
        let mut rules = scan::Rules::new(workspace, git.as_ref())?;
        trace.mark("t:git context");
        let mut excluded = Vec::new();
        let mut entries: Vec<(String, CacheEntry)> = Vec::new();
        let mut to_read = Vec::new();
        let mut removed = Vec::new();
        let ws_dev = stat::lstat(workspace)
            .map_err(|e| SnapshotError::io(workspace, e))?
            .dev;
        let mut rels = std::collections::BTreeSet::new();
        for p in paths {
            rels.insert(relative_path(workspace, p)?);
        }
        for rel in rels {
            if skip.is_some_and(|s| rel == s || rel.starts_with(&format!("{s}/"))) {
                continue;
            }
            // Only what a full scan would list is stored, and a full scan never goes
            // through a link: neither stored nor removed, reported as not protected.
            if let Some(link) = linked_parent(workspace, &rel) {
                excluded.push(Excluded::new(rel, ExcludeReason::ThroughLink(link)));
                continue;
            }
            let abs = workspace.join(&rel);
            let meta = match stat::lstat(&abs) {
                Ok(m) => m,
                Err(e) if gone(&e) => {
                    removed.push(rel);
                    continue;
                }
                Err(e) => {
                    excluded.push(Excluded::new(rel, ExcludeReason::Unreadable(e.to_string())));
                    continue;
                }
            };
            // On another device: below a mount point, perhaps of a pseudo file system,
            // which a full scan never walks into either.
            if meta.dev != ws_dev
                && let Some(fs) = pseudo_fs_of(&abs)
            {
                excluded.push(Excluded::new(
                    rel.clone(),
                    ExcludeReason::PseudoFileSystem(fs.to_owned()),
                ));
                removed.push(rel);
                continue;
            }
            if meta.is_dir() {
                // A directory appeared where the edit happened: only a full scan knows
                // what is inside it and which of it is ignored.
                let ws_text = workspace.to_str().unwrap_or_default().to_owned();
                return self.take_full(
                    workspace,
                    &ws_text,
                    skip,
                    cache_paths,
                    full::WatcherUse::Ask,
                );
            }
            if !rules.is_listed(&rel)? {
                removed.push(rel);
                continue;
            }
            if let Some(reason) = self.unsupported(&meta) {
                excluded.push(Excluded::new(rel.clone(), reason));
                removed.push(rel);
                continue;
            }
            to_read.push((entries.len(), meta));
            let stat = stat_entry(&rel, &meta);
            entries.push((rel, stat));
        }
        trace.mark("t:check paths");
        let writes = pack::Writes::for_reads(self, to_read.len());
        let (read, problems) = self.hash_files(workspace, &mut entries, &to_read, &writes)?;
        trace.mark("t:hash");
        let mut failed = std::collections::HashSet::new();
        for (i, reason) in problems {
            failed.insert(i);
            removed.push(entries[i].0.clone());
            excluded.push(Excluded::new(entries[i].0.clone(), reason));
        }
        let mut repo = self.repo()?;
        // The counts and the editor read the same few trees.
        repo.object_cache_size(Some(8 * 1024 * 1024));
        let base = ObjectId::from_bytes_or_panic(&head.tree);
        // The counts move by what the named paths held before and hold now.
        let base_tree = repo
            .find_tree(base)
            .map_err(|e| SnapshotError::git(format!("reading tree {base}"), e))?;
        let mut files = head.files as i64;
        let mut bytes = head.bytes as i64;
        // What the base held at a path: a file, or every file of a directory there
        // (a directory removed, or replaced by a file), as (files, bytes).
        let size_of = |id: ObjectId, path: &str| -> Result<i64, SnapshotError> {
            Ok(repo
                .find_header(id)
                .map_err(|e| SnapshotError::git(format!("reading {path}"), e))?
                .size() as i64)
        };
        let before = |path: &str| -> Result<(i64, i64), SnapshotError> {
            let old = base_tree
                .lookup_entry_by_path(path)
                .map_err(|e| SnapshotError::git(format!("reading tree {base}"), e))?;
            let Some(old) = old else { return Ok((0, 0)) };
            if !old.mode().is_tree() {
                return Ok((1, size_of(old.object_id(), path)?));
            }
            let (mut n, mut b) = (0, 0);
            let mut pending = vec![old.object_id()];
            while let Some(t) = pending.pop() {
                let tree = repo
                    .find_tree(t)
                    .map_err(|e| SnapshotError::git(format!("reading tree {t}"), e))?;
                for e in tree.iter() {
                    let e = e.map_err(|e| SnapshotError::git(format!("reading tree {t}"), e))?;
                    if e.mode().is_tree() {
                        pending.push(e.oid().to_owned());
                    } else if FileKind::from_git_mode(e.mode().value() as u32).is_some() {
                        n += 1;
                        b += size_of(e.oid().to_owned(), path)?;
                    }
                }
            }
            Ok((n, b))
        };
        // Each path of the base counted out once: a named path, and a file the base
        // held where a named path now has a directory (`f` for `f/inner`).
        let mut counted_out = std::collections::HashSet::new();
        let mut count_out = |path: &str| -> Result<(), SnapshotError> {
            if counted_out.insert(path.to_owned()) {
                let (n, b) = before(path)?;
                files -= n;
                bytes -= b;
            }
            Ok(())
        };
        for (i, (path, _)) in entries.iter().enumerate() {
            if !failed.contains(&i) {
                for (k, _) in path.match_indices('/') {
                    let parent = &path[..k];
                    let held = base_tree
                        .lookup_entry_by_path(parent)
                        .map_err(|e| SnapshotError::git(format!("reading tree {base}"), e))?;
                    if held.is_some_and(|h| !h.mode().is_tree()) {
                        count_out(parent)?;
                    }
                }
                count_out(path)?;
            }
        }
        for path in &removed {
            count_out(path)?;
        }
        for (i, (_, e)) in entries.iter().enumerate() {
            if !failed.contains(&i) {
                files += 1;
                bytes += e.size as i64;
            }
        }
        trace.mark("t:counts");
        drop(base_tree);
        let upserts = entries
            .iter()
            .enumerate()
            .filter(|(i, _)| !failed.contains(i))
            .map(|(_, (path, e))| (path.as_str(), e));
        let tree = self.edit_tree(
            &mut repo,
            Some(base),
            upserts,
            removed.iter().map(String::as_str),
            modes::ModesUpdate::Edit,
            &writes,
        )?;
        trace.mark("t:tree");
        self.keep(tree, writes)?;
        trace.mark("t:ref");
        let (files, bytes) = (files.max(0) as u64, bytes.max(0) as u64);
        finish(
            cache_paths,
            tree,
            files,
            bytes,
            read,
            excluded,
            false,
            false,
            false,
        )
    }
}
