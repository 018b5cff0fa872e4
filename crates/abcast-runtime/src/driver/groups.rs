//! Process groups at the client port (issue 18; `abcast_core::groups`, the wire in
//! `clientwire.rs`): the node's group layer reads every delivery and configuration change
//! the protocol carries out, clients join, leave and multicast through their connection,
//! and listening connections get each group's views and messages in delivery order.
//!
//! The layer's own values (its state after each regular configuration) and the leaves of
//! members bound to a connection that closed wait in a queue and are proposed at the end
//! of the loop's iteration, as far as the protocol takes them (`Busy`: the next one).

use super::clients::ClientState;
use super::{Driver, DriverError};
use crate::Hooks;
use crate::clientwire::{ClientFrame, GroupBatch};
use abcast_core::groups::{self, GroupEvent, GroupLayer};
use abcast_core::{ConfigChange, Delivery, DeliveryLevel, Micros, ProposeError, Protocol};
use bytes::Bytes;
use mio::Token;
use std::collections::VecDeque;

/// A listener with more than this queued is behind: the token waits for it
/// (`defer_token`).
const LISTENER_BEHIND_BYTES: usize = 1 << 20;

/// Leaves of bound members waiting in the queue, at most; past it a leave is dropped (its
/// member stays until its node leaves the configuration). The layer's states are never
/// dropped: the other members wait for them, and there is one per configuration change.
const GROUP_QUEUE_MAX: usize = 1 << 16;

/// The node's process groups.
pub(super) struct Groups {
    pub(super) layer: GroupLayer,
    queue: VecDeque<Bytes>,
    events: Vec<GroupEvent>,
    /// Leaves dropped at the queue's bound.
    pub(super) dropped: u64,
}

impl Groups {
    pub(super) fn new(me: abcast_core::NodeId) -> Groups {
        Groups {
            layer: GroupLayer::new(me),
            queue: VecDeque::new(),
            events: Vec::new(),
            dropped: 0,
        }
    }

    /// Queues a value to propose; a `droppable` one (a bound member's leave) only below
    /// the bound.
    fn enqueue(&mut self, v: Bytes, droppable: bool) {
        if droppable && self.queue.len() >= GROUP_QUEUE_MAX {
            self.dropped += 1;
            return;
        }
        self.queue.push_back(v);
    }
}

/// Whether a connection listening to `filter` ("" = every group) hears `group`.
fn hears(filter: &Option<String>, group: &str) -> bool {
    filter
        .as_deref()
        .is_some_and(|f| f.is_empty() || f == group)
}

impl<P: Protocol> Driver<P> {
    /// A delivery was carried out: the group layer reads its values.
    pub(super) fn group_delivered(&mut self, d: &Delivery) {
        let Some(g) = self.groups.as_mut() else {
            return;
        };
        g.layer.delivered(d, &mut g.events);
        self.tell_group_events();
    }

    /// A configuration change was carried out (at its place among the deliveries).
    pub(super) fn group_config_changed(&mut self, c: &ConfigChange) {
        let Some(g) = self.groups.as_mut() else {
            return;
        };
        g.layer.config_changed(c, &mut g.events);
        for v in g.layer.take_proposals() {
            g.enqueue(v, false);
        }
        self.tell_group_events();
    }

    /// Sends the layer's events to the listening connections: a view as one frame, the
    /// messages of one delivered value as one frame carrying the value as the ring
    /// delivered it (no message is encoded again; a large value goes to the socket from
    /// the buffer it arrived in).
    fn tell_group_events(&mut self) {
        let Some(g) = self.groups.as_mut() else {
            return;
        };
        if g.events.is_empty() {
            return;
        }
        let mut events = std::mem::take(&mut g.events);
        let any_listener = self.conns.values().any(|c| c.client.listen.is_some());
        if any_listener {
            for e in events.drain(..) {
                match e {
                    GroupEvent::View(v) => {
                        let group = v.group.clone();
                        self.send_group_frame(
                            &group,
                            &ClientFrame::GroupView { view: Box::new(v) },
                        );
                    }
                    GroupEvent::Message(m) => {
                        let group = m.group.clone();
                        let batch = GroupBatch {
                            group: m.group,
                            view: m.view,
                            transitional: m.transitional,
                            level: m.level,
                            sender: m.sender,
                            seq: m.id.seq,
                            payloads: m.payloads,
                            value: m.value,
                        };
                        self.send_group_frame(
                            &group,
                            &ClientFrame::GroupMessages {
                                batch: Box::new(batch),
                            },
                        );
                    }
                }
            }
        }
        events.clear();
        if let Some(g) = self.groups.as_mut() {
            g.events = events;
        }
    }

    /// One frame to every connection listening to `group`; one whose queue is full is
    /// closed (a listener too slow for the group).
    fn send_group_frame(&mut self, group: &str, f: &ClientFrame) {
        let chunks = f.encode();
        let kind = f.kind();
        let mut too_slow = Vec::new();
        for (&token, conn) in self.conns.iter_mut() {
            if !hears(&conn.client.listen, group) {
                continue;
            }
            if conn.out.push_frame(kind, 0, &chunks).is_err() {
                too_slow.push(token);
            } else if !conn.dirty {
                conn.dirty = true;
                self.dirty_conns.push(token);
            }
        }
        self.close_too_slow(too_slow);
    }

    /// Proposes the queued group values, in order, as far as the protocol takes them.
    pub(super) fn flush_group_queue<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        let Some(g) = self.groups.as_mut() else {
            return Ok(());
        };
        if g.queue.is_empty() {
            return Ok(());
        }
        while let Some(v) = g.queue.front() {
            match self.protocol.propose(now, v.clone(), &mut self.outbox) {
                Ok(id) => {
                    app.proposed(now, id, false);
                    g.queue.pop_front();
                }
                Err(ProposeError::Busy) => break,
                Err(e) => {
                    // Not a passing refusal: this value can never be proposed here.
                    g.queue.pop_front();
                    let e = e.to_string();
                    self.log(format_args!("a group value was refused: {e}"));
                    break;
                }
            }
        }
        self.carry_out(now, app)
    }

    /// Whether the loop leaves the token on its socket for now (receiver flow control,
    /// `DriverConfig::token_defer_max_us`): a group listener here is behind (more than
    /// `LISTENER_BEHIND_BYTES` queued), and the token has waited less than the maximum.
    pub(super) fn defer_token(&mut self, now: Micros) -> bool {
        let max = self.cfg.token_defer_max_us;
        if max == 0 || self.groups.is_none() || !self.lane_ready.control {
            self.token_deferred_since = None;
            return false;
        }
        let behind = self
            .conns
            .values()
            .any(|c| c.client.listen.is_some() && c.out.queued_bytes() > LISTENER_BEHIND_BYTES);
        if !behind {
            self.token_deferred_since = None;
            return false;
        }
        let since = *self.token_deferred_since.get_or_insert(now);
        if now.saturating_sub(since) < max {
            return true;
        }
        self.token_deferred_since = None;
        false
    }

    /// The members bound to a connection that closed leave their groups.
    pub(super) fn leave_bound(&mut self, client: &ClientState) {
        let Some(g) = self.groups.as_mut() else {
            return;
        };
        for (group, member) in &client.bound {
            // Proposed after its join (one node's values keep their order), so it takes
            // effect even if the join is not delivered yet.
            g.enqueue(groups::wire::encode_leave(group, member), true);
        }
    }

    /// A group request on the client port (`on_client_frame`).
    pub(super) fn on_group_frame<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        token: Token,
        f: ClientFrame,
    ) -> Result<(), DriverError> {
        let Some(layer) = self.groups.as_ref().map(|g| &g.layer) else {
            self.reply(
                token,
                &ClientFrame::Error {
                    text: "this node runs no process groups: they run on the token ring, with \
                           protocol = \"token\" and process_groups = true in [token] on every \
                           member"
                        .into(),
                },
            );
            return Ok(());
        };
        match f {
            ClientFrame::GroupJoin {
                group,
                member,
                bound,
            } => {
                let v = layer.join_value(&group, &member);
                let answer = self.propose_group_value(now, app, v, DeliveryLevel::Agreed)?;
                if matches!(answer, ClientFrame::Proposed { .. }) {
                    if bound && let Some(c) = self.conns.get_mut(&token) {
                        c.client.bound.push((group, member));
                    }
                    self.reply(token, &ClientFrame::GroupAsked);
                } else {
                    self.reply(token, &answer);
                }
            }
            ClientFrame::GroupLeave { group, member } => {
                let v = layer.leave_value(&group, &member);
                let answer = self.propose_group_value(now, app, v, DeliveryLevel::Agreed)?;
                if matches!(answer, ClientFrame::Proposed { .. }) {
                    if let Some(c) = self.conns.get_mut(&token) {
                        c.client
                            .bound
                            .retain(|(g, m)| !(*g == group && *m == member));
                    }
                    self.reply(token, &ClientFrame::GroupAsked);
                } else {
                    self.reply(token, &answer);
                }
            }
            ClientFrame::GroupMulticast {
                group,
                sender,
                level,
                payloads,
            } => self.group_multicast(now, app, token, &group, &sender, level, payloads)?,
            ClientFrame::GroupListen { group } => {
                let views: Vec<ClientFrame> = layer
                    .groups()
                    .filter(|(name, _)| group.is_empty() || *name == group)
                    .map(|(name, _)| {
                        let (id, kind, members) = layer.view_of(name);
                        ClientFrame::GroupView {
                            view: Box::new(groups::GroupView {
                                group: name.to_string(),
                                id,
                                kind,
                                members,
                                joined: Vec::new(),
                                left: Vec::new(),
                            }),
                        }
                    })
                    .collect();
                if let Some(c) = self.conns.get_mut(&token) {
                    c.client.listen = Some(group);
                }
                self.reply(token, &ClientFrame::GroupAsked);
                for v in &views {
                    self.reply(token, v);
                }
            }
            ClientFrame::GetGroups => {
                let list = layer
                    .groups()
                    .map(|(name, ms)| (name.to_string(), ms.iter().cloned().collect()))
                    .collect();
                self.reply(token, &ClientFrame::Groups { groups: list });
            }
            other => {
                self.reply(
                    token,
                    &ClientFrame::Error {
                        text: format!("frame kind {} is not a group request", other.kind()),
                    },
                );
            }
        }
        Ok(())
    }

    /// Proposes one group value the layer built (or the reason it refused to); the answer
    /// for the client (`Proposed`, `Busy` or `Error`).
    fn propose_group_value<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        v: Result<Bytes, String>,
        level: DeliveryLevel,
    ) -> Result<ClientFrame, DriverError> {
        let v = match v {
            Ok(v) => v,
            Err(text) => return Ok(ClientFrame::Error { text }),
        };
        let answer = match self.protocol.propose_at(now, v, level, &mut self.outbox) {
            Ok(id) => {
                app.proposed(now, id, false);
                ClientFrame::Proposed { ids: vec![id] }
            }
            Err(ProposeError::Busy) => {
                app.busy(now);
                ClientFrame::Busy
            }
            Err(e) => ClientFrame::Error {
                text: e.to_string(),
            },
        };
        self.carry_out(now, app)?;
        Ok(answer)
    }

    /// `GroupMulticast`: the messages, packed in order into values of at most
    /// `group_value_bytes` (envelope included), each value proposed; answered with
    /// `GroupSent` (how many messages were taken, in which values), then `Decided` per
    /// value.
    #[allow(clippy::too_many_arguments)]
    fn group_multicast<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        token: Token,
        group: &str,
        sender: &str,
        level: DeliveryLevel,
        payloads: Vec<Bytes>,
    ) -> Result<(), DriverError> {
        // Flow control: while a listener here is behind (its queue past half of the
        // client queue bound, where it would be closed), this node takes no more messages
        // from its clients: they wait (Busy) rather than outrun the members' receivers.
        let limit = self.cfg.transport.client_queue_bytes / 2;
        let behind = self
            .conns
            .values()
            .any(|c| c.client.listen.is_some() && c.out.queued_bytes() > limit);
        if behind {
            app.busy(now);
            self.reply(token, &ClientFrame::Busy);
            return Ok(());
        }
        let budget = self
            .cfg
            .group_value_bytes
            .saturating_sub(groups::wire::message_overhead_bytes(group, sender));
        let mut ids = Vec::new();
        let mut taken = 0usize;
        let mut refusal = None;
        while taken < payloads.len() {
            let Some(conn) = self.conns.get(&token) else {
                return Ok(());
            };
            if conn.client.pending.len() >= super::MAX_CLIENT_PENDING_VALUES {
                refusal = Some(ClientFrame::Busy);
                break;
            }
            // The next run of messages that fits the budget (at least one).
            let mut end = taken;
            let mut bytes = 0usize;
            while end < payloads.len()
                && end - taken < groups::wire::MESSAGES_PER_VALUE_MAX
                && (end == taken || bytes + 4 + payloads[end].len() <= budget)
            {
                bytes += 4 + payloads[end].len();
                end += 1;
            }
            let v = match self.groups.as_ref() {
                Some(g) => g.layer.messages_value(group, sender, &payloads[taken..end]),
                None => return Ok(()),
            };
            let v = match v {
                Ok(v) => v,
                Err(text) => {
                    refusal = Some(ClientFrame::Error { text });
                    break;
                }
            };
            match self.protocol.propose_at(now, v, level, &mut self.outbox) {
                Ok(id) => {
                    if let Some(conn) = self.conns.get_mut(&token) {
                        conn.client.pending.insert(id.seq);
                    }
                    app.proposed(now, id, false);
                    ids.push((id, (end - taken) as u32));
                    taken = end;
                }
                Err(ProposeError::Busy) => {
                    app.busy(now);
                    refusal = Some(ClientFrame::Busy);
                    break;
                }
                Err(e) => {
                    refusal = Some(ClientFrame::Error {
                        text: e.to_string(),
                    });
                    break;
                }
            }
        }
        self.carry_out(now, app)?;
        let answer = match refusal {
            Some(r) if ids.is_empty() => r,
            _ => ClientFrame::GroupSent { values: ids },
        };
        self.reply(token, &answer);
        Ok(())
    }
}
