//! The simulator configuration both adapters run under: three nodes, every one a proposer,
//! acceptor and learner, with the bounds our own protocols' suites are held to
//! (`abcast_sim::suites`): something acknowledged in every run, convergence within 10 s of
//! the heal, within 1.5 s while up to f nodes stay faulty, at most 100 `Busy` answers.

use abcast_sim::suites::{BUSY_REJECTIONS_MAX, CONVERGE_BOUND_US, FAULTS_REMAIN_BOUND_US};
use abcast_sim::{FaultMix, SimConfig, SweepReport};

/// The base configuration of `test` (an integration test file of this package) under `mix`.
pub fn base(test: &str, mix: FaultMix) -> SimConfig {
    let mut cfg = SimConfig::new(3, 0, mix).replay_target("abcast-peers", test, "");
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
}
