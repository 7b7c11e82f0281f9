//! Vouching for the streams a listing shows, at the cost of a `stat` per file.
//!
//! The session index describes each stream as it was when indexed; bytes changed in
//! place afterwards (a flipped bit in a committed batch) leave the index as it was. A
//! listing that shows a session checks that its stream's files are as they were when
//! that stream last verified: their stamps (length, device, inode, modification and
//! status-change times) hashed together equal the stamp recorded then. Any other
//! stream is verified again, whole, and its stamp recorded when it verifies.
//!
//! The stamps live in `index/vouched` (derived: deleting it costs one verification
//! of each stream listed next). A process that changes a file cannot set its
//! status-change time back, but it can write this file: a listing's word is
//! a convenience, and `log verify` (which reads every stream) is the check.

use std::collections::HashMap;

use crate::store::{Store, StoreError};
use crate::verify::{Finding, Severity};

/// The file of recorded stamps, in the index's directory.
const VOUCHED: &str = "vouched";
/// Its first line.
const MAGIC: &str = "tacho vouched v1";

/// How recent a file's last status change may be for its stamp to be recorded: the
/// filesystem's timestamps move in ticks, and a write within the tick of a stamp could
/// leave it as it was.
const RACY_NS: u64 = 2_000_000_000;

/// What a listing can say of one stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Vouch {
    /// Its files are as they were when it last verified, or it verified now.
    Sound,
    /// It did not verify: the first error.
    Damaged(Finding),
    /// It has no stream (removed since it was listed).
    Gone,
}

impl Store {
    fn vouched_path(&self) -> std::path::PathBuf {
        self.index_dir().join(VOUCHED)
    }

    /// The stamp of a session's stream: every segment's file (or pack, with its range)
    /// and that file's stamp, hashed in sequence order.
    /// Also the newest status-change time among them (nanoseconds).
    fn stream_stamp(&self, session: &str) -> Result<([u8; 32], u64), StoreError> {
        let mut h = blake3::Hasher::new_derive_key("tacho vouched stream stamp v1");
        let mut newest = 0;
        for s in self.segment_files(session)? {
            let stamp = self
                .vfs
                .stamp(&s.path)
                .map_err(|e| StoreError::io(&s.path, e))?;
            let path = s.path.as_os_str().as_encoded_bytes();
            h.update(&(path.len() as u64).to_le_bytes());
            h.update(path);
            h.update(&s.first_seq.to_le_bytes());
            let (at, len) = s.range().unwrap_or((u64::MAX, u64::MAX));
            h.update(&at.to_le_bytes());
            h.update(&len.to_le_bytes());
            h.update(&stamp.encode());
            newest = newest.max(stamp.id[3]);
        }
        Ok((*h.finalize().as_bytes(), newest))
    }

    /// The recorded stamps (none when the file is missing or not of this version; a
    /// line that does not parse is left out, and its stream verified again).
    fn vouched(&self) -> HashMap<String, [u8; 32]> {
        let Ok(bytes) = self.vfs.read(&self.vouched_path(), false) else {
            return HashMap::new();
        };
        let text = String::from_utf8_lossy(&bytes);
        let mut lines = text.lines();
        if lines.next() != Some(MAGIC) {
            return HashMap::new();
        }
        lines
            .filter_map(|l| {
                let (stamp, session) = l.split_once(' ')?;
                let mut b = [0u8; 32];
                faster_hex::hex_decode(stamp.as_bytes(), &mut b).ok()?;
                Some((session.to_string(), b))
            })
            .collect()
    }

    /// For each of `sessions`, whether its stream can be vouched for: verified again
    /// (deeply) unless its files are as they were when it last verified. The stamps of
    /// the streams that verified are recorded (best effort: a store that cannot be
    /// written verifies them again next time).
    pub fn vouch(&self, sessions: &[&str]) -> Vec<Vouch> {
        let mut known = self.vouched();
        let mut changed = false;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let out = sessions
            .iter()
            .map(|&session| {
                // The stamp is taken before the stream is read: a change meanwhile makes
                // the next listing verify again.
                let (stamp, newest) = match self.stream_stamp(session) {
                    Ok(s) => s,
                    Err(StoreError::NotFound(_)) => {
                        changed |= known.remove(session).is_some();
                        return Vouch::Gone;
                    }
                    Err(e) => return Vouch::Damaged(error_finding(session, e)),
                };
                if known.get(session) == Some(&stamp) {
                    return Vouch::Sound;
                }
                match self.verify_session(session, true) {
                    Ok(r) => match r
                        .findings
                        .into_iter()
                        .find(|f| f.severity == Severity::Error)
                    {
                        Some(f) => {
                            changed |= known.remove(session).is_some();
                            Vouch::Damaged(f)
                        }
                        None => {
                            // A file changed within the clock's grain of now could
                            // change again under the same stamp (Git's "racy clean"):
                            // its stamp is not recorded, and it is verified again.
                            if now.saturating_sub(newest) >= RACY_NS {
                                known.insert(session.to_string(), stamp);
                                changed = true;
                            }
                            Vouch::Sound
                        }
                    },
                    Err(StoreError::NotFound(_)) => Vouch::Gone,
                    Err(e) => {
                        changed |= known.remove(session).is_some();
                        Vouch::Damaged(error_finding(session, e))
                    }
                }
            })
            .collect();
        if changed {
            self.save_vouched(&known);
        }
        out
    }

    /// Drops the stamps of `sessions` (streams removed by a prune): the file keeps only
    /// streams that exist. Best effort, as every write of it.
    pub(crate) fn forget_vouched(&self, sessions: &[&str]) {
        let mut known = self.vouched();
        let before = known.len();
        for s in sessions {
            known.remove(*s);
        }
        if known.len() != before {
            self.save_vouched(&known);
        }
    }

    fn save_vouched(&self, known: &HashMap<String, [u8; 32]>) {
        let mut lines: Vec<String> = known
            .iter()
            .map(|(s, stamp)| format!("{} {s}\n", faster_hex::hex_string(stamp)))
            .collect();
        lines.sort();
        let mut text = format!("{MAGIC}\n");
        text.extend(lines);
        let dir = self.index_dir();
        // Best effort: what is not recorded is verified again next time.
        if self.vfs.create_dir_all(&dir).is_ok() {
            let _ = self.vfs.replace(&self.vouched_path(), text.as_bytes());
        }
    }
}

fn error_finding(session: &str, e: StoreError) -> Finding {
    Finding {
        severity: Severity::Error,
        session: session.to_string(),
        segment: None,
        offset: None,
        message: e.to_string(),
    }
}
