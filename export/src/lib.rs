//! tacho's exporters, a frontend of the application layer: audit records as JSON
//! Lines ([`jsonl`]) and sessions as OpenTelemetry traces ([`otlp`]). Both place
//! events with the same span fold (`tacho_projections::audit`), so a record's
//! `span_id` is the id of the span the trace export gives the event.

pub mod jsonl;
pub mod otlp;

use std::path::PathBuf;

/// Sessions rendered ahead of the one being written, at most.
const WINDOW: usize = 32;

/// Runs `work(i)` for `i` in `0..count` on every core, at most [`WINDOW`] ahead of
/// the one `consume` takes, and hands the results to `consume` in order on this
/// thread. Stops the workers when `consume` fails.
pub(crate) fn in_order<T: Send, E>(
    count: usize,
    work: impl Fn(usize) -> T + Sync,
    mut consume: impl FnMut(usize, T) -> Result<(), E>,
) -> Result<(), E> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    if threads < 2 || count < 2 {
        for i in 0..count {
            consume(i, work(i))?;
        }
        return Ok(());
    }
    struct Shared<T> {
        ready: std::collections::BTreeMap<usize, T>,
        taken: usize,
        stop: bool,
    }
    let shared = std::sync::Mutex::new(Shared {
        ready: std::collections::BTreeMap::new(),
        taken: 0,
        stop: false,
    });
    let cond = std::sync::Condvar::new();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let lock = || shared.lock().unwrap_or_else(|e| e.into_inner());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    {
                        let mut g = lock();
                        while i >= g.taken + WINDOW && !g.stop {
                            g = cond.wait(g).unwrap_or_else(|e| e.into_inner());
                        }
                        if g.stop {
                            break;
                        }
                    }
                    let done = work(i);
                    lock().ready.insert(i, done);
                    cond.notify_all();
                }
            });
        }
        let mut run = || {
            for i in 0..count {
                let done = {
                    let mut g = lock();
                    loop {
                        if let Some(d) = g.ready.remove(&i) {
                            g.taken = i + 1;
                            break d;
                        }
                        g = cond.wait(g).unwrap_or_else(|e| e.into_inner());
                    }
                };
                cond.notify_all();
                consume(i, done)?;
            }
            Ok(())
        };
        let r = run();
        lock().stop = true;
        cond.notify_all();
        r
    })
}

/// A session's output when it is small enough to be made ahead, else `Large`: the
/// consuming thread makes it itself, streaming, when its turn comes (so memory stays
/// bounded whatever a session's length).
pub(crate) enum Ahead<T> {
    Ready(T),
    Large,
}

/// The most a session's output made ahead may hold.
pub(crate) const AHEAD_BYTES_MAX: usize = 1 << 20;

/// Reports progress: sessions done, sessions in all, events so far.
pub type Progress<'a> = dyn FnMut(usize, usize, u64) + 'a;

/// What an export wrote.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Exported {
    pub sessions: usize,
    pub events: u64,
    /// Sessions that could not be read to their end, and why: their records stop at
    /// the damage.
    pub damaged: Vec<(String, String)>,
}

impl Exported {
    /// Counts one session's output.
    pub(crate) fn add(&mut self, session: &str, r: Rendered) {
        self.sessions += 1;
        self.events += r.events;
        if let Some(d) = r.damage {
            self.damaged.push((session.to_string(), d));
        }
    }
}

/// What making one session's output gave: its events, and the damage that stopped it.
pub(crate) struct Rendered {
    pub events: u64,
    pub damage: Option<String>,
}

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("writing the export: {0}")]
    Write(#[from] std::io::Error),
    #[error(transparent)]
    Send(#[from] otlp::SendError),
    #[error(transparent)]
    File(#[from] tacho_app::userfile::UserFileError),
    #[error("{}: {source}", path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl tacho_app::Kind for ExportError {
    fn kind(&self) -> tacho_app::ErrorKind {
        match self {
            ExportError::File(e) => e.kind(),
            _ => tacho_app::ErrorKind::Io,
        }
    }
}

/// Every export's output file: written beside a regular file and renamed over it at
/// the commit, in place into a device or FIFO, never through a repository's or a
/// dangling link (tacho-app's `userfile`, whose rules ARCHITECTURE.md lists).
pub use tacho_app::userfile::OutputFile;
