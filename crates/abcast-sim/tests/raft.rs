//! Raft with joint consensus (seed 001 §2.5) in the simulator, through the public contract.
//!
//! First round (issue 17): the mixes below pass 200 seeds with their fault kinds. The
//! partition and mixed mixes break the faults-remain liveness bound (1.5 s) on a few seeds
//! (partition 4 and 18, mixed 6 and 16 of 100: values of the connected side delivered late,
//! no safety violation), and crash, late_join and pause do not yet produce every fault kind
//! their mix expects (the late joiner is no preferred leader in Raft); they join this file
//! once that is understood. Sweep them with `cargo run --release -p abcast-sim --bin sweep
//! -- --protocol raft --mix all --seeds 200`.

mod common;

use abcast_sim::FaultMix;
use abcast_sim::suites::{self, Proto};
use common::sweep_mix;

const P: Proto = Proto::Raft;

#[test]
fn replay() {
    if let Some(Err(v)) = suites::replay_from_env(P) {
        panic!("replayed violation {:?} (report above)", v.kind);
    }
}

#[test]
fn raft_agrees_and_converges_without_faults() {
    sweep_mix(P, FaultMix::None, 0..20);
}

#[test]
fn raft_survives_loss_duplication_reordering_and_a_heavy_tail() {
    sweep_mix(P, FaultMix::Loss, 0..200);
}

#[test]
fn raft_synced_logs_survive_every_voter_losing_power_at_once() {
    sweep_mix(P, FaultMix::PowerLoss, 0..200);
}
