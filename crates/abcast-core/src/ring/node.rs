//! The node state both ring protocols keep, held once: `URing` and `RingPaxos` each hold one
//! `RingNode` as a plain field (no box, no dynamic dispatch: the hot path reaches it with one
//! field offset) and keep beside it only what is their own (U-Ring: ring order and the
//! forward path; Ring Paxos: the m-quorum ring, `Phase2a`/`Phase2b` and multicast).
//!
//! What lives here: the membership view and clock, the proposer's batcher, the acceptor and
//! learner state with the payload cache, the ballot memory, the heartbeat counters, the
//! coordinator-change memory of the proposer, and the snapshot state; and the steps that
//! only touch those: heartbeats (building, and the part of handling one that is the same in
//! both protocols), the work after every input, the storage sync, and the status report.

use super::acceptor::AcceptorState;
use super::learner::{LearnerState, PayloadCache};
use super::messages::Heartbeat;
use super::snapshot::{SnapshotState, trim_acceptor};
use super::{RingView, bit};
use crate::batcher::{BatchLimits, Batcher};
use crate::config::Member;
use crate::nodeset::NodeSet;
use crate::protocol::{Outbox, Status};
use crate::storage::{StorageError, SyncJob};
use crate::types::{Ballot, BatchKey, Decree, Instance, Micros, NodeId};

/// One node of one ring, the state every ring protocol keeps (see the module comment).
pub(crate) struct RingNode {
    pub(crate) me: NodeId,
    pub(crate) pos: usize,
    /// Member positions of acceptors (a local index; positions never leave the node).
    pub(crate) acceptor_mask: u64,
    /// The same acceptors by id: what a vote set on the wire is counted against.
    pub(crate) acceptor_ids: NodeSet,
    pub(crate) view: RingView,
    pub(crate) now: Micros,
    pub(crate) prop: Option<Batcher>,
    pub(crate) acc: Option<AcceptorState>,
    pub(crate) learn: LearnerState,
    /// Payloads by batch key, to match decisions by key to contents.
    pub(crate) cache: PayloadCache,
    /// Highest ballot seen anywhere: a new coordinator picks a higher round.
    pub(crate) max_ballot_seen: Ballot,
    /// This process life's incarnation, put in every ballot it makes (see `Ballot`).
    pub(crate) ballot_incarnation: u32,
    pub(crate) last_heartbeat_us: Micros,
    /// Heartbeats sent in this process life (see `Heartbeat::seq`).
    pub(crate) heartbeats_sent: u64,
    /// The coordinator of the last tick, to notice changes.
    pub(crate) last_coordinator: Option<usize>,
    /// The coordinator changed in this node's view since the proposer last re-sent its
    /// window: it re-sends once more when that coordinator is heard leading (views change at
    /// slightly different times, and batches re-sent to a node not leading yet are dropped;
    /// found by the simulator's faults-remain phase, uring partition seed 0).
    pub(crate) resend_when_leading: bool,
    /// Snapshots and trimming (`snapshot.rs`).
    pub(crate) snap: SnapshotState,
}

impl RingNode {
    /// Asserts that `me` is `members[pos]` and that `acceptor_mask` names members only.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        me: NodeId,
        pos: usize,
        members: &[NodeId],
        acceptor_mask: u64,
        view: RingView,
        prop: Option<Batcher>,
        acc: Option<AcceptorState>,
        learn: LearnerState,
        cache: PayloadCache,
        ballot_incarnation: u32,
    ) -> RingNode {
        let members_len = members.len();
        assert!(
            members.get(pos) == Some(&me),
            "node {} is not at ring position {pos} of {members:?}",
            me.0
        );
        assert!(members_len >= 64 || acceptor_mask >> members_len == 0);
        let acceptor_ids = members
            .iter()
            .enumerate()
            .filter(|&(p, _)| acceptor_mask & bit(p) != 0)
            .map(|(_, &id)| id)
            .collect();
        RingNode {
            me,
            pos,
            acceptor_mask,
            acceptor_ids,
            view,
            now: 0,
            prop,
            acc,
            learn,
            cache,
            max_ballot_seen: Ballot::ZERO,
            ballot_incarnation,
            last_heartbeat_us: 0,
            heartbeats_sent: 0,
            last_coordinator: None,
            resend_when_leading: false,
            snap: SnapshotState::new(members_len),
        }
    }

    pub(crate) fn is_acceptor_pos(&self, p: usize) -> bool {
        self.acceptor_mask & bit(p) != 0
    }

    /// The coordinator this node believes in: the first live acceptor in member order.
    pub(crate) fn coordinator_pos(&self) -> Option<usize> {
        let mask = self.acceptor_mask;
        self.view.coordinator(self.now, |p| mask & bit(p) != 0)
    }

    pub(crate) fn note_ballot(&mut self, b: Ballot) {
        self.max_ballot_seen = self.max_ballot_seen.max(b);
    }

    // ---- heartbeats -------------------------------------------------------------------------

    /// Whether a heartbeat is due now; if so, its time is taken (the caller sends one).
    pub(crate) fn heartbeat_due(&mut self, interval_us: Micros) -> bool {
        if self.last_heartbeat_us != 0 && self.now < self.last_heartbeat_us + interval_us {
            return false;
        }
        self.last_heartbeat_us = self.now.max(1);
        true
    }

    /// The next heartbeat of this process life (its `seq` counts up).
    pub(crate) fn heartbeat(&mut self, leading: bool, trim_below: Instance) -> Heartbeat {
        self.heartbeats_sent += 1;
        Heartbeat {
            // Only its round matters to the receiver (`note_ballot`); a ballot some
            // coordinator really made, not one pieced together.
            ballot: self.max_ballot_seen,
            incarnation: u64::from(self.ballot_incarnation),
            seq: self.heartbeats_sent,
            delivered_upto: self.learn.delivered_upto(),
            decided_max: self.learn.decided_max,
            leading,
            amnesic: self.acc.as_ref().is_some_and(|a| a.amnesic),
            epoch: self.view.epoch().clone(),
            snapshot_upto: self.snap.own_upto,
            trim_below,
            snapshot_class: self.snap.own_class,
        }
    }

    /// Sends `hb` to every member but this one.
    pub(crate) fn send_to_others<M>(
        &self,
        members: &[Member],
        hb: &Heartbeat,
        wrap: impl Fn(Heartbeat) -> M,
        out: &mut Outbox<M>,
    ) {
        for (p, m) in members.iter().enumerate() {
            if p != self.pos {
                out.send(m.id, wrap(hb.clone()));
            }
        }
    }

    /// The first step of handling a heartbeat from `from_pos`: the failure detector hears
    /// it, the learner notes the peer's progress. Returns whether the proposer must re-send
    /// its window now (the coordinator it waited for is heard leading); the flag is cleared.
    pub(crate) fn heartbeat_heard(
        &mut self,
        from_pos: usize,
        m: &Heartbeat,
        interval_us: Micros,
    ) -> bool {
        if self
            .view
            .beat(from_pos, m.incarnation, m.seq, self.now, interval_us)
        {
            self.learn.note_peer_delivered(from_pos, m.delivered_upto);
        }
        if m.leading && self.resend_when_leading && self.coordinator_pos() == Some(from_pos) {
            self.resend_when_leading = false;
            return true;
        }
        false
    }

    /// The second step of handling a heartbeat: its ballot and epoch are merged.
    pub(crate) fn heartbeat_merge(&mut self, m: &Heartbeat) {
        self.note_ballot(m.ballot);
        self.view.merge_epoch(&m.epoch);
    }

    /// What a heartbeat says is decided: its sender's `decided_max` and `delivered_upto`.
    pub(crate) fn heartbeat_decided(&mut self, m: &Heartbeat) {
        self.learn.decided_max = self
            .learn
            .decided_max
            .max(m.decided_max)
            .max(m.delivered_upto);
    }

    // ---- trimming (issue 4, `snapshot.rs`) ------------------------------------------------

    /// The leading coordinator's trim point (`SnapshotState::trim_point` over the learners
    /// among `members`); 0 when not `leading`. `trim_past_quorum` is the broken variant
    /// `Mutation::TrimPastQuorum` (tests only).
    pub(crate) fn trim_point(
        &self,
        members: &[Member],
        leading: bool,
        trim_past_quorum: impl FnOnce() -> bool,
    ) -> Instance {
        if !leading {
            return 0;
        }
        let learners = (0..members.len()).filter(|&p| members[p].roles.learner);
        let t = self.snap.trim_point(self.pos, learners);
        if t > 0 && trim_past_quorum() {
            return t + 1;
        }
        t
    }

    /// An acceptor trims below what the coordinator it believes in says.
    pub(crate) fn on_trim<M>(&mut self, from_pos: usize, below: Instance, out: &mut Outbox<M>) {
        if self.coordinator_pos() != Some(from_pos) {
            return;
        }
        trim_acceptor(self.acc.as_mut(), below, out);
    }

    // ---- roles, and the hooks of the Multi-Ring layer -------------------------------------

    /// Whether the proposer has room for one more value.
    pub(crate) fn can_propose(&self, limits: &BatchLimits) -> bool {
        self.prop.as_ref().is_some_and(|p| p.has_room(limits))
    }

    /// Whether this node is a proposer of the ring.
    pub(crate) fn is_proposer(&self) -> bool {
        self.prop.is_some()
    }

    /// Whether this node is a learner of the ring (hands values to the application).
    pub(crate) fn is_learner(&self) -> bool {
        self.learn.deliver
    }

    /// Reports decided instances that deliver nothing as passes (`ring::Pass`).
    pub(crate) fn set_report_passes(&mut self, on: bool) {
        self.learn.report_passes = on;
    }

    /// Moves the passes reported so far into `into`.
    pub(crate) fn drain_passes(&mut self, into: &mut Vec<super::Pass>) {
        into.append(&mut self.learn.passes);
    }

    /// Holds (or resumes) deliveries; decisions keep arriving and wait in the learner.
    pub(crate) fn set_delivery_paused(&mut self, paused: bool) {
        self.learn.paused = paused;
    }

    // ---- the Multi-Ring layer's snapshots (`multiring/snapshot.rs`) ------------------------

    /// The layer above takes this learner's snapshots (see `LearnerState::composed_snapshots`).
    pub(crate) fn set_composed_snapshots(&mut self, on: bool) {
        self.learn.composed_snapshots = on;
        if !on {
            self.learn.behind_trim = None;
        }
    }

    /// Where the learner stands behind the trim point, once; see `LearnerState::behind_trim`.
    pub(crate) fn take_behind_trim_point(&mut self) -> Option<(Instance, Instance)> {
        self.learn.behind_trim.take()
    }

    /// The learner's part of the layer's snapshot: every instance up to the returned one is
    /// delivered (or passed) here, and its de-duplication memory at that point, encoded.
    pub(crate) fn learner_snapshot(&self) -> (Instance, bytes::Bytes) {
        let mut e = crate::codec::Encoder::new();
        self.learn.encode_dedup(&mut e);
        (self.learn.delivered_upto(), e.to_bytes())
    }

    /// The layer's snapshot covers this ring up to `upto`, and stands for the learners of
    /// `class`: heartbeats report both from now on, and the coordinator trims below them.
    pub(crate) fn set_snapshot_upto(&mut self, upto: Instance, class: u64) {
        debug_assert!(upto >= self.snap.own_upto, "snapshots go forward");
        self.snap.own_upto = self.snap.own_upto.max(upto);
        self.snap.own_class = class;
    }

    /// Moves the learner to after `upto` with the de-duplication memory `dedup` (encoded),
    /// from the layer's snapshot (restored at start or installed from a peer). Refuses bytes
    /// that do not decode and a position behind the learner (a snapshot never moves a
    /// learner back: it would deliver again what it delivered).
    pub(crate) fn install_composed(
        &mut self,
        upto: Instance,
        dedup: &bytes::Bytes,
    ) -> Result<(), String> {
        if upto < self.learn.delivered_upto() {
            return Err(format!(
                "the snapshot covers instances up to {upto}, this learner delivered up to {}",
                self.learn.delivered_upto()
            ));
        }
        let mut d = crate::codec::Decoder::new(dedup.clone());
        let dedup =
            crate::dedup::Dedup::decode(&mut d).map_err(|e| format!("snapshot dedup: {e}"))?;
        d.finish().map_err(|e| format!("snapshot dedup: {e}"))?;
        self.learn.install(upto, dedup);
        self.learn.last_progress_us = self.now;
        self.learn.behind_trim = None;
        debug_assert!(self.learn.delivered_upto() >= upto);
        Ok(())
    }

    /// Every other member's latest snapshot report (its heartbeats' `snapshot_upto`), and
    /// whether this node sees it alive now.
    pub(crate) fn peer_snapshot_reports(&self, members: &[Member]) -> Vec<super::PeerSnapshot> {
        let alive = self.view.alive_positions(self.now);
        (0..members.len())
            .filter(|&p| p != self.pos)
            .map(|p| super::PeerSnapshot {
                node: members[p].id,
                learner: members[p].roles.learner,
                upto: self.snap.reported.get(p).copied().unwrap_or(0),
                class: self.snap.classes.get(p).copied().unwrap_or(0),
                alive: alive.contains(&p),
            })
            .collect()
    }

    // ---- decisions and the work after every input ----------------------------------------

    /// Records a decision in the acceptor store.
    pub(crate) fn record_in_acceptor(
        &mut self,
        instance: Instance,
        ballot: Ballot,
        decree: Option<&Decree>,
    ) {
        if let (Some(acc), Some(d)) = (self.acc.as_mut(), decree) {
            acc.record_decided(instance, ballot, d);
        }
    }

    /// Records a decision in the proposer (ack) and the learner.
    pub(crate) fn record_in_proposer_and_learner<M>(
        &mut self,
        instance: Instance,
        decree: Option<Decree>,
        key: Option<BatchKey>,
        out: &mut Outbox<M>,
    ) {
        if let (Some(p), Some(k)) = (self.prop.as_mut(), key)
            && let Some(ack) = p.on_decided(k, self.now)
        {
            out.acks.push(ack);
        }
        self.learn.on_decided(instance, decree, key);
    }

    /// Work common to every input: deliver what is ready, end amnesia when repaired.
    pub(crate) fn after_input<M>(&mut self, out: &mut Outbox<M>) {
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

    // ---- storage --------------------------------------------------------------------------

    pub(crate) fn sync_storage(&mut self) -> Result<(), StorageError> {
        match self.acc.as_mut() {
            Some(acc) => acc.store.sync(),
            None => Ok(()),
        }
    }

    pub(crate) fn begin_sync_storage(&mut self) -> Result<Option<SyncJob>, StorageError> {
        match self.acc.as_mut() {
            Some(acc) => acc.store.begin_sync(),
            None => Ok(None),
        }
    }

    pub(crate) fn end_sync_storage(
        &mut self,
        result: Result<(), StorageError>,
    ) -> Result<(), StorageError> {
        if let Some(acc) = self.acc.as_mut() {
            acc.store.end_sync(&result);
        }
        result
    }

    pub(crate) fn log_bytes(&self) -> u64 {
        self.acc.as_ref().map_or(0, |acc| acc.store.log_bytes())
    }

    // ---- status ---------------------------------------------------------------------------

    /// The node's status; `coord_ballot` and `leading` come from the protocol's coordinator.
    pub(crate) fn status(&self, members: &[Member], coord_ballot: Ballot, leading: bool) -> Status {
        let node_at = |p: usize| members[p].id;
        Status {
            node: self.me,
            coordinator: self.coordinator_pos().map(node_at),
            ballot: self.max_ballot_seen.max(coord_ballot),
            leading,
            delivered_upto: self.learn.delivered_upto(),
            decided_max: self.learn.decided_max,
            values_in_flight: self.prop.as_ref().map_or(0, |p| p.values_in_flight()),
            amnesic: self.acc.as_ref().is_some_and(|a| a.amnesic),
            view: self
                .view
                .alive_positions(self.now)
                .into_iter()
                .map(node_at)
                .collect(),
            groups: Vec::new(),
            log_bytes: self.log_bytes(),
            log_appended_bytes: self.acc.as_ref().map_or(0, |a| a.store.appended_bytes()),
            ..Status::default()
        }
    }
}
