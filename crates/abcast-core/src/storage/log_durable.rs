//! The durable log store: the log store's records (`log_record.rs`, magic `ABG2`) on the
//! segmented log (`seglog.rs`: segments, spares, group commit, torn-tail recovery), as the
//! acceptor's [`super::DurableStore`] is on it with its own.
//!
//! * **Write path.** Every operation appends one record to the pending write (payloads
//!   shared, not copied) and updates the in-memory state; `sync` (or `begin_sync` and
//!   `end_sync`) makes the batch durable with one write and at most one fdatasync.
//! * **Memory.** The hard state, the snapshot, an index of every held entry (its record's
//!   place and its ballot) and a cache of the newest entries (`cache_instances`,
//!   `cache_bytes` of [`DurableOptions`]; entries not written yet always stay); older
//!   entries are read back from disk.
//! * **Bounded.** Entries are appended in index order and never moved, so the segments of
//!   the held entries run from that of `first_index()` to the current one: a trim or a
//!   snapshot deletes every older segment except the one holding the snapshot's record,
//!   once the record that freed them is durable.
//! * **Recovery** (`open`): the segmented log cuts a torn tail and refuses corruption
//!   before it, naming file and offset; the records are replayed in order (each segment's
//!   checkpoint restates the hard state and the bounds), and the result is checked: held
//!   entries from `first_index()` to `last_index()` without a gap, the decided index within.

use super::StorageError;
use super::durable::DurableOptions;
use super::log::{Entry, LogSnapshot, LogStore, Meta, SnapshotCut, check_append};
use super::log_record::LogRec;
use super::seglog::{Index, Pos, SegLog, SegOptions, SegRecovery, seg_name};
use super::{LogDir, SyncJob};
use crate::types::Ballot;
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

/// Where a held entry's record is, and its ballot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    pos: Pos,
    ballot: Ballot,
}

pub struct DurableLogStore<D: LogDir> {
    log: SegLog<D, LogRec>,
    meta: Meta,
    /// Entries `meta.first_index ..= meta.last_index`.
    index: Index<Slot>,
    /// The segment of the current snapshot's record (kept while it is current).
    snapshot_seg: Option<u64>,
    /// The newest entries, up to `meta.last_index`.
    cache: VecDeque<Entry>,
    cache_bytes: usize,
    cache_entries_max: usize,
    cache_bytes_max: usize,
    recovered: bool,
}

impl<D: LogDir> DurableLogStore<D> {
    /// Opens the log store in `dir`, replaying what is there (an empty directory starts a
    /// new log). `opts.cache_instances` and `opts.cache_bytes` bound the cache of recent
    /// entries.
    pub fn open(
        dir: D,
        opts: DurableOptions,
    ) -> Result<(DurableLogStore<D>, SegRecovery), StorageError> {
        let mut meta = Meta::default();
        let mut slots: BTreeMap<u64, Slot> = BTreeMap::new();
        let mut snapshot_seg = None;
        let seg_opts = SegOptions {
            sync: opts.sync,
            segment_bytes: opts.segment_bytes,
            mutation: crate::mutation::Slot::default(),
        };
        let (log, rec) = SegLog::open(
            dir,
            seg_opts,
            DurableOptions::SEGMENT_BYTES_MAX,
            |pos, r: LogRec| {
                match r {
                    LogRec::Checkpoint { meta: m, .. } => {
                        slots.retain(|&i, _| i >= m.first_index && i <= m.last_index);
                        let snapshot = meta.snapshot.take();
                        meta = Meta { snapshot, ..m };
                    }
                    LogRec::Promise(b) => meta.promised = b,
                    LogRec::AcceptedRound(b) => meta.accepted_round = b,
                    LogRec::Decided(i) => meta.decided_idx = meta.decided_idx.max(i),
                    LogRec::Entry(e) => {
                        if e.index < meta.first_index {
                            return Err(StorageError(format!(
                                "entry {} below the log's first entry {}",
                                e.index, meta.first_index
                            )));
                        }
                        slots.split_off(&e.index);
                        slots.insert(
                            e.index,
                            Slot {
                                pos,
                                ballot: e.ballot,
                            },
                        );
                        meta.last_index = e.index;
                    }
                    LogRec::Truncate { from } => {
                        slots.split_off(&from);
                        meta.truncate(from);
                    }
                    LogRec::Trim { below, prev_ballot } => {
                        slots = slots.split_off(&below);
                        meta.trim(below, prev_ballot);
                    }
                    LogRec::Snapshot {
                        snapshot,
                        keep_suffix,
                    } => {
                        let cut = if keep_suffix {
                            slots = slots.split_off(&(snapshot.index + 1));
                            SnapshotCut::KeepSuffix
                        } else {
                            slots.clear();
                            SnapshotCut::DropAll
                        };
                        meta.snapshot(snapshot, cut);
                        snapshot_seg = Some(pos.seg);
                    }
                    LogRec::StopSign(s) => meta.stop_sign = s,
                    LogRec::Synced { .. } | LogRec::Commit { .. } => {}
                }
                Ok(())
            },
        )?;
        let where_ = log.describe();
        // What was replayed must be a log: every entry from the first to the last, and
        // the decided ones among them.
        let held = slots.len() as u64;
        let span = (meta.last_index + 1).saturating_sub(meta.first_index);
        let contiguous = slots.keys().next().is_none_or(|&f| f == meta.first_index)
            && slots
                .keys()
                .next_back()
                .is_none_or(|&l| l == meta.last_index);
        if held != span || !contiguous || meta.decided_idx > meta.last_index {
            return Err(StorageError(format!(
                "{where_}: the log store's records replay to an inconsistent log: entries \
                 {}..={} with {held} held, decided up to {} (a segment file lost or \
                 damaged?): refusing to start",
                meta.first_index, meta.last_index, meta.decided_idx
            )));
        }
        let mut index = Index::new(meta.first_index);
        for (&i, &s) in &slots {
            index.set(i, s);
        }
        let mut store = DurableLogStore {
            log,
            meta,
            index,
            snapshot_seg,
            cache: VecDeque::new(),
            cache_bytes: 0,
            cache_entries_max: opts.cache_instances.max(1),
            cache_bytes_max: opts.cache_bytes,
            recovered: rec.records > 0 && !rec.unrepaired,
        };
        // The newest entries back into the cache, newest first, within its bounds.
        let mut i = store.meta.last_index;
        while i >= store.meta.first_index && store.cache.len() < store.cache_entries_max {
            let e = store.read_entry(i)?;
            if store.cache_bytes + e.payload.len() > store.cache_bytes_max {
                break;
            }
            store.cache_bytes += e.payload.len();
            store.cache.push_front(e);
            i -= 1;
        }
        // Appends go to a new segment: the old ones stay as they were read.
        if let Some(recycled) = store.log.begin_segment() {
            store.append_checkpoint(recycled);
        }
        store.log.sync()?;
        Ok((store, rec))
    }

    /// Group commits done (syncs that wrote something).
    pub fn syncs(&self) -> u64 {
        self.log.syncs()
    }

    /// The segments on disk, oldest first.
    pub fn segment_numbers(&self) -> Vec<u64> {
        self.log.segment_numbers()
    }

    /// Bytes of log appended since the store was opened.
    pub fn appended_bytes(&self) -> u64 {
        self.log.appended_bytes()
    }

    /// The current segment's file name and the bytes of records written to it.
    pub fn write_end(&self) -> (String, u64) {
        self.log.write_end()
    }

    /// Hands the pending records to the directory without a sync (tests of crashes).
    #[cfg(test)]
    fn write_pending(&mut self) {
        self.log.write_pending();
    }

    fn append_checkpoint(&mut self, recycled: bool) {
        let cp = LogRec::Checkpoint {
            recycled,
            meta: Meta {
                snapshot: None,
                ..self.meta.clone()
            },
        };
        self.log.append(&cp);
    }

    /// Queues one record, in a new segment (opened with a checkpoint of the state before
    /// it) if this one is full. The caller updates the state after.
    fn append_rec(&mut self, r: &LogRec) -> Pos {
        if self.log.roll_due()
            && let Some(recycled) = self.log.roll()
        {
            self.append_checkpoint(recycled);
        }
        self.log.append(r)
    }

    fn cache_start(&self) -> u64 {
        self.meta.last_index + 1 - self.cache.len() as u64
    }

    /// Drops the oldest cached entries over the bounds, but never one not yet written.
    fn evict(&mut self) {
        while self.cache.len() > self.cache_entries_max || self.cache_bytes > self.cache_bytes_max {
            let Some(front) = self.cache.front() else {
                break;
            };
            if !self
                .index
                .get(front.index)
                .is_some_and(|s| self.log.written(s.pos))
            {
                break;
            }
            self.cache_bytes -= front.payload.len();
            self.cache.pop_front();
        }
    }

    /// Forgets the cached entries below `first` and from `end` on.
    fn cache_keep(&mut self, first: u64, end: u64) {
        while self.cache.front().is_some_and(|e| e.index < first) {
            if let Some(e) = self.cache.pop_front() {
                self.cache_bytes -= e.payload.len();
            }
        }
        while self.cache.back().is_some_and(|e| e.index >= end) {
            if let Some(e) = self.cache.pop_back() {
                self.cache_bytes -= e.payload.len();
            }
        }
    }

    /// Reads entry `i` back from its record.
    fn read_entry(&self, i: u64) -> Result<Entry, StorageError> {
        let Some(slot) = self.index.get(i) else {
            return Err(StorageError(format!(
                "{}: entry {i} is not in the index",
                self.log.describe()
            )));
        };
        match self.log.read(slot.pos)? {
            LogRec::Entry(e) if e.index == i => Ok(e),
            other => Err(StorageError(format!(
                "{}/{}: offset {} holds a {} record where the index has entry {i}",
                self.log.describe(),
                seg_name(slot.pos.seg),
                slot.pos.off,
                other.kind_name()
            ))),
        }
    }

    /// Marks for deletion every old segment that holds no held entry and not the current
    /// snapshot's record (entries are never moved, so the held ones lie in the segments
    /// from that of the first one on).
    fn collect_segments(&mut self) {
        let keep_from = self
            .index
            .get(self.meta.first_index)
            .map_or(u64::MAX, |s| s.pos.seg);
        for s in self.log.old_segments() {
            if s < keep_from && Some(s) != self.snapshot_seg {
                self.log.delete_after_sync(s);
            }
        }
    }
}

impl<D: LogDir> LogStore for DurableLogStore<D> {
    fn promised(&self) -> Ballot {
        self.meta.promised
    }
    fn set_promised(&mut self, ballot: Ballot) -> Result<(), StorageError> {
        if ballot != self.meta.promised {
            self.append_rec(&LogRec::Promise(ballot));
            self.meta.promised = ballot;
        }
        Ok(())
    }
    fn accepted_round(&self) -> Ballot {
        self.meta.accepted_round
    }
    fn set_accepted_round(&mut self, ballot: Ballot) -> Result<(), StorageError> {
        if ballot != self.meta.accepted_round {
            self.append_rec(&LogRec::AcceptedRound(ballot));
            self.meta.accepted_round = ballot;
        }
        Ok(())
    }
    fn decided_idx(&self) -> u64 {
        self.meta.decided_idx
    }
    fn set_decided_idx(&mut self, idx: u64) -> Result<(), StorageError> {
        if self.meta.check_decided(idx)? {
            self.append_rec(&LogRec::Decided(idx));
            self.meta.decided_idx = idx;
        }
        Ok(())
    }
    fn first_index(&self) -> u64 {
        self.meta.first_index
    }
    fn last_index(&self) -> u64 {
        self.meta.last_index
    }
    fn ballot_at(&self, index: u64) -> Option<Ballot> {
        self.meta
            .ballot_at(index, |i| self.index.get(i).map(|s| s.ballot))
    }
    fn entries(&self, from: u64, to: u64, max_bytes: usize) -> Result<Vec<Entry>, StorageError> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let to = to.min(self.meta.last_index + 1);
        let cache_start = self.cache_start();
        let mut i = from.max(self.meta.first_index);
        while i < to {
            let e = if i >= cache_start {
                match self.cache.get((i - cache_start) as usize) {
                    Some(e) => e.clone(),
                    None => break,
                }
            } else {
                self.read_entry(i).inspect_err(|e| {
                    self.log.note_read_failure(e.clone());
                })?
            };
            bytes = bytes.saturating_add(e.payload.len());
            if bytes > max_bytes && !out.is_empty() {
                break;
            }
            out.push(e);
            i += 1;
        }
        Ok(out)
    }
    fn append(&mut self, entries: &[Entry]) -> Result<(), StorageError> {
        check_append(self.meta.last_index, entries)?;
        for e in entries {
            let pos = self.append_rec(&LogRec::Entry(e.clone()));
            self.index.set(
                e.index,
                Slot {
                    pos,
                    ballot: e.ballot,
                },
            );
            self.meta.last_index = e.index;
            self.cache_bytes += e.payload.len();
            self.cache.push_back(e.clone());
        }
        self.evict();
        Ok(())
    }
    fn truncate(&mut self, from: u64) -> Result<(), StorageError> {
        if self.meta.check_truncate(from)? {
            self.append_rec(&LogRec::Truncate { from });
            self.meta.truncate(from);
            self.index.truncate(from);
            self.cache_keep(self.meta.first_index, from);
        }
        Ok(())
    }
    fn stop_sign(&self) -> Option<&Bytes> {
        self.meta.stop_sign.as_ref()
    }
    fn set_stop_sign(&mut self, stop_sign: Option<Bytes>) -> Result<(), StorageError> {
        if stop_sign != self.meta.stop_sign {
            self.append_rec(&LogRec::StopSign(stop_sign.clone()));
            self.meta.stop_sign = stop_sign;
        }
        Ok(())
    }
    fn snapshot(&self) -> Option<&LogSnapshot> {
        self.meta.snapshot.as_ref()
    }
    fn set_snapshot(&mut self, snapshot: LogSnapshot) -> Result<(), StorageError> {
        let cut = self
            .meta
            .check_snapshot(&snapshot, self.ballot_at(snapshot.index))?;
        let pos = self.append_rec(&LogRec::Snapshot {
            snapshot: snapshot.clone(),
            keep_suffix: cut == SnapshotCut::KeepSuffix,
        });
        self.snapshot_seg = Some(pos.seg);
        let index = snapshot.index;
        self.meta.snapshot(snapshot, cut);
        match cut {
            SnapshotCut::KeepSuffix => {
                self.index.trim(index + 1);
                self.cache_keep(index + 1, u64::MAX);
            }
            SnapshotCut::DropAll => {
                self.index = Index::new(index + 1);
                self.cache.clear();
                self.cache_bytes = 0;
            }
        }
        self.collect_segments();
        Ok(())
    }
    fn trim(&mut self, below: u64) -> Result<(), StorageError> {
        if self.meta.check_trim(below)? {
            let prev_ballot = self.ballot_at(below - 1).unwrap_or(Ballot::ZERO);
            self.append_rec(&LogRec::Trim { below, prev_ballot });
            self.meta.trim(below, prev_ballot);
            self.index.trim(below);
            self.cache_keep(below, u64::MAX);
            self.collect_segments();
        }
        Ok(())
    }
    fn sync(&mut self) -> Result<(), StorageError> {
        self.log.sync()?;
        self.evict();
        Ok(())
    }
    fn begin_sync(&mut self) -> Result<Option<SyncJob>, StorageError> {
        let job = self.log.begin_sync()?;
        // Everything is written now: the cache may shrink to its bounds.
        self.evict();
        Ok(job)
    }
    fn end_sync(&mut self, result: &Result<(), StorageError>) {
        self.log.end_sync(result);
    }
    fn mark_whole(&mut self) {
        self.log.mark_whole();
    }
    /// Whether `open` found a log (see [`super::AcceptorStore::is_durable`]).
    fn is_durable(&self) -> bool {
        self.recovered
    }
    fn log_bytes(&self) -> u64 {
        self.log.log_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::log::tests::{self as contract, ballot, entries, entry, indices};
    use crate::storage::{MemDir, Tear};

    /// Small segments: `MemDir` holds each preallocated one in memory.
    fn opts(sync: bool) -> DurableOptions {
        DurableOptions {
            sync,
            segment_bytes: 256 << 10,
            cache_instances: 1024,
            cache_bytes: 64 << 20,
        }
    }

    fn open(dir: &MemDir, o: DurableOptions) -> (DurableLogStore<MemDir>, SegRecovery) {
        DurableLogStore::open(dir.clone(), o).unwrap_or_else(|e| panic!("open: {e}"))
    }

    fn big(index: u64, round: u32) -> Entry {
        Entry {
            index,
            ballot: ballot(round),
            payload: Bytes::from(vec![index as u8; 3000]),
        }
    }

    #[test]
    fn the_log_store_contract_holds_on_disk() {
        contract::all(&mut || open(&MemDir::new("c"), opts(true)).0);
        // A cache of two entries: the reads come from disk.
        let small = DurableOptions {
            cache_instances: 2,
            ..opts(true)
        };
        contract::all(&mut || {
            let (mut s, _) = open(&MemDir::new("d"), small.clone());
            s.sync().expect("sync");
            s
        });
    }

    #[test]
    fn synced_entries_and_hard_state_survive_a_machine_crash() {
        let dir = MemDir::new("a");
        let (mut s, rec) = open(&dir, opts(true));
        assert_eq!(rec.records, 0);
        assert!(!s.is_durable(), "a first start kept nothing");
        s.mark_whole();
        s.set_promised(ballot(3)).expect("promise");
        s.set_accepted_round(ballot(3)).expect("accepted round");
        s.append(&(1..=20).map(|i| big(i, 3)).collect::<Vec<_>>())
            .expect("append");
        s.set_decided_idx(12).expect("decide");
        s.sync().expect("sync");
        drop(s);
        dir.crash_machine(|_, _| Tear {
            keep: 0,
            flip: None,
        });
        let (s, rec) = open(&dir, opts(true));
        assert_eq!(rec.torn_tail, None);
        assert!(s.is_durable());
        assert_eq!(s.promised(), ballot(3));
        assert_eq!(s.accepted_round(), ballot(3));
        assert_eq!(
            (s.first_index(), s.last_index(), s.decided_idx()),
            (1, 20, 12)
        );
        let got = s.entries(1, 21, usize::MAX).expect("read");
        assert_eq!(got, (1..=20).map(|i| big(i, 3)).collect::<Vec<_>>());
    }

    #[test]
    fn one_sync_covers_a_whole_batch_of_appends() {
        let dir = MemDir::new("g");
        let (mut s, _) = open(&dir, opts(true));
        let before = dir.syncs();
        for i in 1..=100 {
            s.append(&[entry(i, 1)]).expect("append");
            s.set_decided_idx(i).expect("decide");
        }
        let job = s.begin_sync().expect("begin");
        if let Some(j) = job {
            let r = j.run();
            s.end_sync(&r);
        }
        assert_eq!(dir.syncs() - before, 1, "group commit: one fdatasync");
    }

    #[test]
    fn a_truncated_and_reappended_suffix_survives_a_crash_with_the_new_suffix() {
        let dir = MemDir::new("t");
        let (mut s, _) = open(&dir, opts(true));
        s.append(&entries(1, 11, 1)).expect("append");
        s.set_decided_idx(4).expect("decide");
        s.sync().expect("sync");
        // A new leader's shorter suffix replaces entries 6..=10.
        s.append_on_prefix(6, &entries(6, 8, 2)).expect("replace");
        s.sync().expect("sync");
        drop(s);
        dir.crash_machine(|_, _| Tear {
            keep: 0,
            flip: None,
        });
        let (mut s, _) = open(&dir, opts(true));
        let want: Vec<(u64, u32)> = (1..=5).map(|i| (i, 1)).chain([(6, 2), (7, 2)]).collect();
        assert_eq!(
            indices(&s),
            want,
            "the new suffix, and no old entry after it"
        );
        assert_eq!(s.ballot_at(7), Some(ballot(2)));
        // Truncated alone, across segments and a restart.
        s.truncate(6).expect("truncate");
        s.sync().expect("sync");
        drop(s);
        let (s, _) = open(&dir, opts(true));
        assert_eq!(s.last_index(), 5);
    }

    /// Across many crash points: everything synced is kept, and what the unsynced write
    /// kept is whole (a prefix of it), never a mix of old and new.
    #[test]
    fn unsynced_appends_may_be_lost_but_never_a_synced_one() {
        for keep_of_8 in 0..=8 {
            let dir = MemDir::new("u");
            let (mut s, _) = open(&dir, opts(true));
            s.append(&(1..=5).map(|i| big(i, 1)).collect::<Vec<_>>())
                .expect("append");
            s.sync().expect("sync");
            s.truncate(4).expect("truncate");
            s.append(&(4..=9).map(|i| big(i, 2)).collect::<Vec<_>>())
                .expect("append");
            s.write_pending();
            drop(s);
            dir.crash_machine(|_, n| Tear {
                keep: n * keep_of_8 / 8,
                flip: None,
            });
            let (s, _) = open(&dir, opts(true));
            let got = indices(&s);
            let old: Vec<(u64, u32)> = (1..=5).map(|i| (i, 1)).collect();
            let new: Vec<(u64, u32)> = (1..=3)
                .map(|i| (i, 1))
                .chain((4..=9).map(|i| (i, 2)))
                .collect();
            assert!(
                got == old || (got.len() >= 3 && new.starts_with(&got)),
                "kept {keep_of_8}/8 of the unsynced write: {got:?}"
            );
            assert!(got.starts_with(&old[..3]), "synced entries lost: {got:?}");
        }
    }

    /// The simulator's `power_loss` mix found this for Sequence Paxos (seeds 149 and 615 of
    /// 1,000): a follower adopting a new leader's suffix writes, in one group commit, its
    /// new accepted round, a truncation and the adopted entries. A machine crash kept a
    /// prefix of that unsynced write, so the node came back with the new round over only
    /// part of the suffix, and a leader's wholesale adoption of the suffix with the highest
    /// accepted round dropped chosen entries. A group commit is atomic: at every cut point
    /// the store recovers to the state before it, or (all of it kept) the state after it.
    #[test]
    fn a_new_accepted_round_and_its_adopted_suffix_survive_a_crash_whole_or_not_at_all() {
        let before = (ballot(1), ballot(1), entries(1, 7, 1));
        let after = (
            ballot(2),
            ballot(2),
            [entries(1, 4, 1), entries(4, 10, 2)].concat(),
        );
        let build = || {
            let dir = MemDir::new("n");
            let (mut s, _) = open(&dir, opts(true));
            s.set_promised(ballot(1)).expect("promise");
            s.set_accepted_round(ballot(1)).expect("accepted round");
            s.append(&entries(1, 7, 1)).expect("append");
            s.set_decided_idx(2).expect("decide");
            s.sync().expect("sync");
            // The adoption, one protocol step: written, its fdatasync never done.
            s.set_promised(ballot(2)).expect("promise");
            s.set_accepted_round(ballot(2)).expect("accepted round");
            s.append_on_prefix(4, &entries(4, 10, 2)).expect("adopt");
            assert!(s.begin_sync().expect("begin").is_some());
            let end = s.write_end();
            drop(s);
            (dir, end)
        };
        let (dir, (name, end)) = build();
        let unsynced = dir.unsynced_bytes();
        assert!(unsynced > 200, "{unsynced}");
        // A cut in the zeros that end the write (the commit marker's count) leaves the
        // disk as the whole write did.
        let buf = dir.read(&name).expect("read");
        let zeros = buf[..end as usize]
            .iter()
            .rev()
            .take_while(|&&b| b == 0)
            .count();
        let whole = unsynced - zeros;
        for cut in 0..=unsynced {
            let (dir, _) = build();
            dir.crash_machine(|_, n| Tear {
                keep: cut.min(n),
                flip: None,
            });
            let (s, rec) = open(&dir, opts(true));
            let got = (
                s.promised(),
                s.accepted_round(),
                s.entries(1, 100, usize::MAX).expect("read"),
            );
            let want = if cut >= whole { &after } else { &before };
            assert_eq!(&got, want, "cut at {cut} of {unsynced} bytes");
            assert_eq!(s.decided_idx(), 2);
            assert_eq!(rec.torn_tail.is_some(), cut > 0 && cut < whole, "cut {cut}");
        }
    }

    #[test]
    fn a_torn_tail_is_cut_and_reported() {
        for flip in [None, Some(3)] {
            let dir = MemDir::new("tt");
            let (mut s, _) = open(&dir, opts(true));
            s.append(&(1..=3).map(|i| big(i, 1)).collect::<Vec<_>>())
                .expect("append");
            s.sync().expect("sync");
            s.append(&(4..=6).map(|i| big(i, 1)).collect::<Vec<_>>())
                .expect("append");
            s.write_pending();
            drop(s);
            dir.crash_machine(|_, n| Tear { keep: n / 2, flip });
            let (s, rec) = open(&dir, opts(true));
            let torn = rec.torn_tail.expect("the tail is torn");
            assert!(
                torn.file.ends_with(".log") && torn.bytes_cut > 0,
                "{torn:?}"
            );
            assert!(
                s.last_index() >= 3 && s.last_index() < 6,
                "{}",
                s.last_index()
            );
            for e in s.entries(1, 10, usize::MAX).expect("read") {
                assert_eq!(e, big(e.index, 1), "entry {} garbled", e.index);
            }
            drop(s);
            let (_, again) = open(&dir, opts(true));
            assert_eq!(again.torn_tail, None, "cut once");
        }
    }

    #[test]
    fn trimming_below_a_snapshot_keeps_the_log_bounded_and_survives_restart() {
        let dir = MemDir::new("s");
        let o = DurableOptions {
            segment_bytes: 64 << 10,
            cache_instances: 16,
            ..opts(true)
        };
        let (mut s, _) = open(&dir, o.clone());
        let mut max_bytes = 0;
        for i in 1..=2000u64 {
            s.append(&[big(i, 1)]).expect("append");
            s.set_decided_idx(i).expect("decide");
            if i % 100 == 0 {
                // A snapshot of the decided prefix, then the log keeps 50 entries below it.
                s.set_snapshot(LogSnapshot {
                    index: i - 50,
                    ballot: ballot(1),
                    data: Bytes::from(format!("state at {}", i - 50)),
                })
                .expect("snapshot");
            }
            s.sync().expect("sync");
            max_bytes = max_bytes.max(s.log_bytes());
        }
        assert!(s.appended_bytes() > 6_000_000);
        assert!(
            max_bytes < 700_000 + o.segment_bytes,
            "log grew to {max_bytes} bytes though ~150 entries are live"
        );
        // A trim (Sequence Paxos: every replica decided) past the snapshot.
        s.trim(1990).expect("trim");
        s.sync().expect("sync");
        drop(s);
        let (s, _) = open(&dir, o);
        assert_eq!((s.first_index(), s.last_index()), (1990, 2000));
        assert_eq!(s.snapshot().map(|x| x.index), Some(1950));
        assert_eq!(
            s.snapshot().map(|x| x.data.clone()),
            Some(Bytes::from("state at 1950"))
        );
        assert_eq!(s.ballot_at(1989), Some(ballot(1)));
        let got = s.entries(1, 3000, usize::MAX).expect("read");
        assert_eq!(got, (1990..=2000).map(|i| big(i, 1)).collect::<Vec<_>>());
    }

    #[test]
    fn the_stop_sign_and_the_decided_index_survive_restart() {
        let dir = MemDir::new("ss");
        let o = DurableOptions {
            segment_bytes: 16 << 10,
            ..opts(true)
        };
        let (mut s, _) = open(&dir, o.clone());
        s.append(&(1..=30).map(|i| big(i, 1)).collect::<Vec<_>>())
            .expect("append");
        s.set_decided_idx(30).expect("decide");
        s.set_stop_sign(Some(Bytes::from_static(b"config 2: nodes 1 2 4")))
            .expect("stop-sign");
        // Enough later segments that the records setting them are in deleted ones: the
        // checkpoints carry them.
        s.set_snapshot(LogSnapshot {
            index: 30,
            ballot: ballot(1),
            data: Bytes::from_static(b"s"),
        })
        .expect("snapshot");
        for i in 31..=60 {
            s.append(&[big(i, 2)]).expect("append");
        }
        s.set_decided_idx(45).expect("decide");
        s.trim(40).expect("trim");
        s.sync().expect("sync");
        s.sync().expect("the deletions");
        assert!(
            s.segment_numbers().first() > Some(&1),
            "old segments deleted: {:?}",
            s.segment_numbers()
        );
        drop(s);
        let (s, _) = open(&dir, o);
        assert_eq!(s.decided_idx(), 45);
        assert_eq!(
            s.stop_sign().map(|b| &b[..]),
            Some(&b"config 2: nodes 1 2 4"[..])
        );
        assert_eq!((s.first_index(), s.last_index()), (40, 60));
        assert_eq!(s.snapshot().map(|x| x.index), Some(30));
    }

    #[test]
    fn corruption_before_the_tail_refuses_to_open_naming_file_and_offset() {
        let dir = MemDir::new("e");
        let (mut s, _) = open(&dir, opts(true));
        s.append(&(1..=4).map(|i| big(i, 1)).collect::<Vec<_>>())
            .expect("append");
        s.sync().expect("sync");
        // A later write says the four were durable.
        s.append(&[big(5, 1)]).expect("append");
        s.sync().expect("sync");
        drop(s);
        let (name, _) = dir.sizes().into_iter().next().expect("a segment");
        assert!(dir.flip_byte(&name, 200));
        let err = DurableLogStore::open(dir.clone(), opts(true))
            .err()
            .expect("must refuse");
        assert!(
            err.0.contains(&name) && err.0.contains("offset") && err.0.contains("corrupt"),
            "{err}"
        );
    }

    /// Every input from disk is checked: a byte damaged anywhere in the log gives an error
    /// or a cut tail at the next open, never a panic, and never a wrong entry.
    #[test]
    fn a_damaged_byte_anywhere_gives_an_error_or_a_cut_never_a_panic() {
        let build = || {
            let dir = MemDir::new("f");
            let (mut s, _) = open(&dir, opts(true));
            s.set_promised(ballot(2)).expect("promise");
            s.append(&entries(1, 6, 2)).expect("append");
            s.set_decided_idx(3).expect("decide");
            s.set_stop_sign(Some(Bytes::from_static(b"ss")))
                .expect("ss");
            s.sync().expect("sync");
            drop(s);
            dir
        };
        let (name, size) = build().sizes().into_iter().next().expect("a segment");
        let written = build()
            .read(&name)
            .expect("read")
            .iter()
            .rposition(|&b| b != 0);
        let written = written.map_or(size, |p| p + 1);
        for at in 0..written {
            let dir = build();
            assert!(dir.flip_byte(&name, at));
            if let Ok((s, _)) = DurableLogStore::open(dir.clone(), opts(true)) {
                for e in s.entries(1, 10, usize::MAX).expect("read") {
                    assert_eq!(e, entry(e.index, 2), "byte {at}: a wrong entry");
                }
            }
        }
    }

    #[test]
    fn an_acceptor_log_is_refused_by_the_log_store() {
        let dir = MemDir::new("x");
        let (mut a, _) = crate::storage::DurableStore::open(dir.clone(), opts(true)).expect("open");
        crate::storage::AcceptorStore::sync(&mut a).expect("sync");
        drop(a);
        let err = DurableLogStore::open(dir, opts(true))
            .err()
            .expect("must refuse");
        assert!(err.0.contains("acceptor log"), "{err}");
    }

    /// Issue 33, `disk_error`: a write the disk failed made every later mutation of the log
    /// store return the error, and Sequence Paxos, which takes a mutation's error for misuse,
    /// panicked (seed 103 of its power_loss mix). The failure is reported by the next sync,
    /// the one place a driver stops the node before anything that depends on it leaves;
    /// nothing is written after it, and what was synced before it survives.
    #[test]
    fn a_failed_write_is_reported_by_the_next_sync_and_nothing_is_written_after_it() {
        use crate::storage::DiskFault;
        for fault in DiskFault::ALL {
            let dir = MemDir::new("fail");
            // Small segments: appends roll, and a roll writes (and syncs) at once.
            let o = DurableOptions {
                segment_bytes: 8 << 10,
                ..opts(true)
            };
            let (mut s, _) = open(&dir, o.clone());
            s.append(&[big(1, 1), big(2, 1)]).unwrap();
            s.set_decided_idx(1).unwrap();
            s.sync().unwrap();
            dir.inject(0, fault);
            for i in 3..=8 {
                s.append(&[big(i, 1)])
                    .unwrap_or_else(|e| panic!("{fault:?}: a write does not fail the caller: {e}"));
            }
            s.set_decided_idx(2)
                .unwrap_or_else(|e| panic!("{fault:?}: nor a later mutation: {e}"));
            let e = s.sync().expect_err("the sync reports it");
            assert!(e.0.contains("injected"), "{fault:?}: {e}");
            assert!(s.sync().is_err(), "{fault:?}: and every sync after it");
            drop(s);
            dir.clear_injection();
            dir.crash_process();
            let (s, _) = open(&dir, o);
            assert!(
                s.last_index() >= 2 && s.decided_idx() >= 1,
                "{fault:?}: the synced part"
            );
        }
    }
}
