//! The rules a plan and its assurance contract must keep: ids, fields, weak checks
//! and remote before-states.

use tacho_projections::shell::commands;

use tacho_shell::hides_failure;

use super::*;

pub(super) fn is_acceptance_id(id: &str) -> bool {
    id.strip_prefix("AC")
        .is_some_and(|n| !n.is_empty() && n.len() <= 3 && n.bytes().all(|b| b.is_ascii_digit()))
}

pub(super) fn is_check_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id.split('-').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

pub(super) fn parse_assurance(heading_line: usize, text: &str) -> Result<Assurance, PlanError> {
    let start = text.find("```").ok_or_else(|| {
        err(
            Some(heading_line),
            "the assurance contract is a fenced ```json block",
        )
    })?;
    let after = &text[start + 3..];
    let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
    let body = &after[body_start..];
    let end = body.find("```").ok_or_else(|| {
        err(
            Some(heading_line),
            "the assurance contract's ``` block is not closed",
        )
    })?;
    let json = &body[..end];
    let first_json_line = heading_line + 1 + text[..start].lines().count() + 1;
    serde_json::from_str::<Assurance>(json).map_err(|e| {
        // serde names the position inside the JSON; say it in the plan's terms.
        let text = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let text = text.strip_suffix(&suffix).unwrap_or(&text);
        err(
            Some(first_json_line + e.line().saturating_sub(1)),
            format!("assurance JSON, column {}: {text}", e.column()),
        )
    })
}

pub(super) fn check_assurance(
    a: &Assurance,
    kind: &str,
    acceptance: &[(String, String)],
    objective: &str,
    command_rules: bool,
) -> Result<(), PlanError> {
    let bad = |m: String| Err(err(None, format!("assurance: {m}")));
    if a.version != 1 {
        return bad(format!("version {} is not supported (use 1)", a.version));
    }
    if a.source_paths.is_empty() || a.source_paths.len() > 20 {
        return bad(format!(
            "sourcePaths must list 1 to 20 paths, not {}",
            a.source_paths.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for p in &a.source_paths {
        if p.is_empty() || p.starts_with('/') || p.split('/').any(|c| c == ".." || c == ".git") {
            return bad(format!(
                "sourcePaths entry {p:?} must be relative to the workspace, without `..` or `.git`"
            ));
        }
        single_line("sourcePaths entry", p)?;
        if !seen.insert(p) {
            return bad(format!("sourcePaths lists {p:?} twice"));
        }
    }
    if a.change_paths.len() > 20 {
        return bad(format!(
            "changePaths must list at most 20 paths, not {}",
            a.change_paths.len()
        ));
    }
    let mut seen = BTreeSet::new();
    for p in &a.change_paths {
        if p.is_empty() || p.starts_with('/') || p.split('/').any(|c| c == ".." || c == ".git") {
            return bad(format!(
                "changePaths entry {p:?} must be relative to the workspace, without `..` or `.git`"
            ));
        }
        single_line("changePaths entry", p)?;
        if !seen.insert(p) {
            return bad(format!("changePaths lists {p:?} twice"));
        }
        if !a
            .source_paths
            .iter()
            .any(|s| tacho_schema::path_within(p, s))
        {
            return bad(format!(
                "changePaths entry {p:?} lies under no source path: the checks' clean room holds only the source paths, so a change there could not be taken away"
            ));
        }
        if tacho_schema::path_within(".", p) {
            return bad(format!(
                "changePaths entry {p:?} is the whole workspace: name the implementation the goal changes, not the tests that check it"
            ));
        }
    }
    if let Some(setup) = &a.setup {
        single_line("setup command", &setup.command)?;
        if setup.command.trim().is_empty() {
            return bad("the setup needs a command".into());
        }
        for (what, list) in [("inputs", &setup.inputs), ("outputs", &setup.outputs)] {
            if list.is_empty() || list.len() > 8 {
                return bad(format!(
                    "setup {what} must list 1 to 8 paths, not {}",
                    list.len()
                ));
            }
            for p in list {
                let p = p.trim_end_matches('/');
                if p.is_empty()
                    || p == "."
                    || p.starts_with('/')
                    || p.split('/')
                        .any(|c| c.is_empty() || c == ".." || c == ".git")
                {
                    return bad(format!(
                        "setup {what} entry {p:?} must be a path relative to the workspace, without `..` or `.git`"
                    ));
                }
                single_line(&format!("setup {what} entry"), p)?;
            }
        }
        for p in &setup.inputs {
            if !a
                .source_paths
                .iter()
                .any(|s| tacho_schema::path_within(p, s))
            {
                return bad(format!(
                    "setup input {p:?} lies under no source path: the clean room would not hold it"
                ));
            }
        }
    }
    if a.sources.len() > 12 {
        return bad(format!("at most 12 sources, not {}", a.sources.len()));
    }
    for s in &a.sources {
        if s.role.trim().is_empty() || s.reference.trim().is_empty() {
            return bad("every source needs a role and a reference".into());
        }
        single_line("source role", &s.role)?;
        single_line("source reference", &s.reference)?;
    }
    if a.checks.is_empty() || a.checks.len() > 12 {
        return bad(format!(
            "checks must list 1 to 12 checks, not {}",
            a.checks.len()
        ));
    }
    let known: BTreeSet<&str> = acceptance.iter().map(|(id, _)| id.as_str()).collect();
    let mut ids = BTreeSet::new();
    let mut covered = BTreeSet::new();
    for c in &a.checks {
        if !is_check_id(&c.id) {
            return bad(format!(
                "check id {:?} must be lower-case words joined by `-`, like `invoice-parity`",
                c.id
            ));
        }
        if !ids.insert(c.id.as_str()) {
            return bad(format!("check id {} appears twice", c.id));
        }
        if c.acceptance_ids.is_empty() || c.acceptance_ids.len() > 5 {
            return bad(format!(
                "check {} must cover 1 to 5 acceptance ids, not {}",
                c.id,
                c.acceptance_ids.len()
            ));
        }
        let mut mine = BTreeSet::new();
        for ac in &c.acceptance_ids {
            if !known.contains(ac.as_str()) {
                return bad(format!(
                    "check {} covers {ac}, which the acceptance criteria do not define",
                    c.id
                ));
            }
            if !mine.insert(ac) {
                return bad(format!("check {} lists {ac} twice", c.id));
            }
            covered.insert(ac.as_str());
        }
        single_line(&format!("check {} command", c.id), &c.command)?;
        single_line(&format!("check {} purpose", c.id), &c.purpose)?;
        if let Some(e) = &c.environment {
            single_line(&format!("check {} environment", c.id), e)?;
        }
        if c.command.trim().is_empty() || c.purpose.trim().is_empty() {
            return bad(format!("check {} needs a command and a purpose", c.id));
        }
        if c.variables.len() > 16 {
            return bad(format!("check {} names more than 16 variables", c.id));
        }
        for v in &c.variables {
            check_variable(&c.id, v)?;
        }
        // Required in new plans (BRIEF §3); a plan frozen without one keeps its digest
        // and reads (`command_rules` off: the rules for new plans only).
        if command_rules && c.environment.as_deref().is_none_or(|e| e.trim().is_empty()) {
            return bad(format!(
                "check {} needs an environment: where it runs and against what (BRIEF §3), like \"Staging migration target, schema ERP\"",
                c.id
            ));
        }
        if command_rules && let Some(why) = command_problem(&c.id, &c.command, objective) {
            return bad(why);
        }
    }
    for (id, _) in acceptance {
        if !covered.contains(id.as_str()) {
            return bad(format!("acceptance criterion {id} is covered by no check"));
        }
    }
    // A criterion is evidence of a change only through a check that fails without it
    // (SPEC §12.2, red/green): guards alone cannot show it, except where the goal kind
    // makes every check a guard (a refactor).
    if !tacho_schema::kind_makes_guards(kind) {
        for (id, _) in acceptance {
            let red_green = a
                .checks
                .iter()
                .any(|c| !c.guard && c.acceptance_ids.iter().any(|x| x == id));
            if !red_green {
                return bad(format!(
                    "acceptance criterion {id} is covered only by guards: a {kind} needs a check for it that fails without the change and passes with it (leave \"guard\" off one)"
                ));
            }
        }
    }
    Ok(())
}

/// What is wrong with a check's command, if anything: it can hide a failure, it is
/// too weak to prove anything, or it compares against a remote-tracking state the
/// objective does not name.
pub(super) fn command_problem(id: &str, command: &str, objective: &str) -> Option<String> {
    if let Some(why) = weak_check(command) {
        return Some(format!("check {id} is too weak to prove anything: {why}"));
    }
    if let Some(r) = remote_before_state(command)
        && !objective_names_remote(objective, &r)
    {
        return Some(format!(
            "check {id} compares against the remote-tracking state `{r}`, which moves; use {{BASELINE}} (the HEAD commit at submission), or name the remote in the objective"
        ));
    }
    if let Some(why) = hides_failure(command) {
        return Some(format!("check {id} can hide a failure: {why}"));
    }
    None
}

/// A variable a check names (SPEC §12.2): a name, not one that changes how the shell or
/// the loader runs programs, not one that looks like a credential (its value would be
/// written into the log).
fn check_variable(check: &str, name: &str) -> Result<(), PlanError> {
    let bad = |why: String| Err(err(None, format!("assurance: check {check}: {why}")));
    let is_name = name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && name.bytes().next().is_some_and(|b| !b.is_ascii_digit());
    if !is_name {
        return bad(format!(
            "variable {name:?} is not a variable name (letters, digits and `_`, not starting with a digit)"
        ));
    }
    let upper = name.to_ascii_uppercase();
    const RUNS: &[&str] = &[
        "BASH_ENV",
        "BASHOPTS",
        "CDPATH",
        "ENV",
        "GLOBIGNORE",
        "IFS",
        "PATH",
        "PS4",
        "SHELLOPTS",
    ];
    if RUNS.contains(&upper.as_str())
        || ["LD_", "DYLD_", "BASH_FUNC_"]
            .iter()
            .any(|p| upper.starts_with(p))
    {
        return bad(format!(
            "variable {name} changes how the shell or the loader runs programs; a check cannot take it"
        ));
    }
    const SECRET: &[&str] = &[
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "API_KEY",
        "APIKEY",
        "PRIVATE_KEY",
        "ACCESS_KEY",
        "AUTH",
    ];
    if SECRET.iter().any(|w| upper.contains(w)) {
        return bad(format!(
            "variable {name} looks like a credential, and the values of a check's variables are written into the log; let the check read it from a file instead"
        ));
    }
    Ok(())
}

pub(super) fn single_line(what: &str, v: &str) -> Result<(), PlanError> {
    if v.contains('\n') || v.contains('\r') {
        return Err(err(
            None,
            format!("assurance: {what} must be a single line"),
        ));
    }
    Ok(())
}

pub(super) const OBSERVERS: &[&str] = &[
    "echo", "printf", "ls", "cat", "grep", "egrep", "fgrep", "rg", "head", "tail", "wc", "find",
    "pwd", "true", "stat", "file", "tree", "du", "which", "type", ":", "sleep", "date", "env",
    "less", "more", "read",
];

/// Why a check command cannot prove anything, if it cannot: every command it runs
/// only observes, or only tests that files exist (loops of such tests included), or it
/// is a lone path-filtered `git log`. Git's assertion forms (`merge-base
/// --is-ancestor`, `diff --exit-code`, ...) are real checks.
pub(super) fn weak_check(command: &str) -> Option<String> {
    const KEYWORDS: &[&str] = &[
        "do", "done", "while", "until", "if", "then", "else", "elif", "fi", "!",
    ];
    let mut real: Vec<Vec<String>> = Vec::new();
    let mut presence = false;
    for c in commands(command) {
        let mut w: &[String] = &c;
        if w.first().is_some_and(|f| f == "for") {
            continue; // `for x in ...`: the loop header itself does nothing
        }
        while w.first().is_some_and(|f| KEYWORDS.contains(&f.as_str())) {
            w = &w[1..];
        }
        if w.is_empty() {
            continue;
        }
        if is_presence_test(w) {
            presence = true;
            continue;
        }
        if OBSERVERS.contains(&w[0].as_str()) {
            continue;
        }
        real.push(w.to_vec());
    }
    if real.is_empty() {
        return Some(if presence {
            "it only checks that files exist".into()
        } else {
            "it only observes (echo, ls, cat, grep, ...) and cannot fail on wrong behaviour".into()
        });
    }
    if real.len() == 1
        && real[0]
            .get(..2)
            .is_some_and(|w| w[0] == "git" && w[1] == "log")
        && real[0].iter().any(|w| w == "--")
    {
        return Some(
            "a path-filtered `git log` only shows that some commit touched the path".into(),
        );
    }
    None
}

/// `test -f X`, `[ -s X ]`, `[[ -e X ]]` and the like.
pub(super) fn is_presence_test(words: &[String]) -> bool {
    let w0 = words[0].as_str();
    let flags = ["-f", "-e", "-s", "-d", "-r", "-x"];
    match w0 {
        "test" | "[" | "[[" => {
            words.get(1).is_some_and(|f| flags.contains(&f.as_str())) && words.len() <= 4
        }
        _ => false,
    }
}

/// A remote-tracking before-state a check compares against: `origin/...`,
/// `upstream/...`, `@{u}`, `@{upstream}`, `refs/remotes/...`.
pub(super) fn remote_before_state(command: &str) -> Option<String> {
    for c in commands(command) {
        if c.first().is_none_or(|w| w != "git") {
            continue;
        }
        for w in &c[1..] {
            let w = w.trim_end_matches([')', '"']);
            let starts = w.split("..").next().unwrap_or(w);
            for candidate in [w, starts] {
                if candidate.contains("@{u}") || candidate.contains("@{upstream}") {
                    return Some(candidate.to_owned());
                }
                if candidate.starts_with("refs/remotes/")
                    || candidate.starts_with("origin/")
                    || candidate.starts_with("upstream/")
                {
                    return Some(candidate.to_owned());
                }
            }
        }
    }
    None
}

pub(super) fn objective_names_remote(objective: &str, state: &str) -> bool {
    let remote = state
        .trim_start_matches("refs/remotes/")
        .split(['/', '@'])
        .next()
        .unwrap_or("");
    !remote.is_empty()
        && objective
            .split(|c: char| !c.is_alphanumeric() && c != '-' && c != '_')
            .any(|w| w == remote)
}
