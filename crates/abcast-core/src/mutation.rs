//! Deliberately broken variants of the protocols (issue 15), built only for tests.
//!
//! A simulator that has never failed proves nothing. Each [`Mutation`] removes one rule the
//! protocols' safety rests on; the simulator's sweeps must catch every one of them, for U-Ring
//! Paxos, Ring Paxos and Multi-Ring Paxos (`abcast-sim/tests/mutations.rs`). A variant is
//! selected with `RingConfig::mutation` / `RingPaxosConfig::mutation` / `RaftConfig::mutation`, fields that exist only
//! with the `mutations` cargo feature, which only `abcast-sim`'s tests turn on: a node built
//! for use cannot run one. Without the feature every check below is a constant `false`.

use std::fmt;
use std::str::FromStr;

/// One rule removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mutation {
    /// Acceptors vote in phase 2 whatever the ballot's epoch: a ballot whose phase 1 counted
    /// an amnesic acceptor's forgotten promise collects votes again (seed 003 §4.2).
    VoteIgnoresEpoch,
    /// The coordinator counts an amnesic acceptor's Phase 1b in its quorum: the forgotten
    /// votes are missing from the quorum's report.
    AmnesicPromisesCount,
    /// A Repair ends amnesia at once: the acceptor counts again without first learning every
    /// decision up to the repair target, so its forgotten votes are missing.
    RepairIgnored,
    /// At takeover, the coordinator drops the decided entries phase 1 reported (neither
    /// recorded nor re-proposed): their instances get another decree.
    DecidedDroppedAtTakeover,
    /// The coordinator's trim point is one instance past what a quorum of learners'
    /// snapshots cover: an instance no quorum of snapshots holds is trimmed everywhere.
    TrimPastQuorum,
    /// An acceptor's vote leaves before the vote is durable (no group commit asked for):
    /// a machine crash forgets a vote that counted.
    NoSyncBeforeVote,
    // Sequence Paxos (seed 001 appendix B).
    /// An acceptor promises a ballot below the one it promised (Acceptor line 2 removed).
    SeqPaxosPromiseBelow,
    /// A new leader keeps its own log instead of adopting the promised suffix with the
    /// highest accepted round (Leader (1) lines 12-14 removed).
    SeqPaxosAdoptOwnLog,
    /// An amnesic follower's promise and acceptances count toward majorities.
    SeqPaxosAmnesicCounts,
    /// `Promise` and `Accepted` leave before what they report is durable.
    SeqPaxosNoSyncBeforeReply,
    /// A follower decides on a `Decide` while its log is not yet the leader's (prepare phase).
    SeqPaxosDecideInPrepare,
    /// A leader goes on appending proposals after its stop-sign (`STOPPED()` of appendix B
    /// removed, §2.4.3): the old configuration decides entries where the new one starts.
    SeqPaxosExtendAfterStopSign,
    /// Ballot Leader Election elects the highest ballot it heard whether or not its node is
    /// quorum-connected (the OmniPaxos EuroSys'23 rule removed, appendix A as written): in
    /// the quorum-loss scenario the old leader, cut off from its majority, stays the
    /// highest ballot every node hears through the one node that reaches everybody, and
    /// nobody replaces it.
    SeqPaxosBleIgnoresQuorumConnectivity,
    /// A Sequence Paxos node's snapshot compacts its whole log, undecided entries too, and
    /// takes them as decided (OmniPaxos compacts only up to the decided index).
    SeqPaxosTrimUndecided,
    /// An amnesic Sequence Paxos node repaired in `c_i` with a log ending in `SS_i` enters
    /// `c_{i+1}` as not amnesic, although its previous life may have promised there
    /// (issue 33, suspect 6).
    SeqPaxosRepairIgnoresStopSign,
    // Raft
    /// Raft voters grant votes without the up-to-date check (seed 001 §2.5): a candidate
    /// missing committed entries can win and overwrite them.
    RaftVoteWithoutLogCheck,
    /// A Raft leader commits an entry of an earlier term by counting replicas (the figure
    /// 8 case of the Raft paper; thesis §3.6.2): a later leader may replace it.
    RaftCommitOldTermByCount,
    /// A Raft follower's AppendEntries success and a voter's vote leave without waiting for
    /// the entries, term and vote to be durable: a crash forgets what counted.
    RaftNoSyncBeforeReply,
    /// A joint Raft configuration counts only the new voters' majority (seed 001 §2.5.1
    /// asks for both): C_old and C_new can decide apart.
    RaftJointSingleMajority,
    /// A Raft follower installs the leader's snapshot even when its commit index is past
    /// the snapshot (a duplicated or late InstallSnapshot), forgetting the committed
    /// entries after it: Raft §7 keeps them ("retain log entries following it").
    RaftInstallBelowCommit,
    /// A Raft leader serves lease reads again once a leadership transfer's deadline passed,
    /// although its `TimeoutNow` left (issue 33, suspect 1): the target's late campaign
    /// skips the voters' stickiness, so another leader may commit writes its reads miss.
    RaftLeaseAfterTimeoutNow,
    /// A Raft follower follows the leader an AppendEntries, heartbeat or snapshot chunk
    /// names even when it is not the message's sender (issue 33, suspect 9).
    RaftFollowNamedLeader,
    // Shared by the families
    /// The learners' de-duplication remembers only the latest few batch keys per origin
    /// (the memory before the delivered ranges, its window scaled down from 2^16 to 4): a
    /// re-sent batch decided further behind its first copy is delivered twice. Sequence
    /// Paxos and Raft run it (`dedup.rs`).
    DedupForgetsOldBatches,
    // Token ring (seed 002, Totem)
    /// Safe messages are delivered as soon as they are in order, like Agreed ones, without
    /// waiting for the two-round aru (seed 002 §III-B4): a member may deliver one that
    /// another member never gets.
    TokenSafeAtOnce,
    /// The token's aru is raised by any member to its own aru, not only by the member
    /// that lowered it (Totem's aru_id rule): messages are taken as held by every member,
    /// discarded and acknowledged, while one still lacks them.
    TokenAruRaisedByAnyone,
    /// The recovery step carries no old-ring messages (the retransmission queue stays
    /// empty): members moving to the new ring together deliver different sets.
    TokenSkipRecovery,
    /// A member takes every copy of the token, duplicates and retransmissions included
    /// (the `hop` check removed): two copies stamp different messages with one sequence
    /// number.
    TokenTakesDuplicateTokens,
    /// No flap damping (`holddown_us` treated as 0): a link cut one way makes the ring
    /// merge and split every merge period.
    TokenNoFlapDamping,
    // Storage
    /// The segmented log's recovery cuts zeros at the end of any segment, not only the
    /// last, and goes on with the next (issue 33, suspect 7): a group whose records in an
    /// earlier segment were lost is applied in part under its commit marker in the next,
    /// which counts only that segment's records. No sweep meets it (the simulator's disks
    /// never lose synced bytes); `storage::seglog::check` builds the damaged logs.
    SegLogZeroTailInEarlierSegment,
    /// No "failed to receive" rule (Corosync's `fail_to_recv_const`): a member that gets the
    /// token but none of the data holds the aru down for good, and no member of its ring
    /// discards or acknowledges anything again.
    TokenNoFailToRecv,
    // Process groups (issue 18, `groups/`)
    /// The state exchange after a configuration change keeps each node's own table
    /// instead of the union of the states: after a partition heals, the members of the
    /// other side are never known.
    GroupsNoStateExchange,
    /// Joins, leaves and messages delivered during a state exchange are applied at once,
    /// not held until it ends: members from the two sides of a healed partition deliver a
    /// message in different views.
    GroupsDeliverDuringExchange,
}

impl Mutation {
    pub const ALL: [Mutation; 32] = [
        Mutation::VoteIgnoresEpoch,
        Mutation::AmnesicPromisesCount,
        Mutation::RepairIgnored,
        Mutation::DecidedDroppedAtTakeover,
        Mutation::TrimPastQuorum,
        Mutation::NoSyncBeforeVote,
        Mutation::SeqPaxosPromiseBelow,
        Mutation::SeqPaxosAdoptOwnLog,
        Mutation::SeqPaxosAmnesicCounts,
        Mutation::SeqPaxosNoSyncBeforeReply,
        Mutation::SeqPaxosDecideInPrepare,
        Mutation::SeqPaxosExtendAfterStopSign,
        Mutation::SeqPaxosBleIgnoresQuorumConnectivity,
        Mutation::SeqPaxosTrimUndecided,
        Mutation::SeqPaxosRepairIgnoresStopSign,
        // Raft
        Mutation::RaftVoteWithoutLogCheck,
        Mutation::RaftCommitOldTermByCount,
        Mutation::RaftNoSyncBeforeReply,
        Mutation::RaftJointSingleMajority,
        Mutation::RaftInstallBelowCommit,
        Mutation::RaftLeaseAfterTimeoutNow,
        Mutation::RaftFollowNamedLeader,
        // Shared
        Mutation::DedupForgetsOldBatches,
        // Token ring
        Mutation::TokenSafeAtOnce,
        Mutation::TokenAruRaisedByAnyone,
        Mutation::TokenSkipRecovery,
        Mutation::TokenTakesDuplicateTokens,
        Mutation::TokenNoFlapDamping,
        Mutation::TokenNoFailToRecv,
        // Storage
        Mutation::SegLogZeroTailInEarlierSegment,
        // Process groups
        Mutation::GroupsNoStateExchange,
        Mutation::GroupsDeliverDuringExchange,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mutation::VoteIgnoresEpoch => "vote_ignores_epoch",
            Mutation::AmnesicPromisesCount => "amnesic_promises_count",
            Mutation::RepairIgnored => "repair_ignored",
            Mutation::DecidedDroppedAtTakeover => "decided_dropped_at_takeover",
            Mutation::TrimPastQuorum => "trim_past_quorum",
            Mutation::NoSyncBeforeVote => "no_sync_before_vote",
            Mutation::SeqPaxosPromiseBelow => "seqpaxos_promise_below",
            Mutation::SeqPaxosAdoptOwnLog => "seqpaxos_adopt_own_log",
            Mutation::SeqPaxosAmnesicCounts => "seqpaxos_amnesic_counts",
            Mutation::SeqPaxosNoSyncBeforeReply => "seqpaxos_no_sync_before_reply",
            Mutation::SeqPaxosDecideInPrepare => "seqpaxos_decide_in_prepare",
            Mutation::SeqPaxosExtendAfterStopSign => "seqpaxos_extend_after_stopsign",
            Mutation::SeqPaxosBleIgnoresQuorumConnectivity => {
                "seqpaxos_ble_ignores_quorum_connectivity"
            }
            Mutation::SeqPaxosTrimUndecided => "seqpaxos_trim_undecided",
            Mutation::SeqPaxosRepairIgnoresStopSign => "seqpaxos_repair_ignores_stop_sign",
            Mutation::RaftVoteWithoutLogCheck => "raft_vote_without_log_check",
            Mutation::RaftCommitOldTermByCount => "raft_commit_old_term_by_count",
            Mutation::RaftNoSyncBeforeReply => "raft_no_sync_before_reply",
            Mutation::RaftJointSingleMajority => "raft_joint_single_majority",
            Mutation::RaftInstallBelowCommit => "raft_install_below_commit",
            Mutation::RaftLeaseAfterTimeoutNow => "raft_lease_after_timeout_now",
            Mutation::RaftFollowNamedLeader => "raft_follow_named_leader",
            Mutation::DedupForgetsOldBatches => "dedup_forgets_old_batches",
            Mutation::TokenSafeAtOnce => "token_safe_at_once",
            Mutation::TokenAruRaisedByAnyone => "token_aru_raised_by_anyone",
            Mutation::TokenSkipRecovery => "token_skip_recovery",
            Mutation::TokenTakesDuplicateTokens => "token_takes_duplicate_tokens",
            Mutation::TokenNoFlapDamping => "token_no_flap_damping",
            Mutation::SegLogZeroTailInEarlierSegment => "seglog_zero_tail_in_earlier_segment",
            Mutation::TokenNoFailToRecv => "token_no_fail_to_recv",
            Mutation::GroupsNoStateExchange => "groups_no_state_exchange",
            Mutation::GroupsDeliverDuringExchange => "groups_deliver_during_exchange",
        }
    }
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mutation {
    type Err = String;
    fn from_str(s: &str) -> Result<Mutation, String> {
        Mutation::ALL
            .into_iter()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<_> = Mutation::ALL.iter().map(|m| m.name()).collect();
                format!(
                    "unknown mutation {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// Whether this build has the broken variants (the `mutations` feature).
pub const AVAILABLE: bool = cfg!(feature = "mutations");

/// The error of selecting a broken variant in a build without them.
#[cfg_attr(feature = "mutations", allow(dead_code))]
pub(crate) fn unavailable(m: Mutation) -> String {
    format!(
        "the mutation {m} exists only in a build with the `mutations` feature (abcast-core; \
         abcast-sim forwards it: cargo ... -p abcast-sim --features mutations)"
    )
}

/// Whether `active` (a configuration's `mutation`) is `m`. Always false without the
/// `mutations` feature, so the checks cost nothing in a real build.
#[inline(always)]
pub(crate) fn on(active: Option<Mutation>, m: Mutation) -> bool {
    cfg!(feature = "mutations") && active == Some(m)
}

/// A protocol configuration's deliberately broken variant (the simulator's mutation tests
/// only). Empty, and always `None`, without the `mutations` feature.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    #[cfg(feature = "mutations")]
    mutation: Option<Mutation>,
}

impl Slot {
    /// The broken variant selected; always `None` without the `mutations` feature.
    pub fn get(&self) -> Option<Mutation> {
        #[cfg(feature = "mutations")]
        {
            self.mutation
        }
        #[cfg(not(feature = "mutations"))]
        {
            None
        }
    }

    /// Selects a broken variant; refused in a build without the `mutations` feature.
    pub fn set(&mut self, m: Option<Mutation>) -> Result<(), String> {
        #[cfg(feature = "mutations")]
        {
            self.mutation = m;
            Ok(())
        }
        #[cfg(not(feature = "mutations"))]
        match m {
            Some(m) => Err(unavailable(m)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in Mutation::ALL {
            assert_eq!(m.name().parse::<Mutation>(), Ok(m));
        }
        assert!("nope".parse::<Mutation>().is_err());
    }
}
