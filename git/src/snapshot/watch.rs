//! A watcher of one workspace (Linux inotify): a process that learns of every change
//! in the workspace's directories as it happens, so that a full scan need not `lstat`
//! every file to find the few that changed — what Git's fsmonitor and Watchman do.
//!
//! The watcher answers on a Unix socket in the snapshot cache directory. A full scan
//! asks it which paths changed since the token stored with its stat cache; the answer
//! is a list of paths and a new token, or "unknown" (the watcher restarted, its queue
//! overflowed, a directory moved, an ignore rule changed): then the scan is the ordinary
//! one. Without a watcher nothing changes. SPEC.md §10.6 gives the protocol.
//!
//! Correctness rests on one kernel fact: inotify queues an event inside the system call
//! that changed the file, before that call returns. The watcher reads its whole queue
//! after a request arrives and before it answers, so every change made before the scan
//! asked is in the answer; a change made later carries a later token and is in the next
//! one. Writes through a shared memory mapping raise no inotify event (as with
//! fsmonitor and Watchman): such a change is seen by the next scan without a watcher.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use serde::{Deserialize, Serialize};

use super::SnapshotError;

/// At most this many changed paths are held; beyond it the watcher forgets them and
/// answers "unknown" to every older token (a scan then lists the workspace).
const HELD_MAX: usize = 200_000;

/// How long a scan waits for the watcher's answer before scanning without it.
const ANSWER_WAIT: Duration = Duration::from_millis(500);

/// How long a scan waits for a snapshot the watcher takes for it (it reads what
/// changed, up to the watched scan's limit of paths, as the scan itself would).
const SERVE_WAIT: Duration = Duration::from_secs(10);

/// Where a scan stands with the watcher: the watcher's run and the point in its change
/// record that the scan's stat cache reflects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    pub instance: u64,
    pub generation: u64,
}

/// The watcher's answer to "what changed since".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    /// What the next scan asks with.
    pub token: Token,
    /// The workspace-relative paths (files or directories) that changed, sorted; `None`
    /// when the watcher cannot tell.
    pub paths: Option<Vec<String>>,
}

/// What a running watcher reports of itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WatchStatus {
    pub workspace: String,
    pub pid: u32,
    pub instance: u64,
    /// Directories watched.
    pub dirs: usize,
    /// Changed paths held for scans that have not asked yet.
    pub held: usize,
    /// Requests answered since it started.
    pub answered: u64,
    /// When it started (Unix seconds).
    pub started_unix: i64,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    Since {
        since: Option<Token>,
        /// The scan saw a file that decides the listing change (the index, an exclude
        /// file): the watcher lists the workspace again before answering.
        relist: bool,
    },
    /// Take a full snapshot of the workspace here, with this watcher's own answer and
    /// the stat cache it holds in memory (SPEC.md §10.6). The asker holds the store's
    /// write guard until it has recorded the snapshot.
    Snapshot {
        /// The asker's per-file size limit.
        max_file_bytes: u64,
    },
    Status,
    Stop,
}

#[derive(Debug, Serialize, Deserialize)]
struct SinceReply {
    token: Token,
    paths: Option<Vec<String>>,
}

/// An answer about a workspace's files, with the workspace and store the watcher
/// serves: the asker believes it only for its own (SPEC.md §10.6).
#[derive(Debug, Serialize, Deserialize)]
struct Named<R> {
    workspace: PathBuf,
    cache_dir: PathBuf,
    #[serde(flatten)]
    reply: R,
}

/// `path` made canonical, or as it is when it cannot be.
fn canonical_or_same(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// The watcher's answer to [`Request::Snapshot`].
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SnapshotReply {
    /// What a scan the watcher did not take stores with its stat cache.
    pub token: Token,
    /// The snapshot, when the watcher took it; `None` when only a walk can tell (what
    /// `SnapshotStore::take_watched` declines) or it failed: the asker scans itself.
    pub snapshot: Option<ServedSnapshot>,
}

/// A [`Snapshot`] as the watcher sends it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ServedSnapshot {
    tree: String,
    files: u64,
    bytes: u64,
    files_read: u64,
    bytes_read: u64,
    objects_written: u64,
    excluded: Vec<super::Excluded>,
}

impl ServedSnapshot {
    fn of(s: &super::Snapshot) -> Self {
        ServedSnapshot {
            tree: s.id.clone(),
            files: s.files,
            bytes: s.bytes,
            files_read: s.files_read,
            bytes_read: s.bytes_read,
            objects_written: s.objects_written,
            excluded: s.excluded.clone(),
        }
    }

    /// The snapshot (`None` for a tree id that is not one).
    pub(crate) fn into_snapshot(self) -> Option<super::Snapshot> {
        let tree = gix::ObjectId::from_hex(self.tree.as_bytes()).ok()?;
        Some(super::Snapshot {
            id: tree.to_hex().to_string(),
            tree,
            files: self.files,
            bytes: self.bytes,
            files_read: self.files_read,
            bytes_read: self.bytes_read,
            objects_written: self.objects_written,
            excluded: self.excluded,
            full_scan: true,
            walked: false,
            watched: true,
        })
    }
}

/// The socket of `workspace`'s watcher, and the lock file its watcher holds.
pub fn socket_path(cache_dir: &Path, workspace: &Path) -> PathBuf {
    let key = blake3::hash(workspace.as_os_str().as_encoded_bytes());
    cache_dir
        .join("watch")
        .join(format!("{}.sock", &key.to_hex()[..32]))
}

fn lock_path(socket: &Path) -> PathBuf {
    socket.with_extension("lock")
}

/// A socket path short enough for `sockaddr_un` (108 bytes): the path itself, or the
/// same file reached through a descriptor of its directory (`/proc/self/fd/N/name`).
struct SocketAddr {
    path: PathBuf,
    _dir: Option<std::fs::File>,
}

fn socket_addr(socket: &Path) -> std::io::Result<SocketAddr> {
    if socket.as_os_str().len() < 100 {
        return Ok(SocketAddr {
            path: socket.to_path_buf(),
            _dir: None,
        });
    }
    use std::os::fd::AsRawFd;
    let dir = std::fs::File::open(socket.parent().unwrap_or(Path::new(".")))?;
    let name = socket.file_name().unwrap_or_default();
    Ok(SocketAddr {
        path: Path::new(&format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name),
        _dir: Some(dir),
    })
}

fn connect(socket: &Path, wait: Duration) -> std::io::Result<UnixStream> {
    let addr = socket_addr(socket)?;
    let s = UnixStream::connect(&addr.path)?;
    // Any process of the user can bind the socket and answer with an old tree (issue
    // 42): only a process running this very executable, unaltered, is believed.
    if let Err(why) = check_peer(&s) {
        if why.impostor {
            note_impostor(&why.reason);
        }
        return Err(std::io::Error::other(why.reason));
    }
    s.set_read_timeout(Some(wait))?;
    s.set_write_timeout(Some(ANSWER_WAIT))?;
    Ok(s)
}

/// Why the process behind a watcher socket is not believed: `impostor` when it is
/// something else than a watcher of an older tacho (replaced on disk by an upgrade,
/// which is no one's act against tacho).
struct Untrusted {
    reason: String,
    impostor: bool,
}

/// Whether the process at the other end of `s` is a watcher tacho started: it runs
/// the same executable file as this process (the same device and inode behind
/// `/proc/PID/exe`), with no code mapped that this process does not run and the user
/// could have written, and no tracer attached.
fn check_peer(s: &UnixStream) -> Result<(), Untrusted> {
    use std::os::unix::fs::MetadataExt;
    let bad = |reason: String| Untrusted {
        reason,
        impostor: true,
    };
    let cred = rustix::net::sockopt::socket_peercred(s)
        .map_err(|e| bad(format!("the watcher socket names no process: {e}")))?;
    let pid = cred.pid.as_raw_nonzero().get();
    if cred.uid != rustix::process::geteuid() {
        return Err(bad(format!(
            "the process answering on the watcher socket (pid {pid}) runs as another user"
        )));
    }
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let own = std::fs::metadata("/proc/self/exe")
        .map_err(|e| bad(format!("this process's executable: {e}")))?;
    let theirs = std::fs::metadata(proc.join("exe"));
    let same = theirs
        .as_ref()
        .is_ok_and(|m| m.dev() == own.dev() && m.ino() == own.ino());
    if !same {
        let own_path = std::fs::read_link("/proc/self/exe").unwrap_or_default();
        let their_path = std::fs::read_link(proc.join("exe")).unwrap_or_default();
        // A watcher of the tacho this one replaced: not used, and no one's act.
        let upgraded = their_path.as_os_str().as_encoded_bytes()
            == [own_path.as_os_str().as_encoded_bytes(), b" (deleted)"].concat();
        return Err(Untrusted {
            reason: format!(
                "the process answering on the watcher socket (pid {pid}) runs {}, not this tacho ({})",
                their_path.display(),
                own_path.display()
            ),
            impostor: !upgraded,
        });
    }
    // The code it runs: every executable mapping of the peer is one this process has
    // too (the same device and inode), or a file the user cannot have written (owned
    // by root, not writable by group or others, when this process is not root). A
    // library preloaded, audited or found through another `LD_LIBRARY_PATH` is code
    // of the user's choosing; the same libraries found through another path are not.
    if pid != std::process::id() as i32 {
        // This process's mappings, read once (a hook asks its watcher more than once).
        static OURS: std::sync::OnceLock<Option<Vec<(String, u64, String)>>> =
            std::sync::OnceLock::new();
        let ours = OURS.get_or_init(|| exec_maps("/proc/self/maps"));
        let theirs = exec_maps(&format!("/proc/{pid}/maps"));
        let (Some(ours), Some(theirs)) = (ours, theirs) else {
            return Err(bad(format!(
                "the watcher's mappings (pid {pid}) cannot be read"
            )));
        };
        let root = rustix::process::geteuid().is_root();
        for (dev, ino, path) in theirs {
            if ours.iter().any(|(d, i, _)| *d == dev && *i == ino) {
                continue;
            }
            // A library an upgrade replaced on disk since the watcher started: it is
            // not used, and that is no one's act.
            if path.ends_with(" (deleted)") {
                return Err(Untrusted {
                    reason: format!(
                        "the watcher (pid {pid}) runs a library since replaced: {path}"
                    ),
                    impostor: false,
                });
            }
            let system = !root
                && std::fs::metadata(&path).is_ok_and(|m| {
                    format!(
                        "{:x}:{:x}",
                        rustix::fs::major(m.dev()),
                        rustix::fs::minor(m.dev())
                    ) == dev
                        && m.ino() == ino
                        && m.uid() == 0
                        && m.mode() & 0o022 == 0
                });
            if !system {
                return Err(bad(format!(
                    "the watcher (pid {pid}) runs code this process does not: {path}"
                )));
            }
        }
    }
    if pid != std::process::id() as i32
        && let Ok(status) = std::fs::read_to_string(proc.join("status"))
        && let Some(t) = status
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .map(str::trim)
        && t != "0"
    {
        return Err(bad(format!(
            "the watcher (pid {pid}) is traced by process {t}"
        )));
    }
    Ok(())
}

/// The executable file mappings of a process's `maps` file: (device as `major:minor`
/// in hex, inode, path). `None` when it cannot be read.
fn exec_maps(maps: &str) -> Option<Vec<(String, u64, String)>> {
    let text = std::fs::read_to_string(maps).ok()?;
    let mut out: Vec<(String, u64, String)> = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(_), Some(perms), Some(_), Some(dev), Some(ino)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path: Vec<&str> = f.collect();
        let Ok(ino) = ino.parse::<u64>() else {
            continue;
        };
        if ino == 0 || !perms.contains('x') {
            continue;
        }
        // `08:01` as the kernel prints it; normalised to no leading zeros.
        let dev = dev
            .split_once(':')
            .and_then(|(a, b)| {
                Some(format!(
                    "{:x}:{:x}",
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?
                ))
            })
            .unwrap_or_default();
        if !out.iter().any(|(d, i, _)| *d == dev && *i == ino) {
            out.push((dev, ino, path.join(" ")));
        }
    }
    Some(out)
}

/// Impostors met by this process (each described once), for the caller to record.
static IMPOSTORS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn note_impostor(reason: &str) {
    if let Ok(mut v) = IMPOSTORS.lock()
        && !v.iter().any(|r| r == reason)
        && v.len() < 16
    {
        v.push(reason.to_owned());
    }
}

/// The processes that posed as a workspace's watcher since this was last asked (none
/// of their answers was used): evidence for the session being recorded (SPEC §10.6).
pub fn take_impostors() -> Vec<String> {
    IMPOSTORS
        .lock()
        .map(|mut v| std::mem::take(&mut *v))
        .unwrap_or_default()
}

fn ask<R: for<'de> Deserialize<'de>>(socket: &Path, req: &Request) -> std::io::Result<R> {
    ask_within(socket, req, ANSWER_WAIT)
}

fn ask_within<R: for<'de> Deserialize<'de>>(
    socket: &Path,
    req: &Request,
    wait: Duration,
) -> std::io::Result<R> {
    let mut s = connect(socket, wait)?;
    let mut line = serde_json::to_vec(req).map_err(std::io::Error::other)?;
    line.push(b'\n');
    s.write_all(&line)?;
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply)?;
    serde_json::from_str(&reply).map_err(std::io::Error::other)
}

/// Asks `workspace`'s watcher what changed since `since`; `None` when no watcher
/// answers (none runs, or it failed): the caller scans without one.
pub(crate) fn changes_since(
    cache_dir: &Path,
    workspace: &Path,
    since: Option<Token>,
    relist: bool,
) -> Option<Answer> {
    // No socket, no watcher: one failed `connect` costs a few microseconds.
    let r: SinceReply = ask_own(
        cache_dir,
        workspace,
        &Request::Since { since, relist },
        ANSWER_WAIT,
    )?;
    Some(Answer {
        token: r.token,
        paths: r.paths,
    })
}

/// Asks `workspace`'s watcher to take a full snapshot itself; `None` when no watcher
/// answers (none runs, it failed, or it predates the request): the caller asks what
/// changed instead.
pub(crate) fn served_snapshot(
    cache_dir: &Path,
    workspace: &Path,
    max_file_bytes: u64,
) -> Option<SnapshotReply> {
    ask_own(
        cache_dir,
        workspace,
        &Request::Snapshot { max_file_bytes },
        SERVE_WAIT,
    )
}

/// Asks `workspace`'s watcher about its files; `None` when none answers, or when the
/// one answering watches another workspace or store (a socket moved into this one's
/// place: an impostor, recorded as one).
fn ask_own<R: for<'de> Deserialize<'de>>(
    cache_dir: &Path,
    workspace: &Path,
    req: &Request,
    wait: Duration,
) -> Option<R> {
    let socket = socket_path(cache_dir, workspace);
    let named: Named<R> = ask_within(&socket, req, wait).ok()?;
    let own_cache = canonical_or_same(cache_dir);
    if named.workspace != workspace || named.cache_dir != own_cache {
        note_impostor(&format!(
            "the watcher answering on the socket of {} watches {} for the store of {}",
            workspace.display(),
            named.workspace.display(),
            named.cache_dir.display()
        ));
        return None;
    }
    Some(named.reply)
}

/// The status of `workspace`'s watcher, `None` when none answers.
pub fn status(cache_dir: &Path, workspace: &Path) -> Option<WatchStatus> {
    ask(&socket_path(cache_dir, workspace), &Request::Status).ok()
}

/// Whether a watcher of `workspace` runs, without asking it (it may be busy listing
/// the workspace): its lock is held.
pub fn is_running(cache_dir: &Path, workspace: &Path) -> bool {
    let lock_file = lock_path(&socket_path(cache_dir, workspace));
    let Ok(lock) = std::fs::File::open(&lock_file) else {
        return false;
    };
    match lock.try_lock_shared() {
        Ok(()) => {
            let _ = lock.unlock();
            false
        }
        Err(_) => true,
    }
}

/// Every watcher that answers on a socket of `cache_dir`, in workspace order.
pub fn running(cache_dir: &Path) -> Vec<WatchStatus> {
    let Ok(rd) = std::fs::read_dir(cache_dir.join("watch")) else {
        return Vec::new();
    };
    let mut out: Vec<WatchStatus> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .filter_map(|p| ask(&p, &Request::Status).ok())
        .collect();
    out.sort_by(|a, b| a.workspace.cmp(&b.workspace));
    out
}

/// Asks `workspace`'s watcher to stop; whether one answered.
pub fn stop(cache_dir: &Path, workspace: &Path) -> bool {
    let socket = socket_path(cache_dir, workspace);
    let answered = ask::<serde_json::Value>(&socket, &Request::Stop).is_ok();
    if answered {
        // It removes its socket as it leaves; wait for that, briefly.
        for _ in 0..100 {
            if !socket.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    answered
}

/// Why a watcher could not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("a watcher of {0} is already running")]
    Running(String),
    #[error("cannot watch: {0}")]
    Cannot(String),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}

/// The directories a full listing reads: every directory the walk read, and every
/// directory that holds a listed path (a tracked file inside an ignored directory).
fn dirs_to_watch(workspace: &Path, skip: Option<&str>) -> Result<BTreeSet<String>, SnapshotError> {
    let listing = super::scan::list(workspace, skip, 1)?;
    let mut dirs: BTreeSet<String> = BTreeSet::new();
    dirs.insert(String::new());
    for d in &listing.dirs {
        dirs.insert(d.path.clone());
    }
    for p in listing.paths() {
        let mut at = p;
        while let Some(i) = at.rfind('/') {
            at = &at[..i];
            if !dirs.insert(at.to_owned()) {
                break;
            }
        }
    }
    // Nested repositories are stamped among the walk's directories but never listed.
    dirs.retain(|d| d.is_empty() || !workspace.join(d).join(".git").exists());
    Ok(dirs)
}

/// Whether a workspace-relative path is never part of a snapshot: inside `.git` or in
/// tacho's own directory `skip`.
pub(crate) fn never_snapshotted(rel: &str, skip: Option<&str>) -> bool {
    rel.split('/').any(|c| c == ".git")
        || skip.is_some_and(|s| rel == s || rel.strip_prefix(s).is_some_and(|r| r.starts_with('/')))
}

/// The watcher's state.
struct Watcher {
    workspace: PathBuf,
    /// The snapshot cache directory of its store (canonical): with the workspace, what
    /// it names itself by in every answer.
    cache_dir: PathBuf,
    skip: Option<String>,
    fd: std::os::fd::OwnedFd,
    /// Watch descriptor → workspace-relative directory.
    dirs: HashMap<i32, String>,
    /// Changed path → the generation it was last seen changing in.
    changed: HashMap<String, u64>,
    instance: u64,
    generation: u64,
    /// Tokens older than this are answered "unknown".
    floor: u64,
    /// The next answer must list the workspace again first (a directory moved, the
    /// queue overflowed, an ignore rule changed).
    relist: bool,
    /// The watch could not be set up completely: every answer is "unknown" until a
    /// listing succeeds.
    broken: bool,
    /// A directory cannot be watched for want of resources (the per-user limit of
    /// watches, memory): the watcher stops, and scans go on without one, rather than
    /// answer "unknown" after a listing at every request.
    gave_up: Option<String>,
    root_gone: bool,
    answered: u64,
    started_unix: i64,
    /// What taking snapshots here keeps between them.
    serving: Option<Serving>,
    /// Events read so far, and the count at each path's last one: a file hashed ahead
    /// counts only while no event for it was read after its hashing began.
    events: u64,
    event_at: HashMap<String, u64>,
    /// Files closed after writing (or moved into place) since the last hashing ahead.
    written: BTreeSet<String>,
    /// Files hashed ahead of any snapshot (SPEC.md §10.6).
    ahead: HashMap<String, super::watched::HashedAhead>,
    /// A snapshot was taken (or files hashed ahead) since the small packs were last
    /// looked at: they are merged once the watcher is idle.
    merge_due: bool,
}

/// How long nothing must happen before a watcher merges its small packs.
const MERGE_IDLE: Duration = Duration::from_millis(100);

/// At most this many files hashed ahead are kept (more: forgotten, read again).
const AHEAD_KEPT_MAX: usize = 4096;

/// The store a watcher takes snapshots into, and the stat cache it holds.
struct Serving {
    store: super::SnapshotStore,
    /// The files of the store's pack directory when this handle last looked: one of
    /// them removed since (gc, or the small packs merged) opens the store again, so
    /// that no object is found in a pack that is gone. A pack only added (the
    /// watcher's own) is found by the handle itself, which lists the packs again when
    /// an object is missing. `None`: open it again at the next snapshot.
    packs: Option<BTreeSet<std::ffi::OsString>>,
    held: Option<super::watched::HeldCache>,
}

impl Serving {
    /// The names in the store's pack directory (`None` when it cannot be listed).
    fn pack_files(store: &super::SnapshotStore) -> Option<BTreeSet<std::ffi::OsString>> {
        let rd = std::fs::read_dir(store.pack_dir()).ok()?;
        rd.map(|e| e.map(|e| e.file_name()).ok()).collect()
    }

    fn new(store: &super::SnapshotStore) -> Self {
        Serving {
            packs: Self::pack_files(store),
            store: store.clone(),
            held: None,
        }
    }

    /// Readies the store for a snapshot with the asker's size limit: its repository
    /// opened again (at first use) when a pack was removed since.
    fn refresh(&mut self, max_file_bytes: u64) {
        let now = Self::pack_files(&self.store);
        let removed = match (&self.packs, &now) {
            (Some(was), Some(now)) => !was.is_subset(now),
            _ => true,
        };
        if removed {
            // (Opened at first use, after the listing: a pack removed in between makes
            // the next snapshot open it again.)
            self.store = self.store.reopened();
        }
        self.packs = now;
        self.store.max_file_bytes = max_file_bytes;
    }
}

const MASK: WatchFlags = WatchFlags::MODIFY
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::CLOSE_WRITE)
    .union(WatchFlags::CREATE)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::DONT_FOLLOW)
    .union(WatchFlags::EXCL_UNLINK);

impl Watcher {
    fn join(dir: &str, name: &str) -> String {
        if dir.is_empty() {
            name.to_owned()
        } else {
            format!("{dir}/{name}")
        }
    }

    /// Whether a path is never part of a snapshot (tacho's own directory, `.git`).
    fn outside(&self, rel: &str) -> bool {
        never_snapshotted(rel, self.skip.as_deref())
    }

    /// Watches a directory. One that is gone (its parent's event says so) or that may
    /// not be read (a scan cannot read it either) is passed over; running out of
    /// watches or memory gives up.
    fn add(&mut self, rel: &str) -> Result<(), ()> {
        match inotify::add_watch(&self.fd, self.workspace.join(rel), MASK) {
            Ok(wd) => {
                self.dirs.insert(wd, rel.to_owned());
                Ok(())
            }
            Err(
                rustix::io::Errno::NOENT | rustix::io::Errno::ACCESS | rustix::io::Errno::NOTDIR,
            ) => Ok(()),
            Err(e) => {
                let e = std::io::Error::from(e);
                self.gave_up = Some(match e.raw_os_error() {
                    Some(28) => format!(
                        "watching {}: {e}: more directories than fs.inotify.max_user_watches allows",
                        self.workspace.join(rel).display()
                    ),
                    _ => format!("watching {}: {e}", self.workspace.join(rel).display()),
                });
                Err(())
            }
        }
    }

    /// Watches what a listing reads, from scratch.
    fn relist(&mut self) {
        self.relist = false;
        for wd in std::mem::take(&mut self.dirs).into_keys() {
            let _ = inotify::remove_watch(&self.fd, wd);
        }
        let dirs = match dirs_to_watch(&self.workspace, self.skip.as_deref()) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("tacho watch: listing {}: {e}", self.workspace.display());
                self.broken = true;
                return;
            }
        };
        self.broken = false;
        for d in dirs {
            if self.add(&d).is_err() {
                return;
            }
        }
    }

    /// Watches a directory that appeared, and everything beneath it, recording each
    /// path found (what was made in it before its watch existed) — unless the ignore
    /// rules ignore it, as a build's output directory: a listing would not read it.
    /// (A tracked file inside one comes with a change of the index, which makes scans
    /// ask for a new listing.)
    ///
    /// Whether `rel` itself is watched (a directory the rules ignore is not, and is not
    /// a change of the listing).
    fn add_tree(&mut self, rel: &str) -> bool {
        let workspace = self.workspace.clone();
        let git = super::scan::git_context(&workspace).ok().flatten();
        let mut rules = super::scan::Rules::new(&workspace, git.as_ref()).ok();
        let mut ignored_dir = |dir: &str| {
            rules
                .as_mut()
                .is_some_and(|r| r.is_ignored_dir(dir).unwrap_or(false))
        };
        if ignored_dir(rel) {
            return false;
        }
        let mut stack = vec![rel.to_owned()];
        while let Some(dir) = stack.pop() {
            if self.outside(&dir)
                || self.workspace.join(&dir).join(".git").exists()
                || ignored_dir(&dir)
            {
                continue;
            }
            if self.add(&dir).is_err() {
                return true;
            }
            let Ok(rd) = std::fs::read_dir(self.workspace.join(&dir)) else {
                continue;
            };
            for entry in rd.flatten() {
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let path = Self::join(&dir, &name);
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(path.clone());
                }
                self.mark(path);
            }
        }
        true
    }

    fn mark(&mut self, rel: String) {
        if self.outside(&rel) {
            return;
        }
        if self.changed.len() >= HELD_MAX && !self.changed.contains_key(&rel) {
            // Forget, and make every token issued so far "unknown".
            self.changed.clear();
            self.event_at.clear();
            self.ahead.clear();
            self.generation += 1;
            self.floor = self.generation;
        }
        self.events += 1;
        self.event_at.insert(rel.clone(), self.events);
        self.changed.insert(rel, self.generation);
    }

    /// Hashes the files written since it last did (when they are few), so that the
    /// next snapshot finds their blobs stored: what inotify told of before any hook
    /// asked.
    fn hash_ahead(&mut self) -> bool {
        if self.written.is_empty() {
            return false;
        }
        let paths: Vec<String> = std::mem::take(&mut self.written).into_iter().collect();
        let Some(serving) = self.serving.as_mut() else {
            return false;
        };
        if paths.len() > super::watched::AHEAD_FILES_MAX || serving.held.is_none() {
            return false;
        }
        // Every event read so far is before the reads below begin.
        let seq = self.events;
        let max = serving.store.max_file_bytes;
        serving.refresh(max);
        self.merge_due = true;
        let hashed = serving.store.hash_ahead(
            &self.workspace,
            self.skip.as_deref(),
            serving.held.as_ref(),
            &paths,
        );
        if self.ahead.len() + hashed.len() > AHEAD_KEPT_MAX {
            self.ahead.clear();
        }
        let any = !hashed.is_empty();
        for (p, entry, written) in hashed {
            self.ahead.insert(
                p,
                super::watched::HashedAhead {
                    entry,
                    written,
                    seq,
                },
            );
        }
        any
    }

    /// Merges the store's small packs (the watcher's own snapshots write one each)
    /// when `at` or more have gathered since it last looked; the handle is then opened
    /// again (its packs are gone).
    fn merge_packs(&mut self, at: usize) {
        if !self.merge_due {
            return;
        }
        let Some(serving) = self.serving.as_mut() else {
            return;
        };
        let merged = serving.store.merge_small_packs(at);
        if at <= super::pack::MERGE_SMALL_PACKS_AT || matches!(merged, Ok(n) if n > 0) {
            self.merge_due = false;
        }
        match merged {
            Ok(0) => {}
            Ok(n) => {
                eprintln!("tacho watch: merged {n} small packs into one");
                serving.packs = None;
            }
            Err(e) => eprintln!("tacho watch: merging small packs: {e}"),
        }
    }

    /// Takes the snapshot a scan would ask for now, ahead of it (after files were
    /// hashed ahead), under the store's write guard — not while gc holds the store. Its
    /// trees, ref and head are then stored: the scan that asks next finds them.
    fn snapshot_ahead(&mut self) {
        // Never the one to list the workspace again: that is a scan's to ask for (its
        // token would be forgotten, and the scan walk).
        if self.relist || self.broken {
            return;
        }
        let Some(serving) = self.serving.as_ref() else {
            return;
        };
        let Ok(Some(_guard)) = serving.store.try_write_guard() else {
            return;
        };
        let max = serving.store.max_file_bytes;
        self.take(max, true);
    }

    /// The files of `paths` hashed ahead with no event read for them since.
    fn still_ahead(&self, paths: &[String]) -> HashMap<String, super::watched::HashedAhead> {
        paths
            .iter()
            .filter_map(|p| {
                let a = self.ahead.get(p)?;
                let last = self.event_at.get(p)?;
                (*last <= a.seq).then(|| (p.clone(), a.clone()))
            })
            .collect()
    }

    /// Reads every queued event.
    fn drain(&mut self) {
        let mut buf = vec![std::mem::MaybeUninit::<u8>::uninit(); 64 * 1024];
        let mut reader = inotify::Reader::new(&self.fd, &mut buf);
        let mut events: Vec<(i32, ReadFlags, Option<String>)> = Vec::new();
        loop {
            match reader.next() {
                Ok(ev) => {
                    let name = ev
                        .file_name()
                        .map(|n| n.to_str().map(str::to_owned).unwrap_or_default());
                    events.push((ev.wd(), ev.events(), name));
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break, // EAGAIN: the queue is empty.
            }
        }
        for (wd, flags, name) in events {
            self.event(wd, flags, name);
        }
    }

    fn event(&mut self, wd: i32, flags: ReadFlags, name: Option<String>) {
        if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
            self.relist = true;
            return;
        }
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return;
        };
        if flags.contains(ReadFlags::IGNORED) {
            self.dirs.remove(&wd);
            if dir.is_empty() {
                self.root_gone = true;
            }
            return;
        }
        let Some(name) = name else {
            // An event on the watched directory itself.
            if dir.is_empty() && flags.intersects(ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF) {
                self.root_gone = true;
            }
            return;
        };
        if name.is_empty() {
            // Not UTF-8: the listing leaves such names out, but a directory's content
            // is then unknown.
            self.relist = true;
            return;
        }
        let rel = Self::join(&dir, &name);
        if self.outside(&rel) {
            return;
        }
        if name == ".gitignore" || name == ".ignore" {
            // Which directories a listing reads may change.
            self.relist = true;
        }
        if !flags.contains(ReadFlags::ISDIR)
            && flags.intersects(ReadFlags::CLOSE_WRITE | ReadFlags::MOVED_TO)
        {
            self.written.insert(rel.clone());
        }
        if flags.contains(ReadFlags::ISDIR) {
            if flags.contains(ReadFlags::MOVED_FROM) {
                // Its watches now name paths it no longer has.
                self.relist = true;
            } else if flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO)
                && !self.add_tree(&rel)
            {
                return;
            }
        }
        self.mark(rel);
    }

    /// `reply`, with what this watcher watches and for which store: a socket moved
    /// from another watcher's place is told apart by it.
    fn named<R: Serialize>(&self, reply: R) -> Named<R> {
        Named {
            workspace: self.workspace.clone(),
            cache_dir: self.cache_dir.clone(),
            reply,
        }
    }

    /// Takes a full snapshot for a scan that asked (with the asker's size limit).
    fn snapshot(&mut self, max_file_bytes: u64) -> SnapshotReply {
        self.take(max_file_bytes, false)
    }

    /// A full snapshot, for a scan that asked or (`ahead_of_time`) for the next one.
    fn take(&mut self, max_file_bytes: u64, ahead_of_time: bool) -> SnapshotReply {
        let Some(mut serving) = self.serving.take() else {
            let a = self.since(None, false);
            return SnapshotReply {
                token: a.token,
                snapshot: None,
            };
        };
        let workspace = self.workspace.clone();
        let skip = self.skip.clone();
        let mut token = None;
        serving.refresh(max_file_bytes);
        self.merge_due = true;
        let taken = serving
            .store
            .take_served(
                &workspace,
                skip.as_deref(),
                &mut serving.held,
                ahead_of_time,
                |since, relist| {
                    let a = self.since(since, relist);
                    token = Some(a.token);
                    let ahead = a
                        .paths
                        .as_deref()
                        .map(|p| self.still_ahead(p))
                        .unwrap_or_default();
                    (a.token, a.paths, ahead)
                },
            )
            .unwrap_or_else(|e| {
                eprintln!("tacho watch: a snapshot of {}: {e}", workspace.display());
                None
            });
        self.serving = Some(serving);
        let token = match token {
            Some(t) => t,
            // (Ahead of time, nobody waits for a token: none is issued.)
            None if ahead_of_time => Token {
                instance: self.instance,
                generation: self.generation,
            },
            None => self.since(None, false).token,
        };
        SnapshotReply {
            token,
            snapshot: taken.as_ref().map(ServedSnapshot::of),
        }
    }

    /// Answers "what changed since".
    fn since(&mut self, since: Option<Token>, relist: bool) -> SinceReply {
        self.drain();
        let relisting = self.relist || relist || self.broken;
        if relisting {
            self.relist();
            self.changed.clear();
            self.event_at.clear();
            self.ahead.clear();
        }
        let paths = match since {
            Some(t) if !relisting && t.instance == self.instance && t.generation >= self.floor => {
                let mut p: Vec<String> = self
                    .changed
                    .iter()
                    .filter(|(_, g)| **g >= t.generation)
                    .map(|(p, _)| p.clone())
                    .collect();
                p.sort_unstable();
                Some(p)
            }
            _ => None,
        };
        // Events read from here on carry the new token's generation or a later one.
        self.generation += 1;
        if relisting {
            self.floor = self.generation;
        }
        self.answered += 1;
        SinceReply {
            token: Token {
                instance: self.instance,
                generation: self.generation,
            },
            paths,
        }
    }

    fn status(&self) -> WatchStatus {
        WatchStatus {
            workspace: self.workspace.display().to_string(),
            pid: std::process::id(),
            instance: self.instance,
            dirs: self.dirs.len(),
            held: self.changed.len(),
            answered: self.answered,
            started_unix: self.started_unix,
        }
    }
}

/// Runs a watcher of `workspace` until asked to stop or the workspace is gone, or — with
/// `idle` — until no scan has asked for that long. `skip` is tacho's own directory
/// inside it, if any. `ready` is called once the socket answers.
pub(crate) fn serve(
    store: &super::SnapshotStore,
    workspace: &Path,
    skip: Option<String>,
    idle: Option<Duration>,
    ready: impl FnOnce(),
) -> Result<(), WatchError> {
    let socket = socket_path(&store.cache_dir, workspace);
    let dir = socket.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| SnapshotError::io(dir, e))?;
    // One watcher per workspace: it holds this lock for its whole life.
    let lock_file = lock_path(&socket);
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_file)
        .map_err(|e| SnapshotError::io(&lock_file, e))?;
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return Err(WatchError::Running(workspace.display().to_string()));
    }
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK)
        .map_err(|e| SnapshotError::io(workspace, e.into()))?;
    let started = super::now_ns();
    let mut w = Watcher {
        workspace: workspace.to_path_buf(),
        cache_dir: canonical_or_same(&store.cache_dir),
        skip,
        fd,
        dirs: HashMap::new(),
        changed: HashMap::new(),
        // Distinct for every run: a token from an earlier run is never taken for one
        // of this run's.
        instance: u64::from_le_bytes(
            blake3::hash(format!("{}:{started}", std::process::id()).as_bytes()).as_bytes()[..8]
                .try_into()
                .unwrap_or([1; 8]),
        ),
        generation: 1,
        floor: 1,
        relist: false,
        broken: false,
        gave_up: None,
        root_gone: false,
        answered: 0,
        started_unix: started / 1_000_000_000,
        serving: Some(Serving::new(store)),
        events: 0,
        event_at: HashMap::new(),
        written: BTreeSet::new(),
        ahead: HashMap::new(),
        merge_due: false,
    };
    w.relist();
    if let Some(why) = w.gave_up.take() {
        return Err(WatchError::Cannot(why));
    }
    // A socket left by a watcher that died is replaced (the lock says none runs).
    let _ = std::fs::remove_file(&socket);
    let addr = socket_addr(&socket).map_err(|e| SnapshotError::io(&socket, e))?;
    let listener = UnixListener::bind(&addr.path).map_err(|e| SnapshotError::io(&socket, e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| SnapshotError::io(&socket, e))?;
    ready();
    let result = run(&mut w, &listener, &socket, idle);
    let _ = std::fs::remove_file(&socket);
    drop(lock);
    result.map_err(|e| WatchError::Snapshot(SnapshotError::io(&socket, e)))
}

fn run(
    w: &mut Watcher,
    listener: &UnixListener,
    socket: &Path,
    idle: Option<Duration>,
) -> std::io::Result<()> {
    use rustix::event::{PollFd, PollFlags};
    let mut last_request = std::time::Instant::now();
    loop {
        // Woken once a minute at least, to notice its socket gone (the data directory
        // deleted: nobody could reach it any more), and when the idle time is up.
        let mut wait = Duration::from_secs(60);
        // Small packs are merged once nothing happened for a moment.
        if w.merge_due {
            wait = MERGE_IDLE;
        }
        if let Some(idle) = idle {
            let left = idle.saturating_sub(last_request.elapsed());
            if left.is_zero() {
                eprintln!(
                    "tacho watch: no scan asked for {} s; stopping",
                    idle.as_secs()
                );
                return Ok(());
            }
            wait = wait.min(left);
        }
        let (inotify_ready, socket_ready) = {
            let mut fds = [
                PollFd::new(&w.fd, PollFlags::IN),
                PollFd::new(listener, PollFlags::IN),
            ];
            let timeout = rustix::event::Timespec {
                tv_sec: wait.as_secs() as i64,
                tv_nsec: i64::from(wait.subsec_nanos()),
            };
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
        };
        if inotify_ready {
            w.drain();
            // Files written: hashed now, unless a scan is waiting (it reads them).
            if !socket_ready && w.hash_ahead() {
                w.snapshot_ahead();
            }
        }
        if !inotify_ready && !socket_ready {
            w.merge_packs(super::pack::MERGE_SMALL_PACKS_AT);
        }
        if !inotify_ready && !socket_ready && !socket.exists() {
            eprintln!("tacho watch: {} is gone; stopping", socket.display());
            return Ok(());
        }
        if let Some(why) = &w.gave_up {
            eprintln!("tacho watch: {why}; stopping (snapshots scan without a watcher)");
            return Ok(());
        }
        if w.root_gone {
            eprintln!("tacho watch: {} is gone; stopping", w.workspace.display());
            return Ok(());
        }
        if socket_ready {
            loop {
                let stream = match listener.accept() {
                    Ok((s, _)) => s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                };
                last_request = std::time::Instant::now();
                if serve_one(w, stream) {
                    return Ok(());
                }
            }
        }
        // Never idle: merged all the same once they are many.
        w.merge_packs(super::pack::MERGE_SMALL_PACKS_BUSY_AT);
    }
}

/// Answers one connection; whether the watcher is to stop.
fn serve_one(w: &mut Watcher, stream: UnixStream) -> bool {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(ANSWER_WAIT));
    let _ = stream.set_write_timeout(Some(ANSWER_WAIT));
    let mut line = String::new();
    // A request is one short line: more than this is not one.
    let mut reader = BufReader::new(std::io::Read::take(&stream, 4096));
    if reader.read_line(&mut line).is_err() {
        return false;
    }
    let (reply, stop) = match serde_json::from_str::<Request>(&line) {
        Ok(Request::Since { since, relist }) => {
            let r = w.since(since, relist);
            (serde_json::to_vec(&w.named(r)), false)
        }
        Ok(Request::Snapshot { max_file_bytes }) => {
            let r = w.snapshot(max_file_bytes);
            (serde_json::to_vec(&w.named(r)), false)
        }
        Ok(Request::Status) => (serde_json::to_vec(&w.status()), false),
        Ok(Request::Stop) => (
            serde_json::to_vec(&serde_json::json!({"stopping": true})),
            true,
        ),
        Err(e) => (
            serde_json::to_vec(&serde_json::json!({"error": e.to_string()})),
            false,
        ),
    };
    if let Ok(mut bytes) = reply {
        bytes.push(b'\n');
        let _ = (&stream).write_all(&bytes);
    }
    stop
}
