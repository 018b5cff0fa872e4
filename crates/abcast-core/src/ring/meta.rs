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

/// What a composing layer reads of a ring protocol's configuration.
pub trait RingConfigView: Clone + std::fmt::Debug + PartialEq + Eq {
    fn validate(&self) -> Result<(), ConfigError>;
    fn members(&self) -> &[Member];
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
}
