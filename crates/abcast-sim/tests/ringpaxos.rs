//! IP-multicast Ring Paxos (seed 003) in the simulator: every fault mix of its suite
//! (`abcast_sim::suites`), 200 seeds each, through the public contract only.
//!
//! Six nodes: 0, 1, 2 are proposer + acceptor + learner, 3, 4, 5 are learners only. The ring
//! of phase 2 is f + 1 = 2 acceptors, the third acceptor a spare. `multicast_loopback` is on
//! (the default), and the network's loss applies to each multicast copy independently, so
//! the `loss` mix exercises lost `Phase2a`s and decisions at single learners.
//!
//! Replay a failing seed with the line it prints, e.g.
//! `ABCAST_SIM_SEED=0 ABCAST_SIM_MIX=crash ABCAST_SIM_NODES=6 ... cargo test -p abcast-sim
//! --test ringpaxos replay -- --exact --nocapture`.

mod common;

use abcast_sim::suites::{self, Proto, Variant};
use abcast_sim::{FaultMix, run_with_disk};
use common::sweep_mix;

const P: Proto = Proto::RingPaxos;

/// With `ABCAST_SIM_SEED` set, replays that run; otherwise power_loss 2088 (a stateless
/// learner skipped untrimmed instances, 61d86a7) and one seed past the sweeps of the mixed
/// and crash mixes.
#[test]
fn replay() {
    common::replay_or_regressions(
        P,
        &[
            (FaultMix::PowerLoss, 2088),
            (FaultMix::Mixed, 200),
            (FaultMix::Crash, 200),
        ],
    );
}

#[test]
fn ringpaxos_runs_are_deterministic() {
    let cfg = suites::config(P, FaultMix::Mixed, Variant::CORRECT).with_run(1, FaultMix::Mixed);
    let f = suites::ringpaxos_factory(&cfg, Variant::CORRECT);
    let a = run_with_disk(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    let b = run_with_disk(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(a, b);
}

#[test]
fn ringpaxos_agrees_and_converges_without_faults() {
    sweep_mix(P, FaultMix::None, 0..20);
}

#[test]
fn ringpaxos_survives_multicast_loss_duplication_reordering_and_a_heavy_tail() {
    sweep_mix(P, FaultMix::Loss, 0..200);
}

#[test]
fn ringpaxos_survives_partitions_and_converges_with_an_acceptor_cut_off() {
    sweep_mix(P, FaultMix::Partition, 0..200);
}

#[test]
fn ringpaxos_survives_crashes_partial_fanout_and_stale_messages() {
    sweep_mix(P, FaultMix::Crash, 0..200);
}

#[test]
fn ringpaxos_late_joiner_becomes_coordinator_and_delivers_everything() {
    sweep_mix(P, FaultMix::LateJoin, 0..200);
}

#[test]
fn ringpaxos_survives_the_mixed_preset() {
    sweep_mix(P, FaultMix::Mixed, 0..200);
}

#[test]
fn ringpaxos_survives_process_pauses() {
    sweep_mix(P, FaultMix::Pause, 0..200);
}

#[test]
fn ringpaxos_synced_logs_survive_every_acceptor_losing_power_at_once() {
    sweep_mix(P, FaultMix::PowerLoss, 0..200);
}

#[test]
fn ringpaxos_learners_skip_what_every_window_forgot_and_stay_in_agreement() {
    sweep_mix(P, FaultMix::LearnerSkip, 0..200);
}
