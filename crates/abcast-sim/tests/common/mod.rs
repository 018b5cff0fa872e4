//! What every protocol suite test checks after a sweep of one mix.

use abcast_sim::FaultMix;
use abcast_sim::suites::{self, Proto, SuiteReport, Variant};
use std::ops::Range;

/// Runs `seeds` of `proto` under `mix` and panics with the first violation's replay line;
/// then asserts that the faults the mix exists for happened, and prints the totals.
#[allow(dead_code)]
pub fn sweep_mix(proto: Proto, mix: FaultMix, seeds: Range<u64>) -> SuiteReport {
    let r = suites::sweep(proto, mix, seeds.clone(), Variant::CORRECT, true);
    if let Some(v) = r.violations.first() {
        panic!("{}", v.headline());
    }
    let t = &r.totals;
    eprintln!("{proto} {mix}: {t:?}");
    assert_eq!(t.runs, seeds.end - seeds.start);
    let missing = t.faults.missing(proto.expected_faults(mix));
    assert!(
        missing.is_empty(),
        "{proto} {mix}: over {} seeds these faults never happened: {missing:?} ({:?})",
        t.runs,
        t.faults
    );
    r
}

/// The body of a test named `replay`. With `ABCAST_SIM_SEED` set, replays the run a
/// violation's line names (`suites::replay_from_env`: mix, nodes and scenario from the
/// environment). Otherwise runs `regressions`, fixed `(mix, seed)` runs of `proto` (the
/// seeds that once caught its bugs, most of them beyond the sweeps' 200 seeds), and
/// asserts that each passes: a test that passes doing nothing proves nothing.
#[allow(dead_code)]
pub fn replay_or_regressions(proto: Proto, regressions: &[(FaultMix, u64)]) {
    if std::env::var_os("ABCAST_SIM_SEED").is_some() {
        if let Some(Err(v)) = suites::replay_from_env(proto) {
            panic!("replayed violation {:?} (report above)", v.kind);
        }
        return;
    }
    assert!(!regressions.is_empty(), "{proto}: no regression seeds");
    for &(mix, seed) in regressions {
        let cfg = suites::config(proto, mix, Variant::CORRECT).with_run(seed, mix);
        match suites::run_one(proto, &cfg, Variant::CORRECT) {
            Ok(r) => eprintln!(
                "{proto} {mix} seed {seed}: passed ({} values acked)",
                r.acked_values
            ),
            Err(v) => panic!(
                "{proto}: regression seed {seed} of the {mix} mix fails again: {}",
                v.headline()
            ),
        }
    }
}
