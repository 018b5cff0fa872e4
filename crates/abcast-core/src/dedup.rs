//! The learners' de-duplication memory, shared by every family: a proposer may re-send a
//! batch that was already decided (its decision or its ack was lost, the leader changed), so
//! one batch can be decided at two places of the sequence. Learners deliver it at the first
//! and pass over the second; the choice is a function of the decided sequence alone, so
//! every learner makes the same one (seed 000 §3.1.4 for the rings; seed 001's leader-based
//! logs meet the same re-sends when a proposal is forwarded to a new leader).

use crate::codec::{Decoder, Encoder};
use crate::error::DecodeError;
use crate::types::{BatchKey, Instance, NodeId};
use std::collections::{HashMap, VecDeque};

/// Batches remembered per origin for de-duplication. A re-sent batch is decided within a
/// few resend periods of the first, far fewer batches than this.
pub const DEDUP_BATCHES_PER_ORIGIN: usize = 1 << 16;

#[derive(Clone, Debug, Default)]
pub struct Dedup {
    /// Per origin: first_seq -> the instance it was first delivered in.
    per_origin: HashMap<NodeId, (HashMap<u64, Instance>, VecDeque<u64>)>,
}

impl Dedup {
    /// True the first time a batch key is seen (decided in `instance`).
    pub fn first_time(&mut self, key: BatchKey, instance: Instance) -> bool {
        let (set, order) = self.per_origin.entry(key.origin).or_default();
        if set.contains_key(&key.first_seq) {
            return false;
        }
        set.insert(key.first_seq, instance);
        order.push_back(key.first_seq);
        if order.len() > DEDUP_BATCHES_PER_ORIGIN
            && let Some(old) = order.pop_front()
        {
            set.remove(&old);
        }
        true
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
            .flat_map(|(&origin, (set, _))| {
                set.iter()
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
            .and_then(|(m, _)| m.get(&key.first_seq).copied())
    }

    /// The memory as bytes, for a snapshot: a learner that installs it skips the same
    /// duplicates as the learner that took it (origins in id order, batches oldest first).
    pub fn encode(&self, e: &mut Encoder) {
        let mut origins: Vec<_> = self.per_origin.iter().collect();
        origins.sort_by_key(|(o, _)| o.0);
        e.put_u32(origins.len() as u32);
        for (origin, (set, order)) in origins {
            e.put_u32(origin.0);
            e.put_u32(order.len() as u32);
            for seq in order {
                e.put_u64(*seq);
                e.put_u64(set.get(seq).copied().unwrap_or(0));
            }
        }
    }

    pub fn decode(d: &mut Decoder) -> Result<Dedup, DecodeError> {
        let mut dedup = Dedup::default();
        let origins = d.count("dedup.origins", 1 << 16, 8)?;
        for _ in 0..origins {
            let origin = NodeId(d.u32("dedup.origin")?);
            let n = d.count("dedup.batches", DEDUP_BATCHES_PER_ORIGIN, 16)?;
            let (set, order) = dedup.per_origin.entry(origin).or_default();
            for _ in 0..n {
                let seq = d.u64("dedup.first_seq")?;
                let instance = d.u64("dedup.instance")?;
                if set.insert(seq, instance).is_none() {
                    order.push_back(seq);
                }
            }
        }
        Ok(dedup)
    }
}
