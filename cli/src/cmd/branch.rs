//! `tacho session branch`: fork a session's saved state into a new session.

use clap::Args;
use tacho_schema::{EventBody, SessionBranch};
use tacho_store::Durability;

use crate::cmd::record::new_session_id;
use crate::error::CliError;
use crate::home::open_store;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct BranchArgs {
    /// The session to fork (its id, or any unique prefix of it).
    pub session: String,
    /// Where to fork: `step N` (or just `N`: everything before step N), `#SEQ`
    /// (everything through event SEQ), or a model request id (through its response).
    /// Default: the whole session, without its end.
    #[arg(long)]
    pub from: Option<String>,
    /// The new session's id (default: a fresh one).
    #[arg(long)]
    pub id: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: BranchArgs) -> Result<(), CliError> {
    let log = open_store()?;
    let parent = log.resolve_session(&a.session)?;
    let mut events = Vec::new();
    log.read_session(&parent, |e| events.push(e))?;
    let Some(first) = events.first() else {
        return Err(CliError::NotFound(format!(
            "session {parent} has no events"
        )));
    };
    let EventBody::SessionStart(start) = &first.event.body else {
        return Err(CliError::Findings(format!(
            "session {parent} does not begin with session.start"
        )));
    };
    // The last event (by seq) that the branch copies.
    let through = match a.from.as_deref().map(str::trim) {
        None => events
            .iter()
            .rev()
            .find(|e| !matches!(e.event.body, EventBody::SessionEnd(_)))
            .map_or(0, |e| e.seq),
        Some(point) => {
            let step = point
                .strip_prefix("step")
                .map(str::trim)
                .unwrap_or(point)
                .parse::<u64>()
                .ok();
            if let Some(seq) = point.strip_prefix('#') {
                let seq: u64 = seq.parse().map_err(|_| {
                    CliError::Input(format!("--from {point:?}: #SEQ needs a number"))
                })?;
                if seq >= events.len() as u64 {
                    return Err(CliError::Input(format!(
                        "--from {point}: session {parent} has events #0..=#{}",
                        events.len().saturating_sub(1)
                    )));
                }
                seq
            } else if let Some(n) = step {
                let start = events
                    .iter()
                    .find(|e| matches!(&e.event.body, EventBody::StepStart(s) if s.step == n));
                match start {
                    Some(e) => e.seq.saturating_sub(1),
                    None => {
                        return Err(CliError::Input(format!(
                            "--from {point}: session {parent} has no step {n}"
                        )));
                    }
                }
            } else {
                let response = events.iter().rev().find(
                    |e| matches!(&e.event.body, EventBody::LlmResponse(r) if r.request_id == point),
                );
                let request = events.iter().find(
                    |e| matches!(&e.event.body, EventBody::LlmRequest(r) if r.request_id == point),
                );
                match response.or(request) {
                    Some(e) => e.seq,
                    None => {
                        return Err(CliError::Input(format!(
                            "--from {point:?}: not a step (`step N`), an event (`#SEQ`) or a model request id of session {parent}"
                        )));
                    }
                }
            }
        }
    };
    let id = match a.id {
        Some(id) => {
            tacho_schema::validate_session_id(&id)
                .map_err(|e| CliError::Input(format!("--id: {e}")))?;
            if log.has_session(&id) {
                return Err(CliError::Input(format!(
                    "--id: session {id} already exists"
                )));
            }
            id
        }
        None => new_session_id(),
    };
    let now = crate::cmd::record::now_unix_ns();
    let point = a.from.clone().unwrap_or_else(|| "end".into());
    let mut start = start.clone();
    start.parent = Some(parent.clone());
    start.source = Some("tacho-branch".into());
    start.title = Some(match &start.title {
        Some(t) => format!("{t} (branch of {parent} at {point})"),
        None => format!("branch of {parent} at {point}"),
    });
    let copies: Vec<(i64, EventBody)> = events
        .iter()
        // The goal and its frozen contract come along; receipts and gate decisions
        // are evidence of the parent's run and stay there.
        .filter(|e| {
            e.seq >= 1
                && e.seq <= through
                && !matches!(
                    e.event.body,
                    EventBody::SessionEnd(_)
                        | EventBody::GoalCheckStart(_)
                        | EventBody::GoalCheckRun(_)
                        | EventBody::GoalUpdate(_)
                )
        })
        .map(|e| (e.event.time_unix_ns, e.event.body.clone()))
        .collect();
    let mut batch = vec![
        (now, EventBody::SessionStart(start)),
        (
            now,
            EventBody::SessionBranch(SessionBranch {
                parent: parent.clone(),
                through_seq: through,
                point: a.from.clone(),
                copied: copies.len() as u64,
            }),
        ),
    ];
    let copied = copies.len();
    batch.extend(copies);
    log.writer(&id)?.append_batch(&batch, Durability::Sync)?;
    let mut out = Out::new();
    if a.json {
        out.json(&serde_json::json!({
            "session": id,
            "parent": parent,
            "through_seq": through,
            "copied": copied,
        }))?;
    } else {
        out.line(format!(
            "branched {parent} through event #{through} into {id} ({copied} events copied; {parent} is unchanged)"
        ))?;
    }
    out.finish()
}
