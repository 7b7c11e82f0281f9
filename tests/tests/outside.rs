//! Files tacho writes outside its data directory (issue 27): settings files and their
//! backups (`hooks install|uninstall`) and the output options of `audit export`,
//! `audit otlp --file`, `audit report` and `session replay --mode export`. A repository
//! cannot turn them against the user, and a user's file keeps what it was.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use tacho_tests::{example_session, run, run_with_stdin, tacho};

struct Env {
    _tmp: tempfile::TempDir,
    /// tacho's data directory.
    data: PathBuf,
    /// The user's home (HOME).
    home: PathBuf,
    /// A cloned repository (the current directory of the commands).
    repo: PathBuf,
    dir: PathBuf,
}

impl Env {
    fn new() -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().canonicalize().unwrap();
        let repo = dir.join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::create_dir_all(dir.join("home/.claude")).unwrap();
        Env {
            data: dir.join("data"),
            home: dir.join("home"),
            repo,
            dir,
            _tmp: tmp,
        }
    }

    fn tacho(&self, args: &[&str]) -> (i32, String, String) {
        let mut c = tacho(&self.data);
        c.current_dir(&self.repo).env("HOME", &self.home).args(args);
        run(c)
    }

    fn user_settings(&self) -> PathBuf {
        self.home.join(".claude/settings.json")
    }
}

const USER: &str = "{\"model\": \"opus\", \"env\": {\"ANTHROPIC_API_KEY\": \"sk-secret\"}}\n";

/// Item 1: a repository's link where the backup goes must not make `hooks install`
/// write the repository's JSON into the user's own settings.
#[test]
fn a_repository_link_at_the_backup_is_refused() {
    let e = Env::new();
    std::fs::write(e.user_settings(), USER).unwrap();
    let claude = e.repo.join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    std::fs::write(claude.join("settings.json"), "{\"hooks\":{}}").unwrap();
    symlink(e.user_settings(), claude.join("settings.json.tacho-backup")).unwrap();
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code", "--scope", "project"]);
    assert_eq!(
        std::fs::read_to_string(e.user_settings()).unwrap(),
        USER,
        "the user's settings were written through the repository's link: {out}{err}"
    );
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("settings.json.tacho-backup") && err.contains("link"),
        "{err}"
    );
    assert!(
        std::fs::symlink_metadata(claude.join("settings.json.tacho-backup"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the repository's link is left for the user to see"
    );
    assert_eq!(
        std::fs::read_to_string(claude.join("settings.json")).unwrap(),
        "{\"hooks\":{}}",
        "nothing half-done"
    );
}

/// Item 1: a repository's `.claude` (or the settings file itself) that is a link
/// elsewhere gets nothing written through it.
#[test]
fn a_repository_link_on_the_way_to_its_settings_is_refused() {
    let e = Env::new();
    let elsewhere = e.dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    symlink(&elsewhere, e.repo.join(".claude")).unwrap();
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code", "--scope", "local"]);
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "tacho wrote through the repository's .claude link: {out}{err}"
    );
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains(".claude") && err.contains("link"), "{err}");

    // The settings file itself a link to the user's settings.
    std::fs::write(e.user_settings(), USER).unwrap();
    let codex = e.repo.join(".codex");
    std::fs::create_dir_all(&codex).unwrap();
    symlink(e.user_settings(), codex.join("hooks.json")).unwrap();
    let (code, out, err) = e.tacho(&["hooks", "install", "codex", "--scope", "project"]);
    assert_eq!(std::fs::read_to_string(e.user_settings()).unwrap(), USER);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("hooks.json") && err.contains("link"), "{err}");
    assert!(!codex.join("hooks.json.tacho-backup").exists());
}

/// Factory Droid's project settings follow the same rule: a repository's `.factory`
/// that links elsewhere, or a `.factory/settings.json` that links to the user's
/// settings, gets nothing written through it.
#[test]
fn droid_a_repository_link_on_the_way_to_its_settings_is_refused() {
    let e = Env::new();
    let elsewhere = e.dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    symlink(&elsewhere, e.repo.join(".factory")).unwrap();
    let (code, out, err) = e.tacho(&["hooks", "install", "droid", "--scope", "project"]);
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "tacho wrote through the repository's .factory link: {out}{err}"
    );
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains(".factory") && err.contains("link"), "{err}");

    std::fs::remove_file(e.repo.join(".factory")).unwrap();
    std::fs::write(e.user_settings(), USER).unwrap();
    std::fs::create_dir_all(e.repo.join(".factory")).unwrap();
    symlink(e.user_settings(), e.repo.join(".factory/settings.json")).unwrap();
    let (code, out, err) = e.tacho(&["hooks", "install", "droid", "--scope", "project"]);
    assert_eq!(std::fs::read_to_string(e.user_settings()).unwrap(), USER);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("settings.json") && err.contains("link"),
        "{err}"
    );
    // Without links, it installs.
    std::fs::remove_file(e.repo.join(".factory/settings.json")).unwrap();
    let (code, out, err) = e.tacho(&["hooks", "install", "droid", "--scope", "project"]);
    assert_eq!(code, 0, "{out}{err}");
    let written = std::fs::read_to_string(e.repo.join(".factory/settings.json")).unwrap();
    assert!(written.contains("hook droid"), "{written}");
}

/// Item 2: the user's settings keep their mode, owner and every number exactly, and a
/// backup is as private as the file.
#[test]
fn install_keeps_mode_owner_and_numbers() {
    let e = Env::new();
    let f = e.user_settings();
    let text = "{\n  \"big\": 123456789012345678901234567890,\n  \"float\": 1.10,\n  \"exp\": 1e3,\n  \"neg\": -0,\n  \"small\": 30,\n  \"env\": {\"KEY\": \"sk-secret\"}\n}\n";
    std::fs::write(&f, text).unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    // As root, the file of another user (a root shell editing a user's settings).
    let owner = std::os::unix::fs::chown(&f, Some(4242), Some(4343))
        .is_ok()
        .then_some((4242, 4343));
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code"]);
    assert_eq!(code, 0, "{out}{err}");
    let after = std::fs::read_to_string(&f).unwrap();
    for n in ["123456789012345678901234567890", "1.10", "1e3", "-0", "30"] {
        assert!(
            after.contains(&format!(": {n},")) || after.contains(&format!(": {n}\n")),
            "{n} was not kept as written:\n{after}"
        );
    }
    assert!(after.contains("hook claude-code"), "{after}");
    let m = std::fs::metadata(&f).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o600, "mode");
    let b = std::fs::metadata(f.with_file_name("settings.json.tacho-backup")).unwrap();
    assert_eq!(b.permissions().mode() & 0o7777, 0o600, "the backup's mode");
    if let Some((uid, gid)) = owner {
        assert_eq!((m.uid(), m.gid()), (uid, gid), "owner");
        assert_eq!((b.uid(), b.gid()), (uid, gid), "the backup's owner");
    }
    // And back: uninstall gives the numbers back as they were.
    let (code, out, err) = e.tacho(&["hooks", "uninstall", "claude-code"]);
    assert_eq!(code, 0, "{out}{err}");
    let back = std::fs::read_to_string(&f).unwrap();
    for n in ["123456789012345678901234567890", "1.10", "1e3", "-0"] {
        assert!(back.contains(n), "{n}:\n{back}");
    }
}

/// Item 2: a user's settings file that is a link (a dotfile manager's) stays a link;
/// its target is written, and tacho says so.
#[test]
fn a_users_linked_settings_file_is_written_through_and_said() {
    let e = Env::new();
    let dotfiles = e.dir.join("dotfiles");
    std::fs::create_dir_all(&dotfiles).unwrap();
    let target = dotfiles.join("settings.json");
    std::fs::write(&target, USER).unwrap();
    symlink(&target, e.user_settings()).unwrap();
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        std::fs::symlink_metadata(e.user_settings())
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link was replaced by a plain file"
    );
    assert!(
        std::fs::read_to_string(&target)
            .unwrap()
            .contains("hook claude-code")
    );
    assert!(
        format!("{out}{err}").contains(&target.display().to_string()),
        "the target written is named: {out}{err}"
    );
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["written_through"], target.display().to_string(), "{v}");
}

fn recorded(e: &Env) -> &'static str {
    let (code, _, err) = run_with_stdin(&e.data, &["record"], &example_session());
    assert_eq!(code, 0, "{err}");
    "ses_01jdemo8xk4rate1imit0000a"
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Item 3: every output option writes into a FIFO in place (a reader gets the bytes)
/// and leaves it a FIFO; never a regular file renamed over it.
#[test]
fn outputs_write_into_a_fifo_in_place() {
    let e = Env::new();
    let session = recorded(&e);
    let cases: [(&str, Vec<&str>); 4] = [
        ("audit export", vec!["audit", "export", session, "--output"]),
        ("audit otlp", vec!["audit", "otlp", session, "--file"]),
        ("audit report", vec!["audit", "report", session, "--output"]),
        (
            "session replay",
            vec!["session", "replay", session, "--mode", "export", "--output"],
        ),
    ];
    for (i, (what, args)) in cases.into_iter().enumerate() {
        let fifo = e.dir.join(format!("fifo-{i}"));
        mkfifo(&fifo);
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap_or_default())
        };
        let mut args = args;
        let path = fifo.display().to_string();
        args.push(&path);
        let (code, out, err) = e.tacho(&args);
        let still_fifo = std::fs::symlink_metadata(&fifo)
            .map(|m| m.file_type().is_fifo())
            .unwrap_or(false);
        // Checked before joining: a replaced FIFO has no writer, and its reader
        // would wait for ever.
        assert!(
            still_fifo,
            "{what}: the FIFO was replaced: {code} {out}{err}"
        );
        assert_eq!(code, 0, "{what}: {out}{err}");
        let got = reader.join().unwrap();
        assert!(!got.is_empty(), "{what}: the reader got nothing");
    }
}

/// Item 3: an output that is a link stays a link and its target gets the output; a
/// directory is refused with its name.
#[test]
fn outputs_write_through_a_link_and_refuse_a_directory() {
    let e = Env::new();
    let session = recorded(&e);
    let target = e.dir.join("report.md");
    std::fs::write(&target, "old\n").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
    let link = e.dir.join("link.md");
    symlink(&target, &link).unwrap();
    let (code, out, err) = e.tacho(&[
        "audit",
        "report",
        session,
        "--output",
        &link.display().to_string(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the link was replaced"
    );
    let written = std::fs::read_to_string(&target).unwrap();
    assert!(written.contains(session), "{written}");
    assert_eq!(
        std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777,
        0o640,
        "the target's mode is kept"
    );

    let d = e.dir.join("a-dir");
    std::fs::create_dir_all(&d).unwrap();
    let (code, out, err) = e.tacho(&[
        "session",
        "replay",
        session,
        "--mode",
        "export",
        "--output",
        &d.display().to_string(),
    ]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(err.contains("a-dir") && err.contains("directory"), "{err}");
    assert!(std::fs::metadata(&d).unwrap().is_dir());
    assert_eq!(
        std::fs::read_dir(&e.dir)
            .unwrap()
            .filter(|x| x
                .as_ref()
                .is_ok_and(|x| x.file_name().to_string_lossy().contains("tmp")))
            .count(),
        0,
        "no temporary file left"
    );
}

/// `hooks status` reads a repository's settings by the same rules: a link there is a
/// problem named, not a file read through (it could lead to a device or a FIFO).
#[test]
fn status_does_not_read_through_a_repository_link() {
    let e = Env::new();
    let (code, out, err) = e.tacho(&["hooks", "install", "claude-code"]);
    assert_eq!(code, 0, "{out}{err}");
    let claude = e.repo.join(".claude");
    std::fs::create_dir_all(&claude).unwrap();
    symlink(e.user_settings(), claude.join("settings.json")).unwrap();
    let (code, out, err) = e.tacho(&["hooks", "status", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let project = v["files"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["agent"] == "claude-code" && v["scope"] == "project")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(project["events"], serde_json::json!([]), "{project}");
    assert!(
        project["problem"]
            .as_str()
            .is_some_and(|p| p.contains("symbolic link")),
        "{project}"
    );
}

/// Item 3: a character device of our own (a null device made with mknod, as root) is
/// written in place and stays a device: what `--output /dev/null` needs, without
/// risking the machine's /dev/null if this were wrong.
#[test]
fn outputs_write_into_a_device_in_place() {
    let e = Env::new();
    let session = recorded(&e);
    let null = e.dir.join("null");
    let made = std::process::Command::new("mknod")
        .arg(&null)
        .args(["c", "1", "3"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        eprintln!("skipped: mknod needs root");
        return;
    }
    for args in [
        vec!["audit", "export", session, "--output"],
        vec!["session", "replay", session, "--mode", "export", "--output"],
    ] {
        let mut args = args;
        let path = null.display().to_string();
        args.push(&path);
        let (code, out, err) = e.tacho(&args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        let m = std::fs::symlink_metadata(&null).unwrap();
        assert!(
            m.file_type().is_char_device(),
            "{args:?}: the device was replaced"
        );
    }
}

/// Issue 47 (3): a project's settings outside any Git work tree are refused, naming the
/// directory, and nothing is written; `hooks status` lists no project settings there.
#[test]
fn project_settings_outside_a_work_tree_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap().join("not-a-repo");
    std::fs::create_dir_all(&dir).unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let t = |args: &[&str]| {
        let mut c = tacho(&tmp.path().join("data"));
        c.current_dir(&dir).env("HOME", &home).args(args);
        run(c)
    };
    for scope in ["project", "local"] {
        let (code, _, err) = t(&["hooks", "install", "claude-code", "--scope", scope]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(&dir.display().to_string()) && err.contains("no Git work tree"),
            "{err}"
        );
    }
    assert!(!dir.join(".claude").exists());
    let (code, out, err) = t(&["hooks", "status", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("\"scope\":\"project\""), "{out}");
    assert!(out.contains("\"scope\":\"user\""), "{out}");
    // The user's own settings still install from there.
    let (code, _, err) = t(&["hooks", "install", "claude-code"]);
    assert_eq!(code, 0, "{err}");
    assert!(home.join(".claude/settings.json").exists());
}

/// Issue 47 (15): uninstalling Copilot's hooks removes tacho's own hooks file when
/// nothing else is in it, and leaves no backup of it; a file with the user's hooks in
/// it too keeps them.
#[test]
fn copilot_uninstall_removes_tachos_own_file() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().canonicalize().unwrap().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let t = |args: &[&str]| {
        let mut c = tacho(&tmp.path().join("data"));
        c.current_dir(&home).env("HOME", &home).args(args);
        run(c)
    };
    let hooks = home.join(".copilot/hooks");
    let (code, _, err) = t(&["hooks", "install", "copilot"]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = t(&["hooks", "uninstall", "copilot"]);
    assert_eq!(code, 0, "{err}");
    let left: Vec<_> = std::fs::read_dir(&hooks)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // A key of the user's in the file: kept, the file stays.
    let (code, _, err) = t(&["hooks", "install", "copilot"]);
    assert_eq!(code, 0, "{err}");
    let file = hooks.join("tacho.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    v["mine"] = serde_json::json!(true);
    std::fs::write(&file, v.to_string()).unwrap();
    let (code, _, err) = t(&["hooks", "uninstall", "copilot"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(v["mine"], true, "{v}");
}
