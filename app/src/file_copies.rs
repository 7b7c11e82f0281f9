//! Whole files inside tool outputs, stored once (SPEC.md §5.4): an edit tool's result
//! may carry the whole file as it was before the edit (Claude Code's `originalFile`),
//! which the call's before-snapshot holds already. Such a string is recorded as a
//! reference to that file of that snapshot, and expanded back, byte for byte, where the
//! output is replayed.
//!
//! Nothing here names an agent: any output that is a JSON object, written as
//! `serde_json` writes it, whose string values of [`FILE_COPY_MIN`] bytes or more are
//! exactly a file the session's snapshot holds at a path the call edited.

use serde_json::{Map, Value};
use tacho_git::snapshot::{SnapshotError, SnapshotStore};

/// Shorter strings are kept where they are: a reference costs about 200 bytes.
pub const FILE_COPY_MIN: usize = 16 * 1024;

/// The key of a reference object: `{"tacho:file": {"snapshot", "path", "blob", "bytes"}}`.
pub const FILE_REF_KEY: &str = "tacho:file";

/// A file a snapshot holds: the snapshot's id, the file's path in it, its blob id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldFile {
    pub snapshot: String,
    pub path: String,
    pub blob: String,
}

/// `output` with each string value (at any depth) of [`FILE_COPY_MIN`] bytes or more
/// whose Git blob id is one of `held`'s replaced by a reference to that file; `None`
/// when nothing is replaced. Only an output that is a JSON object written exactly as
/// `serde_json` writes it, holding no reference key of its own, is touched: expanding
/// the result then gives `output` back byte for byte.
pub fn elide(output: &str, held: &[HeldFile]) -> Option<String> {
    if held.is_empty() || output.len() < FILE_COPY_MIN || output.contains(FILE_REF_KEY) {
        return None;
    }
    let mut value: Value = serde_json::from_str(output).ok()?;
    if !value.is_object() || serde_json::to_string(&value).ok()? != output {
        return None;
    }
    let mut replaced = 0usize;
    let mut originals: std::collections::HashMap<String, String> = Default::default();
    replace_strings(&mut value, &mut |s| {
        if s.len() < FILE_COPY_MIN {
            return None;
        }
        let id = gix_blob_id(s.as_bytes())?;
        let file = held.iter().find(|h| h.blob == id)?;
        replaced += 1;
        originals.insert(id, s.to_owned());
        Some(reference(file, s.len()))
    });
    if replaced == 0 {
        return None;
    }
    let shorter = serde_json::to_string(&value).ok()?;
    // Kept only if it reads back into `output`: a reference adds two levels, and an
    // output already near the reader's depth limit would be recorded past it.
    let mut back: Value = serde_json::from_str(&shorter).ok()?;
    let mut ok = true;
    expand_refs(&mut back, &mut |r| {
        let blob = r.get("blob").and_then(Value::as_str);
        let text = blob.and_then(|b| originals.get(b).cloned());
        ok &= text.is_some();
        text
    });
    (ok && serde_json::to_string(&back).ok()? == output).then_some(shorter)
}

/// `output` with each reference [`elide`] wrote replaced by the file it names, read
/// from `store` (whose reads check every object against its id): the output as the
/// agent gave it. Only a reference `tacho_wrote` accepts is expanded — one naming a
/// snapshot of the session and a path the call edited, as [`elide`] only ever writes:
/// an agent's own output that looks like a reference (a shell printing one) is given
/// as it is. An output without references is returned as it is.
pub fn expand(
    output: &str,
    store: &SnapshotStore,
    tacho_wrote: &dyn Fn(&str, &str) -> bool,
) -> Result<String, ExpandError> {
    if !output.contains(FILE_REF_KEY) {
        return Ok(output.to_owned());
    }
    let Ok(mut value) = serde_json::from_str::<Value>(output) else {
        return Ok(output.to_owned());
    };
    let mut failed = None;
    expand_refs(&mut value, &mut |r| {
        let named = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or_default();
        if !tacho_wrote(named("snapshot"), named("path")) {
            return None;
        }
        match read_ref(r, store) {
            Ok(text) => Some(text),
            Err(e) => {
                failed.get_or_insert(e);
                None
            }
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    serde_json::to_string(&value).map_err(|e| ExpandError::Malformed(e.to_string()))
}

/// Why a reference could not be expanded.
#[derive(Debug, thiserror::Error)]
pub enum ExpandError {
    #[error("a file reference in a tool output is malformed: {0}")]
    Malformed(String),
    #[error("snapshot {snapshot} holds no file {path} with blob {blob}")]
    Missing {
        snapshot: String,
        path: String,
        blob: String,
    },
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

fn reference(file: &HeldFile, bytes: usize) -> Value {
    serde_json::json!({FILE_REF_KEY: {
        "snapshot": file.snapshot, "path": file.path, "blob": file.blob, "bytes": bytes,
    }})
}

/// The Git blob id of `data` (as the snapshot store names it), in hex.
fn gix_blob_id(data: &[u8]) -> Option<String> {
    Some(tacho_git::snapshot::blob_id(data)).filter(|id| !id.is_empty())
}

/// Calls `f` on every string value; a value it answers is put in the string's place.
fn replace_strings(v: &mut Value, f: &mut dyn FnMut(&str) -> Option<Value>) {
    match v {
        Value::String(s) => {
            if let Some(new) = f(s) {
                *v = new;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| replace_strings(i, f)),
        Value::Object(m) => m.values_mut().for_each(|i| replace_strings(i, f)),
        _ => {}
    }
}

/// Calls `f` on every reference object; the text it answers takes the object's place.
fn expand_refs(v: &mut Value, f: &mut dyn FnMut(&Map<String, Value>) -> Option<String>) {
    if let Value::Object(m) = v
        && m.len() == 1
        && let Some(Value::Object(r)) = m.get(FILE_REF_KEY)
    {
        if let Some(text) = f(r) {
            *v = Value::String(text);
        }
        return;
    }
    match v {
        Value::Array(items) => items.iter_mut().for_each(|i| expand_refs(i, f)),
        Value::Object(m) => m.values_mut().for_each(|i| expand_refs(i, f)),
        _ => {}
    }
}

fn read_ref(r: &Map<String, Value>, store: &SnapshotStore) -> Result<String, ExpandError> {
    let field = |k: &str| {
        r.get(k)
            .and_then(Value::as_str)
            .ok_or_else(|| ExpandError::Malformed(format!("no {k}")))
    };
    let (snapshot, path, blob) = (field("snapshot")?, field("path")?, field("blob")?);
    let missing = || ExpandError::Missing {
        snapshot: snapshot.to_owned(),
        path: path.to_owned(),
        blob: blob.to_owned(),
    };
    let entry = store.entry(snapshot, path)?.ok_or_else(missing)?;
    if entry.oid.to_hex() != blob {
        return Err(missing());
    }
    let data = store.blob(entry.oid)?;
    if r.get("bytes").and_then(Value::as_u64) != Some(data.len() as u64) {
        return Err(ExpandError::Malformed(format!(
            "{path} in snapshot {snapshot} is not of the size the reference gives"
        )));
    }
    String::from_utf8(data).map_err(|_| ExpandError::Malformed(format!("{path} is not text")))
}

impl crate::Tacho {
    /// A tool result's output as the agent gave it: the recorded output with each
    /// whole file stored once put back in its place, byte for byte (SPEC.md §5.4) —
    /// a reference that names `snapshot` (the session's last snapshot before the
    /// result, the one [`elide`] was given) and one of `edited` (the paths the call's
    /// `file.edit` events name), each path once, as only tacho writes them.
    pub fn tool_output(
        &self,
        stored: &str,
        snapshot: Option<&str>,
        edited: &[String],
    ) -> Result<String, ExpandError> {
        let Some(snapshot) = snapshot.filter(|_| stored.contains(FILE_REF_KEY)) else {
            return Ok(stored.to_owned());
        };
        let expanded = std::cell::RefCell::new(std::collections::HashSet::new());
        expand(stored, self.snapshots()?, &|s, path| {
            s == snapshot
                && edited.iter().any(|p| p == path)
                && expanded.borrow_mut().insert(path.to_owned())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_of(text: &str) -> HeldFile {
        HeldFile {
            snapshot: "0".repeat(40),
            path: "src/big.rs".into(),
            blob: gix_blob_id(text.as_bytes()).unwrap_or_default(),
        }
    }

    #[test]
    fn a_whole_file_in_an_output_becomes_a_reference_and_nothing_else_changes() {
        let file = "fn main() {}\n\"quoted\" \\ \u{1}\n".repeat(2000);
        let resp = serde_json::json!({
            "filePath": "/w/src/big.rs", "oldString": "a", "newString": "b",
            "originalFile": file, "structuredPatch": [{"lines": ["-a", "+b"]}],
        });
        let output = resp.to_string();
        let out = elide(&output, &[held_of(&file)]).unwrap_or_default();
        assert!(out.len() < 1000, "{out}");
        assert!(out.contains(FILE_REF_KEY) && out.contains("\"structuredPatch\""));
        // What expand writes back (with the file put in place) is the output itself.
        let mut v: Value = serde_json::from_str(&out).unwrap_or_default();
        expand_refs(&mut v, &mut |_| Some(file.clone()));
        assert_eq!(serde_json::to_string(&v).unwrap_or_default(), output);
    }

    #[test]
    fn an_output_is_left_alone_unless_the_snapshot_holds_exactly_that_file() {
        let file = "x".repeat(FILE_COPY_MIN + 1);
        let output = serde_json::json!({"originalFile": file}).to_string();
        // Another file.
        assert_eq!(elide(&output, &[held_of(&format!("{file}y"))]), None);
        // Not written as serde_json writes it: expanding could not give it back.
        let spaced = output.replacen(':', ": ", 1);
        assert_eq!(elide(&spaced, &[held_of(&file)]), None);
        // An output holding the reference key itself.
        let own = serde_json::json!({"originalFile": file, "n": FILE_REF_KEY}).to_string();
        assert_eq!(elide(&own, &[held_of(&file)]), None);
        // Shorter than a reference is worth.
        let small = "y".repeat(100);
        let output = serde_json::json!({"originalFile": small}).to_string();
        assert_eq!(elide(&output, &[held_of(&small)]), None);
        // Not an object.
        let text = serde_json::to_string(&file).unwrap_or_default();
        assert_eq!(elide(&text, &[held_of(&file)]), None);
    }

    /// Red team, regression: outputs whose JSON serde_json would write otherwise
    /// (exponents, negative zero, duplicate keys, escapes it does not use, a lone
    /// surrogate) are never elided: expanding could not give them back.
    #[test]
    fn unusual_json_is_never_elided() {
        let file = "z".repeat(FILE_COPY_MIN + 1);
        let held = [held_of(&file)];
        let canonical = serde_json::json!({"originalFile": file}).to_string();
        assert!(elide(&canonical, &held).is_some());
        let body = &canonical[1..canonical.len() - 1];
        for odd in [
            format!("{{{body},\"n\":1e5}}"),
            format!("{{{body},\"n\":-0}}"),
            format!("{{{body},\"n\":1.50}}"),
            format!("{{{body},\"originalFile\":\"x\"}}"),
            format!("{{\"originalFile\":\"x\",{body}}}"),
            format!("{{{body},\"n\":\"\\u0041\"}}"),
            format!("{{{body},\"n\":\"\\/\"}}"),
            format!("{{{body},\"n\":\"\\ud800\"}}"),
            format!("{{{body} }}"),
        ] {
            assert_eq!(elide(&odd, &held), None, "{}", &odd[odd.len() - 30..]);
        }
    }
}
