//! One authorization decision with the fifty policies of `bench/policies-50.cedar`: a GetTask
//! and a SendMessage of a peer the policies permit, and a call they deny, each remembered (the
//! same facts asked again), and a decision made afresh (a message size the policies read, new
//! each time).
//!
//! `cargo bench --bench authorization`

use criterion::{Criterion, criterion_group, criterion_main};
use peergate::authz::{CallAsk, Loaded, PeerFacts, PolicyFiles};
use std::hint::black_box;

fn decisions(c: &mut Criterion) {
    let files = PolicyFiles {
        policies: concat!(env!("CARGO_MANIFEST_DIR"), "/bench/policies-50.cedar").into(),
        schema: None,
    };
    let policies = Loaded::read(&files).unwrap();
    let ask = |name: &'static str, operation: &'static str| CallAsk {
        peer: PeerFacts {
            id: "peer_0123456789abcdef0123456789abcdef",
            name,
            owner_id: "owner",
            scheme: "bearer",
            issuer: None,
            subject: None,
            scopes: None,
            claims: &[],
        },
        operation,
        binding: "JSONRPC",
        client: Some("127.0.0.1".parse().unwrap()),
        now: peergate::clock::Timestamp::now(),
        task: Some("0190a0a0-0000-7000-8000-000000000000"),
        context: None,
        message_size: 0,
        part_kinds: Vec::new(),
        media_types: Vec::new(),
        extensions: &[],
    };
    for (label, name, operation, allowed) in [
        ("GetTask, permitted", "bench", "GetTask", true),
        ("SendMessage, permitted", "bench", "SendMessage", true),
        ("GetTask, denied", "outsider", "GetTask", false),
    ] {
        let asked = ask(name, operation);
        assert_eq!(policies.decide_call(&asked).allowed, allowed);
        c.bench_function(&format!("decide with 50 policies: {label}"), |b| {
            b.iter(|| black_box(policies.decide_call(black_box(&asked))))
        });
    }
    let mut fresh = ask("bench", "SendMessage");
    c.bench_function("decide with 50 policies: SendMessage, made afresh", |b| {
        b.iter(|| {
            fresh.message_size += 1;
            black_box(policies.decide_call(black_box(&fresh)))
        })
    });
}

criterion_group!(benches, decisions);
criterion_main!(benches);
