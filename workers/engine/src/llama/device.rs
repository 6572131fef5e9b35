//! The llama forward on a candle device: weights stay in their GGUF
//! quantization as candle `QMatMul`s (CUDA and Metal have kernels for Q4_1,
//! Q8_0 and the K-quants), activations are f32 tensors, and every sequence
//! keeps its keys and values in device tensors of its own.
//!
//! It computes what `host.rs` computes, op for op (same RoPE tables, same
//! pair rotation, same norm epsilon, the same optional pieces per
//! architecture: qwen2's biases, gemma3's q/k norms, post-norms, GeGLU,
//! embedding scale and sliding windows), so on the CPU device it serves as the
//! check that the device path is right; on a GPU it is the fast path. The
//! batch is one set of matmuls over all rows; attention is per sequence (each
//! has its own cache length), batched over heads.

use std::fs::File;
use std::ops::Range;

use anyhow::{bail, Context, Result};
use candle_core::quantized::{gguf_file, QMatMul};
use candle_core::{DType, Device, Module, Tensor, D};

use super::{load_host_matrix, Act, LlamaConfig, Scratch, SeqInput, SeqOutput};
use crate::kernels::QMatrix;

/// One block; the optional pieces are those of `host::Layer`, present
/// where the GGUF has them.
struct Layer {
    attn_norm: Tensor,
    /// q, k, v biases (qwen2).
    bqkv: Option<(Tensor, Tensor, Tensor)>,
    /// Per-head RMS norms of q and k, before rope (gemma3).
    qk_norm: Option<(Tensor, Tensor)>,
    wq: QMatMul,
    wk: QMatMul,
    wv: QMatMul,
    wo: QMatMul,
    /// Norms of the attention and FFN outputs before their residual adds
    /// (gemma3).
    post_attn_norm: Option<Tensor>,
    ffn_norm: Tensor,
    w_gate: QMatMul,
    w_up: QMatMul,
    w_down: QMatMul,
    post_ffn_norm: Option<Tensor>,
}

pub(super) struct DeviceModel {
    dev: Device,
    cfg: LlamaConfig,
    /// Token embeddings stay on the host in their quantized form; a step
    /// dequantizes only the rows it needs and uploads `[m, hidden]` floats
    /// (a full f32 copy on the device would cost vocab × hidden × 4 bytes).
    tok_embd: QMatrix,
    layers: Vec<Layer>,
    out_norm: Tensor,
    /// The output head (the token embedding when tied), rows = its vocab.
    head: QMatMul,
    head_rows: usize,
    /// `[positions][head_dim / 2]` RoPE tables on the device.
    cos: Tensor,
    sin: Tensor,
    /// The sliding-window layers' tables, where the model has them.
    swa_rope: Option<(Tensor, Tensor)>,
    matrix_types: String,
    weight_bytes: u64,
    /// Fault injection for the agent's fallback tests: with
    /// SWITCHYARD_FAULT_DEVICE_STEPS=N every step after the first N fails
    /// the way a lost device does.
    fail_after: Option<usize>,
    steps: std::sync::atomic::AtomicUsize,
}

/// One sequence's keys and values on the device: per layer
/// `[n_kv_heads, capacity, head_dim]`, written in place with `slice_set`.
pub(super) struct DeviceKv {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
}

impl DeviceKv {
    pub(super) fn copy_prefix_from(&mut self, src: &DeviceKv, n: usize) -> Result<()> {
        for (d, s) in self.k.iter().zip(&src.k).chain(self.v.iter().zip(&src.v)) {
            d.slice_set(&s.narrow(1, 0, n)?.contiguous()?, 1, 0)?;
        }
        Ok(())
    }
}

impl DeviceModel {
    pub(super) fn load(content: &gguf_file::Content, file: &mut File, cfg: &LlamaConfig, dev: Device) -> Result<Self> {
        if cfg.rope_dims != cfg.head_dim {
            bail!("partial RoPE ({} of {} dims) is not supported on the device path", cfg.rope_dims, cfg.head_dim);
        }
        let mut weight_bytes = 0u64;
        let mut types = Vec::new();
        // Every device tensor comes through here: read onto the device,
        // counted; matrices stay quantized, vectors (norms) become f32.
        let mut tensor = |name: &str| -> Result<candle_core::quantized::QTensor> {
            let qt = content.tensor(file, name, &dev).with_context(|| format!("tensor {name} onto {dev:?}"))?;
            weight_bytes += qt.storage_size_in_bytes() as u64;
            Ok(qt)
        };
        let mut matrix = |tensor: &mut dyn FnMut(&str) -> Result<candle_core::quantized::QTensor>, name: &str| -> Result<QMatMul> {
            let qt = tensor(name)?;
            if types.len() < 8 {
                types.push(format!("{:?}", qt.dtype()));
            }
            Ok(QMatMul::from_qtensor(qt)?)
        };
        let vector = |tensor: &mut dyn FnMut(&str) -> Result<candle_core::quantized::QTensor>, name: &str| -> Result<Tensor> {
            Ok(tensor(name)?.dequantize(&dev)?.to_dtype(DType::F32)?)
        };
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let t = &mut tensor;
            let w = |what: &str| format!("blk.{i}.{what}.weight");
            // A vector the architecture may or may not have (`blk.{i}.{what}`).
            let opt = |t: &mut dyn FnMut(&str) -> Result<candle_core::quantized::QTensor>, what: &str| -> Result<Option<Tensor>> {
                let name = format!("blk.{i}.{what}");
                if !content.tensor_infos.contains_key(&name) {
                    return Ok(None);
                }
                Ok(Some(vector(t, &name)?))
            };
            let bqkv = match (opt(t, "attn_q.bias")?, opt(t, "attn_k.bias")?, opt(t, "attn_v.bias")?) {
                (Some(q), Some(k), Some(v)) => Some((q, k, v)),
                (None, None, None) => None,
                _ => bail!("block {i} has biases on some of q, k and v only"),
            };
            let qk_norm = match (opt(t, "attn_q_norm.weight")?, opt(t, "attn_k_norm.weight")?) {
                (Some(q), Some(k)) => Some((q, k)),
                (None, None) => None,
                _ => bail!("block {i} has a norm on one of q and k only"),
            };
            layers.push(Layer {
                attn_norm: vector(t, &w("attn_norm"))?,
                bqkv,
                qk_norm,
                wq: matrix(t, &w("attn_q"))?,
                wk: matrix(t, &w("attn_k"))?,
                wv: matrix(t, &w("attn_v"))?,
                wo: matrix(t, &w("attn_output"))?,
                post_attn_norm: opt(t, "post_attention_norm.weight")?,
                ffn_norm: vector(t, &w("ffn_norm"))?,
                w_gate: matrix(t, &w("ffn_gate"))?,
                w_up: matrix(t, &w("ffn_up"))?,
                w_down: matrix(t, &w("ffn_down"))?,
                post_ffn_norm: opt(t, "post_ffw_norm.weight")?,
            });
        }
        let head_name = if content.tensor_infos.contains_key("output.weight") { "output.weight" } else { "token_embd.weight" };
        let head = matrix(&mut tensor, head_name)?;
        let head_rows = content.tensor_infos[head_name].shape.dims()[0];
        let out_norm = vector(&mut tensor, "output_norm.weight")?;
        let tok_embd = load_host_matrix(content, file, "token_embd.weight")?;
        if tok_embd.cols != cfg.hidden || tok_embd.rows < cfg.vocab || head_rows < cfg.vocab {
            bail!("tensor shapes do not match the GGUF hyperparameters {cfg:?}");
        }
        weight_bytes += tok_embd.bytes() as u64;
        let matrix_types = format!("{} on {dev:?}; embeddings {} on the host", types.join(","), tok_embd.dtype_name());
        Ok(DeviceModel {
            cos: Tensor::zeros((1, cfg.head_dim / 2), DType::F32, &dev)?,
            sin: Tensor::zeros((1, cfg.head_dim / 2), DType::F32, &dev)?,
            swa_rope: None,
            dev,
            cfg: cfg.clone(),
            tok_embd,
            layers,
            out_norm,
            head,
            head_rows,
            matrix_types,
            weight_bytes,
            fail_after: std::env::var("SWITCHYARD_FAULT_DEVICE_STEPS").ok().and_then(|v| v.parse().ok()),
            steps: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    pub(super) fn matrix_types(&self) -> String {
        self.matrix_types.clone()
    }

    pub(super) fn weight_bytes(&self) -> u64 {
        self.weight_bytes
    }

    pub(super) fn set_rope(&mut self, global: (Vec<f32>, Vec<f32>), local: Option<(Vec<f32>, Vec<f32>)>, len: usize) -> Result<()> {
        let half = self.cfg.head_dim / 2;
        self.cos = Tensor::from_vec(global.0, (len, half), &self.dev)?;
        self.sin = Tensor::from_vec(global.1, (len, half), &self.dev)?;
        self.swa_rope = match local {
            Some((cos, sin)) => Some((Tensor::from_vec(cos, (len, half), &self.dev)?, Tensor::from_vec(sin, (len, half), &self.dev)?)),
            None => None,
        };
        Ok(())
    }

    pub(super) fn new_kv(&self, capacity: usize) -> Result<DeviceKv> {
        let shape = (self.cfg.n_kv_heads, capacity.max(1), self.cfg.head_dim);
        let mut k = Vec::with_capacity(self.cfg.n_layers);
        let mut v = Vec::with_capacity(self.cfg.n_layers);
        for _ in 0..self.cfg.n_layers {
            k.push(Tensor::zeros(shape, DType::F32, &self.dev)?);
            v.push(Tensor::zeros(shape, DType::F32, &self.dev)?);
        }
        Ok(DeviceKv { k, v })
    }

    /// `[n, hidden]` embeddings of `tokens` (times the embedding scale, as
    /// on the host), uploaded.
    fn embed(&self, tokens: &[u32]) -> Result<Tensor> {
        let h = self.cfg.hidden;
        let mut x = vec![0f32; tokens.len() * h];
        for (i, &t) in tokens.iter().enumerate() {
            self.tok_embd.dequantize_row(t as usize, &mut x[i * h..(i + 1) * h]);
        }
        if self.cfg.embed_scale != 1.0 {
            for v in x.iter_mut() {
                *v *= self.cfg.embed_scale;
            }
        }
        Ok(Tensor::from_vec(x, (tokens.len(), h), &self.dev)?)
    }

    /// Blocks `layers` over `x` (`[m, hidden]`). `rows[r] = (seq, pos)`, rows
    /// of one sequence contiguous with increasing positions; each row's keys
    /// and values land in `caches[seq]` at `pos`. `capture(l, x)` sees the
    /// residual stream after block l (1-based).
    fn run_blocks(
        &self,
        mut x: Tensor,
        rows: &[(usize, usize)],
        caches: &[&DeviceKv],
        layers: Range<usize>,
        capture: &mut dyn FnMut(usize, &Tensor) -> Result<()>,
    ) -> Result<Tensor> {
        let cfg = &self.cfg;
        let m = rows.len();
        let (nh, nkv, hd) = (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim);
        let group = nh / nkv;
        let scale = cfg.attn_scale as f64;
        // Per-row RoPE angles, `[m, 1, hd / 2]`: every row is its own batch
        // entry of one position, so one call rotates a whole mixed batch.
        // Sliding-window layers have their own table (gemma3).
        let pos: Vec<u32> = rows.iter().map(|&(_, p)| p as u32).collect();
        let pos = Tensor::from_vec(pos, m, &self.dev)?;
        let angles = |cos: &Tensor, sin: &Tensor| -> Result<(Tensor, Tensor)> {
            Ok((cos.index_select(&pos, 0)?.reshape((m, 1, hd / 2))?, sin.index_select(&pos, 0)?.reshape((m, 1, hd / 2))?))
        };
        let global_rope = angles(&self.cos, &self.sin)?;
        let swa_rope = match &self.swa_rope {
            Some((cos, sin)) => Some(angles(cos, sin)?),
            None => None,
        };
        // Each sequence's span of rows: (seq, first row, rows, first position).
        let mut spans: Vec<(usize, usize, usize, usize)> = Vec::new();
        for (r, &(seq, p)) in rows.iter().enumerate() {
            match spans.last_mut() {
                Some(s) if s.0 == seq => s.2 += 1,
                _ => spans.push((seq, r, 1, p)),
            }
        }
        // What each span's queries see in layer `li`: keys from `lo` (the
        // first one its first query sees) to its last position, and for
        // spans of more than one row a mask: query i (position p0 + i)
        // sees keys first_visible(p0 + i)..=p0 + i (0.. on global layers,
        // the window on sliding ones, as the host's spans). One set per
        // kind of layer, built when the first layer of that kind runs.
        let visibility = |li: usize| -> Result<Vec<(usize, Option<Tensor>)>> {
            spans
                .iter()
                .map(|&(_, _, t, p0)| {
                    let (lo, len) = (cfg.first_visible(li, p0), p0 + t);
                    if t == 1 {
                        return Ok((lo, None));
                    }
                    let m: Vec<f32> = (0..t)
                        .flat_map(|i| {
                            let from = cfg.first_visible(li, p0 + i);
                            (lo..len).map(move |j| if from <= j && j <= p0 + i { 0.0 } else { f32::NEG_INFINITY })
                        })
                        .collect();
                    Ok((lo, Some(Tensor::from_vec(m, (t, len - lo), &self.dev)?)))
                })
                .collect()
        };
        let mut seen: [Option<Vec<(usize, Option<Tensor>)>>; 2] = [None, None];
        // RMS norm where the block has one (gemma3's post-norms).
        let maybe_norm = |x: Tensor, w: &Option<Tensor>| -> Result<Tensor> {
            Ok(match w {
                Some(w) => candle_nn::ops::rms_norm(&x, w, cfg.eps)?,
                None => x,
            })
        };

        for li in layers {
            let layer = &self.layers[li];
            let swa = cfg.is_swa(li);
            if seen[swa as usize].is_none() {
                seen[swa as usize] = Some(visibility(li)?);
            }
            let masks = seen[swa as usize].as_ref().expect("built above");
            let xn = candle_nn::ops::rms_norm(&x, &layer.attn_norm, cfg.eps)?;
            let (mut q, mut k, mut v) = (layer.wq.forward(&xn)?, layer.wk.forward(&xn)?, layer.wv.forward(&xn)?);
            if let Some((bq, bk, bv)) = &layer.bqkv {
                q = q.broadcast_add(bq)?;
                k = k.broadcast_add(bk)?;
                v = v.broadcast_add(bv)?;
            }
            let mut q = q.reshape((m, nh, 1, hd))?;
            let mut k = k.reshape((m, nkv, 1, hd))?;
            let v = v.reshape((m, nkv, hd))?;
            if let Some((qn, kn)) = &layer.qk_norm {
                // Over the last dim: each head on its own.
                q = candle_nn::ops::rms_norm(&q.contiguous()?, qn, cfg.eps)?;
                k = candle_nn::ops::rms_norm(&k.contiguous()?, kn, cfg.eps)?;
            }
            // Adjacent pairs (llama) or NeoX halves (qwen2, gemma3), as on the host.
            let rope = if cfg.rope_neox { candle_nn::rotary_emb::rope } else { candle_nn::rotary_emb::rope_i };
            let (cos, sin) = match &swa_rope {
                Some(local) if swa => local,
                _ => &global_rope,
            };
            let q = rope(&q.contiguous()?, cos, sin)?;
            let k = rope(&k.contiguous()?, cos, sin)?;
            let mut outs = Vec::with_capacity(spans.len());
            for (&(seq, r0, t, p0), (lo, mask)) in spans.iter().zip(masks) {
                let cache = caches[seq];
                let (kc, vc) = (&cache.k[li], &cache.v[li]);
                // [t, nkv, 1, hd] -> [nkv, t, hd] into the cache at p0.
                let k_new = k.narrow(0, r0, t)?.reshape((t, nkv, hd))?.transpose(0, 1)?.contiguous()?;
                let v_new = v.narrow(0, r0, t)?.transpose(0, 1)?.contiguous()?;
                kc.slice_set(&k_new, 1, p0)?;
                vc.slice_set(&v_new, 1, p0)?;
                let (lo, seen_len) = (*lo, p0 + t - lo);
                let keys = kc.narrow(1, lo, seen_len)?;
                let values = vc.narrow(1, lo, seen_len)?;
                // Query heads grouped by the KV head they share:
                // [t, nh, hd] -> [nkv, group * t, hd].
                let qs = q.narrow(0, r0, t)?.reshape((t, nh, hd))?.transpose(0, 1)?.contiguous()?.reshape((nkv, group * t, hd))?;
                let mut att = (qs.matmul(&keys.t()?)? * scale)?;
                if let Some(cap) = cfg.attn_softcap {
                    att = ((att / cap as f64)?.tanh()? * cap as f64)?;
                }
                if let Some(mask) = mask {
                    att = att.reshape((nkv, group, t, seen_len))?.broadcast_add(mask)?.reshape((nkv, group * t, seen_len))?;
                }
                let att = candle_nn::ops::softmax_last_dim(&att)?;
                let o = att.matmul(&values.contiguous()?)?; // [nkv, group * t, hd]
                outs.push(o.reshape((nh, t, hd))?.transpose(0, 1)?.reshape((t, nh * hd))?);
            }
            let attn = Tensor::cat(&outs, 0)?;
            x = (x + maybe_norm(layer.wo.forward(&attn)?, &layer.post_attn_norm)?)?;
            let xn = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, cfg.eps)?;
            let gate = layer.w_gate.forward(&xn)?;
            let up = layer.w_up.forward(&xn)?;
            let gate = match cfg.act {
                Act::Silu => candle_nn::ops::silu(&gate)?,
                // candle's gelu is the tanh approximation, as ggml_gelu.
                Act::GeluTanh => gate.gelu()?,
            };
            x = (x + maybe_norm(layer.w_down.forward(&(gate * up)?)?, &layer.post_ffn_norm)?)?;
            capture(li + 1, &x)?;
        }
        Ok(x)
    }

    /// Final norm and output head over rows `select` of `x` -> `[n, vocab]`.
    fn head(&self, x: &Tensor, select: &[usize]) -> Result<Vec<f32>> {
        let idx: Vec<u32> = select.iter().map(|&r| r as u32).collect();
        let idx = Tensor::from_vec(idx, select.len(), &self.dev)?;
        let rows = x.index_select(&idx, 0)?;
        let xn = candle_nn::ops::rms_norm(&rows, &self.out_norm, self.cfg.eps)?;
        let mut logits = self.head.forward(&xn)?;
        if let Some(cap) = self.cfg.final_softcap {
            logits = ((logits / cap as f64)?.tanh()? * cap as f64)?;
        }
        if self.head_rows != self.cfg.vocab {
            // Some files pad the embedding; keep exactly `vocab` logits per row.
            logits = logits.narrow(D::Minus1, 0, self.cfg.vocab)?;
        }
        Ok(logits.flatten_all()?.to_vec1::<f32>()?)
    }

    pub(super) fn step(
        &self,
        rows: &[(usize, usize)],
        tokens: &[u32],
        last_rows: &[usize],
        caches: &[&DeviceKv],
        s: &mut Scratch,
    ) -> Result<()> {
        let done = self.steps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.fail_after.is_some_and(|n| done >= n) {
            bail!("injected device fault (SWITCHYARD_FAULT_DEVICE_STEPS) after {done} steps");
        }
        let x = self.embed(tokens)?;
        let x = self.run_blocks(x, rows, caches, 0..self.cfg.n_layers, &mut |_, _| Ok(()))?;
        s.logits = self.head(&x, last_rows)?;
        Ok(())
    }

    pub(super) fn forward_seq(&self, input: SeqInput, layers: Range<usize>, capture: &[usize], logits: bool) -> Result<SeqOutput> {
        let (x, n) = match input {
            SeqInput::Tokens(t) => (self.embed(t)?, t.len()),
            SeqInput::Activations(a) => {
                let n = a.len() / self.cfg.hidden;
                (Tensor::from_slice(a, (n, self.cfg.hidden), &self.dev)?, n)
            }
        };
        let to_host = |x: &Tensor| -> Result<Vec<f32>> { Ok(x.flatten_all()?.to_vec1::<f32>()?) };
        let mut captured = Vec::new();
        if capture.contains(&layers.start) {
            captured.push((layers.start, to_host(&x)?));
        }
        let rows: Vec<(usize, usize)> = (0..n).map(|p| (0, p)).collect();
        let cache = self.new_kv(n)?;
        let x = self.run_blocks(x, &rows, &[&cache], layers, &mut |l, x| {
            if capture.contains(&l) {
                captured.push((l, to_host(x)?));
            }
            Ok(())
        })?;
        let out = if logits {
            let all: Vec<usize> = (0..n).collect();
            self.head(&x, &all)?
        } else {
            to_host(&x)?
        };
        Ok(SeqOutput { captured, out })
    }
}
