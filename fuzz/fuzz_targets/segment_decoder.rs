//! Fuzzes the segment and record decoder: header, frames, batches, chain, payloads.
//! Run: see "Fuzzing" in the README.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tacho_tests::fuzz_segment_decoder(data);
});
