//! File systems that hold no user files: a snapshot or a fingerprint never reads
//! them, never walks into them, and refuses a workspace that is one of them, `/` or
//! the home directory.
//!
//! `/proc/<pid>/pagemap` says it is 0 bytes long and never ends; `/sys` and the cgroup
//! trees hold thousands of such files. They are told apart in two ways: the file
//! system a path lies on (`statfs`'s magic number: cheap, one call, what the workspace
//! is checked with) and the mount table (`/proc/self/mountinfo`: by type name, read once
//! per walk, which finds such mounts below a workspace before the walk reaches them).

use std::io::Read;
use std::path::{Path, PathBuf};

/// Pseudo file systems by name (as the mount table spells them) and `statfs` magic
/// number (`linux/magic.h`). `devtmpfs` has no magic of its own (it reports tmpfs's,
/// which holds user files): it is known by name only, and what it holds are device
/// nodes, which are special files anyway.
const PSEUDO: &[(&str, Option<u32>)] = &[
    ("proc", Some(0x9fa0)),
    ("sysfs", Some(0x6265_6572)),
    ("devtmpfs", None),
    ("devpts", Some(0x1cd1)),
    ("cgroup", Some(0x0027_e0eb)),
    ("cgroup2", Some(0x6367_7270)),
    ("debugfs", Some(0x6462_6720)),
    ("tracefs", Some(0x7472_6163)),
    ("securityfs", Some(0x7363_6673)),
    ("pstore", Some(0x6165_676c)),
    ("bpf", Some(0xcafe_4a11)),
    ("configfs", Some(0x6265_6570)),
    ("fusectl", Some(0x6573_5543)),
    ("mqueue", Some(0x1980_0202)),
    ("hugetlbfs", Some(0x9584_58f6)),
    ("autofs", Some(0x0187)),
    ("binfmt_misc", Some(0x4249_4e4d)),
    ("efivarfs", Some(0xde5e_81e4)),
    ("selinuxfs", Some(0xf97c_ff8c)),
    ("nsfs", Some(0x6e73_6673)),
];

/// Whether a file system type name is one of the pseudo file systems.
pub(crate) fn is_pseudo_type(name: &str) -> bool {
    PSEUDO.iter().any(|(n, _)| *n == name)
}

/// The pseudo file system `path` lies on, by `statfs`; `None` for any other (or when
/// it cannot be asked).
pub(crate) fn pseudo_fs_of(path: &Path) -> Option<&'static str> {
    let st = rustix::fs::statfs(path).ok()?;
    // `f_type` is a signed long on some targets: its low 32 bits are the magic.
    let magic = (st.f_type as u64 & 0xffff_ffff) as u32;
    PSEUDO
        .iter()
        .find(|(_, m)| *m == Some(magic))
        .map(|(n, _)| *n)
}

/// Why `workspace` (canonical) cannot be a workspace, if it cannot: `/` (it holds
/// `/proc`, `/sys` and every user's files), the home directory (every project and
/// cache of the user), or a directory of a pseudo file system.
pub(crate) fn refused_workspace(workspace: &Path) -> Option<String> {
    if workspace.parent().is_none() {
        return Some(
            "the root directory: it holds /proc, /sys and every other file of the machine".into(),
        );
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty())
        && Path::new(&home)
            .canonicalize()
            .is_ok_and(|h| h == workspace)
    {
        return Some(
            "the home directory: it holds every project, cache and secret of the user".into(),
        );
    }
    if let Some(fs) = pseudo_fs_of(workspace) {
        return Some(format!(
            "on {fs}, a pseudo file system that holds no user files"
        ));
    }
    None
}

/// The longest mount table read (a few KiB on ordinary machines).
const MOUNTINFO_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// Mount points of pseudo file systems strictly below `dir` (canonical), relative to
/// it (`/`-separated), with their type, from this process's mount table. Empty when the
/// table cannot be read.
pub(crate) fn pseudo_mounts_under(dir: &Path) -> Vec<(String, String)> {
    let mut text = Vec::new();
    let read = std::fs::File::open("/proc/self/mountinfo")
        .and_then(|f| f.take(MOUNTINFO_BYTES_MAX).read_to_end(&mut text));
    if read.is_err() {
        return Vec::new();
    }
    let mut out: Vec<(String, String)> = parse_mountinfo(&String::from_utf8_lossy(&text))
        .into_iter()
        .filter(|(_, fs)| is_pseudo_type(fs))
        .filter_map(|(point, fs)| {
            let rel = point.strip_prefix(dir).ok()?;
            let rel = super::scan::slash_path(rel)?;
            (!rel.is_empty()).then_some((rel, fs))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether `rel` (workspace-relative) is one of `mounts` or lies below one; the mount
/// when it does.
pub(crate) fn under_mount<'m>(
    rel: &str,
    mounts: &'m [(String, String)],
) -> Option<&'m (String, String)> {
    mounts.iter().find(|(m, _)| {
        rel == m || (rel.starts_with(m.as_str()) && rel.as_bytes().get(m.len()) == Some(&b'/'))
    })
}

/// The mount points and file system types of a `/proc/<pid>/mountinfo` text:
/// `ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER-OPTIONS`,
/// with spaces, tabs, newlines and backslashes in paths written as octal escapes.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<(PathBuf, String)> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let fs = right.split(' ').next()?;
            Some((PathBuf::from(unescape(point)), fs.to_owned()))
        })
        .collect()
}

/// A mount table path with its `\NNN` octal escapes decoded.
fn unescape(s: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| c == b'\\' && d.iter().all(|x| (b'0'..=b'7').contains(x)))
            .map(|d| d.iter().fold(0u32, |n, x| n * 8 + u32::from(x - b'0')))
            .and_then(|n| u8::try_from(n).ok());
        match octal {
            Some(v) => {
                out.push(v);
                i += 4;
            }
            None => {
                out.push(c);
                i += 1;
            }
        }
    }
    std::ffi::OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
23 22 0:21 / /proc rw,nosuid shared:12 - proc proc rw
24 22 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw
25 22 0:5 / /dev rw,nosuid shared:2 - devtmpfs udev rw,size=4007324k
90 22 0:48 / /work/chroot/proc rw,relatime - proc proc rw
91 22 0:49 / /work/chroot/sys/fs/cgroup rw - cgroup2 cgroup2 rw
92 22 0:50 / /work/my\\040dir/tmp rw - tmpfs tmpfs rw
93 22 0:51 / /work/my\\040dir/proc rw master:3 - proc proc rw
";

    #[test]
    fn the_mount_table_is_read_with_its_escapes() {
        let m = parse_mountinfo(TABLE);
        assert_eq!(m.len(), 8);
        assert_eq!(
            m[4],
            (PathBuf::from("/work/chroot/proc"), "proc".to_owned())
        );
        assert_eq!(
            m[6],
            (PathBuf::from("/work/my dir/tmp"), "tmpfs".to_owned())
        );
        let pseudo: Vec<_> = m
            .iter()
            .filter(|(_, fs)| is_pseudo_type(fs))
            .map(|(p, _)| p.display().to_string())
            .collect();
        assert_eq!(
            pseudo,
            [
                "/proc",
                "/sys",
                "/dev",
                "/work/chroot/proc",
                "/work/chroot/sys/fs/cgroup",
                "/work/my dir/proc"
            ]
        );
    }

    #[test]
    fn paths_below_a_mount_are_found() {
        let mounts = vec![("chroot/proc".to_owned(), "proc".to_owned())];
        assert!(under_mount("chroot/proc", &mounts).is_some());
        assert!(under_mount("chroot/proc/1/pagemap", &mounts).is_some());
        assert!(under_mount("chroot/procfs", &mounts).is_none());
        assert!(under_mount("chroot", &mounts).is_none());
    }

    #[test]
    fn proc_root_and_home_are_refused_as_workspaces() {
        if Path::new("/proc/self").exists() {
            let w = Path::new("/proc/self").canonicalize().unwrap_or_default();
            let why = refused_workspace(&w).unwrap_or_default();
            assert!(why.contains("on proc, a pseudo file system"), "{why}");
        }
        let why = refused_workspace(Path::new("/")).unwrap_or_default();
        assert!(why.starts_with("the root directory"), "{why}");
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let ws = dir.path().canonicalize().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(refused_workspace(&ws), None);
        if std::env::var_os("HOME").is_some_and(|h| Path::new(&h).is_dir()) {
            let home = Path::new(&std::env::var_os("HOME").unwrap_or_default())
                .canonicalize()
                .unwrap_or_default();
            let why = refused_workspace(&home).unwrap_or_default();
            assert!(why.starts_with("the home directory"), "{why}");
        }
    }
}
