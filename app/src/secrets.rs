//! The secret scan of a session (SPEC §17.1): what `tacho session secrets` shows and
//! what a push refuses without an allowance. One detector (`tacho_goals::secrets`),
//! shared with the plan rule.

use std::collections::BTreeMap;

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
        let end = self.for_each_event(id, |e| match &e.event.body {
            EventBody::SecretAllowed(a) => {
                allowed.insert(a.seq);
            }
            body => scan_event(id, e.seq, body, &mut findings),
        })?;
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
        let mut findings = Vec::new();
        let mut ended = false;
        let end = self.for_each_event(id, |e| {
            if e.seq == seq {
                scan_event(id, e.seq, &e.event.body, &mut findings);
            }
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
