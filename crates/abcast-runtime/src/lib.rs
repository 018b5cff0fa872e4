//! The real-I/O runtime: frames on TCP, one event loop per node, timers, the client port
//! and a built-in load generator, driving any sans-io [`abcast_core::Protocol`] unchanged.
//!
//! - `frame`: the 16-byte header of every message (docs/CONTRACTS.md).
//! - `transport`: the `Transport` trait the loop sends and receives through, with its TCP
//!   links (`transport::tcp`: `Hello`, reconnect with backoff, bounded queues flushed with
//!   vectored writes) and its UDP datagram endpoints (`transport::datagram`: multicast
//!   group, or unicast to each peer).
//! - `clientwire`: the client protocol on the client port (`abcast propose`, `abcast learn`).
//! - `linkfault`: optional injected per-link delay and loss, for experiments.
//! - `multicast`: UDP IP-multicast datagrams for `Outbox::multicasts` (seed 003), checked
//!   like frames, with a bounded send queue.
//! - `netns`: entering a network namespace (emulated LAN, multicast tests), or a new one of
//!   the calling thread's own (tests on fixed ports).
//! - `shm`: the shared-memory rings a client on the node's host may trade frames through.
//! - `disk`: the durable log's files (`OsDir`: positioned vectored writes, `O_DIRECT`).
//! - `lives`: the peers' lives a node took frames from, on disk, and the question a node
//!   whose directory lost its incarnation marker asks them before it starts.
//! - `history`: what the node delivered, in memory or in a journal on disk, so a
//!   subscription resumes from a position and never passes an instance silently.
//! - `handle`: `handle::start` runs a node's loop on its own thread and returns a
//!   `NodeHandle` (propose, subscribe, read barrier, reconfigure, status, shutdown).
//! - `driver`: the event loop. One thread runs everything of one node, so the protocol
//!   needs no locks and its effects are carried out in the order the contract gives.

pub mod clientwire;
pub mod disk;
pub mod driver;
pub mod frame;
pub mod handle;
pub mod history;
pub mod linkfault;
pub mod lives;
pub mod loadgen;
pub mod multicast;
pub mod netns;
pub mod shm;
pub mod syncer;
pub mod transport;

pub use driver::{Driver, DriverConfig, DriverError, Listeners, TransportStats};
pub use handle::{
    Applied, DeliveryStream, EndReason, HandleError, NodeHandle, NodeStatus, ReadPoint, Stopped,
    StreamEvent, Ticket,
};
pub use history::{Gap, GapReason};
pub use linkfault::LinkFault;
pub use loadgen::LoadConfig;
pub use multicast::{MulticastConfig, MulticastStats};
pub use transport::{TransportConfig, Unicast};

use abcast_core::protocol::Ack;
use abcast_core::{Micros, Status, ValueId};

pub use abcast_core::app::{Application, NoApplication};

/// What the runtime tells a node beside the application contract (`Application`, in
/// abcast-core): acknowledgements, proposals taken or refused, a periodic status, for
/// statistics and latency measurement. The driver calls it from its one thread, after the
/// protocol's sends are queued (so a slow callback delays the next input, never a message
/// that is ready to leave). Every method has a default: an application that only
/// replicates state writes `impl Hooks for MyApp {}`.
pub trait Hooks: Application {
    /// Some of this node's own values are decided.
    fn ack(&mut self, _now: Micros, _a: &Ack) {}
    /// A value was taken by `propose`; `by_load` tells the built-in load generator's values
    /// from the client port's.
    fn proposed(&mut self, _now: Micros, _id: ValueId, _by_load: bool) {}
    /// `count` values with consecutive ids from `first` were taken by one `propose_many`.
    fn proposed_run(&mut self, now: Micros, first: ValueId, count: usize, by_load: bool) {
        for i in 0..count as u64 {
            let id = ValueId {
                node: first.node,
                seq: first.seq + i,
            };
            self.proposed(now, id, by_load);
        }
    }
    /// `propose` answered `Busy`.
    fn busy(&mut self, _now: Micros) {}
    /// Called every `DriverConfig::periodic_us` with the protocol's status (stats lines).
    fn periodic(&mut self, _now: Micros, _status: &Status) {}
    /// Called just before each `periodic` with the transports' counters (datagrams
    /// rejected, strangers' datagrams dropped, ...), for the stats lines.
    fn transport(&mut self, _now: Micros, _stats: &TransportStats) {}
}

impl Hooks for NoApplication {}
