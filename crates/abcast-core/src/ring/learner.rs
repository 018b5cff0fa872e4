//! Learner: seed 000 §3.1.4.
//!
//! Every node tracks decisions (acceptors need them to answer retrieves and to be repaired;
//! coordinators to close instances); only a node with the learner role hands them to the
//! application. Values are delivered in instance order. A learner that misses an instance
//! (a lost decision, a decision without the payload, a restart) asks an acceptor for it
//! after `retrieve_timeout_us` — the seed proposes a null value at a high ballot instead;
//! here the coordinator does that on the learner's behalf (see `coordinator.rs`), so learners
//! never duel with the coordinator for ballots.
//!
//! Each value id is delivered at most once: a proposer may re-send a batch that was already
//! decided (its decision was lost), so a batch can be decided in two instances. Learners skip
//! the second one. The skip is a deterministic function of the decided sequence, so every
//! learner skips the same instances and sequences stay equal.

use super::Pass;
use crate::codec::Encoder;
use crate::protocol::Delivery;
use crate::types::{Batch, BatchKey, Decree, Instance, Micros};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Every batch first decided in `[.0, .1)`, with its instance (see `Decided::dedup`).
pub type SkipMemoryRange = (Instance, Instance, Vec<(BatchKey, Instance)>);

/// Batches of de-duplication memory an acceptor hands a learner that must skip instances
/// (the most recent ones of the range: 1.25 MiB at most on the wire).
pub const SKIP_DEDUP_MAX: usize = 1 << 16;

pub use crate::dedup::{DEDUP_BATCHES_PER_ORIGIN, Dedup};

/// Payloads seen on the ring (forwarded proposals, phase 2 messages) kept until their
/// decision is delivered, bounded in bytes (oldest first out; a dropped payload is retrieved).
#[derive(Debug)]
pub struct PayloadCache {
    map: HashMap<BatchKey, Batch>,
    order: VecDeque<BatchKey>,
    bytes: usize,
    capacity_bytes: usize,
}

impl PayloadCache {
    pub fn new(capacity_bytes: usize) -> PayloadCache {
        PayloadCache {
            map: HashMap::new(),
            order: VecDeque::new(),
            bytes: 0,
            capacity_bytes,
        }
    }
    pub fn insert(&mut self, batch: &Batch) {
        let key = batch.key();
        if self.map.contains_key(&key) {
            return;
        }
        self.bytes += batch.wire_bytes();
        self.map.insert(key, batch.clone());
        self.order.push_back(key);
        // Bounded: drop the oldest (they may already be gone from the map).
        while self.bytes > self.capacity_bytes {
            match self.order.pop_front() {
                Some(k) => {
                    if let Some(b) = self.map.remove(&k) {
                        self.bytes -= b.wire_bytes();
                    }
                }
                None => break,
            }
        }
        // Keep the order queue from growing with keys already removed.
        if self.order.len() > 2 * self.map.len() + 1024 {
            let map = &self.map;
            self.order.retain(|k| map.contains_key(k));
        }
    }
    pub fn get(&self, key: &BatchKey) -> Option<&Batch> {
        self.map.get(key)
    }
    pub fn remove(&mut self, key: &BatchKey) {
        if let Some(b) = self.map.remove(key) {
            self.bytes -= b.wire_bytes();
        }
    }
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

#[derive(Debug)]
struct Pending {
    /// The decree, once the payload is here.
    decree: Option<Decree>,
    key: Option<BatchKey>,
}

#[derive(Debug)]
pub struct LearnerState {
    /// The next instance to deliver; everything below is delivered (or skipped as duplicate).
    pub next: Instance,
    pending: BTreeMap<Instance, Pending>,
    dedup: Dedup,
    /// Hand deliveries to the application (learner role).
    pub deliver: bool,
    /// The highest instance known decided, here or elsewhere.
    pub decided_max: Instance,
    pub last_progress_us: Micros,
    pub last_retrieve_us: Micros,
    pub retrieve_round: usize,
    /// Bound on decisions held ahead of a gap.
    max_pending: usize,
    /// Decided instances waiting for their payload, by batch key.
    waiting: HashMap<BatchKey, Instance>,
    /// Acceptors (ring positions) that answered a retrieve for `trimmed_at` with a log start
    /// above it, and the lowest such log start; and those that answered without it, trimmed
    /// or not (see `note_unserved`).
    pub trimmed_at: Instance,
    pub trimmed_mask: u64,
    pub trimmed_floor: Instance,
    pub unserved_mask: u64,
    /// The best de-duplication memory a peer handed for the instances this learner may have
    /// to skip from `trimmed_at` on: every batch first decided in `[.0, .1)` (`Decided`).
    pub skip_memory: Option<SkipMemoryRange>,
    /// Per ring position, the `delivered_upto` its last heartbeat reported (a restarted
    /// node reports less than its earlier life: the last report counts, not the highest);
    /// `None` before its first report to this learner.
    pub peer_delivered: Vec<Option<Instance>>,
    /// When this learner last asked a peer for de-duplication memory (at most one ask per
    /// retrieve timeout: an answer that falls short must not start a storm).
    pub memory_asked_us: Micros,
    /// Report instances that deliver nothing as [`Pass`]es (the Multi-Ring merge counts them).
    pub report_passes: bool,
    /// Passes reported and not yet taken (`ComposableRing::drain_passes`).
    pub passes: Vec<Pass>,
    /// Hold deliveries: the Multi-Ring merge's buffer for this ring is full. Decisions wait
    /// in `pending` (bounded by `max_pending`; beyond, they are retrieved again later).
    pub paused: bool,
    /// The layer above takes this learner's snapshots (a Multi-Ring learner with snapshots
    /// on, `multiring/snapshot.rs`): behind the trim point it neither skips nor fetches a
    /// snapshot of its own ring, it says so in `behind_trim` and the layer installs one of
    /// its own snapshots, which holds this ring's position with the others'.
    pub composed_snapshots: bool,
    /// Set when a learner with `composed_snapshots` is behind the trim point: `(next,
    /// floor)` as `behind_trim_point_in` got them; taken by the layer above.
    pub behind_trim: Option<(Instance, Instance)>,
    /// The instance of the last delivery: deliveries go strictly up (asserted).
    last_delivered: Instance,
}

impl LearnerState {
    pub fn new(deliver: bool, max_pending: usize, now: Micros) -> LearnerState {
        LearnerState {
            next: 1,
            pending: BTreeMap::new(),
            dedup: Dedup::default(),
            deliver,
            decided_max: 0,
            last_progress_us: now,
            last_retrieve_us: 0,
            retrieve_round: 0,
            max_pending,
            waiting: HashMap::new(),
            trimmed_at: 0,
            trimmed_mask: 0,
            trimmed_floor: 0,
            unserved_mask: 0,
            skip_memory: None,
            peer_delivered: Vec::new(),
            memory_asked_us: 0,
            report_passes: false,
            passes: Vec::new(),
            paused: false,
            composed_snapshots: false,
            behind_trim: None,
            last_delivered: 0,
        }
    }

    /// Every instance up to this one is delivered here.
    pub fn delivered_upto(&self) -> Instance {
        self.next - 1
    }

    /// Whether this node knows the decree decided in `instance` (for answering retrieves and
    /// phase 1 when the acceptor store no longer holds it).
    pub fn knows(&self, instance: Instance) -> bool {
        instance < self.next
            || self
                .pending
                .get(&instance)
                .is_some_and(|p| p.decree.is_some())
    }

    /// Records a decision. `decree` is `None` when the payload is not here yet (`key` says
    /// which batch it is). Returns true if it was new.
    pub fn on_decided(
        &mut self,
        instance: Instance,
        decree: Option<Decree>,
        key: Option<BatchKey>,
    ) -> bool {
        self.decided_max = self.decided_max.max(instance);
        if instance < self.next {
            return false;
        }
        if !self.pending.contains_key(&instance)
            && self.pending.len() >= self.max_pending
            && instance > self.next + self.max_pending as u64
        {
            // Too far ahead of a gap: forget it, the retrieve brings it back in order.
            return false;
        }
        let entry = self
            .pending
            .entry(instance)
            .or_insert(Pending { decree: None, key });
        if entry.decree.is_some() {
            return false;
        }
        match decree {
            Some(d) => {
                assert!(
                    entry.key.is_none() || entry.key == d.key(),
                    "safety invariant broken: instance {instance} decided two decrees (batch \
                     {:?} by key, then {:?})",
                    entry.key,
                    d.key()
                );
                if let Some(k) = entry.key {
                    self.waiting.remove(&k);
                }
                entry.decree = Some(d);
                true
            }
            None => {
                if let Some(k) = key {
                    entry.key = Some(k);
                    self.waiting.insert(k, instance);
                }
                false
            }
        }
    }

    /// A payload arrived: completes the decision waiting for it, if any.
    pub fn offer_payload(&mut self, batch: &Batch) {
        if let Some(instance) = self.waiting.remove(&batch.key())
            && let Some(p) = self.pending.get_mut(&instance)
            && p.decree.is_none()
            && p.key == Some(batch.key())
        {
            p.decree = Some(Decree::Values(batch.clone()));
        }
    }

    /// Whether any decided instance waits for its payload.
    pub fn has_waiting(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Whether the next instance waits only for its payload.
    #[cfg(test)]
    pub fn next_missing_payload(&self) -> Option<BatchKey> {
        self.pending
            .get(&self.next)
            .and_then(|p| if p.decree.is_none() { p.key } else { None })
    }

    /// Delivers every contiguous decided instance. Returns the number of instances passed.
    /// `on_decided` hears of every instance passed, with its decree, or only its key for a
    /// copy of a batch delivered before (see `known_duplicate`), which `dup_by_key` allows:
    /// an amnesic acceptor under repair must store every decree it learns, so it waits for
    /// the payload instead.
    pub fn drain(
        &mut self,
        now: Micros,
        cache: &mut PayloadCache,
        deliveries: &mut Vec<Delivery>,
        dup_by_key: bool,
        mut on_decided: impl FnMut(Instance, Option<&Decree>, Option<BatchKey>),
    ) -> u64 {
        let start = self.next;
        // A Multi-Ring node counts every ring's slots, learner or not (a coordinator sizes
        // its skips from them); the merge hands values to the application only where this
        // node is a learner.
        let report = self.report_passes;
        let emit = self.deliver || report;
        loop {
            if self.paused {
                break;
            }
            let ready = matches!(self.pending.first_key_value(), Some((&i, p))
                if i == self.next
                    && (p.decree.is_some() || (dup_by_key && self.known_duplicate(i, p.key))));
            if !ready {
                // Drop stale entries below next (cannot happen by construction; cheap check).
                while matches!(self.pending.first_key_value(), Some((&i, _)) if i < self.next) {
                    self.pending.pop_first();
                }
                break;
            }
            let Some((instance, p)) = self.pending.pop_first() else {
                break;
            };
            if let Some(k) = p.key {
                self.waiting.remove(&k);
            }
            let Some(decree) = p.decree else {
                // A batch this learner delivered before, decided again: every learner
                // skips it, so its payload is not needed (see `known_duplicate`).
                on_decided(instance, None, p.key);
                if report {
                    self.passes.push(Pass {
                        instance,
                        weight: 1,
                        data: None,
                    });
                }
                self.next += 1;
                continue;
            };
            on_decided(instance, Some(&decree), decree.key());
            let pass = |weight: u64, data: Option<bytes::Bytes>| Pass {
                instance,
                weight,
                data,
            };
            match decree {
                Decree::Values(batch) => {
                    cache.remove(&batch.key());
                    if self.dedup.first_time_batch(&batch, instance) {
                        if emit {
                            assert!(
                                instance > self.last_delivered,
                                "safety invariant broken: delivery of instance {instance} \
                                 after instance {}: deliveries go strictly in order",
                                self.last_delivered
                            );
                            self.last_delivered = instance;
                            deliveries.push(Delivery::new(instance, batch));
                        }
                    } else if report {
                        self.passes.push(pass(1, None));
                    }
                }
                // A meta decree of weight k stands for k merge slots (a Multi-Ring skip, seed
                // 000 §3.1.4); weight 0 never leaves a coordinator, and would still take the
                // one slot its instance is.
                Decree::Meta { weight, data } if report => {
                    let data = (!data.is_empty()).then_some(data);
                    self.passes.push(pass(u64::from(weight.max(1)), data));
                }
                Decree::Noop if report => self.passes.push(pass(1, None)),
                _ => {}
            }
            self.next += 1;
        }
        let passed = self.next - start;
        if passed > 0 {
            self.last_progress_us = now;
            self.retrieve_round = 0;
        }
        passed
    }

    /// Whether the batch `key` decided in `instance` is a copy of one this learner
    /// delivered in an earlier instance: the de-duplication rule skips it whatever its
    /// payload, so a decision known only by key is enough to pass it. Without this, a
    /// learner whose payload cache dropped the batch at its first delivery waited for the
    /// payload of a copy it would skip, and when no live peer still had it, for good.
    fn known_duplicate(&self, instance: Instance, key: Option<BatchKey>) -> bool {
        key.and_then(|k| self.dedup.decided_at(k))
            .is_some_and(|first| first < instance)
    }

    /// An acceptor at ring position `pos` answered a retrieve: its log starts at
    /// `log_start` and it looked at every instance below `scanned_to`. Counts it among the
    /// acceptors that cannot serve `next` when it did not (see [`LearnerState::behind_floor`]).
    pub fn note_unserved(&mut self, pos: usize, log_start: Instance, scanned_to: Instance) {
        let next = self.next;
        if self.knows(next) {
            return;
        }
        let trimmed = next < log_start;
        if !trimmed && next >= scanned_to {
            return; // it did not look that far
        }
        self.reset_trimmed_for_next();
        let bit = 1u64 << pos;
        self.unserved_mask |= bit;
        if trimmed {
            self.trimmed_mask |= bit;
            self.trimmed_floor = self.trimmed_floor.min(log_start);
        }
    }

    /// The lowest log start past `next` once every acceptor in `live` (a position mask)
    /// answered without `next` and at least one had trimmed past it: then no live log can
    /// serve `next` any more, and the learner must install a peer's snapshot, or skip
    /// (`behind_trim_point`). An acceptor that never held the decision (it did not vote,
    /// and kept what it learned in memory only) cannot serve it either; waiting for every
    /// live acceptor to report a trim, as this used to, then waited for good (found by the
    /// faults-remain phase: durable uring-snapshots, 5 nodes, mixed seed 2).
    ///
    /// With `snapshots` (the group's learners take them), no trim is needed: a snapshot is
    /// the state after every instance it covers, and installing one is safe wherever the log
    /// cannot serve. Then `next + 1` when no acceptor trimmed past `next`: the acceptors'
    /// logs may hold only undecided votes for instances every learner that delivered them
    /// installed past (found by the power_loss mix, ringpaxos seed 2088: two
    /// learners installed a snapshot, the four others waited at the instance after theirs,
    /// not trimmed yet, and nobody could serve it). Only a learner with application state
    /// to install: one without would skip (`behind_trim_point_in`), and skipping what no
    /// acceptor trimmed loses it where the coordinator's backfill would still decide it (a
    /// Multi-Ring learner, whose ring learners hold no state, skipped that way and left the
    /// merge: multiring power_loss seed 6). A Multi-Ring learner whose layer takes
    /// snapshots (`composed_snapshots`) has state there, and installs as the others do.
    pub fn behind_floor(&self, live: u64, snapshots: bool) -> Option<Instance> {
        let unserved = self.trimmed_at == self.next
            && !self.knows(self.next)
            && live & !self.unserved_mask == 0
            && self.unserved_mask != 0;
        let has_state = self.has_state();
        match (unserved, self.trimmed_mask != 0) {
            (true, true) => Some(self.trimmed_floor),
            (true, false) if snapshots && has_state => Some(self.next + 1),
            _ => None,
        }
    }

    /// Whether this learner holds application state that a snapshot must bring forward
    /// (it may not skip): a learner of a single ring, or of a Multi-Ring ring whose layer
    /// takes snapshots. A Multi-Ring node that only counts a ring's slots (not a learner of
    /// it), or a Multi-Ring learner without snapshots, holds none here.
    pub fn has_state(&self) -> bool {
        self.deliver && (!self.report_passes || self.composed_snapshots)
    }

    fn reset_trimmed_for_next(&mut self) {
        if self.trimmed_at != self.next {
            self.trimmed_at = self.next;
            self.trimmed_mask = 0;
            self.unserved_mask = 0;
            self.trimmed_floor = Instance::MAX;
            self.skip_memory = None;
        }
    }

    /// The instance a batch was decided in, if this node delivered it recently.
    pub fn decided_at(&self, key: BatchKey) -> Option<Instance> {
        self.dedup.decided_at(key)
    }

    /// Whether the learner is behind what it knows to be decided.
    pub fn behind(&self) -> bool {
        self.decided_max >= self.next
    }

    /// Goes on after `upto` from a snapshot (restored at start, or installed from a peer):
    /// the de-duplication memory it carried replaces this learner's, and decisions held
    /// for instances after `upto` stay.
    pub fn install(&mut self, upto: Instance, dedup: Dedup) {
        debug_assert!(
            upto + 1 >= self.next,
            "a snapshot never moves the learner back"
        );
        self.dedup = dedup;
        while matches!(self.pending.first_key_value(), Some((&i, _)) if i <= upto) {
            if let Some((_, p)) = self.pending.pop_first()
                && let Some(k) = p.key
            {
                self.waiting.remove(&k);
            }
        }
        self.next = self.next.max(upto + 1);
        self.decided_max = self.decided_max.max(upto);
        self.retrieve_round = 0;
        self.trimmed_at = 0;
        self.trimmed_mask = 0;
        self.unserved_mask = 0;
        debug_assert!(
            self.pending.keys().all(|&i| i > upto),
            "nothing pending at or below the snapshot"
        );
    }

    /// This learner's de-duplication memory for `[from, to)` (see `Decided::dedup`).
    pub fn dedup_between(&self, from: Instance, to: Instance) -> Vec<(BatchKey, Instance)> {
        self.dedup.entries_between(from, to, SKIP_DEDUP_MAX)
    }

    /// Encodes the de-duplication memory (see [`Dedup::encode`]).
    pub fn encode_dedup(&self, e: &mut Encoder) {
        self.dedup.encode(e);
    }

    /// The first instance at or after `from` whose decision (with its decree) is here.
    pub fn first_known_from(&self, from: Instance) -> Option<Instance> {
        self.pending
            .range(from..)
            .find(|(_, p)| p.decree.is_some())
            .map(|(&i, _)| i)
    }

    /// A peer's de-duplication memory: every batch first decided in `[from, to)` is in
    /// `entries`. Kept if it starts at or before `next` and covers more than what this
    /// learner holds already.
    pub fn offer_skip_memory(
        &mut self,
        from: Instance,
        to: Instance,
        mut entries: Vec<(BatchKey, Instance)>,
    ) {
        if from > self.next || to <= self.next {
            return;
        }
        self.reset_trimmed_for_next();
        if self.skip_memory.as_ref().is_none_or(|(_, t, _)| to > *t) {
            entries.sort_unstable_by_key(|&(k, i)| (i, k.origin.0, k.first_seq));
            self.skip_memory = Some((from, to, entries));
        }
    }

    /// A peer at ring position `pos` reported in its heartbeat that it delivered up to
    /// `upto`.
    pub fn note_peer_delivered(&mut self, pos: usize, upto: Instance) {
        if self.peer_delivered.len() <= pos {
            self.peer_delivered.resize(pos + 1, None);
        }
        self.peer_delivered[pos] = Some(upto);
    }

    /// Whether this learner holds de-duplication memory for every instance up to `to`
    /// (exclusive) that it would skip: vacuous when `to` is not past `next`.
    pub fn skip_memory_covers(&self, to: Instance) -> bool {
        to <= self.next
            || self
                .skip_memory
                .as_ref()
                .is_some_and(|(f, t, _)| *f <= self.next && *t >= to)
    }

    /// Jumps over instances nobody can serve any more (trimmed everywhere). Only for
    /// in-memory stores; snapshots replace this with durable storage. The batches first
    /// decided in the skipped instances join the de-duplication memory (as an acceptor
    /// handed them, `skip_memory`), so a copy decided again after the jump is skipped
    /// here as everywhere else (bug B3: with an empty memory the skipping learner delivered
    /// it and every other learner skipped it).
    pub fn jump_to(&mut self, instance: Instance) {
        if let Some((_, _, entries)) = self.skip_memory.take() {
            let upto: Vec<_> = entries.into_iter().filter(|&(_, i)| i < instance).collect();
            self.dedup.merge(&upto);
        }
        if instance > self.next {
            self.next = instance;
            while matches!(self.pending.first_key_value(), Some((&i, _)) if i < self.next) {
                if let Some((_, p)) = self.pending.pop_first()
                    && let Some(k) = p.key
                {
                    self.waiting.remove(&k);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{BatchBuilder, NodeId};

    fn batch(origin: u32, seq: u64) -> Batch {
        let mut b = BatchBuilder::new(NodeId(origin), seq, 8);
        b.push(b"x");
        b.finish()
    }

    #[test]
    fn delivers_in_instance_order_across_a_gap() {
        let mut l = LearnerState::new(true, 1000, 0);
        let mut cache = PayloadCache::new(1 << 20);
        let mut out = Vec::new();
        l.on_decided(2, Some(Decree::Values(batch(1, 10))), None);
        assert_eq!(l.drain(0, &mut cache, &mut out, true, |_, _, _| {}), 0);
        assert!(out.is_empty());
        l.on_decided(1, Some(Decree::Values(batch(1, 1))), None);
        assert_eq!(l.drain(0, &mut cache, &mut out, true, |_, _, _| {}), 2);
        assert_eq!(
            out.iter().map(|d| d.instance).collect::<Vec<_>>(),
            vec![1, 2]
        );
    }

    #[test]
    fn a_batch_decided_twice_is_delivered_once() {
        let mut l = LearnerState::new(true, 1000, 0);
        let mut cache = PayloadCache::new(1 << 20);
        let mut out = Vec::new();
        l.on_decided(1, Some(Decree::Values(batch(1, 1))), None);
        l.on_decided(2, Some(Decree::Noop), None);
        l.on_decided(3, Some(Decree::Values(batch(1, 1))), None);
        l.drain(0, &mut cache, &mut out, true, |_, _, _| {});
        assert_eq!(out.len(), 1);
        assert_eq!(l.next, 4);
    }

    #[test]
    fn payload_arrives_after_decision() {
        let mut l = LearnerState::new(true, 1000, 0);
        let mut cache = PayloadCache::new(1 << 20);
        let mut out = Vec::new();
        let b = batch(2, 5);
        l.on_decided(1, None, Some(b.key()));
        assert_eq!(l.next_missing_payload(), Some(b.key()));
        cache.insert(&b);
        l.offer_payload(&b);
        l.drain(0, &mut cache, &mut out, true, |_, _, _| {});
        assert_eq!(out.len(), 1);
        assert_eq!(cache.bytes(), 0);
    }
}
