#![no_main]
//! Arbitrary bytes into the JSON-RPC envelope parser of the A2A door.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    peergate::fuzzing::jsonrpc_envelope(data);
});
