//! Repair of an amnesic node (ours; neither the seed nor Raft has one: Raft assumes the
//! term, the vote and the log are on stable storage).
//!
//! A node restarted over a store that kept nothing (`[storage] kind = "memory"`) has
//! forgotten three things, and each is dangerous in its own way:
//!
//! 1. **Its votes.** Before the crash it may have voted in some term `T` for a candidate
//!    `C` that is still collecting votes. Voting again in `T` for another candidate could
//!    give `T` two leaders.
//! 2. **Its log.** Entries committed with its acknowledgements may be missing now; voting
//!    for a candidate by the up-to-date check against an empty log could elect a leader
//!    without them, and an acknowledgement it sends now could be counted for an entry
//!    that a majority holds only through its forgotten copy.
//! 3. **Its term**, which only matters through 1.
//!
//! Until repaired it never votes, never campaigns, and its replies say `amnesic`, so no
//! leader counts it (`mod.rs`). It is repaired, and counts and votes again, once both hold:
//!
//! - **The vote fence is known.** It asks every *other voter* of the configuration it knows
//!   for its current term (`TermQuery`, answered by any node in any state, the answer
//!   echoing the asker's incarnation so that an answer to an earlier life never counts)
//!   and from then on grants no vote, and campaigns in no term, at or below the highest
//!   answer (`vote_floor`). Why every other voter and not a majority: a candidate `C`
//!   that holds the forgotten vote for `T` is in term `T` for as long as that candidacy
//!   lives, so `C`'s own answer is at least `T`; a candidate that crashed since lost its
//!   candidacy with its memory (a durable one restarts a follower and must campaign in
//!   a new term). A majority of the others can miss `C` while `C` still gathers the
//!   votes it needs (5 nodes: `C` and one voter that `C`'s request reached late). An
//!   answer from a node that is amnesic itself is as good: what it campaigned for in an
//!   earlier life died with that life.
//! - **The log is repaired.** An `AppendEntries` of a leader `L` of term `T` left its log
//!   matching `L`'s up to `L`'s commit index `c`, and the entry at `c` is of term `T`: `L`
//!   has committed in its own term, so `c` is past the first entry `L` appended, and
//!   below that `L`'s log holds every entry committed before `T` (Leader Completeness;
//!   `L` was elected without this node's new life, which never voted). Anything
//!   committed in `T` with the forgotten acknowledgements is at or below `c` too.
//!
//! Once repaired, a vote in a term above the fence is its first in that term: any earlier
//! candidacy in that term would have been seen in the answers. The cost is liveness, not
//! safety: a node cannot be repaired while another voter stays silent (down, or cut off),
//! and a cluster whose majority is amnesic and unrepaired is stuck until enough of them
//! are repaired (by a leader, which needs a majority that counts): with 3 nodes, restart
//! them one at a time, each after the previous one was repaired.

use super::messages::{TermQuery, TermReply};
use super::{Message, Out, Raft};
use crate::event::Event;
use crate::types::{Micros, NodeId};
use std::collections::BTreeMap;

/// What an amnesic node has learned towards its repair.
#[derive(Clone, Debug, Default)]
pub(crate) struct Repair {
    /// The voters that answered this life's `TermQuery`, with their terms.
    pub heard: BTreeMap<NodeId, u32>,
    /// When the last round of queries left.
    pub asked_us: Option<Micros>,
    /// The log holds every committed entry (see the module comment).
    pub log_repaired: bool,
}

impl Raft {
    /// The other voters whose term an amnesic node must hear (both sets when joint).
    fn repair_voters(&self) -> Vec<NodeId> {
        let m = self.configs.current();
        let mut v: Vec<NodeId> = m.voters.iter().chain(&m.outgoing).copied().collect();
        v.sort_unstable();
        v.dedup();
        v.retain(|&n| n != self.me);
        v
    }

    /// Asks the voters not heard yet for their terms, every heartbeat interval.
    pub(crate) fn repair_tick(&mut self, out: &mut Out) {
        let (now, every) = (self.now, self.cfg.heartbeat_interval_us);
        let voters = self.repair_voters();
        let incarnation = self.incarnation;
        let Some(r) = self.repair.as_mut() else {
            return;
        };
        if r.asked_us.is_some_and(|t| now < t + every) {
            return;
        }
        if r.asked_us.is_none() {
            out.events.push(Event::RepairNeeded { upto: self.commit });
        }
        r.asked_us = Some(now);
        for v in voters {
            if !r.heard.contains_key(&v) {
                out.send(v, Message::TermQuery(TermQuery { incarnation }));
            }
        }
    }

    /// Any node answers with its term, whatever its state.
    pub(crate) fn on_term_query(&mut self, from: NodeId, m: TermQuery, out: &mut Out) {
        out.send(
            from,
            Message::TermReply(TermReply {
                term: self.term,
                incarnation: m.incarnation,
            }),
        );
    }

    pub(crate) fn on_term_reply(&mut self, from: NodeId, m: TermReply, out: &mut Out) {
        if m.incarnation != self.incarnation {
            return; // An answer to an earlier life's question.
        }
        let Some(r) = self.repair.as_mut() else {
            return;
        };
        let t = r.heard.entry(from).or_insert(m.term);
        *t = (*t).max(m.term);
        self.maybe_repaired(out);
    }

    /// After an `AppendEntries` of `leader_term` that left this log matching the leader's
    /// up to `self.leader_match`: whether that covers the leader's commit index `commit`,
    /// at an entry of the leader's own term.
    pub(crate) fn check_log_repaired(&mut self, leader_term: u32, commit: u64, out: &mut Out) {
        if self.repair.is_none() || commit == 0 || self.leader_match < commit {
            return;
        }
        if self.term_at(commit) != Some(leader_term) {
            return;
        }
        if let Some(r) = self.repair.as_mut() {
            r.log_repaired = true;
        }
        self.maybe_repaired(out);
    }

    /// Repaired once the log is and every other voter answered: the node counts and
    /// votes again, above the fence.
    fn maybe_repaired(&mut self, out: &mut Out) {
        let voters = self.repair_voters();
        let Some(r) = self.repair.as_ref() else {
            return;
        };
        if !r.log_repaired || voters.iter().any(|v| !r.heard.contains_key(v)) {
            return;
        }
        let fence = voters
            .iter()
            .filter_map(|v| r.heard.get(v))
            .copied()
            .max()
            .unwrap_or(0);
        self.vote_floor = self.vote_floor.max(fence);
        self.repair = None;
        self.amnesic = false;
        // Once what it holds now is durable, a restart on its store is not amnesic.
        self.store.mark_whole();
        out.events.push(Event::Repaired { upto: self.commit });
    }
}
