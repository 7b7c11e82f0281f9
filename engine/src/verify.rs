//! Verification and statistics of streams: every checksum, every chain step, every
//! sequence number and every payload, with each finding located.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tacho_log_format::{ChainValue, DamageClass, ScanLimits, Scanner, SegmentEnd, StreamId};
use tacho_schema::EventBody;

use crate::store::{Store, StoreError};

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Not a fault: for example an uncommitted tail that the next writer cuts.
    Warning,
    /// The log is not what was written.
    Error,
}

/// One problem, with its location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub severity: Severity,
    pub session: String,
    pub segment: Option<PathBuf>,
    pub offset: Option<u64>,
    pub message: String,
}

/// The head of a stream: how many events it holds and the chain value after them.
/// Keep it somewhere else to detect a later rewrite of the whole stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub session: String,
    pub next_seq: u64,
    pub chain: ChainValue,
}

/// What verifying (or counting) one stream found.
#[derive(Debug, Clone, Default)]
pub struct StreamReport {
    pub session: String,
    pub next_seq: u64,
    pub chain: ChainValue,
    pub findings: Vec<Finding>,
    pub segments: u64,
    pub sealed_segments: u64,
    pub events: u64,
    pub batches: u64,
    pub bytes: u64,
    /// Event count by kind id.
    pub by_kind: BTreeMap<u16, u64>,
}

impl StreamReport {
    pub fn head(&self) -> Head {
        Head {
            session: self.session.clone(),
            next_seq: self.next_seq,
            chain: self.chain,
        }
    }
}

/// What verifying (or counting) the whole store found.
#[derive(Debug, Clone, Default)]
pub struct StoreReport {
    pub streams: Vec<StreamReport>,
}

impl StoreReport {
    /// BLAKE3 over every stream's id, event count and head, in id order. Equal digests
    /// mean equal stores, event for event; keep it to detect later edits.
    pub fn store_digest(&self) -> ChainValue {
        let mut h = blake3::Hasher::new_derive_key("tacho store digest v1");
        for s in &self.streams {
            h.update(&(s.session.len() as u64).to_le_bytes());
            h.update(s.session.as_bytes());
            h.update(&s.next_seq.to_le_bytes());
            h.update(&s.chain);
        }
        *h.finalize().as_bytes()
    }

    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.streams.iter().flat_map(|s| s.findings.iter())
    }

    /// True when no finding is an error.
    pub fn is_clean(&self) -> bool {
        self.findings().all(|f| f.severity < Severity::Error)
    }
}

/// The chain steps and payloads of one segment, collected during the structural scan
/// and checked afterwards, in parallel.
#[derive(Debug, Default)]
struct ChainChecks {
    batches: Vec<BatchCheck>,
    /// (frame offset, kind, kind version, payload start, payload end)
    frames: Vec<(usize, u16, u16, usize, usize)>,
}

#[derive(Debug)]
struct BatchCheck {
    first_seq: u64,
    prev_chain: ChainValue,
    span: std::ops::Range<usize>,
    chain: ChainValue,
    frames: std::ops::Range<usize>,
}

/// A failed check: where, what, and which batch (for chain steps).
#[derive(Debug)]
struct Bad {
    offset: usize,
    message: String,
    batch: Option<usize>,
}

/// Below this many bytes a segment is checked on the calling thread.
const PARALLEL_VERIFY_BYTES_MIN: usize = 1 << 20;

impl ChainChecks {
    fn push(&mut self, b: &tacho_log_format::Batch<'_, '_>) {
        let start = self.frames.len();
        for f in b.events {
            let p = f.offset + tacho_log_format::FRAME_HEADER_LEN;
            self.frames.push((
                f.offset,
                f.header.kind,
                f.header.kind_version,
                p,
                p + f.payload.len(),
            ));
        }
        self.batches.push(BatchCheck {
            first_seq: b.first_seq,
            prev_chain: b.prev_chain,
            span: b.span_start..b.commit_offset,
            chain: b.chain,
            frames: start..self.frames.len(),
        });
    }

    fn check(&self, bytes: &[u8], range: std::ops::Range<usize>) -> Vec<Bad> {
        let mut bad = Vec::new();
        for i in range {
            let b = &self.batches[i];
            let computed = tacho_log_format::chain_step(&b.prev_chain, &bytes[b.span.clone()]);
            if computed != b.chain {
                let e = tacho_log_format::ScanError::ChainMismatch {
                    offset: b.span.end,
                    stored: b.chain,
                    computed,
                };
                bad.push(Bad {
                    offset: b.span.end,
                    message: e.to_string(),
                    batch: Some(i),
                });
            }
            for &(offset, kind, version, p, q) in &self.frames[b.frames.clone()] {
                if let Err(e) = EventBody::validate(kind, version, &bytes[p..q]) {
                    bad.push(Bad {
                        offset,
                        message: e.to_string(),
                        batch: None,
                    });
                }
            }
        }
        bad
    }

    /// Checks every batch, on up to `threads` threads (0: all cores), each taking a
    /// contiguous run of batches of about the same number of bytes.
    fn run(&self, bytes: &[u8], threads: usize) -> Vec<Bad> {
        let total: usize = self.batches.iter().map(|b| b.span.len()).sum();
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        if threads <= 1 || total < PARALLEL_VERIFY_BYTES_MIN || self.batches.len() < 2 {
            return self.check(bytes, 0..self.batches.len());
        }
        let share = total.div_ceil(threads);
        let mut ranges = Vec::new();
        let (mut start, mut acc) = (0, 0);
        for (i, b) in self.batches.iter().enumerate() {
            acc += b.span.len();
            if acc >= share {
                ranges.push(start..i + 1);
                start = i + 1;
                acc = 0;
            }
        }
        if start < self.batches.len() {
            ranges.push(start..self.batches.len());
        }
        let mut bad: Vec<Bad> = std::thread::scope(|scope| {
            let handles: Vec<_> = ranges
                .into_iter()
                .map(|r| scope.spawn(move || self.check(bytes, r)))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        bad.sort_by_key(|b| b.offset);
        bad
    }
}

/// Lower-case hexadecimal.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Store {
    /// Verifies one session's stream. With `deep`, every chain step is recomputed and
    /// every payload validated; without, only checksums and structure are checked
    /// (what statistics need).
    pub fn verify_session(&self, session: &str, deep: bool) -> Result<StreamReport, StoreError> {
        let segs = self.segment_files(session)?;
        let stream = StreamId::of_name(session);
        let mut r = StreamReport {
            session: session.to_string(),
            ..StreamReport::default()
        };
        let push = |r: &mut StreamReport, sev, seg: &PathBuf, off: Option<u64>, msg: String| {
            r.findings.push(Finding {
                severity: sev,
                session: session.to_string(),
                segment: Some(seg.clone()),
                offset: off,
                message: msg,
            })
        };
        let mut prev_chain: ChainValue = [0; 32];
        let mut expected_seq = 0u64;
        for (i, (name_seq, path)) in segs.iter().enumerate() {
            let last = i + 1 == segs.len();
            let bytes = self
                .vfs
                .read(path, !last)
                .map_err(|e| StoreError::io(path, e))?;
            r.segments += 1;
            r.bytes += bytes.len() as u64;
            let mut scan = Scanner::new(
                &bytes,
                ScanLimits {
                    verify_chain: false,
                },
            );
            if let Some(h) = scan.header() {
                if h.stream != stream {
                    push(
                        &mut r,
                        Severity::Error,
                        path,
                        Some(0),
                        "segment belongs to another stream".into(),
                    );
                }
                if h.first_seq != *name_seq {
                    push(
                        &mut r,
                        Severity::Error,
                        path,
                        Some(0),
                        format!(
                            "header says first seq {}, file name says {name_seq}",
                            h.first_seq
                        ),
                    );
                }
                if h.first_seq != expected_seq {
                    push(
                        &mut r,
                        Severity::Error,
                        path,
                        Some(0),
                        format!(
                            "sequence gap: segment starts at {}, previous segments end at {}",
                            h.first_seq, expected_seq
                        ),
                    );
                }
                if h.segment_index != i as u64 {
                    push(
                        &mut r,
                        Severity::Error,
                        path,
                        Some(0),
                        format!("segment index {} where {i} was expected", h.segment_index),
                    );
                }
                if h.prev_chain != prev_chain {
                    push(
                        &mut r,
                        Severity::Error,
                        path,
                        Some(0),
                        "header does not carry the previous segment's chain value (a segment was removed, replaced or reordered)".into(),
                    );
                }
            }
            let mut checks = ChainChecks::default();
            while let Some(batch) = scan.next_batch() {
                r.batches += 1;
                for frame in batch.events {
                    *r.by_kind.entry(frame.header.kind).or_default() += 1;
                }
                if deep {
                    checks.push(&batch);
                }
            }
            // Chain steps and payloads, on every core: each commit frame stores its
            // chain value, so the steps can be checked independently of each other.
            // The head reported is the prefix verified before the first error.
            let broken = r.findings.iter().any(|f| f.severity == Severity::Error);
            let bad = checks.run(&bytes, self.opts.verify_threads);
            for b in &bad {
                push(
                    &mut r,
                    Severity::Error,
                    path,
                    Some(b.offset as u64),
                    b.message.clone(),
                );
            }
            let first_bad_batch = bad.iter().filter_map(|b| b.batch).min();
            r.events += scan.event_count();
            if !broken {
                match first_bad_batch {
                    Some(i) => {
                        r.next_seq = checks.batches[i].first_seq;
                        r.chain = checks.batches[i].prev_chain;
                    }
                    None => {
                        r.next_seq = scan.next_seq();
                        r.chain = scan.chain();
                    }
                }
            }
            prev_chain = scan.chain();
            expected_seq = scan.next_seq();
            match scan.end() {
                Some(SegmentEnd::Sealed { .. }) => r.sealed_segments += 1,
                Some(SegmentEnd::Open { .. }) if last => {}
                Some(SegmentEnd::Open { len }) => push(
                    &mut r,
                    Severity::Error,
                    path,
                    Some(*len as u64),
                    "segment is not sealed, but a later segment exists".into(),
                ),
                Some(SegmentEnd::Damaged(d)) if last && d.class == DamageClass::Uncommitted => {
                    push(
                        &mut r,
                        Severity::Warning,
                        path,
                        Some(d.valid_len as u64),
                        format!(
                            "{} uncommitted bytes at the tail ({}): a write in progress or a torn write, cut by the next writer",
                            bytes.len() - d.valid_len,
                            d.error
                        ),
                    )
                }
                Some(SegmentEnd::Damaged(d)) => push(
                    &mut r,
                    Severity::Error,
                    path,
                    Some(d.error.offset() as u64),
                    match d.class {
                        DamageClass::Corruption => d.error.to_string(),
                        DamageClass::Uncommitted => {
                            format!("{} in a segment that is not the last one", d.error)
                        }
                    },
                ),
                None => {}
            }
        }
        Ok(r)
    }

    /// Verifies (or counts, without `deep`) every stream of the store.
    pub fn verify_all(&self, deep: bool) -> Result<StoreReport, StoreError> {
        let mut report = StoreReport::default();
        for s in self.sessions()? {
            report.streams.push(self.verify_session(&s, deep)?);
        }
        Ok(report)
    }
}
