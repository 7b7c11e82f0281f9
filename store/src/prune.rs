//! Removing whole sessions, and the store-level record of every removal (SPEC §14.5).
//!
//! `<root>/pruned.log` holds one JSON line per prune: when, why, and each session
//! removed with its final event count and chain head. Each line carries the BLAKE3
//! digest of itself and of the line before (`prev`): the record of removals is itself
//! tamper-evident, and `log verify` checks it. A prune is recorded (synced) before
//! anything is removed, so a crash can leave sessions recorded as pruned that still
//! exist — never a removal without its record.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::vfs::LockError;
use crate::{Finding, Severity, Store, StoreError, Writer};

/// The file name of the prune record, under the store root.
pub const PRUNE_LOG: &str = "pruned.log";
const PRUNE_LOCK: &str = "pruned.lock";
const DIGEST_CONTEXT: &str = "tacho prune record v1";
const ZERO: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One session a prune removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrunedSession {
    pub session: String,
    /// Events in the stream when it was removed, and its chain head (hex).
    pub next_seq: u64,
    pub head: String,
    pub started_unix_ns: Option<i64>,
    pub last_event_unix_ns: Option<i64>,
}

/// One line of `pruned.log`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneRecord {
    #[serde(rename = "type")]
    pub kind: String,
    pub at_unix_ns: i64,
    /// Why: the rule as given (`older than 90 days, keeping HIGH and above`).
    pub reason: String,
    pub sessions: Vec<PrunedSession>,
    /// The digest of the line before (64 zeros for the first).
    pub prev: String,
    /// BLAKE3-derive("tacho prune record v1", this line's JSON with `digest` empty),
    /// hex.
    pub digest: String,
}

impl PruneRecord {
    fn computed_digest(&self) -> String {
        let mut c = self.clone();
        c.digest = String::new();
        let text = serde_json::to_vec(&c).unwrap_or_default();
        crate::hex(blake3::derive_key(DIGEST_CONTEXT, &text).as_slice())
    }
}

impl Store {
    pub fn prune_log_path(&self) -> PathBuf {
        self.root().join(PRUNE_LOG)
    }

    /// The prune records, and what is wrong with them: a line that does not parse, a
    /// digest that does not match, a broken link to the line before.
    pub fn prune_records(&self) -> Result<(Vec<PruneRecord>, Vec<Finding>), StoreError> {
        let path = self.prune_log_path();
        if !self.vfs.exists(&path) {
            return Ok((Vec::new(), Vec::new()));
        }
        let bytes = self
            .vfs
            .read(&path, false)
            .map_err(|e| StoreError::io(&path, e))?;
        Ok(parse(&path, &bytes))
    }

    /// Appends a prune record (synced) and returns it.
    pub fn record_prune(
        &self,
        at_unix_ns: i64,
        reason: &str,
        sessions: Vec<PrunedSession>,
    ) -> Result<PruneRecord, StoreError> {
        let lock_path = self.root().join(PRUNE_LOCK);
        let _lock = self
            .vfs
            .lock(&lock_path, self.opts.lock_timeout)
            .map_err(|e| match e {
                LockError::Busy { holder } => StoreError::Busy {
                    session: "(prune record)".into(),
                    holder: holder.unwrap_or_else(|| "another prune".into()),
                    waited_ms: self.opts.lock_timeout.as_millis(),
                },
                LockError::Io(e) => StoreError::io(&lock_path, e),
            })?;
        let (records, _) = self.prune_records()?;
        let mut r = PruneRecord {
            kind: "prune".into(),
            at_unix_ns,
            reason: reason.to_string(),
            sessions,
            prev: records
                .last()
                .map_or_else(|| ZERO.to_string(), |l| l.digest.clone()),
            digest: String::new(),
        };
        r.digest = r.computed_digest();
        let mut line = serde_json::to_vec(&r).map_err(|e| StoreError::io(&lock_path, e.into()))?;
        line.push(b'\n');
        let path = self.prune_log_path();
        let (_, created) = self
            .vfs
            .append_shared(&path, &line)
            .map_err(|e| StoreError::io(&path, e))?;
        self.vfs
            .sync_file(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        if created {
            self.vfs
                .sync_dir(self.root())
                .map_err(|e| StoreError::io(self.root(), e))?;
        }
        Ok(r)
    }
}

/// Reads and checks the lines of a prune log.
fn parse(path: &Path, bytes: &[u8]) -> (Vec<PruneRecord>, Vec<Finding>) {
    let mut records: Vec<PruneRecord> = Vec::new();
    let mut findings = Vec::new();
    let finding = |offset: usize, severity, message: String| Finding {
        severity,
        session: "(prune record)".into(),
        segment: Some(path.to_path_buf()),
        offset: Some(offset as u64),
        message,
    };
    let mut offset = 0usize;
    let mut prev = ZERO.to_string();
    for line in bytes.split_inclusive(|b| *b == b'\n') {
        let at = offset;
        offset += line.len();
        let Some(text) = line.strip_suffix(b"\n") else {
            findings.push(finding(
                at,
                Severity::Warning,
                "a torn last line (a prune interrupted while recording); the sessions it names were not removed".into(),
            ));
            break;
        };
        let r: PruneRecord = match serde_json::from_slice(text) {
            Ok(r) => r,
            Err(e) => {
                findings.push(finding(
                    at,
                    Severity::Error,
                    format!("not a prune record: {e}"),
                ));
                continue;
            }
        };
        if r.digest != r.computed_digest() {
            findings.push(finding(
                at,
                Severity::Error,
                "the record's digest does not match its content (edited)".into(),
            ));
        }
        if r.prev != prev {
            findings.push(finding(
                at,
                Severity::Error,
                "the record does not follow the one before it (a record removed or reordered)"
                    .into(),
            ));
        }
        prev = r.digest.clone();
        records.push(r);
    }
    (records, findings)
}

impl Writer {
    /// Removes the stream this writer holds — its segments, its directory, its index
    /// entry and its lock file — and releases it. What it held is gone for good: the
    /// caller has recorded it first ([`Store::record_prune`]).
    pub fn remove_stream(self) -> Result<(), StoreError> {
        remove_streams(vec![self])
    }
}

/// Removes the streams these writers hold, as [`Writer::remove_stream`] does for one:
/// packs that hold some of them are written again once, without all of them.
pub fn remove_streams(mut writers: Vec<Writer>) -> Result<(), StoreError> {
    let Some(store) = writers.first().map(|w| w.store().clone()) else {
        return Ok(());
    };
    for w in writers.iter_mut() {
        w.forget_head()?;
    }
    let mut packed = Vec::new();
    for w in &writers {
        let dir = store.stream_dir(w.session());
        let names = match store.vfs.list_dir(&dir) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(StoreError::io(&dir, e)),
        };
        for name in names {
            let p = dir.join(name);
            store
                .vfs
                .remove_file(&p)
                .map_err(|e| StoreError::io(&p, e))?;
        }
        match store.vfs.remove_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(&dir, e)),
        }
        if !store.packed_segments(w.session())?.is_empty() {
            packed.push(w.session().to_string());
        }
    }
    let streams = store.streams_dir();
    if store.vfs.exists(&streams) {
        store
            .vfs
            .sync_dir(&streams)
            .map_err(|e| StoreError::io(&streams, e))?;
    }
    store.unpack(&packed)?;
    let removed: Vec<crate::index::Record> = writers
        .iter()
        .map(|w| crate::index::Record::Removed {
            session: w.session().to_string(),
        })
        .collect();
    store.index_append(&removed, true)?;
    let gone: Vec<&str> = writers.iter().map(|w| w.session()).collect();
    store.forget_vouched(&gone);
    for w in writers {
        // Unlinked while held: a writer waiting on it finds, once it has the lock,
        // that the path is another file, and takes that one instead.
        let lock = store.lock_path(w.session());
        match store.vfs.remove_file(&lock) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StoreError::io(&lock, e)),
        }
        drop(w);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(prev: &str, n: u64) -> PruneRecord {
        let mut r = PruneRecord {
            kind: "prune".into(),
            at_unix_ns: 1,
            reason: "test".into(),
            sessions: vec![PrunedSession {
                session: format!("s{n}"),
                next_seq: n,
                head: ZERO.into(),
                started_unix_ns: None,
                last_event_unix_ns: None,
            }],
            prev: prev.into(),
            digest: String::new(),
        };
        r.digest = r.computed_digest();
        r
    }

    fn text(rs: &[PruneRecord]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in rs {
            out.extend(serde_json::to_vec(r).unwrap());
            out.push(b'\n');
        }
        out
    }

    #[test]
    fn edits_removals_and_torn_lines_are_found() {
        let a = rec(ZERO, 1);
        let b = rec(&a.digest, 2);
        let c = rec(&b.digest, 3);
        let p = Path::new("pruned.log");
        let (rs, f) = parse(p, &text(&[a.clone(), b.clone(), c.clone()]));
        assert_eq!((rs.len(), f.len()), (3, 0));
        // A record removed.
        let (_, f) = parse(p, &text(&[a.clone(), c.clone()]));
        assert_eq!(f.len(), 1);
        assert!(f[0].message.contains("does not follow"));
        // A record edited.
        let mut edited = b.clone();
        edited.sessions[0].next_seq = 99;
        let (_, f) = parse(p, &text(&[a.clone(), edited, c.clone()]));
        assert!(f.iter().any(|f| f.message.contains("digest")));
        // A torn last line: a warning, not an error.
        let mut t = text(&[a, b]);
        t.extend_from_slice(b"{\"type\":\"pru");
        let (rs, f) = parse(p, &t);
        assert_eq!(rs.len(), 2);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].severity, Severity::Warning);
    }
}
