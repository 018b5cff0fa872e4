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
