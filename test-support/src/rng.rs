//! A small deterministic generator for randomised tests, so that failures reproduce.

/// xorshift64*: seed it with any non-zero value.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform-ish in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// `n` floats in [-1, 1] in steps of 0.001.
    pub fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| (self.below(2001) as f32 - 1000.0) / 1000.0).collect()
    }
}
