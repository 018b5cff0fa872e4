//! The protocols' simulation suites: for each protocol and fault mix, the cluster, the
//! stores and the bounds its sweeps run with. The tests (`tests/uring.rs`,
//! `tests/ringpaxos.rs`, `tests/multiring.rs`, `tests/mutations.rs`) and the `sweep` binary
//! both run them through here, so a seed that fails in one replays in the other.
//!
//! What a mix runs on, per protocol:
//!
//! | mix | store | cluster |
//! | --- | --- | --- |
//! | none, loss, partition, crash, late_join, pause | in memory (a restart is amnesic); in crash (and reconfig) Sequence Paxos and Raft nodes snapshot and compact every 100 ms ([`Proto::snapshots_in`]) | U-Ring 3 nodes; Ring Paxos 3 acceptors + 3 learners; Multi-Ring 2 rings over 3 acceptors + 2 learners |
//! | mixed | in memory | U-Ring 5 nodes (so a crash can strike while another acceptor is amnesic); the others as above |
//! | power_loss | durable log with fdatasync on the simulator's disks, machine crashes, the disk faults of issue 33 (`SimConfig::disk_faults`: disk errors, never-synced files kept torn, wiped directories), the pipelined group commit; U-Ring and Ring Paxos learners snapshot every 100 ms (so acceptors trim), Multi-Ring learners too (one snapshot of the merge; each ring trims at its own point, and a learner behind one installs a peer's), Sequence Paxos and Raft nodes too (each compacts its own log) | as above |
//! | learner_skip | in memory, windows of 128 instances, no snapshots | as above |
//! | partial | in memory | Sequence Paxos and Raft 5 nodes (the partial-connectivity shapes need five); the others as above; a 2.5 s fault phase |
//! | reconfig (Sequence Paxos, Raft) | per seed ([`ReconfigSwitches`]): in memory (a restart is amnesic; Sequence Paxos only), durable with process crashes, or durable with machine crashes and a power loss after a change; eager transfer in half the Sequence Paxos runs; nodes snapshot and compact | 3 voters and 2 spares |
//!
//! The bounds every run is held to (a run that breaks one fails): a value acknowledged
//! (`require_acks`); the connected learners converged within `FAULTS_REMAIN_BOUND_US` (five
//! failure timeouts) while up to f acceptors stay faulty; everything converged within
//! `CONVERGE_BOUND_US` of the full heal; at most `BUSY_REJECTIONS_MAX` `Busy` answers; in
//! the partial mix, for Sequence Paxos, a leader a majority reaches and a new value decided
//! at a majority within [`partial_bound_us`] of each episode and of each window after.
//!
//! A variant ([`Variant`]) is the protocol as it is, or one of the deliberately broken ones
//! of `abcast_core::mutation` (with the `mutations` feature): the replay line names it as
//! the scenario.

use crate::config::{CrashModel, FaultMix, SimConfig};
use crate::faults::FaultKind;
use crate::sim::{SimReport, Violation, run_with_disk};
use crate::sweep::{SweepReport, for_seeds};
use abcast_core::config::{Member, Roles, StartInfo};
use abcast_core::multiring::{
    MultiRingConfig, MultiRingConfigOf, MultiRingOf, ProposeTo, RingSpec, RingSpecOf,
};
use abcast_core::mutation::Mutation;
use abcast_core::raft::{Raft, RaftConfig};
use abcast_core::ring::ComposableRing;
use abcast_core::ringpaxos::{RingPaxos, RingPaxosConfig};
use abcast_core::seqpaxos::{SeqPaxos, SeqPaxosConfig};
use abcast_core::storage::{
    AcceptorStore, DurableLogStore, DurableOptions, DurableStore, LogStore, MemDir, MemoryLogStore,
    MemoryStore, StorageError,
};
use abcast_core::uring::{RingConfig, URing};
use abcast_core::{GroupId, Micros, NodeId, Outbox, ProposeError, Protocol, Status, ValueId};
use bytes::Bytes;
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

/// The liveness bound while up to f acceptors stay faulty: five failure timeouts of the
/// protocols' default configuration (300 ms), after the last proposal.
pub const FAULTS_REMAIN_BOUND_US: Micros = 1_500_000;
/// The bound on convergence after the full heal (the simulator's default is 20 s).
pub const CONVERGE_BOUND_US: Micros = 10_000_000;
/// `Busy` answers per run, at most (each is retried 5 ms later by the simulated client).
pub const BUSY_REJECTIONS_MAX: u64 = 100;
/// The acceptors' in-memory window in the `learner_skip` mix (instances); Multi-Ring's
/// rings, which share the load, get four times as many.
pub const SKIP_WINDOW_INSTANCES: usize = 128;

/// A protocol with a suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proto {
    URing,
    RingPaxos,
    MultiRing,
    /// Multi-Ring Paxos over Ring Paxos rings (each ring's phase 2 and decisions by
    /// multicast), with Multi-Ring's cluster, subscriptions and churn.
    MultiRingPaxos,
    /// Sequence Paxos with Ballot Leader Election (seed 001), on a log store: in memory (a
    /// restart is amnesic and repaired), or durable in the `power_loss` mix.
    SeqPaxos,
    /// Raft with joint consensus (seed 001 §2.5), on the same log stores as Sequence Paxos.
    Raft,
}

impl Proto {
    pub const ALL: [Proto; 6] = [
        Proto::URing,
        Proto::RingPaxos,
        Proto::MultiRing,
        Proto::MultiRingPaxos,
        Proto::SeqPaxos,
        Proto::Raft,
    ];

    /// The name the sweep binary takes (`--protocol`).
    pub fn name(self) -> &'static str {
        match self {
            Proto::URing => "uring",
            Proto::RingPaxos => "ringpaxos",
            Proto::MultiRing => "multiring",
            Proto::MultiRingPaxos => "multiring-ringpaxos",
            Proto::SeqPaxos => "seqpaxos",
            Proto::Raft => "raft",
        }
    }

    /// The integration test file whose `replay` test replays this protocol's runs.
    pub fn test_file(self) -> &'static str {
        match self {
            Proto::MultiRingPaxos => "multiring_ringpaxos",
            p => p.name(),
        }
    }

    /// Whether the protocol's nodes take snapshots and compact their logs in `mix`
    /// (every 100 ms): the ring protocols in `power_loss` (their acceptors trim below a
    /// quorum of learners' snapshots); Raft in `power_loss`, `crash` and `reconfig` (each
    /// node compacts on its own, Raft §7: restarts start from their snapshots, and a node
    /// down long enough, or a new member, installs the leader's, `raft/snapshot.rs`);
    /// Sequence Paxos in the same three (each node compacts its decided prefix; a
    /// follower, a leader catching up or a new member fetching the final sequence gets a
    /// snapshot where the entries it needs were compacted, `seqpaxos/snapshot.rs`).
    pub fn snapshots_in(self, mix: FaultMix) -> bool {
        match self {
            // The merge snapshots every ring at once, and each ring trims below a quorum of
            // its learners' (`multiring/snapshot.rs`).
            Proto::MultiRing | Proto::MultiRingPaxos => mix == FaultMix::PowerLoss,
            Proto::URing | Proto::RingPaxos => mix == FaultMix::PowerLoss,
            Proto::Raft => matches!(
                mix,
                FaultMix::PowerLoss | FaultMix::Crash | FaultMix::Reconfig
            ),
            Proto::SeqPaxos => matches!(
                mix,
                FaultMix::PowerLoss | FaultMix::Crash | FaultMix::Reconfig
            ),
        }
    }

    /// Whether this is a leader-based log of seed 001 (Sequence Paxos, Raft).
    pub fn is_leader_based(self) -> bool {
        matches!(self, Proto::SeqPaxos | Proto::Raft)
    }

    /// Whether the protocol reconfigures (`Protocol::reconfigure`), so that its suite runs
    /// the `reconfig` mix. Sequence Paxos joins once its stop-sign reconfiguration lands:
    /// switch [`SEQPAXOS_RECONFIGURES`] on.
    pub fn supports_reconfig(self) -> bool {
        match self {
            Proto::Raft => true,
            Proto::SeqPaxos => SEQPAXOS_RECONFIGURES,
            _ => false,
        }
    }

    /// Whether the `reconfig` mix runs this protocol on memory stores in some seeds
    /// ([`ReconfigSwitches::amnesic`]): both protocols that reconfigure. Raft joined once a
    /// voter that is not in its latest, uncommitted configuration campaigns again (thesis
    /// §4.2.2; `raft/election.rs`, `can_campaign`): before, its reconfig seed 186 on memory
    /// stores stalled for good. The leader appended `C_new` (removing a voter) and
    /// restarted amnesic before committing it; the removed voter, the only one whose log
    /// held `C_new`, never campaigned and refused the others' votes (their logs were
    /// behind), and the joint configuration's old majority (3 of 4) could not be had
    /// without it or the amnesic node.
    pub fn reconfigures_amnesic(self) -> bool {
        matches!(self, Proto::SeqPaxos | Proto::Raft)
    }

    /// The mixes `--mix all` runs for this protocol: every mix of [`FaultMix::ALL`], and
    /// `reconfig` where the protocol reconfigures.
    pub fn mixes(self) -> Vec<FaultMix> {
        let mut v = FaultMix::ALL.to_vec();
        if self.supports_reconfig() {
            v.push(FaultMix::Reconfig);
        }
        v
    }

    /// Whether the protocol claims to elect a leader that a majority reaches, and to decide
    /// again, within [`partial_bound_us`] of any shape of the partial-connectivity mix
    /// (OmniPaxos' claim for Ballot Leader Election with its quorum-connectivity rule): the
    /// mix then holds it to that bound. Raft (pre-vote, check-quorum) does not survive the
    /// constrained election (`testdata/scenarios/raft/constrained_election.txt`); the ring
    /// protocols make no such claim.
    pub fn claims_partial_connectivity(self) -> bool {
        self == Proto::SeqPaxos
    }

    /// Whether this is Multi-Ring Paxos, over either ring protocol.
    pub fn is_multiring(self) -> bool {
        matches!(self, Proto::MultiRing | Proto::MultiRingPaxos)
    }

    /// The fault kinds each mix of this protocol's suite must produce over 200 seeds (the
    /// tests assert them, so that a sweep that passed is known to have met its faults).
    /// Over all mixes, every [`FaultKind`].
    pub fn expected_faults(self, mix: FaultMix) -> &'static [FaultKind] {
        use FaultKind::*;
        if self.is_leader_based() && mix == FaultMix::LearnerSkip {
            // A leader-based log keeps every undecided entry and has no window to slide
            // past a learner: nothing is ever skipped (the mix still runs its crashes).
            return &[];
        }
        match (self, mix) {
            // Amnesic restarts one after another, each repaired before the next (issue 33),
            // and Raft's optional rules switched per seed (`RaftSwitches`).
            (Proto::Raft, FaultMix::Crash) => {
                return &[
                    CrossIncarnation,
                    OutlivesTakeover,
                    FaultsRemain,
                    PartialFanout,
                    AmnesicBeyondF,
                    LeaseReads,
                    NoPreVote,
                    NoCheckQuorum,
                ];
            }
            (Proto::Raft, FaultMix::Mixed) => {
                return &[
                    CrossIncarnation,
                    OutlivesTakeover,
                    FaultsRemain,
                    PartialFanout,
                    Pause,
                    Ghost,
                    LeaseReads,
                    NoPreVote,
                    NoCheckQuorum,
                ];
            }
            // Per-seed switches of the reconfig mix (`ReconfigSwitches`, issue 33 suspect 6):
            // memory stores with amnesic restarts, power loss on durable stores, and for
            // Sequence Paxos eager transfer of the final sequence.
            (Proto::SeqPaxos, FaultMix::Reconfig) => {
                return &[
                    CrossIncarnation,
                    OutlivesTakeover,
                    EagerTransfer,
                    ReconfigAmnesic,
                    ReconfigPowerLoss,
                ];
            }
            // Raft has no eager transfer (a new voter catches up as a learner first).
            (Proto::Raft, FaultMix::Reconfig) => {
                return &[
                    CrossIncarnation,
                    OutlivesTakeover,
                    ReconfigAmnesic,
                    ReconfigPowerLoss,
                ];
            }
            (Proto::SeqPaxos, FaultMix::Crash) => {
                return &[
                    CrossIncarnation,
                    OutlivesTakeover,
                    FaultsRemain,
                    PartialFanout,
                    AmnesicBeyondF,
                ];
            }
            // Multi-Ring over Ring Paxos splits a run's few hundred values over its rings,
            // so no ring's log outgrows its first segment (64 KiB) and no file is created
            // while a machine crash waits for one: `torn_unsynced` never happened in 150
            // seeds. Multi-Ring over U-Ring and the single rings make it.
            (Proto::MultiRingPaxos, FaultMix::PowerLoss) => {
                return &[PowerLoss, CrossIncarnation, DiskError, WipedDir];
            }
            _ => {}
        }
        match mix {
            FaultMix::None | FaultMix::Loss => &[],
            FaultMix::Partition => &[FaultsRemain],
            // Ring acceptors on memory storage restart amnesic too, one after another.
            FaultMix::Crash => &[
                CrossIncarnation,
                OutlivesTakeover,
                FaultsRemain,
                PartialFanout,
                AmnesicBeyondF,
            ],
            FaultMix::LateJoin => &[PartialFanout],
            FaultMix::Mixed => &[
                CrossIncarnation,
                OutlivesTakeover,
                FaultsRemain,
                PartialFanout,
                Pause,
                Ghost,
            ],
            FaultMix::Pause => &[Pause, FaultsRemain, Ghost],
            FaultMix::PowerLoss => &[
                PowerLoss,
                CrossIncarnation,
                DiskError,
                TornUnsynced,
                WipedDir,
            ],
            FaultMix::LearnerSkip => &[LearnerSkip],
            FaultMix::Reconfig => &[CrossIncarnation, OutlivesTakeover],
            FaultMix::PartialConnectivity => &[PartialConnectivity],
        }
    }
}

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Proto {
    type Err = String;
    fn from_str(s: &str) -> Result<Proto, String> {
        Proto::ALL
            .into_iter()
            .find(|p| p.name() == s.trim())
            .ok_or_else(|| {
                format!(
                    "unknown protocol {s:?}; expected one of uring, ringpaxos, multiring, \
                     multiring-ringpaxos, seqpaxos, raft"
                )
            })
    }
}

/// The protocol as it is, or one of its deliberately broken variants.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Variant {
    pub mutation: Option<Mutation>,
}

impl Variant {
    pub const CORRECT: Variant = Variant { mutation: None };

    pub fn broken(m: Mutation) -> Variant {
        Variant { mutation: Some(m) }
    }

    /// The replay line's scenario: the mutation's name, or empty.
    pub fn scenario(self) -> String {
        self.mutation
            .map(|m| m.name().to_string())
            .unwrap_or_default()
    }

    /// The variant a replay line's scenario names.
    pub fn from_scenario(s: &str) -> Result<Variant, String> {
        if s.is_empty() || s == "ok" {
            return Ok(Variant::CORRECT);
        }
        Ok(Variant::broken(s.parse()?))
    }

    /// Whether this build can run the variant (a broken one needs the `mutations` feature).
    pub fn available(self) -> Result<(), String> {
        match self.mutation {
            Some(m) if !abcast_core::mutation::AVAILABLE => Err(format!(
                "the mutation {m} exists only in a build with the `mutations` feature \
                 (cargo ... -p abcast-sim --features mutations)"
            )),
            _ => Ok(()),
        }
    }
}

fn set_mutation(ring: &mut RingConfig, v: Variant) {
    ring.set_mutation(v.mutation)
        .unwrap_or_else(|e| panic!("{e}"));
}

fn set_rp_mutation(rp: &mut RingPaxosConfig, v: Variant) {
    rp.set_mutation(v.mutation)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Sequence Paxos' entry in the `reconfig` mix (see [`Proto::supports_reconfig`]): on since
/// its stop-sign reconfiguration landed (`seqpaxos/reconfig.rs`).
pub const SEQPAXOS_RECONFIGURES: bool = true;

/// Voters of the first configuration in the `reconfig` mix; the other nodes of its cluster
/// are spares.
pub const RECONFIG_VOTERS: u32 = 3;
/// Spares in the `reconfig` mix.
pub const RECONFIG_SPARES: u32 = 2;
/// The fault phase of the `reconfig` mix.
pub const RECONFIG_FAULT_PHASE_US: Micros = 3_000_000;

/// The fault phase of the `partial` mix: a warm-up and up to three episodes of at least
/// `plan::PARTIAL_HOLD_MIN_US` each.
pub const PARTIAL_FAULT_PHASE_US: Micros = 2_500_000;

/// Sequence Paxos' election timeout: one Ballot Leader Election round Δ
/// (`SeqPaxosConfig::heartbeat_interval_us`, 50 ms; the suite keeps the default). A leader
/// not heard in a round is replaced (appendix A line 16).
pub const SEQPAXOS_ELECTION_TIMEOUT_US: Micros = 50_000;

/// What the `partial` mix's bound allows beyond four election timeouts: up to half a round
/// by which a reply's quorum-connected flag may lag the cut (`seqpaxos/ble.rs`), the
/// messages of a prepare, a sync and a decide (up to 3.1 ms a hop here), and the 1 ms
/// ticks. 50 ms, one Δ. Measured over 1,000 seeds: the slowest recovery is 222 ms (4.4 Δ).
pub const PARTIAL_SLACK_US: Micros = 50_000;

/// The `partial` mix's liveness bound for a protocol that claims it
/// ([`Proto::claims_partial_connectivity`]): four election timeouts (OmniPaxos EuroSys'23:
/// "guaranteed recovery in at most four election timeouts") plus [`PARTIAL_SLACK_US`].
pub fn partial_bound_us() -> Micros {
    4 * SEQPAXOS_ELECTION_TIMEOUT_US + PARTIAL_SLACK_US
}

/// Linearizable reads per second of every suite's load (answered by the protocols with a
/// read-index barrier, refused as `Unsupported` by the others).
pub const READS_PER_S: u32 = 50;

/// The nodes of `proto`'s cluster under `mix`.
fn node_count(proto: Proto, mix: FaultMix) -> u32 {
    match (proto, mix) {
        (_, FaultMix::Reconfig) => RECONFIG_VOTERS + RECONFIG_SPARES,
        (Proto::URing | Proto::SeqPaxos | Proto::Raft, FaultMix::Mixed) => 5,
        // The quorum-loss, constrained-election and openraft 2080 shapes need five.
        (Proto::SeqPaxos | Proto::Raft, FaultMix::PartialConnectivity) => 5,
        (Proto::URing | Proto::SeqPaxos | Proto::Raft, _) => 3,
        (Proto::RingPaxos, _) => 6,
        (Proto::MultiRing | Proto::MultiRingPaxos, _) => 5,
    }
}

/// The acceptors of the Ring Paxos and Multi-Ring clusters (the others are learners only).
const ACCEPTORS: [u32; 3] = [0, 1, 2];

/// The base configuration of `proto` under `mix` (seed 0): cluster, crash model, snapshots,
/// the pipelined commit where stores are durable, the bounds, and the replay target.
pub fn config(proto: Proto, mix: FaultMix, variant: Variant) -> SimConfig {
    let mut cfg = SimConfig::new(node_count(proto, mix), 0, mix).replay_target(
        "abcast-sim",
        proto.test_file(),
        &variant.scenario(),
    );
    adjust(proto, &mut cfg);
    if mix == FaultMix::Reconfig {
        // 3 s instead of 2: room for several changes per run, each waiting for the one
        // before (a few heartbeats each, longer behind crashes and partitions). A replay
        // line carries the fault phase, so it is set here and not in `adjust`.
        cfg.fault_phase_us = RECONFIG_FAULT_PHASE_US;
    }
    if mix == FaultMix::PartialConnectivity {
        cfg.fault_phase_us = PARTIAL_FAULT_PHASE_US;
    }
    cfg
}

/// What [`config`] sets beyond the node count, for a configuration whose mix or node
/// count a replay line may have changed.
fn adjust(proto: Proto, cfg: &mut SimConfig) {
    if !(proto == Proto::URing || proto.is_leader_based()) {
        cfg.acceptors = cfg
            .nodes
            .iter()
            .copied()
            .filter(|n| ACCEPTORS.contains(&n.0))
            .collect();
    }
    if proto.is_multiring() && cfg.mix == FaultMix::LearnerSkip {
        // A Multi-Ring learner that skips a ring stops following it (it no longer knows the
        // ring's slots, `multiring/mod.rs`); node 3, a learner of both rings, is spared the
        // crashes so that every ring keeps a learner that delivers everything.
        cfg.crash_exempt = vec![NodeId(3)];
    }
    if cfg.mix == FaultMix::Reconfig {
        // The first configuration is the lowest ids; the others are spares, built by the
        // same factory and waiting until a configuration names them.
        let members: Vec<NodeId> = cfg
            .nodes
            .iter()
            .copied()
            .filter(|n| n.0 < RECONFIG_VOTERS)
            .collect();
        cfg.initial_members = Some(members);
    }
    if cfg.mix == FaultMix::PartialConnectivity && proto.claims_partial_connectivity() {
        cfg.partial_bound_us = Some(partial_bound_us());
    }
    cfg.reads_per_s = READS_PER_S;
    cfg.require_acks = true;
    cfg.converge_bound_us = CONVERGE_BOUND_US;
    cfg.faults_remain_bound_us = FAULTS_REMAIN_BOUND_US;
    cfg.busy_rejections_max = Some(BUSY_REJECTIONS_MAX);
    if cfg.mix == FaultMix::PowerLoss {
        cfg.crash_model = CrashModel::Machine;
        // The stores are durable on the simulator's disks: the disks fail writes and
        // syncs, machine crashes keep files never synced, restarts find wiped directories
        // (issue 33).
        cfg.disk_faults = true;
        // The runtime's pipelined group commit: fdatasync on the sync thread, outboxes
        // held until it completes 50 us to 2 ms later.
        cfg.sync_delay_us = Some((50, 2_000));
        // Half the load: durable runs cost more per value, the faults per run are the same.
        cfg.rate_per_s = 500;
    }
    if proto.snapshots_in(cfg.mix) {
        cfg.snapshot_interval_us = SNAPSHOT_INTERVAL_US;
    }
}

/// How often every learner snapshots in the mixes with snapshots ([`Proto::snapshots_in`]).
pub const SNAPSHOT_INTERVAL_US: Micros = 100_000;

type Store = Box<dyn AcceptorStore + Send>;

/// The acceptor store of a node under `mix` (durable stores on the node's disk `dir`).
fn store(
    mix: FaultMix,
    dir: MemDir,
    capacity_instances: usize,
    capacity_bytes: usize,
) -> Result<Store, StorageError> {
    if mix == FaultMix::PowerLoss {
        // Small segments, so logs roll (and recovery reads several) within a run; a cache
        // smaller than a run's instances, so old decided ones are read back from disk.
        let (s, _recovery) = DurableStore::open(
            dir,
            DurableOptions {
                sync: true,
                segment_bytes: 64 << 10,
                cache_instances: 512,
                cache_bytes: capacity_bytes,
            },
        )?;
        return Ok(Box::new(s));
    }
    Ok(Box::new(MemoryStore::new(
        capacity_instances,
        capacity_bytes,
    )))
}

/// A U-Ring ring config for `mix` (windows and snapshots) and `variant`; `window_scale`
/// multiplies the `learner_skip` window.
fn ring_config(
    mut ring: RingConfig,
    mix: FaultMix,
    variant: Variant,
    window_scale: usize,
) -> RingConfig {
    if mix == FaultMix::LearnerSkip {
        ring.store_capacity_instances = SKIP_WINDOW_INSTANCES * window_scale;
        ring.max_open_instances = SKIP_WINDOW_INSTANCES / 4;
    }
    ring.learner_snapshots = mix == FaultMix::PowerLoss;
    set_mutation(&mut ring, variant);
    ring
}

/// A factory on the simulator's disks.
pub type Factory<P> = Box<dyn Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError>>;

pub fn uring_factory(cfg: &SimConfig, variant: Variant) -> Factory<URing> {
    let ids: Vec<u32> = cfg.nodes.iter().map(|n| n.0).collect();
    let mix = cfg.mix;
    let ring = ring_config(RingConfig::pal(&ids), mix, variant, 1);
    Box::new(move |id, start, disk| {
        let s = store(
            mix,
            disk,
            ring.store_capacity_instances,
            ring.store_capacity_bytes,
        )?;
        Ok(URing::new(ring.clone(), id, start, s).expect("valid ring config"))
    })
}

pub fn ringpaxos_factory(cfg: &SimConfig, variant: Variant) -> Factory<RingPaxos> {
    let ids: Vec<u32> = cfg.nodes.iter().map(|n| n.0).collect();
    let pal: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|i| ACCEPTORS.contains(i))
        .collect();
    let learners: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|i| !ACCEPTORS.contains(i))
        .collect();
    let mix = cfg.mix;
    let mut rp = RingPaxosConfig::with_roles(&pal, &learners);
    // 1 ms ticks instead of 200 us: five times fewer tick events per run; the protocol's
    // rules are the same (the simulator ticks after every input anyway).
    rp.batch_linger_us = 1000;
    rp.decision_linger_us = 1000;
    if mix == FaultMix::LearnerSkip {
        rp.store_capacity_instances = SKIP_WINDOW_INSTANCES;
        rp.buffer_instances = SKIP_WINDOW_INSTANCES / 4;
    }
    rp.learner_snapshots = mix == FaultMix::PowerLoss;
    set_rp_mutation(&mut rp, variant);
    Box::new(move |id, start, disk| {
        let s = store(
            mix,
            disk,
            rp.store_capacity_instances,
            rp.store_capacity_bytes,
        )?;
        Ok(RingPaxos::new(rp.clone(), id, start, s).expect("valid ring paxos config"))
    })
}

const R1: GroupId = GroupId(1);
const R2: GroupId = GroupId(2);

/// Two rings over acceptors 0, 1, 2 (coordinators 0 and 1), nodes 3 and 4 learners of both;
/// node 4 follows ring 2 only at the start.
pub fn multiring_config(mix: FaultMix, variant: Variant) -> MultiRingConfig {
    let ring = |order: &[u32]| {
        let members = order
            .iter()
            .map(|&i| Member {
                id: NodeId(i),
                roles: if ACCEPTORS.contains(&i) {
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
        ring_config(
            RingConfig {
                members,
                ..RingConfig::default()
            },
            mix,
            variant,
            4,
        )
    };
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
        propose_to: ProposeTo::RoundRobin,
        ..MultiRingConfig::default()
    }
}

/// [`multiring_config`]'s deployment over Ring Paxos rings: the same members, orders (so the
/// same coordinators), roles and subscriptions, each ring with [`ringpaxos_factory`]'s
/// settings.
pub fn multiring_ringpaxos_config(
    mix: FaultMix,
    variant: Variant,
) -> MultiRingConfigOf<RingPaxosConfig> {
    let ring = |pal: &[u32]| {
        let mut rp = RingPaxosConfig::with_roles(pal, &[3, 4]);
        rp.batch_linger_us = 1000;
        rp.decision_linger_us = 1000;
        if mix == FaultMix::LearnerSkip {
            rp.store_capacity_instances = SKIP_WINDOW_INSTANCES * 4;
            rp.buffer_instances = SKIP_WINDOW_INSTANCES / 4;
        }
        rp.learner_snapshots = mix == FaultMix::PowerLoss;
        set_rp_mutation(&mut rp, variant);
        rp
    };
    MultiRingConfigOf {
        rings: vec![
            RingSpecOf {
                group: R1,
                ring: ring(&[0, 1, 2]),
            },
            RingSpecOf {
                group: R2,
                ring: ring(&[1, 2, 0]),
            },
        ],
        subscriptions: vec![(NodeId(4), vec![R2])],
        propose_to: ProposeTo::RoundRobin,
        ..MultiRingConfigOf::default()
    }
}

/// A Multi-Ring node whose application changes its subscriptions during the fault phase:
/// node 4 toggles ring 1, node 3 ring 2, node 0 ring 1, each with its own period. The
/// checkers then hold every learner to the merge order over changing sets of rings.
pub struct Churn<R: ComposableRing = URing> {
    pub inner: MultiRingOf<R>,
    toggle: Option<(GroupId, Micros)>,
    next_us: Micros,
    until_us: Micros,
}

impl<R: ComposableRing> Protocol for Churn<R> {
    type Message = abcast_core::multiring::Msg<R>;
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
        self.inner.receive(now, from, msg, out)
    }
    fn tick(&mut self, now: Micros, out: &mut Outbox<Self::Message>) {
        self.inner.tick(now, out);
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
    fn sync_storage(&mut self) -> Result<(), StorageError> {
        self.inner.sync_storage()
    }
    fn begin_sync_storage(
        &mut self,
    ) -> Result<Option<abcast_core::storage::SyncJob>, StorageError> {
        self.inner.begin_sync_storage()
    }
    fn end_sync_storage(&mut self, result: Result<(), StorageError>) -> Result<(), StorageError> {
        self.inner.end_sync_storage(result)
    }
    fn snapshots_supported(&self) -> bool {
        self.inner.snapshots_supported()
    }
    fn take_snapshot(&mut self, app: Bytes) -> Result<abcast_core::Snapshot, String> {
        self.inner.take_snapshot(app)
    }
    fn restore_snapshot(&mut self, snapshot: &abcast_core::Snapshot) -> Result<(), String> {
        self.inner.restore_snapshot(snapshot)
    }
    fn snapshot_groups(&self, snapshot: &abcast_core::Snapshot) -> Vec<abcast_core::GroupPosition> {
        self.inner.snapshot_groups(snapshot)
    }
}

pub fn multiring_factory(cfg: &SimConfig, variant: Variant) -> Factory<Churn> {
    let mr: MultiRingConfig = multiring_config(cfg.mix, variant);
    churn_factory(cfg, mr, |r: &RingConfig, id| {
        let pos = r.position(id)?;
        let acceptor = r.members[pos].roles.acceptor;
        Some((acceptor, r.store_capacity_instances, r.store_capacity_bytes))
    })
}

pub fn multiring_ringpaxos_factory(cfg: &SimConfig, variant: Variant) -> Factory<Churn<RingPaxos>> {
    let mr = multiring_ringpaxos_config(cfg.mix, variant);
    churn_factory(cfg, mr, |r: &RingPaxosConfig, id| {
        let pos = r.position(id)?;
        let acceptor = r.members[pos].roles.acceptor;
        Some((acceptor, r.store_capacity_instances, r.store_capacity_bytes))
    })
}

/// Of a ring's configuration, for a node: whether it is a member, and then whether an
/// acceptor, with its store's capacity in instances and bytes.
type RingStore<C> = fn(&C, NodeId) -> Option<(bool, usize, usize)>;

/// A Multi-Ring node of `mr` with churn; `ring_store` tells, for a ring's configuration and
/// a node, whether the node is a member, an acceptor, and its store's capacity.
fn churn_factory<R: ComposableRing + 'static>(
    cfg: &SimConfig,
    mr: MultiRingConfigOf<R::Config>,
    ring_store: RingStore<R::Config>,
) -> Factory<Churn<R>>
where
    R::Config: 'static,
{
    let mix = cfg.mix;
    let until_us = cfg.fault_phase_us;
    Box::new(move |id, start, disk| {
        // Open every ring's store first, so an error fails the start instead of a panic
        // inside `MultiRing::new`'s store callback; each ring's log in its own directory.
        let mut stores = std::collections::BTreeMap::new();
        for spec in &mr.rings {
            let Some((acceptor, n, b)) = ring_store(&spec.ring, id) else {
                continue;
            };
            let s: Store = if acceptor {
                store(mix, disk.subdir(&format!("ring-{}", spec.group.0)), n, b)?
            } else {
                Box::new(MemoryStore::new(n, b))
            };
            stores.insert(spec.group, s);
        }
        let inner = MultiRingOf::<R>::new(mr.clone(), id, start, |g| {
            stores
                .remove(&g)
                .expect("a store for every ring of the node")
        })
        .expect("valid multiring config");
        let toggle = match id.0 {
            4 => Some((R1, 310_000)),
            3 => Some((R2, 470_000)),
            0 => Some((R1, 690_000)),
            _ => None,
        };
        Ok(Churn {
            inner,
            toggle,
            next_us: 150_000 + u64::from(id.0) * 40_000,
            until_us,
        })
    })
}

/// Sequence Paxos over every node of `cfg`, on an in-memory log (a restart is amnesic) or,
/// in the `power_loss` mix, a durable log with fdatasync on the node's simulated disk.
pub fn seqpaxos_factory(cfg: &SimConfig, variant: Variant) -> Factory<SeqPaxos> {
    // Every node, a spare too, starts with the first configuration (the construction
    // contract of `SimConfig::initial_members`).
    let ids: Vec<u32> = cfg.initial_member_ids().iter().map(|n| n.0).collect();
    let mix = cfg.mix;
    let mut sp = SeqPaxosConfig::replicas(&ids);
    // 1 ms ticks, as Ring Paxos' suite: the simulator ticks after every input anyway.
    sp.batch_linger_us = 1000;
    // Node 0 is the preferred leader (leader priorities): the late joiner of the
    // `late_join` mix (the lowest id) takes the leadership over when it arrives, as the
    // ring protocols' late joiner does, and the partial fan-out crash can strike its
    // takeover.
    sp.priorities = vec![(NodeId(0), 1)];
    if let Some(limit) = cfg.max_message_bytes {
        // The protocol's own bound well below the transport's, as a node's config has it
        // (4 MiB under the runtime's 64 MiB frames).
        sp.max_message_bytes = (limit / 4).max(1024);
        sp.uncommitted_bytes_max = sp.max_message_bytes;
    }
    let switches = ReconfigSwitches::of(Proto::SeqPaxos, cfg);
    if switches.eager {
        // Seed 001 §4.4: the leader that decided the stop-sign pushes the final sequence.
        sp.transfer = abcast_core::seqpaxos::Transfer::Eager;
    }
    let durable = durable_log(mix, switches);
    sp.set_mutation(variant.mutation)
        .unwrap_or_else(|e| panic!("{e}"));
    Box::new(move |id, start, disk| {
        let store = log_store(durable, disk)?;
        Ok(SeqPaxos::new(sp.clone(), id, start, store).expect("valid sequence paxos config"))
    })
}

/// Whether a leader-based node's log is durable under `mix`: in the `power_loss` mix, and
/// in the `reconfig` mix unless the seed runs it on memory stores
/// ([`ReconfigSwitches::amnesic`]).
fn durable_log(mix: FaultMix, switches: ReconfigSwitches) -> bool {
    match mix {
        FaultMix::PowerLoss => true,
        FaultMix::Reconfig => !switches.amnesic,
        _ => false,
    }
}

/// The log store of a leader-based node: in memory (a restart is amnesic), or durable with
/// fdatasync on the node's simulated disk ([`durable_log`]: the `power_loss` mix, and the
/// `reconfig` mix in the seeds that do not run it amnesic; there process crashes keep the
/// store, and machine crashes and a power loss in the seeds of
/// [`ReconfigSwitches::power_loss`]).
fn log_store(durable: bool, disk: MemDir) -> Result<Box<dyn LogStore + Send>, StorageError> {
    if durable {
        let (s, _recovery) = DurableLogStore::open(
            disk,
            DurableOptions {
                sync: true,
                segment_bytes: 64 << 10,
                cache_instances: 512,
                cache_bytes: 64 << 20,
            },
        )?;
        return Ok(Box::new(s));
    }
    Ok(Box::new(MemoryLogStore::new()))
}

/// Raft over every node of `cfg`, on [`log_store`]'s stores; the seed of its randomised
/// election timeouts is the run's. Every node, a spare of the `reconfig` mix too, is built
/// with the first configuration's voters (`SimConfig::initial_members`): a node that
/// configuration does not name never campaigns (`Raft::can_campaign`), and its votes and
/// acknowledgements count in no quorum (quorums are of the voters in the candidate's or
/// leader's configuration); it takes entries from a leader once a configuration in the
/// leader's log names it (as a learner first, promoted once caught up;
/// `raft/membership.rs`).
pub fn raft_factory(cfg: &SimConfig, variant: Variant) -> Factory<Raft> {
    let ids: Vec<u32> = cfg.initial_member_ids().iter().map(|n| n.0).collect();
    let mix = cfg.mix;
    let mut rc = RaftConfig::new(&ids, &[]);
    rc.batch_linger_us = 1000;
    rc.seed = cfg.seed;
    // Raft has no leader priorities: the lowest id is made the preferred leader (the
    // leader hands over to it by a leadership transfer once it is caught up), as Sequence
    // Paxos' suite gives it the higher priority, so that the late joiner of `late_join`
    // leads once it has the log, and the partial fan-out crash can strike its takeover.
    rc.preferred_leader = cfg.nodes.iter().min().copied();
    let switches = RaftSwitches::of(cfg);
    rc.read_lease = switches.read_lease;
    rc.pre_vote = switches.pre_vote;
    rc.check_quorum = switches.check_quorum;
    let durable = durable_log(mix, ReconfigSwitches::of(Proto::Raft, cfg));
    rc.set_mutation(variant.mutation)
        .unwrap_or_else(|e| panic!("{e}"));
    Box::new(move |id, start, disk| {
        let store = log_store(durable, disk)?;
        Ok(Raft::new(rc.clone(), id, start, store).expect("valid raft config"))
    })
}

/// Raft's optional rules, drawn per seed so that every sweep runs each off (or, for lease
/// reads, on) in some of its runs (issue 33: no sweep ever turned `read_lease` on):
/// lease reads in about a third of the runs, pre-vote and check-quorum each off in about a
/// quarter. The partial-connectivity mix keeps the defaults, whose shapes and bound are
/// written for them (`Proto::claims_partial_connectivity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaftSwitches {
    pub read_lease: bool,
    pub pre_vote: bool,
    pub check_quorum: bool,
}

impl RaftSwitches {
    pub fn of(cfg: &SimConfig) -> RaftSwitches {
        let defaults = RaftConfig::default();
        if cfg.mix == FaultMix::PartialConnectivity {
            return RaftSwitches {
                read_lease: defaults.read_lease,
                pre_vote: defaults.pre_vote,
                check_quorum: defaults.check_quorum,
            };
        }
        // splitmix64's output function over the seed: the draws are not the seed's low bits,
        // which the fault plan uses too.
        let mut z = cfg.seed.wrapping_add(0x7261_6674_7377_6974); // "raftswit"
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        RaftSwitches {
            read_lease: z.is_multiple_of(3),
            pre_vote: !(z >> 8).is_multiple_of(4),
            check_quorum: !(z >> 16).is_multiple_of(4),
        }
    }

    /// The fault kinds this run's switches count for (once per run).
    fn count(self, report: &mut SimReport) {
        if self.read_lease && report.reads_checked > 0 {
            report.faults.add(FaultKind::LeaseReads, 1);
        }
        if !self.pre_vote {
            report.faults.add(FaultKind::NoPreVote, 1);
        }
        if !self.check_quorum {
            report.faults.add(FaultKind::NoCheckQuorum, 1);
        }
    }
}

/// The `reconfig` mix's switches, drawn per seed (issue 33, suspect 6: the mix ran only
/// durable stores with process crashes, the power-loss mix never reconfigured, and eager
/// transfer was only unit-tested):
///
/// | switch | seeds | what the run does |
/// | --- | --- | --- |
/// | `amnesic` | a third, for Sequence Paxos and Raft ([`Proto::reconfigures_amnesic`]) | every node on a memory log: each restart forgets everything, old and new members alike, and is repaired across stop-signs and joint phases |
/// | `power_loss` | a third of the rest | durable logs, machine crashes (unsynced bytes torn), the pipelined group commit, and every voter's machine losing power 0-30 ms after the first change was taken |
/// | `eager` | half, Sequence Paxos only | the stop-sign's leader pushes the final sequence to new members (seed 001 §4.4 eager; otherwise they pull) |
///
/// The rest of the seeds run durable logs with process crashes, as before. The switches
/// come from the seed alone, so a replay line reproduces them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReconfigSwitches {
    pub amnesic: bool,
    pub power_loss: bool,
    pub eager: bool,
}

impl ReconfigSwitches {
    pub fn of(proto: Proto, cfg: &SimConfig) -> ReconfigSwitches {
        if cfg.mix != FaultMix::Reconfig {
            return ReconfigSwitches::default();
        }
        // splitmix64's output function over the seed, as `RaftSwitches`, with a constant
        // of its own ("reconfsw").
        let mut z = cfg.seed.wrapping_add(0x7265_636f_6e66_7377);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let amnesic = z.is_multiple_of(3);
        ReconfigSwitches {
            amnesic: amnesic && proto.reconfigures_amnesic(),
            power_loss: !amnesic && (z >> 8).is_multiple_of(3),
            eager: proto == Proto::SeqPaxos && (z >> 16).is_multiple_of(2),
        }
    }

    /// `cfg` as the switches want it: machine crashes, the pipelined group commit and a
    /// power loss for `power_loss`.
    fn apply(self, cfg: &SimConfig) -> SimConfig {
        let mut cfg = cfg.clone();
        if self.power_loss {
            cfg.crash_model = CrashModel::Machine;
            cfg.sync_delay_us = Some((50, 2_000));
            cfg.power_loss_ppm = 1_000_000;
        }
        cfg
    }

    /// The fault kinds this run's switches count for.
    fn count(self, report: &mut SimReport) {
        if report.reconfigs_done == 0 {
            return;
        }
        if self.eager && report.members_added > 0 {
            report
                .faults
                .add(FaultKind::EagerTransfer, report.members_added);
        }
        if self.amnesic && report.restarts > 0 {
            report
                .faults
                .add(FaultKind::ReconfigAmnesic, report.restarts);
        }
        let power_losses = report.faults.get(FaultKind::PowerLoss);
        if self.power_loss && power_losses > 0 {
            report
                .faults
                .add(FaultKind::ReconfigPowerLoss, power_losses);
        }
    }
}

/// One run of `cfg` (its mix, seed and node count decide the setup) with `variant`.
pub fn run_one(
    proto: Proto,
    cfg: &SimConfig,
    variant: Variant,
) -> Result<SimReport, Box<Violation>> {
    if cfg.mix == FaultMix::Reconfig && proto.supports_reconfig() {
        let switches = ReconfigSwitches::of(proto, cfg);
        let cfg = switches.apply(cfg);
        return run_proto(proto, &cfg, variant).map(|mut r| {
            switches.count(&mut r);
            r
        });
    }
    run_proto(proto, cfg, variant)
}

fn run_proto(proto: Proto, cfg: &SimConfig, variant: Variant) -> Result<SimReport, Box<Violation>> {
    match proto {
        Proto::URing => run_with_disk(cfg, &uring_factory(cfg, variant)),
        Proto::RingPaxos => run_with_disk(cfg, &ringpaxos_factory(cfg, variant)),
        Proto::MultiRing => run_with_disk(cfg, &multiring_factory(cfg, variant)),
        Proto::MultiRingPaxos => run_with_disk(cfg, &multiring_ringpaxos_factory(cfg, variant)),
        Proto::SeqPaxos => run_with_disk(cfg, &seqpaxos_factory(cfg, variant)),
        Proto::Raft => run_with_disk(cfg, &raft_factory(cfg, variant)).map(|mut r| {
            RaftSwitches::of(cfg).count(&mut r);
            r
        }),
    }
}

/// Many seeds of one protocol and mix.
#[derive(Debug, Default)]
pub struct SuiteReport {
    /// Totals over the seeds that passed (fault counts included).
    pub totals: SweepReport,
    /// Seeds run.
    pub seeds: u64,
    /// The violations found (at most the first one when the sweep stops at it).
    pub violations: Vec<Box<Violation>>,
}

impl SuiteReport {
    pub fn merge(&mut self, other: SuiteReport) {
        self.totals.merge(&other.totals);
        self.seeds += other.seeds;
        self.violations.extend(other.violations);
    }
}

/// Runs `seeds` of `proto` under `mix`. With `stop_at_first`, ends at the first violation
/// (the tests); otherwise runs every seed and collects them (the long sweeps). Violations
/// are printed to stderr as they happen, with their replay line.
pub fn sweep(
    proto: Proto,
    mix: FaultMix,
    seeds: Range<u64>,
    variant: Variant,
    stop_at_first: bool,
) -> SuiteReport {
    let base = config(proto, mix, variant);
    let mut r = SuiteReport::default();
    // The seeds run side by side (`for_seeds`); the totals add up in seed order.
    for (_, result) in for_seeds(seeds, stop_at_first, |seed| {
        run_one(proto, &base.with_run(seed, mix), variant)
    }) {
        r.seeds += 1;
        match result {
            Ok(rep) => r.totals.add(&rep),
            Err(v) => {
                eprintln!("{v}");
                r.violations.push(v);
            }
        }
    }
    r
}

/// The body of a test named `replay` for `proto`: when `ABCAST_SIM_SEED` is set, runs that
/// seed (mix, node count and scenario from the environment, see `SimConfig::from_env`)
/// with a verbose trace; `None` otherwise.
pub fn replay_from_env(proto: Proto) -> Option<Result<SimReport, Box<Violation>>> {
    let base = config(proto, FaultMix::None, Variant::CORRECT);
    let mut cfg = match SimConfig::from_env(&base) {
        Ok(Some(cfg)) => cfg,
        Ok(None) => {
            eprintln!("replay: ABCAST_SIM_SEED is not set; nothing to replay");
            return None;
        }
        Err(e) => panic!("replay: {e}"),
    };
    let variant = Variant::from_scenario(&cfg.replay.scenario).unwrap_or_else(|e| panic!("{e}"));
    if let Err(e) = variant.available() {
        panic!("replay: {e}");
    }
    // The mix decides the setup: start again from its base configuration, keep what the
    // replay line set.
    let mut fresh = config(proto, cfg.mix, variant);
    fresh.nodes = cfg.nodes.clone();
    fresh.learners = cfg.learners.clone();
    fresh.acceptors = cfg.acceptors.clone();
    fresh.seed = cfg.seed;
    fresh.fault_phase_us = cfg.fault_phase_us;
    fresh.rate_per_s = cfg.rate_per_s;
    fresh.verbose = cfg.verbose;
    adjust(proto, &mut fresh);
    cfg = fresh;
    let r = run_one(proto, &cfg, variant);
    match &r {
        Ok(rep) => eprintln!("replay: seed {} mix {} passed: {rep:?}", cfg.seed, cfg.mix),
        Err(v) => eprintln!("{v}"),
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over its mixes, each protocol's suite expects every fault kind of issue 15: the
    /// tests assert the kinds per mix, so a passing suite met them all.
    #[test]
    fn every_fault_kind_is_expected_of_some_mix() {
        for p in Proto::ALL {
            for k in FaultKind::ALL {
                if p.is_leader_based() && k == FaultKind::LearnerSkip {
                    // A leader-based log has no window a learner could fall behind.
                    continue;
                }
                let raft_switch = matches!(
                    k,
                    FaultKind::LeaseReads | FaultKind::NoPreVote | FaultKind::NoCheckQuorum
                );
                if raft_switch && p != Proto::Raft {
                    // Switches of Raft's optional rules; no other protocol has them.
                    continue;
                }
                if FaultKind::EVS_ONLY.contains(&k) {
                    // The token ring's (`evs::token::expected_faults`).
                    continue;
                }
                if k == FaultKind::TornUnsynced && p == Proto::MultiRingPaxos {
                    // Its rings' logs never create a file while a crash waits for one (see
                    // `expected_faults`); Multi-Ring over U-Ring makes the kind.
                    continue;
                }
                if FaultKind::RECONFIG_ONLY.contains(&k)
                    && (!p.supports_reconfig()
                        || (k == FaultKind::EagerTransfer && p != Proto::SeqPaxos)
                        || (k == FaultKind::ReconfigAmnesic && !p.reconfigures_amnesic()))
                {
                    // The reconfig mix's switches; eager transfer is Sequence Paxos'.
                    continue;
                }
                assert!(
                    p.mixes().iter().any(|&m| p.expected_faults(m).contains(&k)),
                    "{p}: no mix expects {k}"
                );
            }
        }
    }

    #[test]
    fn protocol_and_variant_names_round_trip() {
        for p in Proto::ALL {
            assert_eq!(p.name().parse::<Proto>(), Ok(p));
        }
        assert!("raft-x".parse::<Proto>().is_err());
        assert_eq!("raft".parse::<Proto>(), Ok(Proto::Raft));
        assert_eq!(Variant::from_scenario(""), Ok(Variant::CORRECT));
        for m in Mutation::ALL {
            assert_eq!(
                Variant::from_scenario(&Variant::broken(m).scenario()),
                Ok(Variant::broken(m))
            );
        }
    }
}
