//! The contract digest: what a receipt is bound to (kind, acceptance criteria and the
//! assurance object; the title and other sections can change). Versioned: a digest
//! says which algorithm made it, so a goal frozen by an older tacho stays checkable
//! (SPEC §12.1).

use serde::Serialize;

use super::*;

/// The digest version new goals get.
pub const CONTRACT_DIGEST_VERSION: u32 = 2;

/// The contract digest of a plan, in the current version: `v2:` and the hex of
/// BLAKE3-derive("tacho goal contract v2") over the RFC 8785 (JCS) canonical JSON of
/// `{"acceptance": [{"id", "text"}...] in plan order, "assurance": the assurance object
/// or null, "kind": the goal kind}`.
pub fn contract_digest(plan: &Plan) -> String {
    contract_digest_v2(plan)
}

#[derive(Serialize)]
struct Criterion<'a> {
    id: &'a str,
    text: &'a str,
}

#[derive(Serialize)]
struct Contract<'a> {
    acceptance: Vec<Criterion<'a>>,
    assurance: &'a Option<Assurance>,
    kind: &'a str,
}

fn contract_digest_v2(plan: &Plan) -> String {
    let contract = Contract {
        acceptance: plan
            .acceptance
            .iter()
            .map(|(id, text)| Criterion { id, text })
            .collect(),
        assurance: &plan.assurance,
        kind: &plan.kind,
    };
    // Serialising plain strings, lists and the assurance object cannot fail; if it
    // ever did, the empty text gives a digest no receipt will match.
    let canonical = serde_json_canonicalizer::to_vec(&contract).unwrap_or_default();
    let digest = blake3::derive_key("tacho goal contract v2", &canonical);
    format!("v2:{}", blake3::Hash::from(digest).to_hex())
}

/// Version 1 (goals frozen before version 2): BLAKE3-derive("tacho goal contract v1")
/// over length-prefixed (u64 LE) fields — the goal kind, each acceptance id and text,
/// and the assurance object as JSON with keys sorted and no white space (tacho's own
/// canonical form, which RFC 8785 replaced) — as bare hex, without a version prefix.
pub fn contract_digest_v1(plan: &Plan) -> String {
    let mut h = blake3::Hasher::new_derive_key("tacho goal contract v1");
    let mut field = |b: &[u8]| {
        h.update(&(b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(plan.kind.as_bytes());
    for (id, text) in &plan.acceptance {
        field(id.as_bytes());
        field(text.as_bytes());
    }
    match &plan.assurance {
        Some(a) => {
            let v = serde_json::to_value(a).unwrap_or_default();
            field(canonical_json_v1(&v).as_bytes())
        }
        None => field(b""),
    }
    h.finalize().to_hex().to_string()
}

/// The version of a recorded digest: `vN:` prefix, or none (64 hex digits) for 1.
pub fn contract_digest_version(digest: &str) -> Option<u32> {
    let hex = |h: &str| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit());
    match digest.split_once(':') {
        Some((v, h)) => v
            .strip_prefix('v')
            .and_then(|n| n.parse().ok())
            .filter(|n| *n >= 2 && hex(h)),
        None => hex(digest).then_some(1),
    }
}

/// Whether `digest` (of any version this tacho knows) is the plan's contract digest;
/// `None` for a version it does not know.
pub fn contract_digest_matches(plan: &Plan, digest: &str) -> Option<bool> {
    match contract_digest_version(digest)? {
        1 => Some(contract_digest_v1(plan) == digest),
        2 => Some(contract_digest_v2(plan) == digest),
        _ => None,
    }
}

/// Version 1's JSON: object keys sorted and no insignificant white space.
fn canonical_json_v1(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        serde_json::Value::String((*k).clone()),
                        canonical_json_v1(&m[*k])
                    )
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        serde_json::Value::Array(a) => format!(
            "[{}]",
            a.iter()
                .map(canonical_json_v1)
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => other.to_string(),
    }
}
