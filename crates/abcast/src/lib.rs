//! abcast: the real-I/O side of the toolkit. `runtime` drives any sans-io protocol of
//! `abcast-core` over TCP; `node` is the `abcast node` daemon built on it, configured by
//! `nodeconfig`; `client` speaks to a running node (`abcast propose`, `abcast learn`).

pub mod bench;
pub mod client;
pub mod deliverylog;
pub mod demo;
pub mod disk;
pub mod node;
pub mod nodeconfig;
pub mod runtime;
pub mod stats;
