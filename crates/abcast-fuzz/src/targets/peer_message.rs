//! Every protocol's message decoder (`WireMessage::decode_in`): U-Ring Paxos, Ring Paxos,
//! Multi-Ring Paxos over each, Sequence Paxos, Raft, the token ring, and the process
//! groups' values (`groups::wire`) that ride in the token ring's payloads.
//!
//! Input: a selector byte (which protocol), the frame's group (`u16`) and kind (`u8`),
//! then the body. (The frame around it is the `frame` target's.)
//! Checks: a message that decodes has that kind and group, answers `urgent`, `lane` and
//! `order_seq`, and encodes to a body that decodes to the same message.

use super::concat;
use crate::input::Input;
use abcast_core::codec::{Encoder, WireMessage};
use abcast_core::groups::wire as groups_wire;
use abcast_core::{GroupId, MultiRingMessage, MultiRingPaxosMessage};
use abcast_core::{raft, ringpaxos, seqpaxos, token, uring};
use bytes::Bytes;
use std::fmt::Debug;

/// The protocols, in selector order (the selector is taken modulo the count).
pub const PROTOCOLS: [&str; 8] = [
    "uring",
    "ringpaxos",
    "multiring-uring",
    "multiring-ringpaxos",
    "seqpaxos",
    "raft",
    "token",
    "groups",
];

pub fn peer_message(data: &[u8]) {
    let mut input = Input::new(data);
    let (Some(sel), Some(group), Some(kind)) = (input.u8(), input.u16(), input.u8()) else {
        return;
    };
    let body = Bytes::copy_from_slice(input.rest());
    let group = GroupId(group);
    match usize::from(sel) % PROTOCOLS.len() {
        0 => round_trip::<uring::Message>(group, kind, body),
        1 => round_trip::<ringpaxos::Message>(group, kind, body),
        2 => round_trip::<MultiRingMessage>(group, kind, body),
        3 => round_trip::<MultiRingPaxosMessage>(group, kind, body),
        4 => round_trip::<seqpaxos::Message>(group, kind, body),
        5 => round_trip::<raft::Message>(group, kind, body),
        6 => round_trip::<token::Message>(group, kind, body),
        _ => groups_value(body),
    }
}

fn round_trip<M: WireMessage + PartialEq + Debug>(group: GroupId, kind: u8, body: Bytes) {
    let Ok(m) = M::decode_in(group, kind, body) else {
        return;
    };
    assert_eq!(m.kind(), kind, "decoded as another kind: {m:?}");
    assert_eq!(m.group(), group, "decoded into another group: {m:?}");
    let _ = (m.urgent(), m.lane(), m.order_seq());
    let mut e = Encoder::new();
    m.encode(&mut e);
    let again = Bytes::from(concat(&e.finish()));
    match M::decode_in(group, kind, again) {
        Ok(n) => assert_eq!(m, n, "encode then decode changed the message"),
        Err(e) => panic!("a decoded message encodes to a body its decoder refuses: {e}; {m:?}"),
    }
}

fn groups_value(value: Bytes) {
    let Ok(Some(env)) = groups_wire::decode(&value) else {
        return;
    };
    let again = match &env {
        groups_wire::Envelope::Messages {
            group,
            sender,
            payloads,
        } => groups_wire::encode_messages(group, sender, payloads),
        groups_wire::Envelope::Join { group, member } => groups_wire::encode_join(group, member),
        groups_wire::Envelope::Leave { group, member } => groups_wire::encode_leave(group, member),
        groups_wire::Envelope::State { config, members } => groups_wire::encode_state(
            *config,
            members.iter().map(|(g, m)| (g.as_str(), m.as_str())),
        ),
    };
    match groups_wire::decode(&again) {
        Ok(Some(e)) => assert_eq!(env, e, "encode then decode changed the group value"),
        other => panic!("a decoded group value re-encodes to {other:?}; {env:?}"),
    }
}
