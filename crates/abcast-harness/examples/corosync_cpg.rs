//! Corosync CPG alone, the competitor's half of `abcast bench group-peer` (issue 18), for
//! tuning Corosync and reproducing `docs/benchmarks/group-peer/corosync.md`:
//!
//! ```sh
//! cargo run --release -p abcast-harness --example corosync_cpg -- --senders 1 --runs 3
//! ```
//!
//! Runs `--runs` times [`run_cpg_workload`], prints each run's JSON line and then the
//! medians. Needs root, corosync and libcpg-dev (it says what is missing).

use abcast_harness::bench::corosync::{
    CorosyncTransport, CorosyncTuning, CpgFigures, CpgSpec, cpg_available, run_cpg_workload,
};
use abcast_node::stats::median;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
struct Args {
    /// Members that send (1 to 3).
    #[arg(long, default_value_t = 1)]
    senders: usize,
    /// Seconds of the measure window per run.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    #[arg(long, default_value_t = 3)]
    runs: u32,
    #[arg(long, default_value_t = 1024)]
    bytes: usize,
    /// Output directory (one subdirectory per run).
    #[arg(long, default_value = "/tmp/abcast-corosync-cpg")]
    out: PathBuf,
    /// Corosync 3's default configuration instead of the tuned one.
    #[arg(long)]
    defaults: bool,
    /// Override the transport: knet or udpu.
    #[arg(long)]
    transport: Option<String>,
    /// Override totem.netmtu (0: corosync's default).
    #[arg(long)]
    netmtu: Option<u32>,
    /// Override totem.window_size (0: corosync's default).
    #[arg(long)]
    window_size: Option<u32>,
    /// Override totem.max_messages (0: corosync's default).
    #[arg(long)]
    max_messages: Option<u32>,
}

fn tuning(a: &Args) -> Result<CorosyncTuning, String> {
    let mut t = if a.defaults {
        CorosyncTuning::defaults()
    } else {
        CorosyncTuning::tuned()
    };
    match a.transport.as_deref() {
        None => {}
        Some("knet") => t.transport = CorosyncTransport::Knet,
        Some("udpu") => t.transport = CorosyncTransport::Udpu,
        Some(other) => return Err(format!("--transport {other}: want knet or udpu")),
    }
    let set = |v: Option<u32>, field: &mut Option<u32>| {
        if let Some(v) = v {
            *field = (v != 0).then_some(v);
        }
    };
    set(a.netmtu, &mut t.netmtu);
    set(a.window_size, &mut t.window_size);
    set(a.max_messages, &mut t.max_messages);
    Ok(t)
}

fn line(f: &CpgFigures) -> String {
    format!(
        "{{\"senders\":{},\"msgs_per_s\":{:.0},\"mbit_per_s\":{:.1},\"latency_us_p50\":{:.0},\
         \"latency_us_p99\":{:.0},\"sent_msgs_per_s\":{:.0},\"order_violations\":{},\
         \"missing\":{},\"total_order_agrees\":{},\"tuning\":\"{}\"}}",
        f.senders,
        f.msgs_per_s,
        f.mbit_per_s,
        f.latency_us_p50,
        f.latency_us_p99,
        f.sent_msgs_per_s,
        f.order_violations,
        f.missing,
        f.total_order_agrees,
        f.tuning
    )
}

fn main() -> ExitCode {
    let a = Args::parse();
    if let Err(e) = cpg_available() {
        eprintln!("{e}");
        return ExitCode::from(2);
    }
    let tuning = match tuning(&a) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut done: Vec<CpgFigures> = Vec::new();
    let mut failed = 0;
    for run in 1..=a.runs {
        let spec = CpgSpec {
            message_bytes: a.bytes,
            tuning: tuning.clone(),
            ..CpgSpec::new(a.senders, a.duration, a.out.join(format!("run-{run}")))
        };
        match run_cpg_workload(&spec) {
            Ok(f) => {
                println!("{}", line(&f));
                done.push(f);
            }
            Err(e) => {
                eprintln!("run {run} failed: {e}");
                failed += 1;
                if abcast_harness::bench::corosync::interrupted() {
                    break;
                }
            }
        }
    }
    let med = |g: &dyn Fn(&CpgFigures) -> f64| {
        median(&done.iter().map(g).collect::<Vec<f64>>()).unwrap_or(f64::NAN)
    };
    println!(
        "medians of {} runs ({} failed), {} sender(s), {} B, {}: {:.0} msgs/s, {:.1} Mbit/s, \
         latency p50 {:.0} us, p99 {:.0} us",
        done.len(),
        failed,
        a.senders,
        a.bytes,
        tuning.describe(),
        med(&|f| f.msgs_per_s),
        med(&|f| f.mbit_per_s),
        med(&|f| f.latency_us_p50),
        med(&|f| f.latency_us_p99)
    );
    if failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
