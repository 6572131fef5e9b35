#!/usr/bin/env python3
"""Reference sentence embeddings for all-MiniLM-L6-v2 -> workers/engine/tests/fixtures/minilm_reference.json

Embeddings come from sentence-transformers (BERT -> mean pooling over the attention mask -> L2 normalise),
loaded from the local model directory with HF_HUB_OFFLINE=1, on CPU, float32. They are cross-checked
against a hand-written transformers.AutoModel + mean-pool + normalise pipeline. Token ids come from
the model's tokenizer.json via the `tokenizers` library (with [CLS]/[SEP]).

Usage (venv outside the repo, see README.md):
    HF_HUB_OFFLINE=1 /tmp/refvenv/bin/python bench/reference/minilm_reference.py [MODEL_DIR]
"""
import json
import re
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import sentence_transformers  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoModel, AutoTokenizer  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
OUT = REPO / "workers" / "engine" / "tests" / "fixtures" / "minilm_reference.json"
MODEL_DIR = Path(sys.argv[1] if len(sys.argv) > 1 else
                 Path.home() / ".cache" / "switchyard" / "models" / "all-minilm-l6-v2")

# Pairs of paraphrases (high similarity) plus unrelated sentences (low similarity).
SENTENCES = [
    "The cat sits on the mat.",
    "A cat is sitting on a rug.",
    "How do I reset my password?",
    "I forgot my password and need to change it.",
    "The stock market fell sharply today.",
    "Quantum computers use qubits instead of bits.",
    "Pizza at Café Zürich is my FAVOURITE food!",  # exercises lower-casing + accent stripping
    "GPUs accelerate matrix multiplication for deep learning.",
]

torch.set_num_threads(2)
torch.manual_seed(0)


def f32(x: float) -> float:
    # 9 significant digits round-trip a float32 exactly
    return float(f"{x:.9g}")


def to_json(obj) -> str:
    """Pretty JSON with arrays of scalars (ids, tokens, embeddings, cosine rows) kept on one line."""
    store = []

    def walk(v):
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            if all(isinstance(x, (int, float, str, bool)) for x in v):
                store.append(json.dumps(v, ensure_ascii=False))
                return f"\0{len(store) - 1}\0"
            return [walk(x) for x in v]
        return v

    text = json.dumps(walk(obj), indent=2, ensure_ascii=False)
    return re.sub(r'"\\u0000(\d+)\\u0000"', lambda m: store[int(m.group(1))], text)


def main() -> None:
    st = SentenceTransformer(str(MODEL_DIR), device="cpu", local_files_only=True)
    st.eval()
    emb = st.encode(SENTENCES, batch_size=len(SENTENCES), convert_to_numpy=True,
                    normalize_embeddings=False, show_progress_bar=False)
    emb = emb.astype(np.float32)
    modules = [type(m).__name__ for m in st]

    # Independent cross-check: plain transformers BERT + masked mean pooling + L2 normalise.
    hf_tok = AutoTokenizer.from_pretrained(str(MODEL_DIR), local_files_only=True)
    hf_model = AutoModel.from_pretrained(str(MODEL_DIR), local_files_only=True).eval()
    with torch.no_grad():
        enc = hf_tok(SENTENCES, padding=True, truncation=True, max_length=st.max_seq_length, return_tensors="pt")
        hidden = hf_model(**enc).last_hidden_state
        mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        manual = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
    max_abs_diff = float(np.abs(manual - emb).max())
    assert max_abs_diff < 1e-5, f"sentence-transformers vs manual pipeline differ by {max_abs_diff}"
    # Unpadded, one sentence at a time (what a per-request engine does) vs the padded batch.
    single = np.stack([st.encode([s], convert_to_numpy=True, show_progress_bar=False)[0] for s in SENTENCES])
    max_abs_diff_single = float(np.abs(single - emb).max())
    assert max_abs_diff_single < 1e-5, f"batch vs single differ by {max_abs_diff_single}"

    tok = Tokenizer.from_file(str(MODEL_DIR / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    cases = []
    for i, s in enumerate(SENTENCES):
        e = tok.encode(s, add_special_tokens=True)
        hf_ids = hf_tok(s)["input_ids"]
        assert list(e.ids) == list(hf_ids), (s, e.ids, hf_ids)
        cases.append({
            "text": s,
            "ids": list(e.ids),
            "tokens": list(e.tokens),
            "embedding": [f32(v) for v in emb[i].tolist()],
            "norm": f32(float(np.linalg.norm(emb[i]))),
        })

    cos = (emb @ emb.T).astype(np.float64)
    doc = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "model_dir_files": sorted(p.name for p in MODEL_DIR.iterdir()),
        "generator": {
            "script": "bench/reference/minilm_reference.py",
            "implementation": "sentence-transformers (SentenceTransformer.encode), CPU, float32; "
                              "cross-checked against transformers AutoModel + masked mean pooling + L2 normalise",
            "versions": {
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "sentence_transformers": sentence_transformers.__version__,
                "tokenizers": tokenizers.__version__,
            },
            "st_modules": modules,
            "max_seq_length": st.max_seq_length,
            "max_abs_diff_st_vs_manual": max_abs_diff,
            "max_abs_diff_batch_vs_single": max_abs_diff_single,
        },
        "pooling": "mean over attention mask (incl. [CLS] and [SEP]), then L2 normalise",
        "dim": int(emb.shape[1]),
        "note": "ids from tokenizer.json with add_special_tokens=True ([CLS]=101 ... [SEP]=102); "
                "embeddings are float32 values written with 9 significant digits; "
                "cosine = dot product of the normalised embeddings",
        "cases": cases,
        "cosine": [[round(float(c), 6) for c in row] for row in cos],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(to_json(doc) + "\n")
    print(f"wrote {OUT}")
    print(f"modules: {modules}; st vs manual max |diff| = {max_abs_diff:.3g}; "
          f"padded batch vs single max |diff| = {max_abs_diff_single:.3g}")
    for i, s in enumerate(SENTENCES):
        print(f"{i}: {s!r:60} ids={len(cases[i]['ids'])}")
    np.set_printoptions(precision=3, suppress=True, linewidth=160)
    print("cosine similarity:\n", cos)


if __name__ == "__main__":
    main()
