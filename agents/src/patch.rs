//! The paths an `apply_patch` patch touches (Codex's file-editing tool: its input is
//! patch text, not a shell command).
//!
//! The format: `*** Begin Patch`, then per file `*** Add File: P`, `*** Delete File: P`
//! or `*** Update File: P` (optionally followed by `*** Move to: Q`), hunks, and
//! `*** End Patch`.

/// What a patch does to one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOp {
    Add,
    Delete,
    Update,
    /// An update that also moves the file; the path is the new one.
    MoveTo {
        from: String,
    },
}

/// One file of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchFile {
    pub path: String,
    pub op: PatchOp,
    pub lines_added: u64,
    pub lines_removed: u64,
}

/// The files a patch touches, in order. `None` when the text is not a patch.
pub fn patch_files(text: &str) -> Option<Vec<PatchFile>> {
    let mut lines = text.lines().map(|l| l.trim_end_matches('\r'));
    lines
        .find(|l| !l.trim().is_empty())
        .filter(|l| l.trim() == "*** Begin Patch")?;
    let mut out: Vec<PatchFile> = Vec::new();
    for line in lines {
        let file = |path: &str, op| PatchFile {
            path: path.trim().to_string(),
            op,
            lines_added: 0,
            lines_removed: 0,
        };
        if let Some(p) = line.strip_prefix("*** Add File: ") {
            out.push(file(p, PatchOp::Add));
        } else if let Some(p) = line.strip_prefix("*** Delete File: ") {
            out.push(file(p, PatchOp::Delete));
        } else if let Some(p) = line.strip_prefix("*** Update File: ") {
            out.push(file(p, PatchOp::Update));
        } else if let Some(p) = line.strip_prefix("*** Move to: ") {
            if let Some(last) = out.last_mut() {
                let from = std::mem::replace(&mut last.path, p.trim().to_string());
                last.op = PatchOp::MoveTo { from };
            }
        } else if line.starts_with("*** End Patch") {
            break;
        } else if let Some(last) = out.last_mut() {
            if line.starts_with('+') {
                last.lines_added += 1;
            } else if line.starts_with('-') {
                last.lines_removed += 1;
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_file_is_found() {
        let p = "*** Begin Patch\n*** Add File: src/new.rs\n+fn a() {}\n+\n*** Update File: src/lib.rs\n*** Move to: src/core.rs\n@@ fn x\n-old\n+new\n*** Delete File: README.old\n*** End Patch\n";
        let files = patch_files(p).unwrap_or_default();
        assert_eq!(
            files,
            vec![
                PatchFile {
                    path: "src/new.rs".into(),
                    op: PatchOp::Add,
                    lines_added: 2,
                    lines_removed: 0
                },
                PatchFile {
                    path: "src/core.rs".into(),
                    op: PatchOp::MoveTo {
                        from: "src/lib.rs".into()
                    },
                    lines_added: 1,
                    lines_removed: 1
                },
                PatchFile {
                    path: "README.old".into(),
                    op: PatchOp::Delete,
                    lines_added: 0,
                    lines_removed: 0
                },
            ]
        );
    }

    #[test]
    fn text_that_is_not_a_patch_is_none() {
        assert_eq!(patch_files("echo hi"), None);
        assert_eq!(patch_files(""), None);
    }
}
