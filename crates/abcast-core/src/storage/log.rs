//! The log store: stable storage of a replicated log for the leader-based protocols (seed
//! 001: Sequence Paxos, appendix B, and Raft, §2.5), beside the acceptor store of the ring
//! protocols. Back-ends: [`super::MemoryLogStore`] (nothing survives a restart) and
//! [`super::DurableLogStore`] (on the segmented log, `seglog.rs`, with records of its own,
//! magic `ABG2`).
//!
//! Entries are numbered from 1: `first_index()..=last_index()` are held, everything below
//! `first_index()` was compacted (trimmed, or covered by the snapshot), and an empty log has
//! `last_index() == first_index() - 1`. The ballot of entry `first_index() - 1` stays known
//! (`ballot_at`), for Raft's log-matching check at the compaction boundary.
//!
//! | item | Sequence Paxos (appendix B) | Raft (§2.5) |
//! | --- | --- | --- |
//! | [`LogStore::promised`] | `n_prom` | `currentTerm` in `round`, `votedFor` in `node`, `incarnation` 1 when a vote is held (node ids start at 0, so `NodeId(0)` alone cannot say "none") |
//! | [`LogStore::accepted_round`] | `n_a` | unused (terms are per entry) |
//! | [`Entry::ballot`] | the round that accepted it (`n_a` at the time) | the entry's term in `round` |
//! | [`LogStore::append`] | `v_a ⊕ C` (leader `PROPOSE`, follower `ACCEPT`) | leader append; follower `AppendEntries` after the match |
//! | [`LogStore::append_on_prefix`] | `v_a ← PREFIX(v_a, ld) ++ suffix` (`ACCEPTSYNC`, adopting the promises' suffix) | a conflict: delete the entry and all that follow it, then append |
//! | [`LogStore::entries`] | `SUFFIX(v_a, ld)` for `PROMISE` and `ACCEPTSYNC`; decided entries to deliver | `AppendEntries` to a follower |
//! | [`LogStore::decided_idx`] | `l_d` (length of the decided prefix) | `commitIndex` |
//! | [`LogStore::stop_sign`] | `SS_i`, the stop-sign that ends configuration `i` | unused (joint consensus lives in log entries) |
//! | [`LogStore::set_snapshot`] | compaction: the snapshot of the decided prefix | `InstallSnapshot`, or a local snapshot |
//! | [`LogStore::trim`] | trim the prefix every replica decided (no snapshot) | after a snapshot, to bound the log |
//!
//! Writes are buffered, as for the acceptor store: a batch of them is made durable by one
//! group commit ([`LogStore::sync`], or [`LogStore::begin_sync`] and `end_sync` for a driver
//! that runs the fdatasync on another thread), and a message that depends on them (`PROMISE`,
//! `ACCEPTED`, a vote, an `AppendEntries` reply) leaves only after it. Reads see every write
//! at once, synced or not.
//!
//! Misuse is refused with a [`StorageError`] and changes nothing: appending with a gap or an
//! overlap, truncating a decided entry, trimming an undecided one, a decided index past the
//! log. The store does not order ballots: the protocol decides what to promise. A disk that
//! fails a write (EIO, ENOSPC) is reported by the next sync, as for the acceptor store,
//! not by the write: the store writes nothing more, every later sync fails, and the driver
//! stops the node before anything that depended on the failed write leaves (issue 33,
//! `disk_error`: a Sequence Paxos node panicked on the write's error instead).

use super::{StorageError, SyncJob};
use crate::types::Ballot;
use bytes::Bytes;

/// One entry of the replicated log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// From 1.
    pub index: u64,
    /// Sequence Paxos: the round it was accepted in; Raft: its term (in `round`).
    pub ballot: Ballot,
    /// The protocol's encoding of the entry (a batch, a configuration); shared, not copied.
    pub payload: Bytes,
}

/// A snapshot: the application state of the decided prefix up to `index`, which replaces
/// that prefix of the log (compaction).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogSnapshot {
    /// The last entry it covers.
    pub index: u64,
    /// That entry's ballot (Raft: `lastIncludedTerm`).
    pub ballot: Ballot,
    pub data: Bytes,
}

/// Stable storage of a replicated log and its hard state (see the module comment for which
/// protocol uses what).
pub trait LogStore {
    /// The promised ballot (Sequence Paxos `n_prom`; Raft term and vote).
    fn promised(&self) -> Ballot;
    /// Stores the promise as given (the protocol checks it is not a step back).
    fn set_promised(&mut self, ballot: Ballot) -> Result<(), StorageError>;
    /// The round of the last accepted sequence (Sequence Paxos `n_a`).
    fn accepted_round(&self) -> Ballot;
    fn set_accepted_round(&mut self, ballot: Ballot) -> Result<(), StorageError>;
    /// The length of the decided prefix: entries `..=decided_idx()` are decided.
    fn decided_idx(&self) -> u64;
    /// Moves the decided index up to `idx` (lower: nothing changes). An error past
    /// `last_index()`.
    fn set_decided_idx(&mut self, idx: u64) -> Result<(), StorageError>;
    /// The lowest entry held; below it the log was compacted.
    fn first_index(&self) -> u64;
    /// The highest entry (`first_index() - 1` when none is held).
    fn last_index(&self) -> u64;
    /// The ballot of entry `index`, for `first_index() - 1 ..= last_index()` (0: the
    /// empty prefix, `Ballot::ZERO`); `None` outside.
    fn ballot_at(&self, index: u64) -> Option<Ballot>;
    /// The entries held in `[from, to)`, in order, stopping before the one that would take
    /// the payloads past `max_bytes` (but at least one). Below `first_index()` there are
    /// none: the caller sends the snapshot instead. An error: an entry could not be read
    /// back (the store fails, as a restart would refuse the damaged log).
    fn entries(&self, from: u64, to: u64, max_bytes: usize) -> Result<Vec<Entry>, StorageError>;
    /// Appends entries that continue the log: the first has index `last_index() + 1`, and
    /// each the next. An error, appending nothing, otherwise.
    fn append(&mut self, entries: &[Entry]) -> Result<(), StorageError>;
    /// Removes the suffix from `from` on (nothing if `from > last_index()`). An error if it
    /// would remove a decided entry (`from <= decided_idx()`) or a compacted one.
    fn truncate(&mut self, from: u64) -> Result<(), StorageError>;
    /// Replaces the suffix from `from` on with `entries` (which start at `from`).
    fn append_on_prefix(&mut self, from: u64, entries: &[Entry]) -> Result<(), StorageError> {
        let Some(prefix) = from.checked_sub(1) else {
            return Err(refused("entries are numbered from 1, not 0".into()));
        };
        check_append(prefix, entries)?;
        self.truncate(from)?;
        self.append(entries)
    }
    /// The stop-sign (Sequence Paxos reconfiguration), as the protocol encoded it.
    fn stop_sign(&self) -> Option<&Bytes>;
    fn set_stop_sign(&mut self, stop_sign: Option<Bytes>) -> Result<(), StorageError>;
    fn snapshot(&self) -> Option<&LogSnapshot>;
    /// Stores a snapshot of the decided prefix up to `snapshot.index` and forgets the
    /// entries it covers; the decided index becomes at least its index. If the log holds
    /// the entry at that index with the same ballot, the entries after it stay; otherwise
    /// (a snapshot from the leader that the log disagrees with or does not reach) the whole
    /// log goes and continues after the snapshot (Raft §7). An error, changing nothing, for
    /// a snapshot below the compacted prefix, or one that would remove a decided entry.
    fn set_snapshot(&mut self, snapshot: LogSnapshot) -> Result<(), StorageError>;
    /// Forgets the entries below `below` (Sequence Paxos: decided by every replica); the
    /// snapshot, if any, stays. An error, changing nothing, past `decided_idx() + 1`.
    fn trim(&mut self, below: u64) -> Result<(), StorageError>;
    /// Makes every write so far durable (group commit). No-op for in-memory stores.
    fn sync(&mut self) -> Result<(), StorageError>;
    /// The first half of `sync`, as [`super::AcceptorStore::begin_sync`]: the writes reach
    /// the OS now, and the job, run on any thread, makes them durable; the driver then
    /// calls `end_sync` with its result, one call per job, in order. `None`: durable already.
    fn begin_sync(&mut self) -> Result<Option<SyncJob>, StorageError> {
        self.sync().map(|()| None)
    }
    /// The job of `begin_sync` ran, with this result; an error fails the store.
    fn end_sync(&mut self, _result: &Result<(), StorageError>) {}
    /// Whether the store kept its state across the last restart.
    fn is_durable(&self) -> bool;
    /// The protocol's state on this store is whole: it started not amnesic, or its repair
    /// ended. A durable store that opened on an empty directory says it is not durable at
    /// every later open until this is durable (the next sync), so that a life that lost its
    /// state and crashed before its repair restarts amnesic again (issue 33, suspect 2;
    /// `storage::seglog::UNREPAIRED_FILE`). Stores that are never durable ignore it.
    fn mark_whole(&mut self) {}
    /// Bytes of log on disk (0 in memory).
    fn log_bytes(&self) -> u64 {
        0
    }
}

/// The hard state and shape of a log, apart from the entries: what both back-ends keep in
/// memory and check every operation against, and what the durable one replays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub promised: Ballot,
    pub accepted_round: Ballot,
    pub decided_idx: u64,
    pub first_index: u64,
    pub last_index: u64,
    /// The ballot of entry `first_index - 1`.
    pub prev_ballot: Ballot,
    pub stop_sign: Option<Bytes>,
    pub snapshot: Option<LogSnapshot>,
}

impl Default for Meta {
    fn default() -> Meta {
        Meta {
            promised: Ballot::ZERO,
            accepted_round: Ballot::ZERO,
            decided_idx: 0,
            first_index: 1,
            last_index: 0,
            prev_ballot: Ballot::ZERO,
            stop_sign: None,
            snapshot: None,
        }
    }
}

/// What a snapshot does to the entries after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SnapshotCut {
    /// The log agrees at the snapshot's index: the entries after it stay.
    KeepSuffix,
    /// The log disagrees or ends before it: every entry goes.
    DropAll,
}

fn refused(what: String) -> StorageError {
    StorageError(format!("log store: {what}"))
}

/// `entries` continue a log that ends at `last`.
pub(crate) fn check_append(last: u64, entries: &[Entry]) -> Result<(), StorageError> {
    for (k, e) in entries.iter().enumerate() {
        let want = last + 1 + k as u64;
        if e.index != want {
            return Err(refused(format!(
                "append of entry {} where entry {want} comes next (a gap or an overlap)",
                e.index
            )));
        }
    }
    Ok(())
}

impl Meta {
    /// Whether truncating from `from` changes anything.
    pub fn check_truncate(&self, from: u64) -> Result<bool, StorageError> {
        if from > self.last_index {
            return Ok(false);
        }
        if from <= self.decided_idx {
            return Err(refused(format!(
                "truncating from entry {from} would remove decided entries (decided up to {})",
                self.decided_idx
            )));
        }
        if from < self.first_index {
            return Err(refused(format!(
                "truncating from entry {from}, below the compacted prefix (first entry {})",
                self.first_index
            )));
        }
        Ok(true)
    }

    pub fn truncate(&mut self, from: u64) {
        self.last_index = self.last_index.min(from.saturating_sub(1));
    }

    /// Whether moving the decided index to `idx` changes anything.
    pub fn check_decided(&self, idx: u64) -> Result<bool, StorageError> {
        if idx > self.last_index {
            return Err(refused(format!(
                "decided index {idx} past the last entry {}",
                self.last_index
            )));
        }
        Ok(idx > self.decided_idx)
    }

    /// Whether trimming below `below` changes anything.
    pub fn check_trim(&self, below: u64) -> Result<bool, StorageError> {
        if below > self.decided_idx + 1 {
            return Err(refused(format!(
                "trimming below entry {below} would forget undecided entries (decided up to {})",
                self.decided_idx
            )));
        }
        Ok(below > self.first_index)
    }

    /// Trims below `below`, the entry before which has ballot `prev`.
    pub fn trim(&mut self, below: u64, prev: Ballot) {
        if below > self.first_index {
            self.first_index = below;
            self.prev_ballot = prev;
            self.last_index = self.last_index.max(below - 1);
        }
    }

    /// What storing `s` does, given the ballot the log holds at its index.
    pub fn check_snapshot(
        &self,
        s: &LogSnapshot,
        held: Option<Ballot>,
    ) -> Result<SnapshotCut, StorageError> {
        if s.index + 1 < self.first_index {
            return Err(refused(format!(
                "snapshot at entry {} below the compacted prefix (first entry {})",
                s.index, self.first_index
            )));
        }
        if held == Some(s.ballot) && s.index <= self.last_index {
            return Ok(SnapshotCut::KeepSuffix);
        }
        if self.decided_idx > s.index {
            return Err(refused(format!(
                "snapshot at entry {} disagrees with the log, whose entries up to {} are decided",
                s.index, self.decided_idx
            )));
        }
        Ok(SnapshotCut::DropAll)
    }

    pub fn snapshot(&mut self, s: LogSnapshot, cut: SnapshotCut) {
        if cut == SnapshotCut::DropAll {
            self.last_index = s.index;
        }
        if s.index + 1 > self.first_index {
            self.first_index = s.index + 1;
            self.prev_ballot = s.ballot;
        }
        self.last_index = self.last_index.max(s.index);
        self.decided_idx = self.decided_idx.max(s.index);
        self.snapshot = Some(s);
    }

    /// The ballot of entry `first_index - 1` or, through `held`, of a held entry.
    pub fn ballot_at(
        &self,
        index: u64,
        held: impl FnOnce(u64) -> Option<Ballot>,
    ) -> Option<Ballot> {
        if index + 1 == self.first_index {
            return Some(self.prev_ballot);
        }
        if index < self.first_index || index > self.last_index {
            return None;
        }
        held(index)
    }
}

/// The contract every back-end keeps, run against each (`log_memory.rs`, `log_durable.rs`).
#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::types::NodeId;

    pub fn ballot(round: u32) -> Ballot {
        Ballot::new(round, NodeId(1), 0)
    }

    pub fn entry(index: u64, round: u32) -> Entry {
        Entry {
            index,
            ballot: ballot(round),
            payload: Bytes::from(format!("entry {index} of round {round}")),
        }
    }

    pub fn entries(from: u64, to: u64, round: u32) -> Vec<Entry> {
        (from..to).map(|i| entry(i, round)).collect()
    }

    pub fn indices<S: LogStore>(s: &S) -> Vec<(u64, u32)> {
        s.entries(0, u64::MAX, usize::MAX)
            .expect("read")
            .iter()
            .map(|e| (e.index, e.ballot.round))
            .collect()
    }

    pub fn all<S: LogStore>(new: &mut dyn FnMut() -> S) {
        appends_continue_the_log_and_a_gap_or_overlap_is_refused(&mut new());
        a_truncated_suffix_is_replaced_and_a_decided_entry_is_never_truncated(&mut new());
        trimming_forgets_only_decided_entries_and_keeps_the_boundary_ballot(&mut new());
        a_snapshot_that_agrees_keeps_the_suffix_one_that_disagrees_drops_the_log(&mut new());
        a_snapshot_past_the_log_leaves_an_empty_log_after_it(&mut new());
        reads_are_bounded_by_bytes_but_return_at_least_one_entry(&mut new());
        hard_state_reads_back_what_was_set(&mut new());
    }

    fn appends_continue_the_log_and_a_gap_or_overlap_is_refused<S: LogStore>(s: &mut S) {
        assert_eq!((s.first_index(), s.last_index()), (1, 0));
        assert_eq!(s.ballot_at(0), Some(Ballot::ZERO));
        s.append(&entries(1, 4, 1)).expect("append");
        assert_eq!(s.last_index(), 3);
        assert!(s.append(&entries(5, 6, 1)).is_err(), "a gap");
        assert!(s.append(&entries(3, 5, 1)).is_err(), "an overlap");
        assert!(s.append_on_prefix(0, &[]).is_err(), "index 0");
        assert_eq!(indices(s), vec![(1, 1), (2, 1), (3, 1)], "nothing changed");
        assert!(s.set_decided_idx(4).is_err(), "decided past the log");
        s.set_decided_idx(2).expect("decide");
        s.set_decided_idx(1).expect("a lower one is no change");
        assert_eq!(s.decided_idx(), 2);
        assert_eq!(s.ballot_at(3), Some(ballot(1)));
        assert_eq!(s.ballot_at(4), None);
    }

    fn a_truncated_suffix_is_replaced_and_a_decided_entry_is_never_truncated<S: LogStore>(
        s: &mut S,
    ) {
        s.append(&entries(1, 6, 1)).expect("append");
        s.set_decided_idx(2).expect("decide");
        assert!(s.truncate(2).is_err(), "entry 2 is decided");
        assert!(s.append_on_prefix(2, &entries(2, 3, 2)).is_err());
        s.append_on_prefix(4, &entries(4, 5, 2))
            .expect("replace the suffix");
        assert_eq!(indices(s), vec![(1, 1), (2, 1), (3, 1), (4, 2)]);
        s.truncate(3).expect("truncate");
        assert_eq!(s.last_index(), 2);
        s.truncate(9).expect("past the end: nothing");
        s.append(&entries(3, 5, 3)).expect("append after the cut");
        assert_eq!(indices(s), vec![(1, 1), (2, 1), (3, 3), (4, 3)]);
    }

    fn trimming_forgets_only_decided_entries_and_keeps_the_boundary_ballot<S: LogStore>(s: &mut S) {
        s.append(&entries(1, 11, 1)).expect("append");
        s.append(&entries(11, 13, 2)).expect("append");
        s.set_decided_idx(11).expect("decide");
        assert!(s.trim(13).is_err(), "entry 12 is not decided");
        s.trim(12).expect("trim");
        assert_eq!((s.first_index(), s.last_index()), (12, 12));
        assert_eq!(s.ballot_at(11), Some(ballot(2)), "the boundary's ballot");
        assert_eq!(s.ballot_at(10), None);
        assert_eq!(s.entries(1, 20, usize::MAX).expect("read").len(), 1);
        assert!(s.truncate(11).is_err(), "below the log");
        s.trim(5).expect("below the start: nothing");
        assert_eq!(s.first_index(), 12);
    }

    fn a_snapshot_that_agrees_keeps_the_suffix_one_that_disagrees_drops_the_log<S: LogStore>(
        s: &mut S,
    ) {
        s.append(&entries(1, 9, 1)).expect("append");
        s.set_decided_idx(3).expect("decide");
        let snap = |index, round| LogSnapshot {
            index,
            ballot: ballot(round),
            data: Bytes::from_static(b"state"),
        };
        s.set_snapshot(snap(5, 1)).expect("a snapshot that agrees");
        assert_eq!((s.first_index(), s.last_index()), (6, 8));
        assert_eq!(s.decided_idx(), 5, "a snapshot covers decided entries");
        assert_eq!(s.ballot_at(5), Some(ballot(1)));
        assert!(s.set_snapshot(snap(6, 9)).is_ok(), "disagrees at 6");
        assert_eq!((s.first_index(), s.last_index()), (7, 6), "the log went");
        assert_eq!(s.snapshot().map(|x| x.index), Some(6));
        assert!(s.set_snapshot(snap(4, 1)).is_err(), "below the prefix");
        s.append(&entries(7, 8, 9)).expect("continues after it");
        assert_eq!(indices(s), vec![(7, 9)]);
    }

    fn a_snapshot_past_the_log_leaves_an_empty_log_after_it<S: LogStore>(s: &mut S) {
        s.append(&entries(1, 3, 1)).expect("append");
        s.set_snapshot(LogSnapshot {
            index: 10,
            ballot: ballot(4),
            data: Bytes::from_static(b"leader's"),
        })
        .expect("install");
        assert_eq!(
            (s.first_index(), s.last_index(), s.decided_idx()),
            (11, 10, 10)
        );
        assert_eq!(s.ballot_at(10), Some(ballot(4)));
        assert!(indices(s).is_empty());
    }

    fn reads_are_bounded_by_bytes_but_return_at_least_one_entry<S: LogStore>(s: &mut S) {
        s.append(&entries(1, 11, 1)).expect("append");
        let one = entry(1, 1).payload.len();
        assert_eq!(s.entries(1, 11, 0).expect("read").len(), 1);
        assert_eq!(s.entries(1, 11, one * 3).expect("read").len(), 3);
        assert_eq!(s.entries(4, 6, usize::MAX).expect("read"), entries(4, 6, 1));
        assert!(s.entries(11, 20, usize::MAX).expect("read").is_empty());
    }

    fn hard_state_reads_back_what_was_set<S: LogStore>(s: &mut S) {
        s.set_promised(ballot(7)).expect("promise");
        s.set_accepted_round(ballot(6)).expect("accepted round");
        s.set_stop_sign(Some(Bytes::from_static(b"next config")))
            .expect("stop-sign");
        assert_eq!(s.promised(), ballot(7));
        assert_eq!(s.accepted_round(), ballot(6));
        assert_eq!(s.stop_sign().map(|b| &b[..]), Some(&b"next config"[..]));
        s.set_stop_sign(None).expect("cleared");
        assert_eq!(s.stop_sign(), None);
    }
}
