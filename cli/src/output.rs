//! Output: a buffered stdout and JSON Lines. (Number and duration formats are the
//! application layer's renderers: `tacho_app::render`.)
//!
//! JSON records follow the application's convention and go through its one JSON Lines
//! writer (`tacho_app::record`): a `type` tag, and the RFC 3339 form beside every
//! Unix-nanosecond time.

use std::io::{BufWriter, Stdout, Write};

use tacho_app::record::JsonLines;

use crate::error::CliError;

/// A progress bar on stderr (drawn only on a terminal; never when `hidden`), in the
/// given indicatif template.
pub fn progress_bar(template: &str, len: Option<u64>, hidden: bool) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::with_draw_target(
        len,
        if hidden {
            indicatif::ProgressDrawTarget::hidden()
        } else {
            indicatif::ProgressDrawTarget::stderr()
        },
    );
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

/// Buffered stdout. Errors (including a closed pipe) surface as [`CliError`].
pub struct Out(JsonLines<BufWriter<Stdout>>);

impl Out {
    pub fn new() -> Self {
        Out(JsonLines::new(BufWriter::new(std::io::stdout())))
    }

    pub fn line(&mut self, s: impl std::fmt::Display) -> Result<(), CliError> {
        writeln!(self.0.get_mut(), "{s}").map_err(CliError::output)
    }

    /// One JSON Lines record (that carries its own `type`).
    pub fn json(&mut self, v: &impl serde::Serialize) -> Result<(), CliError> {
        let v = serde_json::to_value(v).map_err(|e| CliError::from(std::io::Error::other(e)))?;
        self.0
            .value(&tacho_app::record::with_times(v))
            .map_err(CliError::output)
    }

    /// One event in its JSON form (SPEC §5.1), exactly: what `tacho record` reads.
    pub fn event(&mut self, v: &serde_json::Value) -> Result<(), CliError> {
        self.0.value(v).map_err(CliError::output)
    }

    /// One JSON Lines record of the application's convention (`tacho_app::record`):
    /// tagged `type: kind` first when it has no `type`, times with their RFC 3339 form.
    pub fn typed(&mut self, kind: &str, v: &impl serde::Serialize) -> Result<(), CliError> {
        self.0.record(kind, v).map_err(CliError::output)
    }

    pub fn flush(&mut self) -> Result<(), CliError> {
        self.0.flush().map_err(CliError::output)
    }

    pub fn finish(mut self) -> Result<(), CliError> {
        self.flush()
    }
}
