//! `session end`: record the end of a session whose agent will not record one (it was
//! killed, its terminal closed, or its host reports no end), so that it can be rolled
//! back.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use tacho_schema::{EndReason, EventBody, SessionEnd};
use tacho_store::StoreError;

use crate::Tacho;
use crate::error::kinds;
use crate::ingest::{Ingest, IngestOptions, RecordError};

/// Why a session could not be ended.
#[derive(Debug, thiserror::Error)]
pub enum EndError {
    #[error("session {session} has already ended ({reason})")]
    AlreadyEnded { session: String, reason: EndReason },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Record(#[from] RecordError),
}

kinds!(EndError {
    EndError::AlreadyEnded { .. } => Input,
    EndError::Store(e) => e.kind(),
    EndError::Record(e) => crate::error::Kind::kind(e),
});

/// Sessions ended by [`Tacho::end_session`].
#[derive(Debug, Clone, Serialize)]
pub struct Ended {
    pub session: String,
    pub reason: EndReason,
    /// The `session.end` of each session ended: its descendants that had not ended
    /// (deepest first), then the session itself.
    pub ended: Vec<EndedSession>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EndedSession {
    pub session: String,
    /// The sequence number of its `session.end`.
    pub seq: u64,
}

impl Tacho {
    /// Records `session.end` (`reason`, `message`) for `session` (resolved), and
    /// `aborted` for each of its descendants that has not ended (subagents die with
    /// their agent), all in one ingest made durable before it returns. Refused for a
    /// session that has ended; a session a process is writing now waits for it, as
    /// any writer does, then fails busy. No snapshot is taken: what changed in the
    /// workspace after a session's last snapshot is not the session's, and a rollback
    /// reports it as a conflict instead of undoing it.
    pub fn end_session(
        &self,
        session: &str,
        reason: EndReason,
        message: Option<String>,
    ) -> Result<Ended, EndError> {
        let mut children: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut ended: BTreeMap<String, Option<EndReason>> = BTreeMap::new();
        for e in self.session_index()?.entries() {
            let Some(f) = e.facts.map(|at| at.facts) else {
                continue;
            };
            if let Some(p) = f.parent {
                children.entry(p).or_default().push(e.session.clone());
            }
            ended.insert(e.session, f.end_reason);
        }
        // A session the index has no facts for is folded from its events.
        let end_of = |s: &str| -> Result<Option<EndReason>, StoreError> {
            match ended.get(s) {
                Some(r) => Ok(*r),
                None => Ok(self.graph(s)?.end_reason),
            }
        };
        if let Some(reason) = end_of(session)? {
            return Err(EndError::AlreadyEnded {
                session: session.to_owned(),
                reason,
            });
        }
        // Descendants breadth first; ended deepest first.
        let mut order = Vec::new();
        let mut seen = BTreeSet::from([session.to_owned()]);
        let mut at = 0;
        let mut queue = vec![session.to_owned()];
        while let Some(p) = queue.get(at).cloned() {
            at += 1;
            for c in children.get(&p).into_iter().flatten() {
                if seen.insert(c.clone()) {
                    queue.push(c.clone());
                    if end_of(c)?.is_none() {
                        order.push(c.clone());
                    }
                }
            }
        }
        order.reverse();
        let opts = IngestOptions::one_batch("tacho session end");
        let mut ingest = Ingest::new(self, opts, |_| Ok(()))
            .map_err(|error| RecordError { error, recorded: 0 })?;
        let record = |ingest: &mut Ingest, s: &str, reason: EndReason, message: String| {
            let body = EventBody::SessionEnd(SessionEnd {
                reason,
                message: Some(message),
            });
            ingest
                .event(0, s.to_owned(), self.now(), body)
                .map_err(|error| RecordError { error, recorded: 0 })
        };
        for d in &order {
            record(
                &mut ingest,
                d,
                EndReason::Aborted,
                format!("ended with its ancestor {session} by `tacho session end`"),
            )?;
        }
        record(
            &mut ingest,
            session,
            reason,
            message.unwrap_or_else(|| {
                "ended by `tacho session end`: the agent recorded no end".into()
            }),
        )?;
        let done = ingest.finish()?;
        let seq_of = |s: &str| done.totals.get(s).map_or(0, |t| t.last_seq);
        Ok(Ended {
            session: session.to_owned(),
            reason,
            ended: order
                .iter()
                .map(String::as_str)
                .chain([session])
                .map(|s| EndedSession {
                    session: s.to_owned(),
                    seq: seq_of(s),
                })
                .collect(),
        })
    }
}
