//! Exact permission bits. A Git tree keeps a file as 644 or 755 only: a 0600 secret
//! would come back world-readable from a rollback. A snapshot whose workspace has a
//! file with other permission bits holds them in one more entry of its root tree, the
//! modes entry: a blob under a name that is not UTF-8, which no snapshotted path can
//! be (a scan leaves such names out), so it never collides with a workspace file, and
//! a snapshot of a workspace whose files all have the plain bits is the same tree as
//! before (SPEC.md §10.1).
//!
//! The blob is `tacho.modes 1\n` and then, sorted by path, one record per file whose
//! bits differ from its kind's plain ones: the bits in octal, a space, the path, and a
//! NUL (a path can hold a newline, never a NUL).

use std::collections::BTreeMap;

use super::*;

/// The modes entry's name in a snapshot's root tree: not UTF-8 (byte 0xFF).
pub const MODES_NAME: &[u8] = b"\xfftacho.modes";

const HEADER: &[u8] = b"tacho.modes 1\n";

/// The permission bits of a raw `st_mode` a snapshot keeps: `rwx` for owner, group
/// and others (not set-id nor sticky bits, which a rollback never sets).
pub fn perms_of(mode: u32) -> u32 {
    mode & 0o777
}

/// Paths and their bits, for the files whose bits differ from their kind's plain ones.
pub(crate) type Modes = BTreeMap<String, u32>;

/// The bits of a stat cache entry that a snapshot records, if they are not the plain
/// ones of its kind (never for a link).
pub(crate) fn unusual(e: &CacheEntry) -> Option<u32> {
    let kind = FileKind::from_git_mode(e.git_mode)?;
    let perms = perms_of(e.mode);
    (kind != FileKind::Link && perms != kind.plain_perms()).then_some(perms)
}

pub(crate) fn encode(modes: &Modes) -> Vec<u8> {
    let mut out = HEADER.to_vec();
    for (path, perms) in modes {
        out.extend_from_slice(format!("{perms:o} ").as_bytes());
        out.extend_from_slice(path.as_bytes());
        out.push(0);
    }
    out
}

/// Reads a modes blob; `what` names it in errors.
pub(crate) fn decode(data: &[u8], what: &str) -> Result<Modes, SnapshotError> {
    let bad = |why: &str| SnapshotError::Repository(format!("{what}: {why}"));
    let body = data
        .strip_prefix(HEADER)
        .ok_or_else(|| bad("not a modes entry (tacho.modes 1)"))?;
    let mut out = Modes::new();
    let mut rest = body;
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
        let perms = u32::from_str_radix(perms, 8)
            .ok()
            .filter(|p| *p <= 0o777)
            .ok_or_else(|| bad(&format!("bits {perms:?} of {path:?}")))?;
        if path.is_empty() || out.insert(path.to_owned(), perms).is_some() {
            return Err(bad(&format!("path {path:?} empty or listed twice")));
        }
    }
    Ok(out)
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
        ModesUpdate::Whole(entries) => entries
            .iter()
            .filter_map(|e| unusual(e).map(|p| (e.path.clone(), p)))
            .collect(),
        ModesUpdate::Edit => {
            for p in removals {
                base.remove(*p);
            }
            for (p, e) in upserts {
                match unusual(e) {
                    Some(bits) => base.insert((*p).to_owned(), bits),
                    None => base.remove(*p),
                };
            }
            base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_and_damage_is_refused() {
        let mut m = Modes::new();
        m.insert("a/secret key".into(), 0o600);
        m.insert("line\nbreak".into(), 0o400);
        m.insert("x".into(), 0o700);
        let bytes = encode(&m);
        assert_eq!(decode(&bytes, "t").unwrap(), m);
        assert!(decode(b"tacho.modes 1\n600 a", "t").is_err());
        assert!(decode(b"tacho.modes 1\n1000 a\0", "t").is_err());
        assert!(decode(b"tacho.modes 1\n600 a\0600 a\0", "t").is_err());
        assert!(decode(b"other\n", "t").is_err());
        assert_eq!(decode(HEADER, "t").unwrap(), Modes::new());
    }
}
