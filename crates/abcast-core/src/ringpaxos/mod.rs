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
use crate::ring::{RingNode, RingView, bit};
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
    /// The node state both ring protocols keep (`ring::RingNode`). Its `ballot_incarnation`
    /// is not `incarnation`, which is 0 for a non-acceptor (epochs count acceptors only).
    pub(crate) node: RingNode,
    /// f + 1: phase 1 quorum and ring size.
    pub(crate) quorum: usize,
    /// Member positions of acceptors, in configuration order.
    pub(crate) acceptors: Vec<usize>,
    /// This node's index among learners (for its preferred acceptor, §4.2).
    pub(crate) learner_index: usize,
    pub(crate) coord: CoordinatorState,
    pub(crate) ring: RingMemory,
    /// The first input's time is known: the failure detector's grace period starts there.
    pub(crate) started: bool,
    pub(crate) incarnation: u64,
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
        let member_ids: Vec<NodeId> = cfg.members.iter().map(|m| m.id).collect();
        let view = RingView::new(&member_ids, pos, incarnation, cfg.failure_timeout_us, now);
        let node = RingNode::new(
            me,
            pos,
            &member_ids,
            acceptor_mask,
            view,
            roles.proposer.then(|| Batcher::new(me, start.start_seq)),
            roles
                .acceptor
                .then(|| AcceptorState::new(store, start.amnesic)),
            LearnerState::new(roles.learner, cfg.store_capacity_instances, now),
            PayloadCache::new(cfg.window_bytes.saturating_mul(4).max(64 << 20)),
            ballot_incarnation,
        );
        Ok(RingPaxos {
            quorum: cfg.quorum(),
            node,
            acceptors,
            learner_index,
            coord: CoordinatorState::new(),
            ring: RingMemory::default(),
            started: false,
            incarnation,
            cfg,
        })
    }

    /// Every input passes here first. At the first one the failure detector starts its
    /// grace period (a node restarted late must hear the others before it suspects them and
    /// elects itself coordinator).
    fn advance(&mut self, now: Micros) {
        if !self.started {
            self.started = true;
            let member_ids: Vec<NodeId> = self.cfg.members.iter().map(|m| m.id).collect();
            self.node.view = RingView::new(
                &member_ids,
                self.node.pos,
                self.incarnation,
                self.cfg.failure_timeout_us,
                now,
            );
            self.node.learn.last_progress_us = now;
        }
        self.node.now = self.node.now.max(now);
    }

    pub(crate) fn node_at(&self, p: usize) -> NodeId {
        self.cfg.members[p].id
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
            Vid::Key(k) => self.node.cache.get(&k).map(|b| Decree::Values(b.clone())),
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
        self.node
            .record_in_acceptor(instance, ballot, decree.as_ref());
        self.node
            .record_in_proposer_and_learner(instance, decree, key, out);
    }

    fn on_heartbeat(&mut self, from_pos: usize, m: Heartbeat, out: &mut Out) {
        if self
            .node
            .heartbeat_heard(from_pos, &m, self.cfg.heartbeat_interval_us)
        {
            self.proposer_resend(out);
        }
        self.node.heartbeat_merge(&m);
        self.on_snapshot_report(from_pos, m.snapshot_upto, m.snapshot_class);
        if m.trim_below > 0 {
            self.node.on_trim(from_pos, m.trim_below, out);
        }
        if m.amnesic {
            let fp = m.epoch.fingerprint();
            self.coordinator_on_amnesic_heartbeat(from_pos, fp, out);
        }
        self.node.heartbeat_decided(&m);
    }

    fn send_heartbeats(&mut self, out: &mut Out) {
        if !self.node.heartbeat_due(self.cfg.heartbeat_interval_us) {
            return;
        }
        let hb = self
            .node
            .heartbeat(self.coord.is_leading(), self.trim_point());
        // The coordinator's own acceptor trims as its heartbeats tell the others.
        if hb.trim_below > 0 {
            self.node.on_trim(self.node.pos, hb.trim_below, out);
        }
        self.node
            .send_to_others(&self.cfg.members, &hb, Message::Heartbeat, out);
    }

    /// Work common to every input: deliver what is ready, end amnesia when repaired.
    pub(crate) fn after_input(&mut self, out: &mut Out) {
        self.node.after_input(out);
    }
}

impl crate::ring::RingHost for RingPaxos {
    type Msg = Message;
    fn ring_node(&self) -> &RingNode {
        &self.node
    }
    fn ring_node_mut(&mut self) -> &mut RingNode {
        &mut self.node
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
    fn learner_snapshots(&self) -> bool {
        self.learner_snapshots
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
        self.node.set_report_passes(on);
    }
    fn drain_passes(&mut self, into: &mut Vec<crate::ring::Pass>) {
        self.node.drain_passes(into);
    }
    fn set_delivery_paused(&mut self, paused: bool) {
        self.node.set_delivery_paused(paused);
    }
    fn is_leading(&self) -> bool {
        self.coord.is_leading()
    }
    fn coordinator(&self) -> Option<NodeId> {
        self.node.coordinator_pos().map(|p| self.node_at(p))
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
        self.node.is_proposer()
    }
    fn is_learner(&self) -> bool {
        self.node.is_learner()
    }
    fn set_composed_snapshots(&mut self, on: bool) {
        self.node.set_composed_snapshots(on);
    }
    fn take_behind_trim_point(&mut self) -> Option<(Instance, Instance)> {
        self.node.take_behind_trim_point()
    }
    fn delivered_upto(&self) -> Instance {
        self.node.learn.delivered_upto()
    }
    fn learner_snapshot(&self) -> (Instance, Bytes) {
        self.node.learner_snapshot()
    }
    fn set_snapshot_upto(&mut self, upto: Instance, class: u64) {
        self.node.set_snapshot_upto(upto, class);
    }
    fn install_learner(
        &mut self,
        upto: Instance,
        dedup: &Bytes,
        out: &mut Out,
    ) -> Result<(), String> {
        self.node.install_composed(upto, dedup)?;
        // Go on from the log at once, as after a snapshot of the ring's own.
        if self.node.learn.behind() {
            self.send_retrieve(out);
        }
        Ok(())
    }
    fn peer_snapshots(&self) -> Vec<crate::ring::PeerSnapshot> {
        self.node.peer_snapshot_reports(&self.cfg.members)
    }
}

impl Protocol for RingPaxos {
    type Message = Message;

    fn node(&self) -> NodeId {
        self.node.me
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
        self.node.view.contact(from_pos);
        let own = from_pos == self.node.pos;
        match msg {
            Message::Submit(m) => self.coordinator_on_submit(m.batch, out),
            Message::Phase1a(m) => self.on_phase1a(from_pos, m, out),
            Message::Phase1b(m) => self.on_phase1b(from_pos, m, out),
            // The coordinator handled its own multicasts as it sent them (loopback or not).
            Message::Phase2a(_) | Message::Decision(_) if own => {}
            Message::Phase2a(m) => self.on_phase2a(m, out),
            Message::Phase2b(m) => self.on_phase2b(m, out),
            Message::Decision(m) => {
                self.node.note_ballot(m.ballot);
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
        self.node.can_propose(&self.cfg.batch_limits())
    }

    fn sync_storage(&mut self) -> Result<(), crate::storage::StorageError> {
        self.node.sync_storage()
    }

    fn begin_sync_storage(
        &mut self,
    ) -> Result<Option<crate::storage::SyncJob>, crate::storage::StorageError> {
        self.node.begin_sync_storage()
    }

    fn end_sync_storage(
        &mut self,
        result: Result<(), crate::storage::StorageError>,
    ) -> Result<(), crate::storage::StorageError> {
        self.node.end_sync_storage(result)
    }

    fn log_bytes(&self) -> u64 {
        self.node.log_bytes()
    }

    fn snapshots_supported(&self) -> bool {
        true
    }

    fn take_snapshot(&mut self, app: Bytes) -> Result<crate::protocol::Snapshot, String> {
        self.take_snapshot_here(app)
    }

    fn restore_snapshot(&mut self, snapshot: &crate::protocol::Snapshot) -> Result<(), String> {
        self.restore_snapshot_here(snapshot)
    }

    fn status(&self) -> Status {
        self.node.status(
            &self.cfg.members,
            self.coord.ballot,
            self.coord.is_leading(),
        )
    }
}
