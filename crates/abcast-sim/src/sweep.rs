//! Many seeds, and the replay of one.

use crate::checker::{Failure, ViolationKind};
use crate::config::{FaultMix, SimConfig};
use crate::faults::FaultCounts;
use crate::sim::{SimReport, Violation, run_with_disk, without_disk};
use abcast_core::config::StartInfo;
use abcast_core::storage::{MemDir, StorageError};
use abcast_core::{Micros, NodeId, Protocol};
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

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

/// Runs `base` with `mix` for every seed in `seeds` and stops at the first violation in
/// seed order, which it prints (with its replay line) to stderr and returns. The seeds run
/// side by side ([`for_seeds`]); the outcome is that of running them one after another.
pub fn run_seeds<P, F>(
    base: &SimConfig,
    mix: FaultMix,
    seeds: Range<u64>,
    factory: &F,
) -> Result<SweepReport, Box<Violation>>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo) -> P + Sync,
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
    F: Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError> + Sync,
{
    add_up(for_seeds(seeds, true, |seed| {
        run_with_disk(&base.with_run(seed, mix), factory)
    }))
}

/// [`run_seeds`] with a factory built for each run from its configuration: for factories
/// that keep state across the restarts of one run (a store a node finds again), which
/// cannot be shared by runs side by side.
pub fn run_seeds_each<P, F, S>(
    base: &SimConfig,
    mix: FaultMix,
    seeds: Range<u64>,
    setup: S,
) -> Result<SweepReport, Box<Violation>>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo) -> P,
    S: Fn(&SimConfig) -> F + Sync,
{
    add_up(for_seeds(seeds, true, |seed| {
        let cfg = base.with_run(seed, mix);
        crate::sim::run(&cfg, &setup(&cfg))
    }))
}

/// The totals of a stop-at-first sweep's runs, in seed order; the first violation, printed.
fn add_up(
    results: Vec<(u64, Result<SimReport, Box<Violation>>)>,
) -> Result<SweepReport, Box<Violation>> {
    let mut sweep = SweepReport::default();
    for (_, r) in results {
        match r {
            Ok(r) => sweep.add(&r),
            Err(v) => {
                eprintln!("{v}");
                return Err(v);
            }
        }
    }
    Ok(sweep)
}

/// How many seeds of one sweep run at once: one per core, or `ABCAST_SIM_JOBS`.
pub fn sweep_jobs() -> usize {
    std::env::var("ABCAST_SIM_JOBS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Runs `run` for every seed of `seeds` on up to [`sweep_jobs`] threads (seeds handed out
/// in order) and returns the results in seed order. Each seed is a world of its own, so a
/// seed's result does not depend on which thread ran it or what ran beside it: the results
/// are those of running the seeds one after another. With `stop_at_first`, they end at the
/// first error in seed order, as a sequential sweep that stops there would (seeds after it
/// that were already running are dropped).
///
/// Why: `cargo test` runs the tests of one binary on as many threads as there are cores,
/// but the last sweep of a binary ran alone on one of them.
pub fn for_seeds<T, E, R>(
    seeds: Range<u64>,
    stop_at_first: bool,
    run: R,
) -> Vec<(u64, Result<T, E>)>
where
    T: Send,
    E: Send,
    R: Fn(u64) -> Result<T, E> + Sync,
{
    let count = seeds.end.saturating_sub(seeds.start);
    let jobs = (sweep_jobs() as u64).min(count).max(1);
    let mut results = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    if jobs == 1 {
        for seed in seeds {
            let r = run(seed);
            let failed = r.is_err();
            results.push((seed, r));
            if failed && stop_at_first {
                break;
            }
        }
        return results;
    }
    let next = AtomicU64::new(seeds.start);
    let first_failed = AtomicU64::new(u64::MAX);
    let results = Mutex::new(results);
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= seeds.end
                        || (stop_at_first && seed > first_failed.load(Ordering::Relaxed))
                    {
                        break;
                    }
                    let r = run(seed);
                    if r.is_err() {
                        first_failed.fetch_min(seed, Ordering::Relaxed);
                    }
                    results
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((seed, r));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(PoisonError::into_inner);
    results.sort_by_key(|(seed, _)| *seed);
    if stop_at_first && let Some(k) = results.iter().position(|(_, r)| r.is_err()) {
        results.truncate(k + 1);
    }
    results
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
