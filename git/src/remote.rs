//! Publishing sessions to a Git remote and bringing them back (`tacho push`,
//! `tacho fetch`; SPEC.md §16): the commits that carry a session's record and its
//! snapshot trees, written in the snapshot store's repository, and the user's `git`
//! that moves them.
//!
//! `git` is found at a fixed path, never through `PATH`, and runs with the variables
//! that would point it at other repositories, object directories or configuration
//! removed, and with hooks switched off: the watched agent controls its environment
//! and the repository's files.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub use gix::ObjectId;
use gix::bstr::{BString, ByteSlice};
use gix::objs::tree::{Entry, EntryKind};

use crate::snapshot::{SnapshotError, SnapshotStore};

/// Where `git` is looked for, in order (never through `PATH`).
pub const GIT_PATHS: &[&str] = &["/usr/bin/git", "/usr/local/bin/git", "/bin/git"];

/// The ref namespace of published sessions on a remote: `refs/tacho/sessions/<id>`.
pub const REMOTE_PREFIX: &str = "refs/tacho/sessions/";
/// Where the snapshot store keeps the commit it last published of each session.
pub const PUSHED_PREFIX: &str = "refs/tacho/pushed/";
/// Where fetched sessions land in the snapshot store: `refs/tacho-remotes/<remote>/<id>`.
pub const FETCHED_PREFIX: &str = "refs/tacho-remotes/";

/// The names of a session commit's tree entries.
pub const RECORD_FILE: &str = "record.tpkg";
pub const SIGNED_FILE: &str = "signed";
pub const SIGNATURE_FILE: &str = "signature";

/// The largest session record a fetch reads (`record.tpkg`, 1 GiB): a larger one is
/// refused from its object header, before anything of it is inflated.
pub const MAX_RECORD_BYTES: u64 = 1 << 30;
pub const SNAPSHOTS_DIR: &str = "snapshots";

/// What a session commit holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionObjects {
    /// The session's replay package (SPEC §9): its segments exactly as stored.
    pub record: Vec<u8>,
    /// The text the signature covers.
    pub signed: Vec<u8>,
    /// The armored SSHSIG signature of `signed`, when the session was signed.
    pub signature: Option<Vec<u8>>,
    /// The snapshot trees the session's rollback points need.
    pub snapshots: Vec<ObjectId>,
}

/// Why a publication or a fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("no git program at {}: tacho runs git only from there", GIT_PATHS.join(", "))]
    NoGit,
    #[error("running {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// git ran and failed: its words.
    #[error("git {what} failed ({status}): {stderr}")]
    Git {
        what: String,
        status: String,
        stderr: String,
    },
    #[error(transparent)]
    Store(#[from] SnapshotError),
    /// A fetched commit is not as push writes it.
    #[error("{what}")]
    Malformed { what: String },
}

/// The first of [`GIT_PATHS`] that exists.
pub fn git_program() -> Result<&'static str, RemoteError> {
    GIT_PATHS
        .iter()
        .copied()
        .find(|p| Path::new(p).is_file())
        .ok_or(RemoteError::NoGit)
}

/// Variables of git's own that are kept: how it reaches hosts and asks for
/// credentials, and which configuration files it reads (the user's choice, as for
/// their code). Every other `GIT_*` variable is removed.
const GIT_VARS_KEPT: &[&str] = &[
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_SSH_VARIANT",
    "GIT_ASKPASS",
    "GIT_TERMINAL_PROMPT",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_CONFIG_SYSTEM",
];

/// A `git` command in `cwd`, its environment cleaned and hooks off.
pub fn git_command(cwd: &Path) -> Result<Command, RemoteError> {
    let mut c = Command::new(git_program()?);
    c.current_dir(cwd);
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str()
            && k.starts_with("GIT_")
            && !GIT_VARS_KEPT.contains(&k)
        {
            c.env_remove(k);
        }
    }
    c.args(["-c", "core.hooksPath=/dev/null"]);
    c.stdin(Stdio::null());
    Ok(c)
}

/// Runs `c`, returning its stdout; a failure carries git's stderr.
fn run(mut c: Command, what: &str) -> Result<String, RemoteError> {
    let out = c
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .map_err(|source| RemoteError::Spawn {
            program: "git".into(),
            source,
        })?;
    if !out.status.success() {
        return Err(RemoteError::Git {
            what: what.to_owned(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The names of the project's remotes (`git remote`).
pub fn remote_names(project: &Path) -> Result<Vec<String>, RemoteError> {
    let mut c = git_command(project)?;
    c.arg("remote");
    Ok(run(c, "remote")?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// The remote's URL as the project's `git` resolves it (`insteadOf` applied).
pub fn remote_url(project: &Path, remote: &str) -> Result<String, RemoteError> {
    let mut c = git_command(project)?;
    c.args(["ls-remote", "--get-url", "--", remote]);
    Ok(run(c, &format!("ls-remote --get-url {remote}"))?
        .trim()
        .to_owned())
}

/// One ref a push updated or would update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedRef {
    /// The remote ref (`refs/tacho/sessions/<id>`).
    pub remote_ref: String,
    /// git's flag: `*` new, ` ` fast-forward, `+` forced, `=` up to date, `!` rejected.
    pub flag: char,
    /// git's summary of it.
    pub summary: String,
}

/// Pushes `commits` (commit, remote ref) to `remote` with the project's `git` (its
/// remotes, credentials and `insteadOf`), the objects taken from the snapshot store
/// through `GIT_ALTERNATE_OBJECT_DIRECTORIES`: nothing is written into the project's
/// refs, objects or index. Objects the remote's refs already reach (the project's
/// code too) are not sent.
pub fn push(
    project: &Path,
    store_objects: &Path,
    remote: &str,
    commits: &[(ObjectId, String)],
    dry_run: bool,
) -> Result<Vec<PushedRef>, RemoteError> {
    let mut out = Vec::new();
    // Command lines stay short however many sessions go.
    for chunk in commits.chunks(512) {
        let mut c = git_command(project)?;
        c.env("GIT_ALTERNATE_OBJECT_DIRECTORIES", store_objects);
        c.args(["push", "--porcelain", "--no-verify"]);
        if dry_run {
            c.arg("--dry-run");
        }
        c.arg("--").arg(remote);
        for (oid, r) in chunk {
            c.arg(format!("{oid}:{r}"));
        }
        let output = c
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .output()
            .map_err(|source| RemoteError::Spawn {
                program: "git".into(),
                source,
            })?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let mut got = 0;
        for line in stdout.lines() {
            let mut parts = line.splitn(3, '\t');
            let (Some(flag), Some(refs), summary) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let (Some(flag), Some((_, to))) = (flag.chars().next(), refs.split_once(':')) else {
                continue;
            };
            got += 1;
            out.push(PushedRef {
                remote_ref: to.to_owned(),
                flag,
                summary: summary.unwrap_or("").to_owned(),
            });
        }
        // A rejected ref is a result; a push that reported no ref failed as a whole.
        if !output.status.success() && got == 0 {
            return Err(RemoteError::Git {
                what: format!("push {remote}"),
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
    }
    Ok(out)
}

/// A name for `remote` usable in a ref: the name itself when it is a plain remote
/// name, else `url-` and 16 hex digits of its BLAKE3.
pub fn remote_ref_name(remote: &str) -> String {
    let plain = !remote.is_empty()
        && !remote.starts_with(['.', '-'])
        && !remote.ends_with(".lock")
        && remote
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !remote.contains("..");
    if plain {
        remote.to_owned()
    } else {
        format!("url-{}", &blake3::hash(remote.as_bytes()).to_hex()[..16])
    }
}

impl SnapshotStore {
    /// Writes the commit of a session (SPEC §16.1) and points
    /// `refs/tacho/pushed/<session>` at it; the commit's parent is the one published
    /// before, if any, so the remote's ref only moves forward. Writing the same
    /// objects again gives the same commit.
    pub fn write_session_commit(
        &self,
        session: &str,
        objects: &SessionObjects,
        parent: Option<ObjectId>,
    ) -> Result<ObjectId, SnapshotError> {
        let repo = self.repo()?;
        let git = |what: &str, e: Box<dyn std::error::Error + Send + Sync>| SnapshotError::Git {
            what: what.to_owned(),
            source: e,
        };
        let blob = |bytes: &[u8]| -> Result<ObjectId, SnapshotError> {
            Ok(repo
                .write_blob(bytes)
                .map_err(|e| git("writing a session blob", e.into()))?
                .detach())
        };
        let mut snaps = gix::objs::Tree::empty();
        for t in &objects.snapshots {
            snaps.entries.push(Entry {
                mode: EntryKind::Tree.into(),
                filename: BString::from(t.to_hex().to_string()),
                oid: *t,
            });
        }
        snaps.entries.sort();
        snaps.entries.dedup();
        let mut root = gix::objs::Tree::empty();
        root.entries.push(Entry {
            mode: EntryKind::Blob.into(),
            filename: RECORD_FILE.into(),
            oid: blob(&objects.record)?,
        });
        root.entries.push(Entry {
            mode: EntryKind::Blob.into(),
            filename: SIGNED_FILE.into(),
            oid: blob(&objects.signed)?,
        });
        if let Some(sig) = &objects.signature {
            root.entries.push(Entry {
                mode: EntryKind::Blob.into(),
                filename: SIGNATURE_FILE.into(),
                oid: blob(sig)?,
            });
        }
        root.entries.push(Entry {
            mode: EntryKind::Tree.into(),
            filename: SNAPSHOTS_DIR.into(),
            oid: repo
                .write_object(&snaps)
                .map_err(|e| git("writing a session tree", e.into()))?
                .detach(),
        });
        root.entries.sort();
        let tree = repo
            .write_object(&root)
            .map_err(|e| git("writing a session tree", e.into()))?
            .detach();
        if let Some(p) = parent
            && let Ok(c) = repo.find_commit(p)
            && c.tree_id().ok().map(|t| t.detach()) == Some(tree)
        {
            return Ok(p);
        }
        let who = gix::actor::Signature {
            name: "tacho".into(),
            email: "tacho@localhost".into(),
            time: gix::date::Time::new(0, 0),
        };
        let commit = gix::objs::Commit {
            tree,
            parents: parent.into_iter().collect(),
            author: who.clone(),
            committer: who,
            encoding: None,
            message: format!("tacho session {session}\n").into(),
            extra_headers: Vec::new(),
        };
        let id = repo
            .write_object(&commit)
            .map_err(|e| git("writing a session commit", e.into()))?
            .detach();
        let name = format!("{PUSHED_PREFIX}{session}");
        repo.reference(
            name.as_str(),
            id,
            gix::refs::transaction::PreviousValue::Any,
            "tacho push",
        )
        .map_err(|e| git(&format!("writing {name}"), e.into()))?;
        Ok(id)
    }

    /// The commit last published of a session, if any.
    pub fn pushed_commit(&self, session: &str) -> Option<ObjectId> {
        let repo = self.repo().ok()?;
        let name = format!("{PUSHED_PREFIX}{session}");
        repo.try_find_reference(name.as_str())
            .ok()
            .flatten()
            .and_then(|r| r.target().try_id().map(|i| i.to_owned()))
    }

    /// The objects directory (for `GIT_ALTERNATE_OBJECT_DIRECTORIES`).
    pub fn objects_dir(&self) -> PathBuf {
        self.root().join("objects")
    }

    /// Fetches every published session of `url` into
    /// `refs/tacho-remotes/<name>/<session>` of the snapshot store (ours only: the
    /// project is not written), with the project's directory as the working directory
    /// (a relative URL is the project's). Returns the session ids and commits fetched.
    pub fn fetch_sessions(
        &self,
        project: &Path,
        url: &str,
        name: &str,
    ) -> Result<Vec<(String, ObjectId)>, RemoteError> {
        let prefix = format!("{FETCHED_PREFIX}{name}/");
        let mut c = git_command(project)?;
        c.arg("--git-dir").arg(self.root());
        c.args([
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--prune",
            "--no-auto-gc",
            "--",
            url,
        ]);
        c.arg(format!("+{REMOTE_PREFIX}*:{prefix}*"));
        run(c, &format!("fetch {url}"))?;
        let repo = self.repo()?;
        let refs = repo
            .references()
            .map_err(|e| SnapshotError::git("listing refs", e))?;
        let mut out = Vec::new();
        for r in refs
            .prefixed(prefix.as_str())
            .map_err(|e| SnapshotError::git("listing refs", e))?
        {
            let r = r.map_err(|e| SnapshotError::git("listing refs", e))?;
            let full = r.name().as_bstr().to_string();
            let target = r.target().try_id().map(|i| i.to_owned());
            let (Some(id), Some(oid)) = (full.strip_prefix(&prefix), target) else {
                continue;
            };
            out.push((id.to_owned(), oid));
        }
        out.sort();
        Ok(out)
    }

    /// Reads a session commit as [`SessionObjects`], checking that its snapshot trees
    /// are there; anything push does not write is refused, naming it.
    pub fn read_session_commit(&self, commit: ObjectId) -> Result<SessionObjects, RemoteError> {
        let repo = self.repo()?;
        let bad = |what: String| RemoteError::Malformed { what };
        let c = repo
            .find_commit(commit)
            .map_err(|e| bad(format!("commit {commit}: {e}")))?;
        let tree = c
            .tree()
            .map_err(|e| bad(format!("the tree of commit {commit}: {e}")))?;
        let mut objects = SessionObjects {
            record: Vec::new(),
            signed: Vec::new(),
            signature: None,
            snapshots: Vec::new(),
        };
        let (mut record, mut signed) = (false, false);
        for e in tree.iter() {
            let e = e.map_err(|e| bad(format!("the tree of commit {commit}: {e}")))?;
            let name = e.filename().to_str_lossy().into_owned();
            let oid = e.oid().to_owned();
            // Each file's size is read from its header first: a remote's blob can
            // be a gigabyte of zeros that compresses to a megabyte, and nothing of it
            // is inflated into memory past what such a file can hold.
            let read = |oid: ObjectId| -> Result<Vec<u8>, RemoteError> {
                let max = match name.as_str() {
                    RECORD_FILE => MAX_RECORD_BYTES,
                    SIGNATURE_FILE => 64 << 10,
                    _ => 4 << 10,
                };
                let size = repo
                    .find_header(oid)
                    .map_err(|e| bad(format!("{name} ({oid}) of commit {commit}: {e}")))?
                    .size();
                if size > max {
                    return Err(bad(format!(
                        "{name} of commit {commit} is {size} bytes, more than such a file holds ({max})"
                    )));
                }
                let mut b = repo
                    .find_blob(oid)
                    .map_err(|e| bad(format!("{name} ({oid}) of commit {commit}: {e}")))?;
                Ok(b.take_data())
            };
            match (name.as_str(), e.mode().is_tree()) {
                (RECORD_FILE, false) => {
                    objects.record = read(oid)?;
                    record = true;
                }
                (SIGNED_FILE, false) => {
                    objects.signed = read(oid)?;
                    signed = true;
                }
                (SIGNATURE_FILE, false) => objects.signature = Some(read(oid)?),
                (SNAPSHOTS_DIR, true) => {
                    let t = repo
                        .find_tree(oid)
                        .map_err(|e| bad(format!("{SNAPSHOTS_DIR} of commit {commit}: {e}")))?;
                    for s in t.iter() {
                        let s = s.map_err(|e| bad(format!("{SNAPSHOTS_DIR} of {commit}: {e}")))?;
                        let id = s.oid().to_owned();
                        if !s.mode().is_tree() || s.filename() != id.to_hex().to_string().as_bytes()
                        {
                            return Err(bad(format!(
                                "{SNAPSHOTS_DIR}/{} of commit {commit} is not a snapshot tree named by its id",
                                s.filename()
                            )));
                        }
                        repo.find_tree(id).map_err(|e| {
                            bad(format!("snapshot {id} of commit {commit} is missing: {e}"))
                        })?;
                        objects.snapshots.push(id);
                    }
                }
                _ => {
                    return Err(bad(format!(
                        "commit {commit} holds {name:?}, which tacho push does not write"
                    )));
                }
            }
        }
        objects.snapshots.sort();
        if !record || !signed {
            return Err(bad(format!(
                "commit {commit} lacks {}",
                if record { SIGNED_FILE } else { RECORD_FILE }
            )));
        }
        Ok(objects)
    }

    /// Keeps a fetched snapshot tree as a snapshot (`refs/snapshots/<tree>`).
    pub fn keep_snapshot(&self, tree: ObjectId) -> Result<(), SnapshotError> {
        self.make_ref(tree)
    }
}

/// Adds every object the session commits of the store reach (`refs/tacho/…` and
/// `refs/tacho-remotes/…`, each commit's ancestors too) to `seen`, so that gc keeps
/// what push and fetch wrote.
pub(crate) fn reach_session_commits(
    repo: &gix::Repository,
    seen: &mut std::collections::HashSet<ObjectId>,
) -> Result<(), SnapshotError> {
    let refs = repo
        .references()
        .map_err(|e| SnapshotError::git("listing refs", e))?;
    let mut stack = Vec::new();
    for prefix in ["refs/tacho/", FETCHED_PREFIX] {
        for r in refs
            .prefixed(prefix)
            .map_err(|e| SnapshotError::git("listing refs", e))?
        {
            let r = r.map_err(|e| SnapshotError::git("listing refs", e))?;
            if let Some(id) = r.target().try_id() {
                stack.push(id.to_owned());
            }
        }
    }
    while let Some(c) = stack.pop() {
        if !seen.insert(c) {
            continue;
        }
        let Ok(commit) = repo.find_commit(c) else {
            continue;
        };
        stack.extend(commit.parent_ids().map(|p| p.detach()));
        if let Ok(tree) = commit.tree_id() {
            crate::snapshot::reach_tree(repo, tree.detach(), seen)?;
        }
    }
    Ok(())
}
