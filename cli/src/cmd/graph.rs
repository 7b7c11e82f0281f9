//! `tacho graph`: a session rebuilt as an execution graph, in five formats.

use clap::{Args, ValueEnum};
use tacho_app::render::graph;

use crate::error::CliError;
use crate::output::Out;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GraphFormat {
    /// Headline, then every step with its tool calls (the default).
    Markdown,
    /// A Mermaid `flowchart` that renders as a diagram.
    Mermaid,
    /// Agents and routes, steps, and the critical path.
    Topology,
    /// The graph as JSON (schema `tacho.graph.v1`, SPEC.md §8).
    Json,
    /// Every step, call, route, verification and error in time order.
    Timeline,
}

#[derive(Debug, Args)]
pub struct GraphArgs {
    /// The session (its id, or any unique prefix of it).
    pub session: String,
    #[arg(long, value_enum, default_value = "markdown")]
    pub format: GraphFormat,
    /// The graph as JSON (the same as `--format json`), as every query takes `--json`.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
}

pub fn run(a: GraphArgs) -> Result<(), CliError> {
    let tacho = crate::open()?;
    let session = tacho.resolve_session(&a.session)?;
    let tacho_app::SessionGraph { graph: g, risk } = tacho.session_graph(&session)?;
    let format = if a.json { GraphFormat::Json } else { a.format };
    let text = match format {
        GraphFormat::Markdown => graph::markdown(&g, &risk),
        GraphFormat::Mermaid => graph::mermaid(&g, &risk),
        GraphFormat::Topology => graph::topology(&g),
        GraphFormat::Timeline => graph::timeline(&g),
        GraphFormat::Json => {
            let mut out = Out::new();
            out.typed("graph", &graph::json(&g, &risk))?;
            return out.finish();
        }
    };
    let mut out = Out::new();
    out.line(text.trim_end())?;
    out.finish()
}
