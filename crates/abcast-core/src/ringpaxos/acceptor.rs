//! Acceptor: seed 003 Algorithm 2 Tasks 2, 4 and 5, and §4.2.
//!
//! State (seed 003): `rnd` is the store's promised ballot; `v-rnd`, `v-val` (and `v-vid`,
//! the id of `v-val`) are the store's `Accepted` entry of each instance; `ring` is the ring
//! of the latest ballot seen in a `Phase2a` ([`RingMemory`]). The store's state is written
//! before any message that depends on it leaves (`needs_sync`). The acceptor state itself
//! (store, amnesia, repair target) is U-Ring Paxos' `AcceptorState`.

use super::messages::{Decided, Nack, P1Entry, Phase1a, Phase1b, Phase2a, Phase2b, Repair, Vid};
use super::{Message, Out, RingPaxos};
use crate::event::Event;
use crate::mutation::Mutation;
use crate::ring::acceptor::skip_memory_of;
use crate::types::{Ballot, Decree, Instance, NodeId};
use std::collections::BTreeMap;

/// Bytes of accepted payload in one phase 1 reply or retrieve answer.
pub const REPLY_MAX_BYTES: usize = 8 << 20;
/// Instances in one phase 1 reply.
pub const REPLY_MAX_INSTANCES: u64 = 1024;
/// `Phase2b`s that arrived before their `Phase2a`, held until the vote.
pub const STASH_MAX: usize = 4096;

/// Seed 003's `ring` variable, and the `Phase2b`s waiting for their `Phase2a`.
#[derive(Debug, Default)]
pub struct RingMemory {
    pub ballot: Ballot,
    pub ring: Vec<NodeId>,
    stash: BTreeMap<Instance, (Ballot, Vid)>,
}

impl RingPaxos {
    /// Task 2: promise `c-rnd` if it is at least `rnd` (`>=`: a coordinator runs phase 1 in
    /// several rounds under one ballot) and the epochs agree; reply with the votes from
    /// `m.from` on, bounded in size (`covered_to` says where the reply stopped).
    pub(crate) fn on_phase1a(&mut self, from_pos: usize, m: Phase1a, out: &mut Out) {
        self.node.note_ballot(m.ballot);
        self.node.view.merge_epoch(&m.epoch);
        let epoch_ok = m.epoch.fingerprint() == self.node.view.epoch_fp();
        let decided_upto = self.node.learn.delivered_upto();
        let Some(acc) = self.node.acc.as_mut() else {
            return;
        };
        let promised = acc.store.promised();
        let ok = m.ballot >= promised && epoch_ok;
        let mut accepted = Vec::new();
        let mut covered_to = m.from;
        if ok {
            if m.ballot > promised {
                acc.store.set_promised(m.ballot);
                out.needs_sync = true;
            }
            let to = m.from.saturating_add(REPLY_MAX_INSTANCES);
            covered_to = to;
            let mut bytes = 0usize;
            for (instance, a) in acc.store.range(m.from, to) {
                bytes += a.decree.wire_bytes();
                if bytes > REPLY_MAX_BYTES && !accepted.is_empty() {
                    covered_to = instance;
                    break;
                }
                accepted.push(P1Entry {
                    instance,
                    ballot: a.ballot,
                    decree: a.decree,
                    decided: a.decided,
                });
            }
        }
        let reply = Phase1b {
            ballot: m.ballot,
            from: m.from,
            to: m.to,
            ok,
            promised: acc.store.promised(),
            amnesic: acc.amnesic,
            decided_upto: decided_upto.max(acc.store.log_start().saturating_sub(1)),
            max_instance: acc.store.max_instance(),
            log_start: acc.store.log_start(),
            covered_to,
            epoch: self.node.view.epoch().clone(),
            accepted,
        };
        out.send(self.node_at(from_pos), Message::Phase1b(reply));
    }

    /// Ip-delivery of a `Phase2a` from the coordinator: keep the value for learning, learn
    /// the piggy-backed decisions (§6.1), and vote (Task 4).
    pub(crate) fn on_phase2a(&mut self, m: Phase2a, out: &mut Out) {
        self.node.note_ballot(m.ballot);
        if let Decree::Values(b) = &m.decree {
            self.node.cache.insert(b);
            self.node.learn.offer_payload(b);
        }
        for (i, vid) in &m.decisions {
            self.learn_decision(*i, m.ballot, vid.clone(), out);
        }
        self.acceptor_vote(&m, out);
    }

    /// Task 4: `if c-rnd >= rnd then v-rnd, v-val, v-vid := c-rnd, c-val, c-vid`; the first
    /// acceptor of the ring then sends `Phase2b` to its successor. The coordinator calls this
    /// for its own `Phase2a` as it multicasts it.
    pub(crate) fn acceptor_vote(&mut self, m: &Phase2a, out: &mut Out) {
        let epoch_ok =
            m.epoch_fp == self.node.view.epoch_fp() || self.mutated(Mutation::VoteIgnoresEpoch);
        let sync_vote = !self.mutated(Mutation::NoSyncBeforeVote);
        let Some(acc) = self.node.acc.as_mut() else {
            return;
        };
        let promised = acc.store.promised();
        if m.ballot < promised || !epoch_ok {
            // Tell the coordinator why: a higher promise, or another epoch (§4.2).
            out.send(
                m.ballot.node,
                Message::Nack(Nack {
                    promised,
                    instance: m.instance,
                    epoch: self.node.view.epoch().clone(),
                }),
            );
            return;
        }
        let vid = Vid::of(&m.decree);
        match acc.store.get(m.instance) {
            // Decided already: the decree can never change; a vote for it is a no-op.
            Some(a) if a.decided => {
                if Vid::of(&a.decree) != vid {
                    return;
                }
            }
            _ => {
                if m.ballot > promised {
                    acc.store.set_promised(m.ballot);
                }
                let stored = acc.put_vote(m.instance, m.ballot, &m.decree);
                if !stored {
                    return; // store full of undecided votes: not voting is always safe
                }
                if sync_vote {
                    out.needs_sync = true;
                }
            }
        }
        if m.ballot >= self.ring.ballot {
            if m.ballot > self.ring.ballot {
                self.ring.stash.clear();
            }
            self.ring.ballot = m.ballot;
            if self.ring.ring != m.ring {
                self.ring.ring = m.ring.clone();
            }
        }
        let Some(idx) = m.ring.iter().position(|&n| n == self.node.me) else {
            return; // a spare: votes, but is not on the ring
        };
        if idx == 0 {
            // Task 4 lines 27-28: `if first(ring) then send (successor, PHASE 2B)`.
            self.pass_2b(idx, m.ballot, m.instance, vid, out);
        } else if self
            .ring
            .stash
            .get(&m.instance)
            .is_some_and(|(b, v)| *b == m.ballot && *v == vid)
        {
            // Its `Phase2b` overtook this `Phase2a`: Task 5 holds now.
            self.ring.stash.remove(&m.instance);
            self.pass_2b(idx, m.ballot, m.instance, vid, out);
        }
    }

    /// Task 5 (acceptors and coordinator): `upon receiving (PHASE 2B, c-rnd, c-vid) from
    /// predecessor: if v-vid = c-vid then` forward it, or decide if last.
    pub(crate) fn on_phase2b(&mut self, m: Phase2b, out: &mut Out) {
        self.node.note_ballot(m.ballot);
        let Some(acc) = self.node.acc.as_ref() else {
            return;
        };
        let voted = acc
            .store
            .get(m.instance)
            .is_some_and(|a| a.ballot == m.ballot && Vid::of(&a.decree) == m.vid);
        if !voted || self.ring.ballot != m.ballot {
            // Not ip-delivered yet (or lost): wait for the `Phase2a` or its resend.
            if self.ring.ballot <= m.ballot {
                if self.ring.stash.len() >= STASH_MAX {
                    self.ring.stash.pop_first();
                }
                self.ring.stash.insert(m.instance, (m.ballot, m.vid));
            }
            return;
        }
        let Some(idx) = self.ring.ring.iter().position(|&n| n == self.node.me) else {
            return;
        };
        self.pass_2b(idx, m.ballot, m.instance, m.vid, out);
    }

    /// Task 5 lines 32-35: not last → send to the successor; last (the coordinator) → decide.
    fn pass_2b(&mut self, idx: usize, ballot: Ballot, instance: Instance, vid: Vid, out: &mut Out) {
        let ring = &self.ring.ring;
        debug_assert!(idx < ring.len() && ring[idx] == self.node.me);
        if idx + 1 >= ring.len() {
            self.coordinator_on_2b(ballot, instance, vid, out);
        } else {
            let succ = ring[idx + 1];
            out.send(
                succ,
                Message::Phase2b(Phase2b {
                    ballot,
                    instance,
                    vid,
                }),
            );
        }
    }

    /// Retransmission (§4.2, §6.1): decided instances from the coordinator's buffer and this
    /// acceptor's store; the coordinator also re-multicasts what is still open there.
    pub(crate) fn on_retrieve(
        &mut self,
        from_pos: usize,
        m: super::messages::Retrieve,
        out: &mut Out,
    ) {
        let to =
            m.to.min(m.from.saturating_add(self.cfg.retrieve_max_instances))
                .min(m.from.saturating_add(super::messages::MAX_ENTRIES as u64));
        let mut found: BTreeMap<Instance, Decree> = self.coordinator_on_retrieve(m.from, to);
        let Some(acc) = self.node.acc.as_ref() else {
            // Not an acceptor: no decisions to serve, but a learner about to skip may ask
            // for this learner's de-duplication memory (`behind_trim_point_in`).
            let (dedup_from, dedup_to, dedup) =
                skip_memory_of(&self.node.learn, None, m.from, m.to);
            out.send(
                self.node_at(from_pos),
                Message::Decided(Decided {
                    log_start: 0,
                    scanned_to: 0,
                    dedup_from,
                    dedup_to,
                    dedup,
                    entries: Vec::new(),
                }),
            );
            return;
        };
        let mut bytes: usize = found.values().map(|d| d.wire_bytes()).sum();
        let mut scanned_to = to;
        for (instance, a) in acc.store.range(m.from, to) {
            if !a.decided || found.contains_key(&instance) {
                continue;
            }
            bytes += a.decree.wire_bytes();
            if bytes > REPLY_MAX_BYTES && !found.is_empty() {
                scanned_to = instance;
                break;
            }
            found.insert(instance, a.decree);
        }
        let log_start = acc.store.log_start();
        // The coordinator's buffer may have stopped early too: only what both scanned.
        if let Some((&last, _)) = found.last_key_value()
            && bytes > REPLY_MAX_BYTES
        {
            scanned_to = scanned_to.min(last + 1);
        }
        let (dedup_from, dedup_to, dedup) = if found.contains_key(&m.from) {
            (0, 0, Vec::new())
        } else {
            skip_memory_of(&self.node.learn, Some(&*acc.store), m.from, m.to)
        };
        out.send(
            self.node_at(from_pos),
            Message::Decided(Decided {
                log_start,
                scanned_to,
                dedup_from,
                dedup_to,
                dedup,
                entries: found.into_iter().collect(),
            }),
        );
    }

    pub(crate) fn on_repair(&mut self, m: Repair, out: &mut Out) {
        self.node.note_ballot(m.ballot);
        // Only a target computed in an epoch that knew this life: one meant for an earlier
        // life (flushed from a queue kept for it, or late in the network) says nothing about
        // the votes this life forgot (bug B1).
        let mine = self.node.view.epoch().incarnation(self.node.me);
        if m.epoch.incarnation(self.node.me) != mine {
            return;
        }
        let ignore_target = self.mutated(Mutation::RepairIgnored);
        let Some(acc) = self.node.acc.as_mut() else {
            return;
        };
        if acc.amnesic && acc.repair_upto.is_none_or(|u| m.upto < u) {
            acc.repair_upto = Some(m.upto);
            out.events.push(Event::RepairNeeded { upto: m.upto });
        }
        if ignore_target {
            acc.amnesic = false;
        }
        self.node.learn.decided_max = self.node.learn.decided_max.max(m.decided_floor);
    }
}
