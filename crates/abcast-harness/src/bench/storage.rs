//! `abcast bench storage`: the acceptor storage back-ends compared, seed 000 figure 3.6 on
//! this machine.
//!
//! Each point is one back-end (`[storage] kind` and `sync`: none, memory, durable with
//! `sync = false`, durable with `sync = true`) at one value size (1 .. 32 KiB), on a ring of
//! 3 nodes that all propose, accept and learn, every proposer keeping its window full.
//! Figures per run: delivered values/s and Mbit/s (median over the learners), latency from
//! propose to delivery at the proposers, CPU per node, CPU per delivered MiB and, for the
//! durable back-ends, the bytes each acceptor appends to its log per second.
//!
//! The headline figure is `sync_to_memory_ratio_8k`: durable with fdatasync over memory, in
//! delivered Mbit/s at 8 KiB (medians). Issue 4 asks for at least [`RATIO_TARGET`], which
//! group commit makes possible: the driver gathers the votes of one event-loop iteration and
//! makes them durable with one vectored write and one fdatasync before any message that
//! depends on them leaves (`abcast-runtime/src/driver.rs`, "Group commit"), so the cost of an fdatasync
//! is shared by every value of the batch instead of paid per value.
//!
//! Runs are interleaved (round r runs every point once, the four back-ends of one size side
//! by side) so the drift of a shared machine spreads over all points and hits the back-ends
//! of a ratio alike. Each run is a full [`crate::cluster::run_cluster`], so agreement, loss and
//! duplicates are checked every time. The nodes' data directories are under the system's
//! temporary directory; the summary names its device and file system, since a `tmpfs` there
//! would make the durable points measure memory.

use super::output::{
    command_line, create_out_dir, csv_field, failure_reason, finish, note_interrupted,
    push_failed_runs, write_file,
};
use super::{BenchArgs, checks_failed, machine};
use crate::analysis;
use crate::cluster;
use crate::cluster::{ClusterSpec, NodeRecord};
use crate::error::HarnessError;
use crate::format::utc_now;
use crate::format::{bytes, group, ms};
use crate::plot::{self, FONT_FAMILY, KeyedAxis, PALETTE, ValueAxis, Whisker};
use abcast_node::stats::{LineKind, median};
use plotters::prelude::*;
use plotters::style::FontStyle;
use serde_json::json;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Nodes in the ring; each proposes, accepts and learns.
pub const STORAGE_NODES: u32 = 3;
/// The value sizes of the sweep (seed 000 fig 3.6: 1 KiB to 32 KiB).
pub const VALUE_SIZES: [u64; 6] = [1 << 10, 2 << 10, 4 << 10, 8 << 10, 16 << 10, 32 << 10];
/// Values each proposer keeps in flight: enough that every back-end runs at what it can
/// write. With a small window, throughput is the window over the latency (Little's law),
/// and a synced value's path holds two fdatasyncs: 64 values measured the fdatasync
/// latency, not the back-end (at 8 KiB, durable rose from 2.0 to 2.4 Gbit/s from 64 to 256
/// values, memory from 4.3 to 5.2; 1024 added nothing more to either).
pub const STORAGE_WINDOW_VALUES: u64 = 1024;
/// Seconds left out at the start of a run: the in-memory stores first fill up to their
/// capacity (1 GiB per node), each page of it faulted in and zeroed by the kernel (half of
/// all CPU in a profile); at 8 KiB memory measured 2.0 Gbit/s over an 8 s run and 5.2 over
/// a 30 s one. After that, freed buffers are reused. Half the run if it is shorter.
pub const STORAGE_WARMUP_S: f64 = 10.0;

fn storage_warmup_s(duration_s: f64) -> f64 {
    STORAGE_WARMUP_S.min(duration_s / 2.0)
}
/// The value size of the headline ratio.
pub const RATIO_VALUE_SIZE: u64 = 8 << 10;
/// Issue 4: durable with `sync = true` delivers at least half the memory back-end's rate.
pub const RATIO_TARGET: f64 = 0.5;
/// fdatasyncs of the disk probe, and the size of each append.
const PROBE_SYNCS: usize = 200;
const PROBE_APPEND_BYTES: usize = 8 << 10;

const MIB: f64 = (1u64 << 20) as f64;

/// An acceptor storage back-end, as `abcast demo --storage` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    None,
    Memory,
    DurableNoSync,
    DurableSync,
}

impl Backend {
    pub const ALL: [Backend; 4] = [
        Backend::None,
        Backend::Memory,
        Backend::DurableNoSync,
        Backend::DurableSync,
    ];

    /// The `--storage` name, which [`crate::cluster::storage_edits`] maps to the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::None => "none",
            Backend::Memory => "memory",
            Backend::DurableNoSync => "durable-nosync",
            Backend::DurableSync => "durable",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Backend::None => "none (undecided votes only)",
            Backend::Memory => "memory (bounded log)",
            Backend::DurableNoSync => "durable, sync = false",
            Backend::DurableSync => "durable, sync = true (fdatasync)",
        }
    }

    fn is_durable(self) -> bool {
        matches!(self, Backend::DurableNoSync | Backend::DurableSync)
    }

    fn color(self) -> RGBColor {
        match self {
            Backend::None => PALETTE[7],
            Backend::Memory => PALETTE[0],
            Backend::DurableNoSync => PALETTE[2],
            Backend::DurableSync => PALETTE[4],
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Run {
    pub run: u32,
    /// Median over the learners (every node).
    pub values_per_s: f64,
    pub mbit_per_s: f64,
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    /// User + system CPU over wall time, mean over the nodes; 100 = one core (user + sys ms
    /// per second of run, divided by 10).
    pub cpu_pct_per_node: f64,
    /// CPU ms of the average node per MiB of payload delivered (whole lives of the nodes).
    pub cpu_ms_per_mib: f64,
    /// How fast each acceptor's log grows while loaded, MiB/s, mean over the nodes (0 for
    /// the back-ends without a log on disk).
    pub log_mib_per_s: f64,
    /// The log on disk when the node stopped, MiB, mean over the nodes.
    pub log_mib_final: f64,
    pub ok: bool,
    /// Why the run could not complete (such a run has no figures).
    pub error: Option<String>,
}

/// All runs of one back-end at one value size.
#[derive(Debug, Clone)]
pub struct Series {
    pub backend: Backend,
    pub value_size: u64,
    pub runs: Vec<Run>,
}

impl Series {
    fn good(&self) -> impl Iterator<Item = &Run> {
        self.runs.iter().filter(|r| r.error.is_none())
    }
    /// (min, median, max) of a figure over the runs that completed.
    pub fn spread(&self, f: impl Fn(&Run) -> f64) -> Option<(f64, f64, f64)> {
        let v: Vec<f64> = self.good().map(f).filter(|v| v.is_finite()).collect();
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

/// Every point of the sweep in the order one round runs them: by value size, and the four
/// back-ends of a size next to each other.
pub fn points() -> Vec<Series> {
    VALUE_SIZES
        .iter()
        .flat_map(|&value_size| {
            Backend::ALL.into_iter().map(move |backend| Series {
                backend,
                value_size,
                runs: Vec::new(),
            })
        })
        .collect()
}

/// The median Mbit/s of `backend` at `value_size`.
pub fn mbit_at(series: &[Series], backend: Backend, value_size: u64) -> Option<f64> {
    series
        .iter()
        .find(|s| s.backend == backend && s.value_size == value_size)
        .and_then(|s| s.med(|r| r.mbit_per_s))
}

/// Durable with fdatasync over memory, in median delivered Mbit/s at `value_size`.
pub fn sync_to_memory_ratio(series: &[Series], value_size: u64) -> Option<f64> {
    let memory = mbit_at(series, Backend::Memory, value_size)?;
    let sync = mbit_at(series, Backend::DurableSync, value_size)?;
    (memory > 0.0).then(|| sync / memory)
}

/// CPU ms of the average node per MiB delivered: `cpu_ms_total` over all `nodes`, and the
/// payload bytes one learner delivered. `None` when nothing was delivered.
pub fn cpu_ms_per_mib(cpu_ms_total: u64, nodes: u32, delivered_bytes: u64) -> Option<f64> {
    if nodes == 0 || delivered_bytes == 0 {
        return None;
    }
    Some(cpu_ms_total as f64 / f64::from(nodes) / (delivered_bytes as f64 / MIB))
}

/// How fast a node appended to its acceptor log, bytes/s, over the same window as the
/// throughput figures: the periodic stats lines from `warmup_s` to `stop_at_s`, per
/// incarnation (`log_appended_bytes`: trimming shrinks the log on disk, not this).
pub fn log_bytes_per_s(record: &NodeRecord, warmup_s: f64, stop_at_s: f64) -> Option<f64> {
    let mut grown = 0u64;
    let mut time_us = 0u64;
    for inc in &record.incarnations {
        let mut window = inc.samples.iter().filter(|s| {
            s.at_s >= warmup_s && s.at_s <= stop_at_s && s.line.kind == LineKind::Stats
        });
        let Some(first) = window.next() else {
            continue;
        };
        if let Some(last) = window.next_back() {
            grown += last
                .line
                .log_appended_bytes
                .saturating_sub(first.line.log_appended_bytes);
            time_us += last.line.t_us.saturating_sub(first.line.t_us);
        }
    }
    (time_us > 0).then(|| grown as f64 / (time_us as f64 / 1e6))
}

fn measure(spec: &ClusterSpec, run: u32) -> Result<(Run, bool), HarnessError> {
    let cluster_run = cluster::run_cluster(spec)?;
    let warmup_s = storage_warmup_s(spec.duration_s);
    let r = analysis::analyse_from(&cluster_run, warmup_s);
    let nodes = cluster_run.nodes.len() as u32;
    let mut cpu_ms_total = 0u64;
    let mut delivered_bytes = 0u64;
    let mut log_rates = Vec::new();
    let mut log_final = Vec::new();
    for record in &cluster_run.nodes {
        for inc in &record.incarnations {
            if let Some(last) = inc.last() {
                cpu_ms_total += last.cpu_user_ms + last.cpu_sys_ms;
            }
        }
        if let Some(last) = record.incarnations.last().and_then(|i| i.last()) {
            delivered_bytes = delivered_bytes.max(last.delivered_bytes);
            log_final.push(last.log_bytes as f64 / MIB);
        }
        log_rates
            .push(log_bytes_per_s(record, warmup_s, cluster_run.stop_at_s).unwrap_or(0.0) / MIB);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let cpu: Vec<f64> = r.per_node.iter().map(|n| n.cpu_pct).collect();
    let ok = r.ok();
    if let Some(why) = checks_failed(&r) {
        eprintln!("{}: checks FAILED: {why}", spec.label);
    }
    Ok((
        Run {
            run,
            values_per_s: r.values_per_s,
            mbit_per_s: r.mbit_per_s,
            latency_us_p50: r.latency.p50_us,
            latency_us_p99: r.latency.p99_us,
            cpu_pct_per_node: mean(&cpu),
            cpu_ms_per_mib: cpu_ms_per_mib(cpu_ms_total, nodes, delivered_bytes)
                .unwrap_or(f64::NAN),
            log_mib_per_s: mean(&log_rates),
            log_mib_final: mean(&log_final),
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
        latency_us_p50: f64::NAN,
        latency_us_p99: f64::NAN,
        cpu_pct_per_node: f64::NAN,
        cpu_ms_per_mib: f64::NAN,
        log_mib_per_s: f64::NAN,
        log_mib_final: f64::NAN,
        ok: false,
        error: Some(e.to_string().lines().next().unwrap_or("").to_string()),
    }
}

// ---------------------------------------------------------------------------------------
// The disk under the data directories

/// One line of `/proc/mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub device: String,
    pub mount_point: String,
    pub fs_type: String,
    pub options: String,
}

/// `/proc/mounts` writes space, tab, newline and backslash in octal (`\040`).
fn unescape_mount_field(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(pos) = rest.find('\\') {
        out.push_str(&rest[..pos]);
        let code = rest.get(pos + 1..pos + 4);
        match code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            Some(b) => {
                out.push(char::from(b));
                rest = &rest[pos + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[pos + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The mount that holds `path` (absolute, symlinks resolved): the one with the longest
/// mount point that is `path` or a parent of it; of equal ones the last mounted.
pub fn mount_of(path: &Path, mounts: &str) -> Option<Mount> {
    let mut best: Option<Mount> = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [device, mount_point, fs_type, options, ..] = f[..] else {
            continue;
        };
        let mount_point = unescape_mount_field(mount_point);
        if !path.starts_with(&mount_point) {
            continue;
        }
        if best
            .as_ref()
            .is_some_and(|b| b.mount_point.len() > mount_point.len())
        {
            continue;
        }
        best = Some(Mount {
            device: unescape_mount_field(device),
            mount_point,
            fs_type: fs_type.to_string(),
            options: options.to_string(),
        });
    }
    best
}

/// File systems that live in memory: a durable log there never reaches a disk.
pub fn in_memory_fs(fs_type: &str) -> bool {
    matches!(fs_type, "tmpfs" | "ramfs")
}

/// Where the runs keep their data, and on what.
#[derive(Debug, Clone)]
struct Disk {
    dir: PathBuf,
    mount: Option<Mount>,
    /// `df -P -h DIR`, its last line, if `df` ran.
    df: Option<String>,
    /// fdatasync after an 8 KiB append to a fresh file in `dir`: (p50, p99) µs.
    fdatasync_us: Option<(f64, f64)>,
}

impl Disk {
    fn describe(&self) -> String {
        let on = match &self.mount {
            Some(m) => format!(
                "{} mounted on {} ({}, {})",
                m.device, m.mount_point, m.fs_type, m.options
            ),
            None => "an unknown file system (/proc/mounts unreadable)".to_string(),
        };
        let df = self
            .df
            .as_ref()
            .map_or(String::new(), |d| format!("; df: `{d}`"));
        format!("{} on {on}{df}", self.dir.display())
    }
}

/// Appends `PROBE_APPEND_BYTES` and fdatasyncs, `PROBE_SYNCS` times, in a fresh file in
/// `dir`: what one group commit costs at the least on this disk.
fn fdatasync_probe(dir: &Path) -> Result<(f64, f64), String> {
    let path = dir.join(format!("abcast-fdatasync-probe-{}", std::process::id()));
    let err = |e: std::io::Error| format!("fdatasync probe in {}: {e}", dir.display());
    let mut f = fs::File::create(&path).map_err(err)?;
    let block = vec![0x5au8; PROBE_APPEND_BYTES];
    let mut us = Vec::with_capacity(PROBE_SYNCS);
    let result = (|| {
        for _ in 0..PROBE_SYNCS {
            let t = Instant::now();
            f.write_all(&block)?;
            f.sync_data()?;
            us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok::<(), std::io::Error>(())
    })();
    let _ = fs::remove_file(&path);
    result.map_err(err)?;
    us.sort_by(f64::total_cmp);
    let p50 = median(&us).unwrap_or(f64::NAN);
    let p99 = us
        .get((us.len() * 99 / 100).min(us.len().saturating_sub(1)))
        .copied()
        .unwrap_or(f64::NAN);
    Ok((p50, p99))
}

fn disk() -> Disk {
    let tmp = std::env::temp_dir();
    let dir = fs::canonicalize(&tmp).unwrap_or(tmp);
    let mount = fs::read_to_string("/proc/mounts")
        .ok()
        .and_then(|m| mount_of(&dir, &m));
    let df = std::process::Command::new("df")
        .arg("-P")
        .arg("-h")
        .arg(&dir)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .last()
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        });
    let fdatasync_us = match fdatasync_probe(&dir) {
        Ok(v) => Some(v),
        Err(e) => {
            eprintln!("{e}");
            None
        }
    };
    Disk {
        dir,
        mount,
        df,
        fdatasync_us,
    }
}

// ---------------------------------------------------------------------------------------
// Output

const CSV_HEADER: &str = "experiment,backend,storage_kind,sync,value_size_bytes,nodes,run,\
     window_values,duration_s,values_per_s,mbit_per_s,latency_us_p50,latency_us_p99,\
     cpu_pct_per_node,cpu_ms_per_mib,log_mib_per_s_per_node,log_mib_final_per_node,ok,error";

/// The CSV of every run: one row per run, figures empty for a run that did not complete.
pub fn csv_text(duration_s: f64, window: u64, series: &[Series]) -> String {
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for sr in series {
        let (kind, sync) = match sr.backend {
            Backend::None => ("none", ""),
            Backend::Memory => ("memory", ""),
            Backend::DurableNoSync => ("durable", "false"),
            Backend::DurableSync => ("durable", "true"),
        };
        for r in &sr.runs {
            let fig = |v: f64| {
                if r.error.is_some() || !v.is_finite() {
                    String::new()
                } else {
                    format!("{v:.3}")
                }
            };
            let _ = writeln!(
                s,
                "storage,{},{kind},{sync},{},{STORAGE_NODES},{},{window},{duration_s},{},{},{},{},{},{},{},{},{},{}",
                sr.backend.as_str(),
                sr.value_size,
                r.run,
                fig(r.values_per_s),
                fig(r.mbit_per_s),
                fig(r.latency_us_p50),
                fig(r.latency_us_p99),
                fig(r.cpu_pct_per_node),
                fig(r.cpu_ms_per_mib),
                fig(r.log_mib_per_s),
                fig(r.log_mib_final),
                r.ok,
                csv_field(r.error.as_deref().unwrap_or("")),
            );
        }
    }
    s
}

fn perr(e: impl std::fmt::Display) -> String {
    format!("cannot draw the plot: {e}")
}

type Chart<'a, 'b> = ChartContext<'a, BitMapBackend<'b>, Cartesian2d<KeyedAxis, ValueAxis>>;

fn x_of(value_size: u64) -> f64 {
    (value_size.max(1) as f64).log2()
}

fn whiskers(series: &[Series], backend: Backend, f: &dyn Fn(&Run) -> f64) -> Vec<Whisker> {
    series
        .iter()
        .filter(|s| s.backend == backend)
        .filter_map(|s| {
            let (min, median, max) = s.spread(f)?;
            Some(Whisker {
                x: x_of(s.value_size),
                min,
                median,
                max,
            })
        })
        .collect()
}

/// Per back-end, its medians joined by a line and min/max of the runs as whiskers.
fn draw_backends(
    chart: &mut Chart<'_, '_>,
    data: &[(Backend, Vec<Whisker>)],
) -> Result<(), String> {
    for (backend, w) in data {
        let color = backend.color();
        chart
            .draw_series(LineSeries::new(
                w.iter().map(|w| (w.x, w.median)),
                color.stroke_width(3),
            ))
            .map_err(perr)?
            .label(backend.title())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
        chart
            .draw_series(
                w.iter()
                    .map(|w| Circle::new((w.x, w.median), 4, color.filled())),
            )
            .map_err(perr)?;
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

/// Two panels like seed 000 fig 3.6: delivered Mbit/s of every back-end against the value
/// size (log2 axis), and their p50 latency.
fn write_plot(path: &Path, series: &[Series], window: u64) -> Result<(), String> {
    plot::ensure_font()?;
    let keys: Vec<f64> = VALUE_SIZES.iter().map(|&b| x_of(b)).collect();
    let x_axis = || KeyedAxis::around(&keys).ok_or_else(|| perr("no value size"));
    let x_label = |x: &f64| bytes(2f64.powf(*x).round() as u64);
    let root = BitMapBackend::new(path, (1100, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(perr)?;
    let root = root
        .titled(
            &format!(
                "Acceptor storage back-ends, {STORAGE_NODES} nodes, window {window} (cf. seed 000 fig 3.6)"
            ),
            (FONT_FAMILY, 22).into_font().style(FontStyle::Bold),
        )
        .map_err(perr)?;
    let (upper, lower) = root.split_vertically(440);

    let mbit: Vec<(Backend, Vec<Whisker>)> = Backend::ALL
        .iter()
        .map(|&b| (b, whiskers(series, b, &|r| r.mbit_per_s)))
        .collect();
    let top = mbit
        .iter()
        .flat_map(|(_, w)| w.iter().map(|w| w.max))
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max)
        * 1.45;
    let mut chart = ChartBuilder::on(&upper)
        .caption(
            "Delivered throughput per learner (median of runs; whiskers: min and max)",
            (FONT_FAMILY, 18),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(x_axis()?, ValueAxis::linear(top))
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("value size (log2 scale)")
        .y_desc("delivered Mbit/s")
        .x_label_formatter(&x_label)
        .y_label_formatter(&|y| format!("{y:.0}"))
        .label_style((FONT_FAMILY, 15))
        .axis_desc_style((FONT_FAMILY, 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(perr)?;
    draw_backends(&mut chart, &mbit)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT_FAMILY, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(perr)?;

    let lat: Vec<(Backend, Vec<Whisker>)> = Backend::ALL
        .iter()
        .map(|&b| (b, whiskers(series, b, &|r| r.latency_us_p50 / 1000.0)))
        .collect();
    let values: Vec<f64> = lat
        .iter()
        .flat_map(|(_, w)| w.iter().flat_map(|w| [w.min, w.median, w.max]))
        .collect();
    let lat_axis = ValueAxis::for_values(&values);
    let lat_desc = if lat_axis.is_log() {
        "latency (ms, log scale)"
    } else {
        "latency (ms)"
    };
    let mut chart = ChartBuilder::on(&lower)
        .caption(
            "p50 latency, propose to delivery at the proposer (median of runs)",
            (FONT_FAMILY, 18),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(x_axis()?, lat_axis)
        .map_err(perr)?;
    chart
        .configure_mesh()
        .x_desc("value size (log2 scale)")
        .y_desc(lat_desc)
        .x_label_formatter(&x_label)
        .y_label_formatter(&|y| plot::short_number(*y))
        .label_style((FONT_FAMILY, 15))
        .axis_desc_style((FONT_FAMILY, 16))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(perr)?;
    draw_backends(&mut chart, &lat)?;
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

fn ratio_text(r: Option<f64>) -> String {
    r.map_or("n/a".to_string(), |r| format!("{r:.2}"))
}

/// Delivered Mbit/s by value size (rows) and back-end (columns), and the ratio sync/memory.
fn pivot(series: &[Series]) -> String {
    let mut s = String::from("| value size |");
    for b in Backend::ALL {
        let _ = write!(s, " {} |", b.title());
    }
    s += " durable sync / memory |\n| ---: |";
    for _ in Backend::ALL {
        s += " ---: |";
    }
    s += " ---: |\n";
    for size in VALUE_SIZES {
        let _ = write!(s, "| {} |", bytes(size));
        for b in Backend::ALL {
            let cell = mbit_at(series, b, size).map_or("failed".to_string(), |v| format!("{v:.0}"));
            let _ = write!(s, " {cell} |");
        }
        let _ = writeln!(s, " {} |", ratio_text(sync_to_memory_ratio(series, size)));
    }
    s
}

/// Every median of every point.
fn table(series: &[Series]) -> String {
    let mut s = String::from(
        "| value size | back-end | values/s | Mbit/s | p50 latency | p99 latency | CPU % per node | CPU ms per MiB | log MiB/s per node | runs ok |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for sr in series {
        let m = |f: &dyn Fn(&Run) -> f64| sr.med(f);
        let cell = |v: Option<f64>, fmt: &dyn Fn(f64) -> String| v.map_or("failed".into(), fmt);
        let log = if sr.backend.is_durable() {
            cell(m(&|r| r.log_mib_per_s), &|v| format!("{v:.1}"))
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {log} | {}/{} |",
            bytes(sr.value_size),
            sr.backend.as_str(),
            cell(m(&|r| r.values_per_s), &|v| group(v.round() as u64)),
            cell(m(&|r| r.mbit_per_s), &|v| format!("{v:.0}")),
            cell(m(&|r| r.latency_us_p50), &ms),
            cell(m(&|r| r.latency_us_p99), &ms),
            cell(m(&|r| r.cpu_pct_per_node), &|v| format!("{v:.0}")),
            cell(m(&|r| r.cpu_ms_per_mib), &|v| format!("{v:.1}")),
            sr.runs_ok(),
            sr.runs.len()
        );
    }
    s
}

fn verdict(ratio: Option<f64>) -> String {
    match ratio {
        Some(r) if r >= RATIO_TARGET => {
            format!("**{r:.2}**: meets the target of at least {RATIO_TARGET}")
        }
        Some(r) => format!("**{r:.2}**: misses the target of at least {RATIO_TARGET}"),
        None => "not measured (a point failed)".to_string(),
    }
}

fn write_summary(
    path: &Path,
    args: &BenchArgs,
    window: u64,
    series: &[Series],
    disk: &Disk,
    date: &str,
) -> Result<(), HarnessError> {
    let ratio = sync_to_memory_ratio(series, RATIO_VALUE_SIZE);
    let mut s = String::new();
    let _ = writeln!(s, "# abcast bench storage\n");
    let _ = writeln!(
        s,
        "Acceptor storage back-ends compared on a ring of {STORAGE_NODES} nodes (each proposes, \
         accepts and learns), values of {} to {} (cf. seed 000 fig 3.6).\n",
        bytes(VALUE_SIZES[0]),
        bytes(VALUE_SIZES[VALUE_SIZES.len() - 1])
    );
    let _ = writeln!(s, "- Command: `{}`", command_line());
    let _ = writeln!(s, "- Date: {date}");
    let _ = writeln!(s, "- Machine: {}", machine());
    let _ = writeln!(s, "- Data directories: {}", disk.describe());
    if disk
        .mount
        .as_ref()
        .is_some_and(|m| in_memory_fs(&m.fs_type))
    {
        let _ = writeln!(
            s,
            "- **Warning**: the data directories are on a file system in memory, so the \
             durable points do not measure a disk. Set TMPDIR to a directory on a disk."
        );
    }
    if let Some((p50, p99)) = disk.fdatasync_us {
        let _ = writeln!(
            s,
            "- fdatasync after an append of {} to a fresh file there ({PROBE_SYNCS} times, no \
             protocol): p50 {}, p99 {}.",
            bytes(PROBE_APPEND_BYTES as u64),
            ms(p50),
            ms(p99)
        );
    }
    let _ = writeln!(
        s,
        "- Each point: real node processes on 127.0.0.1, every node proposing with at most \
         {window} values in flight, {} s of load, {} run(s), rounds interleaved (each round runs \
         every point once, the four back-ends of a size one after the other); medians below, \
         min/max as whiskers in `plot.png`; all runs in `results.csv`.",
        args.duration_s, args.runs
    );
    let _ = writeln!(
        s,
        "- Back-ends (`[storage]` of the node config): `none` keeps only undecided votes \
         (benchmarks only); `memory` a bounded log in memory; `durable` a log of checked \
         records on disk, written through the OS with `sync = false` (survives a process \
         crash) or, with `sync = true`, written around the page cache (`O_DIRECT`) and made \
         durable with fdatasync before any vote leaves (survives a machine crash)."
    );
    let _ = writeln!(
        s,
        "- Throughput is delivered payload per learner (median over the nodes) after a warm-up \
         of {} s; latency is propose to delivery at the proposing node, merged over the nodes. \
         CPU % per node is user + system CPU ms per second of the node's life divided by 10 \
         (100 = one core), mean over the nodes; CPU ms per MiB is the average node's CPU over \
         the MiB one learner delivered, both over the whole run. Log MiB/s is how fast each \
         acceptor appended to its log while loaded (`log_appended_bytes` of the stats lines; \
         snapshots and trimming keep the log on disk itself bounded).\n",
        storage_warmup_s(args.duration_s)
    );
    let _ = writeln!(s, "## Delivered Mbit/s (medians)\n");
    s += &pivot(series);
    let _ = writeln!(s, "\n## Every figure (medians)\n");
    s += &table(series);
    let _ = writeln!(s, "\n## Durable with fdatasync vs memory at 8 KiB\n");
    let _ = writeln!(
        s,
        "`sync_to_memory_ratio_8k` = durable (`sync = true`) Mbit/s / memory Mbit/s at {}, \
         medians of the runs: {}.\n",
        bytes(RATIO_VALUE_SIZE),
        verdict(ratio)
    );
    let _ = writeln!(
        s,
        "How the synced log keeps up:\n\n\
         - Group commit, pipelined: an acceptor may not let a vote leave before the vote is \
           on disk, but it pays one fdatasync per group, not per vote. The driver \
           (`abcast-runtime/src/driver.rs`) gathers every outbox of an event-loop iteration and its \
           records; a sync thread (`syncer.rs`) writes them and runs the fdatasync \
           while the loop reads the next group, and the held messages leave when it \
           completes. Two jobs may be in flight: the next group's sync is queued behind \
           the running one, so the disk does not wait for the loop to notice a job done \
           (one job at a time: 4.3 Gbit/s at 8 KiB; two: 5.3).\n\
         - Around the page cache: the log is written with `O_DIRECT` from one aligned copy \
           (`abcast-runtime/src/disk.rs`); the page cache would copy every byte again, write it back \
           and reclaim it on the nodes' two cores (fio here: 4 MiB synced writes into fallocated files \
           585 MiB/s buffered against 2008 MiB/s direct, at a twelfth of the CPU).\n\
         - One copy per voter: an acceptor that did not vote for a decision keeps it in \
           memory only (`AcceptorStore::put_learned`), so each value is written twice in a \
           3-node ring, not three times.\n\
         - Preallocated segments, and trimmed ones recycled: no fdatasync has a file size to \
           commit, and a trim keeps as many spare files as it frees, so the log writes over \
           written blocks instead of fresh fallocated ones (`storage/durable.rs`).\n\n\
         What remains (measured at 8 KiB, 2026-11-23; docs/benchmarks/storage/bounds.md): \
         the log costs CPU, about 1.3 times the memory back-end's per \
         delivered MiB (its one copy into the aligned buffer, its crc32c, the kernel's \
         direct-I/O path), and under it the machine is 72 % busy (`vmstat`: 12 % idle, 16 % \
         waiting on the disk's 1.4 GB/s of writes) where the memory back-end keeps it 96 % \
         busy. Each voter's sync job writes 3.5 to 4.5 MiB in about 2.3 ms and fdatasyncs in \
         0.6 ms. With the writes left out (instrumented, not a mode of the product) the same \
         cluster delivers 8.2 Gbit/s; but writing each group ahead in 1 MiB pieces on a \
         thread of its own, so that the job only waits for the last piece, gained nothing \
         (5.6 Gbit/s, within the 5.4 to 5.8 of the shipped code), and is not kept. All three \
         node processes share one disk and two cores here; on separate machines each voter \
         would have its own."
    );
    let failures: Vec<String> = series
        .iter()
        .flat_map(|sr| {
            sr.runs.iter().filter(|r| !r.ok).map(move |r| {
                format!(
                    "{} {} run {}: {}",
                    sr.backend.as_str(),
                    bytes(sr.value_size),
                    r.run,
                    failure_reason(r.error.as_deref())
                )
            })
        })
        .collect();
    push_failed_runs(&mut s, &failures);
    write_file(path, &s)
}

/// The JSON line of `--json`.
fn json_line(
    args: &BenchArgs,
    window: u64,
    series: &[Series],
    disk: &Disk,
    out: &Path,
    all_ok: bool,
) -> serde_json::Value {
    let ratio = sync_to_memory_ratio(series, RATIO_VALUE_SIZE);
    let at_8k: serde_json::Map<String, serde_json::Value> = Backend::ALL
        .iter()
        .map(|&b| {
            (
                b.as_str().to_string(),
                json!(mbit_at(series, b, RATIO_VALUE_SIZE)),
            )
        })
        .collect();
    let points: Vec<serde_json::Value> = series
        .iter()
        .map(|sr| {
            let m = |f: &dyn Fn(&Run) -> f64| sr.med(f);
            json!({
                "backend": sr.backend.as_str(),
                "value_size": sr.value_size,
                "values_per_s": m(&|r| r.values_per_s),
                "mbit_per_s": m(&|r| r.mbit_per_s),
                "latency_us_p50": m(&|r| r.latency_us_p50),
                "latency_us_p99": m(&|r| r.latency_us_p99),
                "cpu_pct_per_node": m(&|r| r.cpu_pct_per_node),
                "cpu_ms_per_mib": m(&|r| r.cpu_ms_per_mib),
                "log_mib_per_s_per_node": m(&|r| r.log_mib_per_s),
                "runs": sr.runs.len(),
                "runs_ok": sr.runs_ok(),
            })
        })
        .collect();
    json!({
        "bench": "storage",
        "figure": "seed 000 fig 3.6",
        "runs": args.runs,
        "duration_s": args.duration_s,
        "nodes": STORAGE_NODES,
        "window_values": window,
        "data_dir": disk.dir.display().to_string(),
        "data_fs": disk.mount.as_ref().map(|m| m.fs_type.clone()),
        "data_device": disk.mount.as_ref().map(|m| m.device.clone()),
        "fdatasync_us_p50": disk.fdatasync_us.map(|v| v.0),
        "sync_to_memory_ratio_8k": ratio,
        "ratio_target": RATIO_TARGET,
        "ratio_target_met": ratio.map(|r| r >= RATIO_TARGET),
        "mbit_per_s_8k": at_8k,
        "out_dir": out.display().to_string(),
        "all_runs_ok": all_ok,
        "points": points,
    })
}

/// What a run without `--json` prints: the Mbit/s table without its markdown rule, and the
/// ratio.
fn terminal_text(series: &[Series], out: &Path) -> String {
    let rule = format!("| ---: |{} ---: |\n", " ---: |".repeat(Backend::ALL.len()));
    format!(
        "Acceptor storage back-ends, delivered Mbit/s per learner (medians)\n{}\n\
         sync_to_memory_ratio_8k = {} (target >= {RATIO_TARGET})\n\n\
         Results in {}\n  (results.csv, plot.png, summary.md)\n",
        pivot(series).replace(&rule, ""),
        ratio_text(sync_to_memory_ratio(series, RATIO_VALUE_SIZE)),
        out.display()
    )
}

/// `abcast bench storage`: returns the exit status (0 when every run passed its checks).
pub fn run(args: &BenchArgs) -> Result<u8, HarnessError> {
    // 0 asks for the node's own default, as for the other benches.
    let window = match args.window_values.unwrap_or(STORAGE_WINDOW_VALUES) {
        0 => None,
        w => Some(w),
    };
    let (stamp, date) = utc_now();
    let out = create_out_dir(args, "storage", &stamp)?;
    let disk = disk();
    eprintln!("data directories: {}", disk.describe());
    if let Some((p50, p99)) = disk.fdatasync_us {
        eprintln!(
            "fdatasync of an {} append there: p50 {}, p99 {}",
            bytes(PROBE_APPEND_BYTES as u64),
            ms(p50),
            ms(p99)
        );
    }
    if disk
        .mount
        .as_ref()
        .is_some_and(|m| in_memory_fs(&m.fs_type))
    {
        eprintln!(
            "WARNING: {} is on a file system in memory: the durable points will not measure a disk (set TMPDIR)",
            disk.dir.display()
        );
    }
    let mut series = points();
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
                "[{done}/{total}] {} {} run {run}",
                sr.backend.as_str(),
                bytes(sr.value_size)
            );
            let spec = ClusterSpec {
                nodes: STORAGE_NODES,
                value_size_bytes: sr.value_size,
                duration_s: args.duration_s,
                rate_values_per_s: 0,
                window_values: window,
                kill: false,
                config_edits: cluster::storage_edits(sr.backend.as_str()),
                keep_dir: false,
                progress: !args.json,
                label: label.clone(),
                program: None,
                load_rates: None,
                learners_differ: false,
                placement: Vec::new(),
                load_at_leader: false,
                stamp_values: false,
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
                let log = if sr.backend.is_durable() {
                    format!(", log {:.1} MiB/s per node", figures.log_mib_per_s)
                } else {
                    String::new()
                };
                eprintln!(
                    "{label}: {} values/s, {:.0} Mbit/s, p50 {}, p99 {}, CPU {:.0} % per node, {:.1} ms per MiB{log}",
                    group(figures.values_per_s.round() as u64),
                    figures.mbit_per_s,
                    ms(figures.latency_us_p50),
                    ms(figures.latency_us_p99),
                    figures.cpu_pct_per_node,
                    figures.cpu_ms_per_mib,
                );
            }
            sr.runs.push(figures);
        }
    }
    note_interrupted(interrupted);
    let window_n = window.unwrap_or(0);
    write_file(
        &out.join("results.csv"),
        &csv_text(args.duration_s, window_n, &series),
    )?;
    if let Err(e) = write_plot(&out.join("plot.png"), &series, window_n) {
        eprintln!("{e}");
    }
    write_summary(
        &out.join("summary.md"),
        args,
        window_n,
        &series,
        &disk,
        &date,
    )?;
    let all_ok = series.iter().all(|s| s.runs_ok() == s.runs.len());
    finish(
        args,
        || json_line(args, window_n, &series, &disk, &out, all_ok),
        || terminal_text(&series, &out),
        all_ok,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Ended, Incarnation, Sample};

    fn run(mbit: f64) -> Run {
        Run {
            run: 1,
            values_per_s: mbit,
            mbit_per_s: mbit,
            latency_us_p50: 1000.0,
            latency_us_p99: 2000.0,
            cpu_pct_per_node: 50.0,
            cpu_ms_per_mib: 3.0,
            log_mib_per_s: 0.0,
            log_mib_final: 0.0,
            ok: true,
            error: None,
        }
    }

    fn series(backend: Backend, value_size: u64, mbits: &[f64]) -> Series {
        Series {
            backend,
            value_size,
            runs: mbits.iter().map(|&m| run(m)).collect(),
        }
    }

    #[test]
    fn a_round_runs_every_backend_at_every_value_size_once() {
        let p = points();
        assert_eq!(p.len(), Backend::ALL.len() * VALUE_SIZES.len());
        for size in VALUE_SIZES {
            for b in Backend::ALL {
                assert_eq!(
                    p.iter()
                        .filter(|s| s.backend == b && s.value_size == size)
                        .count(),
                    1
                );
            }
        }
        // The four back-ends of one size run next to each other.
        assert!(p[..4].iter().all(|s| s.value_size == 1024));
        assert_eq!(VALUE_SIZES[0], 1 << 10);
        assert_eq!(VALUE_SIZES[5], 32 << 10);
    }

    #[test]
    fn backend_names_are_the_demo_storage_names_and_select_the_right_config() {
        for b in Backend::ALL {
            let edits = cluster::storage_edits(b.as_str());
            let get = |k: &str| {
                edits
                    .iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.clone())
            };
            let (kind, sync) = match b {
                Backend::None => ("none", None),
                Backend::Memory => ("memory", None),
                Backend::DurableNoSync => ("durable", Some(false)),
                Backend::DurableSync => ("durable", Some(true)),
            };
            assert_eq!(get("storage.kind"), Some(toml::Value::from(kind)), "{b:?}");
            assert_eq!(get("storage.sync"), sync.map(toml::Value::from), "{b:?}");
        }
    }

    #[test]
    fn ratio_is_durable_sync_over_memory_medians_at_the_size() {
        let s = [
            series(Backend::Memory, 8192, &[1000.0, 4000.0, 2000.0]),
            series(Backend::DurableSync, 8192, &[900.0, 1000.0, 1100.0]),
            series(Backend::DurableSync, 1024, &[10.0]),
        ];
        assert_eq!(sync_to_memory_ratio(&s, 8192), Some(0.5));
        // No memory point at 1 KiB: no ratio, rather than a wrong one.
        assert_eq!(sync_to_memory_ratio(&s, 1024), None);
        // Failed runs do not count; a point with none left has no median.
        let mut failed = series(Backend::Memory, 4096, &[f64::NAN]);
        failed.runs[0].error = Some("could not start".into());
        let s = [failed, series(Backend::DurableSync, 4096, &[100.0])];
        assert_eq!(sync_to_memory_ratio(&s, 4096), None);
    }

    #[test]
    fn terminal_text_has_every_size_the_ratio_and_no_markdown_rule() {
        let mut all = points();
        for s in &mut all {
            let mbit = if s.backend == Backend::DurableSync {
                600.0
            } else {
                1000.0
            };
            s.runs = vec![run(mbit)];
        }
        let text = terminal_text(&all, Path::new("out"));
        assert!(!text.contains("---"), "{text}");
        assert!(text.contains("sync_to_memory_ratio_8k = 0.60"), "{text}");
        for size in VALUE_SIZES {
            assert!(text.contains(&format!("| {} |", bytes(size))), "{text}");
        }
    }

    #[test]
    fn ratio_target_is_half_of_memory() {
        assert!(verdict(Some(0.5)).contains("meets"));
        assert!(verdict(Some(0.49)).contains("misses"));
        assert!(verdict(None).contains("not measured"));
    }

    #[test]
    fn cpu_per_mib_is_the_average_nodes_cpu_over_delivered_mib() {
        // 3 nodes, 6000 ms in all, 2 MiB delivered: 1000 ms per MiB per node.
        assert_eq!(cpu_ms_per_mib(6000, 3, 2 << 20), Some(1000.0));
        assert_eq!(cpu_ms_per_mib(6000, 3, 0), None);
        assert_eq!(cpu_ms_per_mib(6000, 0, 1), None);
    }

    fn sample(at_s: f64, t_us: u64, log_bytes: u64, kind: &str) -> Sample {
        let line = format!(
            r#"{{"type":"{kind}","node":0,"incarnation":0,"t_us":{t_us},"delivered_values":0,"delivered_bytes":0,"delivered_instance":0,"order_hash":"ab","proposed_values":0,"acked_values":0,"busy_rejections":0,"coordinator":0,"cpu_user_ms":0,"cpu_sys_ms":0,"rss_kib":0,"log_bytes":0,"log_appended_bytes":{log_bytes},"lat_count":0,"lat_us_p50":0,"lat_us_p99":0,"lat_us_p999":0,"delivered_by_origin":{{}},"acked_by_origin":{{}},"duplicate_deliveries":0}}"#
        );
        Sample {
            at_s,
            line: abcast_node::stats::parse_line(&line).unwrap(),
            interval_latency: None,
        }
    }

    fn record(samples: Vec<Sample>) -> NodeRecord {
        NodeRecord {
            id: 0,
            incarnations: vec![Incarnation {
                spawned_at_s: 0.0,
                ended_at_s: Some(5.0),
                ended: Ended::Clean,
                samples,
                bad_lines: 0,
                first_bad_line: None,
            }],
        }
    }

    #[test]
    fn log_rate_counts_growth_between_warmup_and_stop_only() {
        let r = record(vec![
            // Before the warm-up: left out.
            sample(0.5, 500_000, 1 << 20, "stats"),
            sample(1.0, 1_000_000, 2 << 20, "stats"),
            sample(2.0, 2_000_000, 6 << 20, "stats"),
            sample(3.0, 3_000_000, 10 << 20, "stats"),
            // After the stop, and the final line: left out.
            sample(4.0, 4_000_000, 11 << 20, "stats"),
            sample(4.5, 4_500_000, 11 << 20, "final"),
        ]);
        // 8 MiB in 2 s.
        assert_eq!(log_bytes_per_s(&r, 1.0, 3.0), Some(f64::from(4u32 << 20)));
        // One sample in the window: no rate.
        assert_eq!(log_bytes_per_s(&r, 2.5, 3.0), None);
    }

    #[test]
    fn mount_of_picks_the_longest_mount_point_on_a_component_boundary() {
        let mounts = "/dev/vda / ext4 rw,relatime 0 0\n\
                      tmpfs /tmp tmpfs rw,nosuid 0 0\n\
                      /dev/vdb /data\\040disk xfs rw 0 0\n";
        let m = |p: &str| mount_of(Path::new(p), mounts).unwrap();
        assert_eq!(m("/tmp/abcast-demo-1").fs_type, "tmpfs");
        assert_eq!(m("/tmp").fs_type, "tmpfs");
        // "/tmpfoo" is not under "/tmp".
        assert_eq!(m("/tmpfoo/x").fs_type, "ext4");
        assert_eq!(m("/work").device, "/dev/vda");
        assert_eq!(m("/data disk/x").mount_point, "/data disk");
        assert!(in_memory_fs("tmpfs") && !in_memory_fs("ext4"));
        assert_eq!(mount_of(Path::new("/x"), ""), None);
    }

    #[test]
    fn csv_has_one_row_per_run_with_every_column_and_no_figures_for_failed_runs() {
        let mut s = series(Backend::DurableSync, 8192, &[100.0, 200.0]);
        s.runs[1] = failed_run(2, &HarnessError::Runtime("boom, twice\nmore".into()));
        let text = csv_text(2.0, 64, &[series(Backend::None, 1024, &[5.0]), s]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + 3);
        let columns = CSV_HEADER.split(',').count();
        assert_eq!(columns, 19);
        assert!(lines[1].starts_with("storage,none,none,,1024,3,1,64,2,"));
        assert!(lines[2].starts_with("storage,durable,durable,true,8192,3,1,64,2,100.000,"));
        // The failed run: empty figures, its error quoted (it has a comma), one line.
        assert!(
            lines[3].contains(",,,,,,,,,false,\"boom, twice\""),
            "{}",
            lines[3]
        );
        for l in &lines[1..3] {
            assert_eq!(l.split(',').count(), columns, "{l}");
        }
    }

    #[test]
    fn draws_a_png_of_every_backend() {
        let mut all = points();
        for (i, s) in all.iter_mut().enumerate() {
            s.runs = vec![run(100.0 + i as f64), run(120.0 + i as f64)];
        }
        let dir = std::env::temp_dir().join(format!("abcast-storage-plot-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plot.png");
        write_plot(&path, &all, 64).unwrap();
        let len = fs::metadata(&path).unwrap().len();
        assert!(len > 10_000, "png of {len} bytes");
        fs::remove_dir_all(&dir).unwrap();
    }
}
