//! `abcast demo`: a local cluster of real node processes ([`crate::cluster`]) under load,
//! then a summary a person reads (or one JSON object) and a second-by-second plot.

use crate::analysis::{Report, TimelineRow, analyse};
use crate::cluster::{ClusterSpec, NODES_MAX, STATS_MS, protocol_edits, run_cluster};
use crate::error::{HarnessError, runtime};
use crate::format::{bytes, group, ms, parse_seconds, utc_now};
use crate::plot::{Line, LinePanel, draw_lines};
use clap::Args;
use serde_json::json;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// `abcast demo` flags.
#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// The protocol the nodes run: uring (U-Ring Paxos, seed 000), ringpaxos (Ring Paxos,
    /// seed 003, multicasts as TCP copies), multiring (Multi-Ring Paxos, seed 003: two U-Ring
    /// rings over the nodes, merged in a deterministic order), seqpaxos (Sequence Paxos with Ballot Leader
    /// Election, seed 001), raft (Raft, seed 001), omnipaxos or raftrs (the `omnipaxos` and
    /// raft-rs crates' cores on our runtime, for comparison), token (the Accelerated Ring,
    /// seed 002: data as one UDP datagram to each member, the token on a UDP socket of its
    /// own).
    #[arg(long, value_name = "NAME", default_value = "uring",
          value_parser = ["uring", "ringpaxos", "multiring", "seqpaxos", "raft", "omnipaxos", "raftrs", "token"])]
    pub protocol: String,
    /// Number of node processes in the ring (each is proposer, acceptor and learner).
    #[arg(long, default_value_t = 3, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u32).range(1..=NODES_MAX as i64))]
    pub nodes: u32,
    /// Size of each proposed value, in bytes.
    #[arg(long = "value-size", value_name = "BYTES", default_value_t = 1024, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(1..=(16 << 20)))]
    pub value_size_bytes: u64,
    /// How long the load runs, in seconds.
    #[arg(long = "duration", value_name = "SECONDS", default_value = "10", allow_hyphen_values = true,
          value_parser = parse_seconds)]
    pub duration_s: f64,
    /// Values per second offered in total, split evenly over the nodes; 0 = as fast as the
    /// ring accepts.
    #[arg(
        long = "rate",
        value_name = "VALUES_PER_S",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    pub rate_values_per_s: u64,
    /// Values each node's load generator keeps in flight (proposed, not yet acknowledged);
    /// default: the node's own default. Seed 000 used 10 to 20.
    #[arg(long = "window", value_name = "VALUES", allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(1..=(1 << 24)))]
    pub window_values: Option<u64>,
    /// Crash test: kill -9 a follower at 1/3 of the run and the coordinator at 2/3, restart
    /// each after about a second, then check that nothing acknowledged was lost. With
    /// `--protocol token` the coordinator is the ring's representative (its lowest id, which
    /// forms each new ring), and a restarted member joins a new configuration: the check is
    /// what Extended Virtual Synchrony promises. Refused for omnipaxos and raftrs, whose
    /// crates assume storage that outlives a restart.
    #[arg(long)]
    pub kill: bool,
    /// Print one JSON object as the last stdout line instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Keep the temporary directory (config, node logs, storage) and print its path.
    #[arg(long = "keep-dir")]
    pub keep_dir: bool,
    /// Where the plot of the run goes (`plot.png`: values/s per node and latency, second by
    /// second) [default: results/demo-TIMESTAMP/].
    #[arg(long = "out", value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Acceptor storage: memory (bounded, in memory), durable (a log on disk, fdatasync
    /// before votes leave: survives a machine crash), durable-inloop (the same, with the
    /// fdatasync in the event loop instead of on a sync thread: for comparison),
    /// durable-buffered (the same, written through the page cache instead of around it:
    /// for comparison), durable-nosync (written through the OS: survives a process crash) or none
    /// (benchmarks only).
    #[arg(long, value_name = "KIND", default_value = "memory",
          value_parser = ["memory", "durable", "durable-inloop", "durable-buffered",
                          "durable-nosync", "none"])]
    pub storage: String,
    /// How messages to one peer travel: tcp (a connection per peer pair) or udp (one
    /// datagram each, TCP only for a message too large for a datagram) [default: tcp;
    /// udp for token].
    #[arg(long, value_name = "TRANSPORT", value_parser = ["tcp", "udp"])]
    pub unicast: Option<String>,
}

/// The cluster a `demo` command line asks for.
pub fn cluster_spec(args: &DemoArgs) -> ClusterSpec {
    ClusterSpec {
        nodes: args.nodes,
        value_size_bytes: args.value_size_bytes,
        duration_s: args.duration_s,
        rate_values_per_s: args.rate_values_per_s,
        window_values: args.window_values,
        kill: args.kill,
        config_edits: {
            let mut edits = protocol_edits(&args.protocol, &args.storage);
            if let Some(u) = &args.unicast {
                edits.push((
                    "transport.unicast".to_string(),
                    toml::Value::String(u.clone()),
                ));
            }
            edits
        },
        keep_dir: args.keep_dir,
        progress: !args.json,
        label: "demo".to_string(),
        program: None,
        load_rates: None,
        // A token ring member restarted by `--kill` joins a new configuration and delivers
        // the order from there on (Extended Virtual Synchrony): its count never meets the
        // others'. The run waits for every count to stop moving instead.
        learners_differ: args.protocol == "token" && args.kill,
        placement: Vec::new(),
        load_at_leader: false,
        stamp_values: false,
    }
}

/// The human summary, for a person who has never seen the project.
pub fn render_summary(r: &Report) -> String {
    render_summary_of(r, "uring")
}

/// [`render_summary`] of a run of `protocol` (a `--protocol` name).
pub fn render_summary_of(r: &Report, protocol: &str) -> String {
    let mut s = render_figures(r, protocol);
    s += &match &r.evs {
        Some(e) => render_evs_checks(r, e),
        None => render_checks(r),
    };
    if r.kill {
        s += &render_crash_test(r, protocol);
    }
    if !r.problems.is_empty() {
        s += "\nProblems:\n";
        for p in &r.problems {
            s += &format!("  - {}\n", p.replace('\n', "\n    "));
        }
    }
    if let Some(at) = r.interrupted_at_s {
        s += &format!(
            "\nInterrupted by Ctrl-C at {at:.1} s: the figures cover the load until then.\n"
        );
    }
    if let Some(dir) = &r.kept_dir {
        s += &format!("\nConfig, logs and storage kept in {}\n", dir.display());
    }
    s += &format!("\nResult: {}\n", if r.ok() { "OK" } else { "FAILED" });
    s
}

/// A `--protocol` name as a person reads it.
pub fn protocol_title(name: &str) -> &'static str {
    match name {
        "ringpaxos" => "Ring Paxos",
        "multiring" => "Multi-Ring Paxos: two U-Ring rings, merged round-robin",
        "seqpaxos" => "Sequence Paxos; followers forward to the leader",
        "raft" => "Raft; followers forward to the leader",
        "omnipaxos" => "the omnipaxos crate's core; followers forward to the leader",
        "raftrs" => "the raft-rs crate's core; followers forward to the leader",
        "token" => "the Accelerated Ring, seed 002: the token holder stamps and multicasts",
        _ => "U-Ring Paxos",
    }
}

/// What ran and what it measured: the setup, throughput, latency and the per-node table.
fn render_figures(r: &Report, protocol: &str) -> String {
    let mut s = String::new();
    let rate = if r.rate_values_per_s == 0 {
        "as fast as the ring accepts".to_string()
    } else {
        format!("{} values/s offered", group(r.rate_values_per_s))
    };
    s += &format!(
        "abcast demo: {} nodes on 127.0.0.1, {} values,\n{} s of load, {rate}.\n",
        r.nodes,
        bytes(r.value_size_bytes),
        r.duration_s
    );
    s += &format!(
        "Every node proposes, orders ({}) and delivers",
        protocol_title(protocol)
    );
    match r.window_values {
        Some(w) => s += &format!(",\nwith at most {w} of its values in flight.\n\n"),
        None => s += ".\n\n",
    }
    s += "Throughput, delivered per learner (median of the nodes):\n";
    s += &format!(
        "  {} values/s   {:.1} Mbit/s\n\n",
        group(r.values_per_s.round() as u64),
        r.mbit_per_s
    );
    let exact = if r.latency.exact {
        ""
    } else {
        " (approximate: worst node)"
    };
    s += &format!(
        "Latency, propose -> delivery, {} values{exact}:\n",
        group(r.latency.count)
    );
    s += &format!(
        "  p50 {}   p99 {}   p99.9 {}\n\n",
        ms(r.latency.p50_us),
        ms(r.latency.p99_us),
        ms(r.latency.p999_us)
    );
    s += "Per node (CPU 100 % = one core busy):\n";
    s += "  node  values/s  Mbit/s  CPU %  RSS MiB   delivered  exit\n";
    for n in &r.per_node {
        let lives = if n.incarnations > 1 {
            format!(", {} lives", n.incarnations)
        } else {
            String::new()
        };
        s += &format!(
            "  {:>4}  {:>8}  {:>6.1}  {:>5.0}  {:>7.1}  {:>10}  {}{lives}\n",
            n.id,
            group(n.values_per_s.round() as u64),
            n.mbit_per_s,
            n.cpu_pct,
            n.rss_kib_max as f64 / 1024.0,
            group(n.delivered_values),
            n.exit
        );
    }
    s
}

/// The three checks: agreement, nothing lost, nothing duplicated.
fn render_checks(r: &Report) -> String {
    let mut s = String::new();
    s += "\nAgreement (same values, same order at every learner):\n";
    if r.learners_agree && r.instances_compared > 0 {
        s += &format!(
            "  yes: {} instances compared one by one across {} learners: the same batch at\n  every instance each learner delivered, no gap, all caught up to the end.\n",
            group(r.instances_compared),
            r.per_node.len()
        );
        if r.trimmed_skipped > 0 {
            s += &format!(
                "  note: restarted learners skipped {} instance(s) that every acceptor had\n  already trimmed (in-memory storage keeps a bounded log; snapshots come with\n  durable storage).\n",
                group(r.trimmed_skipped)
            );
        }
    } else if r.learners_agree {
        let hash = r.per_node.first().map_or("", |n| n.order_hash.as_str());
        s += &format!(
            "  yes: {} learners delivered {} values,\n  order hash {hash} at each.\n",
            r.per_node.len(),
            group(r.delivered)
        );
    } else {
        s += "  NO:\n";
        for a in &r.agreement {
            s += &format!("  - {a}\n");
        }
    }
    s += "\nNothing lost, nothing duplicated:\n";
    if r.duplicates.is_empty() {
        s += "  duplicates: none at any learner\n";
    } else {
        for d in &r.duplicates {
            s += &format!("  - DUPLICATE: {d}\n");
        }
    }
    if r.lost.is_empty() {
        s += &format!(
            "  every learner delivered all {} acknowledged values\n",
            group(r.acked_total)
        );
    } else {
        for l in &r.lost {
            s += &format!("  - LOST: {l}\n");
        }
    }
    s
}

/// The token ring's checks: what Extended Virtual Synchrony promises
/// ([`crate::analysis::evs_verdict`]), life by life.
fn render_evs_checks(r: &Report, e: &crate::analysis::EvsVerdict) -> String {
    let mut s = String::new();
    s += "\nExtended Virtual Synchrony (the token ring: a restarted member joins a new\nconfiguration and delivers the total order from there on):\n";
    let stayed: Vec<String> = e.stayed_up.iter().map(|n| n.to_string()).collect();
    if e.disagreements.is_empty() {
        s += &format!(
            "  yes: the members that stayed up (node {}) delivered one order of {} values;\n",
            stayed.join(", node "),
            group(e.order_values)
        );
        s += "  every other life delivered a contiguous run of it:\n";
    } else {
        s += "  NO:\n";
        for a in &r.agreement {
            s += &format!("  - {a}\n");
        }
        s += "  the lives:\n";
    }
    for l in &e.lives {
        s += &format!("    {l}\n");
    }
    s += "\nNothing lost, nothing duplicated:\n";
    if r.duplicates.is_empty() {
        s += "  duplicates: none within any life\n";
    } else {
        for d in &r.duplicates {
            s += &format!("  - DUPLICATE: {d}\n");
        }
    }
    if r.lost.is_empty() {
        s += &format!(
            "  the members that stayed up delivered all {} acknowledged values\n",
            group(e.acked_checked)
        );
    } else {
        for l in &r.lost {
            s += &format!("  - LOST: {l}\n");
        }
    }
    s
}

/// The kills and restarts, the longest stall and the per-second timeline of `--kill`.
fn render_crash_test(r: &Report, protocol: &str) -> String {
    let mut s = String::new();
    s += "\nCrash test (kill -9, restart after about 1 s):\n";
    for k in &r.kills {
        let back = k.restarted_at_s.map_or("never restarted".to_string(), |t| {
            format!("back at {t:.1} s")
        });
        s += &format!(
            "  {:>5.1} s  node {} ({}) killed, {back}\n",
            k.at_s, k.node, k.role
        );
        if k.amnesic {
            s += &match (k.repaired_at_s, k.restarted_at_s) {
                (Some(at), Some(back)) => format!(
                    "         back amnesic (memory storage), repaired by its peers {:.1} s later\n",
                    (at - back).max(0.0)
                ),
                _ => "         back amnesic (memory storage), never repaired\n".to_string(),
            };
        }
        if !k.note.is_empty() {
            s += &format!("         {}\n", k.note);
        }
    }
    if protocol == "token" && !r.kills.is_empty() {
        s += "  (a token ring's coordinator is its representative, the lowest id of the ring:\n  it forms each new ring and sends the ring's first token)\n";
    }
    if let Some(st) = r.longest_stall {
        s += &format!(
            "  longest stall: {:.2} s at node {} ({:.1} s to {:.1} s)\n",
            st.to_s - st.from_s,
            st.node,
            st.from_s,
            st.to_s
        );
    }
    s += "\nTimeline, thousands of values delivered per second\n";
    s += "('-' = no stats from that node in that second):\n";
    s += "  second";
    for n in &r.per_node {
        s += &format!("  node{:<2}", n.id);
    }
    s += "\n";
    for row in &r.timeline {
        s += &format!("  {:>6}", row.second);
        for v in &row.values_per_s {
            match v {
                Some(v) => s += &format!("  {:>6.1}", v / 1000.0),
                None => s += &format!("  {:>6}", "-"),
            }
        }
        if !row.events.is_empty() {
            s += &format!("  <- {}", row.events.join(", "));
        }
        s += "\n";
    }
    s
}

/// The `--json` object; field names carry their units.
pub fn report_json(r: &Report) -> serde_json::Value {
    let kill = if r.kill {
        json!({
            "events": r.kills.iter().map(|k| json!({
                "at_s": k.at_s, "node": k.node, "role": k.role,
                "restarted_at_s": k.restarted_at_s, "note": k.note,
                "amnesic": k.amnesic, "repaired_at_s": k.repaired_at_s,
            })).collect::<Vec<_>>(),
            "longest_stall_s": r.longest_stall.map(|s| s.to_s - s.from_s),
            "nothing_lost": r.lost.is_empty(),
            "no_duplicates": r.duplicates_total == 0,
            "timeline_values_per_s": r.timeline.iter().map(|row| row.values_per_s.clone()).collect::<Vec<_>>(),
        })
    } else {
        serde_json::Value::Null
    };
    json!({
        "ok": r.ok(),
        "nodes": r.nodes,
        "value_size": r.value_size_bytes,
        "duration_s": r.duration_s,
        "rate_values_per_s": r.rate_values_per_s,
        "window_values": r.window_values,
        "values_per_s": r.values_per_s,
        "mbit_per_s": r.mbit_per_s,
        "latency_us_p50": r.latency.p50_us,
        "latency_us_p99": r.latency.p99_us,
        "latency_us_p999": r.latency.p999_us,
        "latency_count": r.latency.count,
        "latency_exact": r.latency.exact,
        "learners_agree": r.learners_agree,
        "delivered": r.delivered,
        "acked": r.acked_total,
        "duplicate_deliveries": r.duplicates_total,
        "lost": r.lost,
        "agreement_notes": r.agreement,
        "problems": r.problems,
        "cpu_pct_per_node": r.per_node.iter().map(|n| n.cpu_pct).collect::<Vec<_>>(),
        "rss_kib_per_node": r.per_node.iter().map(|n| n.rss_kib_max).collect::<Vec<_>>(),
        "values_per_s_per_node": r.per_node.iter().map(|n| n.values_per_s).collect::<Vec<_>>(),
        "kill": kill,
        "kept_dir": r.kept_dir.as_ref().map(|d| d.display().to_string()),
        "interrupted_at_s": r.interrupted_at_s,
        "evs": r.evs.as_ref().map(|e| json!({
            "ok": e.ok(),
            "stayed_up": e.stayed_up,
            "order_values": e.order_values,
            "lives": e.lives,
            "acked_checked": e.acked_checked,
        })),
    })
}

/// Draws the run second by second into `dir/plot.png`: values delivered per node (the
/// demo's timeline) and the latency of the proposals delivered in each second.
pub fn write_plot(dir: &Path, r: &Report) -> Result<PathBuf, String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join("plot.png");
    // Each row is the second [s, s + 1): drawn at its middle.
    let at = |row: &TimelineRow| row.second as f64 + 0.5;
    let rates: Vec<Line> = r
        .per_node
        .iter()
        .enumerate()
        .map(|(col, n)| Line {
            label: format!("node {}", n.id),
            points: r
                .timeline
                .iter()
                .filter_map(|row| {
                    row.values_per_s
                        .get(col)
                        .copied()
                        .flatten()
                        .map(|v| (at(row), v))
                })
                .collect(),
            markers: false,
        })
        .collect();
    // Latency in µs while it is short, in ms once it is not: the axis labels are integers.
    let worst_us = r
        .timeline
        .iter()
        .filter_map(|row| row.latency_us_p99)
        .fold(0.0, f64::max);
    let (unit, per_us) = if worst_us >= 10_000.0 {
        ("ms", 1e-3)
    } else {
        ("µs", 1.0)
    };
    let latency = |label: &str, f: &dyn Fn(&TimelineRow) -> Option<f64>| Line {
        label: label.to_string(),
        points: r
            .timeline
            .iter()
            .filter_map(|row| f(row).map(|v| (at(row), v * per_us)))
            .collect(),
        markers: false,
    };
    let x_desc = if r.kills.is_empty() {
        "seconds since the nodes started".to_string()
    } else {
        let kills: Vec<String> = r
            .kills
            .iter()
            .map(|k| match k.restarted_at_s {
                Some(back) => format!("node {} at {:.1} s (back at {back:.1} s)", k.node, k.at_s),
                None => format!("node {} at {:.1} s", k.node, k.at_s),
            })
            .collect();
        format!(
            "seconds since the nodes started; kill -9 {}",
            kills.join(", ")
        )
    };
    let title = format!(
        "abcast demo: {} nodes, {} values, {} values/s ({:.0} Mbit/s) per learner, {}",
        r.nodes,
        bytes(r.value_size_bytes),
        group(r.values_per_s.round() as u64),
        r.mbit_per_s,
        if r.ok() { "checks OK" } else { "checks FAILED" }
    );
    let panels = [
        LinePanel {
            caption: "Values delivered per second, per node".into(),
            x_desc: x_desc.clone(),
            y_desc: "values/s".into(),
            lines: rates,
        },
        LinePanel {
            caption: format!(
                "Latency, propose to delivery at the proposer, per second ({STATS_MS} ms intervals)"
            ),
            x_desc,
            y_desc: format!("latency ({unit})"),
            lines: vec![
                latency("p50 (median over nodes)", &|row| row.latency_us_p50),
                latency("p99 (worst node)", &|row| row.latency_us_p99),
            ],
        },
    ];
    draw_lines(&path, &title, &panels)?;
    Ok(path)
}

/// `abcast demo`: returns the process exit status (0 only if the run checked out).
/// What the comparison cores cannot be asked: they run on their crates' in-memory storage
/// only, and those crates assume storage that outlives a restart (crates/abcast-peers).
fn check_peer_flags(args: &DemoArgs) -> Result<(), HarnessError> {
    let p = args.protocol.as_str();
    if !matches!(p, "omnipaxos" | "raftrs") {
        return Ok(());
    }
    if args.storage != "memory" {
        return Err(HarnessError::Usage(format!(
            "--storage {}: --protocol {p} runs on its crate's in-memory storage only \
             (crates/abcast-peers/README.md); use --storage memory",
            args.storage
        )));
    }
    if args.kill {
        return Err(HarnessError::Usage(format!(
            "--kill with --protocol {p}: its crate assumes storage that outlives a restart, \
             and runs here on its in-memory storage, so a node killed with -9 would come \
             back empty, outside the crate's model (it can lose acknowledged values). \
             abcast's own seqpaxos and raft repair such a node: try --protocol seqpaxos --kill"
        )));
    }
    Ok(())
}

pub fn run_demo(args: &DemoArgs) -> Result<u8, HarnessError> {
    check_peer_flags(args)?;
    let spec = cluster_spec(args);
    spec.validate()?;
    if !args.json {
        eprintln!(
            "starting {} nodes for {} s of load ({} values){}...",
            spec.nodes,
            spec.duration_s,
            bytes(spec.value_size_bytes),
            if spec.kill {
                ", with kill -9 and restarts"
            } else {
                ""
            }
        );
    }
    let run = run_cluster(&spec)?;
    let report = analyse(&run);
    let (stamp, _) = utc_now();
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(format!("demo-{stamp}")));
    // A plot that cannot be drawn is said, and the run's verdict stands.
    let plot = write_plot(&dir, &report);
    let mut out = std::io::stdout().lock();
    let text = if args.json {
        let mut j = report_json(&report);
        j["protocol"] = json!(args.protocol);
        j["plot"] = json!(plot.as_ref().ok().map(|p| p.display().to_string()));
        j.to_string() + "\n"
    } else {
        let summary = render_summary_of(&report, &args.protocol);
        let plot_line = match &plot {
            Ok(p) => format!(
                "\nPlot (values/s per node and latency, second by second): {}\n",
                p.display()
            ),
            Err(e) => format!("\nNo plot: {e}\n"),
        };
        match summary.rfind("\nResult: ") {
            Some(at) => format!("{}{plot_line}{}", &summary[..at], &summary[at..]),
            None => summary + &plot_line,
        }
    };
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        return runtime("cannot write the summary", e);
    }
    Ok(if report.ok() { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Sample;
    use crate::cluster::test_support::{LINE, record, run_of, sample};
    use abcast_node::stats;

    fn demo_args(protocol: &str) -> DemoArgs {
        DemoArgs {
            protocol: protocol.to_string(),
            nodes: 3,
            value_size_bytes: 1024,
            duration_s: 1.0,
            rate_values_per_s: 0,
            window_values: None,
            kill: false,
            json: true,
            keep_dir: false,
            out: None,
            storage: "memory".to_string(),
            unicast: None,
        }
    }

    #[test]
    fn a_token_demo_runs_the_token_ring_with_its_token_on_udp() {
        let spec = cluster_spec(&demo_args("token"));
        let mut table: toml::Table = abcast_node::nodeconfig::local_cluster(3, 20_000)
            .parse()
            .unwrap();
        for (key, value) in &spec.config_edits {
            crate::cluster::set_toml_key(&mut table, key, value.clone()).unwrap();
        }
        let text = toml::to_string(&table).unwrap();
        let cfg = abcast_node::nodeconfig::parse(&text, Some(1), Path::new("/tmp")).unwrap();
        assert_eq!(cfg.protocol, abcast_node::nodeconfig::ProtocolKind::Token);
        assert_eq!(cfg.transport.unicast, abcast_runtime::Unicast::Udp);
        assert_eq!(
            cfg.transport.control_port_offset,
            Some(abcast_node::token::TOKEN_PORT_OFFSET_DEFAULT)
        );
        assert_eq!(
            protocol_title("token"),
            "the Accelerated Ring, seed 002: the token holder stamps and multicasts"
        );
    }

    #[test]
    fn the_comparison_cores_are_refused_what_their_crates_do_not_promise() {
        for p in ["omnipaxos", "raftrs"] {
            let kill = DemoArgs {
                kill: true,
                duration_s: 10.0,
                ..demo_args(p)
            };
            match run_demo(&kill) {
                Err(HarnessError::Usage(m)) => assert!(m.contains("--kill"), "{m}"),
                other => panic!("expected a usage error, got {other:?}"),
            }
            let durable = DemoArgs {
                storage: "durable".to_string(),
                ..demo_args(p)
            };
            match run_demo(&durable) {
                Err(HarnessError::Usage(m)) => assert!(m.contains("--storage"), "{m}"),
                other => panic!("expected a usage error, got {other:?}"),
            }
        }
    }

    #[test]
    fn the_plot_draws_the_timeline() {
        let lat = |p50: f64, p99: f64| {
            Some(stats::IntervalLatency {
                count: 10,
                p50_us: p50,
                p99_us: p99,
            })
        };
        let with = |at_s: f64, delivered: u64, l| Sample {
            interval_latency: l,
            ..sample(at_s, delivered, LINE)
        };
        let dir = std::env::temp_dir().join(format!("abcast-demo-plot-{}", std::process::id()));
        let report = analyse(&run_of(vec![record(
            0,
            vec![with(0.5, 10, lat(80.0, 95.0))],
        )]));
        let path = write_plot(&dir, &report).unwrap();
        assert!(fs::metadata(&path).unwrap().len() > 10_000);
        fs::remove_dir_all(&dir).unwrap();
    }
}
