//! Proposer: seed 003 §4.3 ("Phase 2 is executed for a batch of proposed values") and the
//! batching of `uring/proposer.rs`: values are batched (`batch_max_bytes`,
//! `batch_linger_us`; a batch leaves at once while fewer than two are in flight), a bounded
//! window of values is in flight (`window_values`, `window_bytes`, else `Busy`), and each
//! batch goes to the coordinator by unicast (`Submit`, Task 1 line 3). A batch not decided
//! within `value_resend_us`, or in flight when the coordinator changes, is sent again under
//! the same ids; the coordinator gives a batch it holds no second instance, and learners
//! deliver each id once.

use super::messages::Submit;
use super::{Message, Out, RingPaxos, RingPaxosConfig};
use crate::ProposeError;
use crate::protocol::Ack;
use crate::types::{Batch, BatchBuilder, BatchKey, Micros, NodeId, ValueId};
use bytes::Bytes;
use std::collections::BTreeMap;

const EAGER_BATCHES_IN_FLIGHT: usize = 2;

#[derive(Debug)]
struct InFlight {
    batch: Batch,
    sent_us: Micros,
}

#[derive(Debug)]
pub struct ProposerState {
    me: NodeId,
    next_seq: u64,
    open: Option<BatchBuilder>,
    open_since_us: Micros,
    in_flight: BTreeMap<u64, InFlight>,
    values_in_flight: usize,
    bytes_in_flight: usize,
    last_resend_scan_us: Micros,
}

impl ProposerState {
    pub fn new(me: NodeId, start_seq: u64) -> ProposerState {
        ProposerState {
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

    pub fn values_in_flight(&self) -> usize {
        self.values_in_flight + self.open.as_ref().map_or(0, |b| b.len())
    }

    fn bytes_total(&self) -> usize {
        self.bytes_in_flight + self.open.as_ref().map_or(0, |b| b.payload_bytes())
    }

    pub fn has_room(&self, cfg: &RingPaxosConfig) -> bool {
        self.values_in_flight() < cfg.window_values && self.bytes_total() < cfg.window_bytes
    }

    /// A decided batch: acknowledged once if it is ours and in flight.
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
}

impl RingPaxos {
    pub(crate) fn proposer_propose(
        &mut self,
        payload: Bytes,
        out: &mut Out,
    ) -> Result<ValueId, ProposeError> {
        let now = self.now;
        let batch_max = self.cfg.batch_max_bytes;
        let Some(p) = self.prop.as_mut() else {
            return Err(ProposeError::NotProposer);
        };
        if payload.len() > self.cfg.max_value_bytes {
            return Err(ProposeError::TooLarge {
                bytes: payload.len(),
                max_bytes: self.cfg.max_value_bytes,
            });
        }
        if !p.has_room(&self.cfg) {
            return Err(ProposeError::Busy);
        }
        if payload.len() >= batch_max / 2 {
            // Fills a batch on its own: travels without a copy.
            let before = p.close_open(now);
            let id = ValueId {
                node: p.me,
                seq: p.next_seq,
            };
            p.next_seq += 1;
            let b = Batch::single(id, payload);
            p.track(&b, now);
            if let Some(prev) = before {
                self.submit(prev, out);
            }
            self.submit(b, out);
            return Ok(id);
        }
        if p.open.is_none() {
            p.open = Some(BatchBuilder::new(p.me, p.next_seq, batch_max.min(1 << 20)));
            p.open_since_us = now;
        }
        let id = match p.open.as_mut() {
            Some(open) => open.push(&payload),
            None => return Err(ProposeError::Busy),
        };
        p.next_seq += 1;
        debug_assert_eq!(id.seq + 1, p.next_seq);
        if p.open
            .as_ref()
            .is_some_and(|o| o.payload_bytes() >= batch_max)
            && let Some(b) = p.close_open(now)
        {
            self.submit(b, out);
        }
        Ok(id)
    }

    /// Task 1 line 3: the value goes to the coordinator (straight into its queue if this
    /// node coordinates).
    fn submit(&mut self, batch: Batch, out: &mut Out) {
        self.cache.insert(&batch);
        if self.coord.is_active() {
            self.coordinator_on_submit(batch, out);
            return;
        }
        if let Some(c) = self.coordinator_pos() {
            out.send(self.node_at(c), Message::Submit(Submit { batch }));
        }
    }

    pub(crate) fn proposer_tick(&mut self, out: &mut Out) {
        let now = self.now;
        let coordinator = self.coordinator_pos();
        let changed = coordinator != self.last_coordinator;
        self.last_coordinator = coordinator;
        let resend_us = self.cfg.value_resend_us;
        let linger = self.cfg.batch_linger_us;
        let Some(p) = self.prop.as_mut() else { return };
        let mut to_send = Vec::new();
        if changed || now >= p.last_resend_scan_us + resend_us / 8 {
            p.last_resend_scan_us = now;
            for f in p.in_flight.values_mut() {
                if changed || now >= f.sent_us + resend_us {
                    f.sent_us = now;
                    to_send.push(f.batch.clone());
                }
            }
        }
        if p.open.as_ref().is_some_and(|o| !o.is_empty())
            && (p.in_flight.len() < EAGER_BATCHES_IN_FLIGHT || now >= p.open_since_us + linger)
        {
            to_send.extend(p.close_open(now));
        }
        for b in to_send {
            self.submit(b, out);
        }
    }
}
