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
//! - **The log is repaired.** An `AppendEntries` of a leader `L` of term `T` that this life
//!   received named `L`'s commit index `c` (the *target*), and this log now matches `L`'s
//!   up to `c`, where the entry is of term `T`: `L` has committed in its own term, so `c`
//!   is past the first entry `L` appended, and below that `L`'s log holds every entry
//!   committed before `T` (Leader Completeness; `L` was elected without this node's new
//!   life, which never voted). Anything committed in `T` with the forgotten
//!   acknowledgements is at or below `c` too: `L` sent `c` to this life, after the old one
//!   was gone. The target is the first such `c`, not the commit index of the latest
//!   message: a node catching up under load stays behind the leader's moving commit
//!   index for as long as the load lasts (`demo --protocol raft --kill`, 1 run in 10 on
//!   the 2-core machine, the restarted node never repaired and the next kill stalled the
//!   cluster). A target whose entry turns out to be of an earlier term, or that a
//!   snapshot covered (its term unknown here), is replaced by the latest message's.
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
    /// The leader's term and the commit index it named, which this log must match up to
    /// (see the module comment).
    pub target: Option<(u32, u64)>,
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

    /// A message of the leader of `leader_term` named its commit index `commit`: the first
    /// such of this leader's term in this life is the target the log must reach (see the
    /// module comment), whether or not the message's entries could be taken.
    pub(crate) fn note_repair_target(&mut self, leader_term: u32, commit: u64) {
        if let Some(r) = self.repair.as_mut() {
            let known = matches!(r.target, Some((t, _)) if t == leader_term);
            if commit > 0 && !known {
                r.target = Some((leader_term, commit));
            }
        }
    }

    /// After a snapshot of the leader of `leader_term` up to `upto`, whose last entry is of
    /// `last_term`, was installed: a leader snapshots committed entries only, so one of its
    /// own term shows that it committed in its term (everything committed before the term
    /// lies below), and one at or past the target holds whatever the forgotten
    /// acknowledgements helped commit. A node that catches up under load falls behind the
    /// leader's compaction again and again, and may never match its log entry by entry
    /// before the next snapshot comes (`demo --protocol raft --kill` on 2 busy cores).
    pub(crate) fn check_snapshot_repaired(
        &mut self,
        leader_term: u32,
        upto: u64,
        last_term: u32,
        out: &mut Out,
    ) {
        let Some(r) = self.repair.as_mut() else {
            return;
        };
        let Some((t, target)) = r.target else {
            return; // No commit index of this leader's heard yet.
        };
        if r.log_repaired || t != leader_term || last_term != leader_term || upto < target {
            return;
        }
        r.log_repaired = true;
        self.maybe_repaired(out);
    }

    /// After an `AppendEntries` of `leader_term` that left this log matching the leader's
    /// up to `self.leader_match`, naming the leader's commit index `commit`: whether this
    /// life's target is covered, at an entry of the leader's own term.
    pub(crate) fn check_log_repaired(&mut self, leader_term: u32, commit: u64, out: &mut Out) {
        let leader_match = self.leader_match;
        let Some(r) = self.repair.as_mut() else {
            return;
        };
        if r.log_repaired || commit == 0 {
            return;
        }
        let target = match r.target {
            Some((t, c)) if t == leader_term => c,
            _ => {
                r.target = Some((leader_term, commit));
                commit
            }
        };
        if leader_match < target {
            return;
        }
        let covered = |raft: &Raft, c: u64| raft.term_at(c) == Some(leader_term);
        let repaired = if covered(self, target) {
            true
        } else {
            // Of an earlier term, or behind a snapshot: the latest message's instead.
            if let Some(r) = self.repair.as_mut() {
                r.target = Some((leader_term, commit));
            }
            leader_match >= commit && covered(self, commit)
        };
        if !repaired {
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
