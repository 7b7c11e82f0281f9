//! The BLAKE3 hash chain.
//!
//! The chain is advanced once per committed batch, not once per record: hashing a
//! contiguous span of bytes is fast, while finalizing a hash per 200-byte record is not.
//! `next = BLAKE3-keyed(key = previous, input = span)`, where the span is every byte of
//! the segment between the end of the previous commit frame (or the start of the
//! segment, header included) and the start of this commit frame.

/// A 32-byte chain value. The value before the first batch of a stream is all zeros.
pub type ChainValue = [u8; 32];

/// Computes the chain value that follows `previous` over `span`.
pub fn chain_step(previous: &ChainValue, span: &[u8]) -> ChainValue {
    *blake3::Hasher::new_keyed(previous)
        .update(span)
        .finalize()
        .as_bytes()
}

/// An incremental chain step, for spans that are not contiguous in memory (the writer
/// hashes the segment header it already wrote together with a new batch).
#[derive(Debug, Clone)]
pub struct Chain {
    hasher: blake3::Hasher,
}

impl Chain {
    /// Starts a step from `previous`.
    pub fn start(previous: &ChainValue) -> Self {
        Chain {
            hasher: blake3::Hasher::new_keyed(previous),
        }
    }

    /// Adds bytes of the span.
    pub fn update(&mut self, bytes: &[u8]) -> &mut Self {
        self.hasher.update(bytes);
        self
    }

    /// The chain value after the span.
    pub fn finish(&self) -> ChainValue {
        *self.hasher.finalize().as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incremental_equals_one_shot() {
        let prev = [7u8; 32];
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut c = Chain::start(&prev);
        c.update(&data[..1234]).update(&data[1234..]);
        assert_eq!(c.finish(), chain_step(&prev, &data));
        assert_ne!(chain_step(&prev, &data), chain_step(&[0u8; 32], &data));
    }
}
