//! The messages both ring protocols send, each defined once with its codec: phase 1 (seed
//! 003 Algorithm 2, Tasks 1-3), a refusal (`Nack`, §4.2 "re-send ... with a bigger round"),
//! retrieval of missed decisions (seed 000 §3.1.4, seed 003 §4.2 lost messages), heartbeats
//! (failure detection, epochs, snapshot reports and the trim point) and the amnesic
//! acceptor's repair target (§4.2). Each protocol's `Message` enum wraps these next to its
//! own phase 2 messages, with its own kind numbers.

use crate::codec::{Decoder, Encoder};
use crate::error::DecodeError;
use crate::types::NodeId;
use crate::types::{Ballot, BatchKey, Decree, Instance};
use crate::wire::{BALLOT_BYTES, get_ballot, get_bool, get_decree, put_ballot, put_decree};

pub use super::view::Epoch;

/// Largest number of entries in one phase 1 reply, one retrieve answer, one decision list.
pub const MAX_ENTRIES: usize = 1 << 16;
/// Longest epoch vector (one incarnation per member) and longest ring.
pub const MAX_EPOCH_LEN: usize = super::MAX_RING_MEMBERS;

/// An epoch on the wire: a `u32` count, then `(id u32, incarnation u64)` per member, ids
/// strictly ascending.
pub fn put_epoch(e: &mut Encoder, epoch: &Epoch) {
    e.put_u32(epoch.len() as u32);
    for (id, inc) in epoch.entries() {
        e.put_u32(id.0);
        e.put_u64(*inc);
    }
}

pub fn get_epoch(d: &mut Decoder, what: &'static str) -> Result<Epoch, DecodeError> {
    let n = d.count(what, MAX_EPOCH_LEN, 12)?;
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push((NodeId(d.u32(what)?), d.u64(what)?));
    }
    Epoch::from_entries(v).ok_or_else(|| DecodeError::Invalid {
        what,
        detail: "member ids not strictly ascending".into(),
    })
}

pub(crate) fn check_range(
    from: Instance,
    to: Instance,
    what: &'static str,
) -> Result<(), DecodeError> {
    if from > to {
        return Err(DecodeError::Invalid {
            what,
            detail: format!("from {from} > to {to}"),
        });
    }
    Ok(())
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Phase1a {
    pub ballot: Ballot,
    /// Votes are asked for in `[from, to)`; the promise covers every instance. Ring Paxos
    /// asks from `from` on (`to` = `Instance::MAX`) and the acceptor bounds its reply.
    pub from: Instance,
    pub to: Instance,
    /// The coordinator's incarnation vector (see `view.rs`, epochs).
    pub epoch: Epoch,
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
    /// Every instance up to here is decided and this acceptor knows its decree (or trimmed
    /// it).
    pub decided_upto: Instance,
    /// The highest instance this acceptor accepted anything in.
    pub max_instance: Instance,
    /// The acceptor's log starts here: it trimmed every instance below (they are decided
    /// and covered by a quorum of learners' snapshots), so it reports nothing there. Above
    /// it, its report is complete, and a phase 1 whose counted replies all start at or
    /// below an instance may re-propose the highest vote found there even if some learner
    /// already delivered it (see `uring::coordinator::Prepare::trimmed_below`).
    pub log_start: Instance,
    /// Entries were reported for `[from, covered_to)`; the reply stopped there (size bound).
    pub covered_to: Instance,
    pub epoch: Epoch,
    pub accepted: Vec<P1Entry>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nack {
    /// The acceptor's promised ballot.
    pub promised: Ballot,
    pub instance: Instance,
    pub epoch: Epoch,
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
    pub dedup: Vec<(BatchKey, Instance)>,
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
    /// The sender coordinates and its phase 1 is done: proposers whose coordinator changed
    /// re-send their window now (`resend_when_leading`).
    pub leading: bool,
    pub amnesic: bool,
    pub epoch: Epoch,
    /// The sender's learner has a snapshot covering every instance up to here (0: none).
    pub snapshot_upto: Instance,
    /// From the leading coordinator: acceptors forget every instance below this (0: none).
    /// URingPaxos' `Safe`/`Trim`, see `snapshot.rs`.
    pub trim_below: Instance,
    /// Which learners' snapshots can stand for the sender's (`snapshot.rs`,
    /// `quorum_trim_point_by_class`): 0 for a single ring's learner, and for a Multi-Ring
    /// learner that does not follow this ring; otherwise a digest of the rings it follows
    /// (`multiring/snapshot.rs`).
    pub snapshot_class: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repair {
    pub ballot: Ballot,
    /// The epoch (incarnation vector) of the phase 1 that computed the target: the
    /// acceptor takes the repair only if it names its own current incarnation, so a Repair
    /// meant for an earlier life (queued for it, or late in the network) cannot mark a
    /// later life repaired (bug B1).
    pub epoch: Epoch,
    /// Everything up to here was decided before the amnesic acceptor can have voted.
    pub decided_floor: Instance,
    /// The acceptor is repaired once it knows every decision up to here.
    pub upto: Instance,
}

impl Phase1a {
    pub fn encode(&self, e: &mut Encoder) {
        put_ballot(e, self.ballot);
        e.put_u64(self.from);
        e.put_u64(self.to);
        put_epoch(e, &self.epoch);
    }
    pub fn decode(d: &mut Decoder) -> Result<Phase1a, DecodeError> {
        let ballot = get_ballot(d)?;
        let from = d.u64("phase1a.from")?;
        let to = d.u64("phase1a.to")?;
        check_range(from, to, "phase1a range")?;
        Ok(Phase1a {
            ballot,
            from,
            to,
            epoch: get_epoch(d, "epoch")?,
        })
    }
}

impl Phase1b {
    pub fn encode(&self, e: &mut Encoder) {
        put_ballot(e, self.ballot);
        e.put_u64(self.from);
        e.put_u64(self.to);
        e.put_u8(self.ok as u8);
        put_ballot(e, self.promised);
        e.put_u8(self.amnesic as u8);
        e.put_u64(self.decided_upto);
        e.put_u64(self.max_instance);
        e.put_u64(self.log_start);
        e.put_u64(self.covered_to);
        put_epoch(e, &self.epoch);
        e.put_u32(self.accepted.len() as u32);
        for a in &self.accepted {
            e.put_u64(a.instance);
            put_ballot(e, a.ballot);
            e.put_u8(a.decided as u8);
            put_decree(e, &a.decree);
        }
    }
    pub fn decode(d: &mut Decoder) -> Result<Phase1b, DecodeError> {
        let ballot = get_ballot(d)?;
        let from = d.u64("phase1b.from")?;
        let to = d.u64("phase1b.to")?;
        check_range(from, to, "phase1b range")?;
        let ok = get_bool(d, "phase1b.ok")?;
        let promised = get_ballot(d)?;
        let amnesic = get_bool(d, "phase1b.amnesic")?;
        let decided_upto = d.u64("phase1b.decided_upto")?;
        let max_instance = d.u64("phase1b.max_instance")?;
        let log_start = d.u64("phase1b.log_start")?;
        let covered_to = d.u64("phase1b.covered_to")?;
        if covered_to < from {
            return Err(DecodeError::Invalid {
                what: "phase1b.covered_to",
                detail: format!("{covered_to} below from {from}"),
            });
        }
        let epoch = get_epoch(d, "epoch")?;
        // An entry: instance, ballot, decided flag, decree tag at least.
        let n = d.count("phase1b.accepted", MAX_ENTRIES, 8 + BALLOT_BYTES + 2)?;
        let mut accepted = Vec::with_capacity(n);
        for _ in 0..n {
            let instance = d.u64("phase1b.entry.instance")?;
            let ballot = get_ballot(d)?;
            let decided = get_bool(d, "phase1b.entry.decided")?;
            let decree = get_decree(d)?;
            accepted.push(P1Entry {
                instance,
                ballot,
                decree,
                decided,
            });
        }
        Ok(Phase1b {
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
}

impl Nack {
    pub fn encode(&self, e: &mut Encoder) {
        put_ballot(e, self.promised);
        e.put_u64(self.instance);
        put_epoch(e, &self.epoch);
    }
    pub fn decode(d: &mut Decoder) -> Result<Nack, DecodeError> {
        Ok(Nack {
            promised: get_ballot(d)?,
            instance: d.u64("nack.instance")?,
            epoch: get_epoch(d, "epoch")?,
        })
    }
}

impl Retrieve {
    pub fn encode(&self, e: &mut Encoder) {
        e.put_u64(self.from);
        e.put_u64(self.to);
    }
    pub fn decode(d: &mut Decoder) -> Result<Retrieve, DecodeError> {
        let from = d.u64("retrieve.from")?;
        let to = d.u64("retrieve.to")?;
        check_range(from, to, "retrieve range")?;
        Ok(Retrieve { from, to })
    }
}

impl Decided {
    pub fn encode(&self, e: &mut Encoder) {
        e.put_u64(self.log_start);
        e.put_u64(self.scanned_to);
        e.put_u64(self.dedup_from);
        e.put_u64(self.dedup_to);
        crate::wire::put_dedup_entries(e, &self.dedup);
        e.put_u32(self.entries.len() as u32);
        for (i, d) in &self.entries {
            e.put_u64(*i);
            put_decree(e, d);
        }
    }
    pub fn decode(d: &mut Decoder) -> Result<Decided, DecodeError> {
        let log_start = d.u64("decided.log_start")?;
        let scanned_to = d.u64("decided.scanned_to")?;
        let dedup_from = d.u64("decided.dedup_from")?;
        let dedup_to = d.u64("decided.dedup_to")?;
        let dedup = crate::wire::get_dedup_entries(d, super::learner::SKIP_DEDUP_MAX)?;
        let n = d.count("decided.entries", MAX_ENTRIES, 9)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let i = d.u64("decided.instance")?;
            entries.push((i, get_decree(d)?));
        }
        Ok(Decided {
            log_start,
            scanned_to,
            dedup_from,
            dedup_to,
            dedup,
            entries,
        })
    }
}

impl Heartbeat {
    pub fn encode(&self, e: &mut Encoder) {
        put_ballot(e, self.ballot);
        e.put_u64(self.incarnation);
        e.put_u64(self.seq);
        e.put_u64(self.delivered_upto);
        e.put_u64(self.decided_max);
        e.put_u8(self.leading as u8);
        e.put_u8(self.amnesic as u8);
        put_epoch(e, &self.epoch);
        e.put_u64(self.snapshot_upto);
        e.put_u64(self.trim_below);
        e.put_u64(self.snapshot_class);
    }
    pub fn decode(d: &mut Decoder) -> Result<Heartbeat, DecodeError> {
        Ok(Heartbeat {
            ballot: get_ballot(d)?,
            incarnation: d.u64("heartbeat.incarnation")?,
            seq: d.u64("heartbeat.seq")?,
            delivered_upto: d.u64("heartbeat.delivered_upto")?,
            decided_max: d.u64("heartbeat.decided_max")?,
            leading: get_bool(d, "heartbeat.leading")?,
            amnesic: get_bool(d, "heartbeat.amnesic")?,
            epoch: get_epoch(d, "epoch")?,
            snapshot_upto: d.u64("heartbeat.snapshot_upto")?,
            trim_below: d.u64("heartbeat.trim_below")?,
            snapshot_class: d.u64("heartbeat.snapshot_class")?,
        })
    }
}

impl Repair {
    pub fn encode(&self, e: &mut Encoder) {
        put_ballot(e, self.ballot);
        put_epoch(e, &self.epoch);
        e.put_u64(self.decided_floor);
        e.put_u64(self.upto);
    }
    pub fn decode(d: &mut Decoder) -> Result<Repair, DecodeError> {
        Ok(Repair {
            ballot: get_ballot(d)?,
            epoch: get_epoch(d, "repair.epoch")?,
            decided_floor: d.u64("repair.decided_floor")?,
            upto: d.u64("repair.upto")?,
        })
    }
}
