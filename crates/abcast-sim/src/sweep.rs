//! Many seeds, and the replay of one.

use crate::checker::{Failure, ViolationKind};
use crate::config::{FaultMix, SimConfig};
use crate::faults::FaultCounts;
use crate::sim::{SimReport, Violation, run_with_disk, without_disk};
use abcast_core::config::StartInfo;
use abcast_core::storage::{MemDir, StorageError};
use abcast_core::{Micros, NodeId, Protocol};
use std::ops::Range;

/// Totals over a sweep of seeds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub runs: u64,
    pub proposed_values: u64,
    pub acked_values: u64,
    pub busy_rejections: u64,
    pub messages_sent: u64,
    pub messages_dropped: u64,
    pub crashes: u64,
    pub partition_changes: u64,
    /// Group commits (outboxes with `needs_sync`).
    pub syncs: u64,
    /// Disk faults (see [`SimReport`]).
    pub machine_crashes: u64,
    pub commit_crashes: u64,
    pub unsynced_bytes_lost: u64,
    pub torn_files: u64,
    pub flipped_bytes: u64,
    /// Snapshots taken, restarts from a snapshot, snapshots installed from a peer.
    pub snapshots_taken: u64,
    pub snapshots_restored: u64,
    pub snapshots_installed: u64,
    /// The slowest convergence after the heal, and its seed.
    pub time_to_converge_us_max: Micros,
    pub slowest_seed: u64,
    /// The faults of issue 15 that happened ([`crate::FaultKind`]).
    pub faults: FaultCounts,
    /// Messages held 0.5-5 s by the network's heavy tail; parked for a down node.
    pub messages_held_long: u64,
    pub messages_parked: u64,
    /// Runs that had a faults-remain phase, and the slowest convergence of the connected
    /// learners in one (from the last proposal).
    pub faults_remain_runs: u64,
    pub faults_remain_converge_us_max: Micros,
    /// The most `Busy` answers of one run.
    pub busy_rejections_max: u64,
    /// Runs in which no value was acknowledged (a protocol suite fails such a run).
    pub runs_without_acks: u64,
    /// Reads and reconfigurations (see [`SimReport`]'s fields of the same names).
    pub reads_issued: u64,
    pub reads_answered: u64,
    pub reads_checked: u64,
    pub reconfigs_accepted: u64,
    pub reconfigs_done: u64,
    pub leader_replacements: u64,
    pub configs_applied: u64,
    pub session_drops: u64,
    /// The partial-connectivity mix (see [`SimReport`]'s fields of the same names): episodes
    /// per shape, episodes held to the bound, the slowest recovery (and its seed) and the
    /// slowest later window.
    pub partial_shapes: [u64; 5],
    pub partial_checked: u64,
    pub partial_recover_us_max: Micros,
    pub partial_recover_seed: u64,
    pub partial_window_us_max: Micros,
}

impl SweepReport {
    /// Adds one run.
    pub fn add(&mut self, r: &SimReport) {
        self.faults.merge(&r.faults);
        self.messages_held_long += r.messages_held_long;
        self.messages_parked += r.messages_parked;
        if let Some(t) = r.faults_remain_converge_us {
            self.faults_remain_runs += 1;
            self.faults_remain_converge_us_max = self.faults_remain_converge_us_max.max(t);
        }
        self.busy_rejections_max = self.busy_rejections_max.max(r.busy_rejections);
        self.runs_without_acks += u64::from(r.acked_values == 0);
        self.reads_issued += r.reads_issued;
        self.reads_answered += r.reads_answered;
        self.reads_checked += r.reads_checked;
        self.reconfigs_accepted += r.reconfigs_accepted;
        self.reconfigs_done += r.reconfigs_done;
        self.leader_replacements += r.leader_replacements;
        self.configs_applied += r.configs_applied;
        self.session_drops += r.session_drops;
        for (a, b) in self.partial_shapes.iter_mut().zip(r.partial_shapes) {
            *a += b;
        }
        self.partial_checked += r.partial_checked;
        if r.partial_recover_us_max > self.partial_recover_us_max {
            self.partial_recover_us_max = r.partial_recover_us_max;
            self.partial_recover_seed = r.seed;
        }
        self.partial_window_us_max = self.partial_window_us_max.max(r.partial_window_us_max);
        self.runs += 1;
        self.proposed_values += r.proposed_values;
        self.acked_values += r.acked_values;
        self.busy_rejections += r.busy_rejections;
        self.messages_sent += r.messages_sent;
        self.messages_dropped += r.messages_dropped;
        self.crashes += r.crashes;
        self.partition_changes += r.partition_changes;
        self.syncs += r.syncs;
        self.machine_crashes += r.machine_crashes;
        self.commit_crashes += r.commit_crashes;
        self.unsynced_bytes_lost += r.unsynced_bytes_lost;
        self.torn_files += r.torn_files;
        self.flipped_bytes += r.flipped_bytes;
        self.snapshots_taken += r.snapshots_taken;
        self.snapshots_restored += r.snapshots_restored;
        self.snapshots_installed += r.snapshots_installed;
        if r.time_to_converge_us >= self.time_to_converge_us_max {
            self.time_to_converge_us_max = r.time_to_converge_us;
            self.slowest_seed = r.seed;
        }
    }

    /// Adds another sweep's totals.
    pub fn merge(&mut self, o: &SweepReport) {
        self.runs += o.runs;
        self.proposed_values += o.proposed_values;
        self.acked_values += o.acked_values;
        self.busy_rejections += o.busy_rejections;
        self.messages_sent += o.messages_sent;
        self.messages_dropped += o.messages_dropped;
        self.crashes += o.crashes;
        self.partition_changes += o.partition_changes;
        self.syncs += o.syncs;
        self.machine_crashes += o.machine_crashes;
        self.commit_crashes += o.commit_crashes;
        self.unsynced_bytes_lost += o.unsynced_bytes_lost;
        self.torn_files += o.torn_files;
        self.flipped_bytes += o.flipped_bytes;
        self.snapshots_taken += o.snapshots_taken;
        self.snapshots_restored += o.snapshots_restored;
        self.snapshots_installed += o.snapshots_installed;
        if o.time_to_converge_us_max >= self.time_to_converge_us_max {
            self.time_to_converge_us_max = o.time_to_converge_us_max;
            self.slowest_seed = o.slowest_seed;
        }
        self.faults.merge(&o.faults);
        self.messages_held_long += o.messages_held_long;
        self.messages_parked += o.messages_parked;
        self.faults_remain_runs += o.faults_remain_runs;
        self.faults_remain_converge_us_max = self
            .faults_remain_converge_us_max
            .max(o.faults_remain_converge_us_max);
        self.busy_rejections_max = self.busy_rejections_max.max(o.busy_rejections_max);
        self.runs_without_acks += o.runs_without_acks;
        self.reads_issued += o.reads_issued;
        self.reads_answered += o.reads_answered;
        self.reads_checked += o.reads_checked;
        self.reconfigs_accepted += o.reconfigs_accepted;
        self.reconfigs_done += o.reconfigs_done;
        self.leader_replacements += o.leader_replacements;
        self.configs_applied += o.configs_applied;
        self.session_drops += o.session_drops;
        for (a, b) in self.partial_shapes.iter_mut().zip(o.partial_shapes) {
            *a += b;
        }
        self.partial_checked += o.partial_checked;
        if o.partial_recover_us_max > self.partial_recover_us_max {
            self.partial_recover_us_max = o.partial_recover_us_max;
            self.partial_recover_seed = o.partial_recover_seed;
        }
        self.partial_window_us_max = self.partial_window_us_max.max(o.partial_window_us_max);
    }
}

/// Runs `base` with `mix` for every seed in `seeds`, in order, and stops at the first
/// violation, which it prints (with its replay line) to stderr and returns.
pub fn run_seeds<P, F>(
    base: &SimConfig,
    mix: FaultMix,
    seeds: Range<u64>,
    factory: &F,
) -> Result<SweepReport, Box<Violation>>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo) -> P,
{
    run_seeds_with_disk(base, mix, seeds, &without_disk(factory))
}

/// [`run_seeds`] with a factory that keeps its stores on the node's simulated disk (see
/// [`crate::run_with_disk`]).
pub fn run_seeds_with_disk<P, F>(
    base: &SimConfig,
    mix: FaultMix,
    seeds: Range<u64>,
    factory: &F,
) -> Result<SweepReport, Box<Violation>>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError>,
{
    let mut sweep = SweepReport::default();
    for seed in seeds {
        let cfg = base.with_run(seed, mix);
        match run_with_disk(&cfg, factory) {
            Ok(r) => sweep.add(&r),
            Err(v) => {
                eprintln!("{v}");
                return Err(v);
            }
        }
    }
    Ok(sweep)
}

/// The body of a test named `replay`: when `ABCAST_SIM_SEED` is set, runs that one seed of
/// `base` (with the overrides of [`SimConfig::from_env`]) with a verbose trace of every
/// event; otherwise returns `None` and the test passes without doing anything.
///
/// `setup` builds the factory from the final configuration, and may adjust it: the replayed
/// run can have another node count or scenario than `base`, and the factory usually depends
/// on both (the ring's members, the variant under test). Sweeps should build their factory
/// with the same `setup`, so that a replay is the run that failed.
///
/// ```ignore
/// #[test]
/// fn replay() {
///     if let Some(Err(v)) = abcast_sim::replay_from_env(&base_config(), setup) {
///         panic!("replayed violation {:?} (report above)", v.kind);
///     }
/// }
/// ```
pub fn replay_from_env<P, F, S>(
    base: &SimConfig,
    setup: S,
) -> Option<Result<SimReport, Box<Violation>>>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo) -> P,
    S: FnOnce(&mut SimConfig) -> F,
{
    replay_from_env_with_disk(base, |cfg| {
        let f = setup(cfg);
        move |id, start, _disk| Ok(f(id, start))
    })
}

/// [`replay_from_env`] with a factory that keeps its stores on the node's simulated disk.
pub fn replay_from_env_with_disk<P, F, S>(
    base: &SimConfig,
    setup: S,
) -> Option<Result<SimReport, Box<Violation>>>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError>,
    S: FnOnce(&mut SimConfig) -> F,
{
    let mut cfg = match SimConfig::from_env(base) {
        Ok(Some(cfg)) => cfg,
        Ok(None) => {
            eprintln!("replay: ABCAST_SIM_SEED is not set; nothing to replay");
            return None;
        }
        Err(e) => {
            let f = Failure::new(ViolationKind::BadConfig, e);
            return Some(Err(Box::new(Violation {
                kind: f.kind,
                seed: base.seed,
                mix: base.mix,
                at_us: 0,
                node: None,
                incarnation: None,
                instance: None,
                value: None,
                detail: f.detail,
                replay: base.replay_line(),
                plan: None,
                trace_tail: Vec::new(),
            })));
        }
    };
    let factory = setup(&mut cfg);
    let r = run_with_disk(&cfg, &factory);
    match &r {
        Ok(rep) => eprintln!("replay: seed {} mix {} passed: {rep:?}", cfg.seed, cfg.mix),
        Err(v) => eprintln!("{v}"),
    }
    Some(r)
}
