//! U-Ring Paxos in the simulator: every fault mix, many seeds, through the public contract
//! only (`URing::new(cfg, me, start, store)`, `RingConfig::pal`, `MemoryStore`).
//!
//! Replay a failing seed with the line it prints, e.g.
//! `ABCAST_SIM_SEED=0 ABCAST_SIM_MIX=partition ABCAST_SIM_NODES=3 ... cargo test -p abcast-sim
//! --test uring replay -- --exact --nocapture` (every event, every decoded message, to stderr).
//!

use abcast_core::NodeId;
use abcast_core::storage::MemoryStore;
use abcast_core::uring::{RingConfig, StartInfo, URing};
use abcast_sim::{FaultMix, SimConfig, replay_from_env, run, run_seeds};

fn base(nodes: u32) -> SimConfig {
    SimConfig::new(nodes, 0, FaultMix::None).replay_target("abcast-sim", "uring", "")
}

/// A PAL node with an in-memory acceptor store: a restart forgets everything (amnesic).
fn factory(cfg: &SimConfig) -> impl Fn(NodeId, StartInfo) -> URing + use<> {
    let ids: Vec<u32> = cfg.nodes.iter().map(|n| n.0).collect();
    let ring = RingConfig::pal(&ids);
    move |id, start| {
        let store = Box::new(MemoryStore::new(
            ring.store_capacity_instances,
            ring.store_capacity_bytes,
        ));
        URing::new(ring.clone(), id, start, store).expect("valid ring config")
    }
}

fn sweep(nodes: u32, mix: FaultMix, seeds: std::ops::Range<u64>) {
    let cfg = base(nodes);
    match run_seeds(&cfg, mix, seeds, &factory(&cfg)) {
        Ok(s) => eprintln!("{mix}: {s:?}"),
        Err(v) => panic!("{}", v.headline()),
    }
}

#[test]
fn replay() {
    if let Some(Err(v)) = replay_from_env(&base(3), |cfg| factory(cfg)) {
        panic!("replayed violation {:?} (report above)", v.kind);
    }
}

#[test]
fn uring_runs_are_deterministic() {
    let cfg = base(3).with_run(1, FaultMix::Loss);
    let a = run(&cfg, &factory(&cfg)).unwrap_or_else(|v| panic!("{v}"));
    let b = run(&cfg, &factory(&cfg)).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(a, b);
}

#[test]
fn uring_agrees_and_converges_without_faults() {
    sweep(3, FaultMix::None, 0..20);
}

#[test]
fn uring_survives_loss_duplication_and_reordering() {
    sweep(3, FaultMix::Loss, 0..200);
}

#[test]
fn uring_late_joiner_becomes_coordinator_and_delivers_everything() {
    sweep(3, FaultMix::LateJoin, 0..200);
}

#[test]
fn uring_survives_partitions_including_one_way() {
    sweep(3, FaultMix::Partition, 0..200);
}

#[test]
fn uring_survives_crashes_with_amnesic_restarts() {
    sweep(3, FaultMix::Crash, 0..200);
}

#[test]
fn uring_five_nodes_survive_the_mixed_preset() {
    sweep(5, FaultMix::Mixed, 0..200);
}

/// The mixed preset over more seeds than every `cargo test` can afford (with the test above,
/// seeds 0..1000). Seed 24 of the preset is where a restarted coordinator reused a ballot of
/// its earlier life before ballots carried the incarnation. Run with `cargo test -p
/// abcast-sim --test uring wide -- --ignored --nocapture`.
#[test]
#[ignore]
fn uring_five_nodes_survive_the_mixed_preset_wide() {
    sweep(5, FaultMix::Mixed, 200..1000);
}
