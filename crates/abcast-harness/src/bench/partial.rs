//! `abcast bench partial-connectivity`: the partial-connectivity scenarios of OmniPaxos
//! (EuroSys'23, "Omni-Paxos: Breaking the Barriers of Partial Connectivity", §2 and §7.2) on
//! real node processes, and the case openraft found with Jepsen (openraft issue 2080); issue
//! 17, must-show 2: Sequence Paxos with BLE elects a leader that a majority can reach and
//! resumes within 4 election timeouts in each scenario.
//!
//! Network. Every node runs in a network namespace of its own, on a bridge (`lan.rs`, links
//! of 10 Gbit/s so the shaper never binds). The cut is one nft table on the bridge, in the
//! caller's namespace (`table bridge abcast_pc_pcb`, chain `cut` on the `forward` hook): one
//! rule per directed link, `ip saddr FROM ip daddr TO drop`, so a link can be cut one way;
//! every scenario here cuts both directions of its pairs. Packets vanish silently, as on a
//! broken switch port: the sender's TCP connection just stalls (no reset, no error; the node
//! sees nothing but silence). One `nft -f` script is one transaction, so every link of a
//! scenario goes at the same instant. The table is deleted when the run ends (also on error
//! and Ctrl-C, which stops the run and writes what was measured), and a table or namespace
//! left by a run that died (`kill -9`) is removed when the next run starts.
//!
//! The scenarios, as the paper's artifact builds them (`omnipaxos-artifacts`,
//! `client.rs::create_partition`), with L the leader when the cut is made:
//! - **quorum-loss** (5 nodes): one follower C stays connected to everyone; every other
//!   pair is cut. L reaches only C, so it has lost its quorum; only C is quorum-connected.
//! - **constrained-election** (5 nodes): C is first cut off from everyone for a while (its
//!   log goes stale while L keeps deciding with the other three), then L is isolated and
//!   B, D, E reach only C. C is the only quorum-connected node and has the oldest log: Raft
//!   cannot elect it (its log is not up to date), and nobody else can reach a majority.
//!   The artifact cuts C from L only, before the final cut; here C is cut from every node
//!   so that its log goes stale under every protocol (a protocol that lets a node which
//!   lost only its leader take over, as BLE without OmniPaxos' "happy" check does, would
//!   otherwise make C the leader before the scenario starts). While C is stale its links
//!   are refused with TCP resets by rules in C's own namespace (`table inet abcast_pc`), so
//!   that when they come back at the cut both ends re-dial at once instead of waiting out
//!   TCP's retransmission backoff on stalled connections; the heal is applied right after
//!   the cut, and its few milliseconds count against the protocol.
//! - **chained** (3 nodes): the link L–F between the leader and one follower is cut; B is
//!   connected to both. L and B are a majority: a protocol need not change leader at all,
//!   but a follower that times out must not disrupt the leader (Raft without pre-vote
//!   livelocks here).
//! - **bridged-leader** (5 nodes, openraft issue 2080): a, b and a bridge X are fully
//!   connected (a quorum); the old leader reaches only X; the fifth node reaches nobody.
//!   In openraft the old leader's heartbeats renewed X's leader lease, so X refused to vote
//!   and the connected quorum never elected.
//!
//! Measurement. Every node runs the load generator with `--load-at-leader` (only the node
//! that leads proposes, 16-byte values at a fixed rate) and prints a stats line every
//! [`STATS_MS`]. A run starts the cluster, waits until every node names the same leader and
//! values flow, arranges the scenario's roles, applies the cut (T0 = when the nft
//! transaction has returned) and watches the stats lines. It has recovered at the first line after
//! which a majority of nodes have delivered a value proposed after T0: for some node o, a
//! majority report more values of origin o delivered than o had proposed in its first line
//! after T0. A value proposed after the cut and delivered at a majority means a leader that
//! a majority can reach was elected and decides again; nothing decided before the cut, and
//! no line that lags it, can pass that test. A run that has not recovered [`CAP`] after T0
//! never recovered (-1). After recovery the run is watched [`HOLD`] longer for the longest
//! stall (no progress at a majority) and the leader changes, which a livelock would show.
//! The resolution is one stats period: a recovery is seen at the first line after it.
//!
//! Results per invocation: `results.csv` (one row per run), `plot.png` (recovery time per
//! scenario and protocol, log scale, with each protocol's 4-election-timeout bound; and
//! values delivered at a majority around T0), `summary.md`, and per run a report with the
//! roles, the coordinator each node named over time, and every node's log
//! (`runs/SCENARIO-PROTOCOL-rN/`). Needs root (namespaces, `nft`). `ABCAST_PC_SCENARIOS`
//! (comma-separated names) runs only some scenarios.

use super::BenchArgs;
use super::lan::EmulatedLan;
use super::machine;
use super::output::{
    command_line, create_out_dir, csv_field, finish, note_interrupted, push_failed_runs, write_file,
};
use crate::cluster::set_toml_key;
use crate::error::HarnessError;
use crate::format::utc_now;
use crate::plot::{FONT_FAMILY, PALETTE, ensure_font};
use abcast_node::leader::LeaderProtocol;
use abcast_node::stats::{self, StatsLine};
use plotters::prelude::*;
use plotters::style::FontStyle;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, Read, Write as _};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The protocols run when `--protocols` is not given.
pub const DEFAULT_PROTOCOLS: [&str; 2] = ["seqpaxos", "raft"];
/// Every protocol the bench can run.
pub const PROTOCOLS: [&str; 4] = ["seqpaxos", "raft", "omnipaxos", "raftrs"];
/// Stats period of every node: the resolution of the recovery time.
pub const STATS_MS: u64 = 10;
/// Offered load at the leader, values per second, and the size of each value.
pub const LOAD_RATE_PER_S: u64 = 1000;
pub const VALUE_BYTES: u64 = 16;
/// The leader's values in flight.
const LOAD_WINDOW: u64 = 64;
/// Longest wait for the first leader, and how long values must flow under it before the cut.
const SETTLE_MAX: Duration = Duration::from_secs(20);
const WARMUP: Duration = Duration::from_millis(1500);
/// Values a majority must deliver during the warm-up.
const WARMUP_VALUES_MIN: u64 = 100;
/// How long C is cut off before the cut in the constrained-election scenario.
const STALE_FOR: Duration = Duration::from_secs(1);
/// A run that has not recovered this long after T0 never recovered.
pub const CAP: Duration = Duration::from_secs(10);
/// How long a recovered run is watched for stalls and leader changes.
pub const HOLD: Duration = Duration::from_secs(2);
/// The must-show bound, in election timeouts.
pub const BOUND_ELECTION_TIMEOUTS: f64 = 4.0;
/// Reconnect backoff cap of the nodes' peer links: a link that comes back (constrained
/// election's stale node) is re-dialled within this long. Links cut by the scenarios stall
/// silently and are never re-dialled, so this does not touch what is measured.
const BACKOFF_MS_MAX: i64 = 20;
/// The emulated LAN: its tag, and links fast enough that the shaper never binds.
const LAN_TAG: &str = "pcb";
const LAN_RATE_MBIT: u32 = 10_000;
/// Peer ports from here (each node has its own address, so they never clash).
const PORT_BASE: u16 = 7400;
/// The nft table every node's namespace gets (and, with the LAN's tag, the bridge's).
const NFT_TABLE: &str = "abcast_pc";
/// The largest cluster of any scenario.
const NODES_MAX_HERE: usize = 5;
/// Most coordinator changes recorded per run (a livelock makes many).
const EVENTS_MAX: usize = 2000;
/// Lines of a node's log quoted in an error.
const LOG_TAIL_LINES: usize = 6;

/// One scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scenario {
    QuorumLoss,
    ConstrainedElection,
    Chained,
    BridgedLeader,
}

impl Scenario {
    pub const ALL: [Scenario; 4] = [
        Scenario::QuorumLoss,
        Scenario::ConstrainedElection,
        Scenario::Chained,
        Scenario::BridgedLeader,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::QuorumLoss => "quorum-loss",
            Scenario::ConstrainedElection => "constrained-election",
            Scenario::Chained => "chained",
            Scenario::BridgedLeader => "bridged-leader",
        }
    }

    /// The name in JSON keys.
    pub fn key(self) -> &'static str {
        match self {
            Scenario::QuorumLoss => "quorum_loss",
            Scenario::ConstrainedElection => "constrained_election",
            Scenario::Chained => "chained",
            Scenario::BridgedLeader => "bridged_leader",
        }
    }

    /// One of the paper's three (the `_max` keys cover these).
    pub fn in_paper(self) -> bool {
        self != Scenario::BridgedLeader
    }

    pub fn nodes(self) -> u32 {
        match self {
            Scenario::Chained => 3,
            _ => 5,
        }
    }

    fn about(self) -> &'static str {
        match self {
            Scenario::QuorumLoss => {
                "5 nodes; one follower C keeps every link, every other pair is cut: the \
                 leader reaches only C, and only C is quorum-connected"
            }
            Scenario::ConstrainedElection => {
                "5 nodes; C is cut off for 1 s (its log goes stale), then the leader is \
                 isolated and the other three reach only C: the only quorum-connected node \
                 has the oldest log"
            }
            Scenario::Chained => {
                "3 nodes; the link between the leader and one follower F is cut, the third \
                 node B reaches both"
            }
            Scenario::BridgedLeader => {
                "5 nodes (openraft issue 2080); a, b and a bridge X stay fully connected, the \
                 old leader reaches only X, the fifth node reaches nobody"
            }
        }
    }

    /// The roles and the links to cut, given the leader at the cut and, for the
    /// constrained election, the stale node chosen before it. Followers take their roles
    /// in id order.
    fn plan(self, nodes: u32, leader: u32, stale: Option<u32>) -> Plan {
        let mut followers: Vec<u32> = (0..nodes).filter(|&n| n != leader).collect();
        if let Some(c) = stale {
            // The stale node first: it is C.
            followers.retain(|&n| n != c);
            followers.insert(0, c);
        }
        let mut roles = vec![("L".to_string(), leader)];
        let mut cut: Vec<(u32, u32)> = Vec::new();
        let all_pairs = |except: &[u32]| -> Vec<(u32, u32)> {
            let mut v = Vec::new();
            for a in 0..nodes {
                for b in a + 1..nodes {
                    if !except.contains(&a) && !except.contains(&b) {
                        v.push((a, b));
                    }
                }
            }
            v
        };
        let f = |i: usize| followers.get(i).copied().unwrap_or(u32::MAX);
        match self {
            Scenario::QuorumLoss => {
                roles.push(("C".into(), f(0)));
                cut = all_pairs(&[f(0)]);
            }
            Scenario::ConstrainedElection => {
                roles.push(("C".into(), f(0)));
                for n in 0..nodes {
                    if n != leader {
                        cut.push((leader.min(n), leader.max(n)));
                    }
                }
                cut.extend(all_pairs(&[leader, f(0)]));
            }
            Scenario::Chained => {
                roles.push(("F".into(), f(0)));
                roles.push(("B".into(), f(1)));
                cut.push((leader.min(f(0)), leader.max(f(0))));
            }
            Scenario::BridgedLeader => {
                let (x, a, b, iso) = (f(0), f(1), f(2), f(3));
                roles.extend([
                    ("X".to_string(), x),
                    ("a".to_string(), a),
                    ("b".to_string(), b),
                    ("isolated".to_string(), iso),
                ]);
                let kept = [(a, b), (a, x), (b, x), (x, leader)];
                cut = all_pairs(&[])
                    .into_iter()
                    .filter(|&(p, q)| {
                        !kept
                            .iter()
                            .any(|&(u, v)| (u, v) == (p, q) || (v, u) == (p, q))
                    })
                    .collect();
            }
        }
        cut.sort_unstable();
        cut.dedup();
        Plan { roles, cut }
    }
}

/// Who plays which role, and the pairs whose links are cut (both directions).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    roles: Vec<(String, u32)>,
    cut: Vec<(u32, u32)>,
}

impl Plan {
    fn roles_text(&self) -> String {
        self.roles
            .iter()
            .map(|(r, n)| format!("{r}=n{n}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
    fn cut_text(&self) -> String {
        self.cut
            .iter()
            .map(|(a, b)| format!("n{a}-n{b}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The `nft -f` script of the cut: the bridge's table, its `forward` chain emptied, then
/// one rule per directed link that drops what the first address sends the second, on
/// frames that enter the bridge from one of the LAN's ports (`ports`, an interface-name
/// pattern). One script is one nft transaction, so every link of a scenario is cut at the
/// same instant.
fn bridge_script(table: &str, ports: &str, links: &[(Ipv4Addr, Ipv4Addr)]) -> String {
    let mut s = format!(
        "add table bridge {table}\n\
         add chain bridge {table} cut {{ type filter hook forward priority 0; policy accept; }}\n\
         flush chain bridge {table} cut\n"
    );
    for (from, to) in links {
        let _ = writeln!(
            s,
            "add rule bridge {table} cut iifname \"{ports}\" ip saddr {from} ip daddr {to} drop"
        );
    }
    s
}

/// The `nft -f` script of a node's namespace: every TCP segment between it and these peers
/// is refused with a reset, both ways (the stale phase of the constrained election; the
/// bridge family cannot reject here). What comes in from a peer is answered with a reset
/// (resets themselves pass, or neither side would learn), what goes out to one is refused
/// locally with a reset: each side's connection breaks at its next segment, and a new
/// connect fails at once. No peer: no rule.
fn reset_script(peers: &[Ipv4Addr]) -> String {
    let mut s = String::new();
    for chain in ["input", "output"] {
        let _ = write!(
            s,
            "add table inet {NFT_TABLE}\n\
             add chain inet {NFT_TABLE} {chain} {{ type filter hook {chain} priority 0; policy accept; }}\n\
             flush chain inet {NFT_TABLE} {chain}\n"
        );
    }
    for addr in peers {
        let _ = writeln!(
            s,
            "add rule inet {NFT_TABLE} input ip saddr {addr} tcp flags & rst == 0 reject with tcp reset"
        );
        let _ = writeln!(
            s,
            "add rule inet {NFT_TABLE} output ip daddr {addr} meta l4proto tcp reject with tcp reset"
        );
    }
    s
}

/// The election timeout of a protocol's config, as it times out a leader.
#[derive(Debug, Clone)]
pub struct ElectionTimeout {
    pub min_ms: f64,
    pub max_ms: f64,
    /// Where it comes from, for the summary.
    pub source: String,
}

impl ElectionTimeout {
    /// The must-show bound: 4 election timeouts (the longest the config can draw).
    pub fn bound_ms(&self) -> f64 {
        BOUND_ELECTION_TIMEOUTS * self.max_ms
    }
}

fn election_timeout(lp: &LeaderProtocol) -> ElectionTimeout {
    let ms = |us: u64| us as f64 / 1000.0;
    match lp {
        LeaderProtocol::SeqPaxos(c) => ElectionTimeout {
            min_ms: ms(c.heartbeat_interval_us),
            max_ms: ms(c.heartbeat_interval_us),
            source: format!(
                "[seqpaxos] heartbeat_interval_ms = {} (BLE's Δ: a leader missing from one \
                 heartbeat round is replaced)",
                ms(c.heartbeat_interval_us)
            ),
        },
        LeaderProtocol::Raft(c) => ElectionTimeout {
            min_ms: ms(c.election_timeout_min_us),
            max_ms: ms(c.election_timeout_max_us),
            source: format!(
                "[raft] election_timeout_min_ms = {}, election_timeout_max_ms = {}, \
                 pre_vote = {}, check_quorum = {}",
                ms(c.election_timeout_min_us),
                ms(c.election_timeout_max_us),
                c.pre_vote,
                c.check_quorum
            ),
        },
        LeaderProtocol::OmniPaxos(c) => {
            let t = ms(c.tick_us.saturating_mul(c.election_tick_timeout));
            ElectionTimeout {
                min_ms: t,
                max_ms: t,
                source: format!(
                    "[omnipaxos] tick_ms = {} x election_tick_timeout = {}",
                    ms(c.tick_us),
                    c.election_tick_timeout
                ),
            }
        }
        LeaderProtocol::RaftRs(c) => {
            let t = ms(c.tick_us.saturating_mul(c.election_tick as u64));
            ElectionTimeout {
                min_ms: t,
                max_ms: 2.0 * t,
                source: format!(
                    "[raftrs] tick_ms = {} x election_tick = {} (raft-rs draws it in [1, 2) \
                     times that)",
                    ms(c.tick_us),
                    c.election_tick
                ),
            }
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub scenario: Scenario,
    pub protocol: &'static str,
    pub run: u32,
    pub leader_before: Option<u32>,
    pub roles: String,
    pub cut: String,
    /// Constrained election: how many values C had not delivered at the cut.
    pub stale_by_values: Option<u64>,
    /// How long applying the cut took (T0 is its end).
    pub apply_ms: f64,
    /// `None`: never recovered within [`CAP`].
    pub recovery_ms: Option<f64>,
    /// The coordinator most nodes named when the run recovered: the new leader.
    pub new_leader: Option<u32>,
    /// The node whose post-cut value a majority delivered first (the new leader, or the old
    /// one when its last proposals were committed by the new one).
    pub first_value_from: Option<u32>,
    /// Longest time without progress at a majority in the [`HOLD`] after recovery.
    pub stall_ms_max: Option<f64>,
    /// Coordinator changes the nodes reported after T0, summed over nodes.
    pub coordinator_changes: usize,
    /// Each node's coordinator at the end of the run.
    pub final_views: String,
    /// Values delivered at a majority since T0, over seconds since T0.
    pub series: Vec<(f64, f64)>,
    /// Why the run could not be measured.
    pub error: Option<String>,
}

impl RunResult {
    fn new(scenario: Scenario, protocol: &'static str, run: u32) -> RunResult {
        RunResult {
            scenario,
            protocol,
            run,
            leader_before: None,
            roles: String::new(),
            cut: String::new(),
            stale_by_values: None,
            apply_ms: f64::NAN,
            recovery_ms: None,
            new_leader: None,
            first_value_from: None,
            stall_ms_max: None,
            coordinator_changes: 0,
            final_views: String::new(),
            series: Vec::new(),
            error: None,
        }
    }

    /// The recovery time for medians: never = infinity.
    fn recovery_or_inf(&self) -> f64 {
        self.recovery_ms.unwrap_or(f64::INFINITY)
    }
}

/// The median of recovery times where a run that never recovered counts as infinitely
/// long; `None` = no run, `Some(inf)` = the median run never recovered.
pub fn median_recovery(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// A recovery time as the JSON and CSV give it: -1 for never.
fn as_json_ms(v: Option<f64>) -> Value {
    match v {
        Some(x) if x.is_finite() => json!((x * 10.0).round() / 10.0),
        Some(_) => json!(-1),
        None => Value::Null,
    }
}

fn show_ms(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.0} ms")
    } else {
        format!("never (> {} s)", CAP.as_secs())
    }
}

/// A fresh random number from the OS-seeded hasher.
fn random_u64(salt: u64) -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(salt);
    h.write_u64(u64::from(std::process::id()));
    h.finish()
}

/// Set by SIGINT or SIGTERM: the current run stops, its namespaces are removed, and the
/// runs measured so far are written.
fn stop_flag() -> &'static Arc<AtomicBool> {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // Without the handler the signal ends the process (the next run's start removes
            // the leftover namespaces): an acceptable fallback.
            let _ = signal_hook::flag::register(sig, Arc::clone(&flag));
        }
        flag
    })
}

fn interrupted() -> bool {
    stop_flag().load(Ordering::Relaxed)
}

/// Root and the `nft` and `ip` programs, or a clear error.
fn check_privileges() -> Result<(), HarnessError> {
    // SAFETY: geteuid has no preconditions and no side effects.
    if unsafe { libc::geteuid() } != 0 {
        return Err(HarnessError::Usage(
            "bench partial-connectivity needs root: it builds network namespaces, veth pairs \
             and a bridge, and cuts links with nft rules (run it with sudo)"
                .to_string(),
        ));
    }
    for (program, package) in [("nft", "nftables"), ("ip", "iproute2"), ("tc", "iproute2")] {
        let ok = Command::new(program)
            .arg(if program == "nft" { "--version" } else { "-V" })
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return Err(HarnessError::Runtime(format!(
                "bench partial-connectivity cannot run `{program}`: install the {package} \
                 package (apt-get install {package})"
            )));
        }
    }
    Ok(())
}

/// The scenarios to run: all, or those `ABCAST_PC_SCENARIOS` names (comma-separated), to
/// study one without waiting for the others.
fn scenarios_from_env() -> Result<Vec<Scenario>, HarnessError> {
    match std::env::var("ABCAST_PC_SCENARIOS") {
        Ok(list) if !list.trim().is_empty() => parse_scenarios(&list),
        _ => Ok(Scenario::ALL.to_vec()),
    }
}

fn parse_scenarios(list: &str) -> Result<Vec<Scenario>, HarnessError> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some(s) = Scenario::ALL.iter().find(|s| s.name() == name) else {
            return Err(HarnessError::Usage(format!(
                "ABCAST_PC_SCENARIOS: unknown scenario {name:?} (choose from {})",
                Scenario::ALL.map(Scenario::name).join(", ")
            )));
        };
        if !out.contains(s) {
            out.push(*s);
        }
    }
    Ok(out)
}

/// `--protocols`, checked.
fn parse_protocols(list: Option<&str>) -> Result<Vec<&'static str>, HarnessError> {
    let Some(list) = list else {
        return Ok(DEFAULT_PROTOCOLS.to_vec());
    };
    let mut out: Vec<&'static str> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some(&p) = PROTOCOLS.iter().find(|p| **p == name) else {
            return Err(HarnessError::Usage(format!(
                "--protocols: unknown protocol {name:?} (choose from {})",
                PROTOCOLS.join(", ")
            )));
        };
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.is_empty() {
        return Err(HarnessError::Usage(
            "--protocols: name at least one protocol".to_string(),
        ));
    }
    Ok(out)
}

/// The cluster config for `nodes` nodes of `protocol`, node i at `addrs[i]`.
fn cluster_toml(
    protocol: &str,
    addrs: &[Ipv4Addr],
    data_dir: &Path,
) -> Result<toml::Table, HarnessError> {
    let text = abcast_node::nodeconfig::local_cluster(addrs.len(), PORT_BASE);
    let mut t: toml::Table = text.parse().map_err(|e| {
        HarnessError::Runtime(format!(
            "nodeconfig::local_cluster produced invalid TOML: {e}"
        ))
    })?;
    let id = i64::from((random_u64(3) >> 33) as u32) + 2;
    let edits: Vec<(String, toml::Value)> = vec![
        ("protocol".into(), toml::Value::from(protocol)),
        ("cluster_id".into(), toml::Value::Integer(id)),
        ("storage.kind".into(), toml::Value::from("memory")),
        (
            "storage.dir".into(),
            toml::Value::String(data_dir.display().to_string()),
        ),
        (
            "transport.backoff_ms_max".into(),
            toml::Value::Integer(BACKOFF_MS_MAX),
        ),
    ];
    for (k, v) in edits {
        set_toml_key(&mut t, &k, v)?;
    }
    for (i, addr) in addrs.iter().enumerate() {
        let peer = PORT_BASE + i as u16;
        set_toml_key(
            &mut t,
            &format!("members[{i}].addr"),
            toml::Value::String(format!("{addr}:{peer}")),
        )?;
        set_toml_key(
            &mut t,
            &format!("members[{i}].client_addr"),
            toml::Value::String(format!("{addr}:{}", peer + 100)),
        )?;
    }
    Ok(t)
}

/// The election timeout `protocol` runs with, read from the config the runs use.
fn protocol_timeout(protocol: &str) -> Result<ElectionTimeout, HarnessError> {
    let addrs: Vec<Ipv4Addr> = (1..=3).map(|i| Ipv4Addr::new(10, 0, 0, i)).collect();
    let t = cluster_toml(protocol, &addrs, Path::new("/nonexistent"))?;
    let text = toml::to_string(&t)
        .map_err(|e| HarnessError::Runtime(format!("cannot render the config: {e}")))?;
    let cfg = abcast_node::nodeconfig::parse(&text, Some(0), Path::new("/"))
        .map_err(|e| HarnessError::Runtime(format!("the {protocol} config is refused: {e}")))?;
    match cfg.leader.as_ref() {
        Some(lp) => Ok(election_timeout(lp)),
        None => Err(HarnessError::Runtime(format!(
            "{protocol} is not a leader-based protocol"
        ))),
    }
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// One stats line from a node's stdout.
struct Event {
    node: usize,
    at: Instant,
    line: Result<StatsLine, String>,
}

/// Reads a node's stdout into the channel, one event per line; over-long lines are cut and
/// reported bad.
fn spawn_reader(node: usize, out: impl Read + Send + 'static, tx: mpsc::SyncSender<Event>) {
    let spawned = std::thread::Builder::new()
        .name(format!("pc-stats-{node}"))
        .spawn(move || {
            let mut reader = BufReader::new(out);
            let mut buf = Vec::new();
            let limit = (stats::LINE_BYTES_MAX + 1) as u64;
            loop {
                buf.clear();
                match (&mut reader).take(limit).read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
                let line = if buf.len() > stats::LINE_BYTES_MAX {
                    Err(format!("line longer than {} bytes", stats::LINE_BYTES_MAX))
                } else {
                    stats::parse_line(&String::from_utf8_lossy(&buf)).map_err(|e| e.to_string())
                };
                let ev = Event {
                    node,
                    at: Instant::now(),
                    line,
                };
                if tx.send(ev).is_err() {
                    return;
                }
            }
        });
    // A reader that cannot start leaves its node silent: the settle timeout reports it.
    drop(spawned);
}

/// The node processes of one run. Dropping it kills them.
struct Nodes {
    children: Vec<Option<Child>>,
    logs: Vec<PathBuf>,
}

impl Nodes {
    fn spawn(
        lan: &EmulatedLan,
        config: &Path,
        dir: &Path,
        tx: &mpsc::SyncSender<Event>,
    ) -> Result<Nodes, HarnessError> {
        let program = std::env::current_exe().map_err(|e| {
            HarnessError::Runtime(format!("cannot find this executable to start nodes: {e}"))
        })?;
        let mut nodes = Nodes {
            children: Vec::new(),
            logs: Vec::new(),
        };
        for (i, place) in lan.nodes.iter().enumerate() {
            let log_path = dir.join(format!("node-{i}.log"));
            let log = fs::File::create(&log_path).map_err(|e| {
                HarnessError::Runtime(format!("cannot create {}: {e}", log_path.display()))
            })?;
            // `ip netns exec` enters the namespace and execs the node in place: the pid is
            // the node's.
            let mut child = Command::new("ip")
                .args(["netns", "exec", &place.netns])
                .arg(&program)
                .arg("node")
                .arg("--config")
                .arg(config)
                .args(["--id", &i.to_string(), "--json-stats"])
                .args(["--stats-ms", &STATS_MS.to_string()])
                .args(["--load-rate", &LOAD_RATE_PER_S.to_string()])
                .args(["--load-value-size", &VALUE_BYTES.to_string()])
                .args(["--load-window", &LOAD_WINDOW.to_string()])
                .arg("--load-at-leader")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::from(log))
                .spawn()
                .map_err(|e| {
                    HarnessError::Runtime(format!("cannot start node {i} in {}: {e}", place.netns))
                })?;
            if let Some(out) = child.stdout.take() {
                spawn_reader(i, out, tx.clone());
            }
            nodes.children.push(Some(child));
            nodes.logs.push(log_path);
        }
        Ok(nodes)
    }

    /// An error naming the first node that exited, with its log's tail.
    fn check_alive(&mut self) -> Result<(), HarnessError> {
        for (i, c) in self.children.iter_mut().enumerate() {
            if let Some(child) = c.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                *c = None;
                return Err(HarnessError::Runtime(format!(
                    "node {i} exited ({status}); its log ends:\n{}",
                    log_tail(&self.logs[i])
                )));
            }
        }
        Ok(())
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            if let Some(mut child) = c.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// What the harness knows of each node: its latest line and when it came.
struct Views {
    latest: Vec<Option<StatsLine>>,
    majority: usize,
}

impl Views {
    fn new(n: usize) -> Views {
        Views {
            latest: vec![None; n],
            majority: n / 2 + 1,
        }
    }

    /// The count a majority has delivered: the majority-th largest.
    fn majority_delivered(&self) -> u64 {
        let mut v: Vec<u64> = self
            .latest
            .iter()
            .map(|l| l.as_ref().map_or(0, |l| l.delivered_values))
            .collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.get(self.majority - 1).copied().unwrap_or(0)
    }

    /// The coordinator every node names, if they all name the same one.
    fn unanimous_coordinator(&self) -> Option<u32> {
        let mut c = None;
        for l in &self.latest {
            let named = l.as_ref()?.coordinator?;
            match c {
                None => c = Some(named),
                Some(x) if x == named => {}
                Some(_) => return None,
            }
        }
        c
    }

    /// The coordinator most nodes name (ties: the lower id).
    fn most_named_coordinator(&self) -> Option<u32> {
        let mut votes: BTreeMap<u32, usize> = BTreeMap::new();
        for c in self.latest.iter().flatten().filter_map(|l| l.coordinator) {
            *votes.entry(c).or_default() += 1;
        }
        votes
            .into_iter()
            .max_by_key(|&(id, k)| (k, std::cmp::Reverse(id)))
            .map(|(id, _)| id)
    }

    fn coordinators_text(&self) -> String {
        self.latest
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let c = l
                    .as_ref()
                    .and_then(|l| l.coordinator)
                    .map_or("none".to_string(), |c| format!("n{c}"));
                format!("n{i}->{c}")
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The node whose values proposed after the cut a majority has delivered: for some origin
/// o with a threshold (what o had proposed by its first line after T0), a majority of nodes
/// report more values of o delivered than that.
fn recovered_origin(
    latest: &[Option<StatsLine>],
    thresholds: &BTreeMap<u32, u64>,
    majority: usize,
) -> Option<u32> {
    thresholds.iter().find_map(|(&o, &proposed)| {
        let past = latest
            .iter()
            .flatten()
            .filter(|l| l.delivered_by_origin.get(&o).copied().unwrap_or(0) > proposed)
            .count();
        (past >= majority).then_some(o)
    })
}

/// Receives every pending event (waiting up to `wait` for the first), updating `views`;
/// returns the events' nodes and times.
fn pump(
    rx: &mpsc::Receiver<Event>,
    views: &mut Views,
    wait: Duration,
    bad_lines: &mut Vec<String>,
) -> Vec<(usize, Instant)> {
    let mut got = Vec::new();
    let mut take = |ev: Event, views: &mut Views| match ev.line {
        Ok(line) => {
            if let Some(slot) = views.latest.get_mut(ev.node) {
                *slot = Some(line);
                got.push((ev.node, ev.at));
            }
        }
        Err(e) => {
            if bad_lines.len() < 10 {
                bad_lines.push(format!("node {}: {e}", ev.node));
            }
        }
    };
    if let Ok(ev) = rx.recv_timeout(wait) {
        take(ev, views);
        while let Ok(ev) = rx.try_recv() {
            take(ev, views);
        }
    }
    got
}

/// Runs `nft -f -` with `script`, in the caller's namespace or in `netns`.
fn run_nft(netns: Option<&str>, script: &str) -> Result<(), String> {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "nft", "-f", "-"]);
            c
        }
        None => {
            let mut c = Command::new("nft");
            c.args(["-f", "-"]);
            c
        }
    };
    let place = netns.unwrap_or("the host namespace");
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("cannot run nft in {place} ({e}); it comes with the nftables package")
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .map_err(|e| format!("cannot write the nft script for {place}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("nft in {place}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft in {place} refused the rules: {}\nscript:\n{script}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The cut: one nft table on the bridge, in the caller's namespace. Dropping it deletes the
/// table; a table left by a run that died is deleted when the next one is made.
struct BridgeCut {
    table: String,
    /// The LAN's bridge ports, as an nft interface-name pattern.
    ports: String,
}

impl BridgeCut {
    fn create() -> Result<BridgeCut, HarnessError> {
        let cut = BridgeCut {
            table: format!("{NFT_TABLE}_{LAN_TAG}"),
            ports: format!("ab{LAN_TAG}h*"),
        };
        cut.remove();
        cut.apply(&[])?;
        Ok(cut)
    }

    /// Replaces the cut with exactly these directed links, in one transaction.
    fn apply(&self, links: &[(Ipv4Addr, Ipv4Addr)]) -> Result<(), HarnessError> {
        run_nft(None, &bridge_script(&self.table, &self.ports, links))
            .map_err(HarnessError::Runtime)
    }

    fn remove(&self) {
        // `add` first, so that the delete never fails on a missing table.
        let t = &self.table;
        let _ = run_nft(
            None,
            &format!("add table bridge {t}\ndelete table bridge {t}\n"),
        );
    }
}

impl Drop for BridgeCut {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Both directions of every cut pair, as addresses.
fn links_of(lan: &EmulatedLan, cut: &[(u32, u32)]) -> Vec<(Ipv4Addr, Ipv4Addr)> {
    let addr = |i: u32| lan.nodes.get(i as usize).map(|p| p.addr);
    let mut links = Vec::new();
    for &(a, b) in cut {
        if let (Some(x), Some(y)) = (addr(a), addr(b)) {
            links.push((x, y));
            links.push((y, x));
        }
    }
    links
}

/// Resets every TCP segment between `node` and the others (`Some`), or lifts that
/// (`None`), in every namespace at once.
fn apply_resets(lan: &EmulatedLan, node: Option<u32>) -> Result<(), HarnessError> {
    let results: Vec<Result<(), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = lan
            .nodes
            .iter()
            .enumerate()
            .map(|(i, place)| {
                let peers: Vec<Ipv4Addr> = match node {
                    Some(c) if c as usize == i => lan
                        .nodes
                        .iter()
                        .filter(|p| p.addr != place.addr)
                        .map(|p| p.addr)
                        .collect(),
                    Some(c) => lan
                        .nodes
                        .get(c as usize)
                        .map(|p| p.addr)
                        .into_iter()
                        .collect(),
                    None => Vec::new(),
                };
                let script = reset_script(&peers);
                let ns = place.netns.clone();
                s.spawn(move || run_nft(Some(&ns), &script))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the nft thread panicked".to_string()))
            })
            .collect()
    });
    for r in results {
        r.map_err(HarnessError::Runtime)?;
    }
    Ok(())
}

/// Waits until the host ends of the LAN's veth pairs are gone (the kernel removes them
/// after their namespace, asynchronously), deleting any that stay: the next LAN of the same
/// tag reuses their names.
fn clear_host_links(nodes: usize) {
    let names: Vec<String> = (0..nodes).map(|i| format!("ab{LAN_TAG}h{i}")).collect();
    let present = |n: &String| Path::new("/sys/class/net").join(n).exists();
    let until = Instant::now() + Duration::from_secs(5);
    while names.iter().any(present) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    for n in names.iter().filter(|n| present(n)) {
        let _ = Command::new("ip")
            .args(["link", "del", n])
            .stderr(Stdio::null())
            .status();
    }
}

/// A directory for one run's files.
fn run_dir(out: &Path, r: &RunResult) -> PathBuf {
    out.join("runs")
        .join(format!("{}-{}-r{}", r.scenario.name(), r.protocol, r.run))
}

/// One run of one scenario and protocol. `Err` only for what stops the bench (Ctrl-C);
/// a run that fails is returned with its error.
fn run_one(
    scenario: Scenario,
    protocol: &'static str,
    run: u32,
    out: &Path,
    label: &str,
) -> RunResult {
    let mut r = RunResult::new(scenario, protocol, run);
    let dir = run_dir(out, &r);
    let mut report = String::new();
    let outcome = measure(scenario, protocol, &dir, &mut r, &mut report, label);
    if let Err(e) = outcome {
        let _ = writeln!(report, "\nrun failed: {e}");
        r.error = Some(e.to_string());
    }
    let _ = fs::create_dir_all(&dir);
    let _ = fs::write(dir.join("report.txt"), &report);
    r
}

fn measure(
    scenario: Scenario,
    protocol: &'static str,
    dir: &Path,
    r: &mut RunResult,
    report: &mut String,
    label: &str,
) -> Result<(), HarnessError> {
    fs::create_dir_all(dir)
        .map_err(|e| HarnessError::Runtime(format!("cannot create {}: {e}", dir.display())))?;
    let n = scenario.nodes() as usize;
    clear_host_links(NODES_MAX_HERE);
    let lan = EmulatedLan::create(LAN_TAG, n, LAN_RATE_MBIT).map_err(HarnessError::Runtime)?;
    let cut = BridgeCut::create()?;
    let addrs: Vec<Ipv4Addr> = lan.nodes.iter().map(|p| p.addr).collect();
    let data_dir = dir.join("data");
    let table = cluster_toml(protocol, &addrs, &data_dir)?;
    let config = dir.join("cluster.toml");
    let text = toml::to_string(&table)
        .map_err(|e| HarnessError::Runtime(format!("cannot render the config: {e}")))?;
    write_file(&config, &text)?;
    // Every namespace gets its (empty) table before the nodes start.
    apply_resets(&lan, None)?;
    let (tx, rx) = mpsc::sync_channel::<Event>(8192);
    let mut nodes = Nodes::spawn(&lan, &config, dir, &tx)?;
    drop(tx);
    let mut views = Views::new(n);
    let mut bad = Vec::new();
    let _ = writeln!(
        report,
        "{label}\nscenario {}: {}\nprotocol {protocol}, nodes at {}",
        scenario.name(),
        scenario.about(),
        addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("n{i}={a}"))
            .collect::<Vec<_>>()
            .join(" ")
    );

    // 1. A leader every node names, and values flowing under it.
    let start = Instant::now();
    let mut stable: Option<(Instant, u32, u64)> = None;
    let leader = loop {
        if interrupted() {
            return Err(HarnessError::Runtime("interrupted".into()));
        }
        nodes.check_alive()?;
        if start.elapsed() >= SETTLE_MAX {
            return Err(HarnessError::Runtime(format!(
                "no stable leader with values flowing within {} s (coordinators: {}; bad \
                 lines: {})",
                SETTLE_MAX.as_secs(),
                views.coordinators_text(),
                bad.join("; ")
            )));
        }
        pump(&rx, &mut views, Duration::from_millis(20), &mut bad);
        let now = Instant::now();
        let delivered = views.majority_delivered();
        match (views.unanimous_coordinator(), stable) {
            (Some(c), Some((since, sc, d0))) if sc == c => {
                if now.duration_since(since) >= WARMUP && delivered >= d0 + WARMUP_VALUES_MIN {
                    break c;
                }
            }
            (Some(c), _) => stable = Some((now, c, delivered)),
            (None, _) => stable = None,
        }
    };
    r.leader_before = Some(leader);
    let _ = writeln!(
        report,
        "leader n{leader} after {:.2} s, {} values delivered at a majority",
        start.elapsed().as_secs_f64(),
        views.majority_delivered()
    );

    // 2. The scenario's roles: for the constrained election, C goes stale first.
    let mut stale_node = None;
    if scenario == Scenario::ConstrainedElection {
        let c = scenario.plan(n as u32, leader, None).roles[1].1;
        stale_node = Some(c);
        apply_resets(&lan, Some(c))?;
        let until = Instant::now() + STALE_FOR;
        while Instant::now() < until {
            if interrupted() {
                return Err(HarnessError::Runtime("interrupted".into()));
            }
            nodes.check_alive()?;
            pump(&rx, &mut views, Duration::from_millis(20), &mut bad);
        }
    }
    // The leader at the cut: the one the nodes that can still hear it name.
    let leader_now = {
        let mut votes: BTreeMap<u32, usize> = BTreeMap::new();
        for (i, l) in views.latest.iter().enumerate() {
            if Some(i as u32) == stale_node {
                continue;
            }
            if let Some(c) = l.as_ref().and_then(|l| l.coordinator) {
                *votes.entry(c).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|&(id, k)| (k, std::cmp::Reverse(id)))
            .map_or(leader, |(id, _)| id)
    };
    if Some(leader_now) == stale_node {
        return Err(HarnessError::Runtime(format!(
            "the stale node n{leader_now} became the leader: the roles do not hold"
        )));
    }
    let plan = scenario.plan(n as u32, leader_now, stale_node);
    r.roles = plan.roles_text();
    r.cut = plan.cut_text();
    if let Some(c) = stale_node {
        let mine = views.latest[c as usize]
            .as_ref()
            .map_or(0, |l| l.delivered_values);
        let most = views
            .latest
            .iter()
            .flatten()
            .map(|l| l.delivered_values)
            .max()
            .unwrap_or(0);
        r.stale_by_values = Some(most.saturating_sub(mine));
        let _ = writeln!(
            report,
            "n{c} cut off for {:.1} s: {} values behind the most advanced node",
            STALE_FOR.as_secs_f64(),
            most.saturating_sub(mine)
        );
        if most <= mine {
            let _ = writeln!(report, "warning: n{c} is not stale, the role does not hold");
        }
    }
    let _ = writeln!(
        report,
        "roles {}\ncut (both directions) {}\ncoordinators before the cut: {}",
        r.roles,
        r.cut,
        views.coordinators_text()
    );

    // 3. The cut.
    let apply_start = Instant::now();
    cut.apply(&links_of(&lan, &plan.cut))?;
    let t0 = Instant::now();
    if stale_node.is_some() {
        // C's links come back (its peers re-dial at once: the resets closed the old
        // connections); the time this takes counts against the protocol.
        apply_resets(&lan, None)?;
    }
    r.apply_ms = t0.duration_since(apply_start).as_secs_f64() * 1000.0;
    let rel = |at: Instant| -> f64 {
        if at >= t0 {
            at.duration_since(t0).as_secs_f64()
        } else {
            -t0.duration_since(at).as_secs_f64()
        }
    };
    let base_delivered = views.majority_delivered();
    r.series.push((0.0, 0.0));

    // 4. Watch: recovery, then stalls and leader changes for HOLD.
    let mut thresholds: BTreeMap<u32, u64> = BTreeMap::new();
    let mut last_coord: Vec<Option<u32>> = views
        .latest
        .iter()
        .map(|l| l.as_ref().and_then(|l| l.coordinator))
        .collect();
    let mut events: Vec<String> = Vec::new();
    let mut recovered_at: Option<Instant> = None;
    let mut last_progress = (t0, base_delivered);
    let mut stall_max = Duration::ZERO;
    loop {
        if interrupted() {
            return Err(HarnessError::Runtime("interrupted".into()));
        }
        nodes.check_alive()?;
        let now = Instant::now();
        match recovered_at {
            Some(t) if now >= t + HOLD => break,
            None if now >= t0 + CAP => break,
            _ => {}
        }
        let got = pump(&rx, &mut views, Duration::from_millis(10), &mut bad);
        for &(node, at) in &got {
            if at < t0 {
                continue;
            }
            let Some(line) = views.latest[node].as_ref() else {
                continue;
            };
            thresholds
                .entry(node as u32)
                .or_insert(line.proposed_values);
            if line.coordinator != last_coord[node] {
                r.coordinator_changes += 1;
                if events.len() < EVENTS_MAX {
                    events.push(format!(
                        "{:+.3} s n{node}: {} -> {}",
                        rel(at),
                        last_coord[node].map_or("none".into(), |c| format!("n{c}")),
                        line.coordinator.map_or("none".into(), |c| format!("n{c}"))
                    ));
                }
                last_coord[node] = line.coordinator;
            }
            let delivered = views.majority_delivered();
            if delivered > last_progress.1 {
                if recovered_at.is_some() {
                    stall_max = stall_max.max(at.saturating_duration_since(last_progress.0));
                }
                last_progress = (at, delivered);
            }
            r.series
                .push((rel(at), delivered.saturating_sub(base_delivered) as f64));
            if recovered_at.is_none()
                && let Some(o) = recovered_origin(&views.latest, &thresholds, views.majority)
            {
                recovered_at = Some(at);
                last_progress = (at, delivered);
                r.first_value_from = Some(o);
                r.new_leader = views.most_named_coordinator().or(Some(o));
                r.recovery_ms = Some(rel(at) * 1000.0);
            }
        }
    }
    if let Some(t) = recovered_at {
        let end = Instant::now().min(t + HOLD);
        stall_max = stall_max.max(end.saturating_duration_since(last_progress.0));
        r.stall_ms_max = Some(stall_max.as_secs_f64() * 1000.0);
    }
    r.final_views = views.coordinators_text();
    let _ = writeln!(
        report,
        "cut applied in {:.1} ms; {}",
        r.apply_ms,
        match (r.recovery_ms, r.first_value_from) {
            (Some(ms), Some(o)) => format!(
                "recovered after {ms:.0} ms: a majority delivered values n{o} proposed after \
                 the cut, most nodes named n{} the leader; longest stall in the next {} s: \
                 {:.0} ms",
                r.new_leader.unwrap_or(o),
                HOLD.as_secs(),
                r.stall_ms_max.unwrap_or(0.0)
            ),
            _ => format!("NOT recovered within {} s", CAP.as_secs()),
        }
    );
    let _ = writeln!(
        report,
        "coordinators at the end: {}\nvalues proposed by each node at its first line after \
         the cut: {thresholds:?}\ncoordinator changes after the cut ({}):",
        r.final_views, r.coordinator_changes
    );
    for e in &events {
        let _ = writeln!(report, "  {e}");
    }
    if !bad.is_empty() {
        let _ = writeln!(report, "bad stats lines: {}", bad.join("; "));
    }
    // Stop the nodes before the namespaces go, then keep their logs (not their data).
    drop(nodes);
    let _ = fs::remove_dir_all(&data_dir);
    drop(cut);
    drop(lan);
    clear_host_links(n);
    Ok(())
}

/// Every scenario and protocol `--runs` times, interleaved (run 1 of each, then run 2, ...)
/// so that the drift of a shared machine spreads over all; stops early on Ctrl-C.
fn run_all(
    protocols: &[&'static str],
    args: &BenchArgs,
    out: &Path,
) -> Result<(Vec<RunResult>, bool), HarnessError> {
    let mut results = Vec::new();
    let scenarios = scenarios_from_env()?;
    let total = scenarios.len() * protocols.len() * args.runs as usize;
    let mut done = 0;
    for run in 1..=args.runs {
        for &scenario in &scenarios {
            for &protocol in protocols {
                if interrupted() {
                    return Ok((results, true));
                }
                done += 1;
                let label = format!("[{done}/{total}] {} {protocol} run {run}", scenario.name());
                if !args.json {
                    eprintln!("{label} ...");
                }
                let r = run_one(scenario, protocol, run, out, &label);
                // The very first run failing means the machine or the harness is broken
                // (no namespace, no nft, a node that does not start): stop instead of
                // failing every run the same way.
                if done == 1
                    && let Some(e) = &r.error
                {
                    return Err(HarnessError::Runtime(format!(
                        "{label} failed, stopping: {e}\n(its files: {})",
                        run_dir(out, &r).display()
                    )));
                }
                if !args.json {
                    match (&r.error, r.recovery_ms) {
                        (Some(e), _) => {
                            eprintln!("{label}: FAILED: {}", e.lines().next().unwrap_or(""))
                        }
                        (None, Some(ms)) => eprintln!(
                            "{label}: recovered in {ms:.0} ms (new leader n{}, {})",
                            r.new_leader.unwrap_or(u32::MAX),
                            r.roles
                        ),
                        (None, None) => eprintln!(
                            "{label}: never recovered within {} s ({})",
                            CAP.as_secs(),
                            r.roles
                        ),
                    }
                }
                results.push(r);
            }
        }
    }
    Ok((results, interrupted()))
}

/// The medians of one scenario and protocol over the runs that completed.
fn cell(results: &[RunResult], s: Scenario, p: &str) -> Option<f64> {
    let v: Vec<f64> = results
        .iter()
        .filter(|r| r.scenario == s && r.protocol == p && r.error.is_none())
        .map(RunResult::recovery_or_inf)
        .collect();
    median_recovery(&v)
}

fn runs_of<'a>(
    results: &'a [RunResult],
    s: Scenario,
    p: &'a str,
) -> impl Iterator<Item = &'a RunResult> {
    results
        .iter()
        .filter(move |r| r.scenario == s && r.protocol == p && r.error.is_none())
}

/// The scenarios that have runs, in [`Scenario::ALL`] order.
fn ran(results: &[RunResult]) -> Vec<Scenario> {
    Scenario::ALL
        .into_iter()
        .filter(|s| results.iter().any(|r| r.scenario == *s))
        .collect()
}

/// Worst median over the paper's three scenarios; infinity if one never recovered.
fn worst(results: &[RunResult], p: &str) -> Option<f64> {
    let cells: Vec<Option<f64>> = Scenario::ALL
        .iter()
        .filter(|s| s.in_paper())
        .map(|&s| cell(results, s, p))
        .collect();
    if cells.iter().any(Option::is_none) {
        return None;
    }
    Some(cells.into_iter().flatten().fold(0.0, f64::max))
}

fn write_csv(
    path: &Path,
    results: &[RunResult],
    timeouts: &BTreeMap<&str, ElectionTimeout>,
) -> Result<(), HarnessError> {
    let mut s = String::from(
        "scenario,protocol,run,nodes,leader_before,roles,cut_pairs,stale_by_values,\
         cut_apply_ms,recovery_ms,new_leader,first_value_from,stall_ms_max_after_recovery,coordinator_changes,\
         final_coordinators,election_timeout_ms_max,bound_ms,within_bound,error\n",
    );
    for r in results {
        let et = timeouts.get(r.protocol);
        let rec = match (&r.error, r.recovery_ms) {
            (Some(_), _) => String::new(),
            (None, Some(ms)) => format!("{ms:.1}"),
            (None, None) => "-1".to_string(),
        };
        let within = match (&r.error, et) {
            (None, Some(et)) => (r.recovery_or_inf() <= et.bound_ms()).to_string(),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.1},{},{},{},{},{},{},{},{},{},{}",
            r.scenario.name(),
            r.protocol,
            r.run,
            r.scenario.nodes(),
            r.leader_before.map_or(String::new(), |l| l.to_string()),
            csv_field(&r.roles),
            csv_field(&r.cut),
            r.stale_by_values.map_or(String::new(), |v| v.to_string()),
            r.apply_ms,
            rec,
            r.new_leader.map_or(String::new(), |l| l.to_string()),
            r.first_value_from.map_or(String::new(), |l| l.to_string()),
            r.stall_ms_max.map_or(String::new(), |v| format!("{v:.1}")),
            r.coordinator_changes,
            csv_field(&r.final_views),
            et.map_or(String::new(), |e| format!("{}", e.max_ms)),
            et.map_or(String::new(), |e| format!("{}", e.bound_ms())),
            within,
            csv_field(r.error.as_deref().unwrap_or("")),
        );
    }
    write_file(path, &s)
}

fn title(p: &str) -> &'static str {
    match p {
        "seqpaxos" => "Sequence Paxos",
        "raft" => "Raft",
        "omnipaxos" => "omnipaxos core",
        "raftrs" => "raft-rs core",
        _ => "?",
    }
}

fn plot_err(e: impl std::fmt::Display) -> HarnessError {
    HarnessError::Runtime(format!("cannot draw the plot: {e}"))
}

/// Top: median recovery time per scenario and protocol (log scale, min/max whiskers, a
/// bar at the cap for "never"), each protocol's 4-election-timeout bound dashed. Bottom:
/// values delivered at a majority around the cut, one panel per scenario, the run of
/// median recovery.
fn write_plot(
    path: &Path,
    results: &[RunResult],
    protocols: &[&'static str],
    timeouts: &BTreeMap<&str, ElectionTimeout>,
) -> Result<(), HarnessError> {
    ensure_font().map_err(HarnessError::Runtime)?;
    let scens = ran(results);
    if scens.is_empty() {
        return Ok(());
    }
    let root = BitMapBackend::new(path, (1300, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let root = root
        .titled(
            "Partial connectivity: time until a majority decides again after the cut",
            (FONT_FAMILY, 24).into_font().style(FontStyle::Bold),
        )
        .map_err(plot_err)?;
    let (top, bottom) = root.split_vertically(560);
    let cap_ms = CAP.as_secs_f64() * 1000.0;
    let y_lo = 5.0;
    let y_hi = cap_ms * 2.0;
    let groups = scens.len() as f64;
    let mut chart = ChartBuilder::on(&top)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..groups, (y_lo..y_hi).log_scale())
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(scens.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 {
                scens.get(i).map_or(String::new(), |s| s.name().to_string())
            } else {
                String::new()
            }
        })
        .y_desc("recovery time, ms (median of runs; whiskers min..max)")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FONT_FAMILY, 16))
        .axis_desc_style((FONT_FAMILY, 17))
        .draw()
        .map_err(plot_err)?;
    let width = 0.8 / protocols.len().max(1) as f64;
    for (pi, &p) in protocols.iter().enumerate() {
        let color = PALETTE[pi % PALETTE.len()];
        let mut bars = Vec::new();
        let mut whiskers = Vec::new();
        let mut nevers = Vec::new();
        for (si, &s) in scens.iter().enumerate() {
            let x0 = si as f64 + 0.1 + pi as f64 * width;
            let x1 = x0 + width * 0.9;
            let Some(m) = cell(results, s, p) else {
                continue;
            };
            let v: Vec<f64> = runs_of(results, s, p)
                .map(RunResult::recovery_or_inf)
                .collect();
            let top_v = if m.is_finite() { m.max(y_lo) } else { cap_ms };
            bars.push(Rectangle::new(
                [(x0, y_lo), (x1, top_v)],
                color.mix(0.8).filled(),
            ));
            if !m.is_finite() {
                nevers.push(((x0 + x1) / 2.0, cap_ms));
            }
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let xm = (x0 + x1) / 2.0;
            if lo.is_finite() {
                let hi = if hi.is_finite() { hi } else { cap_ms };
                whiskers.push(PathElement::new(
                    vec![(xm, lo.max(y_lo)), (xm, hi.max(y_lo))],
                    BLACK.stroke_width(2),
                ));
            }
        }
        chart
            .draw_series(bars)
            .map_err(plot_err)?
            .label(title(p))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], color.filled()));
        chart.draw_series(whiskers).map_err(plot_err)?;
        chart
            .draw_series(nevers.into_iter().map(|(x, y)| {
                Text::new(
                    "never",
                    (x - 0.06, y * 1.25),
                    (FONT_FAMILY, 15).into_font().color(&BLACK),
                )
            }))
            .map_err(plot_err)?;
        if let Some(et) = timeouts.get(p) {
            let b = et.bound_ms();
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(0.0, b), (groups, b)],
                    8,
                    6,
                    color.stroke_width(2),
                ))
                .map_err(plot_err)?
                .label(format!("{}: 4 x election timeout = {b:.0} ms", title(p)))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT_FAMILY, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(plot_err)?;

    let panels = bottom.split_evenly((1, scens.len()));
    for (s, area) in scens.iter().zip(panels.iter()) {
        let mut lines: Vec<(usize, Vec<(f64, f64)>)> = Vec::new();
        for (pi, &p) in protocols.iter().enumerate() {
            // The run whose recovery is the median's (closest to it).
            let m = cell(results, *s, p);
            let pick = runs_of(results, *s, p).min_by(|a, b| {
                let d = |r: &RunResult| match m {
                    Some(m) if m.is_finite() => (r.recovery_or_inf() - m).abs(),
                    _ => {
                        if r.recovery_ms.is_none() {
                            0.0
                        } else {
                            1.0
                        }
                    }
                };
                d(a).total_cmp(&d(b))
            });
            if let Some(run) = pick {
                lines.push((pi, run.series.clone()));
            }
        }
        let x_hi = lines
            .iter()
            .flat_map(|(_, v)| v.iter().map(|p| p.0))
            .fold(1.0, f64::max)
            .min(CAP.as_secs_f64() + HOLD.as_secs_f64());
        let y_hi = lines
            .iter()
            .flat_map(|(_, v)| v.iter().map(|p| p.1))
            .fold(10.0, f64::max)
            * 1.1;
        let mut c = ChartBuilder::on(area)
            .caption(s.name(), (FONT_FAMILY, 17))
            .margin(8)
            .x_label_area_size(36)
            .y_label_area_size(55)
            .build_cartesian_2d(-0.2..x_hi, 0.0..y_hi)
            .map_err(plot_err)?;
        c.configure_mesh()
            .x_desc("s after the cut")
            .y_desc("values at a majority")
            .y_label_formatter(&|y| format!("{y:.0}"))
            .label_style((FONT_FAMILY, 13))
            .axis_desc_style((FONT_FAMILY, 14))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(plot_err)?;
        c.draw_series(std::iter::once(PathElement::new(
            vec![(0.0, 0.0), (0.0, y_hi)],
            BLACK.stroke_width(1),
        )))
        .map_err(plot_err)?;
        for (pi, pts) in lines {
            let color = PALETTE[pi % PALETTE.len()];
            c.draw_series(LineSeries::new(pts, color.stroke_width(2)))
                .map_err(plot_err)?;
        }
    }
    root.present().map_err(plot_err)?;
    Ok(())
}

fn medians_table(
    results: &[RunResult],
    protocols: &[&'static str],
    timeouts: &BTreeMap<&str, ElectionTimeout>,
) -> String {
    let mut s = String::from("| scenario |");
    for &p in protocols {
        let _ = write!(s, " {} |", title(p));
    }
    s.push_str("\n| --- |");
    for _ in protocols {
        s.push_str(" ---: |");
    }
    s.push('\n');
    for sc in ran(results) {
        let _ = write!(s, "| {} |", sc.name());
        for &p in protocols {
            let runs: Vec<&RunResult> = runs_of(results, sc, p).collect();
            let text = match cell(results, sc, p) {
                None => "failed".to_string(),
                Some(m) => {
                    let within = timeouts.get(p).is_some_and(|et| m <= et.bound_ms());
                    let every: Vec<String> = runs
                        .iter()
                        .map(|r| r.recovery_ms.map_or("never".into(), |v| format!("{v:.0}")))
                        .collect();
                    format!(
                        "{}{} ({})",
                        show_ms(m),
                        if within { "" } else { " ✗" },
                        every.join(", ")
                    )
                }
            };
            let _ = write!(s, " {text} |");
        }
        s.push('\n');
    }
    s
}

fn write_summary(
    path: &Path,
    results: &[RunResult],
    protocols: &[&'static str],
    timeouts: &BTreeMap<&str, ElectionTimeout>,
    args: &BenchArgs,
    date: &str,
) -> Result<(), HarnessError> {
    let mut s = String::from("# abcast bench partial-connectivity\n\n");
    let _ = writeln!(
        s,
        "The partial-connectivity scenarios of OmniPaxos (EuroSys'23 §2, §7.2) and openraft \
         issue 2080 on real node processes: time from the cut until a leader that a majority \
         can reach decides values again (issue 17, must-show 2).\n"
    );
    let _ = writeln!(s, "- Command: `{}`", command_line());
    let _ = writeln!(s, "- Date: {date}");
    let _ = writeln!(s, "- Machine: {}", machine());
    let _ = writeln!(
        s,
        "- Each run: one node per network namespace on a bridge; every node runs the load \
         generator at the leader only ({LOAD_RATE_PER_S} values/s of {VALUE_BYTES} bytes, \
         {LOAD_WINDOW} in flight), stats every {STATS_MS} ms; the cut is one nft transaction \
         on the bridge, a rule per directed link that drops its packets silently (both \
         directions of every cut pair); T0 = when that transaction has returned. Recovery: the first stats line after which a \
         majority has delivered a value proposed after the cut; never within {} s = -1. \
         {} run(s) per cell, interleaved; the median, then every run.\n",
        CAP.as_secs(),
        args.runs
    );
    s.push_str("## Scenarios\n\n");
    for sc in ran(results) {
        let _ = writeln!(s, "- **{}**: {}.", sc.name(), sc.about());
    }
    s.push_str("\n## Election timeouts (the configs the runs use)\n\n");
    s.push_str("| protocol | election timeout | 4 x election timeout (must-show 2) | config |\n| --- | ---: | ---: | --- |\n");
    for &p in protocols {
        if let Some(et) = timeouts.get(p) {
            let range = if et.min_ms == et.max_ms {
                format!("{:.0} ms", et.max_ms)
            } else {
                format!("{:.0} .. {:.0} ms", et.min_ms, et.max_ms)
            };
            let _ = writeln!(
                s,
                "| {} | {range} | {:.0} ms | {} |",
                title(p),
                et.bound_ms(),
                et.source
            );
        }
    }
    s.push_str("\n## Recovery time, median (every run, ms); ✗ = above 4 election timeouts\n\n");
    s.push_str(&medians_table(results, protocols, timeouts));
    s.push_str("\n## Per run\n\n| scenario | protocol | run | roles | recovery | new leader | longest stall after | coordinator changes | coordinators at the end |\n| --- | --- | ---: | --- | ---: | --- | ---: | ---: | --- |\n");
    for r in results.iter().filter(|r| r.error.is_none()) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario.name(),
            r.protocol,
            r.run,
            r.roles,
            show_ms(r.recovery_or_inf()),
            r.new_leader.map_or("-".into(), |l| format!("n{l}")),
            r.stall_ms_max.map_or("-".into(), |v| format!("{v:.0} ms")),
            r.coordinator_changes,
            r.final_views
        );
    }
    let failures: Vec<String> = results
        .iter()
        .filter_map(|r| {
            r.error.as_ref().map(|e| {
                format!(
                    "{} {} run {}: {}",
                    r.scenario.name(),
                    r.protocol,
                    r.run,
                    e.lines().next().unwrap_or("")
                )
            })
        })
        .collect();
    push_failed_runs(&mut s, &failures);
    s.push_str(
        "\nEach run's roles, cut, coordinator changes and node logs: \
         `runs/SCENARIO-PROTOCOL-rN/` (report.txt, node-*.log).\n",
    );
    write_file(path, &s)
}

fn bench_json(
    results: &[RunResult],
    protocols: &[&'static str],
    timeouts: &BTreeMap<&str, ElectionTimeout>,
    args: &BenchArgs,
    out: &Path,
    all_ok: bool,
) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("bench".into(), json!("partial-connectivity"));
    m.insert("runs".into(), json!(args.runs));
    m.insert("cap_ms".into(), json!(CAP.as_millis() as u64));
    for &p in protocols {
        m.insert(
            format!("{p}_recovery_ms_max"),
            as_json_ms(worst(results, p)),
        );
        if let Some(et) = timeouts.get(p) {
            m.insert(format!("{p}_election_timeout_ms"), json!(et.max_ms));
            m.insert(format!("{p}_bound_ms"), json!(et.bound_ms()));
        }
        for s in ran(results) {
            m.insert(
                format!("{p}_{}_recovery_ms", s.key()),
                as_json_ms(cell(results, s, p)),
            );
        }
    }
    m.insert("out_dir".into(), json!(out.display().to_string()));
    m.insert("all_runs_ok".into(), json!(all_ok));
    Value::Object(m)
}

fn text_out(
    results: &[RunResult],
    protocols: &[&'static str],
    timeouts: &BTreeMap<&str, ElectionTimeout>,
    out: &Path,
) -> String {
    let mut s = String::from(
        "Partial connectivity: recovery time after the cut, median (every run, ms)\n\n",
    );
    s.push_str(
        &medians_table(results, protocols, timeouts)
            .lines()
            .filter(|l| !l.starts_with("| ---"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    s.push('\n');
    for &p in protocols {
        if let Some(et) = timeouts.get(p) {
            let _ = writeln!(
                s,
                "{}: election timeout {:.0} ms, 4 x = {:.0} ms; worst of the paper's three: {}",
                title(p),
                et.max_ms,
                et.bound_ms(),
                worst(results, p).map_or("failed".into(), show_ms)
            );
        }
    }
    let _ = writeln!(
        s,
        "\nResults in {}\n  (results.csv, plot.png, summary.md, runs/)",
        out.display()
    );
    s
}

/// `abcast bench partial-connectivity`.
pub fn run(args: &BenchArgs) -> Result<u8, HarnessError> {
    let protocols = parse_protocols(args.protocols.as_deref())?;
    check_privileges()?;
    let mut timeouts: BTreeMap<&str, ElectionTimeout> = BTreeMap::new();
    for &p in &protocols {
        timeouts.insert(p, protocol_timeout(p)?);
    }
    let _ = stop_flag();
    let (stamp, date) = utc_now();
    let out = create_out_dir(args, "partial-connectivity", &stamp)?;
    // Absolute: the nodes resolve their config's storage directory from the config's own
    // directory, not from here.
    let out = fs::canonicalize(&out)
        .map_err(|e| HarnessError::Runtime(format!("cannot resolve {}: {e}", out.display())))?;
    let (results, stopped) = run_all(&protocols, args, &out)?;
    note_interrupted(stopped);
    write_csv(&out.join("results.csv"), &results, &timeouts)?;
    write_plot(&out.join("plot.png"), &results, &protocols, &timeouts)?;
    write_summary(
        &out.join("summary.md"),
        &results,
        &protocols,
        &timeouts,
        args,
        &date,
    )?;
    let all_ok = !stopped && results.iter().all(|r| r.error.is_none());
    finish(
        args,
        || bench_json(&results, &protocols, &timeouts, args, &out, all_ok),
        || text_out(&results, &protocols, &timeouts, &out),
        all_ok,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connected(plan: &Plan, nodes: u32, a: u32, b: u32) -> bool {
        a != b && a < nodes && b < nodes && !plan.cut.contains(&(a.min(b), a.max(b)))
    }

    fn degree(plan: &Plan, nodes: u32, x: u32) -> usize {
        (0..nodes).filter(|&y| connected(plan, nodes, x, y)).count()
    }

    fn role(plan: &Plan, name: &str) -> u32 {
        plan.roles.iter().find(|(r, _)| r == name).unwrap().1
    }

    #[test]
    fn quorum_loss_leaves_one_node_connected_to_all_and_the_rest_only_to_it() {
        let plan = Scenario::QuorumLoss.plan(5, 4, None);
        let c = role(&plan, "C");
        assert_eq!(c, 0, "the first follower in id order");
        assert_eq!(degree(&plan, 5, c), 4);
        for x in (0..5).filter(|&x| x != c) {
            assert_eq!(degree(&plan, 5, x), 1, "n{x} reaches only C");
            assert!(connected(&plan, 5, x, c));
        }
    }

    #[test]
    fn constrained_election_isolates_the_leader_and_leaves_the_stale_node_as_the_hub() {
        let plan = Scenario::ConstrainedElection.plan(5, 1, Some(3));
        assert_eq!(role(&plan, "C"), 3);
        assert_eq!(degree(&plan, 5, 1), 0, "the leader is isolated");
        assert_eq!(degree(&plan, 5, 3), 3, "C reaches the three others");
        for x in [0, 2, 4] {
            assert_eq!(degree(&plan, 5, x), 1);
            assert!(connected(&plan, 5, x, 3));
        }
    }

    #[test]
    fn chained_cuts_only_the_leader_and_one_follower() {
        let plan = Scenario::Chained.plan(3, 2, None);
        assert_eq!(plan.cut, vec![(0, 2)]);
        assert_eq!(role(&plan, "F"), 0);
        assert_eq!(role(&plan, "B"), 1);
    }

    #[test]
    fn bridged_leader_is_openraft_2080s_topology() {
        let plan = Scenario::BridgedLeader.plan(5, 0, None);
        let (x, a, b, iso) = (
            role(&plan, "X"),
            role(&plan, "a"),
            role(&plan, "b"),
            role(&plan, "isolated"),
        );
        assert_eq!(degree(&plan, 5, iso), 0);
        assert_eq!(
            degree(&plan, 5, 0),
            1,
            "the old leader reaches only the bridge"
        );
        assert!(connected(&plan, 5, 0, x));
        assert!(
            connected(&plan, 5, a, b) && connected(&plan, 5, a, x) && connected(&plan, 5, b, x)
        );
        assert_eq!(plan.cut.len(), 10 - 4);
    }

    #[test]
    fn the_cut_is_one_transaction_of_directed_drops_on_the_bridge() {
        let a = Ipv4Addr::new(10, 77, 1, 1);
        let b = Ipv4Addr::new(10, 77, 1, 2);
        let s = bridge_script("abcast_pc_x", "abxh*", &[(a, b), (b, a)]);
        assert!(s.contains("flush chain bridge abcast_pc_x cut\n"));
        assert!(s.contains(
            "add rule bridge abcast_pc_x cut iifname \"abxh*\" ip saddr 10.77.1.1 ip daddr \
             10.77.1.2 drop\n"
        ));
        assert!(s.contains("ip saddr 10.77.1.2 ip daddr 10.77.1.1 drop"));
        assert_eq!(
            bridge_script("t", "b", &[]).lines().count(),
            3,
            "an empty cut heals all"
        );
        let r = reset_script(&[b]);
        assert!(r.contains("input ip saddr 10.77.1.2 tcp flags & rst == 0 reject with tcp reset"));
        assert!(r.contains("output ip daddr 10.77.1.2 meta l4proto tcp reject with tcp reset"));
        assert_eq!(reset_script(&[]).lines().count(), 6, "two chains, flushed");
    }

    fn line(delivered_by_origin: &[(u32, u64)]) -> StatsLine {
        let by: Vec<String> = delivered_by_origin
            .iter()
            .map(|(o, n)| format!("\"{o}\":{n}"))
            .collect();
        let json = format!(
            r#"{{"type":"stats","node":0,"incarnation":0,"t_us":1,"delivered_values":0,"delivered_bytes":0,"delivered_instance":0,"order_hash":"ab","proposed_values":0,"acked_values":0,"busy_rejections":0,"coordinator":0,"cpu_user_ms":0,"cpu_sys_ms":0,"rss_kib":0,"lat_count":0,"lat_us_p50":0,"lat_us_p99":0,"lat_us_p999":0,"delivered_by_origin":{{{}}},"acked_by_origin":{{}},"duplicate_deliveries":0}}"#,
            by.join(",")
        );
        stats::parse_line(&json).unwrap()
    }

    #[test]
    fn recovery_needs_a_majority_past_what_the_origin_had_proposed_at_the_cut() {
        let thresholds: BTreeMap<u32, u64> = [(4, 100), (0, 0)].into_iter().collect();
        // Everything n4 proposed before the cut, delivered everywhere: not a recovery.
        let latest: Vec<Option<StatsLine>> = (0..5).map(|_| Some(line(&[(4, 100)]))).collect();
        assert_eq!(recovered_origin(&latest, &thresholds, 3), None);
        // Two nodes past it: not yet a majority.
        let mut latest = latest;
        latest[0] = Some(line(&[(4, 101)]));
        latest[1] = Some(line(&[(4, 101)]));
        assert_eq!(recovered_origin(&latest, &thresholds, 3), None);
        latest[2] = Some(line(&[(4, 100), (0, 1)]));
        assert_eq!(recovered_origin(&latest, &thresholds, 3), None);
        latest[3] = Some(line(&[(4, 101)]));
        assert_eq!(recovered_origin(&latest, &thresholds, 3), Some(4));
        // A new leader's first values count once a majority has them.
        let latest: Vec<Option<StatsLine>> = (0..5)
            .map(|i| Some(line(&[(4, 100), (0, u64::from(i < 3))])))
            .collect();
        assert_eq!(recovered_origin(&latest, &thresholds, 3), Some(0));
    }

    #[test]
    fn a_median_run_that_never_recovered_makes_the_cell_never() {
        assert_eq!(median_recovery(&[]), None);
        assert_eq!(median_recovery(&[300.0, f64::INFINITY, 100.0]), Some(300.0));
        assert_eq!(
            median_recovery(&[f64::INFINITY, f64::INFINITY, 100.0]),
            Some(f64::INFINITY)
        );
        assert_eq!(as_json_ms(Some(f64::INFINITY)), json!(-1));
        assert_eq!(as_json_ms(Some(123.45)), json!(123.5));
        assert_eq!(as_json_ms(None), Value::Null);
    }

    #[test]
    fn protocols_are_checked_by_name() {
        assert_eq!(parse_protocols(None).unwrap(), vec!["seqpaxos", "raft"]);
        assert_eq!(
            parse_protocols(Some("raft, seqpaxos,raft")).unwrap(),
            vec!["raft", "seqpaxos"]
        );
        assert!(
            matches!(parse_protocols(Some("paxos")), Err(HarnessError::Usage(m)) if m.contains("paxos"))
        );
        assert!(parse_protocols(Some(",")).is_err());
    }

    #[test]
    fn election_timeouts_come_from_the_configs_the_runs_use() {
        let sp = protocol_timeout("seqpaxos").unwrap();
        assert!(sp.max_ms > 0.0 && sp.min_ms == sp.max_ms);
        assert_eq!(sp.bound_ms(), 4.0 * sp.max_ms);
        let raft = protocol_timeout("raft").unwrap();
        assert!(raft.min_ms > 0.0 && raft.min_ms <= raft.max_ms);
        assert!(raft.source.contains("pre_vote"));
    }

    #[test]
    fn json_has_a_key_per_scenario_and_protocol_and_the_worst_of_the_papers_three() {
        let mut results = Vec::new();
        for (i, s) in Scenario::ALL.iter().enumerate() {
            let mut r = RunResult::new(*s, "seqpaxos", 1);
            r.recovery_ms = Some(100.0 * (i + 1) as f64);
            results.push(r);
            let mut r = RunResult::new(*s, "raft", 1);
            r.recovery_ms = (*s != Scenario::ConstrainedElection).then_some(500.0);
            results.push(r);
        }
        let timeouts: BTreeMap<&str, ElectionTimeout> = BTreeMap::new();
        let args = BenchArgs {
            name: None,
            list: false,
            runs: 1,
            duration_s: 10.0,
            out: None,
            window_values: None,
            max_nodes: 7,
            json: true,
            link_mbit: None,
            protocols: None,
            batch_bytes: None,
            nodes: None,
            large: false,
            loads_mbit: None,
            losses_pct: None,
        };
        let v = bench_json(
            &results,
            &["seqpaxos", "raft"],
            &timeouts,
            &args,
            Path::new("/tmp/x"),
            true,
        );
        assert_eq!(
            v["seqpaxos_recovery_ms_max"],
            json!(300.0),
            "bridged-leader left out"
        );
        assert_eq!(v["raft_recovery_ms_max"], json!(-1));
        assert_eq!(v["seqpaxos_quorum_loss_recovery_ms"], json!(100.0));
        assert_eq!(v["raft_constrained_election_recovery_ms"], json!(-1));
        assert_eq!(v["seqpaxos_bridged_leader_recovery_ms"], json!(400.0));
    }
}
