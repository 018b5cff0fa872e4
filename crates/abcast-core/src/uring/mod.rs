//! U-Ring Paxos: seed 000 §2.3 and §3.1 (unicast Ring Paxos), with consensus on value ids
//! from seed 003 Algorithm 2.
//!
//! All nodes form one ring in configured order; any node may be proposer, acceptor and
//! learner. The path of one value (seed 000 figure 2.2):
//!
//! 1. `propose` puts it in the proposer's open batch (`proposer.rs`); the batch travels the
//!    ring to the coordinator as a `Forward`, each node keeping the payload.
//! 2. The coordinator (`coordinator.rs`), holding phase 1 for a range of instances ahead
//!    (`p1_preexecution_number`), assigns the batch an instance, votes for it and sends
//!    `Phase2` to its successor.
//! 3. Each acceptor (`acceptor.rs`) adds its vote to the set carried by `Phase2`; the one
//!    that completes the quorum turns it into a `Decision`, which travels on around the ring
//!    until every node has seen it.
//! 4. Every node records the decision (`learner.rs`); learners deliver in instance order.
//!
//! A payload crosses each link at most once per circulation: `Forward` carries it from the
//! proposer to the coordinator, `Phase2`/`Decision` carry it only to nodes not in their
//! `has_payload` set, and by key otherwise (seed 000 §3.1.3).

pub mod acceptor;
pub mod config;
pub mod coordinator;
pub mod messages;
pub mod proposer;
pub mod snapshot;

use crate::config::{ConfigError, StartInfo};
pub use config::RingConfig;
pub use messages::Message;

use crate::ProposeError;
use crate::batcher::Batcher;
use crate::nodeset::NodeSet;
use crate::protocol::{Outbox, Protocol, Status};
use crate::ring::acceptor::AcceptorState;
use crate::ring::learner::{LearnerState, PayloadCache};
use crate::ring::{RingHost, RingNode, RingView, bit};
use crate::storage::AcceptorStore;
use crate::types::{Ballot, Decree, Instance, Micros, NodeId, ValueId};
use bytes::Bytes;
use coordinator::CoordinatorState;
use messages::{Decision, Heartbeat, Nack, Phase2, WireDecree};

pub type Out = Outbox<Message>;

/// One node of one U-Ring Paxos ring.
pub struct URing {
    pub(crate) cfg: RingConfig,
    /// The node state both ring protocols keep (`ring::RingNode`).
    pub(crate) node: RingNode,
    pub(crate) quorum: usize,
    pub(crate) coord: CoordinatorState,
    /// Highest `delivered_upto` any node reported: those instances are decided.
    pub(crate) cluster_delivered_max: Instance,
    /// The successor of the last proposer tick: batches forwarded to a successor that has
    /// since been dropped from the ring may have died with it, so they go again.
    pub(crate) last_successor: Option<usize>,
}

impl URing {
    pub fn new(
        cfg: RingConfig,
        me: NodeId,
        start: StartInfo,
        store: Box<dyn AcceptorStore + Send>,
    ) -> Result<URing, ConfigError> {
        cfg.validate()?;
        let ballot_incarnation = start.ballot_incarnation()?;
        let pos = cfg.position(me).ok_or(ConfigError {
            field: "members",
            reason: format!("node {} is not a member of the ring", me.0),
        })?;
        let roles = cfg.members[pos].roles;
        let acceptor_mask = cfg
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.roles.acceptor)
            .fold(0u64, |m, (i, _)| m | bit(i));
        let now = 0;
        let member_ids: Vec<NodeId> = cfg.members.iter().map(|m| m.id).collect();
        let view = RingView::new(
            &member_ids,
            pos,
            start.incarnation,
            cfg.failure_timeout_us,
            now,
        );
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
        Ok(URing {
            quorum: cfg.quorum(),
            node,
            coord: CoordinatorState::new(),
            cluster_delivered_max: 0,
            last_successor: None,
            cfg,
        })
    }

    /// Whether this node runs the broken variant `m` (tests only, `crate::mutation`).
    #[inline(always)]
    pub(crate) fn mutated(&self, m: crate::mutation::Mutation) -> bool {
        crate::mutation::on(self.cfg.mutation(), m)
    }

    // ---- hooks for the Multi-Ring layer (`multiring/`) ------------------------------------

    /// Reports decided instances that deliver nothing as passes (`ring::Pass`), so a merge
    /// can count every instance's slots (seed 000 §3.1.4, `MultiRingLearner`).
    pub fn set_report_passes(&mut self, on: bool) {
        self.node.set_report_passes(on);
    }

    /// Holds (or resumes) deliveries: the merge above this ring has no room. Decisions keep
    /// arriving and wait, bounded, in the learner; the ring itself does not slow down.
    pub fn set_delivery_paused(&mut self, paused: bool) {
        self.node.set_delivery_paused(paused);
    }

    /// Whether this node is the ring's coordinator with phase 1 done.
    pub fn is_leading(&self) -> bool {
        self.coord.is_leading()
    }

    /// The coordinator this node believes in.
    pub fn coordinator(&self) -> Option<NodeId> {
        self.node.coordinator_pos().map(|p| self.node_at(p))
    }

    /// Merge slots this coordinator has put in instances (values, no-ops and controls 1
    /// each, a skip of k k), counted since it started; the Multi-Ring skip rule compares
    /// its growth per Δt with λ.
    pub fn slots_assigned(&self) -> u64 {
        self.coord.slots_assigned
    }

    /// Instances of values this coordinator has opened since it started (one slot each):
    /// the part of `slots_assigned` that is traffic, not skips or controls. The Multi-Ring
    /// skip rule tells a quiet ring from a busy one by it.
    pub fn value_slots_assigned(&self) -> u64 {
        self.coord.value_slots_assigned
    }

    /// Proposes a meta decree (`Decree::Meta`: a Multi-Ring skip or control value) in the
    /// next free instance, ahead of queued batches. Only the leading coordinator takes it;
    /// returns whether it did (a caller elsewhere retries at the coordinator it believes in).
    pub fn propose_meta(&mut self, now: Micros, weight: u32, data: Bytes, out: &mut Out) -> bool {
        self.node.now = self.node.now.max(now);
        if !self.coord.is_leading() {
            return false;
        }
        let decree = Decree::Meta { weight, data };
        if self.coord.meta.len() >= crate::ring::meta::META_QUEUE_MAX {
            return false;
        }
        self.coord.meta.push_back(decree);
        self.assign(out);
        self.after_input(out);
        true
    }

    /// Whether no batch waits at this coordinator for an instance.
    pub fn coordinator_queue_empty(&self) -> bool {
        self.coord.queue.is_empty()
    }

    /// Whether this node is a proposer of the ring.
    pub fn is_proposer(&self) -> bool {
        self.node.is_proposer()
    }

    /// Whether this node is a learner of the ring (hands values to the application).
    pub fn is_learner(&self) -> bool {
        self.node.is_learner()
    }

    /// Decree-less decrees waiting at this coordinator.
    pub fn meta_queued(&self) -> usize {
        self.coord.meta.len()
    }

    pub(crate) fn node_at(&self, p: usize) -> NodeId {
        self.cfg.members[p].id
    }

    pub(crate) fn successor(&self) -> Option<usize> {
        self.node.view.successor(self.node.now)
    }

    /// The decree of `instance` from a wire decree: a key is looked up in the payload
    /// cache, then in this acceptor's own vote for the instance. The cache drops a payload
    /// once its batch is delivered, so a batch decided a second time (a proposer's re-send)
    /// can come back by key after its first copy's delivery evicted it; the vote holds the
    /// payload still (found by the simulator's faults-remain phase: uring crash seed 0,
    /// where the only other holder was cut off and the coordinator's learner waited for
    /// good for a payload its own store had).
    pub(crate) fn resolve(&self, instance: Instance, w: &WireDecree) -> Option<Decree> {
        match w {
            WireDecree::Key(k) => self
                .node
                .cache
                .get(k)
                .map(|b| Decree::Values(b.clone()))
                .or_else(|| {
                    let a = self.node.acc.as_ref()?.store.get(instance)?;
                    (a.decree.key() == Some(*k)).then(|| a.decree.clone())
                }),
            other => other.decree(),
        }
    }

    pub(crate) fn on_phase2(&mut self, mut m: Phase2, out: &mut Out) {
        self.node.note_ballot(m.ballot);
        if let WireDecree::Full(b) = &m.decree {
            self.node.cache.insert(b);
            self.node.learn.offer_payload(b);
        }
        let decree = self.resolve(m.instance, &m.decree);
        let me = self.node.me;
        m.visited.insert(me);
        if decree.is_some() {
            m.has_payload.insert(me);
        }
        if self.node.acc.is_some() && self.vote(&m, decree.as_ref(), out) {
            m.votes.insert(me);
        }
        // Only this configuration's acceptors count (the set names nodes by id).
        if m.votes.count_in(&self.node.acceptor_ids) >= self.quorum {
            let wire = match &decree {
                Some(d) => WireDecree::full(d),
                None => m.decree.clone(),
            };
            self.decided(
                m.instance,
                m.ballot,
                wire,
                NodeSet::new(),
                m.has_payload,
                out,
            );
            return;
        }
        let Some(succ) = self.successor() else { return };
        if m.visited.contains(self.node_at(succ)) {
            // Back where the circulation started without a quorum: the coordinator retries,
            // sooner when told (see `coordinator.rs`, `retry_soon`).
            if m.ballot.node != self.node.me {
                let promised = self
                    .node
                    .acc
                    .as_ref()
                    .map_or(m.ballot, |a| a.store.promised());
                out.send(
                    m.ballot.node,
                    Message::Nack(Nack {
                        promised,
                        instance: m.instance,
                        epoch: self.node.view.epoch().clone(),
                    }),
                );
            } else if self.coord.is_leading() && m.ballot == self.coord.ballot {
                self.retry_soon(m.instance);
            }
            return;
        }
        m.decree = self.wire_for(succ, &m.has_payload, decree.as_ref(), m.decree);
        out.send(self.node_at(succ), Message::Phase2(m));
    }

    /// The decree as it should travel to `succ`: full if `succ` lacks the payload and we have
    /// it, by key otherwise.
    pub(crate) fn wire_for(
        &self,
        succ: usize,
        has_payload: &NodeSet,
        decree: Option<&Decree>,
        fallback: WireDecree,
    ) -> WireDecree {
        match decree {
            Some(d) if !has_payload.contains(self.node_at(succ)) => WireDecree::full(d),
            Some(d) => WireDecree::key_only(d),
            None => match fallback {
                WireDecree::Full(b) => WireDecree::Key(b.key()),
                other => other,
            },
        }
    }

    /// This node learns that `instance` is decided; it records the decision in every role
    /// and passes it on around the ring (seed 000 §2.3: "the decision messages are forwarded
    /// in the ring until they reach the predecessor of the last acceptor").
    pub(crate) fn decided(
        &mut self,
        instance: Instance,
        ballot: Ballot,
        wire: WireDecree,
        mut seen: NodeSet,
        mut has_payload: NodeSet,
        out: &mut Out,
    ) {
        let decree = self.resolve(instance, &wire);
        self.record_decision(instance, ballot, decree.clone(), wire.key(), out);
        seen.insert(self.node.me);
        if decree.is_some() {
            has_payload.insert(self.node.me);
        }
        let Some(succ) = self.successor() else { return };
        if seen.contains(self.node_at(succ)) {
            return;
        }
        let w = self.wire_for(succ, &has_payload, decree.as_ref(), wire);
        out.send(
            self.node_at(succ),
            Message::Decision(Decision {
                instance,
                ballot,
                seen,
                has_payload,
                decree: w,
            }),
        );
    }

    /// Records a decision in the learner, the acceptor store, the coordinator and the
    /// proposer (ack).
    pub(crate) fn record_decision(
        &mut self,
        instance: Instance,
        ballot: Ballot,
        decree: Option<Decree>,
        key: Option<crate::types::BatchKey>,
        out: &mut Out,
    ) {
        self.node
            .record_in_acceptor(instance, ballot, decree.as_ref());
        self.coordinator_on_decided(instance, key);
        self.node
            .record_in_proposer_and_learner(instance, decree, key, out);
    }

    fn on_decision(&mut self, m: Decision, out: &mut Out) {
        self.node.note_ballot(m.ballot);
        if let WireDecree::Full(b) = &m.decree {
            self.node.cache.insert(b);
            self.node.learn.offer_payload(b);
        }
        if m.seen.contains(self.node.me) {
            return;
        }
        self.decided(m.instance, m.ballot, m.decree, m.seen, m.has_payload, out);
    }

    fn on_heartbeat(&mut self, from_pos: usize, m: Heartbeat, out: &mut Out) {
        if self
            .node
            .heartbeat_heard(from_pos, &m, self.cfg.heartbeat_interval_us)
        {
            self.proposer_resend(out);
        }
        self.node.heartbeat_merge(&m);
        if m.amnesic {
            self.coordinator_on_amnesic_heartbeat(from_pos, m.epoch.fingerprint(), out);
        }
        self.cluster_delivered_max = self.cluster_delivered_max.max(m.delivered_upto);
        self.node.heartbeat_decided(&m);
        self.on_snapshot_report(from_pos, m.snapshot_upto, m.snapshot_class);
        if m.leading && m.trim_below > 0 {
            self.node.on_trim(from_pos, m.trim_below, out);
        }
    }

    fn send_heartbeats(&mut self, out: &mut Out) {
        if !self.node.heartbeat_due(self.cfg.heartbeat_interval_us) {
            return;
        }
        let hb = self
            .node
            .heartbeat(self.coord.is_leading(), self.trim_point());
        // The coordinator's own acceptor trims with the others (no heartbeat to itself).
        if hb.trim_below > 0 {
            self.node.on_trim(self.node.pos, hb.trim_below, out);
        }
        self.node
            .send_to_others(&self.cfg.members, &hb, Message::Heartbeat, out);
    }

    /// Work common to every input: deliver what is ready, repair progress.
    pub(crate) fn after_input(&mut self, out: &mut Out) {
        self.node.after_input(out);
    }

    /// Positions of live acceptors other than this node, coordinator first.
    pub(crate) fn retrieve_targets(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self
            .node
            .view
            .alive_positions(self.node.now)
            .into_iter()
            .filter(|&p| p != self.node.pos && self.node.is_acceptor_pos(p))
            .collect();
        if let Some(c) = self.node.coordinator_pos()
            && let Some(i) = v.iter().position(|&p| p == c)
        {
            v.remove(i);
            v.insert(0, c);
        }
        v
    }

    fn learner_tick(&mut self, out: &mut Out) {
        self.snapshot_fetch_tick(out);
        let stalled = self.node.learn.behind() || self.node.learn.has_waiting();
        if !stalled {
            return;
        }
        let t = self.cfg.retrieve_timeout_us;
        if self.node.now < self.node.learn.last_progress_us + t
            || self.node.now < self.node.learn.last_retrieve_us + t
        {
            return;
        }
        self.send_retrieve(out);
    }

    /// Asks the next acceptor (coordinator first) for the instances after the last delivered.
    pub(crate) fn send_retrieve(&mut self, out: &mut Out) {
        self.learn_from_own_store(out);
        if !(self.node.learn.behind() || self.node.learn.has_waiting()) {
            return;
        }
        let targets = self.retrieve_targets();
        if targets.is_empty() {
            return;
        }
        let target = targets[self.node.learn.retrieve_round % targets.len()];
        self.node.learn.retrieve_round += 1;
        self.node.learn.last_retrieve_us = self.node.now;
        let from = self.node.learn.next;
        let to =
            (from + self.cfg.retrieve_max_instances).min(self.node.learn.decided_max.max(from) + 1);
        out.send(
            self.node_at(target),
            Message::Retrieve(messages::Retrieve { from, to }),
        );
    }
}

impl crate::ring::RingHost for URing {
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
        URing::record_decision(self, instance, ballot, decree, key, out)
    }
    fn after_input(&mut self, out: &mut Out) {
        URing::after_input(self, out)
    }
}

impl crate::ring::RingConfigView for RingConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        RingConfig::validate(self)
    }
    fn members(&self) -> &[crate::config::Member] {
        &self.members
    }
    fn learner_snapshots(&self) -> bool {
        self.learner_snapshots
    }
}

impl crate::ring::ComposableRing for URing {
    type Config = RingConfig;
    fn compose(
        cfg: RingConfig,
        me: NodeId,
        start: StartInfo,
        store: Box<dyn AcceptorStore + Send>,
    ) -> Result<URing, ConfigError> {
        URing::new(cfg, me, start, store)
    }
    fn set_report_passes(&mut self, on: bool) {
        URing::set_report_passes(self, on)
    }
    fn drain_passes(&mut self, into: &mut Vec<crate::ring::Pass>) {
        self.node.drain_passes(into);
    }
    fn set_delivery_paused(&mut self, paused: bool) {
        URing::set_delivery_paused(self, paused)
    }
    fn is_leading(&self) -> bool {
        URing::is_leading(self)
    }
    fn coordinator(&self) -> Option<NodeId> {
        URing::coordinator(self)
    }
    fn slots_assigned(&self) -> u64 {
        URing::slots_assigned(self)
    }
    fn value_slots_assigned(&self) -> u64 {
        URing::value_slots_assigned(self)
    }
    fn propose_meta(&mut self, now: Micros, weight: u32, data: Bytes, out: &mut Out) -> bool {
        URing::propose_meta(self, now, weight, data, out)
    }
    fn meta_queued(&self) -> usize {
        URing::meta_queued(self)
    }
    fn is_proposer(&self) -> bool {
        URing::is_proposer(self)
    }
    fn is_learner(&self) -> bool {
        URing::is_learner(self)
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
        self.cluster_delivered_max = self.cluster_delivered_max.max(upto);
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

impl Protocol for URing {
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
        self.node.now = self.node.now.max(now);
        self.proposer_propose(payload, out)
    }

    fn receive(&mut self, now: Micros, from: NodeId, msg: Message, out: &mut Out) {
        self.node.now = self.node.now.max(now);
        let Some(from_pos) = self.cfg.position(from) else {
            // Not a member of this ring: ignore (the runtime already authenticated the link).
            return;
        };
        let first_contact = !self.node.view.heard_ever(from_pos);
        self.node.view.contact(from_pos);
        match msg {
            Message::Forward(m) => self.on_forward(m, out),
            Message::Phase1a(m) => self.on_phase1a(from_pos, m, out),
            Message::Phase1b(m) => self.on_phase1b(from_pos, m, out),
            Message::Phase2(m) => self.on_phase2(m, out),
            Message::Decision(m) => self.on_decision(m, out),
            Message::Nack(m) => self.on_nack(from_pos, m, out),
            Message::Retrieve(m) => self.on_retrieve(from_pos, m, out),
            Message::Decided(m) => self.on_decided_reply(from_pos, m, out),
            Message::Heartbeat(m) => self.on_heartbeat(from_pos, m, out),
            Message::Repair(m) => self.on_repair(from_pos, m, out),
            Message::SnapshotFetch(m) => self.on_snapshot_fetch(from_pos, m, out),
            Message::SnapshotChunk(m) => self.on_snapshot_chunk(from_pos, m, out),
        }
        if first_contact {
            self.coordinator_on_first_contact(from_pos, out);
        }
        self.after_input(out);
    }

    fn tick(&mut self, now: Micros, out: &mut Out) {
        self.node.now = self.node.now.max(now);
        self.send_heartbeats(out);
        self.coordinator_tick(out);
        self.proposer_tick(out);
        self.learner_tick(out);
        self.after_input(out);
    }

    fn tick_interval_us(&self) -> Micros {
        (self.cfg.batch_linger_us.max(100))
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

#[cfg(test)]
mod tests {
    use super::messages::{Phase2, WireDecree};
    use super::*;
    use crate::protocol::{Outbox, Protocol};
    use crate::ring::Epoch;
    use crate::storage::MemoryStore;

    /// Node 2 of the ring 1, 2, 3 (quorum 2) receives a phase 2 whose vote set is `votes`;
    /// returns what it sent: (to, "decision" or "phase2" with the vote set).
    fn second_node_receives(votes: &[u32]) -> Vec<(u32, String)> {
        let cfg = RingConfig::pal(&[1, 2, 3]);
        let mut n = URing::new(
            cfg,
            NodeId(2),
            StartInfo::FRESH,
            Box::new(MemoryStore::new(1 << 16, 1 << 26)),
        )
        .expect("valid ring");
        let m = Phase2 {
            ballot: Ballot::new(1, NodeId(1), 0),
            instance: 1,
            epoch_fp: Epoch::of([1, 2, 3].map(NodeId)).fingerprint(),
            votes: votes.iter().map(|&i| NodeId(i)).collect(),
            visited: votes.iter().map(|&i| NodeId(i)).collect(),
            has_payload: NodeSet::new(),
            decree: WireDecree::Meta(Decree::Noop),
        };
        let mut out = Outbox::new();
        n.receive(1_000, NodeId(1), Message::Phase2(m), &mut out);
        out.sends
            .into_iter()
            .map(|(to, m)| match m {
                Message::Decision(_) => (to.0, "decision".to_string()),
                Message::Phase2(p) => (to.0, format!("phase2 votes={:?}", p.votes)),
                other => (to.0, format!("{other:?}")),
            })
            .collect()
    }

    #[test]
    fn a_vote_counts_by_node_id_and_ids_outside_the_configuration_do_not() {
        // Node 1's vote and node 2's own make a quorum of this ring: decided.
        assert_eq!(second_node_receives(&[1]), vec![(3, "decision".into())]);
        // Votes by ids this ring does not have (9, 10: members of another configuration,
        // or forged) do not count, however many: only node 2's own vote does, and phase 2
        // goes on to node 3 with the set by id. With position masks, the same two votes
        // would have been bits 0 and 1, nodes 1 and 2, and decided.
        assert_eq!(
            second_node_receives(&[9, 10]),
            vec![(3, "phase2 votes={2, 9, 10}".into())]
        );
    }
}
