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
