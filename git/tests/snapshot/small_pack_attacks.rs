//! Red team: packs an agent (the same user) writes into the store's `objects/pack`,
//! and what merging the small packs (SPEC.md §10.5) makes of them. Every snapshot the
//! store held before a merge must read back after it, exactly, and the merge must not
//! hang, panic or delete what only a pack it did not copy held.

use super::*;
use std::io::Write as _;
use std::process::Stdio;

/// Runs git with `stdin`; its stdout.
fn git_in(dir: &Path, args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let mut child = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn git_dir(store: &SnapshotStore) -> String {
    store.root().to_str().unwrap().to_owned()
}

/// Packs the store's loose objects into one new pack (as a watcher's small batch is
/// one pack) and removes them: `git repack -d` (not `-a`: the packs there stay).
fn pack_loose(store: &SnapshotStore) {
    git(
        store.root(),
        &["--git-dir", &git_dir(store), "repack", "-d", "-q"],
    );
}

fn packs_in(store: &SnapshotStore) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(store.root().join("objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pack"))
        .collect();
    v.sort();
    v
}

/// Two snapshots, each in a small pack of its own (what two watched snapshots leave);
/// each with its files' texts.
fn two_small_packs(e: &Env) -> Vec<(gix::ObjectId, Vec<(String, String)>)> {
    let mut taken = Vec::new();
    for round in 0..2 {
        let mut files = Vec::new();
        for i in 0..4 {
            let rel = format!("d{i}/f{i}.txt");
            let text = format!("round {round} file {i}\n");
            write(&e.ws, &rel, &text);
            files.push((rel, text));
        }
        let s = e.store.take(&e.ws, &Scope::Full).unwrap();
        pack_loose(&e.store);
        taken.push((s.tree, files));
    }
    assert_eq!(packs_in(&e.store).len(), 2);
    taken
}

/// Every file of every snapshot reads back through a fresh handle, and git finds
/// every object the snapshots name.
fn assert_all_read_back(e: &Env, taken: &[(gix::ObjectId, Vec<(String, String)>)]) {
    assert_all_read_by_tacho(e, taken);
    let out = Command::new("git")
        .args(["--git-dir", &git_dir(&e.store)])
        .args(["fsck", "--connectivity-only", "--no-dangling"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git fsck: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every file of every snapshot reads back through a fresh handle.
fn assert_all_read_by_tacho(e: &Env, taken: &[(gix::ObjectId, Vec<(String, String)>)]) {
    let store = SnapshotStore::open(e.store.root(), e.store.root().join("../cache")).unwrap();
    for (tree, files) in taken {
        let listed = store.files(*tree).unwrap();
        for (rel, text) in files {
            let entry = listed.get(rel).unwrap_or_else(|| panic!("{rel} missing"));
            let data = store
                .blob(entry.oid)
                .unwrap_or_else(|err| panic!("{rel} ({}) no longer reads: {err}", entry.oid));
            assert_eq!(data, text.as_bytes(), "{rel}");
        }
    }
}

/// A pack of one blob holding `content`, made by git in a scratch repository, with
/// its index rewritten to name the entry `claimed` (an index v2 of one object). The
/// pair is written into the store's pack directory under `name` (`pack-<40 hex>`).
fn forged_pack(e: &Env, content: &[u8], claimed: &str, name: &str) -> PathBuf {
    let scratch = e.store.root().join("../forge");
    std::fs::create_dir_all(&scratch).unwrap();
    git(&scratch, &["init", "-q", "--bare", "."]);
    let id =
        String::from_utf8(git_in(&scratch, &["hash-object", "-w", "--stdin"], content)).unwrap();
    let hash = String::from_utf8(git_in(
        &scratch,
        &["pack-objects", "-q", "out"],
        format!("{}\n", id.trim()).as_bytes(),
    ))
    .unwrap();
    let made = scratch.join(format!("out-{}", hash.trim()));
    let pack = std::fs::read(made.with_extension("pack")).unwrap();
    let idx = std::fs::read(made.with_extension("idx")).unwrap();
    // v2 index of one object: 8 header, 1024 fan-out, 20 name, 4 crc, 4 offset,
    // 20 pack checksum, 20 index checksum.
    let crc = &idx[1052..1056];
    let offset = &idx[1056..1060];
    let claimed: Vec<u8> = (0..20)
        .map(|i| u8::from_str_radix(&claimed[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let mut forged = idx[..8].to_vec();
    for b in 0..256u32 {
        let n: u32 = u32::from(b >= u32::from(claimed[0]));
        forged.extend_from_slice(&n.to_be_bytes());
    }
    forged.extend_from_slice(&claimed);
    forged.extend_from_slice(crc);
    forged.extend_from_slice(offset);
    forged.extend_from_slice(&pack[pack.len() - 20..]);
    forged.extend_from_slice(&sha1(&forged));
    let at = e.store.root().join("objects/pack").join(name);
    std::fs::write(at.with_extension("pack"), &pack).unwrap();
    std::fs::write(at.with_extension("idx"), &forged).unwrap();
    at.with_extension("pack")
}

fn sha1(data: &[u8]) -> Vec<u8> {
    let mut child = Command::new("sha1sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    let hex = String::from_utf8(out.stdout).unwrap();
    (0..20)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// ATTACK: the agent writes a small pack whose index names a blob of a snapshot (the
/// id of `d0/f0.txt`'s first version) but whose entry holds other content, under a
/// name that sorts before every real pack. The merge copies the first entry it meets
/// for an id without hashing it, then deletes the genuine pack: the snapshot's file is
/// gone for good (before the merge the genuine copy was still on disk).
#[test]
fn a_forged_small_pack_does_not_replace_a_snapshots_object_in_the_merge() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let e = env();
    let taken = two_small_packs(&e);
    let victim = e
        .store
        .files(taken[0].0)
        .unwrap()
        .get("d0/f0.txt")
        .unwrap()
        .oid
        .to_string();
    forged_pack(
        &e,
        b"evil\n",
        &victim,
        "pack-0000000000000000000000000000000000000001",
    );
    // Before the merge the genuine copy is found (a fresh handle).
    assert_all_read_by_tacho(&e, &taken);
    let merged = e
        .store
        .merge_small_packs(2)
        .expect("the merge runs around a forged pack");
    assert!(merged >= 2, "{merged}");
    assert_all_read_back(&e, &taken);
}

/// ATTACK: a small pack whose trailer (its last 20 bytes) is gone, as an unsynced
/// small pack torn by a crash, or one the agent cut: its last entry is whole and reads
/// (its zlib stream ends before the cut). The merge copies each entry up to the next
/// one or to "the trailer", 20 bytes before the end: the last entry loses its last 20
/// bytes, and the pack that held it whole is deleted.
#[test]
fn a_small_pack_without_its_trailer_loses_no_object_in_the_merge() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let e = env();
    let taken = two_small_packs(&e);
    let packs = packs_in(&e.store);
    let victim = &packs[0];
    let bytes = std::fs::read(victim).unwrap();
    std::fs::write(victim, &bytes[..bytes.len() - 20]).unwrap();
    // Everything still reads through tacho before the merge (git refuses the pack).
    assert_all_read_by_tacho(&e, &taken);
    let _ = e.store.merge_small_packs(2);
    assert_all_read_by_tacho(&e, &taken);
}

/// ATTACK: a "small pack" that is a FIFO (with a valid index copied from a real small
/// pack, under another name): the merge's `read` of it never returns while the watcher
/// waits on it. The agent keeps it open for writing; the merge must not hang.
#[test]
fn a_fifo_in_the_pack_directory_does_not_hang_the_merge() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let e = env();
    let taken = two_small_packs(&e);
    let packs = packs_in(&e.store);
    let fifo = e
        .store
        .root()
        .join("objects/pack/pack-0000000000000000000000000000000000000002");
    std::fs::copy(packs[0].with_extension("idx"), fifo.with_extension("idx")).unwrap();
    let status = Command::new("mkfifo")
        .arg(fifo.with_extension("pack"))
        .status()
        .unwrap();
    assert!(status.success());
    let root = e.store.root().to_owned();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let store = SnapshotStore::open(&root, root.join("../cache")).unwrap();
        let _ = tx.send(store.merge_small_packs(2).map_err(|e| e.to_string()));
    });
    let done = rx.recv_timeout(std::time::Duration::from_secs(10));
    if done.is_err() {
        // Unblock the merge (a writer that closes at once), then fail.
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .open(fifo.with_extension("pack"));
        let _ = rx.recv_timeout(std::time::Duration::from_secs(10));
        panic!("the merge hung on a FIFO named as a small pack for 10 s");
    }
    std::fs::remove_file(fifo.with_extension("idx")).unwrap();
    std::fs::remove_file(fifo.with_extension("pack")).unwrap();
    assert_all_read_back(&e, &taken);
}

/// REGRESSION: a small pack holding an OFS_DELTA (git's own, of two versions of a
/// file) is left as it is; what the other small packs hold is merged and reads back.
#[test]
fn a_small_pack_of_deltas_is_left_alone_by_the_merge() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let e = env();
    let mut taken = two_small_packs(&e);
    // Two versions of a 4 KiB file, packed by git with deltas.
    let mut files = Vec::new();
    let base: String = (0..200).map(|i| format!("line {i:04} of text\n")).collect();
    for v in 0..2 {
        let text = base.replace("line 0100", &format!("version {v}"));
        write(&e.ws, "big.txt", &text);
        let s = e.store.take(&e.ws, &Scope::Full).unwrap();
        files.push((s.tree, vec![("big.txt".to_owned(), text)]));
    }
    pack_loose(&e.store);
    let delta_pack = packs_in(&e.store)
        .into_iter()
        .find(|p| {
            let out = git(
                e.store.root(),
                &[
                    "verify-pack",
                    "-v",
                    p.with_extension("idx").to_str().unwrap(),
                ],
            );
            String::from_utf8(out).unwrap().contains("chain length = 1")
        })
        .expect("git wrote no delta");
    taken.extend(files);
    let merged = e.store.merge_small_packs(2).unwrap();
    assert_eq!(merged, 2, "the two packs of whole objects");
    assert!(delta_pack.exists(), "the pack of deltas is kept");
    assert_all_read_back(&e, &taken);
}

/// REGRESSION: small packs whose indexes lie about offsets (two ids at one offset,
/// an offset past the end, an offset inside the pack's header): no panic, nothing
/// deleted that was not copied, every snapshot reads back.
#[test]
fn small_packs_whose_index_lies_about_offsets_break_nothing() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let e = env();
    let taken = two_small_packs(&e);
    let packs = packs_in(&e.store);
    let real_idx = std::fs::read(packs[0].with_extension("idx")).unwrap();
    let n = u32::from_be_bytes(real_idx[1028..1032].try_into().unwrap()) as usize;
    let offsets_at = 8 + 1024 + n * 24;
    let lies: [(&str, &dyn Fn(usize) -> u32); 3] = [
        ("3", &|_| 12),                          // every id at the first entry
        ("4", &|i| 1 << 30 | i as u32),          // past the end
        ("5", &|i| if i == 0 { 4 } else { 12 }), // inside the header
    ];
    for (tag, offset) in lies {
        let mut idx = real_idx.clone();
        for i in 0..n {
            idx[offsets_at + 4 * i..offsets_at + 4 * i + 4]
                .copy_from_slice(&offset(i).to_be_bytes());
        }
        let at = e
            .store
            .root()
            .join("objects/pack")
            .join(format!("pack-000000000000000000000000000000000000000{tag}"));
        std::fs::copy(&packs[0], at.with_extension("pack")).unwrap();
        std::fs::write(at.with_extension("idx"), &idx).unwrap();
    }
    let _ = e.store.merge_small_packs(2);
    // The lying packs are the agent's: removed before git reads the store.
    for tag in ["3", "4", "5"] {
        let at = e
            .store
            .root()
            .join("objects/pack")
            .join(format!("pack-000000000000000000000000000000000000000{tag}"));
        let _ = std::fs::remove_file(at.with_extension("idx"));
        let _ = std::fs::remove_file(at.with_extension("pack"));
    }
    assert_all_read_back(&e, &taken);
}
