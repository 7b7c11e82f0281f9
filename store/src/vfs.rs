//! The storage seam: every file operation the engine performs goes through [`Vfs`].
//!
//! [`RealFs`] is the filesystem. [`SimFs`] keeps files in memory and remembers what was
//! durable (synced) separately from what was written, so crash tests can freeze the
//! durable state at the N-th sync, build the image a crash would leave, and reopen it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rkyv::util::AlignedVec;

/// The bytes of a segment: a read-only memory map of a sealed segment, an aligned copy,
/// or a range of bytes held elsewhere (a packed segment in its pack's mapping).
///
/// Either way the base address is at least 8-byte aligned, so frame payloads (at
/// 8-byte aligned offsets) are aligned for rkyv.
#[derive(Debug)]
pub enum SegmentBytes {
    Mapped(memmap2::Mmap),
    Owned(AlignedVec<16>),
    /// `bytes[at..at + len]`, shared: its holder keeps the whole alive (a pack stays
    /// mapped while a reader holds one of its segments). `at` is a multiple of 8.
    Range {
        bytes: std::sync::Arc<SegmentBytes>,
        at: usize,
        len: usize,
    },
}

impl std::ops::Deref for SegmentBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            SegmentBytes::Mapped(m) => m,
            SegmentBytes::Owned(v) => v,
            // (Checked when made: see `SegmentBytes::range`.)
            SegmentBytes::Range { bytes, at, len } => {
                bytes.get(*at..at.saturating_add(*len)).unwrap_or(&[])
            }
        }
    }
}

/// What a file's metadata says of its identity and its last change, read without
/// reading the file: its length, and for the real filesystem its device, inode and
/// modification and status-change times (nanoseconds). A writer's checkpoint keeps the
/// stamp of its segment, so that the next writer can tell, by one `stat`, that nobody
/// wrote the file since (SPEC.md §4.3).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileStamp {
    pub len: u64,
    pub id: [u64; 4],
}

impl FileStamp {
    pub const ENCODED_LEN: usize = 40;

    pub fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut b = [0u8; Self::ENCODED_LEN];
        for (i, v) in std::iter::once(self.len).chain(self.id).enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    pub fn decode(b: &[u8]) -> Option<FileStamp> {
        let u = |i: usize| {
            Some(u64::from_le_bytes(
                b.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        Some(FileStamp {
            len: u(0)?,
            id: [u(1)?, u(2)?, u(3)?, u(4)?],
        })
    }
}

impl SegmentBytes {
    /// `bytes[at..at + len]` without a copy, or `None` when the range is not inside the
    /// bytes. A range that does not start at a multiple of 8 is copied (to keep
    /// payloads aligned).
    pub fn range(bytes: &std::sync::Arc<SegmentBytes>, at: u64, len: u64) -> Option<Self> {
        let at = usize::try_from(at).ok()?;
        let len = usize::try_from(len).ok()?;
        let slice = bytes.get(at..at.checked_add(len)?)?;
        if at.is_multiple_of(8) && (slice.as_ptr() as usize).is_multiple_of(8) {
            return Some(SegmentBytes::Range {
                bytes: bytes.clone(),
                at,
                len,
            });
        }
        let mut v = AlignedVec::<16>::with_capacity(slice.len());
        v.extend_from_slice(slice);
        Some(SegmentBytes::Owned(v))
    }
}

/// Why a lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("held by another process{}", holder.as_ref().map(|h| format!(" ({h})")).unwrap_or_default())]
    Busy { holder: Option<String> },
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// An exclusive lock, released when dropped.
pub trait LockGuard: Send + std::fmt::Debug {
    /// The note kept in the lock file after the holder's record (a writer keeps its
    /// checkpoint there: no file of its own to create per session). Not synced.
    fn read_note(&mut self) -> io::Result<Vec<u8>>;
    fn write_note(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Makes the note durable (fdatasync of the lock file): for a note that must not
    /// come back after a crash, such as a checkpoint cleared before its stream goes.
    fn sync_note(&mut self) -> io::Result<()>;
}

/// The holder's record at the start of a lock file: `pid N`, padded to this length.
const LOCK_RECORD_LEN: u64 = 32;

/// A file opened for writing.
pub trait VfsFile: Send + std::fmt::Debug {
    /// Current length in bytes.
    fn byte_len(&self) -> io::Result<u64>;
    /// Writes all of `buf` at `offset`, extending the file if needed.
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes everything written so far durable (fdatasync).
    fn sync_data(&mut self) -> io::Result<()>;
    /// Sets the file's length, cutting or extending with zeros.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

/// File operations the engine needs.
pub trait Vfs: Send + Sync + std::fmt::Debug {
    /// Creates a directory and its parents; `true` if the directory did not exist.
    fn create_dir_all(&self, path: &Path) -> io::Result<bool>;
    /// Names of the entries of a directory.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Reads a whole file. `immutable` promises that the file is never truncated or
    /// rewritten while it is read, which allows a memory map.
    fn read(&self, path: &Path, immutable: bool) -> io::Result<SegmentBytes>;
    /// Reads `len` bytes at `offset` of a file that is never rewritten (a pack): an
    /// aligned copy, fewer bytes at the end of the file.
    fn read_range(&self, path: &Path, offset: u64, len: u64) -> io::Result<SegmentBytes>;
    /// Maps a file that is never rewritten, without reading it ahead: for a lookup that
    /// touches a few pages of a large file (a pack's table of contents).
    fn map(&self, path: &Path) -> io::Result<SegmentBytes>;
    /// Renames `from` to `to` (replacing it); durable once the directory of `to` is
    /// synced.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Opens a file for appending; with `create_new`, the file must not exist yet.
    fn open_append(&self, path: &Path, create_new: bool) -> io::Result<Box<dyn VfsFile>>;
    /// Makes a directory's entries durable (fsync of the directory).
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty directory.
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on `path` (created if missing), waiting at most `timeout`.
    fn lock(&self, path: &Path, timeout: Duration) -> Result<Box<dyn LockGuard>, LockError>;
    /// The note in the lock file at `path` ([`LockGuard::read_note`]) read without the
    /// lock, as readers do: possibly torn by a holder writing it meanwhile.
    fn peek_lock_note(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Whether a path exists.
    fn exists(&self, path: &Path) -> bool;
    /// The file's [`FileStamp`] (a `stat`: nothing of the file is read).
    fn stamp(&self, path: &Path) -> io::Result<FileStamp>;
    /// Appends `bytes` to the end of the file at `path` (created if missing) in one
    /// write that writes of other processes never interleave with (`O_APPEND`).
    /// Returns the file's length after the write, and whether the file was created.
    fn append_shared(&self, path: &Path, bytes: &[u8]) -> io::Result<(u64, bool)>;
    /// Makes a whole file durable (fdatasync), by path.
    fn sync_file(&self, path: &Path) -> io::Result<()>;
    /// Replaces the content of `path` atomically and durably: readers see the old or
    /// the new content, and after a crash the new one is there if this returned.
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Replaces the content of `path` as [`Vfs::replace`] does, with `header_len`
    /// bytes and what `write` writes after them; `write` returns those first bytes
    /// (known once the rest is written). The real filesystem streams the content to
    /// the new file instead of holding it.
    fn replace_with(
        &self,
        path: &Path,
        header_len: usize,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<Vec<u8>>,
    ) -> io::Result<()> {
        let mut bytes = Vec::new();
        let header = write_headed(&mut bytes, header_len, write)?;
        bytes.splice(..header_len, header);
        self.replace(path, &bytes)
    }
    /// Makes everything written on the filesystem that holds `path` durable, data and
    /// directory entries (`syncfs`): one call for a group of streams, instead of a sync
    /// of each file and each new directory.
    fn sync_fs(&self, path: &Path) -> io::Result<()>;
    /// A shared or exclusive lock on `path` (created if missing), waiting at most
    /// `timeout`; released when the guard is dropped.
    fn lock_mode(
        &self,
        path: &Path,
        exclusive: bool,
        timeout: Duration,
    ) -> Result<Box<dyn Released>, LockError>;
}

/// A guard that releases its lock when dropped.
pub trait Released: Send + std::fmt::Debug {}

/// The real filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

#[derive(Debug)]
struct RealFile(File);

impl VfsFile for RealFile {
    fn byte_len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        // pwrite: one system call, no seek.
        std::os::unix::fs::FileExt::write_all_at(&self.0, buf, offset)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

#[derive(Debug)]
struct RealLock(File);
impl LockGuard for RealLock {
    fn read_note(&mut self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.0.seek(SeekFrom::Start(LOCK_RECORD_LEN))?;
        self.0.read_to_end(&mut out)?;
        Ok(out)
    }
    fn write_note(&mut self, bytes: &[u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, bytes, LOCK_RECORD_LEN)
    }
    fn sync_note(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
}

impl RealFs {
    /// Replaces `path` atomically and durably with what `fill` writes to a new file:
    /// written beside it, synced, renamed over it, and the directory synced; the new
    /// file is removed when anything fails.
    fn replace_by(
        &self,
        path: &Path,
        fill: impl FnOnce(&mut File) -> io::Result<()>,
    ) -> io::Result<()> {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let result = (|| {
            let mut f = File::create(&tmp)?;
            fill(&mut f)?;
            f.sync_data()?;
            std::fs::rename(&tmp, path)?;
            match path.parent() {
                Some(dir) => self.sync_dir(dir),
                None => Ok(()),
            }
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

impl Vfs for RealFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<bool> {
        if path.is_dir() {
            return Ok(false);
        }
        std::fs::create_dir_all(path)?;
        Ok(true)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        use rustix::fs::{Mode, OFlags};
        // The directory read as `std::fs::read_dir` reads it, without its `stat` of
        // the directory (`log verify` lists every stream directory).
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut dir = rustix::fs::Dir::new(fd)?;
        let mut names = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if let Ok(name) = std::str::from_utf8(name) {
                names.push(name.to_owned());
            }
        }
        Ok(names)
    }

    fn read(&self, path: &Path, immutable: bool) -> io::Result<SegmentBytes> {
        let mut f = File::open(path)?;
        let len = f.metadata()?.len();
        if immutable && len > 0 {
            // SAFETY: the map is read-only, and tacho never truncates or rewrites a
            // sealed segment (only whole files are deleted, which keeps mapped pages
            // valid). The last, still growing segment is never mapped: it is copied,
            // so a torn-tail repair by a writer cannot fault a reader (SPEC.md §Readers).
            // `populate` maps every page up front (MAP_POPULATE): segments are read
            // whole, and one call is much cheaper than a page fault per 4 KiB.
            #[allow(unsafe_code)]
            let map = unsafe { memmap2::MmapOptions::new().populate().map(&f)? };
            return Ok(SegmentBytes::Mapped(map));
        }
        // Read up to the length seen now, straight into the aligned buffer; bytes
        // appended meanwhile are left for later, and a file truncated meanwhile just
        // yields fewer bytes (a valid prefix to scan). The spare 64 bytes keep the
        // final zero-length read from growing the buffer.
        let mut v = AlignedVec::<16>::with_capacity(len as usize + 64);
        v.extend_from_reader(&mut (&mut f).take(len))?;
        Ok(SegmentBytes::Owned(v))
    }

    fn read_range(&self, path: &Path, offset: u64, len: u64) -> io::Result<SegmentBytes> {
        let mut f = File::open(path)?;
        f.seek(SeekFrom::Start(offset))?;
        let mut v = AlignedVec::<16>::with_capacity(len as usize + 64);
        v.extend_from_reader(&mut (&mut f).take(len))?;
        Ok(SegmentBytes::Owned(v))
    }

    fn map(&self, path: &Path) -> io::Result<SegmentBytes> {
        let f = File::open(path)?;
        if f.metadata()?.len() == 0 {
            return Ok(SegmentBytes::Owned(AlignedVec::new()));
        }
        // SAFETY: read-only, and packs are never truncated or rewritten (a pack is
        // replaced by renaming a new file over it, which keeps mapped pages valid).
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::Mmap::map(&f)? };
        Ok(SegmentBytes::Mapped(map))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn open_append(&self, path: &Path, create_new: bool) -> io::Result<Box<dyn VfsFile>> {
        let mut o = OpenOptions::new();
        o.read(true).write(true);
        if create_new {
            o.create_new(true);
        }
        Ok(Box::new(RealFile(o.open(path)?)))
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }

    fn lock(&self, path: &Path, timeout: Duration) -> Result<Box<dyn LockGuard>, LockError> {
        match acquire(path, true, timeout) {
            Ok(f) => {
                // Leave our pid for the error message of whoever waits next, as a
                // record of fixed width written in place: no length change, which
                // would cost a journal commit (about 0.7 ms here) on every lock.
                let record = format!(
                    "{:<w$}\n",
                    format!("pid {}", std::process::id()),
                    w = LOCK_RECORD_LEN as usize - 1
                );
                let _ = std::os::unix::fs::FileExt::write_all_at(&f, record.as_bytes(), 0);
                Ok(Box::new(RealLock(f)))
            }
            Err(Acquire::Busy(mut f)) => {
                let mut record = Vec::new();
                let _ = f.seek(SeekFrom::Start(0));
                let _ = (&f).take(LOCK_RECORD_LEN).read_to_end(&mut record);
                let holder = String::from_utf8_lossy(&record).trim().to_string();
                Err(LockError::Busy {
                    holder: (!holder.is_empty()).then_some(holder),
                })
            }
            Err(Acquire::Io(e)) => Err(LockError::Io(e)),
        }
    }

    fn peek_lock_note(&self, path: &Path) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        // Positioned reads into a buffer larger than a checkpoint: one read of a usual
        // note, no seek and no stat (`log verify` peeks at every session's lock file).
        // A read shorter than asked is the end of a regular file.
        let f = File::open(path)?;
        let mut out = vec![0u8; 512];
        let mut len = 0usize;
        loop {
            if len == out.len() {
                out.resize(len.saturating_mul(2), 0);
            }
            let Some(buf) = out.get_mut(len..) else {
                break;
            };
            let want = buf.len();
            let n = match f.read_at(buf, LOCK_RECORD_LEN + len as u64) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            len += n;
            if n < want {
                break;
            }
        }
        out.truncate(len);
        Ok(out)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn stamp(&self, path: &Path) -> io::Result<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path)?;
        let ns = |s: i64, n: i64| {
            (s as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(n as u64)
        };
        Ok(FileStamp {
            len: m.len(),
            id: [
                m.dev(),
                m.ino(),
                ns(m.mtime(), m.mtime_nsec()),
                ns(m.ctime(), m.ctime_nsec()),
            ],
        })
    }

    fn append_shared(&self, path: &Path, bytes: &[u8]) -> io::Result<(u64, bool)> {
        let open = |create: bool| {
            OpenOptions::new()
                .append(true)
                .create_new(create)
                .open(path)
        };
        let (mut f, created) = match open(false) {
            Ok(f) => (f, false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match open(true) {
                Ok(f) => (f, true),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (open(false)?, false),
                Err(e) => return Err(e),
            },
            Err(e) => return Err(e),
        };
        // One write call: with O_APPEND the kernel places it at the end atomically.
        let n = f.write(bytes)?;
        if n != bytes.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "short append to {} ({n} of {} bytes)",
                    path.display(),
                    bytes.len()
                ),
            ));
        }
        Ok((f.metadata()?.len(), created))
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        OpenOptions::new().write(true).open(path)?.sync_data()
    }

    fn sync_fs(&self, path: &Path) -> io::Result<()> {
        // Since Linux 5.8 syncfs also reports writeback errors of the filesystem.
        let dir = File::open(path)?;
        rustix::fs::syncfs(&dir).map_err(io::Error::from)
    }

    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.replace_by(path, |f| f.write_all(bytes))
    }

    fn replace_with(
        &self,
        path: &Path,
        header_len: usize,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<Vec<u8>>,
    ) -> io::Result<()> {
        self.replace_by(path, |f| {
            let header = write_headed(f, header_len, write)?;
            std::os::unix::fs::FileExt::write_all_at(f, &header, 0)
        })
    }

    fn lock_mode(
        &self,
        path: &Path,
        exclusive: bool,
        timeout: Duration,
    ) -> Result<Box<dyn Released>, LockError> {
        match acquire(path, exclusive, timeout) {
            Ok(f) => Ok(Box::new(RealShared(f))),
            Err(Acquire::Busy(_)) => Err(LockError::Busy { holder: None }),
            Err(Acquire::Io(e)) => Err(LockError::Io(e)),
        }
    }
}

/// What [`Vfs::replace_with`] writes to `out`: `header_len` zeros, then what `write`
/// writes; returns the header `write` gave, checked to be as long as reserved (for the
/// caller to put in place of the zeros).
fn write_headed(
    out: &mut dyn Write,
    header_len: usize,
    write: &mut dyn FnMut(&mut dyn Write) -> io::Result<Vec<u8>>,
) -> io::Result<Vec<u8>> {
    out.write_all(&vec![0; header_len])?;
    let header = write(out)?;
    if header.len() != header_len {
        return Err(io::Error::other(format!(
            "a header of {} bytes where {header_len} were reserved",
            header.len()
        )));
    }
    Ok(header)
}

/// Why [`acquire`] returned without the lock.
enum Acquire {
    /// Still held by someone else when the time was up; the file, to read who.
    Busy(File),
    Io(io::Error),
}

/// Opens (creating) the lock file at `path` and waits at most `timeout` for a shared
/// or exclusive lock on it, polling with growing pauses.
fn acquire(path: &Path, exclusive: bool, timeout: Duration) -> Result<File, Acquire> {
    let open = || {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(Acquire::Io)
    };
    let mut f = open()?;
    let start = Instant::now();
    let mut pause = Duration::from_micros(200);
    loop {
        let got = if exclusive {
            f.try_lock()
        } else {
            f.try_lock_shared()
        };
        match got {
            // A lock file is unlinked by its holder when its session is pruned: the
            // lock taken is only good if the path still names the file locked.
            Ok(()) if !same_file(&f, path) => f = open()?,
            Ok(()) => return Ok(f),
            Err(TryLockError::WouldBlock) if start.elapsed() < timeout => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(10));
            }
            Err(TryLockError::WouldBlock) => return Err(Acquire::Busy(f)),
            Err(TryLockError::Error(e)) => return Err(Acquire::Io(e)),
        }
    }
}

/// Whether `path` still names the open file `f` (same device and inode).
fn same_file(f: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (f.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// A shared or exclusive lock on a file, released when the file is closed.
#[derive(Debug)]
struct RealShared(#[allow(dead_code)] File);
impl Released for RealShared {}

// ---------------------------------------------------------------------------------
// The simulated filesystem.

/// A write or a length change that has not been synced yet.
#[derive(Debug, Clone)]
pub enum SimOp {
    Write { offset: u64, bytes: Vec<u8> },
    SetLen(u64),
}

impl SimOp {
    /// Applies the op, or its first `limit` bytes of a write.
    fn apply(&self, data: &mut Vec<u8>, limit: usize) {
        match self {
            SimOp::Write { offset, bytes } => {
                let n = limit.min(bytes.len());
                let end = *offset as usize + n;
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[*offset as usize..end].copy_from_slice(&bytes[..n]);
            }
            SimOp::SetLen(len) => data.resize(*len as usize, 0),
        }
    }

    fn weight(&self) -> usize {
        match self {
            SimOp::Write { bytes, .. } => bytes.len(),
            SimOp::SetLen(_) => 1,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct SimFile {
    data: Vec<u8>,
    /// Content as of the last sync_data.
    durable: Vec<u8>,
    /// Writes and length changes since then, in order.
    pending: Vec<SimOp>,
    /// Whether the directory entry survives a crash (synced by sync_dir of the parent).
    entry_durable: bool,
    /// The simulated clock's value when the file was last changed (its stamp's times).
    changed: u64,
}

#[derive(Debug, Default)]
struct SimState {
    files: BTreeMap<PathBuf, SimFile>,
    dirs: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
    /// Shared and exclusive locks of [`Vfs::lock_mode`]: holders per path (`None`: one
    /// exclusive holder).
    modes: BTreeMap<PathBuf, Option<usize>>,
    /// What lock holders noted in their lock files (kept across locks, like the file).
    lock_notes: BTreeMap<PathBuf, Vec<u8>>,
    syncs: u64,
    freeze_at: Option<u64>,
    frozen: Option<CrashImage>,
    fail_writes_after: Option<u64>,
    /// Names the next listings of a directory give that are not there (removed
    /// between a listing and an open): (directory, name, listings left).
    ghost: Option<(PathBuf, String, u32)>,
    /// The next read of this file sees zeros at these offsets (see
    /// [`SimFs::tear_next_read`]).
    torn_read: Option<(PathBuf, std::ops::Range<usize>)>,
    /// Ticks at every change of a file: what [`Vfs::stamp`] gives as its times.
    clock: u64,
}

impl SimState {
    /// Notes a change of the file at `path` now.
    fn touch(&mut self, path: &Path) {
        self.clock += 1;
        let now = self.clock;
        if let Some(f) = self.files.get_mut(path) {
            f.changed = now;
        }
    }
}

/// What a crash leaves: per file, the durable content and the operations after it that
/// had not been synced yet.
#[derive(Debug, Clone, Default)]
pub struct CrashImage {
    /// path → (durable content, unsynced operations in order, entry durable)
    pub files: BTreeMap<PathBuf, (Vec<u8>, Vec<SimOp>, bool)>,
    pub dirs: BTreeSet<PathBuf>,
    /// The notes in lock files (never synced): every crash image keeps them as they
    /// were, the case where a note reached the disk and data written before it did not.
    pub lock_notes: BTreeMap<PathBuf, Vec<u8>>,
    /// When each file was last changed (the simulated clock): a crash image keeps it as
    /// the file's stamp, the case where a file's metadata reached the disk and the data
    /// written with it did not (which a checkpoint that trusts stamps must survive).
    pub changed: BTreeMap<PathBuf, u64>,
}

/// How much of the unsynced operations a simulated crash keeps.
#[derive(Debug, Clone, Copy)]
pub enum CrashKeep {
    /// Only what was synced; files whose directory entry was not synced are gone.
    DurableOnly,
    /// The synced content, then the unsynced operations in order up to this fraction
    /// (0.0 to 1.0) of their bytes, the last one possibly cut short; with `zero_fill`,
    /// the file keeps the full length it would have had, zeros standing in for lost
    /// data (a size that reached the disk before the data did).
    Prefix { fraction: f64, zero_fill: bool },
}

impl CrashImage {
    /// The filesystem a crash with `keep` leaves behind.
    pub fn materialize(&self, keep: CrashKeep) -> SimFs {
        let mut st = SimState {
            dirs: self.dirs.clone(),
            lock_notes: self.lock_notes.clone(),
            clock: self.changed.values().copied().max().unwrap_or(0),
            ..SimState::default()
        };
        for (path, (durable, ops, entry_durable)) in &self.files {
            let mut data = durable.clone();
            match keep {
                CrashKeep::DurableOnly => {
                    if !entry_durable {
                        continue;
                    }
                }
                CrashKeep::Prefix {
                    fraction,
                    zero_fill,
                } => {
                    let total: usize = ops.iter().map(SimOp::weight).sum();
                    let mut budget = ((total as f64) * fraction.clamp(0.0, 1.0)) as usize;
                    let mut full = durable.clone();
                    for op in ops {
                        op.apply(&mut full, usize::MAX);
                        if budget > 0 {
                            op.apply(&mut data, budget);
                            budget = budget.saturating_sub(op.weight());
                        }
                    }
                    if zero_fill && full.len() > data.len() {
                        data.resize(full.len(), 0);
                    }
                }
            }
            st.files.insert(
                path.clone(),
                SimFile {
                    durable: data.clone(),
                    data,
                    pending: Vec::new(),
                    entry_durable: true,
                    changed: self.changed.get(path).copied().unwrap_or(0),
                },
            );
        }
        SimFs(Arc::new(Mutex::new(st)))
    }
}

/// An in-memory filesystem with a notion of durability, for crash tests.
#[derive(Debug, Clone, Default)]
pub struct SimFs(Arc<Mutex<SimState>>);

impl SimFs {
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, SimState> {
        // A panic while holding the lock only happens in a failing test.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of syncs (file and directory) performed so far.
    pub fn sync_count(&self) -> u64 {
        self.state().syncs
    }

    /// Freeze the durable state right after the `n`-th sync (1-based).
    pub fn freeze_at_sync(&self, n: u64) {
        self.state().freeze_at = Some(n);
    }

    /// The image frozen by [`SimFs::freeze_at_sync`], if that sync happened.
    pub fn frozen(&self) -> Option<CrashImage> {
        self.state().frozen.clone()
    }

    /// Makes every append fail with an I/O error once `n` more bytes were written.
    pub fn fail_writes_after(&self, n: u64) {
        self.state().fail_writes_after = Some(n);
    }

    /// The next `listings` listings of `dir` also name `name`, which is not there: as
    /// if another process removed it right after each listing.
    pub fn ghost_in_listings(&self, dir: &Path, name: &str, listings: u32) {
        self.state().ghost = Some((dir.to_path_buf(), name.to_string(), listings));
    }

    /// The next read of the file at `path` sees zeros at `range` and its content
    /// everywhere else: a read that copied those bytes of the free space before a write
    /// in progress reached them, and the bytes after them once it had (a reader takes
    /// no lock, and the kernel copies a write into the page cache while it is read).
    /// Later reads see the content.
    pub fn tear_next_read(&self, path: &Path, range: std::ops::Range<usize>) {
        self.state().torn_read = Some((path.to_path_buf(), range));
    }

    /// The current content of a file (for tests that damage files).
    /// The note a lock holder left in the lock file at `path` (tests).
    pub fn lock_note(&self, path: &Path) -> Vec<u8> {
        self.state()
            .lock_notes
            .get(path)
            .cloned()
            .unwrap_or_default()
    }

    /// Replaces the note in the lock file at `path` (tests: a stale or torn one).
    pub fn set_lock_note(&self, path: &Path, note: Vec<u8>) {
        self.state().lock_notes.insert(path.to_path_buf(), note);
    }

    pub fn file(&self, path: &Path) -> Option<Vec<u8>> {
        self.state().files.get(path).map(|f| f.data.clone())
    }

    /// Replaces a file's content, as durable (for tests that damage files).
    pub fn set_file(&self, path: &Path, data: Vec<u8>) {
        let mut st = self.state();
        let f = st.files.entry(path.to_path_buf()).or_default();
        f.durable = data.clone();
        f.data = data;
        f.pending.clear();
        f.entry_durable = true;
        st.touch(path);
    }

    /// Like [`SimFs::set_file`], keeping the file's stamp as it was: a change the
    /// file's metadata does not show (tests of what a checkpoint trusting stamps
    /// gives up).
    pub fn set_file_keeping_stamp(&self, path: &Path, data: Vec<u8>) {
        let mut st = self.state();
        let f = st.files.entry(path.to_path_buf()).or_default();
        f.durable = data.clone();
        f.data = data;
        f.pending.clear();
        f.entry_durable = true;
    }

    fn count_sync(st: &mut SimState) {
        st.syncs += 1;
        if st.freeze_at == Some(st.syncs) {
            let image = CrashImage {
                files: st
                    .files
                    .iter()
                    .map(|(p, f)| {
                        (
                            p.clone(),
                            (f.durable.clone(), f.pending.clone(), f.entry_durable),
                        )
                    })
                    .collect(),
                dirs: st.dirs.clone(),
                lock_notes: st.lock_notes.clone(),
                changed: st
                    .files
                    .iter()
                    .map(|(p, f)| (p.clone(), f.changed))
                    .collect(),
            };
            st.frozen = Some(image);
        }
    }
}

#[derive(Debug)]
struct SimHandle {
    fs: SimFs,
    path: PathBuf,
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    )
}

impl VfsFile for SimHandle {
    fn byte_len(&self) -> io::Result<u64> {
        let st = self.fs.state();
        let f = st
            .files
            .get(&self.path)
            .ok_or_else(|| not_found(&self.path))?;
        Ok(f.data.len() as u64)
    }
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut st = self.fs.state();
        let budget = st.fail_writes_after;
        let n = budget.map_or(buf.len(), |left| (left as usize).min(buf.len()));
        if let Some(left) = budget {
            st.fail_writes_after = Some(left - n as u64);
        }
        let f = st
            .files
            .get_mut(&self.path)
            .ok_or_else(|| not_found(&self.path))?;
        let op = SimOp::Write {
            offset,
            bytes: buf[..n].to_vec(),
        };
        op.apply(&mut f.data, usize::MAX);
        f.pending.push(op);
        st.touch(&self.path);
        if n < buf.len() {
            return Err(io::Error::other("simulated write failure (disk full)"));
        }
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        let mut st = self.fs.state();
        let f = st
            .files
            .get_mut(&self.path)
            .ok_or_else(|| not_found(&self.path))?;
        f.durable = f.data.clone();
        f.pending.clear();
        SimFs::count_sync(&mut st);
        Ok(())
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        let mut st = self.fs.state();
        let f = st
            .files
            .get_mut(&self.path)
            .ok_or_else(|| not_found(&self.path))?;
        let op = SimOp::SetLen(len);
        op.apply(&mut f.data, usize::MAX);
        f.pending.push(op);
        st.touch(&self.path);
        Ok(())
    }
}

#[derive(Debug)]
struct SimLock {
    fs: SimFs,
    path: PathBuf,
}
impl LockGuard for SimLock {
    fn read_note(&mut self) -> io::Result<Vec<u8>> {
        Ok(self
            .fs
            .state()
            .lock_notes
            .get(&self.path)
            .cloned()
            .unwrap_or_default())
    }
    fn write_note(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.fs
            .state()
            .lock_notes
            .insert(self.path.clone(), bytes.to_vec());
        Ok(())
    }
    fn sync_note(&mut self) -> io::Result<()> {
        // (Crash images keep every note as written: nothing to do.)
        Ok(())
    }
}
impl Drop for SimLock {
    fn drop(&mut self) {
        self.fs.state().locks.remove(&self.path);
    }
}

impl Vfs for SimFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<bool> {
        let mut st = self.state();
        let mut created = false;
        for a in path.ancestors() {
            created |= st.dirs.insert(a.to_path_buf());
        }
        Ok(created)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut st = self.state();
        // (Lock files need no directory here: `locks/` is there when one is noted.)
        if !st.dirs.contains(path) && !st.lock_notes.keys().any(|p| p.parent() == Some(path)) {
            return Err(not_found(path));
        }
        let mut names = BTreeSet::new();
        if let Some((dir, name, left)) = &mut st.ghost
            && dir == path
            && *left > 0
        {
            *left -= 1;
            names.insert(name.clone());
        }
        // (A lock file is its note here.)
        for p in st
            .files
            .keys()
            .chain(st.dirs.iter())
            .chain(st.lock_notes.keys())
        {
            if p.parent() == Some(path)
                && let Some(n) = p.file_name().and_then(|n| n.to_str())
            {
                names.insert(n.to_string());
            }
        }
        Ok(names.into_iter().collect())
    }

    fn read(&self, path: &Path, _immutable: bool) -> io::Result<SegmentBytes> {
        let mut st = self.state();
        let torn = match &st.torn_read {
            Some((p, _)) if p == path => st.torn_read.take().map(|(_, r)| r),
            _ => None,
        };
        let f = st.files.get(path).ok_or_else(|| not_found(path))?;
        let mut v = AlignedVec::<16>::with_capacity(f.data.len());
        v.extend_from_slice(&f.data);
        if let Some(r) = torn {
            let end = r.end.min(v.len());
            if let Some(b) = v.get_mut(r.start.min(end)..end) {
                b.fill(0);
            }
        }
        Ok(SegmentBytes::Owned(v))
    }

    fn read_range(&self, path: &Path, offset: u64, len: u64) -> io::Result<SegmentBytes> {
        let st = self.state();
        let f = st.files.get(path).ok_or_else(|| not_found(path))?;
        let start = (offset as usize).min(f.data.len());
        let end = start.saturating_add(len as usize).min(f.data.len());
        let mut v = AlignedVec::<16>::with_capacity(end - start);
        v.extend_from_slice(f.data.get(start..end).unwrap_or_default());
        Ok(SegmentBytes::Owned(v))
    }

    fn map(&self, path: &Path) -> io::Result<SegmentBytes> {
        self.read(path, true)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.state();
        let mut f = st.files.remove(from).ok_or_else(|| not_found(from))?;
        // The new name survives a crash once its directory is synced.
        f.entry_durable = false;
        st.files.insert(to.to_path_buf(), f);
        st.touch(to);
        Ok(())
    }

    fn open_append(&self, path: &Path, create_new: bool) -> io::Result<Box<dyn VfsFile>> {
        let mut st = self.state();
        if create_new {
            if st.files.contains_key(path) {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} exists", path.display()),
                ));
            }
            st.files.insert(path.to_path_buf(), SimFile::default());
            st.touch(path);
        } else if !st.files.contains_key(path) {
            return Err(not_found(path));
        }
        Ok(Box::new(SimHandle {
            fs: self.clone(),
            path: path.to_path_buf(),
        }))
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        for (p, f) in st.files.iter_mut() {
            if p.parent() == Some(path) {
                f.entry_durable = true;
            }
        }
        SimFs::count_sync(&mut st);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        // A lock file is its note here (a lock taken leaves no file of its own).
        let note = st.lock_notes.remove(path);
        match st.files.remove(path) {
            Some(_) => Ok(()),
            None if note.is_some() => Ok(()),
            None => Err(not_found(path)),
        }
    }

    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        let busy = st
            .files
            .keys()
            .chain(st.dirs.iter())
            .any(|p| p.parent() == Some(path));
        if busy {
            return Err(io::Error::new(
                io::ErrorKind::DirectoryNotEmpty,
                format!("{} is not empty", path.display()),
            ));
        }
        if st.dirs.remove(path) {
            Ok(())
        } else {
            Err(not_found(path))
        }
    }

    fn lock(&self, path: &Path, _timeout: Duration) -> Result<Box<dyn LockGuard>, LockError> {
        let mut st = self.state();
        if !st.locks.insert(path.to_path_buf()) {
            return Err(LockError::Busy { holder: None });
        }
        Ok(Box::new(SimLock {
            fs: self.clone(),
            path: path.to_path_buf(),
        }))
    }

    fn peek_lock_note(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.state()
            .lock_notes
            .get(path)
            .cloned()
            .ok_or_else(|| not_found(path))
    }

    fn exists(&self, path: &Path) -> bool {
        let st = self.state();
        st.files.contains_key(path) || st.dirs.contains(path)
    }

    fn stamp(&self, path: &Path) -> io::Result<FileStamp> {
        let st = self.state();
        let f = st.files.get(path).ok_or_else(|| not_found(path))?;
        Ok(FileStamp {
            len: f.data.len() as u64,
            id: [0, 0, f.changed, f.changed],
        })
    }

    fn append_shared(&self, path: &Path, bytes: &[u8]) -> io::Result<(u64, bool)> {
        let mut st = self.state();
        if let Some(parent) = path.parent()
            && !st.dirs.contains(parent)
        {
            return Err(not_found(parent));
        }
        let budget = st.fail_writes_after;
        let n = budget.map_or(bytes.len(), |left| (left as usize).min(bytes.len()));
        if let Some(left) = budget {
            st.fail_writes_after = Some(left - n as u64);
        }
        let created = !st.files.contains_key(path);
        let f = st.files.entry(path.to_path_buf()).or_default();
        let op = SimOp::Write {
            offset: f.data.len() as u64,
            bytes: bytes[..n].to_vec(),
        };
        op.apply(&mut f.data, usize::MAX);
        f.pending.push(op);
        let len = f.data.len() as u64;
        st.touch(path);
        if n < bytes.len() {
            return Err(io::Error::other("simulated write failure (disk full)"));
        }
        Ok((len, created))
    }

    fn sync_fs(&self, _path: &Path) -> io::Result<()> {
        let mut st = self.state();
        for f in st.files.values_mut() {
            f.durable = f.data.clone();
            f.pending.clear();
            f.entry_durable = true;
        }
        SimFs::count_sync(&mut st);
        Ok(())
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.state();
        let f = st.files.get_mut(path).ok_or_else(|| not_found(path))?;
        f.durable = f.data.clone();
        f.pending.clear();
        SimFs::count_sync(&mut st);
        Ok(())
    }

    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut st = self.state();
        if let Some(parent) = path.parent()
            && !st.dirs.contains(parent)
        {
            return Err(not_found(parent));
        }
        st.files.insert(
            path.to_path_buf(),
            SimFile {
                data: bytes.to_vec(),
                durable: bytes.to_vec(),
                pending: Vec::new(),
                entry_durable: true,
                changed: 0,
            },
        );
        st.touch(path);
        SimFs::count_sync(&mut st);
        Ok(())
    }

    fn lock_mode(
        &self,
        path: &Path,
        exclusive: bool,
        _timeout: Duration,
    ) -> Result<Box<dyn Released>, LockError> {
        let mut st = self.state();
        let held = st.modes.get(path).copied();
        let next = match (held, exclusive) {
            (None, true) => None,
            (None, false) => Some(1),
            (Some(Some(n)), false) => Some(n + 1),
            _ => return Err(LockError::Busy { holder: None }),
        };
        st.modes.insert(path.to_path_buf(), next);
        Ok(Box::new(SimShared {
            fs: self.clone(),
            path: path.to_path_buf(),
        }))
    }
}

#[derive(Debug)]
struct SimShared {
    fs: SimFs,
    path: PathBuf,
}
impl Released for SimShared {}
impl Drop for SimShared {
    fn drop(&mut self) {
        let mut st = self.fs.state();
        match st.modes.get(&self.path).copied() {
            Some(Some(n)) if n > 1 => {
                st.modes.insert(self.path.clone(), Some(n - 1));
            }
            _ => {
                st.modes.remove(&self.path);
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Counting what is read.

/// A [`Vfs`] that counts the bytes read through it (whole files, ranges, maps and lock
/// notes) and passes every operation on to another: how tests show that an operation
/// reads a bounded part of the log, whatever its length.
#[derive(Debug, Clone)]
pub struct CountingFs {
    inner: Arc<dyn Vfs>,
    read: Arc<std::sync::atomic::AtomicU64>,
}

impl CountingFs {
    pub fn new(inner: Arc<dyn Vfs>) -> Self {
        CountingFs {
            inner,
            read: Arc::default(),
        }
    }

    /// Bytes read since the counter was created or last taken.
    pub fn take_bytes_read(&self) -> u64 {
        self.read.swap(0, std::sync::atomic::Ordering::Relaxed)
    }

    fn count<T: std::ops::Deref<Target = [u8]>>(&self, r: io::Result<T>) -> io::Result<T> {
        if let Ok(b) = &r {
            self.read
                .fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
        r
    }
}

#[derive(Debug)]
struct CountingLock {
    inner: Box<dyn LockGuard>,
    read: Arc<std::sync::atomic::AtomicU64>,
}

impl LockGuard for CountingLock {
    fn read_note(&mut self) -> io::Result<Vec<u8>> {
        let note = self.inner.read_note()?;
        self.read
            .fetch_add(note.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(note)
    }
    fn write_note(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_note(bytes)
    }
    fn sync_note(&mut self) -> io::Result<()> {
        self.inner.sync_note()
    }
}

impl Vfs for CountingFs {
    fn create_dir_all(&self, path: &Path) -> io::Result<bool> {
        self.inner.create_dir_all(path)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn read(&self, path: &Path, immutable: bool) -> io::Result<SegmentBytes> {
        self.count(self.inner.read(path, immutable))
    }
    fn read_range(&self, path: &Path, offset: u64, len: u64) -> io::Result<SegmentBytes> {
        self.count(self.inner.read_range(path, offset, len))
    }
    fn map(&self, path: &Path) -> io::Result<SegmentBytes> {
        self.count(self.inner.map(path))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn open_append(&self, path: &Path, create_new: bool) -> io::Result<Box<dyn VfsFile>> {
        self.inner.open_append(path, create_new)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_dir(path)
    }
    fn lock(&self, path: &Path, timeout: Duration) -> Result<Box<dyn LockGuard>, LockError> {
        Ok(Box::new(CountingLock {
            inner: self.inner.lock(path, timeout)?,
            read: self.read.clone(),
        }))
    }
    fn peek_lock_note(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.count(self.inner.peek_lock_note(path))
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn stamp(&self, path: &Path) -> io::Result<FileStamp> {
        self.inner.stamp(path)
    }
    fn append_shared(&self, path: &Path, bytes: &[u8]) -> io::Result<(u64, bool)> {
        self.inner.append_shared(path, bytes)
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_file(path)
    }
    fn replace(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.inner.replace(path, bytes)
    }
    fn replace_with(
        &self,
        path: &Path,
        header_len: usize,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<Vec<u8>>,
    ) -> io::Result<()> {
        self.inner.replace_with(path, header_len, write)
    }
    fn sync_fs(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_fs(path)
    }
    fn lock_mode(
        &self,
        path: &Path,
        exclusive: bool,
        timeout: Duration,
    ) -> Result<Box<dyn Released>, LockError> {
        self.inner.lock_mode(path, exclusive, timeout)
    }
}
