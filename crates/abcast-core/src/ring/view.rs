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
//!
//! The vector is keyed by node id ([`Epoch`]), not by ring position (issue 16 item 2), so
//! that it keeps its meaning when the membership changes; a node merges the entries of the
//! members it knows and ignores the others.

use crate::types::{Micros, NodeId};

/// An incarnation vector keyed by node id: `(id, incarnation)`, ids ascending, one entry
/// per member of the configuration it was made in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Epoch(Vec<(NodeId, u64)>);

impl Epoch {
    /// Every member at incarnation 0.
    pub fn of(ids: impl IntoIterator<Item = NodeId>) -> Epoch {
        let mut v: Vec<(NodeId, u64)> = ids.into_iter().map(|id| (id, 0)).collect();
        v.sort_unstable();
        v.dedup_by_key(|e| e.0);
        Epoch(v)
    }

    /// From `(id, incarnation)` entries; `None` unless the ids are strictly ascending (as a
    /// decoder must check).
    pub fn from_entries(v: Vec<(NodeId, u64)>) -> Option<Epoch> {
        v.windows(2).all(|w| w[0].0 < w[1].0).then_some(Epoch(v))
    }

    pub fn entries(&self) -> &[(NodeId, u64)] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn incarnation(&self, id: NodeId) -> Option<u64> {
        let i = self.0.binary_search_by_key(&id, |e| e.0).ok()?;
        Some(self.0[i].1)
    }

    /// Sets `id`'s incarnation; `false` if `id` is not in this vector.
    pub fn set(&mut self, id: NodeId, incarnation: u64) -> bool {
        match self.0.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => {
                self.0[i].1 = incarnation;
                true
            }
            Err(_) => false,
        }
    }

    /// Component-wise maximum over the ids both vectors name; returns whether this one
    /// changed. Entries of ids this vector lacks (another configuration's members) are
    /// ignored.
    pub fn merge(&mut self, other: &Epoch) -> bool {
        let mut changed = false;
        let mut j = 0;
        for (id, inc) in &other.0 {
            while j < self.0.len() && self.0[j].0 < *id {
                j += 1;
            }
            if j < self.0.len() && self.0[j].0 == *id && *inc > self.0[j].1 {
                self.0[j].1 = *inc;
                changed = true;
            }
        }
        changed
    }

    /// Members 1, 2, ... at these incarnations (message tests).
    #[cfg(test)]
    pub(crate) fn numbered(incarnations: &[u64]) -> Epoch {
        Epoch(
            incarnations
                .iter()
                .enumerate()
                .map(|(i, &x)| (NodeId(i as u32 + 1), x))
                .collect(),
        )
    }

    /// FNV-1a over the `(id, incarnation)` entries: equal vectors, equal fingerprints.
    pub fn fingerprint(&self) -> u64 {
        let mut h: u64 = 0xcbf29ce484222325;
        for (id, inc) in &self.0 {
            for b in id.0.to_le_bytes().into_iter().chain(inc.to_le_bytes()) {
                h ^= b as u64;
                h = h.wrapping_mul(0x100000001b3);
            }
        }
        h
    }
}

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
    epoch: Epoch,
    epoch_fp: u64,
}

/// Bit of a ring position in a 64-bit position set.
#[inline]
pub fn bit(pos: usize) -> u64 {
    1u64 << pos
}

impl RingView {
    /// The view of the member at position `me` of `members` (ids in ring order).
    pub fn new(
        members: &[NodeId],
        me: usize,
        incarnation: u64,
        failure_timeout_us: Micros,
        now: Micros,
    ) -> RingView {
        let n = members.len();
        assert!(me < n, "ring position {me} outside a ring of {n}");
        let mut epoch = Epoch::of(members.iter().copied());
        assert_eq!(epoch.len(), n, "a member id appears twice in {members:?}");
        epoch.set(members[me], incarnation);
        let epoch_fp = epoch.fingerprint();
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

    pub fn epoch(&self) -> &Epoch {
        &self.epoch
    }
    pub fn epoch_fp(&self) -> u64 {
        self.epoch_fp
    }

    /// Merges another node's epoch vector (component-wise maximum over the members both
    /// know). Returns true if this node's vector changed.
    pub fn merge_epoch(&mut self, other: &Epoch) -> bool {
        let changed = self.epoch.merge(other);
        if changed {
            self.epoch_fp = self.epoch.fingerprint();
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u32) -> Vec<NodeId> {
        (1..=n).map(NodeId).collect()
    }

    fn epoch(v: &[(u32, u64)]) -> Epoch {
        Epoch::from_entries(v.iter().map(|&(i, x)| (NodeId(i), x)).collect()).unwrap()
    }

    #[test]
    fn ring_closes_around_a_silent_node() {
        let mut v = RingView::new(&ids(4), 1, 0, 100, 0);
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
        let mut v = RingView::new(&ids(3), 0, 0, 100, 0);
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
        let mut v = RingView::new(&ids(3), 0, 0, 100, 0);
        let fp0 = v.epoch_fp();
        assert!(v.merge_epoch(&epoch(&[(1, 0), (2, 1), (3, 0)])));
        assert_ne!(v.epoch_fp(), fp0);
        assert!(!v.merge_epoch(&epoch(&[(1, 0), (2, 0), (3, 0)])));
        // Another configuration's vector: only the members this view knows are merged.
        assert!(v.merge_epoch(&epoch(&[(3, 4), (7, 5)])));
        assert_eq!(v.epoch(), &epoch(&[(1, 0), (2, 1), (3, 4)]));
        assert_eq!(v.epoch().incarnation(NodeId(7)), None);
        assert!(Epoch::from_entries(vec![(NodeId(2), 0), (NodeId(2), 1)]).is_none());
    }
}
