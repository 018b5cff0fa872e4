//! The ring: membership view, failure detection and epochs.
//!
//! Seed 000 §3.2 delegates ring management to Zookeeper: nodes register, a watcher tells
//! every node its successor, and the coordinator is "the acceptor that has the lowest ID"
//! (§3.2.2). We keep the rules and drop Zookeeper: every node sends heartbeats to every
//! member, a member not heard from for `failure_timeout_us` is suspected, the successor is
//! the next unsuspected member in ring order (the ring "closes around" a failed node), and
//! the coordinator is the first unsuspected acceptor in ring order. Views may disagree for a
//! while; safety never depends on them (ballots do that), liveness needs them to converge,
//! which they do once messages flow.
//!
//! **Epochs.** An acceptor restarted on an in-memory store forgot its promises and votes. A
//! ballot whose phase 1 counted its old promise is no longer safe, so every restart of that
//! kind bumps the node's incarnation, and every node keeps the vector of incarnations it has
//! heard of (merged by maximum). Phase 1 carries the vector; phase 2 carries its fingerprint,
//! and an acceptor votes only for a phase 2 whose fingerprint equals its own vector's. A
//! coordinator that learns of a newer incarnation runs phase 1 again in the new epoch. This is
//! our answer to seed 003 §4.2 ("it must not forget its state ... or a majority of acceptors
//! never fail") for acceptors without stable storage; see `acceptor.rs` for the repair rule.

use crate::types::Micros;

#[derive(Debug)]
pub struct RingView {
    me: usize,
    last_heard_us: Vec<Micros>,
    heard_ever: Vec<bool>,
    /// Per member, the newest heartbeat seen: (incarnation, number in that life), and when
    /// it arrived.
    last_beat: Vec<(u64, u64)>,
    last_beat_us: Vec<Micros>,
    failure_timeout_us: Micros,
    /// When this node started: until a full timeout has passed, unheard members count as alive
    /// (a node must not elect itself coordinator before it had a chance to hear the others).
    started_us: Micros,
    epoch: Vec<u64>,
    epoch_fp: u64,
}

/// Bit of a ring position in a 64-bit position set.
#[inline]
pub fn bit(pos: usize) -> u64 {
    1u64 << pos
}

impl RingView {
    pub fn new(
        n: usize,
        me: usize,
        incarnation: u64,
        failure_timeout_us: Micros,
        now: Micros,
    ) -> RingView {
        let mut epoch = vec![0; n];
        epoch[me] = incarnation;
        let epoch_fp = fingerprint(&epoch);
        RingView {
            me,
            last_heard_us: vec![now; n],
            heard_ever: vec![false; n],
            last_beat: vec![(0, 0); n],
            last_beat_us: vec![0; n],
            failure_timeout_us,
            started_us: now,
            epoch,
            epoch_fp,
        }
    }

    pub fn len(&self) -> usize {
        self.last_heard_us.len()
    }
    pub fn is_empty(&self) -> bool {
        self.last_heard_us.is_empty()
    }
    pub fn me(&self) -> usize {
        self.me
    }

    /// A message of any kind arrived from `pos`: it has been in touch since this node
    /// started (`heard_ever`). Not a sign of life by itself: a message can be held in the
    /// network for seconds, and one from a process that died since must not make it look
    /// alive; heartbeats, numbered, are the signs of life ([`RingView::beat`]).
    pub fn contact(&mut self, pos: usize) {
        if let Some(h) = self.heard_ever.get_mut(pos) {
            *h = true;
        }
    }

    /// A heartbeat from `pos`, the `seq`-th of its life `incarnation`, which sends one every
    /// `interval_us`: a sign of life if it is newer than every heartbeat seen from `pos`
    /// and not late. Late: it arrived more than a failure timeout after the sender's
    /// rhythm says it was sent (`seq - last_seq` intervals after the last one arrived), as
    /// the last heartbeat of a process that died since does when the network held it (found
    /// by the simulator's held last words, uring mixed seed 1706: the ring routed phase 2
    /// through a dead node again). A sender that was frozen is alive again at its second
    /// heartbeat. Returns whether it was a sign of life.
    pub fn beat(
        &mut self,
        pos: usize,
        incarnation: u64,
        seq: u64,
        now: Micros,
        interval_us: Micros,
    ) -> bool {
        let (Some(last), Some(last_us)) = (
            self.last_beat.get(pos).copied(),
            self.last_beat_us.get(pos).copied(),
        ) else {
            return false;
        };
        if (incarnation, seq) <= last {
            return false;
        }
        let expected_gap = seq
            .saturating_sub(last.1)
            .saturating_mul(interval_us)
            .saturating_add(self.failure_timeout_us);
        let fresh =
            incarnation > last.0 || last_us == 0 || now.saturating_sub(last_us) <= expected_gap;
        self.last_beat[pos] = (incarnation, seq);
        self.last_beat_us[pos] = now.max(1);
        if fresh {
            self.heard(pos, now);
        }
        fresh
    }

    pub fn heard(&mut self, pos: usize, now: Micros) {
        if pos < self.last_heard_us.len() {
            self.last_heard_us[pos] = self.last_heard_us[pos].max(now);
            self.heard_ever[pos] = true;
        }
    }

    /// Whether this node has heard from `pos` since it started.
    pub fn heard_ever(&self, pos: usize) -> bool {
        self.heard_ever.get(pos).copied().unwrap_or(false)
    }

    pub fn alive(&self, pos: usize, now: Micros) -> bool {
        if pos == self.me {
            return true;
        }
        let in_grace = now < self.started_us + self.failure_timeout_us;
        if !self.heard_ever[pos] {
            return in_grace;
        }
        now.saturating_sub(self.last_heard_us[pos]) < self.failure_timeout_us
    }

    /// The next live position after `me` in ring order, or `None` if this node is alone.
    pub fn successor(&self, now: Micros) -> Option<usize> {
        let n = self.len();
        (1..n)
            .map(|k| (self.me + k) % n)
            .find(|&p| self.alive(p, now))
    }

    /// The first live position in ring order that satisfies `is_acceptor`.
    pub fn coordinator(&self, now: Micros, is_acceptor: impl Fn(usize) -> bool) -> Option<usize> {
        (0..self.len()).find(|&p| is_acceptor(p) && self.alive(p, now))
    }

    pub fn alive_positions(&self, now: Micros) -> Vec<usize> {
        (0..self.len()).filter(|&p| self.alive(p, now)).collect()
    }

    pub fn epoch(&self) -> &[u64] {
        &self.epoch
    }
    pub fn epoch_fp(&self) -> u64 {
        self.epoch_fp
    }

    /// Merges another node's epoch vector (component-wise maximum). Returns true if this
    /// node's vector changed. Vectors of the wrong length are ignored (not of this ring).
    pub fn merge_epoch(&mut self, other: &[u64]) -> bool {
        if other.len() != self.epoch.len() {
            return false;
        }
        let mut changed = false;
        for (mine, theirs) in self.epoch.iter_mut().zip(other) {
            if *theirs > *mine {
                *mine = *theirs;
                changed = true;
            }
        }
        if changed {
            self.epoch_fp = fingerprint(&self.epoch);
        }
        changed
    }
}

/// FNV-1a over the vector: equal vectors, equal fingerprints.
pub fn fingerprint(v: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for x in v {
        for b in x.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_closes_around_a_silent_node() {
        let mut v = RingView::new(4, 1, 0, 100, 0);
        // Grace period: everyone alive.
        assert_eq!(v.successor(50), Some(2));
        v.heard(0, 150);
        v.heard(3, 150);
        // Node 2 never heard after grace: skipped.
        assert_eq!(v.successor(200), Some(3));
        assert_eq!(v.coordinator(200, |_| true), Some(0));
        // Node 0 falls silent: node 1 (me) is the first live acceptor.
        assert_eq!(v.coordinator(400, |_| true), Some(1));
        assert_eq!(v.successor(400), None);
    }

    #[test]
    fn a_stale_heartbeat_is_no_sign_of_life() {
        let mut v = RingView::new(3, 0, 0, 100, 0);
        assert!(v.beat(1, 0, 5, 150, 10));
        // Node 1 falls silent; a heartbeat it sent before, held in the network, arrives.
        assert!(!v.alive(1, 300));
        assert!(!v.beat(1, 0, 4, 310, 10));
        assert!(!v.beat(1, 0, 5, 310, 10));
        assert!(!v.alive(1, 310), "an old heartbeat revived a silent node");
        // Its last heartbeat, sent 10 us after the one seen but held 1 ms: late.
        assert!(!v.beat(1, 0, 6, 1_150, 10));
        assert!(!v.alive(1, 1_160));
        // A frozen node resumes: its next heartbeat keeps its rhythm, and counts.
        assert!(v.beat(1, 0, 7, 1_160, 10));
        assert!(v.alive(1, 1_170));
        // Its next life starts numbering again, and counts.
        assert!(v.beat(1, 1, 1, 1_200, 10));
        assert!(v.alive(1, 1_250));
        v.contact(2);
        assert!(v.heard_ever(2));
    }

    #[test]
    fn epoch_merge_is_monotonic() {
        let mut v = RingView::new(3, 0, 0, 100, 0);
        let fp0 = v.epoch_fp();
        assert!(v.merge_epoch(&[0, 1, 0]));
        assert_ne!(v.epoch_fp(), fp0);
        assert!(!v.merge_epoch(&[0, 0, 0]));
        assert!(!v.merge_epoch(&[5, 5]));
        assert_eq!(v.epoch(), &[0, 1, 0]);
    }
}
