//! The event loop of one node: one thread, one `mio::Poll`, everything else in between.
//!
//! Per iteration: poll with a timeout that ends at the next deadline (protocol tick,
//! reconnect, load token, stats); handle every ready socket (each message goes to
//! `protocol.receive` and its outbox is carried out at once); run self-addressed messages;
//! let the load generator propose; `protocol.tick(now)`; fire due timers; flush every
//! outbound queue that has data with vectored writes.
//!
//! Carrying out an outbox follows docs/CONTRACTS.md: sync the store if `needs_sync`, then
//! queue `sends` and `multicasts`, then hand `deliveries` and `acks` to the application and
//! to the client port. Queued frames leave at the next flush, at the latest at the end of the
//! iteration, so one syscall carries the messages of many protocol calls.
//!
//! Group commit (`DriverConfig::group_commit`, set for durable storage): an outbox that
//! needs a sync is not carried out at once; the outboxes of every input of the iteration
//! gather into one, which is carried out at the end of the iteration (or when it grows past
//! `GROUP_COMMIT_MAX_SENDS`) after one sync: one write and one fdatasync for every vote of
//! the iteration, and no message that depends on them leaves before.
//!
//! Pipelined (`DriverConfig::sync_thread`, the default with group commit): at the end of
//! the iteration the writes reach the OS (`Protocol::begin_sync_storage`) and the fdatasync
//! runs on the sync thread (`syncer.rs`) while the loop goes on: the gathered outbox waits
//! *in flight* until the thread reports the job done (a `mio::Waker`). The next iteration's
//! group begins its own sync at once, behind it, while fewer than
//! `syncer::SYNC_JOBS_IN_FLIGHT_MAX` (2) jobs are in flight; past that, what the loop
//! produces gathers, in order, for the next sync. So a voter writes the next group while
//! the disk flushes the last one, and the disk does not wait for the loop to notice that
//! a job is done. Outboxes are carried out in the order of their jobs.
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

mod commit;

use self::commit::{AfterInput, AtIterationEnd, CommitPipeline, Mode, PipelineError};
use super::Hooks;
use super::clientwire::{ClientFrame, KIND_DELIVERED};
use super::frame::{self, Frame, KIND_CLIENT_MIN, KIND_HELLO, KIND_PROTOCOL_MAX};
use super::handle::{
    self, Command, Commands, HandleError, MailTx, NodeStatus, PushError as MailPushError,
    ReadAnswer, StreamEvent, TicketEvent,
};
use super::history::{Gap, GapReason, History, Item, Journal};
use super::linkfault::{LinkFaults, QueueRoom, Verdict};
use super::loadgen::{LoadConfig, LoadGen};
use super::multicast::{self, Multicast, MulticastStats, Received};
use super::syncer::Syncer;
use super::transport::{self, Backoff, OutQueue, PushError, ReadOutcome, TransportConfig};
use abcast_core::codec::{Decoder, Encoder, WireMessage};
use abcast_core::protocol::{Ack, Install, ReadState};
use abcast_core::storage::StorageError;
use abcast_core::{
    Carrier, ConfigChange, DecodeError, Delivery, GroupId, Instance, Micros, NodeId, Outbox,
    ProposeError, Protocol, Skip, Subscription,
};
use bytes::{Bytes, BytesMut};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

const PEER_LISTENER: Token = Token(0);
const CLIENT_LISTENER: Token = Token(1);
/// The UDP multicast socket (`TransportConfig::multicast`).
const MULTICAST_SOCKET: Token = Token(2);
/// The sync thread finished a job.
const SYNC_DONE: Token = Token(3);
/// A handle sent commands (`handle.rs`).
const COMMANDS: Token = Token(4);
const FIRST_CONN_TOKEN: usize = 5;
/// Commands taken per wake-up before the loop serves its sockets again.
const COMMANDS_PER_ITERATION: usize = 256;
/// Most values awaited by handle tickets; more are answered `Busy`.
const MAX_TICKETS: usize = 1 << 16;
/// Most read barriers waiting for the protocol.
const MAX_READS: usize = 1024;
/// Most bytes of history one replaying subscriber takes per iteration.
const REPLAY_BYTES_PER_ITERATION: usize = 1 << 20;
/// Reads from one socket per readiness event before the loop serves the others; the socket
/// is revisited in the next iteration.
const READS_PER_EVENT: usize = 16;
/// Most open inbound connections (peers and clients); more are refused at accept.
const MAX_CONNS: usize = 1024;
/// Most proposals of the load generator per iteration, so sockets are served in between.
const LOAD_PER_ITERATION: usize = 4096;
/// Most of one client's values waiting to be decided; more are answered `Busy`.
const MAX_CLIENT_PENDING_VALUES: usize = 1 << 16;
/// Longest poll: the loop re-checks its stop condition at least this often.
const POLL_MAX: Duration = Duration::from_millis(50);
/// Largest body accepted as the first frame of a peer connection (a `Hello` is 20 bytes).
const MAX_HELLO_BODY_BYTES: usize = 256;
/// A connect attempt that has not completed after this long is abandoned and retried.
const CONNECT_TIMEOUT_US: Micros = 3_000_000;
/// Shortest interval between two "dropped frames" log lines about one peer.
const DROP_LOG_INTERVAL_US: Micros = 1_000_000;
/// Kernel events fetched per poll.
const EVENTS_CAPACITY: usize = 1024;

/// Everything the driver needs to know besides the protocol.
#[derive(Clone, Debug)]
pub struct DriverConfig {
    pub me: NodeId,
    /// Peers with a different cluster id are refused at `Hello`.
    pub cluster_id: u64,
    /// Sent in `Hello`; grows on every restart.
    pub incarnation: u64,
    /// Peer addresses (this node's own entry, if present, is ignored: sends to self are
    /// looped back in-process).
    pub peers: Vec<(NodeId, SocketAddr)>,
    pub transport: TransportConfig,
    /// How often `Application::periodic` runs; 0 = never.
    pub periodic_us: Micros,
    /// Recent deliveries kept in memory for subscriptions that start in the past, in
    /// payload bytes (without `history_dir`).
    pub history_bytes: usize,
    /// The delivery history on disk (`history.rs`, the journal): subscriptions resume from
    /// it across restarts. `None`: in memory only.
    pub history_dir: Option<PathBuf>,
    /// The journal's bound in bytes (oldest segments deleted first).
    pub history_file_bytes: u64,
    /// Gather the outboxes of one iteration under one storage sync (durable storage).
    pub group_commit: bool,
    /// With `group_commit`: run the fdatasync on a thread of its own while the loop goes
    /// on (pipelined group commit); off, the loop waits for each fdatasync.
    pub sync_thread: bool,
    /// Take a snapshot this often (0 = never) and write it to `snapshot_path`.
    pub snapshot_interval_us: Micros,
    pub snapshot_path: Option<PathBuf>,
}

impl DriverConfig {
    pub fn new(me: NodeId, cluster_id: u64, peers: Vec<(NodeId, SocketAddr)>) -> DriverConfig {
        DriverConfig {
            me,
            cluster_id,
            incarnation: 0,
            peers,
            transport: TransportConfig::default(),
            periodic_us: 0,
            history_bytes: 16 << 20,
            history_dir: None,
            history_file_bytes: 256 << 20,
            group_commit: false,
            sync_thread: true,
            snapshot_interval_us: 0,
            snapshot_path: None,
        }
    }
}

/// The bound listening sockets. Binding is the caller's job so tests can use port 0 and
/// learn the addresses before any driver starts.
#[derive(Debug)]
pub struct Listeners {
    pub peer: std::net::TcpListener,
    pub client: Option<std::net::TcpListener>,
}

/// A failure that stops the driver. Everything a peer or a client can cause is handled
/// inside the loop and never becomes one of these.
#[derive(Debug)]
pub enum DriverError {
    Io {
        what: &'static str,
        source: io::Error,
    },
    /// The store could not be synced: continuing could send messages that depend on state
    /// that is not durable.
    Storage(StorageError),
    /// The configuration cannot be run; `field` names the offending setting.
    Config { field: String, reason: String },
    /// The learner fell behind the acceptors' trim point and installed a peer's snapshot,
    /// which the application could not take: its state no longer matches the sequence.
    Install(String),
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Io { what, source } => write!(f, "{what}: {source}"),
            DriverError::Storage(e) => write!(f, "{e}"),
            DriverError::Config { field, reason } => write!(f, "{field}: {reason}"),
            DriverError::Install(e) => write!(f, "installing a peer's snapshot: {e}"),
        }
    }
}

impl std::error::Error for DriverError {}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> DriverError {
    move |source| DriverError::Io { what, source }
}

/// The group commit cannot go on: the node stops rather than send what is not durable.
fn pipeline_failed(e: PipelineError) -> DriverError {
    DriverError::Storage(StorageError(format!("group commit: {e}")))
}

/// Counters of the transport, for tests and logs.
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
    /// Outbound connections established.
    pub connects: u64,
    /// Outbound connections lost after being established.
    pub disconnects: u64,
    /// Inbound peer connections accepted after a valid `Hello`.
    pub hellos_accepted: u64,
    /// Frames never written because the peer they were queued for restarted before they
    /// left (its `Hello` announced a newer incarnation; see the module comment,
    /// "Connections"). Not counted in `frames_dropped`.
    pub stale_frames_dropped: u64,
    /// Protocol multicasts carried as one TCP copy per peer: all of them without
    /// `TransportConfig::multicast`, else those too large for one datagram.
    pub multicasts_by_tcp: u64,
    /// Protocol multicasts that did not fit one datagram and fell back to TCP.
    pub multicasts_too_large: u64,
    /// The UDP multicast socket's counters (all zero without one).
    pub multicast: MulticastStats,
    /// Storage syncs (group commits) done before sends.
    pub storage_syncs: u64,
    /// Snapshots written.
    pub snapshots: u64,
    /// Snapshots fetched from a peer and installed.
    pub snapshots_installed: u64,
}

/// Writes a snapshot file so that a crash leaves the old one or the new one, whole: a
/// temporary file, fdatasync, rename over, fsync the directory.
pub fn write_snapshot(path: &std::path::Path, snap: &abcast_core::Snapshot) -> io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&snap.encode())?;
        f.sync_data()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Reads the snapshot file, if there is one; a damaged file is an error naming it.
pub fn read_snapshot(path: &std::path::Path) -> Result<Option<abcast_core::Snapshot>, String> {
    match std::fs::read(path) {
        Ok(bytes) => abcast_core::Snapshot::decode(&bytes)
            .map(Some)
            .map_err(|e| format!("snapshot {}: {e}", path.display())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("snapshot {}: {e}", path.display())),
    }
}

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
    /// Queues one frame, tagging an empty queue with the peer's life as known now.
    fn push_frame(&mut self, kind: u8, group: u16, chunks: &[Bytes]) -> Result<(), PushError> {
        self.lives.on_enqueue(self.queue.is_empty());
        self.queue.push_frame(kind, group, chunks)
    }
}

#[derive(Debug)]
enum Role {
    /// A peer's connection to us; `None` until its `Hello`.
    PeerIn {
        peer: Option<NodeId>,
    },
    Client(ClientState),
}

/// Where a subscriber is in the delivery sequence.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    /// The next instance it needs.
    next: Instance,
    /// Caught up: deliveries go to it as they happen. Otherwise the loop replays the
    /// history to it as its queue has room (`pump_subscribers`).
    live: bool,
}

#[derive(Debug, Default)]
struct ClientState {
    /// The client's subscription, if it asked for one.
    sub: Option<Cursor>,
    /// Sequence numbers of this client's values (this node's own ids) not yet decided.
    pending: BTreeSet<u64>,
}

#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    addr: SocketAddr,
    rbuf: BytesMut,
    out: OutQueue,
    role: Role,
    dirty: bool,
}

/// The event loop of one node, generic over the protocol it drives.
pub struct Driver<P: Protocol> {
    cfg: DriverConfig,
    protocol: P,
    poll: Poll,
    start: Instant,
    peer_listener: TcpListener,
    client_listener: Option<TcpListener>,
    peers: Vec<Peer>,
    peer_index: HashMap<NodeId, usize>,
    /// Outbound connection tokens -> peer index.
    out_tokens: HashMap<Token, usize>,
    /// Inbound peer connections and client connections.
    conns: HashMap<Token, Conn>,
    next_token: usize,
    outbox: Outbox<P::Message>,
    loopback: VecDeque<P::Message>,
    /// Sockets that still had data when their read budget ran out.
    ready_again: Vec<Token>,
    dirty_peers: Vec<usize>,
    dirty_conns: Vec<Token>,
    frames: Vec<Frame>,
    load: Option<LoadGen>,
    history: History,
    /// Handle subscriptions (`handle.rs`).
    streams: Vec<(Cursor, MailTx<StreamEvent>)>,
    /// Values proposed through a handle, by seq, awaiting their outcome.
    tickets: BTreeMap<u64, MailTx<TicketEvent>>,
    /// Read barriers asked of the protocol: the instance to reach once it answered.
    reads: HashMap<u64, (Option<Instance>, MailTx<ReadAnswer>)>,
    next_read_id: u64,
    commands: Option<Receiver<Command>>,
    /// Every instance up to here was delivered or passed over (single group).
    delivered_upto: Instance,
    /// Some replay stopped at its per-iteration budget with room left: poll again at once.
    replay_more: bool,
    items: Vec<Item>,
    stats: TransportStats,
    last_tick_us: Micros,
    next_periodic_us: Micros,
    next_snapshot_us: Micros,
    unknown_logged: HashSet<NodeId>,
    conn_limit_logged: bool,
    /// Injected delay and loss on outgoing links; `None` unless configured.
    faults: Option<LinkFaults>,
    /// The UDP multicast endpoint; `None` = multicasts go as TCP copies to every peer.
    mcast: Option<Multicast>,
    /// The sync thread (pipelined group commit).
    syncer: Option<Syncer>,
    /// The group commit's ordering rules, and the outboxes waiting for their sync jobs,
    /// oldest first (one per job in the syncer).
    pipeline: CommitPipeline<Outbox<P::Message>>,
}

impl<P: Protocol> Driver<P> {
    /// Registers the listeners; connects to nothing until the protocol sends.
    pub fn new(
        cfg: DriverConfig,
        protocol: P,
        listeners: Listeners,
    ) -> Result<Driver<P>, DriverError> {
        let poll = Poll::new().map_err(io_err("creating the poller"))?;
        listeners
            .peer
            .set_nonblocking(true)
            .map_err(io_err("peer listener"))?;
        let mut peer_listener = TcpListener::from_std(listeners.peer);
        poll.registry()
            .register(&mut peer_listener, PEER_LISTENER, Interest::READABLE)
            .map_err(io_err("registering the peer listener"))?;
        let client_listener = match listeners.client {
            Some(l) => {
                l.set_nonblocking(true).map_err(io_err("client listener"))?;
                let mut l = TcpListener::from_std(l);
                poll.registry()
                    .register(&mut l, CLIENT_LISTENER, Interest::READABLE)
                    .map_err(io_err("registering the client listener"))?;
                Some(l)
            }
            None => None,
        };
        let mut peers = Vec::new();
        let mut peer_index = HashMap::new();
        for &(id, addr) in &cfg.peers {
            if id == cfg.me || peer_index.contains_key(&id) {
                continue;
            }
            peer_index.insert(id, peers.len());
            peers.push(Peer {
                id,
                addr,
                link: Link::Idle,
                queue: OutQueue::new(cfg.transport.send_queue_bytes),
                lives: PeerLives::default(),
                backoff: Backoff::new(cfg.transport.backoff_ms_min, cfg.transport.backoff_ms_max),
                down_logged: false,
                dropped_unlogged: 0,
                last_drop_log_us: 0,
                dirty: false,
            });
        }
        let members: Vec<NodeId> = std::iter::once(cfg.me)
            .chain(cfg.peers.iter().map(|&(id, _)| id))
            .collect();
        let peer_ids: Vec<NodeId> = peers.iter().map(|p| p.id).collect();
        let faults = LinkFaults::new(
            cfg.me,
            cfg.cluster_id,
            &cfg.transport.link_faults,
            &members,
            &peer_ids,
        )
        .map_err(|e| DriverError::Config {
            field: format!("transport.{}", e.field),
            reason: e.reason,
        })?;
        let mcast = match &cfg.transport.multicast {
            None => None,
            Some(mc) => {
                mc.validate()
                    .map_err(|(field, reason)| DriverError::Config {
                        field: format!("transport.multicast.{field}"),
                        reason,
                    })?;
                let me = multicast::Sender {
                    cluster_id: cfg.cluster_id,
                    node: cfg.me,
                    incarnation: cfg.incarnation,
                };
                let mut m = Multicast::open(mc, me, &peer_ids, &cfg.transport.link_faults)
                    .map_err(|source| DriverError::Io {
                        what: "opening the multicast socket",
                        source,
                    })?;
                poll.registry()
                    .register(
                        m.socket_mut(),
                        MULTICAST_SOCKET,
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .map_err(io_err("registering the multicast socket"))?;
                Some(m)
            }
        };
        let syncer = if cfg.group_commit && cfg.sync_thread {
            let waker = mio::Waker::new(poll.registry(), SYNC_DONE)
                .map_err(io_err("creating the sync thread's waker"))?;
            Some(Syncer::start(waker).map_err(io_err("starting the sync thread"))?)
        } else {
            None
        };
        let last_tick_us = 0;
        let journal = match &cfg.history_dir {
            Some(dir) => Some(
                Journal::open(dir, cfg.history_file_bytes).map_err(|source| DriverError::Io {
                    what: "opening the delivery history journal",
                    source,
                })?,
            ),
            None => None,
        };
        let mut history = History::new(cfg.history_bytes, journal);
        history.snapshot.path = cfg.snapshot_path.clone();
        if let Some(path) = &cfg.snapshot_path
            && let Ok(Some(snap)) = read_snapshot(path)
        {
            history.snapshot.upto = snap.upto;
        }
        Ok(Driver {
            syncer,
            pipeline: CommitPipeline::new(Mode::new(cfg.group_commit, cfg.sync_thread)),
            next_periodic_us: cfg.periodic_us,
            next_snapshot_us: cfg.snapshot_interval_us,
            cfg,
            protocol,
            poll,
            start: Instant::now(),
            peer_listener,
            client_listener,
            peers,
            peer_index,
            out_tokens: HashMap::new(),
            conns: HashMap::new(),
            next_token: FIRST_CONN_TOKEN,
            outbox: Outbox::new(),
            loopback: VecDeque::new(),
            ready_again: Vec::new(),
            dirty_peers: Vec::new(),
            dirty_conns: Vec::new(),
            frames: Vec::new(),
            load: None,
            history,
            streams: Vec::new(),
            tickets: BTreeMap::new(),
            reads: HashMap::new(),
            next_read_id: 1,
            commands: None,
            delivered_upto: 0,
            replay_more: false,
            items: Vec::new(),
            stats: TransportStats::default(),
            last_tick_us,
            unknown_logged: HashSet::new(),
            conn_limit_logged: false,
            faults,
            mcast,
        })
    }

    /// The command channel of a handle (`handle.rs`): a bounded queue the loop drains when
    /// its waker fires. One per driver; a second call replaces the first.
    pub fn command_channel(&mut self) -> Result<Commands, DriverError> {
        let waker = mio::Waker::new(self.poll.registry(), COMMANDS)
            .map_err(io_err("creating the command waker"))?;
        let (tx, rx) = handle::command_channel(Arc::new(waker));
        self.commands = Some(rx);
        Ok(tx)
    }

    /// Starts (or replaces) the built-in load generator.
    pub fn start_load(&mut self, cfg: LoadConfig) {
        self.load = Some(LoadGen::new(cfg, self.now()));
    }

    /// Stops the load generator; values in flight are still delivered.
    pub fn stop_load(&mut self) {
        self.load = None;
    }

    /// Microseconds since the driver was created (monotonic).
    pub fn now(&self) -> Micros {
        self.start.elapsed().as_micros() as Micros
    }

    pub fn protocol(&self) -> &P {
        &self.protocol
    }

    pub fn protocol_mut(&mut self) -> &mut P {
        &mut self.protocol
    }

    pub fn transport_stats(&self) -> TransportStats {
        let mut s = self.stats;
        if let Some(m) = &self.mcast {
            s.multicast = m.stats;
        }
        s
    }

    /// The receive and send buffer sizes the kernel granted the multicast socket.
    pub fn multicast_buffers(&self) -> Option<(usize, usize)> {
        self.mcast
            .as_ref()
            .map(|m| (m.granted_recv_buffer_bytes, m.granted_send_buffer_bytes))
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.peer_listener.local_addr()
    }

    pub fn client_addr(&self) -> Option<SocketAddr> {
        self.client_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    fn log(&self, msg: fmt::Arguments<'_>) {
        let t = self.start.elapsed().as_secs_f64();
        eprintln!("[{} {t:.3}s] {msg}", self.cfg.me);
    }

    fn new_token(&mut self) -> Token {
        let t = Token(self.next_token);
        self.next_token = self.next_token.wrapping_add(1).max(FIRST_CONN_TOKEN);
        t
    }

    /// Runs the loop until `until(now)` returns true. Can be called again to continue (the
    /// node runs, stops its load, then runs again to drain).
    pub fn run<A: Hooks + ?Sized>(
        &mut self,
        app: &mut A,
        mut until: impl FnMut(Micros) -> bool,
    ) -> Result<(), DriverError> {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        loop {
            let now = self.now();
            if until(now) {
                self.wait_in_flight(now, app)?;
                self.carry_out_now(now, app)?;
                self.flush_all(now);
                return Ok(());
            }
            let timeout = self.poll_timeout(now);
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(DriverError::Io {
                        what: "polling",
                        source: e,
                    });
                }
            }
            let now = self.now();
            if let Some(m) = self.mcast.as_mut() {
                // A send that would block waits for a writable event, and at most until
                // the next iteration.
                m.on_writable();
            }
            for ev in events.iter() {
                let token = ev.token();
                let problem = ev.is_error() || ev.is_read_closed() || ev.is_write_closed();
                self.on_event(
                    now,
                    app,
                    token,
                    ev.is_readable() || problem,
                    ev.is_writable() || problem,
                )?;
                self.flush_all(now);
            }
            for token in std::mem::take(&mut self.ready_again) {
                self.on_event(now, app, token, true, false)?;
            }
            self.run_loopback(now, app)?;
            self.run_load(now, app)?;
            self.protocol.tick(now, &mut self.outbox);
            self.last_tick_us = now;
            // The iteration's group commit, if one is gathering.
            self.commit(now, app)?;
            self.maybe_snapshot(now, app)?;
            self.fire_timers(now, app);
            self.pump_subscribers();
            self.flush_all(now);
        }
    }

    fn poll_timeout(&self, now: Micros) -> Duration {
        if !self.loopback.is_empty() || !self.ready_again.is_empty() || self.replay_more {
            return Duration::ZERO;
        }
        let mut deadline = self
            .last_tick_us
            .saturating_add(self.protocol.tick_interval_us().max(1));
        if let Some(load) = &self.load {
            if load.wants_one() && self.protocol.can_propose() {
                return Duration::ZERO;
            }
            if let Some(w) = load.wait_us() {
                deadline = deadline.min(now.saturating_add(w));
            }
        }
        if self.cfg.periodic_us > 0 {
            deadline = deadline.min(self.next_periodic_us);
        }
        for p in &self.peers {
            if let Link::Backoff { until } = p.link {
                deadline = deadline.min(until);
            }
        }
        if let Some(due) = self.faults.as_ref().and_then(LinkFaults::next_due_us) {
            deadline = deadline.min(due);
        }
        Duration::from_micros(deadline.saturating_sub(now)).min(POLL_MAX)
    }

    /// Takes and writes a snapshot when one is due. Runs with the outbox carried out, so
    /// the application's state matches what the protocol delivered.
    fn maybe_snapshot<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        let every = self.cfg.snapshot_interval_us;
        if every == 0
            || now < self.next_snapshot_us
            || !self.outbox.is_empty()
            || self.pipeline.in_flight() > 0
        {
            return Ok(());
        }
        self.next_snapshot_us = now.saturating_add(every);
        let Some(path) = self.cfg.snapshot_path.clone() else {
            return Ok(());
        };
        let Some(state) = app.snapshot() else {
            return Ok(());
        };
        let snap = match self.protocol.take_snapshot(state) {
            Ok(s) => s,
            Err(e) => {
                self.log(format_args!("snapshots off: {e}"));
                self.cfg.snapshot_interval_us = 0;
                return Ok(());
            }
        };
        // The history first: a snapshot never covers an instance the journal lost.
        if let Err(e) = self.history.sync() {
            self.history.disable_journal(&e);
        }
        write_snapshot(&path, &snap).map_err(|source| DriverError::Io {
            what: "writing a snapshot",
            source,
        })?;
        self.history.snapshot.upto = snap.upto;
        self.stats.snapshots += 1;
        Ok(())
    }

    /// The protocol installed a peer's snapshot and the application took its state: the
    /// snapshot becomes this node's own (a restart goes on from it).
    fn installed(&mut self, snap: &abcast_core::Snapshot) -> Result<(), DriverError> {
        if let Err(e) = self.history.sync() {
            self.history.disable_journal(&e);
        }
        if let Some(path) = self.cfg.snapshot_path.clone() {
            write_snapshot(&path, snap).map_err(|source| DriverError::Io {
                what: "writing an installed snapshot",
                source,
            })?;
        }
        self.stats.snapshots_installed += 1;
        self.history.snapshot.upto = self.history.snapshot.upto.max(snap.upto);
        let from = self.history.end();
        self.passed_over(
            from,
            snap.upto.saturating_add(1),
            GapReason::SnapshotInstalled,
        );
        Ok(())
    }

    fn fire_timers<A: Hooks + ?Sized>(&mut self, now: Micros, app: &mut A) {
        while let Some((idx, f)) = self.faults.as_mut().and_then(|lf| lf.pop_due(now)) {
            self.queue_frame(now, idx, f.kind, f.group, &f.chunks);
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
        if let Some(line) = self.mcast.as_mut().and_then(|m| m.take_log(now)) {
            self.log(format_args!("{line}"));
        }
        if self.cfg.periodic_us > 0 && now >= self.next_periodic_us {
            app.periodic(now, &self.protocol.status());
            self.next_periodic_us = self.next_periodic_us.saturating_add(self.cfg.periodic_us);
            if self.next_periodic_us <= now {
                self.next_periodic_us = now + self.cfg.periodic_us;
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
                let t = self.start.elapsed().as_secs_f64();
                eprintln!(
                    "[{} {t:.3}s] dropped {n} frames for {id}: its send queue was full",
                    self.cfg.me
                );
            }
        }
    }

    // ----- protocol effects -------------------------------------------------------------

    /// Carries out the outbox, unless it waits for the iteration's group commit.
    fn carry_out<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        let gathered = self.outbox.sends.len() + self.outbox.multicasts.len();
        match self.pipeline.after_input(self.outbox.needs_sync, gathered) {
            AfterInput::Gather => Ok(()),
            AfterInput::CarryOut => self.carry_out_now(now, app),
            AfterInput::DrainThenCarryOut => {
                // Too much gathered: finish the syncs in flight, then sync this group in
                // place.
                self.wait_in_flight(now, app)?;
                self.carry_out_now(now, app)
            }
        }
    }

    /// The end of an iteration: the gathered outbox is carried out, after its sync. With
    /// the sync thread, the writes go out now and the outbox waits in flight for the
    /// thread's fdatasync, behind the jobs already in flight (up to
    /// `SYNC_JOBS_IN_FLIGHT_MAX`); when they are that many, the next group keeps gathering.
    /// An outbox that needs no sync still goes after the ones in flight, as it came after
    /// them (`commit.rs` has the rules).
    fn commit<A: Hooks + ?Sized>(&mut self, now: Micros, app: &mut A) -> Result<(), DriverError> {
        let step = self
            .pipeline
            .at_iteration_end(self.outbox.is_empty(), self.outbox.needs_sync);
        match step {
            AtIterationEnd::Gather => Ok(()),
            AtIterationEnd::CarryOut => self.carry_out_now(now, app),
            AtIterationEnd::BeginJob => {
                if self.start_sync()? {
                    return Ok(());
                }
                // Durable already: it goes once those in flight are carried out.
                match self
                    .pipeline
                    .at_iteration_end(self.outbox.is_empty(), false)
                {
                    AtIterationEnd::CarryOut => self.carry_out_now(now, app),
                    AtIterationEnd::Gather | AtIterationEnd::BeginJob => Ok(()),
                }
            }
        }
    }

    /// Begins the gathered outbox's sync: its job goes to the sync thread and the outbox
    /// waits in flight (true), or the store was durable already (synced in place, or
    /// nothing to sync) and the outbox may be carried out once those in flight are
    /// (false).
    fn start_sync(&mut self) -> Result<bool, DriverError> {
        let Some(job) = self
            .protocol
            .begin_sync_storage()
            .map_err(DriverError::Storage)?
        else {
            self.outbox.needs_sync = false;
            return Ok(false);
        };
        if let Some(s) = self.syncer.as_mut() {
            s.submit(job).map_err(DriverError::Storage)?;
        }
        self.stats.storage_syncs += 1;
        let mut held = std::mem::take(&mut self.outbox);
        held.needs_sync = false;
        self.pipeline.job_started(held).map_err(pipeline_failed)?;
        Ok(true)
    }

    /// The oldest sync job ended with `result`: the protocol learns it, and the pipeline
    /// gives back the outbox the job held (an error if the job failed).
    fn end_job(
        &mut self,
        result: Result<(), StorageError>,
        gathered_needs_sync: bool,
    ) -> Result<commit::Ended<Outbox<P::Message>>, DriverError> {
        let ended = self.pipeline.job_ended(result.is_ok(), gathered_needs_sync);
        self.protocol
            .end_sync_storage(result)
            .map_err(DriverError::Storage)?;
        ended.map_err(pipeline_failed)
    }

    /// The sync thread's waker fired: carry out the outboxes its jobs made durable, oldest
    /// first, starting the next group's sync as soon as there is room.
    fn on_sync_done<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        while let Some(result) = self.syncer.as_mut().and_then(Syncer::try_done) {
            let ended = self.end_job(result, self.outbox.needs_sync)?;
            // The next group's sync starts before the last group is carried out (its sends,
            // deliveries and acks take the loop a while at full speed, and the disk would
            // wait for them): its messages leave after the last group's anyway.
            if ended.start_next_first {
                self.start_sync()?;
            }
            self.carry_out_held(now, app, ended.held)?;
        }
        self.commit(now, app)
    }

    /// Waits for every job in flight, and carries out their outboxes, oldest first.
    fn wait_in_flight<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        while let Some(s) = self.syncer.as_mut().filter(|s| s.in_flight() > 0) {
            let result = s.wait();
            let ended = self.end_job(result, false)?;
            self.carry_out_held(now, app, ended.held)?;
        }
        debug_assert_eq!(
            self.pipeline.in_flight(),
            0,
            "an outbox in flight without its job"
        );
        Ok(())
    }

    /// Carries out an outbox its sync job made durable. What gathered meanwhile stays in
    /// `self.outbox`, to go after it, as it came after it.
    fn carry_out_held<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        held: Outbox<P::Message>,
    ) -> Result<(), DriverError> {
        debug_assert!(!held.needs_sync, "an outbox in flight is synced by its job");
        let newer = std::mem::replace(&mut self.outbox, held);
        let r = self.carry_out_now(now, app);
        self.outbox = newer;
        r
    }

    /// Carries out the outbox in the contract's order: the sync, then the one carry-out
    /// (`abcast_core::carry`), which the simulator uses too.
    fn carry_out_now<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        if self.outbox.is_empty() {
            return Ok(());
        }
        let mut out = std::mem::take(&mut self.outbox);
        if out.needs_sync {
            // In place only with no job in flight: a job still queued would write its
            // bytes after these (and a direct write rewrites the block they share).
            debug_assert!(
                self.pipeline.may_sync_in_place(),
                "an in-place sync behind a job in flight"
            );
            self.protocol.sync_storage().map_err(DriverError::Storage)?;
            self.stats.storage_syncs += 1;
            out.needs_sync = false;
        }
        let r = abcast_core::carry_out(now, &mut out, &mut LoopCarrier { d: self, app, now });
        self.outbox = out;
        r
    }

    /// Queues `msg` as one datagram to the multicast group. `false` when there is no
    /// multicast socket or the message does not fit one datagram: the caller sends it by TCP.
    fn multicast_datagram(&mut self, msg: &P::Message) -> bool {
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

    /// Reads datagrams until none is left or the budget is used, handing each valid message
    /// to the protocol as it arrives.
    fn read_multicast<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        for _ in 0..multicast::READS_PER_EVENT {
            let Some(m) = self.mcast.as_mut() else {
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
                    self.log(format_args!("multicast receive failed: {e}"));
                    return Ok(());
                }
            }
        }
        self.ready_again.push(MULTICAST_SOCKET);
        Ok(())
    }

    fn send_to(&mut self, now: Micros, to: NodeId, msg: P::Message) {
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
    fn queue_frame(&mut self, now: Micros, idx: usize, kind: u8, group: u16, chunks: &[Bytes]) {
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

    fn mark_peer_dirty(&mut self, idx: usize) {
        if !self.peers[idx].dirty {
            self.peers[idx].dirty = true;
            self.dirty_peers.push(idx);
        }
    }

    fn run_loopback<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
    ) -> Result<(), DriverError> {
        // Only what is queued now: a protocol that answers itself cannot starve the sockets.
        let n = self.loopback.len();
        for _ in 0..n {
            let Some(msg) = self.loopback.pop_front() else {
                break;
            };
            let me = self.cfg.me;
            self.protocol.receive(now, me, msg, &mut self.outbox);
            self.carry_out(now, app)?;
        }
        Ok(())
    }

    fn run_load<A: Hooks + ?Sized>(&mut self, now: Micros, app: &mut A) -> Result<(), DriverError> {
        if let Some(load) = self.load.as_mut() {
            load.refill(now);
        }
        for _ in 0..LOAD_PER_ITERATION {
            let Some(load) = self.load.as_mut() else {
                break;
            };
            if !load.wants_one() || !self.protocol.can_propose() {
                break;
            }
            let payload = load.next_payload();
            match self.protocol.propose(now, payload, &mut self.outbox) {
                Ok(id) => {
                    load.on_proposed();
                    app.proposed(now, id, true);
                }
                Err(ProposeError::Busy) => {
                    app.busy(now);
                    return self.carry_out(now, app);
                }
                Err(e) => {
                    self.load = None;
                    self.log(format_args!("load generator stopped: {e}"));
                    return self.carry_out(now, app);
                }
            }
            self.carry_out(now, app)?;
        }
        Ok(())
    }

    // ----- client port -------------------------------------------------------------------

    /// A delivery was carried out: into the history, to live subscribers (client port and
    /// handles), to the tickets awaiting its values, to the read barriers awaiting it.
    fn on_delivered(&mut self, d: &Delivery, results: &[Bytes]) {
        match self.history.record_delivery(d) {
            Ok(gaps) => {
                for gap in &gaps {
                    self.gap_to_live(gap);
                }
            }
            Err(e) => self.history.disable_journal(&e),
        }
        if self.history.ordered() {
            self.delivered_upto = self.delivered_upto.max(d.instance);
        }
        self.deliver_to_clients(d);
        self.deliver_to_streams(d);
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
    fn passed_over(&mut self, from: Instance, to: Instance, reason: GapReason) {
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

    fn gap_to_live(&mut self, gap: &Gap) {
        let mut too_slow = Vec::new();
        for (&token, conn) in self.conns.iter_mut() {
            let Role::Client(ClientState { sub: Some(cur), .. }) = &mut conn.role else {
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

    fn close_too_slow(&mut self, tokens: Vec<Token>) {
        for token in tokens {
            let limit = self.cfg.transport.client_queue_bytes;
            self.close_conn(
                token,
                format_args!("learn client too slow ({limit} bytes queued)"),
            );
        }
    }

    fn deliver_to_clients(&mut self, d: &Delivery) {
        let ordered = self.history.ordered();
        let mut too_slow = Vec::new();
        for (&token, conn) in self.conns.iter_mut() {
            let Role::Client(ClientState { sub: Some(cur), .. }) = &mut conn.role else {
                continue;
            };
            if !cur.live || d.instance < cur.next {
                continue;
            }
            if ordered {
                cur.next = d.instance.saturating_add(1);
            }
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

    fn deliver_to_streams(&mut self, d: &Delivery) {
        if self.streams.is_empty() {
            return;
        }
        let ordered = self.history.ordered();
        self.streams.retain_mut(|(cur, tx)| {
            if !cur.live || d.instance < cur.next {
                return !tx.is_gone();
            }
            if ordered {
                cur.next = d.instance.saturating_add(1);
            }
            stream_push(tx, StreamEvent::Delivered(d.clone()))
        });
    }

    /// Replays the history to subscribers that are not caught up, as far as their queues
    /// have room (at most `REPLAY_BYTES_PER_ITERATION` each per iteration); one that
    /// reaches the end goes live.
    fn pump_subscribers(&mut self) {
        self.replay_more = false;
        let tokens: Vec<Token> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                matches!(&c.role, Role::Client(ClientState { sub: Some(cur), .. }) if !cur.live)
            })
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
                if self.history.ordered() {
                    cur.next = cur.next.max(end);
                }
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

    fn pump_client(&mut self, token: Token) {
        let limit = self.cfg.transport.client_queue_bytes;
        let Some(conn) = self.conns.get(&token) else {
            return;
        };
        let Role::Client(ClientState { sub: Some(cur), .. }) = &conn.role else {
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
        let ordered = self.history.ordered();
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
            if ordered {
                cur.next = cur.next.max(end);
            }
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
        if let Role::Client(st) = &mut conn.role {
            st.sub = Some(cur);
        }
        if !pushed_any && was_empty && !caught_up {
            // One item larger than the whole client queue: it can never be sent.
            self.close_conn(
                token,
                format_args!("a delivery larger than the client queue ({limit} bytes)"),
            );
        }
    }

    /// Completes the read barriers whose instance this node reached.
    fn answer_reads(&mut self) {
        if self.reads.is_empty() {
            return;
        }
        let upto = self.delivered_upto;
        self.reads.retain(|_, (target, tx)| match target {
            Some(t) if *t <= upto => {
                let _ = tx.push(ReadAnswer::Ready(*t));
                false
            }
            _ => !tx.is_gone(),
        });
    }

    // ----- handle commands ---------------------------------------------------------------

    fn on_commands<A: Hooks + ?Sized>(
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

    fn on_command<A: Hooks + ?Sized>(
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
                if self.reads.len() >= MAX_READS {
                    let _ = reply.push(ReadAnswer::Refused(HandleError::Busy));
                    return Ok(());
                }
                let id = self.next_read_id;
                self.next_read_id = self.next_read_id.wrapping_add(1);
                match self.protocol.read_index(now, id, &mut self.outbox) {
                    Ok(()) => {
                        self.reads.insert(id, (None, reply));
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
        }
    }

    /// The protocol confirmed read barrier `r`.
    fn on_read(&mut self, r: &ReadState) {
        if let Some(entry) = self.reads.get_mut(&r.id) {
            entry.0 = Some(r.upto);
        }
        self.answer_reads();
    }

    fn ack_tickets(&mut self, a: &Ack) {
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

    fn ack_to_clients(&mut self, a: &Ack) {
        if a.key.origin != self.cfg.me {
            return;
        }
        let me = self.cfg.me;
        let (from, to) = (
            a.key.first_seq,
            a.key.first_seq.saturating_add(u64::from(a.count)),
        );
        for (&token, conn) in self.conns.iter_mut() {
            let Role::Client(st) = &mut conn.role else {
                continue;
            };
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

    fn reply(&mut self, token: Token, f: &ClientFrame) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        if conn.out.push_frame(f.kind(), 0, &f.encode()).is_ok() && !conn.dirty {
            conn.dirty = true;
            self.dirty_conns.push(token);
        }
    }

    fn on_client_frame<A: Hooks + ?Sized>(
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
                        Some(Conn {
                            role: Role::Client(st),
                            ..
                        }) => st.pending.len(),
                        _ => return Ok(Ok(())),
                    };
                    if pending >= MAX_CLIENT_PENDING_VALUES {
                        refusal = Some(ClientFrame::Busy);
                        break;
                    }
                    match self.protocol.propose(now, p, &mut self.outbox) {
                        Ok(id) => {
                            if let Some(Conn {
                                role: Role::Client(st),
                                ..
                            }) = self.conns.get_mut(&token)
                            {
                                st.pending.insert(id.seq);
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
                let Some(Conn {
                    role: Role::Client(st),
                    ..
                }) = self.conns.get_mut(&token)
                else {
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
            other => {
                return Ok(Err(format!(
                    "unexpected client frame kind {}",
                    other.kind()
                )));
            }
        }
        Ok(Ok(()))
    }

    // ----- peer connections ---------------------------------------------------------------

    fn on_peer_frame<A: Hooks + ?Sized>(
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
    fn on_peer_hello(&mut self, node: NodeId, incarnation: u64) {
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

    fn on_event<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        token: Token,
        readable: bool,
        writable: bool,
    ) -> Result<(), DriverError> {
        match token {
            SYNC_DONE => self.on_sync_done(now, app)?,
            COMMANDS => self.on_commands(now, app)?,
            PEER_LISTENER => self.accept(now, false),
            CLIENT_LISTENER => self.accept(now, true),
            MULTICAST_SOCKET => {
                if writable && let Some(m) = self.mcast.as_mut() {
                    m.on_writable();
                    m.flush();
                }
                if readable {
                    self.read_multicast(now, app)?;
                }
            }
            t if self.out_tokens.contains_key(&t) => {
                if let Some(&idx) = self.out_tokens.get(&t) {
                    self.on_outbound_event(now, idx, readable, writable);
                }
            }
            t => {
                if writable {
                    self.flush_conn(t);
                }
                if readable {
                    self.read_conn(now, app, t)?;
                }
            }
        }
        Ok(())
    }

    fn accept(&mut self, _now: Micros, client: bool) {
        loop {
            let listener = if client {
                self.client_listener.as_ref()
            } else {
                Some(&self.peer_listener)
            };
            let Some(listener) = listener else { return };
            let (mut stream, addr) = match listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // E.g. EMFILE or a connection reset before accept: log, keep serving.
                    self.log(format_args!("accept failed: {e}"));
                    return;
                }
            };
            if self.conns.len() >= MAX_CONNS {
                if !self.conn_limit_logged {
                    self.conn_limit_logged = true;
                    self.log(format_args!(
                        "refusing connection from {addr}: {MAX_CONNS} connections open"
                    ));
                }
                continue;
            }
            if let Err(e) = transport::configure_stream(&stream, &self.cfg.transport) {
                self.log(format_args!("cannot set socket options for {addr}: {e}"));
            }
            let token = self.new_token();
            if let Err(e) = self.poll.registry().register(
                &mut stream,
                token,
                Interest::READABLE | Interest::WRITABLE,
            ) {
                self.log(format_args!("cannot register connection from {addr}: {e}"));
                continue;
            }
            let (role, limit) = if client {
                (
                    Role::Client(ClientState::default()),
                    self.cfg.transport.client_queue_bytes,
                )
            } else {
                (Role::PeerIn { peer: None }, 1 << 10)
            };
            self.conns.insert(
                token,
                Conn {
                    stream,
                    addr,
                    rbuf: BytesMut::new(),
                    out: OutQueue::new(limit),
                    role,
                    dirty: false,
                },
            );
        }
    }

    fn read_conn<A: Hooks + ?Sized>(
        &mut self,
        now: Micros,
        app: &mut A,
        token: Token,
    ) -> Result<(), DriverError> {
        let min_free = self.cfg.transport.read_buffer_bytes;
        for _ in 0..READS_PER_EVENT {
            let Some(conn) = self.conns.get_mut(&token) else {
                return Ok(());
            };
            let outcome = transport::read_into(&conn.stream, &mut conn.rbuf, min_free);
            let mut frames = std::mem::take(&mut self.frames);
            let mut bad: Option<String> = None;
            match outcome {
                Ok(ReadOutcome::Data(_)) => loop {
                    // Before its Hello a connection is nobody: it may not make this node
                    // buffer a large frame.
                    if frames.is_empty()
                        && matches!(conn.role, Role::PeerIn { peer: None })
                        && frame::peek_body_len(&conn.rbuf)
                            .is_some_and(|n| n > MAX_HELLO_BODY_BYTES)
                    {
                        bad = Some(format!(
                            "first frame longer than {MAX_HELLO_BODY_BYTES} bytes, expected Hello"
                        ));
                        break;
                    }
                    match frame::decode(&mut conn.rbuf) {
                        Ok(Some(f)) => frames.push(f),
                        Ok(None) => break,
                        Err(e) => {
                            bad = Some(e.to_string());
                            break;
                        }
                    }
                },
                Ok(ReadOutcome::WouldBlock) => {
                    self.frames = frames;
                    return Ok(());
                }
                Ok(ReadOutcome::Eof) => {
                    self.frames = frames;
                    let quiet = matches!(conn.role, Role::Client(_));
                    if quiet {
                        self.drop_conn(token);
                    } else {
                        self.close_conn(token, format_args!("closed by the peer"));
                    }
                    return Ok(());
                }
                Err(e) => {
                    self.frames = frames;
                    self.close_conn(token, format_args!("read failed: {e}"));
                    return Ok(());
                }
            }
            let is_client = matches!(conn.role, Role::Client(_));
            self.stats.frames_received += frames.len() as u64;
            let mut closed = false;
            for f in frames.drain(..) {
                let verdict = if is_client {
                    if f.kind < KIND_CLIENT_MIN {
                        Err(format!("peer frame kind {} on the client port", f.kind))
                    } else {
                        self.on_client_frame(now, app, token, f)?
                    }
                } else {
                    self.on_peer_frame(now, app, token, f)?
                };
                if let Err(reason) = verdict {
                    self.stats.bad_input_closes += 1;
                    self.close_conn(token, format_args!("{reason}"));
                    closed = true;
                    break;
                }
            }
            frames.clear();
            self.frames = frames;
            if closed {
                return Ok(());
            }
            if let Some(e) = bad {
                self.stats.bad_input_closes += 1;
                self.close_conn(token, format_args!("{e}"));
                return Ok(());
            }
        }
        // Budget used up with data possibly left: come back next iteration.
        self.ready_again.push(token);
        Ok(())
    }

    fn close_conn(&mut self, token: Token, reason: fmt::Arguments<'_>) {
        if let Some(conn) = self.conns.get(&token) {
            let who = match &conn.role {
                Role::PeerIn { peer: Some(p) } => format!("{p} at {}", conn.addr),
                Role::PeerIn { peer: None } => format!("unidentified peer at {}", conn.addr),
                Role::Client(_) => format!("client at {}", conn.addr),
            };
            self.log(format_args!("closing connection from {who}: {reason}"));
        }
        self.drop_conn(token);
    }

    fn drop_conn(&mut self, token: Token) {
        if let Some(mut conn) = self.conns.remove(&token) {
            // Deregistering can only fail if the socket is already gone from the poller.
            let _ = self.poll.registry().deregister(&mut conn.stream);
        }
    }

    fn flush_conn(&mut self, token: Token) {
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        conn.dirty = false;
        if let Err(e) = conn.out.flush(&mut conn.stream) {
            self.close_conn(token, format_args!("write failed: {e}"));
        }
    }

    // ----- outbound peer links ------------------------------------------------------------

    fn connect(&mut self, idx: usize, now: Micros) {
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

    fn on_outbound_event(&mut self, now: Micros, idx: usize, readable: bool, writable: bool) {
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

    fn link_up(&mut self, idx: usize, now: Micros) {
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
            self.log(format_args!(
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
            self.log(format_args!("lost connection to {id} at {addr}: {reason}"));
        }
        if up_since.is_some() {
            self.protocol.peer_unreachable(now, id, &mut self.outbox);
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
                let _ = self.poll.registry().deregister(&mut stream);
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

    fn flush_all(&mut self, now: Micros) {
        for idx in std::mem::take(&mut self.dirty_peers) {
            self.flush_peer(idx, now);
        }
        for token in std::mem::take(&mut self.dirty_conns) {
            self.flush_conn(token);
        }
        if let Some(m) = self.mcast.as_mut()
            && m.has_queued()
        {
            m.flush();
        }
    }
}

/// The runtime's side of the one carry-out (`abcast_core::carry`): frames to peers and the
/// multicast socket, deliveries and acknowledgements to clients, snapshots to disk.
struct LoopCarrier<'d, 'a, P: Protocol, A: ?Sized> {
    d: &'d mut Driver<P>,
    app: &'a mut A,
    now: Micros,
}

impl<P: Protocol, A: Hooks + ?Sized> Carrier<P::Message> for LoopCarrier<'_, '_, P, A> {
    type App = A;
    type Error = DriverError;

    fn app(&mut self) -> &mut A {
        self.app
    }

    fn send(&mut self, to: NodeId, msg: P::Message) {
        self.d.send_to(self.now, to, msg);
    }

    fn multicast(&mut self, msg: P::Message) {
        // A multicast reaches every member, this node included (as IP multicast with
        // loopback enabled would): one datagram for the others, or one TCP copy each, and
        // an in-process copy for this node, which is never lost.
        if !self.d.multicast_datagram(&msg) {
            self.d.stats.multicasts_by_tcp += 1;
            for idx in 0..self.d.peers.len() {
                let to = self.d.peers[idx].id;
                self.d.send_to(self.now, to, msg.clone());
            }
        }
        self.d.loopback.push_back(msg);
    }

    fn delivered(
        &mut self,
        _now: Micros,
        d: &Delivery,
        results: &[Bytes],
    ) -> Result<(), DriverError> {
        self.d.on_delivered(d, results);
        Ok(())
    }

    fn installed(&mut self, _now: Micros, install: &Install) -> Result<(), DriverError> {
        self.d.installed(&install.snapshot)
    }

    fn install_refused(&mut self, _now: Micros, _install: &Install, why: String) -> DriverError {
        DriverError::Install(why)
    }

    fn skipped(&mut self, _now: Micros, skip: &Skip) -> Result<(), DriverError> {
        if skip.group == GroupId(0) {
            self.d.passed_over(skip.from, skip.to, GapReason::Skipped);
        }
        Ok(())
    }

    fn read(&mut self, _now: Micros, r: &ReadState) -> Result<(), DriverError> {
        self.d.on_read(r);
        Ok(())
    }

    fn subscription(&mut self, _now: Micros, s: &Subscription) -> Result<(), DriverError> {
        self.d.log(format_args!(
            "{} group {} at delivery {} of this step",
            if s.subscribed {
                "follows"
            } else {
                "stops following"
            },
            s.group.0,
            s.position
        ));
        Ok(())
    }

    fn config_changed(&mut self, _now: Micros, c: &ConfigChange) -> Result<(), DriverError> {
        self.d.log(format_args!(
            "configuration {} ({:?}): {} members",
            c.config.id,
            c.kind,
            c.config.members.len()
        ));
        Ok(())
    }

    fn acked(&mut self, now: Micros, a: &Ack) -> Result<(), DriverError> {
        if a.key.origin == self.d.cfg.me
            && let Some(load) = &mut self.d.load
        {
            load.on_acked(a.count as usize);
        }
        self.app.ack(now, a);
        self.d.ack_to_clients(a);
        self.d.ack_tickets(a);
        Ok(())
    }

    fn event(&mut self, _now: Micros, event: &abcast_core::Event) {
        self.d.log(format_args!("{event}"));
    }
}

/// Pushes one event to a handle stream; false (drop the stream) when it is gone or full,
/// the latter ending it with `TooSlow`.
fn stream_push(tx: &MailTx<StreamEvent>, ev: StreamEvent) -> bool {
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
