//! Runs a goal check's frozen command with bash (errexit, pipefail, inherit_errexit,
//! privileged mode; see [`BASH_OPTIONS`]) in the workspace root, in a process
//! group of its own, output streamed to stderr, hashed whole and its last 4 KiB kept.
//! At the timeout the whole group gets TERM, then KILL after a short grace, and the
//! runner returns: neither a child that ignores TERM nor one that keeps the output pipe
//! open can hold it. Processes a check leaves running in its group after it exits are
//! ended the same way once the output has had its grace to drain.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};

/// How much of a check's output a receipt keeps (the end of it).
pub const OUTPUT_TAIL_BYTES: usize = 4096;

/// How long a process group has between TERM and KILL, and the output pipes to drain
/// once the check's shell is gone.
pub const KILL_GRACE: Duration = Duration::from_secs(1);

/// What a finished check process left.
#[derive(Debug, Clone)]
pub struct Ran {
    /// `None` when a signal ended it.
    pub exit_code: Option<i64>,
    pub timed_out: bool,
    pub stdout_digest: String,
    pub stderr_digest: String,
    pub tail: String,
}

/// Why a check process could not be run to its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("running the check: {0}")]
    Spawn(#[source] std::io::Error),
    #[error("running the check: bash is at neither /bin/bash nor /usr/bin/bash")]
    NoBash,
    #[error("waiting for the check: {0}")]
    Wait(#[source] std::io::Error),
}

/// One output stream as read so far: its hash and its tail.
#[derive(Default)]
struct Stream {
    hash: blake3::Hasher,
    tail: Vec<u8>,
}

/// Reads one of the child's streams to its end on a thread of its own: echoes it to
/// stderr, hashes it, keeps its tail. What it read is shared, so the runner can stop
/// waiting for the end of a pipe that something still holds open.
fn pump(mut r: Box<dyn Read + Send>, into: Arc<Mutex<Stream>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
                break;
            };
            // The echo is for the person watching; losing it loses nothing recorded.
            let _ = std::io::stderr().write_all(chunk);
            let Ok(mut s) = into.lock() else { break };
            s.hash.update(chunk);
            s.tail.extend_from_slice(chunk);
            if s.tail.len() > 2 * OUTPUT_TAIL_BYTES {
                let cut = s.tail.len() - OUTPUT_TAIL_BYTES;
                s.tail.drain(..cut);
            }
        }
    })
}

/// Sends `signal` to the check's process group (gone already is fine).
fn signal_group(child: &Child, signal: Signal) {
    let pid = i32::try_from(child.id()).ok().and_then(Pid::from_raw);
    if let Some(pid) = pid {
        let _ = kill_process_group(pid, signal);
    }
}

/// Waits for the child until `deadline`; `None` if it is still running then.
fn wait_until(child: &mut Child, deadline: Instant) -> Result<Option<ExitStatus>, RunError> {
    loop {
        if let Some(s) = child.try_wait().map_err(RunError::Wait)? {
            return Ok(Some(s));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Where bash is looked for, in order: fixed paths, never through `PATH` (which the
/// agent controls).
pub const BASH_PATHS: &[&str] = &["/bin/bash", "/usr/bin/bash"];

/// The options a check's bash runs with (SPEC §12.2): a failing command ends the
/// check (`errexit`), also inside command substitutions (`inherit_errexit`); a
/// pipeline fails when any of its commands fails (`pipefail`); privileged mode (`-p`)
/// ignores `BASH_ENV`, `ENV`, `SHELLOPTS`, `BASHOPTS` and functions exported through
/// the environment, any of which could change what the command runs or switch
/// errexit off before it starts.
pub const BASH_OPTIONS: &[&str] = &[
    "-p",
    "-o",
    "errexit",
    "-o",
    "pipefail",
    "-O",
    "inherit_errexit",
];

/// The first of [`BASH_PATHS`] that exists.
fn bash() -> Result<&'static str, RunError> {
    BASH_PATHS
        .iter()
        .copied()
        .find(|p| Path::new(p).is_file())
        .ok_or(RunError::NoBash)
}

/// The shell a check's command line runs in, as a program the goal binds (the first
/// of [`BASH_PATHS`] that exists; `/bin/bash` where none does, and then no check runs).
pub fn shell() -> &'static str {
    bash().unwrap_or("/bin/bash")
}

/// Runs `bash BASH_OPTIONS -c command` in `ws` until it ends or `timeout` passes, with
/// exactly the environment `env` (`NAME=VALUE` entries; nothing of this process's is
/// inherited: SPEC §12.2).
pub fn run_command(
    command: &str,
    ws: &Path,
    env: &[String],
    timeout: Duration,
) -> Result<Ran, RunError> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(bash()?)
        .args(BASH_OPTIONS)
        .env_clear()
        .envs(crate::checkenv::pairs(env))
        .arg("-c")
        .arg(command)
        .current_dir(ws)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: at the end, every process the check started can be
        // signalled at once.
        .process_group(0)
        .spawn()
        .map_err(RunError::Spawn)?;
    let streams = [Arc::new(Mutex::default()), Arc::new(Mutex::default())];
    let pumps = [
        child
            .stdout
            .take()
            .map(|s| pump(Box::new(s), streams[0].clone())),
        child
            .stderr
            .take()
            .map(|s| pump(Box::new(s), streams[1].clone())),
    ];
    let start = Instant::now();
    let mut timed_out = false;
    let status = match wait_until(&mut child, start + timeout)? {
        Some(s) => s,
        None => {
            timed_out = true;
            signal_group(&child, Signal::TERM);
            match wait_until(&mut child, Instant::now() + KILL_GRACE)? {
                Some(s) => s,
                None => {
                    signal_group(&child, Signal::KILL);
                    child.wait().map_err(RunError::Wait)?
                }
            }
        }
    };
    // The output pipes end when every process holding them is gone. Give them a grace
    // to drain; then end what is left of the group, and after another grace stop
    // waiting and keep what was read.
    let drained = |deadline: Instant| loop {
        if pumps.iter().flatten().all(JoinHandle::is_finished) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    if !drained(Instant::now() + KILL_GRACE) {
        signal_group(&child, Signal::KILL);
        drained(Instant::now() + KILL_GRACE);
    }
    let take = |s: &Arc<Mutex<Stream>>| match s.lock() {
        Ok(s) => (s.hash.finalize().to_hex().to_string(), s.tail.clone()),
        Err(_) => (
            blake3::Hasher::new().finalize().to_hex().to_string(),
            Vec::new(),
        ),
    };
    let (stdout_digest, mut tail) = take(&streams[0]);
    let (stderr_digest, etail) = take(&streams[1]);
    tail.extend_from_slice(&etail);
    let keep = tail
        .get(tail.len().saturating_sub(OUTPUT_TAIL_BYTES)..)
        .unwrap_or(&tail);
    Ok(Ran {
        exit_code: status.code().map(i64::from),
        timed_out,
        stdout_digest,
        stderr_digest,
        tail: String::from_utf8_lossy(keep).into_owned(),
    })
}
