//! Proposer: seed 000 §3.1.1.
//!
//! Values are batched into one instance (bounded by `batch_max_bytes` and `batch_linger_us`:
//! a batch leaves at once when nothing is in flight, so low load sees no batching delay, and
//! fills up under load). The batch travels the ring to the coordinator. A bounded window of
//! values is in flight (`window_values`, `window_bytes`): when it is full `propose` answers
//! `Busy`. A batch not decided within `value_resend_us`, or in flight when the coordinator
//! changes, is sent again under the same ids; learners deliver each id once.

use super::messages::Forward;
use super::ring::bit;
use super::{Message, Out, RingConfig, URing};
use crate::ProposeError;
use crate::protocol::Ack;
use crate::types::{Batch, BatchBuilder, BatchKey, Micros, NodeId, ValueId};
use bytes::Bytes;
use std::collections::BTreeMap;

/// A batch leaves at once while fewer than this many batches are in flight.
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
    /// Last scan of `in_flight` for re-sends (scans are coarse: every `value_resend_us / 8`).
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

    /// Values proposed and not yet decided, including the open batch.
    pub fn values_in_flight(&self) -> usize {
        self.values_in_flight + self.open.as_ref().map_or(0, |b| b.len())
    }

    fn bytes_total(&self) -> usize {
        self.bytes_in_flight + self.open.as_ref().map_or(0, |b| b.payload_bytes())
    }

    pub fn has_room(&self, cfg: &RingConfig) -> bool {
        self.values_in_flight() < cfg.window_values && self.bytes_total() < cfg.window_bytes
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

    fn close_open(&mut self, now: Micros) -> Option<Batch> {
        let b = self.open.take()?.finish();
        self.values_in_flight += b.len();
        self.bytes_in_flight += b.payload_bytes();
        self.in_flight.insert(
            b.first_seq(),
            InFlight {
                batch: b.clone(),
                sent_us: now,
            },
        );
        Some(b)
    }
}

impl URing {
    pub(crate) fn proposer_propose(
        &mut self,
        payload: Bytes,
        out: &mut Out,
    ) -> Result<ValueId, ProposeError> {
        let now = self.now;
        let cfg_batch_max = self.cfg.batch_max_bytes;
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
        // A value that fills a batch on its own travels without being copied.
        if payload.len() >= cfg_batch_max / 2 {
            let to_send = p.close_open(now);
            let id = ValueId {
                node: p.me,
                seq: p.next_seq,
            };
            p.next_seq += 1;
            let b = Batch::single(id, payload);
            p.values_in_flight += 1;
            p.bytes_in_flight += b.payload_bytes();
            p.in_flight.insert(
                id.seq,
                InFlight {
                    batch: b.clone(),
                    sent_us: now,
                },
            );
            if let Some(prev) = to_send {
                self.send_batch(prev, out);
            }
            self.send_batch(b, out);
            return Ok(id);
        }
        if p.open.is_none() {
            p.open = Some(BatchBuilder::new(
                p.me,
                p.next_seq,
                cfg_batch_max.min(1 << 20),
            ));
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
            .is_some_and(|o| o.payload_bytes() >= cfg_batch_max)
            && let Some(b) = p.close_open(now)
        {
            self.send_batch(b, out);
        }
        Ok(id)
    }

    /// Sends a batch towards the coordinator: straight into its queue if this node leads,
    /// otherwise along the ring.
    pub(crate) fn send_batch(&mut self, batch: Batch, out: &mut Out) {
        if self.coord.is_active() {
            self.coordinator_enqueue(batch, bit(self.pos), out);
            return;
        }
        let Some(succ) = self.successor() else { return };
        self.cache.insert(&batch);
        out.send(
            self.node_at(succ),
            Message::Forward(Forward {
                batch,
                path: bit(self.pos),
            }),
        );
    }

    /// A batch travelling to the coordinator passes through this node.
    pub(crate) fn on_forward(&mut self, mut m: Forward, out: &mut Out) {
        self.cache.insert(&m.batch);
        self.learn.offer_payload(&m.batch);
        m.path |= bit(self.pos);
        if self.coord.is_active() {
            self.coordinator_enqueue(m.batch, m.path, out);
            return;
        }
        let Some(succ) = self.successor() else { return };
        if m.path & bit(succ) != 0 {
            // Around the ring without meeting a coordinator: drop, the proposer re-sends.
            return;
        }
        out.send(self.node_at(succ), Message::Forward(m));
    }

    pub(crate) fn proposer_tick(&mut self, out: &mut Out) {
        let now = self.now;
        let coordinator = self.coordinator_pos();
        let coordinator_changed = coordinator != self.last_coordinator;
        self.last_coordinator = coordinator;
        let resend_us = self.cfg.value_resend_us;
        let linger = self.cfg.batch_linger_us;
        let Some(p) = self.prop.as_mut() else { return };
        let mut to_send = Vec::new();
        // Re-send what was not decided in time, or everything on a coordinator change.
        if coordinator_changed || now >= p.last_resend_scan_us + resend_us / 8 {
            p.last_resend_scan_us = now;
            for f in p.in_flight.values_mut() {
                if coordinator_changed || now >= f.sent_us + resend_us {
                    f.sent_us = now;
                    to_send.push(f.batch.clone());
                }
            }
        }
        if let Some(open) = p.open.as_ref()
            && !open.is_empty()
            && (p.in_flight.len() < EAGER_BATCHES_IN_FLIGHT || now >= p.open_since_us + linger)
        {
            to_send.extend(p.close_open(now));
        }
        for b in to_send {
            self.send_batch(b, out);
        }
    }
}
