//! A pass over every stream from one listing of the store (`Store::listing`, what `log
//! verify` and `log stats` use): it finds what a verification of each session finds,
//! and it verifies each stream as it was listed — a directory or a lock file created
//! after the listing is not looked for, and a checkpoint read after it never makes a
//! false "missing" error.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::Path;
use std::sync::Arc;

use tacho_schema::{EventBody, SessionStart, ToolCall};
use tacho_store::vfs::{SegmentBytes, SimFs, Vfs};
use tacho_store::{Durability, Severity, Store, StoreOptions, StreamReport};

fn sim_store(fs: &SimFs) -> Store {
    let opts = StoreOptions {
        segment_bytes_max: 4_000,
        ..StoreOptions::default()
    };
    Store::open_with(Arc::new(fs.clone()) as Arc<dyn Vfs>, "/store", opts).unwrap()
}

fn events(n: u64, first: u64) -> Vec<(i64, EventBody)> {
    (first..first + n)
        .map(|i| {
            let body = if i == 0 {
                EventBody::SessionStart(SessionStart {
                    agent: Some("architect".into()),
                    ..SessionStart::default()
                })
            } else {
                EventBody::ToolCall(ToolCall {
                    call_id: format!("c{i}"),
                    tool: "Bash".into(),
                    target: None,
                    input: Some(format!("echo {}", "x".repeat(150))),
                    agent: None,
                })
            };
            (1_000 + i as i64, body)
        })
        .collect()
}

fn pack_path(fs: &SimFs) -> std::path::PathBuf {
    let dir = Path::new("/store/packs");
    let name = fs
        .list_dir(dir)
        .unwrap()
        .into_iter()
        .find(|n| n.ends_with(".tpack"))
        .unwrap();
    dir.join(name)
}

/// Head, chain, bytes and every finding (severity, offset, message) of a report.
type Summary = (u64, [u8; 32], u64, Vec<(Severity, Option<u64>, String)>);

/// What a report says, findings included (their messages, located).
fn summary(r: &StreamReport) -> Summary {
    (
        r.next_seq,
        r.chain,
        r.bytes,
        r.findings
            .iter()
            .map(|f| (f.severity, f.offset, f.message.clone()))
            .collect(),
    )
}

#[test]
fn a_listed_pass_finds_what_verifying_each_session_finds() {
    let fs = SimFs::new();
    let store = sim_store(&fs);
    // Packed sessions (one of several segments), one continued by a writer, and
    // streams of their own.
    let mut b = store.pack_builder();
    b.stage("ses_p1", &events(6, 0)).unwrap();
    b.stage("ses_p2", &events(40, 0)).unwrap();
    b.stage("ses_p3", &events(5, 0)).unwrap();
    b.publish().unwrap();
    let mut w = store.writer("ses_p3").unwrap();
    w.append_batch(&events(4, 5), Durability::Sync).unwrap();
    drop(w);
    for s in ["ses_s1", "ses_s2"] {
        let mut w = store.writer(s).unwrap();
        w.append_batch(&events(3, 0), Durability::Sync).unwrap();
        w.append_batch(&events(3, 3), Durability::Sync).unwrap();
    }
    let clean = store.listing().unwrap();
    assert_eq!(
        clean.sessions(),
        ["ses_p1", "ses_p2", "ses_p3", "ses_s1", "ses_s2"]
    );
    for s in clean.sessions() {
        let listed = store.verify_listed(&clean, s, true).unwrap();
        assert!(listed.findings.is_empty(), "{s}: {:?}", listed.findings);
        assert_eq!(
            summary(&listed),
            summary(&store.verify_session(s, true).unwrap())
        );
    }
    assert_eq!(
        store
            .verify_listed(&clean, "ses_p3", true)
            .unwrap()
            .next_seq,
        9
    );

    // Damage: a byte of a packed event changed, a stream's last committed batch cut
    // (its checkpoint says it was synced).
    let pack = pack_path(&fs);
    let mut bytes = fs.file(&pack).unwrap();
    bytes[64 + 128 + 40] ^= 0x20;
    fs.set_file(&pack, bytes);
    let dir = Path::new("/store/streams/ses_s2");
    let seg = dir.join(&fs.list_dir(dir).unwrap()[0]);
    let seg = seg.as_path();
    let data = fs.file(seg).unwrap();
    let cut = store.verify_session("ses_s2", true).unwrap().bytes
        - store.verify_session("ses_s2", true).unwrap().free_bytes;
    fs.set_file(seg, data[..cut as usize - 8].to_vec());
    // (A new store: this one holds the pack as it read it.)
    let store = sim_store(&fs);
    let listing = store.listing().unwrap();
    for s in listing.sessions() {
        assert_eq!(
            summary(&store.verify_listed(&listing, s, true).unwrap()),
            summary(&store.verify_session(s, true).unwrap()),
            "{s}"
        );
    }
    let errors = |s: &str| {
        store
            .verify_listed(&listing, s, true)
            .unwrap()
            .findings
            .into_iter()
            .filter(|f| f.severity == Severity::Error)
            .map(|f| f.message)
            .collect::<Vec<_>>()
    };
    // (Whichever packed session's segment comes first in the pack.)
    let damaged = ["ses_p1", "ses_p2", "ses_p3"]
        .into_iter()
        .filter(|s| !errors(s).is_empty())
        .count();
    assert_eq!(damaged, 1);
    assert!(
        errors("ses_s2")
            .iter()
            .any(|m| m.contains("committed events are missing")),
        "{:?}",
        errors("ses_s2")
    );
}

#[test]
fn a_stream_is_verified_as_it_was_listed() {
    let fs = SimFs::new();
    let store = sim_store(&fs);
    let mut b = store.pack_builder();
    b.stage("ses_a", &events(6, 0)).unwrap();
    b.stage("ses_b", &events(6, 0)).unwrap();
    b.publish().unwrap();
    // ses_b's writer appended before the listing (its lock file and directory are
    // there) and again after it; ses_a's writer starts after the listing.
    let mut wb = store.writer("ses_b").unwrap();
    wb.append_batch(&events(3, 6), Durability::Sync).unwrap();
    let listing = store.listing().unwrap();
    wb.append_batch(&events(3, 9), Durability::Sync).unwrap();
    drop(wb);
    let mut wa = store.writer("ses_a").unwrap();
    wa.append_batch(&events(3, 6), Durability::Sync).unwrap();
    drop(wa);

    // ses_a as listed: its packed prefix, clean (the checkpoint of a writer that
    // started later does not count against it).
    let a = store.verify_listed(&listing, "ses_a", true).unwrap();
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    assert_eq!(a.next_seq, 6);
    assert_eq!(store.verify_session("ses_a", true).unwrap().next_seq, 9);
    // ses_b: its checkpoint, read after the listing, counts the appends made since;
    // its directory is read as it is then: everything, clean.
    let b = store.verify_listed(&listing, "ses_b", true).unwrap();
    assert!(b.findings.is_empty(), "{:?}", b.findings);
    assert_eq!(b.next_seq, 12);
}

#[test]
fn a_packed_segment_is_read_in_place_when_aligned() {
    let mut v = rkyv::util::AlignedVec::<16>::new();
    v.extend_from_slice(&(0..64u8).collect::<Vec<_>>());
    let whole = Arc::new(SegmentBytes::Owned(v));
    let aligned = SegmentBytes::range(&whole, 8, 16).unwrap();
    assert!(matches!(aligned, SegmentBytes::Range { .. }));
    assert_eq!(&*aligned, &(8..24u8).collect::<Vec<_>>()[..]);
    // Misaligned: copied (payloads stay 8-byte aligned), same bytes.
    let copied = SegmentBytes::range(&whole, 4, 16).unwrap();
    assert!(matches!(copied, SegmentBytes::Owned(_)));
    assert_eq!(&*copied, &(4..20u8).collect::<Vec<_>>()[..]);
    assert!(SegmentBytes::range(&whole, 60, 8).is_none());
    assert!(SegmentBytes::range(&whole, u64::MAX, 2).is_none());
}

#[test]
fn a_large_pack_lists_every_session_once() {
    // Enough sessions that the pack's table is read in parts on several threads.
    let fs = SimFs::new();
    let store = sim_store(&fs);
    let mut b = store.pack_builder();
    let mut staged: Vec<String> = (0..2_600).map(|i| format!("ses_{i:05}")).collect();
    for (i, s) in staged.iter().enumerate() {
        let n = if i % 500 == 0 { 40 } else { 1 };
        b.stage(s, &events(n, 0)).unwrap();
    }
    b.publish().unwrap();
    staged.sort();
    let listing = store.listing().unwrap();
    assert_eq!(listing.sessions(), staged.as_slice());
    assert_eq!(store.sessions().unwrap(), staged);
    let r = store.verify_listed(&listing, "ses_00500", true).unwrap();
    assert!(r.findings.is_empty(), "{:?}", r.findings);
    assert_eq!(r.next_seq, 40);
}
