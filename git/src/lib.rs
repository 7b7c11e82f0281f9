//! tacho's Git side: everything that reads a workspace or writes Git objects.
//!
//! - [`snapshot`]: the snapshot store, a bare Git repository written in-process with
//!   gix (SPEC.md §10), with the per-workspace stat cache and `gc`.
//! - [`rollback`]: the pure rollback planner and its executor.
//! - [`safefs`]: the only code that writes into a user's workspace, confined to it.
//! - [`fingerprint`]: the source fingerprint goal receipts are bound to (SPEC.md §11).
//! - [`head`]: HEAD as tacho reads it, and the commits new since (SPEC.md §17.2).
//! - [`room`]: the clean room goal checks run in (SPEC.md §12.2).
//!
//! This crate knows nothing about the event log, sessions or events: it takes paths and
//! returns values.

pub mod fingerprint;
pub mod head;
pub mod remote;
pub mod rollback;
pub mod room;
pub mod safefs;
pub mod snapshot;
