//! Log-level tooling: verifying or counting every stream, and dumping segments.

use std::path::{Path, PathBuf};

use tacho_store::dump::{SegmentDump, dump_file};
use tacho_store::{StoreError, StoreReport};

use crate::Tacho;
use crate::error::kinds;

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

/// A segment file's path, read and walked.
pub fn dump_segment_file(path: &Path) -> Result<SegmentDump, DumpError> {
    dump_file(path).map_err(|source| DumpError::Read {
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
    /// counts every stream, or one. `progress(done, total)` hears of each session
    /// before it starts.
    pub fn verify_store(
        &self,
        deep: bool,
        only: Option<&str>,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<StoreReport, StoreError> {
        let sessions = match only {
            Some(s) => vec![self.resolve_session(s)?],
            None => self.log().sessions()?,
        };
        let mut report = StoreReport::default();
        for (i, s) in sessions.iter().enumerate() {
            progress(i, sessions.len());
            report.streams.push(self.log().verify_session(s, deep)?);
        }
        progress(sessions.len(), sessions.len());
        Ok(report)
    }

    /// The segment files of a session (resolved), or only the one at `index`.
    pub fn segment_paths(
        &self,
        session: &str,
        index: Option<usize>,
    ) -> Result<Vec<PathBuf>, DumpError> {
        let segs = self.log().segments(session)?;
        Ok(match index {
            Some(i) => vec![
                segs.get(i)
                    .ok_or_else(|| DumpError::NoSegment {
                        session: session.to_owned(),
                        count: segs.len(),
                        index: i,
                    })?
                    .path
                    .clone(),
            ],
            None => segs.into_iter().map(|s| s.path).collect(),
        })
    }
}
