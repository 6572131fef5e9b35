//! Generates the protocol types from the shared .proto with protox (a pure-Rust
//! protobuf compiler), so building the engine never needs a `protoc` binary.

use std::path::PathBuf;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let proto_root = manifest_dir.join("../../proto");
    let proto_file = proto_root.join("switchyard/engine/v1/engine.proto");
    println!("cargo:rerun-if-changed={}", proto_file.display());

    let fds = protox::compile([&proto_file], [&proto_root]).unwrap_or_else(|err| {
        panic!("compiling {}: {err:?}", proto_file.display());
    });
    prost_build::Config::new()
        .compile_fds(fds)
        .expect("generating Rust types from engine.proto");
}
