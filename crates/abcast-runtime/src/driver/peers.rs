//! The peer set and the routing of the protocol's messages onto the transports
//! (`crate::transport`): the loop's side of the transport interface.
//!
//! A message for a peer is encoded once, passes the injected link faults if any
//! (`linkfault.rs`), and is offered to the transports in order (the control lane's UDP
//! socket and UDP unicast if configured, then TCP): the first that does not decline it
//! queues or drops it. A control-lane message (the token) is written at once, after what
//! was queued before it on the other sockets: the protocol's order of effects (pre-token
//! data, token, post-token data: `Outbox::multicasts_first`) holds across sockets. A multicast is offered
//! to the transports' group send (UDP IP-multicast) and, when every one declines, goes as
//! one copy per peer. What arrives comes back from a transport as undecoded frames, which
//! are decoded here with the protocol's message type; one that does not decode is handed
//! back to its transport (`Transport::reject`), which closes a connection or counts a
//! datagram. Link changes the transports report become `Protocol::peer_reconnected` /
//! `peer_unreachable`, carried out with the iteration's other effects.
//!
//! The peer set is the address book of the transports, not the protocol's membership
//! (`Protocol::reconfigure`): frames for a node outside it are dropped and its `Hello` is
//! refused. It changes at run time (`Driver::add_peer`, `Driver::remove_peer`, and the
//! handle's `add_peer` / `remove_peer`).

use super::{
    CONTROL_SOCKET, Driver, DriverConfig, DriverError, LANE_READS_PER_ITERATION, MULTICAST_SOCKET,
    UNICAST_SOCKET,
};
use crate::Hooks;
use crate::linkfault::{QueueRoom, Verdict};
use crate::transport::tcp::{PEER_SLOTS_MAX, TcpLinks};
use crate::transport::{InFrame, LinkNotice, OutFrame, Readiness, Ready, Sent, Transport};
use abcast_core::codec::{Encoder, Lane, WireMessage};
use abcast_core::{GroupId, Micros, NodeId, Protocol};
use bytes::Bytes;
use mio::Token;
use std::collections::HashMap;
use std::net::SocketAddr;

/// One entry of the peer set. A removed peer keeps its slot (`member` false), so the slot
/// numbers the link faults are indexed by stay valid and a returning peer gets its own
/// back.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) id: NodeId,
    pub(super) addr: SocketAddr,
    pub(super) member: bool,
}

/// The peer set: slots in configuration order, then in order of addition.
#[derive(Debug, Default)]
pub(super) struct PeerBook {
    pub(super) slots: Vec<Slot>,
    pub(super) index: HashMap<NodeId, usize>,
}

impl PeerBook {
    /// One slot per configured peer other than this node (repeats skipped).
    pub(super) fn from_config(cfg: &DriverConfig) -> PeerBook {
        let mut book = PeerBook::default();
        for &(id, addr) in &cfg.peers {
            if id == cfg.me || book.index.contains_key(&id) {
                continue;
            }
            book.index.insert(id, book.slots.len());
            book.slots.push(Slot {
                id,
                addr,
                member: true,
            });
        }
        book
    }

    /// `(id, addr)` of every member.
    pub(super) fn members(&self) -> Vec<(NodeId, SocketAddr)> {
        self.slots
            .iter()
            .filter(|s| s.member)
            .map(|s| (s.id, s.addr))
            .collect()
    }
}

impl<P: Protocol> Driver<P> {
    /// Every transport, in the order a message to one peer is offered to them (the control
    /// lane's socket first: it declines every other message).
    pub(super) fn transports(&mut self) -> impl Iterator<Item = &mut dyn Transport> {
        self.control
            .iter_mut()
            .map(|t| t as &mut dyn Transport)
            .chain(self.udp.iter_mut().map(|t| t as &mut dyn Transport))
            .chain(self.mcast.iter_mut().map(|t| t as &mut dyn Transport))
            .chain(std::iter::once(&mut self.tcp as &mut dyn Transport))
    }

    /// Every transport but the control lane's, whose peers have addresses of their own.
    fn data_transports(&mut self) -> impl Iterator<Item = &mut dyn Transport> {
        self.udp
            .iter_mut()
            .map(|t| t as &mut dyn Transport)
            .chain(self.mcast.iter_mut().map(|t| t as &mut dyn Transport))
            .chain(std::iter::once(&mut self.tcp as &mut dyn Transport))
    }

    /// The transport that registered `token`, if any.
    fn transport_of(&mut self, token: Token) -> Option<&mut dyn Transport> {
        match token {
            CONTROL_SOCKET => self.control.as_mut().map(|t| t as &mut dyn Transport),
            UNICAST_SOCKET => self.udp.as_mut().map(|t| t as &mut dyn Transport),
            MULTICAST_SOCKET => self.mcast.as_mut().map(|t| t as &mut dyn Transport),
            t if self.tcp.owns(t) => Some(&mut self.tcp),
            _ => None,
        }
    }

    /// Adds node `id` at `addr` to the peers this node links to, or moves a peer to a new
    /// address (its link is closed, and the next send dials `addr`). A node added after
    /// start gets no injected link faults unless it had a slot before (a removed peer
    /// added again keeps its own).
    pub fn add_peer(&mut self, id: NodeId, addr: SocketAddr) -> Result<(), DriverError> {
        let refuse = |reason: String| DriverError::Config {
            field: "peers".into(),
            reason,
        };
        if id == self.cfg.me {
            return Err(refuse(format!("{id} is this node")));
        }
        let known = self.book.index.contains_key(&id);
        let slot = match self.book.slots.iter().position(|s| s.id == id) {
            Some(slot) => slot,
            None if self.book.slots.len() >= PEER_SLOTS_MAX => {
                return Err(refuse(format!("more than {PEER_SLOTS_MAX} peers")));
            }
            None => {
                self.book.slots.push(Slot {
                    id,
                    addr,
                    member: false,
                });
                self.book.slots.len() - 1
            }
        };
        let now = self.now();
        if let (Some(c), Some(offset)) = (
            self.control.as_mut(),
            self.cfg.transport.control_port_offset,
        ) {
            let Some(caddr) = crate::transport::control_addr(addr, offset) else {
                return Err(refuse(format!(
                    "{addr} plus the control port offset {offset} is past port 65535"
                )));
            };
            c.add_peer(now, id, caddr).map_err(refuse)?;
        }
        for t in self.data_transports() {
            t.add_peer(now, id, addr).map_err(refuse)?;
        }
        let s = &mut self.book.slots[slot];
        let moved = s.addr != addr;
        s.addr = addr;
        s.member = true;
        self.book.index.insert(id, slot);
        self.unknown_logged.remove(&id);
        if !known {
            self.log(format_args!("added peer {id} at {addr}"));
        } else if moved {
            self.log(format_args!("peer {id} moved to {addr}"));
        }
        Ok(())
    }

    /// Removes node `id` from the peer set: its outbound link and every connection it
    /// dialed to this node are closed, frames queued for it are dropped, and from now on
    /// frames for it are dropped and its `Hello` refused. False if it was not a peer.
    pub fn remove_peer(&mut self, id: NodeId) -> bool {
        let Some(slot) = self.book.index.remove(&id) else {
            return false;
        };
        self.book.slots[slot].member = false;
        let now = self.now();
        for t in self.transports() {
            t.remove_peer(now, id);
        }
        true
    }

    /// Encodes `msg` once and queues it for `to` (self: looped back in-process).
    pub(super) fn send_to(&mut self, now: Micros, to: NodeId, msg: P::Message) {
        if to == self.cfg.me {
            self.loopback.push_back(msg);
            return;
        }
        let Some(&slot) = self.book.index.get(&to) else {
            self.stats.frames_dropped += 1;
            if self.unknown_logged.insert(to) {
                self.log(format_args!(
                    "protocol sent to {to}, which is not a configured peer; dropped"
                ));
            }
            return;
        };
        if self.control.is_some() {
            self.lanes.on_sent(&msg);
        }
        let mut enc = Encoder::new();
        msg.encode(&mut enc);
        let mut chunks = enc.finish();
        let kind = msg.kind();
        let lane = msg.lane();
        // The message names its protocol instance (a Multi-Ring node runs one per ring).
        let group = msg.group().0;
        if let Some(faults) = self.faults.as_mut() {
            let room = QueueRoom {
                queued_bytes: self.tcp.queued_bytes(to),
                limit_bytes: self.cfg.transport.send_queue_bytes,
            };
            match faults.on_send(slot, now, kind, group, lane, chunks, room) {
                Verdict::Pass(c) => chunks = c,
                Verdict::Held => return,
                Verdict::Lost => {
                    self.stats.frames_lost += 1;
                    return;
                }
                Verdict::Full => {
                    self.stats.frames_dropped += 1;
                    return;
                }
            }
        }
        self.route(now, to, kind, group, &chunks, msg.urgent(), lane);
    }

    /// Offers one encoded message for `to` to the transports in order.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn route(
        &mut self,
        now: Micros,
        to: NodeId,
        kind: u8,
        group: u16,
        chunks: &[Bytes],
        urgent: bool,
        lane: Lane,
    ) {
        let frame = OutFrame {
            kind,
            group,
            chunks,
            urgent,
            lane,
        };
        let control = lane == Lane::Control && self.control.is_some();
        if control {
            // The token leaves after what the protocol queued before it (the pre-token
            // multicasts, seed 002 §III-B1), which wait on other sockets: write those first.
            self.flush_transports(now);
        }
        for t in self.transports() {
            if t.send(now, to, frame) != Sent::Declined {
                if control {
                    // And the token itself at once, before the post-token multicasts are
                    // even encoded (§III-B3).
                    t.flush(now);
                }
                return;
            }
        }
        // Only a removed peer's held frame gets here: TCP takes or drops every other.
        self.stats.frames_dropped += 1;
    }

    /// A held frame's delay has passed: route it to the peer of slot `slot`.
    pub(super) fn release_held(
        &mut self,
        now: Micros,
        slot: usize,
        kind: u8,
        group: u16,
        chunks: &[Bytes],
    ) {
        let Some(s) = self.book.slots.get(slot) else {
            return;
        };
        if !s.member {
            // Held by a link fault while the peer was removed.
            self.stats.frames_dropped += 1;
            return;
        }
        let to = s.id;
        // A held frame was delayed on purpose: it keeps its place among the data (and goes
        // on the data lane: link faults are an experiment's, and any socket's message is
        // taken by the receiver).
        self.route(now, to, kind, group, chunks, false, Lane::Data);
    }

    /// Queues `msg` for every peer: one datagram to the group if a transport takes it,
    /// else one copy per peer. The caller loops this node's own copy back.
    pub(super) fn multicast_to_peers(&mut self, now: Micros, msg: &P::Message) {
        let mut enc = Encoder::new();
        msg.encode(&mut enc);
        let chunks = enc.finish();
        let frame = OutFrame {
            kind: msg.kind(),
            group: msg.group().0,
            chunks: &chunks,
            urgent: msg.urgent(),
            lane: msg.lane(),
        };
        for t in self.transports() {
            if t.multicast(now, frame) != Sent::Declined {
                return;
            }
        }
        self.stats.multicasts_by_tcp += 1;
        for slot in 0..self.book.slots.len() {
            if !self.book.slots[slot].member {
                continue;
            }
            let to = self.book.slots[slot].id;
            self.send_to(now, to, msg.clone());
        }
    }

    /// Serves a readiness event of a transport's registration: what it reads goes to the
    /// protocol, one batch at a time, until it is drained or its budget is used.
    pub(super) fn on_transport_event<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        token: Token,
        mut ready: Readiness,
    ) -> Result<(), DriverError> {
        let Some(budget) = self.transport_of(token).map(|t| t.reads_per_event()) else {
            return Ok(());
        };
        let mut inbox = std::mem::take(&mut self.inbox);
        for _ in 0..budget {
            let Some(t) = self.transport_of(token) else {
                break;
            };
            let more = t.on_ready(now, token, ready, &mut inbox);
            // Writing happened on the first call; the rest only read.
            ready.writable = false;
            let received = self.receive_frames(now, app, token, &mut inbox);
            inbox.clear();
            if let Err(e) = received {
                self.inbox = inbox;
                return Err(e);
            }
            if more == Ready::Drained {
                self.inbox = inbox;
                return Ok(());
            }
        }
        self.inbox = inbox;
        // Budget used up with data possibly left: come back next iteration.
        self.ready_again.push(token);
        Ok(())
    }

    /// Decodes each frame and hands it to the protocol, carrying out each outbox at once.
    fn receive_frames<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        token: Token,
        inbox: &mut Vec<InFrame>,
    ) -> Result<(), DriverError> {
        for f in inbox.drain(..) {
            let InFrame {
                from,
                via,
                kind,
                group,
                body,
            } = f;
            // The protocol decides which groups it runs; a frame for any other group fails
            // to decode.
            match P::Message::decode_in(GroupId(group), kind, body) {
                Ok(msg) => {
                    if self
                        .transport_of(token)
                        .is_some_and(|t| t.lost_on_receipt(from, group, msg.lane()))
                    {
                        continue;
                    }
                    if self.control.is_some() {
                        self.lanes.on_processed(from, &msg);
                    }
                    self.protocol.receive(now, from, msg, &mut self.outbox);
                    self.carry_out(now, app)?;
                }
                Err(e) => {
                    let bad = InFrame {
                        from,
                        via,
                        kind,
                        group,
                        body: Bytes::new(),
                    };
                    let closed = self
                        .transport_of(token)
                        .is_some_and(|t| t.reject(&bad, &e.to_string()));
                    if closed {
                        // The rest of a closed connection's bytes cannot be trusted.
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Reads the two lanes' datagram sockets, one datagram at a time, the lane with priority
    /// first (seed 002 §III-D, `lanes.rs`: "when data messages have high priority, we do not
    /// read from the token-receiving socket unless no data message is available, and vice
    /// versa", §III-E). Priority is weighed again after every message, since processing one
    /// can change it. Bounded per iteration; sockets left with datagrams keep the poll from
    /// sleeping.
    pub(super) fn serve_lanes<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        if self.control.is_none() {
            return Ok(());
        }
        let mut inbox = std::mem::take(&mut self.inbox);
        let mut result = Ok(());
        let defer = self.defer_token(now);
        for _ in 0..LANE_READS_PER_ITERATION {
            let Some(token) = self.lane_ready.next(self.lanes.first(), defer) else {
                break;
            };
            let Some(t) = self.transport_of(token) else {
                self.lane_ready.put(token, false);
                continue;
            };
            let ready = Readiness {
                readable: true,
                writable: false,
            };
            if t.on_ready(now, token, ready, &mut inbox) == Ready::Drained {
                self.lane_ready.put(token, false);
            }
            result = self.receive_frames(now, app, token, &mut inbox);
            inbox.clear();
            if result.is_err() {
                break;
            }
            // What the message made the protocol send leaves now, not after the rest of
            // this iteration's reads: the post-token data of a token just passed
            // (§III-B3) would otherwise wait behind up to `LANE_READS_PER_ITERATION`
            // messages, and the successor with it. A datagram's send is its own syscall (or
            // one per GSO run) either way, so nothing is lost by not waiting.
            self.flush_datagrams(now);
        }
        self.inbox = inbox;
        result
    }

    /// Writes what the datagram transports have queued.
    pub(super) fn flush_datagrams(&mut self, now: Micros) {
        use crate::transport::Transport;
        for t in self
            .control
            .iter_mut()
            .chain(self.udp.iter_mut())
            .chain(self.mcast.iter_mut())
        {
            t.flush(now);
        }
    }

    /// Hands the transports' link changes to the protocol; their effects are carried out
    /// with the iteration's others.
    pub(super) fn take_link_notices(&mut self, now: Micros) {
        let mut notices = std::mem::take(&mut self.notices);
        for t in self.transports() {
            t.take_notices(&mut notices);
        }
        for n in notices.drain(..) {
            match n {
                LinkNotice::Reconnected(id) => {
                    self.protocol.peer_reconnected(now, id, &mut self.outbox)
                }
                LinkNotice::Unreachable(id) => {
                    self.protocol.peer_unreachable(now, id, &mut self.outbox)
                }
            }
        }
        self.notices = notices;
    }

    /// Writes what every transport has queued.
    pub(super) fn flush_transports(&mut self, now: Micros) {
        for t in self.transports() {
            t.flush(now);
        }
    }

    /// Opens a new link table on `registry`; used by `Driver::new`.
    pub(super) fn open_tcp(
        cfg: &DriverConfig,
        log: crate::transport::Logger,
        registry: mio::Registry,
        listener: std::net::TcpListener,
        lives: Option<crate::lives::SharedLivesBook>,
    ) -> Result<TcpLinks, DriverError> {
        let id = crate::transport::tcp::Identity {
            cluster_id: cfg.cluster_id,
            me: cfg.me,
            incarnation: cfg.incarnation,
        };
        let mut links = TcpLinks::new(
            id,
            cfg.transport.clone(),
            log,
            registry,
            listener,
            &cfg.peers,
        )
        .map_err(|source| DriverError::Io {
            what: "opening the peer listener",
            source,
        })?;
        if let Some(book) = lives {
            links.set_lives(book);
        }
        Ok(links)
    }
}
