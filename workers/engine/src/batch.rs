//! Continuous batching for one llama model: a queue of admitted-but-waiting
//! generations and up to `max_batch` active sequences, each with its own KV
//! cache, sampler and text stream. Every `step` feeds all active sequences
//! together (a decode token each, or the next chunk of a prompt that is still
//! being prefilled), so new requests join between decode steps and a finished
//! or cancelled sequence frees its slot at once.
//!
//! A request for n choices is one sequence until its prompt is computed;
//! then the prompt's keys and values are copied into n - 1 more caches
//! (allocated at admission, so a request either gets all its slots or none)
//! and each choice samples on with its own RNG. One Done answers the request
//! when its last choice ends.

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

use crate::llama::{KvCache, LlamaModel, Scratch, SeqStep};
use crate::prefix::{PrefixCache, DEFAULT_PREFIX_CACHE_BYTES};
use crate::shard::Shards;
use crate::protocol::{event, ChoiceDone, Done, ErrorCode, Event, FinishReason, TokenLogprob, TokenLogprobs, Tokens, Usage};
use crate::grammar::{Grammar, GrammarFactory, Vocab};
use crate::sampling::{Sampler, SamplingParams};

/// Prompt tokens fed per step across all prefilling sequences: long prompts
/// are chunked so running decodes keep streaming while a prompt is read.
const PREFILL_TOKENS_PER_STEP: usize = 512;

/// Generated positions a sequence's KV cache has room for when admitted;
/// past them it doubles, up to prompt + max_tokens (grow_caches). A request
/// without max_tokens may run to the end of the context, and most stop long
/// before: its cache is not allocated (and zeroed) for the whole context.
const FIRST_GENERATED_POSITIONS: usize = 256;
/// Requests waiting beyond the active batch before new ones are refused.
pub const MAX_QUEUED: usize = 4096;

/// Incremental detokenization: holds back bytes of an incomplete UTF-8
/// character and any text tail that could still grow into a stop sequence.
#[derive(Default)]
pub struct TextStream {
    pending: Vec<u8>,
    held: String,
    stops: Vec<String>,
    /// The stop sequence that ended the text, once one has.
    matched: Option<String>,
}

impl TextStream {
    pub fn new(stops: Vec<String>) -> Self {
        TextStream { pending: Vec::new(), held: String::new(), stops: stops.into_iter().filter(|s| !s.is_empty()).collect(), matched: None }
    }

    /// The stop sequence that ended the text, as the request gave it; ""
    /// when none did (ChoiceDone.stop_sequence: EOS and a stop sequence are
    /// both FINISH_REASON_STOP, and clients ask which).
    pub fn stop_sequence(&self) -> &str {
        self.matched.as_deref().unwrap_or("")
    }

    /// Adds a token's bytes; returns the text that is now safe to send and
    /// whether a stop sequence was hit (text from the stop on is dropped).
    pub fn push(&mut self, bytes: &[u8]) -> (String, bool) {
        self.pending.extend_from_slice(bytes);
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    self.held.push_str(s);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    self.held.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap());
                    match e.error_len() {
                        // Incomplete character at the end: wait for more bytes.
                        None => {
                            self.pending.drain(..valid);
                            break;
                        }
                        // Bytes that can never become valid UTF-8.
                        Some(bad) => {
                            self.held.push('\u{FFFD}');
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
        // The earliest match cuts the text; of two starting at the same
        // place, the one listed first is named (as vLLM does).
        let hit = self.stops.iter().filter_map(|s| Some((self.held.find(s.as_str())?, s))).min_by_key(|&(at, _)| at);
        if let Some((at, stop)) = hit {
            self.matched = Some(stop.clone());
            let out = self.held[..at].to_string();
            self.held.clear();
            self.pending.clear();
            return (out, true);
        }
        let keep = self.stop_prefix_len();
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        (out, false)
    }

    /// Longest tail of `held` that is a proper prefix of some stop sequence.
    fn stop_prefix_len(&self) -> usize {
        let mut best = 0;
        for s in &self.stops {
            let max = s.len().saturating_sub(1).min(self.held.len());
            for k in (best + 1..=max).rev() {
                let start = self.held.len() - k;
                if self.held.is_char_boundary(start) && s.is_char_boundary(k) && self.held[start..] == s[..k] {
                    best = k;
                    break;
                }
            }
        }
        best
    }

    /// Everything still held, at the end of a generation that did not stop
    /// on a stop sequence.
    pub fn finish(&mut self) -> String {
        let mut out = std::mem::take(&mut self.held);
        if !self.pending.is_empty() {
            out.push_str(&String::from_utf8_lossy(&self.pending));
            self.pending.clear();
        }
        out
    }
}

pub struct GenRequest {
    pub request_id: String,
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub params: SamplingParams,
    pub stops: Vec<String>,
    /// Some(k): report each token's logprob and the k most likely alternatives.
    pub logprobs: Option<usize>,
    /// Prefix-cache scope: only entries computed under the same salt are reused ("" = none).
    pub cache_salt: String,
    /// Choices to generate (at least 1, at most max_batch).
    pub n: usize,
    /// Constrained decoding: the tokens it may sample next, step by step.
    pub grammar: Option<Grammar>,
}

impl GenRequest {
    /// One choice, no penalties: the plain request the tests and benches build.
    pub fn new(request_id: impl Into<String>, prompt: Vec<u32>, max_tokens: usize, params: SamplingParams) -> Self {
        GenRequest { request_id: request_id.into(), prompt, max_tokens, params, stops: vec![], logprobs: None, cache_salt: String::new(), n: 1, grammar: None }
    }
}

struct Sequence {
    request_id: String,
    /// Which choice of its request this is (0 for the first).
    index: u32,
    /// The first choice holds the other choices' empty caches until its
    /// prompt is computed; then they are forked from it.
    spare: Vec<KvCache>,
    /// The request's seed, for the forks (choice i samples with seed + i).
    seed: Option<u64>,
    stops: Vec<String>,
    prompt: Vec<u32>,
    prefilled: usize,
    generated: usize,
    max_new: usize,
    /// Sampled tokens, in order (what the cache holds after the prompt).
    out: Vec<u32>,
    /// Prompt tokens taken from the prefix cache.
    cached: usize,
    /// The prefix-cache scope it reads and writes.
    cache_salt: String,
    cache: KvCache,
    sampler: Sampler,
    logprobs: Option<usize>,
    text: TextStream,
    grammar: Option<Grammar>,
    /// Its grammar failed: the request ends with this Error instead of a
    /// Done (all its choices).
    errored: Option<String>,
    /// Tokens fed at the next step (a prompt chunk, or the last sampled token).
    feed: Vec<u32>,
    t_admit: Instant,
    t_first: Option<Instant>,
}

pub struct LlamaRuntime {
    pub model: LlamaModel,
    pub max_batch: usize,
    pub max_seq_len: usize,
    queue: VecDeque<GenRequest>,
    active: Vec<Sequence>,
    scratch: Scratch,
    pub tokens_generated: u64,
    prefix: PrefixCache,
    /// Sequences of a split model this shard holds caches for (shard.rs).
    pub shards: Shards,
    /// Requests with choices still running: what the ended ones reported.
    groups: HashMap<String, Group>,
    /// Compiles constrained-decoding grammars over this model's vocabulary.
    grammars: GrammarSlot,
}

/// A request's choices that ended, while others still run.
#[derive(Default)]
struct Group {
    running: usize,
    choices: Vec<ChoiceDone>,
}

/// The grammar compiler of a model: built on its own thread from the moment
/// the model loads (slicing the vocabulary takes a second or two on a CPU),
/// so neither the load nor the request loop waits for it.
enum GrammarSlot {
    Building(std::thread::JoinHandle<anyhow::Result<GrammarFactory>>),
    Ready(GrammarFactory),
    Failed(String),
}

impl GrammarSlot {
    fn start(vocab: anyhow::Result<Vocab>) -> Self {
        match vocab {
            Err(e) => GrammarSlot::Failed(format!("{e:#}")),
            Ok(v) => GrammarSlot::Building(std::thread::spawn(move || {
                let t = Instant::now();
                let f = GrammarFactory::from_vocab(v);
                eprintln!("switchyard-engine: constrained decoding ready for the vocabulary in {:?}", t.elapsed());
                f
            })),
        }
    }

    fn get(&mut self) -> anyhow::Result<&GrammarFactory> {
        if let GrammarSlot::Building(_) = self {
            let GrammarSlot::Building(h) = std::mem::replace(self, GrammarSlot::Failed(String::new())) else { unreachable!() };
            *self = match h.join() {
                Ok(Ok(f)) => GrammarSlot::Ready(f),
                Ok(Err(e)) => GrammarSlot::Failed(format!("{e:#}")),
                Err(p) => GrammarSlot::Failed(panic_message(&p)),
            };
        }
        match self {
            GrammarSlot::Ready(f) => Ok(f),
            GrammarSlot::Failed(e) => Err(anyhow::anyhow!("constrained decoding is unavailable for this model: {e}")),
            GrammarSlot::Building(_) => unreachable!(),
        }
    }
}

/// The Done event of a request cancelled before admission.
fn done(request_id: &str, reason: FinishReason, prompt: usize, completion: usize) -> Event {
    Done {
        finish_reason: reason as i32,
        usage: Some(Usage { prompt_tokens: prompt as u32, completion_tokens: completion as u32 }),
        ..Default::default()
    }
    .into_event(request_id)
}

/// How choice `s` ended: with a stop sequence, which one.
fn choice_done(s: &Sequence, reason: FinishReason) -> ChoiceDone {
    ChoiceDone { index: s.index, finish_reason: reason as i32, completion_tokens: s.generated as u32, stop_sequence: s.text.stop_sequence().to_string() }
}

/// The Done event of a request whose last running choice is `s`, the
/// others having ended as `choices`.
fn done_of(s: &Sequence, reason: FinishReason, mut choices: Vec<ChoiceDone>) -> Event {
    let (prefill_us, decode_us) = timings(s);
    choices.push(choice_done(s, reason));
    choices.sort_by_key(|c| c.index);
    let completion: u32 = choices.iter().map(|c| c.completion_tokens).sum();
    Done {
        // A cancelled request says so, whichever of its choices had ended.
        finish_reason: if reason == FinishReason::Cancelled { reason as i32 } else { choices[0].finish_reason },
        usage: Some(Usage { prompt_tokens: s.prompt.len() as u32, completion_tokens: completion }),
        prefill_us,
        decode_us,
        cached_prompt_tokens: s.cached as u32,
        choices,
    }
    .into_event(&s.request_id)
}

impl Done {
    fn into_event(self, request_id: &str) -> Event {
        Event::new(request_id, event::Kind::Done(self))
    }
}



impl LlamaRuntime {
    pub fn new(mut model: LlamaModel, max_batch: usize, max_seq_len: usize) -> anyhow::Result<Self> {
        model.ensure_rope(max_seq_len)?;
        let model_vocab = Vocab::of(&model.tokenizer);
        Ok(LlamaRuntime {
            model,
            max_batch: max_batch.max(1),
            max_seq_len,
            queue: VecDeque::new(),
            active: Vec::new(),
            scratch: Scratch::default(),
            tokens_generated: 0,
            shards: Shards::default(),
            groups: HashMap::new(),
            grammars: GrammarSlot::start(model_vocab),
            prefix: PrefixCache::new(
                std::env::var("SWITCHYARD_PREFIX_CACHE_MB").ok().and_then(|v| v.parse::<usize>().ok()).map_or(DEFAULT_PREFIX_CACHE_BYTES, |mb| mb << 20),
            ),
        })
    }

    /// The grammar compiler for this model's vocabulary (waits for it the
    /// first time if it is still being built).
    pub fn grammars(&mut self) -> anyhow::Result<&GrammarFactory> {
        self.grammars.get()
    }

    /// Bounds the prefix cache (0 turns it off and empties it).
    pub fn set_prefix_cache_bytes(&mut self, bytes: usize) {
        self.prefix.set_cap(bytes);
    }

    pub fn prefix_cache_bytes(&self) -> u64 {
        self.prefix.bytes()
    }

    /// Prompts that took a prefix from the cache, and the positions they took.
    pub fn prefix_stats(&self) -> (u64, u64) {
        (self.prefix.hits, self.prefix.tokens_reused)
    }

    /// Keeps what sequence `s` computed so far (prompt, then what it generated).
    fn keep_prefix(prefix: &mut PrefixCache, model: &LlamaModel, s: &Sequence) {
        let tokens: Vec<u32> = s.prompt.iter().chain(&s.out).copied().take(s.cache.len).collect();
        prefix.keep(model, &s.cache_salt, tokens, &s.cache);
    }

    pub fn has_work(&self) -> bool {
        !self.active.is_empty() || !self.queue.is_empty()
    }

    /// Sequences decoding or prefilling, counting each choice.
    pub fn active_len(&self) -> usize {
        self.active.iter().map(|s| 1 + s.spare.len()).sum()
    }

    pub fn queued_len(&self) -> usize {
        self.queue.len()
    }

    pub fn kv_cache_bytes(&self) -> u64 {
        self.active.iter().flat_map(|s| std::iter::once(&s.cache).chain(&s.spare)).map(|c| c.bytes() as u64).sum()
    }

    pub fn contains(&self, request_id: &str) -> bool {
        self.queue.iter().any(|q| q.request_id == request_id) || self.active.iter().any(|s| s.request_id == request_id)
    }

    /// Queues a validated request; the caller checked prompt length and queue room.
    pub fn submit(&mut self, req: GenRequest) {
        self.queue.push_back(req);
    }

    /// Cancels a queued or running generation; true if it was here.
    pub fn cancel(&mut self, request_id: &str, emit: &mut dyn FnMut(Event)) -> bool {
        if let Some(i) = self.queue.iter().position(|q| q.request_id == request_id) {
            let q = self.queue.remove(i).unwrap();
            emit(done(&q.request_id, FinishReason::Cancelled, q.prompt.len(), 0));
            return true;
        }
        let mut found = None;
        while let Some(i) = self.active.iter().position(|s| s.request_id == request_id) {
            let s = self.active.swap_remove(i);
            if s.index == 0 {
                Self::keep_prefix(&mut self.prefix, &self.model, &s);
            }
            if let Some(prev) = found.replace(s) {
                self.end_choice(&prev, FinishReason::Cancelled);
            }
        }
        match found {
            Some(last) => {
                let ended = self.groups.remove(request_id).map(|g| g.choices).unwrap_or_default();
                emit(done_of(&last, FinishReason::Cancelled, ended));
                true
            }
            None => false,
        }
    }

    /// Notes a choice that ended while others of its request run on.
    fn end_choice(&mut self, s: &Sequence, reason: FinishReason) {
        let g = self.groups.entry(s.request_id.clone()).or_default();
        g.running = g.running.saturating_sub(1);
        g.choices.push(choice_done(s, reason));
    }

    pub fn cancel_all(&mut self, emit: &mut dyn FnMut(Event)) {
        let ids: Vec<String> = self
            .queue
            .iter()
            .map(|q| q.request_id.clone())
            .chain(self.active.iter().map(|s| s.request_id.clone()))
            .collect();
        for id in ids {
            self.cancel(&id, emit);
        }
    }

    fn admit(&mut self, emit: &mut dyn FnMut(Event)) {
        // In arrival order: a request waits until all its choices fit.
        while let Some(front) = self.queue.front() {
            if self.active_len() + front.n.max(1) > self.max_batch {
                break;
            }
            let req = self.queue.pop_front().unwrap();
            let n = req.n.max(1);
            let limit = (req.prompt.len() + req.max_tokens).min(self.max_seq_len);
            let max_new = limit - req.prompt.len();
            let capacity = (req.prompt.len() + FIRST_GENERATED_POSITIONS).min(limit);
            let caches: Result<Vec<KvCache>, _> = (0..n).map(|_| self.model.new_cache(capacity)).collect();
            let mut caches = match caches {
                Ok(c) => c,
                Err(e) => {
                    // Out of device memory for this one: it fails, the rest run.
                    emit(Event::error(&req.request_id, ErrorCode::Internal, format!("allocating the KV cache: {e:#}")));
                    continue;
                }
            };
            let mut cache = caches.pop().unwrap();
            let cached = self.prefix.reuse(&req.cache_salt, &req.prompt, &mut cache);
            let seed = req.params.seed;
            let mut sampler = Sampler::new(req.params);
            sampler.prime(&req.prompt);
            if n > 1 {
                self.groups.insert(req.request_id.clone(), Group { running: n, choices: Vec::new() });
            }
            self.active.push(Sequence {
                request_id: req.request_id,
                index: 0,
                spare: caches,
                seed,
                stops: req.stops.clone(),
                prompt: req.prompt,
                prefilled: cached,
                generated: 0,
                max_new,
                out: Vec::new(),
                cached,
                cache_salt: req.cache_salt,
                cache,
                sampler,
                logprobs: req.logprobs,
                text: TextStream::new(req.stops),
                grammar: req.grammar,
                errored: None,
                feed: Vec::new(),
                t_admit: Instant::now(),
                t_first: None,
            });
        }
    }

    /// One batched forward over every active sequence, then sampling and
    /// events. Errors inside the model end the affected requests with an
    /// Error event instead of taking the engine down; the message comes back
    /// so the engine can decide whether the device is still usable.
    pub fn step(&mut self, emit: &mut dyn FnMut(Event)) -> Result<(), String> {
        self.admit(emit);
        if self.active.is_empty() {
            return Ok(());
        }
        let mut budget = PREFILL_TOKENS_PER_STEP;
        for s in &mut self.active {
            if s.prefilled < s.prompt.len() {
                s.feed.clear();
                // Every prefilling sequence moves forward each step, even when
                // the budget is spent, so none of them starves.
                let n = (s.prompt.len() - s.prefilled).min(budget.max(16));
                budget = budget.saturating_sub(n);
                s.feed.extend_from_slice(&s.prompt[s.prefilled..s.prefilled + n]);
            }
        }
        // Decoding sequences already hold their last sampled token in
        // `feed` (pushed after sampling below).
        self.grow_caches(emit);
        if self.active.is_empty() {
            return Ok(());
        }
        let model = &self.model;
        let scratch = &mut self.scratch;
        let active = &mut self.active;
        let result = catch_unwind(AssertUnwindSafe(|| {
            let mut steps: Vec<SeqStep> =
                active.iter_mut().map(|s| SeqStep { tokens: &s.feed, cache: &mut s.cache }).collect();
            model.step(&mut steps, scratch)
        }));
        let err = match result {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("{e:#}")),
            Err(p) => Some(panic_message(&p)),
        };
        if let Some(msg) = err {
            eprintln!("switchyard-engine: batch step failed: {msg}");
            // One error per request, however many choices it had running.
            let mut told = std::collections::HashSet::new();
            for s in self.active.drain(..) {
                if told.insert(s.request_id.clone()) {
                    emit(Event::error(&s.request_id, ErrorCode::Internal, format!("model step failed: {msg}")));
                }
            }
            self.groups.clear();
            self.scratch = Scratch::default();
            return Err(msg);
        }
        let vocab = self.model.cfg.vocab;
        let mut finished: Vec<(usize, FinishReason)> = Vec::new();
        // Choices forked this step, sampled from their first choice's logits.
        let mut forked: Vec<Sequence> = Vec::new();
        let mut forked_finished: Vec<(usize, FinishReason)> = Vec::new();
        for (i, s) in self.active.iter_mut().enumerate() {
            if s.prefilled < s.prompt.len() {
                s.prefilled += s.feed.len();
                if s.prefilled < s.prompt.len() {
                    continue;
                }
                // Its prompt is computed: requests arriving while it still
                // generates can take it (a burst behind one system prompt).
                Self::keep_prefix(&mut self.prefix, &self.model, s);
                // Its other choices start from the same keys and values.
                let spare = std::mem::take(&mut s.spare);
                let base = forked.len();
                for (k, mut cache) in spare.into_iter().enumerate() {
                    let index = k as u32 + 1;
                    if let Err(e) = cache.copy_prefix_from(&s.cache, s.prompt.len()) {
                        // Same shapes, capacity checked at admission: not expected.
                        // The request answers with the choices it has.
                        eprintln!("switchyard-engine: forking choice {index} of {:?}: {e:#}", s.request_id);
                        if let Some(g) = self.groups.get_mut(&s.request_id) {
                            g.running -= 1;
                        }
                        continue;
                    }
                    forked.push(Sequence {
                        request_id: s.request_id.clone(),
                        index,
                        spare: Vec::new(),
                        seed: s.seed,
                        stops: s.stops.clone(),
                        prompt: s.prompt.clone(),
                        prefilled: s.prefilled,
                        generated: 0,
                        max_new: s.max_new,
                        out: Vec::new(),
                        cached: s.cached,
                        cache_salt: s.cache_salt.clone(),
                        cache,
                        sampler: s.sampler.fork(s.seed.map(|seed| seed.wrapping_add(index as u64))),
                        logprobs: s.logprobs,
                        text: TextStream::new(s.stops.clone()),
                        // Its own grammar state, from the first choice's
                        // (nothing sampled yet): a fresh grammar.
                        grammar: s.grammar.as_ref().map(Grammar::fork),
                        errored: None,
                        feed: Vec::new(),
                        t_admit: s.t_admit,
                        t_first: None,
                    });
                }
                let logits = &self.scratch.logits[i * vocab..(i + 1) * vocab];
                for (k, f) in forked[base..].iter_mut().enumerate() {
                    if let Some(reason) = Self::sample_next(&self.model, &mut self.tokens_generated, f, logits, emit) {
                        forked_finished.push((base + k, reason));
                    }
                }
            }
            let logits = &self.scratch.logits[i * vocab..(i + 1) * vocab];
            if let Some(reason) = Self::sample_next(&self.model, &mut self.tokens_generated, s, logits, emit) {
                finished.push((i, reason));
            }
        }
        let base = self.active.len();
        self.active.extend(forked);
        finished.extend(forked_finished.into_iter().map(|(k, r)| (base + k, r)));
        // Remove from the back so earlier indices stay valid.
        finished.sort_by_key(|&(i, _)| i);
        // A request one of whose choices failed its grammar ends with one
        // Error and no Done, every choice of it.
        let failed: HashMap<String, String> = finished
            .iter()
            .filter_map(|&(i, _)| Some((self.active[i].request_id.clone(), self.active[i].errored.clone()?)))
            .collect();
        for &(i, reason) in finished.iter().rev() {
            let mut s = self.active.swap_remove(i);
            if failed.contains_key(&s.request_id) {
                if s.index == 0 {
                    Self::keep_prefix(&mut self.prefix, &self.model, &s);
                }
                continue;
            }
            // A stop-sequence hit already dropped the held text; otherwise
            // whatever was held back as a possible stop prefix goes out now.
            let tail = s.text.finish();
            if !tail.is_empty() {
                emit(Event::new(&s.request_id, event::Kind::Tokens(Tokens { ids: vec![], text: tail, logprobs: vec![], index: s.index, prompt: false })));
            }
            if s.index == 0 {
                Self::keep_prefix(&mut self.prefix, &self.model, &s);
            }
            let last = self.groups.get(&s.request_id).is_none_or(|g| g.running <= 1);
            if last {
                let ended = self.groups.remove(&s.request_id).map(|g| g.choices).unwrap_or_default();
                emit(done_of(&s, reason, ended));
            } else {
                self.end_choice(&s, reason);
            }
        }
        for (id, msg) in failed {
            while let Some(i) = self.active.iter().position(|s| s.request_id == id) {
                let s = self.active.swap_remove(i);
                if s.index == 0 {
                    Self::keep_prefix(&mut self.prefix, &self.model, &s);
                }
            }
            self.groups.remove(&id);
            emit(Event::error(&id, ErrorCode::Internal, msg));
        }
        Ok(())
    }
}

impl LlamaRuntime {
    /// Samples `s`'s next token from `logits`, emits it, and says whether
    /// the sequence ended (EOS, a stop sequence, or its token budget).
    /// A grammar leaves the sampler only the tokens it allows (masked after
    /// the bias and the penalties); logprobs stay those of the model's own
    /// distribution. A grammar failure marks `s` errored (Cancelled here).
    /// A sequence whose next tokens would pass its cache's end gets a cache
    /// twice as large (at most prompt + max_new positions, which admission
    /// bounded by max_seq_len), its keys and values copied over. One that
    /// cannot (out of memory) fails alone, with every choice of its request.
    fn grow_caches(&mut self, emit: &mut dyn FnMut(Event)) {
        let mut failed: Vec<(String, String)> = Vec::new();
        let model = &self.model;
        for s in &mut self.active {
            let need = s.cache.len + s.feed.len();
            if need <= s.cache.capacity {
                continue;
            }
            let limit = (s.prompt.len() + s.max_new).max(need);
            let capacity = (s.cache.capacity * 2).clamp(need, limit);
            let grown = model.new_cache(capacity).and_then(|mut c| {
                c.copy_prefix_from(&s.cache, s.cache.len)?;
                Ok(c)
            });
            match grown {
                Ok(c) => s.cache = c,
                Err(e) => failed.push((s.request_id.clone(), format!("growing the KV cache to {capacity} positions: {e:#}"))),
            }
        }
        for (id, msg) in failed {
            if !self.active.iter().any(|s| s.request_id == id) {
                continue; // another choice of it failed first
            }
            self.active.retain(|s| s.request_id != id);
            self.groups.remove(&id);
            emit(Event::error(&id, ErrorCode::Internal, msg));
        }
    }

    fn sample_next(model: &LlamaModel, tokens_generated: &mut u64, s: &mut Sequence, logits: &[f32], emit: &mut dyn FnMut(Event)) -> Option<FinishReason> {
        let tok = match &mut s.grammar {
            None => s.sampler.sample(logits),
            Some(g) => match s.sampler.sample_masked(logits, &mut |l| g.mask_logits(l)) {
                Ok(tok) => tok,
                Err(e) => {
                    s.errored = Some(format!("constrained decoding: {e:#}"));
                    return Some(FinishReason::Cancelled);
                }
            },
        };
        if s.t_first.is_none() {
            s.t_first = Some(Instant::now());
        }
        if model.tokenizer.is_eog(tok) {
            return Some(FinishReason::Stop);
        }
        if let Some(g) = &mut s.grammar {
            if let Err(e) = g.commit(tok) {
                s.errored = Some(format!("constrained decoding: {e:#}"));
                return Some(FinishReason::Cancelled);
            }
        }
        s.generated += 1;
        s.out.push(tok);
        *tokens_generated += 1;
        let (text, stopped) = s.text.push(model.tokenizer.token_bytes(tok));
        let logprobs = match s.logprobs {
            None => vec![],
            Some(k) => {
                let tokenizer = &model.tokenizer;
                let entry = |id: u32, logprob: f32| TokenLogprob { id, token: tokenizer.token_bytes(id).to_vec(), logprob };
                let (lp, top) = crate::sampling::logprobs(logits, tok, k);
                vec![TokenLogprobs { chosen: Some(entry(tok, lp)), top: top.into_iter().map(|(id, l)| entry(id, l)).collect() }]
            }
        };
        emit(Event::new(&s.request_id, event::Kind::Tokens(Tokens { ids: vec![tok], text, logprobs, index: s.index, prompt: false })));
        // A complete grammar allows nothing more: the answer is whole.
        if stopped || s.grammar.as_ref().is_some_and(Grammar::is_done) {
            Some(FinishReason::Stop)
        } else if s.generated >= s.max_new {
            Some(FinishReason::Length)
        } else {
            s.feed.clear();
            s.feed.push(tok);
            None
        }
    }
}

fn timings(s: &Sequence) -> (u64, u64) {
    match s.t_first {
        Some(first) => (
            first.duration_since(s.t_admit).as_micros() as u64,
            first.elapsed().as_micros() as u64,
        ),
        None => (s.t_admit.elapsed().as_micros() as u64, 0),
    }
}

pub fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        format!("panic: {s}")
    } else if let Some(s) = p.downcast_ref::<String>() {
        format!("panic: {s}")
    } else {
        "panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_incomplete_utf8() {
        let mut t = TextStream::new(vec![]);
        let euro = "€".as_bytes();
        assert_eq!(t.push(&euro[..1]), (String::new(), false));
        assert_eq!(t.push(&euro[1..]), ("€".to_string(), false));
    }

    #[test]
    fn stop_sequence_never_leaks() {
        let mut t = TextStream::new(vec!["END".into()]);
        let mut out = String::new();
        let mut stopped = false;
        for piece in ["Hello E", "N", "D and more"] {
            let (s, hit) = t.push(piece.as_bytes());
            out.push_str(&s);
            if hit {
                stopped = true;
                break;
            }
        }
        assert!(stopped);
        assert_eq!(out, "Hello ");
    }

    #[test]
    fn names_the_stop_sequence_that_ended_the_text() {
        let hit = |stops: &[&str], pieces: &[&str]| {
            let mut t = TextStream::new(stops.iter().map(|s| s.to_string()).collect());
            let mut out = String::new();
            for p in pieces {
                let (s, stopped) = t.push(p.as_bytes());
                out.push_str(&s);
                if stopped {
                    return (out, t.stop_sequence().to_string());
                }
            }
            out.push_str(&t.finish());
            (out, t.stop_sequence().to_string())
        };
        // The earliest match wins, whatever its place in the list.
        assert_eq!(hit(&["world", "ell"], &["Hello world"]), ("H".into(), "ell".into()));
        // Two starting at the same place: the one listed first.
        assert_eq!(hit(&["lo w", "lo"], &["Hello world"]), ("Hel".into(), "lo w".into()));
        assert_eq!(hit(&["lo", "lo w"], &["Hello world"]), ("Hel".into(), "lo".into()));
        // Across tokens, as given (not as the tokens split it).
        assert_eq!(hit(&["", "o w"], &["Hell", "o", " wor", "ld"]), ("Hell".into(), "o w".into()));
        // No match: nothing named.
        assert_eq!(hit(&["xyz"], &["Hello ", "world"]), ("Hello world".into(), String::new()));
    }

    #[test]
    fn partial_stop_is_released_when_it_diverges() {
        let mut t = TextStream::new(vec!["END".into()]);
        assert_eq!(t.push(b"x EN"), ("x ".to_string(), false));
        assert_eq!(t.push(b"Z"), ("ENZ".to_string(), false));
        assert_eq!(t.finish(), "");
    }

    #[test]
    fn held_text_flushes_at_finish() {
        let mut t = TextStream::new(vec!["</s>".into()]);
        assert_eq!(t.push(b"a </"), ("a ".to_string(), false));
        assert_eq!(t.finish(), "</");
    }
}
