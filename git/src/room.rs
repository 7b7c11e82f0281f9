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
//! A fresh room is removed when dropped. A warm room (one per workspace, [`Room::warm`])
//! stays between checks and is brought back to exactly the files given each time:
//! every file checked, only what differs written, everything else removed.

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

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
    /// A warm room's lock, held while the room is in use; `None` for a fresh room,
    /// which is removed when dropped.
    lock: Option<std::fs::File>,
    /// The Git blob id of each file placed (workspace-relative path), computed as it
    /// was checked or written.
    ids: HashMap<String, gix::ObjectId>,
    /// The workspace's place in the room, held open: every later step (the check, the
    /// setup, Git, the checks after the run) goes through it, never through the path,
    /// which a process of the user's could swap for a link meanwhile.
    work_fd: Option<OwnedFd>,
}

/// Flags of a directory opened to work in: never through a link.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn cname(name: &str) -> std::io::Result<CString> {
    CString::new(name).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

/// Opens the directory `name` in `at`, never through a link, and makes it the owner's
/// to change (a check may leave a directory read-only or unreadable).
fn open_dir_at(at: BorrowedFd<'_>, name: &CStr) -> std::io::Result<OwnedFd> {
    let fd = match rustix::fs::openat(at, name, dir_flags(), Mode::empty()) {
        Err(rustix::io::Errno::ACCESS) => {
            // Unreadable: opened as a path (no link followed), its mode changed through
            // that descriptor's /proc name (which names the directory itself).
            let p = rustix::fs::openat(
                at,
                name,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            std::fs::set_permissions(
                format!("/proc/self/fd/{}", p.as_raw_fd()),
                std::fs::Permissions::from_mode(0o700),
            )?;
            rustix::fs::openat(at, name, dir_flags(), Mode::empty())?
        }
        r => r?,
    };
    let st = rustix::fs::fstat(&fd)?;
    if st.st_mode & 0o700 != 0o700 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o755))?;
    }
    Ok(fd)
}

/// The directory `name` in `at`, made if missing; anything else in its place removed.
fn make_dir_at(at: BorrowedFd<'_>, name: &CStr) -> std::io::Result<OwnedFd> {
    match rustix::fs::mkdirat(at, name, Mode::from_raw_mode(0o755)) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(e) => return Err(e.into()),
    }
    match open_dir_at(at, name) {
        Err(e) if not_a_dir(&e) => {
            remove_at(at, name)?;
            rustix::fs::mkdirat(at, name, Mode::from_raw_mode(0o755))?;
            open_dir_at(at, name)
        }
        r => r,
    }
}

/// Whether opening a directory failed because something else (a file, a link) is there.
fn not_a_dir(e: &std::io::Error) -> bool {
    [rustix::io::Errno::NOTDIR, rustix::io::Errno::LOOP]
        .iter()
        .any(|n| e.raw_os_error() == Some(n.raw_os_error()))
}

/// The entries of the directory `fd` (without `.` and `..`).
fn entries(fd: BorrowedFd<'_>) -> std::io::Result<Vec<CString>> {
    let mut names = Vec::new();
    for e in rustix::fs::Dir::read_from(fd)? {
        let e = e?;
        let n = e.file_name();
        if n.to_bytes() != b"." && n.to_bytes() != b".." {
            names.push(n.to_owned());
        }
    }
    Ok(names)
}

/// How deep [`remove_at`] descends before it gives up (the tree is then moved aside
/// whole, [`Trash`]): a tree planted thousands of levels deep must not exhaust the
/// stack or the descriptors of the check that meets it.
const REMOVE_DEPTH: usize = 128;

/// How many times (5 ms apart) a warm room's lock is tried before a fresh room is
/// made instead.
const WARM_LOCK_TRIES: u32 = 20;

/// Removes `name` from `at`, a directory with everything in it, never following a
/// link (a link is removed, not what it names). Missing is fine.
fn remove_at(at: BorrowedFd<'_>, name: &CStr) -> std::io::Result<()> {
    remove_depth(at, name, 0)
}

fn remove_depth(at: BorrowedFd<'_>, name: &CStr, depth: usize) -> std::io::Result<()> {
    let st = match rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        r => r?,
    };
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        if depth >= REMOVE_DEPTH {
            return Err(std::io::Error::other("a tree too deep to remove"));
        }
        match open_dir_at(at, name) {
            Ok(fd) => {
                for n in entries(fd.as_fd())? {
                    remove_depth(fd.as_fd(), &n, depth + 1)?;
                }
                drop(fd);
                return match rustix::fs::unlinkat(at, name, AtFlags::REMOVEDIR) {
                    Err(rustix::io::Errno::NOENT) => Ok(()),
                    r => r.map_err(Into::into),
                };
            }
            // Replaced by something else meanwhile: removed below as a file.
            Err(e) if not_a_dir(&e) => {}
            Err(e) => return Err(e),
        }
    }
    match rustix::fs::unlinkat(at, name, AtFlags::empty()) {
        Err(rustix::io::Errno::NOENT) => Ok(()),
        r => r.map_err(Into::into),
    }
}

/// Where what cannot be removed goes: `<rooms>/trash/`, outside every room, emptied
/// as far as it can be by [`sweep`].
/// (The rooms' directory, where `trash/` is made when first needed.)
struct Trash(Option<OwnedFd>);

impl Trash {
    fn open(parent: &Path) -> Trash {
        Trash(rustix::fs::open(parent, dir_flags(), Mode::empty()).ok())
    }

    /// Removes `name` from `at`, or, when that fails, moves it into the trash whole.
    fn remove(&self, at: BorrowedFd<'_>, name: &CStr) -> std::io::Result<()> {
        match remove_at(at, name) {
            Ok(()) => Ok(()),
            Err(e) => {
                let Some(trash) = self
                    .0
                    .as_ref()
                    .and_then(|top| make_dir_at(top.as_fd(), c"trash").ok())
                else {
                    return Err(e);
                };
                static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let to = format!(
                    "{}-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos())
                );
                rustix::fs::renameat(at, name, &trash, to.as_str()).map_err(|_| e)
            }
        }
    }
}

/// Opens `rel` (a relative path) under the directory `root`, refusing every link on
/// the way (`RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`): nothing outside `root` is ever
/// reached, whatever was swapped in meanwhile. `""` is `root` itself.
fn open_beneath(
    root: BorrowedFd<'_>,
    rel: &str,
    flags: OFlags,
    mode: Mode,
) -> std::io::Result<OwnedFd> {
    let rel = if rel.is_empty() { "." } else { rel };
    rustix::fs::openat2(
        root,
        rel,
        flags | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        mode,
        rustix::fs::ResolveFlags::NO_SYMLINKS
            | rustix::fs::ResolveFlags::NO_MAGICLINKS
            | rustix::fs::ResolveFlags::BENEATH,
    )
    .map_err(Into::into)
}

/// The `/proc` name of `fd` — the directory itself, wherever its path now leads: what
/// a child process is given as its working directory, and Git as its work tree.
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The mode a room file has.
fn file_mode(executable: bool) -> u32 {
    if executable { 0o755 } else { 0o644 }
}

/// Hashes what `read` yields with BLAKE3 and as a Git blob of `size` bytes (`None`
/// when it yields another number of bytes), writing each chunk to `out` too.
fn hash_stream(
    read: &mut dyn Read,
    size: u64,
    mut out: Option<&mut dyn Write>,
) -> std::io::Result<(String, Option<gix::ObjectId>)> {
    let mut b3 = blake3::Hasher::new();
    let mut sha = gix::hash::hasher(gix::hash::Kind::Sha1);
    sha.update(&gix::objs::encode::loose_header(
        gix::objs::Kind::Blob,
        size,
    ));
    let mut buf = vec![0u8; 1 << 16];
    let mut n_total = 0u64;
    loop {
        let n = read.read(&mut buf)?;
        let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
            break;
        };
        n_total += n as u64;
        b3.update(chunk);
        sha.update(chunk);
        if let Some(o) = out.as_mut() {
            o.write_all(chunk)?;
        }
    }
    let id = (n_total == size).then(|| sha.try_finalize().ok()).flatten();
    Ok((b3.finalize().to_hex().to_string(), id))
}

/// One file the room must hold, at its path in the room's repository directory.
struct Wanted<'a> {
    file: &'a RoomFile,
    blake3: String,
    /// Its Git blob id, once it is in place.
    id: Option<gix::ObjectId>,
}

/// `f` of each of `items`, on all cores; `None` for an item whose thread failed.
fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<Option<R>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len().div_ceil(64))
        .max(1);
    let per = items.len().div_ceil(threads).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = items
            .chunks(per)
            .map(|chunk| {
                (
                    chunk.len(),
                    s.spawn(move || chunk.iter().map(f).collect::<Vec<_>>()),
                )
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|(n, h)| match h.join() {
                Ok(v) => v.into_iter().map(Some).collect(),
                Err(_) => (0..n).map(|_| None).collect::<Vec<_>>(),
            })
            .collect()
    })
}

/// A wanted file found in the room, to be checked: at `rel` under the repository.
struct Job {
    i: usize,
    rel: String,
}

/// Brings a room's repository directory to hold exactly the wanted files (SPEC §12.2).
struct Filler<'a> {
    repo: PathBuf,
    wanted: Vec<Wanted<'a>>,
    by_path: HashMap<String, usize>,
    /// Directories that hold wanted files ("" is the repository directory).
    dirs: HashSet<String>,
    /// Trees left as they are (a setup's outputs, checked by their caller).
    keep: HashSet<String>,
    trash: Trash,
}

impl<'a> Filler<'a> {
    fn new(
        repo: &Path,
        prefix: &str,
        files: &'a [RoomFile],
        keep: &[String],
        trash: Trash,
    ) -> Result<Filler<'a>, RoomError> {
        let mut f = Filler {
            repo: repo.to_path_buf(),
            wanted: Vec::with_capacity(files.len()),
            by_path: HashMap::with_capacity(files.len()),
            dirs: HashSet::new(),
            keep: HashSet::new(),
            trash,
        };
        let prefix = prefix.trim_end_matches('/');
        let full = |p: &str| {
            if prefix.is_empty() {
                p.to_owned()
            } else {
                format!("{prefix}/{p}")
            }
        };
        let mut d = String::new();
        f.dirs.insert(String::new());
        for c in prefix.split('/').filter(|c| !c.is_empty()) {
            d = if d.is_empty() {
                c.into()
            } else {
                format!("{d}/{c}")
            };
            f.dirs.insert(d.clone());
        }
        for file in files {
            let ok = !file.path.is_empty()
                && !file.path.starts_with('/')
                && !file.path.contains('\0')
                && file
                    .path
                    .split('/')
                    .all(|c| !c.is_empty() && c != "." && c != ".." && c != ".git");
            if !ok {
                return Err(RoomError::BadPath(file.path.clone()));
            }
            let path = full(&file.path);
            let mut dir = path.as_str();
            while let Some((parent, _)) = dir.rsplit_once('/') {
                f.dirs.insert(parent.to_owned());
                dir = parent;
            }
            let blake3 = match &file.content {
                RoomContent::Copy { blake3, .. } => blake3.clone(),
                RoomContent::Bytes(b) => blake3::hash(b).to_hex().to_string(),
            };
            f.by_path.insert(path, f.wanted.len());
            f.wanted.push(Wanted {
                file,
                blake3,
                id: None,
            });
        }
        for k in keep {
            let k = full(k.trim_end_matches('/'));
            // A tree that holds (or is) a wanted file or directory is never kept as
            // it is: every wanted file is checked.
            let holds =
                f.by_path.keys().any(|p| within(p, &k)) || f.dirs.iter().any(|d| within(d, &k));
            if !holds && !k.is_empty() {
                f.keep.insert(k);
            }
        }
        Ok(f)
    }

    fn io(&self, rel: &str) -> impl FnOnce(std::io::Error) -> RoomError + '_ {
        let path = self.repo.join(rel);
        move |source| RoomError::Io { path, source }
    }

    /// Walks the room's repository directory `root`, keeping wanted files whose
    /// content is right and removing everything else. Files are checked on all cores,
    /// each opened from `root` with no link on its way.
    fn sync(&mut self, root: BorrowedFd<'_>) -> Result<(), RoomError> {
        let mut jobs = Vec::new();
        self.walk(root, "", &mut jobs)?;
        let found = par_map(&jobs, |j| self.verify(root, &j.rel, j.i));
        for (j, id) in jobs.iter().zip(found) {
            match (id.flatten(), self.wanted.get_mut(j.i)) {
                (Some(id), Some(w)) => w.id = Some(id),
                _ => {
                    let (parent, last) = j.rel.rsplit_once('/').unwrap_or(("", j.rel.as_str()));
                    let dir = open_beneath(
                        root,
                        parent,
                        OFlags::DIRECTORY | OFlags::RDONLY,
                        Mode::empty(),
                    )
                    .map_err(self.io(&j.rel))?;
                    let name = cname(last).map_err(self.io(&j.rel))?;
                    self.trash
                        .remove(dir.as_fd(), &name)
                        .map_err(self.io(&j.rel))?;
                }
            }
        }
        Ok(())
    }

    /// Walks the directory `fd` (at `rel`): removes what is neither wanted nor kept,
    /// and lists the wanted files found in `jobs` to be checked. It descends only
    /// into wanted directories, one descriptor a level.
    fn walk(&self, fd: BorrowedFd<'_>, rel: &str, jobs: &mut Vec<Job>) -> Result<(), RoomError> {
        for name in entries(fd).map_err(self.io(rel))? {
            let Ok(n) = name.to_str() else {
                self.trash.remove(fd, &name).map_err(self.io(rel))?;
                continue;
            };
            let full = if rel.is_empty() {
                n.to_owned()
            } else {
                format!("{rel}/{n}")
            };
            if self.keep.contains(&full) {
                continue;
            }
            if let Some(&i) = self.by_path.get(&full) {
                jobs.push(Job { i, rel: full });
                continue;
            }
            if self.dirs.contains(&full)
                && let Ok(sub) = open_dir_at(fd, &name)
            {
                self.walk(sub.as_fd(), &full, jobs)?;
                continue;
            }
            self.trash.remove(fd, &name).map_err(self.io(&full))?;
        }
        Ok(())
    }

    /// The blob id of wanted file `i` as `rel` under `root` holds it, when that is a
    /// regular file of its own (one link) with the wanted content; its mode is set.
    fn verify(&self, root: BorrowedFd<'_>, rel: &str, i: usize) -> Option<gix::ObjectId> {
        let w = self.wanted.get(i)?;
        let f = open_beneath(root, rel, OFlags::RDONLY | OFlags::NONBLOCK, Mode::empty()).ok()?;
        let st = rustix::fs::fstat(&f).ok()?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_nlink != 1 {
            return None;
        }
        let mut file = std::fs::File::from(f);
        let (b3, id) = hash_stream(&mut file, st.st_size as u64, None).ok()?;
        if b3 != w.blake3 {
            return None;
        }
        let mode = file_mode(w.file.executable);
        if st.st_mode & 0o7777 != mode {
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).ok()?;
        }
        id
    }

    /// Places every wanted file not yet in the room: directories first (each made in
    /// its parent, opened from `root` with no link on the way), then the files, with
    /// one directory open at a time.
    fn place_missing(&mut self, root: BorrowedFd<'_>) -> Result<(), RoomError> {
        let mut all_dirs: Vec<&String> = self.dirs.iter().filter(|d| !d.is_empty()).collect();
        all_dirs.sort();
        for d in all_dirs {
            let (parent, last) = d.rsplit_once('/').unwrap_or(("", d.as_str()));
            let at = open_beneath(
                root,
                parent,
                OFlags::DIRECTORY | OFlags::RDONLY,
                Mode::empty(),
            )
            .map_err(self.io(d))?;
            make_dir_at(at.as_fd(), &cname(last).map_err(self.io(d))?).map_err(self.io(d))?;
        }
        let mut order: Vec<(String, usize)> = self
            .by_path
            .iter()
            .filter(|(_, i)| self.wanted.get(**i).is_some_and(|w| w.id.is_none()))
            .map(|(p, i)| (p.clone(), *i))
            .collect();
        order.sort();
        let mut open: Option<(String, OwnedFd)> = None;
        for (path, i) in order {
            let (parent, last) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            if open.as_ref().is_none_or(|(p, _)| p != parent) {
                let fd = open_beneath(
                    root,
                    parent,
                    OFlags::DIRECTORY | OFlags::RDONLY,
                    Mode::empty(),
                )
                .map_err(self.io(&path))?;
                open = Some((parent.to_owned(), fd));
            }
            let Some((_, at)) = &open else { continue };
            let id = self.place(at.as_fd(), &cname(last).map_err(self.io(&path))?, i, &path)?;
            if let Some(w) = self.wanted.get_mut(i) {
                w.id = Some(id);
            }
        }
        Ok(())
    }

    /// Writes wanted file `i` as `name` in `at` (never through a link).
    fn place(
        &self,
        at: BorrowedFd<'_>,
        name: &CStr,
        i: usize,
        path: &str,
    ) -> Result<gix::ObjectId, RoomError> {
        let Some(w) = self.wanted.get(i) else {
            return Err(RoomError::BadPath(path.to_owned()));
        };
        let mode = file_mode(w.file.executable);
        let create = || {
            rustix::fs::openat(
                at,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode),
            )
        };
        let fd = match create() {
            Err(rustix::io::Errno::EXIST) => {
                self.trash.remove(at, name).map_err(self.io(path))?;
                create()
            }
            r => r,
        }
        .map_err(|e| self.io(path)(e.into()))?;
        let mut out = std::fs::File::from(fd);
        let changed = || RoomError::Changed(w.file.path.clone());
        let id = match &w.file.content {
            RoomContent::Bytes(b) => {
                let (_, id) = hash_stream(&mut b.as_slice(), b.len() as u64, Some(&mut out))
                    .map_err(self.io(path))?;
                id
            }
            RoomContent::Copy { from, blake3 } => {
                let mut src = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32)
                    .open(from)
                    .map_err(|_| changed())?;
                let m = src.metadata().map_err(io(from))?;
                if !m.is_file() {
                    let _ = rustix::fs::unlinkat(at, name, AtFlags::empty());
                    return Err(changed());
                }
                let (b3, id) =
                    hash_stream(&mut src, m.len(), Some(&mut out)).map_err(self.io(path))?;
                if b3 != *blake3 {
                    let _ = rustix::fs::unlinkat(at, name, AtFlags::empty());
                    return Err(changed());
                }
                id
            }
        };
        // The mode asked for, whatever the umask made of it.
        rustix::fs::fchmod(&out, Mode::from_raw_mode(mode)).map_err(|e| self.io(path)(e.into()))?;
        id.ok_or_else(changed)
    }
}

/// Whether `path` is `root` or lies under it (both relative, `/`-separated).
fn within(path: &str, root: &str) -> bool {
    path.strip_prefix(root)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

impl Room {
    /// The directory a check runs in: the workspace's place in the room.
    pub fn work(&self) -> &Path {
        &self.work
    }

    /// What a process is given as its working directory in the room (the setup, the
    /// check): the workspace's place as the room holds it open (`/proc/self/fd/N`),
    /// so a link swapped in for the room's path leads nowhere.
    pub fn cwd(&self) -> PathBuf {
        self.work_fd
            .as_ref()
            .map_or_else(|| self.work.clone(), fd_path)
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

    /// The Git blob id of the file at `path` (workspace-relative) as it was placed:
    /// valid while [`Room::changed`] finds nothing.
    pub fn blob_id(&self, path: &str) -> Option<gix::ObjectId> {
        self.ids.get(path).copied()
    }

    /// Whether this is a warm room (kept for the next check) rather than a fresh one.
    pub fn is_warm(&self) -> bool {
        self.lock.is_some()
    }

    fn new(dir: PathBuf, git: Option<&RoomGit>, lock: Option<std::fs::File>) -> Room {
        let prefix = git.map_or("", |g| g.prefix.as_str());
        let repo = dir.join("repo");
        let work = if prefix.is_empty() {
            repo
        } else {
            repo.join(prefix.trim_end_matches('/'))
        };
        Room {
            dir,
            work,
            commit: None,
            lock,
            ids: HashMap::new(),
            work_fd: None,
        }
    }

    /// Makes a fresh room under `parent` (created if needed) holding exactly `files`.
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
        // Owned from here: dropped (and removed) on any error below.
        let mut room = Room::new(dir, git, None);
        room.fill(files, git, &[])?;
        Ok(room)
    }

    /// The warm room `key` (hex) under `parent`, brought to hold exactly `files`: the
    /// same directory from one check to the next, every file in it checked against
    /// `files` (BLAKE3, one link, its mode) and rewritten when it differs, everything
    /// else in it removed but the trees `keep` (workspace-relative; a setup's outputs,
    /// which the caller checks against their digest). `HOME` and the temporary
    /// directory are emptied and the repository made anew. Only what differs is
    /// written, so a check on a large tree does not pay for writing it each time.
    /// When another process holds the warm room, or it cannot be brought back, a
    /// fresh room is made instead.
    pub fn warm(
        parent: &Path,
        key: &str,
        files: &[RoomFile],
        git: Option<&RoomGit>,
        keep: &[String],
    ) -> Result<Room, RoomError> {
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(RoomError::BadPath(key.to_owned()));
        }
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        sweep(parent);
        let lock_path = parent.join(format!("warm-{key}.lock"));
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags((OFlags::NOFOLLOW | OFlags::CLOEXEC).bits() as i32)
            .open(&lock_path);
        // Held by another process, or not a file one can lock (a directory, a link
        // planted there): a fresh room instead.
        let Ok(lock) = lock else {
            return Room::build(parent, files, git);
        };
        // Held by another check, or for an instant by a child process forked (by any
        // thread of this process) between its fork and its exec, which shares the
        // lock until its descriptors close: a short wait tells the two apart.
        let mut tries = 0;
        while lock.try_lock().is_err() {
            tries += 1;
            if tries > WARM_LOCK_TRIES {
                return Room::build(parent, files, git);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Nothing of anyone else's in it for a check to read.
        let _ = lock.set_len(0);
        let mut room = Room::new(parent.join(format!("warm-{key}")), git, Some(lock));
        match room.fill(files, git, keep) {
            Ok(()) => Ok(room),
            // A warm room that cannot be brought back (something in it the walk cannot
            // remove, descriptors exhausted by a deep tree): a fresh room instead.
            Err(RoomError::Io { .. }) => {
                drop(room);
                Room::build(parent, files, git)
            }
            Err(e) => Err(e),
        }
    }

    /// Brings the room to hold `files` instead (the run without the change, in the
    /// room the check just ran in): only what differs is written.
    pub fn refill(
        &mut self,
        files: &[RoomFile],
        git: Option<&RoomGit>,
        keep: &[String],
    ) -> Result<(), RoomError> {
        self.commit = None;
        self.fill(files, git, keep)
    }

    fn fill(
        &mut self,
        files: &[RoomFile],
        git: Option<&RoomGit>,
        keep: &[String],
    ) -> Result<(), RoomError> {
        let parent = self.dir.parent().unwrap_or(Path::new("/"));
        let name = self
            .dir
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        let top = rustix::fs::open(parent, dir_flags(), Mode::empty())
            .map_err(|e| io(parent)(e.into()))?;
        let name = CString::new(name.into_encoded_bytes())
            .map_err(|_| RoomError::BadPath(self.dir.display().to_string()))?;
        let room = make_dir_at(top.as_fd(), &name).map_err(io(&self.dir))?;
        // The owner's alone, as a fresh room is.
        rustix::fs::fchmod(&room, Mode::from_raw_mode(0o700))
            .map_err(|e| io(&self.dir)(e.into()))?;
        let trash = Trash::open(parent);
        // Nothing but `home/`, `tmp/` and `repo/`; the first two emptied.
        for n in entries(room.as_fd()).map_err(io(&self.dir))? {
            if !matches!(n.to_bytes(), b"repo") {
                trash.remove(room.as_fd(), &n).map_err(io(&self.dir))?;
            }
        }
        for d in [c"home", c"tmp"] {
            make_dir_at(room.as_fd(), d).map_err(io(&self.dir))?;
        }
        let repo_path = self.dir.join("repo");
        let repo = make_dir_at(room.as_fd(), c"repo").map_err(io(&repo_path))?;
        let prefix = git.map_or("", |g| g.prefix.as_str());
        let mut filler = Filler::new(&repo_path, prefix, files, keep, trash)?;
        // The repository is made anew: `.git` is not a wanted path, so it goes.
        filler.sync(repo.as_fd())?;
        filler.place_missing(repo.as_fd())?;
        self.work_fd = Some(
            open_beneath(
                repo.as_fd(),
                prefix.trim_end_matches('/'),
                OFlags::DIRECTORY | OFlags::RDONLY,
                Mode::empty(),
            )
            .map_err(io(&self.work))?,
        );
        self.ids = filler
            .wanted
            .iter()
            .filter_map(|w| Some((w.file.path.clone(), w.id?)))
            .collect();
        if let Some(g) = git {
            let mut blobs: Vec<(String, bool, gix::ObjectId)> = Vec::new();
            for (path, i) in &filler.by_path {
                let w = filler.wanted.get(*i);
                let Some((x, id)) = w.and_then(|w| Some((w.file.executable, w.id?))) else {
                    return Err(RoomError::Changed(path.clone()));
                };
                blobs.push((path.clone(), x, id));
            }
            blobs.sort();
            self.commit = Some(self.make_repository(&repo, g, &blobs)?);
        }
        Ok(())
    }

    /// Removes the trees `paths` (workspace-relative) from the room, never following a
    /// link: a setup's outputs before it runs, or before its cached ones are put back.
    pub fn remove(&self, paths: &[String]) -> Result<(), RoomError> {
        let Some(work) = &self.work_fd else {
            return Ok(());
        };
        let trash = Trash::open(self.dir.parent().unwrap_or(Path::new("/")));
        for p in paths {
            let p = p.trim_end_matches('/');
            if p.is_empty() || p.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
                return Err(RoomError::BadPath(p.to_owned()));
            }
            let (parent, last) = p.rsplit_once('/').unwrap_or(("", p));
            let at = match open_beneath(
                work.as_fd(),
                parent,
                OFlags::DIRECTORY | OFlags::RDONLY,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io(&self.work.join(p))(e)),
            };
            let c = cname(last).map_err(io(&self.work.join(p)))?;
            trash
                .remove(at.as_fd(), &c)
                .map_err(io(&self.work.join(p)))?;
        }
        Ok(())
    }

    /// The first of `files` whose content in the room is not what was placed there (a
    /// process that wrote into the room while a check ran), if any.
    pub fn changed(&self, files: &[RoomFile]) -> Option<String> {
        let same = par_map(files, |f| {
            let want = match &f.content {
                RoomContent::Copy { blake3, .. } => blake3.clone(),
                RoomContent::Bytes(b) => blake3::hash(b).to_hex().to_string(),
            };
            let Some(work) = &self.work_fd else {
                return false;
            };
            open_beneath(
                work.as_fd(),
                &f.path,
                OFlags::RDONLY | OFlags::NONBLOCK,
                Mode::empty(),
            )
            .and_then(|fd| {
                let st = rustix::fs::fstat(&fd)?;
                if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile || st.st_nlink != 1
                {
                    return Ok(String::new());
                }
                let mut h = blake3::Hasher::new();
                std::io::copy(&mut std::fs::File::from(fd), &mut h)?;
                Ok(h.finalize().to_hex().to_string())
            })
            .is_ok_and(|got| got == want)
        });
        files
            .iter()
            .zip(same)
            .find(|(_, ok)| *ok != Some(true))
            .map(|(f, _)| f.path.clone())
    }

    /// Makes `repo` a repository borrowing the project's objects whose `HEAD` is a
    /// commit of `blobs` (path, executable, blob id — computed as the files were
    /// checked or written) on top of the project's `HEAD`, and returns the commit.
    /// Git hashes nothing again: the index is given, and only blobs the project's
    /// objects lack are written.
    fn make_repository(
        &self,
        repo_fd: &OwnedFd,
        g: &RoomGit,
        blobs: &[(String, bool, gix::ObjectId)],
    ) -> Result<String, RoomError> {
        let repo = fd_path(repo_fd);
        let git = |args: &[&str], input: Option<Vec<u8>>| -> Result<String, RoomError> {
            let mut child = Command::new(&g.program)
                .current_dir(&repo)
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
                    // No automatic gc or maintenance: it would pack the room's new loose
                    // objects for nothing.
                    "-c",
                    "gc.auto=0",
                    "-c",
                    "maintenance.auto=false",
                ])
                .args(args)
                .stdin(if input.is_some() {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| RoomError::Git(format!("running {}: {e}", g.program.display())))?;
            // Written from a thread: the output may fill its pipe before the input ends.
            let writer = match (input, child.stdin.take()) {
                (Some(bytes), Some(mut stdin)) => {
                    Some(std::thread::spawn(move || stdin.write_all(&bytes)))
                }
                _ => None,
            };
            let out = child
                .wait_with_output()
                .map_err(|e| RoomError::Git(format!("running {}: {e}", g.program.display())))?;
            if let Some(w) = writer {
                let _ = w.join();
            }
            if !out.status.success() {
                return Err(RoomError::Git(format!(
                    "git {} failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                )));
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        };
        git(&["init", "-q", "--template="], None)?;
        let info = self.dir.join("repo/.git/objects/info");
        let at = open_beneath(
            repo_fd.as_fd(),
            ".git/objects/info",
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .map_err(io(&info))?;
        let alternates = rustix::fs::openat(
            at,
            c"alternates",
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o644),
        )
        .map_err(|e| io(&info)(e.into()))?;
        std::fs::File::from(alternates)
            .write_all(format!("{}\n", g.objects.display()).as_bytes())
            .map_err(io(&info))?;
        let mut index = Vec::new();
        for (path, x, id) in blobs {
            index.extend_from_slice(
                format!("{} {id}\t{path}\0", if *x { "100755" } else { "100644" }).as_bytes(),
            );
        }
        git(&["update-index", "-z", "--index-info"], Some(index))?;
        // The blobs the project's objects lack (files changed since its HEAD), written
        // from the room's files as they are (no filter: the id computed is the id).
        // What the project's HEAD holds is there; only the others are looked up.
        let listed = git(&["ls-tree", "-r", "-z", "--full-tree", &g.head], None)?;
        let in_head: HashSet<&str> = listed
            .split('\0')
            .filter_map(|l| l.split_once('\t')?.0.split(' ').nth(2))
            .collect();
        let ask: Vec<&(String, bool, gix::ObjectId)> = blobs
            .iter()
            .filter(|(_, _, id)| !in_head.contains(id.to_hex().to_string().as_str()))
            .collect();
        let mut missing: Vec<&str> = Vec::new();
        if !ask.is_empty() {
            let ids: Vec<u8> = ask
                .iter()
                .flat_map(|(_, _, id)| format!("{id}\n").into_bytes())
                .collect();
            let out = git(&["cat-file", "--batch-check"], Some(ids))?;
            let absent: HashSet<&str> = out
                .lines()
                .filter_map(|l| l.strip_suffix(" missing"))
                .collect();
            missing = ask
                .iter()
                .filter(|(_, _, id)| absent.contains(id.to_hex().to_string().as_str()))
                .map(|(p, _, _)| p.as_str())
                .collect();
        }
        for chunk in missing.chunks(256) {
            let mut args = vec!["hash-object", "-w", "--no-filters", "--"];
            args.extend(chunk.iter().copied());
            let written = git(&args, None)?;
            let want: Vec<String> = chunk
                .iter()
                .filter_map(|p| blobs.iter().find(|(q, _, _)| q == p))
                .map(|(_, _, id)| id.to_hex().to_string())
                .collect();
            if written.lines().map(str::trim).collect::<Vec<_>>() != want {
                return Err(RoomError::Changed(
                    chunk.first().map(|p| p.to_string()).unwrap_or_default(),
                ));
            }
        }
        // Every blob is known to be there (in HEAD, found, or just written): Git need
        // not look each one up again through the alternates.
        let tree = git(&["write-tree", "--missing-ok"], None)?;
        let commit = git(
            &[
                "commit-tree",
                &tree,
                "-p",
                &g.head,
                "-m",
                "tacho clean room",
            ],
            None,
        )?;
        git(&["update-ref", "HEAD", &commit], None)?;
        Ok(commit)
    }
}

/// Removes the rooms under `parent` whose process is gone (`room-PID-*`): a check
/// killed before it cleaned up, or one whose leftover processes kept writing.
pub fn sweep(parent: &Path) {
    // What was moved aside goes as far as it can.
    if let Ok(top) = rustix::fs::open(parent, dir_flags(), Mode::empty())
        && let Ok(trash) = open_dir_at(top.as_fd(), c"trash")
        && let Ok(names) = entries(trash.as_fd())
    {
        for n in names {
            let _ = remove_at(trash.as_fd(), &n);
        }
    }
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
                lock: None,
                ids: HashMap::new(),
                work_fd: None,
            });
        }
    }
}

/// Removes `dir` and everything in it, never following a link.
fn remove_tree(dir: &Path) {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return;
    };
    let Ok(top) = rustix::fs::open(parent, dir_flags(), Mode::empty()) else {
        return;
    };
    if let Ok(name) = CString::new(name.as_encoded_bytes()) {
        let _ = remove_at(top.as_fd(), &name);
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        // A warm room stays for the next check (its lock is released); a fresh one goes.
        if self.lock.is_none() {
            remove_tree(&self.dir);
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

    fn listing(root: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            for e in std::fs::read_dir(root.join(&rel)).unwrap() {
                let e = e.unwrap();
                let p = rel.join(e.file_name());
                if e.file_type().unwrap().is_dir() {
                    stack.push(p.clone());
                    out.push(format!("{}/", p.display()));
                } else {
                    out.push(p.display().to_string());
                }
            }
        }
        out.sort();
        out
    }

    fn copy(path: &str, from: &Path, bytes: &[u8]) -> RoomFile {
        std::fs::write(from, bytes).unwrap();
        RoomFile {
            path: path.into(),
            executable: false,
            content: RoomContent::Copy {
                from: from.to_path_buf(),
                blake3: blake3::hash(bytes).to_hex().to_string(),
            },
        }
    }

    /// What an agent can leave in the warm room between two checks (it runs as the
    /// same user): nothing of it survives, nothing outside the room is written, and
    /// only the trees kept by the caller stay.
    #[test]
    fn a_warm_room_is_brought_back_to_exactly_its_files() {
        use std::os::unix::ffi::OsStrExt;
        let parent = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let files = vec![
            copy("a.txt", &ws.path().join("a"), b"alpha"),
            file("src/b.py", b"def add(a, b):\n    return a + b\n"),
            file("src/deep/c.txt", b"gamma"),
        ];
        let keep = ["out".to_string()];
        let room = Room::warm(parent.path(), "abc123", &files, None, &keep).unwrap();
        assert!(room.is_warm());
        let work = room.work().to_path_buf();
        assert_eq!(
            listing(&work),
            ["a.txt", "src/", "src/b.py", "src/deep/", "src/deep/c.txt"]
        );
        std::fs::create_dir(work.join("out")).unwrap();
        std::fs::write(work.join("out/dep.js"), b"kept").unwrap();
        drop(room);
        // Kept between checks.
        assert!(work.join("src/b.py").is_file());

        // The agent's turn.
        std::fs::write(work.join("src/b.py"), b"def add(a, b):\n    return a - b\n").unwrap();
        std::fs::write(work.join("conftest.py"), b"# turns failures into passes").unwrap();
        std::fs::create_dir_all(work.join("src/__pycache__")).unwrap();
        std::fs::write(work.join("src/__pycache__/b.cpython-311.pyc"), b"stale").unwrap();
        std::fs::create_dir_all(work.join(".git/hooks")).unwrap();
        std::fs::write(work.join(".git/config"), b"[core]\nfsmonitor = /bin/true\n").unwrap();
        // A hard link to a file outside, with the right content: writing to it would
        // write outside.
        std::fs::write(outside.path().join("victim"), b"alpha").unwrap();
        std::fs::remove_file(work.join("a.txt")).unwrap();
        std::fs::hard_link(outside.path().join("victim"), work.join("a.txt")).unwrap();
        // A directory swapped for a link to a lookalike outside.
        std::fs::create_dir_all(outside.path().join("deep")).unwrap();
        std::fs::write(outside.path().join("deep/c.txt"), b"gamma").unwrap();
        std::fs::remove_dir_all(work.join("src/deep")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("deep"), work.join("src/deep")).unwrap();
        // An unreadable directory, a read-only one, a name that is not UTF-8.
        std::fs::create_dir_all(work.join("build/x")).unwrap();
        std::fs::write(work.join("build/x/o"), b"o").unwrap();
        std::fs::set_permissions(work.join("build/x"), std::fs::Permissions::from_mode(0o000))
            .unwrap();
        std::fs::set_permissions(work.join("src"), std::fs::Permissions::from_mode(0o555)).unwrap();
        std::fs::write(work.join(std::ffi::OsStr::from_bytes(b"caf\xe9.py")), b"x").unwrap();
        std::fs::write(room_home(parent.path()).join(".pydistutils.cfg"), b"x").unwrap();

        let room = Room::warm(parent.path(), "abc123", &files, None, &keep).unwrap();
        assert_eq!(room.work(), work);
        assert_eq!(
            listing(&work),
            [
                "a.txt",
                "out/",
                "out/dep.js",
                "src/",
                "src/b.py",
                "src/deep/",
                "src/deep/c.txt"
            ]
        );
        assert_eq!(
            std::fs::read(work.join("src/b.py")).unwrap(),
            b"def add(a, b):\n    return a + b\n"
        );
        assert_eq!(room.changed(&files), None);
        assert!(
            !std::fs::symlink_metadata(work.join("src/deep"))
                .unwrap()
                .is_symlink()
        );
        std::fs::write(work.join("a.txt"), b"written by a check").unwrap();
        std::fs::write(work.join("src/deep/c.txt"), b"written by a check").unwrap();
        assert_eq!(
            std::fs::read(outside.path().join("victim")).unwrap(),
            b"alpha"
        );
        assert_eq!(
            std::fs::read(outside.path().join("deep/c.txt")).unwrap(),
            b"gamma"
        );
        assert_eq!(listing(&room.home()), Vec::<String>::new());

        // The run without the change, in the same room: only what differs is written.
        let mut room = room;
        let red = vec![
            files[0].clone(),
            file("src/b.py", b"def add(a, b):\n    return a - b\n"),
        ];
        room.refill(&red, None, &[]).unwrap();
        assert_eq!(listing(&work), ["a.txt", "src/", "src/b.py"]);
        assert_eq!(std::fs::read(work.join("a.txt")).unwrap(), b"alpha");
    }

    fn room_home(parent: &Path) -> PathBuf {
        parent.join("warm-abc123").join("home")
    }

    /// A warm room another process holds (a check running, or an agent holding its
    /// lock) is not waited for: the check gets a fresh room, removed after.
    #[test]
    fn a_held_warm_room_gives_a_fresh_one() {
        let parent = tempfile::tempdir().unwrap();
        let files = vec![file("a.txt", b"alpha")];
        let held = Room::warm(parent.path(), "beef", &files, None, &[]).unwrap();
        let other = Room::warm(parent.path(), "beef", &files, None, &[]).unwrap();
        assert!(held.is_warm() && !other.is_warm());
        assert_ne!(held.work(), other.work());
        assert_eq!(std::fs::read(other.work().join("a.txt")).unwrap(), b"alpha");
        let dir = other.dir.clone();
        drop(other);
        assert!(!dir.exists());
        drop(held);
        assert!(
            Room::warm(parent.path(), "beef", &files, None, &[])
                .unwrap()
                .is_warm()
        );
        assert!(matches!(
            Room::warm(parent.path(), "../x", &files, None, &[]).unwrap_err(),
            RoomError::BadPath(_)
        ));
    }

    /// Inside a Git repository the room's `HEAD` is a commit of exactly its files on
    /// top of the project's `HEAD`: Git reads the room as clean, and the change shows
    /// against the project's history.
    #[test]
    fn a_room_in_a_repository_commits_its_files_on_the_projects_head() {
        let Ok(program) = crate::remote::git_program() else {
            eprintln!("skipped: no git");
            return;
        };
        let project = tempfile::tempdir().unwrap();
        let sh = |dir: &Path, args: &[&str]| {
            let out = Command::new(program)
                .current_dir(dir)
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        std::fs::create_dir_all(project.path().join("sub/src")).unwrap();
        std::fs::write(project.path().join("sub/src/a.py"), b"old\n").unwrap();
        std::fs::write(project.path().join("top.txt"), b"top\n").unwrap();
        sh(project.path(), &["init", "-q"]);
        sh(project.path(), &["add", "-A"]);
        sh(project.path(), &["commit", "-qm", "base"]);
        let head = sh(project.path(), &["rev-parse", "HEAD"])
            .trim()
            .to_string();
        let g = RoomGit {
            objects: project.path().join(".git/objects"),
            head: head.clone(),
            prefix: "sub/".into(),
            program: program.into(),
        };
        let files = vec![
            file("src/a.py", b"new\n"),
            RoomFile {
                path: "run.sh".into(),
                executable: true,
                content: RoomContent::Bytes(b"#!/bin/sh\n".to_vec()),
            },
        ];
        let parent = tempfile::tempdir().unwrap();
        for _ in 0..2 {
            let room = Room::warm(parent.path(), "cafe", &files, Some(&g), &[]).unwrap();
            let work = room.work().to_path_buf();
            assert!(work.ends_with("repo/sub"));
            assert_eq!(sh(&work, &["status", "--porcelain"]), "");
            assert_eq!(sh(&work, &["rev-parse", "HEAD^"]).trim(), head);
            assert_eq!(
                sh(&work, &["diff", "--name-status", "HEAD^", "HEAD"]),
                "A\tsub/run.sh\nM\tsub/src/a.py\nD\ttop.txt\n"
            );
            assert_eq!(sh(&work, &["show", "HEAD:sub/src/a.py"]), "new\n");
            assert_eq!(
                sh(&work, &["ls-files", "-s", "run.sh"]).split(' ').next(),
                Some("100755")
            );
            assert_eq!(room.commit().map(str::len), Some(40));
        }
        // Nothing was written into the project's repository.
        assert_eq!(sh(project.path(), &["status", "--porcelain"]), "");
        assert_eq!(sh(project.path(), &["rev-parse", "HEAD"]).trim(), head);
    }

    /// Found by a helper that attacked the warm room: a process of the user's swaps
    /// the room's `repo/` for a link to a lookalike with a planted `conftest.py` while
    /// the check runs. Everything after the room is made goes through the directory it
    /// holds open: the check runs in the real room, and what it wrote is checked there.
    #[test]
    fn a_room_swapped_for_a_link_is_not_followed() {
        let parent = tempfile::tempdir().unwrap();
        let decoy = tempfile::tempdir().unwrap();
        let files = vec![file("a.txt", b"alpha")];
        let room = Room::warm(parent.path(), "d00d", &files, None, &[]).unwrap();
        let repo = parent.path().join("warm-d00d/repo");
        std::fs::write(decoy.path().join("a.txt"), b"decoy").unwrap();
        std::fs::write(decoy.path().join("conftest.py"), b"planted").unwrap();
        std::fs::rename(&repo, parent.path().join("warm-d00d/away")).unwrap();
        std::os::unix::fs::symlink(decoy.path(), &repo).unwrap();
        let out = Command::new("/bin/sh")
            .args(["-c", "cat a.txt; ls"])
            .current_dir(room.cwd())
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "alphaa.txt\n");
        assert_eq!(room.changed(&files), None);
        std::fs::write(parent.path().join("warm-d00d/away/a.txt"), b"fix").unwrap();
        assert_eq!(room.changed(&files).as_deref(), Some("a.txt"));
        drop(room);
        // The next room replaces the link with a directory of its own; the lookalike is
        // untouched.
        let room = Room::warm(parent.path(), "d00d", &files, None, &[]).unwrap();
        assert!(!std::fs::symlink_metadata(&repo).unwrap().is_symlink());
        assert_eq!(std::fs::read(room.work().join("a.txt")).unwrap(), b"alpha");
        assert_eq!(std::fs::read(decoy.path().join("a.txt")).unwrap(), b"decoy");
        assert!(!parent.path().join("warm-d00d/away").exists());
    }

    /// A tree planted hundreds of levels deep in the warm room (or left there by a
    /// check) neither overflows the stack nor exhausts the descriptors: it is moved
    /// aside whole, and the room holds its files.
    #[test]
    fn a_tree_too_deep_to_remove_is_moved_aside() {
        let parent = tempfile::tempdir().unwrap();
        let files = vec![file("src/a.txt", b"alpha")];
        let room = Room::warm(parent.path(), "dee9", &files, None, &[]).unwrap();
        let mut at = rustix::fs::open(room.work(), dir_flags(), Mode::empty()).unwrap();
        for _ in 0..300 {
            rustix::fs::mkdirat(&at, c"d", Mode::from_raw_mode(0o755)).unwrap();
            at = rustix::fs::openat(&at, c"d", dir_flags(), Mode::empty()).unwrap();
        }
        drop(at);
        drop(room);
        let room = Room::warm(parent.path(), "dee9", &files, None, &[]).unwrap();
        assert_eq!(listing(room.work()), ["src/", "src/a.txt"]);
        assert!(parent.path().join("trash").is_dir());
    }
}
