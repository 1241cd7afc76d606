#![no_main]
//! Arbitrary bytes into `peergate::fuzzing::rest_request`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peergate::fuzzing::rest_request(data);
});
