//! Snapshots and trimming for Multi-Ring Paxos (issue 33, "Bounded on disk too"). Seed 000
//! §3.2.3 and §5.2 name the problem for every ring ("learners ... start learning beginning
//! from instance 1"; "the data which accumulates at each acceptor can be high"); U-Ring and
//! Ring Paxos solve it with snapshots and a trim point (`ring/snapshot.rs`, whose module
//! comment has the argument). A Multi-Ring learner's application state is the *merge's*
//! (seed 000 §2.4, §3.1.4), so a snapshot of one ring means nothing on its own; here the
//! merge takes one snapshot that stands in every ring at once.
//!
//! * **What a snapshot holds** ([`MergeSnapshot`], in `Snapshot::protocol`): the merge
//!   position (values delivered since the start: `Snapshot::upto`, so a learner that
//!   installs at position P delivers from P + 1 on), the merge's turn, and per ring this
//!   node is a member of: the ring learner's position (every instance up to it decided and
//!   handed to the merge) with its de-duplication memory, the ring's slot frontier (the
//!   merge's count of the ring's slots, skips included: the state that keeps the merge
//!   deterministic), whether and from which turn to which the learner follows the ring
//!   (the subscribe and unsubscribe points decided in that ring), and the instances of
//!   values decided but still waiting in the merge for the other rings, with their slots
//!   and batches (bounded by `merge_queue_instances` / `merge_queue_bytes`). Taking the
//!   waiting instances along, rather than cutting each ring where the merge stands, keeps
//!   each ring's de-duplication memory exact: it is the ring learner's own, at its own
//!   position. What λ and the skips' rate measurements were is not kept: skips are values
//!   decided in the rings, so the merge is deterministic without them; a restarted
//!   coordinator measures again (`skip.rs`).
//! * **Trimming per ring.** Taking a snapshot reports each ring's position to that ring
//!   (`ComposableRing::set_snapshot_upto`): its heartbeats carry it, the ring's leading
//!   coordinator trims the acceptors below a quorum of the ring's learners' reports, each
//!   ring at its own point, as a single ring does.
//! * **Behind a ring's trim point** (every live acceptor of the ring answered without the
//!   instance the learner needs, one had trimmed it): the ring learner neither skips nor
//!   fetches a ring snapshot (`LearnerState::composed_snapshots`); it tells the merge,
//!   which fetches a merge snapshot from a peer (`crate::snapshot_transfer`, in chunks)
//!   and installs it. The peer must be a member of the same rings with the same roles (its
//!   snapshot fills exactly this node's rings), its reports must cover the instance needed,
//!   and they must cover every other ring where this learner stands: a snapshot never
//!   moves a ring learner back. While it waits, this learner holds the deliveries of its
//!   other rings (`ComposableRing::set_delivery_paused`), so that its rings stand still and
//!   a peer's next snapshot covers them all (without that, a ring that moves, and a quiet
//!   ring moves with its skips every Δt, would always be a little ahead of any peer's
//!   latest snapshot).
//! * **Installing.** The rings' learners move to the snapshot's positions, the merge takes
//!   its turn, frontiers, waiting instances and subscriptions, and the application takes
//!   its state (`Outbox::installs`, positioned among the deliveries). The learner then
//!   delivers what the peer delivered after the snapshot, in the same order: the merge is
//!   a function of the rings' decided sequences and the follow points, and those are now
//!   the peer's. It takes the peer's subscriptions with the state (they made it); the
//!   changes are reported as `Outbox::subscriptions` after the install, and a change this
//!   learner had asked for and not seen decided is dropped (`Event::GroupChangeDropped`).
//! * **Restored at a restart**: the same, from the node's own snapshot file, before any
//!   input.
//! * **Classes.** A learner's class in a ring (`ring_class`) is what it follows in every
//!   ring, with the turns its subscriptions started and end: learners of one class have
//!   delivered the same values (the same merge positions at a turn), so one can install
//!   another's snapshot, and each ring trims below a quorum of every class. (Departure
//!   from the first design, which classed learners by what they follow from the
//!   snapshot's turn on: a learner that subscribed late counted in the class of those that
//!   followed from the start, though its state lacks the values before, at lower merge
//!   positions, which an install never goes below. Multi-Ring power_loss seeds 1554 and
//!   1655: the rings trimmed on such learners' reports, and the learners that followed
//!   every ring all along, behind after the power loss, found no snapshot they could
//!   install.) Learners whose pasts differ where their follow points do not show it (one
//!   left a ring that another never followed) share a class: no history is kept.
//! * **Retained.** A class is a learner's subscriptions *now*: one that changes them
//!   leaves its class, and the trims that counted its reports may have left its former
//!   classmates (a crash, a power loss) nothing else to install. So each learner keeps,
//!   besides its latest snapshot, the last one it took or installed before its class last
//!   changed (`SnapState::retained`: one more snapshot in memory). A learner that no peer's
//!   report fits asks the live alike peers in turn for theirs (`RetainedFetch`, one every
//!   `FETCH_TIMEOUT_US`) and installs one that fits, as any other (Multi-Ring over Ring
//!   Paxos, power_loss seed 1594). Not kept across a restart.
//!
//! Departure: a learner with rings or roles no other node has cannot install anybody's
//! snapshot; with snapshots on, give every Multi-Ring learner a peer in the same rings
//! (else it waits, saying `SnapshotAwaited`).

use super::merge::{Entry, Follow};
use super::messages::{Body, MessageOf};
use super::{Msg, MultiRingOf};
use crate::codec::{Decoder, Encoder};
use crate::error::DecodeError;
use crate::event::Event;
use crate::protocol::{Delivery, GroupPosition, Install, Outbox, Snapshot, Subscription};
use crate::ring::ComposableRing;
use crate::snapshot_transfer::{
    ChunkOutcome, SnapshotChunk, SnapshotFetch, SnapshotFetcher, SnapshotServer,
};
use crate::types::{GroupId, Instance, Micros, NodeId};
use bytes::Bytes;

/// `"MRS1"`: the start of a merge snapshot's protocol part.
const MAGIC: u32 = u32::from_le_bytes(*b"MRS1");
/// Rings in a snapshot, at most (group ids are below 256).
const RINGS_MAX: usize = 256;
/// Waiting instances per ring in a snapshot, at most (a node's own bound is
/// `merge_queue_instances`, checked at install).
const ENTRIES_MAX: usize = 1 << 24;
/// The class (`ring_class`) of a learner that follows, from its snapshot's turn on and
/// without end, every ring it learns: the usual deployment, and the peer a learner with
/// no peer of its own class installs from.
pub(super) const CLASS_ALL: u64 = 1;
/// The largest slot (or turn times M) a snapshot may carry.
const SLOT_MAX: u64 = 1 << 62;
/// A chunk of a transfer not answered within this is asked for again.
const FETCH_TIMEOUT_US: Micros = 300_000;
/// Fetches of one chunk repeated without an answer before the transfer is given up (the
/// next tick starts another, maybe from another peer).
const FETCH_RETRIES_MAX: u32 = 3;

/// One ring in a [`MergeSnapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RingState {
    pub group: GroupId,
    /// The node is a learner of the ring.
    pub learner: bool,
    /// The ring learner's position: every instance up to it decided and handed to the
    /// merge (or passed).
    pub upto: Instance,
    /// The ring learner's de-duplication memory at `upto`, as `Dedup::encode` wrote it.
    pub dedup: Bytes,
    /// Slots of every instance up to `upto`: the next instance's slot.
    pub frontier: u64,
    pub follow: Follow,
    /// Instances of values counted so far (the rate reports' base, `skip.rs`).
    pub value_slots: u64,
    /// The ring's slot count is unknown here (it skipped trimmed instances, snapshots off).
    pub misaligned: bool,
    /// Instances of values decided, waiting in the merge, in slot order.
    pub entries: Vec<(u64, Delivery)>,
}

impl RingState {
    /// The last instance whose values the application state holds or will never get: the
    /// one before the first waiting instance, or the ring learner's position.
    pub fn covered(&self) -> Instance {
        self.entries
            .first()
            .map_or(self.upto, |(_, d)| d.instance.saturating_sub(1))
    }
}

/// The merge's snapshot (see the module comment): `Snapshot::protocol` of a Multi-Ring node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MergeSnapshot {
    /// Values delivered by the merge since the start (`Snapshot::upto`).
    pub position: u64,
    /// Every turn below this one is delivered.
    pub turn: u64,
    /// The merge's M: a snapshot of another M means other turns.
    pub m: u64,
    /// In group order: every ring the node is a member of.
    pub rings: Vec<RingState>,
}

fn invalid(what: &'static str, detail: String) -> DecodeError {
    DecodeError::Invalid { what, detail }
}

fn put_follow(e: &mut Encoder, f: Follow) {
    match f {
        Follow::Off => e.put_u8(0),
        Follow::On { from, until: None } => {
            e.put_u8(1);
            e.put_u64(from);
        }
        Follow::On {
            from,
            until: Some(u),
        } => {
            e.put_u8(2);
            e.put_u64(from);
            e.put_u64(u);
        }
    }
}

fn get_follow(d: &mut Decoder) -> Result<Follow, DecodeError> {
    Ok(match d.u8("snapshot.follow")? {
        0 => Follow::Off,
        1 => Follow::On {
            from: d.u64("snapshot.follow.from")?,
            until: None,
        },
        2 => {
            let from = d.u64("snapshot.follow.from")?;
            let until = d.u64("snapshot.follow.until")?;
            if until <= from {
                return Err(invalid(
                    "snapshot.follow.until",
                    format!("{until}, not after from {from}"),
                ));
            }
            Follow::On {
                from,
                until: Some(until),
            }
        }
        x => return Err(invalid("snapshot.follow", format!("tag {x}"))),
    })
}

impl MergeSnapshot {
    pub fn encode(&self) -> Bytes {
        let mut e = Encoder::new();
        e.put_u32(MAGIC);
        e.put_u64(self.position);
        e.put_u64(self.turn);
        e.put_u64(self.m);
        e.put_u16(self.rings.len() as u16);
        for r in &self.rings {
            e.put_u16(r.group.0);
            e.put_u8(u8::from(r.learner));
            e.put_u64(r.upto);
            e.put_u32(r.dedup.len() as u32);
            e.put_slice(&r.dedup);
            e.put_u64(r.frontier);
            put_follow(&mut e, r.follow);
            e.put_u64(r.value_slots);
            e.put_u8(u8::from(r.misaligned));
            e.put_u32(r.entries.len() as u32);
            for (slot, d) in &r.entries {
                e.put_u64(*slot);
                e.put_u64(d.instance);
                crate::wire::put_batch(&mut e, &d.batch);
            }
        }
        e.to_bytes()
    }

    /// Checks and decodes [`MergeSnapshot::encode`]'s bytes, and that they describe a
    /// state the merge could have been in (`check`); never panics.
    pub fn decode(b: Bytes) -> Result<MergeSnapshot, DecodeError> {
        let mut d = Decoder::new(b);
        let magic = d.u32("snapshot.magic")?;
        if magic != MAGIC {
            return Err(invalid(
                "snapshot.magic",
                format!("{magic:#x}: not a Multi-Ring snapshot"),
            ));
        }
        let position = d.u64("snapshot.position")?;
        let turn = d.u64("snapshot.turn")?;
        let m = d.u64("snapshot.m")?;
        let n = d.u16("snapshot.rings")? as usize;
        if n == 0 || n > RINGS_MAX {
            return Err(invalid("snapshot.rings", format!("{n} rings")));
        }
        let mut rings = Vec::with_capacity(n);
        for _ in 0..n {
            let group = GroupId(d.u16("snapshot.group")?);
            let learner = crate::wire::get_bool(&mut d, "snapshot.learner")?;
            let upto = d.u64("snapshot.upto")?;
            let dlen = d.u32("snapshot.dedup_len")? as usize;
            let dedup = d.bytes(dlen, "snapshot.dedup")?;
            let frontier = d.u64("snapshot.frontier")?;
            let follow = get_follow(&mut d)?;
            let value_slots = d.u64("snapshot.value_slots")?;
            let misaligned = crate::wire::get_bool(&mut d, "snapshot.misaligned")?;
            let count = d.u32("snapshot.entries")? as usize;
            if count > ENTRIES_MAX || count.saturating_mul(16) > d.remaining() {
                return Err(invalid("snapshot.entries", format!("{count} entries")));
            }
            let mut entries = Vec::with_capacity(count);
            for _ in 0..count {
                let slot = d.u64("snapshot.entry.slot")?;
                let instance = d.u64("snapshot.entry.instance")?;
                let batch = crate::wire::get_batch(&mut d)?;
                let mut del = Delivery::new(instance, batch);
                del.group = group;
                entries.push((slot, del));
            }
            rings.push(RingState {
                group,
                learner,
                upto,
                dedup,
                frontier,
                follow,
                value_slots,
                misaligned,
                entries,
            });
        }
        d.finish()?;
        let s = MergeSnapshot {
            position,
            turn,
            m,
            rings,
        };
        s.check().map_err(|e| invalid("snapshot", e))?;
        Ok(s)
    }

    /// What a merge state satisfies (`Merger`): rings in strictly increasing group order;
    /// per ring, waiting instances in increasing slot and instance order, each in a turn
    /// not delivered yet, below the frontier, decided (at or below the learner's
    /// position); the de-duplication memory decodes.
    fn check(&self) -> Result<(), String> {
        if self.m == 0 {
            return Err("M is 0".into());
        }
        // Slots, and turns times M, far below where the merge's arithmetic could overflow
        // (a skip adds at most 2^30 slots: 2^62 is centuries of them).
        let slot_ok = |turn: u64| {
            turn.checked_add(1)
                .and_then(|t| t.checked_mul(self.m))
                .is_some_and(|s| s <= SLOT_MAX)
        };
        if !slot_ok(self.turn) {
            return Err(format!(
                "turn {} of M {} is out of range",
                self.turn, self.m
            ));
        }
        for r in &self.rings {
            let follow_ok = match r.follow {
                Follow::Off => true,
                Follow::On { from, until } => slot_ok(from) && until.is_none_or(slot_ok),
            };
            if r.frontier > SLOT_MAX || !follow_ok {
                return Err(format!("ring {}: a slot or turn out of range", r.group.0));
            }
        }
        let first_slot = self.turn.saturating_mul(self.m);
        for (k, r) in self.rings.iter().enumerate() {
            if k > 0 && self.rings[k - 1].group >= r.group {
                return Err(format!("ring {} out of group order", r.group.0));
            }
            let mut last: Option<(u64, Instance)> = None;
            for (slot, d) in &r.entries {
                if *slot < first_slot || *slot >= r.frontier {
                    return Err(format!(
                        "ring {}: a waiting instance at slot {slot}, outside [{first_slot}, {})",
                        r.group.0, r.frontier
                    ));
                }
                if d.instance == 0 || d.instance > r.upto {
                    return Err(format!(
                        "ring {}: a waiting instance {} beyond the learner's {}",
                        r.group.0, d.instance, r.upto
                    ));
                }
                if last.is_some_and(|(s, i)| *slot <= s || d.instance <= i) {
                    return Err(format!(
                        "ring {}: waiting instances out of order",
                        r.group.0
                    ));
                }
                last = Some((*slot, d.instance));
            }
            let mut dd = Decoder::new(r.dedup.clone());
            crate::dedup::Dedup::decode(&mut dd)
                .and_then(|_| dd.finish())
                .map_err(|e| format!("ring {}: de-duplication memory: {e}", r.group.0))?;
        }
        Ok(())
    }
}

/// A learner behind a ring's trim point, waiting for a snapshot.
#[derive(Debug)]
pub(crate) struct Wait {
    /// `(ring index, next, floor)`: the rings whose learner is behind, the instance each
    /// needs, and where the acceptors' logs start.
    pub behind: Vec<(usize, Instance, Instance)>,
    /// Peers whose snapshot was fetched and refused (their subscriptions differ from
    /// this learner's), with their report in the first ring behind then: not asked again
    /// until they report a newer snapshot.
    pub refused: Vec<(NodeId, Instance)>,
}

/// What the transfer under way is for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum FetchFor {
    /// A ring this learner follows is behind: install the whole snapshot, from a peer
    /// whose subscriptions deliver the same values from the snapshot's turn on.
    #[default]
    Install,
    /// No peer follows exactly this learner's rings: install the snapshot of one that
    /// follows every ring this node learns, and take its subscriptions (this learner then
    /// follows more rings than it did, never fewer: nothing it delivered is missing).
    Adopt,
    /// Only rings this learner does not follow are behind: take their positions and slot
    /// counts (`realign`), the application state stays.
    Realign,
}

/// The merge's snapshot state at one node.
#[derive(Debug, Default)]
pub(crate) struct SnapState {
    /// The rings' learners take snapshots (`RingConfigView::learner_snapshots`).
    pub on: bool,
    /// Values the merge delivered since the start (restored or installed snapshots
    /// included): the merge position.
    pub position: u64,
    /// Nodes in the same rings with the same roles: whose snapshots fit this node.
    pub alike: Vec<NodeId>,
    pub server: SnapshotServer,
    pub fetcher: SnapshotFetcher,
    pub fetch_for: FetchFor,
    pub fetch_retries: u32,
    pub wait: Option<Wait>,
    /// The ring and instance this learner last said it waits at (`SnapshotAwaited`, once).
    pub waiting_logged: Option<(usize, Instance)>,
    /// The latest snapshot's class in each ring (`ring_class`).
    pub latest_classes: Vec<u64>,
    /// The last snapshot taken or installed before the class last changed, served to
    /// `RetainedFetch` (see the module comment, "Retained").
    pub retained: SnapshotServer,
    /// The transfer under way is of a peer's retained snapshot.
    pub fetch_retained: bool,
    /// When this learner may next ask a peer for its retained snapshot, and which.
    pub next_probe_us: Micros,
    pub probe_next: usize,
}

/// The class of `ms`'s node in each of its rings (`ring_class`).
fn classes_of(ms: &MergeSnapshot) -> Vec<u64> {
    let follows: Vec<(GroupId, bool, Follow)> = ms
        .rings
        .iter()
        .map(|r| (r.group, r.learner, r.follow))
        .collect();
    ms.rings
        .iter()
        .map(|r| ring_class(&follows, r.group, ms.turn))
        .collect()
}

impl<R: ComposableRing> MultiRingOf<R> {
    /// The snapshot of the merge and every ring's learner (see the module comment).
    pub(super) fn take_snapshot_here(&mut self, app: Bytes) -> Result<Snapshot, String> {
        if !self.snap.on {
            return Err("the rings' learners take no snapshots (learner_snapshots off)".into());
        }
        if !self.slots.iter().any(|s| s.ring.is_learner()) {
            return Err(format!("node {} is a learner of no ring", self.me));
        }
        if self.snap.wait.is_some() || self.snap.fetcher.in_progress() {
            return Err("behind a ring's trim point: a peer's snapshot is awaited".into());
        }
        let m = self.merger.m;
        let turn = self.merger.turn;
        let mut rings = Vec::with_capacity(self.slots.len());
        for (s, q) in self.slots.iter().zip(&self.merger.rings) {
            let (upto, dedup) = s.ring.learner_snapshot();
            let entries: Vec<(u64, Delivery)> = q
                .queue
                .iter()
                .map(|e| (e.slot, e.delivery.clone()))
                .collect();
            // The merge's own invariants (`merge.rs`): what waits is of turns not delivered,
            // below the frontier, decided.
            assert!(
                entries.iter().all(|(slot, d)| {
                    *slot >= turn.saturating_mul(m) && *slot < q.frontier && d.instance <= upto
                }),
                "merge invariant broken: ring {} holds an instance outside [turn, frontier) \
                 or past its learner",
                s.group.0
            );
            rings.push(RingState {
                group: s.group,
                learner: s.ring.is_learner(),
                upto,
                dedup,
                frontier: q.frontier,
                follow: q.follow,
                value_slots: q.value_slots,
                misaligned: s.misaligned,
                entries,
            });
        }
        let ms = MergeSnapshot {
            position: self.snap.position,
            turn,
            m,
            rings,
        };
        debug_assert!(ms.check().is_ok(), "a snapshot of our own state checks");
        self.report_snapshot(&ms);
        self.keep_retained(&ms);
        let snap = Snapshot {
            upto: ms.position,
            protocol: ms.encode(),
            app,
        };
        self.snap.server.replace_latest(&snap);
        Ok(snap)
    }

    /// A restarted learner starts from its own snapshot (before any other input).
    pub(super) fn restore_snapshot_here(&mut self, snap: &Snapshot) -> Result<(), String> {
        if !self.snap.on {
            return Err("the rings' learners take no snapshots (learner_snapshots off)".into());
        }
        let started = self.snap.position > 0
            || self.merger.turn > 0
            || self.slots.iter().any(|s| s.ring.delivered_upto() > 0);
        if started {
            return Err("a snapshot is restored before the learner delivers anything".into());
        }
        let ms = self.decode_fitting(snap)?;
        let mut out = Outbox::new();
        self.apply(&ms, snap, &mut out, false, false);
        // Nothing can be carried out before the first input: retrieves are sent again at
        // the rings' next tick.
        Ok(())
    }

    /// Decodes `snap`'s merge snapshot and checks that it fits this node: the same rings,
    /// roles and M.
    fn decode_fitting(&self, snap: &Snapshot) -> Result<MergeSnapshot, String> {
        let ms = MergeSnapshot::decode(snap.protocol.clone()).map_err(|e| e.to_string())?;
        if ms.position != snap.upto {
            return Err(format!(
                "the snapshot says position {} and its merge state {}",
                snap.upto, ms.position
            ));
        }
        if ms.m != self.merger.m {
            return Err(format!(
                "the snapshot's merge takes M = {}, this node's {}",
                ms.m, self.merger.m
            ));
        }
        let theirs: Vec<(GroupId, bool)> = ms.rings.iter().map(|r| (r.group, r.learner)).collect();
        let ours: Vec<(GroupId, bool)> = self
            .slots
            .iter()
            .map(|s| (s.group, s.ring.is_learner()))
            .collect();
        if theirs != ours {
            return Err(format!(
                "the snapshot is of rings (group, learner) {theirs:?}, this node's are {ours:?}"
            ));
        }
        for r in &ms.rings {
            if r.entries.len() > self.cfg.merge_queue_instances.saturating_mul(2) + 4096 {
                return Err(format!(
                    "ring {}: {} waiting instances, more than this node holds",
                    r.group.0,
                    r.entries.len()
                ));
            }
        }
        Ok(ms)
    }

    /// Moves the merge and every ring's learner to `ms` (checked to fit, not behind), and
    /// keeps `snap` as the one to serve. `own_follow`: the learner keeps its subscriptions
    /// (they deliver the same values as the snapshot's from its turn on); otherwise it
    /// takes the snapshot's. With `report`, the subscriptions that change for the
    /// application are reported after the install, at its position.
    fn apply(
        &mut self,
        ms: &MergeSnapshot,
        snap: &Snapshot,
        out: &mut Outbox<Msg<R>>,
        own_follow: bool,
        report: bool,
    ) {
        let before: Vec<bool> = self.seen_subscriptions();
        for (i, r) in ms.rings.iter().enumerate() {
            let q = &mut self.merger.rings[i];
            debug_assert!(
                !own_follow || q.follow.span_from(ms.turn) == r.follow.span_from(ms.turn),
                "kept subscriptions deliver what the snapshot's do"
            );
            q.frontier = r.frontier;
            if !own_follow {
                q.follow = r.follow;
            }
            q.value_slots = r.value_slots;
            q.learner = r.learner && !r.misaligned;
            q.queue = r
                .entries
                .iter()
                .map(|(slot, d)| Entry {
                    slot: *slot,
                    delivery: d.clone(),
                })
                .collect();
            q.queued_bytes = q
                .queue
                .iter()
                .map(|e| e.delivery.batch.payload_bytes())
                .sum();
            self.slots[i].misaligned = r.misaligned;
        }
        self.merger.turn = ms.turn;
        self.merger.barrier = None;
        if let Some(p) = self.pending.take() {
            out.events.push(Event::GroupChangeDropped {
                group: self.slots[p.ring].group,
            });
        }
        self.snap.position = ms.position;
        self.snap.wait = None;
        self.snap.waiting_logged = None;
        let mut scratch = std::mem::take(&mut self.scratch);
        for (i, r) in ms.rings.iter().enumerate() {
            self.install_ring(i, r, &mut scratch, out);
        }
        self.scratch = scratch;
        let mut served = ms.clone();
        for (r, q) in served.rings.iter_mut().zip(&self.merger.rings) {
            r.follow = q.follow;
        }
        self.keep_retained(&served);
        self.snap.server.replace_latest(snap);
        self.report_snapshot(&served);
        if report {
            let after = self.seen_subscriptions();
            for (i, (b, a)) in before.into_iter().zip(after).enumerate() {
                if b != a {
                    out.subscriptions.push(Subscription {
                        group: self.slots[i].group,
                        subscribed: a,
                        from_start: false,
                        position: out.deliveries.len(),
                    });
                }
            }
        }
    }

    /// Ring `i`'s learner moves to `r`'s position (checked before: `decode_fitting`, and
    /// not behind the learner; a ring that still refused would leave the merge and its
    /// rings apart).
    fn install_ring(
        &mut self,
        i: usize,
        r: &RingState,
        scratch: &mut Outbox<R::Message>,
        out: &mut Outbox<Msg<R>>,
    ) {
        let done = self.slots[i]
            .ring
            .install_learner(r.upto, &r.dedup, scratch);
        assert!(
            done.is_ok(),
            "a checked snapshot refused by ring {}: {done:?}",
            r.group.0
        );
        self.absorb(i, scratch, out);
    }

    /// Rings this learner does not follow over the gap, behind their trim point, take their
    /// position and slot count from `ms` (a peer's snapshot): the merge would have counted
    /// the same slots, and delivers none of the ring's values there, so the application
    /// state stays. Returns whether some ring moved.
    fn realign(&mut self, ms: &MergeSnapshot, from: NodeId, out: &mut Outbox<Msg<R>>) -> bool {
        let Some(w) = self.snap.wait.as_ref() else {
            return false;
        };
        let turn = self.merger.turn;
        let mut moved = Vec::new();
        for &(i, _, floor) in &w.behind {
            let r = &ms.rings[i];
            let q = &self.merger.rings[i];
            if q.follow.followed_from(turn)
                || r.misaligned
                || r.upto + 1 < floor
                || r.upto < self.slots[i].ring.delivered_upto()
                || r.frontier < q.frontier
            {
                continue;
            }
            moved.push(i);
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        for &i in &moved {
            let r = &ms.rings[i];
            let q = &mut self.merger.rings[i];
            debug_assert!(q.queue.is_empty(), "a ring not followed keeps nothing");
            q.queue.clear();
            q.queued_bytes = 0;
            q.frontier = r.frontier;
            q.value_slots = r.value_slots;
            q.learner = r.learner;
            self.slots[i].misaligned = false;
            out.events.push(Event::InGroup {
                group: r.group,
                event: Box::new(Event::GroupRealigned {
                    upto: r.upto,
                    slot: r.frontier,
                    node: from,
                }),
            });
            self.install_ring(i, r, &mut scratch, out);
        }
        self.scratch = scratch;
        !moved.is_empty()
    }

    /// Before `ms` (of this node's state) becomes the latest snapshot: if its class differs
    /// from the latest's, the latest is retained (see the module comment).
    fn keep_retained(&mut self, ms: &MergeSnapshot) {
        let classes = classes_of(ms);
        if !self.snap.latest_classes.is_empty()
            && self.snap.latest_classes != classes
            && let Some(prev) = self.snap.server.latest()
        {
            self.snap.retained = SnapshotServer::default();
            self.snap.retained.set_latest(&prev);
        }
        self.snap.latest_classes = classes;
    }

    /// Each ring's heartbeats report from now on where `ms` (the snapshot this node serves)
    /// stands in it, and the class of learners it can stand for (`snapshot_class`).
    fn report_snapshot(&mut self, ms: &MergeSnapshot) {
        let follows: Vec<(GroupId, bool, Follow)> = ms
            .rings
            .iter()
            .map(|r| (r.group, r.learner, r.follow))
            .collect();
        for (s, r) in self.slots.iter_mut().zip(&ms.rings) {
            s.ring
                .set_snapshot_upto(r.upto, ring_class(&follows, r.group, ms.turn));
        }
    }

    /// Per ring, whether this learner has said it follows it (`Follow::seen_at`).
    pub(super) fn seen_subscriptions(&self) -> Vec<bool> {
        let turn = self.merger.turn;
        self.merger
            .rings
            .iter()
            .map(|q| q.learner && q.follow.seen_at(turn))
            .collect()
    }

    /// Where `snap` (a snapshot of this protocol) stands in each ring this node learns.
    pub(super) fn snapshot_groups_of(&self, snap: &Snapshot) -> Vec<GroupPosition> {
        let Ok(ms) = MergeSnapshot::decode(snap.protocol.clone()) else {
            return Vec::new();
        };
        ms.rings
            .iter()
            .filter(|r| r.learner && !r.misaligned)
            .map(|r| GroupPosition {
                group: r.group,
                covered: r.covered(),
                // Delivered from the snapshot's turn on (a subscription taking effect at that
                // very turn is reported when the merge starts it).
                following: r.follow.active_at(ms.turn),
            })
            .collect()
    }

    // ---- behind a ring's trim point -------------------------------------------------------

    /// Ring `i`'s learner needs `next`, and the ring's logs start at `floor`: wait for a
    /// peer's snapshot (holding the other rings if this learner follows one that is
    /// behind) and fetch one.
    pub(super) fn behind_trim(
        &mut self,
        i: usize,
        next: Instance,
        floor: Instance,
        out: &mut Outbox<Msg<R>>,
    ) {
        debug_assert!(
            next < floor,
            "behind the trim point means below the log start"
        );
        let w = self.snap.wait.get_or_insert(Wait {
            behind: Vec::new(),
            refused: Vec::new(),
        });
        match w.behind.iter_mut().find(|(r, _, _)| *r == i) {
            Some(b) => *b = (i, next, floor),
            None => w.behind.push((i, next, floor)),
        }
        self.hold_for_install();
        self.try_fetch(out);
    }

    /// Whether a ring this learner follows (now or later) is behind: then only a whole
    /// snapshot will do. Otherwise the rings behind only need their slot counts.
    fn needs_install(&self) -> bool {
        let turn = self.merger.turn;
        self.snap.wait.as_ref().is_some_and(|w| {
            w.behind
                .iter()
                .any(|&(r, _, _)| self.merger.rings[r].follow.followed_from(turn))
        })
    }

    /// While a whole snapshot is awaited, every ring whose learner is not behind holds its
    /// deliveries (see the module comment); one behind may still move if a decision comes.
    fn hold_for_install(&mut self) {
        if !self.needs_install() {
            return;
        }
        let Some(w) = self.snap.wait.as_ref() else {
            return;
        };
        for (k, s) in self.slots.iter_mut().enumerate() {
            let hold = !w.behind.iter().any(|&(r, _, _)| r == k);
            if s.paused != hold {
                s.paused = hold;
                s.ring.set_delivery_paused(hold);
            }
        }
    }

    /// After every input: a ring whose learner got past the instance it waited at (an
    /// acceptor still had it) no longer waits; with none left and no transfer under way,
    /// the merge goes on as before. Returns whether the learner holds its rings for an
    /// install.
    pub(super) fn wait_step(&mut self) -> bool {
        let Some(w) = self.snap.wait.as_mut() else {
            return false;
        };
        let slots = &self.slots;
        w.behind
            .retain(|&(r, next, _)| slots[r].ring.delivered_upto() < next);
        if w.behind.is_empty() && !self.snap.fetcher.in_progress() {
            self.snap.wait = None;
            self.snap.waiting_logged = None;
            return false;
        }
        self.hold_for_install();
        self.needs_install()
    }

    /// Starts a transfer from the best peer, if none is under way: alike (same rings and
    /// roles), alive in every ring this learner is behind in, with a snapshot covering
    /// what each of those needs; for an install, also every ring where this learner
    /// stands, and not refused before for its subscriptions (unless it has a newer
    /// snapshot). When every such peer was refused, the best of them is asked again, to
    /// take its subscriptions with its state.
    fn try_fetch(&mut self, out: &mut Outbox<Msg<R>>) {
        if self.snap.fetcher.in_progress() {
            return;
        }
        let install = self.needs_install();
        let Some(w) = self.snap.wait.as_ref() else {
            return;
        };
        if w.behind.is_empty() {
            return;
        }
        let behind = w.behind.clone();
        let refused = w.refused.clone();
        let reports: Vec<Vec<crate::ring::PeerSnapshot>> =
            self.slots.iter().map(|s| s.ring.peer_snapshots()).collect();
        let report = |ring: usize, node: NodeId| {
            reports[ring]
                .iter()
                .find(|p| p.node == node)
                .map(|p| (p.upto, p.class, p.alive))
        };
        let (first_ring, first_next, first_floor) = behind[0];
        // This learner's class in each ring: a whole snapshot must be of the same (the
        // peer follows the same rings, `ring_class`).
        let turn = self.merger.turn;
        let follows: Vec<(GroupId, bool, Follow)> = self
            .slots
            .iter()
            .zip(&self.merger.rings)
            .map(|(s, q)| (s.group, s.ring.is_learner(), q.follow))
            .collect();
        let own_class: Vec<u64> = follows
            .iter()
            .map(|&(g, _, _)| ring_class(&follows, g, turn))
            .collect();
        let mut best: Option<(Instance, NodeId)> = None;
        let mut best_all: Option<(Instance, NodeId)> = None;
        for &node in &self.snap.alike {
            let covers_behind = behind.iter().all(|&(r, _, floor)| {
                report(r, node).is_some_and(|(upto, _, alive)| alive && upto + 1 >= floor)
            });
            let covers_all = (0..self.slots.len()).all(|k| {
                report(k, node)
                    .is_some_and(|(upto, _, _)| upto >= self.slots[k].ring.delivered_upto())
            });
            let same_class = (0..self.slots.len())
                .all(|k| report(k, node).is_some_and(|(_, class, _)| class == own_class[k]));
            let follows_all = (0..self.slots.len()).all(|k| {
                !self.slots[k].ring.is_learner()
                    || report(k, node).is_some_and(|(_, class, _)| class == CLASS_ALL)
            });
            if !covers_behind || (install && !covers_all) {
                continue;
            }
            let upto = report(first_ring, node).map_or(0, |(u, _, _)| u);
            if refused.iter().any(|&(n, u)| n == node && u >= upto) {
                continue;
            }
            let slot = if !install || same_class {
                &mut best
            } else if follows_all {
                &mut best_all
            } else {
                continue;
            };
            if slot.is_none_or(|(b, _)| upto > b) {
                *slot = Some((upto, node));
            }
        }
        let group = self.slots[first_ring].group;
        let (pick, fetch_for) = match (best, best_all) {
            (Some(b), _) if install => (b, FetchFor::Install),
            (Some(b), _) => (b, FetchFor::Realign),
            (None, Some(b)) => (b, FetchFor::Adopt),
            (None, None) => {
                if install {
                    let alive: Vec<NodeId> = self
                        .snap
                        .alike
                        .iter()
                        .copied()
                        .filter(|&n| report(first_ring, n).is_some_and(|(_, _, alive)| alive))
                        .collect();
                    let all = own_class
                        .iter()
                        .zip(&self.slots)
                        .all(|(&c, s)| !s.ring.is_learner() || c == CLASS_ALL);
                    self.probe_retained(group, &alive, all, out);
                }
                if self.snap.waiting_logged != Some((first_ring, first_next)) {
                    self.snap.waiting_logged = Some((first_ring, first_next));
                    out.events.push(Event::InGroup {
                        group,
                        event: Box::new(Event::SnapshotAwaited {
                            next: first_next,
                            need: first_floor - 1,
                        }),
                    });
                }
                return;
            }
        };
        let (upto, node) = pick;
        out.events.push(Event::InGroup {
            group,
            event: Box::new(Event::SnapshotFetching {
                next: first_next,
                floor: first_floor,
                node,
                upto,
            }),
        });
        self.snap.fetch_retries = 0;
        self.snap.fetch_for = fetch_for;
        self.snap.fetch_retained = false;
        // For an install, a snapshot at or past this learner's merge position: the position
        // never goes back (a delivery log numbers values by it).
        let min_position = if install { self.snap.position } else { 0 };
        let fetch = self.snap.fetcher.start(self.now, node, min_position);
        out.send(
            node,
            MessageOf {
                group,
                body: Body::SnapshotFetch(fetch),
            },
        );
    }

    /// No peer reports a snapshot this learner can install: ask the live alike peers in
    /// turn, one every `FETCH_TIMEOUT_US`, for their retained snapshot (see the module
    /// comment). `all`: this learner follows every ring itself (it installs; otherwise it
    /// adopts, as from a peer that reports following every ring).
    fn probe_retained(
        &mut self,
        group: GroupId,
        alive: &[NodeId],
        all: bool,
        out: &mut Outbox<Msg<R>>,
    ) {
        if alive.is_empty() || self.now < self.snap.next_probe_us {
            return;
        }
        self.snap.next_probe_us = self.now + FETCH_TIMEOUT_US;
        let node = alive[self.snap.probe_next % alive.len()];
        self.snap.probe_next = self.snap.probe_next.wrapping_add(1);
        self.snap.fetch_retries = 0;
        self.snap.fetch_for = if all {
            FetchFor::Install
        } else {
            FetchFor::Adopt
        };
        self.snap.fetch_retained = true;
        let fetch = self.snap.fetcher.start(self.now, node, self.snap.position);
        out.send(
            node,
            MessageOf {
                group,
                body: Body::RetainedFetch(fetch),
            },
        );
    }

    /// The next fetch of the transfer under way, of the peer's latest or retained snapshot.
    fn fetch_body(&self, fetch: SnapshotFetch) -> Body<R::Message> {
        if self.snap.fetch_retained {
            Body::RetainedFetch(fetch)
        } else {
            Body::SnapshotFetch(fetch)
        }
    }

    /// A peer asks for this node's latest snapshot, or with `retained` for its retained one
    /// (or a part of it): "none" if it has none covering the position asked for.
    pub(super) fn on_snapshot_fetch(
        &mut self,
        from: NodeId,
        group: GroupId,
        f: SnapshotFetch,
        retained: bool,
        out: &mut Outbox<Msg<R>>,
    ) {
        let server = if retained {
            &mut self.snap.retained
        } else {
            &mut self.snap.server
        };
        let chunk = server.serve(self.now, &f);
        out.send(
            from,
            MessageOf {
                group,
                body: Body::SnapshotChunk(chunk),
            },
        );
    }

    /// A chunk of the transfer under way: ask for the next, or install the whole.
    pub(super) fn on_snapshot_chunk(
        &mut self,
        from: NodeId,
        group: GroupId,
        c: SnapshotChunk,
        out: &mut Outbox<Msg<R>>,
    ) {
        match self.snap.fetcher.on_chunk(self.now, from, c) {
            ChunkOutcome::Ignored => {}
            ChunkOutcome::Next(fetch) => {
                self.snap.fetch_retries = 0;
                let body = self.fetch_body(fetch);
                out.send(from, MessageOf { group, body });
            }
            // A peer without a retained snapshot says so: the usual answer to a probe.
            ChunkOutcome::Abandoned(_) if self.snap.fetch_retained => {}
            ChunkOutcome::Abandoned(why) => {
                out.events.push(Event::SnapshotTransferGivenUp { why });
            }
            ChunkOutcome::Complete(s) => self.install_from_peer(from, s, out),
        }
    }

    /// A peer's snapshot arrived whole: installed if it fits, moves no learner back and
    /// (unless adopted) delivers the same values as this learner's subscriptions from its
    /// turn on; or, when only rings this learner does not follow are behind, their
    /// positions taken from it.
    fn install_from_peer(&mut self, from: NodeId, s: Snapshot, out: &mut Outbox<Msg<R>>) {
        let ms = match self.decode_fitting(&s) {
            Ok(ms) => ms,
            Err(detail) => {
                out.events.push(Event::SnapshotRefused {
                    upto: s.upto,
                    detail,
                });
                return;
            }
        };
        let fetch_for = self.snap.fetch_for;
        if fetch_for == FetchFor::Realign || !self.needs_install() {
            if !self.realign(&ms, from, out) {
                out.events.push(Event::SnapshotStale {
                    upto: s.upto,
                    delivered: self.snap.position,
                });
            }
            return;
        }
        let behind_ring = ms
            .rings
            .iter()
            .zip(&self.slots)
            .any(|(r, slot)| r.upto < slot.ring.delivered_upto());
        if ms.position < self.snap.position || ms.turn < self.merger.turn || behind_ring {
            // The learner moved past it meanwhile, in some ring: a later one will do.
            out.events.push(Event::SnapshotStale {
                upto: s.upto,
                delivered: self.snap.position,
            });
            return;
        }
        let same_values =
            ms.rings.iter().zip(&self.merger.rings).all(|(r, q)| {
                !r.learner || q.follow.span_from(ms.turn) == r.follow.span_from(ms.turn)
            });
        let follows_all = ms
            .rings
            .iter()
            .all(|r| !r.learner || r.follow.span_from(ms.turn) == Some((ms.turn, None)));
        let adopt = !same_values && fetch_for == FetchFor::Adopt && follows_all;
        // A ring the peer did not follow up to the snapshot's turn has counted fewer slots
        // than the turn's (`RingState::frontier`): the instances still to come in those
        // turns are passed over by a merge at that turn. This learner must not pass over
        // instances of a ring it follows there (the merge's invariant: a ring followed in
        // a turn below the merge's has all of the turn's slots counted). Multi-Ring
        // power_loss seed 1060: a peer that subscribed to ring 1 from the snapshot's very
        // turn reads alike from there, but ring 1's instances decided later in the turns
        // before were never delivered here, though this learner followed ring 1 there.
        let m = self.merger.m;
        let passes_over = ms.rings.iter().zip(&self.merger.rings).any(|(r, q)| {
            let follow = if adopt { r.follow } else { q.follow };
            r.learner
                && r.frontier < ms.turn.saturating_mul(m)
                && follow
                    .span_from(r.frontier / m.max(1))
                    .is_some_and(|(first, _)| first < ms.turn)
        });
        if (!same_values && !adopt) || passes_over {
            // Its state holds other rings' values than this learner's would (it changed its
            // subscriptions since it reported), or it would pass over a ring's instances
            // this learner follows: another peer's may fit (`try_fetch`).
            let upto = self
                .snap
                .wait
                .as_ref()
                .and_then(|w| w.behind.first())
                .map_or(0, |&(r, _, _)| ms.rings[r].upto);
            if let Some(w) = self
                .snap
                .wait
                .as_mut()
                .filter(|_| !self.snap.fetch_retained)
            {
                // One entry per peer (its latest refusal): bounded by the alike peers. (Not
                // for a retained snapshot: its report says nothing of it.)
                w.refused.retain(|&(n, _)| n != from);
                w.refused.push((from, upto));
            }
            out.events.push(Event::SnapshotRefused {
                upto: s.upto,
                detail: if passes_over {
                    format!(
                        "node {} did not follow, before turn {}, a ring this learner \
                         follows there; another peer's snapshot is looked for",
                        from.0, ms.turn
                    )
                } else {
                    format!(
                        "node {} follows other rings from turn {}; another peer's snapshot \
                         is looked for",
                        from.0, ms.turn
                    )
                },
            });
            self.try_fetch(out);
            return;
        }
        out.events.push(Event::SnapshotInstalled {
            upto: s.upto,
            app_bytes: s.app.len(),
        });
        out.installs.push(Install {
            snapshot: s.clone(),
            position: out.deliveries.len(),
        });
        // Adopted: the peer follows every ring from the snapshot's turn on, so this learner
        // takes its subscriptions and misses none of the values it followed.
        self.apply(&ms, &s, out, !adopt, true);
    }

    /// A transfer whose chunk did not come: ask again, give up after a few tries; while a
    /// snapshot is awaited and no transfer is under way, look for a peer again (a newer
    /// snapshot may have been reported).
    pub(super) fn snapshot_tick(&mut self, out: &mut Outbox<Msg<R>>) {
        if let Some(t) = self.snap.fetcher.transfer.as_ref()
            && self.now >= t.last_progress_us + FETCH_TIMEOUT_US
        {
            if self.snap.fetch_retries >= FETCH_RETRIES_MAX {
                self.snap.fetcher.abandon();
                out.events.push(Event::SnapshotTransferGivenUp {
                    why: "the peer stopped answering".into(),
                });
            } else {
                self.snap.fetch_retries += 1;
                let group = self
                    .snap
                    .wait
                    .as_ref()
                    .and_then(|w| w.behind.first())
                    .map_or(self.slots[0].group, |&(r, _, _)| self.slots[r].group);
                if let Some((peer, fetch)) = self.snap.fetcher.retry(self.now) {
                    let body = self.fetch_body(fetch);
                    out.send(peer, MessageOf { group, body });
                }
            }
        }
        self.try_fetch(out);
    }
}

/// A learner's class in ring `group` (the heartbeats' `snapshot_class`): 0 if it does not
/// follow the ring from `turn` on (anyone's snapshot gives it the ring's slot count: it
/// delivers none of its values there); `CLASS_ALL` if it follows every ring it learns
/// from turn 0 on, without end; otherwise a digest of what it follows in every ring, from
/// which turn to which, never 0 (see the module comment, "Classes"). Learners of one class
/// have delivered the same values and deliver the same from `turn` on, so one can install
/// another's snapshot; the ring's coordinator trims below a quorum of each class
/// (`ring::snapshot::quorum_trim_point_by_class`).
pub(super) fn ring_class(follows: &[(GroupId, bool, Follow)], group: GroupId, turn: u64) -> u64 {
    let followed = follows
        .iter()
        .any(|&(g, learner, f)| g == group && learner && f.followed_from(turn));
    if !followed {
        return 0;
    }
    let all_along = Follow::On {
        from: 0,
        until: None,
    };
    if follows
        .iter()
        .all(|&(_, learner, f)| !learner || f == all_along)
    {
        return CLASS_ALL;
    }
    let mut e = Encoder::new();
    for &(g, learner, f) in follows {
        if !learner {
            continue;
        }
        e.put_u16(g.0);
        match f {
            Follow::Off => e.put_u8(0),
            Follow::On { from, until } => {
                e.put_u8(2);
                e.put_u64(from);
                e.put_u64(until.unwrap_or(u64::MAX));
            }
        }
    }
    let b = e.to_bytes();
    let h =
        u64::from(crc32c::crc32c(&b)) | (u64::from(crc32c::crc32c_append(0x5a5a_5a5a, &b)) << 32);
    if h == 0 || h == CLASS_ALL { 2 } else { h }
}

/// The nodes whose snapshots fit `me`'s: members of exactly the same rings, with the same
/// learner role in each.
pub(super) fn alike_nodes<C: crate::ring::RingConfigView>(
    rings: &[super::RingSpecOf<C>],
    me: NodeId,
) -> Vec<NodeId> {
    let role = |r: &super::RingSpecOf<C>, n: NodeId| {
        r.ring
            .members()
            .iter()
            .find(|m| m.id == n)
            .map(|m| m.roles.learner)
    };
    let mut all: Vec<NodeId> = rings
        .iter()
        .flat_map(|r| r.ring.members().iter().map(|m| m.id))
        .filter(|&n| n != me)
        .collect();
    all.sort_unstable();
    all.dedup();
    all.retain(|&n| rings.iter().all(|r| role(r, n) == role(r, me)));
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Batch, ValueId};

    fn sample() -> MergeSnapshot {
        let batch = Batch::single(
            ValueId {
                node: NodeId(3),
                seq: 7,
            },
            Bytes::from_static(b"value"),
        );
        let mut d = Delivery::new(5, batch);
        d.group = GroupId(2);
        let mut e = Encoder::new();
        crate::dedup::Dedup::default().encode(&mut e);
        let dedup = e.to_bytes();
        MergeSnapshot {
            position: 40,
            turn: 9,
            m: 1,
            rings: vec![
                RingState {
                    group: GroupId(1),
                    learner: true,
                    upto: 12,
                    dedup: dedup.clone(),
                    frontier: 9,
                    follow: Follow::On {
                        from: 0,
                        until: None,
                    },
                    value_slots: 8,
                    misaligned: false,
                    entries: Vec::new(),
                },
                RingState {
                    group: GroupId(2),
                    learner: true,
                    upto: 6,
                    dedup,
                    frontier: 12,
                    follow: Follow::On {
                        from: 3,
                        until: Some(20),
                    },
                    value_slots: 4,
                    misaligned: false,
                    entries: vec![(10, d)],
                },
            ],
        }
    }

    #[test]
    fn classes_tell_a_late_subscriber_from_a_learner_that_followed_all_along() {
        let (g1, g2) = (GroupId(1), GroupId(2));
        let on = |from| Follow::On { from, until: None };
        let all = [(g1, true, on(0)), (g2, true, on(0))];
        let late = [(g1, true, on(50)), (g2, true, on(0))];
        assert_eq!(ring_class(&all, g1, 100), CLASS_ALL);
        // Alike from turn 50 on, but the late one's state lacks ring 1's values before:
        // the first design gave both CLASS_ALL here (seeds 1554, 1655).
        assert_ne!(ring_class(&late, g1, 100), CLASS_ALL);
        assert_ne!(ring_class(&late, g1, 100), 0);
        assert_eq!(ring_class(&late, g1, 100), ring_class(&late, g2, 100));
        let ends = [
            (g1, true, on(0)),
            (
                g2,
                true,
                Follow::On {
                    from: 0,
                    until: Some(200),
                },
            ),
        ];
        assert_ne!(ring_class(&ends, g1, 100), ring_class(&all, g1, 100));
        // Not following ring 1 from the turn on: class 0 there, whatever the rest.
        let off = [(g1, true, Follow::Off), (g2, true, on(0))];
        assert_eq!(ring_class(&off, g1, 100), 0);
        assert_ne!(ring_class(&off, g2, 100), 0);
        // A ring the node does not learn does not count.
        let not_learner = [(g1, false, Follow::Off), (g2, true, on(0))];
        assert_eq!(ring_class(&not_learner, g2, 100), CLASS_ALL);
    }

    #[test]
    fn a_merge_snapshot_round_trips_and_every_truncation_is_an_error() {
        let s = sample();
        let b = s.encode();
        assert_eq!(MergeSnapshot::decode(b.clone()), Ok(s.clone()));
        assert_eq!(s.rings[1].covered(), 4, "before the first waiting instance");
        assert_eq!(
            s.rings[0].covered(),
            12,
            "nothing waits: the learner's position"
        );
        for cut in 0..b.len() {
            assert!(
                MergeSnapshot::decode(b.slice(..cut)).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_merge_state_that_could_not_be_is_refused() {
        // A waiting instance in a turn already delivered, past the frontier, or past the
        // learner; rings out of group order; M of 0.
        let mut s = sample();
        s.rings[1].entries[0].0 = 8;
        assert!(MergeSnapshot::decode(s.encode()).is_err());
        let mut s = sample();
        s.rings[1].entries[0].0 = 12;
        assert!(MergeSnapshot::decode(s.encode()).is_err());
        let mut s = sample();
        s.rings[1].entries[0].1.instance = 7;
        assert!(MergeSnapshot::decode(s.encode()).is_err());
        let mut s = sample();
        s.rings.swap(0, 1);
        assert!(MergeSnapshot::decode(s.encode()).is_err());
        let mut s = sample();
        s.m = 0;
        assert!(MergeSnapshot::decode(s.encode()).is_err());
        // Turns and slots where the merge's arithmetic would overflow.
        let mut s = sample();
        s.turn = u64::MAX;
        assert!(MergeSnapshot::decode(s.encode()).is_err());
        let mut s = sample();
        s.rings[0].frontier = u64::MAX;
        assert!(MergeSnapshot::decode(s.encode()).is_err());
        let mut s = sample();
        s.rings[0].follow = Follow::On {
            from: u64::MAX - 1,
            until: None,
        };
        assert!(MergeSnapshot::decode(s.encode()).is_err());
        let mut s = sample();
        s.rings[0].dedup = Bytes::from_static(b"\xff\xff");
        assert!(MergeSnapshot::decode(s.encode()).is_err());
    }
}
