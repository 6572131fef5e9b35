//! Token sampling: greedy at temperature 0, otherwise temperature, top-k and
//! top-p (nucleus) over a per-request seeded RNG, so a seed reproduces a run.

#[derive(Clone, Debug, Default)]
pub struct SamplingParams {
    pub temperature: f32,
    /// 0 or >= 1 disables nucleus sampling.
    pub top_p: f32,
    /// 0 disables top-k.
    pub top_k: u32,
    pub seed: Option<u64>,
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
        Sampler { params, rng: Rng::new(seed), cands: Vec::new() }
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

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
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
        SamplingParams { temperature, top_p, top_k, seed: Some(seed) }
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
