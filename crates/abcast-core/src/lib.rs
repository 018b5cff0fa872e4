//! abcast-core: the vocabulary, the wire codec of protocol messages, the protocol trait and
//! its effects, the storage trait, and the protocols themselves as pure ("sans-io") state
//! machines. Nothing in this crate opens a socket, reads a clock, spawns a thread or draws a
//! random number: time comes in as an argument (`Micros`), and everything a protocol wants
//! done leaves through an [`Outbox`]. The simulator (`abcast-sim`) and the real runtime
//! (`abcast`) drive the same code.
//!
//! Layers (see ARCHITECTURE.md): vocabulary -> storage -> protocols -> simulator / runtime
//! -> node -> applications. Arrows point down only; this crate holds the bottom three.

pub mod batcher;
pub mod codec;
pub mod config;
pub mod error;
pub mod multiring;
pub mod mutation;
pub mod protocol;
pub mod ring;
pub mod ringpaxos;
pub mod snapshot_transfer;
pub mod storage;
pub mod types;
pub mod uring;
pub mod wire;

pub use error::{DecodeError, ProposeError};
pub use protocol::{
    Delivery, GroupStatus, Install, Outbox, Pass, Protocol, Skip, Snapshot, Status, Subscription,
};
pub use types::{
    Ballot, Batch, BatchKey, CONTROL_MAX_BYTES, Decree, GroupId, Instance, Micros, NodeId, Value,
    ValueId,
};
