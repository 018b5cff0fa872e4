//! Bounded in-memory acceptor store: seed 000 §3.4 `CyclicArray` (15 000 decisions by
//! default there). Instances live in a window `[log_start, log_start + capacity)`; when a
//! vote lands beyond the window, the oldest *decided* entries are dropped to make room. An
//! undecided vote is never dropped: if the window is full of them, the new vote is refused.

use super::{Accepted, AcceptorStore, StorageError};
use crate::types::{Ballot, Instance};
use std::collections::VecDeque;

#[derive(Debug)]
pub struct MemoryStore {
    promised: Ballot,
    log_start: Instance,
    entries: VecDeque<Option<Accepted>>,
    capacity_instances: usize,
    capacity_bytes: usize,
    bytes_held: usize,
    max_instance: Instance,
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
        }
    }

    /// Drops the oldest entry if it is empty or decided. Returns false if it cannot.
    fn pop_front_decided(&mut self) -> bool {
        match self.entries.front() {
            None => false,
            Some(Some(a)) if !a.decided => false,
            Some(_) => {
                if let Some(Some(a)) = self.entries.pop_front() {
                    self.bytes_held -= a.decree.wire_bytes();
                }
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
        // Make room: the window in instances, then in bytes.
        while (instance - self.log_start) as usize >= self.capacity_instances
            || (self.bytes_held + bytes > self.capacity_bytes && !self.entries.is_empty())
        {
            if !self.pop_front_decided() {
                if self.entries.is_empty()
                    && (instance - self.log_start) as usize >= self.capacity_instances
                {
                    // Nothing held at all: slide the empty window forward.
                    self.log_start = instance + 1 - self.capacity_instances as u64;
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
        let from = from.max(self.log_start);
        let mut out = Vec::new();
        let mut i = from;
        while i < to {
            let idx = (i - self.log_start) as usize;
            match self.entries.get(idx) {
                None => break,
                Some(Some(a)) => out.push((i, a.clone())),
                Some(None) => {}
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
        let undecided_front = matches!(self.entries.front(), Some(Some(a)) if !a.decided);
        !(self.entries.len() >= self.capacity_instances && undecided_front)
            && self.bytes_held < self.capacity_bytes
    }
    fn bytes_held(&self) -> usize {
        self.bytes_held
    }
    fn trim(&mut self, below: Instance) {
        while self.log_start < below {
            match self.entries.pop_front() {
                Some(e) => {
                    if let Some(a) = e {
                        self.bytes_held -= a.decree.wire_bytes();
                    }
                    self.log_start += 1;
                }
                None => self.log_start = below,
            }
        }
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
    fn empty_window_slides_to_a_far_instance() {
        let mut s = MemoryStore::new(4, 1 << 20);
        assert!(s.put(100, acc(false)));
        assert_eq!(s.max_instance(), 100);
        assert_eq!(s.range(1, 200).len(), 1);
    }
}
