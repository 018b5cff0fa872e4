//! Vocabulary shared by every protocol: node ids, ballots, instances, values and batches.

use bytes::{Bytes, BytesMut};
use std::fmt;

/// Time in microseconds on a monotonic clock chosen by the driver (the simulator's virtual
/// clock or the runtime's `Instant` since start). Protocols never read a clock themselves.
pub type Micros = u64;

/// A consensus instance number (seed 000 §3.1.2: "instance"). Instances start at 1; 0 means
/// "none".
pub type Instance = u64;

/// A node of the cluster, as named in the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeId(pub u32);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "n{}", self.0)
    }
}

/// One protocol instance on a node (a ring, in Multi-Ring Paxos a group). The runtime
/// multiplexes many groups over one connection; the protocol state machine never sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GroupId(pub u16);

/// A ballot (Paxos round, seed 003 "c-rnd"): `(round, node, incarnation)`, ordered by
/// `round`, then `node`, then `incarnation` (the derived order, fields in that order).
///
/// **Unique per process life.** Paxos needs every ballot to belong to one coordinator, which
/// proposes at most one decree per instance in it (seed 003 Algorithm 1 Task 1: "increase
/// c-rnd to an arbitrary unique value"; seed 000 §3.1.2: ballots are "a counter and the last
/// digit of the coordinator ID", which "guarantees that ballot numbers are always unique in
/// the whole system"). The node id alone does not give that to a node that restarts: its
/// counter (the highest round seen) is in memory and starts again at 0, so the new process can
/// pick a `(round, node)` its previous life used, possibly with another decree in the same
/// instance — two decrees voted under "the same" ballot, and a later phase 1 may then pick
/// the one that was not chosen. Seed 003 §4.2 asks that a process "must not forget its
/// state"; we do not keep `c-rnd` on stable storage, we make the forgotten one unreachable:
/// the driver gives every start of a node a new incarnation (`StartInfo::incarnation`, kept
/// on disk by the runtime's incarnation marker), and a coordinator stamps its own
/// incarnation into every ballot it makes. So:
///
/// * a ballot `(r, n, i)` is made only by node `n` in its life `i`, and there by
///   `start_phase1` alone, which always takes a round above the current ballot's: one
///   process life, one phase 1 per ballot;
/// * under one ballot that life proposes one decree per instance: an instance stays open
///   with its decree until it is decided, `start_phase1` hands open decrees back to the
///   queue for the next ballot, and a later phase 1 under the same ballot (an extension or
///   a backfill) re-proposes what a quorum reports, where a vote of this very ballot is the
///   highest any promising acceptor can hold;
///
/// hence at most one decree per instance per ballot, which is all the Paxos proof (seed
/// 003, Appendix) asks of ballots. Ballots of different lives of a node are different
/// values, so an acceptor's `>=` promise test and phase 1's "highest ballot" choice compare
/// them like any two ballots of different coordinators. The incarnation is the least
/// significant field: it only separates lives of the same node at the same round, and a
/// restarted node still climbs rounds from refusals and heartbeats as before. Ballots of a
/// first life (incarnation 0) compare exactly as `(round, node)` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ballot {
    pub round: u32,
    pub node: NodeId,
    /// The life of `node` that made this ballot (`StartInfo::incarnation`, 0 on the first
    /// start).
    pub incarnation: u32,
}

impl Ballot {
    /// The ballot nobody has promised or voted in.
    pub const ZERO: Ballot = Ballot {
        round: 0,
        node: NodeId(0),
        incarnation: 0,
    };

    pub fn new(round: u32, node: NodeId, incarnation: u32) -> Ballot {
        Ballot {
            round,
            node,
            incarnation,
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == Ballot::ZERO
    }
}

/// `round.node`, and `/incarnation` for a ballot of a restarted node: `3.1`, `3.1/2`.
impl fmt::Display for Ballot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.round, self.node.0)?;
        if self.incarnation != 0 {
            write!(f, "/{}", self.incarnation)?;
        }
        Ok(())
    }
}

/// The unique id of one proposed value: the proposer and its sequence number. Sequence
/// numbers grow across restarts (the driver gives a proposer a start sequence above any it
/// used before), so an id is never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ValueId {
    pub node: NodeId,
    pub seq: u64,
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.seq)
    }
}

/// A value: its id and its payload. The payload is a shared, reference-counted buffer:
/// cloning a value never copies its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    pub id: ValueId,
    pub payload: Bytes,
}

/// The id of a batch: the proposer and the sequence number of its first value. Consensus
/// runs on batch keys where the receiver already holds the payload (seed 003 §4.1,
/// "consensus on value ids"; seed 000 §3.1.3, "every byte array ... only transmitted once").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchKey {
    pub origin: NodeId,
    pub first_seq: u64,
}

impl fmt::Display for BatchKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.origin, self.first_seq)
    }
}

/// A batch of values from one proposer with consecutive sequence numbers
/// `first_seq .. first_seq + count`. The payloads sit back to back in `data`; `lens` holds
/// one little-endian `u32` length per value. Both are shared buffers, so a decoded batch
/// is a view into the frame it arrived in (no copy), and a clone costs two reference counts.
#[derive(Clone, PartialEq, Eq)]
pub struct Batch {
    origin: NodeId,
    first_seq: u64,
    count: u32,
    lens: Bytes,
    data: Bytes,
}

impl fmt::Debug for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Batch({} x{} {}B)",
            self.key(),
            self.count,
            self.data.len()
        )
    }
}

impl Batch {
    /// Builds a batch from its parts, checking that the lengths add up to the data.
    pub fn from_parts(
        origin: NodeId,
        first_seq: u64,
        lens: Bytes,
        data: Bytes,
    ) -> Result<Batch, crate::DecodeError> {
        if !lens.len().is_multiple_of(4) {
            return Err(crate::DecodeError::Invalid {
                what: "batch lengths",
                detail: format!("{} bytes is not a multiple of 4", lens.len()),
            });
        }
        let count = lens.len() / 4;
        if count == 0 || count > u32::MAX as usize {
            return Err(crate::DecodeError::Invalid {
                what: "batch count",
                detail: format!("{count}"),
            });
        }
        let mut total: u64 = 0;
        for chunk in lens.chunks_exact(4) {
            total += u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]) as u64;
        }
        if total != data.len() as u64 {
            return Err(crate::DecodeError::Invalid {
                what: "batch data",
                detail: format!("lengths add up to {total} bytes, data holds {}", data.len()),
            });
        }
        if first_seq.checked_add(count as u64).is_none() {
            return Err(crate::DecodeError::Invalid {
                what: "batch first_seq",
                detail: "overflow".into(),
            });
        }
        Ok(Batch {
            origin,
            first_seq,
            count: count as u32,
            lens,
            data,
        })
    }

    /// A batch of one value that shares the caller's buffer (no copy). Used for values large
    /// enough to fill a batch on their own.
    pub fn single(id: ValueId, payload: Bytes) -> Batch {
        let mut lens = BytesMut::with_capacity(4);
        lens.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        Batch {
            origin: id.node,
            first_seq: id.seq,
            count: 1,
            lens: lens.freeze(),
            data: payload,
        }
    }

    pub fn key(&self) -> BatchKey {
        BatchKey {
            origin: self.origin,
            first_seq: self.first_seq,
        }
    }
    pub fn origin(&self) -> NodeId {
        self.origin
    }
    pub fn first_seq(&self) -> u64 {
        self.first_seq
    }
    pub fn len(&self) -> usize {
        self.count as usize
    }
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Payload bytes (without lengths).
    pub fn payload_bytes(&self) -> usize {
        self.data.len()
    }
    pub fn lens_raw(&self) -> &Bytes {
        &self.lens
    }
    pub fn data_raw(&self) -> &Bytes {
        &self.data
    }
    /// Size on the wire of lengths and data.
    pub fn wire_bytes(&self) -> usize {
        self.lens.len() + self.data.len()
    }
    /// The ids of the values, in order.
    pub fn ids(&self) -> impl Iterator<Item = ValueId> + '_ {
        let origin = self.origin;
        (0..self.count as u64).map(move |i| ValueId {
            node: origin,
            seq: self.first_seq + i,
        })
    }
    /// The values, in order. Each payload is a slice of the shared buffer.
    pub fn values(&self) -> BatchIter<'_> {
        BatchIter {
            batch: self,
            index: 0,
            offset: 0,
        }
    }
}

/// Iterator over the values of a [`Batch`].
pub struct BatchIter<'a> {
    batch: &'a Batch,
    index: u32,
    offset: usize,
}

impl Iterator for BatchIter<'_> {
    type Item = Value;
    fn next(&mut self) -> Option<Value> {
        if self.index >= self.batch.count {
            return None;
        }
        let at = self.index as usize * 4;
        let l = &self.batch.lens[at..at + 4];
        let len = u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize;
        let payload = self.batch.data.slice(self.offset..self.offset + len);
        let id = ValueId {
            node: self.batch.origin,
            seq: self.batch.first_seq + self.index as u64,
        };
        self.index += 1;
        self.offset += len;
        Some(Value { id, payload })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.batch.count - self.index) as usize;
        (left, Some(left))
    }
}

/// Values offered to [`crate::Protocol::propose_many`] in one call.
#[derive(Clone, Copy, Debug)]
pub enum Values<'a> {
    /// Each value its own payload (a client frame's values).
    Each(&'a [Bytes]),
    /// Values of one size, back to back (a load generator's payloads).
    Uniform(&'a UniformRun),
}

impl Values<'_> {
    /// How many values.
    pub fn len(&self) -> usize {
        match self {
            Values::Each(v) => v.len(),
            Values::Uniform(r) => r.count,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Value `i`'s payload (a slice of the shared buffer: no copy).
    pub fn get(&self, i: usize) -> Option<Bytes> {
        match self {
            Values::Each(v) => v.get(i).cloned(),
            Values::Uniform(r) => r.get(i),
        }
    }
}

/// `count` values of `value_bytes` bytes each, back to back in one buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UniformRun {
    data: Bytes,
    value_bytes: usize,
    count: usize,
}

impl UniformRun {
    /// `None` unless `data` holds exactly `count` values of `value_bytes` bytes.
    pub fn new(data: Bytes, value_bytes: usize, count: usize) -> Option<UniformRun> {
        (value_bytes.checked_mul(count) == Some(data.len())).then_some(UniformRun {
            data,
            value_bytes,
            count,
        })
    }
    /// The whole values in `data`, `value_bytes` each (`value_bytes > 0`; a partial value
    /// at the end is left out).
    pub fn of(data: Bytes, value_bytes: usize) -> UniformRun {
        let count = data.len().checked_div(value_bytes).unwrap_or(0);
        UniformRun {
            data: data.slice(..count * value_bytes),
            value_bytes,
            count,
        }
    }
    /// `count` empty values.
    pub fn empty_values(count: usize) -> UniformRun {
        UniformRun {
            data: Bytes::new(),
            value_bytes: 0,
            count,
        }
    }
    pub fn data(&self) -> &Bytes {
        &self.data
    }
    pub fn value_bytes(&self) -> usize {
        self.value_bytes
    }
    pub fn count(&self) -> usize {
        self.count
    }
    /// Value `i`'s payload.
    pub fn get(&self, i: usize) -> Option<Bytes> {
        (i < self.count).then(|| {
            let start = i * self.value_bytes;
            self.data.slice(start..start + self.value_bytes)
        })
    }
}

/// Builds a batch by appending values: one copy of each payload into the batch buffer.
#[derive(Debug)]
pub struct BatchBuilder {
    origin: NodeId,
    first_seq: u64,
    lens: BytesMut,
    data: BytesMut,
}

impl BatchBuilder {
    pub fn new(origin: NodeId, first_seq: u64, capacity_bytes: usize) -> BatchBuilder {
        BatchBuilder {
            origin,
            first_seq,
            lens: BytesMut::with_capacity(256),
            data: BytesMut::with_capacity(capacity_bytes),
        }
    }
    pub fn push(&mut self, payload: &[u8]) -> ValueId {
        let id = ValueId {
            node: self.origin,
            seq: self.first_seq + self.len() as u64,
        };
        self.lens
            .extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.data.extend_from_slice(payload);
        id
    }
    /// Appends `count` values of `value_bytes` bytes each, back to back in `data`: one
    /// copy of the run, the lengths written in one pass.
    pub fn push_uniform(&mut self, data: &[u8], value_bytes: usize, count: usize) {
        debug_assert_eq!(data.len(), value_bytes * count, "a run of equal values");
        let len = (value_bytes as u32).to_le_bytes();
        self.lens.reserve(4 * count);
        for _ in 0..count {
            self.lens.extend_from_slice(&len);
        }
        self.data.extend_from_slice(data);
    }
    pub fn len(&self) -> usize {
        self.lens.len() / 4
    }
    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }
    pub fn payload_bytes(&self) -> usize {
        self.data.len()
    }
    pub fn first_seq(&self) -> u64 {
        self.first_seq
    }
    /// Finishes the batch. Precondition: at least one value was pushed.
    pub fn finish(self) -> Batch {
        debug_assert!(!self.is_empty(), "finish on an empty batch");
        let count = (self.lens.len() / 4) as u32;
        Batch {
            origin: self.origin,
            first_seq: self.first_seq,
            count,
            lens: self.lens.freeze(),
            data: self.data.freeze(),
        }
    }
}

/// What one consensus instance decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decree {
    /// A batch of application values.
    Values(Batch),
    /// Nothing: decided for an instance left open by a failed coordinator (seed 000 §3.1.4,
    /// "a learner proposes a null value for an outstanding instance").
    Noop,
    /// A decree for the layer that composes rings (Multi-Ring Paxos, `multiring/`), opaque
    /// to the ring: it stands for `weight` positions of that layer's merge and carries
    /// `data` (at most [`META_MAX_BYTES`]). The ring decides it like any decree and reports
    /// it, with its weight and data, as a pass (`ring::Pass`); `multiring/` gives it its
    /// meaning (a skip of k slots, a subscribe or unsubscribe).
    Meta { weight: u32, data: Bytes },
}

/// Upper bound of a [`Decree::Meta`]'s data.
pub const META_MAX_BYTES: usize = 256;

impl Decree {
    /// The id consensus runs on: the batch key, or `None` for a no-op.
    pub fn key(&self) -> Option<BatchKey> {
        match self {
            Decree::Values(b) => Some(b.key()),
            Decree::Noop | Decree::Meta { .. } => None,
        }
    }
    /// Whether two decrees are the same decision: batches by their key (a key names one
    /// payload), everything else whole. Comparing `key()` alone would take a no-op, a skip
    /// and a control for one another: all have no key.
    pub fn same_as(&self, other: &Decree) -> bool {
        match (self, other) {
            (Decree::Values(a), Decree::Values(b)) => a.key() == b.key(),
            (a, b) => a == b,
        }
    }
    pub fn wire_bytes(&self) -> usize {
        match self {
            Decree::Values(b) => b.wire_bytes(),
            Decree::Noop => 0,
            Decree::Meta { data, .. } => data.len(),
        }
    }
}

#[cfg(test)]
mod decree_tests {
    use super::*;

    /// Regression: acceptors compared decrees by `key()`, which is `None` for every decree
    /// without a batch, so an acceptor that had voted a no-op took a decided skip for it and
    /// served the no-op (found by the Multi-Ring merge-order checker, partition seed 43).
    #[test]
    fn decrees_without_a_batch_are_compared_whole() {
        assert!(Decree::Noop.same_as(&Decree::Noop));
        let meta = |weight, data: &'static [u8]| Decree::Meta {
            weight,
            data: Bytes::from_static(data),
        };
        assert!(!Decree::Noop.same_as(&meta(51, b"")));
        assert!(!meta(1, b"").same_as(&meta(2, b"")));
        assert!(!meta(1, b"").same_as(&meta(1, b"c")));
        let id = ValueId {
            node: NodeId(1),
            seq: 7,
        };
        let a = Decree::Values(Batch::single(id, Bytes::from_static(b"x")));
        let b = Decree::Values(Batch::single(id, Bytes::from_static(b"x")));
        assert!(a.same_as(&b));
        assert!(!a.same_as(&Decree::Noop));
    }
}

#[cfg(test)]
mod ballot_tests {
    use super::*;

    #[test]
    fn ballots_order_by_round_then_node_then_incarnation() {
        let b = |r, n, i| Ballot::new(r, NodeId(n), i);
        let mut v = vec![b(2, 0, 0), b(1, 1, 0), b(1, 0, 5), b(1, 0, 0), b(1, 1, 1)];
        v.sort();
        assert_eq!(
            v,
            vec![b(1, 0, 0), b(1, 0, 5), b(1, 1, 0), b(1, 1, 1), b(2, 0, 0)]
        );
        // A later life of a node at the same round is a different, higher ballot.
        assert!(b(3, 1, 1) > b(3, 1, 0));
        assert!(Ballot::ZERO < b(0, 0, 1));
    }

    #[test]
    fn a_ballot_shows_its_incarnation_only_when_restarted() {
        assert_eq!(Ballot::new(3, NodeId(1), 0).to_string(), "3.1");
        assert_eq!(Ballot::new(3, NodeId(1), 2).to_string(), "3.1/2");
    }
}
