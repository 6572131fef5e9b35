#!/usr/bin/env python3
"""Independent cross-check of greedy_reference.json: a plain PyTorch llama forward pass over the GGUF's
dequantised weights (gguf.quants.dequantize), no KV cache, recomputed from scratch every step.

    /tmp/refvenv/bin/python bench/reference/gguf_f32_check.py [MODEL.gguf] [greedy_reference.json]

Default: f32 activations everywhere. EMULATE_GGML=1 additionally emulates llama.cpp's CPU numerics
(Q8 block quantisation of matmul activations, F16 K/V/Q and attention probabilities).
Prints, per case, how many leading greedy tokens agree with llama.cpp and the top1-top2 logit margins.
Slow on 2 cores (~2 min). Not used to write any fixture.
"""
import sys, json, os
from pathlib import Path
import numpy as np, torch
from gguf import GGUFReader
from gguf.quants import dequantize
torch.set_num_threads(2)
EMU = os.environ.get("EMULATE_GGML") == "1"
HERE = Path(__file__).resolve().parent
path = sys.argv[1] if len(sys.argv) > 1 else str(Path.home() / ".cache/switchyard/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
fix = json.load(open(sys.argv[2] if len(sys.argv) > 2 else HERE.parent.parent / "workers/engine/tests/fixtures/greedy_reference.json"))
r = GGUFReader(path)
W = {}
qtypes = {}
for t in r.tensors:
    a = dequantize(t.data, t.tensor_type)
    W[t.name] = torch.from_numpy(np.array(a, dtype=np.float32, copy=True))
    qtypes.setdefault(t.tensor_type.name, 0); qtypes[t.tensor_type.name] += 1
print("tensor types:", qtypes, "tied output:", "output.weight" not in W, "emulate ggml:", EMU)
def f(name): return r.get_field(name).parts[-1][0]
n_layer = int(f("llama.block_count")); dim = int(f("llama.embedding_length"))
n_head = int(f("llama.attention.head_count")); n_kv = int(f("llama.attention.head_count_kv"))
hd = dim // n_head; eps = float(f("llama.attention.layer_norm_rms_epsilon")); base = float(f("llama.rope.freq_base"))
emb = W["token_embd.weight"]; out_w = W.get("output.weight", emb)
def q8(x):  # ggml Q8_0/Q8_1 activation quantisation: blocks of 32, d = amax/127, round-to-nearest
    if not EMU: return x
    sh = x.shape; b = x.reshape(-1, 32); d = b.abs().amax(-1, keepdim=True) / 127
    q = torch.where(d > 0, torch.round(b / torch.where(d > 0, d, 1)), 0)
    return (q * d.half().float()).reshape(sh)
def h16(x): return x.half().float() if EMU else x
def lin(h, w): return q8(h) @ w.T
def rms(x, w): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
def rope(x, pos):  # x: [T, H, hd], interleaved pairs (ggml LLAMA_ROPE_TYPE_NORM on permuted q/k)
    i = torch.arange(0, hd, 2, dtype=torch.float64)
    inv = base ** (-i / hd)
    ang = pos[:, None].double() * inv[None, :]
    c, s = torch.cos(ang).float()[:, None, :], torch.sin(ang).float()[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    o = torch.empty_like(x); o[..., 0::2] = x0 * c - x1 * s; o[..., 1::2] = x0 * s + x1 * c
    return o
def forward(ids):
    T = len(ids); x = emb[torch.tensor(ids)]; pos = torch.arange(T)
    mask = torch.full((T, T), float("-inf")).triu(1)
    for l in range(n_layer):
        p = f"blk.{l}."
        h = rms(x, W[p + "attn_norm.weight"])
        q = lin(h, W[p + "attn_q.weight"]).view(T, n_head, hd)
        k = lin(h, W[p + "attn_k.weight"]).view(T, n_kv, hd)
        v = lin(h, W[p + "attn_v.weight"]).view(T, n_kv, hd)
        q, k = h16(rope(q, pos)), h16(rope(k, pos)); v = h16(v)
        k = k.repeat_interleave(n_head // n_kv, 1); v = v.repeat_interleave(n_head // n_kv, 1)
        att = torch.einsum("thd,shd->hts", q, k) / hd ** 0.5 + mask
        o = torch.einsum("hts,shd->thd", h16(att.softmax(-1)), v).reshape(T, dim)
        x = x + lin(o, W[p + "attn_output.weight"])
        h = rms(x, W[p + "ffn_norm.weight"])
        g = torch.nn.functional.silu(lin(h, W[p + "ffn_gate.weight"])) * lin(h, W[p + "ffn_up.weight"])
        x = x + lin(g, W[p + "ffn_down.weight"])
    return lin(rms(x[-1:], W["output_norm.weight"]), out_w)[0]
with torch.no_grad():
    for ci, c in enumerate(fix["cases"]):
        ids = list(c["prompt_ids"]); ref = c["completion_ids"]; agree = 0; margins = []
        for step, want in enumerate(ref):
            logits = forward(ids)
            top = torch.topk(logits, 2)
            got = int(top.indices[0]); margins.append(round(float(top.values[0] - top.values[1]), 3))
            if got != want:
                print(f"case {ci} step {step}: torch argmax {got} vs llama.cpp {want}; logit[want]={float(logits[want]):.3f} top={float(top.values[0]):.3f}")
                break
            agree += 1; ids.append(want)
        print(f"case {ci}: {agree}/{len(ref)} greedy tokens agree; top1-top2 logit margins {margins}")
