//! The read side has one owner (ARCHITECTURE.md): frontends (`cli/`, `web/`, `export/`)
//! depend on the application layer, never on the domain crates below it, and never fold
//! events or score risk themselves. The application re-exports the domain's types that
//! appear in its views; these checks fail when a frontend uses one to do the
//! application's work.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

const FRONTENDS: [&str; 3] = ["cli", "web", "export"];

/// The workspace crates a frontend may depend on.
const ALLOWED: [&str; 4] = ["tacho-app", "tacho-schema", "tacho-export", "tacho-web"];

/// What doing the application's work looks like in source: folding events into a
/// graph, a summary or an audit trace, scoring risk, comparing runs.
const FOLDS: [&str; 12] = [
    "tacho_projections",
    "tacho_store",
    "tacho_goals",
    "tacho_git",
    "ExecutionGraph::new",
    "ExecutionGraph::resume",
    ".apply(",
    ".apply_view(",
    "from_graph(",
    "assess(",
    "AuditFold",
    "merge_observed",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn frontends_depend_on_the_application_layer_only() {
    let mut wrong = Vec::new();
    for f in FRONTENDS {
        let path = root().join(f).join("Cargo.toml");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(!text.is_empty(), "{} could not be read", path.display());
        for line in text.lines() {
            let name = line.split(['=', '.', ' ']).next().unwrap_or("").trim();
            if name.starts_with("tacho-") && !ALLOWED.contains(&name) {
                wrong.push(format!("{}: {line}", path.display()));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "frontends depending on domain crates:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_frontend_folds_events_or_scores_risk() {
    let mut found = Vec::new();
    let mut files = Vec::new();
    for f in FRONTENDS {
        rust_files(&root().join(f).join("src"), &mut files);
    }
    assert!(files.len() > 20, "the frontends' sources were not found");
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        // A frontend's own unit tests may build a graph to draw (fixtures, not answers).
        let code_end = text.find("#[cfg(test)]").unwrap_or(text.len());
        let code = text.get(..code_end).unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for pattern in FOLDS {
                if code.contains(pattern) {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "frontend code doing the application's work (ask the application layer for a view instead):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_application_hands_out_no_fold_or_assessment() {
    let lib = std::fs::read_to_string(root().join("app/src/lib.rs")).unwrap_or_default();
    let exports: String = lib
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    for name in ["assess", "AuditFold", "compare,", "compare}", "FoldState"] {
        assert!(
            !exports.contains(name),
            "app/src/lib.rs re-exports `{name}`: frontends would fold or score with it"
        );
    }
}

/// Issue 45 (7): docs that cannot drift. ARCHITECTURE.md's count of `unsafe`
/// exceptions is the number of `#[allow(unsafe_code)]` in the workspace's code, and
/// names each file's module; its "next kind id" is one past the last id of the
/// `kinds!` table.
#[test]
fn architecture_counts_what_the_code_holds() {
    let root = root();
    let arch = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_default();
    let mut files = Vec::new();
    for dir in [
        "log-format",
        "schema",
        "store",
        "git",
        "goals",
        "projections",
        "agents",
        "app",
        "cli",
        "web",
        "export",
        "shell",
        "benches",
    ] {
        rust_files(&root.join(dir).join("src"), &mut files);
    }
    let mut sites = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for _ in text.matches("#[allow(unsafe_code)]") {
            sites.push(f.strip_prefix(&root).unwrap_or(f).display().to_string());
        }
    }
    let words = ["no", "one", "two", "three", "four", "five", "six", "seven"];
    let said = words
        .get(sites.len())
        .map(|w| format!("There are {w} exceptions"))
        .unwrap_or_default();
    assert!(
        !said.is_empty() && arch.contains(&said),
        "ARCHITECTURE.md should say \"{said}\" (the code has {}: {sites:?})",
        sites.len()
    );
    for site in &sites {
        // `store/src/vfs.rs` is named as `vfs::`, `git/src/snapshot/cache.rs` as
        // `snapshot::cache::`.
        let module = site
            .split_once("/src/")
            .map(|(_, m)| m.trim_end_matches(".rs").replace('/', "::"))
            .unwrap_or_default();
        assert!(
            arch.contains(&format!("`{module}::")),
            "ARCHITECTURE.md does not name the unsafe exception in {site} (`{module}::…`)"
        );
    }
    let kinds = std::fs::read_to_string(root.join("schema/src/kinds.rs")).unwrap_or_default();
    let last = kinds
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(") = ")?;
            rest.split(',').next()?.trim().parse::<u16>().ok()
        })
        .max()
        .unwrap_or(0);
    assert!(last > 0, "no kind ids read from the kinds! table");
    assert!(
        arch.contains(&format!("(the next is {})", last + 1)),
        "ARCHITECTURE.md's next kind id should be {}",
        last + 1
    );
}
