//! The simulator's one source of randomness: SplitMix64 (Steele, Lea, Flood 2014).
//!
//! Why our own generator and not `rand`: a seed must replay the same run on every machine
//! and with every future version of the dependencies. SplitMix64 is ten lines, its output
//! is fixed by its definition, and its statistical quality is ample for picking delays and
//! faults. Probabilities are integers in parts per million so that no floating-point
//! rounding can make two machines disagree.

/// A deterministic pseudo-random generator. Every random choice of a run (network delays,
/// losses, faults, workload) is drawn from one `SimRng` seeded with the run's seed, in the
/// order the events happen, so the seed alone determines the run.
#[derive(Clone, Debug)]
pub struct SimRng {
    state: u64,
}

/// One million: probabilities are expressed in parts per million.
pub const PPM: u32 = 1_000_000;

impl SimRng {
    pub fn new(seed: u64) -> SimRng {
        SimRng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)`; 0 when `n == 0`. Multiply-shift (Lemire): the bias is below
    /// `n / 2^64`, far below anything a simulation can notice.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[lo, hi]` (inclusive); `lo` when `hi <= lo`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.below(span),
            None => self.next_u64(),
        }
    }

    /// True with probability `ppm / 1_000_000`.
    pub fn chance_ppm(&mut self, ppm: u32) -> bool {
        self.below(u64::from(PPM)) < u64::from(ppm)
    }

    /// One element of `items`, or `None` when it is empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            return None;
        }
        let i = self.below(items.len() as u64) as usize;
        items.get(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_reference_output() {
        // Reference values of SplitMix64 seeded with 0 (as in the xoshiro reference seeding).
        let mut r = SimRng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn between_stays_in_range_and_hits_both_ends() {
        let mut r = SimRng::new(7);
        let (mut lo_seen, mut hi_seen) = (false, false);
        for _ in 0..10_000 {
            let v = r.between(3, 6);
            assert!((3..=6).contains(&v));
            lo_seen |= v == 3;
            hi_seen |= v == 6;
        }
        assert!(lo_seen && hi_seen);
        assert_eq!(r.between(5, 5), 5);
        assert_eq!(r.between(9, 2), 9);
    }

    #[test]
    fn chance_ppm_edges() {
        let mut r = SimRng::new(1);
        assert!((0..1000).all(|_| !r.chance_ppm(0)));
        assert!((0..1000).all(|_| r.chance_ppm(PPM)));
    }
}
