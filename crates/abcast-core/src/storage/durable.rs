//! The durable acceptor store: a segmented append-only log of checked records
//! (`record.rs`) with group commit, plus a bounded in-memory cache of recent instances.
//! Seed 000 §3.4 `BerkeleyStorage` (`sync = false`: through the OS, survives a process
//! crash) and `SyncBerkeleyStorage` (`sync = true`: fdatasync, survives a machine crash);
//! seed 003 §4.2: an acceptor keeps `rnd`, `v-rnd` and `v-val` on stable storage before it
//! answers phase 1A or 2A, which the driver ensures by calling [`AcceptorStore::sync`]
//! before it sends what the protocol produced (`Outbox::needs_sync`).
//!
//! * **Write path.** `put`, `set_promised`, `mark_decided` and `trim` append records to a
//!   pending list (payloads shared, not copied); `sync` writes them in one vectored write and,
//!   with `sync = true`, one fdatasync: that is the group commit, one per driver batch.
//! * **Segments.** `seg-<n>.log`, rolled at `segment_bytes`. Each opens with a `Checkpoint`
//!   (promise and trim point), so a whole old segment can be deleted once nothing in it is
//!   live: trimming keeps the log bounded. A few live stragglers in an old segment are
//!   copied forward first. A new segment is preallocated to `segment_bytes`
//!   ([`LogDir::preallocate`]) and written at the store's own offsets: a write then changes
//!   no file size, and an fdatasync has no metadata to commit (1.75 times the synced write
//!   rate on ext4). Zeros after the last record are that reserved space.
//! * **Reads.** Recent instances come from the cache (a [`MemoryStore`]); older ones from
//!   disk through an index of record locations (`range`, for retrieves and phase 1). The
//!   cache's window moves past instances this acceptor never voted in (it was away): a
//!   vote or decision that arrives for one later goes to disk alone, so that the acceptor
//!   still takes part in deciding it.
//! * **Durable points.** The first record of a write, once earlier writes of the segment
//!   are durable, is a `Synced { upto }` marker: the segment's first `upto` bytes were
//!   fdatasync'd (with `sync = false`: written). A crash damages only what was written after
//!   the last durable point, and may damage it anywhere: the OS writes pages back in any
//!   order, so a garbled record can be followed by whole ones of the same unsynced write.
//! * **Recovery** (`open`): replays every segment in order. Zeros to the end of a segment
//!   end its records (preallocated space; cut off, since appends go to a new segment). A
//!   bad record in the last
//!   segment above every durable point its markers name (those after it included) is a
//!   torn tail: the file is cut there, whole records after it in the same unsynced write
//!   included, and [`Recovery::torn_tail`] says where (the node logs it). A bad record below
//!   a durable point, or in an earlier segment, is corruption: `open` refuses with the file
//!   and the offset. (Damage inside the last write cannot be told from a torn write: it is
//!   cut; nothing in it was acknowledged, since the acknowledgement waits for the sync.)

use super::record::{self, Framed, Record};
use super::{Accepted, AcceptorStore, LogDir, MemoryStore, StorageError};
use crate::types::{Ballot, Instance};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

/// Pending bytes written out (without fdatasync) before `sync` is called, to bound memory.
const FLUSH_BYTES: usize = 8 << 20;
/// At most this many live records are copied out of an old segment so it can be deleted.
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

/// A torn tail found and cut at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    pub file: String,
    pub offset: u64,
    pub bytes_cut: u64,
    pub why: String,
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

pub struct DurableStore<D: LogDir> {
    dir: D,
    sync_writes: bool,
    segment_bytes: u64,
    /// Recent instances, and every undecided vote; below `cache.log_start()` instances are
    /// on disk only (decided ones, and votes for instances the window had passed).
    cache: MemoryStore,
    log_start: Instance,
    /// `index[i - log_start]`: the record of instance i, if any.
    index: VecDeque<Option<Loc>>,
    /// Segment number → bytes written to it. The last is the one appended to.
    segments: BTreeMap<u64, u64>,
    pending: Vec<Bytes>,
    pending_bytes: usize,
    unsynced: bool,
    dir_dirty: bool,
    /// Old segments to delete once the trim record that frees them is written.
    deletable: Vec<u64>,
    /// Bytes of the current segment that are durable (fdatasync'd; with `sync = false`,
    /// written), and the most a `Synced` marker in it has stated.
    durable: u64,
    marked: u64,
    failed: Option<StorageError>,
    /// A record `range` (which cannot fail) could not read back: the next sync reports it,
    /// and the store fails, as `open` would refuse the damaged log.
    read_failed: std::cell::RefCell<Option<StorageError>>,
    appended_bytes: u64,
    /// `open` found a log (at least one whole record): the state was kept.
    recovered: bool,
    syncs: u64,
    /// The current segment's file size by preallocation (0: not preallocated).
    allocated: u64,
    /// Sync jobs in flight (`begin_sync` returned them), oldest first: the segment and
    /// length each makes durable, and the segments to delete once it did (their trim
    /// record is in it). The driver may run a few at once; they end in order.
    in_flight: VecDeque<InFlight>,
    /// Trimmed segment files kept for reuse (number, bytes): writing over a file's blocks
    /// costs the disk half what allocating new ones does (measured with fresh 64 MiB
    /// segments: 175 to 433 MB/s per writer, against 630 to 800 MB/s writing over
    /// written blocks). `spares` may become segments; `spares_pending` were renamed since
    /// the last directory sync and may not, yet: a crash could bring their old segment
    /// names back, and a reused file under an old segment's name would read as damage.
    spares: Vec<(u64, u64)>,
    spares_pending: Vec<(u64, u64)>,
}

#[derive(Debug)]
struct InFlight {
    seg: u64,
    len: u64,
    delete: Vec<u64>,
    /// Spares whose renames this job's directory sync makes durable.
    promote: Vec<(u64, u64)>,
}

/// Spare segment files kept: as many as the trim freed, at least `SPARES_MIN`, at most
/// `SPARES_MAX` (each `segment_bytes` of disk). Why as many as it freed: the log rolls
/// about as many segments before the next trim as it had since the last one, and each a
/// spare cannot cover is a fresh fallocated file, which the disk writes far slower (see
/// `spares`). With 4 at most, a voter under full load at 8 KiB trimmed about ten segments
/// a second and wrote six of the next ten fresh: `abcast bench storage`, durable with
/// `sync = true`, went from 5.3 to 6.5 Gbit/s with 16 (single runs, 2026-11-23). The disk
/// this takes is at most what the trimmed segments had, so it is bounded by the log's own
/// recent size.
const SPARES_MIN: usize = 4;
const SPARES_MAX: usize = 64;

fn seg_name(n: u64) -> String {
    format!("seg-{n:020}.log")
}

fn spare_name(n: u64) -> String {
    format!("spare-{n:020}.log")
}

fn parse_spare_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("spare-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn parse_seg_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("seg-")?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// After a bad record at `off`: the first whole good record after it, if any, and the
/// highest durable point stated by `durable` and by the `Synced` markers among the whole
/// records after it.
fn records_after(buf: &[u8], off: usize, mut durable: u64, seg: u64) -> (Option<usize>, u64) {
    let first = record::good_record_after(buf, off, seg);
    let mut at = first;
    while let Some(a) = at {
        match record::frame_at(buf, a, seg) {
            Framed::Whole { body, next } => {
                if let Ok(Record::Synced { upto }) =
                    Record::decode(Bytes::copy_from_slice(&buf[body]))
                {
                    durable = durable.max(upto);
                }
                at = Some(next);
            }
            Framed::End => break,
            Framed::Bad(_) => at = record::good_record_after(buf, a, seg),
        }
    }
    (first, durable)
}

impl<D: LogDir> DurableStore<D> {
    /// Opens the log in `dir`, replaying what is there (an empty directory starts a new log).
    pub fn open(
        mut dir: D,
        opts: DurableOptions,
    ) -> Result<(DurableStore<D>, Recovery), StorageError> {
        let where_ = dir.describe();
        let io = |what: &str, name: &str, e: std::io::Error| {
            StorageError(format!("{where_}/{name}: {what}: {e}"))
        };
        if opts.segment_bytes == 0 || opts.segment_bytes > DurableOptions::SEGMENT_BYTES_MAX {
            return Err(StorageError(format!(
                "segment_bytes {} out of range (1 to {})",
                opts.segment_bytes,
                DurableOptions::SEGMENT_BYTES_MAX
            )));
        }
        let names = dir.list().map_err(|e| io("listing", "", e))?;
        let mut seg_nums: Vec<u64> = Vec::new();
        let mut spares: Vec<u64> = Vec::new();
        for n in &names {
            if let Some(num) = parse_seg_name(n) {
                seg_nums.push(num);
            } else if let Some(num) = parse_spare_name(n) {
                spares.push(num);
            } else if n.starts_with("seg-") || n.starts_with("spare-") {
                return Err(StorageError(format!(
                    "{where_}/{n}: not a segment name this version writes (seg-<20 digits>.log)"
                )));
            }
        }
        seg_nums.sort_unstable();
        let mut rec = Recovery {
            segments: seg_nums.len(),
            log_start: 1,
            ..Recovery::default()
        };
        let mut promised = Ballot::ZERO;
        let mut log_start: Instance = 1;
        let mut locs: BTreeMap<Instance, Loc> = BTreeMap::new();
        let mut segments = BTreeMap::new();
        let last = seg_nums.last().copied();
        for &num in &seg_nums {
            let name = seg_name(num);
            let buf = dir.read(&name).map_err(|e| io("reading", &name, e))?;
            if buf.get(..4) == Some(&record::MAGIC_V1.to_le_bytes()[..]) {
                return Err(StorageError(format!(
                    "{where_}/{name}: a log of format 1, written by an earlier version of abcast; \
                     this version writes format 2 and does not read it. Move the directory away \
                     (the acceptor then starts empty, as a new or amnesic one)"
                )));
            }
            let mut off = 0usize;
            // The highest durable point this segment's markers state.
            let mut durable = 0u64;
            // The file was recycled: its earlier contents may follow the records.
            let mut recycled = false;
            loop {
                match record::frame_at(&buf, off, num) {
                    Framed::End => break,
                    Framed::Whole { body, next } => {
                        let r = Record::decode(Bytes::copy_from_slice(&buf[body.clone()]))
                            .map_err(|e| {
                                StorageError(format!(
                                    "{where_}/{name}: record at offset {off} has a good checksum but does not decode: {e}"
                                ))
                            })?;
                        rec.records += 1;
                        match r {
                            Record::Checkpoint {
                                promised: p,
                                log_start: s,
                                recycled: r,
                            } => {
                                promised = promised.max(p);
                                log_start = log_start.max(s);
                                recycled |= r;
                            }
                            Record::Promise(p) => promised = promised.max(p),
                            Record::Accept {
                                instance, decided, ..
                            } => {
                                let decided =
                                    decided || locs.get(&instance).is_some_and(|l| l.decided);
                                locs.insert(
                                    instance,
                                    Loc {
                                        seg: num,
                                        off: off as u64,
                                        len: (next - off) as u32,
                                        decided,
                                    },
                                );
                            }
                            Record::Decided(i) => {
                                if let Some(l) = locs.get_mut(&i) {
                                    l.decided = true;
                                }
                            }
                            Record::Trim { log_start: s } => log_start = log_start.max(s),
                            Record::Synced { upto } => durable = durable.max(upto),
                        }
                        off = next;
                    }
                    Framed::Bad(_) if buf[off..].iter().all(|&b| b == 0) => {
                        // Preallocated space the records never reached, or that unsynced
                        // writes did not reach before a crash. (A disk that lost synced
                        // bytes to the end of a file cannot be told from this, as with a
                        // torn tail: the markers that would say so were in those bytes.)
                        // Appends go to a new segment: give the reserved space back.
                        dir.truncate(&name, off as u64)
                            .map_err(|e| io("cutting the preallocated tail of", &name, e))?;
                        break;
                    }
                    Framed::Bad(_)
                        if recycled && (off as u64) >= records_after(&buf, off, durable, num).1 =>
                    {
                        // A recycled file: after its records come its earlier contents, which
                        // fail the checksum (another segment number). Above every durable
                        // point they cannot be told from a torn write, and both end the
                        // records: cut, as a torn tail would be. (Below one: corruption,
                        // refused by the arm after this one.)
                        dir.truncate(&name, off as u64)
                            .map_err(|e| io("cutting the old contents of recycled", &name, e))?;
                        rec.recycled_tails += 1;
                        break;
                    }
                    Framed::Bad(why) => {
                        if Some(num) != last {
                            return Err(StorageError(format!(
                                "{where_}/{name}: corrupt record at offset {off} ({why}; a later \
                                 segment follows): refusing to start, the log before its tail is damaged"
                            )));
                        }
                        // Above every durable point: the last write, garbled or cut short
                        // by the crash, is a torn tail. Below one: corruption.
                        let (after, durable) = records_after(&buf, off, durable, num);
                        if (off as u64) < durable {
                            let detail = match after {
                                Some(a) => format!("a good record follows at offset {a}"),
                                None => "nothing good follows".into(),
                            };
                            return Err(StorageError(format!(
                                "{where_}/{name}: corrupt record at offset {off} ({why}; {detail}; \
                                 the first {durable} bytes were durable): refusing to start, the \
                                 log before its tail is damaged"
                            )));
                        }
                        let why = match after {
                            Some(a) => format!(
                                "{why}; the whole records from offset {a} on were written with it, \
                                 after the last durable point ({durable} bytes)"
                            ),
                            None => why,
                        };
                        dir.truncate(&name, off as u64)
                            .map_err(|e| io("cutting the torn tail of", &name, e))?;
                        dir.sync(&name)
                            .map_err(|e| io("syncing after cutting", &name, e))?;
                        // What was written: the zeros at the end are preallocated space.
                        let written = buf.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
                        rec.torn_tail = Some(TornTail {
                            file: format!("{where_}/{name}"),
                            offset: off as u64,
                            bytes_cut: written.saturating_sub(off) as u64,
                            why,
                        });
                        break;
                    }
                }
            }
            segments.insert(num, off as u64);
        }
        // What the last segment holds may be only in the OS's cache: written by a process
        // that died before its fdatasync. The recovered state is acted on from now on (votes
        // reported in phase 1), so it must be durable first. Earlier segments were synced
        // before the next one was begun (`roll`).
        if opts.sync
            && let Some(num) = last
        {
            let name = seg_name(num);
            dir.sync(&name)
                .map_err(|e| io("syncing what was recovered from", &name, e))?;
        }
        let locs = locs.split_off(&log_start);
        let max_instance = locs.keys().next_back().copied().unwrap_or(0);
        rec.promised = promised;
        rec.log_start = log_start;
        rec.max_instance = max_instance;
        rec.instances = locs.len() as u64;
        // Spares from the last life: kept up to the bound (waiting for this open's directory
        // sync before reuse, see `spares_pending`), the rest removed.
        spares.sort_unstable();
        let extra = spares.len().saturating_sub(SPARES_MAX);
        for &n in &spares[..extra] {
            let name = spare_name(n);
            dir.remove(&name).map_err(|e| io("removing", &name, e))?;
        }
        let spares_pending: Vec<(u64, u64)> = spares[extra..]
            .iter()
            .map(|&n| (n, opts.segment_bytes))
            .collect();
        rec.spares = spares_pending.len();

        // The cache holds every undecided vote (an acceptor must answer phase 1 with them)
        // and the newest decided instances it has room for. It grows past its configured
        // size if the undecided ones alone span more (decided marks lost in a crash).
        let first_undecided = locs.iter().find(|(_, l)| !l.decided).map(|(&i, _)| i);
        let newest_from = max_instance.saturating_sub(opts.cache_instances as u64 - 1);
        let cache_from = first_undecided
            .map_or(newest_from, |u| u.min(newest_from))
            .max(log_start);
        let span = (max_instance + 1).saturating_sub(cache_from) as usize;
        let mut cache = MemoryStore::cache(opts.cache_instances.max(span).max(1), opts.cache_bytes);
        cache.trim(cache_from);
        cache.set_promised(promised);
        let mut store = DurableStore {
            dir,
            sync_writes: opts.sync,
            segment_bytes: opts.segment_bytes,
            cache,
            log_start,
            index: VecDeque::new(),
            segments,
            pending: Vec::new(),
            pending_bytes: 0,
            unsynced: false,
            dir_dirty: false,
            deletable: Vec::new(),
            durable: 0,
            marked: 0,
            failed: None,
            read_failed: std::cell::RefCell::new(None),
            appended_bytes: 0,
            recovered: rec.records > 0,
            syncs: 0,
            allocated: 0,
            in_flight: VecDeque::new(),
            spares: Vec::new(),
            spares_pending,
        };
        for (&i, &loc) in &locs {
            store.index_set(i, loc);
            if i < cache_from {
                continue;
            }
            let Some(Record::Accept { ballot, decree, .. }) = store.read_record(loc) else {
                let e = store.failed.take().unwrap_or_else(|| {
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
                    store.dir.describe(),
                    store.cache.bytes_held(),
                    opts.cache_bytes
                )));
            }
        }
        // Appends go to a new segment: the old ones stay as they were read.
        let next = store.segments.keys().next_back().map_or(1, |n| n + 1);
        store.begin_segment(next);
        store.sync()?;
        Ok((store, rec))
    }

    /// Group commits done (syncs that wrote something).
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// The segments on disk, oldest first (for tests and the trim benchmark).
    pub fn segment_numbers(&self) -> Vec<u64> {
        self.segments.keys().copied().collect()
    }

    /// The current segment's file name and the bytes of records written to it (where the
    /// next write goes; the file may be longer, preallocated). For tests that damage a log.
    pub fn write_end(&self) -> (String, u64) {
        let cur = self.current();
        (seg_name(cur), self.segments.get(&cur).copied().unwrap_or(0))
    }

    fn current(&self) -> u64 {
        self.segments.keys().next_back().copied().unwrap_or(0)
    }

    fn fail(&mut self, what: &str, name: &str, e: std::io::Error) {
        if self.failed.is_none() {
            self.failed = Some(StorageError(format!(
                "{}/{name}: {what}: {e}",
                self.dir.describe()
            )));
        }
    }

    fn index_set(&mut self, i: Instance, loc: Loc) {
        debug_assert!(i >= self.log_start, "index below the log start");
        let at = (i - self.log_start) as usize;
        if at >= self.index.len() {
            self.index.resize(at + 1, None);
        }
        self.index[at] = Some(loc);
    }

    fn index_get(&self, i: Instance) -> Option<Loc> {
        if i < self.log_start {
            return None;
        }
        self.index
            .get((i - self.log_start) as usize)
            .copied()
            .flatten()
    }

    /// Creates segment `n` and opens it with a checkpoint.
    fn begin_segment(&mut self, n: u64) {
        let name = seg_name(n);
        let recycled = match self.spares.pop() {
            Some((spare, _)) => {
                if let Err(e) = self.dir.rename(&spare_name(spare), &name) {
                    self.fail("recycling a spare file as", &name, e);
                    return;
                }
                true
            }
            None => {
                if let Err(e) = self.dir.create(&name) {
                    self.fail("creating", &name, e);
                    return;
                }
                false
            }
        };
        self.segments.insert(n, 0);
        self.dir_dirty = true;
        self.durable = 0;
        self.marked = 0;
        // Reserve the segment's space now (one metadata change per segment instead of one
        // per group commit); the checkpoint's sync makes the size durable with it.
        self.allocated = match self.dir.preallocate(&name, self.segment_bytes) {
            Ok(()) => self.segment_bytes,
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => 0,
            Err(e) => {
                self.fail("preallocating", &name, e);
                0
            }
        };
        let cp = Record::Checkpoint {
            promised: self.cache.promised(),
            log_start: self.log_start,
            recycled,
        };
        self.append(&cp);
    }

    /// Queues one record; returns where it will be. A write's first record follows a
    /// `Synced` marker when the segment's durable point moved since the last one.
    fn append(&mut self, r: &Record) -> Loc {
        let cur = self.current();
        let at = self.segments.get(&cur).copied().unwrap_or(0) + self.pending_bytes as u64;
        if at >= self.segment_bytes && !matches!(r, Record::Checkpoint { .. }) {
            self.roll();
            return self.append(r);
        }
        if self.pending.is_empty() && self.durable > self.marked {
            self.marked = self.durable;
            self.push(&Record::Synced { upto: self.durable });
        }
        self.push(r)
    }

    /// Queues one record at the end of the pending write.
    fn push(&mut self, r: &Record) -> Loc {
        let cur = self.current();
        let at = self.segments.get(&cur).copied().unwrap_or(0) + self.pending_bytes as u64;
        let (chunks, len) = r.encode(cur);
        self.pending.extend(chunks);
        self.pending_bytes += len;
        self.appended_bytes += len as u64;
        let loc = Loc {
            seg: cur,
            off: at,
            len: len as u32,
            decided: false,
        };
        if self.pending_bytes >= FLUSH_BYTES {
            self.write_pending();
        }
        loc
    }

    fn write_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let cur = self.current();
        let name = seg_name(cur);
        let slices: Vec<&[u8]> = self.pending.iter().map(|c| c.as_ref()).collect();
        let at = self.segments.get(&cur).copied().unwrap_or(0);
        match self.dir.write_at(&name, at, &slices) {
            Ok(()) => {
                if let Some(len) = self.segments.get_mut(&cur) {
                    *len += self.pending_bytes as u64;
                    if !self.sync_writes {
                        // Safe from a process crash, all this store promises.
                        self.durable = *len;
                    }
                }
                self.unsynced = true;
            }
            Err(e) => self.fail("appending to", &name, e),
        }
        self.pending.clear();
        self.pending_bytes = 0;
    }

    /// Deletes old segments whose trim record is durable, keeping their files as spares
    /// (as many as are deleted here, within `SPARES_MIN` and `SPARES_MAX`); the names
    /// change is made durable by the next sync.
    fn delete_segments(&mut self, segs: Vec<u64>) {
        let spares_max = segs.len().clamp(SPARES_MIN, SPARES_MAX);
        for s in segs {
            let name = seg_name(s);
            let bytes = self.segments.get(&s).copied().unwrap_or(0);
            let keep = self.spares.len() + self.spares_pending.len() < spares_max;
            let r = if keep {
                self.dir.rename(&name, &spare_name(s))
            } else {
                self.dir.remove(&name)
            };
            match r {
                Ok(()) => {
                    self.segments.remove(&s);
                    self.dir_dirty = true;
                    if keep {
                        if self.sync_writes {
                            self.spares_pending.push((s, bytes));
                        } else {
                            // Nothing survives a machine crash without sync anyway.
                            self.spares.push((s, bytes));
                        }
                    }
                }
                Err(e) => self.fail(
                    if keep {
                        "keeping as a spare"
                    } else {
                        "removing"
                    },
                    &name,
                    e,
                ),
            }
        }
    }

    /// Closes the current segment (durable first, with `sync`) and begins the next.
    fn roll(&mut self) {
        self.write_pending();
        let cur = self.current();
        if self.sync_writes && self.unsynced {
            let name = seg_name(cur);
            if let Err(e) = self.dir.sync(&name) {
                self.fail("syncing", &name, e);
            }
            self.unsynced = false;
        }
        self.begin_segment(cur + 1);
    }

    /// Reads one record back from disk.
    fn read_record(&mut self, loc: Loc) -> Option<Record> {
        match self.read_record_ro(loc) {
            Ok(r) => Some(r),
            Err(e) => {
                if self.failed.is_none() {
                    self.failed = Some(e);
                }
                None
            }
        }
    }

    /// Whether the record at `loc` has been handed to the directory (it may still be
    /// pending, in this group's write).
    fn written(&self, loc: Loc) -> bool {
        loc.seg != self.current()
            || loc.off + u64::from(loc.len) <= self.segments.get(&loc.seg).copied().unwrap_or(0)
    }

    fn read_record_ro(&self, loc: Loc) -> Result<Record, StorageError> {
        let name = seg_name(loc.seg);
        let mut buf = vec![0u8; loc.len as usize];
        if !self.written(loc) {
            // Still pending in this group's write (`range` stops before such records): be
            // safe and say so clearly.
            return Err(StorageError(format!(
                "{}/{name}: record at offset {} not written yet",
                self.dir.describe(),
                loc.off
            )));
        }
        self.dir.read_at(&name, loc.off, &mut buf).map_err(|e| {
            StorageError(format!(
                "{}/{name}: reading offset {}: {e}",
                self.dir.describe(),
                loc.off
            ))
        })?;
        let Framed::Whole { body, .. } = record::frame_at(&buf, 0, loc.seg) else {
            return Err(StorageError(format!(
                "{}/{name}: record at offset {} is damaged on disk",
                self.dir.describe(),
                loc.off
            )));
        };
        Record::decode(Bytes::copy_from_slice(&buf[body])).map_err(|e| {
            StorageError(format!(
                "{}/{name}: record at offset {}: {e}",
                self.dir.describe(),
                loc.off
            ))
        })
    }

    /// Copies the few live records of old segments forward and marks the segments that
    /// then hold nothing live for deletion (after the trim record is written).
    fn collect_segments(&mut self) {
        let cur = self.current();
        // Per old segment: its live instances and their bytes.
        let mut live: BTreeMap<u64, (Vec<Instance>, u64)> = BTreeMap::new();
        for (k, l) in self.index.iter().enumerate() {
            if let Some(l) = l
                && l.seg != cur
            {
                let e = live.entry(l.seg).or_default();
                e.0.push(self.log_start + k as u64);
                e.1 += u64::from(l.len);
            }
        }
        // Segments already doomed (waiting for the sync of the trim that freed them, maybe
        // in flight) are not taken again: a second `remove` of one failed the store.
        let doomed = |s: &u64| {
            self.deletable.contains(s) || self.in_flight.iter().any(|f| f.delete.contains(s))
        };
        let old: Vec<u64> = self
            .segments
            .keys()
            .copied()
            .filter(|s| *s != cur && !doomed(s))
            .collect();
        for s in old {
            let (held, held_bytes) = live
                .get(&s)
                .map_or((&[][..], 0), |(v, b)| (v.as_slice(), *b));
            // Only stragglers: a segment still mostly live (recent instances above the trim
            // point) waits until the trim passes it. Copying such a segment forward at every
            // trim rewrote most of the log again and again (bench storage measured 1.7 bytes
            // appended per byte delivered before this bound).
            if held.len() > RELOCATE_MAX || held_bytes > self.segment_bytes / RELOCATE_FRACTION {
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
                }) = self.read_record(loc)
                else {
                    return;
                };
                let r = Record::Accept {
                    instance,
                    ballot,
                    decided: loc.decided,
                    decree,
                };
                let mut moved = self.append(&r);
                moved.decided = loc.decided;
                self.index_set(i, moved);
            }
            self.deletable.push(s);
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
        if self.failed.is_some() || instance < self.log_start {
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
            let mut loc = self.append(&r);
            loc.decided = decided;
            self.index_set(instance, loc);
            // Written through at once (not synced): `range` reads it back from the file.
            self.write_pending();
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
        let mut loc = self.append(&r);
        loc.decided = decided;
        self.index_set(instance, loc);
        true
    }
    /// In the cache only: see [`AcceptorStore::put_learned`]. Below the cache it is not
    /// kept at all (the voters have it on disk). If the cache held an undecided vote of
    /// this acceptor there, the log keeps that vote, which stays safe: it is of a lower
    /// ballot than the decision's quorum, or for the same decree.
    fn put_learned(&mut self, instance: Instance, accepted: Accepted) -> bool {
        debug_assert!(accepted.decided, "put_learned takes decisions only");
        if self.failed.is_some() || instance < self.cache.log_start().max(self.log_start) {
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
        self.log_start
    }
    fn range(&self, from: Instance, to: Instance) -> Vec<(Instance, Accepted)> {
        let from = from.max(self.log_start);
        let cache_start = self.cache.log_start();
        let mut out = Vec::new();
        let mut i = from;
        // Older instances from disk. A read error ends the answer early; the asker retries
        // elsewhere, and the next sync reports a damaged log.
        while i < to.min(cache_start) {
            if let Some(loc) = self.index_get(i) {
                if !self.written(loc) {
                    // Appended in this group (a vote for an instance below the cache
                    // window) and not written yet: the answer ends here, the asker asks
                    // again.
                    return out;
                }
                let e = match self.read_record_ro(loc) {
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
                        self.dir.describe(),
                        seg_name(loc.seg),
                        loc.off,
                        other.kind_name()
                    )),
                    Err(e) => e,
                };
                self.read_failed.borrow_mut().get_or_insert(e);
                return out;
            }
            i += 1;
        }
        out.extend(self.cache.range(i.max(cache_start), to));
        out
    }
    fn sync(&mut self) -> Result<(), StorageError> {
        // One code path: the job, if any, runs here and now.
        if let Some(job) = self.begin_sync()? {
            let r = job.run();
            self.end_sync(&r);
        }
        match &self.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }
    /// Writes what is pending and, with `sync = true`, returns the fdatasync of the current
    /// segment (and the directory fsync, if names changed) as a job; where the directory
    /// cannot hand out steps, syncs in place. Segments freed by a trim are deleted once the
    /// trim record is durable: in place, or at `end_sync`.
    fn begin_sync(&mut self) -> Result<Option<super::SyncJob>, StorageError> {
        if let Some(e) = self.read_failed.get_mut().take()
            && self.failed.is_none()
        {
            self.failed = Some(e);
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let wrote = !self.pending.is_empty();
        self.write_pending();
        let mut job = super::SyncJob::default();
        let cur = self.current();
        let len = self.segments.get(&cur).copied().unwrap_or(0);
        let mut synced_here = false;
        if self.sync_writes && self.unsynced {
            let name = seg_name(cur);
            match self.dir.sync_step(Some(&name)) {
                Ok(Some(step)) => {
                    job.push(format!("{}/{name}: syncing", self.dir.describe()), step)
                }
                Ok(None) => match self.dir.sync(&name) {
                    Ok(()) => synced_here = true,
                    Err(e) => self.fail("syncing", &name, e),
                },
                Err(e) => self.fail("syncing", &name, e),
            }
            self.unsynced = false;
        }
        // Spares renamed before this directory sync may become segments once it is done.
        let promote = if self.sync_writes && self.dir_dirty {
            std::mem::take(&mut self.spares_pending)
        } else {
            Vec::new()
        };
        if self.sync_writes && self.dir_dirty {
            match self.dir.sync_step(None) {
                Ok(Some(step)) => job.push(
                    format!("{}: syncing the directory", self.dir.describe()),
                    step,
                ),
                Ok(None) => {
                    if let Err(e) = self.dir.sync_dir() {
                        self.fail("syncing the directory", "", e);
                    }
                }
                Err(e) => self.fail("syncing the directory", "", e),
            }
        }
        self.dir_dirty = false;
        if wrote {
            self.syncs += 1;
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let delete = std::mem::take(&mut self.deletable);
        if job.is_empty() {
            if synced_here || !self.sync_writes {
                self.durable = self.durable.max(len);
            }
            self.spares.extend(promote);
            self.delete_segments(delete);
            return match &self.failed {
                Some(e) => Err(e.clone()),
                None => Ok(None),
            };
        }
        self.in_flight.push_back(InFlight {
            seg: cur,
            len,
            delete,
            promote,
        });
        Ok(Some(job))
    }
    fn end_sync(&mut self, result: &Result<(), StorageError>) {
        // Nothing in flight: this store's `begin_sync` synced in place.
        let Some(f) = self.in_flight.pop_front() else {
            return;
        };
        match result {
            Err(e) => {
                if self.failed.is_none() {
                    self.failed = Some(e.clone());
                }
            }
            Ok(()) => {
                // The segment may have rolled meanwhile (`roll` syncs it in place).
                if f.seg == self.current() {
                    self.durable = self.durable.max(f.len);
                }
                self.spares.extend(f.promote);
                self.delete_segments(f.delete);
            }
        }
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
        if below <= self.log_start {
            return;
        }
        self.cache.trim(below);
        let drop = ((below - self.log_start) as usize).min(self.index.len());
        self.index.drain(..drop);
        self.log_start = below;
        self.append(&Record::Trim { log_start: below });
        self.collect_segments();
    }
    fn log_bytes(&self) -> u64 {
        // On disk: the current segment takes its preallocated size.
        let written =
            self.segments.get(&self.current()).copied().unwrap_or(0) + self.pending_bytes as u64;
        let spares: u64 = self
            .spares
            .iter()
            .chain(&self.spares_pending)
            .map(|s| s.1)
            .sum();
        self.segments.values().sum::<u64>()
            + self.pending_bytes as u64
            + self.allocated.saturating_sub(written)
            + spares
    }
    fn appended_bytes(&self) -> u64 {
        self.appended_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{MemDir, Tear};
    use crate::types::{Batch, Decree, NodeId, ValueId};

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
            // A vote written to the OS but not synced, then the process or the machine dies.
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
            // The unsynced vote survives a process crash; half its write survives the
            // machine crash, and a torn record is cut.
            assert_eq!(s.range(591, 700).len(), if crash { 10 } else { 11 });
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
            dir.sizes().is_empty(),
            "no directory sync: the files are gone"
        );
        let (s, rec) = open(&dir, opts(false));
        assert_eq!(rec.records, 0);
        assert!(!s.is_durable());
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
        for i in 1..=5 {
            assert!(s.put(i, vote(i, false)));
        }
        s.sync().unwrap();
        assert_eq!(dir.syncs(), 0, "sync = false never calls fdatasync");
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
        // The process dies between the write and the fdatasync.
        s.write_pending();
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
