//! `abcast bench NAME`: the seeds' experiments against real node processes.
//!
//! Each point of a sweep is one [`crate::cluster::run_cluster`], the same runner as the demo, so
//! every benchmark run also checks agreement, loss and duplicates. Runs are interleaved
//! (run 1 of every point, then run 2, ...) so that the drift of a shared, noisy two-core
//! machine spreads over all points instead of biasing one; medians of `--runs` are reported
//! with min/max whiskers. Output per invocation: `results.csv`, `plot.png`, `summary.md`.

pub mod corosync;
pub mod experiments;
pub mod grouppeer;
pub mod lan;
pub mod leader;
pub mod multicast;
pub mod multiring;
mod output;
pub mod partial;
pub mod reconfig;
pub mod storage;
pub mod token;
pub mod trim;

use crate::analysis;
use crate::cluster;
use crate::cluster::ClusterSpec;
use crate::error::HarnessError;
use crate::format::{bytes, group, ms, parse_seconds, utc_now};
use crate::plot;
use abcast_node::stats::median;
use clap::Args;
pub use experiments::{Axis, BenchName, Experiment, Medians, Point};
use output::{
    command_line, create_out_dir, csv_field, failure_reason, finish, note_interrupted,
    push_failed_runs, write_file,
};
use serde_json::json;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// `abcast bench` flags.
#[derive(Args, Debug, Clone)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["name", "list"]))]
pub struct BenchArgs {
    /// The experiment to run; `--list` shows them all.
    #[arg(value_enum)]
    pub name: Option<BenchName>,
    /// List the experiments, one line each, and exit.
    #[arg(long)]
    pub list: bool,
    /// Runs per point; medians are reported, with min and max as whiskers.
    #[arg(long, default_value_t = 3, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    pub runs: u32,
    /// Seconds of load per run.
    #[arg(long = "duration", value_name = "SECONDS", default_value = "10", allow_hyphen_values = true,
          value_parser = parse_seconds)]
    pub duration_s: f64,
    /// Output directory [default: results/NAME-TIMESTAMP/].
    #[arg(long = "out", value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Values each node keeps in flight [default: the seed's setup for the figure, 20 for
    /// value-size, 64 for multicast and storage, 10 otherwise]; 0 = the node's own default.
    #[arg(long = "window", value_name = "VALUES", allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(0..=(1 << 24)))]
    pub window_values: Option<u64>,
    /// Largest ring for `ring-size`.
    #[arg(long = "max-nodes", default_value_t = 7, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u32).range(3..=cluster::NODES_MAX as i64))]
    pub max_nodes: u32,
    /// Print one JSON line with the medians at the end instead of the table.
    #[arg(long)]
    pub json: bool,
    /// `multicast`, `token-latency` and `token-loss` only: run every node in its own network
    /// namespace on an emulated switched LAN whose links carry this many Mbit/s each way
    /// (`tc tbf` on veth pairs to a bridge, as seed 003's and seed 002's 1 Gbit/s switches);
    /// needs root. Without it nodes share the loopback.
    #[arg(long = "link-mbit", value_name = "MBIT_PER_S",
          value_parser = clap::value_parser!(u32).range(i64::from(lan::LAN_RATE_MBIT_MIN)..=i64::from(lan::LAN_RATE_MBIT_MAX)))]
    pub link_mbit: Option<u32>,
    /// `concurrency`, `latency` and `partial-connectivity` only: the protocols to race,
    /// comma-separated (seqpaxos, omnipaxos, raft, raftrs) [default: all four; seqpaxos,raft
    /// for partial-connectivity]. `reconfig`: seqpaxos (pull and eager), seqpaxos-pull,
    /// seqpaxos-eager, raft [default: all]. `trim`: uring, ringpaxos, multiring [default:
    /// all three].
    #[arg(long, value_name = "LIST")]
    pub protocols: Option<String>,
    /// `concurrency` and `latency` only: every protocol's proposer closes a log entry once
    /// it holds this many bytes of values [default: the node's, 256 KiB]. 16 puts each
    /// 16-byte value in a log entry of its own, so the cores' per-entry work is raced
    /// instead of hidden behind batches of thousands of values.
    #[arg(long = "batch-bytes", value_name = "BYTES",
          value_parser = clap::value_parser!(u64).range(1..=(16 << 20)))]
    pub batch_bytes: Option<u64>,
    /// `token-latency` and `token-loss` only: members of the token ring [default: 3].
    #[arg(long = "nodes", value_name = "N",
          value_parser = clap::value_parser!(u32).range(2..=i64::from(token::NODES_MAX)))]
    pub nodes: Option<u32>,
    /// `token-latency` and `token-loss` only: 8850-byte payloads in datagrams of up to
    /// 9000 bytes instead of 1350 (seed 002 §IV-A3, fig 5, 7).
    #[arg(long)]
    pub large: bool,
    /// `token-latency` and `token-loss` only: the offered loads, comma-separated Mbit/s of
    /// payload over all members [default token-latency: 10 % to 120 % of --link-mbit, or
    /// 100 to 2500 on the loopback; token-loss: 20 % and 50 % of the original ring's
    /// measured maximum].
    #[arg(long = "loads-mbit", value_name = "LIST", allow_hyphen_values = true)]
    pub loads_mbit: Option<String>,
    /// `token-loss` only: data messages lost per member and link, comma-separated percent
    /// [default: 0,5,10,15,20,25].
    #[arg(long = "loss-pct", value_name = "LIST", allow_hyphen_values = true)]
    pub losses_pct: Option<String>,
}

/// What one run of one point measured.
#[derive(Debug, Clone)]
pub struct RunFigures {
    pub run: u32,
    pub values_per_s: f64,
    pub mbit_per_s: f64,
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    pub latency_us_p999: f64,
    pub latency_exact: bool,
    pub cpu_pct_mean: f64,
    pub learners_agree: bool,
    pub ok: bool,
    /// Why the run failed, if it did (a failed run has no figures).
    pub error: Option<String>,
}

/// All runs of one point.
#[derive(Debug, Clone)]
pub struct PointResult {
    pub point: Point,
    pub runs: Vec<RunFigures>,
}

impl PointResult {
    fn figures(&self, f: impl Fn(&RunFigures) -> f64) -> Vec<f64> {
        self.runs
            .iter()
            .filter(|r| r.error.is_none())
            .map(f)
            .collect()
    }

    /// (min, median, max) of a figure over the runs that completed.
    pub fn spread(&self, f: impl Fn(&RunFigures) -> f64) -> Option<(f64, f64, f64)> {
        let v = self.figures(f);
        let m = median(&v)?;
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some((lo, m, hi))
    }

    pub fn medians(&self) -> Option<Medians> {
        Some(Medians {
            param: self.point.param,
            values_per_s: self.spread(|r| r.values_per_s)?.1,
            mbit_per_s: self.spread(|r| r.mbit_per_s)?.1,
            latency_us_p50: self.spread(|r| r.latency_us_p50)?.1,
        })
    }

    pub fn runs_ok(&self) -> usize {
        self.runs.iter().filter(|r| r.ok).count()
    }
}

fn list() -> String {
    let mut s = String::from("Experiments (abcast bench NAME):\n");
    for name in BenchName::ALL {
        let _ = writeln!(s, "  {:<11} {}", name.as_str(), name.about());
    }
    s
}

/// Core count and CPU model, from the OS, for the summary.
pub(crate) fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map_or("unknown CPU".to_string(), |m| m.trim().to_string());
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(String::new(), |kib| {
            format!(", {:.0} GiB memory", kib as f64 / (1 << 20) as f64)
        });
    format!("{cores} cores (nproc), {model}{mem}")
}

pub(crate) fn sysctl(name: &str) -> String {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    fs::read_to_string(path).map_or("unknown".to_string(), |s| s.trim().to_string())
}

/// The window the runs use: `--window`, else the seed's; `None` = the node's default.
fn window_of(exp: &Experiment, args: &BenchArgs) -> Option<u64> {
    match args.window_values.unwrap_or(exp.window_values) {
        0 => None,
        w => Some(w),
    }
}

fn spec_for(
    point: &Point,
    window_values: Option<u64>,
    args: &BenchArgs,
    label: String,
) -> ClusterSpec {
    let mut config_edits = Vec::new();
    if let Some(b) = point.buffer_size_bytes {
        let b = i64::try_from(b).unwrap_or(i64::MAX);
        config_edits.push(("transport.buffer_size".to_string(), toml::Value::Integer(b)));
    }
    ClusterSpec {
        nodes: point.nodes,
        value_size_bytes: point.value_size_bytes,
        duration_s: args.duration_s,
        rate_values_per_s: point.rate_values_per_s,
        window_values,
        kill: false,
        config_edits,
        keep_dir: false,
        progress: !args.json,
        label,
        program: None,
        load_rates: None,
        learners_differ: false,
        placement: Vec::new(),
        load_at_leader: false,
        stamp_values: false,
    }
}

fn x_position(axis: Axis, param: f64) -> f64 {
    match axis {
        Axis::Bytes => param.max(1.0).log2(),
        Axis::Nodes => param,
    }
}

fn write_csv(
    path: &Path,
    exp: &Experiment,
    args: &BenchArgs,
    results: &[PointResult],
) -> Result<(), HarnessError> {
    let mut s = String::from(
        "experiment,point,swept_parameter,swept_value,run,nodes,value_size_bytes,\
         buffer_size_bytes,rate_values_per_s,window_values,duration_s,values_per_s,mbit_per_s,\
         latency_us_p50,latency_us_p99,latency_us_p999,latency_exact,cpu_pct_mean,\
         learners_agree,ok,error\n",
    );
    for pr in results {
        let p = &pr.point;
        for r in &pr.runs {
            let fig = |v: f64| {
                if r.error.is_some() {
                    String::new()
                } else {
                    format!("{v:.3}")
                }
            };
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                exp.name.as_str(),
                csv_field(&p.label),
                exp.param_column,
                p.param,
                r.run,
                p.nodes,
                p.value_size_bytes,
                p.buffer_size_bytes.map_or(String::new(), |b| b.to_string()),
                p.rate_values_per_s,
                window_of(exp, args).map_or(String::new(), |w| w.to_string()),
                args.duration_s,
                fig(r.values_per_s),
                fig(r.mbit_per_s),
                fig(r.latency_us_p50),
                fig(r.latency_us_p99),
                fig(r.latency_us_p999),
                r.latency_exact,
                fig(r.cpu_pct_mean),
                r.learners_agree,
                r.ok,
                csv_field(r.error.as_deref().unwrap_or("")),
            );
        }
    }
    write_file(path, &s)
}

fn x_label(axis: Axis) -> impl Fn(f64) -> String {
    move |x: f64| match axis {
        Axis::Bytes => bytes(2f64.powf(x).round() as u64),
        Axis::Nodes => format!("{x:.0}"),
    }
}

fn write_plot(path: &Path, exp: &Experiment, results: &[PointResult]) -> Result<(), HarnessError> {
    let sweep: Vec<&PointResult> = results.iter().filter(|r| !r.point.low_load).collect();
    let whiskers = |f: &dyn Fn(&RunFigures) -> f64, scale: f64| -> Vec<plot::Whisker> {
        sweep
            .iter()
            .filter_map(|pr| {
                let (min, median, max) = pr.spread(f)?;
                Some(plot::Whisker {
                    x: x_position(exp.axis, pr.point.param),
                    min: min * scale,
                    median: median * scale,
                    max: max * scale,
                })
            })
            .collect()
    };
    let low_load = results.iter().find(|r| r.point.low_load).and_then(|pr| {
        let (min, median, max) = pr.spread(|r| r.latency_us_p50)?;
        Some((
            plot::Whisker {
                x: x_position(exp.axis, pr.point.param),
                min: min / 1000.0,
                median: median / 1000.0,
                max: max / 1000.0,
            },
            format!("p50 latency, light load ({})", pr.point.label),
        ))
    });
    let label = x_label(exp.axis);
    let spec = plot::PlotSpec {
        title: &exp.title,
        x_desc: exp.x_desc,
        x_keys: sweep
            .iter()
            .map(|pr| x_position(exp.axis, pr.point.param))
            .collect(),
        x_label: &label,
        mbit_per_s: whiskers(&|r| r.mbit_per_s, 1.0),
        values_per_s: whiskers(&|r| r.values_per_s, 1.0),
        latency_ms_p50: whiskers(&|r| r.latency_us_p50, 1e-3),
        latency_ms_p99: whiskers(&|r| r.latency_us_p99, 1e-3),
        low_load_latency_ms_p50: low_load,
    };
    plot::draw(path, &spec).map_err(HarnessError::Runtime)
}

fn shape(exp: &Experiment, results: &[PointResult]) -> String {
    let sweep: Vec<Medians> = results
        .iter()
        .filter(|r| !r.point.low_load)
        .filter_map(|r| r.medians())
        .collect();
    let low = results
        .iter()
        .find(|r| r.point.low_load)
        .and_then(|r| r.medians());
    experiments::shape_sentences(exp, &sweep, low.as_ref())
}

fn medians_table(results: &[PointResult]) -> String {
    let mut s = String::from(
        "| point | values/s | Mbit/s | p50 latency | p99 latency | p99.9 latency | runs ok |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for pr in results {
        let cell = |f: &dyn Fn(&RunFigures) -> f64, fmt: &dyn Fn(f64) -> String| {
            pr.spread(f)
                .map_or("failed".to_string(), |(_, m, _)| fmt(m))
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {}/{} |",
            pr.point.label,
            cell(&|r| r.values_per_s, &|v| group(v.round() as u64)),
            cell(&|r| r.mbit_per_s, &|v| format!("{v:.1}")),
            cell(&|r| r.latency_us_p50, &ms),
            cell(&|r| r.latency_us_p99, &ms),
            cell(&|r| r.latency_us_p999, &ms),
            pr.runs_ok(),
            pr.runs.len()
        );
    }
    s
}

fn write_summary(
    path: &Path,
    exp: &Experiment,
    args: &BenchArgs,
    results: &[PointResult],
    date: &str,
) -> Result<(), HarnessError> {
    let mut s = String::new();
    let _ = writeln!(s, "# abcast bench {}\n", exp.name.as_str());
    let _ = writeln!(s, "{}.\n", exp.title);
    let _ = writeln!(s, "- Command: `{}`", command_line());
    let _ = writeln!(s, "- Date: {date}");
    let _ = writeln!(s, "- Machine: {}", machine());
    let _ = writeln!(
        s,
        "- Kernel socket buffer caps: net.core.rmem_max = {} bytes, net.core.wmem_max = {} bytes",
        sysctl("net.core.rmem_max"),
        sysctl("net.core.wmem_max")
    );
    let _ = writeln!(
        s,
        "- Each point: real node processes on 127.0.0.1, every node proposing with at most {} \
         of its values in flight, {} s of load, {} run(s); medians below, min/max as whiskers \
         in `plot.png`; all runs in `results.csv`.",
        window_of(exp, args).map_or("the node's default number".to_string(), |w| w.to_string()),
        args.duration_s,
        args.runs
    );
    let _ = writeln!(
        s,
        "- Throughput is per learner (median over the nodes); latency is propose to delivery at \
         the proposing node, merged over all nodes.\n"
    );
    if exp.name == BenchName::Buffer {
        let _ = writeln!(
            s,
            "- Note: Linux caps an unprivileged socket's buffers at net.core.rmem_max and \
             wmem_max (above); points past the cap may all measure the cap.\n"
        );
    }
    s += &medians_table(results);
    let _ = writeln!(s, "\n## Shape compared with {}\n", exp.figure);
    let _ = writeln!(s, "{}", shape(exp, results));
    let failures: Vec<String> = results
        .iter()
        .flat_map(|pr| {
            pr.runs.iter().filter(|r| !r.ok).map(move |r| {
                format!(
                    "{} run {}: {}",
                    pr.point.label,
                    r.run,
                    failure_reason(r.error.as_deref())
                )
            })
        })
        .collect();
    push_failed_runs(&mut s, &failures);
    write_file(path, &s)
}

/// `abcast bench`: returns the exit status (0 when every run passed its checks).
pub fn run_bench(args: &BenchArgs) -> Result<u8, HarnessError> {
    let Some(name) = args.name.filter(|_| !args.list) else {
        let _ = std::io::stdout().lock().write_all(list().as_bytes());
        return Ok(0);
    };
    let token = matches!(name, BenchName::TokenLatency | BenchName::TokenLoss);
    if args.link_mbit.is_some() && name != BenchName::Multicast && !token {
        return Err(HarnessError::Usage(format!(
            "--link-mbit applies to `bench multicast`, `token-latency` and `token-loss` only, \
             not to `bench {}`",
            name.as_str()
        )));
    }
    if !token {
        let given = [
            ("--nodes", args.nodes.is_some()),
            ("--large", args.large),
            ("--loads-mbit", args.loads_mbit.is_some()),
            ("--loss-pct", args.losses_pct.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
            return Err(HarnessError::Usage(format!(
                "{flag} applies to `bench token-latency` and `token-loss` only, not to \
                 `bench {}`",
                name.as_str()
            )));
        }
    }
    if args.batch_bytes.is_some() && !matches!(name, BenchName::Concurrency | BenchName::Latency) {
        return Err(HarnessError::Usage(format!(
            "--batch-bytes applies to `bench concurrency` and `latency` only, not to `bench {}`",
            name.as_str()
        )));
    }
    if let Some(result) = multiring::run(name, args) {
        return result;
    }
    if args.protocols.is_some()
        && !matches!(
            name,
            BenchName::Concurrency
                | BenchName::Latency
                | BenchName::PartialConnectivity
                | BenchName::Reconfig
                | BenchName::Trim
        )
    {
        return Err(HarnessError::Usage(format!(
            "--protocols applies to `bench concurrency`, `latency`, `reconfig` and `trim` only, \
             not to `bench {}`",
            name.as_str()
        )));
    }
    if token {
        // Four series (two rings, two services) per point, loss and latency figures a
        // sweep has not: its own runner.
        return token::run(name, args);
    }
    if name == BenchName::PartialConnectivity {
        return partial::run(args);
    }
    if name == BenchName::Trim {
        return trim::run(args);
    }
    if name == BenchName::Concurrency {
        return leader::run_concurrency(args);
    }
    if name == BenchName::Latency {
        return leader::run_latency(args);
    }
    if name == BenchName::Reconfig {
        return reconfig::run(args);
    }
    if name == BenchName::GroupPeer {
        return grouppeer::run(args);
    }
    if name == BenchName::Multicast {
        // Two protocols per point and figures per learner: its own runner.
        return multicast::run(args);
    }
    if name == BenchName::Storage {
        // Four back-ends per value size and figures a sweep has not (CPU per MiB, log rate).
        return storage::run(args);
    }
    let Some(exp) = experiments::experiment(name, args.max_nodes) else {
        return Err(HarnessError::Runtime(format!(
            "bench {} has no sweep runner",
            name.as_str()
        )));
    };
    run_sweep(&exp, args)
}

/// One sweep of [`experiments`]: every point `--runs` times, then `results.csv`,
/// `plot.png`, `summary.md` and the table (or the JSON line).
fn run_sweep(exp: &Experiment, args: &BenchArgs) -> Result<u8, HarnessError> {
    let (stamp, date) = utc_now();
    let out = create_out_dir(args, exp.name.as_str(), &stamp)?;
    let (results, interrupted) = run_points(exp, args)?;
    note_interrupted(interrupted);
    write_csv(&out.join("results.csv"), exp, args, &results)?;
    write_plot(&out.join("plot.png"), exp, &results)?;
    write_summary(&out.join("summary.md"), exp, args, &results, &date)?;
    let all_ok = results.iter().all(|pr| pr.runs_ok() == pr.runs.len());
    finish(
        args,
        || sweep_json(exp, args, &results, &out, all_ok),
        || sweep_text(exp, &results, &out),
        all_ok,
    )
}

/// Runs every point of `exp` `--runs` times, interleaved (run 1 of every point, then run
/// 2, ...), until Ctrl-C; returns the runs and whether Ctrl-C stopped them.
fn run_points(
    exp: &Experiment,
    args: &BenchArgs,
) -> Result<(Vec<PointResult>, bool), HarnessError> {
    let mut results: Vec<PointResult> = exp
        .points
        .iter()
        .map(|p| PointResult {
            point: p.clone(),
            runs: Vec::new(),
        })
        .collect();
    let total = exp.points.len() as u32 * args.runs;
    let mut done = 0;
    let mut interrupted = false;
    'runs: for run in 1..=args.runs {
        for pr in &mut results {
            if interrupted {
                break 'runs;
            }
            done += 1;
            let label = format!("[{done}/{total}] {} run {run}", pr.point.label);
            let spec = spec_for(&pr.point, window_of(exp, args), args, label.clone());
            let figures = match cluster::run_cluster(&spec) {
                Ok(cluster_run) => {
                    interrupted = cluster_run.interrupted;
                    run_figures(run, &label, &cluster_run)
                }
                // A point that cannot start at all on the very first try means the harness
                // or the node is broken: stop instead of failing every point the same way.
                Err(e) if done == 1 => return Err(e),
                Err(e) => {
                    eprintln!("{label}: run failed: {e}");
                    failed_run_figures(run, &e)
                }
            };
            if figures.error.is_none() {
                eprintln!(
                    "{label}: {} values/s, {:.1} Mbit/s, p50 {}, p99 {}",
                    group(figures.values_per_s.round() as u64),
                    figures.mbit_per_s,
                    ms(figures.latency_us_p50),
                    ms(figures.latency_us_p99)
                );
            }
            pr.runs.push(figures);
        }
    }
    Ok((results, interrupted))
}

/// Why a run's checks failed, one clause per finding (the first line of each problem), or
/// `None` when they passed.
pub(crate) fn checks_failed(r: &analysis::Report) -> Option<String> {
    (!r.ok()).then(|| {
        let mut why: Vec<String> = r.agreement.clone();
        why.extend(r.lost.iter().cloned());
        why.extend(r.duplicates.iter().cloned());
        why.extend(
            r.problems
                .iter()
                .map(|p| p.lines().next().unwrap_or("").to_string()),
        );
        why.join("; ")
    })
}

/// The figures of one completed run; a run whose checks failed still has them.
fn run_figures(run: u32, label: &str, cluster_run: &cluster::ClusterRun) -> RunFigures {
    let r = analysis::analyse(cluster_run);
    let cpu: Vec<f64> = r.per_node.iter().map(|n| n.cpu_pct).collect();
    if let Some(why) = checks_failed(&r) {
        eprintln!("{label}: checks FAILED: {why}");
    }
    RunFigures {
        run,
        values_per_s: r.values_per_s,
        mbit_per_s: r.mbit_per_s,
        latency_us_p50: r.latency.p50_us,
        latency_us_p99: r.latency.p99_us,
        latency_us_p999: r.latency.p999_us,
        latency_exact: r.latency.exact,
        cpu_pct_mean: cpu.iter().sum::<f64>() / cpu.len().max(1) as f64,
        learners_agree: r.learners_agree,
        ok: r.ok(),
        error: None,
    }
}

/// A run that could not complete: no figures, the first line of its error.
fn failed_run_figures(run: u32, e: &HarnessError) -> RunFigures {
    RunFigures {
        run,
        values_per_s: f64::NAN,
        mbit_per_s: f64::NAN,
        latency_us_p50: f64::NAN,
        latency_us_p99: f64::NAN,
        latency_us_p999: f64::NAN,
        latency_exact: false,
        cpu_pct_mean: f64::NAN,
        learners_agree: false,
        ok: false,
        error: Some(e.to_string().lines().next().unwrap_or("").to_string()),
    }
}

/// The `--json` line of a sweep: its setup and the medians of every point.
fn sweep_json(
    exp: &Experiment,
    args: &BenchArgs,
    results: &[PointResult],
    out: &Path,
    all_ok: bool,
) -> serde_json::Value {
    let points: Vec<serde_json::Value> = results
        .iter()
        .map(|pr| {
            let m = |f: &dyn Fn(&RunFigures) -> f64| pr.spread(f).map(|(_, m, _)| m);
            json!({
                "point": pr.point.label,
                exp.param_column: pr.point.param,
                "nodes": pr.point.nodes,
                "value_size": pr.point.value_size_bytes,
                "rate_values_per_s": pr.point.rate_values_per_s,
                "buffer_size_bytes": pr.point.buffer_size_bytes,
                "values_per_s": m(&|r| r.values_per_s),
                "mbit_per_s": m(&|r| r.mbit_per_s),
                "latency_us_p50": m(&|r| r.latency_us_p50),
                "latency_us_p99": m(&|r| r.latency_us_p99),
                "latency_us_p999": m(&|r| r.latency_us_p999),
                "runs": pr.runs.len(),
                "runs_ok": pr.runs_ok(),
            })
        })
        .collect();
    json!({
        "bench": exp.name.as_str(),
        "figure": exp.figure,
        "runs": args.runs,
        "duration_s": args.duration_s,
        "window_values": window_of(exp, args),
        "out_dir": out.display().to_string(),
        "all_runs_ok": all_ok,
        "points": points,
    })
}

/// What a sweep prints without `--json`: the medians table without its markdown rule, and
/// the shape sentences.
fn sweep_text(exp: &Experiment, results: &[PointResult], out: &Path) -> String {
    format!(
        "{}\n\n{}\n{}\n\nResults in {}\n  (results.csv, plot.png, summary.md)\n",
        exp.title,
        medians_table(results).replace("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n", ""),
        shape(exp, results),
        out.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_timestamp_is_well_formed() {
        let (stamp, human) = utc_now();
        assert_eq!(stamp.len(), 15, "{stamp}");
        assert!(human.ends_with(" UTC"));
        assert!(stamp.starts_with("20"));
    }

    #[test]
    fn list_names_every_experiment() {
        let text = list();
        for name in BenchName::ALL {
            assert!(text.contains(name.as_str()));
        }
    }
}
