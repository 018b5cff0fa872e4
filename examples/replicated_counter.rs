//! A replicated counter: three local nodes run U-Ring Paxos behind `abcast_runtime::handle`;
//! every replica applies the same "add k" commands in the same order, and they agree.
//! Run: `cargo run -p abcast-runtime --example replicated_counter`.
use abcast_core::config::StartInfo;
use abcast_core::storage::MemoryStore;
use abcast_core::uring::{RingConfig, URing};
use abcast_core::{Application, Delivery, Micros, NodeId};
use abcast_runtime::{DriverConfig, Hooks, Listeners, TransportConfig, handle, transport};
use bytes::Bytes;
use std::time::Duration;

/// The state machine: a running total of the values added.
#[derive(Default)]
pub struct Counter {
    pub total: i64,
    pub applied: u64,
}

impl Application for Counter {
    fn deliver(&mut self, _now: Micros, d: &Delivery, results: &mut Vec<Bytes>) {
        for v in d.batch.values() {
            // Anything but 8 bytes (the read barrier's empty marker) is a no-op.
            if let Ok(b) = <[u8; 8]>::try_from(&v.payload[..]) {
                self.total += i64::from_le_bytes(b);
                self.applied += 1;
            }
            results.push(Bytes::copy_from_slice(&self.total.to_le_bytes()));
        }
    }
}

impl Hooks for Counter {}

/// Runs the cluster, adds 1..=30 through all three nodes; returns each replica's total.
pub fn run() -> Result<Vec<i64>, Box<dyn std::error::Error>> {
    let t = TransportConfig::default();
    let mut listeners = Vec::new();
    let mut peers = Vec::new();
    for i in 0..3u32 {
        let peer = transport::bind_listener("127.0.0.1:0".parse()?, &t)?;
        peers.push((NodeId(i), peer.local_addr()?));
        listeners.push(Listeners { peer, client: None });
    }
    let mut nodes = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let me = NodeId(i as u32);
        let store = Box::new(MemoryStore::new(1 << 16, 64 << 20));
        let ring = URing::new(RingConfig::pal(&[0, 1, 2]), me, StartInfo::FRESH, store)?;
        let cfg = DriverConfig::new(me, 7, peers.clone());
        nodes.push(handle::start(cfg, l, ring, Counter::default())?);
    }
    let patience = Duration::from_secs(60);
    for k in 1..=30i64 {
        let ticket = nodes[k as usize % 3].propose(Bytes::copy_from_slice(&k.to_le_bytes()))?;
        let applied = ticket.wait(patience)?;
        let total = applied
            .result
            .and_then(|r| <[u8; 8]>::try_from(&r[..]).ok());
        if k % 10 == 0 {
            let total = total.map_or(0, i64::from_le_bytes);
            println!(
                "add {k:2} at instance {:3} -> total {total}",
                applied.instance
            );
        }
    }
    // A read barrier on each replica: it has applied everything decided before it.
    for n in &nodes {
        let at = n.read_barrier(patience)?;
        println!("node {} read barrier at instance {}", n.id().0, at.upto);
    }
    let mut totals = Vec::new();
    for n in nodes {
        let id = n.id();
        let stopped = n.shutdown()?;
        println!(
            "node {}: total {} after {} commands",
            id.0, stopped.app.total, stopped.app.applied
        );
        totals.push(stopped.app.total);
    }
    if totals.iter().any(|&x| x != 465) {
        return Err(format!("replicas disagree: {totals:?}").into());
    }
    println!("all replicas agree: {}", totals[0]);
    Ok(totals)
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    run().map(|_| ())
}
