//! Replay packages: one session's segments in one self-verifying file (SPEC.md §9),
//! for `session replay --mode export` and for verification on another machine.

use std::path::PathBuf;
use std::sync::Arc;

use tacho_log_format::{
    ScanLimits, Scanner, SegmentEnd, parse_segment_file_name, segment_file_name,
};

use crate::store::{Store, StoreError, StoreOptions, stream_dir_name};
use crate::vfs::{SimFs, Vfs};

/// The first eight bytes of a package.
pub const PACKAGE_MAGIC: [u8; 8] = *b"TACHOPKG";
/// The package format version.
pub const PACKAGE_VERSION: u16 = 1;
const DIGEST_CONTEXT: &str = "tacho replay package v1";

/// Why a package could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("not a tacho replay package (bad magic)")]
    BadMagic,
    #[error(
        "package version {0} is not supported by this tacho (it reads version 1); upgrade tacho"
    )]
    UnsupportedVersion(u16),
    #[error("the package is cut short at byte {0}")]
    Truncated(usize),
    #[error("the package digest does not match: the file was changed or damaged after export")]
    DigestMismatch,
    #[error("the package is malformed at byte {offset}: {what}")]
    Malformed { offset: usize, what: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Writes the package of `session`: its segments, each up to the end of its committed
/// data (no free space, no uncommitted tail), and the digest.
pub fn export_package(store: &Store, session: &str) -> Result<Vec<u8>, StoreError> {
    let segs = store.segment_files(session)?;
    let mut out = Vec::new();
    out.extend_from_slice(&PACKAGE_MAGIC);
    out.extend_from_slice(&PACKAGE_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(segs.len() as u32).to_le_bytes());
    out.extend_from_slice(&(session.len() as u16).to_le_bytes());
    out.extend_from_slice(session.as_bytes());
    for (i, seg) in segs.iter().enumerate() {
        let bytes = store.read_segment(seg, i + 1 < segs.len())?;
        let mut scan = Scanner::new(
            &bytes,
            ScanLimits {
                verify_chain: false,
            },
        );
        while scan.next_batch().is_some() {}
        let len = match scan.end() {
            Some(SegmentEnd::Sealed { len, .. }) => *len,
            _ => scan.valid_len(),
        };
        out.extend_from_slice(&seg.first_seq.to_le_bytes());
        out.extend_from_slice(&(len as u64).to_le_bytes());
        out.extend_from_slice(&bytes[..len]);
    }
    let digest = blake3::Hasher::new_derive_key(DIGEST_CONTEXT)
        .update(&out)
        .finalize();
    out.extend_from_slice(digest.as_bytes());
    Ok(out)
}

/// One segment of a package: its first sequence number and its bytes.
pub type Segment<'a> = (u64, &'a [u8]);

/// The session id and segments (first sequence number, bytes) of a package, its
/// digest and layout checked (SPEC.md §9); the bytes borrow from `bytes`.
pub fn package_segments(bytes: &[u8]) -> Result<(String, Vec<Segment<'_>>), PackageError> {
    if bytes.len() < 8 || bytes[..8] != PACKAGE_MAGIC {
        return Err(PackageError::BadMagic);
    }
    if bytes.len() < 8 + 2 + 2 + 4 + 2 + 32 {
        return Err(PackageError::Truncated(bytes.len()));
    }
    let body_len = bytes.len() - 32;
    let digest = blake3::Hasher::new_derive_key(DIGEST_CONTEXT)
        .update(&bytes[..body_len])
        .finalize();
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != PACKAGE_VERSION {
        return Err(PackageError::UnsupportedVersion(version));
    }
    if digest.as_bytes()[..] != bytes[body_len..] {
        return Err(PackageError::DigestMismatch);
    }
    let body = &bytes[..body_len];
    if bytes[10..12] != [0, 0] {
        return Err(PackageError::Malformed {
            offset: 10,
            what: "the reserved field is not zero".into(),
        });
    }
    let mut pos = 12;
    let take = |pos: &mut usize, n: usize| -> Result<&[u8], PackageError> {
        let s = body
            .get(*pos..pos.saturating_add(n))
            .ok_or(PackageError::Truncated(*pos))?;
        *pos += n;
        Ok(s)
    };
    let u64_at = |s: &[u8]| u64::from_le_bytes(s.try_into().unwrap_or([0; 8]));
    let count = u32::from_le_bytes(take(&mut pos, 4)?.try_into().unwrap_or([0; 4]));
    let id_len = u16::from_le_bytes(take(&mut pos, 2)?.try_into().unwrap_or([0; 2])) as usize;
    let session = std::str::from_utf8(take(&mut pos, id_len)?)
        .map_err(|_| PackageError::Malformed {
            offset: pos,
            what: "session id is not UTF-8".into(),
        })?
        .to_string();
    tacho_schema::validate_session_id(&session).map_err(|e| PackageError::Malformed {
        offset: pos,
        what: e,
    })?;
    if count == 0 {
        return Err(PackageError::Malformed {
            offset: 12,
            what: "no segment: a package holds a whole session".into(),
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut segments = Vec::new();
    for _ in 0..count {
        let at = pos;
        let first_seq = u64_at(take(&mut pos, 8)?);
        if !seen.insert(first_seq) {
            return Err(PackageError::Malformed {
                offset: at,
                what: format!("a second segment starting at event {first_seq}"),
            });
        }
        let len =
            usize::try_from(u64_at(take(&mut pos, 8)?)).map_err(|_| PackageError::Truncated(at))?;
        let data = take(&mut pos, len)?;
        if parse_segment_file_name(&segment_file_name(first_seq)) != Some(first_seq) {
            return Err(PackageError::Malformed {
                offset: at,
                what: "bad segment name".into(),
            });
        }
        segments.push((first_seq, data));
    }
    if pos != body.len() {
        return Err(PackageError::Malformed {
            offset: pos,
            what: format!("{} bytes after the last segment", body.len() - pos),
        });
    }
    Ok((session, segments))
}

/// Reads a package into a store of its own, in memory, so that the engine's own
/// verification runs on it unchanged. Returns the store and the session id.
pub fn open_package(bytes: &[u8]) -> Result<(Store, String), PackageError> {
    let (session, segments) = package_segments(bytes)?;
    let fs = SimFs::new();
    let root = PathBuf::from("/package");
    let dir = root.join("streams").join(stream_dir_name(&session));
    fs.create_dir_all(&dir)
        .map_err(|e| StoreError::io(&dir, e))?;
    for (first_seq, data) in segments {
        fs.set_file(&dir.join(segment_file_name(first_seq)), data.to_vec());
    }
    let store = Store::open_with(Arc::new(fs) as Arc<dyn Vfs>, root, StoreOptions::default())?;
    Ok((store, session))
}
