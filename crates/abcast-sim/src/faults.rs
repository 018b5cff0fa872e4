//! The fault kinds the simulator generates beyond loss, duplication, reordering, partitions
//! and plain crashes, and their counts per run and per sweep.
//!
//! Each kind is a pattern real networks and machines produce that an earlier simulator
//! could not (issue 15): a protocol passes only if it survives all of them, and a sweep is
//! worth something only if they actually happened in it, so every run counts them and the
//! sweeps assert the counts.

use std::fmt;

/// A fault pattern, named as the sweep binary's JSON names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// A message crossed a process life: addressed to a node's earlier incarnation and
    /// delivered to its next one (as the runtime flushes a queue kept for a peer that was
    /// down), or sent by an earlier incarnation and delivered after its sender restarted.
    /// Counted per message delivered that way.
    CrossIncarnation,
    /// A message delivered after the cluster's highest ballot changed at least twice since
    /// it was sent (a Phase 1b, Phase 2, 2B, Nack or Decision of an old ballot arriving
    /// after two takeovers). Counted per message.
    OutlivesTakeover,
    /// A run's *faults remain* phase: up to f acceptors stayed down or cut off and the
    /// connected learners converged within the stated bound. Counted per run.
    FaultsRemain,
    /// Every acceptor's machine lost power at the same instant, one of them in the middle
    /// of a group commit. Counted per power loss.
    PowerLoss,
    /// A node crashed after only part of one outbox left (its Phase 1a reached some
    /// acceptors, or phase 1 ended and no Phase 2 left yet). Counted per crash.
    PartialFanout,
    /// A process frozen for 0.5-5 s, then resumed with its timers overdue and its inbox
    /// full. Counted per pause.
    Pause,
    /// A learner skipped instances that every acceptor had trimmed from its window
    /// (`Outbox::skips`). Counted per skip.
    LearnerSkip,
    /// A ghost coordinator: the coordinator was cut off both ways, another acceptor took
    /// over, and that one crashed and restarted while the ghost was still cut off; then
    /// the links came back, and the ghost still believed in its ballot. Counted per crash
    /// of the successor.
    Ghost,
    /// An episode of the partial-connectivity mix: one of its shapes (quorum loss,
    /// constrained election, chained, the openraft 2080 bridge, random one-way links) held
    /// still under load. Counted per episode.
    PartialConnectivity,
    /// The simulated disk failed a write (EIO, ENOSPC) or an fdatasync (EIO, its unsynced
    /// writes lost) under a running node, which had to stop without acting on a store it
    /// could not make durable, and restarted later as after a crash. Counted per failure
    /// that stopped a node (issue 33).
    DiskError,
    /// A machine crash kept a file whose name was never made durable, with a prefix of its
    /// never-synced bytes (as ext4 and xfs do when their journal committed the name but not
    /// the data): a store must not take it for durable. Counted per file so kept.
    TornUnsynced,
    /// A node restarted on an empty directory (its disk wiped or replaced): it must start
    /// amnesic, never as the member it was with its votes forgotten. Counted per restart.
    WipedDir,
    /// A node restarted without its state while more than f amnesic restarts had happened
    /// in the run before (each earlier one repaired, or the f rule would have held this
    /// crash back): nodes lose their state one after another, beyond f over time, as a
    /// cluster on memory storage restarted one node at a time does (issue 33). Counted per
    /// such restart.
    AmnesicBeyondF,
    /// A Raft run with `read_lease = true` whose reads were checked (thesis §6.4.1: a
    /// leader answers at once within its lease). Counted per run.
    LeaseReads,
    /// A Raft run with `pre_vote = false` (thesis §9.6 off). Counted per run.
    NoPreVote,
    /// A Raft run with `check_quorum = false` (thesis §6.2 off). Counted per run.
    NoCheckQuorum,
    /// The token ring (the EVS world): the data lane into one member cut while its token
    /// lane works (seed 002 §III-E: data and token on sockets of their own): the other
    /// members' data messages, joins and merge announcements are lost on the way to it;
    /// tokens and commit tokens arrive. Counted per cut.
    DataLaneCut,
    /// The token ring (the EVS world): a token or commit token lost by the network (loss,
    /// a partition, a cut link). Counted per message.
    TokenLoss,
    /// The `reconfig` mix with eager transfer (seed 001 §4.4): the leader that decides a
    /// stop-sign pushes the final sequence to each new member instead of waiting for its
    /// pull (Sequence Paxos, `Transfer::Eager`, drawn per seed). Counted per member added
    /// in such a run.
    EagerTransfer,
    /// The `reconfig` mix on memory stores (drawn per seed): configurations change while
    /// nodes restart without their state, old and new members alike, and must be repaired
    /// across stop-signs and joint phases (issue 33, suspect 6). Counted per restart in a
    /// run whose configuration changed.
    ReconfigAmnesic,
    /// The `reconfig` mix on durable stores with machine crashes (drawn per seed): every
    /// voter's machine loses power at once 0-30 ms after a `reconfigure` was taken, one of
    /// them in the middle of a group commit. Counted per power loss in a run whose
    /// configuration changed.
    ReconfigPowerLoss,
}

impl FaultKind {
    pub const ALL: [FaultKind; 21] = [
        FaultKind::CrossIncarnation,
        FaultKind::OutlivesTakeover,
        FaultKind::FaultsRemain,
        FaultKind::PowerLoss,
        FaultKind::PartialFanout,
        FaultKind::Pause,
        FaultKind::LearnerSkip,
        FaultKind::Ghost,
        FaultKind::PartialConnectivity,
        FaultKind::DiskError,
        FaultKind::TornUnsynced,
        FaultKind::WipedDir,
        FaultKind::AmnesicBeyondF,
        FaultKind::LeaseReads,
        FaultKind::NoPreVote,
        FaultKind::NoCheckQuorum,
        FaultKind::DataLaneCut,
        FaultKind::TokenLoss,
        FaultKind::EagerTransfer,
        FaultKind::ReconfigAmnesic,
        FaultKind::ReconfigPowerLoss,
    ];

    /// The kinds only the `reconfig` mix makes (`Proto::supports_reconfig`), and of them
    /// eager transfer for Sequence Paxos only (Raft has no final sequence to push).
    pub const RECONFIG_ONLY: [FaultKind; 3] = [
        FaultKind::EagerTransfer,
        FaultKind::ReconfigAmnesic,
        FaultKind::ReconfigPowerLoss,
    ];

    /// The kinds only the token ring's EVS world makes (`evs::token::expected_faults`),
    /// never the single-sequence suites.
    pub const EVS_ONLY: [FaultKind; 2] = [FaultKind::DataLaneCut, FaultKind::TokenLoss];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::CrossIncarnation => "cross_incarnation",
            FaultKind::OutlivesTakeover => "outlives_takeover",
            FaultKind::FaultsRemain => "faults_remain",
            FaultKind::PowerLoss => "power_loss",
            FaultKind::PartialFanout => "partial_fanout",
            FaultKind::Pause => "pause",
            FaultKind::LearnerSkip => "learner_skip",
            FaultKind::Ghost => "ghost",
            FaultKind::PartialConnectivity => "partial_connectivity",
            FaultKind::DiskError => "disk_error",
            FaultKind::TornUnsynced => "torn_unsynced",
            FaultKind::WipedDir => "wiped_dir",
            FaultKind::AmnesicBeyondF => "amnesic_beyond_f",
            FaultKind::LeaseReads => "lease_reads",
            FaultKind::NoPreVote => "no_pre_vote",
            FaultKind::NoCheckQuorum => "no_check_quorum",
            FaultKind::DataLaneCut => "data_lane_cut",
            FaultKind::TokenLoss => "token_loss",
            FaultKind::EagerTransfer => "eager_transfer",
            FaultKind::ReconfigAmnesic => "reconfig_amnesic",
            FaultKind::ReconfigPowerLoss => "reconfig_power_loss",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How often each [`FaultKind`] happened.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    counts: [u64; FaultKind::ALL.len()],
}

impl FaultCounts {
    pub fn add(&mut self, kind: FaultKind, n: u64) {
        self.counts[kind.index()] += n;
    }

    pub fn get(&self, kind: FaultKind) -> u64 {
        self.counts[kind.index()]
    }

    pub fn merge(&mut self, other: &FaultCounts) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
    }

    /// The kinds of `expected` that never happened.
    pub fn missing(&self, expected: &[FaultKind]) -> Vec<FaultKind> {
        expected
            .iter()
            .copied()
            .filter(|&k| self.get(k) == 0)
            .collect()
    }

    /// `{"cross_incarnation":3,...}`, every kind in [`FaultKind::ALL`] order.
    pub fn to_json(&self) -> String {
        let fields: Vec<String> = FaultKind::ALL
            .iter()
            .map(|k| format!("\"{}\":{}", k.name(), self.get(*k)))
            .collect();
        format!("{{{}}}", fields.join(","))
    }
}

impl fmt::Debug for FaultCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut m = f.debug_map();
        for k in FaultKind::ALL {
            m.entry(&k.name(), &self.get(k));
        }
        m.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_merge_and_print_every_kind() {
        let mut a = FaultCounts::default();
        a.add(FaultKind::Pause, 2);
        let mut b = FaultCounts::default();
        b.add(FaultKind::Pause, 1);
        b.add(FaultKind::LearnerSkip, 4);
        a.merge(&b);
        assert_eq!(a.get(FaultKind::Pause), 3);
        assert_eq!(
            a.missing(&[FaultKind::Pause, FaultKind::PowerLoss]),
            vec![FaultKind::PowerLoss]
        );
        let json = a.to_json();
        for k in FaultKind::ALL {
            assert!(json.contains(&format!("\"{}\":", k.name())), "{json}");
        }
        assert!(json.contains("\"learner_skip\":4"), "{json}");
    }
}
