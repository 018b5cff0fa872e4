//! The concrete fault parameters of one run, drawn from the seed inside the chosen
//! [`FaultMix`]. Drawn once at t = 0, before any event, so the report can state them and a
//! person reading a failure knows what network the protocol faced.

use crate::config::{FaultMix, SimConfig};
use crate::rng::SimRng;
use abcast_core::{Micros, NodeId};

/// The network and fault parameters of one run. Probabilities in parts per million.
#[derive(Clone, Debug, PartialEq, Eq)]
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
        }
    }

    /// Draws the plan of `cfg.mix` from `rng`.
    ///
    /// | mix | loss | dup | delay (us) | partitions | crashes | late join |
    /// | --- | --- | --- | --- | --- | --- | --- |
    /// | none | 0 | 0 | 100 .. 100-3100 | - | - | - |
    /// | loss | 0-30 % | 0-5 % | 50-500 .. +0-20 000 | - | - | - |
    /// | partition | 0 | 0 | 100 .. 100-3100 | every 50-400 ms | - | - |
    /// | crash | 0 | 0 | 100 .. 100-3100 | - | every 100-600 ms, down 50-1000 ms, coordinator 50 % | - |
    /// | late_join | 0 | 0 | 100 .. 100-3100 | - | - | lowest id at 25-60 % of the fault phase |
    /// | mixed | 0-10 % | 0-2 % | 100 .. 100-5100 | every 100-800 ms | every 200-1000 ms | 50 % of seeds |
    pub fn draw(cfg: &SimConfig, rng: &mut SimRng) -> FaultPlan {
        let mut plan = FaultPlan::quiet();
        plan.delay_us_min = 100;
        plan.delay_us_max = 100 + rng.between(0, 3000);
        let lowest = cfg.nodes.iter().min().copied();
        let late_at =
            |rng: &mut SimRng| rng.between(cfg.fault_phase_us / 4, cfg.fault_phase_us * 3 / 5);
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
            FaultMix::Crash => {
                plan.crash_every_us = Some((100_000, 600_000));
                plan.downtime_us = (50_000, 1_000_000);
                plan.coordinator_bias_ppm = 500_000;
            }
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
        }
        plan
    }
}
