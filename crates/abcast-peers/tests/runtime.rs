//! Both cores on our real runtime (`abcast_runtime::handle`, TCP on loopback), as the
//! benchmarks will run them: three nodes, a replicated counter fed through every node, a
//! read barrier on each (raft-rs' read index; OmniPaxos has none, so the handle orders
//! the read through the log), and every replica ends at the same total.

use abcast_core::config::StartInfo;
use abcast_core::{Application, Delivery, Micros, NodeId, Protocol};
use abcast_peers::{OmniPaxosCore, OmniPaxosCoreConfig, RaftRsCore, RaftRsCoreConfig};
use abcast_runtime::{DriverConfig, Hooks, Listeners, TransportConfig, handle, transport};
use bytes::Bytes;
use std::time::Duration;

#[derive(Default)]
struct Counter {
    total: i64,
}

impl Application for Counter {
    fn deliver(&mut self, _now: Micros, d: &Delivery, results: &mut Vec<Bytes>) {
        for v in d.batch.values() {
            // Anything but 8 bytes (the read barrier's empty value) is a no-op.
            if let Ok(b) = <[u8; 8]>::try_from(&v.payload[..]) {
                self.total += i64::from_le_bytes(b);
            }
            results.push(Bytes::copy_from_slice(&self.total.to_le_bytes()));
        }
    }
}

impl Hooks for Counter {}

fn counter_agrees<P>(make: impl Fn(NodeId) -> P)
where
    P: Protocol + Send + 'static,
    P::Message: Send,
{
    let t = TransportConfig::default();
    let mut listeners = Vec::new();
    let mut peers = Vec::new();
    for i in 0..3u32 {
        let peer = transport::bind_listener("127.0.0.1:0".parse().expect("addr"), &t)
            .expect("a loopback listener");
        peers.push((NodeId(i), peer.local_addr().expect("its address")));
        listeners.push(Listeners { peer, client: None });
    }
    let nodes: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let me = NodeId(i as u32);
            let cfg = DriverConfig::new(me, 17, peers.clone());
            handle::start(cfg, l, make(me), Counter::default()).expect("the node starts")
        })
        .collect();
    let patience = Duration::from_secs(30);
    for k in 1..=30i64 {
        let ticket = nodes[k as usize % 3]
            .propose(Bytes::copy_from_slice(&k.to_le_bytes()))
            .expect("proposed");
        ticket.wait(patience).expect("decided and applied");
    }
    for n in &nodes {
        let at = n.read_barrier(patience).expect("a read barrier");
        assert!(at.upto >= 1, "{at:?}");
    }
    let totals: Vec<i64> = nodes
        .into_iter()
        .map(|n| n.shutdown().expect("stops").app.total)
        .collect();
    assert_eq!(totals, vec![465; 3]);
}

#[test]
fn omnipaxos_runs_a_replicated_counter_on_our_runtime() {
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let cfg = OmniPaxosCoreConfig::new(&ids);
    counter_agrees(|me| OmniPaxosCore::new(cfg.clone(), me, StartInfo::FRESH).expect("valid"));
}

#[test]
fn raftrs_runs_a_replicated_counter_on_our_runtime() {
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let cfg = RaftRsCoreConfig::new(&ids);
    counter_agrees(|me| RaftRsCore::new(cfg.clone(), me, StartInfo::FRESH).expect("valid"));
}
