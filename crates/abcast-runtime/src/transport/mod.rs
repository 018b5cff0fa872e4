//! The transport layer: how a node's messages reach its peers, behind one interface.
//!
//! The driver (the event loop) speaks to every transport through [`Transport`]: queue a
//! message for a peer or for the whole group, take what arrived on a ready socket, flush,
//! run timers, add or remove a peer, report link changes. Two implementations today:
//!
//! - `tcp.rs`, [`tcp::TcpLinks`]: a connection per peer pair (dial on first send, `Hello`,
//!   reconnect with backoff, bounded queues written with vectored writes), reliable and FIFO
//!   while a connection lasts; the default for messages to one peer, and the fallback for
//!   what does not fit a datagram.
//! - `datagram.rs`, [`datagram::Datagrams`]: one UDP socket, either a multicast group's
//!   (`Outbox::multicasts` as one datagram for every member, seed 003) or a unicast one
//!   (one datagram per message to one peer, `unicast = "udp"`); with
//!   [`TransportConfig::control_port_offset`] a second unicast socket carries the
//!   [`Lane::Control`] messages alone (seed 002's token, §III-E), and the driver weighs the
//!   two sockets against each other (`driver/lanes.rs`, §III-D).
//!
//! A transport owns its sockets and registers them with the loop's poller under tokens of
//! its own ([`Transport::owns`]); the loop routes readiness by token and never touches a
//! transport's sockets. What arrives comes back as [`InFrame`]s (undecoded: the driver
//! decodes with the protocol's message type and tells the transport when a message was bad,
//! [`Transport::reject`]), and link changes as [`LinkNotice`]s, which the driver turns into
//! `Protocol::peer_reconnected` / `peer_unreachable`. The driver chooses the transport per
//! message ([`Sent::Declined`] passes a message on to the next one), so a shared-memory
//! transport for nodes of one machine (seed 004) is one more implementation and one more
//! entry in that choice.
//!
//! `stream.rs` holds the socket-level pieces the TCP links and the client port share.

pub mod datagram;
pub mod intake;
pub mod stream;
pub mod tcp;

pub use stream::{
    Backoff, COPY_MAX_BYTES, MAX_IOV, OutQueue, PushError, QueueFull, ReadOutcome, bind_listener,
    configure_stream, read_into, start_connect,
};

use crate::linkfault::LinkFault;
use crate::multicast::{MulticastConfig, MulticastStats};
use abcast_core::codec::Lane;
use abcast_core::{Micros, NodeId};
use bytes::Bytes;
use mio::Token;
use std::fmt;
use std::net::SocketAddr;
use std::time::Instant;

/// One encoded message on its way out: the frame kind and group of its header, and its
/// body as the codec left it (small pieces and shared payload chunks, never copied here).
#[derive(Clone, Copy, Debug)]
pub struct OutFrame<'a> {
    pub kind: u8,
    pub group: u16,
    pub chunks: &'a [Bytes],
    /// A control frame ([`abcast_core::codec::WireMessage::urgent`]): a stream transport
    /// sends it ahead of the data frames queued to the same peer.
    pub urgent: bool,
    /// The socket lane ([`abcast_core::codec::WireMessage::lane`]): a datagram endpoint of
    /// one lane declines the other's messages.
    pub lane: Lane,
}

/// What a transport did with a message it was offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Queued; it leaves at the next flush.
    Queued,
    /// Dropped and counted (a full queue, a removed or unknown peer): the protocols
    /// retransmit, as they do after any loss.
    Dropped,
    /// Not for this transport (too large for a datagram, no group, no route): offer it to
    /// the next one.
    Declined,
}

/// A message as it arrived, before the driver decodes it.
#[derive(Debug)]
pub struct InFrame {
    /// The peer that sent it: the node its connection's `Hello` named, or the sender a
    /// datagram's checked header names.
    pub from: NodeId,
    /// The registration it came on, for [`Transport::reject`].
    pub via: Token,
    pub kind: u8,
    pub group: u16,
    pub body: Bytes,
}

/// A link to a peer came up or broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkNotice {
    /// `Protocol::peer_reconnected`: messages may flow again (after a gap the protocol
    /// must assume).
    Reconnected(NodeId),
    /// `Protocol::peer_unreachable`: the link broke and what was queued on it is lost.
    Unreachable(NodeId),
}

/// What a ready registration may still hold after one call of [`Transport::on_ready`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ready {
    /// Nothing more to read now (or the registration is gone).
    Drained,
    /// There may be more: call again, or come back next iteration once the budget is used.
    More,
}

/// Readiness of one registration, as the poller reported it (errors and hang-ups count as
/// both, so the owner looks and finds out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Readiness {
    pub readable: bool,
    pub writable: bool,
}

/// How messages reach peers. Every method is called from the loop's one thread; none
/// blocks. See the module comment for the division of work with the driver.
pub trait Transport {
    /// For log lines: "tcp", "udp unicast", "udp multicast".
    fn name(&self) -> &'static str;

    /// Queues one message for peer `to`. `Declined` when this transport does not carry it
    /// (the driver offers it to the next one).
    fn send(&mut self, now: Micros, to: NodeId, frame: OutFrame<'_>) -> Sent;

    /// Queues one message for every peer at once (IP multicast). The default declines: the
    /// driver then sends one copy to each peer.
    fn multicast(&mut self, _now: Micros, _frame: OutFrame<'_>) -> Sent {
        Sent::Declined
    }

    /// Whether `token` is one of this transport's registrations.
    fn owns(&self, token: Token) -> bool;

    /// Serves one readiness event of `token`: accepts, connects, writes what waits, and
    /// reads at most one batch (one `read` of a stream, one datagram) into `inbox`.
    fn on_ready(
        &mut self,
        now: Micros,
        token: Token,
        ready: Readiness,
        inbox: &mut Vec<InFrame>,
    ) -> Ready;

    /// Calls of `on_ready` per event before the loop serves other sockets.
    fn reads_per_event(&self) -> usize;

    /// A frame that came `via` a registration did not decode as a protocol message: a
    /// stream closes that connection (the byte stream cannot be trusted past it) and
    /// returns true, so the caller drops the connection's other frames it holds; a datagram
    /// endpoint counts and logs the datagram and returns false.
    fn reject(&mut self, frame: &InFrame, reason: &str) -> bool;

    /// Injected loss on receipt (`[[link_faults]]`, `crate::linkfault::RecvLoss`): a
    /// message of `group` on `lane` from `from` that arrived on this transport, decoded, is
    /// dropped when this returns true (and counted by the transport). Only an IP-multicast
    /// endpoint rolls these dice: its one datagram reaches every member, so each link's
    /// loss is applied where it arrives; every other path applies the link's faults where
    /// the driver sends.
    fn lost_on_receipt(&mut self, _from: NodeId, _group: u16, _lane: Lane) -> bool {
        false
    }

    /// Writes what is queued, as far as the sockets take it now.
    fn flush(&mut self, now: Micros);

    /// Start of a loop iteration: a socket that would block may be tried again.
    fn on_iteration(&mut self) {}

    /// Timers that are due (reconnects, connect timeouts, rate-limited log lines).
    fn on_timers(&mut self, now: Micros);

    /// The next instant `on_timers` has something to do, if any.
    fn next_deadline(&self) -> Option<Micros>;

    /// Adds node `id` at `addr` to the peers, or moves it (see `Driver::add_peer`).
    fn add_peer(&mut self, now: Micros, id: NodeId, addr: SocketAddr) -> Result<(), String>;

    /// Removes node `id`: its links close, what was queued for it is dropped, and nothing
    /// from it is accepted any more.
    fn remove_peer(&mut self, now: Micros, id: NodeId);

    /// Moves the link changes since the last call into `out`.
    fn take_notices(&mut self, _out: &mut Vec<LinkNotice>) {}

    /// Moves into `out` the registrations to serve again although no event came: a
    /// connection that waited for the read budget and may read now (`intake.rs`).
    fn take_woken(&mut self, _out: &mut Vec<Token>) {}

    /// Adds this transport's counters to `stats`.
    fn add_stats(&self, stats: &mut TransportStats);
}

/// Counters of the transports and the loop, for tests and logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    pub frames_queued: u64,
    /// Frames dropped because a peer's queue was full (or the peer is unknown).
    pub frames_dropped: u64,
    /// Frames dropped by injected link loss (`TransportConfig::link_faults`).
    pub frames_lost: u64,
    pub frames_received: u64,
    /// Connections closed because of a bad frame, a message that failed to decode, or a
    /// refused `Hello`.
    pub bad_input_closes: u64,
    /// Client connections that opened the shared-memory rings (`crate::shm`).
    pub client_shm_opened: u64,
    /// Outbound connections established.
    pub connects: u64,
    /// Outbound connections lost after being established.
    pub disconnects: u64,
    /// Inbound peer connections accepted after a valid `Hello`.
    pub hellos_accepted: u64,
    /// Frames never written because the peer they were queued for restarted before they
    /// left (its `Hello` announced a newer incarnation; see `tcp.rs`, "Connections"). Not
    /// counted in `frames_dropped`.
    pub stale_frames_dropped: u64,
    /// Protocol multicasts carried as one copy per peer: all of them without
    /// `TransportConfig::multicast`, else those too large for one datagram. Each copy goes
    /// by the transport a message to that peer takes: TCP, or a UDP datagram with
    /// `unicast = Udp` (the token ring's logical multicast, seed 002 §III-E).
    pub multicasts_by_tcp: u64,
    /// Protocol multicasts that did not fit one datagram and fell back to TCP.
    pub multicasts_too_large: u64,
    /// The UDP multicast socket's counters (all zero without one).
    pub multicast: MulticastStats,
    /// The UDP unicast socket's counters (all zero without one).
    pub unicast: MulticastStats,
    /// The control lane's UDP socket's counters (all zero without one).
    pub control: MulticastStats,
    /// Messages to one peer that went by UDP datagram (`Unicast::Udp`).
    pub sends_by_udp: u64,
    /// Of `sends_by_udp`: those on the control lane's socket.
    pub sends_by_control: u64,
    /// Storage syncs (group commits) done before sends.
    pub storage_syncs: u64,
    /// Snapshots written.
    pub snapshots: u64,
    /// Snapshots due that the protocol refused for the moment (retried an interval later).
    pub snapshots_refused: u64,
    /// Snapshots fetched from a peer and installed.
    pub snapshots_installed: u64,
    /// Times a connection stopped being read until its port's read budget could hold the
    /// large frame it announced (`intake.rs`).
    pub read_budget_waits: u64,
    /// Connections closed because a frame the read budget admitted was still incomplete
    /// when due, while another connection waited for the budget (`intake.rs`).
    pub read_overdue_closes: u64,
    /// Connections closed because a frame announced a body longer than its kind may carry
    /// (also in `bad_input_closes`).
    pub frames_over_kind_limit: u64,
}

/// Log lines of one node: `[node seconds] message` on stderr.
#[derive(Clone, Copy, Debug)]
pub struct Logger {
    pub me: NodeId,
    pub start: Instant,
}

impl Logger {
    pub fn log(&self, msg: fmt::Arguments<'_>) {
        let t = self.start.elapsed().as_secs_f64();
        eprintln!("[{} {t:.3}s] {msg}", self.me);
    }
}

/// Token ranges of the loop's poller, one per owner, so the loop routes an event to its
/// owner with a comparison and a transport never collides with another's tokens.
pub const TOKEN_SPAN: usize = 1 << 32;
/// The first token of the TCP links' range.
pub const TCP_TOKENS: usize = 1 << 33;

/// Hands out the tokens of one range `[base, base + TOKEN_SPAN)`, wrapping around.
#[derive(Clone, Copy, Debug)]
pub struct Tokens {
    base: usize,
    next: usize,
}

impl Tokens {
    pub fn new(base: usize) -> Tokens {
        Tokens { base, next: 0 }
    }
    pub fn take(&mut self) -> Token {
        let t = Token(self.base + self.next);
        self.next = (self.next + 1) % TOKEN_SPAN;
        t
    }
    pub fn owns(&self, token: Token) -> bool {
        token.0 >= self.base && token.0 - self.base < TOKEN_SPAN
    }
}

/// Socket settings of the transport (`[transport]` in the node config).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportConfig {
    /// SO_SNDBUF and SO_RCVBUF in bytes (seed 000 table 4.1 `buffer_size`, 2 MiB); 0 keeps
    /// the kernel's default and its autotuning.
    pub buffer_size: usize,
    /// TCP_NODELAY: the runtime batches itself, so Nagle only adds latency.
    pub tcp_nodelay: bool,
    /// Bound of one peer's outbound queue. Frames that do not fit are dropped (the protocol
    /// retransmits), so a dead or slow peer never grows memory without limit.
    pub send_queue_bytes: usize,
    /// Bound of one client connection's outbound queue; a learn client that falls this far
    /// behind is disconnected.
    pub client_queue_bytes: usize,
    /// Each of the two rings a client on the Unix client socket may trade frames through
    /// (`crate::shm`; the client asks with `ShmOpen`): a power of two from 64 KiB to 1 GiB,
    /// or 0 to offer no shared memory. The ring is in front of the connection's queue
    /// (`client_queue_bytes`), which bounds what waits behind a full ring.
    pub client_shm_bytes: usize,
    /// First reconnect delay after a peer connection fails; doubles up to `backoff_ms_max`.
    pub backoff_ms_min: u64,
    pub backoff_ms_max: u64,
    /// The largest single read of a connection; reads start at 4 KiB and double while they
    /// fill (`intake.rs`). Also what a peer connection, once its `Hello` named a member,
    /// may hold of an unfinished frame outside the read budget.
    pub read_buffer_bytes: usize,
    /// The client port's budget for unfinished frames longer than a connection may hold
    /// on its own (`intake.rs`): a connection that announces one waits until the budget
    /// holds its whole length. At least one frame is always admitted.
    pub client_read_budget_bytes: usize,
    /// The peer port's budget, the same for peer connections.
    pub peer_read_budget_bytes: usize,
    /// Injected per-link delay and loss for experiments (`[[link_faults]]` in the node
    /// config), for the whole cluster: each driver applies the rules of its own outgoing
    /// links. Empty (the default) = real links only, and the send path is unchanged.
    pub link_faults: Vec<LinkFault>,
    /// UDP IP-multicast for the protocol's `Outbox::multicasts` (`[multicast]` in the node
    /// config). `None` (the default): each multicast goes as one TCP copy per peer.
    pub multicast: Option<MulticastConfig>,
    /// How messages to one peer travel (`unicast = "tcp" | "udp"` under `[transport]`).
    pub unicast: Unicast,
    /// With `unicast = Udp`: a second UDP socket, on each node's peer port plus this
    /// offset, carries the [`Lane::Control`] messages (the token ring's token and commit
    /// token; seed 002 §III-E), and the loop chooses which of the two sockets to read first
    /// (§III-D, `driver/lanes.rs`). `None`: one socket for every message.
    pub control_port_offset: Option<u16>,
    /// After an event, the loop polls without sleeping for this long before it sleeps in
    /// the kernel (0 = never spins). The reply to a message usually comes within a round
    /// trip: spinning saves the wake-up of each hop, at the cost of up to this much CPU
    /// per burst of events.
    pub busy_poll_us: u64,
}

/// Where a node whose peer address is `addr` listens for the control lane's datagrams
/// ([`TransportConfig::control_port_offset`]); `None` past port 65535.
pub fn control_addr(addr: SocketAddr, offset: u16) -> Option<SocketAddr> {
    let port = addr.port().checked_add(offset)?;
    Some(SocketAddr::new(addr.ip(), port))
}

/// How the protocol's `Outbox::sends` reach a peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unicast {
    /// A TCP connection per peer pair: reliable and FIFO while it lasts (the default).
    #[default]
    Tcp,
    /// One UDP datagram per message from a socket on the node's own peer address (same port
    /// as TCP), with the multicast datagram's format and checks (`multicast.rs`); a message
    /// too large for one datagram goes by TCP. Loss and reordering are the protocol's to
    /// repair, as the token ring of seed 002 does and the ring protocols do.
    Udp,
}

impl Unicast {
    pub fn parse(s: &str) -> Option<Unicast> {
        match s {
            "tcp" => Some(Unicast::Tcp),
            "udp" => Some(Unicast::Udp),
            _ => None,
        }
    }
}

/// [`TransportConfig::busy_poll_us`] by default: a loopback round trip with its protocol
/// work fits in it (`bench latency`: one proposal in flight, Sequence Paxos p50 58 µs
/// without spinning, 35 µs with 30 to 100 µs of it).
pub const BUSY_POLL_US_DEFAULT: u64 = 50;

/// [`TransportConfig::client_shm_bytes`] by default: 4 MiB per ring, a sender's window of
/// 1 KiB messages (`abcast multicast --window 4096`) in one ring.
pub const CLIENT_SHM_BYTES_DEFAULT: usize = 4 << 20;

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            buffer_size: 2 << 20,
            tcp_nodelay: true,
            send_queue_bytes: 256 << 20,
            client_queue_bytes: 16 << 20,
            client_shm_bytes: CLIENT_SHM_BYTES_DEFAULT,
            backoff_ms_min: 10,
            backoff_ms_max: 1000,
            read_buffer_bytes: 1 << 20,
            client_read_budget_bytes: intake::READ_BUDGET_BYTES_DEFAULT,
            peer_read_budget_bytes: intake::READ_BUDGET_BYTES_DEFAULT,
            link_faults: Vec::new(),
            multicast: None,
            unicast: Unicast::Tcp,
            control_port_offset: None,
            busy_poll_us: BUSY_POLL_US_DEFAULT,
        }
    }
}
