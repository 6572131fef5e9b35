//! The llama-architecture model: hyperparameters and tokenizer read from the
//! GGUF, and one forward API with two executors behind it:
//!
//! - `host`: the engine's own quantized CPU kernels (Q4_1/Q8_0 with AVX-512
//!   VNNI / AVX2), the fastest path on a CPU;
//! - `device`: candle tensors and candle's quantized matmuls on any candle
//!   device (CUDA, Metal, or the CPU, where it is the reference the tests
//!   hold the device path to).
//!
//! Callers (the batch scheduler, hidden states, layer-range forwarding, the
//! bench) see only `LlamaModel`, `KvCache`, `Scratch` and `SeqStep`; which
//! executor runs is decided once, at load.

mod device;
mod host;

use std::fs::File;
use std::ops::Range;
use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::quantized::{gguf_file, GgmlDType};
use candle_core::Device;

use crate::kernels::{self, QActs, QMatrix};
use crate::tokenizer::GgufTokenizer;

/// The decoder architectures the engine runs, from `general.architecture`.
/// They share one forward (`host.rs`, `device.rs`); what differs is in
/// `LlamaConfig`: the rope layout, q/k/v biases, per-head q/k norms, norms
/// after attention and the FFN, the FFN's activation, an embedding scale,
/// sliding-window layers and soft-capping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    /// Qwen2 / Qwen2.5: llama's blocks with biases on q, k and v and
    /// NeoX-style rope.
    Qwen2,
    /// Gemma 3: q/k RMS norms per head, norms after attention and the FFN,
    /// GeGLU, embeddings scaled by sqrt(hidden), and five sliding-window
    /// layers (their own rope base) to one global layer.
    Gemma3,
}

impl Arch {
    pub fn from_name(name: &str) -> Result<Arch> {
        Ok(match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "gemma3" => Arch::Gemma3,
            other => bail!("architecture {other:?} is not supported (llama, qwen2, gemma3)"),
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Gemma3 => "gemma3",
        }
    }
}

/// The FFN's gate activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// SwiGLU: silu(gate) * up.
    Silu,
    /// GeGLU with GELU's tanh approximation (ggml's `ggml_gelu`).
    GeluTanh,
}

#[derive(Clone, Debug)]
pub struct LlamaConfig {
    pub arch: Arch,
    pub n_layers: usize,
    pub hidden: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub rope_base: f32,
    pub rope_dims: usize,
    pub eps: f32,
    /// Context length the model was trained for (GGUF `context_length`).
    pub train_ctx: usize,
    /// Rope rotates (i, i + dims/2) pairs (NeoX; qwen2, gemma3) instead of
    /// adjacent pairs (llama, whose converter permutes q/k for it).
    pub rope_neox: bool,
    /// Positions are multiplied by this before rope (linear rope scaling,
    /// global layers only; 1 for none).
    pub rope_scale: f32,
    /// Sliding-window layers: keys at most `window - 1` positions back are
    /// seen, and rope uses `rope_base_swa`. `swa[l]` says which layers.
    pub window: Option<usize>,
    pub swa: Vec<bool>,
    pub rope_base_swa: f32,
    /// Scale of q·k before softmax.
    pub attn_scale: f32,
    /// Embeddings multiplied by this (gemma: sqrt(hidden)).
    pub embed_scale: f32,
    pub act: Act,
    /// tanh soft-capping of attention scores / final logits, where the
    /// GGUF gives one (`cap * tanh(x / cap)`).
    pub attn_softcap: Option<f32>,
    pub final_softcap: Option<f32>,
}

impl LlamaConfig {
    /// Hyperparameters from `{arch}.*` metadata, with each architecture's
    /// defaults where llama.cpp has them.
    pub fn from_gguf(content: &gguf_file::Content, arch: Arch, vocab: usize) -> Result<LlamaConfig> {
        let a = arch.name();
        let key = |k: &str| format!("{a}.{k}");
        let u = |k: &str| -> Result<usize> { Ok(metadata(content, &key(k))?.to_u32()? as usize) };
        let f = |k: &str| -> Option<f32> { content.metadata.get(&key(k)).and_then(|v| v.to_f32().ok()) };
        let n_heads = u("attention.head_count")?;
        let hidden = u("embedding_length")?;
        let head_dim = u("attention.key_length").unwrap_or(hidden / n_heads);
        let n_layers = u("block_count")?;
        let gemma = arch == Arch::Gemma3;
        let window = if gemma { u("attention.sliding_window").ok() } else { None };
        // llama.cpp's gemma3 pattern: every 6th layer global, the rest local.
        let swa = (0..n_layers).map(|l| window.is_some() && l % 6 < 5).collect();
        let rope_scale = match (content.metadata.get(&key("rope.scaling.type")).and_then(|v| v.to_string().ok()), f("rope.scaling.factor")) {
            (Some(t), Some(fct)) if t == "linear" && fct > 0.0 => 1.0 / fct,
            _ => 1.0,
        };
        let cfg = LlamaConfig {
            arch,
            n_layers,
            hidden,
            n_heads,
            n_kv_heads: u("attention.head_count_kv").unwrap_or(n_heads),
            head_dim,
            ffn: u("feed_forward_length")?,
            vocab,
            rope_base: f("rope.freq_base").unwrap_or(if gemma { 1_000_000.0 } else { 10000.0 }),
            rope_dims: u("rope.dimension_count").unwrap_or(head_dim),
            eps: f("attention.layer_norm_rms_epsilon").context("GGUF metadata attention.layer_norm_rms_epsilon missing")?,
            train_ctx: u("context_length").unwrap_or(4096),
            rope_neox: arch != Arch::Llama,
            rope_scale,
            window,
            swa,
            rope_base_swa: 10000.0,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            embed_scale: if gemma { (hidden as f32).sqrt() } else { 1.0 },
            act: if gemma { Act::GeluTanh } else { Act::Silu },
            attn_softcap: f("attn_logit_softcapping").filter(|c| *c > 0.0),
            final_softcap: f("final_logit_softcapping").filter(|c| *c > 0.0),
        };
        Ok(cfg)
    }

    pub fn q_dim(&self) -> usize {
        self.n_heads * self.head_dim
    }
    pub fn kv_dim(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Whether layer `l` is a sliding-window layer.
    pub fn is_swa(&self, l: usize) -> bool {
        self.window.is_some() && self.swa.get(l).copied().unwrap_or(false)
    }

    /// The first key position a query at `pos` sees in layer `l`.
    pub fn first_visible(&self, l: usize, pos: usize) -> usize {
        match self.window {
            Some(w) if self.is_swa(l) => (pos + 1).saturating_sub(w),
            _ => 0,
        }
    }

    /// RoPE cos/sin for positions < `len`, `[len][rope_dims / 2]`, computed
    /// the way ggml does (theta multiplied down in f32, so values match
    /// llama.cpp's closely). Both executors use these same tables; `swa`
    /// gives the sliding-window layers' table (their own base, no scaling).
    fn rope_tables(&self, len: usize, swa: bool) -> (Vec<f32>, Vec<f32>) {
        let half = self.rope_dims / 2;
        let (base, scale) = if swa { (self.rope_base_swa, 1.0) } else { (self.rope_base, self.rope_scale) };
        let theta_scale = base.powf(-2.0 / self.rope_dims as f32);
        let mut cos = vec![0f32; len * half];
        let mut sin = vec![0f32; len * half];
        for p in 0..len {
            let mut theta = p as f32 * scale;
            for i in 0..half {
                cos[p * half + i] = theta.cos();
                sin[p * half + i] = theta.sin();
                theta *= theta_scale;
            }
        }
        (cos, sin)
    }
}

/// Which executor runs the forward.
#[derive(Clone, Debug)]
pub enum Backend {
    /// The engine's own CPU kernels.
    Kernels,
    /// candle ops on this device.
    Candle(Device),
}

impl Backend {
    pub fn name(&self) -> String {
        match self {
            Backend::Kernels => "kernels".into(),
            Backend::Candle(Device::Cpu) => "candle:cpu".into(),
            Backend::Candle(d) if d.is_cuda() => "candle:cuda".into(),
            Backend::Candle(_) => "candle:metal".into(),
        }
    }
}

enum Exec {
    Host(host::HostModel),
    Device(device::DeviceModel),
}

pub struct LlamaModel {
    pub cfg: LlamaConfig,
    /// The blocks this process holds: `0..n_layers`, or a shard's range of a
    /// split model (embeddings only on the first, the head only on the last).
    pub layers: Range<usize>,
    pub tokenizer: GgufTokenizer,
    backend: Backend,
    exec: Exec,
    rope_len: usize,
    pub weight_bytes: u64,
}

/// One sequence's keys and values for up to `capacity` positions; decode
/// appends in place. The scheduler sizes it for the prompt and the first
/// generated tokens and replaces it with a larger copy when decoding reaches
/// its end (batch.rs grow_caches). Lives where the executor computes.
pub struct KvCache {
    pub len: usize,
    pub capacity: usize,
    bytes: usize,
    store: KvStore,
}

enum KvStore {
    Host(host::HostKv),
    Device(device::DeviceKv),
}

impl KvCache {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes positions 0..n from `src` (another cache of the same model):
    /// keys and values depend only on the tokens up to their position, so a
    /// prompt that starts with `src`'s first n tokens can skip computing them.
    pub fn copy_prefix_from(&mut self, src: &KvCache, n: usize) -> Result<()> {
        if n > src.len || n > self.capacity {
            bail!("prefix of {n} positions: source holds {}, capacity is {}", src.len, self.capacity);
        }
        match (&mut self.store, &src.store) {
            (KvStore::Host(d), KvStore::Host(s)) => d.copy_prefix_from(s, n),
            (KvStore::Device(d), KvStore::Device(s)) => d.copy_prefix_from(s, n)?,
            _ => bail!("KV caches of different executors"),
        }
        self.len = n;
        Ok(())
    }
}

/// Buffers reused across forward calls; they grow to the largest batch seen.
/// `logits` is where every executor leaves its output.
#[derive(Default)]
pub struct Scratch {
    x: Vec<f32>,
    xn: Vec<f32>,
    qkv: Vec<f32>,
    attn: Vec<f32>,
    tmp: Vec<f32>,
    gu: Vec<f32>,
    h: Vec<f32>,
    act: QActs,
    pub logits: Vec<f32>,
}

/// New tokens of one sequence for a batched step.
pub struct SeqStep<'a> {
    pub tokens: &'a [u32],
    pub cache: &'a mut KvCache,
}

/// One sequence's rows for a shard step: `rows` new positions after what its
/// cache holds.
pub struct ShardRows<'a> {
    pub rows: usize,
    pub cache: &'a mut KvCache,
}

/// What enters a shard's first block: token ids (first shard) or the
/// previous shard's `[rows, hidden]` activations.
pub enum ShardInput<'a> {
    Tokens(&'a [u32]),
    Activations(&'a [f32]),
}

/// What a single-sequence forward starts from.
pub(crate) enum SeqInput<'a> {
    Tokens(&'a [u32]),
    /// `[n, hidden]` activations entering the first block of the range.
    Activations(&'a [f32]),
}

/// What a single-sequence forward returns: the residual stream after each
/// block listed in `capture` (`(l, [n, hidden])`, l = 0 being the input), and
/// the output (`[n, hidden]`, or `[n, vocab]` logits when asked).
pub(crate) struct SeqOutput {
    pub captured: Vec<(usize, Vec<f32>)>,
    pub out: Vec<f32>,
}

fn metadata<'a>(c: &'a gguf_file::Content, key: &str) -> Result<&'a gguf_file::Value> {
    c.metadata.get(key).with_context(|| format!("GGUF metadata {key} missing"))
}

fn ggml_name(dt: GgmlDType) -> &'static str {
    match dt {
        GgmlDType::Q4_1 => "q4_1",
        GgmlDType::Q5_0 => "q5_0",
        GgmlDType::Q8_0 => "q8_0",
        GgmlDType::Q4K => "q4_k",
        GgmlDType::Q5K => "q5_k",
        GgmlDType::Q6K => "q6_k",
        _ => "other",
    }
}

/// A GGUF matrix as a host `QMatrix`: Q4_1, Q5_0, Q8_0, Q4_K, Q5_K and Q6_K
/// kept as stored, anything else (f32, f16, other quantizations)
/// requantized to Q8_0. SWITCHYARD_REQUANT=q8_0 turns every matrix into
/// Q8_0 (for comparing numerics).
fn load_host_matrix(content: &gguf_file::Content, file: &mut File, name: &str) -> Result<QMatrix> {
    let force_q8 = std::env::var("SWITCHYARD_REQUANT").map(|v| v == "q8_0").unwrap_or(false);
    let qt = content.tensor(file, name, &Device::Cpu).with_context(|| format!("tensor {name}"))?;
    let dims = qt.shape().dims().to_vec();
    if dims.len() != 2 {
        bail!("tensor {name} has shape {dims:?}, expected a matrix");
    }
    let (rows, cols) = (dims[0], dims[1]);
    if !force_q8 {
        if let Some(m) = QMatrix::from_ggml(ggml_name(qt.dtype()), &qt.data()?, rows, cols) {
            return Ok(m);
        }
    }
    if cols % kernels::QK != 0 {
        bail!("tensor {name} width {cols} is not a multiple of {}", kernels::QK);
    }
    let values = qt.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?;
    Ok(QMatrix::quantize_q8_0(&values, rows, cols))
}

/// A GGUF vector (norm weights, biases) as f32, None when the file has none.
fn load_opt_vec(content: &gguf_file::Content, file: &mut File, name: &str) -> Result<Option<Vec<f32>>> {
    if !content.tensor_infos.contains_key(name) {
        return Ok(None);
    }
    load_vec(content, file, name).map(Some)
}

/// A GGUF vector (norm weights) as f32.
fn load_vec(content: &gguf_file::Content, file: &mut File, name: &str) -> Result<Vec<f32>> {
    let qt = content.tensor(file, name, &Device::Cpu).with_context(|| format!("tensor {name}"))?;
    Ok(qt.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?)
}

/// Rows of one sequence for a step: positions `start..start + n` of `seq`.
fn step_rows(seqs: &[SeqStep], rope_len: usize) -> Result<(Vec<(usize, usize)>, Vec<u32>, Vec<usize>)> {
    let mut rows = Vec::new();
    let mut all_tokens = Vec::new();
    let mut last_rows = Vec::with_capacity(seqs.len());
    for (i, sq) in seqs.iter().enumerate() {
        if sq.tokens.is_empty() {
            bail!("a sequence in the batch has no new tokens");
        }
        let start = sq.cache.len;
        if start + sq.tokens.len() > sq.cache.capacity {
            bail!("KV cache overflow: {} + {} > {}", start, sq.tokens.len(), sq.cache.capacity);
        }
        if start + sq.tokens.len() > rope_len {
            bail!("position {} beyond the model's {} positions", start + sq.tokens.len(), rope_len);
        }
        for (j, &t) in sq.tokens.iter().enumerate() {
            rows.push((i, start + j));
            all_tokens.push(t);
        }
        last_rows.push(rows.len() - 1);
    }
    Ok((rows, all_tokens, last_rows))
}

impl LlamaModel {
    /// Loads onto the engine's CPU kernels.
    pub fn load(path: &Path) -> Result<Self> {
        Self::load_on(path, Backend::Kernels)
    }

    pub fn load_on(path: &Path, backend: Backend) -> Result<Self> {
        Self::load_layers(path, backend, None)
    }

    /// Loads blocks `layers` only (None: the whole model) — one shard of a
    /// split model. A range outside `[0, n_layers)`, or empty, is refused.
    /// Shards run on the CPU kernels.
    pub fn load_layers(path: &Path, backend: Backend, layers: Option<Range<usize>>) -> Result<Self> {
        let mut file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let content = gguf_file::Content::read(&mut file).with_context(|| format!("reading GGUF {}", path.display()))?;
        let arch = Arch::from_name(metadata(&content, "general.architecture")?.to_string()?)?;
        let tokenizer = GgufTokenizer::from_gguf(&content.metadata)?;
        let cfg = LlamaConfig::from_gguf(&content, arch, tokenizer.vocab_size())?;
        if cfg.n_heads % cfg.n_kv_heads != 0 || cfg.rope_dims > cfg.head_dim || cfg.rope_dims % 2 != 0 {
            bail!("unsupported head layout: {cfg:?}");
        }
        let nl = cfg.n_layers;
        let range = layers.unwrap_or(0..nl);
        if range.start >= range.end || range.end > nl {
            bail!("layer range {}-{} is not within the model's {nl} blocks (start < end <= {nl})", range.start, range.end);
        }
        let whole = range == (0..nl);
        let (exec, weight_bytes) = match backend.clone() {
            Backend::Candle(_) if !whole => bail!("a layer range (shard) runs on the CPU kernels only for now (--llama-backend kernels)"),
            Backend::Kernels => {
                let m = host::HostModel::load(&content, &mut file, &cfg, range.clone())?;
                let bytes = m.weight_bytes();
                (Exec::Host(m), bytes)
            }
            Backend::Candle(dev) => {
                let m = device::DeviceModel::load(&content, &mut file, &cfg, dev)?;
                let bytes = m.weight_bytes();
                (Exec::Device(m), bytes)
            }
        };
        let mut model = LlamaModel { cfg, layers: range, tokenizer, backend, exec, rope_len: 0, weight_bytes };
        model.ensure_rope(model.cfg.train_ctx)?;
        Ok(model)
    }

    pub fn backend_name(&self) -> String {
        self.backend.name()
    }

    pub fn matrix_types(&self) -> String {
        match &self.exec {
            Exec::Host(h) => h.matrix_types(),
            Exec::Device(d) => d.matrix_types(),
        }
    }

    /// Makes positions < `len` usable (RoPE tables).
    pub fn ensure_rope(&mut self, len: usize) -> Result<()> {
        if len <= self.rope_len {
            return Ok(());
        }
        let global = self.cfg.rope_tables(len, false);
        let local = self.cfg.window.map(|_| self.cfg.rope_tables(len, true));
        match &mut self.exec {
            Exec::Host(h) => h.set_rope(global, local),
            Exec::Device(d) => d.set_rope(global, local, len)?,
        }
        self.rope_len = len;
        Ok(())
    }

    pub fn max_positions(&self) -> usize {
        self.rope_len
    }

    /// KV cache bytes one token occupies, keys and values of every layer:
    /// f16 on the host (as llama.cpp), f32 on a candle device.
    pub fn kv_bytes_per_token(&self) -> usize {
        let elem = match &self.exec {
            Exec::Host(_) => std::mem::size_of::<half::f16>(),
            Exec::Device(_) => std::mem::size_of::<f32>(),
        };
        2 * self.layers.len() * self.cfg.kv_dim() * elem
    }

    /// Whether this process holds every block (not a shard).
    pub fn is_whole(&self) -> bool {
        self.layers == (0..self.cfg.n_layers)
    }

    /// Whether this shard ends the model (its output is logits).
    pub fn is_last_shard(&self) -> bool {
        self.layers.end == self.cfg.n_layers
    }

    /// A KV cache for up to `capacity` positions, where this model computes.
    pub fn new_cache(&self, capacity: usize) -> Result<KvCache> {
        let store = match &self.exec {
            Exec::Host(_) => KvStore::Host(host::HostKv::new(&self.cfg, capacity, self.layers.len())),
            Exec::Device(d) => KvStore::Device(d.new_kv(capacity)?),
        };
        Ok(KvCache { len: 0, capacity, bytes: capacity * self.kv_bytes_per_token(), store })
    }

    /// One batched step: each sequence's new tokens go through the model and
    /// into its cache; `s.logits` gets `[seqs.len(), vocab]`, the logits after
    /// each sequence's last new token.
    pub fn step(&self, seqs: &mut [SeqStep], s: &mut Scratch) -> Result<()> {
        if !self.is_whole() {
            bail!("this shard holds blocks [{}, {}) of {}: it runs shard steps, not whole-model steps", self.layers.start, self.layers.end, self.cfg.n_layers);
        }
        let (rows, tokens, last_rows) = step_rows(seqs, self.rope_len)?;
        for &t in &tokens {
            if t as usize >= self.cfg.vocab {
                bail!("token id {t} is outside the vocabulary ({})", self.cfg.vocab);
            }
        }
        match &self.exec {
            Exec::Host(h) => {
                let mut caches: Vec<&mut host::HostKv> = seqs.iter_mut().map(|sq| sq.cache.store.host()).collect();
                h.step(&rows, &tokens, &last_rows, &mut caches, s)?;
            }
            Exec::Device(d) => {
                let caches: Vec<&device::DeviceKv> = seqs.iter().map(|sq| sq.cache.store.device()).collect();
                d.step(&rows, &tokens, &last_rows, &caches, s)?;
            }
        }
        for sq in seqs.iter_mut() {
            sq.cache.len += sq.tokens.len();
        }
        Ok(())
    }

    /// One batched step of a shard over its blocks: each sequence's `rows`
    /// new positions enter (token ids on the first shard, else the previous
    /// shard's activations, `[Σ rows, hidden]` in sequence order) and their
    /// keys and values go into each sequence's cache. On the last shard
    /// `s.logits` gets `[seqs.len(), vocab]` (after each sequence's last
    /// row); on the others the output activations are returned,
    /// `[Σ rows, hidden]`, for the next shard.
    pub fn shard_step(&self, seqs: &mut [ShardRows], input: ShardInput, s: &mut Scratch) -> Result<Option<Vec<f32>>> {
        let Exec::Host(h) = &self.exec else { bail!("shard steps run on the CPU kernels only") };
        let total: usize = seqs.iter().map(|q| q.rows).sum();
        let hidden = self.cfg.hidden;
        let input = match input {
            ShardInput::Tokens(t) => {
                if self.layers.start != 0 {
                    bail!("token ids enter only the first shard; this one holds blocks [{}, {})", self.layers.start, self.layers.end);
                }
                if t.len() != total {
                    bail!("{} token ids for {total} rows", t.len());
                }
                if let Some(&bad) = t.iter().find(|&&t| t as usize >= self.cfg.vocab) {
                    bail!("token id {bad} is outside the vocabulary ({})", self.cfg.vocab);
                }
                SeqInput::Tokens(t)
            }
            ShardInput::Activations(a) => {
                if self.layers.start == 0 {
                    bail!("the first shard takes token ids, not activations");
                }
                if a.len() != total * hidden {
                    bail!("activations hold {} floats; {total} rows of hidden size {hidden} need {}", a.len(), total * hidden);
                }
                SeqInput::Activations(a)
            }
        };
        let mut rows = Vec::with_capacity(total);
        let mut last_rows = Vec::with_capacity(seqs.len());
        for (i, q) in seqs.iter().enumerate() {
            if q.rows == 0 {
                bail!("a sequence in the step has no rows");
            }
            let start = q.cache.len;
            if start + q.rows > q.cache.capacity || start + q.rows > self.rope_len {
                bail!("positions {start}..{} exceed the sequence's capacity {}", start + q.rows, q.cache.capacity.min(self.rope_len));
            }
            rows.extend((start..start + q.rows).map(|p| (i, p)));
            last_rows.push(rows.len() - 1);
        }
        let mut caches: Vec<&mut host::HostKv> = seqs.iter_mut().map(|q| q.cache.store.host()).collect();
        h.shard_step(&rows, input, &last_rows, &mut caches, s)?;
        for q in seqs.iter_mut() {
            q.cache.len += q.rows;
        }
        Ok(if self.is_last_shard() { None } else { Some(s.x[..total * hidden].to_vec()) })
    }

    fn forward_seq(&self, input: SeqInput, layers: Range<usize>, capture: &[usize], logits: bool, s: &mut Scratch) -> Result<SeqOutput> {
        let n = match &input {
            SeqInput::Tokens(t) => {
                if let Some(&bad) = t.iter().find(|&&t| t as usize >= self.cfg.vocab) {
                    bail!("token id {bad} is outside the vocabulary ({})", self.cfg.vocab);
                }
                t.len()
            }
            SeqInput::Activations(a) => a.len() / self.cfg.hidden,
        };
        if n == 0 {
            bail!("no tokens");
        }
        if n > self.rope_len {
            bail!("{n} positions exceed the model's {}", self.rope_len);
        }
        match &self.exec {
            Exec::Host(h) => h.forward_seq(input, layers, capture, logits, s),
            Exec::Device(d) => d.forward_seq(input, layers, capture, logits),
        }
    }

    /// Residual stream after the requested layers for one prompt (0 is the
    /// embedding output, i the output of block i). Returns (layer, [n, hidden]).
    pub fn hidden_states(&self, tokens: &[u32], layers: &[usize], s: &mut Scratch) -> Result<Vec<(usize, Vec<f32>)>> {
        let last = layers.iter().copied().max().unwrap_or(0);
        if last > self.cfg.n_layers {
            bail!("layer {last} out of range 0..={}", self.cfg.n_layers);
        }
        if self.layers.start != 0 || last > self.layers.end {
            bail!("hidden states up to layer {last} need blocks [0, {last}); this shard holds [{}, {})", self.layers.start, self.layers.end);
        }
        let out = self.forward_seq(SeqInput::Tokens(tokens), 0..last, layers, false, s)?;
        // Return in the order asked for.
        let mut ordered = Vec::with_capacity(layers.len());
        for &l in layers {
            let v = out.captured.iter().find(|(ol, _)| *ol == l).map(|(_, v)| v.clone()).context("layer not captured")?;
            ordered.push((l, v));
        }
        Ok(ordered)
    }

    /// One shard's part of hidden states across a split model: `input` enters
    /// its first block (token ids on the first shard, else the previous
    /// shard's `[n, hidden]` output rows); the layers it holds among `layers`
    /// (l with start < l <= end, and 0 on the first shard) are captured, in
    /// the order asked; with `pass_on` its output rows (layer `end`) come
    /// back too, for the next shard. Layers this shard does not hold are
    /// refused: the caller splits the request.
    pub fn shard_hidden_states(
        &self,
        input: ShardInput,
        layers: &[usize],
        pass_on: bool,
        s: &mut Scratch,
    ) -> Result<(Vec<(usize, Vec<f32>)>, Option<Vec<f32>>)> {
        let (a, b) = (self.layers.start, self.layers.end);
        let holds = |l: usize| (a < l && l <= b) || (l == 0 && a == 0);
        if let Some(&bad) = layers.iter().find(|&&l| !holds(l)) {
            bail!("layer {bad} is not held by this shard (blocks [{a}, {b}) hold layers {}..={b})", if a == 0 { 0 } else { a + 1 });
        }
        let input = match input {
            ShardInput::Tokens(t) => {
                if a != 0 {
                    bail!("this shard starts at block {a}: it takes the previous shard's rows, not token ids");
                }
                SeqInput::Tokens(t)
            }
            ShardInput::Activations(x) => {
                if a == 0 {
                    bail!("the first shard takes token ids, not activations");
                }
                if x.is_empty() || x.len() % self.cfg.hidden != 0 {
                    bail!("activations of {} values are not [n, {}]", x.len(), self.cfg.hidden);
                }
                SeqInput::Activations(x)
            }
        };
        let end = if pass_on { b } else { layers.iter().copied().max().unwrap_or(a).max(a) };
        let out = self.forward_seq(input, a..end, layers, false, s)?;
        let mut ordered = Vec::with_capacity(layers.len());
        for &l in layers {
            let v = out.captured.iter().find(|(ol, _)| *ol == l).map(|(_, v)| v.clone()).context("layer not captured")?;
            ordered.push((l, v));
        }
        Ok((ordered, pass_on.then_some(out.out)))
    }

    /// Blocks [start, end) over `input` (`[n, hidden]` activations, or token
    /// ids when start == 0), positions 0..n; with `logits` the final norm and
    /// head follow and the result is `[n, vocab]`, else `[n, hidden]`.
    pub fn forward_range(
        &self,
        start: usize,
        end: usize,
        tokens: &[u32],
        activations: Option<&[f32]>,
        logits: bool,
        s: &mut Scratch,
    ) -> Result<Vec<f32>> {
        let nl = self.cfg.n_layers;
        if start > end || end > nl {
            bail!("layer range [{start}, {end}) is not within [0, {nl}]");
        }
        if start < self.layers.start || end > self.layers.end {
            bail!("layer range [{start}, {end}) is not within this shard's [{}, {})", self.layers.start, self.layers.end);
        }
        if logits && end != nl {
            bail!("logits=true needs layer_end == n_layers ({nl})");
        }
        let h = self.cfg.hidden;
        let input = match activations {
            Some(a) => {
                if a.is_empty() || a.len() % h != 0 {
                    bail!("activations hold {} floats, not a positive multiple of hidden size {h}", a.len());
                }
                SeqInput::Activations(a)
            }
            None => {
                if start != 0 {
                    bail!("token ids are only accepted when layer_start == 0");
                }
                if tokens.is_empty() {
                    bail!("neither activations nor token ids given");
                }
                SeqInput::Tokens(tokens)
            }
        };
        Ok(self.forward_seq(input, start..end, &[], logits, s)?.out)
    }
}

impl KvStore {
    fn host(&mut self) -> &mut host::HostKv {
        match self {
            KvStore::Host(k) => k,
            // Caches come from `LlamaModel::new_cache` of the same model.
            KvStore::Device(_) => panic!("a device KV cache was handed to the host executor"),
        }
    }
    fn device(&self) -> &device::DeviceKv {
        match self {
            KvStore::Device(k) => k,
            KvStore::Host(_) => panic!("a host KV cache was handed to the device executor"),
        }
    }
}
