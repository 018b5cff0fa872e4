//! Ring Paxos messages and their wire codec (seed 003 Algorithm 2 and §6.1).
//!
//! | message | from → to | transport | Algorithm 2 |
//! | --- | --- | --- | --- |
//! | `Submit` | proposer → coordinator | unicast | "value v from proposer" (Task 1) |
//! | `Phase1a` / `Phase1b` | coordinator ↔ every acceptor | unicast | Tasks 1-3 |
//! | `Phase2a` | coordinator → everybody | ip-multicast | Task 3 line 19 |
//! | `Phase2b` | ring acceptor → successor | unicast | Tasks 4-5 |
//! | `Decision` | coordinator → everybody | ip-multicast | Task 5 line 35 |
//! | `Nack` | acceptor → coordinator | unicast | (a refusal, §4.2 "re-send ... with a bigger round") |
//! | `Retrieve` / `Decided` | learner ↔ coordinator or preferred acceptor | unicast | §4.2 lost messages |
//! | `Heartbeat`, `Repair` | everybody | unicast | §4.2 failure detection, amnesic repair; snapshot reports and the trim point (issue 4) |
//! | `SnapshotFetch` / `SnapshotChunk` | learner ↔ learner | unicast | a learner behind the trim point fetches a peer's snapshot (issue 4) |
//!
//! A `Phase2a` carries the decisions of earlier instances in its first part and the new
//! proposed value with its id in the second (§6.1, §4.3 last paragraph); a `Decision`
//! carries decisions alone, when nothing was proposed for a while.

use crate::codec::{Decoder, Encoder, WireMessage};
use crate::error::DecodeError;
pub use crate::snapshot_transfer::{SnapshotChunk, SnapshotFetch};
use crate::types::{Ballot, Batch, BatchKey, Decree, Instance, NodeId};
use crate::wire::{get_ballot, get_batch, get_decree, put_ballot, put_batch, put_decree};

pub use crate::ring::messages::{
    Decided, Epoch, Heartbeat, MAX_ENTRIES, MAX_EPOCH_LEN as MAX_MEMBERS, Nack, P1Entry, Phase1a,
    Phase1b, Repair, Retrieve,
};

/// The unique id of a proposed value (seed 003 "c-vid"/"v-vid"): the batch key, the no-op,
/// or a meta decree of a composing layer (Multi-Ring Paxos), which is small and its own id.
/// A batch key names one batch forever (proposers never reuse value ids), so equal ids mean
/// equal values.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Vid {
    Noop,
    Key(BatchKey),
    Meta { weight: u32, data: bytes::Bytes },
}

impl Vid {
    pub fn of(d: &Decree) -> Vid {
        match d {
            Decree::Values(b) => Vid::Key(b.key()),
            Decree::Noop => Vid::Noop,
            Decree::Meta { weight, data } => Vid::Meta {
                weight: *weight,
                data: data.clone(),
            },
        }
    }
    pub fn key(&self) -> Option<BatchKey> {
        match self {
            Vid::Key(k) => Some(*k),
            Vid::Noop | Vid::Meta { .. } => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Submit {
    pub batch: Batch,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase2a {
    pub ballot: Ballot,
    /// Fingerprint of the epoch the ballot's phase 1 ran in (see `ring/view.rs`).
    pub epoch_fp: u64,
    /// The ring of this ballot, coordinator last (Task 1 "c-ring").
    pub ring: Vec<NodeId>,
    /// Part one: decisions of earlier instances (§6.1).
    pub decisions: Vec<(Instance, Vid)>,
    /// Part two: the proposed value of `instance`; its id is `Vid::of(decree)`.
    pub instance: Instance,
    pub decree: Decree,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase2b {
    pub ballot: Ballot,
    pub instance: Instance,
    pub vid: Vid,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub ballot: Ballot,
    pub decisions: Vec<(Instance, Vid)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    Submit(Submit),
    Phase1a(Phase1a),
    Phase1b(Phase1b),
    Phase2a(Phase2a),
    Phase2b(Phase2b),
    Decision(Decision),
    Nack(Nack),
    Retrieve(Retrieve),
    Decided(Decided),
    Heartbeat(Heartbeat),
    Repair(Repair),
    SnapshotFetch(SnapshotFetch),
    SnapshotChunk(SnapshotChunk),
}

const K_SUBMIT: u8 = 1;
const K_PHASE1A: u8 = 2;
const K_PHASE1B: u8 = 3;
const K_PHASE2A: u8 = 4;
const K_PHASE2B: u8 = 5;
const K_DECISION: u8 = 6;
const K_NACK: u8 = 7;
const K_RETRIEVE: u8 = 8;
const K_DECIDED: u8 = 9;
const K_HEARTBEAT: u8 = 10;
const K_REPAIR: u8 = 11;
const K_SNAPSHOT_FETCH: u8 = 12;
const K_SNAPSHOT_CHUNK: u8 = 13;

fn put_vid(e: &mut Encoder, v: &Vid) {
    match v {
        Vid::Noop => e.put_u8(0),
        Vid::Meta { weight, data } => {
            e.put_u8(2);
            e.put_u32(*weight);
            e.put_u16(data.len() as u16);
            e.put_slice(data);
        }
        Vid::Key(k) => {
            e.put_u8(1);
            e.put_u32(k.origin.0);
            e.put_u64(k.first_seq);
        }
    }
}
fn get_vid(d: &mut Decoder) -> Result<Vid, DecodeError> {
    match d.u8("vid.tag")? {
        0 => Ok(Vid::Noop),
        1 => Ok(Vid::Key(BatchKey {
            origin: NodeId(d.u32("vid.origin")?),
            first_seq: d.u64("vid.first_seq")?,
        })),
        2 => {
            let weight = d.u32("vid.weight")?;
            let len = d.u16("vid.len")? as usize;
            if len > crate::types::META_MAX_BYTES {
                return Err(DecodeError::Invalid {
                    what: "vid.len",
                    detail: format!("{len} bytes (at most {})", crate::types::META_MAX_BYTES),
                });
            }
            Ok(Vid::Meta {
                weight,
                data: d.bytes(len, "vid.data")?,
            })
        }
        t => Err(DecodeError::Invalid {
            what: "vid.tag",
            detail: format!("{t} (expected 0, 1 or 2)"),
        }),
    }
}
fn put_ring(e: &mut Encoder, ring: &[NodeId]) {
    e.put_u32(ring.len() as u32);
    for n in ring {
        e.put_u32(n.0);
    }
}
fn get_ring(d: &mut Decoder) -> Result<Vec<NodeId>, DecodeError> {
    let n = d.count("ring.len", MAX_MEMBERS, 4)?;
    (0..n).map(|_| Ok(NodeId(d.u32("ring.node")?))).collect()
}
fn put_decisions(e: &mut Encoder, v: &[(Instance, Vid)]) {
    e.put_u32(v.len() as u32);
    for (i, vid) in v {
        e.put_u64(*i);
        put_vid(e, vid);
    }
}
fn get_decisions(d: &mut Decoder) -> Result<Vec<(Instance, Vid)>, DecodeError> {
    let n = d.count("decisions.len", MAX_ENTRIES, 9)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let i = d.u64("decision.instance")?;
        v.push((i, get_vid(d)?));
    }
    Ok(v)
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
            Message::Submit(_) => K_SUBMIT,
            Message::Phase1a(_) => K_PHASE1A,
            Message::Phase1b(_) => K_PHASE1B,
            Message::Phase2a(_) => K_PHASE2A,
            Message::Phase2b(_) => K_PHASE2B,
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
            Message::Submit(m) => put_batch(e, &m.batch),
            Message::Phase1a(m) => m.encode(e),
            Message::Phase1b(m) => m.encode(e),
            Message::Phase2a(m) => {
                put_ballot(e, m.ballot);
                e.put_u64(m.epoch_fp);
                put_ring(e, &m.ring);
                put_decisions(e, &m.decisions);
                e.put_u64(m.instance);
                put_decree(e, &m.decree);
            }
            Message::Phase2b(m) => {
                put_ballot(e, m.ballot);
                e.put_u64(m.instance);
                put_vid(e, &m.vid);
            }
            Message::Decision(m) => {
                put_ballot(e, m.ballot);
                put_decisions(e, &m.decisions);
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
            K_SUBMIT => Message::Submit(Submit {
                batch: get_batch(&mut d)?,
            }),
            K_PHASE1A => Message::Phase1a(Phase1a::decode(&mut d)?),
            K_PHASE1B => Message::Phase1b(Phase1b::decode(&mut d)?),
            K_PHASE2A => Message::Phase2a(Phase2a {
                ballot: get_ballot(&mut d)?,
                epoch_fp: d.u64("phase2a.epoch_fp")?,
                ring: get_ring(&mut d)?,
                decisions: get_decisions(&mut d)?,
                instance: d.u64("phase2a.instance")?,
                decree: get_decree(&mut d)?,
            }),
            K_PHASE2B => Message::Phase2b(Phase2b {
                ballot: get_ballot(&mut d)?,
                instance: d.u64("phase2b.instance")?,
                vid: get_vid(&mut d)?,
            }),
            K_DECISION => Message::Decision(Decision {
                ballot: get_ballot(&mut d)?,
                decisions: get_decisions(&mut d)?,
            }),
            K_NACK => Message::Nack(Nack::decode(&mut d)?),
            K_RETRIEVE => Message::Retrieve(Retrieve::decode(&mut d)?),
            K_DECIDED => Message::Decided(Decided::decode(&mut d)?),
            K_HEARTBEAT => Message::Heartbeat(Heartbeat::decode(&mut d)?),
            K_SNAPSHOT_FETCH => Message::SnapshotFetch(SnapshotFetch::decode(&mut d)?),
            K_SNAPSHOT_CHUNK => Message::SnapshotChunk(SnapshotChunk::decode(&mut d)?),
            K_REPAIR => Message::Repair(Repair::decode(&mut d)?),
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

    fn batch() -> Batch {
        let mut b = BatchBuilder::new(NodeId(2), 7, 64);
        b.push(b"hello");
        b.push(b"");
        b.push(&[9u8; 3000]);
        b.finish()
    }

    fn all() -> Vec<Message> {
        let bal = Ballot::new(3, NodeId(1), 2);
        let key = batch().key();
        vec![
            Message::Submit(Submit { batch: batch() }),
            Message::Phase1a(Phase1a {
                ballot: bal,
                from: 1,
                to: Instance::MAX,
                epoch: Epoch::numbered(&[0, 2, 0]),
            }),
            Message::Phase1b(Phase1b {
                ballot: bal,
                from: 1,
                to: Instance::MAX,
                ok: true,
                promised: bal,
                amnesic: false,
                decided_upto: 3,
                max_instance: 9,
                log_start: 1,
                covered_to: 10,
                epoch: Epoch::numbered(&[1, 2]),
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
                ],
            }),
            Message::Phase2a(Phase2a {
                ballot: bal,
                epoch_fp: 99,
                ring: vec![NodeId(2), NodeId(1)],
                decisions: vec![(3, Vid::Noop), (4, Vid::Key(key))],
                instance: 5,
                decree: Decree::Values(batch()),
            }),
            Message::Phase2a(Phase2a {
                ballot: bal,
                epoch_fp: 1,
                ring: vec![NodeId(1)],
                decisions: vec![],
                instance: 6,
                decree: Decree::Noop,
            }),
            Message::Phase2b(Phase2b {
                ballot: bal,
                instance: 5,
                vid: Vid::Key(key),
            }),
            Message::Decision(Decision {
                ballot: bal,
                decisions: vec![
                    (5, Vid::Key(key)),
                    (6, Vid::Noop),
                    (
                        7,
                        Vid::Meta {
                            weight: 3,
                            data: Bytes::from_static(b"ctl"),
                        },
                    ),
                ],
            }),
            Message::Nack(Nack {
                promised: bal,
                instance: 4,
                epoch: Epoch::numbered(&[]),
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
                amnesic: true,
                epoch: Epoch::numbered(&[0, 0, 0]),
                snapshot_upto: 2,
                trim_below: 3,
                snapshot_class: 4,
            }),
            Message::Repair(Repair {
                ballot: bal,
                epoch: Epoch::numbered(&[1, 0, 2]),
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
                data: bytes::Bytes::from(vec![3u8; 4000]),
            }),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in all() {
            let mut e = Encoder::new();
            m.encode(&mut e);
            let back = Message::decode(m.kind(), e.to_bytes()).expect("decodes");
            assert_eq!(back, m);
        }
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
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for kind in 0..=13u8 {
            for len in 0..300usize {
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
    fn the_payload_of_a_phase2a_is_not_copied_into_the_header_chunk() {
        let m = all().swap_remove(3);
        let mut e = Encoder::new();
        m.encode(&mut e);
        let chunks = e.finish();
        assert!(chunks.iter().any(|c| c.len() == 3005), "{chunks:?}");
    }
}
