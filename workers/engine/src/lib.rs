//! Switchyard's inference engine: a stdio protobuf service (see
//! proto/switchyard/engine/v1/engine.proto) running llama GGUF generation
//! with continuous batching and BERT sentence embeddings.

pub mod batch;
pub mod bench;
pub mod bert;
pub mod devices;
pub mod engine;
pub mod grammar;
pub mod kernels;
pub mod llama;
pub mod par;
pub mod plan;
pub mod parity;
pub mod prefix;
pub mod protocol;
pub mod shard;
pub mod sampling;
pub mod slice;
pub mod spm;
pub mod random_gguf;
pub mod tokenizer;
pub mod tools;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where models live for tests and the bench default: $SWITCHYARD_MODELS_DIR,
/// else ~/.cache/switchyard/models.
pub fn models_dir() -> std::path::PathBuf {
    if let Ok(d) = std::env::var("SWITCHYARD_MODELS_DIR") {
        return d.into();
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| ".".into());
    std::path::Path::new(&home).join(".cache/switchyard/models")
}
