//! Attacks on the modes entry (SPEC.md §10.1), written by a red team: snapshots tacho
//! writes itself stay readable when a directory and a file trade places, and a modes
//! entry that is not in the specified form makes the snapshot unreadable.

use super::*;
use tacho_git::snapshot::MODES_NAME;

/// A targeted snapshot (what an edit tool's hook takes) of a path that was a directory
/// holding a 0600 file and is now a file, or is gone, or of a file under what was a
/// 0600 file: the tree loses the old entries, and the modes entry must lose their
/// records too. Before, the records stayed, and the snapshot tacho had just written was one
/// it refused to read ("its modes entry names "d/x", which is not a file of it"), which
/// makes every rollback of the session fail.
#[test]
fn a_targeted_snapshot_of_a_replaced_directory_keeps_no_stale_modes_record() {
    type Change = fn(&Path);
    let cases: [(&str, Change, &[&str], &[&str]); 3] = [
        (
            "directory -> file",
            |ws| {
                std::fs::remove_dir_all(ws.join("d")).unwrap();
                write(ws, "d", "now a file\n");
            },
            &["d"],
            &["d", "f", "keep", "keep2", "keep3"],
        ),
        (
            "directory removed",
            |ws| std::fs::remove_dir_all(ws.join("d")).unwrap(),
            &["d"],
            &["f", "keep", "keep2", "keep3"],
        ),
        (
            "file -> directory",
            |ws| {
                std::fs::remove_file(ws.join("f")).unwrap();
                write(ws, "f/inner", "now inside\n");
            },
            &["f/inner"],
            &["d/x", "f/inner", "keep", "keep2", "keep3"],
        ),
    ];
    for (what, change, paths, want) in cases {
        let e = env();
        write(&e.ws, "d/x", "a secret in a directory\n");
        chmod(&e.ws, "d/x", 0o600);
        write(&e.ws, "f", "a secret file\n");
        chmod(&e.ws, "f", 0o600);
        write(&e.ws, "keep", "kept\n");
        // Most files 0644: the usual bits stay Git's, the 0600 files are records.
        write(&e.ws, "keep2", "kept\n");
        write(&e.ws, "keep3", "kept\n");
        e.store.take(&e.ws, &Scope::Full).unwrap();
        change(&e.ws);
        let snap = e
            .store
            .take(
                &e.ws,
                &Scope::Paths(
                    paths
                        .iter()
                        .map(|p| e.ws.join(p).display().to_string())
                        .collect(),
                ),
            )
            .unwrap();
        let files = e
            .store
            .files(snap.tree)
            .unwrap_or_else(|err| panic!("{what}: tacho's own snapshot is unreadable: {err}"));
        let got: Vec<&str> = files.keys().map(String::as_str).collect();
        assert_eq!(got, want, "{what}");
    }
}

/// A targeted snapshot of a path that was a directory of two files and is now gone:
/// the snapshot's file count (recorded in `snapshot.taken`, shown by `tacho snapshot`)
/// still counts them (pre-existing: 88f6008 does the same).
#[test]
fn a_targeted_snapshot_of_a_removed_directory_counts_its_files_out() {
    let e = env();
    write(&e.ws, "b/1", "1\n");
    write(&e.ws, "b/2", "2\n");
    write(&e.ws, "y", "y\n");
    assert_eq!(e.store.take(&e.ws, &Scope::Full).unwrap().files, 3);
    std::fs::remove_dir_all(e.ws.join("b")).unwrap();
    let snap = e
        .store
        .take(
            &e.ws,
            &Scope::Paths(vec![e.ws.join("b").display().to_string()]),
        )
        .unwrap();
    assert_eq!(e.store.files(snap.tree).unwrap().len(), 1);
    assert_eq!(snap.files, 1, "the count of a tree of one file");
}

/// A targeted snapshot of `d/x` after `d` became a regular file: the path is gone
/// (SPEC §10 and the commit b97d8ed: "a listed path under what is now a file is gone"),
/// but it is excluded as "reached through the symbolic link d" (d is no link) and the
/// tree keeps `d/x` (pre-existing in 88f6008).
#[test]
fn a_path_under_what_is_now_a_file_is_gone_in_a_targeted_snapshot() {
    let e = env();
    write(&e.ws, "d/x", "x\n");
    write(&e.ws, "k", "k\n");
    e.store.take(&e.ws, &Scope::Full).unwrap();
    std::fs::remove_dir_all(e.ws.join("d")).unwrap();
    write(&e.ws, "d", "now a file\n");
    let snap = e
        .store
        .take(
            &e.ws,
            &Scope::Paths(vec![e.ws.join("d/x").display().to_string()]),
        )
        .unwrap();
    assert!(snap.excluded.is_empty(), "{:?}", snap.excluded);
    let files = e.store.files(snap.tree).unwrap();
    assert!(!files.contains_key("d/x"), "d/x is still in the snapshot");
}

/// The snapshot `tree` with its modes entry's blob replaced by `data` (and its entry
/// mode by `mode` when given).
fn forge(
    e: &Env,
    tree: gix::ObjectId,
    data: &[u8],
    mode: Option<gix::objs::tree::EntryKind>,
) -> gix::ObjectId {
    let repo = gix::open(e.store.root()).unwrap();
    let blob = repo.write_blob(data).unwrap().detach();
    let mut t: gix::objs::Tree = repo.find_tree(tree).unwrap().decode().unwrap().into();
    let mut found = false;
    for entry in &mut t.entries {
        if entry.filename.as_slice() == MODES_NAME {
            entry.oid = blob;
            if let Some(m) = mode {
                entry.mode = m.into();
            }
            found = true;
        }
    }
    assert!(found, "the snapshot has a modes entry");
    repo.write_object(&t).unwrap().detach()
}

fn workspace_with_modes() -> (Env, gix::ObjectId) {
    let e = env();
    write(&e.ws, "a", "a\n");
    write(&e.ws, "c", "c\n");
    write(&e.ws, "run.sh", "#!/bin/sh\n");
    chmod(&e.ws, "run.sh", 0o755);
    write(&e.ws, "secret", "s\n");
    chmod(&e.ws, "secret", 0o600);
    let snap = e.store.take(&e.ws, &Scope::Full).unwrap();
    assert_eq!(e.store.files(snap.tree).unwrap()["secret"].perms, 0o600);
    (e, snap.tree)
}

/// Bits that contradict the kind the tree entry gives the file (an executable bit on a
/// `100644` entry, none on a `100755` one; usual bits of the wrong kind) are read as
/// they were before: a rollback then wrote the file with them (making a plain file
/// executable) and only its read-back fails, after the workspace was changed.
#[test]
fn modes_that_contradict_the_tree_entrys_kind_are_refused() {
    let (e, tree) = workspace_with_modes();
    for bad in [
        &b"tacho.modes 1 644 755\n700 a\x00600 secret\0"[..],
        b"tacho.modes 1 644 755\n600 run.sh\x00600 secret\0",
        b"tacho.modes 1 755 644\n600 secret\0",
        b"tacho.modes 1 644 644\n600 secret\0",
    ] {
        let forged = forge(&e, tree, bad, None);
        let read = e.store.files(forged);
        assert!(
            read.is_err(),
            "{:?} was read as {:?}",
            String::from_utf8_lossy(bad),
            read.map(|f| f
                .iter()
                .map(|(p, x)| format!("{p} {:?} {:o}", x.kind, x.perms))
                .collect::<Vec<_>>())
        );
    }
}

/// SPEC.md §10.1: records "in path order", "one record per file whose bits are not the
/// usual ones", no entry when the usual bits are `644 755` and no file is listed, bits
/// in octal. A modes entry not in this form must make the snapshot unreadable; before,
/// each of these is read (and re-encoded differently by the next targeted snapshot).
#[test]
fn a_modes_entry_not_in_its_form_is_refused() {
    let (e, tree) = workspace_with_modes();
    for bad in [
        // Records out of path order.
        &b"tacho.modes 1 644 755\n600 secret\x00600 c\0"[..],
        // A record of a file whose bits are the usual ones.
        b"tacho.modes 1 644 755\n644 a\x00600 secret\0",
        // Signs and leading zeros: not the octal the entry is written in.
        b"tacho.modes 1 +644 755\n600 secret\0",
        b"tacho.modes 1 644 755\n+600 secret\0",
        b"tacho.modes 1 0644 755\n0600 secret\0",
        // Plain bits and no record: a snapshot that needs no entry.
        b"tacho.modes 1 644 755\n",
    ] {
        let forged = forge(&e, tree, bad, None);
        assert!(
            e.store.files(forged).is_err(),
            "{:?} was read",
            String::from_utf8_lossy(bad)
        );
    }
}

/// The modes entry is a blob entry (`100644`): one under a link's or an executable's
/// entry mode is not in the form either.
#[test]
fn a_modes_entry_under_another_entry_mode_is_refused() {
    let (e, tree) = workspace_with_modes();
    let good = b"tacho.modes 1 644 755\n600 secret\0";
    assert!(e.store.files(forge(&e, tree, good, None)).is_ok());
    for mode in [
        gix::objs::tree::EntryKind::Link,
        gix::objs::tree::EntryKind::BlobExecutable,
    ] {
        let forged = forge(&e, tree, good, Some(mode));
        assert!(e.store.files(forged).is_err(), "{mode:?}");
    }
}
