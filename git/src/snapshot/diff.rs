//! What changed between two snapshots: each path created, modified, deleted or with
//! only its mode changed, with line counts from a diff of the blobs. The answer for a
//! pair of snapshot ids never changes (they are content addresses), so it is cached
//! under the store's cache directory; deleting the cache costs a recomputation.

use serde::{Deserialize, Serialize};

use super::*;

/// Blobs larger than this, or holding a NUL byte in their first 8 KiB (binary), are
/// counted as changed without line counts.
pub const LINE_DIFF_BYTES_MAX: usize = 8 * 1024 * 1024;

/// How a path differs between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Created,
    Modified,
    Deleted,
    /// The same content, another kind (file, executable, link).
    Mode,
}

/// One path that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathChange {
    pub path: String,
    pub change: ChangeKind,
    pub lines_added: u64,
    pub lines_removed: u64,
}

/// Lines of a blob, or `None` when it is binary (a NUL in its first 8 KiB), not UTF-8
/// or too large to diff.
pub fn text(data: &[u8]) -> Option<&str> {
    if data.len() > LINE_DIFF_BYTES_MAX || data.iter().take(8192).any(|&b| b == 0) {
        return None;
    }
    std::str::from_utf8(data).ok()
}

/// (added, removed) lines from `old` to `new`.
fn line_counts(old: &str, new: &str) -> (u64, u64) {
    use similar::{DiffTag, TextDiff};
    let diff = TextDiff::configure()
        .timeout(std::time::Duration::from_millis(500))
        .diff_lines(old, new);
    let (mut added, mut removed) = (0u64, 0u64);
    for op in diff.ops() {
        match op.tag() {
            DiffTag::Equal => {}
            DiffTag::Insert => added += op.new_range().len() as u64,
            DiffTag::Delete => removed += op.old_range().len() as u64,
            DiffTag::Replace => {
                added += op.new_range().len() as u64;
                removed += op.old_range().len() as u64;
            }
        }
    }
    (added, removed)
}

/// The lines of `text`, without their endings, split as the line diffs split them: at
/// `\n`, `\r\n` and a lone `\r`. (`str::lines` does not split at a lone `\r`: line
/// numbers from the two would disagree on such a file.)
pub fn text_lines(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while let Some(&c) = b.get(i) {
        let ending = match c {
            b'\n' => 1,
            b'\r' if b.get(i + 1) == Some(&b'\n') => 2,
            b'\r' => 1,
            _ => 0,
        };
        if ending == 0 {
            i += 1;
            continue;
        }
        out.push(text.get(start..i).unwrap_or_default());
        i += ending;
        start = i;
    }
    if start < b.len() {
        out.push(text.get(start..).unwrap_or_default());
    }
    out
}

/// How `new` differs from `old`, line by line (1-based inclusive ranges of `new`, in
/// order): `regions`, every hunk — a deletion shows as the line after it, the last
/// line when it removed the end (SARIF regions) —, and `written`, only the lines
/// added or rewritten (line attribution). A patience diff with no deadline: the answer
/// never depends on the machine's speed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineChanges {
    pub regions: Vec<(u32, u32)>,
    pub written: Vec<(u32, u32)>,
}

/// [`LineChanges`] of two blobs; `None` when either is binary or too large.
pub fn line_changes(old: &[u8], new: &[u8]) -> Option<LineChanges> {
    use similar::{Algorithm, DiffTag, TextDiff};
    let (old, new) = (text(old)?, text(new)?);
    let last = u32::try_from(text_lines(new).len())
        .unwrap_or(u32::MAX)
        .max(1);
    let diff = TextDiff::configure()
        .algorithm(Algorithm::Patience)
        .diff_lines(old, new);
    let mut out = LineChanges::default();
    let push = |v: &mut Vec<(u32, u32)>, range: (u32, u32)| match v.last_mut() {
        Some(prev) if range.0 <= prev.1.saturating_add(1) => prev.1 = prev.1.max(range.1),
        _ => v.push(range),
    };
    for op in diff.ops() {
        let r = op.new_range();
        let at = |i: usize| u32::try_from(i).unwrap_or(u32::MAX).saturating_add(1);
        match op.tag() {
            DiffTag::Equal => {}
            DiffTag::Delete => {
                let line = at(r.start).min(last);
                push(&mut out.regions, (line, line));
            }
            DiffTag::Insert | DiffTag::Replace => {
                let range = (at(r.start), at(r.end.saturating_sub(1)));
                push(&mut out.regions, range);
                push(&mut out.written, range);
            }
        }
    }
    Some(out)
}

/// The regions of [`line_changes`].
pub fn changed_line_ranges(old: &[u8], new: &[u8]) -> Option<Vec<(u32, u32)>> {
    line_changes(old, new).map(|c| c.regions)
}

/// Per-line values of `old` (`values`, one per line) carried to `new`: a line the
/// diff keeps keeps its value, a line it adds or rewrites gets `fresh` (line
/// attribution follows authors through later changes this way).
///
/// No deadline: a diff cut short by time would give a large file's every line to the
/// last change, and the answer would depend on the machine's speed. Patience diff
/// (unique lines as anchors) keeps large files with few changes fast.
pub fn carry_lines<T: Clone>(old: &str, new: &str, values: &[T], fresh: &T, missing: &T) -> Vec<T> {
    use similar::{Algorithm, DiffTag, TextDiff};
    let diff = TextDiff::configure()
        .algorithm(Algorithm::Patience)
        .diff_lines(old, new);
    let mut out = Vec::with_capacity(text_lines(new).len());
    for op in diff.ops() {
        match op.tag() {
            DiffTag::Equal => {
                for i in op.old_range() {
                    out.push(values.get(i).unwrap_or(missing).clone());
                }
            }
            DiffTag::Delete => {}
            DiffTag::Insert | DiffTag::Replace => {
                out.extend(std::iter::repeat_n(fresh.clone(), op.new_range().len()));
            }
        }
    }
    out
}

fn lines(s: &str) -> u64 {
    s.lines().count() as u64
}

impl SnapshotStore {
    /// What changed from snapshot `from` to snapshot `to`, in path order (from the
    /// cache when it holds the pair).
    pub fn diff(&self, from: &str, to: &str) -> Result<Vec<PathChange>, SnapshotError> {
        self.diff_with(from, to, true)
    }

    /// [`SnapshotStore::diff`] computed from the objects, whatever the cache holds (a
    /// file of the data directory anyone of the user's can rewrite): what evidence
    /// for others is built on. The cache is written with the answer.
    pub fn diff_uncached(&self, from: &str, to: &str) -> Result<Vec<PathChange>, SnapshotError> {
        self.diff_with(from, to, false)
    }

    fn diff_with(
        &self,
        from: &str,
        to: &str,
        use_cache: bool,
    ) -> Result<Vec<PathChange>, SnapshotError> {
        let cached = self
            .cache_dir
            .join("diffs")
            .join(format!("{from}-{to}.json"));
        if use_cache
            && let Some(c) = std::fs::read(&cached)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
        {
            return Ok(c);
        }
        let (a, b) = (
            self.files(self.resolve(from)?)?,
            self.files(self.resolve(to)?)?,
        );
        let blob_text = |e: &FileEntry| -> Result<Option<String>, SnapshotError> {
            if e.kind == FileKind::Link {
                return Ok(None);
            }
            let data = self.blob(e.oid)?;
            Ok(text(&data).map(str::to_owned))
        };
        let mut out = Vec::new();
        let paths: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for path in paths {
            let (old, new) = (a.get(path), b.get(path));
            if old == new {
                continue;
            }
            let (change, (added, removed)) = match (old, new) {
                (None, Some(n)) => (
                    ChangeKind::Created,
                    (blob_text(n)?.as_deref().map_or(0, lines), 0),
                ),
                (Some(o), None) => (
                    ChangeKind::Deleted,
                    (0, blob_text(o)?.as_deref().map_or(0, lines)),
                ),
                (Some(o), Some(n)) if o.oid == n.oid => (ChangeKind::Mode, (0, 0)),
                (Some(o), Some(n)) => (
                    ChangeKind::Modified,
                    match (blob_text(o)?, blob_text(n)?) {
                        (Some(o), Some(n)) => line_counts(&o, &n),
                        _ => (0, 0),
                    },
                ),
                (None, None) => continue,
            };
            out.push(PathChange {
                path: path.clone(),
                change,
                lines_added: added,
                lines_removed: removed,
            });
        }
        // Derived data: failing to cache it costs a recomputation next time.
        if let Some(dir) = cached.parent()
            && std::fs::create_dir_all(dir).is_ok()
            && let Ok(text) = serde_json::to_vec(&out)
        {
            let tmp = cached.with_extension(format!("tmp{}", std::process::id()));
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(&tmp, &cached);
            }
        }
        Ok(out)
    }
}

/// One path's change as a unified diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileDiff {
    pub path: String,
    pub change: ChangeKind,
    pub lines_added: u64,
    pub lines_removed: u64,
    /// The unified diff (`---`/`+++` headers, hunks with 3 lines of context); `None`
    /// for a binary or oversized file, a link, or a change of mode only.
    pub unified: Option<String>,
}

/// A unified diff of one file (`---`/`+++` headers, hunks with 3 lines of context).
fn unified_text(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    similar::TextDiff::configure()
        .timeout(std::time::Duration::from_millis(500))
        .diff_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string()
}

impl SnapshotStore {
    /// The unified diff of the workspace-relative `path` from its content in snapshot
    /// `from` (absent there: `/dev/null`) to `now` (`None`: deleted since); `None` when
    /// either side is not text (binary, over the line-diff limit) or a link.
    pub fn path_diff(
        &self,
        from: &str,
        path: &str,
        now: Option<&[u8]>,
    ) -> Result<Option<String>, SnapshotError> {
        let files = self.files(self.resolve(from)?)?;
        let old = match files.get(path) {
            None => Some(String::new()),
            Some(e) if e.kind == FileKind::Link => None,
            Some(e) => text(&self.blob(e.oid)?).map(str::to_owned),
        };
        let new = match now {
            None => Some(String::new()),
            Some(b) => text(b).map(str::to_owned),
        };
        let old_name = if files.contains_key(path) {
            format!("a/{path}")
        } else {
            "/dev/null".into()
        };
        let new_name = if now.is_some() {
            format!("b/{path}")
        } else {
            "/dev/null".into()
        };
        Ok(match (old, new) {
            (Some(o), Some(n)) => Some(unified_text(&o, &n, &old_name, &new_name)),
            _ => None,
        })
    }

    /// What changed from snapshot `from` to snapshot `to`, with each text file's
    /// unified diff, in path order.
    pub fn unified_diff(&self, from: &str, to: &str) -> Result<Vec<FileDiff>, SnapshotError> {
        let changes = self.diff(from, to)?;
        let (a, b) = (
            self.files(self.resolve(from)?)?,
            self.files(self.resolve(to)?)?,
        );
        let content = |e: Option<&FileEntry>| -> Result<Option<String>, SnapshotError> {
            match e {
                None => Ok(Some(String::new())),
                Some(e) if e.kind == FileKind::Link => Ok(None),
                Some(e) => Ok(text(&self.blob(e.oid)?).map(str::to_owned)),
            }
        };
        let mut out = Vec::with_capacity(changes.len());
        for c in changes {
            let unified = if c.change == ChangeKind::Mode {
                None
            } else {
                match (content(a.get(&c.path))?, content(b.get(&c.path))?) {
                    (Some(old), Some(new)) => {
                        let old_name = match c.change {
                            ChangeKind::Created => "/dev/null".to_string(),
                            _ => format!("a/{}", c.path),
                        };
                        let new_name = match c.change {
                            ChangeKind::Deleted => "/dev/null".to_string(),
                            _ => format!("b/{}", c.path),
                        };
                        Some(unified_text(&old, &new, &old_name, &new_name))
                    }
                    _ => None,
                }
            };
            out.push(FileDiff {
                path: c.path,
                change: c.change,
                lines_added: c.lines_added,
                lines_removed: c.lines_removed,
                unified,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::changed_line_ranges;

    #[test]
    fn changed_lines_are_the_new_sides_hunks() {
        let old = b"a\nb\nc\nd\ne\n";
        // b replaced, a line inserted after d, e deleted.
        let new = b"a\nB\nc\nd\nx\n";
        assert_eq!(changed_line_ranges(old, new), Some(vec![(2, 2), (5, 5)]));
        // Adjacent hunks merge; a new file is changed throughout.
        assert_eq!(changed_line_ranges(b"", b"1\n2\n3\n"), Some(vec![(1, 3)]));
        // A deletion in the middle points at the line after it.
        assert_eq!(
            changed_line_ranges(b"1\n2\n3\n", b"1\n3\n"),
            Some(vec![(2, 2)])
        );
        // A deletion at the end points at the last line; deleting everything, at line 1.
        assert_eq!(
            changed_line_ranges(b"1\n2\n3\n", b"1\n2\n"),
            Some(vec![(2, 2)])
        );
        assert_eq!(changed_line_ranges(b"1\n", b""), Some(vec![(1, 1)]));
        assert_eq!(changed_line_ranges(b"same\n", b"same\n"), Some(vec![]));
        // Binary content has no lines.
        assert_eq!(changed_line_ranges(b"a\n", b"a\0b\n"), None);
    }

    #[test]
    fn written_lines_leave_deletions_out_and_lines_split_as_the_diff_splits() {
        use super::{line_changes, text_lines};
        let c = line_changes(b"1\n2\n3\n4\n", b"1\n3\nnew\n4\n").expect("text");
        assert_eq!(c.regions, vec![(2, 3)]);
        assert_eq!(
            c.written,
            vec![(3, 3)],
            "line 2 (\"3\") was kept, only moved up"
        );
        assert_eq!(text_lines("a\rb\r\nc\nd"), vec!["a", "b", "c", "d"]);
        assert_eq!(text_lines("a\n"), vec!["a"]);
        assert_eq!(text_lines(""), Vec::<&str>::new());
    }
}
