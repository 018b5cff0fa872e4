//! Configuration of one U-Ring Paxos ring, with the defaults of seed 000 table 4.1 where the
//! seed has one. Every field is checked by [`RingConfig::validate`], whose errors name the
//! field and the reason.

use crate::types::{Micros, NodeId};

use crate::config::{ConfigError, Member, Roles};

pub use crate::ring::MAX_RING_MEMBERS;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Members in ring order. The coordinator is the first live acceptor in this order.
    pub members: Vec<Member>,
    /// Phase 1 is run ahead for this many instances (table 4.1 `p1_preexecution_number`).
    pub p1_preexecution_number: u64,
    /// A coordinator re-sends phase 1 not answered by a quorum after this long
    /// (table 4.1 `p1_resend_time`, 20 000 ms there; we default to 500 ms because phase 1
    /// is only run on a coordinator change, where a long wait is a long outage).
    pub p1_resend_us: Micros,
    /// A coordinator re-circulates phase 2 for an instance not decided after this long.
    pub p2_resend_us: Micros,
    /// A proposer re-sends a value not decided after this long (table 4.1
    /// `value_resend_time`, 20 000 ms there; 2 000 ms here, and at once on a coordinator
    /// change).
    pub value_resend_us: Micros,
    /// Largest batch of proposals decided in one instance, in payload bytes.
    pub batch_max_bytes: usize,
    /// Longest a proposal waits for more values to join its batch while earlier batches are
    /// in flight. With nothing in flight a batch leaves at once.
    pub batch_linger_us: Micros,
    /// The proposer's window: at most this many values proposed and not yet decided
    /// (table 4.1 `concurrent_values` is 10 values per proposer there; we count bytes too).
    /// 20 000 values bound tiny values, whose batches need many; 2 MiB bounds the rest.
    pub window_values: usize,
    /// The proposer's window in payload bytes. A value is admitted while less than this is
    /// in flight, so a value larger than the window still goes, alone. 2 MiB, not 16 MiB:
    /// a saturated 3-node demo keeps its throughput (1 KiB values: 1.03 and 0.99 million
    /// values/s against 0.95 and 0.96; 32 KiB: 9.9 and 9.2 Gbit/s against 9.0 and 10.7)
    /// and its median latency drops from 45 ms to 6 ms (2026-11-23, `abcast demo`): the
    /// larger window only queued.
    pub window_bytes: usize,
    /// Largest single value.
    pub max_value_bytes: usize,
    /// At most this many instances open (proposed, not yet decided) at the coordinator.
    pub max_open_instances: usize,
    /// Batches queued at the coordinator waiting for an instance, in bytes.
    pub coordinator_queue_bytes: usize,
    /// Heartbeat period; a node not heard from for `failure_timeout_us` is suspected and the
    /// ring closes around it (seed 000 §3.2.3, where Zookeeper did this "after some seconds").
    pub heartbeat_interval_us: Micros,
    pub failure_timeout_us: Micros,
    /// A learner missing an instance for this long asks an acceptor for it (seed 000 §3.1.4).
    pub retrieve_timeout_us: Micros,
    /// Instances asked for in one retrieve.
    pub retrieve_max_instances: u64,
    /// Acceptor store capacity (seed 000 §3.4 `CyclicArray`: 15 000 decisions), and the
    /// payload bytes it holds at most (the durable store's cache of recent instances).
    /// The byte bound is 256 MiB, not 1 GiB: a window of 1 GiB of 1 KiB values cost the
    /// demo 30 % of its throughput (775 000 against 1 089 000 values/s, medians of 3
    /// interleaved runs, 2026-11-23), in memory first touched while the window fills and
    /// in a working set the caches cannot hold; 8 KiB values ran the same with either.
    /// A learner further behind than the window catches up from a snapshot, or skips when
    /// the ring takes none.
    pub store_capacity_instances: usize,
    pub store_capacity_bytes: usize,
    /// The ring's learners take snapshots (the node's `storage.snapshot_interval_ms > 0`):
    /// acceptors' logs are trimmed below them, and a learner that falls behind the trim
    /// point installs a peer's snapshot; it never skips instances. Off, nothing is
    /// trimmed by snapshots, and a learner behind every acceptor's bounded in-memory
    /// window can only skip to it (reported through `Outbox::skips`).
    pub learner_snapshots: bool,
    /// A deliberately broken variant, for the simulator's mutation tests only (the
    /// `mutations` feature; see `crate::mutation`).
    pub mutation: crate::ring::MutationSlot,
}

impl RingConfig {
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

    /// A ring of the given members, all PAL, with default parameters.
    pub fn pal(ids: &[u32]) -> RingConfig {
        RingConfig {
            members: ids
                .iter()
                .map(|&i| Member {
                    id: NodeId(i),
                    roles: Roles::PAL,
                })
                .collect(),
            ..RingConfig::default()
        }
    }

    pub fn acceptors(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.roles.acceptor)
    }

    /// Majority of acceptors (seed 003: ⌈(|N_a|+1)/2⌉).
    pub fn quorum(&self) -> usize {
        self.acceptors().count() / 2 + 1
    }

    pub fn position(&self, id: NodeId) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field: &'static str, reason: String| Err(ConfigError { field, reason });
        if self.members.is_empty() {
            return err("members", "the ring has no members".into());
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
        if self.acceptors().count() == 0 {
            return err("members.roles", "no member is an acceptor".into());
        }
        let positive = [
            ("p1_preexecution_number", self.p1_preexecution_number),
            ("p1_resend_us", self.p1_resend_us),
            ("p2_resend_us", self.p2_resend_us),
            ("value_resend_us", self.value_resend_us),
            ("batch_max_bytes", self.batch_max_bytes as u64),
            ("window_values", self.window_values as u64),
            ("window_bytes", self.window_bytes as u64),
            ("max_value_bytes", self.max_value_bytes as u64),
            ("max_open_instances", self.max_open_instances as u64),
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
                    "{} us must exceed twice heartbeat_interval_us ({} us), or live nodes get suspected",
                    self.failure_timeout_us, self.heartbeat_interval_us
                ),
            );
        }
        if self.max_value_bytes > (64 << 20) {
            return err("max_value_bytes", "at most 64 MiB".into());
        }
        if (self.max_open_instances as u64) >= self.store_capacity_instances as u64 {
            return err(
                "max_open_instances",
                "must be smaller than store_capacity_instances, or open instances could not be stored".into(),
            );
        }
        Ok(())
    }
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            members: Vec::new(),
            p1_preexecution_number: 5000,
            p1_resend_us: 500_000,
            p2_resend_us: 1_000_000,
            value_resend_us: 2_000_000,
            batch_max_bytes: 256 << 10,
            batch_linger_us: 200,
            window_values: 20_000,
            window_bytes: 2 << 20,
            max_value_bytes: 16 << 20,
            max_open_instances: 256,
            coordinator_queue_bytes: 256 << 20,
            heartbeat_interval_us: 50_000,
            failure_timeout_us: 300_000,
            retrieve_timeout_us: 100_000,
            retrieve_max_instances: 1024,
            store_capacity_instances: 15_000,
            store_capacity_bytes: 256 << 20,
            learner_snapshots: false,
            mutation: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StartInfo;
    use crate::ringpaxos::{RingPaxos, RingPaxosConfig};
    use crate::storage::MemoryStore;
    use crate::uring::URing;

    fn restart(incarnation: u64) -> StartInfo {
        StartInfo {
            incarnation,
            amnesic: true,
            start_seq: 1,
        }
    }

    #[test]
    fn an_incarnation_beyond_32_bits_is_refused_not_truncated() {
        assert_eq!(restart(7).ballot_incarnation(), Ok(7));
        assert_eq!(
            restart(u64::from(u32::MAX)).ballot_incarnation(),
            Ok(u32::MAX)
        );
        let e = restart(u64::from(u32::MAX) + 1)
            .ballot_incarnation()
            .expect_err("does not fit");
        assert_eq!(e.field, "start.incarnation");
        // Both protocols refuse to start with it (Multi-Ring builds U-Rings).
        let store = || Box::new(MemoryStore::new(100, 1 << 20));
        let too_big = restart(1 << 32);
        let u = URing::new(RingConfig::pal(&[0, 1, 2]), NodeId(0), too_big, store());
        assert_eq!(u.err().map(|e| e.field), Some("start.incarnation"));
        let cfg = RingPaxosConfig::with_roles(&[0, 1, 2], &[]);
        let r = RingPaxos::new(cfg, NodeId(0), too_big, store());
        assert_eq!(r.err().map(|e| e.field), Some("start.incarnation"));
    }

    #[test]
    fn each_life_owns_its_own_range_of_value_ids() {
        assert_eq!(StartInfo::restart(0, false), Ok(StartInfo::FRESH));
        let seq = |k: u64| StartInfo::restart(k, true).map(|s| s.start_seq);
        // The simulator's restarts use `incarnation << 40`: the same values.
        for k in [1, 2, 3, 1000, StartInfo::MAX_INCARNATIONS - 1] {
            assert_eq!(seq(k), Ok(k << 40));
        }
        // Consecutive lives meet exactly at the range end the proposer stops at.
        for k in [0, 1, 41, StartInfo::MAX_INCARNATIONS - 2] {
            let (a, b) = (seq(k).unwrap(), seq(k + 1).unwrap());
            assert!(a < b);
            assert_eq!(crate::batcher::life_seq_end(a), b);
        }
        assert_eq!(
            crate::batcher::life_seq_end(seq(StartInfo::MAX_INCARNATIONS - 1).unwrap()),
            u64::MAX,
            "the last life ends at the top of the u64 space"
        );
        assert_eq!(StartInfo::MAX_INCARNATIONS, 1 << 24);
        let e = StartInfo::restart(StartInfo::MAX_INCARNATIONS, true).expect_err("would wrap");
        assert_eq!(e.field, "start.incarnation");
        assert!(e.reason.contains("16777216"), "{e}");
        assert_eq!(StartInfo::start_seq_for(u64::MAX), None);
    }

    #[test]
    fn a_largest_value_above_the_byte_window_is_a_valid_config() {
        let cfg = RingConfig {
            window_bytes: 64 << 10,
            max_value_bytes: 16 << 20,
            ..RingConfig::pal(&[0, 1, 2])
        };
        assert_eq!(cfg.validate().map_err(|e| e.field), Ok(()));
    }
}
