//! The engine's integration tests, over the simulated filesystem (fast, and able to
//! crash) and the real one.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tacho_schema::{
    EndReason, EventBody, SessionEnd, SessionStart, ToolCall, ToolResult, ToolStatus,
};
use tacho_store::vfs::{CrashKeep, SimFs, Vfs};
use tacho_store::{Durability, Severity, Store, StoreError, StoreOptions};

const ROOT: &str = "/store";

fn opts(segment_bytes_max: u64) -> StoreOptions {
    StoreOptions {
        segment_bytes_max,
        ..StoreOptions::default()
    }
}

fn sim_store(fs: &SimFs, seg: u64) -> Store {
    Store::open_with(Arc::new(fs.clone()) as Arc<dyn Vfs>, ROOT, opts(seg)).unwrap()
}

fn start() -> EventBody {
    EventBody::SessionStart(SessionStart {
        agent: Some("architect".into()),
        workspace: Some("/work/app".into()),
        ..SessionStart::default()
    })
}

/// A deterministic event of roughly `size` bytes for sequence number `i`.
fn ev(i: u64, size: usize) -> EventBody {
    if i.is_multiple_of(2) {
        EventBody::ToolCall(ToolCall {
            call_id: format!("c{i}"),
            tool: "read".into(),
            target: Some(format!("src/file{i}.rs")),
            input: Some(format!("{{\"n\":{i}}}")),
            agent: None,
        })
    } else {
        EventBody::ToolResult(ToolResult {
            call_id: format!("c{}", i - 1),
            status: if i.is_multiple_of(7) {
                ToolStatus::Error
            } else {
                ToolStatus::Ok
            },
            duration_ms: Some(i),
            error: None,
            output: Some("x".repeat(size)),
            exit_code: None,
        })
    }
}

/// A small xorshift generator: tests stay deterministic without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn read_all(store: &Store, s: &str) -> Result<Vec<(u64, i64, EventBody)>, StoreError> {
    let mut out = Vec::new();
    store.read_session(s, |e| out.push((e.seq, e.event.time_unix_ns, e.event.body)))?;
    Ok(out)
}

/// Writes a session in batches; returns every (time, body) in order.
fn write_session(store: &Store, s: &str, batches: &[usize], size: usize) -> Vec<(i64, EventBody)> {
    let mut w = store.writer(s).unwrap();
    let mut all = Vec::new();
    let mut seq = 0u64;
    for &n in batches {
        let mut batch = Vec::new();
        for _ in 0..n {
            let body = if seq == 0 { start() } else { ev(seq, size) };
            batch.push((1_000 + seq as i64, body));
            seq += 1;
        }
        w.append_batch(&batch, Durability::Sync).unwrap();
        all.extend(batch);
    }
    all
}

#[test]
fn round_trip_across_many_segments() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 4096);
    let written = write_session(
        &store,
        "ses_a",
        &[1, 5, 20, 3, 10, 1, 1, 10, 10, 10, 5, 4, 30, 10],
        300,
    );
    let segs = store.segments("ses_a").unwrap();
    assert!(
        segs.len() >= 5,
        "expected rotation, got {} segments",
        segs.len()
    );
    let read = read_all(&store, "ses_a").unwrap();
    assert_eq!(read.len(), written.len());
    for (i, ((seq, t, body), (wt, wb))) in read.iter().zip(&written).enumerate() {
        assert_eq!(*seq, i as u64);
        assert_eq!((t, body), (wt, wb));
    }
    let report = store.verify_session("ses_a", true).unwrap();
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    assert_eq!(report.events, written.len() as u64);
    assert_eq!(report.segments, segs.len() as u64);
    assert_eq!(report.sealed_segments, segs.len() as u64 - 1);

    // Reading from the middle skips whole segments and yields the same suffix.
    let mut suffix = Vec::new();
    store
        .read_session_from("ses_a", 100, |e| suffix.push(e.seq))
        .unwrap();
    assert_eq!(suffix, (100..written.len() as u64).collect::<Vec<_>>());

    // A reopened writer continues the same chain.
    let mut w = store.writer("ses_a").unwrap();
    assert_eq!(w.next_seq(), written.len() as u64);
    assert_eq!(w.head(), report.chain);
    w.append(9, &ev(121, 10), Durability::Buffered).unwrap();
    w.sync().unwrap();
    drop(w);
    assert!(
        store
            .verify_session("ses_a", true)
            .unwrap()
            .findings
            .is_empty()
    );
}

#[test]
fn session_rules_are_enforced_before_anything_is_written() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    let mut w = store.writer("ses_r").unwrap();
    let err = w.append(1, &ev(1, 5), Durability::Sync).unwrap_err();
    assert!(err.to_string().contains("must be session.start"), "{err}");
    w.append(1, &start(), Durability::Sync).unwrap();
    let err = w
        .append_batch(&[(2, ev(1, 5)), (3, start())], Durability::Sync)
        .unwrap_err();
    assert!(err.to_string().contains("may only be the first"), "{err}");
    w.append(
        4,
        &EventBody::SessionEnd(SessionEnd {
            reason: EndReason::Completed,
            message: None,
        }),
        Durability::Sync,
    )
    .unwrap();
    drop(w);
    assert_eq!(read_all(&store, "ses_r").unwrap().len(), 2);
    assert!(matches!(
        store.writer("../etc"),
        Err(StoreError::BadSessionId(_))
    ));
    assert!(matches!(
        read_all(&store, "ses_none"),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn a_second_writer_of_the_same_session_is_refused_while_the_first_lives() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    let w = store.writer("ses_l").unwrap();
    let err = store.writer("ses_l").unwrap_err();
    assert!(matches!(err, StoreError::Busy { .. }), "{err}");
    let _other = store.writer("ses_other").unwrap();
    drop(w);
    store.writer("ses_l").unwrap();
}

fn last_segment(store: &Store, s: &str) -> PathBuf {
    store.segments(s).unwrap().last().unwrap().path.clone()
}

#[test]
fn truncating_the_last_segment_at_every_offset_repairs_the_torn_tail() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    let written = write_session(&store, "ses_t", &[1, 3, 2, 4], 100);
    let path = last_segment(&store, "ses_t");
    // The file is the data followed by free space (zeros); cut within the data.
    let mut full = fs.file(&path).unwrap();
    let data_len = {
        let mut scan = tacho_log_format::Scanner::new(
            &full,
            tacho_log_format::ScanLimits { verify_chain: true },
        );
        while scan.next_batch().is_some() {}
        scan.valid_len()
    };
    full.truncate(data_len);
    // Committed event counts by the segment length at which each batch ends.
    let mut ends = Vec::new();
    {
        let mut seen = 0;
        let mut scan = tacho_log_format::Scanner::new(
            &full,
            tacho_log_format::ScanLimits { verify_chain: true },
        );
        while let Some(b) = scan.next_batch() {
            seen += b.events.len();
            ends.push((scan.valid_len(), seen));
        }
    }
    let from = ends[0].0; // everything after the first batch
    let lock = Path::new(ROOT).join("locks/ses_t.lock");
    for cut in from..=full.len() {
        fs.set_file(&path, full[..cut].to_vec());
        // What a crash leaves: the batches cut were never acknowledged, so no
        // checkpoint says they were committed (with one, the cut is a loss, refused:
        // `committed_events_removed_from_the_end_are_an_error_and_refuse_writers`).
        if cut == from {
            assert!(
                matches!(store.writer("ses_t"), Err(StoreError::Lost { .. })),
                "cut {cut}"
            );
        }
        fs.set_lock_note(&lock, Vec::new());
        store.index_delete().unwrap();
        let expect = ends
            .iter()
            .rev()
            .find(|(end, _)| *end <= cut)
            .map_or(0, |e| e.1);
        // Readers see the committed prefix without repairing anything.
        assert_eq!(
            read_all(&store, "ses_t").unwrap().len(),
            expect,
            "cut {cut}"
        );
        // A writer repairs the tail and reports it, and appends after it.
        let mut w = store.writer("ses_t").unwrap();
        let torn = cut
            != ends
                .iter()
                .rev()
                .find(|(e, _)| *e <= cut)
                .map_or(0, |e| e.0);
        assert_eq!(
            !w.recovered().is_empty(),
            torn,
            "cut {cut}: {:?}",
            w.recovered()
        );
        assert_eq!(w.next_seq(), expect as u64);
        w.append(5, &ev(expect as u64, 3), Durability::Sync)
            .unwrap();
        drop(w);
        let read = read_all(&store, "ses_t").unwrap();
        assert_eq!(read.len(), expect + 1);
        for (i, (_, t, b)) in read.iter().take(expect).enumerate() {
            assert_eq!((t, b), (&written[i].0, &written[i].1));
        }
        let rep = store.verify_session("ses_t", true).unwrap();
        assert!(rep.findings.is_empty(), "cut {cut}: {:?}", rep.findings);
    }
}

#[test]
fn zeros_after_the_data_are_free_space_and_garbage_is_a_torn_write() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    write_session(&store, "ses_z", &[1, 2], 50);
    let path = last_segment(&store, "ses_z");
    let mut b = fs.file(&path).unwrap();
    let data_len = b.len() - (b.iter().rev().take_while(|&&x| x == 0).count() & !7);
    b.extend(std::iter::repeat_n(0u8, 4096));
    fs.set_file(&path, b.clone());
    let rep = store.verify_session("ses_z", true).unwrap();
    assert!(rep.findings.is_empty(), "{:?}", rep.findings);
    assert!(rep.free_bytes >= 4096);
    let w = store.writer("ses_z").unwrap();
    assert!(w.recovered().is_empty());
    assert_eq!(w.next_seq(), 3);
    drop(w);
    // Half a frame in the free space is a torn write: reported, then cut.
    b[data_len..data_len + 16].copy_from_slice(&[0x55; 16]);
    fs.set_file(&path, b);
    let rep = store.verify_session("ses_z", true).unwrap();
    assert_eq!(rep.findings.len(), 1);
    assert_eq!(rep.findings[0].severity, Severity::Warning);
    let w = store.writer("ses_z").unwrap();
    assert_eq!(w.recovered().len(), 1);
    assert_eq!(w.next_seq(), 3);
}

#[test]
fn free_space_stays_proportional_and_is_given_back_when_a_session_ends() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    let mut w = store.writer("ses_free").unwrap();
    w.append(1, &start(), Durability::Sync).unwrap();
    let path = last_segment(&store, "ses_free");
    let len = |fs: &SimFs| fs.file(&path).unwrap().len() as u64;
    assert!(
        len(&fs) <= 16 * 1024 + 1024,
        "a small session keeps at most ~16 KiB free"
    );
    for i in 1..200 {
        w.append(i, &ev(i as u64, 500), Durability::Buffered)
            .unwrap();
    }
    let rep = store.verify_session("ses_free", true).unwrap();
    let data = rep.bytes - rep.free_bytes;
    assert!(
        rep.free_bytes <= data.max(16 * 1024),
        "free {} for {} bytes of data",
        rep.free_bytes,
        data
    );
    w.append(
        999,
        &EventBody::SessionEnd(SessionEnd {
            reason: EndReason::Completed,
            message: None,
        }),
        Durability::Sync,
    )
    .unwrap();
    let rep = store.verify_session("ses_free", true).unwrap();
    assert_eq!(rep.free_bytes, 0);
    assert!(rep.findings.is_empty());
}

#[test]
fn every_bit_flip_is_a_located_hard_error_and_never_a_panic() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 700);
    write_session(&store, "ses_b", &[1, 2, 3, 2, 4, 2, 3], 120);
    let segs = store.segments("ses_b").unwrap();
    assert!(segs.len() >= 3);
    let originals: Vec<(PathBuf, Vec<u8>)> = segs
        .iter()
        .map(|s| (s.path.clone(), fs.file(&s.path).unwrap()))
        .collect();
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let mut checked = 0;
    for (si, (path, orig)) in originals.iter().enumerate() {
        let last = si + 1 == originals.len();
        // Every bit of the segment header and first frames, then a random sample.
        let mut bits: Vec<usize> = (0..(orig.len() * 8).min(400 * 8)).collect();
        bits.extend((0..300).map(|_| rng.below(orig.len() as u64 * 8) as usize));
        for bit in bits {
            let mut b = orig.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            fs.set_file(path, b);
            let rep = store.verify_session("ses_b", true).unwrap();
            let errors: Vec<_> = rep
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Error)
                .collect();
            // The one place a flip is not corruption: the final commit frame of the last
            // segment, or the header of a last segment that holds no batch yet, which
            // nothing committed follows (indistinguishable from a torn write).
            let in_final_frame = last && (bit / 8 >= orig.len() - 88 || orig.len() == 128);
            if in_final_frame {
                assert!(
                    !rep.findings.is_empty(),
                    "{path:?} bit {bit}: flip not noticed"
                );
            } else {
                assert!(!errors.is_empty(), "{path:?} bit {bit}: flip not detected");
                let f = errors[0];
                assert_eq!(f.segment.as_deref(), Some(path.as_path()));
                assert!(f.offset.is_some());
                // Reading fails with a located error, never a panic.
                let err = read_all(&store, "ses_b");
                if let Err(e) = &err {
                    assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
                }
                // A writer refuses a damaged stream, wherever the damage is (and so
                // never truncates committed data).
                match store.writer("ses_b") {
                    Ok(w) => panic!(
                        "{path:?} bit {bit}: a writer opened a damaged stream ({:?})",
                        w.recovered()
                    ),
                    Err(e) => assert!(matches!(e, StoreError::Corrupt { .. }), "{e}"),
                }
            }
            checked += 1;
        }
        fs.set_file(path, orig.clone());
    }
    assert!(checked > 3000);
}

/// The crash model: at the N-th sync, freeze what is durable; the crash then keeps
/// the durable state plus some prefix of the unsynced writes (see SPEC.md
/// §"What we assume of the disk"). Every batch whose Sync append returned before that
/// sync must survive, the store must open, and verification must be clean.
#[test]
fn crash_at_every_sync_keeps_every_acknowledged_batch() {
    // One workload, to count the syncs it performs.
    let total = {
        let fs = SimFs::new();
        run_crash_workload(&fs, None);
        fs.sync_count()
    };
    assert!(total >= 30, "workload too small: {total} syncs");
    for n in 1..=total {
        let fs = SimFs::new();
        fs.freeze_at_sync(n);
        let acked = run_crash_workload(&fs, Some(n));
        let image = fs.frozen().expect("freeze point reached");
        for keep in [
            CrashKeep::DurableOnly,
            CrashKeep::Prefix {
                fraction: 0.5,
                zero_fill: false,
            },
            CrashKeep::Prefix {
                fraction: 0.3,
                zero_fill: true,
            },
            CrashKeep::Prefix {
                fraction: 1.0,
                zero_fill: false,
            },
        ] {
            let crashed = image.materialize(keep);
            let store = sim_store(&crashed, 1500);
            // The session index, between a stream's append and its own update: an
            // entry is exact, or marked dirty (for a reader to heal from the stream).
            let index = store.index().unwrap();
            for (s, acked_count, written) in &acked {
                if !store.has_session(s) {
                    assert_eq!(*acked_count, 0, "sync {n} {keep:?}: {s} lost");
                    continue;
                }
                let end = store.read_session(s, |_| {}).unwrap();
                let entry = index
                    .get(s)
                    .unwrap_or_else(|| panic!("sync {n} {keep:?}: {s} has no index entry"));
                assert!(
                    entry.dirty || (entry.next_seq, entry.head) == (end.next_seq, end.head),
                    "sync {n} {keep:?}: index says {s} ends at {} (clean), the stream at {}",
                    entry.next_seq,
                    end.next_seq
                );
                let w = store
                    .writer(s)
                    .unwrap_or_else(|e| panic!("sync {n} {keep:?}: {s} does not open: {e}"));
                drop(w);
                let read = read_all(&store, s).unwrap();
                assert!(
                    read.len() >= *acked_count,
                    "sync {n} {keep:?}: {s} has {} events, {acked_count} were acknowledged",
                    read.len()
                );
                for (i, (_, t, b)) in read.iter().enumerate() {
                    assert_eq!(
                        (t, b),
                        (&written[i].0, &written[i].1),
                        "sync {n}: {s} event {i}"
                    );
                }
                let rep = store.verify_session(s, true).unwrap();
                assert!(
                    rep.findings.is_empty(),
                    "sync {n} {keep:?}: {:?}",
                    rep.findings
                );
            }
        }
    }
}

type Acked = Vec<(String, usize, Vec<(i64, EventBody)>)>;

/// Two sessions, mixed batch sizes and durability, several rotations. Returns, per
/// session, how many events were acknowledged as durable at or before sync `freeze`.
fn run_crash_workload(fs: &SimFs, freeze: Option<u64>) -> Acked {
    let store = sim_store(fs, 1500);
    let mut out = Vec::new();
    for (si, s) in ["ses_c1", "ses_c2"].iter().enumerate() {
        let mut w = store.writer(s).unwrap();
        let mut written = Vec::new();
        let mut acked = 0usize;
        let mut seq = 0u64;
        for (bi, n) in [1usize, 3, 1, 4, 2, 5, 1, 2, 3, 2, 2, 1, 4, 1, 2]
            .iter()
            .enumerate()
        {
            let mut batch = Vec::new();
            for _ in 0..*n {
                let body = if seq == 0 {
                    start()
                } else {
                    ev(seq, 40 + 30 * si)
                };
                batch.push((seq as i64, body));
                seq += 1;
            }
            let d = if bi % 3 == 2 {
                Durability::Buffered
            } else {
                Durability::Sync
            };
            if bi % 4 == 1 {
                // Staged in pieces, then committed: the same batch, written as it came.
                let (a, b) = batch.split_at(batch.len() / 2);
                for piece in [a, b] {
                    if !piece.is_empty() {
                        w.stage(piece).unwrap();
                    }
                }
                w.commit(d).unwrap();
            } else {
                w.append_batch(&batch, d).unwrap();
            }
            written.extend(batch);
            if d == Durability::Sync && freeze.is_none_or(|f| fs.sync_count() <= f) {
                acked = written.len();
            }
        }
        if si == 1 {
            // Ending a session gives its free space back: crash through that too.
            let end = (
                seq as i64,
                EventBody::SessionEnd(SessionEnd {
                    reason: EndReason::Completed,
                    message: None,
                }),
            );
            w.append_batch(std::slice::from_ref(&end), Durability::Sync)
                .unwrap();
            written.push(end);
            if freeze.is_none_or(|f| fs.sync_count() <= f) {
                acked = written.len();
            }
        }
        out.push((s.to_string(), acked, written));
    }
    out
}

/// A batch staged in pieces is the batch appended at once, byte for byte; nothing
/// staged is seen before its commit; a staged batch never committed is taken back
/// when its writer goes, and cut by the next writer after a crash.
#[test]
fn a_batch_staged_in_pieces_is_the_batch_appended_at_once() {
    let batch: Vec<(i64, EventBody)> = std::iter::once((0, start()))
        .chain((1..40).map(|i| (i as i64, ev(i, 90))))
        .chain(std::iter::once((
            40,
            EventBody::SessionEnd(SessionEnd {
                reason: EndReason::Completed,
                message: None,
            }),
        )))
        .collect();
    let (one, pieces) = (SimFs::new(), SimFs::new());
    let a = sim_store(&one, 1 << 20);
    a.writer("ses_p")
        .unwrap()
        .append_batch(&batch, Durability::Sync)
        .unwrap();
    let b = sim_store(&pieces, 1 << 20);
    let mut w = b.writer("ses_p").unwrap();
    for piece in batch.chunks(7) {
        w.stage(piece).unwrap();
        assert!(
            !b.has_session("ses_p") || read_all(&b, "ses_p").unwrap().is_empty(),
            "staged events are not visible"
        );
    }
    // Rules hold across pieces: nothing after session.end, no second start.
    assert!(w.stage(&[(41, start())]).is_err());
    assert!(
        !w.has_staged(),
        "a refused piece takes back the whole batch"
    );
    for piece in batch.chunks(7) {
        w.stage(piece).unwrap();
    }
    let r = w.commit(Durability::Sync).unwrap();
    assert_eq!((r.first_seq, r.last_seq), (0, 40));
    drop(w);
    let seg = |fs: &SimFs, st: &Store| fs.read(&last_segment(st, "ses_p"), false).unwrap().to_vec();
    assert_eq!(seg(&one, &a), seg(&pieces, &b));
    assert_eq!(read_all(&b, "ses_p").unwrap().len(), 41);

    // Staged and dropped: the stream is as it was.
    let fs = SimFs::new();
    let st = sim_store(&fs, 1 << 20);
    let mut w = st.writer("ses_q").unwrap();
    w.append_batch(&batch[..5], Durability::Sync).unwrap();
    let before = fs
        .read(&last_segment(&st, "ses_q"), false)
        .unwrap()
        .to_vec();
    w.stage(&batch[5..20]).unwrap();
    drop(w);
    assert_eq!(
        fs.read(&last_segment(&st, "ses_q"), false)
            .unwrap()
            .to_vec(),
        before
    );

    // Staged, then a crash (the staged pieces reached the disk, no commit did): the
    // next writer cuts them and continues after the last committed batch. (Pieces are
    // written once 256 KiB of them wait.)
    let large: Vec<(i64, EventBody)> = (5..20).map(|i| (i as i64, ev(i, 200_000))).collect();
    let mut w = st.writer("ses_q").unwrap();
    tacho_store::mark_written(&mut [&mut w]).unwrap();
    fs.freeze_at_sync(fs.sync_count() + 1);
    w.stage(&large).unwrap();
    w.sync().unwrap();
    let crashed = fs.frozen().expect("frozen").materialize(CrashKeep::Prefix {
        fraction: 1.0,
        zero_fill: false,
    });
    std::mem::forget(w);
    let st = sim_store(&crashed, 1 << 20);
    let w = st.writer("ses_q").unwrap();
    assert_eq!(w.next_seq(), 5);
    assert_eq!(w.recovered().len(), 1, "the staged tail is cut");
    drop(w);
    assert_eq!(read_all(&st, "ses_q").unwrap().len(), 5);
    assert!(
        st.verify_session("ses_q", true)
            .unwrap()
            .findings
            .is_empty()
    );
}

#[test]
fn a_failed_write_leaves_nothing_half_written() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    let mut w = store.writer("ses_f").unwrap();
    w.append(1, &start(), Durability::Sync).unwrap();
    fs.fail_writes_after(100);
    let batch: Vec<_> = (1..10).map(|i| (i as i64, ev(i, 64))).collect();
    assert!(matches!(
        w.append_batch(&batch, Durability::Sync),
        Err(StoreError::Io { .. })
    ));
    drop(w);
    fs.fail_writes_after(u64::MAX);
    assert_eq!(read_all(&store, "ses_f").unwrap().len(), 1);
    let rep = store.verify_session("ses_f", true).unwrap();
    assert!(rep.findings.is_empty(), "{:?}", rep.findings);
}

#[test]
fn works_on_the_real_filesystem_with_memory_maps() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(8192)).unwrap();
    let written = write_session(&store, "Ses_Real", &[1, 10, 30, 30, 5, 5, 5, 5], 200);
    assert!(store.segments("Ses_Real").unwrap().len() > 2);
    let read = read_all(&store, "Ses_Real").unwrap();
    assert_eq!(read.len(), written.len());
    assert_eq!(store.sessions().unwrap(), vec!["Ses_Real".to_string()]);
    let all = store.verify_all(true).unwrap();
    assert!(all.is_clean());
    assert_eq!(all.streams[0].events, written.len() as u64);
    // Directory names keep case apart on case-insensitive filesystems.
    assert!(Path::new(dir.path()).join("streams/^ses_^real").is_dir());
}

#[test]
fn parallel_verification_finds_the_same_edit_as_one_thread() {
    let fs = SimFs::new();
    let seg = 256 << 10;
    let store = sim_store(&fs, seg);
    write_session(
        &store,
        "ses_p",
        &[
            1, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20, 20,
        ],
        8000,
    );
    let segs = store.segments("ses_p").unwrap();
    assert!(segs.len() >= 4, "{} segments", segs.len());
    // Edit one payload byte of an event in a middle segment, and fix up its frame CRC.
    let path = segs[segs.len() / 2].path.clone();
    let mut b = fs.file(&path).unwrap();
    let mut scan =
        tacho_log_format::Scanner::new(&b, tacho_log_format::ScanLimits { verify_chain: true });
    let mut target = None;
    let mut before = (0, [0u8; 32]);
    let mut i = 0;
    while let Some(batch) = scan.next_batch() {
        if i == 1 {
            target = Some(batch.events[1].offset);
            break;
        }
        before = (scan.next_seq(), scan.chain());
        i += 1;
    }
    let off = target.unwrap();
    b[off + 40] ^= 0x01;
    let len = u32::from_le_bytes(b[off..off + 4].try_into().unwrap()) as usize;
    let mut h = crc32fast::Hasher::new();
    h.update(&b[off..off + 4]);
    h.update(&b[off + 8..off + len]);
    b[off + 4..off + 8].copy_from_slice(&h.finalize().to_le_bytes());
    fs.set_file(&path, b);
    let mut results = Vec::new();
    for threads in [1, 2] {
        let opts = StoreOptions {
            segment_bytes_max: seg,
            verify_threads: threads,
            ..StoreOptions::default()
        };
        let store = Store::open_with(Arc::new(fs.clone()) as Arc<dyn Vfs>, ROOT, opts).unwrap();
        let rep = store.verify_session("ses_p", true).unwrap();
        let errors: Vec<_> = rep
            .findings
            .iter()
            .map(|f| (f.segment.clone(), f.offset, f.message.clone()))
            .collect();
        assert_eq!(errors.len(), 1, "{threads} threads: {errors:?}");
        assert_eq!(errors[0].0.as_deref(), Some(path.as_path()));
        assert!(errors[0].2.contains("hash chain broken"), "{errors:?}");
        assert_eq!(
            (rep.next_seq, rep.chain),
            before,
            "the verified prefix ends before the edited batch"
        );
        results.push(errors);
    }
    assert_eq!(results[0], results[1]);
}

#[test]
fn sessions_resolve_by_unique_prefix_with_candidates_and_suggestions() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    for s in ["ses_01abc", "ses_01abd", "ses_02xyz"] {
        store
            .writer(s)
            .unwrap()
            .append(1, &start(), Durability::Sync)
            .unwrap();
    }
    assert_eq!(store.resolve_session("ses_02").unwrap(), "ses_02xyz");
    assert_eq!(store.resolve_session("ses_01abc").unwrap(), "ses_01abc");
    match store.resolve_session("ses_01ab") {
        Err(StoreError::AmbiguousSession { candidates, .. }) => {
            assert_eq!(
                candidates,
                vec!["ses_01abc".to_string(), "ses_01abd".to_string()]
            )
        }
        other => panic!("{other:?}"),
    }
    match store.resolve_session("ses_02xyx") {
        Err(e @ StoreError::UnknownSession { .. }) => {
            assert!(e.to_string().contains("did you mean ses_02xyz?"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.resolve_session("zzzzzzzzzzzzzzzzzz"),
        Err(StoreError::UnknownSession { nearest: None, .. })
    ));
}

#[test]
fn replay_packages_round_trip_and_reveal_any_edit() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1500);
    let written = write_session(&store, "ses_pkg", &[1, 4, 4, 4, 4, 4], 100);
    assert!(store.segments("ses_pkg").unwrap().len() > 1);
    let pkg = tacho_store::export_package(&store, "ses_pkg").unwrap();
    let (copy, session) = tacho_store::open_package(&pkg).unwrap();
    assert_eq!(session, "ses_pkg");
    let rep = copy.verify_session(&session, true).unwrap();
    assert!(rep.findings.is_empty(), "{:?}", rep.findings);
    assert_eq!(
        rep.chain,
        store.verify_session("ses_pkg", true).unwrap().chain
    );
    let read = read_all(&copy, &session).unwrap();
    assert_eq!(read.len(), written.len());
    // Any changed byte is caught by the package digest.
    for at in [0, 20, pkg.len() / 2, pkg.len() - 1] {
        let mut bad = pkg.clone();
        bad[at] ^= 1;
        assert!(tacho_store::open_package(&bad).is_err(), "byte {at}");
    }
    assert!(matches!(
        tacho_store::open_package(&pkg[..pkg.len() - 40]),
        Err(tacho_store::PackageError::DigestMismatch)
    ));
    // A forger who recomputes the package digest is still caught by the chain.
    let mut forged = pkg.clone();
    let body = forged.len() - 32;
    let at = forged[..body]
        .windows(9)
        .position(|w| w == b"architect")
        .unwrap();
    forged[at] = b'A';
    let d = blake3::Hasher::new_derive_key("tacho replay package v1")
        .update(&forged[..body])
        .finalize();
    forged[body..].copy_from_slice(d.as_bytes());
    let (copy, session) = tacho_store::open_package(&forged).unwrap();
    let rep = copy.verify_session(&session, true).unwrap();
    assert!(
        rep.findings.iter().any(|f| f.severity == Severity::Error),
        "forgery not detected"
    );
}

/// A group of batches across sessions is recorded whole or not at all: for every point
/// at which the disk fills, the streams afterwards hold either every batch or exactly
/// what they held before — never an empty stream, never one session without the other.
#[test]
fn a_group_across_sessions_is_all_or_nothing_when_the_disk_fills() {
    use tacho_store::append_group;
    let mut outcomes = (0, 0);
    // Byte budgets from "nothing fits" to "everything fits" (finely where the group's
    // few kilobytes go), with the segment size small enough that some budgets fail
    // while a batch seals its segment.
    for budget in (0..8_000).step_by(41).chain((8_000..70_000).step_by(997)) {
        let fs = SimFs::new();
        let store = sim_store(&fs, 1_200);
        let before_a = write_session(&store, "ses_a", &[1, 3], 60);
        let mut wa = store.writer("ses_a").unwrap();
        let mut wb = store.writer("ses_b").unwrap();
        let mut wc = store.writer("ses_c").unwrap();
        let batch_a: Vec<(i64, EventBody)> =
            (4..10).map(|i| (5_000 + i, ev(i as u64, 90))).collect();
        let batch_b = vec![(5_000, start()), (5_001, ev(1, 40))];
        let batch_c = vec![(6_000, start())];
        fs.fail_writes_after(budget);
        let result = append_group(
            &mut [
                (&mut wa, batch_a.as_slice()),
                (&mut wb, batch_b.as_slice()),
                (&mut wc, batch_c.as_slice()),
            ],
            Durability::Sync,
        );
        fs.fail_writes_after(u64::MAX);
        drop((wa, wb, wc));
        let a: Vec<_> = read_all(&store, "ses_a")
            .unwrap()
            .into_iter()
            .map(|(_, t, b)| (t, b))
            .collect();
        let sessions = store.sessions().unwrap();
        match result {
            Ok(receipts) => {
                outcomes.0 += 1;
                assert_eq!(receipts.len(), 3);
                assert_eq!(a.len(), before_a.len() + batch_a.len(), "budget {budget}");
                assert_eq!(read_all(&store, "ses_b").unwrap().len(), 2);
                assert_eq!(read_all(&store, "ses_c").unwrap().len(), 1);
            }
            Err(e) => {
                outcomes.1 += 1;
                assert!(matches!(e, StoreError::Io { .. }), "budget {budget}: {e}");
                assert_eq!(a, before_a, "budget {budget}: session a changed");
                assert_eq!(sessions, vec!["ses_a".to_string()], "budget {budget}");
            }
        }
        // Whatever happened, the store verifies clean and takes the next append.
        let rep = store.verify_all(true).unwrap();
        assert!(
            rep.is_clean(),
            "budget {budget}: {:?}",
            rep.findings().collect::<Vec<_>>()
        );
        store
            .writer("ses_a")
            .unwrap()
            .append(9_000, &ev(20, 10), Durability::Sync)
            .unwrap();
    }
    assert!(outcomes.0 > 0 && outcomes.1 > 10, "{outcomes:?}");
}

/// A writer takes up from the checkpoint mark its predecessor left — scanning only
/// what follows it — and gets exactly the state a full scan gives; a mark that is torn,
/// stale or vouches for other bytes is ignored (a full scan), and damage before the mark
/// is still refused.
#[test]
fn the_checkpoint_mark_is_used_only_for_the_bytes_it_vouches_for() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    let written = write_session(&store, "ses_m", &[1, 3, 2, 5], 50);
    let original = fs.lock_note(Path::new(ROOT).join("locks/ses_m.lock").as_path());
    assert!(!original.is_empty(), "the writer left its checkpoint");
    let mark = Path::new(ROOT).join("locks/ses_m.lock");
    // Taken up from the mark: the next append continues the chain exactly.
    let mut w = store.writer("ses_m").unwrap();
    assert!(w.resumed_from_mark());
    assert_eq!(w.next_seq(), written.len() as u64);
    assert!(w.ended() == Some(false));
    w.append(9_000, &ev(99, 10), Durability::Sync).unwrap();
    drop(w);
    assert!(store.verify_all(true).unwrap().is_clean());
    assert_eq!(read_all(&store, "ses_m").unwrap().len(), written.len() + 1);
    // A stale mark (from before the last batch) still vouches for a true prefix.
    fs.set_lock_note(&mark, original.clone());
    let w = store.writer("ses_m").unwrap();
    assert!(w.resumed_from_mark());
    assert_eq!(
        w.next_seq(),
        written.len() as u64 + 1,
        "the batch after the mark is scanned"
    );
    drop(w);
    // A torn mark: a full scan, same state.
    let mut torn = original.clone();
    torn[20] ^= 0x40;
    fs.set_lock_note(&mark, torn);
    let w = store.writer("ses_m").unwrap();
    assert!(!w.resumed_from_mark());
    assert_eq!(w.next_seq(), written.len() as u64 + 1);
    drop(w);
    // Damage before the mark: the CRC no longer matches, and the full scan refuses.
    let seg = last_segment(&store, "ses_m");
    let mut bytes = fs.file(&seg).unwrap();
    bytes[200] ^= 1;
    fs.set_file(&seg, bytes);
    assert!(matches!(
        store.writer("ses_m"),
        Err(StoreError::Corrupt { .. })
    ));
}

/// The segment lengths at which each committed batch of a segment's bytes ends.
fn batch_ends(bytes: &[u8]) -> Vec<usize> {
    let mut scan =
        tacho_log_format::Scanner::new(bytes, tacho_log_format::ScanLimits { verify_chain: true });
    let mut ends = Vec::new();
    while scan.next_batch().is_some() {
        ends.push(scan.valid_len());
    }
    ends
}

/// Every file of a simulated store and its bytes.
fn all_files(fs: &SimFs, dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for name in fs.list_dir(dir).unwrap_or_default() {
        let p = dir.join(name);
        match fs.file(&p) {
            Some(b) => out.push((p, b)),
            None => out.extend(all_files(fs, &p)),
        }
    }
    out
}

/// Committed events removed from the end of a stream — its last segment deleted, its
/// committed tail cut (inside a batch or at a batch's end) or zeroed, the whole stream
/// directory deleted — are an error of verification naming what is missing, and no
/// writer appends to the stream or repairs it: the files stay as they are. (A torn
/// tail after the committed end is repaired as before, see the tests above.)
#[test]
fn committed_events_removed_from_the_end_are_an_error_and_refuse_writers() {
    type Damage = fn(&SimFs, &Path);
    let cases: [(&str, Damage); 5] = [
        ("the last segment removed", |fs, seg| {
            fs.remove_file(seg).unwrap();
        }),
        ("the committed tail cut inside its last batch", |fs, seg| {
            let b = fs.file(seg).unwrap();
            let ends = batch_ends(&b);
            let cut = ends[ends.len() - 2] + 40;
            fs.set_file(seg, b[..cut].to_vec());
        }),
        ("the committed tail cut after a batch", |fs, seg| {
            let b = fs.file(seg).unwrap();
            let ends = batch_ends(&b);
            fs.set_file(seg, b[..ends[ends.len() - 2]].to_vec());
        }),
        ("the committed tail zeroed", |fs, seg| {
            let mut b = fs.file(seg).unwrap();
            let ends = batch_ends(&b);
            let from = ends[ends.len() - 2];
            b[from..].fill(0);
            fs.set_file(seg, b);
        }),
        ("the stream directory removed", |fs, seg| {
            let dir = seg.parent().unwrap();
            for name in fs.list_dir(dir).unwrap() {
                fs.remove_file(&dir.join(name)).unwrap();
            }
            fs.remove_dir(dir).unwrap();
        }),
    ];
    for (what, damage) in cases {
        let fs = SimFs::new();
        let store = sim_store(&fs, 1500);
        let written = write_session(&store, "ses_l", &[1, 3, 2, 4, 2, 3, 1, 2, 4, 3, 1, 1], 60);
        write_session(&store, "ses_ok", &[1, 2], 20);
        let segs = store.segments("ses_l").unwrap();
        assert!(segs.len() >= 3, "{segs:?}");
        let seg = segs.last().unwrap().path.clone();
        assert!(batch_ends(&fs.file(&seg).unwrap()).len() >= 2);
        damage(&fs, &seg);
        let before = all_files(&fs, Path::new(ROOT));
        // Verification: an error naming what is missing, not a note.
        let report = store.verify_all(true).unwrap();
        assert!(
            !report.is_clean(),
            "{what}: {:?}",
            report.findings().collect::<Vec<_>>()
        );
        let lost: Vec<_> = report
            .findings()
            .filter(|f| f.severity == Severity::Error && f.session == "ses_l")
            .collect();
        assert!(
            lost.iter()
                .any(|f| f.message.contains(&format!("{}", written.len()))),
            "{what}: {lost:?}"
        );
        assert!(
            report
                .findings()
                .all(|f| f.session == "ses_l" || f.severity < Severity::Error),
            "{what}: {:?}",
            report.findings().collect::<Vec<_>>()
        );
        // No writer appends to it, nor repairs it.
        let w = store.writer("ses_l");
        assert!(
            w.is_err(),
            "{what}: a writer opened the stream short of its committed end"
        );
        let e = w.err().unwrap().to_string();
        assert!(
            e.contains("ses_l") && e.contains(&format!("{}", written.len())),
            "{what}: {e}"
        );
        drop(store.writer("ses_ok").unwrap());
        assert_eq!(
            all_files(&fs, Path::new(ROOT))
                .iter()
                .filter(|(p, _)| p.starts_with(Path::new(ROOT).join("streams")))
                .collect::<Vec<_>>(),
            before
                .iter()
                .filter(|(p, _)| p.starts_with(Path::new(ROOT).join("streams")))
                .collect::<Vec<_>>(),
            "{what}: the stream was changed"
        );
        // With no checkpoint (a lock file removed or new), the session index's head
        // vouches for the events: the writer still refuses.
        if what != "the stream directory removed" {
            fs.set_lock_note(&Path::new(ROOT).join("locks/ses_l.lock"), Vec::new());
            let e = store.writer("ses_l").err().map(|e| e.to_string());
            assert!(
                e.as_deref().is_some_and(|e| e.contains("session index")),
                "{what}, without a checkpoint: {e:?}"
            );
        }
    }
}

/// Sixteen writers append to their sessions on the real filesystem (small segments:
/// many are created) while three readers verify and read every stream in a loop: a
/// batch being written is at most an uncommitted tail to a reader, never damage, and a
/// segment being created adds nothing. (A reader copying the open segment can see
/// bytes of a batch still zero — the free space it is written into — and later ones,
/// the commit frame among them, already written: "zeros where a frame should start,
/// followed by a commit". Read again, the bytes have changed. That interleaving is
/// rare here: `a_batch_read_while_it_is_written_is_read_again_not_reported_as_damage`
/// builds it.) Bounded to a few seconds and about 70 MB; `TACHO_STRESS_BATCHES` (per
/// writer, default 300) runs it longer.
#[test]
fn sixteen_writers_appending_while_readers_verify() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const WRITERS: usize = 16;
    let batches: u64 = std::env::var("TACHO_STRESS_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts(64 << 10)).unwrap();
    let sessions: Vec<String> = (0..WRITERS).map(|w| format!("ses_s{w:02}")).collect();
    for s in &sessions {
        write_session(&store, s, &[1], 10);
    }
    let done = Arc::new(AtomicBool::new(false));
    let passes = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (store, sessions) = (store.clone(), sessions.clone());
            let (done, passes) = (done.clone(), passes.clone());
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                let mut ends = vec![0u64; sessions.len()];
                while !done.load(Ordering::Relaxed) {
                    for (s, end) in sessions.iter().zip(ends.iter_mut()) {
                        if r == 0 {
                            // (Checksums and structure: fast enough to go round often.)
                            let rep = store.verify_session(s, false).unwrap();
                            failures.extend(
                                rep.findings
                                    .into_iter()
                                    .filter(|f| f.severity == Severity::Error)
                                    .map(|f| f.message),
                            );
                        } else {
                            // From the end read last: mostly the open segment.
                            match store.read_session_from(s, *end, |_| {}) {
                                Ok(e) => *end = e.next_seq,
                                Err(e) => failures.push(e.to_string()),
                            }
                        }
                    }
                    passes.fetch_add(1, Ordering::Relaxed);
                }
                failures
            })
        })
        .collect();
    let writers: Vec<_> = sessions
        .iter()
        .enumerate()
        .map(|(wi, s)| {
            let (store, s) = (store.clone(), s.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (wi as u64 + 1));
                let mut w = store.writer(&s).unwrap();
                let mut seq = 1u64;
                for b in 0..batches {
                    // Batches of a few bytes to tens of pages, written into the free
                    // space ahead of the data; most not synced, so that many writes
                    // race the readers.
                    let n = 1 + rng.below(6);
                    let batch: Vec<(i64, EventBody)> = (0..n)
                        .map(|i| {
                            let size = 100 + rng.below(8_000) as usize;
                            ((seq + i) as i64, ev(seq + i, size))
                        })
                        .collect();
                    seq += n;
                    let d = if b % 8 == 7 {
                        Durability::Sync
                    } else {
                        Durability::Buffered
                    };
                    w.append_batch(&batch, d).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let failures: Vec<String> = readers
        .into_iter()
        .flat_map(|r| r.join().unwrap())
        .collect();
    eprintln!(
        "{} reader passes over {WRITERS} streams, {} failures",
        passes.load(Ordering::Relaxed),
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:?}");
    assert!(store.verify_all(true).unwrap().is_clean());
}

/// A reader copying the open segment while a batch is written into its free space can
/// see the batch's first bytes still zero and later ones — its commit frame among them
/// — already written (a reader takes no lock). Verification and reads take that for
/// what it is, a write in progress, and read the segment again: the batch is there,
/// nothing is reported. Damage that is still there when read again is an error as
/// before.
#[test]
fn a_batch_read_while_it_is_written_is_read_again_not_reported_as_damage() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    let mut written = write_session(&store, "ses_r", &[1, 3, 2], 100);
    // The last batch, and the writer's checkpoint as it was while it was written.
    let lock = Path::new(ROOT).join("locks/ses_r.lock");
    let checkpoint = fs.lock_note(&lock);
    let batch: Vec<(i64, EventBody)> = (6..10).map(|i| (1_000 + i, ev(i as u64, 100))).collect();
    let mut w = store.writer("ses_r").unwrap();
    w.append_batch(&batch, Durability::Sync).unwrap();
    drop(w);
    written.extend(batch);
    fs.set_lock_note(&lock, checkpoint);
    let n = written.len() as u64;
    let seg = last_segment(&store, "ses_r");
    let ends = batch_ends(&fs.file(&seg).unwrap());
    // The last batch's first frame header, or its first frames, still zeros; its
    // commit frame there.
    let from = ends[ends.len() - 2];
    for torn in [from..from + 32, from..from + 320] {
        fs.tear_next_read(&seg, torn.clone());
        let rep = store.verify_session("ses_r", true).unwrap();
        assert!(rep.findings.is_empty(), "{torn:?}: {:?}", rep.findings);
        assert_eq!(rep.next_seq, n);
        fs.tear_next_read(&seg, torn.clone());
        let mut seen = 0;
        let end = store
            .read_session_views("ses_r", 0, |_, _, _| seen += 1)
            .unwrap();
        assert_eq!((seen, end.next_seq), (n, n), "{torn:?}");
        fs.tear_next_read(&seg, torn.clone());
        assert_eq!(read_all(&store, "ses_r").unwrap().len(), written.len());
        fs.tear_next_read(&seg, torn.clone());
        let mut visited = 0;
        let rep = store
            .verify_session_visiting("ses_r", &mut |_, _, _| visited += 1)
            .unwrap();
        assert!(rep.findings.is_empty(), "{torn:?}: {:?}", rep.findings);
        assert_eq!(visited, n, "every event heard once");
    }
    // The same zeros for good: damage with committed data after it.
    let mut b = fs.file(&seg).unwrap();
    b[from..from + 32].fill(0);
    fs.set_file(&seg, b);
    let rep = store.verify_session("ses_r", true).unwrap();
    assert!(
        rep.findings
            .iter()
            .any(|f| f.severity == Severity::Error && f.message.contains("zero-filled")),
        "{:?}",
        rep.findings
    );
    assert!(matches!(
        read_all(&store, "ses_r"),
        Err(StoreError::Corrupt { .. })
    ));
}

/// A segment a writer is creating (its file there, its header and first batch not
/// written yet, or only in part) adds nothing to what a reader sees: the stream ends
/// where the sealed segment before it does, with that head — not at event 0, which
/// would also read as a stream short of its checkpoint.
#[test]
fn a_segment_being_created_leaves_the_head_where_it_was() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 200);
    let written = write_session(&store, "ses_n", &[1, 2, 2], 100);
    let n = written.len() as u64;
    let before = store.verify_session("ses_n", true).unwrap();
    assert!(before.findings.is_empty(), "{:?}", before.findings);
    assert_eq!(before.next_seq, n);
    let header = {
        let first = store.segments("ses_n").unwrap()[0].path.clone();
        fs.file(&first).unwrap()[..128].to_vec()
    };
    let new = Path::new(ROOT)
        .join("streams/ses_n")
        .join(tacho_log_format::segment_file_name(n));
    for partial in [Vec::new(), header[..64].to_vec()] {
        fs.set_file(&new, partial);
        let rep = store.verify_session("ses_n", true).unwrap();
        assert!(
            rep.findings.iter().all(|f| f.severity == Severity::Warning),
            "{:?}",
            rep.findings
        );
        assert_eq!((rep.next_seq, rep.chain), (n, before.chain));
        let end = store.read_session("ses_n", |_| {}).unwrap();
        assert_eq!((end.next_seq, end.head), (n, before.chain));
    }
}

/// A group made durable by one filesystem sync: a crash at any sync keeps every
/// acknowledged group whole, never leaves a stream that does not verify, and leaves
/// every session's index entry exact or dirty.
#[test]
fn a_crash_at_every_sync_of_groups_keeps_acknowledged_groups() {
    use tacho_store::append_group;
    let run = |fs: &SimFs, freeze: Option<u64>| -> Vec<(String, usize)> {
        let store = sim_store(fs, 1_500);
        let mut acked: Vec<(String, usize)> = Vec::new();
        for round in 0..4u64 {
            let ids = ["ses_g1", "ses_g2", "ses_g3"];
            let mut writers: Vec<_> = ids.iter().map(|s| store.writer(s).unwrap()).collect();
            let batches: Vec<Vec<(i64, EventBody)>> = ids
                .iter()
                .enumerate()
                .map(|(i, _)| {
                    let first = if round == 0 {
                        vec![(0, start())]
                    } else {
                        vec![]
                    };
                    first
                        .into_iter()
                        .chain((0..2 + i as u64).map(|k| ((round * 10 + k) as i64 + 1, ev(k, 50))))
                        .collect()
                })
                .collect();
            let mut group: Vec<(&mut tacho_store::Writer, &[(i64, EventBody)])> = writers
                .iter_mut()
                .zip(&batches)
                .map(|(w, b)| (w, b.as_slice()))
                .collect();
            append_group(&mut group, Durability::Sync).unwrap();
            if freeze.is_none_or(|f| fs.sync_count() <= f) {
                for (s, b) in ids.iter().zip(&batches) {
                    match acked.iter_mut().find(|(id, _)| id == s) {
                        Some((_, n)) => *n += b.len(),
                        None => acked.push((s.to_string(), b.len())),
                    }
                }
            }
        }
        acked
    };
    let keeps = [
        CrashKeep::DurableOnly,
        CrashKeep::Prefix {
            fraction: 0.5,
            zero_fill: true,
        },
    ];
    for_each_crash(run, &keeps, |n, keep, crashed, acked| {
        let store = sim_store(&crashed, 1_500);
        let index = store.index().unwrap();
        for (s, count) in acked {
            let end = store.read_session(s, |_| {}).unwrap();
            assert!(
                end.next_seq as usize >= *count,
                "sync {n} {keep:?}: {s} holds {} events, {count} acknowledged",
                end.next_seq
            );
            let e = index.get(s).unwrap();
            assert!(
                e.dirty || (e.next_seq, e.head) == (end.next_seq, end.head),
                "sync {n} {keep:?}: {s}"
            );
        }
        for s in store.sessions().unwrap() {
            drop(store.writer(&s).unwrap());
            let rep = store.verify_session(&s, true).unwrap();
            assert!(
                rep.findings.is_empty(),
                "sync {n} {keep:?}: {:?}",
                rep.findings
            );
        }
    });
}

/// `n` events of a new session (its `session.start` first), `size` bytes each.
fn session_events(n: u64, size: usize) -> Vec<(i64, EventBody)> {
    (0..n)
        .map(|i| (1_000 + i as i64, if i == 0 { start() } else { ev(i, size) }))
        .collect()
}

fn pack_files(fs: &SimFs) -> Vec<PathBuf> {
    fs.list_dir(Path::new("/store/packs"))
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.ends_with(".tpack"))
        .map(|n| Path::new("/store/packs").join(n))
        .collect()
}

#[test]
fn packed_sessions_read_verify_and_continue_like_streams() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 4_000);
    let p1 = session_events(8, 40);
    let p2 = session_events(5, 40);
    let p3 = session_events(60, 200); // past segment_bytes_max: several packed segments
    let mut b = store.pack_builder();
    // The input comes back to p1 after p2: p1 gets a second segment.
    b.stage("ses_p1", &p1[..3]).unwrap();
    b.stage("ses_p2", &p2).unwrap();
    assert_eq!(b.stage("ses_p1", &p1[3..]).unwrap(), 3);
    // Staged in pieces: a segment full after a piece is sealed, the next piece starts
    // the next one (a pack is published whole, so a batch may span its segments).
    for piece in p3.chunks(10) {
        b.stage("ses_p3", piece).unwrap();
    }
    // Rules hold as in a stream: nothing but session.start first, and never again.
    assert!(b.check_batch("ses_p4", [&ev(1, 1)]).is_err());
    assert!(b.check_batch("ses_p2", [&start()]).is_err());
    // Nothing is visible before the pack is published.
    assert!(store.sessions().unwrap().is_empty());
    assert!(pack_files(&fs).is_empty());
    let receipts = b.publish().unwrap();
    assert_eq!(
        receipts
            .iter()
            .map(|(s, r)| (s.as_str(), r.first_seq, r.last_seq))
            .collect::<Vec<_>>(),
        [("ses_p1", 0, 7), ("ses_p2", 0, 4), ("ses_p3", 0, 59)]
    );
    assert_eq!(pack_files(&fs).len(), 1);
    assert_eq!(store.sessions().unwrap(), ["ses_p1", "ses_p2", "ses_p3"]);
    for (s, evs) in [("ses_p1", &p1), ("ses_p2", &p2), ("ses_p3", &p3)] {
        let got: Vec<(i64, EventBody)> = read_all(&store, s)
            .unwrap()
            .into_iter()
            .map(|(_, t, b)| (t, b))
            .collect();
        assert_eq!(&got, evs, "{s}");
        let rep = store.verify_session(s, true).unwrap();
        assert!(rep.findings.is_empty(), "{s}: {:?}", rep.findings);
        assert_eq!(rep.sealed_segments, rep.segments);
    }
    assert_eq!(store.segments("ses_p1").unwrap().len(), 2);
    assert!(store.segments("ses_p3").unwrap().len() > 2);
    assert!(store.verify_packs().is_empty());
    // A session recorded in one batch, packed, has the head a stream of its own gives it.
    let plain_fs = SimFs::new();
    let plain = sim_store(&plain_fs, 4_000);
    let r = plain
        .writer("ses_p2")
        .unwrap()
        .append_batch(&p2, Durability::Sync)
        .unwrap();
    assert_eq!(receipts[1].1, r);

    // A writer continues a packed session in its stream directory, after the pack.
    let more: Vec<(i64, EventBody)> = (5..9).map(|i| (2_000 + i as i64, ev(i, 40))).collect();
    let mut w = store.writer("ses_p2").unwrap();
    assert_eq!(w.next_seq(), 5);
    assert!(w.append_batch(&[(1, start())], Durability::Sync).is_err());
    w.append_batch(&more, Durability::Sync).unwrap();
    drop(w);
    let segs = store.segments("ses_p2").unwrap();
    assert_eq!(segs.len(), 2);
    assert!(segs[0].packed.is_some() && segs[1].packed.is_none());
    assert_eq!(segs[1].first_seq, 5);
    assert_eq!(read_all(&store, "ses_p2").unwrap().len(), 9);
    assert!(
        store
            .verify_session("ses_p2", true)
            .unwrap()
            .findings
            .is_empty()
    );
    assert_eq!(store.index().unwrap().get("ses_p2").unwrap().next_seq, 9);

    // Removing a packed session writes its pack again without it.
    tacho_store::remove_streams(vec![store.writer("ses_p1").unwrap()]).unwrap();
    assert_eq!(store.sessions().unwrap(), ["ses_p2", "ses_p3"]);
    assert_eq!(pack_files(&fs).len(), 1);
    assert!(store.verify_packs().is_empty());
    for s in ["ses_p2", "ses_p3"] {
        assert!(store.verify_session(s, true).unwrap().findings.is_empty());
    }
    assert_eq!(read_all(&store, "ses_p3").unwrap().len(), 60);

    // A changed byte in a packed segment is found at its offset in the pack; a changed
    // table of contents too.
    let pack = pack_files(&fs).remove(0);
    let seg = store.segments("ses_p3").unwrap().remove(1);
    let (at, len) = seg.packed.unwrap();
    let mut bytes = fs.file(&pack).unwrap();
    let clean = bytes.clone();
    bytes[(at + len / 2) as usize] ^= 0x40;
    fs.set_file(&pack, bytes);
    // A process that opens the pack as it now is (one holding it reads what it mapped).
    let store = sim_store(&fs, 4_000);
    let rep = store.verify_session("ses_p3", true).unwrap();
    let f = rep
        .findings
        .iter()
        .find(|f| f.severity == Severity::Error)
        .expect("the change is found");
    assert_eq!(f.segment.as_deref(), Some(pack.as_path()));
    assert!((at..at + len).contains(&f.offset.unwrap()), "{f:?}");
    assert!(read_all(&store, "ses_p3").is_err());
    let mut bytes = clean.clone();
    let last = bytes.len() - 1;
    bytes[last] ^= 1; // the last byte of the names
    fs.set_file(&pack, bytes);
    drop(store);
    let store = sim_store(&fs, 4_000);
    assert!(
        store
            .verify_packs()
            .iter()
            .any(|f| f.message.contains("checksum")),
        "{:?}",
        store.verify_packs()
    );
    // Reads that need the pack fail closed, naming it; listings leave its sessions out.
    match read_all(&store, "ses_p3") {
        Err(StoreError::Corrupt { path, .. }) => assert_eq!(path, pack),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.resolve_session("ses_p3"),
        Err(StoreError::Corrupt { .. })
    ));
    assert_eq!(store.sessions().unwrap(), ["ses_p2"]);
}

#[test]
fn a_session_created_twice_at_once_is_recorded_once() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    // A writer creates the session after the pack took it: the pack is refused whole.
    let mut b = store.pack_builder();
    assert!(b.is_new("ses_c").unwrap());
    b.stage("ses_c", &session_events(3, 10)).unwrap();
    b.stage("ses_other", &session_events(2, 10)).unwrap();
    store
        .writer("ses_c")
        .unwrap()
        .append_batch(&session_events(1, 10), Durability::Sync)
        .unwrap();
    let e = b.publish().unwrap_err();
    assert!(
        matches!(e, StoreError::Rejected { ref session, .. } if session == "ses_c"),
        "{e}"
    );
    assert!(pack_files(&fs).is_empty());
    assert_eq!(store.sessions().unwrap(), ["ses_c"]);
    assert!(
        fs.list_dir(Path::new("/store/packs"))
            .unwrap()
            .iter()
            .all(|n| n == ".lock"),
        "nothing of the refused pack is left"
    );
    // A pack published while a writer of the same new session is open: the writer's
    // first batch is refused, and the pack's session stands.
    let mut w = store.writer("ses_d").unwrap();
    let mut b = store.pack_builder();
    b.stage("ses_d", &session_events(4, 10)).unwrap();
    b.publish().unwrap();
    let e = w
        .append_batch(&session_events(2, 10), Durability::Sync)
        .unwrap_err();
    assert!(e.to_string().contains("another process"), "{e}");
    drop(w);
    assert!(!fs.exists(Path::new("/store/streams/ses_d")));
    assert_eq!(read_all(&store, "ses_d").unwrap().len(), 4);
    assert!(
        store
            .verify_session("ses_d", true)
            .unwrap()
            .findings
            .is_empty()
    );
}

#[test]
fn a_crash_at_every_sync_of_a_pack_leaves_it_whole_or_absent() {
    let sessions = ["ses_k1", "ses_k2", "ses_k3"];
    // A stream written first, then a pack of three sessions; returns whether the pack
    // was acknowledged before the freeze.
    let run = |fs: &SimFs, freeze: Option<u64>| -> bool {
        let store = sim_store(fs, 2_000);
        write_session(&store, "ses_w", &[3, 2], 30);
        let mut b = store.pack_builder();
        for (i, s) in sessions.iter().enumerate() {
            b.stage(s, &session_events(3 + 10 * i as u64, 60)).unwrap();
        }
        b.publish().unwrap();
        freeze.is_none_or(|f| fs.sync_count() <= f)
    };
    let keeps = [
        CrashKeep::DurableOnly,
        CrashKeep::Prefix {
            fraction: 0.5,
            zero_fill: true,
        },
        CrashKeep::Prefix {
            fraction: 1.0,
            zero_fill: false,
        },
    ];
    for_each_crash(run, &keeps, |n, keep, crashed, acked| {
        {
            let store = sim_store(&crashed, 2_000);
            let present: Vec<bool> = sessions.iter().map(|s| store.has_session(s)).collect();
            assert!(
                present.iter().all(|p| *p) || present.iter().all(|p| !p),
                "sync {n} {keep:?}: {present:?}"
            );
            if *acked {
                assert!(
                    present[0],
                    "sync {n} {keep:?}: an acknowledged pack is gone"
                );
            }
            assert!(store.verify_packs().is_empty(), "sync {n} {keep:?}");
            for s in store.sessions().unwrap() {
                let rep = store.verify_session(&s, true).unwrap();
                assert!(
                    rep.findings.iter().all(|f| f.severity < Severity::Error),
                    "sync {n} {keep:?}: {:?}",
                    rep.findings
                );
            }
            // The index knows of every session that is there.
            let index = store.index().unwrap();
            for s in store.sessions().unwrap() {
                let e = index.get(&s).unwrap();
                let end = store.read_session(&s, |_| {}).unwrap();
                assert!(
                    e.dirty || (e.next_seq, e.head) == (end.next_seq, end.head),
                    "sync {n} {keep:?}: {s}"
                );
            }
        }
    });
}

/// Runs `run` once whole to count its syncs, then once per sync N frozen there
/// (`run(fs, Some(N))` says what it acknowledged before the freeze), and hands `check`
/// each crash image `keeps` makes of it.
fn for_each_crash<T>(
    run: impl Fn(&SimFs, Option<u64>) -> T,
    keeps: &[CrashKeep],
    mut check: impl FnMut(u64, CrashKeep, SimFs, &T),
) {
    let total = {
        let fs = SimFs::new();
        run(&fs, None);
        fs.sync_count()
    };
    for n in 1..=total {
        let fs = SimFs::new();
        fs.freeze_at_sync(n);
        let acked = run(&fs, Some(n));
        let image = fs.frozen().expect("freeze point reached");
        for &keep in keeps {
            check(n, keep, image.materialize(keep), &acked);
        }
    }
}

/// What a killed pack builder left (its temporary file) goes when the next pack is
/// published, once it is over an hour old and its process is gone; a recent one, or
/// one whose process still runs, stays.
#[test]
fn a_dead_builders_temporary_pack_file_is_removed_by_the_next_publisher() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    let mut b = store.pack_builder();
    b.stage("ses_a", &session_events(2, 10)).unwrap();
    b.publish().unwrap();
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let two_hours = 2 * 3600 * 1_000_000_000u128;
    // pid_max is at most 2^22: this process cannot exist.
    let dead_old = format!(".999999999-{}.tmp", now_ns - two_hours);
    let dead_new = format!(".999999999-{now_ns}.tmp");
    let alive_old = format!(".{}-{}.tmp", std::process::id(), now_ns - two_hours);
    for name in [&dead_old, &dead_new, &alive_old] {
        let mut f = fs
            .open_append(&Path::new("/store/packs").join(name), true)
            .unwrap();
        f.write_at(0, b"half a pack").unwrap();
    }
    let mut b = store.pack_builder();
    b.stage("ses_b", &session_events(2, 10)).unwrap();
    b.publish().unwrap();
    let mut left: Vec<String> = fs
        .list_dir(Path::new("/store/packs"))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    left.sort();
    let mut want = vec![dead_new, alive_old];
    want.sort();
    assert_eq!(left, want);
    assert_eq!(pack_files(&fs).len(), 2);
}

/// Publishes a pack of two new sessions (`ses_m<k>a`, `ses_m<k>b`); their events.
fn publish_pair(store: &Store, k: usize) -> Vec<(String, Vec<(i64, EventBody)>)> {
    let mut b = store.pack_builder();
    let mut out = Vec::new();
    for (i, side) in ["a", "b"].iter().enumerate() {
        let s = format!("ses_m{k:02}{side}");
        let events = session_events(3 + (k + i) as u64 % 5, 20 + 10 * i);
        b.stage(&s, &events).unwrap();
        out.push((s, events));
    }
    b.publish().unwrap();
    out
}

/// Packs pile up one per bulk input; past `PACKS_BEFORE_MERGE` the smaller ones are
/// merged after a publication, and every session reads, verifies and continues as
/// before.
#[test]
fn small_packs_are_merged_and_their_sessions_read_the_same() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    let mut all = Vec::new();
    let mut most = 0;
    for k in 0..40 {
        all.extend(publish_pair(&store, k));
        let n = pack_files(&fs).len();
        assert!(n <= tacho_store::PACKS_BEFORE_MERGE, "{n} packs after {k}");
        most = most.max(n);
    }
    assert_eq!(most, tacho_store::PACKS_BEFORE_MERGE, "merges happened");
    assert!(
        store.verify_packs().is_empty(),
        "{:?}",
        store.verify_packs()
    );
    for (s, events) in &all {
        let got = read_all(&store, s).unwrap();
        let bodies: Vec<&EventBody> = got.iter().map(|(_, _, b)| b).collect();
        let want: Vec<&EventBody> = events.iter().map(|(_, b)| b).collect();
        assert_eq!(bodies, want, "{s}");
        assert!(
            store.verify_session(s, true).unwrap().findings.is_empty(),
            "{s}"
        );
    }
    // A merged session goes on as a stream.
    let (s, events) = &all[3];
    store
        .writer(s)
        .unwrap()
        .append_batch(&[(9_999, ev(1, 10))], Durability::Sync)
        .unwrap();
    assert_eq!(read_all(&store, s).unwrap().len(), events.len() + 1);
    // A fresh process sees the same.
    let again = sim_store(&fs, 1 << 20);
    assert_eq!(again.sessions().unwrap().len(), all.len());
}

/// A pack listed and then gone before it is opened (a merge removed it meanwhile,
/// after publishing the pack that replaces it): a reader lists again and reads every
/// session; a pack that keeps vanishing from listing after listing is an error in the
/// end, not a loop.
#[test]
fn a_pack_gone_between_listing_and_opening_is_listed_again() {
    let fs = SimFs::new();
    let store = sim_store(&fs, 1 << 20);
    let mut all = Vec::new();
    for k in 0..3 {
        all.extend(publish_pair(&store, k));
    }
    let ghost = format!("{}.tpack", "0".repeat(32));
    let packs = Path::new("/store/packs");
    fs.ghost_in_listings(packs, &ghost, 1);
    // A fresh handle: nothing cached, so the first read lists and opens every pack.
    let fresh = sim_store(&fs, 1 << 20);
    let (s, events) = &all[4];
    let got = read_all(&fresh, s).unwrap();
    assert_eq!(got.len(), events.len(), "{s}");
    assert_eq!(fresh.sessions().unwrap().len(), all.len());
    // Vanishing at every listing: given up after a few, with the missing pack named.
    fs.ghost_in_listings(packs, &ghost, u32::MAX);
    let err = read_all(&sim_store(&fs, 1 << 20), s).unwrap_err();
    assert!(err.to_string().contains(&ghost), "{err}");
    // Listings (`sessions`) leave a pack that does not open out.
    assert_eq!(sim_store(&fs, 1 << 20).sessions().unwrap().len(), all.len());
}

/// A crash at any sync of a publication that merges packs: every acknowledged session
/// is there whole; a merge cut short leaves segments in two packs (a warning, the
/// first counts), never an error.
#[test]
fn a_crash_during_a_merge_loses_no_session() {
    let before = tacho_store::PACKS_BEFORE_MERGE;
    let run = |fs: &SimFs, freeze: Option<u64>| -> Vec<String> {
        let store = sim_store(fs, 1 << 20);
        let mut acked = Vec::new();
        for k in 0..=before {
            let pair = publish_pair(&store, k);
            if freeze.is_none_or(|f| fs.sync_count() <= f) {
                acked.extend(pair.into_iter().map(|(s, _)| s));
            }
        }
        acked
    };
    let keeps = [
        CrashKeep::DurableOnly,
        CrashKeep::Prefix {
            fraction: 1.0,
            zero_fill: false,
        },
    ];
    for_each_crash(run, &keeps, |n, keep, crashed, acked| {
        let store = sim_store(&crashed, 1 << 20);
        let findings = store.verify_packs();
        assert!(
            findings.iter().all(|f| f.severity < Severity::Error),
            "sync {n} {keep:?}: {findings:?}"
        );
        for s in acked {
            assert!(store.has_session(s), "sync {n} {keep:?}: {s} is gone");
            let rep = store.verify_session(s, true).unwrap();
            assert!(
                rep.findings.iter().all(|f| f.severity < Severity::Error),
                "sync {n} {keep:?}: {:?}",
                rep.findings
            );
        }
    });
}
