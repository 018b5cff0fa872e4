//! Scenario tests of U-Ring Paxos on a tiny in-process network (no faults unless the test
//! injects them). The seeded fault simulator lives in `abcast-sim`; these read as stories.

use abcast_core::codec::{Encoder, WireMessage};
use abcast_core::config::StartInfo;
use abcast_core::storage::MemoryStore;
use abcast_core::uring::{Message, RingConfig, URing};
use abcast_core::{Ballot, NodeId, Outbox, Protocol};
use bytes::Bytes;
use std::collections::VecDeque;

struct Net {
    nodes: Vec<Option<URing>>,
    cfg: RingConfig,
    queue: VecDeque<(NodeId, NodeId, Message)>,
    now: u64,
    delivered: Vec<Vec<(u64, Vec<Bytes>)>>,
    acks: usize,
    down: Vec<bool>,
    drop_decisions_to: Option<NodeId>,
    /// Every ballot a node put in a phase 1a it sent: the ballots it made (a coordinator
    /// runs phase 1 under each of its ballots before it proposes anything in it).
    phase1a_ballots: Vec<(NodeId, Ballot)>,
    /// Snapshots a node installed from a peer, with how many deliveries it had before.
    installs: Vec<(usize, usize, abcast_core::Snapshot)>,
    /// What the network does with each message a node is about to receive (after `down`):
    /// a test's fault, `None` for a network that delivers everything.
    rule: Option<Rule>,
    /// Messages the rule kept back (late in the network), in the order they were sent.
    held: Vec<(NodeId, NodeId, Message)>,
    /// Instances a learner skipped (`Outbox::skips`): (node, from, to).
    skips: Vec<(usize, u64, u64)>,
    /// Every event a node reported, for a failing test's message.
    events: Vec<(usize, String)>,
}

/// What the network does with one message (see `Net::rule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Deliver,
    Drop,
    /// Not delivered now: kept in `Net::held`, late in the network, until the test hands it
    /// to a node (`Net::deliver_now`).
    Hold,
    /// Delivered, and a copy kept in `Net::held` (the network duplicated it).
    Duplicate,
}

type Rule = Box<dyn FnMut(NodeId, NodeId, &Message) -> Fate>;

impl Net {
    fn new(n: u32) -> Net {
        let ids: Vec<u32> = (0..n).collect();
        Net::with_ring(RingConfig::pal(&ids))
    }

    /// A ring whose learners take snapshots (acceptors trim below them; a learner behind
    /// the trim point installs a peer's).
    fn with_snapshots(n: u32) -> Net {
        let ids: Vec<u32> = (0..n).collect();
        let mut cfg = RingConfig::pal(&ids);
        cfg.learner_snapshots = true;
        Net::with_ring(cfg)
    }

    fn with_ring(cfg: RingConfig) -> Net {
        let n = cfg.members.len() as u32;
        let nodes = cfg
            .members
            .iter()
            .map(|m| Some(Self::make(&cfg, m.id.0, StartInfo::FRESH)))
            .collect();
        Net {
            nodes,
            cfg,
            queue: VecDeque::new(),
            now: 0,
            delivered: vec![Vec::new(); n as usize],
            acks: 0,
            down: vec![false; n as usize],
            drop_decisions_to: None,
            phase1a_ballots: Vec::new(),
            installs: Vec::new(),
            rule: None,
            held: Vec::new(),
            skips: Vec::new(),
            events: Vec::new(),
        }
    }
    fn make(cfg: &RingConfig, i: u32, start: StartInfo) -> URing {
        let store = MemoryStore::new(cfg.store_capacity_instances, cfg.store_capacity_bytes);
        URing::new(cfg.clone(), NodeId(i), start, Box::new(store)).expect("valid config")
    }
    fn apply(&mut self, from: NodeId, out: &mut Outbox<Message>) {
        for (to, m) in out.sends.drain(..) {
            if let Message::Phase1a(p) = &m
                && !self.phase1a_ballots.contains(&(from, p.ballot))
            {
                self.phase1a_ballots.push((from, p.ballot));
            }
            // Through the codec, as on the wire.
            let mut e = Encoder::new();
            m.encode(&mut e);
            let back = Message::decode(m.kind(), e.to_bytes()).expect("decodes");
            self.queue.push_back((from, to, back));
        }
        let node = from.0 as usize;
        let mut installs = out.installs.drain(..).peekable();
        for (k, d) in out.deliveries.drain(..).enumerate() {
            while let Some(i) = installs.next_if(|i| i.position <= k) {
                self.installs
                    .push((node, self.delivered[node].len(), i.snapshot));
            }
            self.delivered[from.0 as usize]
                .push((d.instance, d.batch.values().map(|v| v.payload).collect()));
        }
        for i in installs {
            self.installs
                .push((node, self.delivered[node].len(), i.snapshot));
        }
        self.acks += out.acks.len();
        for k in out.skips.drain(..) {
            self.skips.push((node, k.from, k.to));
        }
        for e in out.events.drain(..) {
            self.events.push((node, e));
        }
        out.clear();
    }
    fn step(&mut self) -> bool {
        let Some((from, to, m)) = self.queue.pop_front() else {
            return false;
        };
        if self.down[to.0 as usize] || self.down[from.0 as usize] {
            return true;
        }
        if self.drop_decisions_to == Some(to) && matches!(m, Message::Decision(_)) {
            return true;
        }
        match self
            .rule
            .as_mut()
            .map_or(Fate::Deliver, |r| r(from, to, &m))
        {
            Fate::Deliver => {}
            Fate::Drop => return true,
            Fate::Hold => {
                self.held.push((from, to, m));
                return true;
            }
            Fate::Duplicate => self.held.push((from, to, m.clone())),
        }
        let mut out = Outbox::new();
        if let Some(n) = self.nodes[to.0 as usize].as_mut() {
            n.receive(self.now, from, m, &mut out);
        }
        self.apply(to, &mut out);
        true
    }
    fn tick_all(&mut self) {
        for i in 0..self.nodes.len() {
            if self.down[i] {
                continue;
            }
            let mut out = Outbox::new();
            if let Some(n) = self.nodes[i].as_mut() {
                n.tick(self.now, &mut out);
            }
            self.apply(NodeId(i as u32), &mut out);
        }
    }
    fn run_for(&mut self, us: u64) {
        let end = self.now + us;
        while self.now < end {
            self.now += 100;
            self.tick_all();
            let mut budget = 100_000;
            while budget > 0 && self.step() {
                budget -= 1;
            }
        }
    }
    fn propose(&mut self, at: usize, payload: &str) -> bool {
        let mut out = Outbox::new();
        let r = self.nodes[at]
            .as_mut()
            .map(|n| n.propose(self.now, Bytes::from(payload.to_string()), &mut out));
        self.apply(NodeId(at as u32), &mut out);
        matches!(r, Some(Ok(_)))
    }
    fn seq(&self, i: usize) -> Vec<Bytes> {
        self.delivered[i]
            .iter()
            .flat_map(|(_, v)| v.clone())
            .collect()
    }
    /// Hands `m` to `to` now, whatever the rule and `down` say: a message that was in the
    /// network all along (its sender may have failed since).
    fn deliver_now(&mut self, from: NodeId, to: NodeId, m: Message) {
        let mut out = Outbox::new();
        if let Some(n) = self.nodes[to.0 as usize].as_mut() {
            n.receive(self.now, from, m, &mut out);
        }
        self.apply(to, &mut out);
    }
    /// Node `i` restarts as life `incarnation` on an empty in-memory store: amnesic, its
    /// learner from instance 1 (its earlier deliveries are forgotten here too).
    fn restart(&mut self, i: usize, incarnation: u64) {
        let start = StartInfo {
            incarnation,
            amnesic: true,
            start_seq: incarnation << 40,
        };
        self.nodes[i] = Some(Self::make(&self.cfg, i as u32, start));
        self.delivered[i].clear();
        self.down[i] = false;
    }
    fn status(&self, i: usize) -> abcast_core::Status {
        self.nodes[i].as_ref().expect("node is running").status()
    }
    /// What node `i` delivered in `instance`, if it delivered anything there.
    fn delivered_in(&self, i: usize, instance: u64) -> Option<&Vec<Bytes>> {
        self.delivered[i]
            .iter()
            .find(|(d, _)| *d == instance)
            .map(|(_, v)| v)
    }
    /// Every instance two nodes delivered differently.
    fn disagreements(&self) -> Vec<String> {
        let mut found = Vec::new();
        for a in 0..self.delivered.len() {
            for (instance, values) in &self.delivered[a] {
                for b in a + 1..self.delivered.len() {
                    if let Some(other) = self.delivered_in(b, *instance)
                        && other != values
                    {
                        found.push(format!(
                            "instance {instance}: node {a} delivered {values:?}, node {b} {other:?}"
                        ));
                    }
                }
            }
        }
        found
    }
    fn events_of(&self, i: usize) -> Vec<&str> {
        self.events
            .iter()
            .filter(|(n, _)| *n == i)
            .map(|(_, e)| e.as_str())
            .collect()
    }
}

#[test]
fn three_nodes_deliver_the_same_sequence() {
    let mut net = Net::new(3);
    net.run_for(400_000); // elect a coordinator
    for k in 0..30 {
        assert!(net.propose(k % 3, &format!("v{k}")));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    let s0 = net.seq(0);
    assert_eq!(s0.len(), 30, "all values delivered at node 0");
    assert_eq!(net.seq(1), s0);
    assert_eq!(net.seq(2), s0);
    assert_eq!(net.acks, 30);
}

#[test]
fn a_lost_decision_is_retrieved() {
    let mut net = Net::new(3);
    net.run_for(400_000);
    net.drop_decisions_to = Some(NodeId(2));
    for k in 0..5 {
        net.propose(0, &format!("v{k}"));
        net.run_for(1_000);
    }
    net.drop_decisions_to = None;
    net.run_for(1_000_000);
    assert_eq!(net.seq(2), net.seq(0));
    assert_eq!(net.seq(0).len(), 5);
}

#[test]
fn the_coordinator_fails_and_the_next_acceptor_takes_over() {
    let mut net = Net::new(3);
    net.run_for(400_000);
    for k in 0..5 {
        net.propose(1, &format!("a{k}"));
    }
    net.run_for(50_000);
    net.down[0] = true;
    net.run_for(1_000_000);
    for k in 0..5 {
        net.propose(2, &format!("b{k}"));
    }
    net.run_for(1_000_000);
    assert_eq!(net.seq(1).len(), 10);
    assert_eq!(net.seq(1), net.seq(2));
}

#[test]
fn a_lower_id_node_joining_late_takes_over_without_stalling() {
    let mut net = Net::new(3);
    net.down[0] = true;
    net.run_for(1_000_000);
    for k in 0..20 {
        net.propose(1 + k % 2, &format!("a{k}"));
        net.run_for(1_000);
    }
    net.run_for(200_000);
    assert_eq!(net.seq(1).len(), 20);
    // Node 0 (lowest id) joins late: it becomes coordinator and must not stall.
    net.down[0] = false;
    net.nodes[0] = Some(Net::make(&net.cfg, 0, StartInfo::FRESH));
    net.run_for(1_000_000);
    for k in 0..20 {
        net.propose(k % 3, &format!("b{k}"));
        net.run_for(1_000);
    }
    net.run_for(1_000_000);
    assert_eq!(
        net.nodes[0].as_ref().map(|n| n.status().leading),
        Some(true)
    );
    assert_eq!(net.seq(1).len(), 40);
    assert_eq!(net.seq(0), net.seq(1));
    assert_eq!(net.seq(2), net.seq(1));
}

#[test]
fn an_amnesic_acceptor_is_repaired_before_it_counts_in_phase_1() {
    let mut net = Net::new(3);
    net.run_for(400_000);
    for k in 0..10 {
        net.propose(k % 3, &format!("a{k}"));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    // Node 1 restarts on an empty in-memory store: a new incarnation, amnesic.
    net.down[1] = true;
    net.run_for(500_000);
    net.down[1] = false;
    net.nodes[1] = Some(Net::make(
        &net.cfg,
        1,
        StartInfo {
            incarnation: 1,
            amnesic: true,
            start_seq: 1 << 40,
        },
    ));
    net.delivered[1].clear();
    net.run_for(2_000_000);
    let st = net.nodes[1].as_ref().map(|n| n.status()).expect("node 1");
    assert!(
        !st.amnesic,
        "repaired after learning every decision up to the repair point: {st:?}"
    );
    // Now the first coordinator dies: nodes 1 and 2 must form a quorum, node 1 included.
    net.down[0] = true;
    for k in 0..10 {
        net.propose(1 + k % 2, &format!("b{k}"));
        net.run_for(1_000);
    }
    net.run_for(2_000_000);
    assert_eq!(net.seq(2).len(), 20);
    assert_eq!(
        net.seq(1),
        net.seq(2),
        "the restarted learner replays from instance 1"
    );
}

#[test]
fn a_restarted_coordinator_never_reuses_a_ballot_of_its_previous_life() {
    let mut net = Net::new(3);
    net.run_for(400_000);
    for k in 0..5 {
        net.propose(k % 3, &format!("a{k}"));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    assert_eq!(net.seq(1).len(), 5);
    let old: Vec<Ballot> = ballots_of(&net, 0);
    assert!(!old.is_empty(), "node 0 coordinated in its first life");
    // Node 0 crashes and is back before anyone suspects it (failure_timeout_us is 300 ms),
    // with a new incarnation and an empty in-memory store: its round counter starts at 0
    // again, and nobody else has taken over, so the acceptors' promise is still its old
    // ballot, and a phase 1 under that very ballot would be granted.
    net.down[0] = true;
    net.run_for(100_000);
    net.down[0] = false;
    net.phase1a_ballots.clear();
    net.nodes[0] = Some(Net::make(
        &net.cfg,
        0,
        StartInfo {
            incarnation: 1,
            amnesic: true,
            start_seq: 1 << 40,
        },
    ));
    net.delivered[0].clear();
    net.run_for(1_000_000);
    let st = net.nodes[0].as_ref().map(|n| n.status()).expect("node 0");
    assert!(st.leading, "node 0 took over again: {st:?}");
    let new = ballots_of(&net, 0);
    assert!(!new.is_empty());
    for b in &new {
        assert_eq!(b.incarnation, 1, "made in the second life: {b}");
        assert!(!old.contains(b), "{b} was used by the first life too");
    }
    // The hazard is real: the new life picked a round and node its old life had used, and
    // only the incarnation tells the two ballots apart.
    assert!(
        new.iter()
            .any(|b| old.iter().any(|o| (o.round, o.node) == (b.round, b.node))),
        "old {old:?}, new {new:?}"
    );
    // The ballot it leads with is above every ballot of the old life: acceptors that
    // promised or voted in an old ballot take it, and phase 1 under it found those votes.
    let leading = *new.last().expect("a ballot");
    assert!(
        old.iter().all(|o| *o < leading),
        "old {old:?}, leads with {leading}"
    );
    // And the log goes on as one: what the first life decided stays decided (an in-memory
    // store panics if a decided instance changes its decree), values proposed now follow,
    // and the restarted learner replays it all.
    for k in 0..5 {
        net.propose(k % 3, &format!("b{k}"));
        net.run_for(1_000);
    }
    net.run_for(1_000_000);
    assert_eq!(net.seq(1).len(), 10);
    assert_eq!(net.seq(2), net.seq(1));
    assert_eq!(net.seq(0), net.seq(1));
    assert_eq!(
        net.seq(1)[..5],
        ["a0", "a1", "a2", "a3", "a4"].map(Bytes::from)[..]
    );
}

/// The ballots `node` ran phase 1 under, in order.
fn ballots_of(net: &Net, node: u32) -> Vec<Ballot> {
    net.phase1a_ballots
        .iter()
        .filter(|(from, _)| *from == NodeId(node))
        .map(|(_, b)| *b)
        .collect()
}

/// Not a benchmark (no timing assertion): prints the protocol's own cost per value so a
/// regression in the state machine shows up next to the socket benchmarks. Run with
/// `cargo test --release -p abcast-core --test uring_scenarios protocol_cost -- --nocapture --ignored`.
#[test]
#[ignore]
fn protocol_cost_per_value() {
    let mut net = Net::new(3);
    net.run_for(400_000);
    let payload = Bytes::from(vec![7u8; 16]);
    let start = std::time::Instant::now();
    let mut proposed = 0u64;
    while start.elapsed().as_secs_f64() < 2.0 {
        for at in 0..3 {
            let mut out = Outbox::new();
            for _ in 0..4096 {
                let ok = net.nodes[at]
                    .as_mut()
                    .map(|n| n.propose(net.now, payload.clone(), &mut out));
                if !matches!(ok, Some(Ok(_))) {
                    break;
                }
                proposed += 1;
            }
            net.apply(NodeId(at as u32), &mut out);
        }
        net.now += 200;
        net.tick_all();
        while net.step() {}
    }
    let secs = start.elapsed().as_secs_f64();
    let delivered: usize = net.delivered[0].iter().map(|(_, v)| v.len()).sum();
    println!(
        "proposed {proposed}, delivered at node 0: {delivered} values in {secs:.2}s = {:.0} values/s (all 3 nodes on one core, codec included)",
        delivered as f64 / secs
    );
}

#[test]
fn acceptors_trim_below_what_a_quorum_of_learners_snapshotted() {
    let mut net = Net::with_snapshots(3);
    net.run_for(400_000);
    for k in 0..30 {
        assert!(net.propose(k % 3, &format!("v{k}")));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    let log_starts = |net: &Net| -> Vec<u64> {
        net.nodes
            .iter()
            .map(|n| n.as_ref().and_then(|n| n.acceptor_log_start()).unwrap_or(0))
            .collect()
    };
    assert_eq!(log_starts(&net), vec![1, 1, 1]);
    // One learner of three snapshots: not a quorum, nothing is trimmed.
    let s0 = net.nodes[0]
        .as_mut()
        .unwrap()
        .take_snapshot(Bytes::from_static(b"app0"))
        .unwrap();
    net.run_for(200_000);
    assert_eq!(
        log_starts(&net),
        vec![1, 1, 1],
        "one snapshot of three trims nothing"
    );
    for k in 30..40 {
        assert!(net.propose(k % 3, &format!("v{k}")));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    let s1 = net.nodes[1]
        .as_mut()
        .unwrap()
        .take_snapshot(Bytes::from_static(b"app1"))
        .unwrap();
    assert!(s1.upto > s0.upto);
    net.run_for(200_000);
    // Two of three: the lower of the two covers the quorum.
    assert_eq!(
        log_starts(&net),
        vec![s0.upto + 1; 3],
        "a quorum of snapshots trims below the lower of them"
    );
    let s2 = net.nodes[2]
        .as_mut()
        .unwrap()
        .take_snapshot(Bytes::from_static(b"app2"))
        .unwrap();
    assert!(s2.upto >= s1.upto);
    net.run_for(200_000);
    // The two highest of {s0, s1, s2} are s1 and s2: trimmed below s1.upto + 1.
    assert_eq!(log_starts(&net), vec![s1.upto + 1; 3]);
    // New values still flow after the trim.
    for k in 40..45 {
        assert!(net.propose(k % 3, &format!("v{k}")));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    assert_eq!(net.seq(0).len(), 45);
    assert_eq!(net.seq(2), net.seq(0));
}

#[test]
fn a_learner_restored_from_a_snapshot_delivers_the_rest_of_the_same_sequence() {
    let mut net = Net::with_snapshots(3);
    net.run_for(400_000);
    for k in 0..20 {
        assert!(net.propose(k % 3, &format!("a{k}")));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    let snap = net.nodes[2]
        .as_mut()
        .unwrap()
        .take_snapshot(Bytes::from_static(b"state"))
        .unwrap();
    let encoded = snap.encode();
    assert_eq!(abcast_core::Snapshot::decode(&encoded).unwrap(), snap);
    // Node 2 crashes; once the ring closes around it, values go on.
    net.down[2] = true;
    net.run_for(1_000_000);
    for k in 0..20 {
        assert!(net.propose(k % 2, &format!("b{k}")));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    // It restarts from its snapshot file (amnesic acceptor, learner after the snapshot).
    let start = StartInfo {
        incarnation: 1,
        amnesic: true,
        start_seq: 1 << 32,
    };
    let mut node = Net::make(&net.cfg, 2, start);
    let back = abcast_core::Snapshot::decode(&encoded).unwrap();
    node.restore_snapshot(&back).unwrap();
    assert_eq!(node.status().delivered_upto, snap.upto);
    let before = net.delivered[2].len();
    net.nodes[2] = Some(node);
    net.down[2] = false;
    net.run_for(2_000_000);
    let after: Vec<Bytes> = net.delivered[2][before..]
        .iter()
        .flat_map(|(_, v)| v.clone())
        .collect();
    let all = net.seq(0);
    assert_eq!(all.len(), 40);
    let upto_values: usize = net.delivered[0]
        .iter()
        .filter(|(i, _)| *i <= snap.upto)
        .map(|(_, v)| v.len())
        .sum();
    assert_eq!(
        after,
        all[upto_values..].to_vec(),
        "the rest, once, in order"
    );
    // A corrupt snapshot file is refused, not half-restored.
    let mut bad = encoded.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(abcast_core::Snapshot::decode(&bad).is_err());
}

/// Issue 4: "a learner that falls behind the trim point installs a snapshot transferred
/// from a peer, in chunks, then continues from the log". Node 2 is down while nodes 0 and 1
/// (a quorum of learners) snapshot and the acceptors trim; it comes back with nothing (an
/// in-memory node), finds every acceptor's log starting past instance 1, fetches the
/// snapshot of a peer, installs it, and delivers the rest of the same sequence.
#[test]
fn a_learner_behind_the_trim_point_installs_a_peers_snapshot_and_goes_on_from_the_log() {
    let mut net = Net::with_snapshots(3);
    net.run_for(400_000);
    for k in 0..20 {
        assert!(net.propose(k % 3, &format!("a{k}")));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    net.down[2] = true;
    net.run_for(1_000_000);
    for k in 0..20 {
        assert!(net.propose(k % 2, &format!("b{k}")));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    // Nodes 0 and 1 snapshot; the state is the values they delivered, joined.
    let state = |net: &Net, i: usize| Bytes::from(net.seq(i).concat());
    for i in 0..2 {
        let app = state(&net, i);
        net.nodes[i].as_mut().unwrap().take_snapshot(app).unwrap();
    }
    net.run_for(300_000);
    let trimmed_at = net.nodes[0]
        .as_ref()
        .and_then(|n| n.acceptor_log_start())
        .unwrap();
    assert!(
        trimmed_at > 21,
        "the acceptors trimmed: log starts at {trimmed_at}"
    );
    // Node 2 restarts with nothing.
    let start = StartInfo {
        incarnation: 1,
        amnesic: true,
        start_seq: 1 << 32,
    };
    net.nodes[2] = Some(Net::make(&net.cfg, 2, start));
    let before = net.delivered[2].len();
    net.down[2] = false;
    for k in 0..10 {
        net.run_for(100_000);
        assert!(net.propose(k % 3, &format!("c{k}")));
    }
    net.run_for(2_000_000);
    let installs: Vec<_> = net.installs.iter().filter(|(n, _, _)| *n == 2).collect();
    assert_eq!(installs.len(), 1, "node 2 installed one snapshot");
    let (_, at, snap) = installs[0];
    assert_eq!(
        *at, before,
        "installed before delivering anything in its new life"
    );
    assert!(
        snap.upto + 1 >= trimmed_at,
        "the snapshot reaches the log start"
    );
    // The installed state is the sequence up to the snapshot, and what node 2 delivered
    // after it is the rest of the same sequence.
    let all = net.seq(0);
    assert_eq!(all.len(), 50);
    let upto_values: usize = net.delivered[0]
        .iter()
        .filter(|(i, _)| *i <= snap.upto)
        .map(|(_, v)| v.len())
        .sum();
    assert_eq!(snap.app, Bytes::from(all[..upto_values].concat()));
    let after: Vec<Bytes> = net.delivered[2][before..]
        .iter()
        .flat_map(|(_, v)| v.clone())
        .collect();
    assert_eq!(
        after,
        all[upto_values..].to_vec(),
        "the rest, once, in order"
    );
    assert_eq!(
        net.nodes[2].as_ref().unwrap().status().delivered_upto,
        net.nodes[0].as_ref().unwrap().status().delivered_upto
    );
}

fn is_repair_to(to: NodeId, m: &Message, node: u32) -> bool {
    to == NodeId(node) && matches!(m, Message::Repair(_))
}

/// Bug B1, a stale Repair. Node 1 restarts amnesic (life 1); node 0's phase 1 in the new
/// epoch computes a Repair for it, which the network holds back. Life 1 votes in phase 2
/// (amnesic acceptors do), so b0 is decided in instance 6 by nodes 0 and 1, and node 2 never
/// hears of it. Node 0 is then cut off, and node 1 crashes again before any Repair reached
/// it: life 2 is amnesic again, and forgot its vote for b0. The Repair meant for life 1
/// (target: instance 5, the highest anyone had then) arrives late. Before the fix life 2 took
/// that target, ended its amnesia once its learner reached instance 5, and counted in the
/// phase 1 quorum {1, 2}, which found nothing in instance 6 and decided c0 there: node 0 had
/// delivered b0 in 6. Now the Repair names life 1 in its epoch and life 2 ignores it.
#[test]
fn a_repair_meant_for_an_earlier_life_leaves_the_acceptor_amnesic() {
    let mut net = Net::new(3);
    net.run_for(400_000);
    for k in 0..5 {
        assert!(net.propose(k % 3, &format!("a{k}")));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    assert_eq!(net.status(2).delivered_upto, 5);
    // Node 1 restarts amnesic (life 1); the Repairs sent to it stay in the network.
    net.rule = Some(Box::new(|_, to, m| {
        if is_repair_to(to, m, 1) {
            Fate::Hold
        } else {
            Fate::Deliver
        }
    }));
    net.down[1] = true;
    net.run_for(100_000);
    net.restart(1, 1);
    net.run_for(500_000);
    assert!(
        !net.held.is_empty(),
        "node 0's phase 1 in life 1's epoch computed a repair for it"
    );
    assert!(net.status(1).amnesic);
    // Life 1 votes for b0 in instance 6 with node 0; the decision never reaches node 2.
    net.rule = Some(Box::new(|_, to, m| {
        if is_repair_to(to, m, 1) {
            Fate::Hold
        } else if to == NodeId(2) && matches!(m, Message::Decision(_) | Message::Decided(_)) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    assert!(net.propose(0, "b0"));
    net.run_for(500_000);
    assert_eq!(net.delivered_in(0, 6), Some(&vec![Bytes::from("b0")]));
    assert_eq!(net.status(2).delivered_upto, 5, "node 2 never heard of 6");
    // Node 0 is cut off; node 1 crashes and comes back as life 2, amnesic again.
    net.down[0] = true;
    net.down[1] = true;
    net.run_for(10_000);
    net.rule = None;
    net.restart(1, 2);
    // The Repair meant for life 1 reaches life 2.
    let (from, to, stale) = net.held.remove(0);
    let Message::Repair(r) = &stale else {
        panic!("{stale:?}")
    };
    assert_eq!((r.epoch[1], r.upto), (1, 5), "computed for life 1: {r:?}");
    net.deliver_now(from, to, stale);
    net.run_for(1_000_000);
    let st = net.status(1);
    assert!(
        st.delivered_upto >= 5,
        "life 2 learned everything up to the stale target: {st:?}"
    );
    assert!(
        st.amnesic,
        "a Repair meant for life 1 ended life 2's amnesia: {st:?}"
    );
    // An amnesic acceptor counts in no phase 1 quorum: node 1 (now the first live acceptor)
    // cannot lead with node 2 alone, and nothing new is decided in instance 6.
    assert!(!st.leading, "{st:?}");
    assert!(net.propose(2, "c0"));
    net.run_for(1_000_000);
    assert_eq!(net.disagreements(), Vec::<String>::new());
    assert!(net.status(1).amnesic);
    // Node 0 comes back: its phase 1 in life 2's epoch repairs node 1, and everyone
    // delivers one sequence, b0 in 6 included.
    net.down[0] = false;
    net.run_for(3_000_000);
    assert!(!net.status(1).amnesic, "{:?}", net.events_of(1));
    let all: Vec<Bytes> = ["a0", "a1", "a2", "a3", "a4", "b0", "c0"]
        .map(Bytes::from)
        .to_vec();
    for i in 0..3 {
        assert_eq!(net.seq(i), all, "node {i}");
    }
    assert_eq!(net.disagreements(), Vec::<String>::new());
}

/// Bug B2, a decision only the cut-off node knew. Instance 5 (x) is decided by node 0's vote
/// and node 1's, and only node 1 (the one that completed the quorum) knows it: the decision
/// never leaves it. Node 0 crashes and comes back amnesic; as the first acceptor it takes
/// over at once, with a phase 1 from instance 1 whose quorum is {1, 2} (node 0's own promise
/// does not count): node 1 reports 5 decided and `decided_upto` 5, the floor. Then node 1 is
/// cut off. Before the fix the takeover dropped decided entries at or below the floor,
/// expecting learners to fetch them from whoever reported them, and the backfill only ran
/// below the phase 1's first instance: nodes 0 and 2 waited for instance 5 for good. Now
/// decided entries at or below the floor are recorded at takeover.
#[test]
fn a_decision_reported_only_by_a_node_cut_off_after_the_takeover_is_delivered() {
    let mut net = Net::new(3);
    net.run_for(400_000);
    for k in 0..4 {
        assert!(net.propose(k % 3, &format!("a{k}")));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    assert_eq!(net.status(2).delivered_upto, 4);
    // No decision leaves node 1 from now on (neither around the ring nor to a retrieve).
    net.rule = Some(Box::new(|from, to, m| {
        if from == NodeId(1)
            && to != NodeId(1)
            && matches!(m, Message::Decision(_) | Message::Decided(_))
        {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    assert!(net.propose(0, "x"));
    net.run_for(50_000);
    assert_eq!(net.delivered_in(1, 5), Some(&vec![Bytes::from("x")]));
    assert_eq!(net.delivered_in(0, 5), None);
    assert_eq!(net.status(2).delivered_upto, 4);
    // Node 0 crashes and restarts amnesic before the others suspect it: it leads again.
    net.down[0] = true;
    net.run_for(100_000);
    net.restart(0, 1);
    while !net.status(0).leading {
        assert!(net.now < 2_000_000, "node 0 takes over");
        net.run_for(100);
    }
    // Its phase 1 ran from instance 1, and its floor, 5, is node 1's report (node 2 had 4):
    // node 1's promise counted.
    let events = net.events_of(0);
    assert!(
        events
            .iter()
            .any(|e| e.contains("starts phase 1") && e.contains("from instance 1 ")),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e.contains("leads with ballot") && e.contains("decided up to 5,")),
        "{events:?}"
    );
    // Node 1, the only node that knew the decision, is cut off.
    net.down[1] = true;
    net.rule = None;
    net.run_for(2_000_000);
    for i in [0, 2] {
        assert_eq!(
            net.delivered_in(i, 5),
            Some(&vec![Bytes::from("x")]),
            "node {i}: {:?}",
            net.status(i)
        );
    }
    // And the ring goes on with nodes 0 and 2.
    for k in 0..4 {
        assert!(net.propose([0, 2][k % 2], &format!("b{k}")));
        net.run_for(1_000);
    }
    net.run_for(1_000_000);
    let all: Vec<Bytes> = ["a0", "a1", "a2", "a3", "x", "b0", "b1", "b2", "b3"]
        .map(Bytes::from)
        .to_vec();
    assert_eq!(net.seq(2), all);
    assert_eq!(net.seq(0), all, "node 0 replayed from instance 1");
    assert!(!net.status(0).amnesic);
    assert_eq!(net.disagreements(), Vec::<String>::new());
}

/// Bug B3, a learner that skips must skip the same duplicates as everyone. Learners take no
/// snapshots and acceptors keep 16 instances in memory. While node 2 is down, batch "dup" is
/// decided twice: node 0's learner waits for a lost decision (instance g), so it has not
/// delivered "dup" (instance j) when a stale copy of node 1's `Forward` of it reaches the
/// coordinator again, and the coordinator gives it instance k. Nodes 0 and 1 deliver it in j
/// and skip it in k. Then the windows slide past j but not past k, and node 2 comes back with
/// nothing: it must skip to the log start, between j and k. Before the fix its de-duplication
/// memory was empty after the skip and it delivered "dup" in k. Now the acceptors hand it
/// the batch keys of the instances that left their windows, and it skips k as everyone did.
#[test]
fn a_learner_that_skips_instances_skips_the_same_duplicates_as_everyone() {
    let ids = [0, 1, 2];
    let mut cfg = RingConfig::pal(&ids);
    cfg.learner_snapshots = false;
    cfg.store_capacity_instances = 16;
    cfg.max_open_instances = 4;
    let mut net = Net::with_ring(cfg);
    net.run_for(400_000);
    for k in 0..5 {
        assert!(net.propose(k % 3, &format!("a{k}")));
        net.run_for(1_000);
    }
    net.run_for(100_000);
    assert_eq!(net.status(2).delivered_upto, 5);
    net.down[2] = true;
    net.run_for(1_000_000); // the ring closes around node 2: 0 -> 1 -> 0
    // The decision of instance g never reaches node 0 (nor do answers to its retrieves),
    // and node 1's Forward of "dup" is duplicated by the network.
    let g = net.status(0).delivered_upto + 1;
    net.rule = Some(Box::new(move |from, to, m| match m {
        Message::Decision(d) if to == NodeId(0) && d.instance == g => Fate::Drop,
        Message::Decided(_) if to == NodeId(0) => Fate::Drop,
        Message::Forward(f)
            if from == NodeId(1) && f.batch.values().any(|v| v.payload == "dup") =>
        {
            Fate::Duplicate
        }
        _ => Fate::Deliver,
    }));
    assert!(net.propose(1, "gap"));
    net.run_for(1_000);
    assert!(net.propose(1, "dup"));
    net.run_for(1_000);
    let j = g + 1;
    for k in 0..4 {
        assert!(net.propose(1, &format!("f{k}")));
        net.run_for(1_000);
    }
    assert_eq!(net.status(1).delivered_upto, j + 4);
    assert_eq!(
        net.status(0).delivered_upto,
        g - 1,
        "node 0's learner waits for instance g"
    );
    // The stale copy reaches the coordinator, whose learner has not delivered "dup" yet.
    assert_eq!(net.held.len(), 1);
    let (from, to, stale) = net.held.remove(0);
    net.deliver_now(from, to, stale);
    net.run_for(1_000);
    net.rule = None;
    // Node 1's payload cache let go of "dup" when it delivered it, so it votes in k once the
    // coordinator re-sends phase 2 with the payload (`p2_resend_us`).
    let k = j + 5;
    net.run_for(1_500_000);
    for i in [0, 1] {
        assert_eq!(net.delivered_in(i, j), Some(&vec![Bytes::from("dup")]));
        assert_eq!(
            net.delivered_in(i, k),
            None,
            "node {i} skips the second copy"
        );
        assert_eq!(net.status(i).delivered_upto, k, "instance k is decided");
    }
    // The windows slide past j, not past k.
    let log_start = |net: &Net, i: usize| net.nodes[i].as_ref().unwrap().acceptor_log_start();
    let mut n = 0;
    while log_start(&net, 0).unwrap() <= j || log_start(&net, 1).unwrap() <= j {
        assert!(n < 40, "windows slide");
        assert!(net.propose(n % 2, &format!("s{n}")));
        net.run_for(1_000);
        n += 1;
    }
    net.run_for(100_000);
    let floor = log_start(&net, 0).unwrap();
    assert_eq!(log_start(&net, 1), Some(floor));
    assert!(j < floor && floor <= k, "j {j}, log start {floor}, k {k}");
    // Node 2 comes back with nothing: it skips to the log start, then delivers from there.
    net.restart(2, 1);
    net.run_for(2_000_000);
    assert_eq!(net.skips, vec![(2, 1, floor)], "{:?}", net.events_of(2));
    let from_floor = |net: &Net, i: usize| -> Vec<(u64, Vec<Bytes>)> {
        net.delivered[i]
            .iter()
            .filter(|(d, _)| *d >= floor)
            .cloned()
            .collect()
    };
    assert!(!net.delivered[2].is_empty());
    assert_eq!(
        net.delivered[2],
        from_floor(&net, 0),
        "node 2 delivers what the others deliver after the skip"
    );
    assert!(!net.seq(2).contains(&Bytes::from("dup")));
    // And goes on with them.
    for k in 0..6 {
        assert!(net.propose(k % 3, &format!("t{k}")));
        net.run_for(1_000);
    }
    net.run_for(500_000);
    assert_eq!(net.delivered[2], from_floor(&net, 0));
    assert_eq!(net.delivered[1], net.delivered[0]);
    assert_eq!(net.disagreements(), Vec::<String>::new());
}
