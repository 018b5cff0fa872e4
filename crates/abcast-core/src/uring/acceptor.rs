//! Acceptor: seed 000 §3.1.3, seed 003 Algorithm 2 Tasks 2 and 4, and §4.2.
//!
//! State (seed 003): `rnd` is the store's promised ballot; `v-rnd`/`v-val` are the per-instance
//! `Accepted` entries. The rules:
//!
//! * Phase 1a (Task 2): promise `c-rnd` if `c-rnd >= rnd` — `>=` and not `>`, because a
//!   coordinator extends its phase 1 to further instance ranges under the same ballot — and
//!   reply with the votes in the range. The promise covers every instance, not only the
//!   range: promising more never hurts safety, and it is what lets a new coordinator run a
//!   single phase 1 over every open instance. (Seed 000 §3.1.2 accepts a range only "when the
//!   smallest instance number in such a range message is higher than the highest instance the
//!   acceptors have ever seen", which is the reason URingPaxos stalls when a lower-id node
//!   joins late: its range is refused forever. A range here is refused only for a higher
//!   promise, and the coordinator answers with a higher ballot.)
//! * Phase 2 (Task 4): vote for `(c-rnd, c-val)` if `c-rnd >= rnd`, the payload is here
//!   (seed 003: "checks whether it has ip-delivered the value", `v-vid = c-vid`), and the
//!   ballot's epoch is this acceptor's epoch. The vote is stored before the message that
//!   carries it leaves (`needs_sync`).
//! * Amnesia (§4.2: "it must not forget its state"): an acceptor restarted on an in-memory
//!   store forgot `rnd` and its votes. It restarts with a new incarnation, which changes the
//!   epoch, so no ballot begun before its return can collect its vote (see `ring.rs`). It
//!   does not count in any phase 1 quorum until it is *repaired*: a coordinator whose phase 1
//!   completed with non-amnesic acceptors after its return tells it `upto`, the highest
//!   instance anyone reported; every value chosen before its return lies at or below `upto`,
//!   so once it knows every decision up to there it holds what it forgot.

use super::messages::{Decided, Nack, P1Entry, Phase1a, Phase1b, Phase2, Repair, Retrieve};
use super::{Message, Out, URing};
use crate::event::Event;
use crate::mutation::Mutation;
use crate::ring::acceptor::{REPLY_MAX_BYTES, SkipMemory, skip_memory_of};
use crate::types::{Ballot, Decree, Instance};

impl URing {
    /// Phase 2 vote (seed 003 Task 4). Returns true if this acceptor voted.
    pub(crate) fn vote(&mut self, m: &Phase2, decree: Option<&Decree>, out: &mut Out) -> bool {
        let epoch_ok =
            m.epoch_fp == self.node.view.epoch_fp() || self.mutated(Mutation::VoteIgnoresEpoch);
        let sync_vote = !self.mutated(Mutation::NoSyncBeforeVote);
        let Some(acc) = self.node.acc.as_mut() else {
            return false;
        };
        let promised = acc.store.promised();
        if m.ballot < promised || !epoch_ok {
            // Tell the coordinator why: a higher promise, or a different epoch.
            out.send(
                m.ballot.node,
                Message::Nack(Nack {
                    promised,
                    instance: m.instance,
                    epoch: self.node.view.epoch().clone(),
                }),
            );
            return false;
        }
        let Some(decree) = decree else { return false };
        if let Some(a) = acc.store.get(m.instance)
            && a.decided
        {
            // Decided already: a vote for the same decree is harmless, another is refused.
            return a.decree.same_as(decree);
        }
        if m.ballot > promised {
            acc.store.set_promised(m.ballot);
        }
        let stored = acc.put_vote(m.instance, m.ballot, decree);
        if stored && sync_vote {
            out.needs_sync = true;
        }
        stored
    }

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
        let mut covered_to = m.to;
        if ok {
            if m.ballot > promised {
                acc.store.set_promised(m.ballot);
                out.needs_sync = true;
            }
            let mut bytes = 0usize;
            // Decided entries too: a coordinator backfilling below its phase 1 needs them, and
            // an entry reported as decided is never re-proposed.
            for (instance, a) in acc.store.range(m.from, m.to) {
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

    /// A learner asks for decided instances (seed 000 §3.1.4). Acceptors answer with what
    /// they know decided; the coordinator also re-runs what is still open.
    pub(crate) fn on_retrieve(&mut self, from_pos: usize, m: Retrieve, out: &mut Out) {
        self.coordinator_on_retrieve(&m, out);
        let Some(acc) = self.node.acc.as_ref() else {
            // Not an acceptor: no decisions to serve, but a learner about to skip may ask
            // for this learner's de-duplication memory (`behind_trim_point_in`).
            let (dedup_from, dedup_to, dedup) = self.skip_memory_for(m.from, m.to);
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
        let to =
            m.to.min(m.from.saturating_add(super::messages::MAX_ENTRIES as u64));
        let mut entries = Vec::new();
        let mut bytes = 0usize;
        let mut scanned_to = to;
        for (instance, a) in acc.store.range(m.from, to) {
            if !a.decided {
                continue;
            }
            bytes += a.decree.wire_bytes();
            if bytes > REPLY_MAX_BYTES && !entries.is_empty() {
                scanned_to = instance;
                break;
            }
            entries.push((instance, a.decree));
        }
        let log_start = acc.store.log_start();
        let (dedup_from, dedup_to, dedup) = if entries.first().is_none_or(|(i, _)| *i != m.from) {
            self.skip_memory_for(m.from, m.to)
        } else {
            (0, 0, Vec::new())
        };
        out.send(
            self.node_at(from_pos),
            Message::Decided(Decided {
                log_start,
                scanned_to,
                dedup_from,
                dedup_to,
                dedup,
                entries,
            }),
        );
    }

    /// What a `Decided` answer carries when it cannot serve `from` (bug B3): every batch
    /// first decided in a range from `from` on, as this node knows them (see
    /// [`skip_memory_of`]).
    pub(crate) fn skip_memory_for(&self, from: Instance, to: Instance) -> SkipMemory {
        skip_memory_of(
            &self.node.learn,
            self.node.acc.as_ref().map(|a| &*a.store),
            from,
            to,
        )
    }

    pub(crate) fn on_decided_reply(&mut self, from_pos: usize, m: Decided, out: &mut Out) {
        let next_before = self.node.learn.next;
        for (instance, decree) in m.entries {
            if let Decree::Values(b) = &decree {
                self.node.cache.insert(b);
            }
            let key = decree.key();
            self.record_decision(instance, Ballot::ZERO, Some(decree), key, out);
        }
        // Nobody can serve what lies below the responder's log start (trimmed below a
        // quorum of learners' snapshots, or slid out of an in-memory window): once every
        // live acceptor answered without it, and one had trimmed it, fetch a peer's
        // snapshot, or skip (`behind_trim_point`).
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
            .retrieve_targets()
            .iter()
            .fold(0u64, |m, &p| m | crate::ring::bit(p));
        let next = self.node.learn.next;
        if let Some(floor) = self
            .node
            .learn
            .behind_floor(live, self.cfg.learner_snapshots)
        {
            self.behind_trim_point(next, floor, out);
        }
        // Catching up: ask for the next range at once instead of after a timeout, so a
        // restarted learner (and an amnesic acceptor's repair) moves at network speed.
        // Only when the answer moved the learner on: otherwise the timeout rotates to
        // another acceptor.
        self.after_input(out);
        if self.node.learn.next > next_before && self.node.learn.behind() {
            self.send_retrieve(out);
        }
    }

    pub(crate) fn on_repair(&mut self, _from_pos: usize, m: Repair, out: &mut Out) {
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
