//! End to end: `abcast chaos` (issue 33) on every protocol, one short smoke each, in one
//! test so they run one after another (each starts real node processes in network
//! namespaces of their own; side by side they would share the two cores of CI and the
//! nemesis's recovery bound with each other). The long run (10 seeds x 60 s per protocol)
//! is in docs/benchmarks/chaos/.

use std::process::Command;

/// Seconds of load per protocol (the 20-second smoke): a few faults each, about
/// 25 s per protocol with the heal, the stop and the checks.
const SMOKE_S: &str = "20";

fn chaos_json(protocol: &str, seed: &str) -> (Option<i32>, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_abcast"))
        .args(["chaos", "--protocol", protocol, "--seed", seed])
        .args(["--duration", SMOKE_S, "--rate", "300", "--json"])
        .env_remove("ABCAST_MUTATION")
        .output()
        .expect("the abcast binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let last = stdout.lines().last().unwrap_or_default();
    let report: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| {
        panic!("{protocol}: last stdout line is not JSON ({e}): {last}\nstderr: {stderr}")
    });
    (out.status.code(), report, stderr)
}

#[test]
fn every_protocol_keeps_its_promises_under_the_nemesis() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: abcast chaos needs root (network namespaces, nft)");
        return;
    }
    for (protocol, seed) in [
        ("uring", "1"),
        ("ringpaxos", "2"),
        ("multiring", "3"),
        ("seqpaxos", "4"),
        ("raft", "5"),
        ("token", "6"),
    ] {
        let (code, r, stderr) = chaos_json(protocol, seed);
        assert_eq!(code, Some(0), "{protocol}: {r}\nstderr: {stderr}");
        assert_eq!(r["ok"], true, "{protocol}: {r}");
        for key in ["agreement", "live_after_heal"] {
            assert_eq!(r[key], true, "{protocol}: {key}: {r}");
        }
        for key in ["lost_acked", "duplicates", "phantom"] {
            assert_eq!(r[key], 0, "{protocol}: {key}: {r}");
        }
        let faults: u64 = r["faults"]
            .as_object()
            .map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum());
        assert!(faults >= 1, "{protocol}: the nemesis did nothing: {r}");
        assert!(
            r["acked"].as_u64().unwrap_or(0) > 0,
            "{protocol}: nothing acknowledged: {r}"
        );
    }
}
