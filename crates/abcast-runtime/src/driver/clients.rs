//! The client port and the embedding handle: client frames (propose, subscribe, follow),
//! subscriptions that replay the history and then go live (with gap markers), handle
//! streams, tickets, read barriers and the handle's commands.

use super::conns::Conn;
use super::{
    COMMANDS, COMMANDS_PER_ITERATION, Driver, DriverError, MAX_CLIENT_PENDING_VALUES, MAX_READS,
    MAX_TICKETS, REPLAY_BYTES_PER_ITERATION, ReadReply,
};
use crate::Hooks;
use crate::clientwire::{ClientFrame, KIND_DELIVERED, StatusReport};
use crate::frame::Frame;
use crate::handle::{
    self, Command, HandleError, MailTx, NodeStatus, PushError as MailPushError, ReadAnswer,
    StreamEvent, TicketEvent,
};
use crate::history::{Gap, GapReason, Item};
use abcast_core::protocol::{Ack, ReadState, ReconfigureError};
use abcast_core::{Delivery, GroupId, Instance, Micros, NodeId, ProposeError, Protocol};
use bytes::Bytes;
use mio::Token;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::mpsc::TryRecvError;

/// Where a subscriber is in the delivery sequence.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cursor {
    /// The next instance it needs.
    pub(super) next: Instance,
    /// Caught up: deliveries go to it as they happen. Otherwise the loop replays the
    /// history to it as its queue has room (`pump_subscribers`).
    pub(super) live: bool,
}

#[derive(Debug, Default)]
pub(super) struct ClientState {
    /// The client's subscription, if it asked for one.
    pub(super) sub: Option<Cursor>,
    /// Sequence numbers of this client's values (this node's own ids) not yet decided.
    pub(super) pending: BTreeSet<u64>,
    /// The process group it listens to ("": every group), if any (`groups.rs`).
    pub(super) listen: Option<String>,
    /// Members it joined bound to the connection: (group, member), left when it closes.
    pub(super) bound: Vec<(String, String)>,
}

/// Pushes one event to a handle stream; false (drop the stream) when it is gone or full,
/// the latter ending it with `TooSlow`.
pub(super) fn stream_push(tx: &MailTx<StreamEvent>, ev: StreamEvent) -> bool {
    match tx.push(ev) {
        Ok(()) => true,
        Err(MailPushError::Gone) => false,
        Err(MailPushError::Full) => {
            tx.close(handle::EndReason::TooSlow {
                capacity: tx.capacity(),
            });
            false
        }
    }
}

impl<P: Protocol> Driver<P> {
    /// A delivery was carried out: into the history, to live subscribers (client port and
    /// handles), to the tickets awaiting its values, to the read barriers awaiting it.
    pub(super) fn on_delivered(&mut self, d: &Delivery, results: &[Bytes]) {
        // On a Multi-Ring node subscribers get the delivery at its position in the merged
        // order (`history.rs`, `merged`), not at its ring's instance.
        let mut positioned = None;
        match self.history.record_delivery(d) {
            Ok((gaps, at)) => {
                for gap in &gaps {
                    self.gap_to_live(gap);
                }
                positioned = at;
            }
            Err(e) => self.history.disable_journal(&e),
        }
        if self.history.ordered() {
            self.delivered_upto = self.delivered_upto.max(d.instance);
        }
        let to_subscribers = positioned.as_ref().unwrap_or(d);
        self.deliver_to_clients(to_subscribers);
        self.deliver_to_streams(to_subscribers);
        if d.batch.origin() == self.cfg.me && !self.marker_reads.is_empty() {
            let waiting: Vec<Token> = d
                .batch
                .ids()
                .filter_map(|id| self.marker_reads.remove(&id.seq))
                .collect();
            for token in waiting {
                // The marker's own place is the read point: everything decided before the
                // barrier was asked is before it.
                self.reply(token, &ClientFrame::ReadPoint { upto: d.instance });
            }
        }
        if d.batch.origin() == self.cfg.me && !self.tickets.is_empty() {
            for (j, id) in d.batch.ids().enumerate() {
                if let Some(t) = self.tickets.remove(&id.seq) {
                    // A ticket dropped unread is simply gone.
                    let _ = t.push(TicketEvent::Applied {
                        instance: d.instance,
                        result: results.get(j).cloned(),
                    });
                }
            }
        }
        self.answer_reads();
    }

    /// Instances `[from, to)` will not be delivered here (a peer's snapshot installed, a
    /// skip): recorded in the history and told to live subscribers as a gap.
    /// A Multi-Ring learner skipped instances `[from, to)` of ring `group`: one position
    /// of the merged order, told to live subscribers as a gap naming the ring.
    pub(super) fn ring_skipped(&mut self, group: GroupId, from: Instance, to: Instance) {
        match self.history.record_ring_skip(group, from, to) {
            Ok(Some(gap)) => self.gap_to_live(&gap),
            Ok(None) => {}
            Err(e) => self.history.disable_journal(&e),
        }
    }

    pub(super) fn passed_over(&mut self, from: Instance, to: Instance, reason: GapReason) {
        match self.history.record_gap(from, to, reason) {
            Ok(Some(gap)) => {
                self.delivered_upto = self.delivered_upto.max(gap.to.saturating_sub(1));
                self.gap_to_live(&gap);
                self.answer_reads();
            }
            Ok(None) => {}
            Err(e) => self.history.disable_journal(&e),
        }
    }

    pub(super) fn gap_to_live(&mut self, gap: &Gap) {
        let mut too_slow = Vec::new();
        for (&token, conn) in self.conns.iter_mut() {
            let ClientState { sub: Some(cur), .. } = &mut conn.client else {
                continue;
            };
            if !cur.live || gap.to <= cur.next {
                continue;
            }
            let mut g = gap.clone();
            g.from = g.from.max(cur.next);
            cur.next = gap.to;
            let f = ClientFrame::Gap { gap: g };
            if conn.out.push_frame(f.kind(), 0, &f.encode()).is_err() {
                too_slow.push(token);
            } else if !conn.dirty {
                conn.dirty = true;
                self.dirty_conns.push(token);
            }
        }
        self.close_too_slow(too_slow);
        self.streams.retain_mut(|(cur, tx)| {
            if !cur.live || gap.to <= cur.next {
                return !tx.is_gone();
            }
            let mut g = gap.clone();
            g.from = g.from.max(cur.next);
            cur.next = gap.to;
            stream_push(tx, StreamEvent::Gap(g))
        });
    }

    pub(super) fn close_too_slow(&mut self, tokens: Vec<Token>) {
        for token in tokens {
            let limit = self.cfg.transport.client_queue_bytes;
            self.close_conn(
                token,
                format_args!("learn client too slow ({limit} bytes queued)"),
            );
        }
    }

    /// `d` at its position in the history (its instance, or on a Multi-Ring node its
    /// place in the merged order): every live subscriber's cursor moves past it.
    pub(super) fn deliver_to_clients(&mut self, d: &Delivery) {
        let mut too_slow = Vec::new();
        for (&token, conn) in self.conns.iter_mut() {
            let ClientState { sub: Some(cur), .. } = &mut conn.client else {
                continue;
            };
            if !cur.live || d.instance < cur.next {
                continue;
            }
            cur.next = d.instance.saturating_add(1);
            let f = ClientFrame::Delivered {
                instance: d.instance,
                batch: d.batch.clone(),
            };
            if conn.out.push_frame(KIND_DELIVERED, 0, &f.encode()).is_err() {
                too_slow.push(token);
            } else if !conn.dirty {
                conn.dirty = true;
                self.dirty_conns.push(token);
            }
        }
        self.close_too_slow(too_slow);
    }

    pub(super) fn deliver_to_streams(&mut self, d: &Delivery) {
        if self.streams.is_empty() {
            return;
        }
        self.streams.retain_mut(|(cur, tx)| {
            if !cur.live || d.instance < cur.next {
                return !tx.is_gone();
            }
            cur.next = d.instance.saturating_add(1);
            stream_push(tx, StreamEvent::Delivered(d.clone()))
        });
    }

    /// Replays the history to subscribers that are not caught up, as far as their queues
    /// have room (at most `REPLAY_BYTES_PER_ITERATION` each per iteration); one that
    /// reaches the end goes live.
    pub(super) fn pump_subscribers(&mut self) {
        self.replay_more = false;
        let tokens: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(&c.client, ClientState { sub: Some(cur), .. } if !cur.live))
            .map(|(t, _)| *t)
            .collect();
        for token in tokens {
            self.pump_client(token);
        }
        let mut streams = std::mem::take(&mut self.streams);
        streams.retain_mut(|(cur, tx)| {
            if cur.live {
                return !tx.is_gone();
            }
            let room = tx.room();
            if room == 0 {
                return !tx.is_gone();
            }
            let mut items = std::mem::take(&mut self.items);
            items.clear();
            let caught_up =
                match self
                    .history
                    .read(cur.next, REPLAY_BYTES_PER_ITERATION, room, &mut items)
                {
                    Ok(c) => c,
                    Err(e) => {
                        self.history.disable_journal(&e);
                        false
                    }
                };
            let n = items.len();
            for item in items.drain(..) {
                let end = item.end();
                let ev = match item {
                    Item::Delivered(d) => StreamEvent::Delivered(d),
                    Item::Gap(g) => StreamEvent::Gap(g),
                };
                if tx.push(ev).is_err() {
                    break;
                }
                cur.next = cur.next.max(end);
            }
            self.items = items;
            if caught_up && tx.room() > 0 {
                cur.live = true;
            } else if n > 0 && tx.room() > 0 {
                self.replay_more = true;
            }
            !tx.is_gone()
        });
        streams.append(&mut self.streams);
        self.streams = streams;
    }

    pub(super) fn pump_client(&mut self, token: Token) {
        let limit = self.cfg.transport.client_queue_bytes;
        let Some(conn) = self.conns.get(&token) else {
            return;
        };
        let ClientState { sub: Some(cur), .. } = &conn.client else {
            return;
        };
        let mut cur = *cur;
        let room = limit.saturating_sub(conn.out.queued_bytes());
        if room == 0 {
            return;
        }
        let was_empty = conn.out.is_empty();
        let mut items = std::mem::take(&mut self.items);
        items.clear();
        let caught_up = match self.history.read(
            cur.next,
            room.min(REPLAY_BYTES_PER_ITERATION),
            usize::MAX,
            &mut items,
        ) {
            Ok(c) => c,
            Err(e) => {
                self.history.disable_journal(&e);
                false
            }
        };
        let Some(conn) = self.conns.get_mut(&token) else {
            self.items = items;
            return;
        };
        let mut pushed_all = true;
        let mut pushed_any = false;
        for item in items.drain(..) {
            let end = item.end();
            let f = match item {
                Item::Delivered(d) => ClientFrame::Delivered {
                    instance: d.instance,
                    batch: d.batch,
                },
                Item::Gap(gap) => ClientFrame::Gap { gap },
            };
            if conn.out.push_frame(f.kind(), 0, &f.encode()).is_err() {
                pushed_all = false;
                break;
            }
            pushed_any = true;
            cur.next = cur.next.max(end);
        }
        self.items = items;
        if pushed_any && !conn.dirty {
            conn.dirty = true;
            self.dirty_conns.push(token);
        }
        if pushed_all && caught_up {
            cur.live = true;
        } else if pushed_any {
            self.replay_more = true;
        }
        conn.client.sub = Some(cur);
        if !pushed_any && was_empty && !caught_up {
            // One item larger than the whole client queue: it can never be sent.
            self.close_conn(
                token,
                format_args!("a delivery larger than the client queue ({limit} bytes)"),
            );
        }
    }

    /// Completes the read barriers whose instance this node reached.
    pub(super) fn answer_reads(&mut self) {
        if self.reads.is_empty() {
            return;
        }
        let upto = self.delivered_upto;
        let mut ready: Vec<(Token, Instance)> = Vec::new();
        let conns = &self.conns;
        self.reads.retain(|_, (target, who)| match (*target, who) {
            (Some(t), ReadReply::Handle(tx)) if t <= upto => {
                let _ = tx.push(ReadAnswer::Ready(t));
                false
            }
            (Some(t), ReadReply::Client(token)) if t <= upto => {
                ready.push((*token, t));
                false
            }
            (_, ReadReply::Handle(tx)) => !tx.is_gone(),
            (_, ReadReply::Client(token)) => conns.contains_key(token),
        });
        for (token, t) in ready {
            self.reply(token, &ClientFrame::ReadPoint { upto: t });
        }
    }

    /// Read barriers waiting, over both kinds; those of closed connections are dropped
    /// first when the bound is reached.
    fn reads_full(&mut self) -> bool {
        if self.reads.len() + self.marker_reads.len() < MAX_READS {
            return false;
        }
        let conns = &self.conns;
        self.reads.retain(|_, (_, who)| match who {
            ReadReply::Handle(tx) => !tx.is_gone(),
            ReadReply::Client(token) => conns.contains_key(token),
        });
        self.marker_reads
            .retain(|_, token| conns.contains_key(token));
        self.reads.len() + self.marker_reads.len() >= MAX_READS
    }

    /// The client port of node `n` (this node's own, or one `DriverConfig::client_addrs`
    /// names).
    fn client_addr_of(&self, n: NodeId) -> Option<SocketAddr> {
        if n == self.cfg.me {
            return self.client_addr();
        }
        (self.cfg.client_addrs.iter())
            .find(|(id, _)| *id == n)
            .map(|(_, a)| *a)
    }

    fn not_leader(&self, hint: Option<NodeId>) -> ClientFrame {
        ClientFrame::NotLeader {
            hint,
            client_addr: hint.and_then(|h| self.client_addr_of(h)),
        }
    }

    /// What `abcast status` shows: the protocol's status, this node's delivered index and
    /// the leader's client port.
    fn status_report(&self) -> StatusReport {
        let st = self.protocol.status();
        StatusReport {
            node: self.cfg.me,
            leader: st.coordinator,
            leader_client_addr: st.coordinator.and_then(|l| self.client_addr_of(l)),
            leading: st.leading,
            amnesic: st.amnesic,
            ballot: st.ballot,
            delivered_upto: self.delivered_upto,
            decided_max: st.decided_max,
            values_in_flight: st.values_in_flight as u64,
            configuration: st.configuration,
            configuration_pending: st.configuration_pending,
            followers: st.followers,
        }
    }

    /// A client's read barrier: the protocol's read index, or, where it has none, an empty
    /// marker value ordered through the log (its instance is the read point, as for the
    /// handle's `read_barrier`). The answer is a `ReadPoint` once this node delivered up to
    /// it; refusals at once.
    fn client_read<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        token: Token,
    ) -> Result<(), DriverError> {
        if self.reads_full() {
            self.reply(token, &ClientFrame::Busy);
            return Ok(());
        }
        let id = self.next_read_id;
        self.next_read_id = self.next_read_id.wrapping_add(1);
        let refusal = match self.protocol.read_index(now, id, &mut self.outbox) {
            Ok(()) => {
                self.reads.insert(id, (None, ReadReply::Client(token)));
                None
            }
            Err(ProposeError::Unsupported { .. }) => {
                match self.protocol.propose(now, Bytes::new(), &mut self.outbox) {
                    Ok(vid) => {
                        app.proposed(now, vid, false);
                        self.marker_reads.insert(vid.seq, token);
                        None
                    }
                    Err(e) => Some(e),
                }
            }
            Err(e) => Some(e),
        };
        if let Some(e) = refusal {
            let answer = match e {
                ProposeError::NotLeader { hint } => self.not_leader(hint),
                ProposeError::Busy => ClientFrame::Busy,
                e => ClientFrame::Error {
                    text: e.to_string(),
                },
            };
            self.reply(token, &answer);
        }
        self.carry_out(now, app)
    }

    pub(super) fn on_commands<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        for _ in 0..COMMANDS_PER_ITERATION {
            let Some(rx) = self.commands.as_ref() else {
                return Ok(());
            };
            let c = match rx.try_recv() {
                Ok(c) => c,
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) => {
                    self.commands = None;
                    return Ok(());
                }
            };
            self.on_command(now, app, c)?;
        }
        // More may wait: come back next iteration.
        self.ready_again.push(COMMANDS);
        Ok(())
    }

    pub(super) fn on_command<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        c: Command,
    ) -> Result<(), DriverError> {
        match c {
            Command::Propose { payload, ticket } => {
                if self.tickets.len() >= MAX_TICKETS {
                    self.tickets.retain(|_, t| !t.is_gone());
                }
                if self.tickets.len() >= MAX_TICKETS {
                    let _ = ticket.push(TicketEvent::Proposed(Err(HandleError::Busy)));
                    return Ok(());
                }
                match self.protocol.propose(now, payload, &mut self.outbox) {
                    Ok(id) => {
                        app.proposed(now, id, false);
                        if ticket.push(TicketEvent::Proposed(Ok(id))).is_ok() {
                            self.tickets.insert(id.seq, ticket);
                        }
                    }
                    Err(ProposeError::Busy) => {
                        app.busy(now);
                        let _ = ticket.push(TicketEvent::Proposed(Err(HandleError::Busy)));
                    }
                    Err(e) => {
                        let _ = ticket.push(TicketEvent::Proposed(Err(HandleError::Refused(e))));
                    }
                }
                self.carry_out(now, app)
            }
            Command::Subscribe { from, stream } => {
                self.streams.push((
                    Cursor {
                        next: from.max(1),
                        live: false,
                    },
                    stream,
                ));
                Ok(())
            }
            Command::ReadBarrier { reply } => {
                if self.reads_full() {
                    let _ = reply.push(ReadAnswer::Refused(HandleError::Busy));
                    return Ok(());
                }
                let id = self.next_read_id;
                self.next_read_id = self.next_read_id.wrapping_add(1);
                match self.protocol.read_index(now, id, &mut self.outbox) {
                    Ok(()) => {
                        self.reads.insert(id, (None, ReadReply::Handle(reply)));
                    }
                    Err(ProposeError::Unsupported { .. }) => {
                        let _ = reply.push(ReadAnswer::Unsupported);
                    }
                    Err(e) => {
                        let _ = reply.push(ReadAnswer::Refused(HandleError::Refused(e)));
                    }
                }
                self.carry_out(now, app)
            }
            Command::Reconfigure { config, reply } => {
                let r = self.protocol.reconfigure(now, config, &mut self.outbox);
                let _ = reply.push(r);
                self.carry_out(now, app)
            }
            Command::Status { reply } => {
                let _ = reply.push(NodeStatus {
                    protocol: self.protocol.status(),
                    transport: self.transport_stats(),
                    delivered_upto: self.delivered_upto,
                });
                Ok(())
            }
            Command::AddPeer { id, addr, reply } => {
                let _ = reply.push(self.add_peer(id, addr).map_err(|e| e.to_string()));
                Ok(())
            }
            Command::RemovePeer { id, reply } => {
                let _ = reply.push(self.remove_peer(id));
                Ok(())
            }
        }
    }

    /// The protocol confirmed read barrier `r`.
    pub(super) fn on_read(&mut self, r: &ReadState) {
        if let Some(entry) = self.reads.get_mut(&r.id) {
            entry.0 = Some(r.upto);
        }
        self.answer_reads();
    }

    pub(super) fn ack_tickets(&mut self, a: &Ack) {
        if a.key.origin != self.cfg.me || self.tickets.is_empty() {
            return;
        }
        let to = a.key.first_seq.saturating_add(u64::from(a.count));
        let mut gone = Vec::new();
        for (&seq, t) in self.tickets.range(a.key.first_seq..to) {
            if t.push(TicketEvent::Decided) == Err(MailPushError::Gone) {
                gone.push(seq);
            }
        }
        for seq in gone {
            self.tickets.remove(&seq);
        }
    }

    pub(super) fn ack_to_clients(&mut self, a: &Ack) {
        if a.key.origin != self.cfg.me {
            return;
        }
        let me = self.cfg.me;
        let (from, to) = (
            a.key.first_seq,
            a.key.first_seq.saturating_add(u64::from(a.count)),
        );
        for (&token, conn) in self.conns.iter_mut() {
            let st = &mut conn.client;
            if st.pending.is_empty() {
                continue;
            }
            let seqs: Vec<u64> = st.pending.range(from..to).copied().collect();
            if seqs.is_empty() {
                continue;
            }
            for s in &seqs {
                st.pending.remove(s);
            }
            let ids = seqs
                .into_iter()
                .map(|seq| abcast_core::ValueId { node: me, seq })
                .collect();
            let f = ClientFrame::Decided { ids };
            // A client that does not read its answers is not served more: its queue bound
            // drops the notification, and it sees its propose time out.
            if conn.out.push_frame(f.kind(), 0, &f.encode()).is_ok() && !conn.dirty {
                conn.dirty = true;
                self.dirty_conns.push(token);
            }
        }
    }

    pub(super) fn reply(&mut self, token: Token, f: &ClientFrame) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        if conn.out.push_frame(f.kind(), 0, &f.encode()).is_ok() && !conn.dirty {
            conn.dirty = true;
            self.dirty_conns.push(token);
        }
    }

    pub(super) fn on_client_frame<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        token: Token,
        frame: Frame,
    ) -> Result<Result<(), String>, DriverError> {
        let f = match ClientFrame::decode(frame.kind, frame.body) {
            Ok(f) => f,
            Err(e) => return Ok(Err(format!("bad client frame kind {}: {e}", frame.kind))),
        };
        match f {
            ClientFrame::Propose { payloads } => {
                let mut ids = Vec::new();
                let mut refusal = None;
                for p in payloads {
                    let pending = match self.conns.get(&token) {
                        Some(conn) => conn.client.pending.len(),
                        None => return Ok(Ok(())),
                    };
                    if pending >= MAX_CLIENT_PENDING_VALUES {
                        refusal = Some(ClientFrame::Busy);
                        break;
                    }
                    match self.protocol.propose(now, p, &mut self.outbox) {
                        Ok(id) => {
                            if let Some(conn) = self.conns.get_mut(&token) {
                                conn.client.pending.insert(id.seq);
                            }
                            app.proposed(now, id, false);
                            ids.push(id);
                        }
                        Err(ProposeError::Busy) => {
                            app.busy(now);
                            refusal = Some(ClientFrame::Busy);
                        }
                        Err(e) => {
                            refusal = Some(ClientFrame::Error {
                                text: e.to_string(),
                            })
                        }
                    }
                    self.carry_out(now, app)?;
                    if refusal.is_some() {
                        break;
                    }
                }
                let answer = match refusal {
                    Some(r) if ids.is_empty() => r,
                    _ => ClientFrame::Proposed { ids },
                };
                self.reply(token, &answer);
            }
            ClientFrame::Subscribe { from_instance } => {
                let Some(Conn { client: st, .. }) = self.conns.get_mut(&token) else {
                    return Ok(Ok(()));
                };
                // Replayed from the history at the end of the iteration, as the client's
                // queue has room (`pump_subscribers`), then live.
                st.sub = Some(Cursor {
                    next: from_instance.max(1),
                    live: false,
                });
            }
            ClientFrame::Follow { group, on } => {
                let asked = self
                    .protocol
                    .join_group(now, GroupId(group), on, &mut self.outbox);
                self.carry_out(now, app)?;
                let answer = match asked {
                    Ok(()) => ClientFrame::FollowAsked,
                    Err(text) => ClientFrame::Error { text },
                };
                self.reply(token, &answer);
            }
            ClientFrame::GetStatus => {
                let report = self.status_report();
                self.reply(
                    token,
                    &ClientFrame::StatusReport {
                        report: Box::new(report),
                    },
                );
            }
            ClientFrame::Reconfigure { config } => {
                let r = self.protocol.reconfigure(now, config, &mut self.outbox);
                self.carry_out(now, app)?;
                let answer = match r {
                    Ok(()) => ClientFrame::ReconfigureAsked,
                    Err(ReconfigureError::Refused(ProposeError::NotLeader { hint })) => {
                        self.not_leader(hint)
                    }
                    Err(ReconfigureError::Refused(ProposeError::Busy)) => ClientFrame::Busy,
                    Err(e) => ClientFrame::Error {
                        text: e.to_string(),
                    },
                };
                self.reply(token, &answer);
            }
            ClientFrame::ReadBarrier => self.client_read(now, app, token)?,
            f @ (ClientFrame::GroupJoin { .. }
            | ClientFrame::GroupLeave { .. }
            | ClientFrame::GroupMulticast { .. }
            | ClientFrame::GroupListen { .. }
            | ClientFrame::GetGroups) => self.on_group_frame(now, app, token, f)?,
            ClientFrame::ShmOpen => {
                if let Err(reason) = self.open_shm(token) {
                    return Ok(Err(reason));
                }
            }
            other => {
                return Ok(Err(format!(
                    "unexpected client frame kind {}",
                    other.kind()
                )));
            }
        }
        Ok(Ok(()))
    }
}
