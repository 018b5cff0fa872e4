//! Multi-Ring Paxos over Ring Paxos rings in the simulator: the Multi-Ring deployment of
//! `multiring.rs` (two rings over three acceptors, two learner-only nodes, subscription
//! churn during the faults), each ring a Ring Paxos group whose phase 2 and decisions go by
//! multicast. The same checkers hold: per-ring agreement, integrity, the pairwise merge
//! order of every two learners, convergence after the heal. The sweep binary runs every mix
//! with more seeds (`sweep --protocol multiring-ringpaxos --mix all --seeds 200`).
//!
//! Replay a failing seed with the line it prints (`... cargo test -p abcast-sim --test
//! multiring_ringpaxos replay -- --exact --nocapture`).

mod common;

use abcast_sim::suites::{self, Proto, Variant};
use abcast_sim::{FaultMix, run_with_disk};
use common::sweep_mix;

const P: Proto = Proto::MultiRingPaxos;

/// With `ABCAST_SIM_SEED` set, replays that run; otherwise one seed past the sweeps of the
/// mixes whose faults reach the most code, and the power_loss seeds of issue 33's long
/// run: 1032, 1401, 1424, 1512, 1594 and 1782, which a learner broke by installing the
/// snapshot of a peer that had not followed a ring before the snapshot's turn (it passed
/// over that ring's instances of those turns, which it followed: `install_from_peer`'s
/// `passes_over`, as Multi-Ring's seed 1060), and 1130, where no snapshot fit the learners
/// that followed every ring all along (`multiring/snapshot.rs`, "Classes"); 1594 also
/// needs a former classmate's retained snapshot ("Retained").
#[test]
fn replay() {
    let mut list = vec![
        (FaultMix::Mixed, 200),
        (FaultMix::PowerLoss, 200),
        (FaultMix::Partition, 200),
    ];
    for seed in [1032, 1130, 1401, 1424, 1512, 1594, 1782] {
        list.push((FaultMix::PowerLoss, seed));
    }
    common::replay_or_regressions(P, &list);
}

/// Found by issue 33's second long run (power_loss seeds 1000 to 1999, on the code with the
/// classes and retained snapshots of `multiring/snapshot.rs`) and not fixed yet: seeds
/// 1051, 1453 and 1659 leave acknowledged values undelivered at a learner behind a ring's
/// trim point that no snapshot fits. Not diagnosed yet. In each, after the power loss,
/// the learners that followed every ring all along are behind. Candidates, none confirmed:
/// the rings trimmed on reports of a classmate that changed its subscriptions and then
/// restarted (a retained snapshot is kept in memory only); two learners that both left a
/// ring over different turns share a class (a class keeps no history); a restarted
/// coordinator trims without a down learner's class (docs/design/multiring-snapshots.md,
/// Limits). Seed 1051 as read: ring 1 trimmed on the quorum of all learners while the two
/// learners that follow every ring had reported no snapshot yet (class 0, so in no class
/// quorum). Reporting the class from the start made the three pass but broke power_loss
/// seed 36 (not landed). Run with `--ignored`; once fixed, move them to `replay`'s
/// regressions.
#[test]
#[ignore = "open: Multi-Ring over Ring Paxos power_loss seeds 1051, 1453, 1659 (docs/testing.md)"]
fn open_power_loss_seeds_of_the_long_run() {
    let list: Vec<_> = [1051, 1453, 1659]
        .iter()
        .map(|&s| (FaultMix::PowerLoss, s))
        .collect();
    common::replay_or_regressions(P, &list);
}

#[test]
fn multiring_over_ringpaxos_runs_are_deterministic() {
    let cfg = suites::config(P, FaultMix::Mixed, Variant::CORRECT).with_run(3, FaultMix::Mixed);
    let f = suites::multiring_ringpaxos_factory(&cfg, Variant::CORRECT);
    let a = run_with_disk(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    let b = run_with_disk(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(a, b);
}

#[test]
fn multiring_over_ringpaxos_merges_in_one_order_without_faults() {
    sweep_mix(P, FaultMix::None, 0..20);
}

#[test]
fn multiring_over_ringpaxos_survives_loss_and_subscription_churn() {
    sweep_mix(P, FaultMix::Loss, 0..200);
}

#[test]
fn multiring_over_ringpaxos_survives_partitions() {
    sweep_mix(P, FaultMix::Partition, 0..200);
}

#[test]
fn multiring_over_ringpaxos_survives_crashes_and_stale_messages() {
    sweep_mix(P, FaultMix::Crash, 0..200);
}

#[test]
fn multiring_over_ringpaxos_late_joiner_merges_every_ring() {
    sweep_mix(P, FaultMix::LateJoin, 0..200);
}

#[test]
fn multiring_over_ringpaxos_survives_the_mixed_preset() {
    sweep_mix(P, FaultMix::Mixed, 0..200);
}

#[test]
fn multiring_over_ringpaxos_survives_process_pauses() {
    sweep_mix(P, FaultMix::Pause, 0..200);
}

/// With snapshots of the merge and each ring trimmed below them (issue 33), as over U-Ring
/// rings.
#[test]
fn multiring_over_ringpaxos_synced_logs_survive_power_loss() {
    let r = sweep_mix(P, FaultMix::PowerLoss, 0..200);
    let t = &r.totals;
    assert!(
        t.snapshots_taken > 0 && t.snapshots_restored > 0 && t.snapshots_installed > 0,
        "merge snapshots were not taken, restored and installed: {t:?}"
    );
}

#[test]
fn multiring_over_ringpaxos_learners_that_skip_a_ring_stop_following_it() {
    sweep_mix(P, FaultMix::LearnerSkip, 0..200);
}
