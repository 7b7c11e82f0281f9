//! Goal assurance (BRIEF §3): plans and their contracts. Checks, receipts and the
//! completion gate build on these.

pub mod commits;
pub mod plan;
pub mod review;

pub use plan::{Assurance, Check, Plan, PlanError, Source, Submission, contract_digest, validate};
