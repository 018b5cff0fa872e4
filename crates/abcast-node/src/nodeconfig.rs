//! The node's configuration file (TOML) and its incarnation marker.
//!
//! One file describes the whole cluster, so every node can be started from the same file
//! with `--id N`:
//!
//! ```toml
//! cluster_id = 1
//! [[members]]                       # ring order
//! id = 0
//! addr = "127.0.0.1:7400"           # peer port
//! client_addr = "127.0.0.1:7500"    # client port (propose/learn), optional
//! client_path = "/run/abcast/0.sock" # optional: a Unix domain socket for clients on the
//!                                   # member's host (`--node /run/abcast/0.sock`): the same
//!                                   # frames at less than half of TCP's cost per byte;
//!                                   # relative to the config file's directory
//! roles = ["proposer", "acceptor", "learner"]   # default: all three
//! spare = false                     # seqpaxos and raft only: see below
//! [ring]        # every field optional, defaults from RingConfig; times in ms except batch_linger_us
//! [transport]   # buffer_size, tcp_nodelay, send_queue_bytes, client_queue_bytes, client_shm_bytes, backoff_ms_min, backoff_ms_max,
//!               # unicast = "tcp" | "udp" (how messages to one peer travel),
//!               # busy_poll_us (spin this long after an event before sleeping; 0 = never)
//! [storage]     # kind = "memory", dir = "abcast-data"
//! [[link_faults]]   # optional, repeatable: injected delay/loss on links, for experiments
//! from = 0          # sending node; omitted = every node
//! to = 1            # receiving node; omitted = every peer of `from`
//! delay_us = 5000   # one-way delay per frame, default 0, at most 10 s
//! loss_ppm = 1000   # frames lost per million, default 0, at most 1000000
//! group = 3         # only this protocol instance's frames; omitted = every group
//! lane = "data"     # only this lane's messages: "data" (the token ring's data messages)
//!                   # or "control" (its token); omitted = every message
//! ```
//!
//! IP-multicast Ring Paxos (seed 003) instead of U-Ring Paxos:
//!
//! ```toml
//! protocol = "ringpaxos"            # default "uring"
//! [multicast]                       # optional: without it, multicasts go as TCP copies
//! group = "239.255.77.1:30000"      # group address and port
//! interface = "127.0.0.1"           # default 127.0.0.1 (nodes on one machine); "0.0.0.0":
//!                                   # the interface of each host's route to the group
//! ttl = 1                           # default 1
//! loop = true                       # default true: a member's datagrams come back to its
//!                                   # host (other members on it read them); false when
//!                                   # every member has a host of its own
//! recv_buffer_bytes = 8388608       # default 8 MiB (SO_RCVBUFFORCE when permitted)
//! send_buffer_bytes = 4194304       # default 4 MiB
//! segment_bytes = 8972              # default 0 (off): datagrams larger than this leave as
//!                                   # segments of this size in one UDP GSO send, not as IP
//!                                   # fragments; the path MTU less 28 (runtime multicast.rs)
//! [ringpaxos]                       # Ring Paxos only, every field optional
//! buffer_instances = 1024           # the coordinator's circular buffer (seed 003 §6.1)
//! buffer_bytes = 67108864
//! ring_timeout_ms = 1000            # an instance undecided this long: new ring
//! decision_linger_us = 200          # decisions wait this long for a 2A to ride on
//! ```
//!
//! Ring Paxos takes its members and roles from `[[members]]` and every `[ring]` key that
//! both protocols have (the resend, batch, window, timeout and store keys), with Ring
//! Paxos' own defaults for keys not given. `[ring] p1_preexecution_number` and
//! `max_open_instances` are U-Ring Paxos only and refused with `ringpaxos` (its buffer,
//! `[ringpaxos] buffer_instances`, bounds open instances). With `[multicast]` a phase 2A
//! carries its whole batch in one datagram, so `batch_max_bytes` defaults to 40 KiB and
//! `max_value_bytes` to what fits a datagram, and larger settings are refused.
//!
//! A leader-based protocol (`protocol = "seqpaxos" | "raft" | "omnipaxos" | "raftrs"`) has
//! its own section; see `leader.rs`. The token ring (`protocol = "token"`, seed 002) takes
//! `[token]` and refuses `[ring]`; see `token.rs`.
//!
//! **Spares** (`protocol = "seqpaxos"` or `"raft"`): a member with `spare = true` is in the
//! address book (every node connects to it, it has its ports) but not in the protocol's
//! first configuration. It starts, waits, forwards what is proposed to it, and joins when
//! a reconfiguration names it (`abcast reconfigure --node ADDR --members ...`): a Sequence
//! Paxos spare fetches the log up to the stop-sign (pull or eager), a Raft spare takes the
//! leader's log as a learner before it votes. Every node is started from the same file;
//! the file describes the *first* configuration, and later ones live in the log (with
//! durable storage a restarted node takes its configuration from its log, not the file).
//! The other protocols refuse `spare = true`, and a configuration needs at least one member
//! that is not a spare.
//!
//! Every error names the field and the reason. Durations in `[ring]` are in milliseconds,
//! the unit seed 000 table 4.1 uses (`p1_resend_ms`, `value_resend_ms`, ...), except
//! `batch_linger_us`, which is far below a millisecond.
//!
//! `[[link_faults]]` is read by every node, which applies the rules of its own outgoing
//! links (`runtime::linkfault`); each directed link may be named by one rule only.

use crate::leader::{self, LeaderProtocol};
use crate::token::{self, FileToken};
use abcast_core::config::{Member, Roles, StartInfo};
use abcast_core::multiring::{MultiRingConfig, MultiRingConfigOf, ProposeTo, RingSpec, RingSpecOf};
use abcast_core::ringpaxos::RingPaxosConfig;
use abcast_core::storage::DurableOptions;
use abcast_core::token::TokenConfig;
use abcast_core::uring::RingConfig;
use abcast_core::{GroupId, NodeId};
use abcast_runtime::TransportConfig;
use abcast_runtime::linkfault::{self, LinkFault};
use abcast_runtime::multicast::{self, MulticastConfig};
use abcast_runtime::transport::Unicast;
use serde::Deserialize;
use std::fmt;
use std::fs;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

/// The node's view of the configuration file, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    pub cluster_id: u64,
    /// This node.
    pub node_id: NodeId,
    /// The ring, validated by `RingConfig::validate`.
    pub ring: RingConfig,
    /// Addresses of every member, in ring order.
    pub members: Vec<MemberAddr>,
    pub transport: TransportConfig,
    pub storage: StorageConfig,
    /// `[[rings]]` given: the node runs Multi-Ring Paxos over these rings (each a copy of
    /// `ring`'s parameters with its own members and roles) instead of the single ring; with
    /// `protocol = "ringpaxos"` each ring is a Ring Paxos ring (`ringpaxos_rings`).
    pub multiring: Option<MultiRingConfig>,
    /// The protocol `abcast node` runs (`protocol = ...`).
    pub protocol: ProtocolKind,
    /// Ring Paxos' configuration, when `protocol = "ringpaxos"`.
    pub ringpaxos: Option<RingPaxosConfig>,
    /// A leader-based protocol's configuration (`protocol = "seqpaxos" | "raft" |
    /// "omnipaxos" | "raftrs"`, `crate::leader`).
    pub leader: Option<LeaderProtocol>,
    /// Members outside the first configuration (`spare = true`, seqpaxos and raft only):
    /// in `members` (the address book), not in `leader`'s configuration.
    pub spares: Vec<NodeId>,
    /// The token ring's configuration, when `protocol = "token"` (`token.rs`).
    pub token: Option<TokenConfig>,
    /// `[token] process_groups = true`: the node runs process groups (`abcast join`,
    /// `multicast`, `listen`) over the ring; every member must say the same.
    pub process_groups: bool,
}

/// The protocols `abcast node` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolKind {
    /// U-Ring Paxos (seed 000), `protocol = "uring"`, the default.
    URing,
    /// IP-multicast Ring Paxos (seed 003), `protocol = "ringpaxos"`.
    RingPaxos,
    /// A leader-based protocol (seed 001): Sequence Paxos, Raft, or a peer core
    /// (`NodeConfig::leader` says which).
    Leader,
    /// The Accelerated Ring / Totem token ring (seed 002), `protocol = "token"`.
    Token,
}

impl NodeConfig {
    /// The largest value the running protocol accepts.
    pub fn max_value_bytes(&self) -> usize {
        if let Some(l) = &self.leader {
            return l.batch_limits().max_value_bytes;
        }
        if let Some(t) = &self.token {
            return t.max_value_bytes;
        }
        match &self.ringpaxos {
            Some(rp) => rp.max_value_bytes,
            None => self.ring.max_value_bytes,
        }
    }

    /// The running protocol's proposer window, in values.
    pub fn window_values(&self) -> usize {
        if let Some(l) = &self.leader {
            return l.batch_limits().window_values;
        }
        if let Some(t) = &self.token {
            return t.window_values;
        }
        match &self.ringpaxos {
            Some(rp) => rp.window_values,
            None => self.ring.window_values,
        }
    }

    /// Multi-Ring Paxos over Ring Paxos rings: the `[[rings]]` layout and `[multiring]`
    /// settings, each ring with `[ringpaxos]`'s parameters and its own members. `None`
    /// unless both `[[rings]]` and `protocol = "ringpaxos"` are given.
    pub fn ringpaxos_rings(&self) -> Option<MultiRingConfigOf<RingPaxosConfig>> {
        let (mr, rp) = (self.multiring.as_ref()?, self.ringpaxos.as_ref()?);
        Some(MultiRingConfigOf {
            rings: mr
                .rings
                .iter()
                .map(|s| RingSpecOf {
                    group: s.group,
                    ring: RingPaxosConfig {
                        members: s.ring.members.clone(),
                        ..rp.clone()
                    },
                })
                .collect(),
            merge_m: mr.merge_m,
            skip_interval_us: mr.skip_interval_us,
            lambda_factor_pct: mr.lambda_factor_pct,
            lambda_min_slots: mr.lambda_min_slots,
            control_retry_us: mr.control_retry_us,
            merge_queue_instances: mr.merge_queue_instances,
            merge_queue_bytes: mr.merge_queue_bytes,
            subscriptions: mr.subscriptions.clone(),
            propose_to: mr.propose_to,
        })
    }

    /// This node's addresses.
    pub fn me(&self) -> Option<&MemberAddr> {
        self.members.iter().find(|m| m.id == self.node_id)
    }

    /// This node's roles; with several rings, every role it has in any of them.
    pub fn my_roles(&self) -> Roles {
        if let Some(mr) = &self.multiring {
            let mut r = Roles {
                proposer: false,
                acceptor: false,
                learner: false,
            };
            for m in mr.rings.iter().flat_map(|s| &s.ring.members) {
                if m.id == self.node_id {
                    r.proposer |= m.roles.proposer;
                    r.acceptor |= m.roles.acceptor;
                    r.learner |= m.roles.learner;
                }
            }
            return r;
        }
        self.ring
            .members
            .iter()
            .find(|m| m.id == self.node_id)
            .map(|m| m.roles)
            .unwrap_or(Roles::PAL)
    }

    /// Peer addresses for the driver.
    pub fn peer_addrs(&self) -> Vec<(NodeId, SocketAddr)> {
        self.members.iter().map(|m| (m.id, m.addr)).collect()
    }

    /// The client ports of the members that have one (named in `NotLeader` answers).
    pub fn client_addrs(&self) -> Vec<(NodeId, SocketAddr)> {
        (self.members.iter())
            .filter_map(|m| m.client_addr.map(|a| (m.id, a)))
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberAddr {
    pub id: NodeId,
    pub addr: SocketAddr,
    pub client_addr: Option<SocketAddr>,
    /// A Unix domain socket for clients on the member's host (`client_path`).
    pub client_path: Option<PathBuf>,
}

/// The longest Unix socket path Linux takes (`sun_path` holds 108 bytes with its NUL).
pub const CLIENT_PATH_MAX_BYTES: usize = 107;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageConfig {
    /// Where the node keeps its incarnation marker (`<dir>/node-<id>/incarnation`) and, with
    /// `kind = "durable"`, its acceptor log (`<dir>/node-<id>/log/`, one `ring-<g>/` per
    /// Multi-Ring ring). Relative paths are taken from the config file's directory.
    pub dir: PathBuf,
    pub kind: StorageKind,
    /// Durable log segments are rolled at this size.
    pub segment_bytes: u64,
    /// A learner writes a snapshot (`<dir>/node-<id>/snapshot`) this often, reports it, and
    /// acceptors trim below what every learner's snapshot covers; 0 = never. Default
    /// 1000 with durable storage, 0 otherwise, but 1000 for Multi-Ring Paxos on memory
    /// storage too (a restarted Multi-Ring learner needs one to merge again). Raft and
    /// Sequence Paxos nodes snapshot and
    /// compact their own log, default 1000 on memory storage too: an uncompacted memory
    /// log grows with the run (1 GB in a 10 s demo) and a restarted node, which lost it,
    /// would need all of it again before it is repaired; with snapshots it installs a
    /// peer's and takes only what followed. The peer cores (`omnipaxos`, `raftrs`) take no
    /// snapshots: a value > 0 is refused for them, and the default is 0.
    pub snapshot_interval_ms: u64,
    /// Durable storage with `sync = true`: fdatasync on a thread of its own while the event
    /// loop goes on (pipelined group commit; default), or in the loop (`false`, for
    /// comparison).
    pub sync_thread: bool,
    /// Durable storage with `sync = true`: write the log around the page cache (`O_DIRECT`,
    /// on the sync thread; default), or through it (`false`, for comparison). See
    /// `abcast_runtime::disk`.
    pub direct_io: bool,
}

/// The acceptor store back-end (seed 000 §3.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageKind {
    /// Benchmarks only: acceptors hold undecided votes and nothing else, so they answer no
    /// learner's retrieve; a learner that misses a decision skips it.
    None,
    /// Bounded, in memory (the default): a restart forgets, the acceptor is repaired.
    Memory,
    /// The durable log: `sync = false` writes through the OS (survives a process crash),
    /// `sync = true` fdatasyncs before any message that depends on a write leaves (survives
    /// a machine crash).
    Durable { sync: bool },
}

impl std::fmt::Display for StorageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StorageKind::None => write!(f, "none"),
            StorageKind::Memory => write!(f, "memory"),
            StorageKind::Durable { sync: true } => write!(f, "durable (sync)"),
            StorageKind::Durable { sync: false } => write!(f, "durable (no sync)"),
        }
    }
}

impl StorageConfig {
    /// This node's own directory under the shared data root.
    pub fn node_dir(&self, id: NodeId) -> PathBuf {
        self.dir.join(format!("node-{}", id.0))
    }
}

/// What is wrong with a configuration, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeConfigError {
    /// The file could not be read.
    Io { path: PathBuf, reason: String },
    /// Not valid TOML, or a field of the wrong type or unknown name (the TOML parser's
    /// message names the field and the line).
    Syntax(String),
    /// A field holds a value outside its space.
    Invalid { field: String, reason: String },
}

impl fmt::Display for NodeConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeConfigError::Io { path, reason } => {
                write!(f, "cannot read config {}: {reason}", path.display())
            }
            NodeConfigError::Syntax(m) => write!(f, "config: {m}"),
            NodeConfigError::Invalid { field, reason } => write!(f, "config: {field}: {reason}"),
        }
    }
}

impl std::error::Error for NodeConfigError {}

fn invalid<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, NodeConfigError> {
    Err(NodeConfigError::Invalid {
        field: field.into(),
        reason: reason.into(),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    cluster_id: u64,
    node_id: Option<u32>,
    members: Vec<FileMember>,
    #[serde(default)]
    ring: FileRing,
    #[serde(default)]
    transport: FileTransport,
    #[serde(default)]
    storage: FileStorage,
    #[serde(default)]
    link_faults: Vec<FileLinkFault>,
    protocol: Option<String>,
    multicast: Option<FileMulticast>,
    ringpaxos: Option<FileRingPaxos>,
    #[serde(default)]
    rings: Vec<FileRingGroup>,
    multiring: Option<FileMultiRing>,
    seqpaxos: Option<leader::FileSeqPaxos>,
    raft: Option<leader::FileRaft>,
    omnipaxos: Option<leader::FileOmniPaxos>,
    raftrs: Option<leader::FileRaftRs>,
    token: Option<FileToken>,
}

/// One `[[rings]]` entry (Multi-Ring Paxos). Omitted lists default to every `[[members]]`
/// entry in file order (`members`) and to the roles those entries give (`proposers`,
/// `acceptors`, `learners`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRingGroup {
    group: u64,
    members: Option<Vec<u32>>,
    proposers: Option<Vec<u32>>,
    acceptors: Option<Vec<u32>>,
    learners: Option<Vec<u32>>,
}

/// `[multiring]`: the merge and the skips; every field optional.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileMultiRing {
    merge_m: Option<u64>,
    skip_interval_ms: Option<u64>,
    lambda_factor_pct: Option<u64>,
    lambda_min_slots: Option<u64>,
    control_retry_ms: Option<u64>,
    merge_queue_instances: Option<usize>,
    merge_queue_bytes: Option<usize>,
    propose_to: Option<FileProposeTo>,
    #[serde(default)]
    subscriptions: Vec<FileSubscription>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum FileProposeTo {
    /// "first" or "round-robin".
    Name(String),
    /// A ring's group.
    Group(u64),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSubscription {
    node: u32,
    rings: Vec<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMulticast {
    group: String,
    interface: Option<String>,
    ttl: Option<u32>,
    #[serde(rename = "loop")]
    multicast_loop: Option<bool>,
    recv_buffer_bytes: Option<usize>,
    send_buffer_bytes: Option<usize>,
    segment_bytes: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRingPaxos {
    buffer_instances: Option<usize>,
    buffer_bytes: Option<usize>,
    ring_timeout_ms: Option<u64>,
    decision_linger_us: Option<u64>,
}

/// One `[[link_faults]]` entry. Values are read as wide integers so that a value out of
/// range is reported with its field and limit, not as a type error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLinkFault {
    from: Option<u32>,
    to: Option<u32>,
    delay_us: Option<u64>,
    loss_ppm: Option<u64>,
    group: Option<u64>,
    lane: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMember {
    id: u32,
    addr: String,
    client_addr: Option<String>,
    client_path: Option<String>,
    roles: Option<Vec<String>>,
    spare: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileRing {
    p1_preexecution_number: Option<u64>,
    p1_resend_ms: Option<u64>,
    p2_resend_ms: Option<u64>,
    value_resend_ms: Option<u64>,
    batch_max_bytes: Option<usize>,
    batch_linger_us: Option<u64>,
    window_values: Option<usize>,
    window_bytes: Option<usize>,
    max_value_bytes: Option<usize>,
    max_open_instances: Option<usize>,
    coordinator_queue_bytes: Option<usize>,
    heartbeat_interval_ms: Option<u64>,
    failure_timeout_ms: Option<u64>,
    retrieve_timeout_ms: Option<u64>,
    retrieve_max_instances: Option<u64>,
    store_capacity_instances: Option<usize>,
    store_capacity_bytes: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileTransport {
    buffer_size: Option<usize>,
    tcp_nodelay: Option<bool>,
    send_queue_bytes: Option<usize>,
    client_queue_bytes: Option<usize>,
    client_shm_bytes: Option<usize>,
    backoff_ms_min: Option<u64>,
    backoff_ms_max: Option<u64>,
    unicast: Option<String>,
    busy_poll_us: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileStorage {
    kind: Option<String>,
    dir: Option<String>,
    sync: Option<bool>,
    segment_bytes: Option<u64>,
    snapshot_interval_ms: Option<u64>,
    sync_thread: Option<bool>,
    direct_io: Option<bool>,
}

/// Where the data root is when `[storage] dir` is not given.
pub const DEFAULT_DATA_DIR: &str = "abcast-data";

/// Reads and checks a config file. `node_id` (from `--id`) overrides the file's `node_id`.
pub fn load(path: &Path, node_id: Option<u32>) -> Result<NodeConfig, NodeConfigError> {
    let text = fs::read_to_string(path).map_err(|e| NodeConfigError::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse(&text, node_id, &base)
}

fn ms_to_us(field: &str, ms: u64) -> Result<u64, NodeConfigError> {
    match ms.checked_mul(1000) {
        Some(us) => Ok(us),
        None => invalid(format!("ring.{field}"), format!("{ms} ms is too large")),
    }
}

/// How a member's address that is not numeric is turned into one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolve {
    /// Through the system's resolver (`ToSocketAddrs`): what a node does.
    System,
    /// Not at all: a host name is refused. For the fuzz target (`abcast-fuzz`,
    /// `node_config`), which must not send a DNS query for every name it makes up.
    NumericOnly,
}

fn parse_addr(field: String, text: &str, resolve: Resolve) -> Result<SocketAddr, NodeConfigError> {
    if let Ok(a) = text.parse::<SocketAddr>() {
        return Ok(a);
    }
    if resolve == Resolve::NumericOnly {
        return invalid(field, format!("{text:?} is not a numeric ip:port address"));
    }
    match text.to_socket_addrs() {
        Ok(mut it) => match it.next() {
            Some(a) => Ok(a),
            None => invalid(field, format!("{text:?} resolves to no address")),
        },
        Err(e) => invalid(field, format!("{text:?} is not a host:port address ({e})")),
    }
}

/// Parses and checks config text. Relative storage paths are taken from `base_dir`.
pub fn parse(
    text: &str,
    node_id: Option<u32>,
    base_dir: &Path,
) -> Result<NodeConfig, NodeConfigError> {
    parse_with(text, node_id, base_dir, Resolve::System)
}

/// [`parse`], resolving member addresses as `resolve` says.
pub fn parse_with(
    text: &str,
    node_id: Option<u32>,
    base_dir: &Path,
    resolve: Resolve,
) -> Result<NodeConfig, NodeConfigError> {
    let file: FileConfig =
        toml::from_str(text).map_err(|e| NodeConfigError::Syntax(e.to_string()))?;
    let Some(me) = node_id.or(file.node_id) else {
        return invalid("node_id", "no node id: give --id or a top-level node_id");
    };
    let (ring_members, members) = members(&file.members, base_dir, resolve)?;
    if !members.iter().any(|m| m.id == NodeId(me)) {
        return invalid("node_id", format!("node {me} is not among the members"));
    }
    // A leader-based protocol takes the proposer keys of `[ring]` itself (`leader.rs`) and
    // refuses the others, so the ring's own config stays at its defaults.
    let leader_based = matches!(
        file.protocol.as_deref(),
        Some("seqpaxos" | "raft" | "omnipaxos" | "raftrs")
    );
    let is_token = file.protocol.as_deref() == Some("token");
    if is_token {
        if let Some(key) = ring_keys_given(&file.ring).first() {
            return invalid(
                format!("ring.{key}"),
                "protocol = \"token\" takes its settings from [token], not [ring] \
                 (window_values, max_value_bytes and the windows are there)",
            );
        }
    } else if file.token.is_some() {
        return invalid("token", "only with protocol = \"token\"");
    }
    let ring_file = if leader_based || is_token {
        &FileRing::default()
    } else {
        &file.ring
    };
    let mut ring = ring_config(ring_file, ring_members)?;
    let mut transport = transport_config(&file.transport)?;
    if is_token && file.transport.unicast.is_none() {
        // Seed 002 §III-E: the token by UDP unicast.
        transport.unicast = Unicast::Udp;
    }
    transport.link_faults = link_faults(&file.link_faults, &members)?;
    let (protocol, mut ringpaxos, multicast) = protocol_config(&file, &ring.members)?;
    transport.multicast = multicast;
    let mut storage = storage_config(&file.storage, base_dir)?;
    let spares = spares(&file)?;
    let first: Vec<Member> = (ring.members.iter())
        .filter(|m| !spares.contains(&m.id))
        .cloned()
        .collect();
    let leader = leader::leader_config(&leader_sections(&file), &first, &spares, &storage.kind)?;
    if leader.is_some() {
        if !file.rings.is_empty() || file.multiring.is_some() {
            return invalid(
                "rings",
                "[[rings]] and [multiring] are Multi-Ring Paxos settings; a leader-based \
                 protocol runs one log",
            );
        }
        // Raft and Sequence Paxos snapshot and compact their logs (`raft/snapshot.rs`,
        // `seqpaxos/snapshot.rs`); the peer cores take no snapshot, so their log grows
        // with the run: a setting that would do nothing is refused.
        let snapshots = leader.as_ref().is_some_and(|l| l.takes_snapshots());
        if !snapshots {
            if file.storage.snapshot_interval_ms.is_some_and(|v| v > 0) {
                let name = leader.as_ref().map_or("this protocol", |l| l.name());
                return invalid(
                    "storage.snapshot_interval_ms",
                    format!(
                        "{name} takes no snapshots (among the leader-based protocols only \
                         raft and seqpaxos do); leave it out or set 0"
                    ),
                );
            }
            storage.snapshot_interval_ms = 0;
        } else if file.storage.snapshot_interval_ms.is_none() {
            // On memory storage too (see `StorageConfig::snapshot_interval_ms`).
            storage.snapshot_interval_ms = LEADER_SNAPSHOT_INTERVAL_MS_DEFAULT;
        }
    }

    // A Multi-Ring learner restarted on memory storage, behind what the acceptors still
    // hold, can skip a ring's instances but not its slot count, so without a snapshot to
    // install it stops merging for good (`abcast demo --protocol multiring --kill` left
    // both restarted nodes delivering nothing): snapshots on memory storage too.
    if !file.rings.is_empty()
        && storage.kind == StorageKind::Memory
        && file.storage.snapshot_interval_ms.is_none()
    {
        storage.snapshot_interval_ms = LEADER_SNAPSHOT_INTERVAL_MS_DEFAULT;
    }

    // With snapshots the coordinator trims acceptors below them, and a learner behind the
    // trim point must install a peer's snapshot rather than skip (`RingConfig`).
    let snapshots = storage.snapshot_interval_ms > 0;
    ring.learner_snapshots = snapshots;
    // A synced log holds each hop's votes for a group commit, so a ring needs more bytes in
    // flight to keep throughput: unless the file says otherwise, the proposer's window is
    // the larger SYNCED_WINDOW_BYTES_DEFAULT there (see `RingConfig::window_bytes`).
    let synced_window = matches!(storage.kind, StorageKind::Durable { sync: true })
        && file.ring.window_bytes.is_none();
    if synced_window {
        ring.window_bytes = SYNCED_WINDOW_BYTES_DEFAULT;
    }
    if let Some(rp) = ringpaxos.as_mut() {
        rp.learner_snapshots = snapshots;
        if synced_window {
            rp.window_bytes = SYNCED_WINDOW_BYTES_DEFAULT;
        }
    }
    let token = if is_token {
        let (tc, offset) = token_section(&file, &ring, &members, &storage, NodeId(me))?;
        if transport.unicast == Unicast::Udp {
            transport.control_port_offset = Some(offset);
        }
        Some(tc)
    } else {
        None
    };
    let multiring = multiring(&file, &ring)?;
    if multiring.is_some() && protocol == ProtocolKind::RingPaxos && transport.multicast.is_some() {
        // One multicast group per ring needs routing by group in the datagram transport;
        // until then every ring's phase 2A and decisions go as TCP copies.
        return invalid(
            "multicast",
            "Multi-Ring Paxos over Ring Paxos rings sends each ring's multicasts as TCP copies \
             for now (a multicast group per ring is not supported yet); remove [multicast]",
        );
    }
    let cfg = NodeConfig {
        cluster_id: file.cluster_id,
        node_id: NodeId(me),
        ring,
        members,
        transport,
        storage,
        multiring,
        protocol,
        ringpaxos,
        leader,
        spares,
        token,
        process_groups: file.token.as_ref().is_some_and(FileToken::process_groups),
    };
    if let Some(mr) = cfg.ringpaxos_rings() {
        for (i, spec) in mr.rings.iter().enumerate() {
            spec.ring.validate().map_err(|e| NodeConfigError::Invalid {
                field: format!("rings[{i}].{}", e.field),
                reason: e.reason,
            })?;
        }
    }
    Ok(cfg)
}

/// Every `[ring]` key the file sets.
fn ring_keys_given(r: &FileRing) -> Vec<&'static str> {
    [
        ("p1_preexecution_number", r.p1_preexecution_number.is_some()),
        ("p1_resend_ms", r.p1_resend_ms.is_some()),
        ("p2_resend_ms", r.p2_resend_ms.is_some()),
        ("value_resend_ms", r.value_resend_ms.is_some()),
        ("batch_max_bytes", r.batch_max_bytes.is_some()),
        ("batch_linger_us", r.batch_linger_us.is_some()),
        ("window_values", r.window_values.is_some()),
        ("window_bytes", r.window_bytes.is_some()),
        ("max_value_bytes", r.max_value_bytes.is_some()),
        ("max_open_instances", r.max_open_instances.is_some()),
        (
            "coordinator_queue_bytes",
            r.coordinator_queue_bytes.is_some(),
        ),
        ("heartbeat_interval_ms", r.heartbeat_interval_ms.is_some()),
        ("failure_timeout_ms", r.failure_timeout_ms.is_some()),
        ("retrieve_timeout_ms", r.retrieve_timeout_ms.is_some()),
        ("retrieve_max_instances", r.retrieve_max_instances.is_some()),
        (
            "store_capacity_instances",
            r.store_capacity_instances.is_some(),
        ),
        ("store_capacity_bytes", r.store_capacity_bytes.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, given)| given.then_some(k))
    .collect()
}

/// `protocol = "token"`: `[token]` over the members, and what the token ring cannot take
/// refused by name (roles other than all three, a log on disk or none, snapshots, rings).
fn token_section(
    file: &FileConfig,
    ring: &RingConfig,
    addrs: &[MemberAddr],
    storage: &StorageConfig,
    me: NodeId,
) -> Result<(TokenConfig, u16), NodeConfigError> {
    for (i, m) in ring.members.iter().enumerate() {
        if m.roles != Roles::PAL {
            return invalid(
                format!("members[{i}].roles"),
                "every member of a token ring proposes and delivers; leave roles out",
            );
        }
    }
    if storage.kind != StorageKind::Memory {
        return invalid(
            "storage.kind",
            format!(
                "\"{}\": the token ring keeps its messages in memory (Totem's recovery \
                 carries them to a new ring); use \"memory\"",
                storage.kind
            ),
        );
    }
    if storage.snapshot_interval_ms > 0 {
        return invalid(
            "storage.snapshot_interval_ms",
            "the token ring takes no snapshots; leave it out or set 0",
        );
    }
    if !file.rings.is_empty() || file.multiring.is_some() {
        return invalid(
            "rings",
            "[[rings]] and [multiring] are Multi-Ring Paxos settings; the token ring is one ring",
        );
    }
    let ids: Vec<NodeId> = ring.members.iter().map(|m| m.id).collect();
    let (tc, offset) = token::token_config(file.token.as_ref(), &ids, me)?;
    for (i, m) in addrs.iter().enumerate() {
        if m.addr.port().checked_add(offset).is_none() {
            return invalid(
                "token.token_port_offset",
                format!(
                    "members[{i}].addr {} plus {offset} is past port 65535: its token socket \
                     would have no port",
                    m.addr
                ),
            );
        }
    }
    Ok((tc, offset))
}

/// The leader-based protocols' view of the file (`leader.rs`).
fn leader_sections(file: &FileConfig) -> leader::LeaderSections<'_> {
    let r = &file.ring;
    let ring_only_keys = [
        ("p1_preexecution_number", r.p1_preexecution_number.is_some()),
        ("p1_resend_ms", r.p1_resend_ms.is_some()),
        ("p2_resend_ms", r.p2_resend_ms.is_some()),
        ("max_open_instances", r.max_open_instances.is_some()),
        (
            "coordinator_queue_bytes",
            r.coordinator_queue_bytes.is_some(),
        ),
        ("heartbeat_interval_ms", r.heartbeat_interval_ms.is_some()),
        ("failure_timeout_ms", r.failure_timeout_ms.is_some()),
        ("retrieve_timeout_ms", r.retrieve_timeout_ms.is_some()),
        ("retrieve_max_instances", r.retrieve_max_instances.is_some()),
        (
            "store_capacity_instances",
            r.store_capacity_instances.is_some(),
        ),
        ("store_capacity_bytes", r.store_capacity_bytes.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, given)| given.then_some(k))
    .collect();
    leader::LeaderSections {
        protocol: file.protocol.as_deref().unwrap_or("uring"),
        seqpaxos: file.seqpaxos.as_ref(),
        raft: file.raft.as_ref(),
        omnipaxos: file.omnipaxos.as_ref(),
        raftrs: file.raftrs.as_ref(),
        batch: leader::RingBatchKeys {
            batch_max_bytes: r.batch_max_bytes,
            batch_linger_us: r.batch_linger_us,
            window_values: r.window_values,
            window_bytes: r.window_bytes,
            max_value_bytes: r.max_value_bytes,
            value_resend_ms: r.value_resend_ms,
        },
        ring_only_keys,
    }
}

/// The members with `spare = true`, checked: only for the protocols that reconfigure, and
/// never every member.
fn spares(file: &FileConfig) -> Result<Vec<NodeId>, NodeConfigError> {
    let mut spares = Vec::new();
    for (i, m) in file.members.iter().enumerate() {
        if m.spare != Some(true) {
            continue;
        }
        let protocol = file.protocol.as_deref().unwrap_or("uring");
        if !matches!(protocol, "seqpaxos" | "raft") {
            return invalid(
                format!("members[{i}].spare"),
                format!(
                    "protocol = \"{protocol}\" cannot add nodes to its configuration; spares \
                     are for protocol = \"seqpaxos\" or \"raft\""
                ),
            );
        }
        spares.push(NodeId(m.id));
    }
    if !spares.is_empty() && spares.len() == file.members.len() {
        return invalid(
            "members",
            "every member is a spare: the first configuration needs at least one member",
        );
    }
    Ok(spares)
}

/// `[[members]]`: the ring's members with their roles, and their addresses (each used once).
fn members(
    file: &[FileMember],
    base_dir: &Path,
    resolve: Resolve,
) -> Result<(Vec<Member>, Vec<MemberAddr>), NodeConfigError> {
    if file.is_empty() {
        return invalid("members", "the ring has no members");
    }
    let mut ring_members = Vec::new();
    let mut members = Vec::new();
    let mut used: Vec<(SocketAddr, String)> = Vec::new();
    for (i, m) in file.iter().enumerate() {
        let field = |name: &str| format!("members[{i}].{name}");
        if file[..i].iter().any(|o| o.id == m.id) {
            return invalid(field("id"), format!("node id {} appears twice", m.id));
        }
        let addr = parse_addr(field("addr"), &m.addr, resolve)?;
        let client_addr = match &m.client_addr {
            Some(a) => Some(parse_addr(field("client_addr"), a, resolve)?),
            None => None,
        };
        for (a, name) in [(Some(addr), "addr"), (client_addr, "client_addr")] {
            let Some(a) = a else { continue };
            if let Some((_, by)) = used.iter().find(|(u, _)| *u == a) {
                return invalid(field(name), format!("{a} is already used by {by}"));
            }
            used.push((a, field(name)));
        }
        let client_path = match &m.client_path {
            Some(p) => Some(client_path(field("client_path"), p, base_dir)?),
            None => None,
        };
        if let Some(p) = &client_path
            && let Some(j) = members
                .iter()
                .position(|o: &MemberAddr| o.client_path.as_ref() == Some(p))
        {
            return invalid(
                field("client_path"),
                format!(
                    "{} is already used by members[{j}].client_path",
                    p.display()
                ),
            );
        }
        let roles = roles(field("roles"), m.roles.as_deref())?;
        ring_members.push(Member {
            id: NodeId(m.id),
            roles,
        });
        members.push(MemberAddr {
            id: NodeId(m.id),
            addr,
            client_addr,
            client_path,
        });
    }
    Ok((ring_members, members))
}

/// A member's `client_path`: a Unix socket path Linux can bind, taken from `base_dir`
/// when relative.
fn client_path(field: String, text: &str, base_dir: &Path) -> Result<PathBuf, NodeConfigError> {
    if text.is_empty() {
        return invalid(field, "an empty path");
    }
    if text.contains('\0') {
        return invalid(field, "a path with a NUL byte");
    }
    let path = base_dir.join(text);
    let bytes = path.as_os_str().len();
    if bytes > CLIENT_PATH_MAX_BYTES {
        return invalid(
            field,
            format!(
                "{} is {bytes} bytes long; a Unix socket path holds at most \
                 {CLIENT_PATH_MAX_BYTES}",
                path.display()
            ),
        );
    }
    Ok(path)
}

/// A member's `roles` list; none given: proposer, acceptor and learner.
fn roles(field: String, list: Option<&[String]>) -> Result<Roles, NodeConfigError> {
    match list {
        None => Ok(Roles::PAL),
        Some(list) => {
            let mut r = Roles {
                proposer: false,
                acceptor: false,
                learner: false,
            };
            for name in list {
                match name.as_str() {
                    "proposer" => r.proposer = true,
                    "acceptor" => r.acceptor = true,
                    "learner" => r.learner = true,
                    other => {
                        return invalid(
                            field.clone(),
                            format!(
                                "unknown role {other:?} (expected proposer, acceptor or learner)"
                            ),
                        );
                    }
                }
            }
            Ok(r)
        }
    }
}

/// `[ring]`: seed 000's table 4.1 defaults, overridden field by field, then checked.
fn ring_config(r: &FileRing, members: Vec<Member>) -> Result<RingConfig, NodeConfigError> {
    let mut ring = RingConfig {
        members,
        ..RingConfig::default()
    };
    macro_rules! set {
        ($file:ident => $cfg:ident) => {
            if let Some(v) = r.$file {
                ring.$cfg = v;
            }
        };
        ($file:ident => $cfg:ident ms) => {
            if let Some(v) = r.$file {
                ring.$cfg = ms_to_us(stringify!($file), v)?;
            }
        };
    }
    set!(p1_preexecution_number => p1_preexecution_number);
    set!(p1_resend_ms => p1_resend_us ms);
    set!(p2_resend_ms => p2_resend_us ms);
    set!(value_resend_ms => value_resend_us ms);
    set!(batch_max_bytes => batch_max_bytes);
    set!(batch_linger_us => batch_linger_us);
    set!(window_values => window_values);
    set!(window_bytes => window_bytes);
    set!(max_value_bytes => max_value_bytes);
    set!(max_open_instances => max_open_instances);
    set!(coordinator_queue_bytes => coordinator_queue_bytes);
    set!(heartbeat_interval_ms => heartbeat_interval_us ms);
    set!(failure_timeout_ms => failure_timeout_us ms);
    set!(retrieve_timeout_ms => retrieve_timeout_us ms);
    set!(retrieve_max_instances => retrieve_max_instances);
    set!(store_capacity_instances => store_capacity_instances);
    set!(store_capacity_bytes => store_capacity_bytes);
    if let Err(e) = ring.validate() {
        // RingConfig names its fields in microseconds; the file names them in ms.
        let field = match e.field {
            f if f.ends_with("_us") && f != "batch_linger_us" => {
                format!("ring.{}_ms", &f[..f.len() - 3])
            }
            "members" | "members.roles" => e.field.to_string(),
            f => format!("ring.{f}"),
        };
        return invalid(field, e.reason);
    }
    Ok(ring)
}

/// `[transport]`: socket buffers, queues and reconnect backoff, checked.
fn transport_config(t: &FileTransport) -> Result<TransportConfig, NodeConfigError> {
    let mut transport = TransportConfig::default();
    if let Some(v) = t.buffer_size {
        transport.buffer_size = v;
    }
    if let Some(v) = t.tcp_nodelay {
        transport.tcp_nodelay = v;
    }
    if let Some(v) = t.send_queue_bytes {
        transport.send_queue_bytes = v;
    }
    if let Some(v) = t.client_queue_bytes {
        transport.client_queue_bytes = v;
    }
    if let Some(v) = t.client_shm_bytes {
        if v != 0 && !abcast_runtime::shm::valid_ring_bytes(v) {
            return invalid(
                "transport.client_shm_bytes",
                format!(
                    "{v}: 0 (no shared memory) or a power of two from {} to {}",
                    abcast_runtime::shm::RING_BYTES_MIN,
                    abcast_runtime::shm::RING_BYTES_MAX
                ),
            );
        }
        transport.client_shm_bytes = v;
    }
    if let Some(v) = t.backoff_ms_min {
        transport.backoff_ms_min = v;
    }
    if let Some(v) = t.backoff_ms_max {
        transport.backoff_ms_max = v;
    }
    if let Some(v) = t.busy_poll_us {
        transport.busy_poll_us = v;
    }
    if let Some(v) = &t.unicast {
        transport.unicast = match Unicast::parse(v) {
            Some(u) => u,
            None => {
                return invalid(
                    "transport.unicast",
                    format!("{v:?}, expected \"tcp\" or \"udp\""),
                );
            }
        };
    }
    if transport.buffer_size > (1 << 30) {
        return invalid("transport.buffer_size", "at most 1 GiB");
    }
    if transport.busy_poll_us > 1_000_000 {
        return invalid(
            "transport.busy_poll_us",
            "at most 1000000 (a second of spinning per event is a bug, not a setting)",
        );
    }
    if transport.send_queue_bytes == 0 {
        return invalid("transport.send_queue_bytes", "must be greater than zero");
    }
    if transport.client_queue_bytes == 0 {
        return invalid("transport.client_queue_bytes", "must be greater than zero");
    }
    if transport.backoff_ms_min == 0 {
        return invalid("transport.backoff_ms_min", "must be greater than zero");
    }
    if transport.backoff_ms_max < transport.backoff_ms_min {
        return invalid(
            "transport.backoff_ms_max",
            "must be at least backoff_ms_min",
        );
    }
    Ok(transport)
}

/// `[storage]`: the acceptor store's kind and the options that apply to it.
fn storage_config(file: &FileStorage, base_dir: &Path) -> Result<StorageConfig, NodeConfigError> {
    let kind = match file.kind.as_deref() {
        None | Some("memory") => StorageKind::Memory,
        Some("none") => StorageKind::None,
        Some("durable") => StorageKind::Durable {
            sync: file.sync.unwrap_or(true),
        },
        Some(other) => {
            return invalid(
                "storage.kind",
                format!("{other:?}: expected \"memory\", \"durable\" or \"none\""),
            );
        }
    };
    if file.sync.is_some() && !matches!(kind, StorageKind::Durable { .. }) {
        return invalid(
            "storage.sync",
            format!("applies to kind = \"durable\" only (kind is \"{kind}\")"),
        );
    }
    if file.sync_thread.is_some() && !matches!(kind, StorageKind::Durable { sync: true }) {
        return invalid(
            "storage.sync_thread",
            format!("applies to kind = \"durable\" with sync = true only (kind is \"{kind}\")"),
        );
    }
    if file.direct_io.is_some() && !matches!(kind, StorageKind::Durable { sync: true }) {
        return invalid(
            "storage.direct_io",
            format!("applies to kind = \"durable\" with sync = true only (kind is \"{kind}\")"),
        );
    }
    let segment_bytes = file
        .segment_bytes
        .unwrap_or(DurableOptions::SEGMENT_BYTES_DEFAULT);
    if !(1 << 20..=DurableOptions::SEGMENT_BYTES_MAX).contains(&segment_bytes) {
        return invalid(
            "storage.segment_bytes",
            format!(
                "{segment_bytes}: expected 1 MiB to {} bytes",
                DurableOptions::SEGMENT_BYTES_MAX
            ),
        );
    }
    let snapshot_interval_ms = file.snapshot_interval_ms.unwrap_or(match kind {
        StorageKind::Durable { .. } => 1000,
        _ => 0,
    });
    if snapshot_interval_ms > 86_400_000 {
        return invalid(
            "storage.snapshot_interval_ms",
            format!("{snapshot_interval_ms}: at most one day (86400000)"),
        );
    }
    let dir = PathBuf::from(file.dir.as_deref().unwrap_or(DEFAULT_DATA_DIR));
    let dir = if dir.is_relative() {
        base_dir.join(dir)
    } else {
        dir
    };
    Ok(StorageConfig {
        dir,
        kind,
        segment_bytes,
        snapshot_interval_ms,
        sync_thread: file.sync_thread.unwrap_or(true),
        direct_io: file.direct_io.unwrap_or(true),
    })
}

/// How often a Raft or Sequence Paxos node snapshots and compacts its log when the file
/// does not say, whatever the storage (`StorageConfig::snapshot_interval_ms`).
const LEADER_SNAPSHOT_INTERVAL_MS_DEFAULT: u64 = 1000;

/// Ring Paxos keeps this much of a datagram for the fields of a phase 2A besides its batch
/// (ballot, epoch fingerprint, ring, a few piggy-backed decisions); a 2A with more
/// decisions than fit falls back to TCP at run time.
pub const MULTICAST_2A_RESERVE_BYTES: usize = 1024;
/// `batch_max_bytes` when `[multicast]` is set and `[ring]` does not say: the largest round
/// size whose batches (up to 1.5 times it) still fit one datagram. Fewer, larger datagrams
/// cost every learner fewer wakeups and checksums per byte (`bench multicast`: 40 KiB
/// batches lost less per-learner throughput from 1 to 5 learners than 32 KiB ones).
pub const MULTICAST_BATCH_MAX_BYTES: usize = 40 << 10;
/// The largest `max_value_bytes` with `[multicast]`: a value alone in its batch, plus the
/// batch's fields, in one datagram.
pub const MULTICAST_VALUE_MAX_BYTES: usize = multicast::MAX_BODY_BYTES - MULTICAST_2A_RESERVE_BYTES;

/// `protocol`, `[ringpaxos]` and `[multicast]`: which protocol runs, Ring Paxos' config
/// (from `members`, the `[ring]` keys both protocols share, and `[ringpaxos]`), and the
/// multicast socket.
fn protocol_config(
    file: &FileConfig,
    members: &[Member],
) -> Result<
    (
        ProtocolKind,
        Option<RingPaxosConfig>,
        Option<MulticastConfig>,
    ),
    NodeConfigError,
> {
    let kind = match file.protocol.as_deref() {
        None | Some("uring") => ProtocolKind::URing,
        Some("ringpaxos") => ProtocolKind::RingPaxos,
        Some("token") => {
            if file.ringpaxos.is_some() {
                return invalid("ringpaxos", "only with protocol = \"ringpaxos\"");
            }
            let multicast = file.multicast.as_ref().map(multicast_config).transpose()?;
            return Ok((ProtocolKind::Token, None, multicast));
        }
        Some("seqpaxos" | "raft" | "omnipaxos" | "raftrs") => {
            if file.multicast.is_some() {
                return invalid(
                    "multicast",
                    "the leader-based protocols send no multicasts; remove [multicast]",
                );
            }
            if file.ringpaxos.is_some() {
                return invalid("ringpaxos", "only with protocol = \"ringpaxos\"");
            }
            return Ok((ProtocolKind::Leader, None, None));
        }
        Some(other) => {
            return invalid(
                "protocol",
                format!(
                    "{other:?}: expected \"uring\", \"ringpaxos\", \"seqpaxos\", \"raft\", \
                     \"omnipaxos\", \"raftrs\" or \"token\""
                ),
            );
        }
    };
    let multicast = match &file.multicast {
        None => None,
        Some(m) => Some(multicast_config(m)?),
    };
    if kind == ProtocolKind::URing {
        if file.multicast.is_some() {
            return invalid(
                "multicast",
                "U-Ring Paxos sends no multicasts; set protocol = \"ringpaxos\" or remove [multicast]",
            );
        }
        if file.ringpaxos.is_some() {
            return invalid("ringpaxos", "only with protocol = \"ringpaxos\"");
        }
        return Ok((kind, None, None));
    }
    let r = &file.ring;
    for (given, key) in [
        (r.p1_preexecution_number.is_some(), "p1_preexecution_number"),
        (r.max_open_instances.is_some(), "max_open_instances"),
    ] {
        if given {
            return invalid(
                format!("ring.{key}"),
                "U-Ring Paxos only; Ring Paxos runs phase 1 for every instance at once and \
                 bounds open instances with [ringpaxos] buffer_instances",
            );
        }
    }
    let mut rp = RingPaxosConfig {
        members: members.to_vec(),
        ..RingPaxosConfig::default()
    };
    if multicast.is_some() {
        rp.batch_max_bytes = MULTICAST_BATCH_MAX_BYTES;
        rp.max_value_bytes = MULTICAST_VALUE_MAX_BYTES;
    }
    let ms = |field: &str, v: Option<u64>| v.map(|v| ms_to_us(field, v)).transpose();
    macro_rules! set {
        ($dst:expr, $v:expr) => {
            if let Some(v) = $v {
                $dst = v;
            }
        };
    }
    set!(rp.p1_resend_us, ms("p1_resend_ms", r.p1_resend_ms)?);
    set!(rp.p2_resend_us, ms("p2_resend_ms", r.p2_resend_ms)?);
    set!(
        rp.value_resend_us,
        ms("value_resend_ms", r.value_resend_ms)?
    );
    set!(rp.batch_max_bytes, r.batch_max_bytes);
    set!(rp.batch_linger_us, r.batch_linger_us);
    set!(rp.window_values, r.window_values);
    set!(rp.window_bytes, r.window_bytes);
    set!(rp.max_value_bytes, r.max_value_bytes);
    set!(rp.coordinator_queue_bytes, r.coordinator_queue_bytes);
    set!(
        rp.heartbeat_interval_us,
        ms("heartbeat_interval_ms", r.heartbeat_interval_ms)?
    );
    set!(
        rp.failure_timeout_us,
        ms("failure_timeout_ms", r.failure_timeout_ms)?
    );
    set!(
        rp.retrieve_timeout_us,
        ms("retrieve_timeout_ms", r.retrieve_timeout_ms)?
    );
    set!(rp.retrieve_max_instances, r.retrieve_max_instances);
    set!(rp.store_capacity_instances, r.store_capacity_instances);
    set!(rp.store_capacity_bytes, r.store_capacity_bytes);
    if let Some(x) = &file.ringpaxos {
        set!(rp.buffer_instances, x.buffer_instances);
        set!(rp.buffer_bytes, x.buffer_bytes);
        if let Some(v) = x.ring_timeout_ms {
            rp.ring_timeout_us = v.checked_mul(1000).map_or_else(
                || invalid("ringpaxos.ring_timeout_ms", format!("{v} ms is too large")),
                Ok,
            )?;
        }
        set!(rp.decision_linger_us, x.decision_linger_us);
    }
    if let Err(e) = rp.validate() {
        let field = match e.field {
            "buffer_instances" | "buffer_bytes" | "decision_linger_us" => {
                format!("ringpaxos.{}", e.field)
            }
            "ring_timeout_us" => "ringpaxos.ring_timeout_ms".to_string(),
            "members" | "members.roles" => e.field.to_string(),
            f if f.ends_with("_us") && f != "batch_linger_us" => {
                format!("ring.{}_ms", &f[..f.len() - 3])
            }
            f => format!("ring.{f}"),
        };
        return invalid(field, e.reason);
    }
    if multicast.is_some() {
        // A batch closes once it holds batch_max_bytes, so it can reach 1.5 times that (a
        // value of half or more travels alone), and its phase 2A is one datagram.
        let batch_limit = (MULTICAST_VALUE_MAX_BYTES * 2) / 3;
        if rp.batch_max_bytes > batch_limit {
            return invalid(
                "ring.batch_max_bytes",
                format!(
                    "{} bytes is too large for [multicast]: a batch can grow to 1.5 times it \
                     and its phase 2A must fit one datagram; at most {batch_limit}",
                    rp.batch_max_bytes
                ),
            );
        }
        if rp.max_value_bytes > MULTICAST_VALUE_MAX_BYTES {
            return invalid(
                "ring.max_value_bytes",
                format!(
                    "{} bytes is too large for [multicast]: a value's phase 2A must fit one \
                     datagram; at most {MULTICAST_VALUE_MAX_BYTES}",
                    rp.max_value_bytes
                ),
            );
        }
    }
    Ok((kind, Some(rp), multicast))
}

/// The `[multicast]` table, checked.
fn multicast_config(m: &FileMulticast) -> Result<MulticastConfig, NodeConfigError> {
    let group = match m.group.parse::<std::net::SocketAddrV4>() {
        Ok(g) => g,
        Err(e) => {
            return invalid(
                "multicast.group",
                format!("{:?} is not an IPv4 address:port ({e})", m.group),
            );
        }
    };
    let mut c = MulticastConfig::new(group);
    if let Some(i) = &m.interface {
        c.interface = match i.parse() {
            Ok(a) => a,
            Err(e) => {
                return invalid(
                    "multicast.interface",
                    format!("{i:?} is not an IPv4 address ({e})"),
                );
            }
        };
    }
    if let Some(v) = m.ttl {
        c.ttl = v;
    }
    if let Some(v) = m.multicast_loop {
        c.multicast_loop = v;
    }
    if let Some(v) = m.recv_buffer_bytes {
        c.recv_buffer_bytes = v;
    }
    if let Some(v) = m.send_buffer_bytes {
        c.send_buffer_bytes = v;
    }
    if let Some(v) = m.segment_bytes {
        c.segment_bytes = v;
    }
    if let Err((field, reason)) = c.validate() {
        return invalid(format!("multicast.{field}"), reason);
    }
    Ok(c)
}

fn group_id(field: String, g: u64) -> Result<GroupId, NodeConfigError> {
    match u16::try_from(g) {
        Ok(g) if g <= abcast_core::multiring::config::MAX_GROUP => Ok(GroupId(g)),
        _ => invalid(
            field,
            format!(
                "{g}, at most {} (value ids carry the ring in 8 bits)",
                abcast_core::multiring::config::MAX_GROUP
            ),
        ),
    }
}

/// Builds the Multi-Ring configuration from `[[rings]]` and `[multiring]`, or `None` when
/// the file has no `[[rings]]` (one U-Ring Paxos ring over `[[members]]`). `template` is the
/// single ring built from `[[members]]` and `[ring]`: every ring gets its parameters.
fn multiring(
    file: &FileConfig,
    template: &RingConfig,
) -> Result<Option<MultiRingConfig>, NodeConfigError> {
    if file.rings.is_empty() {
        if file.multiring.is_some() {
            return invalid(
                "multiring",
                "[multiring] without any [[rings]]: add the rings or remove the table",
            );
        }
        return Ok(None);
    }
    let all: Vec<NodeId> = template.members.iter().map(|m| m.id).collect();
    let mut cfg = MultiRingConfig::default();
    for (i, r) in file.rings.iter().enumerate() {
        let field = |name: &str| format!("rings[{i}].{name}");
        let group = group_id(field("group"), r.group)?;
        let ids: Vec<NodeId> = match &r.members {
            None => all.clone(),
            Some(list) => list.iter().map(|&id| NodeId(id)).collect(),
        };
        if ids.is_empty() {
            return invalid(field("members"), "a ring needs members");
        }
        for (k, id) in ids.iter().enumerate() {
            if !all.contains(id) {
                return invalid(
                    field("members"),
                    format!("node {} is not among the [[members]]", id.0),
                );
            }
            if ids[..k].contains(id) {
                return invalid(field("members"), format!("node {} appears twice", id.0));
            }
        }
        for (name, list) in [
            ("proposers", &r.proposers),
            ("acceptors", &r.acceptors),
            ("learners", &r.learners),
        ] {
            if let Some(id) = list
                .iter()
                .flatten()
                .find(|id| !ids.contains(&NodeId(**id)))
            {
                return invalid(
                    field(name),
                    format!("node {id} is not a member of this ring"),
                );
            }
        }
        let has = |list: &Option<Vec<u32>>, id: NodeId, default: bool| {
            list.as_ref().map_or(default, |l| l.contains(&id.0))
        };
        let members = ids
            .iter()
            .map(|&id| {
                let own = template
                    .members
                    .iter()
                    .find(|m| m.id == id)
                    .map_or(Roles::PAL, |m| m.roles);
                Member {
                    id,
                    roles: Roles {
                        proposer: has(&r.proposers, id, own.proposer),
                        acceptor: has(&r.acceptors, id, own.acceptor),
                        learner: has(&r.learners, id, own.learner),
                    },
                }
            })
            .collect();
        cfg.rings.push(RingSpec {
            group,
            ring: RingConfig {
                members,
                ..template.clone()
            },
        });
    }
    // The merge order is the group order.
    cfg.rings.sort_by_key(|r| r.group);
    let m = file.multiring.as_ref();
    let ms = |name: &str, v: u64| match v.checked_mul(1000) {
        Some(us) => Ok(us),
        None => invalid(format!("multiring.{name}"), format!("{v} ms is too large")),
    };
    if let Some(m) = m {
        if let Some(v) = m.merge_m {
            cfg.merge_m = v;
        }
        if let Some(v) = m.skip_interval_ms {
            cfg.skip_interval_us = ms("skip_interval_ms", v)?;
        }
        if let Some(v) = m.lambda_factor_pct {
            cfg.lambda_factor_pct = v;
        }
        if let Some(v) = m.lambda_min_slots {
            cfg.lambda_min_slots = v;
        }
        if let Some(v) = m.control_retry_ms {
            cfg.control_retry_us = ms("control_retry_ms", v)?;
        }
        if let Some(v) = m.merge_queue_instances {
            cfg.merge_queue_instances = v;
        }
        if let Some(v) = m.merge_queue_bytes {
            cfg.merge_queue_bytes = v;
        }
        cfg.propose_to = match &m.propose_to {
            None => ProposeTo::FirstRing,
            Some(FileProposeTo::Name(n)) if n == "first" => ProposeTo::FirstRing,
            Some(FileProposeTo::Name(n)) if n == "round-robin" => ProposeTo::RoundRobin,
            Some(FileProposeTo::Name(n)) => {
                return invalid(
                    "multiring.propose_to",
                    format!("{n:?}: expected \"first\", \"round-robin\" or a ring's group"),
                );
            }
            Some(FileProposeTo::Group(g)) => {
                ProposeTo::Group(group_id("multiring.propose_to".into(), *g)?)
            }
        };
        for (i, sub) in m.subscriptions.iter().enumerate() {
            let mut rings = Vec::with_capacity(sub.rings.len());
            for &g in &sub.rings {
                rings.push(group_id(format!("multiring.subscriptions[{i}].rings"), g)?);
            }
            if cfg.subscriptions.iter().any(|(n, _)| n.0 == sub.node) {
                return invalid(
                    format!("multiring.subscriptions[{i}].node"),
                    format!("node {} is listed twice", sub.node),
                );
            }
            cfg.subscriptions.push((NodeId(sub.node), rings));
        }
    }
    if let Err(e) = cfg.validate() {
        let field = match e.field {
            "rings" | "rings.group" => e.field.to_string(),
            f if f.ends_with("_us") => format!("multiring.{}_ms", &f[..f.len() - 3]),
            f if f.starts_with("members") => format!("rings.{f}"),
            f => format!("multiring.{f}"),
        };
        return invalid(field, e.reason);
    }
    Ok(Some(cfg))
}

/// Converts and checks the `[[link_faults]]` entries against the members.
fn link_faults(
    entries: &[FileLinkFault],
    members: &[MemberAddr],
) -> Result<Vec<LinkFault>, NodeConfigError> {
    let mut rules = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let delay_us = e.delay_us.unwrap_or(0);
        let loss_ppm = e.loss_ppm.unwrap_or(0);
        let Ok(loss_ppm) = u32::try_from(loss_ppm) else {
            return invalid(
                format!("link_faults[{i}].loss_ppm"),
                format!("{loss_ppm}, at most {}", linkfault::MAX_LOSS_PPM),
            );
        };
        let group = match e.group {
            None => None,
            Some(g) => match u16::try_from(g) {
                Ok(g) => Some(g),
                Err(_) => {
                    return invalid(
                        format!("link_faults[{i}].group"),
                        format!("{g}, at most {}", u16::MAX),
                    );
                }
            },
        };
        let lane = match e.lane.as_deref() {
            None => None,
            Some(name) => match linkfault::parse_lane(name) {
                Some(l) => Some(l),
                None => {
                    return invalid(
                        format!("link_faults[{i}].lane"),
                        format!(
                            "{name:?}: expected \"data\" (data messages; seed 002 loses \
                             only those) or \"control\" (the token ring's token)"
                        ),
                    );
                }
            },
        };
        rules.push(LinkFault {
            from: e.from.map(NodeId),
            to: e.to.map(NodeId),
            delay_us,
            loss_ppm,
            group,
            lane,
        });
    }
    let ids: Vec<NodeId> = members.iter().map(|m| m.id).collect();
    // Resolving checks ids, ranges and overlaps for the whole cluster, so every node refuses
    // the same file, not only the nodes whose links a bad rule shapes.
    if let Err(e) = linkfault::resolve(&rules, &ids) {
        return invalid(e.field, e.reason);
    }
    Ok(rules)
}

/// The `[[link_faults]]` array for `rules`, for programs that write node configs (set it
/// with `demo::set_toml_key(table, "link_faults", value)`, or through
/// `ClusterSpec::config_edits` as `("link_faults", value)`).
pub fn link_faults_toml(rules: &[LinkFault]) -> toml::Value {
    let int = |v: u64| toml::Value::Integer(i64::try_from(v).unwrap_or(i64::MAX));
    toml::Value::Array(
        rules
            .iter()
            .map(|r| {
                let mut t = toml::Table::new();
                if let Some(from) = r.from {
                    t.insert("from".into(), int(u64::from(from.0)));
                }
                if let Some(to) = r.to {
                    t.insert("to".into(), int(u64::from(to.0)));
                }
                t.insert("delay_us".into(), int(r.delay_us));
                t.insert("loss_ppm".into(), int(u64::from(r.loss_ppm)));
                if let Some(g) = r.group {
                    t.insert("group".into(), int(u64::from(g)));
                }
                if let Some(l) = r.lane {
                    t.insert(
                        "lane".into(),
                        toml::Value::String(linkfault::lane_name(l).into()),
                    );
                }
                toml::Value::Table(t)
            })
            .collect(),
    )
}

/// A config for `n` nodes on 127.0.0.1: node `i` listens for peers on `base_port + i` and
/// for clients on `base_port + 100 + i`. Every ring and transport field keeps its default.
pub fn local_cluster(n: usize, base_port: u16) -> String {
    let mut s = String::new();
    s.push_str(
        "# abcast cluster on one machine; start node i with `abcast node --config FILE --id i`.\n",
    );
    s.push_str("cluster_id = 1\n\n");
    for i in 0..n {
        let peer = u32::from(base_port) + i as u32;
        let client = peer + 100;
        s.push_str("[[members]]\n");
        s.push_str(&format!("id = {i}\n"));
        s.push_str(&format!("addr = \"127.0.0.1:{peer}\"\n"));
        s.push_str(&format!("client_addr = \"127.0.0.1:{client}\"\n"));
        s.push_str("roles = [\"proposer\", \"acceptor\", \"learner\"]\n\n");
    }
    s.push_str(
        "[ring]\n# every field optional; see RingConfig (times in ms, batch_linger_us in us)\n\n",
    );
    s.push_str(
        "[transport]\nbuffer_size = 2097152\ntcp_nodelay = true\nsend_queue_bytes = 268435456\n\n",
    );
    s.push_str(&format!(
        "[storage]\nkind = \"memory\"\ndir = \"{DEFAULT_DATA_DIR}\"\n"
    ));
    s
}

/// The proposer's window in bytes when acceptors sync their log and the file sets none:
/// the window the memory default was before it became 2 MiB. At 8 KiB values, `bench
/// storage` measured the synced log at 5.4 Gbit/s with it (2026-11-23, 3 runs) and 3.9
/// Gbit/s in a run with 2 MiB; the memory back-end ran the same with either.
pub const SYNCED_WINDOW_BYTES_DEFAULT: usize = 16 << 20;

/// Why the incarnation marker could not be read or written.
#[derive(Debug)]
pub struct MarkerError {
    pub path: PathBuf,
    pub reason: String,
}

impl fmt::Display for MarkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "incarnation marker {}: {}",
            self.path.display(),
            self.reason
        )
    }
}

impl std::error::Error for MarkerError {}

/// The environment variable that selects a deliberately broken variant of the protocol
/// (`abcast_core::mutation`) in a node built with the `mutations` feature: the chaos suite
/// (`abcast chaos`) runs such a build to show it reports the violation. A build without the
/// feature refuses any name here, so a node built for use never runs a broken variant.
pub const MUTATION_ENV: &str = "ABCAST_MUTATION";

/// Selects the broken variant `name` (a `Mutation` name, e.g. `no_sync_before_vote`) in
/// every protocol configuration `cfg` holds. Refused without the `mutations` feature, and
/// for the peer crates' cores (omnipaxos, raftrs), which have no broken variants.
pub fn select_mutation(cfg: &mut NodeConfig, name: &str) -> Result<(), NodeConfigError> {
    let m: abcast_core::mutation::Mutation =
        name.parse().or_else(|e: String| invalid(MUTATION_ENV, e))?;
    let set = |slot: &mut abcast_core::mutation::Slot| {
        slot.set(Some(m)).or_else(|e| invalid(MUTATION_ENV, e))
    };
    set(&mut cfg.ring.mutation)?;
    if let Some(rp) = cfg.ringpaxos.as_mut() {
        set(&mut rp.mutation)?;
    }
    if let Some(mr) = cfg.multiring.as_mut() {
        for r in &mut mr.rings {
            set(&mut r.ring.mutation)?;
        }
    }
    if let Some(t) = cfg.token.as_mut() {
        set(&mut t.mutation)?;
    }
    match cfg.leader.as_mut() {
        Some(LeaderProtocol::SeqPaxos(c)) => set(&mut c.mutation)?,
        Some(LeaderProtocol::Raft(c)) => set(&mut c.mutation)?,
        Some(_) => {
            return invalid(
                MUTATION_ENV,
                "the omnipaxos and raftrs cores have no broken variants",
            );
        }
        None => {}
    }
    Ok(())
}

/// Reads, bumps and rewrites this node's incarnation marker, and returns what the node
/// knows about itself. No marker: first start (incarnation 0, not amnesic). A marker: a
/// restart, and since the store is in memory the acceptor forgot its votes (amnesic). The
/// start sequence comes from the incarnation, never from the clock
/// ([`StartInfo::restart`]: life `k` proposes with seqs in `[k << 40, (k + 1) << 40)`), so
/// two lives of a node never share a value id even if the clock was set back between
/// them: the marker is bumped and fsynced before the node proposes anything. An
/// incarnation of 2^24 or more is refused, before the marker is rewritten.
pub fn start_info(node_dir: &Path) -> Result<StartInfo, MarkerError> {
    let path = node_dir.join("incarnation");
    let err = |reason: String| MarkerError {
        path: path.clone(),
        reason,
    };
    fs::create_dir_all(node_dir).map_err(|e| err(format!("cannot create directory: {e}")))?;
    let (incarnation, amnesic) = match fs::read_to_string(&path) {
        Ok(text) => {
            let prev: u64 = text
                .trim()
                .parse()
                .map_err(|e| err(format!("holds {:?}, not a number: {e}", text.trim())))?;
            (
                prev.checked_add(1)
                    .ok_or_else(|| err("incarnation overflow".into()))?,
                true,
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (0, false),
        Err(e) => return Err(err(format!("cannot read: {e}"))),
    };
    let start = StartInfo::restart(incarnation, amnesic).map_err(|e| err(e.to_string()))?;
    write_marker(&path, incarnation).map_err(|e| err(format!("cannot write: {e}")))?;
    Ok(start)
}

/// Whether the node's directory holds its incarnation marker (it ran here before).
pub fn has_marker(node_dir: &Path) -> bool {
    node_dir.join("incarnation").exists()
}

/// The start of a node whose directory lost its marker (wiped, replaced) while its peers
/// know it lived, up to incarnation `known` (`abcast_runtime::lives`): it starts amnesic at
/// the next incarnation, its marker written first (docs/design/amnesia-detection.md).
pub fn start_after_lost_marker(node_dir: &Path, known: u64) -> Result<StartInfo, MarkerError> {
    let path = node_dir.join("incarnation");
    let err = |reason: String| MarkerError {
        path: path.clone(),
        reason,
    };
    fs::create_dir_all(node_dir).map_err(|e| err(format!("cannot create directory: {e}")))?;
    let incarnation = known
        .checked_add(1)
        .ok_or_else(|| err("incarnation overflow".into()))?;
    let start = StartInfo::restart(incarnation, true).map_err(|e| err(e.to_string()))?;
    write_marker(&path, incarnation).map_err(|e| err(format!("cannot write: {e}")))?;
    Ok(start)
}

/// Writes the marker atomically: a temporary file, fsync, rename, fsync of the directory,
/// so a crash leaves either the old or the new number, never a torn one.
fn write_marker(path: &Path, incarnation: u64) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    {
        let mut f = fs::File::create(&tmp)?;
        writeln!(f, "{incarnation}")?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        // Making the rename durable; not every file system supports syncing a directory.
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
cluster_id = 7
[[members]]
id = 0
addr = "127.0.0.1:7400"
client_addr = "127.0.0.1:7500"
[[members]]
id = 1
addr = "127.0.0.1:7401"
roles = ["acceptor", "learner"]
[[members]]
id = 2
addr = "localhost:7402"
[ring]
p1_resend_ms = 800
batch_linger_us = 50
[transport]
buffer_size = 1048576
tcp_nodelay = false
unicast = "udp"
[storage]
kind = "memory"
dir = "data"
"#;

    fn field_of(text: &str, id: Option<u32>) -> String {
        match parse(text, id, Path::new("/etc/abcast")) {
            Err(NodeConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an Invalid error, got {other:?}"),
        }
    }

    const RINGS: &str = r#"
[[rings]]
group = 2
members = [2, 1, 0]
proposers = [2]
learners = [0]
[[rings]]
group = 1
acceptors = [0, 1]
[multiring]
merge_m = 4
skip_interval_ms = 5
propose_to = "round-robin"
[[multiring.subscriptions]]
node = 0
rings = [1]
"#;

    /// A restarted Multi-Ring learner merges again only from a snapshot: memory storage
    /// takes them too unless the file says 0; a single ring on memory storage does not.
    #[test]
    fn multi_ring_on_memory_storage_takes_snapshots_unless_told_not_to() {
        let at = Path::new("/etc");
        let c = parse(&format!("{GOOD}{RINGS}"), Some(0), at).unwrap();
        assert_eq!(c.storage.snapshot_interval_ms, 1000);
        let mr = c.multiring.as_ref().unwrap();
        assert!(mr.rings.iter().all(|r| r.ring.learner_snapshots));
        let off = parse(
            &format!("{GOOD}snapshot_interval_ms = 0\n{RINGS}"),
            Some(0),
            at,
        );
        assert_eq!(off.unwrap().storage.snapshot_interval_ms, 0);
        assert_eq!(
            parse(GOOD, Some(0), at)
                .unwrap()
                .storage
                .snapshot_interval_ms,
            0
        );
    }

    #[test]
    fn rings_make_a_multiring_config_with_the_ring_parameters_of_every_ring() {
        let c = parse(&format!("{GOOD}{RINGS}"), Some(0), Path::new("/etc")).unwrap();
        let mr = c.multiring.as_ref().unwrap();
        // Sorted by group: the merge order.
        assert_eq!(
            mr.rings.iter().map(|r| r.group.0).collect::<Vec<_>>(),
            [1, 2]
        );
        let r1 = &mr.rings[0].ring;
        let r2 = &mr.rings[1].ring;
        assert_eq!(r1.p1_resend_us, 800_000, "[ring] applies to every ring");
        // Ring 1: every member in file order, roles from [[members]] but acceptors listed.
        assert_eq!(
            r1.members.iter().map(|m| m.id.0).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert!(!r1.members[2].roles.acceptor && r1.members[2].roles.proposer);
        assert!(!r1.members[1].roles.proposer, "member 1 is not a proposer");
        // Ring 2: its own order and lists.
        assert_eq!(
            r2.members.iter().map(|m| m.id.0).collect::<Vec<_>>(),
            [2, 1, 0]
        );
        assert!(r2.members[0].roles.proposer && !r2.members[0].roles.learner);
        assert!(r2.members[2].roles.learner && !r2.members[2].roles.proposer);
        assert_eq!(mr.merge_m, 4);
        assert_eq!(mr.skip_interval_us, 5_000);
        assert_eq!(mr.propose_to, ProposeTo::RoundRobin);
        assert_eq!(mr.subscriptions, [(NodeId(0), vec![GroupId(1)])]);
        let roles = c.my_roles();
        assert!(roles.proposer && roles.acceptor && roles.learner);
        // Without [[rings]], a single ring.
        assert!(
            parse(GOOD, Some(0), Path::new("/etc"))
                .unwrap()
                .multiring
                .is_none()
        );
    }

    #[test]
    fn ring_errors_name_the_ring_and_field() {
        let with = |rings: &str| format!("{GOOD}{rings}");
        let cases = [
            (
                "[[rings]]\ngroup = 1\nmembers = [0, 9]\n",
                "rings[0].members",
            ),
            (
                "[[rings]]\ngroup = 1\nmembers = [0, 0]\n",
                "rings[0].members",
            ),
            ("[[rings]]\ngroup = 1\nmembers = []\n", "rings[0].members"),
            (
                "[[rings]]\ngroup = 1\n[[rings]]\ngroup = 2\nmembers = [0, 1]\nlearners = [2]\n",
                "rings[1].learners",
            ),
            ("[[rings]]\ngroup = 256\n", "rings[0].group"),
            (
                "[[rings]]\ngroup = 1\n[[rings]]\ngroup = 1\n",
                "rings.group",
            ),
            ("[multiring]\nmerge_m = 2\n", "multiring"),
            (
                "[[rings]]\ngroup = 1\n[multiring]\npropose_to = \"nearest\"\n",
                "multiring.propose_to",
            ),
            (
                "[[rings]]\ngroup = 1\n[multiring]\npropose_to = 3\n",
                "multiring.propose_to",
            ),
            (
                "[[rings]]\ngroup = 1\n[multiring]\nskip_interval_ms = 0\n",
                "multiring.skip_interval_ms",
            ),
            (
                "[[rings]]\ngroup = 1\nlearners = [0]\n[multiring]\nsubscriptions = [{ node = 1, rings = [1] }]\n",
                "multiring.subscriptions",
            ),
            (
                "[[rings]]\ngroup = 1\nacceptors = []\n",
                "rings.members.roles",
            ),
        ];
        for (rings, field) in cases {
            assert_eq!(field_of(&with(rings), Some(0)), field, "for:\n{rings}");
        }
        assert!(matches!(
            parse(&with("[[rings]]\ngroup = 1\ncolour = 2\n"), Some(0), Path::new("/")),
            Err(NodeConfigError::Syntax(m)) if m.contains("colour")
        ));
    }

    #[test]
    fn rings_with_ring_paxos_make_multi_ring_paxos_over_ring_paxos_rings() {
        let text = format!("protocol = \"ringpaxos\"\n{GOOD}{RINGS}");
        let c = parse(&text, Some(0), Path::new("/")).unwrap();
        assert_eq!(c.protocol, ProtocolKind::RingPaxos);
        let mr = c.ringpaxos_rings().unwrap();
        let rp = c.ringpaxos.as_ref().unwrap();
        assert_eq!(
            mr.rings.iter().map(|r| r.group.0).collect::<Vec<_>>(),
            [1, 2]
        );
        // Each ring: its own members and roles, Ring Paxos' parameters.
        let layout = c.multiring.as_ref().unwrap();
        for (spec, uring) in mr.rings.iter().zip(&layout.rings) {
            assert_eq!(spec.ring.members, uring.ring.members);
            assert_eq!(spec.ring.p2_resend_us, rp.p2_resend_us);
        }
        assert_eq!((mr.merge_m, mr.propose_to), (4, ProposeTo::RoundRobin));
        assert_eq!(mr.subscriptions, [(NodeId(0), vec![GroupId(1)])]);
        // U-Ring Paxos rings have no Ring Paxos form.
        let u = parse(&format!("{GOOD}{RINGS}"), Some(0), Path::new("/")).unwrap();
        assert!(u.ringpaxos_rings().is_none());
    }

    #[test]
    fn rings_of_ring_paxos_refuse_one_shared_multicast_group() {
        let text = format!(
            "protocol = \"ringpaxos\"\n{GOOD}{RINGS}[multicast]\ngroup = \"239.255.77.1:30000\"\n"
        );
        assert_eq!(field_of(&text, Some(0)), "multicast");
    }

    #[test]
    fn a_link_fault_may_name_a_group() {
        let text = format!("{GOOD}[[link_faults]]\nfrom = 0\ngroup = 3\ndelay_us = 10\n");
        let c = parse(&text, Some(0), Path::new("/")).unwrap();
        assert_eq!(c.transport.link_faults[0].group, Some(3));
        let bad = format!("{GOOD}[[link_faults]]\ngroup = 70000\ndelay_us = 10\n");
        assert_eq!(field_of(&bad, Some(0)), "link_faults[0].group");
    }

    #[test]
    fn a_good_config_parses_with_units_converted() {
        let c = parse(GOOD, Some(1), Path::new("/etc/abcast")).unwrap();
        assert_eq!(c.cluster_id, 7);
        assert_eq!(c.node_id, NodeId(1));
        assert_eq!(c.ring.p1_resend_us, 800_000);
        assert_eq!(c.ring.batch_linger_us, 50);
        assert_eq!(
            c.ring.members[1].roles,
            Roles {
                proposer: false,
                acceptor: true,
                learner: true
            }
        );
        assert_eq!(c.ring.members[0].roles, Roles::PAL);
        assert_eq!(c.transport.buffer_size, 1 << 20);
        assert!(!c.transport.tcp_nodelay);
        assert_eq!(c.transport.unicast, Unicast::Udp);
        assert_eq!(c.transport.send_queue_bytes, 256 << 20);
        assert_eq!(c.storage.dir, PathBuf::from("/etc/abcast/data"));
        assert_eq!(
            c.members[0].client_addr,
            Some("127.0.0.1:7500".parse().unwrap())
        );
        assert_eq!(c.members[2].addr.port(), 7402);
    }

    #[test]
    fn local_cluster_renders_a_valid_config() {
        let text = local_cluster(3, 7400);
        let c = parse(&text, Some(2), Path::new("/tmp")).unwrap();
        assert_eq!(c.members.len(), 3);
        assert_eq!(c.members[2].addr, "127.0.0.1:7402".parse().unwrap());
        assert_eq!(
            c.members[2].client_addr,
            Some("127.0.0.1:7502".parse().unwrap())
        );
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        let text = GOOD.replace("p1_resend_ms = 800", "p1_resend_time = 800");
        match parse(&text, Some(0), Path::new("/")) {
            Err(NodeConfigError::Syntax(m)) => assert!(m.contains("p1_resend_time"), "{m}"),
            other => panic!("{other:?}"),
        }
        let text = GOOD.replace("cluster_id = 7", "cluster_id = 7\ncolour = 1");
        assert!(
            matches!(parse(&text, Some(0), Path::new("/")), Err(NodeConfigError::Syntax(m)) if m.contains("colour"))
        );
    }

    #[test]
    fn unknown_role_is_refused() {
        let text = GOOD.replace("[\"acceptor\", \"learner\"]", "[\"acceptor\", \"leader\"]");
        assert_eq!(field_of(&text, Some(0)), "members[1].roles");
    }

    #[test]
    fn an_unknown_unicast_transport_is_refused() {
        let text = GOOD.replace("unicast = \"udp\"", "unicast = \"sctp\"");
        assert_eq!(field_of(&text, Some(0)), "transport.unicast");
    }

    #[test]
    fn busy_polling_is_set_turned_off_or_refused_when_absurd() {
        let with = |v: &str| {
            GOOD.replace(
                "unicast = \"udp\"",
                &format!("unicast = \"udp\"\nbusy_poll_us = {v}"),
            )
        };
        let on = parse(&with("20"), Some(0), Path::new("/")).expect("20 µs");
        assert_eq!(on.transport.busy_poll_us, 20);
        let off = parse(&with("0"), Some(0), Path::new("/")).expect("off");
        assert_eq!(off.transport.busy_poll_us, 0);
        let default = parse(GOOD, Some(0), Path::new("/")).expect("default");
        assert_eq!(
            default.transport.busy_poll_us,
            abcast_runtime::transport::BUSY_POLL_US_DEFAULT
        );
        assert_eq!(
            field_of(&with("5000000"), Some(0)),
            "transport.busy_poll_us"
        );
    }

    #[test]
    fn duplicate_id_is_refused() {
        let text = GOOD.replace("id = 2", "id = 1");
        assert_eq!(field_of(&text, Some(0)), "members[2].id");
    }

    #[test]
    fn duplicate_address_is_refused() {
        let text = GOOD.replace("127.0.0.1:7401", "127.0.0.1:7400");
        assert_eq!(field_of(&text, Some(0)), "members[1].addr");
    }

    #[test]
    fn unparsable_address_is_refused() {
        let text = GOOD.replace("127.0.0.1:7401", "127.0.0.1");
        assert_eq!(field_of(&text, Some(0)), "members[1].addr");
        let text = GOOD.replace("127.0.0.1:7500", "nowhere:x");
        assert_eq!(field_of(&text, Some(0)), "members[0].client_addr");
    }

    #[test]
    fn node_id_must_be_a_member_and_given() {
        assert_eq!(field_of(GOOD, Some(9)), "node_id");
        assert_eq!(field_of(GOOD, None), "node_id");
        let text = GOOD.replace("cluster_id = 7", "cluster_id = 7\nnode_id = 2");
        assert_eq!(
            parse(&text, None, Path::new("/")).unwrap().node_id,
            NodeId(2)
        );
        assert_eq!(
            parse(&text, Some(0), Path::new("/")).unwrap().node_id,
            NodeId(0)
        );
    }

    #[test]
    fn ring_validation_errors_name_the_file_field() {
        let text = GOOD.replace(
            "p1_resend_ms = 800",
            "heartbeat_interval_ms = 200\nfailure_timeout_ms = 300",
        );
        assert_eq!(field_of(&text, Some(0)), "ring.failure_timeout_ms");
        let text = GOOD.replace("p1_resend_ms = 800", "window_values = 0");
        assert_eq!(field_of(&text, Some(0)), "ring.window_values");
        let text = GOOD.replace("p1_resend_ms = 800", "p1_resend_ms = 0");
        assert_eq!(field_of(&text, Some(0)), "ring.p1_resend_ms");
        let text = GOOD.replace("roles = [\"acceptor\", \"learner\"]", "roles = []");
        assert_eq!(field_of(&text, Some(0)), "members.roles");
    }

    #[test]
    fn a_synced_log_gets_the_larger_window_unless_the_file_sets_one() {
        let window = |storage: &str, ring: &str| {
            let text = GOOD
                .replace("kind = \"memory\"", storage)
                .replace("p1_resend_ms = 800", ring);
            parse(&text, Some(0), Path::new("/"))
                .unwrap()
                .ring
                .window_bytes
        };
        let memory = RingConfig::default().window_bytes;
        assert_eq!(window("kind = \"memory\"", ""), memory);
        assert_eq!(
            window("kind = \"durable\"", ""),
            SYNCED_WINDOW_BYTES_DEFAULT
        );
        assert_eq!(window("kind = \"durable\"\nsync = false", ""), memory);
        assert_eq!(
            window("kind = \"durable\"", "window_bytes = 1048576"),
            1 << 20,
            "the file's own window wins"
        );
    }

    #[test]
    fn storage_kinds_parse_and_bad_ones_name_their_field() {
        let kind = |k: &str| {
            let text = GOOD.replace("kind = \"memory\"", k);
            parse(&text, Some(0), Path::new("/")).map(|c| c.storage.kind)
        };
        assert_eq!(kind("kind = \"none\"").unwrap(), StorageKind::None);
        assert_eq!(
            kind("kind = \"durable\"").unwrap(),
            StorageKind::Durable { sync: true }
        );
        assert_eq!(
            kind("kind = \"durable\"\nsync = false").unwrap(),
            StorageKind::Durable { sync: false }
        );
        let text = GOOD.replace("kind = \"memory\"", "kind = \"disk\"");
        match parse(&text, Some(0), Path::new("/")) {
            Err(NodeConfigError::Invalid { field, reason }) => {
                assert_eq!(field, "storage.kind");
                assert!(reason.contains("\"durable\""), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let text = GOOD.replace("kind = \"memory\"", "kind = \"memory\"\nsync = true");
        assert_eq!(field_of(&text, Some(0)), "storage.sync");
        let text = GOOD.replace(
            "kind = \"memory\"",
            "kind = \"durable\"\nsegment_bytes = 10",
        );
        assert_eq!(field_of(&text, Some(0)), "storage.segment_bytes");
        let text = GOOD.replace(
            "kind = \"memory\"",
            "kind = \"durable\"\nsync = false\ndirect_io = true",
        );
        assert_eq!(field_of(&text, Some(0)), "storage.direct_io");
        let text = GOOD.replace("kind = \"memory\"", "kind = \"durable\"\ndirect_io = false");
        let cfg = parse(&text, Some(0), Path::new("/")).expect("valid");
        assert!(!cfg.storage.direct_io);
    }

    #[test]
    fn transport_bounds_are_checked() {
        let text = GOOD.replace("tcp_nodelay = false", "send_queue_bytes = 0");
        assert_eq!(field_of(&text, Some(0)), "transport.send_queue_bytes");
    }

    #[test]
    fn wrong_types_are_syntax_errors() {
        let text = GOOD.replace("cluster_id = 7", "cluster_id = \"seven\"");
        assert!(matches!(
            parse(&text, Some(0), Path::new("/")),
            Err(NodeConfigError::Syntax(_))
        ));
    }

    const RINGPAXOS: &str = r#"
cluster_id = 7
protocol = "ringpaxos"
[[members]]
id = 0
addr = "127.0.0.1:7400"
[[members]]
id = 1
addr = "127.0.0.1:7401"
[[members]]
id = 2
addr = "127.0.0.1:7402"
[[members]]
id = 3
addr = "127.0.0.1:7403"
roles = ["learner"]
[ring]
p2_resend_ms = 50
window_values = 500
[ringpaxos]
buffer_instances = 512
[multicast]
group = "239.255.77.1:30000"
recv_buffer_bytes = 1048576
"#;

    #[test]
    fn ringpaxos_takes_members_shared_ring_keys_and_its_own_table() {
        let c = parse(RINGPAXOS, Some(3), Path::new("/")).unwrap();
        assert_eq!(c.protocol, ProtocolKind::RingPaxos);
        let rp = c.ringpaxos.clone().unwrap();
        assert_eq!(rp.members.len(), 4);
        assert!(!rp.members[3].roles.acceptor && rp.members[3].roles.learner);
        assert_eq!(rp.p2_resend_us, 50_000);
        assert_eq!(rp.window_values, 500);
        assert_eq!(c.window_values(), 500);
        assert_eq!(rp.buffer_instances, 512);
        // Multicast makes the batch fit a datagram by default.
        assert_eq!(rp.batch_max_bytes, MULTICAST_BATCH_MAX_BYTES);
        assert_eq!(c.max_value_bytes(), MULTICAST_VALUE_MAX_BYTES);
        let m = c.transport.multicast.unwrap();
        assert_eq!(m.group, "239.255.77.1:30000".parse().unwrap());
        assert_eq!(m.interface, std::net::Ipv4Addr::LOCALHOST);
        assert_eq!((m.ttl, m.recv_buffer_bytes), (1, 1 << 20));
        assert!(
            m.multicast_loop,
            "a member's datagrams loop back by default"
        );
        let off = parse(
            &RINGPAXOS.replace("[multicast]\n", "[multicast]\nloop = false\n"),
            Some(3),
            Path::new("/"),
        )
        .unwrap();
        assert!(!off.transport.multicast.unwrap().multicast_loop);
        // U-Ring Paxos is the default and has neither.
        let u = parse(GOOD, Some(0), Path::new("/")).unwrap();
        assert_eq!((u.protocol, u.ringpaxos), (ProtocolKind::URing, None));
        assert_eq!(u.transport.multicast, None);
    }

    #[test]
    fn a_client_path_is_taken_from_the_config_dir_and_checked() {
        let with = |path: &str, second: &str| {
            GOOD.replace(
                "client_addr = \"127.0.0.1:7500\"\n",
                &format!("client_addr = \"127.0.0.1:7500\"\nclient_path = \"{path}\"\n"),
            )
            .replace(
                "roles = [\"acceptor\", \"learner\"]\n",
                &format!("roles = [\"acceptor\", \"learner\"]\n{second}"),
            )
        };
        let c = parse(&with("run/0.sock", ""), Some(0), Path::new("/etc/abcast")).unwrap();
        assert_eq!(
            c.me().unwrap().client_path.as_deref(),
            Some(Path::new("/etc/abcast/run/0.sock"))
        );
        assert_eq!(c.members[1].client_path, None);
        let abs = parse(&with("/run/a.sock", ""), Some(0), Path::new("/etc/abcast")).unwrap();
        assert_eq!(
            abs.me().unwrap().client_path.as_deref(),
            Some(Path::new("/run/a.sock"))
        );
        let long = format!("/{}", "x".repeat(CLIENT_PATH_MAX_BYTES));
        // TOML's escape for a NUL byte.
        for bad in ["", "a\\u0000b", long.as_str()] {
            assert_eq!(field_of(&with(bad, ""), Some(0)), "members[0].client_path");
        }
        let twice = with("/run/a.sock", "client_path = \"/run/a.sock\"\n");
        assert_eq!(field_of(&twice, Some(0)), "members[1].client_path");
    }

    #[test]
    fn segment_bytes_is_read_and_checked() {
        let text = RINGPAXOS.replace("[multicast]\n", "[multicast]\nsegment_bytes = 8972\n");
        let c = parse(&text, Some(0), Path::new("/")).unwrap();
        assert_eq!(c.transport.multicast.unwrap().segment_bytes, 8972);
        let text = RINGPAXOS.replace("[multicast]\n", "[multicast]\nsegment_bytes = 9000\n");
        assert_eq!(field_of(&text, Some(0)), "multicast.segment_bytes");
    }

    #[test]
    fn client_shm_bytes_is_off_or_a_power_of_two_in_range() {
        let with = |v: &str| format!("{RINGPAXOS}[transport]\nclient_shm_bytes = {v}\n");
        let c = parse(&with("1048576"), Some(0), Path::new("/")).unwrap();
        assert_eq!(c.transport.client_shm_bytes, 1 << 20);
        let c = parse(&with("0"), Some(0), Path::new("/")).unwrap();
        assert_eq!(c.transport.client_shm_bytes, 0);
        let c = parse(RINGPAXOS, Some(0), Path::new("/")).unwrap();
        assert_eq!(
            c.transport.client_shm_bytes,
            abcast_runtime::transport::CLIENT_SHM_BYTES_DEFAULT
        );
        for bad in ["1000000", "32768", "2147483648"] {
            assert_eq!(
                field_of(&with(bad), Some(0)),
                "transport.client_shm_bytes",
                "{bad}"
            );
        }
    }

    #[test]
    fn ringpaxos_without_multicast_keeps_its_own_batch_defaults() {
        let text = RINGPAXOS.replace(
            "[multicast]\ngroup = \"239.255.77.1:30000\"\nrecv_buffer_bytes = 1048576\n",
            "",
        );
        let c = parse(&text, Some(0), Path::new("/")).unwrap();
        assert_eq!(c.transport.multicast, None);
        assert_eq!(
            c.ringpaxos.unwrap().batch_max_bytes,
            RingPaxosConfig::default().batch_max_bytes
        );
    }

    #[test]
    fn ringpaxos_and_multicast_errors_name_the_field() {
        let f = |from: &str, to: &str| field_of(&RINGPAXOS.replace(from, to), Some(0));
        assert_eq!(
            f("protocol = \"ringpaxos\"", "protocol = \"paxos\""),
            "protocol"
        );
        assert_eq!(
            f("window_values = 500", "batch_max_bytes = 60000"),
            "ring.batch_max_bytes"
        );
        assert_eq!(
            f("window_values = 500", "max_value_bytes = 70000"),
            "ring.max_value_bytes"
        );
        assert_eq!(
            f("window_values = 500", "max_open_instances = 5"),
            "ring.max_open_instances"
        );
        assert_eq!(
            f("buffer_instances = 512", "buffer_instances = 0"),
            "ringpaxos.buffer_instances"
        );
        assert_eq!(
            f("buffer_instances = 512", "ring_timeout_ms = 10"),
            "ringpaxos.ring_timeout_ms"
        );
        assert_eq!(f("239.255.77.1:30000", "10.1.1.1:30000"), "multicast.group");
        assert_eq!(f("239.255.77.1:30000", "239.255.77.1"), "multicast.group");
        assert_eq!(
            f("recv_buffer_bytes = 1048576", "interface = \"lo\""),
            "multicast.interface"
        );
        assert_eq!(f("recv_buffer_bytes = 1048576", "ttl = 0"), "multicast.ttl");
        // Multicast and the Ring Paxos table make no sense for U-Ring Paxos.
        assert_eq!(
            f("protocol = \"ringpaxos\"", "protocol = \"uring\""),
            "multicast"
        );
        match parse(
            &RINGPAXOS.replace("recv_buffer_bytes = 1048576", "colour = 3"),
            Some(0),
            Path::new("/"),
        ) {
            Err(NodeConfigError::Syntax(m)) => assert!(m.contains("colour"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn incarnation_marker_counts_restarts() {
        let dir = std::env::temp_dir().join(format!("abcast-marker-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let first = start_info(&dir).unwrap();
        assert_eq!((first.incarnation, first.amnesic), (0, false));
        let second = start_info(&dir).unwrap();
        assert_eq!((second.incarnation, second.amnesic), (1, true));
        assert!(second.start_seq > first.start_seq);
        assert_eq!(
            fs::read_to_string(dir.join("incarnation")).unwrap().trim(),
            "1"
        );
        fs::write(dir.join("incarnation"), "garbage").unwrap();
        assert!(start_info(&dir).is_err());
        let _ = fs::remove_dir_all(&dir);
    }

    /// Bug B4: the start seq was the wall clock (µs × 1000), so a clock set back across a
    /// restart gave the new life the ids of the old one, and learners took its batches for
    /// duplicates. Now the id range is a function of the marker alone: `start_info` reads
    /// no clock, so whatever the clock says, consecutive starts get the consecutive,
    /// disjoint ranges asserted here.
    #[test]
    fn consecutive_starts_of_a_node_dir_get_disjoint_value_id_ranges() {
        use abcast_core::batcher::life_seq_end;
        let dir = std::env::temp_dir().join(format!("abcast-idrange-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let ranges: Vec<(u64, u64)> = (0..4)
            .map(|_| {
                let s = start_info(&dir).unwrap();
                (s.start_seq, life_seq_end(s.start_seq))
            })
            .collect();
        assert_eq!(
            ranges,
            [
                (1, 1 << 40),
                (1 << 40, 2 << 40),
                (2 << 40, 3 << 40),
                (3 << 40, 4 << 40)
            ]
        );
        // The range follows the marker, the only state that survives a restart.
        fs::write(dir.join("incarnation"), "41\n").unwrap();
        let s = start_info(&dir).unwrap();
        assert_eq!((s.incarnation, s.start_seq), (42, 42 << 40));
        // The last life with its own range, then a clear refusal that leaves the marker.
        fs::write(dir.join("incarnation"), format!("{}", (1u64 << 24) - 2)).unwrap();
        let s = start_info(&dir).unwrap();
        assert_eq!(s.start_seq, ((1 << 24) - 1) << 40);
        assert_eq!(life_seq_end(s.start_seq), u64::MAX);
        let e = start_info(&dir).expect_err("no id range left");
        assert!(e.to_string().contains("start.incarnation"), "{e}");
        assert_eq!(
            fs::read_to_string(dir.join("incarnation")).unwrap().trim(),
            format!("{}", (1u64 << 24) - 1)
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
