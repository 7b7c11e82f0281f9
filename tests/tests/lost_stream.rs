//! A session's stream directory deleted whole is lost data: `tacho log verify` says the
//! stream is missing (its lock's checkpoint counts the events its writers synced), not
//! only that the derived index lists a session the store does not hold.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use tacho_tests::{run, run_with_stdin, tacho};

#[test]
fn a_deleted_stream_is_reported_missing_by_log_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    for s in ["ses_kept", "ses_gone"] {
        // One batch per line, as hooks write: each session a stream of its own.
        for line in [
            format!(r#"{{"type":"session.start","session":"{s}"}}"#),
            format!(r#"{{"type":"error","session":"{s}","message":"x"}}"#),
        ] {
            let (code, _, err) = run_with_stdin(&home, &["record", "--snapshots", "off"], &line);
            assert_eq!(code, 0, "{err}");
        }
    }
    let verify = || {
        let mut c = tacho(&home);
        c.args(["log", "verify"]);
        run(c)
    };
    let (code, _, err) = verify();
    assert_eq!(code, 0, "{err}");
    std::fs::remove_dir_all(home.join("log/streams/ses_gone")).unwrap();
    let (code, out, err) = verify();
    assert_eq!(code, 1, "{out}{err}");
    let text = format!("{out}{err}");
    assert!(
        text.lines()
            .any(|l| l.contains("ses_gone") && l.contains("the session's stream is missing")),
        "{text}"
    );
}
