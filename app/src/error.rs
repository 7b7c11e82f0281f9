//! What kind of failure an error is, and which input field it is about. Frontends
//! decide on kinds (the CLI maps them to its exit codes, MCP to tool errors), never on
//! message text; and they word the fields an error names for their users (the CLI as
//! its flags, MCP as its argument names), so no message of this layer names a flag.

use std::fmt;

use tacho_git::snapshot::SnapshotError;
use tacho_store::StoreError;

/// The kinds of failure, each with its documented exit code in the CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Verification found problems, a check failed, the gate refused, or the log is
    /// corrupt (exit 1).
    Findings,
    /// Bad input: a malformed event line, a rejected event, a bad argument (exit 2).
    Input,
    /// Another process is writing the same session (exit 3).
    Busy,
    /// No such session, goal or snapshot (exit 4).
    NotFound,
    /// An I/O error (exit 5).
    Io,
}

/// An input field of an operation: what an error about a wrong or missing input names.
/// A frontend words it for its users ([`Words`]): the CLI as its flag, MCP as its
/// argument name; the application's own words are [`Field::neutral`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// The session an operation is about (an id or a unique prefix), or that ingested
    /// lines go to.
    Session,
    /// Ingest: lines that name no session go to a new one.
    NewSession,
    /// The goal (an id or a unique prefix).
    Goal,
    /// A block's kind (`external_dependency`, `authorization`, `user_input`).
    BlockKind,
    /// A block's reason.
    Reason,
    /// A block's required change.
    RequiredChange,
    /// A block's evidence: receipt event numbers.
    Evidence,
    /// A block's statement that no independent work remains.
    NoIndependentWork,
    /// A branch's point (`step N`, `#SEQ`, a model request id).
    From,
    /// A branch's new session id.
    Id,
    /// The demo's directory.
    Dir,
    /// Which settings hooks are installed in (user, project, local).
    Scope,
    /// Prune: sessions at or above this risk level are kept.
    KeepRisk,
    /// Prune: the age in days.
    Days,
    /// A listing filter: sessions started since.
    Since,
    /// A listing filter: sessions at or above a risk level.
    Risk,
}

impl Field {
    /// The application's own name of the field (its option structs' names), which an
    /// error's `Display` uses; frontends name it their way.
    pub fn neutral(self) -> &'static str {
        match self {
            Field::Session => "session",
            Field::NewSession => "new_session",
            Field::Goal => "goal",
            Field::BlockKind => "kind",
            Field::Reason => "reason",
            Field::RequiredChange => "required_change",
            Field::Evidence => "evidence",
            Field::NoIndependentWork => "no_independent_work",
            Field::From => "from",
            Field::Id => "id",
            Field::Dir => "dir",
            Field::Scope => "scope",
            Field::KeepRisk => "keep_risk",
            Field::Days => "days",
            Field::Since => "since",
            Field::Risk => "risk",
        }
    }
}

/// An operation a message points its user to (where a frontend offers it: a CLI
/// command or option, an MCP tool).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Freezing a plan as a goal of a session.
    CreateGoal,
    /// Recording the end of a session whose agent stopped without recording it.
    EndSession,
    /// Verifying a session's record, saying where it is damaged.
    VerifySession,
    /// The points a session can be rolled back to.
    ListRollbackPoints,
    /// A rollback's plan, without applying it.
    PlanRollback,
}

impl Operation {
    /// The application's own name of the operation.
    pub fn neutral(self) -> &'static str {
        match self {
            Operation::CreateGoal => "create_goal",
            Operation::EndSession => "end_session",
            Operation::VerifySession => "verify_session",
            Operation::ListRollbackPoints => "list_rollback_points",
            Operation::PlanRollback => "plan_rollback",
        }
    }
}

/// How a frontend words, for its users, the fields and operations a message names (the
/// CLI: `--no-independent-work`, `` `tacho goal create` ``; MCP: `noIndependentWork`,
/// `create_goal`).
pub trait Words {
    fn field(&self, field: Field) -> &'static str;
    fn operation(&self, op: Operation) -> &'static str;
}

/// The application's own words ([`Field::neutral`], [`Operation::neutral`]): what an
/// error's `Display` says.
pub struct Neutral;

impl Words for Neutral {
    fn field(&self, field: Field) -> &'static str {
        field.neutral()
    }

    fn operation(&self, op: Operation) -> &'static str {
        op.neutral()
    }
}

/// A frontend's [`Words`].
pub type Namer<'a> = &'a dyn Words;

/// An error as frontends see it: its kind, and the input field it is about.
pub trait Kind: fmt::Display {
    fn kind(&self) -> ErrorKind;

    /// The input field the error is about (a wrong value, a missing statement), if any:
    /// what a frontend decides on, never the message.
    fn field(&self) -> Option<Field> {
        None
    }

    /// The message, each field and operation it names worded by `name`. `Display` is
    /// this with [`Neutral`]; an error that names neither has only its `Display`.
    fn fmt_named(&self, f: &mut fmt::Formatter<'_>, name: Namer<'_>) -> fmt::Result {
        let _ = name;
        fmt::Display::fmt(self, f)
    }
}

/// An error's message with its fields and operations worded by a frontend's [`Words`].
pub struct Named<'a, E: ?Sized>(pub &'a E, pub Namer<'a>);

impl<E: Kind + ?Sized> fmt::Display for Named<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_named(f, self.1)
    }
}

/// The message in the application's own words: what `Display` of a variant that names
/// a field writes (its text is written once, in the error's `fmt_named`).
pub(crate) fn neutral<E: Kind + ?Sized>(e: &E) -> Named<'_, E> {
    Named(e, &Neutral)
}

impl Kind for StoreError {
    fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Io { .. } | StoreError::Poisoned(_) => ErrorKind::Io,
            StoreError::Busy { .. } => ErrorKind::Busy,
            StoreError::Corrupt { .. } | StoreError::Lost { .. } => ErrorKind::Findings,
            StoreError::NotFound(_)
            | StoreError::UnknownSession { .. }
            | StoreError::AmbiguousSession { .. } => ErrorKind::NotFound,
            StoreError::BadSessionId(_) | StoreError::Rejected { .. } => ErrorKind::Input,
            StoreError::GroupNotTakenBack { .. } => ErrorKind::Io,
        }
    }
}

impl Kind for SnapshotError {
    fn kind(&self) -> ErrorKind {
        match self {
            SnapshotError::Workspace { .. }
            | SnapshotError::RefusedWorkspace { .. }
            | SnapshotError::BadPath { .. }
            | SnapshotError::NotUtf8(_) => ErrorKind::Input,
            SnapshotError::Missing(_) => ErrorKind::NotFound,
            SnapshotError::Busy(_) => ErrorKind::Busy,
            SnapshotError::Io { .. }
            | SnapshotError::Git { .. }
            | SnapshotError::Repository(_)
            | SnapshotError::Internal(_) => ErrorKind::Io,
        }
    }
}

impl Kind for std::io::Error {
    fn kind(&self) -> ErrorKind {
        ErrorKind::Io
    }
}

/// Declares `Kind` for an operation's error enum: the listed variants have the given
/// kinds, and wrapped lower-level errors (`Store`, `Snapshot`, …) keep theirs.
macro_rules! kinds {
    ($ty:ty { $($pat:pat => $kind:expr),* $(,)? }) => {
        impl $crate::error::Kind for $ty {
            fn kind(&self) -> $crate::error::ErrorKind {
                #[allow(unused_imports)]
                use $crate::error::ErrorKind::*;
                match self {
                    $($pat => $kind),*
                }
            }
        }
    };
}
pub(crate) use kinds;

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::branch::BranchError;
    use crate::demo::DemoError;
    use crate::goals::GoalError;
    use crate::ingest::{IngestError, RecordError};
    use crate::install::InstallError;
    use crate::prune::PruneError;
    use crate::replay::ReplayError;
    use crate::rollback::RollbackError;
    use crate::sessions::ListError;
    use crate::userfile::UserFileError;

    /// Issue 45 (4): a file the user named, or the workspace, that cannot be read is
    /// an I/O error (exit 5), not bad input; one that is not there, not a regular
    /// file, too large or not text is the input's (exit 2).
    #[test]
    fn reads_that_fail_are_io_errors() {
        let io = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let plan = |kind| GoalError::ReadPlan {
            path: PathBuf::from("plan.md"),
            source: std::io::Error::from(kind),
        };
        let cases: Vec<(Box<dyn Kind>, ErrorKind)> = vec![
            (
                Box::new(plan(std::io::ErrorKind::PermissionDenied)),
                ErrorKind::Io,
            ),
            // Not there, not a regular file or too large, not text: the input's.
            (
                Box::new(plan(std::io::ErrorKind::NotFound)),
                ErrorKind::Input,
            ),
            (
                Box::new(plan(std::io::ErrorKind::InvalidInput)),
                ErrorKind::Input,
            ),
            (
                Box::new(plan(std::io::ErrorKind::InvalidData)),
                ErrorKind::Input,
            ),
            (
                Box::new(GoalError::Workspace {
                    path: PathBuf::from("/w"),
                    source: io(),
                }),
                ErrorKind::Io,
            ),
            (
                Box::new(IngestError::Read {
                    source_name: "in".into(),
                    line: 3,
                    error: io(),
                }),
                ErrorKind::Io,
            ),
            (
                Box::new(IngestError::Read {
                    source_name: "in".into(),
                    line: 3,
                    error: std::io::Error::from(std::io::ErrorKind::InvalidData),
                }),
                ErrorKind::Input,
            ),
            (
                Box::new(crate::logs::LogsError::Read {
                    path: PathBuf::from("x.log"),
                    source: io(),
                }),
                ErrorKind::Io,
            ),
        ];
        for (i, (e, kind)) in cases.into_iter().enumerate() {
            assert_eq!(e.kind(), kind, "case {i}");
        }
    }

    /// Every error of this layer about an input field, one of each variant.
    fn field_errors() -> Vec<(Box<dyn Kind>, Field)> {
        let s = || "ses_a".to_string();
        vec![
            (Box::new(BranchError::BadSeq("#x".into())), Field::From),
            (
                Box::new(BranchError::SeqOutOfRange {
                    point: "#9".into(),
                    session: s(),
                    last: 3,
                }),
                Field::From,
            ),
            (
                Box::new(BranchError::NoStep {
                    point: "step 9".into(),
                    session: s(),
                    step: 9,
                }),
                Field::From,
            ),
            (
                Box::new(BranchError::UnknownPoint {
                    point: "x".into(),
                    session: s(),
                }),
                Field::From,
            ),
            (Box::new(BranchError::BadId("empty".into())), Field::Id),
            (Box::new(BranchError::Exists(s())), Field::Id),
            (
                Box::new(DemoError::NotEmpty(PathBuf::from("/d"))),
                Field::Dir,
            ),
            (
                Box::new(DemoError::Ingest(IngestError::BadSession("empty".into()))),
                Field::Session,
            ),
            (
                Box::new(GoalError::BadBlockKind {
                    given: "weather".into(),
                }),
                Field::BlockKind,
            ),
            (
                Box::new(GoalError::IndependentWorkRemains),
                Field::NoIndependentWork,
            ),
            (Box::new(GoalError::Empty(Field::Reason)), Field::Reason),
            (
                Box::new(GoalError::Empty(Field::RequiredChange)),
                Field::RequiredChange,
            ),
            (
                Box::new(GoalError::NotAReceipt {
                    seq: 1,
                    session: s(),
                    goal: "g".into(),
                    receipts: vec![2],
                }),
                Field::Evidence,
            ),
            (
                Box::new(GoalError::Superseded {
                    goal: "g".into(),
                    by: "h".into(),
                }),
                Field::Goal,
            ),
            (
                Box::new(IngestError::BadSession("empty".into())),
                Field::Session,
            ),
            (
                Box::new(IngestError::NoSession {
                    source_name: "-".into(),
                    line: 1,
                }),
                Field::Session,
            ),
            (
                Box::new(RecordError {
                    error: IngestError::BadSession("empty".into()),
                    recorded: 0,
                }),
                Field::Session,
            ),
            (
                Box::new(InstallError::NoScope {
                    agent: tacho_agents::Agent::Codex,
                    scope: crate::install::Scope::Local,
                }),
                Field::Scope,
            ),
            (
                Box::new(InstallError::File(UserFileError::InRepository {
                    path: PathBuf::from(".claude"),
                    why: "is a symbolic link in the repository".into(),
                    remove: "the link",
                })),
                Field::Scope,
            ),
            (Box::new(PruneError::BadRisk("x".into())), Field::KeepRisk),
            (Box::new(PruneError::BadDays), Field::Days),
            (Box::new(ListError::BadSince("x".into())), Field::Since),
            (Box::new(ListError::BadRisk("x".into())), Field::Risk),
        ]
    }

    const ALL: [Field; 16] = [
        Field::Session,
        Field::NewSession,
        Field::Goal,
        Field::BlockKind,
        Field::Reason,
        Field::RequiredChange,
        Field::Evidence,
        Field::NoIndependentWork,
        Field::From,
        Field::Id,
        Field::Dir,
        Field::Scope,
        Field::KeepRisk,
        Field::Days,
        Field::Since,
        Field::Risk,
    ];

    /// A frontend's words that no other text has.
    fn marked(f: Field) -> &'static str {
        match f {
            Field::Session => "<session>",
            Field::NewSession => "<new session>",
            Field::Goal => "<goal>",
            Field::BlockKind => "<kind>",
            Field::Reason => "<reason>",
            Field::RequiredChange => "<required change>",
            Field::Evidence => "<evidence>",
            Field::NoIndependentWork => "<no independent work>",
            Field::From => "<from>",
            Field::Id => "<id>",
            Field::Dir => "<dir>",
            Field::Scope => "<scope>",
            Field::KeepRisk => "<keep risk>",
            Field::Days => "<days>",
            Field::Since => "<since>",
            Field::Risk => "<risk>",
        }
    }

    const OPERATIONS: [Operation; 5] = [
        Operation::CreateGoal,
        Operation::EndSession,
        Operation::VerifySession,
        Operation::ListRollbackPoints,
        Operation::PlanRollback,
    ];

    fn marked_operation(op: Operation) -> &'static str {
        match op {
            Operation::CreateGoal => "<create goal>",
            Operation::EndSession => "<end session>",
            Operation::VerifySession => "<verify session>",
            Operation::ListRollbackPoints => "<list rollback points>",
            Operation::PlanRollback => "<plan rollback>",
        }
    }

    /// A frontend whose words no other text has.
    struct Marked;

    impl Words for Marked {
        fn field(&self, field: Field) -> &'static str {
            marked(field)
        }

        fn operation(&self, op: Operation) -> &'static str {
            marked_operation(op)
        }
    }

    /// The errors of this layer that point to an operation.
    fn operation_errors() -> Vec<(Box<dyn Kind>, Vec<Operation>)> {
        vec![
            (
                Box::new(GoalError::NoGoal {
                    session: "ses_a".into(),
                }),
                vec![Operation::CreateGoal],
            ),
            (
                Box::new(RollbackError::NoSnapshotBefore {
                    session: "ses_a".into(),
                    step: 2,
                }),
                vec![Operation::ListRollbackPoints],
            ),
            (
                Box::new(RollbackError::Running(vec!["ses_a".into()])),
                vec![Operation::EndSession, Operation::PlanRollback],
            ),
            (
                Box::new(ReplayError::Unverified("ses_a".into())),
                vec![Operation::VerifySession],
            ),
        ]
    }

    /// The message back in the application's words.
    fn neutral_again(worded: String) -> String {
        let t = ALL
            .iter()
            .fold(worded, |t, f| t.replace(marked(*f), f.neutral()));
        OPERATIONS
            .iter()
            .fold(t, |t, o| t.replace(marked_operation(*o), o.neutral()))
    }

    #[test]
    fn no_message_of_this_layer_names_a_cli_flag_or_command() {
        let errors = field_errors().into_iter().map(|(e, _)| e);
        for e in errors.chain(operation_errors().into_iter().map(|(e, _)| e)) {
            let text = e.to_string();
            assert!(
                !text.contains("--") && !text.contains("tacho "),
                "a CLI flag or command in the app's words: {text}"
            );
        }
    }

    #[test]
    fn an_error_about_a_field_says_which_and_lets_the_frontend_word_it() {
        for (e, field) in field_errors() {
            assert_eq!(e.field(), Some(field), "{e}");
            let worded = Named(e.as_ref(), &Marked).to_string();
            assert!(worded.contains(marked(field)), "{worded}");
            // Only the fields' words change.
            assert_eq!(neutral_again(worded), e.to_string());
        }
    }

    #[test]
    fn an_error_pointing_to_an_operation_lets_the_frontend_word_it() {
        for (e, ops) in operation_errors() {
            assert_eq!(e.field(), None, "{e}");
            let worded = Named(e.as_ref(), &Marked).to_string();
            for op in ops {
                assert!(worded.contains(marked_operation(op)), "{worded}");
            }
            assert_eq!(neutral_again(worded), e.to_string());
        }
    }

    #[test]
    fn an_error_about_nothing_a_frontend_words_says_the_same_to_every_frontend() {
        let e = GoalError::Completed("g".into());
        assert_eq!(e.field(), None);
        assert_eq!(Named(&e, &Marked).to_string(), e.to_string());
    }
}
