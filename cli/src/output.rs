//! Output: a buffered stdout and JSON Lines. (Number and duration formats are the
//! application layer's renderers: `tacho_app::render`.)

use std::io::{BufWriter, Stdout, Write};

use crate::error::CliError;

/// Buffered stdout. Errors (including a closed pipe) surface as [`CliError`].
pub struct Out(BufWriter<Stdout>);

impl Out {
    pub fn new() -> Self {
        Out(BufWriter::new(std::io::stdout()))
    }

    pub fn line(&mut self, s: impl std::fmt::Display) -> Result<(), CliError> {
        writeln!(self.0, "{s}").map_err(CliError::output)
    }

    /// One JSON Lines record.
    pub fn json(&mut self, v: &impl serde::Serialize) -> Result<(), CliError> {
        serde_json::to_writer(&mut self.0, v).map_err(|e| match e.io_error_kind() {
            Some(_) => CliError::output(e.into()),
            None => CliError::from(std::io::Error::other(e)),
        })?;
        writeln!(self.0).map_err(CliError::output)
    }

    pub fn flush(&mut self) -> Result<(), CliError> {
        self.0.flush().map_err(CliError::output)
    }

    pub fn finish(mut self) -> Result<(), CliError> {
        self.flush()
    }
}
