//! Bounded in-memory acceptor store: seed 000 §3.4 `CyclicArray` (15 000 decisions by
//! default there). Instances live in a window `[log_start, log_start + capacity)`; when a
//! vote lands beyond the window, the oldest *decided* entries are dropped to make room. An
//! undecided vote is never dropped: if the window is full of them, the new vote is refused.
//! Nor is an instance this acceptor knows nothing of yet (never voted in, never learned):
//! dropping it made the acceptor refuse every later vote there as "trimmed", and an
//! instance every acceptor's window had passed so could never be decided, while every
//! learner waited for it (found by the simulator's learner_skip mix, uring seed 187). The
//! window moves past it once this node learns its decision. (The durable log's cache,
//! [`MemoryStore::cache`], may drop anything: the disk holds it.)

use super::{Accepted, AcceptorStore, StorageError};
use crate::types::{Ballot, BatchKey, Decree, Instance};
use std::collections::VecDeque;

/// Batch keys of decided instances kept after their payloads left the window, at most.
pub const EVICTED_KEYS_MAX: usize = 1 << 16;

#[derive(Debug)]
pub struct MemoryStore {
    promised: Ballot,
    log_start: Instance,
    entries: VecDeque<Option<Accepted>>,
    capacity_instances: usize,
    capacity_bytes: usize,
    bytes_held: usize,
    max_instance: Instance,
    /// The batch keys of decided instances that left the window, oldest first: a learner
    /// that must skip them learns which batches they decided (bug B3, see
    /// `AcceptorStore::evicted_keys`). Complete for `[evicted_from, log_start)`.
    evicted: VecDeque<(Instance, BatchKey)>,
    evicted_from: Instance,
    /// A cache in front of a log: instances unknown here may leave the window.
    drop_unknown: bool,
    /// Instances of the window known decided whose decree is not here (with the batch key,
    /// when it had one): they may leave the window.
    decided_elsewhere: std::collections::BTreeMap<Instance, Option<BatchKey>>,
}

impl MemoryStore {
    /// A store holding at most `capacity_instances` instances and `capacity_bytes` of payload.
    pub fn new(capacity_instances: usize, capacity_bytes: usize) -> MemoryStore {
        assert!(
            capacity_instances > 0,
            "capacity_instances must be positive"
        );
        MemoryStore {
            promised: Ballot::ZERO,
            log_start: 1,
            entries: VecDeque::new(),
            capacity_instances,
            capacity_bytes,
            bytes_held: 0,
            max_instance: 0,
            evicted: VecDeque::new(),
            evicted_from: 1,
            drop_unknown: false,
            decided_elsewhere: std::collections::BTreeMap::new(),
        }
    }

    /// The same window as a cache in front of a durable log, which holds everything: it
    /// drops an instance unknown here as readily as a decided one.
    pub fn cache(capacity_instances: usize, capacity_bytes: usize) -> MemoryStore {
        MemoryStore {
            drop_unknown: true,
            ..MemoryStore::new(capacity_instances, capacity_bytes)
        }
    }

    /// The front entry (instance `log_start`) leaves the window: its batch key, if decided,
    /// is kept; an instance never known here breaks the record.
    fn note_evicted(&mut self, e: Option<&Accepted>) {
        match e {
            Some(a) if a.decided => {
                if let Decree::Values(b) = &a.decree {
                    self.evicted.push_back((self.log_start, b.key()));
                }
            }
            _ => {
                self.evicted.clear();
                self.evicted_from = self.log_start + 1;
            }
        }
        while self.evicted.len() > EVICTED_KEYS_MAX {
            if let Some((i, _)) = self.evicted.pop_front() {
                self.evicted_from = i + 1;
            }
        }
    }

    /// Drops the oldest entry if it is empty or decided. Returns false if it cannot.
    fn pop_front_decided(&mut self) -> bool {
        let front_known = self.decided_elsewhere.contains_key(&self.log_start);
        match self.entries.front() {
            None => false,
            Some(Some(a)) if !a.decided => false,
            Some(None) if front_known => {
                let key = self.decided_elsewhere.remove(&self.log_start).flatten();
                self.entries.pop_front();
                // A decree without a batch has nothing to remember.
                if let Some(k) = key {
                    self.evicted.push_back((self.log_start, k));
                }
                self.log_start += 1;
                true
            }
            Some(None) if !self.drop_unknown => false,
            Some(_) => {
                let e = self.entries.pop_front().flatten();
                if let Some(a) = &e {
                    self.bytes_held -= a.decree.wire_bytes();
                }
                self.note_evicted(e.as_ref());
                self.log_start += 1;
                true
            }
        }
    }
}

impl AcceptorStore for MemoryStore {
    fn promised(&self) -> Ballot {
        self.promised
    }
    fn set_promised(&mut self, ballot: Ballot) {
        debug_assert!(ballot >= self.promised, "promise must not go down");
        self.promised = ballot;
    }
    fn get(&self, instance: Instance) -> Option<&Accepted> {
        if instance < self.log_start {
            return None;
        }
        self.entries
            .get((instance - self.log_start) as usize)
            .and_then(|e| e.as_ref())
    }
    fn put(&mut self, instance: Instance, accepted: Accepted) -> bool {
        if instance < self.log_start {
            // Trimmed: it was decided, and a vote there changes nothing.
            return false;
        }
        let bytes = accepted.decree.wire_bytes();
        // Make room: the window in instances, then in bytes. What the entry replaces is not
        // counted, and the entry itself is never dropped to make room for itself: a vote
        // replaced by its decision at the front of a window full in bytes was refused
        // before, so the front stayed undecided, the window never moved again, and a
        // learner behind it could wait for good on an instance no acceptor served nor
        // reported trimmed (the state a Ring Paxos learner was found stuck in after
        // `abcast demo --protocol ringpaxos --kill` under load). The front entry may so
        // exceed the byte bound by one decree, until it is decided and dropped.
        let replaced = |s: &MemoryStore| s.get(instance).map_or(0, |a| a.decree.wire_bytes());
        while (instance - self.log_start) as usize >= self.capacity_instances
            || (self.bytes_held - replaced(self) + bytes > self.capacity_bytes
                && !self.entries.is_empty()
                && self.log_start < instance)
        {
            if !self.pop_front_decided() {
                if self.drop_unknown
                    && self.entries.is_empty()
                    && (instance - self.log_start) as usize >= self.capacity_instances
                {
                    // Nothing held at all: slide the empty window forward.
                    self.log_start = instance + 1 - self.capacity_instances as u64;
                    self.evicted.clear();
                    self.evicted_from = self.log_start;
                    continue;
                }
                return false;
            }
        }
        if instance < self.log_start {
            return false;
        }
        let idx = (instance - self.log_start) as usize;
        if idx >= self.entries.len() {
            self.entries.resize(idx + 1, None);
        }
        self.decided_elsewhere.remove(&instance);
        if let Some(old) = self.entries[idx].take() {
            debug_assert!(
                !old.decided || old.decree == accepted.decree,
                "a decided instance changed its decree"
            );
            self.bytes_held -= old.decree.wire_bytes();
        }
        self.bytes_held += bytes;
        self.entries[idx] = Some(accepted);
        self.max_instance = self.max_instance.max(instance);
        true
    }
    fn discard_stale(&mut self, instance: Instance) {
        if instance < self.log_start {
            return;
        }
        let idx = (instance - self.log_start) as usize;
        if let Some(slot) = self.entries.get_mut(idx)
            && slot.as_ref().is_some_and(|a| !a.decided)
            && let Some(old) = slot.take()
        {
            self.bytes_held -= old.decree.wire_bytes();
        }
    }
    fn mark_decided(&mut self, instance: Instance) {
        if instance < self.log_start {
            return;
        }
        if let Some(Some(a)) = self.entries.get_mut((instance - self.log_start) as usize) {
            a.decided = true;
        }
    }
    fn max_instance(&self) -> Instance {
        self.max_instance
    }
    fn log_start(&self) -> Instance {
        self.log_start
    }
    fn range(&self, from: Instance, to: Instance) -> Vec<(Instance, Accepted)> {
        self.range_where(from, to, &mut |_, _| true)
    }
    fn range_where(
        &self,
        from: Instance,
        to: Instance,
        keep: &mut dyn FnMut(Instance, &Accepted) -> bool,
    ) -> Vec<(Instance, Accepted)> {
        // The one walk of the entries (`range` keeps them all); `keep` is asked before
        // the clone.
        let from = from.max(self.log_start);
        let mut out = Vec::new();
        let mut i = from;
        while i < to {
            let idx = (i - self.log_start) as usize;
            match self.entries.get(idx) {
                None => break,
                Some(Some(a)) if keep(i, a) => out.push((i, a.clone())),
                Some(_) => {}
            }
            i += 1;
        }
        out
    }
    fn sync(&mut self) -> Result<(), StorageError> {
        Ok(())
    }
    fn is_durable(&self) -> bool {
        false
    }
    fn has_room(&self) -> bool {
        // A full window has room when its front can go (decided, or never voted in): `put`
        // evicts it. Only an undecided vote at the front keeps the window full; a full byte
        // budget with an evictable front used to read as "no room" and, since only `put`
        // evicts, stayed so for good.
        let undecided_front = match self.entries.front() {
            Some(Some(a)) => !a.decided,
            Some(None) => {
                !self.drop_unknown && !self.decided_elsewhere.contains_key(&self.log_start)
            }
            None => false,
        };
        !undecided_front
            || (self.entries.len() < self.capacity_instances
                && self.bytes_held < self.capacity_bytes)
    }
    fn bytes_held(&self) -> usize {
        self.bytes_held
    }
    fn trim(&mut self, below: Instance) {
        self.decided_elsewhere = self.decided_elsewhere.split_off(&below);
        while self.log_start < below {
            match self.entries.pop_front() {
                Some(e) => {
                    if let Some(a) = &e {
                        self.bytes_held -= a.decree.wire_bytes();
                    }
                    self.note_evicted(e.as_ref());
                    self.log_start += 1;
                }
                None => {
                    self.log_start = below;
                    self.evicted.clear();
                    self.evicted_from = below;
                }
            }
        }
    }
    fn note_decided_elsewhere(&mut self, instance: Instance, key: Option<BatchKey>) {
        let in_window = instance >= self.log_start
            && instance < self.log_start + self.capacity_instances as u64;
        let empty = self
            .entries
            .get((instance.saturating_sub(self.log_start)) as usize)
            .is_none_or(|e| e.is_none());
        if in_window && empty {
            self.decided_elsewhere.insert(instance, key);
        }
    }
    fn evicted_keys(&self, from: Instance) -> Option<(Instance, Vec<(BatchKey, Instance)>)> {
        if from < self.evicted_from || from >= self.log_start {
            return None;
        }
        let start = self.evicted.partition_point(|&(i, _)| i < from);
        let keys = self.evicted.range(start..).map(|&(i, k)| (k, i)).collect();
        Some((self.log_start, keys))
    }
    fn log_bytes(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Decree, NodeId};

    fn acc(decided: bool) -> Accepted {
        Accepted {
            ballot: Ballot::new(1, NodeId(1), 0),
            decree: Decree::Noop,
            decided,
        }
    }

    #[test]
    fn window_drops_only_decided_entries() {
        let mut s = MemoryStore::new(4, 1 << 20);
        for i in 1..=4 {
            assert!(s.put(i, acc(false)));
        }
        // Window full of undecided votes: a fifth is refused.
        assert!(!s.put(5, acc(false)));
        assert!(!s.has_room());
        s.mark_decided(1);
        assert!(s.put(5, acc(false)));
        assert_eq!(s.log_start(), 2);
        assert!(s.get(1).is_none());
        assert_eq!(s.get(5).map(|a| a.decided), Some(false));
    }

    /// A window full in bytes whose front is an undecided vote: the decision of that front
    /// instance (another decree, from a later ballot) is stored all the same, and then the
    /// window moves on. Before, the put was refused: the front stayed undecided for good.
    #[test]
    fn a_decision_replaces_the_undecided_front_of_a_window_full_in_bytes() {
        let batch = |seq: u64, len: usize| {
            Decree::Values(crate::types::Batch::single(
                crate::types::ValueId {
                    node: NodeId(1),
                    seq,
                },
                bytes::Bytes::from(vec![7u8; len]),
            ))
        };
        let vote = |d: Decree, decided| Accepted {
            ballot: Ballot::new(1, NodeId(1), 0),
            decree: d,
            decided,
        };
        let size = batch(0, 100).wire_bytes();
        let mut s = MemoryStore::new(64, 3 * size);
        for i in 1..=3 {
            assert!(s.put(i, vote(batch(i, 100), false)));
        }
        assert!(!s.put(4, vote(batch(4, 100), false)), "full in bytes");
        // Instance 1 was decided with another batch of the same size, then a larger one
        // for instance 2 (the window may exceed its bound by that much).
        assert!(s.put_learned(1, vote(batch(9, 100), true)));
        assert_eq!(s.get(1).map(|a| a.decided), Some(true));
        assert!(
            s.put(4, vote(batch(4, 100), false)),
            "the decided front left"
        );
        assert_eq!(s.log_start(), 2);
        assert!(s.put_learned(2, vote(batch(8, 150), true)));
        assert_eq!(s.get(2).map(|a| a.decided), Some(true));
        // The decided front leaves for the next vote; then the window is full of undecided
        // votes again, and one more is refused.
        assert!(s.put(6, vote(batch(6, 100), false)));
        assert_eq!(s.log_start(), 3);
        assert!(!s.put(7, vote(batch(7, 100), false)));
    }

    #[test]
    fn the_keys_of_decided_instances_outlive_their_payloads() {
        let mut s = MemoryStore::new(4, 1 << 20);
        let vote = |i: u64, decided| Accepted {
            ballot: Ballot::ZERO,
            decree: Decree::Values(crate::types::Batch::single(
                crate::types::ValueId {
                    node: crate::types::NodeId(1),
                    seq: i,
                },
                bytes::Bytes::from_static(b"v"),
            )),
            decided,
        };
        for i in 1..=6 {
            assert!(s.put(i, vote(i, true)));
        }
        assert_eq!(s.log_start(), 3);
        let (to, keys) = s
            .evicted_keys(1)
            .expect("instances 1 and 2 left the window, known");
        assert_eq!(to, 3);
        assert_eq!(
            keys.iter()
                .map(|&(k, i)| (k.first_seq, i))
                .collect::<Vec<_>>(),
            [(1, 1), (2, 2)]
        );
        assert_eq!(s.evicted_keys(2).map(|(_, k)| k.len()), Some(1));
        assert!(s.evicted_keys(3).is_none(), "still in the window");
        // In a cache, a slot never known there leaves too, and breaks the record: nothing
        // below it is claimed.
        let mut t = MemoryStore::cache(2, 1 << 20);
        assert!(t.put(2, vote(2, true)));
        assert!(t.put(3, vote(3, true)));
        assert!(t.put(4, vote(4, true)));
        assert_eq!(t.log_start(), 3);
        assert!(
            t.evicted_keys(1).is_none(),
            "instance 1 was never known here"
        );
        assert_eq!(t.evicted_keys(2).map(|(_, k)| k.len()), Some(1));
    }

    #[test]
    fn trim_forgets_everything_below_and_keeps_the_rest() {
        let mut s = MemoryStore::new(8, 1 << 20);
        for i in 1..=5 {
            assert!(s.put(i, acc(i <= 3)));
        }
        s.trim(4);
        assert_eq!(s.log_start(), 4);
        assert!(s.get(3).is_none());
        assert_eq!(s.range(1, 10).len(), 2);
        s.trim(20);
        assert_eq!(s.log_start(), 20);
        assert!(s.range(1, 30).is_empty());
        assert_eq!(s.bytes_held(), 0);
    }

    #[test]
    fn a_cache_slides_to_a_far_instance_an_acceptor_window_does_not() {
        let mut c = MemoryStore::cache(4, 1 << 20);
        assert!(c.put(100, acc(false)));
        assert_eq!(c.max_instance(), 100);
        assert_eq!(c.range(1, 200).len(), 1);
        // An acceptor window keeps the instances it knows nothing of: a vote far ahead is
        // refused (not voting is safe) until they are learned.
        let mut s = MemoryStore::new(4, 1 << 20);
        assert!(!s.put(100, acc(false)));
        assert_eq!(s.log_start(), 1);
        assert!(s.put(1, acc(true)));
        assert!(s.put(4, acc(false)));
        assert!(s.put(5, acc(false)), "1 is decided: it leaves");
        assert!(
            !s.put(6, acc(false)),
            "instance 2 is unknown here: the window holds"
        );
        assert!(!s.has_room());
        assert!(s.put(2, acc(true)) && s.put(3, acc(true)));
        assert!(s.put(6, acc(false)), "2 and 3 decided: the window moves on");
        // The learner that skipped trims the window forward.
        s.trim(50);
        assert!(s.put(52, acc(false)));
    }
}
