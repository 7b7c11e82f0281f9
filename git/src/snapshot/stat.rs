//! File metadata as snapshots use it, from `std` or straight from `fstatat`.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What is at a path (links not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Link,
    Dir,
    Other,
}

/// The metadata a snapshot compares (and the stat cache keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStat {
    pub kind: Kind,
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub dev: u64,
    /// The raw `st_mode`.
    pub mode: u32,
}

impl FileStat {
    pub fn of(m: &std::fs::Metadata) -> Self {
        let t = m.file_type();
        FileStat {
            kind: if t.is_file() {
                Kind::File
            } else if t.is_symlink() {
                Kind::Link
            } else if t.is_dir() {
                Kind::Dir
            } else {
                Kind::Other
            },
            size: m.len(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            ctime_ns: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
            ino: m.ino(),
            dev: m.dev(),
            mode: m.mode(),
        }
    }

    fn of_raw(st: &rustix::fs::Stat) -> Self {
        use rustix::fs::FileType;
        FileStat {
            kind: match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => Kind::File,
                FileType::Symlink => Kind::Link,
                FileType::Directory => Kind::Dir,
                _ => Kind::Other,
            },
            size: st.st_size as u64,
            mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64,
            ctime_ns: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec as i64,
            ino: st.st_ino,
            dev: st.st_dev,
            mode: st.st_mode,
        }
    }

    /// Itself: kept so that code reads like `std`'s `meta.file_type().is_file()`.
    pub fn file_type(&self) -> FileStat {
        *self
    }

    pub fn is_file(&self) -> bool {
        self.kind == Kind::File
    }

    pub fn is_symlink(&self) -> bool {
        self.kind == Kind::Link
    }

    pub fn is_dir(&self) -> bool {
        self.kind == Kind::Dir
    }

    pub fn len(&self) -> u64 {
        self.size
    }

    pub fn executable(&self) -> bool {
        self.mode & 0o111 != 0
    }
}

/// `lstat`.
pub(crate) fn lstat(path: &Path) -> std::io::Result<FileStat> {
    std::fs::symlink_metadata(path).map(|m| FileStat::of(&m))
}

/// `lstat` of `names` inside `dir`, through one descriptor of the directory: each call
/// resolves one name instead of the whole path.
pub(crate) fn lstat_in(dir: &Path, names: &[&str]) -> Vec<std::io::Result<FileStat>> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    let fd = match rustix::fs::open(
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => {
            let e = std::io::Error::from(e);
            return names
                .iter()
                .map(|_| Err(std::io::Error::new(e.kind(), e.to_string())))
                .collect();
        }
    };
    names
        .iter()
        .map(|n| {
            rustix::fs::statat(&fd, *n, AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| FileStat::of_raw(&st))
                .map_err(std::io::Error::from)
        })
        .collect()
}
