//! End-to-end tests of the engine binary over its stdio protocol: the agent's
//! view. Every bad request must come back as an Error event for its id while
//! the engine keeps serving.

mod common;

use common::{collect_generation, EngineProc};
use switchyard_engine::protocol::*;

fn load_llama(e: &mut EngineProc, name: &str, max_batch: u32, max_seq_len: u32) -> Loaded {
    e.send(
        "load-llama",
        request::Kind::LoadModel(LoadModel {
            model: name.into(),
            kind: ModelKind::LlamaGguf as i32,
            path: common::smollm_path().to_string_lossy().into_owned(),
            max_seq_len,
            max_batch,
            ..Default::default()
        }),
    );
    match e.until_end("load-llama").pop().unwrap().kind {
        Some(event::Kind::Loaded(l)) => l,
        other => panic!("expected Loaded, got {other:?}"),
    }
}

fn chat(model: &str, content: &str, max_tokens: u32) -> request::Kind {
    request::Kind::Generate(Generate {
        model: model.into(),
        input: Some(generate::Input::Messages(ChatMessages {
            messages: vec![ChatMessage { role: "user".into(), content: content.into(), ..Default::default() }],
            continue_final_message: false,
            ..Default::default()
        })),
        max_tokens,
        ..Default::default()
    })
}

fn prompt(model: &str, text: &str, max_tokens: u32) -> request::Kind {
    request::Kind::Generate(Generate {
        model: model.into(),
        input: Some(generate::Input::Prompt(text.into())),
        max_tokens,
        ..Default::default()
    })
}

fn expect_error(e: &mut EngineProc, id: &str, code: ErrorCode) -> String {
    let evs = e.until_end(id);
    match &evs.last().unwrap().kind {
        Some(event::Kind::Error(err)) => {
            assert_eq!(err.code, code as i32, "{id}: {err:?}");
            err.message.clone()
        }
        other => panic!("{id}: expected an error {code:?}, got {other:?}"),
    }
}

fn stats(e: &mut EngineProc, id: &str) -> Stats {
    e.send(id, request::Kind::Stats(StatsRequest {}));
    match e.until_end(id).pop().unwrap().kind {
        Some(event::Kind::Stats(s)) => s,
        other => panic!("expected Stats, got {other:?}"),
    }
}

#[test]
fn ready_load_generate_stats_tokenize_shutdown() {
    let mut e = EngineProc::spawn();
    match &e.ready.kind {
        Some(event::Kind::Ready(r)) => {
            assert_eq!(r.device, "cpu");
            assert!(!r.version.is_empty());
        }
        _ => unreachable!(),
    }
    let l = load_llama(&mut e, "smol", 4, 1024);
    assert_eq!((l.n_layers, l.hidden_size, l.vocab_size), (30, 576, 49152));
    assert_eq!((l.max_batch, l.max_seq_len), (4, 1024));
    assert!(l.weight_bytes > 50_000_000);

    e.send("g1", chat("smol", "What is 12 + 7?", 8));
    let (ids, text, done) = collect_generation(&e.until_end("g1"));
    // llama.cpp's greedy start for this prompt (greedy_reference.json).
    assert_eq!(&ids[..4], &[33, 34, 1232, 216]);
    assert!(text.starts_with("12 + "), "{text:?}");
    assert_eq!(done.finish_reason, FinishReason::Length as i32);
    let usage = done.usage.unwrap();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (39, 8));
    assert!(done.prefill_us > 0 && done.decode_us > 0);

    let s = stats(&mut e, "st");
    assert_eq!(s.models, vec!["smol".to_string()]);
    assert_eq!((s.active_sequences, s.queued_requests, s.max_batch), (0, 0, 4));
    assert_eq!(s.tokens_generated, 8);
    assert_eq!(s.kv_cache_bytes, 0, "finished sequences free their KV cache");
    assert!(s.rss_bytes > 0);

    e.send(
        "tok",
        request::Kind::Tokenize(Tokenize { model: "smol".into(), input: Some(tokenize::Input::Prompt("Call +1 (555)".into())) }),
    );
    match e.until_end("tok").pop().unwrap().kind {
        Some(event::Kind::TokenIds(t)) => assert_eq!(t.ids, vec![12800, 1232, 33, 365, 37, 37, 37, 25]),
        other => panic!("{other:?}"),
    }

    e.send("bye", request::Kind::Shutdown(Shutdown {}));
    assert!(e.wait_exit().success());
}

#[test]
fn bad_requests_get_errors_and_the_engine_survives() {
    let mut e = EngineProc::spawn();
    e.send("u1", prompt("nope", "hi", 4));
    expect_error(&mut e, "u1", ErrorCode::ModelNotLoaded);

    e.send(
        "lf",
        request::Kind::LoadModel(LoadModel {
            model: "x".into(),
            kind: ModelKind::LlamaGguf as i32,
            path: "/does/not/exist.gguf".into(),
            ..Default::default()
        }),
    );
    expect_error(&mut e, "lf", ErrorCode::LoadFailed);
    // A file that exists but is not a GGUF.
    e.send(
        "lf2",
        request::Kind::LoadModel(LoadModel {
            model: "x".into(),
            kind: ModelKind::LlamaGguf as i32,
            path: common::minilm_dir().join("config.json").to_string_lossy().into_owned(),
            ..Default::default()
        }),
    );
    expect_error(&mut e, "lf2", ErrorCode::LoadFailed);

    load_llama(&mut e, "smol", 2, 64);
    e.send("empty", prompt("smol", "", 4));
    expect_error(&mut e, "empty", ErrorCode::InvalidRequest);
    e.send("zero", prompt("smol", "hello", 0));
    expect_error(&mut e, "zero", ErrorCode::InvalidRequest);
    e.send("nomsg", request::Kind::Generate(Generate { model: "smol".into(), max_tokens: 4, ..Default::default() }));
    expect_error(&mut e, "nomsg", ErrorCode::InvalidRequest);
    e.send("long", prompt("smol", &"word ".repeat(200), 4));
    expect_error(&mut e, "long", ErrorCode::ContextLength);
    e.send(
        "temp",
        request::Kind::Generate(Generate {
            model: "smol".into(),
            input: Some(generate::Input::Prompt("hi".into())),
            max_tokens: 2,
            temperature: -1.0,
            ..Default::default()
        }),
    );
    expect_error(&mut e, "temp", ErrorCode::InvalidRequest);
    e.send("emb", request::Kind::Embed(Embed { model: "smol".into(), inputs: vec!["x".into()], ..Default::default() }));
    expect_error(&mut e, "emb", ErrorCode::InvalidRequest);
    e.send(
        "hs",
        request::Kind::HiddenStates(HiddenStates {
            model: "smol".into(),
            input: Some(hidden_states::Input::Prompt("hi".into())),
            layers: vec![31],
            ..Default::default()
        }),
    );
    expect_error(&mut e, "hs", ErrorCode::InvalidRequest);
    e.send(
        "fw",
        request::Kind::Forward(Forward {
            model: "smol".into(),
            layer_start: 3,
            layer_end: 2,
            token_ids: vec![1, 2],
            ..Default::default()
        }),
    );
    expect_error(&mut e, "fw", ErrorCode::InvalidRequest);
    e.send(
        "fw2",
        request::Kind::Forward(Forward {
            model: "smol".into(),
            layer_start: 0,
            layer_end: 2,
            activations: Some(Tensor { dtype: DType::DtypeF32 as i32, shape: vec![2, 576], data: vec![0; 12] }),
            ..Default::default()
        }),
    );
    expect_error(&mut e, "fw2", ErrorCode::InvalidRequest);
    e.send(
        "fw3",
        request::Kind::Forward(Forward { model: "smol".into(), layer_start: 0, layer_end: 1, token_ids: vec![999_999], ..Default::default() }),
    );
    expect_error(&mut e, "fw3", ErrorCode::InvalidRequest);
    // A frame that is not a Request at all, and a request with no kind.
    e.send_raw(&[3, 0xff, 0xff, 0xff]);
    expect_error(&mut e, "", ErrorCode::InvalidRequest);
    e.send_raw(&prost::Message::encode_length_delimited_to_vec(&Request { request_id: "nokind".into(), kind: None }));
    expect_error(&mut e, "nokind", ErrorCode::InvalidRequest);

    // Still serving.
    e.send("ok", prompt("smol", "The sky is", 3));
    let (ids, _, done) = collect_generation(&e.until_end("ok"));
    assert_eq!(ids.len(), 3);
    assert_eq!(done.finish_reason, FinishReason::Length as i32);
    // A generation that reaches max_seq_len ends with LENGTH, not an error.
    e.send("cap", prompt("smol", &"word ".repeat(50), 100));
    let (ids, _, done) = collect_generation(&e.until_end("cap"));
    assert_eq!(done.finish_reason, FinishReason::Length as i32);
    assert!(done.usage.unwrap().prompt_tokens as usize + ids.len() <= 64);

    // EOF on stdin: clean exit.
    e.close_stdin();
    assert!(e.wait_exit().success());
}

#[test]
fn cancel_frees_the_slot_for_queued_work() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, "smol", 1, 2048);
    e.send("long", prompt("smol", "Write a very long essay about the history of Rome.", 1500));
    e.send("next", prompt("smol", "The sky is", 4));
    // Wait until the long one streams, then check the second one is queued.
    match e.next_for("long").kind {
        Some(event::Kind::Tokens(_)) => {}
        other => panic!("{other:?}"),
    }
    let s = stats(&mut e, "st1");
    assert_eq!((s.active_sequences, s.queued_requests), (1, 1));
    assert!(s.kv_cache_bytes > 0);
    e.send("c", request::Kind::Cancel(Cancel { target_request_id: "long".into() }));
    let evs = e.until_end("long");
    match &evs.last().unwrap().kind {
        Some(event::Kind::Done(d)) => assert_eq!(d.finish_reason, FinishReason::Cancelled as i32),
        other => panic!("{other:?}"),
    }
    let (ids, _, done) = collect_generation(&e.until_end("next"));
    assert_eq!(ids.len(), 4);
    assert_eq!(done.finish_reason, FinishReason::Length as i32);
    let s = stats(&mut e, "st2");
    assert_eq!((s.active_sequences, s.queued_requests, s.kv_cache_bytes), (0, 0, 0));
    // Cancelling something unknown or finished is harmless.
    e.send("c2", request::Kind::Cancel(Cancel { target_request_id: "long".into() }));
    e.send("bye", request::Kind::Shutdown(Shutdown {}));
    assert!(e.wait_exit().success());
}

#[test]
fn concurrent_greedy_generations_match_solo_runs() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, "smol", 4, 1024);
    let reqs = [
        ("a", chat("smol", "What is the capital of France?", 12)),
        ("b", chat("smol", "List three primary colors.", 12)),
        ("c", prompt("smol", "The three laws of thermodynamics are", 12)),
    ];
    let mut solo = Vec::new();
    for (id, r) in &reqs {
        let sid = format!("solo-{id}");
        e.send(&sid, r.clone());
        solo.push(collect_generation(&e.until_end(&sid)).0);
    }
    for (id, r) in &reqs {
        e.send(id, r.clone());
    }
    for ((id, _), want) in reqs.iter().zip(&solo) {
        let (ids, _, _) = collect_generation(&e.until_end(id));
        assert_eq!(&ids, want, "{id} differs when batched");
    }
    // The raw prompt continues like llama.cpp (greedy_reference.json).
    assert_eq!(&solo[2][..7], &[4959, 3618, 338, 1330, 260, 2555, 282]);
}

#[test]
fn stop_sequences_end_generation_without_leaking() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, "smol", 2, 512);
    // Greedy output is "12 + 7 = 9\n\n..." (see greedy_reference.json).
    let mut g = match chat("smol", "What is 12 + 7?", 16) {
        request::Kind::Generate(g) => g,
        _ => unreachable!(),
    };
    g.stop = vec!["never said".into(), " = 9".into()];
    e.send("s", request::Kind::Generate(g.clone()));
    let (_, text, done) = collect_generation(&e.until_end("s"));
    assert_eq!(text, "12 + 7");
    assert_eq!(done.finish_reason, FinishReason::Stop as i32);
    // Done says which stop sequence ended it (FINISH_REASON_STOP is EOS too).
    assert_eq!(done.choices.len(), 1);
    assert_eq!(done.choices[0].stop_sequence, " = 9");
    // Per choice: every choice of n names its own match.
    e.send("s2", request::Kind::Generate(Generate { n: 2, ..g.clone() }));
    let (_, _, done) = collect_generation(&e.until_end("s2"));
    let named: Vec<(u32, i32, &str)> = done.choices.iter().map(|c| (c.index, c.finish_reason, c.stop_sequence.as_str())).collect();
    assert_eq!(named, [(0, FinishReason::Stop as i32, " = 9"), (1, FinishReason::Stop as i32, " = 9")]);
    // Cut by max_tokens before the stop sequence: nothing named.
    e.send("s3", request::Kind::Generate(Generate { max_tokens: 2, ..g }));
    let (_, _, done) = collect_generation(&e.until_end("s3"));
    assert_eq!((done.finish_reason, done.choices[0].stop_sequence.as_str()), (FinishReason::Length as i32, ""));
    // Ended by EOS, with a stop sequence it never says: stop, nothing named.
    let mut hi = match chat("smol", "Say hi.", 64) {
        request::Kind::Generate(g) => g,
        _ => unreachable!(),
    };
    hi.stop = vec!["never said".into()];
    e.send("eos", request::Kind::Generate(hi));
    let (_, _, done) = collect_generation(&e.until_end("eos"));
    assert!(done.usage.unwrap().completion_tokens < 64, "{done:?}");
    assert_eq!((done.finish_reason, done.choices[0].stop_sequence.as_str()), (FinishReason::Stop as i32, ""));
}

#[test]
fn embeddings_hidden_states_and_forward() {
    let mut e = EngineProc::spawn();
    e.send(
        "lb",
        request::Kind::LoadModel(LoadModel {
            model: "minilm".into(),
            kind: ModelKind::Bert as i32,
            path: common::minilm_dir().to_string_lossy().into_owned(),
            ..Default::default()
        }),
    );
    match e.until_end("lb").pop().unwrap().kind {
        Some(event::Kind::Loaded(l)) => assert_eq!(l.embedding_dim, 384),
        other => panic!("{other:?}"),
    }
    e.send(
        "emb",
        request::Kind::Embed(Embed {
            model: "minilm".into(),
            inputs: vec!["The cat sits on the mat.".into(), "A cat is sitting on a rug.".into(), "How do I reset my password?".into()],
            ..Default::default()
        }),
    );
    let v = match e.until_end("emb").pop().unwrap().kind {
        Some(event::Kind::Embeddings(em)) => em.vectors.iter().map(|t| t.to_f32().unwrap()).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    let cos = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    assert_eq!(v[0].len(), 384);
    assert!(cos(&v[0], &v[1]) > cos(&v[0], &v[2]) + 0.3);
    e.send("emb0", request::Kind::Embed(Embed { model: "minilm".into(), inputs: vec![], ..Default::default() }));
    expect_error(&mut e, "emb0", ErrorCode::InvalidRequest);

    load_llama(&mut e, "smol", 2, 512);
    e.send(
        "hs",
        request::Kind::HiddenStates(HiddenStates {
            model: "smol".into(),
            input: Some(hidden_states::Input::Prompt("The capital of France is".into())),
            layers: vec![0, 30],
            pooling: Pooling::None as i32,
            dtype: DType::DtypeF32 as i32,
            ..Default::default()
        }),
    );
    let hs = match e.until_end("hs").pop().unwrap().kind {
        Some(event::Kind::HiddenStates(h)) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(hs.layers, vec![0, 30]);
    let n = hs.n_tokens as u64;
    assert_eq!(hs.tensors[1].shape, vec![n, 576]);
    // Last layer -> final norm + head through Forward gives the next token.
    e.send(
        "fw",
        request::Kind::Forward(Forward {
            model: "smol".into(),
            layer_start: 30,
            layer_end: 30,
            activations: Some(hs.tensors[1].clone()),
            logits: true,
            ..Default::default()
        }),
    );
    let out = match e.until_end("fw").pop().unwrap().kind {
        Some(event::Kind::Forward(f)) => f.output.unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(out.shape, vec![n, 49152]);
    let logits = out.to_f32().unwrap();
    let last = &logits[(n as usize - 1) * 49152..];
    let best = switchyard_engine::sampling::argmax(last);
    e.send("g", prompt("smol", "The capital of France is", 1));
    let (ids, _, _) = collect_generation(&e.until_end("g"));
    assert_eq!(ids, vec![best]);

    // Pooled f16 output.
    e.send(
        "hs16",
        request::Kind::HiddenStates(HiddenStates {
            model: "smol".into(),
            input: Some(hidden_states::Input::Prompt("hello".into())),
            layers: vec![],
            pooling: Pooling::Mean as i32,
            dtype: DType::DtypeF16 as i32,
            ..Default::default()
        }),
    );
    match e.until_end("hs16").pop().unwrap().kind {
        Some(event::Kind::HiddenStates(h)) => {
            assert_eq!(h.layers.len(), 31);
            assert_eq!(h.tensors[5].shape, vec![576]);
            assert_eq!(h.tensors[5].data.len(), 576 * 2);
        }
        other => panic!("{other:?}"),
    }
    e.close_stdin();
    assert!(e.wait_exit().success());
}

/// The candle executor serves the same protocol (here on the CPU device, the
/// code a GPU build runs), and a forward that fails on it ends the engine
/// with exit code 3 after every affected request got its error event: the
/// agent's cue to restart on the CPU kernels instead of serving from a
/// broken device.
#[test]
fn candle_backend_serves_and_a_device_failure_exits_3() {
    let mut e = EngineProc::spawn_with(
        &["--device", "cpu", "--llama-backend", "candle"],
        // The first generation (1 prefill + 7 decode steps) succeeds; the
        // next step fails the way a lost device does.
        &[("SWITCHYARD_FAULT_DEVICE_STEPS", "8")],
    );
    load_llama(&mut e, "smol", 4, 1024);
    e.send("g1", chat("smol", "What is 12 + 7?", 8));
    let (ids, text, done) = collect_generation(&e.until_end("g1"));
    assert_eq!(&ids[..4], &[33, 34, 1232, 216], "llama.cpp's greedy start for this prompt");
    assert!(text.starts_with("12 + "), "{text:?}");
    assert_eq!(done.finish_reason, FinishReason::Length as i32);

    e.send("g2", chat("smol", "Name a colour.", 8));
    let err = expect_error(&mut e, "g2", ErrorCode::Internal);
    assert!(err.contains("injected device fault"), "{err}");
    let status = e.wait_exit();
    assert_eq!(status.code(), Some(3), "a device failure must exit 3, got {status:?}");
}

/// Logprobs: one entry per sampled token, the chosen token's bytes and
/// log-probability, the most likely alternatives in order; with greedy
/// decoding the chosen token is the most likely one. Bad asks are refused.
#[test]
fn generation_reports_logprobs_when_asked() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, "smol", 4, 1024);
    let ask = |top_logprobs: u32, logprobs: bool| {
        let request::Kind::Generate(mut g) = chat("smol", "What is 12 + 7?", 8) else { unreachable!() };
        g.logprobs = logprobs;
        g.top_logprobs = top_logprobs;
        request::Kind::Generate(g)
    };
    e.send("lp", ask(3, true));
    let events = e.until_end("lp");
    let (ids, text, _) = collect_generation(&events);
    let entries: Vec<&TokenLogprobs> = events
        .iter()
        .filter_map(|ev| match &ev.kind {
            Some(event::Kind::Tokens(t)) => {
                assert_eq!(t.logprobs.len(), t.ids.len(), "one logprobs entry per id");
                Some(t.logprobs.iter())
            }
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(entries.len(), ids.len());
    let mut bytes = Vec::new();
    for (lp, &id) in entries.iter().zip(&ids) {
        let chosen = lp.chosen.as_ref().unwrap();
        assert_eq!(chosen.id, id);
        bytes.extend_from_slice(&chosen.token);
        assert!(chosen.logprob <= 0.0 && chosen.logprob.is_finite());
        assert_eq!(lp.top.len(), 3);
        assert!(lp.top.windows(2).all(|w| w[0].logprob >= w[1].logprob), "most likely first");
        // Greedy: the chosen token is the most likely one.
        assert_eq!(lp.top[0].id, id);
        assert_eq!(lp.top[0].logprob, chosen.logprob);
        let mass: f32 = lp.top.iter().map(|t| t.logprob.exp()).sum();
        assert!(mass <= 1.0 + 1e-4, "top-3 probabilities sum to {mass}");
    }
    assert_eq!(String::from_utf8(bytes).unwrap(), text, "the chosen tokens' bytes spell the text");

    // Without logprobs, none are sent.
    e.send("plain", chat("smol", "What is 12 + 7?", 4));
    assert!(e.until_end("plain").iter().all(|ev| !matches!(&ev.kind, Some(event::Kind::Tokens(t)) if !t.logprobs.is_empty())));
    e.send("too-many", ask(21, true));
    assert!(expect_error(&mut e, "too-many", ErrorCode::InvalidRequest).contains("at most 20"));
    e.send("no-flag", ask(2, false));
    assert!(expect_error(&mut e, "no-flag", ErrorCode::InvalidRequest).contains("needs logprobs"));
}

fn load_minilm(e: &mut EngineProc, name: &str) {
    e.send(
        "load-bert",
        request::Kind::LoadModel(LoadModel {
            model: name.into(),
            kind: ModelKind::Bert as i32,
            path: common::minilm_dir().to_string_lossy().into_owned(),
            ..Default::default()
        }),
    );
    match e.until_end("load-bert").pop().unwrap().kind {
        Some(event::Kind::Loaded(l)) => assert_eq!(l.embedding_dim, 384),
        other => panic!("expected Loaded, got {other:?}"),
    }
}

fn embed(model: &str, inputs: Vec<String>) -> request::Kind {
    request::Kind::Embed(Embed { model: model.into(), inputs, ..Default::default() })
}

/// Issue 10 item 7: one large embeddings request used to run whole inside
/// the engine loop, so a chat sent right after it waited for all of it.
/// Now the request runs a chunk per turn between decode steps: the chat
/// finishes first, and the vectors are the same as the request run alone.
#[test]
fn a_large_embeddings_request_does_not_stall_generation() {
    let mut e = EngineProc::spawn();
    load_llama(&mut e, "smol", 4, 512);
    load_minilm(&mut e, "minilm");
    let texts = common::embedding_inputs(64);
    let t0 = std::time::Instant::now();
    e.send("emb", embed("minilm", texts.clone()));
    e.send("chat", chat("smol", "Say hi.", 2));
    let (ids, _, done) = collect_generation(&e.until_end("chat"));
    let t_chat = t0.elapsed();
    assert_eq!(ids.len() as u32, done.usage.unwrap().completion_tokens);
    assert!(!e.has_arrived("emb"), "the embeddings request finished before a 2-token chat sent after it");
    let vectors = match e.until_end("emb").pop().unwrap().kind {
        Some(event::Kind::Embeddings(em)) => em.vectors.iter().map(|t| t.to_f32().unwrap()).collect::<Vec<_>>(),
        other => panic!("expected Embeddings, got {other:?}"),
    };
    let t_emb = t0.elapsed();
    eprintln!("64 embeddings in {t_emb:?}; the 2-token chat sent with them finished in {t_chat:?}");
    assert!(t_chat * 4 < t_emb, "chat {t_chat:?} is not a small fraction of the embeddings' {t_emb:?}");
    // Interleaving does not change the vectors: the same request alone.
    e.send("emb-alone", embed("minilm", texts));
    let alone = match e.until_end("emb-alone").pop().unwrap().kind {
        Some(event::Kind::Embeddings(em)) => em.vectors.iter().map(|t| t.to_f32().unwrap()).collect::<Vec<_>>(),
        other => panic!("expected Embeddings, got {other:?}"),
    };
    assert_eq!(vectors.len(), 64);
    assert_eq!(vectors, alone);
}

/// Embeddings requests take turns chunk by chunk: a one-input request sent
/// after a 64-input one is answered first; a queued one can be cancelled;
/// oversized requests are refused before any work.
#[test]
fn embeddings_requests_take_turns_and_are_bounded() {
    let mut e = EngineProc::spawn();
    load_minilm(&mut e, "minilm");
    e.send("big", embed("minilm", common::embedding_inputs(64)));
    e.send("small", embed("minilm", vec!["How do I reset my password?".into()]));
    e.send("doomed", embed("minilm", common::embedding_inputs(32)));
    e.send("c", request::Kind::Cancel(Cancel { target_request_id: "doomed".into() }));
    match e.until_end("small").pop().unwrap().kind {
        Some(event::Kind::Embeddings(em)) => assert_eq!(em.vectors.len(), 1),
        other => panic!("expected Embeddings, got {other:?}"),
    }
    assert!(!e.has_arrived("big"), "a one-input request waited for a 64-input one");
    match e.until_end("doomed").pop().unwrap().kind {
        Some(event::Kind::Done(d)) => assert_eq!(d.finish_reason, FinishReason::Cancelled as i32),
        other => panic!("expected Done cancelled, got {other:?}"),
    }
    match e.until_end("big").pop().unwrap().kind {
        Some(event::Kind::Embeddings(em)) => assert_eq!(em.vectors.len(), 64),
        other => panic!("expected Embeddings, got {other:?}"),
    }
    let too_many = vec!["x".to_string(); switchyard_engine::engine::MAX_EMBED_INPUTS + 1];
    e.send("too-many", embed("minilm", too_many));
    let msg = expect_error(&mut e, "too-many", ErrorCode::InvalidRequest);
    assert!(msg.contains("at most 2048"), "{msg}");
    let too_long = vec!["y".repeat(switchyard_engine::engine::MAX_EMBED_BYTES / 2 + 1); 2];
    e.send("too-long", embed("minilm", too_long));
    expect_error(&mut e, "too-long", ErrorCode::InvalidRequest);
    e.close_stdin();
    assert!(e.wait_exit().success());
}
