//! The experiments `abcast bench` knows, each a sweep of one parameter that reproduces a
//! figure of seed 000 chapter 4 on this machine.
//!
//! An experiment is data (its points and how to label them) plus the two sentences that
//! compare the measured shape with the seed's figure, so adding one needs no change to the
//! runner or the plot.

use crate::format::{bytes, group, ms};
use clap::ValueEnum;

/// The names accepted by `abcast bench NAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchName {
    /// Value size 16 B .. 32 KiB vs throughput and latency (seed 000 fig 4.2).
    ValueSize,
    /// Socket buffer 128 KiB .. 16 MiB at 32 KiB values (seed 000 fig 4.1).
    Buffer,
    /// Ring of 3 .. N nodes at 32 KiB values (seed 000 fig 4.5).
    RingSize,
    /// Two rings, one learner of both: a quiet ring does not stall a busy one (seed 000
    /// fig 4.6).
    Skip,
    /// Aggregate throughput as rings are added, without and with injected link delay
    /// (seed 000 fig 4.7, 4.8).
    Rings,
    /// Local rings plus a delayed global ring (seed 000 fig 4.10, 4.11).
    GlobalRing,
    /// Ring Paxos over IP multicast vs U-Ring Paxos, 3 acceptors and 1 .. 5 learners
    /// (seed 003 fig 4, table 2).
    Multicast,
    /// Constant load with snapshots and trimming: the acceptor log on disk over time.
    Trim,
    /// Acceptor storage back-ends (none, memory, durable without and with fdatasync) at
    /// 1 .. 32 KiB values (seed 000 fig 3.6).
    Storage,
    /// Leader-based protocols and the peer cores, 10k .. 1M proposals in flight (seed 001
    /// fig 11).
    Concurrency,
    /// Leader-based protocols and the peer cores at one proposal in flight (seed 001
    /// fig 13).
    Latency,
    /// The partial-connectivity scenarios on real processes: time until a leader a
    /// majority can reach decides again (issue 17, must-show 2).
    PartialConnectivity,
    /// Replace a follower, then the leader, under load: Sequence Paxos pull and eager,
    /// Raft's joint consensus (seed 001 fig 10, 12, table 5.1).
    Reconfig,
    /// The token ring: latency against offered throughput, Agreed and Safe, the original
    /// ring against the Accelerated Ring (seed 002 fig 2, 3; 5, 7 with `--large`).
    TokenLatency,
    /// The token ring under data-message loss: latency against loss per member, and
    /// against the distance to the member lost from (seed 002 fig 9-13).
    TokenLoss,
    /// The same 3-member group workload through abcast's token ring and Corosync CPG
    /// (issue 18).
    GroupPeer,
}

impl BenchName {
    pub const ALL: [BenchName; 16] = [
        BenchName::ValueSize,
        BenchName::Buffer,
        BenchName::RingSize,
        BenchName::Skip,
        BenchName::Rings,
        BenchName::GlobalRing,
        BenchName::Multicast,
        BenchName::Trim,
        BenchName::Storage,
        BenchName::Concurrency,
        BenchName::Latency,
        BenchName::PartialConnectivity,
        BenchName::Reconfig,
        BenchName::TokenLatency,
        BenchName::TokenLoss,
        BenchName::GroupPeer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BenchName::ValueSize => "value-size",
            BenchName::Buffer => "buffer",
            BenchName::RingSize => "ring-size",
            BenchName::Skip => "skip",
            BenchName::Rings => "rings",
            BenchName::GlobalRing => "global-ring",
            BenchName::Multicast => "multicast",
            BenchName::Trim => "trim",
            BenchName::Storage => "storage",
            BenchName::Concurrency => "concurrency",
            BenchName::Latency => "latency",
            BenchName::PartialConnectivity => "partial-connectivity",
            BenchName::Reconfig => "reconfig",
            BenchName::TokenLatency => "token-latency",
            BenchName::TokenLoss => "token-loss",
            BenchName::GroupPeer => "group-peer",
        }
    }

    /// One line for `abcast bench --list`.
    pub fn about(self) -> &'static str {
        match self {
            BenchName::ValueSize => {
                "value size 16 B .. 32 KiB: throughput and latency, plus latency at \
                 1000 values/s (seed 000 fig 4.2)"
            }
            BenchName::Buffer => {
                "TCP socket buffer 128 KiB .. 16 MiB at 32 KiB values: throughput and \
                 latency (seed 000 fig 4.1)"
            }
            BenchName::RingSize => {
                "ring of 3 .. N nodes (--max-nodes) at 32 KiB values: throughput and \
                 latency (seed 000 fig 4.5)"
            }
            BenchName::Skip => {
                "two rings, one learner of both: idle, one busy alone, busy with a quiet \
                 partner, both busy; buffered instances over time (seed 000 fig 4.6)"
            }
            BenchName::Rings => {
                "1 .. 3 rings at every learner, in memory and with 2 ms injected link delay: \
                 aggregate throughput (seed 000 fig 4.7, 4.8)"
            }
            BenchName::GlobalRing => {
                "two local rings with and without a global ring over 5 ms links: local \
                 throughput and latency (seed 000 fig 4.10, 4.11)"
            }
            BenchName::Multicast => {
                "Ring Paxos over UDP multicast vs U-Ring Paxos, 3 acceptors and 1 .. 5 \
                 learners, 8 KiB values: throughput per learner, MTE, latency (seed 003 \
                 fig 4, table 2); `--link-mbit 1000` on an emulated 1 Gbit/s LAN (root)"
            }
            BenchName::Trim => {
                "constant load, durable storage (sync), snapshots every second: the acceptor \
                 log on disk over time stays bounded, U-Ring, Ring Paxos and Multi-Ring \
                 (issues 4, 33)"
            }
            BenchName::Storage => {
                "acceptor storage none, memory, durable without and with fdatasync (group \
                 commit) at 1 .. 32 KiB values: throughput, latency, CPU (seed 000 fig 3.6)"
            }
            BenchName::Concurrency => {
                "Sequence Paxos, Raft, the omnipaxos and raft-rs cores on one harness, 3 and 5 \
                 nodes, 10k / 100k / 1M proposals in flight, 16 B values: throughput (seed \
                 001 fig 11)"
            }
            BenchName::Latency => {
                "the same four at one proposal in flight, 3 nodes, 16 B values: the latency \
                 distribution (seed 001 fig 13)"
            }
            BenchName::PartialConnectivity => {
                "quorum-loss, constrained election, chained (OmniPaxos EuroSys'23) and \
                 openraft 2080 on real processes, links cut with nft: recovery time per \
                 protocol (root)"
            }
            BenchName::Reconfig => {
                "3 nodes + a spare under load: replace a follower, replace the leader; \
                 Sequence Paxos pull and eager, Raft joint consensus: throughput over time, \
                 gap, dropped proposals (seed 001 fig 10, 12, table 5.1)"
            }
            BenchName::TokenLatency => {
                "token ring, original (accelerated_window 0) vs Accelerated Ring, Agreed and \
                 Safe, 1350 B payloads (8850 with --large): latency against offered throughput \
                 from light to past saturation (seed 002 fig 2, 3; 5, 7); `--link-mbit 1000` on \
                 an emulated 1 Gbit/s LAN (root)"
            }
            BenchName::TokenLoss => {
                "token ring, original vs Accelerated Ring, Agreed and Safe: mean and worst-5 % \
                 latency against data-message loss per member 0 .. 25 % at 20 % and 50 % of \
                 the original's maximum, and against the distance to the member lost from \
                 (seed 002 fig 9-13)"
            }
            BenchName::GroupPeer => {
                "3 members, 1 KB agreed messages, one and three senders: abcast's token ring \
                 with process groups against Corosync 3 CPG, msgs/s and latency (root; the \
                 corosync and libcpg-dev packages)"
            }
        }
    }
}

/// How the swept parameter is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    /// Bytes on a log2 axis, labelled "1 KiB".
    Bytes,
    /// A node count on a linear axis.
    Nodes,
}

/// One point of a sweep: the cluster to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// As shown in tables: "32 KiB", "5 nodes", "1 KiB @ 1000 values/s".
    pub label: String,
    /// The swept parameter in its own unit (bytes or nodes).
    pub param: f64,
    pub nodes: u32,
    pub value_size_bytes: u64,
    /// Offered load over all nodes; 0 = unlimited.
    pub rate_values_per_s: u64,
    /// `[transport] buffer_size` in the config; `None` = the config's default.
    pub buffer_size_bytes: Option<u64>,
    /// A light-load latency point, drawn apart from the saturated sweep.
    pub low_load: bool,
}

/// Seed 000's `concurrent_values`: values each proposer keeps in flight. Table 4.1 has 10;
/// the value-size experiment (fig 4.2) used 20.
pub const SEED_WINDOW_VALUES: u64 = 10;
pub const SEED_WINDOW_VALUES_FIG_4_2: u64 = 20;

/// A sweep and how to present it.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub name: BenchName,
    /// The seed figure it reproduces, as cited in titles.
    pub figure: &'static str,
    pub title: String,
    /// X axis description, with its unit.
    pub x_desc: &'static str,
    pub axis: Axis,
    /// CSV column name of the swept parameter, with its unit.
    pub param_column: &'static str,
    /// Values each node keeps in flight, as in the seed's setup for this figure.
    pub window_values: u64,
    pub points: Vec<Point>,
}

/// Offered load of the light-load latency point (values/s over all nodes).
pub const LOW_LOAD_VALUES_PER_S: u64 = 1000;
const LOW_LOAD_VALUE_SIZE_BYTES: u64 = 1024;
/// Value size of the buffer and ring-size sweeps, as in seed 000 (table 4.1 `value_size`).
const SEED_VALUE_SIZE_BYTES: u64 = 32 << 10;

fn saturated(label: String, param: f64, nodes: u32, value_size_bytes: u64) -> Point {
    Point {
        label,
        param,
        nodes,
        value_size_bytes,
        rate_values_per_s: 0,
        buffer_size_bytes: None,
        low_load: false,
    }
}

pub fn experiment(name: BenchName, max_nodes: u32) -> Option<Experiment> {
    let exp = match name {
        BenchName::ValueSize => {
            let mut points: Vec<Point> = [16u64, 256, 1 << 10, 4 << 10, 8 << 10, 32 << 10]
                .iter()
                .map(|&b| saturated(bytes(b), b as f64, 3, b))
                .collect();
            points.push(Point {
                label: format!(
                    "{} @ {} values/s",
                    bytes(LOW_LOAD_VALUE_SIZE_BYTES),
                    LOW_LOAD_VALUES_PER_S
                ),
                param: LOW_LOAD_VALUE_SIZE_BYTES as f64,
                nodes: 3,
                value_size_bytes: LOW_LOAD_VALUE_SIZE_BYTES,
                rate_values_per_s: LOW_LOAD_VALUES_PER_S,
                buffer_size_bytes: None,
                low_load: true,
            });
            Experiment {
                name,
                figure: "seed 000 fig 4.2",
                title: "Value size vs throughput and latency, 3 nodes (cf. seed 000 fig 4.2)"
                    .to_string(),
                x_desc: "value size (bytes, log scale)",
                axis: Axis::Bytes,
                param_column: "value_size_bytes",
                window_values: SEED_WINDOW_VALUES_FIG_4_2,
                points,
            }
        }
        BenchName::Buffer => {
            let points = (17..=24)
                .map(|shift| {
                    let b = 1u64 << shift;
                    Point {
                        buffer_size_bytes: Some(b),
                        ..saturated(bytes(b), b as f64, 3, SEED_VALUE_SIZE_BYTES)
                    }
                })
                .collect();
            Experiment {
                name,
                figure: "seed 000 fig 4.1",
                title: "TCP buffer size vs throughput and latency, 32 KiB values, 3 nodes \
                        (cf. seed 000 fig 4.1)"
                    .to_string(),
                x_desc: "socket buffer size (bytes, log scale)",
                axis: Axis::Bytes,
                param_column: "buffer_size_bytes",
                window_values: SEED_WINDOW_VALUES,
                points,
            }
        }
        // Not sweeps of one cluster: each has its own runner (`multiring.rs`, `multicast.rs`,
        // `storage.rs`, `trim.rs`, `token.rs`, ...).
        BenchName::Skip
        | BenchName::Rings
        | BenchName::GlobalRing
        | BenchName::Multicast
        | BenchName::Trim
        | BenchName::Concurrency
        | BenchName::Latency
        | BenchName::PartialConnectivity
        | BenchName::Reconfig
        | BenchName::TokenLatency
        | BenchName::TokenLoss
        | BenchName::GroupPeer
        | BenchName::Storage => {
            return None;
        }
        BenchName::RingSize => {
            let points = (3..=max_nodes.max(3))
                .map(|n| saturated(format!("{n} nodes"), n as f64, n, SEED_VALUE_SIZE_BYTES))
                .collect();
            Experiment {
                name,
                figure: "seed 000 fig 4.5",
                title: "Ring size vs throughput and latency, 32 KiB values \
                        (cf. seed 000 fig 4.5)"
                    .to_string(),
                x_desc: "nodes in the ring",
                axis: Axis::Nodes,
                param_column: "nodes",
                window_values: SEED_WINDOW_VALUES,
                points,
            }
        }
    };
    Some(exp)
}

/// Acceptors (each also proposes and learns) in the multicast experiment.
pub const MULTICAST_ACCEPTORS: u32 = 3;
/// Learner-only nodes go from 1 to this.
pub const MULTICAST_LEARNERS_MAX: u32 = 5;
/// Seed 003 table 2: Ring Paxos had its best throughput with 8 KB messages.
pub const MULTICAST_VALUE_SIZE_BYTES: u64 = 8 << 10;
/// Values each proposer keeps in flight: enough to saturate either protocol on loopback.
pub const MULTICAST_WINDOW_VALUES: u64 = 64;

/// Medians of one point, as the shape sentences need them.
#[derive(Debug, Clone, Copy)]
pub struct Medians {
    pub param: f64,
    pub values_per_s: f64,
    pub mbit_per_s: f64,
    pub latency_us_p50: f64,
}

fn pct_change(from: f64, to: f64) -> String {
    if from <= 0.0 {
        return "n/a".to_string();
    }
    format!("{:+.0} %", (to / from - 1.0) * 100.0)
}

/// Two sentences comparing the measured shape with the seed's figure. `sweep` holds the
/// saturated points in sweep order; `low_load` the light-load point, if any.
pub fn shape_sentences(exp: &Experiment, sweep: &[Medians], low_load: Option<&Medians>) -> String {
    let (Some(first), Some(last)) = (sweep.first(), sweep.last()) else {
        return "No point completed, so there is no shape to compare.".to_string();
    };
    match exp.name {
        BenchName::ValueSize => {
            let rising = last.mbit_per_s > first.mbit_per_s;
            let falling = last.values_per_s < first.values_per_s;
            let verdict = if rising && falling {
                "the same shape as seed 000 fig 4.2, where throughput rises to about 1 Gbit/s \
                 at 32 KiB and messages/s fall"
            } else {
                "unlike seed 000 fig 4.2, where throughput rises with the value size and \
                 messages/s fall"
            };
            let low = low_load.map_or(String::new(), |l| {
                format!(
                    " At a light load of {LOW_LOAD_VALUES_PER_S} values/s the p50 latency is {}.",
                    ms(l.latency_us_p50)
                )
            });
            format!(
                "Throughput goes from {:.1} Mbit/s at {} to {:.1} Mbit/s at {} while values/s \
                 go from {} to {}: {verdict}. p50 latency goes from {} to {} \
                 (seed: a floor of a few ms, then about linear in the size).{low}",
                first.mbit_per_s,
                bytes(first.param as u64),
                last.mbit_per_s,
                bytes(last.param as u64),
                group(first.values_per_s.round() as u64),
                group(last.values_per_s.round() as u64),
                ms(first.latency_us_p50),
                ms(last.latency_us_p50),
            )
        }
        BenchName::Buffer => {
            let spread_pct = |m: &[Medians]| {
                let lo = m.iter().map(|x| x.mbit_per_s).fold(f64::INFINITY, f64::min);
                let hi = m.iter().map(|x| x.mbit_per_s).fold(0.0, f64::max);
                let pct = if hi > 0.0 {
                    (hi - lo) / hi * 100.0
                } else {
                    0.0
                };
                (lo, hi, pct)
            };
            let (lo, hi, all_pct) = spread_pct(sweep);
            let (_, rest_hi, rest_pct) = spread_pct(&sweep[1..]);
            let verdict = if all_pct <= 15.0 {
                "flat, as in seed 000 fig 4.1, where 128 KiB to 16 MiB gave the same throughput \
                 and latency"
                    .to_string()
            } else if rest_pct <= 15.0 && first.mbit_per_s < rest_hi * 0.9 {
                format!(
                    "flat from {} on and lower only at {}, as in seed 000 fig 4.1, where only \
                     the smallest buffer lost throughput",
                    sweep
                        .get(1)
                        .map_or(String::new(), |m| bytes(m.param as u64)),
                    bytes(first.param as u64)
                )
            } else {
                "not flat, unlike seed 000 fig 4.1, where 128 KiB to 16 MiB gave about the \
                 same throughput"
                    .to_string()
            };
            format!(
                "Throughput stays between {lo:.1} and {hi:.1} Mbit/s ({all_pct:.0} % spread) \
                 from {} to {}: {verdict}. On loopback the round-trip time is microseconds, so \
                 by throughput = window / RTT even a small window covers the rate; p50 latency \
                 goes from {} to {}.",
                bytes(first.param as u64),
                bytes(last.param as u64),
                ms(first.latency_us_p50),
                ms(last.latency_us_p50),
            )
        }
        // `experiment` builds no `Experiment` for these (they have their own runners).
        BenchName::Skip
        | BenchName::Rings
        | BenchName::GlobalRing
        | BenchName::Multicast
        | BenchName::Trim
        | BenchName::Concurrency
        | BenchName::Latency
        | BenchName::PartialConnectivity
        | BenchName::Reconfig
        | BenchName::TokenLatency
        | BenchName::TokenLoss
        | BenchName::GroupPeer
        | BenchName::Storage => {
            format!("{} is not a sweep of one cluster.", exp.name.as_str())
        }
        BenchName::RingSize => {
            let added = (last.param - first.param).max(1.0);
            let per_node_us = (last.latency_us_p50 - first.latency_us_p50) / added;
            let verdict = if last.latency_us_p50 > first.latency_us_p50 {
                "latency grows with the ring, as in seed 000 fig 4.5"
            } else {
                "latency does not grow with the ring, unlike seed 000 fig 4.5"
            };
            format!(
                "p50 latency goes from {} at {} nodes to {} at {} nodes (about {} per added \
                 node): {verdict}. Throughput changes by {} ({:.1} to {:.1} Mbit/s), where the \
                 seed fell at first and then held; here all nodes also share the machine's \
                 cores, so each added node costs CPU as well as a hop.",
                ms(first.latency_us_p50),
                first.param,
                ms(last.latency_us_p50),
                last.param,
                ms(per_node_us),
                pct_change(first.mbit_per_s, last.mbit_per_s),
                first.mbit_per_s,
                last.mbit_per_s,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_size_sweep_matches_the_seed_figure_points() {
        let e = experiment(BenchName::ValueSize, 7).unwrap();
        let sizes: Vec<u64> = e
            .points
            .iter()
            .filter(|p| !p.low_load)
            .map(|p| p.value_size_bytes)
            .collect();
        assert_eq!(sizes, vec![16, 256, 1024, 4096, 8192, 32768]);
        assert_eq!(e.points.iter().filter(|p| p.low_load).count(), 1);
    }

    #[test]
    fn buffer_sweep_spans_128_kib_to_16_mib() {
        let e = experiment(BenchName::Buffer, 7).unwrap();
        let first = e.points.first().and_then(|p| p.buffer_size_bytes);
        let last = e.points.last().and_then(|p| p.buffer_size_bytes);
        assert_eq!(first, Some(128 << 10));
        assert_eq!(last, Some(16 << 20));
        assert!(e.points.iter().all(|p| p.value_size_bytes == 32 << 10));
    }

    #[test]
    fn ring_size_sweep_goes_from_3_to_max_nodes() {
        let e = experiment(BenchName::RingSize, 5).unwrap();
        let nodes: Vec<u32> = e.points.iter().map(|p| p.nodes).collect();
        assert_eq!(nodes, vec![3, 4, 5]);
    }

    #[test]
    fn shape_sentences_name_the_seed_figure() {
        let m = |param, mbit, vps, lat| Medians {
            param,
            values_per_s: vps,
            mbit_per_s: mbit,
            latency_us_p50: lat,
        };
        for e in BenchName::ALL.iter().filter_map(|&n| experiment(n, 5)) {
            let text = shape_sentences(
                &e,
                &[m(3.0, 10.0, 1000.0, 500.0), m(5.0, 20.0, 100.0, 900.0)],
                None,
            );
            assert!(text.contains("seed 00") && text.contains(" fig "), "{text}");
        }
    }

    #[test]
    fn buffer_sentence_recognises_the_seed_shape_lower_only_at_the_smallest_buffer() {
        let e = experiment(BenchName::Buffer, 7).unwrap();
        let m = |param: f64, mbit: f64| Medians {
            param,
            values_per_s: mbit,
            mbit_per_s: mbit,
            latency_us_p50: 2000.0,
        };
        let sweep = [
            m(131_072.0, 2500.0),
            m(262_144.0, 3200.0),
            m(524_288.0, 3300.0),
        ];
        let text = shape_sentences(&e, &sweep, None);
        assert!(text.contains("lower only at 128 KiB"), "{text}");
        let flat = [m(131_072.0, 3200.0), m(262_144.0, 3300.0)];
        assert!(shape_sentences(&e, &flat, None).contains("flat, as in"));
    }
}
