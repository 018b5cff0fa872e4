//! abcast-peers: other projects' protocol cores behind our [`abcast_core::Protocol`] trait,
//! for benchmarks and tests only (issue 17, "the race, in one harness"). Our runtime,
//! network, storage and load generator drive them exactly as they drive our own protocols,
//! so a benchmark compares protocol implementations and nothing else, as seed 001 did for
//! Kompact (§4.2: one client, one communicator, Raft and Paxos as replicas behind it).
//!
//! - [`OmniPaxosCore`]: `omnipaxos` =0.2.4 (Sequence Paxos + Ballot Leader Election), with
//!   `omnipaxos_storage` =0.2.4's `MemoryStorage`; messages in the crate's serde derives,
//!   bincode =1.3.3. See [`omni`].
//! - [`RaftRsCore`]: `raft` =0.7.0 (TiKV raft-rs) with `MemStorage`; messages in raft-rs'
//!   protobuf encoding (`protobuf-codec`, protobuf =2.28.0). See [`raftrs`].
//!
//! Both share with our protocols the proposer (our `Batcher`: the same batches, window and
//! re-sends), the entry encoding (`EntryBody::Values`), the learners' de-duplication and
//! delivery in log order on every node, and acknowledgements at the proposer (`common.rs`).
//! Each module's opening comment lists its tuning (with where each value comes from) and
//! the adapter choices the crate forced; `README.md` beside `Cargo.toml` sums them up.

mod common;
pub mod omni;
pub mod raftrs;
mod session;

pub use common::default_batch_limits;
pub use omni::{
    OmniPaxosCore, OmniPaxosCoreConfig, OmniPaxosCounters, OmniPaxosMessage, SharedMemoryStorage,
};
pub use raftrs::RaftRsCounters;
pub use raftrs::{RaftRsCore, RaftRsCoreConfig, RaftRsMessage};
pub use session::SessionCounters;
