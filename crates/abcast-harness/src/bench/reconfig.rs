//! `abcast bench reconfig`: reconfiguration under load (seed 001 figures 10 and 12, table
//! 5.1; issue 17). Three nodes and a spare; a client proposes continuously; half-way
//! through the load the cluster is asked to replace a follower, or the leader, by the
//! spare. Sequence Paxos with pull and with eager transfer of the final sequence (§4.4),
//! Raft's joint consensus with learners first (§2.5.1) beside it.
//!
//! The client is the seed's (§4.1): a window of proposals in flight at one node, the next
//! as soon as one is decided ([`abcast_node::client::run_load`] on the client port). It
//! talks to a follower that stays in both configurations, so every case loads the same
//! path, and it counts a proposal as **dropped** when the node took it (`Proposed`) and it
//! was never decided, even after the drain. A `Busy` answer or a refusal is not a drop
//! (the node took nothing) but the client waits and asks again, so its time is lost; the
//! count of such requests is reported. The reconfiguration goes to the leader through the
//! client API, `reconfigure_and_wait`, the code of `abcast reconfigure`.
//!
//! Figures, per run (the summary defines them the same way):
//! - the client's decided values per 50 ms bin, over the run (the timeline);
//! - **before**: values/s over the 2 s before the request (from 1 s after the start);
//! - **recovery**: from the request to the start of the first 250 ms window, starting when
//!   the change took effect or later, in which the rate is at ≥ 50% of *before* (with no
//!   disruption, the time until the change took effect);
//! - **gap**: the longest interval without a decided value from the request to the end of
//!   that window (the time before the first decision after the request counts);
//! - **degraded**: the 50 ms bins of that stretch below 50% of *before*, in ms;
//! - **after**: values/s from the later of that window's end and the change being in
//!   effect, to the end of the load.
//!
//! Each run also checks the outcome: the change in effect at the new members, every value
//! the client saw decided delivered exactly once at each member of the new configuration,
//! and their delivery logs one and the same sequence.

use super::BenchArgs;
use super::machine;
use super::output::{
    command_line, create_out_dir, csv_field, finish, push_failed_runs, write_file,
};
use crate::error::HarnessError;
use crate::format::{group, utc_now};
use crate::plot::{FONT_FAMILY, PALETTE, ensure_font};
use abcast_core::{NodeId, ValueId};
use abcast_node::client::{
    Client, LoadEvent, LoadSpec, configuration_of, reconfigure_and_wait, run_load, same_members,
};
use abcast_node::deliverylog;
use abcast_node::stats::median;
use plotters::prelude::*;
use plotters::style::FontStyle;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// 16-byte values, as the other leader-based benches.
pub const VALUE_BYTES: usize = 16;
/// Proposals the client keeps in flight unless `--window` says otherwise: the lowest
/// concurrency of figures 10 and 12 (the seed's 10k).
pub const WINDOW_DEFAULT: u64 = 10_000;
/// The client port's bound on one connection's undecided values.
const WINDOW_MAX: u64 = 65_536;
/// The timeline's bin.
pub const BIN_MS: u64 = 50;
/// The zoomed timeline's bin, and the zoom's range in seconds from the request.
const FINE_BIN_MS: u64 = 10;
const ZOOM_S: (f64, f64) = (-0.3, 1.2);
/// Throughput counts as back once a window of this length holds this share of *before*.
pub const RECOVERY_WINDOW_MS: u64 = 250;
pub const RECOVERY_SHARE: f64 = 0.5;
/// *before* is measured over this long before the request, from 1 s after the start.
const BEFORE_S: f64 = 2.0;
const WARMUP_S: f64 = 1.0;
/// The shortest `--duration`: the request half-way comes after the warm-up and at least
/// one second of *before* (a shorter before-window than `BEFORE_S` when the run is short).
pub const DURATION_MIN_S: f64 = 4.0;
/// After the load stops, the client waits this long for what is in flight.
const DRAIN: Duration = Duration::from_secs(15);
/// The client fails a run when nothing is decided for this long with values in flight.
const STALL_MAX: Duration = Duration::from_secs(30);
const RECONFIGURE_TIMEOUT: Duration = Duration::from_secs(30);
const LEADER_TIMEOUT: Duration = Duration::from_secs(20);
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(20);
const STOP_GRACE: Duration = Duration::from_secs(15);
/// Nodes 0..3 form the first configuration; node 3 is the spare.
const SPARE: u32 = 3;
const NODES: u32 = 4;

/// A protocol with its way of changing configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Variant {
    SeqPaxosPull,
    SeqPaxosEager,
    Raft,
}

impl Variant {
    pub const ALL: [Variant; 3] = [Variant::SeqPaxosPull, Variant::SeqPaxosEager, Variant::Raft];

    pub fn name(self) -> &'static str {
        match self {
            Variant::SeqPaxosPull => "seqpaxos-pull",
            Variant::SeqPaxosEager => "seqpaxos-eager",
            Variant::Raft => "raft",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Variant::SeqPaxosPull => "seqpaxos_pull",
            Variant::SeqPaxosEager => "seqpaxos_eager",
            Variant::Raft => "raft",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Variant::SeqPaxosPull => "Sequence Paxos, pull",
            Variant::SeqPaxosEager => "Sequence Paxos, eager",
            Variant::Raft => "Raft, joint consensus",
        }
    }

    fn protocol(self) -> &'static str {
        match self {
            Variant::SeqPaxosPull | Variant::SeqPaxosEager => "seqpaxos",
            Variant::Raft => "raft",
        }
    }
}

/// Which member the spare replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    ReplaceFollower,
    ReplaceLeader,
}

impl Change {
    pub const ALL: [Change; 2] = [Change::ReplaceFollower, Change::ReplaceLeader];

    pub fn name(self) -> &'static str {
        match self {
            Change::ReplaceFollower => "replace-follower",
            Change::ReplaceLeader => "replace-leader",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Change::ReplaceFollower => "replace_follower",
            Change::ReplaceLeader => "replace_leader",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Case {
    change: Change,
    variant: Variant,
}

/// What one run measured (times in ms, rates in values/s).
#[derive(Clone, Debug, Default)]
struct RunOut {
    run: u32,
    ok: bool,
    problems: Vec<String>,
    proposed: u64,
    decided: u64,
    dropped: u64,
    refused_requests: u64,
    before: f64,
    after: f64,
    mean: f64,
    gap_ms: f64,
    /// `None`: throughput never came back to the share of *before* before the load ended.
    recovery_ms: Option<f64>,
    degraded_ms: f64,
    asked_ms: f64,
    in_effect_ms: f64,
    /// The request, and the gap's ends, in seconds since the load started.
    request_s: f64,
    gap_from_s: f64,
    gap_to_s: f64,
    /// Decided values per bin since the load started, and per fine bin.
    bins: Vec<u64>,
    fine: Vec<u64>,
    old_leader: Option<u32>,
    new_leader: Option<u32>,
    replaced: Option<u32>,
}

/// The variants `--protocols` names (default all three): `seqpaxos` is both transfers.
fn variants(args: &BenchArgs) -> Result<Vec<Variant>, HarnessError> {
    let Some(list) = &args.protocols else {
        return Ok(Variant::ALL.to_vec());
    };
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let picked: &[Variant] = match name {
            "seqpaxos" => &[Variant::SeqPaxosPull, Variant::SeqPaxosEager],
            "seqpaxos-pull" => &[Variant::SeqPaxosPull],
            "seqpaxos-eager" => &[Variant::SeqPaxosEager],
            "raft" => &[Variant::Raft],
            other => {
                return Err(HarnessError::Usage(format!(
                    "--protocols: {other:?} is not one of seqpaxos, seqpaxos-pull, \
                     seqpaxos-eager, raft (bench reconfig)"
                )));
            }
        };
        for v in picked {
            if !out.contains(v) {
                out.push(*v);
            }
        }
    }
    if out.is_empty() {
        return Err(HarnessError::Usage("--protocols names no protocol".into()));
    }
    out.sort_unstable();
    Ok(out)
}

fn window(args: &BenchArgs) -> Result<u64, HarnessError> {
    match args.window_values {
        None | Some(0) => Ok(WINDOW_DEFAULT),
        Some(w) if w <= WINDOW_MAX => Ok(w),
        Some(w) => Err(HarnessError::Usage(format!(
            "--window {w}: bench reconfig's client keeps at most {WINDOW_MAX} values in \
             flight (the client port's bound per connection)"
        ))),
    }
}

// ----- one run: the processes ----------------------------------------------------------

/// The run's directory, removed when the run is over unless `ABCAST_KEEP` is set.
struct RunDir {
    path: PathBuf,
    keep: bool,
}

impl RunDir {
    fn new(label: &str) -> Result<RunDir, HarnessError> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "abcast-reconfig-{}-{n}-{label}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .map_err(|e| HarnessError::Runtime(format!("cannot create {}: {e}", path.display())))?;
        Ok(RunDir {
            path,
            keep: std::env::var_os("ABCAST_KEEP").is_some(),
        })
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The node processes; dropping them kills what is still running.
struct Nodes(Vec<Child>);

impl Nodes {
    /// SIGTERM to every node, then a bounded wait for each (a clean stop flushes the
    /// delivery log); a node still running after the grace is killed and named.
    fn stop(&mut self) -> Vec<String> {
        for c in &mut self.0 {
            if let Ok(pid) = libc::pid_t::try_from(c.id()) {
                // SAFETY: kill(2) with the pid of our own child and a standard signal.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
        let deadline = Instant::now() + STOP_GRACE;
        let mut problems = Vec::new();
        for (id, c) in self.0.iter_mut().enumerate() {
            loop {
                match c.try_wait() {
                    Ok(Some(st)) if st.success() => break,
                    Ok(Some(st)) => {
                        problems.push(format!("node {id} exited with {st}"));
                        break;
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    Ok(None) | Err(_) => {
                        let _ = c.kill();
                        let _ = c.wait();
                        problems.push(format!("node {id} did not stop within the grace"));
                        break;
                    }
                }
            }
        }
        problems
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Free loopback ports: bound all at once (so they differ), then released for the nodes.
fn free_addrs(n: usize) -> Result<Vec<String>, HarnessError> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(|e| HarnessError::Runtime(format!("cannot find a free port: {e}")))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.to_string()))
        .collect::<Result<_, _>>()
        .map_err(|e| HarnessError::Runtime(format!("cannot read a port: {e}")))
}

/// The cluster file: four members with client ports, the last a spare, logs in memory.
fn config_text(variant: Variant, peer: &[String], client: &[String], window: u64) -> String {
    let mut t = format!("cluster_id = 17\nprotocol = \"{}\"\n", variant.protocol());
    for id in 0..NODES as usize {
        let _ = writeln!(
            t,
            "[[members]]\nid = {id}\naddr = \"{}\"\nclient_addr = \"{}\"",
            peer[id], client[id]
        );
        if id as u32 == SPARE {
            t += "spare = true\n";
        }
    }
    // The proposer window of the loaded node holds the client's window with room.
    let window_values = (2 * window).max(20_000);
    let window_bytes = (2 * window * (VALUE_BYTES as u64 + 48)).max(16 << 20);
    let _ = writeln!(
        t,
        "[ring]\nwindow_values = {window_values}\nwindow_bytes = {window_bytes}"
    );
    t += "[storage]\nkind = \"memory\"\ndir = \"data\"\n";
    match variant {
        Variant::SeqPaxosPull => t += "[seqpaxos]\ntransfer = \"pull\"\n",
        Variant::SeqPaxosEager => t += "[seqpaxos]\ntransfer = \"eager\"\n",
        Variant::Raft => {}
    }
    t
}

fn spawn_nodes(config: &Path, dir: &Path) -> Result<Nodes, HarnessError> {
    let program = std::env::current_exe()
        .map_err(|e| HarnessError::Runtime(format!("cannot find this program: {e}")))?;
    let mut nodes = Nodes(Vec::new());
    for id in 0..NODES {
        let log = std::fs::File::create(dir.join(format!("node-{id}.log")))
            .map_err(|e| HarnessError::Runtime(format!("cannot create a node log: {e}")))?;
        let child = Command::new(&program)
            .args(["node", "--config"])
            .arg(config)
            .args(["--id", &id.to_string(), "--stats-ms", "0", "--delivery-log"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| {
                HarnessError::Runtime(format!("cannot start {} node: {e}", program.display()))
            })?;
        nodes.0.push(child);
    }
    Ok(nodes)
}

/// The last lines of every node's log, for an error.
fn log_tails(dir: &Path) -> String {
    let mut s = String::new();
    for id in 0..NODES {
        let text = std::fs::read_to_string(dir.join(format!("node-{id}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(4);
        let _ = write!(s, "\n  node {id}: {}", lines[from..].join(" | "));
    }
    s
}

/// The leader, once node 0 names it and it says it leads.
fn wait_for_leader(clients: &[String]) -> Option<u32> {
    let deadline = Instant::now() + LEADER_TIMEOUT;
    while Instant::now() < deadline {
        for a in &clients[..SPARE as usize] {
            if let Ok(mut c) = Client::connect(a)
                && let Ok(r) = c.status(Duration::from_secs(2))
                && let Some(l) = r.leader
                && let Some(la) = clients.get(l.0 as usize)
                && let Ok(mut lc) = Client::connect(la)
                && lc.status(Duration::from_secs(2)).is_ok_and(|s| s.leading)
            {
                return Some(l.0);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Whether every node of `members` shows them in effect, with no change pending and the
/// same delivered index a few polls in a row.
fn converged(clients: &[String], members: &[u32]) -> Result<(), String> {
    let Ok(want) = configuration_of(members, &[]) else {
        return Err("no configuration".into());
    };
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    let (mut stable, mut last) = (0, None);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        seen.clear();
        let mut uptos = HashSet::new();
        let mut all = true;
        for &m in members {
            match Client::connect(&clients[m as usize])
                .and_then(|mut c| c.status(Duration::from_secs(2)))
            {
                Ok(r) => {
                    let ok = r.configuration_pending.is_none()
                        && r.configuration
                            .as_ref()
                            .is_some_and(|c| same_members(c, &want));
                    all &= ok;
                    uptos.insert(r.delivered_upto);
                    seen.push(format!(
                        "node {m}: in effect {ok}, delivered {}",
                        r.delivered_upto
                    ));
                }
                Err(e) => {
                    all = false;
                    seen.push(format!("node {m}: {e}"));
                }
            }
        }
        if all && uptos.len() == 1 {
            let u = uptos.iter().next().copied();
            if last == u {
                stable += 1;
                if stable >= 3 {
                    return Ok(());
                }
            } else {
                (stable, last) = (0, u);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "the new members did not converge within {} s: {}",
        CONVERGE_TIMEOUT.as_secs(),
        seen.join("; ")
    ))
}

/// Checks the new configuration's delivery logs: one sequence, nothing twice, every value
/// the client saw decided in it.
fn check_deliveries(dir: &Path, members: &[u32], acked: &[ValueId]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut sequences: Vec<(u32, Vec<(u64, ValueId)>)> = Vec::new();
    for &id in members {
        match deliverylog::read_node(id, &dir.join(format!("data/node-{id}"))) {
            Ok(logs) if logs.len() == 1 => sequences.push((
                id,
                logs[0]
                    .entries
                    .iter()
                    .flat_map(|e| {
                        (e.first_seq..e.first_seq.saturating_add(e.count)).map(move |seq| {
                            (
                                e.instance,
                                ValueId {
                                    node: NodeId(e.origin),
                                    seq,
                                },
                            )
                        })
                    })
                    .collect(),
            )),
            Ok(logs) => problems.push(format!("node {id}: {} delivery logs, not one", logs.len())),
            Err(e) => problems.push(format!("node {id}: {e}")),
        }
    }
    let Some((first_id, first)) = sequences.first() else {
        return problems;
    };
    for (id, seq) in &sequences[1..] {
        if seq != first {
            let at = seq.iter().zip(first).position(|(a, b)| a != b);
            problems.push(format!(
                "node {id} delivered another sequence than node {first_id} ({} and {} values; \
                 first difference at {})",
                seq.len(),
                first.len(),
                at.map_or("the end".to_string(), |i| format!("value {i}"))
            ));
        }
    }
    let mut seen = HashSet::with_capacity(first.len());
    let twice = first.iter().filter(|(_, id)| !seen.insert(*id)).count();
    if twice > 0 {
        problems.push(format!("node {first_id} delivered {twice} values twice"));
    }
    let missing = acked.iter().filter(|id| !seen.contains(id)).count();
    if missing > 0 {
        problems.push(format!(
            "{missing} values the client saw decided were not delivered by node {first_id}"
        ));
    }
    problems
}

// ----- one run: the figures ------------------------------------------------------------

/// The figures of one run from the client's decisions (`(seconds since the load started,
/// values)`, in time order), the request and the stop (seconds since the load started).
#[derive(Clone, Debug, Default, PartialEq)]
struct Figures {
    before: f64,
    degraded_ms: f64,
    after: f64,
    gap_ms: f64,
    gap_from_s: f64,
    gap_to_s: f64,
    recovery_ms: Option<f64>,
    bins: Vec<u64>,
    fine: Vec<u64>,
}

fn figures(decisions: &[(f64, u64)], request_s: f64, stop_s: f64, in_effect_s: f64) -> Figures {
    let count = |from: f64, to: f64| -> u64 {
        decisions
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, n)| n)
            .sum()
    };
    let rate = |from: f64, to: f64| {
        if to > from {
            count(from, to) as f64 / (to - from)
        } else {
            0.0
        }
    };
    let before_from = (request_s - BEFORE_S).max(WARMUP_S.min(request_s));
    let before = rate(before_from, request_s);
    // Recovery: the first window of RECOVERY_WINDOW_MS, starting when the change took
    // effect or at a decision after that, holding RECOVERY_SHARE of `before`'s rate. (A
    // window from the request itself could close before the disruption: Raft's joint
    // stage comes after its learners caught up.)
    let w = RECOVERY_WINDOW_MS as f64 / 1e3;
    let need = RECOVERY_SHARE * before * w;
    let from = in_effect_s.max(request_s);
    let starts = std::iter::once(from).chain(
        decisions
            .iter()
            .map(|(t, _)| *t)
            .filter(|t| *t >= from && *t + w <= stop_s),
    );
    let mut recovered_at = None;
    for s in starts {
        if s + w <= stop_s && count(s, s + w) as f64 >= need {
            recovered_at = Some(s);
            break;
        }
    }
    let window_end = recovered_at.map_or(stop_s, |s| s + w);
    // The gap: the longest stretch without a decision in [request, window_end].
    let mut prev = request_s;
    let (mut gap, mut gap_from, mut gap_to) = (0.0f64, request_s, request_s);
    for &(t, _) in decisions.iter().filter(|(t, _)| *t >= request_s) {
        let end = t.min(window_end);
        if end - prev > gap {
            (gap, gap_from, gap_to) = (end - prev, prev, end);
        }
        prev = t;
        if t >= window_end {
            break;
        }
    }
    if prev < window_end && window_end - prev > gap {
        (gap, gap_from, gap_to) = (window_end - prev, prev, window_end);
    }
    let after_from = window_end.max(in_effect_s);
    let bin_s = BIN_MS as f64 / 1e3;
    let n_bins = ((stop_s / bin_s).ceil() as usize).max(1);
    let binned = |bin_s: f64| {
        let n_bins = ((stop_s / bin_s).ceil() as usize).max(1);
        let mut bins = vec![0u64; n_bins];
        for &(t, n) in decisions {
            let i = ((t / bin_s) as usize).min(n_bins - 1);
            bins[i] += n;
        }
        bins
    };
    let bins = binned(bin_s);
    let fine = binned(FINE_BIN_MS as f64 / 1e3);
    // Degraded: the whole bins in [request, window_end] below the share of `before`.
    let low = RECOVERY_SHARE * before * bin_s;
    let degraded_bins = (0..n_bins)
        .filter(|&i| {
            let (b0, b1) = (i as f64 * bin_s, (i + 1) as f64 * bin_s);
            b0 >= request_s && b1 <= window_end && (bins[i] as f64) < low
        })
        .count();
    Figures {
        before,
        degraded_ms: degraded_bins as f64 * BIN_MS as f64,
        after: rate(after_from, stop_s),
        gap_ms: gap * 1e3,
        gap_from_s: gap_from,
        gap_to_s: gap_to,
        recovery_ms: recovered_at.map(|s| (s - request_s) * 1e3),
        bins,
        fine,
    }
}

/// One run of one case (see the module comment).
fn run_case(case: Case, args: &BenchArgs, window: u64, r: u32) -> Result<RunOut, HarnessError> {
    let dir = RunDir::new(&format!("{}-{}", case.variant.name(), case.change.name()))?;
    let addrs = free_addrs(2 * NODES as usize)?;
    let (peer, clients) = addrs.split_at(NODES as usize);
    let clients = clients.to_vec();
    let config = dir.path.join("cluster.toml");
    write_file(&config, &config_text(case.variant, peer, &clients, window))?;
    let mut nodes = spawn_nodes(&config, &dir.path)?;
    let mut out = RunOut {
        run: r,
        ..RunOut::default()
    };
    let Some(leader) = wait_for_leader(&clients) else {
        out.problems.push(format!(
            "no leader within {} s{}",
            LEADER_TIMEOUT.as_secs(),
            log_tails(&dir.path)
        ));
        return Ok(out);
    };
    let followers: Vec<u32> = (0..SPARE).filter(|&n| n != leader).collect();
    let (follower, stays) = (followers[0], followers[1]);
    let (replaced, new_members) = match case.change {
        Change::ReplaceFollower => (follower, [leader, stays, SPARE]),
        Change::ReplaceLeader => (leader, [follower, stays, SPARE]),
    };
    out.old_leader = Some(leader);
    out.replaced = Some(replaced);

    // The load, at a follower that stays.
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let decisions: Arc<Mutex<Vec<(f64, u64)>>> = Arc::default();
    let acked: Arc<Mutex<Vec<ValueId>>> = Arc::default();
    let load = {
        let (addr, stop) = (clients[stays as usize].clone(), Arc::clone(&stop));
        let (decisions, acked) = (Arc::clone(&decisions), Arc::clone(&acked));
        let spec = LoadSpec {
            window_values: window as usize,
            value_bytes: VALUE_BYTES,
            drain: DRAIN,
            stall_max: STALL_MAX,
        };
        std::thread::spawn(move || {
            run_load(&addr, &spec, &stop, |at, ev| {
                if let LoadEvent::Decided(ids) = ev {
                    let t = at.saturating_duration_since(t0).as_secs_f64();
                    if let Ok(mut d) = decisions.lock() {
                        d.push((t, ids.len() as u64));
                    }
                    if let Ok(mut a) = acked.lock() {
                        a.extend_from_slice(ids);
                    }
                }
            })
        })
    };

    // Half-way: the change, asked of the leader through the client API.
    let request_at = t0 + Duration::from_secs_f64(args.duration_s / 2.0);
    std::thread::sleep(request_at.saturating_duration_since(Instant::now()));
    let t_req = Instant::now();
    out.request_s = t_req.duration_since(t0).as_secs_f64();
    let mut in_effect_s = out.request_s;
    match configuration_of(&new_members, &[]) {
        Ok(want) => {
            match reconfigure_and_wait(&clients[leader as usize], &want, RECONFIGURE_TIMEOUT) {
                Ok(o) => {
                    out.asked_ms = o.asked_after.as_secs_f64() * 1e3;
                    out.in_effect_ms = o.in_effect_after.as_secs_f64() * 1e3;
                    in_effect_s = out.request_s + o.in_effect_after.as_secs_f64();
                }
                Err(e) => out
                    .problems
                    .push(format!("the reconfiguration failed: {e}")),
            }
        }
        Err(e) => out.problems.push(e),
    }
    let stop_at = t0 + Duration::from_secs_f64(args.duration_s);
    std::thread::sleep(stop_at.saturating_duration_since(Instant::now()));
    let stop_s = t0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let report = match load.join() {
        Ok(Ok(report)) => Some(report),
        Ok(Err(e)) => {
            out.problems.push(format!("the load client failed: {e}"));
            None
        }
        Err(_) => {
            out.problems.push("the load client panicked".into());
            None
        }
    };
    if let Some(rep) = &report {
        out.proposed = rep.proposed;
        out.decided = rep.decided;
        out.dropped = rep.undecided.len() as u64;
        out.refused_requests = rep.refused_requests;
    }
    if let Err(e) = converged(&clients, &new_members) {
        out.problems.push(e);
    }
    out.new_leader = Client::connect(&clients[stays as usize])
        .and_then(|mut c| c.status(Duration::from_secs(2)))
        .ok()
        .and_then(|s| s.leader.map(|n| n.0));
    out.problems.extend(nodes.stop());
    let acked = acked.lock().map(|a| a.clone()).unwrap_or_default();
    out.problems
        .extend(check_deliveries(&dir.path, &new_members, &acked));
    let mut decisions = decisions.lock().map(|d| d.clone()).unwrap_or_default();
    decisions.sort_by(|a, b| a.0.total_cmp(&b.0));
    let f = figures(&decisions, out.request_s, stop_s, in_effect_s);
    out.before = f.before;
    out.after = f.after;
    out.gap_ms = f.gap_ms;
    out.gap_from_s = f.gap_from_s;
    out.gap_to_s = f.gap_to_s;
    out.recovery_ms = f.recovery_ms;
    out.degraded_ms = f.degraded_ms;
    out.bins = f.bins;
    out.fine = f.fine;
    out.mean = if stop_s > 0.0 {
        decisions
            .iter()
            .filter(|(t, _)| *t < stop_s)
            .map(|(_, n)| n)
            .sum::<u64>() as f64
            / stop_s
    } else {
        0.0
    };
    if !out.problems.is_empty() && !dir.keep {
        out.problems.push(format!(
            "(set ABCAST_KEEP=1 to keep the run's directory){}",
            log_tails(&dir.path)
        ));
    }
    out.ok = out.problems.is_empty();
    Ok(out)
}

// ----- the bench -----------------------------------------------------------------------

fn med(runs: &[RunOut], f: impl Fn(&RunOut) -> Option<f64>) -> Option<f64> {
    median(
        &runs
            .iter()
            .filter(|r| r.ok)
            .filter_map(f)
            .collect::<Vec<f64>>(),
    )
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".to_string(), |v| format!("{v:.digits$}"))
}

fn spread(runs: &[RunOut], f: impl Fn(&RunOut) -> Option<f64> + Copy, digits: usize) -> String {
    let v: Vec<f64> = runs.iter().filter(|r| r.ok).filter_map(f).collect();
    match median(&v) {
        None => "n/a".into(),
        Some(m) => {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if v.len() > 1 {
                format!("{m:.digits$} ({lo:.digits$}..{hi:.digits$})")
            } else {
                format!("{m:.digits$}")
            }
        }
    }
}

fn csv_text(results: &BTreeMap<Case, Vec<RunOut>>) -> String {
    let mut csv = String::from(
        "variant,change,run,ok,proposed,decided,dropped,refused_requests,values_per_s_before,\
         values_per_s_after,values_per_s_mean,gap_ms,degraded_ms,recovery_ms,asked_ms,in_effect_ms,\
         request_s,old_leader,replaced,new_leader,problems\n",
    );
    let opt = |v: Option<u32>| v.map_or(String::new(), |v| v.to_string());
    for (c, runs) in results {
        for r in runs {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},{},{:.0},{:.0},{:.0},{:.1},{:.0},{},{:.1},{:.1},{:.3},{},{},{},{}",
                c.variant.name(),
                c.change.name(),
                r.run,
                r.ok,
                r.proposed,
                r.decided,
                r.dropped,
                r.refused_requests,
                r.before,
                r.after,
                r.mean,
                r.gap_ms,
                r.degraded_ms,
                r.recovery_ms.map_or(String::new(), |v| format!("{v:.1}")),
                r.asked_ms,
                r.in_effect_ms,
                r.request_s,
                opt(r.old_leader),
                opt(r.replaced),
                opt(r.new_leader),
                csv_field(&r.problems.join("; "))
            );
        }
    }
    csv
}

fn timeline_csv(results: &BTreeMap<Case, Vec<RunOut>>) -> String {
    let mut csv = String::from("variant,change,run,t_s,t_from_request_s,values_per_s\n");
    let bin_s = BIN_MS as f64 / 1e3;
    for (c, runs) in results {
        for r in runs {
            for (i, n) in r.bins.iter().enumerate() {
                let t = i as f64 * bin_s;
                let _ = writeln!(
                    csv,
                    "{},{},{},{:.3},{:.3},{:.0}",
                    c.variant.name(),
                    c.change.name(),
                    r.run,
                    t,
                    t - r.request_s,
                    *n as f64 / bin_s
                );
            }
        }
    }
    csv
}

/// The run whose gap is the median of a case's good runs (the one the plot shows).
fn median_run(runs: &[RunOut]) -> Option<&RunOut> {
    let mut good: Vec<&RunOut> = runs.iter().filter(|r| r.ok).collect();
    good.sort_by(|a, b| a.gap_ms.total_cmp(&b.gap_ms));
    good.get(good.len().saturating_sub(1) / 2).copied()
}

/// One variant's series in a chart: its timeline as plot points, its gap and the moment
/// the change took effect (seconds from the request), and the gap's length.
struct Series {
    variant: Variant,
    points: Vec<(f64, f64)>,
    gap: (f64, f64),
    gap_ms: f64,
    in_effect: f64,
}

/// A run's bins as plot points: x in seconds from the request, y in thousand values/s,
/// within `[x_lo, x_hi]` (the last bin, cut short by the stop, left out).
fn bin_points(bins: &[u64], bin_s: f64, request_s: f64, x_lo: f64, x_hi: f64) -> Vec<(f64, f64)> {
    bins.iter()
        .enumerate()
        .take(bins.len().saturating_sub(1))
        .map(|(i, n)| {
            (
                (i as f64 + 0.5) * bin_s - request_s,
                *n as f64 / bin_s / 1e3,
            )
        })
        .filter(|(x, _)| *x >= x_lo && *x <= x_hi)
        .collect()
}

fn draw_chart(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    y_desc: &str,
    (x_lo, x_hi): (f64, f64),
    series: &[Series],
    label_gaps: bool,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let y_hi = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.2;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT_FAMILY, 17))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x_lo..x_hi, 0.0..y_hi)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds from the reconfigure request")
        .y_desc(y_desc)
        .label_style((FONT_FAMILY, 14))
        .axis_desc_style((FONT_FAMILY, 15))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| err(&e))?;
    for (k, s) in series.iter().enumerate() {
        let color = PALETTE[Variant::ALL
            .iter()
            .position(|x| *x == s.variant)
            .unwrap_or(0)
            % PALETTE.len()];
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(s.gap.0, 0.0), (s.gap.1, y_hi)],
                color.mix(0.2).filled(),
            )))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(LineSeries::new(s.points.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(format!("{} (gap {:.0} ms)", s.variant.title(), s.gap_ms))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        chart
            .draw_series(DashedLineSeries::new(
                vec![(s.in_effect, 0.0), (s.in_effect, y_hi)],
                6,
                4,
                color.stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
        if label_gaps {
            // A bracket over the gap, with its length, one row per variant.
            let y = y_hi * (0.97 - 0.05 * k as f64);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(s.gap.0, y), (s.gap.1, y)],
                    color.stroke_width(4),
                )))
                .map_err(|e| err(&e))?;
            // The label right of the bracket, or left of it near the right edge.
            let span = x_hi - x_lo;
            let x = if s.gap.1 + span * 0.12 < x_hi {
                s.gap.1 + span * 0.01
            } else {
                s.gap.0 - span * 0.11
            };
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("gap {:.0} ms", s.gap_ms),
                    (x, y),
                    (FONT_FAMILY, 13).into_font().color(&color),
                )))
                .map_err(|e| err(&e))?;
        }
    }
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, 0.0), (0.0, y_hi)],
            BLACK.stroke_width(1),
        )))
        .map_err(|e| err(&e))?
        .label("request (dashed: in effect)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], BLACK.stroke_width(1)));
    if !label_gaps {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .label_font((FONT_FAMILY, 13))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    Ok(())
}

/// Throughput over time, one row per change, one line per variant (its median run by
/// gap): the whole run in 50 ms bins on the left, and on the right a zoom from
/// `ZOOM_S.0` to `ZOOM_S.1` around the request in 10 ms bins, where the gap (shaded, and
/// bracketed with its length) is wide enough to see. Dashed: the change in effect.
fn plot(path: &Path, results: &BTreeMap<Case, Vec<RunOut>>) -> Result<(), String> {
    ensure_font()?;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let root = BitMapBackend::new(path, (1400, 950)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let root = root
        .titled(
            "Throughput around a reconfiguration, 3 nodes + a spare, 16 B values (cf. seed 001 \
             fig 10, 12)",
            (FONT_FAMILY, 22).into_font().style(FontStyle::Bold),
        )
        .map_err(|e| err(&e))?;
    let rows = root.split_evenly((Change::ALL.len(), 1));
    for (change, row) in Change::ALL.iter().zip(rows.iter()) {
        let runs: Vec<(Variant, &RunOut)> = results
            .iter()
            .filter(|(c, _)| c.change == *change)
            .filter_map(|(c, runs)| median_run(runs).map(|r| (c.variant, r)))
            .collect();
        let series = |bins: fn(&RunOut) -> &[u64], bin_ms: u64, lo: f64, hi: f64| -> Vec<Series> {
            runs.iter()
                .map(|&(v, r)| Series {
                    variant: v,
                    points: bin_points(bins(r), bin_ms as f64 / 1e3, r.request_s, lo, hi),
                    gap: (r.gap_from_s - r.request_s, r.gap_to_s - r.request_s),
                    gap_ms: r.gap_ms,
                    in_effect: r.in_effect_ms / 1e3,
                })
                .collect()
        };
        let whole = series(|r| &r.bins, BIN_MS, f64::NEG_INFINITY, f64::INFINITY);
        let x_lo = whole
            .iter()
            .flat_map(|s| s.points.first().map(|p| p.0))
            .fold(f64::INFINITY, f64::min);
        let x_hi = whole
            .iter()
            .flat_map(|s| s.points.last().map(|p| p.0))
            .fold(f64::NEG_INFINITY, f64::max);
        let range = if x_lo.is_finite() && x_hi > x_lo {
            (x_lo, x_hi)
        } else {
            (-1.0, 1.0)
        };
        let (w, _) = row.dim_in_pixel();
        let (left, right) = row.split_horizontally(w * 11 / 20);
        draw_chart(
            &left,
            &format!("{}: the whole run", change.name()),
            "thousand values/s (50 ms bins)",
            range,
            &whole,
            false,
        )?;
        let zoom = series(|r| &r.fine, FINE_BIN_MS, ZOOM_S.0, ZOOM_S.1);
        draw_chart(
            &right,
            &format!("{}: zoom on the request", change.name()),
            "thousand values/s (10 ms bins)",
            ZOOM_S,
            &zoom,
            true,
        )?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

fn summary(
    args: &BenchArgs,
    window: u64,
    date: &str,
    results: &BTreeMap<Case, Vec<RunOut>>,
    plot_note: &str,
) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Reconfiguration under load (seed 001 figures 10 and 12, table 5.1)\n"
    );
    let _ = writeln!(
        s,
        "Command: `{}`  \nDate: {date}  \nMachine: {}\n",
        command_line(),
        machine()
    );
    let _ = writeln!(
        s,
        "3 nodes and a spare (node 3, `spare = true`), logs in memory, {VALUE_BYTES} B values. \
         One client keeps {} proposals in flight at a follower that stays in both \
         configurations (the next as soon as one is decided) for {} s; at {:.1} s the leader \
         is asked, through the client API (`abcast reconfigure`'s code), to replace a \
         follower, or itself, by the spare. {} runs per case, interleaved; medians (min..max) \
         over the good runs.\n",
        group(window),
        args.duration_s,
        args.duration_s / 2.0,
        args.runs
    );
    let _ = writeln!(
        s,
        "Definitions (from the client's decisions, each `Decided` frame time-stamped on \
         arrival):\n\n\
         - **before**: values/s over the {BEFORE_S} s before the request;\n\
         - **recovery**: from the request to the start of the first {RECOVERY_WINDOW_MS} ms \
         window, starting when the change took effect or at a decision after that, whose \
         rate is at least {share:.0}% of *before* (with no disruption: the time until the \
         change took effect);\n\
         - **degraded**: the 50 ms bins from the request to the end of that window whose \
         rate is below {share:.0}% of *before*, in ms;\n\
         - **gap**: the longest interval without any decided value from the request to the \
         end of that window (the time from the request to the first decision after it \
         counts); with no disruption it is the usual spacing of decisions, a few ms;\n\
         - **after**: values/s from the later of that window's end and the change being in \
         effect, to the end of the load;\n\
         - **asked** / **in effect**: from the request until the leader took it, and until a \
         status showed the new configuration with no change pending;\n\
         - **run mean**: decided values over the whole load divided by its duration (the \
         seed's average throughput, n / t_execution, of figures 10 and 12);\n\
         - **dropped**: values the node took (`Proposed`) and never decided, even {} s after \
         the load stopped. A `Busy` or refused request is not a drop (nothing was taken); \
         the client waits {} ms and asks again, so its time shows in the gap; such requests \
         are counted as *refused*.\n",
        DRAIN.as_secs(),
        10,
        share = RECOVERY_SHARE * 100.0,
    );
    let _ = writeln!(
        s,
        "| change | protocol | gap ms | degraded ms | recovery ms | in effect ms | before values/s | after values/s | run mean values/s | dropped (total) | refused requests | good runs |"
    );
    let _ = writeln!(
        s,
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    );
    for (c, runs) in results {
        let dropped: u64 = runs.iter().map(|r| r.dropped).sum();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} |",
            c.change.name(),
            c.variant.title(),
            spread(runs, |r| Some(r.gap_ms), 0),
            spread(runs, |r| Some(r.degraded_ms), 0),
            spread(runs, |r| r.recovery_ms, 0),
            spread(runs, |r| Some(r.in_effect_ms), 0),
            med(runs, |r| Some(r.before)).map_or("n/a".into(), |v| group(v.round() as u64)),
            med(runs, |r| Some(r.after)).map_or("n/a".into(), |v| group(v.round() as u64)),
            med(runs, |r| Some(r.mean)).map_or("n/a".into(), |v| group(v.round() as u64)),
            dropped,
            spread(runs, |r| Some(r.refused_requests as f64), 0),
            runs.iter().filter(|r| r.ok).count(),
            runs.len()
        );
    }
    let _ = writeln!(
        s,
        "\nDropped proposals per case (cf. table 5.1, which counted the seed's client \
         timeouts):\n"
    );
    let _ = writeln!(s, "| change | protocol | runs with drops | median | max |");
    let _ = writeln!(s, "| --- | --- | --- | --- | --- |");
    for (c, runs) in results {
        let d: Vec<f64> = runs.iter().map(|r| r.dropped as f64).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {}/{} | {} | {} |",
            c.change.name(),
            c.variant.title(),
            runs.iter().filter(|r| r.dropped > 0).count(),
            runs.len(),
            fmt_opt(median(&d), 0),
            fmt_opt(d.iter().copied().reduce(f64::max), 0)
        );
    }
    s += plot_note;
    s
}

/// `abcast bench reconfig`.
pub fn run(args: &BenchArgs) -> Result<u8, HarnessError> {
    if args.duration_s < DURATION_MIN_S {
        return Err(HarnessError::Usage(format!(
            "--duration {} is too short for bench reconfig: at least {DURATION_MIN_S} s (a \
             warm-up and {BEFORE_S} s of load before the request half-way)",
            args.duration_s
        )));
    }
    let variants = variants(args)?;
    let window = window(args)?;
    let (stamp, date) = utc_now();
    let out_dir = create_out_dir(args, "reconfig", &stamp)?;
    let mut cases = Vec::new();
    for change in Change::ALL {
        for &variant in &variants {
            cases.push(Case { change, variant });
        }
    }
    let mut results: BTreeMap<Case, Vec<RunOut>> = BTreeMap::new();
    for r in 1..=args.runs {
        for (i, &case) in cases.iter().enumerate() {
            let label = format!(
                "[{r}/{} {}/{}] reconfig {} {}",
                args.runs,
                i + 1,
                cases.len(),
                case.variant.name(),
                case.change.name()
            );
            let o = match run_case(case, args, window, r) {
                Ok(o) => o,
                Err(e) if r == 1 && i == 0 => return Err(e),
                Err(e) => RunOut {
                    run: r,
                    problems: vec![e.to_string()],
                    ..RunOut::default()
                },
            };
            eprintln!(
                "{label}: gap {:.0} ms, degraded {:.0} ms, recovery {} ms, in effect {:.0} ms, \
                 before {} values/s, dropped {}{}",
                o.gap_ms,
                o.degraded_ms,
                fmt_opt(o.recovery_ms, 0),
                o.in_effect_ms,
                group(o.before.round() as u64),
                o.dropped,
                if o.ok {
                    String::new()
                } else {
                    format!("; FAILED: {}", o.problems.join("; "))
                }
            );
            results.entry(case).or_default().push(o);
        }
    }
    write_file(&out_dir.join("results.csv"), &csv_text(&results))?;
    write_file(&out_dir.join("timeline.csv"), &timeline_csv(&results))?;
    let plot_note = match plot(&out_dir.join("plot.png"), &results) {
        Ok(()) => String::new(),
        Err(e) => format!("\nThe plot could not be drawn: {e}\n"),
    };
    let mut s = summary(args, window, &date, &results, &plot_note);
    let fails: Vec<String> = results
        .iter()
        .flat_map(|(c, runs)| {
            runs.iter().filter(|r| !r.ok).map(move |r| {
                format!(
                    "{} {}, run {}: {}",
                    c.variant.name(),
                    c.change.name(),
                    r.run,
                    r.problems.join("; ")
                )
            })
        })
        .collect();
    push_failed_runs(&mut s, &fails);
    write_file(&out_dir.join("summary.md"), &s)?;
    let all_ok = fails.is_empty();
    let dropped_total: u64 = results.values().flatten().map(|r| r.dropped).sum();
    let worst_gap = |change: Change| {
        results
            .iter()
            .filter(|(c, _)| c.change == change)
            .filter_map(|(_, runs)| med(runs, |r| Some(r.gap_ms)))
            .reduce(f64::max)
    };
    finish(
        args,
        || {
            let mut j = json!({
                "bench": "reconfig",
                "runs": args.runs,
                "duration_s": args.duration_s,
                "window_values": window,
                "value_size_bytes": VALUE_BYTES,
                "dropped_total": dropped_total,
                "gap_ms_replace_leader": worst_gap(Change::ReplaceLeader),
                "gap_ms_replace_follower": worst_gap(Change::ReplaceFollower),
                "all_runs_ok": all_ok,
                "out": out_dir.display().to_string(),
            });
            if let Value::Object(m) = &mut j {
                for (c, runs) in &results {
                    let k = format!("{}_{}", c.variant.key(), c.change.key());
                    m.insert(format!("{k}_gap_ms"), json!(med(runs, |r| Some(r.gap_ms))));
                    m.insert(
                        format!("{k}_recovery_ms"),
                        json!(med(runs, |r| r.recovery_ms)),
                    );
                    m.insert(
                        format!("{k}_degraded_ms"),
                        json!(med(runs, |r| Some(r.degraded_ms))),
                    );
                    m.insert(
                        format!("{k}_in_effect_ms"),
                        json!(med(runs, |r| Some(r.in_effect_ms))),
                    );
                    m.insert(
                        format!("{k}_values_per_s_before"),
                        json!(med(runs, |r| Some(r.before))),
                    );
                    m.insert(
                        format!("{k}_values_per_s_after"),
                        json!(med(runs, |r| Some(r.after))),
                    );
                    m.insert(
                        format!("{k}_dropped"),
                        json!(runs.iter().map(|r| r.dropped).sum::<u64>()),
                    );
                }
            }
            j
        },
        || format!("{s}\nWritten to {}\n", out_dir.display()),
        all_ok,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1000 values/s in 1 ms steps, a silence from 5.0 to 5.3 s, then 1000 values/s again.
    fn steady_with_silence() -> Vec<(f64, u64)> {
        (0..10_000)
            .map(|i| i as f64 / 1000.0)
            .filter(|t| !(5.0..5.3).contains(t))
            .map(|t| (t, 1))
            .collect()
    }

    #[test]
    fn a_silence_after_the_request_is_the_gap_and_recovery_follows_it() {
        let d = steady_with_silence();
        let f = figures(&d, 5.0, 10.0, 5.1);
        assert!((f.before - 1000.0).abs() < 1.0, "{f:?}");
        assert!((f.gap_ms - 300.0).abs() < 1.5, "{f:?}");
        assert!((f.gap_from_s - 5.0).abs() < 1e-9 && (f.gap_to_s - 5.3).abs() < 1e-9);
        // The first 250 ms window at >= 50% after the change took effect starts at the
        // first decision after the gap.
        assert!((f.recovery_ms.unwrap() - 300.0).abs() < 1.5, "{f:?}");
        assert_eq!(f.degraded_ms, 300.0);
        assert!((f.after - 1000.0).abs() < 5.0, "{f:?}");
        assert_eq!(f.bins.len(), 200);
        assert_eq!(f.bins[10], 50);
        assert_eq!(f.bins[101], 0);
    }

    #[test]
    fn without_a_disruption_the_gap_is_the_spacing_of_decisions() {
        let d: Vec<(f64, u64)> = (0..10_000).map(|i| (i as f64 / 1000.0, 1)).collect();
        let f = figures(&d, 5.0005, 10.0, 5.05);
        assert!(f.gap_ms <= 1.0 + 1e-6, "{f:?}");
        // Recovery is the time until the change took effect; nothing was degraded.
        assert!((f.recovery_ms.unwrap() - 49.5).abs() < 1e-6, "{f:?}");
        assert_eq!(f.degraded_ms, 0.0);
    }

    #[test]
    fn a_silence_after_the_change_took_effect_is_still_the_gap() {
        // The change takes effect at 5.6 s, the silence comes at 5.4 s: a window from the
        // request would have closed before it.
        let d: Vec<(f64, u64)> = (0..10_000)
            .map(|i| i as f64 / 1000.0)
            .filter(|t| !(5.4..5.5).contains(t))
            .map(|t| (t, 1))
            .collect();
        let f = figures(&d, 5.0, 10.0, 5.6);
        assert!((f.gap_ms - 100.0).abs() < 1.5, "{f:?}");
        assert!((f.recovery_ms.unwrap() - 600.0).abs() < 1e-6, "{f:?}");
    }

    #[test]
    fn a_load_that_never_recovers_has_no_recovery_and_a_gap_to_the_stop() {
        let d: Vec<(f64, u64)> = (0..5_000).map(|i| (i as f64 / 1000.0, 1)).collect();
        let f = figures(&d, 5.0, 8.0, 5.0);
        assert_eq!(f.recovery_ms, None);
        assert!((f.gap_ms - 3000.0).abs() < 1e-6, "{f:?}");
        assert_eq!(f.degraded_ms, 3000.0);
        assert_eq!(f.after, 0.0);
    }

    #[test]
    fn the_plot_and_the_files_are_written_from_runs() {
        let d = steady_with_silence();
        let f = figures(&d, 5.0, 10.0, 5.1);
        let run = |run: u32| RunOut {
            run,
            ok: true,
            before: f.before,
            after: f.after,
            gap_ms: f.gap_ms,
            recovery_ms: f.recovery_ms,
            in_effect_ms: 100.0,
            request_s: 5.0,
            gap_from_s: f.gap_from_s,
            gap_to_s: f.gap_to_s,
            bins: f.bins.clone(),
            fine: f.fine.clone(),
            ..RunOut::default()
        };
        let mut results = BTreeMap::new();
        for change in Change::ALL {
            for variant in Variant::ALL {
                results.insert(Case { change, variant }, vec![run(1), run(2)]);
            }
        }
        let dir = std::env::temp_dir().join(format!("abcast-reconfig-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plot.png");
        plot(&path, &results).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 10_000);
        let csv = csv_text(&results);
        assert_eq!(csv.lines().count(), 1 + 12);
        assert!(timeline_csv(&results).lines().count() > 12 * 190);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_cluster_file_makes_node_3_a_spare_and_picks_the_transfer() {
        let peer: Vec<String> = (0..4).map(|i| format!("127.0.0.1:{}", 7400 + i)).collect();
        let client: Vec<String> = (0..4).map(|i| format!("127.0.0.1:{}", 7500 + i)).collect();
        for v in Variant::ALL {
            let text = config_text(v, &peer, &client, 10_000);
            let c = abcast_node::nodeconfig::parse(&text, Some(3), Path::new("/tmp"))
                .unwrap_or_else(|e| panic!("{}: {e}\n{text}", v.name()));
            assert_eq!(c.spares, vec![NodeId(3)]);
            assert_eq!(text.contains("eager"), v == Variant::SeqPaxosEager);
        }
    }

    #[test]
    fn protocols_are_named_as_the_bench_knows_them() {
        use clap::Parser;
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            b: BenchArgs,
        }
        let args = |p: &str| P::parse_from(["x", "reconfig", "--protocols", p]).b;
        assert_eq!(
            variants(&args("seqpaxos")).unwrap(),
            vec![Variant::SeqPaxosPull, Variant::SeqPaxosEager]
        );
        assert_eq!(
            variants(&args("raft,seqpaxos-eager")).unwrap(),
            vec![Variant::SeqPaxosEager, Variant::Raft]
        );
        assert!(variants(&args("omnipaxos")).is_err());
        assert!(variants(&args(",")).is_err());
    }
}
