//! Choosing the next token from a row of logits: greedy (`temperature == 0`), or a seeded
//! draw from the softmax at `temperature`, restricted to the `top_k` most likely tokens
//! and then to the smallest set whose probability reaches `top_p`.
//!
//! Draws come from ChaCha8 seeded per sequence, so a seed gives the same tokens on every
//! run, backend and batch composition.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use runtime::{Error, Result};

/// How the next token is chosen, and when generation stops. `Send + Sync`, plain data.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// Tokens generated at most per prompt.
    pub max_new_tokens: usize,
    /// 0 = greedy (the default, as `transformers`' `generate`); otherwise the softmax
    /// temperature.
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`
    /// (1.0 = all).
    pub top_p: f32,
    /// Seed of the draws (sequence i of a call draws from `seed + i`).
    pub seed: u64,
    /// Tokens that end a sequence: `None` = the model's EOS ids, `Some(vec![])` = never
    /// stop before `max_new_tokens`.
    pub stop_token_ids: Option<Vec<u32>>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams { max_new_tokens: 16, temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0, stop_token_ids: None }
    }
}

impl SamplingParams {
    /// Greedy decoding of at most `max_new_tokens` tokens.
    pub fn greedy(max_new_tokens: usize) -> SamplingParams {
        SamplingParams { max_new_tokens, ..SamplingParams::default() }
    }

    /// Temperature finite and non-negative, `top_p` in (0, 1].
    pub fn validate(&self) -> Result<()> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(Error::Config(format!("sampling: temperature {} must be finite and >= 0", self.temperature)));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::Config(format!("sampling: top_p {} must be in (0, 1]", self.top_p)));
        }
        Ok(())
    }
}

/// The index of the largest finite value (the first of equals); 0 for an empty row.
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    let mut max = f32::NEG_INFINITY;
    for (i, &x) in logits.iter().enumerate() {
        if x > max {
            max = x;
            best = i;
        }
    }
    best
}

/// One sequence's sampler: its parameters and its random stream. `Send + Sync`.
#[derive(Clone, Debug)]
pub struct Sampler {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    rng: ChaCha8Rng,
}

impl Sampler {
    /// A sampler drawing from `seed`.
    pub fn new(params: &SamplingParams, seed: u64) -> Sampler {
        Sampler {
            temperature: params.temperature,
            top_k: params.top_k,
            top_p: params.top_p,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// A uniform draw in [0, 1) with 53 random bits.
    fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next token for `logits` (one row of the vocabulary).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.temperature == 0.0 || logits.len() <= 1 {
            return argmax(logits) as u32;
        }
        // Candidates by descending logit (ties by index), cut to top-k.
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        let key = |&i: &u32| logits[i as usize];
        let k = if self.top_k == 0 { logits.len() } else { self.top_k.min(logits.len()) };
        if k < order.len() {
            order.select_nth_unstable_by(k - 1, |a, b| key(b).total_cmp(&key(a)).then(a.cmp(b)));
            order.truncate(k);
        }
        order.sort_unstable_by(|a, b| key(b).total_cmp(&key(a)).then(a.cmp(b)));
        // Softmax at the temperature, in f64.
        let max = logits[order[0] as usize] as f64;
        let t = self.temperature as f64;
        let mut probs: Vec<f64> = order.iter().map(|&i| ((logits[i as usize] as f64 - max) / t).exp()).collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        // Top-p: the shortest prefix reaching top_p (at least one token).
        if self.top_p < 1.0 {
            let mut acc = 0.0;
            let mut keep = probs.len();
            for (n, p) in probs.iter().enumerate() {
                acc += p;
                if acc >= self.top_p as f64 {
                    keep = n + 1;
                    break;
                }
            }
            probs.truncate(keep);
            order.truncate(keep);
        }
        let total: f64 = probs.iter().sum();
        let mut u = self.uniform() * total;
        for (&i, &p) in order.iter().zip(&probs) {
            if u < p {
                return i;
            }
            u -= p;
        }
        order[order.len() - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOGITS: [f32; 6] = [1.0, 3.0, 2.5, -1.0, 3.0, 0.0];

    fn params(temperature: f32, top_k: usize, top_p: f32) -> SamplingParams {
        SamplingParams { temperature, top_k, top_p, ..SamplingParams::default() }
    }

    #[test]
    fn greedy_takes_the_first_largest() {
        assert_eq!(argmax(&LOGITS), 1);
        let mut s = Sampler::new(&params(0.0, 0, 1.0), 1);
        assert_eq!(s.sample(&LOGITS), 1);
    }

    #[test]
    fn top_k_one_and_tiny_top_p_are_greedy() {
        for seed in 0..50 {
            assert_eq!(Sampler::new(&params(1.5, 1, 1.0), seed).sample(&LOGITS), 1);
            assert_eq!(Sampler::new(&params(1.5, 0, 1e-6), seed).sample(&LOGITS), 1);
        }
    }

    #[test]
    fn the_same_seed_draws_the_same_tokens() {
        let draw = |seed| {
            let mut s = Sampler::new(&params(1.0, 0, 1.0), seed);
            (0..32).map(|_| s.sample(&LOGITS)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    /// With a fixed seed, 20 000 draws at temperature 1 follow the softmax within 0.015,
    /// and top-k 2 never leaves the two largest.
    #[test]
    fn draws_follow_the_softmax() {
        let mut s = Sampler::new(&params(1.0, 0, 1.0), 42);
        let n = 20_000;
        let mut counts = [0usize; 6];
        for _ in 0..n {
            counts[s.sample(&LOGITS) as usize] += 1;
        }
        let z: f64 = LOGITS.iter().map(|&x| (x as f64).exp()).sum();
        for (i, &c) in counts.iter().enumerate() {
            let p = (LOGITS[i] as f64).exp() / z;
            assert!((c as f64 / n as f64 - p).abs() < 0.015, "token {i}: {c}/{n} vs {p}");
        }
        let mut s = Sampler::new(&params(5.0, 2, 1.0), 3);
        let seen: std::collections::BTreeSet<u32> = (0..500).map(|_| s.sample(&LOGITS)).collect();
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![1, 4]);
        // top_p 0.5 at temperature 1: tokens 1 and 4 (0.36 each) reach it, 2 is cut.
        let mut s = Sampler::new(&params(1.0, 0, 0.5), 3);
        assert!((0..500).all(|_| matches!(s.sample(&LOGITS), 1 | 4)));
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(params(-1.0, 0, 1.0).validate().is_err());
        assert!(params(f32::NAN, 0, 1.0).validate().is_err());
        assert!(params(1.0, 0, 0.0).validate().is_err());
        assert!(params(1.0, 0, 1.5).validate().is_err());
        assert!(SamplingParams::default().validate().is_ok());
    }
}
