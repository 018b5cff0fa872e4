//! Snapshots and trimming for Ring Paxos (issue 4): the rules shared with U-Ring Paxos
//! (`ring/snapshot.rs`, whose module comment has the whole argument), run by the same
//! functions (`take_snapshot_of`, `apply_snapshot_to`, `behind_trim_point_in`,
//! `on_chunk_in`, `install_in`, `fetch_tick_in`, `SnapshotState::trim_point`, `trim_acceptor`) on
//! Ring Paxos' state and messages; this file only wires them to it.
//!
//! * A learner's snapshot is its application state plus the learner's de-duplication
//!   memory; every heartbeat carries the sender's `snapshot_upto`.
//! * The leading coordinator computes the trim point (one past what a quorum of learners'
//!   snapshots cover) and puts it in its heartbeats as `trim_below`; an acceptor trims below
//!   it when the heartbeat comes from the coordinator it believes in. Everything below is
//!   decided and delivered by a quorum of learners, so no phase 1 needs those votes: a
//!   `Phase1b` reports the acceptor's log start through `decided_upto`, and a `Decided`
//!   answer carries it as `log_start`.
//! * A learner that every live acceptor answers with a log start above the instance it
//!   needs fetches a covering snapshot from a peer learner in chunks and installs it
//!   (`Outbox::installs`), then retrieves the rest from the log. Without snapshots
//!   (`RingPaxosConfig::learner_snapshots` off) it skips, as before.

use super::messages::Message;
use super::{Out, RingPaxos};
use crate::protocol::Snapshot;
use crate::ring::snapshot::{
    apply_snapshot_to, behind_trim_point_in, fetch_tick_in, install_in, on_chunk_in,
    take_snapshot_of,
};
use crate::snapshot_transfer::{SnapshotChunk, SnapshotFetch};
use crate::types::Instance;
use bytes::Bytes;

impl RingPaxos {
    pub(crate) fn take_snapshot_here(&mut self, app: Bytes) -> Result<Snapshot, String> {
        if !self.node.learn.deliver {
            return Err(format!(
                "node {} is not a learner of this group",
                self.node.me
            ));
        }
        Ok(take_snapshot_of(&self.node.learn, &mut self.node.snap, app))
    }

    pub(crate) fn restore_snapshot_here(&mut self, snap: &Snapshot) -> Result<(), String> {
        if !self.node.learn.deliver {
            return Err(format!(
                "node {} is not a learner of this group",
                self.node.me
            ));
        }
        if self.node.learn.delivered_upto() > 0 {
            return Err("a snapshot is restored before the learner delivers anything".into());
        }
        apply_snapshot_to(
            &mut self.node.learn,
            &mut self.node.snap,
            snap,
            self.node.now,
        )
    }

    /// Every live acceptor answered that instance `next` lies below its log start (the
    /// lowest of them: `floor`): fetch a snapshot covering `floor - 1` from a peer learner,
    /// or skip where this node has no state to install or the learners take no snapshots.
    pub(crate) fn behind_trim_point(&mut self, next: Instance, floor: Instance, out: &mut Out) {
        let candidates: Vec<_> = (0..self.cfg.members.len())
            .filter(|&p| {
                p != self.node.pos
                    && self.cfg.members[p].roles.learner
                    && self.node.view.alive(p, self.node.now)
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
        // Installed: go on from the log at once.
        if install_in(
            &mut self.node.learn,
            &mut self.node.snap,
            snap,
            self.node.now,
            out,
        ) && self.node.learn.behind()
        {
            self.send_retrieve(out);
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

    pub(crate) fn on_snapshot_report(&mut self, from_pos: usize, upto: Instance, class: u64) {
        self.node.snap.report(from_pos, upto, class);
    }

    /// The leading coordinator's trim point (`SnapshotState::trim_point`); 0 when not
    /// leading.
    pub(crate) fn trim_point(&self) -> Instance {
        self.node
            .trim_point(&self.cfg.members, self.coord.is_leading(), || {
                self.mutated(crate::mutation::Mutation::TrimPastQuorum)
            })
    }
}
