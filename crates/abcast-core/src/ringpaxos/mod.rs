//! Ring Paxos with IP multicast: seed 003 §4 (Algorithm 2, §4.1 normal operation, §4.2
//! abnormal cases, §4.3 optimizations) and §6.1 (the coordinator's circular buffer, flow
//! control, decisions piggy-backed on proposals), as a pure state machine.
//!
//! Roles come from [`RingPaxosConfig`]. The coordinator is the first live acceptor in
//! configuration order; at phase 1 it lays out the ring of phase 2: itself *last*, preceded
//! by the first f acceptors whose promises arrived (an m-quorum of f + 1; the other acceptors
//! are spares). The path of one value:
//!
//! 1. `propose` puts it in the proposer's open batch (`proposer.rs`); the batch goes to the
//!    coordinator by unicast (`Submit`).
//! 2. The coordinator (`coordinator.rs`) gives it an instance while its buffer has room and
//!    ip-multicasts `Phase2a {ballot, ring, decisions of earlier instances, instance, value}`
//!    (Task 3; §6.1 "one part ids of decided values, the second part new proposed values").
//! 3. Every acceptor votes on ip-delivering it (Task 4); the first of the ring sends
//!    `Phase2b {ballot, instance, vid}` to its successor, each next one forwards it only if its
//!    v-vid equals the c-vid (Task 5), and the coordinator, last, decides.
//! 4. Decisions ride on the next `Phase2a`, or leave alone in a `Decision` multicast after
//!    `decision_linger_us` (§4.3). A learner (`learner.rs`) learns an instance only when it
//!    holds both the value of a `Phase2a` and the decision; it delivers in instance order and
//!    asks the coordinator's buffer or its preferred acceptor for what it missed (§4.2).
//!
//! Failures (§4.2): heartbeats between all members; a failed coordinator is replaced by the
//! next live acceptor, which runs phase 1 with a higher ballot and a new ring and re-proposes
//! what phase 1 found (the highest-ballot vote, a no-op for a hole). A suspected ring acceptor,
//! or an instance undecided for `ring_timeout_us`, makes the coordinator run phase 1 again with
//! a new ring made of acceptors that answered.
//!
//! **Acceptors must not forget (§4.2).** With in-memory stores a restarted acceptor has
//! forgotten its promise and votes. We use the ring family's incarnation epochs
//! (`ring/view.rs`, `ring/acceptor.rs`): a restart bumps the acceptor's incarnation, which
//! changes the epoch (the vector of incarnations every node merges from heartbeats and
//! phase 1). Phase 1 carries the vector, `Phase2a` its fingerprint, and an acceptor votes
//! and promises only in its own epoch, so no ballot that may have counted the forgotten promise
//! collects its votes again. The restarted acceptor answers phase 1 but its promise does not
//! count until it is *repaired*: it must learn every decision up to the highest instance the
//! first phase 1 after its restart found (`Repair`). Any value chosen with its forgotten vote
//! was therefore found by a quorum of acceptors that remember. Only acceptors' incarnations
//! enter the epoch (a learner-only restart does not force a new phase 1).
//!
//! Departures from the seed: phase 1 promises cover every instance (one phase 1 per takeover,
//! run in rounds of bounded replies); a ring is carried in every `Phase2a` instead of only in
//! phase 1a, because it is chosen from the acceptors that answered; a `Phase2b` that overtakes
//! its `Phase2a` waits in a small bounded stash instead of being dropped.

pub mod acceptor;
pub mod config;
pub mod coordinator;
pub mod learner;
pub mod messages;
pub mod proposer;
pub mod snapshot;

use crate::config::{ConfigError, StartInfo};
pub use config::RingPaxosConfig;
pub use messages::Message;

use crate::ProposeError;
use crate::batcher::Batcher;
use crate::protocol::{Outbox, Protocol, Status};
use crate::ring::acceptor::AcceptorState;
use crate::ring::learner::{LearnerState, PayloadCache};
use crate::ring::{RingView, bit, fingerprint};
use crate::storage::AcceptorStore;
use crate::types::{Ballot, BatchKey, Decree, Instance, Micros, NodeId, ValueId};
use acceptor::RingMemory;
use bytes::Bytes;
use coordinator::CoordinatorState;
use messages::{Heartbeat, Vid};

pub type Out = Outbox<Message>;

/// One node of one Ring Paxos group.
pub struct RingPaxos {
    pub(crate) cfg: RingPaxosConfig,
    pub(crate) me: NodeId,
    pub(crate) pos: usize,
    /// f + 1: phase 1 quorum and ring size.
    pub(crate) quorum: usize,
    /// Member positions of acceptors, in configuration order.
    pub(crate) acceptors: Vec<usize>,
    pub(crate) acceptor_mask: u64,
    /// This node's index among learners (for its preferred acceptor, §4.2).
    pub(crate) learner_index: usize,
    pub(crate) view: RingView,
    pub(crate) now: Micros,
    pub(crate) prop: Option<Batcher>,
    pub(crate) coord: CoordinatorState,
    pub(crate) acc: Option<AcceptorState>,
    pub(crate) ring: RingMemory,
    pub(crate) learn: LearnerState,
    /// Values of `Phase2a`s (and submits) by id, to match decisions to contents (§6.1).
    pub(crate) cache: PayloadCache,
    /// Highest ballot seen anywhere: a new coordinator picks a higher round.
    pub(crate) max_ballot_seen: Ballot,
    /// This process life's incarnation, put in every ballot it makes (see `Ballot`). Not
    /// `incarnation`, which is 0 for a non-acceptor (epochs count acceptors only).
    pub(crate) ballot_incarnation: u32,
    pub(crate) last_heartbeat_us: Micros,
    /// Heartbeats sent in this process life (see `Heartbeat::seq`).
    pub(crate) heartbeats_sent: u64,
    pub(crate) last_coordinator: Option<usize>,
    /// The coordinator changed in this node's view since the proposer last re-sent its
    /// window: it re-sends once more when that coordinator is heard leading (views change at
    /// slightly different times, and batches re-sent to a node not leading yet are dropped;
    /// found by the simulator's faults-remain phase, uring partition seed 0).
    pub(crate) resend_when_leading: bool,
    /// The first input's time is known: the failure detector's grace period starts there.
    pub(crate) started: bool,
    pub(crate) incarnation: u64,
    /// Snapshots and trimming (`snapshot.rs`).
    pub(crate) snap: crate::ring::snapshot::SnapshotState,
}

impl RingPaxos {
    /// Whether this node runs the broken variant `m` (tests only, `crate::mutation`).
    #[inline(always)]
    pub(crate) fn mutated(&self, m: crate::mutation::Mutation) -> bool {
        crate::mutation::on(self.cfg.mutation(), m)
    }

    pub fn new(
        cfg: RingPaxosConfig,
        me: NodeId,
        start: StartInfo,
        store: Box<dyn AcceptorStore + Send>,
    ) -> Result<RingPaxos, ConfigError> {
        cfg.validate()?;
        let ballot_incarnation = start.ballot_incarnation()?;
        let pos = cfg.position(me).ok_or(ConfigError {
            field: "members",
            reason: format!("node {} is not a member", me.0),
        })?;
        let roles = cfg.members[pos].roles;
        let acceptors = cfg.acceptor_positions();
        let acceptor_mask = acceptors.iter().fold(0u64, |m, &p| m | bit(p));
        let learner_index = cfg.members[..pos]
            .iter()
            .filter(|m| m.roles.learner)
            .count();
        let now = 0;
        // Only an acceptor's restart changes the epoch: it is what phase 1 must account for.
        let incarnation = if roles.acceptor { start.incarnation } else { 0 };
        let view = RingView::new(
            cfg.members.len(),
            pos,
            incarnation,
            cfg.failure_timeout_us,
            now,
        );
        Ok(RingPaxos {
            quorum: cfg.quorum(),
            acceptors,
            acceptor_mask,
            learner_index,
            view,
            now,
            prop: roles.proposer.then(|| Batcher::new(me, start.start_seq)),
            coord: CoordinatorState::new(),
            acc: roles
                .acceptor
                .then(|| AcceptorState::new(store, start.amnesic)),
            ring: RingMemory::default(),
            learn: LearnerState::new(roles.learner, cfg.store_capacity_instances, now),
            cache: PayloadCache::new(cfg.window_bytes.saturating_mul(4).max(64 << 20)),
            max_ballot_seen: Ballot::ZERO,
            ballot_incarnation,
            last_heartbeat_us: 0,
            heartbeats_sent: 0,
            last_coordinator: None,
            resend_when_leading: false,
            started: false,
            incarnation,
            snap: crate::ring::snapshot::SnapshotState::new(cfg.members.len()),
            me,
            pos,
            cfg,
        })
    }

    /// Every input passes here first. At the first one the failure detector starts its
    /// grace period (a node restarted late must hear the others before it suspects them and
    /// elects itself coordinator).
    fn advance(&mut self, now: Micros) {
        if !self.started {
            self.started = true;
            self.view = RingView::new(
                self.cfg.members.len(),
                self.pos,
                self.incarnation,
                self.cfg.failure_timeout_us,
                now,
            );
            self.learn.last_progress_us = now;
        }
        self.now = self.now.max(now);
    }

    pub(crate) fn node_at(&self, p: usize) -> NodeId {
        self.cfg.members[p].id
    }

    pub(crate) fn is_acceptor_pos(&self, p: usize) -> bool {
        self.acceptor_mask & bit(p) != 0
    }

    /// The coordinator this node believes in: the first live acceptor in configuration
    /// order (§4.2 "a failed coordinator is replaced by the next live acceptor").
    pub(crate) fn coordinator_pos(&self) -> Option<usize> {
        let mask = self.acceptor_mask;
        self.view.coordinator(self.now, |p| mask & bit(p) != 0)
    }

    pub(crate) fn note_ballot(&mut self, b: Ballot) {
        self.max_ballot_seen = self.max_ballot_seen.max(b);
    }

    /// A decision `(instance, vid)` reached this node (multicast, or decided here).
    pub(crate) fn learn_decision(
        &mut self,
        instance: Instance,
        ballot: Ballot,
        vid: Vid,
        out: &mut Out,
    ) {
        let key = vid.key();
        let decree = match vid {
            Vid::Noop => Some(Decree::Noop),
            Vid::Key(k) => self.cache.get(&k).map(|b| Decree::Values(b.clone())),
            Vid::Meta { weight, data } => Some(Decree::Meta { weight, data }),
        };
        self.record_decision(instance, ballot, decree, key, out);
    }

    /// Records a decision in the learner, the acceptor store and the proposer (ack).
    pub(crate) fn record_decision(
        &mut self,
        instance: Instance,
        ballot: Ballot,
        decree: Option<Decree>,
        key: Option<BatchKey>,
        out: &mut Out,
    ) {
        if let (Some(acc), Some(d)) = (self.acc.as_mut(), decree.as_ref()) {
            acc.record_decided(instance, ballot, d);
        }
        if let (Some(p), Some(k)) = (self.prop.as_mut(), key)
            && let Some(ack) = p.on_decided(k, self.now)
        {
            out.acks.push(ack);
        }
        self.learn.on_decided(instance, decree, key);
    }

    fn on_heartbeat(&mut self, from_pos: usize, m: Heartbeat, out: &mut Out) {
        let interval_us = self.cfg.heartbeat_interval_us;
        if self
            .view
            .beat(from_pos, m.incarnation, m.seq, self.now, interval_us)
        {
            self.learn.note_peer_delivered(from_pos, m.delivered_upto);
        }
        if m.leading && self.resend_when_leading && self.coordinator_pos() == Some(from_pos) {
            self.resend_when_leading = false;
            self.proposer_resend(out);
        }
        self.note_ballot(m.ballot);
        self.view.merge_epoch(&m.epoch);
        self.on_snapshot_report(from_pos, m.snapshot_upto);
        if m.trim_below > 0 {
            self.on_trim(from_pos, m.trim_below, out);
        }
        if m.amnesic {
            let fp = fingerprint(&m.epoch);
            self.coordinator_on_amnesic_heartbeat(from_pos, fp, out);
        }
        self.learn.decided_max = self
            .learn
            .decided_max
            .max(m.decided_max)
            .max(m.delivered_upto);
    }

    fn send_heartbeats(&mut self, out: &mut Out) {
        if self.last_heartbeat_us != 0
            && self.now < self.last_heartbeat_us + self.cfg.heartbeat_interval_us
        {
            return;
        }
        self.last_heartbeat_us = self.now.max(1);
        let hb = Heartbeat {
            // Only its round matters to the receiver (`note_ballot`); a ballot some
            // coordinator really made, not one pieced together.
            ballot: self.max_ballot_seen,
            incarnation: u64::from(self.ballot_incarnation),
            seq: {
                self.heartbeats_sent += 1;
                self.heartbeats_sent
            },
            delivered_upto: self.learn.delivered_upto(),
            decided_max: self.learn.decided_max,
            leading: self.coord.is_leading(),
            amnesic: self.acc.as_ref().is_some_and(|a| a.amnesic),
            epoch: self.view.epoch().to_vec(),
            snapshot_upto: self.snap.own_upto,
            trim_below: self.trim_point(),
        };
        // The coordinator's own acceptor trims as its heartbeats tell the others.
        if hb.trim_below > 0 {
            self.on_trim(self.pos, hb.trim_below, out);
        }
        for (p, m) in self.cfg.members.iter().enumerate() {
            if p != self.pos {
                out.send(m.id, Message::Heartbeat(hb.clone()));
            }
        }
    }

    /// Work common to every input: deliver what is ready, end amnesia when repaired.
    pub(crate) fn after_input(&mut self, out: &mut Out) {
        let acc = &mut self.acc;
        let dup_by_key = !acc.as_ref().is_some_and(|a| a.amnesic);
        self.learn.drain(
            self.now,
            &mut self.cache,
            &mut out.deliveries,
            dup_by_key,
            |instance, decree, key| {
                if let Some(a) = acc.as_mut() {
                    a.record_learned(instance, decree, key);
                }
            },
        );
        if let Some(a) = self.acc.as_mut()
            && let Some(ev) = a.check_repaired(self.learn.delivered_upto())
        {
            out.events.push(ev);
        }
    }
}

impl crate::ring::RingHost for RingPaxos {
    type Msg = Message;
    fn acceptor_and_learner(&self) -> (Option<&AcceptorState>, &LearnerState) {
        (self.acc.as_ref(), &self.learn)
    }
    fn learner_and_cache(&mut self) -> (&mut LearnerState, &mut PayloadCache) {
        (&mut self.learn, &mut self.cache)
    }
    fn retrieve_max_instances(&self) -> u64 {
        self.cfg.retrieve_max_instances
    }
    fn record_decision(
        &mut self,
        instance: Instance,
        ballot: Ballot,
        decree: Option<Decree>,
        key: Option<crate::types::BatchKey>,
        out: &mut Out,
    ) {
        RingPaxos::record_decision(self, instance, ballot, decree, key, out)
    }
    fn after_input(&mut self, out: &mut Out) {
        RingPaxos::after_input(self, out)
    }
}

impl crate::ring::RingConfigView for RingPaxosConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        RingPaxosConfig::validate(self)
    }
    fn members(&self) -> &[crate::config::Member] {
        &self.members
    }
}

/// Ring Paxos as a ring of Multi-Ring Paxos (`MultiRingPaxos`): its coordinator puts meta
/// decrees in instances ahead of queued batches, and its learner reports passes.
impl crate::ring::ComposableRing for RingPaxos {
    type Config = RingPaxosConfig;
    fn compose(
        cfg: RingPaxosConfig,
        me: NodeId,
        start: StartInfo,
        store: Box<dyn AcceptorStore + Send>,
    ) -> Result<RingPaxos, ConfigError> {
        RingPaxos::new(cfg, me, start, store)
    }
    fn set_report_passes(&mut self, on: bool) {
        self.learn.report_passes = on;
    }
    fn drain_passes(&mut self, into: &mut Vec<crate::ring::Pass>) {
        into.append(&mut self.learn.passes);
    }
    fn set_delivery_paused(&mut self, paused: bool) {
        self.learn.paused = paused;
    }
    fn is_leading(&self) -> bool {
        self.coord.is_leading()
    }
    fn coordinator(&self) -> Option<NodeId> {
        self.coordinator_pos().map(|p| self.node_at(p))
    }
    fn slots_assigned(&self) -> u64 {
        self.coord.slots_assigned
    }
    fn value_slots_assigned(&self) -> u64 {
        self.coord.value_slots_assigned
    }
    fn propose_meta(&mut self, now: Micros, weight: u32, data: Bytes, out: &mut Out) -> bool {
        self.advance(now);
        if !self.coord.is_leading() || self.coord.meta.len() >= crate::ring::meta::META_QUEUE_MAX {
            return false;
        }
        self.coord.meta.push_back(Decree::Meta { weight, data });
        self.assign(out);
        self.after_input(out);
        true
    }
    fn meta_queued(&self) -> usize {
        self.coord.meta.len()
    }
    fn is_proposer(&self) -> bool {
        self.prop.is_some()
    }
    fn is_learner(&self) -> bool {
        self.learn.deliver
    }
}

impl Protocol for RingPaxos {
    type Message = Message;

    fn node(&self) -> NodeId {
        self.me
    }

    fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        out: &mut Out,
    ) -> Result<ValueId, ProposeError> {
        self.advance(now);
        self.proposer_propose(payload, out)
    }

    fn receive(&mut self, now: Micros, from: NodeId, msg: Message, out: &mut Out) {
        self.advance(now);
        let Some(from_pos) = self.cfg.position(from) else {
            return; // not a member
        };
        self.view.contact(from_pos);
        let own = from_pos == self.pos;
        match msg {
            Message::Submit(m) => self.coordinator_on_submit(m.batch, out),
            Message::Phase1a(m) => self.on_phase1a(from_pos, m, out),
            Message::Phase1b(m) => self.on_phase1b(from_pos, m, out),
            // The coordinator handled its own multicasts as it sent them (loopback or not).
            Message::Phase2a(_) | Message::Decision(_) if own => {}
            Message::Phase2a(m) => self.on_phase2a(m, out),
            Message::Phase2b(m) => self.on_phase2b(m, out),
            Message::Decision(m) => {
                self.note_ballot(m.ballot);
                for (i, vid) in m.decisions {
                    self.learn_decision(i, m.ballot, vid, out);
                }
            }
            Message::Nack(m) => self.on_nack(m, out),
            Message::Retrieve(m) => self.on_retrieve(from_pos, m, out),
            Message::Decided(m) => self.on_decided_reply(from_pos, m, out),
            Message::Heartbeat(m) => self.on_heartbeat(from_pos, m, out),
            Message::Repair(m) => self.on_repair(m, out),
            Message::SnapshotFetch(m) => self.on_snapshot_fetch(from_pos, m, out),
            Message::SnapshotChunk(m) => self.on_snapshot_chunk(from_pos, m, out),
        }
        self.after_input(out);
    }

    fn tick(&mut self, now: Micros, out: &mut Out) {
        self.advance(now);
        self.send_heartbeats(out);
        self.coordinator_tick(out);
        self.proposer_tick(out);
        self.learner_tick(out);
        self.snapshot_fetch_tick(out);
        self.after_input(out);
    }

    fn tick_interval_us(&self) -> Micros {
        (self.cfg.batch_linger_us.max(100))
            .min(self.cfg.decision_linger_us.max(100))
            .min(self.cfg.heartbeat_interval_us / 2)
            .max(1)
    }

    fn can_propose(&self) -> bool {
        self.prop
            .as_ref()
            .is_some_and(|p| p.has_room(&self.cfg.batch_limits()))
    }

    fn sync_storage(&mut self) -> Result<(), crate::storage::StorageError> {
        match self.acc.as_mut() {
            Some(acc) => acc.store.sync(),
            None => Ok(()),
        }
    }

    fn begin_sync_storage(
        &mut self,
    ) -> Result<Option<crate::storage::SyncJob>, crate::storage::StorageError> {
        match self.acc.as_mut() {
            Some(acc) => acc.store.begin_sync(),
            None => Ok(None),
        }
    }

    fn end_sync_storage(
        &mut self,
        result: Result<(), crate::storage::StorageError>,
    ) -> Result<(), crate::storage::StorageError> {
        if let Some(acc) = self.acc.as_mut() {
            acc.store.end_sync(&result);
        }
        result
    }

    fn log_bytes(&self) -> u64 {
        self.acc.as_ref().map_or(0, |acc| acc.store.log_bytes())
    }

    fn take_snapshot(&mut self, app: Bytes) -> Result<crate::protocol::Snapshot, String> {
        self.take_snapshot_here(app)
    }

    fn restore_snapshot(&mut self, snapshot: &crate::protocol::Snapshot) -> Result<(), String> {
        self.restore_snapshot_here(snapshot)
    }

    fn status(&self) -> Status {
        Status {
            node: self.me,
            coordinator: self.coordinator_pos().map(|p| self.node_at(p)),
            ballot: self.max_ballot_seen.max(self.coord.ballot),
            leading: self.coord.is_leading(),
            delivered_upto: self.learn.delivered_upto(),
            decided_max: self.learn.decided_max,
            values_in_flight: self.prop.as_ref().map_or(0, |p| p.values_in_flight()),
            amnesic: self.acc.as_ref().is_some_and(|a| a.amnesic),
            view: self
                .view
                .alive_positions(self.now)
                .into_iter()
                .map(|p| self.node_at(p))
                .collect(),
            groups: Vec::new(),
            log_bytes: self.log_bytes(),
            log_appended_bytes: self.acc.as_ref().map_or(0, |a| a.store.appended_bytes()),
        }
    }
}
