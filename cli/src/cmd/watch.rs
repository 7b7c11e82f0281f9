//! `tacho watch`: a watcher of a workspace, so that full snapshots (the hooks' snapshot
//! around every shell command) look only at the paths that changed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Subcommand;
use tacho_app::WatchStarted;
use tacho_app::render::snapshots as render;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Subcommand)]
pub enum WatchCommand {
    /// Start a watcher of the workspace in the background (returns once it answers).
    Start {
        /// The workspace (default: the current directory).
        path: Option<PathBuf>,
        /// Stop once no snapshot has asked for this long (`90s`, `30m`, `8h`).
        #[arg(long, value_parser = parse_idle)]
        idle: Option<Duration>,
        #[arg(long)]
        json: bool,
    },
    /// Run a watcher of the workspace in the foreground until it is stopped, killed or
    /// the workspace goes away (for a service manager).
    Run {
        /// The workspace (default: the current directory).
        path: Option<PathBuf>,
        /// Stop once no snapshot has asked for this long (`90s`, `30m`, `8h`).
        #[arg(long, value_parser = parse_idle)]
        idle: Option<Duration>,
    },
    /// Stop the workspace's watcher.
    Stop {
        /// The workspace (default: the current directory).
        path: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Every running watcher of this data directory's workspaces.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Whether a watcher of the workspace runs, and what it holds (exit 4 when none).
    Status {
        /// The workspace (default: the current directory).
        path: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

/// How long `start` waits for the new watcher to answer.
const START_WAIT: Duration = Duration::from_secs(30);

pub fn run(c: WatchCommand) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let mut out = Out::new();
    match c {
        WatchCommand::Run { path, idle } => {
            let ws = tacho.watch_workspace(path.as_deref())?;
            tacho.watch(&ws, idle, || {
                eprintln!("watching {} (tacho watch stop to end)", ws.display());
            })?;
            Ok(())
        }
        WatchCommand::Start { path, idle, json } => {
            let ws = tacho.watch_workspace(path.as_deref())?;
            let w = match tacho.watch_status(&ws)? {
                Some(s) => WatchStarted::new(&ws, &s, false),
                None => WatchStarted::new(&ws, &start(&tacho, &ws, idle)?, true),
            };
            if json {
                out.typed("watch", &w)?;
            } else {
                out.line(render::watch_started(&w).trim_end())?;
            }
            out.finish()
        }
        WatchCommand::Stop { path, json } => {
            let ws = tacho.watch_workspace(path.as_deref())?;
            let w = tacho.watch_stop(&ws)?;
            if json {
                out.typed("watch_stop", &w)?;
            } else {
                out.line(render::watch_stopped(&w).trim_end())?;
            }
            out.finish()
        }
        WatchCommand::List { json } => {
            let all = tacho.watchers()?;
            if json {
                for w in &all {
                    out.typed("watcher", w)?;
                }
            } else {
                out.line(render::watchers(&all).trim_end())?;
            }
            out.finish()
        }
        WatchCommand::Status { path, json } => {
            let ws = tacho.watch_workspace(path.as_deref())?;
            let w = tacho.watch_state(&ws)?;
            if json {
                out.typed("watch_status", &w)?;
            } else if w.running {
                out.line(render::watch_state(&w).trim_end())?;
            }
            out.finish()?;
            if !w.running {
                return Err(CliError::Said {
                    kind: tacho_app::ErrorKind::NotFound,
                    text: format!("no watcher of {} is running", ws.display()),
                });
            }
            Ok(())
        }
    }
}

/// A watcher's log past this size is started afresh by the next watcher.
const WATCH_LOG_KEPT: u64 = 1 << 20;

/// Starts `tacho watch run` as a process of its own (its own process group, no
/// terminal, what it says appended to its log file); its log's path and where in it
/// this watcher's words start. (Appended: two hooks may start watchers of one
/// workspace at once, and the one that finds the other running says so after it.)
pub fn spawn(
    tacho: &tacho_app::Tacho,
    ws: &std::path::Path,
    idle: Option<Duration>,
) -> Result<(std::process::Child, PathBuf, u64), CliError> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    let log_path = tacho.watch_log(ws)?;
    if let Some(dir) = log_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    let mut from = log.metadata()?.len();
    if from > WATCH_LOG_KEPT {
        log.set_len(0)?;
        from = 0;
    }
    let mut command = std::process::Command::new(exe);
    command.arg("watch").arg("run").arg(ws);
    if let Some(idle) = idle {
        command.arg("--idle").arg(format!("{}s", idle.as_secs()));
    }
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()?;
    Ok((child, log_path, from))
}

/// Starts a watcher ([`spawn`]) and waits until it answers.
fn start(
    tacho: &tacho_app::Tacho,
    ws: &std::path::Path,
    idle: Option<Duration>,
) -> Result<tacho_app::types::WatchStatus, CliError> {
    let (mut child, log_path, from) = spawn(tacho, ws, idle)?;
    let started = Instant::now();
    loop {
        if let Some(s) = tacho.watch_status(ws)? {
            return Ok(s);
        }
        if let Some(code) = child.try_wait()? {
            let said = std::fs::read(&log_path).unwrap_or_default();
            let said = String::from_utf8_lossy(
                usize::try_from(from)
                    .ok()
                    .and_then(|from| said.get(from..))
                    .unwrap_or_default(),
            );
            return Err(CliError::Said {
                kind: tacho_app::ErrorKind::Io,
                text: format!(
                    "the watcher of {} exited ({code}): {}",
                    ws.display(),
                    said.trim()
                ),
            });
        }
        if started.elapsed() > START_WAIT {
            return Err(CliError::Said {
                kind: tacho_app::ErrorKind::Io,
                text: format!(
                    "the watcher of {} did not answer within {} s (see {})",
                    ws.display(),
                    START_WAIT.as_secs(),
                    log_path.display()
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--idle`: a whole number of seconds, minutes or hours (`90s`, `30m`, `8h`).
fn parse_idle(s: &str) -> Result<Duration, String> {
    tacho_app::import::whole_duration(s)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{s:?}: a number with s, m or h (such as 30m)"))
}
