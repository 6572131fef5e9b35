//! Executor parity: the same GGUF greedy-decoded on two executors (the CPU
//! kernels as the reference, candle on some device as the candidate), step
//! by step. The Rust tests run it with candle on the CPU device; on a GPU
//! host `switchyard-engine parity --device cuda` runs the very same check
//! against the CUDA build, with nothing but the binary and the model.
//!
//! Logits are not expected to be bit-equal: both executors quantize
//! activations to 8 bits before every matmul, so a float rounding apart
//! flips an int8 rounding and the noise of many layers of requantization
//! shows. What must hold: the same greedy picks, except where the
//! reference's own top two were within `FRAGILE_MARGIN` (comparison of that
//! prompt ends at such a fork), and logits close where sampling looks.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::llama::{Backend, LlamaModel, Scratch, SeqStep};
use crate::sampling::argmax;

/// A different greedy pick is acceptable only below this top-1/top-2 margin
/// of the reference: about the noise between the executors' logits (top-10
/// differences reach ~1.1), so only picks that noise can flip may flip.
pub const FRAGILE_MARGIN: f32 = 1.0;
/// Bounds on the logit differences along the agreed path. Measured kernels
/// vs candle on the CPU: SmolLM2-135M Q4_1 top-10 max ~1.1, vocabulary
/// mean ~0.18; Gemma 3 270M Q4_K_M top-10 max 0.81, mean 0.19-0.34 (its
/// 262144 logits spread wider, and the kernels' 32-value activation blocks
/// meet candle's 256-value Q8_K ones on its K-quants; candle's picks agree
/// with llama.cpp's more often than the kernels' do). Each executor is
/// ~1.0 from llama.cpp on the same steps. A wrong RoPE, mask or cache
/// write is off by several units.
pub const MAX_TOP10_DIFF: f32 = 1.5;
pub const MAX_MEAN_DIFF: f32 = 0.45;

pub const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):",
    "<|im_start|>user\nWhat is the largest planet in the solar system?<|im_end|>\n<|im_start|>assistant\n",
];

/// One prompt's comparison.
#[derive(Debug)]
pub struct PromptParity {
    pub prompt: String,
    /// Steps compared (up to and including a fragile fork).
    pub steps: usize,
    pub agreed: usize,
    /// Set when the picks parted: the reference's top-1/top-2 margin there.
    pub fork_margin: Option<f32>,
    pub max_top10_diff: f32,
    pub mean_diff: f32,
}

impl PromptParity {
    pub fn ok(&self) -> bool {
        self.fork_margin.is_none_or(|m| m < FRAGILE_MARGIN) && self.max_top10_diff < MAX_TOP10_DIFF && self.mean_diff < MAX_MEAN_DIFF
    }
}

/// Greedy decode straight through the model (no scheduler): the picks and
/// the logits before each.
pub fn greedy(model: &LlamaModel, prompt: &[u32], n: usize) -> Result<(Vec<u32>, Vec<Vec<f32>>)> {
    let mut s = Scratch::default();
    let mut cache = model.new_cache(prompt.len() + n)?;
    let mut out = Vec::new();
    let mut all_logits = Vec::new();
    let mut feed = prompt.to_vec();
    for _ in 0..n {
        model.step(&mut [SeqStep { tokens: &feed, cache: &mut cache }], &mut s)?;
        let t = argmax(&s.logits);
        all_logits.push(s.logits.clone());
        out.push(t);
        if model.tokenizer.is_eog(t) {
            break;
        }
        feed = vec![t];
    }
    Ok((out, all_logits))
}

/// Compares `candidate` with `reference` over `prompts`, `steps` tokens each.
pub fn compare(reference: &LlamaModel, candidate: &LlamaModel, prompts: &[&str], steps: usize) -> Result<Vec<PromptParity>> {
    let tok = &reference.tokenizer;
    let mut out = Vec::new();
    for &text in prompts {
        let ids = tok.encode(text, true, true);
        let (a, la) = greedy(reference, &ids, steps)?;
        let (b, lb) = greedy(candidate, &ids, steps)?;
        let mut p = PromptParity { prompt: text.into(), steps: 0, agreed: 0, fork_margin: None, max_top10_diff: 0.0, mean_diff: 0.0 };
        let mut mean_sum = 0f32;
        for (i, (x, y)) in la.iter().zip(&lb).enumerate() {
            // Over the reference's ten most likely tokens (what sampling
            // sees) and on average over the whole vocabulary.
            let mut order: Vec<usize> = (0..x.len()).collect();
            order.sort_by(|&p, &q| x[q].total_cmp(&x[p]));
            let d = order[..10].iter().map(|&t| (x[t] - y[t]).abs()).fold(0f32, f32::max);
            p.max_top10_diff = p.max_top10_diff.max(d);
            mean_sum += x.iter().zip(y).map(|(u, v)| (u - v).abs()).sum::<f32>() / x.len() as f32;
            p.steps += 1;
            if a.get(i) != b.get(i) {
                p.fork_margin = Some(x[order[0]] - x[order[1]]);
                break;
            }
            p.agreed += 1;
        }
        p.mean_diff = mean_sum / p.steps.max(1) as f32;
        out.push(p);
    }
    Ok(out)
}

/// `switchyard-engine parity [--model FILE.gguf] [--device cpu|cuda|metal] [--steps N]`:
/// prints a table and fails when any prompt is out of bounds.
pub fn run(args: &[String]) -> Result<()> {
    let mut model = crate::models_dir().join("smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut device = "auto".to_string();
    let mut steps = 16usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--model" => model = PathBuf::from(val()?),
            "--device" => device = val()?,
            "--steps" => steps = val()?.parse()?,
            other => bail!("unknown parity argument {other:?}"),
        }
    }
    let (dev, dev_name) = crate::devices::open(&device).map_err(anyhow::Error::msg)?;
    let reference = LlamaModel::load(&model)?;
    let candidate = LlamaModel::load_on(&model, Backend::Candle(dev))?;
    println!("reference: kernels on the CPU; candidate: {} on {dev_name}; {} greedy steps per prompt", candidate.backend_name(), steps);
    println!("| prompt | agreed / compared | fork margin | max top-10 |Δlogit| | mean |Δlogit| | ok |");
    println!("|---|---:|---:|---:|---:|---|");
    let results = compare(&reference, &candidate, &PROMPTS, steps)?;
    for p in &results {
        println!(
            "| {:?} | {} / {} | {} | {:.3} | {:.3} | {} |",
            p.prompt.chars().take(40).collect::<String>(),
            p.agreed,
            p.steps,
            p.fork_margin.map_or("-".into(), |m| format!("{m:.3}")),
            p.max_top10_diff,
            p.mean_diff,
            if p.ok() { "yes" } else { "NO" }
        );
    }
    if results.iter().any(|p| !p.ok()) {
        bail!("the {} executor departs from the CPU kernels beyond the bounds", candidate.backend_name());
    }
    Ok(())
}
