//! `switchyard-engine bench`: prefill and decode throughput of the llama path
//! at several concurrency levels, printed as a table (compare with
//! `llama-bench -m FILE -t THREADS` on the same GGUF), and what constrained
//! decoding's token masks cost per token next to the decode step.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::llama::{KvCache, LlamaModel, Scratch, SeqStep};
use crate::grammar::{Answer, Grammar, GrammarFactory, GrammarSpec};
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
    /// Streams decoded under a JSON Schema grammar for the mask measurement (0: skip it).
    pub constrained_streams: usize,
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
            constrained_streams: 8,
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
                "--constrained-streams" => o.constrained_streams = val()?.parse()?,
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
    if o.constrained_streams > 0 {
        constrained(o, &model, &mut s)?;
    }
    Ok(())
}

/// The schema the mask measurement decodes under: an object with a string,
/// an integer range, an enum, a nested object and an array.
fn bench_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "role": {"enum": ["admin", "user", "guest"]},
            "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city", "zip"]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}
        },
        "required": ["name", "age", "role", "address", "tags"]
    })
}

/// Decode `constrained_streams` sequences together for `tokens` steps, each
/// under its own JSON Schema matcher (a finished one starts over), and time
/// the forward steps and the masks apart.
fn constrained(o: &BenchOptions, model: &LlamaModel, s: &mut Scratch) -> Result<()> {
    let n = o.constrained_streams;
    let vocab = model.cfg.vocab;
    let t = Instant::now();
    let factory = GrammarFactory::new(&model.tokenizer)?;
    let setup = t.elapsed();
    let spec = GrammarSpec { answer: Answer::JsonSchema(bench_schema()), strict: true, tools: None };
    let t = Instant::now();
    let compiles = 10;
    for _ in 0..compiles {
        factory.compile(&spec)?;
    }
    let compile = t.elapsed() / compiles;
    let short = 16usize;
    let prompts: Vec<Vec<u32>> = (0..n).map(|i| prompt_ids(model, short, i)).collect();
    let mut caches: Vec<KvCache> = (0..n).map(|_| model.new_cache(short + o.tokens)).collect::<Result<_>>()?;
    let mut grammars: Vec<Grammar> = (0..n).map(|_| factory.compile(&spec)).collect::<Result<_>>()?;
    {
        let mut steps: Vec<SeqStep> = prompts.iter().zip(caches.iter_mut()).map(|(p, c)| SeqStep { tokens: p, cache: c }).collect();
        model.step(&mut steps, s)?;
    }
    let mut masked = vec![0f32; vocab];
    let mut next: Vec<[u32; 1]> = vec![[0]; n];
    let (mut forward_s, mut mask_s, mut masks) = (0f64, 0f64, 0usize);
    let mut restarts = 0usize;
    for step in 0..o.tokens {
        if step > 0 {
            let t = Instant::now();
            let mut steps: Vec<SeqStep> = next.iter().zip(caches.iter_mut()).map(|(p, c)| SeqStep { tokens: p, cache: c }).collect();
            model.step(&mut steps, s)?;
            forward_s += t.elapsed().as_secs_f64();
        }
        for (i, g) in grammars.iter_mut().enumerate() {
            masked.copy_from_slice(&s.logits[i * vocab..(i + 1) * vocab]);
            let t = Instant::now();
            g.mask_logits(&mut masked)?;
            if step > 0 {
                mask_s += t.elapsed().as_secs_f64();
            }
            let tok = argmax(&masked);
            if model.tokenizer.is_eog(tok) {
                *g = factory.compile(&spec)?;
                restarts += 1;
            } else {
                g.commit(tok)?;
                if g.is_done() {
                    *g = factory.compile(&spec)?;
                    restarts += 1;
                }
            }
            next[i][0] = tok;
            masks += 1;
        }
    }
    let steps = (o.tokens - 1).max(1) as f64;
    let per_token_us = mask_s * 1e6 / (masks as f64 - n as f64).max(1.0);
    println!(
        "constrained decoding (JSON Schema), {n} streams: mask {per_token_us:.1} us/token, {:.2}% of decode time ({:.2} ms/step forward, {:.3} ms/step masks); grammar compile {:.2} ms; vocabulary setup {:.0} ms; {restarts} grammars completed",
        100.0 * mask_s / (forward_s + mask_s),
        forward_s * 1000.0 / steps,
        mask_s * 1000.0 / steps,
        compile.as_secs_f64() * 1000.0,
        setup.as_secs_f64() * 1000.0,
    );
    Ok(())
}
