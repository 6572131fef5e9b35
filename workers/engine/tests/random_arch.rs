//! The llama, qwen2 and gemma3 forwards at every quant type the CPU kernels
//! take, against llama.cpp on small random-weight GGUFs (`gguf-random`, seed
//! 1, SmolLM2's vocabulary), the way the Qwen2.5-7B Q4_K_M path is proven here
//! without its 4.7 GB file. The files are regenerated (deterministically) by
//! the test; llama.cpp's logits were recorded from the same files into
//! tests/fixtures/random_arch_reference.json by bench/reference/record-gguf.mjs.
//!
//! Tolerance: on each greedy step, llama.cpp's 20 highest logits are within
//! 0.25 + 5% of the step's logit range of ours (both engines quantize
//! activations to 8 bits, in different blocks: Q8_K per 256 values for
//! llama.cpp's k-quant dots, per 32 here), and the greedy picks agree until a
//! step where llama.cpp's own top two logits are within 0.5 of each other.

mod common;

use switchyard_engine::llama::{Arch, Backend, LlamaModel};
use switchyard_engine::{parity, random_gguf};

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().expect("id array").iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn check(arch: &str, dtype: &str) {
    check_on(arch, dtype, Backend::Kernels)
}

fn check_on(arch: &str, dtype: &str, backend: Backend) {
    let fx = common::fixture("random_arch_reference.json");
    let case = &fx["cases"][format!("{arch}-{dtype}")];
    let dir = std::env::temp_dir().join(format!("switchyard-random-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // One file per test: tests run in parallel.
    let file = dir.join(format!("{arch}-{dtype}-{}.gguf", if matches!(backend, Backend::Candle(_)) { "candle" } else { "kernels" }));
    random_gguf::write_random(&file, Arch::from_name(arch).unwrap(), random_gguf::dtype_of(dtype).unwrap(), &common::smollm_path(), 1).unwrap();
    let on_device = matches!(backend, Backend::Candle(_));
    let m = LlamaModel::load_on(&file, backend).unwrap();
    std::fs::remove_file(&file).ok();
    assert_eq!(m.cfg.arch.name(), arch);
    if !on_device {
        assert!(m.matrix_types().contains(&format!("o={dtype}")), "{} kept as {dtype}: {}", arch, m.matrix_types());
    }
    let prompt = ids(&case["prompt_ids"]);
    // Token ids on the real vocabulary are llama.cpp's.
    assert_eq!(m.tokenizer.encode(case["prompt"].as_str().unwrap(), true, true), prompt);
    let want = ids(&case["completion_ids"]);
    let (got, logits) = parity::greedy(&m, &prompt, want.len()).unwrap();
    let mut worst = 0f32;
    for (i, step) in case["steps"].as_array().unwrap().iter().enumerate() {
        let top: Vec<(usize, f32)> = step["top_logits"].as_array().unwrap().iter().map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_f64().unwrap() as f32)).collect();
        let range = top[0].1 - top[top.len() - 1].1;
        for &(id, l) in &top {
            let d = (logits[i][id] - l).abs();
            worst = worst.max(d);
            assert!(d <= 0.25 + 0.05 * range, "{arch} {dtype} step {i}: token {id} logit {} vs llama.cpp {l} (range {range})", logits[i][id]);
        }
        if got[i] != want[i] {
            let margin = step["margin"].as_f64().unwrap();
            assert!(margin < 0.5, "{arch} {dtype} step {i}: picked {} where llama.cpp picked {} with margin {margin}", got[i], want[i]);
            break;
        }
    }
    eprintln!("{arch} {dtype} on {}: max |logit diff| over llama.cpp's top 20: {worst:.3}", m.backend_name());
}

macro_rules! cases {
    ($($name:ident: $arch:literal, $t:literal;)*) => {
        $(#[test] fn $name() { check($arch, $t); })*
    };
}

cases! {
    llama_q4_k: "llama", "q4_k"; llama_q5_k: "llama", "q5_k"; llama_q6_k: "llama", "q6_k";
    llama_q8_0: "llama", "q8_0"; llama_q5_0: "llama", "q5_0"; llama_q4_1: "llama", "q4_1";
    qwen2_q4_k: "qwen2", "q4_k"; qwen2_q5_k: "qwen2", "q5_k"; qwen2_q6_k: "qwen2", "q6_k";
    qwen2_q8_0: "qwen2", "q8_0"; qwen2_q5_0: "qwen2", "q5_0"; qwen2_q4_1: "qwen2", "q4_1";
    gemma3_q4_k: "gemma3", "q4_k"; gemma3_q5_k: "gemma3", "q5_k"; gemma3_q6_k: "gemma3", "q6_k";
    gemma3_q8_0: "gemma3", "q8_0"; gemma3_q5_0: "gemma3", "q5_0"; gemma3_q4_1: "gemma3", "q4_1";
}

// The candle executor (the code a CUDA build runs; here on the CPU device)
// on the qwen2 layout: q/k/v biases and NeoX rope, Q4_K_M's two types.
#[test]
fn qwen2_q4_k_on_candle() {
    check_on("qwen2", "q4_k", Backend::Candle(candle_core::Device::Cpu));
}

#[test]
fn qwen2_q6_k_on_candle() {
    check_on("qwen2", "q6_k", Backend::Candle(candle_core::Device::Cpu));
}

// ... and on the gemma3 layout: q/k norms, post-norms, GeGLU, the embedding
// scale, and an 8-position window on five of the six layers, which the
// prompts cross. Q4_K_M's types and the Q5_0 / Q8_0 of Gemma 3 270M's file.
#[test]
fn gemma3_q4_k_on_candle() {
    check_on("gemma3", "q4_k", Backend::Candle(candle_core::Device::Cpu));
}

#[test]
fn gemma3_q6_k_on_candle() {
    check_on("gemma3", "q6_k", Backend::Candle(candle_core::Device::Cpu));
}

#[test]
fn gemma3_q5_0_on_candle() {
    check_on("gemma3", "q5_0", Backend::Candle(candle_core::Device::Cpu));
}

#[test]
fn gemma3_q8_0_on_candle() {
    check_on("gemma3", "q8_0", Backend::Candle(candle_core::Device::Cpu));
}
