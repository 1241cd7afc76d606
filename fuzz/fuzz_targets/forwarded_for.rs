#![no_main]
//! Arbitrary bytes into `peergate::fuzzing::forwarded_for`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peergate::fuzzing::forwarded_for(data);
});
