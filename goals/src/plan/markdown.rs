//! The plan as Markdown: its headings and sections.

use super::*;

pub(super) fn heading(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// `## Heading` sections by lower-case name: (line of the heading, text after it).
pub(super) fn sections(markdown: &str) -> BTreeMap<String, (usize, String)> {
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
