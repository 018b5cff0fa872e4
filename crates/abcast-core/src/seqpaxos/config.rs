//! Sequence Paxos configuration: the members, each node's leader priority, and the timers of
//! Ballot Leader Election and of the leader's re-sends.

use crate::batcher::BatchLimits;
use crate::config::{ConfigError, Configuration, Member, Roles};
use crate::types::{Micros, NodeId};

/// Members a configuration may have (messages and quorum arithmetic assume a small group).
pub const MAX_MEMBERS: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqPaxosConfig {
    /// The configuration id `i` (§2.4.3: `c_i`); 0 for the first.
    pub config_id: u64,
    /// Every member is a replica (proposer, acceptor, learner); a member without the
    /// acceptor role is refused for now.
    pub members: Vec<Member>,
    /// Leader priorities, `(node, priority)`: among quorum-connected candidates of the same
    /// ballot round the higher priority wins (OmniPaxos' `leader_priority`). Default 0.
    pub priorities: Vec<(NodeId, u8)>,
    /// The BLE heartbeat delay Δ (appendix A line 7): one round of heartbeats per Δ, a
    /// leader is replaced after one round without it. The election timeout.
    pub heartbeat_interval_us: Micros,
    /// The delay grows by Δ on a late reply (appendix A line 27), up to this many Δ.
    pub heartbeat_delay_max_rounds: u32,
    /// The leader re-sends a Prepare not answered, or entries not accepted, after this long;
    /// a follower that waits as long for an AcceptSync asks for one again.
    pub resend_us: Micros,
    /// Largest Accept or AcceptSync, in payload bytes (a follower far behind is caught up in
    /// several).
    pub max_message_bytes: usize,
    /// The proposer's batching window (see `batcher.rs`).
    pub batch_max_bytes: usize,
    pub batch_linger_us: Micros,
    pub window_values: usize,
    pub window_bytes: usize,
    pub max_value_bytes: usize,
    pub value_resend_us: Micros,
    /// Proposals the leader holds while it prepares (`propCmds`), in batches.
    pub pending_batches_max: usize,
    /// A deliberately broken variant (tests only, `mutations` feature).
    pub mutation: crate::mutation::Slot,
}

impl Default for SeqPaxosConfig {
    fn default() -> Self {
        SeqPaxosConfig {
            config_id: 0,
            members: Vec::new(),
            priorities: Vec::new(),
            // 50 ms rounds: a leader that fails is replaced after 100 to 150 ms. OmniPaxos
            // recommends an election tick of its flush period times a few; the thesis used
            // 5 s on a LAN to keep elections out of its throughput runs.
            heartbeat_interval_us: 50_000,
            heartbeat_delay_max_rounds: 3,
            resend_us: 100_000,
            max_message_bytes: 4 << 20,
            batch_max_bytes: 64 << 10,
            batch_linger_us: 200,
            window_values: 200_000,
            window_bytes: 16 << 20,
            max_value_bytes: 4 << 20,
            value_resend_us: 2_000_000,
            pending_batches_max: 1 << 16,
            mutation: crate::mutation::Slot::default(),
        }
    }
}

impl SeqPaxosConfig {
    /// Every node of `ids` a replica, in the first configuration.
    pub fn replicas(ids: &[u32]) -> SeqPaxosConfig {
        SeqPaxosConfig {
            members: ids
                .iter()
                .map(|&i| Member {
                    id: NodeId(i),
                    roles: Roles::PAL,
                })
                .collect(),
            ..SeqPaxosConfig::default()
        }
    }

    /// The configuration as the protocol vocabulary names it.
    pub fn configuration(&self) -> Configuration {
        Configuration {
            id: self.config_id,
            members: self.members.clone(),
        }
    }

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

    pub fn priority(&self, node: NodeId) -> u8 {
        self.priorities
            .iter()
            .find(|(n, _)| *n == node)
            .map_or(0, |(_, p)| *p)
    }

    pub fn contains(&self, node: NodeId) -> bool {
        self.members.iter().any(|m| m.id == node)
    }

    /// A majority of the members: `⌈(|Π|+1)/2⌉`.
    pub fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.configuration().validate()?;
        let err = |field: &'static str, reason: String| Err(ConfigError { field, reason });
        if self.members.len() > MAX_MEMBERS {
            return err(
                "members",
                format!("{} members; at most {MAX_MEMBERS}", self.members.len()),
            );
        }
        if let Some(m) = self.members.iter().find(|m| !m.roles.acceptor) {
            return err(
                "members",
                format!(
                    "{} is not an acceptor; every Sequence Paxos member is a replica",
                    m.id
                ),
            );
        }
        if let Some((n, _)) = self.priorities.iter().find(|(n, _)| !self.contains(*n)) {
            return err("priorities", format!("{n} is not a member"));
        }
        if self.heartbeat_interval_us == 0 {
            return err("heartbeat_interval_us", "must be above 0".into());
        }
        if self.heartbeat_delay_max_rounds == 0 {
            return err("heartbeat_delay_max_rounds", "must be at least 1".into());
        }
        if self.resend_us == 0 {
            return err("resend_us", "must be above 0".into());
        }
        if self.max_message_bytes < 1024 {
            return err(
                "max_message_bytes",
                format!("{} is below 1024", self.max_message_bytes),
            );
        }
        if self.batch_max_bytes == 0 || self.window_values == 0 || self.window_bytes == 0 {
            return err(
                "batch_max_bytes",
                "batch and window limits must be above 0".into(),
            );
        }
        if self.pending_batches_max == 0 {
            return err("pending_batches_max", "must be above 0".into());
        }
        Ok(())
    }
}
