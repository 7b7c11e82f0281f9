//! `tacho log verify | dump | stats`: tooling for the raw log.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use tacho_app::render::logtools as render;
use tacho_app::{SegmentInfo, dump_segment};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Check every checksum, chain step, sequence number and payload; print the head
    /// digest to keep. Exit 1 on any error.
    Verify(VerifyArgs),
    /// Print the frames of a session's segments, or of one segment file.
    Dump(DumpArgs),
    /// Count segments, events, batches and bytes, by kind.
    Stats(StatsArgs),
    /// Rebuild the session index from the streams (derived data; `log verify` says when
    /// it disagrees with them).
    Reindex(ReindexArgs),
}

#[derive(Debug, Args)]
pub struct ReindexArgs {
    /// One JSON object: sessions indexed and milliseconds taken.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Verify one session only (default: every session).
    #[arg(long)]
    pub session: Option<String>,
    /// JSON Lines: one object per finding, one per session head, then a summary.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// The session whose segments to dump.
    #[arg(required_unless_present = "file")]
    pub session: Option<String>,
    /// Only the segment with this index (0 is the first).
    #[arg(long)]
    pub segment: Option<usize>,
    /// Dump a segment file by path instead (it need not be in the store).
    #[arg(long, conflicts_with = "session")]
    pub file: Option<PathBuf>,
    /// One JSON object per frame.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: LogCommand) -> Result<(), CliError> {
    match c {
        LogCommand::Verify(a) => verify(a),
        LogCommand::Dump(a) => dump(a),
        LogCommand::Stats(a) => stats(a),
        LogCommand::Reindex(a) => reindex(a),
    }
}

fn reindex(a: ReindexArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    tacho.require_data()?;
    let r = tacho.reindex()?;
    let mut out = Out::new();
    if a.json {
        out.typed("reindex", &r)?;
    } else {
        out.line(render::reindexed(&r).trim_end())?;
    }
    out.finish()
}

/// A progress bar on a terminal for runs over every session that take more than a
/// moment (`deep`: verifying, else counting), and the callback that moves it.
fn sessions_bar(deep: bool, quiet: bool) -> (indicatif::ProgressBar, impl FnMut(usize, usize)) {
    let bar = crate::output::progress_bar(
        if deep {
            "verifying {pos}/{len} sessions"
        } else {
            "counting {pos}/{len} sessions"
        },
        None,
        quiet,
    );
    let started = std::time::Instant::now();
    let moved = bar.clone();
    (bar, move |done: usize, total: usize| {
        // Only for work that takes longer than a moment.
        if started.elapsed() > Duration::from_millis(250) {
            moved.set_length(total as u64);
            moved.set_position(done as u64);
        }
    })
}

fn verify(a: VerifyArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    tacho.require_data()?;
    let only = a
        .session
        .as_deref()
        .map(|s| tacho.resolve_session(s))
        .transpose()?;
    let (bar, mut progress) = sessions_bar(true, a.json);
    let v = tacho.verify_log(only.as_ref(), &mut progress);
    bar.finish_and_clear();
    let v = v?;
    let mut out = Out::new();
    if a.json {
        for f in &v.findings {
            out.typed("finding", f)?;
        }
        for h in &v.heads {
            out.typed("head", h)?;
        }
        out.typed("summary", &v.summary)?;
    } else {
        out.line(render::verification(&v).trim_end())?;
    }
    out.finish()?;
    if !v.summary.ok {
        return Err(CliError::findings(format!(
            "verification failed with {} error(s)",
            v.summary.errors
        )));
    }
    Ok(())
}

fn stats(a: StatsArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let (bar, mut progress) = sessions_bar(false, a.json);
    let s = tacho.log_stats(&mut progress);
    bar.finish_and_clear();
    let s = s?;
    let mut out = Out::new();
    if a.json {
        out.typed("stats", &s)?;
    } else {
        out.line(render::stats(&s).trim_end())?;
    }
    out.finish()
}

fn dump(a: DumpArgs) -> Result<(), CliError> {
    let mut out = Out::new();
    let (segments, session): (Vec<SegmentInfo>, String) = match (&a.file, &a.session) {
        (Some(f), _) => (
            vec![SegmentInfo {
                path: f.clone(),
                first_seq: 0,
                packed: None,
            }],
            String::new(),
        ),
        (None, Some(given)) => {
            let tacho = crate::open()?;
            let s = tacho.resolve_session(given)?;
            (tacho.segment_paths(&s, a.segment)?, s.into_string())
        }
        (None, None) => return Err(CliError::input("give a session or --file")),
    };
    let mut damaged = false;
    for seg in &segments {
        let d = dump_segment(seg, &session)?;
        for r in &d.records {
            if a.json {
                out.typed("dump", r)?;
            } else {
                out.line(render::dump_record(r))?;
            }
        }
        damaged |= d.damaged;
    }
    out.finish()?;
    if damaged {
        return Err(CliError::findings("the dump stopped at damaged bytes"));
    }
    Ok(())
}
