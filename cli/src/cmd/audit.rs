//! `tacho audit ...`: evidence leaving the machine (JSON Lines, OpenTelemetry, the
//! report) and retention.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use tacho_app::{ListFilter, Tacho};
use tacho_export::jsonl::{JsonlOptions, export_jsonl};
use tacho_export::otlp::{self, FileSink, HttpSink, OtlpOptions, Protocol, export_otlp};
use tacho_export::{ExportError, Exported, OutputFile};

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// JSON Lines, one record per event (schema `tacho.audit/1`, SPEC §14.1), with
    /// trace and span ids derived from the session and the event.
    Export(ExportArgs),
    /// Sessions as OpenTelemetry traces (GenAI semantic conventions, original times),
    /// to a collector over OTLP/HTTP or to a file of OTLP JSON lines.
    Otlp(OtlpArgs),
    /// The document a reviewer reads about one session: goal and receipts, session,
    /// routing, actions, files changed with diffs, validation, risk, tokens and record
    /// integrity (Markdown, or one self-contained HTML file).
    Report(ReportArgs),
    /// Remove whole sessions older than N days (streams, projections, locks, index
    /// entries) after recording the removal, then the snapshots only they referenced.
    /// Running, damaged and kept sessions' ancestors stay, and are named.
    Prune(PruneArgs),
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Sessions whose last event is older than this many days.
    #[arg(long)]
    pub days: u64,
    /// Keep sessions at or above this risk level (low, medium, high, critical).
    #[arg(long, value_name = "LEVEL")]
    pub keep_risk: Option<String>,
    /// Also sessions that never recorded their end (imports, crashed agents), which are
    /// otherwise kept as running.
    #[arg(long)]
    pub include_unended: bool,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ReportFormat {
    Markdown,
    Html,
    /// Everything the report shows, as one JSON object (`type: "report"`).
    Json,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The session (its id, or any unique prefix of it).
    pub session: String,
    #[arg(long, value_enum, default_value = "markdown")]
    pub format: ReportFormat,
    /// The report as one JSON object (the same as `--format json`), as every query
    /// takes `--json`.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Write to this file (whole or not at all) instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

/// Which sessions: one, or every session that passes the filters (the filters go
/// with `--all` only: a session named is that session, whatever they say).
#[derive(Debug, Args)]
pub struct Selection {
    /// The session (its id, or any unique prefix of it); or --all.
    #[arg(
        required_unless_present = "all",
        conflicts_with = "all",
        value_name = "SESSION|--all"
    )]
    pub session: Option<String>,
    /// Every session that passes the filters, oldest first.
    #[arg(long)]
    pub all: bool,
    /// Only sessions started at or after this time (RFC 3339, a date like
    /// 2026-08-01, or an age like 7d). With --all.
    #[arg(long, conflicts_with = "session")]
    pub since: Option<String>,
    /// Only sessions at or above this risk level (low, medium, high, critical). With
    /// --all.
    #[arg(long, conflicts_with = "session")]
    pub risk: Option<String>,
}

impl Selection {
    fn sessions(&self, tacho: &Tacho) -> Result<Vec<String>, CliError> {
        let filter = ListFilter {
            since: self.since.clone(),
            risk: self.risk.clone(),
            project: None,
        };
        let one = self
            .session
            .as_deref()
            .map(|s| tacho.resolve_session(s))
            .transpose()?;
        Ok(tacho.select_sessions(one.as_ref(), &filter)?)
    }
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    #[command(flatten)]
    pub select: Selection,
    /// Write to this file (whole or not at all) instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Cut each tool or verification output to this many bytes (the record says so,
    /// with the output's full length).
    #[arg(long, value_name = "BYTES")]
    pub max_output: Option<usize>,
    /// With --output: print what was exported as one JSON object.
    #[arg(long, requires = "output")]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct OtlpArgs {
    #[command(flatten)]
    pub select: Selection,
    /// The collector: a base URL (`/v1/traces` is added) or the traces URL itself.
    /// Default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// A header to send (repeatable), after those of OTEL_EXPORTER_OTLP_HEADERS.
    #[arg(long = "header", value_name = "K=V")]
    pub headers: Vec<String>,
    /// http/protobuf or http/json (default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
    /// OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf).
    #[arg(long)]
    pub protocol: Option<String>,
    /// Write OTLP JSON lines (one request per line) to this file instead of sending.
    #[arg(long, conflicts_with_all = ["endpoint", "headers", "protocol"])]
    pub file: Option<PathBuf>,
    /// Tool arguments and results are attached cut to this many bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    pub max_output: usize,
    /// Spans per request (collectors limit the size of a request).
    #[arg(long, value_name = "N", default_value_t = otlp::BATCH_SPANS, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_spans: u32,
    /// Print what was sent as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(c: AuditCommand) -> Result<(), CliError> {
    match c {
        AuditCommand::Export(a) => export(a),
        AuditCommand::Otlp(a) => otlp(a),
        AuditCommand::Report(a) => report(a),
        AuditCommand::Prune(a) => prune(a),
    }
}

/// A progress bar on stderr for work that takes more than a moment.
struct Progress {
    bar: indicatif::ProgressBar,
    started: Instant,
}

impl Progress {
    fn new(what: &'static str) -> Self {
        Progress {
            bar: crate::output::progress_bar(
                &format!("{what} {{pos}}/{{len}} sessions, {{msg}} events"),
                None,
                false,
            ),
            started: Instant::now(),
        }
    }

    fn tick(&self, done: usize, total: usize, events: u64) {
        if self.started.elapsed() > Duration::from_millis(250) {
            self.bar.set_length(total as u64);
            self.bar.set_position(done as u64);
            self.bar.set_message(events.to_string());
        }
    }
}

fn export_error(e: ExportError) -> CliError {
    match e {
        ExportError::Write(e) => CliError::output(e),
        other => other.into(),
    }
}

/// Damaged sessions were exported up to their damage: said on stderr, exit 1.
fn damaged_exit(done: &Exported) -> Result<(), CliError> {
    for (s, why) in &done.damaged {
        eprintln!(
            "warning: session {s} could not be read to its end ({why}); its records stop there"
        );
    }
    if done.damaged.is_empty() {
        return Ok(());
    }
    Err(CliError::findings(format!(
        "{} session(s) are damaged (run `tacho log verify`); the others are exported whole",
        done.damaged.len()
    )))
}

fn export(a: ExportArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let sessions = a.select.sessions(&tacho)?;
    let opts = JsonlOptions {
        max_output: a.max_output,
    };
    let progress = Progress::new("exporting");
    let mut tick = |done: usize, total: usize, events: u64| progress.tick(done, total, events);
    let done = match &a.output {
        Some(path) => {
            let mut file = OutputFile::create(path)?;
            let done = export_jsonl(&tacho, &sessions, &opts, &mut file, &mut tick)
                .map_err(export_error)?;
            file.commit()?;
            done
        }
        None => {
            let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
            let done = export_jsonl(&tacho, &sessions, &opts, &mut out, &mut tick)
                .map_err(export_error)?;
            out.flush().map_err(CliError::output)?;
            done
        }
    };
    progress.bar.finish_and_clear();
    if let Some(path) = &a.output {
        if a.json {
            let mut out = Out::new();
            out.typed("export", &done)?;
            out.finish()?;
        } else {
            eprintln!(
                "exported {} event(s) of {} session(s) to {}",
                done.events,
                done.sessions,
                path.display()
            );
        }
    }
    damaged_exit(&done)
}

/// What `audit otlp` did.
#[derive(Debug, serde::Serialize)]
struct Sent {
    #[serde(flatten)]
    exported: Exported,
    requests: u64,
    destination: String,
    retries: u32,
    rejected_spans: i64,
    messages: Vec<String>,
}

fn otlp(a: OtlpArgs) -> Result<(), CliError> {
    let env = |k: &str| std::env::var(k).ok();
    let opts = OtlpOptions {
        max_output: a.max_output,
        batch_spans: a.batch_spans as usize,
    };
    // Where to: checked before any session is read.
    let mut http = None;
    if a.file.is_none() {
        let url = otlp::endpoint(a.endpoint.as_deref(), &env).ok_or_else(|| {
            CliError::input(
                "no collector: give --endpoint URL, set OTEL_EXPORTER_OTLP_ENDPOINT, or write a file with --file",
            )
        })?;
        otlp::check_endpoint(&url).map_err(CliError::input)?;
        let protocol_text = a
            .protocol
            .clone()
            .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".into());
        let protocol = Protocol::parse(&protocol_text).ok_or_else(|| {
            CliError::input(format!(
                "protocol {protocol_text:?} is not http/protobuf or http/json (grpc is not supported)"
            ))
        })?;
        let headers = otlp::headers(&a.headers, &env).map_err(CliError::input)?;
        http = Some(HttpSink::new(url, headers, protocol));
    }
    let tacho = crate::open()?;
    let sessions = a.select.sessions(&tacho)?;
    let progress = Progress::new("sending");
    let mut tick = |done: usize, total: usize, events: u64| progress.tick(done, total, events);
    let sent = match (&a.file, http) {
        (Some(path), _) => {
            let mut sink = FileSink::new(OutputFile::create(path)?);
            let (exported, requests) = export_otlp(&tacho, &sessions, &opts, &mut sink, &mut tick)
                .map_err(export_error)?;
            sink.out.commit()?;
            Sent {
                exported,
                requests,
                destination: path.display().to_string(),
                retries: 0,
                rejected_spans: 0,
                messages: Vec::new(),
            }
        }
        (None, Some(mut sink)) => {
            let (exported, requests) = export_otlp(&tacho, &sessions, &opts, &mut sink, &mut tick)
                .map_err(export_error)?;
            Sent {
                exported,
                requests,
                destination: sink.url.clone(),
                retries: sink.retries,
                rejected_spans: sink.rejected_spans,
                messages: std::mem::take(&mut sink.messages),
            }
        }
        (None, None) => return Err(CliError::input("nowhere to send")),
    };
    progress.bar.finish_and_clear();
    let mut out = Out::new();
    if a.json {
        out.typed("otlp", &sent)?;
    } else {
        out.line(format!(
            "sent {} session(s), {} event(s) in {} request(s) to {}{}",
            sent.exported.sessions,
            sent.exported.events,
            sent.requests,
            sent.destination,
            if sent.retries > 0 {
                format!(" ({} retried)", sent.retries)
            } else {
                String::new()
            }
        ))?;
    }
    out.finish()?;
    for m in &sent.messages {
        eprintln!("warning: the collector said: {m}");
    }
    if sent.rejected_spans > 0 {
        return Err(CliError::findings(format!(
            "the collector rejected {} span(s)",
            sent.rejected_spans
        )));
    }
    damaged_exit(&sent.exported)
}

fn report(a: ReportArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let r = tacho.report(&session)?;
    let format = if a.json { ReportFormat::Json } else { a.format };
    let text = match format {
        ReportFormat::Markdown => tacho_app::render::report::markdown(&r),
        ReportFormat::Html => tacho_app::render::report::html(&r),
        ReportFormat::Json => tacho_app::record::record("report", &r)
            .map_err(|e| CliError::from(std::io::Error::other(e)))?
            .to_string(),
    };
    match &a.output {
        Some(path) => {
            let mut file = OutputFile::create(path)?;
            file.write_all(text.as_bytes()).map_err(|source| {
                export_error(ExportError::Output {
                    path: path.clone(),
                    source,
                })
            })?;
            file.commit()?;
            eprintln!("wrote the report of {session} to {}", path.display());
        }
        None => {
            let mut out = Out::new();
            out.line(text.trim_end())?;
            out.finish()?;
        }
    }
    if r.integrity.findings.is_empty() {
        Ok(())
    } else {
        Err(CliError::findings(format!(
            "the record of {session} does not verify; the report says where"
        )))
    }
}

fn prune(a: PruneArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    tacho.require_data()?;
    let r = tacho.prune(&tacho_app::PruneOptions {
        days: a.days,
        keep_risk: a.keep_risk.clone(),
        include_unended: a.include_unended,
        dry_run: a.dry_run,
    })?;
    let mut out = Out::new();
    if a.json {
        out.typed("prune", &r)?;
        return out.finish();
    }
    out.line(tacho_app::render::prune::outcome(&r, tacho.log_dir()).trim_end())?;
    out.finish()
}
