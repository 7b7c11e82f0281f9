//! The session index kept complete and current: rebuilt from the streams when there is
//! none, healed where a writer left an entry dirty, and given the facts (summary and
//! risk) of sessions whose facts are behind their stream. Every listing, prefix
//! resolution and child lookup reads it instead of every stream.

use tacho_projections::{ExecutionGraph, RiskLevel, SessionStatus, SessionSummary};
use tacho_schema::{EventBody, EventView};
use tacho_store::index::{FactsAt, IndexEntry, IndexView, Record, SessionFacts};
use tacho_store::{Finding, ReadEnd, Severity, StoreError, StreamReport, hex};

use crate::Tacho;

/// The rules the index's facts are computed by: raised whenever the same events give
/// other facts (a risk rule changed), so that facts an older tacho computed are
/// computed again instead of listed, or reported by `log verify` as damage (SPEC
/// §8.4). A new store's index begins with them recorded (`StoreOptions::facts_rules`).
/// (v2: a goal check's receipt counts as verification; v3: changes no tool call
/// claims are a risk factor of their own, not changed files; v4: a rollback tacho
/// applied is not scored for the files it restored.)
pub(crate) const FACTS_RULES: &str = "tacho.facts.v4";

/// Risk levels by rank (the index stores the rank).
const LEVELS: [RiskLevel; 4] = [
    RiskLevel::Low,
    RiskLevel::Medium,
    RiskLevel::High,
    RiskLevel::Critical,
];

pub(crate) fn rank_of(level: RiskLevel) -> u8 {
    LEVELS.iter().position(|l| *l == level).unwrap_or(0) as u8
}

pub(crate) fn level_of(rank: u8) -> RiskLevel {
    LEVELS
        .get(rank as usize)
        .copied()
        .unwrap_or(RiskLevel::Critical)
}

/// The facts of a session's graph (its risk scored by `assess`'s rules, without the
/// factors' text: the index keeps the score and level).
fn facts_of(g: &ExecutionGraph, source: Option<String>) -> SessionFacts {
    let (risk_score, risk_level) = tacho_projections::risk_score(g);
    let s = SessionSummary::from_graph(g);
    SessionFacts {
        started_unix_ns: s.started_unix_ns,
        last_event_unix_ns: s.last_event_unix_ns,
        end_reason: match s.status {
            SessionStatus::Running => None,
            SessionStatus::Ended(r) => Some(r),
        },
        agent: s.agent,
        title: s.title,
        workspace: s.workspace,
        project: s.project,
        parent: s.parent,
        source,
        events: s.events,
        steps: s.steps,
        tool_calls: s.tool_calls,
        tool_failures: s.tool_failures,
        files_edited: s.files_edited,
        tokens_in: s.tokens_in,
        tokens_out: s.tokens_out,
        risk_score,
        risk_level: rank_of(risk_level),
        damaged: None,
    }
}

/// The summary a listing shows, from stored facts.
pub(crate) fn summary_of(session: &str, f: &SessionFacts) -> SessionSummary {
    SessionSummary {
        session: session.to_string(),
        started_unix_ns: f.started_unix_ns,
        last_event_unix_ns: f.last_event_unix_ns,
        status: f
            .end_reason
            .map_or(SessionStatus::Running, SessionStatus::Ended),
        agent: f.agent.clone(),
        title: f.title.clone(),
        workspace: f.workspace.clone(),
        project: f.project.clone(),
        parent: f.parent.clone(),
        events: f.events,
        steps: f.steps,
        tool_calls: f.tool_calls,
        tool_failures: f.tool_failures,
        files_edited: f.files_edited,
        tokens_in: f.tokens_in,
        tokens_out: f.tokens_out,
    }
}

/// Sessions per progress note while rebuilding.
const REBUILD_NOTE_EVERY: usize = 5_000;

impl Tacho {
    /// Whether the index's facts were computed by the rules in force.
    pub(crate) fn facts_rules_current(&self) -> bool {
        self.log()
            .index_facts_rules()
            .is_some_and(|r| r == FACTS_RULES.as_bytes())
    }

    /// Records that the index's facts are those of the rules in force (a store that
    /// cannot be written computes them again next time).
    fn record_facts_rules(&self) {
        if let Err(e) = self.log().set_index_facts_rules(FACTS_RULES) {
            self.note(&format!(
                "note: the rules of the session index's facts were not recorded: {e}"
            ));
        }
    }

    /// The facts of a session as its stream holds them now, with the head they describe.
    /// A stream that does not read gives facts saying so (at `fallback`'s head); a
    /// stream that does not exist (yet) gives `None`.
    fn current_facts(&self, session: &str, fallback: (u64, [u8; 32])) -> Option<FactsAt> {
        Some(match self.graph_and_end(session) {
            Ok((g, ReadEnd { next_seq, head, .. })) => FactsAt {
                next_seq,
                head,
                facts: facts_of(&g, self.source_of(session)),
            },
            Err(StoreError::NotFound(_)) => return None,
            Err(e) => FactsAt {
                next_seq: fallback.0,
                head: fallback.1,
                facts: SessionFacts {
                    damaged: Some(e.to_string()),
                    ..SessionFacts::default()
                },
            },
        })
    }

    /// The index record of the facts of a session folded from `g` (with what its
    /// snapshots show merged in) and `source`, at its head `at`.
    pub(crate) fn facts_record(
        &self,
        mut g: ExecutionGraph,
        source: Option<String>,
        at: (u64, [u8; 32]),
    ) -> Record {
        self.merge_observed(&mut g);
        Record::Facts {
            session: g.session.clone(),
            at: FactsAt {
                next_seq: at.0,
                head: at.1,
                facts: facts_of(&g, source),
            },
        }
    }

    /// What produced a session's events (its `session.start`'s `source`).
    fn source_of(&self, session: &str) -> Option<String> {
        match self.log().first_event(session) {
            Ok(Some(e)) => match e.body {
                EventBody::SessionStart(s) => s.source,
                _ => None,
            },
            _ => None,
        }
    }

    /// The entry of one session read from its stream: its head (under the stream's
    /// lock, when no writer holds it; dirty otherwise) and its facts.
    fn entry_from_stream(&self, session: &str) -> IndexEntry {
        let (head, dirty) = match self.log().try_writer(session) {
            Ok(w) => {
                // While `w` lives no writer appends: head and facts agree.
                let head = (w.next_seq(), w.head());
                return IndexEntry {
                    session: session.to_string(),
                    next_seq: head.0,
                    head: head.1,
                    dirty: false,
                    facts: self.current_facts(session, head),
                };
            }
            Err(StoreError::Busy { .. }) => ((0, [0; 32]), true),
            Err(_) => ((0, [0; 32]), false),
        };
        let at = self.current_facts(session, head);
        let known = at.as_ref().filter(|_| !dirty);
        IndexEntry {
            session: session.to_string(),
            next_seq: known.map_or(0, |a| a.next_seq),
            head: known.map_or([0; 32], |a| a.head),
            dirty,
            facts: at,
        }
    }

    /// Rebuilds the index from the streams (what a deleted or missing index costs once).
    /// Returns how many sessions it indexed.
    pub fn rebuild_index(&self) -> Result<usize, StoreError> {
        let log = self.log();
        let mark = log.index_mark()?;
        let ids = log.sessions()?;
        let big = ids.len() >= REBUILD_NOTE_EVERY;
        if big {
            self.note(&format!(
                "building the session index of {} sessions (once; later listings read it)",
                ids.len()
            ));
        }
        let mut entries = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            entries.push(self.entry_from_stream(id));
            if big && (i + 1) % REBUILD_NOTE_EVERY == 0 {
                self.note(&format!("  {} of {} sessions indexed", i + 1, ids.len()));
            }
        }
        let n = entries.len();
        log.index_replace(entries, mark)?;
        self.record_facts_rules();
        Ok(n)
    }

    /// The session index, complete and current: built when missing, dirty entries
    /// healed, facts brought up to each stream's head. A store that cannot be written
    /// (read-only) still answers: what could not be recorded is computed again next
    /// time.
    pub(crate) fn session_index(&self) -> Result<IndexView, StoreError> {
        let log = self.log();
        let mut view = log.index()?;
        if !view.complete() {
            if !log.exists() {
                return Ok(view);
            }
            self.rebuild_index()?;
            view = log.index()?;
        }
        // Facts computed by other rules (an older tacho's) are computed again, all of
        // them, once.
        let rules_current = self.facts_rules_current();
        let mut behind = Vec::new();
        view.for_each_newest_first(|e| {
            if !rules_current || !e.is_fresh() {
                behind.push(e.to_owned());
            }
            true
        });
        if !rules_current && behind.len() >= REBUILD_NOTE_EVERY {
            self.note(&format!(
                "computing the facts of {} sessions again (once: the rules of their risk changed)",
                behind.len()
            ));
        }
        let mut records = Vec::new();
        for e in behind {
            if e.dirty {
                match log.try_writer(&e.session) {
                    Ok(w) if w.next_seq() == 0 => {
                        // A writer recorded that it would write, and wrote nothing.
                        let gone = Record::Removed {
                            session: e.session.clone(),
                        };
                        if let Err(err) = log.index_append(std::slice::from_ref(&gone), false) {
                            self.note(&format!("note: the session index was not updated: {err}"));
                        }
                        records.push(gone);
                        continue;
                    }
                    Ok(w) => {
                        // Recorded while `w` holds the stream: no writer is mid-way.
                        let head = Record::Head {
                            session: e.session.clone(),
                            next_seq: w.next_seq(),
                            head: w.head(),
                        };
                        if let Err(err) = log.index_append(std::slice::from_ref(&head), false) {
                            self.note(&format!("note: the session index was not updated: {err}"));
                        }
                        records.push(head);
                    }
                    Err(_) => {}
                }
            }
            if let Some(at) = self.current_facts(&e.session, (e.next_seq, e.head)) {
                records.push(Record::Facts {
                    session: e.session.clone(),
                    at,
                });
            }
        }
        if !records.is_empty() {
            // Head and Removed records were appended above, under their stream's lock.
            let appended: Vec<Record> = records
                .iter()
                .filter(|r| matches!(r, Record::Facts { .. }))
                .cloned()
                .collect();
            let len = match log.index_append(&appended, false) {
                Ok(len) => {
                    if !rules_current {
                        self.record_facts_rules();
                    }
                    len
                }
                Err(err) => {
                    self.note(&format!("note: the session index was not updated: {err}"));
                    0
                }
            };
            view.apply(records);
            if len > log.options().index_compact_bytes
                && let Err(err) = log.index_compact()
            {
                self.note(&format!("note: the session index was not compacted: {err}"));
            }
        }
        Ok(view)
    }
}

/// Whether a clean index entry names another head than the verified stream's, or
/// any entry more events than the stream holds: a head is recorded only once durable
/// and never moves back, so even a dirty entry's is a floor.
fn head_differs(e: &IndexEntry, r: &StreamReport) -> bool {
    (!e.dirty && (e.next_seq, e.head) != (r.next_seq, r.chain)) || e.next_seq > r.next_seq
}

/// Whether `r`'s index entry (read before the stream) names another head than a
/// stream that verified: checked once more after every stream is read, since a writer
/// may have appended meanwhile ([`Tacho::recheck_index_entries`]).
pub(crate) fn index_head_differs(entry: &IndexEntry, r: &StreamReport) -> bool {
    !r.findings.iter().any(|f| f.severity == Severity::Error) && head_differs(entry, r)
}

/// A verified stream whose index entry, read before the stream, named another head;
/// checked again once every stream is read ([`Tacho::recheck_index_entries`]).
pub(crate) struct Deferred {
    pub(crate) slot: usize,
    /// The entry as first read (`None`: it had none).
    pub(crate) before: Option<IndexEntry>,
    pub(crate) folded: Option<ExecutionGraph>,
    pub(crate) source: Option<String>,
}

fn index_finding(severity: Severity, session: &str, message: String) -> Finding {
    Finding {
        severity,
        session: session.to_string(),
        segment: None,
        offset: None,
        message,
    }
}

impl Tacho {
    /// After a bulk ingest (`tacho record`): the session index compacted when the
    /// records appended are past the size at which a listing compacts them, so that
    /// the next reader (a listing, `log verify`) reads the snapshot rather than folding
    /// every record (writers alone compact only past 4 MiB). Best effort, as a
    /// listing's compaction: an index left as it is only reads slower.
    pub fn compact_index_after_ingest(&self) {
        let log = self.log();
        if log.index_log_len() > log.options().index_compact_bytes
            && let Err(err) = log.index_compact()
        {
            self.note(&format!("note: the session index was not compacted: {err}"));
        }
    }

    /// Checks a session's index entry against its verified stream: present; its head
    /// the stream's unless marked dirty; its facts, when they claim to describe that
    /// head, equal to the facts of `folded` and `source`, the stream's events folded
    /// anew while they were verified (not stored projections). `entry` is the
    /// session's entry as read from the index. `rules_current`: whether the index's
    /// facts are of the rules in force ([`Tacho::facts_rules_current`], read once for
    /// a pass over every stream rather than once a session). `folded` is `None` when
    /// the events were not folded while verified (the entry read before had no facts
    /// to compare): they are folded now, if facts are to be compared after all, up
    /// to the head verified (committed events never change).
    pub(crate) fn check_index_entry(
        &self,
        entry: Option<IndexEntry>,
        r: &StreamReport,
        folded: Option<ExecutionGraph>,
        source: Option<String>,
        rules_current: bool,
    ) -> Vec<Finding> {
        let s = &r.session;
        let fix = "(derived data: `tacho log reindex` rebuilds it)";
        if r.findings.iter().any(|f| f.severity == Severity::Error) {
            return Vec::new();
        }
        let Some(e) = entry else {
            return vec![index_finding(
                Severity::Error,
                s,
                format!("the session index has no entry for this session {fix}"),
            )];
        };
        let mut out = Vec::new();
        if e.next_seq > r.next_seq {
            out.push(index_finding(
                Severity::Error,
                s,
                format!(
                    "the session index says {} events (head {}), the stream holds {}: {} committed events are missing from the end of the stream (the index records a head only once it is durable; if the index is what changed, `tacho log reindex` rebuilds it)",
                    e.next_seq,
                    hex(&e.head),
                    r.next_seq,
                    e.next_seq - r.next_seq
                ),
            ));
        } else if head_differs(&e, r) {
            out.push(index_finding(
                Severity::Error,
                s,
                format!(
                    "the session index says {} events (head {}), the stream holds {} (head {}) {fix}",
                    e.next_seq,
                    hex(&e.head),
                    r.next_seq,
                    hex(&r.chain)
                ),
            ));
        } else if let Some(stored) = e.fresh_facts()
            // Facts of older rules are not damage: the next listing computes them again.
            && rules_current
        {
            let (mut folded, source) = match folded {
                Some(g) => (g, source),
                None => match self.fold_verified_prefix(s, r.next_seq) {
                    Ok(f) => f,
                    Err(err) => {
                        out.push(index_finding(
                            Severity::Error,
                            s,
                            format!(
                                "the stream did not read again to check the session index's facts: {err}"
                            ),
                        ));
                        return out;
                    }
                },
            };
            self.merge_observed(&mut folded);
            let fresh = facts_of(&folded, source);
            if fresh != *stored {
                out.push(index_finding(
                    Severity::Error,
                    s,
                    format!(
                        "the session index's facts differ from the events: stored {stored:?}, folded {fresh:?} {fix}"
                    ),
                ));
            }
        }
        out
    }

    /// A stream's events before `next_seq` folded anew (as `log verify` folds them
    /// while it verifies), with the source its `session.start` names.
    fn fold_verified_prefix(
        &self,
        session: &str,
        next_seq: u64,
    ) -> Result<(ExecutionGraph, Option<String>), StoreError> {
        let mut g = ExecutionGraph::new(session);
        let mut source = None;
        let visit: tacho_store::EventVisitor<'_> = &mut |seq, at, e| {
            if seq >= next_seq {
                return;
            }
            if let (0, EventView::SessionStart { source: from, .. }) = (seq, e) {
                source = from.map(str::to_owned);
            }
            g.apply_view(seq, at, e)
        };
        self.log().verify_session_visiting(session, visit)?;
        Ok((g, source))
    }

    /// Checks again, against `fresh` (the index read after every stream), the entries
    /// whose head differed from their stream's, and the streams that had none. Writers append a synced `Dirty`
    /// record before a stream's first new frame, so an entry unchanged since the
    /// first reading was not moved by a writer: its difference stands. One that
    /// changed meanwhile is checked as it is now, unless it is dirty (a writer is
    /// mid-way) or ahead of the stream as read (a writer appended after the reading).
    pub(crate) fn recheck_index_entries(
        &self,
        fresh: &IndexView,
        deferred: Vec<Deferred>,
        streams: &mut [StreamReport],
    ) {
        let rules_current = self.facts_rules_current();
        for d in deferred {
            let Some(r) = streams.get_mut(d.slot) else {
                continue;
            };
            let findings = match (fresh.get(&r.session), d.before) {
                (Some(now), Some(before)) if now == before => {
                    self.check_index_entry(Some(before), r, d.folded, d.source, rules_current)
                }
                (Some(now), _) if now.dirty || now.next_seq > r.next_seq => Vec::new(),
                (now, _) => self.check_index_entry(now, r, d.folded, d.source, rules_current),
            };
            r.findings.extend(findings);
        }
    }

    /// Store-level checks of the index: entries of sessions that have no stream, and
    /// damage skipped while reading it.
    pub(crate) fn check_index_store(&self, view: &IndexView, streams: &[String]) -> Vec<Finding> {
        let mut out: Vec<Finding> = view
            .damage
            .iter()
            .map(|d| index_finding(Severity::Warning, "(session index)", d.clone()))
            .collect();
        let known: std::collections::HashSet<&str> = streams.iter().map(String::as_str).collect();
        // (Only each entry's session and count are needed: no entry is taken out whole.)
        let mut unknown: Vec<(String, u64)> = Vec::new();
        view.for_each_head(|session, next_seq| {
            // (A dirty entry's head is durable too: a floor.)
            if next_seq > 0 && !known.contains(session) {
                unknown.push((session.to_string(), next_seq));
            }
        });
        unknown.sort();
        // The index is read before the store is listed: an entry of a session removed
        // between the two (`audit prune` removes the stream, then the entry) is gone
        // from the index read now.
        let now = match unknown.is_empty() {
            true => None,
            false => self.log().index().ok(),
        };
        for (session, next_seq) in unknown {
            if !self.log().has_session(&session)
                && now.as_ref().is_none_or(|v| v.get(&session).is_some())
            {
                out.push(index_finding(
                    Severity::Error,
                    &session,
                    format!(
                        "the session index lists {next_seq} events of a session the store does not hold \
                         (derived data: `tacho log reindex` rebuilds it)"
                    ),
                ));
            }
        }
        out
    }
}
