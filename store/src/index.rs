//! The session index: one entry per session (its head, and facts a listing shows),
//! so that listing, prefix resolution and child lookup read one file instead of
//! every stream. Derived data: deleting `<root>/index/` loses nothing, and a rebuild
//! from the streams gives the same snapshot bytes (SPEC.md §"Session index").
//!
//! Files under `<root>/index/`:
//! - `sessions.snap`: the compacted entries, rkyv, newest session first, with a
//!   CRC; replaced atomically, never changed in place (so it may be mapped).
//! - `sessions.log`: records appended since (`O_APPEND`, one write each, framed with
//!   a magic and a CRC so a reader skips a torn record and finds the next).
//! - `facts.rules`: the rules the application computed the facts by (opaque here;
//!   a new store's index begins with `StoreOptions::facts_rules`).
//!
//! Writers append a `Dirty` record, synced, before the first frame they write to a
//! stream, and a `Head` record when they are done and what they wrote is durable. So
//! after any crash an entry is either exact or marked dirty, and a reader heals a dirty
//! entry from the stream (under the stream's lock, so no writer is mid-way). Heads only
//! move forward and facts are checked against the head on use, so compaction and
//! rebuilds never race with appenders into a wrong state: at worst an entry is dirty,
//! or its facts stale, when they need not be.

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use rkyv::rancor;
use rkyv::util::AlignedVec;
use tacho_log_format::ChainValue;
use tacho_schema::EndReason;

use crate::store::{Store, StoreError};
use crate::vfs::SegmentBytes;

/// The snapshot file's magic and format version.
pub const SNAPSHOT_MAGIC: &[u8; 8] = b"TACHOSIX";
pub const SNAPSHOT_VERSION: u32 = 1;
/// Magic, version, entry count, body length, body CRC: 8 + 4 + 4 + 8 + 4, padded to 32
/// so that the rkyv body is aligned.
const SNAPSHOT_HEADER_LEN: usize = 32;
/// Every appended record starts with this.
const RECORD_MAGIC: &[u8; 4] = b"\nTIR";
/// Magic, payload length, payload CRC.
const RECORD_HEADER_LEN: usize = 12;
/// Records longer than this are not records (a torn length field).
const RECORD_LEN_MAX: usize = 1 << 20;
/// A reader compacts the appended records into the snapshot past this size; a writer
/// past [`LOG_BYTES_WRITER_COMPACTS`] (when nobody lists for a long time).
pub const LOG_BYTES_COMPACT: u64 = 256 * 1024;
pub const LOG_BYTES_WRITER_COMPACTS: u64 = 4 * 1024 * 1024;
/// How long an index operation waits for a compaction by another process.
const INDEX_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// What a listing shows of a session, computed by the application layer from the
/// session's events (the store stores it, it does not compute it).
#[derive(
    Debug, Clone, PartialEq, Eq, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub struct SessionFacts {
    pub started_unix_ns: Option<i64>,
    pub last_event_unix_ns: Option<i64>,
    /// `None` while running.
    pub end_reason: Option<EndReason>,
    pub agent: Option<String>,
    pub title: Option<String>,
    pub workspace: Option<String>,
    pub project: Option<String>,
    pub parent: Option<String>,
    /// What produced the events (`session.start`'s `source`).
    pub source: Option<String>,
    pub events: u64,
    pub steps: u64,
    pub tool_calls: u64,
    pub tool_failures: u64,
    pub files_edited: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub risk_score: u32,
    /// The risk level's rank (0 low … 3 critical).
    pub risk_level: u8,
    /// The stream does not verify: where and why (nothing else is known).
    pub damaged: Option<String>,
}

/// Facts and the head of the stream they were computed at.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct FactsAt {
    pub next_seq: u64,
    pub head: ChainValue,
    pub facts: SessionFacts,
}

/// One session in the index.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct IndexEntry {
    pub session: String,
    /// The stream's head when last recorded: its next sequence number and the chain
    /// value after its last committed batch.
    pub next_seq: u64,
    pub head: ChainValue,
    /// A writer opened the stream since the head was recorded: the head may be
    /// behind the stream.
    pub dirty: bool,
    pub facts: Option<FactsAt>,
}

impl IndexEntry {
    fn new(session: &str) -> Self {
        IndexEntry {
            session: session.to_string(),
            next_seq: 0,
            head: [0; 32],
            dirty: false,
            facts: None,
        }
    }

    /// The facts, when they describe the stream exactly as the entry's head does and
    /// the head can be trusted.
    pub fn fresh_facts(&self) -> Option<&SessionFacts> {
        let f = self.facts.as_ref()?;
        (!self.dirty && f.next_seq == self.next_seq && f.head == self.head).then_some(&f.facts)
    }

    fn started(&self) -> Option<i64> {
        self.facts.as_ref().and_then(|f| f.facts.started_unix_ns)
    }

    fn apply(&mut self, r: Record) {
        match r {
            Record::Dirty { .. } => self.dirty = true,
            Record::Head { next_seq, head, .. } => {
                if next_seq >= self.next_seq {
                    self.next_seq = next_seq;
                    self.head = head;
                    self.dirty = false;
                }
            }
            // The last facts recorded win: whether they describe the head is checked
            // on use (`fresh_facts`), so stale ones only cost a recomputation.
            Record::Facts { at, .. } => self.facts = Some(at),
            Record::Removed { .. } => {}
        }
    }
}

/// An appended record. (Records are built one at a time and written at once: the size
/// of the facts variant costs nothing.)
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
#[rkyv(attr(allow(clippy::large_enum_variant)))]
pub enum Record {
    /// A writer is about to append to the stream (written and synced before it does).
    Dirty { session: String },
    /// The stream's head, read under the stream's lock (a writer done, or a heal).
    Head {
        session: String,
        next_seq: u64,
        head: ChainValue,
    },
    /// Facts computed from the stream up to a head.
    Facts { session: String, at: FactsAt },
    /// The session was deleted (retention): its entry goes.
    Removed { session: String },
}

impl Record {
    fn session(&self) -> &str {
        match self {
            Record::Dirty { session }
            | Record::Head { session, .. }
            | Record::Facts { session, .. }
            | Record::Removed { session } => session,
        }
    }
}

/// Where the index stood (see [`Store::index_mark`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexMark {
    /// The snapshot file's length and CRC, if there is one.
    snapshot: Option<(u64, u32)>,
    log_len: u64,
}

/// The sorted entries of a snapshot body (archived).
/// (Written from entry references, `E` = [`EntryRef`]; read as `E` = [`IndexEntry`]:
/// both archive as [`ArchivedIndexEntry`].)
#[derive(Debug, Default, rkyv::Archive, rkyv::Serialize)]
struct Snapshot<E> {
    /// Newest first: by start time descending (sessions with no known start last),
    /// then by id.
    entries: Vec<E>,
    /// Positions in `entries` sorted by session id, for lookups.
    by_session: Vec<u32>,
}

/// The order of a listing: newest first, unknown starts last, then by id.
fn newest_first(a: (Option<i64>, &str), b: (Option<i64>, &str)) -> std::cmp::Ordering {
    match (a.0, b.0) {
        (Some(x), Some(y)) => y.cmp(&x).then_with(|| a.1.cmp(b.1)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.1.cmp(b.1),
    }
}

fn archived_started(e: &ArchivedIndexEntry) -> Option<i64> {
    e.facts
        .as_ref()
        .and_then(|f| f.facts.started_unix_ns.as_ref().map(|t| t.to_native()))
}

/// One entry of a [`IndexView`], as stored (archived) or as folded from records.
#[derive(Clone, Copy)]
pub enum EntryRef<'a> {
    Archived(&'a ArchivedIndexEntry),
    Owned(&'a IndexEntry),
}

impl EntryRef<'_> {
    pub fn session(&self) -> &str {
        match self {
            EntryRef::Archived(e) => e.session.as_str(),
            EntryRef::Owned(e) => &e.session,
        }
    }
    pub fn started(&self) -> Option<i64> {
        match self {
            EntryRef::Archived(e) => archived_started(e),
            EntryRef::Owned(e) => e.started(),
        }
    }
    /// Whether the entry's facts describe its stream's recorded head, and that head
    /// can be trusted (see [`IndexEntry::fresh_facts`]).
    pub fn is_fresh(&self) -> bool {
        match self {
            EntryRef::Archived(e) => {
                !e.dirty
                    && e.facts.as_ref().is_some_and(|f| {
                        f.next_seq.to_native() == e.next_seq.to_native() && f.head == e.head
                    })
            }
            EntryRef::Owned(e) => e.fresh_facts().is_some(),
        }
    }
    /// The facts recorded, fresh or not.
    pub fn facts(&self) -> Option<SessionFacts> {
        match self {
            EntryRef::Archived(e) => e.facts.as_ref().map(|f| deserialize_entry_facts(&f.facts)),
            EntryRef::Owned(e) => e.facts.as_ref().map(|f| f.facts.clone()),
        }
    }
    /// The project (as recorded, else the last component of the workspace).
    pub fn project(&self) -> Option<&str> {
        let (project, workspace) = match self {
            EntryRef::Archived(e) => {
                let f = &e.facts.as_ref()?.facts;
                (
                    f.project.as_ref().map(|p| p.as_str()),
                    f.workspace.as_ref().map(|w| w.as_str()),
                )
            }
            EntryRef::Owned(e) => {
                let f = &e.facts.as_ref()?.facts;
                (f.project.as_deref(), f.workspace.as_deref())
            }
        };
        project.or_else(|| workspace.and_then(|w| w.trim_end_matches('/').rsplit('/').next()))
    }
    /// Whether the facts say the stream does not read.
    pub fn is_damaged(&self) -> bool {
        match self {
            EntryRef::Archived(e) => e.facts.as_ref().is_some_and(|f| f.facts.damaged.is_some()),
            EntryRef::Owned(e) => e.facts.as_ref().is_some_and(|f| f.facts.damaged.is_some()),
        }
    }
    /// The risk level rank of the facts, when any facts are recorded.
    pub fn risk_level(&self) -> Option<u8> {
        match self {
            EntryRef::Archived(e) => e.facts.as_ref().map(|f| f.facts.risk_level),
            EntryRef::Owned(e) => e.facts.as_ref().map(|f| f.facts.risk_level),
        }
    }
    pub fn to_owned(&self) -> IndexEntry {
        match self {
            EntryRef::Archived(e) => deserialize_entry(e),
            EntryRef::Owned(e) => (*e).clone(),
        }
    }
}

/// An entry written into a new snapshot as [`IndexEntry`] is: a stored one is taken out
/// of the old snapshot only while it is written (twice, once per rkyv pass), so a
/// compaction never holds every entry owned.
impl rkyv::Archive for EntryRef<'_> {
    type Archived = ArchivedIndexEntry;
    type Resolver = IndexEntryResolver;

    fn resolve(&self, resolver: Self::Resolver, out: rkyv::Place<ArchivedIndexEntry>) {
        match self {
            EntryRef::Archived(e) => deserialize_entry(e).resolve(resolver, out),
            EntryRef::Owned(e) => e.resolve(resolver, out),
        }
    }
}

impl<S: rancor::Fallible + ?Sized> rkyv::Serialize<S> for EntryRef<'_>
where
    IndexEntry: rkyv::Serialize<S>,
{
    fn serialize(&self, serializer: &mut S) -> Result<Self::Resolver, S::Error> {
        match self {
            EntryRef::Archived(e) => deserialize_entry(e).serialize(serializer),
            EntryRef::Owned(e) => e.serialize(serializer),
        }
    }
}

fn deserialize_entry_facts(f: &ArchivedSessionFacts) -> SessionFacts {
    rkyv::deserialize::<SessionFacts, rancor::Error>(f).unwrap_or_default()
}

fn deserialize_entry(e: &ArchivedIndexEntry) -> IndexEntry {
    // Deserializing plain data (strings, integers, options) cannot fail.
    rkyv::deserialize::<IndexEntry, rancor::Error>(e).unwrap_or_else(|_| IndexEntry::new(""))
}

/// The index as read: the snapshot (checked, then used in place) and the records
/// appended since, folded.
#[derive(Debug)]
pub struct IndexView {
    snapshot: Option<SegmentBytes>,
    /// Entries changed (or added) by appended records.
    overlay: HashMap<String, IndexEntry>,
    /// Sessions removed by appended records.
    removed: std::collections::HashSet<String>,
    /// Overlay entries, newest first.
    overlay_order: Vec<String>,
    /// Length of the appended records' file when read.
    log_len: u64,
    /// Damage found (skipped records, a snapshot that did not check): the index is
    /// still usable, but `log verify` reports it.
    pub damage: Vec<String>,
    /// Whether the index exists at all (a snapshot or records).
    pub exists: bool,
}

impl IndexView {
    fn archived(&self) -> Option<&ArchivedSnapshot<IndexEntry>> {
        let bytes = self.snapshot.as_deref()?;
        let body = bytes.get(SNAPSHOT_HEADER_LEN..)?;
        // SAFETY: `snapshot` is only set after `check_snapshot` validated these very
        // bytes (rkyv's bytecheck, plus a CRC), and they never change afterwards: an
        // owned copy, or a map of a file that is only ever replaced by a rename, never
        // written in place. Checking again on every access would cost milliseconds on
        // a store of 100,000 sessions.
        #[allow(unsafe_code)]
        let snap = unsafe { rkyv::access_unchecked::<ArchivedSnapshot<IndexEntry>>(body) };
        Some(snap)
    }

    /// Whether the index holds every session of the store: a snapshot (written by a
    /// rebuild or a compaction) is there and reads. Records alone are not enough: a
    /// writer appends them to a store whose index was never built.
    pub fn complete(&self) -> bool {
        self.snapshot.is_some()
    }

    /// Bytes of appended records not folded into the snapshot yet.
    pub fn log_len(&self) -> u64 {
        self.log_len
    }

    /// The entry of a session, if the index has one.
    pub fn get(&self, session: &str) -> Option<IndexEntry> {
        if let Some(e) = self.overlay.get(session) {
            return Some(e.clone());
        }
        if self.removed.contains(session) {
            return None;
        }
        let snap = self.archived()?;
        let pos = snap
            .by_session
            .binary_search_by(|i| {
                snap.entries
                    .get(i.to_native() as usize)
                    .map_or(std::cmp::Ordering::Greater, |e| {
                        e.session.as_str().cmp(session)
                    })
            })
            .ok()?;
        let i = snap.by_session.get(pos)?.to_native() as usize;
        snap.entries.get(i).map(deserialize_entry)
    }

    /// Every entry, newest first (by start time; sessions with no known start last).
    /// `f` returns `false` to stop.
    pub fn for_each_newest_first<'s>(&'s self, mut f: impl FnMut(EntryRef<'s>) -> bool) {
        let snap = self.archived();
        let mut stored = snap.into_iter().flat_map(|s| s.entries.iter()).filter(|e| {
            !self.overlay.contains_key(e.session.as_str())
                && !self.removed.contains(e.session.as_str())
        });
        let mut changed = self
            .overlay_order
            .iter()
            .filter_map(|s| self.overlay.get(s));
        let mut a = stored.next();
        let mut b = changed.next();
        loop {
            let next = match (a, b) {
                (Some(x), Some(y)) => {
                    if newest_first(
                        (archived_started(x), x.session.as_str()),
                        (y.started(), &y.session),
                    )
                    .is_le()
                    {
                        a = stored.next();
                        EntryRef::Archived(x)
                    } else {
                        b = changed.next();
                        EntryRef::Owned(y)
                    }
                }
                (Some(x), None) => {
                    a = stored.next();
                    EntryRef::Archived(x)
                }
                (None, Some(y)) => {
                    b = changed.next();
                    EntryRef::Owned(y)
                }
                (None, None) => return,
            };
            if !f(next) {
                return;
            }
        }
    }

    /// The session ids that start with `prefix`, sorted: a binary search of the
    /// snapshot's id order, plus the sessions changed since.
    pub fn sessions_with_prefix(&self, prefix: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        if let Some(snap) = self.archived() {
            let name = |i: &rkyv::rend::u32_le| {
                snap.entries
                    .get(i.to_native() as usize)
                    .map(|e| e.session.as_str())
            };
            let start = snap
                .by_session
                .partition_point(|i| name(i).is_some_and(|n| n < prefix));
            for i in snap.by_session.get(start..).unwrap_or_default() {
                let Some(n) = name(i) else { continue };
                if !n.starts_with(prefix) {
                    break;
                }
                if !self.overlay.contains_key(n) && !self.removed.contains(n) {
                    out.push(n.to_string());
                }
            }
        }
        out.extend(
            self.overlay
                .keys()
                .filter(|k| k.starts_with(prefix))
                .cloned(),
        );
        out.sort();
        out
    }

    /// Every session id in the index, sorted.
    pub fn sessions(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        if let Some(snap) = self.archived() {
            out.reserve(snap.entries.len());
            for i in snap.by_session.iter() {
                if let Some(e) = snap.entries.get(i.to_native() as usize)
                    && !self.overlay.contains_key(e.session.as_str())
                    && !self.removed.contains(e.session.as_str())
                {
                    out.push(e.session.to_string());
                }
            }
        }
        out.extend(self.overlay.keys().cloned());
        out.sort();
        out
    }

    /// Every entry's session and recorded event count, in no particular order: what a
    /// check of every entry against the store needs, without taking each entry (its
    /// facts) out of the snapshot.
    pub fn for_each_head(&self, mut f: impl FnMut(&str, u64)) {
        if let Some(snap) = self.archived() {
            for e in snap.entries.iter() {
                let s = e.session.as_str();
                if !self.overlay.contains_key(s) && !self.removed.contains(s) {
                    f(s, e.next_seq.to_native());
                }
            }
        }
        for e in self.overlay.values() {
            f(&e.session, e.next_seq);
        }
    }

    /// Every entry, owned, sorted by session id.
    pub fn entries(&self) -> Vec<IndexEntry> {
        let mut out = Vec::new();
        self.for_each_newest_first(|e| {
            out.push(e.to_owned());
            true
        });
        out.sort_by(|a, b| a.session.cmp(&b.session));
        out
    }

    /// Folds records into the view (what was just appended by this process).
    pub fn apply(&mut self, records: Vec<Record>) {
        for r in records {
            self.fold(r);
        }
        self.order_overlay();
    }

    fn fold(&mut self, r: Record) {
        let session = r.session().to_string();
        if let Record::Removed { .. } = r {
            self.overlay.remove(&session);
            self.removed.insert(session);
            return;
        }
        let entry = match self.overlay.get_mut(&session) {
            Some(e) => e,
            None => {
                let base = if self.removed.remove(&session) {
                    None
                } else {
                    self.get(&session)
                };
                self.overlay
                    .entry(session.clone())
                    .or_insert(base.unwrap_or_else(|| IndexEntry::new(&session)))
            }
        };
        entry.apply(r);
    }

    fn order_overlay(&mut self) {
        let mut order: Vec<(Option<i64>, String)> = self
            .overlay
            .values()
            .map(|e| (e.started(), e.session.clone()))
            .collect();
        order.sort_by(|a, b| newest_first((a.0, &a.1), (b.0, &b.1)));
        self.overlay_order = order.into_iter().map(|(_, s)| s).collect();
    }
}

/// The bytes of a snapshot holding `entries` (any order): what compaction and a
/// rebuild write. The same entries always give the same bytes.
pub fn snapshot_bytes(entries: Vec<IndexEntry>) -> Result<Vec<u8>, String> {
    let mut out = vec![0; SNAPSHOT_HEADER_LEN];
    let refs = entries.iter().map(EntryRef::Owned).collect();
    let header = write_snapshot(refs, &mut out).map_err(|e| e.to_string())?;
    out.splice(..SNAPSHOT_HEADER_LEN, header);
    Ok(out)
}

/// Writes the body of a snapshot holding `entries` (any order) to `out` as it is
/// serialized (a 100,000-session index is never held twice in memory) and returns
/// the header that goes before it.
fn write_snapshot(mut entries: Vec<EntryRef<'_>>, out: &mut dyn io::Write) -> io::Result<Vec<u8>> {
    entries.sort_by(|a, b| newest_first((a.started(), a.session()), (b.started(), b.session())));
    let mut by_session: Vec<u32> = (0..entries.len() as u32).collect();
    by_session.sort_by(|&a, &b| {
        let name = |i: u32| entries.get(i as usize).map(|e| e.session());
        name(a).cmp(&name(b))
    });
    let count = entries.len() as u32;
    let mut body = Crc {
        inner: io::BufWriter::with_capacity(1 << 20, out),
        crc: crc32fast::Hasher::new(),
    };
    let written = rkyv::api::high::to_bytes_in::<_, rancor::Error>(
        &Snapshot {
            entries,
            by_session,
        },
        rkyv::ser::writer::IoWriter::new(&mut body),
    )
    .map_err(io::Error::other)?;
    let body_len = rkyv::ser::Positional::pos(&written) as u64;
    io::Write::flush(&mut body)?;
    let mut header = Vec::with_capacity(SNAPSHOT_HEADER_LEN);
    header.extend_from_slice(SNAPSHOT_MAGIC);
    header.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    header.extend_from_slice(&count.to_le_bytes());
    header.extend_from_slice(&body_len.to_le_bytes());
    header.extend_from_slice(&body.crc.clone().finalize().to_le_bytes());
    header.resize(SNAPSHOT_HEADER_LEN, 0);
    Ok(header)
}

/// A writer that keeps the CRC-32 of what went through it.
struct Crc<W> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: io::Write> io::Write for Crc<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(buf.get(..n).unwrap_or(buf));
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Checks a snapshot file: header, length, the rkyv body, and with `crc` its checksum
/// (what `log verify` and compaction check; a listing relies on the layout check,
/// which keeps reads safe, and leaves the 40 MB CRC of a 100,000-session index out).
fn check_snapshot(bytes: &[u8], crc: bool) -> Result<(), String> {
    let header = bytes
        .get(..SNAPSHOT_HEADER_LEN)
        .ok_or("shorter than its header")?;
    if header.get(..8) != Some(SNAPSHOT_MAGIC.as_slice()) {
        return Err("not a session index snapshot (bad magic)".into());
    }
    let u32_at = |o: usize| {
        header
            .get(o..o + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
            .unwrap_or(0)
    };
    let version = u32_at(8);
    if version != SNAPSHOT_VERSION {
        return Err(format!("snapshot format version {version} is not known"));
    }
    let body_len = header
        .get(16..24)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .unwrap_or(0);
    let body = bytes.get(SNAPSHOT_HEADER_LEN..).unwrap_or_default();
    if body.len() as u64 != body_len {
        return Err(format!(
            "body is {} bytes, the header says {body_len}",
            body.len()
        ));
    }
    if crc && crc32fast::hash(body) != u32_at(24) {
        return Err("checksum mismatch".into());
    }
    let snap = rkyv::access::<ArchivedSnapshot<IndexEntry>, rancor::Error>(body)
        .map_err(|e| format!("body does not decode: {e}"))?;
    if snap.entries.len() as u32 != u32_at(12) || snap.by_session.len() != snap.entries.len() {
        return Err("entry count does not match".into());
    }
    Ok(())
}

/// Frames a record for the log.
/// Adds `r` as the index log holds it to `out` (for [`Store::index_append_encoded`]).
pub fn encode_record(r: &Record, out: &mut Vec<u8>) -> Result<(), StoreError> {
    record_bytes(r, out)
}

fn record_bytes(r: &Record, out: &mut Vec<u8>) -> Result<(), StoreError> {
    let payload = rkyv::to_bytes::<rancor::Error>(r).map_err(|e| StoreError::Corrupt {
        path: PathBuf::new(),
        offset: 0,
        detail: format!("index record does not encode: {e}"),
    })?;
    out.extend_from_slice(RECORD_MAGIC);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    Ok(())
}

/// The records of a log file, in order; torn or damaged stretches are skipped (and
/// counted in `damage`).
/// Each record of an index log in order, as it is parsed (a long log is never held
/// parsed as a whole); damage is skipped and described in `damage`.
fn for_each_record(bytes: &[u8], damage: &mut Vec<String>, mut f: impl FnMut(Record)) {
    let mut pos = 0usize;
    let mut payload = AlignedVec::<16>::new();
    while pos < bytes.len() {
        let parsed = (|| {
            let head = bytes.get(pos..pos + RECORD_HEADER_LEN)?;
            if head.get(..4)? != RECORD_MAGIC {
                return None;
            }
            let len = u32::from_le_bytes(head.get(4..8)?.try_into().ok()?) as usize;
            let crc = u32::from_le_bytes(head.get(8..12)?.try_into().ok()?);
            if len > RECORD_LEN_MAX {
                return None;
            }
            let body = bytes.get(pos + RECORD_HEADER_LEN..pos + RECORD_HEADER_LEN + len)?;
            if crc32fast::hash(body) != crc {
                return None;
            }
            payload.clear();
            payload.extend_from_slice(body);
            let r = rkyv::from_bytes::<Record, rancor::Error>(&payload).ok()?;
            Some((r, RECORD_HEADER_LEN + len))
        })();
        match parsed {
            Some((r, n)) => {
                f(r);
                pos += n;
            }
            None => {
                // A torn or damaged record: resume at the next record's magic.
                let skip_from = pos;
                pos = bytes
                    .get(pos + 1..)
                    .and_then(|rest| rest.windows(4).position(|w| w == RECORD_MAGIC))
                    .map_or(bytes.len(), |p| pos + 1 + p);
                damage.push(format!(
                    "{} unreadable bytes at offset {skip_from} of the index log",
                    pos - skip_from
                ));
            }
        }
    }
}

impl Store {
    pub(crate) fn index_dir(&self) -> PathBuf {
        self.root.join("index")
    }
    fn index_snapshot_path(&self) -> PathBuf {
        self.index_dir().join("sessions.snap")
    }
    fn index_log_path(&self) -> PathBuf {
        self.index_dir().join("sessions.log")
    }
    fn index_facts_rules_path(&self) -> PathBuf {
        self.index_dir().join("facts.rules")
    }

    /// The rules the index's facts were computed by, as the application recorded them
    /// (`None`: never recorded, as by a tacho from before rules were recorded).
    pub fn index_facts_rules(&self) -> Option<Vec<u8>> {
        self.vfs
            .read(&self.index_facts_rules_path(), false)
            .ok()
            .map(|b| b.to_vec())
    }

    /// Records the rules the index's facts are computed by (the application's, opaque
    /// here), once every fact the index holds is of them.
    pub fn set_index_facts_rules(&self, rules: &str) -> Result<(), StoreError> {
        let p = self.index_facts_rules_path();
        self.vfs
            .replace(&p, rules.as_bytes())
            .map_err(|e| StoreError::io(&p, e))
    }
    fn index_lock_path(&self) -> PathBuf {
        self.index_dir().join("lock")
    }

    fn index_lock(&self, exclusive: bool) -> Result<Box<dyn crate::vfs::Released>, StoreError> {
        let dir = self.index_dir();
        if self
            .vfs
            .create_dir_all(&dir)
            .map_err(|e| StoreError::io(&dir, e))?
        {
            self.vfs
                .sync_dir(&self.root)
                .map_err(|e| StoreError::io(&self.root, e))?;
        }
        let path = self.index_lock_path();
        self.vfs
            .lock_mode(&path, exclusive, INDEX_LOCK_TIMEOUT)
            .map_err(|e| match e {
                crate::vfs::LockError::Busy { .. } => StoreError::Busy {
                    session: "(session index)".into(),
                    holder: "a compaction".into(),
                    waited_ms: INDEX_LOCK_TIMEOUT.as_millis(),
                },
                crate::vfs::LockError::Io(e) => StoreError::io(&path, e),
            })
    }

    /// Appends records to the index log; with `sync`, durably. Returns the log's length
    /// after the append.
    pub fn index_append(&self, records: &[Record], sync: bool) -> Result<u64, StoreError> {
        if records.is_empty() {
            return Ok(0);
        }
        let mut bytes = Vec::new();
        for r in records {
            record_bytes(r, &mut bytes)?;
        }
        self.index_append_encoded(&bytes, sync)
    }

    /// Appends records encoded by [`encode_record`] (held encoded: a tenth of their
    /// size in memory), as [`Store::index_append`] does.
    pub fn index_append_encoded(&self, bytes: &[u8], sync: bool) -> Result<u64, StoreError> {
        if bytes.is_empty() {
            return Ok(0);
        }
        let _shared = self.index_lock(false)?;
        let path = self.index_log_path();
        let (len, created) = self
            .vfs
            .append_shared(&path, bytes)
            .map_err(|e| StoreError::io(&path, e))?;
        if sync {
            self.vfs
                .sync_file(&path)
                .map_err(|e| StoreError::io(&path, e))?;
            if created {
                let dir = self.index_dir();
                self.vfs
                    .sync_dir(&dir)
                    .map_err(|e| StoreError::io(&dir, e))?;
            }
        }
        Ok(len)
    }

    /// Reads the index (an empty view when there is none).
    pub fn index(&self) -> Result<IndexView, StoreError> {
        if !self.vfs.exists(&self.index_dir()) {
            return Ok(self.empty_index());
        }
        let _shared = self.index_lock(false)?;
        self.index_locked(false)
    }

    /// Reads the index checking everything, the snapshot's checksum too (`log verify`).
    pub fn index_checked(&self) -> Result<IndexView, StoreError> {
        if !self.vfs.exists(&self.index_dir()) {
            return Ok(self.empty_index());
        }
        let _shared = self.index_lock(false)?;
        self.index_locked(true)
    }

    fn empty_index(&self) -> IndexView {
        IndexView {
            snapshot: None,
            overlay: HashMap::new(),
            removed: Default::default(),
            overlay_order: Vec::new(),
            log_len: 0,
            damage: Vec::new(),
            exists: false,
        }
    }

    fn index_locked(&self, full_check: bool) -> Result<IndexView, StoreError> {
        let mut view = self.empty_index();
        let snap_path = self.index_snapshot_path();
        match self.vfs.read(&snap_path, true) {
            Ok(bytes) => {
                view.exists = true;
                match check_snapshot(&bytes, full_check) {
                    Ok(()) => view.snapshot = Some(bytes),
                    Err(e) => view.damage.push(format!("{}: {e}", snap_path.display())),
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(&snap_path, e)),
        }
        let log_path = self.index_log_path();
        match self.vfs.read(&log_path, false) {
            Ok(bytes) => {
                view.exists = true;
                view.log_len = bytes.len() as u64;
                let mut damage = Vec::new();
                for_each_record(&bytes, &mut damage, |r| view.fold(r));
                view.order_overlay();
                view.damage.extend(damage);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(&log_path, e)),
        }
        Ok(view)
    }

    /// The length of the index's appended records (0 when there are none).
    pub fn index_log_len(&self) -> u64 {
        self.vfs.stamp(&self.index_log_path()).map_or(0, |s| s.len)
    }

    /// Folds the appended records into a new snapshot and empties the log, under the
    /// index's exclusive lock (appenders wait).
    pub fn index_compact(&self) -> Result<(), StoreError> {
        // An index never built is not compacted (that would claim it complete): said
        // without reading the records.
        if !self.vfs.exists(&self.index_snapshot_path()) {
            return Ok(());
        }
        let _exclusive = self.index_lock(true)?;
        let view = self.index_locked(true)?;
        if !view.complete() || (view.log_len == 0 && view.damage.is_empty()) {
            return Ok(());
        }
        let mut entries = Vec::new();
        view.for_each_newest_first(|e| {
            entries.push(e);
            true
        });
        self.write_index_refs(entries, true)
    }

    /// Where the index is now: taken before a rebuild reads the streams, so that the
    /// rebuild can drop the records it has superseded and keep those appended since.
    pub fn index_mark(&self) -> Result<IndexMark, StoreError> {
        // Exclusive, if briefly: no append is half-way while the length is read.
        let _exclusive = self.index_lock(true)?;
        self.index_mark_locked()
    }

    fn index_mark_locked(&self) -> Result<IndexMark, StoreError> {
        let snapshot = self
            .vfs
            .read(&self.index_snapshot_path(), false)
            .ok()
            .map(|b| (b.len() as u64, crc32fast::hash(&b)));
        let log_len = match self.vfs.read(&self.index_log_path(), false) {
            Ok(b) => b.len() as u64,
            Err(_) => 0,
        };
        Ok(IndexMark { snapshot, log_len })
    }

    /// Replaces the index with `entries`, a rebuild from the streams that started at
    /// `mark`. Records appended since the mark are kept and fold on top (a writer that
    /// started meanwhile marks its entry dirty); those before it are dropped, the
    /// rebuild having read the streams after them. When a compaction ran meanwhile,
    /// every record left is newer than the mark, and all are kept.
    pub fn index_replace(
        &self,
        entries: Vec<IndexEntry>,
        mark: IndexMark,
    ) -> Result<(), StoreError> {
        let _exclusive = self.index_lock(true)?;
        let now = self.index_mark_locked()?;
        let log_path = self.index_log_path();
        let kept = if now.snapshot == mark.snapshot && now.log_len >= mark.log_len {
            match self.vfs.read(&log_path, false) {
                Ok(b) => Some(b.get(mark.log_len as usize..).unwrap_or_default().to_vec()),
                Err(_) => None,
            }
        } else {
            None
        };
        self.write_index_locked(entries, false)?;
        if let Some(rest) = kept {
            self.vfs
                .replace(&log_path, &rest)
                .map_err(|e| StoreError::io(&log_path, e))?;
        }
        Ok(())
    }

    fn write_index_locked(
        &self,
        entries: Vec<IndexEntry>,
        clear_log: bool,
    ) -> Result<(), StoreError> {
        self.write_index_refs(entries.iter().map(EntryRef::Owned).collect(), clear_log)
    }

    fn write_index_refs(
        &self,
        entries: Vec<EntryRef<'_>>,
        clear_log: bool,
    ) -> Result<(), StoreError> {
        let snap_path = self.index_snapshot_path();
        let mut entries = Some(entries);
        self.vfs
            .replace_with(&snap_path, SNAPSHOT_HEADER_LEN, &mut |out| {
                write_snapshot(entries.take().unwrap_or_default(), out)
            })
            .map_err(|e| StoreError::io(&snap_path, e))?;
        if clear_log {
            let log_path = self.index_log_path();
            self.vfs
                .replace(&log_path, &[])
                .map_err(|e| StoreError::io(&log_path, e))?;
        }
        Ok(())
    }

    /// Starts the index of a new store complete and empty, so that readers fold the
    /// records appended from then on instead of rebuilding the index from every stream
    /// (a first listing after a large import). Only while the store holds no stream and
    /// no index snapshot: the streams of an older store predate its index records.
    pub(crate) fn index_begin(&self) -> Result<(), StoreError> {
        let _exclusive = self.index_lock(true)?;
        if self.vfs.exists(&self.index_snapshot_path()) || !self.sessions()?.is_empty() {
            return Ok(());
        }
        // Any record already appended (a writer that raced this one) stays in the log
        // and folds on top.
        self.write_index_locked(Vec::new(), false)?;
        // Every fact of this index will be computed by the rules in force.
        if !self.opts.facts_rules.is_empty() {
            self.set_index_facts_rules(self.opts.facts_rules)?;
        }
        Ok(())
    }

    /// Deletes the index (it is rebuilt from the streams on the next read).
    pub fn index_delete(&self) -> Result<(), StoreError> {
        let _exclusive = self.index_lock(true)?;
        for p in [
            self.index_snapshot_path(),
            self.index_log_path(),
            self.index_facts_rules_path(),
        ] {
            match self.vfs.remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(&p, e)),
            }
        }
        Ok(())
    }

    /// The snapshot file's bytes as stored (tests and `log verify` compare rebuilds).
    pub fn index_snapshot_file(&self) -> Option<Vec<u8>> {
        self.vfs
            .read(&self.index_snapshot_path(), false)
            .ok()
            .map(|b| b.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreOptions;
    use crate::vfs::SimFs;
    use std::sync::Arc;

    fn facts(started: i64, risk: u8) -> SessionFacts {
        SessionFacts {
            started_unix_ns: Some(started),
            risk_level: risk,
            ..Default::default()
        }
    }

    fn store() -> Store {
        Store::open_with(Arc::new(SimFs::new()), "/s", StoreOptions::default()).unwrap()
    }

    fn head(s: &str, n: u64) -> Record {
        Record::Head {
            session: s.into(),
            next_seq: n,
            head: [n as u8; 32],
        }
    }

    fn facts_rec(s: &str, n: u64, started: i64) -> Record {
        Record::Facts {
            session: s.into(),
            at: FactsAt {
                next_seq: n,
                head: [n as u8; 32],
                facts: facts(started, 1),
            },
        }
    }

    #[test]
    fn records_fold_the_same_before_and_after_compaction() {
        let st = store();
        assert!(!st.index().unwrap().complete());
        // Records alone do not make an index complete; only a built snapshot does.
        st.index_append(
            &[Record::Dirty {
                session: "z".into(),
            }],
            true,
        )
        .unwrap();
        st.index_compact().unwrap();
        assert!(!st.index().unwrap().complete());
        // A rebuild supersedes the records before its mark (here: `z`, which no
        // stream backs).
        st.index_replace(Vec::new(), st.index_mark().unwrap())
            .unwrap();
        assert!(st.index().unwrap().get("z").is_none());
        st.index_append(
            &[
                Record::Dirty {
                    session: "a".into(),
                },
                head("a", 3),
                facts_rec("a", 3, 100),
                Record::Dirty {
                    session: "b".into(),
                },
                head("b", 5),
                facts_rec("b", 5, 200),
                Record::Dirty {
                    session: "c".into(),
                },
            ],
            true,
        )
        .unwrap();
        let before = st.index().unwrap();
        let order = |v: &IndexView| {
            let mut o = Vec::new();
            v.for_each_newest_first(|e| {
                o.push(e.session().to_string());
                true
            });
            o
        };
        assert_eq!(order(&before), ["b", "a", "c"]);
        assert!(before.get("a").unwrap().fresh_facts().is_some());
        assert!(before.get("c").unwrap().dirty);
        st.index_compact().unwrap();
        let after = st.index().unwrap();
        assert_eq!(after.log_len(), 0);
        assert_eq!(order(&after), ["b", "a", "c"]);
        assert_eq!(before.entries(), after.entries());
        // A head never moves back; the last facts win, and are fresh only at the head.
        st.index_append(&[head("a", 2), facts_rec("a", 2, 50), head("b", 6)], false)
            .unwrap();
        let v = st.index().unwrap();
        let a = v.get("a").unwrap();
        assert_eq!((a.next_seq, a.facts.as_ref().unwrap().next_seq), (3, 2));
        assert!(a.fresh_facts().is_none());
        let b = v.get("b").unwrap();
        assert_eq!(b.next_seq, 6);
        assert!(b.fresh_facts().is_none(), "facts at 5 are stale at 6");
        st.index_append(
            &[Record::Removed {
                session: "b".into(),
            }],
            false,
        )
        .unwrap();
        assert_eq!(st.index().unwrap().sessions(), ["a", "c"]);
        assert_eq!(st.index().unwrap().sessions_with_prefix("c"), ["c"]);
        // A compaction mixing stored entries (`c`) with folded ones (`a`) and a removal
        // writes the bytes of a snapshot built from the owned entries.
        st.index_append(&[head("d", 1), facts_rec("d", 1, 150)], false)
            .unwrap();
        let entries = st.index().unwrap().entries();
        st.index_compact().unwrap();
        assert_eq!(
            st.index_snapshot_file().unwrap(),
            snapshot_bytes(entries.clone()).unwrap()
        );
        assert_eq!(st.index().unwrap().entries(), entries);
        assert_eq!(st.index().unwrap().sessions(), ["a", "c", "d"]);
    }

    #[test]
    fn a_torn_record_costs_only_itself() {
        let mut bytes = Vec::new();
        record_bytes(&head("a", 1), &mut bytes).unwrap();
        let torn_at = bytes.len();
        record_bytes(&head("b", 2), &mut bytes).unwrap();
        bytes.truncate(torn_at + 9);
        record_bytes(&head("c", 3), &mut bytes).unwrap();
        let mut damage = Vec::new();
        let mut got: Vec<String> = Vec::new();
        for_each_record(&bytes, &mut damage, |r| got.push(r.session().to_string()));
        assert_eq!(got, ["a", "c"]);
        assert_eq!(damage.len(), 1);
    }

    #[test]
    fn the_same_entries_give_the_same_snapshot_bytes() {
        let e = |s: &str, t: i64| IndexEntry {
            facts: Some(FactsAt {
                next_seq: 1,
                head: [1; 32],
                facts: facts(t, 0),
            }),
            ..IndexEntry::new(s)
        };
        let one = snapshot_bytes(vec![e("x", 1), e("y", 2), e("z", 2)]).unwrap();
        let two = snapshot_bytes(vec![e("z", 2), e("x", 1), e("y", 2)]).unwrap();
        assert_eq!(one, two);
        check_snapshot(&one, true).unwrap();
        let mut bad = one.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(check_snapshot(&bad, true).is_err());
    }
}
