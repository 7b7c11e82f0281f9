//! Snapshots, `gc`, the workspace watcher and the source fingerprint in text.

use tacho_git::fingerprint::Fingerprint;

use super::{bytes, thousands};
use crate::snapshots::{
    GcOutcome, SnapshotOutcome, WatchStarted, WatchState, WatchStopped, Watcher, WatcherStatus,
};

/// `tacho snapshot`: the snapshot, what it could not protect, and where it was recorded.
pub fn snapshot(o: &SnapshotOutcome) -> String {
    let snap = &o.snapshot;
    let mut t = format!(
        "snapshot {} of {}: {} files{}, {} read, {} new objects, {:.1} ms\n",
        snap.id,
        o.workspace.display(),
        thousands(snap.files),
        if snap.full_scan {
            format!(" ({})", bytes(snap.bytes))
        } else {
            " (targeted)".into()
        },
        thousands(snap.files_read),
        thousands(snap.objects_written),
        o.elapsed_ms()
    );
    for x in &snap.excluded {
        t.push_str(&format!("  not protected: {} ({})\n", x.path, x.reason));
    }
    if let Some((s, seq)) = &o.recorded {
        t.push_str(&format!("recorded in session {s} as event #{seq}\n"));
    }
    t
}

/// What `gc` warns about (snapshots missing objects, packs it cannot read): one line
/// each, for stderr.
pub fn gc_warnings(g: &GcOutcome) -> Vec<String> {
    let r = &g.report;
    let mut w = Vec::new();
    if !r.incomplete_snapshots.is_empty() {
        w.push(format!(
            "warning: {} snapshot(s) that sessions reference are missing objects (they cannot be fully restored): {}",
            r.incomplete_snapshots.len(),
            r.incomplete_snapshots.join(", ")
        ));
    }
    for pack in &r.unreadable_packs {
        w.push(format!(
            "warning: a pack of the snapshot store cannot be read and was left as it is (what it holds is not restorable): {pack}"
        ));
    }
    w
}

/// `tacho gc`: what was (or would be) dropped, and the space before and after.
pub fn gc(g: &GcOutcome) -> String {
    let r = &g.report;
    let verb = if g.dry_run { "would drop" } else { "dropped" };
    let mut t = format!(
        "{verb} {} snapshot(s) no session references and {} object(s) only they held\n",
        thousands(r.dropped_snapshots.len() as u64),
        thousands(r.pruned_objects)
    );
    if !g.dry_run {
        t.push_str(&format!(
            "packed {} object(s); snapshot store {} → {} on disk ({} snapshots kept)\n",
            thousands(r.packed_objects),
            bytes(r.before.disk_bytes()),
            bytes(r.after.disk_bytes()),
            thousands(r.after.snapshots)
        ));
    }
    t
}

/// `tacho watch start`.
pub fn watch_started(w: &WatchStarted) -> String {
    if w.started {
        format!(
            "watching {} ({} directories, pid {}); full snapshots of it now look only at what changed\n",
            w.workspace, w.dirs, w.pid
        )
    } else {
        format!(
            "a watcher of {} is already running (pid {})\n",
            w.workspace, w.pid
        )
    }
}

/// `tacho watch stop`.
pub fn watch_stopped(w: &WatchStopped) -> String {
    if w.stopped {
        format!("stopped the watcher of {}\n", w.workspace)
    } else {
        format!("no watcher of {} was running\n", w.workspace)
    }
}

/// `tacho watch list`.
pub fn watchers(all: &[Watcher]) -> String {
    if all.is_empty() {
        return "no watcher is running\n".into();
    }
    let mut t = String::new();
    for Watcher { watcher } in all {
        let s = &watcher.status;
        t.push_str(&format!(
            "{}  pid {}, {} directories, {} changed path(s) held\n",
            s.workspace, s.pid, s.dirs, s.held
        ));
    }
    t
}

/// `tacho watch status`: nothing when no watcher runs (the command's error says so).
pub fn watch_state(w: &WatchState) -> String {
    match &w.watcher {
        Some(WatcherStatus { status: s, .. }) => format!(
            "watching {}: pid {}, {} directories, {} changed path(s) held, {} answer(s) given\n",
            w.workspace, s.pid, s.dirs, s.held, s.answered
        ),
        None => String::new(),
    }
}

/// `tacho fingerprint`: every entry and the digest; nothing when there is no fresh
/// evidence (the command's error says why).
pub fn fingerprint(fp: &Fingerprint) -> String {
    let Fingerprint::Fresh {
        digest,
        entries,
        bytes: total,
    } = fp
    else {
        return String::new();
    };
    let mut t = String::new();
    for e in entries {
        t.push_str(&format!(
            "{:<8} {:>10} {} {}  {}\n",
            e.kind,
            e.size,
            if e.executable { "x" } else { "-" },
            e.content.get(..16).unwrap_or("-"),
            e.path
        ));
    }
    t.push_str(&format!(
        "fingerprint {digest} ({} entries, {})\n",
        thousands(entries.len() as u64),
        bytes(*total)
    ));
    t
}
