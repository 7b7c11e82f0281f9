//! The event schema, version 1.
//!
//! Every event kind is a plain struct with two encodings: JSON through serde (what
//! `tacho record` reads and `--json` prints) and rkyv (the payload of an event frame in
//! the log). The kind's numeric id and schema version travel in the frame header, so a
//! payload never needs to say what it is, adding a kind never changes existing payloads,
//! and a reader meets kinds from a newer tacho as [`EventBody::Unknown`] instead of
//! failing. SPEC.md §"Event schema" documents every field.
//!
//! This crate knows nothing about frames, segments or files.

mod goal;
mod json;
mod kinds;
mod view;

pub use goal::{Assurance, Check, Source};
pub use json::{JsonError, ParsedLine, parse_json_line, parse_rfc3339, parse_ts, time_to_rfc3339};
pub use kinds::*;
pub use view::EventView;

/// Longest accepted session id, in bytes.
pub const SESSION_ID_BYTES_MAX: usize = 128;

/// One recorded event: which session, when, and what.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub session: String,
    /// Nanoseconds since the Unix epoch, UTC.
    pub time_unix_ns: i64,
    pub body: EventBody,
}

/// Why an event payload could not be encoded or decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("payload of kind {kind} ({name}) version {version} does not decode: {reason}")]
    BadPayload {
        kind: u16,
        name: &'static str,
        version: u16,
        reason: String,
    },
    #[error("kind {kind} ({name}) has no schema version {version} (this tacho knows 1..={known})")]
    UnknownVersion {
        kind: u16,
        name: &'static str,
        version: u16,
        known: u16,
    },
    #[error("event could not be encoded: {0}")]
    Encode(String),
}

/// Checks that a session id is usable: 1 to 128 bytes of ASCII letters, digits, `.`,
/// `_` and `-`, not starting with `.` or `-`. Ids are printed, typed and abbreviated by
/// users, so they stay printable and shell-friendly.
pub fn validate_session_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("session id is empty".into());
    }
    if id.len() > SESSION_ID_BYTES_MAX {
        return Err(format!(
            "session id is {} bytes long; the limit is {SESSION_ID_BYTES_MAX}",
            id.len()
        ));
    }
    if id.starts_with('.') || id.starts_with('-') {
        return Err(format!("session id {id:?} starts with `{}`", &id[..1]));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "session id {id:?} contains {c:?}; use letters, digits, `.`, `_` and `-`"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids() {
        assert!(validate_session_id("ses_01jf8xk").is_ok());
        assert!(validate_session_id("3f2a-UUID.like_id").is_ok());
        assert!(validate_session_id("").is_err());
        assert!(validate_session_id("../x").is_err());
        assert!(validate_session_id("a/b").is_err());
        assert!(validate_session_id("-rf").is_err());
        assert!(validate_session_id(&"a".repeat(129)).is_err());
    }
}

#[cfg(test)]
mod golden {
    use super::*;

    /// The rkyv bytes of one payload, pinned. rkyv's layout depends on cargo features
    /// (endianness, alignment, pointer width) that any crate in the graph can switch;
    /// the workspace names them explicitly, and this test catches any drift.
    #[test]
    fn tool_call_payload_bytes_are_pinned() {
        let body = EventBody::ToolCall(ToolCall {
            call_id: "c1".into(),
            tool: "read".into(),
            target: Some("src/api.ts".into()),
            input: None,
            agent: None,
        });
        let (kind, version, bytes) = body.encode().unwrap();
        assert_eq!((kind, version), (8, 1));
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "7372632f6170692e747300006331ffffffffffff72656164ffffffff010000008a000000e0ffffff000000000000000000000000000000000000000000000000"
        );
        assert_eq!(EventBody::decode(kind, version, &bytes).unwrap(), body);
    }

    #[test]
    fn archived_primitives_have_the_pinned_layout() {
        assert_eq!(
            std::mem::size_of::<rkyv::Archived<usize>>(),
            4,
            "pointer_width_32"
        );
        assert_eq!(std::mem::align_of::<rkyv::Archived<u64>>(), 8, "aligned");
        assert_eq!(
            rkyv::to_bytes::<rkyv::rancor::Error>(&0x0102_0304u32)
                .unwrap()
                .as_slice(),
            [4, 3, 2, 1],
            "little_endian"
        );
    }
}
