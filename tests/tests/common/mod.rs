//! What the real-agent tests share (`tests/tests/agents.rs` and each agent's own
//! test file): the pinned CLIs of `tests/agents`, the loopback mock of the model APIs,
//! a workspace with its tacho home, and token checks against ccusage.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose
#![allow(dead_code)] // each test file uses its part

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tacho_tests::{run, tacho, tacho_bin};

pub fn agents_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("agents")
}

/// The installed CLI of an npm package in tests/agents, or why it cannot run.
pub fn npm_bin(name: &str) -> Option<PathBuf> {
    let p = agents_dir().join("node_modules/.bin").join(name);
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let py = Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if p.exists() && node && py {
        return Some(p);
    }
    let msg = format!(
        "the agent tests need Node, Python 3 and `npm install` in tests/agents (.ci/run does all three); {name} is missing"
    );
    tacho_tests::skip_without(&msg);
    None
}

/// The mock Messages API, serving `script`; killed when dropped.
pub struct Mock {
    child: std::process::Child,
    pub port: u16,
}

impl Mock {
    pub fn start(dir: &Path, script: &serde_json::Value) -> Mock {
        let script_path = dir.join("script.json");
        std::fs::write(&script_path, script.to_string()).unwrap();
        let port_file = dir.join("port");
        let child = Command::new("python3")
            .arg(agents_dir().join("mock_messages_api.py"))
            .arg(&script_path)
            .arg(&port_file)
            .arg(dir.join("requests.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Owned from here on: dropping it (also on a failed assertion) stops it.
        let mut mock = Mock { child, port: 0 };
        let until = Instant::now() + Duration::from_secs(20);
        while mock.port == 0 {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                mock.port = p.trim().parse().unwrap_or(0);
            }
            assert!(Instant::now() < until, "the mock API did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        mock
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Env {
    _tmp: tempfile::TempDir,
    pub home: PathBuf,
    pub cfg: PathBuf,
    pub ws: PathBuf,
    pub dir: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let ws = dir.join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::create_dir_all(ws.join("checks")).unwrap();
        std::fs::write(ws.join("src/value.txt"), "41\n").unwrap();
        std::fs::write(ws.join("gone.txt"), "bye\n").unwrap();
        std::fs::write(
            ws.join("checks/parity.sh"),
            "test \"$(head -n1 src/value.txt)\" = \"42\"\n",
        )
        .unwrap();
        Env {
            home: dir.join("home"),
            cfg: dir.join("claude-config"),
            ws,
            dir,
            _tmp: tmp,
        }
    }

    pub fn tacho(&self, args: &[&str]) -> (i32, String, String) {
        let mut c = tacho(&self.home);
        c.current_dir(&self.ws)
            .env("CLAUDE_CONFIG_DIR", &self.cfg)
            .args(args);
        run(c)
    }

    /// Runs `tacho hook <agent>` with `input` on stdin: (exit code, stdout, stderr).
    pub fn hook(&self, agent: &str, input: &str) -> (i32, String, String) {
        self.hook_with(&["hook", agent], input)
    }

    /// Runs `tacho ARGS` with `input` on stdin: (exit code, stdout, stderr).
    pub fn hook_with(&self, args: &[&str], input: &str) -> (i32, String, String) {
        let mut c = tacho(&self.home);
        c.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Sends Claude Code's `event` for `session` (with `extra` fields) to the hook,
    /// which must exit 0; returns (stdout, stderr).
    pub fn send(&self, session: &str, event: &str, extra: serde_json::Value) -> (String, String) {
        let mut v = serde_json::json!({"session_id": session, "cwd": self.ws.display().to_string(), "hook_event_name": event});
        if let (Some(m), serde_json::Value::Object(x)) = (v.as_object_mut(), extra) {
            m.extend(x);
        }
        let (code, out, err) = self.hook("claude-code", &v.to_string());
        assert_eq!(code, 0, "{err}");
        (out, err)
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let (code, out, err) = self.tacho(args);
        assert_eq!(code, 0, "tacho {args:?}: {out}{err}");
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// Runs the Claude Code CLI on `prompt` against `mock`; returns its JSON result.
    pub fn claude(
        &self,
        claude: &Path,
        mock: &Mock,
        session: &str,
        prompt: &str,
    ) -> serde_json::Value {
        self.claude_with(claude, mock, &["--session-id", session], prompt)
    }

    /// [`Env::claude`] with the arguments that name the session (`--session-id ID`,
    /// `--resume ID`).
    pub fn claude_with(
        &self,
        claude: &Path,
        mock: &Mock,
        session_args: &[&str],
        prompt: &str,
    ) -> serde_json::Value {
        let tacho_dir = tacho_bin().parent().unwrap().to_path_buf();
        let path = format!(
            "{}:{}",
            tacho_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new(claude)
            .current_dir(&self.ws)
            .args([
                "-p",
                prompt,
                "--dangerously-skip-permissions",
                "--output-format",
                "json",
            ])
            .args(session_args)
            .env(
                "ANTHROPIC_BASE_URL",
                format!("http://127.0.0.1:{}", mock.port),
            )
            .env("ANTHROPIC_API_KEY", "anything")
            .env("CLAUDE_CONFIG_DIR", &self.cfg)
            .env("TACHO_HOME", &self.home)
            .env("PATH", path)
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("IS_SANDBOX", "1")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "claude: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }
}

pub const SESSION: &str = "5e551011-aaaa-4bbb-8ccc-000000000001";

pub fn num(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// `ccusage <args> --json --offline` with `var` pointing at the agent's data.
pub fn ccusage_json(ccusage: &Path, args: &[&str], var: &str, dir: &Path) -> serde_json::Value {
    let out = Command::new(ccusage)
        .args(args)
        .args(["--json", "--offline"])
        .env(var, dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A graph's token totals equal a ccusage session row's, field by field.
pub fn assert_tokens_as_ccusage(t: &serde_json::Value, row: &serde_json::Value) {
    for (ours, theirs) in [
        ("in", "inputTokens"),
        ("out", "outputTokens"),
        ("cache_read", "cacheReadTokens"),
        ("cache_write", "cacheCreationTokens"),
    ] {
        assert_eq!(num(&t[ours]), num(&row[theirs]), "{ours}: {t} vs {row}");
    }
}

/// Runs the shell `command` offline: in a network namespace of its own with only
/// loopback up (`unshare -n`; outside one, where this machine's network is closed, some
/// CLIs wait minutes for their first request), with the mock serving `script` there
/// (its port in `$PORT`, its log `requests.log` in `dir`), tacho's directory first on
/// `PATH`, `TACHO_HOME` = `tacho_home` and `envs` set. `None` (skipped, or failed in CI)
/// where `unshare -n` is not allowed.
pub fn run_offline(
    dir: &Path,
    script: &serde_json::Value,
    tacho_home: &Path,
    command: &str,
    envs: &[(&str, &std::ffi::OsStr)],
) -> Option<std::process::Output> {
    let can = Command::new("unshare")
        .args(["-n", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !can {
        tacho_tests::skip_without("the agent tests run the CLIs offline under `unshare -n`");
        return None;
    }
    let script_path = dir.join("script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let tacho_dir = tacho_bin().parent().unwrap().to_path_buf();
    let inner = format!(
        r#"
ip link set lo up
python3 "$MOCK" "$SCRIPT" "$DIR/port" "$DIR/requests.log" >/dev/null 2>&1 & M=$!
i=0; while [ ! -s "$DIR/port" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
PORT="$(cat "$DIR/port")"; export PORT
( {command} )
rc=$?
kill $M
exit $rc
"#
    );
    let mut c = Command::new("unshare");
    c.args(["-n", "sh", "-c", &inner])
        .env("MOCK", agents_dir().join("mock_messages_api.py"))
        .env("SCRIPT", &script_path)
        .env("DIR", dir)
        .env("TACHO_HOME", tacho_home)
        .env(
            "PATH",
            format!(
                "{}:{}",
                tacho_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .stdin(Stdio::null());
    for (k, v) in envs {
        c.env(k, v);
    }
    Some(c.output().unwrap())
}

/// What the mock served over Chat Completions, summed from its log's `served` usage:
/// (input without the cached tokens, cached, output).
pub fn chat_served(log: &Path) -> (u64, u64, u64) {
    served_of(std::fs::read_to_string(log).unwrap_or_default().lines())
}

/// Waits (at most 30 s) until `session` has ended: an agent that writes its last
/// replies after its last hook has its end held back until its transcript stopped
/// growing (`tacho hook AGENT --finish`, started by that hook). The session's graph.
pub fn graph_once_ended(e: &Env, session: &str) -> serde_json::Value {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let g = e.json(&["graph", session, "--format", "json"]);
        if !g["ended"].is_null() || std::time::Instant::now() > until {
            return g;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The live tokens `t` are what the mock served (its log `log`), the last reply too.
pub fn assert_live_tokens_served(t: &serde_json::Value, log: &Path) {
    let text = std::fs::read_to_string(log).unwrap();
    let (input, cached, output) = served_of(text.lines());
    assert!(input > 0 && output > 0, "{text}");
    let live = (num(&t["in"]), num(&t["cache_read"]), num(&t["out"]));
    assert_eq!(live, (input, cached, output), "{t}");
}

/// The `served` usage of mock log lines, summed: (input without the cached tokens,
/// cached, output).
fn served_of<'l>(lines: impl IntoIterator<Item = &'l str>) -> (u64, u64, u64) {
    let mut sum = (0, 0, 0);
    for l in lines {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(l) else {
            continue;
        };
        let n = |p: &str| {
            v.pointer(p)
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0)
        };
        let cached = n("/served/prompt_tokens_details/cached_tokens");
        sum.0 += n("/served/prompt_tokens") - cached;
        sum.1 += cached;
        sum.2 += n("/served/completion_tokens");
    }
    sum
}

/// Records `session` (of `agent`, working in the workspace) before the agent starts,
/// which then takes its id, with an assured goal (`PARITY_PLAN`) whose check has not
/// run.
pub fn assured_session(e: &Env, session: &str, agent: &str) {
    let ws = e.ws.display().to_string();
    let mut rec = tacho(&e.home);
    rec.args(["record", "--snapshots", "off"])
        .stdin(Stdio::piped());
    let mut child = rec.spawn().unwrap();
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        format!(r#"{{"type":"session.start","session":"{session}","workspace":"{ws}","agent":"{agent}"}}"#).as_bytes(),
    )
    .unwrap();
    assert!(child.wait().unwrap().success());
    assure_goal(e, session);
}

/// Gives `session` an assured goal (`PARITY_PLAN`, in `plan.md`) whose check has not
/// run.
pub fn assure_goal(e: &Env, session: &str) {
    std::fs::write(e.dir.join("plan.md"), tacho_tests::PARITY_PLAN).unwrap();
    let plan = e.dir.join("plan.md").display().to_string();
    let (code, out, err) = e.tacho(&[
        "goal",
        "create",
        "--session",
        session,
        "--plan",
        &plan,
        "--assure",
    ]);
    assert_eq!(code, 0, "{out}{err}");
}

/// Each tool call of a graph (`tacho graph --format json`): (tool, status).
pub fn graph_tools(g: &serde_json::Value) -> Vec<(String, String)> {
    g["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["tools"].as_array().unwrap().iter())
        .map(|t| {
            (
                t["tool"].as_str().unwrap_or("").into(),
                t["status"].as_str().unwrap_or("").into(),
            )
        })
        .collect()
}

/// Rolls back the step of `session` whose rollback point lists `file` (from `rollback
/// --list`); the rollback must succeed. Returns what it printed.
pub fn roll_back_step_that_changed(e: &Env, session: &str, file: &str) -> String {
    let points = e.json(&["session", "rollback", session, "--list", "--json"]);
    let step = points["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["files"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == file))
        })
        .map(|p| p["step"].as_u64().unwrap())
        .unwrap_or_else(|| panic!("no step changed {file}: {points}"));
    let n = step.to_string();
    let (code, out, err) = e.tacho(&["session", "rollback", session, "--step", &n, "--yes"]);
    assert_eq!(code, 0, "{out}{err}");
    out
}

/// Rolls back the agent tests' shell step (`echo made > made.txt && rm -f gone.txt`):
/// `made.txt` is gone and `gone.txt` back, byte for byte; `src/value.txt`, edited
/// before, stays `42`.
pub fn roll_back_the_shell_step(e: &Env, session: &str) {
    let out = roll_back_step_that_changed(e, session, "made.txt");
    assert!(!e.ws.join("made.txt").exists(), "{out}");
    assert_eq!(
        std::fs::read_to_string(e.ws.join("gone.txt")).unwrap(),
        "bye\n"
    );
    assert_eq!(
        std::fs::read_to_string(e.ws.join("src/value.txt")).unwrap(),
        "42\n"
    );
}

/// The hooks logged no problem, and blocked exactly one stop (the completion gate's).
pub fn assert_one_stop_blocked_and_no_problem(e: &Env) {
    let log = std::fs::read_to_string(e.home.join("logs/hooks.log")).unwrap_or_default();
    assert!(
        !log.lines().any(|l| !l.contains("stop blocked")),
        "hook problems:\n{log}"
    );
    assert_eq!(log.matches("stop blocked").count(), 1, "{log}");
}

/// A `tacho graph --format json`'s tokens: (in, cache reads, out).
pub fn graph_tokens(g: &serde_json::Value) -> (u64, u64, u64) {
    let t = &g["tokens"];
    (num(&t["in"]), num(&t["cache_read"]), num(&t["out"]))
}

/// Imports `agent`'s transcripts twice into one store (`tacho` runs a tacho command
/// there): the first import adds events, the second nothing. Returns the first
/// import's report and `session`'s graph afterwards.
pub fn import_twice(
    tacho: impl Fn(&[&str]) -> (i32, String, String),
    agent: &str,
    session: &str,
) -> (serde_json::Value, serde_json::Value) {
    let json = |args: &[&str]| {
        let (code, out, err) = tacho(args);
        assert_eq!(code, 0, "tacho {args:?}: {out}{err}");
        serde_json::from_str::<serde_json::Value>(out.trim())
            .unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let first = json(&["import", agent, "--json"]);
    assert!(num(&first["events_added"]) > 0, "{first}");
    let again = json(&["import", agent, "--json"]);
    assert_eq!(num(&again["events_added"]), 0, "{again}");
    (first, json(&["graph", session, "--format", "json"]))
}

/// Runs `tacho ARGS` on the store `tacho_home` in `ws`, with `HOME` = an agent's
/// isolated home (where its `~/.<agent>` is).
pub fn tacho_in_home(
    tacho_home: &Path,
    agent_home: &Path,
    ws: &Path,
    args: &[&str],
) -> (i32, String, String) {
    let mut c = tacho(tacho_home);
    c.current_dir(ws).env("HOME", agent_home).args(args);
    run(c)
}

/// A session's risk (`tacho risk --json`): the call `made_up` (a pair piped to `tacho
/// hook` from the agent's shell, running `pytest`) is the one call its transcript does
/// not confirm, and no `pytest` run counts as verification.
pub fn assert_only_the_made_up_call_is_unconfirmed(risk: &serde_json::Value, made_up: &str) {
    let f = risk["factors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "calls_unconfirmed")
        .unwrap_or_else(|| panic!("{risk:#}"));
    let evidence = f["evidence"].as_str().unwrap();
    assert!(
        evidence.contains(made_up) && evidence.matches("was reported").count() == 1,
        "only the made-up call is unconfirmed: {evidence}"
    );
    let runs: Vec<&str> = risk["verification_runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["command"].as_str())
        .collect();
    assert!(
        !runs.iter().any(|c| c.contains("pytest")),
        "the made-up run never counts: {risk:#}"
    );
}
