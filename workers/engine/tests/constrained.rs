//! Constrained decoding over the stdio protocol with the real SmolLM2: JSON
//! Schemas, any JSON, and tool calls, several sequences with different
//! grammars in one batch next to a free one, with logprobs and the prefix
//! cache.

mod common;

use common::{collect_generation, EngineProc};
use serde_json::{json, Value};
use switchyard_engine::protocol::*;

fn load(e: &mut EngineProc) {
    e.send(
        "load",
        request::Kind::LoadModel(LoadModel {
            model: "smol".into(),
            kind: ModelKind::LlamaGguf as i32,
            path: common::smollm_path().to_string_lossy().into_owned(),
            max_seq_len: 2048,
            max_batch: 8,
            ..Default::default()
        }),
    );
    assert!(matches!(e.until_end("load").pop().unwrap().kind, Some(event::Kind::Loaded(_))));
}

fn user(content: &str) -> ChatMessage {
    ChatMessage { role: "user".into(), content: content.into(), ..Default::default() }
}

fn gen(messages: Vec<ChatMessage>, tools: Vec<Tool>, constraint: Option<Constraint>, max_tokens: u32) -> Generate {
    Generate {
        model: "smol".into(),
        input: Some(generate::Input::Messages(ChatMessages { messages, tools, ..Default::default() })),
        max_tokens,
        constraint,
        ..Default::default()
    }
}

fn schema(s: Value) -> Option<Constraint> {
    Some(Constraint { answer: Some(constraint::Answer::JsonSchema(s.to_string())), strict: true, ..Default::default() })
}

fn weather_tool() -> Tool {
    Tool {
        name: "get_weather".into(),
        description: "Current weather in a city".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"]}).to_string(),
        strict: true,
    }
}

fn time_tool() -> Tool {
    Tool {
        name: "get_time".into(),
        description: "Current time in a timezone".into(),
        parameters: json!({"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}).to_string(),
        strict: true,
    }
}

fn tools_choice(mode: ToolChoiceMode, function: &str, parallel: bool) -> Option<Constraint> {
    Some(Constraint { tool_choice: Some(ToolChoice { mode: mode as i32, function: function.into(), parallel }), ..Default::default() })
}

/// The calls in a tool-call output, each `(name, arguments)`.
fn parse_calls(text: &str) -> Vec<(String, Value)> {
    text.split("\n<tool_call>")
        .map(|block| {
            let body = block.trim_start_matches("<tool_call>\n").strip_suffix("\n</tool_call>").unwrap_or_else(|| panic!("not a tool-call block: {block:?} in {text:?}"));
            let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("call is not JSON ({e}): {body:?}"));
            (v["name"].as_str().unwrap().to_string(), v["arguments"].clone())
        })
        .collect()
}

#[test]
fn grammars_in_one_batch_each_hold_and_tool_calls_follow_the_format() {
    let mut e = EngineProc::spawn();
    load(&mut e);
    let person = json!({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 120}, "email": {"type": "string", "format": "email"}},
        "required": ["name", "age", "email"],
        "additionalProperties": false
    });
    let colors = json!({"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 2, "maxItems": 3});
    let nested = json!({
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}, "location": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}, "required": ["lat", "lon"], "additionalProperties": false}},
        "required": ["city", "location"],
        "additionalProperties": false
    });
    let any_json = Some(Constraint { answer: Some(constraint::Answer::JsonObject(true)), ..Default::default() });
    let mut with_logprobs = gen(vec![user("Describe a person called Ada as JSON with name, age and email.")], vec![], schema(person.clone()), 80);
    with_logprobs.logprobs = true;
    with_logprobs.top_logprobs = 2;
    let requests = vec![
        ("person", with_logprobs),
        ("colors", gen(vec![user("List two or three colours as a JSON array.")], vec![], schema(colors.clone()), 40)),
        ("nested", gen(vec![user("Give the city of Paris with its coordinates as JSON.")], vec![], schema(nested.clone()), 80)),
        ("object", gen(vec![user("Reply with a small JSON object with the name and age of a cat.")], vec![], any_json, 200)),
        ("free", gen(vec![user("Say hello.")], vec![], None, 12)),
        ("named", gen(vec![user("What is the weather in Paris?")], vec![weather_tool(), time_tool()], tools_choice(ToolChoiceMode::Function, "get_weather", true), 60)),
        ("required", gen(vec![user("What time is it in Tokyo?")], vec![weather_tool(), time_tool()], tools_choice(ToolChoiceMode::Required, "", false), 60)),
    ];
    for (id, g) in &requests {
        e.send(id, request::Kind::Generate(g.clone()));
    }
    let mut out = std::collections::HashMap::new();
    for (id, _) in &requests {
        let events = e.until_end(id);
        let (_, text, done) = collect_generation(&events);
        out.insert(*id, (text, done, events));
    }

    let (text, done, events) = &out["person"];
    let v: Value = serde_json::from_str(text).unwrap_or_else(|err| panic!("person is not JSON ({err}): {text:?}"));
    assert_eq!(v.as_object().unwrap().keys().collect::<Vec<_>>(), vec!["name", "age", "email"], "{text}");
    assert!(v["age"].as_i64().is_some_and(|a| (0..=120).contains(&a)), "{text}");
    assert!(v["email"].as_str().unwrap().contains('@'), "{text}");
    // The grammar completes the answer: stop, not length.
    assert_eq!(done.finish_reason, FinishReason::Stop as i32, "{text}");
    // Logprobs are there for every token, of the unmasked distribution.
    let lps: Vec<&TokenLogprobs> = events.iter().filter_map(|ev| match &ev.kind { Some(event::Kind::Tokens(t)) => Some(&t.logprobs), _ => None }).flatten().collect();
    assert_eq!(lps.len() as u32, done.usage.unwrap().completion_tokens);
    assert!(lps.iter().all(|l| l.top.len() == 2 && l.chosen.as_ref().unwrap().logprob <= 0.0));

    let (text, _, _) = &out["colors"];
    let v: Value = serde_json::from_str(text).unwrap_or_else(|err| panic!("colors is not JSON ({err}): {text:?}"));
    let items = v.as_array().unwrap();
    assert!((2..=3).contains(&items.len()) && items.iter().all(|c| ["red", "green", "blue"].contains(&c.as_str().unwrap())), "{text}");

    let (text, _, _) = &out["nested"];
    let v: Value = serde_json::from_str(text).unwrap_or_else(|err| panic!("nested is not JSON ({err}): {text:?}"));
    assert!(v["city"].is_string() && v["location"]["lat"].is_number() && v["location"]["lon"].is_number(), "{text}");

    let (text, _, _) = &out["object"];
    assert!(serde_json::from_str::<Value>(text).unwrap_or_else(|err| panic!("object is not JSON ({err}): {text:?}")).is_object());

    // The free sequence in the same batch is not constrained: it is the
    // same text as when it runs alone.
    let (free_text, _, _) = &out["free"];
    e.send("free-alone", request::Kind::Generate(requests[4].1.clone()));
    let (_, alone, _) = collect_generation(&e.until_end("free-alone"));
    assert_eq!(free_text, &alone);

    let (text, done, _) = &out["named"];
    let calls = parse_calls(text);
    assert_eq!(calls.len(), 1, "{text}");
    assert_eq!(calls[0].0, "get_weather");
    assert!(calls[0].1["city"].is_string() && ["celsius", "fahrenheit"].contains(&calls[0].1["unit"].as_str().unwrap()), "{text}");
    assert_eq!(done.finish_reason, FinishReason::Stop as i32);

    let (text, _, _) = &out["required"];
    let calls = parse_calls(text);
    assert_eq!(calls.len(), 1, "parallel off: one call: {text}");
    assert!(["get_weather", "get_time"].contains(&calls[0].0.as_str()), "{text}");
}

#[test]
fn tools_reach_the_prompt_and_tool_results_go_back_into_the_conversation() {
    let mut e = EngineProc::spawn();
    load(&mut e);
    let tokenize = |e: &mut EngineProc, id: &str, chat: ChatMessages| {
        e.send(id, request::Kind::Tokenize(Tokenize { model: "smol".into(), input: Some(tokenize::Input::Messages(chat)) }));
        match e.until_end(id).pop().unwrap().kind {
            Some(event::Kind::TokenIds(t)) => t.ids.len(),
            other => panic!("{other:?}"),
        }
    };
    let plain = tokenize(&mut e, "t0", ChatMessages { messages: vec![user("Weather in Paris?")], ..Default::default() });
    let with_tools = tokenize(&mut e, "t1", ChatMessages { messages: vec![user("Weather in Paris?")], tools: vec![weather_tool()], ..Default::default() });
    assert!(with_tools > plain + 50, "the tool section is in the prompt ({plain} → {with_tools} tokens)");

    // A second turn: the assistant's call and the tool's result, then the
    // model answers in text (auto: it may also call again; either way the
    // output is whole).
    let history = vec![
        user("What is the weather in Paris?"),
        ChatMessage {
            role: "assistant".into(),
            tool_calls: vec![ToolCall { id: "call_1".into(), name: "get_weather".into(), arguments: r#"{"city": "Paris", "unit": "celsius"}"#.into() }],
            ..Default::default()
        },
        ChatMessage { role: "tool".into(), content: "18 degrees and sunny".into(), tool_call_id: "call_1".into(), ..Default::default() },
    ];
    let turn = tokenize(&mut e, "t2", ChatMessages { messages: history.clone(), tools: vec![weather_tool()], ..Default::default() });
    assert!(turn > with_tools);
    e.send("auto", request::Kind::Generate(gen(history, vec![weather_tool()], tools_choice(ToolChoiceMode::Auto, "", true), 40)));
    let (_, text, _) = collect_generation(&e.until_end("auto"));
    if text.starts_with("<tool_call>") {
        parse_calls(&text);
    } else {
        assert!(!text.contains("<tool_call>"), "auto answers in text never hold a broken call: {text:?}");
    }
}

#[test]
fn refusals_and_the_prefix_cache() {
    let mut e = EngineProc::spawn();
    load(&mut e);
    let refused = |e: &mut EngineProc, id: &str, g: Generate| -> String {
        e.send(id, request::Kind::Generate(g));
        match e.until_end(id).pop().unwrap().kind {
            Some(event::Kind::Error(err)) => {
                assert_eq!(err.code, ErrorCode::InvalidRequest as i32, "{err:?}");
                err.message
            }
            other => panic!("expected an error, got {other:?}"),
        }
    };
    let msg = refused(&mut e, "bad-json", gen(vec![user("x")], vec![], Some(Constraint { answer: Some(constraint::Answer::JsonSchema("{not json".into())), ..Default::default() }), 8));
    assert!(msg.contains("not JSON"), "{msg}");
    // A keyword llguidance cannot enforce: refused with strict, ignored without.
    let odd = json!({"type": "string", "format": "credit-card"});
    let msg = refused(&mut e, "strict", gen(vec![user("x")], vec![], schema(odd.clone()), 8));
    assert!(msg.starts_with("response_format: ") && msg.contains("credit-card"), "{msg}");
    // A tool's parameters that do not compile: the message names that tool (the agent's param).
    let mut odd_tool = time_tool();
    odd_tool.parameters = json!({"type": "object", "properties": {"card": odd.clone()}, "required": ["card"]}).to_string();
    odd_tool.strict = true;
    let msg = refused(&mut e, "strict-tool", gen(vec![user("x")], vec![weather_tool(), odd_tool], tools_choice(ToolChoiceMode::Required, "", true), 8));
    assert!(msg.starts_with("tools[1].function.parameters: ") && msg.contains("credit-card") && !msg.contains("<tool_call>"), "{msg}");
    e.send("lenient", request::Kind::Generate(gen(vec![user("Say a word in quotes.")], vec![], Some(Constraint { answer: Some(constraint::Answer::JsonSchema(odd.to_string())), strict: false, ..Default::default() }), 12)));
    let (_, text, _) = collect_generation(&e.until_end("lenient"));
    assert!(text.starts_with('"'), "{text:?}");
    // So is a pattern llguidance cannot compile (look-ahead, which pydantic writes for Decimal).
    let ahead = json!({"type": "object", "properties": {"n": {"type": "string", "pattern": "^(?!^[-+.]*$)[+-]?0*\\d*\\.?\\d*$", "maxLength": 8}}, "required": ["n"]});
    let msg = refused(&mut e, "strict-ahead", gen(vec![user("x")], vec![], schema(ahead.clone()), 8));
    assert!(msg.starts_with("response_format: ") && msg.contains("look-around"), "{msg}");
    e.send("lenient-ahead", request::Kind::Generate(gen(vec![user("A number as JSON.")], vec![], Some(Constraint { answer: Some(constraint::Answer::JsonSchema(ahead.to_string())), strict: false, ..Default::default() }), 20)));
    let (_, text, _) = collect_generation(&e.until_end("lenient-ahead"));
    assert!(serde_json::from_str::<Value>(&text).unwrap()["n"].is_string(), "{text:?}");
    let msg = refused(&mut e, "no-tools", gen(vec![user("x")], vec![], tools_choice(ToolChoiceMode::Required, "", true), 8));
    assert!(msg.contains("no tools"), "{msg}");
    let msg = refused(&mut e, "unknown-fn", gen(vec![user("x")], vec![weather_tool()], tools_choice(ToolChoiceMode::Function, "nope", true), 8));
    assert!(msg.starts_with("tool_choice: ") && msg.contains("nope"), "{msg}");

    // The same constrained prompt twice: the second takes the prompt from the
    // prefix cache and, greedy, writes the same JSON.
    let long = format!("{} Now describe the colour of the sky as JSON.", "The sky is a common subject of questions. ".repeat(8));
    let sky = json!({"type": "object", "properties": {"colour": {"enum": ["blue", "grey", "black"]}, "cloudy": {"type": "boolean"}}, "required": ["colour", "cloudy"]});
    e.send("sky1", request::Kind::Generate(gen(vec![user(&long)], vec![], schema(sky.clone()), 30)));
    let (_, first, _) = collect_generation(&e.until_end("sky1"));
    e.send("sky2", request::Kind::Generate(gen(vec![user(&long)], vec![], schema(sky), 30)));
    let (_, second, done) = collect_generation(&e.until_end("sky2"));
    assert!(done.cached_prompt_tokens > 0);
    assert_eq!(first, second);
    let v: Value = serde_json::from_str(&first).unwrap();
    assert!(v["cloudy"].is_boolean(), "{first}");
}
