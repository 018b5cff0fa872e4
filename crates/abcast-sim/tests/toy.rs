//! The simulator on the toy sequencer: the toy passes the mixes it is built for, every
//! deliberately broken variant is caught with the specific violation, runs are
//! deterministic, and a failure prints a replay line that works.
//!
//! Replay a failing seed of this file with the line it prints, e.g.
//! `ABCAST_SIM_SEED=7 ABCAST_SIM_MIX=loss ... cargo test -p abcast-sim --test toy replay -- --exact --nocapture`.
//! `ABCAST_SIM_SCENARIO` picks the variant: `ok` (default), `skip_gaps`, `order_twice`,
//! `reuse_instance`.

use abcast_core::NodeId;
use abcast_core::config::StartInfo;
use abcast_sim::toy::{Flaw, Toy, ToyConfig};
use abcast_sim::{
    FaultMix, SimConfig, SimReport, SweepReport, Violation, ViolationKind, replay_from_env, run,
    run_seeds,
};
use std::sync::{Arc, Mutex};

fn base(nodes: u32, scenario: &str) -> SimConfig {
    SimConfig::new(nodes, 0, FaultMix::None).replay_target("abcast-sim", "toy", scenario)
}

/// The toy for `cfg`: its members, and the flaw the scenario names. The toy keeps its order
/// only in the sequencer's memory, so the sequencer is spared from crashes. Sweeps and the
/// replay both go through here, so a replay reruns exactly the run that failed.
fn setup(cfg: &mut SimConfig) -> impl Fn(NodeId, StartInfo) -> Toy + use<> {
    let mut toy = ToyConfig::new(&cfg.nodes);
    toy.flaw = match cfg.replay.scenario.as_str() {
        "skip_gaps" => Some(Flaw::SkipGaps),
        "order_twice" => Some(Flaw::OrderTwice),
        "reuse_instance" => Some(Flaw::ReuseInstance),
        _ => None,
    };
    cfg.crash_exempt = vec![toy.sequencer];
    move |id, start| Toy::new(toy.clone(), id, start)
}

fn sweep(
    nodes: u32,
    scenario: &str,
    mix: FaultMix,
    seeds: std::ops::Range<u64>,
) -> Result<SweepReport, Box<Violation>> {
    let mut cfg = base(nodes, scenario);
    let factory = setup(&mut cfg);
    run_seeds(&cfg, mix, seeds, &factory)
}

fn sweep_ok(nodes: u32, mix: FaultMix, seeds: std::ops::Range<u64>) {
    match sweep(nodes, "ok", mix, seeds.clone()) {
        Ok(s) => {
            assert_eq!(s.runs, seeds.end - seeds.start);
            assert!(s.acked_values > 0, "{s:?}");
            eprintln!("{mix}: {s:?}");
        }
        Err(v) => panic!("{}", v.headline()),
    }
}

/// The first violation of the broken toy over `seeds`, which must exist.
fn first_violation(scenario: &str, mix: FaultMix, seeds: std::ops::Range<u64>) -> Box<Violation> {
    match sweep(3, scenario, mix, seeds) {
        Ok(s) => panic!("the checkers missed flaw {scenario}: {s:?}"),
        Err(v) => v,
    }
}

/// One run of the correct toy.
fn one_run(
    seed: u64,
    mix: FaultMix,
    adjust: impl FnOnce(&mut SimConfig),
) -> (SimConfig, SimReport) {
    let mut cfg = base(3, "ok").with_run(seed, mix);
    adjust(&mut cfg);
    let factory = setup(&mut cfg);
    let r = run(&cfg, &factory).unwrap_or_else(|v| panic!("{v}"));
    (cfg, r)
}

/// With `ABCAST_SIM_SEED` set, replays that run; otherwise seed 200 (past the sweeps) of
/// each mix with faults, which the correct toy must pass.
#[test]
fn replay() {
    if std::env::var_os("ABCAST_SIM_SEED").is_none() {
        for mix in [
            FaultMix::Loss,
            FaultMix::Partition,
            FaultMix::LateJoin,
            FaultMix::Crash,
        ] {
            sweep_ok(3, mix, 200..201);
        }
        return;
    }
    if let Some(Err(v)) = replay_from_env(&base(3, "ok"), setup) {
        panic!("replayed violation {:?} (report above)", v.kind);
    }
}

#[test]
fn toy_agrees_and_converges_without_faults() {
    sweep_ok(3, FaultMix::None, 0..20);
}

#[test]
fn toy_survives_loss_duplication_and_reordering() {
    sweep_ok(3, FaultMix::Loss, 0..200);
}

#[test]
fn toy_survives_partitions_including_one_way() {
    sweep_ok(3, FaultMix::Partition, 0..200);
}

#[test]
fn toy_late_joiner_delivers_the_whole_sequence() {
    sweep_ok(3, FaultMix::LateJoin, 0..200);
}

#[test]
fn late_join_starts_the_lowest_id_after_values_were_decided() {
    let (cfg, r) = one_run(11, FaultMix::LateJoin, |_| {});
    let (late, at_plan) = r.plan.late_join.expect("late_join plans a late node");
    assert_eq!(late, NodeId(0));
    let at = r.late_join_at_us.expect("it started");
    assert!(at >= at_plan && at < cfg.fault_phase_us, "{r:?}");
    assert_eq!(
        r.delivered_values_by_node.get(&late),
        Some(&r.proposed_values),
        "{r:?}"
    );
}

#[test]
fn toy_survives_crashes_of_learners_with_amnesic_restart() {
    sweep_ok(3, FaultMix::Crash, 0..200);
}

#[test]
fn five_node_toy_survives_the_mixed_preset_with_the_sequencer_spared() {
    sweep_ok(5, FaultMix::Mixed, 0..100);
}

#[test]
fn learner_that_skips_a_gap_is_caught_as_skipped_instance() {
    let v = first_violation("skip_gaps", FaultMix::None, 0..20);
    assert_eq!(v.kind, ViolationKind::SkippedInstance, "{v}");
    assert!(v.node.is_some() && v.instance.is_some(), "{v}");
}

#[test]
fn sequencer_that_orders_a_batch_twice_is_caught_as_duplicate_delivery() {
    let v = first_violation("order_twice", FaultMix::None, 0..20);
    assert_eq!(v.kind, ViolationKind::DuplicateDelivery, "{v}");
    assert!(v.value.is_some(), "{v}");
}

#[test]
fn sequencer_that_reuses_an_instance_is_caught_as_conflicting_decision() {
    let v = first_violation("reuse_instance", FaultMix::Loss, 0..50);
    assert_eq!(v.kind, ViolationKind::ConflictingDecision, "{v}");
}

#[test]
fn a_violation_names_its_seed_and_prints_a_replay_line() {
    let v = first_violation("order_twice", FaultMix::Loss, 5..20);
    let text = v.to_string();
    assert_eq!(v.mix, FaultMix::Loss);
    assert!(v.seed >= 5, "{text}");
    let replay = format!(
        "ABCAST_SIM_SEED={} ABCAST_SIM_MIX=loss ABCAST_SIM_NODES=3 ABCAST_SIM_FAULT_US=2000000 \
         ABCAST_SIM_RATE=1000 ABCAST_SIM_SCENARIO=order_twice cargo test -p abcast-sim --test toy replay -- \
         --exact --nocapture",
        v.seed
    );
    assert_eq!(v.replay, replay);
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l == format!("replay: {replay}")),
        "{text}"
    );
    assert!(
        !v.trace_tail.is_empty() && text.contains("deliver"),
        "{text}"
    );
}

#[test]
fn runs_are_deterministic() {
    // Not the power loss: the toy keeps its order in memory only.
    for mix in FaultMix::ALL
        .into_iter()
        .filter(|&m| m != FaultMix::PowerLoss)
    {
        let (_, a) = one_run(42, mix, |_| {});
        let (_, b) = one_run(42, mix, |_| {});
        assert_eq!(a, b, "{mix}");
        let (_, c) = one_run(43, mix, |_| {});
        assert_ne!(
            a.fingerprint, c.fingerprint,
            "{mix}: seeds 42 and 43 ran identically"
        );
    }
}

#[test]
fn the_codec_is_exercised_by_every_message_and_large_values_travel() {
    let (cfg, r) = one_run(3, FaultMix::Loss, |c| c.large_value_ppm = 100_000);
    assert!(r.messages_delivered > 1000, "{r:?}");
    assert!(r.messages_dropped > 0 || r.plan.loss_ppm == 0, "{r:?}");
    assert!(r.bytes_sent > 3000 * 10, "{r:?}");
    assert!(r.time_to_converge_us < cfg.converge_bound_us, "{r:?}");
    let d: Vec<u64> = r.delivered_values_by_node.values().copied().collect();
    assert!(
        d.len() == 3 && d.iter().all(|&x| x == d[0] && x == r.proposed_values),
        "{r:?}"
    );
}

/// Counts, per node, how often the factory built it, and the most nodes down at once seen
/// by a tick (the toy is never amnesic, so down is what counts against f).
#[derive(Default)]
struct Census {
    live: Vec<bool>,
    builds: Vec<u32>,
    worst_down: usize,
}

struct Probe {
    inner: Toy,
    id: usize,
    census: Arc<Mutex<Census>>,
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Ok(mut c) = self.census.lock() {
            c.live[self.id] = false;
        }
    }
}

impl abcast_core::Protocol for Probe {
    type Message = <Toy as abcast_core::Protocol>::Message;
    fn node(&self) -> NodeId {
        self.inner.node()
    }
    fn propose(
        &mut self,
        now: abcast_core::Micros,
        payload: bytes::Bytes,
        out: &mut abcast_core::Outbox<Self::Message>,
    ) -> Result<abcast_core::ValueId, abcast_core::ProposeError> {
        self.inner.propose(now, payload, out)
    }
    fn receive(
        &mut self,
        now: abcast_core::Micros,
        from: NodeId,
        msg: Self::Message,
        out: &mut abcast_core::Outbox<Self::Message>,
    ) {
        self.inner.receive(now, from, msg, out)
    }
    fn tick(&mut self, now: abcast_core::Micros, out: &mut abcast_core::Outbox<Self::Message>) {
        // Looked at while the run goes on (the world drops every node when it ends).
        if let Ok(mut c) = self.census.lock() {
            let down = c.live.iter().filter(|l| !**l).count();
            c.worst_down = c.worst_down.max(down);
        }
        self.inner.tick(now, out)
    }
    fn tick_interval_us(&self) -> abcast_core::Micros {
        self.inner.tick_interval_us()
    }
    fn can_propose(&self) -> bool {
        self.inner.can_propose()
    }
    fn status(&self) -> abcast_core::Status {
        self.inner.status()
    }
}

#[test]
fn crash_mix_targets_the_coordinator_and_keeps_at_most_f_down() {
    // Not through `setup`: here the sequencer is not spared.
    let cfg = base(3, "ok");
    let toy = ToyConfig::new(&cfg.nodes);
    let census = Arc::new(Mutex::new(Census {
        live: vec![false; 3],
        builds: vec![0; 3],
        ..Census::default()
    }));
    let factory = |id: NodeId, start: StartInfo| {
        let i = id.0 as usize;
        if let Ok(mut c) = census.lock() {
            c.live[i] = true;
            c.builds[i] += 1;
        }
        Probe {
            inner: Toy::new(toy.clone(), id, start),
            id: i,
            census: census.clone(),
        }
    };
    for seed in 0..30 {
        if let Ok(mut c) = census.lock() {
            // Up until dropped: the world starts the nodes one after the other.
            c.live = vec![true; 3];
        }
        // The toy dies with its sequencer; the result does not matter here, the schedule does.
        let _ = run(&cfg.with_run(seed, FaultMix::Crash), &factory);
    }
    let c = census.lock().expect("census");
    let restarts: Vec<u32> = c.builds.iter().map(|b| b - 30).collect();
    assert!(
        c.worst_down <= cfg.max_faulty_acceptors(),
        "{} nodes down at once",
        c.worst_down
    );
    assert!(
        restarts[2] >= 10,
        "the coordinator n2 was restarted only {} times: {restarts:?}",
        restarts[2]
    );
}
