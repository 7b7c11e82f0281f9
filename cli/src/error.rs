//! The command error and its exit codes (documented in the README).

use tacho_store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Exit 1: verification found problems, or the log is corrupt.
    #[error("{0}")]
    Findings(String),
    /// Exit 2: bad input (a malformed event line, a rejected event, a bad argument).
    #[error("{0}")]
    Input(String),
    /// Exit 3: another process is writing the same session.
    #[error("{0}")]
    Busy(String),
    /// Exit 4: no such session.
    #[error("{0}")]
    NotFound(String),
    /// Exit 5: an I/O error.
    #[error("{0}")]
    Io(String),
    /// stdout was closed (`tacho ... | head`): a normal exit.
    #[error("broken pipe")]
    BrokenPipe,
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::BrokenPipe => 0,
            CliError::Findings(_) => 1,
            CliError::Input(_) => 2,
            CliError::Busy(_) => 3,
            CliError::NotFound(_) => 4,
            CliError::Io(_) => 5,
        }
    }
}

impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        let text = e.to_string();
        match e {
            StoreError::Io { .. } => CliError::Io(text),
            StoreError::Busy { .. } => CliError::Busy(text),
            StoreError::Corrupt { .. } => CliError::Findings(text),
            StoreError::NotFound(_)
            | StoreError::UnknownSession { .. }
            | StoreError::AmbiguousSession { .. } => CliError::NotFound(text),
            StoreError::BadSessionId(_) | StoreError::Rejected { .. } => CliError::Input(text),
            StoreError::Poisoned(_) => CliError::Io(text),
        }
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::BrokenPipe
        } else {
            CliError::Io(e.to_string())
        }
    }
}
