//! abcast-node: the `abcast node` daemon over `abcast-runtime` (`node`), its TOML config
//! file (`nodeconfig`; the token ring's `[token]` in `token`), the client of a running node (`client`: `abcast propose`, `learn`,
//! `follow`), and the node's outputs as a parent reads them: the JSON stats lines
//! (`stats`, docs/CONTRACTS.md) and the delivery logs (`deliverylog`).

pub mod client;
pub mod deliverylog;
pub mod groups;
pub mod leader;
pub mod node;
pub mod nodeconfig;
pub mod stats;
pub mod token;
