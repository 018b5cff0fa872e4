//! Learner: seed 003 §4.1 (learn a value once both its `Phase2a` and its decision are here),
//! §4.2 (lost messages are asked of other processes; each learner has a preferred acceptor)
//! and §6.1 (values wait in a buffer until they can be delivered in order).
//!
//! The learner state itself (instance order, payload matching, de-duplication of a batch
//! decided twice) is U-Ring Paxos' `LearnerState`; every node keeps one (acceptors need the
//! decisions to answer retransmissions and to be repaired), only learners deliver.
//!
//! Recovery: a learner behind what it knows decided, or holding a decision whose value it
//! has not got, asks after `retrieve_timeout_us`, alternately the coordinator (its
//! retransmission buffer) and its preferred acceptor (learner index mod ring size, §4.2),
//! then the other live acceptors. Answers are unicast `Decided` messages with full values.

use super::messages::{Decided, Retrieve};
use super::{Message, Out, RingPaxos};
use crate::ring::{RingHost, bit};
use crate::types::{Ballot, Decree};

impl RingPaxos {
    /// Whom to ask, in order: the coordinator, the preferred acceptor, the other live acceptors.
    pub(crate) fn retrieve_targets(&self) -> Vec<usize> {
        let mut v: Vec<usize> = Vec::new();
        let alive = |p: usize| p != self.node.pos && self.node.view.alive(p, self.node.now);
        if let Some(c) = self.node.coordinator_pos().filter(|&c| alive(c)) {
            v.push(c);
        }
        let ring: Vec<usize> = self
            .ring
            .ring
            .iter()
            .filter_map(|&n| self.cfg.position(n))
            .collect();
        if !ring.is_empty() {
            let preferred = ring[self.learner_index % ring.len()];
            if alive(preferred) && !v.contains(&preferred) {
                v.push(preferred);
            }
        }
        for &p in &self.acceptors {
            if alive(p) && !v.contains(&p) {
                v.push(p);
            }
        }
        v
    }

    pub(crate) fn learner_tick(&mut self, out: &mut Out) {
        if !(self.node.learn.behind() || self.node.learn.has_waiting()) {
            return;
        }
        let t = self.cfg.retrieve_timeout_us;
        if self.node.now < self.node.learn.last_progress_us + t
            || self.node.now < self.node.learn.last_retrieve_us + t
        {
            return;
        }
        self.send_retrieve(out);
    }

    pub(crate) fn send_retrieve(&mut self, out: &mut Out) {
        self.learn_from_own_store(out);
        if !(self.node.learn.behind() || self.node.learn.has_waiting()) {
            return;
        }
        let targets = self.retrieve_targets();
        if targets.is_empty() {
            return;
        }
        let target = targets[self.node.learn.retrieve_round % targets.len()];
        self.node.learn.retrieve_round += 1;
        self.node.learn.last_retrieve_us = self.node.now;
        let from = self.node.learn.next;
        let to =
            (from + self.cfg.retrieve_max_instances).min(self.node.learn.decided_max.max(from) + 1);
        out.send(
            self.node_at(target),
            Message::Retrieve(Retrieve { from, to }),
        );
    }

    /// Decided instances from the coordinator's buffer or an acceptor.
    pub(crate) fn on_decided_reply(&mut self, from_pos: usize, m: Decided, out: &mut Out) {
        let next_before = self.node.learn.next;
        for (instance, decree) in m.entries {
            if let Decree::Values(b) = &decree {
                self.node.cache.insert(b);
                self.node.learn.offer_payload(b);
            }
            let key = decree.key();
            self.record_decision(instance, Ballot::ZERO, Some(decree), key, out);
        }
        // Nobody can serve what lies below every live acceptor's log start (trimmed below a
        // quorum of learners' snapshots, or slid out of an in-memory window): once every
        // live acceptor answered without it, and one had trimmed it, fetch a peer's
        // snapshot, or skip (`behind_trim_point`; see `LearnerState::note_unserved`).
        if m.dedup_to > m.dedup_from {
            self.node
                .learn
                .offer_skip_memory(m.dedup_from, m.dedup_to, m.dedup);
        }
        if self.node.is_acceptor_pos(from_pos) {
            self.node
                .learn
                .note_unserved(from_pos, m.log_start, m.scanned_to);
        }
        let live = self
            .acceptors
            .iter()
            .filter(|&&p| p != self.node.pos && self.node.view.alive(p, self.node.now))
            .fold(0u64, |m, &p| m | bit(p));
        let next = self.node.learn.next;
        if let Some(floor) = self
            .node
            .learn
            .behind_floor(live, self.cfg.learner_snapshots)
        {
            self.behind_trim_point(next, floor, out);
        }
        // Catching up moves at network speed: ask for the next range at once.
        self.after_input(out);
        if self.node.learn.next > next_before && self.node.learn.behind() {
            self.send_retrieve(out);
        }
    }
}
