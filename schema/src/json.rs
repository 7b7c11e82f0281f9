//! The JSON Lines form of events: what `tacho record` reads and `--json` prints.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::{Event, EventBody, validate_session_id};

/// A line that did not parse, with where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct JsonError {
    /// 1-based line number in the input.
    pub line: usize,
    /// 1-based column (in bytes) where the problem was found.
    pub column: usize,
    pub message: String,
}

/// A parsed line. `session` and `time_unix_ns` may be absent: `tacho record` can supply
/// the session from `--session` and the time from the clock.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedLine {
    pub session: Option<String>,
    pub time_unix_ns: Option<i64>,
    pub body: EventBody,
}

/// Parses one JSON line. `line_no` is only used in the error.
///
/// Syntax errors point at the offending character; schema errors name the field and
/// point at where its key starts in the line.
pub fn parse_json_line(text: &str, line_no: usize) -> Result<ParsedLine, JsonError> {
    match parse_valid_line(text) {
        Some(parsed) => Ok(parsed),
        None => parse_full(text, line_no),
    }
}

/// Reads the line into a JSON value, then the body from its fields, checking each
/// step so that an error can say where it lies.
fn parse_full(text: &str, line_no: usize) -> Result<ParsedLine, JsonError> {
    let err = |column: usize, message: String| JsonError {
        line: line_no,
        column: column.max(1),
        message,
    };
    let column_of = |field: &str| text.find(&format!("\"{field}\"")).map_or(1, |c| c + 1);
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        let message = e.to_string();
        let message = message.split(" at line ").next().unwrap_or("").to_string();
        err(e.column(), message)
    })?;
    let serde_json::Value::Object(mut fields) = value else {
        return Err(err(1, "an event must be a JSON object".into()));
    };
    let kind = match fields.remove("type") {
        Some(serde_json::Value::String(k)) => k,
        Some(_) => {
            return Err(err(
                column_of("type"),
                "field `type` must be a string".into(),
            ));
        }
        None => {
            return Err(err(
                1,
                "missing field `type` (the event kind, e.g. \"tool.call\")".into(),
            ));
        }
    };
    let session = match fields.remove("session") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => {
            validate_session_id(&s)
                .map_err(|m| err(column_of("session"), format!("field `session`: {m}")))?;
            Some(s)
        }
        Some(_) => {
            return Err(err(
                column_of("session"),
                "field `session` must be a string".into(),
            ));
        }
    };
    let time_unix_ns = match fields.remove("ts") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => {
            Some(parse_ts(&v).map_err(|m| err(column_of("ts"), format!("field `ts`: {m}")))?)
        }
    };
    let body =
        EventBody::from_json_fields(&kind, serde_json::Value::Object(fields)).map_err(|e| {
            let column = e.field.as_deref().map_or(1, column_of);
            err(column, e.message)
        })?;
    Ok(ParsedLine {
        session,
        time_unix_ns,
        body,
    })
}

/// A valid line, read without building a JSON value: its top-level fields are split
/// as raw text (nothing allocated per value), the envelope (`type`, `session`, `ts`) is
/// read from them, and the kind's fields are read from an object of the others.
/// Reading the line into a JSON value first allocates every key and value, and the body
/// is then built from that copy. `None` for anything unusual, even a line the full parse
/// would accept (duplicate keys, escapes in a key): the full parse then decides, and
/// explains its errors. For every line this accepts, it gives what the full parse gives.
fn parse_valid_line(text: &str) -> Option<ParsedLine> {
    parse_one_pass(text).or_else(|| parse_split(text))
}

/// The envelope of a line (`type`, `session`, `ts`), each as its raw JSON text, set
/// aside while the body is read; `repeated` when one of them came twice.
#[derive(Debug, Default)]
pub(crate) struct Envelope<'a> {
    kind: Option<&'a serde_json::value::RawValue>,
    session: Option<&'a serde_json::value::RawValue>,
    ts: Option<&'a serde_json::value::RawValue>,
    repeated: bool,
}

impl<'a> Envelope<'a> {
    /// The line read from its envelope and body, as the full parse reads them; `None`
    /// for anything it would explain (a repeated field, a bad session id or time).
    fn into_line(self, kind: &str, body: EventBody) -> Option<ParsedLine> {
        if self.repeated || serde_json::from_str::<&str>(self.kind?.get()).ok()? != kind {
            return None;
        }
        let session = match self.session {
            None => None,
            Some(v) => serde_json::from_str::<Option<String>>(v.get()).ok()?,
        };
        if let Some(s) = &session {
            validate_session_id(s).ok()?;
        }
        let time_unix_ns = match self.ts {
            None => None,
            Some(v) => match serde_json::from_str::<serde_json::Value>(v.get()).ok()? {
                serde_json::Value::Null => None,
                v => Some(parse_ts(&v).ok()?),
            },
        };
        Some(ParsedLine {
            session,
            time_unix_ns,
            body,
        })
    }
}

/// The usual line, `{"type":"KIND",...}` with `type` first: its kind is read from the
/// start of the text, then the whole line is read once, as that kind's body, the
/// envelope fields set aside as they pass (the split reading below goes over the line
/// twice and builds the body's text in between). `None` for any other line.
fn parse_one_pass(text: &str) -> Option<ParsedLine> {
    let rest = text.trim_start().strip_prefix('{')?.trim_start();
    let rest = rest.strip_prefix("\"type\"")?.trim_start();
    let rest = rest.strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let kind = rest.get(..rest.find('"')?)?;
    if kind.contains('\\') {
        return None;
    }
    let mut envelope = Envelope::default();
    let body = EventBody::from_enveloped_json(kind, text, &mut envelope)?;
    envelope.into_line(kind, body)
}

/// Reads `text` (a whole JSON object) as a `T` from every field but the envelope's,
/// which go to `envelope`, in one pass; `None` where it does not deserialize.
pub(crate) fn deserialize_enveloped<'a, T: serde::Deserialize<'a>>(
    text: &'a str,
    envelope: &mut Envelope<'a>,
) -> Option<T> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = T::deserialize(Enveloped {
        inner: &mut de,
        envelope,
    })
    .ok()?;
    de.end().ok()?;
    Some(value)
}

/// A JSON object seen without its envelope fields.
struct Enveloped<'e, 'a> {
    inner: &'e mut serde_json::Deserializer<serde_json::de::StrRead<'a>>,
    envelope: &'e mut Envelope<'a>,
}

impl<'de> serde::Deserializer<'de> for Enveloped<'_, 'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        serde::Deserializer::deserialize_map(
            self.inner,
            WithoutEnvelope {
                visitor,
                envelope: self.envelope,
            },
        )
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
        struct enum identifier ignored_any
    }
}

/// Hands a visitor the fields of a map but the envelope's.
struct WithoutEnvelope<'e, 'a, V> {
    visitor: V,
    envelope: &'e mut Envelope<'a>,
}

impl<'a, V: serde::de::Visitor<'a>> serde::de::Visitor<'a> for WithoutEnvelope<'_, 'a, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_map<A: serde::de::MapAccess<'a>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(FieldsWithoutEnvelope {
            map,
            envelope: self.envelope,
        })
    }
}

struct FieldsWithoutEnvelope<'e, 'a, A> {
    map: A,
    envelope: &'e mut Envelope<'a>,
}

impl<'a, A: serde::de::MapAccess<'a>> serde::de::MapAccess<'a>
    for FieldsWithoutEnvelope<'_, 'a, A>
{
    type Error = A::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'a>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            // (A key with escapes cannot be borrowed: an error, and the other reading.)
            let Some(key) = self.map.next_key::<&'a str>()? else {
                return Ok(None);
            };
            let slot = match key {
                "type" => &mut self.envelope.kind,
                "session" => &mut self.envelope.session,
                "ts" => &mut self.envelope.ts,
                _ => {
                    return seed
                        .deserialize(serde::de::value::BorrowedStrDeserializer::new(key))
                        .map(Some);
                }
            };
            let value: &'a serde_json::value::RawValue = self.map.next_value()?;
            self.envelope.repeated |= slot.replace(value).is_some();
        }
    }

    fn next_value_seed<S: serde::de::DeserializeSeed<'a>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A line read by splitting its top-level fields first (see [`parse_valid_line`]).
fn parse_split(text: &str) -> Option<ParsedLine> {
    let Fields(fields) = serde_json::from_str(text).ok()?;
    let (mut kind, mut session, mut ts) = (None, None, None);
    let mut body = String::with_capacity(text.len());
    body.push('{');
    for (key, value) in fields {
        let slot = match key {
            "type" => &mut kind,
            "session" => &mut session,
            "ts" => &mut ts,
            _ => {
                if body.len() > 1 {
                    body.push(',');
                }
                body.push('"');
                body.push_str(key);
                body.push_str("\":");
                body.push_str(value.get());
                continue;
            }
        };
        if slot.replace(value).is_some() {
            return None;
        }
    }
    body.push('}');
    let kind: &str = serde_json::from_str(kind?.get()).ok()?;
    let session = match session {
        None => None,
        Some(v) => serde_json::from_str::<Option<String>>(v.get()).ok()?,
    };
    if let Some(s) = &session {
        validate_session_id(s).ok()?;
    }
    let time_unix_ns = match ts {
        None => None,
        Some(v) => match serde_json::from_str::<serde_json::Value>(v.get()).ok()? {
            serde_json::Value::Null => None,
            v => Some(parse_ts(&v).ok()?),
        },
    };
    let body = EventBody::from_json_text(kind, &body)?;
    Some(ParsedLine {
        session,
        time_unix_ns,
        body,
    })
}

/// A JSON object's fields in order, each value as its raw text.
struct Fields<'a>(Vec<(&'a str, &'a serde_json::value::RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Fields<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Fields<'de>, A::Error> {
                let mut out = Vec::new();
                // Keys with escapes cannot be borrowed: an error, and the full parse.
                while let Some(entry) =
                    map.next_entry::<&'de str, &'de serde_json::value::RawValue>()?
                {
                    out.push(entry);
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

impl Event {
    /// The event as one JSON object, in the same form `tacho record` reads.
    pub fn to_json(&self) -> serde_json::Value {
        if let EventBody::Unknown {
            kind,
            version,
            payload,
        } = &self.body
        {
            return serde_json::json!({
                "session": self.session,
                "ts": time_to_rfc3339(self.time_unix_ns),
                "type": "unknown",
                "kind": kind,
                "version": version,
                "payload_bytes": payload.len(),
            });
        }
        // `type` first, then `session` and `ts`, then the kind's fields in schema order.
        let mut out = serde_json::Map::new();
        let body = match serde_json::to_value(&self.body) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        let mut fields = body.into_iter();
        if let Some((k, v)) = fields.next() {
            out.insert(k, v);
        }
        out.insert("session".into(), self.session.clone().into());
        out.insert("ts".into(), time_to_rfc3339(self.time_unix_ns).into());
        out.extend(fields);
        serde_json::Value::Object(out)
    }
}

/// Formats nanoseconds since the epoch as RFC 3339 in UTC.
pub fn time_to_rfc3339(unix_ns: i64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ns))
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| format!("@{unix_ns}ns"))
}

/// Parses an RFC 3339 time into nanoseconds since the epoch.
pub fn parse_rfc3339(s: &str) -> Result<i64, String> {
    let t = OffsetDateTime::parse(s, &Rfc3339)
        .map_err(|e| format!("{s:?} is not an RFC 3339 time like 2026-11-30T12:00:00.5Z ({e})"))?;
    i64::try_from(t.unix_timestamp_nanos()).map_err(|_| format!("{s:?} is out of range"))
}

/// `ts` is an RFC 3339 string or an integer number of milliseconds since the epoch.
pub fn parse_ts(v: &serde_json::Value) -> Result<i64, String> {
    match v {
        serde_json::Value::Number(n) => {
            let ms = n
                .as_i64()
                .ok_or_else(|| format!("{n} is not a whole number of milliseconds"))?;
            ms.checked_mul(1_000_000)
                .ok_or_else(|| format!("{ms} ms is out of range"))
        }
        serde_json::Value::String(s) => parse_rfc3339(s),
        other => Err(format!(
            "{other} is neither an RFC 3339 string nor milliseconds since the epoch"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ToolCall, ToolStatus};

    #[test]
    fn parses_a_tool_call_with_any_json_input() {
        let l = parse_json_line(
            r#"{"type":"tool.call","session":"s1","ts":"2026-11-30T12:00:00.5Z","call_id":"c1","tool":"read","input":{"path":"src/api.ts","n":[1,2]}}"#,
            1,
        )
        .unwrap();
        assert_eq!(l.session.as_deref(), Some("s1"));
        assert_eq!(l.time_unix_ns, Some(1_796_040_000_500_000_000));
        assert_eq!(
            l.body,
            EventBody::ToolCall(ToolCall {
                call_id: "c1".into(),
                tool: "read".into(),
                target: None,
                input: Some(r#"{"path":"src/api.ts","n":[1,2]}"#.into()), // compact, keys in input order
                agent: None,
            })
        );
    }

    /// The reading without a JSON value gives what the full reading gives wherever it
    /// gives anything: every line of the fixtures (every kind), which it all reads, and
    /// lines with the envelope in odd shapes, duplicate keys, escapes and wrong types.
    #[test]
    fn the_fast_reading_gives_what_the_full_reading_gives() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let mut lines: Vec<String> = Vec::new();
        for f in [
            "examples/sessions/rate-limit.jsonl",
            "tests/fixtures/kinds-added.jsonl",
            "tests/fixtures/store-v1/sources/all-kinds.jsonl",
        ] {
            let text = std::fs::read_to_string(format!("{dir}/{f}")).unwrap();
            lines.extend(text.lines().map(str::to_owned));
        }
        let fixtures = lines.len();
        assert!(fixtures > 40);
        lines.extend(
            [
                r#"{"session":"s1","ts":null,"type":"step.start","step":1}"#,
                r#"{"type":"step.start","step":1,"session":null}"#,
                r#"{"type":"step.start","step":1,"ts":1764504000000}"#,
                r#"{"type":"step.start","step":1,"ts":"2026-11-30T12:00:00Z","extra":{"a":[1,2]}}"#,
                r#"{"type":"step.start","step":1,"step":2}"#,
                r#"{"type":"step.start","type":"step.finish","step":1}"#,
                r#"{"type":"step.start","step":1,"session":"s1","session":"s2"}"#,
                r#"{"type":"step.start","step":1,"session":7}"#,
                r#"{"type":"step.start","step":1,"session":"bad id with spaces"}"#,
                r#"{"type":"step.start","step":1,"ts":1.5}"#,
                r#"{"type":"step.start","step":1,"ts":true}"#,
                r#"{"type":"tool.call","call_id":"c\u0031","tool":"re\"ad","input":{"b":1,"a":[{"x":null}]}}"#,
                r#"{"typ\u0065":"step.start","step":1}"#,
                r#" { "type" : "step.start" , "step" : 1 } "#,
                r#"{"type":"step.start","st\u0065p":1}"#,
                r#"{"type":"tool.call","call_id":"c1"}"#,
                r#"{"type":7,"step":1}"#,
                r#"{"type":"nope"}"#,
                r#"[1,2]"#,
                r#"{"type":"step.start","step":1"#,
            ]
            .map(str::to_owned),
        );
        let mut one_pass = 0;
        for (i, l) in lines.iter().enumerate() {
            let full = parse_full(l, i + 1).map_err(|e| e.to_string());
            match parse_valid_line(l) {
                Some(p) => assert_eq!(Ok(p), full, "{l}"),
                // Every fixture line is plain: only crafted ones go the full way.
                None => assert!(i >= fixtures, "{l}"),
            }
            // Both fast readings, each on its own, give what the full one gives.
            for (reading, got) in [("one pass", parse_one_pass(l)), ("split", parse_split(l))] {
                if let Some(p) = got {
                    assert_eq!(Ok(p), full, "{reading}: {l}");
                }
            }
            one_pass += usize::from(parse_one_pass(l).is_some());
        }
        // Every fixture line starts with its type: all are read in one pass.
        assert!(one_pass >= fixtures, "{one_pass} of {fixtures}");
    }

    #[test]
    fn json_round_trip_through_to_json() {
        let l = parse_json_line(
            r#"{"type":"tool.result","session":"s1","ts":1764504000000,"call_id":"c1","status":"error","error":"boom","output":"line1\nline2"}"#,
            1,
        )
        .unwrap();
        let ev = Event {
            session: "s1".into(),
            time_unix_ns: l.time_unix_ns.unwrap(),
            body: l.body.clone(),
        };
        let text = ev.to_json().to_string();
        let again = parse_json_line(&text, 1).unwrap();
        assert_eq!(again.body, l.body);
        assert!(matches!(
            again.body,
            EventBody::ToolResult(ref r) if r.status == ToolStatus::Error
        ));
    }

    #[test]
    fn errors_name_the_line_column_and_reason() {
        let e = parse_json_line(r#"{"type":"tool.call","call_id":"c1"}"#, 7).unwrap_err();
        assert_eq!(e.line, 7);
        assert!(e.message.contains("missing field `tool`"), "{e}");

        let e = parse_json_line(r#"{"type":"tool.cal","call_id":"c1"}"#, 2).unwrap_err();
        assert!(e.message.contains("unknown event type `tool.cal`"), "{e}");
        assert_eq!(e.column, 2);

        let e = parse_json_line(r#"{"type":"step.start","step":"two"}"#, 2).unwrap_err();
        assert_eq!(
            e.message,
            "field `step`: invalid type: string \"two\", expected u64"
        );
        assert_eq!(e.column, 22);

        let e = parse_json_line(r#"{"type":"step.start","step":1,"stpe":2}"#, 3).unwrap_err();
        assert!(e.message.contains("unknown field `stpe`"), "{e}");
        assert_eq!(e.column, 31, "{e}");
        assert!(
            e.message
                .starts_with("unknown field `stpe`, expected one of"),
            "{e}"
        );

        let e = parse_json_line(r#"{"type":"step.start", "step": 1,,}"#, 4).unwrap_err();
        assert_eq!(e.column, 33, "{e}"); // the second comma

        let e =
            parse_json_line(r#"{"type":"step.start","step":1,"ts":"yesterday"}"#, 5).unwrap_err();
        assert!(e.message.contains("RFC 3339"), "{e}");

        let e =
            parse_json_line(r#"{"type":"step.start","step":1,"session":"a/b"}"#, 6).unwrap_err();
        assert!(e.message.contains("field `session`"), "{e}");
    }
}
