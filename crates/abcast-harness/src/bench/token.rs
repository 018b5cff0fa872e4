//! `abcast bench token-latency` and `abcast bench token-loss`: seed 002's evaluation (§IV)
//! of the Accelerated Ring against the original Totem ring (`accelerated_window = 0`), on
//! this machine.
//!
//! **token-latency** (seed 002 figures 2 and 3; with `--large`, figures 5 and 7): every
//! member sends values of 1350 bytes (one value per data message, one message per
//! datagram, as the seed's 1350-byte payloads) at a fixed offered load, swept from light
//! to past saturation; per point, the payload throughput delivered (Mbit/s at each learner,
//! which is the ring's aggregate: every learner delivers every value) and the latency from
//! propose to delivery (median, p99), for the original and the accelerated ring, each with
//! Agreed and with Safe delivery (four series, one cluster run each per point and run).
//! From the curves: each series' highest throughput, the original ring's *maximum
//! sustained* throughput (the highest offered load it carries, within
//! [`SUSTAINED_FRACTION`], before its median latency more than doubles from one load step
//! to the next: the seed's "before latency begins to climb rapidly"), and the accelerated
//! ring's latency at that same offered load, as a reduction.
//!
//! **token-loss** (figures 9 to 12; figure 13): at fixed offered loads (the seed's 20 % and
//! 50 % of the original ring's maximum), every member loses a share of the *data* messages
//! on every link (0 to 25 %), never the token (`[[link_faults]]` with `lane = "data"`,
//! seed 002 §IV-A4); per point the mean latency and the mean of the worst 5 % (the seed's
//! solid and dashed lines), for both rings and both services. Figure 13: each member loses
//! 20 % of the data messages of the member `k` positions before it on the ring, k = 1 ..
//! n-1, at the lower load.
//!
//! Data travel by IP multicast (seed 002 §III-E: "IP-multicast to transmit data messages
//! and UDP unicast to pass the token"), on the loopback by default or, with `--link-mbit`,
//! on the emulated switched LAN of `lan.rs` (a network namespace per member). Latency is
//! measured at every member for every value, as the seed measured it at the receiving
//! clients: the load stamps each value's propose time into its payload
//! (`abcast node --load-stamp`, one host, one clock) and each node measures every delivery
//! against it; the proposer's own view (propose to own delivery) is reported beside it.
//!
//! Runs are interleaved (run 1 of every point, then run 2, ...) and every run is a full
//! [`cluster::run_cluster`]: agreement, loss and duplicates are checked every time.
//! Throughput is taken from the moment every member delivers (the ring forms first: a
//! member's load waits for the whole ring), latency over the whole run.

use super::lan::{self, EmulatedLan};
use super::output::{
    command_line, create_out_dir, csv_field, failure_reason, finish, note_interrupted,
    push_failed_runs, write_file,
};
use super::{BenchArgs, BenchName, checks_failed, machine, sysctl};
use crate::analysis;
use crate::cluster::{self, ClusterRun, ClusterSpec};
use crate::error::HarnessError;
use crate::format::{ms, utc_now};
use crate::plot::{self, FONT_FAMILY, PALETTE};
use abcast_core::NodeId;
use abcast_core::codec::Lane;
use abcast_node::stats::{self, median};
use abcast_runtime::linkfault::LinkFault;
use plotters::prelude::*;
use plotters::style::FontStyle;
use serde_json::json;
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

/// Ring members unless `--nodes` says otherwise.
pub const NODES_DEFAULT: u32 = 3;
/// Seed 002 §IV-A1: "all data messages contained a 1350-byte payload", one IP packet with a
/// 1500-byte MTU.
pub const VALUE_SIZE_BYTES: u64 = 1350;
/// Seed 002 §IV-A3: 8850-byte payloads in datagrams of up to 9000 bytes (`--large`).
pub const LARGE_VALUE_SIZE_BYTES: u64 = 8850;
/// `Personal_window` of both rings (seed 002 §IV-A: "Personal_windows of a few tens (e.g.
/// 20-40) of messages with Accelerated_windows of half to all of the Personal_window").
pub const PERSONAL_WINDOW: u32 = 30;
/// `Accelerated_window` of the accelerated ring; the original ring's is 0.
pub const ACCELERATED_WINDOW: u32 = 20;
/// `Global_window`: room for every member's personal window and its retransmissions.
pub const GLOBAL_WINDOW_PER_MEMBER: u32 = 2 * PERSONAL_WINDOW;
/// Values each member's load keeps proposed and not yet acknowledged: far above what a
/// sustained load needs (a few rotations' worth), so past saturation the queue, and with
/// it the latency, grows to this bound instead of the offered load being refused.
pub const WINDOW_VALUES: u64 = 20_000;
/// A load is carried when the throughput delivered is at least this share of it.
pub const SUSTAINED_FRACTION: f64 = 0.95;
/// A load whose median latency is more than this many times the lightest load's has left
/// the sustained range: latency "begins to climb rapidly" (seed 002 §IV-A1).
pub const LATENCY_CLIMB_FACTOR: f64 = 10.0;
/// Issue 18's must-show: the accelerated ring's Agreed throughput as a share of the link,
/// and its latency reduction at the original ring's highest throughput.
pub const LINK_FRACTION_TARGET: f64 = 0.90;
pub const LATENCY_REDUCTION_TARGET: f64 = 0.30;
/// Offered loads of `token-latency` as shares of the link on an emulated LAN: from light
/// to past the link.
pub const LAN_LOAD_FRACTIONS: [f64; 12] =
    [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 1.0, 1.2];
/// Offered loads of `token-latency` on the loopback, Mbit/s of payload: from light to past
/// what two cores carry (`docs/benchmarks/token/README.md`).
pub const LOOPBACK_LOADS_MBIT: [f64; 12] = [
    100.0, 200.0, 300.0, 400.0, 600.0, 800.0, 1000.0, 1200.0, 1400.0, 1600.0, 2000.0, 2500.0,
];
/// The original ring's maximum sustained Agreed throughput measured by `token-latency`
/// (`docs/benchmarks/token/README.md`), as a share of the link on an emulated LAN and in
/// Mbit/s on the loopback: `token-loss` runs at 20 % and 50 % of it, as the seed does.
pub const ORIGINAL_MAX_LAN_FRACTION: f64 = 0.75;
pub const ORIGINAL_MAX_LOOPBACK_MBIT: f64 = 900.0;
/// The seed's two loads of figures 9 to 12, as shares of the original ring's maximum.
pub const LOSS_LOAD_FRACTIONS: [f64; 2] = [0.2, 0.5];
/// Loss per member of figures 9 to 12, percent of the data messages on each link.
pub const LOSS_PCT_DEFAULT: [f64; 6] = [0.0, 5.0, 10.0, 15.0, 20.0, 25.0];
/// Figure 13: each member loses this share of one other member's data messages.
pub const DISTANCE_LOSS_PCT: f64 = 20.0;
/// Seconds after every member first delivers before throughput is counted.
const SETTLE_S: f64 = 0.5;
/// Multicast group of the benchmark; the port is drawn per run.
const GROUP_IP: Ipv4Addr = Ipv4Addr::new(239, 255, 78, 1);
/// Largest offered load and loss a flag may ask for.
const LOAD_MBIT_MAX: f64 = 100_000.0;
const LOSS_PCT_MAX: f64 = 90.0;

/// The two rings of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// The original Totem ring: every message before the token (`accelerated_window = 0`).
    Original,
    /// The Accelerated Ring: up to [`ACCELERATED_WINDOW`] messages after the token.
    Accelerated,
}

impl Variant {
    pub const ALL: [Variant; 2] = [Variant::Original, Variant::Accelerated];
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Original => "original",
            Variant::Accelerated => "accelerated",
        }
    }
    pub fn accelerated_window(self) -> u32 {
        match self {
            Variant::Original => 0,
            Variant::Accelerated => ACCELERATED_WINDOW,
        }
    }
    fn title(self) -> &'static str {
        match self {
            Variant::Original => "original ring",
            Variant::Accelerated => "Accelerated Ring",
        }
    }
}

/// The delivery service of every value of a run (`[token] service`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Agreed,
    Safe,
}

impl Service {
    pub const ALL: [Service; 2] = [Service::Agreed, Service::Safe];
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Agreed => "agreed",
            Service::Safe => "safe",
        }
    }
    fn title(self) -> &'static str {
        match self {
            Service::Agreed => "Agreed",
            Service::Safe => "Safe",
        }
    }
}

/// One configuration a run measures.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub variant: Variant,
    pub service: Service,
    /// Offered load over all members, Mbit/s of payload.
    pub offered_mbit_per_s: f64,
    /// Data messages lost on each link, percent (figures 9 to 13).
    pub loss_pct: f64,
    /// Figure 13: each member loses only the data messages of the member this many
    /// positions before it on the ring; `None` = every link loses `loss_pct`.
    pub loss_distance: Option<u32>,
}

impl Cell {
    fn label(&self) -> String {
        let mut s = format!(
            "{} {} @ {:.0} Mbit/s",
            self.variant.as_str(),
            self.service.as_str(),
            self.offered_mbit_per_s
        );
        match self.loss_distance {
            Some(k) => {
                let _ = write!(s, ", {:.0} % from k = {k}", self.loss_pct);
            }
            None if self.loss_pct > 0.0 => {
                let _ = write!(s, ", {:.0} % loss", self.loss_pct);
            }
            None => {}
        }
        s
    }
}

/// The offered loads and losses of an invocation, from the flags or the defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub nodes: u32,
    pub value_size_bytes: u64,
    /// `token-latency`: the sweep; `token-loss`: the fixed loads.
    pub loads_mbit: Vec<f64>,
    /// `token-loss` only.
    pub losses_pct: Vec<f64>,
    pub link_mbit: Option<f64>,
}

/// Parses a comma-separated list of positive numbers at most `max`, naming `flag` in the
/// error.
pub fn parse_list(flag: &str, text: &str, min: f64, max: f64) -> Result<Vec<f64>, HarnessError> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let v: f64 = part
            .trim()
            .parse()
            .map_err(|_| HarnessError::Usage(format!("{flag}: {part:?} is not a number")))?;
        if !v.is_finite() || v < min || v > max {
            return Err(HarnessError::Usage(format!(
                "{flag}: {v} is outside {min} ..= {max}"
            )));
        }
        out.push(v);
    }
    if out.is_empty() {
        return Err(HarnessError::Usage(format!("{flag}: the list is empty")));
    }
    Ok(out)
}

impl Plan {
    /// The plan of `name` under `args`; errors name the flag.
    pub fn of(name: BenchName, args: &BenchArgs) -> Result<Plan, HarnessError> {
        let nodes = args.nodes.unwrap_or(NODES_DEFAULT);
        let value_size_bytes = if args.large {
            LARGE_VALUE_SIZE_BYTES
        } else {
            VALUE_SIZE_BYTES
        };
        let link_mbit = args.link_mbit.map(f64::from);
        let loads_mbit = match &args.loads_mbit {
            Some(text) => parse_list("--loads-mbit", text, 0.001, LOAD_MBIT_MAX)?,
            None => default_loads(name, link_mbit),
        };
        let losses_pct = match (&args.losses_pct, name) {
            (Some(_), BenchName::TokenLatency) => {
                return Err(HarnessError::Usage(
                    "--loss-pct applies to `bench token-loss` only".to_string(),
                ));
            }
            (Some(text), _) => parse_list("--loss-pct", text, 0.0, LOSS_PCT_MAX)?,
            (None, BenchName::TokenLoss) => LOSS_PCT_DEFAULT.to_vec(),
            (None, _) => vec![0.0],
        };
        Ok(Plan {
            nodes,
            value_size_bytes,
            loads_mbit,
            losses_pct,
            link_mbit,
        })
    }

    /// Values per second over all members that carry `mbit` Mbit/s of payload.
    pub fn rate_values_per_s(&self, mbit: f64) -> u64 {
        ((mbit * 1e6 / 8.0 / self.value_size_bytes as f64).round() as u64).max(1)
    }
}

/// The default offered loads: `token-latency` sweeps from light to past saturation;
/// `token-loss` runs at 20 % and 50 % of the original ring's maximum.
pub fn default_loads(name: BenchName, link_mbit: Option<f64>) -> Vec<f64> {
    match (name, link_mbit) {
        (BenchName::TokenLoss, Some(l)) => LOSS_LOAD_FRACTIONS
            .iter()
            .map(|f| (f * ORIGINAL_MAX_LAN_FRACTION * l).round())
            .collect(),
        (BenchName::TokenLoss, None) => LOSS_LOAD_FRACTIONS
            .iter()
            .map(|f| (f * ORIGINAL_MAX_LOOPBACK_MBIT).round())
            .collect(),
        (_, Some(l)) => LAN_LOAD_FRACTIONS.iter().map(|f| (f * l).round()).collect(),
        (_, None) => LOOPBACK_LOADS_MBIT.to_vec(),
    }
}

/// The cells of an experiment, in the order one round runs them (both rings side by side
/// at each point).
pub fn cells(name: BenchName, plan: &Plan) -> Vec<Cell> {
    let mut out = Vec::new();
    let cell = |variant, service, offered, loss_pct, loss_distance| Cell {
        variant,
        service,
        offered_mbit_per_s: offered,
        loss_pct,
        loss_distance,
    };
    match name {
        BenchName::TokenLoss => {
            for &load in &plan.loads_mbit {
                for &loss in &plan.losses_pct {
                    for service in Service::ALL {
                        for variant in Variant::ALL {
                            out.push(cell(variant, service, load, loss, None));
                        }
                    }
                }
            }
            // Figure 13, at the lower load.
            let load = plan
                .loads_mbit
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min);
            for k in 1..plan.nodes {
                for service in Service::ALL {
                    for variant in Variant::ALL {
                        out.push(cell(variant, service, load, DISTANCE_LOSS_PCT, Some(k)));
                    }
                }
            }
        }
        _ => {
            for &load in &plan.loads_mbit {
                for service in Service::ALL {
                    for variant in Variant::ALL {
                        out.push(cell(variant, service, load, 0.0, None));
                    }
                }
            }
        }
    }
    out
}

/// The `[[link_faults]]` of a cell: data messages only, never the token.
pub fn link_faults(cell: &Cell, nodes: u32) -> Vec<LinkFault> {
    let ppm = (cell.loss_pct / 100.0 * f64::from(abcast_runtime::linkfault::MAX_LOSS_PPM))
        .round()
        .clamp(0.0, f64::from(abcast_runtime::linkfault::MAX_LOSS_PPM)) as u32;
    if ppm == 0 {
        return Vec::new();
    }
    match cell.loss_distance {
        None => vec![LinkFault::everywhere(0, ppm).on_lane(Lane::Data)],
        Some(k) => (0..nodes)
            .map(|to| {
                let from = (to + nodes - k % nodes) % nodes;
                LinkFault::link(NodeId(from), NodeId(to), 0, ppm).on_lane(Lane::Data)
            })
            .filter(|r| r.from != r.to)
            .collect(),
    }
}

/// A fresh random number from the OS-seeded hasher (no dependency).
fn random_u64(salt: u64) -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(salt);
    h.write_u64(u64::from(std::process::id()));
    h.finish()
}

/// The config edits of one run of `cell`: the token ring with the cell's windows and
/// service, data by IP multicast, the cell's loss. Each run gets its own cluster id and
/// group port, so runs (or benches) at once neither mix datagrams nor accept each other's.
pub fn config_edits(
    cell: &Cell,
    plan: &Plan,
    salt: u64,
    on_lan: bool,
) -> Vec<(String, toml::Value)> {
    let int = |v: u64| toml::Value::Integer(i64::try_from(v).unwrap_or(i64::MAX));
    let r = random_u64(salt);
    let port = 40_000 + (r % 10_000) as u16;
    let mut edits = vec![
        ("protocol".to_string(), toml::Value::String("token".into())),
        ("cluster_id".to_string(), int((r >> 32) + 2)),
        (
            "multicast.group".to_string(),
            toml::Value::String(SocketAddrV4::new(GROUP_IP, port).to_string()),
        ),
        (
            "token.personal_window".to_string(),
            int(u64::from(PERSONAL_WINDOW)),
        ),
        (
            "token.accelerated_window".to_string(),
            int(u64::from(cell.variant.accelerated_window())),
        ),
        (
            "token.global_window".to_string(),
            int(u64::from(GLOBAL_WINDOW_PER_MEMBER) * u64::from(plan.nodes)),
        ),
        (
            "token.max_message_bytes".to_string(),
            int(plan.value_size_bytes),
        ),
        (
            "token.service".to_string(),
            toml::Value::String(cell.service.as_str().into()),
        ),
    ];
    if on_lan {
        // One config for every node: each namespace's route to the group picks its
        // interface.
        edits.push((
            "multicast.interface".to_string(),
            toml::Value::String(Ipv4Addr::UNSPECIFIED.to_string()),
        ));
    }
    let faults = link_faults(cell, plan.nodes);
    if !faults.is_empty() {
        edits.push((
            "link_faults".to_string(),
            abcast_node::nodeconfig::link_faults_toml(&faults),
        ));
    }
    edits
}

/// What one run of one cell measured.
#[derive(Debug, Clone)]
pub struct CellRun {
    pub run: u32,
    /// Median over the learners of each one's delivery rate.
    pub values_per_s: f64,
    pub mbit_per_s: f64,
    /// Propose to delivery of every value at every member (its proposer's stamp against
    /// each member's clock, one host), as seed 002 measured at every receiver.
    pub latency: LatencyProfile,
    /// Propose to delivery at the proposer only.
    pub latency_proposer: LatencyProfile,
    /// Mean over the members; 100 = one core.
    pub cpu_pct_mean: f64,
    pub ok: bool,
    /// Why the run could not complete (then it has no figures).
    pub error: Option<String>,
}

/// A latency distribution, merged over every member.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatencyProfile {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    /// The mean of the worst (highest) 5 % (seed 002 figures 9 to 12, dashed lines).
    pub worst5_mean_us: f64,
}

impl LatencyProfile {
    /// The profile of a histogram of latencies in microseconds; `None` when it is empty.
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Option<LatencyProfile> {
        let count = h.len();
        if count == 0 {
            return None;
        }
        // The worst 5 %: walk the recorded values from the top until that many are summed.
        let worst_n = count.div_ceil(20);
        let mut recorded: Vec<(u64, u64)> = h
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
        recorded.reverse();
        let (mut taken, mut sum) = (0u64, 0f64);
        for (value, n) in recorded {
            let take = n.min(worst_n - taken);
            sum += value as f64 * take as f64;
            taken += take;
            if taken >= worst_n {
                break;
            }
        }
        Some(LatencyProfile {
            count,
            mean_us: h.mean(),
            p50_us: h.value_at_quantile(0.5) as f64,
            p95_us: h.value_at_quantile(0.95) as f64,
            p99_us: h.value_at_quantile(0.99) as f64,
            worst5_mean_us: sum / worst_n.max(1) as f64,
        })
    }
}

/// The merged latency histogram of a run, of the histogram field `pick` names: the last
/// line of every incarnation covers that incarnation's whole life.
fn latency_profile(
    run: &ClusterRun,
    pick: impl Fn(&stats::StatsLine) -> Option<&str>,
) -> Option<LatencyProfile> {
    let mut merged: Option<hdrhistogram::Histogram<u64>> = None;
    for line in run
        .nodes
        .iter()
        .flat_map(|r| r.incarnations.iter().filter_map(|i| i.last()))
    {
        let Some(h) = pick(line).and_then(|b| stats::decode_histogram(b).ok()) else {
            continue;
        };
        match merged.as_mut() {
            Some(m) => m.add(&h).ok()?,
            None => merged = Some(h),
        }
    }
    LatencyProfile::of(merged.as_ref()?)
}

/// When every member has delivered something: the ring formed and the load runs. The
/// seconds since the run's start, or `None` when some member never delivered.
pub fn ring_ready_s(run: &ClusterRun) -> Option<f64> {
    let mut ready: f64 = 0.0;
    for r in &run.nodes {
        let first = r
            .incarnations
            .iter()
            .flat_map(|i| i.samples.iter())
            .find(|s| s.line.delivered_values > 0)?;
        ready = ready.max(first.at_s);
    }
    Some(ready)
}

/// The throughput window's start: once the ring runs (plus a settling half second), or
/// the usual warm-up when that leaves less than a second of load.
fn warmup_of(run: &ClusterRun) -> f64 {
    let usual = analysis::warmup_s(run.spec.duration_s);
    match ring_ready_s(run) {
        Some(t) if t + SETTLE_S + 1.0 <= run.stop_at_s => (t + SETTLE_S).max(usual),
        _ => usual,
    }
}

/// The figures of one run of a cell.
fn measure(spec: &ClusterSpec, run: u32) -> Result<(CellRun, bool), HarnessError> {
    let cluster_run = cluster::run_cluster(spec)?;
    let r = analysis::analyse_from(&cluster_run, warmup_of(&cluster_run));
    if let Some(why) = checks_failed(&r) {
        eprintln!("{}: checks FAILED: {why}", spec.label);
    }
    let cpu: Vec<f64> = r.per_node.iter().map(|n| n.cpu_pct).collect();
    let latency_proposer =
        latency_profile(&cluster_run, |l| l.lat_hist.as_deref()).unwrap_or(LatencyProfile {
            count: r.latency.count,
            mean_us: f64::NAN,
            p50_us: r.latency.p50_us,
            p95_us: f64::NAN,
            p99_us: r.latency.p99_us,
            worst5_mean_us: f64::NAN,
        });
    let latency =
        latency_profile(&cluster_run, |l| l.lat_all_hist.as_deref()).unwrap_or(latency_proposer);
    Ok((
        CellRun {
            run,
            values_per_s: r.values_per_s,
            mbit_per_s: r.mbit_per_s,
            latency,
            latency_proposer,
            cpu_pct_mean: cpu.iter().sum::<f64>() / cpu.len().max(1) as f64,
            ok: r.ok(),
            error: None,
        },
        cluster_run.interrupted,
    ))
}

fn failed_run(run: u32, e: &HarnessError) -> CellRun {
    let none = LatencyProfile {
        count: 0,
        mean_us: f64::NAN,
        p50_us: f64::NAN,
        p95_us: f64::NAN,
        p99_us: f64::NAN,
        worst5_mean_us: f64::NAN,
    };
    CellRun {
        run,
        values_per_s: f64::NAN,
        mbit_per_s: f64::NAN,
        latency: none,
        latency_proposer: none,
        cpu_pct_mean: f64::NAN,
        ok: false,
        error: Some(e.to_string().lines().next().unwrap_or("").to_string()),
    }
}

/// All runs of one cell.
#[derive(Debug, Clone)]
pub struct CellResult {
    pub cell: Cell,
    pub runs: Vec<CellRun>,
}

impl CellResult {
    /// The median of a figure over the runs that completed.
    pub fn med(&self, f: impl Fn(&CellRun) -> f64) -> Option<f64> {
        let v: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.error.is_none())
            .map(f)
            .collect();
        median(&v)
    }
    fn runs_ok(&self) -> usize {
        self.runs.iter().filter(|r| r.ok).count()
    }
}

/// One point of a latency-throughput curve: medians over the runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CurvePoint {
    pub offered_mbit_per_s: f64,
    pub mbit_per_s: f64,
    /// At every member (see [`CellRun::latency`]).
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    /// At the proposer only.
    pub latency_us_p50_proposer: f64,
}

/// The curve of one ring and service without loss, by offered load.
pub fn curve(results: &[CellResult], variant: Variant, service: Service) -> Vec<CurvePoint> {
    let mut v: Vec<CurvePoint> = results
        .iter()
        .filter(|r| {
            r.cell.variant == variant
                && r.cell.service == service
                && r.cell.loss_pct == 0.0
                && r.cell.loss_distance.is_none()
        })
        .filter_map(|r| {
            Some(CurvePoint {
                offered_mbit_per_s: r.cell.offered_mbit_per_s,
                mbit_per_s: r.med(|x| x.mbit_per_s)?,
                latency_us_p50: r.med(|x| x.latency.p50_us)?,
                latency_us_p99: r.med(|x| x.latency.p99_us)?,
                latency_us_p50_proposer: r.med(|x| x.latency_proposer.p50_us)?,
            })
        })
        .filter(|p| p.mbit_per_s.is_finite() && p.latency_us_p50.is_finite())
        .collect();
    v.sort_by(|a, b| a.offered_mbit_per_s.total_cmp(&b.offered_mbit_per_s));
    v
}

/// The highest throughput a curve delivered.
pub fn peak_mbit(curve: &[CurvePoint]) -> Option<f64> {
    curve.iter().map(|p| p.mbit_per_s).reduce(f64::max)
}

/// The maximum sustained point of a curve: walking up the offered loads, the last point
/// that delivers at least [`SUSTAINED_FRACTION`] of its load with a median latency at most
/// [`LATENCY_CLIMB_FACTOR`] times the lightest load's (a queue that grows without bound
/// multiplies it by hundreds; below saturation it moves by fractions of a millisecond,
/// which on a LAN of microsecond hops can still be several times a light load's). `None`
/// when even the lightest load is not carried.
pub fn sustained_max(curve: &[CurvePoint]) -> Option<CurvePoint> {
    let mut best: Option<CurvePoint> = None;
    let floor = curve.first().map_or(0.0, |p| p.latency_us_p50);
    for p in curve {
        let carried = p.mbit_per_s >= SUSTAINED_FRACTION * p.offered_mbit_per_s;
        let calm = p.latency_us_p50 <= LATENCY_CLIMB_FACTOR * floor;
        if !(carried && calm) {
            break;
        }
        best = Some(*p);
    }
    best
}

/// The accelerated ring's latency at the original ring's maximum sustained point, for one
/// service.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reduction {
    /// The original ring's maximum sustained point.
    pub original: CurvePoint,
    /// The accelerated ring at the same offered load.
    pub accelerated: CurvePoint,
    /// 1 - accelerated / original median latency: 0.45 = 45 % lower.
    pub reduction: f64,
    /// The same at the proposer only.
    pub reduction_at_proposer: f64,
}

pub fn reduction_at_original_max(
    original: &[CurvePoint],
    accelerated: &[CurvePoint],
) -> Option<Reduction> {
    let o = sustained_max(original)?;
    let a = accelerated
        .iter()
        .find(|a| (a.offered_mbit_per_s - o.offered_mbit_per_s).abs() < 1e-9)?;
    (o.latency_us_p50 > 0.0).then(|| Reduction {
        original: o,
        accelerated: *a,
        reduction: 1.0 - a.latency_us_p50 / o.latency_us_p50,
        reduction_at_proposer: 1.0 - a.latency_us_p50_proposer / o.latency_us_p50_proposer,
    })
}

/// The headline figures of `token-latency` for one service.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Headline {
    pub accelerated_mbit_per_s_max: Option<f64>,
    pub original_mbit_per_s_max: Option<f64>,
    pub reduction: Option<Reduction>,
}

pub fn headline(results: &[CellResult], service: Service) -> Headline {
    let o = curve(results, Variant::Original, service);
    let a = curve(results, Variant::Accelerated, service);
    Headline {
        accelerated_mbit_per_s_max: peak_mbit(&a),
        original_mbit_per_s_max: peak_mbit(&o),
        reduction: reduction_at_original_max(&o, &a),
    }
}

// ----- running ----------------------------------------------------------------------------

/// Most members of a ring this bench runs (the machine has few cores; every member costs
/// one).
pub const NODES_MAX: u32 = 16;

/// `abcast bench token-latency` and `token-loss`: returns the exit status (0 when every
/// run passed its checks).
pub fn run(name: BenchName, args: &BenchArgs) -> Result<u8, HarnessError> {
    let plan = Plan::of(name, args)?;
    if !(2..=NODES_MAX).contains(&plan.nodes) {
        return Err(HarnessError::Usage(format!(
            "--nodes {}: a token ring of 2 to {NODES_MAX} members",
            plan.nodes
        )));
    }
    let window = match args.window_values.unwrap_or(WINDOW_VALUES) {
        0 => None,
        w => Some(w),
    };
    let (stamp, date) = utc_now();
    let out = create_out_dir(args, name.as_str(), &stamp)?;
    let load_before = loadavg();
    // Removed when dropped, at the end of this function: it must outlive every run.
    let lan = emulated_lan(args, plan.nodes)?;
    let cells = cells(name, &plan);
    let (results, interrupted) = run_cells(args, &plan, window, &cells, lan.as_ref())?;
    note_interrupted(interrupted);
    let load_after = loadavg();
    let setup = Setup {
        name,
        plan: &plan,
        window,
        date: &date,
        load: (load_before, load_after),
    };
    write_csv(&out.join("results.csv"), args, &setup, &results)?;
    let drawn = match name {
        BenchName::TokenLoss => write_loss_plot(&out.join("plot.png"), &setup, &results),
        _ => write_latency_plot(&out.join("plot.png"), &setup, &results),
    };
    if let Err(e) = drawn {
        eprintln!("{e}");
    }
    write_file(&out.join("summary.md"), &summary(args, &setup, &results))?;
    let all_ok = results.iter().all(|r| r.runs_ok() == r.runs.len());
    finish(
        args,
        || json_line(args, &setup, &results, &out, all_ok),
        || terminal_text(&setup, &results, &out),
        all_ok,
    )
}

/// What every output of an invocation names.
struct Setup<'a> {
    name: BenchName,
    plan: &'a Plan,
    window: Option<u64>,
    date: &'a str,
    /// `/proc/loadavg` before and after the runs: other programs share this machine.
    load: (String, String),
}

impl Setup<'_> {
    fn network(&self) -> String {
        match self.plan.link_mbit {
            Some(m) => format!("emulated {m:.0} Mbit/s LAN"),
            None => "loopback".to_string(),
        }
    }
    fn figure(&self) -> &'static str {
        match (
            self.name,
            self.plan.value_size_bytes == LARGE_VALUE_SIZE_BYTES,
        ) {
            (BenchName::TokenLoss, _) => "seed 002 fig 9-13",
            (_, true) => "seed 002 fig 5, 7",
            (_, false) => "seed 002 fig 2, 3",
        }
    }
}

/// The 1-, 5- and 15-minute load averages, as `/proc/loadavg` has them.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_string())
}

/// With `--link-mbit`, the emulated LAN every member runs on; `None` on the loopback.
fn emulated_lan(args: &BenchArgs, nodes: u32) -> Result<Option<EmulatedLan>, HarnessError> {
    let Some(mbit) = args.link_mbit else {
        return Ok(None);
    };
    let tag = format!("t{:05x}", random_u64(13) % 0x10_0000);
    let l = EmulatedLan::create(&tag, nodes as usize, mbit).map_err(HarnessError::Runtime)?;
    eprintln!(
        "emulated LAN: {nodes} nodes in network namespaces abcast-{tag}-n*, links of {mbit} \
         Mbit/s each way (tc tbf), {} byte frames, bridge at {}",
        lan::LAN_MTU_BYTES,
        l.gateway
    );
    Ok(Some(l))
}

/// Runs every cell `--runs` times, interleaved (round r runs every cell once), until
/// Ctrl-C; returns the runs and whether Ctrl-C stopped them.
fn run_cells(
    args: &BenchArgs,
    plan: &Plan,
    window: Option<u64>,
    cells: &[Cell],
    lan: Option<&EmulatedLan>,
) -> Result<(Vec<CellResult>, bool), HarnessError> {
    let mut results: Vec<CellResult> = cells
        .iter()
        .map(|c| CellResult {
            cell: c.clone(),
            runs: Vec::new(),
        })
        .collect();
    let total = results.len() as u32 * args.runs;
    let mut done = 0u32;
    let mut interrupted = false;
    'runs: for run in 1..=args.runs {
        for cr in &mut results {
            if interrupted {
                break 'runs;
            }
            done += 1;
            let label = format!("[{done}/{total}] {} run {run}", cr.cell.label());
            let spec = ClusterSpec {
                nodes: plan.nodes,
                value_size_bytes: plan.value_size_bytes,
                duration_s: args.duration_s,
                rate_values_per_s: plan.rate_values_per_s(cr.cell.offered_mbit_per_s),
                window_values: window,
                kill: false,
                config_edits: config_edits(&cr.cell, plan, u64::from(done), lan.is_some()),
                keep_dir: false,
                progress: !args.json,
                label: label.clone(),
                program: None,
                load_rates: None,
                learners_differ: false,
                placement: lan.map_or_else(Vec::new, |l| {
                    l.nodes
                        .iter()
                        .take(plan.nodes as usize)
                        .map(|n| cluster::NodePlace {
                            netns_path: n.netns_path(),
                            addr: n.addr,
                        })
                        .collect()
                }),
                load_at_leader: false,
                // Latency at every member, as seed 002 measured it (at the receivers).
                stamp_values: true,
            };
            let figures = match measure(&spec, run) {
                Ok((r, stop)) => {
                    interrupted = stop;
                    r
                }
                // The very first run failing to start means the harness or the node is
                // broken: stop instead of failing every point the same way.
                Err(e) if done == 1 => return Err(e),
                Err(e) => {
                    eprintln!("{label}: run failed: {e}");
                    failed_run(run, &e)
                }
            };
            if figures.error.is_none() {
                eprintln!(
                    "{label}: {:.0} Mbit/s delivered, latency p50 {}, mean {}, worst 5 % {}, \
                     CPU {:.0} % per member",
                    figures.mbit_per_s,
                    ms(figures.latency.p50_us),
                    ms(figures.latency.mean_us),
                    ms(figures.latency.worst5_mean_us),
                    figures.cpu_pct_mean,
                );
            }
            cr.runs.push(figures);
        }
    }
    Ok((results, interrupted))
}

// ----- output -----------------------------------------------------------------------------

fn write_csv(
    path: &Path,
    args: &BenchArgs,
    setup: &Setup<'_>,
    results: &[CellResult],
) -> Result<(), HarnessError> {
    let mut s = String::from(
        "experiment,variant,service,offered_mbit_per_s,loss_pct,loss_distance,run,nodes,\
         value_size_bytes,personal_window,accelerated_window,window_values,duration_s,network,\
         values_per_s,mbit_per_s,latency_us_mean,latency_us_p50,latency_us_p95,latency_us_p99,\
         latency_us_worst5_mean,latency_count,latency_us_p50_proposer,latency_us_p99_proposer,\
         cpu_pct_mean,ok,error\n",
    );
    for cr in results {
        let c = &cr.cell;
        for r in &cr.runs {
            let fig = |v: f64| {
                if r.error.is_some() || !v.is_finite() {
                    String::new()
                } else {
                    format!("{v:.3}")
                }
            };
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                setup.name.as_str(),
                c.variant.as_str(),
                c.service.as_str(),
                c.offered_mbit_per_s,
                c.loss_pct,
                c.loss_distance.map_or(String::new(), |k| k.to_string()),
                r.run,
                setup.plan.nodes,
                setup.plan.value_size_bytes,
                PERSONAL_WINDOW,
                c.variant.accelerated_window(),
                setup.window.map_or(String::new(), |w| w.to_string()),
                args.duration_s,
                csv_field(&setup.network()),
                fig(r.values_per_s),
                fig(r.mbit_per_s),
                fig(r.latency.mean_us),
                fig(r.latency.p50_us),
                fig(r.latency.p95_us),
                fig(r.latency.p99_us),
                fig(r.latency.worst5_mean_us),
                r.latency.count,
                fig(r.latency_proposer.p50_us),
                fig(r.latency_proposer.p99_us),
                fig(r.cpu_pct_mean),
                r.ok,
                csv_field(r.error.as_deref().unwrap_or("")),
            );
        }
    }
    write_file(path, &s)
}

fn perr(e: impl std::fmt::Display) -> String {
    format!("cannot draw the plot: {e}")
}

fn color_of(variant: Variant) -> RGBColor {
    match variant {
        Variant::Original => PALETTE[1],
        Variant::Accelerated => PALETTE[0],
    }
}

/// The y range of a log axis over `values` (milliseconds), padded, never empty.
fn log_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return 0.01..10.0;
    }
    (lo / 1.6)..(hi * 1.6).max(lo * 4.0)
}

/// Seed 002 figures 2 and 3 (5 and 7): median latency against the throughput delivered,
/// one panel per service, one curve per ring (p99 dashed).
fn write_latency_plot(
    path: &Path,
    setup: &Setup<'_>,
    results: &[CellResult],
) -> Result<(), String> {
    plot::ensure_font()?;
    let root = BitMapBackend::new(path, (1100, 1000)).into_drawing_area();
    root.fill(&WHITE).map_err(perr)?;
    let root = root
        .titled(
            &format!(
                "Original vs Accelerated Ring: latency vs throughput, {} members, {} B values, \
                 {} (cf. {})",
                setup.plan.nodes,
                setup.plan.value_size_bytes,
                setup.network(),
                setup.figure()
            ),
            (FONT_FAMILY, 18).into_font().style(FontStyle::Bold),
        )
        .map_err(perr)?;
    let panels = root.split_evenly((2, 1));
    let x_max = results
        .iter()
        .filter_map(|r| r.med(|x| x.mbit_per_s))
        .chain(setup.plan.link_mbit)
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max)
        * 1.08;
    for (service, area) in Service::ALL.into_iter().zip(panels.iter()) {
        let curves: Vec<(Variant, Vec<CurvePoint>)> = Variant::ALL
            .into_iter()
            .map(|v| (v, curve(results, v, service)))
            .collect();
        let y = log_range(curves.iter().flat_map(|(_, c)| {
            c.iter()
                .flat_map(|p| [p.latency_us_p50 / 1000.0, p.latency_us_p99 / 1000.0])
        }));
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "{} delivery: median latency (solid) and p99 (dashed), propose to \
                     delivery at every member",
                    service.title()
                ),
                (FONT_FAMILY, 17),
            )
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(75)
            .build_cartesian_2d(0.0..x_max, y.clone().log_scale())
            .map_err(perr)?;
        chart
            .configure_mesh()
            .x_desc("throughput delivered (Mbit/s of payload, all members together)")
            .y_desc("latency (ms, log scale)")
            .y_label_formatter(&|v| {
                if *v >= 10.0 {
                    format!("{v:.0}")
                } else if *v >= 1.0 {
                    format!("{v:.1}")
                } else {
                    format!("{v:.2}")
                }
            })
            .x_label_formatter(&|v| format!("{v:.0}"))
            .label_style((FONT_FAMILY, 14))
            .axis_desc_style((FONT_FAMILY, 15))
            .draw()
            .map_err(perr)?;
        for (variant, c) in &curves {
            let color = color_of(*variant);
            let p50: Vec<(f64, f64)> = c
                .iter()
                .map(|p| (p.mbit_per_s, p.latency_us_p50 / 1000.0))
                .collect();
            let p99: Vec<(f64, f64)> = c
                .iter()
                .map(|p| (p.mbit_per_s, p.latency_us_p99 / 1000.0))
                .collect();
            chart
                .draw_series(LineSeries::new(p50.clone(), color.stroke_width(3)))
                .map_err(perr)?
                .label(format!(
                    "{} (accelerated_window {})",
                    variant.title(),
                    variant.accelerated_window()
                ))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                });
            chart
                .draw_series(p50.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(perr)?;
            chart
                .draw_series(DashedLineSeries::new(p99, 6, 4, color.stroke_width(1)))
                .map_err(perr)?;
        }
        if let Some(link) = setup.plan.link_mbit {
            let grey = RGBColor(120, 120, 120);
            chart
                .draw_series(DashedLineSeries::new(
                    [(link, y.start), (link, y.end)],
                    4,
                    4,
                    grey.stroke_width(1),
                ))
                .map_err(perr)?
                .label("link rate")
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], grey.stroke_width(1))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT_FAMILY, 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(perr)?;
    }
    root.present().map_err(perr)?;
    Ok(())
}

/// Which cells a panel of the loss plot draws, and the x of each.
type CellPick = Box<dyn Fn(&Cell) -> Option<f64>>;
/// One line of the loss plot: (x, mean, worst 5 %) per point, in milliseconds.
type LossLine = Vec<(f64, f64, f64)>;

/// One line of the loss plot: (x, mean, worst 5 %) per point, in milliseconds.
fn loss_line(
    results: &[CellResult],
    variant: Variant,
    service: Service,
    pick: &dyn Fn(&Cell) -> Option<f64>,
) -> LossLine {
    let mut v: LossLine = results
        .iter()
        .filter(|r| r.cell.variant == variant && r.cell.service == service)
        .filter_map(|r| {
            Some((
                pick(&r.cell)?,
                r.med(|x| x.latency.mean_us)? / 1000.0,
                r.med(|x| x.latency.worst5_mean_us)? / 1000.0,
            ))
        })
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// Seed 002 figures 9 to 12 (one panel per load: latency against loss) and figure 13
/// (latency against the distance to the member a member loses from).
fn write_loss_plot(path: &Path, setup: &Setup<'_>, results: &[CellResult]) -> Result<(), String> {
    plot::ensure_font()?;
    let loads = &setup.plan.loads_mbit;
    let low = loads.iter().copied().fold(f64::INFINITY, f64::min);
    let has_distance = results.iter().any(|r| r.cell.loss_distance.is_some());
    let n_panels = loads.len() + usize::from(has_distance);
    let root = BitMapBackend::new(path, (1100, 420 * n_panels as u32 + 40)).into_drawing_area();
    root.fill(&WHITE).map_err(perr)?;
    let root = root
        .titled(
            &format!(
                "Original vs Accelerated Ring under data-message loss, {} members, {} (cf. {})",
                setup.plan.nodes,
                setup.network(),
                setup.figure()
            ),
            (FONT_FAMILY, 18).into_font().style(FontStyle::Bold),
        )
        .map_err(perr)?;
    let panels = root.split_evenly((n_panels, 1));
    let mut specs: Vec<(String, String, CellPick)> = loads
        .iter()
        .map(|&load| {
            let pick: CellPick = Box::new(move |c: &Cell| {
                (c.loss_distance.is_none() && c.offered_mbit_per_s == load).then_some(c.loss_pct)
            });
            (
                format!("{load:.0} Mbit/s offered: mean latency (solid) and mean of the worst 5 % (dashed)"),
                "data messages lost per member and link (%)".to_string(),
                pick,
            )
        })
        .collect();
    if has_distance {
        specs.push((
            format!(
                "{low:.0} Mbit/s, each member loses {DISTANCE_LOSS_PCT:.0} % of the data of the \
                 member k before it (fig 13)"
            ),
            "k: ring positions between the sender and the member that loses".to_string(),
            Box::new(|c: &Cell| c.loss_distance.map(f64::from)),
        ));
    }
    for ((caption, x_desc, pick), area) in specs.iter().zip(panels.iter()) {
        let lines: Vec<(Variant, Service, LossLine)> = Service::ALL
            .into_iter()
            .flat_map(|s| Variant::ALL.into_iter().map(move |v| (v, s)))
            .map(|(v, s)| (v, s, loss_line(results, v, s, pick.as_ref())))
            .collect();
        let mut xs: Vec<f64> = lines
            .iter()
            .flat_map(|(_, _, l)| l.iter().map(|p| p.0))
            .collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let Some(x_axis) = plot::KeyedAxis::around(&xs) else {
            continue;
        };
        let y = log_range(
            lines
                .iter()
                .flat_map(|(_, _, l)| l.iter().flat_map(|p| [p.1, p.2])),
        );
        let mut chart = ChartBuilder::on(area)
            .caption(caption, (FONT_FAMILY, 16))
            .margin(10)
            .x_label_area_size(42)
            .y_label_area_size(70)
            .build_cartesian_2d(x_axis, y.log_scale())
            .map_err(perr)?;
        chart
            .configure_mesh()
            .x_desc(x_desc.as_str())
            .y_desc("latency (ms, log)")
            .y_label_formatter(&|v| format!("{v:.2}"))
            .x_label_formatter(&|v| format!("{v}"))
            .label_style((FONT_FAMILY, 13))
            .axis_desc_style((FONT_FAMILY, 14))
            .draw()
            .map_err(perr)?;
        for (variant, service, l) in &lines {
            let base = color_of(*variant);
            // Safe in a darker shade of the ring's colour.
            let color = match service {
                Service::Agreed => base,
                Service::Safe => RGBColor(base.0 / 2, base.1 / 2, base.2 / 2),
            };
            let mean: Vec<(f64, f64)> = l.iter().map(|p| (p.0, p.1)).collect();
            let worst: Vec<(f64, f64)> = l.iter().map(|p| (p.0, p.2)).collect();
            chart
                .draw_series(LineSeries::new(mean.clone(), color.stroke_width(2)))
                .map_err(perr)?
                .label(format!("{} {}", variant.title(), service.title()))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
                });
            chart
                .draw_series(mean.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(perr)?;
            chart
                .draw_series(DashedLineSeries::new(worst, 6, 4, color.stroke_width(1)))
                .map_err(perr)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT_FAMILY, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(perr)?;
    }
    root.present().map_err(perr)?;
    Ok(())
}

fn pct(v: Option<f64>) -> String {
    v.map_or("n/a".to_string(), |v| format!("{:.0} %", v * 100.0))
}

fn mbit(v: Option<f64>) -> String {
    v.map_or("n/a".to_string(), |v| format!("{v:.0} Mbit/s"))
}

/// The medians table of `token-latency`, one row per offered load.
fn latency_table(results: &[CellResult]) -> String {
    let mut s = String::new();
    for service in Service::ALL {
        let _ = writeln!(s, "\n### {} delivery\n", service.title());
        let _ = writeln!(
            s,
            "| offered | original: delivered | p50 | p99 | p50 at proposer | Accelerated: delivered | p50 | p99 | p50 at proposer | p50 change | runs ok |"
        );
        let _ = writeln!(
            s,
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        let find = |v: Variant, load: f64| {
            results.iter().find(|r| {
                r.cell.variant == v
                    && r.cell.service == service
                    && r.cell.offered_mbit_per_s == load
                    && r.cell.loss_pct == 0.0
                    && r.cell.loss_distance.is_none()
            })
        };
        let mut loads: Vec<f64> = results
            .iter()
            .filter(|r| r.cell.service == service)
            .map(|r| r.cell.offered_mbit_per_s)
            .collect();
        loads.sort_by(f64::total_cmp);
        loads.dedup();
        for load in loads {
            let (o, a) = (
                find(Variant::Original, load),
                find(Variant::Accelerated, load),
            );
            let cell = |r: Option<&CellResult>,
                        f: &dyn Fn(&CellRun) -> f64,
                        fmt: &dyn Fn(f64) -> String| {
                r.and_then(|r| r.med(f)).map_or("failed".to_string(), fmt)
            };
            let change = match (
                o.and_then(|r| r.med(|x| x.latency.p50_us)),
                a.and_then(|r| r.med(|x| x.latency.p50_us)),
            ) {
                (Some(o), Some(a)) if o > 0.0 => format!("{:+.0} %", (a / o - 1.0) * 100.0),
                _ => "-".to_string(),
            };
            let ok = |r: Option<&CellResult>| {
                r.map_or("0/0".into(), |r| {
                    format!("{}/{}", r.runs_ok(), r.runs.len())
                })
            };
            let _ = writeln!(
                s,
                "| {load:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {change} | {} + {} |",
                cell(o, &|x| x.mbit_per_s, &|v| format!("{v:.0}")),
                cell(o, &|x| x.latency.p50_us, &ms),
                cell(o, &|x| x.latency.p99_us, &ms),
                cell(o, &|x| x.latency_proposer.p50_us, &ms),
                cell(a, &|x| x.mbit_per_s, &|v| format!("{v:.0}")),
                cell(a, &|x| x.latency.p50_us, &ms),
                cell(a, &|x| x.latency.p99_us, &ms),
                cell(a, &|x| x.latency_proposer.p50_us, &ms),
                ok(o),
                ok(a),
            );
        }
    }
    s
}

/// What the headline figures say, one bullet per service, and the must-show on a LAN.
fn latency_headline_text(setup: &Setup<'_>, results: &[CellResult]) -> String {
    let mut s = String::new();
    for service in Service::ALL {
        let h = headline(results, service);
        let _ = write!(
            s,
            "- {}: highest throughput {} (Accelerated Ring) and {} (original).",
            service.title(),
            mbit(h.accelerated_mbit_per_s_max),
            mbit(h.original_mbit_per_s_max)
        );
        match h.reduction {
            Some(r) => {
                let _ = writeln!(
                    s,
                    " The original ring's maximum sustained load is {:.0} Mbit/s offered \
                     ({:.0} delivered, p50 {}); there the Accelerated Ring's p50 is {}: \
                     **{}** (at the proposer only: {} against {}, {}).",
                    r.original.offered_mbit_per_s,
                    r.original.mbit_per_s,
                    ms(r.original.latency_us_p50),
                    ms(r.accelerated.latency_us_p50),
                    change_text(r.reduction),
                    ms(r.accelerated.latency_us_p50_proposer),
                    ms(r.original.latency_us_p50_proposer),
                    change_text(r.reduction_at_proposer),
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    " No latency reduction: the original ring carried none of the loads, or \
                     the accelerated ring's run at its maximum failed."
                );
            }
        }
    }
    let agreed = headline(results, Service::Agreed);
    if let Some(link) = setup.plan.link_mbit {
        let frac = agreed.accelerated_mbit_per_s_max.map(|m| m / link);
        let red = agreed.reduction.map(|r| r.reduction);
        let change = red.map_or("not measured".to_string(), change_text);
        let _ = writeln!(
            s,
            "\nMust-show (issue 18, on the emulated {link:.0} Mbit/s LAN, Agreed): the \
             Accelerated Ring reaches {} of the link (target {:.0} %: {}); at the original \
             ring's highest sustained throughput its median latency is {change} (target: \
             {:.0} % lower: {}). Seed 002: 920 Mbit/s and 45 % lower on 1 GbE. With {} \
             members the link into each member carries the others' data, {}/{} of the \
             aggregate, so the aggregate may pass the link rate (seed 002's 8 daemons: 7/8).",
            pct(frac),
            LINK_FRACTION_TARGET * 100.0,
            verdict(frac.map(|f| f >= LINK_FRACTION_TARGET)),
            LATENCY_REDUCTION_TARGET * 100.0,
            verdict(red.map(|r| r >= LATENCY_REDUCTION_TARGET)),
            setup.plan.nodes,
            setup.plan.nodes.saturating_sub(1),
            setup.plan.nodes,
        );
    }
    s
}

/// A reduction as words: "45 % lower" or "20 % higher".
fn change_text(reduction: f64) -> String {
    format!(
        "{:.0} % {}",
        reduction.abs() * 100.0,
        if reduction >= 0.0 { "lower" } else { "higher" }
    )
}

fn verdict(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "not met",
        None => "not measured",
    }
}

/// The medians of `token-loss`, one table per load and one for figure 13.
fn loss_table(setup: &Setup<'_>, results: &[CellResult]) -> String {
    let mut s = String::new();
    let series: Vec<(Variant, Service)> = Service::ALL
        .into_iter()
        .flat_map(|sv| Variant::ALL.into_iter().map(move |v| (v, sv)))
        .collect();
    let header = |s: &mut String, x: &str| {
        let _ = write!(s, "| {x} |");
        for (v, sv) in &series {
            let _ = write!(s, " {} {} mean / worst 5 % |", v.as_str(), sv.as_str());
        }
        let _ = writeln!(s, " runs ok |");
        let _ = writeln!(s, "| ---: |{} ---: |", " ---: |".repeat(series.len()));
    };
    let row = |s: &mut String, x: String, pick: &dyn Fn(&Cell) -> bool| {
        let _ = write!(s, "| {x} |");
        let (mut ok, mut all) = (0, 0);
        for (v, sv) in &series {
            let r = results
                .iter()
                .find(|r| r.cell.variant == *v && r.cell.service == *sv && pick(&r.cell));
            let text = r
                .and_then(|r| {
                    Some(format!(
                        "{} / {}",
                        ms(r.med(|x| x.latency.mean_us)?),
                        ms(r.med(|x| x.latency.worst5_mean_us)?)
                    ))
                })
                .unwrap_or_else(|| "failed".to_string());
            if let Some(r) = r {
                ok += r.runs_ok();
                all += r.runs.len();
            }
            let _ = write!(s, " {text} |");
        }
        let _ = writeln!(s, " {ok}/{all} |");
    };
    for &load in &setup.plan.loads_mbit {
        let _ = writeln!(s, "\n### {load:.0} Mbit/s offered\n");
        header(&mut s, "loss");
        for &loss in &setup.plan.losses_pct {
            row(&mut s, format!("{loss:.0} %"), &|c: &Cell| {
                c.loss_distance.is_none() && c.offered_mbit_per_s == load && c.loss_pct == loss
            });
        }
    }
    let distances: Vec<u32> = (1..setup.plan.nodes).collect();
    if !distances.is_empty() {
        let low = setup
            .plan
            .loads_mbit
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            s,
            "\n### Figure 13: {low:.0} Mbit/s, each member loses {DISTANCE_LOSS_PCT:.0} % of \
             the data of the member k positions before it\n"
        );
        header(&mut s, "k");
        for k in distances {
            row(&mut s, k.to_string(), &|c: &Cell| {
                c.loss_distance == Some(k)
            });
        }
    }
    s
}

/// The accelerated ring's mean latency over the original's, per load, service and loss:
/// below 1 the accelerated ring is faster.
fn loss_ratios(setup: &Setup<'_>, results: &[CellResult]) -> Vec<(f64, Service, f64, Option<f64>)> {
    let mean = |v: Variant, sv: Service, load: f64, loss: f64| {
        results
            .iter()
            .find(|r| {
                r.cell.variant == v
                    && r.cell.service == sv
                    && r.cell.loss_distance.is_none()
                    && r.cell.offered_mbit_per_s == load
                    && r.cell.loss_pct == loss
            })
            .and_then(|r| r.med(|x| x.latency.mean_us))
    };
    let mut out = Vec::new();
    for &load in &setup.plan.loads_mbit {
        for sv in Service::ALL {
            for &loss in &setup.plan.losses_pct {
                let ratio = match (
                    mean(Variant::Original, sv, load, loss),
                    mean(Variant::Accelerated, sv, load, loss),
                ) {
                    (Some(o), Some(a)) if o > 0.0 => Some(a / o),
                    _ => None,
                };
                out.push((load, sv, loss, ratio));
            }
        }
    }
    out
}

fn loss_shape_text(setup: &Setup<'_>, results: &[CellResult]) -> String {
    let mut s = String::new();
    let ratios = loss_ratios(setup, results);
    for &load in &setup.plan.loads_mbit {
        for sv in Service::ALL {
            let r: Vec<String> = ratios
                .iter()
                .filter(|(l, x, _, _)| *l == load && *x == sv)
                .map(|(_, _, loss, r)| {
                    r.map_or(format!("{loss:.0} %: n/a"), |r| {
                        format!("{loss:.0} %: {:+.0} %", (r - 1.0) * 100.0)
                    })
                })
                .collect();
            let _ = writeln!(
                s,
                "- {load:.0} Mbit/s, {}: the Accelerated Ring's mean latency against the \
                 original's, by loss: {}.",
                sv.title(),
                r.join(", ")
            );
        }
    }
    let _ = writeln!(
        s,
        "\nSeed 002: on 1 GbE (figures 11, 12) the accelerated ring's latency stays below the \
         original's at every loss rate (Agreed 2-45 % lower at 20 % of the original's \
         maximum, at least 30 % lower at 50 %; Safe 22-50 % and at least 43 % lower); on 10 \
         GbE at a light load (figure 9) it is higher once loss reaches 5 %, since a lost \
         message is asked for one round later. Figure 13: latency grows with the distance \
         k, since a message is asked for only when the token reaches the member that \
         lost it."
    );
    s
}

fn summary(args: &BenchArgs, setup: &Setup<'_>, results: &[CellResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# abcast bench {}\n", setup.name.as_str());
    let what = match setup.name {
        BenchName::TokenLoss => "Latency under data-message loss",
        _ => "Latency against throughput",
    };
    let _ = writeln!(
        s,
        "{what}, the original Totem ring (accelerated_window 0) against the Accelerated Ring \
         (accelerated_window {ACCELERATED_WINDOW}), Agreed and Safe delivery (cf. {}).\n",
        setup.figure()
    );
    let _ = writeln!(s, "- Command: `{}`", command_line());
    let _ = writeln!(s, "- Date: {}", setup.date);
    let _ = writeln!(s, "- Machine: {}", machine());
    let _ = writeln!(
        s,
        "- Load average (1, 5, 15 min) before the runs: {}; after: {} (other programs share \
         this machine)",
        setup.load.0, setup.load.1
    );
    let _ = writeln!(
        s,
        "- Kernel socket buffer caps: net.core.rmem_max = {} bytes, net.core.wmem_max = {} \
         bytes (the datagram sockets ask for 8 MiB with SO_RCVBUFFORCE)",
        sysctl("net.core.rmem_max"),
        sysctl("net.core.wmem_max")
    );
    let place = match setup.plan.link_mbit {
        Some(m) => format!(
            "each in its own network namespace on an emulated switched LAN (a bridge; each \
             member's link shaped by `tc tbf` to {m:.0} Mbit/s each way, {} byte frames; \
             `abcast-harness/src/bench/lan.rs`)",
            lan::LAN_MTU_BYTES
        ),
        None => "on 127.0.0.1".to_string(),
    };
    let _ = writeln!(
        s,
        "- Each run: {} token-ring members {place}; data by IP multicast, the token by UDP \
         on its own socket; every member proposes {} B values (one per data message) at an \
         equal share of the offered load, at most {} in flight; personal_window \
         {PERSONAL_WINDOW}, global_window {}; {} s of load, {} run(s) per point, rounds \
         interleaved; medians below; every run in `results.csv`.",
        setup.plan.nodes,
        setup.plan.value_size_bytes,
        setup
            .window
            .map_or("the node's default".to_string(), |w| w.to_string()),
        GLOBAL_WINDOW_PER_MEMBER * setup.plan.nodes,
        args.duration_s,
        args.runs
    );
    let _ = writeln!(
        s,
        "- Throughput: payload delivered per second at each member (every member delivers \
         every value: the ring's aggregate), median over the members, from the moment every \
         member delivers. Latency: propose to delivery of every value at every member, as the \
         seed measured at the receivers (the proposer stamps each value, one host, one \
         clock), merged over the members; \"p50 at proposer\" is the proposer's own view."
    );
    match setup.name {
        BenchName::TokenLoss => {
            let _ = writeln!(
                s,
                "- Loss: `[[link_faults]]` with `lane = \"data\"` on every link: each member \
                 loses that share of the data messages (retransmissions too) it receives, \
                 never a token (seed 002 §IV-A4). Latency: mean, and the mean of the worst \
                 5 % (the seed's dashed lines)."
            );
            s += &loss_table(setup, results);
            let _ = writeln!(s, "\n## Shape compared with {}\n", setup.figure());
            s += &loss_shape_text(setup, results);
        }
        _ => {
            let _ = writeln!(
                s,
                "- Maximum sustained load: walking up the offered loads, the last one \
                 delivered to within {:.0} % with a median latency at most \
                 {LATENCY_CLIMB_FACTOR} times the lightest load's.",
                (1.0 - SUSTAINED_FRACTION) * 100.0
            );
            s += &latency_table(results);
            let _ = writeln!(s, "\n## Headline\n");
            s += &latency_headline_text(setup, results);
            let _ = writeln!(s, "\n## Shape compared with {}\n", setup.figure());
            let _ = writeln!(
                s,
                "Seed 002 figures 2 and 3 (1 GbE): the accelerated ring's curve lies below and \
                 to the right of the original's: lower latency at every throughput, and a \
                 higher throughput before latency climbs (Agreed: the original to 500 Mbit/s \
                 at 1.3 ms, the accelerated to 800 Mbit/s at 720 us and past 920 Mbit/s; Safe: \
                 600 Mbit/s at 3.7-4.7 ms against 800 Mbit/s at about 2 ms)."
            );
        }
    }
    let failures: Vec<String> = results
        .iter()
        .flat_map(|cr| {
            cr.runs.iter().filter(|r| !r.ok).map(move |r| {
                format!(
                    "{} run {}: {}",
                    cr.cell.label(),
                    r.run,
                    failure_reason(r.error.as_deref())
                )
            })
        })
        .collect();
    push_failed_runs(&mut s, &failures);
    s
}

/// The `--json` figures of one cell.
fn point_json(r: &CellResult) -> serde_json::Value {
    let m = |f: &dyn Fn(&CellRun) -> f64| r.med(f);
    json!({
        "variant": r.cell.variant.as_str(),
        "service": r.cell.service.as_str(),
        "offered_mbit_per_s": r.cell.offered_mbit_per_s,
        "loss_pct": r.cell.loss_pct,
        "loss_distance": r.cell.loss_distance,
        "mbit_per_s": m(&|x| x.mbit_per_s),
        "values_per_s": m(&|x| x.values_per_s),
        "latency_us_mean": m(&|x| x.latency.mean_us),
        "latency_us_p50": m(&|x| x.latency.p50_us),
        "latency_us_p95": m(&|x| x.latency.p95_us),
        "latency_us_p99": m(&|x| x.latency.p99_us),
        "latency_us_worst5_mean": m(&|x| x.latency.worst5_mean_us),
        "latency_us_p50_at_proposer": m(&|x| x.latency_proposer.p50_us),
        "latency_us_p99_at_proposer": m(&|x| x.latency_proposer.p99_us),
        "cpu_pct_mean": m(&|x| x.cpu_pct_mean),
        "runs": r.runs.len(),
        "runs_ok": r.runs_ok(),
    })
}

/// The headline keys of one service, prefixed (`""` for Agreed, as issue 18 names them,
/// and `safe_` for Safe where the name carries no service).
fn headline_json(
    j: &mut serde_json::Map<String, serde_json::Value>,
    service: Service,
    h: &Headline,
) {
    let sv = service.as_str();
    j.insert(
        format!("accelerated_{sv}_mbit_per_s_max"),
        json!(h.accelerated_mbit_per_s_max),
    );
    j.insert(
        format!("original_{sv}_mbit_per_s_max"),
        json!(h.original_mbit_per_s_max),
    );
    let r = h.reduction;
    j.insert(
        format!("original_{sv}_offered_mbit_per_s_at_max"),
        json!(r.map(|r| r.original.offered_mbit_per_s)),
    );
    j.insert(
        format!("original_{sv}_mbit_per_s_sustained"),
        json!(r.map(|r| r.original.mbit_per_s)),
    );
    j.insert(
        format!("original_{sv}_latency_us_p50_at_max"),
        json!(r.map(|r| r.original.latency_us_p50)),
    );
    j.insert(
        format!("accelerated_{sv}_latency_us_p50_at_original_max"),
        json!(r.map(|r| r.accelerated.latency_us_p50)),
    );
    j.insert(
        format!("original_{sv}_latency_us_p50_at_max_at_proposer"),
        json!(r.map(|r| r.original.latency_us_p50_proposer)),
    );
    j.insert(
        format!("accelerated_{sv}_latency_us_p50_at_original_max_at_proposer"),
        json!(r.map(|r| r.accelerated.latency_us_p50_proposer)),
    );
    let key = match service {
        Service::Agreed => "latency_reduction_at_original_max".to_string(),
        Service::Safe => "safe_latency_reduction_at_original_max".to_string(),
    };
    j.insert(
        format!("{key}_at_proposer"),
        json!(r.map(|r| r.reduction_at_proposer)),
    );
    j.insert(key, json!(r.map(|r| r.reduction)));
}

/// The `--json` line: the setup, the headline figures and every point's medians.
fn json_line(
    args: &BenchArgs,
    setup: &Setup<'_>,
    results: &[CellResult],
    out: &Path,
    all_ok: bool,
) -> serde_json::Value {
    let mut j = serde_json::Map::new();
    j.insert("bench".into(), json!(setup.name.as_str()));
    j.insert("figure".into(), json!(setup.figure()));
    j.insert("runs".into(), json!(args.runs));
    j.insert("duration_s".into(), json!(args.duration_s));
    j.insert("nodes".into(), json!(setup.plan.nodes));
    j.insert(
        "value_size_bytes".into(),
        json!(setup.plan.value_size_bytes),
    );
    j.insert("personal_window".into(), json!(PERSONAL_WINDOW));
    j.insert("accelerated_window".into(), json!(ACCELERATED_WINDOW));
    j.insert("window_values".into(), json!(setup.window));
    j.insert("network".into(), json!(setup.network()));
    j.insert("link_mbit_per_s".into(), json!(setup.plan.link_mbit));
    j.insert("loadavg_before".into(), json!(setup.load.0));
    j.insert("loadavg_after".into(), json!(setup.load.1));
    j.insert("loads_mbit".into(), json!(setup.plan.loads_mbit));
    match setup.name {
        BenchName::TokenLoss => {
            j.insert("losses_pct".into(), json!(setup.plan.losses_pct));
            let ratios: Vec<serde_json::Value> = loss_ratios(setup, results)
                .into_iter()
                .map(|(load, sv, loss, r)| {
                    json!({
                        "offered_mbit_per_s": load,
                        "service": sv.as_str(),
                        "loss_pct": loss,
                        "accelerated_over_original_mean_latency": r,
                    })
                })
                .collect();
            j.insert("mean_latency_ratios".into(), json!(ratios));
        }
        _ => {
            for service in Service::ALL {
                headline_json(&mut j, service, &headline(results, service));
            }
            let agreed = headline(results, Service::Agreed);
            let frac = setup
                .plan
                .link_mbit
                .and_then(|l| agreed.accelerated_mbit_per_s_max.map(|m| m / l));
            let red = agreed.reduction.map(|r| r.reduction);
            j.insert(
                "must_show".into(),
                json!({
                    "accelerated_agreed_link_fraction": frac,
                    "link_fraction_target": LINK_FRACTION_TARGET,
                    "link_fraction_met": frac.map(|f| f >= LINK_FRACTION_TARGET),
                    "latency_reduction_target": LATENCY_REDUCTION_TARGET,
                    "latency_reduction_met": red.map(|r| r >= LATENCY_REDUCTION_TARGET),
                }),
            );
        }
    }
    j.insert("out_dir".into(), json!(out.display().to_string()));
    j.insert("all_runs_ok".into(), json!(all_ok));
    j.insert(
        "points".into(),
        json!(results.iter().map(point_json).collect::<Vec<_>>()),
    );
    serde_json::Value::Object(j)
}

/// What a run without `--json` prints: the tables and the headline.
fn terminal_text(setup: &Setup<'_>, results: &[CellResult], out: &Path) -> String {
    let body = match setup.name {
        BenchName::TokenLoss => {
            loss_table(setup, results) + "\n" + &loss_shape_text(setup, results)
        }
        _ => latency_table(results) + "\n" + &latency_headline_text(setup, results),
    };
    format!(
        "abcast bench {} on the {} (cf. {})\n{body}\nResults in {}\n  (results.csv, plot.png, summary.md)\n",
        setup.name.as_str(),
        setup.network(),
        setup.figure(),
        out.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn args(line: &str) -> BenchArgs {
        Cli::try_parse_from(std::iter::once("bench").chain(line.split_whitespace()))
            .unwrap()
            .bench
    }

    fn plan(name: BenchName, line: &str) -> Plan {
        Plan::of(name, &args(line)).unwrap()
    }

    #[test]
    fn latency_points_sweep_past_the_link_for_both_rings_and_services() {
        let p = plan(BenchName::TokenLatency, "token-latency --link-mbit 1000");
        assert_eq!(p.nodes, 3);
        assert_eq!(p.value_size_bytes, 1350);
        assert_eq!(p.loads_mbit.first(), Some(&100.0));
        assert_eq!(p.loads_mbit.last(), Some(&1200.0), "past the link");
        let c = cells(BenchName::TokenLatency, &p);
        assert_eq!(c.len(), p.loads_mbit.len() * 4);
        // Both rings side by side at each point, both services.
        assert_eq!(c[0].offered_mbit_per_s, c[3].offered_mbit_per_s);
        assert_eq!(
            (c[0].variant, c[1].variant),
            (Variant::Original, Variant::Accelerated)
        );
        assert_eq!(
            (c[0].service, c[2].service),
            (Service::Agreed, Service::Safe)
        );
        assert!(
            c.iter()
                .all(|c| c.loss_pct == 0.0 && c.loss_distance.is_none())
        );
        // 1000 Mbit/s of 1350-byte values.
        assert_eq!(p.rate_values_per_s(1000.0), 92_593);
        let large = plan(
            BenchName::TokenLatency,
            "token-latency --large --loads-mbit 10,20",
        );
        assert_eq!(large.value_size_bytes, LARGE_VALUE_SIZE_BYTES);
        assert_eq!(large.loads_mbit, [10.0, 20.0]);
        let lo = plan(BenchName::TokenLatency, "token-latency");
        assert_eq!(lo.loads_mbit, LOOPBACK_LOADS_MBIT);
    }

    #[test]
    fn loss_points_are_every_loss_at_both_loads_and_figure_13_at_the_lower() {
        let p = plan(
            BenchName::TokenLoss,
            "token-loss --nodes 4 --link-mbit 1000",
        );
        assert_eq!(
            p.loads_mbit,
            [150.0, 375.0],
            "20 % and 50 % of the original's maximum"
        );
        assert_eq!(p.losses_pct, LOSS_PCT_DEFAULT);
        let c = cells(BenchName::TokenLoss, &p);
        let distance: Vec<&Cell> = c.iter().filter(|c| c.loss_distance.is_some()).collect();
        assert_eq!(c.len() - distance.len(), 2 * 6 * 4);
        assert_eq!(
            distance.len(),
            3 * 4,
            "k = 1 .. n-1, both rings and services"
        );
        assert!(
            distance
                .iter()
                .all(|c| c.offered_mbit_per_s == 150.0 && c.loss_pct == DISTANCE_LOSS_PCT)
        );
        let custom = plan(
            BenchName::TokenLoss,
            "token-loss --loss-pct 0,12.5 --loads-mbit 50",
        );
        assert_eq!(custom.losses_pct, [0.0, 12.5]);
        assert_eq!(custom.loads_mbit, [50.0]);
    }

    #[test]
    fn bad_lists_are_refused_naming_the_flag() {
        for (name, line, flag) in [
            (
                BenchName::TokenLatency,
                "token-latency --loads-mbit 10,x",
                "--loads-mbit",
            ),
            (
                BenchName::TokenLatency,
                "token-latency --loads-mbit 0",
                "--loads-mbit",
            ),
            (
                BenchName::TokenLatency,
                "token-latency --loads-mbit ,",
                "--loads-mbit",
            ),
            (
                BenchName::TokenLoss,
                "token-loss --loss-pct 95",
                "--loss-pct",
            ),
            (
                BenchName::TokenLoss,
                "token-loss --loss-pct -1",
                "--loss-pct",
            ),
            (
                BenchName::TokenLatency,
                "token-latency --loss-pct 5",
                "--loss-pct",
            ),
        ] {
            match Plan::of(name, &args(line)) {
                Err(HarnessError::Usage(m)) => assert!(m.contains(flag), "{line}: {m}"),
                other => panic!("{line}: expected a usage error, got {other:?}"),
            }
        }
        assert!(Cli::try_parse_from(["bench", "token-loss", "--nodes", "1"]).is_err());
    }

    #[test]
    fn figure_13_loses_only_from_the_member_k_before_and_never_the_token() {
        let cell = Cell {
            variant: Variant::Accelerated,
            service: Service::Agreed,
            offered_mbit_per_s: 100.0,
            loss_pct: 20.0,
            loss_distance: Some(2),
        };
        let rules = link_faults(&cell, 4);
        let links: Vec<(u32, u32)> = rules
            .iter()
            .filter_map(|r| Some((r.from?.0, r.to?.0)))
            .collect();
        assert_eq!(links, [(2, 0), (3, 1), (0, 2), (1, 3)]);
        assert!(
            rules
                .iter()
                .all(|r| r.loss_ppm == 200_000 && r.lane == Some(Lane::Data))
        );
        let every = Cell {
            loss_distance: None,
            ..cell.clone()
        };
        assert_eq!(
            link_faults(&every, 4),
            [LinkFault::everywhere(0, 200_000).on_lane(Lane::Data)]
        );
        let none = Cell {
            loss_pct: 0.0,
            ..every
        };
        assert!(link_faults(&none, 4).is_empty());
    }

    #[test]
    fn config_edits_make_a_token_ring_config_the_node_accepts() {
        let p = plan(BenchName::TokenLoss, "token-loss");
        for cell in cells(BenchName::TokenLoss, &p).iter().take(9) {
            for on_lan in [false, true] {
                let mut t: toml::Table = abcast_node::nodeconfig::local_cluster(3, 7400)
                    .parse()
                    .unwrap();
                for (k, v) in config_edits(cell, &p, 1, on_lan) {
                    cluster::set_toml_key(&mut t, &k, v).unwrap();
                }
                let c = abcast_node::nodeconfig::parse(
                    &toml::to_string(&t).unwrap(),
                    Some(1),
                    Path::new("/"),
                )
                .unwrap();
                assert_eq!(c.protocol, abcast_node::nodeconfig::ProtocolKind::Token);
                let tc = c.token.unwrap();
                assert_eq!(tc.accelerated_window, cell.variant.accelerated_window());
                assert_eq!(tc.personal_window, PERSONAL_WINDOW);
                assert_eq!(tc.max_message_bytes, 1350);
                let m = c.transport.multicast.unwrap();
                assert_eq!(m.interface.is_unspecified(), on_lan);
                assert_eq!(c.transport.link_faults.is_empty(), cell.loss_pct == 0.0);
            }
        }
    }

    fn point(offered: f64, delivered: f64, p50_us: f64) -> CurvePoint {
        CurvePoint {
            offered_mbit_per_s: offered,
            mbit_per_s: delivered,
            latency_us_p50: p50_us,
            latency_us_p99: p50_us * 3.0,
            latency_us_p50_proposer: p50_us / 2.0,
        }
    }

    #[test]
    fn the_sustained_maximum_ends_where_latency_climbs_or_load_is_not_carried() {
        // Latency triples from the lightest load to 500 (not a climb), then passes ten
        // times the lightest load's: 500 is the maximum.
        let c = [
            point(100.0, 100.0, 400.0),
            point(300.0, 299.0, 700.0),
            point(500.0, 498.0, 1300.0),
            point(600.0, 590.0, 4100.0),
            point(700.0, 620.0, 900_000.0),
        ];
        assert_eq!(sustained_max(&c).map(|p| p.offered_mbit_per_s), Some(500.0));
        assert_eq!(peak_mbit(&c), Some(620.0));
        // A load delivered short of 95 % ends it too, even at a calm latency.
        let short = [point(100.0, 100.0, 400.0), point(200.0, 150.0, 500.0)];
        assert_eq!(
            sustained_max(&short).map(|p| p.offered_mbit_per_s),
            Some(100.0)
        );
        assert_eq!(sustained_max(&[point(100.0, 10.0, 400.0)]), None);
        assert_eq!(sustained_max(&[]), None);
    }

    fn result(variant: Variant, service: Service, offered: f64, runs: &[(f64, f64)]) -> CellResult {
        CellResult {
            cell: Cell {
                variant,
                service,
                offered_mbit_per_s: offered,
                loss_pct: 0.0,
                loss_distance: None,
            },
            runs: runs
                .iter()
                .enumerate()
                .map(|(i, &(mbit, p50))| CellRun {
                    run: i as u32 + 1,
                    values_per_s: mbit,
                    mbit_per_s: mbit,
                    latency: LatencyProfile {
                        count: 10,
                        mean_us: p50,
                        p50_us: p50,
                        p95_us: p50,
                        p99_us: p50 * 2.0,
                        worst5_mean_us: p50 * 2.0,
                    },
                    latency_proposer: LatencyProfile {
                        count: 10,
                        mean_us: p50 / 2.0,
                        p50_us: p50 / 2.0,
                        p95_us: p50,
                        p99_us: p50,
                        worst5_mean_us: p50,
                    },
                    cpu_pct_mean: 50.0,
                    ok: true,
                    error: None,
                })
                .collect(),
        }
    }

    #[test]
    fn the_json_headline_is_computed_from_the_medians_of_synthetic_runs() {
        let (o, a, ag, sf) = (
            Variant::Original,
            Variant::Accelerated,
            Service::Agreed,
            Service::Safe,
        );
        let results = vec![
            // Agreed, 3 runs each: medians are the middle values.
            result(
                o,
                ag,
                100.0,
                &[(100.0, 900.0), (99.0, 920.0), (100.0, 880.0)],
            ),
            result(
                a,
                ag,
                100.0,
                &[(100.0, 200.0), (100.0, 210.0), (100.0, 190.0)],
            ),
            result(
                o,
                ag,
                500.0,
                &[(499.0, 1300.0), (500.0, 1200.0), (498.0, 1250.0)],
            ),
            result(
                a,
                ag,
                500.0,
                &[(500.0, 700.0), (500.0, 650.0), (500.0, 600.0)],
            ),
            result(
                o,
                ag,
                900.0,
                &[(610.0, 90_000.0), (600.0, 95_000.0), (605.0, 99_000.0)],
            ),
            result(
                a,
                ag,
                900.0,
                &[(905.0, 1100.0), (910.0, 1200.0), (900.0, 1000.0)],
            ),
            // Safe: the original never carries its lightest load.
            result(o, sf, 100.0, &[(50.0, 4000.0)]),
            result(a, sf, 100.0, &[(100.0, 2000.0)]),
        ];
        let h = headline(&results, Service::Agreed);
        assert_eq!(h.original_mbit_per_s_max, Some(605.0));
        assert_eq!(h.accelerated_mbit_per_s_max, Some(905.0));
        let r = h.reduction.unwrap();
        assert_eq!(r.original.offered_mbit_per_s, 500.0);
        assert_eq!(r.original.latency_us_p50, 1250.0);
        assert_eq!(r.accelerated.latency_us_p50, 650.0);
        assert!((r.reduction - 0.48).abs() < 1e-9, "{}", r.reduction);
        assert!((r.reduction_at_proposer - 0.48).abs() < 1e-9);
        let p = plan(BenchName::TokenLatency, "token-latency --link-mbit 1000");
        let setup = Setup {
            name: BenchName::TokenLatency,
            plan: &p,
            window: Some(WINDOW_VALUES),
            date: "today",
            load: ("0.1".into(), "0.2".into()),
        };
        let j = json_line(
            &args("token-latency --link-mbit 1000"),
            &setup,
            &results,
            Path::new("/tmp/x"),
            true,
        );
        assert_eq!(j["accelerated_agreed_mbit_per_s_max"], 905.0);
        assert_eq!(j["original_agreed_mbit_per_s_max"], 605.0);
        assert!((j["latency_reduction_at_original_max"].as_f64().unwrap() - 0.48).abs() < 1e-9);
        let at_proposer = j["latency_reduction_at_original_max_at_proposer"].as_f64();
        assert!((at_proposer.unwrap() - 0.48).abs() < 1e-9);
        assert_eq!(
            j["original_agreed_latency_us_p50_at_max_at_proposer"],
            625.0
        );
        assert_eq!(j["original_agreed_offered_mbit_per_s_at_max"], 500.0);
        assert_eq!(j["original_safe_mbit_per_s_max"], 50.0);
        assert!(j["safe_latency_reduction_at_original_max"].is_null());
        assert!(
            (j["must_show"]["accelerated_agreed_link_fraction"]
                .as_f64()
                .unwrap()
                - 0.905)
                .abs()
                < 1e-9
        );
        assert_eq!(j["must_show"]["link_fraction_met"], true);
        assert_eq!(j["must_show"]["latency_reduction_met"], true);
        assert_eq!(j["points"].as_array().unwrap().len(), results.len());
        // The summary and the terminal text say the same.
        let text = terminal_text(&setup, &results, Path::new("/tmp/x"));
        assert!(text.contains("**48 % lower**"), "{text}");
        assert!(text.contains("reaches 90 % of the link"), "{text}");
    }

    #[test]
    fn the_worst_five_percent_is_the_mean_of_the_highest_twentieth() {
        let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        for v in 1..=100u64 {
            h.record(v * 10).unwrap();
        }
        let p = LatencyProfile::of(&h).unwrap();
        assert_eq!(p.count, 100);
        // The top five: 960 .. 1000.
        assert!((p.worst5_mean_us - 980.0).abs() < 1.0, "{p:?}");
        assert!((p.mean_us - 505.0).abs() < 1.0);
        assert!((p.p50_us - 500.0).abs() < 1.0);
        assert!(LatencyProfile::of(&hdrhistogram::Histogram::<u64>::new(3).unwrap()).is_none());
    }

    #[test]
    fn token_flags_are_refused_on_other_benches() {
        for line in [
            "value-size --nodes 4",
            "multicast --large",
            "buffer --loads-mbit 10",
            "storage --loss-pct 5",
        ] {
            match super::super::run_bench(&args(line)) {
                Err(HarnessError::Usage(m)) => assert!(m.contains("token-latency"), "{m}"),
                other => panic!("{line}: expected a usage error, got {other:?}"),
            }
        }
    }

    #[test]
    fn both_plots_and_summaries_are_written_from_synthetic_runs() {
        let dir = std::env::temp_dir().join(format!("abcast-token-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = plan(BenchName::TokenLoss, "token-loss --loss-pct 0,10");
        let mut results: Vec<CellResult> = cells(BenchName::TokenLoss, &p)
            .into_iter()
            .map(|cell| {
                let lat = 100.0 + cell.loss_pct * 10.0 + cell.loss_distance.unwrap_or(0) as f64;
                CellResult {
                    runs: result(
                        cell.variant,
                        cell.service,
                        cell.offered_mbit_per_s,
                        &[(cell.offered_mbit_per_s, lat)],
                    )
                    .runs,
                    cell,
                }
            })
            .collect();
        let setup = Setup {
            name: BenchName::TokenLoss,
            plan: &p,
            window: Some(WINDOW_VALUES),
            date: "today",
            load: ("0.1".into(), "0.2".into()),
        };
        write_loss_plot(&dir.join("loss.png"), &setup, &results).unwrap();
        let text = summary(&args("token-loss"), &setup, &results);
        assert!(text.contains("Figure 13"), "{text}");
        assert!(text.contains("10 %: +0 %"), "{text}");
        // A failed run leaves its cell out of the lines, and says so.
        results[0].runs[0].error = Some("boom".into());
        results[0].runs[0].ok = false;
        write_loss_plot(&dir.join("loss2.png"), &setup, &results).unwrap();
        assert!(summary(&args("token-loss"), &setup, &results).contains("run 1: boom"));
        let lp = plan(
            BenchName::TokenLatency,
            "token-latency --loads-mbit 100,200",
        );
        let latency: Vec<CellResult> = cells(BenchName::TokenLatency, &lp)
            .into_iter()
            .map(|c| {
                result(
                    c.variant,
                    c.service,
                    c.offered_mbit_per_s,
                    &[(c.offered_mbit_per_s, 300.0)],
                )
            })
            .collect();
        let lsetup = Setup {
            name: BenchName::TokenLatency,
            plan: &lp,
            ..setup
        };
        write_latency_plot(&dir.join("latency.png"), &lsetup, &latency).unwrap();
        for f in ["loss.png", "loss2.png", "latency.png"] {
            assert!(
                std::fs::metadata(dir.join(f)).unwrap().len() > 10_000,
                "{f}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
