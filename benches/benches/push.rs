//! `tacho push` and `tacho fetch` of many sessions against plain `git` moving the same
//! records, in the same run:
//!
//! - push: `tacho push --all` of N sessions (each signed with a fresh Ed25519 key by
//!   `ssh-keygen`, its package exported and verified, its snapshots referenced) to a
//!   bare remote that has the project's branch, against `git push` of a branch holding
//!   the same N packages as plain files (what a user could do by hand, with no
//!   signature, no verification and no snapshots);
//! - fetch: `tacho fetch` of those N sessions into an empty data directory (each
//!   verified and stored), against `git fetch` of that branch;
//! - pushing again (nothing new), timed;
//! - printed: the bytes a push adds to the remote's object store against the sessions'
//!   records, and what pushing again adds (nothing).
//!
//! `cargo bench -p tacho-benches --bench push` (the `tacho` binary of the bench's
//! profile, or `TACHO_BIN`); `TACHO_PUSH_SESSIONS` sets N (100). Under `cargo test`
//! everything runs once on 3 sessions.

#![allow(clippy::unwrap_used)] // a benchmark that cannot set up should panic

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tacho_benches::hooks::{committed_workspace, git_ok, tacho_bin};
use tacho_benches::scale::example_lines;
use tacho_benches::{files_under, git_in, run_ok};

fn bench_mode() -> bool {
    std::env::args().any(|a| a == "--bench")
}

fn sessions() -> usize {
    if !bench_mode() {
        return 3;
    }
    std::env::var("TACHO_PUSH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

struct Setup {
    root: PathBuf,
    ws: PathBuf,
    data: PathBuf,
    home: PathBuf,
    remote_seed: PathBuf,
    baseline: PathBuf,
    bin: PathBuf,
    n: usize,
}

impl Setup {
    fn tacho(&self, data: &Path, cwd: &Path, args: &[&str]) -> String {
        let out = Command::new(&self.bin)
            .args(args)
            .current_dir(cwd)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("TACHO_HOME", data)
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "tacho {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A copy of the remote as it was before any push (the project's branch only).
    fn fresh_remote(&self, name: &str) -> PathBuf {
        let r = self.root.join(name);
        let _ = std::fs::remove_dir_all(&r);
        run_ok(Command::new("cp").arg("-a").arg(&self.remote_seed).arg(&r));
        r
    }

    /// Points the project's `origin` at `remote`.
    fn origin(&self, repo: &Path, remote: &Path) {
        git_in(
            repo,
            &["remote", "set-url", "origin", remote.to_str().unwrap()],
        );
    }
}

/// Bytes of the files under `dir`.
fn du(dir: &Path) -> u64 {
    files_under(dir).iter().map(|f| f.0).sum()
}

fn setup(root: &Path) -> Setup {
    let bin = tacho_bin();
    let n = sessions();
    let (ws, _) = committed_workspace(root, 200);
    let remote_seed = root.join("seed.git");
    git_in(root, &["init", "-q", "--bare", "seed.git"]);
    git_in(
        &ws,
        &["remote", "add", "origin", remote_seed.to_str().unwrap()],
    );
    git_in(&ws, &["push", "-q", "origin", "HEAD:refs/heads/main"]);
    // A home that signs with a fresh key, and trusts it.
    let home = root.join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    let key = home.join(".ssh/id_ed25519");
    run_ok(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key),
    );
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    std::fs::write(home.join("allowed"), format!("me@example.invalid {public}")).unwrap();
    std::fs::write(
        home.join(".gitconfig"),
        format!(
            "[user]\n\tname = b\n\temail = b@example.invalid\n\tsigningkey = {}\n[gpg]\n\tformat = ssh\n[gpg \"ssh\"]\n\tallowedSignersFile = {}\n",
            key.display(),
            home.join("allowed").display()
        ),
    )
    .unwrap();
    // N copies of the bundled example recorded in the project (each takes its
    // snapshots of the 200-file workspace).
    let data = root.join("data");
    let lines = example_lines();
    let id = "ses_01jdemo8xk4rate1imit0000a";
    let mut text = String::new();
    for k in 0..n {
        let new = format!("ses_push{k:06}");
        for l in &lines {
            text.push_str(
                &l.replace(id, &new)
                    .replace("/home/dev/shop-api", ws.to_str().unwrap()),
            );
            text.push('\n');
        }
    }
    let input = root.join("input.jsonl");
    std::fs::write(&input, text).unwrap();
    let s = Setup {
        root: root.to_path_buf(),
        ws: ws.clone(),
        data: data.clone(),
        home,
        remote_seed,
        baseline: root.join("baseline"),
        bin,
        n,
    };
    s.tacho(&data, &ws, &["record", input.to_str().unwrap()]);
    // The baseline: a clone with a branch holding the same packages as files.
    git_in(
        root,
        &["clone", "-q", s.remote_seed.to_str().unwrap(), "baseline"],
    );
    let dir = s.baseline.join("tacho-sessions");
    std::fs::create_dir_all(&dir).unwrap();
    for k in 0..n {
        let sid = format!("ses_push{k:06}");
        let out = dir.join(format!("{sid}.tpkg"));
        s.tacho(
            &data,
            &ws,
            &[
                "session",
                "replay",
                &sid,
                "--mode",
                "export",
                "--output",
                out.to_str().unwrap(),
            ],
        );
    }
    git_in(&s.baseline, &["checkout", "-q", "-b", "sessions"]);
    git_in(&s.baseline, &["add", "tacho-sessions"]);
    git_in(&s.baseline, &["commit", "-q", "-m", "sessions"]);
    s
}

/// Forgets what tacho pushed (so a push signs and writes its commits again).
fn forget_pushes(s: &Setup) {
    let store = s.data.join("snapshots");
    let out = Command::new("git")
        .arg("-C")
        .arg(&store)
        .args(["for-each-ref", "--format=%(refname)", "refs/tacho/pushed"])
        .output()
        .unwrap();
    for r in String::from_utf8(out.stdout).unwrap().lines() {
        git_in(&store, &["update-ref", "-d", r]);
    }
    let _ = std::fs::remove_dir_all(s.data.join("remote"));
}

fn push(c: &mut Criterion) {
    if !git_ok() || !Path::new("/usr/bin/ssh-keygen").is_file() {
        eprintln!("git and ssh-keygen are needed: skipped");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let s = setup(tmp.path());
    let n = s.n;
    let mut g = c.benchmark_group("push");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(1))
        .measurement_time(Duration::from_secs(if bench_mode() { 20 } else { 1 }));
    g.bench_function(format!("tacho_push_{n}_sessions_signed"), |b| {
        b.iter_batched(
            || {
                forget_pushes(&s);
                let r = s.fresh_remote("remote.git");
                s.origin(&s.ws, &r);
            },
            |()| s.tacho(&s.data, &s.ws, &["push", "--all", "--json"]),
            BatchSize::PerIteration,
        );
    });
    g.bench_function(format!("git_push_{n}_packages_baseline"), |b| {
        b.iter_batched(
            || s.fresh_remote("baseline.git"),
            |r| {
                git_in(
                    &s.baseline,
                    &["push", "-q", r.to_str().unwrap(), "sessions"],
                )
            },
            BatchSize::PerIteration,
        );
    });

    // The remote after one push: what it added, against the sessions' records.
    forget_pushes(&s);
    let remote = s.fresh_remote("remote.git");
    s.origin(&s.ws, &remote);
    let before = du(&remote.join("objects"));
    let out = s.tacho(&s.data, &s.ws, &["push", "--all", "--json"]);
    let v: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    let records: u64 = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["record_bytes"].as_u64().unwrap())
        .sum();
    let after = du(&remote.join("objects"));
    let again = s.tacho(&s.data, &s.ws, &["push", "--all", "--json"]);
    let after_again = du(&remote.join("objects"));
    let up_to_date = again.matches("\"up_to_date\"").count();
    eprintln!(
        "push of {n} sessions: records {records} bytes; the remote's objects grew by {} bytes ({:.2}x the records, snapshots and signatures included); pushing again: {up_to_date} of {n} up to date, the remote grew by {} bytes",
        after - before,
        (after - before) as f64 / records as f64,
        after_again - after
    );
    assert_eq!(after_again, after, "pushing again sent something");
    g.bench_function(format!("tacho_push_again_{n}_sessions_nothing_new"), |b| {
        b.iter(|| s.tacho(&s.data, &s.ws, &["push", "--all", "--json"]));
    });

    // Fetch into an empty data directory, against `git fetch` of the baseline branch.
    let bob = s.root.join("bob");
    git_in(&s.root, &["clone", "-q", remote.to_str().unwrap(), "bob"]);
    let baseline_remote = s.fresh_remote("baseline.git");
    git_in(
        &s.baseline,
        &["push", "-q", baseline_remote.to_str().unwrap(), "sessions"],
    );
    g.bench_function(format!("tacho_fetch_{n}_sessions_verified"), |b| {
        b.iter_batched(
            || {
                let d = s.root.join("bob-data");
                let _ = std::fs::remove_dir_all(&d);
                d
            },
            |d| {
                let out = s.tacho(&d, &bob, &["fetch", "--json"]);
                assert_eq!(out.matches("\"stored\"").count(), n);
            },
            BatchSize::PerIteration,
        );
    });
    g.bench_function(format!("git_fetch_{n}_packages_baseline"), |b| {
        b.iter_batched(
            || {
                let d = s.root.join("bob-baseline.git");
                let _ = std::fs::remove_dir_all(&d);
                git_in(&s.root, &["init", "-q", "--bare", "bob-baseline.git"]);
                d
            },
            |d| {
                git_in(
                    &d,
                    &[
                        "fetch",
                        "-q",
                        baseline_remote.to_str().unwrap(),
                        "+refs/heads/*:refs/remotes/b/*",
                    ],
                )
            },
            BatchSize::PerIteration,
        );
    });
    g.finish();
}

criterion_group!(benches, push);
criterion_main!(benches);
