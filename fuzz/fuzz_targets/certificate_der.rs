#![no_main]
//! Arbitrary bytes into `peergate::fuzzing::certificate_der`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peergate::fuzzing::certificate_der(data);
});
