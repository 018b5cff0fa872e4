//! UDP datagrams and segments (`abcast_runtime::multicast`): the datagram check and the
//! segment join, through [`Multicast::check_received`], which `recv` runs on what it read,
//! on an endpoint of node 1 in cluster 7 that takes datagrams from nodes 2 and 3. Also the
//! walk over a read's control messages that finds a GRO segment size.
//!
//! Input: steps, each a mode byte and a `u16`-prefixed byte string:
//! - raw: the bytes are the datagram;
//! - whole: the bytes are node, incarnation, kind, group and body, made into a datagram
//!   with correct checksums (so mutations reach the checks behind them);
//! - segment: node, incarnation, number, index, count, total and a part, with a correct
//!   header checksum;
//! - split: a whole datagram as above cut into segments of a size the input picks, sent in
//!   order with one optionally left out or repeated;
//! - control: the bytes are a read's control messages.
//!
//! Checks: whatever arrives is either a frame from node 2 or 3 of a protocol kind
//! (1..=127), or dropped; never a panic.

use crate::input::Input;
use abcast_core::NodeId;
use abcast_runtime::multicast::{
    self, Multicast, OVERHEAD_BYTES, Received, SEGMENT_HEADER_BYTES, Sender,
};
use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;

const CLUSTER: u64 = 7;
const STEPS_MAX: usize = 64;

pub fn datagram(data: &[u8]) {
    let me = Sender {
        cluster_id: CLUSTER,
        node: NodeId(1),
        incarnation: 1,
    };
    let bind: SocketAddr = ([127, 0, 0, 1], 0).into();
    let Ok(mut m) = Multicast::open_unicast(bind, (1 << 16, 1 << 16), me, &[NodeId(2), NodeId(3)])
    else {
        return; // no loopback socket here: nothing to test
    };
    let source: SocketAddr = ([127, 0, 0, 1], 9).into();
    let mut input = Input::new(data);
    for _ in 0..STEPS_MAX {
        let (Some(mode), Some(b)) = (input.u8(), input.string16()) else {
            break;
        };
        let src = (mode & 0x80 != 0).then_some(source);
        match mode % 5 {
            0 => accept(&mut m, b, src),
            1 => {
                if let Some(d) = whole(b) {
                    accept(&mut m, &d, src);
                }
            }
            2 => accept(&mut m, &segment(b), src),
            3 => split(&mut m, b, src),
            _ => {
                if let Some(n) = multicast::gro_segment_bytes(b) {
                    let _ = n;
                }
            }
        }
    }
}

fn accept(m: &mut Multicast, d: &[u8], source: Option<SocketAddr>) {
    match m.check_received(BytesMut::from(d), source) {
        Received::Frame(from, f) => {
            assert!(
                from == NodeId(2) || from == NodeId(3),
                "a frame from {from:?}, not a peer"
            );
            assert!(
                (1..=127).contains(&f.kind),
                "a frame of kind {} from a datagram",
                f.kind
            );
        }
        Received::Dropped | Received::Empty => {}
    }
}

/// node u32, incarnation u8, kind, group u16, body: a datagram with correct checksums.
fn whole(b: &[u8]) -> Option<Vec<u8>> {
    let mut i = Input::new(b);
    let from = Sender {
        cluster_id: CLUSTER,
        node: NodeId(i.u8().map_or(2, u32::from)),
        incarnation: u64::from(i.u8()?),
    };
    let (kind, group) = (i.u8()?, i.u16()?);
    let body = Bytes::copy_from_slice(i.rest());
    multicast::encode_to_bytes(&from, kind, group, &[body]).map(|d| d.to_vec())
}

/// A segment with a correct header checksum and whatever fields the input says.
fn segment(b: &[u8]) -> Vec<u8> {
    let mut i = Input::new(b);
    let from = Sender {
        cluster_id: CLUSTER,
        node: NodeId(i.u8().map_or(2, u32::from)),
        incarnation: u64::from(i.u8().unwrap_or(1)),
    };
    let number = u64::from(i.u8().unwrap_or(0));
    let index = i.u16().unwrap_or(0);
    let count = i.u16().unwrap_or(2);
    let total = i.u32().unwrap_or(0);
    let mut d = multicast::encode_segment_header(&from, number, index, count, total).to_vec();
    d.extend_from_slice(i.rest());
    d
}

/// A whole datagram cut into segments (size and a part to drop or repeat from the input).
fn split(m: &mut Multicast, b: &[u8], src: Option<SocketAddr>) {
    let mut i = Input::new(b);
    let (Some(size), Some(fault)) = (i.u8(), i.u8()) else {
        return;
    };
    let Some(d) = whole(i.rest()) else { return };
    let part = (usize::from(size) + 1) * 4;
    let count = d.len().div_ceil(part);
    let Ok(count16) = u16::try_from(count) else {
        return;
    };
    let from = Sender {
        cluster_id: CLUSTER,
        node: NodeId(u32::from_le_bytes([d[16], d[17], d[18], d[19]])),
        incarnation: u64::from_le_bytes([d[20], d[21], d[22], d[23], d[24], d[25], d[26], d[27]]),
    };
    let number = u64::from(fault);
    for (k, chunk) in d.chunks(part).enumerate() {
        // fault: 0 sends every part once; 1..=127 leaves part k out; 128.. sends it twice.
        let hit = usize::from(fault & 0x7f) == k + 1;
        if hit && fault < 128 {
            continue;
        }
        let mut seg =
            multicast::encode_segment_header(&from, number, k as u16, count16, d.len() as u32)
                .to_vec();
        seg.extend_from_slice(chunk);
        debug_assert!(seg.len() >= SEGMENT_HEADER_BYTES && d.len() >= OVERHEAD_BYTES);
        let times = if hit { 2 } else { 1 };
        for _ in 0..times {
            accept(m, &seg, src);
        }
    }
}
