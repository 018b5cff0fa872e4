//! `abcast bench multicast`: seed 003 figure 4 (throughput vs number of receivers) and
//! table 2 (MTE, the maximum throughput efficiency) on this machine.
//!
//! Each point is one learner count L (1 .. 5) run twice, side by side in the same round:
//! IP-multicast Ring Paxos (`protocol = "ringpaxos"` with `[multicast]`) and U-Ring Paxos,
//! both with 3 acceptors that also propose and learn, plus L learner-only nodes, 8 KiB
//! values (seed 003 table 2: Ring Paxos' best size), every proposer saturating its window.
//! Figures are per learner-only node: its delivery rate in values/s and Mbit/s (median over
//! the L learners), and latency from propose to delivery at the proposers.
//!
//! MTE is delivered Mbit/s per learner over a link limit. On one host the "link" is the
//! loopback: the guide quotes one TCP stream at about 17 Gbit/s with large writes (the
//! bound for U-Ring's TCP hops), and this bench measures the UDP-multicast loopback limit
//! itself (one sender of 2A-sized datagrams, 1 and 5 receivers, no protocol), which bounds
//! Ring Paxos' 2A stream. The headline figure, `learner_throughput_ratio_5_to_1`, is Ring
//! Paxos' per-learner throughput with 5 learners over that with 1: seed 003 fig 4 shows it
//! flat (ratio 1).
//!
//! `--link-mbit N` runs the same points on the network seed 003 measured on instead of the
//! loopback: every node in a network namespace of its own, on an emulated switched LAN whose
//! links carry N Mbit/s each way (`lan.rs`). On the loopback the two cores copy every
//! datagram once per receiver, so the host's CPU, not the protocol, sets the shape of the
//! curve (the probe alone loses half its rate from 1 to 5 receivers); with links of 1 Gbit/s
//! the network bounds each learner, as the seed's switch did, and MTE divides by the link.
//!
//! Runs are interleaved (round r runs every point of both protocols) so the drift of a
//! shared two-core machine spreads over all points. Each run is a full
//! [`crate::cluster::run_cluster`], so agreement, loss and duplicates are checked every time.

use super::experiments::{
    MULTICAST_ACCEPTORS, MULTICAST_LEARNERS_MAX, MULTICAST_VALUE_SIZE_BYTES,
    MULTICAST_WINDOW_VALUES,
};
use super::lan::{self, EmulatedLan};
use super::output::{
    command_line, create_out_dir, csv_field, failure_reason, finish, note_interrupted,
    push_failed_runs, write_file,
};
use super::{BenchArgs, checks_failed, machine, sysctl};
use crate::analysis;
use crate::cluster;
use crate::cluster::ClusterSpec;
use crate::error::HarnessError;
use crate::format::utc_now;
use crate::format::{bytes, group, ms};
use crate::plot::{self, FONT_FAMILY, Whisker};
use abcast_node::stats::median;
use plotters::prelude::*;
use plotters::style::FontStyle;
use serde_json::json;
use socket2::{Domain, Protocol as SockProtocol, SockAddr, Socket, Type};
use std::fmt::Write as _;
use std::hash::{BuildHasher, Hasher};
use std::mem::MaybeUninit;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The guide's loopback limit for one TCP stream with large writes (iperf3), Mbit/s.
pub const TCP_LOOPBACK_MBIT_PER_S: f64 = 17_000.0;
/// The acceptance target of the headline ratio (within 15 %).
pub const RATIO_TARGET: f64 = 0.85;
/// Payload of the datagrams of the loopback probe: a 2A of four 8 KiB values and its fields.
const PROBE_DATAGRAM_BYTES: usize = 4 * 8192 + 160;
const PROBE_DURATION: Duration = Duration::from_secs(2);
/// Multicast group of the benchmark; the port is drawn per run.
const GROUP_IP: Ipv4Addr = Ipv4Addr::new(239, 255, 77, 1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    RingPaxos,
    URing,
}

impl Proto {
    pub const ALL: [Proto; 2] = [Proto::RingPaxos, Proto::URing];
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::RingPaxos => "ringpaxos",
            Proto::URing => "uring",
        }
    }
    fn title(self) -> &'static str {
        match self {
            Proto::RingPaxos => "Ring Paxos (UDP multicast)",
            Proto::URing => "U-Ring Paxos (TCP ring)",
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Run {
    pub run: u32,
    /// Median over the learner-only nodes.
    pub values_per_s: f64,
    pub mbit_per_s: f64,
    /// The slowest learner-only node.
    pub mbit_per_s_min: f64,
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    /// CPU of the coordinator (node 0), the other acceptors (mean) and the learners (mean);
    /// 100 = one core.
    pub cpu_pct_coordinator: f64,
    pub cpu_pct_acceptors: f64,
    pub cpu_pct_learners: f64,
    pub ok: bool,
    pub error: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Series {
    pub proto: Proto,
    pub learners: u32,
    pub runs: Vec<Run>,
}

impl Series {
    fn good(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| r.error.is_none())
    }
    pub fn spread(&self, f: impl Fn(&Run) -> f64) -> Option<(f64, f64, f64)> {
        let v: Vec<f64> = self.good().map(f).collect();
        let m = median(&v)?;
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some((lo, m, hi))
    }
    pub fn med(&self, f: impl Fn(&Run) -> f64) -> Option<f64> {
        self.spread(f).map(|(_, m, _)| m)
    }
    fn runs_ok(&self) -> usize {
        self.runs.iter().filter(|r| r.ok).count()
    }
}

/// A fresh random number from the OS-seeded hasher (no dependency).
fn random_u64(salt: u64) -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(salt);
    h.write_u64(u64::from(std::process::id()));
    h.finish()
}

/// The config edits that turn the demo's all-PAL cluster into 3 acceptors and `learners`
/// learner-only nodes running `proto`. Each run gets its own cluster id and group port, so
/// two runs (or benches) at once can neither mix datagrams nor accept each other's.
fn config_edits(
    proto: Proto,
    learners: u32,
    salt: u64,
    on_lan: bool,
) -> Vec<(String, toml::Value)> {
    let mut edits = Vec::new();
    let learner = toml::Value::Array(vec![toml::Value::String("learner".into())]);
    for i in MULTICAST_ACCEPTORS..MULTICAST_ACCEPTORS + learners {
        edits.push((format!("members[{i}].roles"), learner.clone()));
    }
    let r = random_u64(salt);
    edits.push((
        "cluster_id".into(),
        toml::Value::Integer(i64::from((r >> 32) as u32) + 2),
    ));
    if proto == Proto::RingPaxos {
        let port = 30_000 + (r % 10_000) as u16;
        edits.push(("protocol".into(), toml::Value::String("ringpaxos".into())));
        edits.push((
            "multicast.group".into(),
            toml::Value::String(SocketAddrV4::new(GROUP_IP, port).to_string()),
        ));
        if on_lan {
            // One config for every node: each namespace's route to the group picks its
            // interface.
            edits.push((
                "multicast.interface".into(),
                toml::Value::String(Ipv4Addr::UNSPECIFIED.to_string()),
            ));
        }
    }
    edits
}

fn measure(spec: &ClusterSpec, run: u32) -> Result<(Run, bool), HarnessError> {
    let cluster_run = cluster::run_cluster(spec)?;
    let r = analysis::analyse(&cluster_run);
    let learner_nodes: Vec<&analysis::NodeReport> = r
        .per_node
        .iter()
        .filter(|n| n.id >= MULTICAST_ACCEPTORS)
        .collect();
    let values: Vec<f64> = learner_nodes.iter().map(|n| n.values_per_s).collect();
    let mbits: Vec<f64> = learner_nodes.iter().map(|n| n.mbit_per_s).collect();
    let cpu = |ids: &dyn Fn(u32) -> bool| {
        let v: Vec<f64> = r
            .per_node
            .iter()
            .filter(|n| ids(n.id))
            .map(|n| n.cpu_pct)
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let ok = r.ok();
    if let Some(why) = checks_failed(&r) {
        eprintln!("{}: checks FAILED: {why}", spec.label);
    }
    Ok((
        Run {
            run,
            values_per_s: median(&values).unwrap_or(0.0),
            mbit_per_s: median(&mbits).unwrap_or(0.0),
            mbit_per_s_min: mbits.iter().copied().fold(f64::INFINITY, f64::min),
            latency_us_p50: r.latency.p50_us,
            latency_us_p99: r.latency.p99_us,
            cpu_pct_coordinator: cpu(&|id| id == 0),
            cpu_pct_acceptors: cpu(&|id| id > 0 && id < MULTICAST_ACCEPTORS),
            cpu_pct_learners: cpu(&|id| id >= MULTICAST_ACCEPTORS),
            ok,
            // A run whose checks failed still has figures; only a run that could not
            // complete has none.
            error: None,
        },
        cluster_run.interrupted,
    ))
}

fn failed_run(run: u32, e: &HarnessError) -> Run {
    Run {
        run,
        values_per_s: f64::NAN,
        mbit_per_s: f64::NAN,
        mbit_per_s_min: f64::NAN,
        latency_us_p50: f64::NAN,
        latency_us_p99: f64::NAN,
        cpu_pct_coordinator: f64::NAN,
        cpu_pct_acceptors: f64::NAN,
        cpu_pct_learners: f64::NAN,
        ok: false,
        error: Some(e.to_string().lines().next().unwrap_or("").to_string()),
    }
}

/// One sender thread multicasts datagrams of `datagram_bytes` to a fresh group port for
/// `duration` as fast as the kernel takes them; `receivers` threads each count what they
/// receive. Returns the median receiver's Mbit/s: what the network delivers to one member
/// of a multicast group with no protocol work at all. On the loopback (`lan` = `None`)
/// every thread is in this namespace; on an emulated LAN the sender sits where the
/// coordinator (node 0) runs and receiver i where learner-only node i does.
pub fn udp_multicast_limit_mbit_per_s(
    receivers: usize,
    datagram_bytes: usize,
    duration: Duration,
    lan: Option<&EmulatedLan>,
) -> Result<f64, String> {
    let group = SocketAddrV4::new(GROUP_IP, 40_000 + (random_u64(7) % 10_000) as u16);
    let interface = if lan.is_some() {
        Ipv4Addr::UNSPECIFIED
    } else {
        Ipv4Addr::LOCALHOST
    };
    let netns = |node: usize| -> Result<Option<PathBuf>, String> {
        match lan {
            None => Ok(None),
            Some(l) => l
                .nodes
                .get(node)
                .map(|n| Some(n.netns_path()))
                .ok_or_else(|| format!("multicast probe: the LAN has no node {node}")),
        }
    };
    let open = move |bind: bool, ns: Option<PathBuf>| -> Result<Socket, String> {
        if let Some(ns) = ns {
            lan::enter_netns(&ns).map_err(|e| format!("multicast probe: {e}"))?;
        }
        let err = |what: &str, e: std::io::Error| format!("multicast probe: {what}: {e}");
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(SockProtocol::UDP))
            .map_err(|e| err("socket", e))?;
        s.set_reuse_address(true)
            .map_err(|e| err("SO_REUSEADDR", e))?;
        if bind {
            s.bind(&SockAddr::from(SocketAddr::V4(group)))
                .map_err(|e| err("bind", e))?;
            s.join_multicast_v4(group.ip(), &interface)
                .map_err(|e| err("join", e))?;
            s.set_recv_buffer_size(8 << 20)
                .map_err(|e| err("SO_RCVBUF", e))?;
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .map_err(|e| err("timeout", e))?;
        }
        s.set_multicast_if_v4(&interface)
            .map_err(|e| err("IP_MULTICAST_IF", e))?;
        s.set_multicast_loop_v4(true)
            .map_err(|e| err("IP_MULTICAST_LOOP", e))?;
        Ok(s)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let mut handles = Vec::new();
    for i in 0..receivers {
        let ns = netns(MULTICAST_ACCEPTORS as usize + i)?;
        let stop = Arc::clone(&stop);
        let ready = ready_tx.clone();
        // Each receiver opens its socket on its own thread: entering a namespace moves
        // only the calling thread.
        handles.push(std::thread::spawn(move || -> f64 {
            let s = match open(true, ns) {
                Ok(s) => {
                    let _ = ready.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return f64::NAN;
                }
            };
            // The rate between the first and the last datagram: neither the wait for the
            // sender to start nor the read timeout after it stops counts.
            let mut buf = vec![MaybeUninit::<u8>::uninit(); 1 << 16];
            let mut got = 0u64;
            let mut first: Option<Instant> = None;
            let mut last = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if let Ok(n) = s.recv(&mut buf) {
                    last = Instant::now();
                    if first.is_none() {
                        first = Some(last);
                    } else {
                        got += n as u64;
                    }
                }
            }
            match first {
                Some(t) if last > t => {
                    got as f64 * 8.0 / 1e6 / last.duration_since(t).as_secs_f64()
                }
                _ => 0.0,
            }
        }));
    }
    drop(ready_tx);
    let mut failed = None;
    for r in ready_rx.iter().take(receivers) {
        if let Err(e) = r {
            failed.get_or_insert(e);
        }
    }
    let sent = match failed {
        Some(e) => Err(e),
        None => {
            let ns = netns(0)?;
            std::thread::spawn(move || -> Result<(), String> {
                let sender = open(false, ns)?;
                let payload = vec![0x5au8; datagram_bytes];
                let to = SockAddr::from(SocketAddr::V4(group));
                let start = Instant::now();
                while start.elapsed() < duration {
                    // Errors (ENOBUFS) only mean this datagram is lost; the receivers count
                    // what arrived.
                    let _ = sender.send_to(&payload, &to);
                }
                Ok(())
            })
            .join()
            .unwrap_or_else(|_| Err("multicast probe: the sender thread panicked".into()))
        }
    };
    stop.store(true, Ordering::Relaxed);
    let rates: Vec<f64> = handles
        .into_iter()
        .filter_map(|h| h.join().ok())
        .filter(|v| v.is_finite())
        .collect();
    sent?;
    median(&rates).ok_or_else(|| "multicast probe: no receiver finished".to_string())
}

fn write_csv(
    path: &Path,
    args: &BenchArgs,
    window: u64,
    series: &[Series],
) -> Result<(), HarnessError> {
    let mut s = String::from(
        "experiment,protocol,learners,nodes,run,value_size_bytes,window_values,duration_s,\
         values_per_s_per_learner,mbit_per_s_per_learner,mbit_per_s_slowest_learner,\
         latency_us_p50,latency_us_p99,cpu_pct_coordinator,cpu_pct_acceptors,\
         cpu_pct_learners,ok,error\n",
    );
    for sr in series {
        for r in &sr.runs {
            let fig = |v: f64| {
                if r.error.is_some() {
                    String::new()
                } else {
                    format!("{v:.3}")
                }
            };
            let _ = writeln!(
                s,
                "multicast,{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                sr.proto.as_str(),
                sr.learners,
                MULTICAST_ACCEPTORS + sr.learners,
                r.run,
                MULTICAST_VALUE_SIZE_BYTES,
                window,
                args.duration_s,
                fig(r.values_per_s),
                fig(r.mbit_per_s),
                fig(r.mbit_per_s_min),
                fig(r.latency_us_p50),
                fig(r.latency_us_p99),
                fig(r.cpu_pct_coordinator),
                fig(r.cpu_pct_acceptors),
                fig(r.cpu_pct_learners),
                r.ok,
                csv_field(r.error.as_deref().unwrap_or("")),
            );
        }
    }
    write_file(path, &s)
}

fn whiskers(series: &[Series], proto: Proto, f: &dyn Fn(&Run) -> f64) -> Vec<Whisker> {
    series
        .iter()
        .filter(|s| s.proto == proto)
        .filter_map(|s| {
            let (min, median, max) = s.spread(f)?;
            Some(Whisker {
                x: f64::from(s.learners),
                min,
                median,
                max,
            })
        })
        .collect()
}

fn perr(e: impl std::fmt::Display) -> String {
    format!("cannot draw the plot: {e}")
}

/// The panels' coordinates: learners on x, the figure on y.
type Chart<'a, 'b> = ChartContext<
    'a,
    BitMapBackend<'b>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Per protocol, its medians joined by a line and the min/max of the runs as whiskers, in
/// the protocol's colour.
fn draw_protocols(chart: &mut Chart<'_, '_>, data: &[(Proto, Vec<Whisker>)]) -> Result<(), String> {
    for (proto, w) in data {
        let color = match proto {
            Proto::RingPaxos => RGBColor(31, 119, 180),
            Proto::URing => RGBColor(214, 95, 14),
        };
        chart
            .draw_series(LineSeries::new(
                w.iter().map(|w| (w.x, w.median)),
                color.stroke_width(3),
            ))
            .map_err(perr)?
            .label(proto.title())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        chart
            .draw_series(
                w.iter().map(|w| {
                    ErrorBar::new_vertical(w.x, w.min, w.median, w.max, color.filled(), 10)
                }),
            )
            .map_err(perr)?;
    }
    Ok(())
}

/// Two panels like seed 003 fig 4: per-learner throughput of both protocols against the
/// number of learners, and their p50 latency.
fn write_plot(path: &Path, series: &[Series], limit_mbit: Option<f64>) -> Result<(), String> {
    plot::ensure_font()?;
    let root = BitMapBackend::new(path, (1100, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(perr)?;
    let root = root
        .titled(
            &format!(
                "Ring Paxos (UDP multicast) vs U-Ring Paxos, 3 acceptors, 8 KiB values, {} (cf. seed 003 fig 4)",
                limit_mbit.map_or("loopback".to_string(), |m| format!("{m:.0} Mbit/s LAN"))
            ),
            (FONT_FAMILY, 22).into_font().style(FontStyle::Bold),
        )
        .map_err(perr)?;
    let (upper, lower) = root.split_vertically(430);
    let x_range = 0.5..f64::from(MULTICAST_LEARNERS_MAX) + 0.5;
    let mbit: Vec<(Proto, Vec<Whisker>)> = Proto::ALL
        .iter()
        .map(|&p| (p, whiskers(series, p, &|r| r.mbit_per_s)))
        .collect();
    let top = mbit
        .iter()
        .flat_map(|(_, w)| w.iter().map(|w| w.max))
        .chain(limit_mbit)
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max)
        * 1.3;
    let mut chart = ChartBuilder::on(&upper)
        .caption(
            "Throughput per learner-only node (median of runs; whiskers: min and max)",
            (FONT_FAMILY, 18),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range.clone(), 0.0..top)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("learner-only nodes (besides the 3 acceptors, which learn too)")
        .y_desc("delivered Mbit/s per learner")
        .x_labels(MULTICAST_LEARNERS_MAX as usize)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FONT_FAMILY, 15))
        .axis_desc_style((FONT_FAMILY, 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(perr)?;
    draw_protocols(&mut chart, &mbit)?;
    if let Some(limit) = limit_mbit {
        let grey = RGBColor(120, 120, 120);
        chart
            .draw_series(LineSeries::new(
                [(x_range.start, limit), (x_range.end, limit)],
                grey.stroke_width(1),
            ))
            .map_err(perr)?
            .label("link rate of the emulated LAN")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], grey.stroke_width(1))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT_FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(perr)?;

    let lat: Vec<(Proto, Vec<Whisker>)> = Proto::ALL
        .iter()
        .map(|&p| (p, whiskers(series, p, &|r| r.latency_us_p50 / 1000.0)))
        .collect();
    let top = lat
        .iter()
        .flat_map(|(_, w)| w.iter().map(|w| w.max))
        .filter(|v| v.is_finite())
        .fold(0.1, f64::max)
        * 1.3;
    let mut chart = ChartBuilder::on(&lower)
        .caption(
            "p50 latency, propose to delivery at the proposer (median of runs)",
            (FONT_FAMILY, 18),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, 0.0..top)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("learner-only nodes")
        .y_desc("latency (ms)")
        .x_labels(MULTICAST_LEARNERS_MAX as usize)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .label_style((FONT_FAMILY, 15))
        .axis_desc_style((FONT_FAMILY, 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(perr)?;
    draw_protocols(&mut chart, &lat)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT_FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(perr)?;
    root.present().map_err(perr)?;
    Ok(())
}

/// Per-learner throughput with the most learners over that with one, for `proto`.
pub fn ratio_5_to_1(series: &[Series], proto: Proto) -> Option<f64> {
    let at = |l: u32| {
        series
            .iter()
            .find(|s| s.proto == proto && s.learners == l)
            .and_then(|s| s.med(|r| r.mbit_per_s))
    };
    let (one, most) = (at(1)?, at(MULTICAST_LEARNERS_MAX)?);
    (one > 0.0).then(|| most / one)
}

/// The figures a reader needs, as one table per protocol.
fn table(series: &[Series], limits: &Limits) -> String {
    let mut s = String::new();
    for proto in Proto::ALL {
        let _ = writeln!(s, "\n### {}\n", proto.title());
        let _ = writeln!(
            s,
            "| learners | values/s per learner | Mbit/s per learner | slowest learner | MTE vs {} | MTE vs UDP multicast limit | p50 latency | p99 latency | CPU % coordinator / acceptor / learner | runs ok |",
            match limits.link_mbit {
                Some(m) => format!("the {m:.0} Mbit/s link"),
                None => "TCP 17 Gbit/s".to_string(),
            }
        );
        let _ = writeln!(
            s,
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        );
        for sr in series.iter().filter(|x| x.proto == proto) {
            let m = |f: &dyn Fn(&Run) -> f64| sr.med(f);
            let cell = |v: Option<f64>, fmt: &dyn Fn(f64) -> String| v.map_or("failed".into(), fmt);
            let mbit = m(&|r| r.mbit_per_s);
            // The UDP probe bounds Ring Paxos' 2A stream only; U-Ring's hops are TCP.
            let udp_limit = match (proto, sr.learners) {
                (Proto::URing, _) => None,
                (Proto::RingPaxos, 1) => limits.udp_1,
                (Proto::RingPaxos, _) => limits.udp_5,
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} |",
                sr.learners,
                cell(m(&|r| r.values_per_s), &|v| group(v.round() as u64)),
                cell(mbit, &|v| format!("{v:.0}")),
                cell(m(&|r| r.mbit_per_s_min), &|v| format!("{v:.0}")),
                cell(mbit, &|v| format!(
                    "{:.1} %",
                    v / limits.mte_base_mbit() * 100.0
                )),
                match (mbit, udp_limit) {
                    (Some(v), Some(l)) if l > 0.0 => format!("{:.0} %", v / l * 100.0),
                    _ => "-".into(),
                },
                cell(m(&|r| r.latency_us_p50), &ms),
                cell(m(&|r| r.latency_us_p99), &ms),
                match (
                    m(&|r| r.cpu_pct_coordinator),
                    m(&|r| r.cpu_pct_acceptors),
                    m(&|r| r.cpu_pct_learners)
                ) {
                    (Some(c), Some(a), Some(l)) => format!("{c:.0} / {a:.0} / {l:.0}"),
                    _ => "-".into(),
                },
                sr.runs_ok(),
                sr.runs.len()
            );
        }
    }
    s
}

#[derive(Debug, Clone, Copy, Default)]
struct Limits {
    /// The UDP multicast probe, 1 and 5 receivers, Mbit/s per receiver.
    udp_1: Option<f64>,
    udp_5: Option<f64>,
    /// The emulated LAN's link rate; `None` = the loopback.
    link_mbit: Option<f64>,
}

impl Limits {
    fn network(&self) -> String {
        match self.link_mbit {
            Some(m) => format!("emulated {m:.0} Mbit/s LAN"),
            None => "loopback".to_string(),
        }
    }

    /// What MTE divides by: the link on a LAN, else the TCP loopback stream.
    fn mte_base_mbit(&self) -> f64 {
        self.link_mbit.unwrap_or(TCP_LOOPBACK_MBIT_PER_S)
    }
}

fn write_summary(
    path: &Path,
    args: &BenchArgs,
    window: u64,
    series: &[Series],
    limits: &Limits,
    date: &str,
) -> Result<(), HarnessError> {
    let mut s = String::new();
    let _ = writeln!(s, "# abcast bench multicast\n");
    let _ = writeln!(
        s,
        "Ring Paxos over UDP multicast vs U-Ring Paxos, 3 acceptors (each proposes and learns) \
         and 1 to {MULTICAST_LEARNERS_MAX} learner-only nodes, {} values (cf. seed 003 fig 4, \
         table 2).\n",
        bytes(MULTICAST_VALUE_SIZE_BYTES)
    );
    let _ = writeln!(s, "- Command: `{}`", command_line());
    let _ = writeln!(s, "- Date: {date}");
    let _ = writeln!(s, "- Machine: {}", machine());
    let _ = writeln!(
        s,
        "- Kernel socket buffer caps: net.core.rmem_max = {} bytes, net.core.wmem_max = {} \
         bytes (the multicast socket asks for 8 MiB with SO_RCVBUFFORCE)",
        sysctl("net.core.rmem_max"),
        sysctl("net.core.wmem_max")
    );
    let place = match limits.link_mbit {
        Some(m) => format!(
            "each in its own network namespace on an emulated switched LAN (a bridge; each \
             node's link shaped by `tc tbf` to {m:.0} Mbit/s each way, {} byte frames; see \
             `abcast-harness/src/bench/lan.rs`)",
            lan::LAN_MTU_BYTES
        ),
        None => "on 127.0.0.1".to_string(),
    };
    let _ = writeln!(
        s,
        "- Each point: real node processes {place}, every acceptor proposing with at \
         most {window} values in flight, {} s of load, {} run(s), rounds interleaved; \
         medians below, min/max as whiskers in `plot.png`; all runs in `results.csv`.",
        args.duration_s, args.runs
    );
    let _ = writeln!(
        s,
        "- Throughput is per learner-only node (median over them); latency is propose to \
         delivery at the proposing acceptors, merged."
    );
    let fmt_limit =
        |l: Option<f64>| l.map_or("not measured".to_string(), |v| format!("{v:.0} Mbit/s"));
    match limits.link_mbit {
        None => {
            let _ = writeln!(
                s,
                "- Loopback limits: one TCP stream about {TCP_LOOPBACK_MBIT_PER_S:.0} Mbit/s with large \
                 writes (guide, iperf3); UDP multicast of {PROBE_DATAGRAM_BYTES}-byte datagrams, one \
                 sender, measured here: {} per receiver with 1 receiver, {} with {MULTICAST_LEARNERS_MAX} \
                 receivers. MTE columns divide per-learner throughput by these (the UDP one by the \
                 limit with as many receivers as the point has, 1 or {MULTICAST_LEARNERS_MAX}).\n",
                fmt_limit(limits.udp_1),
                fmt_limit(limits.udp_5)
            );
        }
        Some(m) => {
            let _ = writeln!(
                s,
                "- Limits: the link, {m:.0} Mbit/s (seed 003 table 2 divides by it: MTE); UDP \
                 multicast of {PROBE_DATAGRAM_BYTES}-byte datagrams over the same LAN, one \
                 sender where the coordinator runs and no protocol, measured here: {} per \
                 receiver with 1 receiver, {} with {MULTICAST_LEARNERS_MAX} receivers.\n",
                fmt_limit(limits.udp_1),
                fmt_limit(limits.udp_5)
            );
        }
    }
    s += &table(series, limits);
    let _ = writeln!(s, "\n## Shape compared with seed 003 fig 4\n");
    for proto in Proto::ALL {
        match ratio_5_to_1(series, proto) {
            Some(r) => {
                let verdict = if proto == Proto::RingPaxos {
                    if r >= RATIO_TARGET {
                        format!(
                            "meets the target of {RATIO_TARGET} (flat within 15 %), as seed 003 fig 4 shows Ring Paxos flat in the number of receivers"
                        )
                    } else {
                        format!(
                            "misses the target of {RATIO_TARGET}: see the diagnosis in docs/benchmarks/multicast/summary.md"
                        )
                    }
                } else {
                    "for comparison".to_string()
                };
                let _ = writeln!(
                    s,
                    "- {}: per-learner throughput with {MULTICAST_LEARNERS_MAX} learners / with 1 = **{r:.2}**, {verdict}.",
                    proto.title()
                );
            }
            None => {
                let _ = writeln!(s, "- {}: no ratio (a point failed).", proto.title());
            }
        }
    }
    let failures: Vec<String> = series
        .iter()
        .flat_map(|sr| {
            sr.runs.iter().filter(|r| !r.ok).map(move |r| {
                format!(
                    "{} {} learners run {}: {}",
                    sr.proto.as_str(),
                    sr.learners,
                    r.run,
                    failure_reason(r.error.as_deref())
                )
            })
        })
        .collect();
    push_failed_runs(&mut s, &failures);
    write_file(path, &s)
}

/// `abcast bench multicast`: returns the exit status (0 when every run passed its checks).
pub fn run(args: &BenchArgs) -> Result<u8, HarnessError> {
    let window = match args.window_values.unwrap_or(MULTICAST_WINDOW_VALUES) {
        0 => None,
        w => Some(w),
    };
    let (stamp, date) = utc_now();
    let out = create_out_dir(args, "multicast", &stamp)?;
    // Removed when dropped, at the end of this function: it must outlive every run.
    let lan = emulated_lan(args)?;
    let limits = measure_limits(args, lan.as_ref());
    let (series, interrupted) = run_series(args, window, lan.as_ref())?;
    note_interrupted(interrupted);
    let window_n = window.unwrap_or(0);
    write_csv(&out.join("results.csv"), args, window_n, &series)?;
    // The loopback limits are tens of Gbit/s: drawn, they would flatten both curves into
    // the axis, so they are in the summary and the JSON line only. A LAN's link is drawn.
    if let Err(e) = write_plot(&out.join("plot.png"), &series, limits.link_mbit) {
        eprintln!("{e}");
    }
    write_summary(
        &out.join("summary.md"),
        args,
        window_n,
        &series,
        &limits,
        &date,
    )?;
    let all_ok = series.iter().all(|s| s.runs_ok() == s.runs.len());
    finish(
        args,
        || json_line(args, window, &series, &limits, &out, all_ok),
        || terminal_text(&series, &limits, &out),
        all_ok,
    )
}

/// With `--link-mbit`, the emulated LAN every node runs on; `None` on the loopback.
fn emulated_lan(args: &BenchArgs) -> Result<Option<EmulatedLan>, HarnessError> {
    let Some(mbit) = args.link_mbit else {
        return Ok(None);
    };
    let tag = format!("m{:05x}", random_u64(11) % 0x10_0000);
    let nodes = (MULTICAST_ACCEPTORS + MULTICAST_LEARNERS_MAX) as usize;
    let l = EmulatedLan::create(&tag, nodes, mbit).map_err(HarnessError::Runtime)?;
    eprintln!(
        "emulated LAN: {nodes} nodes in network namespaces abcast-{tag}-n*, links of \
         {mbit} Mbit/s each way (tc tbf), {} byte frames, bridge at {}",
        lan::LAN_MTU_BYTES,
        l.gateway
    );
    Ok(Some(l))
}

/// The network's limits with no protocol: the UDP multicast probe with 1 and with the
/// most receivers, and the LAN's link rate. A probe that fails is said and left out.
fn measure_limits(args: &BenchArgs, lan: Option<&EmulatedLan>) -> Limits {
    let probe = |n: usize| match udp_multicast_limit_mbit_per_s(
        n,
        PROBE_DATAGRAM_BYTES,
        PROBE_DURATION,
        lan,
    ) {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("{e}");
            None
        }
    };
    let limits = Limits {
        udp_1: probe(1),
        udp_5: probe(MULTICAST_LEARNERS_MAX as usize),
        link_mbit: args.link_mbit.map(f64::from),
    };
    eprintln!(
        "UDP multicast limit on the {} (no protocol): {:?} Mbit/s with 1 receiver, {:?} with {MULTICAST_LEARNERS_MAX}",
        limits.network(),
        limits.udp_1.map(|v| v.round()),
        limits.udp_5.map(|v| v.round())
    );
    limits
}

/// Runs every point of both protocols `--runs` times, interleaved (round r runs every
/// point once), until Ctrl-C; returns the runs and whether Ctrl-C stopped them.
fn run_series(
    args: &BenchArgs,
    window: Option<u64>,
    lan: Option<&EmulatedLan>,
) -> Result<(Vec<Series>, bool), HarnessError> {
    let mut series: Vec<Series> = (1..=MULTICAST_LEARNERS_MAX)
        .flat_map(|l| {
            Proto::ALL.into_iter().map(move |proto| Series {
                proto,
                learners: l,
                runs: Vec::new(),
            })
        })
        .collect();
    let total = series.len() as u32 * args.runs;
    let mut done = 0u32;
    let mut interrupted = false;
    'runs: for run in 1..=args.runs {
        for sr in &mut series {
            if interrupted {
                break 'runs;
            }
            done += 1;
            let label = format!(
                "[{done}/{total}] {} {} learner(s) run {run}",
                sr.proto.as_str(),
                sr.learners
            );
            let spec = point_spec(sr, args, window, u64::from(done), label.clone(), lan);
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
                    "{label}: {} values/s, {:.0} Mbit/s per learner (slowest {:.0}), p50 {}, CPU coordinator {:.0} %, learners {:.0} %",
                    group(figures.values_per_s.round() as u64),
                    figures.mbit_per_s,
                    figures.mbit_per_s_min,
                    ms(figures.latency_us_p50),
                    figures.cpu_pct_coordinator,
                    figures.cpu_pct_learners,
                );
            }
            sr.runs.push(figures);
        }
    }
    Ok((series, interrupted))
}

/// The cluster of one run of `sr`: 3 acceptors and its learners, saturating their window;
/// on a LAN each node in its namespace. `salt` makes the run's cluster id and group port.
fn point_spec(
    sr: &Series,
    args: &BenchArgs,
    window: Option<u64>,
    salt: u64,
    label: String,
    lan: Option<&EmulatedLan>,
) -> ClusterSpec {
    ClusterSpec {
        nodes: MULTICAST_ACCEPTORS + sr.learners,
        value_size_bytes: MULTICAST_VALUE_SIZE_BYTES,
        duration_s: args.duration_s,
        rate_values_per_s: 0,
        window_values: window,
        kill: false,
        config_edits: config_edits(sr.proto, sr.learners, salt, lan.is_some()),
        keep_dir: false,
        progress: !args.json,
        label,
        program: None,
        load_rates: None,
        learners_differ: false,
        placement: lan.map_or_else(Vec::new, |l| {
            l.nodes
                .iter()
                .take((MULTICAST_ACCEPTORS + sr.learners) as usize)
                .map(|n| cluster::NodePlace {
                    netns_path: n.netns_path(),
                    addr: n.addr,
                })
                .collect()
        }),
        load_at_leader: false,
        stamp_values: false,
    }
}

/// The `--json` line: the setup, the limits, the headline ratio and every point's medians.
fn json_line(
    args: &BenchArgs,
    window: Option<u64>,
    series: &[Series],
    limits: &Limits,
    out: &Path,
    all_ok: bool,
) -> serde_json::Value {
    let points: Vec<serde_json::Value> = series
        .iter()
        .map(|sr| {
            let m = |f: &dyn Fn(&Run) -> f64| sr.med(f);
            json!({
                "protocol": sr.proto.as_str(),
                "learners": sr.learners,
                "nodes": MULTICAST_ACCEPTORS + sr.learners,
                "values_per_s_per_learner": m(&|r| r.values_per_s),
                "mbit_per_s_per_learner": m(&|r| r.mbit_per_s),
                "mbit_per_s_slowest_learner": m(&|r| r.mbit_per_s_min),
                "mte": m(&|r| r.mbit_per_s / limits.mte_base_mbit()),
                "latency_us_p50": m(&|r| r.latency_us_p50),
                "latency_us_p99": m(&|r| r.latency_us_p99),
                "cpu_pct_coordinator": m(&|r| r.cpu_pct_coordinator),
                "cpu_pct_learners": m(&|r| r.cpu_pct_learners),
                "runs": sr.runs.len(),
                "runs_ok": sr.runs_ok(),
            })
        })
        .collect();
    json!({
        "bench": "multicast",
        "figure": "seed 003 fig 4 and table 2",
        "runs": args.runs,
        "duration_s": args.duration_s,
        "value_size_bytes": MULTICAST_VALUE_SIZE_BYTES,
        "window_values": window,
        "network": limits.network(),
        "link_mbit_per_s": limits.link_mbit,
        "mte_base_mbit_per_s": limits.mte_base_mbit(),
        "tcp_loopback_limit_mbit_per_s": TCP_LOOPBACK_MBIT_PER_S,
        "udp_multicast_limit_mbit_per_s_1_receiver": limits.udp_1,
        "udp_multicast_limit_mbit_per_s_5_receivers": limits.udp_5,
        "learner_throughput_ratio_5_to_1": ratio_5_to_1(series, Proto::RingPaxos),
        "uring_learner_throughput_ratio_5_to_1": ratio_5_to_1(series, Proto::URing),
        "ratio_target": RATIO_TARGET,
        "out_dir": out.display().to_string(),
        "all_runs_ok": all_ok,
        "points": points,
    })
}

/// What a run without `--json` prints: both protocols' tables and the headline ratio.
fn terminal_text(series: &[Series], limits: &Limits, out: &Path) -> String {
    format!(
        "Ring Paxos (UDP multicast) vs U-Ring Paxos, per learner\n{}\nlearner_throughput_ratio_5_to_1 = {}\n\nResults in {}\n  (results.csv, plot.png, summary.md)\n",
        table(series, limits),
        ratio_5_to_1(series, Proto::RingPaxos).map_or("n/a".to_string(), |r| format!("{r:.3}")),
        out.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_edits_make_learners_and_pick_the_protocol() {
        let e = config_edits(Proto::RingPaxos, 2, 1, false);
        let keys: Vec<&str> = e.iter().map(|(k, _)| k.as_str()).collect();
        assert!(keys.contains(&"members[3].roles") && keys.contains(&"members[4].roles"));
        assert!(!keys.contains(&"members[5].roles"));
        assert!(keys.contains(&"protocol") && keys.contains(&"multicast.group"));
        let u = config_edits(Proto::URing, 1, 1, true);
        assert!(
            !u.iter()
                .any(|(k, _)| k == "protocol" || k == "multicast.group")
        );
        // The edits produce a config the node accepts.
        let mut t: toml::Table = abcast_node::nodeconfig::local_cluster(5, 7400)
            .parse()
            .unwrap();
        for (k, v) in e {
            cluster::set_toml_key(&mut t, &k, v).unwrap();
        }
        let c =
            abcast_node::nodeconfig::parse(&toml::to_string(&t).unwrap(), Some(4), Path::new("/"))
                .unwrap();
        assert_eq!(c.protocol, abcast_node::nodeconfig::ProtocolKind::RingPaxos);
        assert!(c.transport.multicast.is_some());
        assert!(!c.ringpaxos.unwrap().members[4].roles.acceptor);
        // On an emulated LAN each node's route picks its interface; U-Ring has none.
        let lan = config_edits(Proto::RingPaxos, 1, 1, true);
        assert!(
            lan.iter()
                .any(|(k, v)| k == "multicast.interface" && v.as_str() == Some("0.0.0.0"))
        );
        assert!(!u.iter().any(|(k, _)| k == "multicast.interface"));
    }

    #[test]
    fn ratio_is_most_learners_over_one() {
        let run = |mbit: f64| Run {
            run: 1,
            values_per_s: mbit,
            mbit_per_s: mbit,
            mbit_per_s_min: mbit,
            latency_us_p50: 1.0,
            latency_us_p99: 1.0,
            cpu_pct_coordinator: 1.0,
            cpu_pct_acceptors: 1.0,
            cpu_pct_learners: 1.0,
            ok: true,
            error: None,
        };
        let s = |l: u32, mbit: f64| Series {
            proto: Proto::RingPaxos,
            learners: l,
            runs: vec![run(mbit)],
        };
        let series = [s(1, 1000.0), s(MULTICAST_LEARNERS_MAX, 900.0)];
        assert_eq!(ratio_5_to_1(&series, Proto::RingPaxos), Some(0.9));
        assert_eq!(ratio_5_to_1(&series, Proto::URing), None);
    }
}
