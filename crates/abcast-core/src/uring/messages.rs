//! U-Ring Paxos messages and their wire codec.
//!
//! Names follow the seeds: `Phase1a`/`Phase1b` (seed 003 Algorithm 2, Tasks 1-3), `Phase2`
//! with a vote count (seed 000 §2.3: "Phase 2 has a message with a vote count and
//! additionally a separate decision message"), `Decision`, and the proposer's value travelling
//! the ring to the coordinator (`Forward`, seed 000 §3.1.1).
//!
//! Departure from the seeds: instead of a vote *count*, phase 2 carries the *set* of voters,
//! by node id (`NodeSet`). A count can be incremented twice by one acceptor if views
//! disagree and a message passes it twice; a set cannot (its size is the vote count). Ids,
//! not ring positions, so that a set keeps its meaning when the membership changes (issue
//! 16 item 2; frame version 5).

use crate::codec::{Decoder, Encoder, WireMessage};
use crate::error::DecodeError;
use crate::nodeset::NodeSet;
pub use crate::snapshot_transfer::{SnapshotChunk, SnapshotFetch};
use crate::types::{Ballot, Batch, BatchKey, Decree, Instance, NodeId};
use crate::wire::{get_ballot, get_batch, get_decree_tagged, put_ballot, put_batch, put_decree};

pub use crate::ring::messages::{
    Decided, Epoch, Heartbeat, MAX_ENTRIES, MAX_EPOCH_LEN, Nack, P1Entry, Phase1a, Phase1b, Repair,
    Retrieve,
};

/// A decree as it travels: in full where the receiver lacks the payload, by key where it has
/// it (seed 003 §4.1, consensus on value ids).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireDecree {
    /// A decree without a batch (no-op, skip, control): small, always sent whole.
    Meta(Decree),
    Key(BatchKey),
    Full(Batch),
}

impl WireDecree {
    pub fn full(d: &Decree) -> WireDecree {
        match d {
            Decree::Values(b) => WireDecree::Full(b.clone()),
            other => WireDecree::Meta(other.clone()),
        }
    }
    pub fn key_only(d: &Decree) -> WireDecree {
        match d {
            Decree::Values(b) => WireDecree::Key(b.key()),
            other => WireDecree::Meta(other.clone()),
        }
    }
    /// The decree, if this carries all of it.
    pub fn decree(&self) -> Option<Decree> {
        match self {
            WireDecree::Meta(d) => Some(d.clone()),
            WireDecree::Full(b) => Some(Decree::Values(b.clone())),
            WireDecree::Key(_) => None,
        }
    }
    pub fn key(&self) -> Option<BatchKey> {
        match self {
            WireDecree::Meta(_) => None,
            WireDecree::Key(k) => Some(*k),
            WireDecree::Full(b) => Some(b.key()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forward {
    pub batch: Batch,
    /// Nodes that hold the payload (the proposer and every node that forwarded it).
    pub path: NodeSet,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase2 {
    pub ballot: Ballot,
    pub instance: Instance,
    /// Fingerprint of the epoch the ballot's phase 1 ran in; acceptors in another epoch do not vote.
    pub epoch_fp: u64,
    /// Acceptors that voted for this decree in this ballot: the vote count.
    pub votes: NodeSet,
    /// Nodes this circulation has visited.
    pub visited: NodeSet,
    /// Nodes that hold the payload.
    pub has_payload: NodeSet,
    pub decree: WireDecree,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub instance: Instance,
    pub ballot: Ballot,
    /// Nodes that have seen this decision in this circulation.
    pub seen: NodeSet,
    pub has_payload: NodeSet,
    pub decree: WireDecree,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Forward(Forward),
    Phase1a(Phase1a),
    Phase1b(Phase1b),
    Phase2(Phase2),
    Decision(Decision),
    Nack(Nack),
    Retrieve(Retrieve),
    Decided(Decided),
    Heartbeat(Heartbeat),
    Repair(Repair),
    /// A learner behind the trim point asks a peer learner for its snapshot, in chunks
    /// (`snapshot_transfer.rs`).
    SnapshotFetch(SnapshotFetch),
    SnapshotChunk(SnapshotChunk),
}

const K_FORWARD: u8 = 1;
const K_PHASE1A: u8 = 2;
const K_PHASE1B: u8 = 3;
const K_PHASE2: u8 = 4;
const K_DECISION: u8 = 5;
const K_NACK: u8 = 6;
const K_RETRIEVE: u8 = 7;
const K_DECIDED: u8 = 8;
const K_HEARTBEAT: u8 = 9;
const K_REPAIR: u8 = 10;
const K_SNAPSHOT_FETCH: u8 = 11;
const K_SNAPSHOT_CHUNK: u8 = 12;

fn put_wire_decree(e: &mut Encoder, w: &WireDecree) {
    match w {
        WireDecree::Meta(m) => put_decree(e, m),
        WireDecree::Key(k) => {
            e.put_u8(1);
            e.put_u32(k.origin.0);
            e.put_u64(k.first_seq);
        }
        WireDecree::Full(b) => {
            e.put_u8(2);
            put_batch(e, b);
        }
    }
}
fn get_wire_decree(d: &mut Decoder) -> Result<WireDecree, DecodeError> {
    match d.u8("decree.tag")? {
        1 => Ok(WireDecree::Key(BatchKey {
            origin: NodeId(d.u32("key.origin")?),
            first_seq: d.u64("key.first_seq")?,
        })),
        2 => Ok(WireDecree::Full(get_batch(d)?)),
        t => Ok(WireDecree::Meta(get_decree_tagged(t, d)?)),
    }
}

/// For the snapshot rules shared by U-Ring Paxos and Ring Paxos (`ring::snapshot`).
impl From<SnapshotFetch> for Message {
    fn from(m: SnapshotFetch) -> Message {
        Message::SnapshotFetch(m)
    }
}

impl From<SnapshotChunk> for Message {
    fn from(m: SnapshotChunk) -> Message {
        Message::SnapshotChunk(m)
    }
}

impl WireMessage for Message {
    fn kind(&self) -> u8 {
        match self {
            Message::Forward(_) => K_FORWARD,
            Message::Phase1a(_) => K_PHASE1A,
            Message::Phase1b(_) => K_PHASE1B,
            Message::Phase2(_) => K_PHASE2,
            Message::Decision(_) => K_DECISION,
            Message::Nack(_) => K_NACK,
            Message::Retrieve(_) => K_RETRIEVE,
            Message::Decided(_) => K_DECIDED,
            Message::Heartbeat(_) => K_HEARTBEAT,
            Message::Repair(_) => K_REPAIR,
            Message::SnapshotFetch(_) => K_SNAPSHOT_FETCH,
            Message::SnapshotChunk(_) => K_SNAPSHOT_CHUNK,
        }
    }

    fn encode(&self, e: &mut Encoder) {
        match self {
            Message::Forward(m) => {
                m.path.encode(e);
                put_batch(e, &m.batch);
            }
            Message::Phase1a(m) => m.encode(e),
            Message::Phase1b(m) => m.encode(e),
            Message::Phase2(m) => {
                put_ballot(e, m.ballot);
                e.put_u64(m.instance);
                e.put_u64(m.epoch_fp);
                m.votes.encode(e);
                m.visited.encode(e);
                m.has_payload.encode(e);
                put_wire_decree(e, &m.decree);
            }
            Message::Decision(m) => {
                e.put_u64(m.instance);
                put_ballot(e, m.ballot);
                m.seen.encode(e);
                m.has_payload.encode(e);
                put_wire_decree(e, &m.decree);
            }
            Message::Nack(m) => m.encode(e),
            Message::Retrieve(m) => m.encode(e),
            Message::Decided(m) => m.encode(e),
            Message::Heartbeat(m) => m.encode(e),
            Message::Repair(m) => m.encode(e),
            Message::SnapshotFetch(m) => m.encode(e),
            Message::SnapshotChunk(m) => m.encode(e),
        }
    }

    fn decode(kind: u8, body: bytes::Bytes) -> Result<Message, DecodeError> {
        let mut d = Decoder::new(body);
        let m = match kind {
            K_FORWARD => Message::Forward(Forward {
                path: NodeSet::decode(&mut d, "forward.path")?,
                batch: get_batch(&mut d)?,
            }),
            K_PHASE1A => Message::Phase1a(Phase1a::decode(&mut d)?),
            K_PHASE1B => Message::Phase1b(Phase1b::decode(&mut d)?),
            K_PHASE2 => Message::Phase2(Phase2 {
                ballot: get_ballot(&mut d)?,
                instance: d.u64("phase2.instance")?,
                epoch_fp: d.u64("phase2.epoch_fp")?,
                votes: NodeSet::decode(&mut d, "phase2.votes")?,
                visited: NodeSet::decode(&mut d, "phase2.visited")?,
                has_payload: NodeSet::decode(&mut d, "phase2.has_payload")?,
                decree: get_wire_decree(&mut d)?,
            }),
            K_DECISION => Message::Decision(Decision {
                instance: d.u64("decision.instance")?,
                ballot: get_ballot(&mut d)?,
                seen: NodeSet::decode(&mut d, "decision.seen")?,
                has_payload: NodeSet::decode(&mut d, "decision.has_payload")?,
                decree: get_wire_decree(&mut d)?,
            }),
            K_NACK => Message::Nack(Nack::decode(&mut d)?),
            K_RETRIEVE => Message::Retrieve(Retrieve::decode(&mut d)?),
            K_DECIDED => Message::Decided(Decided::decode(&mut d)?),
            K_HEARTBEAT => Message::Heartbeat(Heartbeat::decode(&mut d)?),
            K_REPAIR => Message::Repair(Repair::decode(&mut d)?),
            K_SNAPSHOT_FETCH => Message::SnapshotFetch(SnapshotFetch::decode(&mut d)?),
            K_SNAPSHOT_CHUNK => Message::SnapshotChunk(SnapshotChunk::decode(&mut d)?),
            k => return Err(DecodeError::UnknownKind(k)),
        };
        d.finish()?;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::BatchBuilder;
    use bytes::Bytes;

    fn set(ids: &[u32]) -> NodeSet {
        ids.iter().map(|&i| NodeId(i)).collect()
    }

    fn epoch(incarnations: &[u64]) -> Epoch {
        Epoch::numbered(incarnations)
    }

    fn batch() -> Batch {
        let mut b = BatchBuilder::new(NodeId(2), 7, 64);
        b.push(b"hello");
        b.push(b"");
        b.push(&[9u8; 3000]);
        b.finish()
    }

    fn all() -> Vec<Message> {
        let bal = Ballot::new(3, NodeId(1), 2);
        vec![
            Message::Forward(Forward {
                batch: batch(),
                path: [1, 3].into_iter().map(NodeId).collect(),
            }),
            Message::Phase1a(Phase1a {
                ballot: bal,
                from: 1,
                to: 5001,
                epoch: epoch(&[0, 2, 0]),
            }),
            Message::Phase1b(Phase1b {
                ballot: bal,
                from: 1,
                to: 10,
                ok: true,
                promised: bal,
                amnesic: false,
                decided_upto: 3,
                max_instance: 9,
                log_start: 1,
                covered_to: 10,
                epoch: epoch(&[1, 2]),
                accepted: vec![
                    P1Entry {
                        instance: 4,
                        ballot: bal,
                        decree: Decree::Values(batch()),
                        decided: false,
                    },
                    P1Entry {
                        instance: 5,
                        ballot: bal,
                        decree: Decree::Noop,
                        decided: true,
                    },
                    // No-ops in a row, the smallest entries (18 bytes each).
                    P1Entry {
                        instance: 6,
                        ballot: bal,
                        decree: Decree::Noop,
                        decided: true,
                    },
                    P1Entry {
                        instance: 7,
                        ballot: bal,
                        decree: Decree::Noop,
                        decided: false,
                    },
                    P1Entry {
                        instance: 8,
                        ballot: bal,
                        decree: Decree::Noop,
                        decided: true,
                    },
                    P1Entry {
                        instance: 9,
                        ballot: bal,
                        decree: Decree::Noop,
                        decided: true,
                    },
                ],
            }),
            Message::Phase2(Phase2 {
                ballot: bal,
                instance: 4,
                epoch_fp: 99,
                votes: set(&[1]),
                visited: set(&[1]),
                has_payload: set(&[1, 2]),
                decree: WireDecree::Full(batch()),
            }),
            Message::Decision(Decision {
                instance: 4,
                ballot: bal,
                seen: set(&[2]),
                has_payload: set(&[1, 2, 3]),
                decree: WireDecree::Key(batch().key()),
            }),
            Message::Nack(Nack {
                promised: bal,
                instance: 4,
                epoch: epoch(&[]),
            }),
            Message::Retrieve(Retrieve { from: 1, to: 65 }),
            Message::Decided(Decided {
                log_start: 1,
                scanned_to: 3,
                dedup_from: 4,
                dedup_to: 7,
                dedup: vec![(batch().key(), 5)],
                entries: vec![(1, Decree::Noop), (2, Decree::Values(batch()))],
            }),
            Message::Heartbeat(Heartbeat {
                ballot: bal,
                incarnation: 2,
                seq: 77,
                delivered_upto: 3,
                decided_max: 4,
                leading: true,
                amnesic: false,
                epoch: epoch(&[0, 0, 0]),
                snapshot_upto: 2,
                trim_below: 3,
                snapshot_class: 4,
            }),
            Message::Repair(Repair {
                ballot: bal,
                epoch: epoch(&[1, 0, 2]),
                decided_floor: 2,
                upto: 9,
            }),
            Message::SnapshotFetch(SnapshotFetch {
                upto: 9,
                min_upto: 7,
                offset: 1 << 20,
            }),
            Message::SnapshotChunk(SnapshotChunk {
                upto: 9,
                total: 5000,
                offset: 100,
                data: Bytes::from(vec![3u8; 4000]),
            }),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in all() {
            let mut e = Encoder::new();
            m.encode(&mut e);
            let body = e.to_bytes();
            let back = Message::decode(m.kind(), body).expect("decodes");
            assert_eq!(back, m);
        }
    }

    #[test]
    fn a_phase1b_of_only_noops_decodes() {
        // The smallest entries (8 + BALLOT_BYTES + 2 = 22 bytes): the decoder's size
        // pre-check must not exceed them.
        let bal = Ballot::new(1, NodeId(0), 0);
        let m = Message::Phase1b(Phase1b {
            ballot: bal,
            from: 1,
            to: 100,
            ok: true,
            promised: bal,
            amnesic: false,
            decided_upto: 0,
            max_instance: 50,
            log_start: 1,
            covered_to: 100,
            epoch: epoch(&[0; 3]),
            accepted: (1..=50)
                .map(|i| P1Entry {
                    instance: i,
                    ballot: bal,
                    decree: Decree::Noop,
                    decided: i % 2 == 0,
                })
                .collect(),
        });
        let mut e = Encoder::new();
        m.encode(&mut e);
        assert_eq!(Message::decode(m.kind(), e.to_bytes()), Ok(m));
    }

    #[test]
    fn truncated_and_garbage_bodies_are_errors_not_panics() {
        for m in all() {
            let mut e = Encoder::new();
            m.encode(&mut e);
            let body = e.to_bytes();
            for cut in 0..body.len() {
                assert!(
                    Message::decode(m.kind(), body.slice(..cut)).is_err(),
                    "cut {cut} of {m:?}"
                );
            }
            let mut long = body.to_vec();
            long.push(0);
            assert!(Message::decode(m.kind(), Bytes::from(long)).is_err());
        }
        // Pseudo-random garbage under every kind.
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for kind in 0..=12u8 {
            for len in 0..200usize {
                let mut v = Vec::with_capacity(len);
                for _ in 0..len {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    v.push(x as u8);
                }
                let _ = Message::decode(kind, Bytes::from(v));
            }
        }
    }

    #[test]
    fn large_payload_is_not_copied_into_the_header_chunk() {
        let m = Message::Forward(Forward {
            batch: batch(),
            path: set(&[1]),
        });
        let mut e = Encoder::new();
        m.encode(&mut e);
        let chunks = e.finish();
        assert!(
            chunks.iter().any(|c| c.len() == 3005),
            "payload travels as its own chunk: {chunks:?}"
        );
    }
}
