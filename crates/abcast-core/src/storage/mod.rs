//! The acceptor's stable storage, behind one trait (seed 000 §3.4, `StableStorage`).
//!
//! This issue brings the bounded in-memory store (seed 000's `CyclicArray`). The trait is
//! shaped for durable back-ends: writes are buffered and `sync` makes everything written so
//! far durable in one group commit; a driver calls `sync` before sending any message that
//! depends on those writes (the protocol sets `Outbox::needs_sync`).

mod memory;

pub use memory::MemoryStore;

use crate::types::{Ballot, Decree, Instance};

/// What an acceptor accepted (voted for) in one instance: seed 003's v-rnd and v-val.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub ballot: Ballot,
    pub decree: Decree,
    /// The acceptor saw the decision for this instance: the decree can never change.
    pub decided: bool,
}

/// Storage of an acceptor's promises and votes.
pub trait AcceptorStore {
    /// The promised ballot (seed 003's rnd). It covers every instance at or above
    /// `log_start()`.
    fn promised(&self) -> Ballot;
    fn set_promised(&mut self, ballot: Ballot);
    fn get(&self, instance: Instance) -> Option<&Accepted>;
    /// Stores a vote. Returns false, storing nothing, when the store cannot hold it without
    /// dropping an undecided vote (the acceptor then does not vote: not voting is always safe).
    fn put(&mut self, instance: Instance, accepted: Accepted) -> bool;
    fn mark_decided(&mut self, instance: Instance);
    /// The highest instance with an accepted value, or 0.
    fn max_instance(&self) -> Instance;
    /// The lowest instance still held; below it everything was decided and trimmed.
    fn log_start(&self) -> Instance;
    /// Instances in `[from, to)` that hold an accepted value, in order.
    fn range(&self, from: Instance, to: Instance) -> Vec<(Instance, Accepted)>;
    /// Makes every write so far durable (group commit). No-op for in-memory stores.
    fn sync(&mut self) -> Result<(), StorageError>;
    /// Whether the store kept its state across the last restart. An in-memory store did not:
    /// the acceptor is amnesic until repaired (see `uring::acceptor`).
    fn is_durable(&self) -> bool;
    /// Whether the store has room for one more undecided instance; a full store applies
    /// backpressure to the coordinator.
    fn has_room(&self) -> bool;
    /// Bytes of decree payload held.
    fn bytes_held(&self) -> usize;
}

/// An I/O failure of a durable store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageError(pub String);

impl std::fmt::Display for StorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "storage error: {}", self.0)
    }
}

impl std::error::Error for StorageError {}
