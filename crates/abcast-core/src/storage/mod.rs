//! Stable storage behind two traits: [`AcceptorStore`], the acceptor's promises and votes
//! per instance (the ring protocols; seed 000 §3.4, `StableStorage`), and [`LogStore`], a
//! replicated log with its hard state (the leader-based protocols of seed 001: Sequence
//! Paxos and Raft; see `log.rs` for which uses what). Both durable back-ends write their
//! own records on one segmented log (`seglog.rs`: segments, spares, group commit,
//! torn-tail recovery): [`DurableStore`] (`record.rs`, magic `ABL3`) and
//! [`DurableLogStore`] (`log_record.rs`, magic `ABG2`).
//!
//! The acceptor store's back-ends:
//! The back-ends of seed 000 §3.4, chosen per node:
//!
//! | back-end | seed 000 | survives |
//! | --- | --- | --- |
//! | [`NoneStore`] | `NoMemory` | nothing; holds only undecided votes, answers for no lost value (benchmarks only) |
//! | [`MemoryStore`] | `InMemory`, `CyclicArray` | nothing; bounded, answers retrieves while it holds them |
//! | [`DurableStore`] `sync = false` | `BerkeleyStorage` (deferred writes) | a process crash |
//! | [`DurableStore`] `sync = true` | `SyncBerkeleyStorage` | a machine crash |
//!
//! Writes are buffered and `sync` makes everything written so far durable in one group
//! commit: one write and at most one fdatasync for every record since the last one. A driver
//! calls `sync` before sending any message that depends on those writes (the protocol sets
//! `Outbox::needs_sync`), like raft-rs' `Ready`. The durable log's format, recovery and
//! trimming live here, over the [`LogDir`] trait, so this crate does no I/O itself.
//!
//! A group commit splits in two for a driver that overlaps the fdatasync with its other
//! work ([`AcceptorStore::begin_sync`]): the writes reach the OS at once, and a [`SyncJob`]
//! (the fdatasyncs, runnable on another thread) makes them durable; the driver holds every
//! message that depends on them until the job is done, and calls `end_sync`.

mod durable;
mod fs;
mod log;
mod log_durable;
mod log_memory;
mod log_record;
pub mod memdir;
mod memory;
mod none;
pub mod record;
pub mod seglog;

pub use durable::{DurableOptions, DurableStore, Recovery};
pub use fs::{LogDir, SyncStep};
pub use log::{Entry, LogSnapshot, LogStore};
pub use log_durable::DurableLogStore;
pub use log_memory::MemoryLogStore;
pub use memdir::{DiskFault, MemDir, Tear};
pub use memory::MemoryStore;
pub use none::NoneStore;
pub use seglog::{SegRecovery, TornTail};

use crate::types::{Ballot, Decree, Instance};

/// What an acceptor accepted (voted for) in one instance: seed 003's v-rnd and v-val.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub ballot: Ballot,
    pub decree: Decree,
    /// The acceptor saw the decision for this instance: the decree can never change.
    pub decided: bool,
}

/// The slow half of a group commit: fdatasyncs (and directory fsyncs) of what was already
/// written, to run on any thread ([`AcceptorStore::begin_sync`]).
#[derive(Default)]
pub struct SyncJob {
    steps: Vec<(String, SyncStep)>,
}

impl SyncJob {
    /// Adds one step; `what` names it in an error ("<dir>/<file>: syncing").
    pub fn push(&mut self, what: String, step: SyncStep) {
        self.steps.push((what, step));
    }
    /// Adds the steps of another job (a node with several stores syncs them together).
    pub fn append(&mut self, other: SyncJob) {
        self.steps.extend(other.steps);
    }
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
    /// Runs every step, in order; the first failure is the result.
    pub fn run(self) -> Result<(), StorageError> {
        for (what, step) in self.steps {
            step().map_err(|e| StorageError(format!("{what}: {e}")))?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for SyncJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.steps.iter().map(|(w, _)| w.as_str()).collect();
        f.debug_struct("SyncJob").field("steps", &names).finish()
    }
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
    /// Stores a decision (`accepted.decided`) this acceptor learned without voting for it.
    /// It serves retrieves and phase 1 replies, and safety does not need it: the quorum that
    /// decided it holds the votes. So a durable store keeps it in memory only, and the log
    /// holds each value once per voter instead of once per acceptor (a crash forgets it;
    /// learners fetch it from the voters). An amnesic acceptor under repair must not use it:
    /// what it learns up to its repair target stands in for the votes it forgot.
    fn put_learned(&mut self, instance: Instance, accepted: Accepted) -> bool {
        debug_assert!(accepted.decided, "put_learned takes decisions only");
        self.put(instance, accepted)
    }
    fn mark_decided(&mut self, instance: Instance);
    /// Drops this acceptor's undecided vote for `instance`, which is known decided with
    /// another decree (whose payload is not here): a vote of a lower ballot than the
    /// deciding quorum's, which no phase 1 needs (the quorum that decided holds its votes),
    /// and which, left at the front of a bounded window, would keep the window full for good.
    /// A durable store may keep it on disk (it stays safe: see `put_learned`).
    /// The batch keys of the decided instances from `from` up to the log start that left
    /// this store (its bounded window slid past them, or they were trimmed), with the log
    /// start: `None` unless every decided batch of that range is known here. A learner
    /// that must skip those instances learns from them which batches they decided, so it
    /// skips a copy decided again after them as every other learner does (bug B3).
    fn evicted_keys(
        &self,
        from: Instance,
    ) -> Option<(Instance, Vec<(crate::types::BatchKey, Instance)>)> {
        let _ = from;
        None
    }
    fn discard_stale(&mut self, instance: Instance) {
        let _ = instance;
    }
    /// `instance`, where this store holds nothing, is known decided (with the batch `key`)
    /// but its decree is not here: a bounded window may move past it, which it does not do
    /// past an instance it knows nothing of (`MemoryStore`).
    fn note_decided_elsewhere(&mut self, instance: Instance, key: Option<crate::types::BatchKey>) {
        let _ = (instance, key);
    }
    /// The highest instance with an accepted value, or 0.
    fn max_instance(&self) -> Instance;
    /// The lowest instance still held; below it everything was decided and trimmed.
    fn log_start(&self) -> Instance;
    /// Instances in `[from, to)` that hold an accepted value, in order.
    fn range(&self, from: Instance, to: Instance) -> Vec<(Instance, Accepted)>;
    /// What [`AcceptorStore::range`] returns, less the entries `keep` refuses. A store
    /// that holds its votes in memory asks `keep` before it clones a vote: a learner that
    /// looks at its own store for decisions it lacks (`RingHost::learn_from_own_store`,
    /// up to `retrieve_max_instances` per look) keeps few of them.
    fn range_where(
        &self,
        from: Instance,
        to: Instance,
        keep: &mut dyn FnMut(Instance, &Accepted) -> bool,
    ) -> Vec<(Instance, Accepted)> {
        let mut v = self.range(from, to);
        v.retain(|(i, a)| keep(*i, a));
        v
    }
    /// Makes every write so far durable (group commit). No-op for in-memory stores.
    fn sync(&mut self) -> Result<(), StorageError>;
    /// The first half of `sync`, for a driver that overlaps the fdatasync with other work:
    /// every write so far reaches the OS now, and the job returned, run on any thread, makes
    /// it durable; then the driver calls `end_sync` with its result. `None`: durable already
    /// (synced in place, or nothing to sync). Several jobs may be in flight: the driver runs
    /// them in the order `begin_sync` returned them and calls `end_sync` once for each, in
    /// that order. `sync` only with none in flight (its writes would overtake theirs).
    fn begin_sync(&mut self) -> Result<Option<SyncJob>, StorageError> {
        self.sync().map(|()| None)
    }
    /// The job of `begin_sync` ran, with this result. An error fails the store (every later
    /// call returns it): the acceptor can no longer keep its promises.
    fn end_sync(&mut self, _result: &Result<(), StorageError>) {}
    /// Whether the store kept its state across the last restart. An in-memory store did not:
    /// the acceptor is amnesic until repaired (see `uring::acceptor`).
    fn is_durable(&self) -> bool;
    /// The protocol's state on this store is whole: it started not amnesic, or its repair
    /// ended. A durable store that opened on an empty directory says it is not durable at
    /// every later open until this is durable (the next sync), so that a life that lost its
    /// state and crashed before its repair restarts amnesic again (issue 33, suspect 2;
    /// `storage::seglog::UNREPAIRED_FILE`). Stores that are never durable ignore it.
    fn mark_whole(&mut self) {}
    /// Whether the store has room for one more undecided instance; a full store applies
    /// backpressure to the coordinator.
    fn has_room(&self) -> bool;
    /// Bytes of decree payload held in memory.
    fn bytes_held(&self) -> usize;
    /// Forgets every instance below `below` (the trim point: decided, and covered by every
    /// learner's snapshot); `log_start()` becomes at least `below`.
    fn trim(&mut self, below: Instance);
    /// Bytes of log on disk (0 for the in-memory back-ends).
    fn log_bytes(&self) -> u64;
    /// Bytes of log appended since the store was opened (0 for the in-memory back-ends).
    fn appended_bytes(&self) -> u64 {
        0
    }
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
