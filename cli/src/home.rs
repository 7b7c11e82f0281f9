//! Where the store lives: `$TACHO_HOME`, else the platform data directory.

use std::path::PathBuf;

use tacho_store::{Store, StoreOptions};

use crate::error::CliError;

/// The data directory: `$TACHO_HOME` when set and not empty, else `tacho` in the
/// platform data directory (`$XDG_DATA_HOME`, or `~/.local/share` on Linux).
pub fn data_dir() -> Result<PathBuf, CliError> {
    if let Some(h) = std::env::var_os("TACHO_HOME").filter(|h| !h.is_empty()) {
        return Ok(PathBuf::from(h));
    }
    dirs::data_dir().map(|d| d.join("tacho")).ok_or_else(|| {
        CliError::Io("no data directory: set TACHO_HOME to where tacho should keep its data".into())
    })
}

/// Options from the environment: `TACHO_LOCK_TIMEOUT_MS` (how long a writer waits for
/// another writer of the same session, default 10000).
fn options() -> Result<StoreOptions, CliError> {
    let mut o = StoreOptions::default();
    if let Ok(v) = std::env::var("TACHO_LOCK_TIMEOUT_MS") {
        let ms: u64 = v.parse().map_err(|_| {
            CliError::Input(format!(
                "TACHO_LOCK_TIMEOUT_MS={v:?} is not a whole number of milliseconds"
            ))
        })?;
        o.lock_timeout = std::time::Duration::from_millis(ms);
    }
    Ok(o)
}

/// Opens the event log of the data directory.
pub fn open_store() -> Result<Store, CliError> {
    let root = data_dir()?.join("log");
    Ok(Store::open(root, options()?)?)
}
