//! `tacho ci verify`'s report: text, Markdown for a pull-request comment, JUnit XML
//! for CI test reports. Commit summaries and session titles come from the agent:
//! they are escaped, never interpreted.

use std::fmt::Write;

use crate::ci::{CiCommit, CiReport, CiSession};

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

/// Text an agent wrote, safe inside a Markdown table cell: one line, no markup, no HTML.
fn md(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars().take(200) {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#' | '!' | '~' | '&' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            // No mention in a pull-request comment notifies anyone the agent named:
            // a zero-width space after `@` keeps it from linking.
            '@' => out.push_str("@\u{200B}"),
            c => out.push(c),
        }
    }
    out
}

fn session_goals(s: &CiSession) -> String {
    if s.goals.is_empty() {
        return "—".into();
    }
    s.goals
        .iter()
        .map(|g| {
            format!(
                "{} {}{}",
                if g.ok { "✅" } else { "❌" },
                md(&g.title),
                match g.revisions.len() {
                    0 => String::new(),
                    n => format!(" (contract revised {n}×)"),
                }
            )
        })
        .collect::<Vec<_>>()
        .join("<br>")
}

fn commit_sessions(c: &CiCommit) -> String {
    let seen = c
        .sessions
        .iter()
        .map(|s| format!("`{}`", md(s)))
        .collect::<Vec<_>>()
        .join(", ");
    let why = c
        .not_linked_by
        .iter()
        .map(|w| format!("<br>⚠️ {}", md(w)))
        .collect::<String>();
    match (c.sessions.is_empty(), c.linked) {
        (true, _) => "**unlinked**".into(),
        (false, true) => format!("{seen}{why}"),
        (false, false) => format!("**unlinked** (seen by {seen}){why}"),
    }
}

/// The Markdown summary for a pull-request comment.
pub fn markdown(r: &CiReport) -> String {
    let mut t = String::new();
    let verdict = if r.passed() {
        "✅ passed"
    } else {
        "❌ failed"
    };
    let _ = writeln!(
        t,
        "## tacho ci verify: {verdict}\n\nRange `{}..{}`: {} commit(s), {} session(s), {} unlinked commit(s).\n",
        short(&r.baseline),
        short(&r.head),
        r.commits.len(),
        r.sessions.len(),
        r.unlinked().count()
    );
    if !r.sessions.is_empty() {
        let _ = writeln!(t, "### Sessions\n");
        let _ = writeln!(
            t,
            "| session | agent | title | log | signature | risk | goals | commits |\n|---|---|---|---|---|---|---|---|"
        );
        for s in &r.sessions {
            let _ = writeln!(
                t,
                "| `{}` | {} | {} | {} | {} | {} | {} | {} |",
                md(&s.session),
                match (s.agent.as_deref(), s.agent_reported) {
                    (a, true) =>
                        format!("{} (agent-reported: `tacho record`)", md(a.unwrap_or("—"))),
                    (a, false) => md(a.unwrap_or("—")),
                },
                md(s.title.as_deref().unwrap_or("—")),
                if s.verified {
                    "verified"
                } else {
                    "**does not verify**"
                },
                md(&s.signature.describe()),
                match (&s.risk_level, s.risk_score) {
                    (Some(l), Some(n)) => format!("{l} ({n})"),
                    _ => "—".into(),
                },
                session_goals(s),
                s.commits.len()
            );
        }
        let _ = writeln!(t);
    }
    let goals: Vec<&crate::CiGoal> = r.sessions.iter().flat_map(|s| &s.goals).collect();
    if !goals.is_empty() {
        let _ = writeln!(t, "### Goals\n");
        let _ = writeln!(
            t,
            "| goal | verdict | change paths | proofs | changed since the freeze outside the change |\n|---|---|---|---|---|"
        );
        for g in goals {
            let list = |v: &[String]| match v.is_empty() {
                true => "—".to_string(),
                false => v
                    .iter()
                    .map(|x| format!("`{}`", md(x)))
                    .collect::<Vec<_>>()
                    .join("<br>"),
            };
            let revised = g
                .revisions
                .iter()
                .map(|r| format!("<br>⚠️ {}", md(r)))
                .collect::<String>();
            let _ = writeln!(
                t,
                "| {} | {} {}{} | {} | {} | {} |",
                md(&g.title),
                if g.ok { "✅" } else { "❌" },
                md(&g.reason),
                revised,
                if g.change_paths.is_empty() {
                    "none named (the whole baseline)".to_string()
                } else {
                    list(&g.change_paths)
                },
                list(&g.proofs),
                list(&g.changed_since_freeze)
            );
        }
        let _ = writeln!(t);
        let reruns: Vec<(&crate::CiGoal, &crate::CiRerun)> = r
            .sessions
            .iter()
            .flat_map(|s| &s.goals)
            .flat_map(|g| g.rerun.iter().map(move |x| (g, x)))
            .collect();
        if !reruns.is_empty() {
            let _ = writeln!(t, "### Checks run again by CI\n");
            let _ = writeln!(
                t,
                "| goal | check | CI | the receipt | agrees |\n|---|---|---|---|---|"
            );
            for (g, x) in reruns {
                let _ = writeln!(
                    t,
                    "| {} | `{}` | {} | {} | {} |",
                    md(&g.title),
                    md(&x.check),
                    md(&x.ci),
                    md(&x.receipt),
                    if x.agrees { "✅" } else { "❌ contradicted" }
                );
            }
            let _ = writeln!(t);
        }
    }
    if !r.commits.is_empty() {
        let _ = writeln!(t, "### Commits\n");
        let _ = writeln!(t, "| commit | summary | sessions |\n|---|---|---|");
        for c in &r.commits {
            let _ = writeln!(
                t,
                "| `{}` | {} | {} |",
                short(&c.commit),
                md(&c.summary),
                commit_sessions(c)
            );
        }
        let _ = writeln!(t);
    }
    if !r.failures.is_empty() {
        let _ = writeln!(t, "### Checks failed\n");
        for f in &r.failures {
            let _ = writeln!(t, "- {}", md(&f.reason));
        }
        let _ = writeln!(t);
    }
    let _ = writeln!(
        t,
        "Policy: sessions {}, signatures {}.",
        if r.require_session {
            "required"
        } else {
            "not required"
        },
        if r.require_signature {
            "required"
        } else {
            "not required"
        }
    );
    t
}

/// Plain text for a terminal.
pub fn text(r: &CiReport) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{}..{}: {} commit(s), {} session(s), {} unlinked",
        short(&r.baseline),
        short(&r.head),
        r.commits.len(),
        r.sessions.len(),
        r.unlinked().count()
    );
    for c in &r.commits {
        let sessions = match (c.sessions.is_empty(), c.linked) {
            (true, _) => "unlinked".to_string(),
            (false, true) => c.sessions.join(", "),
            (false, false) => format!("unlinked (seen by {})", c.sessions.join(", ")),
        };
        let summary: String = c
            .summary
            .chars()
            .filter(|c| !c.is_control())
            .take(72)
            .collect();
        let _ = writeln!(t, "  {} {summary}: {sessions}", short(&c.commit));
        for w in &c.not_linked_by {
            let _ = writeln!(t, "    {w}");
        }
    }
    for s in &r.sessions {
        let _ = writeln!(
            t,
            "  session {}{}: {}, {}, risk {}",
            s.session,
            if s.agent_reported {
                " (agent-reported: tacho record)"
            } else {
                ""
            },
            if s.verified {
                "verified"
            } else {
                "DOES NOT VERIFY"
            },
            s.signature.describe(),
            s.risk_level.as_deref().unwrap_or("-")
        );
        for g in &s.goals {
            let _ = writeln!(t, "    goal {}: {}", g.goal, g.reason);
            for r in &g.revisions {
                let _ = writeln!(t, "      {r}");
            }
            if !g.proofs.is_empty() {
                let _ = writeln!(t, "      proofs: {}", g.proofs.join(", "));
            }
            if !g.changed_since_freeze.is_empty() {
                let _ = writeln!(
                    t,
                    "      changed since the freeze outside the change: {}",
                    g.changed_since_freeze.join(", ")
                );
            }
            for x in &g.rerun {
                let _ = writeln!(
                    t,
                    "      CI ran {}: {}; the receipt: {}{}",
                    x.check,
                    x.ci,
                    x.receipt,
                    if x.agrees { "" } else { " — CONTRADICTED" }
                );
            }
        }
    }
    for f in &r.failures {
        let _ = writeln!(t, "FAIL: {}", f.reason);
    }
    let _ = writeln!(t, "{}", if r.passed() { "passed" } else { "failed" });
    t
}

/// Text for XML 1.0 character data and attributes: escaped, and the characters XML
/// cannot hold replaced.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// One test case: its class, name and failures.
struct Case {
    class: &'static str,
    name: String,
    failures: Vec<String>,
}

/// JUnit XML: a test case per commit and per session, failed with the rules it breaks.
pub fn junit(r: &CiReport) -> String {
    let mut cases = Vec::new();
    // Failures about no commit or session of the report: the range's own (no such
    // revision, an empty range) and damaged sessions that linked nothing readable.
    let listed = |f: &crate::ci::CiFailure| {
        f.commit.is_some()
            || f.session
                .as_deref()
                .is_some_and(|s| r.sessions.iter().any(|x| x.session == s))
    };
    let range: Vec<String> = r
        .failures
        .iter()
        .filter(|f| !listed(f))
        .map(|f| f.reason.clone())
        .collect();
    if r.commits.is_empty() || !range.is_empty() {
        cases.push(Case {
            class: "tacho.range",
            name: format!("{}..{}", short(&r.baseline), short(&r.head)),
            failures: range,
        });
    }
    for c in &r.commits {
        let failures = r
            .failures
            .iter()
            .filter(|f| f.commit.as_deref() == Some(c.commit.as_str()))
            .map(|f| f.reason.clone())
            .collect();
        cases.push(Case {
            class: "tacho.commits",
            name: format!("{} {}", short(&c.commit), c.summary),
            failures,
        });
    }
    for s in &r.sessions {
        let failures = r
            .failures
            .iter()
            .filter(|f| f.session.as_deref() == Some(s.session.as_str()))
            .map(|f| f.reason.clone())
            .collect();
        cases.push(Case {
            class: "tacho.sessions",
            name: s.session.clone(),
            failures,
        });
        // Each check CI ran again: a test case of its own.
        for g in &s.goals {
            for x in &g.rerun {
                cases.push(Case {
                    class: "tacho.checks",
                    name: format!("{} {}", g.goal, x.check),
                    failures: match x.agrees {
                        true => Vec::new(),
                        false => vec![format!("CI: {}; the receipt: {}", x.ci, x.receipt)],
                    },
                });
            }
        }
    }
    let failed = cases.iter().filter(|c| !c.failures.is_empty()).count();
    let mut t = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        t,
        "<testsuites name=\"tacho ci verify\" tests=\"{}\" failures=\"{failed}\">",
        cases.len()
    );
    let _ = writeln!(
        t,
        "  <testsuite name=\"{}..{}\" tests=\"{}\" failures=\"{failed}\" errors=\"0\" skipped=\"0\">",
        xml(&r.baseline),
        xml(&r.head),
        cases.len()
    );
    for c in &cases {
        let _ = write!(
            t,
            "    <testcase classname=\"{}\" name=\"{}\"",
            c.class,
            xml(&c.name)
        );
        if c.failures.is_empty() {
            let _ = writeln!(t, "/>");
            continue;
        }
        let _ = writeln!(t, ">");
        for f in &c.failures {
            let _ = writeln!(
                t,
                "      <failure message=\"{}\" type=\"tacho\">{}</failure>",
                xml(f),
                xml(f)
            );
        }
        let _ = writeln!(t, "    </testcase>");
    }
    let _ = writeln!(t, "  </testsuite>\n</testsuites>");
    t
}

/// The official schema of what [`sarif`] writes (SARIF 2.1.0, errata 01).
pub const SARIF_SCHEMA: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// The findings as SARIF 2.1.0 (GitHub code scanning, GitLab, any SARIF viewer): one
/// run of tool `tacho`, a rule per kind of finding, a result per finding at its file
/// and lines (repository-relative, under `%SRCROOT%`). Text from the agent goes into
/// plain-text messages only.
pub fn sarif(f: &crate::findings::CiFindings) -> String {
    use serde_sarif::sarif as s;
    let text = |t: &str| s::MultiformatMessageString::builder().text(t).build();
    let rules: Vec<s::ReportingDescriptor> = f
        .rules
        .iter()
        .map(|r| {
            s::ReportingDescriptor::builder()
                .id(&r.id)
                .name(r.id.rsplit('/').next().unwrap_or(&r.id))
                .short_description(text(&r.title))
                .full_description(text(&r.title))
                .help(text(&r.help))
                .build()
        })
        .collect();
    let results: Vec<s::Result> = f
        .findings
        .iter()
        .map(|x| {
            let mut properties = std::collections::BTreeMap::new();
            if let Some(v) = &x.session {
                properties.insert("session".to_owned(), serde_json::json!(v));
            }
            if let Some(v) = &x.commit {
                properties.insert("commit".to_owned(), serde_json::json!(v));
            }
            if x.placed {
                // About the range, a session or a commit: placed at a file so that
                // code scanning takes it.
                properties.insert("aboutTheRange".to_owned(), true.into());
            }
            let level = match x.level {
                crate::findings::FindingLevel::Error => s::ResultLevel::Error,
                crate::findings::FindingLevel::Warning => s::ResultLevel::Warning,
                crate::findings::FindingLevel::Note => s::ResultLevel::Note,
            };
            let locations: Vec<s::Location> = x
                .path
                .iter()
                .map(|p| {
                    let (start, end) = x.lines.unwrap_or((1, 1));
                    let physical = s::PhysicalLocation::builder()
                        .artifact_location(
                            s::ArtifactLocation::builder()
                                .uri(super::uri_path(p))
                                .uri_base_id("%SRCROOT%")
                                .build(),
                        )
                        .region(
                            s::Region::builder()
                                .start_line(i64::from(start))
                                .end_line(i64::from(end))
                                .build(),
                        )
                        .build();
                    s::Location::builder().physical_location(physical).build()
                })
                .collect();
            let fingerprint = blake3::hash(
                format!(
                    "{}\n{}\n{}\n{}\n{}",
                    x.rule,
                    x.path.as_deref().unwrap_or(""),
                    x.session.as_deref().unwrap_or(""),
                    x.commit.as_deref().unwrap_or(""),
                    x.message
                )
                .as_bytes(),
            );
            s::Result::builder()
                .rule_id(&x.rule)
                .rule_index(
                    f.rules
                        .iter()
                        .position(|r| r.id == x.rule)
                        .map_or(-1, |i| i as i64),
                )
                .level(level)
                .message(s::Message::builder().text(&x.message).build())
                .locations(locations)
                .partial_fingerprints(std::collections::BTreeMap::from([(
                    "tacho/v1".to_owned(),
                    fingerprint.to_hex().to_string(),
                )]))
                .properties(
                    s::PropertyBag::builder()
                        .additional_properties(properties)
                        .build(),
                )
                .build()
        })
        .collect();
    let driver = s::ToolComponent::builder()
        .name("tacho")
        .version(env!("CARGO_PKG_VERSION"))
        .rules(rules)
        .build();
    let run = s::Run::builder()
        .tool(s::Tool::builder().driver(driver).build())
        .results(results)
        .build();
    let log = s::Sarif::builder()
        .schema(SARIF_SCHEMA)
        .version(serde_json::json!("2.1.0"))
        .runs(vec![run])
        .build();
    serde_json::to_string_pretty(&log).unwrap_or_default()
}
