//! U-Ring Paxos (being written).
pub mod config;
pub use config::{ConfigError, Member, RingConfig, Roles, StartInfo};
