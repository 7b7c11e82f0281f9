//! Credentials that must never be frozen into a plan.

/// What in a line looks like a credential.
pub(super) fn credential(line: &str) -> Option<&'static str> {
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
