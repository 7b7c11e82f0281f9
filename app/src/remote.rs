//! `tacho push` and `tacho fetch` (SPEC.md §16): sessions published to a Git remote
//! under `refs/tacho/sessions/<id>` with their snapshots and a signed head, and brought
//! back, verified before anything is stored.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tacho_git::remote::{self as git_remote, REMOTE_PREFIX, RemoteError, SessionObjects};
use tacho_git::snapshot::SnapshotError;
use tacho_store::{Severity, StoreError, StreamReport, hex, package_segments, stream_dir_name};

use crate::error::{ErrorKind, Kind};
use crate::replay::verify_package_bytes;
use crate::secrets::SecretFinding;
use crate::signing::{self, SignError, SignatureStatus, SignedHead};
use crate::{SessionId, Tacho};

/// The remote a push or fetch uses when none is named.
pub const DEFAULT_REMOTE: &str = "origin";

/// What `tacho push` is asked.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// The directory the command runs in: its Git repository's workspace is the one
    /// whose sessions go.
    pub cwd: PathBuf,
    pub remote: Option<String>,
    /// The sessions to push; empty with `all`: every session of the workspace.
    pub sessions: Vec<SessionId>,
    pub all: bool,
    pub dry_run: bool,
}

/// What happened to one pushed session.
#[derive(Debug, Clone, Serialize)]
pub struct PushedSession {
    pub session: String,
    pub events: u64,
    pub head: String,
    /// Bytes of the session's record (its replay package).
    pub record_bytes: u64,
    pub snapshots: usize,
    pub signature: SignatureStatus,
    /// `new`, `updated`, `up_to_date` or `rejected`.
    pub outcome: PushState,
    /// git's word, when it said one (a rejection's reason).
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PushState {
    New,
    Updated,
    UpToDate,
    Rejected,
}

/// `tacho push`'s result.
#[derive(Debug, Clone, Serialize)]
pub struct PushOutcome {
    pub remote: String,
    pub dry_run: bool,
    pub workspace: String,
    pub sessions: Vec<PushedSession>,
}

/// Why nothing (or not everything) was pushed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("{0} is not inside a Git repository: tacho push publishes a repository's sessions")]
    NotARepository(PathBuf),
    #[error("no session named: name the sessions to push, or ask for all the sessions of {0}")]
    NothingNamed(String),
    #[error(
        "{0:?} is neither a remote of this repository (git remote) nor a session: give the remote first, then the sessions"
    )]
    NeitherRemoteNorSession(String),
    #[error("session {session} was recorded in {workspace}, not in this repository ({repo})")]
    OtherWorkspace {
        session: String,
        workspace: String,
        repo: String,
    },
    #[error("session {0} was fetched from {1}: tacho pushes only sessions recorded here")]
    Fetched(String, String),
    #[error("session {0} does not verify (its log has errors): nothing was pushed")]
    Unverified(String),
    #[error("{}", secrets_refused(.0))]
    Secrets(Vec<SecretFinding>),
    #[error("session {session}: {source}")]
    Sign {
        session: String,
        #[source]
        source: SignError,
    },
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error(transparent)]
    Snapshots(#[from] SnapshotError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The refusal of a push that would publish secrets: each finding (never the secret),
/// and the way past it.
fn secrets_refused(found: &[SecretFinding]) -> String {
    let mut text = format!(
        "nothing was pushed: {} secret(s) in what the push would publish",
        found.len()
    );
    for f in found {
        text.push_str(&format!(
            "\n  session {} event {} ({}), {} line {} column {}: {} ({})",
            f.session, f.seq, f.event, f.field, f.line, f.column, f.what, f.hint
        ));
    }
    text.push_str(
        "\nsee `tacho session secrets SESSION`; to publish an event anyway, record that you \
         let it through: `tacho session secrets SESSION --allow SEQ --reason TEXT`",
    );
    text
}

impl Kind for PushError {
    fn kind(&self) -> ErrorKind {
        match self {
            PushError::NotARepository(_)
            | PushError::NothingNamed(_)
            | PushError::NeitherRemoteNorSession(_)
            | PushError::OtherWorkspace { .. }
            | PushError::Fetched(..) => ErrorKind::Input,
            PushError::Unverified(_) | PushError::Secrets(_) => ErrorKind::Findings,
            PushError::Sign { .. } | PushError::Remote(_) | PushError::Io { .. } => ErrorKind::Io,
            PushError::Snapshots(_) => ErrorKind::Io,
            PushError::Store(e) => e.kind(),
        }
    }
}

/// A session's origin and signature, kept in `<data>/remote/<stream dir>.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RemoteRecord {
    /// Where a fetched session came from (`None`: recorded here).
    pub origin: Option<Origin>,
    /// The text signed ([`SignedHead::text`]) and the armored SSHSIG, if signed.
    pub signed: String,
    pub signature: Option<String>,
}

/// Where a fetched session came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub remote: String,
    pub url: String,
    pub commit: String,
}

/// One fetched session's fate.
#[derive(Debug, Clone, Serialize)]
pub struct FetchedSession {
    pub session: String,
    /// `stored`, `up_to_date` or `refused`.
    pub outcome: FetchState,
    pub events: u64,
    pub signature: SignatureStatus,
    /// What failed, for a refused session.
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FetchState {
    Stored,
    UpToDate,
    Refused,
}

/// `tacho fetch`'s result.
#[derive(Debug, Clone, Serialize)]
pub struct FetchOutcome {
    pub remote: String,
    pub url: String,
    pub sessions: Vec<FetchedSession>,
}

impl FetchOutcome {
    /// How many sessions were refused.
    pub fn refused(&self) -> usize {
        self.sessions
            .iter()
            .filter(|s| s.outcome == FetchState::Refused)
            .count()
    }
}

impl PushOutcome {
    /// How many sessions the remote rejected.
    pub fn rejected(&self) -> usize {
        self.sessions
            .iter()
            .filter(|s| s.outcome == PushState::Rejected)
            .count()
    }
}

/// The Git repository's top directory around `cwd`.
fn toplevel(cwd: &Path) -> Result<PathBuf, PushError> {
    let mut c = git_remote::git_command(cwd)?;
    c.args(["rev-parse", "--show-toplevel"]);
    let out = c
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|source| PushError::Io {
            path: cwd.to_path_buf(),
            source,
        })?;
    let top = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || top.is_empty() {
        return Err(PushError::NotARepository(cwd.to_path_buf()));
    }
    let top = PathBuf::from(top);
    Ok(top.canonicalize().unwrap_or(top))
}

impl Tacho {
    fn remote_record_path(&self, session: &str) -> PathBuf {
        self.data_dir()
            .join("remote")
            .join(format!("{}.json", stream_dir_name(session)))
    }

    /// The origin and signature kept for a session, if any.
    pub fn remote_record(&self, session: &str) -> Option<RemoteRecord> {
        let bytes = std::fs::read(self.remote_record_path(session)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn write_remote_record(&self, session: &str, r: &RemoteRecord) -> Result<(), PushError> {
        let path = self.remote_record_path(session);
        let io = |source| PushError::Io {
            path: path.clone(),
            source,
        };
        let dir = self.data_dir().join("remote");
        std::fs::create_dir_all(&dir).map_err(io)?;
        let tmp = dir.join(format!(
            ".{}.{}",
            stream_dir_name(session),
            std::process::id()
        ));
        let text = serde_json::to_vec_pretty(r).map_err(|e| io(std::io::Error::other(e)))?;
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }

    /// Where a session came from, when it was fetched.
    pub fn origin(&self, session: &str) -> Option<Origin> {
        self.remote_record(session).and_then(|r| r.origin)
    }

    /// Whether, and by whom, the session's head is signed (what `log verify`, `session
    /// show`, `fetch` and `ci verify` report): the kept signature verified against the
    /// allowed signers file of git's configuration, and the head it covers checked
    /// against the log as it is now.
    pub fn signature(&self, session: &SessionId) -> Result<SignatureStatus, StoreError> {
        // git's configuration is asked only for a session that has a signature.
        if self
            .remote_record(session)
            .is_none_or(|r| r.signature.is_none())
        {
            return Ok(SignatureStatus::Unsigned);
        }
        self.signature_with(session, self.allowed_signers().as_deref())
    }

    /// The allowed signers file's text, from git's configuration in the current
    /// directory.
    pub(crate) fn allowed_signers(&self) -> Option<String> {
        std::env::current_dir()
            .ok()
            .and_then(|d| signing::allowed_signers_file(&d))
            .and_then(|p| std::fs::read_to_string(p).ok())
    }

    /// [`Tacho::signature`] against an allowed signers file's text already read.
    pub(crate) fn signature_with(
        &self,
        session: &str,
        allowed: Option<&str>,
    ) -> Result<SignatureStatus, StoreError> {
        let Some(r) = self.remote_record(session) else {
            return Ok(SignatureStatus::Unsigned);
        };
        let Some(sig) = r.signature else {
            return Ok(SignatureStatus::Unsigned);
        };
        let status = signing::verify(r.signed.as_bytes(), sig.as_bytes(), allowed);
        if matches!(status, SignatureStatus::Bad { .. }) {
            return Ok(status);
        }
        let Some(head) = SignedHead::parse(r.signed.as_bytes()) else {
            return Ok(SignatureStatus::Bad {
                reason: "the signed text is not what tacho signs".into(),
            });
        };
        Ok(self
            .check_head(session, &head)
            .map_or(status, |reason| SignatureStatus::Bad { reason }))
    }

    /// Why the log does not hold `head` (`None` when it does).
    fn check_head(&self, session: &str, head: &SignedHead) -> Option<String> {
        if head.session != session {
            return Some(format!("the signature is of session {}", head.session));
        }
        match self.log().head_at(session, head.events) {
            Ok(Some(chain)) if hex(&chain) == head.head => None,
            Ok(Some(chain)) => Some(format!(
                "the log's chain after {} events is {}, the signature's {}",
                head.events,
                hex(&chain),
                head.head
            )),
            Ok(None) => Some(format!(
                "the log holds fewer than the {} events signed",
                head.events
            )),
            Err(e) => Some(e.to_string()),
        }
    }

    /// The sessions of the workspace `top` (recorded in it or below it), oldest first.
    fn workspace_sessions(&self, top: &Path) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        for s in self.log().sessions()? {
            if self.origin(&s).is_some() {
                continue;
            }
            if let Some(ws) = self.recorded_workspace(&s)?
                && Path::new(&ws).starts_with(top)
            {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// What must hold before any session leaves the machine; refuses by default: every
    /// record verifies (a record with a log error is refused), and no event holds a
    /// secret that no `secret.allowed` let through (SPEC §17.1; every session is
    /// scanned, and the refusal names each finding). Returns the verified heads, in order.
    fn before_publish(&self, sessions: &[String]) -> Result<Vec<StreamReport>, PushError> {
        let mut heads = Vec::with_capacity(sessions.len());
        let mut secrets = Vec::new();
        for s in sessions {
            let log = self.log().verify_session(s, true)?;
            if log.findings.iter().any(|f| f.severity == Severity::Error) {
                return Err(PushError::Unverified(s.clone()));
            }
            heads.push(log);
            secrets.extend(self.blocking_secrets(&SessionId::resolved(s.clone()))?);
        }
        if !secrets.is_empty() {
            return Err(PushError::Secrets(secrets));
        }
        Ok(heads)
    }

    /// `tacho push [REMOTE] [SESSION...]`'s words: the first is the remote when it is
    /// one of the repository's remotes or a URL or path (holds `:` or `/`), else a
    /// session when it names one (`tacho push SESSION` pushes it to the default
    /// remote), else neither (an input error). The rest are sessions.
    pub fn push_words(
        &self,
        cwd: &Path,
        words: &[String],
    ) -> Result<(Option<String>, Vec<SessionId>), PushError> {
        let Some((first, rest)) = words.split_first() else {
            return Ok((None, Vec::new()));
        };
        let resolve = |v: &[String]| -> Result<Vec<SessionId>, PushError> {
            v.iter()
                .map(|s| self.resolve_session(s).map_err(PushError::from))
                .collect()
        };
        let is_remote = first.contains(':') || first.contains('/') || {
            let top = toplevel(cwd)?;
            tacho_git::remote::remote_names(&top)
                .map(|names| names.iter().any(|n| n == first))
                .unwrap_or(false)
        };
        if is_remote {
            return Ok((Some(first.clone()), resolve(rest)?));
        }
        match self.resolve_session(first) {
            Ok(id) => {
                let mut all = vec![id];
                all.extend(resolve(rest)?);
                Ok((None, all))
            }
            Err(StoreError::UnknownSession { .. }) => {
                Err(PushError::NeitherRemoteNorSession(first.clone()))
            }
            // An ambiguous prefix, a damaged store: said as they are.
            Err(e) => Err(e.into()),
        }
    }

    /// `tacho push`: publishes sessions of the repository's workspace to a remote
    /// (SPEC.md §16.1).
    pub fn push(&self, o: &PushOptions) -> Result<PushOutcome, PushError> {
        let top = toplevel(&o.cwd)?;
        let remote = o.remote.clone().unwrap_or_else(|| DEFAULT_REMOTE.into());
        let sessions: Vec<String> = if o.sessions.is_empty() {
            if !o.all {
                return Err(PushError::NothingNamed(top.display().to_string()));
            }
            self.workspace_sessions(&top)?
        } else {
            let mut v = Vec::new();
            for s in &o.sessions {
                if let Some(origin) = self.origin(s) {
                    return Err(PushError::Fetched(s.to_string(), origin.remote));
                }
                let ws = self.recorded_workspace(s)?.unwrap_or_default();
                if !Path::new(&ws).starts_with(&top) {
                    return Err(PushError::OtherWorkspace {
                        session: s.to_string(),
                        workspace: ws,
                        repo: top.display().to_string(),
                    });
                }
                v.push(s.to_string());
            }
            v
        };
        let verified = self.before_publish(&sessions)?;
        let key = signing::signing_key(&top);
        if key.is_none() {
            self.note("no SSH signing key (git config gpg.format ssh, user.signingkey): the sessions go unsigned");
        }
        let snaps = self.snapshots()?;
        let allowed =
            signing::allowed_signers_file(&top).and_then(|p| std::fs::read_to_string(p).ok());
        let mut rows = Vec::new();
        let mut commits = Vec::new();
        let mut records = Vec::new();
        for (i, (s, log)) in sessions.iter().zip(&verified).enumerate() {
            if sessions.len() >= 20 && i % 50 == 0 {
                self.note(&format!(
                    "preparing session {} of {}",
                    i + 1,
                    sessions.len()
                ));
            }
            let head = SignedHead {
                session: s.clone(),
                events: log.next_seq,
                head: hex(&log.chain),
            };
            let mut referenced = HashSet::new();
            self.referenced_snapshots(s, &mut referenced)?;
            let mut trees = Vec::new();
            for id in referenced {
                // A snapshot gc dropped is not published (its rollback point is gone).
                if let Ok(t) = snaps.resolve(&id) {
                    trees.push(t);
                }
            }
            trees.sort();
            let parent = snaps.pushed_commit(s);
            // The same head keeps its signature: pushing again writes the same commit.
            let earlier = parent
                .and_then(|p| snaps.read_session_commit(p).ok())
                .filter(|e| e.signed == head.text().as_bytes());
            let signature = match (&earlier, &key) {
                (Some(e), _) if e.signature.is_some() || key.is_none() => e.signature.clone(),
                (_, Some(k)) => {
                    Some(signing::sign(k, &head, self.data_dir()).map_err(|source| {
                        PushError::Sign {
                            session: s.clone(),
                            source,
                        }
                    })?)
                }
                (_, None) => None,
            };
            let status = match &signature {
                Some(sig) => signing::verify(head.text().as_bytes(), sig, allowed.as_deref()),
                None => SignatureStatus::Unsigned,
            };
            // Nothing changed since the last push: its commit again, nothing exported.
            let (objects, commit) = match (earlier, parent) {
                (Some(e), Some(p)) if e.snapshots == trees && e.signature == signature => (e, p),
                _ => {
                    let objects = SessionObjects {
                        record: tacho_store::export_package(self.log(), s)?,
                        signed: head.text().into_bytes(),
                        signature,
                        snapshots: trees,
                    };
                    let commit = snaps.write_session_commit(s, &objects, parent)?;
                    (objects, commit)
                }
            };
            commits.push((commit, format!("{REMOTE_PREFIX}{s}")));
            rows.push(PushedSession {
                session: s.clone(),
                events: head.events,
                head: head.head.clone(),
                record_bytes: objects.record.len() as u64,
                snapshots: objects.snapshots.len(),
                signature: status,
                outcome: PushState::UpToDate,
                detail: String::new(),
            });
            records.push(RemoteRecord {
                origin: None,
                signed: head.text(),
                signature: objects
                    .signature
                    .map(|b| String::from_utf8_lossy(&b).into_owned()),
            });
        }
        if !commits.is_empty() {
            self.note(&format!("pushing {} sessions to {remote}", commits.len()));
            let pushed =
                git_remote::push(&top, &snaps.objects_dir(), &remote, &commits, o.dry_run)?;
            for (row, (_, r)) in rows.iter_mut().zip(&commits) {
                let Some(p) = pushed.iter().find(|p| &p.remote_ref == r) else {
                    row.outcome = PushState::Rejected;
                    row.detail = "git did not report this ref".into();
                    continue;
                };
                row.detail = p.summary.clone();
                row.outcome = match p.flag {
                    '*' => PushState::New,
                    '=' => PushState::UpToDate,
                    ' ' | '+' => PushState::Updated,
                    _ => PushState::Rejected,
                };
            }
        }
        if !o.dry_run {
            for (row, rec) in rows.iter().zip(&records) {
                if row.outcome != PushState::Rejected {
                    self.write_remote_record(&row.session, rec)?;
                }
            }
        }
        Ok(PushOutcome {
            remote,
            dry_run: o.dry_run,
            workspace: top.display().to_string(),
            sessions: rows,
        })
    }

    /// `tacho fetch`: brings the remote's published sessions into this data directory,
    /// each verified (package digest, chain, signature over its head) before it is
    /// stored, whole or not at all (SPEC.md §16.2).
    pub fn fetch(&self, cwd: &Path, remote: Option<&str>) -> Result<FetchOutcome, PushError> {
        let top = toplevel(cwd)?;
        let remote = remote.unwrap_or(DEFAULT_REMOTE).to_owned();
        let url = git_remote::remote_url(&top, &remote)?;
        let snaps = self.snapshots()?;
        self.note(&format!("fetching sessions from {remote} ({url})"));
        let fetched = snaps.fetch_sessions(&top, &url, &git_remote::remote_ref_name(&remote))?;
        let allowed =
            signing::allowed_signers_file(&top).and_then(|p| std::fs::read_to_string(p).ok());
        let mut rows = Vec::new();
        for (i, (session, commit)) in fetched.iter().enumerate() {
            if fetched.len() >= 20 && i % 50 == 0 {
                self.note(&format!("verifying session {} of {}", i + 1, fetched.len()));
            }
            let origin = Origin {
                remote: remote.clone(),
                url: url.clone(),
                commit: commit.to_string(),
            };
            rows.push(
                match self.fetch_one(session, *commit, origin, allowed.as_deref()) {
                    Ok(row) => row,
                    Err(reason) => FetchedSession {
                        session: session.clone(),
                        outcome: FetchState::Refused,
                        events: 0,
                        signature: SignatureStatus::Unsigned,
                        reason: Some(reason),
                    },
                },
            );
        }
        Ok(FetchOutcome {
            remote,
            url,
            sessions: rows,
        })
    }

    /// Verifies and stores one fetched session; the reason it was refused.
    fn fetch_one(
        &self,
        session: &str,
        commit: git_remote::ObjectId,
        origin: Origin,
        allowed: Option<&str>,
    ) -> Result<FetchedSession, String> {
        let snaps = self.snapshots().map_err(|e| e.to_string())?;
        let objects = snaps
            .read_session_commit(commit)
            .map_err(|e| e.to_string())?;
        let (v, _) = verify_package_bytes(&objects.record).map_err(|e| format!("record: {e}"))?;
        if v.session != session {
            return Err(format!(
                "the record is of session {}, published as {session}",
                v.session
            ));
        }
        let mut failed: Vec<String> = v
            .log_errors()
            .map(|f| f.message.clone())
            .chain(v.package_findings.iter().cloned())
            .collect();
        if let Some(e) = &v.read_error {
            failed.push(e.to_string());
        }
        if !failed.is_empty() {
            return Err(format!("record: {}", failed.join("; ")));
        }
        let head = SignedHead {
            session: session.to_owned(),
            events: v.log.next_seq,
            head: hex(&v.log.chain),
        };
        if objects.signed != head.text().as_bytes() {
            return Err(format!(
                "the signed head does not match the record ({} events, chain {})",
                head.events, head.head
            ));
        }
        let signature = match &objects.signature {
            Some(sig) => signing::verify(&objects.signed, sig, allowed),
            None => SignatureStatus::Unsigned,
        };
        if let SignatureStatus::Bad { reason } = &signature {
            return Err(format!("signature: {reason}"));
        }
        let row = |outcome| FetchedSession {
            session: session.to_owned(),
            outcome,
            events: head.events,
            signature: signature.clone(),
            reason: None,
        };
        if self.log().has_session(session) {
            return match self.check_head(session, &head) {
                None if self
                    .log()
                    .verify_session(session, false)
                    .is_ok_and(|r| r.next_seq == head.events) =>
                {
                    Ok(row(FetchState::UpToDate))
                }
                _ => Err(format!(
                    "this data directory holds another record of session {session}; it is kept and the remote's is not stored"
                )),
            };
        }
        for t in &objects.snapshots {
            snaps.keep_snapshot(*t).map_err(|e| e.to_string())?;
        }
        let (_, segments) = package_segments(&objects.record).map_err(|e| e.to_string())?;
        self.log()
            .adopt_session(session, &segments, v.log.next_seq, v.log.chain)
            .map_err(|e| e.to_string())?;
        let record = RemoteRecord {
            origin: Some(origin),
            signed: head.text(),
            signature: objects
                .signature
                .map(|b| String::from_utf8_lossy(&b).into_owned()),
        };
        self.write_remote_record(session, &record)
            .map_err(|e| e.to_string())?;
        Ok(row(FetchState::Stored))
    }
}
