//! Stored projections: a session's execution graph kept beside the log with the log
//! position it reflects, brought up to date from there, rebuilt when it cannot be
//! trusted. It is derived data: deleting it loses nothing, and `session replay --mode
//! verify` checks that it equals a rebuild.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tacho_projections::{ExecutionGraph, FoldState};
use tacho_store::{ReadEnd, Store, StoreError, hex, stream_dir_name};

/// The format of a stored projection file.
/// (v2: the graph counts goal events; v3: per goal, with revisions; v4: lists every
/// goal event, receipts with their commands; v5: a step's `finish_seq`, which the
/// rule of unclaimed changes reads; v9: the agent's todo list; an older file is
/// rebuilt.)
pub const STORED_FORMAT: &str = "tacho.projections.v9";

#[derive(Serialize, Deserialize)]
struct Stored {
    format: String,
    session: String,
    /// The chain value after the last event the graph reflects (`graph.next_seq - 1`).
    head: String,
    graph: ExecutionGraph,
    state: FoldState,
}

/// Where the stored projection of a session lives.
pub(crate) fn path(store: &Store, session: &str) -> PathBuf {
    store
        .root()
        .join("projections")
        .join(format!("{}.json", stream_dir_name(session)))
}

/// The stored projection as it is on disk, unchecked: (graph, recorded head).
pub(crate) fn read_stored(store: &Store, session: &str) -> Option<(ExecutionGraph, String)> {
    let bytes = std::fs::read(path(store, session)).ok()?;
    let s: Stored = serde_json::from_slice(&bytes).ok()?;
    (s.format == STORED_FORMAT && s.session == session)
        .then(|| (ExecutionGraph::resume(s.graph, s.state), s.head))
}

/// A stored projection that the log still backs: the log holds a committed batch
/// ending exactly where the graph ends, with the chain value it recorded.
fn load_trusted(store: &Store, session: &str) -> Option<ExecutionGraph> {
    let (g, head) = read_stored(store, session)?;
    let at = store.head_at(session, g.next_seq).ok()??;
    (hex(&at) == head).then_some(g)
}

fn save(store: &Store, session: &str, g: &ExecutionGraph, head: &[u8; 32]) -> std::io::Result<()> {
    let p = path(store, session);
    if let Some(dir) = p.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let stored = Stored {
        format: STORED_FORMAT.into(),
        session: session.into(),
        head: hex(head),
        graph: g.clone(),
        state: g.fold_state().clone(),
    };
    let text = serde_json::to_vec(&stored).map_err(std::io::Error::other)?;
    // Written beside its final name and renamed: readers see the old or the new file.
    let tmp = p.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &p)
}

/// The execution graph of a session: the stored projection brought up to date, or a
/// rebuild when there is none it can trust. Stores the result when it moved on.
pub(crate) fn graph(
    store: &Store,
    session: &str,
    note: &dyn Fn(&str),
) -> Result<(ExecutionGraph, ReadEnd), StoreError> {
    let stored = load_trusted(store, session);
    let had = stored.as_ref().map(|g| g.next_seq);
    let mut g = stored.unwrap_or_else(|| ExecutionGraph::new(session));
    let end =
        store.read_session_views(session, g.next_seq, |seq, at, v| g.apply_view(seq, at, v))?;
    if had != Some(g.next_seq) && g.next_seq == end.next_seq {
        // Derived data: failing to store it costs a rebuild next time, nothing more.
        if let Err(e) = save(store, session, &g, &end.head) {
            note(&format!(
                "note: could not store the projection of {session}: {e}"
            ));
        }
    }
    Ok((g, end))
}

/// A graph built from the log alone, up to (not including) event `until`.
pub(crate) fn rebuild(
    store: &Store,
    session: &str,
    until: u64,
) -> Result<ExecutionGraph, StoreError> {
    let mut g = ExecutionGraph::new(session);
    store.read_session_views(session, 0, |seq, at, v| {
        if seq < until {
            g.apply_view(seq, at, v)
        }
    })?;
    Ok(g)
}
