//! Goal assurance rules (BRIEF §3): plans and their contracts, and the verifiers a
//! contract's checks call (`tacho verify-commits`, `tacho review verify`).
//!
//! Pure apart from the verifiers, which read a repository through `tacho-git`. Running
//! checks, recording receipts and the completion gate are the application layer's.

pub mod commits;
pub mod plan;
pub mod review;
pub mod secrets;

pub use plan::{
    CONTRACT_DIGEST_VERSION, Plan, PlanError, Submission, check_command_problem, contract_digest,
    contract_digest_matches, contract_digest_v1, contract_digest_version, read_frozen, validate,
};
pub use tacho_schema::{Assurance, Check, Source};
