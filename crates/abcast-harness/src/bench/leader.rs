//! The leader-based race (issue 17, seed 001 chapter 5): Sequence Paxos and Raft against the
//! `omnipaxos` and raft-rs cores (`abcast-peers`), all four on the same runtime, network,
//! storage (in memory), batcher and load generator, so the runs compare protocol
//! implementations and nothing else (seed 001 §4.2 did the same for Kompact).
//!
//! - `concurrency` (seed 001 figure 11): 3 and 5 nodes, 10k / 100k / 1M proposals in
//!   flight, 16-byte values; throughput.
//! - `latency` (figure 13): one proposal in flight, 3 nodes, 16-byte values; the latency
//!   distribution.
//!
//! The client is the seed's (§4.5): it talks to the leader. Every node runs a load
//! generator with `--load-at-leader`, and only the leader's proposes, with the run's
//! proposals in flight; when the leader changes, the new leader's generator takes over.
//! The protocol's own window (`window_values`, `window_bytes`) is set to hold them. Each
//! run is a full cluster run ([`cluster::run_cluster`]), so every run also checks
//! agreement, loss and duplicates. Runs are interleaved (run 1 of every point, then run 2),
//! so the drift of a shared machine spreads over every protocol.

use super::BenchArgs;
use super::machine;
use super::output::{command_line, create_out_dir, finish, push_failed_runs, write_file};
use crate::analysis;
use crate::cluster::{self, ClusterSpec};
use crate::error::HarnessError;
use crate::format::{group, utc_now};
use crate::plot::{self, Line, LinePanel};
use abcast_node::stats::{decode_histogram, median};
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The protocols raced, in the order tables list them: ours beside the peer it must beat.
pub const PROTOCOLS: [&str; 4] = ["seqpaxos", "omnipaxos", "raft", "raftrs"];
/// Proposals in flight (seed 001 figure 11).
pub const IN_FLIGHT: [u64; 3] = [10_000, 100_000, 1_000_000];
/// Cluster sizes of figure 11.
pub const NODES: [u32; 2] = [3, 5];
/// 16-byte values, as the issue asks (the seed's proposals were 8-byte ids).
pub const VALUE_BYTES: u64 = 16;
/// The targets (issue 17): Sequence Paxos at least this times the omnipaxos core at 1M in
/// flight on 3 nodes, Raft at least this times the raft-rs core.
pub const THROUGHPUT_RATIO_MIN: f64 = 1.5;
/// Sequence Paxos' median latency at one in flight must be under this.
pub const SEQPAXOS_P50_MAX_US: f64 = 50.0;

/// One point: a protocol on a cluster with proposals in flight. Ordered as the tables list
/// them: by cluster, then proposals in flight, then protocol in [`PROTOCOLS`] order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Point {
    nodes: u32,
    in_flight: u64,
    rank: usize,
    protocol: &'static str,
}

impl Point {
    fn new(protocol: &'static str, nodes: u32, in_flight: u64) -> Point {
        let rank = PROTOCOLS.iter().position(|p| *p == protocol).unwrap_or(0);
        Point {
            nodes,
            in_flight,
            rank,
            protocol,
        }
    }
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
struct RunOut {
    run: u32,
    ok: bool,
    problems: Vec<String>,
    values_per_s: f64,
    latency_us_p50: f64,
    latency_us_p99: f64,
    latency_us_p999: f64,
    cpu_pct_mean: f64,
    /// The run's latency distribution (every node's proposals), when every node sent it.
    histogram: Option<Histogram<u64>>,
}

fn title(protocol: &str) -> &'static str {
    match protocol {
        "seqpaxos" => "Sequence Paxos",
        "omnipaxos" => "omnipaxos core",
        "raft" => "Raft",
        "raftrs" => "raft-rs core",
        _ => "?",
    }
}

fn spec(p: Point, args: &BenchArgs, label: String) -> ClusterSpec {
    // The protocol's proposer window holds the run's proposals in flight (bytes: the values
    // and their share of a batch's framing, with room to spare).
    let window_bytes = ((p.in_flight * (VALUE_BYTES + 48)) as i64).max(16 << 20);
    let mut edits = vec![
        ("protocol".to_string(), toml::Value::from(p.protocol)),
        ("storage.kind".to_string(), toml::Value::from("memory")),
        (
            "ring.window_values".to_string(),
            toml::Value::Integer(p.in_flight as i64),
        ),
        (
            "ring.window_bytes".to_string(),
            toml::Value::Integer(window_bytes),
        ),
    ];
    if let Some(b) = args.batch_bytes {
        edits.push((
            "ring.batch_max_bytes".to_string(),
            toml::Value::Integer(b as i64),
        ));
    }
    ClusterSpec {
        nodes: p.nodes,
        value_size_bytes: VALUE_BYTES,
        duration_s: args.duration_s,
        rate_values_per_s: 0,
        window_values: Some(p.in_flight),
        kill: false,
        config_edits: edits,
        keep_dir: std::env::var_os("ABCAST_KEEP").is_some(),
        progress: !args.json,
        label,
        program: None,
        load_rates: None,
        learners_differ: false,
        placement: Vec::new(),
        load_at_leader: true,
        stamp_values: false,
    }
}

fn measure(run: &cluster::ClusterRun, r: u32) -> RunOut {
    let report = analysis::analyse(run);
    let mut histogram: Option<Histogram<u64>> = None;
    let mut exact = true;
    for node in &run.nodes {
        for inc in &node.incarnations {
            let Some(last) = inc.last() else { continue };
            if last.lat_count == 0 {
                continue;
            }
            match last.lat_hist.as_deref().map(decode_histogram) {
                Some(Ok(h)) => match histogram.as_mut() {
                    Some(m) => exact &= m.add(&h).is_ok(),
                    None => histogram = Some(h),
                },
                _ => exact = false,
            }
        }
    }
    let cpu: Vec<f64> = report.per_node.iter().map(|n| n.cpu_pct).collect();
    let mut problems = report.problems.clone();
    if !report.lost.is_empty() {
        problems.push(format!("lost: {}", report.lost.join("; ")));
    }
    if !report.learners_agree {
        problems.push(if report.agreement.is_empty() {
            "learners disagree".into()
        } else {
            format!("learners disagree: {}", report.agreement.join("; "))
        });
    }
    if report.duplicates_total > 0 {
        problems.push(format!(
            "{} values delivered twice",
            report.duplicates_total
        ));
    }
    if report.latency.count == 0 {
        problems.push("no proposal was acknowledged".into());
    }
    RunOut {
        run: r,
        ok: report.ok() && report.latency.count > 0,
        problems,
        values_per_s: report.values_per_s,
        latency_us_p50: report.latency.p50_us,
        latency_us_p99: report.latency.p99_us,
        latency_us_p999: report.latency.p999_us,
        cpu_pct_mean: cpu.iter().sum::<f64>() / cpu.len().max(1) as f64,
        histogram: histogram.filter(|_| exact),
    }
}

/// Every point `--runs` times, interleaved; stops early on Ctrl-C.
fn run_points(
    name: &str,
    points: &[Point],
    args: &BenchArgs,
) -> Result<BTreeMap<Point, Vec<RunOut>>, HarnessError> {
    let mut out: BTreeMap<Point, Vec<RunOut>> = BTreeMap::new();
    'runs: for r in 1..=args.runs {
        for (i, &p) in points.iter().enumerate() {
            let label = format!(
                "[{r}/{} {}/{}] {name} {} {}n {}",
                args.runs,
                i + 1,
                points.len(),
                p.protocol,
                p.nodes,
                group(p.in_flight)
            );
            let o = match cluster::run_cluster(&spec(p, args, label.clone())) {
                Ok(cr) => {
                    let o = measure(&cr, r);
                    if !o.ok {
                        eprintln!("{label}: checks FAILED: {}", o.problems.join("; "));
                    }
                    let stop = cr.interrupted;
                    out.entry(p).or_default().push(o);
                    if stop {
                        break 'runs;
                    }
                    continue;
                }
                Err(e) if r == 1 && i == 0 => return Err(e),
                Err(e) => {
                    eprintln!("{label}: run failed: {e}");
                    RunOut {
                        run: r,
                        problems: vec![e.to_string()],
                        ..RunOut::default()
                    }
                }
            };
            out.entry(p).or_default().push(o);
        }
    }
    Ok(out)
}

/// The median of a figure over a point's good runs.
fn med(runs: &[RunOut], f: impl Fn(&RunOut) -> f64) -> Option<f64> {
    median(&runs.iter().filter(|r| r.ok).map(f).collect::<Vec<f64>>())
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("n/a".to_string(), |v| format!("{v:.digits$}"))
}

fn csv_text(results: &BTreeMap<Point, Vec<RunOut>>) -> String {
    let mut csv = String::from(
        "protocol,nodes,in_flight,run,ok,values_per_s,latency_us_p50,latency_us_p99,\
         latency_us_p999,cpu_pct_mean\n",
    );
    for (p, runs) in results {
        for r in runs {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{:.0},{:.1},{:.1},{:.1},{:.1}",
                p.protocol,
                p.nodes,
                p.in_flight,
                r.run,
                r.ok,
                r.values_per_s,
                r.latency_us_p50,
                r.latency_us_p99,
                r.latency_us_p999,
                r.cpu_pct_mean
            );
        }
    }
    csv
}

fn failures(results: &BTreeMap<Point, Vec<RunOut>>) -> Vec<String> {
    results
        .iter()
        .flat_map(|(p, runs)| {
            runs.iter().filter(|r| !r.ok).map(move |r| {
                format!(
                    "{} {} nodes {} in flight, run {}: {}",
                    p.protocol,
                    p.nodes,
                    p.in_flight,
                    r.run,
                    if r.problems.is_empty() {
                        "checks failed".to_string()
                    } else {
                        r.problems.join("; ")
                    }
                )
            })
        })
        .collect()
}

/// The protocols `--protocols` names (default: all four), checked.
fn protocols(args: &BenchArgs) -> Result<Vec<&'static str>, HarnessError> {
    let Some(list) = &args.protocols else {
        return Ok(PROTOCOLS.to_vec());
    };
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match PROTOCOLS.iter().find(|p| **p == name) {
            Some(p) if !out.contains(p) => out.push(*p),
            Some(_) => {}
            None => {
                return Err(HarnessError::Usage(format!(
                    "--protocols: {name:?} is not one of {}",
                    PROTOCOLS.join(", ")
                )));
            }
        }
    }
    if out.is_empty() {
        return Err(HarnessError::Usage("--protocols names no protocol".into()));
    }
    Ok(out)
}

/// What one log entry holds in this run (`--batch-bytes`).
fn entry_note(args: &BenchArgs) -> String {
    match args.batch_bytes {
        None => "Log entries: every protocol's proposer closes an entry at 256 KiB of values \
                 (thousands of 16-byte values per entry: the cores' per-entry work is hidden)."
            .into(),
        Some(b) => format!(
            "Log entries: every protocol's proposer closes an entry at {b} B of values \
             (`--batch-bytes {b}`; at 16 B or less, one value per entry, so each core's \
             per-entry work is raced)."
        ),
    }
}

/// `abcast bench concurrency`.
pub fn run_concurrency(args: &BenchArgs) -> Result<u8, HarnessError> {
    let (stamp, date) = utc_now();
    let out_dir = create_out_dir(args, "concurrency", &stamp)?;
    let protos = protocols(args)?;
    let mut points = Vec::new();
    for &nodes in NODES.iter().filter(|&&n| n <= args.max_nodes) {
        for &in_flight in &IN_FLIGHT {
            for &protocol in &protos {
                points.push(Point::new(protocol, nodes, in_flight));
            }
        }
    }
    let results = run_points("concurrency", &points, args)?;
    write_file(&out_dir.join("results.csv"), &csv_text(&results))?;
    let plot_note = concurrency_plot(&out_dir, &results);
    let vps = |proto: &str| {
        results
            .iter()
            .find(|(p, _)| p.protocol == proto && p.nodes == 3 && p.in_flight == 1_000_000)
            .and_then(|(_, runs)| med(runs, |r| r.values_per_s))
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let sp_ratio = ratio(vps("seqpaxos"), vps("omnipaxos"));
    let raft_ratio = ratio(vps("raft"), vps("raftrs"));
    let met = |r: Option<f64>| r.is_some_and(|r| r >= THROUGHPUT_RATIO_MIN);

    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Throughput against proposals in flight (seed 001 figure 11)\n"
    );
    let _ = writeln!(
        s,
        "Command: `{}`  \nDate: {date}  \nMachine: {}\n",
        command_line(),
        machine()
    );
    let _ = writeln!(
        s,
        "{} B values, storage in memory, {} s of load per run, {} runs per point, interleaved. \
         The leader's load generator keeps the given number of proposals in flight (the \
         seed's client at the leader); every protocol runs on the same runtime, batcher and \
         network. Values/s: the median over learners of each learner's delivery rate, \
         median over runs (min..max).\n",
        VALUE_BYTES, args.duration_s, args.runs
    );
    let _ = writeln!(s, "{}\n", entry_note(args));
    let _ = writeln!(
        s,
        "| nodes | in flight | protocol | values/s | min .. max | p50 latency ms | CPU % (mean per node) | good runs |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- | --- |");
    for (p, runs) in &results {
        let good: Vec<&RunOut> = runs.iter().filter(|r| r.ok).collect();
        let lo = good.iter().map(|r| r.values_per_s).fold(f64::NAN, f64::min);
        let hi = good.iter().map(|r| r.values_per_s).fold(f64::NAN, f64::max);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} .. {} | {} | {} | {}/{} |",
            p.nodes,
            group(p.in_flight),
            title(p.protocol),
            med(runs, |r| r.values_per_s).map_or("n/a".into(), |v| group(v.round() as u64)),
            if lo.is_nan() {
                "n/a".into()
            } else {
                group(lo.round() as u64)
            },
            if hi.is_nan() {
                "n/a".into()
            } else {
                group(hi.round() as u64)
            },
            fmt_opt(med(runs, |r| r.latency_us_p50 / 1000.0), 1),
            fmt_opt(med(runs, |r| r.cpu_pct_mean), 0),
            good.len(),
            runs.len()
        );
    }
    let _ = writeln!(
        s,
        "\nTargets, 3 nodes, 1M in flight: Sequence Paxos / omnipaxos core = {} (at least \
         {THROUGHPUT_RATIO_MIN}: {}); Raft / raft-rs core = {} (at least \
         {THROUGHPUT_RATIO_MIN}: {}).",
        fmt_opt(sp_ratio, 2),
        if met(sp_ratio) { "met" } else { "NOT met" },
        fmt_opt(raft_ratio, 2),
        if met(raft_ratio) { "met" } else { "NOT met" },
    );
    s += &plot_note;
    let fails = failures(&results);
    push_failed_runs(&mut s, &fails);
    write_file(&out_dir.join("summary.md"), &s)?;
    let all_ok = fails.is_empty();
    finish(
        args,
        || {
            let mut j = json!({
                "bench": "concurrency",
                "runs": args.runs,
                "duration_s": args.duration_s,
                "value_size_bytes": VALUE_BYTES,
                "batch_bytes": args.batch_bytes,
                "seqpaxos_values_per_s": vps("seqpaxos"),
                "omnipaxos_values_per_s": vps("omnipaxos"),
                "raft_values_per_s": vps("raft"),
                "raftrs_values_per_s": vps("raftrs"),
                "seqpaxos_to_omnipaxos": sp_ratio,
                "raft_to_raftrs": raft_ratio,
                "target_ratio_min": THROUGHPUT_RATIO_MIN,
                "met": met(sp_ratio) && met(raft_ratio),
                "all_runs_ok": all_ok,
                "out": out_dir.display().to_string(),
            });
            let mut points = Vec::new();
            for (p, runs) in &results {
                points.push(json!({
                    "protocol": p.protocol,
                    "nodes": p.nodes,
                    "in_flight": p.in_flight,
                    "values_per_s": med(runs, |r| r.values_per_s),
                    "latency_us_p50": med(runs, |r| r.latency_us_p50),
                }));
            }
            j["points"] = Value::Array(points);
            j
        },
        || format!("{s}\nWritten to {}\n", out_dir.display()),
        all_ok,
    )
}

fn concurrency_plot(out_dir: &Path, results: &BTreeMap<Point, Vec<RunOut>>) -> String {
    let mut panels = Vec::new();
    for nodes in NODES {
        let mut lines = Vec::new();
        for proto in PROTOCOLS {
            let points: Vec<(f64, f64)> = results
                .iter()
                .filter(|(p, _)| p.protocol == proto && p.nodes == nodes)
                .filter_map(|(p, runs)| {
                    let v = med(runs, |r| r.values_per_s)?;
                    Some(((p.in_flight as f64).log10(), v / 1e6))
                })
                .collect();
            if !points.is_empty() {
                lines.push(Line {
                    label: title(proto).to_string(),
                    points,
                    markers: true,
                });
            }
        }
        if !lines.is_empty() {
            panels.push(LinePanel {
                caption: format!("{nodes} nodes"),
                x_desc: "proposals in flight, log10 (4 = 10k, 5 = 100k, 6 = 1M)".into(),
                y_desc: "million values/s".into(),
                lines,
            });
        }
    }
    let title =
        format!("Throughput vs proposals in flight, {VALUE_BYTES} B values (cf. seed 001 fig 11)");
    match plot::draw_lines(&out_dir.join("plot.png"), &title, &panels) {
        Ok(()) => String::new(),
        Err(e) => format!("\nThe plot could not be drawn: {e}\n"),
    }
}

/// `abcast bench latency`.
pub fn run_latency(args: &BenchArgs) -> Result<u8, HarnessError> {
    let (stamp, date) = utc_now();
    let out_dir = create_out_dir(args, "latency", &stamp)?;
    let protos = protocols(args)?;
    let points: Vec<Point> = protos
        .iter()
        .map(|&protocol| Point::new(protocol, 3, 1))
        .collect();
    let results = run_points("latency", &points, args)?;
    write_file(&out_dir.join("results.csv"), &csv_text(&results))?;
    let plot_note = latency_plot(&out_dir, &results);
    let p = |proto: &str, f: fn(&RunOut) -> f64| {
        results
            .iter()
            .find(|(p, _)| p.protocol == proto)
            .and_then(|(_, runs)| med(runs, f))
    };
    let p50 = |proto: &str| p(proto, |r| r.latency_us_p50);
    let p99 = |proto: &str| p(proto, |r| r.latency_us_p99);
    let faster_peer = match (p50("omnipaxos"), p50("raftrs")) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let sp = p50("seqpaxos");
    let met_peer = matches!((sp, faster_peer), (Some(s), Some(f)) if s <= f);
    let met_abs = sp.is_some_and(|s| s < SEQPAXOS_P50_MAX_US);

    let mut s = String::new();
    let _ = writeln!(
        s,
        "# Latency at one proposal in flight (seed 001 figure 13)\n"
    );
    let _ = writeln!(
        s,
        "Command: `{}`  \nDate: {date}  \nMachine: {}\n",
        command_line(),
        machine()
    );
    let _ = writeln!(
        s,
        "3 nodes, {VALUE_BYTES} B values, storage in memory, one proposal in flight at the \
         leader (the next leaves when the last is delivered there), {} s per run, {} runs \
         per protocol, interleaved. Latency: propose to delivery at the proposer, every \
         proposal of the run (HDR histograms, microsecond resolution); medians over runs.\n",
        args.duration_s, args.runs
    );
    if args.batch_bytes.is_some() {
        let _ = writeln!(s, "{}\n", entry_note(args));
    }
    let _ = writeln!(
        s,
        "| protocol | p50 µs | p99 µs | p99.9 µs | proposals/s | CPU % (mean per node) | good runs |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- |");
    for (p, runs) in &results {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {}/{} |",
            title(p.protocol),
            fmt_opt(med(runs, |r| r.latency_us_p50), 0),
            fmt_opt(med(runs, |r| r.latency_us_p99), 0),
            fmt_opt(med(runs, |r| r.latency_us_p999), 0),
            med(runs, |r| r.values_per_s).map_or("n/a".into(), |v| group(v.round() as u64)),
            fmt_opt(med(runs, |r| r.cpu_pct_mean), 0),
            runs.iter().filter(|r| r.ok).count(),
            runs.len()
        );
    }
    let _ = writeln!(
        s,
        "\nTargets: Sequence Paxos p50 {} µs, at most the faster peer core's {} µs ({}), and \
         under {SEQPAXOS_P50_MAX_US} µs ({}).",
        fmt_opt(sp, 0),
        fmt_opt(faster_peer, 0),
        if met_peer { "met" } else { "NOT met" },
        if met_abs { "met" } else { "NOT met" },
    );
    s += &plot_note;
    let fails = failures(&results);
    push_failed_runs(&mut s, &fails);
    write_file(&out_dir.join("summary.md"), &s)?;
    let all_ok = fails.is_empty();
    finish(
        args,
        || {
            json!({
                "bench": "latency",
                "runs": args.runs,
                "duration_s": args.duration_s,
                "value_size_bytes": VALUE_BYTES,
                "seqpaxos_latency_us_p50": p50("seqpaxos"),
                "omnipaxos_latency_us_p50": p50("omnipaxos"),
                "raft_latency_us_p50": p50("raft"),
                "raftrs_latency_us_p50": p50("raftrs"),
                "seqpaxos_latency_us_p99": p99("seqpaxos"),
                "omnipaxos_latency_us_p99": p99("omnipaxos"),
                "raft_latency_us_p99": p99("raft"),
                "raftrs_latency_us_p99": p99("raftrs"),
                "seqpaxos_p50_max_us": SEQPAXOS_P50_MAX_US,
                "met": met_peer && met_abs,
                "all_runs_ok": all_ok,
                "out": out_dir.display().to_string(),
            })
        },
        || format!("{s}\nWritten to {}\n", out_dir.display()),
        all_ok,
    )
}

/// The latency distribution per protocol (all good runs merged), as a cumulative curve.
fn latency_plot(out_dir: &Path, results: &BTreeMap<Point, Vec<RunOut>>) -> String {
    const QUANTILES: [f64; 13] = [
        0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99,
    ];
    let mut lines = Vec::new();
    for (p, runs) in results {
        let mut merged: Option<Histogram<u64>> = None;
        for h in runs
            .iter()
            .filter(|r| r.ok)
            .filter_map(|r| r.histogram.as_ref())
        {
            match merged.as_mut() {
                Some(m) => {
                    let _ = m.add(h);
                }
                None => merged = Some(h.clone()),
            }
        }
        let Some(h) = merged.filter(|h| !h.is_empty()) else {
            continue;
        };
        lines.push(Line {
            label: title(p.protocol).to_string(),
            points: QUANTILES
                .iter()
                .map(|&q| (h.value_at_quantile(q) as f64, q * 100.0))
                .collect(),
            markers: true,
        });
    }
    let panels = vec![LinePanel {
        caption: "cumulative distribution of propose-to-delivery latency".into(),
        x_desc: "latency (µs)".into(),
        y_desc: "percent of proposals at or below".into(),
        lines,
    }];
    let title = format!(
        "Latency at one proposal in flight, 3 nodes, {VALUE_BYTES} B (cf. seed 001 fig 13)"
    );
    match plot::draw_lines(&out_dir.join("plot.png"), &title, &panels) {
        Ok(()) => String::new(),
        Err(e) => format!("\nThe plot could not be drawn: {e}\n"),
    }
}
