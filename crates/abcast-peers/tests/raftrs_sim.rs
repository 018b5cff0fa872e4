//! raft-rs behind our `Protocol` trait, in our simulator, held to the same checkers as
//! our own protocols (agreement, integrity, durability of acknowledged values, liveness
//! after the heal and while f nodes stay faulty).
//!
//! Replay a failing seed with the line it prints, e.g. `ABCAST_SIM_SEED=3 ABCAST_SIM_MIX=loss
//! ... cargo test -p abcast-peers --test raftrs_sim replay -- --exact --nocapture`.

mod common;

use abcast_core::NodeId;
use abcast_core::config::StartInfo;
use abcast_peers::{RaftRsCore, RaftRsCoreConfig};
use abcast_sim::{FaultMix, SimConfig, replay_from_env, run, run_seeds};
use common::{base, summary};

const TEST: &str = "raftrs_sim";

fn factory(cfg: &SimConfig) -> impl Fn(NodeId, StartInfo) -> RaftRsCore + use<> {
    let op = RaftRsCoreConfig::new(&cfg.nodes);
    move |id, start| RaftRsCore::new(op.clone(), id, start).expect("a valid configuration")
}

fn sweep(mix: FaultMix, seeds: std::ops::Range<u64>) {
    let cfg = base(TEST, mix);
    let n = seeds.end - seeds.start;
    match run_seeds(&cfg, mix, seeds, &factory(&cfg)) {
        Ok(r) => summary("raft-rs", mix, n, &r),
        Err(v) => panic!("{}", v.headline()),
    }
}

#[test]
fn replay() {
    if let Some(Err(v)) = replay_from_env(&base(TEST, FaultMix::None), |cfg| factory(cfg)) {
        panic!("replayed violation {:?} (report above)", v.kind);
    }
}

#[test]
fn raftrs_runs_are_deterministic() {
    let cfg = base(TEST, FaultMix::Loss).with_run(1, FaultMix::Loss);
    let f = factory(&cfg);
    let a = run(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    let b = run(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(a, b);
}

#[test]
fn raftrs_agrees_and_converges_without_faults() {
    sweep(FaultMix::None, 0..10);
}

#[test]
fn raftrs_survives_loss_duplication_reordering_and_a_heavy_tail() {
    sweep(FaultMix::Loss, 0..10);
}
