//! The deterministic merge of seed 000 §2.4 (figure 2.3) and §3.1.4 (`MultiRingLearner`).
//!
//! Every decided instance of a ring takes *slots* in that ring's slot sequence: one for an
//! instance of values, a no-op or a control, `k` for a skip of `k`. Slot `s` of any ring
//! belongs to *turn* `s / M`. The global order is: turn by turn; within a turn, ring by ring
//! in group order; within a ring, slot order. A learner delivers, in that order, the values
//! of the rings it follows. Because every learner of a ring sees the same decided sequence
//! (Paxos agreement), and the slot sequence is a function of it, any two learners deliver
//! the values they share in the same relative order: the atomic-multicast guarantee.
//!
//! A learner follows a ring from a turn to a turn. Both ends are set by a control value
//! decided in that ring (see `mod.rs`, subscribe), so they are a function of the ring's
//! decided sequence too. While a control it asked for is undecided, the learner does not
//! start its *barrier* turn (the turn it was at when it asked), so the decided turn can
//! never be one it has passed.
//!
//! Bounded: a ring this learner does not follow keeps nothing (its entries can never be
//! needed: a subscription starts after the control that asks for it); a ring it follows
//! keeps what waits for the other rings, and `mod.rs` pauses that ring's delivery when
//! its queue is full.

use crate::protocol::{Delivery, Subscription};
use crate::types::GroupId;
use std::collections::VecDeque;

/// A decided instance of values waiting in the merge (instances that deliver nothing only
/// move the ring's frontier).
#[derive(Debug)]
pub(crate) struct Entry {
    /// The slot of the instance.
    pub slot: u64,
    pub delivery: Delivery,
}

/// Whether a ring is followed, and from which turn to which.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Follow {
    Off,
    /// Delivered from turn `from` (inclusive) to `until` (exclusive), if set.
    On {
        from: u64,
        until: Option<u64>,
    },
}

impl Follow {
    /// Whether the ring is delivered in `turn`.
    pub fn active_at(self, turn: u64) -> bool {
        match self {
            Follow::Off => false,
            Follow::On { from, until } => from <= turn && until.is_none_or(|u| turn < u),
        }
    }

    /// The turns from `turn` on in which the ring is delivered: `(first, end)` (`end`
    /// exclusive, `None` for no end), or `None` for none. Two follow states with the same
    /// span from a turn deliver the same values from there.
    pub fn span_from(self, turn: u64) -> Option<(u64, Option<u64>)> {
        match self {
            Follow::Off => None,
            Follow::On { from, until } => {
                let first = from.max(turn);
                match until {
                    Some(u) if u <= first => None,
                    u => Some((first, u)),
                }
            }
        }
    }

    /// Whether the ring is delivered in any turn from `turn` on.
    pub fn followed_from(self, turn: u64) -> bool {
        self.span_from(turn).is_some()
    }

    /// Whether the learner has said it follows the ring (`Outbox::subscriptions`) once
    /// every turn below `turn` is delivered and `turn` is not started: a subscription from
    /// turn 0 is announced at start, a later one when its turn starts; an unsubscribe takes
    /// effect when its turn starts (`Merger::run`).
    pub fn seen_at(self, turn: u64) -> bool {
        match self {
            Follow::Off => false,
            Follow::On { from, until } => {
                (from == 0 || from < turn) && until.is_none_or(|u| u >= turn)
            }
        }
    }
}

#[derive(Debug)]
pub(crate) struct RingQueue {
    pub group: GroupId,
    /// This node is a learner of the ring: it may follow it.
    pub learner: bool,
    /// Slots of every instance decided and drained here so far: the next entry's slot.
    pub frontier: u64,
    pub follow: Follow,
    pub queue: VecDeque<Entry>,
    pub queued_bytes: usize,
    /// Entries that were not skips, counted for the rate reports (see `skip.rs`).
    pub value_slots: u64,
}

impl RingQueue {
    fn active_in(&self, turn: u64) -> bool {
        self.follow.active_at(turn)
    }
}

#[derive(Debug)]
pub(crate) struct Merger {
    /// Slots per ring per turn (seed 000's `m`).
    pub m: u64,
    /// Every turn below this one is delivered; this one is not started.
    pub turn: u64,
    /// Rings in group order: the fixed ring order of a turn.
    pub rings: Vec<RingQueue>,
    /// A control this learner asked for is undecided: the merge stops before this turn.
    pub barrier: Option<u64>,
}

/// Turns crossed in one `run` at most (a skip of many slots is crossed in one jump, so this
/// only bounds a pathological interleaving).
const TURNS_PER_RUN_MAX: usize = 1 << 16;

impl Merger {
    pub fn new(m: u64, mut rings: Vec<RingQueue>) -> Merger {
        rings.sort_by_key(|r| r.group);
        debug_assert!(m >= 1);
        Merger {
            m: m.max(1),
            turn: 0,
            rings,
            barrier: None,
        }
    }

    pub fn ring_index(&self, group: GroupId) -> Option<usize> {
        self.rings.binary_search_by_key(&group, |r| r.group).ok()
    }

    /// A decided instance of ring `r` taking `slots` slots, with what it delivers.
    pub fn push(&mut self, r: usize, slots: u64, delivery: Option<Delivery>) {
        let m = self.m;
        let turn = self.turn;
        let ring = &mut self.rings[r];
        let slot = ring.frontier;
        ring.frontier += slots.max(1);
        let keep = match ring.follow {
            Follow::Off => false,
            Follow::On { from, until } => {
                // Below the current turn can only be a turn this ring did not take part in.
                let t = slot / m;
                t >= from.max(turn) && until.is_none_or(|u| t < u)
            }
        };
        if !keep {
            return;
        }
        let Some(delivery) = delivery else {
            // A skip, no-op or control: nothing to deliver, and the frontier already says
            // how far it reaches. Queued, it would only count as buffered (a quiet ring's
            // one-slot skips, waiting for a ring that is behind).
            return;
        };
        ring.queued_bytes += delivery.batch.payload_bytes();
        ring.queue.push_back(Entry { slot, delivery });
    }

    /// Sets when ring `r` is followed, dropping what that makes useless.
    pub fn set_follow(&mut self, r: usize, follow: Follow) {
        let m = self.m;
        let ring = &mut self.rings[r];
        ring.follow = follow;
        if let Follow::On { from, until } = follow {
            let lo = from * m;
            let hi = until.map_or(u64::MAX, |u| u.saturating_mul(m));
            ring.queue.retain(|e| e.slot >= lo && e.slot < hi);
        } else {
            ring.queue.clear();
        }
        ring.queued_bytes = ring
            .queue
            .iter()
            .map(|e| e.delivery.batch.payload_bytes())
            .sum();
    }

    /// Delivers every turn that is complete: for each ring followed in it, every slot of the
    /// turn is decided. Appends deliveries and, at the turn they take effect, subscription
    /// changes (positioned among the deliveries).
    pub fn run(&mut self, deliveries: &mut Vec<Delivery>, subs: &mut Vec<Subscription>) {
        for _ in 0..TURNS_PER_RUN_MAX {
            if self.barrier.is_some_and(|b| self.turn >= b) {
                return;
            }
            let t = self.turn;
            let end = (t + 1) * self.m;
            // Rings followed in turn t must have decided all of its slots.
            let mut any_active = false;
            for r in &self.rings {
                if r.active_in(t) {
                    any_active = true;
                    if r.frontier < end {
                        return;
                    }
                }
            }
            if !any_active {
                // Nothing followed in this turn: move with the learner rings, so a ring
                // subscribed later starts near its present, not at turn 0.
                let Some(min) = self
                    .rings
                    .iter()
                    .filter(|r| r.learner)
                    .map(|r| r.frontier)
                    .min()
                else {
                    return;
                };
                if min < end {
                    return;
                }
            }
            // Changes taking effect at turn t.
            for r in &self.rings {
                if let Follow::On { from, until } = r.follow {
                    if from == t && t != 0 {
                        subs.push(Subscription {
                            group: r.group,
                            subscribed: true,
                            from_start: false,
                            position: deliveries.len(),
                        });
                    }
                    if until == Some(t) {
                        subs.push(Subscription {
                            group: r.group,
                            subscribed: false,
                            from_start: false,
                            position: deliveries.len(),
                        });
                    }
                }
            }
            for r in self.rings.iter_mut() {
                if let Follow::On { until: Some(u), .. } = r.follow
                    && u <= t
                {
                    r.follow = Follow::Off;
                    r.queue.clear();
                    r.queued_bytes = 0;
                    continue;
                }
                let active = r.active_in(t);
                while r.queue.front().is_some_and(|e| e.slot < end) {
                    let Some(e) = r.queue.pop_front() else { break };
                    r.queued_bytes -= e.delivery.batch.payload_bytes();
                    if active {
                        deliveries.push(e.delivery);
                    }
                }
            }
            self.turn = self.next_turn(t);
        }
    }

    /// The next turn worth looking at after completing turn `t`: the following one, or
    /// further when every followed ring's next entry and frontier lie further (a skip
    /// crossing many turns), never past a barrier or a turn where a ring starts or stops.
    fn next_turn(&self, t: u64) -> u64 {
        let m = self.m;
        let mut next = u64::MAX;
        let mut any_active = false;
        for r in &self.rings {
            if let Follow::On { from, until } = r.follow {
                if from > t {
                    next = next.min(from);
                }
                if let Some(u) = until
                    && u > t
                {
                    next = next.min(u);
                }
            }
            if r.active_in(t + 1) {
                any_active = true;
                let head = r.queue.front().map_or(r.frontier, |e| e.slot);
                next = next.min(head.min(r.frontier) / m);
            }
        }
        if !any_active {
            return t + 1;
        }
        if let Some(b) = self.barrier {
            next = next.min(b);
        }
        next.max(t + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Batch, NodeId, ValueId};
    use bytes::Bytes;

    fn ring(group: u16, follow: Follow) -> RingQueue {
        RingQueue {
            group: GroupId(group),
            learner: true,
            frontier: 0,
            follow,
            queue: VecDeque::new(),
            queued_bytes: 0,
            value_slots: 0,
        }
    }

    fn d(group: u16, instance: u64) -> Option<Delivery> {
        let id = ValueId {
            node: NodeId(u32::from(group)),
            seq: instance,
        };
        Some(Delivery {
            group: GroupId(group),
            instance,
            batch: Batch::single(id, Bytes::from_static(b"v")),
            level: Default::default(),
        })
    }

    fn order(out: &[Delivery]) -> Vec<(u16, u64)> {
        out.iter().map(|d| (d.group.0, d.instance)).collect()
    }

    const ON: Follow = Follow::On {
        from: 0,
        until: None,
    };

    #[test]
    fn round_robin_m_values_per_ring_in_group_order() {
        let mut m = Merger::new(2, vec![ring(2, ON), ring(1, ON)]);
        let (mut out, mut subs) = (Vec::new(), Vec::new());
        for i in 1..=4 {
            m.push(1, 1, d(2, i));
        }
        m.run(&mut out, &mut subs);
        assert!(
            out.is_empty(),
            "ring 1 has decided nothing: turn 0 is not complete"
        );
        for i in 1..=4 {
            m.push(0, 1, d(1, i));
        }
        m.run(&mut out, &mut subs);
        assert_eq!(
            order(&out),
            vec![
                (1, 1),
                (1, 2),
                (2, 1),
                (2, 2),
                (1, 3),
                (1, 4),
                (2, 3),
                (2, 4)
            ]
        );
    }

    #[test]
    fn a_skip_lets_the_busy_ring_through_in_one_jump() {
        let mut m = Merger::new(1, vec![ring(1, ON), ring(2, ON)]);
        let (mut out, mut subs) = (Vec::new(), Vec::new());
        m.push(1, 1_000_000, None); // ring 2 skips a million slots
        for i in 1..=3 {
            m.push(0, 1, d(1, i));
        }
        m.run(&mut out, &mut subs);
        assert_eq!(order(&out), vec![(1, 1), (1, 2), (1, 3)]);
        assert_eq!(m.turn, 3);
    }

    #[test]
    fn a_ring_not_followed_keeps_nothing_and_blocks_nothing() {
        let mut m = Merger::new(1, vec![ring(1, ON), ring(2, Follow::Off)]);
        let (mut out, mut subs) = (Vec::new(), Vec::new());
        for i in 1..=100 {
            m.push(1, 1, d(2, i));
        }
        m.push(0, 1, d(1, 1));
        m.run(&mut out, &mut subs);
        assert_eq!(order(&out), vec![(1, 1)]);
        assert!(m.rings[1].queue.is_empty());
    }

    #[test]
    fn subscription_starts_and_ends_at_agreed_turns() {
        let mut m = Merger::new(1, vec![ring(1, ON), ring(2, Follow::Off)]);
        m.set_follow(
            1,
            Follow::On {
                from: 2,
                until: Some(4),
            },
        );
        let (mut out, mut subs) = (Vec::new(), Vec::new());
        for i in 0..6 {
            m.push(0, 1, d(1, i));
            m.push(1, 1, d(2, i));
        }
        m.run(&mut out, &mut subs);
        assert_eq!(
            order(&out),
            vec![
                (1, 0),
                (1, 1),
                (1, 2),
                (2, 2),
                (1, 3),
                (2, 3),
                (1, 4),
                (1, 5)
            ]
        );
        assert_eq!(subs.len(), 2);
        assert!(subs[0].subscribed && subs[0].position == 2);
        assert!(!subs[1].subscribed && subs[1].position == 6);
    }

    #[test]
    fn follow_points_read_alike_from_a_turn_on() {
        let on = |from, until| Follow::On { from, until };
        // Subscribed from the start and from turn 5 deliver the same from turn 8 on.
        assert_eq!(on(0, None).span_from(8), on(5, None).span_from(8));
        assert_eq!(on(0, None).span_from(8), Some((8, None)));
        // Not from turn 3: ring 1 starts at 5 for one of them.
        assert_ne!(on(0, None).span_from(3), on(5, None).span_from(3));
        // An unsubscribe at turn 6 ends it; from turn 6 on it is not followed at all.
        assert_eq!(on(0, Some(6)).span_from(2), Some((2, Some(6))));
        assert_eq!(on(0, Some(6)).span_from(6), None);
        assert!(!Follow::Off.followed_from(0));
        // Announced: a subscription from 0 at once, a later one once its turn started; an
        // unsubscribe stops at its turn.
        assert!(on(0, None).seen_at(0));
        assert!(!on(4, None).seen_at(4) && on(4, None).seen_at(5));
        assert!(on(0, Some(4)).seen_at(4) && !on(0, Some(4)).seen_at(5));
        assert!(on(4, None).active_at(4) && !on(4, None).active_at(3));
    }

    #[test]
    fn the_barrier_holds_the_merge_until_the_control_is_decided() {
        let mut m = Merger::new(1, vec![ring(1, ON)]);
        m.barrier = Some(1);
        let (mut out, mut subs) = (Vec::new(), Vec::new());
        for i in 0..3 {
            m.push(0, 1, d(1, i));
        }
        m.run(&mut out, &mut subs);
        assert_eq!(order(&out), vec![(1, 0)]);
        m.barrier = None;
        m.run(&mut out, &mut subs);
        assert_eq!(order(&out), vec![(1, 0), (1, 1), (1, 2)]);
    }
}
