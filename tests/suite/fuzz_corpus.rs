//! Replays every committed fuzz corpus on stable, so the properties the fuzz targets check
//! hold for every seed in every `cargo test`.

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        check(&data);
        count += 1;
    }
    assert!(count >= 4, "corpus {target} has only {count} seeds");
}

#[test]
fn jsonrpc_envelope_corpus() {
    replay("jsonrpc_envelope", peergate::fuzzing::jsonrpc_envelope);
}

#[test]
fn card_verifier_corpus() {
    replay("card_verifier", peergate::fuzzing::card_verifier);
}

#[test]
fn jcs_corpus() {
    replay("jcs", peergate::fuzzing::jcs);
}

#[test]
fn token_parse_corpus() {
    replay("token_parse", peergate::fuzzing::token_parse);
}

#[test]
fn forwarded_for_corpus() {
    replay("forwarded_for", peergate::fuzzing::forwarded_for);
}

#[test]
fn basic_header_corpus() {
    replay("basic_header", peergate::fuzzing::basic_header);
}

#[test]
fn certificate_der_corpus() {
    replay("certificate_der", peergate::fuzzing::certificate_der);
}

#[test]
fn access_token_corpus() {
    replay("access_token", peergate::fuzzing::access_token);
}

#[test]
fn grpc_request_corpus() {
    replay("grpc_request", peergate::fuzzing::grpc_request);
}

#[test]
fn rest_request_corpus() {
    replay("rest_request", peergate::fuzzing::rest_request);
}

#[test]
fn policy_corpus() {
    replay("policy", peergate::fuzzing::policy);
}
