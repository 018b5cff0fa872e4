//! Multi-Ring Paxos: seed 000 §2.4 (figure 2.3), §3.1.2 (the coordinator's skips) and
//! §3.1.4 (`MultiRingLearner`), over rings of any ring protocol that implements
//! [`ComposableRing`]: U-Ring Paxos (`MultiRing`, as in the seed) or Ring Paxos with ip-multicast
//! (`MultiRingPaxos`).
//!
//! A node takes part in several rings at once, each an independent ring protocol instance
//! with its own roles, coordinator and instances; one ring is one group,
//! and its messages carry the group in the frame header. Proposers propose to one ring.
//! Learners follow a set of rings and deliver them merged (`merge.rs`): M slots from each
//! followed ring in turn, in group order. Two learners that share rings deliver those rings'
//! values in the same relative order (atomic multicast).
//!
//! **Skips** (`skip.rs`): a ring with less traffic than λ per Δt is topped up by its
//! coordinator with one skip instance standing for the missing slots, so a quiet ring
//! never holds a busy one back. λ adapts: learners report the value rate of the busiest
//! ring they follow, and λ = 1.5 × that rate × Δt. A learner whose merge waits for a ring
//! tells that ring's coordinator at once; a quiet ring then skips past what the learner
//! needs, a busy ring only when it is more than λ behind (so busy rings never chase each
//! other).
//!
//! **Subscribe and unsubscribe** at run time, at a point every learner agrees on: the
//! learner asks the ring's coordinator to decide a control value in that ring. The change
//! takes effect at turn `max(barrier, turn(slot of the control) + 1)`, where the barrier
//! is the learner's turn when it asked (it does not start that turn before the control is
//! decided). Both numbers are in the decided control, so anyone who reads the ring's log
//! knows exactly which of its values the learner delivered.
//!
//! **Snapshots and trimming** (`snapshot.rs`, issue 33): with the rings' `learner_snapshots`
//! on, a learner's snapshot is the merge's (position, turn, and per ring the learner's
//! position, slot frontier, follow points and waiting instances); each ring trims below
//! its learners' snapshots at its own point, and a learner behind a ring's trim point
//! installs a peer's snapshot instead of skipping the ring.
//!
//! The ring decides the merge's decrees as opaque meta decrees (`Decree::Meta`) and reports
//! every instance that delivers nothing as a pass (`ring::Pass`); this module gives them
//! their meaning: a meta decree without data is a skip of `weight` slots, one with data a
//! control value ([`skip_decree`], [`control_decree`]).
//!
//! Departures from the seed: the merge counts *slots of instances* (one per instance of
//! values, k per skip of k), not single values, because a ring protocol batches many values
//! into one instance; Δt defaults to 10 ms, not 100 ms (see `config.rs`); λ is measured,
//! not configured.

pub mod config;
pub(crate) mod merge;
pub mod messages;
mod skip;
mod snapshot;

pub use crate::{MultiRing, MultiRingConfig, MultiRingMessage as Message, RingSpec};
pub use config::ProposeTo;
pub use config::{MultiRingConfigOf, RingSpecOf};
pub use messages::{Body, Control, MessageOf, Report};

use crate::ProposeError;
use crate::config::{ConfigError, StartInfo};
use crate::event::Event;
use crate::protocol::{GroupPosition, GroupStatus, Outbox, Protocol, Status, Subscription};
use crate::ring::{ComposableRing, Pass, RingConfigView};
use crate::storage::AcceptorStore;
use crate::types::{GroupId, Micros, NodeId, ValueId};
use bytes::Bytes;
use merge::{Follow, Merger, RingQueue};
use skip::SkipState;
use std::collections::VecDeque;
use std::fmt;

/// Why a subscribe or unsubscribe was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubscribeError {
    UnknownRing(GroupId),
    /// This node is not a learner of that ring.
    NotALearner(GroupId),
    AlreadySubscribed(GroupId),
    NotSubscribed(GroupId),
    /// One change at a time: an earlier request is not decided yet.
    Pending(GroupId),
    /// This learner skipped instances of the ring that every acceptor had trimmed, so it no
    /// longer knows the ring's slot count and cannot merge it (the rings take no snapshots:
    /// with them, a snapshot carries the slot count, `snapshot.rs`).
    Misaligned(GroupId),
}

impl fmt::Display for SubscribeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubscribeError::UnknownRing(g) => write!(f, "ring {} is not configured", g.0),
            SubscribeError::NotALearner(g) => {
                write!(f, "this node is not a learner of ring {}", g.0)
            }
            SubscribeError::AlreadySubscribed(g) => write!(f, "already following ring {}", g.0),
            SubscribeError::NotSubscribed(g) => write!(f, "not following ring {}", g.0),
            SubscribeError::Pending(g) => {
                write!(
                    f,
                    "a subscription change for ring {} is not decided yet",
                    g.0
                )
            }
            SubscribeError::Misaligned(g) => write!(
                f,
                "ring {} was trimmed past this learner; it cannot be merged without a snapshot",
                g.0
            ),
        }
    }
}

impl std::error::Error for SubscribeError {}

/// A subscription change this learner asked for and has not seen decided.
#[derive(Debug)]
struct PendingControl {
    ring: usize,
    control: Control,
    sent_us: Micros,
}

/// One ring at this node.
struct Slot<R> {
    group: GroupId,
    ring: R,
    /// Deliveries held because the merge queue is full.
    paused: bool,
    /// The ring's slot count here is unknown (trimmed instances skipped).
    misaligned: bool,
    skip: SkipState,
    /// Most instances the ring's merge queue held after an input, since start.
    buffered_max: usize,
}

/// A skip of `k` slots (seed 000 §3.1.4), as the ring decides it: a meta decree of weight
/// `k` without data.
pub fn skip_decree(k: u32) -> (u32, Bytes) {
    (k, Bytes::new())
}

/// A subscribe or unsubscribe control value, as the ring decides it: a meta decree of
/// weight 1 (it takes the one slot its instance is) with the encoded [`Control`].
pub fn control_decree(c: &Control) -> (u32, Bytes) {
    (1, c.encode())
}

/// The messages of a Multi-Ring node over rings of protocol `R`.
pub type Msg<R> = MessageOf<<R as Protocol>::Message>;

/// One node of a Multi-Ring Paxos deployment: every ring it is a member of, and the merge.
/// `R` is the ring protocol (see the aliases `MultiRing` and `MultiRingPaxos`).
pub struct MultiRingOf<R: ComposableRing> {
    cfg: MultiRingConfigOf<R::Config>,
    me: NodeId,
    incarnation: u64,
    /// In group order, aligned with `merger.rings`.
    slots: Vec<Slot<R>>,
    merger: Merger,
    scratch: Outbox<R::Message>,
    /// Passes taken from a ring after an input (see `absorb`); kept for its capacity.
    passes: Vec<Pass>,
    pending: Option<PendingControl>,
    next_nonce: u64,
    next_rr: usize,
    announced: bool,
    next_report_us: Micros,
    now: Micros,
    /// Per sync job in flight, oldest first: the slots whose stores put a part in it. Only
    /// those hear its end: a store that synced in place for a job has nothing in flight for
    /// it, and must not end an older job of its own early (the driver runs a few at once).
    sync_parts: VecDeque<Vec<usize>>,
    /// Snapshots, trimming per ring, and the install of a peer's snapshot (`snapshot.rs`).
    snap: snapshot::SnapState,
}

impl<R: ComposableRing> MultiRingOf<R> {
    /// Builds this node's rings. `store` is called once per ring this node is a member of.
    /// Each ring's proposer numbers its values in its own space: the ring's group in the top
    /// 8 bits of the sequence number, so ids never collide across rings.
    pub fn new(
        cfg: MultiRingConfigOf<R::Config>,
        me: NodeId,
        start: StartInfo,
        mut store: impl FnMut(GroupId) -> Box<dyn AcceptorStore + Send>,
    ) -> Result<MultiRingOf<R>, ConfigError> {
        cfg.validate()?;
        let mut specs: Vec<&RingSpecOf<R::Config>> = cfg
            .rings
            .iter()
            .filter(|r| r.ring.members().iter().any(|m| m.id == me))
            .collect();
        specs.sort_by_key(|r| r.group);
        if specs.is_empty() {
            return Err(ConfigError {
                field: "rings",
                reason: format!("node {} is a member of no ring", me.0),
            });
        }
        // Each ring's proposer numbers its values in its own range: the ring's group in the
        // top byte, then this life's range (`StartInfo::start_seq_for`: the incarnation
        // above bit 40). Eight bits of group leave 16 for the incarnation: a later life
        // would reuse the ids of an earlier one, so it is refused, not wrapped.
        if start.start_seq >= 1 << 56 {
            return Err(ConfigError {
                field: "start.incarnation",
                reason: format!(
                    "incarnation {} leaves no room for the ring in a Multi-Ring value id \
                     (at most {} restarts)",
                    start.incarnation,
                    (1u64 << 16) - 1
                ),
            });
        }
        let initial = cfg.initial_subscriptions(me);
        // Snapshots are the rings' setting (`learner_snapshots`; `validate` has them agree):
        // the merge takes them for every ring at once (`snapshot.rs`).
        let snapshots_on = cfg.rings.iter().all(|r| r.ring.learner_snapshots());
        let mut slots = Vec::new();
        let mut queues = Vec::new();
        for spec in specs {
            let ring_start = StartInfo {
                start_seq: start.start_seq | (u64::from(spec.group.0) << 56),
                ..start
            };
            let mut ring = R::compose(spec.ring.clone(), me, ring_start, store(spec.group))?;
            ring.set_report_passes(true);
            ring.set_composed_snapshots(snapshots_on);
            let learner = ring.is_learner();
            let follow = if learner && initial.contains(&spec.group) {
                Follow::On {
                    from: 0,
                    until: None,
                }
            } else {
                Follow::Off
            };
            queues.push(RingQueue {
                group: spec.group,
                learner,
                frontier: 0,
                follow,
                queue: Default::default(),
                queued_bytes: 0,
                value_slots: 0,
            });
            slots.push(Slot {
                group: spec.group,
                ring,
                paused: false,
                misaligned: false,
                skip: SkipState::default(),
                buffered_max: 0,
            });
        }
        let snap = snapshot::SnapState {
            on: snapshots_on,
            alike: snapshot::alike_nodes(&cfg.rings, me),
            ..Default::default()
        };
        Ok(MultiRingOf {
            merger: Merger::new(cfg.merge_m, queues),
            cfg,
            me,
            incarnation: start.incarnation,
            slots,
            scratch: Outbox::new(),
            passes: Vec::new(),
            pending: None,
            next_nonce: 1,
            next_rr: 0,
            announced: false,
            next_report_us: 0,
            now: 0,
            sync_parts: VecDeque::new(),
            snap,
        })
    }

    fn index(&self, group: GroupId) -> Option<usize> {
        self.merger.ring_index(group)
    }

    /// The rings this node is a member of, in group order.
    pub fn groups(&self) -> Vec<GroupId> {
        self.slots.iter().map(|s| s.group).collect()
    }

    /// One ring's protocol state, for status pages and tests.
    pub fn ring(&self, group: GroupId) -> Option<&R> {
        self.index(group).map(|i| &self.slots[i].ring)
    }

    /// Whether this learner follows the ring now (or will, once a decided subscribe takes
    /// effect).
    pub fn follows(&self, group: GroupId) -> bool {
        self.index(group)
            .is_some_and(|i| matches!(self.merger.rings[i].follow, Follow::On { until: None, .. }))
    }

    /// Instances of values of a ring decided here and waiting in the merge for the other rings (the
    /// "values buffered at the learner" of seed 000 figure 4.6).
    pub fn buffered(&self, group: GroupId) -> usize {
        self.index(group)
            .map_or(0, |i| self.merger.rings[i].queue.len())
    }

    /// The high-water mark of [`MultiRing::buffered`] since this node started: the most
    /// instances of the ring held in its merge queue after any input (the benchmark's
    /// `learner_buffer_max`). 0 for a ring this node is not a member of.
    pub fn buffered_max(&self, group: GroupId) -> usize {
        self.index(group).map_or(0, |i| self.slots[i].buffered_max)
    }

    /// The merge's current turn.
    pub fn turn(&self) -> u64 {
        self.merger.turn
    }

    /// Values the merge delivered since the start, the snapshot this learner restored or
    /// installed included: the merge position (a snapshot's `upto`).
    pub fn position(&self) -> u64 {
        self.snap.position
    }

    /// Whether this learner is behind a ring's trim point, waiting for a peer's snapshot.
    pub fn awaits_snapshot(&self) -> bool {
        self.snap.wait.is_some()
    }

    /// Proposes a value to one ring.
    pub fn propose_to(
        &mut self,
        now: Micros,
        group: GroupId,
        payload: Bytes,
        out: &mut Outbox<Msg<R>>,
    ) -> Result<ValueId, ProposeError> {
        self.now = self.now.max(now);
        let Some(i) = self.index(group) else {
            return Err(ProposeError::NotProposer);
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        let r = self.slots[i].ring.propose(self.now, payload, &mut scratch);
        self.absorb(i, &mut scratch, out);
        self.scratch = scratch;
        self.finish(out);
        r
    }

    /// Starts following a ring, at a turn decided in that ring (see the module comment).
    pub fn subscribe(
        &mut self,
        now: Micros,
        group: GroupId,
        out: &mut Outbox<Msg<R>>,
    ) -> Result<(), SubscribeError> {
        self.change(now, group, true, out)
    }

    /// Stops following a ring, at a turn decided in that ring.
    pub fn unsubscribe(
        &mut self,
        now: Micros,
        group: GroupId,
        out: &mut Outbox<Msg<R>>,
    ) -> Result<(), SubscribeError> {
        self.change(now, group, false, out)
    }

    fn change(
        &mut self,
        now: Micros,
        group: GroupId,
        subscribe: bool,
        out: &mut Outbox<Msg<R>>,
    ) -> Result<(), SubscribeError> {
        self.now = self.now.max(now);
        let i = self
            .index(group)
            .ok_or(SubscribeError::UnknownRing(group))?;
        if let Some(p) = &self.pending {
            return Err(SubscribeError::Pending(self.slots[p.ring].group));
        }
        let q = &self.merger.rings[i];
        if !q.learner {
            return Err(SubscribeError::NotALearner(group));
        }
        if self.slots[i].misaligned {
            return Err(SubscribeError::Misaligned(group));
        }
        let following = matches!(q.follow, Follow::On { until: None, .. });
        match (subscribe, following) {
            (true, true) => return Err(SubscribeError::AlreadySubscribed(group)),
            (false, false) => return Err(SubscribeError::NotSubscribed(group)),
            _ => {}
        }
        if subscribe && matches!(q.follow, Follow::On { .. }) {
            // Still delivering up to a decided unsubscribe: wait until it took effect.
            return Err(SubscribeError::Pending(group));
        }
        let control = Control {
            learner: self.me,
            incarnation: self.incarnation,
            nonce: self.next_nonce,
            subscribe,
            barrier_turn: self.merger.turn,
        };
        self.next_nonce += 1;
        self.merger.barrier = Some(control.barrier_turn);
        self.pending = Some(PendingControl {
            ring: i,
            control,
            sent_us: self.now,
        });
        out.events.push(Event::GroupChangeAsked {
            node: self.me,
            group,
            join: subscribe,
            turn: control.barrier_turn,
        });
        self.send_control(out);
        self.finish(out);
        Ok(())
    }

    /// Sends the pending control request to the ring's coordinator (or proposes it, if
    /// this node is the coordinator).
    fn send_control(&mut self, out: &mut Outbox<Msg<R>>) {
        let Some(p) = self.pending.as_mut() else {
            return;
        };
        p.sent_us = self.now;
        let (i, control) = (p.ring, p.control);
        if self.slots[i].ring.is_leading() {
            let mut scratch = std::mem::take(&mut self.scratch);
            let (weight, data) = control_decree(&control);
            self.slots[i]
                .ring
                .propose_meta(self.now, weight, data, &mut scratch);
            self.absorb(i, &mut scratch, out);
            self.scratch = scratch;
        } else if let Some(c) = self.slots[i].ring.coordinator() {
            out.send(
                c,
                MessageOf {
                    group: self.slots[i].group,
                    body: Body::ControlReq(control),
                },
            );
        }
    }

    /// A control value decided in ring `i`, taking the slot `slot`.
    fn on_control(&mut self, i: usize, slot: u64, raw: Bytes, out: &mut Outbox<Msg<R>>) {
        let c = match Control::decode(raw) {
            Ok(c) => c,
            Err(e) => {
                out.events.push(Event::BadControl {
                    group: self.slots[i].group,
                    detail: e.to_string(),
                });
                return;
            }
        };
        let mine = c.learner == self.me && c.incarnation == self.incarnation;
        let Some(p) = self.pending.as_ref() else {
            return;
        };
        if !mine || p.ring != i || p.control.nonce != c.nonce {
            return;
        }
        debug_assert!(
            self.merger.turn <= c.barrier_turn,
            "the merge passed its barrier"
        );
        let at = c.barrier_turn.max(slot / self.merger.m + 1);
        let follow = if c.subscribe {
            Follow::On {
                from: at,
                until: None,
            }
        } else {
            match self.merger.rings[i].follow {
                Follow::On { from, .. } => Follow::On {
                    from,
                    until: Some(at),
                },
                Follow::Off => Follow::Off,
            }
        };
        self.merger.set_follow(i, follow);
        self.pending = None;
        self.merger.barrier = None;
        out.events.push(Event::GroupChanged {
            node: self.me,
            group: self.slots[i].group,
            join: c.subscribe,
            at,
            slot,
        });
    }

    /// Carries a ring's effects into the node's outbox: messages tagged with the ring's
    /// group, acknowledgements as they are, decided instances into the merge.
    fn absorb(&mut self, i: usize, s: &mut Outbox<R::Message>, out: &mut Outbox<Msg<R>>) {
        let group = self.slots[i].group;
        for (to, m) in s.sends.drain(..) {
            out.send(
                to,
                MessageOf {
                    group,
                    body: Body::Ring(m),
                },
            );
        }
        for m in s.multicasts.drain(..) {
            out.multicasts.push(MessageOf {
                group,
                body: Body::Ring(m),
            });
        }
        out.acks.append(&mut s.acks);
        out.needs_sync |= s.needs_sync;
        for e in s.events.drain(..) {
            out.events.push(Event::InGroup {
                group,
                event: Box::new(e),
            });
        }
        if !s.skips.is_empty() {
            // Instances trimmed at every acceptor: their slots are unknown here, so this
            // learner cannot place the ring's later values in the merge any more.
            let (from, to) = (s.skips[0].from, s.skips[s.skips.len() - 1].to);
            let position = out.deliveries.len();
            for mut skip in s.skips.drain(..) {
                skip.group = group;
                skip.position = position;
                out.skips.push(skip);
            }
            if !self.slots[i].misaligned {
                self.slots[i].misaligned = true;
                let was_following = matches!(self.merger.rings[i].follow, Follow::On { .. });
                self.merger.set_follow(i, Follow::Off);
                // Its frontier no longer moves here: the merge must not wait for it when no
                // ring is followed in a turn (found by the learner_skip mix, multiring seed
                // 11: a learner that skipped one ring and unsubscribed from the other stalled).
                self.merger.rings[i].learner = false;
                if was_following {
                    out.subscriptions.push(Subscription {
                        group,
                        subscribed: false,
                        from_start: false,
                        position: out.deliveries.len(),
                    });
                }
                if self.pending.as_ref().is_some_and(|p| p.ring == i) {
                    self.pending = None;
                    self.merger.barrier = None;
                }
                out.events.push(Event::GroupUnmergeable { group, from, to });
            }
        }
        // Deliveries and passes, each in instance order: interleave them by instance.
        let mut taken = std::mem::take(&mut self.passes);
        self.slots[i].ring.drain_passes(&mut taken);
        let mut passes = taken.drain(..).peekable();
        for mut d in s.deliveries.drain(..) {
            while let Some(p) = passes.next_if(|p| p.instance < d.instance) {
                self.push_pass(i, p, out);
            }
            d.group = group;
            if self.slots[i].misaligned {
                continue;
            }
            if self.merger.rings[i].value_slots == 0 {
                self.slots[i].skip.on_first_value(self.now);
            }
            self.merger.rings[i].value_slots += 1;
            self.merger.push(i, 1, Some(d));
        }
        for p in passes {
            self.push_pass(i, p, out);
        }
        self.passes = taken;
        s.clear();
        if let Some((next, floor)) = self.slots[i].ring.take_behind_trim_point() {
            self.behind_trim(i, next, floor, out);
        }
    }

    /// A decided instance that delivers nothing: it takes its slots in the merge (one, or
    /// a skip's k), and a control value takes effect.
    fn push_pass(&mut self, i: usize, p: Pass, out: &mut Outbox<Msg<R>>) {
        if self.slots[i].misaligned {
            return;
        }
        let slot = self.merger.rings[i].frontier;
        self.merger.push(i, p.weight, None);
        if let Some(c) = p.data {
            self.on_control(i, slot, c, out);
        }
    }

    /// After every input: run the merge, and pause or resume rings by their queue.
    fn finish(&mut self, out: &mut Outbox<Msg<R>>) {
        self.run_merge(out);
        // Tell the rings the merge waits for, now (`skip.rs`, rule 4). A skip this node
        // proposes as their coordinator is decided later, unless the ring has one acceptor:
        // then the merge moves at once (a blocked merge returns at its first check).
        self.lag_reports(out);
        self.run_merge(out);
        if self.wait_step() {
            // Behind a ring's trim point: the rings hold until a snapshot is installed.
            return;
        }
        for i in 0..self.slots.len() {
            let q = &self.merger.rings[i];
            let (n, b) = (q.queue.len(), q.queued_bytes);
            self.slots[i].buffered_max = self.slots[i].buffered_max.max(n);
            let control_here = self.pending.as_ref().is_some_and(|p| p.ring == i);
            let full = n >= self.cfg.merge_queue_instances || b >= self.cfg.merge_queue_bytes;
            let low = n < self.cfg.merge_queue_instances / 2 && b < self.cfg.merge_queue_bytes / 2;
            let s = &mut self.slots[i];
            // A ring holding an undecided control of ours is never paused: the merge waits
            // for that control, so pausing could wait forever. Its queue is then bounded by
            // what its coordinator has open ahead of the control.
            if full && !s.paused && !control_here {
                s.paused = true;
                s.ring.set_delivery_paused(true);
            } else if s.paused && (low || control_here) {
                s.paused = false;
                s.ring.set_delivery_paused(false);
            }
        }
    }

    fn run_merge(&mut self, out: &mut Outbox<Msg<R>>) {
        let (mut subs, mut dels) = (
            std::mem::take(&mut out.subscriptions),
            std::mem::take(&mut out.deliveries),
        );
        let before = dels.len();
        self.merger.run(&mut dels, &mut subs);
        self.snap.position += (dels.len() - before) as u64;
        out.subscriptions = subs;
        out.deliveries = dels;
    }

    /// The subscriptions a learner starts with, announced once.
    fn announce(&mut self, out: &mut Outbox<Msg<R>>) {
        if self.announced {
            return;
        }
        self.announced = true;
        let turn = self.merger.turn;
        for q in &self.merger.rings {
            if !q.learner {
                continue;
            }
            // At start, or after a restored snapshot: what the learner follows from there.
            out.subscriptions.push(Subscription {
                group: q.group,
                subscribed: q.follow.seen_at(turn),
                from_start: true,
                position: out.deliveries.len(),
            });
        }
    }
}

impl<R: ComposableRing> Protocol for MultiRingOf<R> {
    type Message = Msg<R>;

    fn node(&self) -> NodeId {
        self.me
    }

    fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        out: &mut Outbox<Msg<R>>,
    ) -> Result<ValueId, ProposeError> {
        // No allocation on this per-value path: scan the rings in place.
        let n = self.slots.len();
        let is_proposer = |i: &usize| self.slots[*i].ring.is_proposer();
        let target = match self.cfg.propose_to {
            ProposeTo::Group(g) => self.index(g),
            ProposeTo::FirstRing => (0..n).find(is_proposer),
            ProposeTo::RoundRobin => {
                let start = self.next_rr;
                self.next_rr = self.next_rr.wrapping_add(1);
                let ring_at = |k: usize| (start + k) % n;
                (0..n)
                    .map(ring_at)
                    .find(|&i| self.slots[i].ring.is_proposer() && self.slots[i].ring.can_propose())
                    .or_else(|| (0..n).map(ring_at).find(is_proposer))
            }
        };
        let Some(i) = target else {
            return Err(ProposeError::NotProposer);
        };
        let group = self.slots[i].group;
        self.propose_to(now, group, payload, out)
    }

    fn receive(&mut self, now: Micros, from: NodeId, msg: Msg<R>, out: &mut Outbox<Msg<R>>) {
        self.now = self.now.max(now);
        self.announce(out);
        let Some(i) = self.index(msg.group) else {
            // A ring this node is not in: ignore (a misrouted or stale message).
            return;
        };
        match msg.body {
            Body::Ring(m) => {
                let mut scratch = std::mem::take(&mut self.scratch);
                self.slots[i].ring.receive(self.now, from, m, &mut scratch);
                self.absorb(i, &mut scratch, out);
                self.scratch = scratch;
            }
            Body::Report(r) => {
                self.slots[i].skip.on_report(self.now, &r);
                // A lag report asks for a skip now, not at the next tick.
                self.coordinator_skip(i, out);
            }
            Body::SnapshotFetch(f) => self.on_snapshot_fetch(from, msg.group, f, false, out),
            Body::RetainedFetch(f) => self.on_snapshot_fetch(from, msg.group, f, true, out),
            Body::SnapshotChunk(c) => self.on_snapshot_chunk(from, msg.group, c, out),
            Body::ControlReq(c) => {
                if c.learner != from {
                    return; // a node asks for itself only
                }
                if self.slots[i]
                    .skip
                    .should_propose_control(self.now, &c, &self.cfg)
                {
                    let mut scratch = std::mem::take(&mut self.scratch);
                    let (weight, data) = control_decree(&c);
                    self.slots[i]
                        .ring
                        .propose_meta(self.now, weight, data, &mut scratch);
                    self.absorb(i, &mut scratch, out);
                    self.scratch = scratch;
                }
            }
        }
        self.finish(out);
    }

    fn tick(&mut self, now: Micros, out: &mut Outbox<Msg<R>>) {
        self.now = self.now.max(now);
        self.announce(out);
        let mut scratch = std::mem::take(&mut self.scratch);
        for i in 0..self.slots.len() {
            self.slots[i].ring.tick(self.now, &mut scratch);
            self.absorb(i, &mut scratch, out);
        }
        self.scratch = scratch;
        self.skip_tick(out);
        self.snapshot_tick(out);
        if self
            .pending
            .as_ref()
            .is_some_and(|p| self.now >= p.sent_us + self.cfg.control_retry_us)
        {
            self.send_control(out);
        }
        self.finish(out);
    }

    fn tick_interval_us(&self) -> Micros {
        self.slots
            .iter()
            .map(|s| s.ring.tick_interval_us())
            .min()
            .unwrap_or(1_000)
            .min(self.cfg.skip_interval_us / 2)
            .max(1)
    }

    fn can_propose(&self) -> bool {
        match self.cfg.propose_to {
            ProposeTo::Group(g) => self
                .index(g)
                .is_some_and(|i| self.slots[i].ring.can_propose()),
            _ => self.slots.iter().any(|s| s.ring.can_propose()),
        }
    }

    fn join_group(
        &mut self,
        now: Micros,
        group: GroupId,
        on: bool,
        out: &mut Outbox<Msg<R>>,
    ) -> Result<(), String> {
        self.change(now, group, on, out).map_err(|e| e.to_string())
    }

    fn sync_storage(&mut self) -> Result<(), crate::storage::StorageError> {
        // One group commit per ring store: each ring has its own log.
        for slot in &mut self.slots {
            slot.ring.sync_storage()?;
        }
        Ok(())
    }

    /// Every ring's store writes now; their fdatasyncs go into one job.
    fn begin_sync_storage(
        &mut self,
    ) -> Result<Option<crate::storage::SyncJob>, crate::storage::StorageError> {
        let mut job = crate::storage::SyncJob::default();
        let mut parts = Vec::new();
        let mut first_err = None;
        for (k, slot) in self.slots.iter_mut().enumerate() {
            match slot.ring.begin_sync_storage() {
                Ok(Some(j)) => {
                    job.append(j);
                    parts.push(k);
                }
                Ok(None) => {}
                // Later rings still begin (and end) theirs: each store expects its end_sync.
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_err {
            if !job.is_empty() {
                let r = job.run();
                for k in parts {
                    let _ = self.slots[k].ring.end_sync_storage(r.clone());
                }
            }
            return Err(e);
        }
        if job.is_empty() {
            return Ok(None);
        }
        self.sync_parts.push_back(parts);
        Ok(Some(job))
    }

    fn end_sync_storage(
        &mut self,
        result: Result<(), crate::storage::StorageError>,
    ) -> Result<(), crate::storage::StorageError> {
        // Every ring's store with a part in the job hears the result, whatever the others
        // say.
        let parts = self.sync_parts.pop_front().unwrap_or_default();
        let mut first_err = None;
        for k in parts {
            if let Err(e) = self.slots[k].ring.end_sync_storage(result.clone()) {
                first_err.get_or_insert(e);
            }
        }
        result.and(first_err.map_or(Ok(()), Err))
    }

    fn log_bytes(&self) -> u64 {
        self.slots.iter().map(|s| s.ring.log_bytes()).sum()
    }

    fn snapshots_supported(&self) -> bool {
        self.snap.on && self.slots.iter().any(|s| s.ring.is_learner())
    }

    /// The merge's snapshot, standing in every ring at once (`snapshot.rs`).
    fn take_snapshot(&mut self, app: Bytes) -> Result<crate::protocol::Snapshot, String> {
        self.take_snapshot_here(app)
    }

    fn restore_snapshot(&mut self, snapshot: &crate::protocol::Snapshot) -> Result<(), String> {
        self.restore_snapshot_here(snapshot)
    }

    fn snapshot_groups(&self, snapshot: &crate::protocol::Snapshot) -> Vec<GroupPosition> {
        self.snapshot_groups_of(snapshot)
    }

    fn status(&self) -> Status {
        // Each ring's status once; the node's figures are sums over them.
        let rings: Vec<Status> = self.slots.iter().map(|s| s.ring.status()).collect();
        let mut st = rings[0].clone();
        st.amnesic = rings.iter().any(|r| r.amnesic);
        st.values_in_flight = rings.iter().map(|r| r.values_in_flight).sum();
        st.delivered_upto = self.merger.turn;
        st.log_bytes = rings.iter().map(|r| r.log_bytes).sum();
        st.log_appended_bytes = rings.iter().map(|r| r.log_appended_bytes).sum();
        st.groups = self
            .slots
            .iter()
            .zip(&rings)
            .map(|(s, ring)| GroupStatus {
                group: s.group,
                coordinator: ring.coordinator,
                delivered_upto: ring.delivered_upto,
                following: self.follows(s.group),
                buffered_instances: self.buffered(s.group),
                buffered_instances_max: self.buffered_max(s.group),
            })
            .collect();
        st
    }
}
