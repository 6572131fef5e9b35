//! Memory planning from a GGUF's header alone (no tensor data is read):
//! the bytes the CPU kernels hold for the weights, the KV cache bytes one
//! token costs, and the largest batch × context that fits a budget.
//!
//! `switchyard-engine plan --model PATH.gguf [--layers START-END] [--budget
//! BYTES] [--batch B --context C] [--json]`; the agent runs it before loading
//! a model (with the shard's range for a shard) and refuses one that cannot
//! fit instead of being killed by the OOM killer.

use std::fs::File;
use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::quantized::{gguf_file, GgmlDType};

use crate::llama::{Arch, LlamaConfig};

#[derive(Debug, Clone, serde::Serialize)]
pub struct Plan {
    pub arch: String,
    pub n_layers: usize,
    /// The blocks this plan covers, `[start, end)`: the whole model unless
    /// planned for a shard.
    pub layers: (usize, usize),
    pub train_ctx: usize,
    /// What the host executor holds for the weights (types kept as stored,
    /// others requantized to Q8_0, norms and biases as f32).
    pub weight_bytes: u64,
    /// Keys and values of every layer for one position, f16.
    pub kv_bytes_per_token: u64,
    /// RoPE tables for the trained context, buffers, the thread pool: a
    /// fixed allowance on top of weights and KV.
    pub overhead_bytes: u64,
}

/// Bytes the host keeps per `n` values of a GGUF tensor of type `dt`.
fn host_bytes(dt: GgmlDType, n: u64, is_matrix: bool) -> u64 {
    if !is_matrix {
        return n * 4;
    }
    match dt {
        GgmlDType::Q4_1 => n / 32 * 20,
        GgmlDType::Q5_0 => n / 32 * 22,
        GgmlDType::Q8_0 => n / 32 * 34,
        // Scales unpacked at load (see kernels::BlockQ4K / BlockQ5K).
        GgmlDType::Q4K => n / 256 * 148,
        GgmlDType::Q5K => n / 256 * 180,
        GgmlDType::Q6K => n / 256 * 210,
        _ => n / 32 * 34,
    }
}

/// The block a tensor belongs to (`blk.N.…`), if any.
fn block_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

impl Plan {
    pub fn of_file(path: &Path) -> Result<Plan> {
        Self::of_range(path, None)
    }

    /// The plan of blocks `[start, end)` as a shard loads them: its blocks,
    /// the embedding table on the first shard, the final norm and the output
    /// head on the last (the embedding table again where the head is tied to
    /// it, as the shard keeps its own copy), and KV for its blocks only.
    pub fn of_range(path: &Path, layers: Option<(usize, usize)>) -> Result<Plan> {
        let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let content = gguf_file::Content::read(&mut f).with_context(|| format!("reading GGUF {}", path.display()))?;
        let arch = Arch::from_name(content.metadata.get("general.architecture").context("general.architecture missing")?.to_string()?)?;
        let vocab = content.metadata.get("tokenizer.ggml.tokens").map(|v| v.to_vec().map(|t| t.len())).transpose()?.unwrap_or(0);
        let cfg = LlamaConfig::from_gguf(&content, arch, vocab)?;
        let (start, end) = layers.unwrap_or((0, cfg.n_layers));
        if start >= end || end > cfg.n_layers {
            bail!("layer range {start}-{end} is not within the model's {nl} blocks (start < end <= {nl})", nl = cfg.n_layers);
        }
        let (first, last) = (start == 0, end == cfg.n_layers);
        let bytes = |t: &gguf_file::TensorInfo| {
            let dims = t.shape.dims();
            host_bytes(t.ggml_dtype, dims.iter().map(|&d| d as u64).product(), dims.len() == 2)
        };
        let mut weight_bytes = 0u64;
        for (name, t) in &content.tensor_infos {
            let held = match (block_of(name), name.as_str()) {
                (Some(b), _) => (start..end).contains(&b),
                (None, "token_embd.weight") => first,
                (None, "output_norm.weight" | "output.weight") => last,
                // Anything else (RoPE factors, …) every shard keeps.
                (None, _) => true,
            };
            if held {
                weight_bytes += bytes(t);
            }
        }
        if last && !first && !content.tensor_infos.contains_key("output.weight") {
            if let Some(embd) = content.tensor_infos.get("token_embd.weight") {
                weight_bytes += bytes(embd);
            }
        }
        let kv_bytes_per_token = (2 * (end - start) * cfg.kv_dim() * 2) as u64;
        let rope = (cfg.train_ctx * cfg.rope_dims * 4 * if cfg.window.is_some() { 2 } else { 1 }) as u64;
        Ok(Plan {
            arch: arch.name().into(),
            n_layers: cfg.n_layers,
            layers: (start, end),
            train_ctx: cfg.train_ctx,
            weight_bytes,
            kv_bytes_per_token,
            overhead_bytes: rope + (64 << 20),
        })
    }

    /// Bytes for `batch` sequences of `context` positions each.
    pub fn bytes_for(&self, batch: usize, context: usize) -> u64 {
        self.weight_bytes + self.overhead_bytes + self.kv_bytes_per_token * (batch * context) as u64
    }

    /// The most positions (summed over sequences) whose KV fits `budget`.
    pub fn max_tokens(&self, budget: u64) -> u64 {
        budget.saturating_sub(self.weight_bytes + self.overhead_bytes) / self.kv_bytes_per_token.max(1)
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let (mut model, mut budget, mut batch, mut context, mut json, mut layers) = (None, None, None, None, false, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |what: &str| -> Result<u64> { Ok(it.next().with_context(|| format!("{what} needs a value"))?.parse()?) };
        match a.as_str() {
            "--model" => model = Some(it.next().context("--model needs a path")?.clone()),
            "--budget" => budget = Some(num("--budget")?),
            "--batch" => batch = Some(num("--batch")? as usize),
            "--context" => context = Some(num("--context")? as usize),
            "--json" => json = true,
            "--layers" => {
                let v = it.next().context("--layers needs START-END")?;
                let (a, b) = v.split_once('-').with_context(|| format!("--layers {v:?} is not START-END"))?;
                layers = Some((a.parse().with_context(|| format!("--layers {v:?}"))?, b.parse().with_context(|| format!("--layers {v:?}"))?));
            }
            other => bail!("unexpected argument {other:?}"),
        }
    }
    let model = model.context("usage: switchyard-engine plan --model PATH.gguf [--layers START-END] [--budget BYTES] [--batch B --context C] [--json]")?;
    let plan = Plan::of_range(Path::new(&model), layers)?;
    let need = match (batch, context) {
        (Some(b), Some(c)) => Some(plan.bytes_for(b, c)),
        _ => None,
    };
    let contexts: Vec<usize> = [512usize, 2048, 8192, plan.train_ctx].into_iter().filter(|&c| c <= plan.train_ctx).collect();
    let fits: Vec<(usize, u64)> = match budget {
        Some(b) => contexts.iter().map(|&c| (c, plan.max_tokens(b) / c as u64)).collect(),
        None => Vec::new(),
    };
    if json {
        let v = serde_json::json!({
            "plan": plan,
            "need_bytes": need,
            "budget_bytes": budget,
            "max_tokens": budget.map(|b| plan.max_tokens(b)),
            "max_batch_at_context": fits.iter().map(|(c, b)| serde_json::json!({"context": c, "batch": b})).collect::<Vec<_>>(),
        });
        println!("{v}");
        return Ok(());
    }
    let mib = |b: u64| b as f64 / 1048576.0;
    println!("{model}: {} ({} layers, trained context {})", plan.arch, plan.n_layers, plan.train_ctx);
    if plan.layers != (0, plan.n_layers) {
        println!("shard: blocks {}-{}", plan.layers.0, plan.layers.1);
    }
    println!("weights {:.1} MiB, KV {} bytes per token, overhead {:.1} MiB", mib(plan.weight_bytes), plan.kv_bytes_per_token, mib(plan.overhead_bytes));
    if let (Some(n), Some(b), Some(c)) = (need, batch, context) {
        println!("batch {b} x context {c}: {:.1} MiB", mib(n));
    }
    if let Some(b) = budget {
        println!("budget {:.1} MiB: {} tokens of KV", mib(b), plan.max_tokens(b));
        for (c, n) in &fits {
            println!("  context {c}: up to {n} sequences");
        }
    }
    Ok(())
}
