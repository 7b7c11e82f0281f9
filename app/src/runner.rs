//! Runs a goal check's frozen command: `sh -c` in the workspace root, output streamed
//! to stderr, hashed whole and its last 4 KiB kept, stopped at the timeout.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How much of a check's output a receipt keeps (the end of it).
pub const OUTPUT_TAIL_BYTES: usize = 4096;

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
    #[error("waiting for the check: {0}")]
    Wait(#[source] std::io::Error),
}

/// Reads one of the child's streams to its end on a thread of its own: echoes it to
/// stderr, hashes it, keeps its tail.
fn pump(mut r: Box<dyn Read + Send>) -> JoinHandle<(String, Vec<u8>)> {
    std::thread::spawn(move || {
        let mut h = blake3::Hasher::new();
        let mut tail: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = r.read(&mut buf) {
            let Some(chunk) = buf.get(..n).filter(|c| !c.is_empty()) else {
                break;
            };
            h.update(chunk);
            // The echo is for the person watching; losing it loses nothing recorded.
            let _ = std::io::stderr().write_all(chunk);
            tail.extend_from_slice(chunk);
            if tail.len() > 2 * OUTPUT_TAIL_BYTES {
                tail.drain(..tail.len() - OUTPUT_TAIL_BYTES);
            }
        }
        (h.finalize().to_hex().to_string(), tail)
    })
}

/// Runs `sh -c command` in `ws` until it ends or `timeout` passes (then it is killed).
pub fn run_command(command: &str, ws: &Path, timeout: Duration) -> Result<Ran, RunError> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(ws)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(RunError::Spawn)?;
    let out = child.stdout.take().map(|s| pump(Box::new(s)));
    let err = child.stderr.take().map(|s| pump(Box::new(s)));
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(RunError::Wait)? {
            break s;
        }
        if start.elapsed() > timeout {
            timed_out = true;
            // Already gone is fine: wait() below collects it either way.
            let _ = child.kill();
            break child.wait().map_err(RunError::Wait)?;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let join = |h: Option<JoinHandle<(String, Vec<u8>)>>| {
        h.and_then(|h| h.join().ok()).unwrap_or_default()
    };
    let (stdout_digest, mut tail) = join(out);
    let (stderr_digest, etail) = join(err);
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
