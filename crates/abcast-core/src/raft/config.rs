//! Raft configuration: the first configuration (voters and non-voting learners), the
//! timers of leader election (seed 001 §2.5: heartbeats, randomised election timeouts),
//! the switches of the thesis' optimisations (pre-vote §9.6, check-quorum §6.2, lease
//! reads §6.4.1) and the proposer's batching limits, shared with the other families.

use crate::batcher::BatchLimits;
use crate::config::{ConfigError, Configuration};
use crate::replog::ENTRY_MEMBERS_MAX;
use crate::types::{Micros, NodeId};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RaftConfig {
    /// The voters of the first configuration (C_0). Later configurations live in the log
    /// (§2.5.1); a node started with a configuration that does not name it is a new member
    /// waiting to be added: it campaigns for nothing and takes the leader's entries.
    pub voters: Vec<NodeId>,
    /// Non-voting members of C_0: they take and deliver the log, never vote, never count in
    /// a quorum, never campaign.
    pub learners: Vec<NodeId>,
    /// A leader sends a heartbeat (a read-index round, see `read.rs`) this often. 50 ms, as
    /// the ring protocols' failure detector (`RingPaxosConfig::heartbeat_interval_us`): the
    /// families are compared in one harness and should detect failures on the same scale.
    pub heartbeat_interval_us: Micros,
    /// A follower that hears from no leader for a time drawn uniformly from
    /// `[election_timeout_min_us, election_timeout_max_us)` campaigns. 300 to 600 ms: six
    /// heartbeats before the earliest timeout, so a lost heartbeat or two never starts an
    /// election (Raft §5.6: broadcastTime ≪ electionTimeout), and the spread equals the
    /// minimum, the Raft paper's 150 to 300 ms scaled to the 50 ms heartbeat, which makes a
    /// split vote rare. The minimum is also the check-quorum period and the lease bound.
    pub election_timeout_min_us: Micros,
    pub election_timeout_max_us: Micros,
    /// Pre-vote (thesis §9.6): a node campaigns only after a majority said it could win,
    /// so a node rejoining from a partition does not raise the term and depose a stable
    /// leader. On by default: a disruptive rejoin costs an election, pre-vote one round trip.
    pub pre_vote: bool,
    /// Check-quorum (thesis §6.2): a leader that has not heard from a majority within an
    /// election timeout steps down, and a voter that heard from a leader that recently
    /// ignores vote requests (§4.2.3). On by default: a leader cut off from its majority
    /// stops taking proposals that could never commit.
    pub check_quorum: bool,
    /// Lease reads (thesis §6.4.1): a leader whose last heartbeat round a majority
    /// acknowledged less than `(1 - 1/LEASE_DRIFT_DIVISOR) * election_timeout_min_us` ago
    /// answers a read index at once. Assumes clocks whose rates differ by less than
    /// `1/LEASE_DRIFT_DIVISOR` (10%) over an election timeout; the lease is shorter than
    /// `election_timeout_min_us`, which is how long a voter ignores vote requests after
    /// hearing from the leader. Off by default: it trades a clock assumption for a round trip.
    pub read_lease: bool,
    /// Largest batch, in payload bytes (as `RingPaxosConfig`).
    pub batch_max_bytes: usize,
    /// Longest a value waits for more to join its batch while batches are in flight.
    pub batch_linger_us: Micros,
    /// The proposer's window: values and bytes proposed and not yet decided (`Busy`
    /// beyond). 2 MiB as in `RingPaxosConfig`, whose measurements chose it.
    pub window_values: usize,
    pub window_bytes: usize,
    pub max_value_bytes: usize,
    /// A proposer re-sends a batch not decided in time (adapted, `batcher.rs`; at once on a
    /// leader change).
    pub value_resend_us: Micros,
    /// Payload bytes per AppendEntries (at least one entry goes, whatever its size). 1 MiB,
    /// etcd's usual `MaxSizePerMsg`: a few batches per message, and a message small
    /// enough not to hold a heartbeat up for long on a shared link.
    pub max_append_bytes: usize,
    /// AppendEntries in flight per follower while replicating (etcd `MaxInflightMsgs`).
    /// 64: with batches of up to 256 KiB, 16 MiB per follower in flight, more than a
    /// loopback link carries in a round trip.
    pub max_inflight_appends: usize,
    /// Bytes of entries of its term a leader holds uncommitted; batches forwarded beyond it
    /// are dropped (the proposer re-sends them): the leader's queue limit (etcd
    /// `MaxUncommittedEntriesSize`). 64 MiB.
    pub max_uncommitted_bytes: usize,
    /// A learner is promoted to voter once its log is within this many entries of the
    /// leader's (§2.5.1: "add the servers but not counting them in majorities ... to let
    /// the new servers catch up"). 64 entries: a few round trips of batches.
    pub catch_up_entries: u64,
    /// The seed of the election timer's random source (splitmix64, mixed with the node id
    /// and the incarnation, so nodes sharing a seed still draw different timeouts).
    pub seed: u64,
    /// A voter that should lead whenever it can: a leader that sees it hold the whole
    /// committed log, remembering it (not amnesic), hands over with a leadership transfer
    /// (thesis §3.10), at most once per `election_timeout_max_us`. Not in the thesis;
    /// etcd and TiKV leave it to an operator or a balancer calling the transfer. `None` by
    /// default. The simulator sets it to the lowest id, as Sequence Paxos' suite gives
    /// that node the higher leader priority, so that a late joiner takes the leadership
    /// over (and its takeover can be struck by a crash half-way through its RequestVotes).
    pub preferred_leader: Option<NodeId>,
    /// A deliberately broken variant, for the simulator's mutation tests only (the
    /// `mutations` feature; see `crate::mutation`).
    pub mutation: crate::ring::MutationSlot,
}

/// Lease reads assume clock rates differ by less than 1/10 (see `RaftConfig::read_lease`).
pub const LEASE_DRIFT_DIVISOR: u64 = 10;

impl Default for RaftConfig {
    fn default() -> Self {
        RaftConfig {
            voters: Vec::new(),
            learners: Vec::new(),
            heartbeat_interval_us: 50_000,
            election_timeout_min_us: 300_000,
            election_timeout_max_us: 600_000,
            pre_vote: true,
            check_quorum: true,
            read_lease: false,
            batch_max_bytes: 256 << 10,
            batch_linger_us: 200,
            window_values: 20_000,
            window_bytes: 2 << 20,
            max_value_bytes: 16 << 20,
            value_resend_us: 1_000_000,
            max_append_bytes: 1 << 20,
            max_inflight_appends: 64,
            max_uncommitted_bytes: 64 << 20,
            catch_up_entries: 64,
            seed: 0,
            preferred_leader: None,
            mutation: Default::default(),
        }
    }
}

impl RaftConfig {
    /// Voters and learners by id, every other field at its default.
    pub fn new(voters: &[u32], learners: &[u32]) -> RaftConfig {
        RaftConfig {
            voters: voters.iter().map(|&i| NodeId(i)).collect(),
            learners: learners.iter().map(|&i| NodeId(i)).collect(),
            ..RaftConfig::default()
        }
    }

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

    /// The voters and learners of a `Configuration` (`reconfigure`'s input): acceptors
    /// vote, every other member is a learner.
    pub fn split(config: &Configuration) -> (Vec<NodeId>, Vec<NodeId>) {
        let mut voters: Vec<NodeId> = Vec::new();
        let mut learners: Vec<NodeId> = Vec::new();
        for m in &config.members {
            if m.roles.acceptor {
                voters.push(m.id);
            } else {
                learners.push(m.id);
            }
        }
        voters.sort_unstable();
        learners.sort_unstable();
        (voters, learners)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field: &'static str, reason: String| Err(ConfigError { field, reason });
        check_members(&self.voters, &self.learners)?;
        let positive = [
            ("heartbeat_interval_us", self.heartbeat_interval_us),
            ("election_timeout_min_us", self.election_timeout_min_us),
            ("batch_max_bytes", self.batch_max_bytes as u64),
            ("window_values", self.window_values as u64),
            ("window_bytes", self.window_bytes as u64),
            ("max_value_bytes", self.max_value_bytes as u64),
            ("value_resend_us", self.value_resend_us),
            ("max_append_bytes", self.max_append_bytes as u64),
            ("max_inflight_appends", self.max_inflight_appends as u64),
            ("max_uncommitted_bytes", self.max_uncommitted_bytes as u64),
        ];
        for (field, v) in positive {
            if v == 0 {
                return err(field, "must be greater than zero".into());
            }
        }
        if self.election_timeout_min_us <= 2 * self.heartbeat_interval_us {
            return err(
                "election_timeout_min_us",
                format!(
                    "{} us must exceed twice heartbeat_interval_us ({} us), or one lost \
                     heartbeat starts an election",
                    self.election_timeout_min_us, self.heartbeat_interval_us
                ),
            );
        }
        if self.election_timeout_max_us <= self.election_timeout_min_us {
            return err(
                "election_timeout_max_us",
                format!(
                    "{} us must exceed election_timeout_min_us ({} us): the timeouts are \
                     drawn from the range between them, so that votes rarely split",
                    self.election_timeout_max_us, self.election_timeout_min_us
                ),
            );
        }
        if self.max_value_bytes > (64 << 20) {
            return err("max_value_bytes", "at most 64 MiB".into());
        }
        if self.max_inflight_appends > (1 << 16) {
            return err("max_inflight_appends", "at most 65536".into());
        }
        Ok(())
    }
}

/// Voters and learners: at least one voter, no node twice, no node in both lists.
pub(crate) fn check_members(voters: &[NodeId], learners: &[NodeId]) -> Result<(), ConfigError> {
    let err = |field: &'static str, reason: String| Err(ConfigError { field, reason });
    if voters.is_empty() {
        return err("voters", "a configuration needs at least one voter".into());
    }
    if voters.len() + learners.len() > ENTRY_MEMBERS_MAX {
        return err(
            "voters",
            format!(
                "{} members, at most {ENTRY_MEMBERS_MAX}",
                voters.len() + learners.len()
            ),
        );
    }
    for (i, v) in voters.iter().enumerate() {
        if voters[..i].contains(v) {
            return err("voters", format!("node {} appears twice", v.0));
        }
    }
    for (i, l) in learners.iter().enumerate() {
        if learners[..i].contains(l) {
            return err("learners", format!("node {} appears twice", l.0));
        }
        if voters.contains(l) {
            return err("learners", format!("node {} is a voter and a learner", l.0));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field() {
        let ok = RaftConfig::new(&[0, 1, 2], &[3]);
        assert_eq!(ok.validate(), Ok(()));
        let field = |c: &RaftConfig| c.validate().map_err(|e| e.field);
        assert_eq!(field(&RaftConfig::new(&[], &[3])), Err("voters"));
        assert_eq!(field(&RaftConfig::new(&[1, 1], &[])), Err("voters"));
        assert_eq!(field(&RaftConfig::new(&[1], &[1])), Err("learners"));
        let mut c = ok.clone();
        c.election_timeout_max_us = c.election_timeout_min_us;
        assert_eq!(field(&c), Err("election_timeout_max_us"));
        let mut c = ok.clone();
        c.election_timeout_min_us = 2 * c.heartbeat_interval_us;
        assert_eq!(field(&c), Err("election_timeout_min_us"));
        let mut c = ok;
        c.max_inflight_appends = 0;
        assert_eq!(field(&c), Err("max_inflight_appends"));
    }
}
