//! Agents' todo lists, recorded as `todo.update` events (SPEC §5.1, §13.2) right
//! after the call that changed them, in hooks and imports alike:
//!
//! - tools that take the whole list — Claude Code's (before 2.1.17) and Droid's
//!   `TodoWrite`, OpenCode's and Kilo's `todowrite`, Qwen Code's `todo_write`, Gemini
//!   CLI's `write_todos`, Codex's `update_plan`: each call's list replaces the one
//!   before;
//! - Claude Code's task tools (2.1.17 on): `TaskCreate` adds a task (numbered 1, 2, …
//!   in creation order, as Claude Code numbers them), `TaskUpdate` changes one by its
//!   `taskId` (`deleted` removes it): the list as it then stands is recorded;
//! - Cline's `task_progress`, a checklist any of its tools' inputs may carry (read
//!   from Cline's calls only): recorded when it differs from the list before.
//!
//! A call already read (a transcript repeating a block) changes nothing again.
//!
//! Copilot CLI keeps its todos in SQL tables through its `sql` tool: not read.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tacho_schema::{EventBody, TodoItem, TodoStatus, TodoUpdate, ToolCall};

/// The tool names (lower case, without `_` and `-`) that write a whole todo list.
const TODO_TOOLS: &[&str] = &["todowrite", "writetodos", "updateplan"];

fn plain(tool: &str) -> String {
    tool.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// The list a todo tool's input holds: `todos` (or Codex's `plan`) as an array of
/// items — each an object whose text is `content`, `subject`, `description`, `step`
/// or `title` and whose `status` is one of the agents' spellings — or as text, one
/// item a line (`[status] text`, `- [x] text`). `None` when `input` holds no list. An
/// item whose status is not recognised (`blocked`) is taken as still open: a list
/// tacho cannot read never lets the plain rule hold by mistake.
pub fn todo_items(input: &Value) -> Option<Vec<TodoItem>> {
    let list = input.get("todos").or_else(|| input.get("plan"))?;
    match list {
        Value::Array(items) => Some(items.iter().filter_map(item).collect()),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(items)) => Some(items.iter().filter_map(item).collect()),
            _ => Some(text_items(text)),
        },
        _ => None,
    }
}

fn text_of(v: &Value) -> Option<String> {
    ["content", "subject", "description", "step", "title", "text"]
        .iter()
        .find_map(|k| v.get(k)?.as_str())
        .map(str::to_string)
}

/// An id given as a string or a number.
fn id_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// An item of a list. One tacho cannot read (a bare string, an object with no text
/// it knows) is kept, open, under its JSON text: a list of such items never reads as
/// a cleared one.
fn item(v: &Value) -> Option<TodoItem> {
    Some(TodoItem {
        content: match v {
            Value::String(s) => s.clone(),
            _ => text_of(v).unwrap_or_else(|| v.to_string()),
        },
        status: status(v.get("status").and_then(Value::as_str).unwrap_or("")),
        id: id_of(v.get("id")),
    })
}

/// The agents' status words: `pending`, `in_progress` (`in-progress`, `active`),
/// `completed` (`complete`, `done`, `x`), `cancelled` (`canceled`); anything else is
/// open.
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

/// A list given as text, one item a line: `1. [completed] text`, `- [x] text`,
/// `[ ] text` or plain text (pending); indented sub-items count as items.
fn text_items(text: &str) -> Vec<TodoItem> {
    text.lines().filter_map(text_item).collect()
}

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
        id: None,
    })
}

/// A session's todo list as its calls left it, for the tools that change it a piece
/// at a time. Kept in a hook's state between payloads, and folded again from the
/// session's `todo.update` events when that state is rebuilt from the log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoTracker {
    items: Vec<TodoItem>,
    /// Tasks created so far (the next `TaskCreate` is task `created + 1`).
    created: u64,
    /// The calls already read (a transcript that repeats a call changes nothing).
    #[serde(default)]
    seen: std::collections::BTreeSet<String>,
}

/// Task numbers past this are not taken from a recorded list (an agent could record
/// any id; Claude Code numbers its tasks from 1).
const TASK_NUMBER_MAX: u64 = 1 << 32;

impl TodoTracker {
    /// The `todo.update` a tool call of `agent` (its name) reports, if it changes the
    /// list. Cline's `task_progress` is read from Cline's calls only.
    pub fn on_call(&mut self, agent: &str, call: &ToolCall) -> Option<EventBody> {
        // Decided by the tool's name before anything is parsed: every call of every
        // hook passes here, and most are no todo tool's.
        let tool = plain(&call.tool);
        let text = call.input.as_deref()?;
        let whole = TODO_TOOLS.contains(&tool.as_str());
        if !(whole
            || tool == "taskcreate"
            || tool == "taskupdate"
            || agent == "cline" && text.contains("\"task_progress\""))
            || self.seen.contains(&call.call_id)
        {
            return None;
        }
        let input: Value = serde_json::from_str(text).ok()?;
        let items = if whole {
            todo_items(&input)?
        } else if tool == "taskcreate" {
            let content = text_of(&input)?;
            let number = self.created.checked_add(1)?;
            self.created = number;
            let mut items = self.items.clone();
            items.push(TodoItem {
                content,
                status: TodoStatus::Pending,
                id: Some(number.to_string()),
            });
            items
        } else if tool == "taskupdate" {
            let id = id_of(input.get("taskId"))?;
            let mut items = self.items.clone();
            let at = items.iter().position(|i| i.id.as_deref() == Some(&id))?;
            match input.get("status").and_then(Value::as_str) {
                Some("deleted") => {
                    items.remove(at);
                }
                word => {
                    let t = items.get_mut(at)?;
                    if let Some(w) = word {
                        t.status = status(w);
                    }
                    if let Some(s) = input.get("subject").and_then(Value::as_str) {
                        t.content = s.to_string();
                    }
                }
            }
            items
        } else if agent == "cline"
            && let Some(text) = input.get("task_progress").and_then(Value::as_str)
        {
            let items = text_items(text);
            if items == self.items {
                return None;
            }
            items
        } else {
            return None;
        };
        self.seen.insert(call.call_id.clone());
        self.observe_items(&items);
        Some(EventBody::TodoUpdate(TodoUpdate {
            todos: items,
            call_id: Some(call.call_id.clone()),
            agent: call.agent.clone(),
        }))
    }

    /// Folds in a `todo.update` the log holds.
    pub fn observe(&mut self, body: &EventBody) {
        if let EventBody::TodoUpdate(t) = body {
            if let Some(c) = &t.call_id {
                self.seen.insert(c.clone());
            }
            self.observe_items(&t.todos);
        }
    }

    fn observe_items(&mut self, items: &[TodoItem]) {
        self.items = items.to_vec();
        let most = items
            .iter()
            .filter_map(|i| i.id.as_deref()?.parse::<u64>().ok())
            .filter(|n| *n <= TASK_NUMBER_MAX)
            .max()
            .unwrap_or(0);
        self.created = self.created.max(most);
    }
}

/// `events` with a `todo.update` after each call that changed the agent's todo list
/// (at the call's time).
pub fn with_todo_updates(agent: &str, events: &mut Vec<(i64, EventBody)>) {
    let mut tracker = TodoTracker::default();
    insert_after(events, |(t, body)| match body {
        EventBody::ToolCall(c) => tracker.on_call(agent, c).map(|u| (*t, u)),
        _ => None,
    });
}

/// Puts what `follow` gives for an item right after it, in one pass (what is put
/// is not given to `follow`).
pub(crate) fn insert_after<T>(items: &mut Vec<T>, mut follow: impl FnMut(&T) -> Option<T>) {
    let mut out = Vec::with_capacity(items.len());
    for item in items.drain(..) {
        let next = follow(&item);
        out.push(item);
        out.extend(next);
    }
    *items = out;
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
        // Items it cannot read are kept, open: such a list never reads as cleared.
        assert_eq!(
            items(json!({"todos": ["fix X", {"what": "y"}]})),
            [
                ("fix X".into(), Pending),
                ("{\"what\":\"y\"}".into(), Pending)
            ]
        );
        // An unknown status is open; an empty list is a cleared list; no list is none.
        assert_eq!(
            items(json!({"todos": [{"content": "A", "status": "blocked"}]})),
            [("A".into(), Pending)]
        );
        assert_eq!(todo_items(&json!({"todos": []})), Some(Vec::new()));
        assert_eq!(todo_items(&json!({"file_path": "x"})), None);
    }

    fn call(id: &str, tool: &str, input: Value) -> EventBody {
        EventBody::ToolCall(ToolCall {
            call_id: id.into(),
            tool: tool.into(),
            input: Some(input.to_string()),
            ..ToolCall::default()
        })
    }

    fn lists(events: &[(i64, EventBody)]) -> Vec<Vec<(String, TodoStatus)>> {
        events
            .iter()
            .filter_map(|(_, b)| match b {
                EventBody::TodoUpdate(u) => Some(
                    u.todos
                        .iter()
                        .map(|t| (t.content.clone(), t.status))
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    }

    /// Claude Code 2.1.17 on: tasks created one by one (numbered in creation order)
    /// and updated by id, `deleted` removing one; an update of a task tacho never saw
    /// created records nothing. The inputs are those of real transcripts (2.1.52).
    #[test]
    fn claude_codes_task_tools_build_the_list_a_piece_at_a_time() {
        use TodoStatus::*;
        let mut events = vec![
            (
                1,
                call(
                    "a",
                    "TaskCreate",
                    json!({"subject": "Add the sampler", "description": "Export a sampler", "activeForm": "Adding"}),
                ),
            ),
            (
                2,
                call(
                    "b",
                    "TaskCreate",
                    json!({"subject": "Wire it", "description": "…"}),
                ),
            ),
            (
                3,
                call(
                    "c",
                    "TaskUpdate",
                    json!({"taskId": "1", "status": "in_progress"}),
                ),
            ),
            (
                4,
                call(
                    "d",
                    "TaskUpdate",
                    json!({"taskId": "1", "status": "completed"}),
                ),
            ),
            (
                5,
                call(
                    "e",
                    "TaskUpdate",
                    json!({"taskId": "2", "status": "deleted"}),
                ),
            ),
            (
                6,
                call(
                    "f",
                    "TaskUpdate",
                    json!({"taskId": "9", "status": "completed"}),
                ),
            ),
            // A transcript repeating a block, and a create without a subject: no change,
            // no number used up.
            (
                6,
                call("a", "TaskCreate", json!({"subject": "Add the sampler"})),
            ),
            (6, call("x", "TaskCreate", json!({"activeForm": "…"}))),
            (7, call("g", "TaskList", json!({}))),
        ];
        with_todo_updates("claude-code", &mut events);
        let s = |c: &str, st| (c.to_string(), st);
        assert_eq!(
            lists(&events),
            [
                vec![s("Add the sampler", Pending)],
                vec![s("Add the sampler", Pending), s("Wire it", Pending)],
                vec![s("Add the sampler", InProgress), s("Wire it", Pending)],
                vec![s("Add the sampler", Completed), s("Wire it", Pending)],
                vec![s("Add the sampler", Completed)],
            ]
        );
        // Folded again from the log (a hook's state rebuilt), the numbering goes on
        // past every task seen, the deleted one too.
        let mut t = TodoTracker::default();
        for (_, b) in &events {
            t.observe(b);
        }
        let next = t.on_call(
            "claude-code",
            &ToolCall {
                call_id: "h".into(),
                tool: "TaskCreate".into(),
                input: Some(json!({"subject": "Third"}).to_string()),
                ..ToolCall::default()
            },
        );
        assert!(
            matches!(next, Some(EventBody::TodoUpdate(u)) if u.todos.last().and_then(|i| i.id.as_deref()) == Some("3"))
        );
    }

    /// Cline's `task_progress` checklist, on any tool's input (VS Code extension
    /// 3.51.0): recorded when it changes, not on every call that repeats it.
    #[test]
    fn clines_task_progress_is_recorded_when_it_changes() {
        let progress = |done: bool| {
            format!(
                "- [x] Analyze the architecture\n- [{}] Review ActionSystem.cs\n  - [ ] Write the fix\n",
                if done { "x" } else { " " }
            )
        };
        let mut events = vec![
            (
                1,
                call(
                    "a",
                    "read_file",
                    json!({"path": "a.cs", "task_progress": progress(false)}),
                ),
            ),
            (
                2,
                call(
                    "b",
                    "read_file",
                    json!({"path": "b.cs", "task_progress": progress(false)}),
                ),
            ),
            (
                3,
                call(
                    "c",
                    "write_to_file",
                    json!({"path": "b.cs", "task_progress": progress(true)}),
                ),
            ),
        ];
        with_todo_updates("cline", &mut events);
        let l = lists(&events);
        assert_eq!(l.len(), 2, "{l:?}");
        // Another agent's tool input that carries the field is no todo list.
        let mut other = vec![(
            1,
            call("a", "mcp__x__y", json!({"task_progress": progress(true)})),
        )];
        with_todo_updates("claude-code", &mut other);
        assert!(lists(&other).is_empty());
        assert_eq!(
            l[1][1],
            ("Review ActionSystem.cs".to_string(), TodoStatus::Completed)
        );
        assert_eq!(l[1][2], ("Write the fix".to_string(), TodoStatus::Pending));
    }

    #[test]
    fn a_todo_tools_call_is_followed_by_its_list_once() {
        let is_todo_tool = |t: &str| TODO_TOOLS.contains(&plain(t).as_str());
        assert!(is_todo_tool("TodoWrite") && is_todo_tool("write_todos"));
        assert!(is_todo_tool("todo_write") && is_todo_tool("update_plan"));
        assert!(!is_todo_tool("todoread") && !is_todo_tool("Write"));
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
        with_todo_updates("claude-code", &mut events);
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
