//! Snapshots and trimming for Ring Paxos (issue 4), the rules of U-Ring Paxos
//! (`uring/snapshot.rs`, whose module comment has the whole argument) on Ring Paxos'
//! messages; the learner state, the snapshot contents and the trim point are shared code
//! (`uring::snapshot::{take_snapshot_of, apply_snapshot_to, quorum_trim_point}`).
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
use crate::protocol::{Install, Snapshot};
use crate::snapshot_transfer::{ChunkOutcome, SnapshotChunk, SnapshotFetch};
use crate::types::Instance;
use crate::uring::snapshot::{apply_snapshot_to, quorum_trim_point, take_snapshot_of};
use bytes::Bytes;

/// Fetches of one chunk repeated without an answer before the transfer is given up (and
/// started again, maybe from another peer, by the next retrieve).
const FETCH_RETRIES_MAX: u32 = 3;

impl RingPaxos {
    pub(crate) fn take_snapshot_here(&mut self, app: Bytes) -> Result<Snapshot, String> {
        if !self.learn.deliver {
            return Err(format!("node {} is not a learner of this group", self.me));
        }
        Ok(take_snapshot_of(&self.learn, &mut self.snap, app))
    }

    pub(crate) fn restore_snapshot_here(&mut self, snap: &Snapshot) -> Result<(), String> {
        if !self.learn.deliver {
            return Err(format!("node {} is not a learner of this group", self.me));
        }
        if self.learn.delivered_upto() > 0 {
            return Err("a snapshot is restored before the learner delivers anything".into());
        }
        apply_snapshot_to(&mut self.learn, &mut self.snap, snap, self.now)
    }

    /// Every live acceptor answered that instance `next` lies below its log start (the
    /// lowest of them: `floor`): fetch a snapshot covering `floor - 1` from a peer learner,
    /// or skip where this node has no state to install or the learners take no snapshots.
    pub(crate) fn behind_trim_point(&mut self, next: Instance, floor: Instance, out: &mut Out) {
        debug_assert!(
            next < floor,
            "behind the trim point means below the log start"
        );
        let need = floor - 1;
        let has_state = self.learn.deliver && !self.learn.report_passes;
        if !has_state || !self.cfg.learner_snapshots {
            out.events.push(format!(
                "learner skips instances {next}..{floor}: trimmed at every acceptor, and {}",
                if has_state {
                    "this group's learners take no snapshots"
                } else {
                    "this node has no application state to install"
                }
            ));
            out.skips.push((next, floor));
            self.learn.jump_to(floor);
            return;
        }
        if self.snap.fetcher.in_progress() {
            return;
        }
        let source = (0..self.cfg.members.len())
            .filter(|&p| {
                p != self.pos
                    && self.cfg.members[p].roles.learner
                    && self.view.alive(p, self.now)
                    && self.snap.reported[p] >= need
            })
            .max_by_key(|&p| self.snap.reported[p]);
        let Some(p) = source else {
            if self.snap.waiting_logged != next {
                self.snap.waiting_logged = next;
                out.events.push(format!(
                    "learner behind the trim point at {next}: waits for a live peer whose snapshot covers {need}"
                ));
            }
            return;
        };
        out.events.push(format!(
            "learner behind the trim point at {next} (log starts at {floor}): fetching the snapshot of node {} (up to {})",
            self.node_at(p),
            self.snap.reported[p]
        ));
        self.snap.fetch_retries = 0;
        let fetch = self.snap.fetcher.start(self.now, self.node_at(p), need);
        out.send(self.node_at(p), Message::SnapshotFetch(fetch));
    }

    pub(crate) fn on_snapshot_fetch(&mut self, from_pos: usize, m: SnapshotFetch, out: &mut Out) {
        if !self.learn.deliver {
            return;
        }
        let chunk = self.snap.server.serve(self.now, &m);
        out.send(self.node_at(from_pos), Message::SnapshotChunk(chunk));
    }

    pub(crate) fn on_snapshot_chunk(&mut self, from_pos: usize, m: SnapshotChunk, out: &mut Out) {
        let from = self.node_at(from_pos);
        match self.snap.fetcher.on_chunk(self.now, from, m) {
            ChunkOutcome::Ignored => {}
            ChunkOutcome::Next(fetch) => {
                self.snap.fetch_retries = 0;
                out.send(from, Message::SnapshotFetch(fetch));
            }
            ChunkOutcome::Abandoned(why) => {
                out.events
                    .push(format!("snapshot transfer given up: {why}"));
            }
            ChunkOutcome::Complete(snap) => self.install_snapshot(snap, out),
        }
    }

    /// A snapshot fetched from a peer arrived whole: the learner moves past it and the
    /// application takes its state (`Outbox::installs`), before any later delivery.
    fn install_snapshot(&mut self, snap: Snapshot, out: &mut Out) {
        if snap.upto < self.learn.next {
            out.events.push(format!(
                "snapshot up to {} not installed: the learner already delivered up to {}",
                snap.upto,
                self.learn.delivered_upto()
            ));
            return;
        }
        if let Err(e) = apply_snapshot_to(&mut self.learn, &mut self.snap, &snap, self.now) {
            out.events
                .push(format!("snapshot up to {} refused: {e}", snap.upto));
            return;
        }
        out.events.push(format!(
            "learner installed a peer's snapshot up to {} ({} bytes of application state)",
            snap.upto,
            snap.app.len()
        ));
        out.installs.push(Install {
            snapshot: snap,
            position: out.deliveries.len(),
        });
        if self.learn.behind() {
            self.send_retrieve(out);
        }
    }

    /// A transfer whose chunk did not come: ask again, and give up after a few tries.
    pub(crate) fn snapshot_fetch_tick(&mut self, out: &mut Out) {
        let Some(t) = self.snap.fetcher.transfer.as_ref() else {
            return;
        };
        if self.now < t.last_progress_us + self.cfg.retrieve_timeout_us {
            return;
        }
        if self.snap.fetch_retries >= FETCH_RETRIES_MAX {
            self.snap.fetcher.abandon();
            out.events
                .push("snapshot transfer given up: the peer stopped answering".into());
            return;
        }
        self.snap.fetch_retries += 1;
        if let Some((peer, fetch)) = self.snap.fetcher.retry(self.now) {
            out.send(peer, Message::SnapshotFetch(fetch));
        }
    }

    pub(crate) fn on_snapshot_report(&mut self, from_pos: usize, upto: Instance) {
        if let Some(r) = self.snap.reported.get_mut(from_pos) {
            *r = (*r).max(upto);
        }
    }

    /// The leading coordinator's trim point over every learner's latest report (its own
    /// snapshot for itself), 0 when not leading or with no quorum of snapshots.
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
        quorum_trim_point(ups)
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
            acc.store.trim(below);
            // A durable store deletes the segments the trim freed when it next syncs; a
            // spare acceptor outside the ring may have no vote to sync for a long time.
            out.needs_sync = true;
        }
    }
}
