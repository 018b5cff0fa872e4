//! Proposer: seed 003 §4.3 ("Phase 2 is executed for a batch of proposed values").
//! Batching, the window and re-sends are `crate::batcher` (shared with U-Ring Paxos); each
//! ready batch goes to the coordinator by unicast (`Submit`, Task 1 line 3). A batch not decided
//! within `value_resend_us`, or in flight when the coordinator changes, is sent again under
//! the same ids; the coordinator gives a batch it holds no second instance, and learners
//! deliver each id once.

use super::messages::Submit;
use super::{Message, Out, RingPaxos, RingPaxosConfig};
use crate::ProposeError;
use crate::batcher::BatchLimits;
use crate::types::{Batch, ValueId};
use bytes::Bytes;

impl RingPaxosConfig {
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

impl RingPaxos {
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
            self.submit(b, out);
        }
        Ok(id)
    }

    /// Task 1 line 3: the value goes to the coordinator (straight into its queue if this
    /// node coordinates).
    fn submit(&mut self, batch: Batch, out: &mut Out) {
        self.node.cache.insert(&batch);
        if self.coord.is_active() {
            self.coordinator_on_submit(batch, out);
            return;
        }
        if let Some(c) = self.node.coordinator_pos() {
            out.send(self.node_at(c), Message::Submit(Submit { batch }));
        }
    }

    pub(crate) fn proposer_tick(&mut self, out: &mut Out) {
        let coordinator = self.node.coordinator_pos();
        let changed = coordinator != self.node.last_coordinator;
        // From one coordinator to another (not the first one this node hears of: batches
        // reach a coordinator that is still preparing, and a needless re-send of the whole
        // window decides batches twice where learners are paused, as a Multi-Ring learner
        // waiting for a quiet ring is).
        if changed && self.node.last_coordinator.is_some() && coordinator.is_some() {
            self.node.resend_when_leading = true;
        }
        self.node.last_coordinator = coordinator;
        let limits = self.cfg.batch_limits();
        let Some(p) = self.node.prop.as_mut() else {
            return;
        };
        let mut to_send = Vec::new();
        p.tick(self.node.now, changed, &limits, &mut to_send);
        for b in to_send {
            self.submit(b, out);
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
            self.submit(b, out);
        }
    }
}
