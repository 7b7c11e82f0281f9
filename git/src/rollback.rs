//! The rollback planner and its executor.
//!
//! One function computes the plan; `--dry-run` prints it and the real rollback applies
//! the same value. The plan touches only the files the session changed after the
//! chosen point (what its later snapshots differ in, plus what its edit events
//! reported), and leaves alone files that changed outside the session since its last
//! snapshot (conflicts) unless forced.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use gix::ObjectId;
use serde::Serialize;

use crate::safefs::{Found, Root, SafeFsError};
use crate::snapshot::{FileEntry, FileKind, Files, SnapshotError, SnapshotStore};

/// What the planner looks at.
pub struct PlanInput<'a> {
    /// The workspace as it was at the point to restore.
    pub target: &'a Files,
    /// Snapshots the included sessions took after the point, oldest first. The last one
    /// is the sessions' last known state of the workspace.
    pub later: Vec<&'a Files>,
    /// Paths edit events reported after the point.
    pub edited: &'a BTreeSet<String>,
    /// Paths edit events reported after the last of `later` (all of `edited` when
    /// there is no later snapshot): their current state is the sessions' doing.
    pub edited_after_last: &'a BTreeSet<String>,
    /// The workspace now (the snapshot rollback takes first).
    pub current: &'a Files,
    /// Paths that snapshot had to leave out, and why: they are not touched.
    pub unprotected: &'a BTreeMap<String, String>,
    /// Apply conflicting files too.
    pub force: bool,
    /// Only these paths, when given (undoing one change of several).
    pub only: Option<&'a BTreeSet<String>>,
    /// Only paths at or under these (files or directories, workspace-relative, `/`
    /// separated); all when empty (`session rollback --path`).
    pub within: &'a [String],
    /// Paths some change after the point made that no tool call of the sessions made
    /// (a user's edit, another process's), with why: never taken back unnamed — a
    /// conflict unless `force`.
    pub unclaimed: &'a BTreeMap<String, String>,
}

/// Whether `path` is `scope` or under it (a directory).
pub fn is_within(path: &str, scope: &str) -> bool {
    path == scope
        || path
            .strip_prefix(scope)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// What happens to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Content (and perhaps mode or kind) put back.
    Restore,
    /// Same content, executable bit put back.
    Mode,
    /// Created after the point: deleted.
    Delete,
    /// Deleted after the point: re-created.
    Recreate,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Restore => "restore",
            Action::Mode => "mode",
            Action::Delete => "delete",
            Action::Recreate => "recreate",
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanItem {
    pub path: String,
    pub action: Action,
    /// What is there now (checked again just before acting).
    pub now: Option<FileEntry>,
    /// What will be there.
    pub then: Option<FileEntry>,
    /// Changed outside the session, included because of `--force`.
    pub forced: bool,
}

/// A file the plan leaves alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conflict {
    pub path: String,
    pub reason: String,
    /// The file changed outside the session: `--force` would restore it. False for
    /// files that cannot be restored at all (never snapshotted, unsafe, failed).
    #[serde(skip)]
    pub forceable: bool,
}

/// The plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub items: Vec<PlanItem>,
    pub conflicts: Vec<Conflict>,
    /// Files the session changed that are already as they were at the point.
    pub already: u64,
    /// How many paths the session changed after the point.
    pub considered: u64,
}

impl Plan {
    pub fn count(&self, action: Action) -> usize {
        self.items.iter().filter(|i| i.action == action).count()
    }
}

/// Computes the plan.
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let mut changed: BTreeSet<&str> = BTreeSet::new();
    for later in &input.later {
        diff_paths(input.target, later, &mut changed);
    }
    changed.extend(input.edited.iter().map(String::as_str));
    if let Some(only) = input.only {
        changed.retain(|p| only.contains(*p));
    }
    if !input.within.is_empty() {
        changed.retain(|p| input.within.iter().any(|s| is_within(p, s)));
    }
    let last = input.later.last();
    let mut plan = Plan {
        considered: changed.len() as u64,
        ..Plan::default()
    };
    for path in changed {
        if let Some(why) = input.unprotected.get(path) {
            plan.conflicts.push(Conflict {
                path: path.to_owned(),
                reason: format!("cannot be restored: {why}"),
                forceable: false,
            });
            continue;
        }
        let then = input.target.get(path).copied();
        let now = input.current.get(path).copied();
        if then == now {
            plan.already += 1;
            continue;
        }
        let mut forced = false;
        if let Some(why) = input.unclaimed.get(path) {
            if !input.force {
                plan.conflicts.push(Conflict {
                    path: path.to_owned(),
                    reason: why.clone(),
                    forceable: true,
                });
                continue;
            }
            forced = true;
        }
        if let Some(last) = last {
            let known = last.get(path).copied();
            if now != known && !input.edited_after_last.contains(path) {
                if !input.force {
                    plan.conflicts.push(Conflict {
                        path: path.to_owned(),
                        reason: describe_conflict(known, now),
                        forceable: true,
                    });
                    continue;
                }
                forced = true;
            }
        }
        let action = match (then, now) {
            (None, Some(_)) => Action::Delete,
            (Some(_), None) => Action::Recreate,
            (Some(t), Some(n)) if t.oid == n.oid && is_file(t.kind) && is_file(n.kind) => {
                Action::Mode
            }
            _ => Action::Restore,
        };
        plan.items.push(PlanItem {
            path: path.to_owned(),
            action,
            now,
            then,
            forced,
        });
    }
    plan
}

fn is_file(k: FileKind) -> bool {
    matches!(k, FileKind::Regular | FileKind::Executable)
}

fn describe_conflict(known: Option<FileEntry>, now: Option<FileEntry>) -> String {
    match (known, now) {
        (None, Some(_)) => "created outside the session after its last snapshot".into(),
        (Some(_), None) => "deleted outside the session after its last snapshot".into(),
        _ => "changed outside the session after its last snapshot".into(),
    }
}

/// Adds the paths where `a` and `b` differ.
fn diff_paths<'a>(a: &'a Files, b: &'a Files, out: &mut BTreeSet<&'a str>) {
    let mut ia = a.iter().peekable();
    let mut ib = b.iter().peekable();
    loop {
        match (ia.peek(), ib.peek()) {
            (Some((pa, ea)), Some((pb, eb))) => match pa.cmp(pb) {
                std::cmp::Ordering::Less => {
                    out.insert(pa.as_str());
                    ia.next();
                }
                std::cmp::Ordering::Greater => {
                    out.insert(pb.as_str());
                    ib.next();
                }
                std::cmp::Ordering::Equal => {
                    if ea != eb {
                        out.insert(pa.as_str());
                    }
                    ia.next();
                    ib.next();
                }
            },
            (Some((pa, _)), None) => {
                out.insert(pa.as_str());
                ia.next();
            }
            (None, Some((pb, _))) => {
                out.insert(pb.as_str());
                ib.next();
            }
            (None, None) => break,
        }
    }
}

/// What applying a plan did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    pub done: Vec<PlanItem>,
    /// Items not applied: refused (unsafe path), failed, or changed since planning.
    pub failed: Vec<Conflict>,
    /// Directories removed because the rollback emptied them.
    pub removed_dirs: Vec<String>,
}

/// Applies a plan to `workspace`, taking contents from the store. Each file is checked
/// to still be as planned just before it is touched; every write is confined to the
/// workspace (see `safefs`).
pub fn apply(
    store: &SnapshotStore,
    workspace: &Path,
    plan: &Plan,
) -> Result<Applied, SnapshotError> {
    let root = Root::open(workspace).map_err(|e| SnapshotError::Workspace {
        path: workspace.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut out = Applied::default();
    let mut deletes: Vec<&PlanItem> = plan
        .items
        .iter()
        .filter(|i| i.action == Action::Delete)
        .collect();
    deletes.sort_by(|a, b| {
        depth(&b.path)
            .cmp(&depth(&a.path))
            .then(a.path.cmp(&b.path))
    });
    let writes = plan.items.iter().filter(|i| i.action != Action::Delete);

    // Directories that hold files at the point must stay.
    let mut target_dirs: BTreeSet<&str> = BTreeSet::new();
    for i in &plan.items {
        if let Some(_t) = i.then {
            for (k, _) in i.path.match_indices('/') {
                target_dirs.insert(&i.path[..k]);
            }
        }
    }
    let mut emptied: BTreeSet<String> = BTreeSet::new();
    for item in deletes {
        match step(store, &root, item) {
            Ok(()) => {
                out.done.push(item.clone());
                for (k, _) in item.path.match_indices('/') {
                    emptied.insert(item.path[..k].to_owned());
                }
            }
            Err(reason) => out.failed.push(Conflict {
                path: item.path.clone(),
                reason,
                forceable: false,
            }),
        }
    }
    let mut emptied: Vec<String> = emptied
        .into_iter()
        .filter(|d| !target_dirs.contains(d.as_str()))
        .collect();
    emptied.sort_by(|a, b| depth(b).cmp(&depth(a)).then(a.cmp(b)));
    for d in emptied {
        if let Ok(true) = root.remove_empty_dir(&d) {
            out.removed_dirs.push(d);
        }
    }
    for item in writes {
        match step(store, &root, item) {
            Ok(()) => out.done.push(item.clone()),
            Err(reason) => out.failed.push(Conflict {
                path: item.path.clone(),
                reason,
                forceable: false,
            }),
        }
    }
    Ok(out)
}

fn depth(p: &str) -> usize {
    p.matches('/').count()
}

/// Applies one item after checking the file is still as planned.
fn step(store: &SnapshotStore, root: &Root, item: &PlanItem) -> Result<(), String> {
    let err = |e: SafeFsError| e.to_string();
    let found = root.read(&item.path).map_err(err)?;
    if entry_of(&found)? != item.now {
        return Err("changed since the plan was made; left alone".into());
    }
    match item.action {
        Action::Delete => root.remove(&item.path).map_err(err),
        Action::Mode => {
            let then = item.then.ok_or("nothing to restore")?;
            root.set_perms(&item.path, then.perms).map_err(err)?;
            read_back(root, &item.path, then)
        }
        Action::Restore | Action::Recreate => {
            let then = item.then.ok_or("nothing to restore")?;
            let data = store.blob(then.oid).map_err(|e| e.to_string())?;
            match then.kind {
                FileKind::Link => root.write_link(&item.path, &data).map_err(err)?,
                _ => root
                    .write_file(&item.path, &data, then.perms)
                    .map_err(err)?,
            }
            read_back(root, &item.path, then)
        }
    }
}

/// What was written is read back and must be the target: a rollback that says it
/// restored a file has (content, kind and permission bits), or it fails on that path
/// (the pre-rollback snapshot stays the undo point).
fn read_back(root: &Root, path: &str, then: FileEntry) -> Result<(), String> {
    let back = root.read(path).map_err(|e| e.to_string())?;
    match entry_of(&back)? {
        Some(e) if e == then => Ok(()),
        other => Err(format!(
            "written, but it reads back as {} instead of {}",
            other.map_or("nothing".to_string(), describe_entry),
            describe_entry(then)
        )),
    }
}

fn describe_entry(e: FileEntry) -> String {
    match e.kind {
        FileKind::Link => format!("a link {}", e.oid),
        _ => format!("a {} {} of mode {:o}", e.kind.as_str(), e.oid, e.perms),
    }
}

/// The snapshot entry a found file would have.
fn entry_of(found: &Found) -> Result<Option<FileEntry>, String> {
    let hash = |data: &[u8]| -> Result<ObjectId, String> {
        gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::object::Kind::Blob, data)
            .map_err(|e| e.to_string())
    };
    Ok(match found {
        Found::Missing | Found::Dir => None,
        Found::File { data, perms } => Some(FileEntry {
            kind: FileKind::of_file_mode(*perms),
            oid: hash(data)?,
            perms: *perms,
        }),
        Found::Link(t) => Some(FileEntry::plain(FileKind::Link, hash(t)?)),
        Found::Other => return Err("a special file is in the way; left alone".into()),
    })
}
