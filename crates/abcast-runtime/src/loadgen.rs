//! The built-in load generator: values of a fixed size at a fixed rate (a token bucket on
//! the loop's clock) or as fast as the proposer's window allows, with at most
//! `window_values` of this node's values in flight.
//!
//! A payload is an 8-byte sequence number followed by filler. Payloads are written a chunk
//! of sequence numbers at a time into a large shared arena (two arenas, written in turn)
//! and handed out as runs of it (`next_run`), so proposing costs no allocation and one
//! reference per run.
//!
//! With `stamp`, bytes 8..16 of each payload (of at least 16 bytes) are the time it was
//! first offered to the protocol, in microseconds of the system clock ([`stamp_now_us`]):
//! every learner on the same host can then measure the latency of every value, not only
//! of its own (seed 002 measured delivery at every receiver). Stamped payloads are written
//! when they are offered, a run at a time, into an arena reused once nothing holds it.

use abcast_core::{Micros, UniformRun};
use bytes::{Bytes, BytesMut};

/// Payloads are written in chunks of about this size (at least one payload).
const CHUNK_BYTES: usize = 256 << 10;
/// The bucket holds at most this much time's worth of tokens: enough to cover the loop's
/// millisecond wake-up granularity, small enough that a stall does not cause a burst.
const BURST_US: u64 = 5_000;

/// What the load generator does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadConfig {
    /// Values per second; 0 = as fast as the window allows.
    pub rate_per_s: u64,
    /// Payload size in bytes.
    pub value_bytes: usize,
    /// Most of this node's values proposed and not yet acknowledged.
    pub window_values: usize,
    /// Stop after this many values (tests); `None` = until stopped.
    pub max_values: Option<u64>,
    /// Propose only while this node leads (a leader-based protocol's `Status::leading`),
    /// as a client that talks to the leader does (seed 001 §4.5): every node runs a
    /// generator and only the leader's proposes, so a benchmark measures the protocol and
    /// not the followers' forwarding.
    pub leader_only: bool,
    /// Stamp each payload with its propose time (see the module comment).
    pub stamp: bool,
}

/// The smallest payload a stamp fits in: the sequence number and the time.
pub const STAMPED_VALUE_BYTES_MIN: usize = 16;

/// Microseconds of the system clock, the stamps' clock: the same for every process of one
/// host (0 if the clock is before 1970).
pub fn stamp_now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The stamp of a stamped payload, if it is long enough to hold one.
pub fn stamp_of(payload: &[u8]) -> Option<u64> {
    let b: [u8; 8] = payload.get(8..16)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

#[derive(Debug)]
pub(crate) struct LoadGen {
    pub(crate) cfg: LoadConfig,
    tokens: f64,
    last_refill_us: Micros,
    pub(crate) in_flight: usize,
    pub(crate) proposed: u64,
    /// `leader_only` and this node does not lead (refreshed every loop iteration).
    pub(crate) paused: bool,
    /// Payloads of sequence numbers `chunk_seq ..`, back to back.
    chunk: Bytes,
    chunk_seq: u64,
    /// The chunk before `chunk`: a run of payloads that crosses into a new chunk still
    /// holds slices of the old one, so the new one is written into the one before.
    spare: Bytes,
    filler: Vec<u8>,
    /// `stamp`: the payloads offered last, of sequence numbers `offered_seq ..` (offered
    /// again, stamps and all, until taken), and the arena new ones are written into.
    offered: Bytes,
    offered_seq: u64,
    arena: BytesMut,
}

impl LoadGen {
    pub(crate) fn new(cfg: LoadConfig, now: Micros) -> LoadGen {
        let paused = cfg.leader_only;
        let filler = (0..cfg.value_bytes)
            .map(|i| b'a' + (i % 26) as u8)
            .collect();
        LoadGen {
            cfg,
            tokens: 1.0,
            last_refill_us: now,
            in_flight: 0,
            proposed: 0,
            paused,
            chunk: Bytes::new(),
            chunk_seq: 0,
            spare: Bytes::new(),
            filler,
            offered: Bytes::new(),
            offered_seq: 0,
            arena: BytesMut::new(),
        }
    }

    fn burst(&self) -> f64 {
        (self.cfg.rate_per_s as f64 * BURST_US as f64 / 1e6).max(1.0)
    }

    pub(crate) fn refill(&mut self, now: Micros) {
        if self.cfg.rate_per_s > 0 {
            let dt = now.saturating_sub(self.last_refill_us) as f64;
            self.tokens = (self.tokens + dt * self.cfg.rate_per_s as f64 / 1e6).min(self.burst());
        }
        self.last_refill_us = now;
    }

    fn done(&self) -> bool {
        self.cfg.max_values.is_some_and(|m| self.proposed >= m)
    }

    /// Whether the generator wants to propose one more value now.
    pub(crate) fn wants_one(&self) -> bool {
        self.wants(1) == 1
    }

    /// How many values the generator wants to propose now, at most `max`: what its window,
    /// its tokens and `max_values` allow.
    pub(crate) fn wants(&self, max: usize) -> usize {
        if self.done() || self.paused {
            return 0;
        }
        let mut n = max.min(self.cfg.window_values.saturating_sub(self.in_flight));
        if let Some(m) = self.cfg.max_values {
            n = n.min(usize::try_from(m.saturating_sub(self.proposed)).unwrap_or(usize::MAX));
        }
        if self.cfg.rate_per_s > 0 {
            // Tokens are at most `burst()`, a few thousand: the cast cannot overflow.
            n = n.min(self.tokens.max(0.0).floor() as usize);
        }
        n
    }

    /// How long until a token is available, if that (and nothing else) is what the
    /// generator waits for.
    pub(crate) fn wait_us(&self) -> Option<Micros> {
        if self.done()
            || self.in_flight >= self.cfg.window_values
            || self.cfg.rate_per_s == 0
            || self.tokens >= 1.0
        {
            // Nothing to wait for on the clock: the generator is done, waits for acks, or
            // has a token and waits for the protocol's window (an event wakes the loop).
            return None;
        }
        let missing = (1.0 - self.tokens).max(0.0);
        Some((missing * 1e6 / self.cfg.rate_per_s as f64).ceil() as Micros)
    }

    /// The next payload: sequence number (`proposed`), then filler. Calling it again
    /// without [`LoadGen::on_proposed`] in between gives the same payload again.
    #[cfg(test)]
    pub(crate) fn next_payload(&mut self) -> Bytes {
        self.payload_at(self.proposed)
    }

    /// The payloads of the next values, at most `n` and at least one when `n > 0`: those
    /// `next_payload` would give one by one with `on_proposed` in between, as one run of
    /// one chunk (one slice, not one per value). Calling it again without
    /// `on_proposed_many` gives the same payloads again.
    pub(crate) fn next_run(&mut self, n: usize) -> UniformRun {
        let size = self.cfg.value_bytes;
        if size == 0 {
            return UniformRun::empty_values(n);
        }
        if self.cfg.stamp && size >= STAMPED_VALUE_BYTES_MIN {
            return self.stamped_run(n);
        }
        let at = self.chunk_index(self.proposed);
        let count = n.min(self.chunk.len() / size - at);
        UniformRun::of(self.chunk.slice(at * size..(at + count) * size), size)
    }

    /// [`LoadGen::next_run`] with stamps: what was offered and not taken yet is offered
    /// again as it was; otherwise `n` new payloads are written, stamped now.
    fn stamped_run(&mut self, n: usize) -> UniformRun {
        let size = self.cfg.value_bytes;
        let taken = self.proposed.saturating_sub(self.offered_seq);
        let left = (self.offered.len() / size) as u64;
        if self.proposed >= self.offered_seq && taken < left {
            let at = taken as usize * size;
            let count = n.min((left - taken) as usize).max(1);
            return UniformRun::of(self.offered.slice(at..at + count * size), size);
        }
        let n = n.max(1);
        // Reclaims the arena's memory when nothing holds the runs written before.
        self.arena.reserve(n * size);
        let stamp = stamp_now_us().to_le_bytes();
        for seq in self.proposed..self.proposed.saturating_add(n as u64) {
            self.arena.extend_from_slice(&seq.to_le_bytes());
            self.arena.extend_from_slice(&stamp);
            self.arena
                .extend_from_slice(&self.filler[STAMPED_VALUE_BYTES_MIN..size]);
        }
        self.offered = self.arena.split().freeze();
        self.offered_seq = self.proposed;
        UniformRun::of(self.offered.clone(), size)
    }

    /// The payload of sequence number `seq`.
    #[cfg(test)]
    fn payload_at(&mut self, seq: u64) -> Bytes {
        let size = self.cfg.value_bytes;
        if size == 0 {
            return Bytes::new();
        }
        let start = self.chunk_index(seq) * size;
        self.chunk.slice(start..start + size)
    }

    /// Where payload `seq` is in the chunk, after starting a new chunk at `seq` if the
    /// current one does not hold it (`value_bytes > 0`). A new chunk reuses the memory of
    /// the chunk before the current one when nothing holds a slice of it any more (no
    /// allocation, no page faults: the kernel's zeroing of fresh pages was a tenth of a
    /// 16-byte-value leader's time).
    fn chunk_index(&mut self, seq: u64) -> usize {
        let size = self.cfg.value_bytes.max(1);
        let per_chunk = (CHUNK_BYTES / size).max(1) as u64;
        let mut at = seq.wrapping_sub(self.chunk_seq);
        if seq < self.chunk_seq || at >= (self.chunk.len() / size) as u64 {
            let capacity = per_chunk as usize * size;
            let reuse = std::mem::replace(&mut self.spare, std::mem::take(&mut self.chunk));
            let mut arena = match reuse.try_into_mut() {
                Ok(mut old) if old.capacity() >= capacity => {
                    old.clear();
                    old
                }
                _ => BytesMut::with_capacity(capacity),
            };
            let head = size.min(8);
            for s in seq..seq.saturating_add(per_chunk) {
                arena.extend_from_slice(&s.to_le_bytes()[..head]);
                arena.extend_from_slice(&self.filler[head..size]);
            }
            self.chunk = arena.freeze();
            self.chunk_seq = seq;
            at = 0;
        }
        at as usize
    }

    #[cfg(test)]
    pub(crate) fn on_proposed(&mut self) {
        self.on_proposed_many(1);
    }

    pub(crate) fn on_proposed_many(&mut self, n: usize) {
        self.proposed += n as u64;
        self.in_flight += n;
        if self.cfg.rate_per_s > 0 {
            self.tokens -= n as f64;
        }
    }

    pub(crate) fn on_acked(&mut self, count: usize) {
        self.in_flight = self.in_flight.saturating_sub(count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_only_generator_proposes_only_while_unpaused() {
        let cfg = LoadConfig {
            rate_per_s: 0,
            value_bytes: 16,
            window_values: 4,
            max_values: None,
            leader_only: true,
            stamp: false,
        };
        let mut g = LoadGen::new(cfg, 0);
        assert!(
            !g.wants_one(),
            "paused until the driver sees this node lead"
        );
        g.paused = false;
        assert!(g.wants_one());
        g.paused = true;
        assert!(!g.wants_one());
    }

    #[test]
    fn rate_limit_follows_the_clock() {
        let cfg = LoadConfig {
            rate_per_s: 1000,
            value_bytes: 16,
            window_values: 1 << 20,
            max_values: None,
            leader_only: false,
            stamp: false,
        };
        let mut g = LoadGen::new(cfg, 0);
        let mut proposed = 0;
        for ms in 0..1000u64 {
            g.refill(ms * 1000);
            while g.wants_one() {
                let p = g.next_payload();
                assert_eq!(p.len(), 16);
                g.on_proposed();
                proposed += 1;
            }
        }
        assert!((990..=1010).contains(&proposed), "{proposed}");
    }

    #[test]
    fn window_and_limit_stop_the_generator() {
        let cfg = LoadConfig {
            rate_per_s: 0,
            value_bytes: 4,
            window_values: 3,
            max_values: Some(5),
            leader_only: false,
            stamp: false,
        };
        let mut g = LoadGen::new(cfg, 0);
        while g.wants_one() {
            assert_eq!(g.next_payload().len(), 4);
            g.on_proposed();
        }
        assert_eq!(g.proposed, 3);
        g.on_acked(3);
        while g.wants_one() {
            g.next_payload();
            g.on_proposed();
        }
        assert_eq!(g.proposed, 5);
    }

    #[test]
    fn payloads_follow_the_proposals_across_chunks() {
        for size in [1, 3, 8, 16, 1000, CHUNK_BYTES + 5] {
            let cfg = LoadConfig {
                rate_per_s: 0,
                value_bytes: size,
                window_values: usize::MAX,
                max_values: None,
                leader_only: false,
                stamp: false,
            };
            let mut g = LoadGen::new(cfg, 0);
            let per_chunk = (CHUNK_BYTES / size).max(1) as u64;
            for n in 0..(2 * per_chunk + 3).min(40_000) {
                let p = g.next_payload();
                // A refused proposal asks again: the same payload.
                assert_eq!(g.next_payload(), p);
                let head = size.min(8);
                assert_eq!(p.len(), size);
                assert_eq!(&p[..head], &n.to_le_bytes()[..head], "size {size} seq {n}");
                assert_eq!(&p[head..], &g.filler[head..], "size {size} seq {n}");
                g.on_proposed();
            }
        }
    }

    #[test]
    fn payload_starts_with_its_sequence_number() {
        let cfg = LoadConfig {
            rate_per_s: 0,
            value_bytes: 20,
            window_values: 10,
            max_values: None,
            leader_only: false,
            stamp: false,
        };
        let mut g = LoadGen::new(cfg, 0);
        g.on_proposed();
        let p = g.next_payload();
        assert_eq!(&p[..8], &1u64.to_le_bytes());
        assert_eq!(&p[8..10], b"ij");
    }

    #[test]
    fn runs_of_payloads_are_the_one_by_one_payloads_and_reuse_the_chunk() {
        for size in [0, 16, 1000] {
            let cfg = LoadConfig {
                rate_per_s: 0,
                value_bytes: size,
                window_values: 100_000,
                max_values: Some(40_000),
                leader_only: false,
                stamp: false,
            };
            let mut one = LoadGen::new(cfg.clone(), 0);
            let mut many = LoadGen::new(cfg, 0);
            let mut chunks = std::collections::BTreeSet::new();
            while many.wants(1000) > 0 {
                let run = many.next_run(many.wants(777));
                assert!(run.count() >= 1);
                if many.proposed == 0 {
                    // Refused: asked again, the same run.
                    assert_eq!(many.next_run(777), run);
                }
                for i in 0..run.count() {
                    let p = run.get(i).expect("in the run");
                    assert_eq!(p, one.next_payload(), "size {size}");
                    one.on_proposed();
                }
                if size > 0 {
                    chunks.insert(
                        run.data().as_ptr() as usize
                            - (many.proposed - many.chunk_seq) as usize * size,
                    );
                }
                let n = run.count();
                drop(run);
                many.on_proposed_many(n);
                many.on_acked(n);
            }
            assert_eq!(many.proposed, 40_000, "max_values bounds the runs");
            assert_eq!(many.wants(1), 0);
            if size == 16 {
                // 40,000 values of 16 bytes fill 2.4 chunks: the third is the first again.
                assert_eq!(chunks.len(), 2, "chunks in use");
            }
        }
    }

    #[test]
    fn stamped_payloads_carry_their_propose_time_and_are_offered_again_until_taken() {
        let cfg = LoadConfig {
            rate_per_s: 0,
            value_bytes: 40,
            window_values: 1000,
            max_values: None,
            leader_only: false,
            stamp: true,
        };
        let mut g = LoadGen::new(cfg, 0);
        let before = stamp_now_us();
        let run = g.next_run(5);
        let after = stamp_now_us();
        assert_eq!(run.count(), 5);
        let first = run.data().slice(0..40);
        assert_eq!(&first[..8], &0u64.to_le_bytes());
        let stamp = stamp_of(&first).unwrap();
        assert!(before <= stamp && stamp <= after);
        assert_eq!(&first[16..], &g.filler[16..40]);
        // Two taken: the other three are offered again, stamps and all.
        g.on_proposed_many(2);
        let again = g.next_run(10);
        assert_eq!(again.count(), 3);
        assert_eq!(again.data()[..], run.data()[80..]);
        assert_eq!(&again.data()[..8], &2u64.to_le_bytes());
        g.on_proposed_many(3);
        let fresh = g.next_run(4);
        assert_eq!(fresh.count(), 4);
        assert_eq!(&fresh.data()[..8], &5u64.to_le_bytes());
        assert!(stamp_of(&fresh.data()[..40]).unwrap() >= stamp);
        // Too small for a stamp: the plain payloads.
        let small = LoadConfig {
            value_bytes: 12,
            ..g.cfg.clone()
        };
        let mut s = LoadGen::new(small, 0);
        assert_eq!(&s.next_run(1).data()[8..12], b"ijkl");
        assert_eq!(stamp_of(b"short"), None);
    }
}
