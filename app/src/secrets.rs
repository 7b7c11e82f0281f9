//! The secret scan of a session (SPEC §17.1): what `tacho session secrets` shows and
//! what a push refuses without an allowance. One detector (`tacho_goals::secrets`),
//! shared with the plan rule.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::Value;
use tacho_goals::secrets;
use tacho_schema::{EventBody, SecretAllowed};
use tacho_store::{Durability, StoreError};

use crate::Tacho;
use crate::error::kinds;
use crate::id::SessionId;

/// One secret the scan found: the session, the event, the kind of secret and where in
/// the event — never the secret's text (its `hint` is its first four characters and
/// its length).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretFinding {
    pub session: String,
    /// The event's sequence number.
    pub seq: u64,
    /// The event's kind (`tool.result`, ...).
    pub event: &'static str,
    /// The kind of secret (`github_token`, `aws_access_key`, ...).
    pub kind: &'static str,
    /// The kind in words.
    pub what: &'static str,
    /// Where in the event's JSON form (SPEC §5.1): `output`, `input.command`, ...
    pub field: String,
    /// 1-based line and column (bytes) within that field's text.
    pub line: usize,
    pub column: usize,
    pub hint: String,
    /// The event was let through (`secret.allowed`): a push does not refuse it.
    pub allowed: bool,
}

/// `tacho session secrets`: every finding of a session, allowed or not.
#[derive(Debug, Clone, Serialize)]
pub struct SecretScan {
    pub session: String,
    pub events: u64,
    pub findings: Vec<SecretFinding>,
    /// How many findings are not allowed: what a push would refuse.
    pub blocking: usize,
}

/// Why an event could not be allowed.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("session {session} has no event {seq} (it has {events})")]
    NoSuchEvent {
        session: String,
        seq: u64,
        events: u64,
    },
    #[error(
        "event {seq} of session {session} holds no secret the scan finds: there is nothing to allow"
    )]
    NothingToAllow { session: String, seq: u64 },
    #[error(
        "session {session} is still running ({agent}'s hooks record it and it has not ended): a secret is allowed only once its session ended — an agent working in it could otherwise allow its own (end it first: tacho session end {session})"
    )]
    SessionRunning { session: String, agent: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

kinds!(SecretsError {
    SecretsError::NoSuchEvent { .. } => NotFound,
    SecretsError::NothingToAllow { .. } => Input,
    SecretsError::SessionRunning { .. } => Input,
    SecretsError::Store(e) => e.kind(),
});

/// What `secret.allowed` recorded: the event and its sequence number.
#[derive(Debug, Clone, Serialize)]
pub struct SecretAllowance {
    pub session: String,
    /// The event allowed.
    pub allowed: u64,
    /// The `secret.allowed` event's own sequence number.
    pub seq: u64,
    pub kinds: Vec<String>,
}

/// Every string of a JSON value with its path (`input.edits[0].new_string`).
fn strings<'v>(v: &'v Value, path: &mut String, f: &mut dyn FnMut(&str, &'v str)) {
    match v {
        Value::String(s) => f(path, s),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                strings(item, path, f);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                strings(item, path, f);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// The secrets of one event's JSON form (the `type` tag aside).
fn scan_event(session: &str, seq: u64, body: &EventBody, out: &mut Vec<SecretFinding>) {
    if matches!(body, EventBody::SecretAllowed(_) | EventBody::GitCommits(_)) {
        return;
    }
    let Ok(Value::Object(mut map)) = serde_json::to_value(body) else {
        return;
    };
    map.remove("type");
    let value = Value::Object(map);
    let mut path = String::new();
    strings(&value, &mut path, &mut |field, text| {
        for found in secrets::scan(text) {
            out.push(SecretFinding {
                session: session.to_owned(),
                seq,
                event: body.kind_name(),
                kind: found.kind.name(),
                what: found.kind.words(),
                field: field.to_owned(),
                line: found.line,
                column: found.column,
                hint: found.hint,
                allowed: false,
            });
        }
    });
}

/// The text of a blob for the scan: UTF-16 (little or big endian) when it starts with
/// its byte-order mark, else UTF-8 read leniently.
fn blob_text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    let utf16 = |le: bool| -> String {
        let units = bytes.get(2..).unwrap_or_default().chunks_exact(2).map(|c| {
            let pair = [
                c.first().copied().unwrap_or(0),
                c.get(1).copied().unwrap_or(0),
            ];
            if le {
                u16::from_le_bytes(pair)
            } else {
                u16::from_be_bytes(pair)
            }
        });
        char::decode_utf16(units)
            .map(|r| r.unwrap_or(char::REPLACEMENT_CHARACTER))
            .collect()
    };
    match bytes {
        [0xFF, 0xFE, ..] => std::borrow::Cow::Owned(utf16(true)),
        [0xFE, 0xFF, ..] => std::borrow::Cow::Owned(utf16(false)),
        _ => String::from_utf8_lossy(bytes),
    }
}

impl Tacho {
    /// Every secret the scan finds in `session`'s events, in event order, each marked
    /// `allowed` when a `secret.allowed` of the session names its event. The check a
    /// push makes before anything leaves: it refuses the findings not allowed.
    pub fn secret_findings(&self, session: &SessionId) -> Result<Vec<SecretFinding>, StoreError> {
        Ok(self.secret_scan(session)?.findings)
    }

    /// The findings of `session` a push refuses: those no `secret.allowed` lets through.
    pub fn blocking_secrets(&self, session: &SessionId) -> Result<Vec<SecretFinding>, StoreError> {
        Ok(self
            .secret_findings(session)?
            .into_iter()
            .filter(|f| !f.allowed)
            .collect())
    }

    /// `tacho session secrets`: the scan of one session, as its view.
    pub fn secret_scan(&self, session: &SessionId) -> Result<SecretScan, StoreError> {
        let id = session.as_str();
        let mut findings = Vec::new();
        let mut allowed = std::collections::BTreeSet::new();
        // The snapshots a push publishes with the session, by the event naming each.
        let mut snaps: Vec<(u64, &'static str, String)> = Vec::new();
        let mut workspace = None;
        let end = self.for_each_event(id, |e| match &e.event.body {
            EventBody::SecretAllowed(a) => {
                allowed.insert(a.seq);
            }
            body => {
                match body {
                    EventBody::SessionStart(s) if workspace.is_none() => {
                        workspace = s.workspace.clone();
                    }
                    EventBody::SnapshotTaken(t) => {
                        snaps.push((e.seq, "snapshot.taken", t.snapshot.clone()));
                    }
                    EventBody::RollbackApplied(r) => {
                        snaps.push((e.seq, "rollback.applied", r.to_snapshot.clone()));
                    }
                    _ => {}
                }
                scan_event(id, e.seq, body, &mut findings)
            }
        })?;
        self.scan_snapshots(id, workspace.as_deref(), &snaps, &mut findings)?;
        for f in &mut findings {
            f.allowed = allowed.contains(&f.seq);
        }
        let blocking = findings.iter().filter(|f| !f.allowed).count();
        Ok(SecretScan {
            session: id.to_owned(),
            events: end.next_seq,
            findings,
            blocking,
        })
    }

    /// The files of the session's snapshots (`snaps`: the event naming each, its kind,
    /// the snapshot) that a push would publish, scanned like events (issue 42: a token
    /// in an untracked `.env.production` went into every snapshot unseen). Each blob is
    /// read once, under the first snapshot that holds it; a blob of the tree HEAD names
    /// in the workspace's repository is not read (its history holds it already). A
    /// finding's `field` is `snapshot SNAP file PATH`; allowing it is allowing that
    /// snapshot's event. A snapshot the store no longer holds is not published, nor
    /// scanned.
    fn scan_snapshots(
        &self,
        session: &str,
        workspace: Option<&str>,
        snaps: &[(u64, &'static str, String)],
        out: &mut Vec<SecretFinding>,
    ) -> Result<(), StoreError> {
        if snaps.is_empty() {
            return Ok(());
        }
        let fail = |e: tacho_git::snapshot::SnapshotError| StoreError::Io {
            path: self.data_dir().join("snapshots"),
            source: std::io::Error::other(format!("the secret scan of the snapshots: {e}")),
        };
        let store = self.snapshots().map_err(fail)?;
        let mut skip = workspace.map_or_else(Default::default, |w| {
            tacho_git::snapshot::scan::published_blobs(Path::new(w))
        });
        for (seq, event, snap) in snaps {
            let Ok(tree) = store.resolve(snap) else {
                continue;
            };
            let short = snap.get(..12).unwrap_or(snap);
            store
                .for_each_new_blob(tree, &mut skip, &mut |path, bytes| {
                    // Every blob, binary ones too (a NUL byte hides nothing): as UTF-16
                    // when it says so, else as UTF-8 with what is not replaced.
                    let text = blob_text(bytes);
                    for found in secrets::scan(&text) {
                        out.push(SecretFinding {
                            session: session.to_owned(),
                            seq: *seq,
                            event,
                            kind: found.kind.name(),
                            what: found.kind.words(),
                            field: format!("snapshot {short} file {path}"),
                            line: found.line,
                            column: found.column,
                            hint: found.hint,
                            allowed: false,
                        });
                    }
                })
                .map_err(fail)?;
        }
        Ok(())
    }

    /// Lets event `seq` of `session` leave the machine despite the secrets the scan
    /// finds in it: records `secret.allowed` (evidence, under the log's hash chain, so
    /// `log verify` shows any change to it), with the kinds found and `reason`.
    /// Refused for an event that does not exist or holds no secret.
    pub fn allow_secret(
        &self,
        session: &SessionId,
        seq: u64,
        reason: Option<String>,
    ) -> Result<SecretAllowance, SecretsError> {
        let id = session.as_str();
        let mut ended = false;
        let end = self.for_each_event(id, |e| {
            if matches!(e.event.body, EventBody::SessionEnd(_)) {
                ended = true;
            }
        })?;
        // A session an agent's hooks record, not ended: the agent may be the one
        // asking (issue 42: it allowed its own token, then the user's push sent it).
        if !ended && let Some(agent) = self.hook_recorder(id) {
            return Err(SecretsError::SessionRunning {
                session: id.to_owned(),
                agent: agent.to_string(),
            });
        }
        if seq >= end.next_seq {
            return Err(SecretsError::NoSuchEvent {
                session: id.to_owned(),
                seq,
                events: end.next_seq,
            });
        }
        // What the scan finds in the event: its text, or the snapshot it names.
        let findings: Vec<SecretFinding> = self
            .secret_scan(session)?
            .findings
            .into_iter()
            .filter(|f| f.seq == seq)
            .collect();
        if findings.is_empty() {
            return Err(SecretsError::NothingToAllow {
                session: id.to_owned(),
                seq,
            });
        }
        let kinds: BTreeMap<&str, ()> = findings.iter().map(|f| (f.kind, ())).collect();
        let kinds: Vec<String> = kinds.into_keys().map(str::to_owned).collect();
        let body = EventBody::SecretAllowed(SecretAllowed {
            seq,
            kinds: kinds.clone(),
            reason,
        });
        let r = self
            .log()
            .writer(id)?
            .append(self.now(), &body, Durability::Sync)?;
        Ok(SecretAllowance {
            session: id.to_owned(),
            allowed: seq,
            seq: r.last_seq,
            kinds,
        })
    }
}
