//! Coordinator: seed 003 Algorithm 2 Tasks 1, 3 and 5 (its side), §4.2, §4.3 and §6.1.
//!
//! * **Phase 1 (Tasks 1 and 3).** On taking over (first live acceptor in configuration order)
//!   the coordinator picks a ballot above every round it has seen and sends `Phase1a` to every
//!   acceptor, from the first instance its learner has not delivered. Replies are bounded;
//!   while some acceptor reports votes beyond what every counted reply covered, another round
//!   under the same ballot continues from there. With a quorum of promises from acceptors
//!   that are not amnesic: instances up to the highest `decided_upto` are decided and known
//!   to someone (learners retrieve them); every instance above it up to the highest one
//!   reported gets the highest-ballot vote, or a no-op for a hole (Task 3 lines 15-18).
//! * **The ring (Task 1 "c-ring", §4.3).** The first f acceptors (other than the
//!   coordinator) whose promise counted, then the coordinator, last.
//! * **Phase 2 (Task 3 line 19, Task 5).** Each instance is ip-multicast as a `Phase2a` with
//!   the decisions taken since the last one piggy-backed (§6.1); the coordinator votes for its
//!   own proposal as it sends it, and decides when the `Phase2b` of its predecessor arrives.
//! * **Buffer and flow control (§6.1).** Instances live in a circular buffer of
//!   `buffer_instances` entries (and `buffer_bytes`). An entry is free once it is decided
//!   (its `Phase2b` came back) and its decision was multicast; a new instance takes the
//!   oldest entry only if that one is free, so entries are reused in order (no holes). The
//!   buffer answers learners' retransmission requests while the entries are still there.
//! * **Failures (§4.2).** `Phase2a`s not decided within `p2_resend_us` are multicast again; a
//!   suspected ring acceptor, a refusal, an epoch change or an instance stuck for
//!   `ring_timeout_us` start phase 1 again with a higher ballot and a new ring.

use super::messages::{Decision, Nack, Phase1a, Phase1b, Phase2a, Repair, Vid};
use super::{Message, Out, RingPaxos};
use crate::event::Event;
use crate::mutation::Mutation;
use crate::ring::bit;
use crate::types::{Ballot, Batch, BatchKey, Decree, Instance, Micros};
use std::collections::{BTreeMap, HashSet, VecDeque};

/// `Phase2a`s re-multicast per tick at most (bounds a burst after a long stall).
const RESEND_PER_TICK: usize = 64;
/// Decisions in one multicast at most.
const DECISIONS_PER_MESSAGE: usize = 4096;

/// One entry of the coordinator's circular buffer (§6.1).
#[derive(Debug)]
pub(crate) struct Slot {
    instance: Instance,
    decree: Decree,
    vid: Vid,
    opened_us: Micros,
    sent_us: Micros,
    /// The `Phase2b` of the predecessor came back with this vid: decided.
    decided: bool,
    /// The decision left in a multicast.
    announced: bool,
}

impl Slot {
    fn is_free(&self) -> bool {
        self.decided && self.announced
    }
}

/// A phase 1 in progress (one takeover, possibly in several rounds).
#[derive(Debug)]
pub(crate) struct Prepare {
    /// The takeover's first instance.
    start: Instance,
    /// This round asks for votes from here.
    round_from: Instance,
    sent_us: Micros,
    /// Positions whose promise counts in this round, in arrival order.
    order: Vec<usize>,
    oks: u64,
    /// Positions that promised while amnesic: repaired afterwards.
    amnesic_oks: u64,
    floor: Instance,
    /// Highest `log_start` among counted replies (see `uring/coordinator.rs`, `Prepare`):
    /// from it on every counted report is complete.
    trimmed_below: Instance,
    hi: Instance,
    /// Lowest `covered_to` among this round's counted replies.
    covered: Instance,
    /// Per instance: the highest-ballot vote reported, or a decided decree.
    votes: BTreeMap<Instance, (Ballot, Decree, bool)>,
}

impl Prepare {
    fn new(from: Instance, now: Micros) -> Prepare {
        Prepare {
            start: from,
            round_from: from,
            sent_us: now,
            order: Vec::new(),
            oks: 0,
            amnesic_oks: 0,
            floor: from.saturating_sub(1),
            trimmed_below: 0,
            hi: 0,
            covered: Instance::MAX,
            votes: BTreeMap::new(),
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Follower,
    Preparing,
    Leading,
}

#[derive(Debug)]
pub struct CoordinatorState {
    pub(crate) phase: Phase,
    pub(crate) ballot: Ballot,
    epoch_fp: u64,
    /// The ring of this ballot (Task 1 "c-ring"), coordinator last.
    ring: Vec<crate::types::NodeId>,
    prepare: Option<Prepare>,
    next_instance: Instance,
    buffer: VecDeque<Slot>,
    buffer_bytes: usize,
    /// Entries of the buffer not yet decided.
    undecided: usize,
    queue: VecDeque<Batch>,
    queue_bytes: usize,
    /// Keys queued, so a re-sent batch is not queued twice.
    known: HashSet<BatchKey>,
    /// Keys of the batches in the buffer: a re-sent batch gets no second instance.
    open_keys: HashSet<BatchKey>,
    /// Meta decrees (Multi-Ring skips and controls) waiting for an instance, ahead of
    /// `queue`; at most `ring::meta::META_QUEUE_MAX`.
    pub(crate) meta: VecDeque<Decree>,
    /// Merge slots put in instances by this coordinator (see `ComposableRing::slots_assigned`).
    pub(crate) slots_assigned: u64,
    /// Of these, the instances of values.
    pub(crate) value_slots_assigned: u64,
    /// Decisions not yet multicast (§4.3: they ride on the next `Phase2a`).
    pending: Vec<(Instance, Vid)>,
    pending_since_us: Micros,
    /// Last decision, for the ring timeout.
    progress_us: Micros,
    repair: Option<Repair>,
}

impl CoordinatorState {
    pub fn new() -> CoordinatorState {
        CoordinatorState {
            phase: Phase::Follower,
            ballot: Ballot::ZERO,
            epoch_fp: 0,
            ring: Vec::new(),
            prepare: None,
            next_instance: 1,
            buffer: VecDeque::new(),
            buffer_bytes: 0,
            undecided: 0,
            queue: VecDeque::new(),
            queue_bytes: 0,
            known: HashSet::new(),
            open_keys: HashSet::new(),
            meta: VecDeque::new(),
            slots_assigned: 0,
            value_slots_assigned: 0,
            pending: Vec::new(),
            pending_since_us: 0,
            progress_us: 0,
            repair: None,
        }
    }
    pub fn is_leading(&self) -> bool {
        self.phase == Phase::Leading
    }
    pub fn is_active(&self) -> bool {
        self.phase != Phase::Follower
    }
    fn slot_mut(&mut self, instance: Instance) -> Option<&mut Slot> {
        let first = self.buffer.front()?.instance;
        let idx = instance.checked_sub(first)?;
        self.buffer.get_mut(usize::try_from(idx).ok()?)
    }
}

impl Default for CoordinatorState {
    fn default() -> Self {
        Self::new()
    }
}

impl RingPaxos {
    /// Task 1 line 3: a value (batch) from a proposer.
    pub(crate) fn coordinator_on_submit(&mut self, batch: Batch, out: &mut Out) {
        if !self.coord.is_active() {
            return; // not coordinating: the proposer re-sends to the right node
        }
        self.node.cache.insert(&batch);
        self.node.learn.offer_payload(&batch);
        let key = batch.key();
        if self.coord.open_keys.contains(&key) || !self.coord.known.insert(key) {
            return;
        }
        if self.node.learn.decided_at(key).is_some() {
            // Decided already: the proposer missed the decision. Tell it, do not decide twice.
            self.coord.known.remove(&key);
            if let Some(instance) = self.node.learn.decided_at(key) {
                out.send(
                    key.origin,
                    Message::Decided(super::messages::Decided {
                        log_start: 0,
                        scanned_to: 0,
                        dedup_from: 0,
                        dedup_to: 0,
                        dedup: Vec::new(),
                        entries: vec![(instance, Decree::Values(batch))],
                    }),
                );
            }
            return;
        }
        let c = &mut self.coord;
        if c.queue_bytes + batch.wire_bytes() > self.cfg.coordinator_queue_bytes {
            c.known.remove(&key); // full: the proposer re-sends
            return;
        }
        c.queue_bytes += batch.wire_bytes();
        c.queue.push_back(batch);
        self.assign(out);
    }

    /// Task 1: a new ballot, phase 1 to every acceptor.
    fn start_phase1(&mut self, out: &mut Out, why: &str) {
        self.flush_decisions(out);
        // Above every round seen, and this life's incarnation: a ballot no other process
        // life made or will make (see `Ballot`).
        let round = self.node.max_ballot_seen.round.max(self.coord.ballot.round) + 1;
        let ballot = Ballot::new(round, self.node.me, self.node.ballot_incarnation);
        self.node.note_ballot(ballot);
        // Undecided values go back to the queue; phase 1 re-proposes them where it finds
        // them (and the queue skips them then).
        let c = &mut self.coord;
        for s in std::mem::take(&mut c.buffer).into_iter().rev() {
            if let Decree::Values(b) = s.decree
                && !s.decided
                && c.known.insert(b.key())
            {
                c.queue_bytes += b.wire_bytes();
                c.queue.push_front(b);
            }
        }
        c.buffer_bytes = 0;
        c.undecided = 0;
        c.open_keys.clear();
        c.meta.clear();
        c.pending.clear();
        c.ring.clear();
        c.repair = None;
        c.phase = Phase::Preparing;
        c.ballot = ballot;
        c.epoch_fp = self.node.view.epoch_fp();
        let from = self.node.learn.next;
        c.next_instance = from;
        c.prepare = Some(Prepare::new(from, self.node.now));
        out.events.push(Event::PhaseOne {
            node: self.node.me,
            ballot,
            from,
            why: why.to_string(),
        });
        self.send_phase1a(from, out);
    }

    fn send_phase1a(&mut self, from: Instance, out: &mut Out) {
        let m = Phase1a {
            ballot: self.coord.ballot,
            from,
            // The promise covers every instance, and each acceptor bounds its reply
            // (`REPLY_MAX_INSTANCES`, `covered_to`): no upper end to ask for.
            to: Instance::MAX,
            epoch: self.node.view.epoch().clone(),
        };
        for &p in &self.acceptors {
            // To itself too: one code path for every acceptor.
            out.send(self.node_at(p), Message::Phase1a(m.clone()));
        }
    }

    /// Task 3: `upon receiving (PHASE 1B, ...) from Q_a such that rnd = c-rnd`.
    pub(crate) fn on_phase1b(&mut self, from_pos: usize, m: Phase1b, out: &mut Out) {
        self.node.note_ballot(m.promised);
        let epoch_changed = self.node.view.merge_epoch(&m.epoch);
        if self.coord.phase != Phase::Preparing || m.ballot != self.coord.ballot {
            return;
        }
        if !m.ok {
            if m.promised > self.coord.ballot {
                self.start_phase1(out, "phase 1 refused by a higher promise");
            } else if epoch_changed {
                self.start_phase1(out, "a restarted acceptor changed the epoch");
            }
            return;
        }
        if m.epoch.fingerprint() != self.coord.epoch_fp {
            return;
        }
        let quorum = self.quorum;
        let amnesic_counts = self.mutated(Mutation::AmnesicPromisesCount);
        let Some(p) = self.coord.prepare.as_mut() else {
            return;
        };
        if m.from != p.round_from {
            return; // a reply to an earlier round
        }
        if m.amnesic && !amnesic_counts {
            p.amnesic_oks |= bit(from_pos);
            return;
        }
        if p.oks & bit(from_pos) != 0 {
            return;
        }
        p.oks |= bit(from_pos);
        p.order.push(from_pos);
        p.floor = p.floor.max(m.decided_upto);
        p.trimmed_below = p.trimmed_below.max(m.log_start);
        p.hi = p.hi.max(m.max_instance);
        p.covered = p.covered.min(m.covered_to);
        for e in m.accepted {
            if e.instance < p.start {
                continue;
            }
            // Task 3 line 15: the vote with the largest v-rnd (a decided decree wins).
            let slot = p
                .votes
                .entry(e.instance)
                .or_insert((e.ballot, e.decree.clone(), e.decided));
            if !slot.2 && (e.decided || e.ballot > slot.0) {
                *slot = (e.ballot, e.decree, e.decided);
            }
        }
        if p.order.len() < quorum {
            return;
        }
        if p.hi >= p.covered {
            // Votes beyond what every counted reply covered: another round from there.
            let from = p.covered;
            p.round_from = from;
            p.order.clear();
            p.oks = 0;
            p.covered = Instance::MAX;
            p.sent_us = self.node.now;
            self.send_phase1a(from, out);
            return;
        }
        if let Some(p) = self.coord.prepare.take() {
            self.phase1_done(p, out);
        }
    }

    /// Task 3 lines 15-19 for every instance phase 1 found, then leading.
    fn phase1_done(&mut self, p: Prepare, out: &mut Out) {
        let ballot = self.coord.ballot;
        // The ring: f acceptors that promised (first answers first), the coordinator last.
        let mut ring: Vec<_> = p
            .order
            .iter()
            .copied()
            .filter(|&q| q != self.node.pos)
            .take(self.quorum - 1)
            .map(|q| self.node_at(q))
            .collect();
        ring.push(self.node.me);
        debug_assert_eq!(ring.len(), self.quorum, "the ring is an m-quorum");
        self.coord.ring = ring;
        self.node.learn.decided_max = self.node.learn.decided_max.max(p.floor);
        let drop_decided = self.mutated(Mutation::DecidedDroppedAtTakeover);
        // Decided below the floor: learners retrieve what they miss from whoever knows.
        for (&i, (b, d, decided)) in p.votes.range(..=p.floor) {
            if *decided && !drop_decided {
                self.record_decision(i, *b, Some(d.clone()), d.key(), out);
            }
        }
        // At or below the floor some learner delivered every instance, but the acceptors
        // that knew the decisions may be gone: where every counted reply is complete (above
        // every counted log start), the instances phase 1 covered are laid out again like
        // the ones above the floor (a decided entry announced, the highest vote
        // re-proposed, a no-op for a hole). Below the trim point, learners install a
        // snapshot. (Found by the simulator's faults-remain phase for U-Ring Paxos, see
        // `Prepare::trimmed_below` there.)
        let start = p.start.max(p.trimmed_below).min(p.floor + 1);
        let end = p.hi.max(p.floor);
        self.coord.next_instance = start;
        self.coord.phase = Phase::Leading;
        self.coord.progress_us = self.node.now;
        let mut votes = p.votes;
        for i in start..=end {
            let (decree, decided) = match votes.remove(&i) {
                Some((_, _, true)) if drop_decided => (Decree::Noop, false),
                Some((_, d, decided)) => (d, decided),
                None => (Decree::Noop, false), // a hole: a no-op (Task 3 line 17 for holes)
            };
            self.coord.next_instance = i + 1;
            if decided {
                let vid = Vid::of(&decree);
                self.push_slot(i, decree.clone(), true);
                self.announce(i, vid);
                self.record_decision(i, ballot, Some(decree.clone()), decree.key(), out);
            } else {
                self.open_instance(i, decree, out);
            }
        }
        out.events.push(Event::Leading {
            node: self.node.me,
            ballot,
            ring: self.coord.ring.clone(),
            decided_upto: p.floor,
            reproposed: (start, end),
        });
        let repair = Repair {
            ballot,
            epoch: self.node.view.epoch().clone(),
            decided_floor: p.floor,
            upto: p.hi.max(p.floor),
        };
        self.coord.repair = Some(repair.clone());
        for pos in 0..self.cfg.members.len() {
            if p.amnesic_oks & bit(pos) != 0 {
                out.send(self.node_at(pos), Message::Repair(repair.clone()));
            }
        }
        self.assign(out);
    }

    fn push_slot(&mut self, instance: Instance, decree: Decree, decided: bool) {
        let c = &mut self.coord;
        debug_assert!(
            c.buffer.back().is_none_or(|s| s.instance + 1 == instance),
            "buffer entries are consecutive instances"
        );
        if let Some(k) = decree.key() {
            c.open_keys.insert(k);
        }
        c.buffer_bytes += decree.wire_bytes();
        if !decided {
            c.undecided += 1;
            if matches!(decree, Decree::Values(_)) {
                c.value_slots_assigned += 1;
            }
            c.slots_assigned += match &decree {
                Decree::Meta { weight, .. } => u64::from((*weight).max(1)),
                _ => 1,
            };
        }
        c.buffer.push_back(Slot {
            instance,
            vid: Vid::of(&decree),
            decree,
            opened_us: self.node.now,
            sent_us: self.node.now,
            decided,
            announced: false,
        });
    }

    /// Task 3 line 19: `ip-multicast (PHASE 2A, c-rnd, c-val, c-vid)`.
    fn open_instance(&mut self, instance: Instance, decree: Decree, out: &mut Out) {
        debug_assert!(self.coord.phase == Phase::Leading);
        self.push_slot(instance, decree, false);
        self.multicast_2a(instance, out);
    }

    fn multicast_2a(&mut self, instance: Instance, out: &mut Out) {
        let now = self.node.now;
        let Some(s) = self.coord.slot_mut(instance) else {
            return;
        };
        s.sent_us = now;
        let decree = s.decree.clone();
        let decisions = self.take_decisions();
        let m = Phase2a {
            ballot: self.coord.ballot,
            epoch_fp: self.coord.epoch_fp,
            ring: self.coord.ring.clone(),
            decisions,
            instance,
            decree,
        };
        out.multicasts.push(Message::Phase2a(m.clone()));
        // The coordinator is an acceptor of the ring: it votes on its own proposal now.
        self.acceptor_vote(&m, out);
    }

    /// The decisions not yet multicast, marked announced (§6.1: the entry can be freed).
    fn take_decisions(&mut self) -> Vec<(Instance, Vid)> {
        let c = &mut self.coord;
        let n = c.pending.len().min(DECISIONS_PER_MESSAGE);
        let taken: Vec<_> = c.pending.drain(..n).collect();
        for &(i, _) in &taken {
            if let Some(s) = c.slot_mut(i) {
                s.announced = true;
            }
        }
        c.pending_since_us = self.node.now;
        taken
    }

    fn announce(&mut self, instance: Instance, vid: Vid) {
        if self.coord.pending.is_empty() {
            self.coord.pending_since_us = self.node.now;
        }
        self.coord.pending.push((instance, vid));
    }

    /// Decisions with nothing to ride on leave alone (Task 5 line 35).
    fn flush_decisions(&mut self, out: &mut Out) {
        while !self.coord.pending.is_empty() && self.coord.is_active() {
            let decisions = self.take_decisions();
            out.multicasts.push(Message::Decision(Decision {
                ballot: self.coord.ballot,
                decisions,
            }));
        }
    }

    /// Task 5, last of the ring: the predecessor's `Phase2b` matches this coordinator's
    /// vote, so f + 1 acceptors voted: decided.
    pub(crate) fn coordinator_on_2b(
        &mut self,
        ballot: Ballot,
        instance: Instance,
        vid: Vid,
        out: &mut Out,
    ) {
        if self.coord.phase != Phase::Leading || ballot != self.coord.ballot {
            return;
        }
        let Some(s) = self.coord.slot_mut(instance) else {
            return;
        };
        if s.decided || s.vid != vid {
            return;
        }
        s.decided = true;
        let decree = s.decree.clone();
        debug_assert!(self.coord.undecided > 0);
        self.coord.undecided -= 1;
        self.coord.progress_us = self.node.now;
        let key = vid.key();
        self.announce(instance, vid);
        self.record_decision(instance, ballot, Some(decree), key, out);
        self.assign(out);
        if self.cfg.decision_linger_us == 0 {
            self.flush_decisions(out);
        }
    }

    /// Whether a new instance may be opened: §6.1 flow control. Frees the oldest entry
    /// when it is free and the buffer is full.
    fn buffer_has_room(&mut self) -> bool {
        let (cap, cap_bytes) = (self.cfg.buffer_instances, self.cfg.buffer_bytes);
        let c = &mut self.coord;
        while c.buffer.len() >= cap || c.buffer_bytes >= cap_bytes {
            match c.buffer.front() {
                Some(s) if s.is_free() => {
                    if let Some(s) = c.buffer.pop_front() {
                        c.buffer_bytes -= s.decree.wire_bytes();
                        if let Some(k) = s.decree.key() {
                            c.open_keys.remove(&k);
                        }
                    }
                }
                _ => return false,
            }
        }
        true
    }

    /// Gives queued meta decrees, then queued batches, instances while the buffer has room.
    pub(crate) fn assign(&mut self, out: &mut Out) {
        if self.coord.phase != Phase::Leading {
            return;
        }
        while !self.coord.queue.is_empty() || !self.coord.meta.is_empty() {
            if !self.buffer_has_room()
                || self.node.acc.as_ref().is_some_and(|a| !a.store.has_room())
            {
                break;
            }
            if let Some(d) = self.coord.meta.pop_front() {
                let instance = self.coord.next_instance;
                self.coord.next_instance += 1;
                self.open_instance(instance, d, out);
                continue;
            }
            let Some(b) = self.coord.queue.pop_front() else {
                break;
            };
            let c = &mut self.coord;
            c.queue_bytes -= b.wire_bytes();
            let k = b.key();
            c.known.remove(&k);
            if c.open_keys.contains(&k) || self.node.learn.decided_at(k).is_some() {
                continue; // proposed again by phase 1, or decided: never twice
            }
            let instance = self.coord.next_instance;
            self.coord.next_instance += 1;
            self.open_instance(instance, Decree::Values(b), out);
        }
    }

    pub(crate) fn on_nack(&mut self, m: Nack, out: &mut Out) {
        self.node.note_ballot(m.promised);
        let epoch_changed = self.node.view.merge_epoch(&m.epoch);
        if self.coord.phase == Phase::Follower {
            return;
        }
        if m.promised > self.coord.ballot {
            self.start_phase1(out, "refused by a higher promise");
        } else if epoch_changed || self.node.view.epoch_fp() != self.coord.epoch_fp {
            self.start_phase1(out, "epoch changed");
        }
    }

    /// A learner misses `from..to`: decided entries of the buffer answer it (§6.1), open
    /// ones are multicast again at the next tick.
    pub(crate) fn coordinator_on_retrieve(
        &mut self,
        from: Instance,
        to: Instance,
    ) -> BTreeMap<Instance, Decree> {
        let mut found = BTreeMap::new();
        if self.coord.phase != Phase::Leading {
            return found;
        }
        let mut bytes = 0usize;
        for s in self.coord.buffer.iter_mut() {
            if s.instance < from || s.instance >= to {
                continue;
            }
            if s.decided {
                bytes += s.decree.wire_bytes();
                if bytes > super::acceptor::REPLY_MAX_BYTES && !found.is_empty() {
                    break;
                }
                found.insert(s.instance, s.decree.clone());
            } else {
                s.sent_us = 0;
            }
        }
        found
    }

    pub(crate) fn coordinator_tick(&mut self, out: &mut Out) {
        let me_coordinator = self.node.coordinator_pos() == Some(self.node.pos);
        match (me_coordinator, self.coord.is_active()) {
            (true, false) => {
                self.start_phase1(out, "first live acceptor");
                return;
            }
            (false, true) => {
                out.events.push(Event::SteppedDown { node: self.node.me });
                self.flush_decisions(out);
                self.step_down();
                return;
            }
            (false, false) => return,
            (true, true) => {}
        }
        if self.node.view.epoch_fp() != self.coord.epoch_fp {
            self.start_phase1(out, "epoch changed");
            return;
        }
        if let Some(p) = self.coord.prepare.as_mut() {
            if self.node.now >= p.sent_us + self.cfg.p1_resend_us {
                p.sent_us = self.node.now;
                let from = p.round_from;
                self.send_phase1a(from, out);
            }
            return;
        }
        // §4.2: a failed ring acceptor: phase 1 again with a new ring.
        let now = self.node.now;
        let suspected = self.coord.ring.iter().any(|&n| {
            self.cfg
                .position(n)
                .is_some_and(|p| !self.node.view.alive(p, now))
        });
        if suspected {
            self.start_phase1(out, "a ring acceptor is suspected");
            return;
        }
        // Scans start at the first undecided entry (decided ones wait at the front).
        let open = self.coord.undecided > 0;
        let stalled = open
            && self.coord.buffer.iter().skip_while(|s| s.decided).any(|s| {
                !s.decided
                    && now >= s.opened_us + self.cfg.ring_timeout_us
                    && now >= self.coord.progress_us + self.cfg.ring_timeout_us
            });
        if stalled {
            self.start_phase1(out, "the ring decides nothing");
            return;
        }
        let resend_us = self.cfg.p2_resend_us;
        let due: Vec<Instance> = if open {
            self.coord
                .buffer
                .iter()
                .skip_while(|s| s.decided)
                .filter(|s| !s.decided && now >= s.sent_us + resend_us)
                .map(|s| s.instance)
                .take(RESEND_PER_TICK)
                .collect()
        } else {
            Vec::new()
        };
        for i in due {
            self.multicast_2a(i, out);
        }
        self.assign(out);
        if !self.coord.pending.is_empty()
            && now >= self.coord.pending_since_us + self.cfg.decision_linger_us
        {
            self.flush_decisions(out);
        }
    }

    fn step_down(&mut self) {
        let c = &mut self.coord;
        c.phase = Phase::Follower;
        c.prepare = None;
        c.repair = None;
        c.buffer.clear();
        c.buffer_bytes = 0;
        c.undecided = 0;
        c.queue.clear();
        c.queue_bytes = 0;
        c.known.clear();
        c.open_keys.clear();
        c.pending.clear();
        c.ring.clear();
    }

    /// An amnesic acceptor of this ballot's epoch that missed the takeover's `Repair` asks
    /// again through its heartbeats (see `uring/coordinator.rs`).
    pub(crate) fn coordinator_on_amnesic_heartbeat(
        &mut self,
        from_pos: usize,
        epoch_fp: u64,
        out: &mut Out,
    ) {
        if self.coord.phase != Phase::Leading || epoch_fp != self.coord.epoch_fp {
            return;
        }
        if let Some(r) = self.coord.repair.clone() {
            out.send(self.node_at(from_pos), Message::Repair(r));
        }
    }
}
