#![no_main]
//! Arbitrary bytes into `peergate::fuzzing::basic_header`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peergate::fuzzing::basic_header(data);
});
