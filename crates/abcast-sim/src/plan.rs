//! The concrete fault parameters of one run, drawn from the seed inside the chosen
//! [`FaultMix`]. Drawn once at t = 0, before any event, so the report can state them and a
//! person reading a failure knows what network the protocol faced.

use crate::config::{CrashModel, FaultMix, SimConfig};
use crate::rng::SimRng;
use abcast_core::{Micros, NodeId};

/// The network and fault parameters of one run. Probabilities in parts per million.
#[derive(Clone, PartialEq, Eq)]
pub struct FaultPlan {
    /// Chance that a message (not to self) is lost, during the fault phase.
    pub loss_ppm: u32,
    /// Chance that a message is delivered twice, during the fault phase.
    pub dup_ppm: u32,
    /// One-way delay, uniform in `[delay_us_min, delay_us_max]` per message; the spread
    /// reorders messages. Kept after the heal.
    pub delay_us_min: Micros,
    pub delay_us_max: Micros,
    /// Time between two partition changes (uniform in the range), if partitions are on.
    pub partition_every_us: Option<(Micros, Micros)>,
    /// Time between two crash attempts (uniform in the range), if crashes are on.
    pub crash_every_us: Option<(Micros, Micros)>,
    /// How long a crashed node stays down before it restarts (uniform in the range).
    pub downtime_us: (Micros, Micros),
    /// Chance that a crash targets the node the live nodes name as coordinator.
    pub coordinator_bias_ppm: u32,
    /// The node that starts late and when (it waits further until some value is decided).
    pub late_join: Option<(NodeId, Micros)>,
    /// What crashes do to the nodes' disks.
    pub disk: DiskPlan,
    /// The heavy tail of the network: chance that a message sent during the fault phase is
    /// held `long_delay_us` (uniform) instead of the normal delay, so that it can arrive
    /// after the failure timeout has elected another coordinator, or two.
    pub long_delay_ppm: u32,
    pub long_delay_us: (Micros, Micros),
    /// Chance that a message addressed to a node's earlier life (it crashed since, or is
    /// down) is delivered to its next life instead of being dropped: kept while the node is
    /// down (at most `PARKED_PER_NODE_MAX` per node) and flushed when it restarts, as the
    /// runtime flushes a queue it kept for a peer that could not be reached.
    pub stale_delivery_ppm: u32,
    /// Chance that each message a crashing node sent and that is still in the network is
    /// held a further `long_delay_us`: a coordinator's last Phase 2s, decisions and
    /// Phase 1bs then arrive after its successor took over, and at acceptors that restarted
    /// since (the heavy tail aimed where it matters most).
    pub last_words_ppm: u32,
    /// Chance that a crash becomes a *partial fan-out*: the node crashes after only part of
    /// one outbox left (armed for its next outbox with several sends, or for its next
    /// takeover; see `sim.rs`).
    pub partial_fanout_ppm: u32,
    /// Time between two process pauses (uniform in the range), if pauses are on; a pause
    /// freezes a node for `pause_us` (uniform), ending at the fault phase's end at the latest.
    pub pause_every_us: Option<(Micros, Micros)>,
    pub pause_us: (Micros, Micros),
    /// Chance that a pause is a whole machine's stall (a VM descheduled, not one process
    /// stopped): what the node sent that is still in the network waits with it and leaves
    /// when it resumes, so its last Phase 2s reach acceptors after a takeover, and after
    /// their restarts.
    pub stall_ppm: u32,
    /// When the ghost-coordinator story starts, if it does (`sim/faults.rs`, `on_ghost`):
    /// the coordinator is cut off both ways, and its successor crashes once it leads.
    pub ghost_at_us: Option<Micros>,
    /// After the fault phase, up to f acceptors stay down or cut off while the connected
    /// majority must converge within `SimConfig::faults_remain_bound_us`.
    pub faults_remain: bool,
    /// When every acceptor's machine loses power at once (the next group commit of an
    /// acceptor after this time is interrupted, and every other acceptor's machine crashes
    /// at the same instant).
    pub power_loss_at_us: Option<Micros>,
    /// The `reconfig` mix: time between two reconfiguration steps (uniform in the range),
    /// asked of the leader during the fault phase (`sim/reconfig.rs`).
    pub reconfig_every_us: Option<(Micros, Micros)>,
    /// Chance that a `reconfigure` answered `Ok` is followed, 0-30 ms later, by a crash of
    /// the leader that took it, the node it adds, or the node it removes.
    pub crash_after_reconfig_ppm: u32,
    /// Chance that a replacement `reconfigure` answered `Ok` is followed, 0-20 ms later,
    /// by a partition that splits a majority of the old voters (the one leaving among them)
    /// from the rest, a majority of the new voters (the one joining among them): during
    /// the joint phase each side holds a majority of one configuration only, which is
    /// what joint consensus exists for. It lasts 100-600 ms.
    pub joint_partition_ppm: u32,
    /// The `reconfig` mix under power loss ([`crate::FaultKind::ReconfigPowerLoss`]):
    /// 0-30 ms after the first `reconfigure` answered `Ok`, every voter's machine loses
    /// power at its next group commit (as in the `power_loss` mix). Drawn only when
    /// `SimConfig::power_loss_ppm` is set (the suites set it per seed, with durable stores
    /// and machine crashes), so the other runs draw as before.
    pub reconfig_power_loss: bool,
    /// Links that go down (a partition, a crash) and come back (a heal, a restart) are
    /// reported to both ends, as the runtime reports its connections: `peer_unreachable`
    /// and `peer_reconnected`.
    pub session_notices: bool,
    /// The partial-connectivity mix: its warm-up and episodes (`sim/faults.rs`).
    pub partial: Option<PartialPlan>,
}

/// The schedule of the partial-connectivity mix ([`FaultMix::PartialConnectivity`]): all
/// links up until `warmup_us`, then `episodes` shapes one after another, each held still
/// for `hold_us` (a constrained election first spends `lag_us` of it with the hub cut off
/// inbound, so that its log falls behind, and holds its shape for the rest). The shapes
/// and the nodes' roles are drawn when each episode starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialPlan {
    pub warmup_us: Micros,
    pub episodes: u32,
    pub hold_us: Micros,
    pub lag_us: Micros,
}

/// An episode of the partial-connectivity mix holds its shape at least this long.
pub const PARTIAL_HOLD_MIN_US: Micros = 600_000;

/// Messages a down node's peers keep for it, at most (the runtime's queues are bounded too).
pub const PARKED_PER_NODE_MAX: usize = 64;

/// `disk` is left out while it is the default (process crashes): the plan, and with it the
/// trace's first line and the run's fingerprint, reads as it did before disks existed.
impl std::fmt::Debug for FaultPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("FaultPlan");
        d.field("loss_ppm", &self.loss_ppm)
            .field("dup_ppm", &self.dup_ppm)
            .field("delay_us_min", &self.delay_us_min)
            .field("delay_us_max", &self.delay_us_max)
            .field("partition_every_us", &self.partition_every_us)
            .field("crash_every_us", &self.crash_every_us)
            .field("downtime_us", &self.downtime_us)
            .field("coordinator_bias_ppm", &self.coordinator_bias_ppm)
            .field("late_join", &self.late_join);
        if self.disk != DiskPlan::default() {
            d.field("disk", &self.disk);
        }
        d.field("long_delay_ppm", &self.long_delay_ppm)
            .field("stale_delivery_ppm", &self.stale_delivery_ppm)
            .field("last_words_ppm", &self.last_words_ppm)
            .field("partial_fanout_ppm", &self.partial_fanout_ppm)
            .field("pause_every_us", &self.pause_every_us)
            .field("stall_ppm", &self.stall_ppm)
            .field("ghost_at_us", &self.ghost_at_us)
            .field("faults_remain", &self.faults_remain)
            .field("power_loss_at_us", &self.power_loss_at_us);
        // Left out while off: the plans of the other mixes read as before.
        if self.reconfig_every_us.is_some() {
            d.field("reconfig_every_us", &self.reconfig_every_us)
                .field("crash_after_reconfig_ppm", &self.crash_after_reconfig_ppm)
                .field("joint_partition_ppm", &self.joint_partition_ppm);
            if self.reconfig_power_loss {
                d.field("reconfig_power_loss", &self.reconfig_power_loss);
            }
        }
        if self.session_notices {
            d.field("session_notices", &self.session_notices);
        }
        if let Some(p) = &self.partial {
            d.field("partial", p);
        }
        d.finish()
    }
}

/// What crashes do to the nodes' simulated disks in one run ([`crate::CrashModel`]), drawn
/// from the seed. Probabilities in parts per million.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskPlan {
    /// Chance that a crash is a machine crash (the others are process crashes, which keep
    /// everything written).
    pub machine_crash_ppm: u32,
    /// Chance that a crash of the crash schedule waits for the node's next group commit and
    /// hits in the middle of it: the records reach the OS, the fdatasync never completes,
    /// and the replies that depended on it never leave. A machine crash then tears what the
    /// write left unsynced; a process crash leaves it in the OS's cache, unsynced.
    pub in_commit_ppm: u32,
    /// Per file with unsynced bytes at a machine crash: chance that a random prefix of them
    /// survives (a torn write). Otherwise none or all of them survive, evenly.
    pub torn_ppm: u32,
    /// Chance that one byte of a surviving unsynced prefix is flipped (a garbled write).
    pub flip_ppm: u32,
    // The disk faults of issue 33 (`SimConfig::disk_faults`), drawn by
    // [`DiskPlan::draw_faults`]; all 0 without.
    /// Chance that a crash of the crash schedule is instead a disk failure armed under the
    /// node: after 0-40 more writes (or syncs) the disk fails them with EIO or ENOSPC (or
    /// EIO on fdatasync), until the node stopped (`disk_error`).
    pub disk_error_ppm: u32,
    /// Chance that the restart after a crash of the crash schedule finds the node's disk
    /// wiped, when no more than f - 1 other acceptors are down or amnesic (`wiped_dir`).
    pub wiped_dir_ppm: u32,
    /// Per file whose name was never made durable, at a machine crash: chance that it
    /// survives with a random prefix of its bytes (`torn_unsynced`).
    pub torn_unsynced_ppm: u32,
    /// Chance that a crash of the crash schedule waits (up to 2 s of the fault phase) for
    /// a group commit that leaves a new file's name not yet durable, and strikes then, as
    /// a machine crash that keeps that file (`torn_unsynced`).
    pub new_file_crash_ppm: u32,
}

impl DiskPlan {
    /// Draws the disk faults of `model` from `rng`.
    ///
    /// | model | machine crashes | in a group commit | torn | flipped |
    /// | --- | --- | --- | --- | --- |
    /// | process | 0 | - | - | - |
    /// | machine | all | 20-80 % | 30-100 % | 0-50 % |
    /// | mixed | 50 % | 20-80 % | 30-100 % | 0-50 % |
    pub fn draw(model: CrashModel, rng: &mut SimRng) -> DiskPlan {
        let machine_crash_ppm = match model {
            CrashModel::Process => return DiskPlan::default(),
            CrashModel::Machine => 1_000_000,
            CrashModel::Mixed => 500_000,
        };
        DiskPlan {
            machine_crash_ppm,
            in_commit_ppm: rng.between(200_000, 800_000) as u32,
            torn_ppm: rng.between(300_000, 1_000_000) as u32,
            flip_ppm: rng.between(0, 500_000) as u32,
            ..DiskPlan::default()
        }
    }

    /// Draws the disk faults of issue 33 from `rng`, a stream of their own. Every machine
    /// crash model keeps never-synced files as real file systems do (`torn_unsynced`, 30-100
    /// % of such files); with `SimConfig::disk_faults` also:
    ///
    /// | disk error | wiped directory | crash at a new file |
    /// | --- | --- | --- |
    /// | 10-30 % of crashes | 10-30 % of restarts | 20-50 % of crashes |
    pub fn draw_faults(&mut self, model: CrashModel, disk_faults: bool, rng: &mut SimRng) {
        if model != CrashModel::Process {
            self.torn_unsynced_ppm = rng.between(300_000, 1_000_000) as u32;
        }
        if disk_faults {
            self.disk_error_ppm = rng.between(100_000, 300_000) as u32;
            self.wiped_dir_ppm = rng.between(100_000, 300_000) as u32;
            self.new_file_crash_ppm = rng.between(200_000, 500_000) as u32;
        }
    }
}

impl FaultPlan {
    /// The fault-free plan: a LAN-like 100-1000 us delay.
    pub fn quiet() -> FaultPlan {
        FaultPlan {
            loss_ppm: 0,
            dup_ppm: 0,
            delay_us_min: 100,
            delay_us_max: 1000,
            partition_every_us: None,
            crash_every_us: None,
            downtime_us: (0, 0),
            coordinator_bias_ppm: 0,
            late_join: None,
            disk: DiskPlan::default(),
            long_delay_ppm: 0,
            long_delay_us: (500_000, 5_000_000),
            stale_delivery_ppm: 0,
            last_words_ppm: 0,
            partial_fanout_ppm: 0,
            pause_every_us: None,
            pause_us: (500_000, 5_000_000),
            stall_ppm: 0,
            ghost_at_us: None,
            faults_remain: false,
            power_loss_at_us: None,
            reconfig_every_us: None,
            crash_after_reconfig_ppm: 0,
            joint_partition_ppm: 0,
            reconfig_power_loss: false,
            session_notices: false,
            partial: None,
        }
    }

    /// Draws the plan of `cfg.mix` from `rng`. The disk faults ([`FaultPlan::disk`]) are
    /// drawn apart, by the simulator, from a random stream of their own ([`DiskPlan::draw`]),
    /// so that adding them changed no run of the default process crashes.
    ///
    /// | mix | loss | dup | delay (us) | partitions | crashes | late join |
    /// | --- | --- | --- | --- | --- | --- | --- |
    /// | none | 0 | 0 | 100 .. 100-3100 | - | - | - |
    /// | loss | 0-30 % | 0-5 % | 50-500 .. +0-20 000 | - | - | - |
    /// | partition | 0 | 0 | 100 .. 100-3100 | every 50-400 ms | - | - |
    /// | crash, power_loss | 0 | 0 | 100 .. 100-3100 | - | every 100-600 ms, down 50-1000 ms, coordinator 50 % | - |
    /// | late_join | 0 | 0 | 100 .. 100-3100 | - | - | lowest id at 25-60 % of the fault phase |
    /// | mixed | 0-10 % | 0-2 % | 100 .. 100-5100 | every 100-800 ms | every 200-1000 ms | 50 % of seeds |
    /// | pause | 0 | 0 | 100 .. 100-3100 | - | every 300-900 ms, down 50-600 ms, coordinator 20 % | - |
    /// | learner_skip | 0 | 0-2 % | 100 .. 100-3100 | - | every 200-600 ms, down 300-1500 ms, coordinator 20 % | - |
    /// | reconfig | 0-10 % | 0-2 % | 100 .. 100-5100 | every 100-800 ms in 50 % of seeds | every 150-700 ms, down 50-600 ms, leader 40 % | - |
    /// | partial | 0 | 0 | 100 .. 100-3100 | the partial-connectivity episodes below | - | - |
    ///
    /// The partial mix warms up 200-400 ms with every link up, then plays 1-3 episodes
    /// (fewer if the fault phase cannot hold each for `PARTIAL_HOLD_MIN_US`), each held
    /// for an equal share of the rest of the fault phase; a constrained election spends
    /// 150-300 ms of its share letting the hub's log fall behind. Links that go down and
    /// up are reported to both ends (`session_notices`) in half the seeds. No heavy tail:
    /// a reply held past its heartbeat round would stretch Ballot Leader Election's
    /// timeout, which the mix's bound does not allow for.
    ///
    /// The reconfig mix also asks for a reconfiguration every 100-400 ms of the fault phase,
    /// crashes the leader, the added or the removed node 0-30 ms after 30 % of the
    /// `reconfigure`s that returned `Ok`, splits an old majority from a new one 0-20 ms
    /// after 40 % of the replacements taken (`joint_partition_ppm`), reports links that go down and up to both ends
    /// (`session_notices`), holds 0.1-0.5 % of messages 0.5-5 s, delivers 20-80 % of
    /// messages for a down node to its next life, and has no faults-remain phase. Where
    /// `SimConfig::power_loss_ppm` is set (the suites' power-loss seeds of the mix,
    /// `suites::ReconfigSwitches`), every voter's machine loses power 0-30 ms after the
    /// first change taken (`reconfig_power_loss`).
    ///
    /// And the faults of issue 15 ([`crate::FaultKind`]):
    ///
    /// | mix | held 0.5-5 s | to the next life | partial fan-out | pauses | faults remain | power loss |
    /// | --- | --- | --- | --- | --- | --- | --- |
    /// | loss | 0.1-1 % | - | - | - | - | - |
    /// | partition | 0.1-0.5 % | - | - | - | yes | - |
    /// | crash | 0.1-0.5 % | 20-80 % | 30 % of crashes | - | yes | `power_loss_ppm` |
    /// | late_join | - | - | the late node, 50 % | - | - | - |
    /// | mixed | 0.1-0.5 % | 20-80 % | 30 % of crashes | every 0.5-1.5 s | yes | `power_loss_ppm` |
    /// | pause | 0.1-0.5 % | - | - | every 200-800 ms | yes | - |
    /// | power_loss | 0.1-0.5 % | 20-80 % | - | - | - | always |
    /// | learner_skip | 0.1-0.5 % | 20-80 % | - | - | - | - |
    ///
    /// In the crash, mixed and power_loss mixes, 10-50 % of a crashing node's messages still
    /// in the network are held a further 0.5-5 s (`last_words_ppm`). A pause stalls the whole
    /// machine in 50 % (pause) and 30 % (mixed) of cases (`stall_ppm`), and half the crash,
    /// mixed and pause runs play the ghost-coordinator story (`ghost_at_us`).
    pub fn draw(cfg: &SimConfig, rng: &mut SimRng) -> FaultPlan {
        let mut plan = FaultPlan::quiet();
        plan.delay_us_min = 100;
        plan.delay_us_max = 100 + rng.between(0, 3000);
        let lowest = cfg.nodes.iter().min().copied();
        let late_at =
            |rng: &mut SimRng| rng.between(cfg.fault_phase_us / 4, cfg.fault_phase_us * 3 / 5);
        let crashes = |plan: &mut FaultPlan| {
            plan.crash_every_us = Some((100_000, 600_000));
            plan.downtime_us = (50_000, 1_000_000);
            plan.coordinator_bias_ppm = 500_000;
        };
        match cfg.mix {
            FaultMix::None => {}
            FaultMix::Loss => {
                plan.loss_ppm = rng.between(0, 300_000) as u32;
                plan.dup_ppm = rng.between(0, 50_000) as u32;
                plan.delay_us_min = rng.between(50, 500);
                plan.delay_us_max = plan.delay_us_min + rng.between(0, 20_000);
            }
            FaultMix::Partition => {
                plan.partition_every_us = Some((50_000, 400_000));
            }
            FaultMix::Crash | FaultMix::PowerLoss => crashes(&mut plan),
            FaultMix::LateJoin => {
                plan.late_join = lowest.map(|n| (n, late_at(rng)));
            }
            FaultMix::Mixed => {
                plan.loss_ppm = rng.between(0, 100_000) as u32;
                plan.dup_ppm = rng.between(0, 20_000) as u32;
                plan.delay_us_max = 100 + rng.between(0, 5000);
                plan.partition_every_us = Some((100_000, 800_000));
                plan.crash_every_us = Some((200_000, 1_000_000));
                plan.downtime_us = (50_000, 1_000_000);
                plan.coordinator_bias_ppm = 500_000;
                if rng.chance_ppm(500_000) {
                    plan.late_join = lowest.map(|n| (n, late_at(rng)));
                }
            }
            FaultMix::Pause => {
                // A frozen coordinator resumes with its old ballot, its timers overdue and its
                // inbox full, after others took over and acceptors restarted amnesic: the
                // ghost coordinator an epoch check exists for.
                plan.crash_every_us = Some((300_000, 900_000));
                plan.downtime_us = (50_000, 600_000);
                plan.coordinator_bias_ppm = 200_000;
            }
            FaultMix::LearnerSkip => {
                // Learners fall behind by being down: a restarted in-memory learner finds
                // its instances gone from every window. No loss or partitions: the learners
                // that stay up keep up, so every decided value is delivered somewhere (a
                // window without snapshots loses what every learner skipped, by design).
                plan.dup_ppm = rng.between(0, 20_000) as u32;
                plan.crash_every_us = Some((200_000, 600_000));
                plan.downtime_us = (300_000, 1_500_000);
                plan.coordinator_bias_ppm = 200_000;
            }
            FaultMix::Reconfig => {
                plan.loss_ppm = rng.between(0, 100_000) as u32;
                plan.dup_ppm = rng.between(0, 20_000) as u32;
                plan.delay_us_max = 100 + rng.between(0, 5000);
                if rng.chance_ppm(500_000) {
                    plan.partition_every_us = Some((100_000, 800_000));
                }
                plan.crash_every_us = Some((150_000, 700_000));
                plan.downtime_us = (50_000, 600_000);
                plan.coordinator_bias_ppm = 400_000;
                plan.reconfig_every_us = Some((100_000, 400_000));
                plan.crash_after_reconfig_ppm = 300_000;
                plan.joint_partition_ppm = 400_000;
                plan.session_notices = true;
            }
            FaultMix::PartialConnectivity => {
                let warmup_us = rng.between(200_000, 400_000);
                let rest = cfg.fault_phase_us.saturating_sub(warmup_us);
                let wanted = rng.between(1, 3);
                let episodes = (1..=wanted)
                    .rev()
                    .find(|k| rest / k >= PARTIAL_HOLD_MIN_US)
                    .unwrap_or(1);
                plan.partial = Some(PartialPlan {
                    warmup_us,
                    episodes: episodes as u32,
                    hold_us: rest / episodes,
                    lag_us: rng.between(150_000, 300_000),
                });
                plan.session_notices = rng.chance_ppm(500_000);
            }
        }
        // The faults of issue 15, drawn after the others.
        let mix = cfg.mix;
        plan.long_delay_ppm = match mix {
            FaultMix::None | FaultMix::LateJoin | FaultMix::PartialConnectivity => 0,
            FaultMix::Loss => rng.between(1_000, 10_000) as u32,
            _ => rng.between(1_000, 5_000) as u32,
        };
        if matches!(
            mix,
            FaultMix::Crash
                | FaultMix::Mixed
                | FaultMix::PowerLoss
                | FaultMix::LearnerSkip
                | FaultMix::Reconfig
        ) {
            plan.stale_delivery_ppm = rng.between(200_000, 800_000) as u32;
        }
        if matches!(mix, FaultMix::Crash | FaultMix::Mixed | FaultMix::PowerLoss) {
            plan.last_words_ppm = rng.between(100_000, 500_000) as u32;
        }
        plan.partial_fanout_ppm = match mix {
            FaultMix::Crash | FaultMix::Mixed => 300_000,
            FaultMix::LateJoin => 500_000,
            _ => 0,
        };
        plan.pause_every_us = match mix {
            FaultMix::Pause => Some((200_000, 800_000)),
            FaultMix::Mixed => Some((500_000, 1_500_000)),
            _ => None,
        };
        if mix == FaultMix::Pause {
            // The pause mix crashes nodes too: messages for a node's earlier life reach
            // the new one, and half the pauses stall a whole machine.
            plan.stale_delivery_ppm = rng.between(200_000, 800_000) as u32;
            plan.stall_ppm = 500_000;
        }
        if mix == FaultMix::Mixed {
            plan.stall_ppm = 300_000;
        }
        if matches!(mix, FaultMix::Crash | FaultMix::Mixed | FaultMix::Pause)
            && rng.chance_ppm(500_000)
        {
            plan.ghost_at_us = Some(rng.between(cfg.fault_phase_us / 10, cfg.fault_phase_us / 2));
        }
        plan.faults_remain = matches!(
            mix,
            FaultMix::Partition | FaultMix::Crash | FaultMix::Mixed | FaultMix::Pause
        );
        let power_loss = match mix {
            FaultMix::PowerLoss => true,
            FaultMix::Crash | FaultMix::Mixed => rng.chance_ppm(cfg.power_loss_ppm),
            _ => false,
        };
        if power_loss {
            plan.power_loss_at_us =
                Some(rng.between(cfg.fault_phase_us / 5, cfg.fault_phase_us * 4 / 5));
        }
        // Last, and only when asked for: the other runs of the mix draw as before.
        if mix == FaultMix::Reconfig && cfg.power_loss_ppm > 0 {
            plan.reconfig_power_loss = rng.chance_ppm(cfg.power_loss_ppm);
        }
        plan
    }
}
