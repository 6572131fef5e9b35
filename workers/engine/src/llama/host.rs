//! The llama forward on the engine's own quantized CPU kernels (`kernels/`):
//! a batched forward where every sequence owns its KV cache. One call runs any
//! mix of rows: a decode token for each of B sequences, a prompt chunk being
//! prefilled, or a plain layer range over activations (hidden states,
//! split-model forwarding). Buffers live in `Scratch` and are reused between
//! steps.

use std::fs::File;
use std::ops::Range;

use anyhow::{bail, Result};
use candle_core::quantized::gguf_file;

use super::{load_host_matrix, load_opt_vec, load_vec, Act, LlamaConfig, Scratch, SeqInput, SeqOutput};
use crate::kernels::{self, quantize_activations, QMatrix, Stacked};
use half::f16;

struct Layer {
    attn_norm: Vec<f32>,
    /// q, k and v stacked: one matmul per layer instead of three.
    wqkv: Stacked,
    /// Their biases, stacked the same way (qwen2).
    bqkv: Option<Vec<f32>>,
    /// Per-head RMS norms of q and k, before rope (gemma3).
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    wo: QMatrix,
    /// Norms of the attention and FFN outputs before their residual adds
    /// (gemma3).
    post_attn_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    /// gate and up stacked.
    w_gate_up: Stacked,
    w_down: QMatrix,
    post_ffn_norm: Option<Vec<f32>>,
}

/// RoPE cos/sin, `[positions][rope_dims / 2]`.
#[derive(Default)]
struct Rope {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

pub(super) struct HostModel {
    cfg: LlamaConfig,
    /// Blocks `range` only (a shard of a split model, or all of them);
    /// `layers[i]` is block `range.start + i`.
    layers: Vec<Layer>,
    range: Range<usize>,
    /// None on a shard that neither embeds (not the first) nor needs it as
    /// the tied output head (not the last).
    tok_embd: Option<QMatrix>,
    /// None except on the last shard.
    out_norm: Option<Vec<f32>>,
    /// None when the output head is tied to the token embedding.
    lm_head: Option<QMatrix>,
    rope: Rope,
    /// The sliding-window layers' table, where the model has them.
    rope_swa: Option<Rope>,
}

/// One sequence's keys and values on the host, stored as f16 like
/// llama.cpp's default cache: half the memory per sequence of f32, and half
/// the bytes attention streams through per step; the kernels widen them to
/// f32 as they load.
pub(super) struct HostKv {
    /// Keys per layer, transposed: `[kv_dim][stride]` (element c of the key
    /// at position p is at `c * stride + p`). Attention then scores 16
    /// positions at a time with plain 16-wide FMAs down the head dimension
    /// instead of one horizontal dot product per position.
    k: Vec<Vec<f16>>,
    /// Values per layer, `[position][kv_dim]` (read a whole row at a time).
    v: Vec<Vec<f16>>,
    /// Capacity rounded up to 16, so a 16-position score block never runs
    /// past a key row.
    stride: usize,
}

impl HostKv {
    pub(super) fn copy_prefix_from(&mut self, src: &HostKv, n: usize) {
        let kv_dim = src.k.first().map_or(0, |k| k.len() / src.stride);
        for (dk, sk) in self.k.iter_mut().zip(&src.k) {
            // Transposed keys: one run of n positions per key dimension.
            for c in 0..kv_dim {
                dk[c * self.stride..][..n].copy_from_slice(&sk[c * src.stride..][..n]);
            }
        }
        for (dv, sv) in self.v.iter_mut().zip(&src.v) {
            dv[..n * kv_dim].copy_from_slice(&sv[..n * kv_dim]);
        }
    }

    /// Keys and values of `layers` blocks (a shard keeps only its own).
    pub(super) fn new(cfg: &LlamaConfig, capacity: usize, layers: usize) -> Self {
        let stride = capacity.next_multiple_of(16);
        HostKv {
            k: (0..layers).map(|_| vec![f16::ZERO; stride * cfg.kv_dim()]).collect(),
            v: (0..layers).map(|_| vec![f16::ZERO; capacity * cfg.kv_dim()]).collect(),
            stride,
        }
    }
}

impl HostModel {
    /// Loads blocks `range` (all of `0..n_layers` for a whole model), the
    /// token embedding when the range starts at 0, and the final norm and
    /// output head when it ends at `n_layers` (the embedding too when the head
    /// is tied to it); nothing else is read from the file.
    pub(super) fn load(content: &gguf_file::Content, file: &mut File, cfg: &LlamaConfig, range: Range<usize>) -> Result<Self> {
        let (first, last) = (range.start == 0, range.end == cfg.n_layers);
        let tied = !content.tensor_infos.contains_key("output.weight");
        // `packed()` moves each matrix into the layout of the fastest kernel
        // this CPU has (a no-op where that is the plain one).
        let tok_embd = if first || (last && tied) { Some(load_host_matrix(content, file, "token_embd.weight")?.packed()) } else { None };
        let lm_head = if last && !tied { Some(load_host_matrix(content, file, "output.weight")?.packed()) } else { None };
        let mut layers = Vec::with_capacity(range.len());
        for i in range.clone() {
            let mut m = |what: &str| load_host_matrix(content, file, &format!("blk.{i}.{what}.weight"));
            let (wq, wk, wv, wo) = (m("attn_q")?, m("attn_k")?, m("attn_v")?, m("attn_output")?);
            let (gate, up, w_down) = (m("ffn_gate")?, m("ffn_up")?, m("ffn_down")?);
            let attn_norm = load_vec(content, file, &format!("blk.{i}.attn_norm.weight"))?;
            let ffn_norm = load_vec(content, file, &format!("blk.{i}.ffn_norm.weight"))?;
            let mut v = |what: &str| load_opt_vec(content, file, &format!("blk.{i}.{what}"));
            let bqkv = match (v("attn_q.bias")?, v("attn_k.bias")?, v("attn_v.bias")?) {
                (Some(q), Some(k), Some(vb)) => Some([q, k, vb].concat()),
                (None, None, None) => None,
                _ => bail!("block {i} has biases on some of q, k and v only"),
            };
            layers.push(Layer {
                attn_norm,
                wqkv: Stacked::new(vec![wq, wk, wv]),
                bqkv,
                q_norm: v("attn_q_norm.weight")?,
                k_norm: v("attn_k_norm.weight")?,
                wo: wo.packed(),
                post_attn_norm: v("post_attention_norm.weight")?,
                ffn_norm,
                w_gate_up: Stacked::new(vec![gate, up]),
                w_down: w_down.packed(),
                post_ffn_norm: v("post_ffw_norm.weight")?,
            });
        }
        let out_norm = if last { Some(load_vec(content, file, "output_norm.weight")?) } else { None };
        let l0 = &layers[0];
        if l0.wqkv.rows != cfg.q_dim() + 2 * cfg.kv_dim()
            || l0.wqkv.cols != cfg.hidden
            || l0.w_gate_up.rows != 2 * cfg.ffn
            || tok_embd.as_ref().is_some_and(|e| e.cols != cfg.hidden || e.rows < cfg.vocab)
        {
            bail!("tensor shapes do not match the GGUF hyperparameters {cfg:?}");
        }
        Ok(HostModel {
            cfg: cfg.clone(),
            layers,
            range,
            tok_embd,
            out_norm,
            lm_head,
            rope: Rope::default(),
            rope_swa: None,
        })
    }

    pub(super) fn weight_bytes(&self) -> u64 {
        let mut bytes = self.tok_embd.as_ref().map_or(0, |m| m.bytes())
            + self.lm_head.as_ref().map_or(0, |m| m.bytes())
            + self.out_norm.as_ref().map_or(0, |v| v.len() * 4);
        for l in &self.layers {
            bytes += l.wqkv.bytes() + l.wo.bytes() + l.w_gate_up.bytes() + l.w_down.bytes();
            let vecs = [&l.bqkv, &l.q_norm, &l.k_norm, &l.post_attn_norm, &l.post_ffn_norm];
            bytes += (l.attn_norm.len() + l.ffn_norm.len() + vecs.iter().map(|v| v.as_ref().map_or(0, |v| v.len())).sum::<usize>()) * 4;
        }
        bytes as u64
    }

    pub fn matrix_types(&self) -> String {
        let l = &self.layers[0];
        format!(
            "embd={} qkv={} o={} gate_up={} down={} head={}",
            self.tok_embd.as_ref().map_or("-", |m| m.dtype_name()),
            l.wqkv.dtype_name(),
            l.wo.dtype_name(),
            l.w_gate_up.dtype_name(),
            l.w_down.dtype_name(),
            self.lm_head.as_ref().or(self.tok_embd.as_ref()).filter(|_| self.out_norm.is_some()).map_or("-", |m| m.dtype_name())
        )
    }

    pub(super) fn set_rope(&mut self, global: (Vec<f32>, Vec<f32>), local: Option<(Vec<f32>, Vec<f32>)>) {
        self.rope = Rope { cos: global.0, sin: global.1 };
        self.rope_swa = local.map(|(cos, sin)| Rope { cos, sin });
    }

    /// Rotates every head of `x` for position `pos` in layer `layer`:
    /// adjacent pairs (ggml's "normal" rope, which llama GGUFs use: the
    /// converter permutes q/k weights for it) or (i, i + dims/2) pairs (NeoX).
    fn rope(&self, x: &mut [f32], pos: usize, layer: usize) {
        let half = self.cfg.rope_dims / 2;
        let table = match &self.rope_swa {
            Some(t) if self.cfg.is_swa(layer) => t,
            _ => &self.rope,
        };
        let cos = &table.cos[pos * half..(pos + 1) * half];
        let sin = &table.sin[pos * half..(pos + 1) * half];
        for head in x.chunks_exact_mut(self.cfg.head_dim) {
            for i in 0..half {
                let (a, b) = if self.cfg.rope_neox { (i, i + half) } else { (2 * i, 2 * i + 1) };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * cos[i] - x1 * sin[i];
                head[b] = x0 * sin[i] + x1 * cos[i];
            }
        }
    }

    fn embed(&self, tokens: &[u32], x: &mut Vec<f32>) -> Result<()> {
        let Some(tok_embd) = self.tok_embd.as_ref().filter(|_| self.range.start == 0) else {
            bail!("this shard serves blocks [{}, {}): token ids enter only the first shard", self.range.start, self.range.end);
        };
        let h = self.cfg.hidden;
        x.resize(tokens.len() * h, 0.0);
        // Token ids were checked against the vocabulary by LlamaModel.
        for (i, &t) in tokens.iter().enumerate() {
            tok_embd.dequantize_row(t as usize, &mut x[i * h..(i + 1) * h]);
        }
        if self.cfg.embed_scale != 1.0 {
            for v in x.iter_mut() {
                *v *= self.cfg.embed_scale;
            }
        }
        Ok(())
    }

    /// Runs blocks `layers` over the rows in `s.x`. `rows[r] = (seq, pos)`;
    /// rows of one sequence are contiguous with increasing positions, and each
    /// row's keys/values land in `caches[seq]` at `pos`. `capture(l, x)` sees
    /// the residual stream after block l (1-based).
    fn run_blocks(
        &self,
        s: &mut Scratch,
        rows: &[(usize, usize)],
        caches: &mut [&mut HostKv],
        layers: Range<usize>,
        capture: &mut dyn FnMut(usize, &[f32]),
    ) {
        let cfg = &self.cfg;
        let (h, qd, kvd, f) = (cfg.hidden, cfg.q_dim(), cfg.kv_dim(), cfg.ffn);
        let m = rows.len();
        let qkv_w = qd + 2 * kvd;
        let Scratch { x, xn, qkv, attn, tmp, gu, h: hbuf, act, .. } = s;
        xn.resize(m * h, 0.0);
        qkv.resize(m * qkv_w, 0.0);
        attn.resize(m * qd, 0.0);
        tmp.resize(m * h, 0.0);
        gu.resize(m * 2 * f, 0.0);
        hbuf.resize(m * f, 0.0);
        let group = cfg.n_heads / cfg.n_kv_heads;
        let scale = cfg.attn_scale;
        let hd = cfg.head_dim;

        let first = self.range.start;
        for li in layers {
            let (layer, ci) = (&self.layers[li - first], li - first);
            for r in 0..m {
                kernels::rms_norm(&x[r * h..(r + 1) * h], &layer.attn_norm, cfg.eps, &mut xn[r * h..(r + 1) * h]);
            }
            quantize_activations(xn, h, act);
            kernels::matmul_stacked(&layer.wqkv, act, qkv);
            // Rope and cache writes for every row first: a prompt chunk's
            // rows attend to the keys of the rows before them.
            for (r, &(seq, pos)) in rows.iter().enumerate() {
                let row = &mut qkv[r * qkv_w..(r + 1) * qkv_w];
                if let Some(b) = &layer.bqkv {
                    for (x, b) in row.iter_mut().zip(b) {
                        *x += b;
                    }
                }
                let (q, kv) = row.split_at_mut(qd);
                let (k, v) = kv.split_at_mut(kvd);
                if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                    head_norms(q, qn, cfg.eps);
                    head_norms(k, kn, cfg.eps);
                }
                self.rope(q, pos, li);
                self.rope(k, pos, li);
                let cache = &mut caches[seq];
                let stride = cache.stride;
                for (c, &kc) in k.iter().enumerate() {
                    cache.k[ci][c * stride + pos] = f16::from_f32(kc);
                }
                for (dst, &vc) in cache.v[ci][pos * kvd..(pos + 1) * kvd].iter_mut().zip(v.iter()) {
                    *dst = f16::from_f32(vc);
                }
            }
            {
                let caches_ro: &[&mut HostKv] = caches;
                let qkv_ro: &[f32] = qkv;
                let nkv = cfg.n_kv_heads;
                let out = kernels::SendPtr(attn.as_mut_ptr());
                // One task per (row, KV head), covering the query heads that
                // share it, so its keys and values are read once for all of
                // them (at batch 8 re-reading them per query head made
                // attention a quarter of the step).
                let task = |t: usize| {
                    let (r, kvh) = (t / nkv, t % nkv);
                    let (seq, pos) = rows[r];
                    let c = &caches_ro[seq];
                    let heads = kvh * group * hd..(kvh + 1) * group * hd;
                    let q = &qkv_ro[r * qkv_w + heads.start..r * qkv_w + heads.end];
                    let o = out;
                    // SAFETY: each task writes only its own heads of row r.
                    let oh = unsafe { std::slice::from_raw_parts_mut(o.0.add(r * qd + heads.start), heads.len()) };
                    let kt = &c.k[ci][kvh * hd * c.stride..(kvh + 1) * hd * c.stride];
                    let span = cfg.first_visible(li, pos)..pos + 1;
                    attend_group(q, hd, kt, c.stride, &c.v[ci], kvd, kvh * hd, span, scale, cfg.attn_softcap, oh);
                };
                // Attention is cheap next to the matmuls at short contexts;
                // fork only when there is enough of it to pay for the threads.
                let work: usize = rows.iter().map(|&(_, p)| p + 1).sum::<usize>() * cfg.n_heads * hd;
                if work > 16_384 {
                    crate::par::pool().run(m * nkv, &task);
                } else {
                    (0..m * nkv).for_each(task);
                }
            }
            quantize_activations(attn, qd, act);
            kernels::matmul(&layer.wo, act, tmp);
            add_residual(x, tmp, layer.post_attn_norm.as_deref(), h, cfg.eps);
            for r in 0..m {
                kernels::rms_norm(&x[r * h..(r + 1) * h], &layer.ffn_norm, cfg.eps, &mut xn[r * h..(r + 1) * h]);
            }
            quantize_activations(xn, h, act);
            kernels::matmul_stacked(&layer.w_gate_up, act, gu);
            let act_fn = cfg.act;
            {
                // SiLU(gate) * up: m * ffn exps, the largest elementwise
                // job of the layer, so it is split across the pool in
                // chunks of SILU_CHUNK values (whole rows stay apart).
                let per_row = f.div_ceil(SILU_CHUNK);
                let gu_ro: &[f32] = gu;
                let hp = kernels::SendPtr(hbuf.as_mut_ptr());
                let task = |t: usize| {
                    let (r, c) = (t / per_row, t % per_row);
                    let (c0, c1) = (c * SILU_CHUNK, ((c + 1) * SILU_CHUNK).min(f));
                    let g = &gu_ro[r * 2 * f + c0..r * 2 * f + c1];
                    let u = &gu_ro[r * 2 * f + f + c0..r * 2 * f + f + c1];
                    let p = hp;
                    // SAFETY: tasks write disjoint ranges of hbuf.
                    let o = unsafe { std::slice::from_raw_parts_mut(p.0.add(r * f + c0), c1 - c0) };
                    match act_fn {
                        Act::Silu => {
                            for ((o, &gv), &uv) in o.iter_mut().zip(g).zip(u) {
                                *o = gv / (1.0 + (-gv).exp()) * uv;
                            }
                        }
                        Act::GeluTanh => kernels::gelu_tanh_mul(g, u, o),
                    }
                };
                crate::par::pool().run(m * per_row, &task);
            }
            quantize_activations(hbuf, f, act);
            kernels::matmul(&layer.w_down, act, tmp);
            add_residual(x, tmp, layer.post_ffn_norm.as_deref(), h, cfg.eps);
            capture(li + 1, x);
        }
    }

    /// Final norm and output head over `x` rows `select` -> `s.logits`.
    fn head(&self, s: &mut Scratch, select: &[usize]) -> Result<()> {
        let (Some(out_norm), Some(w)) = (self.out_norm.as_ref(), self.lm_head.as_ref().or(self.tok_embd.as_ref())) else {
            bail!("this shard serves blocks [{}, {}): logits come only from the last shard", self.range.start, self.range.end);
        };
        let h = self.cfg.hidden;
        let Scratch { x, xn, act, logits, .. } = s;
        xn.resize(select.len() * h, 0.0);
        for (i, &r) in select.iter().enumerate() {
            kernels::rms_norm(&x[r * h..(r + 1) * h], out_norm, self.cfg.eps, &mut xn[i * h..(i + 1) * h]);
        }
        quantize_activations(xn, h, act);
        logits.resize(select.len() * w.rows, 0.0);
        kernels::matmul(w, act, logits);
        if let Some(cap) = self.cfg.final_softcap {
            for l in logits.iter_mut() {
                *l = cap * (*l / cap).tanh();
            }
        }
        if w.rows != self.cfg.vocab {
            // Some files pad the embedding; keep exactly `vocab` logits per row.
            let v = self.cfg.vocab;
            for i in 0..select.len() {
                logits.copy_within(i * w.rows..i * w.rows + v, i * v);
            }
            logits.truncate(select.len() * v);
        }
        Ok(())
    }

    /// One batched step over `rows` (see `run_blocks`), logits after each
    /// row in `last_rows` into `s.logits`.
    pub(super) fn step(
        &self,
        rows: &[(usize, usize)],
        tokens: &[u32],
        last_rows: &[usize],
        caches: &mut [&mut HostKv],
        s: &mut Scratch,
    ) -> Result<()> {
        self.embed(tokens, &mut s.x)?;
        self.run_blocks(s, rows, caches, 0..self.cfg.n_layers, &mut |_, _| {});
        self.head(s, last_rows)
    }

    /// One batched step of a shard over its own blocks: `input` enters the
    /// first of them (token ids on the first shard, else `[rows, hidden]`
    /// activations, the previous shard's output); on the last shard the
    /// logits after each row in `last_rows` land in `s.logits`, on the
    /// others the rows' activations after the shard's last block stay in
    /// `s.x`, for the next shard.
    pub(super) fn shard_step(
        &self,
        rows: &[(usize, usize)],
        input: SeqInput,
        last_rows: &[usize],
        caches: &mut [&mut HostKv],
        s: &mut Scratch,
    ) -> Result<()> {
        match input {
            SeqInput::Tokens(t) => self.embed(t, &mut s.x)?,
            SeqInput::Activations(a) => {
                s.x.clear();
                s.x.extend_from_slice(a);
            }
        }
        self.run_blocks(s, rows, caches, self.range.clone(), &mut |_, _| {});
        if self.range.end == self.cfg.n_layers {
            self.head(s, last_rows)?;
        }
        Ok(())
    }

    /// One sequence at positions 0..n through blocks `layers`.
    pub(super) fn forward_seq(
        &self,
        input: SeqInput,
        layers: Range<usize>,
        capture: &[usize],
        logits: bool,
        s: &mut Scratch,
    ) -> Result<SeqOutput> {
        let n = match input {
            SeqInput::Tokens(t) => {
                self.embed(t, &mut s.x)?;
                t.len()
            }
            SeqInput::Activations(a) => {
                s.x.clear();
                s.x.extend_from_slice(a);
                a.len() / self.cfg.hidden
            }
        };
        let mut captured = Vec::new();
        if capture.contains(&layers.start) {
            captured.push((layers.start, s.x.clone()));
        }
        let rows: Vec<(usize, usize)> = (0..n).map(|p| (0, p)).collect();
        if layers.start < self.range.start || layers.end > self.range.end {
            bail!("blocks [{}, {}) asked of a shard that holds [{}, {})", layers.start, layers.end, self.range.start, self.range.end);
        }
        let mut cache = HostKv::new(&self.cfg, n, self.range.len());
        self.run_blocks(s, &rows, &mut [&mut cache], layers, &mut |l, x| {
            if capture.contains(&l) {
                captured.push((l, x.to_vec()));
            }
        });
        let out = if logits {
            let all: Vec<usize> = (0..n).collect();
            self.head(s, &all)?;
            s.logits.clone()
        } else {
            s.x.clone()
        };
        Ok(SeqOutput { captured, out })
    }
}

/// Values per SiLU task (see `run_blocks`).
const SILU_CHUNK: usize = 256;


/// RMS norm of each head of `x` (heads of `w.len()` values) in place.
fn head_norms(x: &mut [f32], w: &[f32], eps: f32) {
    let mut tmp = vec![0f32; w.len()];
    for head in x.chunks_exact_mut(w.len()) {
        kernels::rms_norm(head, w, eps, &mut tmp);
        head.copy_from_slice(&tmp);
    }
}

/// x += out, with `out` RMS-normed per row first where the block has a
/// post-norm.
fn add_residual(x: &mut [f32], out: &mut [f32], post_norm: Option<&[f32]>, h: usize, eps: f32) {
    if let Some(w) = post_norm {
        let mut tmp = vec![0f32; h];
        for row in out.chunks_exact_mut(h) {
            kernels::rms_norm(row, w, eps, &mut tmp);
            row.copy_from_slice(&tmp);
        }
    }
    for (xv, t) in x.iter_mut().zip(out.iter()) {
        *xv += t;
    }
}

/// The query heads in `q` (`[heads][hd]`, all sharing one KV head) over
/// positions `span` (0..n, or a sliding window's lo..n): scores against the transposed keys `kt`
/// (`[hd][stride]`), softmax, then the weighted sum of the value rows
/// (`vc[p * kvd + voff ..][..hd]`) into `out` (`[heads][hd]`). Heads go
/// through the kernels three at a time, each key and value row loaded once
/// for the three.
#[allow(clippy::too_many_arguments)]
fn attend_group(
    q: &[f32],
    hd: usize,
    kt: &[f16],
    stride: usize,
    vc: &[f16],
    kvd: usize,
    voff: usize,
    span: Range<usize>,
    scale: f32,
    softcap: Option<f32>,
    out: &mut [f32],
) {
    let (lo, n) = (span.start, span.end);
    // Score blocks start on a multiple of 16; positions lo16..lo are
    // computed and left out.
    let lo16 = lo / 16 * 16;
    let heads = q.len() / hd;
    SCORES.with(|cell| {
        let mut scores = cell.borrow_mut();
        // One row of n16 scores per head. Lanes past n read stale or zero
        // keys and are never used.
        let n16 = n.next_multiple_of(16);
        scores.resize(heads * n16, 0.0);
        // One bounds check for everything the kernels read and write.
        assert!(n16 <= stride && kt.len() >= hd * stride && out.len() == q.len());
        assert!(n == 0 || vc.len() >= (n - 1) * kvd + voff + hd);
        for h0 in (0..heads).step_by(3) {
            let hs = (heads - h0).min(3);
            let qs = &q[h0 * hd..(h0 + hs) * hd];
            for p0 in (lo16..n16).step_by(16) {
                // SAFETY: p0 + 16 <= n16 <= stride, kt holds hd * stride,
                // scores holds heads * n16 (asserted / resized above).
                unsafe { kernels::scores16_heads(qs, hd, kt.as_ptr(), stride, p0, scale, scores.as_mut_ptr().add(h0 * n16 + p0), n16) };
            }
        }
        for h in 0..heads {
            let s = &mut scores[h * n16 + lo..h * n16 + n];
            if let Some(cap) = softcap {
                for v in s.iter_mut() {
                    *v = cap * (*v / cap).tanh();
                }
            }
            let max = s.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            let mut sum = 0f32;
            for sc in s.iter_mut() {
                *sc = (*sc - max).exp();
                sum += *sc;
            }
            let inv = 1.0 / sum;
            for sc in s.iter_mut() {
                *sc *= inv;
            }
        }
        if hd % 64 == 0 {
            // 64 output dims per head held in registers across all
            // positions; per element the same adds in the same order as an
            // axpy per position, without reloading and storing `out`.
            for h0 in (0..heads).step_by(3) {
                let hs = (heads - h0).min(3);
                for dc in 0..hd / 64 {
                    // SAFETY: in bounds by the asserts above.
                    unsafe {
                        kernels::weighted_values64(
                            hs,
                            scores.as_ptr().add(h0 * n16 + lo),
                            n16,
                            n - lo,
                            vc.as_ptr().add(lo * kvd),
                            kvd,
                            voff + dc * 64,
                            out.as_mut_ptr().add(h0 * hd + dc * 64),
                            hd,
                        )
                    };
                }
            }
        } else {
            out.fill(0.0);
            let mut v = vec![0f32; hd];
            for h in 0..heads {
                let o = &mut out[h * hd..(h + 1) * hd];
                for (j, &w) in scores[h * n16 + lo..h * n16 + n].iter().enumerate().map(|(j, w)| (j + lo, w)) {
                    for (x, y) in v.iter_mut().zip(&vc[j * kvd + voff..j * kvd + voff + hd]) {
                        *x = y.to_f32();
                    }
                    kernels::axpy(w, &v, o);
                }
            }
        }
    });
}

thread_local! {
    static SCORES: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}
