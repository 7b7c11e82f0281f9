//! The rollback property through the application layer: a session of three steps of
//! random edits (writes, deletions, mode changes), recorded with automatic snapshots;
//! then rollbacks to before step 3, step 2, step 1 and the whole session, one after the
//! other. Each leaves the workspace exactly as it was at that point, with no conflict:
//! tacho's own earlier rollbacks are not outside changes.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use tacho_app::types::Durability;
use tacho_app::{Config, Ingest, IngestOptions, Notes, Tacho};

const PATHS: [&str; 4] = ["a.txt", "b.txt", "dir/c.txt", "dir/sub/d.txt"];

#[derive(Debug, Clone)]
enum Op {
    Write(usize, u8),
    Delete(usize),
    Exec(usize, bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..PATHS.len(), 0u8..4).prop_map(|(p, v)| Op::Write(p, v)),
        (0..PATHS.len()).prop_map(Op::Delete),
        (0..PATHS.len(), any::<bool>()).prop_map(|(p, x)| Op::Exec(p, x)),
    ]
}

/// The workspace's files: path → (content, executable).
fn state(ws: &Path) -> BTreeMap<String, (String, bool)> {
    PATHS
        .iter()
        .filter_map(|p| {
            let path = ws.join(p);
            let text = std::fs::read_to_string(&path).ok()?;
            let exec = std::fs::metadata(&path).unwrap().permissions().mode() & 0o111 != 0;
            Some((p.to_string(), (text, exec)))
        })
        .collect()
}

fn apply(ws: &Path, op: &Op) {
    match *op {
        Op::Write(p, v) => {
            let path = ws.join(PATHS[p]);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("version {v}\n")).unwrap();
        }
        Op::Delete(p) => {
            let _ = std::fs::remove_file(ws.join(PATHS[p]));
        }
        Op::Exec(p, x) => {
            let path = ws.join(PATHS[p]);
            if path.exists() {
                let mode = if x { 0o755 } else { 0o644 };
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
            }
        }
    }
}

struct Quiet;
impl Notes for Quiet {
    fn note(&self, _: &str) {}
}

fn check(initial: &[Op], steps: &[Vec<Op>; 3]) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let mut cfg = Config::from_env().unwrap();
    cfg.data_dir = tmp.path().join("home");
    cfg.notes = Arc::new(Quiet);
    let t = Tacho::open(cfg).unwrap();
    for o in initial {
        apply(&ws, o);
    }
    let opts = IngestOptions {
        source: "test".into(),
        session: Some("ses_prop".into()),
        new_session: false,
        durability: Durability::Buffered,
        batch_lines: 1,
        auto_snapshots: true,
        pack_new_sessions: false,
        outside: true,
    };
    let mut ingest = Ingest::new(&t, opts, |_| Ok(())).unwrap();
    let mut line = 0;
    let mut feed = |ingest: &mut Ingest<'_>, text: String| {
        line += 1;
        ingest.line(line, &text).unwrap();
    };
    feed(
        &mut ingest,
        format!(
            r#"{{"type":"session.start","workspace":"{}"}}"#,
            ws.display()
        ),
    );
    // The state before each step: what a rollback to that step must give back.
    let mut before = Vec::new();
    for (i, ops) in steps.iter().enumerate() {
        before.push(state(&ws));
        feed(
            &mut ingest,
            format!(r#"{{"type":"step.start","step":{}}}"#, i + 1),
        );
        for o in ops {
            apply(&ws, o);
        }
        feed(
            &mut ingest,
            format!(r#"{{"type":"step.finish","step":{}}}"#, i + 1),
        );
    }
    feed(
        &mut ingest,
        r#"{"type":"session.end","reason":"completed"}"#.into(),
    );
    ingest.finish().unwrap();
    for (step, want) in [
        (Some(3), &before[2]),
        (Some(2), &before[1]),
        (Some(1), &before[0]),
        (None, &before[0]),
    ] {
        let p = t.plan_rollback("ses_prop", step, false, false).unwrap();
        assert!(
            p.plan.conflicts.is_empty(),
            "step {step:?}: {:?}",
            p.plan.conflicts
        );
        let done = t.apply_rollback(&p).unwrap();
        assert!(done.applied.failed.is_empty(), "{:?}", done.applied.failed);
        assert_eq!(
            &state(&ws),
            want,
            "after the rollback to before step {step:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn stepping_back_three_two_one_then_the_whole_session(
        initial in prop::collection::vec(op(), 0..5),
        s1 in prop::collection::vec(op(), 1..4),
        s2 in prop::collection::vec(op(), 1..4),
        s3 in prop::collection::vec(op(), 1..4),
    ) {
        check(&initial, &[s1, s2, s3]);
    }
}
