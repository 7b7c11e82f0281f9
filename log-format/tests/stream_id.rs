//! A stream's id is the first 16 bytes of `blake3::derive_key("tacho stream id v1",
//! name)`, however it is computed (the context's key is computed once).

use tacho_log_format::StreamId;

#[test]
fn stream_id_is_the_derived_key_of_the_name() {
    for name in ["", "x", "ses_01jdemo8xk4rate1imit0000a", &"A".repeat(300)] {
        let want = blake3::derive_key("tacho stream id v1", name.as_bytes());
        assert_eq!(StreamId::of_name(name).0[..], want[..16], "{name}");
    }
}
