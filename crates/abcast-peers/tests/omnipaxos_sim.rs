//! OmniPaxos behind our `Protocol` trait, in our simulator, held to the same checkers as
//! our own protocols (agreement, integrity, durability of acknowledged values, liveness
//! after the heal and while f nodes stay faulty).
//!
//! Replay a failing seed with the line it prints, e.g. `ABCAST_SIM_SEED=3 ABCAST_SIM_MIX=loss
//! ... cargo test -p abcast-peers --test omnipaxos_sim replay -- --exact --nocapture`.

mod common;

use abcast_core::NodeId;
use abcast_core::config::StartInfo;
use abcast_peers::{OmniPaxosCore, OmniPaxosCoreConfig};
use abcast_sim::{FaultMix, SimConfig, replay_from_env, run, run_seeds};
use common::{base, summary};

const TEST: &str = "omnipaxos_sim";

fn factory(cfg: &SimConfig) -> impl Fn(NodeId, StartInfo) -> OmniPaxosCore + use<> {
    let op = OmniPaxosCoreConfig::new(&cfg.nodes);
    move |id, start| OmniPaxosCore::new(op.clone(), id, start).expect("a valid configuration")
}

fn sweep(mix: FaultMix, seeds: std::ops::Range<u64>) {
    let cfg = base(TEST, mix);
    let n = seeds.end - seeds.start;
    match run_seeds(&cfg, mix, seeds, &factory(&cfg)) {
        Ok(r) => summary("omnipaxos", mix, n, &r),
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
fn omnipaxos_runs_are_deterministic() {
    let cfg = base(TEST, FaultMix::Loss).with_run(1, FaultMix::Loss);
    let f = factory(&cfg);
    let a = run(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    let b = run(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(a, b);
}

#[test]
fn omnipaxos_agrees_and_converges_without_faults() {
    sweep(FaultMix::None, 0..10);
}

#[test]
fn omnipaxos_survives_loss_duplication_reordering_and_a_heavy_tail() {
    sweep(FaultMix::Loss, 0..10);
}
