//! Linearizable reads without writing to the log: read index and lease reads (thesis
//! §6.4 and §6.4.1; etcd-io/raft `ReadIndex`).
//!
//! **Read index.** `read_index(id)` at the leader records the commit index as the read's
//! `upto`, then confirms that this node was still the leader *after* the read arrived: a
//! heartbeat round (`Heartbeat::ctx`, a round number; every periodic heartbeat is a round
//! too) acknowledged by a majority of each voter set. Then it answers `ReadState { id,
//! upto }`; the reader reads once its learner delivered up to `upto`. Every write
//! acknowledged before the read was committed, hence at or below `upto`. Reads arriving in
//! one input share the round sent at its end; a round sent before a read arrived never
//! confirms it.
//!
//! A leader that has not yet committed an entry of its term does not know the commit
//! index (an earlier leader may have committed more): its reads wait for its no-op to
//! commit. A follower answers `NotLeader { hint }`. Amnesic nodes' acknowledgements do not
//! count (they vote for nobody, so they say nothing about another leader).
//!
//! **Lease reads** (`RaftConfig::read_lease`). A voter that heard from the leader ignores
//! vote requests for `election_timeout_min_us` (stickiness, `election.rs`), so no other
//! leader can be elected before `sent + election_timeout_min_us` of the latest round a
//! majority acknowledged, `sent` being when the leader sent it (before any voter heard it).
//! The leader answers at once while its clock reads less than `sent + (1 - 1/10) *
//! election_timeout_min_us`. **Clock assumption:** the rates of any two nodes' clocks
//! differ by less than 10% (`config::LEASE_DRIFT_DIVISOR`) over an election timeout, and a
//! restarted voter's stickiness starts at its restart. No lease during a leadership
//! transfer (the target's candidacy bypasses stickiness), and none for the rest of the term
//! once its `TimeoutNow` left, even if the transfer is given up at its deadline: the target
//! may campaign on a late `TimeoutNow` and win with voters that acknowledged this leader's
//! last round a moment before (issue 33, suspect 1).

use super::config::LEASE_DRIFT_DIVISOR;
use super::{Out, Raft, Role};
use crate::ProposeError;
use crate::mutation::Mutation;
use crate::protocol::ReadState;
use crate::types::Micros;
use std::collections::VecDeque;

/// Reads waiting at a leader, at most (`Busy` beyond).
pub const READS_PENDING_MAX: usize = 1 << 16;

/// Rounds whose send time is kept for the lease.
const ROUNDS_KEPT: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PendingRead {
    id: u64,
    upto: u64,
    /// The first round sent after the read arrived.
    round: u64,
}

/// The leader's read state.
#[derive(Debug, Default)]
pub struct Reads {
    /// The last round started (heartbeats with this `ctx` left).
    last_round: u64,
    /// Recent rounds and when they were sent.
    rounds: VecDeque<(u64, Micros)>,
    pending: VecDeque<PendingRead>,
    /// Reads that arrived before the term's first commit.
    waiting: Vec<u64>,
    /// The highest round a majority acknowledged.
    confirmed_round: u64,
    /// The send time of that round: the lease runs from here.
    lease_from_us: Option<Micros>,
}

impl Reads {
    /// A new round leaves now: its number.
    pub(crate) fn start_round(&mut self, now: Micros) -> u64 {
        self.last_round += 1;
        self.rounds.push_back((self.last_round, now));
        if self.rounds.len() > ROUNDS_KEPT {
            self.rounds.pop_front();
        }
        self.last_round
    }
}

impl Raft {
    pub(crate) fn start_read(&mut self, id: u64, out: &mut Out) -> Result<(), ProposeError> {
        if self.role != Role::Leader {
            return Err(ProposeError::NotLeader { hint: self.leader });
        }
        let Some(lead) = self.lead.as_mut() else {
            return Err(ProposeError::NotLeader { hint: self.leader });
        };
        if lead.reads.pending.len() + lead.reads.waiting.len() >= READS_PENDING_MAX {
            return Err(ProposeError::Busy);
        }
        if !lead.term_committed {
            lead.reads.waiting.push(id);
            return Ok(());
        }
        self.serve_read(id, out);
        Ok(())
    }

    /// The term's first entry committed: the reads that waited for it go on.
    pub(crate) fn serve_waiting_reads(&mut self, out: &mut Out) {
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        let waiting = std::mem::take(&mut lead.reads.waiting);
        for id in waiting {
            self.serve_read(id, out);
        }
    }

    fn serve_read(&mut self, id: u64, out: &mut Out) {
        let me = self.me;
        let upto = self.commit;
        let now = self.now;
        let lease_us = self.cfg.election_timeout_min_us
            - self.cfg.election_timeout_min_us / LEASE_DRIFT_DIVISOR;
        let single = self.mutated(Mutation::RaftJointSingleMajority);
        let alone = self.configs.current().has_quorum(|n| n == me, single);
        let read_lease = self.cfg.read_lease;
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        let leased = read_lease
            && lead.transfer.is_none()
            && !lead.lease_revoked
            && lead.reads.lease_from_us.is_some_and(|t| now < t + lease_us);
        if alone || leased {
            out.reads.push(ReadState { id, upto });
            return;
        }
        let round = lead.reads.last_round + 1;
        lead.reads
            .pending
            .push_back(PendingRead { id, upto, round });
        lead.round_wanted = true;
    }

    /// A heartbeat round was acknowledged by someone: answer the reads a majority confirmed
    /// and extend the lease.
    pub(crate) fn on_round_acked(&mut self, out: &mut Out) {
        let me = self.me;
        let single = self.mutated(Mutation::RaftJointSingleMajority);
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        let progress = &lead.progress;
        let last_round = lead.reads.last_round;
        let confirmed = self.configs.current().quorum_index(
            |n| {
                if n == me {
                    last_round
                } else {
                    progress
                        .get(&n)
                        .filter(|p| !p.amnesic)
                        .map_or(0, |p| p.acked_round)
                }
            },
            single,
        );
        let reads = &mut lead.reads;
        if confirmed <= reads.confirmed_round {
            return;
        }
        reads.confirmed_round = confirmed;
        while reads.rounds.front().is_some_and(|&(r, _)| r < confirmed) {
            reads.rounds.pop_front();
        }
        if let Some(&(r, sent)) = reads.rounds.front()
            && r == confirmed
        {
            reads.lease_from_us = Some(reads.lease_from_us.map_or(sent, |t| t.max(sent)));
        }
        while let Some(p) = reads.pending.front().copied() {
            if p.round > confirmed {
                break;
            }
            reads.pending.pop_front();
            out.reads.push(ReadState {
                id: p.id,
                upto: p.upto,
            });
        }
    }
}
