//! Log-level tooling: verifying or counting every stream, and dumping segments.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use tacho_schema::EventView;

use tacho_store::dump::{SegmentDump, dump_file};
use tacho_store::{SegmentInfo, StoreError, StoreReport, StreamReport};

use crate::error::kinds;
use crate::index::{Deferred, index_head_differs};
use crate::{SessionId, Tacho};

/// Why a dump could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("session {session} has {count} segment(s); there is no segment {index}")]
    NoSegment {
        session: String,
        count: usize,
        index: usize,
    },
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Nothing was ever recorded in the data directory.
#[derive(Debug, thiserror::Error)]
#[error(
    "no tacho data in {}: nothing was ever recorded there (is TACHO_HOME right?)",
    .0.display()
)]
pub struct NoData(pub PathBuf);

kinds!(NoData { _ => NotFound });

kinds!(DumpError {
    DumpError::NoSegment { .. } => NotFound,
    DumpError::Read { .. } => Io,
    DumpError::Store(e) => e.kind(),
});

/// A segment file's path (or a pack's, with the segment's offset and length in it),
/// read and walked.
pub fn dump_segment_file(path: &Path, range: Option<(u64, u64)>) -> Result<SegmentDump, DumpError> {
    dump_file(path, range).map_err(|source| DumpError::Read {
        path: path.to_path_buf(),
        source,
    })
}

impl Tacho {
    /// Whether anything was ever recorded here; `NoData` otherwise (for commands whose
    /// answer about an empty store would mislead, such as a digest of nothing).
    pub fn require_data(&self) -> Result<(), NoData> {
        if self.log().exists() {
            Ok(())
        } else {
            Err(NoData(self.data_dir().to_path_buf()))
        }
    }

    /// Verifies (`deep`: every checksum, chain step, sequence number and payload) or
    /// counts every stream, or one, on every core. `progress(done, total)` hears how
    /// many sessions are done. A deep check of the whole store also checks the session
    /// index against the streams (see [`Tacho::check_index_entry`]).
    pub fn verify_store(
        &self,
        deep: bool,
        only: Option<&SessionId>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<StoreReport, StoreError> {
        let sessions = match only {
            Some(s) => vec![s.to_string()],
            None => self.log().sessions()?,
        };
        let index = match (deep, only) {
            (true, None) => Some(self.log().index_checked()?).filter(|v| v.complete()),
            _ => None,
        };
        let total = sessions.len();
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let deferred: Mutex<Vec<Deferred>> = Mutex::new(Vec::new());
        let slots: Vec<Mutex<Option<Result<StreamReport, StoreError>>>> =
            sessions.iter().map(|_| Mutex::new(None)).collect();
        let work = || {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(s) = sessions.get(i) else { break };
                let r = match &index {
                    // One read of the stream both verifies it and folds the facts
                    // its index entry is checked against.
                    Some(v) => {
                        let mut g = tacho_projections::ExecutionGraph::new(s);
                        let mut source = None;
                        self.log()
                            .verify_session_visiting(s, &mut |seq, at, e| {
                                if let (0, EventView::SessionStart { source: from, .. }) = (seq, e)
                                {
                                    source = from.map(str::to_owned);
                                }
                                g.apply_view(seq, at, e)
                            })
                            .map(|mut r| {
                                // A head that differs is checked again once every
                                // stream is read: a writer may have appended since
                                // the index was.
                                let entry = v.get(s);
                                match entry {
                                    Some(before) if index_head_differs(&before, &r) => deferred
                                        .lock()
                                        .unwrap_or_else(|e| e.into_inner())
                                        .push(Deferred {
                                            slot: i,
                                            before,
                                            folded: g,
                                            source,
                                        }),
                                    entry => r
                                        .findings
                                        .extend(self.check_index_entry(entry, &r, g, source)),
                                }
                                r
                            })
                    }
                    None => self.log().verify_session(s, deep),
                };
                if let Some(slot) = slots.get(i) {
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        };
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads.min(total).max(1))
                .map(|_| scope.spawn(work))
                .collect();
            // This thread only reports progress.
            while workers.iter().any(|w| !w.is_finished()) {
                progress(done.load(Ordering::Relaxed), total);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        progress(total, total);
        let mut report = StoreReport::default();
        for slot in slots {
            match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
                Some(r) => report.streams.push(r?),
                None => {
                    return Err(StoreError::NotFound(
                        "(a session verified by no thread)".into(),
                    ));
                }
            }
        }
        if let Some(v) = &index {
            let deferred = deferred.into_inner().unwrap_or_else(|e| e.into_inner());
            if !deferred.is_empty() {
                let fresh = self.log().index_checked()?;
                self.recheck_index_entries(&fresh, deferred, &mut report.streams);
            }
            report.store.extend(self.check_index_store(v, &sessions));
        }
        if only.is_none() {
            report.store.extend(self.log().verify_packs());
            let (findings, head) = self.check_prune_record()?;
            report.store.extend(findings);
            report.prune_head = head;
        }
        Ok(report)
    }

    /// The segments of a session (resolved), or only the one at `index`.
    pub fn segment_paths(
        &self,
        session: &str,
        index: Option<usize>,
    ) -> Result<Vec<SegmentInfo>, DumpError> {
        let segs = self.log().segments(session)?;
        Ok(match index {
            Some(i) => vec![
                segs.get(i)
                    .ok_or_else(|| DumpError::NoSegment {
                        session: session.to_owned(),
                        count: segs.len(),
                        index: i,
                    })?
                    .clone(),
            ],
            None => segs,
        })
    }
}
