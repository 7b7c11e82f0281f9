//! gc stores the versions of a file as deltas of one another (SPEC.md §10.5), in packs
//! the real `git` reads, verifies and would write about as small.

use super::*;

/// A file of `lines` lines of 63 characters; issue 46 measured 16,384 (1 MiB).
fn big_file(lines: usize) -> String {
    (0..lines)
        .map(|i| {
            let mut line = format!("{i:06} ") + &"abcdefghij".repeat(6);
            line.truncate(63);
            line + "\n"
        })
        .collect()
}

/// Edit `i` of issue 46 of a file of `n` lines: line `i * 97 % (n - 1)` becomes
/// `edited line {i}`.
fn edit(text: &str, i: usize, n: usize) -> String {
    let mut lines: Vec<&str> = text.split('\n').collect();
    let line = format!("edited line {i}");
    lines[i * 97 % (n - 1)] = &line;
    lines.join("\n")
}

/// A store holding `edits + 1` snapshots of `big.txt` of `lines` lines (and a small
/// README): the file as written, then after each edit. Returns each snapshot's tree
/// and file text.
fn edited_store(e: &Env, lines: usize, edits: usize) -> Vec<(gix::ObjectId, String)> {
    write(&e.ws, "README.md", "x\n");
    let mut text = big_file(lines);
    let mut taken = Vec::new();
    for i in 0..=edits {
        if i > 0 {
            text = edit(&text, i - 1, lines);
        }
        write(&e.ws, "big.txt", &text);
        let s = e.store.take(&e.ws, &Scope::Full).unwrap();
        taken.push((s.tree, text.clone()));
    }
    taken
}

fn keep_all(taken: &[(gix::ObjectId, String)]) -> HashSet<String> {
    taken.iter().map(|(t, _)| t.to_string()).collect()
}

/// The store's packs' sizes, `.pack` files alone.
fn pack_bytes(git_dir: &Path) -> u64 {
    std::fs::read_dir(git_dir.join("objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pack"))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

/// `git verify-pack -v` of the store's one pack: (object id → delta depth, 0 for a
/// whole object), and the chain lengths it reports.
fn verify_pack(store: &SnapshotStore) -> (BTreeMap<String, usize>, Vec<String>) {
    let packs: Vec<PathBuf> = std::fs::read_dir(store.root().join("objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "idx"))
        .collect();
    assert_eq!(packs.len(), 1, "{packs:?}");
    let out = git(
        store.root(),
        &["verify-pack", "-v", packs[0].to_str().unwrap()],
    );
    let out = String::from_utf8(out).unwrap();
    let mut depths = BTreeMap::new();
    let mut chains = Vec::new();
    for line in out.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if line.starts_with("chain length") {
            chains.push(line.to_owned());
        } else if fields.len() >= 5 && fields[0].len() == 40 {
            // id type size size-in-pack offset [depth base-id]
            let depth = fields.get(5).map_or(0, |d| d.parse().unwrap());
            depths.insert(fields[0].to_owned(), depth);
        }
    }
    (depths, chains)
}

/// Many versions of a large file: after gc the store is one pack of deltas that git
/// verifies (`verify-pack` reports the chains, none deeper than 50), reads
/// (`cat-file` of every version) and finds sound (`fsck --strict`); every snapshot reads
/// back byte for byte through the store, and a rollback to the deepest version and to
/// the first puts the file back. A second gc (the deltas now in a pack) keeps it so.
#[test]
fn gc_stores_the_versions_of_a_file_as_deltas_git_reads() {
    let e = env();
    // More versions than one chain may hold (50 deep), of a 256 KiB file.
    let taken = edited_store(&e, 4096, 60);
    let points: Vec<Files> = taken
        .iter()
        .map(|(t, _)| e.store.files(*t).unwrap())
        .collect();
    let before = e.store.usage().unwrap();
    let report = e.store.gc(&keep_all(&taken), false).unwrap();
    assert_eq!((report.after.packs, report.after.loose_objects), (1, 0));
    assert!(
        report.after.pack_bytes * 10 < before.loose_bytes,
        "{before:?} → {:?}",
        report.after
    );
    let reads_back = |store: &SnapshotStore| {
        for (tree, text) in &taken {
            let files = store.files(*tree).unwrap();
            assert_eq!(store.blob(files["big.txt"].oid).unwrap(), text.as_bytes());
            assert_eq!(store.blob(files["README.md"].oid).unwrap(), b"x\n");
        }
    };
    reads_back(&e.store);
    let blobs: Vec<String> = points
        .iter()
        .map(|f| f["big.txt"].oid.to_string())
        .collect();
    for round in 0..2 {
        if tacho_tests::git::need_git() {
            let (depths, chains) = verify_pack(&e.store);
            let deltas = blobs.iter().filter(|b| depths[b.as_str()] > 0).count();
            let deepest = blobs.iter().map(|b| depths[b.as_str()]).max().unwrap();
            // One whole version; the rest deltas, past depth 50 a branch from it.
            assert_eq!(deltas, blobs.len() - 1, "{chains:?}");
            assert_eq!(deepest, 50, "{chains:?}");
            assert_eq!(depths[blobs[50].as_str()], 50);
            assert!(chains.iter().any(|c| c.starts_with("chain length = 50:")));
            for (blob, (_, text)) in blobs.iter().zip(&taken) {
                let read = git(
                    e.store.root(),
                    &[
                        "--git-dir",
                        e.store.root().to_str().unwrap(),
                        "cat-file",
                        "-p",
                        blob,
                    ],
                );
                assert!(read == text.as_bytes(), "{blob}");
            }
            fsck(&e.store);
        }
        if round == 0 {
            // Again, from the pack of deltas: the same pack.
            let again = e.store.gc(&keep_all(&taken), false).unwrap();
            assert_eq!(again.packed_objects, report.packed_objects);
            assert_eq!(again.after.pack_bytes, report.after.pack_bytes);
            reads_back(&e.store);
        }
    }
    // The workspace rolled back to the deepest version (the 50th edit: the versions
    // shrink, so the first is whole), then to the first.
    write(&e.ws, "big.txt", "changed since\n");
    for k in [50, 0] {
        let (_, applied) = rollback_to(&e, &points, k, true);
        assert!(applied.failed.is_empty(), "{:?}", applied.failed);
        assert_eq!(
            std::fs::read_to_string(e.ws.join("big.txt")).unwrap(),
            taken[k].1
        );
    }
}

/// Issue 46's measurement: 100 one-line edits of a 1 MiB file. After gc the store's
/// pack is within 1.2 times the one `git gc` makes of the same objects (the store
/// copied before gc, every snapshot a ref, `git gc --prune=now`).
#[test]
fn gc_of_100_edits_is_within_1_2x_of_git_gc() {
    if !tacho_tests::git::need_git() {
        return;
    }
    let e = env();
    let taken = edited_store(&e, 16_384, 100);
    let copy = e._tmp.path().join("git-copy");
    let status = Command::new("cp")
        .args(["-a"])
        .arg(e.store.root())
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    let started = std::time::Instant::now();
    let report = e.store.gc(&keep_all(&taken), false).unwrap();
    let ours_took = started.elapsed();
    let started = std::time::Instant::now();
    git(
        &copy,
        &[
            "--git-dir",
            copy.to_str().unwrap(),
            "gc",
            "-q",
            "--prune=now",
        ],
    );
    let theirs_took = started.elapsed();
    let (ours, theirs) = (pack_bytes(e.store.root()), pack_bytes(&copy));
    let ratio = ours as f64 / theirs as f64;
    println!(
        "100 edits of a 1 MiB file: tacho gc {ours} bytes ({ours_took:?}), git gc {theirs} bytes ({theirs_took:?}): {ratio:.2}x; the store {} → {} bytes on disk",
        report.before.disk_bytes(),
        report.after.disk_bytes(),
    );
    assert!(ratio <= 1.2, "{ratio:.2}x");
    for (tree, text) in taken.iter().step_by(7) {
        let files = e.store.files(*tree).unwrap();
        assert_eq!(e.store.blob(files["big.txt"].oid).unwrap(), text.as_bytes());
    }
}
