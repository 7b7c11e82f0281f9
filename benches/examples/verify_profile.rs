//! A fixed workload for profiling verification: built with line tables by `cargo build
//! -p tacho-benches --profile bench --example verify_profile`, then `valgrind
//! --tool=callgrind target/release/examples/verify_profile` (instruction counts are
//! repeatable).

use tacho_benches::{event_of_size, session_start};
use tacho_store::{Durability, Store, StoreOptions};

fn main() {
    let size: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let events: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = StoreOptions {
        verify_threads: 1,
        ..StoreOptions::default()
    };
    let store = Store::open(dir.path(), opts).expect("store");
    let mut w = store.writer("ses_profile").expect("writer");
    w.append(0, &session_start(), Durability::Buffered)
        .expect("append");
    let mut seq = 1;
    while seq < events {
        let batch: Vec<_> = (0..100)
            .map(|i| (i, event_of_size(seq + i as u64, size)))
            .collect();
        w.append_batch(&batch, Durability::Buffered)
            .expect("append");
        seq += 100;
    }
    drop(w);
    let mut total = 0;
    for _ in 0..3 {
        let r = store.verify_session("ses_profile", true).expect("verify");
        assert!(r.findings.is_empty());
        total += r.bytes;
    }
    println!("verified {total} bytes");
}
