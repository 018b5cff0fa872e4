//! Peer links: outbound connections (connect, `Hello`, backoff, per-peer queues, injected
//! link faults), the frames peers send on their connections to us, and the multicast glue.
//!
//! Connections. Each node dials every peer it sends to (lazily, on the first send) and uses
//! that connection only to write; it reads what peers send on the connections they dialed
//! to it. The dialer's first frame is a `Hello` (cluster id, node id, incarnation), which the
//! acceptor checks before it reads anything else. A frame or message that fails to decode
//! closes its connection with a log line; the protocol recovers through its own
//! retransmissions, which is also why frames for a peer that is down are dropped once its
//! queue is full, and why a broken connection's queue is cleared (a half-written frame cannot
//! continue on a new connection).
//!
//! A failed connect attempt keeps the queue (nothing of it was written), so frames wait out
//! a peer's downtime; but if the peer restarted meanwhile they are addressed to a process
//! that no longer exists (replies to its requests, votes for its phase 2, a repair meant for
//! its earlier life). So the driver remembers per peer the incarnation its last inbound
//! `Hello` announced, and tags the peer's outbound queue with the incarnation known when
//! the oldest frame still queued was enqueued (none before the first `Hello`:
//! `PeerLives`). When a `Hello` announces a newer incarnation than the tag while the
//! outbound link is not up, no byte of the queue was written, and the whole queue is
//! dropped, counted (`TransportStats::stale_frames_dropped`) and logged in one line. An
//! unknown tag keeps the frames: nobody can tell which life they were for. A link that is
//! up is left alone: it came up before the new `Hello` arrived, and its queue is flushed as
//! it always was, perhaps to the new life; a frame is never cut (`OutQueue::clear_unwritten`
//! refuses once a write began). The network may deliver old packets late as well, so the
//! protocols must be safe with a frame meant for an earlier life either way; the rule only
//! spares a new life the backlog that is known to be stale.

use super::conns::Role;
use super::{
    Driver, DriverConfig, DriverError, MULTICAST_SOCKET, PEER_SLOTS_MAX, READS_PER_EVENT,
    UNICAST_SOCKET,
};
use crate::Hooks;
use crate::frame::{Frame, KIND_HELLO, KIND_PROTOCOL_MAX};
use crate::linkfault::{QueueRoom, Verdict};
use crate::multicast::{self, Received};
use crate::transport::{self, Backoff, OutQueue, PushError, ReadOutcome, TransportConfig};
use abcast_core::codec::{Decoder, Encoder, WireMessage};
use abcast_core::{DecodeError, GroupId, Micros, NodeId, Protocol};
use bytes::{Bytes, BytesMut};
use mio::net::TcpStream;
use mio::{Interest, Token};
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;

/// The transport's first frame on a peer connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub cluster_id: u64,
    pub node: NodeId,
    pub incarnation: u64,
}

impl Hello {
    pub fn encode(&self) -> Bytes {
        let mut e = Encoder::new();
        e.put_u64(self.cluster_id);
        e.put_u32(self.node.0);
        e.put_u64(self.incarnation);
        e.to_bytes()
    }
    pub fn decode(body: Bytes) -> Result<Hello, DecodeError> {
        let mut d = Decoder::new(body);
        let h = Hello {
            cluster_id: d.u64("hello cluster_id")?,
            node: NodeId(d.u32("hello node")?),
            incarnation: d.u64("hello incarnation")?,
        };
        d.finish()?;
        Ok(h)
    }
}

/// The state of the outbound connection to one peer.
#[derive(Debug)]
pub(super) enum Link {
    /// No connection and none wanted until something is sent.
    Idle,
    /// Waiting before the next connect attempt.
    Backoff { until: Micros },
    /// A connect in progress since `since`.
    Connecting {
        stream: TcpStream,
        token: Token,
        since: Micros,
    },
    Up {
        stream: TcpStream,
        token: Token,
        since: Micros,
    },
}

/// Which process life of a peer this node knows of, and which one the frames queued for
/// it were built for (see the module comment, "Connections"). Pure bookkeeping, no I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct PeerLives {
    /// The highest incarnation the peer's inbound `Hello`s announced; `None` before the
    /// first.
    pub(super) announced: Option<u64>,
    /// `announced` as it was when the oldest frame still queued was enqueued; `None`:
    /// unknown.
    pub(super) queued_for: Option<u64>,
}

impl PeerLives {
    /// A frame is about to be queued behind `queue_empty` (nothing) or other frames.
    fn on_enqueue(&mut self, queue_empty: bool) {
        if queue_empty {
            self.queued_for = self.announced;
        }
    }

    /// The peer's `Hello` announced `incarnation`. `droppable`: something is queued and the
    /// outbound link is not up, so none of it was written. Returns the incarnation the
    /// queue was built for when it is stale (built for an earlier life than the one
    /// announced) and droppable: the caller drops the whole queue. The next frame queued
    /// is tagged with the new incarnation.
    fn on_hello(&mut self, incarnation: u64, droppable: bool) -> Option<u64> {
        let newest = self.announced.map_or(incarnation, |a| a.max(incarnation));
        self.announced = Some(newest);
        let built_for = self.queued_for?;
        (droppable && built_for < newest).then(|| {
            self.queued_for = None;
            built_for
        })
    }
}

#[derive(Debug)]
pub(super) struct Peer {
    pub(super) id: NodeId,
    pub(super) addr: SocketAddr,
    pub(super) link: Link,
    pub(super) queue: OutQueue,
    pub(super) lives: PeerLives,
    pub(super) backoff: Backoff,
    /// A failure was logged and no connection succeeded since: stay quiet.
    pub(super) down_logged: bool,
    /// Frames dropped since the last log line about it.
    pub(super) dropped_unlogged: u64,
    pub(super) last_drop_log_us: Micros,
    pub(super) dirty: bool,
    /// In the peer set; a removed peer (`Driver::remove_peer`) keeps its slot, so indices
    /// stay valid, but nothing is queued for it and its `Hello` is refused.
    pub(super) member: bool,
}

impl Peer {
    fn new(id: NodeId, addr: SocketAddr, transport: &TransportConfig) -> Peer {
        Peer {
            id,
            addr,
            link: Link::Idle,
            queue: OutQueue::new(transport.send_queue_bytes),
            lives: PeerLives::default(),
            backoff: Backoff::new(transport.backoff_ms_min, transport.backoff_ms_max),
            down_logged: false,
            dropped_unlogged: 0,
            last_drop_log_us: 0,
            dirty: false,
            member: true,
        }
    }
}

/// One `Peer` per configured peer other than this node, and the index by node id.
pub(super) fn peers_from_config(cfg: &DriverConfig) -> (Vec<Peer>, HashMap<NodeId, usize>) {
    let mut peers = Vec::new();
    let mut peer_index = HashMap::new();
    for &(id, addr) in &cfg.peers {
        if id == cfg.me || peer_index.contains_key(&id) {
            continue;
        }
        peer_index.insert(id, peers.len());
        peers.push(Peer::new(id, addr, &cfg.transport));
    }
    (peers, peer_index)
}

impl Peer {
    /// Queues one frame, tagging an empty queue with the peer's life as known now.
    fn push_frame(&mut self, kind: u8, group: u16, chunks: &[Bytes]) -> Result<(), PushError> {
        self.lives.on_enqueue(self.queue.is_empty());
        self.queue.push_frame(kind, group, chunks)
    }
}

impl<P: Protocol> Driver<P> {
    /// Adds node `id` at `addr` to the peers this node links to, or moves a peer to a new
    /// address (its link is closed, and the next send dials `addr`). The peer set is the
    /// transport's address book, not the protocol's membership (`Protocol::reconfigure`):
    /// frames for a node outside it are dropped and its `Hello` is refused. A node added
    /// after start gets no injected link faults unless it had a slot before (a removed
    /// peer added again keeps its own).
    pub fn add_peer(&mut self, id: NodeId, addr: SocketAddr) -> Result<(), DriverError> {
        let refuse = |reason: String| DriverError::Config {
            field: "peers".into(),
            reason,
        };
        if id == self.cfg.me {
            return Err(refuse(format!("{id} is this node")));
        }
        if let Some(&idx) = self.peer_index.get(&id) {
            if self.peers[idx].addr != addr {
                self.drop_link(idx, format_args!("{id} moved to {addr}"));
                self.peers[idx].addr = addr;
                if !self.peers[idx].queue.is_empty() {
                    self.connect(idx, self.now());
                }
            }
            return Ok(());
        }
        let idx = match self.peers.iter().position(|p| p.id == id) {
            Some(idx) => idx,
            None if self.peers.len() >= PEER_SLOTS_MAX => {
                return Err(refuse(format!("more than {PEER_SLOTS_MAX} peers")));
            }
            None => {
                self.peers.push(Peer::new(id, addr, &self.cfg.transport));
                self.peers.len() - 1
            }
        };
        let peer = &mut self.peers[idx];
        peer.addr = addr;
        peer.member = true;
        peer.down_logged = false;
        self.peer_index.insert(id, idx);
        self.unknown_logged.remove(&id);
        for m in self.mcast.iter_mut().chain(self.udp.iter_mut()) {
            m.add_peer(id);
        }
        self.log(format_args!("added peer {id} at {addr}"));
        Ok(())
    }

    /// Removes node `id` from the peer set: its outbound link and every connection it
    /// dialed to this node are closed, frames queued for it are dropped, and from now on
    /// frames for it are dropped and its `Hello` refused. False if it was not a peer.
    pub fn remove_peer(&mut self, id: NodeId) -> bool {
        let Some(idx) = self.peer_index.remove(&id) else {
            return false;
        };
        self.drop_link(idx, format_args!("{id} was removed from the peers"));
        self.peers[idx].queue.clear();
        self.peers[idx].member = false;
        for m in self.mcast.iter_mut().chain(self.udp.iter_mut()) {
            m.remove_peer(id);
        }
        let inbound: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.role, Role::PeerIn { peer: Some(p) } if p == id))
            .map(|(t, _)| *t)
            .collect();
        for token in inbound {
            self.close_conn(token, format_args!("{id} was removed from the peers"));
        }
        true
    }

    /// Closes peer `idx`'s outbound link on purpose. A link that was up may have cut a
    /// frame, so its queue is cleared and the protocol hears the peer is unreachable
    /// (carried out with the iteration's other effects); otherwise nothing of the queue
    /// was written and it waits for the next connection.
    fn drop_link(&mut self, idx: usize, reason: fmt::Arguments<'_>) {
        let was_up = matches!(self.peers[idx].link, Link::Up { .. });
        self.close_link(idx);
        let peer = &mut self.peers[idx];
        if was_up {
            peer.queue.clear();
        }
        peer.backoff.reset();
        let id = peer.id;
        self.log(format_args!("closing the link to {id}: {reason}"));
        if was_up {
            self.stats.disconnects += 1;
            let now = self.now();
            self.protocol.peer_unreachable(now, id, &mut self.outbox);
        }
    }

    /// Queues `msg` as one datagram to the multicast group. `false` when there is no
    /// multicast socket or the message does not fit one datagram: the caller sends it by TCP.
    pub(super) fn multicast_datagram(&mut self, msg: &P::Message) -> bool {
        let Some(m) = self.mcast.as_mut() else {
            return false;
        };
        let mut enc = Encoder::new();
        msg.encode(&mut enc);
        let chunks = enc.finish();
        if !m.push(msg.kind(), msg.group().0, chunks) {
            self.stats.multicasts_too_large += 1;
            if self.stats.multicasts_too_large.is_power_of_two() {
                self.log(format_args!(
                    "a multicast of kind {} does not fit one datagram ({} bytes at most); \
                     sent by TCP ({} so far)",
                    msg.kind(),
                    multicast::MAX_DATAGRAM_BYTES,
                    self.stats.multicasts_too_large
                ));
            }
            return false;
        }
        true
    }

    /// Reads datagrams (of the unicast socket, or the multicast one) until none is left or
    /// the budget is used, handing each valid message to the protocol as it arrives.
    pub(super) fn read_datagrams<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        unicast: bool,
    ) -> Result<(), DriverError> {
        for _ in 0..multicast::READS_PER_EVENT {
            let socket = if unicast {
                &mut self.udp
            } else {
                &mut self.mcast
            };
            let Some(m) = socket.as_mut() else {
                return Ok(());
            };
            match m.recv() {
                Ok(Received::Frame(from, f)) => {
                    match P::Message::decode_in(GroupId(f.group), f.kind, f.body) {
                        Ok(msg) => {
                            self.protocol.receive(now, from, msg, &mut self.outbox);
                            self.carry_out(now, app)?;
                        }
                        Err(e) => m.reject_message(from, f.kind, &e.to_string()),
                    }
                }
                Ok(Received::Dropped) => {}
                Ok(Received::Empty) => return Ok(()),
                Err(e) => {
                    // A UDP socket has no connection to lose; report and read again later.
                    let what = if unicast { "unicast" } else { "multicast" };
                    self.log(format_args!("{what} datagram receive failed: {e}"));
                    return Ok(());
                }
            }
        }
        self.ready_again.push(if unicast {
            UNICAST_SOCKET
        } else {
            MULTICAST_SOCKET
        });
        Ok(())
    }

    pub(super) fn send_to(&mut self, now: Micros, to: NodeId, msg: P::Message) {
        if to == self.cfg.me {
            self.loopback.push_back(msg);
            return;
        }
        let Some(&idx) = self.peer_index.get(&to) else {
            self.stats.frames_dropped += 1;
            if self.unknown_logged.insert(to) {
                self.log(format_args!(
                    "protocol sent to {to}, which is not a configured peer; dropped"
                ));
            }
            return;
        };
        let mut enc = Encoder::new();
        msg.encode(&mut enc);
        let mut chunks = enc.finish();
        let kind = msg.kind();
        // The message names its protocol instance (a Multi-Ring node runs one per ring).
        let group = msg.group().0;
        if let Some(faults) = self.faults.as_mut() {
            let room = QueueRoom {
                queued_bytes: self.peers[idx].queue.queued_bytes(),
                limit_bytes: self.cfg.transport.send_queue_bytes,
            };
            match faults.on_send(idx, now, kind, group, chunks, room) {
                Verdict::Pass(c) => chunks = c,
                Verdict::Held => return,
                Verdict::Lost => {
                    self.stats.frames_lost += 1;
                    return;
                }
                Verdict::Full => {
                    self.stats.frames_dropped += 1;
                    self.peers[idx].dropped_unlogged += 1;
                    return;
                }
            }
        }
        self.queue_frame(now, idx, kind, group, &chunks);
    }

    /// Queues one encoded frame for peer `idx`'s socket, dialing the peer if needed.
    pub(super) fn queue_frame(
        &mut self,
        now: Micros,
        idx: usize,
        kind: u8,
        group: u16,
        chunks: &[Bytes],
    ) {
        if !self.peers[idx].member {
            // Held by a link fault while the peer was removed.
            self.stats.frames_dropped += 1;
            return;
        }
        if let Some(u) = self.udp.as_mut()
            && u.push_to(self.peers[idx].addr, kind, group, chunks.to_vec())
        {
            // Queued as one datagram (or dropped by a full queue, counted there); a message
            // too large for one goes on by TCP below.
            self.stats.sends_by_udp += 1;
            return;
        }
        let mut pushed = self.peers[idx].push_frame(kind, group, chunks);
        if matches!(pushed, Err(PushError::Full(_)))
            && matches!(self.peers[idx].link, Link::Up { .. })
        {
            // Make room by writing what the socket takes now, then try once more.
            self.flush_peer(idx, now);
            pushed = self.peers[idx].push_frame(kind, group, chunks);
        }
        match pushed {
            Ok(()) => {
                self.stats.frames_queued += 1;
                self.mark_peer_dirty(idx);
            }
            Err(PushError::Full(_)) => {
                self.stats.frames_dropped += 1;
                self.peers[idx].dropped_unlogged += 1;
            }
            Err(PushError::Frame(e)) => {
                self.stats.frames_dropped += 1;
                let to = self.peers[idx].id;
                self.log(format_args!("cannot send message kind {kind} to {to}: {e}"));
            }
        }
        if matches!(self.peers[idx].link, Link::Idle) {
            self.connect(idx, now);
        }
    }

    pub(super) fn mark_peer_dirty(&mut self, idx: usize) {
        if !self.peers[idx].dirty {
            self.peers[idx].dirty = true;
            self.dirty_peers.push(idx);
        }
    }

    pub(super) fn on_peer_frame<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        token: Token,
        frame: Frame,
    ) -> Result<Result<(), String>, DriverError> {
        let Some(conn) = self.conns.get_mut(&token) else {
            return Ok(Ok(()));
        };
        let Role::PeerIn { peer } = &mut conn.role else {
            return Ok(Ok(()));
        };
        match (*peer, frame.kind) {
            (None, KIND_HELLO) => {
                let h = match Hello::decode(frame.body) {
                    Ok(h) => h,
                    Err(e) => return Ok(Err(format!("bad Hello: {e}"))),
                };
                if h.cluster_id != self.cfg.cluster_id {
                    return Ok(Err(format!(
                        "Hello from cluster {} (this is cluster {})",
                        h.cluster_id, self.cfg.cluster_id
                    )));
                }
                if !self.peer_index.contains_key(&h.node) {
                    return Ok(Err(format!("Hello from unknown node id {}", h.node.0)));
                }
                *peer = Some(h.node);
                let addr = conn.addr;
                self.stats.hellos_accepted += 1;
                // A newer connection from the same node replaces the old one: the peer
                // restarted or reconnected, and the old socket only holds stale bytes.
                let old: Vec<Token> = self
                    .conns
                    .iter()
                    .filter(|(t, c)| {
                        **t != token
                            && matches!(c.role, Role::PeerIn { peer: Some(p) } if p == h.node)
                    })
                    .map(|(t, _)| *t)
                    .collect();
                for t in old {
                    self.close_conn(
                        t,
                        format_args!("replaced by a new connection from {}", h.node),
                    );
                }
                self.log(format_args!(
                    "accepted connection from {} (incarnation {}) at {addr}",
                    h.node, h.incarnation
                ));
                self.on_peer_hello(h.node, h.incarnation);
                Ok(Ok(()))
            }
            (None, k) => Ok(Err(format!("first frame has kind {k}, expected Hello"))),
            (Some(_), KIND_HELLO) => Ok(Err("second Hello on one connection".into())),
            (Some(from), k) if k <= KIND_PROTOCOL_MAX => {
                // The protocol decides which groups it runs; a frame for any other group
                // fails to decode and closes the connection.
                let group = frame.group;
                match P::Message::decode_in(GroupId(group), k, frame.body) {
                    Ok(msg) => {
                        self.protocol.receive(now, from, msg, &mut self.outbox);
                        self.carry_out(now, app)?;
                        Ok(Ok(()))
                    }
                    Err(e) => Ok(Err(format!(
                        "cannot decode message kind {k} of group {group}: {e}"
                    ))),
                }
            }
            (Some(_), k) => Ok(Err(format!("client frame kind {k} on the peer port"))),
        }
    }

    /// A `Hello` from `node` announced `incarnation`: frames queued for an earlier life of
    /// it, none of them written yet, are dropped (see the module comment, "Connections").
    pub(super) fn on_peer_hello(&mut self, node: NodeId, incarnation: u64) {
        let Some(&idx) = self.peer_index.get(&node) else {
            return;
        };
        let peer = &mut self.peers[idx];
        let droppable = !peer.queue.is_empty() && !matches!(peer.link, Link::Up { .. });
        let Some(built_for) = peer.lives.on_hello(incarnation, droppable) else {
            return;
        };
        // Not up: the queue was cleared when its last connection broke, and nothing was
        // written since, so no frame is cut.
        let frames = peer.queue.clear_unwritten();
        debug_assert!(
            frames.is_some(),
            "a queue was written into while its link was down"
        );
        let Some(frames) = frames else {
            return;
        };
        self.stats.stale_frames_dropped += frames as u64;
        self.log(format_args!(
            "dropped {frames} frames queued for {node}'s incarnation {built_for}: it restarted \
             as incarnation {incarnation} before they could be written"
        ));
    }

    pub(super) fn connect(&mut self, idx: usize, now: Micros) {
        let addr = self.peers[idx].addr;
        match transport::start_connect(addr, &self.cfg.transport) {
            Ok(mut stream) => {
                let token = self.new_token();
                if let Err(e) = self.poll.registry().register(
                    &mut stream,
                    token,
                    Interest::READABLE | Interest::WRITABLE,
                ) {
                    self.link_failed(idx, now, format_args!("cannot register socket: {e}"));
                    return;
                }
                self.out_tokens.insert(token, idx);
                self.peers[idx].link = Link::Connecting {
                    stream,
                    token,
                    since: now,
                };
            }
            Err(e) => self.link_failed(idx, now, format_args!("{e}")),
        }
    }

    pub(super) fn on_outbound_event(
        &mut self,
        now: Micros,
        idx: usize,
        readable: bool,
        writable: bool,
    ) {
        match &mut self.peers[idx].link {
            Link::Connecting { stream, .. } => {
                match stream.take_error() {
                    Ok(None) => {}
                    Ok(Some(e)) | Err(e) => {
                        self.link_failed(idx, now, format_args!("{e}"));
                        return;
                    }
                }
                match stream.peer_addr() {
                    Ok(_) => self.link_up(idx, now),
                    Err(e) if e.kind() == io::ErrorKind::NotConnected => {}
                    Err(e) => self.link_failed(idx, now, format_args!("{e}")),
                }
            }
            Link::Up { stream, .. } => {
                if readable {
                    // Peers never write on a connection we dialed; drain to notice a close.
                    let mut scratch = BytesMut::new();
                    for _ in 0..READS_PER_EVENT {
                        scratch.clear();
                        match transport::read_into(stream, &mut scratch, 4096) {
                            Ok(ReadOutcome::Data(_)) => continue,
                            Ok(ReadOutcome::WouldBlock) => break,
                            Ok(ReadOutcome::Eof) => {
                                self.link_lost(idx, now, format_args!("closed by the peer"));
                                return;
                            }
                            Err(e) => {
                                self.link_lost(idx, now, format_args!("{e}"));
                                return;
                            }
                        }
                    }
                }
                if writable {
                    self.flush_peer(idx, now);
                }
            }
            Link::Idle | Link::Backoff { .. } => {}
        }
    }

    pub(super) fn link_up(&mut self, idx: usize, now: Micros) {
        let hello = Hello {
            cluster_id: self.cfg.cluster_id,
            node: self.cfg.me,
            incarnation: self.cfg.incarnation,
        }
        .encode();
        let peer = &mut self.peers[idx];
        let Link::Connecting {
            stream,
            token,
            since,
        } = std::mem::replace(&mut peer.link, Link::Idle)
        else {
            return;
        };
        if let Err(e) = peer.queue.push_front_frame(KIND_HELLO, 0, hello) {
            // Unreachable in practice (a Hello is 20 bytes); treat it as a failed attempt.
            peer.link = Link::Connecting {
                stream,
                token,
                since,
            };
            self.link_failed(idx, now, format_args!("cannot encode Hello: {e}"));
            return;
        }
        peer.link = Link::Up {
            stream,
            token,
            since: now,
        };
        peer.down_logged = false;
        self.stats.connects += 1;
        let (id, addr) = (peer.id, peer.addr);
        self.log(format_args!("connected to {id} at {addr}"));
        // Carried out with the iteration's other effects.
        self.protocol.peer_reconnected(now, id, &mut self.outbox);
        self.mark_peer_dirty(idx);
        self.flush_peer(idx, now);
    }

    /// A connect attempt failed: keep the queue (nothing of it was written) and retry later.
    pub(super) fn link_failed(&mut self, idx: usize, now: Micros, reason: fmt::Arguments<'_>) {
        self.close_link(idx);
        let peer = &mut self.peers[idx];
        let delay = peer.backoff.next_delay();
        peer.link = Link::Backoff {
            until: now.saturating_add(delay.as_micros() as Micros),
        };
        if !peer.down_logged {
            peer.down_logged = true;
            let (id, addr) = (peer.id, peer.addr);
            self.log(format_args!(
                "cannot reach {id} at {addr}: {reason}; retrying with backoff"
            ));
        }
    }

    /// An established connection broke: frames in its queue may be half written, so the
    /// queue is cleared and the protocol's retransmissions fill the gap.
    pub(super) fn link_lost(&mut self, idx: usize, now: Micros, reason: fmt::Arguments<'_>) {
        let up_since = match self.peers[idx].link {
            Link::Up { since, .. } => Some(since),
            _ => None,
        };
        self.close_link(idx);
        self.stats.disconnects += 1;
        let peer = &mut self.peers[idx];
        peer.queue.clear();
        // A connection that lived a while resets the backoff; one that dies at once (a
        // refused Hello) keeps doubling it, so it cannot turn into a reconnect storm.
        if up_since
            .is_some_and(|s| now.saturating_sub(s) >= peer.backoff.max().as_micros() as Micros)
        {
            peer.backoff.reset();
        }
        let delay = peer.backoff.next_delay();
        peer.link = Link::Backoff {
            until: now.saturating_add(delay.as_micros() as Micros),
        };
        let (id, addr) = (peer.id, peer.addr);
        if !peer.down_logged {
            peer.down_logged = true;
            self.log(format_args!("lost connection to {id} at {addr}: {reason}"));
        }
        if up_since.is_some() {
            self.protocol.peer_unreachable(now, id, &mut self.outbox);
        }
    }

    pub(super) fn close_link(&mut self, idx: usize) {
        match std::mem::replace(&mut self.peers[idx].link, Link::Idle) {
            Link::Connecting {
                mut stream, token, ..
            }
            | Link::Up {
                mut stream, token, ..
            } => {
                let _ = self.poll.registry().deregister(&mut stream);
                self.out_tokens.remove(&token);
            }
            Link::Idle | Link::Backoff { .. } => {}
        }
    }

    pub(super) fn flush_peer(&mut self, idx: usize, now: Micros) {
        let peer = &mut self.peers[idx];
        peer.dirty = false;
        let Link::Up { stream, .. } = &mut peer.link else {
            return;
        };
        if let Err(e) = peer.queue.flush(stream) {
            self.link_lost(idx, now, format_args!("write failed: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_for_an_earlier_life_are_stale_only_once_a_newer_hello_is_known() {
        let mut l = PeerLives::default();
        // Frames queued before any Hello: nobody can tell which life they were for.
        l.on_enqueue(true);
        assert_eq!(l.queued_for, None);
        assert_eq!(l.on_hello(3, true), None, "unknown tag: kept");
        assert_eq!(l.announced, Some(3));
        // Frames queued behind them keep the old tag; a new queue takes the known life.
        l.on_enqueue(false);
        assert_eq!(l.queued_for, None);
        l.on_enqueue(true);
        assert_eq!(l.queued_for, Some(3));
        // The same life says Hello again (it reconnected): nothing is stale.
        assert_eq!(l.on_hello(3, true), None);
        // A new life: stale, unless the link is up (then it came up first and goes on).
        assert_eq!(l.on_hello(4, false), None, "link up or queue empty: kept");
        assert_eq!(l.queued_for, Some(3), "still built for life 3");
        assert_eq!(l.on_hello(4, true), Some(3), "announced 4 > built for 3");
        assert_eq!(l.queued_for, None);
        l.on_enqueue(true);
        assert_eq!(l.queued_for, Some(4));
        // A late Hello of an older life never lowers what is known.
        assert_eq!(l.on_hello(2, true), None);
        assert_eq!(l.announced, Some(4));
        l.on_enqueue(true);
        assert_eq!(l.queued_for, Some(4));
    }
}
