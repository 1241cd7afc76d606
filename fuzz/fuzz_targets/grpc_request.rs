#![no_main]
//! Arbitrary bytes into `peergate::fuzzing::grpc_request`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peergate::fuzzing::grpc_request(data);
});
