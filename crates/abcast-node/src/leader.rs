//! The leader-based protocols in the node (issue 17): Sequence Paxos with Ballot Leader
//! Election and Raft (seed 001), and, for the same-harness race, the `omnipaxos` and raft-rs
//! cores of `abcast-peers`. Their config sections, checked, and their constructors.
//!
//! ```toml
//! protocol = "seqpaxos"       # or "raft", "omnipaxos", "raftrs"
//! [seqpaxos]                  # every field optional
//! heartbeat_interval_ms = 50  # BLE's Δ: a leader is replaced after one round without it
//! heartbeat_delay_max_rounds = 3
//! resend_ms = 100             # an unanswered Prepare or unaccepted entries go again
//! max_message_bytes = 4194304 # largest Accept / AcceptSync / catch-up message
//! uncommitted_bytes_max = 16777216 # the leader's undecided tail (what a Promise carries)
//! pending_batches_max = 65536 # proposals held while a leader prepares
//! priorities = [{ node = 0, priority = 1 }]   # the preferred leader
//! transfer = "pull"           # how new members get the log after a stop-sign: "pull"
//!                             # (segments from several nodes) or "eager" (the leader pushes)
//! fetch_segment_entries = 512 # entries per segment a new member asks one node for
//! fetch_parallel = 4          # nodes a new member asks at once
//! [raft]                      # every field optional
//! heartbeat_interval_ms = 50
//! election_timeout_min_ms = 300
//! election_timeout_max_ms = 600
//! pre_vote = true
//! check_quorum = true
//! read_lease = false          # see RaftConfig::read_lease for the clock assumption
//! max_append_bytes = 1048576
//! max_inflight_appends = 64
//! max_uncommitted_bytes = 67108864
//! catch_up_entries = 64
//! [omnipaxos]                 # the crate's ServerConfig: tick_ms, election_tick_timeout,
//!                             # resend_message_tick_timeout, buffer_size, batch_size,
//!                             # flush_batch_tick_timeout
//! [raftrs]                    # raft-rs' Config: tick_ms, heartbeat_tick, election_tick,
//!                             # max_size_per_msg, max_inflight_msgs, pre_vote, check_quorum
//! ```
//!
//! Every leader-based protocol takes the proposer's batching and window from the `[ring]`
//! keys every protocol has (`batch_max_bytes`, `batch_linger_us`, `window_values`,
//! `window_bytes`, `max_value_bytes`, `value_resend_ms`); the ring-only keys are refused, so
//! a setting never silently does nothing. Members are replicas; a Raft member without the
//! acceptor role is a non-voting learner. A member with `spare = true` (`nodeconfig.rs`)
//! is left out of the first configuration: Sequence Paxos and Raft build it with the
//! configuration of the other members, which does not name it, and it waits until a
//! reconfiguration does (`SeqPaxos::new`'s construction contract; a Raft node not named
//! waits to be added). Sequence Paxos and Raft keep their log in
//! `storage.kind` (memory, or the durable log with group commit); `none` is refused (a
//! leader-based log is the only copy of its entries). The peer cores run on their crates'
//! in-memory storage only (`crates/abcast-peers/README.md`).

use crate::nodeconfig::{NodeConfig, NodeConfigError, StorageKind};
use abcast_core::NodeId;
use abcast_core::batcher::BatchLimits;
use abcast_core::config::{ConfigError, Member, StartInfo};
use abcast_core::raft::{Raft, RaftConfig};
use abcast_core::seqpaxos::{SeqPaxos, SeqPaxosConfig, Transfer};
use abcast_core::storage::{DurableLogStore, DurableOptions, LogStore, MemoryLogStore};
use abcast_peers::{OmniPaxosCore, OmniPaxosCoreConfig, RaftRsCore, RaftRsCoreConfig};
use serde::Deserialize;

/// Which leader-based protocol runs, with its checked configuration.
#[derive(Clone, Debug)]
pub enum LeaderProtocol {
    SeqPaxos(SeqPaxosConfig),
    Raft(RaftConfig),
    OmniPaxos(OmniPaxosCoreConfig),
    RaftRs(RaftRsCoreConfig),
}

impl PartialEq for LeaderProtocol {
    /// Configs compare by their debug form: the peer crates' configs have no `PartialEq`.
    fn eq(&self, other: &Self) -> bool {
        format!("{self:?}") == format!("{other:?}")
    }
}
impl Eq for LeaderProtocol {}

impl LeaderProtocol {
    /// The protocol's name as `protocol = ...` spells it.
    pub fn name(&self) -> &'static str {
        match self {
            LeaderProtocol::SeqPaxos(_) => "seqpaxos",
            LeaderProtocol::Raft(_) => "raft",
            LeaderProtocol::OmniPaxos(_) => "omnipaxos",
            LeaderProtocol::RaftRs(_) => "raftrs",
        }
    }

    /// Whether the protocol takes snapshots and compacts its log (`Protocol::take_snapshot`),
    /// so `storage.snapshot_interval_ms > 0` means something: Raft (Raft §7) and Sequence
    /// Paxos (`seqpaxos/snapshot.rs`). The peer cores keep their whole log.
    pub fn takes_snapshots(&self) -> bool {
        matches!(self, LeaderProtocol::Raft(_) | LeaderProtocol::SeqPaxos(_))
    }

    /// The proposer's batching and window.
    pub fn batch_limits(&self) -> BatchLimits {
        match self {
            LeaderProtocol::SeqPaxos(c) => c.batch_limits(),
            LeaderProtocol::Raft(c) => c.batch_limits(),
            LeaderProtocol::OmniPaxos(c) => c.batch,
            LeaderProtocol::RaftRs(c) => c.batch,
        }
    }
}

/// `[seqpaxos]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileSeqPaxos {
    heartbeat_interval_ms: Option<u64>,
    heartbeat_delay_max_rounds: Option<u32>,
    resend_ms: Option<u64>,
    max_message_bytes: Option<usize>,
    uncommitted_bytes_max: Option<usize>,
    pending_batches_max: Option<usize>,
    priorities: Option<Vec<FilePriority>>,
    transfer: Option<String>,
    fetch_segment_entries: Option<u64>,
    fetch_parallel: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilePriority {
    node: u32,
    priority: u8,
}

/// `[raft]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileRaft {
    heartbeat_interval_ms: Option<u64>,
    election_timeout_min_ms: Option<u64>,
    election_timeout_max_ms: Option<u64>,
    pre_vote: Option<bool>,
    check_quorum: Option<bool>,
    read_lease: Option<bool>,
    max_append_bytes: Option<usize>,
    max_inflight_appends: Option<usize>,
    max_uncommitted_bytes: Option<usize>,
    catch_up_entries: Option<u64>,
}

/// `[omnipaxos]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileOmniPaxos {
    tick_ms: Option<u64>,
    election_tick_timeout: Option<u64>,
    resend_message_tick_timeout: Option<u64>,
    buffer_size: Option<usize>,
    batch_size: Option<usize>,
    flush_batch_tick_timeout: Option<u64>,
}

/// `[raftrs]`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileRaftRs {
    tick_ms: Option<u64>,
    heartbeat_tick: Option<usize>,
    election_tick: Option<usize>,
    max_size_per_msg: Option<u64>,
    max_inflight_msgs: Option<usize>,
    pre_vote: Option<bool>,
    check_quorum: Option<bool>,
}

/// The leader-based sections of the file, as `nodeconfig` read them.
pub(crate) struct LeaderSections<'a> {
    pub protocol: &'a str,
    pub seqpaxos: Option<&'a FileSeqPaxos>,
    pub raft: Option<&'a FileRaft>,
    pub omnipaxos: Option<&'a FileOmniPaxos>,
    pub raftrs: Option<&'a FileRaftRs>,
    /// The `[ring]` keys every protocol has, as given (`None`: not in the file).
    pub batch: RingBatchKeys,
    /// `[ring]` keys only the ring protocols have that the file sets.
    pub ring_only_keys: Vec<&'static str>,
}

/// The proposer keys of `[ring]` (see the module comment).
#[derive(Default)]
pub(crate) struct RingBatchKeys {
    pub batch_max_bytes: Option<usize>,
    pub batch_linger_us: Option<u64>,
    pub window_values: Option<usize>,
    pub window_bytes: Option<usize>,
    pub max_value_bytes: Option<usize>,
    pub value_resend_ms: Option<u64>,
}

fn invalid<T>(field: impl Into<String>, reason: impl Into<String>) -> Result<T, NodeConfigError> {
    Err(NodeConfigError::Invalid {
        field: field.into(),
        reason: reason.into(),
    })
}

fn ms(field: &str, v: Option<u64>) -> Result<Option<u64>, NodeConfigError> {
    match v {
        None => Ok(None),
        Some(v) => match v.checked_mul(1000) {
            Some(us) => Ok(Some(us)),
            None => invalid(field, format!("{v} ms is too large")),
        },
    }
}

macro_rules! set {
    ($dst:expr, $v:expr) => {
        if let Some(v) = $v {
            $dst = v;
        }
    };
}

fn apply_batch(l: &mut BatchLimits, k: &RingBatchKeys) -> Result<(), NodeConfigError> {
    set!(l.batch_max_bytes, k.batch_max_bytes);
    set!(l.batch_linger_us, k.batch_linger_us);
    set!(l.window_values, k.window_values);
    set!(l.window_bytes, k.window_bytes);
    set!(l.max_value_bytes, k.max_value_bytes);
    set!(
        l.value_resend_us,
        ms("ring.value_resend_ms", k.value_resend_ms)?
    );
    Ok(())
}

/// A protocol's `ConfigError` as the file's field names it.
fn file_error(section: &str, e: ConfigError) -> NodeConfigError {
    let f = e.field;
    let field = match f {
        "batch_max_bytes" | "batch_linger_us" | "window_values" | "window_bytes"
        | "max_value_bytes" => format!("ring.{f}"),
        "value_resend_us" => "ring.value_resend_ms".into(),
        "members" | "voters" | "learners" | "nodes" => "members".into(),
        f if f.ends_with("_us") => format!("{section}.{}_ms", &f[..f.len() - 3]),
        f => format!("{section}.{f}"),
    };
    NodeConfigError::Invalid {
        field,
        reason: e.reason,
    }
}

/// `protocol = "seqpaxos" | "raft" | "omnipaxos" | "raftrs"` and its section, checked
/// against the members; `Ok(None)` for another protocol. A section of another protocol is
/// refused.
pub(crate) fn leader_config(
    s: &LeaderSections<'_>,
    members: &[Member],
    spares: &[NodeId],
    storage: &StorageKind,
) -> Result<Option<LeaderProtocol>, NodeConfigError> {
    let leader_based = matches!(s.protocol, "seqpaxos" | "raft" | "omnipaxos" | "raftrs");
    for (given, name) in [
        (s.seqpaxos.is_some(), "seqpaxos"),
        (s.raft.is_some(), "raft"),
        (s.omnipaxos.is_some(), "omnipaxos"),
        (s.raftrs.is_some(), "raftrs"),
    ] {
        if given && s.protocol != name {
            return invalid(name, format!("only with protocol = \"{name}\""));
        }
    }
    if !leader_based {
        return Ok(None);
    }
    if let Some(key) = s.ring_only_keys.first() {
        return invalid(
            format!("ring.{key}"),
            format!(
                "a ring protocol's setting; protocol = \"{}\" takes only the proposer keys of \
                 [ring] (batch_max_bytes, batch_linger_us, window_values, window_bytes, \
                 max_value_bytes, value_resend_ms) and its own [{}] section",
                s.protocol, s.protocol
            ),
        );
    }
    if *storage == StorageKind::None {
        return invalid(
            "storage.kind",
            format!(
                "\"none\" keeps no log, and a leader-based log is the only copy of its entries; \
                 protocol = \"{}\" runs on \"memory\" or \"durable\"",
                s.protocol
            ),
        );
    }
    let ids: Vec<u32> = members.iter().map(|m| m.id.0).collect();
    let full = |m: &Member| m.roles.proposer && m.roles.acceptor && m.roles.learner;
    let lp = match s.protocol {
        "seqpaxos" => {
            if let Some(m) = members.iter().find(|m| !full(m)) {
                return invalid(
                    "members.roles",
                    format!(
                        "node {}: every Sequence Paxos member is a replica (proposer, acceptor \
                         and learner)",
                        m.id
                    ),
                );
            }
            let mut c = SeqPaxosConfig::replicas(&ids);
            let mut limits = c.batch_limits();
            apply_batch(&mut limits, &s.batch)?;
            set_limits_sp(&mut c, &limits);
            if let Some(f) = s.seqpaxos {
                set!(
                    c.heartbeat_interval_us,
                    ms("seqpaxos.heartbeat_interval_ms", f.heartbeat_interval_ms)?
                );
                set!(c.heartbeat_delay_max_rounds, f.heartbeat_delay_max_rounds);
                set!(c.resend_us, ms("seqpaxos.resend_ms", f.resend_ms)?);
                set!(c.max_message_bytes, f.max_message_bytes);
                set!(c.uncommitted_bytes_max, f.uncommitted_bytes_max);
                set!(c.pending_batches_max, f.pending_batches_max);
                set!(c.fetch_segment_entries, f.fetch_segment_entries);
                set!(c.fetch_parallel, f.fetch_parallel);
                match f.transfer.as_deref() {
                    None => {}
                    Some("pull") => c.transfer = Transfer::Pull,
                    Some("eager") => c.transfer = Transfer::Eager,
                    Some(other) => {
                        return invalid(
                            "seqpaxos.transfer",
                            format!("{other:?}: expected \"pull\" or \"eager\""),
                        );
                    }
                }
                if let Some(ps) = &f.priorities {
                    c.priorities.clear();
                    for (i, p) in ps.iter().enumerate() {
                        if !ids.contains(&p.node) && !spares.contains(&NodeId(p.node)) {
                            return invalid(
                                format!("seqpaxos.priorities[{i}].node"),
                                format!("node {} is not a member", p.node),
                            );
                        }
                        if c.priorities.iter().any(|(n, _)| n.0 == p.node) {
                            return invalid(
                                format!("seqpaxos.priorities[{i}].node"),
                                format!("node {} is given twice", p.node),
                            );
                        }
                        c.priorities.push((NodeId(p.node), p.priority));
                    }
                }
            }
            c.validate().map_err(|e| file_error("seqpaxos", e))?;
            // A Promise carries up to the undecided tail and an AcceptSync up to it plus one
            // message's worth: both must fit in the runtime's frame, or they never arrive.
            let frame = abcast_runtime::frame::MAX_BODY_BYTES / 2;
            if c.uncommitted_bytes_max + c.max_message_bytes > frame {
                return Err(NodeConfigError::Invalid {
                    field: "seqpaxos.uncommitted_bytes_max".into(),
                    reason: format!(
                        "{} + max_message_bytes {} is above {frame}, half the transport's \
                         frame limit: a Promise or AcceptSync could never be sent",
                        c.uncommitted_bytes_max, c.max_message_bytes
                    ),
                });
            }
            LeaderProtocol::SeqPaxos(c)
        }
        "raft" => {
            let voters: Vec<u32> = (members.iter().filter(|m| m.roles.acceptor))
                .map(|m| m.id.0)
                .collect();
            let learners: Vec<u32> = (members.iter().filter(|m| !m.roles.acceptor))
                .map(|m| m.id.0)
                .collect();
            let mut c = RaftConfig::new(&voters, &learners);
            let mut limits = c.batch_limits();
            apply_batch(&mut limits, &s.batch)?;
            c.batch_max_bytes = limits.batch_max_bytes;
            c.batch_linger_us = limits.batch_linger_us;
            c.window_values = limits.window_values;
            c.window_bytes = limits.window_bytes;
            c.max_value_bytes = limits.max_value_bytes;
            c.value_resend_us = limits.value_resend_us;
            if let Some(f) = s.raft {
                set!(
                    c.heartbeat_interval_us,
                    ms("raft.heartbeat_interval_ms", f.heartbeat_interval_ms)?
                );
                set!(
                    c.election_timeout_min_us,
                    ms("raft.election_timeout_min_ms", f.election_timeout_min_ms)?
                );
                set!(
                    c.election_timeout_max_us,
                    ms("raft.election_timeout_max_ms", f.election_timeout_max_ms)?
                );
                set!(c.pre_vote, f.pre_vote);
                set!(c.check_quorum, f.check_quorum);
                set!(c.read_lease, f.read_lease);
                set!(c.max_append_bytes, f.max_append_bytes);
                set!(c.max_inflight_appends, f.max_inflight_appends);
                set!(c.max_uncommitted_bytes, f.max_uncommitted_bytes);
                set!(c.catch_up_entries, f.catch_up_entries);
            }
            c.validate().map_err(|e| file_error("raft", e))?;
            LeaderProtocol::Raft(c)
        }
        peer => {
            if let Some(m) = members.iter().find(|m| !full(m)) {
                return invalid(
                    "members.roles",
                    format!(
                        "node {}: the peer cores run every member as a replica (proposer, \
                         acceptor and learner)",
                        m.id
                    ),
                );
            }
            if matches!(storage, StorageKind::Durable { .. }) {
                return invalid(
                    "storage.kind",
                    format!(
                        "protocol = \"{peer}\" runs on its crate's in-memory storage only \
                         (crates/abcast-peers/README.md); use \"memory\""
                    ),
                );
            }
            let nodes: Vec<NodeId> = members.iter().map(|m| m.id).collect();
            if peer == "omnipaxos" {
                let mut c = OmniPaxosCoreConfig::new(&nodes);
                apply_batch(&mut c.batch, &s.batch)?;
                if let Some(f) = s.omnipaxos {
                    set!(c.tick_us, ms("omnipaxos.tick_ms", f.tick_ms)?);
                    set!(c.election_tick_timeout, f.election_tick_timeout);
                    set!(c.resend_message_tick_timeout, f.resend_message_tick_timeout);
                    set!(c.buffer_size, f.buffer_size);
                    set!(c.batch_size, f.batch_size);
                    set!(c.flush_batch_tick_timeout, f.flush_batch_tick_timeout);
                }
                c.validate(nodes[0])
                    .map_err(|e| file_error("omnipaxos", e))?;
                LeaderProtocol::OmniPaxos(c)
            } else {
                let mut c = RaftRsCoreConfig::new(&nodes);
                apply_batch(&mut c.batch, &s.batch)?;
                if let Some(f) = s.raftrs {
                    set!(c.tick_us, ms("raftrs.tick_ms", f.tick_ms)?);
                    set!(c.heartbeat_tick, f.heartbeat_tick);
                    set!(c.election_tick, f.election_tick);
                    set!(c.max_size_per_msg, f.max_size_per_msg);
                    set!(c.max_inflight_msgs, f.max_inflight_msgs);
                    set!(c.pre_vote, f.pre_vote);
                    set!(c.check_quorum, f.check_quorum);
                }
                c.validate(nodes[0]).map_err(|e| file_error("raftrs", e))?;
                LeaderProtocol::RaftRs(c)
            }
        }
    };
    Ok(Some(lp))
}

fn set_limits_sp(c: &mut SeqPaxosConfig, l: &BatchLimits) {
    c.batch_max_bytes = l.batch_max_bytes;
    c.batch_linger_us = l.batch_linger_us;
    c.window_values = l.window_values;
    c.window_bytes = l.window_bytes;
    c.max_value_bytes = l.max_value_bytes;
    c.value_resend_us = l.value_resend_us;
}

/// The log store of a Sequence Paxos or Raft node: in memory, or the durable log in
/// `<node dir>/log` (recovered here; what recovery found goes to stderr).
pub fn open_log_store(cfg: &NodeConfig) -> Result<Box<dyn LogStore + Send>, ConfigError> {
    let me = cfg.node_id;
    match cfg.storage.kind {
        StorageKind::None | StorageKind::Memory => Ok(Box::new(MemoryLogStore::new())),
        StorageKind::Durable { sync } => {
            let path = crate::node::log_dir(cfg, None);
            let dir = crate::node::open_log_dir(cfg, &path, sync)?;
            let opts = DurableOptions {
                sync,
                segment_bytes: cfg.storage.segment_bytes,
                cache_instances: 1 << 16,
                cache_bytes: 256 << 20,
            };
            let (store, rec) = DurableLogStore::open(dir, opts).map_err(|e| ConfigError {
                field: "storage.dir",
                reason: e.0,
            })?;
            crate::node::report_torn_tail(me, "log", rec.torn_tail.as_ref());
            eprintln!(
                "[{me}] log {}: {} segments, {} records replayed",
                path.display(),
                rec.segments,
                rec.records
            );
            Ok(Box::new(store))
        }
    }
}

/// Sequence Paxos as the config describes it, on its log store.
pub fn seqpaxos(
    cfg: &NodeConfig,
    c: &SeqPaxosConfig,
    start: StartInfo,
) -> Result<SeqPaxos, ConfigError> {
    let store = open_log_store(cfg)?;
    SeqPaxos::new(c.clone(), cfg.node_id, start, store)
}

/// Raft as the config describes it, on its log store; its election timeouts are seeded
/// from the node and its incarnation (a restarted node draws anew).
pub fn raft(cfg: &NodeConfig, c: &RaftConfig, start: StartInfo) -> Result<Raft, ConfigError> {
    let store = open_log_store(cfg)?;
    let mut c = c.clone();
    c.seed = entropy(cfg, start);
    Raft::new(c, cfg.node_id, start, store)
}

/// The `omnipaxos` crate's core.
pub fn omnipaxos(
    cfg: &NodeConfig,
    c: &OmniPaxosCoreConfig,
    start: StartInfo,
) -> Result<OmniPaxosCore, ConfigError> {
    OmniPaxosCore::new(c.clone(), cfg.node_id, start)
}

/// raft-rs' core; election timeouts seeded like Raft's.
pub fn raftrs(
    cfg: &NodeConfig,
    c: &RaftRsCoreConfig,
    start: StartInfo,
) -> Result<RaftRsCore, ConfigError> {
    let mut c = c.clone();
    c.election_seed = entropy(cfg, start);
    RaftRsCore::new(c, cfg.node_id, start)
}

/// A seed for randomised timeouts: different per node, incarnation and start time (the
/// protocols stay deterministic given it; the simulator passes its own).
fn entropy(cfg: &NodeConfig, start: StartInfo) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    now ^ (u64::from(cfg.node_id.0) << 48) ^ (start.incarnation << 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodeconfig::{ProtocolKind, parse};
    use std::path::Path;

    const MEMBERS: &str = r#"
cluster_id = 7
[[members]]
id = 0
addr = "127.0.0.1:7400"
[[members]]
id = 1
addr = "127.0.0.1:7401"
[[members]]
id = 2
addr = "127.0.0.1:7402"
"#;

    /// The members with `extra`, whose leading `protocol = ...` line (if any) goes first:
    /// TOML keys before tables.
    fn load(extra: &str) -> Result<NodeConfig, NodeConfigError> {
        let (top, tables) = match extra.strip_prefix("protocol") {
            Some(_) => extra.split_once('\n').unwrap_or((extra, "")),
            None => ("", extra),
        };
        parse(
            &format!("{top}\n{MEMBERS}{tables}"),
            Some(0),
            Path::new("/tmp"),
        )
    }

    fn field(extra: &str) -> String {
        match load(extra) {
            Err(NodeConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an Invalid error, got {other:?}"),
        }
    }

    #[test]
    fn each_leader_protocol_is_picked_by_name_with_its_section_and_the_proposer_keys() {
        let c = load(
            "protocol = \"seqpaxos\"\n[ring]\nwindow_values = 1000000\nbatch_linger_us = 50\n\
             [seqpaxos]\nheartbeat_interval_ms = 20\npriorities = [{ node = 2, priority = 3 }]\n",
        )
        .unwrap();
        assert_eq!(c.protocol, ProtocolKind::Leader);
        assert_eq!(c.window_values(), 1_000_000);
        let Some(LeaderProtocol::SeqPaxos(sp)) = &c.leader else {
            panic!("{:?}", c.leader)
        };
        assert_eq!(sp.heartbeat_interval_us, 20_000);
        assert_eq!(sp.batch_linger_us, 50);
        assert_eq!(sp.priorities, vec![(NodeId(2), 3)]);
        assert_eq!(sp.transfer, Transfer::Pull);
        let c =
            load("protocol = \"seqpaxos\"\n[seqpaxos]\ntransfer = \"eager\"\nfetch_parallel = 2\n")
                .unwrap();
        let Some(LeaderProtocol::SeqPaxos(sp)) = &c.leader else {
            panic!("{:?}", c.leader)
        };
        assert_eq!((sp.transfer, sp.fetch_parallel), (Transfer::Eager, 2));
        // Memory storage, no interval given: the log is compacted all the same.
        assert_eq!(c.storage.snapshot_interval_ms, 1000);

        let c = load("protocol = \"raft\"\n[raft]\nelection_timeout_min_ms = 150\nelection_timeout_max_ms = 300\nread_lease = true\n").unwrap();
        let Some(LeaderProtocol::Raft(r)) = &c.leader else {
            panic!("{:?}", c.leader)
        };
        assert_eq!(
            (
                r.election_timeout_min_us,
                r.election_timeout_max_us,
                r.read_lease
            ),
            (150_000, 300_000, true)
        );
        assert_eq!(r.voters.len(), 3);

        let c =
            load("protocol = \"omnipaxos\"\n[omnipaxos]\nelection_tick_timeout = 20\n").unwrap();
        assert!(
            matches!(&c.leader, Some(LeaderProtocol::OmniPaxos(o)) if o.election_tick_timeout == 20)
        );
        let c = load("protocol = \"raftrs\"\n[raftrs]\nelection_tick = 30\n").unwrap();
        assert!(matches!(&c.leader, Some(LeaderProtocol::RaftRs(o)) if o.election_tick == 30));
        // The ring protocols are untouched.
        assert_eq!(load("").unwrap().leader, None);
    }

    /// A Promise or AcceptSync that cannot fit in a frame would never arrive.
    #[test]
    fn an_undecided_tail_beyond_the_frame_limit_is_refused() {
        let c =
            load("protocol = \"seqpaxos\"\n[seqpaxos]\nuncommitted_bytes_max = 8388608\n").unwrap();
        let Some(LeaderProtocol::SeqPaxos(sp)) = &c.leader else {
            panic!("{:?}", c.leader)
        };
        assert_eq!(sp.uncommitted_bytes_max, 8 << 20);
        let err = load("protocol = \"seqpaxos\"\n[seqpaxos]\nuncommitted_bytes_max = 40000000\n");
        assert!(
            matches!(&err, Err(NodeConfigError::Invalid { field, .. })
                if field == "seqpaxos.uncommitted_bytes_max"),
            "{err:?}"
        );
        let err = load("protocol = \"seqpaxos\"\n[seqpaxos]\nuncommitted_bytes_max = 2048\n");
        assert!(
            matches!(&err, Err(NodeConfigError::Invalid { field, .. })
                if field == "seqpaxos.uncommitted_bytes_max"),
            "{err:?}"
        );
    }

    #[test]
    fn a_raft_member_without_the_acceptor_role_is_a_learner() {
        let text = MEMBERS.replacen(
            "id = 2\naddr = \"127.0.0.1:7402\"",
            "id = 2\naddr = \"127.0.0.1:7402\"\nroles = [\"learner\"]",
            1,
        );
        let c = parse(
            &format!("protocol = \"raft\"\n{text}"),
            Some(0),
            Path::new("/tmp"),
        )
        .unwrap();
        let Some(LeaderProtocol::Raft(r)) = &c.leader else {
            panic!("{:?}", c.leader)
        };
        assert_eq!(r.voters, vec![NodeId(0), NodeId(1)]);
        assert_eq!(r.learners, vec![NodeId(2)]);
        // Sequence Paxos refuses it: every member is a replica.
        let err = parse(
            &format!("protocol = \"seqpaxos\"\n{text}"),
            Some(0),
            Path::new("/tmp"),
        );
        assert!(
            matches!(&err, Err(NodeConfigError::Invalid { field, .. }) if field == "members.roles"),
            "{err:?}"
        );
    }

    /// The members with node 3 added as a spare.
    fn with_spare(protocol: &str) -> Result<NodeConfig, NodeConfigError> {
        parse(
            &format!(
                "protocol = \"{protocol}\"\n{MEMBERS}[[members]]\nid = 3\naddr = \"127.0.0.1:7403\"\n\
                 spare = true\n"
            ),
            Some(3),
            Path::new("/tmp"),
        )
    }

    #[test]
    fn a_spare_is_in_the_address_book_but_not_in_the_first_configuration() {
        let c = with_spare("seqpaxos").unwrap();
        assert_eq!(c.spares, vec![NodeId(3)]);
        assert_eq!(c.members.len(), 4);
        assert!(c.peer_addrs().iter().any(|(n, _)| *n == NodeId(3)));
        let Some(LeaderProtocol::SeqPaxos(sp)) = &c.leader else {
            panic!("{:?}", c.leader)
        };
        let ids: Vec<u32> = sp.members.iter().map(|m| m.id.0).collect();
        assert_eq!(ids, vec![0, 1, 2]);
        let c = with_spare("raft").unwrap();
        let Some(LeaderProtocol::Raft(r)) = &c.leader else {
            panic!("{:?}", c.leader)
        };
        assert_eq!(r.voters, vec![NodeId(0), NodeId(1), NodeId(2)]);
        assert!(r.learners.is_empty());
        // A priority may name the spare: it is a candidate once a configuration names it.
        let text = format!(
            "protocol = \"seqpaxos\"\n{MEMBERS}[[members]]\nid = 3\naddr = \"127.0.0.1:7403\"\n\
             spare = true\n[seqpaxos]\npriorities = [{{ node = 3, priority = 2 }}]\n"
        );
        assert!(parse(&text, Some(0), Path::new("/tmp")).is_ok());
    }

    #[test]
    fn spares_are_refused_where_nothing_could_add_them() {
        for protocol in ["uring", "ringpaxos", "omnipaxos", "raftrs"] {
            let err = with_spare(protocol);
            assert!(
                matches!(&err, Err(NodeConfigError::Invalid { field, reason })
                    if field == "members[3].spare" && reason.contains(protocol)),
                "{protocol}: {err:?}"
            );
        }
        let all = MEMBERS.replace("\"\n", "\"\nspare = true\n");
        let err = parse(
            &format!("protocol = \"raft\"\n{all}"),
            Some(0),
            Path::new("/tmp"),
        );
        assert!(
            matches!(&err, Err(NodeConfigError::Invalid { field, .. }) if field == "members"),
            "{err:?}"
        );
        assert!(matches!(
            parse(
                &format!("protocol = \"raft\"\n{MEMBERS}spare = \"yes\"\n"),
                Some(0),
                Path::new("/tmp")
            ),
            Err(NodeConfigError::Syntax(_))
        ));
    }

    #[test]
    fn wrong_settings_are_refused_naming_the_field() {
        // A ring-only key does nothing for a leader-based protocol: refused.
        assert_eq!(
            field("protocol = \"seqpaxos\"\n[ring]\np1_resend_ms = 100\n"),
            "ring.p1_resend_ms"
        );
        // Another protocol's section.
        assert_eq!(
            field("protocol = \"seqpaxos\"\n[raft]\npre_vote = false\n"),
            "raft"
        );
        assert_eq!(field("[seqpaxos]\nresend_ms = 10\n"), "seqpaxos");
        // No log at all.
        assert_eq!(
            field("protocol = \"raft\"\n[storage]\nkind = \"none\"\n"),
            "storage.kind"
        );
        // The peer cores run on their crates' memory storage.
        assert_eq!(
            field("protocol = \"omnipaxos\"\n[storage]\nkind = \"durable\"\n"),
            "storage.kind"
        );
        // Bad values.
        assert_eq!(
            field(
                "protocol = \"seqpaxos\"\n[seqpaxos]\npriorities = [{ node = 9, priority = 1 }]\n"
            ),
            "seqpaxos.priorities[0].node"
        );
        assert_eq!(
            field("protocol = \"seqpaxos\"\n[seqpaxos]\ntransfer = \"lazy\"\n"),
            "seqpaxos.transfer"
        );
        assert_eq!(
            field("protocol = \"seqpaxos\"\n[seqpaxos]\nfetch_parallel = 0\n"),
            "seqpaxos.fetch_parallel"
        );
        assert_eq!(
            field("protocol = \"raft\"\n[raft]\nheartbeat_interval_ms = 0\n"),
            "raft.heartbeat_interval_ms"
        );
        assert_eq!(
            field("protocol = \"raft\"\n[ring]\nwindow_values = 0\n"),
            "ring.window_values"
        );
        // Raft and Sequence Paxos snapshot; the peer cores do not, and say so.
        for p in ["raft", "seqpaxos"] {
            let c = load(&format!(
                "protocol = \"{p}\"\n[storage]\nsnapshot_interval_ms = 1000\n"
            ))
            .unwrap();
            assert_eq!(c.storage.snapshot_interval_ms, 1000, "{p}");
        }
        for p in ["omnipaxos", "raftrs"] {
            assert_eq!(
                field(&format!(
                    "protocol = \"{p}\"\n[storage]\nsnapshot_interval_ms = 1000\n"
                )),
                "storage.snapshot_interval_ms",
                "{p}"
            );
        }
        assert_eq!(
            field("protocol = \"raft\"\n[multicast]\ngroup = \"239.1.1.1:3000\"\n"),
            "multicast"
        );
        assert!(matches!(
            load("protocol = \"seqpaxos\"\n[seqpaxos]\nbogus = 1\n"),
            Err(NodeConfigError::Syntax(_))
        ));
        assert_eq!(field("protocol = \"paxos\"\n"), "protocol");
    }
}
