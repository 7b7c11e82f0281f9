//! The application context: where the data lives, the clock, the id source and where
//! notes go. Every operation takes a [`Tacho`]; tests build one with a fixed clock and
//! fixed ids.

use crate::id::SessionId;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tacho_git::snapshot::{SnapshotError, SnapshotStore};
use tacho_store::{Store, StoreError, StoreOptions};

use crate::error::{ErrorKind, Kind};

/// The time operations record. Passed in so that tests can fix it.
pub trait Clock: Send + Sync {
    /// Now, in nanoseconds since the Unix epoch.
    fn now_unix_ns(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_ns(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
    }
}

/// Where new session and goal ids come from. Passed in so that tests can fix them.
pub trait Ids: Send + Sync {
    /// A fresh session id (`ses_…`).
    fn session_id(&self) -> String;
    /// A fresh goal id (`goal_…`).
    fn goal_id(&self) -> String;
}

/// Time-ordered ids: a prefix and a lower-case ULID.
#[derive(Debug, Clone, Copy, Default)]
pub struct UlidIds;

impl Ids for UlidIds {
    fn session_id(&self) -> String {
        format!("ses_{}", ulid::Ulid::generate().to_string().to_lowercase())
    }
    fn goal_id(&self) -> String {
        format!("goal_{}", ulid::Ulid::generate().to_string().to_lowercase())
    }
}

/// Where an operation's notes go (a repaired torn tail, a snapshot left out, a stall
/// hint): things a user should see that are not the operation's result.
pub trait Notes: Send + Sync {
    fn note(&self, text: &str);
}

/// Notes on stderr, one line each.
#[derive(Debug, Clone, Copy, Default)]
pub struct StderrNotes;

impl Notes for StderrNotes {
    fn note(&self, text: &str) {
        eprintln!("{text}");
    }
}

/// Why the data directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("no data directory: set TACHO_HOME to where tacho should keep its data")]
    NoDataDir,
    #[error("TACHO_LOCK_TIMEOUT_MS={0:?} is not a whole number of milliseconds")]
    BadLockTimeout(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Kind for OpenError {
    fn kind(&self) -> ErrorKind {
        match self {
            OpenError::NoDataDir => ErrorKind::Io,
            OpenError::BadLockTimeout(_) => ErrorKind::Input,
            OpenError::Store(e) => e.kind(),
        }
    }
}

/// How to open tacho's data.
#[derive(Clone)]
pub struct Config {
    /// The data directory (`$TACHO_HOME`, else the platform data directory).
    pub data_dir: PathBuf,
    pub store: StoreOptions,
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn Ids>,
    pub notes: Arc<dyn Notes>,
    /// The file system the log is reached through: the real one, or one wrapping it
    /// (tests count the bytes an operation reads with `tacho_store::vfs::CountingFs`).
    pub vfs: Arc<dyn tacho_store::vfs::Vfs>,
}

impl Config {
    /// The configuration users get: `$TACHO_HOME` when set and not empty, else `tacho`
    /// in the platform data directory (`$XDG_DATA_HOME`, or `~/.local/share` on
    /// Linux); `TACHO_LOCK_TIMEOUT_MS` (how long a writer waits for another writer of
    /// the same session, default 10000); the system clock, ULIDs, notes on stderr.
    pub fn from_env() -> Result<Config, OpenError> {
        let data_dir = match std::env::var_os("TACHO_HOME").filter(|h| !h.is_empty()) {
            Some(h) => PathBuf::from(h),
            None => dirs::data_dir()
                .map(|d| d.join("tacho"))
                .ok_or(OpenError::NoDataDir)?,
        };
        let mut store = StoreOptions::default();
        if let Ok(v) = std::env::var("TACHO_LOCK_TIMEOUT_MS") {
            let ms: u64 = v
                .parse()
                .map_err(|_| OpenError::BadLockTimeout(v.clone()))?;
            store.lock_timeout = Duration::from_millis(ms);
        }
        // Tests set it low, to compact the session index while writers append.
        if let Some(n) = std::env::var("TACHO_INDEX_COMPACT_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            store.index_compact_bytes = n;
        }
        // Tests set it low, to fill several packs with a small input.
        if let Some(n) = std::env::var("TACHO_PACK_SESSIONS_MAX")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|n| *n > 0)
        {
            store.pack_sessions_max = n;
        }
        Ok(Config {
            data_dir,
            store,
            clock: Arc::new(SystemClock),
            ids: Arc::new(UlidIds),
            notes: Arc::new(StderrNotes),
            vfs: Arc::new(tacho_store::vfs::RealFs),
        })
    }
}

/// tacho's data, opened: the event log, the snapshot store (opened on first use) and
/// the context every operation needs.
pub struct Tacho {
    data_dir: PathBuf,
    log: Store,
    snapshots: OnceLock<SnapshotStore>,
    /// The workspace of the last full snapshot this process took without a watcher's
    /// answer, and the files it listed: what decides whether a hook starts a watcher.
    pub(crate) unwatched_scan: Mutex<Option<(PathBuf, u64)>>,
    clock: Arc<dyn Clock>,
    ids: Arc<dyn Ids>,
    notes: Arc<dyn Notes>,
}

impl Tacho {
    /// Opens the event log under `<data>/log`.
    pub fn open(cfg: Config) -> Result<Tacho, OpenError> {
        // The index's facts are the application's: their rules are recorded with a new
        // store's index.
        let opts = StoreOptions {
            facts_rules: crate::index::FACTS_RULES,
            ..cfg.store
        };
        let log = Store::open_with(cfg.vfs, cfg.data_dir.join("log"), opts)?;
        Ok(Tacho {
            data_dir: cfg.data_dir,
            log,
            snapshots: OnceLock::new(),
            unwatched_scan: Mutex::new(None),
            clock: cfg.clock,
            ids: cfg.ids,
            notes: cfg.notes,
        })
    }

    /// Opens with [`Config::from_env`].
    pub fn from_env() -> Result<Tacho, OpenError> {
        Tacho::open(Config::from_env()?)
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The event log's directory.
    pub fn log_dir(&self) -> &Path {
        self.log.root()
    }

    pub(crate) fn log(&self) -> &Store {
        &self.log
    }

    /// The snapshot store (`<data>/snapshots`, a bare Git repository, with its stat
    /// caches under `<data>/cache/snapshots`), created on first use.
    pub(crate) fn snapshots(&self) -> Result<&SnapshotStore, SnapshotError> {
        if let Some(s) = self.snapshots.get() {
            return Ok(s);
        }
        let s = SnapshotStore::open(
            self.data_dir.join("snapshots"),
            self.data_dir.join("cache").join("snapshots"),
        )?;
        Ok(self.snapshots.get_or_init(|| s))
    }

    /// Whether a snapshot store exists (queries never create one).
    pub(crate) fn has_snapshot_store(&self) -> bool {
        self.data_dir.join("snapshots").join("HEAD").exists()
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now_unix_ns()
    }

    pub(crate) fn new_session_id(&self) -> String {
        self.ids.session_id()
    }

    pub(crate) fn new_goal_id(&self) -> String {
        self.ids.goal_id()
    }

    pub(crate) fn note(&self, text: &str) {
        self.notes.note(text);
    }

    /// Resolves a session id or unique prefix (what a user gave) to the session's id.
    pub fn resolve_session(&self, given: &str) -> Result<SessionId, StoreError> {
        self.log.resolve_session(given).map(SessionId::resolved)
    }
}
