//! Frontends decide on what the application layer says in types, never on its text.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use tacho_tests::{run, tacho};

/// `tacho import` lists the entry types it does not know from the report's own list of
/// them, not by a suffix of the skipped entries' labels.
#[test]
fn import_names_the_entry_types_it_does_not_know() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let transcript = dir.path().join("abc.jsonl");
    let lines = [
        r#"{"type":"user","sessionId":"abc","cwd":"/w","timestamp":"2026-11-20T09:00:00Z","message":{"role":"user","content":"Fix it"}}"#,
        r#"{"type":"brand-new-thing","sessionId":"abc"}"#,
        r#"{"type":"attachment"}"#,
    ];
    std::fs::write(&transcript, lines.join("\n") + "\n").unwrap();
    let mut c = tacho(&home);
    c.args(["import", "claude-code"]).arg(&transcript);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("entry types this tacho does not know"))
        .unwrap_or_else(|| panic!("{out}"));
    // The known noise (`attachment`) is not among them.
    assert_eq!(
        line,
        "entry types this tacho does not know, skipped: brand-new-thing: 1"
    );

    let mut c = tacho(&home);
    c.args(["import", "claude-code", "--json"]).arg(&transcript);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        v["unknown_entries"],
        serde_json::json!({"brand-new-thing": 1}),
        "{v}"
    );
}
