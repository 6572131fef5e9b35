//! The prefix cache: keys and values already computed for a prompt (or a
//! whole conversation so far) kept for later prompts that start with the same
//! tokens — a shared system prompt, the next turn of a chat. A position's keys
//! and values depend only on the tokens up to it, so a reusing prompt copies
//! them and computes only the rest, with the same result.
//!
//! Entries are scoped by a cache salt (vLLM's `cache_salt`): the router sends
//! an opaque per-tenant scope with each generation, and an entry is reused
//! only by a request with the same salt (no salt only matches no salt), so
//! one tenant's cached prompt can't speed up — and so reveal itself to —
//! another tenant's identical one.

use crate::llama::{KvCache, LlamaModel};

/// Default bound per model (SWITCHYARD_PREFIX_CACHE_MB overrides; 0 turns it off).
pub const DEFAULT_PREFIX_CACHE_BYTES: usize = 256 << 20;

/// Shorter common prefixes are recomputed: not worth an entry's copy.
pub const MIN_PREFIX_REUSE: usize = 8;

struct Entry {
    salt: String,
    tokens: Vec<u32>,
    cache: KvCache,
    last_used: u64,
}

pub struct PrefixCache {
    entries: Vec<Entry>,
    cap: usize,
    clock: u64,
    /// Prompts that took a prefix from here, and the positions they took.
    pub hits: u64,
    pub tokens_reused: u64,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl PrefixCache {
    pub fn new(cap: usize) -> Self {
        PrefixCache { entries: Vec::new(), cap, clock: 0, hits: 0, tokens_reused: 0 }
    }

    /// Bounds the cache (0 turns it off and empties it).
    pub fn set_cap(&mut self, cap: usize) {
        self.cap = cap;
        self.evict();
    }

    pub fn bytes(&self) -> u64 {
        self.entries.iter().map(|e| e.cache.bytes() as u64).sum()
    }

    fn evict(&mut self) {
        while self.bytes() > self.cap as u64 {
            let lru = (0..self.entries.len()).min_by_key(|&i| self.entries[i].last_used).expect("non-empty");
            self.entries.swap_remove(lru);
        }
    }

    /// Fills `cache` with the longest prefix of `prompt` cached under `salt`,
    /// leaving at least its last token to compute (its logits start the
    /// answer); how many positions it took.
    pub fn reuse(&mut self, salt: &str, prompt: &[u32], cache: &mut KvCache) -> usize {
        let limit = prompt.len().saturating_sub(1);
        let best = (0..self.entries.len())
            .filter(|&i| self.entries[i].salt == salt)
            .map(|i| (common_prefix(&self.entries[i].tokens, prompt).min(limit), i))
            .max();
        let Some((n, i)) = best else { return 0 };
        if n < MIN_PREFIX_REUSE || cache.copy_prefix_from(&self.entries[i].cache, n).is_err() {
            return 0;
        }
        self.clock += 1;
        self.entries[i].last_used = self.clock;
        self.hits += 1;
        self.tokens_reused += n as u64;
        n
    }

    /// Keeps `cache`'s positions for `tokens` under `salt` (trimmed to a
    /// cache of exactly that length), unless an entry of that salt already
    /// covers them; entries of that salt they cover go, and the least
    /// recently used beyond the bound.
    pub fn keep(&mut self, model: &LlamaModel, salt: &str, tokens: Vec<u32>, cache: &KvCache) {
        let n = tokens.len();
        if self.cap == 0 || n < MIN_PREFIX_REUSE || n > cache.len {
            return;
        }
        if self.entries.iter().any(|e| e.salt == salt && e.tokens.starts_with(&tokens)) {
            return;
        }
        let Ok(mut tight) = model.new_cache(n) else { return };
        if tight.copy_prefix_from(cache, n).is_err() || tight.bytes() > self.cap {
            return;
        }
        self.entries.retain(|e| e.salt != salt || !tokens.starts_with(&e.tokens));
        self.clock += 1;
        self.entries.push(Entry { salt: salt.to_string(), tokens, cache: tight, last_used: self.clock });
        self.evict();
    }
}
