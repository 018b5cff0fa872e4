//! End to end: `abcast demo` starts real node processes on loopback, loads them for two
//! seconds and reports agreement. Kept short (a few seconds) so it runs in every
//! `cargo test`; figures are not asserted, only that values flowed and learners agree.

use std::process::Command;
use std::time::{Duration, Instant};

/// Runs `abcast demo ARGS --json` and returns its exit code and parsed last stdout line.
fn demo_json(args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    // The plot goes to a directory of this call's own, checked and removed here.
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "abcast-cli-demo-{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let out = Command::new(env!("CARGO_BIN_EXE_abcast"))
        .arg("demo")
        .args(args)
        .arg("--json")
        .arg("--out")
        .arg(&dir)
        .output()
        .expect("the abcast binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let last = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("last stdout line is not JSON ({e}): {last}\nstderr: {stderr}"));
    let plot = dir.join("plot.png");
    assert_eq!(
        report["plot"].as_str(),
        Some(plot.to_string_lossy().as_ref()),
        "the demo names its plot"
    );
    assert!(
        std::fs::metadata(&plot).is_ok_and(|m| m.len() > 10_000),
        "no plot drawn at {}",
        plot.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
    (out.status.code(), report, stderr)
}

fn assert_delivered_and_agreed(args: &[&str]) {
    let started = Instant::now();
    let (code, report, stderr) = demo_json(args);
    assert_eq!(
        code,
        Some(0),
        "demo {args:?} failed: {report}\nstderr: {stderr}"
    );
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["learners_agree"], true, "{report}");
    assert!(
        report["delivered"].as_u64().unwrap_or(0) > 0,
        "nothing delivered: {report}"
    );
    assert!(
        report["values_per_s"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
    for key in [
        "mbit_per_s",
        "latency_us_p50",
        "latency_us_p99",
        "latency_us_p999",
    ] {
        assert!(report[key].is_number(), "{key} missing: {report}");
    }
    assert_eq!(report["nodes"], 3);
    assert_eq!(report["duplicate_deliveries"], 0);
    assert_eq!(report["cpu_pct_per_node"].as_array().map(Vec::len), Some(3));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the demo took {:?}",
        started.elapsed()
    );
}

/// The demo exactly as a first-time user runs it, then with the load bounded as in seed 000
/// (20 values in flight per proposer). One test, so the two clusters never share the two
/// cores at the same time.
#[test]
fn a_short_demo_delivers_and_learners_agree() {
    assert_delivered_and_agreed(&["--duration", "2"]);
    assert_delivered_and_agreed(&["--duration", "2", "--window", "20"]);
}
