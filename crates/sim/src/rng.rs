//! A tiny seeded pseudo-random generator (xorshift64*) for the simulator's noise.
//!
//! What it is for: deterministic "noise" — the same seed gives the same sequence on every
//! machine and every run, so simulated runs and tests are reproducible.
//! What it must never do: read entropy from the system, allocate, or be used for anything
//! that needs statistical or cryptographic quality.

/// xorshift64* (Vigna): 64 bits of state, period 2^64 − 1, good enough for sensor noise.
#[derive(Debug, Clone)]
pub struct XorShift64 {
    state: u64,
}

impl XorShift64 {
    /// A generator for `seed`. Seed 0 would stick at 0 forever, so it is remapped.
    pub fn new(seed: u64) -> Self {
        // Mix the seed (splitmix64 finaliser) so that nearby seeds give unrelated streams.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        XorShift64 { state: if z == 0 { 0x2545_F491_4F6C_DD1D } else { z } }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Standard normal (mean 0, deviation 1) by the Box–Muller transform.
    pub fn gaussian(&mut self) -> f64 {
        // 1 − u is in (0, 1], so the logarithm is finite.
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (core::f64::consts::TAU * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_seeds_differ() {
        let mut a = XorShift64::new(7);
        let mut b = XorShift64::new(7);
        let mut c = XorShift64::new(8);
        let mut differ = false;
        for _ in 0..100 {
            let x = a.next_u64();
            assert_eq!(x, b.next_u64());
            differ |= x != c.next_u64();
        }
        assert!(differ);
        assert_ne!(XorShift64::new(0).next_u64(), 0);
    }

    #[test]
    fn uniform_and_gaussian_have_sane_moments() {
        let mut r = XorShift64::new(42);
        let n = 20_000;
        let (mut su, mut sg, mut sg2) = (0.0, 0.0, 0.0);
        for _ in 0..n {
            let u = r.next_f64();
            assert!((0.0..1.0).contains(&u));
            su += u;
            let g = r.gaussian();
            sg += g;
            sg2 += g * g;
        }
        let n = n as f64;
        assert!((su / n - 0.5).abs() < 0.02);
        assert!((sg / n).abs() < 0.05);
        assert!((sg2 / n - 1.0).abs() < 0.05);
    }
}
