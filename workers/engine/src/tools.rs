//! Tool calls: the functions a request offers, how they reach the prompt and
//! the grammar their calls follow. One output format for every model (the
//! Hermes/Qwen one, which many chat templates already use):
//!
//!   <tool_call>
//!   {"name": "get_weather", "arguments": {"city": "Paris"}}
//!   </tool_call>
//!
//! with parallel calls separated by a newline. A chat template that uses
//! `tools` renders them itself; for one that does not (SmolLM2's), the tools
//! go into the system message in this format, assistant calls are written
//! back as `<tool_call>` blocks and tool results as a user turn of
//! `<tool_response>` blocks.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::grammar::with_options;
use crate::tokenizer::ChatMessage;

pub const CALL_OPEN: &str = "<tool_call>\n";
pub const CALL_CLOSE: &str = "\n</tool_call>";

/// A function the model may call.
#[derive(Clone, Debug)]
pub struct Function {
    pub name: String,
    pub description: String,
    /// Its parameters' JSON Schema (an empty object schema when it takes none).
    pub parameters: Value,
    pub strict: bool,
}

impl Function {
    pub fn new(name: String, description: String, parameters: &str, strict: bool) -> Result<Self> {
        if name.is_empty() {
            bail!("a tool has an empty name");
        }
        let parameters = if parameters.trim().is_empty() {
            json!({"type": "object", "properties": {}, "additionalProperties": false})
        } else {
            serde_json::from_str(parameters).with_context(|| format!("tool {name:?}: parameters are not JSON"))?
        };
        if !parameters.is_object() {
            bail!("tool {name:?}: parameters must be a JSON Schema object");
        }
        Ok(Function { name, description, parameters, strict })
    }

    /// OpenAI's tool object, as chat templates expect it.
    pub fn openai(&self) -> Value {
        json!({"type": "function", "function": {"name": self.name, "description": self.description, "parameters": self.parameters}})
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Free text (or the answer grammar) or tool calls, the model's choice.
    Auto,
    /// At least one call to any of the functions.
    Required,
    /// A call to this function.
    Function(String),
}

#[derive(Clone, Debug)]
pub struct ToolChoice {
    pub functions: Vec<Function>,
    pub mode: Mode,
    pub parallel: bool,
}

/// A JSON string literal for Lark (JSON's escapes are Lark's).
fn lark_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// The call object of one function: `{"name": NAME, "arguments": {...}}`.
fn call_schema(f: &Function) -> Result<Value> {
    let mut params = f.parameters.clone();
    // Only the top level of a %json block reads llguidance's options.
    if let Some(m) = params.as_object_mut() {
        m.remove("x-guidance");
    }
    with_options(
        json!({
            "type": "object",
            "properties": {"name": {"const": f.name}, "arguments": params},
            "required": ["name", "arguments"],
            "additionalProperties": false,
        }),
        f.strict,
    )
}

/// The Lark grammar of the choice; `answer` is the schema of a non-call
/// answer in auto mode (None: any text without a `<tool_call>` in it).
pub fn lark_grammar(choice: &ToolChoice, answer: Option<&Value>) -> Result<String> {
    let functions: Vec<&Function> = match &choice.mode {
        Mode::Function(name) => {
            vec![choice.functions.iter().find(|f| &f.name == name).with_context(|| format!("tool_choice names {name:?}, which is not among the tools"))?]
        }
        _ => choice.functions.iter().collect(),
    };
    if functions.is_empty() {
        bail!("tool calls need at least one tool");
    }
    let mut g = String::new();
    g.push_str(match (&choice.mode, answer) {
        (Mode::Auto, Some(_)) => "start: answer | calls\n",
        (Mode::Auto, None) => "start: PLAIN | calls\n",
        _ => "start: calls\n",
    });
    g.push_str(if choice.parallel && !matches!(choice.mode, Mode::Function(_)) {
        "calls: call (\"\\n\" call)*\n"
    } else {
        "calls: call\n"
    });
    g.push_str(&format!("call: {} fn {}\n", lark_str(CALL_OPEN), lark_str(CALL_CLOSE)));
    let alts: Vec<String> = (0..functions.len()).map(|i| format!("fn_{i}")).collect();
    g.push_str(&format!("fn: {}\n", alts.join(" | ")));
    for (i, f) in functions.iter().enumerate() {
        g.push_str(&format!("fn_{i}: %json {}\n", serde_json::to_string(&call_schema(f)?)?));
    }
    match answer {
        Some(schema) => g.push_str(&format!("answer: %json {}\n", serde_json::to_string(schema)?)),
        None => g.push_str("PLAIN: /(?s:.*)/ & ~/(?s:.*)<tool_call>(?s:.*)/\n"),
    }
    Ok(g)
}

/// A call as the model writes it.
pub fn call_text(name: &str, arguments: &str) -> String {
    // Arguments that are JSON go in as they are; anything else as a string.
    let args = serde_json::from_str::<Value>(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()));
    format!("{CALL_OPEN}{{\"name\": {}, \"arguments\": {}}}{CALL_CLOSE}", lark_str(name), compact(&args))
}

/// JSON with the separators the grammar uses.
fn compact(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{}: {}", lark_str(k), compact(v))).collect();
            format!("{{{}}}", parts.join(", "))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(compact).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

/// The system message's tool section in the documented format.
pub fn system_section(functions: &[Function]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for f in functions {
        s.push('\n');
        s.push_str(&compact(&f.openai()));
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments \
         within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// Messages rewritten for a template without a tool section: the tools in
/// the system message (a new one first when there is none), assistant calls
/// as `<tool_call>` blocks after their text, and each run of tool results as
/// one user turn of `<tool_response>` blocks.
pub fn rewrite_for_plain_template(messages: &[ChatMessage], functions: &[Function]) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    if !functions.is_empty() {
        let section = system_section(functions);
        match messages.first() {
            Some(m) if m.role == "system" => out.push(ChatMessage::text("system", format!("{}\n\n{section}", m.content))),
            _ => out.push(ChatMessage::text("system", format!("You are a helpful assistant.\n\n{section}"))),
        }
    }
    let skip_first = !functions.is_empty() && messages.first().is_some_and(|m| m.role == "system");
    for m in messages.iter().skip(skip_first as usize) {
        match m.role.as_str() {
            "assistant" if !m.tool_calls.is_empty() => {
                let calls: Vec<String> = m.tool_calls.iter().map(|c| call_text(&c.name, &c.arguments)).collect();
                let content = if m.content.is_empty() { calls.join("\n") } else { format!("{}\n{}", m.content, calls.join("\n")) };
                out.push(ChatMessage::text("assistant", content));
            }
            "tool" => {
                let block = format!("<tool_response>\n{}\n</tool_response>", m.content);
                match out.last_mut() {
                    Some(prev) if prev.role == "user" && prev.content.starts_with("<tool_response>") => {
                        prev.content.push('\n');
                        prev.content.push_str(&block);
                    }
                    _ => out.push(ChatMessage::text("user", block)),
                }
            }
            _ => out.push(ChatMessage::text(&m.role, m.content.clone())),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::ToolCallMsg;

    fn weather() -> Function {
        Function::new(
            "get_weather".into(),
            "Weather in a city".into(),
            r#"{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}"#,
            true,
        )
        .unwrap()
    }

    #[test]
    fn call_text_is_the_grammar_format() {
        assert_eq!(
            call_text("get_weather", r#"{"city":"Paris","days":[1,2]}"#),
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>"
        );
    }

    #[test]
    fn grammar_names_only_the_chosen_function() {
        let mut other = weather();
        other.name = "other".into();
        let choice = ToolChoice { functions: vec![weather(), other], mode: Mode::Function("other".into()), parallel: true };
        let g = lark_grammar(&choice, None).unwrap();
        assert!(g.contains("\"const\":\"other\"") && !g.contains("get_weather"), "{g}");
        assert!(g.contains("calls: call\n"));
        let missing = ToolChoice { mode: Mode::Function("nope".into()), ..choice };
        assert!(lark_grammar(&missing, None).is_err());
    }

    #[test]
    fn plain_template_rewrite() {
        let msgs = vec![
            ChatMessage::text("user", "Weather in Paris?".into()),
            ChatMessage {
                role: "assistant".into(),
                content: String::new(),
                tool_calls: vec![ToolCallMsg { id: "call_1".into(), name: "get_weather".into(), arguments: r#"{"city":"Paris"}"#.into() }],
                tool_call_id: None,
            },
            ChatMessage { role: "tool".into(), content: "18C".into(), tool_calls: vec![], tool_call_id: Some("call_1".into()) },
            ChatMessage { role: "tool".into(), content: "sunny".into(), tool_calls: vec![], tool_call_id: Some("call_2".into()) },
        ];
        let out = rewrite_for_plain_template(&msgs, &[weather()]);
        assert_eq!(out[0].role, "system");
        assert!(out[0].content.contains("<tools>\n{\"type\": \"function\""));
        assert_eq!(out[2].content, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>");
        assert_eq!(out[3].role, "user");
        assert_eq!(out[3].content, "<tool_response>\n18C\n</tool_response>\n<tool_response>\nsunny\n</tool_response>");
        assert_eq!(out.len(), 4);
    }
}
