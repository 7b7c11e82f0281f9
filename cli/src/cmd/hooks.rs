//! `tacho hook <agent>` (what the agent runs at each hook event), `tacho hooks
//! install|uninstall|status` (tacho's entries in the agent's settings) and `tacho
//! import <agent>` (transcripts of sessions that already happened).

use std::io::Read;
use std::path::PathBuf;

use clap::builder::PossibleValue;
use clap::{Args, Subcommand, ValueEnum};
use tacho_app::agents::{Agent, HookWatch};
use tacho_app::install::{Places, Scope, hooks_status, install_hooks, this_tacho, uninstall_hooks};
use tacho_app::render::hooks as render;
use tacho_app::{ErrorKind, LINE_BYTES_MAX};

use crate::error::CliError;
use crate::output::Out;

/// An agent named on the command line: one of the registry ([`Agent::ALL`]), by its
/// name or an alias.
#[derive(Debug, Clone, Copy)]
pub struct AgentArg(Agent);

/// The registry as command-line values (clap wants them as a slice of this type).
const AGENT_ARGS: [AgentArg; Agent::ALL.len()] = {
    let mut out = [AgentArg(Agent::ALL[0]); Agent::ALL.len()];
    let mut i = 0;
    while i < Agent::ALL.len() {
        out[i] = AgentArg(Agent::ALL[i]);
        i += 1;
    }
    out
};

impl ValueEnum for AgentArg {
    fn value_variants<'a>() -> &'a [Self] {
        &AGENT_ARGS
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.0.name()).aliases(self.0.aliases().iter().copied()))
    }
}

impl AgentArg {
    /// The agent named exactly as on the command line.
    pub fn from_name(name: &std::ffi::OsStr) -> Option<AgentArg> {
        let name = name.to_str()?;
        Agent::ALL
            .iter()
            .find(|a| a.name() == name)
            .map(|a| AgentArg(*a))
    }

    fn agent(self) -> Agent {
        self.0
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ScopeArg {
    User,
    Project,
    Local,
}

impl ScopeArg {
    fn scope(self) -> Scope {
        match self {
            ScopeArg::User => Scope::User,
            ScopeArg::Project => Scope::Project,
            ScopeArg::Local => Scope::Local,
        }
    }
}

#[derive(Debug, Args)]
pub struct HookArgs {
    /// The agent whose hook payload arrives on stdin.
    pub agent: AgentArg,
    /// Keep a watcher of the session's workspace running (`tacho watch run`, stopping
    /// after an hour without a snapshot): started by the first hook that finds none.
    /// Without it, one is started when a full snapshot lists many files
    /// (`TACHO_WATCH_FILES`, default 1000).
    #[arg(long, conflicts_with = "no_watch")]
    pub watch: bool,
    /// Never start a watcher (also `TACHO_NO_WATCH=1`).
    #[arg(long)]
    pub no_watch: bool,
    /// Record the end a hook held back for SESSION, once its transcript stopped
    /// growing (started by that hook; reads no payload).
    #[arg(long, value_name = "SESSION", hide = true)]
    pub finish: Option<String>,
}

/// What `--watch` and `--no-watch` (clap keeps them apart) ask of the hooks.
fn watch_mode(watch: bool, no_watch: bool) -> HookWatch {
    match (watch, no_watch) {
        (true, _) => HookWatch::Always,
        (_, true) => HookWatch::Never,
        _ => HookWatch::Auto,
    }
}

/// How long a watcher a hook started waits for a snapshot before it stops.
const HOOK_WATCH_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Reads one payload, records it, and answers the agent. Exit 0 always (a recording
/// failure is logged, never breaks the agent); a blocked stop is JSON on stdout.
pub fn hook(a: HookArgs) -> Result<(), CliError> {
    if let Some(session) = &a.finish {
        let tacho = crate::open()?;
        let answer = tacho.hook_finish(a.agent.agent(), session);
        for p in &answer.problems {
            eprintln!("tacho: {p}");
        }
        return Ok(());
    }
    let mut input = Vec::new();
    let limit = LINE_BYTES_MAX as u64;
    let read = std::io::stdin()
        .lock()
        .take(limit + 1)
        .read_to_end(&mut input);
    let tacho = match crate::open() {
        Ok(t) => t,
        Err(e) => {
            // Not even the data directory: say so, and let the agent go on.
            eprintln!("tacho: nothing recorded: {e}");
            return Ok(());
        }
    };
    if let Err(e) = read {
        eprintln!("tacho: nothing recorded: reading the hook payload: {e}");
        return Ok(());
    }
    if input.len() as u64 > limit {
        input.clear();
        input.extend_from_slice(b"{\"too_large\":true}");
    }
    let answer = tacho.hook(a.agent.agent(), &input);
    use std::io::Write;
    let _ = std::io::stdout().write_all(answer.stdout.as_bytes());
    let _ = std::io::stderr().write_all(answer.stderr.as_bytes());
    // After the answer: the agent does not wait for these.
    if let Some(session) = &answer.finish_later
        && let Err(e) = spawn_finish(&a, session)
    {
        eprintln!("tacho: the session's end waits for its next hook: {e}");
    }
    if let Some(ws) =
        tacho.hook_watch_wanted(watch_mode(a.watch, a.no_watch), answer.session.as_deref())
    {
        // Not waited for: the agent goes on while it lists the workspace. Two hooks
        // that both start one leave one running (the other finds its lock taken).
        if let Err(e) = super::watch::spawn(&tacho, &ws, Some(HOOK_WATCH_IDLE)) {
            eprintln!("tacho: no watcher of {}: {e}", ws.display());
        }
    }
    Ok(())
}

/// Starts `tacho hook AGENT --finish SESSION` as a process of its own (its own process
/// group, no terminal), not waited for.
fn spawn_finish(a: &HookArgs, session: &str) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe()?;
    std::process::Command::new(exe)
        .arg("hook")
        .arg(a.agent.agent().name())
        // (One argument: a session id starting with `-` is no flag.)
        .arg(format!("--finish={session}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .map(drop)
}

#[derive(Debug, Subcommand)]
pub enum HooksCommand {
    /// Merge tacho's hook entries into the agent's settings file (keeping every other
    /// hook and key; a second install changes nothing).
    Install(InstallArgs),
    /// Take tacho's hook entries out of the agent's settings file.
    Uninstall(InstallArgs),
    /// What is installed where, and whether it runs this tacho.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct InstallArgs {
    pub agent: AgentArg,
    /// user: ~/.claude/settings.json (or $CLAUDE_CONFIG_DIR), ~/.codex/hooks.json (or
    /// $CODEX_HOME); project: .claude/settings.json, .codex/hooks.json in the
    /// repository; local: .claude/settings.local.json.
    #[arg(long, value_enum, default_value = "user")]
    pub scope: ScopeArg,
    /// Show the file as it would be; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Hooks that keep a watcher of the session's workspace running, so that full
    /// snapshots look only at what changed (installs `tacho hook <agent> --watch`).
    /// Without it, hooks start one when a full snapshot lists many files.
    #[arg(long, conflicts_with = "no_watch")]
    pub watch: bool,
    /// Hooks that never start a watcher (installs `tacho hook <agent> --no-watch`).
    #[arg(long)]
    pub no_watch: bool,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(long)]
    pub json: bool,
}

fn places() -> Result<Places, CliError> {
    Places::from_env().map_err(|e| CliError::Said {
        kind: ErrorKind::Io,
        text: format!("the current directory: {e}"),
    })
}

pub fn hooks(c: HooksCommand) -> Result<(), CliError> {
    let mut out = Out::new();
    match c {
        HooksCommand::Install(a) | HooksCommand::Uninstall(a)
            if !a.agent.agent().scopes().contains(&a.scope.scope()) =>
        {
            // Said before anything else is looked at (this tacho's path, the files).
            return Err(tacho_app::install::InstallError::NoScope {
                agent: a.agent.agent(),
                scope: a.scope.scope(),
            }
            .into());
        }
        HooksCommand::Install(a) => {
            let tacho = this_tacho()?;
            let r = install_hooks(
                &places()?,
                a.agent.agent(),
                a.scope.scope(),
                &tacho,
                a.dry_run,
                watch_mode(a.watch, a.no_watch),
            )?;
            print_installed(&mut out, &r, a.json)?;
        }
        HooksCommand::Uninstall(a) => {
            let r = uninstall_hooks(&places()?, a.agent.agent(), a.scope.scope(), a.dry_run)?;
            print_installed(&mut out, &r, a.json)?;
        }
        HooksCommand::Status(a) => {
            let status = hooks_status(&places()?, &this_tacho()?);
            if a.json {
                out.typed("hooks_status", &status)?;
            } else {
                out.line(render::status(&status).trim_end())?;
            }
        }
    }
    out.finish()
}

/// What an install or uninstall did: its record, or its text.
fn print_installed(
    out: &mut Out,
    r: &tacho_app::install::Installed,
    json: bool,
) -> Result<(), CliError> {
    if json {
        out.json(r)
    } else {
        out.line(render::installed(r).trim_end())
    }
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    pub agent: AgentArg,
    /// Transcript files or directories (default: every transcript under Claude Code's
    /// `projects/` in its config directory, or every rollout under Codex's
    /// `$CODEX_HOME/sessions`).
    pub paths: Vec<PathBuf>,
    /// A transcript that has not grown for this long gets an inferred session end
    /// (`90s`, `30m`, `8h`, or `never`; default `$TACHO_IMPORT_STALE_AFTER`, else 30m).
    #[arg(long, value_name = "DURATION")]
    pub stale_after: Option<String>,
    #[arg(long)]
    pub json: bool,
}

pub fn import(a: ImportArgs) -> Result<(), CliError> {
    let stale_after = match (&a.stale_after, std::env::var("TACHO_IMPORT_STALE_AFTER")) {
        (Some(given), _) => tacho_app::import::parse_stale_after(given)
            .map_err(|e| CliError::input(format!("--stale-after {e}")))?,
        (None, Ok(v)) if !v.is_empty() => tacho_app::import::parse_stale_after(&v)
            .map_err(|e| CliError::input(format!("TACHO_IMPORT_STALE_AFTER={e}")))?,
        _ => Some(tacho_app::import::STALE_AFTER_DEFAULT),
    };
    let opts = tacho_app::import::ImportOptions { stale_after };
    let mut roots = a.paths.clone();
    if roots.is_empty() {
        let bases = a
            .agent
            .agent()
            .import_roots(&places()?)
            .map_err(|_| CliError::input("no home directory: give transcript paths"))?;
        // The first is where the agent keeps its sessions (its absence is said); the
        // others (Codex's archived sessions) are read when they exist.
        for (i, b) in bases.into_iter().enumerate() {
            if i == 0 || b.exists() {
                roots.push(b);
            }
        }
    }
    let mut files = Vec::new();
    for r in &roots {
        match std::fs::metadata(r) {
            Ok(m) if m.is_dir() => files.extend(
                tacho_app::import::transcripts_under(a.agent.agent(), r).map_err(|e| {
                    CliError::Said {
                        kind: ErrorKind::Io,
                        text: format!("{}: {e}", r.display()),
                    }
                })?,
            ),
            Ok(m) if m.is_file() => files.push(r.clone()),
            // A FIFO, socket or device: said as such (it exists), and never read.
            Ok(m) => {
                return Err(CliError::Said {
                    kind: ErrorKind::Input,
                    text: tacho_app::import::not_a_transcript(r, m.file_type())
                        .unwrap_or_else(|| format!("{} is not a transcript file", r.display())),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(CliError::Said {
                    kind: ErrorKind::NotFound,
                    text: format!("{}: no such file or directory", r.display()),
                });
            }
            Err(e) => {
                return Err(CliError::Said {
                    kind: ErrorKind::Io,
                    text: format!("{}: {e}", r.display()),
                });
            }
        }
    }
    let tacho = crate::open()?;
    let bar = crate::output::progress_bar(
        "{wide_bar} {pos}/{len} transcripts",
        Some(files.len() as u64),
        a.json,
    );
    let r = tacho.import_transcripts(a.agent.agent(), &files, &opts, &mut |done, _| {
        bar.set_position(done as u64)
    });
    bar.finish_and_clear();
    let mut out = Out::new();
    if a.json {
        out.json(&r)?;
    } else {
        out.line(tacho_app::render::hooks::imported(&r).trim_end())?;
    }
    out.finish()?;
    if r.failed.is_empty() {
        Ok(())
    } else {
        Err(CliError::Said {
            kind: ErrorKind::Io,
            text: format!("{} transcript(s) could not be imported", r.failed.len()),
        })
    }
}
