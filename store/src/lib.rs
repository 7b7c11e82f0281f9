//! The store: one append-only stream of segments per session, written under a lock,
//! read without one, recovered on open and verified on demand.
//!
//! Layout under the store root (see SPEC.md §"Store layout"):
//!
//! ```text
//! <root>/locks/<stream dir>.lock
//! <root>/streams/<stream dir>/00000000000000000000.tseg
//! <root>/streams/<stream dir>/00000000000000012345.tseg
//! <root>/index/sessions.snap, sessions.log, facts.rules, lock   (derived: the session index)
//! <root>/pruned.log, pruned.lock                    (what `audit prune` removed)
//! ```
//!
//! The store owns I/O policy: where files live, when they are synced, what is repaired
//! and what is refused. The byte layout is `tacho-log-format`'s; what payloads mean is
//! `tacho-schema`'s.

mod adopt;
pub mod dump;
pub mod index;
mod link;
mod pack;
mod package;
mod prune;
mod reader;
mod store;
mod verify;
pub mod vfs;
mod vouch;
mod writer;

/// Lower-case hexadecimal of chain values and digests (the crate gix uses for ids).
pub use faster_hex::hex_string as hex;
pub use pack::{PACKS_BEFORE_MERGE, PackBuilder};
pub use package::{
    PACKAGE_MAGIC, PACKAGE_VERSION, PackageError, export_package, open_package, package_segments,
};
pub use prune::{PRUNE_LOG, PruneRecord, PrunedSession, remove_streams};
pub use reader::{ReadEnd, SegmentInfo, StoredEvent};
pub use store::{Listing, Store, StoreError, StoreOptions, stream_dir_name, stream_name_from_dir};
pub use verify::{EventVisitor, Finding, KindTally, Severity, StoreReport, StreamReport};
pub use vouch::Vouch;
pub use writer::{
    AppendReceipt, Durability, EventRef, Recovery, Writer, append_group, close_writers,
    commit_group, mark_written,
};
