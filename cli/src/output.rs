//! Output: a buffered stdout and JSON Lines. (Number and duration formats are the
//! application layer's renderers: `tacho_app::render`.)
//!
//! Every JSON record follows two conventions: it carries a `type` tag, and every time
//! given in Unix nanoseconds (`*_unix_ns`) has its RFC 3339 form beside it (the key
//! without the suffix), unless the record already has that key. (A tool call's `input`
//! is the agent's data, and an event is printed in its own JSON form, SPEC §5.1, which
//! `tacho record` reads back: both exactly as recorded.)

use std::io::{BufWriter, Stdout, Write};

use serde_json::{Map, Value};
use tacho_schema::time_to_rfc3339;

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
pub struct Out(BufWriter<Stdout>);

/// Adds the RFC 3339 form beside every `*_unix_ns` integer, at any depth.
fn with_times(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::with_capacity(m.len());
            let has: std::collections::BTreeSet<String> = m.keys().cloned().collect();
            for (k, v) in m {
                let stamp = k
                    .strip_suffix("_unix_ns")
                    .filter(|base| !base.is_empty() && !has.contains(*base))
                    .and_then(|base| v.as_i64().map(|t| (base.to_owned(), t)));
                // A tool's input is the agent's data, and events (`log dump`'s `event`,
                // `reconstruct`'s `events`) are in their own JSON form (SPEC §5.1), which
                // `tacho record` reads back: both are printed as they are.
                let v = if matches!(k.as_str(), "input" | "event" | "events") {
                    v
                } else {
                    with_times(v)
                };
                out.insert(k, v);
                if let Some((base, t)) = stamp {
                    out.insert(base, time_to_rfc3339(t).into());
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.into_iter().map(with_times).collect()),
        other => other,
    }
}

impl Out {
    pub fn new() -> Self {
        Out(BufWriter::new(std::io::stdout()))
    }

    pub fn line(&mut self, s: impl std::fmt::Display) -> Result<(), CliError> {
        writeln!(self.0, "{s}").map_err(CliError::output)
    }

    /// One JSON Lines record (that carries its own `type`).
    pub fn json(&mut self, v: &impl serde::Serialize) -> Result<(), CliError> {
        let v = serde_json::to_value(v).map_err(|e| CliError::from(std::io::Error::other(e)))?;
        self.write(&with_times(v))
    }

    /// One event in its JSON form (SPEC §5.1), exactly: what `tacho record` reads.
    pub fn event(&mut self, v: &serde_json::Value) -> Result<(), CliError> {
        self.write(v)
    }

    /// One JSON Lines record, tagged `type: kind` first when it has no `type`.
    pub fn typed(&mut self, kind: &str, v: &impl serde::Serialize) -> Result<(), CliError> {
        let v = serde_json::to_value(v).map_err(|e| CliError::from(std::io::Error::other(e)))?;
        let v = match v {
            Value::Object(m) if !m.contains_key("type") => {
                let mut o = Map::with_capacity(m.len() + 1);
                o.insert("type".into(), kind.into());
                o.extend(m);
                Value::Object(o)
            }
            other => other,
        };
        self.write(&with_times(v))
    }

    fn write(&mut self, v: &Value) -> Result<(), CliError> {
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

#[cfg(test)]
mod tests {
    use super::with_times;

    #[test]
    fn every_unix_ns_time_gets_its_rfc3339_form_beside_it() {
        let v = serde_json::json!({
            "started_unix_ns": 1_000_000_000i64,
            "started": "kept as it was",
            "steps": [{"at_unix_ns": 0, "n": 1}],
        });
        assert_eq!(
            with_times(v).to_string(),
            r#"{"started_unix_ns":1000000000,"started":"kept as it was","steps":[{"at_unix_ns":0,"at":"1970-01-01T00:00:00Z","n":1}]}"#
        );
    }
}
