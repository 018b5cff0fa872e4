//! Token-ring total order: the Accelerated Ring protocol of seed 002 §III, with the Totem
//! membership protocol and Extended Virtual Synchrony (Amir et al., TOCS 1995; the rules
//! as Corosync's `totemsrp.c` and Spread implement them, `docs/design/totem-membership-notes.md`),
//! as a pure state machine. `accelerated_window = 0` is the original Totem ring, so both
//! run from this code.
//!
//! **Ordering** (this file; seed 002 §III). The path of one value:
//!
//! 1. `propose` queues it (`pending`, bounded by `window_values`).
//! 2. When the token arrives (`handle_token`, §III-B): retransmissions the token asks for
//!    go first (§III-B1, all before the token); then `Num_to_send` new messages are chosen,
//!    the minimum of what waits (packed: small values share a message of
//!    `max_message_bytes`), `Personal_window` and `Global_window - fcc - retransmissions`;
//!    each is stamped with its final sequence number from `token.seq + 1` on; all but
//!    `Accelerated_window` of them are multicast before the token (pre-token, §III-B1).
//! 3. The token is updated (§III-B2: `seq`, `aru` by Totem's rules, `fcc`, `rtr` with
//!    requests only up to the *previous* round's `seq`, since later messages may still be
//!    on their way) and passed to the successor; then the rest are multicast (post-token,
//!    §III-B3). The outbox keeps that order: `Outbox::multicasts_first`.
//! 4. A data message (`on_data`, §III-C) goes into the buffer by sequence number; the local
//!    `aru` advances over what is contiguous, and messages are delivered in order up to it,
//!    Agreed at once, Safe only up to the minimum of the `aru` on the tokens this member
//!    sent this round and last round (§III-B4): every member had a round to lower it, so
//!    every member has them. Those are also discarded, and a proposer's values are
//!    acknowledged then: an acknowledged value survives the crash of any member.
//!
//! **Membership** (`membership.rs`, Totem): a lost token (`token_timeout_us`), a join, or a
//! message of a foreign ring starts the gather step; members exchange joins until they
//! agree on who is in and who failed; the representative (lowest id) sends the commit
//! token twice round the new ring; recovery carries the old ring's messages that some
//! member of the new ring lacks; then each member delivers what EVS lets it deliver of
//! the old ring, the transitional configuration, the rest, and the new regular
//! configuration (`install`).
//!
//! Not in the seed, needed to run: a token lost on the wire is sent again by its sender
//! after `token_retransmit_us` unless something shows the successor took it (the token
//! back, or a message stamped after it); the successor takes one copy (`Token::hop`). An
//! idle ring holds the token `token_hold_us` at each member (Corosync's `token_hold`), once
//! it has been idle for `idle_before_hold_us`.
//! The priority of the token over data (§III-D) is the driver's: the two arrive on
//! different sockets.

pub mod config;
pub mod membership;
pub mod messages;
#[cfg(test)]
mod tests;

pub use config::TokenConfig;
pub use messages::{
    CommitToken, Data, Inner, Join, MembEntry, MergeDetect, Message, RingId, Rtr, Service, Token,
};

use crate::ProposeError;
use crate::config::{ConfigError, StartInfo};
use crate::mutation::Mutation;
use crate::protocol::{Ack, Delivery, DeliveryLevel, Outbox, Protocol, Status};
use crate::types::{Ballot, Batch, BatchBuilder, GroupId, Micros, NodeId, ValueId};
use bytes::Bytes;
use membership::{OldRing, State};
use messages::RTR_MAX;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub type Out = Outbox<Message>;

/// Counters a test or an operator reads (`TokenRing::stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenStats {
    pub tokens_taken: u64,
    pub tokens_duplicate: u64,
    pub tokens_retransmitted: u64,
    pub messages_sent: u64,
    pub retransmissions_sent: u64,
    pub retransmissions_asked: u64,
    pub data_duplicate: u64,
    /// Messages of another ring, dropped (outside the gather step, which merges with it).
    pub foreign_dropped: u64,
    /// Rings installed (the first included).
    pub rings_installed: u64,
    /// Times the token was lost (the gather step began).
    pub token_losses: u64,
    /// Old-ring messages carried on a new ring in recovery.
    pub recovered_sent: u64,
    /// Merge announcements, foreign messages and joins of held-down processors ignored.
    pub holddown_ignored: u64,
    /// Times this member failed itself: it held the token's aru down for
    /// `fail_to_recv_rotations` rotations (Corosync's "FAILED TO RECEIVE").
    pub failed_to_receive: u64,
    /// Rounds in which the token holder stamped fewer new messages than it could have,
    /// or none, because the ring's window (`buffer_messages_max`) was full.
    pub window_full: u64,
    /// Data messages dropped because they lay beyond twice `buffer_messages_max` above
    /// this member's discard point.
    pub data_beyond_window: u64,
    /// Commit tokens refused in the gather step because no join of another processor
    /// came for a consensus timeout (`on_commit`).
    pub commit_refused_deaf: u64,
    /// Joins of a processor of another ring that failed itself, ignored (`on_join`).
    pub failed_self_ignored: u64,
}

/// One member of a token ring.
pub struct TokenRing {
    pub(crate) cfg: TokenConfig,
    pub(crate) me: NodeId,
    pub(crate) state: State,
    /// The ring this member is in (Operational) or forming (Commit, Recovery).
    pub(crate) ring: RingId,
    /// Its members, in ring order (ascending ids).
    pub(crate) memb: Vec<NodeId>,
    /// Values waiting for the token, each with its service, and the first one's id seq.
    /// A data message packs consecutive values of one service.
    pending: VecDeque<(Bytes, Service)>,
    pending_first_seq: u64,
    /// Received (or sent) messages of `ring` not yet discarded, by sequence number.
    pub(crate) buffer: BTreeMap<u64, Data>,
    /// Local all-received-up-to on `ring`.
    pub(crate) my_aru: u64,
    /// Every message of `ring` up to it is delivered (or, in recovery, passed over).
    pub(crate) delivered: u64,
    /// Every message of `ring` up to it is discarded here (everyone has it).
    discarded: u64,
    /// The highest sequence number this member knows assigned on `ring`.
    pub(crate) high_seq: u64,
    /// The `seq` of the token taken in the previous round (the accelerated ring asks for
    /// retransmissions only up to it, §III-B2).
    prev_token_seq: u64,
    /// How often this member asked for each message it still lacks (`Rtr::skip`).
    asked: BTreeMap<u64, u8>,
    /// The `hop` of the last token taken; older copies are duplicates.
    last_hop: u64,
    /// Messages (new and retransmitted) this member sent in its previous round (`fcc`).
    sent_last_round: u32,
    /// The `aru` on the token this member sent in its previous round and in this one.
    aru_sent_prev: u64,
    aru_sent_now: u64,
    /// Rotations in a row this member took the token with its `aru` unchanged and held
    /// down by this member (Corosync's `my_aru_count`): past `fail_to_recv_rotations`, it
    /// fails itself.
    aru_count: u32,
    /// This member failed itself (Corosync's `failed_to_recv`): it gathers with itself in
    /// its failed set, and once the others agreed it forms a ring of its own.
    pub(crate) failed_to_recv: bool,
    /// The last token or commit token passed, when; sent again if nothing shows that the
    /// successor took it.
    pub(crate) last_sent: Option<(Message, Micros)>,
    /// A token held on an idle ring, until this time.
    pub(crate) held: Option<(Token, Micros)>,
    /// When a token last showed the ring busy (see `on_token`): the token is held only
    /// once the ring has been idle `idle_before_hold_us` since.
    busy_seen_us: Micros,
    /// Own messages stamped and not yet known to every member: their acks wait.
    own_unstable: usize,
    /// Deliveries so far, over every ring: the `instance` of the next one is this plus 1.
    pub(crate) delivered_total: u64,
    /// When a valid token (or commit token) last came (the token-loss timer's base).
    pub(crate) token_seen_us: Micros,
    /// Membership (`membership.rs`).
    pub(crate) proc_set: BTreeSet<NodeId>,
    pub(crate) fail_set: BTreeSet<NodeId>,
    pub(crate) consensus: BTreeSet<NodeId>,
    /// The highest ring sequence number seen (a new ring's is above it).
    pub(crate) ring_seq_max: u64,
    /// This process life (`StartInfo::incarnation`): the low bits of the rings it creates.
    pub(crate) incarnation: u64,
    pub(crate) join_due_us: Micros,
    pub(crate) consensus_due_us: Micros,
    pub(crate) merge_due_us: Micros,
    /// Flap damping: per processor failed lately, until when it is held down and how often
    /// it was failed in a row (`membership.rs`, `TokenConfig::holddown_us`).
    pub(crate) holddown: BTreeMap<NodeId, (Micros, u32)>,
    /// In the commit step: a join came from the successor after the commit token was
    /// passed to it (it did not take it).
    pub(crate) successor_missed_commit: bool,
    /// When a join of another processor last came (`on_commit`).
    pub(crate) join_heard_us: Option<Micros>,
    /// The old ring, saved when a new one is committed, until it is installed.
    pub(crate) old: Option<OldRing>,
    /// The new ring's members that came from this member's old ring (the transitional
    /// configuration), and from whom messages after a hole are still delivered.
    pub(crate) trans_memb: Vec<NodeId>,
    /// Recovery: old-ring messages this member still carries on the new ring.
    pub(crate) retrans_queue: VecDeque<u64>,
    pub(crate) set_retrans_flg: bool,
    pub(crate) retrans_flg_count: u32,
    pub(crate) install_seq: u64,
    pub(crate) rotation_counter: u32,
    pub(crate) received_flg: bool,
    /// The representative sent the new ring's first token.
    pub(crate) sent_initial: bool,
    /// Messages to this member itself (a ring of one), handled at the next tick.
    pub(crate) loopback: VecDeque<Message>,
    /// The first tick began the first gather.
    pub(crate) started: bool,
    pub(crate) now: Micros,
    pub(crate) stats: TokenStats,
}

impl TokenRing {
    /// A member of the ring `cfg.members` could form. It starts by gathering: the members
    /// that answer form the first ring.
    pub fn new(cfg: TokenConfig, me: NodeId, start: StartInfo) -> Result<TokenRing, ConfigError> {
        cfg.validate(me)?;
        Ok(TokenRing {
            me,
            state: State::Gather,
            ring: RingId { rep: me, seq: 0 },
            memb: vec![me],
            pending: VecDeque::new(),
            pending_first_seq: start.start_seq,
            buffer: BTreeMap::new(),
            my_aru: 0,
            delivered: 0,
            discarded: 0,
            high_seq: 0,
            prev_token_seq: 0,
            asked: BTreeMap::new(),
            last_hop: 0,
            sent_last_round: 0,
            aru_sent_prev: 0,
            aru_sent_now: 0,
            aru_count: 0,
            failed_to_recv: false,
            last_sent: None,
            held: None,
            busy_seen_us: 0,
            own_unstable: 0,
            delivered_total: 0,
            token_seen_us: 0,
            // The configured members: the first ring is all of them that answer within a
            // consensus timeout (the silent ones are failed then).
            proc_set: cfg.members.iter().copied().collect(),
            fail_set: BTreeSet::new(),
            consensus: BTreeSet::new(),
            ring_seq_max: 0,
            incarnation: start.incarnation,
            join_due_us: 0,
            consensus_due_us: 0,
            merge_due_us: 0,
            holddown: BTreeMap::new(),
            successor_missed_commit: false,
            join_heard_us: None,
            old: None,
            trans_memb: Vec::new(),
            retrans_queue: VecDeque::new(),
            set_retrans_flg: false,
            retrans_flg_count: 0,
            install_seq: 0,
            rotation_counter: 0,
            received_flg: true,
            sent_initial: false,
            loopback: VecDeque::new(),
            started: false,
            now: 0,
            stats: TokenStats::default(),
            cfg,
        })
    }

    pub fn stats(&self) -> TokenStats {
        self.stats
    }

    pub fn ring(&self) -> RingId {
        self.ring
    }

    /// The members of the ring this member is in.
    pub fn members(&self) -> &[NodeId] {
        &self.memb
    }

    /// Whether the ring is installed and ordering (not gathering or recovering).
    pub fn operational(&self) -> bool {
        self.state == State::Operational
    }

    /// The local all-received-up-to.
    pub fn my_aru(&self) -> u64 {
        self.my_aru
    }

    /// One line of this member's state, for a log or a failed simulation's report.
    pub fn describe(&self) -> String {
        format!(
            "{} {:?} ring {}/{} memb {:?} proc {:?} fail {:?} consensus {:?} aru {} delivered {} \
             high {} pending {} token seen {} old {:?} trans {:?} recovery queue {} retrans_flg \
             (set {} count {}) install_seq {} rotation_counter {} last hop {}",
            self.me,
            self.state,
            self.ring.rep,
            self.ring.seq,
            self.memb,
            self.proc_set,
            self.fail_set,
            self.consensus,
            self.my_aru,
            self.delivered,
            self.high_seq,
            self.pending.len(),
            self.token_seen_us,
            self.old
                .as_ref()
                .map(|o| (o.ring.rep, o.ring.seq, o.aru, o.high_seq)),
            self.trans_memb,
            self.retrans_queue.len(),
            self.set_retrans_flg,
            self.retrans_flg_count,
            self.install_seq,
            self.rotation_counter,
            self.last_hop
        )
    }

    pub(crate) fn successor(&self) -> NodeId {
        let i = self.memb.iter().position(|m| *m == self.me).unwrap_or(0);
        self.memb[(i + 1) % self.memb.len()]
    }

    /// Whether this member runs the broken variant `m` (simulator only).
    pub(crate) fn mutated(&self, m: crate::mutation::Mutation) -> bool {
        crate::mutation::on(self.cfg.mutation(), m)
    }

    fn is_first(&self) -> bool {
        self.memb.first() == Some(&self.me)
    }

    /// Sends `m` to this member's successor (to itself, in a ring of one, at the next
    /// tick), keeping a copy to send again if the successor shows no sign of taking it.
    pub(crate) fn pass(&mut self, m: Message, out: &mut Out) {
        self.last_sent = Some((m.clone(), self.now));
        let to = self.successor();
        if to == self.me {
            self.loopback.push_back(m);
        } else {
            out.sends.push((to, m));
        }
    }

    /// Safe delivery and discarding bound (§III-B4): the lower `aru` of the tokens this
    /// member sent in its last two rounds.
    pub(crate) fn safe_upto(&self) -> u64 {
        self.aru_sent_prev.min(self.aru_sent_now)
    }

    /// Starts ordering on `ring` from sequence number 0 (recovery of a new ring).
    pub(crate) fn reset_ordering(&mut self) {
        self.buffer.clear();
        self.my_aru = 0;
        self.delivered = 0;
        self.discarded = 0;
        self.high_seq = 0;
        self.prev_token_seq = 0;
        self.asked.clear();
        self.last_hop = 0;
        self.sent_last_round = 0;
        self.aru_sent_prev = 0;
        self.aru_sent_now = 0;
        self.aru_count = 0;
        self.last_sent = None;
        self.held = None;
    }

    /// The first token of a new ring (the representative, once the commit token came
    /// back from its second rotation).
    pub(crate) fn send_initial_token(&mut self, out: &mut Out) {
        self.sent_initial = true;
        self.last_hop = 1;
        // `orf_token_send_initial`: the representative owns the flag it sets, or nobody
        // would ever clear it and the ring would stay in recovery.
        self.set_retrans_flg = !self.retrans_queue.is_empty();
        let first = Token {
            ring: self.ring,
            hop: 1,
            rotation: 1,
            seq: 0,
            aru: 0,
            aru_id: None,
            fcc: 0,
            rtr: Vec::new(),
            retrans_flg: self.set_retrans_flg,
        };
        self.token_seen_us = self.now;
        self.handle_token(first, out);
    }

    // ---- token handling (§III-B) ------------------------------------------------------

    fn on_token(&mut self, mut t: Token, out: &mut Out) {
        if t.ring != self.ring || !matches!(self.state, State::Operational | State::Recovery) {
            self.stats.foreign_dropped += 1;
            return;
        }
        if t.hop <= self.last_hop && !self.mutated(Mutation::TokenTakesDuplicateTokens) {
            self.stats.tokens_duplicate += 1;
            return;
        }
        self.last_hop = t.hop;
        self.last_sent = None; // it came back around: the successor had it
        self.token_seen_us = self.now;
        self.stats.tokens_taken += 1;
        self.high_seq = self.high_seq.max(t.seq);
        if self.is_first() {
            t.rotation = t.rotation.saturating_add(1);
        }
        // Idle now: nothing to send, ask for, deliver or raise, and nothing sent by anyone
        // in the last rotation (`fcc`). The token is held only once the ring has been idle
        // for `idle_before_hold_us`: a ring that carried anything lately keeps its token
        // moving, so a value proposed at any member waits for a rotation, not for a hold at
        // another member (a hold ends early only where the value is proposed).
        let quiet = self.state == State::Operational
            && self.pending.is_empty()
            && t.fcc == 0
            && t.rtr.is_empty()
            && t.aru == t.seq
            && self.my_aru == t.seq
            && self.delivered == t.seq;
        if !quiet {
            self.busy_seen_us = self.now;
        }
        let idle =
            quiet && self.now.saturating_sub(self.busy_seen_us) >= self.cfg.idle_before_hold_us;
        if idle && self.cfg.token_hold_us > 0 && self.held.is_none() {
            self.held = Some((t, self.now + self.cfg.token_hold_us));
            return;
        }
        self.handle_token(t, out);
    }

    /// One member's turn with the token (§III-B1 to §III-B4).
    pub(crate) fn handle_token(&mut self, mut t: Token, out: &mut Out) {
        // Totem's "failed to receive" rule, as Corosync has it (`message_handler_orf_token`:
        // `my_aru_count`, `fail_to_recv_const`): the token comes back with the aru this
        // member held down last round, unchanged and still held by it (only this member
        // raises it; a lower one would name another), and this member still lacks the next
        // message, for more rotations in a row than `fail_to_recv_rotations`. It gets the
        // token but not the data (its data lane is cut, or it cannot keep up); kept, it would
        // stop Safe delivery, discarding and every acknowledgement at every member for good.
        // It fails itself and keeps the token, sending nothing of this round (Corosync
        // multicasts the round's messages first; stamped and never followed by the token,
        // they would only be holes); the others find the token lost, or hear its join
        // first, and form a ring without it, and it one of its own (`fail_to_receive`).
        // Corosync departs from the paper the same way (there the others detect it; "my_id
        // IS NEVER added to failed list"): only this member knows it is the one that cannot
        // receive.
        if t.aru_id == Some(self.me) && t.aru == self.aru_sent_now && self.my_aru == t.aru {
            self.aru_count = self.aru_count.saturating_add(1);
        } else {
            self.aru_count = 0;
        }
        if self.aru_count > self.cfg.fail_to_recv_rotations
            && !self.mutated(Mutation::TokenNoFailToRecv)
        {
            self.aru_count = 0;
            self.fail_to_receive(out);
            return;
        }
        let accelerated = self.cfg.accelerated_window;
        // §III-B1: answer the retransmission requests this member can, all before the
        // token (a retransmission sent after it may be asked for again).
        let mut num_retrans = 0u32;
        let mut still_asked = Vec::with_capacity(t.rtr.len());
        for &r in &t.rtr {
            match self.buffer.get(&r.seq) {
                // A holder passes a request on `skip` times before one answers (`Rtr`).
                Some(_) if r.skip > 0 => still_asked.push(Rtr {
                    seq: r.seq,
                    skip: r.skip - 1,
                }),
                Some(m) if num_retrans < self.cfg.global_window => {
                    out.multicasts.push(Message::Data(m.clone()));
                    num_retrans += 1;
                }
                _ => still_asked.push(r),
            }
        }
        self.stats.retransmissions_sent += u64::from(num_retrans);
        // Num_to_send: what waits, Personal_window, Global_window - fcc - retransmissions.
        let global_room = self
            .cfg
            .global_window
            .saturating_sub(t.fcc.saturating_add(num_retrans));
        let mut allowed = self.cfg.personal_window.min(global_room) as usize;
        let seq_received = t.seq;
        // The ring's window (Corosync's `fcc_rtr_limit`): no new message more than
        // `buffer_messages_max` less a round's `global_window` above what this member
        // discarded, so that while a member lags (the token's aru, and so every member's
        // discard point, held down) no member buffers more than that. Recovery carries
        // only the old ring's messages, as many as the old ring's window held, and
        // discards nothing until the install: it is not held back.
        if self.state == State::Operational {
            let room = (self.discarded + self.cfg.buffer_messages_max)
                .saturating_sub(seq_received + u64::from(self.cfg.global_window));
            if room < allowed as u64 {
                allowed = usize::try_from(room).unwrap_or(0);
                if !self.pending.is_empty() {
                    self.stats.window_full += 1;
                }
            }
        }
        let new_msgs = if self.state == State::Recovery {
            self.recovery_messages(allowed, seq_received, t.rotation)
        } else {
            self.new_messages(allowed, seq_received, t.rotation)
        };
        let num_to_send = new_msgs.len() as u64;
        // The member holds its own messages from the moment they are stamped.
        for m in &new_msgs {
            self.buffer.insert(m.seq, m.clone());
            if m.inner.is_none() {
                self.own_unstable += 1;
            }
        }
        self.high_seq = self.high_seq.max(seq_received + num_to_send);
        self.advance_aru();
        let pre = new_msgs.len().saturating_sub(accelerated as usize);
        for m in &new_msgs[..pre] {
            out.multicasts.push(Message::Data(m.clone()));
        }
        // §III-B2: the token's fields.
        t.seq = seq_received + num_to_send;
        // aru (Totem's rules): lower it to the local aru; raise it again if this member
        // lowered it and nobody lowered it further since; when nobody holds it down
        // (aru == seq on arrival), it moves with the new messages (this member has them).
        let holds_it = t.aru_id == Some(self.me) || self.mutated(Mutation::TokenAruRaisedByAnyone);
        let free = t.aru_id.is_none() && t.aru == seq_received;
        if self.my_aru < t.aru || holds_it || free {
            t.aru = self.my_aru.min(t.seq);
            t.aru_id = (t.aru < t.seq).then_some(self.me);
        }
        // fcc: this member's previous round out, this round in.
        let sent_now = num_retrans + num_to_send as u32;
        t.fcc = t
            .fcc
            .saturating_sub(self.sent_last_round)
            .saturating_add(sent_now);
        self.sent_last_round = sent_now;
        // rtr: drop what was answered, ask for what is missing here up to the previous
        // round's seq (the original ring: up to this token's).
        let limit = if accelerated == 0 {
            seq_received
        } else {
            self.prev_token_seq
        };
        self.prev_token_seq = seq_received;
        let mut rtr = still_asked;
        let mut s = self.my_aru + 1;
        let aru = self.my_aru;
        self.asked.retain(|&q, _| q > aru);
        // The other members, each of whom may hold the message (at least 1, at most what
        // a skip count holds).
        let holders = self
            .memb
            .len()
            .saturating_sub(1)
            .clamp(1, usize::from(u8::MAX)) as u8;
        while s <= limit && rtr.len() < RTR_MAX {
            if !self.buffer.contains_key(&s) && !rtr.iter().any(|r| r.seq == s) {
                // Asked before and still missing: the next holder in turn answers.
                let times = self.asked.entry(s).or_insert(0);
                rtr.push(Rtr {
                    seq: s,
                    skip: *times % holders,
                });
                *times = times.wrapping_add(1);
                self.stats.retransmissions_asked += 1;
            }
            s += 1;
        }
        rtr.sort_unstable();
        t.rtr = rtr;
        t.hop = t.hop.saturating_add(1);
        self.aru_sent_prev = self.aru_sent_now;
        self.aru_sent_now = t.aru;
        assert!(t.aru <= t.seq, "token aru {} above seq {}", t.aru, t.seq);
        // Recovery: the retrans_flg rounds decide when the new ring is installed.
        let install = self.state == State::Recovery && self.recovery_token(&mut t);
        // The token, then the post-token messages (§III-B3).
        out.multicasts_first = out.multicasts.len();
        self.pass(Message::Token(t), out);
        for m in new_msgs.into_iter().skip(pre) {
            out.multicasts.push(Message::Data(m));
        }
        self.stats.messages_sent += num_to_send;
        if install {
            self.install(out);
        }
        // §III-B4: deliver and discard.
        self.deliver(out);
    }

    /// Up to `allowed` new messages of the application's values, stamped from
    /// `seq_received + 1`.
    fn new_messages(&mut self, allowed: usize, seq_received: u64, round: u64) -> Vec<Data> {
        let mut new_msgs: Vec<Data> = Vec::new();
        while new_msgs.len() < allowed && !self.pending.is_empty() {
            let seq = seq_received + 1 + new_msgs.len() as u64;
            let service = self.pending.front().map_or(self.cfg.service, |(_, s)| *s);
            // A value that fills a message on its own (the next would not fit beside it)
            // goes as it is, sharing the proposer's buffer: no copy.
            let alone = match (self.pending.front(), self.pending.get(1)) {
                (Some((v, _)), next) => next.is_none_or(|(n, s)| {
                    *s != service || v.len() + n.len() > self.cfg.max_message_bytes
                }),
                (None, _) => false,
            };
            if alone && let Some((v, _)) = self.pending.pop_front() {
                let id = ValueId {
                    node: self.me,
                    seq: self.pending_first_seq,
                };
                self.pending_first_seq += 1;
                new_msgs.push(Data {
                    ring: self.ring,
                    seq,
                    pid: self.me,
                    round,
                    service,
                    batch: Batch::single(id, v),
                    inner: None,
                });
                continue;
            }
            let mut b = BatchBuilder::new(self.me, self.pending_first_seq, 0);
            while let Some((v, s)) = self.pending.front() {
                if !b.is_empty()
                    && (*s != service || b.payload_bytes() + v.len() > self.cfg.max_message_bytes)
                {
                    break;
                }
                b.push(v);
                self.pending.pop_front();
            }
            self.pending_first_seq += b.len() as u64;
            new_msgs.push(Data {
                ring: self.ring,
                seq,
                pid: self.me,
                round,
                service,
                batch: b.finish(),
                inner: None,
            });
        }
        new_msgs
    }

    // ---- data handling (§III-C) -------------------------------------------------------

    fn on_data(&mut self, m: Data, out: &mut Out) {
        if m.ring != self.ring || !matches!(self.state, State::Operational | State::Recovery) {
            let (pid, ring) = (m.pid, m.ring);
            if !self.store_old(m) {
                self.foreign(pid, ring, out);
            }
            return;
        }
        // A message stamped after the last token this member passed: its successor took it.
        if let Some((Message::Token(t), _)) = &self.last_sent
            && m.seq > t.seq
        {
            self.last_sent = None;
        }
        let floor = self.discarded;
        // The ring's window (`buffer_messages_max`): an honest member stamps nothing that
        // far above any member's discard point, so a message beyond it is corrupt or far
        // ahead; dropped, it costs at most a retransmission, and no peer makes this member
        // buffer more than the window. Recovery discards nothing until the install, and
        // carries as many messages as its members hold of the old ring: not held to it.
        if self.state == State::Operational
            && m.seq > floor.saturating_add(self.cfg.buffer_messages_max.saturating_mul(2))
        {
            self.stats.data_beyond_window += 1;
            return;
        }
        let recovered = m.inner.is_some().then(|| m.clone());
        if !buffer_message(
            &mut self.buffer,
            floor,
            &mut self.high_seq,
            &mut self.my_aru,
            m,
        ) {
            self.stats.data_duplicate += 1;
            return;
        }
        if let Some(m) = recovered {
            self.keep_recovered(&m);
        }
        self.deliver(out);
    }

    fn advance_aru(&mut self) {
        while self.buffer.contains_key(&(self.my_aru + 1)) {
            self.my_aru += 1;
        }
    }

    pub(crate) fn deliver_one(&mut self, m: &Data, level: DeliveryLevel, out: &mut Out) {
        self.delivered_total += 1;
        out.deliveries.push(Delivery {
            group: GroupId(0),
            instance: self.delivered_total,
            batch: m.batch.clone(),
            level,
        });
    }

    /// Delivers in order up to the local aru, Agreed messages at once and Safe ones up to
    /// the safe bound; discards what every member has. Recovery delivers nothing (the old
    /// ring's messages wait for the install); an old ring's message carried in recovery is
    /// passed over once the ring is installed.
    fn deliver(&mut self, out: &mut Out) {
        if self.state != State::Operational {
            return;
        }
        let safe = self.safe_upto();
        while self.delivered < self.my_aru {
            let s = self.delivered + 1;
            let Some(m) = self.buffer.get(&s) else {
                break;
            };
            if m.inner.is_none() {
                if m.service == Service::Safe
                    && s > safe
                    && !self.mutated(Mutation::TokenSafeAtOnce)
                {
                    break;
                }
                let level = match m.service {
                    Service::Agreed => DeliveryLevel::Agreed,
                    Service::Safe => DeliveryLevel::Safe,
                };
                let m = m.clone();
                self.deliver_one(&m, level, out);
            }
            self.delivered = s;
        }
        // Every member has what is discarded: a proposer's value is acknowledged there, so
        // an acknowledged value survives any member's crash (an Agreed delivery alone
        // does not promise that: its sender may crash before anyone else has it).
        let discard = safe.min(self.delivered);
        while self.discarded < discard {
            self.discarded += 1;
            if let Some(m) = self.buffer.remove(&self.discarded) {
                self.acked_if_own(&m, out);
            }
        }
    }

    /// A message of this member's own, known to every member of a configuration: its
    /// values are acknowledged.
    pub(crate) fn acked_if_own(&mut self, m: &Data, out: &mut Out) {
        if m.pid == self.me && m.inner.is_none() {
            out.acks.push(Ack {
                key: m.batch.key(),
                count: m.batch.len() as u32,
            });
            self.own_unstable = self.own_unstable.saturating_sub(1);
        }
    }

    fn handle(&mut self, from: NodeId, msg: Message, out: &mut Out) {
        match msg {
            Message::Token(t) => self.on_token(t, out),
            Message::Data(m) => self.on_data(m, out),
            Message::Join(j) => self.on_join(from, j, out),
            Message::Commit(c) => self.on_commit(c, out),
            Message::MergeDetect(m) => self.foreign(m.sender, m.ring, out),
        }
    }
}

/// Puts `m` into a ring's `buffer` unless it is at or below `floor` (delivered or
/// discarded there) or held already, and moves `high_seq` and the all-received-up-to `aru`
/// on. Returns whether it was new.
pub(crate) fn buffer_message(
    buffer: &mut BTreeMap<u64, Data>,
    floor: u64,
    high_seq: &mut u64,
    aru: &mut u64,
    m: Data,
) -> bool {
    if m.seq <= floor || buffer.contains_key(&m.seq) {
        return false;
    }
    *high_seq = (*high_seq).max(m.seq);
    buffer.insert(m.seq, m);
    while buffer.contains_key(&(*aru + 1)) {
        *aru += 1;
    }
    true
}

impl Protocol for TokenRing {
    type Message = Message;

    fn node(&self) -> NodeId {
        self.me
    }

    fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        out: &mut Out,
    ) -> Result<ValueId, ProposeError> {
        let level = match self.cfg.service {
            Service::Agreed => DeliveryLevel::Agreed,
            Service::Safe => DeliveryLevel::Safe,
        };
        self.propose_at(now, payload, level, out)
    }

    /// Agreed or Safe per value (seed 002 §II): the value waits with its service, and a
    /// data message packs only values of one service.
    fn propose_at(
        &mut self,
        _now: Micros,
        payload: Bytes,
        level: DeliveryLevel,
        _out: &mut Out,
    ) -> Result<ValueId, ProposeError> {
        if payload.len() > self.cfg.max_value_bytes {
            return Err(ProposeError::TooLarge {
                bytes: payload.len(),
                max_bytes: self.cfg.max_value_bytes,
            });
        }
        if self.pending.len() >= self.cfg.window_values {
            return Err(ProposeError::Busy);
        }
        let id = ValueId {
            node: self.me,
            seq: self.pending_first_seq + self.pending.len() as u64,
        };
        let service = match level {
            DeliveryLevel::Agreed => Service::Agreed,
            DeliveryLevel::Safe => Service::Safe,
        };
        self.pending.push_back((payload, service));
        Ok(id)
    }

    fn receive(&mut self, now: Micros, from: NodeId, msg: Message, out: &mut Out) {
        self.now = self.now.max(now);
        self.handle(from, msg, out);
    }

    fn tick(&mut self, now: Micros, out: &mut Out) {
        self.now = self.now.max(now);
        // A ring of one passes its tokens to itself, one per tick.
        for _ in 0..self.loopback.len() {
            if let Some(m) = self.loopback.pop_front() {
                self.last_sent = None;
                self.handle(self.me, m, out);
            }
        }
        self.membership_tick(out);
        if let Some((_, until)) = &self.held
            && (now >= *until || !self.pending.is_empty())
            && let Some((t, _)) = self.held.take()
        {
            self.handle_token(t, out);
            return;
        }
        if let Some((m, sent)) = &self.last_sent
            && now >= sent + self.cfg.token_retransmit_us
            && self.successor() != self.me
        {
            let m = m.clone();
            self.last_sent = Some((m.clone(), now));
            self.stats.tokens_retransmitted += 1;
            out.sends.push((self.successor(), m));
        }
    }

    fn tick_interval_us(&self) -> Micros {
        // Often enough to end a hold and to retransmit on time.
        let hold = match self.cfg.token_hold_us {
            0 => self.cfg.token_retransmit_us,
            h => h,
        };
        hold.min(self.cfg.token_retransmit_us / 2)
            .min(self.cfg.join_timeout_us)
            .max(100)
    }

    fn can_propose(&self) -> bool {
        self.pending.len() < self.cfg.window_values
    }

    fn status(&self) -> Status {
        Status {
            node: self.me,
            coordinator: Some(self.ring.rep),
            ballot: Ballot::default(),
            leading: self.state == State::Operational && self.ring.rep == self.me,
            delivered_upto: self.delivered_total,
            decided_max: self.delivered_total,
            values_in_flight: self.pending.len() + self.own_unstable,
            amnesic: false,
            // The installed ring only: while a ring forms (gather, commit, recovery) `memb`
            // already names the ring being committed, which may yet fail and leave a
            // smaller one; a load that waits for the whole ring (the runtime's
            // `load_waits_for_view`) must not take that for the ring, or the values it
            // proposes are delivered in the smaller ring alone (EVS).
            view: if self.state == State::Operational {
                self.memb.clone()
            } else {
                Vec::new()
            },
            groups: Vec::new(),
            log_bytes: 0,
            log_appended_bytes: 0,
            // The ring installed here (its regular configuration), as for `view`:
            // `coordinator` names the ring being committed too, so only this tells that
            // a ring is in effect.
            configuration: (self.state == State::Operational)
                .then(|| membership::configuration(self.ring.seq, &self.memb)),
            configuration_pending: None,
            followers: Vec::new(),
            refused_messages: 0,
        }
    }
}
