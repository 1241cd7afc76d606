#![no_main]
//! Arbitrary bytes into `peergate::fuzzing::policy`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peergate::fuzzing::policy(data);
});
