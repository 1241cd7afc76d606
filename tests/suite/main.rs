//! The integration tests, as one test binary: each file here is one suite (`cargo test --test
//! suite -- door::` runs one), sharing `tests/common`. One binary links the crate once instead
//! of once per suite, which kept `target/` several gigabytes smaller and the test command
//! minutes shorter on two cores. `tests/argon2_memory.rs` stays a binary of its own, because it
//! reads its process's resident size, and `tests/layering.rs`, which reads only the sources.

#[path = "../common/mod.rs"]
mod common;

mod a2a_backend;
mod admin;
mod answer_log;
mod authorization;
mod call;
mod caller_assertion;
mod capabilities;
mod card_cache;
mod card_keys;
mod card_signing;
mod card_verify;
mod cli;
mod cluster;
mod container;
mod content_guard;
mod deploy;
mod docs;
mod door;
mod fuzz_corpus;
mod gate;
mod grpc;
mod guard;
mod h2_clients;
mod hardening;
mod identity;
mod jose_crosscheck;
mod js_sdk;
mod mtls;
mod openai_backend;
mod properties;
mod push;
mod python_sdk;
mod receipts;
mod reload;
mod resource_metadata;
mod rest;
mod shared_engines;
mod store_agree;
mod store_engines;
mod store_upgrade;
mod support;
mod telemetry;
