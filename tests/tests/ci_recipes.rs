//! The CI recipes in docs/ci/ run as written: the steps of the GitHub Actions workflow
//! named "tacho: ..." and the GitLab job's script, against a local bare remote. A
//! developer's session (real hooks: the Bash step that commits links the commit)
//! is pushed with `tacho push` beside the branch; a fresh clone with its own data
//! directory and no key of its own runs the recipe: it passes for the linked commit,
//! writes the Markdown summary and the JUnit report, and fails once the branch holds
//! a commit no pushed session made.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tacho_tests::git::{git, have_git};
use tacho_tests::{repo_root, skip_without, tacho, tacho_bin};

const SSH_KEYGEN: &str = "/usr/bin/ssh-keygen";

/// The commands of a recipe: the `run: |` blocks of the GitHub steps named "tacho: ...",
/// or the GitLab job's `script:` items, as one shell script.
fn recipe_script(file: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join("docs/ci").join(file)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut script = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_start();
        let github_step = l.starts_with("- name: \"tacho:");
        if github_step {
            // The step's `run: |` block: the lines indented deeper than `run:`.
            let run = (i + 1..lines.len())
                .find(|&j| lines[j].trim_start().starts_with("run: |"))
                .unwrap();
            let base = indent(lines[run]);
            let mut j = run + 1;
            while j < lines.len() && (lines[j].trim().is_empty() || indent(lines[j]) > base) {
                script.push(lines[j].trim().to_string());
                j += 1;
            }
            i = j;
            continue;
        }
        if l == "script:" {
            let base = indent(lines[i]);
            let mut j = i + 1;
            while j < lines.len() && indent(lines[j]) > base {
                let item = lines[j].trim_start();
                script.push(item.strip_prefix("- ").unwrap().to_string());
                j += 1;
            }
            i = j;
            continue;
        }
        i += 1;
    }
    assert!(!script.is_empty(), "no tacho commands in {file}");
    script.join("\n")
}

struct World {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    remote: PathBuf,
    /// The developer: home (git configuration, SSH key), data directory, clone.
    dev_home: PathBuf,
    dev_data: PathBuf,
    dev: PathBuf,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let dev_home = root.join("dev-home");
        std::fs::create_dir_all(dev_home.join(".ssh")).unwrap();
        let key = dev_home.join(".ssh/id_ed25519");
        let out = Command::new(SSH_KEYGEN)
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "dev", "-f"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(out.status.success());
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        std::fs::write(
            dev_home.join(".gitconfig"),
            format!(
                "[user]\n\tname = dev\n\temail = dev@example.invalid\n\tsigningkey = {}\n[gpg]\n\tformat = ssh\n",
                key.display()
            ),
        )
        .unwrap();

        // The base branch names the developer's key as an allowed signer.
        let remote = root.join("remote.git");
        git(&root, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
        let seed = root.join("seed");
        for d in [".github", ".gitlab", "src"] {
            std::fs::create_dir_all(seed.join(d)).unwrap();
        }
        let signer = format!("dev@example.invalid {}", public.trim());
        std::fs::write(seed.join(".github/allowed_signers"), &signer).unwrap();
        std::fs::write(seed.join(".gitlab/allowed_signers"), &signer).unwrap();
        std::fs::write(seed.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
        git(&seed, &["init", "-q", "-b", "main"]);
        git(&seed, &["add", "-A"]);
        git(&seed, &["commit", "-q", "-m", "base"]);
        git(&seed, &["push", "-q", remote.to_str().unwrap(), "main"]);
        git(&root, &["clone", "-q", remote.to_str().unwrap(), "dev"]);
        let dev = root.join("dev");
        git(&dev, &["checkout", "-q", "-b", "feature"]);
        World {
            _tmp: tmp,
            dev_data: root.join("dev-data"),
            root,
            remote,
            dev_home,
            dev,
        }
    }

    /// `tacho` as the developer, in their clone.
    fn dev_tacho(&self, args: &[&str], stdin: Option<String>) -> String {
        let mut c = tacho(&self.dev_data);
        c.current_dir(&self.dev)
            .env("HOME", &self.dev_home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let input = stdin.unwrap_or_default();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "tacho {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A Claude Code hook payload through `tacho hook claude-code`.
    fn hook(&self, event: &str, extra: serde_json::Value) {
        let mut v = serde_json::json!({
            "session_id": "agent-session-1",
            "cwd": self.dev.display().to_string(),
            "hook_event_name": event,
            "transcript_path": self.root.join("t.jsonl").display().to_string(),
        });
        if let (Some(m), serde_json::Value::Object(x)) = (v.as_object_mut(), extra) {
            m.extend(x);
        }
        self.dev_tacho(&["hook", "claude-code"], Some(v.to_string()));
    }

    /// The agent's Bash call that commits `file`: its hooks before and after.
    fn agent_commits(&self, id: &str, file: &str) {
        let input = serde_json::json!({ "command": "git commit -am change" });
        let call = serde_json::json!({"tool_name": "Bash", "tool_use_id": id, "tool_input": input});
        self.hook("PreToolUse", call.clone());
        self.commit(file);
        let mut result = call;
        result["tool_response"] =
            serde_json::json!({"stdout": "[feature] change", "stderr": "", "interrupted": false});
        self.hook("PostToolUse", result);
    }

    fn commit(&self, file: &str) {
        std::fs::write(self.dev.join(file), format!("// {file}\n")).unwrap();
        git(&self.dev, &["add", "-A"]);
        git(&self.dev, &["commit", "-q", "-m", file]);
    }

    fn publish(&self) {
        git(&self.dev, &["push", "-q", "origin", "feature"]);
        self.dev_tacho(&["push", "origin", "--all"], None);
    }

    /// A fresh clone at the branch's head, as the CI's checkout makes it, and the
    /// recipe's script run there with the CI's variables. Returns (exit code, output,
    /// the runner's scratch directory).
    fn run_recipe(&self, name: &str, file: &str) -> (i32, String, PathBuf) {
        let ci = self.root.join(name);
        let _ = std::fs::remove_dir_all(&ci);
        std::fs::create_dir_all(&ci).unwrap();
        git(&ci, &["clone", "-q", self.remote.to_str().unwrap(), "src"]);
        let src = ci.join("src");
        git(&src, &["checkout", "-q", "origin/feature"]);
        let base = git(&src, &["rev-parse", "origin/main"]);
        let head = git(&src, &["rev-parse", "HEAD"]);
        let temp = ci.join("runner-temp");
        std::fs::create_dir_all(&temp).unwrap();
        let home = ci.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let path = format!(
            "{}:{}",
            tacho_bin().parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new("bash")
            .args(["-e", "-c", &recipe_script(file)])
            .current_dir(&src)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("TACHO_HOME", ci.join("data"))
            // GitHub Actions
            .env("BASE", &base)
            .env("HEAD", &head)
            .env("RUNNER_TEMP", &temp)
            .env("GITHUB_STEP_SUMMARY", temp.join("summary.md"))
            // GitLab CI
            .env("CI_MERGE_REQUEST_DIFF_BASE_SHA", &base)
            .env("CI_COMMIT_SHA", &head)
            .env("CI_BUILDS_DIR", &temp)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let files = if file.starts_with("github") {
            temp.clone()
        } else {
            src
        };
        (out.status.code().unwrap_or(-1), text, files)
    }
}

fn ready() -> bool {
    if !have_git() || !Path::new(SSH_KEYGEN).is_file() {
        skip_without("git and ssh-keygen are needed");
        return false;
    }
    true
}

fn check_reports(dir: &Path, must_pass: bool) -> String {
    // SARIF and the attestation are written beside the other reports.
    let sarif: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tacho.sarif")).unwrap()).unwrap();
    assert_eq!(sarif["version"], "2.1.0", "{sarif}");
    let errors = sarif["runs"][0]["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["level"] == "error")
        .count();
    assert_eq!(errors == 0, must_pass, "{sarif}");
    let attested = std::fs::read_to_string(dir.join("tacho.intoto.jsonl")).unwrap();
    assert!(
        attested.lines().count() >= 1 && attested.contains("application/vnd.in-toto+json"),
        "{attested}"
    );
    let md = std::fs::read_to_string(dir.join("tacho.md")).unwrap();
    let junit = std::fs::read_to_string(dir.join("tacho-junit.xml")).unwrap();
    assert!(junit.contains("<testsuite"), "{junit}");
    let failures = junit.contains("<failure");
    assert_eq!(!failures, must_pass, "{junit}");
    md
}

#[test]
fn the_recipes_pass_a_branch_of_linked_signed_commits_and_fail_an_unlinked_one() {
    if !ready() {
        return;
    }
    let w = World::new();
    w.hook("SessionStart", serde_json::json!({"source": "startup"}));
    w.agent_commits("toolu_1", "src/one.rs");
    w.agent_commits("toolu_2", "src/two.rs");
    w.hook("Stop", serde_json::json!({"stop_hook_active": false}));
    w.publish();

    for (name, file) in [("gh", "github-actions.yml"), ("gl", "gitlab-ci.yml")] {
        let (code, out, dir) = w.run_recipe(name, file);
        assert_eq!(code, 0, "{file}: {out}");
        let md = check_reports(&dir, true);
        // The session is named, signed by the key the base branch allows.
        assert!(md.contains("signed by dev@\u{200B}example.invalid"), "{md}");
    }

    // A commit made outside any recorded session, pushed with the branch.
    w.commit("src/three.rs");
    w.publish();
    for (name, file) in [("gh2", "github-actions.yml"), ("gl2", "gitlab-ci.yml")] {
        let (code, out, dir) = w.run_recipe(name, file);
        assert_ne!(code, 0, "{file}: {out}");
        let md = check_reports(&dir, false);
        let three = git(&w.dev, &["rev-parse", "--short", "HEAD"]);
        assert!(md.contains(&three[..7]), "{md}");
    }
}
