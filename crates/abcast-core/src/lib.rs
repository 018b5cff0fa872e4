//! abcast-core: the vocabulary, the wire codec of protocol messages, the protocol trait and
//! its effects, the storage trait, and the protocols themselves as pure ("sans-io") state
//! machines. Nothing in this crate opens a socket, reads a clock, spawns a thread or draws a
//! random number: time comes in as an argument (`Micros`), and everything a protocol wants
//! done leaves through an [`Outbox`]. The simulator (`abcast-sim`) and the real runtime
//! (`abcast`) drive the same code.
//!
//! Layers (see ARCHITECTURE.md): vocabulary -> storage -> protocols -> simulator / runtime
//! -> node -> applications. Arrows point down only; this crate holds the bottom three.

pub mod app;
pub mod batcher;
pub mod carry;
pub mod codec;
pub mod config;
pub mod dedup;
pub mod error;
pub mod event;
pub mod groups;
pub mod multiring;
pub mod mutation;
pub mod nodeset;
pub mod protocol;
pub mod raft;
pub mod replog;
pub mod ring;
pub mod ringpaxos;
pub mod seqpaxos;
pub mod snapshot_transfer;
pub mod storage;
pub mod token;
pub mod types;
pub mod uring;
pub mod wire;

pub use app::{Application, NoApplication};
pub use carry::{Carrier, carry_out};
pub use error::{DecodeError, ProposeError};
pub use event::Event;

/// Multi-Ring Paxos over U-Ring Paxos rings (seed 000 §2.4): the composition seed 000
/// describes, and the one the node's config and the runtime run.
pub type MultiRing = multiring::MultiRingOf<uring::URing>;
pub type MultiRingConfig = multiring::MultiRingConfigOf<uring::RingConfig>;
pub type RingSpec = multiring::RingSpecOf<uring::RingConfig>;
pub type MultiRingMessage = multiring::MessageOf<uring::Message>;
/// Multi-Ring Paxos over Ring Paxos rings (seed 003: each ring's phase 2 and decisions by
/// ip-multicast).
pub type MultiRingPaxos = multiring::MultiRingOf<ringpaxos::RingPaxos>;
pub type MultiRingPaxosConfig = multiring::MultiRingConfigOf<ringpaxos::RingPaxosConfig>;
pub type RingPaxosSpec = multiring::RingSpecOf<ringpaxos::RingPaxosConfig>;
pub type MultiRingPaxosMessage = multiring::MessageOf<ringpaxos::Message>;
pub use nodeset::NodeSet;
pub use protocol::{
    ConfigChange, ConfigKind, Delivery, DeliveryLevel, FollowerProgress, GroupPosition,
    GroupStatus, Install, Outbox, Protocol, ReadState, ReconfigureError, Skip, Snapshot, Status,
    Subscription,
};
pub use types::{
    Ballot, Batch, BatchKey, Decree, GroupId, Instance, META_MAX_BYTES, Micros, NodeId, UniformRun,
    Value, ValueId, Values,
};
