//! A fixed workload for profiling the projection build from the log: built with line
//! tables by `cargo build -p tacho-benches --profile bench --example projection_profile`,
//! then `valgrind --tool=callgrind target/release/examples/projection_profile`.

use tacho_benches::realistic_session;
use tacho_projections::{ExecutionGraph, SessionSummary, assess};
use tacho_store::{Durability, Store, StoreOptions};

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), StoreOptions::default()).expect("store");
    let events = realistic_session(1000);
    for k in 0..50 {
        let mut w = store.writer(&format!("ses_{k:04}")).expect("writer");
        w.append_batch(&events, Durability::Buffered)
            .expect("append");
    }
    let mut acc = 0u64;
    for id in store.sessions().expect("sessions") {
        build(&store, &id, &mut acc);
    }
    println!("{acc}");
}

#[inline(never)]
fn build(store: &Store, id: &str, acc: &mut u64) {
    let mut g = ExecutionGraph::new(id);
    store
        .read_session_views(id, 0, |seq, at, v| g.apply_view(seq, at, v))
        .expect("read");
    let s = SessionSummary::from_graph(&g);
    *acc += u64::from(assess(&g).score) + s.tokens_in;
}
