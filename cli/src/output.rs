//! Output helpers: a buffered stdout, JSON Lines, and human-readable numbers.

use std::io::{BufWriter, Stdout, Write};

use crate::error::CliError;

/// Buffered stdout. Errors (including a closed pipe) surface as [`CliError`].
pub struct Out(BufWriter<Stdout>);

impl Out {
    pub fn new() -> Self {
        Out(BufWriter::new(std::io::stdout()))
    }

    pub fn line(&mut self, s: impl std::fmt::Display) -> Result<(), CliError> {
        writeln!(self.0, "{s}")?;
        Ok(())
    }

    /// One JSON Lines record.
    pub fn json(&mut self, v: &serde_json::Value) -> Result<(), CliError> {
        serde_json::to_writer(&mut self.0, v).map_err(|e| CliError::Io(e.to_string()))?;
        writeln!(self.0)?;
        Ok(())
    }

    pub fn flush(&mut self) -> Result<(), CliError> {
        self.0.flush()?;
        Ok(())
    }

    pub fn finish(mut self) -> Result<(), CliError> {
        self.0.flush()?;
        Ok(())
    }
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
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

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
