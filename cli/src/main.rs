//! `tacho`: a flight recorder for AI coding agents.
//!
//! A thin frontend over the application layer (`tacho-app`): one module per command
//! group that turns arguments into an operation's options and renders its result, one
//! dispatch `match`, and one error type whose kind decides the exit code documented in
//! the README. Data goes to stdout, everything else to stderr.

mod cmd;
mod error;
mod output;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tacho_app::agents::HookWatch;

use crate::error::CliError;

/// mimalloc (version 2, without transparent huge pages): `tacho record` allocates and
/// frees millions of small values (parsed events, their strings and encodings), many
/// on another thread than the one that made them; the system allocator spent half of
/// an ingest's time there. Version 3 and huge pages each cost every process about half
/// a millisecond at start (page faults), which every hook would pay.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// tacho's data as configured by the environment (`TACHO_HOME`, ...).
pub fn open() -> Result<tacho_app::Tacho, CliError> {
    Ok(tacho_app::Tacho::from_env()?)
}

/// A flight recorder for AI coding agents: records what an agent does into a local,
/// tamper-evident, append-only log.
#[derive(Debug, Parser)]
#[command(name = "tacho", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Each command's arguments are built only when it is the one run (`defer`): building
/// every command's was a tenth of a short command's process. Command groups
/// (`session`, `log`, ...) are [`Group`]s for the same reason: clap defers a command's
/// arguments, not a nested list of subcommands.
#[derive(Debug, Subcommand)]
#[command(defer = true)]
enum Command {
    /// Make a sample repository, record a realistic agent session in it (in a store of
    /// its own unless TACHO_HOME is set), and show its graph, risk and replay
    /// verification.
    Demo(cmd::demo::DemoArgs),
    /// Append JSON Lines events (from a file or stdin) to the log.
    Record(cmd::record::RecordArgs),
    /// A session rebuilt as an execution graph (markdown, mermaid, topology, json, timeline).
    Graph(cmd::graph::GraphArgs),
    /// The risk assessment of a session: score, level and every factor.
    Risk(cmd::risk::RiskArgs),
    /// Sessions: list, show, replay, compare, trace, roll back and branch them.
    #[command(subcommand_required = true, arg_required_else_help = true)]
    Session(Group<cmd::session::SessionCommand>),
    /// Log-level tooling: verify, dump and count the raw segments.
    #[command(subcommand_required = true, arg_required_else_help = true)]
    Log(Group<cmd::log::LogCommand>),
    /// Store the workspace's files in the snapshot store now (and record it in a session).
    Snapshot(cmd::snapshot::SnapshotArgs),
    /// Drop snapshots no session references and pack the snapshot store.
    Gc(cmd::gc::GcArgs),
    /// A watcher of a workspace (inotify): full snapshots then look only at what changed.
    #[command(subcommand_required = true, arg_required_else_help = true)]
    Watch(Group<cmd::watch::WatchCommand>),
    /// The source fingerprint of paths of the workspace (what goal receipts are bound
    /// to), or why no fresh evidence can be produced.
    Fingerprint(cmd::fingerprint::FingerprintArgs),
    /// Goal assurance: frozen plans, checks with receipts, status and the completion gate.
    #[command(subcommand_required = true, arg_required_else_help = true)]
    Goal(Group<cmd::goal::GoalCommand>),
    /// Check a commit range: baseline ancestry, not empty, every changed path inside the
    /// allowed scopes and outside the forbidden ones, merges as chosen.
    VerifyCommits(cmd::verify_commits::VerifyCommitsArgs),
    /// For pull requests: `tacho ci verify BASE..HEAD` links each commit to the
    /// sessions that made it and checks them (Markdown, JUnit, exit codes).
    #[command(subcommand_required = true, arg_required_else_help = true)]
    Ci(Group<cmd::ci::CiCommand>),
    /// A commit range's evidence as in-toto statements in DSSE envelopes (JSON Lines),
    /// signed with your SSH Ed25519 key: the sessions that made it and their goals'
    /// receipts, for a policy engine to check without tacho.
    Attest(cmd::attest::AttestArgs),
    /// Who wrote each line the commits of a range changed — a step of a recorded
    /// session, the user between tool calls, or unknown — followed through the
    /// sessions' snapshots, as Agent Trace records (JSON Lines, one per commit).
    Attribution(cmd::attribution::AttributionArgs),
    /// A stdio MCP server exposing goal assurance (create_goal, get_goal,
    /// verify_project, update_goal).
    Mcp,
    /// Review receipts: `tacho review verify --root DIR`.
    #[command(subcommand_required = true, arg_required_else_help = true)]
    Review(Group<cmd::review::ReviewCommand>),
    /// Record one hook payload of an agent (read on stdin): what the hooks that
    /// `tacho hooks install` sets up run. Always exits 0; a blocked stop is JSON on
    /// stdout.
    Hook(cmd::hooks::HookArgs),
    /// Install, remove or show tacho's hooks in an agent's settings (or its hook
    /// scripts, or its plugin file): every agent `tacho hooks status` lists.
    #[command(subcommand_required = true, arg_required_else_help = true)]
    Hooks(Group<cmd::hooks::HooksCommand>),
    /// Import transcripts of sessions that already happened, of any agent tacho
    /// records (`tacho import <agent>`).
    Import(cmd::hooks::ImportArgs),
    /// Evidence for others: JSON Lines and OpenTelemetry exports, the report, retention.
    #[command(subcommand_required = true, arg_required_else_help = true)]
    Audit(Group<cmd::audit::AuditCommand>),
    /// A local, read-only web report of the sessions (index, session pages with a
    /// timeline, calls, diffs, risk, goals, rollback points), on 127.0.0.1 only.
    RunReport(cmd::run_report::RunReportArgs),
    /// Publish sessions of this repository's workspace to a Git remote
    /// (`refs/tacho/sessions/<id>`): their records exactly as stored, the snapshots
    /// their rollback points need, each head signed with your Git SSH signing key.
    Push(cmd::remote::PushArgs),
    /// Bring a Git remote's published sessions into the data directory, each verified
    /// (digest, chain, signature) before it is stored.
    Fetch(cmd::remote::FetchArgs),
}

// A command group (`tacho session ...`): its subcommands, as arguments of a command
// that clap builds only when it is the one run. (Not a doc comment: clap would make it
// the group's description.)
#[derive(Debug, clap::Args)]
struct Group<C: Subcommand> {
    #[command(subcommand)]
    command: C,
}

fn main() -> ExitCode {
    // `tacho hook <agent>` runs at every hook event of an agent: it skips building the
    // whole command-line parser (a fifth of the work of a hook that records no
    // snapshot). Anything else — `--help`, extra arguments — goes through clap.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let fast_hook = match args.as_slice() {
        [_, hook, agent] if hook == "hook" => Some((agent, HookWatch::Auto)),
        [_, hook, agent, flag] if hook == "hook" => flag
            .to_str()
            .and_then(HookWatch::from_flag)
            .map(|w| (agent, w)),
        _ => None,
    };
    if let Some((agent, mode)) = fast_hook
        && let Some(agent) = cmd::hooks::AgentArg::from_name(agent)
    {
        let args = cmd::hooks::HookArgs {
            agent,
            watch: mode == HookWatch::Always,
            no_watch: mode == HookWatch::Never,
            finish: None,
        };
        return match cmd::hooks::hook(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(e.exit_code())
            }
        };
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(a) => cmd::demo::run(a),
        Command::Record(a) => cmd::record::run(a),
        Command::Graph(a) => cmd::graph::run(a),
        Command::Risk(a) => cmd::risk::run(a),
        Command::Session(Group { command: c }) => cmd::session::run(c),
        Command::Log(Group { command: c }) => cmd::log::run(c),
        Command::Snapshot(a) => cmd::snapshot::run(a),
        Command::Gc(a) => cmd::gc::run(a),
        Command::Watch(Group { command: c }) => cmd::watch::run(c),
        Command::Fingerprint(a) => cmd::fingerprint::run(a),
        Command::Goal(Group { command: c }) => cmd::goal::run(c),
        Command::VerifyCommits(a) => cmd::verify_commits::run(a),
        Command::Ci(Group { command: c }) => cmd::ci::run(c),
        Command::Attest(a) => cmd::attest::run(a),
        Command::Attribution(a) => cmd::attribution::run(a),
        Command::Mcp => cmd::mcp::run(),
        Command::Review(Group { command: c }) => cmd::review::run(c),
        Command::Hook(a) => cmd::hooks::hook(a),
        Command::Hooks(Group { command: c }) => cmd::hooks::hooks(c),
        Command::Import(a) => cmd::hooks::import(a),
        Command::Audit(Group { command: c }) => cmd::audit::run(c),
        Command::RunReport(a) => cmd::run_report::run(a),
        Command::Push(a) => cmd::remote::push(a),
        Command::Fetch(a) => cmd::remote::fetch(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::BrokenPipe) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
