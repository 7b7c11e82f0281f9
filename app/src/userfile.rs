//! Writing files tacho does not own: an agent's settings file and its backup
//! (`hooks install|uninstall`), and the file an output option names (`audit export
//! --output`, `audit otlp --file`, `audit report --output`, `session replay --mode
//! export --output`). ARCHITECTURE.md lists them with the rules below.
//!
//! - Nothing tacho creates goes through a link: temporary files and backups are made
//!   with `O_CREAT | O_EXCL | O_NOFOLLOW` in a directory opened once, and put in place
//!   by `renameat` in that directory, which replaces a name and never follows it.
//! - A file replaced keeps its mode and owner (set on the new file before the rename).
//! - A regular file (or a new one) is replaced whole or not at all: a temporary file
//!   beside it, synced, renamed. A character or block device or a FIFO is written in
//!   place, never truncated or replaced; a directory or a socket is refused.
//! - An output that is a link is written through to its target, checked like any
//!   output. A user's own settings file that is a link (a dotfile manager's) is written
//!   through to its target, which must be a regular file, and the caller says so.
//! - In a repository (project or local settings) nothing below the project's root may
//!   be a link: not `.claude`, not the settings file, not its backup. A repository
//!   controls those names; it is refused, naming the path and why.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;

use crate::error::{ErrorKind, Field, Kind, Namer, neutral};

/// Why a file outside the data directory was not written.
#[derive(Debug, thiserror::Error)]
pub enum UserFileError {
    /// What is at the path is not something tacho writes (a link in a repository, a
    /// directory, a socket, a link to nothing): nothing was written.
    #[error("{}: {why}", path.display())]
    Refused { path: PathBuf, why: String },
    /// What is in a repository where its settings go is not something tacho writes
    /// there (a link, not a regular file): `remove` it, or install for the user.
    #[error("{}", neutral(self))]
    InRepository {
        path: PathBuf,
        why: String,
        remove: &'static str,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Kind for UserFileError {
    fn kind(&self) -> ErrorKind {
        match self {
            UserFileError::Refused { .. } | UserFileError::InRepository { .. } => ErrorKind::Input,
            UserFileError::Io { .. } => ErrorKind::Io,
        }
    }

    fn field(&self) -> Option<Field> {
        match self {
            UserFileError::InRepository { .. } => Some(Field::Scope),
            _ => None,
        }
    }

    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        match self {
            UserFileError::InRepository { path, why, remove } => write!(
                f,
                "{}: {why} (remove {remove}, or install with {} user)",
                path.display(),
                name.field(Field::Scope)
            ),
            other => fmt::Display::fmt(other, f),
        }
    }
}

fn io(path: &Path, e: impl Into<std::io::Error>) -> UserFileError {
    UserFileError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

fn refused(path: &Path, why: impl Into<String>) -> UserFileError {
    UserFileError::Refused {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

const DIR: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

/// Opens a directory the caller named (links on its way are the caller's own).
fn open_dir(path: &Path) -> Result<OwnedFd, UserFileError> {
    let p = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    rustix::fs::open(p, DIR, Mode::empty()).map_err(|e| io(p, e))
}

/// What is at `name` in `dir`, without following a link; `None` when nothing is.
fn lstat_at(dir: &OwnedFd, name: &OsStr, shown: &Path) -> Result<Option<Stat>, UserFileError> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(io(shown, e)),
    }
}

fn kind(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

fn what(t: FileType) -> &'static str {
    match t {
        FileType::Symlink => "a symbolic link",
        FileType::Directory => "a directory",
        FileType::Socket => "a socket",
        FileType::Fifo => "a FIFO",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        _ => "not a regular file",
    }
}

/// A new file in `dir`, created exclusively (never through a link, never an existing
/// file), named after `name`.
fn create_temp(
    dir: &OwnedFd,
    name: &OsStr,
    shown: &Path,
) -> Result<(std::fs::File, OsString), UserFileError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let short: Vec<u8> = name.as_bytes().iter().copied().take(40).collect();
    loop {
        let n = N.fetch_add(1, Ordering::Relaxed);
        let mut tmp = OsString::from(".");
        tmp.push(OsStr::from_bytes(&short));
        tmp.push(format!(".tacho-tmp-{}-{n}", std::process::id()));
        match rustix::fs::openat(
            dir,
            &tmp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        ) {
            Ok(fd) => return Ok((std::fs::File::from(fd), tmp)),
            Err(Errno::EXIST) if n < 1_000_000 => {}
            Err(e) => return Err(io(shown, e)),
        }
    }
}

/// Gives a new file the owner and mode of the file it replaces (owner first: a change
/// of owner clears set-id bits).
fn keep_owner_and_mode(f: &std::fs::File, old: &Stat) -> std::io::Result<()> {
    let now = rustix::fs::fstat(f)?;
    if (now.st_uid, now.st_gid) != (old.st_uid, old.st_gid) {
        rustix::fs::fchown(
            f,
            Some(rustix::fs::Uid::from_raw(old.st_uid)),
            Some(rustix::fs::Gid::from_raw(old.st_gid)),
        )
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "its owner ({}:{}) cannot be kept: {e}",
                    old.st_uid, old.st_gid
                ),
            )
        })?;
    }
    rustix::fs::fchmod(f, Mode::from_raw_mode(old.st_mode & 0o7777))?;
    Ok(())
}

/// Replaces `name` in `dir` with `bytes`, whole or not at all, keeping `old`'s owner
/// and mode.
fn replace_at(
    dir: &OwnedFd,
    name: &OsStr,
    bytes: &[u8],
    old: Option<&Stat>,
    shown: &Path,
) -> Result<(), UserFileError> {
    let (mut f, tmp) = create_temp(dir, name, shown)?;
    let result = (|| {
        if let Some(old) = old {
            keep_owner_and_mode(&f, old)?;
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        rustix::fs::renameat(dir, &tmp, dir, name)?;
        Ok::<_, std::io::Error>(())
    })();
    result.map_err(|e| {
        let _ = rustix::fs::unlinkat(dir, &tmp, AtFlags::empty());
        io(shown, e)
    })
}

/// A file an output option names, being written. Create it with
/// [`OutputFile::create`], write to it, and [`OutputFile::commit`]; dropped without a
/// commit, a regular file's output is removed and the file left as it was.
pub struct OutputFile {
    path: PathBuf,
    through: Option<PathBuf>,
    file: std::io::BufWriter<std::fs::File>,
    /// For a regular (or new) file: the temporary file to rename over it.
    pending: Option<Pending>,
}

struct Pending {
    dir: OwnedFd,
    tmp: OsString,
    name: OsString,
}

impl OutputFile {
    /// Opens the output at `path`: a new or regular file is written beside it and
    /// renamed over it at the commit (its owner and mode kept); a device or a FIFO is
    /// written in place (a FIFO waits for its reader, as the shell's `>` does); a link
    /// is followed to its target, which is checked the same way; a directory, a socket
    /// or a link to nothing is refused.
    pub fn create(path: &Path) -> Result<OutputFile, UserFileError> {
        let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        let (target, through) = if is_link {
            let t = std::fs::canonicalize(path).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    refused(
                        path,
                        "is a symbolic link to nothing; an output is written through a link only to an existing file",
                    )
                } else {
                    io(path, e)
                }
            })?;
            (t.clone(), Some(t))
        } else {
            (path.to_path_buf(), None)
        };
        let Some(name) = target.file_name().map(OsStr::to_os_string) else {
            return Err(refused(path, "names no file"));
        };
        let dir = open_dir(target.parent().unwrap_or(Path::new(".")))?;
        let old = lstat_at(&dir, &name, &target)?;
        let in_place = match old.as_ref().map(kind) {
            None | Some(FileType::RegularFile) => false,
            Some(FileType::CharacterDevice | FileType::BlockDevice | FileType::Fifo) => true,
            Some(t) => {
                return Err(refused(
                    &target,
                    format!("is {}, not a file an output can be written to", what(t)),
                ));
            }
        };
        if in_place {
            // Written as it is: no O_TRUNC (a device is not truncated), no O_CREAT.
            let fd = rustix::fs::openat(
                &dir,
                &name,
                OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| io(&target, e))?;
            return Ok(OutputFile {
                path: target,
                through,
                file: std::io::BufWriter::with_capacity(1 << 20, std::fs::File::from(fd)),
                pending: None,
            });
        }
        let (f, tmp) = create_temp(&dir, &name, &target)?;
        let pending = Pending { dir, tmp, name };
        if let Some(old) = &old
            && let Err(e) = keep_owner_and_mode(&f, old)
        {
            let _ = rustix::fs::unlinkat(&pending.dir, &pending.tmp, AtFlags::empty());
            return Err(io(&target, e));
        }
        Ok(OutputFile {
            path: target,
            through,
            file: std::io::BufWriter::with_capacity(1 << 20, f),
            pending: Some(pending),
        })
    }

    /// The file written when the path given was a link: its target.
    pub fn written_through(&self) -> Option<&Path> {
        self.through.as_deref()
    }

    /// Flushes the output and, for a regular file, syncs it and puts it in place.
    pub fn commit(mut self) -> Result<(), UserFileError> {
        self.file.flush().map_err(|e| io(&self.path, e))?;
        if let Some(p) = self.pending.take() {
            let done = self
                .file
                .get_ref()
                .sync_all()
                .and_then(|()| Ok(rustix::fs::renameat(&p.dir, &p.tmp, &p.dir, &p.name)?));
            if let Err(e) = done {
                let _ = rustix::fs::unlinkat(&p.dir, &p.tmp, AtFlags::empty());
                return Err(io(&self.path, e));
            }
        }
        Ok(())
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Some(p) = self.pending.take() {
            let _ = rustix::fs::unlinkat(&p.dir, &p.tmp, AtFlags::empty());
        }
    }
}

impl Write for OutputFile {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write(buf)
    }
    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.file.write_all(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Whose a settings file is, which decides how links are treated.
#[derive(Debug, Clone, Copy)]
pub enum Owner<'a> {
    /// The user's own (`~/.claude/settings.json`, `$CODEX_HOME/hooks.json`): a file
    /// that is a link is written through to its target, a regular file.
    User,
    /// A repository's, below this root: no directory on the way, the file or its
    /// backup may be a link.
    Repository(&'a Path),
}

/// Where a settings file's bytes are, found without following a link tacho should
/// not follow.
struct Located {
    dir: OwnedFd,
    name: OsString,
    /// The file written (the link's target, for a user's link).
    at: PathBuf,
    backup_dir: OwnedFd,
    backup_name: OsString,
    backup: PathBuf,
    through: Option<PathBuf>,
    stat: Option<Stat>,
}

/// A settings file read for an edit.
pub struct SettingsFile {
    path: PathBuf,
    owner: OwnerBuf,
    text: String,
    stat: Option<Stat>,
    through: Option<PathBuf>,
}

#[derive(Debug, Clone)]
enum OwnerBuf {
    User,
    Repository(PathBuf),
}

fn backup_name(name: &OsStr) -> OsString {
    let mut b = name.to_os_string();
    b.push(".tacho-backup");
    b
}

impl SettingsFile {
    /// Reads the settings file at `path` (missing: empty text), refusing a link a
    /// repository put on the way.
    pub fn read(path: &Path, owner: Owner<'_>) -> Result<SettingsFile, UserFileError> {
        let owner = match owner {
            Owner::User => OwnerBuf::User,
            Owner::Repository(r) => OwnerBuf::Repository(r.to_path_buf()),
        };
        let (text, stat, through) = match locate(path, &owner, false)? {
            None => (String::new(), None, None),
            Some(l) => {
                let text = match &l.stat {
                    None => String::new(),
                    Some(_) => {
                        // Without blocking, and only a regular file: a FIFO put in
                        // its place since the look would hang `hooks install`.
                        let fd = rustix::fs::openat(
                            &l.dir,
                            &l.name,
                            OFlags::RDONLY
                                | OFlags::NOFOLLOW
                                | OFlags::CLOEXEC
                                | OFlags::NONBLOCK
                                | OFlags::NOCTTY,
                            Mode::empty(),
                        )
                        .map_err(|e| io(&l.at, e))?;
                        let f = std::fs::File::from(fd);
                        if !f.metadata().map_err(|e| io(&l.at, e))?.is_file() {
                            return Err(io(
                                &l.at,
                                std::io::Error::new(
                                    std::io::ErrorKind::InvalidInput,
                                    "not a regular file (replaced since it was looked at)",
                                ),
                            ));
                        }
                        let mut t = String::new();
                        (&f).read_to_string(&mut t).map_err(|e| io(&l.at, e))?;
                        t
                    }
                };
                (text, l.stat, l.through)
            }
        };
        Ok(SettingsFile {
            path: path.to_path_buf(),
            owner,
            text,
            stat,
            through,
        })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn into_text(self) -> String {
        self.text
    }

    pub fn exists(&self) -> bool {
        self.stat.is_some()
    }

    /// The link's target, when the settings file is a (user's) link.
    pub fn written_through(&self) -> Option<&Path> {
        self.through.as_deref()
    }

    /// Writes `text` in place of the file read, whole or not at all, keeping its owner
    /// and mode; the text read is kept first as `<name>.tacho-backup` beside the path
    /// (with the same owner and mode). Returns the backup's path. A file changed since
    /// it was read, or a backup name taken by anything but a regular file, is refused.
    pub fn replace(&self, text: &str) -> Result<Option<PathBuf>, UserFileError> {
        let l = self.unchanged()?;
        let backup = match &self.stat {
            None => None,
            Some(old) => {
                if let Some(st) = lstat_at(&l.backup_dir, &l.backup_name, &l.backup)?
                    && kind(&st) != FileType::RegularFile
                {
                    return Err(refused(
                        &l.backup,
                        format!(
                            "is {}, not a backup tacho made; tacho neither follows nor replaces it (remove it and run the command again)",
                            what(kind(&st))
                        ),
                    ));
                }
                replace_at(
                    &l.backup_dir,
                    &l.backup_name,
                    self.text.as_bytes(),
                    Some(old),
                    &l.backup,
                )?;
                Some(l.backup.clone())
            }
        };
        replace_at(&l.dir, &l.name, text.as_bytes(), self.stat.as_ref(), &l.at)?;
        Ok(backup)
    }

    /// Writes `text` in place of the file read as [`SettingsFile::replace`] does,
    /// keeping no backup: for a file that is tacho's own (its plugin file), whose
    /// previous text tacho writes again at will.
    pub fn replace_own(&self, text: &str) -> Result<(), UserFileError> {
        let l = self.unchanged()?;
        replace_at(&l.dir, &l.name, text.as_bytes(), self.stat.as_ref(), &l.at)
    }

    /// Removes the file read (tacho's own: its plugin file). A file changed since it
    /// was read, and a user's link (whose target this would remove), are refused.
    pub fn remove(&self) -> Result<(), UserFileError> {
        let l = self.unchanged()?;
        if let Some(t) = &l.through {
            return Err(refused(
                &self.path,
                format!(
                    "is a symbolic link to {}; tacho removes only its own file, never a link's target",
                    t.display()
                ),
            ));
        }
        if l.stat.is_none() {
            return Ok(());
        }
        rustix::fs::unlinkat(&l.dir, &l.name, AtFlags::empty()).map_err(|e| io(&l.at, e))
    }

    /// Where the file read is, refused when it is no longer the file read.
    fn unchanged(&self) -> Result<Located, UserFileError> {
        let l =
            locate(&self.path, &self.owner, true)?.ok_or_else(|| io(&self.path, Errno::NOENT))?;
        let same = match (&l.stat, &self.stat) {
            (None, None) => true,
            (Some(a), Some(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
            _ => false,
        };
        if !same || l.through != self.through {
            return Err(refused(
                &l.at,
                "changed while tacho was editing it; run the command again",
            ));
        }
        Ok(l)
    }
}

/// Finds where a settings file's bytes are. `None` when a directory on the way is
/// missing and `create` is off.
fn locate(path: &Path, owner: &OwnerBuf, create: bool) -> Result<Option<Located>, UserFileError> {
    let Some(name) = path.file_name().map(OsStr::to_os_string) else {
        return Err(refused(path, "names no file"));
    };
    let backup = path.with_file_name(backup_name(&name));
    match owner {
        OwnerBuf::Repository(root) => {
            let rel = path
                .strip_prefix(root)
                .map_err(|_| refused(path, format!("is not inside {}", root.display())))?;
            let mut dir = open_dir(root)?;
            let mut so_far = root.clone();
            let comps: Vec<Component<'_>> = rel.components().collect();
            let Some((_, dirs)) = comps.split_last() else {
                return Err(refused(path, "names no file"));
            };
            for c in dirs {
                let Component::Normal(c) = c else {
                    return Err(refused(path, "is not a plain path below the project"));
                };
                so_far.push(c);
                let flags = DIR | OFlags::NOFOLLOW;
                dir = match rustix::fs::openat(&dir, *c, flags, Mode::empty()) {
                    Ok(fd) => fd,
                    Err(Errno::NOENT) if create => {
                        match rustix::fs::mkdirat(&dir, *c, Mode::from_raw_mode(0o777)) {
                            Ok(()) | Err(Errno::EXIST) => {}
                            Err(e) => return Err(io(&so_far, e)),
                        }
                        rustix::fs::openat(&dir, *c, flags, Mode::empty())
                            .map_err(|e| not_followed(&dir, c, &so_far, e))?
                    }
                    Err(Errno::NOENT) => return Ok(None),
                    Err(e) => return Err(not_followed(&dir, c, &so_far, e)),
                };
            }
            let stat = lstat_at(&dir, &name, path)?;
            if let Some(st) = &stat
                && kind(st) != FileType::RegularFile
            {
                return Err(UserFileError::InRepository {
                    path: path.to_path_buf(),
                    why: format!(
                        "is {} in the repository; tacho writes a repository's settings only as a regular file, never through a link",
                        what(kind(st))
                    ),
                    remove: "it",
                });
            }
            let backup_dir = rustix::io::dup(&dir).map_err(|e| io(path, e))?;
            Ok(Some(Located {
                dir,
                name: name.clone(),
                at: path.to_path_buf(),
                backup_dir,
                backup_name: backup_name(&name),
                backup,
                through: None,
                stat,
            }))
        }
        OwnerBuf::User => {
            let parent = path.parent().unwrap_or(Path::new("."));
            match std::fs::symlink_metadata(parent) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    if !create {
                        return Ok(None);
                    }
                    std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
                }
                _ => {}
            }
            let backup_dir = open_dir(parent)?;
            let here = lstat_at(&backup_dir, &name, path)?;
            let (dir, at, through, stat) = match here.as_ref().map(kind) {
                Some(FileType::Symlink) => {
                    let t = std::fs::canonicalize(path).map_err(|e| {
                        if e.kind() == std::io::ErrorKind::NotFound {
                            refused(
                                path,
                                "is a symbolic link to nothing; tacho writes through a link only to an existing file (create its target, or remove the link)",
                            )
                        } else {
                            io(path, e)
                        }
                    })?;
                    let tname = t.file_name().map(OsStr::to_os_string).unwrap_or_default();
                    let dir = open_dir(t.parent().unwrap_or(Path::new("/")))?;
                    let st = lstat_at(&dir, &tname, &t)?;
                    match st.as_ref().map(kind) {
                        Some(FileType::RegularFile) => {}
                        other => {
                            return Err(refused(
                                path,
                                format!(
                                    "is a symbolic link to {}, which is {}; tacho writes through a link only to a regular file",
                                    t.display(),
                                    other.map_or("missing", what)
                                ),
                            ));
                        }
                    }
                    let name = tname;
                    (dir, (t.clone(), name), Some(t), st)
                }
                None | Some(FileType::RegularFile) => {
                    let dir = rustix::io::dup(&backup_dir).map_err(|e| io(path, e))?;
                    (dir, (path.to_path_buf(), name.clone()), None, here)
                }
                Some(t) => {
                    return Err(refused(
                        path,
                        format!("is {}, not a settings file", what(t)),
                    ));
                }
            };
            Ok(Some(Located {
                dir,
                name: at.1,
                at: at.0,
                backup_dir,
                backup_name: backup_name(&name),
                backup,
                through,
                stat,
            }))
        }
    }
}

/// A directory of a repository that could not be opened without following a link:
/// refused with the reason when a link or a file is in the way.
fn not_followed(dir: &OwnedFd, name: &OsStr, shown: &Path, e: Errno) -> UserFileError {
    match lstat_at(dir, name, shown) {
        Ok(Some(st)) if kind(&st) == FileType::Symlink => UserFileError::InRepository {
            path: shown.to_path_buf(),
            why: "is a symbolic link in the repository; tacho does not follow a repository's links when it writes settings".to_owned(),
            remove: "the link",
        },
        Ok(Some(st)) if kind(&st) != FileType::Directory => {
            refused(shown, format!("is {}, not a directory", what(kind(&st))))
        }
        _ => io(shown, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn an_output_dropped_without_commit_leaves_the_file_as_it_was() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let f = tmp.path().join("out.txt");
        std::fs::write(&f, "old").unwrap_or_else(|e| panic!("{e}"));
        {
            let mut o = OutputFile::create(&f).unwrap_or_else(|e| panic!("{e}"));
            o.write_all(b"half").unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(std::fs::read_to_string(&f).ok().as_deref(), Some("old"));
        assert_eq!(names(tmp.path()), ["out.txt"]);
        let mut o = OutputFile::create(&f).unwrap_or_else(|e| panic!("{e}"));
        o.write_all(b"new").unwrap_or_else(|e| panic!("{e}"));
        o.commit().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::read_to_string(&f).ok().as_deref(), Some("new"));
        assert_eq!(names(tmp.path()), ["out.txt"]);
    }

    #[test]
    fn a_settings_file_replaced_since_it_was_read_is_refused() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let f = tmp.path().join("settings.json");
        std::fs::write(&f, "{}").unwrap_or_else(|e| panic!("{e}"));
        let s = SettingsFile::read(&f, Owner::User).unwrap_or_else(|e| panic!("{e}"));
        // Another program replaces it meanwhile (as an editor saving does).
        std::fs::write(tmp.path().join("other"), "{\"a\": 1}").unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(tmp.path().join("other"), &f).unwrap_or_else(|e| panic!("{e}"));
        let r = s.replace("{\"b\": 2}\n");
        assert!(
            matches!(&r, Err(UserFileError::Refused { why, .. }) if why.contains("changed")),
            "{:?}",
            r.err()
        );
        assert_eq!(
            std::fs::read_to_string(&f).ok().as_deref(),
            Some("{\"a\": 1}")
        );
        assert_eq!(names(tmp.path()), ["settings.json"]);
    }
}
