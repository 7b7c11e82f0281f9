//! Sessions: resolving them, their workspace (defined here once), their graph, and the
//! listing with its filters.

use std::fmt;
use std::path::PathBuf;

use tacho_projections::{ExecutionGraph, RiskAssessment, RiskLevel, SessionSummary};
use tacho_schema::EventBody;
use tacho_store::{ReadEnd, StoreError, StoredEvent};

use crate::error::{ErrorKind, Field, Kind, Namer, neutral};
use crate::{SessionGraph, SessionId, Tacho};

/// Why `session list` could not run.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    #[error("{}", neutral(self))]
    BadSince(String),
    #[error("{}", neutral(self))]
    BadRisk(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Kind for ListError {
    fn kind(&self) -> ErrorKind {
        match self {
            ListError::BadSince(_) | ListError::BadRisk(_) => ErrorKind::Input,
            ListError::Store(e) => e.kind(),
        }
    }

    fn field(&self) -> Option<Field> {
        match self {
            ListError::BadSince(_) => Some(Field::Since),
            ListError::BadRisk(_) => Some(Field::Risk),
            ListError::Store(_) => None,
        }
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        match self {
            ListError::BadSince(given) => write!(
                f,
                "{} {given:?} is not a date (2026-08-01), an RFC 3339 time or an age (30m, 12h, 7d)",
                name.field(Field::Since)
            ),
            ListError::BadRisk(given) => write!(
                f,
                "{} {given:?} is not one of low, medium, high, critical",
                name.field(Field::Risk)
            ),
            ListError::Store(e) => fmt::Display::fmt(e, f),
        }
    }
}

/// The filters of `session list`, as given.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// An RFC 3339 time, or a date meaning its midnight UTC.
    pub since: Option<String>,
    /// A risk level: only sessions at or above it.
    pub risk: Option<String>,
    /// A project: the `project` of session.start, or the last component of the
    /// workspace.
    pub project: Option<String>,
}

impl ListFilter {
    pub fn is_empty(&self) -> bool {
        self.since.is_none() && self.risk.is_none() && self.project.is_none()
    }
}

/// One session of a listing.
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub summary: SessionSummary,
    pub risk_score: u32,
    pub risk_level: RiskLevel,
    /// The session's record does not verify (where and why): nothing else about it is
    /// shown, and the other sessions still answer.
    pub damaged: Option<String>,
}

/// A session row as a record (`session list --json`, SPEC): the summary, its status in
/// words, and its risk; a damaged session is its id, `status: damaged` and the damage.
impl serde::Serialize for SessionRow {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Damaged<'a> {
            session: &'a str,
            status: &'static str,
            damage: &'a str,
        }
        match &self.damaged {
            Some(why) => Damaged {
                session: &self.summary.session,
                status: "damaged",
                damage: why,
            }
            .serialize(ser),
            None => RowRecord::of(&self.summary, self.risk_score, self.risk_level).serialize(ser),
        }
    }
}

/// The fields of a session row record.
#[derive(serde::Serialize)]
struct RowRecord<'a> {
    session: &'a str,
    started_unix_ns: Option<i64>,
    last_event_unix_ns: Option<i64>,
    /// `running`, or how it ended.
    status: String,
    agent: &'a Option<String>,
    title: &'a Option<String>,
    workspace: &'a Option<String>,
    project: &'a Option<String>,
    parent: &'a Option<String>,
    events: u64,
    steps: u64,
    tool_calls: u64,
    tool_failures: u64,
    files_edited: u64,
    tokens_in: u64,
    tokens_out: u64,
    risk_score: u32,
    risk_level: RiskLevel,
}

impl<'a> RowRecord<'a> {
    fn of(s: &'a SessionSummary, risk_score: u32, risk_level: RiskLevel) -> Self {
        RowRecord {
            session: &s.session,
            started_unix_ns: s.started_unix_ns,
            last_event_unix_ns: s.last_event_unix_ns,
            status: crate::render::session::status(s.status),
            agent: &s.agent,
            title: &s.title,
            workspace: &s.workspace,
            project: &s.project,
            parent: &s.parent,
            events: s.events,
            steps: s.steps,
            tool_calls: s.tool_calls,
            tool_failures: s.tool_failures,
            files_edited: s.files_edited,
            tokens_in: s.tokens_in,
            tokens_out: s.tokens_out,
            risk_score,
            risk_level,
        }
    }
}

/// One session in detail (`session show`).
#[derive(Debug, Clone)]
pub struct SessionDetail {
    pub summary: SessionSummary,
    pub graph: ExecutionGraph,
    pub risk: RiskAssessment,
    pub segments: usize,
    /// Whether, and by whom, its head is signed (SPEC §16.3).
    pub signature: crate::SignatureStatus,
    /// Where it was fetched from, when it was.
    pub origin: Option<crate::Origin>,
}

/// `session show --json`: the row record with the detail's own facts. Risk facts are
/// the risk assessment's, in its JSON form (`tacho risk --json`).
impl serde::Serialize for SessionDetail {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Record<'a> {
            #[serde(flatten)]
            row: RowRecord<'a>,
            duration_ms: Option<u64>,
            agents: &'a [String],
            files: Vec<&'a String>,
            readiness: tacho_projections::Readiness,
            verified: bool,
            segments: usize,
            cache_read: u64,
            cache_write: u64,
            signature: &'a crate::SignatureStatus,
            origin: &'a Option<crate::Origin>,
        }
        let g = &self.graph;
        Record {
            row: RowRecord::of(&self.summary, self.risk.score, self.risk.level),
            duration_ms: g.duration_ms(),
            agents: &g.agents,
            files: g.files.keys().collect(),
            readiness: self.risk.readiness,
            verified: self.risk.verified,
            segments: self.segments,
            cache_read: g.tokens.cache_read,
            cache_write: g.tokens.cache_write,
            signature: &self.signature,
            origin: &self.origin,
        }
        .serialize(ser)
    }
}

/// `--since`: an RFC 3339 time, a date meaning its midnight UTC, or an age before
/// `now` (`30m`, `12h`, `7d`).
pub(crate) fn parse_since(s: &str, now_unix_ns: i64) -> Result<i64, ListError> {
    let unit_ns: Option<i64> = match s.chars().last() {
        Some('m') => Some(60),
        Some('h') => Some(3_600),
        Some('d') => Some(86_400),
        Some('w') => Some(7 * 86_400),
        _ => None,
    }
    .map(|secs| secs * 1_000_000_000);
    if let Some(unit) = unit_ns
        && let Some(n) = s
            .get(..s.len() - 1)
            .and_then(|n| n.parse::<i64>().ok())
            .filter(|n| *n >= 0)
    {
        return n
            .checked_mul(unit)
            .map(|age| now_unix_ns.saturating_sub(age))
            .ok_or_else(|| ListError::BadSince(s.to_owned()));
    }
    let text = if s.len() == 10 {
        format!("{s}T00:00:00Z")
    } else {
        s.to_string()
    };
    tacho_schema::parse_rfc3339(&text).map_err(|_| ListError::BadSince(s.to_owned()))
}

/// The project of a session: its `project`, else the last component of its workspace.
pub fn project_of(s: &SessionSummary) -> Option<String> {
    s.project.clone().or_else(|| {
        s.workspace.as_ref().and_then(|w| {
            w.trim_end_matches('/')
                .rsplit('/')
                .next()
                .map(str::to_string)
        })
    })
}

impl Tacho {
    /// The execution graph of a session (resolved id): its stored projection brought
    /// up to date, or a rebuild when there is none it can trust.
    /// Changes the session's snapshots show are merged in (a session scores the same
    /// whether its tools reported edits or not); when the snapshot store cannot be
    /// read, the graph of the events alone, with a note. Views take it with its risk
    /// assessment ([`Tacho::session_graph`]); this is the one path that makes it.
    pub(crate) fn graph(&self, session: &str) -> Result<ExecutionGraph, StoreError> {
        Ok(self.graph_and_end(session)?.0)
    }

    /// [`Tacho::graph`], with where the log ended when it was read.
    pub(crate) fn graph_and_end(
        &self,
        session: &str,
    ) -> Result<(ExecutionGraph, tacho_store::ReadEnd), StoreError> {
        let (mut g, end) = crate::projection::graph(self.log(), session, &|n| self.note(n))?;
        self.merge_observed(&mut g);
        Ok((g, end))
    }

    /// The graph of a session folded from its log alone, with the changes its
    /// snapshots show computed from their objects: never a stored projection or a
    /// cached diff (files of the data directory the watched agent can rewrite). What
    /// evidence for others (`ci verify`, `attest`, `attribution`) is built on.
    pub(crate) fn evidence_graph(&self, session: &str) -> Result<ExecutionGraph, StoreError> {
        let mut g = crate::projection::rebuild(self.log(), session, u64::MAX)?;
        self.merge_observed_with(&mut g, true);
        Ok(g)
    }

    /// Merges what the snapshots show into a graph folded from the events.
    pub(crate) fn merge_observed(&self, g: &mut ExecutionGraph) {
        self.merge_observed_with(g, false);
    }

    fn merge_observed_with(&self, g: &mut ExecutionGraph, fresh: bool) {
        match self.observed_changes(g, fresh) {
            Ok(changes) => {
                g.merge_observed(&changes.claimed);
                g.merge_unclaimed(changes.unclaimed);
            }
            Err(e) => self.note(&format!(
                "note: session {}: changes seen in snapshots are left out: {e}",
                g.session
            )),
        }
    }

    /// The workspace a session recorded in its `session.start`, as recorded.
    pub fn recorded_workspace(&self, session: &str) -> Result<Option<String>, StoreError> {
        Ok(match self.log().first_event(session)? {
            Some(e) => match e.body {
                EventBody::SessionStart(s) => s.workspace,
                _ => None,
            },
            None => None,
        })
    }

    /// The workspace of a session on this machine: the one it recorded, when that is a
    /// directory here. The one definition every operation uses.
    pub fn session_workspace(&self, session: &str) -> Result<Option<PathBuf>, StoreError> {
        if !self.log().has_session(session) {
            return Ok(None);
        }
        Ok(self
            .recorded_workspace(session)?
            .map(PathBuf::from)
            .filter(|p| p.is_dir()))
    }

    /// Every event of a session, in order.
    pub fn events(&self, session: &str) -> Result<Vec<StoredEvent>, StoreError> {
        let mut all = Vec::new();
        self.for_each_event(session, |e| all.push(e))?;
        Ok(all)
    }

    /// Calls `f` with every committed event of a session, in order, one at a time
    /// (what exporters stream); returns where the log ended. The events of the batches
    /// before a damaged one are handed out, then the error names the damage.
    pub fn for_each_event(
        &self,
        session: &str,
        f: impl FnMut(StoredEvent),
    ) -> Result<ReadEnd, StoreError> {
        self.log().read_session(session, f)
    }

    /// The sessions an audit command covers, oldest first: one session, or every
    /// session that passes the filters.
    pub fn select_sessions(
        &self,
        session: Option<&SessionId>,
        filter: &ListFilter,
    ) -> Result<Vec<String>, ListError> {
        if let Some(id) = session {
            return Ok(vec![id.to_string()]);
        }
        let mut rows = self.list_sessions(filter, None)?;
        rows.reverse();
        Ok(rows.into_iter().map(|r| r.summary.session).collect())
    }

    /// The sessions that pass the filters, newest first, at most `limit` of them
    /// (all with `None`). Read from the session index (brought up to date first); each
    /// row vouched for ([`Tacho::vouch_rows`]).
    pub fn list_sessions(
        &self,
        filter: &ListFilter,
        limit: Option<usize>,
    ) -> Result<Vec<SessionRow>, ListError> {
        let mut rows = self.session_rows(filter, limit)?;
        self.vouch_rows(&mut rows, usize::MAX);
        Ok(rows)
    }

    /// Every session that passes the filters, newest first, of which only the first
    /// `shown` are shown (the run-report index: its table, and a chart of the facts
    /// of all): those are vouched for, the rest are as the index has them.
    pub fn list_sessions_showing(
        &self,
        filter: &ListFilter,
        shown: usize,
    ) -> Result<Vec<SessionRow>, ListError> {
        let mut rows = self.session_rows(filter, None)?;
        self.vouch_rows(&mut rows, shown);
        Ok(rows)
    }

    /// The rows of a listing as the session index has them.
    fn session_rows(
        &self,
        filter: &ListFilter,
        limit: Option<usize>,
    ) -> Result<Vec<SessionRow>, ListError> {
        let now = self.now();
        let since = filter
            .since
            .as_deref()
            .map(|s| parse_since(s, now))
            .transpose()?;
        let min_risk = match &filter.risk {
            Some(r) => Some(RiskLevel::parse(r).ok_or_else(|| ListError::BadRisk(r.clone()))?),
            None => None,
        };
        let min_rank = min_risk.map(crate::index::rank_of);
        let view = self.session_index()?;
        let mut rows = Vec::new();
        view.for_each_newest_first(|e| {
            if limit.is_some_and(|l| rows.len() >= l) {
                return false;
            }
            if let Some(t) = since {
                // Newest first: once one started before `since`, all the rest did.
                if e.started().is_none_or(|st| st < t) {
                    return false;
                }
            }
            if !e.is_damaged() && min_rank.is_some_and(|m| e.risk_level().is_none_or(|r| r < m))
                || filter
                    .project
                    .as_ref()
                    .is_some_and(|p| e.project() != Some(p.as_str()))
            {
                return true;
            }
            let Some(f) = e.facts() else {
                return true;
            };
            rows.push(SessionRow {
                summary: crate::index::summary_of(e.session(), &f),
                risk_score: f.risk_score,
                risk_level: crate::index::level_of(f.risk_level),
                damaged: f.damaged.clone(),
            });
            true
        });
        Ok(rows)
    }

    /// Marks the rows (the first `shown`) whose stream no longer verifies (changed in
    /// place since it was indexed: the index describes it as it was), and drops those
    /// whose stream is gone. A stream is read again only when its files changed since
    /// it last verified (SPEC §8.4, `vouched`).
    fn vouch_rows(&self, rows: &mut Vec<SessionRow>, shown: usize) {
        let ids: Vec<&str> = rows
            .iter()
            .take(shown)
            .filter(|r| r.damaged.is_none())
            .map(|r| r.summary.session.as_str())
            .collect();
        let said: std::collections::HashMap<String, tacho_store::Vouch> = ids
            .iter()
            .map(|s| s.to_string())
            .zip(self.log().vouch(&ids))
            .collect();
        rows.retain_mut(|r| match said.get(&r.summary.session) {
            Some(tacho_store::Vouch::Gone) => false,
            Some(tacho_store::Vouch::Damaged(f)) => {
                r.damaged = Some(match (&f.segment, f.offset) {
                    (Some(p), Some(o)) => format!("{} at offset {o}: {}", p.display(), f.message),
                    (Some(p), None) => format!("{}: {}", p.display(), f.message),
                    _ => f.message.clone(),
                });
                true
            }
            _ => true,
        });
    }

    /// One session in detail.
    pub fn show_session(&self, session: &SessionId) -> Result<SessionDetail, StoreError> {
        let SessionGraph { graph, risk } = self.session_graph(session)?;
        Ok(SessionDetail {
            summary: SessionSummary::from_graph(&graph),
            risk,
            segments: self.log().segments(session)?.len(),
            signature: self.signature(session)?,
            origin: self.origin(session),
            graph,
        })
    }
}
