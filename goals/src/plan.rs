//! Goal plans: the Markdown a goal is created from, its assurance contract, the
//! validation rules of BRIEF §3 and the contract digest.
//!
//! A plan is Markdown: a `# title`, a `Goal kind:` line, then `## Acceptance criteria`
//! (`- AC1: ...`), `## Verification plan`, `## Non-goals`, `## Assumed scope`, and
//! `## Assurance contract` holding the assurance JSON in a fenced block. Everything here
//! is pure: the caller supplies the HEAD commit for `{BASELINE}`.

use std::collections::{BTreeMap, BTreeSet};

use tacho_projections::shell::commands;
use tacho_schema::Assurance;

/// The rendered plan's limit.
pub const MAX_PLAN_BYTES: usize = 8192;

/// A parsed, validated plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub title: String,
    pub kind: String,
    /// Acceptance id → its text, in plan order.
    pub acceptance: Vec<(String, String)>,
    pub assurance: Option<Assurance>,
    /// The plan as submitted, with `{BASELINE}` replaced.
    pub markdown: String,
    /// The commit `{BASELINE}` stood for, when the plan used it.
    pub baseline: Option<String>,
}

/// What a plan is checked against besides itself.
pub struct Submission<'a> {
    pub markdown: &'a str,
    /// The goal's objective (a remote it names may be used as a before-state).
    pub objective: &'a str,
    /// The workspace's HEAD commit, if it has one.
    pub head: Option<&'a str>,
    /// Whether the goal is assured (then the plan must have a contract).
    pub assure: bool,
}

/// A rule a plan breaks: where, and what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanError {
    /// 1-based line of the plan, when the rule is about one.
    pub line: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "plan line {l}: {}", self.message),
            None => write!(f, "plan: {}", self.message),
        }
    }
}

impl std::error::Error for PlanError {}

fn err(line: Option<usize>, message: impl Into<String>) -> PlanError {
    PlanError {
        line,
        message: message.into(),
    }
}

/// Parses and validates a plan. Every rule of BRIEF §3 is checked; the first broken
/// one is returned.
pub fn validate(sub: &Submission<'_>) -> Result<Plan, PlanError> {
    // Secrets first: a plan that carries a credential is never stored.
    for (i, line) in sub.markdown.lines().enumerate() {
        if let Some(what) = credential(line) {
            return Err(err(
                Some(i + 1),
                format!(
                    "looks like it contains a credential ({what}); remove it and refer to it by name instead"
                ),
            ));
        }
    }
    let markdown = match sub.markdown.contains("{BASELINE}") {
        false => sub.markdown.to_owned(),
        true => match sub.head {
            Some(h) => sub.markdown.replace("{BASELINE}", h),
            None => {
                return Err(err(
                    None,
                    "the plan uses {BASELINE}, but the workspace has no HEAD commit to stand for it; commit first",
                ));
            }
        },
    };
    let baseline = sub
        .markdown
        .contains("{BASELINE}")
        .then(|| sub.head.unwrap_or_default().to_owned());
    let size = markdown.len();
    if size > MAX_PLAN_BYTES {
        return Err(err(
            None,
            format!(
                "the rendered plan is {size} bytes, {} over the limit of {MAX_PLAN_BYTES}: remove at least {} bytes and resubmit the whole plan (plans are never truncated)",
                size - MAX_PLAN_BYTES,
                size - MAX_PLAN_BYTES
            ),
        ));
    }
    let sections = sections(&markdown);
    let title = markdown
        .lines()
        .find_map(|l| l.strip_prefix("# "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| err(Some(1), "the plan needs a title: a first heading `# ...`"))?
        .to_owned();
    let kind = markdown
        .lines()
        .find_map(|l| l.strip_prefix("Goal kind:"))
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .ok_or_else(|| err(None, "the plan needs a `Goal kind: ...` line"))?
        .to_owned();
    let (ac_line, ac_text) = sections
        .get("acceptance criteria")
        .ok_or_else(|| err(None, "the plan needs a `## Acceptance criteria` section"))?;
    let mut acceptance: Vec<(String, String)> = Vec::new();
    for (k, l) in ac_text.lines().enumerate() {
        let Some(item) = l.trim_start().strip_prefix("- ") else {
            continue;
        };
        let line = ac_line + 1 + k;
        let (id, text) = item.split_once(':').ok_or_else(|| {
            err(
                Some(line),
                "an acceptance criterion reads `- AC1: what must hold`",
            )
        })?;
        let id = id.trim().trim_matches('*').to_owned();
        if !is_acceptance_id(&id) {
            return Err(err(
                Some(line),
                format!("`{id}` is not an acceptance id like AC1"),
            ));
        }
        if acceptance.iter().any(|(a, _)| *a == id) {
            return Err(err(Some(line), format!("acceptance id {id} appears twice")));
        }
        acceptance.push((id, text.trim().to_owned()));
    }
    if acceptance.is_empty() {
        return Err(err(
            Some(*ac_line),
            "the acceptance criteria list no `- AC1: ...` item",
        ));
    }
    for s in ["verification plan", "non-goals", "assumed scope"] {
        if !sections.contains_key(s) {
            return Err(err(
                None,
                format!("the plan needs a `## {}` section", heading(s)),
            ));
        }
    }
    let assurance = match sections.get("assurance contract") {
        None if sub.assure => {
            return Err(err(
                None,
                "an assured goal needs an `## Assurance contract` section with the assurance JSON",
            ));
        }
        None => None,
        Some((line, text)) => Some(parse_assurance(*line, text)?),
    };
    if let Some(a) = &assurance {
        check_assurance(a, &acceptance, sub.objective)?;
    }
    Ok(Plan {
        title,
        kind,
        acceptance,
        assurance,
        markdown,
        baseline,
    })
}

fn heading(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// `## Heading` sections by lower-case name: (line of the heading, text after it).
fn sections(markdown: &str) -> BTreeMap<String, (usize, String)> {
    let mut out: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut current: Option<String> = None;
    for (i, l) in markdown.lines().enumerate() {
        if let Some(h) = l.strip_prefix("## ") {
            let name = h.trim().to_lowercase();
            out.insert(name.clone(), (i + 1, String::new()));
            current = Some(name);
        } else if let Some(c) = &current
            && let Some(s) = out.get_mut(c)
        {
            s.1.push_str(l);
            s.1.push('\n');
        }
    }
    out
}

fn is_acceptance_id(id: &str) -> bool {
    id.strip_prefix("AC")
        .is_some_and(|n| !n.is_empty() && n.len() <= 3 && n.bytes().all(|b| b.is_ascii_digit()))
}

fn is_check_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id.split('-').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

fn parse_assurance(heading_line: usize, text: &str) -> Result<Assurance, PlanError> {
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

fn check_assurance(
    a: &Assurance,
    acceptance: &[(String, String)],
    objective: &str,
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
        if let Some(why) = weak_check(&c.command) {
            return bad(format!(
                "check {} is too weak to prove anything: {why}",
                c.id
            ));
        }
        if let Some(r) = remote_before_state(&c.command)
            && !objective_names_remote(objective, &r)
        {
            return bad(format!(
                "check {} compares against the remote-tracking state `{r}`, which moves; use {{BASELINE}} (the HEAD commit at submission), or name the remote in the objective",
                c.id
            ));
        }
    }
    for (id, _) in acceptance {
        if !covered.contains(id.as_str()) {
            return bad(format!("acceptance criterion {id} is covered by no check"));
        }
    }
    Ok(())
}

fn single_line(what: &str, v: &str) -> Result<(), PlanError> {
    if v.contains('\n') || v.contains('\r') {
        return Err(err(
            None,
            format!("assurance: {what} must be a single line"),
        ));
    }
    Ok(())
}

const OBSERVERS: &[&str] = &[
    "echo", "printf", "ls", "cat", "grep", "egrep", "fgrep", "rg", "head", "tail", "wc", "find",
    "pwd", "true", "stat", "file", "tree", "du", "which", "type", ":", "sleep", "date", "env",
    "less", "more", "read",
];

/// Why a check command cannot prove anything, if it cannot: every command it runs
/// only observes, or only tests that files exist (loops of such tests included), or it
/// is a lone path-filtered `git log`. Git's assertion forms (`merge-base
/// --is-ancestor`, `diff --exit-code`, ...) are real checks.
fn weak_check(command: &str) -> Option<String> {
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
fn is_presence_test(words: &[String]) -> bool {
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
fn remote_before_state(command: &str) -> Option<String> {
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

fn objective_names_remote(objective: &str, state: &str) -> bool {
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

/// What in a line looks like a credential.
fn credential(line: &str) -> Option<&'static str> {
    let l = line;
    let patterns: &[(&str, &str)] = &[
        ("ghp_", "a GitHub token"),
        ("github_pat_", "a GitHub token"),
        ("xoxb-", "a Slack token"),
        ("xoxp-", "a Slack token"),
        ("sk-ant-", "an Anthropic API key"),
        ("sk-proj-", "an OpenAI API key"),
        ("AKIA", "an AWS access key"),
        ("-----BEGIN", "a private key"),
        ("glpat-", "a GitLab token"),
    ];
    for (p, what) in patterns {
        if let Some(i) = l.find(p) {
            let tail = &l[i + p.len()..];
            let run = tail
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .count();
            if *p == "-----BEGIN" || run >= 16 {
                return Some(what);
            }
        }
    }
    // user:password@ in a URL
    if let Some(i) = l.find("://") {
        let rest = &l[i + 3..];
        let auth = rest.split(['/', ' ']).next().unwrap_or("");
        if let Some((userinfo, _)) = auth.split_once('@')
            && userinfo.contains(':')
        {
            return Some("a password in a URL");
        }
    }
    let lower = l.to_lowercase();
    for key in [
        "password=",
        "passwd=",
        "secret=",
        "api_key=",
        "apikey=",
        "token=",
    ] {
        if let Some(i) = lower.find(key) {
            let v = l[i + key.len()..].trim_start_matches(['"', '\'']);
            let run = v
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '"' && *c != '\'')
                .count();
            if run >= 8 && !v.starts_with('$') && !v.starts_with('<') {
                return Some("a secret assigned in the text");
            }
        }
    }
    None
}

/// The contract digest: BLAKE3-derive("tacho goal contract v1") over the canonical
/// encoding of what defines acceptance — the goal kind, each acceptance id with its
/// text, and the assurance object as canonical JSON (keys sorted, no spaces). The title
/// and the other sections can change without changing it.
pub fn contract_digest(plan: &Plan) -> String {
    let mut h = blake3::Hasher::new_derive_key("tacho goal contract v1");
    let mut field = |b: &[u8]| {
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(plan.kind.as_bytes());
    for (id, text) in &plan.acceptance {
        field(id.as_bytes());
        field(text.as_bytes());
    }
    match &plan.assurance {
        Some(a) => {
            let v = serde_json::to_value(a).unwrap_or_default();
            field(canonical_json(&v).as_bytes())
        }
        None => field(b""),
    }
    h.finalize().to_hex().to_string()
}

/// JSON with object keys sorted and no insignificant white space.
fn canonical_json(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        serde_json::Value::String((*k).clone()),
                        canonical_json(&m[*k])
                    )
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        serde_json::Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical_json).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}
