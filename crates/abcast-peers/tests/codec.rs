//! The adapters' wire codecs refuse, and never panic on, any byte string: every cut of
//! every message a small cluster sends, every one of them with bytes flipped, and random
//! bytes of every kind. Each message also round-trips to the same bytes (the simulator
//! checks that on every message too).

use abcast_core::codec::{Encoder, WireMessage};
use abcast_core::config::StartInfo;
use abcast_core::{NodeId, Outbox, Protocol};
use abcast_peers::{
    OmniPaxosCore, OmniPaxosCoreConfig, OmniPaxosMessage, RaftRsCore, RaftRsCoreConfig,
    RaftRsMessage,
};
use bytes::Bytes;
use std::collections::BTreeSet;

/// A message's frame kind and body.
fn encode<M: WireMessage>(m: &M) -> (u8, Bytes) {
    let mut e = Encoder::new();
    m.encode(&mut e);
    (m.kind(), e.to_bytes())
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Three nodes driven by hand for two simulated seconds (a message arrives 1 ms after it
/// was sent, or is lost one time in ten; values of many sizes proposed everywhere; node 0
/// restarts empty half-way), and the messages they sent, encoded: `(kind, body)`, at most
/// `per_variant` of each message variant, of distinct lengths.
fn messages_of<P: Protocol>(
    make: impl Fn(NodeId, StartInfo) -> P,
    read: bool,
    per_variant: usize,
) -> Vec<(u8, Bytes)> {
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let mut nodes: Vec<P> = ids.iter().map(|&n| make(n, StartInfo::FRESH)).collect();
    let mut rng = Rng(5);
    let mut in_flight: Vec<(NodeId, NodeId, P::Message)> = Vec::new();
    let mut seen = Vec::new();
    let mut shapes = BTreeSet::new();
    let mut per: std::collections::BTreeMap<String, usize> = Default::default();
    let mut out = Outbox::new();
    for step in 0..2000u64 {
        let now = step * 1000;
        if step == 1000 {
            let restarted = StartInfo::restart(1, true).expect("incarnation 1");
            nodes[0] = make(ids[0], restarted);
        }
        let mut arriving = std::mem::take(&mut in_flight);
        arriving.retain(|_| rng.below(10) != 0);
        for (i, p) in nodes.iter_mut().enumerate() {
            for (from, to, m) in &arriving {
                if *to == ids[i] {
                    p.receive(now, *from, m.clone(), &mut out);
                }
            }
            if step % 7 == i as u64 && p.can_propose() {
                let size = if step % 100 == 0 {
                    3000
                } else {
                    8 + rng.below(200) as usize
                };
                let _ = p.propose(now, Bytes::from(vec![step as u8; size]), &mut out);
            }
            if read && step % 50 == 25 {
                let _ = p.read_index(now, step, &mut out);
            }
            p.tick(now, &mut out);
            for (to, m) in out.sends.drain(..) {
                let (kind, body) = encode(&m);
                let v = variant(&m);
                let n = per.entry(v.clone()).or_default();
                if *n < per_variant && shapes.insert((v, body.len())) {
                    *n += 1;
                    seen.push((kind, body));
                }
                in_flight.push((ids[i], to, m));
            }
            out.clear();
        }
    }
    assert!(
        nodes.iter().any(|p| p.status().delivered_upto > 0),
        "the cluster decided something"
    );
    eprintln!("variants sent: {per:?}");
    seen
}

/// The message's variant, from its `Debug`: raft-rs' `msg_type`, else the innermost
/// OmniPaxos `msg`, else the adapter's own variant.
fn variant<M: std::fmt::Debug>(m: &M) -> String {
    let d = format!("{m:?}");
    let at = d
        .find("msg_type: ")
        .map(|i| i + 10)
        .or_else(|| d.rfind("msg: ").map(|i| i + 5))
        .unwrap_or(0);
    d[at..]
        .chars()
        .take_while(|c| c.is_alphanumeric())
        .collect()
}

/// Every message round-trips; no cut, flip or random string panics; `cuts_refused`: each
/// proper cut is refused (not for protobuf, where a cut at a field boundary is a shorter
/// valid message; the frame's length and crc32c refuse truncation on the wire).
fn hammer<M: WireMessage + std::fmt::Debug>(
    msgs: &[(u8, Bytes)],
    kinds: &[u8],
    cuts_refused: bool,
) {
    assert!(msgs.len() > 5, "too few messages to test: {}", msgs.len());
    let mut rng = Rng(17);
    let mut cut_ok = 0usize;
    let mut cuts = 0usize;
    for (kind, body) in msgs {
        let m = M::decode(*kind, body.clone()).unwrap_or_else(|e| panic!("kind {kind}: {e}"));
        let (k2, b2) = encode(&m);
        assert_eq!((k2, &b2), (*kind, body), "round trip of {m:?}");
        for cut in 0..body.len() {
            cuts += 1;
            cut_ok += usize::from(M::decode(*kind, body.slice(..cut)).is_ok());
        }
        for _ in 0..64 {
            let mut b = body.to_vec();
            if b.is_empty() {
                break;
            }
            for _ in 0..=rng.below(3) {
                let at = rng.below(b.len() as u64) as usize;
                b[at] = rng.next() as u8;
            }
            let _ = M::decode(*kind, Bytes::from(b));
        }
    }
    eprintln!("{} messages, {cuts} cuts, {cut_ok} decoded", msgs.len());
    if cuts_refused {
        assert_eq!(cut_ok, 0, "{cut_ok} of {cuts} cuts decoded");
    }
    for &kind in kinds.iter().chain(&[0u8, 200]) {
        for len in 0..600u64 {
            let b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let _ = M::decode(kind, Bytes::from(b));
        }
    }
}

#[test]
fn omnipaxos_messages_round_trip_and_every_cut_flip_or_random_string_is_refused_without_a_panic() {
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let cfg = OmniPaxosCoreConfig::new(&ids);
    let msgs = messages_of(
        |n, start| OmniPaxosCore::new(cfg.clone(), n, start).expect("valid"),
        false,
        25,
    );
    hammer::<OmniPaxosMessage>(&msgs, &[1, 2], true);
}

#[test]
fn raftrs_messages_round_trip_and_no_cut_flip_or_random_string_panics() {
    let ids = [NodeId(0), NodeId(1), NodeId(2)];
    let cfg = RaftRsCoreConfig::new(&ids);
    let msgs = messages_of(
        |n, start| RaftRsCore::new(cfg.clone(), n, start).expect("valid"),
        true,
        25,
    );
    hammer::<RaftRsMessage>(&msgs, &[1], false);
}

#[test]
fn an_omnipaxos_length_prefix_past_the_frame_is_refused_before_allocating() {
    // A Data header, then bincode for `Message::SequencePaxos` (variant 0) from 1 to 2
    // holding `ProposalForward` (variant 8) of 2^62 entries.
    let mut body = Vec::new();
    for v in [0u64, 0, 0] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.extend_from_slice(&[0, 1, 2, 8, 0xfd]);
    body.extend_from_slice(&(1u64 << 62).to_le_bytes());
    let e = OmniPaxosMessage::decode(1, Bytes::from(body)).expect_err("refused");
    assert!(e.to_string().contains("omnipaxos.message"), "{e}");
}

#[test]
fn configurations_that_cannot_run_are_refused_with_the_field_named() {
    let one = [NodeId(0)];
    let e = OmniPaxosCore::new(OmniPaxosCoreConfig::new(&one), NodeId(0), StartInfo::FRESH)
        .expect_err("a cluster of one");
    assert_eq!(e.field, "nodes");
    let ids = [NodeId(0), NodeId(1)];
    let e = RaftRsCore::new(RaftRsCoreConfig::new(&ids), NodeId(5), StartInfo::FRESH)
        .expect_err("not a member");
    assert_eq!(e.field, "nodes");
    let mut cfg = RaftRsCoreConfig::new(&ids);
    cfg.election_tick = cfg.heartbeat_tick;
    let e = RaftRsCore::new(cfg, NodeId(0), StartInfo::FRESH).expect_err("raft-rs refuses");
    assert_eq!(e.field, "raft");
    let mut cfg = OmniPaxosCoreConfig::new(&ids);
    cfg.election_tick_timeout = 0;
    let e = OmniPaxosCore::new(cfg, NodeId(0), StartInfo::FRESH).expect_err("zero");
    assert_eq!(e.field, "election_tick_timeout");
}

#[test]
fn both_cores_and_their_messages_can_move_to_the_runtimes_loop_thread() {
    // The runtime's handle runs a protocol on its own thread (`P: Protocol + Send`).
    fn send<T: Send + 'static>() {}
    send::<OmniPaxosCore>();
    send::<OmniPaxosCore<abcast_peers::SharedMemoryStorage>>();
    send::<OmniPaxosMessage>();
    send::<RaftRsCore>();
    send::<RaftRsMessage>();
}
