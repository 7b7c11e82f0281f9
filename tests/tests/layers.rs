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
