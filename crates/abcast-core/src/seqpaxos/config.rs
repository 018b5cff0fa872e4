//! Sequence Paxos configuration: the members, each node's leader priority, and the timers of
//! Ballot Leader Election and of the leader's re-sends.

use crate::batcher::BatchLimits;
use crate::config::{ConfigError, Configuration, Member, Roles};
use crate::types::{Micros, NodeId};

/// Members a configuration may have (messages and quorum arithmetic assume a small group).
pub const MAX_MEMBERS: usize = 64;

/// How a node that lacks the final sequence `σ_i` gets it (seed 001 §4.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Transfer {
    /// The fetcher asks segments of the index range of several nodes in parallel, and asks
    /// again (another node) when one does not answer within `resend_us`.
    #[default]
    Pull,
    /// The leader that decided `SS_i` pushes the log to the new members at once, one
    /// message in flight per member, paced by their acknowledgements; a fetcher whose
    /// pushes stop for `resend_us` pulls the rest.
    Eager,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqPaxosConfig {
    /// The configuration id `i` (§2.4.3: `c_i`); 0 for the first.
    pub config_id: u64,
    /// Every member is a replica (proposer, acceptor, learner); a member without the
    /// acceptor role is refused for now.
    pub members: Vec<Member>,
    /// Leader priorities, `(node, priority)`, for this and later configurations: among
    /// quorum-connected candidates of the same
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
    /// Payload bytes of entries the leader appended and are not chosen yet (its undecided
    /// tail), and of the proposals it holds while it prepares; batches beyond it are
    /// dropped for their proposer to re-send (etcd's `MaxUncommittedEntriesSize`, Raft's
    /// `max_uncommitted_bytes`). Not in the thesis, whose messages have no size limit:
    /// a node's undecided tail is what its `Promise` carries to the next leader, and what
    /// an `AcceptSync` must carry past the decided entries, so it must fit in one frame
    /// of the runtime (64 MiB) with room to spare.
    pub uncommitted_bytes_max: usize,
    /// The proposer's batching window (see `batcher.rs`).
    pub batch_max_bytes: usize,
    pub batch_linger_us: Micros,
    pub window_values: usize,
    pub window_bytes: usize,
    pub max_value_bytes: usize,
    pub value_resend_us: Micros,
    /// Proposals the leader holds while it prepares (`propCmds`), in batches; also the
    /// proposals a node holds between two configurations (after `SS_i`, until it knows
    /// the next configuration's leader).
    pub pending_batches_max: usize,
    /// How a new member gets the final sequence (§4.4: pull or eager).
    pub transfer: Transfer,
    /// Entries per segment a fetcher asks one node for (each answer is also bounded by
    /// `max_message_bytes`).
    pub fetch_segment_entries: u64,
    /// Nodes a fetcher asks at once (segments in flight), at most.
    pub fetch_parallel: usize,
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
            uncommitted_bytes_max: 16 << 20,
            batch_max_bytes: 64 << 10,
            batch_linger_us: 200,
            // Raft's and the peer cores' window. With 200,000 values and 16 MiB per proposer
            // the undecided tail of a loaded leader outgrew the runtime's 64 MiB frame, and
            // the next leader's promises could not be sent (`abcast demo --protocol
            // seqpaxos` at 1 KiB values stalled a follower); benches set their own.
            window_values: 20_000,
            window_bytes: 2 << 20,
            max_value_bytes: 4 << 20,
            value_resend_us: 2_000_000,
            pending_batches_max: 1 << 16,
            transfer: Transfer::Pull,
            fetch_segment_entries: 512,
            fetch_parallel: 4,
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
        // Priorities may name nodes of no configuration yet (a later configuration's
        // members): a node outside the configuration is simply no candidate. Twice is
        // refused.
        let mut named: Vec<NodeId> = self.priorities.iter().map(|(n, _)| *n).collect();
        named.sort_unstable();
        if let Some(w) = named.windows(2).find(|w| w[0] == w[1]) {
            return err("priorities", format!("{} is named twice", w[0]));
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
        if self.uncommitted_bytes_max < self.max_message_bytes {
            return err(
                "uncommitted_bytes_max",
                format!(
                    "{} is below max_message_bytes ({})",
                    self.uncommitted_bytes_max, self.max_message_bytes
                ),
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
        if self.fetch_segment_entries == 0 {
            return err("fetch_segment_entries", "must be above 0".into());
        }
        if self.fetch_parallel == 0 || self.fetch_parallel > MAX_MEMBERS {
            return err(
                "fetch_parallel",
                format!("{} is not in 1..={MAX_MEMBERS}", self.fetch_parallel),
            );
        }
        Ok(())
    }
}
