//! Scenario tests of IP-multicast Ring Paxos (seed 003) on a tiny in-process network: three
//! PAL nodes (0, 1, 2) and one learner (3). Multicasts reach every node, the sender
//! included. Faults only where a test injects them; the seeded simulator is in `abcast-sim`.

use abcast_core::codec::{Encoder, WireMessage};
use abcast_core::config::StartInfo;
use abcast_core::ringpaxos::{Message, RingPaxos, RingPaxosConfig};
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
    /// What the network does with each message a node is about to receive: a test's
    /// fault, `None` for a network that delivers everything.
    rule: Option<Rule>,
    /// Messages the rule kept back (late in the network), in the order they were sent.
    held: Vec<(u32, u32, Message)>,
    /// Per node, what it delivered by instance.
    learned: Vec<Vec<(u64, Vec<String>)>>,
    /// Every `Phase2b` and `Nack` a node sent: (from, to, message).
    votes_and_refusals: Vec<(u32, u32, Message)>,
    /// Every event a node reported, for a failing test's message.
    events: Vec<(u32, String)>,
}

/// What the network does with one message (see `Net::rule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Deliver,
    Drop,
    /// Not delivered now: kept in `Net::held`, late in the network, until the test hands it
    /// to a node (`Net::deliver_now`).
    Hold,
}

type Rule = Box<dyn FnMut(u32, u32, &Message) -> Fate>;

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
        Net::with_cfg(RingPaxosConfig::with_roles(&[0, 1, 2], &[3]))
    }
    fn with_cfg(cfg: RingPaxosConfig) -> Net {
        let mut net = Net {
            nodes: Vec::new(),
            queue: VecDeque::new(),
            now: 0,
            delivered: vec![Vec::new(); N],
            acks: 0,
            log: Vec::new(),
            drop: None,
            rule: None,
            held: Vec::new(),
            learned: vec![Vec::new(); N],
            votes_and_refusals: Vec::new(),
            events: Vec::new(),
            cfg,
        };
        for i in 0..N as u32 {
            net.nodes.push(Some(net.make(i)));
        }
        net
    }
    fn make(&self, i: u32) -> RingPaxos {
        self.make_with(i, StartInfo::FRESH)
    }
    fn make_with(&self, i: u32, start: StartInfo) -> RingPaxos {
        let store = MemoryStore::new(
            self.cfg.store_capacity_instances,
            self.cfg.store_capacity_bytes,
        );
        RingPaxos::new(self.cfg.clone(), NodeId(i), start, Box::new(store)).expect("valid config")
    }
    /// Node `i` restarts as life `incarnation` on an empty in-memory store: an amnesic
    /// acceptor, a learner from instance 1 (its earlier deliveries are forgotten here too).
    fn restart(&mut self, i: usize, incarnation: u64) {
        let start = StartInfo {
            incarnation,
            amnesic: true,
            start_seq: incarnation << 40,
        };
        self.nodes[i] = Some(self.make_with(i as u32, start));
        self.delivered[i].clear();
        self.learned[i].clear();
    }
    fn wire(m: Message) -> Message {
        let mut e = Encoder::new();
        m.encode(&mut e);
        Message::decode(m.kind(), e.to_bytes()).expect("decodes")
    }
    fn apply(&mut self, from: u32, out: &mut Outbox<Message>) {
        for (to, m) in out.sends.drain(..) {
            self.log.push((from, Some(to.0), name(&m)));
            if matches!(m, Message::Phase2b(_) | Message::Nack(_)) {
                self.votes_and_refusals.push((from, to.0, m.clone()));
            }
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
            let values: Vec<Bytes> = d.batch.values().map(|v| v.payload).collect();
            self.learned[from as usize].push((
                d.instance,
                values
                    .iter()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .collect(),
            ));
            self.delivered[from as usize].extend(values);
        }
        self.acks += out.acks.len();
        for e in out.events.drain(..) {
            self.events.push((from, e));
        }
        out.clear();
    }
    fn step(&mut self) -> bool {
        let Some((from, to, m)) = self.queue.pop_front() else {
            return false;
        };
        if self.drop == Some((to.0, name(&m))) {
            return true;
        }
        match self
            .rule
            .as_mut()
            .map_or(Fate::Deliver, |r| r(from.0, to.0, &m))
        {
            Fate::Deliver => {}
            Fate::Drop => return true,
            Fate::Hold => {
                self.held.push((from.0, to.0, m));
                return true;
            }
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
    /// Hands `m` to `to` now, whatever the rule says: a message that was in the network all
    /// along (its sender may be cut off since).
    fn deliver_now(&mut self, from: u32, to: u32, m: Message) {
        let mut out = Outbox::new();
        let now = self.now;
        if let Some(n) = self.nodes[to as usize].as_mut() {
            n.receive(now, NodeId(from), m, &mut out);
        }
        self.apply(to, &mut out);
    }
    fn status(&self, i: usize) -> abcast_core::Status {
        self.nodes[i].as_ref().expect("node is running").status()
    }
    /// What node `i` delivered in `instance`, if it delivered anything there.
    fn learned_in(&self, i: usize, instance: u64) -> Option<&Vec<String>> {
        self.learned[i]
            .iter()
            .find(|(d, _)| *d == instance)
            .map(|(_, v)| v)
    }
    /// Every instance two nodes delivered differently.
    fn disagreements(&self) -> Vec<String> {
        let mut found = Vec::new();
        for a in 0..N {
            for (instance, values) in &self.learned[a] {
                for b in a + 1..N {
                    if let Some(other) = self.learned_in(b, *instance)
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
    fn events_of(&self, i: u32) -> Vec<&str> {
        self.events
            .iter()
            .filter(|(n, _)| *n == i)
            .map(|(_, e)| e.as_str())
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

/// Bug B1 in Ring Paxos, a stale Repair. Acceptor 1 restarts amnesic (life 1); node 0's
/// phase 1 in the new epoch sends it a Repair (target: instance 3), and the network delivers
/// one copy and holds another. Life 1, repaired, joins the ring of node 0's next ballot
/// ([1, 0], after the ring [2, 0] decided nothing: acceptor 2 gets no `Phase2a` and learns
/// no decision from here on), and v is decided in instance 4 with its vote. Then node 0 is
/// cut off and acceptor 1 crashes again: life 2 forgot that vote. The held copy of the
/// Repair meant for life 1 arrives. Before the fix life 2 took its target (3), ended its
/// amnesia once its learner reached it, and its promise counted in the phase 1 quorum
/// {1, 2}, which found nothing in instance 4 and decided c there, while nodes 0 and 3 had
/// learned v. Now the Repair names life 1 in its epoch and life 2 ignores it. (Unlike the
/// U-Ring story, life 1 is repaired first: in Ring Paxos an acceptor that is not repaired is
/// never on a ring, and its votes decide nothing.)
#[test]
fn a_repair_meant_for_an_earlier_life_leaves_the_acceptor_amnesic() {
    let mut net = Net::new();
    net.run_for(200_000);
    for k in 0..3 {
        net.propose(1 + k % 2, &format!("a{k}"));
        net.run_for(1_000);
    }
    net.run_for(20_000);
    assert_eq!(net.seq(3), vec!["a0", "a1", "a2"]);
    // Acceptor 1 restarts amnesic (life 1); the Repairs sent to it stay in the network.
    let repair_to_1 = |to: u32, m: &Message| to == 1 && matches!(m, Message::Repair(_));
    net.rule = Some(Box::new(move |_, to, m| {
        if repair_to_1(to, m) {
            Fate::Hold
        } else {
            Fate::Deliver
        }
    }));
    net.restart(1, 1);
    net.run_for(300_000);
    assert!(
        net.held.len() >= 2,
        "node 0's phase 1 in life 1's epoch computed a repair for it, sent again on its heartbeats"
    );
    assert!(net.status(1).amnesic);
    // One copy reaches life 1: once its learner knows instances 1 to 3 it counts again.
    let (from, to, first) = net.held.remove(0);
    net.deliver_now(from, to, first);
    net.run_for(100_000);
    assert!(!net.status(1).amnesic, "{:?}", net.events_of(1));
    // From now on acceptor 2 neither votes nor learns: the ring [2, 0] decides nothing,
    // node 0 runs phase 1 again and lays out the ring [1, 0], which decides v in 4.
    net.rule = Some(Box::new(move |_, to, m| {
        if repair_to_1(to, m) {
            Fate::Hold
        } else if to == 2
            && matches!(
                m,
                Message::Phase2a(_) | Message::Decision(_) | Message::Decided(_)
            )
        {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    net.propose(0, "v");
    net.run_for(1_500_000);
    for i in [0, 1, 3] {
        assert_eq!(
            net.learned_in(i, 4),
            Some(&vec!["v".to_string()]),
            "node {i}"
        );
    }
    assert_eq!(net.learned_in(2, 4), None);
    assert!(
        net.votes_and_refusals
            .iter()
            .any(|(f, t, m)| (*f, *t) == (1, 0)
                && matches!(m, Message::Phase2b(b) if b.instance == 4)),
        "life 1 voted for v in 4 on the ring"
    );
    // Node 0 is cut off; acceptor 1 crashes and comes back as life 2, amnesic again.
    net.rule = Some(Box::new(|from, to, _| {
        if from != to && (from == 0 || to == 0) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    net.restart(1, 2);
    // The Repair meant for life 1 reaches life 2.
    let (from, to, stale) = net.held.remove(0);
    let Message::Repair(r) = &stale else {
        panic!("{stale:?}")
    };
    assert_eq!((r.epoch[1], r.upto), (1, 3), "computed for life 1: {r:?}");
    net.deliver_now(from, to, stale);
    net.run_for(1_000_000);
    let st = net.status(1);
    assert!(
        st.delivered_upto >= 3,
        "life 2 learned everything up to the stale target: {st:?}"
    );
    assert!(
        st.amnesic,
        "a Repair meant for life 1 ended life 2's amnesia: {st:?}"
    );
    // An amnesic acceptor counts in no phase 1 quorum: acceptor 1 (now the first live one)
    // cannot lead with acceptor 2 alone, and nothing new is decided in instance 4.
    assert!(!st.leading, "{st:?}");
    net.propose(2, "c");
    net.run_for(1_000_000);
    assert_eq!(net.disagreements(), Vec::<String>::new());
    assert!(net.status(1).amnesic);
    // Node 0 comes back: its phase 1 in life 2's epoch repairs acceptor 1, and everyone
    // learns one sequence, v in 4 included.
    net.rule = None;
    net.run_for(3_000_000);
    assert!(!net.status(1).amnesic, "{:?}", net.events_of(1));
    for i in 0..N {
        assert_eq!(net.seq(i), vec!["a0", "a1", "a2", "v", "c"], "node {i}");
    }
    assert_eq!(net.disagreements(), Vec::<String>::new());
}

/// A ghost coordinator. A0 leads ballot b1 with the ring [A1, A0] and proposes v in
/// instance 2, but a one-way partition swallows everything it sends: its `Phase2a` reaches
/// nobody, and its heartbeats neither, so A1 takes over (b2, ring [A2, A1]) and decides w in
/// instance 2; the learner learns it. A0 hears the others' heartbeats and nothing else, so it
/// still leads b1 and keeps re-sending its `Phase2a(b1, 2, v)`. Now A1 crashes and comes back
/// amnesic: it forgot its promise of b2, and a `Phase2a` of b1 would get its vote, the first
/// of A0's ring, and A0 would decide v where w was decided. What stops it is the epoch in
/// the vote: A0's phase 1 ran before A1's restart (its `Phase2a` carries the old epoch), so
/// A1 refuses it (the `Nack` that would tell A0 is lost like the heartbeats that would).
/// Covered as a liveness catch by the simulator's `VoteIgnoresEpoch` mutation; here, the story.
#[test]
fn an_amnesic_acceptor_refuses_a_ballot_whose_phase_1_ran_before_its_restart() {
    let (mut net, b1, sent_before, refusals_before) = ghost_meets_an_amnesic_acceptor(None);
    assert!(
        net.log[sent_before..]
            .iter()
            .any(|&(f, t, k)| (f, t, k) == (0, None, "2a")),
        "A0 re-sent its Phase 2a"
    );
    assert!(net.status(0).leading, "A0 still leads b1");
    let after: Vec<_> = net.votes_and_refusals[refusals_before..]
        .iter()
        .filter(|(f, _, _)| *f == 1)
        .collect();
    assert!(
        !after
            .iter()
            .any(|(_, _, m)| matches!(m, Message::Phase2b(b) if b.ballot == b1)),
        "the amnesic A1 voted for A0's ballot: {after:?}"
    );
    // It refused it for the epoch alone (its own incarnation, 1, is in it): it has promised
    // nothing in this life.
    assert!(
        after.iter().any(|(_, to, m)| *to == 0
            && matches!(m, Message::Nack(n)
                if n.instance == 2 && n.promised < b1 && n.epoch.get(1) == Some(&1))),
        "{after:?}"
    );
    assert_eq!(net.learned_in(0, 2), None, "A0 never decides v in 2");
    assert_eq!(net.disagreements(), Vec::<String>::new());
    // The partition heals: A0 hears of the new epoch and the higher ballot, runs phase 1,
    // finds w decided in 2 and proposes v after it.
    net.rule = None;
    net.run_for(2_000_000);
    for i in 0..N {
        assert_eq!(net.seq(i), vec!["a", "w", "v"], "node {i}");
    }
    assert!(!net.status(1).amnesic);
    assert_eq!(net.disagreements(), Vec::<String>::new());
}

/// The ghost story up to A1's amnesic restart and 150 ms of A0 re-sending its `Phase2a`s;
/// returns the network, b1, and where the send log and the vote log stood at the restart.
fn ghost_meets_an_amnesic_acceptor(
    mutation: Option<abcast_core::mutation::Mutation>,
) -> (Net, abcast_core::Ballot, usize, usize) {
    let mut cfg = RingPaxosConfig::with_roles(&[0, 1, 2], &[3]);
    if let Err(e) = cfg.set_mutation(mutation) {
        panic!("{e}");
    }
    let mut net = Net::with_cfg(cfg);
    net.run_for(200_000);
    net.propose(2, "a");
    net.run_for(20_000);
    assert_eq!(net.seq(3), vec!["a"]);
    let b1 = net.status(0).ballot;
    assert!(net.status(0).leading);
    assert_eq!(b1.node, NodeId(0));
    // A0 is heard by nobody; of what the others send it, only heartbeats arrive.
    net.rule = Some(Box::new(|from, to, m| {
        if from == to || (to == 0 && matches!(m, Message::Heartbeat(_))) {
            Fate::Deliver
        } else if from == 0 || to == 0 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    net.propose(0, "v"); // instance 2, multicast in vain
    let start = net.now;
    while !net.status(1).leading {
        assert!(net.now < start + 800_000, "A1 takes over");
        net.run_for(1_000);
    }
    let b2 = net.status(1).ballot;
    assert!(b2 > b1);
    net.propose(2, "w");
    net.run_for(5_000);
    assert_eq!(net.learned_in(3, 2), Some(&vec!["w".to_string()]));
    assert_eq!(net.learned_in(0, 2), None);
    let st0 = net.status(0);
    assert!(st0.leading, "A0 still leads b1: {st0:?}");
    // A1 crashes and restarts amnesic. Nothing tells A0: it hears nothing but `Phase2b`s now,
    // and only its `Phase2a`s leave it.
    net.rule = Some(Box::new(|from, to, m| {
        if from == to
            || (to == 0 && matches!(m, Message::Phase2b(_)))
            || (from == 0 && matches!(m, Message::Phase2a(_)))
        {
            Fate::Deliver
        } else if from == 0 || to == 0 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }));
    net.restart(1, 1);
    let sent_before = net.log.len();
    let refusals_before = net.votes_and_refusals.len();
    net.run_for(150_000);
    (net, b1, sent_before, refusals_before)
}

/// The story above with the epoch check removed from voting (the `VoteIgnoresEpoch`
/// mutation): A1 votes for b1 in its new life, A0 decides v in instance 2, where w was
/// decided. The random sweeps meet this race too rarely to be its catch for Ring Paxos (A0
/// must hear A1's vote before any heartbeat from A1's new life, which restarts A0's phase 1:
/// see docs/testing.md, "What the mutations showed"), so this story is.
#[cfg(feature = "mutations")]
#[test]
fn ringpaxos_voting_outside_its_epoch_is_caught_by_the_ghost_story() {
    use abcast_core::mutation::Mutation;
    let (net, b1, _, refusals_before) =
        ghost_meets_an_amnesic_acceptor(Some(Mutation::VoteIgnoresEpoch));
    assert!(
        net.votes_and_refusals[refusals_before..]
            .iter()
            .any(|(f, _, m)| *f == 1 && matches!(m, Message::Phase2b(b) if b.ballot == b1)),
        "the mutated A1 voted for b1 in its new life"
    );
    assert_eq!(net.learned_in(0, 2), Some(&vec!["v".to_string()]));
    assert_eq!(net.learned_in(3, 2), Some(&vec!["w".to_string()]));
    assert!(!net.disagreements().is_empty(), "the checker sees it");
}
