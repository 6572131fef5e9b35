//! BERT sentence embeddings (all-MiniLM-L6-v2 and kin): candle-transformers'
//! BertModel, the model's own tokenizer.json, then mean pooling over the
//! attention mask and L2 normalisation, as sentence-transformers does.
//! An embeddings request runs as a series of bounded chunks (`EmbedJob`) so
//! the engine loop can interleave it with decode steps.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{Encoding, Tokenizer, TruncationParams};

use crate::batch::panic_message;
use crate::protocol::{event, Done, Embeddings, ErrorCode, Event, FinishReason, Tensor as WireTensor, Usage};

pub struct BertEmbedder {
    model: BertModel,
    /// Truncates at `max_seq_len`, does not pad: chunks are padded here.
    tokenizer: Tokenizer,
    device: Device,
    pad_id: u32,
    pub hidden: usize,
    pub n_layers: usize,
    pub vocab: usize,
    pub max_seq_len: usize,
    pub weight_bytes: u64,
}

/// Padded positions (inputs × the longest of them) per forward: one chunk,
/// the most embedding work the engine does between two decode steps (one
/// MiniLM input of 100 tokens, ~40 ms on two idle CPU cores), so a running
/// generation gets a token per chunk whatever the embeddings requests ask.
/// A single input longer than this still goes alone (it is at most
/// `max_seq_len`, 256 for MiniLM). `SWITCHYARD_EMBED_CHUNK_TOKENS` sets it.
/// Measured on the shared 2-core box: 128 and 256 cost the same CPU; 1024
/// and up (fewer parallel matmul regions) took up to half the CPU per token
/// while other processes competed for the cores, and delay generations more.
pub const CHUNK_TOKENS: usize = 128;
/// Inputs per forward at most, however short they are.
pub const CHUNK_INPUTS: usize = 32;

impl BertEmbedder {
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let config_path = dir.join("config.json");
        let config: Config = serde_json::from_str(
            &std::fs::read_to_string(&config_path).with_context(|| format!("reading {}", config_path.display()))?,
        )
        .with_context(|| format!("parsing {}", config_path.display()))?;
        // sentence-transformers truncates at max_seq_length, not at the
        // tokenizer.json default, and pads to the longest input in a batch.
        let st_max = std::fs::read_to_string(dir.join("sentence_bert_config.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .and_then(|v| v.get("max_seq_length").and_then(|m| m.as_u64()))
            .map(|m| m as usize);
        let max_seq_len = st_max.unwrap_or(config.max_position_embeddings).min(config.max_position_embeddings);
        let tok_path = dir.join("tokenizer.json");
        let mut tokenizer =
            Tokenizer::from_file(&tok_path).map_err(|e| anyhow!("loading {}: {e}", tok_path.display()))?;
        tokenizer
            .with_truncation(Some(TruncationParams { max_length: max_seq_len, ..Default::default() }))
            .map_err(|e| anyhow!("{e}"))?;
        tokenizer.with_padding(None);
        let weights = dir.join("model.safetensors");
        let weight_bytes = std::fs::metadata(&weights).map(|m| m.len()).unwrap_or(0);
        // SAFETY: the file is mapped read-only and not modified while loaded.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[&weights], DType::F32, device) }
            .with_context(|| format!("mapping {}", weights.display()))?;
        let model = BertModel::load(vb, &config).context("building BertModel")?;
        Ok(BertEmbedder {
            model,
            tokenizer,
            device: device.clone(),
            pad_id: config.pad_token_id as u32,
            hidden: config.hidden_size,
            n_layers: config.num_hidden_layers,
            vocab: config.vocab_size,
            max_seq_len,
            weight_bytes,
        })
    }

    /// One input's tokens, truncated to `max_seq_len`, unpadded.
    pub fn encode(&self, text: &str) -> Result<Encoding> {
        self.tokenizer.encode(text, true).map_err(|e| anyhow!("tokenizing: {e}"))
    }

    /// Token ids given by the caller, framed as `encode` frames text (the
    /// tokenizer's own post-processing: [CLS] … [SEP], truncated alike).
    pub fn encode_ids(&self, ids: &[u32]) -> Result<Encoding> {
        if let Some(bad) = ids.iter().find(|&&t| t as usize >= self.vocab) {
            return Err(anyhow!("token {bad} is not in the vocabulary (0..{})", self.vocab));
        }
        let tokens = ids
            .iter()
            .map(|&id| tokenizers::Token::new(id, self.tokenizer.id_to_token(id).unwrap_or_default(), (0, 0)))
            .collect();
        self.tokenizer.post_process(Encoding::from_tokens(tokens, 0), None, true).map_err(|e| anyhow!("framing token ids: {e}"))
    }

    /// One forward over `encodings` padded to the longest of them (right
    /// padding, mask 0, as sentence-transformers pads a batch): a unit
    /// vector per input, in order.
    pub fn forward(&self, encodings: &[Encoding]) -> Result<Vec<Vec<f32>>> {
        let b = encodings.len();
        if b == 0 {
            return Ok(Vec::new());
        }
        let len = encodings.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(b * len);
        let mut mask = Vec::with_capacity(b * len);
        let mut types = Vec::with_capacity(b * len);
        for e in encodings {
            let n = e.get_ids().len();
            ids.extend(e.get_ids().iter().copied().chain(std::iter::repeat_n(self.pad_id, len - n)));
            mask.extend(e.get_attention_mask().iter().copied().chain(std::iter::repeat_n(0, len - n)));
            types.extend(e.get_type_ids().iter().copied().chain(std::iter::repeat_n(0, len - n)));
        }
        let ids = Tensor::from_vec(ids, (b, len), &self.device)?;
        let types = Tensor::from_vec(types, (b, len), &self.device)?;
        let mask = Tensor::from_vec(mask, (b, len), &self.device)?;
        let hidden = self.model.forward(&ids, &types, Some(&mask))?; // [b, len, hidden]
        let maskf = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // [b, len, 1]
        let summed = hidden.broadcast_mul(&maskf)?.sum(1)?; // [b, hidden]
        let counts = maskf.sum(1)?.clamp(1e-9f32, f32::MAX)?; // [b, 1]
        let mean = summed.broadcast_div(&counts)?;
        let norm = mean.sqr()?.sum_keepdim(1)?.sqrt()?.clamp(1e-12f32, f32::MAX)?;
        let unit = mean.broadcast_div(&norm)?;
        Ok(unit.to_dtype(DType::F32)?.to_vec2::<f32>()?)
    }

    /// One unit vector per input, in order, and the number of tokens used:
    /// the same chunks, in the same order, as the engine loop runs them.
    pub fn embed(&self, inputs: &[String]) -> Result<(Vec<Vec<f32>>, usize)> {
        let mut job = EmbedJob::new(String::new(), inputs.to_vec());
        while !job.step(self, CHUNK_TOKENS)? {}
        Ok((job.vectors, job.tokens))
    }
}

/// One embeddings request in progress. Chunks depend only on the request's
/// own inputs (never on what else the engine is running), so a request's
/// vectors are the same whether it ran alone or between decode steps.
pub struct EmbedJob {
    pub request_id: String,
    inputs: Vec<EmbedInput>,
    /// Inputs tokenized so far (each tokenized when its chunk is planned).
    next: usize,
    /// Tokenized but did not fit the last chunk: it leads the next one.
    carried: Option<Encoding>,
    pub vectors: Vec<Vec<f32>>,
    /// Tokens embedded so far (padding not counted).
    pub tokens: usize,
    chunks: usize,
    started: Instant,
}

/// One input: text, or token ids of the model's vocabulary.
pub enum EmbedInput {
    Text(String),
    Ids(Vec<u32>),
}

impl EmbedJob {
    pub fn new(request_id: String, inputs: Vec<String>) -> Self {
        Self::of(request_id, inputs.into_iter().map(EmbedInput::Text).collect())
    }

    pub fn of(request_id: String, inputs: Vec<EmbedInput>) -> Self {
        let n = inputs.len();
        EmbedJob {
            request_id,
            inputs,
            next: 0,
            carried: None,
            vectors: Vec::with_capacity(n),
            tokens: 0,
            chunks: 0,
            started: Instant::now(),
        }
    }

    pub fn done(&self) -> bool {
        self.vectors.len() == self.inputs.len()
    }

    /// Embeds the next chunk: inputs in order while (inputs × longest) stays
    /// within CHUNK_TOKENS and CHUNK_INPUTS, at least one. True once every
    /// input has its vector.
    pub fn step(&mut self, bert: &BertEmbedder, chunk_tokens: usize) -> Result<bool> {
        let mut chunk: Vec<Encoding> = Vec::new();
        let mut longest = 0;
        while chunk.len() < CHUNK_INPUTS {
            let enc = match self.carried.take() {
                Some(e) => e,
                None if self.next < self.inputs.len() => {
                    // The input is not needed once tokenized.
                    let input = std::mem::replace(&mut self.inputs[self.next], EmbedInput::Ids(Vec::new()));
                    self.next += 1;
                    match input {
                        EmbedInput::Text(text) => bert.encode(&text)?,
                        EmbedInput::Ids(ids) => bert.encode_ids(&ids)?,
                    }
                }
                None => break,
            };
            let len = enc.get_ids().len().max(longest);
            if !chunk.is_empty() && len * (chunk.len() + 1) > chunk_tokens {
                self.carried = Some(enc);
                break;
            }
            longest = len;
            chunk.push(enc);
        }
        self.tokens += chunk.iter().map(|e| e.get_attention_mask().iter().filter(|&&m| m == 1).count()).sum::<usize>();
        self.vectors.extend(bert.forward(&chunk)?);
        self.chunks += 1;
        Ok(self.done())
    }
}

/// Embeddings requests accepted and not yet answered, per BERT model, before
/// new ones are refused as overloaded.
pub const MAX_QUEUED_EMBEDS: usize = 64;

/// The embedding side of the engine's scheduler: requests in progress,
/// served round-robin one chunk per engine turn, so neither a running
/// generation nor a small embeddings request waits for a large one.
pub struct BertRuntime {
    pub embedder: BertEmbedder,
    jobs: VecDeque<EmbedJob>,
    chunk_tokens: usize,
}

impl BertRuntime {
    pub fn new(embedder: BertEmbedder) -> Self {
        let chunk_tokens = std::env::var("SWITCHYARD_EMBED_CHUNK_TOKENS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or(CHUNK_TOKENS);
        BertRuntime { embedder, jobs: VecDeque::new(), chunk_tokens }
    }

    pub fn has_work(&self) -> bool {
        !self.jobs.is_empty()
    }

    pub fn queued_len(&self) -> usize {
        self.jobs.len()
    }

    pub fn contains(&self, request_id: &str) -> bool {
        self.jobs.iter().any(|j| j.request_id == request_id)
    }

    /// Queues a validated request; the caller checked its size and queue room.
    pub fn submit(&mut self, job: EmbedJob) {
        self.jobs.push_back(job);
    }

    /// Drops a request in progress (it ends with Done cancelled); true if it was here.
    pub fn cancel(&mut self, request_id: &str, emit: &mut dyn FnMut(Event)) -> bool {
        let Some(i) = self.jobs.iter().position(|j| j.request_id == request_id) else { return false };
        let job = self.jobs.remove(i).unwrap();
        emit(Event::new(
            &job.request_id,
            event::Kind::Done(Done {
                finish_reason: FinishReason::Cancelled as i32,
                usage: Some(Usage { prompt_tokens: job.tokens as u32, completion_tokens: 0 }),
                ..Default::default()
            }),
        ));
        true
    }

    pub fn cancel_all(&mut self, emit: &mut dyn FnMut(Event)) {
        let ids: Vec<String> = self.jobs.iter().map(|j| j.request_id.clone()).collect();
        for id in ids {
            self.cancel(&id, emit);
        }
    }

    /// One chunk of the request at the front, which then goes to the back
    /// unless it is finished (answered with its Embeddings) or failed
    /// (answered with an Error; the others carry on).
    pub fn step(&mut self, emit: &mut dyn FnMut(Event)) {
        let Some(mut job) = self.jobs.pop_front() else { return };
        let embedder = &self.embedder;
        let result = match catch_unwind(AssertUnwindSafe(|| job.step(embedder, self.chunk_tokens))) {
            Ok(Ok(done)) => Ok(done),
            Ok(Err(e)) => Err(format!("{e:#}")),
            Err(p) => Err(panic_message(&p)),
        };
        match result {
            Ok(false) => self.jobs.push_back(job),
            Ok(true) => {
                if job.started.elapsed().as_millis() > 1000 {
                    eprintln!(
                        "switchyard-engine: embeddings {:?}: {} inputs, {} tokens in {} chunks took {:?}",
                        job.request_id,
                        job.vectors.len(),
                        job.tokens,
                        job.chunks,
                        job.started.elapsed()
                    );
                }
                let ev = Embeddings {
                    vectors: job.vectors.iter().map(|v| WireTensor::from_f32(&[v.len()], v)).collect(),
                    usage: Some(Usage { prompt_tokens: job.tokens as u32, completion_tokens: 0 }),
                };
                emit(Event::new(&job.request_id, event::Kind::Embeddings(ev)));
            }
            Err(msg) => {
                eprintln!("switchyard-engine: embeddings {:?} failed: {msg}", job.request_id);
                emit(Event::error(&job.request_id, ErrorCode::Internal, msg));
            }
        }
    }
}
