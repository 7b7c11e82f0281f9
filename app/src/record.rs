//! The JSON record convention every frontend prints with (the CLI's `--json`, MCP's
//! structured results, the web report's data): one record per fact, in the same form
//! wherever it is printed.
//!
//! - A record carries a `type` tag (first), naming what it is (`risk`, `graph`,
//!   `session`, `trace`, ...).
//! - Every time given in Unix nanoseconds (a key ending `_unix_ns`) has its RFC 3339
//!   form beside it, under the key without the suffix, unless the record already has
//!   that key.
//! - A tool call's `input` is the agent's data, and an event (`event`, `events`) is in
//!   its own JSON form (SPEC §5.1, what `tacho record` reads back): both are left as
//!   recorded.
//!
//! [`record`] makes one; [`JsonLines`] writes them, one per line.

use std::io::Write;

use serde::Serialize;
use serde_json::{Map, Value};
use tacho_schema::time_to_rfc3339;

/// Keys whose values are data of their own, printed exactly as recorded.
const VERBATIM: [&str; 3] = ["input", "event", "events"];

/// Adds the RFC 3339 form beside every `*_unix_ns` integer, at any depth.
pub fn with_times(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::with_capacity(m.len());
            let has: std::collections::BTreeSet<String> = m.keys().cloned().collect();
            for (k, v) in m {
                let stamp = k
                    .strip_suffix("_unix_ns")
                    .filter(|base| !base.is_empty() && !has.contains(*base))
                    .and_then(|base| v.as_i64().map(|t| (base.to_owned(), t)));
                let v = if VERBATIM.contains(&k.as_str()) {
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

/// A record of `kind`: the value's JSON form, tagged `type: kind` first when it has
/// no `type` of its own, with the RFC 3339 sibling of every Unix-nanosecond time.
pub fn record(kind: &str, v: &impl Serialize) -> Result<Value, serde_json::Error> {
    let v = match serde_json::to_value(v)? {
        Value::Object(m) if !m.contains_key("type") => {
            let mut o = Map::with_capacity(m.len() + 1);
            o.insert("type".into(), kind.into());
            o.extend(m);
            Value::Object(o)
        }
        other => other,
    };
    Ok(with_times(v))
}

/// A JSON Lines writer of records (and of events in their own form).
pub struct JsonLines<W: Write> {
    out: W,
}

impl<W: Write> JsonLines<W> {
    pub fn new(out: W) -> Self {
        JsonLines { out }
    }

    /// One record of `kind` (see [`record`]).
    pub fn record(&mut self, kind: &str, v: &impl Serialize) -> std::io::Result<()> {
        let v = record(kind, v).map_err(std::io::Error::other)?;
        self.value(&v)
    }

    /// One value as it is: a record already made, or an event in its JSON form
    /// (SPEC §5.1), which `tacho record` reads back.
    pub fn value(&mut self, v: &Value) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.out, v).map_err(|e| match e.io_error_kind() {
            Some(kind) => std::io::Error::new(kind, e),
            None => std::io::Error::other(e),
        })?;
        self.out.write_all(b"\n")
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unix_ns_time_gets_its_rfc3339_form_beside_it() {
        let v = serde_json::json!({
            "started_unix_ns": 1_000_000_000i64,
            "started": "kept as it was",
            "steps": [{"at_unix_ns": 0, "n": 1}],
            "input": {"x_unix_ns": 5},
        });
        assert_eq!(
            with_times(v).to_string(),
            r#"{"started_unix_ns":1000000000,"started":"kept as it was","steps":[{"at_unix_ns":0,"at":"1970-01-01T00:00:00Z","n":1}],"input":{"x_unix_ns":5}}"#
        );
    }

    #[test]
    fn a_record_is_tagged_first_unless_it_has_a_type() {
        #[derive(Serialize)]
        struct R {
            score: u32,
            at_unix_ns: i64,
        }
        let r = record(
            "risk",
            &R {
                score: 3,
                at_unix_ns: 0,
            },
        )
        .map(|v| v.to_string());
        assert_eq!(
            r.ok().as_deref(),
            Some(r#"{"type":"risk","score":3,"at_unix_ns":0,"at":"1970-01-01T00:00:00Z"}"#)
        );
        let tagged = record("x", &serde_json::json!({"type": "own"})).map(|v| v.to_string());
        assert_eq!(tagged.ok().as_deref(), Some(r#"{"type":"own"}"#));
    }
}
