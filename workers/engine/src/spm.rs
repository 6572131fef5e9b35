//! SentencePiece-style tokenization as llama.cpp does it for GGUFs whose
//! `tokenizer.ggml.model` is "llama" (Gemma, Llama 1/2, Mistral): spaces
//! become U+2581, the text starts as one symbol per UTF-8 character, the
//! adjacent pair whose concatenation is the highest-scoring vocabulary token
//! merges first (leftmost on ties), and symbols that never form a token fall
//! back to `<0xXX>` byte tokens. A port of `llm_tokenizer_spm_session`.

use std::collections::{BinaryHeap, HashMap};

/// The vocabulary the merges look up.
pub struct SpmVocab<'a> {
    pub token_to_id: &'a HashMap<String, u32>,
    pub scores: &'a [f32],
    /// Byte b's `<0xXX>` token, where the vocabulary has it.
    pub byte_tokens: &'a [Option<u32>; 256],
}

struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

#[derive(PartialEq)]
struct Bigram {
    score: f32,
    left: usize,
    right: usize,
    size: usize,
}

impl Eq for Bigram {}

impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost pair.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.score.partial_cmp(&o.score).unwrap_or(std::cmp::Ordering::Equal).then(o.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// Tokenizes `text` (already space-escaped) into `out`.
pub fn encode(vocab: &SpmVocab, text: &str, out: &mut Vec<u32>) {
    let mut syms: Vec<Symbol> = Vec::new();
    for (i, (start, c)) in text.char_indices().enumerate() {
        let len = c.len_utf8();
        syms.push(Symbol { start, len, prev: i.checked_sub(1), next: (start + len < text.len()).then_some(i + 1) });
    }
    let mut queue = BinaryHeap::new();
    let try_add = |syms: &[Symbol], l: Option<usize>, r: Option<usize>, queue: &mut BinaryHeap<Bigram>| {
        let (Some(l), Some(r)) = (l, r) else { return };
        let (start, size) = (syms[l].start, syms[l].len + syms[r].len);
        let Some(&id) = vocab.token_to_id.get(&text[start..start + size]) else { return };
        queue.push(Bigram { score: vocab.scores.get(id as usize).copied().unwrap_or(0.0), left: l, right: r, size });
    };
    for i in 1..syms.len() {
        try_add(&syms, Some(i - 1), Some(i), &mut queue);
    }
    while let Some(b) = queue.pop() {
        let (l, r) = (b.left, b.right);
        // Stale: one side merged elsewhere since this pair was queued.
        if syms[l].len == 0 || syms[r].len == 0 || syms[l].len + syms[r].len != b.size {
            continue;
        }
        syms[l].len += syms[r].len;
        syms[r].len = 0;
        syms[l].next = syms[r].next;
        if let Some(n) = syms[r].next {
            syms[n].prev = Some(l);
        }
        let (p, n) = (syms[l].prev, syms[l].next);
        try_add(&syms, p, Some(l), &mut queue);
        try_add(&syms, Some(l), n, &mut queue);
    }
    // Every merged symbol is a token (pairs merge only into tokens); a
    // single character that is not one goes out as its bytes' tokens.
    let mut i = if syms.is_empty() { None } else { Some(0) };
    while let Some(s) = i {
        let piece = &text[syms[s].start..syms[s].start + syms[s].len];
        match vocab.token_to_id.get(piece) {
            Some(&id) => out.push(id),
            None => out.extend(piece.bytes().filter_map(|b| vocab.byte_tokens[b as usize])),
        }
        i = syms[s].next;
    }
}
