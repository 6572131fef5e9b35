"""llama.cpp compiled for this CPU (llama-cpp-python built with GGML_NATIVE=ON),
driven through its low-level API the way llama.cpp's own examples are: one
llama_batch per llama_decode, greedy argmax over the logits, no sampler chain
and no Python-side high-level wrapper. Prints and (--json) writes prefill
tok/s, single-stream decode tok/s and aggregate decode tok/s at --streams
sequences in one batch, the same shape of measurement as speed.mjs
(node-llama-cpp) so `switchyard bench engine` can put them side by side.

  python llama_cpp_speed.py MODEL.gguf [--threads 2] [--runs 3] [--streams 8] [--json out.json]
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

import numpy as np
import llama_cpp as L

FILLER = (
    "Switchyard routes OpenAI-compatible requests across self-hosted workers and paid APIs. "
    "Each worker reports its queue depth, the models it has loaded, and its recent throughput, "
    "so the router can pick the cheapest backend that still meets the latency target. "
)
DECODE_PROMPT = "Once upon a time, in a small village by the sea,"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--streams", type=int, default=8, help="sequences decoded together in one batch (0: skip)")
    ap.add_argument("--json")
    ap.add_argument("--no-extra-bufts", action="store_true", help="no repacked/AMX weight buffers (llama.cpp's use_extra_bufts=false)")
    a = ap.parse_args()

    quiet = L.llama_log_callback(lambda level, text, data: None)  # kept referenced: llama.cpp calls it later
    L.llama_log_set(quiet, ctypes.c_void_p())
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    if a.no_extra_bufts:
        mp.use_extra_bufts = False
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        sys.exit(f"llama.cpp could not load {a.model}")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)

    n_seq = max(1, a.streams)
    per_seq = max(a.prompt_tokens, 32) + a.tokens + 16
    cp = L.llama_context_default_params()
    # Every sequence gets per_seq positions (the KV cache is split per sequence unless unified).
    cp.n_ctx = per_seq * n_seq
    cp.n_batch = max(512, a.prompt_tokens)
    cp.n_ubatch = cp.n_batch
    cp.n_seq_max = n_seq
    cp.n_threads = a.threads
    cp.n_threads_batch = a.threads
    cp.no_perf = True
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        sys.exit("llama.cpp could not create a context")
    mem = L.llama_get_memory(ctx)

    def tokenize(text: str, add_special: bool) -> list[int]:
        raw = text.encode()
        buf = (L.llama_token * (len(raw) + 16))()
        n = L.llama_tokenize(vocab, raw, len(raw), buf, len(buf), add_special, False)
        if n < 0:
            raise RuntimeError("tokenize: buffer too small")
        return list(buf[:n])

    batch = L.llama_batch_init(max(cp.n_batch, n_seq * 64), 0, n_seq)

    def fill(rows: list[tuple[int, int, int, bool]]) -> None:
        """rows: (token, pos, seq, wants logits)."""
        for i, (tok, pos, seq, out) in enumerate(rows):
            batch.token[i] = tok
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq
            batch.logits[i] = out
        batch.n_tokens = len(rows)

    def decode(rows: list[tuple[int, int, int, bool]]) -> None:
        fill(rows)
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        L.llama_synchronize(ctx)

    def argmax(i: int) -> int:
        p = L.llama_get_logits_ith(ctx, i)
        return int(np.argmax(np.ctypeslib.as_array(p, shape=(n_vocab,))))

    prompt = []
    while len(prompt) < a.prompt_tokens:
        prompt = tokenize(FILLER * (a.prompt_tokens // 40 + 2), False)
    prompt = prompt[: a.prompt_tokens]

    def prefill_once() -> float:
        L.llama_memory_clear(mem, True)
        t0 = time.perf_counter()
        for s in range(0, len(prompt), cp.n_batch):
            chunk = prompt[s : s + cp.n_batch]
            decode([(t, s + j, 0, s + j == len(prompt) - 1) for j, t in enumerate(chunk)])
        argmax(-1)
        return len(prompt) / (time.perf_counter() - t0)

    def decode_once(n: int) -> tuple[float, list[list[int]]]:
        """n sequences, each its own prompt, then a.tokens greedy steps with all n in one
        batch per step; the rate counts the steps after the first token (as speed.mjs does)."""
        L.llama_memory_clear(mem, True)
        prompts = [tokenize(DECODE_PROMPT if s == 0 else f"Story {s}: {DECODE_PROMPT}", False) for s in range(n)]
        rows = [(t, j, s, j == len(p) - 1) for s, p in enumerate(prompts) for j, t in enumerate(p)]
        decode(rows)
        outs = [i for i, r in enumerate(rows) if r[3]]
        nxt = [argmax(i) for i in outs]
        pos = [len(p) for p in prompts]
        gen = [[t] for t in nxt]
        t0 = time.perf_counter()
        for _ in range(a.tokens - 1):
            decode([(nxt[s], pos[s], s, True) for s in range(n)])
            nxt = [argmax(s) for s in range(n)]
            for s in range(n):
                pos[s] += 1
                gen[s].append(nxt[s])
        dt = time.perf_counter() - t0
        return n * (a.tokens - 1) / dt, gen

    # Warm-up, then interleaved runs.
    prefill_once()
    decode_once(1)
    if a.streams > 1:
        decode_once(a.streams)
    pre, single, multi = [], [], []
    first_ids: list[int] = []
    for _ in range(max(1, a.runs)):
        pre.append(prefill_once())
        rate, gen = decode_once(1)
        single.append(rate)
        first_ids = gen[0]
        if a.streams > 1:
            rate, gen = decode_once(a.streams)
            multi.append(rate)
            # Sequence 0 of the batch has the single-stream prompt: a batch must not change it.
            if gen[0][:8] != first_ids[:8]:
                print(f"warning: batched sequence 0 diverged from single-stream greedy: {gen[0][:8]} vs {first_ids[:8]}", file=sys.stderr)

    info = L.llama_print_system_info().decode()
    # "CPU : SSE3 = 1 | AVX = 1 | ...": the features this build uses.
    feats = sorted({p.split(":")[-1].split("=")[0].strip() for p in info.split("|") if p.strip().endswith("= 1")})
    stat = lambda xs: {"median_tok_s": round(statistics.median(xs), 1), "best_tok_s": round(max(xs), 1), "all_tok_s": [round(x, 1) for x in xs]}
    result = {
        "model": os.path.basename(a.model),
        "engine": f"llama.cpp via llama-cpp-python {L.__version__} (built here, GGML_NATIVE=ON; {' '.join(feats) or 'no SIMD features reported'})",
        "threads": a.threads,
        "runs": a.runs,
        "system_info": info.strip(),
        "prefill": {"prompt_tokens": len(prompt), **stat(pre)},
        "decode": {"tokens": a.tokens, **stat(single)},
        **({"aggregate": {"streams": a.streams, **stat(multi)}} if multi else {}),
        "greedy_ids": first_ids,
    }
    print(f"engine:  {result['engine']}, threads={a.threads}")
    print(f"prefill ({len(prompt)}-token prompt): median {result['prefill']['median_tok_s']} tok/s, best {result['prefill']['best_tok_s']}")
    print(f"decode (greedy, {a.tokens} tokens):   median {result['decode']['median_tok_s']} tok/s, best {result['decode']['best_tok_s']}")
    if multi:
        print(f"aggregate decode, {a.streams} streams:  median {result['aggregate']['median_tok_s']} tok/s, best {result['aggregate']['best_tok_s']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
