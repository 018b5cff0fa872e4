//! Membership changes by joint consensus (seed 001 §2.5.1).
//!
//! - **A configuration is used as soon as it is in the log**, committed or not: the last
//!   membership entry decides who votes and whose majority commits ([`ConfigLog`]). When a
//!   follower's suffix is replaced, the configurations in it go too.
//! - **Joint consensus.** `reconfigure(C_new)` at the leader appends C_old,new (`voters` =
//!   C_new's, `outgoing` = C_old's): from then on an election and a commit need a majority
//!   of *both* sets. Once C_old,new is committed the leader (this one, or any later one
//!   that finds it committed in its log) appends C_new. Once C_new is committed the old
//!   configuration is no longer needed.
//! - **Learners first.** New voters join first as non-voting learners (a membership entry
//!   that only adds learners, safe on its own since learners never count) and the joint
//!   configuration is appended once each of them is within `catch_up_entries` of the
//!   leader's log: §2.5.1's "add the servers but not counting them in majorities ... to let
//!   the new servers catch up", so a change never stalls commits behind an empty log.
//! - **A leader not in C_new** replicates C_new without counting itself, and steps down
//!   once it is committed, after telling the most up-to-date new voter to campaign.
//! - **One change at a time**: a configuration entry is appended only when the previous
//!   one is committed and the leader has committed an entry of its own term (the fix to
//!   single-server changes in Ongaro's raft-dev post of 2015, kept here for all changes);
//!   another `reconfigure` meanwhile is refused with `Busy`.

use super::config::{RaftConfig, check_members};
use super::replication::Leader;
use super::{Out, Raft, Role};
use crate::ProposeError;
use crate::config::{Configuration, Member, Roles};
use crate::protocol::ReconfigureError;
use crate::replog::{EntryBody, Membership};
use crate::storage::{LogStore, StorageError};
use crate::types::NodeId;

/// The configurations of the log: the last committed one (or C_0), then every one above
/// the commit index, in index order. The last is the one in effect.
#[derive(Clone, Debug)]
pub struct ConfigLog {
    entries: Vec<(u64, Membership)>,
}

impl ConfigLog {
    /// The configuration in effect before the log held in `store` (C_0 at index 0, or a
    /// snapshot's at the index of the entry that carried it), then the membership entries
    /// of that log.
    pub(crate) fn recover(
        base: (u64, Membership),
        store: &dyn LogStore,
        chunk_bytes: usize,
        commit: u64,
    ) -> Result<ConfigLog, StorageError> {
        let mut log = ConfigLog {
            entries: vec![base],
        };
        let mut next = store.first_index();
        let last = store.last_index();
        while next <= last {
            let batch = store.entries(next, last + 1, chunk_bytes)?;
            let Some(end) = batch.last().map(|e| e.index) else {
                break;
            };
            for e in &batch {
                match EntryBody::decode(&e.payload) {
                    Ok(EntryBody::Membership(m)) => log.on_append(e.index, m),
                    Ok(_) => {}
                    Err(err) => {
                        return Err(StorageError(format!(
                            "entry {} does not decode: {err}",
                            e.index
                        )));
                    }
                }
            }
            next = end + 1;
        }
        log.on_commit(commit);
        Ok(log)
    }

    pub fn current(&self) -> &Membership {
        // Never empty: the first element is never removed.
        &self.entries[self.entries.len() - 1].1
    }

    /// The index of the entry holding the configuration in effect (0: C_0).
    pub fn current_index(&self) -> u64 {
        self.entries[self.entries.len() - 1].0
    }

    pub(crate) fn on_append(&mut self, index: u64, m: Membership) {
        assert!(
            index > self.current_index(),
            "configuration entries in index order"
        );
        self.entries.push((index, m));
    }

    /// The log lost its suffix from `index` on (a follower adopting its leader's).
    pub(crate) fn truncate_from(&mut self, index: u64) {
        while self.entries.len() > 1 && self.entries[self.entries.len() - 1].0 >= index {
            self.entries.pop();
        }
        assert!(
            self.entries[self.entries.len() - 1].0 < index || self.entries.len() == 1,
            "a committed configuration was truncated"
        );
    }

    /// The last configuration committed at `commit` (C_0 if none is).
    pub fn committed(&self, commit: u64) -> &Membership {
        self.entries
            .iter()
            .rev()
            .find(|(i, _)| *i <= commit)
            .map_or(&self.entries[0].1, |(_, m)| m)
    }

    /// Whether `n` is a voter of any configuration held: the last committed one or one
    /// above the commit index.
    pub(crate) fn names_voter(&self, n: NodeId) -> bool {
        self.entries.iter().any(|(_, m)| m.is_voter(n))
    }

    /// Configurations held (the last committed one and those above the commit index).
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Forgets the configurations older than the last committed one.
    pub(crate) fn on_commit(&mut self, commit: u64) {
        let keep_from = self
            .entries
            .iter()
            .rposition(|(i, _)| *i <= commit)
            .unwrap_or(0);
        self.entries.drain(..keep_from);
    }

    /// Every node but `me` that a configuration in the log names: the leader replicates to
    /// all of them (a removed node keeps taking entries until its removal is committed).
    pub(crate) fn peers(&self, me: NodeId) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .entries
            .iter()
            .flat_map(|(_, m)| m.all_nodes())
            .filter(|&n| n != me)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }
}

impl Membership {
    /// A voter of either set (joint: C_old,new is `voters ∪ outgoing`).
    pub(crate) fn is_voter(&self, n: NodeId) -> bool {
        self.voters.contains(&n) || self.outgoing.contains(&n)
    }

    pub(crate) fn voter_ids(&self) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self.voters.iter().chain(&self.outgoing).copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether the nodes `ok` accepts hold a majority of the voters, and of the outgoing
    /// voters when joint (`single`: the mutation that forgets the second).
    pub(crate) fn has_quorum(&self, ok: impl Fn(NodeId) -> bool, single: bool) -> bool {
        let majority = |set: &[NodeId]| set.iter().filter(|&&n| ok(n)).count() > set.len() / 2;
        majority(&self.voters) && (single || self.outgoing.is_empty() || majority(&self.outgoing))
    }

    /// The highest value a majority of the voters reach (of each set when joint): the
    /// commit index over match indexes, the confirmed round over acknowledged rounds.
    pub(crate) fn quorum_index(&self, value: impl Fn(NodeId) -> u64, single: bool) -> u64 {
        let of = |set: &[NodeId]| {
            let mut v: Vec<u64> = set.iter().map(|&n| value(n)).collect();
            v.sort_unstable_by(|a, b| b.cmp(a));
            v.get(set.len() / 2).copied().unwrap_or(0)
        };
        let new = of(&self.voters);
        if single || self.outgoing.is_empty() {
            new
        } else {
            new.min(of(&self.outgoing))
        }
    }
}

/// The configuration a membership entry stands for, as `ConfigChange` reports it: voters
/// (of both sets when joint) with every role, learners without the acceptor role.
pub(crate) fn to_configuration(m: &Membership) -> Configuration {
    let mut members: Vec<Member> = m
        .voter_ids()
        .into_iter()
        .map(|id| Member {
            id,
            roles: Roles::PAL,
        })
        .collect();
    for &id in &m.learners {
        if !m.is_voter(id) {
            members.push(Member {
                id,
                roles: Roles {
                    proposer: true,
                    acceptor: false,
                    learner: true,
                },
            });
        }
    }
    Configuration { id: m.id, members }
}

impl Raft {
    /// `Status::configuration` and `configuration_pending`: the last committed
    /// configuration, and where a change under way leads (its voters without the outgoing
    /// set, its learners), if one is: an entry above the commit index, a committed joint
    /// configuration not yet followed by C_new, or a change this leader holds (learners
    /// catching up).
    pub(crate) fn configuration_status(&self) -> (Configuration, Option<Configuration>) {
        let committed = self.configs.committed(self.commit);
        let current = self.configs.current();
        let target = |voters: &[NodeId], learners: &[NodeId], id: u64| {
            to_configuration(&Membership {
                id,
                voters: voters.to_vec(),
                outgoing: Vec::new(),
                learners: learners.to_vec(),
            })
        };
        let pending = if let Some(c) = self.lead.as_ref().and_then(|l| l.change.as_ref()) {
            Some(target(&c.voters, &c.learners, current.id))
        } else if self.configs.current_index() > self.commit || current.is_joint() {
            Some(target(&current.voters, &current.learners, current.id))
        } else {
            None
        };
        (to_configuration(committed), pending)
    }

    /// `Status::followers`: at the leader, every node it replicates to, with its match
    /// index and the commit index it was sent (`min(match, commit)`, as appends carry it).
    pub(crate) fn follower_progress(&self) -> Vec<crate::protocol::FollowerProgress> {
        let Some(lead) = &self.lead else {
            return Vec::new();
        };
        let current = self.configs.current();
        lead.progress
            .iter()
            .filter(|(n, _)| **n != self.me)
            .map(|(&n, p)| crate::protocol::FollowerProgress {
                node: n,
                accepted: p.match_index,
                decided: p.match_index.min(self.commit),
                voter: current.is_voter(n),
            })
            .collect()
    }
}

/// A change asked for at this leader, not yet at its joint stage's commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingChange {
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
}

impl Raft {
    /// `reconfigure` at this node: checks, then the first step.
    pub(crate) fn start_change(
        &mut self,
        config: &Configuration,
        out: &mut Out,
    ) -> Result<(), ReconfigureError> {
        let (voters, learners) = RaftConfig::split(config);
        check_members(&voters, &learners).map_err(ReconfigureError::Invalid)?;
        if self.role != Role::Leader {
            return Err(ReconfigureError::Refused(ProposeError::NotLeader {
                hint: self.leader,
            }));
        }
        if !self.change_allowed() || self.lead.as_ref().is_some_and(|l| l.change.is_some()) {
            return Err(ReconfigureError::Refused(ProposeError::Busy));
        }
        if let Some(lead) = self.lead.as_mut() {
            lead.change = Some(PendingChange { voters, learners });
        }
        self.advance_change(out);
        Ok(())
    }

    /// A configuration entry may be appended: this leader committed an entry of its term,
    /// the configuration in effect is committed, and no transfer is under way.
    fn change_allowed(&self) -> bool {
        self.lead
            .as_ref()
            .is_some_and(|l| l.term_committed && l.transfer.is_none())
            && self.configs.current_index() <= self.commit
    }

    /// The next step of a change, whenever one is possible: finish a committed joint
    /// configuration (whoever started it), add the new voters as learners, wait for them
    /// to catch up, append the joint configuration.
    pub(crate) fn advance_change(&mut self, out: &mut Out) {
        if !self.change_allowed() {
            return;
        }
        let pending = self.lead.as_ref().is_some_and(|l| l.change.is_some());
        if !pending && !self.configs.current().is_joint() {
            return;
        }
        let cur = self.configs.current().clone();
        if cur.is_joint() {
            self.append_membership(cur.voters.clone(), Vec::new(), cur.learners.clone(), out);
            if let Some(l) = self.lead.as_mut() {
                l.change = None;
            }
            return;
        }
        let Some(change) = self.lead.as_ref().and_then(|l| l.change.clone()) else {
            return;
        };
        let newcomers: Vec<NodeId> = change
            .voters
            .iter()
            .copied()
            .filter(|n| !cur.voters.contains(n))
            .collect();
        let missing: Vec<NodeId> = newcomers
            .iter()
            .copied()
            .filter(|n| !cur.learners.contains(n))
            .collect();
        if !missing.is_empty() {
            let mut learners = cur.learners.clone();
            learners.extend(missing);
            self.append_membership(cur.voters.clone(), Vec::new(), learners, out);
            return;
        }
        if !newcomers.iter().all(|&n| self.caught_up(n)) {
            return;
        }
        let same_voters = {
            let mut a = change.voters.clone();
            let mut b = cur.voters.clone();
            a.sort_unstable();
            b.sort_unstable();
            a == b
        };
        if same_voters {
            // Only learners change: no joint stage needed.
            self.append_membership(cur.voters.clone(), Vec::new(), change.learners, out);
            if let Some(l) = self.lead.as_mut() {
                l.change = None;
            }
        } else {
            self.append_membership(change.voters, cur.voters.clone(), change.learners, out);
        }
    }

    /// A learner to promote holds the log up to `catch_up_entries` from its end.
    fn caught_up(&self, n: NodeId) -> bool {
        let last = self.last_index();
        self.lead
            .as_ref()
            .and_then(|l| l.progress.get(&n))
            .is_some_and(|p| {
                !p.amnesic
                    && p.match_index > 0
                    && p.match_index.saturating_add(self.cfg.catch_up_entries) >= last
            })
    }

    fn append_membership(
        &mut self,
        voters: Vec<NodeId>,
        outgoing: Vec<NodeId>,
        learners: Vec<NodeId>,
        out: &mut Out,
    ) {
        let index = self.last_index() + 1;
        let m = Membership {
            id: index,
            voters,
            outgoing,
            learners,
        };
        let entry = EntryBody::Membership(m).entry(index, self.term_ballot());
        self.append_local(vec![entry], out);
    }

    /// After the commit index moved at the leader: the next step of a change, and the
    /// removed leader's exit.
    pub(crate) fn after_commit(&mut self, out: &mut Out) {
        self.advance_change(out);
        self.step_down_if_removed(out);
    }

    /// A leader that committed a configuration without itself as a voter steps down, after
    /// a `TimeoutNow` to the most up-to-date voter (§2.5.1; the hand-over shortens the time
    /// without a leader). Under load no voter holds the whole log when the change commits:
    /// the leader then transfers the leadership to the best one (thesis §3.10: it stops
    /// taking proposals, brings the target up to date, then sends `TimeoutNow`), and steps
    /// down once `TimeoutNow` left or the transfer's deadline passed. (Stepping down at
    /// once left the new configuration without a leader for an election timeout: `abcast
    /// bench reconfig` measured a 352 ms gap replacing the leader.)
    pub(crate) fn step_down_if_removed(&mut self, out: &mut Out) {
        if self.role != Role::Leader
            || self.configs.current_index() > self.commit
            || self.configs.current().is_voter(self.me)
        {
            return;
        }
        let voters = self.configs.current().voters.clone();
        let (now, last) = (self.now, self.last_index());
        let transfer = self.lead.as_ref().and_then(|l| l.transfer);
        match transfer {
            Some(t) if voters.contains(&t.to) && !t.sent && now < t.deadline_us => {
                // Under way: `send_timeout_now` goes once the target holds the log.
                return;
            }
            Some(_) => {}
            None => {
                let best = self.lead.as_ref().and_then(|l: &Leader| {
                    voters
                        .iter()
                        .filter_map(|v| l.progress.get(v).map(|p| (p.match_index, *v, p.amnesic)))
                        .filter(|(_, _, amnesic)| !amnesic)
                        .max_by_key(|(m, v, _)| (*m, std::cmp::Reverse(*v)))
                });
                if let Some((_, to, _)) = best {
                    let deadline_us = now + self.cfg.election_timeout_min_us;
                    if let Some(lead) = self.lead.as_mut() {
                        lead.transfer = Some(super::election::Transfer {
                            to,
                            deadline_us,
                            sent: false,
                        });
                    }
                    // The commit index reaches the followers too.
                    self.flush_leader(out);
                    self.send_timeout_now(out);
                    if self
                        .lead
                        .as_ref()
                        .and_then(|l| l.transfer)
                        .is_some_and(|t| !t.sent)
                    {
                        debug_assert!(best.is_some_and(|(m, _, _)| m < last));
                        self.send_append(to, false, out);
                        return;
                    }
                }
            }
        }
        // The commit index reaches the followers before this node goes quiet.
        self.flush_leader(out);
        let term = self.term;
        self.become_follower(term, None, true, out);
    }
}
