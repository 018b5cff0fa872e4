//! abcast-sim: the deterministic simulator and the safety/liveness checkers (GUIDE layer 4).
//!
//! One process, one seed, many nodes of any [`abcast_core::Protocol`]. The network drops,
//! duplicates, delays (and so reorders) and partitions messages, one-way too; nodes crash and
//! restart through a factory; a node may join late. Every message really goes through its
//! wire codec. Then the faults stop and the run must converge within a bound. The
//! [`Checker`] runs on every delivery. A failing run returns a [`Violation`] that names the
//! seed, the time, the node, the instance and the value, shows the last events, and ends
//! with the shell line that replays it.
//!
//! Why a simulator at all: consensus bugs hide in interleavings that a real cluster meets
//! once a month. A seeded world meets thousands per second, and replays the one that failed.
//!
//! ```no_run
//! use abcast_sim::{run_seeds, FaultMix, SimConfig};
//! use abcast_sim::toy::{Toy, ToyConfig};
//! use abcast_core::NodeId;
//!
//! let base = SimConfig::new(3, 0, FaultMix::None).replay_target("abcast-sim", "toy", "");
//! let toy = ToyConfig::new(&base.nodes);
//! let factory = |id: NodeId, start| Toy::new(toy.clone(), id, start);
//! let sweep = run_seeds(&base, FaultMix::Loss, 0..200, &factory).expect("no violation");
//! assert_eq!(sweep.runs, 200);
//! ```
//!
//! `tests/uring.rs` runs U-Ring Paxos the same way, with a factory that gives each (re)start
//! an empty `MemoryStore` (so a restart is amnesic):
//!
//! ```ignore
//! let ring = RingConfig::pal(&[0, 1, 2]);
//! let factory = move |id, start| {
//!     let store = Box::new(MemoryStore::new(ring.store_capacity_instances, ring.store_capacity_bytes));
//!     URing::new(ring.clone(), id, start, store).expect("valid ring config")
//! };
//! run_seeds(&SimConfig::new(3, 0, FaultMix::Crash), FaultMix::Crash, 0..200, &factory)?;
//! ```
//!
//! **Disks.** A store that lives on disk runs over the simulator's disks: one
//! [`abcast_core::storage::MemDir`] per node, kept across the node's crashes. The factory
//! flavour [`run_with_disk`] / [`run_seeds_with_disk`] / [`replay_from_env_with_disk`] is
//! `Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError>`: it opens its store on the
//! disk it is given (a store per ring in `disk.subdir(..)`), and an error (a log its
//! recovery refuses) fails the run as [`ViolationKind::StorageFailed`], like a failed group
//! commit. The plain factories run through [`without_disk`]. The simulator calls
//! `Protocol::sync_storage` for every outbox with `needs_sync`, before its sends;
//! [`SimConfig::crash_model`] (`ABCAST_SIM_CRASH` in replay lines) picks what a crash does
//! to the disk: `process` keeps every write (the default), `machine` keeps only what was
//! synced plus a torn, maybe garbled, prefix of the rest, sometimes in the middle of a group
//! commit, and `mixed` does either. `tests/durable.rs` runs the durable log that way:
//!
//! ```ignore
//! let ring = RingConfig::pal(&[0, 1, 2]);
//! let factory = move |id, start, disk: MemDir| {
//!     let (store, _recovery) = DurableStore::open(disk, options(true))?;
//!     Ok(URing::new(ring.clone(), id, start, Box::new(store)).expect("valid ring config"))
//! };
//! let mut base = SimConfig::new(3, 0, FaultMix::Crash);
//! base.crash_model = CrashModel::Machine;
//! run_seeds_with_disk(&base, FaultMix::Crash, 0..200, &factory)?;
//! ```
//!
//! Modules: [`rng`] (the one PRNG), [`config`] (a run and its replay line), [`plan`] (the
//! fault parameters a seed draws), [`sim`] (the world and its driver loop), [`checker`]
//! (the properties), [`trace`] (the event log), [`sweep`] (many seeds, one replay),
//! [`toy`] (a small sequencer protocol and its deliberately broken variants).

pub mod checker;
pub mod config;
pub mod evs;
pub mod faults;
pub mod plan;
pub mod rng;
pub mod scenario;
pub mod sim;
pub mod suites;
pub mod sweep;
pub mod toy;
pub mod trace;

pub use checker::{Checker, Failure, SeqDigest, SnapshotEvent, ViolationKind};
pub use config::{CrashModel, FaultMix, Observer, ReplayTarget, SimConfig};
pub use faults::{FaultCounts, FaultKind};
pub use plan::{DiskPlan, FaultPlan};
pub use rng::SimRng;
pub use sim::{
    SimReport, Violation, capture_messages, decode, encode, run, run_with_disk, without_disk,
};
pub use sweep::{
    SweepReport, for_seeds, replay_from_env, replay_from_env_with_disk, run_seeds, run_seeds_each,
    run_seeds_with_disk,
};
pub use trace::{DropReason, Trace, TraceEvent, TraceRecord};
