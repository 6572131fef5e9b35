//! Gemma 3 270M (Q4_K_M: Q4_K, Q6_K, Q5_0 and Q8_0 matrices; sliding-window
//! and global layers; SentencePiece vocabulary) against llama.cpp, recorded by
//! `bench/reference/record-gguf.mjs` into tests/fixtures/gemma3_reference.json.

mod common;

use std::sync::OnceLock;

use switchyard_engine::llama::{LlamaModel, Scratch, SeqStep};
use switchyard_engine::parity;

fn model() -> &'static LlamaModel {
    static M: OnceLock<LlamaModel> = OnceLock::new();
    M.get_or_init(|| LlamaModel::load(&common::gemma3_path()).expect("loading Gemma 3 270M"))
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().expect("id array").iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn loads_k_quants_in_stored_form() {
    let m = model();
    assert_eq!(m.cfg.arch.name(), "gemma3");
    let types = m.matrix_types();
    // Nothing requantized: each matrix keeps the type the file stores.
    assert!(types.contains("o=q4_k") && types.contains("down=q6_k") && types.contains("q5_0"), "{types}");
}

#[test]
fn tokenizer_matches_llama_cpp() {
    let fx = common::fixture("gemma3_reference.json");
    let tok = &model().tokenizer;
    for c in fx["tokenizer"].as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        assert_eq!(tok.encode(text, false, false), ids(&c["ids"]), "{text:?}");
    }
    for c in fx["cases"].as_array().unwrap() {
        let text = c["prompt"].as_str().unwrap();
        assert_eq!(tok.encode(text, true, true), ids(&c["prompt_ids"]), "{text:?}");
    }
}

/// Greedy decode agrees with llama.cpp's under SmolLM2's rule: a different
/// pick only where llama.cpp's own top two logits are within 0.5, and the
/// top logits on the path within 2.0 of llama.cpp's.
#[test]
fn greedy_agrees_with_llama_cpp() {
    let fx = common::fixture("gemma3_reference.json");
    let m = model();
    let mut agreed_total = 0;
    let mut worst = 0f32;
    let cases = fx["cases"].as_array().unwrap();
    for c in cases {
        let prompt = ids(&c["prompt_ids"]);
        let want = ids(&c["completion_ids"]);
        let steps = c["steps"].as_array().unwrap();
        let (got, logits) = parity::greedy(m, &prompt, want.len()).unwrap();
        let mut agreed = 0;
        let mut max_diff = 0f32;
        for (i, w) in want.iter().enumerate() {
            for p in steps[i]["top_logits"].as_array().unwrap() {
                let (id, l) = (p[0].as_u64().unwrap() as usize, p[1].as_f64().unwrap() as f32);
                max_diff = max_diff.max((logits[i][id] - l).abs());
            }
            if got.get(i) == Some(w) {
                agreed += 1;
                continue;
            }
            let margin = steps[i]["margin"].as_f64().unwrap();
            assert!(margin < 0.5, "step {i} of {:?}: got {:?}, llama.cpp chose {w} with margin {margin}", c["prompt"], got.get(i));
            break;
        }
        eprintln!("{:?}: agreed {agreed}/{} (max |logit diff| on path {max_diff:.3})", c["prompt"], want.len());
        agreed_total += agreed;
        worst = worst.max(max_diff);
    }
    assert!(worst < 2.0, "logits drift from llama.cpp by {worst}");
    assert!(agreed_total >= 8 * cases.len(), "only {agreed_total} tokens agree");
}

/// A prompt longer than the 512-position sliding window: a batched step
/// over chunks, the layer-range forward and a whole prefill agree, so the
/// window is applied the same way everywhere.
#[test]
fn sliding_window_is_consistent_across_paths() {
    let m = model();
    let tok = &m.tokenizer;
    let text = "The quick brown fox jumps over the lazy dog. ".repeat(60);
    let prompt = tok.encode(&text, true, true);
    assert!(prompt.len() > 600, "{} tokens", prompt.len());
    let mut s = Scratch::default();
    // Whole prompt in one step.
    let mut c1 = m.new_cache(prompt.len() + 1).unwrap();
    m.step(&mut [SeqStep { tokens: &prompt, cache: &mut c1 }], &mut s).unwrap();
    let whole = s.logits.clone();
    // In chunks of 100.
    let mut c2 = m.new_cache(prompt.len() + 1).unwrap();
    for chunk in prompt.chunks(100) {
        m.step(&mut [SeqStep { tokens: chunk, cache: &mut c2 }], &mut s).unwrap();
    }
    let chunked = s.logits.clone();
    // The layer-range forward over every block, logits of the last row.
    let all = m.forward_range(0, m.cfg.n_layers, &prompt, None, true, &mut s).unwrap();
    let last = &all[(prompt.len() - 1) * m.cfg.vocab..];
    let max = |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0f32, |x, (p, q)| x.max((p - q).abs()));
    assert!(max(&whole, &chunked) < 1e-3, "chunked vs whole: {}", max(&whole, &chunked));
    assert!(max(&whole, last) < 1e-3, "forward_range vs step: {}", max(&whole, last));
}
