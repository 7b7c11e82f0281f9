//! One short line about an event, for summaries and timelines.

use tacho_schema::EventBody;

use super::{route, short_id};

/// One short line about an event.
pub fn describe(body: &EventBody) -> String {
    match body {
        EventBody::SessionStart(s) => format!(
            "{}{}",
            s.agent.as_deref().unwrap_or("agent ?"),
            s.title
                .as_ref()
                .map(|t| format!(": {t}"))
                .unwrap_or_default()
        ),
        EventBody::SessionEnd(e) => e.reason.to_string(),
        EventBody::AgentRoute(r) => route(r.from.as_deref(), &r.to),
        EventBody::LlmRequest(r) => format!("{} {}", r.request_id, r.model),
        EventBody::LlmResponse(r) => format!(
            "{} {}/{} tokens{}",
            r.request_id,
            r.tokens_in,
            r.tokens_out,
            r.latency_ms
                .map(|l| format!(" in {l}ms"))
                .unwrap_or_default()
        ),
        EventBody::StepStart(s) => format!(
            "step {}{}",
            s.step,
            s.title
                .as_ref()
                .map(|t| format!(": {t}"))
                .unwrap_or_default()
        ),
        EventBody::StepFinish(s) => format!("step {}", s.step),
        EventBody::ToolCall(c) => format!(
            "{} {}{}",
            c.call_id,
            c.tool,
            c.target
                .as_ref()
                .map(|t| format!(" {t}"))
                .unwrap_or_default()
        ),
        EventBody::ToolResult(r) => format!(
            "{} {}{}",
            r.call_id,
            r.status,
            r.duration_ms.map(|d| format!(" {d}ms")).unwrap_or_default()
        ),
        EventBody::PermissionAsk(p) => format!("{} {}", p.request_id, p.permission),
        EventBody::PermissionReply(p) => format!("{} {}", p.request_id, p.decision),
        EventBody::Error(e) => e.message.lines().next().unwrap_or("").to_string(),
        EventBody::VerificationRun(v) => format!("{} {}", v.command, v.status),
        EventBody::FileEdit(f) => format!("{} {}", f.op, f.path),
        EventBody::TodoUpdate(t) => {
            let open = t.todos.iter().filter(|i| i.status.is_open()).count();
            let now = t
                .todos
                .iter()
                .find(|i| i.status == tacho_schema::TodoStatus::InProgress)
                .map(|i| format!(", now: {}", i.content.lines().next().unwrap_or("")))
                .unwrap_or_default();
            format!("{} todo(s), {open} open{now}", t.todos.len())
        }
        EventBody::AgentNotice(n) => match &n.message {
            Some(m) => format!("{} {}", n.notice, m.lines().next().unwrap_or("")),
            None => n.notice.clone(),
        },
        EventBody::SnapshotTaken(t) => format!(
            "{} {} ({} files{})",
            t.reason,
            short_id(&t.snapshot),
            t.files,
            t.before_step
                .map(|s| format!(", before step {s}"))
                .unwrap_or_default()
        ),
        EventBody::RollbackApplied(r) => format!(
            "{} to {}{}",
            r.rolled_back,
            short_id(&r.to_snapshot),
            r.before_step
                .map(|s| format!(" (before step {s})"))
                .unwrap_or_default()
        ),
        EventBody::SessionBranch(b) => {
            format!("branch of {} through #{}", b.parent, b.through_seq)
        }
        EventBody::GoalCreated(g) => format!("{} {}: {}", g.goal, g.kind, g.title),
        EventBody::GoalCheckRun(r) => format!(
            "{} {} {}{}",
            r.goal,
            r.check,
            if r.passed { "passed" } else { "failed" },
            r.exit_code
                .map(|c| format!(" (exit {c})"))
                .unwrap_or_default()
        ),
        EventBody::GoalCheckStart(c) => format!("{} {} started", c.goal, c.check),
        EventBody::GoalUpdate(u) => format!(
            "{} {} {}",
            u.goal,
            u.action,
            if u.accepted { "accepted" } else { "refused" }
        ),
        EventBody::SecretAllowed(a) => format!(
            "event {} allowed past the secret scan{}",
            a.seq,
            a.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
        EventBody::GitCommits(c) => match c.commits_total {
            0 => format!("HEAD {}", c.head),
            n => format!("HEAD {} ({n} new commit(s))", c.head),
        },
        EventBody::Unknown { kind, version, .. } => format!("kind {kind} v{version}"),
    }
}
