//! The built-in load generator: values of a fixed size at a fixed rate (a token bucket on
//! the loop's clock) or as fast as the proposer's window allows, with at most
//! `window_values` of this node's values in flight.
//!
//! A payload is an 8-byte sequence number followed by filler. Payloads are written a chunk
//! of sequence numbers at a time into a large shared arena and handed out as slices of it,
//! so proposing a value costs no copy and no allocation.

use abcast_core::Micros;
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
    filler: Vec<u8>,
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
            filler,
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
        !self.done()
            && !self.paused
            && self.in_flight < self.cfg.window_values
            && (self.cfg.rate_per_s == 0 || self.tokens >= 1.0)
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
    pub(crate) fn next_payload(&mut self) -> Bytes {
        let size = self.cfg.value_bytes;
        if size == 0 {
            return Bytes::new();
        }
        let per_chunk = (CHUNK_BYTES / size).max(1) as u64;
        let mut at = self.proposed.wrapping_sub(self.chunk_seq);
        if self.proposed < self.chunk_seq || at >= (self.chunk.len() / size) as u64 {
            let mut arena = BytesMut::with_capacity(per_chunk as usize * size);
            let head = size.min(8);
            for seq in self.proposed..self.proposed.saturating_add(per_chunk) {
                arena.extend_from_slice(&seq.to_le_bytes()[..head]);
                arena.extend_from_slice(&self.filler[head..size]);
            }
            self.chunk = arena.freeze();
            self.chunk_seq = self.proposed;
            at = 0;
        }
        let start = at as usize * size;
        self.chunk.slice(start..start + size)
    }

    pub(crate) fn on_proposed(&mut self) {
        self.proposed += 1;
        self.in_flight += 1;
        if self.cfg.rate_per_s > 0 {
            self.tokens -= 1.0;
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
        };
        let mut g = LoadGen::new(cfg, 0);
        g.on_proposed();
        let p = g.next_payload();
        assert_eq!(&p[..8], &1u64.to_le_bytes());
        assert_eq!(&p[8..10], b"ij");
    }
}
