//! Leader election (seed 001 §2.5): randomised election timeouts, RequestVote with the
//! up-to-date check, and the thesis' additions: pre-vote (§9.6), leader stickiness
//! (§4.2.3), check-quorum (§6.2) and leadership transfer (§3.10).
//!
//! - A follower that hears from no leader for its election timeout campaigns, first with a
//!   pre-vote when `pre_vote` is on: it asks whether it *could* win in `term + 1` without
//!   changing anybody's term or vote, and only with a majority of such answers starts the
//!   real election. A node rejoining from a partition therefore does not raise the term
//!   and depose a stable leader.
//! - A voter grants at most one vote per term (stored durably before the reply leaves),
//!   and only to a candidate whose log is at least as up to date as its own (last term,
//!   then last index).
//! - A voter that heard from a leader less than `election_timeout_min_us` ago ignores
//!   pre-votes always, and votes too with `check_quorum` or `read_lease` (stickiness),
//!   unless the candidate campaigns on its leader's `TimeoutNow`.
//! - A leader that did not hear from a majority of voters during an election timeout
//!   steps down (`check_quorum`).
//! - In a joint configuration every decision needs a majority of both voter sets.
//! - An amnesic node never votes and never campaigns; a learner never campaigns. A
//!   repaired one votes and campaigns only in terms above its `vote_floor` (`repair.rs`).

use super::messages::{RequestVote, RequestVoteReply, TimeoutNow};
use super::replication::Leader;
use super::{Message, Out, Raft, Role};
use crate::event::Event;
use crate::mutation::Mutation;
use crate::replog::EntryBody;
use crate::types::{Ballot, Micros, NodeId};
use std::collections::BTreeMap;
use std::fmt;

/// The election's state on a node.
#[derive(Debug, Default)]
pub(crate) struct Election {
    /// A follower or candidate campaigns at this time.
    pub deadline_us: Micros,
    /// When this node last heard from a leader of its term (stickiness, pre-vote).
    pub leader_heard_us: Option<Micros>,
    /// The newest (term, message number) heard from a leader: only a newer message is a
    /// sign of the leader's life (`Heartbeat::seq`).
    pub heard_seq: (u32, u64),
    /// Answers to this node's current (pre-)campaign: voter -> granted.
    pub votes: BTreeMap<NodeId, bool>,
}

/// Why [`Raft::transfer_leadership`] did not start a transfer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransferError {
    NotLeader {
        hint: Option<NodeId>,
    },
    /// The target is not a voter of the configuration in effect.
    NotAVoter(NodeId),
    /// The target forgot its log in a restart: it can never win an election.
    Amnesic(NodeId),
    /// A transfer or a configuration change is under way.
    InProgress,
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransferError::NotLeader { hint: Some(l) } => {
                write!(f, "this node is not the leader; the leader is {l}")
            }
            TransferError::NotLeader { hint: None } => {
                write!(f, "this node is not the leader, and knows of none yet")
            }
            TransferError::NotAVoter(n) => write!(f, "{n} is not a voter"),
            TransferError::Amnesic(n) => {
                write!(f, "{n} restarted without its log and cannot be elected")
            }
            TransferError::InProgress => {
                write!(
                    f,
                    "a leadership transfer or configuration change is under way"
                )
            }
        }
    }
}

impl std::error::Error for TransferError {}

impl Raft {
    /// Whether this node may campaign: one that remembers its log and votes, and is a
    /// voter of the configuration in effect (either set when joint), or of a configuration
    /// it holds while the one in effect is not known committed. The second is Ongaro's
    /// thesis §4.2.2: "a server that is not part of its own latest configuration should
    /// still start new elections, as it might still be needed until the C_new entry is
    /// committed". Its own vote counts only where it is a voter (`tally` counts the
    /// configuration's voters alone). Without it a removed voter that alone holds the
    /// uncommitted C_new, whose leader restarted amnesic, refused every other candidate
    /// (their logs are behind) and never campaigned: no leader ever again (simulator
    /// reconfig seed 186 on memory stores, issue 33). Once it knows C_new committed it
    /// stops: C_new's majority holds C_new and elects without it, and a removed server
    /// that went on campaigning would only disrupt (§4.2.3).
    pub(crate) fn can_campaign(&self) -> bool {
        if self.amnesic {
            return false;
        }
        self.configs.current().is_voter(self.me)
            || (self.configs.current_index() > self.commit && self.configs.names_voter(self.me))
    }

    /// Whether a leader holds this node's allegiance: it leads, or heard from a leader less
    /// than `election_timeout_min_us` ago (thesis §4.2.3).
    pub(crate) fn in_lease(&self) -> bool {
        self.role == Role::Leader
            || self
                .election
                .leader_heard_us
                .is_some_and(|t| self.now < t + self.cfg.election_timeout_min_us)
    }

    /// A follower's or candidate's timer.
    pub(crate) fn tick_election(&mut self, out: &mut Out) {
        if self.now < self.election.deadline_us {
            return;
        }
        if !self.can_campaign() {
            self.reset_election_timer();
            return;
        }
        let pre = self.cfg.pre_vote;
        self.campaign(pre, false, "election timeout", out);
    }

    /// Starts a pre-vote (`pre`) or an election; `transfer`: on the leader's `TimeoutNow`.
    pub(crate) fn campaign(&mut self, pre: bool, transfer: bool, why: &str, out: &mut Out) {
        if !self.can_campaign() {
            return;
        }
        // Above the terms a repaired node may have voted in before it forgot (`repair.rs`).
        let Some(next_term) = self.term.max(self.vote_floor).checked_add(1) else {
            // 2^32 terms: this node can never campaign again.
            self.reset_election_timer();
            return;
        };
        self.lead = None;
        self.leader = None;
        self.leader_match = 0;
        self.election.votes.clear();
        self.election.votes.insert(self.me, true);
        self.reset_election_timer();
        let term = if pre {
            self.role = Role::PreCandidate;
            next_term
        } else {
            self.role = Role::Candidate;
            self.term = next_term;
            self.voted_for = Some(self.me);
            if !self.persist_term_and_vote(true, out) {
                return;
            }
            next_term
        };
        out.events.push(Event::PhaseOne {
            node: self.me,
            ballot: Ballot::new(term, self.me, self.incarnation),
            from: self.last_index() + 1,
            why: if pre {
                format!("{why}: pre-vote")
            } else {
                why.to_string()
            },
        });
        let msg = RequestVote {
            term,
            candidate: self.me,
            last_index: self.last_index(),
            last_term: self.last_term(),
            pre_vote: pre,
            transfer,
        };
        for v in self.configs.current().voter_ids() {
            if v != self.me {
                out.send(v, Message::RequestVote(msg.clone()));
            }
        }
        self.tally(out);
    }

    pub(crate) fn on_request_vote(&mut self, from: NodeId, m: RequestVote, out: &mut Out) {
        let sync = !self.mutated(Mutation::RaftNoSyncBeforeReply);
        let reply = |term, granted| {
            Message::RequestVoteReply(RequestVoteReply {
                term,
                granted,
                pre_vote: m.pre_vote,
            })
        };
        let sticky = m.pre_vote || self.cfg.check_quorum || self.cfg.read_lease;
        if m.term > self.term && sticky && !m.transfer && self.in_lease() {
            // A leader is heard: neither the term nor the vote moves (§4.2.3, §9.6).
            out.send(from, reply(self.term, false));
            return;
        }
        if m.term < self.term {
            out.send(from, reply(self.term, false));
            return;
        }
        let log_ok = (m.last_term, m.last_index) >= (self.last_term(), self.last_index())
            || self.mutated(Mutation::RaftVoteWithoutLogCheck);
        if m.pre_vote {
            // Nothing changes here: the answer says whether a real vote would be granted.
            let could_vote = m.term > self.term
                || self.voted_for == Some(m.candidate)
                || (self.voted_for.is_none() && self.leader.is_none());
            let granted = could_vote && log_ok && !self.amnesic && m.term > self.vote_floor;
            out.send(
                from,
                reply(if granted { m.term } else { self.term }, granted),
            );
            return;
        }
        if m.term > self.term {
            // Seed 001 fig. 3 / Raft fig. 2: only granting the vote (below) or hearing a
            // leader restarts the election timer, not the higher term alone. Restarting it
            // here let a candidate whose log is behind, campaigning again and again without
            // pre-vote, keep the one voter that could win from ever campaigning (simulator
            // crash seed 118 with `pre_vote = false`, issue 33).
            let deadline_us = self.election.deadline_us;
            self.become_follower(m.term, None, sync, out);
            if self.failed.is_some() {
                return;
            }
            if deadline_us > self.now {
                self.election.deadline_us = deadline_us;
            }
        }
        let can_vote = self.voted_for.is_none() || self.voted_for == Some(m.candidate);
        let granted = can_vote && log_ok && !self.amnesic && m.term > self.vote_floor;
        if granted {
            assert!(
                self.voted_for.is_none() || self.voted_for == Some(m.candidate),
                "{} votes twice in term {}",
                self.me,
                self.term
            );
            assert!(!self.amnesic, "an amnesic node never votes");
            self.voted_for = Some(m.candidate);
            if !self.persist_term_and_vote(sync, out) {
                return;
            }
            self.reset_election_timer();
        }
        out.send(from, reply(self.term, granted));
    }

    pub(crate) fn on_vote_reply(&mut self, from: NodeId, m: RequestVoteReply, out: &mut Out) {
        if m.pre_vote {
            if self.role != Role::PreCandidate {
                return;
            }
            if m.granted && m.term == self.term.saturating_add(1) {
                self.election.votes.insert(from, true);
            } else if !m.granted && m.term > self.term {
                self.become_follower(m.term, None, true, out);
                return;
            } else if !m.granted {
                self.election.votes.insert(from, false);
            } else {
                return;
            }
        } else {
            if m.term > self.term {
                self.become_follower(m.term, None, true, out);
                return;
            }
            if self.role != Role::Candidate || m.term != self.term {
                return;
            }
            self.election.votes.insert(from, m.granted);
        }
        self.tally(out);
    }

    /// Counts the answers: won (a majority of each voter set granted), lost (no majority
    /// is possible any more), or still waiting.
    fn tally(&mut self, out: &mut Out) {
        let single = self.mutated(Mutation::RaftJointSingleMajority);
        let votes = &self.election.votes;
        let won = self
            .configs
            .current()
            .has_quorum(|n| votes.get(&n) == Some(&true), single);
        let possible = self
            .configs
            .current()
            .has_quorum(|n| votes.get(&n) != Some(&false), single);
        match (won, self.role) {
            (true, Role::PreCandidate) => self.campaign(false, false, "pre-vote won", out),
            (true, Role::Candidate) => self.become_leader(out),
            (false, Role::PreCandidate | Role::Candidate) if !possible => {
                let term = self.term;
                self.become_follower(term, None, true, out);
            }
            _ => {}
        }
    }

    /// Won the election: lead, starting the term with a no-op (thesis §3.6.2: a leader
    /// learns what is committed by committing an entry of its own term).
    pub(crate) fn become_leader(&mut self, out: &mut Out) {
        assert_eq!(
            self.role,
            Role::Candidate,
            "only a candidate becomes leader"
        );
        assert_eq!(self.voted_for, Some(self.me), "a leader voted for itself");
        self.role = Role::Leader;
        self.leader = Some(self.me);
        self.election.votes.clear();
        let last = self.last_index();
        let peers = self.configs.peers(self.me);
        self.lead = Some(Leader::new(&peers, last, self.now, &self.cfg));
        out.events.push(Event::Leading {
            node: self.me,
            ballot: self.term_ballot(),
            ring: Vec::new(),
            decided_upto: self.commit,
            reproposed: (self.commit + 1, last),
        });
        let noop = EntryBody::Noop.entry(last + 1, self.term_ballot());
        if let Some(l) = self.lead.as_mut() {
            l.noop_index = noop.index;
        }
        self.append_local(vec![noop], out);
    }

    /// Check-quorum (thesis §6.2): a leader steps down unless a majority of each voter
    /// set was heard from during the last election timeout.
    pub(crate) fn check_quorum(&mut self, out: &mut Out) {
        let me = self.me;
        let single = self.mutated(Mutation::RaftJointSingleMajority);
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        if self.now < lead.check_quorum_due_us {
            return;
        }
        lead.check_quorum_due_us = self.now + self.cfg.election_timeout_min_us;
        let progress = &lead.progress;
        let active = self.configs.current().has_quorum(
            |n| {
                n == me
                    || progress
                        .get(&n)
                        .is_some_and(|p| p.recent_active && !p.amnesic)
            },
            single,
        );
        for p in lead.progress.values_mut() {
            p.recent_active = false;
        }
        if self.cfg.check_quorum && !active {
            let term = self.term;
            self.become_follower(term, None, true, out);
        }
    }

    /// Leadership transfer (thesis §3.10): the leader stops taking proposals, brings `to`
    /// up to date, then tells it to campaign at once (`TimeoutNow`). Abandoned after an
    /// election timeout.
    pub fn transfer_leadership(
        &mut self,
        now: Micros,
        to: NodeId,
        out: &mut Out,
    ) -> Result<(), TransferError> {
        if !self.begin(now) || self.role != Role::Leader {
            return Err(TransferError::NotLeader { hint: self.leader });
        }
        if to == self.me {
            return Ok(());
        }
        if !self.configs.current().voters.contains(&to) {
            return Err(TransferError::NotAVoter(to));
        }
        let deadline = self.now + self.cfg.election_timeout_min_us;
        let last = self.last_index();
        let Some(lead) = self.lead.as_mut() else {
            return Err(TransferError::NotLeader { hint: self.leader });
        };
        if lead.transfer.is_some() || lead.change.is_some() {
            return Err(TransferError::InProgress);
        }
        let Some(pr) = lead.progress.get(&to) else {
            return Err(TransferError::NotAVoter(to));
        };
        if pr.amnesic {
            return Err(TransferError::Amnesic(to));
        }
        let caught_up = pr.match_index == last;
        lead.transfer = Some(Transfer {
            to,
            deadline_us: deadline,
            sent: false,
        });
        if caught_up {
            self.send_timeout_now(out);
        } else {
            self.send_append(to, false, out);
        }
        self.flush(out);
        Ok(())
    }

    /// Sends `TimeoutNow` to the transfer target once it holds the whole log.
    pub(crate) fn send_timeout_now(&mut self, out: &mut Out) {
        let last = self.last_index();
        let term = self.term;
        let me = self.me;
        let revoke = !self.mutated(Mutation::RaftLeaseAfterTimeoutNow);
        let Some(lead) = self.lead.as_mut() else {
            return;
        };
        let Some(t) = lead.transfer.as_mut() else {
            return;
        };
        if t.sent
            || lead
                .progress
                .get(&t.to)
                .is_none_or(|p| p.match_index < last)
        {
            return;
        }
        t.sent = true;
        // From here the target may win an election whose voters ignore their stickiness
        // (its campaign says `transfer`), however late the `TimeoutNow` arrives: this term's
        // lease is over for good, even once the transfer is given up (`read.rs`).
        lead.lease_revoked = revoke;
        out.send(t.to, Message::TimeoutNow(TimeoutNow { term, leader: me }));
    }

    pub(crate) fn on_timeout_now(&mut self, from: NodeId, m: TimeoutNow, out: &mut Out) {
        if m.term < self.term || m.leader != from {
            return;
        }
        // A transfer's campaign starts at once: no sequence number is needed to tell a
        // held message from a fresh one (the campaign resets the timer anyway).
        if self.follow(from, m.term, m.leader, 0, true, out)
            && self.failed.is_none()
            && self.can_campaign()
        {
            self.campaign(false, true, "leadership transfer", out);
        }
    }
}

/// A leadership transfer under way at the leader.
#[derive(Clone, Copy, Debug)]
pub struct Transfer {
    pub to: NodeId,
    pub deadline_us: Micros,
    /// `TimeoutNow` left.
    pub sent: bool,
}
