//! Opening a writer on a long stream reads a bounded part of it: the checkpoint mark
//! vouched for by the segment file's stamp and last commit frame (SPEC.md §4.4), and
//! the sealed segments by their stamps. And what that trust gives up: damage that
//! leaves a file's stamp as it was is found by readers and `log verify`, not by the
//! next writer.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tacho_schema::{EventBody, SessionStart, ToolResult, ToolStatus};
use tacho_store::vfs::{CountingFs, SimFs, Vfs};
use tacho_store::{Durability, Store, StoreError, StoreOptions};

const ROOT: &str = "/store";

fn store_on(fs: &SimFs, segment_bytes_max: u64) -> (Store, CountingFs) {
    let counting = CountingFs::new(Arc::new(fs.clone()) as Arc<dyn Vfs>);
    let opts = StoreOptions {
        segment_bytes_max,
        verify_threads: 2,
        ..StoreOptions::default()
    };
    let store = Store::open_with(Arc::new(counting.clone()) as Arc<dyn Vfs>, ROOT, opts).unwrap();
    (store, counting)
}

fn result(i: u64, size: usize) -> EventBody {
    EventBody::ToolResult(ToolResult {
        call_id: format!("c{i}"),
        status: ToolStatus::Ok,
        duration_ms: Some(i),
        error: None,
        output: Some("y".repeat(size)),
        exit_code: None,
    })
}

/// A session of about `bytes` bytes, one synced batch per event of `size` bytes, as a
/// hook appends them.
fn grow(store: &Store, s: &str, bytes: usize, size: usize) {
    let mut w = store.writer(s).unwrap();
    if w.next_seq() == 0 {
        let start = EventBody::SessionStart(SessionStart {
            workspace: Some("/work/app".into()),
            ..SessionStart::default()
        });
        w.append(1, &start, Durability::Sync).unwrap();
    }
    for i in 0..(bytes / size) as u64 {
        w.append(2 + i as i64, &result(i, size), Durability::Sync)
            .unwrap();
    }
}

fn segments(fs: &SimFs, s: &str) -> Vec<PathBuf> {
    let dir = Path::new(ROOT).join("streams");
    let stream = fs.list_dir(&dir).unwrap();
    let dir = dir.join(stream.iter().find(|d| d.contains(s)).unwrap());
    fs.list_dir(&dir)
        .unwrap()
        .into_iter()
        .map(|n| dir.join(n))
        .collect()
}

/// Bytes read by opening a writer of `s` and appending one small synced batch (a hook).
fn one_hook(store: &Store, counting: &CountingFs, s: &str) -> (u64, bool) {
    counting.take_bytes_read();
    let mut w = store.writer(s).unwrap();
    let by_stamp = w.resumed_by_stamp();
    let n = w.next_seq();
    w.append(10_000_000 + n as i64, &result(n, 300), Durability::Sync)
        .unwrap();
    drop(w);
    (counting.take_bytes_read(), by_stamp)
}

/// The bound: the lock file's mark, the segment's header, its last commit frame and
/// 4 KiB after it, the stamps, the session index's appended records — nothing that
/// grows with the session.
const HOOK_READ_BOUND: u64 = 16 * 1024;

#[test]
fn a_writer_reads_the_same_few_bytes_of_a_short_and_a_long_stream() {
    let fs = SimFs::new();
    let (store, counting) = store_on(&fs, 16 << 20);
    grow(&store, "ses_short", 100_000, 4_000);
    grow(&store, "ses_long", 12_000_000, 200_000);
    let mut read = Vec::new();
    for s in ["ses_short", "ses_long"] {
        for _ in 0..3 {
            let (bytes, by_stamp) = one_hook(&store, &counting, s);
            assert!(by_stamp, "{s}: the writer read the segment whole");
            assert!(
                bytes <= HOOK_READ_BOUND,
                "{s}: opening a writer read {bytes} bytes"
            );
            read.push(bytes);
        }
    }
    // And what it appended continues the chain exactly.
    assert!(store.verify_all(true).unwrap().is_clean());
    eprintln!("bytes read per hook (short, then long): {read:?}");
}

#[test]
fn sealed_segments_are_read_again_only_when_their_stamps_change() {
    let fs = SimFs::new();
    let (store, counting) = store_on(&fs, 256 * 1024);
    grow(&store, "ses_segs", 2_000_000, 20_000);
    assert!(segments(&fs, "ses_segs").len() > 5);
    // The first writer after the one that wrote them vouches for them by their stamps.
    let (bytes, by_stamp) = one_hook(&store, &counting, "ses_segs");
    assert!(by_stamp);
    assert!(bytes <= HOOK_READ_BOUND, "read {bytes} bytes");
    // A sealed segment changed (its stamp with it): read and checked again, refused.
    let first = segments(&fs, "ses_segs").into_iter().min().unwrap();
    let mut b = fs.file(&first).unwrap();
    b[300] ^= 1;
    fs.set_file(&first, b);
    assert!(matches!(
        store.writer("ses_segs"),
        Err(StoreError::Corrupt { .. })
    ));
}

#[test]
fn damage_the_stamp_does_not_show_is_found_by_readers_and_verification() {
    let fs = SimFs::new();
    let (store, _) = store_on(&fs, 16 << 20);
    grow(&store, "ses_rot", 400_000, 20_000);
    let seg = segments(&fs, "ses_rot").pop().unwrap();
    let clean = fs.file(&seg).unwrap();
    // Bit rot before the last commit frame that leaves the file's stamp as it was: the
    // next writer takes up from its mark (the trade of SPEC.md §4.4) ...
    let mut rotten = clean.clone();
    rotten[1_000] ^= 1;
    fs.set_file_keeping_stamp(&seg, rotten);
    let w = store.writer("ses_rot").unwrap();
    assert!(w.resumed_by_stamp());
    drop(w);
    // ... and every reader and `log verify` refuse the damaged batch.
    assert!(matches!(
        store.read_session("ses_rot", |_| {}),
        Err(StoreError::Corrupt { .. })
    ));
    assert!(
        !store
            .verify_session("ses_rot", true)
            .unwrap()
            .findings
            .is_empty()
    );
    // The last commit frame is checked whatever the stamp says: changed, the writer
    // reads the segment whole (and refuses the batch it no longer vouches for).
    let mut last = clean.clone();
    let data_end = last.iter().rposition(|&b| b != 0).unwrap();
    last[data_end - 40] ^= 1;
    fs.set_file_keeping_stamp(&seg, last);
    match store.writer("ses_rot") {
        Ok(w) => assert!(!w.resumed_by_stamp()),
        Err(e) => assert!(
            matches!(e, StoreError::Corrupt { .. } | StoreError::Lost { .. }),
            "{e}"
        ),
    }
    // Damage the stamp shows: read whole, refused.
    let mut changed = clean;
    changed[1_000] ^= 1;
    fs.set_file(&seg, changed);
    assert!(matches!(
        store.writer("ses_rot"),
        Err(StoreError::Corrupt { .. })
    ));
}

#[test]
fn buffered_batches_are_never_vouched_for_by_a_stamp() {
    let fs = SimFs::new();
    let (store, _) = store_on(&fs, 16 << 20);
    grow(&store, "ses_buf", 100_000, 4_000);
    let mut w = store.writer("ses_buf").unwrap();
    w.append(99_999, &result(999, 100), Durability::Buffered)
        .unwrap();
    drop(w);
    // The mark written after a buffered batch vouches for nothing by its stamp: a crash
    // can leave the file's length and times without the data.
    let w = store.writer("ses_buf").unwrap();
    assert!(w.resumed_from_mark());
    assert!(!w.resumed_by_stamp());
}

/// Hooks of two sessions taking turns (a writer opened, one synced batch, closed),
/// with rotations; a crash at every sync, each way a crash can keep unsynced writes
/// (crash images keep every file's stamp as last changed). Every acknowledged batch
/// survives, every stream opens for writing and verifies clean — and writers after
/// the crash do take up from stamps.
#[test]
fn a_crash_at_every_sync_of_hooks_keeps_every_acknowledged_batch() {
    use tacho_store::vfs::CrashKeep;
    type Acked = Vec<(String, usize, Vec<EventBody>)>;
    let workload = |fs: &SimFs, freeze: Option<u64>| -> Acked {
        let (store, _) = store_on(fs, 3_000);
        let mut out: Acked = ["ses_h1", "ses_h2"]
            .iter()
            .map(|s| (s.to_string(), 0, Vec::new()))
            .collect();
        for hook in 0..24usize {
            let (s, acked, written) = &mut out[hook % 2];
            let mut w = store.writer(s).unwrap();
            let body = if written.is_empty() {
                EventBody::SessionStart(SessionStart::default())
            } else {
                result(hook as u64, 100 + 150 * (hook % 4))
            };
            w.append(hook as i64, &body, Durability::Sync).unwrap();
            written.push(body);
            if freeze.is_none_or(|f| fs.sync_count() <= f) {
                *acked = written.len();
            }
        }
        out
    };
    let total = {
        let fs = SimFs::new();
        workload(&fs, None);
        fs.sync_count()
    };
    let mut by_stamp = 0;
    for n in 1..=total {
        let fs = SimFs::new();
        fs.freeze_at_sync(n);
        let acked = workload(&fs, Some(n));
        let image = fs.frozen().unwrap();
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
            let (store, _) = store_on(&image.materialize(keep), 3_000);
            for (s, acked, written) in &acked {
                if !store.has_session(s) {
                    assert_eq!(*acked, 0, "sync {n} {keep:?}: {s} lost");
                    continue;
                }
                let w = store
                    .writer(s)
                    .unwrap_or_else(|e| panic!("sync {n} {keep:?}: {s} does not open: {e}"));
                by_stamp += usize::from(w.resumed_by_stamp());
                drop(w);
                let mut read = Vec::new();
                store.read_session(s, |e| read.push(e.event.body)).unwrap();
                assert!(
                    read.len() >= *acked,
                    "sync {n} {keep:?}: {s} has {} events, {acked} were acknowledged",
                    read.len()
                );
                assert_eq!(read[..], written[..read.len()], "sync {n} {keep:?}: {s}");
                let rep = store.verify_session(s, true).unwrap();
                assert!(
                    rep.findings.is_empty(),
                    "sync {n} {keep:?}: {:?}",
                    rep.findings
                );
            }
        }
    }
    assert!(by_stamp > 0, "no writer took up from a stamp after a crash");
}

/// A listing's vouching (SPEC.md §8.4, `vouched`): a stream is verified whole the
/// first time, then vouched for by its files' stamps without a byte of it read; a
/// stream changed since (a flipped bit) is verified again and damaged, and says so
/// every time after; a stream appended to is verified again and sound; a stream
/// removed is gone. Damage that leaves the stamps as they were is the trade: `log
/// verify` finds it.
#[test]
fn a_listing_vouches_by_stamps_and_verifies_what_changed() {
    use tacho_store::Vouch;
    let fs = SimFs::new();
    let (store, counting) = store_on(&fs, 16 << 20);
    grow(&store, "ses_a", 200_000, 4_000);
    grow(&store, "ses_b", 200_000, 4_000);
    counting.take_bytes_read();
    assert_eq!(store.vouch(&["ses_a", "ses_b"]), vec![Vouch::Sound; 2]);
    assert!(
        counting.take_bytes_read() >= 400_000,
        "the first time, read whole"
    );
    assert_eq!(store.vouch(&["ses_a", "ses_b"]), vec![Vouch::Sound; 2]);
    let again = counting.take_bytes_read();
    assert!(
        again < 20_000,
        "unchanged streams were read again: {again} bytes"
    );
    // A flipped bit in a committed batch of `ses_a`.
    let seg = segments(&fs, "ses_a").pop().unwrap();
    let clean = fs.file(&seg).unwrap();
    let mut rotten = clean.clone();
    rotten[1_000] ^= 1;
    fs.set_file(&seg, rotten.clone());
    for _ in 0..2 {
        let said = store.vouch(&["ses_a", "ses_b"]);
        assert!(
            matches!(&said[0], Vouch::Damaged(f) if f.offset.is_some() && f.segment.as_ref() == Some(&seg)),
            "{said:?}"
        );
        assert_eq!(said[1], Vouch::Sound);
    }
    // The same damage with the stamps put back as they were vouched for: not seen here.
    fs.set_file(&seg, clean.clone());
    assert_eq!(store.vouch(&["ses_a"]), vec![Vouch::Sound]);
    fs.set_file_keeping_stamp(&seg, rotten);
    assert_eq!(store.vouch(&["ses_a"]), vec![Vouch::Sound]);
    assert!(
        !store
            .verify_session("ses_a", true)
            .unwrap()
            .findings
            .is_empty()
    );
    fs.set_file(&seg, clean);
    // Appended to: verified again, sound.
    grow(&store, "ses_b", 8_000, 4_000);
    counting.take_bytes_read();
    assert_eq!(store.vouch(&["ses_b"]), vec![Vouch::Sound]);
    assert!(counting.take_bytes_read() >= 200_000);
    // A session with no stream.
    assert_eq!(store.vouch(&["ses_none"]), vec![Vouch::Gone]);
    // A stream a prune removes takes its stamp with it: `index/vouched` keeps only
    // streams that exist.
    let vouched = || {
        let path = std::path::Path::new(ROOT).join("index/vouched");
        String::from_utf8(fs.file(&path).expect("index/vouched")).unwrap()
    };
    assert!(vouched().contains(" ses_b\n"), "{}", vouched());
    store.writer("ses_b").unwrap().remove_stream().unwrap();
    assert!(!vouched().contains(" ses_b\n"), "{}", vouched());
    assert!(vouched().contains(" ses_a\n"), "{}", vouched());
}
