//! The proposer's side of every protocol (seed 000 §3.1.1, seed 003 §4.3: "Phase 2 is
//! executed for a batch of proposed values"): values are batched into one instance, bounded
//! by `batch_max_bytes` and `batch_linger_us` (a batch leaves at once while fewer than two are
//! in flight, so low load sees no batching delay and batches fill up under load); a bounded
//! window of values is in flight (`window_values`, `window_bytes`; when it is full `propose`
//! answers `Busy`); a batch not decided within `value_resend_us`, or in flight when the
//! coordinator changes, is offered again under the same ids. Each protocol only decides
//! where a ready batch goes (U-Ring: along the ring; Ring Paxos: to the coordinator).

use crate::ProposeError;
use crate::protocol::Ack;
use crate::types::{Batch, BatchBuilder, BatchKey, Micros, NodeId, ValueId};
use bytes::Bytes;
use std::collections::BTreeMap;

/// A batch leaves at once while fewer than this many batches are in flight.
const EAGER_BATCHES_IN_FLIGHT: usize = 2;

/// The proposer's limits, taken from a protocol's configuration.
#[derive(Clone, Copy, Debug)]
pub struct BatchLimits {
    pub batch_max_bytes: usize,
    pub batch_linger_us: Micros,
    pub window_values: usize,
    pub window_bytes: usize,
    pub max_value_bytes: usize,
    pub value_resend_us: Micros,
}

#[derive(Debug)]
struct InFlight {
    batch: Batch,
    sent_us: Micros,
}

/// Batches ready to leave after one `propose`: the open batch closed early, then the value's
/// own batch (at most two, so the per-value path allocates nothing here).
pub type Ready = [Option<Batch>; 2];

#[derive(Debug)]
pub struct Batcher {
    me: NodeId,
    next_seq: u64,
    open: Option<BatchBuilder>,
    open_since_us: Micros,
    in_flight: BTreeMap<u64, InFlight>,
    values_in_flight: usize,
    bytes_in_flight: usize,
    /// Last scan of `in_flight` for re-sends (scans are coarse: every `value_resend_us / 8`).
    last_resend_scan_us: Micros,
}

impl Batcher {
    pub fn new(me: NodeId, start_seq: u64) -> Batcher {
        Batcher {
            me,
            next_seq: start_seq.max(1),
            open: None,
            open_since_us: 0,
            in_flight: BTreeMap::new(),
            values_in_flight: 0,
            bytes_in_flight: 0,
            last_resend_scan_us: 0,
        }
    }

    /// Values proposed and not yet decided, including the open batch.
    pub fn values_in_flight(&self) -> usize {
        self.values_in_flight + self.open.as_ref().map_or(0, |b| b.len())
    }

    fn bytes_total(&self) -> usize {
        self.bytes_in_flight + self.open.as_ref().map_or(0, |b| b.payload_bytes())
    }

    pub fn has_room(&self, l: &BatchLimits) -> bool {
        self.values_in_flight() < l.window_values && self.bytes_total() < l.window_bytes
    }

    /// The decision of a batch key: acknowledges it if it is ours and still in flight.
    pub fn on_decided(&mut self, key: BatchKey) -> Option<Ack> {
        if key.origin != self.me {
            return None;
        }
        let f = self.in_flight.remove(&key.first_seq)?;
        self.values_in_flight -= f.batch.len();
        self.bytes_in_flight -= f.batch.payload_bytes();
        Some(Ack {
            key,
            count: f.batch.len() as u32,
        })
    }

    fn track(&mut self, b: &Batch, now: Micros) {
        self.values_in_flight += b.len();
        self.bytes_in_flight += b.payload_bytes();
        self.in_flight.insert(
            b.first_seq(),
            InFlight {
                batch: b.clone(),
                sent_us: now,
            },
        );
    }

    fn close_open(&mut self, now: Micros) -> Option<Batch> {
        let b = self.open.take()?.finish();
        self.track(&b, now);
        Some(b)
    }

    /// Takes one value: its id, and the batches that must leave now, in order.
    pub fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        l: &BatchLimits,
    ) -> Result<(ValueId, Ready), ProposeError> {
        if payload.len() > l.max_value_bytes {
            return Err(ProposeError::TooLarge {
                bytes: payload.len(),
                max_bytes: l.max_value_bytes,
            });
        }
        if !self.has_room(l) {
            return Err(ProposeError::Busy);
        }
        let id = ValueId {
            node: self.me,
            seq: self.next_seq,
        };
        if payload.len() >= l.batch_max_bytes / 2 {
            // A value that fills a batch on its own travels without being copied.
            let before = self.close_open(now);
            self.next_seq += 1;
            let b = Batch::single(id, payload);
            self.track(&b, now);
            return Ok((id, [before, Some(b)]));
        }
        if self.open.is_none() {
            self.open = Some(BatchBuilder::new(
                self.me,
                self.next_seq,
                l.batch_max_bytes.min(1 << 20),
            ));
            self.open_since_us = now;
        }
        let Some(open) = self.open.as_mut() else {
            return Err(ProposeError::Busy);
        };
        let pushed = open.push(&payload);
        debug_assert_eq!(pushed, id, "the open batch numbers values from next_seq");
        self.next_seq += 1;
        let full = open.payload_bytes() >= l.batch_max_bytes;
        let ready = if full { self.close_open(now) } else { None };
        Ok((id, [ready, None]))
    }

    /// Time passes: batches to (re-)send, in order. Everything in flight is re-sent when the
    /// coordinator changed, the rest after `value_resend_us`; the open batch closes when few
    /// batches are in flight or it lingered `batch_linger_us`.
    pub fn tick(
        &mut self,
        now: Micros,
        coordinator_changed: bool,
        l: &BatchLimits,
        to_send: &mut Vec<Batch>,
    ) {
        if coordinator_changed || now >= self.last_resend_scan_us + l.value_resend_us / 8 {
            self.last_resend_scan_us = now;
            for f in self.in_flight.values_mut() {
                if coordinator_changed || now >= f.sent_us + l.value_resend_us {
                    f.sent_us = now;
                    to_send.push(f.batch.clone());
                }
            }
        }
        if let Some(open) = self.open.as_ref()
            && !open.is_empty()
            && (self.in_flight.len() < EAGER_BATCHES_IN_FLIGHT
                || now >= self.open_since_us + l.batch_linger_us)
        {
            to_send.extend(self.close_open(now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_larger_than_the_byte_window_goes_alone_then_the_window_is_full() {
        let l = BatchLimits {
            batch_max_bytes: 32 << 10,
            batch_linger_us: 200,
            window_values: 1000,
            window_bytes: 64 << 10,
            max_value_bytes: 1 << 20,
            value_resend_us: 1_000_000,
        };
        let mut b = Batcher::new(NodeId(0), 1);
        let big = Bytes::from(vec![1u8; 512 << 10]);
        let (id, ready) = b.propose(0, big, &l).expect("an empty window admits it");
        assert_eq!(id.seq, 1);
        assert!(
            ready.iter().flatten().count() == 1,
            "it fills its batch at once"
        );
        assert_eq!(
            b.propose(0, Bytes::from_static(b"x"), &l).unwrap_err(),
            ProposeError::Busy,
            "nothing more until it is decided"
        );
        let over = Bytes::from(vec![0u8; (1 << 20) + 1]);
        assert!(matches!(
            Batcher::new(NodeId(0), 1).propose(0, over, &l),
            Err(ProposeError::TooLarge { .. })
        ));
    }
}
