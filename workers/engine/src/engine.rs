//! The request loop: owns the loaded models, answers every request with
//! events, and interleaves batched decode steps, embedding chunks and newly
//! arriving requests (each turn: new requests, one decode step per llama
//! model, one chunk per embedding model). Nothing a request carries can take the loop down: inputs are
//! validated, model work runs under catch_unwind, and failures become Error
//! events for that request id.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::time::Instant;

use candle_core::Device;

use crate::batch::{panic_message, GenRequest, LlamaRuntime, MAX_QUEUED};
use crate::bert::{BertEmbedder, BertRuntime, EmbedInput, EmbedJob, MAX_QUEUED_EMBEDS};
use crate::llama::{Backend, LlamaModel, Scratch, ShardInput};
use crate::protocol::*;
use crate::sampling::SamplingParams;
use crate::grammar::{Answer, GrammarSpec};
use crate::tokenizer::{ChatMessage as TplMessage, ToolCallMsg};
use crate::tools::{Function, Mode as ToolMode, ToolChoice};

/// Longest prefix-cache salt accepted (the router sends 22 characters).
const MAX_CACHE_SALT: usize = 128;

/// What the stdin reader hands the loop.
pub enum Incoming {
    Request(Request),
    /// A frame that did not decode as a Request.
    Malformed(String),
}

enum Model {
    Llama(Box<LlamaRuntime>),
    Bert(Box<BertRuntime>),
}

impl Model {
    fn has_work(&self) -> bool {
        match self {
            Model::Llama(rt) => rt.has_work(),
            Model::Bert(rt) => rt.has_work(),
        }
    }
}

pub struct Engine {
    device: Device,
    device_name: String,
    llama_backend: Backend,
    models: HashMap<String, Model>,
    out: Sender<Event>,
    /// Hidden-state and forward requests share one scratch per engine.
    scratch: Scratch,
    tokens_generated_retired: u64,
}

/// A request's failure: the code and message of its Error event.
struct Failure(ErrorCode, String);

type Outcome = Result<(), Failure>;

fn invalid(msg: impl Into<String>) -> Failure {
    Failure(ErrorCode::InvalidRequest, msg.into())
}

const DEFAULT_MAX_BATCH: usize = 8;
const DEFAULT_MAX_SEQ_LEN: usize = 4096;
/// Inputs per embeddings request at most (OpenAI's limit; the agent and the
/// router refuse more before it gets here).
pub const MAX_EMBED_INPUTS: usize = 2048;
/// Bytes of text per embeddings request at most, all inputs together.
pub const MAX_EMBED_BYTES: usize = 4 << 20;

impl Engine {
    pub fn new(device: Device, device_name: String, llama_backend: Backend, out: Sender<Event>) -> Self {
        Engine {
            device,
            device_name,
            llama_backend,
            models: HashMap::new(),
            out,
            scratch: Scratch::default(),
            tokens_generated_retired: 0,
        }
    }

    fn emit(&self, ev: Event) {
        // The writer only goes away when stdout is closed; nothing to do then.
        let _ = self.out.send(ev);
    }

    fn busy(&self) -> bool {
        self.models.values().any(Model::has_work)
    }

    /// Runs until Shutdown or EOF, then cancels whatever is left. Exits 3
    /// (device unusable) when a forward on the candle device fails: every
    /// request on it has had its error event, and the agent restarts the
    /// engine on the CPU kernels rather than keep a broken device serving.
    pub fn run(mut self, rx: Receiver<Incoming>) -> std::process::ExitCode {
        let mut code = std::process::ExitCode::SUCCESS;
        'outer: loop {
            // Block only when there is no decoding or embedding to do.
            let mut batch = Vec::new();
            if !self.busy() {
                match rx.recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break 'outer,
                }
            }
            let mut closed = false;
            loop {
                match rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        closed = true;
                        break;
                    }
                }
            }
            for m in batch {
                match m {
                    Incoming::Malformed(msg) => {
                        self.emit(Event::error("", ErrorCode::InvalidRequest, format!("malformed request frame: {msg}")))
                    }
                    Incoming::Request(req) => {
                        if matches!(req.kind, Some(request::Kind::Shutdown(_))) {
                            eprintln!("switchyard-engine: shutdown requested");
                            break 'outer;
                        }
                        self.handle(req);
                    }
                }
            }
            if closed {
                eprintln!("switchyard-engine: stdin closed");
                break 'outer;
            }
            if let Err(msg) = self.step_all() {
                if matches!(self.llama_backend, Backend::Candle(_)) {
                    eprintln!("switchyard-engine: device failure on {}, exiting: {msg}", self.device_name);
                    code = std::process::ExitCode::from(3);
                    break 'outer;
                }
            }
        }
        self.cancel_everything();
        code
    }

    /// One decode step for every llama model with work and one embedding
    /// chunk for every BERT model with work: a running generation waits for
    /// at most one chunk per token, however large the embeddings requests
    /// are. The first llama step that failed, if any (its requests already
    /// have error events).
    fn step_all(&mut self) -> Result<(), String> {
        let out = self.out.clone();
        let mut emit = |ev: Event| {
            let _ = out.send(ev);
        };
        let mut failed = Ok(());
        for m in self.models.values_mut() {
            match m {
                Model::Llama(rt) if rt.has_work() => {
                    if let Err(e) = rt.step(&mut emit) {
                        failed = failed.and(Err(e));
                    }
                }
                Model::Bert(rt) if rt.has_work() => rt.step(&mut emit),
                _ => {}
            }
        }
        failed
    }

    fn cancel_everything(&mut self) {
        let out = self.out.clone();
        let mut emit = |ev: Event| {
            let _ = out.send(ev);
        };
        for m in self.models.values_mut() {
            match m {
                Model::Llama(rt) => rt.cancel_all(&mut emit),
                Model::Bert(rt) => rt.cancel_all(&mut emit),
            }
        }
    }

    pub fn handle(&mut self, req: Request) {
        let id = req.request_id.clone();
        let started = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| self.dispatch(req)));
        let failure = match result {
            Ok(Ok(())) => None,
            Ok(Err(f)) => Some(f),
            Err(p) => Some(Failure(ErrorCode::Internal, panic_message(&p))),
        };
        if let Some(Failure(code, msg)) = failure {
            eprintln!("switchyard-engine: request {id:?} failed ({code:?}): {msg}");
            self.emit(Event::error(id, code, msg));
        } else if started.elapsed().as_millis() > 1000 {
            eprintln!("switchyard-engine: request {id:?} took {:?}", started.elapsed());
        }
    }

    fn dispatch(&mut self, req: Request) -> Outcome {
        let id = req.request_id;
        match req.kind {
            None => Err(invalid("request has no kind")),
            Some(request::Kind::LoadModel(r)) => self.load(&id, r),
            Some(request::Kind::Generate(r)) => self.generate(&id, r),
            Some(request::Kind::Embed(r)) => self.embed(&id, r),
            Some(request::Kind::HiddenStates(r)) => self.hidden_states(&id, r),
            Some(request::Kind::Forward(r)) => self.forward(&id, r),
            Some(request::Kind::Cancel(r)) => {
                let out = self.out.clone();
                let mut emit = |ev: Event| {
                    let _ = out.send(ev);
                };
                for m in self.models.values_mut() {
                    let found = match m {
                        Model::Llama(rt) => rt.cancel(&r.target_request_id, &mut emit),
                        Model::Bert(rt) => rt.cancel(&r.target_request_id, &mut emit),
                    };
                    if found {
                        break;
                    }
                }
                // Cancelling something already finished is not an error.
                Ok(())
            }
            Some(request::Kind::Stats(_)) => {
                let ev = Event::new(&id, event::Kind::Stats(self.stats()));
                self.emit(ev);
                Ok(())
            }
            Some(request::Kind::Tokenize(r)) => self.tokenize(&id, r),
            Some(request::Kind::ShardOpen(r)) => {
                let rt = self.llama(&r.model)?;
                let max = rt.max_seq_len;
                rt.shards.open(&rt.model, max, r).map_err(|e| invalid(format!("{e:#}")))?;
                self.emit(Event::new(&id, event::Kind::ShardOutput(ShardOutput::default())));
                Ok(())
            }
            Some(request::Kind::ShardStep(r)) => {
                let rt = self.llama(&r.model)?;
                let out = rt.shards.step(&rt.model, r).map_err(|e| invalid(format!("{e:#}")))?;
                self.emit(Event::new(&id, event::Kind::ShardOutput(out)));
                Ok(())
            }
            Some(request::Kind::ShardClose(r)) => {
                self.llama(&r.model)?.shards.close(&r);
                self.emit(Event::new(&id, event::Kind::ShardOutput(ShardOutput::default())));
                Ok(())
            }
            // Handled by the loop; reaching here means a direct call.
            Some(request::Kind::Shutdown(_)) => Ok(()),
        }
    }

    pub fn stats(&self) -> Stats {
        let mut s = Stats {
            device: self.device_name.clone(),
            rss_bytes: rss_bytes(),
            tokens_generated: self.tokens_generated_retired,
            ..Default::default()
        };
        let mut names: Vec<&String> = self.models.keys().collect();
        names.sort();
        s.models = names.into_iter().cloned().collect();
        for m in self.models.values() {
            if let Model::Llama(rt) = m {
                s.active_sequences += (rt.active_len() + rt.shards.len()) as u32;
                s.queued_requests += rt.queued_len() as u32;
                s.max_batch += rt.max_batch as u32;
                s.kv_cache_bytes += rt.kv_cache_bytes() + rt.shards.kv_cache_bytes();
                s.tokens_generated += rt.tokens_generated + rt.shards.tokens_generated;
                s.prefix_cache_bytes += rt.prefix_cache_bytes();
                let (hits, reused) = rt.prefix_stats();
                s.prefix_cache_hits += hits;
                s.prefix_tokens_reused += reused;
            }
            // Embedding requests waiting their turn count as queued too (the
            // heartbeat's queue depth, which routers score by).
            if let Model::Bert(rt) = m {
                s.queued_requests += rt.queued_len() as u32;
            }
        }
        s
    }

    fn load(&mut self, id: &str, r: LoadModel) -> Outcome {
        if r.model.is_empty() {
            return Err(invalid("load_model.model (the name) is empty"));
        }
        if r.path.is_empty() {
            return Err(invalid("load_model.path is empty"));
        }
        let path = Path::new(&r.path);
        if !path.exists() {
            return Err(Failure(ErrorCode::LoadFailed, format!("{} does not exist", r.path)));
        }
        let kind = ModelKind::try_from(r.kind).unwrap_or(ModelKind::Unspecified);
        let t0 = Instant::now();
        // A model loaded again under the same name replaces the old one; its
        // running generations end as cancelled.
        let out = self.out.clone();
        let mut emit = |ev: Event| {
            let _ = out.send(ev);
        };
        match self.models.remove(&r.model) {
            Some(Model::Llama(mut old)) => {
                old.cancel_all(&mut emit);
                self.tokens_generated_retired += old.tokens_generated;
            }
            Some(Model::Bert(mut old)) => old.cancel_all(&mut emit),
            None => {}
        }
        let loaded = match kind {
            ModelKind::LlamaGguf => {
                // Both 0: the whole model; otherwise one shard's blocks.
                let layers = (r.layer_start != 0 || r.layer_end != 0).then_some(r.layer_start as usize..r.layer_end as usize);
                let model = LlamaModel::load_layers(path, self.llama_backend.clone(), layers)
                    .map_err(|e| Failure(ErrorCode::LoadFailed, format!("{e:#}")))?;
                let train = model.cfg.train_ctx;
                let max_seq_len = match r.max_seq_len as usize {
                    0 => train.min(DEFAULT_MAX_SEQ_LEN),
                    n => n,
                };
                if max_seq_len > train {
                    eprintln!("switchyard-engine: max_seq_len {max_seq_len} exceeds the trained context {train}");
                }
                let max_batch = match r.max_batch as usize {
                    0 => DEFAULT_MAX_BATCH,
                    n => n,
                };
                eprintln!(
                    "switchyard-engine: loaded {} (blocks {}..{} of {}, hidden {}, {}; {} with kernels {:?}) in {:?}",
                    r.model,
                    model.layers.start,
                    model.layers.end,
                    model.cfg.n_layers,
                    model.cfg.hidden,
                    model.matrix_types(),
                    model.backend_name(),
                    crate::kernels::isa(),
                    t0.elapsed()
                );
                let ev = Loaded {
                    model: r.model.clone(),
                    kind: kind as i32,
                    n_layers: model.cfg.n_layers as u32,
                    hidden_size: model.cfg.hidden as u32,
                    vocab_size: model.cfg.vocab as u32,
                    max_seq_len: max_seq_len as u32,
                    max_batch: max_batch as u32,
                    load_ms: 0,
                    weight_bytes: model.weight_bytes,
                    embedding_dim: 0,
                    layer_start: model.layers.start as u32,
                    layer_end: model.layers.end as u32,
                    fim: model.tokenizer.fim_tokens().is_some(),
                };
                self.models.insert(r.model.clone(), Model::Llama(Box::new(
                    LlamaRuntime::new(model, max_batch, max_seq_len).map_err(|e| Failure(ErrorCode::LoadFailed, format!("{e:#}")))?,
                )));
                ev
            }
            ModelKind::Bert => {
                let bert = BertEmbedder::load(path, &self.device).map_err(|e| Failure(ErrorCode::LoadFailed, format!("{e:#}")))?;
                let ev = Loaded {
                    model: r.model.clone(),
                    kind: kind as i32,
                    n_layers: bert.n_layers as u32,
                    hidden_size: bert.hidden as u32,
                    vocab_size: bert.vocab as u32,
                    max_seq_len: bert.max_seq_len as u32,
                    max_batch: 0,
                    load_ms: 0,
                    weight_bytes: bert.weight_bytes,
                    embedding_dim: bert.hidden as u32,
                    layer_start: 0,
                    layer_end: bert.n_layers as u32,
                    fim: false,
                };
                self.models.insert(r.model.clone(), Model::Bert(Box::new(BertRuntime::new(bert))));
                ev
            }
            ModelKind::Unspecified => return Err(invalid("load_model.kind is unspecified")),
        };
        let ev = Loaded { load_ms: t0.elapsed().as_millis() as u64, ..loaded };
        self.emit(Event::new(id, event::Kind::Loaded(ev)));
        Ok(())
    }

    fn llama(&mut self, name: &str) -> Result<&mut LlamaRuntime, Failure> {
        match self.models.get_mut(name) {
            Some(Model::Llama(rt)) => Ok(rt),
            Some(Model::Bert(_)) => Err(invalid(format!("model {name:?} is an embedding model"))),
            None => Err(Failure(ErrorCode::ModelNotLoaded, format!("model {name:?} is not loaded"))),
        }
    }

    fn in_flight(&self, id: &str) -> bool {
        self.models.values().any(|m| match m {
            Model::Llama(rt) => rt.contains(id),
            Model::Bert(rt) => rt.contains(id),
        })
    }

    fn generate(&mut self, id: &str, g: Generate) -> Outcome {
        if id.is_empty() {
            return Err(invalid("request_id is empty"));
        }
        if self.in_flight(id) {
            return Err(invalid(format!("request id {id:?} is already in flight")));
        }
        if g.max_tokens == 0 {
            return Err(invalid("max_tokens must be at least 1"));
        }
        if !g.temperature.is_finite() || g.temperature < 0.0 {
            return Err(invalid("temperature must be a finite number >= 0"));
        }
        if !g.top_p.is_finite() || !(0.0..=1.0).contains(&g.top_p) {
            return Err(invalid("top_p must be within [0, 1]"));
        }
        if g.top_logprobs > 20 {
            return Err(invalid("top_logprobs must be at most 20"));
        }
        if g.top_logprobs > 0 && !g.logprobs {
            return Err(invalid("top_logprobs needs logprobs"));
        }
        if g.cache_salt.len() > MAX_CACHE_SALT {
            return Err(invalid(format!("cache_salt must be at most {MAX_CACHE_SALT} bytes")));
        }
        for (name, v) in [("frequency_penalty", g.frequency_penalty), ("presence_penalty", g.presence_penalty)] {
            if !v.is_finite() || !(-2.0..=2.0).contains(&v) {
                return Err(invalid(format!("{name} must be within [-2, 2]")));
            }
        }
        if !g.repetition_penalty.is_finite() || g.repetition_penalty < 0.0 {
            return Err(invalid("repetition_penalty must be a finite number > 0 (0 or 1: off)"));
        }
        if !g.min_p.is_finite() || !(0.0..=1.0).contains(&g.min_p) {
            return Err(invalid("min_p must be within [0, 1]"));
        }
        if g.logit_bias.values().any(|b| !b.is_finite() || !(-100.0..=100.0).contains(b)) {
            return Err(invalid("logit_bias values must be within [-100, 100]"));
        }
        let n = g.n.max(1) as usize;
        let rt = self.llama(&g.model)?;
        if !rt.model.is_whole() {
            let (l, n) = (&rt.model.layers, rt.model.cfg.n_layers);
            return Err(invalid(format!("model {:?} is a shard (blocks {}-{} of {n}): generations go through the pipeline's head", g.model, l.start, l.end)));
        }
        if n > rt.max_batch {
            return Err(invalid(format!("n is {n}; this model decodes at most {} sequences together (max_batch)", rt.max_batch)));
        }
        let vocab = rt.model.cfg.vocab;
        if let Some(bad) = g.logit_bias.keys().find(|&&t| t as usize >= vocab) {
            return Err(invalid(format!("logit_bias token {bad} is not in the vocabulary (0..{vocab})")));
        }
        let input: Option<PromptInput> = g.input.map(Into::into);
        let spec = grammar_spec(&g.constraint, &chat_tools(&input)?)?;
        let prompt = if g.suffix.is_empty() {
            tokenize_llama(&rt.model, &input)?
        } else {
            let Some(PromptInput::Prompt(prefix)) = &input else {
                return Err(invalid("suffix needs a text prompt"));
            };
            fim_prompt(&rt.model, prefix, &g.suffix)?
        };
        if prompt.len() >= rt.max_seq_len {
            return Err(Failure(
                ErrorCode::ContextLength,
                format!("prompt is {} tokens; max_seq_len {} leaves no room to generate", prompt.len(), rt.max_seq_len),
            ));
        }
        if rt.queued_len() >= MAX_QUEUED {
            return Err(Failure(ErrorCode::Overloaded, format!("{} requests already queued", rt.queued_len())));
        }
        let grammar = match &spec {
            None => None,
            // The message starts with the field at fault; the agent answers it as the 400's param.
            Some(spec) => {
                let factory = rt.grammars().map_err(|e| invalid(format!("{e:#}")))?;
                Some(factory.compile(spec).map_err(|e| invalid(factory.refusal(spec, &e)))?)
            }
        };
        if g.echo_prompt && !g.logprobs {
            let tok = &self.llama(&g.model)?.model.tokenizer;
            let bytes: Vec<u8> = prompt.iter().flat_map(|&t| tok.token_bytes(t).to_vec()).collect();
            let text = String::from_utf8_lossy(&bytes).into_owned();
            self.emit(Event::new(id, event::Kind::Tokens(Tokens { ids: prompt.clone(), text, logprobs: vec![], index: 0, prompt: true })));
        } else if g.echo_prompt {
            // Each position's logits predict the next token: one forward over the prompt.
            let mut scratch = std::mem::take(&mut self.scratch);
            let rt = self.llama(&g.model)?;
            let nl = rt.model.cfg.n_layers;
            let tokens = rt
                .model
                .forward_range(0, nl, &prompt, None, true, &mut scratch)
                .map(|logits| prompt_logprobs(&rt.model, &prompt, &logits, g.top_logprobs as usize));
            self.scratch = scratch;
            let tokens = tokens.map_err(|e| Failure(ErrorCode::Internal, format!("prompt logprobs: {e:#}")))?;
            self.emit(Event::new(id, event::Kind::Tokens(tokens)));
        }
        let mut logit_bias: Vec<(u32, f32)> = g.logit_bias.into_iter().filter(|&(_, b)| b != 0.0).collect();
        logit_bias.sort_unstable_by_key(|&(t, _)| t);
        let params = SamplingParams {
            temperature: g.temperature,
            top_p: g.top_p,
            top_k: g.top_k,
            seed: g.seed,
            logit_bias,
            frequency_penalty: g.frequency_penalty,
            presence_penalty: g.presence_penalty,
            repetition_penalty: g.repetition_penalty,
            min_p: g.min_p,
        };
        let rt = self.llama(&g.model)?;
        rt.submit(GenRequest {
            request_id: id.to_string(),
            prompt,
            max_tokens: g.max_tokens as usize,
            params,
            stops: g.stop,
            logprobs: g.logprobs.then_some(g.top_logprobs as usize),
            cache_salt: g.cache_salt,
            n,
            grammar,
        });
        Ok(())
    }

    fn tokenize(&mut self, id: &str, t: Tokenize) -> Outcome {
        let ids = match self.models.get(&t.model) {
            Some(Model::Llama(rt)) => tokenize_llama(&rt.model, &t.input.map(Into::into))?,
            Some(Model::Bert(_)) => return Err(invalid("tokenize is only supported for llama models")),
            None => return Err(Failure(ErrorCode::ModelNotLoaded, format!("model {:?} is not loaded", t.model))),
        };
        self.emit(Event::new(id, event::Kind::TokenIds(TokenIds { ids })));
        Ok(())
    }

    /// Queues an embeddings request: the loop runs it a chunk per turn and
    /// answers with one Embeddings event (or Done cancelled).
    fn embed(&mut self, id: &str, e: Embed) -> Outcome {
        if id.is_empty() {
            return Err(invalid("request_id is empty"));
        }
        if self.in_flight(id) {
            return Err(invalid(format!("request id {id:?} is already in flight")));
        }
        let rt = match self.models.get_mut(&e.model) {
            Some(Model::Bert(rt)) => rt,
            Some(Model::Llama(_)) => return Err(invalid(format!("model {:?} is not an embedding model", e.model))),
            None => return Err(Failure(ErrorCode::ModelNotLoaded, format!("model {:?} is not loaded", e.model))),
        };
        if !e.inputs.is_empty() && !e.token_inputs.is_empty() {
            return Err(invalid("embed takes inputs or token_inputs, not both"));
        }
        let count = e.inputs.len() + e.token_inputs.len();
        if count == 0 {
            return Err(invalid("embed.inputs is empty"));
        }
        if count > MAX_EMBED_INPUTS {
            return Err(invalid(format!("embed.inputs has {count} inputs; at most {MAX_EMBED_INPUTS} per request")));
        }
        // A token id is 4 bytes in the request: the same bound as text.
        let bytes: usize = e.inputs.iter().map(String::len).sum::<usize>() + e.token_inputs.iter().map(|t| 4 * t.ids.len()).sum::<usize>();
        if bytes > MAX_EMBED_BYTES {
            return Err(invalid(format!("embed.inputs total {bytes} bytes; at most {MAX_EMBED_BYTES} per request")));
        }
        let vocab = rt.embedder.vocab;
        if e.token_inputs.iter().any(|t| t.ids.is_empty()) {
            return Err(invalid("embed.token_inputs has an empty input"));
        }
        if let Some(bad) = e.token_inputs.iter().flat_map(|t| &t.ids).find(|&&t| t as usize >= vocab) {
            return Err(invalid(format!("token {bad} is not in the vocabulary (0..{vocab})")));
        }
        if rt.queued_len() >= MAX_QUEUED_EMBEDS {
            return Err(Failure(ErrorCode::Overloaded, format!("{} embeddings requests already queued", rt.queued_len())));
        }
        let inputs = if e.token_inputs.is_empty() {
            e.inputs.into_iter().map(EmbedInput::Text).collect()
        } else {
            e.token_inputs.into_iter().map(|t| EmbedInput::Ids(t.ids)).collect()
        };
        rt.submit(EmbedJob::of(id.to_string(), inputs));
        Ok(())
    }

    fn hidden_states(&mut self, id: &str, h: HiddenStates) -> Outcome {
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = (|| {
            let rt = self.llama(&h.model)?;
            let model = &rt.model;
            let hidden = model.cfg.hidden;
            let nl = model.cfg.n_layers;
            // A shard past block 0 starts from the previous shard's rows; every other model from the prompt.
            let acts = match &h.activations {
                Some(t) if !model.is_whole() && model.layers.start > 0 => {
                    if t.shape.len() != 2 || t.shape[1] as usize != hidden || t.shape[0] == 0 {
                        return Err(invalid(format!("activations shape {:?} is not [seq_len, {hidden}]", t.shape)));
                    }
                    Some(t.to_f32().map_err(invalid)?)
                }
                Some(_) => return Err(invalid("activations are for a shard that does not start at block 0")),
                None if !model.is_whole() && model.layers.start > 0 => {
                    return Err(invalid(format!("this shard starts at block {}: send the previous shard's rows as activations", model.layers.start)))
                }
                None => None,
            };
            let tokens = match acts {
                Some(_) => vec![],
                None => tokenize_llama(model, &h.input.map(Into::into))?,
            };
            let n = acts.as_ref().map_or(tokens.len(), |a| a.len() / hidden);
            if n > rt.max_seq_len {
                return Err(Failure(ErrorCode::ContextLength, format!("{n} tokens exceed max_seq_len {}", rt.max_seq_len)));
            }
            let mut output = None;
            let (layers, states) = if model.is_whole() {
                let layers: Vec<usize> =
                    if h.layers.is_empty() { (0..=nl).collect() } else { h.layers.iter().map(|&l| l as usize).collect() };
                if let Some(bad) = layers.iter().find(|&&l| l > nl) {
                    return Err(invalid(format!("layer {bad} out of range 0..={nl}")));
                }
                let states = model.hidden_states(&tokens, &layers, &mut scratch).map_err(|e| Failure(ErrorCode::Internal, format!("{e:#}")))?;
                (layers, states)
            } else {
                let (a, b) = (model.layers.start, model.layers.end);
                let layers: Vec<usize> = match (h.layers.is_empty(), h.pass_on) {
                    (true, true) => vec![],
                    (true, false) => (if a == 0 { 0 } else { a + 1 }..=b).collect(),
                    (false, _) => h.layers.iter().map(|&l| l as usize).collect(),
                };
                let input = match &acts {
                    Some(x) => ShardInput::Activations(x),
                    None => ShardInput::Tokens(&tokens),
                };
                let (states, out) = model.shard_hidden_states(input, &layers, h.pass_on, &mut scratch).map_err(|e| invalid(format!("{e:#}")))?;
                output = out.map(|o| Tensor::from_f32(&[n, hidden], &o));
                (layers, states)
            };
            let pooling = Pooling::try_from(h.pooling).unwrap_or(Pooling::Unspecified);
            let dtype = match DType::try_from(h.dtype).unwrap_or(DType::DtypeUnspecified) {
                DType::DtypeF16 => DType::DtypeF16,
                _ => DType::DtypeF32,
            };
            let tensors = states
                .iter()
                .map(|(_, x)| match pooling {
                    Pooling::Mean => {
                        let mut mean = vec![0f32; hidden];
                        for row in x.chunks_exact(hidden) {
                            for (m, v) in mean.iter_mut().zip(row) {
                                *m += v;
                            }
                        }
                        mean.iter_mut().for_each(|m| *m /= n as f32);
                        Tensor::from_f32_as(&[hidden], &mean, dtype)
                    }
                    Pooling::Last => Tensor::from_f32_as(&[hidden], &x[(n - 1) * hidden..], dtype),
                    _ => Tensor::from_f32_as(&[n, hidden], x, dtype),
                })
                .collect();
            Ok(HiddenStatesResult {
                layers: layers.iter().map(|&l| l as u32).collect(),
                tensors,
                n_tokens: n as u32,
                output,
            })
        })();
        self.scratch = scratch;
        let res = result?;
        self.emit(Event::new(id, event::Kind::HiddenStates(res)));
        Ok(())
    }

    fn forward(&mut self, id: &str, f: Forward) -> Outcome {
        let mut scratch = std::mem::take(&mut self.scratch);
        let result = (|| {
            let rt = self.llama(&f.model)?;
            let model = &rt.model;
            let hidden = model.cfg.hidden;
            let acts = match &f.activations {
                Some(t) if !t.data.is_empty() => {
                    if t.shape.len() != 2 || t.shape[1] as usize != hidden {
                        return Err(invalid(format!("activations shape {:?} is not [seq_len, {hidden}]", t.shape)));
                    }
                    Some(t.to_f32().map_err(invalid)?)
                }
                _ => None,
            };
            if acts.is_some() && !f.token_ids.is_empty() {
                return Err(invalid("send activations or token_ids, not both"));
            }
            let n = acts.as_ref().map_or(f.token_ids.len(), |a| a.len() / hidden);
            if n > rt.max_seq_len {
                return Err(Failure(ErrorCode::ContextLength, format!("{n} positions exceed max_seq_len {}", rt.max_seq_len)));
            }
            let out = model
                .forward_range(f.layer_start as usize, f.layer_end as usize, &f.token_ids, acts.as_deref(), f.logits, &mut scratch)
                .map_err(|e| invalid(format!("{e:#}")))?;
            let width = if f.logits { model.cfg.vocab } else { hidden };
            Ok(ForwardResult { output: Some(Tensor::from_f32(&[out.len() / width, width], &out)) })
        })();
        self.scratch = scratch;
        let res = result?;
        self.emit(Event::new(id, event::Kind::Forward(res)));
        Ok(())
    }
}

/// Prompt or chat messages, whichever oneof the request used.
pub enum PromptInput {
    Prompt(String),
    /// Token ids, fed as they are.
    Tokens(Vec<u32>),
    /// Messages, whether to continue the final (assistant) one, and the tools.
    Messages(ChatMessages),
}

impl From<generate::Input> for PromptInput {
    fn from(i: generate::Input) -> Self {
        match i {
            generate::Input::Prompt(p) => PromptInput::Prompt(p),
            generate::Input::Messages(m) => PromptInput::Messages(m),
            generate::Input::PromptTokens(t) => PromptInput::Tokens(t.ids),
        }
    }
}
impl From<hidden_states::Input> for PromptInput {
    fn from(i: hidden_states::Input) -> Self {
        match i {
            hidden_states::Input::Prompt(p) => PromptInput::Prompt(p),
            hidden_states::Input::Messages(m) => PromptInput::Messages(m),
        }
    }
}
impl From<tokenize::Input> for PromptInput {
    fn from(i: tokenize::Input) -> Self {
        match i {
            tokenize::Input::Prompt(p) => PromptInput::Prompt(p),
            tokenize::Input::Messages(m) => PromptInput::Messages(m),
        }
    }
}

/// The functions a chat offers, validated.
fn chat_tools(input: &Option<PromptInput>) -> Result<Vec<Function>, Failure> {
    let Some(PromptInput::Messages(m)) = input else { return Ok(Vec::new()) };
    let mut seen = std::collections::HashSet::new();
    m.tools
        .iter()
        .map(|t| {
            if !seen.insert(t.name.as_str()) {
                return Err(invalid(format!("tools: {:?} is defined twice", t.name)));
            }
            Function::new(t.name.clone(), t.description.clone(), &t.parameters, t.strict).map_err(|e| invalid(format!("tools: {e:#}")))
        })
        .collect()
}

/// The grammar a Generate asks for (None: free text).
fn grammar_spec(c: &Option<Constraint>, functions: &[Function]) -> Result<Option<GrammarSpec>, Failure> {
    let Some(c) = c else { return Ok(None) };
    let answer = match &c.answer {
        None => Answer::Text,
        Some(constraint::Answer::JsonObject(true)) => Answer::JsonObject,
        Some(constraint::Answer::JsonObject(false)) => Answer::Text,
        Some(constraint::Answer::JsonSchema(s)) => {
            Answer::JsonSchema(serde_json::from_str(s).map_err(|e| invalid(format!("response_format: the JSON Schema is not JSON: {e}")))?)
        }
    };
    let tools = match c.tool_choice.as_ref().map(|t| (ToolChoiceMode::try_from(t.mode).unwrap_or(ToolChoiceMode::None), t)) {
        None | Some((ToolChoiceMode::None, _)) => None,
        Some((mode, t)) => {
            if functions.is_empty() {
                return Err(invalid("tool_choice: the request has no tools"));
            }
            let mode = match mode {
                ToolChoiceMode::Auto => ToolMode::Auto,
                ToolChoiceMode::Required => ToolMode::Required,
                _ => ToolMode::Function(t.function.clone()),
            };
            Some(ToolChoice { functions: functions.to_vec(), mode, parallel: t.parallel })
        }
    };
    let spec = GrammarSpec { answer, strict: c.strict, tools };
    Ok((!spec.is_free()).then_some(spec))
}

/// Token ids for a prompt (special tokens parsed, BOS when the model asks
/// for one) or for chat messages rendered with the model's template.
fn tokenize_llama(model: &LlamaModel, input: &Option<PromptInput>) -> Result<Vec<u32>, Failure> {
    let tok = &model.tokenizer;
    let ids = match input {
        None => return Err(invalid("no input (prompt or messages) given")),
        Some(PromptInput::Prompt(p)) => {
            if p.is_empty() {
                return Err(invalid("prompt is empty"));
            }
            tok.encode(p, true, true)
        }
        Some(PromptInput::Tokens(ids)) => {
            let vocab = model.cfg.vocab;
            if let Some(bad) = ids.iter().find(|&&t| t as usize >= vocab) {
                return Err(invalid(format!("prompt token {bad} is not in the vocabulary (0..{vocab})")));
            }
            ids.clone()
        }
        Some(PromptInput::Messages(chat)) => {
            if chat.messages.is_empty() {
                return Err(invalid("messages is empty"));
            }
            let msgs: Vec<TplMessage> = chat
                .messages
                .iter()
                .map(|m| TplMessage {
                    role: m.role.clone(),
                    content: m.content.clone(),
                    tool_calls: m
                        .tool_calls
                        .iter()
                        .map(|c| ToolCallMsg { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() })
                        .collect(),
                    tool_call_id: (!m.tool_call_id.is_empty()).then(|| m.tool_call_id.clone()),
                })
                .collect();
            let tools = chat_tools(input)?;
            let text = tok
                .apply_chat_template_with_tools(&msgs, &tools, chat.continue_final_message)
                .map_err(|e| invalid(format!("{e:#}")))?;
            // Templates that write the BOS themselves must not get a second one.
            let bos_in_text = tok.bos.and_then(|b| tok.token_text(b)).is_some_and(|b| text.starts_with(b));
            tok.encode(&text, !bos_in_text, true)
        }
    };
    if ids.is_empty() {
        return Err(invalid("input tokenizes to nothing"));
    }
    Ok(ids)
}

/// The fill-in-the-middle prompt (prefix-suffix-middle order, as StarCoder
/// and Qwen were trained): the answer is what goes between the two.
fn fim_prompt(model: &LlamaModel, prefix: &str, suffix: &str) -> Result<Vec<u32>, Failure> {
    let tok = &model.tokenizer;
    let Some((pre, suf, mid)) = tok.fim_tokens() else {
        return Err(invalid("suffix: this model has no fill-in-the-middle tokens"));
    };
    let mut ids = tok.encode("", true, false);
    ids.push(pre);
    ids.extend(tok.encode(prefix, false, false));
    ids.push(suf);
    ids.extend(tok.encode(suffix, false, false));
    ids.push(mid);
    Ok(ids)
}

/// The prompt's tokens with their logprobs under the model (`logits` is
/// [prompt.len(), vocab], position i predicting token i + 1): the first has
/// no chosen logprob, as nothing precedes it.
fn prompt_logprobs(model: &LlamaModel, prompt: &[u32], logits: &[f32], k: usize) -> Tokens {
    let vocab = model.cfg.vocab;
    let tokenizer = &model.tokenizer;
    let entry = |id: u32, logprob: f32| TokenLogprob { id, token: tokenizer.token_bytes(id).to_vec(), logprob };
    let mut out = Vec::with_capacity(prompt.len());
    for (i, &t) in prompt.iter().enumerate() {
        if i == 0 {
            out.push(TokenLogprobs { chosen: Some(TokenLogprob { id: t, token: tokenizer.token_bytes(t).to_vec(), logprob: f32::NAN }), top: vec![] });
            continue;
        }
        let row = &logits[(i - 1) * vocab..i * vocab];
        let (lp, top) = crate::sampling::logprobs(row, t, k);
        out.push(TokenLogprobs { chosen: Some(entry(t, lp)), top: top.into_iter().map(|(id, l)| entry(id, l)).collect() });
    }
    Tokens { ids: prompt.to_vec(), text: String::from_utf8_lossy(&prompt.iter().flat_map(|&t| tokenizer.token_bytes(t).to_vec()).collect::<Vec<u8>>()).into_owned(), logprobs: out, index: 0, prompt: true }
}

/// Resident set size from /proc (0 where there is no procfs).
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}
