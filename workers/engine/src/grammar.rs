//! Constrained decoding with llguidance: a JSON Schema, any JSON object or
//! the tool-call grammar becomes a per-sequence `Matcher` that says, before
//! each sample, which tokens of the model's own vocabulary may come next.
//! The sampler only ever sees logits of allowed tokens, so the output matches
//! the grammar token by token (or stops on max_tokens first).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{SimpleVob, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{JsonCompileOptions, Matcher, ParserFactory};
use serde_json::{json, Value};

use crate::tokenizer::GgufTokenizer;
use crate::tools::{self, ToolChoice};

/// The model's vocabulary as llguidance sees it: each token's bytes, control
/// tokens as `\xff` + their name (llguidance's special-token marker, so a
/// grammar can name `<|im_end|>` but text never matches it), and the
/// end-of-generation set as its EOS tokens.
struct VocabEnv {
    trie: TokTrie,
}

impl TokenizerEnv for VocabEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }

    // Greedy tokenization is not what the model's BPE would produce, so
    // llguidance must not force token sequences from it; masks are exact
    // either way.
    fn tokenize_is_canonical(&self) -> bool {
        false
    }
}

/// Compiles grammars for one model's vocabulary; built once per model, at
/// its first constrained request (slicing the vocabulary takes a moment).
pub struct GrammarFactory {
    factory: ParserFactory,
    vocab: usize,
}

/// What the factory needs of a tokenizer, taken out of it so the factory can
/// be built on another thread.
pub struct Vocab {
    words: Vec<Vec<u8>>,
    eos: u32,
    eog: Vec<u32>,
    bos: Option<u32>,
}

impl Vocab {
    pub fn of(tok: &GgufTokenizer) -> Result<Self> {
        let words = (0..tok.vocab_size() as u32)
            .map(|id| {
                let bytes = tok.token_bytes(id);
                if bytes.is_empty() && tok.is_control_or_unknown(id) {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tok.token_text(id).unwrap_or("").as_bytes());
                    w
                } else {
                    bytes.to_vec()
                }
            })
            .collect();
        let eos = tok.eog.first().copied().or(tok.eos).context("the model has no end-of-generation token")?;
        Ok(Vocab { words, eos, eog: tok.eog.clone(), bos: tok.bos })
    }
}

impl GrammarFactory {
    pub fn new(tok: &GgufTokenizer) -> Result<Self> {
        Self::from_vocab(Vocab::of(tok)?)
    }

    pub fn from_vocab(v: Vocab) -> Result<Self> {
        let n = v.words.len();
        let mut info = TokRxInfo::new(n as u32, v.eos);
        info.tok_bos = v.bos;
        let trie = TokTrie::from(&info, &v.words).with_eos_tokens(&v.eog);
        let env: llguidance::toktrie::TokEnv = Arc::new(VocabEnv { trie });
        let mut factory = ParserFactory::new_simple(&env)?;
        // Errors come back to the caller; nothing on stderr per request.
        factory.quiet();
        Ok(GrammarFactory { factory, vocab: n })
    }

    /// A matcher for one sequence. Errors are the request's fault (a schema
    /// llguidance refuses, an unknown function). Without strict, a `pattern`
    /// llguidance cannot compile (look-around, backreferences) is ignored
    /// like any other keyword it cannot enforce.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Grammar> {
        match self.compile_as_given(spec) {
            Ok(g) => Ok(g),
            Err(e) => match self.without_bad_patterns(spec) {
                Some(lenient) => self.compile_as_given(&lenient).map_err(|_| e),
                None => Err(e),
            },
        }
    }

    /// `spec` with the patterns that do not compile dropped from its
    /// non-strict schemas; None when there is none to drop.
    fn without_bad_patterns(&self, spec: &GrammarSpec) -> Option<GrammarSpec> {
        let mut out = spec.clone();
        let mut dropped = false;
        if !spec.strict {
            if let Answer::JsonSchema(s) = &mut out.answer {
                dropped |= self.drop_bad_patterns(s);
            }
        }
        if let Some(choice) = &mut out.tools {
            for f in choice.functions.iter_mut().filter(|f| !f.strict) {
                dropped |= self.drop_bad_patterns(&mut f.parameters);
            }
        }
        dropped.then_some(out)
    }

    fn drop_bad_patterns(&self, schema: &mut Value) -> bool {
        let mut dropped = false;
        match schema {
            Value::Object(m) => {
                if let Some(Value::String(p)) = m.get("pattern") {
                    let alone = GrammarSpec { answer: Answer::JsonSchema(json!({"type": "string", "pattern": p})), strict: true, tools: None };
                    if self.compile_as_given(&alone).is_err() {
                        m.remove("pattern");
                        dropped = true;
                    }
                }
                for (k, v) in m.iter_mut() {
                    // Values, not schemas: a const's own "pattern" key is data.
                    if !matches!(k.as_str(), "const" | "enum" | "default" | "examples") {
                        dropped |= self.drop_bad_patterns(v);
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|v| dropped |= self.drop_bad_patterns(v)),
            _ => {}
        }
        dropped
    }

    fn compile_as_given(&self, spec: &GrammarSpec) -> Result<Grammar> {
        let grammar = spec.top_level()?;
        let parser = self.factory.create_parser(grammar)?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            bail!("{e}");
        }
        Ok(Grammar { matcher, vocab: self.vocab, mask_ns: 0 })
    }

    /// Why `spec` does not compile, starting with the request field at fault
    /// (the agent answers it as the 400's `param`): the first tool in play
    /// whose parameters do not compile on their own, with that error rather
    /// than the whole tool-call grammar's, else the response_format's schema.
    pub fn refusal(&self, spec: &GrammarSpec, err: &anyhow::Error) -> String {
        if let Some(choice) = &spec.tools {
            if let tools::Mode::Function(name) = &choice.mode {
                if !choice.functions.iter().any(|f| &f.name == name) {
                    return format!("tool_choice: {err:#}");
                }
            }
            for (i, f) in choice.functions.iter().enumerate() {
                if matches!(&choice.mode, tools::Mode::Function(name) if name != &f.name) {
                    continue;
                }
                let alone = GrammarSpec { answer: Answer::JsonSchema(f.parameters.clone()), strict: f.strict, tools: None };
                if let Err(e) = self.compile(&alone) {
                    return format!("tools[{i}].function.parameters: {e:#}");
                }
            }
        }
        match spec.answer {
            Answer::Text => format!("tools: {err:#}"),
            _ => format!("response_format: {err:#}"),
        }
    }
}

/// What the answer must be (OpenAI's `response_format`).
#[derive(Clone, Debug)]
pub enum Answer {
    Text,
    JsonObject,
    JsonSchema(Value),
}

#[derive(Clone, Debug)]
pub struct GrammarSpec {
    pub answer: Answer,
    /// Refuse schema keywords llguidance cannot enforce instead of ignoring them.
    pub strict: bool,
    pub tools: Option<ToolChoice>,
}

/// Separators the model must use: compact JSON on one line. Unbounded
/// whitespace lets a small model pad forever instead of closing the value.
pub fn compile_options(strict: bool) -> JsonCompileOptions {
    JsonCompileOptions {
        item_separator: ", ".into(),
        key_separator: ": ".into(),
        whitespace_flexible: false,
        lenient: !strict,
        ..JsonCompileOptions::default()
    }
}

/// A JSON Schema with our compile options attached (a schema's own
/// `x-guidance`, llguidance's extension, is kept as given), its objects
/// closed (`close_objects`).
pub fn with_options(mut schema: Value, strict: bool) -> Result<Value> {
    close_objects(&mut schema);
    match &mut schema {
        Value::Object(map) => {
            if !map.contains_key("x-guidance") {
                compile_options(strict).apply_to(&mut schema);
            }
            Ok(schema)
        }
        Value::Bool(true) => with_options(json!({}), strict),
        _ => bail!("a JSON Schema must be an object"),
    }
}

/// Narrowings that keep every output valid against the schema as given.
/// An object schema that lists `properties` and says nothing of any others
/// gets `additionalProperties: false`: the output still validates against
/// the schema as given (it is a narrowing), but a small model cannot pad an
/// answer or a call with properties nobody declared (what OpenAI's strict
/// mode asks schemas to say). Schemas combined with `allOf` (or beside a
/// `$ref`, `anyOf`, `oneOf`) are left as they are: closing one part of an
/// intersection could leave nothing valid.
pub fn close_objects(schema: &mut Value) {
    let Value::Object(m) = schema else { return };
    // An email gets a dotted domain: RFC 5321 allows `a@b`, but validators
    // (ajv's, pydantic's EmailStr) refuse it, and so would a mail server.
    if m.get("format").and_then(Value::as_str) == Some("email") && !m.contains_key("pattern") {
        m.insert("pattern".into(), Value::String(r"^[^@]+@[^@.]+(\.[^@.]+)+$".into()));
    }
    let combined = ["allOf", "anyOf", "oneOf", "$ref", "not", "if"].iter().any(|k| m.contains_key(*k));
    let open_keys = ["additionalProperties", "patternProperties", "unevaluatedProperties"];
    if !combined && m.contains_key("properties") && !open_keys.iter().any(|k| m.contains_key(*k)) {
        m.insert("additionalProperties".into(), Value::Bool(false));
    }
    for key in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(children)) = m.get_mut(key) {
            children.values_mut().for_each(close_objects);
        }
    }
    for key in ["items", "additionalProperties", "contains"] {
        if let Some(child) = m.get_mut(key) {
            close_objects(child);
        }
    }
    for key in ["prefixItems", "anyOf", "oneOf"] {
        if let Some(Value::Array(children)) = m.get_mut(key) {
            children.iter_mut().for_each(close_objects);
        }
    }
}

impl GrammarSpec {
    pub fn is_free(&self) -> bool {
        matches!(self.answer, Answer::Text) && self.tools.is_none()
    }

    fn answer_schema(&self) -> Result<Option<Value>> {
        Ok(match &self.answer {
            Answer::Text => None,
            Answer::JsonObject => Some(with_options(json!({"type": "object"}), self.strict)?),
            Answer::JsonSchema(s) => Some(with_options(s.clone(), self.strict)?),
        })
    }

    fn top_level(&self) -> Result<TopLevelGrammar> {
        let answer = self.answer_schema()?;
        match &self.tools {
            Some(choice) => Ok(TopLevelGrammar::from_lark(tools::lark_grammar(choice, answer.as_ref())?)),
            None => match answer {
                Some(schema) => Ok(TopLevelGrammar::from_json_schema(schema)),
                None => bail!("no constraint"),
            },
        }
    }
}

/// One sequence's grammar state.
pub struct Grammar {
    matcher: Matcher,
    vocab: usize,
    /// Time spent computing masks, for the bench and the Done event.
    pub mask_ns: u64,
}

impl Grammar {
    /// Masks `logits` in place: every token the grammar does not allow next
    /// (and any logit beyond the tokenizer's vocabulary) becomes -inf.
    pub fn mask_logits(&mut self, logits: &mut [f32]) -> Result<()> {
        let t = Instant::now();
        let mask = self.matcher.compute_mask_or_eos()?;
        apply_mask(&mask, self.vocab, logits);
        self.mask_ns += t.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// An independent copy in the same state (another choice of the same
    /// request, n > 1, starts from it).
    pub fn fork(&self) -> Grammar {
        Grammar { matcher: self.matcher.deep_clone(), vocab: self.vocab, mask_ns: 0 }
    }

    /// The sampled token moves the grammar on.
    pub fn commit(&mut self, tok: u32) -> Result<()> {
        self.matcher.consume_token(tok)
    }

    /// The grammar is complete and allows nothing more: the output is whole.
    pub fn is_done(&self) -> bool {
        self.matcher.is_stopped()
    }
}

fn apply_mask(mask: &SimpleVob, vocab: usize, logits: &mut [f32]) {
    let n = vocab.min(logits.len());
    mask.iter_unset_entries(|i| {
        if i < n {
            logits[i] = f32::NEG_INFINITY;
        }
    });
    for l in logits.iter_mut().skip(n) {
        *l = f32::NEG_INFINITY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_that_list_properties_are_closed_unless_combined_or_open() {
        let mut s = json!({
            "type": "object",
            "properties": {
                "a": {"type": "object", "properties": {"x": {"type": "integer"}}},
                "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"y": {}}}},
                "list": {"type": "array", "items": {"properties": {"z": {}}}},
                "both": {"allOf": [{"properties": {"p": {}}}, {"properties": {"q": {}}}]},
                "either": {"anyOf": [{"properties": {"r": {}}}, {"type": "string"}]},
                "free": {"type": "object"}
            },
            "$defs": {"D": {"properties": {"d": {}}}}
        });
        close_objects(&mut s);
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["a"]["additionalProperties"], false);
        assert_eq!(s["properties"]["map"]["additionalProperties"]["additionalProperties"], false);
        assert_eq!(s["properties"]["list"]["items"]["additionalProperties"], false);
        assert!(s["properties"]["both"]["allOf"][0].get("additionalProperties").is_none());
        assert_eq!(s["properties"]["either"]["anyOf"][0]["additionalProperties"], false);
        assert!(s["properties"]["free"].get("additionalProperties").is_none());
        assert_eq!(s["$defs"]["D"]["additionalProperties"], false);
        let mut e = json!({"type": "string", "format": "email"});
        close_objects(&mut e);
        assert!(e["pattern"].as_str().unwrap().contains("\\."));
    }
}
