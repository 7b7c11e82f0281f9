//! Adopting a session recorded elsewhere (`tacho fetch`): its segments, exactly as the
//! other store wrote them, become a stream of this store in one rename, or not at all.

use tacho_log_format::{ChainValue, segment_file_name};

use crate::index::Record;
use crate::store::{Store, StoreError, stream_dir_name};
use crate::vfs::LockError;

impl Store {
    /// Makes `segments` (first sequence number, bytes up to the end of the committed
    /// data) the stream of `session`, a session this store does not hold, whose record
    /// the caller has verified and whose head is `next_seq` events and chain `head`.
    /// The segments are written and synced in a directory of their own under
    /// `streams/` (a name no session id spells) and renamed into place under the
    /// session's lock and the pack lock: a crash or an error leaves either no stream or
    /// the whole one (and at most a leftover directory no reader lists).
    pub fn adopt_session(
        &self,
        session: &str,
        segments: &[(u64, &[u8])],
        next_seq: u64,
        head: ChainValue,
    ) -> Result<(), StoreError> {
        tacho_schema::validate_session_id(session).map_err(StoreError::BadSessionId)?;
        let root = self.root().to_path_buf();
        for dir in [root.join("locks"), root.join("streams")] {
            self.vfs
                .create_dir_all(&dir)
                .map_err(|e| StoreError::io(&dir, e))?;
        }
        let lock_path = self.lock_path(session);
        let _lock = self
            .vfs
            .lock(&lock_path, self.opts.lock_timeout)
            .map_err(|e| match e {
                LockError::Busy { holder } => StoreError::Busy {
                    session: session.to_string(),
                    holder: holder.unwrap_or_else(|| "unknown process".into()),
                    waited_ms: self.opts.lock_timeout.as_millis(),
                },
                LockError::Io(e) => StoreError::io(&lock_path, e),
            })?;
        if self.has_session(session) {
            return Err(StoreError::Rejected {
                session: session.to_string(),
                reason: "this store already holds a session of that id; nothing was adopted".into(),
            });
        }
        self.index_append(
            &[Record::Dirty {
                session: session.to_string(),
            }],
            true,
        )?;
        let streams = self.streams_dir();
        let tmp = streams.join(format!(
            ".adopt-{}-{}",
            stream_dir_name(session),
            std::process::id()
        ));
        let written = self.write_segments(&tmp, segments);
        let placed = written.and_then(|()| {
            let _shared = self.pack_lock(false)?;
            if self.has_session(session) {
                return Err(StoreError::Rejected {
                    session: session.to_string(),
                    reason: "another process recorded this session meanwhile; nothing was adopted"
                        .into(),
                });
            }
            let dir = self.stream_dir(session);
            self.vfs
                .rename(&tmp, &dir)
                .map_err(|e| StoreError::io(&dir, e))?;
            self.vfs
                .sync_dir(&streams)
                .map_err(|e| StoreError::io(&streams, e))
        });
        if let Err(e) = placed {
            self.remove_leftover(&tmp);
            return Err(e);
        }
        self.index_append(
            &[Record::Head {
                session: session.to_string(),
                next_seq,
                head,
            }],
            true,
        )?;
        Ok(())
    }

    fn write_segments(
        &self,
        dir: &std::path::Path,
        segments: &[(u64, &[u8])],
    ) -> Result<(), StoreError> {
        self.remove_leftover(dir);
        self.vfs
            .create_dir_all(dir)
            .map_err(|e| StoreError::io(dir, e))?;
        for (first_seq, bytes) in segments {
            let path = dir.join(segment_file_name(*first_seq));
            let mut f = self
                .vfs
                .open_append(&path, true)
                .map_err(|e| StoreError::io(&path, e))?;
            f.write_at(0, bytes)
                .and_then(|()| f.sync_data())
                .map_err(|e| StoreError::io(&path, e))?;
        }
        self.vfs.sync_dir(dir).map_err(|e| StoreError::io(dir, e))
    }

    /// Removes a directory of adopted segments that was not renamed into place.
    fn remove_leftover(&self, dir: &std::path::Path) {
        if let Ok(names) = self.vfs.list_dir(dir) {
            for n in names {
                let _ = self.vfs.remove_file(&dir.join(n));
            }
            let _ = self.vfs.remove_dir(dir);
        }
    }
}
