//! The llama GGUF tokenizer, built from the file's own `tokenizer.ggml.*`
//! metadata and matching llama.cpp token for token: GPT-2 byte-level BPE with
//! llama.cpp's pre-tokenizer splits (the `smollm` pre type splits every digit
//! on its own first), special tokens matched longest first, and the chat
//! template rendered with minijinja.

use std::collections::HashMap;
use std::sync::LazyLock;

use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file;

// gguf token types (llama.cpp's LLAMA_TOKEN_TYPE_*).
const TOKEN_NORMAL: i32 = 1;
const TOKEN_UNKNOWN: i32 = 2;
const TOKEN_CONTROL: i32 = 3;
const TOKEN_USER_DEFINED: i32 = 4;
const TOKEN_BYTE: i32 = 6;

/// The vocabulary's kind (`tokenizer.ggml.model`).
enum Model {
    /// "gpt2": byte-level BPE with merges.
    Bpe,
    /// "llama": SentencePiece-style merges by score with byte fallback
    /// (`spm.rs`).
    Spm { scores: Vec<f32>, byte_tokens: Box<[Option<u32>; 256]>, add_space_prefix: bool },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreTokenizer {
    /// GPT-2's regex only.
    Gpt2,
    /// `\p{N}` split first, then GPT-2's regex (llama.cpp: smollm, starcoder,
    /// refact, command-r, codeshell, exaone, minerva).
    DigitsThenGpt2,
}

#[derive(Clone, Debug, Default)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
    /// An assistant message's tool calls.
    pub tool_calls: Vec<ToolCallMsg>,
    /// A tool result's call id.
    pub tool_call_id: Option<String>,
}

#[derive(Clone, Debug)]
pub struct ToolCallMsg {
    pub id: String,
    pub name: String,
    /// JSON text.
    pub arguments: String,
}

impl ChatMessage {
    pub fn text(role: &str, content: String) -> Self {
        ChatMessage { role: role.to_string(), content, ..Default::default() }
    }

    /// The message as a chat template sees it: OpenAI's shape, with a call's
    /// arguments parsed (Hugging Face templates write `arguments | tojson`).
    fn template_value(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("role".into(), self.role.clone().into());
        m.insert("content".into(), self.content.clone().into());
        if !self.tool_calls.is_empty() {
            let calls: Vec<serde_json::Value> = self
                .tool_calls
                .iter()
                .map(|c| {
                    let args = serde_json::from_str(&c.arguments).unwrap_or_else(|_| serde_json::Value::String(c.arguments.clone()));
                    serde_json::json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": args}})
                })
                .collect();
            m.insert("tool_calls".into(), calls.into());
        }
        if let Some(id) = &self.tool_call_id {
            m.insert("tool_call_id".into(), id.clone().into());
        }
        serde_json::Value::Object(m)
    }
}

pub struct GgufTokenizer {
    /// Token text as stored in the GGUF (byte-level encoded for normal tokens).
    tokens: Vec<String>,
    token_types: Vec<i32>,
    /// Bytes each token stands for when detokenized (empty for control tokens).
    pieces: Vec<Vec<u8>>,
    token_to_id: HashMap<String, u32>,
    /// (left, right) -> (rank, merged id).
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// Special tokens (control, user-defined, unknown), longest text first.
    specials: Vec<(String, u32, i32)>,
    byte_to_char: [char; 256],
    pre: PreTokenizer,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    /// Every token that ends generation (llama.cpp's EOG set).
    pub eog: Vec<u32>,
    pub add_bos: bool,
    chat_env: Option<minijinja::Environment<'static>>,
    model: Model,
    /// The chat template renders `tools` itself (it mentions them).
    pub template_has_tools: bool,
}

/// GPT-2's reversible byte -> printable char table.
fn bytes_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        table[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            let c = char::from_u32(256 + n).unwrap();
            n += 1;
            c
        };
    }
    table
}

/// Unicode general category ranges from regex-syntax's tables, so `\p{L}` and
/// `\p{N}` mean exactly what they mean in the regexes llama.cpp implements.
fn class_ranges(pattern: &str) -> Vec<(u32, u32)> {
    use regex_syntax::hir::{Class, HirKind};
    let hir = regex_syntax::Parser::new().parse(pattern).expect("valid class");
    match hir.kind() {
        HirKind::Class(Class::Unicode(cls)) => cls.ranges().iter().map(|r| (r.start() as u32, r.end() as u32)).collect(),
        other => panic!("{pattern} is not a unicode class: {other:?}"),
    }
}

static LETTERS: LazyLock<Vec<(u32, u32)>> = LazyLock::new(|| class_ranges(r"\p{L}"));
static NUMBERS: LazyLock<Vec<(u32, u32)>> = LazyLock::new(|| class_ranges(r"\p{N}"));

fn in_ranges(ranges: &[(u32, u32)], c: char) -> bool {
    let c = c as u32;
    ranges
        .binary_search_by(|&(lo, hi)| {
            if hi < c {
                std::cmp::Ordering::Less
            } else if lo > c {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    in_ranges(&LETTERS, c)
}

fn is_number(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    in_ranges(&NUMBERS, c)
}

/// Port of llama.cpp's `unicode_regex_split_custom_gpt2` over one fragment:
/// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
fn split_gpt2(cpts: &[char], out: &mut Vec<(usize, usize)>) {
    #[derive(PartialEq, Clone, Copy)]
    enum Cat {
        L,
        N,
        W,
        Other,
        End,
    }
    let end = cpts.len();
    let cat = |pos: usize| -> Cat {
        if pos >= end {
            return Cat::End;
        }
        let c = cpts[pos];
        if is_letter(c) {
            Cat::L
        } else if is_number(c) {
            Cat::N
        } else if c.is_whitespace() {
            Cat::W
        } else {
            Cat::Other
        }
    };
    let mut prev = 0usize;
    let mut add = |e: usize, out: &mut Vec<(usize, usize)>| -> usize {
        let len = e - prev;
        if len > 0 {
            out.push((prev, e));
        }
        prev = e;
        len
    };
    let mut pos = 0usize;
    while pos < end {
        let c = cpts[pos];
        if c == '\'' && pos + 1 < end {
            let n1 = cpts[pos + 1];
            if matches!(n1, 's' | 't' | 'm' | 'd') {
                pos += add(pos + 2, out);
                continue;
            }
            if pos + 2 < end {
                let n2 = cpts[pos + 2];
                if (n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l') {
                    pos += add(pos + 3, out);
                    continue;
                }
            }
        }
        let mut c2 = if c == ' ' { cat(pos + 1) } else { cat(pos) };
        if c2 == Cat::L {
            pos += (c == ' ') as usize;
            while c2 == Cat::L {
                pos += 1;
                c2 = cat(pos);
            }
            add(pos, out);
            continue;
        }
        if c2 == Cat::N {
            pos += (c == ' ') as usize;
            while c2 == Cat::N {
                pos += 1;
                c2 = cat(pos);
            }
            add(pos, out);
            continue;
        }
        if c2 == Cat::Other {
            pos += (c == ' ') as usize;
            while c2 == Cat::Other {
                pos += 1;
                c2 = cat(pos);
            }
            add(pos, out);
            continue;
        }
        let mut nws = 0;
        while cat(pos + nws) == Cat::W {
            nws += 1;
        }
        if nws > 1 && pos + nws < end {
            pos += nws - 1;
            add(pos, out);
            continue;
        }
        if nws > 0 {
            pos += nws;
            add(pos, out);
            continue;
        }
        pos += 1;
        add(pos, out);
    }
}

/// The byte of a SentencePiece byte token's text, `<0xXX>`.
fn spm_byte(t: &str) -> Option<u8> {
    u8::from_str_radix(t.strip_prefix("<0x")?.strip_suffix('>')?, 16).ok()
}

fn meta<'a>(md: &'a HashMap<String, gguf_file::Value>, key: &str) -> Option<&'a gguf_file::Value> {
    md.get(key)
}

impl GgufTokenizer {
    pub fn from_gguf(md: &HashMap<String, gguf_file::Value>) -> Result<Self> {
        let model = meta(md, "tokenizer.ggml.model").and_then(|v| v.to_string().ok()).cloned().unwrap_or_default();
        if model != "gpt2" && model != "llama" {
            bail!("tokenizer model {model:?} is not supported (GPT-2 byte-level BPE, or llama's SentencePiece)");
        }
        let spm = model == "llama";
        let pre_name = meta(md, "tokenizer.ggml.pre").and_then(|v| v.to_string().ok()).cloned().unwrap_or_default();
        let pre = match pre_name.as_str() {
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva" => {
                PreTokenizer::DigitsThenGpt2
            }
            "gpt2" | "default" | "" | "mpt" | "olmo" | "jais" => PreTokenizer::Gpt2,
            other => {
                eprintln!("switchyard-engine: pre-tokenizer {other:?} not implemented; using GPT-2 splits (ids may differ from llama.cpp)");
                PreTokenizer::Gpt2
            }
        };
        let tokens: Vec<String> = meta(md, "tokenizer.ggml.tokens")
            .context("GGUF has no tokenizer.ggml.tokens")?
            .to_vec()?
            .iter()
            .map(|v| v.to_string().cloned())
            .collect::<candle_core::Result<_>>()?;
        let token_types: Vec<i32> = match meta(md, "tokenizer.ggml.token_type") {
            Some(v) => v.to_vec()?.iter().map(|t| t.to_i32()).collect::<candle_core::Result<_>>()?,
            None => vec![TOKEN_NORMAL; tokens.len()],
        };
        if token_types.len() != tokens.len() {
            bail!("token_type has {} entries for {} tokens", token_types.len(), tokens.len());
        }
        let byte_to_char = bytes_to_unicode();
        let mut char_to_byte = HashMap::new();
        for (b, c) in byte_to_char.iter().enumerate() {
            char_to_byte.insert(*c, b as u8);
        }
        let mut token_to_id = HashMap::with_capacity(tokens.len());
        let mut pieces = Vec::with_capacity(tokens.len());
        for (i, (t, ty)) in tokens.iter().zip(&token_types).enumerate() {
            token_to_id.entry(t.clone()).or_insert(i as u32);
            let piece = match *ty {
                TOKEN_CONTROL | TOKEN_UNKNOWN => Vec::new(),
                TOKEN_USER_DEFINED => t.as_bytes().to_vec(),
                TOKEN_BYTE if spm => spm_byte(t).map(|b| vec![b]).unwrap_or_default(),
                _ if spm => t.replace('\u{2581}', " ").into_bytes(),
                _ => {
                    let mut bytes = Vec::with_capacity(t.len());
                    for c in t.chars() {
                        match char_to_byte.get(&c) {
                            Some(b) => bytes.push(*b),
                            None => {
                                let mut buf = [0u8; 4];
                                bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                            }
                        }
                    }
                    bytes
                }
            };
            pieces.push(piece);
        }
        let mut merges = HashMap::new();
        if let Some(v) = meta(md, "tokenizer.ggml.merges") {
            for (rank, m) in v.to_vec()?.iter().enumerate() {
                let m = m.to_string()?;
                let Some((l, r)) = m.split_once(' ') else { continue };
                let (Some(&li), Some(&ri), Some(&mi)) =
                    (token_to_id.get(l), token_to_id.get(r), token_to_id.get(&format!("{l}{r}")))
                else {
                    continue;
                };
                merges.entry((li, ri)).or_insert((rank as u32, mi));
            }
        }
        let mut specials: Vec<(String, u32, i32)> = tokens
            .iter()
            .zip(&token_types)
            .enumerate()
            .filter(|(_, (t, ty))| {
                !t.is_empty() && matches!(**ty, TOKEN_CONTROL | TOKEN_USER_DEFINED | TOKEN_UNKNOWN)
            })
            .map(|(i, (t, ty))| (t.clone(), i as u32, *ty))
            .collect();
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));

        let id_of = |key: &str| meta(md, key).and_then(|v| v.to_u32().ok());
        let bos = id_of("tokenizer.ggml.bos_token_id");
        let eos = id_of("tokenizer.ggml.eos_token_id");
        let add_bos = meta(md, "tokenizer.ggml.add_bos_token").and_then(|v| v.to_bool().ok()).unwrap_or(false);
        // llama.cpp also ends generation on these well-known end tokens when
        // the vocab has them, whatever eos_token_id says.
        let mut eog: Vec<u32> = eos.into_iter().collect();
        if let Some(id) = id_of("tokenizer.ggml.eot_token_id") {
            eog.push(id);
        }
        for name in ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "<|end_of_text|>"] {
            if let Some(&id) = token_to_id.get(name) {
                if token_types[id as usize] == TOKEN_CONTROL && !eog.contains(&id) {
                    eog.push(id);
                }
            }
        }

        let template_src = meta(md, "tokenizer.chat_template").and_then(|v| v.to_string().ok());
        let template_has_tools = template_src.is_some_and(|t| t.contains("tools"));
        let chat_env = match template_src {
            Some(tpl) => {
                let mut env = minijinja::Environment::new();
                minijinja_contrib::add_to_environment(&mut env);
                env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
                env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
                    Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
                });
                env.add_template_owned("chat", tpl.clone()).map_err(|e| anyhow!("chat template: {e}"))?;
                Some(env)
            }
            None => None,
        };

        let model = if spm {
            let scores: Vec<f32> = match meta(md, "tokenizer.ggml.scores") {
                Some(v) => v.to_vec()?.iter().map(|t| t.to_f32()).collect::<candle_core::Result<_>>()?,
                None => vec![0.0; tokens.len()],
            };
            let mut byte_tokens = Box::new([None; 256]);
            for (i, (t, ty)) in tokens.iter().zip(&token_types).enumerate() {
                if let (TOKEN_BYTE, Some(b)) = (*ty, spm_byte(t)) {
                    byte_tokens[b as usize] = Some(i as u32);
                }
            }
            let add_space_prefix = meta(md, "tokenizer.ggml.add_space_prefix").and_then(|v| v.to_bool().ok()).unwrap_or(true);
            Model::Spm { scores, byte_tokens, add_space_prefix }
        } else {
            Model::Bpe
        };

        Ok(GgufTokenizer {
            model,
            tokens,
            token_types,
            pieces,
            token_to_id,
            merges,
            specials,
            byte_to_char,
            pre,
            bos,
            eos,
            eog,
            add_bos,
            chat_env,
            template_has_tools,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(|s| s.as_str())
    }

    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.token_to_id.get(text).copied()
    }

    pub fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// The fill-in-the-middle tokens (prefix, suffix, middle) under the names
    /// code models use for them (StarCoder's; Qwen's and CodeGemma's), if the
    /// vocabulary has all three.
    pub fn fim_tokens(&self) -> Option<(u32, u32, u32)> {
        const NAMES: [[&str; 3]; 2] = [
            ["<fim_prefix>", "<fim_suffix>", "<fim_middle>"],
            ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"],
        ];
        NAMES.iter().find_map(|[p, s, m]| Some((self.token_id(p)?, self.token_id(s)?, self.token_id(m)?)))
    }

    /// Renders chat messages with the GGUF's template, generation prompt on.
    pub fn apply_chat_template(&self, messages: &[ChatMessage]) -> Result<String> {
        self.render_chat(messages, true, &[])
    }

    /// As `apply_chat_template`, or `apply_chat_template_continuing`, with
    /// functions the model may call: handed to a template that renders
    /// `tools`, otherwise written into the messages (tools.rs).
    pub fn apply_chat_template_with_tools(&self, messages: &[ChatMessage], tools: &[crate::tools::Function], continuing: bool) -> Result<String> {
        let has_calls = messages.iter().any(|m| !m.tool_calls.is_empty() || m.role == "tool");
        if self.template_has_tools || (tools.is_empty() && !has_calls) {
            let values: Vec<serde_json::Value> = tools.iter().map(|f| f.openai()).collect();
            return if continuing { self.continuing(messages, &values) } else { self.render_chat(messages, true, &values) };
        }
        let rewritten = crate::tools::rewrite_for_plain_template(messages, tools);
        if continuing {
            self.continuing(&rewritten, &[])
        } else {
            self.render_chat(&rewritten, true, &[])
        }
    }

    /// The chat rendered so that generation continues the final message,
    /// which must be the assistant's: no generation prompt, and the text cut
    /// right after that message's content (dropping the end-of-turn marker
    /// the template writes after it). The content is looked for as written,
    /// then with surrounding whitespace trimmed (templates that trim).
    pub fn apply_chat_template_continuing(&self, messages: &[ChatMessage]) -> Result<String> {
        self.continuing(messages, &[])
    }

    fn continuing(&self, messages: &[ChatMessage], tools: &[serde_json::Value]) -> Result<String> {
        let last = messages.last().context("no messages")?;
        if last.role != "assistant" {
            bail!("continue_final_message needs the last message to be the assistant's (it is {:?})", last.role);
        }
        if last.content.trim().is_empty() {
            // Nothing to continue: the assistant turn simply opens.
            return self.render_chat(&messages[..messages.len() - 1], true, tools);
        }
        let rendered = self.render_chat(messages, false, tools)?;
        for needle in [last.content.as_str(), last.content.trim()] {
            if needle.is_empty() {
                continue;
            }
            if let Some(at) = rendered.rfind(needle) {
                return Ok(rendered[..at + needle.len()].to_string());
            }
        }
        bail!("the chat template does not write the final message's text verbatim, so it cannot be continued")
    }

    fn render_chat(&self, messages: &[ChatMessage], add_generation_prompt: bool, tools: &[serde_json::Value]) -> Result<String> {
        let env = self.chat_env.as_ref().context("the model has no tokenizer.chat_template")?;
        let tpl = env.get_template("chat").map_err(|e| anyhow!("{e}"))?;
        let tok = |id: Option<u32>| id.and_then(|i| self.token_text(i)).unwrap_or("").to_string();
        let messages: Vec<serde_json::Value> = messages.iter().map(ChatMessage::template_value).collect();
        // Templates test `tools is defined` / `if tools`: none means undefined.
        let tools = (!tools.is_empty()).then(|| minijinja::Value::from_serialize(tools));
        tpl.render(minijinja::context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => add_generation_prompt,
            bos_token => tok(self.bos),
            eos_token => tok(self.eos),
        })
        .map_err(|e| anyhow!("rendering chat template: {e}"))
    }

    /// llama.cpp's `llama_tokenize(text, add_special, parse_special)`.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::new();
        if add_special && self.add_bos {
            if let Some(b) = self.bos {
                out.push(b);
            }
        }
        // Partition on special tokens, longest first, as llama.cpp's
        // tokenizer_st_partition does; user-defined tokens are split out even
        // when parse_special is off.
        enum Frag<'a> {
            Text(&'a str),
            Token(u32),
        }
        let mut frags = vec![Frag::Text(text)];
        for (stext, id, ty) in &self.specials {
            if !parse_special && (*ty == TOKEN_CONTROL || *ty == TOKEN_UNKNOWN) {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len());
            for f in frags {
                match f {
                    Frag::Text(t) if t.contains(stext.as_str()) => {
                        let mut rest = t;
                        while let Some(at) = rest.find(stext.as_str()) {
                            if at > 0 {
                                next.push(Frag::Text(&rest[..at]));
                            }
                            next.push(Frag::Token(*id));
                            rest = &rest[at + stext.len()..];
                        }
                        if !rest.is_empty() {
                            next.push(Frag::Text(rest));
                        }
                    }
                    other => next.push(other),
                }
            }
            frags = next;
        }
        // SentencePiece vocabularies may want a space before text that
        // starts the input or follows a special token (llama.cpp's
        // add_space_prefix).
        let mut prev_special = true;
        for f in frags {
            match f {
                Frag::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Frag::Text(t) => {
                    match &self.model {
                        Model::Bpe => self.encode_text(t, &mut out),
                        Model::Spm { scores, byte_tokens, add_space_prefix } => {
                            let prefix = if *add_space_prefix && prev_special { " " } else { "" };
                            let text = format!("{prefix}{t}").replace(' ', "\u{2581}");
                            let vocab = crate::spm::SpmVocab { token_to_id: &self.token_to_id, scores, byte_tokens };
                            crate::spm::encode(&vocab, &text, &mut out);
                        }
                    }
                    prev_special = false;
                }
            }
        }
        out
    }

    fn encode_text(&self, text: &str, out: &mut Vec<u32>) {
        let cpts: Vec<char> = text.chars().collect();
        let mut segments: Vec<(usize, usize)> = Vec::new();
        match self.pre {
            PreTokenizer::Gpt2 => segments.push((0, cpts.len())),
            PreTokenizer::DigitsThenGpt2 => {
                // `\p{N}` through llama.cpp's generic splitter: each match and
                // each gap between matches becomes its own fragment.
                let mut start = 0;
                for (i, c) in cpts.iter().enumerate() {
                    if is_number(*c) {
                        if i > start {
                            segments.push((start, i));
                        }
                        segments.push((i, i + 1));
                        start = i + 1;
                    }
                }
                if start < cpts.len() {
                    segments.push((start, cpts.len()));
                }
            }
        }
        let mut words = Vec::new();
        for (s, e) in segments {
            let before = words.len();
            split_gpt2(&cpts[s..e], &mut words);
            for w in &mut words[before..] {
                w.0 += s;
                w.1 += s;
            }
        }
        let mut buf = [0u8; 4];
        for (s, e) in words {
            let mut word_bytes = Vec::new();
            for c in &cpts[s..e] {
                word_bytes.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            self.bpe_word(&word_bytes, out);
        }
    }

    /// Byte-level BPE over one pre-tokenized word: merge the lowest-ranked
    /// adjacent pair (leftmost on ties) until none is left.
    fn bpe_word(&self, bytes: &[u8], out: &mut Vec<u32>) {
        let mut buf = [0u8; 4];
        let mut syms: Vec<u32> = Vec::with_capacity(bytes.len());
        for &b in bytes {
            let s = self.byte_to_char[b as usize].encode_utf8(&mut buf);
            // llama.cpp drops bytes the vocab cannot represent at all.
            if let Some(&id) = self.token_to_id.get(&*s) {
                syms.push(id);
            }
        }
        loop {
            let mut best: Option<(u32, usize, u32)> = None;
            for i in 0..syms.len().saturating_sub(1) {
                if let Some(&(rank, merged)) = self.merges.get(&(syms[i], syms[i + 1])) {
                    if best.is_none_or(|(r, _, _)| rank < r) {
                        best = Some((rank, i, merged));
                    }
                }
            }
            let Some((_, i, merged)) = best else { break };
            syms[i] = merged;
            syms.remove(i + 1);
        }
        out.extend_from_slice(&syms);
    }

    /// Bytes a token stands for; control tokens render as nothing.
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.pieces.get(id as usize).map(|p| p.as_slice()).unwrap_or(&[])
    }

    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.token_bytes(id));
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn is_control(&self, id: u32) -> bool {
        self.token_types.get(id as usize) == Some(&TOKEN_CONTROL)
    }

    pub fn is_control_or_unknown(&self, id: u32) -> bool {
        matches!(self.token_types.get(id as usize), Some(&TOKEN_CONTROL) | Some(&TOKEN_UNKNOWN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &str) -> Vec<String> {
        let cpts: Vec<char> = text.chars().collect();
        let mut out = Vec::new();
        split_gpt2(&cpts, &mut out);
        out.iter().map(|(s, e)| cpts[*s..*e].iter().collect()).collect()
    }

    #[test]
    fn gpt2_split_matches_regex_semantics() {
        assert_eq!(split("Hello world"), vec!["Hello", " world"]);
        assert_eq!(split("I'm here"), vec!["I", "'m", " here"]);
        assert_eq!(split("a  b"), vec!["a", " ", " b"]);
        assert_eq!(split("a\n\nb"), split_expected_newlines());
        assert_eq!(split("x!!  "), vec!["x", "!!", "  "]);
        assert_eq!(split("héllo wörld"), vec!["héllo", " wörld"]);
    }

    fn split_expected_newlines() -> Vec<String> {
        // "a\n\nb": "\n\n" is followed by a letter, so \s+(?!\S) takes one
        // newline and the other stands alone (it cannot join " ?\p{L}+").
        vec!["a".into(), "\n".into(), "\n".into(), "b".into()]
    }

    #[test]
    fn unicode_classes() {
        assert!(is_letter('é'));
        assert!(is_letter('中'));
        assert!(!is_letter('1'));
        assert!(is_number('٣'));
        assert!(!is_letter('\u{093F}')); // Devanagari vowel sign: a mark, not a letter
    }
}
