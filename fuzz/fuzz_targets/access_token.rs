#![no_main]
//! Arbitrary bytes into `peergate::fuzzing::access_token`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peergate::fuzzing::access_token(data);
});
