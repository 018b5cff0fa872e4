//! The learners' de-duplication memory, shared by every family: a proposer may re-send a
//! batch that was already decided (its decision or its ack was lost, the leader changed), so
//! one batch can be decided at two places of the sequence. Learners deliver it at the first
//! and pass over the second; the choice is a function of the decided sequence alone, so
//! every learner makes the same one (seed 000 §3.1.4 for the rings; seed 001's leader-based
//! logs meet the same re-sends when a proposal is forwarded to a new leader).

use crate::codec::{Decoder, Encoder};
use crate::error::DecodeError;
use crate::mutation::Mutation;
use crate::types::{Batch, BatchKey, Instance, NodeId};
use std::collections::{BTreeMap, HashMap};

/// Batches whose instance is remembered per origin ([`Dedup::decided_at`]: a coordinator
/// answers a re-sent batch with the instance it was decided in; a snapshot install
/// acknowledges the proposer's batches it covers). Whether a batch was delivered does not
/// depend on it: see [`DEDUP_RANGES_PER_ORIGIN`].
pub const DEDUP_BATCHES_PER_ORIGIN: usize = 1 << 16;

/// Ranges of delivered sequence numbers remembered per origin. A proposer numbers its
/// values consecutively, so what a learner delivered from one origin is a few ranges with
/// holes only where a batch is still undecided (or was lost with its proposer's life): the
/// memory is exact for any number of batches in flight, as long as fewer holes than this
/// are open at once. Past that the oldest hole is filled: a batch decided in it is then
/// passed over by every learner alike (a function of the decided sequence, as always).
///
/// Why ranges: the memory used to be the last [`DEDUP_BATCHES_PER_ORIGIN`] batch keys.
/// With one value per batch and 100 000 values in flight (`bench concurrency
/// --batch-bytes 16`), a re-sent batch was decided more than 65 536 batches after its
/// first copy, had been forgotten, and was delivered twice (884 745 values in one run).
pub const DEDUP_RANGES_PER_ORIGIN: usize = 1 << 16;

/// The encoding's first word (an origin count is at most 2^16, so an older encoding, which
/// began with that count, is told apart).
const DEDUP_ENCODING_V2: u32 = 0xDED0_0002;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Origin {
    /// first_seq -> the instance it was first delivered in, for the batches with the
    /// highest first seqs (a proposer numbers upwards, so these are its latest: inserts at
    /// the right end, evictions at the left, where a hash map with FIFO eviction cost a
    /// sixth of a leader's time at one value per batch).
    recent: BTreeMap<u64, Instance>,
    /// start -> end (exclusive) of the sequence numbers delivered: disjoint, not adjacent.
    delivered: BTreeMap<u64, u64>,
}

impl Origin {
    fn contains(&self, seq: u64) -> bool {
        self.delivered
            .range(..=seq)
            .next_back()
            .is_some_and(|(_, &end)| seq < end)
    }

    /// Adds `[first, end)`, merged with its neighbours; fills the oldest hole past the bound.
    fn insert_range(&mut self, first: u64, end: u64) {
        let (mut start, mut end) = (first, end.max(first.saturating_add(1)));
        if let Some((&ps, &pe)) = self.delivered.range(..=start).next_back()
            && pe >= start
        {
            start = ps;
            end = end.max(pe);
            self.delivered.remove(&ps);
        }
        while let Some((&ns, &ne)) = self.delivered.range(start..).next() {
            if ns > end {
                break;
            }
            end = end.max(ne);
            self.delivered.remove(&ns);
        }
        self.delivered.insert(start, end);
        while self.delivered.len() > DEDUP_RANGES_PER_ORIGIN {
            let Some((s0, _)) = self.delivered.pop_first() else {
                break;
            };
            let Some((_, e1)) = self.delivered.pop_first() else {
                break;
            };
            self.delivered.insert(s0, e1);
        }
        debug_assert!(
            self.contains(first),
            "a range just added holds its first seq"
        );
    }

    fn remember(&mut self, first_seq: u64, instance: Instance) {
        self.recent.insert(first_seq, instance);
        if self.recent.len() > DEDUP_BATCHES_PER_ORIGIN {
            self.recent.pop_first();
        }
    }
}

/// Batches per origin that [`Mutation::DedupForgetsOldBatches`] remembers: the memory
/// before the ranges, a window of batch keys, scaled down from 2^16 so that the
/// simulator's runs reach past it.
const MUTATED_BATCHES_PER_ORIGIN: usize = 4;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dedup {
    per_origin: HashMap<NodeId, Origin>,
    /// The broken variant, if any (the simulator's mutation sweeps; never encoded, and kept
    /// across a snapshot install by [`Dedup::replace`]).
    mutation: Option<Mutation>,
}

impl Dedup {
    /// True the first time `batch` is seen (decided in `instance`): its values are then
    /// delivered. A re-sent copy of a delivered batch (same origin and first seq) is false.
    pub fn first_time_batch(&mut self, batch: &Batch, instance: Instance) -> bool {
        let key = batch.key();
        let end = key.first_seq.saturating_add(batch.len() as u64);
        self.first_time_range(key, end, instance)
    }

    /// As [`Dedup::first_time_batch`] for a batch known by its key alone (its values
    /// counted as one).
    pub fn first_time(&mut self, key: BatchKey, instance: Instance) -> bool {
        self.first_time_range(key, key.first_seq.saturating_add(1), instance)
    }

    /// Runs the broken variant `m` from now on (tests only; `None` in a build without the
    /// `mutations` feature is the only value that does anything there).
    pub fn set_mutation(&mut self, m: Option<Mutation>) {
        self.mutation = m;
    }

    /// This memory running the broken variant `m` (see [`Dedup::set_mutation`]).
    pub fn with_mutation(mut self, m: Option<Mutation>) -> Dedup {
        self.set_mutation(m);
        self
    }

    /// Takes `other`'s memory (a snapshot's), keeping this one's broken variant.
    pub fn replace(&mut self, other: Dedup) {
        let m = self.mutation;
        *self = other;
        self.mutation = m;
    }

    fn forgets(&self) -> bool {
        crate::mutation::on(self.mutation, Mutation::DedupForgetsOldBatches)
    }

    fn first_time_range(&mut self, key: BatchKey, end: u64, instance: Instance) -> bool {
        let forgets = self.forgets();
        let o = self.per_origin.entry(key.origin).or_default();
        if forgets {
            // The broken variant: only the latest few batch keys, no ranges.
            if o.recent.contains_key(&key.first_seq) {
                return false;
            }
            o.recent.insert(key.first_seq, instance);
            while o.recent.len() > MUTATED_BATCHES_PER_ORIGIN {
                o.recent.pop_first();
            }
            return true;
        }
        if o.contains(key.first_seq) {
            return false;
        }
        o.insert_range(key.first_seq, end);
        o.remember(key.first_seq, instance);
        true
    }

    /// Whether a batch with this key was delivered (it may have been decided before the
    /// instances [`Dedup::decided_at`] remembers).
    pub fn delivered(&self, key: BatchKey) -> bool {
        let forgets = self.forgets();
        self.per_origin.get(&key.origin).is_some_and(|o| {
            if forgets {
                o.recent.contains_key(&key.first_seq)
            } else {
                o.contains(key.first_seq)
            }
        })
    }

    /// The remembered batches first decided in `[from, to)`, in instance order, the most
    /// recent `max` of them.
    pub fn entries_between(
        &self,
        from: Instance,
        to: Instance,
        max: usize,
    ) -> Vec<(BatchKey, Instance)> {
        let mut v: Vec<(BatchKey, Instance)> = self
            .per_origin
            .iter()
            .flat_map(|(&origin, o)| {
                o.recent
                    .iter()
                    .filter(move |(_, i)| (from..to).contains(*i))
                    .map(move |(&first_seq, &i)| (BatchKey { origin, first_seq }, i))
            })
            .collect();
        v.sort_unstable_by_key(|&(k, i)| (i, k.origin.0, k.first_seq));
        let excess = v.len().saturating_sub(max);
        v.drain(..excess);
        v
    }

    /// Adds batches first decided in instances this learner skipped (in instance order).
    pub fn merge(&mut self, entries: &[(BatchKey, Instance)]) {
        for &(k, i) in entries {
            self.first_time(k, i);
        }
    }

    /// The instance a batch was first decided in, if it is remembered.
    pub fn decided_at(&self, key: BatchKey) -> Option<Instance> {
        self.per_origin
            .get(&key.origin)
            .and_then(|o| o.recent.get(&key.first_seq).copied())
    }

    /// The memory as bytes, for a snapshot: a learner that installs it skips the same
    /// duplicates as the learner that took it (origins in id order; per origin the
    /// delivered ranges in order, then the remembered batches in seq order).
    pub fn encode(&self, e: &mut Encoder) {
        let mut origins: Vec<_> = self.per_origin.iter().collect();
        origins.sort_by_key(|(o, _)| o.0);
        e.put_u32(DEDUP_ENCODING_V2);
        e.put_u32(origins.len() as u32);
        for (origin, o) in origins {
            e.put_u32(origin.0);
            e.put_u32(o.delivered.len() as u32);
            for (&start, &end) in &o.delivered {
                e.put_u64(start);
                e.put_u64(end);
            }
            e.put_u32(o.recent.len() as u32);
            for (&seq, &instance) in &o.recent {
                e.put_u64(seq);
                e.put_u64(instance);
            }
        }
    }

    /// Reads [`Dedup::encode`]'s bytes, or the older encoding (remembered batches only,
    /// each taken as a range of one).
    pub fn decode(d: &mut Decoder) -> Result<Dedup, DecodeError> {
        let mut dedup = Dedup::default();
        let first = d.u32("dedup.origins")?;
        let v2 = first == DEDUP_ENCODING_V2;
        let origins = if v2 {
            d.count("dedup.origins", 1 << 16, 8)?
        } else if first as usize > 1 << 16 {
            return Err(DecodeError::Invalid {
                what: "dedup.origins",
                detail: format!("{first} exceeds the limit {}", 1 << 16),
            });
        } else {
            first as usize
        };
        for _ in 0..origins {
            let origin = NodeId(d.u32("dedup.origin")?);
            if dedup.per_origin.contains_key(&origin) {
                return Err(DecodeError::Invalid {
                    what: "dedup.origin",
                    detail: format!("origin {origin} appears twice"),
                });
            }
            let o = dedup.per_origin.entry(origin).or_default();
            if v2 {
                let n = d.count("dedup.ranges", DEDUP_RANGES_PER_ORIGIN, 16)?;
                let mut last_end: Option<u64> = None;
                for _ in 0..n {
                    let start = d.u64("dedup.range_start")?;
                    let end = d.u64("dedup.range_end")?;
                    if end <= start || last_end.is_some_and(|l| start <= l) {
                        return Err(DecodeError::Invalid {
                            what: "dedup.range",
                            detail: format!(
                                "[{start}, {end}) is empty or not after the range before"
                            ),
                        });
                    }
                    o.delivered.insert(start, end);
                    last_end = Some(end);
                }
            }
            let n = d.count("dedup.batches", DEDUP_BATCHES_PER_ORIGIN, 16)?;
            for _ in 0..n {
                let seq = d.u64("dedup.first_seq")?;
                let instance = d.u64("dedup.instance")?;
                if !v2 && !o.contains(seq) {
                    o.insert_range(seq, seq.saturating_add(1));
                }
                o.remember(seq, instance);
            }
        }
        Ok(dedup)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ValueId;
    use bytes::Bytes;

    fn batch(origin: u32, first_seq: u64) -> Batch {
        Batch::single(
            ValueId {
                node: NodeId(origin),
                seq: first_seq,
            },
            Bytes::from_static(b"0123456789abcdef"),
        )
    }

    #[test]
    fn a_resent_batch_is_passed_over_however_many_batches_came_between() {
        // The old memory (the last 65 536 batch keys) delivered this copy a second time.
        let mut d = Dedup::default();
        let n = 3 * DEDUP_BATCHES_PER_ORIGIN as u64;
        for seq in 0..n {
            assert!(d.first_time_batch(&batch(1, seq), seq));
        }
        assert!(!d.first_time_batch(&batch(1, 0), n));
        assert!(!d.first_time_batch(&batch(1, n / 2), n + 1));
        assert!(d.first_time_batch(&batch(1, n), n + 2));
        assert!(d.first_time_batch(&batch(2, 0), n + 3), "origins are apart");
        assert_eq!(d.per_origin[&NodeId(1)].delivered.len(), 1, "one range");
        assert_eq!(
            d.decided_at(batch(1, 0).key()),
            None,
            "instances: recent only"
        );
        assert!(d.delivered(batch(1, 0).key()));
    }

    #[test]
    fn holes_stay_open_until_their_batch_comes_and_the_oldest_is_filled_past_the_bound() {
        let mut d = Dedup::default();
        // Every other seq: one range per delivered batch, a hole between each.
        for i in 0..=DEDUP_RANGES_PER_ORIGIN as u64 {
            assert!(d.first_time_batch(&batch(1, 2 * i), i));
        }
        let o = &d.per_origin[&NodeId(1)];
        assert_eq!(o.delivered.len(), DEDUP_RANGES_PER_ORIGIN, "bounded");
        // The oldest hole (seq 1) was filled; the newest are open.
        assert!(!d.first_time_batch(&batch(1, 1), 0));
        assert!(d.first_time_batch(&batch(1, 5), 1));
        assert!(d.first_time_batch(&batch(1, 2 * DEDUP_RANGES_PER_ORIGIN as u64 - 1), 2));
        assert!(!d.first_time_batch(&batch(1, 5), 3), "and then closed");
    }

    #[test]
    fn the_memory_survives_its_encoding_and_refuses_bad_ranges() {
        let mut d = Dedup::default();
        for seq in [0u64, 1, 2, 7, 9, 10] {
            d.first_time_batch(&batch(3, seq), seq + 100);
        }
        d.first_time_batch(&batch(4, 5), 1);
        let mut e = Encoder::new();
        d.encode(&mut e);
        let bytes = e.to_bytes();
        let back = Dedup::decode(&mut Decoder::new(bytes.clone())).expect("decodes");
        assert_eq!(back, d);
        // A range that is empty.
        let mut e = Encoder::new();
        e.put_u32(DEDUP_ENCODING_V2);
        e.put_u32(1);
        e.put_u32(3);
        e.put_u32(1);
        e.put_u64(5);
        e.put_u64(5);
        e.put_u32(0);
        let bytes = e.to_bytes();
        assert!(Dedup::decode(&mut Decoder::new(bytes.clone())).is_err());
    }

    #[test]
    fn the_older_encoding_still_decodes() {
        let mut e = Encoder::new();
        e.put_u32(1); // origins
        e.put_u32(3); // origin
        e.put_u32(2); // batches
        for (seq, inst) in [(4u64, 10u64), (5, 11)] {
            e.put_u64(seq);
            e.put_u64(inst);
        }
        let bytes = e.to_bytes();
        let mut d = Dedup::decode(&mut Decoder::new(bytes.clone())).expect("decodes");
        assert_eq!(d.decided_at(batch(3, 5).key()), Some(11));
        assert!(!d.first_time_batch(&batch(3, 4), 12));
        assert!(d.first_time_batch(&batch(3, 6), 13));
    }
}
