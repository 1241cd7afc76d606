#![no_main]
//! Arbitrary bytes into `peergate::fuzzing::card_verifier`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peergate::fuzzing::card_verifier(data);
});
