//! Writes confined to a workspace.
//!
//! Every operation starts from a descriptor of the workspace root and opens each parent
//! directory with `O_NOFOLLOW | O_DIRECTORY`, one component at a time, so a symbolic
//! link anywhere on the way (including one swapped in after a plan was made) fails the
//! operation instead of leading it elsewhere. The last component is never followed
//! either: files are replaced by renaming a new file over them, links are removed as
//! links, and modes are set on a descriptor opened with `O_NOFOLLOW`.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

/// A workspace-relative path that cannot be used safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("refusing {path:?}: {reason}")]
pub struct Refused {
    pub path: String,
    pub reason: String,
}

/// An error of a confined operation.
#[derive(Debug, thiserror::Error)]
pub enum SafeFsError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

fn io(path: &str, e: impl Into<std::io::Error>) -> SafeFsError {
    SafeFsError::Io {
        path: path.to_owned(),
        source: e.into(),
    }
}

/// What is at a path, without following a link there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Missing,
    /// A regular file: its bytes and permission bits (`rwx` of owner, group, others).
    File {
        data: Vec<u8>,
        perms: u32,
    },
    Link(Vec<u8>),
    Dir,
    Other,
}

/// A workspace root that confined operations start from.
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

impl Root {
    /// Opens the workspace at `path` (absolute), every component without following a
    /// symbolic link: a workspace, or a directory above it, replaced by a link since it
    /// was recorded is refused, not followed.
    pub fn open(path: &Path) -> Result<Root, SafeFsError> {
        let shown = path.display().to_string();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        let mut fd = rustix::fs::open("/", flags, Mode::empty()).map_err(|e| io(&shown, e))?;
        for c in path.components() {
            match c {
                std::path::Component::RootDir => {}
                std::path::Component::Normal(name) => {
                    // A link here fails with ELOOP (or ENOTDIR): refused, not followed.
                    fd = rustix::fs::openat(&fd, name, flags, Mode::empty())
                        .map_err(|e| io(&shown, e))?;
                }
                _ => {
                    return Err(io(&shown, Errno::INVAL));
                }
            }
        }
        Ok(Root {
            fd,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Splits and checks a relative path: only normal components, none of them `.git`.
    pub fn components(rel: &str) -> Result<Vec<&str>, Refused> {
        let refuse = |reason: &str| Refused {
            path: rel.to_owned(),
            reason: reason.to_owned(),
        };
        if rel.starts_with('/') {
            return Err(refuse("absolute path"));
        }
        let comps: Vec<&str> = rel.split('/').collect();
        for c in &comps {
            match *c {
                "" | "." => return Err(refuse("empty or `.` component")),
                ".." => return Err(refuse("`..` component leaves the workspace")),
                ".git" => return Err(refuse("inside a .git directory")),
                c if c.contains('\0') => return Err(refuse("NUL in the name")),
                _ => {}
            }
        }
        Ok(comps)
    }

    /// Opens the directory holding `rel`, refusing links on the way. With `create`,
    /// missing directories are made. Returns `None` when a directory is missing and
    /// `create` is off.
    fn parent<'a>(
        &self,
        rel: &'a str,
        create: bool,
    ) -> Result<Option<(OwnedFd, &'a str)>, SafeFsError> {
        let comps = Self::components(rel)?;
        let (last, dirs) = comps.split_last().ok_or_else(|| Refused {
            path: rel.to_owned(),
            reason: "empty path".into(),
        })?;
        let mut cur = rustix::io::dup(&self.fd).map_err(|e| io(rel, e))?;
        for (i, d) in dirs.iter().enumerate() {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let next = match rustix::fs::openat(&cur, *d, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&cur, *d, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(io(rel, e)),
                    }
                    rustix::fs::openat(&cur, *d, flags, Mode::empty())
                        .map_err(|e| self.why(rel, &dirs[..=i], e))?
                }
                Err(Errno::NOENT) => return Ok(None),
                Err(e) => return Err(self.why(rel, &dirs[..=i], e)),
            };
            cur = next;
        }
        Ok(Some((cur, last)))
    }

    /// Turns a failed directory open into a clear refusal where a link or a file is
    /// in the way.
    fn why(&self, rel: &str, upto: &[&str], e: Errno) -> SafeFsError {
        let prefix = upto.join("/");
        let what = match std::fs::symlink_metadata(self.path.join(&prefix)) {
            Ok(m) if m.file_type().is_symlink() => Some("is a symbolic link"),
            Ok(m) if !m.is_dir() => Some("is not a directory"),
            _ => None,
        };
        let what =
            what.or(matches!(e, Errno::LOOP | Errno::NOTDIR).then_some("is a symbolic link"));
        match what {
            Some(what) => Refused {
                path: rel.to_owned(),
                reason: format!("`{prefix}` {what}"),
            }
            .into(),
            None => io(rel, e),
        }
    }

    /// What is at `rel`, read without following a link.
    pub fn read(&self, rel: &str) -> Result<Found, SafeFsError> {
        let Some((dir, name)) = self.parent(rel, false)? else {
            return Ok(Found::Missing);
        };
        let st = match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => return Ok(Found::Missing),
            Err(e) => return Err(io(rel, e)),
        };
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        match kind {
            rustix::fs::FileType::Symlink => {
                let target =
                    rustix::fs::readlinkat(&dir, name, Vec::new()).map_err(|e| io(rel, e))?;
                Ok(Found::Link(target.into_bytes()))
            }
            rustix::fs::FileType::RegularFile => {
                // Without blocking: a FIFO swapped in since the stat would wait for a
                // writer forever. What the descriptor is decides.
                let fd = rustix::fs::openat(
                    &dir,
                    name,
                    OFlags::RDONLY
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC
                        | OFlags::NONBLOCK
                        | OFlags::NOCTTY,
                    Mode::empty(),
                )
                .map_err(|e| io(rel, e))?;
                let st = rustix::fs::fstat(&fd).map_err(|e| io(rel, e))?;
                if rustix::fs::FileType::from_raw_mode(st.st_mode)
                    != rustix::fs::FileType::RegularFile
                {
                    return Ok(Found::Other);
                }
                let mut f = std::fs::File::from(fd);
                let mut data = Vec::new();
                f.read_to_end(&mut data).map_err(|e| io(rel, e))?;
                Ok(Found::File {
                    data,
                    perms: st.st_mode & 0o777,
                })
            }
            rustix::fs::FileType::Directory => Ok(Found::Dir),
            _ => Ok(Found::Other),
        }
    }

    /// Removes a file or link (never what a link points to). Missing is fine.
    pub fn remove(&self, rel: &str) -> Result<(), SafeFsError> {
        let Some((dir, name)) = self.parent(rel, false)? else {
            return Ok(());
        };
        match rustix::fs::unlinkat(&dir, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(io(rel, e)),
        }
    }

    /// Removes a directory if it is empty; anything else is left alone.
    pub fn remove_empty_dir(&self, rel: &str) -> Result<bool, SafeFsError> {
        let Some((dir, name)) = self.parent(rel, false)? else {
            return Ok(false);
        };
        match rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT | Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR) => Ok(false),
            Err(e) => Err(io(rel, e)),
        }
    }

    /// Writes a regular file with permission bits `perms` (`rwx` of owner, group and
    /// others; others are ignored), whatever the umask: a new file renamed over
    /// whatever is there; a directory in the way is an error. The file is made with no
    /// bits for group and others first, so a secret is never readable by others while
    /// it is written.
    pub fn write_file(&self, rel: &str, data: &[u8], perms: u32) -> Result<(), SafeFsError> {
        let (dir, name) = self
            .parent(rel, true)?
            .ok_or_else(|| io(rel, Errno::NOENT))?;
        let tmp = temp_name(name);
        let mode = perms & 0o777;
        let fd = rustix::fs::openat(
            &dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io(rel, e))?;
        let result = (|| {
            let mut f = std::fs::File::from(fd);
            f.write_all(data)?;
            // The mode asked for, whatever the umask (after the bytes: a file of mode
            // 0400 can still be written through this descriptor, but be sure).
            rustix::fs::fchmod(&f, Mode::from_raw_mode(mode))?;
            rustix::fs::renameat(&dir, tmp.as_str(), &dir, name)?;
            Ok::<_, std::io::Error>(())
        })();
        if let Err(e) = result {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
            return Err(io(rel, e));
        }
        Ok(())
    }

    /// Creates a symbolic link (renamed over whatever is there).
    pub fn write_link(&self, rel: &str, target: &[u8]) -> Result<(), SafeFsError> {
        let (dir, name) = self
            .parent(rel, true)?
            .ok_or_else(|| io(rel, Errno::NOENT))?;
        let tmp = temp_name(name);
        rustix::fs::symlinkat(target, &dir, tmp.as_str()).map_err(|e| io(rel, e))?;
        if let Err(e) = rustix::fs::renameat(&dir, tmp.as_str(), &dir, name) {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
            return Err(io(rel, e));
        }
        Ok(())
    }

    /// Sets the permission bits (`rwx` of owner, group and others) of a regular file.
    pub fn set_perms(&self, rel: &str, perms: u32) -> Result<(), SafeFsError> {
        let (dir, name) = self
            .parent(rel, false)?
            .ok_or_else(|| io(rel, Errno::NOENT))?;
        let fd = rustix::fs::openat(
            &dir,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            Mode::empty(),
        )
        .map_err(|e| io(rel, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| io(rel, e))?;
        if st.st_nlink > 1 {
            // Hard-linked: the mode belongs to every name of the file, some perhaps
            // outside the workspace. Change it the way contents are changed: a new file
            // with the same bytes, renamed into place.
            let mut data = Vec::new();
            std::fs::File::from(fd)
                .read_to_end(&mut data)
                .map_err(|e| io(rel, e))?;
            return self.write_file(rel, &data, perms);
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(perms & 0o777)).map_err(|e| io(rel, e))
    }
}

fn temp_name(name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let short: String = name.chars().take(40).collect();
    format!(".{short}.tacho-{}-{n}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_be_plain() {
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../b",
            "a//b",
            "./a",
            ".git/config",
            "a/.git/x",
        ] {
            assert!(Root::components(bad).is_err(), "{bad}");
        }
        assert_eq!(Root::components("a/b.txt").unwrap(), vec!["a", "b.txt"]);
    }
}
