pub mod log;
pub mod record;
pub mod session;
