#![no_main]
//! Arbitrary bytes into `peergate::fuzzing::token_parse`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peergate::fuzzing::token_parse(data);
});
