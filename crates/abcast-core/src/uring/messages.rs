//! U-Ring Paxos messages and their wire codec.
//!
//! Names follow the seeds: `Phase1a`/`Phase1b` (seed 003 Algorithm 2, Tasks 1-3), `Phase2`
//! with a vote count (seed 000 §2.3: "Phase 2 has a message with a vote count and
//! additionally a separate decision message"), `Decision`, and the proposer's value travelling
//! the ring to the coordinator (`Forward`, seed 000 §3.1.1).
//!
//! Departure from the seeds: instead of a vote *count*, phase 2 carries the *set* of voters as
//! a bit mask of ring positions. A count can be incremented twice by one acceptor if views
//! disagree and a message passes it twice; a set cannot (its size is the vote count).

use crate::codec::{Decoder, Encoder, WireMessage};
use crate::error::DecodeError;
pub use crate::snapshot_transfer::{SnapshotChunk, SnapshotFetch};
use crate::types::{Ballot, Batch, BatchKey, Decree, Instance, NodeId};
use crate::wire::{
    BALLOT_BYTES, get_ballot, get_batch, get_bool, get_decree, get_decree_tagged, get_u64s,
    put_ballot, put_batch, put_decree, put_u64s,
};

/// Largest number of entries in one phase 1 reply or one retrieve answer.
pub const MAX_ENTRIES: usize = 1 << 16;
/// Longest epoch vector (one incarnation per ring member).
pub const MAX_EPOCH_LEN: usize = crate::uring::config::MAX_RING_MEMBERS;

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
    /// Ring positions that hold the payload (the proposer and every node that forwarded it).
    pub path: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase1a {
    pub ballot: Ballot,
    pub from: Instance,
    pub to: Instance,
    /// The coordinator's incarnation vector (see `ring.rs`, epochs).
    pub epoch: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct P1Entry {
    pub instance: Instance,
    pub ballot: Ballot,
    pub decree: Decree,
    pub decided: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase1b {
    pub ballot: Ballot,
    pub from: Instance,
    pub to: Instance,
    /// The promise was given. If not, `promised` is the higher ballot that refused it, or the
    /// epochs differ.
    pub ok: bool,
    pub promised: Ballot,
    /// The acceptor lost its state and is not yet repaired: its promise does not count.
    pub amnesic: bool,
    /// Every instance up to here is decided and this acceptor knows its decree.
    pub decided_upto: Instance,
    /// The highest instance this acceptor accepted anything in.
    pub max_instance: Instance,
    /// The acceptor's log starts here: it trimmed every instance below (they are decided
    /// and covered by a quorum of learners' snapshots), so it reports nothing there. Above
    /// it, its report is complete, and a phase 1 whose counted replies all start at or
    /// below an instance may re-propose the highest vote found there even if some learner
    /// already delivered it (see `Prepare::trimmed_below`).
    pub log_start: Instance,
    /// Entries were reported for `[from, covered_to)`; the reply stopped there (size bound).
    pub covered_to: Instance,
    pub epoch: Vec<u64>,
    pub accepted: Vec<P1Entry>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase2 {
    pub ballot: Ballot,
    pub instance: Instance,
    /// Fingerprint of the epoch the ballot's phase 1 ran in; acceptors in another epoch do not vote.
    pub epoch_fp: u64,
    /// Acceptors (ring positions) that voted for this decree in this ballot: the vote count.
    pub votes: u64,
    /// Positions this circulation has visited.
    pub visited: u64,
    /// Positions that hold the payload.
    pub has_payload: u64,
    pub decree: WireDecree,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub instance: Instance,
    pub ballot: Ballot,
    /// Positions that have seen this decision in this circulation.
    pub seen: u64,
    pub has_payload: u64,
    pub decree: WireDecree,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nack {
    /// The acceptor's promised ballot.
    pub promised: Ballot,
    pub instance: Instance,
    pub epoch: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retrieve {
    pub from: Instance,
    pub to: Instance,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decided {
    /// The responder's lowest retained instance: below it nothing can be retrieved from it.
    pub log_start: Instance,
    /// The responder looked at every instance from the retrieve's `from` up to here
    /// (exclusive) and sent each it holds decided; 0 for an answer nobody asked for. A
    /// learner that finds its next instance below this and not among the entries knows
    /// the responder cannot serve it.
    pub scanned_to: Instance,
    /// When the responder could not serve the retrieve's first instance: every batch first
    /// decided in `[dedup_from, dedup_to)` is in `dedup` (with its instance), from the
    /// batch keys its store kept of instances that left it, or from what its learner
    /// delivered. A learner that must skip those instances takes it, so that it skips a
    /// batch decided again after them as every other learner does (bug B3). An empty range
    /// otherwise.
    pub dedup_from: Instance,
    pub dedup_to: Instance,
    pub dedup: Vec<(crate::types::BatchKey, Instance)>,
    pub entries: Vec<(Instance, Decree)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    pub ballot: Ballot,
    /// The sender's incarnation and the heartbeat's number in that life: a receiver
    /// counts a heartbeat as a sign of life only if it is newer than the last one it had
    /// from the sender, so one held long in the network cannot make a node that died since
    /// look alive (found by the simulator's heavy-tailed delays).
    pub incarnation: u64,
    pub seq: u64,
    pub delivered_upto: Instance,
    pub decided_max: Instance,
    pub leading: bool,
    pub amnesic: bool,
    pub epoch: Vec<u64>,
    /// The sender's learner has a snapshot covering every instance up to here (0: none).
    pub snapshot_upto: Instance,
    /// From the leading coordinator: acceptors forget every instance below this (0: none).
    /// URingPaxos' `Safe`/`Trim`, see `snapshot.rs`.
    pub trim_below: Instance,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    pub ballot: Ballot,
    /// The epoch (incarnation vector) of the phase 1 that computed the target: the
    /// acceptor takes the repair only if it names its own current incarnation, so a Repair
    /// meant for an earlier life (queued for it, or late in the network) cannot mark a
    /// later life repaired (bug B1).
    pub epoch: Vec<u64>,
    /// Everything up to here was decided before the amnesic acceptor can have voted.
    pub decided_floor: Instance,
    /// The acceptor is repaired once it knows every decision up to here.
    pub upto: Instance,
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
fn check_range(from: Instance, to: Instance, what: &'static str) -> Result<(), DecodeError> {
    if from > to {
        return Err(DecodeError::Invalid {
            what,
            detail: format!("from {from} > to {to}"),
        });
    }
    Ok(())
}

/// For the snapshot rules shared by U-Ring Paxos and Ring Paxos (`uring::snapshot`).
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
                e.put_u64(m.path);
                put_batch(e, &m.batch);
            }
            Message::Phase1a(m) => {
                put_ballot(e, m.ballot);
                e.put_u64(m.from);
                e.put_u64(m.to);
                put_u64s(e, &m.epoch);
            }
            Message::Phase1b(m) => {
                put_ballot(e, m.ballot);
                e.put_u64(m.from);
                e.put_u64(m.to);
                e.put_u8(m.ok as u8);
                put_ballot(e, m.promised);
                e.put_u8(m.amnesic as u8);
                e.put_u64(m.decided_upto);
                e.put_u64(m.max_instance);
                e.put_u64(m.log_start);
                e.put_u64(m.covered_to);
                put_u64s(e, &m.epoch);
                e.put_u32(m.accepted.len() as u32);
                for a in &m.accepted {
                    e.put_u64(a.instance);
                    put_ballot(e, a.ballot);
                    e.put_u8(a.decided as u8);
                    put_decree(e, &a.decree);
                }
            }
            Message::Phase2(m) => {
                put_ballot(e, m.ballot);
                e.put_u64(m.instance);
                e.put_u64(m.epoch_fp);
                e.put_u64(m.votes);
                e.put_u64(m.visited);
                e.put_u64(m.has_payload);
                put_wire_decree(e, &m.decree);
            }
            Message::Decision(m) => {
                e.put_u64(m.instance);
                put_ballot(e, m.ballot);
                e.put_u64(m.seen);
                e.put_u64(m.has_payload);
                put_wire_decree(e, &m.decree);
            }
            Message::Nack(m) => {
                put_ballot(e, m.promised);
                e.put_u64(m.instance);
                put_u64s(e, &m.epoch);
            }
            Message::Retrieve(m) => {
                e.put_u64(m.from);
                e.put_u64(m.to);
            }
            Message::Decided(m) => {
                e.put_u64(m.log_start);
                e.put_u64(m.scanned_to);
                e.put_u64(m.dedup_from);
                e.put_u64(m.dedup_to);
                crate::wire::put_dedup_entries(e, &m.dedup);
                e.put_u32(m.entries.len() as u32);
                for (i, d) in &m.entries {
                    e.put_u64(*i);
                    put_decree(e, d);
                }
            }
            Message::Heartbeat(m) => {
                put_ballot(e, m.ballot);
                e.put_u64(m.incarnation);
                e.put_u64(m.seq);
                e.put_u64(m.delivered_upto);
                e.put_u64(m.decided_max);
                e.put_u8(m.leading as u8);
                e.put_u8(m.amnesic as u8);
                put_u64s(e, &m.epoch);
                e.put_u64(m.snapshot_upto);
                e.put_u64(m.trim_below);
            }
            Message::Repair(m) => {
                put_ballot(e, m.ballot);
                put_u64s(e, &m.epoch);
                e.put_u64(m.decided_floor);
                e.put_u64(m.upto);
            }
            Message::SnapshotFetch(m) => m.encode(e),
            Message::SnapshotChunk(m) => m.encode(e),
        }
    }

    fn decode(kind: u8, body: bytes::Bytes) -> Result<Message, DecodeError> {
        let mut d = Decoder::new(body);
        let m = match kind {
            K_FORWARD => Message::Forward(Forward {
                path: d.u64("forward.path")?,
                batch: get_batch(&mut d)?,
            }),
            K_PHASE1A => {
                let ballot = get_ballot(&mut d)?;
                let from = d.u64("phase1a.from")?;
                let to = d.u64("phase1a.to")?;
                check_range(from, to, "phase1a range")?;
                Message::Phase1a(Phase1a {
                    ballot,
                    from,
                    to,
                    epoch: get_u64s(&mut d, "epoch", MAX_EPOCH_LEN)?,
                })
            }
            K_PHASE1B => {
                let ballot = get_ballot(&mut d)?;
                let from = d.u64("phase1b.from")?;
                let to = d.u64("phase1b.to")?;
                check_range(from, to, "phase1b range")?;
                let ok = get_bool(&mut d, "phase1b.ok")?;
                let promised = get_ballot(&mut d)?;
                let amnesic = get_bool(&mut d, "phase1b.amnesic")?;
                let decided_upto = d.u64("phase1b.decided_upto")?;
                let max_instance = d.u64("phase1b.max_instance")?;
                let log_start = d.u64("phase1b.log_start")?;
                let covered_to = d.u64("phase1b.covered_to")?;
                let epoch = get_u64s(&mut d, "epoch", MAX_EPOCH_LEN)?;
                // An entry: instance, ballot, decided flag, decree tag at least.
                let n = d.count("phase1b.accepted", MAX_ENTRIES, 8 + BALLOT_BYTES + 2)?;
                let mut accepted = Vec::with_capacity(n);
                for _ in 0..n {
                    let instance = d.u64("phase1b.entry.instance")?;
                    let ballot = get_ballot(&mut d)?;
                    let decided = get_bool(&mut d, "phase1b.entry.decided")?;
                    let decree = get_decree(&mut d)?;
                    accepted.push(P1Entry {
                        instance,
                        ballot,
                        decree,
                        decided,
                    });
                }
                Message::Phase1b(Phase1b {
                    ballot,
                    from,
                    to,
                    ok,
                    promised,
                    amnesic,
                    decided_upto,
                    max_instance,
                    log_start,
                    covered_to,
                    epoch,
                    accepted,
                })
            }
            K_PHASE2 => Message::Phase2(Phase2 {
                ballot: get_ballot(&mut d)?,
                instance: d.u64("phase2.instance")?,
                epoch_fp: d.u64("phase2.epoch_fp")?,
                votes: d.u64("phase2.votes")?,
                visited: d.u64("phase2.visited")?,
                has_payload: d.u64("phase2.has_payload")?,
                decree: get_wire_decree(&mut d)?,
            }),
            K_DECISION => Message::Decision(Decision {
                instance: d.u64("decision.instance")?,
                ballot: get_ballot(&mut d)?,
                seen: d.u64("decision.seen")?,
                has_payload: d.u64("decision.has_payload")?,
                decree: get_wire_decree(&mut d)?,
            }),
            K_NACK => Message::Nack(Nack {
                promised: get_ballot(&mut d)?,
                instance: d.u64("nack.instance")?,
                epoch: get_u64s(&mut d, "epoch", MAX_EPOCH_LEN)?,
            }),
            K_RETRIEVE => {
                let from = d.u64("retrieve.from")?;
                let to = d.u64("retrieve.to")?;
                check_range(from, to, "retrieve range")?;
                Message::Retrieve(Retrieve { from, to })
            }
            K_DECIDED => {
                let log_start = d.u64("decided.log_start")?;
                let scanned_to = d.u64("decided.scanned_to")?;
                let dedup_from = d.u64("decided.dedup_from")?;
                let dedup_to = d.u64("decided.dedup_to")?;
                let dedup =
                    crate::wire::get_dedup_entries(&mut d, crate::uring::learner::SKIP_DEDUP_MAX)?;
                let n = d.count("decided.entries", MAX_ENTRIES, 9)?;
                let mut entries = Vec::with_capacity(n);
                for _ in 0..n {
                    let i = d.u64("decided.instance")?;
                    entries.push((i, get_decree(&mut d)?));
                }
                Message::Decided(Decided {
                    log_start,
                    scanned_to,
                    dedup_from,
                    dedup_to,
                    dedup,
                    entries,
                })
            }
            K_HEARTBEAT => Message::Heartbeat(Heartbeat {
                ballot: get_ballot(&mut d)?,
                incarnation: d.u64("heartbeat.incarnation")?,
                seq: d.u64("heartbeat.seq")?,
                delivered_upto: d.u64("heartbeat.delivered_upto")?,
                decided_max: d.u64("heartbeat.decided_max")?,
                leading: get_bool(&mut d, "heartbeat.leading")?,
                amnesic: get_bool(&mut d, "heartbeat.amnesic")?,
                epoch: get_u64s(&mut d, "epoch", MAX_EPOCH_LEN)?,
                snapshot_upto: d.u64("heartbeat.snapshot_upto")?,
                trim_below: d.u64("heartbeat.trim_below")?,
            }),
            K_REPAIR => Message::Repair(Repair {
                ballot: get_ballot(&mut d)?,
                epoch: get_u64s(&mut d, "repair.epoch", MAX_EPOCH_LEN)?,
                decided_floor: d.u64("repair.decided_floor")?,
                upto: d.u64("repair.upto")?,
            }),
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
                path: 5,
            }),
            Message::Phase1a(Phase1a {
                ballot: bal,
                from: 1,
                to: 5001,
                epoch: vec![0, 2, 0],
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
                epoch: vec![1, 2],
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
                votes: 1,
                visited: 1,
                has_payload: 3,
                decree: WireDecree::Full(batch()),
            }),
            Message::Decision(Decision {
                instance: 4,
                ballot: bal,
                seen: 2,
                has_payload: 7,
                decree: WireDecree::Key(batch().key()),
            }),
            Message::Nack(Nack {
                promised: bal,
                instance: 4,
                epoch: vec![],
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
                epoch: vec![0, 0, 0],
                snapshot_upto: 2,
                trim_below: 3,
            }),
            Message::Repair(Repair {
                ballot: bal,
                epoch: vec![1, 0, 2],
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
            epoch: vec![0; 3],
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
            path: 1,
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
