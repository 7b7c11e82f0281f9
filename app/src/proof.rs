//! What a receipt proves (SPEC §12.2, "Clean room" and "Red/green"): a check runs in a
//! clean room holding exactly the fingerprinted files, never in the workspace; and a
//! check that passes there runs once more in a room "without the change" — the final
//! files with the contract's `changePaths` put back as they were at the goal's start
//! (or, for a contract without `changePaths`, every fingerprinted path as it was then).
//! A check must fail there (red) and pass on the final files (green); a regression
//! guard must pass on both. No list of refused patterns: a masking wrapper, a hollow
//! script, a weakened test or a planted configuration passes without the change too,
//! and so proves nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tacho_git::fingerprint::Entry;
use tacho_git::room::{Room, RoomContent, RoomError, RoomFile, RoomGit};
use tacho_git::snapshot::{FileKind, SnapshotStore, relative_path};
use tacho_projections::GoalState;
use tacho_schema::{Assurance, Setup, path_within, test_like};

use crate::checkenv;
use crate::runner::{self, Ran, RunError, run_command};

pub use tacho_projections::{
    GUARD, GUARD_FAILED, RED_GREEN, UNABLE_TO_FAIL, UNPROVEN, proof_holds, proof_words,
};

/// The rooms' parent directory.
pub(crate) fn rooms_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("cache").join("rooms")
}

/// The project's history a room borrows, when the workspace is in a Git repository
/// with a `HEAD` commit and a `git` program is at one of its fixed paths.
pub(crate) fn room_git(ws: &Path) -> Option<RoomGit> {
    let ctx = tacho_git::snapshot::scan::git_context(ws).ok()??;
    let head = ctx.repo.head_id().ok()?.detach().to_hex().to_string();
    let objects = ctx.repo.common_dir().join("objects");
    let objects = objects.canonicalize().unwrap_or(objects);
    let program = PathBuf::from(tacho_git::remote::git_program().ok()?);
    Some(RoomGit {
        objects,
        head,
        prefix: ctx.prefix.clone(),
        program,
    })
}

/// The room's files for the run with the change: every fingerprinted file, copied from
/// the workspace and checked against the fingerprint's digest.
pub(crate) fn green_files(ws: &Path, entries: &[Entry]) -> Vec<RoomFile> {
    entries
        .iter()
        .filter(|e| e.kind == "file")
        .map(|e| RoomFile {
            path: e.path.clone(),
            executable: e.executable,
            content: RoomContent::Copy {
                from: ws.join(&e.path),
                blake3: e.content.clone(),
            },
        })
        .collect()
}

/// The room "without the change", described before it is made.
pub(crate) struct RedPlan {
    pub files: Vec<RoomFile>,
    /// `change_paths` or `baseline`.
    pub scope: &'static str,
    /// Files outside the change that differ from the goal's start (`M`/`A`/`D PATH`).
    pub changed_since_freeze: Vec<String>,
    /// Digest of the files (path, mode, content), for reusing an earlier run.
    pub files_digest: String,
}

/// What "the change" is for a goal (SPEC §12.2): its `changePaths` (`change_paths`),
/// or, without them, every path the fingerprint covers but test-like ones (`baseline`):
/// tests, fixtures and check scripts stay as they are now in both runs, since putting
/// them back would let a deleted or weakened test look red/green.
pub(crate) struct Change {
    pub scope: &'static str,
    paths: Vec<String>,
}

impl Change {
    /// The change of `g`, whose fingerprint covers `roots`.
    pub fn of(g: &GoalState, roots: &[String]) -> Change {
        match g.assurance().map(|a| a.change_paths).unwrap_or_default() {
            named if named.is_empty() => Change {
                scope: "baseline",
                paths: roots.to_vec(),
            },
            named => Change {
                scope: "change_paths",
                paths: named,
            },
        }
    }

    /// Whether `path` is put back in the run without the change.
    pub fn holds(&self, path: &str) -> bool {
        self.paths.iter().any(|c| path_within(path, c))
            && (self.scope != "baseline" || !test_like(path))
    }
}

/// What the fingerprint covers: the source paths and the files edit events reported,
/// workspace-relative.
fn covered_roots(g: &GoalState, ws: &Path) -> Vec<String> {
    let mut roots = g.source_paths();
    roots.extend(g.edited.keys().filter_map(|p| relative_path(ws, p).ok()));
    roots
}

/// Plans the room without the change: the final `entries` (as the green room `green`
/// holds them), with every path under the change replaced by the goal's start snapshot.
/// `Err` says why no such room can be made (no start snapshot, a link in it).
pub(crate) fn red_plan(
    g: &GoalState,
    ws: &Path,
    entries: &[Entry],
    green: &Room,
    store: &SnapshotStore,
) -> Result<RedPlan, String> {
    let Some(start) = g.created.start_snapshot.as_deref() else {
        return Err("the goal was frozen before tacho took a snapshot at freeze (revise the goal to freeze one)".into());
    };
    let tree = store
        .resolve(start)
        .map_err(|e| format!("the goal's start snapshot {start}: {e}"))?;
    let start_files = store
        .files(tree)
        .map_err(|e| format!("reading the goal's start snapshot {start}: {e}"))?;
    let roots = covered_roots(g, ws);
    let change = Change::of(g, &roots);
    let scope = change.scope;
    let in_change = |p: &str| change.holds(p);
    let covered = |p: &str| roots.iter().any(|r| path_within(p, r));
    let mut files = Vec::new();
    let mut digest_parts: BTreeMap<String, (bool, String)> = BTreeMap::new();
    // Final files outside the change: as they are now (from the green room).
    let mut finals: BTreeMap<&str, &Entry> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.kind == "file") {
        finals.insert(&e.path, e);
        if in_change(&e.path) {
            continue;
        }
        digest_parts.insert(e.path.clone(), (e.executable, e.content.clone()));
        files.push(RoomFile {
            path: e.path.clone(),
            executable: e.executable,
            // From the workspace again, checked against the fingerprint: the room with
            // the change is gone before this one is made.
            content: RoomContent::Copy {
                from: ws.join(&e.path),
                blake3: e.content.clone(),
            },
        });
    }
    let mut changed = Vec::new();
    for (path, f) in &start_files {
        if !covered(path) {
            continue;
        }
        let executable = match f.kind {
            FileKind::Regular => false,
            FileKind::Executable => true,
            FileKind::Link if in_change(path) => {
                return Err(format!(
                    "{path} was a symbolic link at the goal's start: a room holds files only"
                ));
            }
            FileKind::Link => {
                // Not a file the fingerprint could have held: changed, whatever is there now.
                changed.push(format!(
                    "{} {path}",
                    if finals.contains_key(path.as_str()) {
                        "M"
                    } else {
                        "D"
                    }
                ));
                continue;
            }
        };
        if !in_change(path) {
            // Outside the change only a comparison is needed: by blob id, as the green
            // room computed it for the file it placed (never the snapshot's blob).
            let same = finals
                .get(path.as_str())
                .map(|e| e.executable == executable && green.blob_id(path) == Some(f.oid));
            match same {
                None => changed.push(format!("D {path}")),
                Some(false) => changed.push(format!("M {path}")),
                Some(true) => {}
            }
            continue;
        }
        let bytes = store
            .blob(f.oid)
            .map_err(|e| format!("reading {path} of the start snapshot: {e}"))?;
        let content = blake3::hash(&bytes).to_hex().to_string();
        match finals.get(path.as_str()) {
            None => changed.push(format!("D {path}")),
            Some(e) if e.executable != executable || e.content != content => {
                changed.push(format!("M {path}"))
            }
            Some(_) => {}
        }
        {
            digest_parts.insert(path.clone(), (executable, content));
            files.push(RoomFile {
                path: path.clone(),
                executable,
                content: RoomContent::Bytes(bytes),
            });
        }
    }
    for p in finals.keys() {
        if !start_files.contains_key(*p) {
            changed.push(format!("A {p}"));
        }
    }
    // What a reviewer must see: with `changePaths`, every change outside them; without,
    // the changes to tests, fixtures, configuration-like paths and the files the
    // check commands name (the rest is the change itself).
    let commands: Vec<String> = g.check_ids().into_iter().map(|(_, c)| c).collect();
    let named = |p: &str| {
        commands.iter().any(|c| {
            c.split_whitespace()
                .map(|w| w.trim_matches(['"', '\'']))
                .filter(|w| !w.is_empty() && *w != "." && !w.starts_with('-'))
                .any(|w| path_within(p, w))
        })
    };
    changed.retain(|line| {
        let p = line.get(2..).unwrap_or_default();
        match scope {
            "change_paths" => !in_change(p),
            _ => test_like(p) || named(p),
        }
    });
    changed.sort_by(|a, b| a.get(2..).cmp(&b.get(2..)));
    let mut h = blake3::Hasher::new_derive_key("tacho red room v1");
    for (path, (x, content)) in &digest_parts {
        h.update(&(path.len() as u64).to_le_bytes());
        h.update(path.as_bytes());
        h.update(&[u8::from(*x)]);
        h.update(content.as_bytes());
    }
    Ok(RedPlan {
        files,
        scope,
        changed_since_freeze: changed,
        files_digest: h.finalize().to_hex().to_string(),
    })
}

/// The inputs of a run without the change, by which it is reused: the command, the
/// environment, the programs and the room's files.
pub(crate) fn red_inputs(
    command: &str,
    env_digest: &str,
    programs: &[String],
    files: &str,
) -> String {
    let mut h = blake3::Hasher::new_derive_key("tacho red run v1");
    for part in [command, env_digest, &programs.join("\n"), files] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().to_hex().to_string()
}

/// The environment a check runs with in `room`: the frozen one, with `HOME` and the
/// temporary directories inside the room.
pub(crate) fn room_environment(frozen: &[String], room: &Room) -> Vec<String> {
    let home = format!("HOME={}", room.home().display());
    let tmp = room.tmp().display().to_string();
    let mut env: Vec<String> = frozen
        .iter()
        .filter(|e| {
            !matches!(
                e.split_once('=').map(|x| x.0),
                Some("HOME" | "TMPDIR" | "TMP" | "TEMP")
            )
        })
        .cloned()
        .collect();
    env.push(home);
    for n in ["TMPDIR", "TMP", "TEMP"] {
        env.push(format!("{n}={tmp}"));
    }
    env.sort();
    env
}

/// Runs `command` in `room` with the frozen environment `frozen`; returns the run and
/// the programs it resolved to (from the room).
pub(crate) fn run_in(
    room: &Room,
    command: &str,
    frozen: &[String],
    timeout: Duration,
) -> Result<(Ran, Vec<String>), RunError> {
    let env = room_environment(frozen, room);
    let programs = checkenv::resolve(
        &checkenv::program_names(command, runner::shell()),
        frozen,
        &room.cwd(),
    );
    let ran = run_command(command, &room.cwd(), &env, timeout)?;
    Ok((ran, programs))
}

/// The warm room of workspace `ws` (one per workspace, SPEC §12.2).
pub(crate) fn room_key(ws: &Path) -> String {
    let h = blake3::Hasher::new_derive_key("tacho warm room v1")
        .update(ws.as_os_str().as_encoded_bytes())
        .finalize();
    h.to_hex().get(..16).unwrap_or_default().to_owned()
}

/// What a setup leaves in a room: its outputs, kept in a warm room from one check to
/// the next and checked against their digest before they are used.
pub(crate) fn kept(setup: Option<&Setup>) -> Vec<String> {
    setup.map(|s| s.outputs.clone()).unwrap_or_default()
}

/// Makes (or brings back) the warm room of `ws` holding `files`, `Ok(Err(why))` when a
/// file changed since it was fingerprinted.
pub(crate) fn make_room(
    parent: &Path,
    ws: &Path,
    files: &[RoomFile],
    git: Option<&RoomGit>,
    keep: &[String],
) -> Result<Result<Room, String>, RoomError> {
    changed_is_no_room(Room::warm(parent, &room_key(ws), files, git, keep))
}

/// Brings `room` to hold `files` instead, `Ok(Err(why))` when a file changed since it
/// was fingerprinted.
pub(crate) fn refill_room(
    room: &mut Room,
    files: &[RoomFile],
    git: Option<&RoomGit>,
    keep: &[String],
) -> Result<Result<(), String>, RoomError> {
    changed_is_no_room(room.refill(files, git, keep))
}

fn changed_is_no_room<T>(r: Result<T, RoomError>) -> Result<Result<T, String>, RoomError> {
    match r {
        Ok(r) => Ok(Ok(r)),
        Err(RoomError::Changed(p)) => Ok(Err(format!(
            "{p}: changed while the clean room was made from it"
        ))),
        Err(e) => Err(e),
    }
}

/// Whether the check `id` is a regression guard in goal `g`.
pub(crate) fn is_guard(g: &GoalState, id: &str) -> bool {
    g.assurance()
        .and_then(|a| a.checks.into_iter().find(|c| c.id == id))
        .is_some_and(|c| Assurance::is_guard(&g.created.kind, &c))
}

/// The proof a green pass and a run without the change make.
pub(crate) fn judge(guard: bool, red_failed: bool) -> &'static str {
    match (guard, red_failed) {
        (false, true) => RED_GREEN,
        (false, false) => UNABLE_TO_FAIL,
        (true, false) => GUARD,
        (true, true) => GUARD_FAILED,
    }
}

/// What the run without the change showed, for the receipt.
#[derive(Debug, Default)]
pub(crate) struct ProofRun {
    pub proof: Option<String>,
    pub note: Option<String>,
    pub scope: Option<String>,
    pub red_exit_code: Option<i64>,
    pub red_timed_out: bool,
    pub inputs: Option<String>,
    pub reused: Option<u64>,
    pub changed_since_freeze: Vec<String>,
}

/// A check that passed in its clean room, and what the run without the change needs.
pub(crate) struct GreenRun<'a> {
    pub g: &'a GoalState,
    pub check: &'a str,
    pub command: &'a str,
    /// The frozen environment.
    pub env: &'a [String],
    pub env_digest: &'a str,
    pub programs: &'a [String],
    /// The fingerprint's entries the green room was made of.
    pub entries: &'a [Entry],
    pub git: Option<&'a RoomGit>,
    pub timeout: Duration,
    /// The contract's setup, run (or taken from the cache) in the room without the
    /// change too.
    pub setup: Option<&'a Setup>,
}

impl crate::Tacho {
    /// Runs the check without the change (or reuses an earlier run with the same
    /// inputs) and judges the pair.
    /// `green` is the room the check passed in: read for the comparison with the start
    /// snapshot, then brought to the files without the change (one room, so a run
    /// cannot tell which it is by its place or by counting rooms).
    pub(crate) fn red_run(
        &self,
        r: &GreenRun<'_>,
        green: Room,
        trusted: &mut Vec<(String, String)>,
    ) -> Result<ProofRun, crate::goals::GoalError> {
        let unproven = |note: String| ProofRun {
            proof: Some(UNPROVEN.into()),
            note: Some(note),
            ..ProofRun::default()
        };
        let ws = PathBuf::from(&r.g.created.workspace);
        let plan = red_plan(r.g, &ws, r.entries, &green, self.snapshots()?);
        let plan = match plan {
            Ok(p) => p,
            Err(why) => return Ok(unproven(why)),
        };
        let inputs = red_inputs(r.command, r.env_digest, r.programs, &plan.files_digest);
        let guard = is_guard(r.g, r.check);
        let mut out = ProofRun {
            scope: Some(plan.scope.into()),
            inputs: Some(inputs.clone()),
            changed_since_freeze: plan.changed_since_freeze.clone(),
            ..ProofRun::default()
        };
        // An earlier receipt of this check whose run without the change had the same
        // inputs: its result stands (the log keeps it; nothing else is trusted).
        let earlier = r.g.receipts.get(r.check).filter(|(_, e)| {
            e.red_inputs.as_deref() == Some(inputs.as_str())
                && matches!(
                    e.proof.as_deref(),
                    Some(RED_GREEN | GUARD | UNABLE_TO_FAIL | GUARD_FAILED)
                )
        });
        let (exit, timed_out) = match earlier {
            Some((seq, e)) => {
                out.reused = Some(e.red_reused.unwrap_or(*seq));
                (e.red_exit_code, e.red_timed_out)
            }
            None => {
                // The same room, brought to the files without the change: a run cannot
                // tell which it is by its directory, and only what differs is written.
                let mut room = green;
                match refill_room(&mut room, &plan.files, r.git, &kept(r.setup)) {
                    Ok(Ok(())) => {}
                    Ok(Err(why)) => return Ok(unproven(why)),
                    // Whatever the check left in the room that cannot be cleared away:
                    // no run without the change, so no proof (never an error that
                    // leaves the check without a receipt).
                    Err(e) => {
                        return Ok(unproven(format!(
                            "the room without the change could not be made: {e}"
                        )));
                    }
                }
                if let Some(setup) = r.setup {
                    let run = self.provide_setup(setup, &room, r.env, trusted, r.timeout)?;
                    if let Some(why) = run.failed {
                        return Ok(ProofRun {
                            proof: Some(UNPROVEN.into()),
                            note: Some(format!("without the change: {why}")),
                            ..out
                        });
                    }
                }
                self.note(&format!(
                    "running check {} without the change ({}): {}",
                    r.check,
                    match plan.scope {
                        "baseline" => "every source path as at the goal's start",
                        _ => "changePaths as at the goal's start",
                    },
                    r.command
                ));
                let (ran, _) = run_in(&room, r.command, r.env, r.timeout)?;
                if let Some(path) = room.changed(&plan.files) {
                    return Ok(unproven(format!(
                        "{path} changed in the room without the change while the check ran"
                    )));
                }
                (ran.exit_code, ran.timed_out)
            }
        };
        out.red_exit_code = exit;
        out.red_timed_out = timed_out;
        let red_failed = exit != Some(0) || timed_out;
        out.proof = Some(judge(guard, red_failed).into());
        Ok(out)
    }
}

/// The setup's result in a room: the digest of its inputs and of the outputs the room
/// holds, or why there are none.
#[derive(Debug, Clone, Default)]
pub(crate) struct SetupRun {
    pub inputs: Option<String>,
    pub digest: Option<String>,
    /// Why the check cannot run (the setup failed, or made no output it declares).
    pub failed: Option<String>,
}

/// The digest of what a setup reads in `work`: its command, the environment's digest,
/// and each input's path and content (a directory as [`tree_digest`] gives it, `-`
/// when missing).
fn setup_inputs(work: &Path, setup: &Setup, env_digest: &str) -> std::io::Result<String> {
    let mut h = blake3::Hasher::new_derive_key("tacho setup inputs v1");
    let mut part = |b: &[u8]| {
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    };
    part(setup.command.as_bytes());
    part(env_digest.as_bytes());
    let mut inputs = setup.inputs.clone();
    inputs.sort();
    for i in &inputs {
        part(i.as_bytes());
        let d = match std::fs::symlink_metadata(work.join(i)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => "-".to_string(),
            Err(e) => return Err(e),
            Ok(_) => tree_digest(work, std::slice::from_ref(i))?,
        };
        part(d.as_bytes());
    }
    Ok(h.finalize().to_hex().to_string())
}

/// The digest of the trees `paths` under `root` (never following a link): each entry
/// sorted by path, its kind (file, executable, link, directory), path, and content or
/// link target. A path that is missing is an error.
pub(crate) fn tree_digest(root: &Path, paths: &[String]) -> std::io::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut entries: Vec<(String, u8, Vec<u8>)> = Vec::new();
    let mut stack: Vec<String> = paths
        .iter()
        .map(|p| p.trim_end_matches('/').to_owned())
        .collect();
    while let Some(rel) = stack.pop() {
        let p = root.join(&rel);
        let m = std::fs::symlink_metadata(&p)?;
        if m.is_symlink() {
            let t = std::fs::read_link(&p)?;
            entries.push((rel, b'l', t.as_os_str().as_encoded_bytes().to_vec()));
        } else if m.is_dir() {
            entries.push((rel.clone(), b'd', Vec::new()));
            for e in std::fs::read_dir(&p)? {
                let name = e?.file_name();
                stack.push(format!("{rel}/{}", name.to_string_lossy()));
            }
        } else if m.is_file() {
            let kind = if m.permissions().mode() & 0o111 != 0 {
                b'x'
            } else {
                b'f'
            };
            let mut f = std::fs::File::open(&p)?;
            let mut h = blake3::Hasher::new();
            std::io::copy(&mut f, &mut h)?;
            entries.push((rel, kind, h.finalize().as_bytes().to_vec()));
        } else {
            // A FIFO, a socket, a device: nothing a setup's outputs may hold.
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{rel}: neither a file, a directory nor a link"),
            ));
        }
    }
    entries.sort();
    let mut h = blake3::Hasher::new_derive_key("tacho setup outputs v1");
    for (path, kind, content) in &entries {
        h.update(&(path.len() as u64).to_le_bytes());
        h.update(path.as_bytes());
        h.update(&[*kind]);
        h.update(&(content.len() as u64).to_le_bytes());
        h.update(content);
    }
    Ok(h.finalize().to_hex().to_string())
}

/// Whether the trees `paths` under `root` hold nothing but files of one link each,
/// directories and links: a warm room's kept outputs with a hard link to a file
/// elsewhere (which a check would write through) are put back from the cache.
fn tree_intact(root: &Path, paths: &[String]) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mut stack: Vec<PathBuf> = paths.iter().map(|p| root.join(p)).collect();
    while let Some(p) = stack.pop() {
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            return false;
        };
        if m.is_dir() {
            match std::fs::read_dir(&p) {
                Ok(rd) => stack.extend(rd.flatten().map(|e| e.path())),
                Err(_) => return false,
            }
        } else if !(m.is_symlink() || (m.is_file() && m.nlink() == 1)) {
            return false;
        }
    }
    true
}

/// Copies the trees `paths` from `from` to `to` as they are: files with their
/// executable bit, directories, links as links (never followed, on either side:
/// nothing is written through a link found at `to`).
fn copy_trees(from: &Path, to: &Path, paths: &[String]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut stack: Vec<(String, bool)> = paths
        .iter()
        .map(|p| (p.trim_end_matches('/').to_owned(), true))
        .collect();
    while let Some((rel, top)) = stack.pop() {
        let (src, dst) = (from.join(&rel), to.join(&rel));
        let m = std::fs::symlink_metadata(&src)?;
        if top && let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if m.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else if m.is_dir() {
            std::fs::create_dir(&dst)?;
            for e in std::fs::read_dir(&src)? {
                stack.push((format!("{rel}/{}", e?.file_name().to_string_lossy()), false));
            }
        } else if m.is_file() {
            let mode = if m.permissions().mode() & 0o111 != 0 {
                0o755
            } else {
                0o644
            };
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&dst)?;
            std::io::copy(&mut std::fs::File::open(&src)?, &mut out)?;
            out.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
    }
    Ok(())
}

/// Where the setup's outputs for inputs `key` are cached.
fn setup_cache(data_dir: &Path, key: &str) -> PathBuf {
    data_dir.join("cache").join("setup").join(key)
}

/// The (inputs, digest) pairs of setups a goal's receipts recorded: the only cache
/// entries a check trusts (the log is tamper-evident; the cache is not).
pub(crate) fn recorded_setups(g: &GoalState) -> Vec<(String, String)> {
    g.receipts
        .values()
        .filter_map(|(_, r)| Some((r.setup_inputs.clone()?, r.setup_digest.clone()?)))
        .collect()
}

impl crate::Tacho {
    /// Puts the contract's setup outputs into `room`: from the cache when `trusted`
    /// holds this room's inputs with a digest the cache still has, else by running the
    /// setup command in the room (its outputs then cached, and the pair added to
    /// `trusted`).
    pub(crate) fn provide_setup(
        &self,
        setup: &Setup,
        room: &Room,
        frozen: &[String],
        trusted: &mut Vec<(String, String)>,
        timeout: Duration,
    ) -> Result<SetupRun, crate::goals::GoalError> {
        let io = |what: &str, e: std::io::Error| SetupRun {
            failed: Some(format!("setup: {what}: {e}")),
            ..SetupRun::default()
        };
        let key = match setup_inputs(&room.cwd(), setup, &checkenv::digest(frozen)) {
            Ok(k) => k,
            Err(e) => return Ok(io("reading its inputs", e)),
        };
        let cache = setup_cache(self.data_dir(), &key);
        // The room's outputs go before the setup runs or the cache's are put back.
        let clear = || {
            room.remove(&setup.outputs)
                .map_err(|e| io("clearing its outputs", std::io::Error::other(e.to_string())))
        };
        if let Some((_, want)) = trusted.iter().find(|(k, _)| *k == key)
            && tree_digest(&cache, &setup.outputs).is_ok_and(|d| d == *want)
        {
            // A warm room may hold them already, as the cache has them (checked, never
            // assumed: the room is the user's to write).
            let kept = tree_intact(&room.cwd(), &setup.outputs)
                && tree_digest(&room.cwd(), &setup.outputs).is_ok_and(|d| d == *want);
            if !kept {
                if let Err(e) = clear() {
                    return Ok(e);
                }
                if let Err(e) = copy_trees(&cache, &room.cwd(), &setup.outputs) {
                    return Ok(io("copying its cached outputs", e));
                }
            }
            self.note(&format!(
                "setup `{}`: {}",
                setup.command,
                if kept {
                    "the room's outputs match the cache"
                } else {
                    "outputs taken from the cache"
                }
            ));
            return Ok(SetupRun {
                inputs: Some(key),
                digest: Some(want.clone()),
                failed: None,
            });
        }
        if let Err(e) = clear() {
            return Ok(e);
        }
        self.note(&format!(
            "setup: running `{}` in the clean room",
            setup.command
        ));
        let env = room_environment(frozen, room);
        let ran = run_command(&setup.command, &room.cwd(), &env, timeout)?;
        if ran.exit_code != Some(0) || ran.timed_out {
            return Ok(SetupRun {
                inputs: Some(key),
                digest: None,
                failed: Some(format!(
                    "setup `{}` failed ({}): the check did not run",
                    setup.command,
                    match (ran.timed_out, ran.exit_code) {
                        (true, _) => "timed out".to_string(),
                        (_, Some(c)) => format!("exit {c}"),
                        (_, None) => "killed by a signal".to_string(),
                    }
                )),
            });
        }
        let digest = match tree_digest(&room.cwd(), &setup.outputs) {
            Ok(d) => d,
            Err(e) => return Ok(io("its declared outputs after it ran", e)),
        };
        // Cached for the next room: written beside, then renamed into place.
        let parent = self.data_dir().join("cache").join("setup");
        let stage = parent.join(format!(".new-{}-{}", std::process::id(), self.now()));
        let staged = std::fs::create_dir_all(&stage).and_then(|()| {
            copy_trees(&room.cwd(), &stage, &setup.outputs)?;
            let _ = std::fs::remove_dir_all(&cache);
            std::fs::rename(&stage, &cache)
        });
        if staged.is_err() {
            let _ = std::fs::remove_dir_all(&stage);
        }
        if let Err(e) = staged {
            self.note(&format!("setup: its outputs were not cached: {e}"));
        }
        trusted.push((key.clone(), digest.clone()));
        Ok(SetupRun {
            inputs: Some(key),
            digest: Some(digest),
            failed: None,
        })
    }
}
