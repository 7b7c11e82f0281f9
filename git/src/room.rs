//! The clean room a goal check runs in (SPEC §12.2): a fresh directory outside the
//! workspace that holds exactly the files given — the fingerprinted tree, each file's
//! bytes checked against the digest the fingerprint took — and nothing else. Ignored
//! files, build outputs, caches and anything hidden from Git are absent by
//! construction, not by a list of refused names.
//!
//! Files are copied, never hard-linked (a check that writes to a hard link would write
//! into the workspace), and read with `O_NOFOLLOW | O_NONBLOCK` as regular files only.
//! Inside a Git repository the room is a repository of its own whose objects borrow
//! the project's (`objects/info/alternates`) and whose `HEAD` is a commit of the room's
//! files with the project's `HEAD` as parent: history (`{BASELINE}`, `git diff`) reads
//! as in the project, and nothing is written into the project's `.git`.
//!
//! The room is removed when dropped.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Git blob id (hex) of `bytes`, as a snapshot's tree names a file's content.
pub fn blob_id(bytes: &[u8]) -> String {
    gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::object::Kind::Blob, bytes)
        .map(|id| id.to_hex().to_string())
        .unwrap_or_default()
}

/// Where one file of the room comes from.
#[derive(Debug, Clone)]
pub enum RoomContent {
    /// A file on disk whose content must hash (BLAKE3, hex) to `blake3`.
    Copy { from: PathBuf, blake3: String },
    /// Bytes already read (from a snapshot).
    Bytes(Vec<u8>),
}

/// One file of the room, at its workspace-relative path.
#[derive(Debug, Clone)]
pub struct RoomFile {
    pub path: String,
    pub executable: bool,
    pub content: RoomContent,
}

/// The project's history the room's repository borrows.
#[derive(Debug, Clone)]
pub struct RoomGit {
    /// The project's object directory (absolute).
    pub objects: PathBuf,
    /// The project's `HEAD` commit (hex), the parent of the room's commit.
    pub head: String,
    /// The workspace's path inside the repository (`""` at its root, else with a
    /// trailing `/`): the room mirrors the repository, the check runs there.
    pub prefix: String,
    /// The `git` program (a fixed path, never looked up through `PATH`).
    pub program: PathBuf,
}

/// Why a room could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RoomError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file no longer has the content the fingerprint took: the source changed.
    #[error("{0}: changed since it was fingerprinted")]
    Changed(String),
    #[error("{0}: not a path a room can hold")]
    BadPath(String),
    #[error("making the room's repository: {0}")]
    Git(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RoomError + '_ {
    move |source| RoomError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A clean room: its directory holds `home/`, `tmp/` and `repo/` (the workspace at
/// `repo/PREFIX`).
#[derive(Debug)]
pub struct Room {
    dir: PathBuf,
    work: PathBuf,
    /// The room's commit (hex), when it has a repository.
    commit: Option<String>,
}

impl Room {
    /// The directory a check runs in: the workspace's place in the room.
    pub fn work(&self) -> &Path {
        &self.work
    }

    /// The room's `HOME`.
    pub fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    /// The room's temporary directory (`TMPDIR`).
    pub fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    /// The room's commit, when it is a repository.
    pub fn commit(&self) -> Option<&str> {
        self.commit.as_deref()
    }

    /// Makes a room under `parent` (created if needed) holding exactly `files`.
    pub fn build(
        parent: &Path,
        files: &[RoomFile],
        git: Option<&RoomGit>,
    ) -> Result<Room, RoomError> {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        sweep(parent);
        let dir = tempfile::Builder::new()
            .prefix(&format!("room-{}-", std::process::id()))
            .tempdir_in(parent)
            .map_err(io(parent))?
            .keep();
        let prefix = git.map_or("", |g| g.prefix.as_str());
        let repo = dir.join("repo");
        let work = if prefix.is_empty() {
            repo.clone()
        } else {
            repo.join(prefix.trim_end_matches('/'))
        };
        // Owned from here: dropped (and removed) on any error below.
        let mut room = Room {
            dir,
            work,
            commit: None,
        };
        for d in [room.home(), room.tmp(), room.work.clone()] {
            std::fs::create_dir_all(&d).map_err(io(&d))?;
        }
        for f in files {
            room.place(f)?;
        }
        if let Some(g) = git {
            room.commit = Some(room.make_repository(&repo, g)?);
        }
        Ok(room)
    }

    /// The first of `files` whose content in the room is not what was placed there (a
    /// process that wrote into the room while a check ran), if any.
    pub fn changed(&self, files: &[RoomFile]) -> Option<String> {
        files.iter().find_map(|f| {
            let want = match &f.content {
                RoomContent::Copy { blake3, .. } => blake3.clone(),
                RoomContent::Bytes(b) => blake3::hash(b).to_hex().to_string(),
            };
            let ok = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(
                    (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32,
                )
                .open(self.work.join(&f.path))
                .and_then(|mut file| {
                    let mut h = blake3::Hasher::new();
                    std::io::copy(&mut file, &mut h)?;
                    Ok(h.finalize().to_hex().to_string())
                })
                .is_ok_and(|got| got == want);
            (!ok).then(|| f.path.clone())
        })
    }

    /// Writes one file into the room.
    fn place(&self, f: &RoomFile) -> Result<(), RoomError> {
        let ok = !f.path.is_empty()
            && !f.path.starts_with('/')
            && f.path
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".." && c != ".git");
        if !ok {
            return Err(RoomError::BadPath(f.path.clone()));
        }
        let to = self.work.join(&f.path);
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        let mode = if f.executable { 0o755 } else { 0o644 };
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&to)
            .map_err(io(&to))?;
        match &f.content {
            RoomContent::Bytes(b) => out.write_all(b).map_err(io(&to))?,
            RoomContent::Copy { from, blake3 } => {
                let mut src = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(
                        (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32,
                    )
                    .open(from)
                    .map_err(|_| RoomError::Changed(f.path.clone()))?;
                if !src.metadata().map_err(io(from))?.is_file() {
                    return Err(RoomError::Changed(f.path.clone()));
                }
                let mut h = blake3::Hasher::new();
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    let n = src.read(&mut buf).map_err(io(from))?;
                    let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
                        break;
                    };
                    h.update(chunk);
                    out.write_all(chunk).map_err(io(&to))?;
                }
                if h.finalize().to_hex().as_str() != blake3 {
                    return Err(RoomError::Changed(f.path.clone()));
                }
            }
        }
        // The mode asked for, whatever the umask made of it.
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode)).map_err(io(&to))?;
        Ok(())
    }

    /// Makes `repo` a repository borrowing the project's objects, commits the room's
    /// files on top of the project's `HEAD`, and returns the commit.
    fn make_repository(&self, repo: &Path, g: &RoomGit) -> Result<String, RoomError> {
        let git = |args: &[&str]| -> Result<String, RoomError> {
            let out = Command::new(&g.program)
                .current_dir(repo)
                .env_clear()
                .env("HOME", self.home())
                .env("PATH", "/usr/bin:/bin")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_AUTHOR_NAME", "tacho")
                .env("GIT_AUTHOR_EMAIL", "tacho@localhost")
                .env("GIT_COMMITTER_NAME", "tacho")
                .env("GIT_COMMITTER_EMAIL", "tacho@localhost")
                .args([
                    "-c",
                    "core.hooksPath=/dev/null",
                    "-c",
                    "init.defaultBranch=room",
                    // No automatic gc or maintenance after the commit: it would pack the
                    // room's new loose objects for nothing.
                    "-c",
                    "gc.auto=0",
                    "-c",
                    "maintenance.auto=false",
                ])
                .args(args)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| RoomError::Git(format!("running {}: {e}", g.program.display())))?;
            if !out.status.success() {
                return Err(RoomError::Git(format!(
                    "git {} failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        };
        git(&["init", "-q"])?;
        let alternates = repo.join(".git/objects/info/alternates");
        std::fs::write(&alternates, format!("{}\n", g.objects.display()))
            .map_err(io(&alternates))?;
        git(&["update-ref", "HEAD", &g.head])?;
        git(&["add", "-A"])?;
        git(&[
            "commit",
            "-q",
            "--no-verify",
            "--allow-empty",
            "-m",
            "tacho clean room",
        ])?;
        git(&["rev-parse", "HEAD"])
    }
}

/// Removes the rooms under `parent` whose process is gone (`room-PID-*`): a check
/// killed before it cleaned up, or one whose leftover processes kept writing.
pub fn sweep(parent: &Path) {
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("room-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = rustix::process::Pid::from_raw(pid)
            .is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
        if !alive {
            drop(Room {
                dir: e.path(),
                work: PathBuf::new(),
                commit: None,
            });
        }
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        // A check may leave directories it made read-only: open them up first.
        if std::fs::remove_dir_all(&self.dir).is_err() {
            let mut stack = vec![self.dir.clone()];
            while let Some(d) = stack.pop() {
                let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
                if let Ok(rd) = std::fs::read_dir(&d) {
                    for e in rd.flatten() {
                        if e.file_type().is_ok_and(|t| t.is_dir()) {
                            stack.push(e.path());
                        }
                    }
                }
            }
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, bytes: &[u8]) -> RoomFile {
        RoomFile {
            path: path.into(),
            executable: false,
            content: RoomContent::Bytes(bytes.to_vec()),
        }
    }

    #[test]
    fn a_room_holds_exactly_its_files_and_is_removed() {
        let parent = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("a.txt"), b"alpha").unwrap();
        std::fs::write(ws.path().join("hidden.pyc"), b"stale").unwrap();
        let files = vec![
            RoomFile {
                path: "src/a.txt".into(),
                executable: true,
                content: RoomContent::Copy {
                    from: ws.path().join("a.txt"),
                    blake3: blake3::hash(b"alpha").to_hex().to_string(),
                },
            },
            file("b.txt", b"beta"),
        ];
        let room = Room::build(parent.path(), &files, None).unwrap();
        let dir = room.dir.clone();
        assert_eq!(
            std::fs::read(room.work().join("src/a.txt")).unwrap(),
            b"alpha"
        );
        let mode = std::fs::metadata(room.work().join("src/a.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111);
        assert_eq!(std::fs::read(room.work().join("b.txt")).unwrap(), b"beta");
        let mut names: Vec<_> = std::fs::read_dir(room.work())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["b.txt", "src"]);
        drop(room);
        assert!(!dir.exists());
    }

    #[test]
    fn a_file_that_changed_since_its_fingerprint_makes_no_room() {
        let parent = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("a.txt"), b"changed").unwrap();
        let files = vec![RoomFile {
            path: "a.txt".into(),
            executable: false,
            content: RoomContent::Copy {
                from: ws.path().join("a.txt"),
                blake3: blake3::hash(b"alpha").to_hex().to_string(),
            },
        }];
        let e = Room::build(parent.path(), &files, None).unwrap_err();
        assert!(matches!(e, RoomError::Changed(p) if p == "a.txt"));
        // Nothing is left behind.
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0);
        // A link in a file's place is not followed.
        std::os::unix::fs::symlink("/etc/hostname", ws.path().join("l")).unwrap();
        let files = vec![RoomFile {
            path: "l".into(),
            executable: false,
            content: RoomContent::Copy {
                from: ws.path().join("l"),
                blake3: String::new(),
            },
        }];
        assert!(matches!(
            Room::build(parent.path(), &files, None).unwrap_err(),
            RoomError::Changed(_)
        ));
        for bad in ["../x", "a/../../x", ".git/config", "/etc/x", ""] {
            assert!(matches!(
                Room::build(parent.path(), &[file(bad, b"x")], None).unwrap_err(),
                RoomError::BadPath(_)
            ));
        }
    }
}
