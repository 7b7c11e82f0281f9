//! Agents' todo lists: what their todo tools (Claude Code's and Droid's `TodoWrite`,
//! OpenCode's `todowrite`, Qwen Code's `todo_write`, Gemini CLI's `write_todos`,
//! Codex's `update_plan`) were given, read from the call's input into a
//! `todo.update` recorded right after the call (SPEC §5.1, §13). Each of these tools
//! takes the whole list, so each call's list replaces the one before.

use serde_json::Value;
use tacho_schema::{EventBody, TodoItem, TodoStatus, TodoUpdate, ToolCall};

/// The tool names (lower case, without `_` and `-`) that write a whole todo list.
const TODO_TOOLS: &[&str] = &["todowrite", "writetodos", "updateplan"];

/// Whether `tool` is a todo tool (any spelling of the names above).
pub fn is_todo_tool(tool: &str) -> bool {
    let plain: String = tool
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    TODO_TOOLS.contains(&plain.as_str())
}

/// The list a todo tool's input holds: `todos` (or Codex's `plan`) as an array of
/// items — each an object whose text is `content`, `description`, `step` or `title`
/// and whose `status` is one of the agents' spellings — or as text, one item a line
/// (`[status] text`, `- [x] text`). `None` when `input` holds no list. An item whose
/// status is not recognised is taken as still open: a list tacho cannot read never
/// lets the plain rule hold by mistake.
pub fn todo_items(input: &Value) -> Option<Vec<TodoItem>> {
    let list = input.get("todos").or_else(|| input.get("plan"))?;
    match list {
        Value::Array(items) => Some(items.iter().filter_map(item).collect()),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => Some(items.iter().filter_map(item).collect()),
            _ => Some(text.lines().filter_map(text_item).collect()),
        },
        _ => None,
    }
}

fn item(v: &Value) -> Option<TodoItem> {
    let content = ["content", "description", "step", "title", "text"]
        .iter()
        .find_map(|k| v.get(k)?.as_str())?
        .to_string();
    Some(TodoItem {
        content,
        status: status(v.get("status").and_then(Value::as_str).unwrap_or("")),
    })
}

/// The agents' status words: `pending`, `in_progress` (`in-progress`, `active`),
/// `completed` (`complete`, `done`), `cancelled` (`canceled`); anything else is open.
fn status(word: &str) -> TodoStatus {
    match word
        .trim()
        .to_ascii_lowercase()
        .replace(['-', ' '], "_")
        .as_str()
    {
        "completed" | "complete" | "done" | "x" => TodoStatus::Completed,
        "cancelled" | "canceled" => TodoStatus::Cancelled,
        "in_progress" | "inprogress" | "active" | "doing" => TodoStatus::InProgress,
        _ => TodoStatus::Pending,
    }
}

/// One line of a list given as text: `1. [completed] text`, `- [x] text`, `[ ] text`
/// or plain text (pending).
fn text_item(line: &str) -> Option<TodoItem> {
    let l = line
        .trim()
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .trim_start_matches(['.', ')', '-', '*'])
        .trim();
    if l.is_empty() {
        return None;
    }
    let (status_word, content) = match l.strip_prefix('[').and_then(|r| r.split_once(']')) {
        Some((word, rest)) => (word, rest.trim()),
        None => ("", l),
    };
    (!content.is_empty()).then(|| TodoItem {
        content: content.to_string(),
        status: status(status_word),
    })
}

/// The `todo.update` a tool call reports, when it is a todo tool's call whose input
/// holds a list.
pub fn todo_update(call: &ToolCall) -> Option<EventBody> {
    if !is_todo_tool(&call.tool) {
        return None;
    }
    let input: Value = serde_json::from_str(call.input.as_deref()?).ok()?;
    Some(EventBody::TodoUpdate(TodoUpdate {
        todos: todo_items(&input)?,
        call_id: Some(call.call_id.clone()),
        agent: call.agent.clone(),
    }))
}

/// `events` with a `todo.update` after each todo tool's call (at the call's time).
pub fn with_todo_updates(events: &mut Vec<(i64, EventBody)>) {
    let mut i = 0;
    while i < events.len() {
        let next = match events.get(i) {
            Some((t, EventBody::ToolCall(c))) => todo_update(c).map(|u| (*t, u)),
            _ => None,
        };
        i += 1;
        if let Some(u) = next {
            events.insert(i, u);
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn items(v: Value) -> Vec<(String, TodoStatus)> {
        todo_items(&v)
            .unwrap_or_default()
            .into_iter()
            .map(|t| (t.content, t.status))
            .collect()
    }

    #[test]
    fn the_agents_shapes_read_as_one_list() {
        use TodoStatus::*;
        // Claude Code / Droid `TodoWrite`, OpenCode `todowrite`, Qwen `todo_write`.
        assert_eq!(
            items(json!({"todos": [
                {"content": "Write it", "status": "completed", "activeForm": "Writing it"},
                {"content": "Test it", "status": "in_progress", "id": "2", "priority": "high"},
                {"content": "Ship it", "status": "pending"},
                {"content": "Old idea", "status": "cancelled"}
            ]})),
            [
                ("Write it".into(), Completed),
                ("Test it".into(), InProgress),
                ("Ship it".into(), Pending),
                ("Old idea".into(), Cancelled)
            ]
        );
        // Gemini CLI `write_todos`.
        assert_eq!(
            items(json!({"todos": [{"description": "Read the code", "status": "in_progress"}]})),
            [("Read the code".into(), InProgress)]
        );
        // Codex `update_plan`.
        assert_eq!(
            items(json!({"explanation": "x", "plan": [{"step": "Fix", "status": "completed"}]})),
            [("Fix".into(), Completed)]
        );
        // A list given as text, or as JSON text.
        assert_eq!(
            items(
                json!({"todos": "1. [completed] Write it\n2. [in_progress] Test it\n- [ ] Ship it\n"})
            ),
            [
                ("Write it".into(), Completed),
                ("Test it".into(), InProgress),
                ("Ship it".into(), Pending)
            ]
        );
        assert_eq!(
            items(json!({"todos": "[{\"content\":\"A\",\"status\":\"done\"}]"})),
            [("A".into(), Completed)]
        );
        // An unknown status is open; an empty list is a cleared list; no list is none.
        assert_eq!(
            items(json!({"todos": [{"content": "A", "status": "blocked"}]})),
            [("A".into(), Pending)]
        );
        assert_eq!(todo_items(&json!({"todos": []})), Some(Vec::new()));
        assert_eq!(todo_items(&json!({"file_path": "x"})), None);
    }

    #[test]
    fn a_todo_tools_call_is_followed_by_its_list_once() {
        assert!(is_todo_tool("TodoWrite") && is_todo_tool("write_todos"));
        assert!(is_todo_tool("todo_write") && is_todo_tool("update_plan"));
        assert!(!is_todo_tool("todoread") && !is_todo_tool("Write"));
        let call = |id: &str, tool: &str, input: Value| {
            EventBody::ToolCall(ToolCall {
                call_id: id.into(),
                tool: tool.into(),
                input: Some(input.to_string()),
                ..ToolCall::default()
            })
        };
        let mut events = vec![
            (
                1,
                call(
                    "c1",
                    "TodoWrite",
                    json!({"todos": [{"content": "A", "status": "pending"}]}),
                ),
            ),
            (2, call("c2", "Bash", json!({"command": "ls"}))),
            (
                3,
                call(
                    "c3",
                    "update_plan",
                    json!({"plan": [{"step": "B", "status": "completed"}]}),
                ),
            ),
        ];
        with_todo_updates(&mut events);
        let kinds: Vec<(i64, &str)> = events.iter().map(|(t, b)| (*t, b.kind_name())).collect();
        assert_eq!(
            kinds,
            [
                (1, "tool.call"),
                (1, "todo.update"),
                (2, "tool.call"),
                (3, "tool.call"),
                (3, "todo.update")
            ]
        );
        assert!(
            matches!(&events[1].1, EventBody::TodoUpdate(u) if u.call_id.as_deref() == Some("c1"))
        );
    }
}
