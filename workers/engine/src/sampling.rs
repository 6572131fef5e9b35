//! Token sampling: greedy at temperature 0, otherwise temperature, top-k,
//! top-p (nucleus) and min-p over a per-request seeded RNG, so a seed
//! reproduces a run. Before either, the logits may be adjusted: the
//! repetition penalty (prompt and output), OpenAI's frequency and presence
//! penalties (output so far) and logit bias — on a copy, so logprobs still
//! report the model's own distribution.

use std::collections::HashMap;

#[derive(Clone, Debug, Default)]
pub struct SamplingParams {
    pub temperature: f32,
    /// 0 or >= 1 disables nucleus sampling.
    pub top_p: f32,
    /// 0 disables top-k.
    pub top_k: u32,
    pub seed: Option<u64>,
    /// Added to these tokens' logits (OpenAI's logit_bias).
    pub logit_bias: Vec<(u32, f32)>,
    /// logit -= count * frequency_penalty + (count > 0) * presence_penalty,
    /// counting the tokens this sequence generated.
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    /// 0 or 1 disables it: a token seen in the prompt or output has a
    /// positive logit divided by it and a negative one multiplied.
    pub repetition_penalty: f32,
    /// 0 disables it: tokens below min_p × the top probability are dropped.
    pub min_p: f32,
}

impl SamplingParams {
    fn adjusts_logits(&self) -> bool {
        !self.logit_bias.is_empty() || self.frequency_penalty != 0.0 || self.presence_penalty != 0.0 || self.penalizes_repetition()
    }

    fn penalizes_repetition(&self) -> bool {
        self.repetition_penalty > 0.0 && self.repetition_penalty != 1.0
    }
}

/// xoshiro256** seeded through SplitMix64: small, fast, and its output for a
/// seed never changes with a dependency upgrade.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E3779B97F4A7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
            z ^ (z >> 31)
        };
        Rng { s: [next(), next(), next(), next()] }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

fn entropy_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0));
    h.finish()
}

pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// Reused between steps: (logit or prob, token id).
    cands: Vec<(f32, u32)>,
    /// How often each token was sampled (frequency/presence penalties).
    generated: HashMap<u32, u32>,
    /// Tokens of the prompt and the output (repetition penalty).
    seen: HashMap<u32, ()>,
    /// The adjusted copy of the logits, reused between steps.
    adjusted: Vec<f32>,
}

pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best_v = v;
            best = i;
        }
    }
    best as u32
}

/// Log-probabilities of the model's own distribution (log-softmax of the raw
/// logits, before temperature/top-k/top-p, as OpenAI reports them): the
/// chosen token's, and the `k` most likely tokens', most likely first.
pub fn logprobs(logits: &[f32], chosen: u32, k: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let sum: f64 = logits.iter().map(|&v| ((v - max) as f64).exp()).sum();
    let lse = max + sum.ln() as f32;
    let mut top: Vec<(u32, f32)> = Vec::with_capacity(k + 1);
    if k > 0 {
        for (i, &v) in logits.iter().enumerate() {
            if top.len() == k && v <= top[k - 1].1 {
                continue;
            }
            let at = top.partition_point(|&(_, t)| t >= v);
            top.insert(at, (i as u32, v));
            top.truncate(k);
        }
    }
    for t in &mut top {
        t.1 -= lse;
    }
    (logits[chosen as usize] - lse, top)
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Self {
        let seed = params.seed.unwrap_or_else(entropy_seed);
        Sampler { params, rng: Rng::new(seed), cands: Vec::new(), generated: HashMap::new(), seen: HashMap::new(), adjusted: Vec::new() }
    }

    /// A sampler for the same request that has seen the same prompt and
    /// output, with its own RNG stream (one of n choices forked from one).
    pub fn fork(&self, seed: Option<u64>) -> Self {
        let seed = seed.unwrap_or_else(entropy_seed);
        Sampler {
            params: self.params.clone(),
            rng: Rng::new(seed),
            cands: Vec::new(),
            generated: self.generated.clone(),
            seen: self.seen.clone(),
            adjusted: Vec::new(),
        }
    }

    /// The prompt's tokens count as seen for the repetition penalty.
    pub fn prime(&mut self, prompt: &[u32]) {
        if self.params.penalizes_repetition() {
            self.seen.extend(prompt.iter().map(|&t| (t, ())));
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.params.temperature <= 0.0 || !self.params.temperature.is_finite()
    }

    /// Advances the random stream past `n` earlier samples (a sequence resumed
    /// on a replacement shard draws what it would have drawn next).
    pub fn skip_samples(&mut self, n: usize) {
        if self.is_greedy() {
            return;
        }
        for _ in 0..n {
            self.rng.next_f64();
        }
    }

    /// Samples the next token and remembers it for the penalties.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let tok = if self.params.adjusts_logits() {
            let mut adjusted = std::mem::take(&mut self.adjusted);
            adjusted.clear();
            adjusted.extend_from_slice(logits);
            self.adjust(&mut adjusted);
            let tok = self.sample_from(&adjusted);
            self.adjusted = adjusted;
            tok
        } else {
            self.sample_from(logits)
        };
        self.record(tok);
        tok
    }

    /// Like `sample`, with `mask` applied to the logits after the penalties
    /// and the bias (constrained decoding: it sets what the grammar forbids
    /// to -inf). The caller's logits are left as they are.
    pub fn sample_masked(&mut self, logits: &[f32], mask: &mut dyn FnMut(&mut [f32]) -> anyhow::Result<()>) -> anyhow::Result<u32> {
        let mut adjusted = std::mem::take(&mut self.adjusted);
        adjusted.clear();
        adjusted.extend_from_slice(logits);
        if self.params.adjusts_logits() {
            self.adjust(&mut adjusted);
        }
        let masked = mask(&mut adjusted);
        let tok = masked.map(|()| self.sample_from(&adjusted));
        self.adjusted = adjusted;
        let tok = tok?;
        self.record(tok);
        Ok(tok)
    }

    fn record(&mut self, tok: u32) {
        *self.generated.entry(tok).or_insert(0) += 1;
        if self.params.penalizes_repetition() {
            self.seen.insert(tok, ());
        }
    }

    /// Applies the penalties and the bias in place (ids beyond the vocabulary
    /// were refused before they got here, and are skipped if not).
    fn adjust(&self, logits: &mut [f32]) {
        let p = &self.params;
        if p.penalizes_repetition() {
            for &t in self.seen.keys() {
                if let Some(v) = logits.get_mut(t as usize) {
                    *v = if *v > 0.0 { *v / p.repetition_penalty } else { *v * p.repetition_penalty };
                }
            }
        }
        if p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
            for (&t, &count) in &self.generated {
                if let Some(v) = logits.get_mut(t as usize) {
                    *v -= count as f32 * p.frequency_penalty + p.presence_penalty;
                }
            }
        }
        for &(t, bias) in &p.logit_bias {
            if let Some(v) = logits.get_mut(t as usize) {
                *v += bias;
            }
        }
    }

    fn sample_from(&mut self, logits: &[f32]) -> u32 {
        if self.is_greedy() {
            return argmax(logits);
        }
        let inv_t = 1.0 / self.params.temperature;
        let cands = &mut self.cands;
        cands.clear();
        cands.extend(logits.iter().enumerate().filter(|(_, v)| v.is_finite()).map(|(i, &v)| (v * inv_t, i as u32)));
        if cands.is_empty() {
            return argmax(logits);
        }
        let by_logit_desc = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        let k = self.params.top_k as usize;
        if k > 0 && k < cands.len() {
            cands.select_nth_unstable_by(k - 1, by_logit_desc);
            cands.truncate(k);
        }
        cands.sort_unstable_by(by_logit_desc);
        let max = cands[0].0;
        let mut sum = 0f64;
        for c in cands.iter_mut() {
            c.0 = (c.0 - max).exp();
            sum += c.0 as f64;
        }
        let top_p = self.params.top_p;
        let mut total = sum;
        if top_p > 0.0 && top_p < 1.0 {
            // Keep the smallest prefix whose mass reaches top_p.
            let mut cum = 0f64;
            let mut keep = cands.len();
            for (i, c) in cands.iter().enumerate() {
                cum += c.0 as f64 / sum;
                if cum >= top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            cands.truncate(keep);
            total = cands.iter().map(|c| c.0 as f64).sum();
        }
        let min_p = self.params.min_p;
        if min_p > 0.0 {
            // cands[0] is the most likely: its weight is exp(0) = 1.
            let keep = cands.partition_point(|c| c.0 >= min_p).max(1);
            if keep < cands.len() {
                cands.truncate(keep);
                total = cands.iter().map(|c| c.0 as f64).sum();
            }
        }
        let mut r = self.rng.next_f64() * total;
        for c in cands.iter() {
            r -= c.0 as f64;
            if r < 0.0 {
                return c.1;
            }
        }
        cands.last().map(|c| c.1).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_the_log_softmax_with_the_top_k_in_order() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let (lp, top) = logprobs(&logits, 2, 3);
        let z: f64 = logits.iter().map(|&v| (v as f64).exp()).sum();
        assert!((lp as f64 - (2.0 - z.ln())).abs() < 1e-6);
        // Ties keep the lower id first; most likely first.
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3, 2]);
        assert!((top[0].1 as f64 - (3.0 - z.ln())).abs() < 1e-6);
        let mass: f64 = logits.iter().map(|&v| (v as f64 - z.ln()).exp()).sum();
        assert!((mass - 1.0).abs() < 1e-9);
        assert!(logprobs(&logits, 0, 0).1.is_empty());
    }

    fn params(temperature: f32, top_p: f32, top_k: u32, seed: u64) -> SamplingParams {
        SamplingParams { temperature, top_p, top_k, seed: Some(seed), ..Default::default() }
    }

    #[test]
    fn logit_bias_forces_and_bans_without_touching_the_callers_logits() {
        let logits = vec![5.0f32, 1.0, 0.0, -1.0];
        let mut s = Sampler::new(SamplingParams { logit_bias: vec![(3, 100.0)], ..Default::default() });
        assert_eq!(s.sample(&logits), 3);
        assert_eq!(logits[3], -1.0);
        let mut s = Sampler::new(SamplingParams { logit_bias: vec![(0, -100.0)], temperature: 1.0, seed: Some(3), ..Default::default() });
        for _ in 0..200 {
            assert_ne!(s.sample(&logits), 0);
        }
    }

    #[test]
    fn frequency_and_presence_penalties_count_what_was_generated() {
        // Greedy: token 0 leads by 1.5; frequency 1.0 makes it lose after one use.
        let logits = [2.5f32, 1.0, 0.0];
        let mut s = Sampler::new(SamplingParams { frequency_penalty: 1.0, ..Default::default() });
        let picks: Vec<u32> = (0..4).map(|_| s.sample(&logits)).collect();
        // 2.5 > 1.0, then 1.5 > 1.0, then 0.5 < 1.0, then 0.5 > 0.0.
        assert_eq!(picks, vec![0, 0, 1, 0]);
        // Presence: a flat penalty once a token appeared.
        let mut s = Sampler::new(SamplingParams { presence_penalty: 3.0, ..Default::default() });
        assert_eq!((0..3).map(|_| s.sample(&logits)).collect::<Vec<_>>(), vec![0, 1, 2]);
        // Negative values encourage repeats.
        let mut s = Sampler::new(SamplingParams { frequency_penalty: -2.0, ..Default::default() });
        assert!((0..5).all(|_| s.sample(&[1.0, 1.5]) == 1));
    }

    #[test]
    fn repetition_penalty_covers_the_prompt() {
        let logits = [2.0f32, 1.5, -1.0];
        let mut s = Sampler::new(SamplingParams { repetition_penalty: 2.0, ..Default::default() });
        s.prime(&[0]);
        // 2.0 / 2 = 1.0 < 1.5.
        assert_eq!(s.sample(&logits), 1);
        // Now 1 is seen too: 0.75 < 1.0.
        assert_eq!(s.sample(&logits), 0);
        let mut plain = Sampler::new(SamplingParams::default());
        plain.prime(&[0]);
        assert_eq!(plain.sample(&logits), 0);
    }

    #[test]
    fn min_p_drops_the_unlikely() {
        // p ∝ [e^2, e^0, e^0]: the others are e^-2 ≈ 0.135 of the top.
        let logits = [2.0f32, 0.0, 0.0];
        let mut s = Sampler::new(SamplingParams { temperature: 1.0, min_p: 0.2, seed: Some(1), ..Default::default() });
        assert!((0..300).all(|_| s.sample(&logits) == 0));
        let mut s = Sampler::new(SamplingParams { temperature: 1.0, min_p: 0.1, seed: Some(1), ..Default::default() });
        assert!((0..300).any(|_| s.sample(&logits) != 0));
    }

    #[test]
    fn forks_share_history_but_not_randomness() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.2).collect();
        let mut a = Sampler::new(SamplingParams { temperature: 1.0, frequency_penalty: 0.5, seed: Some(1), ..Default::default() });
        a.sample(&logits);
        let mut b = a.fork(Some(2));
        let mut c = a.fork(Some(2));
        let run = |s: &mut Sampler| (0..30).map(|_| s.sample(&logits)).collect::<Vec<_>>();
        let (rb, rc, ra) = (run(&mut b), run(&mut c), run(&mut a));
        assert_eq!(rb, rc);
        assert_ne!(ra, rb);
    }

    #[test]
    fn greedy_picks_argmax() {
        let mut s = Sampler::new(params(0.0, 0.0, 0, 1));
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9]), 1);
    }

    #[test]
    fn seeded_sampling_is_reproducible() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37) % 17) as f32 * 0.3).collect();
        let run = |seed| {
            let mut s = Sampler::new(params(1.0, 0.9, 40, seed));
            (0..50).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }

    #[test]
    fn top_k_one_is_greedy() {
        let logits = [0.5, 0.2, 4.0, 3.9];
        let mut s = Sampler::new(params(1.5, 0.0, 1, 9));
        for _ in 0..20 {
            assert_eq!(s.sample(&logits), 2);
        }
    }

    #[test]
    fn top_p_cuts_the_tail() {
        // Token 0 holds ~0.87 of the mass; top_p 0.5 leaves only it.
        let logits = [5.0, 3.0, 0.0, 0.0];
        let mut s = Sampler::new(params(1.0, 0.5, 0, 5));
        for _ in 0..50 {
            assert_eq!(s.sample(&logits), 0);
        }
    }

    #[test]
    fn top_k_restricts_support() {
        let logits = [1.0, 1.0, 1.0, 0.9, -5.0];
        let mut s = Sampler::new(params(1.0, 0.0, 3, 77));
        for _ in 0..200 {
            assert!(s.sample(&logits) < 3);
        }
    }

    #[test]
    fn distribution_follows_softmax() {
        // p = softmax([ln 3, 0]) = [0.75, 0.25]
        let logits = [3f32.ln(), 0.0];
        let mut s = Sampler::new(params(1.0, 0.0, 0, 1234));
        let n = 20000;
        let zeros = (0..n).filter(|_| s.sample(&logits) == 0).count();
        let frac = zeros as f64 / n as f64;
        assert!((frac - 0.75).abs() < 0.02, "frac {frac}");
    }

    #[test]
    fn temperature_sharpens() {
        let logits = [1.0, 0.0];
        let count = |t: f32| {
            let mut s = Sampler::new(params(t, 0.0, 0, 99));
            (0..5000).filter(|_| s.sample(&logits) == 0).count()
        };
        assert!(count(0.25) > count(2.0));
    }
}
