//! The application layer driven directly, with a fixed clock and fixed ids: the same
//! operations give the same store, byte for byte, and errors are told apart by their
//! variants and kinds.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tacho_app::types::{Durability, StoreError, hex};
use tacho_app::{
    Clock, Config, ErrorKind, Ids, Ingest, IngestOptions, Kind, ListError, ListFilter, Notes,
    RollbackError, Tacho,
};

/// 2026-12-01T00:00:00Z, one millisecond more at every reading.
struct FixedClock(AtomicU64);

impl Clock for FixedClock {
    fn now_unix_ns(&self) -> i64 {
        1_795_996_800_000_000_000 + self.0.fetch_add(1, Ordering::SeqCst) as i64 * 1_000_000
    }
}

struct CountingIds(AtomicU64);

impl Ids for CountingIds {
    fn session_id(&self) -> String {
        format!("ses_fixed{:04}", self.0.fetch_add(1, Ordering::SeqCst))
    }
    fn goal_id(&self) -> String {
        format!("goal_fixed{:04}", self.0.fetch_add(1, Ordering::SeqCst))
    }
}

#[derive(Default)]
struct Collected(std::sync::Mutex<Vec<String>>);

impl Notes for Collected {
    fn note(&self, text: &str) {
        self.0.lock().unwrap().push(text.to_owned());
    }
}

fn open(dir: &Path, notes: Arc<Collected>) -> Tacho {
    let mut cfg = Config::from_env().unwrap();
    cfg.data_dir = dir.to_path_buf();
    cfg.clock = Arc::new(FixedClock(AtomicU64::new(0)));
    cfg.ids = Arc::new(CountingIds(AtomicU64::new(1)));
    cfg.notes = notes;
    Tacho::open(cfg).unwrap()
}

const EXAMPLE: &str = include_str!("../../examples/sessions/rate-limit.jsonl");

/// Records the bundled example under a fresh id (without `ts` on its first line, so
/// the clock is read) and branches it; returns the store digest. With `packed`, the
/// input's new sessions go into a pack, as `tacho record` writes them.
fn run_operations_with(t: &Tacho, packed: bool) -> (String, Vec<String>) {
    let mut ingest = Ingest::new(
        t,
        IngestOptions {
            source: "example".into(),
            session: None,
            new_session: true,
            durability: Durability::Buffered,
            batch_lines: 0,
            auto_snapshots: false,
            pack_new_sessions: packed,
            outside: true,
        },
        |_| Ok(()),
    )
    .unwrap();
    for (i, line) in EXAMPLE.lines().enumerate() {
        ingest.line(i + 1, line).unwrap();
    }
    // A line without `ts`: stamped by the clock.
    ingest
        .line(
            1000,
            r#"{"type":"session.start","session":"clocked","agent":"a"}"#,
        )
        .unwrap();
    let totals = ingest.finish().unwrap().totals;
    let recorded: Vec<String> = totals.keys().cloned().collect();
    let b = t.branch(&recorded[0], Some("step 2"), None).unwrap();
    let report = t.verify_store(true, None, &mut |_, _| {}).unwrap();
    let mut ids = recorded;
    ids.push(b.session);
    (hex(&report.store_digest()), ids)
}

fn run_operations(t: &Tacho) -> (String, Vec<String>) {
    run_operations_with(t, false)
}

#[test]
fn a_fixed_clock_and_fixed_ids_give_the_same_store() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ta = open(a.path(), Arc::default());
    let tb = open(b.path(), Arc::default());
    let (da, ids_a) = run_operations(&ta);
    let (db, ids_b) = run_operations(&tb);
    assert_eq!(
        ids_a,
        vec!["ses_fixed0001", "ses_fixed0002", "ses_fixed0003"]
    );
    assert_eq!(ids_a, ids_b);
    assert_eq!(da, db, "same operations, same clock and ids: same bytes");
    assert!(!a.path().join("log/packs").exists());
    // Packed, the two new sessions of the input have the heads streams give them.
    let c = tempfile::tempdir().unwrap();
    let tc = open(c.path(), Arc::default());
    let (dc, ids_c) = run_operations_with(&tc, true);
    assert_eq!((dc, ids_c), (da.clone(), ids_a.clone()));
    assert!(!c.path().join("log/streams/ses_fixed0001").exists());
    assert_eq!(
        std::fs::read_dir(c.path().join("log/packs"))
            .unwrap()
            .count(),
        2
    ); // and .lock
    // The line without a time was stamped by the clock, not the wall time.
    let events = ta.events("ses_fixed0002").unwrap();
    assert_eq!(events[0].event.time_unix_ns, 1_795_996_800_000_000_000);
    // The branch starts when the run it was cut from started.
    let branch = ta.events("ses_fixed0003").unwrap();
    let parent = ta.events("ses_fixed0001").unwrap();
    assert_eq!(branch[0].event.time_unix_ns, parent[0].event.time_unix_ns);
}

#[test]
fn errors_are_told_apart_by_variant_and_kind() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path(), Arc::default());
    let (_, ids) = run_operations(&t);

    let e = t.resolve_session("ses_nope").unwrap_err();
    assert!(matches!(e, StoreError::UnknownSession { .. }), "{e}");
    assert_eq!(e.kind(), ErrorKind::NotFound);

    let e = t
        .list_sessions(
            &ListFilter {
                since: Some("yesterday".into()),
                ..ListFilter::default()
            },
            None,
        )
        .unwrap_err();
    assert!(matches!(e, ListError::BadSince(_)), "{e}");
    assert_eq!(e.kind(), ErrorKind::Input);

    // Recorded without snapshots: nothing to roll back to, said as such.
    let e = t.plan_rollback(&ids[0], None, false, true).unwrap_err();
    assert!(matches!(e, RollbackError::NoSnapshot(_)), "{e}");
    assert_eq!(e.kind(), ErrorKind::Input);
    let e = t.plan_rollback(&ids[0], Some(99), false, true).unwrap_err();
    assert!(matches!(e, RollbackError::NoStep { step: 99, .. }), "{e}");
}

#[test]
fn notes_go_to_the_sink_and_results_carry_the_stall_rule() {
    let dir = tempfile::tempdir().unwrap();
    let notes = Arc::new(Collected::default());
    let t = open(dir.path(), notes.clone());
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    let mut ingest = Ingest::new(
        &t,
        IngestOptions {
            source: "test".into(),
            session: Some("ses_goal".into()),
            new_session: false,
            durability: Durability::Sync,
            batch_lines: 0,
            auto_snapshots: false,
            pack_new_sessions: false,
            outside: true,
        },
        |_| Ok(()),
    )
    .unwrap();
    ingest
        .line(
            1,
            &format!(
                r#"{{"type":"session.start","workspace":"{}"}}"#,
                ws.display()
            ),
        )
        .unwrap();
    ingest.finish().unwrap();
    std::fs::write(ws.join("check.sh"), "exit 1\n").unwrap();
    let plan = "# Value\nGoal kind: bugfix\n\n## Acceptance criteria\n- AC1: it holds\n\n## Verification plan\nRun the check.\n\n## Non-goals\n- anything else\n\n## Assumed scope\n.\n\n## Assurance contract\n```json\n{\"version\": 1, \"sourcePaths\": [\".\"], \"checks\": [{\"id\": \"fails\", \"acceptanceIds\": [\"AC1\"], \"command\": \"sh check.sh\", \"purpose\": \"fails\", \"environment\": \"the workspace\"}]}\n```\n";
    // The frontend resolves what its user gave (here a prefix) once.
    let ses = t.resolve_session("ses_go").unwrap();
    assert_eq!(ses, "ses_goal");
    let frozen = t
        .create_goal(tacho_app::CreateRequest {
            session: &ses,
            markdown: plan,
            source_name: "plan",
            objective: None,
            assure: true,
            workspace: None,
        })
        .unwrap();
    assert_eq!(frozen.goal, "goal_fixed0001");
    let r = t
        .run_check(&ses, None, "fails", std::time::Duration::from_secs(60))
        .unwrap();
    assert!(!r.passed);
    assert!(
        notes.0.lock().unwrap()[0].starts_with("running check fails in "),
        "{:?}",
        notes.0.lock().unwrap()
    );
    let first = t.complete_goal(&ses, None).unwrap();
    assert!(!first.accepted && first.note.is_none() && first.stall.is_none());
    let second = t.complete_goal(&ses, None).unwrap();
    assert_eq!(second.stall, Some(tacho_app::Stall::Hint));
    assert!(second.note.unwrap().starts_with("hint: "));
    let third = t.complete_goal(&ses, None).unwrap();
    assert_eq!(third.stall, Some(tacho_app::Stall::Paused));
    assert!(third.note.unwrap().starts_with("goal paused (stalled: 3"));
    let status = t.goal_status(&ses, None).unwrap();
    assert!(status.paused.is_some());
}

/// An ingest folds sessions only up to its budget of events: the session that would
/// pass it, and a session longer than the whole budget, get no facts from the ingest
/// (memory stays bounded), and the index computes theirs from the streams when a
/// listing first needs them, the same as a rebuild does.
#[test]
fn sessions_beyond_the_fold_budget_get_their_facts_from_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path(), Arc::default());
    let example: Vec<&str> = EXAMPLE.lines().collect();
    let id = "ses_01jdemo8xk4rate1imit0000a";
    let mut lines: Vec<String> = Vec::new();
    for s in ["ses_a", "ses_b"] {
        lines.extend(example.iter().map(|l| l.replace(id, s)));
    }
    // A long one: the example's middle three times over.
    let (first, rest) = example.split_first().unwrap();
    let (last, middle) = rest.split_last().unwrap();
    lines.push(first.replace(id, "ses_long"));
    for _ in 0..3 {
        lines.extend(middle.iter().map(|l| l.replace(id, "ses_long")));
    }
    lines.push(last.replace(id, "ses_long"));
    assert_eq!(example.len(), 48);
    let mut ingest = Ingest::new(
        &t,
        IngestOptions {
            source: "budget".into(),
            session: None,
            new_session: false,
            durability: Durability::Sync,
            batch_lines: 20,
            auto_snapshots: false,
            pack_new_sessions: false,
            outside: true,
        },
        |_| Ok(()),
    )
    .unwrap()
    .with_fold_budget(60);
    for (i, line) in lines.iter().enumerate() {
        ingest.line(i + 1, line).unwrap();
    }
    ingest.finish().unwrap();

    let store = tacho_store::Store::open(dir.path().join("log"), Default::default()).unwrap();
    let facts = |store: &tacho_store::Store| -> Vec<(String, Option<u64>)> {
        let mut v: Vec<_> = store
            .index()
            .unwrap()
            .entries()
            .into_iter()
            .map(|e| (e.session.clone(), e.fresh_facts().map(|f| f.events)))
            .collect();
        v.sort();
        v
    };
    // ses_a (48 events) fits; ses_b would take the folds to 96; ses_long alone is 140.
    assert_eq!(
        facts(&store),
        [
            ("ses_a".to_string(), Some(48)),
            ("ses_b".to_string(), None),
            ("ses_long".to_string(), None),
        ]
    );
    let listing = |t: &Tacho| -> Vec<String> {
        t.list_sessions(&ListFilter::default(), None)
            .unwrap()
            .iter()
            .map(|r| format!("{:?} {} {:?}", r.summary, r.risk_score, r.risk_level))
            .collect()
    };
    let listed = listing(&t);
    assert_eq!(listed.len(), 3);
    assert_eq!(
        facts(&store),
        [
            ("ses_a".to_string(), Some(48)),
            ("ses_b".to_string(), Some(48)),
            ("ses_long".to_string(), Some(140)),
        ],
        "the listing computed and recorded the missing facts"
    );
    let kept = store.index().unwrap().entries();
    store.index_delete().unwrap();
    assert_eq!(listing(&t), listed, "a rebuilt index answers the same");
    let mut rebuilt = store.index().unwrap().entries();
    let mut kept = kept;
    kept.sort_by(|a, b| a.session.cmp(&b.session));
    rebuilt.sort_by(|a, b| a.session.cmp(&b.session));
    assert_eq!(kept, rebuilt);
}

/// Transcripts are imported in chunks, each through one ingest with its new sessions in
/// one pack. A transcript that cannot be recorded fails alone: its chunk is imported
/// again one transcript at a time, counted once. Importing again adds nothing.
#[test]
fn transcripts_import_together_and_a_refused_one_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(&dir.path().join("home"), Arc::default());
    let transcript = |sid: &str| -> String {
        let sid = format!(r#","sessionId":"{sid}""#);
        let mut lines = vec![format!(
            r#"{{"type":"user"{sid},"cwd":"/w","timestamp":"2026-11-20T09:00:00Z","message":{{"role":"user","content":"Fix it"}}}}"#
        )];
        for k in 0..3 {
            lines.push(format!(
                r#"{{"type":"assistant"{sid},"timestamp":"2026-11-20T09:0{k}:01Z","message":{{"id":"m{k}","model":"x","usage":{{"input_tokens":5,"output_tokens":7}},"content":[{{"type":"tool_use","id":"t{k}","name":"Write","input":{{"file_path":"/w/a{k}"}}}}]}}}}"#
            ));
            lines.push(format!(
                r#"{{"type":"user"{sid},"timestamp":"2026-11-20T09:0{k}:03Z","message":{{"content":[{{"type":"tool_result","tool_use_id":"t{k}","content":"written"}}]}},"toolUseResult":{{"type":"create"}}}}"#
            ));
        }
        lines.join("\n") + "\n"
    };
    let write_all = |name: &str| -> Vec<std::path::PathBuf> {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        (0..20)
            .map(|k| {
                let f = d.join(format!("{k:02}.jsonl"));
                std::fs::write(&f, transcript(&format!("imp-{name}{k:02}"))).unwrap();
                f
            })
            .collect()
    };
    let packs = || {
        std::fs::read_dir(dir.path().join("home/log/packs"))
            .map(|rd| {
                rd.filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .file_name()
                        .to_string_lossy()
                        .ends_with(".tpack")
                })
                .count()
            })
            .unwrap_or(0)
    };
    let import = |files: &[std::path::PathBuf]| {
        let opts = tacho_app::import::ImportOptions { stale_after: None };
        t.import_transcripts(
            tacho_agents::Agent::ClaudeCode,
            files,
            &opts,
            &mut |_, _| {},
        )
    };
    // Twenty transcripts: one chunk, one pack.
    let files_a = write_all("a");
    let r = import(&files_a);
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert_eq!(r.sessions_created, 20);
    let per = r.events_added / 20;
    assert!(per > 3 && r.events_added == per * 20, "{r:?}");
    assert_eq!(packs(), 1);
    // Twenty more, one of which the store cannot take (a file stands where its
    // session's directory goes): it fails, the others are recorded one by one (no
    // pack), and nothing is counted twice.
    std::fs::write(dir.path().join("home/log/streams/imp-b07"), "in the way").unwrap();
    let files_b = write_all("b");
    let r = import(&files_b);
    assert_eq!(r.failed.len(), 1, "{:?}", r.failed);
    assert!(r.failed[0].file.ends_with("07.jsonl"), "{:?}", r.failed);
    assert_eq!(
        (
            r.sessions_created,
            r.events_added,
            r.events_already_recorded
        ),
        (19, per * 19, 0),
        "{r:?}"
    );
    assert_eq!(packs(), 1);
    for k in (0..20).filter(|k| *k != 7) {
        let s = format!("imp-b{k:02}");
        assert_eq!(t.events(&s).unwrap().len() as u64, per, "{s}");
    }
    // Everything again: nothing added.
    let all: Vec<_> = files_a.iter().chain(&files_b).cloned().collect();
    let r = import(&all);
    assert_eq!((r.events_added, r.sessions_unchanged), (0, 39), "{r:?}");
    assert_eq!(r.failed.len(), 1, "{:?}", r.failed);
}

/// A clock that a test moves forward.
struct MovableClock(AtomicU64);

impl Clock for MovableClock {
    fn now_unix_ns(&self) -> i64 {
        1_795_996_800_000_000_000 + self.0.fetch_add(1_000_000, Ordering::SeqCst) as i64
    }
}

/// `audit prune --include-unended` of a session the hooks record takes the hooks'
/// state with it: the agent's later events start the session again, instead of being
/// appended to a stream that is gone (and refused, recording nothing).
#[test]
fn pruning_a_hooked_session_takes_its_hook_state_and_recording_goes_on() {
    use tacho_app::agents::Agent;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let clock = Arc::new(MovableClock(AtomicU64::new(0)));
    let mut cfg = Config::from_env().unwrap();
    cfg.data_dir = dir.path().join("data");
    cfg.clock = clock.clone();
    cfg.notes = Arc::new(Collected::default());
    let t = Tacho::open(cfg).unwrap();
    let payload = |event: &str, extra: &str| {
        format!(
            "{{\"session_id\":\"pruned-1\",\"cwd\":{:?},\"hook_event_name\":\"{event}\"{extra}}}",
            ws.display().to_string()
        )
    };
    let tool =
        ",\"tool_name\":\"Read\",\"tool_input\":{\"file_path\":\"x\"},\"tool_use_id\":\"r1\"";
    for (event, extra) in [("SessionStart", ""), ("PreToolUse", tool)] {
        let a = t.hook(Agent::ClaudeCode, payload(event, extra).as_bytes());
        assert!(a.problems.is_empty(), "{:?}", a.problems);
    }
    let state = dir.path().join("data/agents/claude-code/pruned-1.json");
    assert!(state.is_file());
    // 100 days later, the unended session is pruned.
    clock
        .0
        .fetch_add(100 * 86_400_000_000_000, Ordering::SeqCst);
    let out = t
        .prune(&tacho_app::PruneOptions {
            days: 90,
            include_unended: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(out.removed.len(), 1, "{out:?}");
    assert!(!state.exists(), "the hooks' state went with the session");
    // The agent goes on: its next tool call is recorded, in a session started again.
    let tool2 = tool.replace("r1", "r2");
    let a = t.hook(Agent::ClaudeCode, payload("PreToolUse", &tool2).as_bytes());
    assert!(a.problems.is_empty(), "{:?}", a.problems);
    let kinds: Vec<&str> = t
        .events("pruned-1")
        .unwrap()
        .iter()
        .map(|e| e.event.body.kind_name())
        .collect();
    assert_eq!(
        kinds,
        ["session.start", "snapshot.taken", "tool.call"],
        "{kinds:?}"
    );
}
