//! The warehouse recipe (docs/warehouse.md): `tacho audit export` and `tacho session list
//! --json` of a generated store of 20,000 sessions load into DuckDB with
//! docs/warehouse/schema.sql and load.sql, loading again adds nothing, and the README's
//! three team queries (the files in docs/warehouse/) return what the generator put in.
//! Needs `duckdb` in tests/audit/.venv (.ci/run installs it); without it the test says so
//! and passes, except in CI. `TACHO_WAREHOUSE_SESSIONS` changes the store's size.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Value, json};
use tacho_tests::{repo_root, run, run_with_stdin, tacho};

const AGENTS: [&str; 5] = ["claude-code", "codex", "gemini", "copilot", "opencode"];
const REPOS: [&str; 12] = [
    "shop-api", "billing", "search", "mobile", "infra", "web", "auth", "ledger", "docs", "etl",
    "gateway", "notify",
];
/// Monday 2026-09-07 00:00 UTC, in seconds.
const FIRST_MONDAY: i64 = 1_788_739_200;
const WEEKS: i64 = 8;
const DAY: i64 = 86_400;

/// What the generator put in, as the queries should report it.
#[derive(Default)]
struct Expected {
    /// (week's Monday as YYYY-MM-DD, agent) → [responses, input, output, cache_read, cache_write]
    tokens: BTreeMap<(String, String), [u64; 5]>,
    /// (repository, kind, command) → (failures, sessions)
    failed: BTreeMap<(String, String, String), (u64, BTreeSet<String>)>,
    events: u64,
}

fn date_of(secs: i64) -> String {
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = secs.div_euclid(DAY) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

fn ts(secs: i64, ms: i64) -> String {
    let date = date_of(secs);
    let s = secs.rem_euclid(DAY);
    format!(
        "{date}T{:02}:{:02}:{:02}.{ms:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Session `i` of the generated store, as `tacho record` input, and what it adds to the
/// expected answers. Agents, repositories, weeks, token counts, edits (some to files the
/// risk assessment weighs), verification outcomes and repeated responses vary with `i`.
fn session(i: u64, exp: &mut Expected, out: &mut String) {
    let id = format!("ses_wh{i:020}");
    let agent = AGENTS[(i % 5) as usize];
    let repo = REPOS[((i / 5 + i / 60) % 12) as usize];
    let week = (i as i64 * 3) % WEEKS;
    let start = FIRST_MONDAY + week * 7 * DAY + (i as i64 % 6) * DAY + (i as i64 * 37) % 80_000;
    let monday = date_of(FIRST_MONDAY + week * 7 * DAY);
    let mut t = 0i64;
    let mut at = |out: &mut String, line: Value| {
        let mut line = line;
        line["session"] = json!(id);
        line["ts"] = json!(ts(start + t / 1000, t % 1000));
        t += 1500;
        out.push_str(&line.to_string());
        out.push('\n');
        exp.events += 1;
    };
    at(
        out,
        json!({"type":"session.start","agent":agent,"model":"model-x","workspace":format!("/srv/{repo}"),"project":repo,"title":format!("task {i}"),"source":agent}),
    );
    let tokens = [1000 + i % 997, 100 + i % 89, i % 500, i % 50];
    at(
        out,
        json!({"type":"llm.request","request_id":"req_1","model":"model-x","agent":agent}),
    );
    let response = json!({"type":"llm.response","request_id":"req_1","response_id":format!("msg_{i}"),"model":"model-x","tokens_in":tokens[0],"tokens_out":tokens[1],"cache_read":tokens[2],"cache_write":tokens[3]});
    at(out, response.clone());
    if i.is_multiple_of(10) {
        // The same response reported twice (as transcripts do): its usage counts once.
        at(out, response);
    }
    let e = exp.tokens.entry((monday, agent.to_string())).or_default();
    e[0] += 1;
    for (k, v) in tokens.iter().enumerate() {
        e[k + 1] += v;
    }
    at(out, json!({"type":"step.start","step":1,"agent":agent}));
    let files = 1 + i % 4;
    for f in 0..files {
        let path = if i.is_multiple_of(13) && f == 0 {
            ".github/workflows/ci.yml".to_string()
        } else {
            format!("src/mod{f}.rs")
        };
        let call = format!("call_{f}");
        at(
            out,
            json!({"type":"tool.call","call_id":call,"tool":"Edit","target":path,"input":{"file_path":path}}),
        );
        let status = if i.is_multiple_of(17) && f == 0 {
            "error"
        } else {
            "ok"
        };
        at(
            out,
            json!({"type":"tool.result","call_id":call,"status":status,"duration_ms":12}),
        );
        if status == "ok" {
            at(
                out,
                json!({"type":"file.edit","path":path,"op":"modify","tool":"Edit","call_id":call,"lines_added":3 + f,"lines_removed":1}),
            );
        }
    }
    let mut check = |out: &mut String, command: &str, kind: &str, status: &str| {
        at(
            out,
            json!({"type":"verification.run","command":command,"status":status,"exit_code":i32::from(status != "passed"),"duration_ms":900,"kind":kind}),
        );
        if status != "passed" {
            let f = exp
                .failed
                .entry((
                    repo.to_string(),
                    "verification.run".to_string(),
                    command.to_string(),
                ))
                .or_default();
            f.0 += 1;
            f.1.insert(id.clone());
        }
    };
    match i % 3 {
        0 => check(out, "cargo test", "test", "failed"),
        1 => check(out, "cargo test", "test", "passed"),
        _ => {}
    }
    if i.is_multiple_of(11) {
        check(out, "npm run lint", "lint", "error");
    }
    if i.is_multiple_of(3) && i.is_multiple_of(2) {
        check(out, "cargo test", "test", "passed");
    }
    at(out, json!({"type":"step.finish","step":1}));
    at(out, json!({"type":"session.end","reason":"completed"}));
}

fn tacho_ok(home: &Path, args: &[&str]) -> String {
    let mut c = tacho(home);
    c.args(args);
    let (code, out, err) = run(c);
    assert_eq!(code, 0, "tacho {args:?}: {err}");
    out
}

#[test]
fn exports_load_into_duckdb_and_the_team_queries_answer() {
    let python = repo_root().join("tests/audit/.venv/bin/python");
    if !python.exists() {
        tacho_tests::skip_without(
            "the warehouse check needs duckdb in tests/audit/.venv (.ci/run installs it)",
        );
        return;
    }
    let n: u64 = std::env::var("TACHO_WAREHOUSE_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let mut exp = Expected::default();
    let mut input = String::new();
    for i in 0..n {
        session(i, &mut exp, &mut input);
    }
    let clock = std::time::Instant::now();
    let (code, _, err) = run_with_stdin(&home, &["record", "--snapshots", "off"], &input);
    eprintln!("recorded {} events in {:?}", exp.events, clock.elapsed());
    assert_eq!(code, 0, "{err}");
    drop(input);

    // A session with real goal checks: one failed receipt, then a passing one.
    let (ghome, ws) = tacho_tests::parity_workspace(tmp.path(), "ses_goal_wh");
    assert_eq!(ghome, home);
    let goal = |args: &[&str]| {
        let mut c = tacho(&home);
        c.current_dir(&ws).args(args);
        run(c)
    };
    let (code, _, err) = goal(&[
        "goal",
        "create",
        "--assure",
        "--plan",
        "plan.md",
        "--session",
        "ses_goal_wh",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, _) = goal(&["goal", "check", "parity", "--session", "ses_goal_wh"]);
    assert_eq!(code, 1, "the parity check fails first");
    std::fs::write(ws.join("src/value.txt"), "42\n").unwrap();
    let (code, _, err) = goal(&["goal", "check", "parity", "--session", "ses_goal_wh"]);
    assert_eq!(code, 0, "{err}");

    let exports = tmp.path().join("exports");
    std::fs::create_dir_all(&exports).unwrap();
    let events = exports.join("events.jsonl");
    tacho_ok(
        &home,
        &[
            "audit",
            "export",
            "--all",
            "--output",
            events.to_str().unwrap(),
        ],
    );
    std::fs::write(
        exports.join("sessions.jsonl"),
        tacho_ok(&home, &["session", "list", "--json"]),
    )
    .unwrap();
    eprintln!("exported in {:?}", clock.elapsed());
    let list: Vec<Value> = std::fs::read_to_string(exports.join("sessions.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(list.len() as u64, n + 1);
    let goal_events = tacho_tests::event_count(&home, "ses_goal_wh") as u64;

    let out = std::process::Command::new(&python)
        .arg(repo_root().join("tests/audit/warehouse.py"))
        .arg(&exports)
        .arg(repo_root().join("docs/warehouse"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("loaded and queried in {:?}", clock.elapsed());

    // Both loads hold every event and session once; nothing was cut short.
    let counts = json!({"events": exp.events + goal_events, "sessions": n + 1, "export_errors": 0});
    assert_eq!(got["counts"], json!([counts, counts]));

    // Tokens per agent per week: exactly the generator's, repeats counted once.
    let rows = got["tokens_per_agent_per_week"].as_array().unwrap();
    let tokens: BTreeMap<(String, String), [u64; 5]> = rows
        .iter()
        .map(|r| {
            let k = (
                r["week"].as_str().unwrap().to_string(),
                r["agent"].as_str().unwrap().to_string(),
            );
            let v = ["responses", "input", "output", "cache_read", "cache_write"]
                .map(|c| r[c].as_u64().unwrap());
            (k, v)
        })
        .collect();
    assert_eq!(rows.len(), tokens.len());
    assert_eq!(tokens, exp.tokens);
    assert_eq!(tokens.len() as i64, WEEKS * AGENTS.len() as i64);

    // Risk by repository: the session index's scores, grouped. The generated sessions
    // differ in risk (a workflow file, failed and missing verification).
    let mut by_repo: BTreeMap<String, (u64, u64, u64, u64)> = BTreeMap::new();
    for s in &list {
        // A session that recorded no project is its workspace's directory.
        let repo = s["project"]
            .as_str()
            .unwrap_or_else(|| s["workspace"].as_str().unwrap().rsplit('/').next().unwrap());
        let e = by_repo.entry(repo.to_string()).or_default();
        let score = s["risk_score"].as_u64().unwrap();
        e.0 += 1;
        e.1 += score;
        e.2 = e.2.max(score);
        e.3 += u64::from(matches!(
            s["risk_level"].as_str().unwrap(),
            "HIGH" | "CRITICAL"
        ));
    }
    let levels: BTreeSet<&str> = list
        .iter()
        .map(|s| s["risk_level"].as_str().unwrap())
        .collect();
    assert!(levels.len() >= 2, "{levels:?}");
    let rows = got["risk_by_repository"].as_array().unwrap();
    assert_eq!(rows.len(), by_repo.len());
    let mut last_mean = f64::INFINITY;
    for r in rows {
        let (count, sum, max, high) = by_repo[r["repository"].as_str().unwrap()];
        assert_eq!(r["sessions"].as_u64().unwrap(), count, "{r}");
        let mean = (sum as f64 / count as f64 * 10.0).round() / 10.0;
        assert!(
            (r["mean_risk"].as_f64().unwrap() - mean).abs() < 0.051,
            "{r}"
        );
        assert_eq!(r["max_risk"].as_u64().unwrap(), max, "{r}");
        assert_eq!(r["high_or_critical"].as_u64().unwrap(), high, "{r}");
        assert!(
            r["mean_risk"].as_f64().unwrap() <= last_mean,
            "ordered by mean risk"
        );
        last_mean = r["mean_risk"].as_f64().unwrap();
    }

    // Failed checks: the generator's failed and errored runs, and the goal's failed
    // receipt (its passing one is not a failure).
    let goal_repo = ws.file_name().unwrap().to_str().unwrap().to_string();
    let command = "sh checks/parity.sh";
    let mut expected = exp.failed;
    expected.insert(
        (goal_repo, "goal.check".into(), command.into()),
        (1, BTreeSet::from(["ses_goal_wh".to_string()])),
    );
    let rows = got["failed_checks"].as_array().unwrap();
    let failed: BTreeMap<(String, String, String), (u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                (
                    r["repository"].as_str().unwrap().to_string(),
                    r["kind"].as_str().unwrap().to_string(),
                    r["command"].as_str().unwrap().to_string(),
                ),
                (
                    r["failures"].as_u64().unwrap(),
                    r["sessions"].as_u64().unwrap(),
                ),
            )
        })
        .collect();
    let expected: BTreeMap<_, _> = expected
        .into_iter()
        .map(|(k, (f, s))| (k, (f, s.len() as u64)))
        .collect();
    assert_eq!(failed, expected);
}

#[test]
fn the_readme_shows_the_queries_the_test_runs() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let readme = squash(&readme);
    for q in [
        "tokens_per_agent_per_week",
        "risk_by_repository",
        "failed_checks",
    ] {
        let sql =
            std::fs::read_to_string(repo_root().join(format!("docs/warehouse/{q}.sql"))).unwrap();
        let body: String = sql
            .lines()
            .filter(|l| !l.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            readme.contains(&squash(&body)),
            "README lacks the query of {q}.sql"
        );
    }
}
