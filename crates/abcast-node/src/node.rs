//! The `abcast node` process: reads the cluster config, builds the protocol with an
//! in-memory acceptor store, runs the event loop, and prints the stats lines of
//! docs/CONTRACTS.md ("Node stats lines") on stdout. Logs go to stderr.
//!
//! Life of a node: start (incarnation marker bumped), run with the optional built-in load
//! generator until SIGTERM/SIGINT or `--duration-s`, stop the load, keep delivering for
//! `--drain-ms`, print the `"final"` line, exit 0.

use crate::leader::{self, LeaderProtocol};
use crate::nodeconfig::{
    self, MarkerError, MemberAddr, NodeConfig, NodeConfigError, ProtocolKind, StorageKind,
};
use abcast_core::MultiRingPaxos;
use abcast_core::config::{ConfigError, StartInfo};
use abcast_core::multiring::MultiRing;
use abcast_core::protocol::Ack;
use abcast_core::ringpaxos::RingPaxos;
use abcast_core::storage::{AcceptorStore, DurableOptions, DurableStore, MemoryStore, NoneStore};
use abcast_core::uring::URing;
use abcast_core::{Delivery, GroupId, Instance, Micros, NodeId, Protocol, Status, ValueId};
use abcast_runtime::disk::OsDir;
use abcast_runtime::transport::bind_listener;
use abcast_runtime::{
    Application, Driver, DriverConfig, DriverError, Hooks, Listeners, LoadConfig,
};
use base64::Engine;
use hdrhistogram::Histogram;
use hdrhistogram::serialization::{Serializer, V2Serializer};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Arguments of `abcast node`.
#[derive(clap::Args, Debug, Clone)]
pub struct NodeArgs {
    /// Cluster configuration file (TOML).
    #[arg(long)]
    pub config: PathBuf,
    /// This node's id (overrides `node_id` in the file).
    #[arg(long)]
    pub id: Option<u32>,
    /// Print a stats line every this many milliseconds (0 = only the final line).
    #[arg(long, default_value_t = 1000)]
    pub stats_ms: u64,
    /// Print stats as one JSON object per line (for `abcast demo` and `abcast bench`).
    #[arg(long)]
    pub json_stats: bool,
    /// Run the built-in load generator at this many values per second (0 = as fast as the
    /// window allows).
    #[arg(long)]
    pub load_rate: Option<u64>,
    /// Payload size of generated values, in bytes.
    #[arg(long, default_value_t = 1024)]
    pub load_value_size: usize,
    /// Most generated values in flight (default: the ring's `window_values`).
    #[arg(long)]
    pub load_window: Option<usize>,
    /// With --load-rate: propose only while this node leads (a leader-based protocol), as
    /// a client of the leader does; every node can run it, the leader's proposes.
    #[arg(long)]
    pub load_at_leader: bool,
    /// With --load-rate: stamp each value with its propose time (bytes 8..16, system
    /// clock), and measure the latency of every value delivered here from its stamp, not
    /// only of this node's own (`lat_all_*` in the stats). Every node of the cluster must
    /// run with it, on one host (one clock), with values of at least 16 bytes.
    #[arg(long)]
    pub load_stamp: bool,
    /// Stop after this many seconds (default: run until SIGTERM or SIGINT).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// After stopping the load, keep delivering this long before the final line.
    #[arg(long, default_value_t = 1000)]
    pub drain_ms: u64,
    /// Write one line per delivered instance (`instance origin first_seq count`) to
    /// `deliveries-<incarnation>.log` in the node's storage directory, so a harness can compare
    /// learners instance by instance (a restarted in-memory learner starts from the oldest
    /// instance still retained, so whole-sequence hashes cannot match).
    #[arg(long)]
    pub delivery_log: bool,
    /// This node never ran before: start it new (incarnation 0) on an empty directory
    /// without asking the other members first. Without it, a node whose directory has no
    /// incarnation marker waits until every other member said whether it knew an earlier
    /// life of it, and starts amnesic if one did (docs/design/amnesia-detection.md).
    #[arg(long)]
    pub first_start: bool,
}

impl NodeArgs {
    /// Arguments with defaults for `config` (for programs that start nodes themselves).
    pub fn new(config: PathBuf) -> NodeArgs {
        NodeArgs {
            config,
            id: None,
            stats_ms: 1000,
            json_stats: false,
            load_rate: None,
            load_value_size: 1024,
            load_window: None,
            load_at_leader: false,
            load_stamp: false,
            duration_s: None,
            drain_ms: 1000,
            delivery_log: false,
            first_start: false,
        }
    }
}

/// Why a node could not run.
#[derive(Debug)]
pub enum NodeError {
    Config(NodeConfigError),
    Marker(MarkerError),
    /// The protocol refused the configuration.
    Protocol(ConfigError),
    /// A command-line argument is out of its space.
    Args(String),
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: io::Error,
    },
    /// The member's `client_path` could not be bound.
    BindPath {
        path: PathBuf,
        reason: String,
    },
    Signal(io::Error),
    Driver(DriverError),
    Output(io::Error),
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::Config(e) => write!(f, "{e}"),
            NodeError::Marker(e) => write!(f, "{e}"),
            NodeError::Protocol(e) => write!(f, "{e}"),
            NodeError::Args(m) => write!(f, "{m}"),
            NodeError::Bind { what, addr, source } => {
                write!(f, "cannot listen for {what} on {addr}: {source}")
            }
            NodeError::BindPath { path, reason } => write!(
                f,
                "cannot listen for clients on the Unix socket {}: {reason}",
                path.display()
            ),
            NodeError::Signal(e) => write!(f, "cannot install signal handlers: {e}"),
            NodeError::Driver(e) => write!(f, "event loop failed: {e}"),
            NodeError::Output(e) => write!(f, "cannot write stats: {e}"),
        }
    }
}

impl std::error::Error for NodeError {}

impl From<DriverError> for NodeError {
    fn from(e: DriverError) -> Self {
        NodeError::Driver(e)
    }
}

/// Runs `abcast node` with the config's protocol (U-Ring Paxos by default, Multi-Ring Paxos
/// with `[[rings]]`, or IP-multicast Ring Paxos with `protocol = "ringpaxos"`) over
/// in-memory stores until SIGTERM/SIGINT or `--duration-s`, printing stats on stdout.
pub fn run_node(args: NodeArgs) -> Result<(), NodeError> {
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&STOP_LOAD))
        .map_err(NodeError::Signal)?;
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(NodeError::Signal)?;
    }
    let stdout = io::stdout();
    let mut out = stdout.lock();
    // Read once: it picks the protocol, and every protocol shares one start-up path.
    let mut cfg = nodeconfig::load(&args.config, args.id).map_err(NodeError::Config)?;
    // A broken variant for the chaos suite's "a broken build is caught" (issue 33): only a
    // build with the `mutations` feature accepts one.
    if let Some(name) = std::env::var_os(nodeconfig::MUTATION_ENV) {
        nodeconfig::select_mutation(&mut cfg, &name.to_string_lossy())
            .map_err(NodeError::Config)?;
        eprintln!(
            "[{}] running the BROKEN variant {} ({})",
            cfg.node_id,
            name.to_string_lossy(),
            nodeconfig::MUTATION_ENV
        );
    }
    if let Some(mr) = cfg.ringpaxos_rings() {
        eprintln!(
            "[{}] Multi-Ring Paxos over {} Ring Paxos rings; multicasts go as TCP copies",
            cfg.node_id,
            mr.rings.len()
        );
        run_node_on(&cfg, &args, &stop, &mut out, |cfg, start| {
            let capacities: Vec<_> = (mr.rings.iter())
                .map(|r| {
                    let c = &r.ring;
                    (r.group, c.store_capacity_instances, c.store_capacity_bytes)
                })
                .collect();
            let stores = ring_stores(cfg, &capacities)?;
            MultiRingPaxos::new(mr, cfg.node_id, start, stores)
        })?;
        return Ok(());
    }
    if cfg.protocol == ProtocolKind::RingPaxos {
        run_node_on(&cfg, &args, &stop, &mut out, ringpaxos_protocol)?;
        return Ok(());
    }
    if cfg.protocol == ProtocolKind::Token {
        run_node_on(&cfg, &args, &stop, &mut out, crate::token::token_protocol)?;
        return Ok(());
    }
    if let Some(lp) = cfg.leader.clone() {
        eprintln!("[{}] protocol {}", cfg.node_id, lp.name());
        if cfg.spares.contains(&cfg.node_id) {
            eprintln!(
                "[{}] a spare: outside the first configuration, it waits until a \
                 reconfiguration names it",
                cfg.node_id
            );
        }
        match lp {
            LeaderProtocol::SeqPaxos(c) => {
                run_node_on(&cfg, &args, &stop, &mut out, |cfg, start| {
                    leader::seqpaxos(cfg, &c, start)
                })?
            }
            LeaderProtocol::Raft(c) => run_node_on(&cfg, &args, &stop, &mut out, |cfg, start| {
                leader::raft(cfg, &c, start)
            })?,
            LeaderProtocol::OmniPaxos(c) => {
                run_node_on(&cfg, &args, &stop, &mut out, |cfg, start| {
                    leader::omnipaxos(cfg, &c, start)
                })?
            }
            LeaderProtocol::RaftRs(c) => {
                run_node_on(&cfg, &args, &stop, &mut out, |cfg, start| {
                    leader::raftrs(cfg, &c, start)
                })?
            }
        };
        return Ok(());
    }
    if let Some(mr) = cfg.multiring.clone() {
        run_node_on(&cfg, &args, &stop, &mut out, |cfg, start| {
            let capacities: Vec<_> = (mr.rings.iter())
                .map(|r| {
                    let c = &r.ring;
                    (r.group, c.store_capacity_instances, c.store_capacity_bytes)
                })
                .collect();
            let stores = ring_stores(cfg, &capacities)?;
            MultiRing::new(mr, cfg.node_id, start, stores)
        })?;
        return Ok(());
    }
    run_node_on(&cfg, &args, &stop, &mut out, |cfg, start| {
        let store = open_store(
            cfg,
            None,
            cfg.ring.store_capacity_instances,
            cfg.ring.store_capacity_bytes,
        )?;
        URing::new(cfg.ring.clone(), cfg.node_id, start, store)
    })?;
    Ok(())
}

/// Every ring's store, opened (and recovered) before the protocol is built, from
/// (ring, instances, bytes) per ring; returned as the Multi-Ring constructors' store
/// callback. A ring the config does not name (a Multi-Ring protocol asks only for those)
/// gets the safe default, an in-memory store.
fn ring_stores(
    cfg: &NodeConfig,
    capacities: &[(GroupId, usize, usize)],
) -> Result<impl FnMut(GroupId) -> Box<dyn AcceptorStore + Send> + use<>, ConfigError> {
    let mut stores = HashMap::new();
    for &(group, instances, bytes) in capacities {
        stores.insert(group, open_store(cfg, Some(group), instances, bytes)?);
    }
    let (instances, bytes) = (
        cfg.ring.store_capacity_instances,
        cfg.ring.store_capacity_bytes,
    );
    Ok(move |group| {
        stores
            .remove(&group)
            .unwrap_or_else(|| Box::new(MemoryStore::new(instances, bytes)))
    })
}

/// IP-multicast Ring Paxos (seed 003) as the config describes it, over an in-memory store.
pub fn ringpaxos_protocol(cfg: &NodeConfig, start: StartInfo) -> Result<RingPaxos, ConfigError> {
    let Some(rp) = cfg.ringpaxos.clone() else {
        return Err(ConfigError {
            field: "protocol",
            reason: "not \"ringpaxos\"".into(),
        });
    };
    match &cfg.transport.multicast {
        Some(m) => eprintln!(
            "[{}] Ring Paxos: phase 2A and decisions by UDP multicast to {} via {}",
            cfg.node_id, m.group, m.interface
        ),
        None => eprintln!(
            "[{}] Ring Paxos without [multicast]: phase 2A and decisions go as one TCP copy \
             per peer",
            cfg.node_id
        ),
    }
    let store = open_store(
        cfg,
        None,
        rp.store_capacity_instances,
        rp.store_capacity_bytes,
    )?;
    RingPaxos::new(rp, cfg.node_id, start, store)
}

/// Where a durable acceptor log lives: `<node dir>/log`, or `<node dir>/log/ring-<g>` for
/// one ring of a Multi-Ring node.
pub fn log_dir(cfg: &NodeConfig, ring: Option<GroupId>) -> PathBuf {
    let dir = cfg.storage.node_dir(cfg.node_id).join("log");
    match ring {
        Some(g) => dir.join(format!("ring-{}", g.0)),
        None => dir,
    }
}

/// Opens the acceptor store the config asks for (seed 000 §3.4). A durable log is recovered
/// here; what recovery found, a torn tail it cut included, goes to the log (stderr).
pub fn open_store(
    cfg: &NodeConfig,
    ring: Option<GroupId>,
    capacity_instances: usize,
    capacity_bytes: usize,
) -> Result<Box<dyn AcceptorStore + Send>, ConfigError> {
    let me = cfg.node_id;
    match cfg.storage.kind {
        StorageKind::None => {
            eprintln!(
                "[{me}] storage kind \"none\": acceptors keep only undecided votes and answer \
                 no retrieve; a learner that misses a decision skips it (benchmarks only)"
            );
            Ok(Box::new(NoneStore::new(capacity_instances)))
        }
        StorageKind::Memory => Ok(Box::new(MemoryStore::new(
            capacity_instances,
            capacity_bytes,
        ))),
        StorageKind::Durable { sync } => {
            let path = log_dir(cfg, ring);
            let dir = open_log_dir(cfg, &path, sync)?;
            let opts = DurableOptions {
                sync,
                segment_bytes: cfg.storage.segment_bytes,
                cache_instances: capacity_instances,
                cache_bytes: capacity_bytes,
            };
            let (store, rec) = DurableStore::open(dir, opts).map_err(|e| ConfigError {
                field: "storage.dir",
                reason: e.0,
            })?;
            report_torn_tail(me, "acceptor log", rec.torn_tail.as_ref());
            eprintln!("[{me}] acceptor log {}: {rec}", path.display());
            Ok(Box::new(store))
        }
    }
}

/// A durable log's directory, opened (with direct writes when the log is synced and the
/// config asks for them); shared by the acceptor stores and the leader-based log stores.
pub fn open_log_dir(cfg: &NodeConfig, path: &Path, sync: bool) -> Result<OsDir, ConfigError> {
    let dir = OsDir::open(path).map_err(|e| ConfigError {
        field: "storage.dir",
        reason: format!("cannot open {}: {e}", path.display()),
    })?;
    Ok(if sync && cfg.storage.direct_io {
        dir.with_direct_writes()
    } else {
        dir
    })
}

/// Says on stderr what recovery cut off a log's torn tail, if it did.
pub fn report_torn_tail(me: NodeId, what: &str, torn: Option<&abcast_core::storage::TornTail>) {
    if let Some(t) = torn {
        eprintln!(
            "[{me}] {what}: torn tail in {} at offset {} ({}): cut {} bytes, back to the last \
             whole record",
            t.file, t.offset, t.why, t.bytes_cut
        );
    }
}

/// What a node run ends with (the numbers of its final line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeReport {
    pub node: NodeId,
    pub incarnation: u64,
    pub delivered_values: u64,
    pub order_hash: u64,
    pub duplicate_deliveries: u64,
    pub proposed_values: u64,
    pub acked_values: u64,
}

/// The node process with any protocol: `make` builds it from the config and the start
/// info. Stops when `stop` is set or after `--duration-s`; stats lines go to `out`.
pub fn run_node_with<P, F>(
    args: &NodeArgs,
    stop: &AtomicBool,
    out: &mut dyn Write,
    make: F,
) -> Result<NodeReport, NodeError>
where
    P: Protocol,
    F: FnOnce(&NodeConfig, StartInfo) -> Result<P, ConfigError>,
{
    let cfg = nodeconfig::load(&args.config, args.id).map_err(NodeError::Config)?;
    run_node_on(&cfg, args, stop, out, make)
}

/// [`run_node_with`] on a config already read: check the flags, build the protocol on its
/// restored state, bind, start the event loop with the node's statistics as its
/// application, serve until told to stop, drain, print the final line.
pub fn run_node_on<P, F>(
    cfg: &NodeConfig,
    args: &NodeArgs,
    stop: &AtomicBool,
    out: &mut dyn Write,
    make: F,
) -> Result<NodeReport, NodeError>
where
    P: Protocol,
    F: FnOnce(&NodeConfig, StartInfo) -> Result<P, ConfigError>,
{
    let me = check_args(cfg, args)?;
    // Bound first: a node asking its peers which life of it they know answers theirs.
    let listeners = bind_listeners(cfg, &me)?;
    let start = start_info(cfg, args, &listeners.peer, stop)?;
    let mut protocol = make(cfg, start).map_err(NodeError::Protocol)?;
    let snapshot_path = cfg.storage.node_dir(cfg.node_id).join("snapshot");
    let restored = restore_snapshot(cfg, &mut protocol, &snapshot_path)?;
    let mut dcfg = driver_config(cfg, args, start, snapshot_path);
    dcfg.lives_path = Some(
        cfg.storage
            .node_dir(cfg.node_id)
            .join(abcast_runtime::lives::BOOK_FILE),
    );
    let mut driver = Driver::new(dcfg, protocol, listeners)?;
    // Removed again when the node stops (the guard's drop).
    let _client_socket = match &me.client_path {
        Some(path) => {
            let (socket, listener) = ClientSocket::bind(path)?;
            driver.attach_client_socket(listener)?;
            Some(socket)
        }
        None => None,
    };
    log_start(cfg, &me, start, &driver);
    let mut app = node_stats(cfg, args, start, restored.as_ref(), out)?;
    start_load(cfg, args, &mut driver);
    serve(args, stop, &mut driver, &mut app)?;
    finish(cfg, start, &driver, app)
}

/// What the node knows of itself at start: from its incarnation marker; without one (a
/// first start, or a directory wiped or replaced), from its peers, who tell it whether it
/// lived before (`abcast_runtime::lives`; docs/design/amnesia-detection.md). A node they
/// know starts amnesic at the next incarnation, never as a new member that votes with
/// empty state; one nobody knows is new. `--first-start` skips the question.
fn start_info(
    cfg: &NodeConfig,
    args: &NodeArgs,
    listener: &std::net::TcpListener,
    stop: &AtomicBool,
) -> Result<StartInfo, NodeError> {
    let dir = cfg.storage.node_dir(cfg.node_id);
    if args.first_start || nodeconfig::has_marker(&dir) {
        return nodeconfig::start_info(&dir).map_err(NodeError::Marker);
    }
    let me = cfg.node_id;
    let log = |line: &str| eprintln!("[{me}] {line}");
    let peers = cfg.peer_addrs();
    let asked = peers.iter().filter(|(n, _)| *n != me).count();
    if asked > 0 {
        log(&format!(
            "no incarnation marker in {}: asking the {asked} other members whether this \
             node lived before",
            dir.display()
        ));
    }
    let outcome = abcast_runtime::lives::probe(cfg.cluster_id, me, &peers, listener, stop, &log)
        .map_err(|e| {
            NodeError::Args(format!(
                "asking the peers which life of this node they know: {e}"
            ))
        })?;
    match outcome.known {
        None => nodeconfig::start_info(&dir).map_err(NodeError::Marker),
        Some(k) => {
            let start = nodeconfig::start_after_lost_marker(&dir, k).map_err(NodeError::Marker)?;
            log(&format!(
                "the members know this node up to incarnation {k} ({:?}), but its directory \
                 has no marker: it lost its state; starting amnesic as incarnation {}",
                outcome.answers, start.incarnation
            ));
            Ok(start)
        }
    }
}

/// The flags that depend on the config; returns this node's addresses.
fn check_args(cfg: &NodeConfig, args: &NodeArgs) -> Result<MemberAddr, NodeError> {
    if args.duration_s.is_some_and(|d| !d.is_finite() || d < 0.0) {
        return Err(NodeError::Args(
            "--duration-s must be a non-negative number of seconds".into(),
        ));
    }
    if args.load_rate.is_some() && args.load_value_size > cfg.max_value_bytes() {
        return Err(NodeError::Args(format!(
            "--load-value-size {} exceeds the ring's max_value_bytes {}",
            args.load_value_size,
            cfg.max_value_bytes()
        )));
    }
    cfg.me()
        .cloned()
        .ok_or_else(|| NodeError::Args(format!("node {} has no address", cfg.node_id.0)))
}

/// A learner restarts from its last snapshot (the protocol's part now, the application's
/// once it exists), instead of relearning from instance 1. A snapshot the protocol refuses
/// is logged and left out; one that cannot be read stops the node.
fn restore_snapshot<P: Protocol>(
    cfg: &NodeConfig,
    protocol: &mut P,
    snapshot_path: &Path,
) -> Result<Option<abcast_core::Snapshot>, NodeError> {
    let Some(snap) =
        abcast_runtime::driver::read_snapshot(snapshot_path).map_err(NodeError::Args)?
    else {
        return Ok(None);
    };
    match protocol.restore_snapshot(&snap) {
        Ok(()) => {
            eprintln!(
                "[{}] restored snapshot at instance {} ({} bytes of application state)",
                cfg.node_id,
                snap.upto,
                snap.app.len()
            );
            Ok(Some(snap))
        }
        Err(e) => {
            eprintln!("[{}] snapshot not restored: {e}", cfg.node_id);
            Ok(None)
        }
    }
}

/// The member's Unix client socket (`client_path`): bound at start, its file removed when
/// the node stops.
struct ClientSocket {
    path: PathBuf,
}

impl ClientSocket {
    /// Binds `path`. A socket file left by a node that is gone (nobody answers on it) is
    /// replaced; one a running process answers on, or a file of another kind, is an error.
    fn bind(path: &Path) -> Result<(ClientSocket, std::os::unix::net::UnixListener), NodeError> {
        use std::os::unix::fs::FileTypeExt;
        use std::os::unix::net::{UnixListener, UnixStream};
        let fail = |reason: String| NodeError::BindPath {
            path: path.to_path_buf(),
            reason,
        };
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(fail("the path exists and is not a socket".into()));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(fail("a running process listens on it".into()));
            }
            std::fs::remove_file(path)
                .map_err(|e| fail(format!("cannot remove the stale socket: {e}")))?;
        }
        let listener = UnixListener::bind(path).map_err(|e| fail(e.to_string()))?;
        let guard = ClientSocket {
            path: path.to_path_buf(),
        };
        Ok((guard, listener))
    }
}

impl Drop for ClientSocket {
    fn drop(&mut self) {
        // Best effort: a node that cannot remove it leaves a stale socket, which the next
        // start replaces.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The peer port and, if the config gives one, the client port.
fn bind_listeners(cfg: &NodeConfig, me: &MemberAddr) -> Result<Listeners, NodeError> {
    let peer = bind_listener(me.addr, &cfg.transport).map_err(|source| NodeError::Bind {
        what: "peers",
        addr: me.addr,
        source,
    })?;
    let client = match me.client_addr {
        Some(addr) => {
            Some(
                bind_listener(addr, &cfg.transport).map_err(|source| NodeError::Bind {
                    what: "clients",
                    addr,
                    source,
                })?,
            )
        }
        None => None,
    };
    Ok(Listeners { peer, client })
}

/// The event loop's settings from the config and the flags.
fn driver_config(
    cfg: &NodeConfig,
    args: &NodeArgs,
    start: StartInfo,
    snapshot_path: PathBuf,
) -> DriverConfig {
    let mut dcfg = DriverConfig::new(cfg.node_id, cfg.cluster_id, cfg.peer_addrs());
    dcfg.client_addrs = cfg.client_addrs();
    // Process groups (Spread / Corosync CPG) run over the token ring's EVS configurations.
    dcfg.process_groups = cfg.protocol == ProtocolKind::Token && cfg.process_groups;
    // A value of packed group messages fits one data message of the ring.
    if let Some(t) = &cfg.token {
        dcfg.group_value_bytes = t.max_message_bytes;
        // A member whose group listeners are behind holds the token up to a fifth of the
        // retransmission time (1 ms by default), so the ring slows to its receivers.
        dcfg.token_defer_max_us = t.token_retransmit_us / 5;
    }
    dcfg.incarnation = start.incarnation;
    dcfg.transport = cfg.transport.clone();
    dcfg.periodic_us = args.stats_ms.saturating_mul(1000);
    dcfg.group_commit = matches!(cfg.storage.kind, StorageKind::Durable { .. });
    // Without fdatasync there is nothing to overlap.
    dcfg.sync_thread =
        cfg.storage.sync_thread && matches!(cfg.storage.kind, StorageKind::Durable { sync: true });
    // With durable storage the delivery history is a journal in the node's directory, so
    // `abcast learn --from N` resumes across restarts (runtime `history.rs`). A Multi-Ring
    // node delivers per-ring instance numbers, which are no single sequence: memory only.
    if matches!(cfg.storage.kind, StorageKind::Durable { .. }) && cfg.multiring.is_none() {
        dcfg.history_dir = Some(cfg.storage.node_dir(cfg.node_id).join("history"));
    }
    // A Multi-Ring node's subscriptions count positions in its merged delivery order.
    dcfg.history_merged = cfg.multiring.is_some();
    if cfg.my_roles().learner {
        dcfg.snapshot_interval_us = cfg.storage.snapshot_interval_ms.saturating_mul(1000);
        dcfg.snapshot_path = Some(snapshot_path);
    }
    dcfg
}

fn log_start<P: Protocol>(cfg: &NodeConfig, me: &MemberAddr, start: StartInfo, driver: &Driver<P>) {
    if let Some((recv, send)) = driver.multicast_buffers() {
        eprintln!(
            "[{}] multicast socket buffers as the kernel reports them (twice what it \
             accounts): {recv} bytes receive, {send} bytes send",
            cfg.node_id
        );
    }
    eprintln!(
        "[{}] node starting: incarnation {}{}, peers on {}, clients on {}{}",
        cfg.node_id,
        start.incarnation,
        match (
            start.amnesic,
            driver.protocol().status().amnesic,
            cfg.storage.kind,
        ) {
            (_, true, StorageKind::Durable { .. }) => {
                " (amnesic: its log was lost or could not be trusted)"
            }
            (_, true, _) => " (amnesic: in-memory acceptor state was lost)",
            (true, false, StorageKind::Durable { .. }) => {
                " (acceptor state recovered from its log)"
            }
            _ => "",
        },
        me.addr,
        me.client_addr
            .map_or_else(|| "-".to_string(), |a| a.to_string()),
        me.client_path
            .as_ref()
            .map_or_else(String::new, |p| format!(" and {}", p.display())),
    );
}

/// The node's application: its statistics (restored from the snapshot) and, with
/// `--delivery-log`, this incarnation's delivery log.
fn node_stats<'w>(
    cfg: &NodeConfig,
    args: &NodeArgs,
    start: StartInfo,
    restored: Option<&abcast_core::Snapshot>,
    out: &'w mut dyn Write,
) -> Result<NodeStats<'w>, NodeError> {
    let mut app = NodeStats::new(
        cfg.node_id,
        start.incarnation,
        args.json_stats,
        cfg.my_roles().learner,
        out,
    )?;
    app.multi = cfg.multiring.is_some();
    if args.load_stamp && app.learner {
        app.latency_all_us = Some(
            Histogram::new_with_bounds(1, 3_600_000_000, 3)
                .map_err(|e| NodeError::Args(format!("latency histogram: {e}")))?,
        );
    }
    if let Some(snap) = restored {
        app.restore(&snap.app).map_err(NodeError::Args)?;
    }
    if args.delivery_log {
        let path = cfg
            .storage
            .node_dir(cfg.node_id)
            .join(format!("deliveries-{}.log", start.incarnation));
        let file = std::fs::File::create(&path).map_err(|e| {
            NodeError::Args(format!(
                "cannot create delivery log {}: {e}",
                path.display()
            ))
        })?;
        app.delivery_log = Some(std::io::BufWriter::with_capacity(1 << 20, file));
    }
    Ok(app)
}

/// `--load-rate`: the built-in load generator, on a proposer only.
fn start_load<P: Protocol>(cfg: &NodeConfig, args: &NodeArgs, driver: &mut Driver<P>) {
    let Some(rate) = args.load_rate else {
        return;
    };
    if !cfg.my_roles().proposer {
        eprintln!("[{}] not a proposer: --load-rate ignored", cfg.node_id);
        return;
    }
    driver.start_load(LoadConfig {
        rate_per_s: rate,
        value_bytes: args.load_value_size,
        window_values: args.load_window.unwrap_or(cfg.window_values()).max(1),
        max_values: None,
        leader_only: args.load_at_leader,
        stamp: args.load_stamp,
    });
    if let Some(t) = &cfg.token {
        // The first ring is whoever answered in time; what it delivers before the others
        // merge is never delivered at them (EVS). A load test wants one sequence.
        driver.load_waits_for_view(t.members.len());
    }
}

/// Runs the event loop until `stop` (SIGTERM, SIGINT) or `--duration-s`, then drains.
fn serve<P: Protocol>(
    args: &NodeArgs,
    stop: &AtomicBool,
    driver: &mut Driver<P>,
    app: &mut NodeStats<'_>,
) -> Result<(), NodeError> {
    let duration_us = args.duration_s.map(|s| (s * 1e6) as Micros);
    driver.run(app, |now| {
        stop.load(Ordering::Relaxed)
            || STOP_LOAD.load(Ordering::Relaxed)
            || duration_us.is_some_and(|d| now >= d)
    })?;
    driver.stop_load();
    // SIGUSR1 stops the load but keeps the node serving (acceptor, forwarding, learning) so
    // the others can finish what is in flight; the demo waits until every learner delivered
    // the same count, then sends SIGTERM.
    if STOP_LOAD.load(Ordering::Relaxed) && duration_us.is_none() {
        driver.run(app, |_| stop.load(Ordering::Relaxed))?;
    }
    let drain_end = driver
        .now()
        .saturating_add(args.drain_ms.saturating_mul(1000));
    driver.run(app, |now| now >= drain_end)?;
    Ok(())
}

/// Flushes the delivery log, prints the final stats line and the transport's counters.
fn finish<P: Protocol>(
    cfg: &NodeConfig,
    start: StartInfo,
    driver: &Driver<P>,
    mut app: NodeStats<'_>,
) -> Result<NodeReport, NodeError> {
    if let Some(mut log) = app.delivery_log.take() {
        use std::io::Write as _;
        if let Err(e) = log.flush() {
            eprintln!("[{}] delivery log flush failed: {e}", cfg.node_id);
        }
    }
    let status = driver.protocol().status();
    app.take_transport(&driver.transport_stats());
    app.print("final", driver.now(), &status);
    // The transport's counters (drops, datagrams, TCP fallbacks) for whoever reads the log.
    eprintln!(
        "[{}] transport: {:?}",
        cfg.node_id,
        driver.transport_stats()
    );
    if let Some(e) = app.write_error.take() {
        return Err(NodeError::Output(e));
    }
    Ok(NodeReport {
        node: cfg.node_id,
        incarnation: start.incarnation,
        delivered_values: app.delivered_values,
        order_hash: app.order_hash.value(),
        duplicate_deliveries: app.duplicate_deliveries,
        proposed_values: app.proposed_values,
        acked_values: app.acked_values,
    })
}

/// Set by SIGUSR1: stop the load generator, keep serving until SIGTERM.
static STOP_LOAD: std::sync::LazyLock<Arc<AtomicBool>> =
    std::sync::LazyLock::new(|| Arc::new(AtomicBool::new(false)));

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The order hash of a delivered sequence of value ids: FNV-1a 64 over its maximal runs of
/// consecutive ids of one proposer, each run as (node id u32 LE, first seq u64 LE, count u64
/// LE). A function of the id sequence alone (its decomposition into maximal runs is unique),
/// so two learners that delivered the same sequence print the same hash however their
/// deliveries were cut into batches; and a batch costs one comparison, not a loop over its
/// values (a 16-byte-value run delivers millions of ids a second).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrderHash {
    /// The hash of every run before `run`.
    folded: u64,
    /// The last run, still open: (node, first seq, count).
    run: Option<(NodeId, u64, u64)>,
}

impl Default for OrderHash {
    fn default() -> Self {
        OrderHash {
            folded: FNV_OFFSET,
            run: None,
        }
    }
}

impl OrderHash {
    /// Appends the ids `(node, first_seq) .. (node, first_seq + count)`, in order.
    pub fn push_run(&mut self, node: NodeId, first_seq: u64, count: u64) {
        if count == 0 {
            return;
        }
        match &mut self.run {
            Some((n, first, c)) if *n == node && first.checked_add(*c) == Some(first_seq) => {
                *c += count;
            }
            _ => {
                self.folded = self.value();
                self.run = Some((node, first_seq, count));
            }
        }
    }

    /// Appends one id.
    pub fn push(&mut self, id: ValueId) {
        self.push_run(id.node, id.seq, 1);
    }

    /// The hash of the sequence so far.
    pub fn value(&self) -> u64 {
        let Some((node, first, count)) = self.run else {
            return self.folded;
        };
        let bytes = node
            .0
            .to_le_bytes()
            .into_iter()
            .chain(first.to_le_bytes())
            .chain(count.to_le_bytes());
        bytes.fold(self.folded, |hash, b| {
            (hash ^ u64::from(b)).wrapping_mul(FNV_PRIME)
        })
    }
}

/// Propose times of the load generator's values not yet delivered here, by sequence number.
///
/// The generator's values take increasing sequence numbers, so a ring indexed by
/// `seq - base` stands in for a hash map: an insert is a push, a lookup an index. A value
/// that is never delivered (lost in a leader change) would pin the ring's front, so past
/// [`PROPOSE_RING_MAX`] entries the front moves to an overflow map, where a very late
/// delivery still finds it; the overflow takes out-of-order sequence numbers too.
#[derive(Debug, Default)]
struct ProposeTimes {
    /// Sequence number of `ring[0]`.
    base: u64,
    /// Propose time, or [`NOT_PENDING`].
    ring: VecDeque<Micros>,
    /// Entries of `ring` that are not [`NOT_PENDING`].
    pending: usize,
    overflow: HashMap<u64, Micros>,
}

const NOT_PENDING: Micros = Micros::MAX;
/// 4 Mi entries, 32 MiB: four times the largest window the benches use.
const PROPOSE_RING_MAX: usize = 1 << 22;

impl ProposeTimes {
    fn is_empty(&self) -> bool {
        self.pending == 0 && self.overflow.is_empty()
    }

    fn insert(&mut self, seq: u64, t: Micros) {
        let t = t.min(NOT_PENDING - 1);
        if self.pending == 0 {
            self.ring.clear();
            self.base = seq;
        }
        if seq < self.base {
            self.overflow.insert(seq, t);
            return;
        }
        let ahead = seq - self.base;
        if ahead < self.ring.len() as u64 {
            let slot = &mut self.ring[ahead as usize];
            if *slot == NOT_PENDING {
                self.pending += 1;
            }
            *slot = t;
            return;
        }
        if ahead - self.ring.len() as u64 >= PROPOSE_RING_MAX as u64 {
            // A jump past the whole ring: keep what is pending, start the ring anew here.
            self.spill_front(self.ring.len());
            self.ring.clear();
            self.base = seq;
        }
        let at = (seq - self.base) as usize;
        self.ring.resize(at, NOT_PENDING);
        self.ring.push_back(t);
        self.pending += 1;
        if self.ring.len() > PROPOSE_RING_MAX {
            self.spill_front(self.ring.len() - PROPOSE_RING_MAX);
        }
    }

    /// Moves the first `n` entries of the ring to the overflow map.
    fn spill_front(&mut self, n: usize) {
        for _ in 0..n {
            let Some(t) = self.ring.pop_front() else {
                break;
            };
            if t != NOT_PENDING {
                self.overflow.insert(self.base, t);
                self.pending -= 1;
            }
            self.base += 1;
        }
    }

    /// Removes and returns the propose time of `seq`.
    fn take(&mut self, seq: u64) -> Option<Micros> {
        if let Some(ahead) = seq.checked_sub(self.base)
            && let Some(slot) = self.ring.get_mut(ahead as usize)
        {
            let t = std::mem::replace(slot, NOT_PENDING);
            if t != NOT_PENDING {
                self.pending -= 1;
                return Some(t);
            }
            return None;
        }
        if self.overflow.is_empty() {
            None
        } else {
            self.overflow.remove(&seq)
        }
    }

    /// Drops the delivered entries at the ring's front.
    fn trim(&mut self) {
        if self.pending == 0 {
            self.ring.clear();
            return;
        }
        while self.ring.front() == Some(&NOT_PENDING) {
            self.ring.pop_front();
            self.base += 1;
        }
    }
}

/// The sequence numbers delivered from one origin, as disjoint, non-adjacent intervals
/// `[start, end)`. Values of one origin arrive mostly in order, so this stays a handful of
/// intervals however long the node runs.
#[derive(Debug, Default, Clone)]
pub struct SeqIntervals {
    map: BTreeMap<u64, u64>,
}

impl SeqIntervals {
    /// Adds `first .. first + count`; returns how many of them were already present.
    pub fn insert(&mut self, first: u64, count: u64) -> u64 {
        let end = first.saturating_add(count);
        let (mut lo, mut hi, mut dup) = (first, end, 0);
        let mut merged = Vec::new();
        for (&s, &e) in self.map.range(..=end).rev() {
            if e < first {
                break;
            }
            dup += e.min(end).saturating_sub(s.max(first));
            lo = lo.min(s);
            hi = hi.max(e);
            merged.push(s);
        }
        for s in merged {
            self.map.remove(&s);
        }
        self.map.insert(lo, hi);
        dup
    }

    pub fn intervals(&self) -> usize {
        self.map.len()
    }
}

/// The node's application: counts, order hash, duplicates and latency, printed as stats.
struct NodeStats<'w> {
    me: NodeId,
    incarnation: u64,
    json: bool,
    learner: bool,
    out: &'w mut dyn Write,
    write_error: Option<io::Error>,
    /// `--delivery-log`: one line per delivered instance.
    delivery_log: Option<io::BufWriter<std::fs::File>>,
    delivered_values: u64,
    delivered_bytes: u64,
    delivered_instance: Instance,
    order_hash: OrderHash,
    proposed_values: u64,
    acked_values: u64,
    busy_rejections: u64,
    delivered_by_origin: BTreeMap<u32, u64>,
    acked_by_origin: BTreeMap<u32, u64>,
    seen: HashMap<NodeId, SeqIntervals>,
    duplicate_deliveries: u64,
    latency_us: Histogram<u64>,
    /// `--load-stamp`: every delivered value's latency from its stamp (`None`: off).
    latency_all_us: Option<Histogram<u64>>,
    /// Propose time of the load generator's values not yet delivered here.
    proposed_at: ProposeTimes,
    /// Multi-Ring: per-ring figures, and the position in the merged order (the delivery
    /// log's first column, since instance numbers are per ring).
    multi: bool,
    groups: BTreeMap<u16, crate::stats::GroupLine>,
    merged_position: u64,
    /// The datagram sockets' rejections, and of them the strangers' (`Hooks::transport`).
    datagrams_rejected: u64,
    datagrams_unknown_sender: u64,
    client_shm_opened: u64,
    bad_input_closes: u64,
}

impl<'w> NodeStats<'w> {
    fn new(
        me: NodeId,
        incarnation: u64,
        json: bool,
        learner: bool,
        out: &'w mut dyn Write,
    ) -> Result<Self, NodeError> {
        // One hour in microseconds at 3 significant digits: a few tens of KiB.
        let latency_us = Histogram::new_with_bounds(1, 3_600_000_000, 3)
            .map_err(|e| NodeError::Args(format!("latency histogram: {e}")))?;
        Ok(NodeStats {
            me,
            incarnation,
            json,
            learner,
            out,
            write_error: None,
            delivery_log: None,
            delivered_values: 0,
            delivered_bytes: 0,
            delivered_instance: 0,
            order_hash: OrderHash::default(),
            proposed_values: 0,
            acked_values: 0,
            busy_rejections: 0,
            delivered_by_origin: BTreeMap::new(),
            acked_by_origin: BTreeMap::new(),
            seen: HashMap::new(),
            duplicate_deliveries: 0,
            latency_us,
            latency_all_us: None,
            proposed_at: ProposeTimes::default(),
            multi: false,
            groups: BTreeMap::new(),
            merged_position: 0,
            datagrams_rejected: 0,
            datagrams_unknown_sender: 0,
            client_shm_opened: 0,
            bad_input_closes: 0,
        })
    }

    fn print(&mut self, kind: &str, now: Micros, status: &Status) {
        if self.write_error.is_some() {
            return;
        }
        for g in &status.groups {
            let line = self.groups.entry(g.group.0).or_default();
            line.buffered_instances = g.buffered_instances as u64;
            line.buffered_instances_max = g.buffered_instances_max as u64;
            line.following = g.following;
        }
        let (cpu_user_ms, cpu_sys_ms) = cpu_ms();
        let h = &self.latency_us;
        let line = if self.json {
            let mut hist = Vec::new();
            let lat_hist = match V2Serializer::new().serialize(h, &mut hist) {
                Ok(_) => base64::engine::general_purpose::STANDARD.encode(&hist),
                Err(_) => String::new(),
            };
            let origins =
                |m: &BTreeMap<u32, u64>| m.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            let line = crate::stats::WireLine {
                kind: kind.to_string(),
                node: self.me.0,
                incarnation: self.incarnation,
                t_us: now,
                delivered_values: self.delivered_values,
                delivered_bytes: self.delivered_bytes,
                delivered_instance: self.delivered_instance,
                order_hash: format!("{:016x}", self.order_hash.value()),
                proposed_values: self.proposed_values,
                acked_values: self.acked_values,
                busy_rejections: self.busy_rejections,
                coordinator: status.coordinator.map(|c| c.0),
                amnesic: status.amnesic,
                cpu_user_ms,
                cpu_sys_ms,
                rss_kib: rss_kib(),
                log_bytes: status.log_bytes,
                log_appended_bytes: status.log_appended_bytes,
                lat_count: h.len(),
                lat_us_p50: h.value_at_quantile(0.5) as f64,
                lat_us_p99: h.value_at_quantile(0.99) as f64,
                lat_us_p999: h.value_at_quantile(0.999) as f64,
                lat_hist: Some(lat_hist),
                lat_all_count: self.latency_all_us.as_ref().map_or(0, |h| h.len()),
                lat_all_hist: self.latency_all_us.as_ref().and_then(|h| {
                    let mut bytes = Vec::new();
                    V2Serializer::new()
                        .serialize(h, &mut bytes)
                        .ok()
                        .map(|_| base64::engine::general_purpose::STANDARD.encode(&bytes))
                }),
                delivered_by_origin: origins(&self.delivered_by_origin),
                acked_by_origin: origins(&self.acked_by_origin),
                duplicate_deliveries: self.duplicate_deliveries,
                groups: self
                    .groups
                    .iter()
                    .map(|(g, l)| (g.to_string(), *l))
                    .collect(),
                datagrams_rejected: self.datagrams_rejected,
                datagrams_unknown_sender: self.datagrams_unknown_sender,
                client_shm_opened: self.client_shm_opened,
                bad_input_closes: self.bad_input_closes,
            };
            match serde_json::to_string(&line) {
                Ok(s) => s,
                Err(e) => format!("{{\"type\":\"error\",\"error\":\"{e}\"}}"),
            }
        } else {
            format!(
                "{kind} {} t={:.1}s delivered={} ({:.1} MiB) instance={} proposed={} acked={} busy={} \
                 coordinator={} lat_us p50={} p99={} n={} dup={} hash={:016x}",
                self.me,
                now as f64 / 1e6,
                self.delivered_values,
                self.delivered_bytes as f64 / (1 << 20) as f64,
                self.delivered_instance,
                self.proposed_values,
                self.acked_values,
                self.busy_rejections,
                status
                    .coordinator
                    .map_or_else(|| "-".to_string(), |c| c.to_string()),
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.99),
                h.len(),
                self.duplicate_deliveries,
                self.order_hash.value(),
            ) + &self.groups_text()
                + &self.datagrams_text()
        };
        if let Err(e) = writeln!(self.out, "{line}").and_then(|_| self.out.flush()) {
            eprintln!("[{}] cannot write stats: {e}", self.me);
            self.write_error = Some(e);
        }
    }
}

impl NodeStats<'_> {
    /// Keeps the datagram sockets' rejection counters for the next stats line.
    fn take_transport(&mut self, s: &abcast_runtime::TransportStats) {
        let sockets = [s.multicast, s.unicast, s.control];
        self.datagrams_rejected = sockets.iter().map(|m| m.datagrams_rejected).sum();
        self.datagrams_unknown_sender = sockets.iter().map(|m| m.datagrams_unknown_sender).sum();
        self.client_shm_opened = s.client_shm_opened;
        self.bad_input_closes = s.bad_input_closes;
    }

    /// The datagram sockets' rejections for the text stats line, when there were any.
    fn datagrams_text(&self) -> String {
        if self.datagrams_rejected == 0 {
            return String::new();
        }
        format!(
            " datagrams_rejected={} (unknown sender {})",
            self.datagrams_rejected, self.datagrams_unknown_sender
        )
    }

    /// ` ring 1: delivered=.. buffered=.. (max ..)` per ring, for the text stats line.
    fn groups_text(&self) -> String {
        use std::fmt::Write as _;
        let mut t = String::new();
        for (g, l) in &self.groups {
            let _ = write!(
                t,
                " | ring {g}{}: delivered={} buffered={} (max {})",
                if l.following { "" } else { " (not followed)" },
                l.delivered_values,
                l.buffered_instances,
                l.buffered_instances_max
            );
        }
        t
    }
}

/// What the node's built-in application keeps in a snapshot: the figures of the delivered
/// sequence, so a learner restarted from a snapshot goes on counting (and hashing the order)
/// where it left off.
#[derive(serde::Serialize, serde::Deserialize)]
struct AppSnapshot {
    delivered_values: u64,
    delivered_bytes: u64,
    delivered_instance: Instance,
    /// [`OrderHash`]: the runs before the last, and the last, still open.
    order_hash: u64,
    #[serde(default)]
    order_run: Option<(u32, u64, u64)>,
    delivered_by_origin: BTreeMap<u32, u64>,
    duplicate_deliveries: u64,
    merged_position: u64,
}

impl NodeStats<'_> {
    fn restore(&mut self, data: &[u8]) -> Result<(), String> {
        let s: AppSnapshot =
            serde_json::from_slice(data).map_err(|e| format!("snapshot application state: {e}"))?;
        self.delivered_values = s.delivered_values;
        self.delivered_bytes = s.delivered_bytes;
        self.delivered_instance = s.delivered_instance;
        self.order_hash = OrderHash {
            folded: s.order_hash,
            run: s
                .order_run
                .map(|(n, first, count)| (NodeId(n), first, count)),
        };
        self.delivered_by_origin = s.delivered_by_origin;
        self.duplicate_deliveries = s.duplicate_deliveries;
        self.merged_position = s.merged_position;
        Ok(())
    }
}

impl Application for NodeStats<'_> {
    fn snapshot(&mut self) -> Option<bytes::Bytes> {
        // The delivery log reaches the snapshot point first: a harness that joins the logs
        // of two lives cuts the first at the snapshot the second started from.
        if let Some(log) = self.delivery_log.as_mut()
            && let Err(e) = log.flush()
        {
            self.write_error.get_or_insert(e);
        }
        let s = AppSnapshot {
            delivered_values: self.delivered_values,
            delivered_bytes: self.delivered_bytes,
            delivered_instance: self.delivered_instance,
            order_hash: self.order_hash.folded,
            order_run: self
                .order_hash
                .run
                .map(|(n, first, count)| (n.0, first, count)),
            delivered_by_origin: self.delivered_by_origin.clone(),
            duplicate_deliveries: self.duplicate_deliveries,
            merged_position: self.merged_position,
        };
        serde_json::to_vec(&s).ok().map(bytes::Bytes::from)
    }

    fn deliver(&mut self, now: Micros, d: &Delivery, _results: &mut Vec<bytes::Bytes>) {
        let b = &d.batch;
        self.merged_position += 1;
        let position = if self.multi {
            let g = self.groups.entry(d.group.0).or_default();
            g.delivered_values += b.len() as u64;
            g.delivered_bytes += b.payload_bytes() as u64;
            self.merged_position
        } else {
            d.instance
        };
        if let Some(log) = self.delivery_log.as_mut() {
            use std::io::Write as _;
            if let Err(e) = writeln!(
                log,
                "{} {} {} {}",
                position,
                b.origin().0,
                b.first_seq(),
                b.len()
            ) {
                eprintln!("[{}] delivery log write failed, log disabled: {e}", self.me);
                self.delivery_log = None;
            }
        }
        let n = b.len() as u64;
        self.delivered_values += n;
        self.delivered_bytes += b.payload_bytes() as u64;
        self.delivered_instance = self.delivered_instance.max(position);
        *self.delivered_by_origin.entry(b.origin().0).or_default() += n;
        self.duplicate_deliveries += self
            .seen
            .entry(b.origin())
            .or_default()
            .insert(b.first_seq(), n);
        self.order_hash.push_run(b.origin(), b.first_seq(), n);
        if let Some(h) = self.latency_all_us.as_mut() {
            // Every value's own stamp: runs of one propose time are recorded at once.
            let at = abcast_runtime::loadgen::stamp_now_us();
            let (mut run_lat, mut run_len) = (0, 0);
            for v in b.values() {
                let Some(stamp) = abcast_runtime::loadgen::stamp_of(&v.payload) else {
                    continue;
                };
                let lat = at.saturating_sub(stamp).max(1);
                if lat != run_lat && run_len > 0 {
                    h.saturating_record_n(run_lat, run_len);
                    run_len = 0;
                }
                run_lat = lat;
                run_len += 1;
            }
            if run_len > 0 {
                h.saturating_record_n(run_lat, run_len);
            }
        }
        if b.origin() == self.me && !self.proposed_at.is_empty() {
            // Values proposed in one loop iteration share a propose time: record runs of
            // equal latencies at once.
            let (mut run_lat, mut run_len) = (0, 0);
            for seq in b.first_seq()..b.first_seq().saturating_add(n) {
                if let Some(t) = self.proposed_at.take(seq) {
                    let lat = now.saturating_sub(t).max(1);
                    if lat != run_lat && run_len > 0 {
                        self.latency_us.saturating_record_n(run_lat, run_len);
                        run_len = 0;
                    }
                    run_lat = lat;
                    run_len += 1;
                }
            }
            if run_len > 0 {
                self.latency_us.saturating_record_n(run_lat, run_len);
            }
            self.proposed_at.trim();
        }
    }

    fn install(&mut self, _now: Micros, snapshot: &abcast_core::Snapshot) -> Result<(), String> {
        self.restore(&snapshot.app)?;
        if let Some(log) = self.delivery_log.as_mut() {
            use std::io::Write as _;
            if let Err(e) = writeln!(log, "snapshot {}", snapshot.upto) {
                eprintln!("[{}] delivery log write failed, log disabled: {e}", self.me);
                self.delivery_log = None;
            }
        }
        Ok(())
    }

    fn skipped(&mut self, _now: Micros, skip: &abcast_core::Skip) {
        let (from, to) = (skip.from, skip.to);
        if let Some(log) = self.delivery_log.as_mut() {
            use std::io::Write as _;
            if let Err(e) = writeln!(log, "skip {from} {to}") {
                eprintln!("[{}] delivery log write failed, log disabled: {e}", self.me);
                self.delivery_log = None;
            }
        }
    }
}

impl Hooks for NodeStats<'_> {
    fn ack(&mut self, _now: Micros, a: &Ack) {
        self.acked_values += u64::from(a.count);
        *self.acked_by_origin.entry(a.key.origin.0).or_default() += u64::from(a.count);
    }

    fn proposed(&mut self, now: Micros, id: ValueId, by_load: bool) {
        self.proposed_values += 1;
        if by_load && self.learner {
            self.proposed_at.insert(id.seq, now);
        }
    }

    fn proposed_run(&mut self, now: Micros, first: ValueId, count: usize, by_load: bool) {
        self.proposed_values += count as u64;
        if by_load && self.learner {
            for seq in first.seq..first.seq + count as u64 {
                self.proposed_at.insert(seq, now);
            }
        }
    }

    fn busy(&mut self, _now: Micros) {
        self.busy_rejections += 1;
    }

    fn transport(&mut self, _now: Micros, s: &abcast_runtime::TransportStats) {
        self.take_transport(s);
    }

    fn periodic(&mut self, now: Micros, status: &Status) {
        // The delivery log reaches the file with every stats line, so the log of a life
        // killed with SIGKILL holds what it delivered up to its last line, for the
        // harness to compare (issue 33). Flushed only at snapshots, a life on memory
        // storage (no snapshots) that delivered less than the buffer's 1 MiB of lines
        // left an empty log, and the demo compared nothing of it.
        if let Some(log) = self.delivery_log.as_mut()
            && let Err(e) = log.flush()
        {
            self.write_error.get_or_insert(e);
        }
        self.print("stats", now, status);
    }
}

/// User and system CPU time of this process, in milliseconds.
fn cpu_ms() -> (u64, u64) {
    // SAFETY: `rusage` is a plain C struct of integers, for which all-zero is valid, and
    // `getrusage` only writes into the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return (0, 0);
    }
    let ms =
        |tv: libc::timeval| (tv.tv_sec.max(0) as u64) * 1000 + (tv.tv_usec.max(0) as u64) / 1000;
    (ms(ru.ru_utime), ms(ru.ru_stime))
}

/// Resident set size in KiB, from /proc/self/statm (0 where it does not exist).
fn rss_kib() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * (page.max(0) as u64) / 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_count_duplicates_and_merge() {
        let mut s = SeqIntervals::default();
        assert_eq!(s.insert(10, 5), 0); // [10,15)
        assert_eq!(s.insert(15, 5), 0); // adjacent: [10,20)
        assert_eq!(s.intervals(), 1);
        assert_eq!(s.insert(30, 2), 0);
        assert_eq!(s.intervals(), 2);
        assert_eq!(s.insert(18, 14), 4); // 18,19 and 30,31 again; fills the gap
        assert_eq!(s.intervals(), 1);
        assert_eq!(s.insert(10, 22), 22);
        assert_eq!(s.insert(0, 1), 0);
        assert_eq!(s.intervals(), 2);
    }

    #[test]
    fn order_hash_is_fnv1a_over_maximal_runs() {
        // FNV-1a of the 20 bytes of the run (node 1, first 2, count 1), computed by hand.
        let mut h = FNV_OFFSET;
        for b in [1u8, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0] {
            h ^= u64::from(b);
            h = h.wrapping_mul(FNV_PRIME);
        }
        let mut o = OrderHash::default();
        assert_eq!(o.value(), FNV_OFFSET, "the empty sequence");
        o.push(ValueId {
            node: NodeId(1),
            seq: 2,
        });
        assert_eq!(o.value(), h);
    }

    #[test]
    fn order_hash_depends_on_the_id_sequence_not_on_its_batches() {
        let mut whole = OrderHash::default();
        whole.push_run(NodeId(3), 7, 100);
        whole.push_run(NodeId(1), 0, 5);
        let mut cut = OrderHash::default();
        for seq in 7..50 {
            cut.push(ValueId {
                node: NodeId(3),
                seq,
            });
        }
        cut.push_run(NodeId(3), 50, 57);
        cut.push_run(NodeId(1), 0, 0);
        cut.push_run(NodeId(1), 0, 2);
        assert_ne!(cut.value(), whole.value(), "a prefix");
        cut.push_run(NodeId(1), 2, 3);
        assert_eq!(cut, whole, "same ids, other batches");
        // Other sequences: a gap, another order, a duplicate.
        let mut gap = OrderHash::default();
        gap.push_run(NodeId(3), 7, 50);
        gap.push_run(NodeId(3), 58, 50);
        gap.push_run(NodeId(1), 0, 5);
        let mut swapped = OrderHash::default();
        swapped.push_run(NodeId(1), 0, 5);
        swapped.push_run(NodeId(3), 7, 100);
        let mut dup = whole;
        dup.push_run(NodeId(1), 4, 1);
        let values = [whole.value(), gap.value(), swapped.value(), dup.value()];
        for (i, a) in values.iter().enumerate() {
            for b in &values[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn propose_times_find_every_pending_value() {
        let mut p = ProposeTimes::default();
        assert!(p.is_empty());
        for seq in 10..20 {
            p.insert(seq, seq * 100);
        }
        // A client proposal took 20: a gap.
        p.insert(21, 2100);
        assert_eq!(p.take(12), Some(1200));
        assert_eq!(p.take(12), None, "taken once");
        assert_eq!(p.take(20), None);
        p.trim();
        for seq in [10, 11, 13, 14, 15, 16, 17, 18, 19, 21] {
            assert_eq!(p.take(seq), Some(seq * 100), "{seq}");
            p.trim();
        }
        assert!(p.is_empty());
        // Out of order, and below the ring's base.
        p.insert(50, 5);
        p.insert(40, 4);
        assert_eq!(p.take(40), Some(4));
        assert_eq!(p.take(50), Some(5));
        assert!(p.is_empty());
    }

    #[test]
    fn propose_times_spill_a_lost_value_and_still_find_it() {
        let mut p = ProposeTimes::default();
        p.insert(0, 1); // never delivered until the very end
        let n = PROPOSE_RING_MAX as u64 + 10;
        for seq in 1..n {
            p.insert(seq, 2);
            assert_eq!(p.take(seq), Some(2));
            p.trim();
        }
        assert!(p.ring.len() <= PROPOSE_RING_MAX);
        assert_eq!(p.take(0), Some(1));
        assert!(p.is_empty());
        // A jump far past the ring keeps what was pending.
        p.insert(5, 7);
        p.insert(5 + 2 * PROPOSE_RING_MAX as u64, 8);
        assert_eq!(p.take(5), Some(7));
        assert_eq!(p.take(5 + 2 * PROPOSE_RING_MAX as u64), Some(8));
        assert!(p.is_empty());
    }

    #[test]
    fn resource_probes_answer() {
        let (u, s) = cpu_ms();
        assert!(u + s < u64::MAX);
        assert!(rss_kib() > 0);
    }
}
