//! The simulator configuration both adapters run under: three nodes, every one a proposer,
//! acceptor and learner, with the bounds our own protocols' suites are held to
//! (`abcast_sim::suites`): something acknowledged in every run, convergence within 10 s of
//! the heal, within 1.5 s while up to f nodes stay faulty, at most 100 `Busy` answers.

use abcast_sim::suites::{BUSY_REJECTIONS_MAX, CONVERGE_BOUND_US, FAULTS_REMAIN_BOUND_US};
use abcast_sim::{FaultMix, SimConfig, SweepReport};

/// The scenario whose nodes keep their store across restarts (process crashes over a
/// store synced at every write); the default scenario restarts them empty.
pub const KEPT: &str = "kept";

/// The base configuration of `test` (an integration test file of this package) under `mix`,
/// in `scenario` (`""` or [`KEPT`]).
pub fn base(test: &str, scenario: &str, mix: FaultMix) -> SimConfig {
    let mut cfg = SimConfig::new(3, 0, mix).replay_target("abcast-peers", test, scenario);
    cfg.require_acks = true;
    cfg.converge_bound_us = CONVERGE_BOUND_US;
    cfg.faults_remain_bound_us = FAULTS_REMAIN_BOUND_US;
    cfg.busy_rejections_max = Some(BUSY_REJECTIONS_MAX);
    cfg
}

/// Prints a sweep's totals (for the report) and checks that it ran and acknowledged.
pub fn summary(name: &str, mix: FaultMix, seeds: u64, r: &SweepReport) {
    eprintln!(
        "{name} {mix}: {} runs, {} proposed, {} acked, {} busy, {} sent, {} dropped, slowest \
         convergence {} us (seed {})",
        r.runs,
        r.proposed_values,
        r.acked_values,
        r.busy_rejections,
        r.messages_sent,
        r.messages_dropped,
        r.time_to_converge_us_max,
        r.slowest_seed
    );
    assert_eq!(r.runs, seeds);
    assert_eq!(r.runs_without_acks, 0);
    if matches!(
        mix,
        FaultMix::Crash | FaultMix::Mixed | FaultMix::Pause | FaultMix::PowerLoss
    ) {
        assert!(
            r.crashes > 0,
            "{name} {mix}: no node crashed in {seeds} seeds"
        );
    }
}

/// Runs every seed under each mix (not stopping at the first violation), in both
/// scenarios, and prints one line per failing seed and a count per violation kind: what
/// the report of which mixes pass is made of. `ABCAST_PEERS_MIX` (default `all`) and
/// `ABCAST_PEERS_SEEDS` (default 10) pick the sweep.
#[allow(dead_code)]
pub fn probe<P, F>(name: &str, test: &str, factory: impl Fn(&SimConfig) -> F)
where
    P: abcast_core::Protocol,
    F: Fn(abcast_core::NodeId, abcast_core::config::StartInfo) -> P,
{
    for scenario in ["", KEPT] {
        probe_scenario(name, test, scenario, &factory);
    }
}

fn probe_scenario<P, F>(name: &str, test: &str, scenario: &str, factory: &impl Fn(&SimConfig) -> F)
where
    P: abcast_core::Protocol,
    F: Fn(abcast_core::NodeId, abcast_core::config::StartInfo) -> P,
{
    let mixes: Vec<FaultMix> = match std::env::var("ABCAST_PEERS_MIX").as_deref() {
        Ok("all") | Err(_) => FaultMix::ALL.to_vec(),
        Ok(m) => vec![m.parse().expect("a fault mix")],
    };
    let seeds: u64 = std::env::var("ABCAST_PEERS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    for mix in mixes {
        let cfg = base(test, scenario, mix);
        let f = factory(&cfg);
        let mut kinds = std::collections::BTreeMap::new();
        for seed in 0..seeds {
            if let Err(v) = abcast_sim::run(&cfg.with_run(seed, mix), &f) {
                eprintln!("{name} [{scenario}] {mix} seed {seed}: {}", v.headline());
                *kinds.entry(format!("{:?}", v.kind)).or_insert(0u64) += 1;
            }
        }
        eprintln!("PROBE {name} [{scenario}] {mix}: {seeds} seeds, failures {kinds:?}");
    }
}
