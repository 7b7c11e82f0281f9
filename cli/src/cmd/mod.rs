pub mod graph;
pub mod log;
pub mod record;
pub mod risk;
pub mod session;
