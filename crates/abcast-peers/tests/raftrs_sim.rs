//! raft-rs behind our `Protocol` trait, in our simulator, held to the same checkers as
//! our own protocols (agreement, integrity, durability of acknowledged values, liveness
//! after the heal and while f nodes stay faulty). Two scenarios: nodes restart empty (a new
//! `MemStorage`, the default), or keep their store across restarts (`kept`: a durable
//! store synced at every write, under process crashes).
//!
//! Replay a failing seed with the line it prints, e.g. `ABCAST_SIM_SEED=3 ABCAST_SIM_MIX=loss
//! ... cargo test -p abcast-peers --test raftrs_sim replay -- --exact --nocapture`.

mod common;

use abcast_core::NodeId;
use abcast_core::config::StartInfo;
use abcast_peers::{RaftRsCore, RaftRsCoreConfig};
use abcast_sim::{FaultMix, SimConfig, replay_from_env, run, run_seeds_each};
use common::{KEPT, base, summary};
use raft::storage::MemStorage;
use std::cell::RefCell;
use std::collections::HashMap;

const TEST: &str = "raftrs_sim";

/// Nodes of `cfg.nodes`; in the `kept` scenario each node's store outlives its restarts
/// (a first start, incarnation 0, begins a new run with a new store).
fn factory(cfg: &SimConfig) -> impl Fn(NodeId, StartInfo) -> RaftRsCore + use<> {
    let rc = RaftRsCoreConfig::new(&cfg.nodes);
    let keep = cfg.replay.scenario == KEPT;
    let stores: RefCell<HashMap<NodeId, MemStorage>> = RefCell::default();
    move |id, start| {
        let store = if keep {
            let mut stores = stores.borrow_mut();
            if start.incarnation == 0 {
                stores.remove(&id);
            }
            stores.entry(id).or_default().clone()
        } else {
            MemStorage::new()
        };
        RaftRsCore::with_storage(rc.clone(), id, start, store).expect("a valid configuration")
    }
}

fn sweep(scenario: &str, mix: FaultMix, seeds: std::ops::Range<u64>) {
    let cfg = base(TEST, scenario, mix);
    let n = seeds.end - seeds.start;
    // The factory keeps a node's store for its restarts within one run: one per run, so
    // that runs side by side do not share stores.
    match run_seeds_each(&cfg, mix, seeds, factory) {
        Ok(r) => summary(&format!("raft-rs [{scenario}]"), mix, n, &r),
        Err(v) => panic!("{}", v.headline()),
    }
}

/// With `ABCAST_SIM_SEED` set, replays that run; otherwise seed 30 (past the sweeps of the
/// kept scenario) of its mixed and crash mixes, and seed 50 of loss, which must pass.
#[test]
fn replay() {
    if std::env::var_os("ABCAST_SIM_SEED").is_none() {
        sweep(KEPT, FaultMix::Mixed, 30..31);
        sweep(KEPT, FaultMix::Crash, 30..31);
        sweep("", FaultMix::Loss, 50..51);
        return;
    }
    if let Some(Err(v)) = replay_from_env(&base(TEST, "", FaultMix::None), |cfg| factory(cfg)) {
        panic!("replayed violation {:?} (report above)", v.kind);
    }
}

#[test]
fn raftrs_runs_are_deterministic() {
    let cfg = base(TEST, "", FaultMix::Loss).with_run(1, FaultMix::Loss);
    let f = factory(&cfg);
    let a = run(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    let b = run(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(a, b);
}

#[test]
fn raftrs_agrees_and_converges_without_faults() {
    sweep("", FaultMix::None, 0..50);
}

#[test]
fn raftrs_survives_loss_duplication_reordering_and_a_heavy_tail() {
    sweep("", FaultMix::Loss, 0..50);
}

// With each node's store kept across its restarts (`kept`), every mix passes; restarted
// empty, the crash mixes break the crate's assumption of durable promises (module comment
// of `omni.rs` / `raftrs.rs`, and the report of the `probe` test).

#[test]
fn raftrs_with_kept_stores_survives_partitions() {
    sweep(KEPT, FaultMix::Partition, 0..30);
}

#[test]
fn raftrs_with_kept_stores_survives_crashes_partial_fanout_and_stale_messages() {
    sweep(KEPT, FaultMix::Crash, 0..30);
}

#[test]
fn raftrs_with_kept_stores_survives_a_late_joiner() {
    sweep(KEPT, FaultMix::LateJoin, 0..30);
}

#[test]
fn raftrs_with_kept_stores_survives_the_mixed_preset() {
    sweep(KEPT, FaultMix::Mixed, 0..30);
}

#[test]
fn raftrs_with_kept_stores_survives_process_pauses() {
    sweep(KEPT, FaultMix::Pause, 0..30);
}

#[test]
fn raftrs_with_kept_stores_survives_every_node_crashing_at_once() {
    sweep(KEPT, FaultMix::PowerLoss, 0..30);
}

#[test]
fn raftrs_with_kept_stores_survives_the_learner_skip_mix() {
    sweep(KEPT, FaultMix::LearnerSkip, 0..30);
}

/// Every fault mix, every seed, all violations listed, both scenarios (`ABCAST_PEERS_MIX`,
/// `ABCAST_PEERS_SEEDS`): `cargo test -p abcast-peers --test raftrs_sim probe -- --ignored
/// --nocapture`.
#[test]
#[ignore = "a report, not a check: prints which mixes pass"]
fn probe() {
    common::probe("raftrs", TEST, factory);
}
