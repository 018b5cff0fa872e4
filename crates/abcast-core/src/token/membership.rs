//! Totem's membership protocol and Extended Virtual Synchrony (Amir et al., TOCS 1995),
//! with the rules as Corosync's `totemsrp.c` states them (the function each step follows
//! is named; `docs/design/totem-membership-notes.md` has them side by side).
//!
//! - **Gather** (`gather_enter`, `join_process` ← `memb_join_process`): a member multicasts
//!   a join with the processors it tries to form a ring with (`proc_set`) and those it
//!   holds failed (`fail_set`), again every `join_timeout_us`. A join with other sets is
//!   merged (a sender that fails this member is failed in turn; failed sets are taken only
//!   from members of the same ring) and the member re-joins; a join with the same sets is
//!   consensus. When every processor of `proc_set - fail_set` agreed, the lowest id creates
//!   the commit token. A processor that does not agree within `consensus_timeout_us` is
//!   failed (`consensus_expired` ← `memb_state_consensus_timeout_expired`).
//! - **Commit** (`commit_enter` ← `memb_state_commit_enter`): the commit token goes round
//!   the new ring; each member saves its old ring (`OldRing`) and fills in its entry: old
//!   ring, aru, highest delivered, whether it has no holes.
//! - **Recovery** (`recovery_enter` ← `memb_state_recovery_enter`): on the second rotation
//!   each member computes the transitional membership (the new ring's members from its
//!   old ring) and, if one of them has holes, queues the old ring's messages above the
//!   lowest aru among them; those go round the new ring inside new-ring messages
//!   (`Data::inner`), ordered and retransmitted like any. `retrans_flg` on the token tells
//!   when no member has any left; two rotations later, with the token's aru past
//!   `install_seq` twice, every member has every recovered message (`recovery_token`).
//! - **Install** (`install` ← `memb_state_operational_enter`, Spread for Safe): the old
//!   ring's messages are delivered in order up to the first hole (a Safe one only if the
//!   old ring's two-round aru covers it) in the old regular configuration; then the
//!   transitional configuration; then the rest in order, past holes, only from members of
//!   the transitional configuration after the first hole (a later one may depend on a
//!   missing one); then the new regular configuration.
//! - **Token loss** (`token_timeout_us` without a token): gather again. **Merge**: an idle
//!   ring's representative multicasts `MergeDetect` every `merge_timeout_us`; a message of
//!   a foreign ring makes the member gather with its sender (`foreign`).
//!
//! - **Failed to receive** (`fail_to_receive`, Corosync's `failed_to_recv`): a member that
//!   has held the token's aru down for `fail_to_recv_rotations` rotations (`handle_token`)
//!   gathers with itself failed; the others, hearing its join or finding the token lost,
//!   fail it too and form a ring without it; once they agreed (their joins fail it), it
//!   forms a ring of its own (`memb_join_process`: "we will create single ring anyway").
//!
//! Departures: the new ring's sequence number is the highest seen plus 4, as Corosync; ring
//! ids are not persisted (in-memory members: a restarted member learns the highest from
//! the joins it hears).

use super::messages::{
    CommitToken, Data, Inner, Join, MembEntry, MergeDetect, Message, RingId, Service, Token,
};
use super::{Out, TokenRing, buffer_message};
use crate::config::{Configuration, Member, Roles};
use crate::protocol::{ConfigChange, ConfigKind, DeliveryLevel};
use crate::types::NodeId;
use std::collections::{BTreeMap, BTreeSet};

/// Totem's states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Operational,
    Gather,
    Commit,
    Recovery,
}

/// A member's old ring, saved when it commits to a new one, until the new one is
/// installed (or the next attempt, if this one fails).
#[derive(Clone, Debug, Default)]
pub struct OldRing {
    pub ring: RingId,
    pub memb: Vec<NodeId>,
    pub buffer: BTreeMap<u64, Data>,
    pub aru: u64,
    pub high_seq: u64,
    pub delivered: u64,
    /// The two-round aru: every old member has every message up to it.
    pub safe_upto: u64,
}

/// The configuration of ring `id` with `members` (every member proposes, accepts, learns).
pub(crate) fn configuration(id: u64, members: &[NodeId]) -> Configuration {
    Configuration {
        id,
        members: members
            .iter()
            .map(|&id| Member {
                id,
                roles: Roles::PAL,
            })
            .collect(),
    }
}

/// The low bits of a ring's sequence number hold its creator's incarnation.
const RING_SEQ_LIFE_BITS: u32 = 24;

/// The sequence number of a ring created after `seen` by a representative in life
/// `incarnation`: the count above `seen`'s by 4, as Corosync, with the life in the low
/// bits. Corosync keeps ring ids on disk; these members keep nothing, and two lives of one
/// node that heard the same highest ring would otherwise create the same ring id (the
/// simulator found two lives forming "ring (3, 16)", and a message of the first delivered
/// in the second would be a message of the wrong configuration).
pub(crate) fn next_ring_seq(seen: u64, incarnation: u64) -> u64 {
    let count = (seen >> RING_SEQ_LIFE_BITS).saturating_add(4);
    (count << RING_SEQ_LIFE_BITS) | (incarnation & ((1 << RING_SEQ_LIFE_BITS) - 1))
}

impl TokenRing {
    /// The members of the ring this member last installed (its old ring while a new one
    /// forms).
    fn installed_memb(&self) -> &[NodeId] {
        match &self.old {
            Some(o) => &o.memb,
            None => &self.memb,
        }
    }

    /// Whether `p` is held down now (flap damping).
    pub(crate) fn held_down(&self, p: NodeId) -> bool {
        self.holddown
            .get(&p)
            .is_some_and(|(until, _)| self.now < *until)
    }

    /// The processors failed in the gather that formed the ring being installed: one failed
    /// again soon after its last failure is held down, longer each time in a row.
    fn damp_failed(&mut self) {
        let now = self.now;
        let (base, max, forget) = (
            self.cfg.holddown_us,
            self.cfg.holddown_max_us,
            self.cfg.holddown_forget_us,
        );
        if base == 0 || self.mutated(crate::mutation::Mutation::TokenNoFlapDamping) {
            return;
        }
        self.holddown
            .retain(|_, (until, _)| now < until.saturating_add(forget));
        for &p in &self.fail_set {
            let e = self.holddown.entry(p).or_insert((now, 0));
            let hold = base.saturating_mul(1 << e.1.min(16)).min(max);
            *e = (now.saturating_add(hold), e.1.saturating_add(1));
        }
    }

    fn want(&self) -> Vec<NodeId> {
        self.proc_set.difference(&self.fail_set).copied().collect()
    }

    pub(crate) fn membership_tick(&mut self, out: &mut Out) {
        let now = self.now;
        if !self.started {
            self.started = true;
            self.gather_enter(out);
            return;
        }
        match self.state {
            State::Gather => {
                if now >= self.join_due_us {
                    self.send_join(out);
                }
                if now >= self.consensus_due_us {
                    self.consensus_expired(out);
                }
            }
            State::Commit | State::Recovery | State::Operational => {
                if now >= self.token_seen_us + self.cfg.token_timeout_us {
                    self.stats.token_losses += 1;
                    if self.state == State::Operational {
                        self.proc_set = self.memb.iter().copied().collect();
                        self.fail_set.clear();
                    }
                    // Departure from Totem, which gathers again with the same sets: the
                    // commit token was lost at a successor that went on gathering all the
                    // while (its joins came, its commit token never did), so it cannot
                    // hear this member. Failed, it is left out of the next attempt instead
                    // of agreeing to a ring it cannot form, again and again (a link that
                    // works one way; corosync issue 760).
                    if self.state == State::Commit && self.successor_missed_commit {
                        let s = self.successor();
                        self.fail_set.insert(s);
                    }
                    self.gather_enter(out);
                } else if self.state == State::Operational
                    && self.ring.rep == self.me
                    && now >= self.merge_due_us
                {
                    self.merge_due_us = now + self.cfg.merge_timeout_us;
                    out.multicasts.push(Message::MergeDetect(MergeDetect {
                        sender: self.me,
                        ring: self.ring,
                    }));
                }
            }
        }
    }

    fn send_join(&mut self, out: &mut Out) {
        self.join_due_us = self.now + self.cfg.join_timeout_us;
        out.multicasts.push(Message::Join(Join {
            sender: self.me,
            proc_set: self.proc_set.iter().copied().collect(),
            fail_set: self.fail_set.iter().copied().collect(),
            ring_seq: self.ring_seq_max.max(self.ring.seq),
        }));
    }

    /// `memb_state_gather_enter`: (re)start gathering with the current sets.
    pub(crate) fn gather_enter(&mut self, out: &mut Out) {
        self.state = State::Gather;
        self.proc_set.insert(self.me);
        if !self.failed_to_recv {
            self.fail_set.remove(&self.me);
        }
        self.consensus.clear();
        self.consensus.insert(self.me);
        self.consensus_due_us = self.now + self.cfg.consensus_timeout_us;
        self.last_sent = None;
        self.held = None;
        self.loopback.clear();
        self.send_join(out);
    }

    /// `memb_consensus_agreed`: every processor this member wants in agreed. A member that
    /// failed itself wants none but the others' agreement that it failed, and an empty
    /// set is agreed ("we will create single ring anyway").
    fn consensus_agreed(&self) -> bool {
        let want = self.want();
        (self.failed_to_recv || !want.is_empty()) && want.iter().all(|p| self.consensus.contains(p))
    }

    /// Corosync's "FAILED TO RECEIVE" (`message_handler_orf_token`): this member held the
    /// token's aru down too long (`handle_token`). It fails itself and gathers; its joins
    /// name it failed, so the members of its ring that hear them fail it too
    /// (`join_process`: failed sets are taken from members of the same ring); the others
    /// find the token lost (this member keeps it) and learn it from the joins.
    pub(crate) fn fail_to_receive(&mut self, out: &mut Out) {
        self.stats.failed_to_receive += 1;
        self.failed_to_recv = true;
        if self.state == State::Operational {
            self.proc_set = self.memb.iter().copied().collect();
            self.fail_set.clear();
        }
        self.fail_set.insert(self.me);
        self.gather_enter(out);
    }

    /// `memb_join_process` with `failed_to_recv`: the others agreed that this member
    /// failed (or failed to answer and were failed in turn): it forms a ring of its own.
    fn form_alone(&mut self, out: &mut Out) {
        self.failed_to_recv = false;
        self.proc_set = std::iter::once(self.me).collect();
        self.fail_set.clear();
        self.create_commit(out);
    }

    /// `memb_state_consensus_timeout_expired`.
    fn consensus_expired(&mut self, out: &mut Out) {
        if self.consensus_agreed() {
            if self.failed_to_recv {
                self.form_alone(out);
                return;
            }
            if self.want().first() == Some(&self.me) {
                self.create_commit(out);
                return;
            }
            // Agreed, but no commit token came: wait another period.
            self.consensus.clear();
            self.consensus.insert(self.me);
            self.consensus_due_us = self.now + self.cfg.consensus_timeout_us;
            return;
        }
        for p in self.want() {
            if !self.consensus.contains(&p) {
                self.fail_set.insert(p);
            }
        }
        self.gather_enter(out);
    }

    pub(crate) fn on_join(&mut self, _from: NodeId, j: Join, out: &mut Out) {
        // A member hears its own joins (multicasts loop back): in the gather step that is
        // its own consensus, which alone forms a ring of one.
        if j.sender == self.me && self.state != State::Gather {
            return;
        }
        if j.sender != self.me {
            self.join_heard_us = Some(self.now);
        }
        self.ring_seq_max = self.ring_seq_max.max(j.ring_seq);
        // A processor that failed itself (its join names it failed: it could not receive,
        // `fail_to_receive`) asks for no ring with anyone; it forms one of its own. Only the
        // members of its ring take its join (and fail it); to a member of another ring it is
        // no reason to gather (the simulator found a ring of four re-formed three times in a
        // second by the joins of a member whose data lane stayed cut, each time failing it
        // again after a consensus timeout). It merges later, by its merge announcements.
        if j.fail_set.contains(&j.sender)
            && j.sender != self.me
            && matches!(self.state, State::Operational | State::Gather)
            && !self.installed_memb().contains(&j.sender)
        {
            self.stats.failed_self_ignored += 1;
            return;
        }
        match self.state {
            State::Operational => {
                // `ignore_join_under_operational`: a join that fails this member, or a
                // stale one from a member of this ring.
                if j.fail_set.contains(&self.me)
                    || (self.memb.contains(&j.sender) && j.ring_seq < self.ring.seq)
                {
                    return;
                }
                // Flap damping: a held-down processor that would break this ring (it fails
                // one of its members) does not make it gather; one that fails none of them
                // (a partition healed) does.
                if self.held_down(j.sender) && j.fail_set.iter().any(|p| self.memb.contains(p)) {
                    self.stats.holddown_ignored += 1;
                    return;
                }
                self.join_process(j, out);
            }
            State::Gather => self.join_process(j, out),
            State::Commit | State::Recovery => {
                if self.memb.contains(&j.sender) && j.ring_seq >= self.ring.seq {
                    self.join_process(j, out);
                    if self.state != State::Gather {
                        self.gather_enter(out);
                    }
                } else if self.state == State::Commit
                    && j.sender == self.successor()
                    && j.sender != self.me
                    && self.now >= self.token_seen_us.saturating_add(self.cfg.join_timeout_us)
                {
                    // The successor still gathers for an older ring a whole join period
                    // after the commit token was passed to it: it has not taken it. A join
                    // sooner may have been on its way before the token came (the simulator
                    // found one failing a successor that had the token, and the ring
                    // fragmenting into four in the gather that followed).
                    self.successor_missed_commit = true;
                }
            }
        }
    }

    /// `memb_join_process`, its rules in Corosync's order.
    fn join_process(&mut self, j: Join, out: &mut Out) {
        let jp: BTreeSet<NodeId> = j.proc_set.iter().copied().collect();
        let jf: BTreeSet<NodeId> = j.fail_set.iter().copied().collect();
        let mut gathered = false;
        if jp == self.proc_set && jf == self.fail_set {
            self.consensus.insert(j.sender);
            if self.state == State::Gather && self.consensus_agreed() && self.failed_to_recv {
                self.form_alone(out);
                return;
            }
            if self.state == State::Gather
                && self.consensus_agreed()
                && self.want().first() == Some(&self.me)
            {
                self.create_commit(out);
                return;
            }
        } else if jp.is_subset(&self.proc_set) && jf.is_subset(&self.fail_set) {
            // Nothing new.
        } else if self.fail_set.contains(&j.sender) {
            // A failed processor's join.
        } else {
            let before = (self.proc_set.len(), self.fail_set.clone());
            self.proc_set.extend(jp);
            if jf.contains(&self.me) {
                self.fail_set.insert(j.sender);
            } else if self.installed_memb().contains(&j.sender) {
                self.fail_set.extend(jf);
            }
            if !self.failed_to_recv {
                self.fail_set.remove(&self.me);
            }
            // Departure from Corosync, which gathers again here whatever the merge
            // changed: a join that taught nothing (its failed set comes from another ring,
            // so it is not taken) would make this member multicast its unchanged join, and
            // every member that disagrees the same way answers in kind: a join storm that
            // grows with every round (the simulator found one at four nodes).
            if (self.proc_set.len(), &self.fail_set) != (before.0, &before.1)
                || self.state != State::Gather
            {
                self.gather_enter(out);
                gathered = true;
            }
        }
        if !gathered && self.state == State::Operational {
            self.gather_enter(out);
        }
    }

    /// `memb_state_commit_token_create`: the representative of the agreed membership.
    fn create_commit(&mut self, out: &mut Out) {
        let ct = CommitToken {
            ring: RingId {
                rep: self.me,
                seq: next_ring_seq(self.ring_seq_max.max(self.ring.seq), self.incarnation),
            },
            hop: 0,
            addr: self.want(),
            entries: Vec::new(),
        };
        self.commit_enter(ct, out);
    }

    pub(crate) fn on_commit(&mut self, ct: CommitToken, out: &mut Out) {
        self.ring_seq_max = self.ring_seq_max.max(ct.ring.seq);
        match self.state {
            State::Gather => {
                let mine_next = ct.addr.get(ct.entries.len()) == Some(&self.me);
                if ct.addr == self.want() && ct.ring.seq > self.ring.seq && mine_next {
                    // Departure from Totem: a member that heard no join of another processor
                    // for a consensus timeout hears none of them (its data lane is cut: the
                    // commit token comes on the token's). It could not take part in the ring
                    // it is asked into (the simulator found one whose successor could not
                    // hear it dragged into one failing commit attempt after another, never
                    // reaching its consensus timeout). It stays in the gather step, where
                    // its consensus timeout fails the processors it cannot hear.
                    let alone = ct.addr.iter().all(|p| *p == self.me);
                    let hears = self.join_heard_us.is_some_and(|t| {
                        self.now.saturating_sub(t) <= self.cfg.consensus_timeout_us
                    });
                    if alone || hears {
                        self.commit_enter(ct, out);
                    } else {
                        self.stats.commit_refused_deaf += 1;
                    }
                }
            }
            State::Commit => {
                if ct.ring == self.ring && ct.entries.len() == ct.addr.len() {
                    self.recovery_enter(ct, out);
                }
            }
            State::Recovery => {
                if ct.ring == self.ring && ct.ring.rep == self.me && !self.sent_initial {
                    self.last_sent = None;
                    self.send_initial_token(out);
                }
            }
            State::Operational => {}
        }
    }

    /// `memb_state_commit_enter` and `memb_state_commit_token_update`: save the old ring
    /// (once per attempt), fill in this member's entry, pass the token on.
    fn commit_enter(&mut self, mut ct: CommitToken, out: &mut Out) {
        self.successor_missed_commit = false;
        if self.old.is_none() {
            let safe_upto = self.safe_upto();
            self.old = Some(OldRing {
                ring: self.ring,
                memb: self.memb.clone(),
                buffer: std::mem::take(&mut self.buffer),
                aru: self.my_aru,
                high_seq: self.high_seq,
                delivered: self.delivered,
                safe_upto,
            });
        }
        let Some(old) = self.old.as_ref() else {
            return;
        };
        let mine = MembEntry {
            old_ring: old.ring,
            aru: old.aru,
            high_delivered: old.delivered,
            received_flg: old.aru == old.high_seq,
        };
        ct.entries.push(mine);
        // A member of the same old ring with a lower aru than another's has holes.
        let high = ct
            .entries
            .iter()
            .filter(|e| e.old_ring == mine.old_ring)
            .map(|e| e.aru)
            .max()
            .unwrap_or(0);
        for e in ct.entries.iter_mut() {
            if e.old_ring == mine.old_ring && e.aru < high {
                e.received_flg = false;
            }
        }
        self.ring = ct.ring;
        self.memb = ct.addr.clone();
        self.state = State::Commit;
        self.token_seen_us = self.now;
        self.consensus.clear();
        ct.hop = ct.hop.saturating_add(1);
        self.pass(Message::Commit(ct), out);
    }

    /// `memb_state_recovery_enter`: the transitional membership, the old messages to carry,
    /// the new ring's ordering from 0; the commit token's second rotation goes on.
    fn recovery_enter(&mut self, mut ct: CommitToken, out: &mut Out) {
        let Some(old) = self.old.as_ref() else {
            return;
        };
        let trans: Vec<(NodeId, MembEntry)> = ct
            .addr
            .iter()
            .zip(&ct.entries)
            .filter(|(p, e)| old.memb.contains(p) && e.old_ring == old.ring)
            .map(|(p, e)| (*p, *e))
            .collect();
        let mut queue = std::collections::VecDeque::new();
        if trans.iter().any(|(_, e)| !e.received_flg)
            && !self.mutated(crate::mutation::Mutation::TokenSkipRecovery)
        {
            let low = trans.iter().map(|(_, e)| e.aru).min().unwrap_or(old.aru);
            // This member is among them, so `low` is at most its own aru.
            if low < old.high_seq {
                for (&s, _) in old.buffer.range(low + 1..=old.high_seq) {
                    queue.push_back(s);
                }
            }
        }
        self.received_flg = ct
            .addr
            .iter()
            .position(|p| *p == self.me)
            .and_then(|i| ct.entries.get(i))
            .is_none_or(|e| e.received_flg);
        self.trans_memb = trans.iter().map(|(p, _)| *p).collect();
        self.retrans_queue = queue;
        self.reset_ordering();
        self.state = State::Recovery;
        self.token_seen_us = self.now;
        self.set_retrans_flg = false;
        self.retrans_flg_count = 0;
        self.install_seq = 0;
        self.rotation_counter = 0;
        self.sent_initial = false;
        ct.hop = ct.hop.saturating_add(1);
        self.pass(Message::Commit(ct), out);
    }

    /// Recovery's new messages: the old ring's messages this member carries.
    pub(crate) fn recovery_messages(
        &mut self,
        allowed: usize,
        seq_received: u64,
        round: u64,
    ) -> Vec<Data> {
        let mut v = Vec::new();
        let Some(old) = self.old.as_ref() else {
            return v;
        };
        while v.len() < allowed {
            let Some(s) = self.retrans_queue.pop_front() else {
                break;
            };
            let Some(m) = old.buffer.get(&s) else {
                continue;
            };
            v.push(Data {
                ring: self.ring,
                seq: seq_received + 1 + v.len() as u64,
                pid: self.me,
                round,
                service: m.service,
                batch: m.batch.clone(),
                inner: Some(Inner {
                    ring: old.ring,
                    seq: m.seq,
                    pid: m.pid,
                    round: m.round,
                }),
            });
        }
        self.stats.recovered_sent += v.len() as u64;
        v
    }

    /// The `retrans_flg` rounds (`message_handler_orf_token` in RECOVERY): true when the
    /// new ring is to be installed at this member.
    pub(crate) fn recovery_token(&mut self, t: &mut Token) -> bool {
        if !self.retrans_queue.is_empty() {
            if !t.retrans_flg {
                t.retrans_flg = true;
                self.set_retrans_flg = true;
            }
        } else if t.retrans_flg && self.set_retrans_flg {
            t.retrans_flg = false;
            self.set_retrans_flg = false;
        }
        self.retrans_flg_count = if t.retrans_flg {
            0
        } else {
            self.retrans_flg_count + 1
        };
        if self.retrans_flg_count == 2 {
            self.install_seq = t.seq;
        }
        if self.retrans_flg_count >= 2 && !self.received_flg && self.install_seq <= self.my_aru {
            self.received_flg = true;
        }
        if self.retrans_flg_count >= 3 && self.install_seq <= t.aru {
            self.rotation_counter += 1;
        } else {
            self.rotation_counter = 0;
        }
        if self.rotation_counter == 2 {
            self.retrans_flg_count = 0;
            self.rotation_counter = 0;
            return true;
        }
        false
    }

    /// `memb_state_operational_enter`: EVS delivery of the old ring, the transitional and
    /// the regular configuration, then ordering on the new ring.
    pub(crate) fn install(&mut self, out: &mut Out) {
        let Some(old) = self.old.take() else {
            return;
        };
        // The old ring's messages recovered on the new ring are in `old.buffer` already
        // (`keep_recovered`).
        let level = |m: &Data| match m.service {
            Service::Agreed => DeliveryLevel::Agreed,
            Service::Safe => DeliveryLevel::Safe,
        };
        // In the old regular configuration: in order, up to the first hole; a Safe message
        // only if every old member has it.
        let mut s = old.delivered + 1;
        while let Some(m) = old.buffer.get(&s) {
            if m.service == Service::Safe && s > old.safe_upto {
                break;
            }
            let m = m.clone();
            self.deliver_one(&m, level(&m), out);
            s += 1;
        }
        let trans = self.trans_memb.clone();
        out.config_changes.push(ConfigChange {
            kind: ConfigKind::Transitional,
            config: configuration(self.ring.seq, &trans),
            position: out.deliveries.len(),
        });
        // In the transitional configuration: the rest, past holes; after the first hole
        // only messages of members of the transitional configuration.
        let mut hole = false;
        while s <= old.high_seq {
            match old.buffer.get(&s) {
                None => hole = true,
                Some(m) if !hole || trans.contains(&m.pid) => {
                    let m = m.clone();
                    self.deliver_one(&m, level(&m), out);
                }
                Some(_) => {}
            }
            s += 1;
        }
        // Every member of the transitional configuration has this member's old messages.
        let own: Vec<Data> = old
            .buffer
            .values()
            .filter(|m| m.pid == self.me)
            .cloned()
            .collect();
        for m in &own {
            self.acked_if_own(m, out);
        }
        out.config_changes.push(ConfigChange {
            kind: ConfigKind::Regular,
            config: configuration(self.ring.seq, &self.memb),
            position: out.deliveries.len(),
        });
        self.state = State::Operational;
        self.failed_to_recv = false;
        self.damp_failed();
        self.proc_set = self.memb.iter().copied().collect();
        self.fail_set.clear();
        self.consensus.clear();
        self.trans_memb.clear();
        self.retrans_queue.clear();
        self.token_seen_us = self.now;
        self.merge_due_us = self.now + self.cfg.merge_timeout_us;
        self.stats.rings_installed += 1;
    }

    /// A token, data message or merge announcement of another ring.
    pub(crate) fn foreign(&mut self, sender: NodeId, ring: RingId, out: &mut Out) {
        // A late message of the ring this member is leaving is still that ring's.
        if let Some(old) = self.old.as_ref()
            && ring == old.ring
        {
            return;
        }
        if self.held_down(sender) && matches!(self.state, State::Operational | State::Gather) {
            self.stats.holddown_ignored += 1;
            return;
        }
        // A late message of an older ring from a member of this one (the network held it,
        // or it crossed a restart): that member is here already, and a gather for it would
        // re-form the same ring (the simulator found rings re-formed with the same members
        // three times a second in its mixed mix). Joins of such a member are dropped the
        // same way (`on_join`); a member that restarted is found by the token it drops.
        if self.state == State::Operational
            && self.memb.contains(&sender)
            && ring.seq < self.ring.seq
        {
            self.stats.foreign_dropped += 1;
            return;
        }
        match self.state {
            State::Operational => {
                if ring != self.ring && sender != self.me {
                    self.proc_set.insert(sender);
                    self.gather_enter(out);
                }
            }
            State::Gather => {
                if sender != self.me && !self.proc_set.contains(&sender) {
                    self.proc_set.insert(sender);
                    self.fail_set.remove(&sender);
                    self.gather_enter(out);
                }
            }
            State::Commit | State::Recovery => self.stats.foreign_dropped += 1,
        }
    }

    /// A message of the old ring carried in recovery goes into the old ring's buffer at
    /// once, as Corosync moves it to the old ring's sort queue: if this attempt to form a
    /// ring fails and another begins, the member still has it. Every member of a
    /// transitional configuration holds what the recovery carried (its proposer's values
    /// are acknowledged on that strength), so none may lose it to a failed attempt.
    pub(crate) fn keep_recovered(&mut self, m: &Data) {
        let (Some(i), Some(old)) = (m.inner, self.old.as_mut()) else {
            return;
        };
        if i.ring != old.ring {
            return;
        }
        let d = Data {
            ring: old.ring,
            seq: i.seq,
            pid: i.pid,
            round: i.round,
            service: m.service,
            batch: m.batch.clone(),
            inner: None,
        };
        let floor = old.delivered;
        buffer_message(&mut old.buffer, floor, &mut old.high_seq, &mut old.aru, d);
    }

    /// A data message of the ring this member is leaving (gathering or committing): kept
    /// for recovery.
    pub(crate) fn store_old(&mut self, m: Data) -> bool {
        let gathering = self.state == State::Gather;
        // The ring's window (`TokenRing::on_data`).
        let window = self.cfg.buffer_messages_max.saturating_mul(2);
        match self.old.as_mut() {
            // Taken only while gathering. From the commit step on, this member's old ring
            // is what its commit token entry reported: the recovery carries to every
            // member of the transitional configuration what some of them lack of that,
            // and a message that came later would be delivered here and nowhere else
            // (the simulator found one, from a member frozen before the partition). A
            // later attempt reports it.
            Some(old) if m.ring == old.ring => {
                if gathering {
                    let floor = old.delivered;
                    if m.seq > floor.saturating_add(window) {
                        self.stats.data_beyond_window += 1;
                        return true;
                    }
                    buffer_message(&mut old.buffer, floor, &mut old.high_seq, &mut old.aru, m);
                } else {
                    self.stats.foreign_dropped += 1;
                }
                true
            }
            None if m.ring == self.ring && self.state == State::Gather => {
                let floor = self.delivered;
                if m.seq > floor.saturating_add(window) {
                    self.stats.data_beyond_window += 1;
                    return true;
                }
                buffer_message(
                    &mut self.buffer,
                    floor,
                    &mut self.high_seq,
                    &mut self.my_aru,
                    m,
                );
                true
            }
            _ => false,
        }
    }
}
