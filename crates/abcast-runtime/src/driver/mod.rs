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
//! The rooms: `peers.rs` (the peer set, and routing messages onto the transports of
//! `crate::transport`, which own the sockets), `conns.rs` (client connections),
//! `clients.rs` (the client port,
//! subscriptions, tickets, read barriers, the handle's commands), `carrier.rs` (carrying
//! out an outbox: the group commit and `LoopCarrier`), `commit.rs` (the group commit's
//! ordering rules, pure), `snapshots.rs` (snapshot files), `lanes.rs` (which of the control
//! and data sockets is read first: seed 002 §III-D). This file holds the loop.

mod carrier;
mod clients;
mod commit;
mod conns;
mod groups;
mod lanes;
mod peers;
mod snapshots;

pub use self::snapshots::{read_snapshot, write_snapshot};
pub use crate::transport::TransportStats;
pub use crate::transport::tcp::Hello;

use self::clients::Cursor;
use self::commit::{CommitPipeline, Mode};
use self::conns::Conn;
use self::lanes::LanePriority;
use self::peers::PeerBook;
use super::Hooks;
use super::frame::Frame;
use super::handle::{self, Command, Commands, MailTx, ReadAnswer, StreamEvent, TicketEvent};
use super::history::{History, Item, Journal};
use super::linkfault::LinkFaults;
use super::loadgen::{LoadConfig, LoadGen};
use super::multicast::{self, Multicast};
use super::syncer::Syncer;
use super::transport::datagram::{Datagrams, Shape};
use super::transport::intake::ReadBudget;
use super::transport::tcp::TcpLinks;
use super::transport::{InFrame, LinkNotice, Logger, Readiness, TransportConfig, Unicast};
use abcast_core::storage::StorageError;
use abcast_core::{Instance, Micros, NodeId, Outbox, ProposeError, Protocol, Values};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

const CLIENT_LISTENER: Token = Token(1);
/// The UDP multicast socket (`TransportConfig::multicast`).
const MULTICAST_SOCKET: Token = Token(2);
/// The sync thread finished a job.
const SYNC_DONE: Token = Token(3);
/// A handle sent commands (`handle.rs`).
const COMMANDS: Token = Token(4);
/// The UDP unicast socket (`TransportConfig::unicast = Udp`).
const UNICAST_SOCKET: Token = Token(5);
/// The control lane's UDP socket (`TransportConfig::control_port_offset`).
const CONTROL_SOCKET: Token = Token(6);
/// The Unix domain client socket (`Driver::attach_client_socket`).
const CLIENT_SOCKET: Token = Token(7);
const FIRST_CONN_TOKEN: usize = 8;
/// Datagrams read from the two lanes' sockets per loop iteration, before timers and the
/// other sockets get their turn.
const LANE_READS_PER_ITERATION: usize = 256;
/// Commands taken per wake-up before the loop serves its sockets again.
const COMMANDS_PER_ITERATION: usize = 256;
/// Most values awaited by handle tickets; more are answered `Busy`.
const MAX_TICKETS: usize = 1 << 16;
/// Most read barriers waiting for the protocol.
const MAX_READS: usize = 1024;
/// Most bytes of history one replaying subscriber takes per iteration.
const REPLAY_BYTES_PER_ITERATION: usize = 1 << 20;
/// Reads from one client connection per readiness event before the loop serves the others;
/// the connection is revisited in the next iteration.
const READS_PER_EVENT: usize = 16;
/// Most open client connections; more are refused at accept.
const MAX_CONNS: usize = 1024;
/// Most proposals of the load generator per iteration, so sockets are served in between.
const LOAD_PER_ITERATION: usize = 4096;
/// Values the load generator offers in one `propose_many` call.
const LOAD_RUN_MAX: usize = 512;
/// Most of one client's values waiting to be decided; more are answered `Busy`.
const MAX_CLIENT_PENDING_VALUES: usize = 1 << 16;
/// Longest poll: the loop re-checks its stop condition at least this often.
const POLL_MAX: Duration = Duration::from_millis(50);
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
    /// Subscriptions count positions in the node's merged delivery order, not the
    /// protocol's instances (a Multi-Ring node, whose instances are per ring: `history.rs`,
    /// `merged`). Also turned on by the first delivery of a group other than 0.
    pub history_merged: bool,
    /// The book of the peers' lives this node took frames from (`crate::lives`), kept at
    /// this path; a node whose directory lost its incarnation marker asks for it. `None`:
    /// no book (a question is answered "no book").
    pub lives_path: Option<PathBuf>,
    /// Gather the outboxes of one iteration under one storage sync (durable storage).
    pub group_commit: bool,
    /// With `group_commit`: run the fdatasync on a thread of its own while the loop goes
    /// on (pipelined group commit); off, the loop waits for each fdatasync.
    pub sync_thread: bool,
    /// Take a snapshot this often (0 = never) and write it to `snapshot_path`.
    pub snapshot_interval_us: Micros,
    pub snapshot_path: Option<PathBuf>,
    /// The client ports of the other nodes, named in the client port's `NotLeader` and
    /// `StatusReport` answers so a client can go to the leader (empty: the answers name
    /// the leader's id only).
    pub client_addrs: Vec<(NodeId, SocketAddr)>,
    /// Run the process-group layer over the deliveries and serve the client port's group
    /// frames (`groups.rs`; the token ring).
    pub process_groups: bool,
    /// A client's group messages are packed into values of at most this many bytes
    /// (envelope included): the node sets it so a value fits one data message.
    pub group_value_bytes: usize,
    /// Receiver flow control for the token ring's process groups: while a group listener
    /// at this node is behind (`groups.rs`), the loop reads the token's socket only after
    /// this long (from the token's arrival), so the whole ring slows to what the members'
    /// receivers take. 0: off. Keep it well below the protocol's token retransmission
    /// time.
    pub token_defer_max_us: Micros,
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
            history_merged: false,
            lives_path: None,
            group_commit: false,
            sync_thread: true,
            snapshot_interval_us: 0,
            snapshot_path: None,
            client_addrs: Vec::new(),
            process_groups: false,
            group_value_bytes: 8 << 10,
            token_defer_max_us: 0,
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

/// Who waits for a read barrier: a handle's verb, or a client-port connection.
enum ReadReply {
    Handle(MailTx<ReadAnswer>),
    Client(Token),
}

/// The event loop of one node, generic over the protocol it drives.
pub struct Driver<P: Protocol> {
    cfg: DriverConfig,
    protocol: P,
    poll: Poll,
    start: Instant,
    client_listener: Option<TcpListener>,
    /// The Unix domain socket for clients on this host, if attached.
    client_socket: Option<mio::net::UnixListener>,
    /// The peer set (`peers.rs`).
    book: PeerBook,
    /// The TCP links to the peers (`transport/tcp.rs`).
    tcp: TcpLinks,
    /// Frames a transport read, before decoding (reused).
    inbox: Vec<InFrame>,
    /// Link changes the transports reported (reused).
    notices: Vec<LinkNotice>,
    /// Client connections.
    conns: HashMap<Token, Conn>,
    /// The client port's budget for large unfinished frames (`transport::intake`).
    client_budget: ReadBudget,
    next_token: usize,
    outbox: Outbox<P::Message>,
    loopback: VecDeque<P::Message>,
    /// Sockets that still had data when their read budget ran out.
    ready_again: Vec<Token>,
    dirty_conns: Vec<Token>,
    frames: Vec<Frame>,
    load: Option<LoadGen>,
    history: History,
    /// Handle subscriptions (`handle.rs`).
    streams: Vec<(Cursor, MailTx<StreamEvent>)>,
    /// Values proposed through a handle, by seq, awaiting their outcome.
    tickets: BTreeMap<u64, MailTx<TicketEvent>>,
    /// Read barriers asked of the protocol: the instance to reach once it answered, and
    /// who waits for it.
    reads: HashMap<u64, (Option<Instance>, ReadReply)>,
    /// Client-port read barriers ordered through the log (the protocol has no read index):
    /// the seq of the empty marker value proposed, and the connection waiting for it.
    marker_reads: HashMap<u64, Token>,
    next_read_id: u64,
    commands: Option<Receiver<Command>>,
    /// Every instance up to here was delivered or passed over (single group).
    delivered_upto: Instance,
    /// Some replay stopped at its per-iteration budget with room left: poll again at once.
    replay_more: bool,
    items: Vec<Item>,
    stats: TransportStats,
    last_tick_us: Micros,
    /// When the last poll returned events (busy-polling follows it).
    last_event_us: Micros,
    next_periodic_us: Micros,
    next_snapshot_us: Micros,
    /// The reason the protocol last refused a due snapshot (logged once per reason).
    snapshot_refused: Option<String>,
    unknown_logged: HashSet<NodeId>,
    conn_limit_logged: bool,
    /// Injected delay and loss on outgoing links; `None` unless configured.
    faults: Option<LinkFaults>,
    /// The UDP multicast endpoint; `None` = multicasts go as TCP copies to every peer.
    mcast: Option<Datagrams>,
    /// The UDP unicast endpoint; `None` = messages to a peer go by TCP.
    udp: Option<Datagrams>,
    /// The control lane's UDP endpoint (the token ring's token); `None` = one socket for
    /// every message.
    control: Option<Datagrams>,
    /// With `control`: which lane is read first (seed 002 §III-D, `lanes.rs`), and which of
    /// the datagram sockets may still hold datagrams (set by a readable event, cleared
    /// when a read finds nothing).
    lanes: LanePriority,
    lane_ready: LaneReady,
    /// `load_waits_for_view`: the load generator's floor on the view's size.
    load_view_min: usize,
    /// Since when the token waits on its socket for a group listener to catch up
    /// (`DriverConfig::token_defer_max_us`).
    token_deferred_since: Option<Micros>,
    /// The sync thread (pipelined group commit).
    syncer: Option<Syncer>,
    /// The group commit's ordering rules, and the outboxes waiting for their sync jobs,
    /// oldest first (one per job in the syncer).
    pipeline: CommitPipeline<Outbox<P::Message>>,
    /// The process groups (`DriverConfig::process_groups`).
    groups: Option<groups::Groups>,
}

impl<P: Protocol> Driver<P> {
    /// Registers the listeners; connects to nothing until the protocol sends.
    pub fn new(
        cfg: DriverConfig,
        protocol: P,
        listeners: Listeners,
    ) -> Result<Driver<P>, DriverError> {
        let poll = Poll::new().map_err(io_err("creating the poller"))?;
        let start = Instant::now();
        let log = Logger { me: cfg.me, start };
        let client_listener = register_client_listener(&poll, listeners.client)?;
        let registry = poll
            .registry()
            .try_clone()
            .map_err(io_err("cloning the poller's registry"))?;
        // One book of the peers' lives for every transport (`crate::lives`).
        let lives = match &cfg.lives_path {
            Some(path) => Some(
                crate::lives::LivesBook::open(path)
                    .map_err(|source| DriverError::Io {
                        what: "reading the book of peer lives",
                        source,
                    })?
                    .shared(),
            ),
            None => None,
        };
        let tcp = Driver::<P>::open_tcp(&cfg, log, registry, listeners.peer, lives.clone())?;
        let book = PeerBook::from_config(&cfg);
        let peer_ids: Vec<NodeId> = book.slots.iter().map(|p| p.id).collect();
        let faults = link_faults(&cfg, &peer_ids)?;
        let mcast =
            open_multicast(&cfg, &poll, log, &peer_ids)?.map(|d| d.with_lives(lives.clone()));
        let peer_addr = tcp
            .local_addr()
            .map_err(io_err("reading the peer listener's address"))?;
        let udp = open_unicast(&cfg, &poll, log, peer_addr, &book)?;
        let control =
            open_control(&cfg, &poll, log, peer_addr, &book)?.map(|d| d.with_lives(lives.clone()));
        let udp = match (udp, &control) {
            // With a control lane, the unicast socket carries the data lane only.
            (Some(u), Some(_)) => Some(u.for_lane(abcast_core::codec::Lane::Data)),
            (u, _) => u,
        }
        .map(|d| d.with_lives(lives));
        let syncer = start_syncer(&cfg, &poll)?;
        let history = open_history(&cfg)?;
        let last_tick_us = 0;
        Ok(Driver {
            client_budget: ReadBudget::new(cfg.transport.client_read_budget_bytes),
            groups: cfg.process_groups.then(|| groups::Groups::new(cfg.me)),
            syncer,
            pipeline: CommitPipeline::new(Mode::new(cfg.group_commit, cfg.sync_thread)),
            next_periodic_us: cfg.periodic_us,
            next_snapshot_us: cfg.snapshot_interval_us,
            snapshot_refused: None,
            cfg,
            protocol,
            poll,
            start,
            client_listener,
            client_socket: None,
            book,
            tcp,
            inbox: Vec::new(),
            notices: Vec::new(),
            conns: HashMap::new(),
            next_token: FIRST_CONN_TOKEN,
            outbox: Outbox::new(),
            loopback: VecDeque::new(),
            ready_again: Vec::new(),
            dirty_conns: Vec::new(),
            frames: Vec::new(),
            load: None,
            history,
            streams: Vec::new(),
            tickets: BTreeMap::new(),
            reads: HashMap::new(),
            marker_reads: HashMap::new(),
            next_read_id: 1,
            commands: None,
            delivered_upto: 0,
            replay_more: false,
            items: Vec::new(),
            stats: TransportStats::default(),
            last_tick_us,
            last_event_us: 0,
            unknown_logged: HashSet::new(),
            conn_limit_logged: false,
            faults,
            mcast,
            udp,
            control,
            lanes: LanePriority::new(),
            lane_ready: LaneReady::default(),
            load_view_min: 0,
            token_deferred_since: None,
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

    /// The load generator proposes only while the protocol's view (`Status::view`) has at
    /// least `members` members. The token ring forms its first ring of the members that
    /// answer in time and merges the others later; values delivered in a ring without
    /// some member are never delivered there (Extended Virtual Synchrony), so a benchmark
    /// waits for the whole ring before it loads it. 0 (the default) = no wait.
    pub fn load_waits_for_view(&mut self, members: usize) {
        self.load_view_min = members;
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

    /// The loop's counters and every transport's.
    pub fn transport_stats(&self) -> TransportStats {
        let mut s = self.stats;
        use crate::transport::Transport;
        self.tcp.add_stats(&mut s);
        for t in self
            .udp
            .iter()
            .chain(self.mcast.iter())
            .chain(self.control.iter())
        {
            t.add_stats(&mut s);
        }
        s
    }

    /// The address the control lane's socket is bound to, if there is one.
    pub fn control_addr(&self) -> Option<SocketAddr> {
        let offset = self.cfg.transport.control_port_offset?;
        self.control.as_ref()?;
        crate::transport::control_addr(self.peer_addr().ok()?, offset)
    }

    /// The receive and send buffer sizes the kernel granted the multicast socket.
    pub fn multicast_buffers(&self) -> Option<(usize, usize)> {
        self.mcast.as_ref().map(|m| {
            let e = m.endpoint();
            (e.granted_recv_buffer_bytes, e.granted_send_buffer_bytes)
        })
    }

    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.tcp.local_addr()
    }

    pub fn client_addr(&self) -> Option<SocketAddr> {
        self.client_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// Serves clients on this host through a Unix domain socket as well as the client
    /// port (the node's `client_path`): the same frames without TCP's cost. Binding is the
    /// caller's job, as for [`Listeners`].
    pub fn attach_client_socket(
        &mut self,
        listener: std::os::unix::net::UnixListener,
    ) -> Result<(), DriverError> {
        if self.client_socket.is_some() {
            return Err(DriverError::Config {
                field: "client_path".into(),
                reason: "a client socket is attached already".into(),
            });
        }
        listener
            .set_nonblocking(true)
            .map_err(io_err("client socket"))?;
        let mut l = mio::net::UnixListener::from_std(listener);
        self.poll
            .registry()
            .register(&mut l, CLIENT_SOCKET, Interest::READABLE)
            .map_err(io_err("registering the client socket"))?;
        self.client_socket = Some(l);
        Ok(())
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
            self.collect_woken();
            let timeout = self.poll_timeout(now);
            // The previous iteration's events were handled: without this, a loop that does
            // not spin below (`busy_poll_us = 0`) would skip the poll (it polls only into
            // an empty list) and handle the same events forever.
            events.clear();
            // Busy-poll for a while after the last event before sleeping in the kernel: the
            // answer to what this node just sent usually comes within a round trip, and a
            // sleeping process pays a wake-up per message (on this 2-core machine about 10
            // µs a hop; `docs/benchmarks/leader/README.md`). Spinning yields the core to
            // any other runnable process, and stops `busy_poll_us` after the last event, so
            // an idle node sleeps as before.
            let spin_until = self
                .last_event_us
                .saturating_add(self.cfg.transport.busy_poll_us);
            if !timeout.is_zero() && now < spin_until {
                self.spin_poll(&mut events, spin_until)?;
            }
            let polled = if events.is_empty() {
                self.poll.poll(&mut events, Some(timeout))
            } else {
                Ok(())
            };
            match polled {
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
            if !events.is_empty() {
                self.last_event_us = now;
            }
            for t in self.transports() {
                t.on_iteration();
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
            self.serve_lanes(now, app)?;
            self.take_link_notices(now);
            self.run_loopback(now, app)?;
            self.run_load(now, app)?;
            self.flush_group_queue(now, app)?;
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

    /// Polls without sleeping until an event comes or the clock reaches `until`, yielding
    /// the core between polls. Bounded by the clock.
    fn spin_poll(&mut self, events: &mut Events, until: Micros) -> Result<(), DriverError> {
        loop {
            match self.poll.poll(events, Some(Duration::ZERO)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(DriverError::Io {
                        what: "polling",
                        source: e,
                    });
                }
            }
            if !events.is_empty() || self.now() >= until {
                return Ok(());
            }
            std::thread::yield_now();
        }
    }

    fn poll_timeout(&self, now: Micros) -> Duration {
        if !self.loopback.is_empty()
            || !self.ready_again.is_empty()
            || self.replay_more
            || self.lane_ready.any()
        {
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
        use crate::transport::Transport;
        for t in std::iter::once(&self.tcp as &dyn Transport)
            .chain(self.udp.iter().map(|t| t as &dyn Transport))
            .chain(self.mcast.iter().map(|t| t as &dyn Transport))
            .chain(self.control.iter().map(|t| t as &dyn Transport))
        {
            if let Some(d) = t.next_deadline() {
                deadline = deadline.min(d);
            }
        }
        if let Some(due) = self.faults.as_ref().and_then(LinkFaults::next_due_us) {
            deadline = deadline.min(due);
        }
        Duration::from_micros(deadline.saturating_sub(now)).min(POLL_MAX)
    }

    /// Connections that waited for a read budget and may read now are served again this
    /// iteration (`transport::intake`).
    fn collect_woken(&mut self) {
        self.client_budget.take_woken(&mut self.ready_again);
        let mut woken = std::mem::take(&mut self.ready_again);
        for t in self.transports() {
            t.take_woken(&mut woken);
        }
        self.ready_again = woken;
    }

    /// Client connections whose large frame is overdue while others wait for the budget
    /// are cut (`transport::intake`, "No squatting").
    fn close_overdue_conns(&mut self, now: Micros) {
        for token in self.client_budget.overdue(now) {
            self.stats.read_overdue_closes += 1;
            self.close_conn(
                token,
                format_args!(
                    "a large frame was still incomplete when due, while other connections \
                     waited for the read budget"
                ),
            );
        }
    }

    fn fire_timers<A: Hooks + ?Sized>(&mut self, now: Micros, app: &mut A) {
        self.close_overdue_conns(now);
        while let Some((slot, f)) = self.faults.as_mut().and_then(|lf| lf.pop_due(now)) {
            self.release_held(now, slot, f.kind, f.group, &f.chunks);
        }
        for t in self.transports() {
            t.on_timers(now);
        }
        if self.cfg.periodic_us > 0 && now >= self.next_periodic_us {
            app.transport(now, &self.transport_stats());
            app.periodic(now, &self.protocol.status());
            self.next_periodic_us = self.next_periodic_us.saturating_add(self.cfg.periodic_us);
            if self.next_periodic_us <= now {
                self.next_periodic_us = now + self.cfg.periodic_us;
            }
        }
    }

    // ----- protocol effects -------------------------------------------------------------

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
            if load.cfg.leader_only || self.load_view_min > 0 {
                let status = self.protocol.status();
                load.paused = (load.cfg.leader_only && !status.leading)
                    || status.view.len() < self.load_view_min;
            }
        }
        let mut budget = LOAD_PER_ITERATION;
        // Bounded: each round proposes at least one value of the budget, or stops.
        for _ in 0..LOAD_PER_ITERATION {
            let Some(load) = self.load.as_mut() else {
                break;
            };
            let want = load.wants(budget.min(LOAD_RUN_MAX));
            if want == 0 || !self.protocol.can_propose() {
                break;
            }
            // One call per run of values (`Protocol::propose_many`), as a client frame of
            // many values would be: the per-call costs of the protocol's front (its
            // bookkeeping, outbox checks, flushes) and of this loop are paid per run.
            let run = load.next_run(want);
            let r = self
                .protocol
                .propose_many(now, Values::Uniform(&run), &mut self.outbox);
            // The generator reuses a chunk once nothing holds a slice of it.
            drop(run);
            match r {
                Ok((first, taken)) => {
                    load.on_proposed_many(taken);
                    app.proposed_run(now, first, taken, true);
                    if taken == 0 {
                        break;
                    }
                    budget = budget.saturating_sub(taken);
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
            CLIENT_LISTENER => self.accept(now),
            CLIENT_SOCKET => self.accept_unix(now),
            t @ (CONTROL_SOCKET | UNICAST_SOCKET | MULTICAST_SOCKET) if self.control.is_some() => {
                // Two lanes: reads wait for `serve_lanes`, which weighs them (§III-D).
                if readable {
                    self.lane_ready.set(t);
                }
                if writable {
                    let ready = Readiness {
                        readable: false,
                        writable: true,
                    };
                    self.on_transport_event(now, app, t, ready)?;
                }
            }
            t if self.conns.contains_key(&t) => {
                if writable {
                    self.flush_conn(t);
                }
                if readable {
                    self.read_conn(now, app, t)?;
                }
            }
            t => {
                let ready = Readiness { readable, writable };
                self.on_transport_event(now, app, t, ready)?;
                self.take_link_notices(now);
            }
        }
        Ok(())
    }

    fn flush_all(&mut self, now: Micros) {
        self.flush_transports(now);
        for token in std::mem::take(&mut self.dirty_conns) {
            self.flush_conn(token);
        }
    }
}

/// Registers the client listener, if there is one, with the poller.
fn register_client_listener(
    poll: &Poll,
    listener: Option<std::net::TcpListener>,
) -> Result<Option<TcpListener>, DriverError> {
    let Some(l) = listener else {
        return Ok(None);
    };
    l.set_nonblocking(true).map_err(io_err("client listener"))?;
    let mut l = TcpListener::from_std(l);
    poll.registry()
        .register(&mut l, CLIENT_LISTENER, Interest::READABLE)
        .map_err(io_err("registering the client listener"))?;
    Ok(Some(l))
}

/// The injected link faults of the configuration, checked against the members.
fn link_faults(cfg: &DriverConfig, peer_ids: &[NodeId]) -> Result<Option<LinkFaults>, DriverError> {
    let members: Vec<NodeId> = std::iter::once(cfg.me)
        .chain(cfg.peers.iter().map(|&(id, _)| id))
        .collect();
    LinkFaults::new(
        cfg.me,
        cfg.cluster_id,
        &cfg.transport.link_faults,
        &members,
        peer_ids,
    )
    .map_err(|e| DriverError::Config {
        field: format!("transport.{}", e.field),
        reason: e.reason,
    })
}

/// Opens and registers the multicast socket, if the configuration asks for one.
fn open_multicast(
    cfg: &DriverConfig,
    poll: &Poll,
    log: Logger,
    peer_ids: &[NodeId],
) -> Result<Option<Datagrams>, DriverError> {
    let Some(mc) = &cfg.transport.multicast else {
        return Ok(None);
    };
    mc.validate()
        .map_err(|(field, reason)| DriverError::Config {
            field: format!("transport.multicast.{field}"),
            reason,
        })?;
    let opened = Multicast::open(mc, sender(cfg), peer_ids, &cfg.transport.link_faults);
    register_datagrams(
        poll,
        opened,
        MULTICAST_SOCKET,
        (
            "opening the multicast socket",
            "registering the multicast socket",
        ),
    )
    .map(|m| Some(Datagrams::new(m, MULTICAST_SOCKET, Shape::Group, log, &[])))
}

/// This node as the sender of its datagrams.
fn sender(cfg: &DriverConfig) -> multicast::Sender {
    multicast::Sender {
        cluster_id: cfg.cluster_id,
        node: cfg.me,
        incarnation: cfg.incarnation,
    }
}

/// Registers an opened datagram socket under `token`; `what` = (opening it, registering
/// it), for the errors.
fn register_datagrams(
    poll: &Poll,
    opened: io::Result<Multicast>,
    token: Token,
    what: (&'static str, &'static str),
) -> Result<Multicast, DriverError> {
    let mut m = opened.map_err(io_err(what.0))?;
    poll.registry()
        .register(
            m.socket_mut(),
            token,
            Interest::READABLE | Interest::WRITABLE,
        )
        .map_err(io_err(what.1))?;
    Ok(m)
}

/// Opens and registers the unicast datagram socket on the peer listener's address, if the
/// configuration asks for UDP unicast.
fn open_unicast(
    cfg: &DriverConfig,
    poll: &Poll,
    log: Logger,
    bind: SocketAddr,
    book: &PeerBook,
) -> Result<Option<Datagrams>, DriverError> {
    if cfg.transport.unicast != Unicast::Udp {
        return Ok(None);
    }
    let peers = book.members();
    let peer_ids: Vec<NodeId> = peers.iter().map(|&(id, _)| id).collect();
    let buffers = (
        multicast::RECV_BUFFER_BYTES_DEFAULT,
        multicast::SEND_BUFFER_BYTES_DEFAULT,
    );
    let opened = Multicast::open_unicast(bind, buffers, sender(cfg), &peer_ids);
    register_datagrams(
        poll,
        opened,
        UNICAST_SOCKET,
        (
            "opening the UDP unicast socket",
            "registering the UDP unicast socket",
        ),
    )
    .map(|m| {
        Some(Datagrams::new(
            m,
            UNICAST_SOCKET,
            Shape::Unicast,
            log,
            &peers,
        ))
    })
}

/// Opens and registers the control lane's datagram socket on the peer listener's address
/// plus `control_port_offset`, if the configuration asks for one (with UDP unicast only).
fn open_control(
    cfg: &DriverConfig,
    poll: &Poll,
    log: Logger,
    peer_addr: SocketAddr,
    book: &PeerBook,
) -> Result<Option<Datagrams>, DriverError> {
    let Some(offset) = cfg.transport.control_port_offset else {
        return Ok(None);
    };
    let refuse = |reason: String| DriverError::Config {
        field: "transport.control_port_offset".into(),
        reason,
    };
    if cfg.transport.unicast != Unicast::Udp {
        return Err(refuse("a control lane needs unicast = \"udp\"".into()));
    }
    if offset == 0 {
        return Err(refuse(
            "0 would put the control lane on the data socket".into(),
        ));
    }
    let shifted = |addr: SocketAddr| {
        crate::transport::control_addr(addr, offset)
            .ok_or_else(|| refuse(format!("{addr} plus {offset} is past port 65535")))
    };
    let bind = shifted(peer_addr)?;
    let mut peers = Vec::new();
    for (id, addr) in book.members() {
        peers.push((id, shifted(addr)?));
    }
    let peer_ids: Vec<NodeId> = peers.iter().map(|&(id, _)| id).collect();
    // The token is small and one at a time: the default buffers hold many.
    let buffers = (
        multicast::RECV_BUFFER_BYTES_DEFAULT,
        multicast::SEND_BUFFER_BYTES_DEFAULT,
    );
    let opened = Multicast::open_unicast(bind, buffers, sender(cfg), &peer_ids);
    register_datagrams(
        poll,
        opened,
        CONTROL_SOCKET,
        (
            "opening the control lane's UDP socket",
            "registering the control lane's UDP socket",
        ),
    )
    .map(|m| {
        Some(
            Datagrams::new(m, CONTROL_SOCKET, Shape::Unicast, log, &peers)
                .for_lane(abcast_core::codec::Lane::Control),
        )
    })
}

/// The datagram sockets of the two lanes that may hold datagrams not read yet.
#[derive(Clone, Copy, Debug, Default)]
struct LaneReady {
    control: bool,
    unicast: bool,
    multicast: bool,
}

impl LaneReady {
    fn any(&self) -> bool {
        self.control || self.unicast || self.multicast
    }
    fn set(&mut self, token: Token) {
        self.put(token, true);
    }
    fn put(&mut self, token: Token, v: bool) {
        match token {
            CONTROL_SOCKET => self.control = v,
            UNICAST_SOCKET => self.unicast = v,
            MULTICAST_SOCKET => self.multicast = v,
            _ => {}
        }
    }
    /// The socket to read next when `first` has priority: a socket of that lane that may
    /// hold datagrams, else one of the other lane; with `defer_control`, never the control
    /// lane's.
    fn next(&self, first: abcast_core::codec::Lane, defer_control: bool) -> Option<Token> {
        let control = (self.control && !defer_control).then_some(CONTROL_SOCKET);
        let data =
            (self.unicast.then_some(UNICAST_SOCKET)).or(self.multicast.then_some(MULTICAST_SOCKET));
        match first {
            abcast_core::codec::Lane::Control => control.or(data),
            abcast_core::codec::Lane::Data => data.or(control),
        }
    }
}

/// Starts the sync thread of the pipelined group commit, if the configuration asks for it.
fn start_syncer(cfg: &DriverConfig, poll: &Poll) -> Result<Option<Syncer>, DriverError> {
    if !(cfg.group_commit && cfg.sync_thread) {
        return Ok(None);
    }
    let waker = mio::Waker::new(poll.registry(), SYNC_DONE)
        .map_err(io_err("creating the sync thread's waker"))?;
    Ok(Some(
        Syncer::start(waker).map_err(io_err("starting the sync thread"))?,
    ))
}

/// The delivery history, with its journal if configured, starting after the snapshot.
fn open_history(cfg: &DriverConfig) -> Result<History, DriverError> {
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
    if cfg.history_merged {
        history.set_merged();
    }
    history.snapshot.path = cfg.snapshot_path.clone();
    if let Some(path) = &cfg.snapshot_path
        && let Ok(Some(snap)) = read_snapshot(path)
    {
        history.snapshot.upto = snap.upto;
    }
    Ok(history)
}
