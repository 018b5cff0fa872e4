//! IP-multicast Ring Paxos (seed 003) in the simulator: every fault mix, many seeds, through
//! the public contract only (`RingPaxos::new(cfg, me, start, store)`, `MemoryStore`).
//!
//! Six nodes: 0, 1, 2 are proposer + acceptor + learner, 3, 4, 5 are learners only. The ring
//! of phase 2 is f + 1 = 2 acceptors, the third acceptor a spare. `multicast_loopback` is on
//! (the default), and the network's loss applies to each multicast copy independently, so
//! the `loss` mix exercises lost `Phase2a`s and decisions at single learners.
//!
//! Replay a failing seed with the line it prints, e.g.
//! `ABCAST_SIM_SEED=0 ABCAST_SIM_MIX=crash ABCAST_SIM_NODES=6 ... cargo test -p abcast-sim
//! --test ringpaxos replay -- --exact --nocapture`.

use abcast_core::NodeId;
use abcast_core::ringpaxos::{RingPaxos, RingPaxosConfig, StartInfo};
use abcast_core::storage::MemoryStore;
use abcast_sim::{FaultMix, SimConfig, replay_from_env, run, run_seeds};

const PAL: [u32; 3] = [0, 1, 2];

fn base() -> SimConfig {
    let mut cfg = SimConfig::new(6, 0, FaultMix::None).replay_target("abcast-sim", "ringpaxos", "");
    cfg.acceptors = PAL.iter().map(|&i| NodeId(i)).collect();
    cfg
}

/// A node with an in-memory acceptor store: a restart forgets everything (amnesic).
fn factory(cfg: &SimConfig) -> impl Fn(NodeId, StartInfo) -> RingPaxos + use<> {
    let pal: Vec<u32> = cfg
        .nodes
        .iter()
        .map(|n| n.0)
        .filter(|i| PAL.contains(i))
        .collect();
    let learners: Vec<u32> = cfg
        .nodes
        .iter()
        .map(|n| n.0)
        .filter(|i| !PAL.contains(i))
        .collect();
    let mut rp = RingPaxosConfig::with_roles(&pal, &learners);
    // 1 ms ticks instead of 200 us: five times fewer tick events per run, so the whole
    // file stays within a minute on two cores; the protocol's rules are the same (the
    // simulator ticks after every input anyway).
    rp.batch_linger_us = 1000;
    rp.decision_linger_us = 1000;
    move |id, start| {
        let store = Box::new(MemoryStore::new(
            rp.store_capacity_instances,
            rp.store_capacity_bytes,
        ));
        RingPaxos::new(rp.clone(), id, start, store).expect("valid ring paxos config")
    }
}

/// The replayed run may have another node count: acceptors are the PAL nodes present.
fn setup(cfg: &mut SimConfig) -> impl Fn(NodeId, StartInfo) -> RingPaxos + use<> {
    cfg.acceptors = cfg
        .nodes
        .iter()
        .copied()
        .filter(|n| PAL.contains(&n.0))
        .collect();
    factory(cfg)
}

fn sweep(mix: FaultMix, seeds: std::ops::Range<u64>) {
    let cfg = base();
    match run_seeds(&cfg, mix, seeds, &factory(&cfg)) {
        Ok(s) => eprintln!("{mix}: {s:?}"),
        Err(v) => panic!("{}", v.headline()),
    }
}

#[test]
fn replay() {
    if let Some(Err(v)) = replay_from_env(&base(), setup) {
        panic!("replayed violation {:?} (report above)", v.kind);
    }
}

#[test]
fn ringpaxos_runs_are_deterministic() {
    let cfg = base().with_run(1, FaultMix::Loss);
    let a = run(&cfg, &factory(&cfg)).unwrap_or_else(|v| panic!("{v}"));
    let b = run(&cfg, &factory(&cfg)).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(a, b);
}

#[test]
fn ringpaxos_agrees_and_converges_without_faults() {
    sweep(FaultMix::None, 0..20);
}

#[test]
fn ringpaxos_survives_multicast_loss_duplication_and_reordering() {
    sweep(FaultMix::Loss, 0..200);
}

#[test]
fn ringpaxos_survives_partitions_including_one_way() {
    sweep(FaultMix::Partition, 0..200);
}

#[test]
fn ringpaxos_survives_coordinator_and_acceptor_crashes_with_amnesic_restarts() {
    sweep(FaultMix::Crash, 0..200);
}

#[test]
fn ringpaxos_late_joiner_becomes_coordinator_and_delivers_everything() {
    sweep(FaultMix::LateJoin, 0..200);
}
