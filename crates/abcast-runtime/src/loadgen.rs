//! The built-in load generator: values of a fixed size at a fixed rate (a token bucket on
//! the loop's clock) or as fast as the proposer's window allows, with at most
//! `window_values` of this node's values in flight.
//!
//! A payload is an 8-byte sequence number followed by filler. Payloads are cut from a large
//! shared arena, so proposing a value costs one copy of its bytes and no allocation.

use abcast_core::Micros;
use bytes::{Bytes, BytesMut};

/// Payloads are cut from arenas of at least this size.
const ARENA_BYTES: usize = 4 << 20;
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
    arena: BytesMut,
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
            arena: BytesMut::new(),
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

    /// The next payload: sequence number, then filler.
    pub(crate) fn next_payload(&mut self) -> Bytes {
        let size = self.cfg.value_bytes;
        if self.arena.capacity() - self.arena.len() < size {
            self.arena = BytesMut::with_capacity(ARENA_BYTES.max(size));
        }
        let seq = self.proposed.to_le_bytes();
        let head = size.min(seq.len());
        self.arena.extend_from_slice(&seq[..head]);
        self.arena.extend_from_slice(&self.filler[head..size]);
        self.arena.split().freeze()
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
