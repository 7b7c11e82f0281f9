//! Git's delta encoding (`gitformat-pack`, "Deltified representation"): how gc stores
//! one version of a file as the changes from another.
//!
//! A delta is the source's size and the target's size (each a little-endian base-128
//! varint), then instructions: a copy (`0x80` with a presence bit for each non-zero
//! byte of a 32-bit source offset and a 24-bit size, size 0 meaning 0x10000) or an
//! insert (1..=127 literal bytes, the first byte their count).
//!
//! The encoder copies the common prefix and suffix of source and target whole (a
//! one-line edit of a large file costs a few bytes and a pass of `memcmp`), then scans
//! what lies between: the source is indexed by a hash of each 16-byte block at a
//! multiple of 16, the target is scanned with the same hash rolling byte by byte, and
//! a block found in the source is extended forwards and backwards (into the bytes not
//! yet encoded) as far as source and target agree. What no match covers is inserted.
//! Time is linear in the sizes: each target byte is hashed once, at most
//! [`CANDIDATES`] source blocks are tried at a byte, and a match moves the scan past
//! it.
//!
//! No maintained crate writes this format (gix-pack only applies deltas); see
//! ARCHITECTURE.md.

/// The bytes one hash covers, and the spacing of the source's indexed blocks.
const BLOCK: usize = 16;

/// At most this many source blocks with the target's hash are tried at one position
/// (a file of repeated lines has many blocks alike).
const CANDIDATES: usize = 64;

/// The largest size one copy instruction names (24 bits).
const MAX_COPY: usize = 0xFF_FFFF;

/// The most literal bytes one insert instruction carries.
const MAX_INSERT: usize = 0x7F;

/// A copy of fewer bytes than this is inserted instead (a copy instruction costs up to
/// 8 bytes; the scan finds no shorter match anyway).
const MIN_COPY: usize = BLOCK;

/// The multiplier of the rolling hash (FNV's prime).
const MUL: u32 = 0x0100_0193;

/// The delta that turns `source` into `target`, or `None` when it would be `limit`
/// bytes or more (not worth storing) or `source` is too large for copy offsets (4 GiB,
/// offsets are 32 bits).
pub(crate) fn encode(source: &[u8], target: &[u8], limit: usize) -> Option<Vec<u8>> {
    u32::try_from(source.len()).ok()?;
    let mut out = Out {
        buf: Vec::with_capacity(limit.min(target.len() / 4 + 64)),
        limit,
    };
    out.varint(source.len() as u64);
    out.varint(target.len() as u64);
    out.check()?;
    // The common ends, each when long enough to be worth a copy.
    let mut prefix = common_prefix(source, target);
    if prefix < MIN_COPY {
        prefix = 0;
    }
    let rest = source.len().min(target.len()) - prefix;
    let mut suffix = common_suffix(
        source.get(source.len() - rest..).unwrap_or_default(),
        target.get(target.len() - rest..).unwrap_or_default(),
    );
    if suffix < MIN_COPY {
        suffix = 0;
    }
    if prefix > 0 {
        out.copy(0, prefix)?;
    }
    let end = target.len() - suffix;
    if end > prefix {
        scan(source, target, prefix, end, &mut out)?;
    }
    if suffix > 0 {
        out.copy(source.len() - suffix, suffix)?;
    }
    Some(out.buf)
}

/// Encodes `target[start..end]` into `out`: copies of what the source holds, inserts
/// of the rest.
fn scan(source: &[u8], target: &[u8], start: usize, end: usize, out: &mut Out) -> Option<()> {
    // Where the bytes not yet encoded begin.
    let mut pending = start;
    if end - start >= BLOCK && source.len() >= BLOCK {
        let index = Index::new(source);
        let top = MUL.wrapping_pow(BLOCK as u32 - 1);
        let mut at = start;
        let mut hash = block_hash(target.get(at..at + BLOCK)?);
        loop {
            let mut best: Option<(usize, usize, usize)> = None;
            let window = target.get(at..at + BLOCK)?;
            for s in index.candidates(hash).take(CANDIDATES) {
                if source.get(s..s + BLOCK) != Some(window) {
                    continue;
                }
                let forward = BLOCK
                    + common_prefix(
                        source.get(s + BLOCK..).unwrap_or_default(),
                        target.get(at + BLOCK..end).unwrap_or_default(),
                    );
                let back = common_suffix(
                    source.get(..s).unwrap_or_default(),
                    target.get(pending..at).unwrap_or_default(),
                );
                let len = back + forward;
                if best.is_none_or(|(_, _, l)| len > l) {
                    best = Some((s - back, at - back, len));
                }
            }
            match best {
                Some((s, t, len)) => {
                    out.insert(target.get(pending..t)?)?;
                    out.copy(s, len)?;
                    at = t + len;
                    pending = at;
                    if end - at < BLOCK {
                        break;
                    }
                    hash = block_hash(target.get(at..at + BLOCK)?);
                }
                None => {
                    if at + BLOCK >= end {
                        break;
                    }
                    let (old, new) = (*target.get(at)?, *target.get(at + BLOCK)?);
                    hash = hash
                        .wrapping_sub(byte(old).wrapping_mul(top))
                        .wrapping_mul(MUL)
                        .wrapping_add(byte(new));
                    at += 1;
                }
            }
        }
    }
    out.insert(target.get(pending..end)?)
}

fn byte(b: u8) -> u32 {
    u32::from(b) + 1
}

/// The rolling hash of one block (a polynomial in [`MUL`], modulo 2^32).
fn block_hash(block: &[u8]) -> u32 {
    block
        .iter()
        .fold(0u32, |h, &b| h.wrapping_mul(MUL).wrapping_add(byte(b)))
}

/// The source's blocks at multiples of [`BLOCK`], by hash: a bucket's blocks are
/// chained, the earliest first.
struct Index {
    shift: u32,
    /// The first block of each bucket (`u32::MAX`: none).
    heads: Vec<u32>,
    /// The next block of the same bucket after each block.
    next: Vec<u32>,
}

impl Index {
    fn new(source: &[u8]) -> Self {
        let blocks = source.len() / BLOCK;
        let bits = blocks.next_power_of_two().trailing_zeros().max(1);
        let mut index = Index {
            shift: 32 - bits,
            heads: vec![u32::MAX; 1 << bits],
            next: vec![u32::MAX; blocks],
        };
        // Last to first, so each chain runs from the earliest block.
        for (n, block) in source.chunks_exact(BLOCK).enumerate().rev() {
            let bucket = index.bucket(block_hash(block));
            if let (Some(head), Some(next)) = (index.heads.get_mut(bucket), index.next.get_mut(n)) {
                *next = *head;
                *head = n as u32;
            }
        }
        index
    }

    fn bucket(&self, hash: u32) -> usize {
        (hash.wrapping_mul(0x9E37_79B1) >> self.shift) as usize
    }

    /// The offsets of the source blocks whose hash falls in `hash`'s bucket.
    fn candidates(&self, hash: u32) -> impl Iterator<Item = usize> + '_ {
        let mut n = self
            .heads
            .get(self.bucket(hash))
            .copied()
            .unwrap_or(u32::MAX);
        std::iter::from_fn(move || {
            if n == u32::MAX {
                return None;
            }
            let at = n as usize;
            n = self.next.get(at).copied().unwrap_or(u32::MAX);
            Some(at * BLOCK)
        })
    }
}

/// How many bytes `a` and `b` have in common from their starts.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let mut n = 0;
    // Whole chunks compare as `memcmp` does; the first that differs byte by byte.
    for (x, y) in a.chunks(CHUNK).zip(b.chunks(CHUNK)) {
        if x != y {
            return n + x.iter().zip(y).take_while(|(x, y)| x == y).count();
        }
        n += x.len();
    }
    n
}

/// How many bytes `a` and `b` have in common at their ends.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let mut n = 0;
    for (x, y) in a.rchunks(CHUNK).zip(b.rchunks(CHUNK)) {
        if x != y {
            return n + x
                .iter()
                .rev()
                .zip(y.iter().rev())
                .take_while(|(x, y)| x == y)
                .count();
        }
        n += x.len();
    }
    n
}

/// The bytes [`common_prefix`] and [`common_suffix`] compare at once.
const CHUNK: usize = 32;

/// The delta being written, abandoned once it reaches `limit` bytes.
struct Out {
    buf: Vec<u8>,
    limit: usize,
}

impl Out {
    fn check(&self) -> Option<()> {
        (self.buf.len() < self.limit).then_some(())
    }

    fn varint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.buf.push(0x80 | (n & 0x7F) as u8);
            n >>= 7;
        }
        self.buf.push(n as u8);
    }

    fn insert(&mut self, bytes: &[u8]) -> Option<()> {
        for chunk in bytes.chunks(MAX_INSERT) {
            self.buf.push(chunk.len() as u8);
            self.buf.extend_from_slice(chunk);
        }
        self.check()
    }

    /// Copies of `len` bytes from `offset` of the source (below 4 GiB: `encode` checks
    /// the source's size).
    fn copy(&mut self, mut offset: usize, mut len: usize) -> Option<()> {
        while len > 0 {
            let size = len.min(MAX_COPY);
            let at = self.buf.len();
            self.buf.push(0x80);
            let mut cmd = 0x80u8;
            let o = u32::try_from(offset).ok()?.to_le_bytes();
            for (bit, b) in o.into_iter().enumerate() {
                if b != 0 {
                    cmd |= 1 << bit;
                    self.buf.push(b);
                }
            }
            // 0x10000 is written as no size bytes at all.
            if size != 0x1_0000 {
                let s = (size as u32).to_le_bytes();
                for (bit, b) in s.into_iter().take(3).enumerate() {
                    if b != 0 {
                        cmd |= 0x10 << bit;
                        self.buf.push(b);
                    }
                }
            }
            *self.buf.get_mut(at)? = cmd;
            offset += size;
            len -= size;
        }
        self.check()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    /// Applies `delta` to `source` as gix does: through a pack of the source (a blob)
    /// and the delta against it, indexed by gix-pack (which resolves the delta and
    /// hashes the result) and read back through gix-pack's own decoder.
    fn gix_apply(source: &[u8], delta: &[u8], target_len: usize) -> Vec<u8> {
        use gix_pack::data::output;
        let kind = gix::object::Kind::Blob;
        let compress = |data: &[u8]| {
            let mut z = gix::zlib::stream::deflate::Write::new(
                Vec::new(),
                gix::zlib::Compression::BEST_SPEED,
            );
            std::io::Write::write_all(&mut z, data).unwrap();
            std::io::Write::flush(&mut z).unwrap();
            z.into_inner()
        };
        let base_id = gix::objs::compute_hash(gix::hash::Kind::Sha1, kind, source).unwrap();
        let entries = vec![
            output::Entry {
                id: base_id,
                kind: output::entry::Kind::Base(kind),
                decompressed_size: source.len(),
                compressed_data: compress(source),
            },
            output::Entry {
                // The writer does not read it.
                id: base_id,
                kind: output::entry::Kind::DeltaRef { object_index: 0 },
                decompressed_size: delta.len(),
                compressed_data: compress(delta),
            },
        ];
        let mut pack = Vec::new();
        let writer = output::bytes::FromEntriesIter::new(
            std::iter::once(Ok(entries)),
            &mut pack,
            2,
            gix_pack::data::Version::V2,
            gix::hash::Kind::Sha1,
        );
        for step in writer {
            step.unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let out = gix_pack::Bundle::write_to_directory(
            &mut &pack[..],
            Some(dir.path()),
            &mut gix::progress::Discard,
            &std::sync::atomic::AtomicBool::new(false),
            None::<gix::objs::find::Never>,
            gix::hash::Kind::Sha1,
            gix_pack::bundle::write::Options::default(),
        )
        .unwrap();
        let bundle = gix_pack::Bundle::at(out.index_path.unwrap(), gix::hash::Kind::Sha1).unwrap();
        let mut ids: Vec<_> = bundle.index.iter().map(|e| e.oid).collect();
        ids.retain(|id| *id != base_id);
        // A target equal to its source is one object.
        let id = ids.first().copied().unwrap_or(base_id);
        let mut buf = Vec::new();
        let mut inflate = gix::zlib::Inflate::default();
        let (data, _) = bundle
            .find(&id, &mut buf, &mut inflate, &mut gix_pack::cache::Never)
            .unwrap()
            .unwrap();
        assert_eq!(data.kind, kind);
        assert_eq!(data.data.len(), target_len);
        data.data.to_vec()
    }

    /// Applies `delta` to `source` by the format's definition (for the many cases
    /// where a pack each would be slow).
    fn apply(source: &[u8], delta: &[u8]) -> Vec<u8> {
        fn varint(d: &[u8], at: &mut usize) -> u64 {
            let (mut n, mut shift) = (0u64, 0);
            loop {
                let b = d[*at];
                *at += 1;
                n |= u64::from(b & 0x7F) << shift;
                shift += 7;
                if b & 0x80 == 0 {
                    return n;
                }
            }
        }
        let mut at = 0;
        assert_eq!(varint(delta, &mut at), source.len() as u64);
        let size = varint(delta, &mut at) as usize;
        let mut out = Vec::new();
        while at < delta.len() {
            let cmd = delta[at];
            at += 1;
            if cmd & 0x80 != 0 {
                let (mut offset, mut len) = (0usize, 0usize);
                for bit in 0..4 {
                    if cmd & (1 << bit) != 0 {
                        offset |= usize::from(delta[at]) << (8 * bit);
                        at += 1;
                    }
                }
                for bit in 0..3 {
                    if cmd & (0x10 << bit) != 0 {
                        len |= usize::from(delta[at]) << (8 * bit);
                        at += 1;
                    }
                }
                if len == 0 {
                    len = 0x1_0000;
                }
                out.extend_from_slice(&source[offset..offset + len]);
            } else {
                assert_ne!(cmd, 0, "reserved");
                out.extend_from_slice(&delta[at..at + usize::from(cmd)]);
                at += usize::from(cmd);
            }
        }
        assert_eq!(out.len(), size);
        out
    }

    fn lines(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| {
                let mut l = format!("{i:06} ") + &"abcdefghij".repeat(6);
                l.truncate(63);
                l.push('\n');
                l.into_bytes()
            })
            .collect()
    }

    fn noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn a_one_line_edit_of_a_large_file_is_a_few_bytes() {
        let source = lines(16_384);
        let mut target = source.clone();
        let at = 5_000 * 64;
        target.splice(at..at + 63, b"edited line 5".iter().copied());
        let delta = encode(&source, &target, usize::MAX).unwrap();
        assert!(delta.len() < 40, "{}", delta.len());
        assert_eq!(gix_apply(&source, &delta, target.len()), target);
    }

    #[test]
    fn moved_and_repeated_blocks_are_copied() {
        let source = lines(20_000);
        // The second half first, a stretch twice, a few bytes new.
        let mut target = source[source.len() / 2..].to_vec();
        target.extend_from_slice(b"new bytes");
        target.extend_from_slice(&source[..source.len() / 2]);
        target.extend_from_slice(&source[1000..90_000]);
        let delta = encode(&source, &target, usize::MAX).unwrap();
        assert!(delta.len() < 200, "{}", delta.len());
        assert_eq!(gix_apply(&source, &delta, target.len()), target);
    }

    #[test]
    fn copies_longer_than_one_instruction_and_of_exactly_0x10000() {
        let source = noise(MAX_COPY + 0x2_0000, 7);
        for target in [
            source.clone(),
            [b"x".as_slice(), &source, b"y"].concat(),
            [&source[5..0x1_0005], b"x".as_slice(), &source[..0x1_0000]].concat(),
        ] {
            let delta = encode(&source, &target, usize::MAX).unwrap();
            assert!(delta.len() < 64, "{}", delta.len());
            assert_eq!(apply(&source, &delta), target);
        }
        let target = [b"x".as_slice(), &source, b"y"].concat();
        let delta = encode(&source, &target, usize::MAX).unwrap();
        assert_eq!(gix_apply(&source, &delta, target.len()), target);
        // A copy of 0x10000 bytes names no size at all: `0x80 | 0x01`, offset 1.
        let source = noise(0x2_0000, 8);
        let target = [&source[1..0x1_0001], b"0123456789abcdefgh"].concat();
        let delta = encode(&source, &target, usize::MAX).unwrap();
        assert_eq!(&delta[6..8], &[0x81, 0x01]);
        assert_eq!(gix_apply(&source, &delta, target.len()), target);
    }

    #[test]
    fn unrelated_data_is_refused_at_the_limit() {
        let (source, target) = (noise(100_000, 1), noise(100_000, 2));
        assert_eq!(encode(&source, &target, 50_000), None);
        let delta = encode(&source, &target, usize::MAX).unwrap();
        assert_eq!(gix_apply(&source, &delta, target.len()), target);
    }

    #[test]
    fn empty_source_or_target() {
        for (source, target) in [
            (&b""[..], &b""[..]),
            (b"", b"something"),
            (b"something", b""),
            (b"0123456789abcdefXYZ", b"0123456789abcdefXYZ"),
        ] {
            let delta = encode(source, target, usize::MAX).unwrap();
            assert_eq!(gix_apply(source, &delta, target.len()), target);
        }
    }

    /// Megabytes take milliseconds, whatever they hold: an edit near each end of a file
    /// of lines (the whole middle is scanned), unrelated noise (no match anywhere),
    /// one repeated byte and one repeated short pattern (every block alike).
    #[test]
    fn megabytes_are_encoded_in_milliseconds() {
        let source = lines(16_384);
        let mut target = source.clone();
        target[10] = b'#';
        let n = target.len();
        target[n - 10] = b'#';
        let zeros = vec![0u8; 1 << 20];
        let pattern = b"0123456789abcdef0123".repeat(50_000);
        let cases = [
            (source, target, 300),
            (noise(1 << 20, 3), noise(1 << 20, 4), 1 << 21),
            (zeros.clone(), [&zeros[1..], b"x"].concat(), 64),
            (pattern.clone(), [b"x", &pattern[7..]].concat(), 64),
        ];
        for (source, target, most) in cases {
            let started = std::time::Instant::now();
            let delta = encode(&source, &target, usize::MAX).unwrap();
            let took = started.elapsed();
            assert_eq!(apply(&source, &delta), target);
            assert!(delta.len() < most, "{}", delta.len());
            // Generous for a debug build on a loaded machine; release takes a few ms.
            assert!(took.as_secs() < 5, "{took:?}");
        }
    }

    /// Source and target pairs: edits (insert, delete, replace), moves of a stretch,
    /// binary noise, all of them possibly empty.
    fn pair() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
        let base = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..4096),
            (1usize..3000).prop_map(lines),
            (0usize..200_000, any::<u64>()).prop_map(|(n, s)| noise(n, s)),
            proptest::collection::vec(0u8..3, 0..5000),
        ];
        let edit = (
            0usize..4,
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
            proptest::collection::vec(any::<u8>(), 0..300),
        );
        (base, proptest::collection::vec(edit, 0..12)).prop_map(|(source, edits)| {
            let mut target = source.clone();
            for (what, a, b, bytes) in edits {
                let n = target.len();
                let (x, y) = if n == 0 {
                    (0, 0)
                } else {
                    let (x, y) = (a.index(n), b.index(n));
                    (x.min(y), x.max(y))
                };
                match what {
                    0 => {
                        target.splice(x..x, bytes);
                    }
                    1 => {
                        target.drain(x..y);
                    }
                    2 => {
                        target.splice(x..y, bytes);
                    }
                    _ => {
                        let moved: Vec<u8> = target.drain(x..y).collect();
                        let at = a.index(target.len() + 1);
                        target.splice(at..at, moved);
                    }
                }
            }
            (source, target)
        })
    }

    proptest! {
        #[test]
        fn every_delta_applies_to_its_target((source, target) in pair()) {
            let delta = encode(&source, &target, usize::MAX).unwrap();
            prop_assert_eq!(apply(&source, &delta), target.clone());
            // A limit is either kept or the delta refused.
            let limit = delta.len() / 2 + 1;
            if let Some(d) = encode(&source, &target, limit) {
                prop_assert!(d.len() < limit);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn gix_applies_every_delta((source, target) in pair()) {
            let delta = encode(&source, &target, usize::MAX).unwrap();
            prop_assert_eq!(gix_apply(&source, &delta, target.len()), target);
        }
    }
}
