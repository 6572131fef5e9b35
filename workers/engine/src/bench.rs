//! `switchyard-engine bench`: prefill and decode throughput of the llama path
//! at several concurrency levels, printed as a table (compare with
//! `llama-bench -m FILE -t THREADS` on the same GGUF).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::llama::{KvCache, LlamaModel, Scratch, SeqStep};
use crate::sampling::argmax;

pub struct BenchOptions {
    pub model: PathBuf,
    pub streams: Vec<usize>,
    pub tokens: usize,
    pub prompt_tokens: usize,
    pub threads: Option<usize>,
    pub repeats: usize,
    pub device: String,
    pub backend: String,
}

impl BenchOptions {
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut o = BenchOptions {
            model: crate::models_dir().join("smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"),
            streams: vec![1, 4, 8, 16],
            tokens: 64,
            prompt_tokens: 128,
            threads: None,
            repeats: 3,
            device: "cpu".into(),
            backend: "auto".into(),
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut val = || it.next().cloned().with_context(|| format!("{a} needs a value"));
            match a.as_str() {
                "--model" => o.model = val()?.into(),
                "--streams" => {
                    o.streams = val()?.split(',').map(|s| s.trim().parse()).collect::<Result<_, _>>()?;
                }
                "--tokens" => o.tokens = val()?.parse()?,
                "--prompt-tokens" => o.prompt_tokens = val()?.parse()?,
                "--threads" => o.threads = Some(val()?.parse()?),
                "--repeats" => o.repeats = val()?.parse()?,
                "--device" => o.device = val()?,
                "--llama-backend" => o.backend = val()?,
                other => bail!("unknown bench argument {other:?}"),
            }
        }
        if o.streams.is_empty() || o.streams.contains(&0) || o.tokens == 0 || o.prompt_tokens == 0 {
            bail!("--streams, --tokens and --prompt-tokens must be positive");
        }
        Ok(o)
    }
}

fn prompt_ids(model: &LlamaModel, n: usize, salt: usize) -> Vec<u32> {
    let text = format!(
        "Request {salt}: the quick brown fox jumps over the lazy dog while engineers measure throughput. "
    );
    let base = model.tokenizer.encode(&text, true, false);
    base.iter().cycle().take(n).copied().collect()
}

pub fn run(o: &BenchOptions) -> Result<()> {
    let t0 = Instant::now();
    let (dev, dev_name) = crate::devices::open(&o.device).map_err(anyhow::Error::msg)?;
    let backend = crate::devices::llama_backend(&o.backend, &dev).map_err(anyhow::Error::msg)?;
    let mut model = LlamaModel::load_on(&o.model, backend)?;
    let max_len = o.prompt_tokens.max(16) + o.tokens + 1;
    model.ensure_rope(max_len)?;
    let cfg = model.cfg.clone();
    println!(
        "model {} | {} layers, hidden {}, {} | {} on {dev_name} | load {:?} | threads {} | kernels {:?}",
        o.model.display(),
        cfg.n_layers,
        cfg.hidden,
        model.matrix_types(),
        model.backend_name(),
        t0.elapsed(),
        rayon::current_num_threads(),
        crate::kernels::isa()
    );
    let mut s = Scratch::default();

    // Prefill: one prompt of prompt_tokens, best of `repeats`.
    let prompt = prompt_ids(&model, o.prompt_tokens, 0);
    let mut best = f64::MAX;
    for _ in 0..o.repeats.max(1) {
        let mut cache = model.new_cache(prompt.len())?;
        let t = Instant::now();
        model.step(&mut [SeqStep { tokens: &prompt, cache: &mut cache }], &mut s)?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    println!("prefill {} tokens: {:.1} tok/s", prompt.len(), prompt.len() as f64 / best);

    // Prefix reuse: the same prompt when all but its last 16 tokens are in
    // the prefix cache (a shared system prompt, the conversation so far):
    // copy their keys and values, compute the rest.
    if prompt.len() > 32 {
        let cold = best;
        let keep = prompt.len() - 16;
        let mut donor = model.new_cache(prompt.len())?;
        model.step(&mut [SeqStep { tokens: &prompt, cache: &mut donor }], &mut s)?;
        let mut warm = f64::MAX;
        for _ in 0..o.repeats.max(1) {
            let t = Instant::now();
            let mut cache = model.new_cache(prompt.len())?;
            cache.copy_prefix_from(&donor, keep)?;
            model.step(&mut [SeqStep { tokens: &prompt[keep..], cache: &mut cache }], &mut s)?;
            warm = warm.min(t.elapsed().as_secs_f64());
        }
        println!(
            "time to first token, {}-token prompt: {:.2} ms computed, {:.2} ms with {keep} tokens from the prefix cache ({:.1}x)",
            prompt.len(),
            cold * 1000.0,
            warm * 1000.0,
            cold / warm
        );
    }

    println!("| streams | decode tok/s per stream | aggregate tok/s | x single | ms/step | KV bytes per sequence |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let short = 16usize;
    let mut single = None;
    for &n in &o.streams {
        let mut best = f64::MAX;
        for _ in 0..o.repeats.max(1) {
            let prompts: Vec<Vec<u32>> = (0..n).map(|i| prompt_ids(&model, short, i)).collect();
            let mut caches: Vec<KvCache> = (0..n).map(|_| model.new_cache(short + o.tokens)).collect::<Result<_>>()?;
            {
                let mut steps: Vec<SeqStep> =
                    prompts.iter().zip(caches.iter_mut()).map(|(p, c)| SeqStep { tokens: p, cache: c }).collect();
                model.step(&mut steps, &mut s)?;
            }
            let mut next: Vec<[u32; 1]> =
                (0..n).map(|i| [argmax(&s.logits[i * cfg.vocab..(i + 1) * cfg.vocab])]).collect();
            let t = Instant::now();
            for _ in 0..o.tokens - 1 {
                {
                    let mut steps: Vec<SeqStep> =
                        next.iter().zip(caches.iter_mut()).map(|(p, c)| SeqStep { tokens: p, cache: c }).collect();
                    model.step(&mut steps, &mut s)?;
                }
                for (i, nx) in next.iter_mut().enumerate() {
                    nx[0] = argmax(&s.logits[i * cfg.vocab..(i + 1) * cfg.vocab]);
                }
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        let steps = (o.tokens - 1) as f64;
        let per_stream = steps / best;
        let aggregate = per_stream * n as f64;
        let single_rate = *single.get_or_insert(aggregate);
        println!(
            "| {n} | {per_stream:.1} | {aggregate:.1} | {:.2} | {:.2} | {} ({} per token) |",
            aggregate / single_rate,
            best * 1000.0 / steps,
            model.kv_bytes_per_token() * (short + o.tokens),
            model.kv_bytes_per_token()
        );
    }
    Ok(())
}
