//! `tacho record`: JSON Lines events in, batches appended.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tacho_app::types::Durability;
use tacho_app::{Ingest, IngestError, IngestOptions, RecordError};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DurabilityArg {
    /// Every batch is synced to disk before it is reported as recorded.
    Sync,
    /// Batches are handed to the OS without a sync (faster; a machine crash may lose them).
    Buffered,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// JSON Lines file to read; stdin when absent or `-`.
    pub file: Option<PathBuf>,
    /// Session id for lines that have no `session` field.
    #[arg(long)]
    pub session: Option<String>,
    /// Record under fresh session ids: each session of the input gets a new id
    /// (printed), so the same file can be recorded again.
    #[arg(long, conflicts_with = "session")]
    pub new_session: bool,
    #[arg(long, value_enum, default_value = "sync")]
    pub durability: DurabilityArg,
    /// Lines per batch. 0 (the default) makes the whole input one batch: all of it is
    /// recorded or none of it. With N > 0, a bad line rejects its batch and stops;
    /// earlier batches stay recorded.
    #[arg(long, default_value_t = 0)]
    pub batch_lines: usize,
    /// Print one JSON object per committed batch on stdout, as soon as it is recorded
    /// (an acknowledgement a streaming producer can wait for).
    #[arg(long)]
    pub json: bool,
    /// Snapshots of the session's workspace (when it exists on this machine): `auto`
    /// takes one after session.start (the baseline), before each step.start and
    /// before session.end; `off` only on `snapshot.take` lines.
    #[arg(long, value_enum, default_value = "auto")]
    pub snapshots: SnapshotsArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SnapshotsArg {
    Auto,
    Off,
}

pub fn run(a: RecordArgs) -> Result<(), CliError> {
    let (input, source): (Box<dyn std::io::Read + Send>, String) = match &a.file {
        Some(p) if p.as_os_str() != "-" => {
            let f = std::fs::File::open(p)
                .map_err(|e| CliError::input(format!("{}: {e}", p.display())))?;
            (Box::new(f), p.display().to_string())
        }
        _ => (Box::new(std::io::stdin()), "stdin".to_string()),
    };
    let opts = IngestOptions {
        source: source.clone(),
        session: a.session.clone(),
        new_session: a.new_session,
        durability: match a.durability {
            DurabilityArg::Sync => Durability::Sync,
            DurabilityArg::Buffered => Durability::Buffered,
        },
        batch_lines: a.batch_lines,
        auto_snapshots: a.snapshots == SnapshotsArg::Auto,
        pack_new_sessions: true,
        outside: true,
    };
    let tacho = crate::open()?;
    // With --json: one acknowledgement per committed batch, written (and flushed) as
    // soon as the batch is durable as requested.
    let mut acks = a.json.then(Out::new);
    let mut ack_error = None;
    let mut ingest = Ingest::new(&tacho, opts, |ack| {
        if let Some(out) = acks.as_mut() {
            let written = out.json(ack).and_then(|()| out.flush());
            if let Err(e) = written {
                ack_error = Some(e);
                return Err(std::io::Error::other("stdout closed"));
            }
        }
        Ok(())
    })?;
    // Lines are read and parsed on another thread while this one takes them in.
    let failed = ingest.lines(input).err().map(|error| RecordError {
        error,
        recorded: ingest.recorded(),
    });
    let result = match failed {
        Some(e) => {
            drop(ingest);
            Err(e)
        }
        None => ingest.finish(),
    };
    if result.is_ok() {
        tacho.compact_index_after_ingest();
    }
    let done = match result {
        Ok(t) => t,
        Err(RecordError {
            error: IngestError::Ack(_),
            ..
        }) => return Err(ack_error.unwrap_or(CliError::BrokenPipe)),
        Err(e) => return Err(e.into()),
    };
    let missed = missed_error(done.missed_snapshots, done.missed_kind);
    if let Some(out) = acks.take() {
        out.finish()?;
        return missed;
    }
    // (One write for all of them: a bulk input records thousands of sessions.)
    let mut report = String::new();
    for (session, t) in &done.totals {
        report.push_str(&format!(
            "recorded {} event(s) in session {session} (seq {}..={})\n",
            t.events,
            t.first_seq.unwrap_or(0),
            t.last_seq
        ));
    }
    eprint!("{report}");
    if done.totals.is_empty() {
        eprintln!("no events in {source}");
    }
    missed
}

/// Events are recorded even when an automatic snapshot cannot be taken, but the user
/// must see that those points of the workspace are not protected: a refused workspace
/// (the home directory, ...) is bad input (exit 2), anything else the error's own kind
/// (an I/O error: exit 5).
fn missed_error(missed: u64, kind: Option<tacho_app::ErrorKind>) -> Result<(), CliError> {
    if missed == 0 {
        return Ok(());
    }
    Err(CliError::Said {
        kind: kind.unwrap_or(tacho_app::ErrorKind::Io),
        text: format!(
            "{missed} automatic snapshot(s) could not be taken (see the notes above): the events were recorded, but those points of the workspace cannot be restored"
        ),
    })
}
