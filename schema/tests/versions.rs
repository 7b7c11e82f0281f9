//! Kind versions (SPEC §6): a payload is read with the decoder of the version its frame
//! names, and every version stays readable. Golden payloads of every kind at every
//! version are in `tests/fixtures/payloads/` (`<kind>.v<N>.bin` and the JSON form it
//! must decode to); `TACHO_BLESS=1` writes the current version's from the fixtures'
//! events when a kind is added.

#![allow(clippy::unwrap_used)] // tests fail loudly on purpose

use std::path::PathBuf;

use rkyv::rancor::Error;
use tacho_schema::{
    EventBody, KINDS, OldVersion, SchemaError, decode_versioned, parse_json_line,
    validate_versioned,
};

fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures"))
}

/// Reads bytes into 16-aligned memory, as segments are read.
fn aligned(bytes: &[u8]) -> rkyv::util::AlignedVec<16> {
    let mut v = rkyv::util::AlignedVec::<16>::with_capacity(bytes.len());
    v.extend_from_slice(bytes);
    v
}

/// One event of every kind, from the fixtures' sources.
fn one_of_each() -> Vec<EventBody> {
    let mut seen = std::collections::BTreeMap::new();
    for f in [
        "store-v1/sources/all-kinds.jsonl",
        "kinds-added.jsonl",
        "../../examples/sessions/rate-limit.jsonl",
    ] {
        let text = std::fs::read_to_string(fixtures().join(f)).unwrap();
        for (i, line) in text.lines().enumerate() {
            let body = parse_json_line(line, i + 1).unwrap().body;
            seen.entry(body.kind_id()).or_insert(body);
        }
    }
    seen.into_values().collect()
}

#[test]
fn every_kind_at_every_version_decodes_from_its_golden_payload() {
    let dir = fixtures().join("payloads");
    if std::env::var_os("TACHO_BLESS").is_some() {
        for body in one_of_each() {
            let (_, version, bytes) = body.encode().unwrap();
            let name = body.kind_name();
            std::fs::write(dir.join(format!("{name}.v{version}.bin")), &bytes[..]).unwrap();
            let json = serde_json::to_string_pretty(&body).unwrap();
            std::fs::write(dir.join(format!("{name}.v{version}.json")), json + "\n").unwrap();
        }
        std::fs::write(
            dir.join("test.note.v1.bin"),
            &rkyv::to_bytes::<Error>(&NoteV1 {
                text: "written by v1, read by v2".into(),
            })
            .unwrap()[..],
        )
        .unwrap();
    }
    for &(kind, name, current) in KINDS {
        for version in 1..=current {
            let bin = dir.join(format!("{name}.v{version}.bin"));
            if !bin.exists() {
                // Only the current version must have one (an old version of a kind
                // added later never existed).
                assert!(version < current, "{} is missing", bin.display());
                continue;
            }
            let bytes = aligned(&std::fs::read(&bin).unwrap());
            let body = EventBody::decode(kind, version, &bytes).unwrap();
            EventBody::validate(kind, version, &bytes).unwrap();
            let want: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join(format!("{name}.v{version}.json"))).unwrap(),
            )
            .unwrap();
            assert_eq!(
                serde_json::to_value(&body).unwrap(),
                want,
                "{name} v{version}"
            );
            if version == current {
                // Today's encoder writes exactly the golden bytes: the layout is pinned.
                let (_, _, again) = body.encode().unwrap();
                assert_eq!(&again[..], &bytes[..], "{name} v{version} bytes changed");
            }
            let seen = tacho_schema::EventView::visit(kind, version, &bytes, |_| ());
            assert!(seen.is_ok(), "{name} v{version}: {seen:?}");
        }
        // A version this tacho does not know is refused, never read with another
        // version's struct.
        let bin = dir.join(format!("{name}.v{current}.bin"));
        let bytes = aligned(&std::fs::read(bin).unwrap());
        assert!(matches!(
            EventBody::decode(kind, current + 1, &bytes),
            Err(SchemaError::UnknownVersion { .. })
        ));
    }
}

// A test-only kind that gained a field in version 2: the mechanism every kind uses.

#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct NoteV1 {
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct Note {
    text: String,
    level: u32,
}

fn note_v1(p: &[u8]) -> Result<Note, String> {
    rkyv::from_bytes::<NoteV1, Error>(p)
        .map(|n| Note {
            text: n.text,
            level: 0,
        })
        .map_err(|e| e.to_string())
}

fn note_v1_valid(p: &[u8]) -> Result<(), String> {
    rkyv::access::<rkyv::Archived<NoteV1>, Error>(p)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

const NOTE_OLD: &[OldVersion<Note>] = &[OldVersion {
    version: 1,
    decode: note_v1,
    validate: note_v1_valid,
}];

fn note_current(p: &[u8]) -> Result<Note, String> {
    rkyv::from_bytes::<Note, Error>(p).map_err(|e| e.to_string())
}

#[test]
fn a_v1_payload_still_decodes_after_its_kind_gets_a_v2() {
    // Written by a tacho that knew only version 1 (pinned bytes).
    let v1 = aligned(&std::fs::read(fixtures().join("payloads/test.note.v1.bin")).unwrap());
    assert_eq!(
        &v1[..],
        &rkyv::to_bytes::<Error>(&NoteV1 {
            text: "written by v1, read by v2".into()
        })
        .unwrap()[..]
    );
    // Version 2 is current: v1 goes through its own decoder, v2 through the current
    // struct, v3 is refused.
    let got = decode_versioned(9999, 1, 2, &v1, note_current, NOTE_OLD).unwrap();
    assert_eq!(
        got,
        Note {
            text: "written by v1, read by v2".into(),
            level: 0
        }
    );
    validate_versioned(9999, 1, 2, &v1, |_| Err("not v2".into()), NOTE_OLD).unwrap();
    let v2 = aligned(
        &rkyv::to_bytes::<Error>(&Note {
            text: "v2".into(),
            level: 3,
        })
        .unwrap(),
    );
    assert_eq!(
        decode_versioned(9999, 2, 2, &v2, note_current, NOTE_OLD).unwrap(),
        Note {
            text: "v2".into(),
            level: 3
        }
    );
    assert!(matches!(
        decode_versioned(9999, 3, 2, &v2, note_current, NOTE_OLD),
        Err(SchemaError::UnknownVersion { .. })
    ));
    // Without the old decoder, the v1 payload would be refused, not misread.
    assert!(matches!(
        decode_versioned(9999, 1, 2, &v1, note_current, &[]),
        Err(SchemaError::UnknownVersion { .. })
    ));
}
