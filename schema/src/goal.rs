//! The assurance contract of a goal: what `goal.created`'s `assurance` field holds (as
//! JSON text), typed. Plans are parsed and validated in `tacho-goals`; projections and
//! the application layer read a frozen contract through [`Assurance::from_json`]
//! instead of picking fields out of JSON.

use serde::{Deserialize, Serialize};

/// The assurance object, version 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Assurance {
    pub version: u32,
    pub source_paths: Vec<String>,
    #[serde(default)]
    pub sources: Vec<Source>,
    pub checks: Vec<Check>,
}

/// A source the plan rests on (a ticket, a spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub role: String,
    pub reference: String,
}

/// One frozen acceptance check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Check {
    pub id: String,
    pub acceptance_ids: Vec<String>,
    pub command: String,
    pub purpose: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// Variables the check needs beyond the frozen set (SPEC §12.2): their values are
    /// frozen with the goal. Left out when empty, so a plan without them keeps its
    /// contract digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<String>,
}

impl Assurance {
    /// The contract frozen in a `goal.created` event. `None` when the text is not a
    /// version-1 contract: a goal recorded that way has no checks and no source paths,
    /// so nothing can count for it.
    pub fn from_json(text: &str) -> Option<Assurance> {
        serde_json::from_str(text).ok()
    }
}
