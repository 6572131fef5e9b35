//! `switchyard-engine gguf-random OUT.gguf --arch llama|qwen2|gemma3 --type
//! q4_k|q5_k|q6_k|q8_0|q5_0|q4_1 [--vocab-from REAL.gguf] [--seed N]
//! [--shape small|qwen2.5-7b]`: a small model (or, with `--shape
//! qwen2.5-7b`, one of Qwen2.5-7B's size, for the GPU host's decode
//! figure: ~3.9 GB at q4_k, written on that host) with random weights in an architecture's tensor layout, every
//! matrix in one quantization (candle's port of ggml's quantizers), so the
//! engine's forward can be held to llama.cpp's on architectures and types
//! whose real files are too big to fetch here (Qwen2.5-7B in Q4_K_M). The
//! vocabulary (tokens, merges, special ids) is copied from a real GGUF, so
//! prompts tokenize as they would on a real model. Deterministic for a seed.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};

use crate::llama::Arch;

/// Shapes of the generated models: small, but every matrix width a multiple
/// of 256 (the k-quants' super-block).
pub struct Dims {
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    /// Sliding window (gemma3): small, so short prompts cross it.
    pub window: usize,
}

pub static DIMS: Dims = Dims { layers: 6, hidden: 256, heads: 4, kv_heads: 2, head_dim: 64, ffn: 512, window: 8 };

/// Qwen2.5-7B's shapes (its config.json: 28 blocks, hidden 3584, 28 query
/// heads over 4 KV heads of 128, FFN 18944). The vocabulary is the one
/// copied in (`--vocab-from`): with SmolLM2's 49152 tokens instead of
/// Qwen's 152064 the output head is a third of the real one, and every
/// matrix takes `--type` where a real Q4_K_M stores some (and the head) as
/// Q6_K. At q4_k a decode step reads ~3.8 GB of weights against the real
/// file's ~4.5: its tok/s is an upper bound, ~0.85× of it the real file's
/// estimate.
pub static QWEN25_7B: Dims = Dims { layers: 28, hidden: 3584, heads: 28, kv_heads: 4, head_dim: 128, ffn: 18944, window: 4096 };

/// `--shape`'s names.
pub fn dims_named(name: &str) -> Result<&'static Dims> {
    Ok(match name {
        "small" => &DIMS,
        "qwen2.5-7b" => &QWEN25_7B,
        other => bail!("--shape {other:?}: one of small, qwen2.5-7b"),
    })
}

impl Dims {
    /// Parameters of the blocks alone (what `--shape` sizes; the vocabulary's embedding and head come on top).
    pub fn block_params(&self) -> usize {
        let (qd, kvd) = (self.heads * self.head_dim, self.kv_heads * self.head_dim);
        self.layers * (self.hidden * (2 * qd + 2 * kvd) + 3 * self.hidden * self.ffn)
    }
}

pub fn dtype_of(name: &str) -> Result<GgmlDType> {
    Ok(match name {
        "q4_k" => GgmlDType::Q4K,
        "q5_k" => GgmlDType::Q5K,
        "q6_k" => GgmlDType::Q6K,
        "q8_0" => GgmlDType::Q8_0,
        "q5_0" => GgmlDType::Q5_0,
        "q4_1" => GgmlDType::Q4_1,
        other => bail!("--type {other:?}: one of q4_k, q5_k, q6_k, q8_0, q5_0, q4_1"),
    })
}

struct Rng(u64);

impl Rng {
    /// Uniform in [-1, 1).
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32, offset: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.next()).collect()
    }
}

pub fn write_random(out: &Path, arch: Arch, dtype: GgmlDType, vocab_from: &Path, seed: u64) -> Result<()> {
    write_random_shaped(out, arch, dtype, vocab_from, seed, &DIMS)
}

pub fn write_random_shaped(out: &Path, arch: Arch, dtype: GgmlDType, vocab_from: &Path, seed: u64, d: &Dims) -> Result<()> {
    let mut vf = File::open(vocab_from).with_context(|| format!("opening {}", vocab_from.display()))?;
    let vocab_src = gguf_file::Content::read(&mut vf).with_context(|| format!("reading {}", vocab_from.display()))?;
    let n_vocab = vocab_src.metadata.get("tokenizer.ggml.tokens").context("the vocabulary GGUF has no tokens")?.to_vec()?.len();
    let a = arch.name();
    let mut rng = Rng(seed);
    let dev = Device::Cpu;
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    // Weights ~ U(-s, s) with s = 1/sqrt(fan_in) * 1.7 (unit-variance
    // outputs), so activations stay in a range where both engines are well
    // conditioned; norms around 1.
    let matrix = |rng: &mut Rng, name: String, rows: usize, cols: usize, dt: GgmlDType| -> Result<(String, QTensor)> {
        let s = 1.7 / (cols as f32).sqrt();
        let t = Tensor::from_vec(rng.vec(rows * cols, s, 0.0), (rows, cols), &dev)?;
        Ok((name, QTensor::quantize(&t, dt)?))
    };
    let vector = |rng: &mut Rng, name: String, n: usize, scale: f32, offset: f32| -> Result<(String, QTensor)> {
        let t = Tensor::from_vec(rng.vec(n, scale, offset), n, &dev)?;
        Ok((name, QTensor::quantize(&t, GgmlDType::F32)?))
    };
    let (qd, kvd) = (d.heads * d.head_dim, d.kv_heads * d.head_dim);
    tensors.push(matrix(&mut rng, "token_embd.weight".into(), n_vocab, d.hidden, dtype)?);
    // The 7B shape takes minutes on one core: say where it is (the small ones finish in milliseconds).
    let report = d.block_params() > 1_000_000_000;
    for l in 0..d.layers {
        if report {
            eprintln!("» gguf-random: block {}/{} ({:.1} GB quantized so far)", l + 1, d.layers, tensors.iter().map(|(_, t)| t.storage_size_in_bytes()).sum::<usize>() as f64 / 1e9);
        }
        let b = |n: &str| format!("blk.{l}.{n}");
        tensors.push(vector(&mut rng, b("attn_norm.weight"), d.hidden, 0.2, 1.0)?);
        tensors.push(matrix(&mut rng, b("attn_q.weight"), qd, d.hidden, dtype)?);
        tensors.push(matrix(&mut rng, b("attn_k.weight"), kvd, d.hidden, dtype)?);
        tensors.push(matrix(&mut rng, b("attn_v.weight"), kvd, d.hidden, dtype)?);
        tensors.push(matrix(&mut rng, b("attn_output.weight"), d.hidden, qd, dtype)?);
        tensors.push(vector(&mut rng, b("ffn_norm.weight"), d.hidden, 0.2, 1.0)?);
        tensors.push(matrix(&mut rng, b("ffn_gate.weight"), d.ffn, d.hidden, dtype)?);
        tensors.push(matrix(&mut rng, b("ffn_up.weight"), d.ffn, d.hidden, dtype)?);
        tensors.push(matrix(&mut rng, b("ffn_down.weight"), d.hidden, d.ffn, dtype)?);
        if arch == Arch::Qwen2 {
            tensors.push(vector(&mut rng, b("attn_q.bias"), qd, 0.5, 0.0)?);
            tensors.push(vector(&mut rng, b("attn_k.bias"), kvd, 0.5, 0.0)?);
            tensors.push(vector(&mut rng, b("attn_v.bias"), kvd, 0.5, 0.0)?);
        }
        if arch == Arch::Gemma3 {
            tensors.push(vector(&mut rng, b("attn_q_norm.weight"), d.head_dim, 0.2, 1.0)?);
            tensors.push(vector(&mut rng, b("attn_k_norm.weight"), d.head_dim, 0.2, 1.0)?);
            tensors.push(vector(&mut rng, b("post_attention_norm.weight"), d.hidden, 0.2, 1.0)?);
            tensors.push(vector(&mut rng, b("post_ffw_norm.weight"), d.hidden, 0.2, 1.0)?);
        }
    }
    tensors.push(vector(&mut rng, "output_norm.weight".into(), d.hidden, 0.2, 1.0)?);
    // Qwen2 gets its own output head (Qwen2.5-7B's is untied); llama and
    // gemma3 tie it to the embedding.
    if arch == Arch::Qwen2 {
        tensors.push(matrix(&mut rng, "output.weight".into(), n_vocab, d.hidden, dtype)?);
    }

    let u = |v: usize| Value::U32(v as u32);
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(a.into())),
        ("general.name".into(), Value::String(format!("random {a} {dtype:?} seed {seed}"))),
        (format!("{a}.block_count"), u(d.layers)),
        (format!("{a}.context_length"), u(2048)),
        (format!("{a}.embedding_length"), u(d.hidden)),
        (format!("{a}.feed_forward_length"), u(d.ffn)),
        (format!("{a}.attention.head_count"), u(d.heads)),
        (format!("{a}.attention.head_count_kv"), u(d.kv_heads)),
        (format!("{a}.attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        (format!("{a}.rope.freq_base"), Value::F32(if arch == Arch::Gemma3 { 1_000_000.0 } else { 10000.0 })),
    ];
    if arch == Arch::Gemma3 {
        md.push((format!("{a}.attention.key_length"), u(d.head_dim)));
        md.push((format!("{a}.attention.value_length"), u(d.head_dim)));
        md.push((format!("{a}.attention.sliding_window"), u(d.window)));
    }
    for (k, v) in &vocab_src.metadata {
        if k.starts_with("tokenizer.ggml.") {
            md.push((k.clone(), v.clone()));
        }
    }
    md.sort_by(|x, y| x.0.cmp(&y.0));
    let md_refs: Vec<(&str, &Value)> = md.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let t_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut w = BufWriter::new(File::create(out).with_context(|| format!("creating {}", out.display()))?);
    gguf_file::write(&mut w, &md_refs, &t_refs)?;
    Ok(())
}

pub fn run(args: &[String]) -> Result<()> {
    let (mut out, mut arch, mut dtype, mut vocab, mut seed, mut dims) = (None, None, None, None, 1u64, &DIMS);
    let mut it = args.iter();
    while let Some(x) = it.next() {
        match x.as_str() {
            "--arch" => arch = Some(Arch::from_name(it.next().context("--arch needs a value")?)?),
            "--type" => dtype = Some(dtype_of(it.next().context("--type needs a value")?)?),
            "--vocab-from" => vocab = Some(it.next().context("--vocab-from needs a path")?.clone()),
            "--seed" => seed = it.next().context("--seed needs a value")?.parse()?,
            "--shape" => dims = dims_named(it.next().context("--shape needs a value")?)?,
            _ if out.is_none() => out = Some(x.clone()),
            other => bail!("unexpected argument {other:?}"),
        }
    }
    let (Some(out), Some(arch), Some(dtype)) = (out, arch, dtype) else {
        bail!("usage: switchyard-engine gguf-random OUT.gguf --arch llama|qwen2|gemma3 --type q4_k|q5_k|q6_k|q8_0|q5_0|q4_1 [--vocab-from REAL.gguf] [--seed N] [--shape small|qwen2.5-7b]");
    };
    let vocab = vocab.map(std::path::PathBuf::from).unwrap_or_else(|| crate::models_dir().join("smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"));
    write_random_shaped(Path::new(&out), arch, dtype, &vocab, seed, dims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen25_7b_shape_has_its_block_parameters() {
        // Qwen2.5-7B: 7.61 B parameters, of which the untied 152064 × 3584
        // embedding and head are 1.09 B; the blocks' matrices are the rest
        // but for the biases and norms (under 1 M).
        let blocks = QWEN25_7B.block_params() as f64;
        assert!((blocks - 6.52e9).abs() < 0.02e9, "{blocks}");
        // Every width a multiple of the k-quants' 256-value super-block.
        for w in [QWEN25_7B.hidden, QWEN25_7B.ffn, QWEN25_7B.heads * QWEN25_7B.head_dim, QWEN25_7B.kv_heads * QWEN25_7B.head_dim] {
            assert_eq!(w % 256, 0, "{w}");
        }
        assert!(std::ptr::eq(dims_named("qwen2.5-7b").unwrap(), &QWEN25_7B));
        assert!(std::ptr::eq(dims_named("small").unwrap(), &DIMS));
        assert!(dims_named("7b").is_err());
    }
}
