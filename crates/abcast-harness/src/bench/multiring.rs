//! The Multi-Ring Paxos experiments of seed 000 §4.3 against real node processes:
//!
//! - `skip` (figure 4.6): two rings and one learner of both. Runs: no traffic; ring 1 at
//!   full speed with ring 1 alone; ring 1 at full speed with a quiet ring 2; both at full
//!   speed. Plots the instances buffered at the learner per ring over time, and ring 1's
//!   delivered rate. λ stays at its automatic default (`multiring/skip.rs`).
//! - `rings` (figures 4.7 and 4.8): aggregate throughput at the learners as rings are added,
//!   once with in-memory storage and no injected delay (CPU-bound here) and once with an
//!   injected one-way delay on every link, so each ring's throughput is bounded by its
//!   proposer's window over the ring's latency, as a ring across a slow network is.
//! - `global-ring` (figures 4.10 and 4.11): two local rings of three nodes, with and without
//!   a global ring over all six whose links carry an injected one-way delay; local throughput
//!   and latency.
//!
//! Every run is one [`crate::cluster::run_cluster`]; the checks here are the Multi-Ring ones: learners
//! that follow the same rings delivered the same sequence (count and order hash), nothing a
//! proposer saw acknowledged is missing at a learner of its ring, no duplicates. Runs are
//! interleaved across scenarios so the drift of a shared two-core machine spreads over all.

use super::output::{create_out_dir, finish, write_file};
use super::{BenchArgs, BenchName, machine};
use crate::cluster;
use crate::cluster::{ClusterRun, ClusterSpec};
use crate::error::HarnessError;
use crate::format;
use crate::format::group;
use crate::format::utc_now;
use crate::plot::{self, Line, LinePanel};
use abcast_node::stats::median;
use abcast_runtime::linkfault::LinkFault;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

/// Seconds at the start of a run left out of rates (connections, elections, first batches).
const WARMUP_S: f64 = 1.0;

/// One ring of a scenario.
#[derive(Debug, Clone)]
struct RingDef {
    group: u16,
    /// Ring order; the first acceptor coordinates.
    members: Vec<u32>,
    proposers: Vec<u32>,
    acceptors: Vec<u32>,
    learners: Vec<u32>,
}

/// One configuration of an experiment.
#[derive(Debug, Clone)]
struct Scenario {
    /// Series name (CSV, plot, summary).
    series: String,
    /// The swept parameter (rings), or 0 for experiments that only compare scenarios.
    x: f64,
    nodes: u32,
    rings: Vec<RingDef>,
    /// (node, values/s; 0 = as fast as the window allows).
    load: Vec<(u32, u64)>,
    value_size_bytes: u64,
    window_values: Option<u64>,
    link_faults: Vec<LinkFault>,
}

/// What one run of one scenario measured.
#[derive(Debug, Clone, Default)]
struct RunOut {
    ok: bool,
    problems: Vec<String>,
    /// Per learner node: values/s per ring and in total, over the load window.
    rate_by_node: BTreeMap<u32, BTreeMap<u16, f64>>,
    mbit_by_node: BTreeMap<u32, f64>,
    /// Per learner node and ring: the merge buffer's high-water mark.
    buffer_max: BTreeMap<u32, BTreeMap<u16, u64>>,
    /// (t_s, node, ring, buffered instances, delivered values of the ring).
    series: Vec<(f64, u32, u16, u64, u64)>,
    /// Latency of the load generators' own values, per proposer node: (p50, p99) in us.
    latency_us: BTreeMap<u32, (f64, f64)>,
    /// CPU used by all nodes together over their lives, in % of one core.
    cpu_pct_total: f64,
}

fn ring(
    group: u16,
    members: &[u32],
    proposers: &[u32],
    acceptors: &[u32],
    learners: &[u32],
) -> RingDef {
    RingDef {
        group,
        members: members.to_vec(),
        proposers: proposers.to_vec(),
        acceptors: acceptors.to_vec(),
        learners: learners.to_vec(),
    }
}

fn ints(v: &[u32]) -> toml::Value {
    toml::Value::Array(
        v.iter()
            .map(|&i| toml::Value::Integer(i64::from(i)))
            .collect(),
    )
}

fn rings_toml(rings: &[RingDef]) -> toml::Value {
    toml::Value::Array(
        rings
            .iter()
            .map(|r| {
                let mut t = toml::Table::new();
                t.insert("group".into(), toml::Value::Integer(i64::from(r.group)));
                t.insert("members".into(), ints(&r.members));
                t.insert("proposers".into(), ints(&r.proposers));
                t.insert("acceptors".into(), ints(&r.acceptors));
                t.insert("learners".into(), ints(&r.learners));
                toml::Value::Table(t)
            })
            .collect(),
    )
}

fn spec_of(s: &Scenario, args: &BenchArgs, label: String) -> ClusterSpec {
    let mut config_edits = vec![("rings".to_string(), rings_toml(&s.rings))];
    if !s.link_faults.is_empty() {
        config_edits.push((
            "link_faults".to_string(),
            abcast_node::nodeconfig::link_faults_toml(&s.link_faults),
        ));
    }
    ClusterSpec {
        nodes: s.nodes,
        value_size_bytes: s.value_size_bytes,
        duration_s: args.duration_s,
        rate_values_per_s: 0,
        window_values: args.window_values.or(s.window_values),
        kill: false,
        config_edits,
        keep_dir: false,
        progress: !args.json,
        label,
        program: None,
        load_rates: Some(s.load.clone()),
        learners_differ: true,
        placement: Vec::new(),
        load_at_leader: false,
        stamp_values: false,
    }
}

/// The rings a node follows (every ring where it is a learner; the benchmarks subscribe by
/// role) and the ring each proposer proposes to (its first, in group order).
fn followed(s: &Scenario, node: u32) -> BTreeSet<u16> {
    s.rings
        .iter()
        .filter(|r| r.learners.contains(&node))
        .map(|r| r.group)
        .collect()
}

fn proposes_to(s: &Scenario, node: u32) -> Option<u16> {
    let mut groups: Vec<&RingDef> = s
        .rings
        .iter()
        .filter(|r| r.proposers.contains(&node))
        .collect();
    groups.sort_by_key(|r| r.group);
    groups.first().map(|r| r.group)
}

/// Checks and figures of one run.
fn analyse(s: &Scenario, run: &ClusterRun) -> RunOut {
    let mut out = RunOut::default();
    let mut problems = Vec::new();
    if run.interrupted {
        problems.push("interrupted".to_string());
    }
    let mut finals = BTreeMap::new();
    for rec in &run.nodes {
        let Some(inc) = rec.incarnations.last() else {
            problems.push(format!("node {} never started", rec.id));
            continue;
        };
        if rec.incarnations.len() > 1 {
            problems.push(format!("node {} restarted", rec.id));
        }
        match inc.samples.last() {
            Some(last) if inc.final_seen() => {
                finals.insert(rec.id, last.line.clone());
            }
            _ => problems.push(format!("node {} printed no final stats line", rec.id)),
        }
        if inc.bad_lines > 0 {
            problems.push(format!(
                "node {} printed {} bad stats lines",
                rec.id, inc.bad_lines
            ));
        }
        let learner = !followed(s, rec.id).is_empty();
        // Rates over the load window, from the first line after the warm-up to the last
        // line before the stop.
        let window: Vec<&cluster::Sample> = inc
            .samples
            .iter()
            .filter(|smp| smp.at_s >= WARMUP_S && smp.at_s <= run.stop_at_s)
            .collect();
        if learner && let (Some(a), Some(b)) = (window.first(), window.last()) {
            let dt = (b.line.t_us.saturating_sub(a.line.t_us)) as f64 / 1e6;
            if dt > 0.0 {
                let mut rates = BTreeMap::new();
                for (g, gb) in &b.line.groups {
                    let ga = a.line.groups.get(g).copied().unwrap_or_default();
                    rates.insert(
                        *g,
                        gb.delivered_values.saturating_sub(ga.delivered_values) as f64 / dt,
                    );
                }
                out.rate_by_node.insert(rec.id, rates);
                let bytes = b
                    .line
                    .delivered_bytes
                    .saturating_sub(a.line.delivered_bytes);
                out.mbit_by_node
                    .insert(rec.id, bytes as f64 * 8.0 / dt / 1e6);
            }
        }
        for smp in &inc.samples {
            for (g, gl) in &smp.line.groups {
                if gl.following {
                    out.series.push((
                        smp.at_s,
                        rec.id,
                        *g,
                        gl.buffered_instances,
                        gl.delivered_values,
                    ));
                }
            }
        }
        if let Some(last) = inc.samples.last()
            && last.line.t_us > 0
        {
            let cpu_ms = last.line.cpu_user_ms + last.line.cpu_sys_ms;
            out.cpu_pct_total += cpu_ms as f64 * 1000.0 / last.line.t_us as f64 * 100.0;
        }
        if let Some(last) = inc.samples.last() {
            let maxes = last
                .line
                .groups
                .iter()
                .filter(|(_, gl)| gl.following)
                .map(|(g, gl)| (*g, gl.buffered_instances_max))
                .collect::<BTreeMap<_, _>>();
            if learner {
                out.buffer_max.insert(rec.id, maxes);
            }
            if last.line.lat_count > 0 {
                out.latency_us
                    .insert(rec.id, (last.line.lat_us_p50, last.line.lat_us_p99));
            }
        }
    }
    // Learners of the same rings: the same sequence.
    let mut by_set: BTreeMap<BTreeSet<u16>, Vec<u32>> = BTreeMap::new();
    for node in 0..s.nodes {
        let set = followed(s, node);
        if !set.is_empty() {
            by_set.entry(set).or_default().push(node);
        }
    }
    for (set, nodes) in &by_set {
        let seen: BTreeSet<(u64, &str)> = nodes
            .iter()
            .filter_map(|n| finals.get(n))
            .map(|l| (l.delivered_values, l.order_hash.as_str()))
            .collect();
        if seen.len() > 1 {
            problems.push(format!(
                "learners {nodes:?} of rings {set:?} delivered different sequences: {seen:?}"
            ));
        }
    }
    // Nothing acknowledged is missing; nothing delivered twice.
    for (node, line) in &finals {
        if line.duplicate_deliveries > 0 {
            problems.push(format!(
                "node {node} delivered {} values twice",
                line.duplicate_deliveries
            ));
        }
        let set = followed(s, *node);
        for (origin, oline) in &finals {
            let Some(g) = proposes_to(s, *origin) else {
                continue;
            };
            if !set.contains(&g) {
                continue;
            }
            let acked = oline.acked_values;
            let got = line.delivered_by_origin.get(origin).copied().unwrap_or(0);
            if got < acked {
                problems.push(format!(
                    "node {node} delivered {got} values of node {origin}, which saw {acked} acknowledged"
                ));
            }
        }
    }
    out.ok = problems.is_empty();
    out.problems = problems;
    out
}

/// Runs every scenario `args.runs` times, interleaved.
fn run_all(
    name: &str,
    scenarios: &[Scenario],
    args: &BenchArgs,
) -> Result<(Vec<Vec<RunOut>>, bool), HarnessError> {
    let mut results: Vec<Vec<RunOut>> = vec![Vec::new(); scenarios.len()];
    let total = scenarios.len() as u32 * args.runs;
    let mut done = 0;
    for run in 1..=args.runs {
        for (i, s) in scenarios.iter().enumerate() {
            done += 1;
            let label = format!("[{done}/{total}] {name} {} run {run}", s.series_label());
            let spec = spec_of(s, args, label.clone());
            match cluster::run_cluster(&spec) {
                Ok(r) => {
                    let interrupted = r.interrupted;
                    let out = analyse(s, &r);
                    if !out.ok {
                        eprintln!("{label}: checks FAILED: {}", out.problems.join("; "));
                    }
                    results[i].push(out);
                    if interrupted {
                        return Ok((results, true));
                    }
                }
                Err(e) if done == 1 => return Err(e),
                Err(e) => {
                    eprintln!("{label}: run failed: {e}");
                    results[i].push(RunOut {
                        ok: false,
                        problems: vec![e.to_string()],
                        ..RunOut::default()
                    });
                }
            }
        }
    }
    Ok((results, false))
}

impl Scenario {
    fn series_label(&self) -> String {
        if self.x > 0.0 {
            format!("{} / {} ring(s)", self.series, self.x)
        } else {
            self.series.clone()
        }
    }
}

/// Median over the ok runs of `f`.
fn med(runs: &[RunOut], f: impl Fn(&RunOut) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = runs.iter().filter(|r| r.ok).filter_map(f).collect();
    median(&v)
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| group(v.round() as u64))
}

fn header(s: &mut String, title: &str, args: &BenchArgs) {
    let (_, date) = utc_now();
    let _ = writeln!(s, "# {title}\n");
    let _ = writeln!(
        s,
        "Measured {date} on {}; {} run(s) per scenario, {} s of load each, medians over the runs whose checks passed.\n",
        machine(),
        args.runs,
        args.duration_s
    );
}

/// Writes `summary.md` and ends the bench: the summary on stdout (or the JSON line).
fn finish_with_summary(
    out: &Path,
    summary: &str,
    json_line: serde_json::Value,
    args: &BenchArgs,
    all_ok: bool,
) -> Result<u8, HarnessError> {
    write_file(&out.join("summary.md"), summary)?;
    finish(
        args,
        || json_line,
        || format!("{summary}\nWritten to {}\n", out.display()),
        all_ok,
    )
}

/// The summary's list of failed runs, and a line if the plot could not be drawn.
fn failures_and_plot(
    s: &mut String,
    scenarios: &[Scenario],
    results: &[Vec<RunOut>],
    plot_result: &Result<(), String>,
) {
    for (sc, runs) in scenarios.iter().zip(results) {
        for (k, r) in runs.iter().enumerate().filter(|(_, r)| !r.ok) {
            let _ = writeln!(
                s,
                "\n- FAILED {} run {}: {}",
                sc.series_label(),
                k + 1,
                r.problems.join("; ")
            );
        }
    }
    if let Err(e) = plot_result {
        let _ = writeln!(s, "\nPlot not drawn: {e}");
    }
}

// ---- skip (figure 4.6) ------------------------------------------------------------------

const LEARNER: u32 = 2;

fn skip_scenarios() -> Vec<Scenario> {
    // Nodes 0, 1, 2 are the acceptors of both rings; ring 1's coordinator is node 0 and its
    // proposer node 0, ring 2's coordinator and proposer node 1; node 2 learns.
    let r1 = ring(1, &[0, 1, 2], &[0], &[0, 1, 2], &[LEARNER]);
    let r2 = ring(2, &[1, 2, 0], &[1], &[0, 1, 2], &[LEARNER]);
    let base = |series: &str, rings: Vec<RingDef>, load: Vec<(u32, u64)>| Scenario {
        series: series.to_string(),
        x: 0.0,
        nodes: 3,
        rings,
        load,
        value_size_bytes: 1024,
        window_values: None,
        link_faults: Vec::new(),
    };
    vec![
        base("no traffic", vec![r1.clone(), r2.clone()], Vec::new()),
        base("ring 1 alone", vec![r1.clone()], vec![(0, 0)]),
        base(
            "ring 1 busy, ring 2 quiet",
            vec![r1.clone(), r2.clone()],
            vec![(0, 0)],
        ),
        base("both busy", vec![r1, r2], vec![(0, 0), (1, 0)]),
    ]
}

fn run_skip(args: &BenchArgs) -> Result<u8, HarnessError> {
    let scenarios = skip_scenarios();
    let out = create_out_dir(args, "skip", &utc_now().0)?;
    let (results, interrupted) = run_all("skip", &scenarios, args)?;
    let figures = SkipFigures::of(&results);
    write_skip_csv(&out, &scenarios, &results)?;
    let plot_result = draw_skip_plot(&out, &scenarios, &results);
    if let Err(e) = &plot_result {
        eprintln!("{e}");
    }
    let all_ok = !interrupted && results.iter().flatten().all(|r| r.ok);
    let mut s = skip_summary(args, &scenarios, &results, &figures);
    failures_and_plot(&mut s, &scenarios, &results, &plot_result);
    let j = json!({
        "bench": BenchName::Skip.as_str(),
        "busy_alone_values_per_s": figures.alone,
        "busy_with_quiet_values_per_s": figures.with_quiet,
        "busy_with_quiet_to_alone": figures.ratio,
        "learner_buffer_max": figures.buffer_max_with_quiet,
        "learner_buffer_max_all_scenarios": figures.buffer_max_all,
        "both_busy_values_per_s": [figures.both.0, figures.both.1],
        "ok": all_ok,
    });
    finish_with_summary(&out, &s, j, args, all_ok)
}

/// Ring `g`'s values/s at the learner of both rings.
fn skip_ring_rate(g: u16) -> impl Fn(&RunOut) -> Option<f64> {
    move |r: &RunOut| {
        r.rate_by_node
            .get(&LEARNER)
            .and_then(|m| m.get(&g))
            .copied()
    }
}

/// The learner's merge buffer high-water mark over the rings, in instances.
fn skip_buffer_max(r: &RunOut) -> Option<f64> {
    r.buffer_max
        .get(&LEARNER)
        .map(|m| m.values().copied().max().unwrap_or(0) as f64)
}

/// The skip experiment's headline figures, medians over the ok runs; the scenarios are
/// those of [`skip_scenarios`], in its order.
struct SkipFigures {
    /// Ring 1's rate alone and with a quiet ring 2.
    alone: Option<f64>,
    with_quiet: Option<f64>,
    /// Both rings' rates with both busy.
    both: (Option<f64>, Option<f64>),
    buffer_max_with_quiet: f64,
    buffer_max_all: f64,
    /// `with_quiet / alone`.
    ratio: Option<f64>,
}

impl SkipFigures {
    fn of(results: &[Vec<RunOut>]) -> SkipFigures {
        let alone = med(&results[1], skip_ring_rate(1));
        let with_quiet = med(&results[2], skip_ring_rate(1));
        SkipFigures {
            alone,
            with_quiet,
            both: (
                med(&results[3], skip_ring_rate(1)),
                med(&results[3], skip_ring_rate(2)),
            ),
            buffer_max_with_quiet: results[2]
                .iter()
                .filter(|r| r.ok)
                .filter_map(skip_buffer_max)
                .fold(0.0, f64::max),
            buffer_max_all: results
                .iter()
                .flatten()
                .filter(|r| r.ok)
                .filter_map(skip_buffer_max)
                .fold(0.0, f64::max),
            ratio: match (alone, with_quiet) {
                (Some(a), Some(q)) if a > 0.0 => Some(q / a),
                _ => None,
            },
        }
    }
}

/// `results.csv`: one row per run; `buffer.csv`: the learner's time series.
fn write_skip_csv(
    out: &Path,
    scenarios: &[Scenario],
    results: &[Vec<RunOut>],
) -> Result<(), HarnessError> {
    let mut csv = String::from(
        "scenario,run,ok,ring1_values_per_s,ring2_values_per_s,ring1_buffer_max,ring2_buffer_max,problems\n",
    );
    let mut ts = String::from("scenario,run,t_s,ring,buffered_instances,delivered_values\n");
    for (s, runs) in scenarios.iter().zip(results) {
        for (k, r) in runs.iter().enumerate() {
            let rate = |g| skip_ring_rate(g)(r).map_or(String::new(), |v| format!("{v:.0}"));
            let bmax = |g| {
                r.buffer_max
                    .get(&LEARNER)
                    .and_then(|m| m.get(&g))
                    .map_or(String::new(), |v| v.to_string())
            };
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},\"{}\"",
                s.series,
                k + 1,
                r.ok,
                rate(1),
                rate(2),
                bmax(1),
                bmax(2),
                r.problems.join("; ").replace('"', "'")
            );
            for &(t, node, g, b, d) in &r.series {
                if node == LEARNER {
                    let _ = writeln!(ts, "{},{},{t:.3},{g},{b},{d}", s.series, k + 1);
                }
            }
        }
    }
    write_file(&out.join("results.csv"), &csv)?;
    write_file(&out.join("buffer.csv"), &ts)?;
    Ok(())
}

/// `plot.png`: buffered instances per ring over time (first ok run of each scenario with
/// two rings), and ring 1's delivered rate over time per scenario.
fn draw_skip_plot(
    out: &Path,
    scenarios: &[Scenario],
    results: &[Vec<RunOut>],
) -> Result<(), String> {
    let mut buf_lines = Vec::new();
    let mut rate_lines = Vec::new();
    for (s, runs) in scenarios.iter().zip(results) {
        let Some(r) = runs.iter().find(|r| r.ok).or(runs.first()) else {
            continue;
        };
        let learner: Vec<_> = r.series.iter().filter(|p| p.1 == LEARNER).collect();
        for g in [1u16, 2] {
            let pts: Vec<(f64, f64)> = learner
                .iter()
                .filter(|p| p.2 == g)
                .map(|p| (p.0, p.3 as f64))
                .collect();
            if !pts.is_empty() && s.rings.len() == 2 {
                buf_lines.push(Line {
                    label: format!("{}: ring {g}", s.series),
                    points: pts,
                    markers: false,
                });
            }
        }
        let r1: Vec<&&(f64, u32, u16, u64, u64)> = learner.iter().filter(|p| p.2 == 1).collect();
        let pts: Vec<(f64, f64)> = r1
            .windows(2)
            .filter(|w| w[1].0 > w[0].0)
            .map(|w| {
                (
                    w[1].0,
                    (w[1].4.saturating_sub(w[0].4)) as f64 / (w[1].0 - w[0].0),
                )
            })
            .collect();
        rate_lines.push(Line {
            label: s.series.clone(),
            points: pts,
            markers: false,
        });
    }
    plot::draw_lines(
        &out.join("plot.png"),
        "Skip efficiency: a quiet ring does not stall a busy one (seed 000 fig. 4.6)",
        &[
            LinePanel {
                caption: "Instances buffered at the learner of both rings (run 1)".into(),
                x_desc: "time (s)".into(),
                y_desc: "buffered instances".into(),
                lines: buf_lines,
            },
            LinePanel {
                caption: "Ring 1 values delivered per second at the learner (run 1)".into(),
                x_desc: "time (s)".into(),
                y_desc: "values/s".into(),
                lines: rate_lines,
            },
        ],
    )
}

/// `summary.md` up to the failed runs: the setup, one row per scenario, the ratio.
fn skip_summary(
    args: &BenchArgs,
    scenarios: &[Scenario],
    results: &[Vec<RunOut>],
    f: &SkipFigures,
) -> String {
    let mut s = String::new();
    header(&mut s, "Skip efficiency (seed 000 figure 4.6)", args);
    let _ = writeln!(
        s,
        "Two rings over the same three acceptors (nodes 0, 1, 2); node 0 proposes to ring 1, node 1 to ring 2, node 2 learns both. 1 KiB values, λ automatic (1.5 × the busiest followed ring's measured rate per Δt = 10 ms).\n"
    );
    let _ = writeln!(
        s,
        "| scenario | ring 1 values/s at the learner | ring 2 values/s | learner buffer max (instances) | runs ok |"
    );
    let _ = writeln!(s, "| --- | ---: | ---: | ---: | ---: |");
    for (sc, runs) in scenarios.iter().zip(results) {
        let bmax = runs
            .iter()
            .filter(|r| r.ok)
            .filter_map(skip_buffer_max)
            .fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {}/{} |",
            sc.series,
            fmt_opt(med(runs, skip_ring_rate(1))),
            fmt_opt(med(runs, skip_ring_rate(2))),
            bmax,
            runs.iter().filter(|r| r.ok).count(),
            runs.len()
        );
    }
    let _ = writeln!(s);
    match f.ratio {
        Some(q) => {
            let _ = writeln!(
                s,
                "Ring 1 with a quiet partner delivers **{:.1} %** of its throughput alone (target: at least 90 %: {}). The learner's merge buffer peaked at **{}** instances with a quiet partner ({} over every scenario).",
                q * 100.0,
                if q >= 0.9 { "met" } else { "NOT met" },
                f.buffer_max_with_quiet,
                f.buffer_max_all
            );
        }
        None => {
            let _ = writeln!(s, "No ratio: a scenario had no successful run.");
        }
    }
    if let (Some(a), Some(b)) = f.both {
        let _ = writeln!(
            s,
            "\nBoth busy: ring 1 {} and ring 2 {} values/s at the learner.",
            group(a as u64),
            group(b as u64)
        );
    }
    s
}

// ---- rings (figures 4.7 and 4.8) --------------------------------------------------------

/// One-way delay on every link in the delay-bound series.
const RINGS_DELAY_US: u64 = 2_000;

fn rings_scenarios() -> Vec<Scenario> {
    let mut v = Vec::new();
    for (series, faults) in [
        ("in-memory, no injected delay", Vec::new()),
        (
            "2 ms one-way delay on every link",
            vec![LinkFault::everywhere(RINGS_DELAY_US, 0)],
        ),
    ] {
        for k in 1..=3u32 {
            // Ring r's order starts at node r-1 (its coordinator and proposer), so the
            // coordinators and proposers of the rings are different processes.
            let rings = (1..=k)
                .map(|r| {
                    let first = r - 1;
                    let members: Vec<u32> = (0..3).map(|i| (first + i) % 3).collect();
                    ring(r as u16, &members, &[first], &[0, 1, 2], &[0, 1, 2])
                })
                .collect();
            v.push(Scenario {
                series: series.to_string(),
                x: f64::from(k),
                nodes: 3,
                rings,
                load: (0..k).map(|n| (n, 0)).collect(),
                value_size_bytes: 1024,
                window_values: Some(64),
                link_faults: faults.clone(),
            });
        }
    }
    v
}

fn total_rate(r: &RunOut) -> Option<f64> {
    let per_learner: Vec<f64> = r.rate_by_node.values().map(|m| m.values().sum()).collect();
    median(&per_learner)
}

fn total_mbit(r: &RunOut) -> Option<f64> {
    let v: Vec<f64> = r.mbit_by_node.values().copied().collect();
    median(&v)
}

fn run_rings(args: &BenchArgs) -> Result<u8, HarnessError> {
    let scenarios = rings_scenarios();
    let out = create_out_dir(args, "rings", &utc_now().0)?;
    let (results, interrupted) = run_all("rings", &scenarios, args)?;
    write_rings_csv(&out, &scenarios, &results)?;
    let series_names = rings_series_names(&scenarios);
    let plot_result = draw_rings_plot(&out, &scenarios, &results, &series_names);
    let speedup = |name: &str| {
        let m = rings_medians(&scenarios, &results, name);
        match (m.first().and_then(|p| p.1), m.get(1).and_then(|p| p.1)) {
            (Some(a), Some(b)) if a > 0.0 => Some(b / a),
            _ => None,
        }
    };
    let speed_delay = speedup(&series_names[1]);
    let speed_mem = speedup(&series_names[0]);
    let all_ok = !interrupted && results.iter().flatten().all(|r| r.ok);
    let mut s = rings_summary(
        args,
        &scenarios,
        &results,
        &series_names[0],
        speed_delay,
        speed_mem,
    );
    failures_and_plot(&mut s, &scenarios, &results, &plot_result);
    let j = json!({
        "bench": BenchName::Rings.as_str(),
        "speedup_two_rings": speed_delay,
        "speedup_two_rings_no_delay": speed_mem,
        "ok": all_ok,
    });
    finish_with_summary(&out, &s, j, args, all_ok)
}

/// `results.csv`: one row per run.
fn write_rings_csv(
    out: &Path,
    scenarios: &[Scenario],
    results: &[Vec<RunOut>],
) -> Result<(), HarnessError> {
    let mut csv = String::from("series,rings,run,ok,values_per_s,mbit_per_s,problems\n");
    for (s, runs) in scenarios.iter().zip(results) {
        for (k, r) in runs.iter().enumerate() {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},\"{}\"",
                s.series,
                s.x,
                k + 1,
                r.ok,
                total_rate(r).map_or(String::new(), |v| format!("{v:.0}")),
                total_mbit(r).map_or(String::new(), |v| format!("{v:.1}")),
                r.problems.join("; ").replace('"', "'")
            );
        }
    }
    write_file(&out.join("results.csv"), &csv)
}

/// The series of the scenarios, in their order, each once.
fn rings_series_names(scenarios: &[Scenario]) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for s in scenarios {
        if !v.contains(&s.series) {
            v.push(s.series.clone());
        }
    }
    v
}

/// Per scenario of series `name`: rings, median values/s and median Mbit/s at a learner.
fn rings_medians(
    scenarios: &[Scenario],
    results: &[Vec<RunOut>],
    name: &str,
) -> Vec<(f64, Option<f64>, Option<f64>)> {
    scenarios
        .iter()
        .zip(results)
        .filter(|(s, _)| s.series == name)
        .map(|(s, runs)| (s.x, med(runs, total_rate), med(runs, total_mbit)))
        .collect()
}

/// `plot.png`: Mbit/s at a learner against the number of rings, one line per series.
fn draw_rings_plot(
    out: &Path,
    scenarios: &[Scenario],
    results: &[Vec<RunOut>],
    series_names: &[String],
) -> Result<(), String> {
    let lines: Vec<Line> = series_names
        .iter()
        .map(|n| Line {
            label: n.clone(),
            points: rings_medians(scenarios, results, n)
                .iter()
                .filter_map(|&(x, _, m)| m.map(|m| (x, m)))
                .collect(),
            markers: true,
        })
        .collect();
    plot::draw_lines(
        &out.join("plot.png"),
        "Rings at one learner: aggregate throughput as rings are added (seed 000 fig. 4.7, 4.8)",
        &[LinePanel {
            caption: "Delivered at each learner of every ring (median of learners and runs)".into(),
            x_desc: "rings".into(),
            y_desc: "Mbit/s".into(),
            lines,
        }],
    )
}

/// `summary.md` up to the failed runs: the setup, one row per scenario and the speed-ups
/// of two rings over one (`in_memory` names the series without injected delay).
fn rings_summary(
    args: &BenchArgs,
    scenarios: &[Scenario],
    results: &[Vec<RunOut>],
    in_memory: &str,
    speed_delay: Option<f64>,
    speed_mem: Option<f64>,
) -> String {
    let mut s = String::new();
    header(
        &mut s,
        "Rings at one learner (seed 000 figures 4.7 and 4.8)",
        args,
    );
    let _ = writeln!(
        s,
        "Three nodes, each an acceptor and learner of every ring; ring r is coordinated by node r-1, which proposes 1 KiB values to it with a window of 64 values. Throughput is what each learner delivers, all rings merged.\n"
    );
    let _ = writeln!(
        s,
        "| series | rings | values/s at a learner | Mbit/s | CPU of all nodes (% of one core) | runs ok |"
    );
    let _ = writeln!(s, "| --- | ---: | ---: | ---: | ---: | ---: |");
    let cpu = |r: &RunOut| Some(r.cpu_pct_total);
    for (sc, runs) in scenarios.iter().zip(results) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {}/{} |",
            sc.series,
            sc.x,
            fmt_opt(med(runs, total_rate)),
            med(runs, total_mbit).map_or("-".to_string(), |v| format!("{v:.1}")),
            med(runs, cpu).map_or("-".to_string(), |v| format!("{v:.0}")),
            runs.iter().filter(|r| r.ok).count(),
            runs.len()
        );
    }
    let _ = writeln!(s);
    if let Some(x) = speed_delay {
        let _ = writeln!(
            s,
            "Delay-bound rings: two rings deliver **{x:.2}×** one ring's throughput at a learner of both (target ≥ 1.8: {}).",
            if x >= 1.8 { "met" } else { "NOT met" }
        );
    }
    if let Some(x) = speed_mem {
        let one_ring_cpu = scenarios
            .iter()
            .zip(results)
            .find(|(sc, _)| sc.series == in_memory && sc.x == 1.0)
            .and_then(|(_, runs)| med(runs, cpu));
        let _ = writeln!(
            s,
            "In-memory rings without delay: {x:.2}× with two rings. This series is bound neither by link delay nor, on these figures, by the CPU (the nodes used {} % of one core with one ring, averaged over each process's life including start-up and drain, of the 200 % of this 2-core machine); what bounds it is not established by this benchmark.",
            one_ring_cpu.map_or("-".to_string(), |v| format!("{v:.0}"))
        );
    }
    s
}

// ---- global ring (figures 4.10 and 4.11) ------------------------------------------------

/// Per scenario: name, local values/s, local latency p50 and p99 (us).
type LocalMedians = (String, Option<f64>, Option<f64>, Option<f64>);

/// One-way delay on the global ring's links.
const GLOBAL_DELAY_US: u64 = 5_000;
const GLOBAL: u16 = 3;

fn global_scenarios() -> Vec<Scenario> {
    // Region A: nodes 0, 1, 2 (ring 1); region B: nodes 3, 4, 5 (ring 2). Node 1 proposes to
    // ring 1, node 4 to ring 2. The global ring spans both regions: acceptors 0, 3, 1, every
    // node a learner, node 0 its proposer; only its frames are delayed.
    let a = ring(1, &[0, 1, 2], &[1], &[0, 1, 2], &[0, 1, 2]);
    let b = ring(2, &[3, 4, 5], &[4], &[3, 4, 5], &[3, 4, 5]);
    let g = ring(
        GLOBAL,
        &[0, 3, 1, 4, 2, 5],
        &[0],
        &[0, 3, 1],
        &[0, 1, 2, 3, 4, 5],
    );
    let slow = vec![LinkFault::everywhere(GLOBAL_DELAY_US, 0).in_group(GLOBAL)];
    let base = |series: &str, rings: Vec<RingDef>, load: Vec<(u32, u64)>| Scenario {
        series: series.to_string(),
        x: 0.0,
        nodes: 6,
        rings,
        load,
        value_size_bytes: 1024,
        window_values: Some(64),
        link_faults: slow.clone(),
    };
    vec![
        base(
            "local rings only",
            vec![a.clone(), b.clone()],
            vec![(1, 0), (4, 0)],
        ),
        base(
            "with a quiet global ring",
            vec![a.clone(), b.clone(), g.clone()],
            vec![(1, 0), (4, 0)],
        ),
        base(
            "with a global ring at 200 values/s",
            vec![a, b, g],
            vec![(1, 0), (4, 0), (0, 200)],
        ),
    ]
}

fn run_global(args: &BenchArgs) -> Result<u8, HarnessError> {
    let scenarios = global_scenarios();
    let out = create_out_dir(args, "global-ring", &utc_now().0)?;
    let (results, interrupted) = run_all("global-ring", &scenarios, args)?;
    write_global_csv(&out, &scenarios, &results)?;
    let per_scenario: Vec<LocalMedians> = scenarios
        .iter()
        .zip(&results)
        .map(|(s, runs)| {
            (
                s.series.clone(),
                med(runs, global_local_rate),
                med(runs, global_local_latency(50)),
                med(runs, global_local_latency(99)),
            )
        })
        .collect();
    let plot_result = draw_global_plot(&out, &per_scenario);
    let all_ok = !interrupted && results.iter().flatten().all(|r| r.ok);
    // The local rings' throughput with a quiet global ring over that without one.
    let ratio = match (per_scenario[0].1, per_scenario[1].1) {
        (Some(a), Some(b)) if a > 0.0 => Some(b / a),
        _ => None,
    };
    let mut s = global_summary(args, &scenarios, &results, &per_scenario, ratio);
    failures_and_plot(&mut s, &scenarios, &results, &plot_result);
    let j = json!({
        "bench": BenchName::GlobalRing.as_str(),
        "local_values_per_s": per_scenario[0].1,
        "local_values_per_s_with_global": per_scenario[1].1,
        "local_with_global_to_alone": ratio,
        "local_latency_us_p50": per_scenario[0].2,
        "local_latency_us_p50_with_global": per_scenario[1].2,
        "ok": all_ok,
    });
    finish_with_summary(&out, &s, j, args, all_ok)
}

/// Both local rings' values/s: ring 1 at node 2 and ring 2 at node 5, learners that
/// propose nothing.
fn global_local_rate(r: &RunOut) -> Option<f64> {
    let a = r.rate_by_node.get(&2).and_then(|m| m.get(&1)).copied()?;
    let b = r.rate_by_node.get(&5).and_then(|m| m.get(&2)).copied()?;
    Some(a + b)
}

/// The latency at the local proposers, nodes 1 and 4 (median of the two), in us: p50 for
/// `q` = 50, else p99.
fn global_local_latency(q: usize) -> impl Fn(&RunOut) -> Option<f64> {
    move |r: &RunOut| {
        let v: Vec<f64> = [1u32, 4]
            .iter()
            .filter_map(|n| r.latency_us.get(n))
            .map(|l| if q == 50 { l.0 } else { l.1 })
            .collect();
        median(&v)
    }
}

/// The global ring's values/s at node 2.
fn global_rate(r: &RunOut) -> Option<f64> {
    r.rate_by_node.get(&2).and_then(|m| m.get(&GLOBAL)).copied()
}

/// `results.csv`: one row per run.
fn write_global_csv(
    out: &Path,
    scenarios: &[Scenario],
    results: &[Vec<RunOut>],
) -> Result<(), HarnessError> {
    let mut csv = String::from(
        "scenario,run,ok,local_values_per_s,local_latency_us_p50,local_latency_us_p99,global_values_per_s,problems\n",
    );
    for (s, runs) in scenarios.iter().zip(results) {
        for (k, r) in runs.iter().enumerate() {
            let f = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.0}"));
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{},{},\"{}\"",
                s.series,
                k + 1,
                r.ok,
                f(global_local_rate(r)),
                f(global_local_latency(50)(r)),
                f(global_local_latency(99)(r)),
                f(global_rate(r)),
                r.problems.join("; ").replace('"', "'")
            );
        }
    }
    write_file(&out.join("results.csv"), &csv)
}

/// `plot.png`: local throughput and latency per scenario (x: 1, 2, 3 in the order of
/// [`global_scenarios`]).
fn draw_global_plot(out: &Path, per_scenario: &[LocalMedians]) -> Result<(), String> {
    let x_of = |i: usize| (i + 1) as f64;
    plot::draw_lines(
        &out.join("plot.png"),
        "Local rings plus a global ring (seed 000 fig. 4.10, 4.11); x: 1 = local only, 2 = quiet global, 3 = global at 200/s",
        &[
            LinePanel {
                caption:
                    "Local throughput: both local rings, at a learner of each (median of runs)"
                        .into(),
                x_desc: "scenario".into(),
                y_desc: "values/s".into(),
                lines: vec![Line {
                    label: "local values/s".into(),
                    points: per_scenario
                        .iter()
                        .enumerate()
                        .filter_map(|(i, p)| p.1.map(|v| (x_of(i), v)))
                        .collect(),
                    markers: true,
                }],
            },
            LinePanel {
                caption: "Local latency at the local proposers".into(),
                x_desc: "scenario".into(),
                y_desc: "latency (us)".into(),
                lines: vec![
                    Line {
                        label: "p50".into(),
                        points: per_scenario
                            .iter()
                            .enumerate()
                            .filter_map(|(i, p)| p.2.map(|v| (x_of(i), v)))
                            .collect(),
                        markers: true,
                    },
                    Line {
                        label: "p99".into(),
                        points: per_scenario
                            .iter()
                            .enumerate()
                            .filter_map(|(i, p)| p.3.map(|v| (x_of(i), v)))
                            .collect(),
                        markers: true,
                    },
                ],
            },
        ],
    )
}

/// `summary.md` up to the failed runs: the setup, one row per scenario and what the
/// global ring costs the local rings.
fn global_summary(
    args: &BenchArgs,
    scenarios: &[Scenario],
    results: &[Vec<RunOut>],
    per_scenario: &[LocalMedians],
    ratio: Option<f64>,
) -> String {
    let mut s = String::new();
    header(
        &mut s,
        "Local rings plus a global ring (seed 000 figures 4.10 and 4.11)",
        args,
    );
    let _ = writeln!(
        s,
        "Two regions of three nodes, each with its local ring (1 KiB values, window 64, saturated by one proposer per region). The global ring spans all six nodes (acceptors 0, 3, 1), and every frame of it carries an injected {} ms one-way delay; local rings are not delayed. Every node learns its local ring and the global ring.\n",
        GLOBAL_DELAY_US / 1000
    );
    let _ = writeln!(
        s,
        "| scenario | local values/s | local latency p50 | p99 | global values/s at a learner | runs ok |"
    );
    let _ = writeln!(s, "| --- | ---: | ---: | ---: | ---: | ---: |");
    for ((sc, runs), p) in scenarios.iter().zip(results).zip(per_scenario) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {}/{} |",
            sc.series,
            fmt_opt(p.1),
            p.2.map_or("-".into(), format::ms),
            p.3.map_or("-".into(), format::ms),
            fmt_opt(med(runs, global_rate)),
            runs.iter().filter(|r| r.ok).count(),
            runs.len()
        );
    }
    if let Some(x) = ratio {
        let show = |v: Option<f64>| v.map_or("-".to_string(), format::ms);
        let _ = writeln!(
            s,
            "\nWith a quiet global ring over {} ms links the local rings keep **{:.1} %** of their throughput; their median latency goes from {} to {} and their p99 from {} to {}. With λ adapted to the local rings' rate the global ring's skips run ahead of the local rings, so most local values do not wait for the slow ring; the tail does. With values on the global ring (third row) the median becomes {}: a global value holds the merge for its ring's latency, as in seed 000's figure 4.11.",
            GLOBAL_DELAY_US / 1000,
            x * 100.0,
            show(per_scenario[0].2),
            show(per_scenario[1].2),
            show(per_scenario[0].3),
            show(per_scenario[1].3),
            show(per_scenario.get(2).and_then(|p| p.2)),
        );
    }
    s
}

/// Runs one of the Multi-Ring experiments; `None` if `name` is not one.
pub fn run(name: BenchName, args: &BenchArgs) -> Option<Result<u8, HarnessError>> {
    match name {
        BenchName::Skip => Some(run_skip(args)),
        BenchName::Rings => Some(run_rings(args)),
        BenchName::GlobalRing => Some(run_global(args)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_renders_a_config_the_node_accepts() {
        for s in skip_scenarios()
            .iter()
            .chain(&rings_scenarios())
            .chain(&global_scenarios())
        {
            let mut table: toml::Table = toml::from_str(&abcast_node::nodeconfig::local_cluster(
                s.nodes as usize,
                7000,
            ))
            .unwrap();
            table.insert("rings".into(), rings_toml(&s.rings));
            if !s.link_faults.is_empty() {
                table.insert(
                    "link_faults".into(),
                    abcast_node::nodeconfig::link_faults_toml(&s.link_faults),
                );
            }
            for node in 0..s.nodes {
                let c = abcast_node::nodeconfig::parse(
                    &table.to_string(),
                    Some(node),
                    Path::new("/tmp"),
                )
                .unwrap_or_else(|e| panic!("{}: {e}", s.series));
                assert!(c.multiring.is_some());
            }
            // Every loaded node proposes somewhere.
            for (node, _) in &s.load {
                assert!(
                    proposes_to(s, *node).is_some(),
                    "{}: node {node} proposes nowhere",
                    s.series
                );
            }
        }
    }

    #[test]
    fn the_skip_learner_follows_both_rings_and_the_proposers_one_each() {
        let s = &skip_scenarios()[2];
        assert_eq!(followed(s, LEARNER), BTreeSet::from([1, 2]));
        assert_eq!(proposes_to(s, 0), Some(1));
        assert_eq!(proposes_to(s, 1), Some(2));
        assert!(followed(s, 0).is_empty());
    }
}
