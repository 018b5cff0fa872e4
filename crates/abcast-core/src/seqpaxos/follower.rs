//! The follower's side of Sequence Paxos: appendix B, "Acceptor & Learner" — `Prepare`
//! (lines 1-6), `AcceptSync` (lines 7-12), `Accept` (lines 13-16), `Decide` (lines 17-21) —
//! and its flush: the latest `Accepted`, read acknowledgements, and asking to be prepared
//! again when a message was lost.

use super::messages::{Accept, Accepted, Decide, Message, Nack, Prepare, Promise};
use super::{Out, Phase, Role, SeqPaxos};
use crate::mutation::Mutation;
use crate::storage::Entry;
use crate::types::{Ballot, NodeId};

impl SeqPaxos {
    /// Refuses a message of ballot `n` below the promise, telling its sender.
    fn refuse(&self, to: NodeId, n: Ballot, out: &mut Out) {
        let promised = self.store.promised();
        if n < promised {
            out.send(
                to,
                Message::Nack(Nack {
                    config: self.config_id(),
                    promised,
                }),
            );
        }
    }

    /// Marks an acceptor write: its reply leaves after the group commit.
    fn wrote(&self, out: &mut Out) {
        if !self.mutation(Mutation::SeqPaxosNoSyncBeforeReply) {
            out.needs_sync = true;
        }
    }

    /// Acceptor lines 1-6. A `Prepare` of the very ballot this node promised, from that
    /// ballot's own leader, is answered again (not in the thesis: it is how a leader
    /// re-synchronises a follower after a lost message or a dropped session).
    pub(crate) fn on_prepare(&mut self, from: NodeId, m: Prepare, out: &mut Out) {
        if m.n.node != from {
            return;
        }
        let n_prom = self.store.promised();
        let again = n_prom == m.n && self.role == Role::Follower;
        if !(n_prom < m.n || again || self.mutation(Mutation::SeqPaxosPromiseBelow)) {
            self.refuse(from, m.n, out);
            return;
        }
        if n_prom < m.n || self.mutation(Mutation::SeqPaxosPromiseBelow) {
            // Line 3.
            if let Err(e) = self.store.set_promised(m.n) {
                self.store_failed("promising", e);
            }
            self.wrote(out);
        }
        if self.role == Role::Leader {
            self.step_down(m.n, out);
        }
        // Line 4.
        self.phase = Phase::Prepare;
        self.phase_since_us = self.now;
        self.set_leader_hint(m.n);
        self.ble.observe_leader(m.n);
        // Line 5.
        // Line 5, from the higher of the leader's and this node's decided lengths: what
        // lies between is chosen, and a leader that lacks it pulls it apart (`leader.rs`,
        // `CatchUp`), so the suffix is this log's undecided tail, which fits in a message.
        let n_a = self.store.accepted_round();
        let len = self.log_len();
        let start = m.ld.max(self.store.decided_idx()) + 1;
        let suffix: Vec<Entry> = if n_a >= m.n_a && len >= start {
            match self.store.entries(start, len + 1, usize::MAX) {
                Ok(e) => e,
                Err(e) => self.store_failed("reading the suffix to promise", e),
            }
        } else {
            Vec::new()
        };
        // Line 6.
        out.send(
            from,
            Message::Promise(Promise {
                config: self.config_id(),
                n: m.n,
                n_a,
                ld: self.store.decided_idx(),
                log_len: len,
                suffix,
                amnesic: self.amnesic,
            }),
        );
    }

    /// Acceptor lines 7-12.
    pub(crate) fn on_accept_sync(&mut self, from: NodeId, m: Accept, out: &mut Out) {
        let promised = self.store.promised();
        if m.n != promised {
            self.refuse(from, m.n, out);
            return;
        }
        if self.role != Role::Follower {
            return;
        }
        // A sync of the round this log accepted is taken in the accept phase too: a
        // follower that asked to be prepared again (an Accept overtook the first sync) and
        // answered the new Prepare before the first sync arrived is in the accept phase
        // when the second one comes, and the leader waits for its Accepted: ignored, it
        // stalled the follower until the leader's re-send (`resend_us`, 100 ms; partial
        // mix, seeds 86 and 235).
        let same_round = self.store.accepted_round() == m.n;
        if self.phase != Phase::Prepare && !same_round {
            return;
        }
        if same_round {
            // A second sync in the round this log already accepted (a re-prepare after a
            // lost message, or a duplicate): the log is a prefix of this leader's sequence
            // and its entries may have counted toward a chosen length, so it is never cut,
            // only extended (an older sync arriving late would otherwise shorten it: the
            // simulator's learner_skip seed 76).
            self.extend(m.from, &m.entries, out);
            self.phase = Phase::Accept;
            self.phase_since_us = self.now;
            self.accepted_owed = true;
            let early = self.early_decide.take().filter(|&(n, _)| n == m.n);
            self.decide(m.decided.max(early.map_or(0, |(_, ld)| ld)), out);
            return;
        }
        // Line 10: `v_a ← PREFIX(v_a, ld) ++ suffix`, never below the decided prefix (the
        // entries there are the same everywhere: they are chosen).
        let decided = self.store.decided_idx();
        let skip = (decided + 1).saturating_sub(m.from) as usize;
        let from = m.from.max(decided + 1);
        if from > self.log_len() + 1 {
            // The sync starts past this log's end: a stale sync. Ask again.
            self.ask_prepare(out, true);
            return;
        }
        let entries = self.up_to_stop_sign(m.entries.get(skip..).unwrap_or(&[]));
        // Line 9.
        if let Err(e) = self.store.set_accepted_round(m.n) {
            self.store_failed("accepting a round", e);
        }
        if let Err(e) = self.store.append_on_prefix(from, entries) {
            self.store_failed("synchronising the log", e);
        }
        self.wrote(out);
        if self.amnesic_life
            && !self.amnesic
            && !self.stopped()
            && !self.mutation(Mutation::SeqPaxosRepairIgnoresStopSign)
        {
            // Repaired earlier in this configuration with a log that ended in its
            // stop-sign, and now synchronised by a leader whose log does not: that
            // stop-sign was not chosen before this life began (a chosen entry is in every
            // later leader's log, and nothing follows a stop-sign there), so no earlier
            // life entered the next configuration (issue 33, suspect 6; see below).
            self.amnesic_life = false;
        }
        if self.amnesic {
            // Repaired: its log is now the whole sequence of a leader whose prepare did not
            // count it, and it promised at least what every other member had.
            self.amnesic = false;
            // Repaired in this configuration: the configurations it enters later start
            // after its repair (see `reconfig.rs`, crash at any step), unless the log it
            // was repaired with already ends in this configuration's stop-sign. Then the
            // stop-sign may have been decided before this life began, and the earlier
            // life may have entered the next configuration and promised and accepted
            // there: this life stays amnesic in it until repaired there too (the hole
            // `reconfig.rs` used to name; issue 33, suspect 6). A stop-sign the repaired
            // log lacks was not chosen before the restart (every later leader's log holds
            // a chosen entry), so no earlier life entered that next configuration.
            if !self.stopped() || self.mutation(Mutation::SeqPaxosRepairIgnoresStopSign) {
                self.amnesic_life = false;
                // Once what it holds now is durable, a restart on its store is not
                // amnesic.
                self.store.mark_whole();
            }
            self.ble.set_candidate(true);
            out.events.push(crate::event::Event::Repaired {
                upto: self.log_len(),
            });
        }
        // Lines 11-12 (the `Accepted` leaves at the flush).
        self.phase = Phase::Accept;
        self.phase_since_us = self.now;
        self.accepted_owed = true;
        let early = self.early_decide.take().filter(|&(n, _)| n == m.n);
        self.decide(m.decided.max(early.map_or(0, |(_, ld)| ld)), out);
    }

    /// Acceptor lines 13-16: entries that continue the log are appended; entries it holds
    /// already are the same (one leader's sequence in one round); a gap means a lost
    /// `Accept`, and the follower asks to be prepared again.
    pub(crate) fn on_accept(&mut self, from: NodeId, m: Accept, out: &mut Out) {
        let promised = self.store.promised();
        if m.n != promised {
            self.refuse(from, m.n, out);
            return;
        }
        if self.role != Role::Follower {
            return;
        }
        if self.phase != Phase::Accept {
            // The leader takes this node for synchronised (a restart it did not see, or a
            // lost `AcceptSync`): ask for a `Prepare`.
            self.ask_prepare(out, false);
            return;
        }
        if !self.extend(m.from, &m.entries, out) {
            return;
        }
        self.accepted_owed = true;
        // A `Decide` of this round that came before these entries applies now too.
        let early = match self.early_decide {
            Some((n, ld)) if n == m.n => ld,
            _ => 0,
        };
        self.decide(m.decided.max(early), out);
    }

    /// Appends what of `entries` (starting at `from`) continues this log; what it holds
    /// already is the same (one leader's sequence in one round). False, asking for a
    /// `Prepare`, when they leave a gap.
    fn extend(&mut self, from: u64, entries: &[Entry], out: &mut Out) -> bool {
        let len = self.log_len();
        if from > len + 1 {
            self.ask_prepare(out, false);
            return false;
        }
        let skip = (len + 1 - from) as usize;
        let new = entries.get(skip..).unwrap_or(&[]);
        // `STOPPED()`: nothing extends a stop-sign of this configuration.
        let new = if !new.is_empty()
            && self.stopped()
            && !self.mutation(Mutation::SeqPaxosExtendAfterStopSign)
        {
            &[]
        } else {
            self.up_to_stop_sign(new)
        };
        if !new.is_empty() {
            if let Err(e) = self.store.append(new) {
                self.store_failed("appending accepted entries", e);
            }
            self.wrote(out);
        }
        true
    }

    /// `entries` cut right after the first stop-sign among them (§2.4.3: `SS_i` is the last
    /// command of `σ_i`).
    fn up_to_stop_sign<'a>(&self, entries: &'a [Entry]) -> &'a [Entry] {
        if self.mutation(Mutation::SeqPaxosExtendAfterStopSign) {
            return entries;
        }
        match entries.iter().position(|e| self.ends_config(e)) {
            Some(p) => &entries[..=p],
            None => entries,
        }
    }

    /// Learner lines 17-21, once this node's log is the leader's (the accept phase): a
    /// `Decide` in the prepare phase could cover entries this log holds from an older round.
    pub(crate) fn on_decide(&mut self, _from: NodeId, m: Decide, out: &mut Out) {
        if m.n != self.store.promised() {
            return;
        }
        if self.phase != Phase::Accept && !self.mutation(Mutation::SeqPaxosDecideInPrepare) {
            // Not applied now (this log may hold entries of an older round there), but kept:
            // the leader sends each decided length once, and a `Decide` that overtook the
            // round's `AcceptSync` would otherwise be lost for good when no later one
            // follows (the simulator's mixed seed 135: a follower stuck 15 entries behind
            // after the load stopped). It applies once this round's sync is accepted.
            if self.role == Role::Follower {
                let best = match self.early_decide {
                    Some((n, ld)) if n == m.n => ld.max(m.ld),
                    _ => m.ld,
                };
                self.early_decide = Some((m.n, best));
            }
            self.ask_prepare(out, false);
            return;
        }
        if m.ld > self.log_len() {
            // The `Decide` overtook the `Accept` of the entries it covers (the leader sends
            // each decided length once): kept, and applied when they arrive (the simulator's
            // reconfig seed 149: a follower stuck one entry behind after the load stopped).
            let best = match self.early_decide {
                Some((n, ld)) if n == m.n => ld.max(m.ld),
                _ => m.ld,
            };
            self.early_decide = Some((m.n, best));
            self.ask_prepare(out, false);
        }
        self.decide(m.ld, out);
    }

    pub(crate) fn on_read_probe(&mut self, from: NodeId, n: Ballot, round: u64) {
        if self.role == Role::Follower && n == self.store.promised() {
            self.read_acks.push((from, n, round));
        }
    }

    /// Asks the leader for a `Prepare` (at most once per `resend_us` unless `now`).
    pub(crate) fn ask_prepare(&mut self, out: &mut Out, now: bool) {
        let Some(l) = self.leader().filter(|&l| l != self.me) else {
            return;
        };
        if !now
            && self
                .prepare_req_us
                .is_some_and(|t| self.now < t + self.cfg.resend_us)
        {
            return;
        }
        self.prepare_req_us = Some(self.now);
        out.send(
            l,
            Message::PrepareReq {
                config: self.config_id(),
            },
        );
    }

    /// One flush of a follower.
    pub(crate) fn follower_flush(&mut self, out: &mut Out) {
        let promised = self.store.promised();
        if self.accepted_owed && self.phase == Phase::Accept {
            self.accepted_owed = false;
            out.send(
                promised.node,
                Message::Accepted(Accepted {
                    config: self.config_id(),
                    n: promised,
                    la: self.log_len(),
                }),
            );
        }
        for (to, n, round) in std::mem::take(&mut self.read_acks) {
            if n == promised {
                out.send(
                    to,
                    Message::ReadAck {
                        config: self.config_id(),
                        n,
                        round,
                    },
                );
            }
        }
        if self.phase == Phase::Prepare && self.now >= self.phase_since_us + self.cfg.resend_us {
            // The AcceptSync did not come.
            self.phase_since_us = self.now;
            self.ask_prepare(out, false);
        }
    }
}

impl SeqPaxos {
    /// An amnesic node asks every other member for its promise, every `resend_us`.
    pub(crate) fn recover_promise(&mut self, out: &mut Out) {
        if self
            .recover_asked_us
            .is_some_and(|t| self.now < t + self.cfg.resend_us)
        {
            return;
        }
        self.recover_asked_us = Some(self.now);
        let others: Vec<NodeId> = self.others().collect();
        for o in others {
            out.send(
                o,
                Message::PromiseQuery {
                    config: self.config_id(),
                    incarnation: self.incarnation,
                },
            );
        }
    }

    pub(crate) fn on_promise_query(&mut self, from: NodeId, incarnation: u32, out: &mut Out) {
        // Answered in any state, amnesic too: what this node led in an earlier life died
        // with that life, so its current promise is all the asker needs (below).
        out.send(
            from,
            Message::PromiseReply {
                config: self.config_id(),
                promised: self.store.promised(),
                incarnation,
            },
        );
    }

    /// Once *every* other member answered, their highest promise becomes this node's.
    ///
    /// Why every one (found reading the code for issue 33): a leader `C` may be in the middle of a prepare
    /// whose quorum holds this node's forgotten promise of `C`'s ballot `b`; `C` itself
    /// promised `b` and keeps it as long as it lives, so its answer is at least `b`, and
    /// this node never accepts below `b` (which would break the promise `C` counted). A
    /// majority of the others was enough for the values *chosen* with a forgotten vote
    /// (their quorum has f other members, and f + 1 of the 2f others meet them), not for a
    /// prepare still collecting promises: on 5 nodes it could miss `C` and the one member
    /// whose promise reached `C` late, and a ballot between theirs and `b` could then choose
    /// a value `C`'s prepare never saw. With 3 nodes every other member is a majority of the
    /// others, as before. A member that crashed since lost what it led, and answers in its
    /// new life; one that stays silent (down, cut off) keeps this node amnesic.
    pub(crate) fn on_promise_reply(
        &mut self,
        from: NodeId,
        promised: Ballot,
        incarnation: u32,
        out: &mut Out,
    ) {
        if incarnation != self.incarnation {
            return; // An answer to an earlier life's question.
        }
        let Some(heard) = self.recovering.as_mut() else {
            return;
        };
        heard.insert(from, promised);
        let others = self.cfg.members.len() - 1;
        if heard.len() < others {
            return;
        }
        let max = heard.values().copied().max().unwrap_or(Ballot::ZERO);
        self.recovering = None;
        if max > self.store.promised() {
            if let Err(e) = self.store.set_promised(max) {
                self.store_failed("recovering a promise", e);
            }
            out.needs_sync = true;
        }
        self.ble.raise_above(max);
        self.set_leader_hint(max);
        out.events.push(crate::event::Event::RepairNeeded {
            upto: self.store.decided_idx(),
        });
    }
}
