//! `tacho push` and `tacho fetch` with real Git: a bare remote, two clones with data
//! directories and homes of their own (Alice records and pushes, Bob fetches), SSH
//! signatures made and checked with the real `ssh-keygen`.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tacho_tests::git::{git, have_git};
use tacho_tests::{run, skip_without, tacho};

const SSH_KEYGEN: &str = "/usr/bin/ssh-keygen";

/// One person: a home (git configuration, SSH key), a data directory and a clone.
struct Person {
    home: PathBuf,
    data: PathBuf,
    clone: PathBuf,
    /// The public key line.
    public: String,
}

struct World {
    tmp: tempfile::TempDir,
    remote: PathBuf,
    alice: Person,
    bob: Person,
}

fn ready() -> bool {
    if !have_git() || !Path::new(SSH_KEYGEN).is_file() {
        skip_without("git and ssh-keygen are needed");
        return false;
    }
    true
}

fn keygen(home: &Path) -> String {
    let ssh = home.join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    let key = ssh.join("id_ed25519");
    let out = Command::new(SSH_KEYGEN)
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "k", "-f"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(key.with_extension("pub"))
        .unwrap()
        .trim()
        .to_owned()
}

/// The git configuration of a home: signing with its own key, verifying against
/// `allowed` (principal, public key) pairs.
fn configure(p: &Person, allowed: &[(&str, &str)]) {
    let signers = p.home.join("allowed_signers");
    let text: String = allowed
        .iter()
        .map(|(who, key)| format!("{who} {key}\n"))
        .collect();
    std::fs::write(&signers, text).unwrap();
    std::fs::write(
        p.home.join(".gitconfig"),
        format!(
            "[user]\n\tname = t\n\temail = t@example.invalid\n\tsigningkey = {}\n[gpg]\n\tformat = ssh\n[gpg \"ssh\"]\n\tallowedSignersFile = {}\n",
            p.home.join(".ssh/id_ed25519").display(),
            signers.display()
        ),
    )
    .unwrap();
}

fn person(root: &Path, name: &str, remote: &Path) -> Person {
    let home = root.join(format!("{name}-home"));
    std::fs::create_dir_all(&home).unwrap();
    let public = keygen(&home);
    let clone = root.join(name);
    git(root, &["clone", "-q", remote.to_str().unwrap(), name]);
    Person {
        home,
        data: root.join(format!("{name}-data")),
        clone: clone.canonicalize().unwrap(),
        public,
    }
}

fn world() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let remote = root.join("remote.git");
    git(&root, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
    let seed = root.join("seed");
    std::fs::create_dir_all(&seed).unwrap();
    git(&seed, &["init", "-q", "-b", "main"]);
    std::fs::write(seed.join("app.rs"), "fn main() {}\n").unwrap();
    git(&seed, &["add", "."]);
    git(&seed, &["commit", "-q", "-m", "seed"]);
    git(&seed, &["push", "-q", remote.to_str().unwrap(), "main"]);
    let alice = person(&root, "alice", &remote);
    let bob = person(&root, "bob", &remote);
    configure(&alice, &[("alice@example.invalid", &alice.public)]);
    configure(&bob, &[("alice@example.invalid", &alice.public)]);
    World {
        tmp,
        remote,
        alice,
        bob,
    }
}

impl Person {
    fn tacho(&self, args: &[&str]) -> (i32, String, String) {
        let mut c = tacho(&self.data);
        c.current_dir(&self.clone)
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .args(args);
        run(c)
    }

    fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.tacho(args);
        assert_eq!(code, 0, "tacho {args:?}: {out}{err}");
        out
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        serde_json::from_str(self.ok(args).lines().next().unwrap()).unwrap()
    }

    fn record(&self, session: &str, line: &str) {
        let mut c = tacho(&self.data);
        c.current_dir(&self.clone)
            .env("HOME", &self.home)
            .args(["record", "--session", session])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(line.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A session of two steps that edit files (so it has rollback points).
    fn session(&self, id: &str) {
        let ws = self.clone.display();
        self.record(
            id,
            &format!(r#"{{"type":"session.start","workspace":"{ws}","agent":"coder"}}"#),
        );
        self.record(id, r#"{"type":"step.start","step":1}"#);
        std::fs::write(
            self.clone.join("app.rs"),
            format!("fn main() {{ /* {id} */ }}\n"),
        )
        .unwrap();
        self.record(id, r#"{"type":"file.edit","path":"app.rs","op":"modify"}"#);
        self.record(id, r#"{"type":"step.finish","step":1}"#);
        self.record(id, r#"{"type":"step.start","step":2}"#);
        std::fs::write(self.clone.join("notes.txt"), "notes\n").unwrap();
        self.record(
            id,
            r#"{"type":"file.edit","path":"notes.txt","op":"create"}"#,
        );
        self.record(id, r#"{"type":"step.finish","step":2}"#);
        self.record(id, r#"{"type":"session.end","reason":"completed"}"#);
    }
}

/// Every file under a directory with its bytes (to show a push left it alone).
fn tree_of(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn remote_refs(w: &World) -> String {
    git(
        &w.remote,
        &["for-each-ref", "--format=%(refname) %(objectname)"],
    )
}

#[test]
fn push_then_fetch_verifies_and_the_teammate_lists_rollback_points() {
    if !ready() {
        return;
    }
    let w = world();
    w.alice.session("ses_push_a");
    let git_dir_before = tree_of(&w.alice.clone.join(".git"));
    let refs_before = remote_refs(&w);

    let pushed = w.alice.json(&["push", "--all", "--json"]);
    assert_eq!(pushed["type"], "push");
    let s = &pushed["sessions"][0];
    assert_eq!(s["session"], "ses_push_a");
    assert_eq!(s["outcome"], "new");
    assert!(s["snapshots"].as_u64().unwrap() >= 2, "{pushed}");
    assert_eq!(s["signature"]["status"], "signed");
    assert_eq!(s["signature"]["principals"][0], "alice@example.invalid");

    // The project's repository is untouched; the remote's branches are unchanged and
    // it has the session's ref.
    assert_eq!(tree_of(&w.alice.clone.join(".git")), git_dir_before);
    let refs_after = remote_refs(&w);
    for line in refs_before.lines() {
        assert!(refs_after.contains(line), "{refs_after}");
    }
    assert!(
        refs_after.contains("refs/tacho/sessions/ses_push_a"),
        "{refs_after}"
    );
    git(&w.remote, &["fsck", "--no-dangling"]);

    // Pushing again: nothing new, nothing sent.
    let objects_before = tree_of(&w.remote.join("objects"));
    let again = w.alice.json(&["push", "--all", "--json"]);
    assert_eq!(again["sessions"][0]["outcome"], "up_to_date");
    assert_eq!(tree_of(&w.remote.join("objects")), objects_before);

    // ssh-keygen checks the signature tacho made, without tacho.
    let signed = git(
        &w.remote,
        &["show", "refs/tacho/sessions/ses_push_a:signed"],
    );
    let sig_path = w.tmp.path().join("session.sig");
    std::fs::write(
        &sig_path,
        git(
            &w.remote,
            &["show", "refs/tacho/sessions/ses_push_a:signature"],
        ) + "\n",
    )
    .unwrap();
    let mut v = Command::new(SSH_KEYGEN)
        .args([
            "-Y",
            "verify",
            "-n",
            "tacho-session",
            "-I",
            "alice@example.invalid",
            "-f",
        ])
        .arg(w.alice.home.join("allowed_signers"))
        .arg("-s")
        .arg(&sig_path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    v.stdin
        .take()
        .unwrap()
        .write_all(format!("{signed}\n").as_bytes())
        .unwrap();
    let out = v.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "ssh-keygen -Y verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Bob fetches: verified, stored, marked with its origin, signed by Alice.
    let fetched = w.bob.json(&["fetch", "--json"]);
    assert_eq!(fetched["sessions"][0]["outcome"], "stored", "{fetched}");
    assert_eq!(fetched["sessions"][0]["signature"]["status"], "signed");
    let fingerprint = fetched["sessions"][0]["signature"]["fingerprint"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(fingerprint.starts_with("SHA256:"));
    let verify = w.bob.ok(&["log", "verify", "--session", "ses_push_a"]);
    assert!(verify.contains(&fingerprint), "{verify}");
    assert!(verify.contains("alice@example.invalid"), "{verify}");
    let show = w.bob.json(&["session", "show", "ses_push_a", "--json"]);
    assert_eq!(show["origin"]["remote"], "origin");
    assert_eq!(show["signature"]["fingerprint"], fingerprint.as_str());
    let listed = w.bob.ok(&["session", "list"]);
    assert!(listed.contains("ses_push_a"), "{listed}");
    w.bob.ok(&["graph", "ses_push_a"]);
    w.bob.ok(&["risk", "ses_push_a"]);
    let points = w
        .bob
        .json(&["session", "rollback", "ses_push_a", "--list", "--json"]);
    assert_eq!(points["points"].as_array().unwrap().len(), 2, "{points}");
    // Its workspace path is what the remote's record says (here, Alice's checkout,
    // which exists on this machine): a rollback writes nothing there (issue 42).
    let alice_ws = w.alice.clone.clone();
    let before = tree_of(&alice_ws);
    for args in [
        vec!["session", "rollback", "ses_push_a", "--yes"],
        vec!["session", "rollback", "ses_push_a", "--dry-run"],
    ] {
        let (code, out, err) = w.bob.tacho(&args);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("was fetched from origin"), "{err}");
    }
    assert_eq!(tree_of(&alice_ws), before);
    // The same record on both sides: events and chain head.
    let a = w.alice.json(&["session", "show", "ses_push_a", "--json"]);
    assert_eq!(a["events"], show["events"]);
    let verified = |p: &Person| p.ok(&["log", "verify", "--session", "ses_push_a", "--json"]);
    let (va, vb) = (verified(&w.alice), verified(&w.bob));
    let head_of = |text: &str| {
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|v| v["head"].as_str().map(str::to_owned))
    };
    assert!(head_of(&va).is_some(), "{va}");
    assert_eq!(head_of(&va), head_of(&vb));
    // The teammate's local web report serves the fetched session's page.
    let page = tacho_tests::run_report_page(&w.bob.data, "ses_push_a");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("ses_push_a"));

    // Fetching again stores nothing new.
    let again = w.bob.json(&["fetch", "--json"]);
    assert_eq!(again["sessions"][0]["outcome"], "up_to_date", "{again}");
}

/// A session of the remote rewritten consistently (new blob, tree and commit, the
/// package digest recomputed) with one byte of an event changed.
fn rewrite_record_on_remote(w: &World, session: &str) {
    let r = format!("refs/tacho/sessions/{session}");
    let blob = git(&w.remote, &["rev-parse", &format!("{r}:record.tpkg")]);
    let mut pkg = tacho_tests::git::git_bytes(&w.remote, &["cat-file", "blob", &blob]);
    let id_len = u16::from_le_bytes([pkg[16], pkg[17]]) as usize;
    // Past the package header, the first segment's position and length, and the
    // segment's own 128-byte header: inside the first event frame.
    let at = 18 + id_len + 16 + 128 + 40;
    pkg[at] ^= 0x01;
    let body = pkg.len() - 32;
    let digest = blake3::Hasher::new_derive_key("tacho replay package v1")
        .update(&pkg[..body])
        .finalize();
    pkg[body..].copy_from_slice(digest.as_bytes());
    replace_on_remote(w, session, "record.tpkg", &pkg);
}

/// Replaces file `name` of `session`'s commit on the remote by `bytes` (a new commit).
fn replace_on_remote(w: &World, session: &str, name: &str, bytes: &[u8]) {
    let r = format!("refs/tacho/sessions/{session}");
    let blob = git(&w.remote, &["rev-parse", &format!("{r}:{name}")]);
    let file = w.tmp.path().join("altered.bin");
    std::fs::write(&file, bytes).unwrap();
    let new_blob = git(&w.remote, &["hash-object", "-w", file.to_str().unwrap()]);
    let listing = git(&w.remote, &["ls-tree", &r]).replace(&blob, &new_blob);
    let mut mk = Command::new("git")
        .current_dir(&w.remote)
        .args(["mktree"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    mk.stdin
        .take()
        .unwrap()
        .write_all(format!("{listing}\n").as_bytes())
        .unwrap();
    let tree = String::from_utf8(mk.wait_with_output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_owned();
    let commit = git(
        &w.remote,
        &["commit-tree", &tree, "-p", &r, "-m", "altered"],
    );
    git(&w.remote, &["update-ref", &r, &commit]);
}

/// Bob's data directory holds nothing of `session`: no stream, no leftover, no record.
fn nothing_stored(p: &Person, session: &str) {
    let streams = p.data.join("log/streams");
    let names: Vec<String> = std::fs::read_dir(&streams)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(names.iter().all(|n| !n.contains(session)), "{names:?}");
    assert!(!p.data.join(format!("remote/{session}.json")).exists());
    let listed = p.ok(&["session", "list"]);
    assert!(!listed.contains(session), "{listed}");
}

/// Issue 42 (14): a file of the remote's session commit far larger than such a file
/// holds (here the signed head, 8 MB of zeros: 8 KB on the remote) is refused from its
/// object header, before anything of it is inflated; nothing is stored.
#[test]
fn an_oversized_file_on_the_remote_is_refused_from_its_header() {
    if !ready() {
        return;
    }
    let w = world();
    w.alice.session("ses_big");
    w.alice.ok(&["push", "--all"]);
    replace_on_remote(&w, "ses_big", "signed", &vec![0u8; 8 << 20]);
    let (code, out, err) = w.bob.tacho(&["fetch"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("signed of commit")
            && format!("{out}{err}").contains("is 8388608 bytes, more than such a file holds"),
        "{out}{err}"
    );
    nothing_stored(&w.bob, "ses_big");
}

#[test]
fn a_session_altered_on_the_remote_is_refused_and_nothing_of_it_is_stored() {
    if !ready() {
        return;
    }
    let w = world();
    w.alice.session("ses_alter");
    w.alice.ok(&["push", "--all"]);
    rewrite_record_on_remote(&w, "ses_alter");
    let (code, out, err) = w.bob.tacho(&["fetch"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("ses_alter  REFUSED: record:"), "{out}");
    assert!(err.contains("1 sessions were refused"), "{err}");
    nothing_stored(&w.bob, "ses_alter");
}

#[test]
fn a_byte_altered_in_the_remotes_object_files_is_refused() {
    if !ready() {
        return;
    }
    let w = world();
    w.alice.session("ses_byte");
    w.alice.ok(&["push", "--all"]);
    // The record's blob as the remote stores it (a loose object: a small push is
    // unpacked), one byte of its compressed bytes changed.
    let blob = git(
        &w.remote,
        &["rev-parse", "refs/tacho/sessions/ses_byte:record.tpkg"],
    );
    let path = w
        .remote
        .join(format!("objects/{}/{}", &blob[..2], &blob[2..]));
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&path, perms).unwrap();
    std::fs::write(&path, bytes).unwrap();
    let (code, out, err) = w.bob.tacho(&["fetch"]);
    assert_ne!(code, 0, "{out}{err}");
    nothing_stored(&w.bob, "ses_byte");
}

#[test]
fn a_session_signed_by_a_key_not_in_allowed_signers_is_reported() {
    if !ready() {
        return;
    }
    let w = world();
    let mallory = person(w.tmp.path(), "mallory", &w.remote);
    configure(&mallory, &[("mallory@example.invalid", &mallory.public)]);
    mallory.session("ses_mallory");
    mallory.ok(&["push", "--all"]);
    let fetched = w.bob.json(&["fetch", "--json"]);
    let s = &fetched["sessions"][0];
    assert_eq!(s["session"], "ses_mallory");
    assert_eq!(s["outcome"], "stored", "{fetched}");
    assert_eq!(s["signature"]["status"], "unknown_key", "{fetched}");
    let fp = s["signature"]["fingerprint"].as_str().unwrap();
    let verify = w.bob.ok(&["log", "verify", "--session", "ses_mallory"]);
    assert!(verify.contains("unknown key"), "{verify}");
    assert!(verify.contains(fp), "{verify}");
    // Alice's own record of a session she never signed says so plainly.
    w.alice.session("ses_plain");
    let show = w.alice.ok(&["session", "show", "ses_plain"]);
    assert!(show.contains("Signature unsigned"), "{show}");
}

#[test]
fn gc_keeps_what_push_wrote_and_pushing_again_sends_nothing() {
    if !ready() {
        return;
    }
    let w = world();
    w.alice.session("ses_gc");
    w.alice.ok(&["push", "--all"]);
    w.alice.ok(&["gc"]);
    let store = w.alice.data.join("snapshots");
    git(&store, &["fsck", "--no-dangling"]);
    let objects_before = tree_of(&w.remote.join("objects"));
    let again = w.alice.json(&["push", "--all", "--json"]);
    assert_eq!(again["sessions"][0]["outcome"], "up_to_date", "{again}");
    assert_eq!(tree_of(&w.remote.join("objects")), objects_before);
}

#[test]
fn a_session_holding_a_token_is_refused_until_its_event_is_let_through() {
    if !ready() {
        return;
    }
    let w = world();
    w.alice.session("ses_clean");
    w.alice.record(
        "ses_leaky",
        &format!(
            r#"{{"type":"session.start","workspace":"{}","agent":"coder"}}"#,
            w.alice.clone.display()
        ),
    );
    w.alice.record(
        "ses_leaky",
        r#"{"type":"tool.call","call_id":"c1","tool":"Bash","target":"env","input":{"command":"env"}}"#,
    );
    let token = format!("ghp_{}", "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI2kL4");
    w.alice.record(
        "ses_leaky",
        &format!(
            r#"{{"type":"tool.result","call_id":"c1","status":"ok","output":"HOME=/home/a\nGITHUB_TOKEN={token}\n"}}"#
        ),
    );
    let before = remote_refs(&w);
    let (code, out, err) = w.alice.tacho(&["push", "origin", "--all"]);
    assert_eq!(code, 1, "{out}{err}");
    // Named: session, event and kind; the token itself is never printed.
    let (code, scan, _) = w
        .alice
        .tacho(&["session", "secrets", "ses_leaky", "--json"]);
    assert_eq!(code, 1, "unallowed findings: {scan}");
    let scan: serde_json::Value = serde_json::from_str(scan.lines().next().unwrap()).unwrap();
    let seq = scan["findings"][0]["seq"].as_u64().unwrap().to_string();
    assert!(
        err.contains(&format!("session ses_leaky event {seq} (tool.result)")),
        "{err}"
    );
    assert!(err.contains("GitHub"), "{err}");
    assert!(!err.contains(&token) && !out.contains(&token), "{err}");
    // Nothing left, not even the clean session pushed beside it.
    assert_eq!(remote_refs(&w), before);

    // The recorded allowance lets that event through; the push then publishes both.
    w.alice.ok(&[
        "session",
        "secrets",
        "ses_leaky",
        "--allow",
        &seq,
        "--reason",
        "a revoked test token",
    ]);
    w.alice.ok(&["push", "origin", "--all"]);
    let after = remote_refs(&w);
    assert!(after.contains("refs/tacho/sessions/ses_leaky"), "{after}");
    assert!(after.contains("refs/tacho/sessions/ses_clean"), "{after}");
}

/// Issue 42 (15): a local agent whose session id names a fetched session (reused, or
/// chosen with `--session-id`) never appends to it: its hooks record it as
/// `<id>.local`, with a notice saying why, and the fetched session keeps its head.
#[test]
fn hooks_never_append_to_a_fetched_session() {
    if !ready() {
        return;
    }
    let w = world();
    w.alice.session("ses_shared");
    w.alice.ok(&["push", "--all"]);
    w.bob.ok(&["fetch"]);
    let before = w.bob.json(&["session", "show", "ses_shared", "--json"]);
    let hook = |event: &str| {
        let payload = serde_json::json!({"session_id": "ses_shared", "cwd": w.bob.clone,
            "hook_event_name": event, "prompt": "hello"});
        let mut c = tacho(&w.bob.data);
        c.current_dir(&w.bob.clone)
            .env("HOME", &w.bob.home)
            .env("TACHO_NO_WATCH", "1")
            .args(["hook", "claude-code"]);
        let (code, _, err) = tacho_tests::run_input(c, &payload.to_string());
        assert_eq!(code, 0, "{err}");
    };
    hook("UserPromptSubmit");
    hook("Stop");
    let after = w.bob.json(&["session", "show", "ses_shared", "--json"]);
    assert_eq!(
        before["summary"]["events"], after["summary"]["events"],
        "{after:#}"
    );
    let local = w.bob.ok(&["audit", "export", "ses_shared.local"]);
    assert!(
        local.contains("names session ses_shared, fetched from remote"),
        "{local}"
    );
    let (code, out, err) = w.bob.tacho(&["log", "verify"]);
    assert_eq!(code, 0, "{out}{err}");
}

/// Issue 42 (10): a token in an untracked file of the workspace goes into the
/// session's snapshots, which a push publishes: the scan reads every file of them
/// that the repository's HEAD does not hold, names the file, and the push is refused
/// until that snapshot's event is let through. Committed files are not read again.
#[test]
fn a_token_in_an_untracked_file_of_a_snapshot_stops_the_push() {
    if !ready() {
        return;
    }
    let w = world();
    let token = format!("ghp_{}", "Zy8xW7vU6tS5rQ4pO3nM2lK1jI0hG9fE8dC7");
    std::fs::write(
        w.alice.clone.join(".env.production"),
        format!("GITHUB_TOKEN={token}\n"),
    )
    .unwrap();
    w.alice.session("ses_env");
    let before = remote_refs(&w);
    let (code, out, err) = w.alice.tacho(&["push", "origin", "--all"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(!err.contains(&token) && !out.contains(&token), "{err}");
    assert_eq!(remote_refs(&w), before);
    let (code, scan, _) = w.alice.tacho(&["session", "secrets", "ses_env", "--json"]);
    assert_eq!(code, 1, "{scan}");
    let scan: serde_json::Value = serde_json::from_str(scan.lines().next().unwrap()).unwrap();
    let findings = scan["findings"].as_array().unwrap();
    // Once, under the first snapshot holding it, whatever later snapshots hold it too.
    assert_eq!(findings.len(), 1, "{scan:#}");
    let f = &findings[0];
    assert_eq!(f["event"], "snapshot.taken", "{scan:#}");
    assert!(
        f["field"]
            .as_str()
            .unwrap()
            .ends_with("file .env.production"),
        "{scan:#}"
    );
    assert!(!scan.to_string().contains(&token));
    // The app's own committed file is never read: one finding only, and allowing the
    // snapshot's event lets the push through.
    let seq = f["seq"].as_u64().unwrap().to_string();
    w.alice.ok(&[
        "session",
        "secrets",
        "ses_env",
        "--allow",
        &seq,
        "--reason",
        "a revoked token",
    ]);
    w.alice.ok(&["push", "origin", "--all"]);
    assert!(remote_refs(&w).contains("refs/tacho/sessions/ses_env"));

    // A token committed to a local branch only (never pushed), and one in a binary
    // file (NUL bytes first): both are read, both stop the push.
    let other = format!("glpat-{}", "Qw3Er5Ty7Ui9Op1As3Df");
    std::fs::write(
        w.alice.clone.join("fixture.txt"),
        format!("TOKEN={token}\n"),
    )
    .unwrap();
    let mut bin = vec![0u8; 64];
    bin.extend_from_slice(format!("\nGITLAB_TOKEN={other}\n").as_bytes());
    std::fs::write(w.alice.clone.join("blob.bin"), bin).unwrap();
    git(&w.alice.clone, &["add", "fixture.txt"]);
    git(&w.alice.clone, &["commit", "-qm", "local only"]);
    w.alice.session("ses_local");
    let (code, scan, _) = w
        .alice
        .tacho(&["session", "secrets", "ses_local", "--json"]);
    assert_eq!(code, 1, "{scan}");
    let scan: serde_json::Value = serde_json::from_str(scan.lines().next().unwrap()).unwrap();
    let fields: Vec<&str> = scan["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap())
        .collect();
    for file in ["file fixture.txt", "file blob.bin", "file .env.production"] {
        assert!(fields.iter().any(|f| f.ends_with(file)), "{file}: {scan:#}");
    }
}

/// Issue 47 (5): `tacho push SESSION` (the natural first try) pushes the session to
/// `origin`; a first word that is no remote and no session is refused naming both.
#[test]
fn a_first_word_that_is_a_session_is_pushed_to_origin() {
    if !ready() {
        return;
    }
    let w = world();
    w.alice.session("sec1");
    let pushed = w.alice.json(&["push", "sec1", "--dry-run", "--json"]);
    assert_eq!(pushed["remote"], "origin", "{pushed}");
    assert!(pushed.to_string().contains("sec1"), "{pushed}");
    // The remote first, then the session: the same.
    let pushed = w
        .alice
        .json(&["push", "origin", "sec1", "--dry-run", "--json"]);
    assert_eq!(pushed["remote"], "origin", "{pushed}");
    let (code, _, err) = w.alice.tacho(&["push", "nonesuch"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("neither a remote") && err.contains("nonesuch"),
        "{err}"
    );
}
