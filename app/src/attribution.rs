//! `tacho attribution BASE..HEAD` (SPEC §17.6): who wrote each line a commit of the
//! range changed, as Agent Trace records (v0.1.0, one per commit). tacho's snapshots
//! hold each file before and after every tool call — shell commands included — so a
//! line is attributed by following the file through the session's snapshots: a line
//! a change between two snapshots added or rewrote belongs to the tool call that
//! claims that change (the step it ran in), or to the user when no tool call ran
//! (SPEC §8.1); lines a later change left alone keep their author. A line no snapshot
//! explains is `unknown`, never guessed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value, json};
use tacho_git::snapshot::SnapshotStore;
use tacho_goals::commits::{CommitsError, RangeChange, range_changes};
use tacho_projections::ExecutionGraph;

use crate::Tacho;
use crate::changes::{PairOrigin, pair_origin};
use crate::ci::{CiCommit, CiError, CiPolicy};

/// The Agent Trace version the records follow.
pub const AGENT_TRACE_VERSION: &str = "0.1.0";
/// How far a commit's time may lie after the snapshot that holds its content (Git
/// keeps whole seconds).
const COMMIT_SLACK_NS: i64 = 2_000_000_000;

/// Who wrote a line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "origin", rename_all = "snake_case")]
pub enum LineOrigin {
    /// A tool call of the agent: the step it ran in and the call (its `tool.call` seq).
    Ai {
        session: String,
        step: Option<u64>,
        call_seq: u64,
        tool: Option<String>,
        /// The two snapshots (seqs) the change was seen between.
        between: (u64, u64),
    },
    /// A change no tool call made, between two of the session's snapshots: the user
    /// (or another process; SPEC §8.1).
    Human {
        session: String,
        between: (u64, u64),
    },
    /// In the file before the session's first snapshot of it, or in the commit but in
    /// no snapshot: nothing tacho saw says who wrote it.
    Unknown,
    /// Two sessions that link the commit say different things of the line: each is
    /// listed (a second session can be made up to claim a commit).
    Mixed { origins: Vec<LineOrigin> },
}

impl LineOrigin {
    /// Agent Trace's contributor type.
    pub fn contributor(&self) -> &'static str {
        match self {
            LineOrigin::Ai { .. } => "ai",
            LineOrigin::Human { .. } => "human",
            LineOrigin::Unknown => "unknown",
            LineOrigin::Mixed { .. } => "mixed",
        }
    }

    fn session(&self) -> Option<&str> {
        match self {
            LineOrigin::Ai { session, .. } | LineOrigin::Human { session, .. } => Some(session),
            LineOrigin::Unknown | LineOrigin::Mixed { .. } => None,
        }
    }
}

/// Lines `start..=end` of a file, one origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttributedRange {
    pub start_line: u32,
    pub end_line: u32,
    #[serde(flatten)]
    pub origin: LineOrigin,
    /// `blake3:` and the first 32 hex digits of BLAKE3 over the range's lines (each
    /// without its line ending, joined with `\n`).
    pub content_hash: String,
}

/// The lines of one file a commit changed, attributed.
#[derive(Debug, Clone, Serialize)]
pub struct AttributedFile {
    /// Repository-relative.
    pub path: String,
    pub ranges: Vec<AttributedRange>,
}

/// One commit of the range.
#[derive(Debug, Clone, Serialize)]
pub struct CommitAttribution {
    pub commit: String,
    pub committed_unix: Option<i64>,
    /// The sessions that link it (SPEC §17.3), whose snapshots were followed.
    pub sessions: Vec<String>,
    pub files: Vec<AttributedFile>,
}

impl CommitAttribution {
    /// The Agent Trace record (v0.1.0) of the commit: its files' changed lines by
    /// conversation (one per session and contributor type, `unknown` apart), with
    /// each range's step and call under `metadata."dev.tacho"`.
    pub fn agent_trace(&self) -> Value {
        let mut files = Vec::new();
        let mut detail = Vec::new();
        for f in &self.files {
            // Conversations in first-appearance order.
            type Conversation = ((&'static str, Option<String>), Vec<Value>);
            let mut convs: Vec<Conversation> = Vec::new();
            for r in &f.ranges {
                let key = (
                    r.origin.contributor(),
                    r.origin.session().map(str::to_owned),
                );
                let range = json!({
                    "start_line": r.start_line,
                    "end_line": r.end_line,
                    "content_hash": r.content_hash,
                });
                match convs.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, v)) => v.push(range),
                    None => convs.push((key, vec![range])),
                }
                let mut d = serde_json::to_value(r).unwrap_or(Value::Null);
                if let Value::Object(m) = &mut d {
                    m.insert("path".into(), f.path.clone().into());
                }
                detail.push(d);
            }
            let conversations: Vec<Value> = convs
                .into_iter()
                .map(|((kind, session), ranges)| {
                    let mut c = Map::new();
                    if let Some(s) = session {
                        c.insert(
                            "url".into(),
                            format!("tacho:session/{}", crate::render::uri_path(&s)).into(),
                        );
                    }
                    c.insert("contributor".into(), json!({ "type": kind }));
                    c.insert("ranges".into(), ranges.into());
                    Value::Object(c)
                })
                .collect();
            files.push(json!({"path": f.path, "conversations": conversations}));
        }
        json!({
            "version": AGENT_TRACE_VERSION,
            "id": record_id(&self.commit),
            "timestamp": self
                .committed_unix
                .map(|t| tacho_schema::time_to_rfc3339(t.saturating_mul(1_000_000_000)))
                .unwrap_or_else(|| tacho_schema::time_to_rfc3339(0)),
            "vcs": {"type": "git", "revision": self.commit},
            "tool": {"name": "tacho", "version": env!("CARGO_PKG_VERSION")},
            "files": files,
            "metadata": {"dev.tacho": {"sessions": self.sessions, "ranges": detail}},
        })
    }
}

/// A record's id: a UUID (version 8, RFC 9562's custom layout) from BLAKE3 of the
/// commit, so the same commit always gets the same record id.
fn record_id(commit: &str) -> String {
    let h = blake3::hash(format!("tacho agent-trace {commit}").as_bytes());
    let mut b: [u8; 16] = [0; 16];
    b.copy_from_slice(&h.as_bytes()[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid_text(&b)
}

/// 16 bytes as a UUID's text (8-4-4-4-12 lowercase hex).
pub(crate) fn uuid_text(b: &[u8; 16]) -> String {
    let hex = tacho_store::hex(b);
    format!(
        "{}-{}-{}-{}-{}",
        hex.get(0..8).unwrap_or_default(),
        hex.get(8..12).unwrap_or_default(),
        hex.get(12..16).unwrap_or_default(),
        hex.get(16..20).unwrap_or_default(),
        hex.get(20..32).unwrap_or_default()
    )
}

/// BLAKE3 of lines, as [`AttributedRange::content_hash`] says.
fn content_hash(lines: &[&str]) -> String {
    let h = blake3::hash(lines.join("\n").as_bytes());
    format!("blake3:{}", &h.to_hex()[..32])
}

/// A session's snapshots of one workspace, and where that workspace is in the
/// repository.
struct SessionFiles {
    id: String,
    graph: ExecutionGraph,
    /// The workspace relative to the repository's work tree (`""` for the top).
    prefix: String,
}

/// `origins` (one per line of `old`) carried to `new`: a line the diff keeps keeps its
/// origin, a line it adds or rewrites gets `fresh`.
fn carry(old: &str, new: &str, origins: &[LineOrigin], fresh: &LineOrigin) -> Vec<LineOrigin> {
    tacho_git::snapshot::carry_lines(old, new, origins, fresh, &LineOrigin::Unknown)
}

/// A blob's text, or `None` when it is binary or too large (the line diffs' rule).
fn text_of(bytes: &[u8]) -> Option<String> {
    tacho_git::snapshot::blob_text(bytes).map(str::to_owned)
}

/// How many lines the line diffs see in `text`.
fn line_count(text: &str) -> usize {
    tacho_git::snapshot::text_lines(text).len()
}

impl Tacho {
    /// The attribution of each commit of `range` (`BASE..HEAD`, oldest first) of the
    /// repository holding `workspace`.
    pub fn attribution(
        &self,
        range: &str,
        workspace: Option<&Path>,
    ) -> Result<Vec<CommitAttribution>, CiError> {
        let report = self.ci_verify(range, workspace, CiPolicy::default())?;
        if let Some(e) = report.no_range() {
            return Err(e);
        }
        // Only sessions whose logs verify are followed: nothing a damaged log says is
        // evidence.
        let verified: std::collections::BTreeSet<&str> = report
            .sessions
            .iter()
            .filter(|s| s.verified)
            .map(|s| s.session.as_str())
            .collect();
        let ws = match workspace {
            Some(w) => w.to_path_buf(),
            None => std::env::current_dir().map_err(CiError::CurrentDir)?,
        };
        let mut sessions: BTreeMap<String, Option<SessionFiles>> = BTreeMap::new();
        let mut out = Vec::new();
        for c in report.commits.iter().rev() {
            let parent = format!("{}^", c.commit);
            let (top, changes) = match range_changes(&ws, Some(&parent), &c.commit) {
                Err(CommitsError::BadRevision(_)) => range_changes(&ws, None, &c.commit)?,
                r => r?,
            };
            // The sessions that link the commit (§17.3), not every one that saw it.
            let linked: Vec<String> = c
                .linked_by
                .iter()
                .filter(|s| verified.contains(s.as_str()))
                .cloned()
                .collect();
            for s in &linked {
                if !sessions.contains_key(s) {
                    let files = self.session_files(s, &top);
                    sessions.insert(s.clone(), files);
                }
            }
            let followed: Vec<&SessionFiles> = linked
                .iter()
                .filter_map(|s| sessions.get(s).and_then(Option::as_ref))
                .collect();
            let mut files = Vec::new();
            for change in changes
                .iter()
                .filter(|ch| !ch.deleted && !ch.written.is_empty())
            {
                if let Some(f) = self.attribute_file(&ws, c, change, &followed)? {
                    files.push(f);
                }
            }
            out.push(CommitAttribution {
                commit: c.commit.clone(),
                committed_unix: c.committed_unix,
                sessions: linked,
                files,
            });
        }
        Ok(out)
    }

    /// Session `id`'s graph and where its workspace is under `top`; `None` when it
    /// cannot be read or its workspace is not in that repository.
    fn session_files(&self, id: &str, top: &Path) -> Option<SessionFiles> {
        // Folded from the log, never from a stored projection the agent could rewrite.
        let graph = self.evidence_graph(id).ok()?;
        let first = graph.snapshots.first()?;
        let ws = PathBuf::from(&first.workspace);
        let mut parts = Vec::new();
        // Where the session's workspace is in this repository. A session recorded on
        // another machine (fetched for CI) names a workspace of that machine: it is
        // taken as the repository's top, where sessions are recorded.
        if let Ok(rel) = ws.strip_prefix(top) {
            for c in rel.components() {
                match c {
                    std::path::Component::Normal(p) => parts.push(p.to_str()?.to_owned()),
                    _ => return None,
                }
            }
        }
        let prefix = parts.join("/");
        Some(SessionFiles {
            id: id.to_owned(),
            graph,
            prefix,
        })
    }

    /// The changed lines of one file of commit `c`, attributed through the first
    /// session of `followed` whose snapshots hold it.
    fn attribute_file(
        &self,
        ws: &Path,
        c: &CiCommit,
        change: &RangeChange,
        followed: &[&SessionFiles],
    ) -> Result<Option<AttributedFile>, CiError> {
        let committed = tacho_git::fingerprint::file_at(
            ws,
            &c.commit,
            &change.path,
            tacho_git::snapshot::LINE_DIFF_BYTES_MAX as u64,
        )?;
        let Some(committed) = committed.as_deref().and_then(text_of) else {
            return Ok(None);
        };
        let committed_lines = tacho_git::snapshot::text_lines(&committed);
        // Every linked session's account of each line: one that explains it, or a
        // `mixed` line when two disagree.
        let mut accounts: Vec<Vec<LineOrigin>> = Vec::new();
        if let Ok(store) = self.snapshots() {
            for s in followed {
                if let Some(o) = follow(store, s, &change.path, &committed, c.committed_unix) {
                    accounts.push(o);
                }
            }
        }
        let origins: Vec<LineOrigin> = (0..committed_lines.len())
            .map(|i| {
                let mut said: Vec<LineOrigin> = Vec::new();
                for a in &accounts {
                    match a.get(i) {
                        Some(LineOrigin::Unknown) | None => {}
                        Some(o) if said.contains(o) => {}
                        Some(o) => said.push(o.clone()),
                    }
                }
                match said.len() {
                    0 => LineOrigin::Unknown,
                    1 => said.swap_remove(0),
                    _ => LineOrigin::Mixed { origins: said },
                }
            })
            .collect();
        let mut ranges = Vec::new();
        for &(start, end) in &change.written {
            let mut line = start;
            while line <= end {
                let Some(origin) = origins.get((line as usize).saturating_sub(1)) else {
                    break;
                };
                let mut last = line;
                while last < end && origins.get(last as usize) == Some(origin) {
                    last += 1;
                }
                let text: Vec<&str> = committed_lines
                    .get((line as usize - 1)..(last as usize).min(committed_lines.len()))
                    .unwrap_or_default()
                    .to_vec();
                ranges.push(AttributedRange {
                    start_line: line,
                    end_line: last,
                    origin: origin.clone(),
                    content_hash: content_hash(&text),
                });
                line = last + 1;
            }
        }
        Ok(Some(AttributedFile {
            path: change.path.clone(),
            ranges,
        }))
    }
}

/// The origins of `committed`'s lines (file `path`, repository-relative) by following
/// it through session `s`'s snapshots; `None` when no snapshot of the session holds
/// the file.
fn follow(
    store: &SnapshotStore,
    s: &SessionFiles,
    path: &str,
    committed: &str,
    committed_unix: Option<i64>,
) -> Option<Vec<LineOrigin>> {
    let rel = match s.prefix.as_str() {
        "" => path,
        p => path.strip_prefix(p)?.strip_prefix('/')?,
    };
    let first_ws = &s.graph.snapshots.first()?.workspace;
    let snaps: Vec<_> = s
        .graph
        .snapshots
        .iter()
        .filter(|n| &n.workspace == first_ws)
        .collect();
    let read = |id: &str| -> Option<Option<String>> {
        match store.entry(id, rel).ok()? {
            None => Some(None),
            Some(e) => Some(store.blob(e.oid).ok().as_deref().and_then(text_of)),
        }
    };
    let mut text: Option<String> = read(&snaps.first()?.id)?;
    let mut origins: Vec<LineOrigin> = text
        .as_deref()
        .map(|t| vec![LineOrigin::Unknown; line_count(t)])
        .unwrap_or_default();
    let mut seen = text.is_some();
    // The state that holds the committed content: the last one by the commit's time,
    // else the last one at all.
    let deadline = committed_unix.map(|t| {
        t.saturating_mul(1_000_000_000)
            .saturating_add(COMMIT_SLACK_NS)
    });
    let first_at = snaps.first()?.at_unix_ns;
    let in_time = |at: i64| deadline.is_none_or(|d| at <= d);
    let mut matched: Option<Vec<LineOrigin>> = None;
    let mut matched_late: Option<Vec<LineOrigin>> = None;
    if text.as_deref() == Some(committed) {
        match in_time(first_at) {
            true => matched = Some(origins.clone()),
            false => matched_late = Some(origins.clone()),
        }
    }
    for pair in snaps.windows(2) {
        let [a, b] = pair else { continue };
        if a.id == b.id {
            continue;
        }
        let Some(next) = read(&b.id) else { continue };
        if next == text {
            continue;
        }
        let PairOrigin { claimed, step, seq } = pair_origin(&s.graph, a.seq, b.seq);
        let key_abs = Path::new(first_ws).join(rel).display().to_string();
        let claimed = claimed
            || s.graph.edited_between(&key_abs, a.seq, b.seq)
            || s.graph.edited_between(rel, a.seq, b.seq);
        let fresh = if claimed {
            LineOrigin::Ai {
                session: s.id.clone(),
                step: step.map(|st| st.number),
                call_seq: seq,
                tool: step
                    .and_then(|st| st.tools.iter().find(|t| t.seq == seq))
                    .map(|t| t.tool.clone()),
                between: (a.seq, b.seq),
            }
        } else {
            LineOrigin::Human {
                session: s.id.clone(),
                between: (a.seq, b.seq),
            }
        };
        origins = match (&text, &next) {
            (Some(old), Some(new)) => carry(old, new, &origins, &fresh),
            (None, Some(new)) => vec![fresh.clone(); line_count(new)],
            (_, None) => Vec::new(),
        };
        seen |= next.is_some();
        text = next;
        if text.as_deref() == Some(committed) {
            match in_time(b.at_unix_ns) {
                true => matched = Some(origins.clone()),
                false => matched_late = Some(origins.clone()),
            }
        }
    }
    if !seen {
        return None;
    }
    // The committed file against the state that held it (or the last one seen): lines
    // the snapshots never held are unknown.
    Some(match matched.or(matched_late) {
        Some(o) => o,
        None => match &text {
            Some(t) => carry(t, committed, &origins, &LineOrigin::Unknown),
            None => vec![LineOrigin::Unknown; line_count(committed)],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_follow_lines_through_later_changes() {
        let ai = LineOrigin::Ai {
            session: "s".into(),
            step: Some(1),
            call_seq: 3,
            tool: Some("Bash".into()),
            between: (2, 4),
        };
        let user = LineOrigin::Human {
            session: "s".into(),
            between: (5, 6),
        };
        let start = vec![LineOrigin::Unknown; 3];
        let after_ai = carry("a\nb\nc\n", "A\nb\nc\n", &start, &ai);
        assert_eq!(
            after_ai,
            vec![ai.clone(), LineOrigin::Unknown, LineOrigin::Unknown]
        );
        // The user inserts a line: the agent's line keeps its author, below it moves.
        let after_user = carry("A\nb\nc\n", "A\nb\nnew\nc\n", &after_ai, &user);
        assert_eq!(
            after_user,
            vec![ai, LineOrigin::Unknown, user, LineOrigin::Unknown]
        );
    }

    #[test]
    fn record_ids_are_uuids_of_the_commit() {
        let id = record_id("0123");
        assert_eq!(id, record_id("0123"));
        assert_ne!(id, record_id("0124"));
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            vec![8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('8'), "{id}");
    }
}
