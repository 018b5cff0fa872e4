//! The token ring's rules, one test each, on a small hand-driven network (the simulator's
//! sweeps come with membership).

use super::*;
use crate::codec::{Encoder, WireMessage};
use crate::config::StartInfo;
use std::collections::VecDeque;

fn ids(n: u32) -> Vec<NodeId> {
    (0..n).map(NodeId).collect()
}

/// A ring of `n` members whose values of 60 bytes are one message each.
fn ring(n: u32, personal: u32, accelerated: u32, service: Service) -> Vec<TokenRing> {
    ids(n)
        .into_iter()
        .map(|me| {
            let cfg = TokenConfig {
                personal_window: personal,
                accelerated_window: accelerated,
                global_window: 1000,
                max_message_bytes: 64,
                service,
                token_hold_us: 0,
                ..TokenConfig::new(ids(n))
            };
            TokenRing::new(cfg, me, StartInfo::FRESH).expect("valid")
        })
        .collect()
}

/// A FIFO network between the members (multicasts reach every member, the sender too),
/// with a filter that drops messages.
struct Net {
    nodes: Vec<TokenRing>,
    queue: VecDeque<(NodeId, NodeId, Message)>,
    delivered: Vec<Vec<(u64, DeliveryLevel, NodeId)>>,
    acked: Vec<usize>,
    /// Every value delivered, per member, in order.
    values: Vec<Vec<ValueId>>,
    /// Configuration changes per member: kind and members.
    configs: Vec<Vec<(crate::protocol::ConfigKind, Vec<NodeId>)>>,
    /// Members that are down: they neither tick nor receive.
    down: Vec<bool>,
    now: Micros,
    /// Every outbox's order of effects, per node: 'M' data multicast, 'T' token send.
    trace: Vec<String>,
}

impl Net {
    fn new(nodes: Vec<TokenRing>) -> Net {
        let n = nodes.len();
        Net {
            nodes,
            queue: VecDeque::new(),
            delivered: vec![Vec::new(); n],
            acked: vec![0; n],
            values: vec![Vec::new(); n],
            configs: vec![Vec::new(); n],
            down: vec![false; n],
            now: 0,
            trace: vec![String::new(); n],
        }
    }

    fn absorb(&mut self, i: usize, mut out: Out) {
        let me = NodeId(i as u32);
        let first = out.multicasts_first.min(out.multicasts.len());
        let rest = out.multicasts.split_off(first);
        let members: Vec<NodeId> = (0..self.nodes.len() as u32).map(NodeId).collect();
        for m in out.multicasts.drain(..) {
            if matches!(m, Message::Data(_)) {
                self.trace[i].push('M');
            }
            for &to in &members {
                self.queue.push_back((me, to, m.clone()));
            }
        }
        for (to, m) in out.sends.drain(..) {
            if matches!(m, Message::Token(_)) {
                self.trace[i].push('T');
            }
            self.queue.push_back((me, to, m));
        }
        for m in rest {
            if matches!(m, Message::Data(_)) {
                self.trace[i].push('M');
            }
            for &to in &members {
                self.queue.push_back((me, to, m.clone()));
            }
        }
        let mut changes = out.config_changes.drain(..).peekable();
        for (k, d) in out.deliveries.drain(..).enumerate() {
            while let Some(c) = changes.next_if(|c| c.position <= k) {
                self.configs[i].push((c.kind, c.config.members.iter().map(|m| m.id).collect()));
            }
            self.delivered[i].push((d.instance, d.level, d.batch.origin()));
            self.values[i].extend(d.batch.ids());
        }
        for c in changes {
            self.configs[i].push((c.kind, c.config.members.iter().map(|m| m.id).collect()));
        }
        self.acked[i] += out.acks.len();
    }

    fn tick_all(&mut self) {
        for i in 0..self.nodes.len() {
            if self.down[i] {
                continue;
            }
            let mut out = Out::new();
            self.nodes[i].tick(self.now, &mut out);
            self.absorb(i, out);
        }
    }

    /// Delivers queued messages, dropping those `drop` picks, until the queue is empty or
    /// `max` messages went; ticks every 50 messages and when the queue runs dry.
    fn run(&mut self, max: usize, mut drop: impl FnMut(NodeId, NodeId, &Message) -> bool) {
        for k in 0..max {
            if k % 50 == 0 || self.queue.is_empty() {
                self.now += 1_000;
                self.tick_all();
            }
            let Some((from, to, m)) = self.queue.pop_front() else {
                continue;
            };
            let i = to.0 as usize;
            if self.down[i] || drop(from, to, &m) {
                continue;
            }
            let mut out = Out::new();
            self.nodes[i].receive(self.now, from, m, &mut out);
            self.absorb(i, out);
        }
    }

    /// Runs until every member that is up has installed a ring of the members up.
    fn form(&mut self) {
        let up: Vec<NodeId> = (0..self.nodes.len())
            .filter(|i| !self.down[*i])
            .map(|i| NodeId(i as u32))
            .collect();
        for _ in 0..200 {
            let done = up.iter().all(|n| {
                let r = &self.nodes[n.0 as usize];
                r.operational() && r.members() == up.as_slice()
            });
            if done {
                return;
            }
            self.run(200, |_, _, _| false);
        }
        panic!("no ring of {up:?} formed");
    }

    fn propose(&mut self, i: usize, count: usize) {
        for k in 0..count {
            let mut out = Out::new();
            let v = Bytes::from(vec![k as u8; 60]);
            self.nodes[i].propose(self.now, v, &mut out).expect("room");
        }
    }
}

/// Seed 002 figure 1: three members with five messages each per round; the accelerated
/// ring (Accelerated_window 3) sends two before the token and three after, and stamps
/// exactly the sequence numbers the original ring does.
#[test]
fn figure_1_accelerated_ring_sends_after_the_token_with_the_same_sequence_numbers() {
    let mut orders = Vec::new();
    for accelerated in [0, 3] {
        let mut net = Net::new(ring(3, 5, accelerated, Service::Agreed));
        for i in 0..3 {
            net.propose(i, 7);
        }
        net.run(2_000, |_, _, _| false);
        // The first round: member 0 sent 1-5, member 1 6-10, member 2 11-15.
        let expected_first = if accelerated == 0 { "MMMMMT" } else { "MMTMMM" };
        for i in 0..3 {
            // The tokens of the ring's formation carry no data.
            let data_rounds = net.trace[i].trim_start_matches('T');
            assert!(
                data_rounds.starts_with(expected_first),
                "accelerated {accelerated}, member {i}: {}",
                net.trace[i]
            );
        }
        let order: Vec<(u64, NodeId)> = net.delivered[0].iter().map(|d| (d.0, d.2)).collect();
        assert_eq!(order.len(), 21, "every value delivered");
        let senders: Vec<u32> = order.iter().take(15).map(|d| d.1.0).collect();
        assert_eq!(senders, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2]);
        for i in 1..3 {
            assert_eq!(net.delivered[i], net.delivered[0], "agreement");
        }
        orders.push(order);
    }
    assert_eq!(
        orders[0], orders[1],
        "the same total order, original and accelerated"
    );
}

/// §III-B4: a Safe message is delivered only once every member has it. Member 2 misses
/// member 0's first message until it is retransmitted; nobody delivers it Safe before.
#[test]
fn safe_delivery_waits_until_every_member_has_the_message() {
    let mut net = Net::new(ring(3, 5, 3, Service::Safe));
    net.propose(0, 1);
    let mut dropped = false;
    let mut net_steps = 0;
    // Drop the first copy of message 1 to member 2 and watch: no Safe delivery anywhere
    // while member 2 lacks it.
    while net_steps < 400 {
        net_steps += 1;
        net.run(1, |_, to, m| {
            if !dropped && to == NodeId(2) && matches!(m, Message::Data(d) if d.seq == 1) {
                dropped = true;
                return true;
            }
            false
        });
        if net.nodes[2].my_aru() == 0 {
            for i in 0..3 {
                assert!(
                    net.delivered[i].is_empty(),
                    "member {i} delivered Safe while member 2 lacks the message"
                );
            }
        }
    }
    assert!(dropped);
    assert!(net.nodes[2].stats().retransmissions_asked >= 1);
    for i in 0..3 {
        assert_eq!(
            net.delivered[i],
            vec![(1, DeliveryLevel::Safe, NodeId(0))],
            "member {i}"
        );
    }
    assert_eq!(net.acked[0], 1, "the sender's ack once every member has it");
}

/// `propose_at` picks the service per value: Agreed and Safe values of one member go in
/// separate data messages (each message has one service), keep the member's order, and
/// each is delivered at its own level.
#[test]
fn agreed_and_safe_values_of_one_member_go_in_separate_messages_in_order() {
    let mut net = Net::new(ring(3, 5, 3, Service::Agreed));
    net.form();
    let levels = [
        DeliveryLevel::Agreed,
        DeliveryLevel::Agreed,
        DeliveryLevel::Safe,
        DeliveryLevel::Agreed,
    ];
    let mut ids = Vec::new();
    for (k, l) in levels.iter().enumerate() {
        let mut out = Out::new();
        let v = Bytes::from(vec![k as u8; 10]);
        ids.push(
            net.nodes[0]
                .propose_at(net.now, v, *l, &mut out)
                .expect("room"),
        );
    }
    net.run(3_000, |_, _, _| false);
    for i in 0..3 {
        let got: Vec<DeliveryLevel> = net.delivered[i].iter().map(|d| d.1).collect();
        assert_eq!(
            got,
            vec![
                DeliveryLevel::Agreed,
                DeliveryLevel::Safe,
                DeliveryLevel::Agreed
            ],
            "member {i}: three messages (two Agreed values packed, one Safe, one Agreed)"
        );
        assert_eq!(net.values[i], ids, "member {i}: the proposer's order");
    }
}

/// Agreed delivery does not wait for the other members: the sender delivers its own
/// message as soon as it is stamped and in order.
#[test]
fn agreed_delivery_does_not_wait_for_the_other_members() {
    let mut net = Net::new(ring(3, 5, 3, Service::Agreed));
    net.form();
    net.propose(0, 1);
    for _ in 0..1_000 {
        if !net.delivered[0].is_empty() {
            break;
        }
        net.run(1, |_, _, _| false);
    }
    assert_eq!(
        net.delivered[0],
        vec![(1, DeliveryLevel::Agreed, NodeId(0))]
    );
    assert!(
        net.delivered[1].is_empty(),
        "member 1 has not received it yet"
    );
    assert_eq!(
        net.acked[0], 0,
        "acknowledged only once every member has it"
    );
}

/// The accelerated ring asks for a missing message one round after it noticed the gap
/// (it may still be on its way); the original ring asks at once.
#[test]
fn accelerated_ring_asks_for_retransmissions_one_round_later() {
    for accelerated in [0, 3] {
        let mut net = Net::new(ring(3, 5, accelerated, Service::Agreed));
        net.form();
        net.propose(0, 2);
        // Rounds from the token that first announced message 1 to member 1 to the token
        // on which member 1 asked for it.
        let mut announced_at = None;
        let mut first_ask = None;
        let mut dropped = false;
        for _ in 0..400 {
            let mut announcing = false;
            net.run(1, |_, to, m| {
                if to != NodeId(1) {
                    return false;
                }
                match m {
                    Message::Data(d) if d.seq == 1 && !dropped => {
                        dropped = true;
                        true
                    }
                    Message::Token(t) if t.seq >= 1 => {
                        announcing = true;
                        false
                    }
                    _ => false,
                }
            });
            let taken = net.nodes[1].stats().tokens_taken;
            if announcing && announced_at.is_none() {
                announced_at = Some(taken);
            }
            if first_ask.is_none() && net.nodes[1].stats().retransmissions_asked > 0 {
                first_ask = Some(taken);
            }
        }
        assert!(dropped);
        let late = first_ask.zip(announced_at).map(|(a, b)| a - b);
        let expected = if accelerated == 0 { 0 } else { 1 };
        assert_eq!(
            late,
            Some(expected),
            "accelerated {accelerated}: rounds between the token announcing the message and the request"
        );
        assert_eq!(net.delivered[1].len(), 2);
    }
}

/// A token lost on the wire is sent again by its sender; the copy that arrives twice is
/// taken once.
#[test]
fn a_lost_token_is_retransmitted_and_taken_once() {
    let mut net = Net::new(ring(3, 5, 3, Service::Agreed));
    net.propose(1, 3);
    let mut lost = 0;
    net.run(3_000, |_, to, m| {
        if lost < 1 && to == NodeId(1) && matches!(m, Message::Token(_)) {
            lost += 1;
            return true;
        }
        false
    });
    assert_eq!(lost, 1);
    assert!(net.nodes[0].stats().tokens_retransmitted >= 1);
    for i in 0..3 {
        assert_eq!(net.delivered[i].len(), 3, "member {i}");
    }
}

/// Under random loss of data and tokens, every member delivers every message, in one
/// order, each once; the windows hold (no round sends more than Global_window).
#[test]
fn random_loss_keeps_one_order_and_loses_nothing() {
    for seed in 1..=20u64 {
        let mut rng = seed;
        let mut net = Net::new(ring(4, 4, 2, Service::Agreed));
        for i in 0..4 {
            net.propose(i, 25);
        }
        net.run(60_000, |_, _, m| {
            let p = match m {
                Message::Data(_) => 15,
                _ => 10,
            };
            crate::raft::splitmix64(&mut rng) % 100 < p
        });
        let reference: Vec<u64> = net.delivered[0].iter().map(|d| d.0).collect();
        assert_eq!(reference, (1..=reference.len() as u64).collect::<Vec<_>>());
        assert_eq!(reference.len(), 100, "seed {seed}: every value delivered");
        for i in 1..4 {
            assert_eq!(
                net.delivered[i], net.delivered[0],
                "seed {seed}: member {i}"
            );
        }
        for i in 0..4 {
            assert_eq!(net.acked[i], 25, "seed {seed}: member {i}'s acks");
        }
    }
}

#[test]
fn messages_round_trip_and_malformed_ones_are_refused() {
    let t = Message::Token(Token {
        ring: RingId {
            rep: NodeId(3),
            seq: 7,
        },
        hop: 9,
        rotation: 4,
        seq: 100,
        aru: 90,
        aru_id: Some(NodeId(2)),
        fcc: 12,
        rtr: vec![Rtr { seq: 91, skip: 0 }, Rtr { seq: 95, skip: 2 }],
        retrans_flg: true,
    });
    let bytes = |m: &Message| {
        let mut e = Encoder::new();
        m.encode(&mut e);
        e.to_bytes()
    };
    assert_eq!(Message::decode(1, bytes(&t)), Ok(t.clone()));
    let d = Message::Data(Data {
        ring: RingId::default(),
        seq: 5,
        pid: NodeId(1),
        round: 2,
        service: Service::Safe,
        batch: crate::types::Batch::single(
            ValueId {
                node: NodeId(1),
                seq: 40,
            },
            Bytes::from_static(b"hello"),
        ),
        inner: None,
    });
    assert_eq!(Message::decode(2, bytes(&d)), Ok(d.clone()));
    // Every truncation is refused, never a panic.
    for m in [&t, &d] {
        let b = bytes(m);
        for cut in 0..b.len() {
            assert!(
                Message::decode(m.kind(), b.slice(..cut)).is_err(),
                "cut at {cut}"
            );
        }
        let mut long = b.to_vec();
        long.push(0);
        assert!(
            Message::decode(m.kind(), Bytes::from(long)).is_err(),
            "trailing"
        );
    }
    assert!(Message::decode(9, bytes(&t)).is_err(), "unknown kind");
    // An aru above seq, a request past seq, a service that does not exist.
    let Message::Token(mut bad) = t.clone() else {
        unreachable!()
    };
    bad.aru = 101;
    assert!(Message::decode(1, bytes(&Message::Token(bad.clone()))).is_err());
    bad.aru = 90;
    bad.rtr = vec![Rtr { seq: 101, skip: 0 }];
    assert!(Message::decode(1, bytes(&Message::Token(bad))).is_err());
    let mut raw = bytes(&d).to_vec();
    raw[12 + 8 + 4 + 8] = 7; // the service byte (ring 12, seq 8, pid 4, round 8)
    assert!(Message::decode(2, Bytes::from(raw)).is_err());
}

#[test]
fn configurations_with_bad_windows_are_refused_with_the_field_named() {
    let ok = TokenConfig::new(ids(3));
    assert!(ok.validate(NodeId(0)).is_ok());
    assert_eq!(ok.validate(NodeId(7)).unwrap_err().field, "members");
    let c = TokenConfig {
        accelerated_window: 40,
        ..ok.clone()
    };
    assert_eq!(
        c.validate(NodeId(0)).unwrap_err().field,
        "accelerated_window"
    );
    let c = TokenConfig {
        global_window: 1,
        ..ok.clone()
    };
    assert_eq!(c.validate(NodeId(0)).unwrap_err().field, "global_window");
    let c = TokenConfig {
        buffer_messages_max: u64::from(ok.global_window),
        ..ok.clone()
    };
    assert_eq!(
        c.validate(NodeId(0)).unwrap_err().field,
        "buffer_messages_max"
    );
    let c = TokenConfig {
        fail_to_recv_rotations: 0,
        ..ok.clone()
    };
    assert_eq!(
        c.validate(NodeId(0)).unwrap_err().field,
        "fail_to_recv_rotations"
    );
    let c = TokenConfig {
        members: vec![NodeId(0), NodeId(0)],
        ..ok
    };
    assert_eq!(c.validate(NodeId(0)).unwrap_err().field, "members");
}

// ---- membership (Totem) and EVS ----------------------------------------------------------

use crate::protocol::ConfigKind;

fn ids_of(v: &[u32]) -> Vec<NodeId> {
    v.iter().map(|&i| NodeId(i)).collect()
}

/// Runs `steps` single steps with `drop`, and ticks (1 ms) whenever the queue is dry.
fn steps(net: &mut Net, steps: usize, mut drop: impl FnMut(NodeId, NodeId, &Message) -> bool) {
    for _ in 0..steps {
        net.run(1, &mut drop);
    }
}

#[test]
fn members_gather_and_install_one_ring_with_a_transitional_then_a_regular_configuration() {
    let mut net = Net::new(ring(3, 5, 3, Service::Agreed));
    net.form();
    for i in 0..3 {
        assert_eq!(
            net.configs[i],
            vec![
                (ConfigKind::Transitional, ids_of(&[i as u32])),
                (ConfigKind::Regular, ids_of(&[0, 1, 2])),
            ],
            "member {i}: it came from a ring of its own"
        );
        assert_eq!(
            net.nodes[i].ring().rep,
            NodeId(0),
            "the lowest id represents"
        );
    }
}

/// Runs a formed ring of three with the given hold settings: a value proposed at member 0
/// every 20 messages for 30 ms of the net's clock, then nothing. Returns whether any
/// member held the token during the load, when (after the load) the first hold came, and
/// the net.
fn hold_under_load(idle_before_hold_us: Micros) -> (bool, Option<Micros>, Net) {
    let mut nodes = ring(3, 5, 3, Service::Agreed);
    for r in &mut nodes {
        r.cfg.token_hold_us = 1_000;
        r.cfg.idle_before_hold_us = idle_before_hold_us;
    }
    let mut net = Net::new(nodes);
    net.form();
    let start = net.now;
    let mut held_under_load = false;
    while net.now < start + 30_000 {
        net.propose(0, 1);
        for _ in 0..20 {
            steps(&mut net, 1, |_, _, _| false);
            held_under_load |= net.nodes.iter().any(|r| r.held.is_some());
        }
    }
    let quiet_from = net.now;
    for _ in 0..200_000 {
        steps(&mut net, 1, |_, _, _| false);
        if net.nodes.iter().any(|r| r.held.is_some()) {
            return (held_under_load, Some(net.now - quiet_from), net);
        }
    }
    (held_under_load, None, net)
}

/// A ring under load never holds its token, however briefly each member is idle between
/// values: a value proposed at one member would otherwise wait for a hold at another (with
/// a hold at the first idle token, it does). Only a ring idle for `idle_before_hold_us`
/// holds it, and every value is delivered everywhere either way.
#[test]
fn a_ring_that_carried_values_lately_keeps_its_token_moving_and_holds_it_only_when_idle() {
    let (held, after, net) = hold_under_load(20_000);
    assert!(!held, "a token was held on a busy ring");
    let after = after.expect("an idle ring holds its token");
    assert!(after > 1_000, "held {after} us after the last value");
    let n = net.values[0].len();
    assert!(n > 0 && net.values.iter().all(|v| v.len() == n));
    let (held_at_once, _, _) = hold_under_load(0);
    assert!(
        held_at_once,
        "holding at the first idle token holds under load too"
    );
}

/// The status' view and configuration are the installed ring only: a member committing
/// to a ring of three that may still fail shows neither, so a load (or a test) that waits
/// for the whole ring waits, though `coordinator` already names the new representative.
#[test]
fn the_view_names_only_an_installed_ring_not_one_being_committed() {
    let mut net = Net::new(ring(3, 5, 3, Service::Agreed));
    let mut seen_forming = false;
    for _ in 0..20_000 {
        steps(&mut net, 1, |_, _, _| false);
        for r in &net.nodes {
            if matches!(r.state, State::Commit | State::Recovery) {
                seen_forming = true;
                assert_eq!(r.members().len(), 3, "memb already names the new ring");
                assert!(r.status().view.is_empty(), "{}", r.describe());
                assert!(r.status().configuration.is_none(), "{}", r.describe());
            }
        }
        if net
            .nodes
            .iter()
            .all(|r| r.operational() && r.members().len() == 3)
        {
            break;
        }
    }
    assert!(seen_forming, "the ring formed without a commit step");
    for r in &net.nodes {
        assert_eq!(r.status().view, ids(3));
        let c = r.status().configuration.expect("the installed ring");
        let members: Vec<NodeId> = c.members.iter().map(|m| m.id).collect();
        assert_eq!(members, ids(3));
        assert_eq!(c.id, r.ring.seq);
    }
}

/// A member crashes: the token is lost, the others gather, fail it, and install a ring of
/// two; values proposed before and after go on in one order at both.
#[test]
fn a_crashed_member_is_failed_and_the_others_go_on_in_one_order() {
    let mut net = Net::new(ring(3, 5, 3, Service::Agreed));
    net.form();
    for i in 0..3 {
        net.propose(i, 10);
    }
    steps(&mut net, 300, |_, _, _| false);
    net.down[2] = true;
    net.propose(0, 10);
    net.propose(1, 10);
    steps(&mut net, 40_000, |_, _, _| false);
    for i in 0..2 {
        assert!(net.nodes[i].operational(), "member {i}");
        assert_eq!(net.nodes[i].members(), ids_of(&[0, 1]).as_slice());
        let last_two: Vec<_> = net.configs[i].iter().rev().take(2).rev().cloned().collect();
        assert_eq!(
            last_two,
            vec![
                (ConfigKind::Transitional, ids_of(&[0, 1])),
                (ConfigKind::Regular, ids_of(&[0, 1])),
            ],
            "member {i}"
        );
    }
    let losses = net.nodes[0].stats().token_losses + net.nodes[1].stats().token_losses;
    assert!(losses >= 1, "a member saw the token lost");
    assert_eq!(
        net.values[0], net.values[1],
        "one order at the members that go on"
    );
    let from = |n: u32| net.values[0].iter().filter(|v| v.node == NodeId(n)).count();
    assert_eq!(from(0), 20, "every value of member 0");
    assert_eq!(from(1), 20, "every value of member 1");
}

/// Member 1 misses member 0's messages (every copy, retransmissions too); member 0
/// crashes. Recovery carries them from member 2 on the new ring, so members 1 and 2
/// deliver the same sequence (EVS: members that move together deliver the same set).
#[test]
fn recovery_carries_the_old_rings_messages_a_survivor_lacks() {
    let mut net = Net::new(ring(3, 5, 3, Service::Agreed));
    net.form();
    net.propose(0, 6);
    let cut = |_: NodeId, to: NodeId, m: &Message| {
        to == NodeId(1) && matches!(m, Message::Data(d) if d.pid == NodeId(0) && d.inner.is_none())
    };
    steps(&mut net, 400, cut);
    assert!(net.values[1].is_empty(), "member 1 lacks all of them");
    assert!(net.values[2].len() == 6, "member 2 has them all");
    net.down[0] = true;
    steps(&mut net, 40_000, cut);
    assert!(net.nodes[1].operational() && net.nodes[2].operational());
    assert_eq!(net.nodes[1].members(), ids_of(&[1, 2]).as_slice());
    assert!(
        net.nodes[2].stats().recovered_sent >= 6,
        "member 2 carried them"
    );
    assert_eq!(net.values[1], net.values[2]);
    assert_eq!(net.values[1].len(), 6);
}

/// A partition splits {0, 1} from {2}: each side installs a ring of its own; after the
/// heal the representatives' merge announcements bring them back into one ring, where
/// new values are delivered in one order everywhere.
#[test]
fn a_partition_makes_two_rings_that_merge_after_the_heal() {
    let mut net = Net::new(ring(3, 5, 3, Service::Agreed));
    net.form();
    let apart = |a: NodeId, b: NodeId| (a == NodeId(2)) != (b == NodeId(2));
    steps(&mut net, 40_000, |f, t, _| apart(f, t));
    assert_eq!(net.nodes[0].members(), ids_of(&[0, 1]).as_slice());
    assert_eq!(net.nodes[2].members(), ids_of(&[2]).as_slice());
    net.propose(2, 3); // delivered in its own ring only
    steps(&mut net, 2_000, |f, t, _| apart(f, t));
    assert_eq!(net.values[2].len(), 3);
    steps(&mut net, 40_000, |_, _, _| false);
    for i in 0..3 {
        assert!(net.nodes[i].operational(), "member {i}");
        assert_eq!(
            net.nodes[i].members(),
            ids_of(&[0, 1, 2]).as_slice(),
            "member {i}"
        );
    }
    let before: Vec<usize> = (0..3).map(|i| net.values[i].len()).collect();
    for i in 0..3 {
        net.propose(i, 4);
    }
    steps(&mut net, 3_000, |_, _, _| false);
    let after: Vec<Vec<ValueId>> = (0..3)
        .map(|i| net.values[i][before[i]..].to_vec())
        .collect();
    assert_eq!(after[0].len(), 12);
    assert_eq!(after[0], after[1]);
    assert_eq!(after[0], after[2]);
}

/// Counters near the top of `u64` are refused, so no arithmetic on them overflows.
#[test]
fn counters_past_the_limit_are_refused() {
    let t = Token {
        ring: RingId::default(),
        hop: 1,
        rotation: 1,
        seq: u64::MAX,
        aru: 0,
        aru_id: None,
        fcc: 0,
        rtr: Vec::new(),
        retrans_flg: false,
    };
    let mut e = Encoder::new();
    Message::Token(t).encode(&mut e);
    assert!(Message::decode(1, e.to_bytes()).is_err());
    let j = Join {
        sender: NodeId(1),
        proc_set: vec![NodeId(1)],
        fail_set: Vec::new(),
        ring_seq: u64::MAX,
    };
    let mut e = Encoder::new();
    Message::Join(j).encode(&mut e);
    assert!(Message::decode(3, e.to_bytes()).is_err());
}

/// A ring of `n` as `ring` makes it, each member's configuration edited by `edit` first
/// (and validated).
fn ring_with(n: u32, edit: impl Fn(&mut TokenConfig)) -> Vec<TokenRing> {
    ids(n)
        .into_iter()
        .map(|me| {
            let mut cfg = TokenConfig {
                personal_window: 5,
                accelerated_window: 3,
                global_window: 1000,
                max_message_bytes: 64,
                token_hold_us: 0,
                ..TokenConfig::new(ids(n))
            };
            edit(&mut cfg);
            TokenRing::new(cfg, me, StartInfo::FRESH).expect("valid")
        })
        .collect()
}

/// The data lane into `into` is cut (seed 002 §III-E: data and token on sockets of their
/// own): the other members' data messages, joins and merge announcements are lost on the
/// way to it; tokens and commit tokens arrive.
fn data_lane_cut(into: NodeId) -> impl FnMut(NodeId, NodeId, &Message) -> bool {
    move |from, to, m| to == into && from != into && m.lane() == crate::codec::Lane::Data
}

/// Issue 33, suspect 4: member 2 gets the token but none of the others' data. It holds the
/// token's aru down; without Totem's "failed to receive" rule nothing would be Safe,
/// discarded or acknowledged again and the ring would never change. With it (Corosync's
/// `fail_to_recv_const`), member 2 fails itself once it has held the aru for
/// `fail_to_recv_rotations` rotations, members 0 and 1 form a ring without it, where
/// every value proposed at them is acknowledged, in one order at both; member 2 goes on
/// in a ring of its own.
#[test]
fn a_member_that_gets_the_token_but_no_data_fails_itself_and_the_others_go_on_acknowledging() {
    let mut net = Net::new(ring_with(3, |c| c.fail_to_recv_rotations = 50));
    net.form();
    net.propose(0, 20);
    net.propose(1, 20);
    let mut cut = data_lane_cut(NodeId(2));
    let mut done = false;
    for _ in 0..20_000 {
        net.run(50, &mut cut);
        let pair = (0..2).all(|i| {
            net.nodes[i].operational() && net.nodes[i].members() == ids_of(&[0, 1]).as_slice()
        });
        if pair && net.acked[0] == 20 && net.acked[1] == 20 {
            done = true;
            break;
        }
    }
    assert!(
        done,
        "members 0 and 1 never went on without member 2: acked {:?}\n{}\n{}\n{}",
        net.acked,
        net.nodes[0].describe(),
        net.nodes[1].describe(),
        net.nodes[2].describe()
    );
    // Member 2 hears nobody: its consensus timeout fails the others, then it is alone.
    for _ in 0..2_000 {
        if net.configs[2].contains(&(ConfigKind::Regular, ids_of(&[2]))) {
            break;
        }
        net.run(50, &mut cut);
    }
    assert!(
        net.nodes[2].stats().failed_to_receive >= 1,
        "member 2 failed itself: {:?}",
        net.nodes[2].stats()
    );
    assert!(
        net.configs[2].contains(&(ConfigKind::Regular, ids_of(&[2]))),
        "member 2 went on in a ring of its own: {:?}",
        net.configs[2]
    );
    assert_eq!(net.values[0], net.values[1], "one order at members 0 and 1");
    assert_eq!(net.values[0].len(), 40);
}

/// Issue 33, suspect 4, the other half: while a member lags (its data lane cut, and the
/// rule that would fail it out of reach), no member buffers more than
/// `buffer_messages_max` messages: the token holders stop stamping (Corosync's
/// `fcc_rtr_limit`) and the values wait at their proposers, instead of every member's
/// buffer growing. (Flow control alone bounds it only while the lagging member's
/// retransmission requests fill the global window: with `global_window` above `RTR_MAX`
/// the ring stamps the difference every round.) Once the lane works again the member
/// catches up, and every value is delivered and acknowledged everywhere, in one order.
#[test]
fn a_lagging_member_keeps_every_members_buffer_bounded_and_catches_up_after() {
    const BOUND: u64 = 2_000;
    const EACH: usize = 2_000;
    let mut net = Net::new(ring_with(3, |c| {
        c.personal_window = 30;
        c.accelerated_window = 20;
        c.buffer_messages_max = BOUND;
        c.fail_to_recv_rotations = u32::MAX;
    }));
    net.form();
    net.propose(0, EACH);
    net.propose(1, EACH);
    let mut cut = data_lane_cut(NodeId(2));
    let mut most = 0;
    for _ in 0..4_000 {
        net.run(50, &mut cut);
        most = most.max(net.nodes.iter().map(|r| r.buffer.len()).max().unwrap_or(0));
    }
    assert!(
        most as u64 <= BOUND,
        "a member buffered {most} messages, more than {BOUND}"
    );
    assert!(
        net.nodes[0].stats().window_full > 0,
        "the window filled: {:?}",
        net.nodes[0].stats()
    );
    assert_eq!(net.acked[0], 0, "nothing acknowledged while member 2 lags");
    for _ in 0..40_000 {
        net.run(50, |_, _, _| false);
        most = most.max(net.nodes.iter().map(|r| r.buffer.len()).max().unwrap_or(0));
        if net.acked[..2] == [EACH, EACH] && net.values[2].len() == 2 * EACH {
            break;
        }
    }
    assert!(most as u64 <= BOUND, "{most} buffered after the heal");
    assert_eq!(net.acked[..2], [EACH, EACH], "every value acknowledged");
    assert_eq!(net.values[0].len(), 2 * EACH);
    assert_eq!(net.values[0], net.values[1]);
    assert_eq!(net.values[0], net.values[2]);
}
