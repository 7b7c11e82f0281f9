//! The source fingerprint against the real `git` program as the oracle of which files
//! count, and one test for each reason there can be no fresh evidence.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use tacho_tests::git::git_bytes as git;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use tacho_git::fingerprint::{Fingerprint, MAX_ENTRIES, fingerprint};

fn write(ws: &Path, rel: &str, text: &str) {
    let p = ws.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn fresh(fp: Fingerprint) -> (String, Vec<(String, &'static str)>) {
    match fp {
        Fingerprint::Fresh {
            digest, entries, ..
        } => (
            digest,
            entries.into_iter().map(|e| (e.path, e.kind)).collect(),
        ),
        Fingerprint::NoFreshEvidence(why) => panic!("no fresh evidence: {why:?}"),
    }
}

fn no_evidence(fp: Fingerprint) -> (String, String) {
    match fp {
        Fingerprint::NoFreshEvidence(why) => (why.path, why.reason),
        Fingerprint::Fresh { entries, .. } => panic!("expected no fresh evidence, got {entries:?}"),
    }
}

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

/// Generated repositories (nested ignore files with negations, tracked, untracked and
/// ignored files, a tracked file that is ignored, renames and deletions): the file set
/// equals `git ls-files --cached --others --exclude-standard -- PATHS` for several
/// choices of source paths, and a tracked file deleted from disk is `missing`.
#[test]
fn the_file_set_is_what_git_ls_files_lists() {
    if !tacho_tests::git::need_git() {
        return;
    }
    for seed in 1..=12u64 {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().canonicalize().unwrap();
        let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        git(&ws, &["init", "-q"]);
        let dirs = [
            "src",
            "src/gen",
            "src/app",
            "docs",
            "checks",
            "vendor/lib",
            ".",
        ];
        let names = [
            "a.rs",
            "b.log",
            "c.tmp",
            "d.txt",
            "keep.log",
            "e.md",
            "build.out",
        ];
        write(&ws, ".gitignore", "*.log\n!keep.log\nbuild.*\n");
        write(&ws, "src/.gitignore", "gen/\n*.tmp\n");
        write(&ws, "docs/.gitignore", "!*.tmp\n");
        for _ in 0..40 {
            let d = r.pick(&dirs);
            let n = r.pick(&names);
            let rel = if d == "." {
                n.to_string()
            } else {
                format!("{d}/{n}")
            };
            write(&ws, &rel, &format!("content {}\n", r.next()));
        }
        git(&ws, &["add", "."]);
        write(&ws, "src/forced.log", "tracked although ignored\n");
        git(&ws, &["add", "-f", "src/forced.log"]);
        git(&ws, &["commit", "-qm", "init"]);
        // Renames, deletions (staged and not), new untracked and ignored files.
        let tracked: Vec<String> = String::from_utf8(git(&ws, &["ls-files"]))
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        for (i, t) in tracked.iter().enumerate() {
            match r.next() % 6 {
                0 => git(&ws, &["mv", t, &format!("{t}.renamed{i}")]).truncate(0),
                1 => std::fs::remove_file(ws.join(t)).unwrap(),
                2 => git(&ws, &["rm", "-q", t]).truncate(0),
                _ => {}
            }
        }
        for _ in 0..10 {
            let d = r.pick(&dirs);
            let n = r.pick(&names);
            let rel = if d == "." {
                format!("new-{n}")
            } else {
                format!("{d}/new-{n}")
            };
            write(&ws, &rel, "untracked\n");
        }
        for sources in [
            vec!["."],
            vec!["src"],
            vec!["src", "docs"],
            vec!["checks", "vendor"],
            vec!["src/app", "missing-dir"],
        ] {
            let sources: Vec<String> = sources.into_iter().map(str::to_owned).collect();
            let (_, entries) = fresh(fingerprint(&ws, &sources, &[], 2).unwrap());
            let got: BTreeSet<String> = entries.iter().map(|e| e.0.clone()).collect();
            let mut args = vec![
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
            ];
            args.extend(sources.iter().map(String::as_str));
            let want: BTreeSet<String> = git(&ws, &args)
                .split(|b| *b == 0)
                .filter(|r| !r.is_empty())
                .map(|r| String::from_utf8(r.to_vec()).unwrap())
                .collect();
            assert_eq!(got, want, "seed {seed}, sources {sources:?}");
            for (path, kind) in &entries {
                assert_eq!(*kind == "missing", !ws.join(path).exists(), "{path}");
            }
        }
    }
}

#[test]
fn an_explicit_file_counts_even_when_ignored_and_edits_change_the_digest() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    if tacho_tests::git::need_git() {
        git(&ws, &["init", "-q"]);
    }
    write(&ws, ".gitignore", "*.secret\n");
    write(&ws, "src/a.rs", "a\n");
    write(&ws, "src/x.secret", "ignored\n");
    let (d1, e1) = fresh(fingerprint(&ws, &["src".into()], &[], 2).unwrap());
    if tacho_tests::git::need_git() {
        assert_eq!(e1, [("src/a.rs".to_string(), "file")]);
    }
    let (_, e2) = fresh(fingerprint(&ws, &["src".into(), "src/x.secret".into()], &[], 2).unwrap());
    assert!(e2.contains(&("src/x.secret".to_string(), "file")));
    // A file an edit tool reported joins the fingerprint.
    write(&ws, "notes/plan.md", "p\n");
    let (d3, e3) = fresh(fingerprint(&ws, &["src".into()], &["notes/plan.md".into()], 2).unwrap());
    assert!(e3.contains(&("notes/plan.md".to_string(), "file")));
    assert_ne!(d1, d3);
    write(&ws, "src/a.rs", "a changed\n");
    let (d4, _) = fresh(fingerprint(&ws, &["src".into()], &[], 2).unwrap());
    assert_ne!(d1, d4, "a changed byte changes the digest");
    write(&ws, "src/a.rs", "a\n");
    let (d5, _) = fresh(fingerprint(&ws, &["src".into()], &[], 2).unwrap());
    assert_eq!(d1, d5, "the same bytes give the same digest");
}

/// A tracked file turned into a directory, and a tracked directory into a file: Git
/// sees deleted files and new ones, and so does the fingerprint (it refused the state
/// before: "is a directory where a file was expected", "unreadable: Not a directory").
#[test]
fn a_file_turned_into_a_directory_is_deleted_as_git_sees_it() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    git(&ws, &["init", "-q"]);
    write(&ws, "f", "a file\n");
    write(&ws, "d/x", "in a directory\n");
    git(&ws, &["add", "-A"]);
    std::fs::remove_file(ws.join("f")).unwrap();
    write(&ws, "f/inner", "now inside\n");
    std::fs::remove_dir_all(ws.join("d")).unwrap();
    write(&ws, "d", "now a file\n");
    let (_, e) = fresh(fingerprint(&ws, &[".".into()], &[], 2).unwrap());
    assert_eq!(
        e,
        [
            ("d".to_string(), "file"),
            ("d/x".to_string(), "missing"),
            ("f".to_string(), "missing"),
            ("f/inner".to_string(), "file"),
        ]
    );
}

#[test]
fn outside_git_everything_counts_and_missing_paths_too() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    write(&ws, ".gitignore", "*.log\n");
    write(&ws, "src/a.rs", "a\n");
    write(&ws, "src/debug.log", "not ignored outside Git\n");
    let (_, e) = fresh(fingerprint(&ws, &["src".into(), "checks".into()], &[], 2).unwrap());
    assert_eq!(
        e,
        [
            ("checks".to_string(), "missing"),
            ("src/a.rs".to_string(), "file"),
            ("src/debug.log".to_string(), "file"),
        ]
    );
}

#[test]
fn a_link_gives_no_fresh_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    write(&ws, "src/a.rs", "a\n");
    std::os::unix::fs::symlink("a.rs", ws.join("src/link.rs")).unwrap();
    let (path, reason) = no_evidence(fingerprint(&ws, &["src".into()], &[], 2).unwrap());
    assert_eq!(
        (path.as_str(), reason.as_str()),
        ("src/link.rs", "is a symbolic link")
    );
}

#[test]
fn a_linked_parent_gives_no_fresh_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let ws = ws.canonicalize().unwrap();
    write(tmp.path(), "elsewhere/f.rs", "f\n");
    std::os::unix::fs::symlink(tmp.path().join("elsewhere"), ws.join("src")).unwrap();
    let (path, reason) = no_evidence(fingerprint(&ws, &["src/f.rs".into()], &[], 2).unwrap());
    assert_eq!(path, "src");
    assert_eq!(reason, "is a symbolic link (a parent of a source path)");
    let (path, reason) = no_evidence(fingerprint(&ws, &["src".into()], &[], 2).unwrap());
    assert_eq!(
        (path.as_str(), reason.as_str()),
        ("src", "is a symbolic link")
    );
}

#[test]
fn a_nested_repository_gives_no_fresh_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    write(&ws, "src/a.rs", "a\n");
    write(&ws, "src/vendor/dep/x.rs", "x\n");
    std::fs::create_dir(ws.join("src/vendor/dep/.git")).unwrap();
    let (path, reason) = no_evidence(fingerprint(&ws, &["src".into()], &[], 2).unwrap());
    assert_eq!(
        (path.as_str(), reason.as_str()),
        ("src/vendor/dep", "is a nested Git repository")
    );
    if tacho_tests::git::need_git() {
        std::fs::remove_dir(ws.join("src/vendor/dep/.git")).unwrap();
        git(&ws, &["init", "-q"]);
        git(&ws.join("src/vendor/dep"), &["init", "-q"]);
        let (path, reason) = no_evidence(fingerprint(&ws, &["src".into()], &[], 2).unwrap());
        assert_eq!(
            (path.as_str(), reason.as_str()),
            ("src/vendor/dep", "is a nested Git repository")
        );
    }
}

#[test]
fn a_special_file_gives_no_fresh_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    write(&ws, "src/a.rs", "a\n");
    assert!(
        Command::new("mkfifo")
            .arg(ws.join("src/pipe"))
            .status()
            .unwrap()
            .success()
    );
    let (path, reason) = no_evidence(fingerprint(&ws, &["src".into()], &[], 2).unwrap());
    assert_eq!(
        (path.as_str(), reason.as_str()),
        ("src/pipe", "is a special file")
    );
    let (path, reason) = no_evidence(fingerprint(&ws, &["src/pipe".into()], &[], 2).unwrap());
    assert_eq!(
        (path.as_str(), reason.as_str()),
        ("src/pipe", "is a special file")
    );
}

#[test]
fn a_path_escaping_the_workspace_gives_no_fresh_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    for bad in ["../outside", "/etc/passwd", "src/../../x", ".git/config"] {
        let (path, reason) = no_evidence(fingerprint(&ws, &[bad.into()], &[], 2).unwrap());
        assert_eq!(path, bad);
        assert!(
            reason.starts_with("escapes the workspace"),
            "{bad}: {reason}"
        );
    }
}

#[test]
fn a_file_changing_while_read_gives_no_fresh_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    let big = ws.join("src/big.bin");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(&big, vec![7u8; 64 * 1024 * 1024]).unwrap();
    // A writer keeps appending while the fingerprint reads.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, big) = (stop.clone(), big.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().append(true).open(&big).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                f.write_all(&[1u8; 4096]).unwrap();
            }
        })
    };
    let result = fingerprint(&ws, &["src".into()], &[], 1).unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let (path, reason) = no_evidence(result);
    assert_eq!(
        (path.as_str(), reason.as_str()),
        ("src/big.bin", "changed while it was being read")
    );
}

#[test]
fn an_unreadable_file_gives_no_fresh_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    write(&ws, "src/secret.rs", "s\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        ws.join("src/secret.rs"),
        std::fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    if std::fs::read(ws.join("src/secret.rs")).is_ok() {
        eprintln!("running with privileges that read any file (root); skipped");
        return;
    }
    let (path, reason) = no_evidence(fingerprint(&ws, &["src".into()], &[], 2).unwrap());
    assert_eq!(path, "src/secret.rs");
    assert!(reason.starts_with("unreadable: "), "{reason}");
}

#[test]
fn the_limits_give_no_fresh_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().canonicalize().unwrap();
    std::fs::create_dir_all(ws.join("many")).unwrap();
    for i in 0..=MAX_ENTRIES {
        std::fs::write(ws.join(format!("many/{i}")), b"").unwrap();
    }
    let (_, reason) = no_evidence(fingerprint(&ws, &["many".into()], &[], 2).unwrap());
    assert_eq!(
        reason,
        "20001 entries, more than the limit of 20000: declare narrower source paths"
    );
    let f = std::fs::File::create(ws.join("large.bin")).unwrap();
    f.set_len(129 * 1024 * 1024).unwrap();
    let (_, reason) = no_evidence(fingerprint(&ws, &["large.bin".into()], &[], 2).unwrap());
    assert_eq!(
        reason,
        "135266304 bytes of content, more than the limit of 134217728"
    );
}

/// A refusal names every path in the way (the first 20, and how many in all), so that
/// a user can fix them in one pass.
#[test]
fn a_refusal_lists_every_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("ok.txt"), "ok").unwrap();
    for i in 0..25 {
        std::os::unix::fs::symlink("ok.txt", ws.join(format!("link-{i:02}"))).unwrap();
    }
    let Fingerprint::NoFreshEvidence(why) = fingerprint(&ws, &[".".into()], &[], 2).unwrap() else {
        panic!("links are no fresh evidence");
    };
    assert_eq!(why.total, 25);
    assert_eq!(why.problems.len(), 20);
    assert_eq!(why.path, "link-00");
    assert_eq!(why.problems[19].path, "link-19");
    assert!(why.to_string().ends_with("; and 5 more"), "{why}");
    assert!(why.to_string().starts_with("link-00: "), "{why}");
}
