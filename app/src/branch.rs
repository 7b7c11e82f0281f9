//! `session branch`: fork a session's saved state up to a point into a new session.

use std::fmt;

use serde::Serialize;
use tacho_schema::{EventBody, SessionBranch};
use tacho_store::{Durability, StoreError};

use crate::Tacho;
use crate::error::{ErrorKind, Field, Kind, Namer, neutral};

/// Why a branch could not be made.
#[derive(Debug, thiserror::Error)]
pub enum BranchError {
    #[error("session {0} has no events")]
    Empty(String),
    #[error("session {0} does not begin with session.start")]
    NoStart(String),
    #[error("{}", neutral(self))]
    BadSeq(String),
    #[error("{}", neutral(self))]
    SeqOutOfRange {
        point: String,
        session: String,
        last: u64,
    },
    #[error("{}", neutral(self))]
    NoStep {
        point: String,
        session: String,
        step: u64,
    },
    #[error("{}", neutral(self))]
    UnknownPoint { point: String, session: String },
    #[error("{}", neutral(self))]
    BadId(String),
    #[error("{}", neutral(self))]
    Exists(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Kind for BranchError {
    fn kind(&self) -> ErrorKind {
        match self {
            BranchError::Empty(_) => ErrorKind::NotFound,
            BranchError::NoStart(_) => ErrorKind::Findings,
            BranchError::Store(e) => e.kind(),
            BranchError::BadSeq(_)
            | BranchError::SeqOutOfRange { .. }
            | BranchError::NoStep { .. }
            | BranchError::UnknownPoint { .. }
            | BranchError::BadId(_)
            | BranchError::Exists(_) => ErrorKind::Input,
        }
    }

    fn field(&self) -> Option<Field> {
        match self {
            BranchError::BadSeq(_)
            | BranchError::SeqOutOfRange { .. }
            | BranchError::NoStep { .. }
            | BranchError::UnknownPoint { .. } => Some(Field::From),
            BranchError::BadId(_) | BranchError::Exists(_) => Some(Field::Id),
            _ => None,
        }
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        let (from, id) = (name.field(Field::From), name.field(Field::Id));
        match self {
            BranchError::BadSeq(point) => write!(f, "{from} {point:?}: #SEQ needs a number"),
            BranchError::SeqOutOfRange {
                point,
                session,
                last,
            } => write!(
                f,
                "{from} {point}: session {session} has events #0..=#{last}"
            ),
            BranchError::NoStep {
                point,
                session,
                step,
            } => write!(f, "{from} {point}: session {session} has no step {step}"),
            BranchError::UnknownPoint { point, session } => write!(
                f,
                "{from} {point:?}: not a step (`step N`), an event (`#SEQ`) or a model request id of session {session}"
            ),
            BranchError::BadId(why) => write!(f, "{id}: {why}"),
            BranchError::Exists(session) => write!(f, "{id}: session {session} already exists"),
            other => fmt::Display::fmt(other, f),
        }
    }
}

/// A branch made.
#[derive(Debug, Clone, Serialize)]
pub struct Branched {
    pub session: String,
    pub parent: String,
    pub through_seq: u64,
    pub copied: usize,
}

impl Tacho {
    /// Forks `parent` (resolved) into a new session. `from`: `step N` (or just `N`:
    /// everything before step N), `#SEQ` (everything through event SEQ), or a model
    /// request id (through its response); default the whole session without its end.
    /// The goal and its frozen contract come along; receipts and gate decisions are
    /// evidence of the parent's run and stay there.
    pub fn branch(
        &self,
        parent: &str,
        from: Option<&str>,
        id: Option<String>,
    ) -> Result<Branched, BranchError> {
        let events = self.events(parent)?;
        let Some(first) = events.first() else {
            return Err(BranchError::Empty(parent.to_owned()));
        };
        let EventBody::SessionStart(start) = &first.event.body else {
            return Err(BranchError::NoStart(parent.to_owned()));
        };
        // The last event (by seq) that the branch copies.
        let through = match from.map(str::trim) {
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
                    let seq: u64 = seq
                        .parse()
                        .map_err(|_| BranchError::BadSeq(point.to_owned()))?;
                    if seq >= events.len() as u64 {
                        return Err(BranchError::SeqOutOfRange {
                            point: point.to_owned(),
                            session: parent.to_owned(),
                            last: (events.len() as u64).saturating_sub(1),
                        });
                    }
                    seq
                } else if let Some(n) = step {
                    let start = events
                        .iter()
                        .find(|e| matches!(&e.event.body, EventBody::StepStart(s) if s.step == n));
                    match start {
                        Some(e) => e.seq.saturating_sub(1),
                        None => {
                            return Err(BranchError::NoStep {
                                point: point.to_owned(),
                                session: parent.to_owned(),
                                step: n,
                            });
                        }
                    }
                } else {
                    let response = events.iter().rev().find(|e| {
                        matches!(&e.event.body, EventBody::LlmResponse(r) if r.request_id == point)
                    });
                    let request = events.iter().find(|e| {
                        matches!(&e.event.body, EventBody::LlmRequest(r) if r.request_id == point)
                    });
                    match response.or(request) {
                        Some(e) => e.seq,
                        None => {
                            return Err(BranchError::UnknownPoint {
                                point: point.to_owned(),
                                session: parent.to_owned(),
                            });
                        }
                    }
                }
            }
        };
        let id = match id {
            Some(id) => {
                tacho_schema::validate_session_id(&id)
                    .map_err(|e| BranchError::BadId(e.to_string()))?;
                if self.log().has_session(&id) {
                    return Err(BranchError::Exists(id));
                }
                id
            }
            None => self.new_session_id(),
        };
        // The branch starts when the run it was cut from started, so that its steps
        // and its duration read as that run's.
        let started = first.event.time_unix_ns;
        let point = from.unwrap_or("end");
        let mut start = start.clone();
        start.parent = Some(parent.to_owned());
        start.source = Some("tacho-branch".into());
        start.title = Some(match &start.title {
            Some(t) => format!("{t} (branch of {parent} at {point})"),
            None => format!("branch of {parent} at {point}"),
        });
        let copies: Vec<(i64, EventBody)> = events
            .iter()
            .filter(|e| {
                e.seq >= 1
                    && e.seq <= through
                    && !matches!(
                        e.event.body,
                        EventBody::SessionEnd(_)
                            | EventBody::GoalCheckStart(_)
                            | EventBody::GoalCheckRun(_)
                            | EventBody::GoalUpdate(_)
                            // Allowances name the parent's events, and commits
                            // were seen by the parent: neither is the branch's.
                            | EventBody::SecretAllowed(_)
                            | EventBody::GitCommits(_)
                    )
            })
            .map(|e| (e.event.time_unix_ns, e.event.body.clone()))
            .collect();
        let copied = copies.len();
        let mut batch = vec![
            (started, EventBody::SessionStart(start)),
            (
                started,
                EventBody::SessionBranch(SessionBranch {
                    parent: parent.to_owned(),
                    through_seq: through,
                    point: from.map(str::to_owned),
                    copied: copied as u64,
                }),
            ),
        ];
        batch.extend(copies);
        self.log()
            .writer(&id)?
            .append_batch(&batch, Durability::Sync)?;
        Ok(Branched {
            session: id,
            parent: parent.to_owned(),
            through_seq: through,
            copied,
        })
    }
}
