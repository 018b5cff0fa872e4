//! Snapshots and trimming for U-Ring Paxos (issue 4): the rules shared with Ring Paxos
//! live in `ring/snapshot.rs` (whose module comment has the whole argument); this file wires
//! them to U-Ring Paxos' state and messages.

use super::messages::Message;
use super::{Out, URing};
use crate::protocol::Snapshot;
use crate::ring::snapshot::{
    apply_snapshot_to, behind_trim_point_in, fetch_tick_in, install_in, on_chunk_in,
    take_snapshot_of,
};
use crate::snapshot_transfer::{SnapshotChunk, SnapshotFetch};
use crate::types::Instance;
use bytes::Bytes;

impl URing {
    pub(crate) fn take_snapshot_here(&mut self, app: Bytes) -> Result<Snapshot, String> {
        if !self.node.learn.deliver {
            return Err(format!(
                "node {} is not a learner of this ring",
                self.node.me
            ));
        }
        Ok(take_snapshot_of(&self.node.learn, &mut self.node.snap, app))
    }

    pub(crate) fn restore_snapshot_here(&mut self, snap: &Snapshot) -> Result<(), String> {
        if !self.node.learn.deliver {
            return Err(format!(
                "node {} is not a learner of this ring",
                self.node.me
            ));
        }
        if self.node.learn.delivered_upto() > 0 {
            return Err("a snapshot is restored before the learner delivers anything".into());
        }
        self.apply_snapshot(snap)?;
        Ok(())
    }

    /// Moves the learner to after `snap` (restored at start or installed from a peer).
    fn apply_snapshot(&mut self, snap: &Snapshot) -> Result<(), String> {
        apply_snapshot_to(
            &mut self.node.learn,
            &mut self.node.snap,
            snap,
            self.node.now,
        )?;
        self.cluster_delivered_max = self.cluster_delivered_max.max(snap.upto);
        Ok(())
    }

    /// Every live acceptor answered that instance `next` lies below its log start (the
    /// lowest of them: `floor`). A learner of a ring whose learners take snapshots fetches
    /// one that covers `floor - 1` from a peer; see the module comment for when it skips.
    ///
    /// Whether to skip is configuration (`RingConfig::learner_snapshots`), not inferred
    /// from peers' snapshot reports: a learner that just restarted has heard none yet, and
    /// its young view may hold one acceptor only (found by the simulator, durable
    /// `uring-snapshots` seed 25: a restarted learner skipped 102..427 that way).
    pub(crate) fn behind_trim_point(&mut self, next: Instance, floor: Instance, out: &mut Out) {
        let alive = self.node.view.alive_positions(self.node.now);
        let candidates: Vec<_> = (0..self.cfg.members.len())
            .filter(|&p| {
                p != self.node.pos && self.cfg.members[p].roles.learner && alive.contains(&p)
            })
            .map(|p| (p, self.node_at(p)))
            .collect();
        let ask = behind_trim_point_in(
            &mut self.node.learn,
            &mut self.node.snap,
            self.cfg.learner_snapshots,
            self.node.now,
            &candidates,
            (next, floor),
            out,
        );
        if let Some((node, from, to)) = ask
            && (self.node.learn.memory_asked_us == 0
                || self.node.now >= self.node.learn.memory_asked_us + self.cfg.retrieve_timeout_us)
        {
            self.node.learn.memory_asked_us = self.node.now.max(1);
            out.send(
                node,
                Message::Retrieve(super::messages::Retrieve { from, to }),
            );
        }
        // A skip moves this node's own acceptor window with the learner: what it skipped is
        // decided and gone from every other window, and an acceptor window keeps every
        // instance it knows nothing of (`MemoryStore`).
        if self.node.learn.next > next
            && let Some(acc) = self.node.acc.as_mut()
            && acc.store.log_start() < self.node.learn.next
            && !acc.store.is_durable()
        {
            acc.store.trim(self.node.learn.next);
        }
    }

    pub(crate) fn on_snapshot_fetch(&mut self, from_pos: usize, m: SnapshotFetch, out: &mut Out) {
        if !self.node.learn.deliver {
            return;
        }
        let chunk = self.node.snap.server.serve(self.node.now, &m);
        out.send(self.node_at(from_pos), Message::SnapshotChunk(chunk));
    }

    pub(crate) fn on_snapshot_chunk(&mut self, from_pos: usize, m: SnapshotChunk, out: &mut Out) {
        let from = self.node_at(from_pos);
        let Some(snap) = on_chunk_in(&mut self.node.snap, self.node.now, from, m, out) else {
            return;
        };
        if install_in(
            &mut self.node.learn,
            &mut self.node.snap,
            snap,
            self.node.now,
            out,
        ) {
            self.cluster_delivered_max = self.cluster_delivered_max.max(self.node.snap.own_upto);
            // Go on from the log at once.
            if self.node.learn.behind() {
                self.send_retrieve(out);
            }
        }
    }

    /// A transfer whose chunk did not come: ask again, and give up after a few tries.
    pub(crate) fn snapshot_fetch_tick(&mut self, out: &mut Out) {
        fetch_tick_in(
            &mut self.node.snap,
            self.node.now,
            self.cfg.retrieve_timeout_us,
            out,
        );
    }

    /// The acceptor's log start (everything below is trimmed), if this node is an acceptor.
    pub fn acceptor_log_start(&self) -> Option<Instance> {
        self.node.acc.as_ref().map(|a| a.store.log_start())
    }

    pub(crate) fn on_snapshot_report(&mut self, from_pos: usize, upto: Instance, class: u64) {
        self.node.snap.report(from_pos, upto, class);
    }

    /// The leading coordinator's trim point: below the minimum over a quorum of learners
    /// (URingPaxos' `Safe`, see [`quorum_trim_point`]); 0 when not leading.
    pub(crate) fn trim_point(&self) -> Instance {
        self.node
            .trim_point(&self.cfg.members, self.coord.is_leading(), || {
                self.mutated(crate::mutation::Mutation::TrimPastQuorum)
            })
    }
}
