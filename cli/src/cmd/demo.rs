//! `tacho demo`: a sample repository, a realistic agent session recorded in it (with
//! snapshots of its files at every step), then the graph, the risk assessment, the
//! replay verification, the rollback points and a rollback dry run.

use std::path::PathBuf;

use clap::Args;
use tacho_app::render::{graph, prefix, risk};

use crate::cmd::{replay, rollback};
use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Where to create the sample repository (default: a new directory under the
    /// system's temporary directory). It is kept, so you can look at it.
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

pub fn run(a: DemoArgs) -> Result<(), CliError> {
    // Unless TACHO_HOME names a store, the demo keeps one of its own beside its sample
    // repository: the user's store gets no sample session.
    let own_store = std::env::var_os("TACHO_HOME").is_none_or(|h| h.is_empty());
    let mut config = tacho_app::Config::from_env()?;
    if own_store {
        config.data_dir = std::env::temp_dir().join(format!(
            "tacho-demo-store-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
    }
    let tacho = tacho_app::Tacho::open(config)?;
    let demo = tacho.record_demo(a.dir)?;
    let session = demo.session;
    let mut out = Out::new();
    out.line(format!(
        "Recorded a demo session {session} in {}",
        tacho.log_dir().display()
    ))?;
    out.line(format!("Sample repository: {}", demo.workspace.display()))?;
    // The commands below, on the store the demo used.
    let env = if own_store {
        let store = tacho.data_dir().display().to_string();
        out.line(format!(
            "The demo keeps a store of its own (your store is untouched): {store}\nRemove both when done: rm -rf {} {store}\n",
            demo.workspace.display()
        ))?;
        format!("TACHO_HOME={store} ")
    } else {
        out.line("")?;
        String::new()
    };
    let tacho_app::SessionGraph { graph: g, risk: r } = tacho.session_graph(&session)?;
    out.line(graph::markdown(&g, &r).trim_end())?;
    out.line("\n## Risk\n")?;
    out.line(risk::text(&r, true).trim_end())?;
    out.line("\n## Replay verification\n")?;
    let v = tacho.verify_session(&session)?;
    replay::print_verification(&v, false, &mut out)?;
    out.line("\n## Rollback points\n")?;
    rollback::print_points(&tacho.rollback_points(&session)?, false, &mut out)?;
    out.line("\n## Rollback dry run (the whole session)\n")?;
    let p = tacho.plan_rollback(&session, None, false, true)?;
    rollback::print_plan(&p, None, None, false, &mut out)?;
    let short = prefix(&session, 12);
    out.line(format!(
        "\nTry next:\n  {env}tacho graph {short} --format mermaid\n  {env}tacho session replay {short} --mode summary\n  {env}tacho session rollback {short} --step 3 --dry-run\n  {env}tacho audit report {short}\n  {env}tacho run-report {short}\n  {env}tacho session list"
    ))?;
    out.finish()?;
    let failed = v.failed();
    if failed > 0 {
        return Err(CliError::findings(format!(
            "the demo session failed verification with {failed} finding(s)"
        )));
    }
    Ok(())
}
