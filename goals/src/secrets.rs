//! The one secret detector: credentials a plan must not freeze, and what a push scans
//! a session's events for before they leave the machine (SPEC §17.1).
//!
//! Well-known token shapes (each a fixed prefix with enough token characters after
//! it), private key blocks, JSON Web Tokens, a password in a URL and a secret assigned
//! in the text (`password=…`, not a `$VARIABLE` or a `<placeholder>`). Shapes, not
//! entropy: a false positive blocks a push, so only what is very likely a credential
//! counts.

/// What kind of secret a piece of text looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SecretKind {
    AwsAccessKey,
    GithubToken,
    GitlabToken,
    SlackToken,
    SlackWebhook,
    StripeKey,
    AnthropicKey,
    OpenaiKey,
    PrivateKey,
    Jwt,
    UrlPassword,
    AssignedSecret,
}

impl SecretKind {
    /// The kind's stable name (JSON, `--allow-secret` records).
    pub fn name(self) -> &'static str {
        match self {
            SecretKind::AwsAccessKey => "aws_access_key",
            SecretKind::GithubToken => "github_token",
            SecretKind::GitlabToken => "gitlab_token",
            SecretKind::SlackToken => "slack_token",
            SecretKind::SlackWebhook => "slack_webhook",
            SecretKind::StripeKey => "stripe_key",
            SecretKind::AnthropicKey => "anthropic_key",
            SecretKind::OpenaiKey => "openai_key",
            SecretKind::PrivateKey => "private_key",
            SecretKind::Jwt => "jwt",
            SecretKind::UrlPassword => "url_password",
            SecretKind::AssignedSecret => "assigned_secret",
        }
    }

    /// The kind in words, with its article.
    pub fn words(self) -> &'static str {
        match self {
            SecretKind::AwsAccessKey => "an AWS access key",
            SecretKind::GithubToken => "a GitHub token",
            SecretKind::GitlabToken => "a GitLab token",
            SecretKind::SlackToken => "a Slack token",
            SecretKind::SlackWebhook => "a Slack webhook URL",
            SecretKind::StripeKey => "a Stripe live key",
            SecretKind::AnthropicKey => "an Anthropic API key",
            SecretKind::OpenaiKey => "an OpenAI API key",
            SecretKind::PrivateKey => "a private key",
            SecretKind::Jwt => "a JSON Web Token",
            SecretKind::UrlPassword => "a password in a URL",
            SecretKind::AssignedSecret => "a secret assigned in the text",
        }
    }
}

impl std::fmt::Display for SecretKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One secret found in a text: its kind and where (1-based line, byte column of the
/// line), and a hint that names it without giving it away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub kind: SecretKind,
    pub line: usize,
    pub column: usize,
    /// The first four characters of the match, then how long it is: never the secret.
    pub hint: String,
}

/// Prefixes of token shapes: prefix, kind, token characters needed after it.
const PREFIXES: &[(&str, SecretKind, usize)] = &[
    ("ghp_", SecretKind::GithubToken, 30),
    ("gho_", SecretKind::GithubToken, 30),
    ("ghu_", SecretKind::GithubToken, 30),
    ("ghs_", SecretKind::GithubToken, 30),
    ("ghr_", SecretKind::GithubToken, 30),
    ("github_pat_", SecretKind::GithubToken, 22),
    ("glpat-", SecretKind::GitlabToken, 20),
    ("xoxb-", SecretKind::SlackToken, 10),
    ("xoxp-", SecretKind::SlackToken, 10),
    ("xoxa-", SecretKind::SlackToken, 10),
    ("xoxr-", SecretKind::SlackToken, 10),
    ("xoxs-", SecretKind::SlackToken, 10),
    ("sk_live_", SecretKind::StripeKey, 16),
    ("rk_live_", SecretKind::StripeKey, 16),
    ("sk-ant-", SecretKind::AnthropicKey, 16),
    ("sk-proj-", SecretKind::OpenaiKey, 16),
];

fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The length of the run of token characters at the start of `s`.
fn token_run(s: &str) -> usize {
    s.chars().take_while(|c| token_char(*c)).count()
}

/// Whether `line[..i]` ends where a token may start (not inside a word).
fn starts_word(line: &str, i: usize) -> bool {
    line[..i]
        .chars()
        .next_back()
        .is_none_or(|c| !c.is_ascii_alphanumeric())
}

fn hint(s: &str) -> String {
    let head: String = s.chars().take(4).collect();
    format!("{head}… ({} characters)", s.chars().count())
}

/// Every occurrence of `pat` in `line`, by byte offset.
fn occurrences<'a>(line: &'a str, pat: &'a str) -> impl Iterator<Item = usize> + 'a {
    line.match_indices(pat).map(|(i, _)| i)
}

/// The first secret of one line: `(kind, byte offset, matched text)`.
fn in_line(line: &str) -> Option<(SecretKind, usize, &str)> {
    for (p, kind, need) in PREFIXES {
        for i in occurrences(line, p) {
            let run = token_run(&line[i + p.len()..]);
            if run >= *need && starts_word(line, i) {
                return Some((*kind, i, &line[i..i + p.len() + run]));
            }
        }
    }
    for p in ["AKIA", "ASIA"] {
        for i in occurrences(line, p) {
            let rest = &line[i + p.len()..];
            let run = rest
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
                .count();
            if run == 16 && starts_word(line, i) {
                return Some((SecretKind::AwsAccessKey, i, &line[i..i + 20]));
            }
        }
    }
    if let Some(i) = line.find("-----BEGIN ")
        && line[i..].contains("PRIVATE KEY")
    {
        return Some((SecretKind::PrivateKey, i, &line[i..]));
    }
    if let Some(i) = line.find("hooks.slack.com/services/T") {
        let run = token_run(&line[i + 26..].replace('/', "_"));
        if run >= 20 {
            return Some((SecretKind::SlackWebhook, i, &line[i..]));
        }
    }
    for i in occurrences(line, "eyJ") {
        if !starts_word(line, i) {
            continue;
        }
        let parts: Vec<usize> = line[i..]
            .split('.')
            .take(3)
            .map(|p| p.chars().take_while(|c| token_char(*c)).count())
            .collect();
        let whole = line[i..].split('.').take(3).collect::<Vec<_>>();
        if parts.len() == 3
            && parts.iter().all(|n| *n >= 10)
            && whole[0].len() == parts[0]
            && whole[1].len() == parts[1]
            && whole[1].starts_with("eyJ")
        {
            let len = parts[0] + parts[1] + parts[2] + 2;
            return Some((SecretKind::Jwt, i, &line[i..i + len]));
        }
    }
    // user:password@ in a URL
    for i in occurrences(line, "://") {
        let rest = &line[i + 3..];
        let auth = rest.split(['/', ' ', '"', '\'']).next().unwrap_or("");
        if let Some((userinfo, _)) = auth.rsplit_once('@')
            && let Some((_, password)) = userinfo.split_once(':')
            && !password.is_empty()
            && !password.starts_with('$')
            && !password.starts_with('<')
        {
            return Some((SecretKind::UrlPassword, i + 3, userinfo));
        }
    }
    let lower = line.to_ascii_lowercase();
    for key in [
        "password=",
        "passwd=",
        "secret=",
        "api_key=",
        "apikey=",
        "token=",
    ] {
        for i in occurrences(&lower, key) {
            let at = i + key.len();
            let v = line[at..].trim_start_matches(['"', '\'']);
            let run = v
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '"' && *c != '\'')
                .count();
            if run >= 8 && !v.starts_with('$') && !v.starts_with('<') {
                let start = line.len() - v.len();
                let end = start + v.chars().take(run).map(char::len_utf8).sum::<usize>();
                return Some((SecretKind::AssignedSecret, i, &line[start..end]));
            }
        }
    }
    None
}

/// What in a line looks like a credential, in words (the plan rule's answer).
pub fn credential(line: &str) -> Option<&'static str> {
    in_line(line).map(|(kind, _, _)| kind.words())
}

/// Every line of `text` holding a secret: the first secret of each such line.
pub fn scan(text: &str) -> Vec<Found> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if let Some((kind, column, matched)) = in_line(line) {
            found.push(Found {
                kind,
                line: n + 1,
                column: column + 1,
                hint: hint(matched),
            });
        }
    }
    found
}
