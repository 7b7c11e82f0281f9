//! The one secret detector: credentials a plan must not freeze, and what a push scans
//! a session's events for before they leave the machine (SPEC §17.1).
//!
//! The rules are gitleaks' default rule set (`goals/rules/gitleaks.toml`, vendored
//! unchanged, MIT), read as gitleaks reads it and applied as gitleaks applies it to a
//! text: each rule runs only when one of its keywords is in the text (case-insensitive),
//! its regex is compiled with the `regex` crate (RE2 syntax; ASCII classes, as in Go),
//! its secret is its `secretGroup` (else the first capture group that matched), a
//! secret whose Shannon entropy is not above the rule's `entropy` does not count, nor
//! one the global or the rule's allowlists let through (regexes against the secret, the
//! match or the line as `regexTarget` says, and stopwords). Path and commit allowlists,
//! and rules that apply only to some paths, do not apply to text. After them come
//! tacho's own rules in the same format (`goals/rules/tacho.toml`): passwords in URLs,
//! passwords assigned in the text, `Authorization` headers and private-key headers.
//! As gitleaks does, a generic finding gives way to a specific one of the same secret
//! on the same line; one finding is reported per line.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;

/// gitleaks' default configuration, as vendored.
const GITLEAKS: &str = include_str!("../rules/gitleaks.toml");
/// tacho's own rules, in the same format.
const TACHO: &str = include_str!("../rules/tacho.toml");

/// The gitleaks commit `rules/gitleaks.toml` was copied from.
pub const GITLEAKS_COMMIT: &str = "b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b";
/// Its `git describe`.
pub const GITLEAKS_VERSION: &str = "v8.30.0-27-gb58d3f10";

/// What kind of secret a piece of text looks like: one rule of the rule set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SecretKind(u16);

impl SecretKind {
    fn rule(self) -> Option<&'static Rule> {
        RULES.rules.get(usize::from(self.0))
    }

    /// The kind's stable name: the rule's id (`github-pat`, `aws-access-token`,
    /// `tacho-url-password`, …), as in JSON and `secret.allowed` records.
    pub fn name(self) -> &'static str {
        self.rule().map_or("unknown", |r| r.id.as_str())
    }

    /// The kind in words, with its article (`a GitHub token`).
    pub fn words(self) -> &'static str {
        self.rule().map_or("a secret", |r| r.words.as_str())
    }

    /// The rule's description, as its rule set gives it.
    pub fn description(self) -> &'static str {
        self.rule().map_or("", |r| r.description.as_str())
    }

    /// The kind of the rule with this id, if the rule set has it (and it compiled).
    pub fn by_name(id: &str) -> Option<SecretKind> {
        RULES
            .rules
            .iter()
            .position(|r| r.id == id)
            .and_then(|i| u16::try_from(i).ok())
            .map(SecretKind)
    }
}

impl std::fmt::Display for SecretKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One secret found in a text: its kind and where (1-based line, byte column of the
/// line, of the secret itself), and a hint that names it without giving it away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub kind: SecretKind,
    pub line: usize,
    pub column: usize,
    /// The secret's first four characters when it is 16 characters or longer (a
    /// token's prefix), then how long it is: never the secret.
    pub hint: String,
}

/// What in a line looks like a credential, in words (the plan rule's answer).
pub fn credential(line: &str) -> Option<&'static str> {
    scan(line).first().map(|f| f.kind.words())
}

/// Every line of `text` holding a secret: one finding per line (a specific rule's
/// before a generic one's, then the first in the line), in line order.
pub fn scan(text: &str) -> Vec<Found> {
    let rules = &*RULES;
    let bytes = text.as_bytes();
    let hits = rules.keywords_in(bytes);
    let lines = LineIndex::new(bytes);
    let mut found: Vec<Finding> = Vec::new();
    for (i, rule) in rules.rules.iter().enumerate() {
        if !rule.keywords.is_empty() && !rule.keywords.iter().any(|k| hits[*k]) {
            continue;
        }
        rule.detect(i, bytes, &lines, &rules.global, &mut found);
    }
    // One finding per line. gitleaks drops a generic finding when a specific one on
    // its line holds its secret; here a line's specific finding is always the one
    // kept, then the first in the line.
    let mut per_line: BTreeMap<usize, &Finding> = BTreeMap::new();
    for f in &found {
        let key = |f: &Finding| (rules.rules[f.rule].generic, f.column, f.rule);
        match per_line.get(&f.line) {
            Some(old) if key(old) <= key(f) => {}
            _ => {
                per_line.insert(f.line, f);
            }
        }
    }
    per_line
        .into_values()
        .map(|f| Found {
            kind: SecretKind(u16::try_from(f.rule).unwrap_or(u16::MAX)),
            line: f.line,
            column: f.column,
            hint: hint(&bytes[f.secret.clone()]),
        })
        .collect()
}

/// The rules of the vendored sets that could not be used, each with why: regexes the
/// `regex` crate does not compile, and rules that apply only to some file paths (a
/// text has none).
pub fn unusable_rules() -> &'static [(String, String)] {
    &RULES.unusable
}

/// How many rules the scan applies.
pub fn rule_count() -> usize {
    RULES.rules.len()
}

/// Every kind the scan can report, one per rule, in the rules' order.
pub fn kinds() -> impl Iterator<Item = SecretKind> {
    (0..RULES.rules.len())
        .filter_map(|i| u16::try_from(i).ok())
        .map(SecretKind)
}

fn hint(secret: &[u8]) -> String {
    let s = String::from_utf8_lossy(secret);
    let n = s.chars().count();
    if n >= 16 {
        let head: String = s.chars().take(4).collect();
        format!("{head}… ({n} characters)")
    } else {
        format!("({n} characters)")
    }
}

/// Shannon entropy of `data` as gitleaks computes it: counts by character, frequencies
/// over the length in bytes.
pub fn shannon_entropy(data: &str) -> f64 {
    if data.is_empty() {
        return 0.0;
    }
    let mut counts: BTreeMap<char, usize> = BTreeMap::new();
    for c in data.chars() {
        *counts.entry(c).or_default() += 1;
    }
    let inv = 1.0 / data.len() as f64;
    counts
        .values()
        .map(|n| {
            let p = *n as f64 * inv;
            -p * p.log2()
        })
        .sum()
}

/// One candidate before filtering: the rule, the secret's byte range, its place.
struct Finding {
    rule: usize,
    secret: std::ops::Range<usize>,
    line: usize,
    column: usize,
}

/// Where lines start, to turn byte offsets into lines and columns.
struct LineIndex {
    starts: Vec<usize>,
}

impl LineIndex {
    fn new(text: &[u8]) -> LineIndex {
        let mut starts = vec![0];
        starts.extend(
            text.iter()
                .enumerate()
                .filter(|(_, b)| **b == b'\n')
                .map(|(i, _)| i + 1),
        );
        LineIndex { starts }
    }

    /// 0-based line index of byte `at`.
    fn line_of(&self, at: usize) -> usize {
        self.starts.partition_point(|s| *s <= at).saturating_sub(1)
    }

    /// 1-based line and column of byte `at`.
    fn place(&self, at: usize) -> (usize, usize) {
        let l = self.line_of(at);
        (l + 1, at - self.starts[l] + 1)
    }

    /// The whole lines a byte range touches (gitleaks' `finding.Line`).
    fn lines(&self, text_len: usize, range: &std::ops::Range<usize>) -> std::ops::Range<usize> {
        let first = self.starts[self.line_of(range.start)];
        let last = self.line_of(range.end.saturating_sub(1).max(range.start));
        let end = self
            .starts
            .get(last + 1)
            .map_or(text_len, |s| s.saturating_sub(1));
        first..end.max(range.end).min(text_len)
    }
}

/// What an allowlist's regexes are matched against.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Secret,
    Match,
    Line,
}

struct Allowlist {
    target: Target,
    /// `condition = "AND"`: every check given must allow.
    and: bool,
    /// The allowlist has path or commit checks, which a text never passes.
    has_paths_or_commits: bool,
    regexes: Option<Regex>,
    stopwords: Option<AhoCorasick>,
}

impl Allowlist {
    fn allows(&self, secret: &[u8], matched: &[u8], line: &[u8]) -> bool {
        let target = match self.target {
            Target::Secret => secret,
            Target::Match => matched,
            Target::Line => line,
        };
        let regex = !target.is_empty() && self.regexes.as_ref().is_some_and(|r| r.is_match(target));
        let stop = !secret.is_empty()
            && self
                .stopwords
                .as_ref()
                .is_some_and(|s| s.is_match(&secret.to_ascii_lowercase()));
        if self.and {
            !self.has_paths_or_commits
                && (self.regexes.is_none() || regex)
                && (self.stopwords.is_none() || stop)
                && (self.regexes.is_some() || self.stopwords.is_some())
        } else {
            regex || stop
        }
    }
}

struct Rule {
    id: String,
    description: String,
    words: String,
    regex: Regex,
    entropy: f64,
    secret_group: usize,
    /// Indices into the rule set's keyword list.
    keywords: Vec<usize>,
    allowlists: Vec<Allowlist>,
    /// gitleaks' generic rules and tacho's own: they give way to a specific rule.
    generic: bool,
}

impl Rule {
    fn detect(
        &self,
        index: usize,
        text: &[u8],
        lines: &LineIndex,
        global: &[Allowlist],
        out: &mut Vec<Finding>,
    ) {
        for m in self.regex.find_iter(text) {
            // gitleaks trims line breaks off both ends of the match.
            let mut start = m.start();
            let mut end = m.end();
            while start < end && text[start] == b'\n' {
                start += 1;
            }
            while end > start && text[end - 1] == b'\n' {
                end -= 1;
            }
            let matched = &text[start..end];
            // The secret: the rule's secret group, else the first group that matched,
            // found by matching the regex again on the match (as gitleaks does).
            let mut secret = start..end;
            if let Some(caps) = self.regex.captures(matched)
                && caps.len() >= 2
            {
                if self.secret_group > 0 {
                    match caps.get(self.secret_group) {
                        Some(g) => secret = start + g.start()..start + g.end(),
                        None if caps.len() <= self.secret_group => continue,
                        None => secret = start..start,
                    }
                } else if let Some(g) = (1..caps.len())
                    .filter_map(|i| caps.get(i))
                    .find(|g| !g.is_empty())
                {
                    secret = start + g.start()..start + g.end();
                }
            }
            let secret_bytes = &text[secret.clone()];
            if self.entropy != 0.0
                && shannon_entropy(&String::from_utf8_lossy(secret_bytes)) <= self.entropy
            {
                continue;
            }
            let line = &text[lines.lines(text.len(), &(start..end))];
            if global
                .iter()
                .chain(&self.allowlists)
                .any(|a| a.allows(secret_bytes, matched, line))
            {
                continue;
            }
            let (line, column) = lines.place(if secret.is_empty() {
                start
            } else {
                secret.start
            });
            out.push(Finding {
                rule: index,
                secret,
                line,
                column,
            });
        }
    }
}

struct Rules {
    rules: Vec<Rule>,
    global: Vec<Allowlist>,
    /// Every rule's keywords, lowercased, once each.
    keywords: Option<AhoCorasick>,
    keyword_count: usize,
    unusable: Vec<(String, String)>,
}

impl Rules {
    /// Which keywords occur in `text` (case-insensitive), by index.
    fn keywords_in(&self, text: &[u8]) -> Vec<bool> {
        let mut hits = vec![false; self.keyword_count];
        if let Some(ac) = &self.keywords {
            for m in ac.find_overlapping_iter(text) {
                hits[m.pattern().as_usize()] = true;
            }
        }
        hits
    }
}

// The configuration file, as gitleaks reads it (fields tacho does not use are ignored).

#[derive(Deserialize, Default)]
struct ConfigFile {
    #[serde(default)]
    allowlist: Option<AllowlistFile>,
    #[serde(default)]
    allowlists: Vec<AllowlistFile>,
    #[serde(default)]
    rules: Vec<RuleFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuleFile {
    id: String,
    #[serde(default)]
    description: String,
    regex: Option<String>,
    #[serde(default)]
    entropy: f64,
    #[serde(default)]
    secret_group: usize,
    #[serde(default)]
    keywords: Vec<String>,
    path: Option<String>,
    #[serde(default)]
    allowlists: Vec<AllowlistFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AllowlistFile {
    #[serde(default)]
    condition: Option<String>,
    #[serde(default)]
    regex_target: Option<String>,
    #[serde(default)]
    regexes: Vec<String>,
    #[serde(default)]
    stopwords: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    commits: Vec<String>,
}

/// A Go (RE2) pattern in the `regex` crate's syntax. Go reads a `{` that does not
/// start a repetition (`{2}`, `{2,}`, `{2,5}`) as itself (`\${VAR}`, `{{ x }}`), the
/// `regex` crate as an error: it is escaped; so are `[`, `&` and `~` in a class.
pub fn from_re2(pattern: &str) -> String {
    let b = pattern.as_bytes();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut class = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\\' => {
                // An escape: copy it whole (the escaped character may be multi-byte).
                let len = pattern[i + 1..].chars().next().map_or(0, char::len_utf8);
                out.push_str(&pattern[i..i + 1 + len]);
                i += 1 + len;
                continue;
            }
            b'[' if !class => {
                class = true;
                out.push('[');
                // `[]` and `[^]` open a class whose first member is `]`.
                let mut j = i + 1;
                if b.get(j) == Some(&b'^') {
                    out.push('^');
                    j += 1;
                }
                if b.get(j) == Some(&b']') {
                    out.push(']');
                    j += 1;
                }
                i = j;
                continue;
            }
            b'[' if class && pattern[i..].starts_with("[:") => {
                // A POSIX class inside a class: `[[:alnum:]]`.
                if let Some(end) = pattern[i..].find(":]") {
                    out.push_str(&pattern[i..i + end + 2]);
                    i += end + 2;
                    continue;
                }
            }
            // In a class, Go reads `[`, `&` and `~` as themselves; the `regex` crate
            // reads `[` as a nested class and `&&`, `~~` as set operations.
            b'[' | b'&' | b'~' if class => {
                out.push('\\');
                out.push(char::from(c));
                i += 1;
                continue;
            }
            b']' if class => class = false,
            b'{' if !class && !repetition(&b[i..]) => {
                out.push_str("\\{");
                i += 1;
                continue;
            }
            _ => {}
        }
        let len = pattern[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&pattern[i..i + len]);
        i += len;
    }
    out
}

/// Whether `s` (starting at `{`) is a repetition as Go reads one: `{n}`, `{n,}`, `{n,m}`.
fn repetition(s: &[u8]) -> bool {
    let digits = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
    let n = digits(&s[1..]);
    if n == 0 {
        return false;
    }
    let rest = &s[1 + n..];
    match rest.first() {
        Some(b'}') => true,
        Some(b',') => {
            let m = digits(&rest[1..]);
            rest.get(1 + m) == Some(&b'}')
        }
        _ => false,
    }
}

/// Compiles a pattern as Go's RE2 reads it: ASCII `\w`, `\d`, `\s`, `\b`, on bytes.
fn compile(pattern: &str) -> Result<Regex, String> {
    RegexBuilder::new(&from_re2(pattern))
        .unicode(false)
        .size_limit(64 << 20)
        .dfa_size_limit(16 << 20)
        .build()
        .map_err(|e| e.to_string().lines().last().unwrap_or("").trim().to_owned())
}

/// An allowlist; a regex of it that does not compile is left out (the allowlist then
/// lets less through) and said in `unusable`, under `whose` name.
fn allowlist(
    a: &AllowlistFile,
    whose: &str,
    unusable: &mut Vec<(String, String)>,
) -> Result<Allowlist, String> {
    let mut usable = Vec::new();
    for (i, r) in a.regexes.iter().enumerate() {
        match compile(r) {
            Ok(_) => usable.push(r.as_str()),
            Err(e) => unusable.push((format!("{whose}: allowlist regex {}", i + 1), e)),
        }
    }
    let regexes = match usable.is_empty() {
        true => None,
        // As gitleaks joins them: one group of alternatives (a flag set in one
        // alternative goes on in the next ones, as in Go).
        false => Some(compile(&format!("(?:{})", usable.join("|")))?),
    };
    let stopwords = match a.stopwords.is_empty() {
        true => None,
        false => {
            let words: Vec<String> = a.stopwords.iter().map(|s| s.to_lowercase()).collect();
            Some(AhoCorasick::new(&words).map_err(|e| e.to_string())?)
        }
    };
    Ok(Allowlist {
        target: match a.regex_target.as_deref() {
            Some("match") => Target::Match,
            Some("line") => Target::Line,
            _ => Target::Secret,
        },
        and: a
            .condition
            .as_deref()
            .is_some_and(|c| c.eq_ignore_ascii_case("and")),
        has_paths_or_commits: !a.paths.is_empty() || !a.commits.is_empty(),
        regexes,
        stopwords,
    })
}

/// The kind in words: a few kinds named as people say them, the others from the
/// rule's description ("Uncovered a GitHub Personal Access Token, potentially …" →
/// "a GitHub Personal Access Token").
fn words(id: &str, description: &str) -> String {
    let known = match id {
        "github-pat"
        | "github-fine-grained-pat"
        | "github-oauth"
        | "github-app-token"
        | "github-refresh-token" => "a GitHub token",
        "gitlab-pat" | "gitlab-pat-routable" => "a GitLab token",
        "aws-access-token" => "an AWS access key",
        "private-key" | "tacho-private-key-header" => "a private key",
        "anthropic-api-key" | "anthropic-admin-api-key" => "an Anthropic API key",
        "openai-api-key" => "an OpenAI API key",
        "jwt" | "jwt-base64" => "a JSON Web Token",
        "slack-webhook-url" => "a Slack webhook URL",
        "gcp-api-key" => "a Google API key",
        "generic-api-key"
        | "tacho-password-quoted"
        | "tacho-password-unquoted"
        | "tacho-key-quoted" => "a secret assigned in the text",
        _ => "",
    };
    if !known.is_empty() {
        return known.to_owned();
    }
    let mut d = description.trim();
    if let Some((first, rest)) = d.split_once(' ')
        && (first.ends_with("ed") || first == "Found")
    {
        d = rest;
    }
    let d = d.split([',', '.']).next().unwrap_or(d).trim();
    let mut d = d;
    for lead in [
        "a pattern that resembles ",
        "a pattern that may indicate ",
        "a possible ",
        "a potential ",
        "potential ",
        "possible ",
        "an ",
        "a ",
    ] {
        if let Some(rest) = d.strip_prefix(lead) {
            d = rest;
        }
    }
    if d.is_empty() {
        return format!("a secret ({id})");
    }
    let vowel = d.chars().next().is_some_and(|c| "AEIOUaeiou".contains(c));
    format!("{} {d}", if vowel { "an" } else { "a" })
}

fn load() -> Rules {
    let mut keyword_ids: BTreeMap<String, usize> = BTreeMap::new();
    let mut rules = Vec::new();
    let mut global = Vec::new();
    let mut unusable = Vec::new();
    for (set, text) in [("gitleaks", GITLEAKS), ("tacho", TACHO)] {
        let config: ConfigFile = match toml::from_str(text) {
            Ok(c) => c,
            Err(e) => {
                unusable.push((format!("{set}.toml"), e.to_string()));
                ConfigFile::default()
            }
        };
        for a in config.allowlist.iter().chain(&config.allowlists) {
            match allowlist(a, &format!("{set}.toml global"), &mut unusable) {
                Ok(a) => global.push(a),
                Err(e) => unusable.push((format!("{set}.toml global allowlist"), e)),
            }
        }
        for r in config.rules {
            if r.path.is_some() {
                unusable.push((r.id, "applies only to some file paths".to_owned()));
                continue;
            }
            // A rule of tacho.toml without a regex, named as a rule before it, adds its
            // allowlists to that rule (as gitleaks' `[extend]` merges a rule's).
            if r.regex.is_none()
                && let Some(base) = rules.iter_mut().find(|b: &&mut Rule| b.id == r.id)
            {
                for a in &r.allowlists {
                    match allowlist(a, &r.id, &mut unusable) {
                        Ok(a) => base.allowlists.push(a),
                        Err(e) => unusable.push((format!("{}: {set}.toml allowlist", r.id), e)),
                    }
                }
                continue;
            }
            let Some(pattern) = &r.regex else {
                unusable.push((r.id, "has no regex (a path-only rule)".to_owned()));
                continue;
            };
            let regex = match compile(pattern) {
                Ok(re) => re,
                Err(e) => {
                    unusable.push((r.id, e));
                    continue;
                }
            };
            let allowlists: Result<Vec<Allowlist>, String> = r
                .allowlists
                .iter()
                .map(|a| allowlist(a, &r.id, &mut unusable))
                .collect();
            let allowlists = match allowlists {
                Ok(a) => a,
                Err(e) => {
                    unusable.push((r.id, format!("allowlist: {e}")));
                    continue;
                }
            };
            let keywords = r
                .keywords
                .iter()
                .map(|k| {
                    let n = keyword_ids.len();
                    *keyword_ids.entry(k.to_lowercase()).or_insert(n)
                })
                .collect();
            rules.push(Rule {
                words: words(&r.id, &r.description),
                generic: set == "tacho" || r.id.to_lowercase().contains("generic"),
                id: r.id,
                description: r.description,
                regex,
                entropy: r.entropy,
                secret_group: r.secret_group,
                keywords,
                allowlists,
            });
        }
    }
    let mut patterns = vec![String::new(); keyword_ids.len()];
    for (k, i) in &keyword_ids {
        patterns[*i] = k.clone();
    }
    let keywords = AhoCorasickBuilder::new()
        .ascii_case_insensitive(true)
        .match_kind(MatchKind::Standard)
        .build(&patterns)
        .ok();
    Rules {
        rules,
        global,
        keywords,
        keyword_count: patterns.len(),
        unusable,
    }
}

static RULES: LazyLock<Rules> = LazyLock::new(load);
