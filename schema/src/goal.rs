//! The assurance contract of a goal: what `goal.created`'s `assurance` field holds (as
//! JSON text), typed. Plans are parsed and validated in `tacho-goals`; projections and
//! the application layer read a frozen contract through [`Assurance::from_json`]
//! instead of picking fields out of JSON.

use serde::{Deserialize, Serialize};

/// The assurance object, version 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Assurance {
    pub version: u32,
    pub source_paths: Vec<String>,
    #[serde(default)]
    pub sources: Vec<Source>,
    pub checks: Vec<Check>,
    /// The paths the goal is expected to change (its implementation, e.g.
    /// `["src/invoice"]`): a check's run "without the change" puts exactly these back
    /// as they were at the goal's start (SPEC §12.2, red/green). Optional; left out
    /// when empty, so a contract without it keeps its digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub change_paths: Vec<String>,
    /// What the checks need beyond the files (installed dependencies): a command run
    /// in each clean room before the check, whose result is cached under the digest of
    /// the files it reads (SPEC §12.2, "Setup"). Left out when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<Setup>,
}

/// The setup of a contract's clean rooms: `command` (`npm ci`, `pip install -r
/// requirements.txt --target .deps`) reads `inputs` (lockfiles, workspace-relative) and
/// makes `outputs` (folders in the room, such as `node_modules`), which are cached under
/// the digest of the command, the environment and the inputs' content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Setup {
    pub command: String,
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

/// A source the plan rests on (a ticket, a spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub role: String,
    pub reference: String,
}

/// One frozen acceptance check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Check {
    pub id: String,
    pub acceptance_ids: Vec<String>,
    pub command: String,
    pub purpose: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// Variables the check needs beyond the frozen set (SPEC §12.2): their values are
    /// frozen with the goal. Left out when empty, so a plan without them keeps its
    /// contract digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<String>,
    /// A regression guard: it must pass without the change and with it ("existing
    /// tests still pass"), instead of failing without it. Left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub guard: bool,
}

/// Whether the workspace-relative `path` is `root` or lies under it (`.` and the
/// empty path are the whole workspace; `./` and a trailing `/` are ignored).
pub fn path_within(path: &str, root: &str) -> bool {
    let norm = |p: &str| -> String {
        let p = p.trim_start_matches("./").trim_end_matches('/');
        if p == "." {
            String::new()
        } else {
            p.to_owned()
        }
    };
    let (path, root) = (norm(path), norm(root));
    root.is_empty()
        || path == root
        || path
            .strip_prefix(&root)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether a path looks like a test, a fixture or a check's own script rather than an
/// implementation (`tests/`, `test/`, `__tests__/`, `spec/`, `fixtures/`, `checks/`,
/// `conftest.py`, `test_*.py`, `*_test.py`, `*_test.go`, `*.test.*`, `*.spec.*`):
/// a `changePaths` entry like that lets red/green compare old tests with new ones over
/// unchanged code, so views flag it.
pub fn test_like(path: &str) -> bool {
    let path = path.trim_start_matches("./").trim_end_matches('/');
    let mut parts = path.split('/');
    let name = parts.next_back().unwrap_or_default();
    let dir_like = |c: &str| {
        matches!(
            c,
            "test" | "tests" | "__tests__" | "spec" | "specs" | "fixtures" | "testdata" | "checks"
        )
    };
    path.split('/').any(dir_like)
        || name == "conftest.py"
        || name.starts_with("test_")
        || name.ends_with("_test.py")
        || name.ends_with("_test.go")
        || name.contains(".test.")
        || name.contains(".spec.")
}

impl Assurance {
    /// Whether check `c` is a regression guard under a goal of `kind`: declared so, or
    /// every check of a refactor (a goal kind whose first word is `refactor`, in any
    /// case), which changes no behaviour a check could fail without.
    pub fn is_guard(kind: &str, c: &Check) -> bool {
        c.guard || kind_makes_guards(kind)
    }

    /// The contract frozen in a `goal.created` event. `None` when the text is not a
    /// version-1 contract: a goal recorded that way has no checks and no source paths,
    /// so nothing can count for it.
    pub fn from_json(text: &str) -> Option<Assurance> {
        serde_json::from_str(text).ok()
    }
}

/// Whether a goal kind makes every check a regression guard (`refactor`, in any case,
/// as its first word).
pub fn kind_makes_guards(kind: &str) -> bool {
    kind.split_whitespace().next().is_some_and(|w| {
        w.trim_end_matches([':', ',', '.'])
            .eq_ignore_ascii_case("refactor")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_within_and_test_like() {
        assert!(path_within("src/a.rs", "src"));
        assert!(path_within("src", "./src/"));
        assert!(path_within("anything", "."));
        assert!(!path_within("srcx/a", "src"));
        assert!(!path_within("src", "src/a"));
        for p in [
            "tests/x.py",
            "src/__tests__/a.ts",
            "test_a.py",
            "a_test.go",
            "a.spec.ts",
            "conftest.py",
            "checks/parity.sh",
        ] {
            assert!(test_like(p), "{p}");
        }
        for p in [
            "src/invoice",
            "src/latest.rs",
            "contest.py",
            "src/testing_utils.rs",
        ] {
            assert!(!test_like(p), "{p}");
        }
        assert!(kind_makes_guards("Refactor"));
        assert!(kind_makes_guards("refactor: split module"));
        assert!(!kind_makes_guards("bugfix"));
        assert!(!kind_makes_guards("refactoring-free feature"));
    }
}
