pub mod compare;
pub mod demo;
pub mod graph;
pub mod log;
pub mod record;
pub mod replay;
pub mod risk;
pub mod session;
