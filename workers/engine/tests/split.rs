//! A split model: shards loaded from the same GGUF by layer range, driven
//! the way the head shard's agent drives them (open on every shard, token ids
//! into the first, activations from shard to shard, samples from the last).
//! Greedy output equals the unsplit model's token for token, with sequences
//! batched and joining mid-way; bad ranges and frames are refused.

mod common;

use switchyard_engine::batch::{GenRequest, LlamaRuntime};
use switchyard_engine::llama::{Backend, LlamaModel};
use switchyard_engine::protocol::{event, DType, FinishReason, ShardClose, ShardOpen, ShardSeqRows, ShardStep, Tensor};
use switchyard_engine::sampling::SamplingParams;
use switchyard_engine::shard::Shards;
use switchyard_engine::tokenizer::ChatMessage;

const MODEL: &str = "smollm2";

fn shard(range: std::ops::Range<usize>) -> (LlamaModel, Shards) {
    (LlamaModel::load_layers(&common::smollm_path(), Backend::Kernels, Some(range)).expect("loading a shard"), Shards::default())
}

fn chat(model: &LlamaModel, q: &str) -> Vec<u32> {
    let tok = &model.tokenizer;
    let m = [ChatMessage { role: "user".into(), content: q.into(), ..Default::default() }];
    tok.encode(&tok.apply_chat_template(&m).unwrap(), false, true)
}

fn open(id: &str, capacity: usize, max_tokens: u32) -> ShardOpen {
    ShardOpen { model: MODEL.into(), seq_id: id.into(), capacity: capacity as u32, max_tokens, ..Default::default() }
}

/// Runs `prompts` through the pipeline to the end; prompt i joins at step
/// `joins[i]` (so prefill rows and decode rows share steps). Each one's tokens.
fn run_pipeline(shards: &mut [(LlamaModel, Shards)], prompts: &[Vec<u32>], joins: &[usize], max_tokens: u32, dtype: DType) -> Vec<Vec<u32>> {
    let n = prompts.len();
    let mut out: Vec<Vec<u32>> = vec![vec![]; n];
    // None: not started; Some(rows to feed next).
    let mut feed: Vec<Option<Vec<u32>>> = vec![None; n];
    let mut done = vec![false; n];
    let mut step = 0;
    while done.iter().any(|d| !d) {
        for i in 0..n {
            if joins[i] == step {
                for (m, s) in shards.iter_mut() {
                    s.open(m, 512, open(&format!("s{i}"), prompts[i].len() + max_tokens as usize, max_tokens)).unwrap();
                }
                feed[i] = Some(prompts[i].clone());
            }
        }
        let live: Vec<usize> = (0..n).filter(|&i| !done[i] && feed[i].is_some()).collect();
        step += 1;
        if live.is_empty() {
            continue;
        }
        let seqs: Vec<ShardSeqRows> = live
            .iter()
            .map(|&i| {
                let f = feed[i].as_ref().unwrap();
                ShardSeqRows { seq_id: format!("s{i}"), rows: f.len() as u32, token_ids: f.clone() }
            })
            .collect();
        let mut acts: Option<Tensor> = None;
        let last = shards.len() - 1;
        for (k, (m, s)) in shards.iter_mut().enumerate() {
            let seqs = if k == 0 { seqs.clone() } else { seqs.iter().map(|q| ShardSeqRows { token_ids: vec![], ..q.clone() }).collect() };
            let r = s.step(m, ShardStep { model: MODEL.into(), seqs, activations: acts.take(), out_dtype: dtype as i32 }).unwrap();
            if k < last {
                let a = r.activations.expect("activations for the next shard");
                let rows: u32 = live.iter().map(|&i| feed[i].as_ref().unwrap().len() as u32).sum();
                assert_eq!(a.shape, vec![rows as u64, m.cfg.hidden as u64]);
                acts = Some(a);
            } else {
                assert_eq!(r.samples.len(), live.len());
                for (&i, smp) in live.iter().zip(r.samples) {
                    assert_eq!(smp.seq_id, format!("s{i}"));
                    let ids = smp.tokens.unwrap().ids;
                    out[i].extend(&ids);
                    if smp.finish_reason != FinishReason::Unspecified as i32 {
                        done[i] = true;
                        for (m2, s2) in shards[..last].iter_mut() {
                            let _ = m2;
                            s2.close(&ShardClose { model: MODEL.into(), seq_id: format!("s{i}") });
                        }
                    } else {
                        feed[i] = Some(ids);
                    }
                }
                // The shards hold caches only for sequences still running.
                break;
            }
        }
    }
    for (_, s) in shards.iter() {
        assert!(s.is_empty(), "every shard freed its sequences");
    }
    out
}

fn unsplit(prompts: &[Vec<u32>], max_tokens: usize) -> Vec<Vec<u32>> {
    let mut rt = LlamaRuntime::new(LlamaModel::load(&common::smollm_path()).unwrap(), 4, 512).unwrap();
    rt.set_prefix_cache_bytes(0);
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            rt.submit(GenRequest {
                request_id: format!("r{i}"),
                prompt: p.clone(),
                max_tokens,
                params: SamplingParams::default(),
                stops: vec![],
                logprobs: None,
                cache_salt: String::new(),
                n: 1,
                grammar: None,
            });
            let mut events = Vec::new();
            while rt.has_work() {
                rt.step(&mut |e| events.push(e)).unwrap();
            }
            events
                .iter()
                .flat_map(|e| match &e.kind {
                    Some(event::Kind::Tokens(t)) => t.ids.clone(),
                    _ => vec![],
                })
                .collect()
        })
        .collect()
}

#[test]
fn two_and_three_shard_pipelines_equal_the_unsplit_model_token_for_token() {
    let whole = LlamaModel::load(&common::smollm_path()).unwrap();
    let nl = whole.cfg.n_layers;
    let prompts = vec![
        chat(&whole, "What is the capital of France?"),
        chat(&whole, "Write a haiku about the sea."),
        chat(&whole, "List three prime numbers."),
    ];
    let reference = unsplit(&prompts, 24);
    assert!(reference.iter().all(|r| r.len() >= 8), "{reference:?}");

    let mut two = vec![shard(0..15), shard(15..nl)];
    // Memory: each shard holds about half the blocks (the head of a tied
    // model is the embedding, which both ends carry).
    assert!(two[0].0.weight_bytes < whole.weight_bytes && two[1].0.weight_bytes < whole.weight_bytes);
    assert!(two[0].0.kv_bytes_per_token() * 2 == whole.kv_bytes_per_token());
    // The sequences are batched: the second and third join while the first decodes.
    assert_eq!(run_pipeline(&mut two, &prompts, &[0, 2, 2], 24, DType::DtypeF32), reference);

    let mut three = vec![shard(0..10), shard(10..20), shard(20..nl)];
    assert_eq!(run_pipeline(&mut three, &prompts, &[0, 0, 5], 24, DType::DtypeF32), reference);

    // f16 rows halve the bytes on the wire; the first tokens still agree.
    let f16 = run_pipeline(&mut two, &prompts[..1], &[0], 4, DType::DtypeF16);
    assert_eq!(f16[0][..2], reference[0][..2]);
}

#[test]
fn bad_ranges_and_frames_are_refused() {
    let path = common::smollm_path();
    for (range, what) in [(0..31, "within the model's 30 blocks"), (15..15, "within"), (20..10, "within")] {
        let err = LlamaModel::load_layers(&path, Backend::Kernels, Some(range.clone())).err().expect("refused");
        assert!(format!("{err:#}").contains(what), "{range:?}: {err:#}");
    }
    let err = LlamaModel::load_layers(&path, Backend::Candle(candle_core::Device::Cpu), Some(0..15)).err().unwrap();
    assert!(format!("{err:#}").contains("CPU kernels"), "{err:#}");

    let (head, mut hs) = shard(0..15);
    let (tail, mut ts) = shard(15..30);
    let hidden = tail.cfg.hidden;
    for (m, s) in [(&head, &mut hs), (&tail, &mut ts)] {
        s.open(m, 512, open("a", 64, 4)).unwrap();
        assert!(format!("{:#}", s.open(m, 512, open("a", 64, 4)).unwrap_err()).contains("already open"));
        assert!(format!("{:#}", s.open(m, 512, open("b", 4096, 4)).unwrap_err()).contains("capacity"));
    }
    let rows = |n: u32, ids: Vec<u32>| vec![ShardSeqRows { seq_id: "a".into(), rows: n, token_ids: ids }];
    let step = |seqs, activations| ShardStep { model: MODEL.into(), seqs, activations, out_dtype: 0 };
    // A frame of the wrong size: 3 rows announced, 2 rows' floats sent.
    let two_rows = Tensor::from_f32(&[3, hidden], &vec![0.0; 2 * hidden]);
    let err = ts.step(&tail, step(rows(3, vec![]), Some(two_rows))).unwrap_err();
    assert!(format!("{err:#}").contains("bytes"), "{err:#}");
    let wrong_shape = Tensor::from_f32(&[2, hidden], &vec![0.0; 2 * hidden]);
    let err = ts.step(&tail, step(rows(3, vec![]), Some(wrong_shape))).unwrap_err();
    assert!(format!("{err:#}").contains("need [3, 576]"), "{err:#}");
    // Token ids where activations belong, and the other way round.
    assert!(format!("{:#}", ts.step(&tail, step(rows(1, vec![1]), None)).unwrap_err()).contains("activations"));
    let one = Tensor::from_f32(&[1, hidden], &vec![0.0; hidden]);
    assert!(format!("{:#}", hs.step(&head, step(rows(1, vec![1]), Some(one))).unwrap_err()).contains("token ids"));
    assert!(format!("{:#}", hs.step(&head, step(rows(2, vec![1]), None)).unwrap_err()).contains("1 token ids for 2 rows"));
    let unknown = vec![ShardSeqRows { seq_id: "zz".into(), rows: 1, token_ids: vec![1] }];
    assert!(format!("{:#}", hs.step(&head, step(unknown, None)).unwrap_err()).contains("not open"));
    // Nothing refused moved the sequence: it still runs from position 0.
    let r = hs.step(&head, step(rows(2, vec![1, 2]), None)).unwrap();
    assert_eq!(r.activations.unwrap().shape, vec![2, hidden as u64]);
    // A shard never serves whole-model generation.
    let mut rt = LlamaRuntime::new(head, 2, 64).unwrap();
    let mut sink = |_| {};
    rt.submit(GenRequest { request_id: "g".into(), prompt: vec![1, 2], max_tokens: 2, params: SamplingParams::default(), stops: vec![], logprobs: None, cache_salt: String::new(), n: 1, grammar: None });
    assert!(rt.step(&mut sink).is_err());
}

/// Steps one sequence through `shards` from `feed` until it finishes or
/// `limit` tokens came; its tokens, released text and, when it finished, the
/// stop sequence that ended it ("" for none).
fn drive(shards: &mut [(LlamaModel, Shards)], id: &str, mut feed: Vec<u32>, limit: usize) -> (Vec<u32>, String, Option<String>) {
    let (mut ids, mut text) = (vec![], String::new());
    let last = shards.len() - 1;
    loop {
        let mut acts: Option<Tensor> = None;
        for (k, (m, s)) in shards.iter_mut().enumerate() {
            let seqs = vec![ShardSeqRows { seq_id: id.into(), rows: feed.len() as u32, token_ids: if k == 0 { feed.clone() } else { vec![] } }];
            let r = s.step(m, ShardStep { model: MODEL.into(), seqs, activations: acts.take(), out_dtype: DType::DtypeF32 as i32 }).unwrap();
            if k < last {
                acts = r.activations;
                continue;
            }
            let smp = &r.samples[0];
            let t = smp.tokens.clone().unwrap();
            ids.extend(&t.ids);
            text.push_str(&t.text);
            if smp.finish_reason != FinishReason::Unspecified as i32 {
                for (_, s2) in shards[..last].iter_mut() {
                    s2.close(&ShardClose { model: MODEL.into(), seq_id: id.into() });
                }
                return (ids, text, Some(smp.stop_sequence.clone()));
            }
            feed = t.ids;
        }
        if ids.len() >= limit {
            return (ids, text, None);
        }
    }
}

#[test]
fn a_sequence_resumed_on_new_shards_continues_exactly_where_it_was() {
    let whole = LlamaModel::load(&common::smollm_path()).unwrap();
    let nl = whole.cfg.n_layers;
    let prompt = chat(&whole, "Write a haiku about the sea.");
    // Greedy and seeded sampling, with a stop sequence whose prefix may be held back.
    for (temperature, seed) in [(0.0f32, None), (0.9, Some(7u64))] {
        let opening = |generated: Vec<u32>| ShardOpen { temperature, seed, stop: vec!["\n\n".into()], generated, ..open("r", 512, 40) };
        let mut first = vec![shard(0..15), shard(15..nl)];
        for (m, s) in first.iter_mut() {
            s.open(m, 512, opening(vec![])).unwrap();
        }
        let (ref_ids, ref_text, ref_end) = drive(&mut first, "r", prompt.clone(), 40);
        assert!(ref_ids.len() >= 12, "{ref_ids:?}");

        // Cut after 9 tokens; the "lost" pipeline's caches go with it.
        let mut lost = vec![shard(0..15), shard(15..nl)];
        for (m, s) in lost.iter_mut() {
            s.open(m, 512, opening(vec![])).unwrap();
        }
        let (head_ids, head_text, _) = drive(&mut lost, "r", prompt.clone(), 9);
        assert_eq!(head_ids[..], ref_ids[..9]);
        // New shards: open with what was generated, re-prefill prompt + those tokens.
        let mut fresh = vec![shard(0..15), shard(15..nl)];
        for (m, s) in fresh.iter_mut() {
            s.open(m, 512, opening(head_ids.clone())).unwrap();
        }
        let (tail_ids, tail_text, tail_end) = drive(&mut fresh, "r", [prompt.clone(), head_ids.clone()].concat(), 40);
        assert_eq!([head_ids, tail_ids].concat(), ref_ids, "temperature {temperature}");
        assert_eq!(format!("{head_text}{tail_text}"), ref_text);
        assert_eq!(tail_end, ref_end);
    }
    // Tokens that use up max_tokens, or outside the vocabulary, are refused.
    let (m, mut s) = shard(15..nl);
    assert!(format!("{:#}", s.open(&m, 512, ShardOpen { generated: vec![1; 4], ..open("x", 64, 4) }).unwrap_err()).contains("max_tokens"));
    assert!(format!("{:#}", s.open(&m, 512, ShardOpen { generated: vec![1 << 30], ..open("x", 64, 4) }).unwrap_err()).contains("vocabulary"));
}

#[test]
fn the_last_shard_names_the_stop_sequence_that_ended_a_sequence() {
    let mut shards = vec![shard(0..15), shard(15..30)];
    // Greedy output is "12 + 7 = 9\n\n..." (tests/protocol.rs, the unsplit engine's).
    let prompt = chat(&shards[0].0, "What is 12 + 7?");
    for (m, s) in shards.iter_mut() {
        s.open(m, 512, ShardOpen { stop: vec!["never said".into(), " = 9".into()], ..open("q", 512, 16) }).unwrap();
    }
    let (_, text, end) = drive(&mut shards, "q", prompt.clone(), 16);
    assert_eq!((text.as_str(), end.as_deref()), ("12 + 7", Some(" = 9")));
    // Cut by max_tokens first: finished, nothing named.
    for (m, s) in shards.iter_mut() {
        s.open(m, 512, ShardOpen { stop: vec![" = 9".into()], ..open("l", 512, 2) }).unwrap();
    }
    let (_, _, end) = drive(&mut shards, "l", prompt, 16);
    assert_eq!(end, Some(String::new()));
}

#[test]
fn hidden_states_across_shards_equal_the_unsplit_models_bit_for_bit() {
    use switchyard_engine::llama::{Scratch, ShardInput};
    let whole = LlamaModel::load(&common::smollm_path()).unwrap();
    let tokens = chat(&whole, "What is the capital of France?");
    let asked = [0usize, 5, 10, 11, 20, 29, 30];
    let mut s = Scratch::default();
    let reference = whole.hidden_states(&tokens, &asked, &mut s).unwrap();
    // Three shards: each captures the layers it holds and passes its output rows on.
    let shards: Vec<LlamaModel> = [0..10, 10..20, 20..30].into_iter().map(|r| shard(r).0).collect();
    let mut got: Vec<(usize, Vec<f32>)> = vec![];
    let mut rows: Option<Vec<f32>> = None;
    for (k, m) in shards.iter().enumerate() {
        let own: Vec<usize> = asked.iter().copied().filter(|&l| (m.layers.start < l && l <= m.layers.end) || (l == 0 && m.layers.start == 0)).collect();
        let input = match &rows {
            None => ShardInput::Tokens(&tokens),
            Some(x) => ShardInput::Activations(x),
        };
        let (states, out) = m.shard_hidden_states(input, &own, k + 1 < shards.len(), &mut s).unwrap();
        got.extend(states);
        rows = out;
    }
    assert!(rows.is_none(), "the last shard passes nothing on");
    assert_eq!(got.len(), reference.len());
    for ((l, x), (rl, rx)) in got.iter().zip(&reference) {
        assert_eq!(l, rl);
        assert!(x == rx, "layer {l} differs from the unsplit model's");
    }
    // A layer another shard holds is refused, not computed wrong.
    let err = shards[1].shard_hidden_states(ShardInput::Activations(&vec![0.0; 576 * tokens.len()]), &[10], false, &mut s).unwrap_err();
    assert!(format!("{err:#}").contains("layer 10 is not held by this shard"), "{err:#}");
    let err = shards[1].shard_hidden_states(ShardInput::Tokens(&tokens), &[12], false, &mut s).unwrap_err();
    assert!(format!("{err:#}").contains("takes the previous shard's rows"), "{err:#}");
}

#[test]
fn a_shards_memory_plan_matches_what_the_shard_loads() {
    use switchyard_engine::plan::Plan;
    let path = common::smollm_path();
    let whole = LlamaModel::load(&path).unwrap();
    let nl = whole.cfg.n_layers;
    let close = |planned: u64, loaded: u64| (planned as f64 / loaded as f64 - 1.0).abs() < 0.02;
    let p = Plan::of_file(&path).unwrap();
    assert!(close(p.weight_bytes, whole.weight_bytes), "whole: planned {} loaded {}", p.weight_bytes, whole.weight_bytes);
    assert_eq!(p.kv_bytes_per_token, whole.kv_bytes_per_token() as u64);
    for range in [0..15, 15..nl, 0..10, 10..20, 20..nl] {
        let (m, _) = shard(range.clone());
        let p = Plan::of_range(&path, Some((range.start, range.end))).unwrap();
        assert!(close(p.weight_bytes, m.weight_bytes), "{range:?}: planned {} loaded {}", p.weight_bytes, m.weight_bytes);
        assert_eq!(p.kv_bytes_per_token, m.kv_bytes_per_token() as u64, "{range:?}");
        assert!(p.weight_bytes < whole.weight_bytes);
    }
    // A range outside the model is refused, as the shard itself refuses it.
    let err = Plan::of_range(&path, Some((10, nl + 1))).unwrap_err().to_string();
    assert!(err.contains("is not within the model's 30 blocks"), "{err}");
}
