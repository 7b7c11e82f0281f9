//! The stat cache: for each workspace, what each file looked like (size, times, inode,
//! mode) when its blob id was computed, so that the next full scan reads only files
//! whose metadata changed. Derived data: deleting it only makes the next scan slower.

use std::path::{Path, PathBuf};

use super::SnapshotError;
use super::stat::FileStat;

/// The stat cache's version: 5 since snapshots keep permission bits (a cache of 4 goes,
/// so the next scan is a full one that writes the modes entry from every file).
pub(crate) const CACHE_VERSION: u32 = 5;

/// How long before a scan's start a file's times must be for its cache entry to be
/// trusted at the next scan. File times come from a coarse clock (a few milliseconds
/// behind), so a write just after a scan began could carry an earlier time; entries
/// inside this window are read again (Git's "racy" check).
pub(crate) const RACY_NS: i64 = 100_000_000;

/// How long a file written through a shared writable mapping may hold writes its times
/// do not show: the kernel stamps a mapped file's times at the first write to a page
/// after it was written back, and writes back dirty pages only after
/// `vm.dirty_expire_centisecs`, checked every `vm.dirty_writeback_centisecs` (30 s and
/// 5 s by default); 5 s more for the writeback itself. Read from `/proc/sys/vm` (the
/// defaults when it cannot be), at most two minutes.
pub(crate) fn mapped_write_window_ns() -> i64 {
    static WINDOW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *WINDOW.get_or_init(|| {
        let centis = |name: &str, default: i64| {
            std::fs::read_to_string(format!("/proc/sys/vm/{name}"))
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .filter(|v| *v >= 0)
                .unwrap_or(default)
        };
        let cs = centis("dirty_expire_centisecs", 3000) + centis("dirty_writeback_centisecs", 500);
        (cs.saturating_mul(10_000_000) + 5_000_000_000).min(120_000_000_000)
    })
}

#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct CacheEntry {
    pub path: String,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub dev: u64,
    /// The raw `st_mode`.
    pub mode: u32,
    /// The Git tree entry mode (`0o100644`, `0o100755`, `0o120000`).
    pub git_mode: u32,
    pub oid: [u8; 20],
}

/// A directory as the last walk saw it.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct DirStamp {
    pub path: String,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
}

impl DirStamp {
    pub fn of(path: String, m: &super::stat::FileStat) -> Self {
        DirStamp {
            path,
            mtime_ns: m.mtime_ns,
            ctime_ns: m.ctime_ns,
            ino: m.ino,
        }
    }
}

/// A file outside the listing whose content decides it inside Git (the index, the
/// repository's exclude file, the user's excludes file, the configuration files that
/// can name it, `.gitignore` files above the workspace), as the last walk saw it;
/// `present: false` when it did not exist.
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct GuardStamp {
    pub path: String,
    pub present: bool,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
}

impl GuardStamp {
    /// The file at `path` now (links followed: a linked configuration file changes
    /// where it points).
    pub fn now(path: &Path) -> Option<Self> {
        let text = path.to_str()?.to_owned();
        Some(match std::fs::metadata(path) {
            Ok(m) => {
                let m = super::stat::FileStat::of(&m);
                GuardStamp {
                    path: text,
                    present: true,
                    size: m.size,
                    mtime_ns: m.mtime_ns,
                    ctime_ns: m.ctime_ns,
                    ino: m.ino,
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => GuardStamp {
                path: text,
                present: false,
                size: 0,
                mtime_ns: 0,
                ctime_ns: 0,
                ino: 0,
            },
            Err(_) => return None,
        })
    }
}

/// A path the walk itself left out (special file, nested repository, ...).
#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct ListedExclusion {
    pub path: String,
    /// 0 special, 1 nested repository, 2 unreadable, 3 not UTF-8, 4 a pseudo file
    /// system's mount (`detail`: its type).
    pub code: u8,
    pub detail: String,
}

#[derive(Debug, Clone, Default, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub(crate) struct CacheFile {
    pub version: u32,
    pub workspace: String,
    /// The tree these entries make up.
    pub tree: [u8; 20],
    /// When the scan that produced the entries started.
    pub scan_start_ns: i64,
    pub entries: Vec<CacheEntry>,
    /// The walk's result: what it listed and left out, the directories it read, and
    /// inside Git the files that decide the listing besides them. Reused without
    /// walking while none of them and no ignore file changed.
    /// Listed paths that are not among `entries` (left out after listing: too large,
    /// unreadable, ...). The listing is `entries`' paths and these.
    pub listed_extra: Vec<String>,
    pub listed_excluded: Vec<ListedExclusion>,
    pub dirs: Vec<DirStamp>,
    pub guards: Vec<GuardStamp>,
    /// The workspace watcher's token these entries reflect (instance 0: none).
    pub watch_instance: u64,
    pub watch_gen: u64,
}

/// The per-workspace files: `<dir>/<key>.stat` (the full entries of the last full scan)
/// and `<dir>/<key>.head` (the last snapshot of any kind: its tree, 20 bytes, then its
/// file count and total bytes, u64 little-endian each).
pub(crate) struct CachePaths {
    pub stat: PathBuf,
    pub head: PathBuf,
}

pub(crate) fn paths(dir: &Path, workspace: &Path) -> CachePaths {
    let key = blake3::hash(workspace.as_os_str().as_encoded_bytes());
    let key = &key.to_hex()[..32];
    CachePaths {
        stat: dir.join(format!("{key}.stat")),
        head: dir.join(format!("{key}.head")),
    }
}

/// A cache file's bytes, read to be used in place (checked by [`Loaded::get`]): a scan
/// that needs only a few entries (one the workspace watcher answers) looks them up
/// without building the whole cache.
pub(crate) struct Loaded(rkyv::util::AlignedVec<16>);

impl Loaded {
    pub fn read(path: &Path) -> Option<Loaded> {
        Self::read_stamped(path).map(|(loaded, _)| loaded)
    }

    /// [`Loaded::read`], with the metadata of the file read (of the open file: the one
    /// whose bytes these are, whatever replaced it since).
    pub fn read_stamped(path: &Path) -> Option<(Loaded, FileStat)> {
        use std::io::Read;
        let mut file = std::fs::File::open(path).ok()?;
        let meta = file.metadata().ok()?;
        let len = usize::try_from(meta.len()).ok()?;
        // One read of the whole file into place (a copy through a small buffer costs a
        // system call per 8 KiB: hundreds for a large workspace's cache). The file is
        // only ever replaced by a rename, so its length does not change under us; a
        // short read is a cache that is not whole.
        let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(len);
        aligned.resize(len, 0);
        file.read_exact(&mut aligned).ok()?;
        Some((Loaded(aligned), FileStat::of(&meta)))
    }

    /// The cache, when it is whole, of this version and of `workspace`.
    pub fn get(&self, workspace: &str) -> Option<&ArchivedCacheFile> {
        let c = rkyv::access::<ArchivedCacheFile, rkyv::rancor::Error>(&self.0).ok()?;
        (c.version.to_native() == CACHE_VERSION && c.workspace.as_str() == workspace).then_some(c)
    }
}

/// A cache file's bytes checked once (whole, of this version, of the workspace), then
/// read in place as often as wanted: what a watcher keeps between the snapshots it
/// takes, with the totals of its entries.
pub(crate) struct Checked {
    loaded: Loaded,
    /// The entries' count and total size.
    pub totals: (i64, i64),
}

impl Checked {
    pub fn new(loaded: Loaded, workspace: &str) -> Option<Checked> {
        let totals = totals(loaded.get(workspace)?);
        Some(Checked { loaded, totals })
    }

    pub fn get(&self) -> &ArchivedCacheFile {
        // SAFETY: `new` checked these very bytes with `rkyv::access` (bytecheck), and
        // they never change afterwards: the vector is owned here and only read.
        // Checking again at every snapshot would cost a large workspace's watcher
        // milliseconds each time.
        #[allow(unsafe_code)]
        unsafe {
            rkyv::access_unchecked::<ArchivedCacheFile>(&self.loaded.0)
        }
    }
}

/// The cache's entry count and the total size of its entries.
pub(crate) fn totals(c: &ArchivedCacheFile) -> (i64, i64) {
    (
        c.entries.len() as i64,
        c.entries.iter().map(|e| e.size.to_native() as i64).sum(),
    )
}

/// The cache as values.
pub(crate) fn owned(c: &ArchivedCacheFile) -> CacheFile {
    rkyv::deserialize::<CacheFile, rkyv::rancor::Error>(c).unwrap_or_default()
}

/// The entry of `path` (entries are sorted by path).
pub(crate) fn find(c: &ArchivedCacheFile, path: &str) -> Option<CacheEntry> {
    let i = c
        .entries
        .binary_search_by(|e| e.path.as_str().cmp(path))
        .ok()?;
    rkyv::deserialize::<CacheEntry, rkyv::rancor::Error>(&c.entries[i]).ok()
}

/// The entry of `path` in `cache` (entries are sorted by path).
pub(crate) fn entry<'c>(cache: &'c CacheFile, path: &str) -> Option<&'c CacheEntry> {
    let i = cache
        .entries
        .binary_search_by(|e| e.path.as_str().cmp(path))
        .ok()?;
    cache.entries.get(i)
}

pub(crate) fn save(path: &Path, cache: &CacheFile) -> Result<(), SnapshotError> {
    let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(cache)
        .map_err(|e| SnapshotError::git("encoding the stat cache", e))?;
    write_atomic(path, &bytes)
}

/// The last snapshot of a workspace: (tree, files, bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub tree: [u8; 20],
    pub files: u64,
    pub bytes: u64,
}

pub(crate) fn load_head(path: &Path) -> Option<Head> {
    let b = std::fs::read(path).ok()?;
    if b.len() != 36 {
        return None;
    }
    Some(Head {
        tree: b[..20].try_into().ok()?,
        files: u64::from_le_bytes(b[20..28].try_into().ok()?),
        bytes: u64::from_le_bytes(b[28..36].try_into().ok()?),
    })
}

pub(crate) fn save_head(path: &Path, head: &Head) -> Result<(), SnapshotError> {
    let mut b = Vec::with_capacity(36);
    b.extend_from_slice(&head.tree);
    b.extend_from_slice(&head.files.to_le_bytes());
    b.extend_from_slice(&head.bytes.to_le_bytes());
    write_atomic(path, &b)
}

/// Writes through a temporary file and a rename, so a crash leaves the old file or the
/// new one. Not synced: the cache is derived and a lost update only costs a rescan.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), SnapshotError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| SnapshotError::io(dir, e))?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| SnapshotError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| SnapshotError::io(path, e))
}
