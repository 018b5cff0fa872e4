//! No storage: seed 000 §3.4 `NoMemory`, for benchmarks only. The acceptor keeps its promise
//! and its undecided votes (without them it could not take part in consensus at all) and
//! forgets every instance the moment it is decided, so it answers no learner's retrieve:
//! a learner that misses a decision skips it (reported through `Outbox::skips`). The node
//! config says so when this back-end is chosen.

use super::{Accepted, AcceptorStore, StorageError};
use crate::types::{Ballot, Instance};
use std::collections::BTreeMap;

#[derive(Debug)]
pub struct NoneStore {
    promised: Ballot,
    undecided: BTreeMap<Instance, Accepted>,
    /// Undecided votes held at most (the same backpressure as a full memory store).
    capacity_instances: usize,
    bytes_held: usize,
    max_instance: Instance,
    log_start: Instance,
}

impl NoneStore {
    pub fn new(capacity_instances: usize) -> NoneStore {
        NoneStore {
            promised: Ballot::ZERO,
            undecided: BTreeMap::new(),
            capacity_instances: capacity_instances.max(1),
            bytes_held: 0,
            max_instance: 0,
            log_start: 1,
        }
    }

    /// Everything below the oldest undecided vote is forgotten.
    fn advance_log_start(&mut self) {
        self.log_start = match self.undecided.keys().next() {
            Some(&i) => i,
            None => self.max_instance + 1,
        };
    }
}

impl AcceptorStore for NoneStore {
    fn promised(&self) -> Ballot {
        self.promised
    }
    fn set_promised(&mut self, ballot: Ballot) {
        debug_assert!(ballot >= self.promised, "promise must not go down");
        self.promised = ballot;
    }
    fn get(&self, instance: Instance) -> Option<&Accepted> {
        self.undecided.get(&instance)
    }
    fn put(&mut self, instance: Instance, accepted: Accepted) -> bool {
        if instance < self.log_start && !self.undecided.contains_key(&instance) {
            return false;
        }
        self.max_instance = self.max_instance.max(instance);
        if accepted.decided {
            if let Some(old) = self.undecided.remove(&instance) {
                self.bytes_held -= old.decree.wire_bytes();
            }
            self.advance_log_start();
            return true;
        }
        if !self.undecided.contains_key(&instance)
            && self.undecided.len() >= self.capacity_instances
        {
            return false;
        }
        self.bytes_held += accepted.decree.wire_bytes();
        if let Some(old) = self.undecided.insert(instance, accepted) {
            self.bytes_held -= old.decree.wire_bytes();
        }
        self.advance_log_start();
        true
    }
    fn mark_decided(&mut self, instance: Instance) {
        if let Some(old) = self.undecided.remove(&instance) {
            self.bytes_held -= old.decree.wire_bytes();
            self.advance_log_start();
        }
    }
    fn max_instance(&self) -> Instance {
        self.max_instance
    }
    fn log_start(&self) -> Instance {
        self.log_start
    }
    fn range(&self, from: Instance, to: Instance) -> Vec<(Instance, Accepted)> {
        self.undecided
            .range(from..to.max(from))
            .map(|(&i, a)| (i, a.clone()))
            .collect()
    }
    fn sync(&mut self) -> Result<(), StorageError> {
        Ok(())
    }
    fn is_durable(&self) -> bool {
        false
    }
    fn has_room(&self) -> bool {
        self.undecided.len() < self.capacity_instances
    }
    fn bytes_held(&self) -> usize {
        self.bytes_held
    }
    fn trim(&mut self, below: Instance) {
        let keep = self.undecided.split_off(&below);
        for a in self.undecided.values() {
            self.bytes_held -= a.decree.wire_bytes();
        }
        self.undecided = keep;
        self.max_instance = self.max_instance.max(below.saturating_sub(1));
        self.advance_log_start();
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
            decree: Decree::Meta {
                weight: 1,
                data: bytes::Bytes::new(),
            },
            decided,
        }
    }

    #[test]
    fn decided_instances_are_forgotten_at_once() {
        let mut s = NoneStore::new(4);
        assert!(s.put(1, acc(false)));
        assert!(s.put(2, acc(false)));
        assert_eq!(s.log_start(), 1);
        s.mark_decided(1);
        assert!(s.get(1).is_none());
        assert_eq!(s.log_start(), 2);
        assert!(s.put(2, acc(true)));
        assert_eq!(s.log_start(), 3);
        assert!(s.range(1, 10).is_empty());
        assert_eq!(s.bytes_held(), 0);
    }

    #[test]
    fn undecided_votes_are_bounded() {
        let mut s = NoneStore::new(2);
        assert!(s.put(1, acc(false)));
        assert!(s.put(2, acc(false)));
        assert!(!s.has_room());
        assert!(!s.put(3, acc(false)));
        assert!(s.put(2, acc(false)), "a re-vote in a held instance is fine");
    }
}
