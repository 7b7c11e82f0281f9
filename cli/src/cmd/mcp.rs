//! `tacho mcp`: a stdio MCP server (the official `rmcp` SDK) exposing goal assurance to
//! agents: `create_goal`, `get_goal`, `verify_project` (with `goalCheck`) and
//! `update_goal` (complete / blocked / resume). It calls the same typed operations of the
//! application layer as `tacho goal`, so a receipt made through MCP is the same
//! evidence. Operations run on tokio's blocking pool (a check can run for minutes), off
//! the thread that serves the protocol. Nothing but protocol goes to stdout; check
//! output and notes go to stderr.

use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::{Deserialize, Serialize};
use tacho_app::error::{Field, Operation, Words};
use tacho_app::{BlockRequest, CreateRequest, Tacho};

use crate::error::CliError;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateGoal {
    /// The session (id or unique prefix) the goal belongs to.
    pub session: String,
    /// The plan: Markdown with the acceptance criteria and an `## Assurance contract`.
    pub plan: String,
    #[serde(default)]
    pub objective: Option<String>,
    /// Whether the plan must carry an assurance contract (default false: assurance is
    /// opt-in; a plan with a contract is assured either way, its checks deciding
    /// completion).
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
    /// `complete`, `blocked` or `resume` (of a paused goal).
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

/// Why a tool call could not be answered with a result.
#[derive(Debug, thiserror::Error)]
enum ToolError {
    /// An operation's error: its message names fields as this server's arguments.
    #[error("{}", .0.named(&Arguments))]
    Op(#[from] CliError),
    #[error("status {0:?}: `complete`, `blocked` or `resume`")]
    BadStatus(String),
    #[error("the operation stopped unexpectedly: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// This server's words: a field is its argument's name (the camelCase of the tool
/// parameters above), an operation its tool. What no tool offers keeps the application's
/// name.
struct Arguments;

impl Words for Arguments {
    fn field(&self, field: Field) -> &'static str {
        argument(field)
    }

    fn operation(&self, op: Operation) -> &'static str {
        match op {
            Operation::CreateGoal => "create_goal",
            Operation::EndSession
            | Operation::VerifySession
            | Operation::ListRollbackPoints
            | Operation::PlanRollback => op.neutral(),
        }
    }
}

fn argument(field: Field) -> &'static str {
    match field {
        Field::Session => "session",
        Field::Goal => "goal",
        Field::BlockKind => "kind",
        Field::Reason => "reason",
        Field::RequiredChange => "requiredChange",
        Field::Evidence => "evidence",
        Field::NoIndependentWork => "noIndependentWork",
        Field::NewSession
        | Field::From
        | Field::Id
        | Field::Dir
        | Field::Scope
        | Field::KeepRisk
        | Field::Days
        | Field::Since
        | Field::Risk => field.neutral(),
    }
}

/// Runs an operation on the blocking pool with tacho opened from the environment.
async fn blocking<T, E>(
    op: impl FnOnce(&Tacho) -> Result<T, E> + Send + 'static,
) -> Result<T, ToolError>
where
    T: Send + 'static,
    E: Into<CliError> + Send + 'static,
{
    let r = tokio::task::spawn_blocking(move || {
        let tacho = crate::open()?;
        op(&tacho).map_err(Into::into)
    })
    .await?;
    Ok(r?)
}

/// A tool's answer: the operation's result as a record of the application's convention
/// (`tacho_app::record`, the same JSON the CLI prints with `--json`), flagged as an
/// error when the gate refused or the check failed (the agent must not take it as
/// success).
fn answer<T: Serialize>(
    kind: &str,
    r: Result<T, ToolError>,
    ok: impl Fn(&T) -> bool,
) -> CallToolResult {
    match r {
        Ok(v) => {
            let passed = ok(&v);
            match tacho_app::record::record(kind, &v) {
                Ok(json) if passed => CallToolResult::structured(json),
                Ok(json) => CallToolResult::structured_error(json),
                Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
            }
        }
        Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
    }
}

/// What `update_goal` answers: a completion, a block or a resume.
#[derive(Serialize)]
#[serde(untagged)]
enum Update {
    Completion(tacho_app::Completion),
    Blocked(tacho_app::Blocked),
    Resumed(tacho_app::Resumed),
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
    async fn create_goal(&self, Parameters(p): Parameters<CreateGoal>) -> CallToolResult {
        let r = blocking(move |t| {
            let session = t.resolve_session(&p.session)?;
            t.create_goal(CreateRequest {
                session: &session,
                markdown: &p.plan,
                source_name: "plan",
                objective: p.objective,
                assure: p.assure.unwrap_or(false),
                workspace: None,
            })
        })
        .await;
        answer("goal_created", r, |_| true)
    }

    #[tool(
        description = "The goal's status: each check passed, failed, stale (and why), running or missing, with its command, purpose, sourcePaths, sources and receipt number; the additional paths fingerprinted and the external paths left out; and whether the goal can complete."
    )]
    async fn get_goal(&self, Parameters(p): Parameters<GetGoal>) -> CallToolResult {
        let r = blocking(move |t| {
            let session = t.resolve_session(&p.session)?;
            t.goal_status(&session, p.goal.as_deref())
        })
        .await;
        answer("goal_status", r, |_| true)
    }

    #[tool(
        description = "Run a frozen acceptance check by id (goalCheck) from the workspace root and record a receipt bound to the source fingerprint. Fails unless the check exits 0, in time, on unchanged source."
    )]
    async fn verify_project(&self, Parameters(p): Parameters<VerifyProject>) -> CallToolResult {
        let r = blocking(move |t| {
            let session = t.resolve_session(&p.session)?;
            t.run_check(
                &session,
                p.goal.as_deref(),
                &p.goal_check,
                Duration::from_secs(p.timeout.unwrap_or(600)),
            )
        })
        .await;
        answer("receipt", r, |v| v.passed)
    }

    #[tool(
        description = "Ask to complete the goal (the completion gate: refused unless every check passed on the current source; the refusal names each check and why) or mark it blocked (kind, reason, requiredChange, evidence receipt numbers, noIndependentWork), or resume a paused goal."
    )]
    async fn update_goal(&self, Parameters(p): Parameters<UpdateGoal>) -> CallToolResult {
        let r = match p.status.as_str() {
            "complete" => {
                blocking(move |t| {
                    let session = t.resolve_session(&p.session)?;
                    t.complete_goal(&session, p.goal.as_deref())
                        .map(Update::Completion)
                })
                .await
            }
            "blocked" => {
                blocking(move |t| {
                    let req = BlockRequest {
                        kind: p.kind.as_deref().unwrap_or_default(),
                        reason: p.reason.as_deref().unwrap_or_default(),
                        required_change: p.required_change.as_deref().unwrap_or_default(),
                        evidence: &p.evidence,
                        no_independent_work: p.no_independent_work,
                    };
                    req.check()?;
                    let session = t.resolve_session(&p.session)?;
                    t.block_goal(&session, p.goal.as_deref(), &req)
                        .map(Update::Blocked)
                })
                .await
            }
            "resume" => {
                blocking(move |t| {
                    let session = t.resolve_session(&p.session)?;
                    t.resume_goal(&session, p.goal.as_deref())
                        .map(Update::Resumed)
                })
                .await
            }
            other => Err(ToolError::BadStatus(other.to_owned())),
        };
        answer("goal_update", r, |v| match v {
            Update::Completion(c) => c.accepted,
            Update::Blocked(_) | Update::Resumed(_) => true,
        })
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
        .map_err(|e| {
            CliError::from(std::io::Error::new(
                e.kind(),
                format!("starting the MCP server: {e}"),
            ))
        })?;
    rt.block_on(async {
        let service = TachoMcp::new()
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| CliError::from(std::io::Error::other(format!("MCP: {e}"))))?;
        service
            .waiting()
            .await
            .map_err(|e| CliError::from(std::io::Error::other(format!("MCP: {e}"))))?;
        Ok(())
    })
}
