//! `tacho mcp`: a stdio MCP server (the official `rmcp` SDK) exposing goal assurance to
//! agents: `create_goal`, `get_goal`, `verify_project` (with `goalCheck`) and
//! `update_goal` (complete / blocked). It calls the same operations as `tacho goal`,
//! so a receipt made through MCP is the same evidence. Nothing but protocol goes to
//! stdout; check output and notes go to stderr.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;

use crate::cmd::goal;
use crate::error::CliError;
use crate::home::open_store;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateGoal {
    /// The session (id or unique prefix) the goal belongs to.
    pub session: String,
    /// The plan: Markdown with the acceptance criteria and an `## Assurance contract`.
    pub plan: String,
    #[serde(default)]
    pub objective: Option<String>,
    /// Whether completion must be earned by the contract's checks (default true).
    #[serde(default)]
    pub assure: Option<bool>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetGoal {
    pub session: String,
    /// The goal id (default: the session's latest goal).
    #[serde(default)]
    pub goal: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerifyProject {
    pub session: String,
    /// The id of a check of the frozen plan; its command is taken from the plan.
    pub goal_check: String,
    #[serde(default)]
    pub goal: Option<String>,
    /// Seconds before the check is stopped (default 600).
    #[serde(default)]
    pub timeout: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateGoal {
    pub session: String,
    #[serde(default)]
    pub goal: Option<String>,
    /// `complete` or `blocked`.
    pub status: String,
    /// For `blocked`: `external_dependency`, `authorization` or `user_input`.
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub required_change: Option<String>,
    /// For `blocked`: receipt event numbers the block rests on.
    #[serde(default)]
    pub evidence: Vec<u64>,
    /// For `blocked`: true states that no independent work remains.
    #[serde(default)]
    pub no_independent_work: bool,
}

#[derive(Debug, Clone)]
pub struct TachoMcp {
    tool_router: ToolRouter<Self>,
}

/// A tool's answer: the operation's JSON, flagged as an error when the gate refused or
/// the check failed (the agent must not take it as success).
fn answer(
    v: Result<serde_json::Value, CliError>,
    ok: impl Fn(&serde_json::Value) -> bool,
) -> CallToolResult {
    match v {
        Ok(v) if ok(&v) => CallToolResult::structured(v),
        Ok(v) => CallToolResult::structured_error(v),
        Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
    }
}

#[tool_router]
impl TachoMcp {
    pub fn new() -> Self {
        TachoMcp {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(
        description = "Freeze a goal plan (Markdown with acceptance criteria AC1.. and an Assurance contract JSON block) for a session. Returns the goal id, contract digest and check ids."
    )]
    fn create_goal(&self, Parameters(p): Parameters<CreateGoal>) -> CallToolResult {
        let r = open_store().and_then(|log| {
            goal::create_goal(
                &log,
                &p.session,
                &p.plan,
                "plan",
                p.objective,
                p.assure.unwrap_or(true),
                None,
            )
        });
        answer(r, |_| true)
    }

    #[tool(
        description = "The goal's status: each check passed, failed, stale (and why) or missing, with receipt numbers, and whether the goal can complete."
    )]
    fn get_goal(&self, Parameters(p): Parameters<GetGoal>) -> CallToolResult {
        let r = open_store().and_then(|log| goal::goal_status(&log, &p.session, p.goal.as_deref()));
        answer(r, |_| true)
    }

    #[tool(
        description = "Run a frozen acceptance check by id (goalCheck) from the workspace root and record a receipt bound to the source fingerprint. Fails unless the check exits 0, in time, on unchanged source."
    )]
    fn verify_project(&self, Parameters(p): Parameters<VerifyProject>) -> CallToolResult {
        let r = open_store().and_then(|log| {
            goal::run_check(
                &log,
                &p.session,
                p.goal.as_deref(),
                &p.goal_check,
                p.timeout.unwrap_or(600),
            )
        });
        answer(r, |v| v["passed"].as_bool().unwrap_or(false))
    }

    #[tool(
        description = "Ask to complete the goal (the completion gate: refused unless every check passed on the current source; the refusal names each check and why) or mark it blocked (kind, reason, requiredChange, evidence receipt numbers, noIndependentWork)."
    )]
    fn update_goal(&self, Parameters(p): Parameters<UpdateGoal>) -> CallToolResult {
        let r = open_store().and_then(|log| match p.status.as_str() {
            "complete" => goal::complete_goal(&log, &p.session, p.goal.as_deref()),
            "blocked" => goal::block_goal(
                &log,
                &p.session,
                p.goal.as_deref(),
                p.kind.as_deref().unwrap_or_default(),
                p.reason.as_deref().unwrap_or_default(),
                p.required_change.as_deref().unwrap_or_default(),
                &p.evidence,
                p.no_independent_work,
            ),
            other => Err(CliError::Input(format!(
                "status {other:?}: `complete` or `blocked`"
            ))),
        });
        answer(r, |v| v["accepted"].as_bool().unwrap_or(true))
    }
}

impl Default for TachoMcp {
    fn default() -> Self {
        Self::new()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TachoMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("tacho", env!("CARGO_PKG_VERSION")))
            .with_instructions(
            "tacho goal assurance: create_goal freezes a plan, verify_project runs its checks by id and records receipts, get_goal shows each check's state, update_goal asks the completion gate.",
        )
    }
}

/// Serves MCP on stdin/stdout until the client disconnects.
pub fn run() -> Result<(), CliError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Io(format!("starting the MCP server: {e}")))?;
    rt.block_on(async {
        let service = TachoMcp::new()
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| CliError::Io(format!("MCP: {e}")))?;
        service
            .waiting()
            .await
            .map_err(|e| CliError::Io(format!("MCP: {e}")))?;
        Ok(())
    })
}
