#![no_main]
//! Arbitrary bytes into `peergate::fuzzing::jcs`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peergate::fuzzing::jcs(data);
});
