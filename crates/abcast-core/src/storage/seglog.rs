//! The segmented durable log under both durable stores: the acceptor store
//! ([`super::DurableStore`], records of `record.rs`, magic `ABL3`) and the log store
//! ([`super::DurableLogStore`], records of `log_record.rs`, magic `ABG2`). It knows
//! segment files, spares, framing, group commit, durable points and recovery; what the
//! records mean is the record part's business (the [`LogRecord`] trait).
//!
//! * **Framing.** `magic (u32 le) | body_len (u32 le) | crc32c (u32 le) | body`; the crc
//!   covers the segment number (u64 le, not stored), body_len's four bytes and the body, so a
//!   record is valid only in the segment it was written for (a recycled file's earlier
//!   records fail it).
//! * **Write path.** [`SegLog::append`] queues a framed record (payload chunks shared, not
//!   copied); [`SegLog::begin_sync`] writes every queued record in one vectored write and
//!   returns the fdatasync as a [`SyncJob`] (`sync = true`); [`SegLog::end_sync`] takes its
//!   result. One group commit per driver batch.
//! * **Group commits are atomic.** Everything appended between two syncs is one group;
//!   the sync ends it with a commit marker ([`LogRecord::commit`], stating how many of the
//!   group's records are in its segment), queued last in the same vectored write: 17 bytes
//!   per commit (header 12, kind 1, count 4), no syscall and no fsync of its own. Parts of
//!   a group written out earlier (past `FLUSH_BYTES`, by a roll, or written through for a
//!   reader) carry no marker: the marker goes at the real commit only. A group may span a
//!   segment roll: the marker in the later segment ends the records of both. With
//!   `sync = false` the marker still ends each group, so a crash keeps whole groups only.
//! * **Segments.** `seg-<n>.log`, rolled at `segment_bytes` ([`SegLog::roll`]); each opens
//!   with a record of the record part's choosing (its checkpoint, which must say whether
//!   the file is recycled: [`LogRecord::opens_recycled`]), so that whole old segments can be
//!   deleted ([`SegLog::delete_after_sync`]) once the record that frees them is durable.
//!   Deleted files are kept as spares and written over as new segments. A new segment is
//!   preallocated to `segment_bytes` and written at the log's own offsets: a write changes
//!   no file size, and an fdatasync has no metadata to commit.
//! * **Durable points.** The first record of a write, once earlier writes of the segment
//!   are durable, is a `Synced { upto }` marker ([`LogRecord::synced`]): a crash damages
//!   only what was written after the last durable point.
//! * **Recovery** ([`SegLog::open`]): replays every segment in order and hands each whole
//!   record to the record part, a group at a time, at its commit marker. Zeros to the end
//!   of the last segment are preallocated space (cut off, durably). A closed segment ends
//!   exactly at its records (`roll` rolls only past the preallocated size, cuts a recycled
//!   file's older contents and, with `sync = true`, syncs it before the next segment
//!   exists), so zeros at the end of a segment that a later one follows are lost bytes:
//!   `open` refuses, since applying the rest would apply part of a group (its marker, in
//!   the next segment, counts only that segment's records) and dropping it would forget
//!   synced records while claiming to remember them. A bad record in the last segment above
//!   every durable point is a torn tail (cut, reported in [`TornTail`]); below a durable
//!   point, or in an earlier segment, it is corruption: `open` refuses, naming the file and
//!   the offset. Records after the last commit marker are a torn group (a crash kept only
//!   a prefix of its write): none of them is applied, and they are cut, in every segment
//!   the group reached, and reported as the torn tail. Nothing in that group had been
//!   acknowledged: acknowledgements wait for its sync, which follows its marker.

use super::{LogDir, StorageError, SyncJob};
use crate::error::DecodeError;
use crate::mutation::{self, Mutation, Slot};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::marker::PhantomData;

pub const HEADER_BYTES: usize = 12;
/// No record is larger: a batch is bounded far below this by the proposer's settings.
pub const BODY_MAX_BYTES: usize = 256 << 20;
/// Pending bytes written out (without fdatasync) before `sync` is called, to bound memory.
const FLUSH_BYTES: usize = 8 << 20;

/// Spare segment files kept: as many as the trim freed, at least `SPARES_MIN`, at most
/// `SPARES_MAX` (each `segment_bytes` of disk). Why as many as it freed: the log rolls
/// about as many segments before the next trim as it had since the last one, and each a
/// spare cannot cover is a fresh fallocated file, which the disk writes far slower (see
/// `spares`). With 4 at most, a voter under full load at 8 KiB trimmed about ten segments
/// a second and wrote six of the next ten fresh: `abcast bench storage`, durable with
/// `sync = true`, went from 5.3 to 6.5 Gbit/s with 16 (single runs, 2026-11-23). The disk
/// this takes is at most what the trimmed segments had, so it is bounded by the log's own
/// recent size.
pub(crate) const SPARES_MIN: usize = 4;
pub(crate) const SPARES_MAX: usize = 64;

/// What a segmented log needs to know of the records written on it.
pub trait LogRecord: Sized {
    /// The magic that opens every record of this format.
    const MAGIC: u32;
    /// The framed record for segment `seg`, as chunks (large payloads shared, not copied),
    /// and its length (see [`frame`]).
    fn encode(&self, seg: u64) -> (Vec<Bytes>, usize);
    /// Decodes a body that passed its checksum.
    fn decode(body: Bytes) -> Result<Self, DecodeError>;
    /// The durable-point marker.
    fn synced(upto: u64) -> Self;
    /// `Some(upto)` for a durable-point marker.
    fn synced_upto(&self) -> Option<u64>;
    /// A segment opener that says its file is recycled (earlier contents may follow).
    fn opens_recycled(&self) -> bool;
    /// The commit marker that ends a group commit of `records` records (itself not
    /// counted; markers and openers of the group are).
    fn commit(records: u32) -> Self;
    /// `Some(records)` for a commit marker.
    fn commit_records(&self) -> Option<u32>;
    /// Why a record header with the magic `word` is bad, for an older format's magic.
    fn old_magic(word: u32) -> Option<&'static str> {
        let _ = word;
        None
    }
    /// Why a whole segment is refused (a log of an older format), from its first bytes.
    fn refuse_file(head: &[u8]) -> Option<String> {
        let _ = head;
        None
    }
}

/// Frames a body (chunks, in order) for segment `seg`: the header chunk, then the body's.
pub fn frame(body: Vec<Bytes>, seg: u64, magic: u32) -> (Vec<Bytes>, usize) {
    let body_len: usize = body.iter().map(|c| c.len()).sum();
    debug_assert!(body_len <= BODY_MAX_BYTES, "record body over its bound");
    let len_le = (body_len as u32).to_le_bytes();
    let mut crc = crc32c::crc32c_append(crc32c::crc32c(&seg.to_le_bytes()), &len_le);
    for c in &body {
        crc = crc32c::crc32c_append(crc, c);
    }
    let mut head = Vec::with_capacity(HEADER_BYTES);
    head.extend_from_slice(&magic.to_le_bytes());
    head.extend_from_slice(&len_le);
    head.extend_from_slice(&crc.to_le_bytes());
    let mut chunks = Vec::with_capacity(body.len() + 1);
    chunks.push(Bytes::from(head));
    chunks.extend(body);
    (chunks, HEADER_BYTES + body_len)
}

/// What lies at one offset of a segment.
#[derive(Debug, PartialEq, Eq)]
pub enum Framed {
    /// A whole record with a good checksum: its body and where the next record starts.
    Whole {
        body: std::ops::Range<usize>,
        next: usize,
    },
    /// The end of the file, exactly at a record boundary.
    End,
    /// Not a whole good record (torn, zero-filled or corrupt), and why.
    Bad(String),
}

/// Reads the framing of the record at `off` in `buf`, a file of segment `seg`, checking
/// magic, length and checksum.
pub fn frame_at<R: LogRecord>(buf: &[u8], off: usize, seg: u64) -> Framed {
    if off == buf.len() {
        return Framed::End;
    }
    let Some(head) = buf.get(off..off + HEADER_BYTES) else {
        return Framed::Bad(format!(
            "{} bytes left, less than a record header",
            buf.len().saturating_sub(off)
        ));
    };
    let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    if let Some(why) = R::old_magic(word(0)) {
        return Framed::Bad(why.into());
    }
    if word(0) != R::MAGIC {
        return Framed::Bad(format!("no record magic (found {:#010x})", word(0)));
    }
    let len = word(4) as usize;
    if len == 0 || len > BODY_MAX_BYTES {
        return Framed::Bad(format!("record length {len} out of range"));
    }
    let start = off + HEADER_BYTES;
    let Some(body) = buf.get(start..start + len) else {
        return Framed::Bad(format!(
            "record of {len} bytes, only {} left",
            buf.len() - start
        ));
    };
    let salted = crc32c::crc32c_append(crc32c::crc32c(&seg.to_le_bytes()), &head[4..8]);
    let crc = crc32c::crc32c_append(salted, body);
    if crc != word(8) {
        return Framed::Bad("record checksum mismatch".into());
    }
    Framed::Whole {
        body: start..start + len,
        next: start + len,
    }
}

/// Whether a whole good record starts anywhere after `off`: tells a torn tail (nothing
/// after) from corruption in the middle of the log (something good after).
pub fn good_record_after<R: LogRecord>(buf: &[u8], off: usize, seg: u64) -> Option<usize> {
    let magic = R::MAGIC.to_le_bytes();
    let mut at = off + 1;
    while at + HEADER_BYTES <= buf.len() {
        let rest = buf.get(at..)?;
        let found = rest.windows(4).position(|w| w == magic)?;
        at += found;
        if matches!(frame_at::<R>(buf, at, seg), Framed::Whole { .. }) {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// After a bad record at `off`: the first whole good record after it, if any, and the
/// highest durable point stated by `durable` and by the `Synced` markers among the whole
/// records after it.
fn records_after<R: LogRecord>(
    buf: &[u8],
    off: usize,
    mut durable: u64,
    seg: u64,
) -> (Option<usize>, u64) {
    let first = good_record_after::<R>(buf, off, seg);
    let mut at = first;
    while let Some(a) = at {
        match frame_at::<R>(buf, a, seg) {
            Framed::Whole { body, next } => {
                if let Some(upto) = R::decode(Bytes::copy_from_slice(&buf[body]))
                    .ok()
                    .and_then(|r| r.synced_upto())
                {
                    durable = durable.max(upto);
                }
                at = Some(next);
            }
            Framed::End => break,
            Framed::Bad(_) => at = good_record_after::<R>(buf, a, seg),
        }
    }
    (first, durable)
}

/// Whether a log found in `dir` (`found`) must be discarded as written without fdatasync
/// by an earlier boot, and why (see [`SegRecovery::unsynced_lost`]): its
/// [`UNSYNCED_BOOT_FILE`] names another boot than this one; or it has none, yet is opened
/// with `sync = false` on a machine that tells its boots (a log written by a version without
/// the file, or one whose file a crash took: it cannot be told from one that lost data).
/// Where the machine does not tell its boots, nothing can be told: the log is trusted, as
/// `sync = false` always was (docs/design/amnesia-detection.md).
fn check_boot<D: LogDir>(
    dir: &mut D,
    sync: bool,
    found: bool,
) -> Result<Option<String>, StorageError> {
    let where_ = dir.describe();
    let now = dir
        .boot_id()
        .map_err(|e| StorageError(format!("{where_}: reading the machine's boot id: {e}")))?;
    let mark = match dir.read(UNSYNCED_BOOT_FILE) {
        Ok(b) => Some(String::from_utf8_lossy(&b).trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            return Err(StorageError(format!(
                "{where_}/{UNSYNCED_BOOT_FILE}: reading: {e}"
            )));
        }
    };
    if !found {
        return Ok(None);
    }
    Ok(match (mark, now) {
        (Some(m), Some(n)) if m == n => None,
        (Some(m), Some(n)) => Some(format!(
            "written without fdatasync on boot {m}, opened on boot {n}: the machine crashed or \
             rebooted since, and may have kept any part of it"
        )),
        (Some(m), None) => Some(format!(
            "written without fdatasync on boot {m}, and this machine does not tell its boot"
        )),
        (None, Some(_)) if !sync => Some(format!(
            "opened with sync = false and no {UNSYNCED_BOOT_FILE} file: it cannot be told \
             from a log a machine crash took part of"
        )),
        (None, _) => None,
    })
}

/// Writes (with `sync = false`, durably) or removes (with `sync = true`, once the log is
/// synced: `open` syncs the last segment, and the earlier ones were synced at their roll
/// with `sync = true` or are synced here) the [`UNSYNCED_BOOT_FILE`].
fn mark_boot<D: LogDir>(dir: &mut D, sync: bool) -> Result<(), StorageError> {
    let where_ = dir.describe();
    let io = |what: &str, e: std::io::Error| {
        StorageError(format!("{where_}/{UNSYNCED_BOOT_FILE}: {what}: {e}"))
    };
    let now = dir
        .boot_id()
        .map_err(|e| io("reading the machine's boot id", e))?;
    let mark = match dir.read(UNSYNCED_BOOT_FILE) {
        Ok(b) => Some(String::from_utf8_lossy(&b).trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("reading", e)),
    };
    if sync {
        if mark.is_some() {
            // Written without fdatasync earlier in this boot: make every segment durable
            // before the file that says it is not goes.
            let names = dir.list().map_err(|e| io("listing", e))?;
            for n in names.iter().filter(|n| parse_numbered(n, "seg-").is_some()) {
                dir.sync(n).map_err(|e| io(&format!("syncing {n}"), e))?;
            }
            dir.remove(UNSYNCED_BOOT_FILE)
                .map_err(|e| io("removing", e))?;
            dir.sync_dir().map_err(|e| io("syncing the directory", e))?;
        }
        return Ok(());
    }
    let Some(now) = now else {
        return Ok(());
    };
    if mark.as_deref() == Some(now.as_str()) {
        return Ok(());
    }
    let tmp = format!("{UNSYNCED_BOOT_FILE}.tmp");
    match dir.remove(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("removing the temporary file", e)),
    }
    dir.create(&tmp).map_err(|e| io("creating", e))?;
    dir.write_at(&tmp, 0, &[now.as_bytes()])
        .map_err(|e| io("writing", e))?;
    dir.sync(&tmp).map_err(|e| io("syncing", e))?;
    if mark.is_some() {
        dir.remove(UNSYNCED_BOOT_FILE)
            .map_err(|e| io("replacing", e))?;
    }
    dir.rename(&tmp, UNSYNCED_BOOT_FILE)
        .map_err(|e| io("renaming", e))?;
    dir.sync_dir().map_err(|e| io("syncing the directory", e))
}

pub(crate) fn seg_name(n: u64) -> String {
    format!("seg-{n:020}.log")
}

pub(crate) fn spare_name(n: u64) -> String {
    format!("spare-{n:020}.log")
}

fn parse_numbered(name: &str, prefix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Where a whole record is: its segment, offset and framed length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    pub seg: u64,
    pub off: u64,
    pub len: u32,
}

/// A torn tail found and cut at start-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    pub file: String,
    pub offset: u64,
    pub bytes_cut: u64,
    pub why: String,
}

/// What [`SegLog::open`] found, below the records' meaning.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegRecovery {
    pub segments: usize,
    /// Whole records replayed (markers and checkpoints included).
    pub records: u64,
    pub torn_tail: Option<TornTail>,
    /// Segments whose recycled file's earlier contents were cut after their records.
    pub recycled_tails: u64,
    /// Spare segment files found, kept for reuse.
    pub spares: usize,
    /// The log was written without fdatasync by an earlier boot of the machine (or cannot
    /// tell it was not) and was discarded, and why: a machine crash may have kept any part
    /// of it (directory entries and a prefix of the data, on ext4 and xfs), so nothing in
    /// it can be taken as remembered. The store opens empty, and so not durable: the
    /// acceptor restarts amnesic. Issue 33, suspect 2.
    pub unsynced_lost: Option<String>,
    /// The log found was written by a life that started without its state (an empty
    /// directory: a wiped one, or a log discarded as above) and was not repaired before it
    /// ended ([`UNREPAIRED_FILE`]): what it holds is not all this node promised or voted,
    /// so the store reports itself not durable and the protocol restarts amnesic again.
    pub unrepaired: bool,
}

/// The file that says the log holds the state of a life that started without its state
/// and was not yet repaired (or, on a first start, did not yet say its empty state is
/// whole). Created, durably, whenever a log opens on an empty directory, before its first
/// segment; removed, durably, at the first sync after the protocol said its state is whole
/// ([`SegLog::mark_whole`]: started not amnesic, or repaired). A restart that finds it
/// is amnesic again. Without it, a node whose directory was wiped restarted amnesic,
/// wrote a new log, crashed before its repair and restarted *not* amnesic on that log,
/// which lacked what its earlier lives promised and acked: a Raft leader then overwrote a
/// committed entry (simulator seed 186 of Raft's power_loss mix, `wiped_dir`; issue 33,
/// suspect 2).
pub const UNREPAIRED_FILE: &str = "unrepaired";

/// The file that says a log holds bytes written without fdatasync, and on which boot of
/// the machine ([`LogDir::boot_id`]): written, synced, when a log with `sync = false` opens.
pub const UNSYNCED_BOOT_FILE: &str = "unsynced-boot";

/// The options of the segmented log.
#[derive(Clone, Copy, Debug)]
pub struct SegOptions {
    /// fdatasync in every sync (survives a machine crash) or only write (a process crash).
    pub sync: bool,
    /// A segment is closed and a new one begun past this size.
    pub segment_bytes: u64,
    /// A deliberately broken variant (the `mutations` feature only;
    /// `Mutation::SegLogZeroTailInEarlierSegment`).
    pub mutation: Slot,
}

/// Slots keyed by a dense `u64` (instance, log index) from a movable start: the stores'
/// in-memory index of record locations.
#[derive(Clone, Debug)]
pub struct Index<L: Copy> {
    start: u64,
    slots: VecDeque<Option<L>>,
}

impl<L: Copy> Index<L> {
    pub fn new(start: u64) -> Index<L> {
        Index {
            start,
            slots: VecDeque::new(),
        }
    }
    /// The lowest key held (every key below it was trimmed).
    pub fn start(&self) -> u64 {
        self.start
    }
    /// One past the highest slot (filled or not).
    pub fn end(&self) -> u64 {
        self.start + self.slots.len() as u64
    }
    pub fn get(&self, i: u64) -> Option<L> {
        if i < self.start {
            return None;
        }
        self.slots.get((i - self.start) as usize).copied().flatten()
    }
    /// Sets the slot of `i`; `false` (nothing set) below the start.
    pub fn set(&mut self, i: u64, l: L) -> bool {
        if i < self.start {
            return false;
        }
        let at = (i - self.start) as usize;
        if at >= self.slots.len() {
            self.slots.resize(at + 1, None);
        }
        self.slots[at] = Some(l);
        true
    }
    /// Forgets every key below `below` (the start moves there if higher).
    pub fn trim(&mut self, below: u64) {
        if below <= self.start {
            return;
        }
        let drop = ((below - self.start) as usize).min(self.slots.len());
        self.slots.drain(..drop);
        self.start = below;
    }
    /// Forgets every key at or above `from`.
    pub fn truncate(&mut self, from: u64) {
        let keep = from.saturating_sub(self.start) as usize;
        self.slots.truncate(keep);
    }
    /// The filled slots, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, L)> + '_ {
        let start = self.start;
        self.slots
            .iter()
            .enumerate()
            .filter_map(move |(k, l)| l.map(|l| (start + k as u64, l)))
    }
}

#[derive(Debug)]
struct InFlight {
    seg: u64,
    len: u64,
    delete: Vec<u64>,
    /// Spares whose renames this job's directory sync makes durable.
    promote: Vec<(u64, u64)>,
    /// The job makes durable what the protocol held when it said its state is whole
    /// ([`SegLog::mark_whole`]): the [`UNREPAIRED_FILE`] goes once it is done.
    whole: bool,
}

/// The segmented log: segments, spares, group commit, durable points. `R` is the record
/// format written on it.
pub struct SegLog<D: LogDir, R: LogRecord> {
    dir: D,
    sync_writes: bool,
    segment_bytes: u64,
    /// Segment number → bytes written to it. The last is the one appended to.
    segments: BTreeMap<u64, u64>,
    pending: Vec<Bytes>,
    pending_bytes: usize,
    unsynced: bool,
    dir_dirty: bool,
    /// Old segments to delete once the record that frees them is written.
    deletable: Vec<u64>,
    /// Bytes of the current segment that are durable (fdatasync'd; with `sync = false`,
    /// written), and the most a `Synced` marker in it has stated.
    durable: u64,
    marked: u64,
    /// A group commit is under way: records were queued since the last commit marker
    /// (written out or not), and the next sync ends it with one.
    group_open: bool,
    /// The group's records in the current segment, which its marker states (a group that
    /// rolled may have begun in a segment deleted by the time the log is read again).
    group_records: u32,
    failed: Option<StorageError>,
    /// A record a reader (which cannot fail) could not read back: the next sync reports
    /// it, and the log fails, as `open` would refuse the damaged log.
    read_failed: std::cell::RefCell<Option<StorageError>>,
    appended_bytes: u64,
    syncs: u64,
    /// The current segment's file size by preallocation (0: not preallocated).
    allocated: u64,
    /// The current segment is a recycled spare: its file may hold older contents after
    /// the records, which `roll` cuts off.
    recycled: bool,
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
    /// The [`UNREPAIRED_FILE`] is on disk: a restart now would be amnesic.
    unrepaired: bool,
    /// The protocol said its state is whole ([`SegLog::mark_whole`]); the next sync's
    /// completion removes the file.
    whole_wanted: bool,
    _records: PhantomData<fn() -> R>,
}

impl<D: LogDir, R: LogRecord> SegLog<D, R> {
    /// Opens the log in `dir` and hands every whole record, in order, to `apply` with its
    /// position (an empty directory starts a new log). The caller then begins a segment
    /// ([`SegLog::begin_segment`]) and writes its opener: appends never go to a segment
    /// that was read.
    pub fn open(
        mut dir: D,
        opts: SegOptions,
        max_segment_bytes: u64,
        mut apply: impl FnMut(Pos, R) -> Result<(), StorageError>,
    ) -> Result<(SegLog<D, R>, SegRecovery), StorageError> {
        let where_ = dir.describe();
        let io = |what: &str, name: &str, e: std::io::Error| {
            StorageError(format!("{where_}/{name}: {what}: {e}"))
        };
        if opts.segment_bytes == 0 || opts.segment_bytes > max_segment_bytes {
            return Err(StorageError(format!(
                "segment_bytes {} out of range (1 to {max_segment_bytes})",
                opts.segment_bytes,
            )));
        }
        let names = dir.list().map_err(|e| io("listing", "", e))?;
        let mut seg_nums: Vec<u64> = Vec::new();
        let mut spares: Vec<u64> = Vec::new();
        for n in &names {
            if let Some(num) = parse_numbered(n, "seg-") {
                seg_nums.push(num);
            } else if let Some(num) = parse_numbered(n, "spare-") {
                spares.push(num);
            } else if n.starts_with("seg-") || n.starts_with("spare-") {
                return Err(StorageError(format!(
                    "{where_}/{n}: not a segment name this version writes (seg-<20 digits>.log)"
                )));
            }
        }
        seg_nums.sort_unstable();
        let unsynced_lost = check_boot(
            &mut dir,
            opts.sync,
            !seg_nums.is_empty() || !spares.is_empty(),
        )?;
        if unsynced_lost.is_some() {
            for n in &names {
                if parse_numbered(n, "seg-").is_some() || parse_numbered(n, "spare-").is_some() {
                    dir.remove(n).map_err(|e| io("discarding", n, e))?;
                }
            }
            dir.sync_dir()
                .map_err(|e| io("syncing the directory after discarding the log", "", e))?;
            seg_nums.clear();
            spares.clear();
        }
        mark_boot(&mut dir, opts.sync)?;
        let unrepaired_file = match dir.read(UNREPAIRED_FILE) {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(io("reading", UNREPAIRED_FILE, e)),
        };
        let unrepaired = unrepaired_file || seg_nums.is_empty();
        if seg_nums.is_empty() && !unrepaired_file {
            // Durable before the first segment's name can be.
            dir.create(UNREPAIRED_FILE)
                .map_err(|e| io("creating", UNREPAIRED_FILE, e))?;
            dir.sync_dir()
                .map_err(|e| io("syncing the directory", UNREPAIRED_FILE, e))?;
        }
        let mut rec = SegRecovery {
            segments: seg_nums.len(),
            unsynced_lost,
            unrepaired: unrepaired_file && !seg_nums.is_empty(),
            ..SegRecovery::default()
        };
        let mut segments = BTreeMap::new();
        let last = seg_nums.last().copied();
        // The records of the group commit being read, not yet ended by its commit marker
        // (it may span segments: a roll in the middle of a group). Applied at the marker.
        let mut group: Vec<(Pos, R)> = Vec::new();
        // Where the last segment's bad record was (a torn write), why, and the bytes cut.
        let mut torn_at: Option<(u64, String, u64)> = None;
        for &num in &seg_nums {
            let name = seg_name(num);
            let buf = dir.read(&name).map_err(|e| io("reading", &name, e))?;
            if let Some(why) = R::refuse_file(&buf) {
                return Err(StorageError(format!("{where_}/{name}: {why}")));
            }
            let mut off = 0usize;
            // The highest durable point this segment's markers state.
            let mut durable = 0u64;
            // The file was recycled: its earlier contents may follow the records.
            let mut recycled = false;
            // Records of the open group in this segment (what its marker states).
            let mut in_segment = 0usize;
            loop {
                match frame_at::<R>(&buf, off, num) {
                    Framed::End => break,
                    Framed::Whole { body, next } => {
                        let r = R::decode(Bytes::copy_from_slice(&buf[body.clone()]))
                            .map_err(|e| {
                                StorageError(format!(
                                    "{where_}/{name}: record at offset {off} has a good checksum but does not decode: {e}"
                                ))
                            })?;
                        if let Some(upto) = r.synced_upto() {
                            durable = durable.max(upto);
                        }
                        recycled |= r.opens_recycled();
                        let pos = Pos {
                            seg: num,
                            off: off as u64,
                            len: (next - off) as u32,
                        };
                        let Some(n) = r.commit_records() else {
                            group.push((pos, r));
                            in_segment += 1;
                            off = next;
                            continue;
                        };
                        if n as usize != in_segment {
                            return Err(StorageError(format!(
                                "{where_}/{name}: the commit marker at offset {off} ends a group \
                                 of {n} records in this segment, but {in_segment} precede it \
                                 since the last marker or the segment's start: refusing to \
                                 start, the log is damaged"
                            )));
                        }
                        in_segment = 0;
                        // The group is whole: its records count.
                        group.push((pos, r));
                        for (p, r) in group.drain(..) {
                            rec.records += 1;
                            apply(p, r).map_err(|e| {
                                StorageError(format!(
                                    "{where_}/{}: record at offset {}: {}",
                                    seg_name(p.seg),
                                    p.off,
                                    e.0
                                ))
                            })?;
                        }
                        off = next;
                    }
                    Framed::Bad(_)
                        if Some(num) != last
                            && buf[off..].iter().all(|&b| b == 0)
                            && !mutation::on(
                                opts.mutation.get(),
                                Mutation::SegLogZeroTailInEarlierSegment,
                            ) =>
                    {
                        // Only the last segment may end in zeros. A segment is closed
                        // (`roll`) once its records reached its preallocated size, its file
                        // is cut to its records and, with `sync = true`, made durable before
                        // the next one is created; a zero tail cut at start-up is made
                        // durable before anything new is written. So zeros at the end of a
                        // segment that a later one follows are bytes the disk lost: the
                        // rest of a group whose records (and commit marker) may be in the
                        // next segment, or a whole group whose marker states only the next
                        // segment's records. Applying what is left would apply part of a
                        // group; dropping it and going on would apply later groups over a
                        // hole; dropping everything after it would forget records that were
                        // synced and acknowledged, and the store would still claim to
                        // remember (the node would vote as if it had kept its state). The
                        // log is damaged: refuse, as for any other damage before the tail
                        // (the operator restarts the node on an empty directory, amnesic).
                        let open = if in_segment > 0 {
                            format!(
                                "the last {in_segment} records before them belong to a group \
                                 that no commit marker ends here"
                            )
                        } else {
                            "they follow a whole group".to_string()
                        };
                        return Err(StorageError(format!(
                            "{where_}/{name}: zeros from offset {off} to the end ({} bytes) of a \
                             segment that a later segment follows ({open}): records of a closed \
                             segment were lost; refusing to start, the log before its tail is \
                             damaged",
                            buf.len() - off
                        )));
                    }
                    Framed::Bad(_) if buf[off..].iter().all(|&b| b == 0) => {
                        // The last segment: preallocated space the records never reached, or
                        // that unsynced writes did not reach before a crash. (A disk that
                        // lost synced bytes to the end of a file cannot be told from this,
                        // as with a torn tail: the markers that would say so were in those
                        // bytes.) Appends go to a new segment: give the reserved space back,
                        // durably, so that this segment, no longer the last, never shows
                        // zeros again (see the arm above).
                        dir.truncate(&name, off as u64)
                            .map_err(|e| io("cutting the preallocated tail of", &name, e))?;
                        dir.sync(&name)
                            .map_err(|e| io("syncing after cutting", &name, e))?;
                        break;
                    }
                    Framed::Bad(_)
                        if recycled
                            && (off as u64) >= records_after::<R>(&buf, off, durable, num).1 =>
                    {
                        // A recycled file: after its records come its earlier contents, which
                        // fail the checksum (another segment number). Above every durable
                        // point they cannot be told from a torn write, and both end the
                        // records: cut, as a torn tail would be. (Below one: corruption,
                        // refused by the arm after this one.)
                        dir.truncate(&name, off as u64)
                            .map_err(|e| io("cutting the old contents of recycled", &name, e))?;
                        dir.sync(&name)
                            .map_err(|e| io("syncing after cutting", &name, e))?;
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
                        let (after, durable) = records_after::<R>(&buf, off, durable, num);
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
                        torn_at = Some((off as u64, why, written.saturating_sub(off) as u64));
                        break;
                    }
                }
            }
            segments.insert(num, off as u64);
        }
        // The last group commit has no commit marker: the crash kept only part of what it
        // wrote (a prefix, or a garbled write cut above). None of it was acknowledged (the
        // acknowledgement waits for the sync, which comes after the marker), and some of it
        // may be missing: it is dropped whole, from its first record on, in every segment it
        // reached. The cuts are made durable before anything new is written, so that no
        // later commit marker can end up closing what is left of this group.
        if let Some(&(first, _)) = group.first() {
            let mut cut_bytes = 0u64;
            for (&num, len) in segments.range_mut(first.seg..) {
                let at = if num == first.seg { first.off } else { 0 };
                let name = seg_name(num);
                dir.truncate(&name, at)
                    .map_err(|e| io("cutting the torn group commit of", &name, e))?;
                dir.sync(&name)
                    .map_err(|e| io("syncing after cutting", &name, e))?;
                cut_bytes += *len - at;
                *len = at;
            }
            let spans = match last {
                Some(l) if l != first.seg => format!(" (through {})", seg_name(l)),
                _ => String::new(),
            };
            let whole = format!(
                "a group commit without its commit marker: its {} whole records from offset {}{spans} \
                 are dropped whole",
                group.len(),
                first.off
            );
            let (why, torn_bytes) = match torn_at.take() {
                Some((_, why, bytes)) => (format!("{why}; {whole}"), bytes),
                None => (whole, 0),
            };
            rec.torn_tail = Some(TornTail {
                file: format!("{where_}/{}", seg_name(first.seg)),
                offset: first.off,
                bytes_cut: cut_bytes + torn_bytes,
                why,
            });
        } else if let (Some((offset, why, bytes_cut)), Some(num)) = (torn_at, last) {
            rec.torn_tail = Some(TornTail {
                file: format!("{where_}/{}", seg_name(num)),
                offset,
                bytes_cut,
                why,
            });
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
        let log = SegLog {
            dir,
            sync_writes: opts.sync,
            segment_bytes: opts.segment_bytes,
            segments,
            pending: Vec::new(),
            pending_bytes: 0,
            unsynced: false,
            dir_dirty: false,
            deletable: Vec::new(),
            durable: 0,
            marked: 0,
            group_open: false,
            group_records: 0,
            failed: None,
            read_failed: std::cell::RefCell::new(None),
            appended_bytes: 0,
            syncs: 0,
            allocated: 0,
            recycled: false,
            in_flight: VecDeque::new(),
            spares: Vec::new(),
            spares_pending,
            unrepaired,
            whole_wanted: false,
            _records: PhantomData,
        };
        Ok((log, rec))
    }

    pub fn describe(&self) -> String {
        self.dir.describe()
    }

    /// Group commits done (syncs that wrote something).
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// Bytes of records appended since the log was opened.
    pub fn appended_bytes(&self) -> u64 {
        self.appended_bytes
    }

    /// The segments on disk, oldest first.
    pub fn segment_numbers(&self) -> Vec<u64> {
        self.segments.keys().copied().collect()
    }

    /// The current segment's file name and the bytes of records written to it (where the
    /// next write goes; the file may be longer, preallocated).
    pub fn write_end(&self) -> (String, u64) {
        let cur = self.current();
        (seg_name(cur), self.segments.get(&cur).copied().unwrap_or(0))
    }

    /// The segment appended to.
    pub fn current(&self) -> u64 {
        self.segments.keys().next_back().copied().unwrap_or(0)
    }

    /// The first failure, which every later sync returns.
    pub fn failed(&self) -> Option<&StorageError> {
        self.failed.as_ref()
    }

    /// Fails the log with `e` (kept if it is the first failure).
    pub fn set_failed(&mut self, e: StorageError) {
        if self.failed.is_none() {
            self.failed = Some(e);
        }
    }

    fn fail(&mut self, what: &str, name: &str, e: std::io::Error) {
        let e = StorageError(format!("{}/{name}: {what}: {e}", self.dir.describe()));
        self.set_failed(e);
    }

    /// A reader that cannot fail (`&self`) found damage: the next sync reports it.
    pub fn note_read_failure(&self, e: StorageError) {
        self.read_failed.borrow_mut().get_or_insert(e);
    }

    /// Creates the next segment (the first: 1); `Some(recycled)` when it is there, and
    /// the caller appends its opener at once. `None`: the log failed.
    pub fn begin_segment(&mut self) -> Option<bool> {
        if self.failed.is_some() {
            // A failed log begins nothing: after a failed fdatasync the closed segment may
            // have lost its tail, and a later segment would make that damage before the
            // tail, refused at the next start.
            return None;
        }
        let n = self.segments.keys().next_back().map_or(1, |n| n + 1);
        let name = seg_name(n);
        let recycled = match self.spares.pop() {
            Some((spare, _)) => {
                if let Err(e) = self.dir.rename(&spare_name(spare), &name) {
                    self.fail("recycling a spare file as", &name, e);
                    return None;
                }
                true
            }
            None => {
                if let Err(e) = self.dir.create(&name) {
                    self.fail("creating", &name, e);
                    return None;
                }
                false
            }
        };
        self.segments.insert(n, 0);
        self.recycled = recycled;
        self.dir_dirty = true;
        self.durable = 0;
        self.marked = 0;
        self.group_records = 0;
        // Reserve the segment's space now (one metadata change per segment instead of one
        // per group commit); the opener's sync makes the size durable with it.
        self.allocated = match self.dir.preallocate(&name, self.segment_bytes) {
            Ok(()) => self.segment_bytes,
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => 0,
            Err(e) => {
                self.fail("preallocating", &name, e);
                0
            }
        };
        Some(recycled)
    }

    /// The current segment is full: the next record goes to a new one (`roll`).
    pub fn roll_due(&self) -> bool {
        self.write_at() >= self.segment_bytes
    }

    /// Where the next queued record will be in the current segment.
    fn write_at(&self) -> u64 {
        let cur = self.current();
        self.segments.get(&cur).copied().unwrap_or(0) + self.pending_bytes as u64
    }

    /// Closes the current segment (durable first, with `sync`) and begins the next; as
    /// [`SegLog::begin_segment`], the caller appends its opener on `Some`.
    pub fn roll(&mut self) -> Option<bool> {
        self.write_pending();
        let cur = self.current();
        if self.recycled || self.dir.pads_writes() {
            // A closed segment's file ends at its records: a recycled file's older contents
            // go, and so do the zeros a direct write padded its last block with, so that
            // recovery can hold every segment but the last to that (zeros or anything else
            // after the records of a closed segment are damage, `open`).
            let name = seg_name(cur);
            let written = self.segments.get(&cur).copied().unwrap_or(0);
            match self.dir.truncate(&name, written) {
                Ok(()) => self.unsynced = true,
                Err(e) => self.fail("cutting the older contents of recycled", &name, e),
            }
        }
        // Durable before the next segment exists, in place: also what a sync job still in
        // flight (`begin_sync`) was to make durable. The next segment's name may reach the
        // disk before any directory sync (ext4 and xfs commit names in their journal on
        // their own schedule), and a crash that kept it while this segment lost its tail
        // would leave the log damaged before its tail, refused at start (found by the
        // simulator's `torn_unsynced` fault: seed 56 of U-Ring's power_loss mix).
        let in_flight = self.in_flight.iter().any(|f| f.seg == cur);
        if self.sync_writes && (self.unsynced || in_flight) {
            let name = seg_name(cur);
            if let Err(e) = self.dir.sync(&name) {
                self.fail("syncing", &name, e);
            }
            self.unsynced = false;
        }
        self.begin_segment()
    }

    /// Queues one record in the current segment; returns where it will be. A write's first
    /// record follows a `Synced` marker when the segment's durable point moved since the
    /// last one. (Rolling is the caller's: [`SegLog::roll_due`], so that it can open the
    /// new segment with its own record.)
    pub fn append(&mut self, r: &R) -> Pos {
        if self.pending.is_empty() && self.durable > self.marked {
            self.marked = self.durable;
            self.push(&R::synced(self.durable));
        }
        self.push(r)
    }

    /// Queues one record at the end of the pending write.
    fn push(&mut self, r: &R) -> Pos {
        let cur = self.current();
        let at = self.write_at();
        let (chunks, len) = r.encode(cur);
        self.pending.extend(chunks);
        self.pending_bytes += len;
        self.appended_bytes += len as u64;
        self.group_open = true;
        self.group_records = self.group_records.saturating_add(1);
        let pos = Pos {
            seg: cur,
            off: at,
            len: len as u32,
        };
        if self.pending_bytes >= FLUSH_BYTES {
            self.write_pending();
        }
        pos
    }

    /// Hands every queued record to the directory (one vectored write), without a sync.
    pub fn write_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        if self.failed.is_some() {
            // Never write after a failure: a later write that succeeded would land where
            // the failed one should have been, and what is on disk would no longer be the
            // log this process believes (every sync reports the failure).
            self.pending.clear();
            self.pending_bytes = 0;
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
                        // Safe from a process crash, all this log promises.
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

    /// Whether the record at `pos` has been handed to the directory (it may still be
    /// pending, in this group's write).
    pub fn written(&self, pos: Pos) -> bool {
        pos.seg != self.current()
            || pos.off + u64::from(pos.len) <= self.segments.get(&pos.seg).copied().unwrap_or(0)
    }

    /// Reads one record back from disk, checking its framing and checksum.
    pub fn read(&self, pos: Pos) -> Result<R, StorageError> {
        let name = seg_name(pos.seg);
        let mut buf = vec![0u8; pos.len as usize];
        if !self.written(pos) {
            // Still pending in this group's write (readers stop before such records): be
            // safe and say so clearly.
            return Err(StorageError(format!(
                "{}/{name}: record at offset {} not written yet",
                self.dir.describe(),
                pos.off
            )));
        }
        self.dir.read_at(&name, pos.off, &mut buf).map_err(|e| {
            StorageError(format!(
                "{}/{name}: reading offset {}: {e}",
                self.dir.describe(),
                pos.off
            ))
        })?;
        let Framed::Whole { body, .. } = frame_at::<R>(&buf, 0, pos.seg) else {
            return Err(StorageError(format!(
                "{}/{name}: record at offset {} is damaged on disk",
                self.dir.describe(),
                pos.off
            )));
        };
        R::decode(Bytes::copy_from_slice(&buf[body])).map_err(|e| {
            StorageError(format!(
                "{}/{name}: record at offset {}: {e}",
                self.dir.describe(),
                pos.off
            ))
        })
    }

    /// Reads one record back, failing the log if it cannot (as `open` would refuse it).
    pub fn read_or_fail(&mut self, pos: Pos) -> Option<R> {
        match self.read(pos) {
            Ok(r) => Some(r),
            Err(e) => {
                self.set_failed(e);
                None
            }
        }
    }

    /// The segments before the current one that are not already to be deleted, oldest
    /// first: candidates for [`SegLog::delete_after_sync`].
    pub fn old_segments(&self) -> Vec<u64> {
        let cur = self.current();
        // Segments already doomed (waiting for the sync of the trim that freed them, maybe
        // in flight) are not taken again: a second `remove` of one failed the store.
        let doomed = |s: &u64| {
            self.deletable.contains(s) || self.in_flight.iter().any(|f| f.delete.contains(s))
        };
        self.segments
            .keys()
            .copied()
            .filter(|s| *s != cur && !doomed(s))
            .collect()
    }

    /// Deletes old segment `seg` once what was appended so far is durable (the record that
    /// freed it is among it).
    pub fn delete_after_sync(&mut self, seg: u64) {
        debug_assert!(
            seg != self.current(),
            "the current segment is never deleted"
        );
        self.deletable.push(seg);
    }

    /// Deletes old segments whose freeing record is durable, keeping their files as spares
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

    /// Makes every append so far durable (group commit): the job, if any, runs here.
    pub fn sync(&mut self) -> Result<(), StorageError> {
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
    pub fn begin_sync(&mut self) -> Result<Option<SyncJob>, StorageError> {
        if let Some(e) = self.read_failed.get_mut().take()
            && self.failed.is_none()
        {
            self.failed = Some(e);
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        // The group commit ends here: its marker goes last in the write (some of the group
        // may be written already, by `FLUSH_BYTES`, a roll or a write-through; none of it
        // counts at recovery without this marker). Cost: one framed record of 17 bytes
        // (header 12, kind 1, count 4) in the same vectored write; no syscall, no fsync.
        let wrote = self.group_open;
        if wrote {
            let records = self.group_records;
            self.push(&R::commit(records));
            self.group_open = false;
            self.group_records = 0;
        }
        self.write_pending();
        let mut job = SyncJob::default();
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
            if std::mem::take(&mut self.whole_wanted) {
                self.remove_unrepaired();
            }
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
            whole: std::mem::take(&mut self.whole_wanted),
        });
        Ok(Some(job))
    }

    /// The job of `begin_sync` ran, with this result. An error fails the log.
    pub fn end_sync(&mut self, result: &Result<(), StorageError>) {
        // Nothing in flight: this log's `begin_sync` synced in place.
        let Some(f) = self.in_flight.pop_front() else {
            return;
        };
        match result {
            Err(e) => self.set_failed(e.clone()),
            Ok(()) => {
                // The segment may have rolled meanwhile (`roll` syncs it in place).
                if f.seg == self.current() {
                    self.durable = self.durable.max(f.len);
                }
                self.spares.extend(f.promote);
                self.delete_segments(f.delete);
                if f.whole {
                    self.remove_unrepaired();
                }
            }
        }
    }

    /// The protocol's state on this log is whole (issue 33, suspect 2): it started not
    /// amnesic, or its repair ended. Once what it holds now is durable (the next sync),
    /// the [`UNREPAIRED_FILE`] goes, and a restart on this log is no longer amnesic.
    /// With nothing appended since the last completed sync (a start that is not amnesic:
    /// `open` synced the log), at once: a life that wrote nothing before a crash (a Raft
    /// node that never voted) has an empty state that is whole, and a cluster whose every
    /// node restarted amnesic could never repair itself.
    pub fn mark_whole(&mut self) {
        if !self.unrepaired {
            return;
        }
        // Without fdatasync, written is as durable as this log gets (a process crash
        // keeps it; a machine crash discards the log: `check_boot`).
        let all_durable = !self.group_open
            && self.pending.is_empty()
            && (!self.sync_writes || !self.unsynced)
            && self.in_flight.is_empty();
        if all_durable {
            self.remove_unrepaired();
        } else {
            self.whole_wanted = true;
        }
    }

    /// Whether a restart now would find the [`UNREPAIRED_FILE`].
    pub fn unrepaired(&self) -> bool {
        self.unrepaired
    }

    fn remove_unrepaired(&mut self) {
        if !self.unrepaired || self.failed.is_some() {
            return;
        }
        match self.dir.remove(UNREPAIRED_FILE) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return self.fail("removing", UNREPAIRED_FILE, e),
        }
        // Durable at once (with `sync = true`; without, a machine crash discards the log
        // anyway: `check_boot`), or a machine crash could bring the file back: safe (the
        // restart is amnesic, and repaired again), but a repair for nothing.
        if self.sync_writes
            && let Err(e) = self.dir.sync_dir()
        {
            return self.fail("syncing the directory after removing", UNREPAIRED_FILE, e);
        }
        self.unrepaired = false;
    }

    /// Bytes of log on disk: segments (the current one at its preallocated size), pending
    /// records and spares.
    pub fn log_bytes(&self) -> u64 {
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

    /// The segment size this log rolls at.
    pub fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }
}

/// Logs damaged before their tail, built on the simulator's disk, and what recovery must
/// make of them: for the unit tests here and for the mutation test that shows they catch
/// `Mutation::SegLogZeroTailInEarlierSegment` (`abcast-sim/tests/storage_mutations.rs`).
#[doc(hidden)]
pub mod check {
    use super::*;
    use crate::codec::{Decoder, Encoder};
    use crate::storage::MemDir;

    /// A record format of the smallest kind, to test the log under any record part.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum T {
        Opener(bool),
        Data(u64),
        /// `n` bytes of filler: a group large enough to be written out before its sync.
        Pad(u32),
        Synced(u64),
        Commit(u32),
    }

    const MAGIC: u32 = u32::from_le_bytes(*b"TST1");

    impl LogRecord for T {
        const MAGIC: u32 = MAGIC;
        fn encode(&self, seg: u64) -> (Vec<Bytes>, usize) {
            let mut e = Encoder::new();
            match self {
                T::Opener(r) => {
                    e.put_u8(1);
                    e.put_u64(u64::from(*r));
                }
                T::Data(v) => {
                    e.put_u8(2);
                    e.put_u64(*v);
                }
                T::Pad(n) => {
                    e.put_u8(3);
                    e.put_u32(*n);
                    e.put_bytes(&Bytes::from(vec![0xab; *n as usize]));
                }
                T::Synced(u) => {
                    e.put_u8(4);
                    e.put_u64(*u);
                }
                T::Commit(n) => {
                    e.put_u8(5);
                    e.put_u32(*n);
                }
            }
            frame(e.finish(), seg, MAGIC)
        }
        fn decode(body: Bytes) -> Result<T, DecodeError> {
            let mut d = Decoder::new(body);
            let r = match d.u8("kind")? {
                1 => T::Opener(d.u64("opener")? != 0),
                2 => T::Data(d.u64("data")?),
                3 => {
                    let n = d.u32("pad")?;
                    d.bytes(n as usize, "pad")?;
                    T::Pad(n)
                }
                4 => T::Synced(d.u64("synced")?),
                5 => T::Commit(d.u32("commit")?),
                k => {
                    return Err(DecodeError::Invalid {
                        what: "kind",
                        detail: k.to_string(),
                    });
                }
            };
            d.finish()?;
            Ok(r)
        }
        fn synced(upto: u64) -> T {
            T::Synced(upto)
        }
        fn synced_upto(&self) -> Option<u64> {
            match self {
                T::Synced(u) => Some(*u),
                _ => None,
            }
        }
        fn opens_recycled(&self) -> bool {
            matches!(self, T::Opener(true))
        }
        fn commit(records: u32) -> T {
            T::Commit(records)
        }
        fn commit_records(&self) -> Option<u32> {
            match self {
                T::Commit(n) => Some(*n),
                _ => None,
            }
        }
    }

    /// Opens `dir` with `opts` and returns the data values recovered, in order.
    pub fn recover(dir: &MemDir, opts: SegOptions) -> Result<Vec<u64>, StorageError> {
        let mut data = Vec::new();
        SegLog::<MemDir, T>::open(dir.clone(), opts, 1 << 30, |_, r| {
            if let T::Data(v) = r {
                data.push(v);
            }
            Ok(())
        })?;
        Ok(data)
    }

    /// A new log in `dir`, its first segment begun and synced.
    fn create(dir: &MemDir, opts: SegOptions) -> Result<SegLog<MemDir, T>, StorageError> {
        let (mut log, _) = SegLog::<MemDir, T>::open(dir.clone(), opts, 1 << 30, |_, _| Ok(()))?;
        if let Some(recycled) = log.begin_segment() {
            log.append(&T::Opener(recycled));
        }
        log.sync()?;
        Ok(log)
    }

    /// Appends as a store does: a new segment (with its opener) when this one is full.
    pub fn append(log: &mut SegLog<MemDir, T>, r: &T) -> Pos {
        if log.roll_due()
            && let Some(recycled) = log.roll()
        {
            log.append(&T::Opener(recycled));
        }
        log.append(r)
    }

    /// A copy of `dir` (every file synced and named durably) whose file `name` reads as
    /// zeros from `from` on: the disk lost those bytes.
    pub fn zeroed_copy(dir: &MemDir, name: &str, from: usize) -> Result<MemDir, String> {
        let out = MemDir::new("damaged");
        let mut o = out.clone();
        for n in dir.list().map_err(|e| e.to_string())? {
            let mut data = dir.read(&n).map_err(|e| e.to_string())?;
            if n == name {
                if from > data.len() {
                    return Err(format!("{name}: offset {from} past its end"));
                }
                data[from..].fill(0);
            }
            o.create(&n).map_err(|e| e.to_string())?;
            o.write_at(&n, 0, &[&data]).map_err(|e| e.to_string())?;
            o.sync(&n).map_err(|e| e.to_string())?;
        }
        o.sync_dir().map_err(|e| e.to_string())?;
        Ok(out)
    }

    /// Recovery of a log whose earlier segment lost the bytes from `from` to its end must
    /// refuse to start; `Err` says what it did instead.
    fn must_refuse(case: &str, dir: &MemDir, opts: SegOptions) -> Result<(), String> {
        match recover(dir, opts) {
            Err(_) => Ok(()),
            Ok(data) => Err(format!(
                "{case}: recovery accepted a log whose earlier segment lost its last bytes \
                 and applied {data:?}"
            )),
        }
    }

    /// The two ways an earlier segment's zero tail hides a group's loss (issue 33, suspect
    /// 7), with the log written under `mutation`:
    ///
    /// * a group that spans a roll (`[4 ..= 9]`, from segment 1 into 2) loses its last
    ///   record in segment 1: its commit marker, in segment 2, counts only segment 2's
    ///   records, so the rest of the group would be applied without record 7;
    /// * a group (`[1, 2, 3]`) ends segment 1, and its last record and commit marker are
    ///   lost: the next group's marker, in segment 2, would apply `[1, 2]` with it.
    ///
    /// `Ok` when recovery refuses both (the log is damaged before its tail); `Err` names
    /// what it applied instead.
    pub fn earlier_segment_zero_tails(mutation: Slot) -> Result<(), String> {
        let e = |e: StorageError| e.0;
        // A group that spans a roll.
        let opts = SegOptions {
            sync: true,
            segment_bytes: 200,
            mutation,
        };
        let dir = MemDir::new("span");
        let mut log = create(&dir, opts).map_err(e)?;
        for v in 1..=3 {
            append(&mut log, &T::Data(v));
        }
        log.sync().map_err(e)?;
        let mut at = Vec::new();
        for v in 4..=9 {
            at.push((v, append(&mut log, &T::Data(v))));
        }
        log.sync().map_err(e)?;
        drop(log);
        assert_eq!(recover(&dir, opts).map_err(e)?, (1..=9).collect::<Vec<_>>());
        let first = at[0].1.seg;
        let Some(&(v, lost)) = at.iter().rev().find(|(_, p)| p.seg == first) else {
            return Err("setup: no record of the group in its first segment".into());
        };
        if at.last().is_none_or(|(_, p)| p.seg == first) || v < 5 {
            return Err(format!(
                "setup: the group [4 ..= 9] does not span a roll: {at:?}"
            ));
        }
        let damaged = zeroed_copy(&dir, &seg_name(first), lost.off as usize)?;
        must_refuse(
            &format!("a group spanning a roll lost record {v} in its first segment"),
            &damaged,
            opts,
        )?;

        // A group that ends its segment loses its last record and its commit marker.
        let opts = SegOptions {
            sync: true,
            segment_bytes: 512,
            mutation,
        };
        let dir = MemDir::new("marker");
        let mut log = create(&dir, opts).map_err(e)?;
        append(&mut log, &T::Data(1));
        // A pad that leaves the segment just short of full until the group's last record
        // and commit marker fill it: the next group rolls, this one does not.
        let len = |r: &T| r.encode(0).1 as u64;
        let (data, marker) = (len(&T::Data(2)), len(&T::Commit(0)));
        let room = opts.segment_bytes.saturating_sub(log.write_at());
        let Some(pad) = (0..512u32).find(|&n| {
            let p = len(&T::Pad(n));
            p + data < room && p + data + marker >= room
        }) else {
            return Err("setup: no pad fits".into());
        };
        append(&mut log, &T::Pad(pad));
        let last = append(&mut log, &T::Data(2));
        log.sync().map_err(e)?;
        if !log.roll_due() {
            return Err("setup: the first group does not fill its segment".into());
        }
        for v in 3..=4 {
            append(&mut log, &T::Data(v));
        }
        log.sync().map_err(e)?;
        if log.current() == last.seg {
            return Err("setup: the second group did not roll".into());
        }
        drop(log);
        assert_eq!(recover(&dir, opts).map_err(e)?, vec![1, 2, 3, 4]);
        let damaged = zeroed_copy(&dir, &seg_name(last.seg), last.off as usize)?;
        must_refuse(
            "a group ending its segment lost its last record and commit marker",
            &damaged,
            opts,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::check::T;
    use super::*;
    use crate::storage::{MemDir, Tear};

    /// Opens the log as a store would: replays it (the data values, in order), then
    /// begins a segment with its opener, synced.
    fn open(
        dir: &MemDir,
        sync: bool,
        segment_bytes: u64,
    ) -> (SegLog<MemDir, T>, Vec<u64>, SegRecovery) {
        let mut data = Vec::new();
        let opts = SegOptions {
            sync,
            segment_bytes,
            mutation: Slot::default(),
        };
        let (mut log, rec) = SegLog::open(dir.clone(), opts, 1 << 30, |_, r| {
            if let T::Data(v) = r {
                data.push(v);
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("open: {e}"));
        if let Some(recycled) = log.begin_segment() {
            log.append(&T::Opener(recycled));
        }
        log.sync().expect("sync");
        (log, data, rec)
    }

    /// Appends as a store does: a new segment (with its opener) when this one is full.
    fn append(log: &mut SegLog<MemDir, T>, r: &T) -> Pos {
        if log.roll_due()
            && let Some(recycled) = log.roll()
        {
            log.append(&T::Opener(recycled));
        }
        log.append(r)
    }

    /// The disk after a crash that kept `cut` bytes of the last group's write (`group`:
    /// per segment, where the group's bytes lie in it) and every byte before it: the rest
    /// of the group reads as zeros (preallocated space its write did not reach). A segment
    /// the group began (by a roll) exists only if the group's part in the segment before
    /// was kept whole (the roll synced it before creating the new one); then, if the cut
    /// did not reach into it, it is there all zeros, or (with `vanish`) not there at all:
    /// its name was not durable yet.
    fn crashed_copy(
        dir: &MemDir,
        group: &BTreeMap<String, std::ops::Range<usize>>,
        cut: usize,
        vanish: bool,
    ) -> MemDir {
        let mut out = MemDir::new("cut");
        let mut budget = cut;
        let mut prev_torn = false;
        let mut names = dir.list().expect("list");
        // The group's bytes in write order: segment names sort by number.
        names.sort();
        for name in names {
            let mut data = dir.read(&name).expect("read");
            if let Some(r) = group.get(&name) {
                let keep = budget.min(r.len());
                if r.start == 0 && (prev_torn || (keep == 0 && vanish)) {
                    continue;
                }
                budget -= keep;
                prev_torn = keep < r.len();
                data[r.start + keep..r.end].fill(0);
            }
            out.create(&name).expect("create");
            out.write_at(&name, 0, &[&data]).expect("write");
            out.sync(&name).expect("sync");
        }
        out.sync_dir().expect("sync dir");
        out
    }

    /// Writes groups `[1, 2, 3]` (synced) and then `[4 ..= 9]`, whose write may roll to a
    /// new segment (small `segment_bytes`); returns the directory and where the second
    /// group's bytes lie, per segment file, once written (its sync not done).
    fn two_groups(
        sync: bool,
        segment_bytes: u64,
    ) -> (MemDir, BTreeMap<String, std::ops::Range<usize>>) {
        let dir = MemDir::new("g");
        let (mut log, data, _) = open(&dir, sync, segment_bytes);
        assert!(data.is_empty());
        for v in 1..=3 {
            append(&mut log, &T::Data(v));
        }
        log.sync().expect("sync");
        let (first_name, from) = log.write_end();
        let mut group = BTreeMap::new();
        let mut at = (first_name, from as usize);
        for v in 4..=9 {
            let pos = append(&mut log, &T::Data(v));
            let name = seg_name(pos.seg);
            if name != at.0 {
                // Rolled: the group's part in the old segment ends at its last whole
                // record (found below), its part in the new one starts at the opener.
                let (old, start) = std::mem::replace(&mut at, (name, 0));
                group.insert(old, start..0);
            }
        }
        // The commit marker goes with the write of `begin_sync`; its fdatasync never runs.
        let job = log.begin_sync().expect("begin");
        assert_eq!(job.is_some(), sync, "sync = false has no fdatasync to run");
        let (last, end) = log.write_end();
        assert_eq!(last, at.0);
        group.insert(last, at.1..end as usize);
        // The ends of the parts in earlier segments: the records written there.
        for (name, r) in group.iter_mut() {
            if r.end == 0 {
                let buf = dir.read(name).expect("read");
                let mut off = r.start;
                let seg = parse_numbered(name, "seg-").expect("a segment");
                while let Framed::Whole { next, .. } = frame_at::<T>(&buf, off, seg) {
                    off = next;
                }
                r.end = off;
            }
        }
        drop(log);
        (dir, group)
    }

    #[test]
    fn a_torn_group_commit_recovers_to_exactly_the_previous_one_at_every_cut_point() {
        for sync in [true, false] {
            // 200 bytes: the second group rolls to a new segment half-way.
            for segment_bytes in [64 << 10, 200] {
                let (dir, group) = two_groups(sync, segment_bytes);
                assert_eq!(group.len(), if segment_bytes == 200 { 2 } else { 1 });
                let total: usize = group.values().map(|r| r.len()).sum();
                // A cut in the zeros at the end of the write (the marker's count ends in
                // zero bytes) keeps the disk as the whole write left it: the group is whole.
                let bytes: Vec<u8> = group
                    .iter()
                    .flat_map(|(name, r)| dir.read(name).expect("read")[r.clone()].to_vec())
                    .collect();
                let whole = bytes.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
                for cut in 0..=total {
                    for vanish in [false, true] {
                        let case = format!(
                            "sync {sync}, segment {segment_bytes}, cut {cut} of {total}, vanish {vanish}"
                        );
                        let d = crashed_copy(&dir, &group, cut, vanish);
                        let (mut log, data, rec) = open(&d, sync, segment_bytes);
                        let mut want: Vec<u64> = if cut >= whole {
                            (1..=9).collect()
                        } else {
                            vec![1, 2, 3]
                        };
                        assert_eq!(data, want, "{case}");
                        assert_eq!(
                            rec.torn_tail.is_some(),
                            cut > 0 && cut < whole,
                            "{case}: {:?}",
                            rec.torn_tail
                        );
                        // The cut is final: a later group commits alone, and nothing of
                        // the torn one comes back with it.
                        append(&mut log, &T::Data(100));
                        log.sync().expect("sync");
                        drop(log);
                        let (_, again, rec) = open(&d, sync, segment_bytes);
                        want.push(100);
                        assert_eq!(again, want, "{case}, reopened");
                        assert_eq!(rec.torn_tail, None, "{case}, reopened");
                    }
                }
            }
        }
    }

    /// A group larger than `FLUSH_BYTES` is written out before its sync, in parts: the
    /// parts count only once the marker is written, at the real commit.
    #[test]
    fn a_group_written_out_before_its_sync_counts_only_with_its_commit_marker() {
        for sync in [true, false] {
            let dir = MemDir::new("f");
            let seg = 32 << 20;
            let (mut log, _, _) = open(&dir, sync, seg);
            append(&mut log, &T::Data(1));
            log.sync().expect("sync");
            let writes = |log: &mut SegLog<MemDir, T>| {
                append(log, &T::Data(2));
                let pad = append(log, &T::Pad(FLUSH_BYTES as u32));
                assert!(log.written(pad), "written out before the sync");
                append(log, &T::Data(3));
            };
            writes(&mut log);
            // The process dies before the sync: the OS keeps every byte written.
            drop(log);
            dir.crash_process();
            let (mut log, data, rec) = open(&dir, sync, seg);
            assert_eq!(data, vec![1], "sync {sync}: the group without its marker");
            let torn = rec.torn_tail.expect("reported as a torn tail");
            assert!(torn.why.contains("commit marker"), "{torn:?}");
            writes(&mut log);
            log.sync().expect("sync");
            drop(log);
            if sync {
                dir.crash_machine(|_, _| crate::storage::Tear {
                    keep: 0,
                    flip: None,
                });
            } else {
                dir.crash_process();
            }
            let (_, data, rec) = open(&dir, sync, seg);
            assert_eq!(data, vec![1, 2, 3], "sync {sync}: the whole group");
            assert_eq!(rec.torn_tail, None);
        }
    }

    /// Issue 33, suspect 7: zeros at the end of a segment that a later one follows were
    /// cut like the last segment's preallocated space, and the next segment's commit marker
    /// then applied part of a group. Recovery refuses such a log (`check`).
    #[test]
    fn zeros_at_the_end_of_an_earlier_segment_are_refused_never_applied_in_part() {
        if let Err(e) = check::earlier_segment_zero_tails(Slot::default()) {
            panic!("{e}");
        }
    }

    /// A closed segment's file ends at its records, recycled ones too (their older
    /// contents are cut at the roll), so only the last segment can show anything after
    /// its records; a reopened log reads every segment whole.
    #[test]
    fn a_closed_recycled_segment_ends_at_its_records() {
        for sync in [true, false] {
            let dir = MemDir::new("r");
            let seg = 4096;
            let (mut log, _, _) = open(&dir, sync, seg);
            let mut v = 0;
            let mut fill = |log: &mut SegLog<MemDir, T>, segments: usize| {
                let start = log.current();
                while log.current() < start + segments as u64 {
                    v += 1;
                    append(log, &T::Data(v));
                    append(log, &T::Pad(300));
                    log.sync().expect("sync");
                }
            };
            fill(&mut log, 4);
            for s in log.old_segments() {
                log.delete_after_sync(s);
            }
            log.sync().expect("sync");
            // The spares' renames become durable with the next directory sync.
            fill(&mut log, 1);
            fill(&mut log, 6);
            let sizes = dir.sizes();
            let cur = log.current();
            let mut recycled = 0;
            for (name, size) in &sizes {
                let Some(n) = parse_numbered(name, "seg-") else {
                    continue;
                };
                let buf = dir.read(name).expect("read");
                let mut off = 0;
                let mut first = None;
                while let Framed::Whole { body, next } = frame_at::<T>(&buf, off, n) {
                    first.get_or_insert_with(|| T::decode(Bytes::copy_from_slice(&buf[body])));
                    off = next;
                }
                if n != cur {
                    assert_eq!(off, *size, "sync {sync}: {name} ends at its records");
                    if matches!(first, Some(Ok(T::Opener(true)))) {
                        recycled += 1;
                    }
                }
            }
            assert!(
                recycled > 0,
                "sync {sync}: no closed segment was recycled: {sizes:?}"
            );
            drop(log);
            let (_, data, rec) = open(&dir, sync, seg);
            // The deleted segments' values are gone; the rest is whole, in order.
            let from = data.first().copied().unwrap_or(0);
            assert!(from > 1, "sync {sync}: nothing was deleted");
            assert_eq!(data, (from..=v).collect::<Vec<_>>(), "sync {sync}");
            assert_eq!(rec.recycled_tails, 0, "sync {sync}: {rec:?}");
        }
    }

    /// A roll while the segment's group commit is still in flight (the pipelined commit:
    /// `begin_sync` returned its job, not yet run) made the next segment without waiting
    /// for it. A machine crash that kept the new segment (its name in the file system's
    /// journal, `torn_unsynced`) and tore the old one's unsynced tail left a log damaged
    /// before its tail: the node could not start. The roll syncs the segment in place.
    #[test]
    fn a_roll_makes_the_segment_durable_also_behind_a_sync_in_flight() {
        let dir = MemDir::new("inflight");
        let (mut log, _, _) = open(&dir, true, 200);
        for v in 1..=3 {
            append(&mut log, &T::Data(v));
        }
        // The group fills the segment: the next append rolls before writing anything
        // more to it.
        append(&mut log, &T::Pad(200));
        let job = log.begin_sync().expect("begin").expect("a job in flight");
        assert!(log.roll_due());
        let first = log.current();
        for v in 4..=9 {
            append(&mut log, &T::Data(v));
        }
        assert_ne!(log.current(), first, "the second group rolled");
        drop(job);
        drop(log);
        // Power lost: every name survives, the old segment keeps half its unsynced bytes.
        dir.crash_machine_fate(|_, n, named| {
            Some(Tear {
                keep: if named { n / 2 } else { n },
                flip: None,
            })
        });
        let opts = SegOptions {
            sync: true,
            segment_bytes: 200,
            mutation: Slot::default(),
        };
        let data = check::recover(&dir, opts).unwrap_or_else(|e| panic!("refused: {e}"));
        assert_eq!(data, vec![1, 2, 3], "the first group, synced by the roll");
    }
}
