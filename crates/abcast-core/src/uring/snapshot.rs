//! Snapshots and trimming (issue 4; URingPaxos' `Safe` and `Trim`; seed 000 §3.2.3 and §5.2
//! name the problem: learners relearned from instance 1 and acceptors' logs grew without
//! bound).
//!
//! * A learner's application takes a snapshot (its state after every instance delivered so
//!   far); [`URing::take_snapshot`] adds the learner's de-duplication memory, so a learner
//!   restarted from it ([`URing::restore_snapshot`]) skips the same duplicate batches as
//!   everyone else, and the node persists it.
//! * Every heartbeat carries the sender's latest `snapshot_upto`. The leading coordinator
//!   keeps the latest report of every learner and computes the trim point T: the lowest
//!   snapshot over every learner (not yet over a majority: see `trim_point`). Its
//!   heartbeats carry `trim_below = T + 1`.
//! * An acceptor trims its store below `trim_below` when the heartbeat comes from the
//!   coordinator it believes in. Everything below is decided (a learner delivered it before
//!   snapshotting), so no phase 1 needs those votes: acceptors answer with their log start,
//!   and coordinators treat what lies below as decided.
//! * A learner that falls behind the trim point today skips to the acceptors' log start,
//!   reported through `Outbox::skips` (the pre-snapshot behaviour); installing a snapshot
//!   transferred from a peer in chunks is the next step (issue 4, left).

use super::{Out, URing};
use crate::codec::{Decoder, Encoder};
use crate::protocol::Snapshot;
use crate::types::Instance;
use bytes::Bytes;

#[derive(Debug)]
pub struct SnapshotState {
    /// This learner's latest snapshot covers instances up to here (0: none).
    pub own_upto: Instance,
    /// Per ring position, the latest `snapshot_upto` heard (the coordinator's view).
    pub reported: Vec<Instance>,
}

impl SnapshotState {
    pub fn new(members: usize) -> SnapshotState {
        SnapshotState {
            own_upto: 0,
            reported: vec![0; members],
        }
    }
}

impl URing {
    pub(crate) fn take_snapshot_here(&mut self, app: Bytes) -> Result<Snapshot, String> {
        if !self.learn.deliver {
            return Err(format!("node {} is not a learner of this ring", self.me));
        }
        let upto = self.learn.delivered_upto();
        let mut e = Encoder::new();
        self.learn.encode_dedup(&mut e);
        let snap = Snapshot {
            upto,
            protocol: e.to_bytes(),
            app,
        };
        debug_assert!(upto >= self.snap.own_upto, "snapshots go forward");
        self.snap.own_upto = upto;
        Ok(snap)
    }

    pub(crate) fn restore_snapshot_here(&mut self, snap: &Snapshot) -> Result<(), String> {
        if !self.learn.deliver {
            return Err(format!("node {} is not a learner of this ring", self.me));
        }
        if self.learn.delivered_upto() > 0 {
            return Err("a snapshot is restored before the learner delivers anything".into());
        }
        let mut d = Decoder::new(snap.protocol.clone());
        let dedup = super::learner::Dedup::decode(&mut d).map_err(|e| format!("snapshot: {e}"))?;
        d.finish().map_err(|e| format!("snapshot: {e}"))?;
        self.learn.restore(snap.upto, dedup);
        self.snap.own_upto = snap.upto;
        self.cluster_delivered_max = self.cluster_delivered_max.max(snap.upto);
        Ok(())
    }

    /// The acceptor's log start (everything below is trimmed), if this node is an acceptor.
    pub fn acceptor_log_start(&self) -> Option<Instance> {
        self.acc.as_ref().map(|a| a.store.log_start())
    }

    pub(crate) fn on_snapshot_report(&mut self, from_pos: usize, upto: Instance) {
        if let Some(r) = self.snap.reported.get_mut(from_pos) {
            *r = (*r).max(upto);
        }
    }

    /// The leading coordinator's trim point: below the lowest snapshot of every learner
    /// (0 = trim nothing).
    ///
    /// Not yet the "minimum over a quorum of learners": trimming there leaves the
    /// slowest learners behind the trim point, and until they can install a snapshot fetched
    /// from a peer they would skip instances. The SIGKILL-all test showed it: a learner whose
    /// snapshot was older than the majority's restarted behind the acceptors' log start and
    /// skipped. With every learner's snapshot as the bound, a learner that is down holds the
    /// trim back (its log grows) instead of losing deliveries.
    pub(crate) fn trim_point(&self) -> Instance {
        if !self.coord.is_leading() {
            return 0;
        }
        let ups: Vec<Instance> = self
            .cfg
            .members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.roles.learner)
            .map(|(p, _)| {
                if p == self.pos {
                    self.snap.own_upto
                } else {
                    self.snap.reported[p]
                }
            })
            .collect();
        let covered = ups.iter().copied().min().unwrap_or(0);
        if covered == 0 { 0 } else { covered + 1 }
    }

    /// An acceptor trims below what the coordinator it believes in says.
    pub(crate) fn on_trim(&mut self, from_pos: usize, below: Instance, out: &mut Out) {
        if self.coordinator_pos() != Some(from_pos) {
            return;
        }
        let Some(acc) = self.acc.as_mut() else {
            return;
        };
        if below > acc.store.log_start() {
            // Silent: it happens with every heartbeat while the trim point moves.
            acc.store.trim(below);
            // A durable store deletes the segments the trim freed when it next syncs; an
            // acceptor outside the phase 2 quorum may have no vote to sync for a long time.
            out.needs_sync = true;
        }
    }
}
