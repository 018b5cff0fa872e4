//! The TCP peer links: outbound connections (connect, `Hello`, backoff, per-peer queues),
//! the connections peers dialed to this node, and the frames they carry.
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
//! its earlier life). So the links remember per peer the incarnation its last inbound
//! `Hello` announced, and tag the peer's outbound queue with the incarnation known when
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

use super::intake::{Allowance, Intake, Plan, ReadBudget};
use super::stream::{self, Backoff, OutQueue, PushError, ReadOutcome};
use super::{
    InFrame, LinkNotice, Logger, OutFrame, Readiness, Ready, Sent, TCP_TOKENS, Tokens, Transport,
    TransportConfig, TransportStats,
};
use crate::frame::{self, KIND_HELLO, KIND_PROTOCOL_MAX};
use crate::lives::{self, LifeAnswer, SharedLivesBook};
use abcast_core::codec::{Decoder, Encoder};
use abcast_core::{DecodeError, Micros, NodeId};
use bytes::{Bytes, BytesMut};
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::SocketAddr;

/// Reads from one connection per readiness event before the loop serves the others; the
/// connection is revisited in the next iteration.
const READS_PER_EVENT: usize = 16;
/// Most open inbound peer connections; more are refused at accept.
const MAX_INBOUND: usize = 1024;
/// Largest body accepted as the first frame of a peer connection (a `Hello` is 20 bytes).
const MAX_HELLO_BODY_BYTES: usize = 256;
/// A connect attempt that has not completed after this long is abandoned and retried.
const CONNECT_TIMEOUT_US: Micros = 3_000_000;
/// Shortest interval between two "dropped frames" log lines about one peer.
const DROP_LOG_INTERVAL_US: Micros = 1_000_000;
/// Most peer slots (`add_peer`); a removed peer keeps its slot for a return.
pub const PEER_SLOTS_MAX: usize = 1024;

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
enum Link {
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
struct PeerLives {
    /// The highest incarnation the peer's inbound `Hello`s announced; `None` before the
    /// first.
    announced: Option<u64>,
    /// `announced` as it was when the oldest frame still queued was enqueued; `None`:
    /// unknown.
    queued_for: Option<u64>,
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
struct Peer {
    id: NodeId,
    addr: SocketAddr,
    link: Link,
    queue: OutQueue,
    lives: PeerLives,
    backoff: Backoff,
    /// A failure was logged and no connection succeeded since: stay quiet.
    down_logged: bool,
    /// Frames dropped since the last log line about it.
    dropped_unlogged: u64,
    last_drop_log_us: Micros,
    dirty: bool,
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
        }
    }

    /// Queues one frame, tagging an empty queue with the peer's life as known now.
    fn push_frame(&mut self, frame: OutFrame<'_>) -> Result<(), PushError> {
        self.lives.on_enqueue(self.queue.is_empty());
        if frame.urgent {
            self.queue
                .push_urgent_frame(frame.kind, frame.group, frame.chunks)
        } else {
            self.queue.push_frame(frame.kind, frame.group, frame.chunks)
        }
    }
}

/// A connection a peer dialed to this node; it only reads.
#[derive(Debug)]
struct Inbound {
    stream: TcpStream,
    addr: SocketAddr,
    rbuf: BytesMut,
    /// What the connection may read next (`intake.rs`).
    intake: Intake,
    /// `None` until its `Hello`.
    peer: Option<NodeId>,
}

/// The largest body a peer connection may announce for a frame of `kind` (`intake.rs`):
/// before its `Hello` names a member, a `Hello`'s worth whatever the kind (anything but a
/// `Hello` is refused once read); after it, a protocol message of any allowed size, and a
/// `Hello`'s worth for the kinds refused once read (a second `Hello`, client kinds).
fn peer_body_max(identified: bool, kind: u8) -> usize {
    if identified && (1..=KIND_PROTOCOL_MAX).contains(&kind) {
        frame::MAX_BODY_BYTES
    } else {
        MAX_HELLO_BODY_BYTES
    }
}

/// Who this node is, for its `Hello` and for checking the peers'.
#[derive(Clone, Copy, Debug)]
pub struct Identity {
    pub cluster_id: u64,
    pub me: NodeId,
    pub incarnation: u64,
}

/// The TCP links of one node to its peers (see the module comment).
#[derive(Debug)]
pub struct TcpLinks {
    id: Identity,
    cfg: TransportConfig,
    log: Logger,
    registry: Registry,
    listener: TcpListener,
    listener_token: Token,
    tokens: Tokens,
    peers: Vec<Peer>,
    index: HashMap<NodeId, usize>,
    /// Outbound connection tokens -> peer slot.
    out_tokens: HashMap<Token, usize>,
    inbound: HashMap<Token, Inbound>,
    dirty: Vec<usize>,
    notices: Vec<LinkNotice>,
    stats: TransportStats,
    inbound_limit_logged: bool,
    /// The peers' lives this node took frames from, on disk (`crate::lives`): a `Hello`
    /// of a new life is recorded before its frames are taken, and a node asking which life
    /// of it this one knows is answered from it. `None`: no book (answers "no book").
    lives: Option<SharedLivesBook>,
    /// The peer port's budget for large unfinished frames (`intake.rs`).
    budget: ReadBudget,
}

impl TcpLinks {
    /// Links to `peers` (this node's own entry and repeated ids are skipped), accepting on
    /// `listener`; registers the listener with `registry`. Connects to nothing until the
    /// first send.
    pub fn new(
        id: Identity,
        cfg: TransportConfig,
        log: Logger,
        registry: Registry,
        listener: std::net::TcpListener,
        peers: &[(NodeId, SocketAddr)],
    ) -> io::Result<TcpLinks> {
        listener.set_nonblocking(true)?;
        let mut listener = TcpListener::from_std(listener);
        let mut tokens = Tokens::new(TCP_TOKENS);
        let listener_token = tokens.take();
        registry.register(&mut listener, listener_token, Interest::READABLE)?;
        let budget = ReadBudget::new(cfg.peer_read_budget_bytes);
        let mut links = TcpLinks {
            id,
            cfg,
            log,
            registry,
            listener,
            listener_token,
            tokens,
            peers: Vec::new(),
            index: HashMap::new(),
            out_tokens: HashMap::new(),
            inbound: HashMap::new(),
            dirty: Vec::new(),
            notices: Vec::new(),
            stats: TransportStats::default(),
            inbound_limit_logged: false,
            lives: None,
            budget,
        };
        for &(pid, addr) in peers {
            if pid == id.me || links.index.contains_key(&pid) {
                continue;
            }
            links.index.insert(pid, links.peers.len());
            links.peers.push(Peer::new(pid, addr, &links.cfg));
        }
        Ok(links)
    }

    /// The address peers dial.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Bytes queued for peer `to`'s socket (what injected link delay counts against).
    pub fn queued_bytes(&self, to: NodeId) -> usize {
        self.index
            .get(&to)
            .map_or(0, |&idx| self.peers[idx].queue.queued_bytes())
    }

    fn count_drop(&mut self, idx: usize) {
        self.stats.frames_dropped += 1;
        self.peers[idx].dropped_unlogged += 1;
    }

    fn mark_dirty(&mut self, idx: usize) {
        if !self.peers[idx].dirty {
            self.peers[idx].dirty = true;
            self.dirty.push(idx);
        }
    }

    /// Closes peer `idx`'s outbound link on purpose. A link that was up may have cut a
    /// frame, so its queue is cleared and the protocol hears the peer is unreachable;
    /// otherwise nothing of the queue was written and it waits for the next connection.
    fn drop_link(&mut self, idx: usize, reason: fmt::Arguments<'_>) {
        let was_up = matches!(self.peers[idx].link, Link::Up { .. });
        self.close_link(idx);
        let peer = &mut self.peers[idx];
        if was_up {
            peer.queue.clear();
        }
        peer.backoff.reset();
        let id = peer.id;
        self.log
            .log(format_args!("closing the link to {id}: {reason}"));
        if was_up {
            self.stats.disconnects += 1;
            self.notices.push(LinkNotice::Unreachable(id));
        }
    }

    fn connect(&mut self, idx: usize, now: Micros) {
        let addr = self.peers[idx].addr;
        match stream::start_connect(addr, &self.cfg) {
            Ok(mut stream) => {
                let token = self.tokens.take();
                if let Err(e) = self.registry.register(
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

    fn on_outbound_event(&mut self, now: Micros, idx: usize, ready: Readiness) {
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
                if ready.readable {
                    // Peers never write on a connection we dialed; drain to notice a close.
                    let mut scratch = BytesMut::new();
                    for _ in 0..READS_PER_EVENT {
                        scratch.clear();
                        match stream::read_into(stream, &mut scratch, 4096) {
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
                if ready.writable {
                    self.flush_peer(idx, now);
                }
            }
            Link::Idle | Link::Backoff { .. } => {}
        }
    }

    fn link_up(&mut self, idx: usize, now: Micros) {
        let hello = Hello {
            cluster_id: self.id.cluster_id,
            node: self.id.me,
            incarnation: self.id.incarnation,
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
        self.log.log(format_args!("connected to {id} at {addr}"));
        self.notices.push(LinkNotice::Reconnected(id));
        self.mark_dirty(idx);
        self.flush_peer(idx, now);
    }

    /// A connect attempt failed: keep the queue (nothing of it was written) and retry later.
    fn link_failed(&mut self, idx: usize, now: Micros, reason: fmt::Arguments<'_>) {
        self.close_link(idx);
        let peer = &mut self.peers[idx];
        let delay = peer.backoff.next_delay();
        peer.link = Link::Backoff {
            until: now.saturating_add(delay.as_micros() as Micros),
        };
        if !peer.down_logged {
            peer.down_logged = true;
            let (id, addr) = (peer.id, peer.addr);
            self.log.log(format_args!(
                "cannot reach {id} at {addr}: {reason}; retrying with backoff"
            ));
        }
    }

    /// An established connection broke: frames in its queue may be half written, so the
    /// queue is cleared and the protocol's retransmissions fill the gap.
    fn link_lost(&mut self, idx: usize, now: Micros, reason: fmt::Arguments<'_>) {
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
            self.log
                .log(format_args!("lost connection to {id} at {addr}: {reason}"));
        }
        if up_since.is_some() {
            self.notices.push(LinkNotice::Unreachable(id));
        }
    }

    fn close_link(&mut self, idx: usize) {
        match std::mem::replace(&mut self.peers[idx].link, Link::Idle) {
            Link::Connecting {
                mut stream, token, ..
            }
            | Link::Up {
                mut stream, token, ..
            } => {
                let _ = self.registry.deregister(&mut stream);
                self.out_tokens.remove(&token);
            }
            Link::Idle | Link::Backoff { .. } => {}
        }
    }

    fn flush_peer(&mut self, idx: usize, now: Micros) {
        let peer = &mut self.peers[idx];
        peer.dirty = false;
        let Link::Up { stream, .. } = &mut peer.link else {
            return;
        };
        if let Err(e) = peer.queue.flush(stream) {
            self.link_lost(idx, now, format_args!("write failed: {e}"));
        }
    }

    fn accept(&mut self) {
        loop {
            let (mut stream, addr) = match self.listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // E.g. EMFILE or a connection reset before accept: log, keep serving.
                    self.log.log(format_args!("accept failed: {e}"));
                    return;
                }
            };
            if self.inbound.len() >= MAX_INBOUND {
                if !self.inbound_limit_logged {
                    self.inbound_limit_logged = true;
                    self.log.log(format_args!(
                        "refusing connection from {addr}: {MAX_INBOUND} peer connections open"
                    ));
                }
                continue;
            }
            if let Err(e) = stream::configure_stream(&stream, &self.cfg) {
                self.log
                    .log(format_args!("cannot set socket options for {addr}: {e}"));
            }
            let token = self.tokens.take();
            if let Err(e) = self
                .registry
                .register(&mut stream, token, Interest::READABLE)
            {
                self.log
                    .log(format_args!("cannot register connection from {addr}: {e}"));
                continue;
            }
            self.inbound.insert(
                token,
                Inbound {
                    stream,
                    addr,
                    rbuf: BytesMut::new(),
                    intake: Intake::new(),
                    peer: None,
                },
            );
        }
    }

    /// Keeps the book of the peers' lives (`crate::lives`) from now on.
    pub fn set_lives(&mut self, book: SharedLivesBook) {
        self.lives = Some(book);
    }

    /// The first frame of inbound connection `token` asks which life of its sender this
    /// node knows (`crate::lives`): answered from the book, then the connection closes.
    fn answer_life_query(&mut self, token: Token, body: Bytes) {
        let (cluster, node) = match lives::decode_query(body) {
            Ok(q) => q,
            Err(e) => {
                self.bad_input(token, format_args!("bad life query: {e}"));
                return;
            }
        };
        let mine = self.id.cluster_id;
        if cluster != mine {
            self.bad_input(
                token,
                format_args!("life query from cluster {cluster} (this is cluster {mine})"),
            );
            return;
        }
        let answer = match &self.lives {
            Some(b) => {
                LifeAnswer::from_book(Some(&b.lock().unwrap_or_else(|p| p.into_inner())), node)
            }
            None => LifeAnswer::from_book(None, node),
        };
        if let (Some(conn), Ok(f)) = (self.inbound.get_mut(&token), answer.frame()) {
            // A few bytes on a connection that has sent nothing yet: the socket's buffer
            // takes them. If it does not, the asker asks again.
            let _ = io::Write::write_all(&mut conn.stream, &f);
        }
        self.log.log(format_args!(
            "{node} asked which of its lives this node knows: {answer:?}"
        ));
        self.close_inbound(token, format_args!("life query answered"));
    }

    /// One read of inbound connection `token`: its complete frames go to `inbox` (a
    /// `Hello` is checked here and goes nowhere).
    fn read_inbound(&mut self, now: Micros, token: Token, inbox: &mut Vec<InFrame>) -> Ready {
        let chunk_max = self.cfg.read_buffer_bytes;
        let Some(conn) = self.inbound.get_mut(&token) else {
            return Ready::Drained;
        };
        // What the bytes already here allow (issue 33): before its Hello a connection is
        // nobody and may not make this node buffer more than a Hello; after it, one
        // connection per member may hold a read's worth, and larger frames wait for the
        // peer port's budget.
        let identified = conn.peer.is_some();
        let free = if identified {
            chunk_max.max(super::intake::CLIENT_FREE_BYTES)
        } else {
            frame::HEADER_BYTES + MAX_HELLO_BODY_BYTES
        };
        let allow = Allowance {
            free_bytes: free,
            chunk_max_bytes: chunk_max,
            body_max: |kind| peer_body_max(identified, kind),
        };
        let plan = conn
            .intake
            .plan(token, &conn.rbuf, &allow, &mut self.budget, now);
        let max = match plan {
            Plan::Read(n) => n,
            Plan::Wait { first } => {
                if first {
                    self.stats.read_budget_waits += 1;
                }
                return Ready::Drained;
            }
            Plan::Refuse(reason) => {
                self.stats.frames_over_kind_limit += 1;
                let reason = if identified {
                    reason
                } else {
                    format!("{reason} (expected a Hello)")
                };
                self.bad_input(token, format_args!("{reason}"));
                return Ready::Drained;
            }
        };
        match stream::read_into(&conn.stream, &mut conn.rbuf, max) {
            Ok(ReadOutcome::Data(n)) => conn.intake.after_read(max, n),
            Ok(ReadOutcome::WouldBlock) => return Ready::Drained,
            Ok(ReadOutcome::Eof) => {
                self.close_inbound(token, format_args!("closed by the peer"));
                return Ready::Drained;
            }
            Err(e) => {
                self.close_inbound(token, format_args!("read failed: {e}"));
                return Ready::Drained;
            }
        }
        loop {
            let Some(conn) = self.inbound.get_mut(&token) else {
                return Ready::Drained;
            };
            let f = match conn.intake.decode(token, &mut conn.rbuf, &mut self.budget) {
                Ok(Some(f)) => f,
                Ok(None) => return Ready::More,
                Err(e) => {
                    self.bad_input(token, format_args!("{e}"));
                    return Ready::Drained;
                }
            };
            self.stats.frames_received += 1;
            match (conn.peer, f.kind) {
                (None, KIND_HELLO) => {
                    if let Err(reason) = self.on_hello(token, f.body) {
                        self.bad_input(token, format_args!("{reason}"));
                        return Ready::Drained;
                    }
                }
                (None, lives::KIND_LIFE_QUERY) => {
                    self.answer_life_query(token, f.body);
                    return Ready::Drained;
                }
                (None, k) => {
                    self.bad_input(
                        token,
                        format_args!("first frame has kind {k}, expected Hello"),
                    );
                    return Ready::Drained;
                }
                (Some(_), KIND_HELLO) => {
                    self.bad_input(token, format_args!("second Hello on one connection"));
                    return Ready::Drained;
                }
                (Some(from), kind) if kind <= KIND_PROTOCOL_MAX => inbox.push(InFrame {
                    from,
                    via: token,
                    kind,
                    group: f.group,
                    body: f.body,
                }),
                (Some(_), k) => {
                    self.bad_input(
                        token,
                        format_args!("client frame kind {k} on the peer port"),
                    );
                    return Ready::Drained;
                }
            }
        }
    }

    /// The first frame of inbound connection `token` is a `Hello`: check it and name the
    /// connection's peer.
    fn on_hello(&mut self, token: Token, body: Bytes) -> Result<(), String> {
        let h = Hello::decode(body).map_err(|e| format!("bad Hello: {e}"))?;
        if h.cluster_id != self.id.cluster_id {
            return Err(format!(
                "Hello from cluster {} (this is cluster {})",
                h.cluster_id, self.id.cluster_id
            ));
        }
        if !self.index.contains_key(&h.node) {
            return Err(format!("Hello from unknown node id {}", h.node.0));
        }
        // Recorded before any frame of this life is taken: should this node's peer lose
        // its directory, this node tells it that it lived (`crate::lives`).
        if let Some(book) = self.lives.as_ref() {
            let mut book = book.lock().unwrap_or_else(|p| p.into_inner());
            book.note(h.node, h.incarnation).map_err(|e| {
                format!(
                    "cannot record {}'s incarnation {} in the book of peer lives: {e}",
                    h.node, h.incarnation
                )
            })?;
        }
        let Some(conn) = self.inbound.get_mut(&token) else {
            return Ok(());
        };
        conn.peer = Some(h.node);
        let addr = conn.addr;
        self.stats.hellos_accepted += 1;
        // A newer connection from the same node replaces the old one: the peer restarted or
        // reconnected, and the old socket only holds stale bytes.
        let old: Vec<Token> = self
            .inbound
            .iter()
            .filter(|(t, c)| **t != token && c.peer == Some(h.node))
            .map(|(t, _)| *t)
            .collect();
        for t in old {
            self.close_inbound(
                t,
                format_args!("replaced by a new connection from {}", h.node),
            );
        }
        self.log.log(format_args!(
            "accepted connection from {} (incarnation {}) at {addr}",
            h.node, h.incarnation
        ));
        self.drop_stale_queue(h.node, h.incarnation);
        Ok(())
    }

    /// A `Hello` from `node` announced `incarnation`: frames queued for an earlier life of
    /// it, none of them written yet, are dropped (see the module comment, "Connections").
    fn drop_stale_queue(&mut self, node: NodeId, incarnation: u64) {
        let Some(&idx) = self.index.get(&node) else {
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
        self.log.log(format_args!(
            "dropped {frames} frames queued for {node}'s incarnation {built_for}: it restarted \
             as incarnation {incarnation} before they could be written"
        ));
    }

    fn bad_input(&mut self, token: Token, reason: fmt::Arguments<'_>) {
        self.stats.bad_input_closes += 1;
        self.close_inbound(token, reason);
    }

    fn close_inbound(&mut self, token: Token, reason: fmt::Arguments<'_>) {
        self.budget.forget(token);
        if let Some(mut conn) = self.inbound.remove(&token) {
            let who = match conn.peer {
                Some(p) => format!("{p} at {}", conn.addr),
                None => format!("unidentified peer at {}", conn.addr),
            };
            self.log
                .log(format_args!("closing connection from {who}: {reason}"));
            // Deregistering can only fail if the socket is already gone from the poller.
            let _ = self.registry.deregister(&mut conn.stream);
        }
    }
}

impl Transport for TcpLinks {
    fn name(&self) -> &'static str {
        "tcp"
    }

    fn send(&mut self, now: Micros, to: NodeId, frame: OutFrame<'_>) -> Sent {
        // A removed peer keeps its slot (for a return) but leaves the index.
        let Some(&idx) = self.index.get(&to) else {
            self.stats.frames_dropped += 1;
            return Sent::Dropped;
        };
        let mut pushed = self.peers[idx].push_frame(frame);
        if matches!(pushed, Err(PushError::Full(_)))
            && matches!(self.peers[idx].link, Link::Up { .. })
        {
            // Make room by writing what the socket takes now, then try once more.
            self.flush_peer(idx, now);
            pushed = self.peers[idx].push_frame(frame);
        }
        let sent = match pushed {
            Ok(()) => {
                self.stats.frames_queued += 1;
                self.mark_dirty(idx);
                Sent::Queued
            }
            Err(PushError::Full(_)) => {
                self.count_drop(idx);
                Sent::Dropped
            }
            Err(PushError::Frame(e)) => {
                self.stats.frames_dropped += 1;
                let kind = frame.kind;
                self.log
                    .log(format_args!("cannot send message kind {kind} to {to}: {e}"));
                Sent::Dropped
            }
        };
        if matches!(self.peers[idx].link, Link::Idle) {
            self.connect(idx, now);
        }
        sent
    }

    fn owns(&self, token: Token) -> bool {
        self.tokens.owns(token)
    }

    fn on_ready(
        &mut self,
        now: Micros,
        token: Token,
        ready: Readiness,
        inbox: &mut Vec<InFrame>,
    ) -> Ready {
        if token == self.listener_token {
            self.accept();
            return Ready::Drained;
        }
        if let Some(&idx) = self.out_tokens.get(&token) {
            self.on_outbound_event(now, idx, ready);
            return Ready::Drained;
        }
        if ready.readable {
            return self.read_inbound(now, token, inbox);
        }
        Ready::Drained
    }

    fn reads_per_event(&self) -> usize {
        READS_PER_EVENT
    }

    fn reject(&mut self, frame: &InFrame, reason: &str) -> bool {
        if self.inbound.contains_key(&frame.via) {
            let (kind, group) = (frame.kind, frame.group);
            self.bad_input(
                frame.via,
                format_args!("cannot decode message kind {kind} of group {group}: {reason}"),
            );
        }
        true
    }

    fn flush(&mut self, now: Micros) {
        for idx in std::mem::take(&mut self.dirty) {
            self.flush_peer(idx, now);
        }
    }

    fn on_timers(&mut self, now: Micros) {
        for token in self.budget.overdue(now) {
            self.stats.read_overdue_closes += 1;
            self.close_inbound(
                token,
                format_args!(
                    "a large frame was still incomplete when due, while other connections \
                     waited for the read budget"
                ),
            );
        }
        for idx in 0..self.peers.len() {
            match self.peers[idx].link {
                Link::Backoff { until } if until <= now => {
                    self.peers[idx].link = Link::Idle;
                    if !self.peers[idx].queue.is_empty() {
                        self.connect(idx, now);
                    }
                }
                // A SYN into a black hole would otherwise wait for the kernel's timeout
                // (minutes) while frames pile up.
                Link::Connecting { since, .. }
                    if now.saturating_sub(since) >= CONNECT_TIMEOUT_US =>
                {
                    self.link_failed(idx, now, format_args!("connect timed out"));
                }
                _ => {}
            }
        }
        for p in &mut self.peers {
            // At most one line per second per peer, and only while connected: drops while
            // a peer is down are expected and its disconnect was already logged.
            if p.dropped_unlogged > 0
                && matches!(p.link, Link::Up { .. })
                && now.saturating_sub(p.last_drop_log_us) >= DROP_LOG_INTERVAL_US
            {
                let (id, n) = (p.id, p.dropped_unlogged);
                p.dropped_unlogged = 0;
                p.last_drop_log_us = now;
                self.log.log(format_args!(
                    "dropped {n} frames for {id}: its send queue was full"
                ));
            }
        }
    }

    fn next_deadline(&self) -> Option<Micros> {
        self.peers
            .iter()
            .filter_map(|p| match p.link {
                Link::Backoff { until } => Some(until),
                Link::Connecting { since, .. } => Some(since.saturating_add(CONNECT_TIMEOUT_US)),
                _ => None,
            })
            .chain(self.budget.next_due())
            .min()
    }

    /// Adds node `id` at `addr`, or moves a peer to a new address (its link is closed, and
    /// the next send dials `addr`).
    fn add_peer(&mut self, now: Micros, id: NodeId, addr: SocketAddr) -> Result<(), String> {
        if id == self.id.me {
            return Err(format!("{id} is this node"));
        }
        if let Some(&idx) = self.index.get(&id) {
            if self.peers[idx].addr != addr {
                self.drop_link(idx, format_args!("{id} moved to {addr}"));
                self.peers[idx].addr = addr;
                if !self.peers[idx].queue.is_empty() {
                    self.connect(idx, now);
                }
            }
            return Ok(());
        }
        let idx = match self.peers.iter().position(|p| p.id == id) {
            Some(idx) => idx,
            None if self.peers.len() >= PEER_SLOTS_MAX => {
                return Err(format!("more than {PEER_SLOTS_MAX} peers"));
            }
            None => {
                self.peers.push(Peer::new(id, addr, &self.cfg));
                self.peers.len() - 1
            }
        };
        let peer = &mut self.peers[idx];
        peer.addr = addr;
        peer.down_logged = false;
        self.index.insert(id, idx);
        Ok(())
    }

    fn remove_peer(&mut self, _now: Micros, id: NodeId) {
        let Some(idx) = self.index.remove(&id) else {
            return;
        };
        self.drop_link(idx, format_args!("{id} was removed from the peers"));
        self.peers[idx].queue.clear();
        let inbound: Vec<Token> = self
            .inbound
            .iter()
            .filter(|(_, c)| c.peer == Some(id))
            .map(|(t, _)| *t)
            .collect();
        for token in inbound {
            self.close_inbound(token, format_args!("{id} was removed from the peers"));
        }
    }

    fn take_notices(&mut self, out: &mut Vec<LinkNotice>) {
        out.append(&mut self.notices);
    }

    fn take_woken(&mut self, out: &mut Vec<Token>) {
        self.budget.take_woken(out);
    }

    fn add_stats(&self, s: &mut TransportStats) {
        let t = &self.stats;
        s.frames_queued += t.frames_queued;
        s.frames_dropped += t.frames_dropped;
        s.frames_received += t.frames_received;
        s.bad_input_closes += t.bad_input_closes;
        s.connects += t.connects;
        s.disconnects += t.disconnects;
        s.hellos_accepted += t.hellos_accepted;
        s.stale_frames_dropped += t.stale_frames_dropped;
        s.read_budget_waits += t.read_budget_waits;
        s.read_overdue_closes += t.read_overdue_closes;
        s.frames_over_kind_limit += t.frames_over_kind_limit;
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
