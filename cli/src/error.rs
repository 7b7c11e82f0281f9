//! The command error and its exit codes (documented in the README): an operation's
//! error keeps its kind, which decides the code.

use tacho_app::{ErrorKind, Kind};

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// An operation's error, with its kind.
    #[error("{error}")]
    Op {
        kind: ErrorKind,
        #[source]
        error: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A refusal or finding the command itself states.
    #[error("{text}")]
    Said { kind: ErrorKind, text: String },
    /// stdout was closed (`tacho ... | head`): a normal exit.
    #[error("broken pipe")]
    BrokenPipe,
}

impl CliError {
    /// A finding (exit 1): verification failed, a check failed, the gate refused.
    pub fn findings(text: impl Into<String>) -> Self {
        CliError::Said {
            kind: ErrorKind::Findings,
            text: text.into(),
        }
    }

    /// Bad input (exit 2).
    pub fn input(text: impl Into<String>) -> Self {
        CliError::Said {
            kind: ErrorKind::Input,
            text: text.into(),
        }
    }

    /// Writing the command's output failed; a closed pipe is a normal exit.
    pub fn output(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            CliError::BrokenPipe
        } else {
            CliError::from(e)
        }
    }

    pub fn exit_code(&self) -> u8 {
        let kind = match self {
            CliError::BrokenPipe => return 0,
            CliError::Op { kind, .. } | CliError::Said { kind, .. } => *kind,
        };
        match kind {
            ErrorKind::Findings => 1,
            ErrorKind::Input => 2,
            ErrorKind::Busy => 3,
            ErrorKind::NotFound => 4,
            ErrorKind::Io => 5,
        }
    }
}

impl<E: Kind + std::error::Error + Send + Sync + 'static> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError::Op {
            kind: e.kind(),
            error: Box::new(e),
        }
    }
}
