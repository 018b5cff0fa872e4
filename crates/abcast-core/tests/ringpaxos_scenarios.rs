//! Scenario tests of IP-multicast Ring Paxos (seed 003) on a tiny in-process network: three
//! PAL nodes (0, 1, 2) and one learner (3). Multicasts reach every node, the sender
//! included. Faults only where a test injects them; the seeded simulator is in `abcast-sim`.

use abcast_core::codec::{Encoder, WireMessage};
use abcast_core::ringpaxos::{Message, RingPaxos, RingPaxosConfig, StartInfo};
use abcast_core::storage::MemoryStore;
use abcast_core::{NodeId, Outbox, Protocol};
use bytes::Bytes;
use std::collections::VecDeque;

const N: usize = 4;

struct Net {
    cfg: RingPaxosConfig,
    nodes: Vec<Option<RingPaxos>>,
    queue: VecDeque<(NodeId, NodeId, Message)>,
    now: u64,
    delivered: Vec<Vec<Bytes>>,
    acks: usize,
    /// Every message handed to the network: (from, to or None for a multicast, kind name).
    log: Vec<(u32, Option<u32>, &'static str)>,
    /// Drop messages of this kind name addressed to this node.
    drop: Option<(u32, &'static str)>,
}

fn name(m: &Message) -> &'static str {
    match m {
        Message::Submit(_) => "submit",
        Message::Phase1a(_) => "1a",
        Message::Phase1b(_) => "1b",
        Message::Phase2a(_) => "2a",
        Message::Phase2b(_) => "2b",
        Message::Decision(_) => "decision",
        Message::Nack(_) => "nack",
        Message::Retrieve(_) => "retrieve",
        Message::Decided(_) => "decided",
        Message::Heartbeat(_) => "heartbeat",
        Message::Repair(_) => "repair",
        Message::SnapshotFetch(_) => "snapshot-fetch",
        Message::SnapshotChunk(_) => "snapshot-chunk",
    }
}

impl Net {
    fn new() -> Net {
        let cfg = RingPaxosConfig::with_roles(&[0, 1, 2], &[3]);
        let mut net = Net {
            nodes: Vec::new(),
            queue: VecDeque::new(),
            now: 0,
            delivered: vec![Vec::new(); N],
            acks: 0,
            log: Vec::new(),
            drop: None,
            cfg,
        };
        for i in 0..N as u32 {
            net.nodes.push(Some(net.make(i)));
        }
        net
    }
    fn make(&self, i: u32) -> RingPaxos {
        let store = MemoryStore::new(
            self.cfg.store_capacity_instances,
            self.cfg.store_capacity_bytes,
        );
        RingPaxos::new(
            self.cfg.clone(),
            NodeId(i),
            StartInfo::FRESH,
            Box::new(store),
        )
        .expect("valid config")
    }
    fn wire(m: Message) -> Message {
        let mut e = Encoder::new();
        m.encode(&mut e);
        Message::decode(m.kind(), e.to_bytes()).expect("decodes")
    }
    fn apply(&mut self, from: u32, out: &mut Outbox<Message>) {
        for (to, m) in out.sends.drain(..) {
            self.log.push((from, Some(to.0), name(&m)));
            self.queue.push_back((NodeId(from), to, Self::wire(m)));
        }
        for m in out.multicasts.drain(..) {
            self.log.push((from, None, name(&m)));
            for to in 0..N as u32 {
                self.queue
                    .push_back((NodeId(from), NodeId(to), Self::wire(m.clone())));
            }
        }
        for d in out.deliveries.drain(..) {
            self.delivered[from as usize].extend(d.batch.values().map(|v| v.payload));
        }
        self.acks += out.acks.len();
        out.clear();
    }
    fn step(&mut self) -> bool {
        let Some((from, to, m)) = self.queue.pop_front() else {
            return false;
        };
        if self.drop == Some((to.0, name(&m))) {
            return true;
        }
        let mut out = Outbox::new();
        let now = self.now;
        match self.nodes[to.0 as usize].as_mut() {
            Some(n) => n.receive(now, from, m, &mut out),
            None => return true,
        }
        self.apply(to.0, &mut out);
        true
    }
    fn run_for(&mut self, us: u64) {
        let end = self.now + us;
        while self.now < end {
            self.now += 100;
            for i in 0..N {
                let mut out = Outbox::new();
                let now = self.now;
                if let Some(n) = self.nodes[i].as_mut() {
                    n.tick(now, &mut out);
                }
                self.apply(i as u32, &mut out);
            }
            let mut budget = 100_000;
            while budget > 0 && self.step() {
                budget -= 1;
            }
        }
    }
    fn tick(&mut self, i: usize) {
        let mut out = Outbox::new();
        let now = self.now;
        if let Some(n) = self.nodes[i].as_mut() {
            n.tick(now, &mut out);
        }
        self.apply(i as u32, &mut out);
    }
    fn propose(&mut self, at: usize, payload: &str) {
        let mut out = Outbox::new();
        let now = self.now;
        let r = self.nodes[at]
            .as_mut()
            .map(|n| n.propose(now, Bytes::from(payload.to_string()), &mut out));
        assert!(matches!(r, Some(Ok(_))), "propose at {at}: {r:?}");
        self.apply(at as u32, &mut out);
    }
    fn seq(&self, i: usize) -> Vec<String> {
        self.delivered[i]
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect()
    }
    fn count(&self, from: u32, to: Option<u32>, kind: &str) -> usize {
        self.log
            .iter()
            .filter(|(f, t, k)| *f == from && *t == to && *k == kind)
            .count()
    }
}

#[test]
fn a_value_is_multicast_once_voted_around_the_ring_and_learned_everywhere() {
    let mut net = Net::new();
    net.run_for(200_000); // node 0 (first acceptor) runs phase 1 and leads
    assert!(net.nodes[0].as_ref().is_some_and(|n| n.status().leading));
    net.propose(2, "hello");
    net.run_for(20_000);
    for i in 0..N {
        assert_eq!(net.seq(i), vec!["hello"], "node {i}");
    }
    assert_eq!(net.acks, 1);
    // The proposer unicast it to the coordinator, which ip-multicast one Phase 2A ...
    assert_eq!(net.count(2, Some(0), "submit"), 1);
    assert_eq!(net.count(0, None, "2a"), 1);
    // ... the ring is [first acceptor that promised, coordinator]: one Phase 2B reached
    // the coordinator, and the decision left in a multicast.
    let p2b: usize = (1..3).map(|a| net.count(a, Some(0), "2b")).sum();
    assert_eq!(p2b, 1);
    assert_eq!(net.count(0, None, "decision"), 1);
}

#[test]
fn decisions_ride_on_the_next_phase2a() {
    let mut net = Net::new();
    net.run_for(200_000);
    // Same instant, no time passes: the decision of "a" waits for its linger...
    net.propose(0, "a");
    net.tick(0);
    while net.step() {}
    assert_eq!(net.count(0, None, "decision"), 0);
    assert!(
        net.seq(3).is_empty(),
        "the learner has the value, not the decision"
    );
    // ... and leaves inside the Phase 2A of "b" (§6.1: ids of decided values, then new values).
    net.propose(0, "b");
    net.tick(0);
    while net.step() {}
    assert_eq!(net.count(0, None, "2a"), 2);
    assert_eq!(net.count(0, None, "decision"), 0);
    assert_eq!(net.seq(3), vec!["a"]);
    net.run_for(20_000);
    assert_eq!(net.seq(3), vec!["a", "b"]);
}

#[test]
fn a_learner_that_lost_every_decision_retrieves_them() {
    let mut net = Net::new();
    net.run_for(200_000);
    net.drop = Some((3, "decision"));
    net.propose(1, "x");
    net.propose(1, "y");
    net.run_for(20_000);
    assert!(net.seq(3).is_empty(), "no decision reached the learner");
    net.run_for(500_000); // heartbeats tell it what is decided; it asks after the timeout
    assert_eq!(net.seq(3), net.seq(0));
    assert_eq!(net.seq(3).len(), 2);
    assert!(net.log.iter().any(|(f, _, k)| *f == 3 && *k == "retrieve"));
}

#[test]
fn a_failed_coordinator_is_replaced_by_the_next_acceptor() {
    let mut net = Net::new();
    net.run_for(200_000);
    net.propose(1, "before");
    net.run_for(20_000);
    net.nodes[0] = None; // the coordinator fails
    net.run_for(1_000_000);
    let st = net.nodes[1].as_ref().map(|n| n.status());
    assert!(st.as_ref().is_some_and(|s| s.leading), "{st:?}");
    net.propose(2, "after");
    net.run_for(100_000);
    for i in 1..N {
        assert_eq!(net.seq(i), vec!["before", "after"], "node {i}");
    }
}

#[test]
fn a_failed_ring_acceptor_is_replaced_by_the_spare() {
    let mut net = Net::new();
    net.run_for(200_000);
    net.propose(2, "before");
    net.run_for(20_000);
    // On this FIFO network node 1's promise arrived first: the ring is [1, 0], 2 is spare.
    let by_1 = net.count(1, Some(0), "2b");
    assert_eq!(by_1, 1);
    net.nodes[1] = None;
    net.run_for(1_000_000);
    net.propose(2, "after");
    net.run_for(100_000);
    for i in [0, 2, 3] {
        assert_eq!(net.seq(i), vec!["before", "after"], "node {i}");
    }
    assert!(
        net.count(2, Some(0), "2b") >= 1,
        "the spare joined the ring"
    );
    assert!(net.nodes[0].as_ref().is_some_and(|n| n.status().leading));
}
