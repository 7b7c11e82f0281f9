//! A session id resolved against the store: what every read and write of one session
//! takes. A frontend resolves what its user gave (an id or a unique prefix) once, with
//! [`crate::Tacho::resolve_session`], and passes the result on.

use std::fmt;
use std::ops::Deref;

/// The full id of a session the store holds (resolved from an id or a unique prefix).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// An id the store already resolved (the application layer's own use).
    pub(crate) fn resolved(id: String) -> Self {
        SessionId(id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl Deref for SessionId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for SessionId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for SessionId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}
