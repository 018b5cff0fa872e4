//! What a node delivered, kept so a subscriber can start (or resume) at a position: the
//! deliveries in instance order, and a [`Gap`] wherever the node cannot hand the values
//! over (it installed a peer's snapshot, skipped trimmed instances, or no longer holds
//! them). A subscriber is never moved past an instance without either the values or a gap.
//!
//! Two back-ends:
//!
//! - in memory (`DriverConfig::history_bytes`): what this process delivered since it started,
//!   up to a byte bound, oldest dropped first;
//! - on disk (`DriverConfig::history_dir`, the journal): the same items as checked records
//!   in segment files `history-<n>.log`, up to `history_file_bytes`, oldest segment deleted
//!   first. It survives restarts, so a subscriber resumes where it stopped, also across a
//!   crash of the node.
//!
//! Why a journal of its own rather than the acceptor's durable log or the delivery log:
//! the acceptor log (`storage/durable.rs`) holds votes and decisions of the instances this
//! node *accepted*, in the protocol's terms (de-duplication, no-ops, Multi-Ring slots are
//! decided there and resolved only by the learner), it is trimmed by the coordinator on the
//! cluster's schedule, and it sits inside the protocol, out of the driver's reach. The
//! delivery log (`abcast-node`'s `deliverylog.rs`) records ids, not payloads. The journal
//! is exactly what this learner delivered, in its order, payloads included.
//!
//! Positions are the protocol's instances; on a Multi-Ring node, whose rings number their
//! instances apart, they are the node's merged delivery order instead (`History::merged`),
//! so that a subscription resuming from N gets the N-th delivery on, whatever its ring.
//!
//! Durability: records are buffered and written at the latest when a reader needs them;
//! the journal is fdatasynced before every snapshot this node writes or installs, so a
//! snapshot never covers an instance the journal lost; a segment is fdatasynced when it
//! is closed, and the directory whenever a segment is created or deleted, so a machine
//! crash can only cut the last segment's tail. Should the journal lose records anyway (a
//! damaged segment dropped), a reader gets a `NotHeld` gap there, never a silent jump. A crash may lose the unsynced tail;
//! the restarted learner delivers again from its snapshot (or instance 1), and the journal
//! takes what it lost from those deliveries (what it already holds is not written twice).
//! A torn record at the end of the last segment is cut at start-up.

use abcast_core::{Batch, Delivery, GroupId, Instance};
use bytes::Bytes;
use std::collections::VecDeque;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Why a subscriber does not get the values of some instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GapReason {
    /// This node does not hold them (any more): its history starts later, or it restarted
    /// from a snapshot past them.
    NotHeld = 1,
    /// This node installed a peer's snapshot covering them (it fell behind the trim point).
    SnapshotInstalled = 2,
    /// The learner passed over them: every acceptor had trimmed them and no snapshot covers
    /// them (`Application::skipped`).
    Skipped = 3,
    /// Decided, but they deliver nothing: no-ops (a coordinator's takeover) or batches
    /// decided a second time (de-duplicated). Nothing is missing; the stream says so
    /// because instance numbers are all a subscriber can check.
    Empty = 4,
}

impl GapReason {
    pub fn from_u8(v: u8) -> Option<GapReason> {
        match v {
            1 => Some(GapReason::NotHeld),
            2 => Some(GapReason::SnapshotInstalled),
            3 => Some(GapReason::Skipped),
            4 => Some(GapReason::Empty),
            _ => None,
        }
    }
}

impl fmt::Display for GapReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GapReason::NotHeld => "not held by this node",
            GapReason::SnapshotInstalled => "snapshot installed",
            GapReason::Skipped => "skipped (trimmed everywhere)",
            GapReason::Empty => "no values (no-ops or duplicates)",
        })
    }
}

/// Instances `[from, to)` whose values the stream does not carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    pub from: Instance,
    /// Exclusive.
    pub to: Instance,
    /// The snapshot that covers the instances up to here (0: none this node knows of).
    pub snapshot_upto: Instance,
    pub reason: GapReason,
    /// For people: where the state (or the values) can be had.
    pub how_to_fetch: String,
}

/// One entry of the history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Delivered(Delivery),
    Gap(Gap),
}

impl Item {
    /// The first instance the item covers.
    pub fn first(&self) -> Instance {
        match self {
            Item::Delivered(d) => d.instance,
            Item::Gap(g) => g.from,
        }
    }
    /// One past the last instance the item covers.
    pub fn end(&self) -> Instance {
        match self {
            Item::Delivered(d) => d.instance.saturating_add(1),
            Item::Gap(g) => g.to,
        }
    }
    fn bytes(&self) -> usize {
        match self {
            Item::Delivered(d) => d.batch.wire_bytes() + 32,
            Item::Gap(g) => 64 + g.how_to_fetch.len(),
        }
    }
}

/// Most items one `read` returns.
pub const READ_ITEMS_MAX: usize = 4096;
/// Most items the in-memory history keeps (besides its byte bound).
const MEM_ITEMS_MAX: usize = 1 << 16;

/// Where the node's snapshot is, for the gaps' `how_to_fetch`.
#[derive(Clone, Debug, Default)]
pub struct SnapshotInfo {
    pub upto: Instance,
    pub path: Option<PathBuf>,
}

/// The node's delivery history (see the module comment).
pub struct History {
    mem: VecDeque<Item>,
    mem_bytes: usize,
    mem_bytes_max: usize,
    journal: Option<Journal>,
    /// One past the last position recorded; 1 before anything.
    end: Instance,
    /// Multi-Ring (deliveries of groups other than 0, or [`History::set_merged`]): a
    /// ring's instance numbers are its own, so the positions are the node's merged
    /// delivery order instead, 1, 2, 3 ... in the deterministic merge, per process life
    /// (in memory only: a restarted learner's merge starts where its rings do, so the
    /// numbering of an earlier life means nothing to it). Each delivery is recorded, and
    /// handed to subscribers, with its position as its instance; a ring's skipped
    /// instances take one position, as a gap.
    merged: bool,
    /// This process life recorded something already. Within a life the learner delivers
    /// every instance, passes over ones that deliver nothing, or reports a skip or an
    /// install; so a jump between two deliveries is instances without values. Before the
    /// first, a jump may also be instances the node's snapshot covers.
    life_started: bool,
    pub snapshot: SnapshotInfo,
}

impl History {
    /// The in-memory history (`mem_bytes_max` 0: none) or, with `journal`, the journal.
    pub fn new(mem_bytes_max: usize, journal: Option<Journal>) -> History {
        let end = journal.as_ref().map_or(1, |j| j.end);
        History {
            mem: VecDeque::new(),
            mem_bytes: 0,
            mem_bytes_max,
            journal,
            end,
            merged: false,
            life_started: false,
            snapshot: SnapshotInfo::default(),
        }
    }

    /// One past the last instance recorded.
    pub fn end(&self) -> Instance {
        self.end
    }

    /// Whether positions are the protocol's instances (false on a Multi-Ring node, whose
    /// positions are its merged delivery order).
    pub fn ordered(&self) -> bool {
        !self.merged
    }

    /// Positions from now on are the merged delivery order (a Multi-Ring node; see
    /// `merged`). The journal, if any, is closed: the merged order is per process life.
    pub fn set_merged(&mut self) {
        if self.merged {
            return;
        }
        self.merged = true;
        if let Some(j) = self.journal.take() {
            j.log_disabled();
        }
    }

    /// Records a delivery. Instances below `end` were recorded already (a restarted
    /// learner delivers them again) and are not kept twice; a delivery past `end` records
    /// the instances in between as a gap: covered by the snapshot this life started from
    /// (`NotHeld`), or without values (`Empty`, see `life_started`). Returns the gaps it
    /// recorded, for the subscribers that are live, and, on a merged history, the
    /// delivery with its position as its instance (what subscribers get instead of `d`).
    pub fn record_delivery(&mut self, d: &Delivery) -> io::Result<(Vec<Gap>, Option<Delivery>)> {
        if d.group != GroupId(0) {
            self.set_merged();
        }
        let mut gaps = Vec::new();
        if self.merged {
            let mut at = d.clone();
            at.instance = self.end;
            self.push(Item::Delivered(at.clone()))?;
            return Ok((gaps, Some(at)));
        }
        if d.instance < self.end {
            return Ok((gaps, None));
        }
        if d.instance > self.end {
            let covered = self.snapshot.upto.saturating_add(1).min(d.instance);
            if !self.life_started && covered > self.end {
                gaps.push(self.gap(self.end, covered, GapReason::NotHeld));
            }
            let from = if self.life_started {
                self.end
            } else {
                covered.max(self.end)
            };
            if d.instance > from {
                gaps.push(self.gap(from, d.instance, GapReason::Empty));
            }
        }
        self.life_started = true;
        for g in &gaps {
            self.push(Item::Gap(g.clone()))?;
        }
        self.push(Item::Delivered(d.clone()))?;
        Ok((gaps, None))
    }

    /// A Multi-Ring learner skipped instances `[from, to)` of ring `group` (trimmed at
    /// every acceptor): on a merged history they take one position, a `Skipped` gap that
    /// names the ring and its instances, so a subscriber sees that values are missing.
    pub fn record_ring_skip(
        &mut self,
        group: GroupId,
        from: Instance,
        to: Instance,
    ) -> io::Result<Option<Gap>> {
        if to <= from {
            return Ok(None);
        }
        self.set_merged();
        let mut g = self.gap(self.end, self.end.saturating_add(1), GapReason::Skipped);
        g.how_to_fetch = format!(
            "ring {} instances {from}..{to} were skipped (trimmed at every acceptor and no \
             snapshot covers them): their values are gone",
            group.0
        );
        self.life_started = true;
        self.push(Item::Gap(g.clone()))?;
        Ok(Some(g))
    }

    /// Records instances `[from, to)` the learner will not deliver (an install, a skip);
    /// returns the gap as recorded (clipped to what was not recorded yet), if any.
    pub fn record_gap(
        &mut self,
        from: Instance,
        to: Instance,
        reason: GapReason,
    ) -> io::Result<Option<Gap>> {
        if self.merged {
            // Instances of one ring are not positions of the merged order.
            return Ok(None);
        }
        let from = from.max(self.end);
        if to <= from {
            return Ok(None);
        }
        let g = self.gap(from, to, reason);
        self.life_started = true;
        self.push(Item::Gap(g.clone()))?;
        Ok(Some(g))
    }

    fn push(&mut self, item: Item) -> io::Result<()> {
        self.end = self.end.max(item.end());
        if let Some(j) = self.journal.as_mut() {
            return j.append(&item);
        }
        if self.mem_bytes_max == 0 {
            return Ok(());
        }
        self.mem_bytes += item.bytes();
        self.mem.push_back(item);
        while self.mem_bytes > self.mem_bytes_max || self.mem.len() > MEM_ITEMS_MAX {
            let Some(old) = self.mem.pop_front() else {
                break;
            };
            self.mem_bytes = self.mem_bytes.saturating_sub(old.bytes());
        }
        Ok(())
    }

    /// The journal failed (`e`): from now on the history is kept in memory; what only the
    /// journal held is reported as not held.
    pub fn disable_journal(&mut self, e: &io::Error) {
        if let Some(j) = self.journal.take() {
            eprintln!(
                "history journal {}: {e}; the delivery history is kept in memory from now on",
                j.dir.display()
            );
        }
    }

    /// Makes the journal durable (before a snapshot is written or installed).
    pub fn sync(&mut self) -> io::Result<()> {
        match self.journal.as_mut() {
            Some(j) => j.sync(),
            None => Ok(()),
        }
    }

    /// A gap with the snapshot the node knows of and how to get at the state.
    pub fn gap(&self, from: Instance, to: Instance, reason: GapReason) -> Gap {
        let s = &self.snapshot;
        let file = s.path.as_ref().map_or_else(
            || "no snapshot file".to_string(),
            |p| p.display().to_string(),
        );
        let how_to_fetch = match reason {
            GapReason::SnapshotInstalled => format!(
                "this node installed a peer's snapshot up to instance {}; the state is in its \
                 snapshot file ({file}), the values are not held here",
                s.upto
            ),
            GapReason::Skipped => "every acceptor had trimmed these instances and no snapshot \
                                   covers them: their values are gone"
                .to_string(),
            GapReason::Empty => "nothing to fetch: decided as no-ops or duplicates".to_string(),
            GapReason::NotHeld if s.upto >= to.saturating_sub(1) && s.upto > 0 => format!(
                "this node's snapshot up to instance {} covers them ({file}); \
                 another node's history may still hold the values",
                s.upto
            ),
            GapReason::NotHeld => format!(
                "not in this node's history; another node's may hold them \
                 (abcast learn --node OTHER --from {from})"
            ),
        };
        Gap {
            from,
            to,
            snapshot_upto: s.upto,
            reason,
            how_to_fetch,
        }
    }

    /// Appends to `out` the items from instance `next` on, at most `max_bytes` of them
    /// (at least one) and `READ_ITEMS_MAX`: what is held, and a gap where it is not.
    /// Returns true when `out` reached the end of the history (the reader is caught up).
    pub fn read(
        &mut self,
        next: Instance,
        max_bytes: usize,
        max_items: usize,
        out: &mut Vec<Item>,
    ) -> io::Result<bool> {
        let max_items = max_items.clamp(1, READ_ITEMS_MAX);
        if next >= self.end {
            return Ok(true);
        }
        let held_from = match &self.journal {
            Some(j) => j.first_held(),
            None => self.mem.front().map(Item::first),
        }
        .unwrap_or(self.end);
        let mut next = next.max(1);
        if next < held_from {
            out.push(Item::Gap(self.gap(next, held_from, GapReason::NotHeld)));
            next = held_from;
            if next >= self.end {
                return Ok(true);
            }
        }
        let start = out.len();
        match self.journal.as_mut() {
            Some(j) => j.read(next, max_bytes, max_items, out)?,
            None => {
                let at = self.mem.partition_point(|i| i.end() <= next);
                let mut bytes = 0usize;
                for item in self.mem.iter().skip(at) {
                    if out.len() - start >= max_items || (bytes > 0 && bytes >= max_bytes) {
                        break;
                    }
                    bytes += item.bytes();
                    out.push(item.clone());
                }
            }
        }
        if out.len() == start {
            // Nothing held where something should be (a journal that failed): say so
            // rather than leave the reader waiting.
            out.push(Item::Gap(self.gap(next, self.end, GapReason::NotHeld)));
            return Ok(true);
        }
        // A gap that began before `next` is clipped to it.
        if let Some(Item::Gap(g)) = out.get_mut(start)
            && g.from < next
        {
            g.from = next;
        }
        self.fill_holes(next, start, out);
        let reached = out.last().map_or(next, Item::end);
        Ok(reached >= self.end)
    }

    /// Where the items read from `out[start..]` do not follow on from each other (from
    /// `next`), a `NotHeld` gap goes in between: the history lost them (a journal segment
    /// a crash took, one dropped as damaged), and a reader is never moved past an instance
    /// silently. Items are recorded one after the other, so a hole is never expected.
    fn fill_holes(&self, next: Instance, start: usize, out: &mut Vec<Item>) {
        let mut expect = next;
        let mut holes = false;
        for item in &out[start..] {
            holes |= item.first() > expect;
            expect = expect.max(item.end());
        }
        if !holes {
            return;
        }
        let read: Vec<Item> = out.drain(start..).collect();
        let mut expect = next;
        for item in read {
            if item.first() > expect {
                out.push(Item::Gap(self.gap(
                    expect,
                    item.first(),
                    GapReason::NotHeld,
                )));
            }
            expect = expect.max(item.end());
            out.push(item);
        }
    }
}

// ----- the journal ---------------------------------------------------------------------

/// `"ABH1"`, the start of every journal record.
const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"ABH1");
const RECORD_HEADER_BYTES: usize = 12;
/// Largest record body accepted when reading (a batch is at most 64 MiB on the wire).
const RECORD_BODY_MAX: usize = 80 << 20;
/// One index entry per this many bytes of a segment.
const INDEX_EVERY_BYTES: u64 = 64 << 10;
const KIND_DELIVERED: u8 = 1;
const KIND_GAP: u8 = 2;

struct Segment {
    seq: u64,
    path: PathBuf,
    bytes: u64,
    /// The first instance of the segment's first record (`None`: empty).
    first: Option<Instance>,
    /// (first instance of a record, its offset), sparse.
    index: Vec<(Instance, u64)>,
    last_indexed: u64,
    /// Bytes of the file made durable (fdatasync), and whether its name is (a directory
    /// fsync since it was created): what a machine crash keeps at worst.
    synced: u64,
    named: bool,
}

/// The on-disk history: segment files of checked records (see the module comment).
pub struct Journal {
    dir: PathBuf,
    segments: VecDeque<Segment>,
    writer: Option<BufWriter<File>>,
    segment_bytes: u64,
    max_bytes: u64,
    end: Instance,
    /// Items written since the last sync.
    dirty: bool,
}

/// Makes the names created and removed in `dir` durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("history-{seq:08}.log"))
}

fn encode_item(item: &Item) -> Vec<u8> {
    let mut b = Vec::new();
    match item {
        Item::Delivered(d) => {
            b.push(KIND_DELIVERED);
            b.extend_from_slice(&d.group.0.to_le_bytes());
            b.extend_from_slice(&d.instance.to_le_bytes());
            b.extend_from_slice(&d.batch.origin().0.to_le_bytes());
            b.extend_from_slice(&d.batch.first_seq().to_le_bytes());
            b.extend_from_slice(&(d.batch.len() as u32).to_le_bytes());
            b.extend_from_slice(d.batch.lens_raw());
            b.extend_from_slice(d.batch.data_raw());
        }
        Item::Gap(g) => {
            b.push(KIND_GAP);
            b.extend_from_slice(&g.from.to_le_bytes());
            b.extend_from_slice(&g.to.to_le_bytes());
            b.extend_from_slice(&g.snapshot_upto.to_le_bytes());
            b.push(g.reason as u8);
            b.extend_from_slice(g.how_to_fetch.as_bytes());
        }
    }
    let mut rec = Vec::with_capacity(RECORD_HEADER_BYTES + b.len());
    rec.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    rec.extend_from_slice(&(b.len() as u32).to_le_bytes());
    rec.extend_from_slice(&crc32c::crc32c(&b).to_le_bytes());
    rec.extend_from_slice(&b);
    rec
}

fn decode_item(body: Bytes) -> Result<Item, String> {
    let mut d = abcast_core::codec::Decoder::new(body);
    let e = |e: abcast_core::DecodeError| e.to_string();
    let item = match d.u8("kind").map_err(e)? {
        KIND_DELIVERED => {
            let group = GroupId(d.u16("group").map_err(e)?);
            let instance = d.u64("instance").map_err(e)?;
            let origin = abcast_core::NodeId(d.u32("origin").map_err(e)?);
            let first_seq = d.u64("first_seq").map_err(e)?;
            let n = d.count("value count", 1 << 24, 4).map_err(e)?;
            let lens = d.bytes(n * 4, "value lengths").map_err(e)?;
            let rest = d.remaining();
            let data = d.bytes(rest, "values").map_err(e)?;
            let batch = Batch::from_parts(origin, first_seq, lens, data).map_err(e)?;
            let mut del = Delivery::new(instance, batch);
            del.group = group;
            Item::Delivered(del)
        }
        KIND_GAP => {
            let from = d.u64("from").map_err(e)?;
            let to = d.u64("to").map_err(e)?;
            let snapshot_upto = d.u64("snapshot_upto").map_err(e)?;
            let reason = GapReason::from_u8(d.u8("reason").map_err(e)?)
                .ok_or_else(|| "unknown gap reason".to_string())?;
            let rest = d.remaining();
            let text = d.bytes(rest, "how_to_fetch").map_err(e)?;
            Item::Gap(Gap {
                from,
                to,
                snapshot_upto,
                reason,
                how_to_fetch: String::from_utf8_lossy(&text).into_owned(),
            })
        }
        k => return Err(format!("unknown record kind {k}")),
    };
    d.finish().map_err(e)?;
    Ok(item)
}

/// Reads one record at the reader's position: `Ok(None)` at a clean end, `Err` with the
/// reason for a torn or damaged one.
fn read_record(r: &mut impl Read) -> Result<Option<(Item, u64)>, String> {
    let mut head = [0u8; RECORD_HEADER_BYTES];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err("torn record header".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    let word = |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
    if word(0) != RECORD_MAGIC {
        return Err("bad record magic".into());
    }
    let len = word(4) as usize;
    if len > RECORD_BODY_MAX {
        return Err(format!("record body of {len} bytes"));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)
        .map_err(|e| format!("torn record body: {e}"))?;
    if crc32c::crc32c(&body) != word(8) {
        return Err("record checksum mismatch".into());
    }
    let item = decode_item(Bytes::from(body))?;
    Ok(Some((item, (RECORD_HEADER_BYTES + len) as u64)))
}

impl Journal {
    /// Opens (or creates) the journal in `dir`, keeping at most about `max_bytes`. What it
    /// found is scanned once to index it; a torn tail of the last segment is cut, and a
    /// damaged older segment is dropped with everything before it (logged: those
    /// instances become "not held").
    pub fn open(dir: &Path, max_bytes: u64) -> io::Result<Journal> {
        fs::create_dir_all(dir)?;
        let mut seqs: Vec<u64> = fs::read_dir(dir)?
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                name.strip_prefix("history-")?
                    .strip_suffix(".log")?
                    .parse()
                    .ok()
            })
            .collect();
        seqs.sort_unstable();
        let max_bytes = max_bytes.max(1 << 16);
        let mut j = Journal {
            dir: dir.to_path_buf(),
            segments: VecDeque::new(),
            writer: None,
            segment_bytes: (max_bytes / 4).max(1 << 14),
            max_bytes,
            end: 1,
            dirty: false,
        };
        let last = seqs.last().copied();
        for seq in seqs {
            let path = segment_path(dir, seq);
            let mut seg = Segment {
                seq,
                path: path.clone(),
                bytes: 0,
                first: None,
                index: Vec::new(),
                last_indexed: 0,
                synced: 0,
                named: true,
            };
            let mut r = io::BufReader::new(File::open(&path)?);
            let damage = loop {
                match read_record(&mut r) {
                    Ok(Some((item, n))) => {
                        seg.note(&item, seg.bytes);
                        seg.bytes += n;
                        j.end = j.end.max(item.end());
                    }
                    Ok(None) => break None,
                    Err(why) => break Some(why),
                }
            };
            if let Some(why) = damage {
                if Some(seq) == last {
                    eprintln!(
                        "history journal {}: {why} at offset {}: cut there",
                        path.display(),
                        seg.bytes
                    );
                    let f = OpenOptions::new().write(true).open(&path)?;
                    f.set_len(seg.bytes)?;
                    f.sync_all()?;
                } else {
                    eprintln!(
                        "history journal {}: {why} at offset {}: this segment and the older \
                         ones are dropped",
                        path.display(),
                        seg.bytes
                    );
                    for s in j.segments.drain(..) {
                        let _ = fs::remove_file(&s.path);
                    }
                    let _ = fs::remove_file(&path);
                    j.end = 1;
                    continue;
                }
            }
            // What an earlier life wrote may be only in the OS's cache (it crashed before
            // a sync): made durable before anything is written after it, so that a machine
            // crash cannot take it from under a later segment that survives.
            File::open(&path)?.sync_data()?;
            seg.synced = seg.bytes;
            j.segments.push_back(seg);
        }
        sync_dir(dir)?;
        Ok(j)
    }

    /// One past the last instance the journal holds; 1 when empty.
    pub fn end(&self) -> Instance {
        self.end
    }

    fn first_held(&self) -> Option<Instance> {
        self.segments.iter().find_map(|s| s.first)
    }

    fn log_disabled(&self) {
        eprintln!(
            "history journal {}: deliveries of several groups (Multi-Ring) have no single \
             order of instances; the journal is off for this run",
            self.dir.display()
        );
    }

    fn append(&mut self, item: &Item) -> io::Result<()> {
        let rec = encode_item(item);
        let rotate = self
            .segments
            .back()
            .is_none_or(|s| s.bytes >= self.segment_bytes)
            || self.writer.is_none();
        if rotate {
            self.rotate()?;
        }
        let Some(seg) = self.segments.back_mut() else {
            return Err(io::Error::other("history journal has no segment"));
        };
        let Some(w) = self.writer.as_mut() else {
            return Err(io::Error::other("history journal has no writer"));
        };
        w.write_all(&rec)?;
        seg.note(item, seg.bytes);
        seg.bytes += rec.len() as u64;
        self.end = self.end.max(item.end());
        self.dirty = true;
        Ok(())
    }

    /// Starts a new segment when the last one is full (or none is open for writing: a
    /// journal just opened appends to a new segment, never into an old one), and deletes
    /// the oldest while the journal is over its bound.
    ///
    /// The closed segment is fdatasynced and the directory fsynced (the new name, the
    /// deleted ones) here, so that only the last segment can lose a tail in a machine
    /// crash: an unsynced closed segment could lose records while the next one, written
    /// back by the OS, survives, a hole in the middle of the history (issue 33, suspect 8).
    /// One fdatasync and one directory fsync per segment (a quarter of the journal's bound).
    fn rotate(&mut self) -> io::Result<()> {
        if let Some(mut w) = self.writer.take() {
            w.flush()?;
            if self.dirty {
                w.get_ref().sync_data()?;
            }
            if let Some(seg) = self.segments.back_mut() {
                seg.synced = seg.bytes;
            }
            self.dirty = false;
        }
        let seq = self.segments.back().map_or(0, |s| s.seq + 1);
        let path = segment_path(&self.dir, seq);
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&path)?;
        self.writer = Some(BufWriter::with_capacity(256 << 10, file));
        self.segments.push_back(Segment {
            seq,
            path,
            bytes: 0,
            first: None,
            index: Vec::new(),
            last_indexed: 0,
            synced: 0,
            named: false,
        });
        while self.segments.len() > 1
            && self.segments.iter().map(|s| s.bytes).sum::<u64>() > self.max_bytes
        {
            if let Some(old) = self.segments.pop_front() {
                fs::remove_file(&old.path)?;
            }
        }
        sync_dir(&self.dir)?;
        if let Some(seg) = self.segments.back_mut() {
            seg.named = true;
        }
        Ok(())
    }

    /// What a machine crash now would leave at worst, per segment: its path, and the bytes
    /// of it that are durable (`None`: its name is not, the file may vanish).
    #[cfg(test)]
    fn crash_image(&self) -> Vec<(PathBuf, Option<u64>)> {
        self.segments
            .iter()
            .map(|s| (s.path.clone(), s.named.then_some(s.synced)))
            .collect()
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        if !self.dirty {
            return Ok(());
        }
        if let Some(w) = self.writer.as_mut() {
            w.flush()?;
            w.get_ref().sync_data()?;
        }
        if let Some(seg) = self.segments.back_mut() {
            seg.synced = seg.bytes;
        }
        self.dirty = false;
        Ok(())
    }

    fn read(
        &mut self,
        next: Instance,
        max_bytes: usize,
        max_items: usize,
        out: &mut Vec<Item>,
    ) -> io::Result<()> {
        self.flush()?;
        let start = out.len();
        let mut bytes = 0usize;
        // The segment that holds `next`: the last one starting at or before it.
        let first_seg = self
            .segments
            .iter()
            .rposition(|s| s.first.is_some_and(|f| f <= next))
            .unwrap_or(0);
        for seg in self.segments.iter().skip(first_seg) {
            let offset = seg
                .index
                .iter()
                .rev()
                .find(|(f, _)| *f <= next)
                .map_or(0, |&(_, o)| o);
            let mut f = File::open(&seg.path)?;
            f.seek(SeekFrom::Start(offset))?;
            let mut r = io::BufReader::with_capacity(256 << 10, f.take(seg.bytes - offset));
            loop {
                if out.len() - start >= max_items || (bytes > 0 && bytes >= max_bytes) {
                    return Ok(());
                }
                match read_record(&mut r) {
                    Ok(Some((item, n))) => {
                        if item.end() <= next {
                            continue;
                        }
                        bytes += n as usize;
                        out.push(item);
                    }
                    Ok(None) => break,
                    Err(why) => {
                        return Err(io::Error::other(format!(
                            "history journal {}: {why}",
                            seg.path.display()
                        )));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Segment {
    fn note(&mut self, item: &Item, offset: u64) {
        if self.first.is_none() {
            self.first = Some(item.first());
            self.index.push((item.first(), offset));
            self.last_indexed = offset;
        } else if offset >= self.last_indexed + INDEX_EVERY_BYTES {
            self.index.push((item.first(), offset));
            self.last_indexed = offset;
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abcast_core::{NodeId, ValueId};

    fn d(i: Instance) -> Delivery {
        let id = ValueId {
            node: NodeId(1),
            seq: i,
        };
        Delivery::new(i, Batch::single(id, Bytes::from(vec![b'v'; 100])))
    }

    fn covered(items: &[Item], from: Instance) -> Instance {
        let mut next = from;
        for it in items {
            assert!(
                it.first() <= next,
                "silent gap before {it:?} (expected {next})"
            );
            next = next.max(it.end());
        }
        next
    }

    #[test]
    fn memory_history_reports_what_it_dropped_as_a_gap() {
        let mut h = History::new(10 * 132, None);
        for i in 1..=50 {
            h.record_delivery(&d(i)).unwrap();
        }
        let mut out = Vec::new();
        assert!(h.read(1, usize::MAX, READ_ITEMS_MAX, &mut out).unwrap());
        assert!(matches!(&out[0], Item::Gap(g) if g.from == 1 && g.reason == GapReason::NotHeld));
        assert_eq!(covered(&out, 1), 51);
        out.clear();
        assert!(h.read(51, usize::MAX, READ_ITEMS_MAX, &mut out).unwrap());
        assert!(out.is_empty());
    }

    #[test]
    fn journal_survives_reopen_and_cuts_a_torn_tail() {
        let dir = std::env::temp_dir().join(format!("abcast-journal-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        {
            let mut h = History::new(0, Some(Journal::open(&dir, 1 << 16).unwrap()));
            for i in 1..=1000 {
                h.record_delivery(&d(i)).unwrap();
            }
            h.record_gap(1001, 1020, GapReason::SnapshotInstalled)
                .unwrap();
            h.record_delivery(&d(1020)).unwrap();
            h.sync().unwrap();
        }
        // Tear the last record.
        let mut segs: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        segs.sort();
        let last = segs.last().unwrap();
        let len = fs::metadata(last).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(last)
            .unwrap()
            .set_len(len - 3)
            .unwrap();

        let j = Journal::open(&dir, 1 << 16).unwrap();
        assert_eq!(j.end(), 1020, "the torn delivery of 1020 is gone");
        let mut h = History::new(0, Some(j));
        // A restarted learner delivers again: what is held is not written twice.
        for i in 990..=1021 {
            h.record_delivery(&d(i)).unwrap();
        }
        let mut out = Vec::new();
        let mut next = 1;
        loop {
            let done = h.read(next, 4096, READ_ITEMS_MAX, &mut out).unwrap();
            next = covered(&out, 1);
            if done {
                break;
            }
        }
        assert_eq!(next, 1022);
        assert!(
            matches!(&out[0], Item::Gap(g) if g.from == 1 && g.reason == GapReason::NotHeld),
            "the bound dropped the oldest segments"
        );
        assert!(
            out.iter()
                .any(|i| matches!(i, Item::Gap(g) if g.reason == GapReason::SnapshotInstalled))
        );
        let _ = fs::remove_dir_all(&dir);
    }

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("abcast-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    /// Reads the whole history from `from`, asserting no silent gap; returns the items.
    fn read_all(h: &mut History, from: Instance) -> Vec<Item> {
        let mut out = Vec::new();
        let mut next = from;
        for _ in 0..100_000 {
            let done = h.read(next, 4096, READ_ITEMS_MAX, &mut out).unwrap();
            next = covered(&out, from);
            if done {
                return out;
            }
        }
        panic!("read never ended");
    }

    /// Issue 33, suspect 8 (a): the journal's rotation synced neither the segment it closed
    /// nor the directory, so a machine crash could take a closed segment's records (or a
    /// new segment's name) while later records survived: a hole in the middle of the
    /// history, behind a sync that had promised them. Every record up to the last sync
    /// survives the worst a machine crash may do, and nothing is passed over silently.
    #[test]
    fn a_machine_crash_keeps_every_record_up_to_the_last_sync_and_no_silent_hole() {
        let dir = temp("journal-crash");
        let image = {
            let mut h = History::new(0, Some(Journal::open(&dir, 1 << 20).unwrap()));
            for i in 1..=3000 {
                h.record_delivery(&d(i)).unwrap();
            }
            h.sync().unwrap();
            for i in 3001..=4000 {
                h.record_delivery(&d(i)).unwrap();
            }
            let j = h.journal.as_ref().unwrap();
            assert!(j.segments.len() >= 3, "the journal rotated");
            j.crash_image()
        };
        // The machine loses what was not durable: unsynced bytes, unsynced names.
        for (path, keep) in image {
            match keep {
                None => fs::remove_file(&path).unwrap(),
                Some(len) => OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(len)
                    .unwrap(),
            }
        }
        let mut h = History::new(0, Some(Journal::open(&dir, 1 << 20).unwrap()));
        let items = read_all(&mut h, 1);
        let held: Vec<Instance> = items
            .iter()
            .filter_map(|i| match i {
                Item::Delivered(d) => Some(d.instance),
                Item::Gap(_) => None,
            })
            .collect();
        assert!(
            held.len() >= 3000,
            "{} records held of the 3000 synced",
            held.len()
        );
        assert_eq!(
            held[..3000],
            (1..=3000).collect::<Vec<_>>(),
            "every record up to the sync is held"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    /// Issue 33, suspect 8 (b): `Journal::read` handed on whatever records it found, so
    /// a hole in the journal (a segment lost in a crash, or removed) passed the reader over
    /// instances with neither values nor a gap. The reader gets a `NotHeld` gap there.
    #[test]
    fn a_hole_in_the_journal_is_read_as_a_gap() {
        let dir = temp("journal-hole");
        {
            let mut h = History::new(0, Some(Journal::open(&dir, 1 << 20).unwrap()));
            for i in 1..=4000 {
                h.record_delivery(&d(i)).unwrap();
            }
            h.sync().unwrap();
        }
        let mut segs: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        segs.sort();
        assert!(segs.len() >= 3, "{segs:?}");
        // The middle segment is gone.
        fs::remove_file(&segs[1]).unwrap();
        let mut h = History::new(0, Some(Journal::open(&dir, 1 << 20).unwrap()));
        assert_eq!(h.end(), 4001);
        let items = read_all(&mut h, 1);
        let hole = items.iter().find_map(|i| match i {
            Item::Gap(g) => Some((g.from, g.to, g.reason)),
            Item::Delivered(_) => None,
        });
        let (from, to, reason) = hole.expect("the lost segment is a gap");
        assert!(from > 1 && to < 4000, "{from}..{to}");
        assert_eq!(reason, GapReason::NotHeld);
        // And from inside the hole.
        let mid = (from + to) / 2;
        let items = read_all(&mut h, mid);
        assert!(matches!(&items[0], Item::Gap(g) if g.from == mid && g.to == to));
        let _ = fs::remove_dir_all(&dir);
    }

    fn ring_delivery(group: u16, instance: Instance, seq: u64) -> Delivery {
        let id = ValueId {
            node: NodeId(u32::from(group)),
            seq,
        };
        let mut d = Delivery::new(instance, Batch::single(id, Bytes::from(vec![b'v'; 10])));
        d.group = GroupId(group);
        d
    }

    /// Issue 33, suspect 8 (c): on a Multi-Ring node the history filtered by each ring's
    /// own instance numbers, so a subscription resuming from N dropped every delivery of
    /// a ring whose instances were below N. Positions are the node's merged delivery order:
    /// resuming from N gets exactly the N-th delivery on, whatever ring it came from.
    #[test]
    fn a_merged_subscription_resumes_at_its_position_in_the_merged_order() {
        let mut h = History::new(1 << 20, None);
        let mut merged = Vec::new();
        // Ring 1 is far ahead of ring 2 (a busy ring and a quiet one, or a late follow).
        for k in 0..50u64 {
            for d in [ring_delivery(1, 1000 + k, k), ring_delivery(2, 1 + k, k)] {
                let (gaps, at) = h.record_delivery(&d).unwrap();
                assert!(gaps.is_empty());
                let at = at.expect("a merged history positions its deliveries");
                assert_eq!(at.instance, merged.len() as u64 + 1);
                assert_eq!(at.group, d.group);
                merged.push(d);
            }
        }
        let skip = h
            .record_ring_skip(GroupId(2), 51, 80)
            .unwrap()
            .expect("a gap");
        assert_eq!(
            (skip.from, skip.to, skip.reason),
            (101, 102, GapReason::Skipped)
        );
        assert!(skip.how_to_fetch.contains("ring 2 instances 51..80"));
        assert!(!h.ordered());
        for from in [1, 2, 50, 77, 100, 101] {
            let items = read_all(&mut h, from);
            let got: Vec<(GroupId, Instance)> = items
                .iter()
                .filter_map(|i| match i {
                    Item::Delivered(d) => Some((d.group, d.batch.first_seq())),
                    Item::Gap(_) => None,
                })
                .collect();
            let want: Vec<(GroupId, Instance)> = merged[(from as usize).min(100) - 1..]
                .iter()
                .map(|d| (d.group, d.batch.first_seq()))
                .collect();
            let want = if from == 101 { Vec::new() } else { want };
            assert_eq!(got, want, "from {from}");
            assert!(matches!(items.last(), Some(Item::Gap(g)) if g.reason == GapReason::Skipped));
        }
    }
}
