//! The command error and its exit codes (documented in the README): an operation's
//! error keeps its kind, which decides the code, and the fields it names are worded as
//! this frontend's flags.

use std::fmt;

use tacho_app::error::{Field, Namer, Operation, Words};
use tacho_app::{ErrorKind, Kind};

/// An operation's error as the CLI keeps it: its kind and field, and its message
/// worded by any frontend (the MCP server words the same error with its argument
/// names).
pub trait OpError: Kind + std::error::Error + Send + Sync + 'static {}

impl<E: Kind + std::error::Error + Send + Sync + 'static> OpError for E {}

#[derive(Debug)]
pub enum CliError {
    /// An operation's error, with its kind.
    Op {
        kind: ErrorKind,
        error: Box<dyn OpError>,
    },
    /// A refusal or finding the command itself states.
    Said { kind: ErrorKind, text: String },
    /// stdout was closed (`tacho ... | head`): a normal exit.
    BrokenPipe,
}

/// The CLI's words: a field is its flag, an operation its command or option.
pub struct Flags;

impl Words for Flags {
    fn field(&self, field: Field) -> &'static str {
        flag(field)
    }

    fn operation(&self, op: Operation) -> &'static str {
        match op {
            Operation::CreateGoal => "`tacho goal create`",
            Operation::EndSession => "`tacho session end <session>`",
            Operation::VerifySession => "`tacho session replay <session> --mode verify`",
            Operation::ListRollbackPoints => "--list",
            Operation::PlanRollback => "--dry-run",
        }
    }
}

/// The CLI's word for an operation's field: its flag.
fn flag(field: Field) -> &'static str {
    match field {
        Field::Session => "--session",
        Field::NewSession => "--new-session",
        Field::Goal => "--goal",
        Field::BlockKind => "--kind",
        Field::Reason => "--reason",
        Field::RequiredChange => "--required-change",
        Field::Evidence => "--evidence",
        Field::NoIndependentWork => "--no-independent-work",
        Field::From => "--from",
        Field::Id => "--id",
        Field::Dir => "--dir",
        Field::Scope => "--scope",
        Field::KeepRisk => "--keep-risk",
        Field::Days => "--days",
        Field::Since => "--since",
        Field::Risk => "--risk",
    }
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

    /// The message with an operation's fields and operations worded by `name`
    /// (`Display` words them as the CLI's flags and commands).
    pub fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        match self {
            CliError::Op { error, .. } => error.fmt_named(f, name),
            CliError::Said { text, .. } => f.write_str(text),
            CliError::BrokenPipe => f.write_str("broken pipe"),
        }
    }

    /// The message with an operation's fields and operations worded by `name`.
    pub fn named<'a>(&'a self, name: Namer<'a>) -> impl fmt::Display + 'a {
        struct Worded<'a>(&'a CliError, Namer<'a>);
        impl fmt::Display for Worded<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt_named(f, self.1)
            }
        }
        Worded(self, name)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_named(f, &Flags)
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Op { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

impl<E: OpError> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError::Op {
            kind: e.kind(),
            error: Box::new(e),
        }
    }
}
