//! Renderers: pure functions from results to text. No I/O, no clock.

pub mod attribution;
pub mod ci;
pub mod compare;
pub mod event;
pub mod goals;
pub mod graph;
pub mod logs;
pub mod prune;
pub mod remote;
pub mod report;
pub mod risk;
pub mod secrets;
pub mod session;
pub mod trace;
pub mod verifiers;

// The text of the log tools', replay's, rollback's, the snapshot store's and hooks'
// views.
pub mod hooks;
pub mod logtools;
pub mod replay;
pub mod rollback;
pub mod snapshots;

/// `8s`, `9m 54s`, `1h 3m`; below a second, `350ms`.
pub fn duration(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{}s", ms / 1000),
        60_000..=3_599_999 => format!("{}m {}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h {}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// Durations that keep a decimal between one and ten seconds: `6.4s`.
pub fn tool_duration(ms: u64) -> String {
    match ms {
        1_000..=9_999 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => duration(ms),
    }
}

/// The first 12 hex digits of a snapshot id, as Git abbreviates.
pub fn short_id(id: &str) -> &str {
    prefix(id, 12)
}

/// The first `n` characters of an id or digest (all of it when shorter).
pub fn prefix(s: &str, n: usize) -> &str {
    s.char_indices()
        .nth(n)
        .map_or(s, |(i, _)| s.get(..i).unwrap_or(s))
}

/// Time since `start` (both ns since the epoch) as `+  m:ss.mmm`, for timelines.
pub fn since(start: i64, t: i64) -> String {
    let ms = (t.saturating_sub(start) / 1_000_000).max(0);
    format!(
        "+{:>3}:{:02}.{:03}",
        ms / 60_000,
        ms % 60_000 / 1000,
        ms % 1000
    )
}

pub use tacho_projections::route_text as route;

/// `1234567` → `1,234,567`.
pub use tacho_projections::thousands;

/// Bytes with a binary unit.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A repository-relative path as a relative URI reference: each segment
/// percent-encoded but for RFC 3986's unreserved characters.
pub(crate) fn uri_path(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    for (i, seg) in p.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        for b in seg.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(167650), "167,650");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
    }
}
