//! Ring Paxos configuration: the members and their roles, and the defaults of the
//! coordinator's buffer (seed 003 §6.1) and of the timeouts (§4.2).
//!
//! Members and roles reuse U-Ring Paxos' [`Member`] and [`Roles`]; acceptors are taken in
//! configuration order. The ring of phase 2 is an m-quorum of `acceptors / 2 + 1` of them,
//! chosen by the coordinator at phase 1 (seed 003 §4.1, §4.3); the others are spares.

use crate::config::{ConfigError, Member, Roles};
pub use crate::ring::MAX_RING_MEMBERS;
use crate::types::{Micros, NodeId};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingPaxosConfig {
    /// Members; acceptors in this order. The coordinator is the first live acceptor.
    pub members: Vec<Member>,
    /// The coordinator's circular buffer, in instances (seed 003 §6.1: "new values are
    /// proposed as long as there is space in the buffer"). Also its retransmission buffer.
    pub buffer_instances: usize,
    /// The same buffer in payload bytes held by entries not yet freed.
    pub buffer_bytes: usize,
    /// A coordinator re-sends phase 1 not answered by a quorum after this long.
    pub p1_resend_us: Micros,
    /// A coordinator re-multicasts a phase 2A not decided after this long (§4.2).
    pub p2_resend_us: Micros,
    /// An instance undecided this long means the ring is broken somewhere the failure
    /// detector does not see (a one-way link): phase 1 again, with a new ring (§4.2).
    pub ring_timeout_us: Micros,
    /// Decisions wait this long for a phase 2A to ride on, then leave alone (§4.3).
    pub decision_linger_us: Micros,
    /// A proposer re-sends a batch not decided after this long (and at once on a
    /// coordinator change).
    pub value_resend_us: Micros,
    /// Largest batch, in payload bytes.
    pub batch_max_bytes: usize,
    /// Longest a value waits for more to join its batch while batches are in flight.
    pub batch_linger_us: Micros,
    /// The proposer's window (values and bytes proposed and not yet decided); a value is
    /// admitted while less than `window_bytes` is in flight, so a larger one goes alone.
    /// 2 MiB as in `uring::RingConfig`: with 16 MiB (and a 1 GiB acceptor store) a
    /// saturated Ring Paxos cluster on this host delivered 0.9 to 2.1 Gbit/s per learner at
    /// 180 to 420 ms; with 2 MiB and 256 MiB, 4.2 to 6.0 Gbit/s at 8 to 12 ms (`abcast
    /// bench multicast --window 0`, one run per point, 1 to 5 learners, 2026-11-23).
    pub window_values: usize,
    pub window_bytes: usize,
    pub max_value_bytes: usize,
    /// Batches queued at the coordinator waiting for a buffer entry, in bytes.
    pub coordinator_queue_bytes: usize,
    pub heartbeat_interval_us: Micros,
    /// A member not heard from this long is suspected.
    pub failure_timeout_us: Micros,
    /// A learner missing an instance this long asks for it (§4.2).
    pub retrieve_timeout_us: Micros,
    /// The learners take snapshots (the node's `storage.snapshot_interval_ms > 0`): the
    /// coordinator trims acceptors below a quorum of them, and a learner behind the trim
    /// point installs a peer's snapshot; without, it skips what every acceptor forgot (an
    /// in-memory store's window slid past it). As `uring::RingConfig::learner_snapshots`.
    pub learner_snapshots: bool,
    pub retrieve_max_instances: u64,
    /// Acceptor store capacity; 256 MiB of payload, as `uring::RingConfig`.
    pub store_capacity_instances: usize,
    pub store_capacity_bytes: usize,
    /// A deliberately broken variant, for the simulator's mutation tests only (the
    /// `mutations` feature; see `crate::mutation`).
    pub mutation: crate::ring::MutationSlot,
}

impl RingPaxosConfig {
    /// The broken variant this configuration runs (`crate::mutation`); always `None`
    /// without the `mutations` feature.
    pub fn mutation(&self) -> Option<crate::mutation::Mutation> {
        self.mutation.get()
    }

    /// Selects a deliberately broken variant (tests only); refused in a build without the
    /// `mutations` feature.
    pub fn set_mutation(&mut self, m: Option<crate::mutation::Mutation>) -> Result<(), String> {
        self.mutation.set(m)
    }

    /// `pal` nodes with every role, then `learners` with the learner role only.
    pub fn with_roles(pal: &[u32], learners: &[u32]) -> RingPaxosConfig {
        let member = |&i: &u32, roles| Member {
            id: NodeId(i),
            roles,
        };
        let learner = Roles {
            proposer: false,
            acceptor: false,
            learner: true,
        };
        RingPaxosConfig {
            members: pal
                .iter()
                .map(|i| member(i, Roles::PAL))
                .chain(learners.iter().map(|i| member(i, learner)))
                .collect(),
            ..RingPaxosConfig::default()
        }
    }

    pub fn position(&self, id: NodeId) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    /// Acceptors, as member positions, in configuration order.
    pub fn acceptor_positions(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&p| self.members[p].roles.acceptor)
            .collect()
    }

    /// f + 1: a majority of the acceptors, the size of the ring (the m-quorum).
    pub fn quorum(&self) -> usize {
        self.acceptor_positions().len() / 2 + 1
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field: &'static str, reason: String| Err(ConfigError { field, reason });
        if self.members.is_empty() {
            return err("members", "no members".into());
        }
        if self.members.len() > MAX_RING_MEMBERS {
            return err(
                "members",
                format!("{} members, at most {MAX_RING_MEMBERS}", self.members.len()),
            );
        }
        for (i, m) in self.members.iter().enumerate() {
            if self.members[..i].iter().any(|o| o.id == m.id) {
                return err("members", format!("node id {} appears twice", m.id.0));
            }
            if !(m.roles.proposer || m.roles.acceptor || m.roles.learner) {
                return err("members.roles", format!("node {} has no role", m.id.0));
            }
        }
        if self.acceptor_positions().is_empty() {
            return err("members.roles", "no member is an acceptor".into());
        }
        let positive = [
            ("buffer_instances", self.buffer_instances as u64),
            ("buffer_bytes", self.buffer_bytes as u64),
            ("p1_resend_us", self.p1_resend_us),
            ("p2_resend_us", self.p2_resend_us),
            ("ring_timeout_us", self.ring_timeout_us),
            ("value_resend_us", self.value_resend_us),
            ("batch_max_bytes", self.batch_max_bytes as u64),
            ("window_values", self.window_values as u64),
            ("window_bytes", self.window_bytes as u64),
            ("max_value_bytes", self.max_value_bytes as u64),
            (
                "coordinator_queue_bytes",
                self.coordinator_queue_bytes as u64,
            ),
            ("heartbeat_interval_us", self.heartbeat_interval_us),
            ("failure_timeout_us", self.failure_timeout_us),
            ("retrieve_timeout_us", self.retrieve_timeout_us),
            ("retrieve_max_instances", self.retrieve_max_instances),
            (
                "store_capacity_instances",
                self.store_capacity_instances as u64,
            ),
            ("store_capacity_bytes", self.store_capacity_bytes as u64),
        ];
        for (field, v) in positive {
            if v == 0 {
                return err(field, "must be greater than zero".into());
            }
        }
        if self.failure_timeout_us <= 2 * self.heartbeat_interval_us {
            return err(
                "failure_timeout_us",
                format!(
                    "{} us must exceed twice heartbeat_interval_us ({} us)",
                    self.failure_timeout_us, self.heartbeat_interval_us
                ),
            );
        }
        if self.ring_timeout_us <= self.p2_resend_us {
            return err(
                "ring_timeout_us",
                "must exceed p2_resend_us, or every resend replaces the ring".into(),
            );
        }
        if self.max_value_bytes > (64 << 20) {
            return err("max_value_bytes", "at most 64 MiB".into());
        }
        if self.buffer_instances >= self.store_capacity_instances {
            return err(
                "buffer_instances",
                "must be smaller than store_capacity_instances, or open instances could not be stored"
                    .into(),
            );
        }
        Ok(())
    }
}

impl Default for RingPaxosConfig {
    fn default() -> Self {
        RingPaxosConfig {
            members: Vec::new(),
            buffer_instances: 1024,
            buffer_bytes: 64 << 20,
            p1_resend_us: 100_000,
            p2_resend_us: 100_000,
            ring_timeout_us: 1_000_000,
            decision_linger_us: 200,
            value_resend_us: 1_000_000,
            batch_max_bytes: 256 << 10,
            batch_linger_us: 200,
            window_values: 20_000,
            window_bytes: 2 << 20,
            max_value_bytes: 16 << 20,
            coordinator_queue_bytes: 256 << 20,
            heartbeat_interval_us: 50_000,
            failure_timeout_us: 300_000,
            retrieve_timeout_us: 100_000,
            learner_snapshots: false,
            retrieve_max_instances: 1024,
            store_capacity_instances: 15_000,
            store_capacity_bytes: 256 << 20,
            mutation: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field() {
        let ok = RingPaxosConfig::with_roles(&[0, 1, 2], &[3]);
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!(ok.quorum(), 2);
        let mut c = ok.clone();
        c.buffer_instances = 0;
        assert_eq!(c.validate().map_err(|e| e.field), Err("buffer_instances"));
        let mut c = ok.clone();
        c.ring_timeout_us = c.p2_resend_us;
        assert_eq!(c.validate().map_err(|e| e.field), Err("ring_timeout_us"));
        let c = RingPaxosConfig::with_roles(&[], &[3]);
        assert_eq!(c.validate().map_err(|e| e.field), Err("members.roles"));
        let c = RingPaxosConfig::with_roles(&[1, 1], &[]);
        assert_eq!(c.validate().map_err(|e| e.field), Err("members"));
    }
}
