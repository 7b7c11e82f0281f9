//! Exact permission bits. A Git tree keeps a file as 644 or 755 only: a 0600 secret
//! would come back world-readable from a rollback. A snapshot whose workspace has a
//! file with other permission bits holds them in one more entry of its root tree, the
//! modes entry: a blob under a name that is not UTF-8, which no snapshotted path can
//! be (a scan leaves such names out), so it never collides with a workspace file, and
//! a snapshot of a workspace whose files all have the plain bits is the same tree as
//! before (SPEC.md §10.1).
//!
//! The blob is `tacho.modes 1 <usual regular bits> <usual executable bits>\n` (octal:
//! the bits most files of each kind have, `664 775` in a workspace made under umask
//! 002) and then, sorted by path, one record per file whose bits differ from the usual
//! ones of its kind: the bits in octal, a space, the path, and a NUL (a path can hold a
//! newline, never a NUL). The usual bits keep the entry small whatever the umask; a
//! snapshot whose usual bits are `644 755` and that has no record has no entry.

use std::collections::BTreeMap;

use super::*;

/// The modes entry's name in a snapshot's root tree: not UTF-8 (byte 0xFF).
pub const MODES_NAME: &[u8] = b"\xfftacho.modes";

const MAGIC: &str = "tacho.modes 1";

/// The permission bits of a raw `st_mode` a snapshot keeps: `rwx` for owner, group
/// and others (not set-id nor sticky bits, which a rollback never sets).
pub fn perms_of(mode: u32) -> u32 {
    mode & 0o777
}

/// A snapshot's permission bits: the usual ones of each kind, and the files that
/// differ from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Modes {
    pub(crate) regular: u32,
    pub(crate) executable: u32,
    pub(crate) files: BTreeMap<String, u32>,
}

impl Default for Modes {
    /// What a snapshot without a modes entry says: Git's.
    fn default() -> Self {
        Modes {
            regular: FileKind::Regular.plain_perms(),
            executable: FileKind::Executable.plain_perms(),
            files: BTreeMap::new(),
        }
    }
}

impl Modes {
    /// The bits of a file of `kind` at `path` (0 for a link).
    pub(crate) fn perms(&self, path: &str, kind: FileKind) -> u32 {
        match kind {
            FileKind::Link => 0,
            _ => self
                .files
                .get(path)
                .copied()
                .unwrap_or_else(|| self.usual(kind)),
        }
    }

    fn usual(&self, kind: FileKind) -> u32 {
        match kind {
            FileKind::Regular => self.regular,
            FileKind::Executable => self.executable,
            FileKind::Link => 0,
        }
    }

    /// Records `path`'s bits (`None`: it is not a file any more).
    fn set(&mut self, path: &str, e: Option<&CacheEntry>) {
        match e.and_then(|e| file_bits(e).filter(|(k, p)| *p != self.usual(*k))) {
            Some((_, bits)) => self.files.insert(path.to_owned(), bits),
            None => self.files.remove(path),
        };
    }

    /// Whether a snapshot needs no entry for these: Git's own bits say it all.
    fn is_plain(&self) -> bool {
        *self == Modes::default()
    }

    /// The modes of every file of a full scan, with the usual bits of each kind the
    /// ones most of its files have (the plain ones on a tie).
    fn of_all(entries: &[CacheEntry]) -> Modes {
        let mut counts: HashMap<(FileKind, u32), usize> = HashMap::new();
        for (kind, bits) in entries.iter().filter_map(file_bits) {
            *counts.entry((kind, bits)).or_default() += 1;
        }
        let usual = |kind: FileKind| {
            let plain = kind.plain_perms();
            counts
                .iter()
                .filter(|((k, _), _)| *k == kind)
                .max_by_key(|((_, bits), n)| (**n, *bits == plain, std::cmp::Reverse(*bits)))
                .map_or(plain, |((_, bits), _)| *bits)
        };
        let mut out = Modes {
            regular: usual(FileKind::Regular),
            executable: usual(FileKind::Executable),
            files: BTreeMap::new(),
        };
        for e in entries {
            out.set(&e.path, Some(e));
        }
        out
    }
}

/// The kind and bits of a stat cache entry of a file (`None` for a link).
fn file_bits(e: &CacheEntry) -> Option<(FileKind, u32)> {
    let kind = FileKind::from_git_mode(e.git_mode)?;
    (kind != FileKind::Link).then(|| (kind, perms_of(e.mode)))
}

/// The entry's bytes; `None` when a snapshot needs none.
pub(crate) fn encode(modes: &Modes) -> Option<Vec<u8>> {
    if modes.is_plain() {
        return None;
    }
    let mut out = format!("{MAGIC} {:o} {:o}\n", modes.regular, modes.executable).into_bytes();
    for (path, perms) in &modes.files {
        out.extend_from_slice(format!("{perms:o} ").as_bytes());
        out.extend_from_slice(path.as_bytes());
        out.push(0);
    }
    Some(out)
}

/// Reads a modes blob; `what` names it in errors.
pub(crate) fn decode(data: &[u8], what: &str) -> Result<Modes, SnapshotError> {
    let bad = |why: &str| SnapshotError::Repository(format!("{what}: {why}"));
    // Octal as the entry writes it: no sign, no leading zero, at most 0777.
    let bits = |text: &str| {
        u32::from_str_radix(text, 8)
            .ok()
            .filter(|p| *p <= 0o777 && format!("{p:o}") == text)
            .ok_or_else(|| bad(&format!("bits {text:?}")))
    };
    let nl = data
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| bad("not a modes entry (tacho.modes 1)"))?;
    let (header, body) = data.split_at(nl);
    let header = std::str::from_utf8(header).map_err(|_| bad("a header that is not UTF-8"))?;
    let usual = header
        .strip_prefix(MAGIC)
        .and_then(|r| r.strip_prefix(' '))
        .and_then(|r| r.split_once(' '))
        .ok_or_else(|| bad("not a modes entry (tacho.modes 1)"))?;
    let mut out = Modes {
        regular: bits(usual.0)?,
        executable: bits(usual.1)?,
        files: BTreeMap::new(),
    };
    if FileKind::of_file_mode(out.regular) != FileKind::Regular
        || FileKind::of_file_mode(out.executable) != FileKind::Executable
    {
        return Err(bad("usual bits of the wrong kind"));
    }
    let mut last: Option<String> = None;
    let mut rest = body.get(1..).unwrap_or_default();
    while !rest.is_empty() {
        let end = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| bad("a record without its NUL"))?;
        let (record, tail) = rest.split_at(end);
        rest = tail.get(1..).unwrap_or_default();
        let record = std::str::from_utf8(record).map_err(|_| bad("a record is not UTF-8"))?;
        let (perms, path) = record
            .split_once(' ')
            .ok_or_else(|| bad("a record without a space"))?;
        let perms = bits(perms)?;
        if path.is_empty() || last.as_deref().is_some_and(|l| l >= path) {
            return Err(bad(&format!(
                "path {path:?} empty, or not after the one before"
            )));
        }
        if perms == out.usual(FileKind::of_file_mode(perms)) {
            return Err(bad(&format!("{path:?} listed with the usual bits")));
        }
        out.files.insert(path.to_owned(), perms);
        last = Some(path.to_owned());
    }
    if out.is_plain() {
        return Err(bad(
            "plain bits and no record: a snapshot that needs no entry",
        ));
    }
    Ok(out)
}

/// Checks `modes` against the files of its tree: every record names a file (not a
/// link) whose kind its bits agree with (an execute bit exactly when the tree entry is
/// executable).
pub(crate) fn check(modes: &Modes, files: &Files, tree: ObjectId) -> Result<(), SnapshotError> {
    for (path, perms) in &modes.files {
        match files.get(path) {
            Some(e) if e.kind != FileKind::Link && FileKind::of_file_mode(*perms) == e.kind => {}
            Some(e) => {
                return Err(SnapshotError::Repository(format!(
                    "snapshot {tree}: its modes entry gives {path:?} bits {perms:o}, which a {} cannot have",
                    e.kind.as_str()
                )));
            }
            None => {
                return Err(SnapshotError::Repository(format!(
                    "snapshot {tree}: its modes entry names {path:?}, which is not a file of it"
                )));
            }
        }
    }
    Ok(())
}

/// The modes entry of a root tree's entry, if it is one: a plain blob entry under
/// [`MODES_NAME`] (another entry mode there is refused).
pub(crate) fn entry_of(
    name: &[u8],
    mode: gix::objs::tree::EntryMode,
    oid: ObjectId,
) -> Result<Option<ObjectId>, SnapshotError> {
    if name != MODES_NAME {
        return Ok(None);
    }
    if mode.kind() != EntryKind::Blob {
        return Err(SnapshotError::Repository(format!(
            "the modes entry {oid} is not a plain blob entry (mode {:o})",
            mode.value()
        )));
    }
    Ok(Some(oid))
}

/// The modes blob `id` of a snapshot, checked against its id.
pub(crate) fn read(repo: &gix::Repository, id: ObjectId) -> Result<Modes, SnapshotError> {
    let obj = repo
        .find_object(id)
        .map_err(|e| SnapshotError::git(format!("reading the modes entry {id}"), e))?;
    if obj.kind != gix::object::Kind::Blob {
        return Err(SnapshotError::Repository(format!(
            "the modes entry {id} is a {}",
            obj.kind
        )));
    }
    check_id(id, gix::object::Kind::Blob, &obj.data)?;
    decode(&obj.data, &format!("the modes entry {id}"))
}

/// How the modes entry of a new tree is found.
pub(crate) enum ModesUpdate<'a> {
    /// From every file of the snapshot (a full scan's entries).
    Whole(&'a [CacheEntry]),
    /// From the base tree's entry, with the upserted paths' bits and without the
    /// removed paths (a snapshot of some paths on top of the last one).
    Edit,
}

/// The new modes: `base` edited by `upserts` and `removals`, or all of them anew.
pub(crate) fn updated<'e>(
    how: &ModesUpdate<'_>,
    mut base: Modes,
    upserts: &[(&'e str, &'e CacheEntry)],
    removals: &[&'e str],
) -> Modes {
    match how {
        ModesUpdate::Whole(entries) => Modes::of_all(entries),
        ModesUpdate::Edit => {
            // A path removed or written may have been a directory (its files' records
            // go) or be under what was a file (that file's record goes).
            let mut drop_around = |p: &str| {
                let prefix = format!("{p}/");
                let under: Vec<String> = base
                    .files
                    .range(prefix.clone()..)
                    .take_while(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in under {
                    base.files.remove(&k);
                }
                for (i, _) in p.match_indices('/') {
                    base.files.remove(&p[..i]);
                }
            };
            for p in removals {
                drop_around(p);
            }
            for (p, _) in upserts {
                drop_around(p);
            }
            for p in removals {
                base.set(p, None);
            }
            for (p, e) in upserts {
                base.set(p, Some(e));
            }
            base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, mode: u32) -> CacheEntry {
        CacheEntry {
            path: path.into(),
            size: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            ino: 0,
            dev: 0,
            mode: 0o100000 | mode,
            git_mode: FileKind::of_file_mode(mode).git_mode(),
            oid: [0; 20],
        }
    }

    #[test]
    fn modes_round_trip_and_damage_is_refused() {
        let mut m = Modes::default();
        m.files.insert("a/secret key".into(), 0o600);
        m.files.insert("line\nbreak".into(), 0o400);
        m.files.insert("x".into(), 0o700);
        let bytes = encode(&m).unwrap();
        assert_eq!(decode(&bytes, "t").unwrap(), m);
        assert_eq!(encode(&Modes::default()), None);
        assert!(decode(b"tacho.modes 1 644 755\n", "t").is_err());
        for bad in [
            &b"tacho.modes 1 644 755\n600 a"[..],
            b"tacho.modes 1 644 755\n1000 a\0",
            b"tacho.modes 1 644 755\n600 a\x00600 a\0",
            b"tacho.modes 1 644\n",
            b"tacho.modes 1 644 999\n",
            b"other\n",
            b"",
        ] {
            assert!(
                decode(bad, "t").is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// Under umask 002 every file is 0664 or 0775: the usual bits say so, and the
    /// entry lists only the files that differ, however many files there are.
    #[test]
    fn the_usual_bits_are_the_most_common_ones() {
        let mut entries: Vec<CacheEntry> = (0..1000)
            .map(|i| entry(&format!("f{i:04}"), 0o664))
            .collect();
        entries.push(entry("run.sh", 0o775));
        entries.push(entry("secret", 0o600));
        let m = Modes::of_all(&entries);
        assert_eq!((m.regular, m.executable), (0o664, 0o775));
        assert_eq!(m.files.len(), 1);
        assert_eq!(m.perms("secret", FileKind::Regular), 0o600);
        assert_eq!(m.perms("f0001", FileKind::Regular), 0o664);
        assert!(encode(&m).unwrap().len() < 40);
        // Plain bits everywhere: no entry at all.
        let plain = Modes::of_all(&[entry("a", 0o644), entry("b", 0o755)]);
        assert_eq!(encode(&plain), None);
        // A tie keeps Git's bits.
        let tie = Modes::of_all(&[entry("a", 0o644), entry("b", 0o600)]);
        assert_eq!(tie.regular, 0o644);
    }
}
