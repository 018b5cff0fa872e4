//! Proposer: seed 000 §3.1.1.
//!
//! Batching, the window of values in flight and re-sends are `crate::batcher` (shared with
//! Ring Paxos). Here: a ready batch travels the ring to the coordinator (`Forward`), each
//! node keeping its payload; learners deliver each id once.

use super::messages::Forward;
use super::{Message, Out, RingConfig, URing};
use crate::ProposeError;
use crate::batcher::BatchLimits;
use crate::nodeset::NodeSet;
use crate::types::{Batch, ValueId};
use bytes::Bytes;

impl RingConfig {
    /// The proposer's limits (see `batcher.rs`).
    pub fn batch_limits(&self) -> BatchLimits {
        BatchLimits {
            batch_max_bytes: self.batch_max_bytes,
            batch_linger_us: self.batch_linger_us,
            window_values: self.window_values,
            window_bytes: self.window_bytes,
            max_value_bytes: self.max_value_bytes,
            value_resend_us: self.value_resend_us,
        }
    }
}

impl URing {
    pub(crate) fn proposer_propose(
        &mut self,
        payload: Bytes,
        out: &mut Out,
    ) -> Result<ValueId, ProposeError> {
        let limits = self.cfg.batch_limits();
        let Some(p) = self.node.prop.as_mut() else {
            return Err(ProposeError::NotProposer);
        };
        let (id, ready) = p.propose(self.node.now, payload, &limits)?;
        for b in ready.into_iter().flatten() {
            self.send_batch(b, out);
        }
        Ok(id)
    }

    /// Sends a batch towards the coordinator: straight into its queue if this node leads,
    /// otherwise along the ring.
    pub(crate) fn send_batch(&mut self, batch: Batch, out: &mut Out) {
        if self.coord.is_active() {
            self.coordinator_enqueue(batch, NodeSet::one(self.node.me), out);
            return;
        }
        let Some(succ) = self.successor() else { return };
        self.node.cache.insert(&batch);
        out.send(
            self.node_at(succ),
            Message::Forward(Forward {
                batch,
                path: NodeSet::one(self.node.me),
            }),
        );
    }

    /// A batch travelling to the coordinator passes through this node.
    pub(crate) fn on_forward(&mut self, mut m: Forward, out: &mut Out) {
        self.node.cache.insert(&m.batch);
        self.node.learn.offer_payload(&m.batch);
        m.path.insert(self.node.me);
        if self.coord.is_active() {
            self.coordinator_enqueue(m.batch, m.path, out);
            return;
        }
        let Some(succ) = self.successor() else { return };
        if m.path.contains(self.node_at(succ)) {
            // Around the ring without meeting a coordinator: drop, the proposer re-sends.
            return;
        }
        out.send(self.node_at(succ), Message::Forward(m));
    }

    pub(crate) fn proposer_tick(&mut self, out: &mut Out) {
        let coordinator = self.node.coordinator_pos();
        let successor = self.successor();
        let ring_changed = successor != self.last_successor && self.last_successor.is_some();
        self.last_successor = successor;
        let coordinator_changed = coordinator != self.node.last_coordinator || ring_changed;
        // From one coordinator to another (not the first one this node hears of: batches
        // reach a coordinator that is still preparing, and a needless re-send of the whole
        // window decides batches twice where learners are paused, as a Multi-Ring learner
        // waiting for a quiet ring is).
        if coordinator != self.node.last_coordinator
            && self.node.last_coordinator.is_some()
            && coordinator.is_some()
        {
            self.node.resend_when_leading = true;
        }
        self.node.last_coordinator = coordinator;
        let limits = self.cfg.batch_limits();
        let Some(p) = self.node.prop.as_mut() else {
            return;
        };
        let mut to_send = Vec::new();
        p.tick(self.node.now, coordinator_changed, &limits, &mut to_send);
        for b in to_send {
            self.send_batch(b, out);
        }
    }

    /// Re-sends every batch in flight now (the coordinator this node believes in was just
    /// heard leading after a change).
    pub(crate) fn proposer_resend(&mut self, out: &mut Out) {
        let limits = self.cfg.batch_limits();
        let Some(p) = self.node.prop.as_mut() else {
            return;
        };
        let mut to_send = Vec::new();
        p.tick(self.node.now, true, &limits, &mut to_send);
        for b in to_send {
            self.send_batch(b, out);
        }
    }
}
