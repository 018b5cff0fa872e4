//! Rings composed by a layer above them (Multi-Ring Paxos, seed 000 §2.4 and §3.1.4): the
//! ring decides that layer's decrees (`Decree::Meta`: a weight and opaque data) like any
//! other, and reports every decided instance that hands nothing to the application as a
//! [`Pass`], so the layer above can count every instance's place in its merge. What a meta
//! decree means (a skip of k slots, a subscribe or unsubscribe) is the layer's business
//! (`multiring/`); [`ComposableRing`] is what it needs of a ring protocol.

use crate::config::{ConfigError, Member, StartInfo};
use crate::protocol::{Outbox, Protocol};
use crate::storage::AcceptorStore;
use crate::types::{Instance, Micros, NodeId};
use bytes::Bytes;

/// Meta decrees waiting at a coordinator for an instance, at most.
pub(crate) const META_QUEUE_MAX: usize = 64;

/// A decided instance that hands nothing to the application: a no-op, a batch decided a
/// second time (skipped by the de-duplication rule), or a meta decree. Reported only by a
/// ring asked to (`ComposableRing::set_report_passes`), in instance order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pass {
    pub instance: Instance,
    /// Positions of the composing layer's merge the instance stands for: 1, or a meta
    /// decree's weight.
    pub weight: u64,
    /// A meta decree's data, when it has any.
    pub data: Option<Bytes>,
}

/// Another member of a ring, as this node last heard of its snapshots (what a composing
/// layer reads to pick a peer whose snapshot it can install).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerSnapshot {
    pub node: NodeId,
    /// A learner of the ring.
    pub learner: bool,
    /// The `snapshot_upto` of its latest heartbeat heard (0: none).
    pub upto: Instance,
    /// The `snapshot_class` of its latest heartbeat heard.
    pub class: u64,
    /// This node's failure detector sees it alive now.
    pub alive: bool,
}

/// What a composing layer reads of a ring protocol's configuration.
pub trait RingConfigView: Clone + std::fmt::Debug + PartialEq + Eq {
    fn validate(&self) -> Result<(), ConfigError>;
    fn members(&self) -> &[Member];
    /// The ring's learners take snapshots (`learner_snapshots`): its coordinator trims the
    /// acceptors below them, and a learner behind the trim point installs one.
    fn learner_snapshots(&self) -> bool;
}

/// A ring protocol a layer above can compose (implemented by U-Ring Paxos and Ring Paxos).
pub trait ComposableRing: Protocol + Sized {
    type Config: RingConfigView;

    /// One node of the ring.
    fn compose(
        cfg: Self::Config,
        me: NodeId,
        start: StartInfo,
        store: Box<dyn AcceptorStore + Send>,
    ) -> Result<Self, ConfigError>;

    /// Reports decided instances that deliver nothing as [`Pass`]es (see `drain_passes`).
    fn set_report_passes(&mut self, on: bool);

    /// Moves the passes reported so far, in instance order, to `into`. A composing layer
    /// takes them after every input it gives the ring, with that input's outbox.
    fn drain_passes(&mut self, into: &mut Vec<Pass>);

    /// Holds (or resumes) deliveries: the layer above has no room. Decisions keep
    /// arriving and wait, bounded, in the learner; the ring itself does not slow down.
    fn set_delivery_paused(&mut self, paused: bool);

    /// Whether this node is the ring's coordinator with phase 1 done.
    fn is_leading(&self) -> bool;

    /// The coordinator this node believes in.
    fn coordinator(&self) -> Option<NodeId>;

    /// Merge positions this coordinator has put in instances since it started (values,
    /// no-ops and weight-1 meta decrees 1 each, a meta decree of weight k k).
    fn slots_assigned(&self) -> u64;

    /// Of these, the instances of values (one each).
    fn value_slots_assigned(&self) -> u64;

    /// Proposes a meta decree in the next free instance, ahead of queued batches. Only the
    /// leading coordinator takes it; returns whether it did.
    fn propose_meta(
        &mut self,
        now: Micros,
        weight: u32,
        data: Bytes,
        out: &mut Outbox<Self::Message>,
    ) -> bool;

    /// Meta decrees waiting at this coordinator for an instance.
    fn meta_queued(&self) -> usize;

    fn is_proposer(&self) -> bool;

    /// Whether this node is a learner of the ring (hands values to the application).
    fn is_learner(&self) -> bool;

    // ---- snapshots taken by the layer above (`multiring/snapshot.rs`) -----------------

    /// The layer above takes this learner's snapshots: behind the trim point the learner
    /// neither skips nor fetches a snapshot of the ring alone; it says so once
    /// ([`ComposableRing::take_behind_trim_point`]) and the layer installs one of its own.
    fn set_composed_snapshots(&mut self, on: bool);

    /// `(next, floor)` when the learner found itself behind the trim point since the last
    /// call: it needs instance `next`, and every live acceptor's log starts at `floor` or
    /// later.
    fn take_behind_trim_point(&mut self) -> Option<(Instance, Instance)>;

    /// Every instance up to this one is delivered (or passed) by the learner.
    fn delivered_upto(&self) -> Instance;

    /// The learner's part of the layer's snapshot: its position (every instance up to it
    /// delivered or passed) and its de-duplication memory there, encoded.
    fn learner_snapshot(&self) -> (Instance, Bytes);

    /// The layer's latest snapshot covers this ring up to `upto` and stands for the
    /// learners of `class` (0: any; see `ring::snapshot::quorum_trim_point_by_class`): the
    /// heartbeats report both, and the coordinator trims below the learners' reports.
    fn set_snapshot_upto(&mut self, upto: Instance, class: u64);

    /// Moves the learner to after `upto`, with the de-duplication memory `dedup` of a
    /// [`ComposableRing::learner_snapshot`] (the layer's snapshot, restored or installed),
    /// and asks the log for what follows. Refuses bytes that do not decode and a position
    /// behind the learner.
    fn install_learner(
        &mut self,
        upto: Instance,
        dedup: &Bytes,
        out: &mut Outbox<Self::Message>,
    ) -> Result<(), String>;

    /// Every other member's latest snapshot report, as this node heard it.
    fn peer_snapshots(&self) -> Vec<PeerSnapshot>;
}
