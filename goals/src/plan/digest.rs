//! The contract digest: what a receipt is bound to (kind, acceptance criteria and the
//! canonical assurance JSON; the title and other sections can change).

use super::*;

/// The contract digest: BLAKE3-derive("tacho goal contract v1") over the canonical
/// encoding of what defines acceptance — the goal kind, each acceptance id with its
/// text, and the assurance object as canonical JSON (keys sorted, no spaces). The title
/// and the other sections can change without changing it.
pub fn contract_digest(plan: &Plan) -> String {
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
            field(canonical_json(&v).as_bytes())
        }
        None => field(b""),
    }
    h.finalize().to_hex().to_string()
}

/// JSON with object keys sorted and no insignificant white space.
pub(super) fn canonical_json(v: &serde_json::Value) -> String {
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
                        canonical_json(&m[*k])
                    )
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        serde_json::Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical_json).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}
