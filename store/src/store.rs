//! The store root, its streams, and the engine's error type.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tacho_log_format::parse_segment_file_name;

use crate::vfs::{RealFs, Vfs};

/// Tunables of a store. The defaults are what the `tacho` binary uses.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// A segment is sealed and a new one started once it reaches this size (16 MiB).
    /// A session's recorder scans its last segment when it opens, so this bounds the
    /// start-up cost of a hook process.
    pub segment_bytes_max: u64,
    /// How long a writer waits for another process that writes the same session.
    pub lock_timeout: Duration,
    /// Threads that verification may use for chain steps and payloads; 0 means one per
    /// core. Small segments are always checked on the calling thread.
    pub verify_threads: usize,
    /// A reader folds the session index's appended records into its snapshot once
    /// they exceed this many bytes (256 KiB).
    pub index_compact_bytes: u64,
    /// The most sessions one pack holds (8,192): an ingest publishes its pack before
    /// the next session would pass it.
    pub pack_sessions_max: usize,
    /// The rules the application computes the session index's facts by (opaque to the
    /// store): a new store's index begins with them recorded, so that its facts are
    /// known to be of these rules (SPEC §8.4). Empty: nothing is recorded.
    pub facts_rules: &'static str,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            segment_bytes_max: 16 * 1024 * 1024,
            lock_timeout: Duration::from_secs(10),
            verify_threads: 0,
            index_compact_bytes: crate::index::LOG_BYTES_COMPACT,
            pack_sessions_max: crate::pack::PACK_SESSIONS_MAX,
            facts_rules: "",
        }
    }
}

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "session {session} is being written by another process ({holder}); gave up after {waited_ms} ms"
    )]
    Busy {
        session: String,
        holder: String,
        waited_ms: u128,
    },
    #[error("corruption in {} at offset {offset}: {detail}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        detail: String,
    },
    /// The stream ends before events its writers committed durably (its checkpoint
    /// says so): events were removed from its end. Nothing is appended to it.
    #[error(
        "session {session}: committed events are missing from the end of its stream: {detail}; nothing is appended to it (run `tacho log verify`)"
    )]
    Lost { session: String, detail: String },
    #[error("no session {0} in the store")]
    NotFound(String),
    #[error("no session matches {given:?}{}", nearest.as_ref().map(|n| format!("; did you mean {n}?")).unwrap_or_default())]
    UnknownSession {
        given: String,
        nearest: Option<String>,
    },
    #[error("{given:?} matches {} sessions: {}{}", candidates.len(), candidates.iter().take(10).cloned().collect::<Vec<_>>().join(", "), if candidates.len() > 10 { ", ..." } else { "" })]
    AmbiguousSession {
        given: String,
        candidates: Vec<String>,
    },
    #[error("invalid session id: {0}")]
    BadSessionId(String),
    #[error("session {session}: {reason}")]
    Rejected { session: String, reason: String },
    #[error("the writer of session {0} failed earlier; reopen it to recover")]
    Poisoned(String),
    #[error("{error}; and the batches already written for {} could not be taken back ({detail}): run `tacho log verify`", sessions.join(", "))]
    GroupNotTakenBack {
        error: Box<StoreError>,
        sessions: Vec<String>,
        detail: String,
    },
}

impl StoreError {
    pub(crate) fn io(path: &Path, source: io::Error) -> Self {
        StoreError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// How many times a reader reads a stream's open segment again while what it finds
/// damaged keeps changing (a write in progress each time), before it reports it.
pub(crate) const REREADS_MAX: usize = 8;

/// Where a scan of a re-read segment resumes: offset, chain, next sequence number,
/// events so far.
pub(crate) type Resume = (usize, tacho_log_format::ChainValue, u64, u64);

/// A store rooted at a directory.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) root: PathBuf,
    pub(crate) vfs: Arc<dyn Vfs>,
    pub(crate) opts: StoreOptions,
    /// The packs read so far (shared by clones).
    pub(crate) packs: Arc<std::sync::Mutex<crate::pack::PackCache>>,
}

/// What one listing of a store found (see [`Store::listing`]).
#[derive(Debug, Clone)]
pub struct Listing {
    sessions: Vec<String>,
    /// Names in `streams/`.
    dirs: std::collections::HashSet<String>,
    /// Names in `locks/`.
    locks: std::collections::HashSet<String>,
    /// The published packs; `None` when one does not open.
    packs: Option<Vec<Arc<crate::pack::Pack>>>,
}

impl Listing {
    /// Every session listed, sorted by id.
    pub fn sessions(&self) -> &[String] {
        &self.sessions
    }

    /// Whether `session` had a lock file when listed: one created since belongs to a
    /// writer that started after the listing, whose checkpoint says nothing of the
    /// stream as it was then.
    pub(crate) fn has_lock(&self, session: &str) -> bool {
        self.locks
            .contains(&format!("{}.lock", stream_dir_name(session)))
    }

    /// Whether `session` had a stream directory when listed.
    pub(crate) fn has_dir(&self, session: &str) -> bool {
        self.dirs.contains(&stream_dir_name(session))
    }
}

/// Where a segment's bytes are: a file of its own in the stream's directory, or a
/// range of a pack.
#[derive(Debug, Clone)]
pub(crate) struct SegLoc {
    pub first_seq: u64,
    pub path: PathBuf,
    /// A packed segment: its pack, held open (a merge that removes the file meanwhile
    /// does not take the segment from a reader that found it), offset and length.
    pub packed: Option<(std::sync::Arc<crate::pack::Pack>, u64, u64)>,
}

impl SegLoc {
    /// A packed segment's offset and length in its pack.
    pub fn range(&self) -> Option<(u64, u64)> {
        self.packed.as_ref().map(|(_, at, len)| (*at, *len))
    }

    /// Where offset 0 of the segment lies in its file (for findings).
    pub fn base(&self) -> u64 {
        self.range().map_or(0, |(at, _)| at)
    }
}

/// The longest stream directory name spelt letter for letter: the stream's lock file
/// (`<name>.lock`) must still fit a file name (255 bytes).
const PLAIN_NAME_MAX: usize = 250;

/// The directory name of a stream. Session ids are limited to ASCII letters, digits,
/// `.`, `_` and `-`; upper-case letters are written as `^` plus the lower-case letter,
/// so that two ids differing only in case never share a directory on a
/// case-insensitive filesystem. A name that would be longer than `PLAIN_NAME_MAX`
/// (an id of more than 122 upper-case letters) is `~` and the id's bytes in lower-case
/// base32 instead (at most 206 bytes): no letter-for-letter name starts with `~`.
pub fn stream_dir_name(session: &str) -> String {
    // (Most ids have no upper-case letter: their name is the id, copied whole.)
    if session.len() <= PLAIN_NAME_MAX && !session.bytes().any(|b| b.is_ascii_uppercase()) {
        return session.to_owned();
    }
    let mut out = String::with_capacity(session.len() + 4);
    for c in session.chars() {
        if c.is_ascii_uppercase() {
            out.push('^');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    if out.len() > PLAIN_NAME_MAX {
        return format!(
            "~{}",
            data_encoding::BASE32_DNSSEC.encode(session.as_bytes())
        );
    }
    out
}

/// The session id stored in a stream directory name, or `None` for names that no
/// session id produces.
pub fn stream_name_from_dir(dir: &str) -> Option<String> {
    if let Some(coded) = dir.strip_prefix('~') {
        let bytes = data_encoding::BASE32_DNSSEC.decode(coded.as_bytes()).ok()?;
        let id = String::from_utf8(bytes).ok()?;
        tacho_schema::validate_session_id(&id).ok()?;
        // Only the name this id gets (one spelling per id).
        return (stream_dir_name(&id) == dir).then_some(id);
    }
    let mut out = String::with_capacity(dir.len());
    let mut chars = dir.chars();
    while let Some(c) = chars.next() {
        if c == '^' {
            let l = chars.next()?;
            if !l.is_ascii_lowercase() {
                return None;
            }
            out.push(l.to_ascii_uppercase());
        } else if c.is_ascii_uppercase() {
            return None;
        } else {
            out.push(c);
        }
    }
    tacho_schema::validate_session_id(&out).ok()?;
    (dir.len() <= PLAIN_NAME_MAX).then_some(out)
}

impl Store {
    /// Opens (creating if needed) the store at `root` on the real filesystem.
    pub fn open(root: impl Into<PathBuf>, opts: StoreOptions) -> Result<Store, StoreError> {
        Store::open_with(Arc::new(RealFs), root, opts)
    }

    /// Opens a store through any [`Vfs`] (tests use [`crate::vfs::SimFs`]).
    pub fn open_with(
        vfs: Arc<dyn Vfs>,
        root: impl Into<PathBuf>,
        opts: StoreOptions,
    ) -> Result<Store, StoreError> {
        // Nothing is created until something is written: a read under a mistyped
        // data directory leaves no trace there.
        let root = root.into();
        Ok(Store {
            root,
            vfs,
            opts,
            packs: Arc::default(),
        })
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.opts
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn streams_dir(&self) -> PathBuf {
        self.root.join("streams")
    }

    /// Lock files live apart from the streams, so that taking a lock creates nothing in
    /// `streams/` and a writer that appends nothing leaves no trace.
    /// Whether anything was ever written here (the streams or the packs directory
    /// exists).
    pub fn exists(&self) -> bool {
        self.vfs.exists(&self.streams_dir()) || self.vfs.exists(&self.packs_dir())
    }

    pub(crate) fn lock_path(&self, session: &str) -> PathBuf {
        self.root
            .join("locks")
            .join(format!("{}.lock", stream_dir_name(session)))
    }

    pub(crate) fn stream_dir(&self, session: &str) -> PathBuf {
        self.streams_dir().join(stream_dir_name(session))
    }

    /// Every session in the store, sorted by id.
    pub fn sessions(&self) -> Result<Vec<String>, StoreError> {
        self.sessions_in(&self.stream_dirs()?)
    }

    /// The sessions of the stream directories `dirs` and of the packs, sorted by id.
    fn sessions_in(
        &self,
        dirs: &std::collections::HashSet<String>,
    ) -> Result<Vec<String>, StoreError> {
        let mut names: Vec<String> = dirs
            .iter()
            .filter_map(|d| stream_name_from_dir(d))
            .collect();
        names.extend(self.packed_sessions()?);
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// One listing of the store for a pass over every stream (`log verify`, `log
    /// stats`): its sessions as [`Store::sessions`] lists them, which of them have a
    /// stream directory and a lock file, and the packs, so that each session costs no
    /// failed lookups and no listing of `packs/` of its own.
    pub fn listing(&self) -> Result<Listing, StoreError> {
        let dirs = self.stream_dirs()?;
        let sessions = self.sessions_in(&dirs)?;
        let locks_dir = self.root.join("locks");
        let locks = match self.vfs.list_dir(&locks_dir) {
            Ok(l) => l.into_iter().collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Default::default(),
            Err(e) => return Err(StoreError::io(&locks_dir, e)),
        };
        Ok(Listing {
            sessions,
            dirs,
            locks,
            // A pack that does not open is an error for every read that needs packs:
            // those reads then look for the packs again, and meet it.
            packs: self.packs().ok(),
        })
    }

    /// The names in `streams/` (stream directory names).
    pub(crate) fn stream_dirs(&self) -> Result<std::collections::HashSet<String>, StoreError> {
        let dir = self.streams_dir();
        match self.vfs.list_dir(&dir) {
            Ok(l) => Ok(l.into_iter().collect()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Default::default()),
            Err(e) => Err(StoreError::io(&dir, e)),
        }
    }

    /// The session a user means by `given`: its exact id, or the one session whose id
    /// starts with it. An ambiguous prefix lists the candidates; an unknown one
    /// suggests the nearest id (by edit distance).
    pub fn resolve_session(&self, given: &str) -> Result<String, StoreError> {
        if self.has_session(given) {
            return Ok(given.to_string());
        }
        let view = self.index()?;
        let candidates = if view.complete() {
            view.sessions_with_prefix(given)
        } else {
            self.sessions()?
                .into_iter()
                .filter(|s| s.starts_with(given))
                .collect()
        };
        // The index may name a session whose writer never wrote its first event.
        let matches: Vec<String> = candidates
            .into_iter()
            .filter(|s| self.has_session(s))
            .collect();
        match matches.len() {
            1 => Ok(matches.into_iter().next().unwrap_or_default()),
            0 => {
                // A session may be missing only because a pack that holds it is damaged:
                // that is the answer then.
                self.packs()?;
                let all = if view.complete() {
                    view.sessions()
                } else {
                    self.sessions()?
                };
                Err(StoreError::UnknownSession {
                    given: given.to_string(),
                    nearest: all
                        .iter()
                        .map(|s| (strsim::levenshtein(given, s), s))
                        .filter(|(d, _)| *d <= (given.len() / 3).max(2))
                        .min()
                        .map(|(_, s)| s.clone()),
                })
            }
            _ => Err(StoreError::AmbiguousSession {
                given: given.to_string(),
                candidates: matches,
            }),
        }
    }

    /// Whether the store holds a session with this exact id.
    pub fn has_session(&self, session: &str) -> bool {
        tacho_schema::validate_session_id(session).is_ok()
            && (self.vfs.exists(&self.stream_dir(session))
                || self.packed_segments(session).is_ok_and(|p| !p.is_empty()))
    }

    /// The segments of a session, in sequence order: its packed ones, then the files
    /// of its stream directory. Packs are looked into only when the directory does not
    /// begin the stream (a stream created by a writer never needs them).
    pub(crate) fn segment_files(&self, session: &str) -> Result<Vec<SegLoc>, StoreError> {
        self.segment_files_in(session, None)
    }

    /// [`Store::segment_files`], with what a listing of the store found: a stream
    /// directory it did not see is not looked for (`listed` is `(listing, false)`; with
    /// `true` — the session's checkpoint was read after the listing — it is), and its
    /// packs are searched.
    pub(crate) fn segment_files_in(
        &self,
        session: &str,
        listed: Option<(&Listing, bool)>,
    ) -> Result<Vec<SegLoc>, StoreError> {
        tacho_schema::validate_session_id(session).map_err(StoreError::BadSessionId)?;
        let dir = self.stream_dir(session);
        // A directory created after the listing holds only what a writer appended
        // since: the stream as listed is its packed prefix. (Unless a checkpoint read
        // since may count those appends: then the directory is looked for.)
        let unlisted = listed.is_some_and(|(l, after)| !after && !l.has_dir(session));
        let (names, dir_found) = match unlisted {
            true => (Vec::new(), false),
            false => match self.vfs.list_dir(&dir) {
                Ok(n) => (n, true),
                Err(e) if e.kind() == io::ErrorKind::NotFound => (Vec::new(), false),
                Err(e) => return Err(StoreError::io(&dir, e)),
            },
        };
        let mut segs: Vec<SegLoc> = names
            .iter()
            .filter_map(|n| {
                parse_segment_file_name(n).map(|first_seq| SegLoc {
                    first_seq,
                    path: dir.join(n),
                    packed: None,
                })
            })
            .collect();
        segs.sort_by_key(|s| s.first_seq);
        if segs.first().is_none_or(|s| s.first_seq != 0) {
            let packed = match listed.and_then(|(l, _)| l.packs.as_deref()) {
                Some(packs) => crate::pack::packed_in(packs, session)?,
                None => self.packed_segments(session)?,
            };
            if packed.is_empty() && !dir_found {
                return Err(StoreError::NotFound(session.to_string()));
            }
            segs.splice(
                0..0,
                packed.into_iter().map(|(pack, e)| SegLoc {
                    first_seq: e.first_seq,
                    path: pack.path.clone(),
                    packed: Some((pack, e.offset, e.len)),
                }),
            );
        }
        Ok(segs)
    }

    /// When the scan of a stream's open segment `seg` (`open`) ended in corruption that
    /// a write in progress may explain, and fewer than [`REREADS_MAX`] re-reads were
    /// made: the segment read again, if it changed, and where its scan resumes
    /// (offset, chain, next sequence number, events so far).
    pub(crate) fn reread_torn(
        &self,
        seg: &SegLoc,
        bytes: &[u8],
        scan: &tacho_log_format::Scanner<'_>,
        open: bool,
        rereads: usize,
    ) -> Result<Option<(crate::vfs::SegmentBytes, Resume)>, StoreError> {
        let Some(tacho_log_format::SegmentEnd::Damaged(d)) = scan.end() else {
            return Ok(None);
        };
        if !open || d.class != tacho_log_format::DamageClass::Corruption || rereads >= REREADS_MAX {
            return Ok(None);
        }
        let at = (
            scan.valid_len(),
            scan.chain(),
            scan.next_seq(),
            scan.event_count(),
        );
        // A reader takes no lock: a write in progress into the free space can be copied
        // with its first bytes still zero and later ones (a commit frame) already there,
        // which reads as corruption. A copy that differs after `valid_len` is scanned
        // again from there (committed bytes before never change); the same copy means
        // the damage is real.
        let again = self.read_segment(seg, false)?;
        let same = again.get(d.valid_len..bytes.len()) == bytes.get(d.valid_len..);
        Ok((!same).then_some((again, at)))
    }

    /// A segment's bytes: a sealed file (`immutable`) mapped, the last one copied, a
    /// packed one copied out of its pack's mapping.
    pub(crate) fn read_segment(
        &self,
        seg: &SegLoc,
        immutable: bool,
    ) -> Result<crate::vfs::SegmentBytes, StoreError> {
        match &seg.packed {
            Some((pack, at, len)) => pack.segment(*at, *len).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("segment at {at} ({len} bytes) is past the end of the pack"),
                )
            }),
            None => self.vfs.read(&seg.path, immutable),
        }
        .map_err(|e| StoreError::io(&seg.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_dir_names_round_trip_and_separate_case() {
        let long = [
            "A".repeat(128),
            "Ab".repeat(64),
            format!("{}b", "A".repeat(125)),
        ];
        for id in ["ses_01jf", "Ses_A", "3F2A-b.c", "x"]
            .into_iter()
            .chain(long.iter().map(String::as_str))
        {
            let name = stream_dir_name(id);
            assert!(name.len() <= PLAIN_NAME_MAX, "{name}");
            assert!(!name.bytes().any(|b| b.is_ascii_uppercase()), "{name}");
            assert_eq!(stream_name_from_dir(&name).as_deref(), Some(id));
        }
        // The longest letter-for-letter name stays as it was.
        let id = format!("{}{}", "A".repeat(122), "b".repeat(6));
        assert_eq!(stream_dir_name(&id).len(), 250);
        assert!(!stream_dir_name(&id).starts_with('~'));
        assert_eq!(
            stream_name_from_dir(&format!("~{}", data_encoding::BASE32_DNSSEC.encode(b"a/b"))),
            None
        );
        assert_ne!(
            stream_dir_name("AB").to_lowercase(),
            stream_dir_name("ab").to_lowercase()
        );
        assert_eq!(stream_name_from_dir("LOCK"), None);
        assert_eq!(stream_name_from_dir("^"), None);
        assert_eq!(stream_name_from_dir(".hidden"), None);
    }
}
