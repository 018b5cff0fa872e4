//! Token-ring total order: the Accelerated Ring protocol of seed 002 §III over one regular
//! configuration, as a pure state machine; `accelerated_window = 0` is the original Totem
//! ring (Amir et al., TOCS 1995), so both run from this code.
//!
//! The path of one value:
//!
//! 1. `propose` queues it (`pending`, bounded by `window_values`).
//! 2. When the token arrives (`on_token`, §III-B): retransmissions the token asks for go
//!    first (§III-B1, all before the token); then `Num_to_send` new messages are chosen,
//!    the minimum of what waits (packed, small values into one message of
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
//!    every member has them. Those are also discarded: no one will ask for them again.
//!
//! Not in the seed, needed to run: a token lost on the wire is sent again by its sender
//! after `token_retransmit_us` unless something shows the successor took it (the token
//! back, or a message stamped after it); the successor takes one copy (`Token::hop`). An
//! idle ring holds the token `token_hold_us` at each member (Corosync's `token_hold`).
//!
//! Membership (token loss, gather / commit / recovery, transitional configurations) is
//! Totem's and is not here yet: this module runs one configuration, and a member that
//! crashes stops the ring. The priority of the token over data (§III-D) is the driver's:
//! the two arrive on different sockets.

pub mod config;
pub mod messages;
#[cfg(test)]
mod tests;

pub use config::TokenConfig;
pub use messages::{Data, Message, RingId, Service, Token};

use crate::ProposeError;
use crate::config::{ConfigError, StartInfo};
use crate::protocol::{Ack, Delivery, DeliveryLevel, Outbox, Protocol, Status};
use crate::types::{Ballot, BatchBuilder, Micros, NodeId, ValueId};
use bytes::Bytes;
use messages::RTR_MAX;
use std::collections::{BTreeMap, VecDeque};

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
    /// Messages of another ring (configuration), dropped.
    pub foreign_dropped: u64,
}

/// One member of one token ring.
pub struct TokenRing {
    cfg: TokenConfig,
    me: NodeId,
    ring: RingId,
    /// Position in `cfg.members`; the successor is the next one, wrapping.
    my_index: usize,
    /// Values waiting for the token, with the first one's id seq.
    pending: VecDeque<Bytes>,
    pending_first_seq: u64,
    /// Received (or sent) messages not yet discarded, by sequence number.
    buffer: BTreeMap<u64, Data>,
    /// Local all-received-up-to: every message up to it is here (or was discarded).
    my_aru: u64,
    /// Every message up to it is delivered here.
    delivered: u64,
    /// Every message up to it is discarded here (everyone has it).
    discarded: u64,
    /// The highest sequence number this member knows assigned.
    high_seq: u64,
    /// The `seq` of the token taken in the previous round (the accelerated ring asks for
    /// retransmissions only up to it, §III-B2).
    prev_token_seq: u64,
    /// The `hop` of the last token taken; older copies are duplicates.
    last_hop: u64,
    /// Messages (new and retransmitted) this member sent in its previous round (`fcc`).
    sent_last_round: u32,
    /// The `aru` on the token this member sent in its previous round and in this one.
    aru_sent_prev: u64,
    aru_sent_now: u64,
    /// The last token passed, when, and whether something since shows its successor took
    /// it (retransmitted otherwise).
    last_sent: Option<(Token, Micros)>,
    /// A token held on an idle ring, until this time.
    held: Option<(Token, Micros)>,
    /// Own messages stamped and not yet known to every member: their acks wait.
    own_unstable: usize,
    now: Micros,
    stats: TokenStats,
}

impl TokenRing {
    /// A member of the ring `cfg.members` (the ring whose representative is the first
    /// member, sequence 0). The first member creates the first token.
    pub fn new(cfg: TokenConfig, me: NodeId, start: StartInfo) -> Result<TokenRing, ConfigError> {
        cfg.validate(me)?;
        let my_index = cfg.members.iter().position(|m| *m == me).unwrap_or(0);
        let ring = RingId {
            rep: cfg.members[0],
            seq: 0,
        };
        Ok(TokenRing {
            me,
            ring,
            my_index,
            pending: VecDeque::new(),
            pending_first_seq: start.start_seq,
            buffer: BTreeMap::new(),
            my_aru: 0,
            delivered: 0,
            discarded: 0,
            high_seq: 0,
            prev_token_seq: 0,
            last_hop: 0,
            sent_last_round: 0,
            aru_sent_prev: 0,
            aru_sent_now: 0,
            last_sent: None,
            held: None,
            own_unstable: 0,
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

    /// The local all-received-up-to.
    pub fn my_aru(&self) -> u64 {
        self.my_aru
    }

    fn successor(&self) -> NodeId {
        self.cfg.members[(self.my_index + 1) % self.cfg.members.len()]
    }

    fn is_first(&self) -> bool {
        self.my_index == 0
    }

    /// Safe delivery and discarding bound (§III-B4): the lower `aru` of the tokens this
    /// member sent in its last two rounds.
    fn safe_upto(&self) -> u64 {
        self.aru_sent_prev.min(self.aru_sent_now)
    }

    // ---- token handling (§III-B) ------------------------------------------------------

    fn on_token(&mut self, mut t: Token, out: &mut Out) {
        if t.ring != self.ring {
            self.stats.foreign_dropped += 1;
            return;
        }
        if t.hop <= self.last_hop {
            self.stats.tokens_duplicate += 1;
            return;
        }
        self.last_hop = t.hop;
        self.last_sent = None; // it came back around: the successor had it
        self.stats.tokens_taken += 1;
        self.high_seq = self.high_seq.max(t.seq);
        if self.is_first() {
            t.rotation += 1;
        }
        let idle = self.pending.is_empty()
            && t.rtr.is_empty()
            && t.aru == t.seq
            && self.my_aru == t.seq
            && self.delivered == t.seq;
        if idle && self.cfg.token_hold_us > 0 && self.held.is_none() {
            self.held = Some((t, self.now + self.cfg.token_hold_us));
            return;
        }
        self.handle_token(t, out);
    }

    fn handle_token(&mut self, mut t: Token, out: &mut Out) {
        let accelerated = self.cfg.accelerated_window;
        // §III-B1: answer the retransmission requests this member can, all before the
        // token (a retransmission sent after it may be asked for again).
        let mut num_retrans = 0u32;
        let mut still_asked = Vec::with_capacity(t.rtr.len());
        for &s in &t.rtr {
            match self.buffer.get(&s) {
                Some(m) if num_retrans < self.cfg.global_window => {
                    out.multicasts.push(Message::Data(m.clone()));
                    num_retrans += 1;
                }
                _ => still_asked.push(s),
            }
        }
        self.stats.retransmissions_sent += u64::from(num_retrans);
        // Num_to_send: what waits, Personal_window, Global_window - fcc - retransmissions.
        let global_room = self
            .cfg
            .global_window
            .saturating_sub(t.fcc.saturating_add(num_retrans));
        let allowed = self.cfg.personal_window.min(global_room) as usize;
        let round = t.rotation;
        let seq_received = t.seq;
        let mut new_msgs: Vec<Data> = Vec::new();
        while new_msgs.len() < allowed && !self.pending.is_empty() {
            let seq = seq_received + 1 + new_msgs.len() as u64;
            let mut b = BatchBuilder::new(self.me, self.pending_first_seq, 0);
            while let Some(v) = self.pending.front() {
                if !b.is_empty() && b.payload_bytes() + v.len() > self.cfg.max_message_bytes {
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
                service: self.cfg.service,
                batch: b.finish(),
            });
        }
        let num_to_send = new_msgs.len() as u64;
        // The member holds its own messages from the moment they are stamped.
        for m in &new_msgs {
            self.buffer.insert(m.seq, m.clone());
            self.own_unstable += 1;
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
        let holds_it = t.aru_id == Some(self.me);
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
        while s <= limit && rtr.len() < RTR_MAX {
            if !self.buffer.contains_key(&s) && !rtr.contains(&s) {
                rtr.push(s);
                self.stats.retransmissions_asked += 1;
            }
            s += 1;
        }
        rtr.sort_unstable();
        t.rtr = rtr;
        t.hop += 1;
        self.aru_sent_prev = self.aru_sent_now;
        self.aru_sent_now = t.aru;
        assert!(t.aru <= t.seq, "token aru {} above seq {}", t.aru, t.seq);
        // The token, then the post-token messages (§III-B3).
        out.multicasts_first = out.multicasts.len();
        self.last_sent = Some((t.clone(), self.now));
        out.sends.push((self.successor(), Message::Token(t)));
        for m in new_msgs.into_iter().skip(pre) {
            out.multicasts.push(Message::Data(m));
        }
        self.stats.messages_sent += num_to_send;
        // §III-B4: deliver and discard.
        self.deliver(out);
    }

    // ---- data handling (§III-C) -------------------------------------------------------

    fn on_data(&mut self, m: Data, out: &mut Out) {
        if m.ring != self.ring {
            self.stats.foreign_dropped += 1;
            return;
        }
        // A message stamped after the last token this member passed: its successor took it.
        if self.last_sent.as_ref().is_some_and(|(t, _)| m.seq > t.seq) {
            self.last_sent = None;
        }
        if m.seq <= self.discarded || self.buffer.contains_key(&m.seq) {
            self.stats.data_duplicate += 1;
            return;
        }
        self.high_seq = self.high_seq.max(m.seq);
        self.buffer.insert(m.seq, m);
        self.advance_aru();
        self.deliver(out);
    }

    fn advance_aru(&mut self) {
        while self.buffer.contains_key(&(self.my_aru + 1)) {
            self.my_aru += 1;
        }
    }

    /// Delivers in order up to the local aru, Agreed messages at once and Safe ones up to
    /// the safe bound; discards what every member has.
    fn deliver(&mut self, out: &mut Out) {
        let safe = self.safe_upto();
        while self.delivered < self.my_aru {
            let s = self.delivered + 1;
            let Some(m) = self.buffer.get(&s) else {
                break;
            };
            if m.service == Service::Safe && s > safe {
                break;
            }
            let level = match m.service {
                Service::Agreed => DeliveryLevel::Agreed,
                Service::Safe => DeliveryLevel::Safe,
            };
            out.deliveries.push(Delivery {
                group: crate::types::GroupId(0),
                instance: s,
                batch: m.batch.clone(),
                level,
            });
            self.delivered = s;
        }
        // Every member has what is discarded: a proposer's value is acknowledged there, so
        // an acknowledged value survives any member's crash (an Agreed delivery alone
        // does not promise that: its sender may crash before anyone else has it).
        let discard = safe.min(self.delivered);
        while self.discarded < discard {
            self.discarded += 1;
            if let Some(m) = self.buffer.remove(&self.discarded)
                && m.pid == self.me
            {
                out.acks.push(Ack {
                    key: m.batch.key(),
                    count: m.batch.len() as u32,
                });
                self.own_unstable = self.own_unstable.saturating_sub(1);
            }
        }
    }
}

impl Protocol for TokenRing {
    type Message = Message;

    fn node(&self) -> NodeId {
        self.me
    }

    fn propose(
        &mut self,
        _now: Micros,
        payload: Bytes,
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
        self.pending.push_back(payload);
        Ok(id)
    }

    fn receive(&mut self, now: Micros, _from: NodeId, msg: Message, out: &mut Out) {
        self.now = self.now.max(now);
        match msg {
            Message::Token(t) => self.on_token(t, out),
            Message::Data(m) => self.on_data(m, out),
        }
    }

    fn tick(&mut self, now: Micros, out: &mut Out) {
        self.now = self.now.max(now);
        // The first member creates the ring's first token.
        if self.is_first() && self.last_hop == 0 && self.last_sent.is_none() && self.held.is_none()
        {
            self.last_hop = 1;
            let first = Token {
                ring: self.ring,
                hop: 1,
                rotation: 1,
                seq: 0,
                aru: 0,
                aru_id: None,
                fcc: 0,
                rtr: Vec::new(),
            };
            self.handle_token(first, out);
            return;
        }
        if let Some((_, until)) = &self.held
            && (now >= *until || !self.pending.is_empty())
            && let Some((t, _)) = self.held.take()
        {
            self.handle_token(t, out);
            return;
        }
        if let Some((t, sent)) = &self.last_sent
            && now >= sent + self.cfg.token_retransmit_us
        {
            let t = t.clone();
            self.last_sent = Some((t.clone(), now));
            self.stats.tokens_retransmitted += 1;
            out.sends.push((self.successor(), Message::Token(t)));
        }
    }

    fn tick_interval_us(&self) -> Micros {
        // Often enough to end a hold and to retransmit on time.
        let hold = match self.cfg.token_hold_us {
            0 => self.cfg.token_retransmit_us,
            h => h,
        };
        hold.min(self.cfg.token_retransmit_us / 2).max(100)
    }

    fn can_propose(&self) -> bool {
        self.pending.len() < self.cfg.window_values
    }

    fn status(&self) -> Status {
        Status {
            node: self.me,
            coordinator: Some(self.ring.rep),
            ballot: Ballot::default(),
            leading: false,
            delivered_upto: self.delivered,
            decided_max: self.high_seq,
            values_in_flight: self.pending.len() + self.own_unstable,
            amnesic: false,
            view: self.cfg.members.clone(),
            groups: Vec::new(),
            log_bytes: 0,
            log_appended_bytes: 0,
            configuration: None,
            configuration_pending: None,
            followers: Vec::new(),
        }
    }
}
