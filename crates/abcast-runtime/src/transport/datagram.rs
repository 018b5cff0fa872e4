//! A [`Transport`] over one UDP datagram endpoint (`multicast.rs`: the datagram format,
//! its checks, the bounded send queue).
//!
//! Two shapes of one endpoint:
//! - **group**: the socket of an IP-multicast group; `multicast` queues one datagram every
//!   member receives (seed 003's 2A and decisions), `send` declines;
//! - **unicast**: a socket on the node's own peer address; `send` queues one datagram to the
//!   peer's address (its TCP address: UDP and TCP share the port number), `multicast`
//!   declines. A unicast endpoint accepts a member's datagrams only from that member's
//!   address (the datagram's header names its sender; the source address must agree), so
//!   a stranger's datagram is dropped and counted (`datagrams_unknown_sender`).
//!
//! An endpoint may carry one lane only ([`Datagrams::for_lane`]): the control lane's socket
//! (seed 002's token, on the peer port plus `control_port_offset`) takes
//! [`Lane::Control`] messages and declines the rest, and the data socket beside it the
//! reverse.
//!
//! Either declines what does not fit one datagram ([`multicast::MAX_DATAGRAM_BYTES`]); the
//! driver then offers the message to the next transport (TCP).

use super::{InFrame, Logger, OutFrame, Readiness, Ready, Sent, Transport, TransportStats};
use crate::lives::SharedLivesBook;
use crate::multicast::{self, Multicast, Received};
use abcast_core::codec::Lane;
use abcast_core::{Micros, NodeId};
use mio::Token;
use std::collections::HashMap;
use std::net::SocketAddr;

/// Which shape the endpoint has (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Group,
    Unicast,
}

/// One datagram endpoint as a transport.
#[derive(Debug)]
pub struct Datagrams {
    socket: Multicast,
    token: Token,
    shape: Shape,
    log: Logger,
    /// Unicast: where each peer's datagrams go (and come from).
    addrs: HashMap<NodeId, SocketAddr>,
    /// The one lane this endpoint carries; `None`: every message.
    lane: Option<Lane>,
    /// Messages to one peer queued as a datagram (unicast).
    sends: u64,
    /// Messages declined because they do not fit one datagram.
    too_large: u64,
    /// The node's book of peer lives (`crate::lives`): a peer's life is recorded, durably,
    /// before the first datagram of it is taken, as the TCP links do at its `Hello`.
    lives: Option<SharedLivesBook>,
    /// The life of each peer this endpoint recorded (saves the book's lock per datagram).
    noted: HashMap<NodeId, u64>,
    /// Datagrams dropped because their sender's life could not be recorded.
    lives_refused: u64,
}

impl Datagrams {
    /// `socket` must already be registered with the loop's poller under `token`; `peers`
    /// are the unicast destinations (ignored for a group).
    pub fn new(
        socket: Multicast,
        token: Token,
        shape: Shape,
        log: Logger,
        peers: &[(NodeId, SocketAddr)],
    ) -> Datagrams {
        let mut socket = socket;
        let addrs: HashMap<NodeId, SocketAddr> = match shape {
            Shape::Unicast => peers.iter().copied().collect(),
            Shape::Group => HashMap::new(),
        };
        for (&id, &addr) in &addrs {
            socket.expect_source(id, addr);
        }
        Datagrams {
            socket,
            token,
            shape,
            log,
            addrs,
            lane: None,
            sends: 0,
            too_large: 0,
            lives: None,
            noted: HashMap::new(),
            lives_refused: 0,
        }
    }

    /// Records the peers' lives in `book` from now on.
    pub fn with_lives(mut self, book: Option<SharedLivesBook>) -> Datagrams {
        self.lives = book;
        self
    }

    /// Records `from`'s current life in the book before a datagram of it is taken; false
    /// if it could not be (the datagram is then dropped: a peer whose life is not on disk
    /// must not be relied on, `crate::lives`).
    fn note_life(&mut self, from: NodeId) -> bool {
        let Some(book) = self.lives.as_ref() else {
            return true;
        };
        let incarnation = self.socket.known_incarnation(from);
        if self.noted.get(&from).is_some_and(|&k| k >= incarnation) {
            return true;
        }
        let noted = book
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .note(from, incarnation);
        match noted {
            Ok(()) => {
                self.noted.insert(from, incarnation);
                true
            }
            Err(e) => {
                // Logged at powers of two: a disk that refuses the book would otherwise log
                // every datagram.
                self.lives_refused += 1;
                if self.lives_refused.is_power_of_two() {
                    self.log.log(format_args!(
                        "cannot record {from}'s incarnation {incarnation} in the book of peer \
                         lives: {e}; its datagram dropped ({} so far)",
                        self.lives_refused
                    ));
                }
                false
            }
        }
    }

    /// This endpoint carries `lane` only and declines the other's messages.
    pub fn for_lane(mut self, lane: Lane) -> Datagrams {
        self.lane = Some(lane);
        self
    }

    /// The lane this endpoint carries, if only one.
    pub fn lane(&self) -> Option<Lane> {
        self.lane
    }

    /// The endpoint, for its socket options and counters.
    pub fn endpoint(&self) -> &Multicast {
        &self.socket
    }

    /// A message did not fit one datagram: count it, and log at powers of two.
    fn declined_too_large(&mut self, kind: u8) -> Sent {
        self.too_large += 1;
        if self.too_large.is_power_of_two() {
            self.log.log(format_args!(
                "a {} message of kind {kind} does not fit one datagram ({} bytes at most); \
                 sent by TCP ({} so far)",
                self.name(),
                multicast::MAX_DATAGRAM_BYTES,
                self.too_large
            ));
        }
        Sent::Declined
    }
}

impl Transport for Datagrams {
    fn name(&self) -> &'static str {
        match (self.shape, self.lane) {
            (Shape::Group, _) => "udp multicast",
            (Shape::Unicast, Some(Lane::Control)) => "udp control",
            (Shape::Unicast, _) => "udp unicast",
        }
    }

    fn send(&mut self, _now: Micros, to: NodeId, frame: OutFrame<'_>) -> Sent {
        if self.shape != Shape::Unicast || self.lane.is_some_and(|l| l != frame.lane) {
            return Sent::Declined;
        }
        let Some(&addr) = self.addrs.get(&to) else {
            return Sent::Declined;
        };
        // Queued as one datagram, or dropped by a full queue (counted there).
        if self
            .socket
            .push_to(addr, frame.kind, frame.group, frame.chunks.to_vec())
        {
            self.sends += 1;
            Sent::Queued
        } else {
            self.declined_too_large(frame.kind)
        }
    }

    fn multicast(&mut self, _now: Micros, frame: OutFrame<'_>) -> Sent {
        if self.shape != Shape::Group || self.lane.is_some_and(|l| l != frame.lane) {
            return Sent::Declined;
        }
        if self
            .socket
            .push(frame.kind, frame.group, frame.chunks.to_vec())
        {
            Sent::Queued
        } else {
            self.declined_too_large(frame.kind)
        }
    }

    fn owns(&self, token: Token) -> bool {
        token == self.token
    }

    fn on_ready(
        &mut self,
        _now: Micros,
        _token: Token,
        ready: Readiness,
        inbox: &mut Vec<InFrame>,
    ) -> Ready {
        if ready.writable {
            self.socket.on_writable();
            self.socket.flush();
        }
        if !ready.readable {
            return Ready::Drained;
        }
        match self.socket.recv() {
            Ok(Received::Frame(from, f)) => {
                if !self.note_life(from) {
                    return Ready::More;
                }
                inbox.push(InFrame {
                    from,
                    via: self.token,
                    kind: f.kind,
                    group: f.group,
                    body: f.body,
                });
                Ready::More
            }
            Ok(Received::Dropped) => Ready::More,
            Ok(Received::Empty) => Ready::Drained,
            Err(e) => {
                // A UDP socket has no connection to lose; report and read again later.
                let name = self.name();
                self.log
                    .log(format_args!("{name} datagram receive failed: {e}"));
                Ready::Drained
            }
        }
    }

    fn reads_per_event(&self) -> usize {
        multicast::READS_PER_EVENT
    }

    fn reject(&mut self, frame: &InFrame, reason: &str) -> bool {
        self.socket.reject_message(frame.from, frame.kind, reason);
        false
    }

    fn lost_on_receipt(&mut self, from: NodeId, group: u16, lane: Lane) -> bool {
        self.shape == Shape::Group && self.socket.lost_on_receipt(from, group, lane)
    }

    fn flush(&mut self, _now: Micros) {
        if self.socket.has_queued() {
            self.socket.flush();
        }
    }

    /// A send that would block waits for a writable event, and at most until the next
    /// iteration.
    fn on_iteration(&mut self) {
        self.socket.on_writable();
    }

    fn on_timers(&mut self, now: Micros) {
        if let Some(line) = self.socket.take_log(now) {
            let name = self.name();
            self.log.log(format_args!("{name}: {line}"));
        }
    }

    fn next_deadline(&self) -> Option<Micros> {
        None
    }

    /// `addr` is the peer's address on this endpoint's lane (the driver adds the control
    /// port offset for the control lane's endpoint).
    fn add_peer(&mut self, _now: Micros, id: NodeId, addr: SocketAddr) -> Result<(), String> {
        self.socket.add_peer(id);
        if self.shape == Shape::Unicast {
            self.addrs.insert(id, addr);
            self.socket.expect_source(id, addr);
        }
        Ok(())
    }

    fn remove_peer(&mut self, _now: Micros, id: NodeId) {
        self.socket.remove_peer(id);
        self.addrs.remove(&id);
    }

    fn add_stats(&self, s: &mut TransportStats) {
        match self.shape {
            Shape::Group => {
                s.multicast = self.socket.stats;
                s.multicasts_too_large += self.too_large;
            }
            Shape::Unicast if self.lane == Some(Lane::Control) => {
                s.control = self.socket.stats;
                s.sends_by_udp += self.sends;
                s.sends_by_control += self.sends;
            }
            Shape::Unicast => {
                s.unicast = self.socket.stats;
                s.sends_by_udp += self.sends;
            }
        }
    }
}
