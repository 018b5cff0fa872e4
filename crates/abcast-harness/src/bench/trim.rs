//! `abcast bench trim`: constant load on a 3-node cluster with durable storage (`sync =
//! true`), learners snapshotting every second and acceptors trimming below what a quorum of
//! learners' snapshots cover (issue 4; URingPaxos' `Safe`/`Trim`), for each protocol of
//! `--protocols`: U-Ring Paxos, Ring Paxos (over TCP) and Multi-Ring Paxos (two U-Ring
//! rings over the same three nodes, proposals round robin; one snapshot of the merge, each
//! ring trimmed at its own point, issue 33). It plots each node's acceptor log on disk over
//! time (a Multi-Ring node's is the sum of its rings' logs) and reports, per run, the
//! largest log seen (`log_bytes_max`), the log at the end (`log_bytes_end`) and the bytes
//! appended over the run (`bytes_appended`). The acceptance bound, per protocol: the log
//! never exceeds a fifth of what was appended.
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

/// The protocols `--protocols` may name, in the order they run and are reported.
pub const TRIM_PROTOCOLS: [&str; 3] = ["uring", "ringpaxos", "multiring"];

/// What a protocol's cluster is, for the summary.
fn describe(proto: &str) -> &'static str {
    match proto {
        "ringpaxos" => "Ring Paxos (its multicasts as TCP copies)",
        "multiring" => {
            "Multi-Ring Paxos: two U-Ring rings over the three nodes, proposals round robin, \
             one snapshot of the merge for both, each ring trimmed at its own point"
        }
        _ => "U-Ring Paxos",
    }
}

/// The config edits that make the cluster run `proto`.
fn protocol_edits(proto: &str) -> Vec<(String, toml::Value)> {
    match proto {
        "ringpaxos" => vec![("protocol".into(), toml::Value::from("ringpaxos"))],
        "multiring" => {
            let ring = |g: i64| {
                let mut t = toml::Table::new();
                t.insert("group".into(), toml::Value::Integer(g));
                toml::Value::Table(t)
            };
            vec![
                ("rings".into(), toml::Value::Array(vec![ring(1), ring(2)])),
                (
                    "multiring.propose_to".into(),
                    toml::Value::from("round-robin"),
                ),
            ]
        }
        _ => Vec::new(),
    }
}

/// `--protocols`, checked [default: every one of [`TRIM_PROTOCOLS`]].
fn protocols(args: &BenchArgs) -> Result<Vec<&'static str>, HarnessError> {
    let Some(list) = &args.protocols else {
        return Ok(TRIM_PROTOCOLS.to_vec());
    };
    let mut out: Vec<&'static str> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some(&p) = TRIM_PROTOCOLS.iter().find(|p| **p == name) else {
            return Err(HarnessError::Usage(format!(
                "--protocols: {name:?} is not one of {}",
                TRIM_PROTOCOLS.join(", ")
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
    // In the order of `TRIM_PROTOCOLS`, whatever the order given.
    out.sort_by_key(|p| TRIM_PROTOCOLS.iter().position(|q| q == p));
    Ok(out)
}

/// One run's figures.
#[derive(Debug, Clone, Default)]
struct RunOut {
    proto: &'static str,
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

fn spec(args: &BenchArgs, proto: &str, label: String) -> ClusterSpec {
    let mut edits = cluster::storage_edits("durable");
    edits.extend(protocol_edits(proto));
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

fn analyse(proto: &'static str, run: &cluster::ClusterRun) -> RunOut {
    let report = analysis::analyse(run);
    let mut out = RunOut {
        proto,
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
    let protos = protocols(args)?;
    let (stamp, date) = utc_now();
    let out_dir = create_out_dir(args, "trim", &stamp)?;
    let runs = run_all(args, &protos)?;
    write_file(&out_dir.join("results.csv"), &csv_text(&runs))?;
    let mut plot_note = String::new();
    let figures: Vec<TrimFigures> = protos
        .iter()
        .map(|&p| {
            let of: Vec<RunOut> = runs.iter().filter(|r| r.proto == p).cloned().collect();
            plot_note += &write_plot(&out_dir, p, &of);
            TrimFigures::of(p, &of)
        })
        .collect();
    let mut s = summary_text(args, &date, &runs, &figures);
    s += &plot_note;
    let failures: Vec<String> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.ok)
        .map(|(i, r)| format!("run {} ({}): {}", i + 1, r.proto, r.problems.join("; ")))
        .collect();
    push_failed_runs(&mut s, &failures);
    write_file(&out_dir.join("summary.md"), &s)?;
    finish(
        args,
        || TrimFigures::json(&figures, args, &out_dir),
        || format!("{s}\nWritten to {}\n", out_dir.display()),
        runs.iter().all(|r| r.ok) && figures.iter().all(|f| f.met),
    )
}

/// Runs the cluster of each protocol `--runs` times, until Ctrl-C.
fn run_all(args: &BenchArgs, protos: &[&'static str]) -> Result<Vec<RunOut>, HarnessError> {
    let mut runs: Vec<RunOut> = Vec::new();
    for &proto in protos {
        for r in 1..=args.runs {
            let label = format!("[{r}/{}] trim {proto}", args.runs);
            match cluster::run_cluster(&spec(args, proto, label.clone())) {
                Ok(cr) => {
                    let o = analyse(proto, &cr);
                    if !o.ok {
                        eprintln!("{label}: checks FAILED: {}", o.problems.join("; "));
                    }
                    runs.push(o);
                    if cr.interrupted {
                        return Ok(runs);
                    }
                }
                // A protocol's first run failing to start means the harness or the node is
                // broken.
                Err(e) if r == 1 => return Err(e),
                Err(e) => {
                    eprintln!("{label}: run failed: {e}");
                    runs.push(RunOut {
                        proto,
                        problems: vec![e.to_string()],
                        ..RunOut::default()
                    });
                }
            }
        }
    }
    Ok(runs)
}

/// `results.csv`: every sample of every run.
fn csv_text(runs: &[RunOut]) -> String {
    let mut csv = String::from("run,protocol,node,t_s,log_bytes,log_appended_bytes\n");
    for (i, r) in runs.iter().enumerate() {
        for (node, t, lb, ab) in &r.samples {
            let _ = writeln!(csv, "{},{},{node},{t:.3},{lb},{ab}", i + 1, r.proto);
        }
    }
    csv
}

/// `log_size-PROTOCOL.png`: the protocol's first good run (else its first), one line per
/// node, and the bytes appended. Returns the summary's note when the plot could not be
/// drawn: the figures stand without it.
fn write_plot(out_dir: &Path, proto: &str, runs: &[RunOut]) -> String {
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
        "Log size under constant load with trimming ({proto}): {} values/s of {}, sync = true",
        group(TRIM_RATE_VALUES_PER_S),
        bytes(TRIM_VALUE_SIZE_BYTES)
    );
    match plot::draw_lines(
        &out_dir.join(format!("log_size-{proto}.png")),
        &title,
        &panels,
    ) {
        Ok(()) => String::new(),
        Err(e) => format!("\nThe {proto} plot could not be drawn: {e}\n"),
    }
}

/// One protocol's medians over its good runs, and the verdict against [`TRIM_RATIO_MAX`].
struct TrimFigures {
    proto: &'static str,
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
    fn of(proto: &'static str, runs: &[RunOut]) -> TrimFigures {
        let good: Vec<&RunOut> = runs.iter().filter(|r| r.ok).collect();
        let med =
            |f: &dyn Fn(&RunOut) -> f64| median(&good.iter().map(|r| f(r)).collect::<Vec<f64>>());
        let worst_ratio = good.iter().map(|r| r.ratio()).fold(f64::NAN, f64::max);
        TrimFigures {
            proto,
            good_runs: good.len(),
            log_bytes_max: med(&|r| r.log_bytes_max as f64),
            log_bytes_end: med(&|r| r.log_bytes_end as f64),
            bytes_appended: med(&|r| r.bytes_appended as f64),
            ratio: med(&|r| r.ratio()),
            worst_ratio,
            met: !good.is_empty() && worst_ratio <= TRIM_RATIO_MAX,
        }
    }

    /// One protocol's part of the `--json` line.
    fn protocol_json(&self) -> serde_json::Value {
        json!({
            "protocol": self.proto,
            "good_runs": self.good_runs,
            "log_bytes_max": self.log_bytes_max,
            "log_bytes_end": self.log_bytes_end,
            "bytes_appended": self.bytes_appended,
            "log_max_to_appended": self.ratio,
            "log_max_to_appended_worst": self.worst_ratio,
            "met": self.met,
        })
    }

    /// The `--json` line: the setup, each protocol's medians, and the verdict over all.
    fn json(all: &[TrimFigures], args: &BenchArgs, out_dir: &Path) -> serde_json::Value {
        json!({
            "bench": "trim",
            "runs": args.runs,
            "duration_s": args.duration_s,
            "value_size_bytes": TRIM_VALUE_SIZE_BYTES,
            "rate_values_per_s": TRIM_RATE_VALUES_PER_S,
            "target_max": TRIM_RATIO_MAX,
            "protocols": all.iter().map(TrimFigures::protocol_json).collect::<Vec<_>>(),
            "met": all.iter().all(|f| f.met),
            "out": out_dir.display().to_string(),
        })
    }
}

/// `summary.md` up to the plot note and the failed runs: the setup, one row per run and
/// each protocol's medians against the target.
fn summary_text(args: &BenchArgs, date: &str, runs: &[RunOut], figures: &[TrimFigures]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Log size under constant load with trimming\n");
    let protos: Vec<&str> = figures.iter().map(|f| f.proto).collect();
    let _ = writeln!(
        s,
        "Command: `abcast bench trim --protocols {} --runs {} --duration {}`  \nDate: {date}  \nMachine: {}\n",
        protos.join(","),
        args.runs,
        args.duration_s,
        machine()
    );
    let _ = writeln!(
        s,
        "3 nodes (every node proposes, accepts and learns), `[storage] kind = \"durable\"`, \
         `sync = true`, segments of {}, learners snapshot every second; offered load {} \
         values/s of {} over the cluster ({:.0} Mbit/s), for {} s per run. The coordinator \
         trims acceptors below what a quorum of learners' snapshots cover; an acceptor frees \
         a segment once nothing in it is above its trim point, and keeps the files a trim \
         frees as spares to write over (as many as it frees, 4 to 64). The log on disk \
         counts the live segments, the current one at its preallocated size, and the \
         spares; a Multi-Ring node's is the sum over its rings (one log per ring).\n",
        bytes(TRIM_SEGMENT_BYTES),
        group(TRIM_RATE_VALUES_PER_S),
        bytes(TRIM_VALUE_SIZE_BYTES),
        (TRIM_RATE_VALUES_PER_S * TRIM_VALUE_SIZE_BYTES * 8) as f64 / 1e6,
        args.duration_s
    );
    for f in figures {
        let _ = writeln!(s, "- `{}`: {}", f.proto, describe(f.proto));
    }
    let _ = writeln!(
        s,
        "\n| protocol | run | log_bytes_max | log_bytes_end | bytes_appended | max / appended | delivered values/s | checks |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- | --- |");
    for f in figures {
        for (i, r) in runs.iter().filter(|r| r.proto == f.proto).enumerate() {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {:.3} | {} | {} |",
                r.proto,
                i + 1,
                bytes(r.log_bytes_max),
                bytes(r.log_bytes_end),
                bytes(r.bytes_appended),
                r.ratio(),
                group(r.values_per_s.round() as u64),
                if r.ok { "ok" } else { "FAILED" }
            );
        }
    }
    let fmt_b = |v: Option<f64>| v.map_or("n/a".to_string(), |v| bytes(v as u64));
    let _ = writeln!(s);
    for f in figures {
        let _ = writeln!(
            s,
            "- `{}`: medians over {} good run(s): log_bytes_max {}, log_bytes_end {}, \
             bytes_appended {}; the largest log was {} of the bytes appended (worst run \
             {:.3}). Target: at most {} ({}).",
            f.proto,
            f.good_runs,
            fmt_b(f.log_bytes_max),
            fmt_b(f.log_bytes_end),
            fmt_b(f.bytes_appended),
            f.ratio.map_or("n/a".to_string(), |r| format!("{r:.3}")),
            f.worst_ratio,
            TRIM_RATIO_MAX,
            if f.met { "met" } else { "NOT met" }
        );
    }
    let _ = writeln!(
        s,
        "\nA voter's log grows for a few seconds, until the first trims free segments, and \
         then stays flat: the segments a trim frees become spares and are written over, so \
         the live segments (about one snapshot interval of traffic plus the current segment) \
         and the spares together keep one size. A node outside the phase 2 quorum holds \
         only its current segment (it keeps what it learned in memory). `results.csv` has \
         every sample (every {} ms, per node); `log_size-PROTOCOL.png` shows each \
         protocol's first good run.",
        cluster::STATS_MS
    );
    s
}
