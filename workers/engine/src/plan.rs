//! Memory planning from a GGUF's header alone (no tensor data is read):
//! the bytes the CPU kernels hold for the weights, the KV cache bytes one
//! token costs, and the largest batch × context that fits a budget.
//!
//! `switchyard-engine plan --model PATH.gguf [--budget BYTES] [--batch B
//! --context C] [--json]`; the agent runs it before loading a model and
//! refuses one that cannot fit instead of being killed by the OOM killer.

use std::fs::File;
use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::quantized::{gguf_file, GgmlDType};

use crate::llama::{Arch, LlamaConfig};

#[derive(Debug, Clone, serde::Serialize)]
pub struct Plan {
    pub arch: String,
    pub n_layers: usize,
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

impl Plan {
    pub fn of_file(path: &Path) -> Result<Plan> {
        let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let content = gguf_file::Content::read(&mut f).with_context(|| format!("reading GGUF {}", path.display()))?;
        let arch = Arch::from_name(content.metadata.get("general.architecture").context("general.architecture missing")?.to_string()?)?;
        let vocab = content.metadata.get("tokenizer.ggml.tokens").map(|v| v.to_vec().map(|t| t.len())).transpose()?.unwrap_or(0);
        let cfg = LlamaConfig::from_gguf(&content, arch, vocab)?;
        let mut weight_bytes = 0u64;
        for t in content.tensor_infos.values() {
            let dims = t.shape.dims();
            let n: u64 = dims.iter().map(|&d| d as u64).product();
            weight_bytes += host_bytes(t.ggml_dtype, n, dims.len() == 2);
        }
        let kv_bytes_per_token = (2 * cfg.n_layers * cfg.kv_dim() * 2) as u64;
        let rope = (cfg.train_ctx * cfg.rope_dims * 4 * if cfg.window.is_some() { 2 } else { 1 }) as u64;
        Ok(Plan { arch: arch.name().into(), n_layers: cfg.n_layers, train_ctx: cfg.train_ctx, weight_bytes, kv_bytes_per_token, overhead_bytes: rope + (64 << 20) })
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
    let (mut model, mut budget, mut batch, mut context, mut json) = (None, None, None, None, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |what: &str| -> Result<u64> { Ok(it.next().with_context(|| format!("{what} needs a value"))?.parse()?) };
        match a.as_str() {
            "--model" => model = Some(it.next().context("--model needs a path")?.clone()),
            "--budget" => budget = Some(num("--budget")?),
            "--batch" => batch = Some(num("--batch")? as usize),
            "--context" => context = Some(num("--context")? as usize),
            "--json" => json = true,
            other => bail!("unexpected argument {other:?}"),
        }
    }
    let model = model.context("usage: switchyard-engine plan --model PATH.gguf [--budget BYTES] [--batch B --context C] [--json]")?;
    let plan = Plan::of_file(Path::new(&model))?;
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
