//! Two things cargo cannot know on its own.
//!
//! * `sqlx::migrate!` embeds the migration files when the crate compiles, but cargo does not
//!   know to recompile when a file is added there: without these lines, a new migration would
//!   be left out of the binary until some other change rebuilt it.
//! * The gRPC binding's interface definitions (`proto/`) are compiled into one descriptor set
//!   the binary reads at run time, with a pure-Rust compiler: building needs no `protoc`. The
//!   same set gives the message types of A2A's own package (`lf.a2a.v1.rs`), in which the
//!   binding writes the answers on the turn's path.

fn main() {
    println!("cargo:rerun-if-changed=src/store/sqlite/migrations");
    println!("cargo:rerun-if-changed=src/store/postgres/migrations");
    println!("cargo:rerun-if-changed=proto");
    let files = [
        "a2a.proto",
        "grpc/health/v1/health.proto",
        "google/rpc/status.proto",
        "google/rpc/error_details.proto",
    ];
    let descriptors = match protox::compile(files, ["proto"]) {
        Ok(descriptors) => descriptors,
        Err(e) => panic!("the interface definitions in proto/ do not compile: {e}"),
    };
    let out = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR");
    let path = std::path::Path::new(&out).join("descriptors.bin");
    std::fs::write(&path, prost::Message::encode_to_vec(&descriptors))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    prost_build::Config::new()
        .out_dir(&out)
        .compile_fds(descriptors)
        .unwrap_or_else(|e| panic!("the message types of proto/ cannot be generated: {e}"));
}
