//! `tacho hook <agent>`: one hook payload recorded, through the one ingest path.
//!
//! A hook process never breaks the agent: anything that goes wrong while recording
//! is written to `<data>/logs/hooks.log` (and stderr) and the hook exits 0. The one
//! answer that changes what the agent does is the completion gate on `Stop`.
//!
//! What a hook keeps between the events of one agent session (step numbers, open
//! tool calls, the transcript offset) is in `<data>/agents/<agent>/<session>.json`,
//! read and written under a lock of its own, so concurrent hooks of one session
//! (parallel tool calls) take turns.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tacho_agents::hook::{Action, HookState, map_payload};
use tacho_agents::{Agent, session_id_from};
use tacho_schema::{EventBody, EventView, SnapshotReason};
use tacho_store::Durability;
use tacho_store::vfs::{RealFs, Vfs};

use crate::context::Tacho;
use crate::file_copies;
use crate::ingest::{Ingest, IngestError, IngestOptions};
use crate::snapshots::SnapshotOpError;
use tacho_git::snapshot::SnapshotError;

/// How many stops the gate blocks in one session at most, whatever the goal says.
/// (The stall rule pauses a goal after three fruitless completion attempts; this is a
/// second bound of the hook's own.)
pub const GATE_BLOCKS_MAX: u32 = 5;

/// How large `logs/hooks.log` grows before it is rotated (`hooks.log.1`).
const HOOK_LOG_MAX: u64 = 4 << 20;

/// How long a hook waits for another hook of the same session.
const STATE_LOCK_WAIT: Duration = Duration::from_secs(20);

/// [`STATE_LOCK_WAIT`], or less when `TACHO_HOOK_LOCK_WAIT_MS` says so (tests): never
/// more, and a shorter wait only makes more stops undecided, which fail closed.
fn state_lock_wait() -> Duration {
    std::env::var("TACHO_HOOK_LOCK_WAIT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_millis)
        .filter(|d| *d < STATE_LOCK_WAIT)
        .unwrap_or(STATE_LOCK_WAIT)
}

/// Where a hook that could not take the state lock notes itself (`UNIX_NS EVENT` a
/// line), for the next hook that holds the lock to record (SPEC §3.1).
fn missed_path(state_path: &Path) -> PathBuf {
    state_path.with_extension("missed")
}

/// What the hook process answers the agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookAnswer {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    /// Problems met (each also logged).
    pub problems: Vec<String>,
    /// The session the payload belongs to, while it goes on (not ended): whose
    /// workspace `tacho hook --watch` keeps a watcher of.
    pub session: Option<String>,
    /// A session whose end waits for its transcript to stop growing: the frontend
    /// starts `tacho hook AGENT --finish SESSION` after answering
    /// ([`Tacho::hook_finish`]).
    pub finish_later: Option<String>,
}

impl Tacho {
    fn hook_state_path(&self, agent: Agent, session: &str) -> PathBuf {
        self.data_dir()
            .join("agents")
            .join(agent.name())
            .join(format!("{session}.json"))
    }

    /// The agent whose hooks record `session`: they keep a state file for it, or for
    /// the main session it continues (`<id>.2`) or is a subagent of (`<id>.<agent>`).
    /// Such a session's events come from the hooks only (SPEC §3.1).
    pub fn hook_recorder(&self, session: &str) -> Option<Agent> {
        let mains = std::iter::once(session).chain(
            session
                .char_indices()
                .filter(|(_, c)| *c == '.')
                .filter_map(|(i, _)| session.get(..i)),
        );
        let mains: Vec<&str> = mains.filter(|m| !m.is_empty()).collect();
        Agent::ALL
            .iter()
            .copied()
            .find(|a| mains.iter().any(|m| self.hook_state_path(*a, m).is_file()))
    }

    /// The id the hooks record an agent session under whose id (`raw`) names a
    /// session fetched from a remote: `<id>.local`, or `<id>.localN` when that one was
    /// fetched too.
    fn local_session_id(&self, raw: &str) -> String {
        let id = session_id_from(raw);
        let mut candidate = format!("{id}.local");
        for n in 2..100 {
            if self.origin(&candidate).is_none() {
                break;
            }
            candidate = format!("{id}.local{n}");
        }
        candidate
    }

    /// Removes the hooks' state of `session` (a main session's id), for a session
    /// removed from the log: a later payload of the same agent session then starts
    /// recording it afresh. Taken under the state lock; a hook holding it now is left
    /// alone (its state names a head the log no longer has, so it starts again from
    /// the log anyway).
    pub(crate) fn remove_hook_state(&self, session: &str) {
        for &agent in Agent::ALL {
            let path = self.hook_state_path(agent, session);
            if !path.is_file() {
                continue;
            }
            let Ok(lock) = RealFs.lock(&path.with_extension("lock"), Duration::ZERO) else {
                continue;
            };
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                self.note(&format!(
                    "note: {}: the hooks' state was not removed: {e}",
                    path.display()
                ));
            }
            drop(lock);
        }
    }

    /// Appends one line to `<data>/logs/hooks.log`. Best effort: a hook that cannot
    /// even log still exits 0.
    fn hook_log(&self, agent: Agent, event: &str, session: &str, message: &str) {
        let dir = self.data_dir().join("logs");
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("hooks.log");
        // Bounded: past HOOK_LOG_MAX bytes the log becomes `hooks.log.1` (the one
        // before that goes), so a flood of bad payloads cannot fill the disk.
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > HOOK_LOG_MAX) {
            let _ = std::fs::rename(&path, dir.join("hooks.log.1"));
        }
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            let now = tacho_schema::time_to_rfc3339(self.now());
            // One line per entry, whatever the message holds: no control bytes (a
            // terminal that shows the log runs none), each part clipped.
            let clean = |s: &str, max: usize| -> String {
                let s = s.replace('\n', " | ");
                let mut out: String = s
                    .chars()
                    .map(|c| if c.is_control() { '?' } else { c })
                    .take(max)
                    .collect();
                if s.chars().count() > max {
                    out.push('…');
                }
                out
            };
            let _ = writeln!(
                f,
                "{now} {agent} {} {}: {}",
                clean(event, 80),
                clean(session, 200),
                clean(message, 4_000)
            );
        }
    }

    /// Records one hook payload of `agent`; returns what the hook process answers.
    pub fn hook(&self, agent: Agent, input: &[u8]) -> HookAnswer {
        let mut answer = HookAnswer::default();
        let payload = match agent.parse_payload(input) {
            Ok(p) => p,
            Err(e) => {
                // (A parser's message may quote the payload: clipped.)
                let e = e.to_string();
                let clipped: String = e.chars().take(500).collect();
                let more = if clipped.len() < e.len() { "…" } else { "" };
                let msg = format!("tacho: nothing recorded: {clipped}{more}");
                self.hook_log(agent, "-", "-", &msg);
                answer.stderr = format!("{msg}\n");
                answer.problems.push(msg);
                return self.hook_ok(agent, "", answer);
            }
        };
        // A session fetched from a remote is never appended to: an agent whose session
        // id names one (reused, or chosen with the agent's `--session-id`) records as
        // `<id>.local` instead (SPEC §3.1).
        let mut payload = payload;
        // A call id is one word (the record of an unconfirmed call names it as such):
        // whitespace in one a payload gives is made `_`.
        if let Some(id) = payload.tool_use_id.as_mut()
            && id.contains(char::is_whitespace)
        {
            *id = id.split_whitespace().collect::<Vec<_>>().join("_");
        }
        let fetched = self
            .origin(&session_id_from(&payload.session_id))
            .map(|o| (session_id_from(&payload.session_id), o.remote));
        if fetched.is_some() {
            payload.session_id = self.local_session_id(&payload.session_id);
        }
        let session = session_id_from(&payload.session_id);
        // What the hook state is kept under (a continuation's events go to `<id>.2`,
        // its state stays under the payload's id): what `--finish` is given.
        let state_key = session.clone();
        let event = payload.hook_event_name.clone();
        let problem = |answer: &mut HookAnswer, msg: String| {
            self.hook_log(agent, &event, &session, &msg);
            answer.problems.push(msg);
        };
        let state_path = self.hook_state_path(agent, &session);
        if let Some(dir) = state_path.parent()
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            problem(&mut answer, format!("{}: {e}", dir.display()));
            return self.hook_ok(agent, &event, answer);
        }
        let lock_path = state_path.with_extension("lock");
        let wait = state_lock_wait();
        let lock = match RealFs.lock(&lock_path, wait) {
            Ok(l) => l,
            Err(e) => {
                problem(
                    &mut answer,
                    format!("waiting for another hook of the session: {e}"),
                );
                // Recorded by the next hook that holds the lock: a hook that could not
                // record is itself evidence (risk `recorder_obstructed`).
                if let Ok(mut f) = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(missed_path(&state_path))
                {
                    let _ = writeln!(f, "{} {}", self.now(), clip_line(&event));
                }
                // A stop the gate cannot decide fails closed while the session has (or
                // may have) an assured goal.
                let stops = map_payload(agent, &payload, &mut HookState::default())
                    .into_iter()
                    .find_map(|a| match a {
                        Action::Gate { session, .. } => Some(session),
                        _ => None,
                    });
                if let Some(gated) = stops {
                    let why = format!(
                        "another process held the session's hook lock ({}) for the hook's whole budget of {} ms",
                        lock_path.display(),
                        wait.as_millis()
                    );
                    self.fail_closed(agent, &event, &gated, &why, &mut answer);
                }
                return self.hook_ok(agent, &event, answer);
            }
        };
        let mut state = match std::fs::read(&state_path) {
            Ok(b) => match serde_json::from_slice::<HookState>(&b) {
                Ok(s) => s,
                Err(e) => {
                    problem(
                        &mut answer,
                        format!("{}: {e}; starting from the log", state_path.display()),
                    );
                    self.state_from_log(agent, &session)
                }
            },
            Err(_) => self.state_from_log(agent, &session),
        };
        let opts = IngestOptions::one_batch(format!("{agent} hook {event}"));
        let mut ingest = match Ingest::new(self, opts, |_| Ok(())) {
            // The hooks see the agent work: they read HEAD as it goes (SPEC §17.2).
            Ok(i) => i.observing_commits(),
            Err(e) => {
                problem(&mut answer, e.to_string());
                return self.hook_ok(agent, &event, answer);
            }
        };
        // What the log holds past the state's heads (a hook killed after its events
        // were committed, a goal check, `tacho session end`) is folded in first.
        if let Err(e) = self.catch_up(agent, &session, &mut state, &mut ingest) {
            problem(&mut answer, format!("catching up with the log: {e}"));
        }
        for (s, head) in &state.observed_heads {
            ingest.knowing_head(s, head.clone());
        }
        // Hooks that gave up waiting for the lock, recorded now that it is free.
        let missed = std::fs::read_to_string(missed_path(&state_path)).unwrap_or_default();
        if !missed.is_empty() {
            let main = if state.main.session.is_empty() {
                session.clone()
            } else {
                state.main.session.clone()
            };
            for line in missed.lines().take(1_000) {
                let (at, name) = line.split_once(' ').unwrap_or((line, "?"));
                let at = at.parse::<i64>().unwrap_or_else(|_| self.now());
                let body = EventBody::Error(tacho_schema::ErrorEvent {
                    message: format!(
                        "a {} hook waited out its budget for the session's hook lock, held by another process, and recorded nothing",
                        clip_line(name)
                    ),
                    code: Some(tacho_projections::HOOK_LOCK_HELD.into()),
                    source: Some("tacho".into()),
                    fatal: false,
                });
                if let Err(e) = ingest.event(0, main.clone(), at, body) {
                    problem(&mut answer, e.to_string());
                }
            }
        }
        // An agent whose hook payloads lack what its transcript holds (Codex: exit
        // codes): the transcript is read first, so that a tool result can be recorded
        // with what the call returned.
        let mut early = Vec::new();
        // Transcripts a payload named for the main session that are not its own: never
        // read, recorded (an act of whoever piped the payload).
        let mut elsewhere: Vec<String> = Vec::new();
        if (agent.results_from_transcript() || !agent.failed_calls_fire_post_hook())
            && let Some(named) = &payload.transcript_path
            && payload.agent_id.is_none()
        {
            let (t, other) = state.session_transcript(named);
            elsewhere.extend(other);
            match agent.read_transcript(&mut state.transcript, Path::new(&t), false) {
                Ok(c) => {
                    state.calls_named(&c.call_ids);
                    early = self.not_recorded(&session, c.rewritten, c.usages);
                    state.call_outputs.extend(c.outputs);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => problem(&mut answer, format!("rollout {t}: {e}")),
            }
        }
        // An end held back for late replies (the finisher has not come yet): the
        // session's usage and its end are recorded first.
        if state.end_pending.is_some()
            && let Err(e) = self.finish_pending(agent, &mut state, &mut ingest)
        {
            problem(&mut answer, e);
        }
        let mut actions = map_payload(agent, &payload, &mut state);
        if let Some((fetched, remote)) = &fetched
            && let Some(i) = actions.iter().position(|a| {
                matches!(a, Action::Event { body: EventBody::SessionStart(_), session } if *session == state.main.session)
            })
        {
            actions.insert(
                i + 1,
                Action::Event {
                    session: state.main.session.clone(),
                    body: EventBody::AgentNotice(tacho_schema::AgentNotice {
                        notice: "tacho:fetched_session_id".into(),
                        message: Some(format!(
                            "the agent's session id names session {fetched}, fetched from remote {remote}: recorded as {} instead",
                            state.main.session
                        )),
                        agent: None,
                    }),
                },
            );
        }
        let mut gate = None;
        {
            let confirms = agent.transcript_confirms_calls();
            let mut read_to_end = false;
            // The paths each call edited, for its output's copies of whole files.
            let mut edited: HashMap<String, Vec<String>> = HashMap::new();
            for a in &actions {
                if let Action::Event {
                    body: EventBody::FileEdit(e),
                    ..
                } = a
                    && let Some(call) = &e.call_id
                {
                    edited.entry(call.clone()).or_default().push(e.path.clone());
                }
            }
            for action in actions {
                let r = match action {
                    Action::Event { session, mut body } => {
                        if let EventBody::ToolResult(result) = &mut body {
                            self.store_file_copies_once(&state, &session, &edited, result);
                        }
                        // The session's end takes no event after it: its unconfirmed
                        // calls are recorded just before.
                        let main_end = session == state.main.session
                            && matches!(body, EventBody::SessionEnd(_));
                        if confirms && main_end {
                            for b in self.unconfirmed_events(agent, &mut state, read_to_end) {
                                if let Err(e) = ingest.event(0, session.clone(), self.now(), b) {
                                    problem(&mut answer, e.to_string());
                                }
                            }
                        }
                        // And the workspace as the session leaves it: a change no tool
                        // call made after the last turn's end (the user's, while the
                        // agent waited) is seen and listed apart too.
                        if main_end {
                            match self.turn_end_check(&mut ingest, &session, SnapshotReason::Final)
                            {
                                Ok(Some(id)) => {
                                    state.last_snapshot.insert(session.clone(), id);
                                }
                                Ok(None) => {}
                                Err(msg) => problem(&mut answer, msg),
                            }
                        }
                        // Late replies are still to come: the end waits for them.
                        if let EventBody::SessionEnd(end) = &body
                            && agent.writes_transcript_late()
                            && session == state.main.session
                        {
                            state.end_pending = Some(end.clone());
                            state.main.ended = false;
                            answer.finish_later = Some(state_key.clone());
                            Ok(())
                        } else {
                            ingest
                                .event(0, session, self.now(), body)
                                .map_err(|e| e.to_string())
                        }
                    }
                    Action::Snapshot {
                        session,
                        paths,
                        reason,
                        before_step,
                    } => self
                        .hook_snapshot(&mut ingest, session.clone(), &paths, reason, before_step)
                        .map(|id| {
                            if let Some(id) = id {
                                state.last_snapshot.insert(session, id);
                            }
                        }),
                    Action::Tokens {
                        session,
                        transcript,
                        subagent,
                        finish,
                    } => {
                        // The main session's own transcript, whatever the payload named.
                        let transcript = match &subagent {
                            Some(_) => transcript,
                            None => {
                                let (own, other) = state.session_transcript(&transcript);
                                // (A subagent's payload may name its own transcript.)
                                if payload.agent_id.is_none() {
                                    elsewhere.extend(other);
                                }
                                own
                            }
                        };
                        let cursor = match &subagent {
                            Some(a) => state.subagent_transcripts.entry(a.clone()).or_default(),
                            None => &mut state.transcript,
                        };
                        match agent.read_transcript(cursor, Path::new(&transcript), finish) {
                            Ok(c) => {
                                if subagent.is_none() {
                                    state.calls_named(&c.call_ids);
                                    read_to_end = finish && c.behind == 0;
                                }
                                state.call_outputs.extend(c.outputs);
                                let usages = self.not_recorded(&session, c.rewritten, c.usages);
                                let first = if subagent.is_none() {
                                    std::mem::take(&mut early)
                                } else {
                                    Vec::new()
                                };
                                first.into_iter().chain(usages).try_for_each(|u| {
                                    let t = u.time_unix_ns.unwrap_or_else(|| self.now());
                                    ingest
                                        .event(
                                            0,
                                            session.clone(),
                                            t,
                                            EventBody::LlmResponse(u.event()),
                                        )
                                        .map_err(|e| e.to_string())
                                })
                            }
                            // The transcript may not exist yet: the next event catches up.
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                            Err(e) => Err(format!("transcript {transcript}: {e}")),
                        }
                    }
                    Action::Gate {
                        session,
                        already_blocked,
                    } => {
                        gate = Some((session, already_blocked));
                        Ok(())
                    }
                };
                if let Err(msg) = r {
                    problem(&mut answer, msg);
                }
            }
            // At its stop, the agent's transcript names every call it made: one it does
            // not name was piped to `tacho hook` from its shell, and is recorded as
            // such (it never counts as verification, SPEC §3.1) — also when the
            // transcript could not be read to its end (gone, replaced, padded).
            if confirms && event == "Stop" {
                for body in self.unconfirmed_events(agent, &mut state, read_to_end) {
                    if let Err(e) = ingest.event(0, state.main.session.clone(), self.now(), body) {
                        problem(&mut answer, e.to_string());
                    }
                }
            }
            // At each turn's end the record holds a full scan of tacho's own; with a
            // watcher serving the workspace, what it had not seen is evidence (SPEC
            // §10.6: a write through a hard link raises no event in the workspace).
            if event == "Stop" {
                let main = state.main.session.clone();
                match self.turn_end_check(&mut ingest, &main, SnapshotReason::Step) {
                    Ok(Some(id)) => {
                        state.last_snapshot.insert(main, id);
                    }
                    Ok(None) => {}
                    Err(msg) => problem(&mut answer, msg),
                }
            }
            for named in std::mem::take(&mut elsewhere) {
                let body = EventBody::Error(tacho_schema::ErrorEvent {
                    message: format!(
                        "a payload named the transcript {named} for this session, whose transcript is {}: not read",
                        state.confirming_transcript.as_deref().unwrap_or("?")
                    ),
                    code: Some(tacho_projections::TRANSCRIPT_ELSEWHERE.into()),
                    source: Some("tacho".into()),
                    fatal: false,
                });
                if let Err(e) = ingest.event(0, state.main.session.clone(), self.now(), body) {
                    problem(&mut answer, e.to_string());
                }
            }
            // A process that posed as the workspace's watcher (none of its answers was
            // used: the snapshots read the workspace themselves) is evidence.
            for why in tacho_git::snapshot::watch::take_impostors() {
                let body = EventBody::Error(tacho_schema::ErrorEvent {
                    message: format!("not believed: {why}"),
                    code: Some(tacho_projections::WATCHER_IMPOSTOR.into()),
                    source: Some("tacho".into()),
                    fatal: false,
                });
                if let Err(e) = ingest.event(0, state.main.session.clone(), self.now(), body) {
                    problem(&mut answer, e.to_string());
                }
            }
            let observed = ingest.observed_heads().clone();
            match ingest.finish() {
                Ok(done) => {
                    state.observed_heads.extend(observed);
                    for (s, t) in done.totals {
                        state.heads.insert(s, t.last_seq.saturating_add(1));
                    }
                }
                Err(e) => problem(&mut answer, format!("nothing recorded: {}", e.error)),
            }
        }
        if !missed.is_empty() && answer.problems.is_empty() {
            let _ = std::fs::remove_file(missed_path(&state_path));
        }
        // A stop while a tool call is still running is no stop of the agent's own: its
        // hooks report every call's end before it stops, so this is a payload piped to
        // `tacho hook` from that call (issue 42: five of them paused the goal as five
        // fruitless stops). It attempts no completion and counts for nothing; while an
        // assured goal is open it is refused all the same. (Agents whose failed calls
        // end only in their transcript are left out: a call may look open there.)
        let in_flight: Vec<String> = state.main.open.keys().cloned().collect();
        let piped = !in_flight.is_empty()
            && agent.failed_calls_fire_post_hook()
            && !agent.results_from_transcript();
        if piped && let Some((session, _)) = &gate {
            let why = format!(
                "a stop arrived while tool call(s) {} were still running, so it is not a stop of the agent's own and counts for nothing",
                in_flight.join(", ")
            );
            problem(&mut answer, why.clone());
            self.fail_closed(agent, &event, session, &why, &mut answer);
            gate = None;
        }
        if let Some((session, already_blocked)) = gate {
            let blocked = match self.stop_gate(&session, &mut state, already_blocked) {
                Ok(Some(reason)) => match agent.stop_block(&reason) {
                    Some(stdout) => {
                        self.hook_log(agent, &event, &session, &format!("stop blocked: {reason}"));
                        answer.stdout = stdout;
                        true
                    }
                    // An agent whose stop cannot be refused: said in the log only.
                    None => {
                        self.hook_log(
                            agent,
                            &event,
                            &session,
                            &format!("stop not blocked ({agent} cannot be sent back): {reason}"),
                        );
                        false
                    }
                },
                Ok(None) => false,
                Err(e) => {
                    problem(&mut answer, format!("completion gate: {e}"));
                    self.fail_closed(
                        agent,
                        &event,
                        &session,
                        &format!("completion gate: {e}"),
                        &mut answer,
                    );
                    !answer.stdout.is_empty()
                }
            };
            // An agent that reports no session end (Codex): a stop the gate lets
            // through ends the session, and a later turn continues it as a new one
            // (`<id>.2`, whose parent this is) — so that it can be rolled back once the
            // agent stopped.
            if !agent.reports_session_end() && !blocked && !state.main.ended {
                let end = tacho_schema::SessionEnd {
                    reason: tacho_schema::EndReason::Completed,
                    message: Some(format!(
                        "{agent}: the turn ended (a later turn continues as a new session)"
                    )),
                };
                if agent.writes_transcript_late() {
                    // Its last reply is still to come: the end waits for it.
                    state.end_pending = Some(end);
                    answer.finish_later = Some(state_key.clone());
                } else {
                    let end = EventBody::SessionEnd(end);
                    match self.log().writer(&session).and_then(|mut w| {
                        w.append(self.now(), &end, Durability::Sync)?;
                        Ok(w.next_seq())
                    }) {
                        Ok(next) => {
                            state.main.ended = true;
                            state.heads.insert(session.clone(), next);
                        }
                        Err(e) => problem(&mut answer, format!("ending the session: {e}")),
                    }
                }
            }
        }
        // (A session whose end waits for its late replies goes on no more.)
        if !state.main.ended && state.end_pending.is_none() {
            answer.session = Some(session.clone());
        }
        // Heads are kept for the sessions the state still records.
        let tracked: Vec<String> = std::iter::once(state.main.session.clone())
            .chain(state.subagents.values().map(|t| t.session.clone()))
            .collect();
        state.heads.retain(|s, _| tracked.contains(s));
        state.observed_heads.retain(|s, _| tracked.contains(s));
        if let Err(e) = write_state(&state_path, &serde_json::to_vec(&state).unwrap_or_default()) {
            problem(&mut answer, format!("{}: {e}", state_path.display()));
        }
        drop(lock);
        self.hook_ok(agent, &event, answer)
    }

    /// Exit 0, with what the agent's `Stop` hook must print when it lets the agent go
    /// ([`tacho_agents::Adapter::stop_pass`]: Codex's JSON).
    fn hook_ok(&self, agent: Agent, event: &str, mut answer: HookAnswer) -> HookAnswer {
        if !answer.problems.is_empty() && answer.stderr.is_empty() {
            answer.stderr = format!(
                "tacho: {} (details: {})\n",
                answer.problems.join("; "),
                self.data_dir().join("logs").join("hooks.log").display()
            );
        }
        if event == "Stop" && answer.stdout.is_empty() {
            answer.stdout = agent.stop_pass().to_owned();
        }
        answer.exit_code = 0;
        answer
    }

    /// A state for a session the hook has no file for, or whose file a crash left
    /// torn: what the log says — started and ended, step numbers, open steps and their
    /// calls, and every model response already counted — so that a lost state file
    /// never records a second `session.start` nor counts tokens twice.
    fn state_from_log(&self, agent: Agent, session: &str) -> HookState {
        let mut state = HookState::default();
        state.main.session = session.to_owned();
        // (Every event the log holds is observed below: a goal among them says so.)
        state.goals = Some(false);
        if !self.log().has_session(session) {
            return state;
        }
        state.main.started = true;
        let mut next = 0;
        let _ = self.log().read_session(session, |e| {
            state.observe(agent, session, &e.event.body);
            next = e.seq + 1;
        });
        state.heads.insert(session.to_owned(), next);
        state
    }

    /// Brings `state` up to what the log holds: for each session it recorded, the
    /// events past the head it was written at are folded in; a session the log no
    /// longer holds, or holds less of, starts the state again from the log.
    fn catch_up(
        &self,
        agent: Agent,
        session: &str,
        state: &mut HookState,
        ingest: &mut Ingest<'_>,
    ) -> Result<(), crate::ingest::IngestError> {
        // Sessions still recording only: an ended one takes no more events, and opening
        // its writer on every hook would cost a lock and a read of its open segment.
        let heads: Vec<(String, u64)> = std::iter::once(&state.main)
            .chain(state.subagents.values())
            .filter(|t| !t.ended)
            .filter_map(|t| state.heads.get(&t.session).map(|h| (t.session.clone(), *h)))
            .collect();
        for (s, head) in heads {
            let now = if self.log().has_session(&s) {
                ingest.next_seq(&s)?
            } else {
                0
            };
            if now < head {
                // Removed or cut short since: what the log holds is what counts.
                *state = self.state_from_log(agent, session);
                return Ok(());
            }
            if now > head {
                self.log().read_session_from(&s, head, |e| {
                    if let EventBody::GitCommits(g) = &e.event.body {
                        state.observed_heads.insert(s.clone(), Some(g.head.clone()));
                    }
                    state.observe(agent, &s, &e.event.body);
                })?;
                state.heads.insert(s, now);
            }
        }
        Ok(())
    }

    /// `usages` without the responses `session` already holds, when the transcript
    /// they come from was rewritten and is read again from its start (its cursor
    /// remembers only the recent ids).
    fn not_recorded(
        &self,
        session: &str,
        rewritten: bool,
        mut usages: Vec<tacho_agents::transcript::Usage>,
    ) -> Vec<tacho_agents::transcript::Usage> {
        if !rewritten || usages.is_empty() {
            return usages;
        }
        let mut held = std::collections::BTreeSet::new();
        let _ = self.log().read_session(session, |e| {
            if let EventBody::LlmResponse(r) = &e.event.body {
                held.insert(
                    r.response_id
                        .clone()
                        .unwrap_or_else(|| r.request_id.clone()),
                );
            }
        });
        // Each id once: read again from its start, a long transcript can bring a
        // response twice in one call (its id left the cursor's recent ones).
        usages.retain(|u| held.insert(u.message_id.clone()));
        usages
    }

    /// Records a held-back end ([`HookState::end_pending`]): the usage the main
    /// session's transcript gained since its last read (each response once, whatever
    /// an import added meanwhile), then the end.
    fn finish_pending(
        &self,
        agent: Agent,
        state: &mut HookState,
        ingest: &mut Ingest<'_>,
    ) -> Result<(), String> {
        // (An end recorded meanwhile, by `tacho session end`: nothing more after it.)
        if state.main.ended {
            state.end_pending = None;
            return Ok(());
        }
        let Some(end) = state.end_pending.clone() else {
            return Ok(());
        };
        let session = state.main.session.clone();
        if let Some(t) = state.confirming_transcript.clone() {
            match agent.read_transcript(&mut state.transcript, Path::new(&t), true) {
                Ok(c) => {
                    for u in self.not_recorded(&session, true, c.usages) {
                        let at = u.time_unix_ns.unwrap_or_else(|| self.now());
                        ingest
                            .event(0, session.clone(), at, EventBody::LlmResponse(u.event()))
                            .map_err(|e| e.to_string())?;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("transcript {t}: {e}")),
            }
        }
        ingest
            .event(0, session, self.now(), EventBody::SessionEnd(end))
            .map_err(|e| e.to_string())?;
        state.end_pending = None;
        state.main.ended = true;
        Ok(())
    }

    /// `tacho hook AGENT --finish SESSION`: started by the hook that held back the
    /// session's end, once it answered the agent. Waits until the session's transcript
    /// has not grown for [`FINISH_QUIET`] (at most [`FINISH_WAIT`]) without holding the
    /// hooks' lock, then records the usage of the replies the agent wrote after its
    /// last hook, and the end (nothing when the session's next hook did it first).
    pub fn hook_finish(&self, agent: Agent, session: &str) -> HookAnswer {
        let mut answer = HookAnswer::default();
        let state_path = self.hook_state_path(agent, session);
        let read_state = || -> Option<HookState> {
            serde_json::from_slice(&std::fs::read(&state_path).ok()?).ok()
        };
        let Some(state) = read_state().filter(|s| s.end_pending.is_some()) else {
            return answer;
        };
        if let Some(t) = &state.confirming_transcript {
            wait_until_quiet(Path::new(t));
        }
        let lock = match RealFs.lock(&state_path.with_extension("lock"), state_lock_wait()) {
            Ok(l) => l,
            Err(e) => {
                answer.problems.push(format!("finishing the session: {e}"));
                return answer;
            }
        };
        let Some(mut state) = read_state().filter(|s| s.end_pending.is_some()) else {
            return answer;
        };
        let opts = IngestOptions::one_batch(format!("{agent} hook finish"));
        let mut ingest = match Ingest::new(self, opts, |_| Ok(())) {
            Ok(i) => i,
            Err(e) => {
                answer.problems.push(e.to_string());
                return answer;
            }
        };
        if let Err(e) = self.catch_up(agent, session, &mut state, &mut ingest) {
            answer
                .problems
                .push(format!("catching up with the log: {e}"));
        }
        if let Err(e) = self.finish_pending(agent, &mut state, &mut ingest) {
            answer.problems.push(e);
        }
        match ingest.finish() {
            Ok(done) => {
                for (s, t) in done.totals {
                    state.heads.insert(s, t.last_seq.saturating_add(1));
                }
            }
            // Nothing recorded: the state keeps the end held back, for the next hook.
            Err(e) => {
                answer
                    .problems
                    .push(format!("nothing recorded: {}", e.error));
                return answer;
            }
        }
        if let Err(e) = write_state(&state_path, &serde_json::to_vec(&state).unwrap_or_default()) {
            answer
                .problems
                .push(format!("{}: {e}", state_path.display()));
        }
        drop(lock);
        for p in &answer.problems {
            self.hook_log(agent, "finish", session, p);
        }
        answer
    }

    /// The turn's end of `session` (`Step`), or the session's (`Final`): a full
    /// snapshot, so that a change no tool call made during the turn (the user's,
    /// between calls an edit tool snapshots only the file of) is seen and listed apart,
    /// not first met as a conflict by a rollback (SPEC §13.2). With a watcher running
    /// it is read by this process and checked against the watcher's; paths it missed
    /// are recorded as an error. The snapshot's id, if one was taken.
    fn turn_end_check(
        &self,
        ingest: &mut Ingest<'_>,
        session: &str,
        reason: SnapshotReason,
    ) -> Result<Option<String>, String> {
        let Some(ws) = ingest.workspace(session).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        // The session's end takes what the watcher serves (Claude Code gives every
        // SessionEnd hook 1.5 s in all, and a checked scan of a large workspace can
        // take longer; the turn's end before it was checked).
        let taken = if self.watcher_runs(&ws) && reason == SnapshotReason::Step {
            ingest.checked_snapshot(session, &ws, self.now(), reason)
        } else {
            ingest
                .snapshot(
                    0,
                    session.to_owned(),
                    Some(ws),
                    self.now(),
                    &[],
                    reason,
                    None,
                )
                .map(|id| (id, Vec::new()))
        };
        let (id, missed) = match taken {
            Ok(m) => m,
            Err(IngestError::Snapshot { error, .. })
                if matches!(
                    *error,
                    SnapshotOpError::Snapshot(SnapshotError::RefusedWorkspace { .. })
                ) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e.to_string()),
        };
        if missed.is_empty() {
            return Ok(Some(id));
        }
        const LISTED: usize = 20;
        let mut list: Vec<&str> = missed.iter().take(LISTED).map(String::as_str).collect();
        let more = missed.len().saturating_sub(LISTED);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        list.sort_unstable();
        let body = EventBody::Error(tacho_schema::ErrorEvent {
            message: format!(
                "the watcher's snapshot at the turn's end left out changes made before it was asked, which tacho's own scan read: {}{more}",
                list.join(", ")
            ),
            code: Some(tacho_projections::WATCHER_MISSED.into()),
            source: Some("tacho".into()),
            fatal: false,
        });
        ingest
            .event(0, session.to_owned(), self.now(), body)
            .map(|()| Some(id))
            .map_err(|e| e.to_string())
    }

    /// A tool output's copies of whole files the session's last snapshot holds at a
    /// path the call edited, recorded as references to them (SPEC.md §5.4): an edit
    /// tool's result may carry the file as it was before the edit, which the call's
    /// before-snapshot holds.
    fn store_file_copies_once(
        &self,
        state: &HookState,
        session: &str,
        edited: &HashMap<String, Vec<String>>,
        result: &mut tacho_schema::ToolResult,
    ) {
        let Some(output) = result
            .output
            .as_deref()
            .filter(|o| o.len() >= file_copies::FILE_COPY_MIN)
        else {
            return;
        };
        let (Some(snapshot), Some(paths)) = (
            state.last_snapshot.get(session),
            edited.get(&result.call_id),
        ) else {
            return;
        };
        let Ok(store) = self.snapshots() else {
            return;
        };
        let held: Vec<file_copies::HeldFile> = paths
            .iter()
            .filter_map(|p| {
                let e = store.entry(snapshot, p).ok().flatten()?;
                Some(file_copies::HeldFile {
                    snapshot: snapshot.clone(),
                    path: p.clone(),
                    blob: e.oid.to_hex().to_string(),
                })
            })
            .collect();
        if let Some(shorter) = file_copies::elide(output, &held) {
            result.output = Some(shorter);
        }
    }

    /// A snapshot around a tool call: paths the agent gave absolute are made relative
    /// to the workspace; a path outside it is left out (nothing there can be restored).
    /// The snapshot's id, if one was taken.
    fn hook_snapshot(
        &self,
        ingest: &mut Ingest<'_>,
        session: String,
        paths: &[String],
        reason: SnapshotReason,
        before_step: Option<u64>,
    ) -> Result<Option<String>, String> {
        let Some(ws) = ingest.workspace(&session).map_err(|e| e.to_string())? else {
            return Ok(None); // a workspace not on this machine: nothing to protect
        };
        let mut rel = Vec::new();
        for p in paths {
            let path = Path::new(p);
            if path.is_absolute() {
                match path.strip_prefix(&ws) {
                    Ok(r) if !r.as_os_str().is_empty() => rel.push(r.display().to_string()),
                    _ => {}
                }
            } else {
                rel.push(p.clone());
            }
        }
        if !paths.is_empty() && rel.is_empty() {
            return Ok(None); // every path is outside the workspace
        }
        match ingest.snapshot(0, session, Some(ws), self.now(), &rel, reason, before_step) {
            // A workspace snapshots refuse (`/`, the home directory, a pseudo file
            // system) is said once, by the session's baseline; later snapshots are left
            // out quietly (the snapshot checks the workspace itself, once).
            Err(IngestError::Snapshot { error, .. })
                if reason != SnapshotReason::Baseline
                    && matches!(
                        *error,
                        SnapshotOpError::Snapshot(SnapshotError::RefusedWorkspace { .. })
                    ) =>
            {
                Ok(None)
            }
            r => r.map(Some).map_err(|e| e.to_string()),
        }
    }

    /// A stop the gate could not decide (`why`): refused while the session has, or may
    /// have, an assured goal not completed (SPEC §3.1: where tacho cannot decide, the
    /// gate fails closed), let go when it certainly has none.
    fn fail_closed(
        &self,
        agent: Agent,
        event: &str,
        session: &str,
        why: &str,
        answer: &mut HookAnswer,
    ) {
        let open = match self.resolve_session(session) {
            Err(tacho_store::StoreError::UnknownSession { .. }) => return,
            Err(e) => Err(e.to_string()),
            Ok(id) => {
                let mut found = Ok(None);
                for s in self.continued_chain(&id) {
                    match self.goals(&crate::SessionId::resolved(s)) {
                        Err(e) => {
                            found = Err(e.to_string());
                            break;
                        }
                        Ok((_, gs)) => {
                            if let Some(g) = open_assured(&gs).first() {
                                found = Ok(Some(format!(
                                    "goal {} \"{}\" is assured and not completed",
                                    g.created.goal, g.created.title
                                )));
                                break;
                            }
                        }
                    }
                }
                match found {
                    Ok(None) => return,
                    Ok(Some(w)) => Ok(w),
                    Err(e) => Err(e),
                }
            }
        };
        let what = open.unwrap_or_else(|e| {
            format!("the session may have an assured goal not completed (reading it: {e})")
        });
        let reason = format!(
            "tacho: the completion gate could not decide: {why}; {what}. The stop is refused until it can: stop again (tacho goal status --session {session})."
        );
        match agent.stop_block(&reason) {
            Some(stdout) => {
                self.hook_log(agent, event, session, &format!("stop blocked: {reason}"));
                answer.stdout = stdout;
            }
            None => self.hook_log(
                agent,
                event,
                session,
                &format!("stop not blocked ({agent} cannot be sent back): {reason}"),
            ),
        }
    }

    /// The completion gate at a stop: when the session's latest goal is assured, not
    /// completed, paused, blocked or revised, a completion is attempted (and recorded);
    /// a refused one blocks the stop with the open checks. Returns the reason to block.
    fn stop_gate(
        &self,
        session: &str,
        state: &mut HookState,
        already_blocked: bool,
    ) -> Result<Option<String>, crate::goals::GoalError> {
        // A session without a goal is let go without reading it: the hook state saw
        // every event the log holds for it (`catch_up`), a goal's creation among them.
        let main = state.main.session == session;
        if main && state.goals == Some(false) {
            return Ok(None);
        }
        let session = match self.resolve_session(session) {
            Ok(id) => id,
            Err(tacho_store::StoreError::UnknownSession { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // The session and those it continues (`<id>` before `<id>.2`): a session the
        // agent ended from its shell leaves its goals to the continuation.
        let mut chain = Vec::new();
        for s in self.continued_chain(&session) {
            let id = crate::SessionId::resolved(s.clone());
            chain.push((id.clone(), self.goals(&id)?.1));
        }
        if main {
            state.goals = Some(chain.iter().any(|(_, gs)| !gs.goals.is_empty()));
        }
        // Every open assured goal holds the agent, not only the latest: a second goal
        // without a contract releases nothing.
        let open: Vec<(&crate::SessionId, &tacho_projections::GoalState)> = chain
            .iter()
            .flat_map(|(id, gs)| open_assured(gs).into_iter().map(move |g| (id, g)))
            .collect();
        if open.is_empty() || state.gate_blocks >= GATE_BLOCKS_MAX {
            return Ok(None);
        }
        let mut refused = Vec::new();
        let mut paused = Vec::new();
        for (owner, g) in open {
            let done = self.complete_goal(owner, Some(&g.created.goal))?;
            // A goal paused now (the stall rule) no longer holds the agent: it is
            // told so once, with the unfinished work, to tell the user.
            if done.stall == Some(crate::goals::Stall::Paused) {
                paused.push((g, done));
            } else if !done.accepted {
                refused.push((g, done));
            }
        }
        if refused.is_empty() && paused.is_empty() {
            return Ok(None);
        }
        state.gate_blocks += 1;
        let mut reason = String::new();
        for (g, done) in &paused {
            if !reason.is_empty() {
                reason.push('\n');
            }
            reason.push_str(&format!(
                "tacho: goal {} \"{}\" is paused: {}. Unfinished work:",
                g.created.goal,
                g.created.title,
                done.note.as_deref().unwrap_or("stalled")
            ));
            for o in &done.open {
                reason.push_str(&format!("\n- {o}"));
            }
            reason.push_str("\nTell the user what is unfinished and why; this goal no longer holds your stop (a passing check or `tacho goal resume` lifts the pause).");
        }
        if refused.is_empty() {
            return Ok(Some(reason));
        }
        for (g, done) in &refused {
            if !reason.is_empty() {
                reason.push('\n');
            }
            reason.push_str(&format!(
                "tacho: goal {} \"{}\" cannot complete: {}.",
                g.created.goal, g.created.title, done.reason
            ));
            for o in &done.open {
                reason.push_str(&format!("\n- {o}"));
            }
            if let Some(n) = &done.note {
                reason.push_str(&format!("\n{n}"));
            }
        }
        reason.push_str(&format!(
            "\nRun each open check with `tacho goal check --session {session} CHECK` after fixing what it reports, then stop again."
        ));
        if already_blocked {
            reason.push_str(&format!(
                "\n(stop {} of at most {GATE_BLOCKS_MAX} this gate blocks)",
                state.gate_blocks
            ));
        }
        Ok(Some(reason))
    }
}

/// Writes the hook state in place, under the state lock, without a sync: it is
/// rebuilt from the log when a crash leaves it torn ([`Tacho::state_from_log`]). The
/// file never shrinks (shorter JSON is padded with spaces, which JSON allows), so no
/// write changes its length after the first few — each length change costs a journal
/// commit, which a hook pays on its event's sync.
fn write_state(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    let old = f.metadata()?.len() as usize;
    let mut buf = bytes.to_vec();
    if buf.len() < old {
        buf.resize(old, b' ');
    }
    f.write_all_at(&buf, 0)
}

/// One line of at most 60 characters, for an event name written into a note.
fn clip_line(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(60).collect()
}

impl Tacho {
    /// `session` and the sessions it continues, newest first: a continuation
    /// `<id>.N` (a conversation resumed after its session ended) has the session
    /// before it as parent, back to `<id>`. A parent that is not an earlier part of
    /// the same conversation (a delegating agent's session) ends the chain.
    pub(crate) fn continued_chain(&self, session: &str) -> Vec<String> {
        let mut out = vec![session.to_owned()];
        let mut cur = session.to_owned();
        while out.len() < 1_000 {
            let Some(parent) = self.graph(&cur).ok().and_then(|g| g.parent) else {
                break;
            };
            if !continues(&cur, &parent) || out.contains(&parent) {
                break;
            }
            out.push(parent.clone());
            cur = parent;
        }
        out
    }
}

impl Tacho {
    /// The main session's calls its transcript has not named, as `call_unconfirmed`
    /// errors to record at a stop (or just before the session's end). Taken from what
    /// the log holds and what the session's transcript, read whole, names — not from
    /// the hook state, a file the agent can edit or delete (issue 42). A call with no
    /// result yet that the state holds as running waits for a later stop (Claude Code
    /// writes a call's message after its `PreToolUse`); one already recorded as
    /// unconfirmed is not recorded again. Nothing when the transcript never named a
    /// call (a transcript of another shape).
    fn unconfirmed_events(
        &self,
        agent: Agent,
        state: &mut HookState,
        read_to_end: bool,
    ) -> Vec<EventBody> {
        let session = state.main.session.clone();
        // The session's calls as the log holds them, read once (borrowed views: no
        // output is copied), with those recorded unconfirmed already.
        let mut calls: Vec<(String, String)> = Vec::new();
        let mut answered: HashSet<String> = HashSet::new();
        let mut flagged: HashSet<String> = HashSet::new();
        let _ = self
            .log()
            .read_session_views(&session, 0, |_, _, v| match v {
                EventView::ToolCall {
                    call_id,
                    tool,
                    target,
                    ..
                } => {
                    let what = match target {
                        Some(t) => format!("{tool}: {}", clip_line(t)),
                        None => tool.to_string(),
                    };
                    calls.push(((*call_id).to_owned(), what));
                }
                EventView::ToolResult { call_id, .. } => {
                    answered.insert((*call_id).to_owned());
                }
                EventView::Error {
                    message,
                    code: Some(code),
                    ..
                } if *code == tacho_projections::CALL_UNCONFIRMED => {
                    if let Some(id) = tacho_projections::unconfirmed_call_id(message) {
                        flagged.insert(id.to_owned());
                    }
                }
                _ => {}
            });
        let mut named: HashSet<String> = HashSet::new();
        if let Some(t) = state.confirming_transcript.clone() {
            let mut cursor = tacho_agents::transcript::Cursor::default();
            // (Each read takes at most READ_BYTES_MAX: a transcript of any size in a
            // bounded number of reads.)
            for _ in 0..4096 {
                match agent.read_transcript(&mut cursor, Path::new(&t), true) {
                    Ok(c) => {
                        named.extend(c.call_ids);
                        if c.behind == 0 {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        }
        state.transcript_names_calls |= !named.is_empty();
        if !state.transcript_names_calls && named.is_empty() {
            return Vec::new();
        }
        let running: HashSet<&String> = state
            .main
            .open
            .keys()
            .chain(state.main.open_at_end.iter())
            .collect();
        let mut seen: HashSet<String> = HashSet::new();
        calls
            .into_iter()
            .filter(|(id, _)| seen.insert(id.clone()))
            .filter(|(id, _)| !named.contains(id) && !flagged.contains(id))
            .filter(|(id, _)| answered.contains(id) || !running.contains(id))
            .map(|(id, what)| {
                let mut message = tacho_projections::unconfirmed_call_message(&id, &what);
                if !read_to_end {
                    message.push_str(" (the transcript could not be read to its end at the stop)");
                }
                EventBody::Error(tacho_schema::ErrorEvent {
                    message,
                    code: Some(tacho_projections::CALL_UNCONFIRMED.into()),
                    source: Some("tacho".into()),
                    fatal: false,
                })
            })
            .collect()
    }
}

/// How long a transcript must not grow before a held-back end is recorded.
const FINISH_QUIET: Duration = Duration::from_millis(1500);

/// The longest a held-back end waits for its transcript to stop growing.
const FINISH_WAIT: Duration = Duration::from_secs(15);

/// Waits until `path` (its size and modification time) has not changed for
/// [`FINISH_QUIET`], at most [`FINISH_WAIT`].
fn wait_until_quiet(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let look = || {
        std::fs::metadata(path)
            .ok()
            .map(|m| (m.len(), m.mtime(), m.mtime_nsec()))
    };
    let started = std::time::Instant::now();
    let (mut last, mut since) = (look(), std::time::Instant::now());
    while started.elapsed() < FINISH_WAIT && since.elapsed() < FINISH_QUIET {
        std::thread::sleep(Duration::from_millis(100));
        let now = look();
        if now != last {
            (last, since) = (now, std::time::Instant::now());
        }
    }
}

/// The id a continuation of `session` takes: `<id>.N+1` after `<id>.N`, else `<id>.2`.
pub(crate) fn next_continuation(session: &str) -> String {
    if let Some((base, n)) = session.rsplit_once('.')
        && let Ok(n) = n.parse::<u32>()
    {
        return format!("{base}.{}", n.saturating_add(1));
    }
    format!("{session}.2")
}

/// Whether `child` is a continuation of `parent`: `<id>.N` (N a number) after `<id>`
/// or `<id>.M`.
fn continues(child: &str, parent: &str) -> bool {
    let Some((base, n)) = child.rsplit_once('.') else {
        return false;
    };
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    parent == base
        || parent
            .strip_prefix(base)
            .and_then(|r| r.strip_prefix('.'))
            .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
}

/// The goals of a session that hold the agent at a stop: assured, and neither
/// completed, paused, blocked nor replaced by a revision.
fn open_assured(gs: &tacho_projections::Goals) -> Vec<&tacho_projections::GoalState> {
    gs.goals
        .iter()
        .filter(|g| {
            g.created.assured
                && !g.completed
                && g.paused.is_none()
                && g.blocked.is_none()
                && g.cleared.is_none()
                && g.revised_by.is_none()
        })
        .collect()
}
