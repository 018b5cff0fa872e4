//! `abcast bench trim`: constant load on a 3-node U-Ring cluster with durable storage
//! (`sync = true`), learners snapshotting every second and acceptors trimming below what a
//! quorum of learners' snapshots cover (issue 4; URingPaxos' `Safe`/`Trim`). It plots each
//! acceptor's log on disk over time and reports, per run, the largest log seen
//! (`log_bytes_max`), the log at the end (`log_bytes_end`) and the bytes appended over the
//! run (`bytes_appended`). The acceptance bound: the log never exceeds a fifth of what was
//! appended.
//!
//! Without trimming a log grows by every byte appended; with it, it holds the instances
//! since the trim point (about one snapshot interval of traffic, plus the segment being
//! written: segments are deleted whole).

use super::BenchArgs;
use super::machine;
use super::output::{create_out_dir, finish, push_failed_runs, write_file};
use crate::analysis;
use crate::cluster;
use crate::cluster::ClusterSpec;
use crate::error::HarnessError;
use crate::format::utc_now;
use crate::format::{bytes, group};
use crate::plot::{self, Line, LinePanel};
use abcast_node::stats::median;
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;

/// Value size: seed 000's storage figure (3.6) was measured around this size.
pub const TRIM_VALUE_SIZE_BYTES: u64 = 8 << 10;
/// The constant offered load over the cluster, values/s (8 KiB each: about 260 Mbit/s,
/// well below what `sync = true` sustains here, so the load stays constant).
pub const TRIM_RATE_VALUES_PER_S: u64 = 4_000;
/// The acceptance bound: `log_bytes_max / bytes_appended`.
pub const TRIM_RATIO_MAX: f64 = 0.2;
/// Smaller segments than the default, so whole-segment deletion follows the trim point
/// closely (config `storage.segment_bytes`).
pub const TRIM_SEGMENT_BYTES: u64 = 16 << 20;

/// One run's figures.
#[derive(Debug, Clone, Default)]
struct RunOut {
    ok: bool,
    problems: Vec<String>,
    log_bytes_max: u64,
    log_bytes_end: u64,
    bytes_appended: u64,
    values_per_s: f64,
    /// (node, seconds, log bytes, appended bytes)
    samples: Vec<(u32, f64, u64, u64)>,
}

impl RunOut {
    fn ratio(&self) -> f64 {
        if self.bytes_appended == 0 {
            return f64::NAN;
        }
        self.log_bytes_max as f64 / self.bytes_appended as f64
    }
}

fn spec(args: &BenchArgs, label: String) -> ClusterSpec {
    let mut edits = cluster::storage_edits("durable");
    edits.push((
        "storage.segment_bytes".to_string(),
        toml::Value::Integer(TRIM_SEGMENT_BYTES as i64),
    ));
    edits.push((
        "storage.snapshot_interval_ms".to_string(),
        toml::Value::Integer(1000),
    ));
    ClusterSpec {
        nodes: 3,
        value_size_bytes: TRIM_VALUE_SIZE_BYTES,
        duration_s: args.duration_s,
        rate_values_per_s: TRIM_RATE_VALUES_PER_S,
        window_values: args.window_values,
        kill: false,
        config_edits: edits,
        keep_dir: std::env::var_os("ABCAST_KEEP").is_some(),
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

fn analyse(run: &cluster::ClusterRun) -> RunOut {
    let report = analysis::analyse(run);
    let mut out = RunOut {
        ok: report.ok(),
        problems: report.problems.clone(),
        values_per_s: report.values_per_s,
        ..RunOut::default()
    };
    for node in &run.nodes {
        for inc in &node.incarnations {
            for s in &inc.samples {
                out.samples
                    .push((node.id, s.at_s, s.line.log_bytes, s.line.log_appended_bytes));
                out.log_bytes_max = out.log_bytes_max.max(s.line.log_bytes);
            }
            if let Some(last) = inc.last() {
                out.log_bytes_end = out.log_bytes_end.max(last.log_bytes);
                out.bytes_appended = out.bytes_appended.max(last.log_appended_bytes);
            }
        }
    }
    if out.bytes_appended == 0 {
        out.ok = false;
        out.problems
            .push("no acceptor reported appending to its log (is storage durable?)".into());
    }
    out
}

/// `abcast bench trim`: returns the exit status (0 when every run passed its checks and the
/// log stayed within [`TRIM_RATIO_MAX`] of what was appended).
pub fn run(args: &BenchArgs) -> Result<u8, HarnessError> {
    let (stamp, date) = utc_now();
    let out_dir = create_out_dir(args, "trim", &stamp)?;
    let runs = run_all(args)?;
    write_file(&out_dir.join("results.csv"), &csv_text(&runs))?;
    let plot_note = write_plot(&out_dir, &runs);
    let figures = TrimFigures::of(&runs);
    let mut s = summary_text(args, &date, &runs, &figures);
    s += &plot_note;
    let failures: Vec<String> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.ok)
        .map(|(i, r)| format!("run {}: {}", i + 1, r.problems.join("; ")))
        .collect();
    push_failed_runs(&mut s, &failures);
    write_file(&out_dir.join("summary.md"), &s)?;
    finish(
        args,
        || figures.json(args, &out_dir),
        || format!("{s}\nWritten to {}\n", out_dir.display()),
        runs.iter().all(|r| r.ok) && figures.met,
    )
}

/// Runs the cluster `--runs` times, until Ctrl-C.
fn run_all(args: &BenchArgs) -> Result<Vec<RunOut>, HarnessError> {
    let mut runs: Vec<RunOut> = Vec::new();
    for r in 1..=args.runs {
        let label = format!("[{r}/{}] trim", args.runs);
        match cluster::run_cluster(&spec(args, label.clone())) {
            Ok(cr) => {
                let o = analyse(&cr);
                if !o.ok {
                    eprintln!("{label}: checks FAILED: {}", o.problems.join("; "));
                }
                runs.push(o);
                if cr.interrupted {
                    break;
                }
            }
            // The very first run failing to start means the harness or the node is broken.
            Err(e) if r == 1 => return Err(e),
            Err(e) => {
                eprintln!("{label}: run failed: {e}");
                runs.push(RunOut {
                    problems: vec![e.to_string()],
                    ..RunOut::default()
                });
            }
        }
    }
    Ok(runs)
}

/// `results.csv`: every sample of every run.
fn csv_text(runs: &[RunOut]) -> String {
    let mut csv = String::from("run,node,t_s,log_bytes,log_appended_bytes\n");
    for (i, r) in runs.iter().enumerate() {
        for (node, t, lb, ab) in &r.samples {
            let _ = writeln!(csv, "{},{node},{t:.3},{lb},{ab}", i + 1);
        }
    }
    csv
}

/// `log_size.png`: the first good run (else the first), one line per acceptor, and the
/// bytes appended. Returns the summary's note when the plot could not be drawn: the
/// figures stand without it.
fn write_plot(out_dir: &Path, runs: &[RunOut]) -> String {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let Some(r) = runs.iter().find(|r| r.ok).or(runs.first()) else {
        return String::new();
    };
    let mut lines = Vec::new();
    let mut appended = Vec::new();
    for node in 0..3u32 {
        let pts: Vec<(f64, f64)> = r
            .samples
            .iter()
            .filter(|s| s.0 == node)
            .map(|s| (s.1, mib(s.2)))
            .collect();
        lines.push(Line {
            label: format!("node {node}: log on disk"),
            points: pts,
            markers: false,
        });
        if node == 0 {
            appended = r
                .samples
                .iter()
                .filter(|s| s.0 == node)
                .map(|s| (s.1, mib(s.3)))
                .collect();
        }
    }
    let panels = vec![
        LinePanel {
            caption: "acceptor log on disk (trimmed below a quorum of learners' snapshots)".into(),
            x_desc: "time (s)".into(),
            y_desc: "MiB".into(),
            lines,
        },
        LinePanel {
            caption: "bytes appended to node 0's log since start".into(),
            x_desc: "time (s)".into(),
            y_desc: "MiB".into(),
            lines: vec![Line {
                label: "appended".into(),
                points: appended,
                markers: false,
            }],
        },
    ];
    let title = format!(
        "Log size under constant load with trimming: {} values/s of {}, sync = true",
        group(TRIM_RATE_VALUES_PER_S),
        bytes(TRIM_VALUE_SIZE_BYTES)
    );
    match plot::draw_lines(&out_dir.join("log_size.png"), &title, &panels) {
        Ok(()) => String::new(),
        Err(e) => format!("\nThe plot could not be drawn: {e}\n"),
    }
}

/// The medians over the good runs, and the verdict against [`TRIM_RATIO_MAX`].
struct TrimFigures {
    good_runs: usize,
    log_bytes_max: Option<f64>,
    log_bytes_end: Option<f64>,
    bytes_appended: Option<f64>,
    ratio: Option<f64>,
    /// The largest ratio of any good run (NaN without one).
    worst_ratio: f64,
    met: bool,
}

impl TrimFigures {
    fn of(runs: &[RunOut]) -> TrimFigures {
        let good: Vec<&RunOut> = runs.iter().filter(|r| r.ok).collect();
        let med =
            |f: &dyn Fn(&RunOut) -> f64| median(&good.iter().map(|r| f(r)).collect::<Vec<f64>>());
        let worst_ratio = good.iter().map(|r| r.ratio()).fold(f64::NAN, f64::max);
        TrimFigures {
            good_runs: good.len(),
            log_bytes_max: med(&|r| r.log_bytes_max as f64),
            log_bytes_end: med(&|r| r.log_bytes_end as f64),
            bytes_appended: med(&|r| r.bytes_appended as f64),
            ratio: med(&|r| r.ratio()),
            worst_ratio,
            met: !good.is_empty() && worst_ratio <= TRIM_RATIO_MAX,
        }
    }

    /// The `--json` line.
    fn json(&self, args: &BenchArgs, out_dir: &Path) -> serde_json::Value {
        json!({
            "bench": "trim",
            "runs": args.runs,
            "duration_s": args.duration_s,
            "value_size_bytes": TRIM_VALUE_SIZE_BYTES,
            "rate_values_per_s": TRIM_RATE_VALUES_PER_S,
            "log_bytes_max": self.log_bytes_max,
            "log_bytes_end": self.log_bytes_end,
            "bytes_appended": self.bytes_appended,
            "log_max_to_appended": self.ratio,
            "log_max_to_appended_worst": self.worst_ratio,
            "target_max": TRIM_RATIO_MAX,
            "met": self.met,
            "out": out_dir.display().to_string(),
        })
    }
}

/// `summary.md` up to the plot note and the failed runs: the setup, one row per run and
/// the medians against the target.
fn summary_text(args: &BenchArgs, date: &str, runs: &[RunOut], f: &TrimFigures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Log size under constant load with trimming\n");
    let _ = writeln!(
        s,
        "Command: `abcast bench trim --runs {} --duration {}`  \nDate: {date}  \nMachine: {}\n",
        args.runs,
        args.duration_s,
        machine()
    );
    let _ = writeln!(
        s,
        "3 nodes (every node proposes, accepts and learns), U-Ring Paxos, `[storage] kind = \
         \"durable\"`, `sync = true`, segments of {}, learners snapshot every second; offered \
         load {} values/s of {} over the cluster ({:.0} Mbit/s), for {} s per run. The \
         coordinator trims acceptors below what a quorum of learners' snapshots cover; an \
         acceptor frees a segment once nothing in it is above its trim point, and keeps the \
         files a trim frees as spares to write over (as many as it frees, 4 to 64). The log \
         on disk counts the live segments, the current one at its preallocated size, and the \
         spares.\n",
        bytes(TRIM_SEGMENT_BYTES),
        group(TRIM_RATE_VALUES_PER_S),
        bytes(TRIM_VALUE_SIZE_BYTES),
        (TRIM_RATE_VALUES_PER_S * TRIM_VALUE_SIZE_BYTES * 8) as f64 / 1e6,
        args.duration_s
    );
    let _ = writeln!(
        s,
        "| run | log_bytes_max | log_bytes_end | bytes_appended | max / appended | delivered values/s | checks |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- |");
    for (i, r) in runs.iter().enumerate() {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.3} | {} | {} |",
            i + 1,
            bytes(r.log_bytes_max),
            bytes(r.log_bytes_end),
            bytes(r.bytes_appended),
            r.ratio(),
            group(r.values_per_s.round() as u64),
            if r.ok { "ok" } else { "FAILED" }
        );
    }
    let fmt_b = |v: Option<f64>| v.map_or("n/a".to_string(), |v| bytes(v as u64));
    let _ = writeln!(
        s,
        "\nMedians over {} good run(s): log_bytes_max {}, log_bytes_end {}, bytes_appended {}; \
         the largest log was {} of the bytes appended (worst run {:.3}). Target: at most {} \
         ({}).",
        f.good_runs,
        fmt_b(f.log_bytes_max),
        fmt_b(f.log_bytes_end),
        fmt_b(f.bytes_appended),
        f.ratio.map_or("n/a".to_string(), |r| format!("{r:.3}")),
        f.worst_ratio,
        TRIM_RATIO_MAX,
        if f.met { "met" } else { "NOT met" }
    );
    let _ = writeln!(
        s,
        "\nA voter's log grows for a few seconds, until the first trims free segments, and \
         then stays flat: the segments a trim frees become spares and are written over, so \
         the live segments (about one snapshot interval of traffic plus the current segment) \
         and the spares together keep one size. A node outside the phase 2 quorum holds \
         only its current segment (it keeps what it learned in memory). `results.csv` has \
         every sample (every {} ms, per node); `log_size.png` shows the first good run.",
        cluster::STATS_MS
    );
    s
}
