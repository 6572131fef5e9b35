//! The sampling controls beyond temperature/top-p/top-k, each observed
//! changing what the real SmolLM2 generates through the engine binary:
//! logit bias, frequency/presence/repetition penalties, min-p, n choices
//! from one prompt, the prompt echoed with its logprobs, token-id prompts,
//! and the refusals (suffix without FIM tokens, out-of-range values).

mod common;

use std::collections::HashMap;

use common::EngineProc;
use switchyard_engine::protocol::*;

fn load_llama(e: &mut EngineProc, max_batch: u32) -> Loaded {
    e.send(
        "load",
        request::Kind::LoadModel(LoadModel {
            model: "smol".into(),
            kind: ModelKind::LlamaGguf as i32,
            path: common::smollm_path().to_string_lossy().into_owned(),
            max_seq_len: 512,
            max_batch,
            ..Default::default()
        }),
    );
    match e.until_end("load").pop().unwrap().kind {
        Some(event::Kind::Loaded(l)) => l,
        other => panic!("expected Loaded, got {other:?}"),
    }
}

fn raw(text: &str, max_tokens: u32) -> Generate {
    Generate { model: "smol".into(), input: Some(generate::Input::Prompt(text.into())), max_tokens, ..Default::default() }
}

/// One choice's generated ids and text.
#[derive(Debug, Default, Clone, PartialEq)]
struct Choice {
    ids: Vec<u32>,
    text: String,
}

/// Runs a generation to its end: the choices by index, the echoed prompt
/// (if asked), and the Done.
fn run(e: &mut EngineProc, id: &str, g: Generate) -> (Vec<Choice>, Option<Tokens>, Done) {
    e.send(id, request::Kind::Generate(g));
    let mut choices: HashMap<u32, Choice> = HashMap::new();
    let mut echo = None;
    for ev in e.until_end(id) {
        match ev.kind {
            Some(event::Kind::Tokens(t)) if t.prompt => {
                assert!(echo.is_none() && choices.is_empty(), "the echoed prompt comes once, first");
                echo = Some(t);
            }
            Some(event::Kind::Tokens(t)) => {
                let c = choices.entry(t.index).or_default();
                c.ids.extend(&t.ids);
                c.text.push_str(&t.text);
            }
            Some(event::Kind::Done(d)) => {
                let mut out: Vec<(u32, Choice)> = choices.into_iter().collect();
                out.sort_by_key(|(i, _)| *i);
                return (out.into_iter().map(|(_, c)| c).collect(), echo, d);
            }
            other => panic!("{id}: unexpected {other:?}"),
        }
    }
    unreachable!()
}

fn refused(e: &mut EngineProc, id: &str, g: Generate) -> String {
    e.send(id, request::Kind::Generate(g));
    match e.until_end(id).pop().unwrap().kind {
        Some(event::Kind::Error(err)) => {
            assert_eq!(err.code, ErrorCode::InvalidRequest as i32, "{id}: {err:?}");
            err.message
        }
        other => panic!("{id}: expected INVALID_REQUEST, got {other:?}"),
    }
}

fn tokenize(e: &mut EngineProc, text: &str) -> Vec<u32> {
    e.send("tok", request::Kind::Tokenize(Tokenize { model: "smol".into(), input: Some(tokenize::Input::Prompt(text.into())) }));
    match e.until_end("tok").pop().unwrap().kind {
        Some(event::Kind::TokenIds(t)) => t.ids,
        other => panic!("expected TokenIds, got {other:?}"),
    }
}

/// The most times any one token occurs.
fn max_repeats(ids: &[u32]) -> usize {
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for &t in ids {
        *counts.entry(t).or_default() += 1;
    }
    counts.values().copied().max().unwrap_or(0)
}

#[test]
fn logit_bias_forces_and_bans_tokens() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, 4);
    let prompt = "The capital of France is";
    let (plain, _, _) = run(&mut e, "plain", raw(prompt, 6));
    let first = plain[0].ids[0];
    // +100 on one token: greedy decoding picks it every step.
    let banana = tokenize(&mut e, " banana");
    let banana = *banana.last().unwrap();
    let forced = run(&mut e, "forced", Generate { logit_bias: [(banana, 100.0)].into(), ..raw(prompt, 6) }).0;
    assert_eq!(forced[0].ids, vec![banana; 6], "{forced:?}");
    assert_eq!(forced[0].text, " banana".repeat(6));
    // -100 on the greedy first token: something else comes first.
    let banned = run(&mut e, "banned", Generate { logit_bias: [(first, -100.0)].into(), ..raw(prompt, 6) }).0;
    assert_ne!(banned[0].ids[0], first);
    assert!(!banned[0].ids.contains(&first));
    // Out of the vocabulary, or beyond ±100: refused.
    assert!(refused(&mut e, "oov", Generate { logit_bias: [(1_000_000, 5.0)].into(), ..raw(prompt, 4) }).contains("vocabulary"));
    assert!(refused(&mut e, "big", Generate { logit_bias: [(first, 101.0)].into(), ..raw(prompt, 4) }).contains("[-100, 100]"));
}

#[test]
fn penalties_reduce_repeats_on_a_greedy_run() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, 4);
    // A prompt a 135M model loops on when decoding greedily.
    let prompt = "one two one two one two one two one two";
    let n = 48;
    let (plain, _, _) = run(&mut e, "plain", raw(prompt, n));
    let base = max_repeats(&plain[0].ids);
    assert!(base >= 12, "the greedy run repeats itself: {:?}", plain[0].text);
    for (name, g) in [
        ("frequency", Generate { frequency_penalty: 1.5, ..raw(prompt, n) }),
        ("presence", Generate { presence_penalty: 2.0, ..raw(prompt, n) }),
        ("repetition", Generate { repetition_penalty: 1.8, ..raw(prompt, n) }),
    ] {
        let (c, _, _) = run(&mut e, name, g);
        let got = max_repeats(&c[0].ids);
        assert!(got * 2 <= base, "{name}: the most repeated token occurs {got} times, {base} without the penalty: {:?}", c[0].text);
    }
    // A negative frequency penalty makes repeats more likely, not fewer.
    let (c, _, _) = run(&mut e, "negative", Generate { frequency_penalty: -2.0, ..raw("Write about the sea.", n) });
    let (p, _, _) = run(&mut e, "negative-plain", raw("Write about the sea.", n));
    assert!(max_repeats(&c[0].ids) >= max_repeats(&p[0].ids));
    for (name, g) in [
        ("freq-range", Generate { frequency_penalty: 2.5, ..raw(prompt, 2) }),
        ("pres-range", Generate { presence_penalty: -3.0, ..raw(prompt, 2) }),
        ("rep-range", Generate { repetition_penalty: -1.0, ..raw(prompt, 2) }),
        ("min-p-range", Generate { min_p: 1.5, ..raw(prompt, 2) }),
    ] {
        refused(&mut e, name, g);
    }
}

/// min_p at temperature T keeps only tokens with p_T >= min_p · p_T(top),
/// i.e. raw logprob >= top logprob + T · ln(min_p): checked on each sampled
/// token's reported logprobs, with a high temperature that breaks it
/// without min_p.
#[test]
fn min_p_keeps_only_likely_tokens() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, 4);
    let t = 1.8f32;
    let floor = t * 0.3f32.ln();
    // The end-of-text tokens banned, so both runs go the full length.
    let no_end: HashMap<u32, f32> = [(0, -100.0), (1, -100.0), (2, -100.0)].into();
    let ask = |min_p: f32| Generate { temperature: t, min_p, seed: Some(11), logprobs: true, top_logprobs: 4, logit_bias: no_end.clone(), ..raw("Tell me about dogs.", 40) };
    let margins = |e: &mut EngineProc, id: &str, g: Generate| -> Vec<f32> {
        e.send(id, request::Kind::Generate(g));
        e.until_end(id)
            .into_iter()
            .filter_map(|ev| match ev.kind {
                Some(event::Kind::Tokens(t)) => Some(t.logprobs),
                _ => None,
            })
            .flatten()
            // Against the most likely token that is not banned.
            .map(|lp| lp.chosen.unwrap().logprob - lp.top.iter().find(|t| t.id > 2).unwrap().logprob)
            .collect()
    };
    let with = margins(&mut e, "min-p", ask(0.3));
    assert_eq!(with.len(), 40);
    assert!(with.iter().all(|&m| m >= floor - 1e-3), "every token within min_p of the top: {with:?}");
    let without = margins(&mut e, "no-min-p", ask(0.0));
    assert!(without.iter().any(|&m| m < floor), "at T={t} some tokens fall below the floor without min_p: {without:?}");
}

#[test]
fn n_choices_share_one_prompt_and_sample_independently() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, 4);
    let sampled = |n: u32, seed: u64| Generate { n, temperature: 1.0, seed: Some(seed), ..raw("Once upon a time", 12) };
    let (choices, _, done) = run(&mut e, "three", sampled(3, 40));
    assert_eq!(choices.len(), 3);
    assert_eq!(done.choices.iter().map(|c| c.index).collect::<Vec<_>>(), vec![0, 1, 2]);
    let completion: u32 = choices.iter().map(|c| c.ids.len() as u32).sum();
    assert_eq!(done.usage.unwrap().completion_tokens, completion, "usage counts every choice's tokens");
    assert_eq!(done.usage.unwrap().prompt_tokens as usize, tokenize(&mut e, "Once upon a time").len(), "the prompt counts once");
    for c in &done.choices {
        assert_eq!(c.completion_tokens as usize, choices[c.index as usize].ids.len());
    }
    let distinct: std::collections::HashSet<&Vec<u32>> = choices.iter().map(|c| &c.ids).collect();
    assert!(distinct.len() >= 2, "sampled choices differ: {choices:?}");
    // Choice i samples with seed + i from keys and values copied from choice
    // 0's prompt: each equals a single run with that seed.
    for i in 0..3u64 {
        let (solo, _, _) = run(&mut e, &format!("solo{i}"), sampled(1, 40 + i));
        assert_eq!(solo[0], choices[i as usize], "choice {i} is the seed {} run", 40 + i);
    }
    // Greedy choices are all the same answer.
    let (greedy, _, _) = run(&mut e, "greedy", Generate { n: 2, ..raw("Once upon a time", 8) });
    assert_eq!(greedy.len(), 2);
    assert_eq!(greedy[0], greedy[1]);
    // More choices than the batch holds: refused.
    assert!(refused(&mut e, "too-many", Generate { n: 5, ..raw("hi", 2) }).contains("max_batch"));
}

#[test]
fn n_choices_cancel_as_one_request() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, 4);
    e.send("long", request::Kind::Generate(Generate { n: 3, temperature: 1.0, ..raw("Write a long story.", 400) }));
    // Wait for some tokens, then cancel: one Done, cancelled.
    let first = e.next_for("long");
    assert!(matches!(first.kind, Some(event::Kind::Tokens(_))));
    e.send("cancel", request::Kind::Cancel(Cancel { target_request_id: "long".into() }));
    let evs = e.until_end("long");
    match &evs.last().unwrap().kind {
        Some(event::Kind::Done(d)) => {
            assert_eq!(d.finish_reason, FinishReason::Cancelled as i32);
            assert_eq!(d.choices.len(), 3);
        }
        other => panic!("expected Done, got {other:?}"),
    }
    // All slots are free again: a 4-choice request runs.
    let (c, _, _) = run(&mut e, "after", Generate { n: 4, ..raw("hi", 2) });
    assert_eq!(c.len(), 4);
}

#[test]
fn echo_reports_the_prompt_with_its_logprobs() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, 4);
    let text = "The quick brown fox jumps over the lazy dog";
    let ids = tokenize(&mut e, text);
    let (choices, echo, done) = run(&mut e, "echo", Generate { echo_prompt: true, logprobs: true, top_logprobs: 2, ..raw(text, 4) });
    let echo = echo.expect("the prompt comes back first");
    assert_eq!(echo.ids, ids);
    assert_eq!(echo.logprobs.len(), ids.len());
    assert!(echo.logprobs[0].chosen.as_ref().unwrap().logprob.is_nan(), "nothing precedes the first token");
    for (lp, &id) in echo.logprobs.iter().zip(&ids).skip(1) {
        let chosen = lp.chosen.as_ref().unwrap();
        assert_eq!(chosen.id, id);
        assert!(chosen.logprob.is_finite() && chosen.logprob <= 0.0);
        assert_eq!(lp.top.len(), 2);
        assert!(lp.top[0].logprob >= chosen.logprob - 1e-5);
    }
    // A well-known phrase: "dog" after "the lazy" is likely.
    assert!(echo.logprobs.last().unwrap().chosen.as_ref().unwrap().logprob > -2.0);
    assert_eq!(done.usage.unwrap().prompt_tokens as usize, ids.len());
    assert!(!choices[0].ids.is_empty());
    // Without logprobs: the prompt's ids and text, no forward of its own.
    let (_, echo, _) = run(&mut e, "echo-no-lp", Generate { echo_prompt: true, ..raw(text, 2) });
    let echo = echo.unwrap();
    assert_eq!((echo.ids, echo.text.as_str(), echo.logprobs.len()), (ids, text, 0));
}

#[test]
fn token_id_prompts_generate_what_their_text_does() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, 4);
    let text = "List three colours:";
    let ids = tokenize(&mut e, text);
    let (from_text, _, _) = run(&mut e, "text", raw(text, 8));
    let g = Generate { input: Some(generate::Input::PromptTokens(TokenIds { ids: ids.clone() })), ..raw("", 8) };
    let (from_ids, _, done) = run(&mut e, "ids", g);
    assert_eq!(from_ids, from_text);
    assert_eq!(done.usage.unwrap().prompt_tokens as usize, ids.len());
    let bad = Generate { input: Some(generate::Input::PromptTokens(TokenIds { ids: vec![1, 999_999] })), ..raw("", 2) };
    assert!(refused(&mut e, "oov", bad).contains("vocabulary"));
}

#[test]
fn suffix_is_refused_without_fim_tokens() {
    let mut e = EngineProc::spawn();
    let loaded = load_llama(&mut e, 4);
    assert!(!loaded.fim, "SmolLM2 has no fill-in-the-middle tokens");
    let msg = refused(&mut e, "fim", Generate { suffix: "return x".into(), ..raw("def f(x):", 4) });
    assert!(msg.contains("fill-in-the-middle"), "{msg}");
}

/// Embeddings from token ids (OpenAI's token-array input) equal the text's:
/// the ids are framed as the tokenizer frames text ([CLS] … [SEP]).
#[test]
fn embeddings_of_token_ids_equal_those_of_their_text() {
    use switchyard_engine::bert::{BertEmbedder, EmbedInput, EmbedJob, CHUNK_TOKENS};
    let bert = BertEmbedder::load(&common::minilm_dir(), &candle_core::Device::Cpu).unwrap();
    let texts = ["a cat sat on the mat", "quarterly revenue grew by four percent"];
    let ids: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| {
            let all = bert.encode(t).unwrap().get_ids().to_vec();
            // Without the [CLS] and [SEP] the tokenizer added.
            all[1..all.len() - 1].to_vec()
        })
        .collect();
    let run = |inputs: Vec<EmbedInput>| {
        let mut job = EmbedJob::of(String::new(), inputs);
        while !job.step(&bert, CHUNK_TOKENS).unwrap() {}
        (job.vectors, job.tokens)
    };
    let (from_text, text_tokens) = run(texts.iter().map(|t| EmbedInput::Text(t.to_string())).collect());
    let (from_ids, id_tokens) = run(ids.iter().cloned().map(EmbedInput::Ids).collect());
    assert_eq!(text_tokens, id_tokens);
    for (a, b) in from_text.iter().zip(&from_ids) {
        let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(diff < 1e-5, "vectors differ by {diff}");
    }
    let mut job = EmbedJob::of(String::new(), vec![EmbedInput::Ids(vec![5, bert.vocab as u32])]);
    assert!(job.step(&bert, CHUNK_TOKENS).unwrap_err().to_string().contains("vocabulary"));
}
