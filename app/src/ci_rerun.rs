//! `tacho ci verify BASE..HEAD --rerun` (SPEC §17.3, "Rerun"): each assured goal's
//! frozen checks run again by CI, not trusted from the agent's machine — in clean rooms
//! made from the committed tree (the goal's newest commit in the range, from the
//! repository's objects, never a work tree), red/green against the range's base (the
//! change's paths as BASE has them). A check whose CI result differs from its receipt
//! fails the range.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use tacho_git::fingerprint::{TreeFile, tree_files};
use tacho_git::room::{RoomContent, RoomFile};
use tacho_git::snapshot::relative_path;
use tacho_projections::{GoalState, proof_holds};

use crate::checkenv;
use crate::proof::{self, judge};

/// How long one run of a check may take in CI.
pub const RERUN_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// One check run again by CI, against its latest receipt.
#[derive(Debug, Clone, Serialize)]
pub struct CiRerun {
    pub check: String,
    /// What the latest receipt says: `passed (PROOF)`, `failed`, or `no receipt`.
    pub receipt: String,
    /// What CI found: `passed (PROOF)`, `failed (exit N)`, or why it could not run.
    pub ci: String,
    pub exit_code: Option<i64>,
    /// The run without the change (BASE's change paths), when the check passed.
    pub red_exit_code: Option<i64>,
    pub proof: Option<String>,
    /// The receipt and CI agree: both passed with a proof that holds, or both not.
    pub agrees: bool,
}

fn to_room(files: Vec<TreeFile>) -> Vec<RoomFile> {
    files
        .into_iter()
        .map(|f| RoomFile {
            path: f.path,
            executable: f.executable,
            content: RoomContent::Bytes(f.bytes),
        })
        .collect()
}

impl crate::Tacho {
    /// Runs every check of `g` on `commit`'s tree and without the change (its paths as
    /// `base` has them), in CI's own environment.
    pub(crate) fn rerun_goal(
        &self,
        ws: &Path,
        g: &GoalState,
        commit: &str,
        base: &str,
    ) -> Vec<CiRerun> {
        let gws = PathBuf::from(&g.created.workspace);
        let edited: Vec<String> = g
            .edited
            .keys()
            .filter_map(|p| relative_path(&gws, p).ok())
            .collect();
        let paths = g.source_paths();
        let checks = g.check_ids();
        let fail_all = |why: String| -> Vec<CiRerun> {
            checks
                .iter()
                .map(|(id, _)| CiRerun {
                    check: id.clone(),
                    receipt: receipt_words(g, id).0,
                    ci: why.clone(),
                    exit_code: None,
                    red_exit_code: None,
                    proof: None,
                    agrees: !receipt_words(g, id).1,
                })
                .collect()
        };
        let read = |c: &str| match tree_files(ws, c, &paths, &edited) {
            Ok(Ok(f)) => Ok(f),
            Ok(Err(why)) => Err(format!("no room can be made of {c}: {why}")),
            Err(e) => Err(format!("no room can be made of {c}: {e}")),
        };
        let (green_files, base_files) = match (read(commit), read(base)) {
            (Ok(g), Ok(b)) => (g, b),
            (Err(why), _) | (_, Err(why)) => return fail_all(why),
        };
        let roots: Vec<String> = paths.iter().chain(&edited).cloned().collect();
        let change = proof::Change::of(g, &roots);
        let in_change = |p: &str| change.holds(p);
        let mut red_files: Vec<TreeFile> = green_files
            .iter()
            .filter(|f| !in_change(&f.path))
            .cloned()
            .collect();
        red_files.extend(base_files.into_iter().filter(|f| in_change(&f.path)));
        let git = proof::room_git(ws).map(|mut r| {
            r.head = commit.to_owned();
            r
        });
        // CI's own environment: the frozen names and the plan's variables, from this
        // process (the agent's machine's PATH means nothing here).
        let variables: Vec<String> = g
            .assurance()
            .map(|a| a.checks.into_iter().flat_map(|c| c.variables).collect())
            .unwrap_or_default();
        let names: Vec<&str> = variables.iter().map(String::as_str).collect();
        let env = checkenv::freeze_from_process(&names);
        let parent = proof::rooms_dir(self.data_dir());
        let (green_room, red_room) = (to_room(green_files), to_room(red_files));
        let setup = g.assurance().and_then(|a| a.setup);
        let trusted = std::cell::RefCell::new(Vec::new());
        checks
            .iter()
            .map(|(id, command)| {
                let (receipt, receipt_passed) = receipt_words(g, id);
                let mut r = CiRerun {
                    check: id.clone(),
                    receipt,
                    ci: String::new(),
                    exit_code: None,
                    red_exit_code: None,
                    proof: None,
                    agrees: false,
                };
                let run = |files: &[RoomFile]| -> Result<(Option<i64>, bool), String> {
                    let room = match proof::make_room(
                        &parent,
                        ws,
                        files,
                        git.as_ref(),
                        &proof::kept(setup.as_ref()),
                    ) {
                        Ok(Ok(room)) => room,
                        Ok(Err(why)) => return Err(why),
                        Err(e) => return Err(e.to_string()),
                    };
                    // CI's own setup: run in its room (its cache trusted only within
                    // this run), never the agent's.
                    if let Some(setup) = &setup {
                        let mut t = trusted.borrow_mut();
                        let s = self
                            .provide_setup(setup, &room, &env, &mut t, RERUN_TIMEOUT)
                            .map_err(|e| e.to_string())?;
                        if let Some(why) = s.failed {
                            return Err(why);
                        }
                    }
                    self.note(&format!(
                        "ci: running check {id} of goal {} in a clean room of {commit}: {command}",
                        g.created.goal
                    ));
                    let (ran, _) = proof::run_in(&room, command, &env, RERUN_TIMEOUT)
                        .map_err(|e| e.to_string())?;
                    Ok((ran.exit_code, ran.exit_code == Some(0) && !ran.timed_out))
                };
                let ci_passed = match run(&green_room) {
                    Err(why) => {
                        r.ci = format!("not run: {why}");
                        false
                    }
                    Ok((code, false)) => {
                        r.exit_code = code;
                        r.ci = format!(
                            "failed (exit {})",
                            code.map_or("none".into(), |c| c.to_string())
                        );
                        false
                    }
                    Ok((code, true)) => {
                        r.exit_code = code;
                        match run(&red_room) {
                            Err(why) => {
                                r.ci = format!("passed, but not without the change: {why}");
                                false
                            }
                            Ok((red, red_passed)) => {
                                r.red_exit_code = red;
                                let p = judge(proof::is_guard(g, id), !red_passed);
                                r.proof = Some(p.to_owned());
                                r.ci = format!("passed ({p})");
                                proof_holds(Some(p))
                            }
                        }
                    }
                };
                r.agrees = ci_passed == receipt_passed;
                r
            })
            .collect()
    }
}

/// The latest receipt of check `id` in words, and whether it passed with a proof
/// that holds.
fn receipt_words(g: &GoalState, id: &str) -> (String, bool) {
    match g.receipts.get(id) {
        None => ("no receipt".into(), false),
        Some((seq, r)) => {
            let ok = r.passed && tacho_projections::proof_problem(&g.created, r).is_none();
            let words = match (r.passed, r.proof.as_deref()) {
                (true, Some(p)) => format!("passed ({p}), receipt #{seq}"),
                (true, None) => format!("passed (no proof), receipt #{seq}"),
                (false, _) => format!("failed, receipt #{seq}"),
            };
            (words, ok)
        }
    }
}
