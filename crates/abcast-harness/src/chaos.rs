//! `abcast chaos`: every protocol's real node processes, each in a network namespace of
//! its own on an emulated LAN (`bench::lan`), with the nodes' clients proposing and their
//! delivery logs recording, while a seeded nemesis (`cluster::nemesis`) kills, pauses,
//! partitions and wipes; then the checks (issue 33):
//!
//! * agreement: learners deliver the same batch at each instance (`deliverylog::compare`);
//!   for the token ring, which is partitionable (Extended Virtual Synchrony: each side of a
//!   partition goes on in a configuration of its own), any two lives order the values both
//!   delivered the same way, and the members' last lives end on the same value;
//! * no duplicate within a life (the protocols' de-duplication), none counted by a node;
//! * no phantom: every delivered value was proposed by a life of its origin;
//! * no lost acknowledged value: each life's acknowledged values (what its client was told)
//!   are among those delivered after the heal (for the token ring: delivered somewhere, as
//!   a partitioned member acknowledges in its own configuration);
//! * liveness: after each fault heals every node delivers again within
//!   [`RECOVER_MAX_S`] (a majority is up then), and after the last one every node's last
//!   life delivers and catches up.
//!
//! The schedule comes from the seed alone, so a failing run is replayed by its command line
//! (printed with the failure); the times of the actions follow the cluster (each fault waits
//! for the previous one's victim to recover).

use crate::bench::lan::EmulatedLan;
use crate::cluster::nemesis::{ChaosRun, Fault, FaultKind, NemesisPlan, NetCut, run_chaos_cluster};
use crate::cluster::{ClusterSpec, Ended, NodePlace, protocol_edits};
use crate::error::{HarnessError, runtime};
use crate::format::parse_seconds;
use abcast_core::config::StartInfo;
use abcast_node::deliverylog::LearnerLog;
use clap::Args;
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::Duration;

/// The protocols the suite runs.
pub const CHAOS_PROTOCOLS: [&str; 6] = [
    "uring",
    "ringpaxos",
    "multiring",
    "seqpaxos",
    "raft",
    "token",
];
/// Longest wait after a fault heals for every node to deliver again: the liveness bound
/// while a majority is up.
pub const RECOVER_MAX_S: u64 = 20;
/// Load after the last fault healed and every node recovered.
pub const HEAL_LOAD_S: u64 = 5;

/// `abcast chaos` flags.
#[derive(Args, Debug, Clone)]
pub struct ChaosArgs {
    /// The protocol: uring, ringpaxos, multiring (two U-Ring rings over the nodes), seqpaxos,
    /// raft or token.
    #[arg(long, value_name = "NAME", default_value = "uring",
          value_parser = CHAOS_PROTOCOLS)]
    pub protocol: String,
    /// The nemesis's seed: the same seed, protocol, duration, nodes, storage and faults make
    /// the same schedule [default: drawn, and printed].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Seconds of load; faults begin in the first three quarters, the rest heals (and the
    /// run goes on until every node recovered and delivered for a few seconds more).
    #[arg(long = "duration", value_name = "SECONDS", default_value = "60",
          value_parser = parse_seconds)]
    pub duration_s: f64,
    /// Node processes.
    #[arg(long, default_value_t = 3,
          value_parser = clap::value_parser!(u32).range(3..=9))]
    pub nodes: u32,
    /// Storage: durable (fdatasync before a vote leaves: every fault is promised, kill -9 of
    /// every node at once included) or memory (a restart forgets: no kill_all)
    /// [default: durable; memory for token, which keeps its messages in memory only].
    #[arg(long, value_name = "KIND", value_parser = ["durable", "memory"])]
    pub storage: Option<String>,
    /// The fault kinds to draw from, comma-separated: kill, kill_leader, kill_all (durable
    /// only), pause, partition, one_way, wiped_restart [default: all, but kill_all on
    /// memory].
    #[arg(long, value_name = "LIST")]
    pub faults: Option<String>,
    /// Values per second offered in total by the nodes' clients.
    #[arg(long = "rate", value_name = "VALUES_PER_S", default_value_t = 1000)]
    pub rate_values_per_s: u64,
    /// Print one JSON object as the last stdout line.
    #[arg(long)]
    pub json: bool,
    /// Keep the temporary directory (config, node logs, storage, delivery logs).
    #[arg(long = "keep-dir")]
    pub keep_dir: bool,
}

impl ChaosArgs {
    /// `--storage`, or the protocol's default: durable, and memory for the token ring
    /// (its messages live in memory only: Totem's recovery carries them to a new ring).
    pub fn storage(&self) -> &str {
        match (&self.storage, self.protocol.as_str()) {
            (Some(s), _) => s,
            (None, "token") => "memory",
            (None, _) => "durable",
        }
    }
}

/// A small seeded generator (SplitMix64): the schedule depends on the seed alone.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }
}

/// The fault kinds a run draws from: `--faults`, or every kind its storage promises.
pub fn fault_kinds(args: &ChaosArgs) -> Result<Vec<FaultKind>, HarnessError> {
    let durable = args.storage() == "durable";
    let kinds: Vec<FaultKind> = match &args.faults {
        // A restart on a wiped directory included: the node asks the others which life
        // of it they knew and starts amnesic past it (issue 33, suspect 2;
        // docs/design/amnesia-detection.md). Before, it came back as incarnation 0 and
        // proposed value ids its first life used, which learners dropped as duplicates.
        None => FaultKind::ALL
            .into_iter()
            .filter(|k| durable || *k != FaultKind::KillAll)
            .collect(),
        Some(list) => {
            let mut out = Vec::new();
            for name in list.split(',').filter(|s| !s.trim().is_empty()) {
                let Some(k) = FaultKind::parse(name) else {
                    let names: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                    return Err(HarnessError::Usage(format!(
                        "--faults: {name:?} is not one of {}",
                        names.join(", ")
                    )));
                };
                if !out.contains(&k) {
                    out.push(k);
                }
            }
            out
        }
    };
    if kinds.is_empty() {
        return Err(HarnessError::Usage(
            "--faults: name at least one fault kind".into(),
        ));
    }
    if !durable && kinds.contains(&FaultKind::KillAll) {
        return Err(HarnessError::Usage(
            "--faults kill_all needs --storage durable: on memory storage every node forgets \
             everything when all are killed at once, and nothing promises otherwise"
                .into(),
        ));
    }
    Ok(kinds)
}

/// The schedule of a seed: faults one after another, each held 0.5 to 3 s, with 1 to 3 s
/// of quiet after its victim recovered, enough to fill the fault window.
pub fn schedule(seed: u64, nodes: u32, kinds: &[FaultKind], fault_window_s: f64) -> Vec<Fault> {
    let mut rng = Rng(seed ^ 0xC4A0_5EED);
    let mut faults = Vec::new();
    // A guess of each fault's length (hold, recovery, gap) to size the list; the runner
    // stops at the window's end whatever is left.
    let mut planned_ms = 3_000u64;
    let window_ms = (fault_window_s * 1000.0) as u64;
    while planned_ms < window_ms && faults.len() < 1000 {
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        let node = rng.below(u64::from(nodes)) as u32;
        let peer = (node + 1 + rng.below(u64::from(nodes - 1)) as u32) % nodes;
        let hold_ms = match kind {
            FaultKind::Pause => rng.range(300, 3_000),
            FaultKind::Partition | FaultKind::OneWay => rng.range(1_000, 4_000),
            FaultKind::KillAll => rng.range(300, 1_500),
            _ => rng.range(300, 2_500),
        };
        let gap_ms = rng.range(1_000, 3_000);
        planned_ms += hold_ms + gap_ms + 1_500;
        faults.push(Fault {
            kind,
            node,
            peer,
            hold_ms,
            gap_ms,
        });
    }
    faults
}

/// The command line that replays a run.
pub fn replay_command(args: &ChaosArgs, seed: u64) -> String {
    let mut c = format!(
        "abcast chaos --protocol {} --seed {seed} --duration {} --nodes {} --storage {} --rate {}",
        args.protocol,
        args.duration_s,
        args.nodes,
        args.storage(),
        args.rate_values_per_s
    );
    if let Some(f) = &args.faults {
        c += &format!(" --faults {f}");
    }
    if let Ok(m) = std::env::var(abcast_node::nodeconfig::MUTATION_ENV) {
        c = format!("{}={m} {c}", abcast_node::nodeconfig::MUTATION_ENV);
    }
    c
}

/// The verdict of one chaos run.
#[derive(Debug, Clone, Default)]
pub struct ChaosVerdict {
    pub faults: BTreeMap<&'static str, u64>,
    pub acked: u64,
    pub lost_acked: u64,
    pub duplicates: u64,
    pub phantom: u64,
    pub agreement: bool,
    pub live_after_heal: bool,
    /// Every fault's victim recovered within [`RECOVER_MAX_S`].
    pub live_within_bound: bool,
    pub longest_recovery_s: f64,
    pub delivered_max: u64,
    pub instances_compared: u64,
    /// What went wrong, in words.
    pub notes: Vec<String>,
}

impl ChaosVerdict {
    pub fn ok(&self) -> bool {
        self.agreement
            && self.lost_acked == 0
            && self.duplicates == 0
            && self.phantom == 0
            && self.live_after_heal
            && self.live_within_bound
            && self.notes.is_empty()
    }
}

/// Sorted, merged spans `[from, to)`.
fn merge(mut spans: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    spans.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (f, t) in spans {
        match out.last_mut() {
            Some(last) if f <= last.1 => last.1 = last.1.max(t),
            _ => out.push((f, t)),
        }
    }
    out
}

fn covered(spans: &[(u64, u64)], from: u64, to: u64) -> u64 {
    spans
        .iter()
        .map(|&(f, t)| t.min(to).saturating_sub(f.max(from)))
        .sum()
}

/// One life of a node as its stats lines tell it.
struct LifeStats {
    node: u32,
    incarnation: u64,
    acked: u64,
    proposed: u64,
    killed: bool,
}

fn life_stats(chaos: &ChaosRun) -> Vec<LifeStats> {
    let mut out = Vec::new();
    for r in &chaos.run.nodes {
        for inc in &r.incarnations {
            let Some(last) = inc.last() else { continue };
            out.push(LifeStats {
                node: r.id,
                incarnation: last.incarnation,
                acked: last.acked_by_origin.get(&r.id).copied().unwrap_or(0),
                proposed: last.proposed_values,
                killed: matches!(inc.ended, Ended::KilledByDemo | Ended::KilledAfterTimeout),
            });
        }
    }
    out
}

/// The checks of the module doc over a chaos run.
pub fn verdict(chaos: &ChaosRun, protocol: &str) -> ChaosVerdict {
    let token = protocol == "token";
    // Multi-Ring Paxos numbers a life's values per ring, the ring's group in the 8 bits above
    // 56 (`multiring/mod.rs`): a life's range is one per ring.
    let lane_shift = if protocol == "multiring" { 56 } else { 64 };
    let run = &chaos.run;
    let mut v = ChaosVerdict::default();
    for f in &chaos.faults {
        *v.faults.entry(f.kind.name()).or_default() += 1;
    }
    // Nodes that failed on their own.
    for r in &run.nodes {
        for (n, inc) in r.incarnations.iter().enumerate() {
            match &inc.ended {
                Ended::Unexpected { status, log_tail } => v.notes.push(format!(
                    "node {} (life {}) stopped on its own: {status}; log ends:\n{log_tail}",
                    r.id,
                    n + 1
                )),
                Ended::KilledAfterTimeout => v.notes.push(format!(
                    "node {} did not stop within the grace after SIGTERM",
                    r.id
                )),
                _ => {}
            }
            v.duplicates += inc.last().map_or(0, |l| l.duplicate_deliveries);
        }
    }
    if let Some(e) = &run.delivery_log_error {
        v.notes.push(format!("delivery logs unreadable: {e}"));
        return v;
    }
    let logs = &run.delivery_logs;
    let lives = life_stats(chaos);
    v.acked = lives.iter().map(|l| l.acked).sum();
    // Every value delivered anywhere, per origin.
    let mut spans: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for log in logs {
        for e in &log.entries {
            spans
                .entry(e.origin)
                .or_default()
                .push((e.first_seq, e.first_seq.saturating_add(e.count)));
        }
    }
    let spans: BTreeMap<u32, Vec<(u64, u64)>> =
        spans.into_iter().map(|(o, s)| (o, merge(s))).collect();
    v.delivered_max = logs
        .iter()
        .map(|l| l.entries.iter().map(|e| e.count).sum::<u64>())
        .max()
        .unwrap_or(0);
    // Phantoms: a value outside what the lives of its origin proposed. A life's values are
    // `[start_seq_for(k), + proposed)`; a killed life may have proposed more after its last
    // stats line, so only its range bounds it.
    let nodes = run.spec.nodes;
    for (&origin, s) in &spans {
        let lanes: std::collections::BTreeSet<u64> = s
            .iter()
            .map(|&(f, _)| f.checked_shr(lane_shift).unwrap_or(0))
            .collect();
        let in_lanes = |from: u64, to: u64| -> Vec<(u64, u64)> {
            lanes
                .iter()
                .map(|&l| {
                    let base = l.checked_shl(lane_shift).unwrap_or(0);
                    (base | from, base | to)
                })
                .collect()
        };
        let mut allowed: Vec<(u64, u64)> = Vec::new();
        for l in lives.iter().filter(|l| l.node == origin) {
            let (Some(from), Some(next)) = (
                StartInfo::start_seq_for(l.incarnation),
                StartInfo::start_seq_for(l.incarnation + 1),
            ) else {
                continue;
            };
            let to = if l.killed {
                next
            } else {
                from.saturating_add(l.proposed).min(next)
            };
            allowed.extend(in_lanes(from, to));
        }
        // A life killed before its first stats line: its whole range.
        for r in run.nodes.iter().filter(|r| r.id == origin) {
            let named = r.incarnations.iter().filter(|i| i.last().is_some()).count();
            if named < r.incarnations.len() {
                let max_inc = lives
                    .iter()
                    .filter(|l| l.node == origin)
                    .map(|l| l.incarnation)
                    .max();
                for k in 0..=max_inc.map_or(0, |m| m + 1) {
                    if let (Some(a), Some(b)) =
                        (StartInfo::start_seq_for(k), StartInfo::start_seq_for(k + 1))
                        && !lives.iter().any(|l| l.node == origin && l.incarnation == k)
                    {
                        allowed.extend(in_lanes(a, b));
                    }
                }
            }
        }
        let allowed = merge(allowed);
        let total: u64 = s.iter().map(|&(f, t)| t - f).sum();
        let inside: u64 = s.iter().map(|&(f, t)| covered(&allowed, f, t)).sum();
        if origin >= nodes || inside < total {
            let n = total - if origin >= nodes { 0 } else { inside };
            v.phantom += n;
            v.notes.push(format!(
                "{n} delivered value(s) of origin {origin} were never proposed by it"
            ));
        }
    }
    // Lost acknowledged values: each life's acknowledged count against what was delivered
    // of its range (lives after a wiped directory share a range: summed).
    let mut acked_by_range: BTreeMap<(u32, u64), u64> = BTreeMap::new();
    for l in &lives {
        *acked_by_range.entry((l.node, l.incarnation)).or_default() += l.acked;
    }
    for (&(node, k), &acked) in &acked_by_range {
        let (Some(from), Some(to)) = (StartInfo::start_seq_for(k), StartInfo::start_seq_for(k + 1))
        else {
            continue;
        };
        let got = spans.get(&node).map_or(0, |s| {
            let lanes: std::collections::BTreeSet<u64> = s
                .iter()
                .map(|&(f, _)| f.checked_shr(lane_shift).unwrap_or(0))
                .collect();
            lanes
                .iter()
                .map(|&l| {
                    let base = l.checked_shl(lane_shift).unwrap_or(0);
                    covered(s, base | from, base | to)
                })
                .sum()
        });
        if got < acked {
            v.lost_acked += acked - got;
            v.notes.push(format!(
                "node {node} life {k}: {acked} values acknowledged, {got} delivered"
            ));
        }
    }
    let mut caught_up = true;
    if token {
        token_checks(logs, &mut v, &mut caught_up);
    } else {
        let acked_by_origin: BTreeMap<u32, u64> = BTreeMap::new();
        let c = abcast_node::deliverylog::compare(logs, &acked_by_origin);
        v.instances_compared = c.instances_compared;
        v.duplicates += c.duplicates.len() as u64;
        v.notes.extend(c.duplicates.iter().cloned());
        v.agreement = true;
        for d in c.disagreements {
            if d.contains("is behind") {
                caught_up = false;
            } else {
                v.agreement = false;
            }
            v.notes.push(d);
        }
    }
    // Liveness: every fault recovered within the bound; after the last, every node's last
    // life delivered after the heal.
    v.live_within_bound = chaos.faults.iter().all(|f| f.recovered_at_s.is_some());
    v.longest_recovery_s = chaos
        .faults
        .iter()
        .filter_map(|f| Some(f.recovered_at_s? - f.healed_at_s?))
        .fold(0.0, f64::max);
    for f in chaos.faults.iter().filter(|f| f.recovered_at_s.is_none()) {
        v.notes.push(format!(
            "after \"{}\" healed at {:.1} s, not every node delivered within {RECOVER_MAX_S} s",
            f.what,
            f.healed_at_s.unwrap_or(f.at_s)
        ));
    }
    let mut delivered_after_heal = true;
    for r in &run.nodes {
        let Some(inc) = r.incarnations.last() else {
            delivered_after_heal = false;
            continue;
        };
        let at_heal = inc
            .samples
            .iter()
            .take_while(|s| s.at_s <= chaos.last_heal_s)
            .last()
            .map_or(0, |s| s.line.delivered_values);
        let end = inc.last().map_or(0, |l| l.delivered_values);
        if end <= at_heal {
            delivered_after_heal = false;
            v.notes.push(format!(
                "node {} delivered nothing after the last fault healed ({:.1} s)",
                r.id, chaos.last_heal_s
            ));
        }
    }
    v.live_after_heal = caught_up && delivered_after_heal && v.live_within_bound;
    v
}

/// The token ring's agreement (Extended Virtual Synchrony across the configurations a
/// partition or a crash makes): no value twice in a life; any two lives deliver the values
/// they both delivered in the same order, as the same batches; and the members' last lives
/// end on the same batch (the ring they formed after the heal delivered to all of them).
fn token_checks(logs: &[LearnerLog], v: &mut ChaosVerdict, caught_up: &mut bool) {
    type Key = (u32, u64);
    v.agreement = true;
    let mut orders: Vec<(String, Vec<(Key, u64)>)> = Vec::new();
    for log in logs {
        let who = format!("node {} (life {})", log.node, log.incarnation);
        let batches: Vec<(Key, u64)> = log
            .entries
            .iter()
            .map(|e| ((e.origin, e.first_seq), e.count))
            .collect();
        let mut by_origin: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
        for &((o, f), c) in &batches {
            by_origin.entry(o).or_default().push((f, f + c));
        }
        for (o, mut s) in by_origin {
            s.sort_unstable();
            if s.windows(2).any(|w| w[1].0 < w[0].1) {
                v.duplicates += 1;
                v.notes
                    .push(format!("{who} delivered values of origin {o} twice"));
            }
        }
        orders.push((who, batches));
    }
    v.instances_compared = orders.iter().map(|o| o.1.len() as u64).sum();
    let index: Vec<HashMap<Key, (usize, u64)>> = orders
        .iter()
        .map(|(_, b)| {
            b.iter()
                .enumerate()
                .map(|(i, &(k, c))| (k, (i, c)))
                .collect()
        })
        .collect();
    'pairs: for a in 0..orders.len() {
        for b in a + 1..orders.len() {
            let mut prev: Option<usize> = None;
            for &(k, c) in &orders[b].1 {
                let Some(&(i, ca)) = index[a].get(&k) else {
                    continue;
                };
                if ca != c || prev.is_some_and(|p| i <= p) {
                    v.agreement = false;
                    v.notes.push(format!(
                        "ORDER DIFFERS: {} and {} deliver {}:{} {}",
                        orders[a].0,
                        orders[b].0,
                        k.0,
                        k.1,
                        if ca != c {
                            "as different batches"
                        } else {
                            "in another order"
                        }
                    ));
                    if v.notes.len() > 20 {
                        break 'pairs;
                    }
                    break;
                }
                prev = Some(i);
            }
        }
    }
    // The last life of every node ends on one batch.
    let mut last: BTreeMap<u32, &LearnerLog> = BTreeMap::new();
    for log in logs {
        if last
            .get(&log.node)
            .is_none_or(|l| l.incarnation < log.incarnation)
        {
            last.insert(log.node, log);
        }
    }
    let ends: Vec<(u32, Option<Key>)> = last
        .iter()
        .map(|(&n, l)| (n, l.entries.last().map(|e| (e.origin, e.first_seq))))
        .collect();
    if ends
        .windows(2)
        .any(|w| w[0].1 != w[1].1 || w[0].1.is_none())
    {
        *caught_up = false;
        v.notes.push(format!(
            "the members' last lives end on different values (node: origin, seq): {ends:?}"
        ));
    }
}

/// The `--json` object.
pub fn verdict_json(
    args: &ChaosArgs,
    seed: u64,
    chaos: &ChaosRun,
    v: &ChaosVerdict,
) -> serde_json::Value {
    json!({
        "ok": v.ok(),
        "protocol": args.protocol,
        "seed": seed,
        "duration_s": args.duration_s,
        "nodes": args.nodes,
        "storage": args.storage(),
        "faults": v.faults,
        "acked": v.acked,
        "lost_acked": v.lost_acked,
        "duplicates": v.duplicates,
        "phantom": v.phantom,
        "agreement": v.agreement,
        "live_after_heal": v.live_after_heal,
        "live_within_bound": v.live_within_bound,
        "recover_bound_s": RECOVER_MAX_S,
        "longest_recovery_s": v.longest_recovery_s,
        "delivered_max": v.delivered_max,
        "compared": v.instances_compared,
        "run_s": chaos.run.end_at_s,
        "faults_not_started": chaos.not_started,
        "mutation": std::env::var(abcast_node::nodeconfig::MUTATION_ENV).ok(),
        "notes": v.notes.iter().take(20).collect::<Vec<_>>(),
        "replay": replay_command(args, seed),
        "kept_dir": chaos.run.kept_dir.as_ref().map(|d| d.display().to_string()),
    })
}

/// Root, `ip` and `nft` (installed with apt-get when missing, as issue 33 asks).
fn check_tools() -> Result<(), HarnessError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(HarnessError::Runtime(
            "abcast chaos needs root: it puts each node in a network namespace and cuts \
             links with nft rules (run it with sudo)"
                .into(),
        ));
    }
    let have = |p: &str| {
        std::process::Command::new(p)
            .arg(if p == "nft" { "--version" } else { "-V" })
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !have("ip") {
        return Err(HarnessError::Runtime(
            "abcast chaos needs the `ip` program (package iproute2)".into(),
        ));
    }
    if !have("nft") {
        eprintln!("nft is missing: installing the nftables package with apt-get");
        let ok = std::process::Command::new("apt-get")
            .args(["install", "-y", "-q", "nftables"])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok || !have("nft") {
            return Err(HarnessError::Runtime(
                "abcast chaos needs the `nft` program and could not install it \
                 (apt-get install nftables)"
                    .into(),
            ));
        }
    }
    Ok(())
}

/// The outcome of [`run_chaos`]: the verdict and the run.
pub struct ChaosOutcome {
    pub seed: u64,
    pub run: ChaosRun,
    pub verdict: ChaosVerdict,
}

/// One chaos run, without printing its summary; `log` gets the nemesis's narrative.
pub fn run_chaos(
    args: &ChaosArgs,
    seed: u64,
    log: &mut dyn FnMut(String),
) -> Result<ChaosOutcome, HarnessError> {
    let kinds = fault_kinds(args)?;
    check_tools()?;
    let n = args.nodes;
    let fault_window_s = args.duration_s * 0.75;
    let plan = NemesisPlan {
        faults: schedule(seed, n, &kinds, fault_window_s),
        fault_window_s,
        recover_max: Duration::from_secs(RECOVER_MAX_S),
        heal_load: Duration::from_secs(HEAL_LOAD_S),
    };
    let tag = format!("ch{}", std::process::id() % 10_000);
    let lan = EmulatedLan::create_unshaped(&tag, n as usize).map_err(HarnessError::Runtime)?;
    let net = NetCut {
        switch_netns: lan.switch_netns().to_string(),
        ports: format!("ab{tag}h*"),
        table: format!("abcast_chaos_{tag}"),
        addrs: lan.nodes.iter().map(|p| p.addr).collect(),
    };
    net.remove();
    net.apply(&[]).map_err(HarnessError::Runtime)?;
    let spec = ClusterSpec {
        nodes: n,
        value_size_bytes: 256,
        duration_s: args.duration_s,
        rate_values_per_s: args.rate_values_per_s,
        window_values: None,
        kill: false,
        config_edits: protocol_edits(&args.protocol, args.storage()),
        keep_dir: args.keep_dir,
        progress: false,
        label: "chaos".into(),
        program: None,
        load_rates: None,
        learners_differ: args.protocol == "token",
        placement: lan
            .nodes
            .iter()
            .map(|p| NodePlace {
                netns_path: p.netns_path(),
                addr: p.addr,
            })
            .collect(),
        load_at_leader: false,
        stamp_values: false,
    };
    let run = run_chaos_cluster(&spec, &plan, Some(&net), log);
    net.remove();
    drop(lan);
    let run = run?;
    let verdict = verdict(&run, &args.protocol);
    Ok(ChaosOutcome { seed, run, verdict })
}

/// `abcast chaos`: returns the exit status (0 only if every check passed).
pub fn run_chaos_cmd(args: &ChaosArgs) -> Result<u8, HarnessError> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64 % 1_000_000)
    });
    let json_out = args.json;
    eprintln!(
        "abcast chaos: {} on {} nodes ({} storage), seed {seed}, {} s",
        args.protocol,
        args.nodes,
        args.storage(),
        args.duration_s
    );
    if let Ok(m) = std::env::var(abcast_node::nodeconfig::MUTATION_ENV) {
        eprintln!("the nodes run the BROKEN variant {m}: the checks must fail");
    }
    let mut log = |line: String| eprintln!("{line}");
    let out = run_chaos(args, seed, &mut log)?;
    let v = &out.verdict;
    let mut text = String::new();
    if json_out {
        text += &verdict_json(args, seed, &out.run, v).to_string();
        text += "\n";
    } else {
        text += &render(args, &out);
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        return runtime("cannot write the summary", e);
    }
    if !v.ok() {
        eprintln!(
            "chaos FAILED with seed {seed}; replay: {}",
            replay_command(args, seed)
        );
        eprintln!("the schedule of seed {seed}:");
        let kinds = fault_kinds(args)?;
        for f in schedule(seed, args.nodes, &kinds, args.duration_s * 0.75)
            .iter()
            .take(out.run.faults.len())
        {
            eprintln!("  {}", f.describe());
        }
    }
    Ok(if v.ok() { 0 } else { 1 })
}

/// The human summary.
fn render(args: &ChaosArgs, out: &ChaosOutcome) -> String {
    let v = &out.verdict;
    let mut s = format!(
        "abcast chaos: {} on {} nodes ({} storage), seed {}, {:.0} s of load\n\nFaults:\n",
        args.protocol,
        args.nodes,
        args.storage(),
        out.seed,
        out.run.run.stop_at_s
    );
    for f in &out.run.faults {
        let rec = match (f.healed_at_s, f.recovered_at_s) {
            (Some(h), Some(r)) => format!("healed {h:.1} s, all delivering {r:.1} s"),
            (Some(h), None) => {
                format!("healed {h:.1} s, NOT all delivering within {RECOVER_MAX_S} s")
            }
            _ => "never healed".into(),
        };
        s += &format!("  {:>6.1} s  {}: {rec}\n", f.at_s, f.what);
    }
    let counts: Vec<String> = v.faults.iter().map(|(k, n)| format!("{k} {n}")).collect();
    s += &format!("  ({})\n\nChecks:\n", counts.join(", "));
    let yes = |b: bool| if b { "yes" } else { "NO" };
    s += &format!("  agreement:                {}\n", yes(v.agreement));
    s += &format!("  duplicates:               {}\n", v.duplicates);
    s += &format!("  phantom values:           {}\n", v.phantom);
    s += &format!(
        "  acknowledged:             {}, lost {}\n",
        v.acked, v.lost_acked
    );
    s += &format!(
        "  every node delivers again within {RECOVER_MAX_S} s of each heal: {} (longest {:.1} s)\n",
        yes(v.live_within_bound),
        v.longest_recovery_s
    );
    s += &format!("  live after the last heal: {}\n", yes(v.live_after_heal));
    if !v.notes.is_empty() {
        s += "\nProblems:\n";
        for n in v.notes.iter().take(20) {
            s += &format!("  - {}\n", n.replace('\n', "\n    "));
        }
    }
    if let Some(d) = &out.run.run.kept_dir {
        s += &format!("\nKept: {}\n", d.display());
    }
    s += &format!("\nResult: {}\n", if v.ok() { "OK" } else { "FAILED" });
    if !v.ok() {
        s += &format!("Replay: {}\n", replay_command(args, out.seed));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_makes_one_schedule_and_another_seed_another() {
        let kinds = FaultKind::ALL.to_vec();
        let a = schedule(7, 3, &kinds, 45.0);
        assert_eq!(a, schedule(7, 3, &kinds, 45.0));
        assert_ne!(a, schedule(8, 3, &kinds, 45.0));
        assert!(a.len() >= 5, "{a:?}");
        for f in &a {
            assert!(f.node < 3 && f.peer < 3 && f.peer != f.node, "{f:?}");
        }
    }

    fn chaos_of(logs: &[(u32, u64, &str)], line: &str) -> ChaosRun {
        use crate::cluster::test_support::{record, run_of, sample};
        // Three nodes, each with one life that proposed what `line` says; node 0's
        // acknowledged count is `line`'s (the others acknowledged nothing).
        let mut run = run_of(
            (0..3)
                .map(|id| {
                    let l = line.replace("\"node\":0", &format!("\"node\":{id}"));
                    record(id, vec![sample(3.5, 6, &l)])
                })
                .collect(),
        );
        run.delivery_logs = logs
            .iter()
            .map(|&(node, incarnation, text)| {
                let p = abcast_node::deliverylog::parse_log(text).expect("parses");
                LearnerLog {
                    node,
                    incarnation,
                    entries: p.entries,
                    skipped: p.skipped,
                    installed: p.installed,
                }
            })
            .collect();
        ChaosRun {
            run,
            faults: Vec::new(),
            wipes: Vec::new(),
            last_heal_s: 0.0,
            not_started: 0,
        }
    }

    #[test]
    fn a_value_never_proposed_and_an_acknowledged_value_never_delivered_are_counted() {
        use crate::cluster::test_support::LINE;
        // Node 0's one life proposed 10 values (seqs 1 to 10), 7 acknowledged; the logs
        // hold seqs 1 to 5 and 100: one phantom, one acknowledged value lost.
        let line = LINE.replace("\"proposed_values\":0", "\"proposed_values\":10");
        let v = verdict(&chaos_of(&[(0, 0, "1 0 1 5\n2 0 100 1\n")], &line), "uring");
        assert_eq!(v.acked, 7);
        assert_eq!(v.phantom, 1, "{v:?}");
        assert_eq!(v.lost_acked, 1, "{v:?}");
        assert!(!v.ok());
        let v = verdict(&chaos_of(&[(0, 0, "1 0 1 7\n")], &line), "uring");
        assert!(v.ok(), "{v:?}");
        // Multi-Ring: the ring's group above bit 56; two rings' values of one life.
        let mr = format!("1 0 {} 4\n2 0 {} 3\n", (1u64 << 56) | 1, (2u64 << 56) | 1);
        let v = verdict(&chaos_of(&[(0, 0, &mr)], &line), "multiring");
        assert!(v.ok(), "{v:?}");
    }

    #[test]
    fn token_lives_that_order_two_values_apart_or_end_apart_are_caught() {
        use crate::cluster::test_support::LINE;
        let line = LINE
            .replace("\"acked_by_origin\":{\"0\":7}", "\"acked_by_origin\":{}")
            .replace("\"proposed_values\":0", "\"proposed_values\":10");
        let same = "1 0 1 1\n2 1 1 1\n3 0 2 1\n";
        // A partition: node 2 delivered in a configuration of its own, then merged.
        let v = verdict(
            &chaos_of(
                &[(0, 0, same), (1, 0, same), (2, 0, "1 2 1 1\n2 0 2 1\n")],
                &line,
            ),
            "token",
        );
        assert!(v.agreement && v.notes.is_empty(), "{v:?}");
        let swapped = "1 1 1 1\n2 0 1 1\n3 0 2 1\n";
        let v = verdict(&chaos_of(&[(0, 0, same), (1, 0, swapped)], &line), "token");
        assert!(!v.agreement, "{v:?}");
        let twice = "1 0 1 1\n2 1 1 1\n3 0 1 1\n";
        let v = verdict(&chaos_of(&[(0, 0, twice)], &line), "token");
        assert_eq!(v.duplicates, 1, "{v:?}");
        let behind = "1 0 1 1\n2 1 1 1\n";
        let v = verdict(&chaos_of(&[(0, 0, same), (1, 0, behind)], &line), "token");
        assert!(v.agreement && !v.live_after_heal, "{v:?}");
    }

    #[test]
    fn kill_all_is_refused_on_memory_storage_and_names_are_checked() {
        let args = |storage: &str, faults: Option<&str>| ChaosArgs {
            protocol: "uring".into(),
            seed: Some(1),
            duration_s: 20.0,
            nodes: 3,
            storage: Some(storage.into()),
            faults: faults.map(String::from),
            rate_values_per_s: 100,
            json: true,
            keep_dir: false,
        };
        assert!(
            !fault_kinds(&args("memory", None))
                .unwrap()
                .contains(&FaultKind::KillAll)
        );
        assert!(
            fault_kinds(&args("durable", None))
                .unwrap()
                .contains(&FaultKind::KillAll)
        );
        assert!(fault_kinds(&args("memory", Some("kill_all"))).is_err());
        assert!(fault_kinds(&args("durable", Some("kill,nope"))).is_err());
    }
}
