//! The durable acceptor store: the acceptor's records (`record.rs`) on the segmented log
//! (`seglog.rs`: segments, spares, group commit, durable points, torn-tail recovery), plus
//! a bounded in-memory cache of recent instances. Seed 000 §3.4 `BerkeleyStorage`
//! (`sync = false`: through the OS, survives a process crash) and `SyncBerkeleyStorage`
//! (`sync = true`: fdatasync, survives a machine crash); seed 003 §4.2: an acceptor keeps
//! `rnd`, `v-rnd` and `v-val` on stable storage before it answers phase 1A or 2A, which the
//! driver ensures by calling [`AcceptorStore::sync`] before it sends what the protocol
//! produced (`Outbox::needs_sync`).
//!
//! * **Write path.** `put`, `set_promised`, `mark_decided` and `trim` append records to the
//!   log's pending write (payloads shared, not copied); `sync` writes them in one vectored
//!   write and, with `sync = true`, one fdatasync: that is the group commit, one per driver
//!   batch.
//! * **Segments.** Each opens with a `Checkpoint` (promise and trim point), so a whole old
//!   segment can be deleted once nothing in it is live: trimming keeps the log bounded. A
//!   few live stragglers in an old segment are copied forward first.
//! * **Reads.** Recent instances come from the cache (a [`MemoryStore`]); older ones from
//!   disk through an index of record locations (`range`, for retrieves and phase 1). The
//!   cache's window moves past instances this acceptor never voted in (it was away): a
//!   vote or decision that arrives for one later goes to disk alone, so that the acceptor
//!   still takes part in deciding it.
//! * **Recovery** (`open`): the segmented log replays every segment, cuts a torn tail and
//!   refuses corruption before it (see `seglog.rs`); this store rebuilds the promise, the
//!   trim point, the index and the cache from the records. (Damage inside the last write
//!   cannot be told from a torn write: it is cut; nothing in it was acknowledged, since the
//!   acknowledgement waits for the sync.)

use super::record::Record;
pub use super::seglog::TornTail;
use super::seglog::{Index, Pos, SegLog, SegOptions};
#[cfg(test)]
use super::seglog::{SPARES_MAX, SPARES_MIN, seg_name};
use super::{Accepted, AcceptorStore, LogDir, MemoryStore, StorageError};
use crate::types::{Ballot, Instance};
#[cfg(test)]
use bytes::Bytes;
use std::collections::BTreeMap;

/// At most this many live records are copied out of an old segment so it can be deleted.
/// Recovery refuses a log whose instances from the log start to the highest span more than
/// this many per instance held, plus [`SPAN_SLACK`] (see `DurableStore::open`).
const SPAN_PER_HELD_MAX: u64 = 4;
const SPAN_SLACK: u64 = 1 << 20;
const RELOCATE_MAX: usize = 256;
/// ... and at most this fraction of a segment's size in bytes.
const RELOCATE_FRACTION: u64 = 16;

#[derive(Clone, Debug)]
pub struct DurableOptions {
    /// fdatasync in every `sync` (survives a machine crash) or only write (a process crash).
    pub sync: bool,
    /// A segment is closed and a new one begun past this size.
    pub segment_bytes: u64,
    /// The in-memory cache of recent instances (the acceptor's working set).
    pub cache_instances: usize,
    pub cache_bytes: usize,
}

impl DurableOptions {
    pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;
    pub const SEGMENT_BYTES_MAX: u64 = 1 << 30;
}

/// What `open` found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    pub segments: usize,
    pub records: u64,
    pub promised: Ballot,
    pub log_start: Instance,
    pub max_instance: Instance,
    /// Instances held (accepted values not trimmed).
    pub instances: u64,
    pub torn_tail: Option<TornTail>,
    /// Segments whose recycled file's earlier contents were cut after their records.
    pub recycled_tails: u64,
    /// Spare segment files found, kept for reuse.
    pub spares: usize,
    /// The log was written without fdatasync by an earlier boot and discarded, and why
    /// ([`super::SegRecovery::unsynced_lost`]): the store opens empty, the acceptor amnesic.
    pub unsynced_lost: Option<String>,
    /// The log is that of a life that started without its state and was not repaired
    /// ([`super::SegRecovery::unrepaired`]): the store says it is not durable, the
    /// acceptor restarts amnesic again.
    pub unrepaired: bool,
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "recovered {} records from {} segments: promise {}, instances {}..={} ({} held)",
            self.records,
            self.segments,
            self.promised,
            self.log_start,
            self.max_instance,
            self.instances
        )?;
        if self.spares > 0 {
            write!(f, "; {} spare segment files", self.spares)?;
        }
        if let Some(why) = &self.unsynced_lost {
            write!(f, "; the log was discarded ({why}): starting amnesic")?;
        }
        if self.unrepaired {
            write!(
                f,
                "; written by a life that lost its state and was not repaired: starting amnesic"
            )?;
        }
        if let Some(t) = &self.torn_tail {
            write!(
                f,
                "; torn tail in {} at offset {}: {}; cut {} bytes",
                t.file, t.offset, t.why, t.bytes_cut
            )?;
        }
        Ok(())
    }
}

/// Where the latest whole record of an instance is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    seg: u64,
    off: u64,
    len: u32,
    decided: bool,
}

impl Loc {
    fn at(pos: Pos, decided: bool) -> Loc {
        Loc {
            seg: pos.seg,
            off: pos.off,
            len: pos.len,
            decided,
        }
    }
    fn pos(self) -> Pos {
        Pos {
            seg: self.seg,
            off: self.off,
            len: self.len,
        }
    }
}

pub struct DurableStore<D: LogDir> {
    log: SegLog<D, Record>,
    /// Recent instances, and every undecided vote; below `cache.log_start()` instances are
    /// on disk only (decided ones, and votes for instances the window had passed).
    cache: MemoryStore,
    /// The record of each instance from the log start (the trim point) on, if any.
    index: Index<Loc>,
    /// `open` found a log (at least one whole record): the state was kept.
    recovered: bool,
}

impl<D: LogDir> DurableStore<D> {
    /// Opens the log in `dir`, replaying what is there (an empty directory starts a new log).
    pub fn open(dir: D, opts: DurableOptions) -> Result<(DurableStore<D>, Recovery), StorageError> {
        let dir_name = dir.describe();
        let mut promised = Ballot::ZERO;
        let mut log_start: Instance = 1;
        let mut locs: BTreeMap<Instance, Loc> = BTreeMap::new();
        let seg_opts = SegOptions {
            sync: opts.sync,
            segment_bytes: opts.segment_bytes,
            mutation: crate::mutation::Slot::default(),
        };
        let (log, seg_rec) = SegLog::open(
            dir,
            seg_opts,
            DurableOptions::SEGMENT_BYTES_MAX,
            |pos, r: Record| {
                match r {
                    Record::Checkpoint {
                        promised: p,
                        log_start: s,
                        ..
                    } => {
                        promised = promised.max(p);
                        log_start = log_start.max(s);
                    }
                    Record::Promise(p) => promised = promised.max(p),
                    Record::Accept {
                        instance, decided, ..
                    } => {
                        let decided = decided || locs.get(&instance).is_some_and(|l| l.decided);
                        locs.insert(instance, Loc::at(pos, decided));
                    }
                    Record::Decided(i) => {
                        if let Some(l) = locs.get_mut(&i) {
                            l.decided = true;
                        }
                    }
                    Record::Trim { log_start: s } => log_start = log_start.max(s),
                    Record::Synced { .. } | Record::Commit { .. } => {}
                }
                Ok(())
            },
        )?;
        let locs = locs.split_off(&log_start);
        let max_instance = locs.keys().next_back().copied().unwrap_or(0);
        // The index and the cache below are dense from the log start to the highest
        // instance: a record (its checksum right, so written by a store or forged) naming an
        // instance far past the others made them reserve a slot for every instance between,
        // terabytes for one record (found by the fuzz target `durable_store`, issue 33).
        // A log whose span is far larger than what it holds is refused as damaged.
        let span = max_instance.saturating_sub(log_start).saturating_add(1);
        let held = locs.len() as u64;
        if held > 0
            && span
                > held
                    .saturating_mul(SPAN_PER_HELD_MAX)
                    .saturating_add(SPAN_SLACK)
        {
            return Err(StorageError(format!(
                "{}: damaged log: {held} instances held span {log_start}..={max_instance},                  more than {SPAN_PER_HELD_MAX} slots each plus {SPAN_SLACK}",
                dir_name
            )));
        }
        let rec = Recovery {
            segments: seg_rec.segments,
            records: seg_rec.records,
            promised,
            log_start,
            max_instance,
            instances: locs.len() as u64,
            torn_tail: seg_rec.torn_tail,
            recycled_tails: seg_rec.recycled_tails,
            spares: seg_rec.spares,
            unsynced_lost: seg_rec.unsynced_lost,
            unrepaired: seg_rec.unrepaired,
        };

        // The cache holds every undecided vote (an acceptor must answer phase 1 with them)
        // and the newest decided instances it has room for. It grows past its configured
        // size if the undecided ones alone span more (decided marks lost in a crash).
        let first_undecided = locs.iter().find(|(_, l)| !l.decided).map(|(&i, _)| i);
        let newest_from = max_instance.saturating_sub(opts.cache_instances as u64 - 1);
        let cache_from = first_undecided
            .map_or(newest_from, |u| u.min(newest_from))
            .max(log_start);
        // Saturating: a record may name instance u64::MAX (the `durable_store` fuzz target
        // found the overflow).
        let span = max_instance.saturating_add(1).saturating_sub(cache_from) as usize;
        let mut cache = MemoryStore::cache(opts.cache_instances.max(span).max(1), opts.cache_bytes);
        cache.trim(cache_from);
        cache.set_promised(promised);
        let mut store = DurableStore {
            log,
            cache,
            index: Index::new(log_start),
            recovered: rec.records > 0 && !rec.unrepaired,
        };
        for (&i, &loc) in &locs {
            store.index.set(i, loc);
            if i < cache_from {
                continue;
            }
            let Some(Record::Accept { ballot, decree, .. }) = store.log.read_or_fail(loc.pos())
            else {
                let e = store.log.failed().cloned().unwrap_or_else(|| {
                    StorageError(format!("record of instance {i} moved while recovering"))
                });
                return Err(e);
            };
            let acc = Accepted {
                ballot,
                decree,
                decided: loc.decided,
            };
            if !store.cache.put(i, acc) && !loc.decided {
                return Err(StorageError(format!(
                    "{}: {} bytes of undecided votes recovered exceed store_capacity_bytes {}",
                    store.log.describe(),
                    store.cache.bytes_held(),
                    opts.cache_bytes
                )));
            }
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

    /// The segments on disk, oldest first (for tests and the trim benchmark).
    pub fn segment_numbers(&self) -> Vec<u64> {
        self.log.segment_numbers()
    }

    /// The current segment's file name and the bytes of records written to it (where the
    /// next write goes; the file may be longer, preallocated). For tests that damage a log.
    pub fn write_end(&self) -> (String, u64) {
        self.log.write_end()
    }

    fn log_start_(&self) -> Instance {
        self.index.start()
    }

    fn index_set(&mut self, i: Instance, loc: Loc) {
        let set = self.index.set(i, loc);
        debug_assert!(set, "index below the log start");
    }

    fn index_get(&self, i: Instance) -> Option<Loc> {
        self.index.get(i)
    }

    #[cfg(test)]
    fn write_pending(&mut self) {
        self.log.write_pending();
    }

    /// Opens the current segment: the promise and the trim point.
    fn append_checkpoint(&mut self, recycled: bool) {
        let cp = Record::Checkpoint {
            promised: self.cache.promised(),
            log_start: self.log_start_(),
            recycled,
        };
        self.log.append(&cp);
    }

    /// Queues one record, in a new segment (opened with a checkpoint) if this one is full.
    fn append(&mut self, r: &Record) -> Pos {
        if self.log.roll_due()
            && let Some(recycled) = self.log.roll()
        {
            self.append_checkpoint(recycled);
        }
        self.log.append(r)
    }

    /// Copies the few live records of old segments forward and marks the segments that
    /// then hold nothing live for deletion (after the trim record is written).
    fn collect_segments(&mut self) {
        let cur = self.log.current();
        // Per old segment: its live instances and their bytes.
        let mut live: BTreeMap<u64, (Vec<Instance>, u64)> = BTreeMap::new();
        for (i, l) in self.index.iter() {
            if l.seg != cur {
                let e = live.entry(l.seg).or_default();
                e.0.push(i);
                e.1 += u64::from(l.len);
            }
        }
        for s in self.log.old_segments() {
            let (held, held_bytes) = live
                .get(&s)
                .map_or((&[][..], 0), |(v, b)| (v.as_slice(), *b));
            // Only stragglers: a segment still mostly live (recent instances above the trim
            // point) waits until the trim passes it. Copying such a segment forward at every
            // trim rewrote most of the log again and again (bench storage measured 1.7 bytes
            // appended per byte delivered before this bound).
            if held.len() > RELOCATE_MAX
                || held_bytes > self.log.segment_bytes() / RELOCATE_FRACTION
            {
                continue;
            }
            for &i in held {
                let Some(loc) = self.index_get(i) else {
                    continue;
                };
                let Some(Record::Accept {
                    instance,
                    ballot,
                    decree,
                    ..
                }) = self.log.read_or_fail(loc.pos())
                else {
                    return;
                };
                let r = Record::Accept {
                    instance,
                    ballot,
                    decided: loc.decided,
                    decree,
                };
                let moved = self.append(&r);
                self.index_set(i, Loc::at(moved, loc.decided));
            }
            self.log.delete_after_sync(s);
        }
    }
}

impl<D: LogDir> AcceptorStore for DurableStore<D> {
    fn promised(&self) -> Ballot {
        self.cache.promised()
    }
    fn set_promised(&mut self, ballot: Ballot) {
        if ballot > self.cache.promised() {
            self.cache.set_promised(ballot);
            self.append(&Record::Promise(ballot));
        }
    }
    fn get(&self, instance: Instance) -> Option<&Accepted> {
        self.cache.get(instance)
    }
    fn put(&mut self, instance: Instance, accepted: Accepted) -> bool {
        if self.log.failed().is_some() || instance < self.log_start_() {
            return false;
        }
        let decided = accepted.decided;
        if instance < self.cache.log_start() {
            // Below the cache: a decided record there is final. Otherwise this acceptor missed
            // the instance while the window moved on (or voted there at a lower ballot), and
            // refusing would leave the instance to the other acceptors alone: with a quorum
            // of them in that state it could never be decided. On disk only.
            if self.index_get(instance).is_some_and(|l| l.decided) {
                return false;
            }
            let r = Record::Accept {
                instance,
                ballot: accepted.ballot,
                decided,
                decree: accepted.decree,
            };
            let pos = self.append(&r);
            self.index_set(instance, Loc::at(pos, decided));
            // Written through at once (not synced): `range` reads it back from the file.
            self.log.write_pending();
            return true;
        }
        let r = Record::Accept {
            instance,
            ballot: accepted.ballot,
            decided,
            decree: accepted.decree.clone(),
        };
        if !self.cache.put(instance, accepted) {
            return false;
        }
        let pos = self.append(&r);
        self.index_set(instance, Loc::at(pos, decided));
        true
    }
    /// In the cache only: see [`AcceptorStore::put_learned`]. Below the cache it is not
    /// kept at all (the voters have it on disk). If the cache held an undecided vote of
    /// this acceptor there, the log keeps that vote, which stays safe: it is of a lower
    /// ballot than the decision's quorum, or for the same decree.
    fn put_learned(&mut self, instance: Instance, accepted: Accepted) -> bool {
        debug_assert!(accepted.decided, "put_learned takes decisions only");
        if self.log.failed().is_some() || instance < self.cache.log_start().max(self.log_start_()) {
            return false;
        }
        self.cache.put(instance, accepted)
    }
    /// From the cache only: the log keeps the vote, which stays safe (see the trait).
    fn discard_stale(&mut self, instance: Instance) {
        self.cache.discard_stale(instance);
    }
    fn mark_decided(&mut self, instance: Instance) {
        if instance < self.cache.log_start() {
            if let Some(mut l) = self.index_get(instance)
                && !l.decided
            {
                self.append(&Record::Decided(instance));
                l.decided = true;
                self.index_set(instance, l);
            }
            return;
        }
        let fresh = self.cache.get(instance).is_some_and(|a| !a.decided);
        if !fresh {
            return;
        }
        self.cache.mark_decided(instance);
        self.append(&Record::Decided(instance));
        if let Some(mut l) = self.index_get(instance) {
            l.decided = true;
            self.index_set(instance, l);
        }
    }
    fn max_instance(&self) -> Instance {
        self.cache.max_instance()
    }
    fn log_start(&self) -> Instance {
        self.log_start_()
    }
    fn range(&self, from: Instance, to: Instance) -> Vec<(Instance, Accepted)> {
        let from = from.max(self.log_start_());
        let cache_start = self.cache.log_start();
        let mut out = Vec::new();
        let mut i = from;
        // Older instances from disk. A read error ends the answer early; the asker retries
        // elsewhere, and the next sync reports a damaged log.
        while i < to.min(cache_start) {
            if let Some(loc) = self.index_get(i) {
                if !self.log.written(loc.pos()) {
                    // Appended in this group (a vote for an instance below the cache
                    // window) and not written yet: the answer ends here, the asker asks
                    // again.
                    return out;
                }
                let e = match self.log.read(loc.pos()) {
                    Ok(Record::Accept { ballot, decree, .. }) => {
                        out.push((
                            i,
                            Accepted {
                                ballot,
                                decree,
                                decided: loc.decided,
                            },
                        ));
                        i += 1;
                        continue;
                    }
                    Ok(other) => StorageError(format!(
                        "{}/{}: offset {} holds a {} record where the index has the vote \
                         of instance {i}",
                        self.log.describe(),
                        super::seglog::seg_name(loc.seg),
                        loc.off,
                        other.kind_name()
                    )),
                    Err(e) => e,
                };
                self.log.note_read_failure(e);
                return out;
            }
            i += 1;
        }
        out.extend(self.cache.range(i.max(cache_start), to));
        out
    }
    fn range_where(
        &self,
        from: Instance,
        to: Instance,
        keep: &mut dyn FnMut(Instance, &Accepted) -> bool,
    ) -> Vec<(Instance, Accepted)> {
        let from = from.max(self.log_start_());
        let cache_start = self.cache.log_start();
        if from < to.min(cache_start) {
            // Some of it from disk: `range`'s reads (and its early ends) as they are.
            let mut v = self.range(from, to);
            v.retain(|(i, a)| keep(*i, a));
            return v;
        }
        // All of it in the cache: what `range` returns, without cloning what `keep` drops.
        self.cache.range_where(from.max(cache_start), to, keep)
    }
    fn sync(&mut self) -> Result<(), StorageError> {
        self.log.sync()
    }
    /// Writes what is pending and, with `sync = true`, returns the fdatasync of the current
    /// segment (and the directory fsync, if names changed) as a job; where the directory
    /// cannot hand out steps, syncs in place. Segments freed by a trim are deleted once the
    /// trim record is durable: in place, or at `end_sync`.
    fn begin_sync(&mut self) -> Result<Option<super::SyncJob>, StorageError> {
        self.log.begin_sync()
    }
    fn mark_whole(&mut self) {
        self.log.mark_whole();
    }
    fn end_sync(&mut self, result: &Result<(), StorageError>) {
        self.log.end_sync(result);
    }
    /// Whether `open` found a log. An empty directory is a first start, or a restart after
    /// the log was lost (a machine crash before anything was synced, a wiped disk): then
    /// the acceptor must not claim to remember anything (it is amnesic if the driver says
    /// it restarted).
    fn is_durable(&self) -> bool {
        self.recovered
    }
    fn has_room(&self) -> bool {
        self.cache.has_room()
    }
    fn bytes_held(&self) -> usize {
        self.cache.bytes_held()
    }
    fn trim(&mut self, below: Instance) {
        if below <= self.log_start_() {
            return;
        }
        self.cache.trim(below);
        self.index.trim(below);
        self.append(&Record::Trim { log_start: below });
        self.collect_segments();
    }
    fn log_bytes(&self) -> u64 {
        self.log.log_bytes()
    }
    fn appended_bytes(&self) -> u64 {
        self.log.appended_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{MemDir, Tear};
    use crate::types::{Batch, Decree, NodeId, ValueId};

    /// Found by the fuzz target `durable_store` (issue 33): one well-formed record naming
    /// an instance far past the others made recovery reserve a slot per instance between
    /// (6.6 TB, an abort). Such a log is refused as damaged, with an error that says so.
    #[test]
    fn recovery_refuses_an_instance_far_past_the_others_without_reserving_for_the_gap() {
        let dir = MemDir::new("far");
        let (mut s, _) = DurableStore::open(dir.clone(), opts(true)).unwrap();
        let b = Ballot::new(1, NodeId(1), 0);
        s.set_promised(b);
        assert!(s.put(
            1,
            Accepted {
                ballot: b,
                decree: Decree::Noop,
                decided: false,
            }
        ));
        s.sync().unwrap();
        drop(s);
        // A group commit of one Accept for instance 2^40, framed as the store frames it.
        let (name, end) = {
            let (s, _) = DurableStore::open(dir.clone(), opts(true)).unwrap();
            s.write_end()
        };
        let seg: u64 = name
            .trim_start_matches("seg-")
            .trim_end_matches(".log")
            .parse()
            .unwrap();
        let far = Record::Accept {
            instance: 1 << 40,
            ballot: b,
            decided: false,
            decree: Decree::Noop,
        };
        let mut d = dir.clone();
        let mut at = end;
        for r in [far, Record::Commit { records: 1 }] {
            let (chunks, len) = r.encode(seg);
            let bufs: Vec<&[u8]> = chunks.iter().map(|c| &c[..]).collect();
            d.write_at(&name, at, &bufs).unwrap();
            at += len as u64;
        }
        d.sync(&name).unwrap();
        let e = DurableStore::open(dir, opts(true)).err().expect("refused");
        assert!(e.0.contains("damaged log"), "{e}");
    }

    fn opts(sync: bool) -> DurableOptions {
        DurableOptions {
            sync,
            segment_bytes: DurableOptions::SEGMENT_BYTES_DEFAULT,
            cache_instances: 1024,
            cache_bytes: 64 << 20,
        }
    }

    fn value(i: Instance, bytes: usize) -> Decree {
        let id = ValueId {
            node: NodeId(1),
            seq: i,
        };
        Decree::Values(Batch::single(id, Bytes::from(vec![i as u8; bytes])))
    }

    fn vote(i: Instance, decided: bool) -> Accepted {
        Accepted {
            ballot: Ballot::new(2, NodeId(1), 0),
            decree: value(i, 3000),
            decided,
        }
    }

    fn open(dir: &MemDir, o: DurableOptions) -> (DurableStore<MemDir>, Recovery) {
        DurableStore::open(dir.clone(), o).unwrap_or_else(|e| panic!("open: {e}"))
    }

    #[test]
    fn promise_and_votes_survive_a_machine_crash_once_synced() {
        let dir = MemDir::new("a");
        let (mut s, rec) = open(&dir, opts(true));
        assert_eq!(rec.records, 0);
        s.set_promised(Ballot::new(2, NodeId(1), 0));
        for i in 1..=10 {
            assert!(s.put(i, vote(i, i <= 4)));
        }
        s.mark_decided(5);
        s.sync().unwrap();
        // Written after the last sync: a machine crash may lose it.
        assert!(s.put(11, vote(11, false)));
        drop(s);
        dir.crash_machine(|_, _| Tear {
            keep: 0,
            flip: None,
        });
        let (s, rec) = open(&dir, opts(true));
        assert_eq!(rec.promised, Ballot::new(2, NodeId(1), 0));
        assert_eq!(rec.max_instance, 10);
        assert_eq!(rec.torn_tail, None);
        assert_eq!(s.promised(), Ballot::new(2, NodeId(1), 0));
        for i in 1..=10 {
            let a = s.get(i).unwrap_or_else(|| panic!("instance {i} lost"));
            assert_eq!(a.decree, value(i, 3000));
            assert_eq!(a.decided, i <= 5, "instance {i}");
        }
        assert!(s.get(11).is_none());
    }

    /// Found by `abcast demo --storage durable` once fdatasync ran on the sync thread: a
    /// trim while a sync was in flight doomed again the segments that sync was to delete,
    /// and the second `remove` failed the store ("No such file or directory").
    #[test]
    fn trims_while_a_sync_is_in_flight_delete_each_segment_once() {
        let dir = MemDir::new("q");
        let mut o = opts(true);
        o.segment_bytes = 64 << 10;
        let (mut s, _) = open(&dir, o.clone());
        let mut i = 0;
        let mut put_ten = |s: &mut DurableStore<MemDir>| {
            for _ in 0..10 {
                i += 1;
                assert!(s.put(i, vote(i, false)));
                s.mark_decided(i);
            }
            i
        };
        let mut max_segments = 0;
        for _ in 0..100 {
            let top = put_ten(&mut s);
            s.trim(top - 5);
            let job = s.begin_sync().expect("begin");
            // While the fdatasync runs elsewhere: more votes, and trims that look at the
            // same old segments again.
            let top = put_ten(&mut s);
            s.trim(top - 5);
            if let Some(j) = job {
                let r = j.run();
                s.end_sync(&r);
            }
            s.sync().expect("no segment is removed twice");
            max_segments = max_segments.max(s.segment_numbers().len());
        }
        assert!(
            max_segments <= 4,
            "trimmed segments were deleted: {max_segments}"
        );
        drop(s);
        let (s, rec) = open(&dir, o);
        assert_eq!(rec.torn_tail, None);
        assert_eq!(s.range(i - 4, i + 1).len(), 5);
    }

    /// A trim that frees many segments keeps as many spares (within `SPARES_MAX`): the log
    /// is about to roll as many again, and each spare it lacks is a fresh file, slower to
    /// write. A trim that frees one keeps up to `SPARES_MIN`.
    #[test]
    fn a_trim_that_frees_many_segments_keeps_as_many_spares() {
        let dir = MemDir::new("m");
        let mut o = opts(true);
        o.segment_bytes = 64 << 10;
        let (mut s, _) = open(&dir, o.clone());
        for i in 1..=400u64 {
            assert!(s.put(i, vote(i, false)));
            s.mark_decided(i);
        }
        s.sync().unwrap();
        let before = s.segment_numbers().len();
        assert!(before > SPARES_MIN + 4, "{before} segments");
        s.trim(400);
        s.sync().unwrap();
        s.sync().unwrap();
        let spares = |d: &MemDir| {
            d.list()
                .unwrap()
                .iter()
                .filter(|n| n.starts_with("spare-"))
                .count()
        };
        let kept = spares(&dir);
        assert_eq!(kept, before - 1, "every freed segment kept as a spare");
        // The next segments are those spares, written over, not fresh files.
        for i in 401..=500u64 {
            assert!(s.put(i, vote(i, false)));
            s.mark_decided(i);
            s.sync().unwrap();
        }
        assert!(spares(&dir) < kept, "the log rolled onto its spares");
        drop(s);
        let (s, rec) = open(&dir, o);
        assert_eq!(s.range(401, 501).len(), 100);
        assert!(rec.spares <= SPARES_MAX);
    }

    /// Trimmed segments are kept as spares and written over as new segments; the records a
    /// recycled file held before never pass for new ones (their checksum names another
    /// segment), through restarts and machine crashes alike.
    #[test]
    fn recycled_segments_recover_only_their_own_records() {
        for crash in [false, true] {
            let dir = MemDir::new("y");
            let mut o = opts(true);
            o.segment_bytes = 64 << 10;
            let (mut s, _) = open(&dir, o.clone());
            for i in 1..=600u64 {
                assert!(s.put(i, vote(i, false)));
                s.mark_decided(i);
                if i % 20 == 0 {
                    s.trim(i - 10);
                }
                s.sync().unwrap();
            }
            // A vote written to the OS but not synced (its group commit not ended), then the
            // process or the machine dies.
            assert!(s.put(601, vote(601, false)));
            s.write_pending();
            let names = dir.list().unwrap();
            assert!(
                names.iter().any(|n| n.starts_with("spare-")),
                "trimmed segments are kept as spares: {names:?}"
            );
            drop(s);
            if crash {
                dir.crash_machine(|_, n| Tear {
                    keep: n / 2,
                    flip: None,
                });
            }
            let (s, rec) = open(&dir, o.clone());
            // (A machine crash may undo the last renames to spares: their segments come
            // back, trimmed, and are read like any old segment.)
            assert!(crash || rec.spares > 0, "{rec}");
            for i in 591..=600 {
                let a = s.get(i).unwrap_or_else(|| panic!("instance {i} lost"));
                assert_eq!(a.decree, value(i, 3000), "instance {i}");
            }
            // The unsynced vote's group has no commit marker: dropped whole, whether the
            // process crash kept its write or the machine crash kept half of it.
            assert_eq!(s.range(591, 700).len(), 10);
            assert!(crash || rec.torn_tail.is_some(), "{rec}");
            assert!(s.get(100).is_none(), "trimmed long ago, not resurrected");
            drop(s);
            let (_, again) = open(&dir, o);
            assert_eq!(again.torn_tail, None);
            assert_eq!(again.recycled_tails, 0, "cut once, at the first reopen");
        }
    }

    /// A decision learned without a vote serves reads from memory and never reaches the
    /// log: each value is written once per voter, not once per acceptor.
    #[test]
    fn learned_decisions_are_served_from_memory_and_never_written() {
        let dir = MemDir::new("l");
        let (mut s, _) = open(&dir, opts(true));
        assert!(s.put(1, vote(1, false)));
        s.mark_decided(1);
        s.sync().unwrap();
        let before = s.appended_bytes();
        for i in 2..=5 {
            assert!(s.put_learned(i, vote(i, true)));
        }
        s.sync().unwrap();
        assert_eq!(
            s.appended_bytes(),
            before,
            "nothing appended for learned decisions"
        );
        assert_eq!(s.get(3).map(|a| a.decided), Some(true));
        assert_eq!(s.range(1, 6).len(), 5, "served from the cache");
        drop(s);
        let (s, _) = open(&dir, opts(true));
        assert_eq!(
            s.get(1).map(|a| a.decided),
            Some(true),
            "the vote is durable"
        );
        assert!(s.get(3).is_none(), "a learned decision is not");
    }

    /// Issue 33, suspect 2: a node whose directory was wiped restarts amnesic on an empty
    /// store, writes a new log, and may crash before its repair. That log is not all the
    /// node promised and voted in its earlier lives, yet the next open found it and said
    /// durable: the node restarted not amnesic (a Raft leader overwrote a committed entry,
    /// seed 186 of Raft's power_loss mix with `wiped_dir`). A log begun on an empty
    /// directory stays "not durable" across crashes until the protocol says its state is
    /// whole (`mark_whole`: not amnesic, or repaired) and a sync made that durable.
    #[test]
    fn a_log_begun_empty_is_not_durable_until_marked_whole_and_synced() {
        for sync in [true, false] {
            let dir = MemDir::new("wiped");
            let (mut s, _) = open(&dir, opts(sync));
            assert!(!s.is_durable());
            // The amnesic life writes, and crashes (process, then machine) unrepaired.
            assert!(s.put(1, vote(1, false)));
            s.sync().unwrap();
            drop(s);
            dir.crash_process();
            let (mut s, rec) = open(&dir, opts(sync));
            assert!(rec.unrepaired && rec.records > 0, "sync {sync}: {rec}");
            assert!(
                !s.is_durable(),
                "sync {sync}: unrepaired, amnesic again: {rec}"
            );
            assert_eq!(
                s.max_instance(),
                1,
                "what it holds is kept (and used for repair)"
            );
            // Repaired (the repair wrote what it learned): said whole, but not yet synced:
            // a crash now keeps it amnesic.
            assert!(s.put(2, vote(2, false)));
            s.mark_whole();
            drop(s);
            dir.crash_process();
            let (mut s, rec) = open(&dir, opts(sync));
            assert!(!s.is_durable(), "sync {sync}: not synced since: {rec}");
            assert!(s.put(3, vote(3, false)));
            s.mark_whole();
            s.sync().unwrap();
            drop(s);
            if sync {
                dir.crash_machine(|_, _| Tear {
                    keep: 0,
                    flip: None,
                });
            } else {
                dir.crash_process();
            }
            let (s, rec) = open(&dir, opts(sync));
            assert!(!rec.unrepaired, "sync {sync}: {rec}");
            assert!(s.is_durable(), "sync {sync}: whole and synced: {rec}");
        }
        // A first start that wrote nothing before a machine crash: its empty state was
        // whole (`mark_whole` with nothing pending removes the file at once).
        let dir = MemDir::new("first");
        let (mut s, _) = open(&dir, opts(true));
        s.mark_whole();
        drop(s);
        dir.crash_machine(|_, _| Tear {
            keep: 0,
            flip: None,
        });
        let (s, rec) = open(&dir, opts(true));
        assert!(s.is_durable() && !rec.unrepaired, "{rec}");
    }

    /// Found with the simulator (`tests/durable.rs`, `sync = false` under machine crashes):
    /// such a log never syncs its directory, so a machine crash loses its files and the
    /// store reopens empty, yet said it had kept its state: the acceptor restarted without
    /// its votes and promises and not amnesic, and the sweep broke agreement (seed 6 of
    /// U-Ring's crash mix at 1000 values/s, 3 nodes: a learner skipped an instance another
    /// delivered).
    #[test]
    fn a_store_that_finds_no_log_does_not_claim_to_have_kept_its_state() {
        let dir = MemDir::new("m");
        let (mut s, _) = open(&dir, opts(false));
        assert!(!s.is_durable(), "a first start kept nothing");
        s.mark_whole();
        assert!(s.put(1, vote(1, false)));
        s.sync().unwrap();
        drop(s);
        let (s, _) = open(&dir, opts(false));
        assert!(s.is_durable(), "a process crash keeps the log");
        drop(s);
        dir.crash_machine(|_, n| Tear {
            keep: n,
            flip: None,
        });
        assert!(
            dir.sizes().keys().all(|n| !n.starts_with("seg-")),
            "no directory sync: the segments are gone"
        );
        let (s, rec) = open(&dir, opts(false));
        assert_eq!(rec.records, 0);
        assert!(!s.is_durable());
    }

    /// Issue 33, suspect 2: a real machine crash keeps the directory entries and a prefix
    /// (or all) of what was written without fdatasync (ext4, xfs), so a `sync = false`
    /// store found its log, recovered what was left of it and said it had kept its state:
    /// the acceptor restarted not amnesic after losing promises or votes. The log of an
    /// earlier boot is discarded and the store opens not durable, whatever the crash kept.
    #[test]
    fn an_unsynced_log_of_an_earlier_boot_opens_not_durable_whatever_the_crash_kept() {
        for keep_all in [true, false] {
            let dir = MemDir::new("boot");
            let (mut s, _) = open(&dir, opts(false));
            for i in 1..=20 {
                assert!(s.put(i, vote(i, i % 2 == 0)));
                s.sync().unwrap();
            }
            drop(s);
            // The crash keeps every name, and every byte or a prefix of each file's.
            dir.crash_machine_fate(|_, n, _| {
                Some(Tear {
                    keep: if keep_all { n } else { n / 2 },
                    flip: None,
                })
            });
            assert!(
                dir.sizes().keys().any(|n| n.starts_with("seg-")),
                "the segments survived"
            );
            let (s, rec) = open(&dir, opts(false));
            assert!(!s.is_durable(), "keep all {keep_all}: {rec}");
            assert!(rec.unsynced_lost.is_some(), "{rec}");
            assert_eq!(s.max_instance(), 0, "nothing of it is used");
            drop(s);
            // What this boot writes is trusted again after a process crash, once the
            // acceptor was repaired.
            let (mut s, _) = open(&dir, opts(false));
            s.mark_whole();
            assert!(s.put(1, vote(1, false)));
            s.sync().unwrap();
            drop(s);
            dir.crash_process();
            let (s, rec) = open(&dir, opts(false));
            assert!(s.is_durable(), "{rec}");
            assert_eq!(rec.unsynced_lost, None);
        }
        // A log with `sync = true` is trusted across boots: everything in it was synced.
        let dir = MemDir::new("synced");
        let (mut s, _) = open(&dir, opts(true));
        s.mark_whole();
        assert!(s.put(1, vote(1, false)));
        s.sync().unwrap();
        drop(s);
        dir.crash_machine(|_, _| Tear {
            keep: 0,
            flip: None,
        });
        let (s, rec) = open(&dir, opts(true));
        assert!(s.is_durable(), "{rec}");
    }

    #[test]
    fn a_record_that_cannot_be_read_back_fails_the_store_at_its_next_sync() {
        let dir = MemDir::new("rot");
        let o = DurableOptions {
            cache_instances: 8,
            ..opts(true)
        };
        let (mut s, _) = open(&dir, o);
        for i in 1..=40 {
            assert!(s.put(i, vote(i, true)));
        }
        s.sync().unwrap();
        assert_eq!(
            s.range(1, 41).len(),
            40,
            "old instances read back from the log"
        );
        // Bit rot in the record of instance 3, long after it was written.
        let loc = s.index_get(3).expect("on disk");
        assert!(dir.flip_byte(&seg_name(loc.seg), loc.off as usize + 100));
        let got = s.range(1, 41);
        assert_eq!(
            got.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            vec![1, 2],
            "the answer ends before the damaged record"
        );
        let e = s.sync().expect_err("the damage is reported");
        assert!(
            e.0.contains(&seg_name(loc.seg)) && e.0.contains(&loc.off.to_string()),
            "names the file and offset: {e}"
        );
        assert!(s.begin_sync().is_err(), "and the store stays failed");
    }

    #[test]
    fn without_sync_a_process_crash_keeps_everything_written() {
        let dir = MemDir::new("b");
        let (mut s, _) = open(&dir, opts(false));
        // One fdatasync at open, of the file naming the boot the log is written on.
        let at_open = dir.syncs();
        for i in 1..=5 {
            assert!(s.put(i, vote(i, false)));
        }
        s.sync().unwrap();
        assert_eq!(dir.syncs(), at_open, "sync = false never calls fdatasync");
        drop(s);
        dir.crash_process();
        let (s, _) = open(&dir, opts(false));
        assert_eq!(s.range(1, 10).len(), 5);
    }

    #[test]
    fn one_sync_covers_a_whole_batch_of_records() {
        let dir = MemDir::new("c");
        let (mut s, _) = open(&dir, opts(true));
        let before = dir.syncs();
        for i in 1..=100 {
            assert!(s.put(i, vote(i, false)));
            s.mark_decided(i);
        }
        s.sync().unwrap();
        assert_eq!(dir.syncs() - before, 1, "group commit: one fdatasync");
        assert_eq!(s.syncs(), 1 + 1, "the open's checkpoint, then the batch");
    }

    #[test]
    fn a_torn_tail_is_cut_at_the_last_whole_record_and_reported() {
        for flip in [None, Some(3)] {
            let dir = MemDir::new("d");
            let (mut s, _) = open(&dir, opts(true));
            for i in 1..=3 {
                assert!(s.put(i, vote(i, false)));
            }
            s.sync().unwrap();
            for i in 4..=6 {
                assert!(s.put(i, vote(i, false)));
            }
            s.write_pending();
            drop(s);
            // Half of the unsynced bytes reach the disk, maybe garbled.
            dir.crash_machine(|_, n| Tear { keep: n / 2, flip });
            let (s, rec) = open(&dir, opts(true));
            let torn = rec.torn_tail.expect("the tail is torn");
            assert!(
                torn.file.ends_with(".log") && torn.bytes_cut > 0,
                "{torn:?}"
            );
            let held: Vec<Instance> = s.range(1, 10).iter().map(|(i, _)| *i).collect();
            assert!(held.starts_with(&[1, 2, 3]), "synced votes lost: {held:?}");
            for (i, a) in s.range(1, 10) {
                assert_eq!(a.decree, value(i, 3000), "instance {i} garbled");
            }
            // The cut file is clean now: a second restart finds nothing torn.
            drop(s);
            let (_, again) = open(&dir, opts(true));
            assert_eq!(again.torn_tail, None);
        }
    }

    /// A group commit is atomic at recovery: a crash that keeps any prefix of its write
    /// (here a new promise and three votes, rolling to a new segment half-way, its
    /// fdatasync not done) recovers to exactly the previous group commit, and the whole
    /// write to all of it. `power_lost`: the roll's fdatasync of the old segment did not
    /// complete either, and the new segment's name is lost; otherwise the old segment's
    /// part is durable and the directory too, and the crash cuts the new segment's part.
    #[test]
    fn a_group_commit_survives_a_crash_whole_or_not_at_all_even_across_a_roll() {
        let o = DurableOptions {
            segment_bytes: 8 << 10,
            ..opts(true)
        };
        let old = Ballot::new(2, NodeId(1), 0);
        let new = Ballot::new(3, NodeId(2), 0);
        let build = |power_lost: bool| {
            let dir = MemDir::new("w");
            let (mut s, _) = open(&dir, o.clone());
            s.set_promised(old);
            assert!(s.put(1, vote(1, false)));
            s.sync().unwrap();
            let segments = dir.sizes().len();
            if power_lost {
                dir.begin_power_loss();
            }
            s.set_promised(new);
            for i in 2..=4 {
                assert!(s.put(i, vote(i, false)));
            }
            assert!(s.begin_sync().unwrap().is_some());
            drop(s);
            assert!(dir.sizes().len() > segments, "the group rolled");
            if !power_lost {
                crate::storage::LogDir::sync_dir(&mut dir.clone()).unwrap();
            }
            dir
        };
        for power_lost in [false, true] {
            let unsynced = build(power_lost).unsynced_bytes();
            assert!(unsynced > 3000, "{unsynced}");
            // The last bytes of the write are the marker's count's zeros: cut before them.
            for cut in (0..=unsynced).step_by(61).chain([unsynced - 4, unsynced]) {
                let dir = build(power_lost);
                // A prefix of the group's write: the files in name order are its order.
                let mut budget = cut;
                dir.crash_machine(|_, n| {
                    let keep = budget.min(n);
                    budget -= keep;
                    Tear { keep, flip: None }
                });
                let (s, rec) = open(&dir, o.clone());
                let held: Vec<Instance> = s.range(1, 10).iter().map(|(i, _)| *i).collect();
                let case = format!("power lost {power_lost}, cut {cut} of {unsynced}");
                if cut == unsynced && !power_lost {
                    assert_eq!((s.promised(), held), (new, vec![1, 2, 3, 4]), "{case}");
                    assert_eq!(rec.torn_tail, None, "{case}");
                } else {
                    assert_eq!((s.promised(), held), (old, vec![1]), "{case}");
                }
            }
        }
    }

    #[test]
    fn corruption_before_the_tail_refuses_to_start_naming_file_and_offset() {
        let dir = MemDir::new("e");
        let (mut s, _) = open(&dir, opts(true));
        for i in 1..=4 {
            assert!(s.put(i, vote(i, false)));
        }
        s.sync().unwrap();
        // A later write says the four votes were durable.
        assert!(s.put(5, vote(5, false)));
        s.sync().unwrap();
        drop(s);
        let (name, _) = dir.sizes().into_iter().next().expect("a segment");
        // Inside the second record (the first is the checkpoint).
        assert!(dir.flip_byte(&name, 200));
        let err = DurableStore::open(dir.clone(), opts(true))
            .err()
            .expect("must refuse");
        assert!(
            err.0.contains(&name) && err.0.contains("offset") && err.0.contains("corrupt"),
            "{err}"
        );
    }

    /// The simulator's machine crashes found this (`tests/durable.rs`, seed 6 of U-Ring's
    /// crash mix at 1000 values/s): a crash garbled a byte early in the last, unsynced
    /// write and kept the whole records written after it in the same write (the OS writes
    /// pages back in any order). Recovery took the damage for corruption, since good
    /// records follow it, and refused to start: an ordinary power cut made the node unable
    /// to restart. The `Synced` markers tell the two apart: the damage lies after the last
    /// durable point.
    #[test]
    fn a_garbled_unsynced_write_followed_by_whole_records_is_a_torn_tail() {
        let dir = MemDir::new("i");
        let (mut s, _) = open(&dir, opts(true));
        for i in 1..=3 {
            assert!(s.put(i, vote(i, false)));
        }
        s.sync().unwrap();
        // Small records, so whole ones follow the damaged one in the unsynced write.
        for i in 1..=3 {
            s.mark_decided(i);
        }
        s.write_pending();
        drop(s);
        // Every unsynced byte reaches the disk, one of the first ones garbled.
        dir.crash_machine(|_, n| Tear {
            keep: n,
            flip: Some(14),
        });
        let (s, rec) = open(&dir, opts(true));
        let torn = rec.torn_tail.expect("the last write is torn");
        assert!(torn.why.contains("written with it"), "{torn:?}");
        let held: Vec<(Instance, bool)> = s
            .range(1, 10)
            .iter()
            .map(|(i, a)| (*i, a.decided))
            .collect();
        assert_eq!(
            held,
            vec![(1, false), (2, false), (3, false)],
            "the synced votes, no more"
        );
        // The same damage once a later write made it durable is corruption.
        drop(s);
        let dir = MemDir::new("j");
        let (mut s, _) = open(&dir, opts(true));
        for i in 1..=3 {
            assert!(s.put(i, vote(i, false)));
        }
        s.sync().unwrap();
        // Where the records end (the file itself is preallocated, zeros after them).
        let at = s.write_end().1 as usize;
        for i in 1..=3 {
            s.mark_decided(i);
        }
        s.sync().unwrap();
        assert!(s.put(4, vote(4, false)));
        s.sync().unwrap();
        drop(s);
        let (name, _) = dir.sizes().into_iter().next().expect("a segment");
        // In the marks' write, after its `Synced` marker.
        assert!(dir.flip_byte(&name, at + 40));
        let err = DurableStore::open(dir.clone(), opts(true))
            .err()
            .expect("must refuse");
        assert!(
            err.0.contains("corrupt") && err.0.contains("were durable"),
            "{err}"
        );
    }

    /// Found by the simulator (`tests/durable.rs`, process and machine crashes, seed 12 of
    /// U-Ring's crash mix: a process killed in the middle of a group commit, then a machine
    /// crash of the next incarnation): the restarted store trusted votes it read back from
    /// the OS's cache, wrote its own records to a new segment and synced only that one; the
    /// next machine crash lost (or tore) the old segment's tail, votes the acceptor had
    /// reported since, and a torn old segment made the next start refuse.
    #[test]
    fn what_a_restart_recovered_survives_a_later_machine_crash() {
        let dir = MemDir::new("k");
        let (mut s, _) = open(&dir, opts(true));
        for i in 1..=3 {
            assert!(s.put(i, vote(i, false)));
        }
        // The process dies between the write (the whole group, with its commit marker)
        // and the fdatasync.
        let job = s.begin_sync().unwrap();
        assert!(job.is_some(), "the fdatasync is a job, not run here");
        drop(s);
        dir.crash_process();
        let (mut s, rec) = open(&dir, opts(true));
        assert_eq!(rec.max_instance, 3);
        assert!(s.put(4, vote(4, false)));
        s.sync().unwrap();
        drop(s);
        dir.crash_machine(|_, n| Tear {
            keep: n / 2,
            flip: None,
        });
        let (s, rec) = open(&dir, opts(true));
        assert_eq!(rec.torn_tail, None);
        let held: Vec<Instance> = s.range(1, 10).iter().map(|(i, _)| *i).collect();
        assert_eq!(held, vec![1, 2, 3, 4]);
    }

    #[test]
    fn old_decided_instances_are_read_back_from_disk() {
        let dir = MemDir::new("f");
        let mut o = opts(true);
        o.cache_instances = 4;
        let (mut s, _) = open(&dir, o.clone());
        for i in 1..=20 {
            assert!(s.put(i, vote(i, true)));
            s.sync().unwrap();
        }
        assert!(s.get(1).is_none(), "evicted from the cache");
        let all = s.range(1, 21);
        assert_eq!(all.len(), 20);
        assert!(
            all.iter()
                .all(|(i, a)| a.decided && a.decree == value(*i, 3000))
        );
        drop(s);
        let (s, _) = open(&dir, o);
        assert_eq!(s.range(1, 21).len(), 20);
    }

    /// Found by the simulator (`tests/durable.rs`, seed 31 of U-Ring's mixed mix at 1000
    /// values/s, cache of 512 instances): two of three acceptors had missed instance 752
    /// (one down, one cut off) and their caches had moved past it; both refused to vote
    /// there ("below the cache everything is decided"), so 752 was never decided and every
    /// learner stopped at 751 for good.
    #[test]
    fn a_vote_below_the_cache_window_is_stored_and_reported() {
        let dir = MemDir::new("l");
        let mut o = opts(true);
        o.cache_instances = 4;
        let (mut s, _) = open(&dir, o.clone());
        for i in (1..=20).filter(|&i| i != 5 && i != 7) {
            assert!(s.put(i, vote(i, true)));
        }
        s.sync().unwrap();
        assert!(s.get(5).is_none(), "the window moved past 5");
        assert!(s.put(5, vote(5, false)), "the missed instance takes a vote");
        assert!(
            !s.put(6, vote(6, false)),
            "a decided one below the window does not"
        );
        let five = |s: &DurableStore<MemDir>| s.range(5, 6).first().map(|(_, a)| a.decided);
        assert_eq!(five(&s), Some(false), "phase 1 must see an undecided vote");
        assert!(s.put(7, vote(7, false)));
        s.mark_decided(7);
        assert_eq!(s.range(7, 8).first().map(|(_, a)| a.decided), Some(true));
        s.sync().unwrap();
        drop(s);
        let (mut s, _) = open(&dir, o.clone());
        assert_eq!(five(&s), Some(false), "the vote survives a restart");
        s.mark_decided(5);
        s.sync().unwrap();
        assert_eq!(five(&s), Some(true));
        drop(s);
        let (s, _) = open(&dir, o);
        assert_eq!(five(&s), Some(true));
        assert_eq!(s.range(1, 21).len(), 20);
    }

    #[test]
    fn trimming_keeps_the_log_bounded_and_survives_restart() {
        let dir = MemDir::new("g");
        let mut o = opts(true);
        o.segment_bytes = 64 << 10;
        let (mut s, _) = open(&dir, o.clone());
        let mut max_bytes = 0;
        for i in 1..=2000u64 {
            assert!(s.put(i, vote(i, false)));
            s.mark_decided(i);
            if i % 50 == 0 {
                s.trim(i - 40);
            }
            s.sync().unwrap();
            max_bytes = max_bytes.max(s.log_bytes());
        }
        assert!(s.appended_bytes() > 6_000_000);
        // The bound for the records, plus the current segment's preallocated space.
        assert!(
            max_bytes < 400_000 + o.segment_bytes,
            "log grew to {max_bytes} bytes though only ~50 instances are live"
        );
        drop(s);
        let (s, rec) = open(&dir, o);
        assert_eq!(rec.log_start, 1960);
        assert_eq!(s.log_start(), 1960);
        let held: Vec<Instance> = s.range(1, 3000).iter().map(|(i, _)| *i).collect();
        assert_eq!(held, (1960..=2000).collect::<Vec<_>>());
    }

    #[test]
    fn a_straggler_vote_in_an_old_segment_is_copied_forward_before_deletion() {
        let dir = MemDir::new("h");
        let mut o = opts(true);
        o.segment_bytes = 16 << 10;
        let (mut s, _) = open(&dir, o.clone());
        // Instance 500 is voted early and stays undecided.
        assert!(s.put(500, vote(500, false)));
        for i in 1..=100u64 {
            assert!(s.put(i, vote(i, true)));
            s.sync().unwrap();
        }
        s.trim(101);
        s.sync().unwrap();
        assert!(s.segment_numbers().len() <= 2, "{:?}", s.segment_numbers());
        drop(s);
        let (s, _) = open(&dir, o);
        let a = s
            .get(500)
            .expect("the undecided vote must not be forgotten");
        assert!(!a.decided);
    }
}
