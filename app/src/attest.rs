//! `tacho attest BASE..HEAD` (SPEC §17.5): what `ci verify` found for a range, as
//! in-toto Statements v1 in DSSE envelopes that a policy engine checks without tacho —
//! one statement of tacho's own predicate (the sessions that made the commits, their
//! chain heads, signatures, risk; the commits no session made; changes no tool call
//! made) and, when a linked session holds assured goals, one of in-toto's vetted Test
//! Result predicate (each check's receipt). The subjects are the range's commits and
//! their trees.

use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::Tacho;
use crate::ci::{CiError, CiGoal, CiPolicy, CiReport, CiSession};
use crate::error::kinds;
use crate::signing::{RawSigner, SignError, SignatureStatus};

/// DSSE's payload type for in-toto statements.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// in-toto Statement v1.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// in-toto's Test Result predicate, version 0.1.
pub const TEST_RESULT_TYPE: &str = "https://in-toto.io/attestation/test-result/v0.1";
/// tacho's own predicate, version 1 (SPEC §17.5). tacho has no domain of its own yet:
/// the type is a name (`.invalid` never resolves), fixed for this version.
pub const SESSIONS_TYPE: &str = "https://tacho.invalid/attestation/ci-sessions/v1";

/// One DSSE envelope (JSON Lines, one per statement).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Envelope {
    /// The statement's JSON, base64 (standard, padded).
    pub payload: String,
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    pub signatures: Vec<EnvelopeSignature>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnvelopeSignature {
    /// securesystemslib's key id of the Ed25519 key (see [`RawSigner::keyid`]).
    pub keyid: String,
    /// The raw Ed25519 signature over the PAE, base64.
    pub sig: String,
}

/// Which key signs the envelopes.
#[derive(Debug, Clone, Copy)]
pub enum AttestKey<'a> {
    /// Git's `user.signingkey` (with `gpg.format ssh`) of the repository: the key
    /// `tacho push` signs sessions with.
    Git,
    /// A key given as git takes one: a key file, or `key::<public key>` in ssh-agent.
    Given(&'a str),
    /// No signature: for a pipeline that signs the statements itself (Sigstore).
    Unsigned,
}

/// Why no attestation was made.
#[derive(Debug, thiserror::Error)]
pub enum AttestError {
    #[error(
        "no signing key: git's user.signingkey (with gpg.format ssh) is not set here; give one with --key, or --unsigned for statements a pipeline signs itself"
    )]
    NoKey,
    #[error(transparent)]
    Sign(#[from] SignError),
    #[error(transparent)]
    Ci(#[from] CiError),
}

kinds!(AttestError {
    AttestError::NoKey => Input,
    AttestError::Sign(SignError::Io { .. }) => Io,
    AttestError::Sign(SignError::NoSshKeygen | SignError::Failed { .. }) => Input,
    AttestError::Ci(e) => e.kind(),
});

/// `tacho attest`'s answer: the report it states, each statement and its envelope.
#[derive(Debug, Clone, Serialize)]
pub struct Attestation {
    pub statements: Vec<Value>,
    pub envelopes: Vec<Envelope>,
    /// The signing key: securesystemslib's id, the SSH fingerprint and public key.
    pub key: Option<AttestingKey>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AttestingKey {
    pub keyid: String,
    pub fingerprint: String,
    pub public_key: String,
}

impl Tacho {
    /// The attestation of `range` (`BASE..HEAD`) of the repository holding `workspace`:
    /// what `ci verify` finds under no policy, stated and signed with `key`.
    pub fn attest(
        &self,
        range: &str,
        workspace: Option<&Path>,
        key: AttestKey<'_>,
    ) -> Result<Attestation, AttestError> {
        let signer = self.attest_signer(workspace, key)?;
        let report = self.ci_verify(range, workspace, CiPolicy::default())?;
        if let Some(e) = report.no_range() {
            return Err(e.into());
        }
        attestation(&report, signer.as_ref())
    }

    /// The signer of `key`; `None` for [`AttestKey::Unsigned`].
    pub fn attest_signer(
        &self,
        workspace: Option<&Path>,
        key: AttestKey<'_>,
    ) -> Result<Option<RawSigner>, AttestError> {
        let git_key = || {
            let dir = match workspace {
                Some(w) => w.to_path_buf(),
                None => std::env::current_dir().map_err(CiError::CurrentDir)?,
            };
            crate::signing::signing_key(&dir).ok_or(AttestError::NoKey)
        };
        Ok(match key {
            AttestKey::Unsigned => None,
            AttestKey::Given(k) => Some(RawSigner::open(k)?),
            AttestKey::Git => Some(RawSigner::open(&git_key()?)?),
        })
    }
}

/// The statements of `report` in envelopes signed by `signer`.
pub fn attestation(
    report: &CiReport,
    signer: Option<&RawSigner>,
) -> Result<Attestation, AttestError> {
    let statements = statements(report);
    let envelopes = statements
        .iter()
        .map(|s| envelope(s, signer))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Attestation {
        statements,
        envelopes,
        key: signer.map(|s| AttestingKey {
            keyid: s.keyid(),
            fingerprint: s.fingerprint(),
            public_key: s.public_openssh(),
        }),
    })
}

/// DSSE's pre-authentication encoding: what is signed.
pub fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut v = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        body.len()
    )
    .into_bytes();
    v.extend_from_slice(body);
    v
}

/// `statement` in an envelope, signed by `signer` (no signature without one).
pub fn envelope(statement: &Value, signer: Option<&RawSigner>) -> Result<Envelope, SignError> {
    let body = statement.to_string().into_bytes();
    let mut signatures = Vec::new();
    if let Some(s) = signer {
        let sig = s.sign(&pae(PAYLOAD_TYPE, &body))?;
        signatures.push(EnvelopeSignature {
            keyid: s.keyid(),
            sig: data_encoding::BASE64.encode(&sig),
        });
    }
    Ok(Envelope {
        payload: data_encoding::BASE64.encode(&body),
        payload_type: PAYLOAD_TYPE.into(),
        signatures,
    })
}

/// The statements for `report`: tacho's predicate, then the Test Result one when a
/// linked session holds an assured goal.
pub fn statements(report: &CiReport) -> Vec<Value> {
    let subject: Vec<Value> = report
        .commits
        .iter()
        .flat_map(|c| {
            [
                json!({"name": c.commit, "digest": {"gitCommit": c.commit}}),
                json!({"name": format!("{}^{{tree}}", c.commit), "digest": {"gitTree": c.tree}}),
            ]
        })
        .collect();
    let statement = |predicate_type: &str, predicate: Value| {
        json!({
            "_type": STATEMENT_TYPE,
            "subject": subject,
            "predicateType": predicate_type,
            "predicate": predicate,
        })
    };
    let mut out = vec![statement(SESSIONS_TYPE, sessions_predicate(report))];
    if let Some(p) = test_result_predicate(report) {
        out.push(statement(TEST_RESULT_TYPE, p));
    }
    out
}

fn sessions_predicate(r: &CiReport) -> Value {
    let commits: Vec<Value> = r
        .commits
        .iter()
        .map(|c| {
            json!({
                "commit": c.commit,
                "tree": c.tree,
                "summary": c.summary,
                "linked": c.linked,
                "sessions": c.sessions,
                "notLinkedBy": c.not_linked_by,
            })
        })
        .collect();
    let sessions: Vec<Value> = r.sessions.iter().map(session).collect();
    let failures: Vec<Value> = r
        .failures
        .iter()
        .map(|f| {
            let mut m = Map::new();
            m.insert("rule".into(), f.rule.id().into());
            m.insert("reason".into(), f.reason.clone().into());
            if let Some(s) = &f.session {
                m.insert("session".into(), s.clone().into());
            }
            if let Some(c) = &f.commit {
                m.insert("commit".into(), c.clone().into());
            }
            Value::Object(m)
        })
        .collect();
    json!({
        "tool": {"name": "tacho", "version": env!("CARGO_PKG_VERSION")},
        "baseline": r.baseline,
        "head": r.head,
        "policy": {
            "requireSession": r.require_session,
            "requireSignature": r.require_signature,
        },
        "passed": r.passed(),
        "failures": failures,
        "commits": commits,
        "sessions": sessions,
    })
}

fn session(s: &CiSession) -> Value {
    let signature = match &s.signature {
        SignatureStatus::Unsigned => json!({"status": "unsigned"}),
        SignatureStatus::Signed {
            fingerprint,
            principals,
            events,
        } => json!({
            "status": "signed", "fingerprint": fingerprint, "principals": principals, "events": events,
        }),
        SignatureStatus::UnknownKey {
            fingerprint,
            events,
        } => json!({"status": "unknown_key", "fingerprint": fingerprint, "events": events}),
        SignatureStatus::Bad { reason } => json!({"status": "bad", "reason": reason}),
    };
    let unclaimed: Vec<&String> = s
        .risk_factors
        .iter()
        .filter(|f| f.id == "unclaimed_changes")
        .flat_map(|f| &f.paths)
        .collect();
    json!({
        "id": s.session,
        "agent": s.agent,
        "title": s.title,
        "agentReported": s.agent_reported,
        "verified": s.verified,
        "findings": s.findings,
        "events": s.events,
        "chainHead": s.chain_head,
        "signature": signature,
        "risk": {
            "level": s.risk_level,
            "score": s.risk_score,
            "factors": s.risk_factors.iter().map(|f| json!({
                "id": f.id, "weight": f.weight, "evidence": f.evidence, "paths": f.paths,
            })).collect::<Vec<_>>(),
        },
        "unclaimedChanges": unclaimed,
        "commits": s.commits,
        "assuredGoals": s.goals.iter().map(|g| json!({
            "goal": g.goal,
            "title": g.title,
            "completed": g.completed,
            "ok": g.ok,
            "reason": g.reason,
            "revisions": g.revisions,
            "changedSinceFreeze": g.changed_since_freeze,
        })).collect::<Vec<_>>(),
    })
}

/// in-toto's Test Result for the assured goals of the range's sessions: PASSED when
/// every goal holds for the committed tree, FAILED otherwise; each check a
/// `GOAL/CHECK` test, its receipt a configuration entry on the tree it was held to.
fn test_result_predicate(r: &CiReport) -> Option<Value> {
    let goals: Vec<(&CiSession, &CiGoal)> = r
        .sessions
        .iter()
        .flat_map(|s| s.goals.iter().map(move |g| (s, g)))
        .collect();
    if goals.is_empty() {
        return None;
    }
    let tree_of = |commit: &str| {
        r.commits
            .iter()
            .find(|c| c.commit == commit)
            .map(|c| c.tree.clone())
    };
    let (mut passed, mut failed, mut configuration) = (Vec::new(), Vec::new(), Vec::new());
    for (s, g) in &goals {
        if g.checks.is_empty() && g.unchecked.is_empty() {
            failed.push(g.goal.clone());
        }
        // A check of the contract that never ran fails: no receipt holds it.
        failed.extend(g.unchecked.iter().map(|c| format!("{}/{c}", g.goal)));
        for c in &g.checks {
            let name = format!("{}/{}", g.goal, c.check);
            if c.holds() && g.ok {
                passed.push(name.clone());
            } else {
                failed.push(name.clone());
            }
            let mut annotations = Map::new();
            let mut put = |k: &str, v: Value| {
                if !v.is_null() {
                    annotations.insert(k.into(), v);
                }
            };
            put("session", s.session.clone().into());
            put("goal", g.goal.clone().into());
            put("check", c.check.clone().into());
            put("command", c.command.clone().into());
            put("passed", c.passed.into());
            put("exitCode", json!(c.exit_code));
            put("proof", json!(c.proof));
            put("redExitCode", json!(c.red_exit_code));
            put("problem", json!(c.problem));
            put("fingerprint", json!(c.fingerprint));
            put("matchesCommit", c.matches_commit.into());
            put("contractDigest", c.contract_digest.clone().into());
            put("receiptSeq", c.receipt_seq.into());
            put("commit", g.commit.clone().into());
            let mut d = Map::new();
            d.insert("name".into(), name.into());
            match tree_of(&g.commit) {
                Some(tree) => {
                    d.insert("digest".into(), json!({"gitTree": tree}));
                }
                // No commit of the range to hold it to: named, not digested (its
                // fingerprint is in the annotations).
                None => {
                    d.insert(
                        "uri".into(),
                        format!(
                            "tacho:session/{}/goal/{}/check/{}",
                            crate::render::uri_path(&s.session),
                            crate::render::uri_path(&g.goal),
                            crate::render::uri_path(&c.check)
                        )
                        .into(),
                    );
                }
            }
            d.insert("annotations".into(), Value::Object(annotations));
            configuration.push(Value::Object(d));
        }
    }
    let result = if goals.iter().all(|(_, g)| g.ok) {
        "PASSED"
    } else {
        "FAILED"
    };
    Some(json!({
        "result": result,
        "configuration": configuration,
        "passedTests": passed,
        "failedTests": failed,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DSSE's PAE, as the DSSE specification spells its test vector.
    #[test]
    fn pae_is_dsses_encoding() {
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    /// A fixed Ed25519 key (seed 00..1f) signs a fixed statement to the bytes
    /// securesystemslib 1.6.0 verified (Ed25519 is deterministic): the key id is
    /// securesystemslib's, the signature covers the PAE, the envelope is DSSE's.
    #[test]
    fn a_known_key_signs_the_envelope_securesystemslib_verified() {
        let seed: [u8; 32] = std::array::from_fn(|i| i as u8);
        let key = ssh_key::PrivateKey::from(ssh_key::private::Ed25519Keypair::from_seed(&seed));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("id_ed25519");
        std::fs::write(
            &path,
            key.to_openssh(ssh_key::LineEnding::LF)
                .expect("encode")
                .as_bytes(),
        )
        .expect("write");
        let signer = RawSigner::open(path.to_str().expect("utf-8")).expect("open");
        assert_eq!(
            signer.keyid(),
            "63d00ee3cf4f5c61ad94efa696c68f13b608fe56ecea13fb144a6fd18e9235b9"
        );
        let statement = json!({
            "_type": STATEMENT_TYPE,
            "subject": [{"digest": {"gitCommit": "0000000000000000000000000000000000000000"}}],
            "predicateType": TEST_RESULT_TYPE,
            "predicate": {"result": "PASSED", "configuration": []},
        });
        let e = envelope(&statement, Some(&signer)).expect("sign");
        assert_eq!(
            serde_json::to_string(&e).expect("json"),
            r#"{"payload":"eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJzdWJqZWN0IjpbeyJkaWdlc3QiOnsiZ2l0Q29tbWl0IjoiMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMCJ9fV0sInByZWRpY2F0ZVR5cGUiOiJodHRwczovL2luLXRvdG8uaW8vYXR0ZXN0YXRpb24vdGVzdC1yZXN1bHQvdjAuMSIsInByZWRpY2F0ZSI6eyJyZXN1bHQiOiJQQVNTRUQiLCJjb25maWd1cmF0aW9uIjpbXX19","payloadType":"application/vnd.in-toto+json","signatures":[{"keyid":"63d00ee3cf4f5c61ad94efa696c68f13b608fe56ecea13fb144a6fd18e9235b9","sig":"cwzg17v2Z5IOi7xogjGN51KfkyiCfs7TljDYHLw7mxTtniE6Km4cdsIcIuhCod2VOg8irH22bOzDe+Zl7VchDw=="}]}"#
        );
    }

    /// Keys other than Ed25519 are refused by name, never used for another scheme.
    #[test]
    fn a_key_that_is_not_ed25519_is_refused() {
        let line = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBMGXpe9JIo2QQ9xgSVKvGwSrVNWPGDhFhpAfjxVMLiL6EzL7UUK6WEKFMwzTD/AsCVmRIpVVZK5rj//N/aT1s6o=";
        let err = RawSigner::open(&format!("key::{line}"))
            .err()
            .expect("refused");
        assert!(err.to_string().contains("Ed25519 keys only"), "{err}");
    }
}
