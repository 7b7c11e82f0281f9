//! Commits linked to the sessions that made them (SPEC §17.2): the `git.commits`
//! tacho records when it sees HEAD move, read back.

use std::collections::BTreeMap;

use tacho_schema::{EventBody, EventView};

use crate::Tacho;

/// A session that saw a commit appear: the session and its `git.commits` event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CommitLink {
    pub session: String,
    pub seq: u64,
    /// The tree the commit had when tacho saw it.
    pub tree: String,
}

impl Tacho {
    /// HEAD as `session` last saw it (its last committed `git.commits`), if ever.
    pub(crate) fn last_observed_head(&self, session: &str) -> Option<String> {
        let mut head = None;
        let _ = self.log().read_session_views(session, 0, |_, _, v| {
            if let EventView::GitCommits { head: h, .. } = v {
                head = Some((*h).to_owned());
            }
        });
        head
    }

    /// Every commit some session saw appear, with the sessions that saw it: read from
    /// the `git.commits` events of every session of the store. A session whose log
    /// does not read to its end gives the links before the damage, and is named with
    /// the damage.
    pub(crate) fn commit_links(&self) -> Result<CommitLinks, tacho_store::StoreError> {
        let mut out = CommitLinks::default();
        for session in self.log().sessions()? {
            let mut seen = Vec::new();
            let read = self.log().read_session_views(&session, 0, |seq, _, v| {
                if let EventView::GitCommits { commits_total, .. } = v
                    && *commits_total > 0
                {
                    seen.push(seq);
                }
            });
            if let Err(e) = read {
                out.damaged.push((session.clone(), e.to_string()));
            }
            if seen.is_empty() {
                continue;
            }
            let _ = self.for_each_event(&session, |e| {
                if let EventBody::GitCommits(g) = &e.event.body
                    && seen.contains(&e.seq)
                {
                    for c in &g.commits {
                        out.links
                            .entry(c.commit.clone())
                            .or_default()
                            .push(CommitLink {
                                session: session.clone(),
                                seq: e.seq,
                                tree: c.tree.clone(),
                            });
                    }
                }
            });
        }
        Ok(out)
    }
}

/// What [`Tacho::commit_links`] read.
#[derive(Debug, Default)]
pub(crate) struct CommitLinks {
    /// Commit → the sessions that saw it appear.
    pub links: BTreeMap<String, Vec<CommitLink>>,
    /// Sessions whose log did not read to its end, with why.
    pub damaged: Vec<(String, String)>,
}
