//! One shard of a split model: the sequences it holds KV caches for, and the
//! batched steps over its blocks. Whoever drives the pipeline (the head
//! shard's agent) opens a sequence on every shard, sends each step's rows to
//! the first shard as token ids and every later shard the previous one's
//! activations; the last shard samples, streams text and says when a
//! sequence is finished.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};

use crate::batch::TextStream;
use crate::llama::{KvCache, LlamaModel, Scratch, ShardInput, ShardRows};
use crate::protocol::{
    DType, FinishReason, ShardClose, ShardOpen, ShardOutput, ShardSample, ShardStep, Tensor, TokenLogprob, TokenLogprobs, Tokens,
};
use crate::sampling::{Sampler, SamplingParams};

/// Sequences one shard holds at most (each has a KV cache of its own).
pub const MAX_SHARD_SEQS: usize = 256;

struct ShardSeq {
    cache: KvCache,
    /// The last shard's: sampling, text, when to stop.
    sampler: Sampler,
    text: TextStream,
    logprobs: Option<usize>,
    max_new: usize,
    generated: usize,
}

#[derive(Default)]
pub struct Shards {
    seqs: HashMap<String, ShardSeq>,
    scratch: Scratch,
    pub tokens_generated: u64,
}

impl Shards {
    pub fn len(&self) -> usize {
        self.seqs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    pub fn kv_cache_bytes(&self) -> u64 {
        self.seqs.values().map(|s| s.cache.bytes() as u64).sum()
    }

    pub fn open(&mut self, model: &LlamaModel, max_seq_len: usize, r: ShardOpen) -> Result<()> {
        if r.seq_id.is_empty() {
            bail!("shard_open.seq_id is empty");
        }
        if self.seqs.contains_key(&r.seq_id) {
            bail!("sequence {:?} is already open on this shard", r.seq_id);
        }
        if self.seqs.len() >= MAX_SHARD_SEQS {
            bail!("{MAX_SHARD_SEQS} sequences already open on this shard");
        }
        let capacity = r.capacity as usize;
        if capacity == 0 || capacity > max_seq_len {
            bail!("capacity {capacity} is not within 1..={max_seq_len} (max_seq_len)");
        }
        if r.max_tokens == 0 {
            bail!("max_tokens must be at least 1");
        }
        if !r.temperature.is_finite() || r.temperature < 0.0 || !r.top_p.is_finite() || !(0.0..=1.0).contains(&r.top_p) {
            bail!("temperature must be finite and >= 0, top_p within [0, 1]");
        }
        if r.top_logprobs > 20 {
            bail!("top_logprobs must be at most 20");
        }
        if r.generated.len() >= r.max_tokens as usize {
            bail!("{} tokens already generated leave none of max_tokens {}", r.generated.len(), r.max_tokens);
        }
        let vocab = model.cfg.vocab as u32;
        if let Some(bad) = r.generated.iter().find(|&&t| t >= vocab) {
            bail!("generated token {bad} is outside the vocabulary ({vocab})");
        }
        let cache = model.new_cache(capacity).context("allocating the KV cache")?;
        let params = SamplingParams { temperature: r.temperature, top_p: r.top_p, top_k: r.top_k, seed: r.seed, ..Default::default() };
        let mut sampler = Sampler::new(params);
        let mut text = TextStream::new(r.stop);
        // A resumed sequence: its text stream holds what the lost shard held
        // back (partial UTF-8, a stop sequence's prefix); what it releases now
        // was released already.
        for &t in &r.generated {
            if text.push(model.tokenizer.token_bytes(t)).1 {
                bail!("the generated tokens already contain a stop sequence");
            }
        }
        sampler.skip_samples(r.generated.len());
        self.seqs.insert(
            r.seq_id,
            ShardSeq {
                cache,
                sampler,
                text,
                logprobs: r.logprobs.then_some(r.top_logprobs as usize),
                max_new: r.max_tokens as usize,
                generated: r.generated.len(),
            },
        );
        Ok(())
    }

    pub fn close(&mut self, r: &ShardClose) {
        self.seqs.remove(&r.seq_id);
    }

    /// One batched step (see `LlamaModel::shard_step`). A step that fails
    /// leaves the sequences' caches as they were only up to the failing
    /// forward: the driver closes them.
    pub fn step(&mut self, model: &LlamaModel, r: ShardStep) -> Result<ShardOutput> {
        if r.seqs.is_empty() {
            bail!("shard_step has no sequences");
        }
        let hidden = model.cfg.hidden;
        let total: usize = r.seqs.iter().map(|q| q.rows as usize).sum();
        // Token ids (first shard) or activations (the others), checked against the rows.
        let tokens: Vec<u32>;
        let acts: Vec<f32>;
        let input = if model.layers.start == 0 {
            if r.activations.is_some() {
                bail!("the first shard takes token ids, not activations");
            }
            for q in &r.seqs {
                if q.token_ids.len() != q.rows as usize {
                    bail!("sequence {:?}: {} token ids for {} rows", q.seq_id, q.token_ids.len(), q.rows);
                }
            }
            tokens = r.seqs.iter().flat_map(|q| q.token_ids.iter().copied()).collect();
            ShardInput::Tokens(&tokens)
        } else {
            let t = r.activations.as_ref().context("this shard takes the previous shard's activations; none were sent")?;
            acts = activations_of(t, total, hidden)?;
            ShardInput::Activations(&acts)
        };
        // Take the step's sequences out of the map (each once), run, put them back.
        let mut taken: Vec<(String, ShardSeq)> = Vec::with_capacity(r.seqs.len());
        for q in &r.seqs {
            match self.seqs.remove(&q.seq_id) {
                Some(s) => taken.push((q.seq_id.clone(), s)),
                None => {
                    let dup = taken.iter().any(|(id, _)| id == &q.seq_id);
                    for (id, s) in taken {
                        self.seqs.insert(id, s);
                    }
                    if dup {
                        bail!("sequence {:?} appears twice in one step", q.seq_id);
                    }
                    bail!("sequence {:?} is not open on this shard", q.seq_id);
                }
            }
        }
        let result = {
            let mut rows: Vec<ShardRows> =
                taken.iter_mut().zip(&r.seqs).map(|((_, s), q)| ShardRows { rows: q.rows as usize, cache: &mut s.cache }).collect();
            model.shard_step(&mut rows, input, &mut self.scratch)
        };
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                for (id, s) in taken {
                    self.seqs.insert(id, s);
                }
                return Err(e);
            }
        };
        if let Some(a) = out {
            for (id, s) in taken {
                self.seqs.insert(id, s);
            }
            let dt = DType::try_from(r.out_dtype).unwrap_or(DType::DtypeUnspecified);
            let t = Tensor::from_f32_as(&[total, hidden], &a, dt);
            return Ok(ShardOutput { activations: Some(t), samples: vec![] });
        }
        // The last shard: sample after each sequence's last row.
        let vocab = model.cfg.vocab;
        let mut samples = Vec::with_capacity(taken.len());
        for (i, (id, mut s)) in taken.into_iter().enumerate() {
            let logits = &self.scratch.logits[i * vocab..(i + 1) * vocab];
            let tok = s.sampler.sample(logits);
            let mut finish = FinishReason::Unspecified;
            let mut tokens = Tokens::default();
            if model.tokenizer.is_eog(tok) {
                finish = FinishReason::Stop;
            } else {
                s.generated += 1;
                self.tokens_generated += 1;
                let (text, stopped) = s.text.push(model.tokenizer.token_bytes(tok));
                tokens.ids.push(tok);
                tokens.text = text;
                if let Some(k) = s.logprobs {
                    let entry = |id: u32, logprob: f32| TokenLogprob { id, token: model.tokenizer.token_bytes(id).to_vec(), logprob };
                    let (lp, top) = crate::sampling::logprobs(logits, tok, k);
                    tokens.logprobs.push(TokenLogprobs { chosen: Some(entry(tok, lp)), top: top.into_iter().map(|(id, l)| entry(id, l)).collect() });
                }
                if stopped {
                    finish = FinishReason::Stop;
                } else if s.generated >= s.max_new || s.cache.len >= s.cache.capacity {
                    finish = FinishReason::Length;
                }
            }
            let stop_sequence = s.text.stop_sequence().to_string();
            if finish != FinishReason::Unspecified {
                tokens.text.push_str(&s.text.finish());
            } else {
                self.seqs.insert(id.clone(), s);
            }
            samples.push(ShardSample { seq_id: id, tokens: Some(tokens), finish_reason: finish as i32, stop_sequence });
        }
        Ok(ShardOutput { activations: None, samples })
    }
}

/// The previous shard's rows as f32, refused unless they are exactly
/// `[rows, hidden]` in the bytes sent.
fn activations_of(t: &Tensor, rows: usize, hidden: usize) -> Result<Vec<f32>> {
    let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
    if shape != [rows, hidden] {
        bail!("activations of shape {shape:?}; the step's {rows} rows need [{rows}, {hidden}]");
    }
    t.to_f32().map_err(|e| anyhow::anyhow!("activations: {e}"))
}
