//! `tacho hooks install | uninstall | status` in text.

use crate::install::{HooksOp, HooksStatus, Installed, Scope};

fn scope_name(s: Scope) -> &'static str {
    match s {
        Scope::User => "user",
        Scope::Project => "project",
        Scope::Local => "local",
    }
}

/// What an install or uninstall did: the file as it would be (dry run), or one line
/// saying whether it changed; then what to know about it.
pub fn installed(r: &Installed) -> String {
    let install = r.kind == HooksOp::HooksInstall;
    let mut o = String::new();
    if r.dry_run {
        o.push_str(&format!("{} would be:\n", r.file.display()));
        o.push_str(r.text.trim_end());
        o.push('\n');
    } else if r.changed && install {
        o.push_str(&format!(
            "installed tacho's {} hooks ({}) in {}{}\n",
            r.agent,
            r.events.join(", "),
            r.file.display(),
            r.backup
                .as_ref()
                .map(|b| format!("; the previous file is kept as {}", b.display()))
                .unwrap_or_default()
        ));
    } else if r.changed {
        o.push_str(&format!(
            "removed tacho's {} hooks ({}) from {}\n",
            r.agent,
            r.events.join(", "),
            r.file.display()
        ));
    } else if install {
        o.push_str(&format!(
            "already installed in {}: nothing changed\n",
            r.file.display()
        ));
    } else {
        o.push_str(&format!(
            "no tacho hooks in {}: nothing changed\n",
            r.file.display()
        ));
    }
    if let Some(t) = &r.written_through {
        o.push_str(&format!(
            "note: {} is a symbolic link: tacho writes its target, {}, and leaves the link as it is\n",
            r.file.display(),
            t.display()
        ));
    }
    if let Some(n) = &r.note {
        o.push_str(&format!("note: {n}\n"));
    }
    o
}

/// `tacho hooks status`: one line per settings file.
pub fn status(s: &HooksStatus) -> String {
    let mut o = String::new();
    for r in &s.files {
        let state = if let Some(p) = &r.problem {
            format!("unreadable: {p}")
        } else if r.events.is_empty() {
            if r.exists {
                "no tacho hooks".into()
            } else {
                "no file".into()
            }
        } else if !r.programs_exist {
            format!(
                "installed, but {} does not exist: run `tacho hooks install {} --scope {}` again",
                r.commands.join(", "),
                r.agent,
                scope_name(r.scope)
            )
        } else if !r.cannot_fire.is_empty() {
            format!("installed, but cannot fire: {}", r.cannot_fire.join("; "))
        } else if !r.points_here {
            format!(
                "installed, running {} (not this tacho, {})",
                r.commands.join(", "),
                s.tacho
            )
        } else {
            format!("installed ({} events)", r.events.len())
        };
        o.push_str(&format!(
            "{:<12} {:<8} {}  {}\n",
            r.agent,
            scope_name(r.scope),
            r.file.display(),
            state
        ));
    }
    o
}

/// `tacho import`: what was added, what was skipped and why, what failed.
pub fn imported(r: &crate::import::ImportReport) -> String {
    let mut o = format!(
        "imported {} transcript(s): {} event(s) added ({} session(s) new, {} extended, {} unchanged); {} already recorded\n",
        r.files,
        r.events_added,
        r.sessions_created,
        r.sessions_extended,
        r.sessions_unchanged,
        r.events_already_recorded
    );
    if r.events_after_end > 0 {
        o.push_str(&format!(
            "{} event(s) not added: their session had ended\n",
            r.events_after_end
        ));
    }
    if r.sessions_ended_inferred > 0 {
        o.push_str(&format!(
            "{} session(s) given an inferred end: their transcript had not grown for the stale time\n",
            r.sessions_ended_inferred
        ));
    }
    if r.sessions_continued > 0 {
        o.push_str(&format!(
            "{} session(s) continued as a new session: their transcript grew after an inferred end\n",
            r.sessions_continued
        ));
    }
    if r.bad_lines > 0 || r.partial_lines > 0 {
        o.push_str(&format!(
            "{} damaged line(s) skipped; {} file(s) end in a line still being written (read next time)\n",
            r.bad_lines, r.partial_lines
        ));
    }
    for d in &r.damage {
        o.push_str(&format!(
            "  {}:{} (byte {}): {}\n",
            d.file.display(),
            d.line,
            d.offset,
            d.reason
        ));
    }
    let unknown: Vec<String> = r
        .unknown_entries
        .iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect();
    if !unknown.is_empty() {
        o.push_str(&format!(
            "entry types this tacho does not know, skipped: {}\n",
            unknown.join(", ")
        ));
    }
    for f in &r.failed {
        o.push_str(&format!("failed: {}: {}\n", f.file.display(), f.error));
    }
    o
}
