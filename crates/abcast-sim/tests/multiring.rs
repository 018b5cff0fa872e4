//! Multi-Ring Paxos in the simulator: two rings over three acceptors, two learner-only
//! nodes, learners that follow different sets of rings and change them while faults
//! happen. The checkers verify per-ring agreement, integrity, the pairwise merge order of
//! every two learners, and convergence after the heal.
//!
//! Replay a failing seed with the line it prints (`... cargo test -p abcast-sim --test
//! multiring replay -- --exact --nocapture`).

use abcast_core::multiring::{MultiRing, MultiRingConfig, ProposeTo, RingSpec};
use abcast_core::storage::MemoryStore;
use abcast_core::uring::{Member, RingConfig, Roles, StartInfo};
use abcast_core::{GroupId, Micros, NodeId, Outbox, ProposeError, Protocol, Status, ValueId};
use abcast_sim::{FaultMix, SimConfig, replay_from_env, run, run_seeds};
use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const R1: GroupId = GroupId(1);
const R2: GroupId = GroupId(2);

fn ring(order: &[u32]) -> RingConfig {
    let members = order
        .iter()
        .map(|&i| Member {
            id: NodeId(i),
            roles: if i <= 2 {
                Roles::PAL
            } else {
                Roles {
                    proposer: false,
                    acceptor: false,
                    learner: true,
                }
            },
        })
        .collect();
    RingConfig {
        members,
        ..RingConfig::default()
    }
}

/// Ring 1: 0, 1, 2 PAL (coordinator 0); ring 2: 1, 2, 0 PAL (coordinator 1); nodes 3 and 4
/// learners of both. Node 3 follows both rings, node 4 ring 2 only, 0..2 both.
fn config(propose_to: ProposeTo) -> MultiRingConfig {
    MultiRingConfig {
        rings: vec![
            RingSpec {
                group: R1,
                ring: ring(&[0, 1, 2, 3, 4]),
            },
            RingSpec {
                group: R2,
                ring: ring(&[1, 2, 0, 3, 4]),
            },
        ],
        subscriptions: vec![(NodeId(4), vec![R2])],
        propose_to,
        ..MultiRingConfig::default()
    }
}

fn base() -> SimConfig {
    let mut c = SimConfig::new(5, 0, FaultMix::None).replay_target("abcast-sim", "multiring", "");
    c.acceptors = vec![NodeId(0), NodeId(1), NodeId(2)];
    c
}

/// A Multi-Ring node whose application changes its subscriptions on a schedule during the
/// fault phase: node 4 toggles ring 1, node 3 ring 2, node 0 ring 1, each with its own
/// period. It also records the largest merge buffer it saw.
struct Churn {
    inner: MultiRing,
    toggle: Option<(GroupId, Micros)>,
    next_us: Micros,
    until_us: Micros,
    max_buffered: Arc<AtomicUsize>,
}

impl Protocol for Churn {
    type Message = abcast_core::multiring::Message;
    fn node(&self) -> NodeId {
        self.inner.node()
    }
    fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        out: &mut Outbox<Self::Message>,
    ) -> Result<ValueId, ProposeError> {
        self.inner.propose(now, payload, out)
    }
    fn receive(
        &mut self,
        now: Micros,
        from: NodeId,
        msg: Self::Message,
        out: &mut Outbox<Self::Message>,
    ) {
        self.inner.receive(now, from, msg, out);
    }
    fn tick(&mut self, now: Micros, out: &mut Outbox<Self::Message>) {
        self.inner.tick(now, out);
        let b = self.inner.buffered(R1).max(self.inner.buffered(R2));
        self.max_buffered.fetch_max(b, Ordering::Relaxed);
        if let Some((g, period)) = self.toggle
            && now >= self.next_us
            && now < self.until_us
        {
            let r = if self.inner.follows(g) {
                self.inner.unsubscribe(now, g, out)
            } else {
                self.inner.subscribe(now, g, out)
            };
            // A change still pending is retried at the next tick.
            if r.is_ok() {
                self.next_us = now + period;
            }
        }
    }
    fn tick_interval_us(&self) -> Micros {
        self.inner.tick_interval_us()
    }
    fn can_propose(&self) -> bool {
        self.inner.can_propose()
    }
    fn status(&self) -> Status {
        self.inner.status()
    }
}

fn factory(
    sim: &SimConfig,
    propose_to: ProposeTo,
    churn: bool,
    max_buffered: Arc<AtomicUsize>,
) -> impl Fn(NodeId, StartInfo) -> Churn + use<> {
    let cfg = config(propose_to);
    let until_us = sim.fault_phase_us;
    move |id, start| {
        let store = |_g: GroupId| -> Box<dyn abcast_core::storage::AcceptorStore + Send> {
            let r = RingConfig::default();
            Box::new(MemoryStore::new(
                r.store_capacity_instances,
                r.store_capacity_bytes,
            ))
        };
        let inner = MultiRing::new(cfg.clone(), id, start, store).expect("valid config");
        let toggle = match (churn, id.0) {
            (true, 4) => Some((R1, 310_000)),
            (true, 3) => Some((R2, 470_000)),
            (true, 0) => Some((R1, 690_000)),
            _ => None,
        };
        Churn {
            inner,
            toggle,
            next_us: 150_000 + u64::from(id.0) * 40_000,
            until_us,
            max_buffered: max_buffered.clone(),
        }
    }
}

fn sweep(mix: FaultMix, seeds: std::ops::Range<u64>) {
    let cfg = base();
    let f = factory(&cfg, ProposeTo::RoundRobin, true, Arc::default());
    match run_seeds(&cfg, mix, seeds, &f) {
        Ok(s) => eprintln!("{mix}: {s:?}"),
        Err(v) => panic!("{}", v.headline()),
    }
}

#[test]
fn replay() {
    let run = replay_from_env(&base(), |cfg| {
        factory(cfg, ProposeTo::RoundRobin, true, Arc::default())
    });
    if let Some(Err(v)) = run {
        panic!("replayed violation {:?} (report above)", v.kind);
    }
}

#[test]
fn multiring_runs_are_deterministic() {
    let cfg = base().with_run(3, FaultMix::Loss);
    let f = factory(&cfg, ProposeTo::RoundRobin, true, Arc::default());
    let a = run(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    let b = run(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(a, b);
}

#[test]
fn multiring_merges_in_one_order_without_faults() {
    sweep(FaultMix::None, 0..20);
}

#[test]
fn multiring_survives_loss_duplication_and_reordering_with_subscription_churn() {
    sweep(FaultMix::Loss, 0..200);
}

/// The pairwise merge-order checker found, in seed 43 of this mix, an acceptor that took a
/// decided skip for the no-op it had voted (both have no batch key) and served the no-op to
/// learners, whose slot counts then differed. `Decree::same_as` fixed it.
#[test]
fn multiring_survives_partitions_with_subscription_churn() {
    sweep(FaultMix::Partition, 0..200);
}

#[test]
fn multiring_survives_crashes_with_subscription_churn() {
    sweep(FaultMix::Crash, 0..200);
}

#[test]
fn multiring_survives_the_mixed_preset() {
    sweep(FaultMix::Mixed, 0..200);
}

/// Seed 000 figure 4.6 in the simulator: ring 1 saturated, ring 2 silent. Without skips the
/// learner of both would buffer all of ring 1; with them it should hold a few instances.
/// Open: the learner buffers up to ~800 instances during the first 0.5 s (the busy ring's
/// slot frontier and the λ reports start late), so the bound is not met yet.
#[test]
#[ignore = "open: buffer bound not met during start-up, issue 3 note"]
fn a_silent_ring_does_not_make_the_learner_buffer_the_busy_one() {
    let mut cfg = base().with_run(7, FaultMix::None);
    cfg.rate_per_s = 20_000;
    let seen = Arc::new(AtomicUsize::new(0));
    let f = factory(&cfg, ProposeTo::Group(R1), false, seen.clone());
    let report = run(&cfg, &f).unwrap_or_else(|v| panic!("{v}"));
    let delivered_at_3 = report.delivered_values_by_node[&NodeId(3)];
    assert!(
        delivered_at_3 > 20_000,
        "the learner of both rings delivered only {delivered_at_3} values"
    );
    let max = seen.load(Ordering::Relaxed);
    assert!(
        max <= 256,
        "a learner buffered {max} instances of the busy ring while waiting for the silent one"
    );
}
