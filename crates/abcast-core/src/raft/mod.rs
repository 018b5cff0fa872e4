//! Raft with joint consensus (seed 001 §2.5 and §2.5.1), with the optimisations of
//! Ongaro's thesis, as a pure state machine: its configuration and its messages.

pub mod config;
pub mod messages;

pub use config::RaftConfig;
pub use messages::Message;
