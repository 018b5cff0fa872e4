//! Snapshots and trimming (issue 4; URingPaxos' `Safe` and `Trim`; seed 000 §3.2.3 and §5.2
//! name the problem: learners relearned from instance 1 and acceptors' logs grew without
//! bound).
//!
//! * A learner's application takes a snapshot (its state after every instance delivered so
//!   far); [`URing::take_snapshot`] adds the learner's de-duplication memory, so a learner
//!   restarted from it ([`URing::restore_snapshot`]) skips the same duplicate batches as
//!   everyone else, and the node persists it.
//! * Every heartbeat carries the sender's latest `snapshot_upto`. The leading coordinator
//!   keeps the latest report of every learner and computes the trim point T: the minimum
//!   over a quorum of learners (the highest point that a majority of learners' snapshots
//!   cover, see `trim_point`). Its heartbeats carry `trim_below = T + 1`.
//! * An acceptor trims its store below `trim_below` when the heartbeat comes from the
//!   coordinator it believes in. Everything below is decided (a learner delivered it before
//!   snapshotting), so no phase 1 needs those votes: acceptors answer with their log start,
//!   and coordinators treat what lies below as decided.
//! * A learner that falls behind the trim point (every live acceptor answers its retrieve
//!   with a log start above the instance it needs) fetches the snapshot of a peer learner
//!   whose report covers the gap, in chunks (`crate::snapshot_transfer`), installs it
//!   (`Outbox::installs`: the application takes the state, the driver persists it) and
//!   goes on retrieving from the log after it.
//! * In a ring whose learners take no snapshots (`RingConfig::learner_snapshots` off: the
//!   log start moved because an in-memory store's bounded window slid past a restarted
//!   learner), and for a node that only relays or counts merge slots (not a learner), there
//!   is nothing to install: the node skips to the log start, reported through
//!   `Outbox::skips`. With snapshots on, a learner never skips: it waits until a live peer
//!   reports a snapshot that covers what it needs. A Multi-Ring ring's learner leaves that
//!   to the merge above it (`LearnerState::composed_snapshots`): its snapshot is of the
//!   merge, standing in every ring at once (`multiring/snapshot.rs`), and heartbeats carry
//!   its class, so that the trim point leaves a peer for each group of learners that
//!   follow the same rings (`quorum_trim_point_by_class`).

use super::learner::LearnerState;
use crate::codec::{Decoder, Encoder};
use crate::event::Event;
use crate::protocol::{Install, Snapshot};
use crate::snapshot_transfer::{
    ChunkOutcome, SnapshotChunk, SnapshotFetch, SnapshotFetcher, SnapshotServer,
};
use crate::types::Instance;
use bytes::Bytes;

/// Fetches of one chunk repeated without an answer before the transfer is given up (and
/// started again, maybe from another peer, by the next retrieve).
const FETCH_RETRIES_MAX: u32 = 3;

#[derive(Debug)]
pub struct SnapshotState {
    /// This learner's latest snapshot covers instances up to here (0: none).
    pub own_upto: Instance,
    /// Per ring position, the latest `snapshot_upto` heard (the coordinator's view).
    pub reported: Vec<Instance>,
    /// Per ring position, the latest `snapshot_class` heard (0 for a single ring).
    pub classes: Vec<u64>,
    /// This learner's own class (0 for a single ring; see `quorum_trim_point_by_class`).
    pub own_class: u64,
    /// This learner's latest snapshot, served to peers in chunks.
    pub server: SnapshotServer,
    /// A transfer from a peer, when this learner is behind the trim point.
    pub fetcher: SnapshotFetcher,
    /// Fetches repeated for the current chunk.
    pub fetch_retries: u32,
    /// The instance this learner last logged waiting for a covering snapshot at.
    pub waiting_logged: Instance,
}

impl SnapshotState {
    pub fn new(members: usize) -> SnapshotState {
        SnapshotState {
            own_upto: 0,
            reported: vec![0; members],
            classes: vec![0; members],
            own_class: 0,
            server: SnapshotServer::default(),
            fetcher: SnapshotFetcher::default(),
            fetch_retries: 0,
            waiting_logged: 0,
        }
    }

    /// A learner at `pos` reported a snapshot up to `upto`, standing for the learners of
    /// `class` (heartbeats carry both).
    pub fn report(&mut self, pos: usize, upto: Instance, class: u64) {
        if let Some(r) = self.reported.get_mut(pos) {
            *r = (*r).max(upto);
        }
        if let Some(c) = self.classes.get_mut(pos) {
            *c = class;
        }
    }

    /// The trim point over the learners at `learners` (this node, at `me`, by its own
    /// snapshot): see [`quorum_trim_point_by_class`].
    pub fn trim_point(&self, me: usize, learners: impl Iterator<Item = usize>) -> Instance {
        let ups: Vec<(Instance, u64)> = learners
            .map(|p| {
                if p == me {
                    (self.own_upto, self.own_class)
                } else {
                    (
                        self.reported.get(p).copied().unwrap_or(0),
                        self.classes.get(p).copied().unwrap_or(0),
                    )
                }
            })
            .collect();
        quorum_trim_point_by_class(&ups)
    }
}

/// The learner's snapshot: the application's state `app` after every instance delivered so
/// far, with the learner's de-duplication memory. Shared by U-Ring Paxos and Ring Paxos,
/// whose learners are the same `LearnerState`.
pub(crate) fn take_snapshot_of(
    learn: &LearnerState,
    snap: &mut SnapshotState,
    app: Bytes,
) -> Snapshot {
    let upto = learn.delivered_upto();
    let mut e = Encoder::new();
    learn.encode_dedup(&mut e);
    let s = Snapshot {
        upto,
        protocol: e.to_bytes(),
        app,
    };
    debug_assert!(upto >= snap.own_upto, "snapshots go forward");
    snap.own_upto = upto;
    snap.server.set_latest(&s);
    s
}

/// Moves the learner to after `s` (restored at start or installed from a peer).
pub(crate) fn apply_snapshot_to(
    learn: &mut LearnerState,
    snap: &mut SnapshotState,
    s: &Snapshot,
    now: crate::types::Micros,
) -> Result<(), String> {
    let mut d = Decoder::new(s.protocol.clone());
    let dedup = super::learner::Dedup::decode(&mut d).map_err(|e| format!("snapshot: {e}"))?;
    d.finish().map_err(|e| format!("snapshot: {e}"))?;
    learn.install(s.upto, dedup);
    learn.last_progress_us = now;
    snap.own_upto = snap.own_upto.max(s.upto);
    snap.server.set_latest(s);
    Ok(())
}

/// The trim point over the learners' snapshot reports `ups`: one past the highest instance
/// that a majority of them cover (URingPaxos' `Safe`), 0 = trim nothing. A learner whose
/// snapshot is older (or that is down) and falls behind it fetches a newer one from a peer;
/// a majority's snapshots cover the trim point, so one of them can serve it.
pub(crate) fn quorum_trim_point(mut ups: Vec<Instance>) -> Instance {
    if ups.is_empty() {
        return 0;
    }
    ups.sort_unstable_by(|a, b| b.cmp(a));
    let quorum = ups.len() / 2 + 1;
    let covered = ups[quorum - 1];
    debug_assert!(
        ups.iter().filter(|&&u| u >= covered).count() >= quorum,
        "a quorum of learners' snapshots covers the trim point"
    );
    if covered == 0 { 0 } else { covered + 1 }
}

/// [`quorum_trim_point`] over every learner's report `(upto, class)`, and over the
/// learners of each class other than 0 apart; the lowest. A single ring's learners are all
/// of class 0: the quorum rule as it was. A Multi-Ring learner can install only the
/// snapshot of a peer that follows the same rings (its state holds those rings' values;
/// `multiring/snapshot.rs`), and reports the rings it follows as its class in each ring it
/// follows: so a quorum of every such group of learners covers the trim point, and one
/// that falls behind finds a peer to install from. With a group of one, the learner's own
/// snapshot covers it (it restarts from it). One that does not follow the ring reports
/// class 0 and takes only the ring's position, from anyone's snapshot.
pub(crate) fn quorum_trim_point_by_class(ups: &[(Instance, u64)]) -> Instance {
    let mut t = quorum_trim_point(ups.iter().map(|&(u, _)| u).collect());
    let mut classes: Vec<u64> = ups.iter().map(|&(_, c)| c).filter(|&c| c != 0).collect();
    classes.sort_unstable();
    classes.dedup();
    for c in classes {
        let of_class = ups
            .iter()
            .filter(|&&(_, k)| k == c)
            .map(|&(u, _)| u)
            .collect();
        t = t.min(quorum_trim_point(of_class));
    }
    t
}

/// The rule for a learner behind the trim point (every live acceptor answered without
/// `next` and one had trimmed past it, the lowest of those log starts `floor`), shared by
/// U-Ring Paxos and Ring Paxos. `candidates`: the other live learners' positions, with
/// their node ids. Skips when this node has no state to install or its group's learners
/// take no snapshots; otherwise fetches a snapshot covering `floor - 1` from the candidate
/// whose report is highest, or waits for one (logged once per instance).
///
/// A learner that skips needs the batches first decided in the instances it skips (bug
/// B3): without them it delivers a batch decided again after them that every learner that
/// delivered the first copy skips. Only live learners deliver from here on, so it needs
/// them up to what the most advanced live learner delivered (`LearnerState::
/// peer_delivered`): where no live learner delivered an instance, every learner skips it
/// alike. Returns the node to ask for that memory, and the range, while it is missing.
pub(crate) fn behind_trim_point_in<M: From<SnapshotFetch>>(
    learn: &mut LearnerState,
    snap: &mut SnapshotState,
    learner_snapshots: bool,
    now: crate::types::Micros,
    candidates: &[(usize, crate::types::NodeId)],
    (next, floor): (Instance, Instance),
    out: &mut crate::protocol::Outbox<M>,
) -> Option<(crate::types::NodeId, Instance, Instance)> {
    debug_assert!(
        next < floor,
        "behind the trim point means below the log start"
    );
    let need = floor - 1;
    if learn.deliver && learn.composed_snapshots {
        // A Multi-Ring learner with snapshots: its application state is the merge's, so the
        // layer above installs one of its own snapshots, which carries this ring's position
        // with every other ring's (`multiring/snapshot.rs`). It never skips: a skip would
        // lose the ring's slot count, and the merge with it.
        learn.behind_trim = Some((next, floor));
        return None;
    }
    let has_state = learn.has_state();
    if has_state && !learner_snapshots {
        // Every batch first decided in `[next, floor)` must be known before the skip: which
        // learners delivered which of those instances cannot be told reliably here (their
        // reports lag, and one held in the network, or flushed to a restarted node, is
        // older still; found by the learner_skip mix, uring seed 58). The acceptors that
        // trimmed past `next` vouch for the keys they held (`AcceptorStore::evicted_keys`),
        // a learner for what it delivered; while none reaches the floor, the learner whose
        // last report is highest is asked.
        let ahead = candidates
            .iter()
            .map(|&(p, n)| (learn.peer_delivered.get(p).copied().flatten(), n))
            .max_by_key(|&(d, _)| d);
        let to = floor;
        if !learn.skip_memory_covers(to) {
            if snap.waiting_logged != next {
                snap.waiting_logged = next;
                out.events.push(Event::SkipMemoryAsked { next, to });
            }
            return ahead.map(|(_, node)| (node, next, to));
        }
    }
    if !has_state || !learner_snapshots {
        // Only what nobody can serve: decisions already here after `next` are delivered
        // (jumping to the log start dropped them: if every learner did, an acknowledged
        // value was lost; found by the simulator's learner_skip mix, uring seed 18).
        let floor = learn.first_known_from(next).map_or(floor, |k| k.min(floor));
        out.events.push(Event::LearnerSkips {
            next,
            floor,
            snapshots_off: has_state,
        });
        out.skips.push(crate::protocol::Skip {
            group: crate::types::GroupId(0),
            from: next,
            to: floor,
            position: out.deliveries.len(),
        });
        learn.jump_to(floor);
        return None;
    }
    if snap.fetcher.in_progress() {
        return None;
    }
    let source = candidates
        .iter()
        .copied()
        .filter(|&(p, _)| snap.reported[p] >= need)
        .max_by_key(|&(p, _)| snap.reported[p]);
    let Some((p, node)) = source else {
        if snap.waiting_logged != next {
            snap.waiting_logged = next;
            out.events.push(Event::SnapshotAwaited { next, need });
        }
        return None;
    };
    out.events.push(Event::SnapshotFetching {
        next,
        floor,
        node,
        upto: snap.reported[p],
    });
    snap.fetch_retries = 0;
    let fetch = snap.fetcher.start(now, node, need);
    out.send(node, M::from(fetch));
    None
}

/// A chunk of a peer's snapshot arrived: ask for the next, or return the whole snapshot.
pub(crate) fn on_chunk_in<M: From<SnapshotFetch>>(
    snap: &mut SnapshotState,
    now: crate::types::Micros,
    from: crate::types::NodeId,
    m: SnapshotChunk,
    out: &mut crate::protocol::Outbox<M>,
) -> Option<Snapshot> {
    match snap.fetcher.on_chunk(now, from, m) {
        ChunkOutcome::Ignored => None,
        ChunkOutcome::Next(fetch) => {
            snap.fetch_retries = 0;
            out.send(from, M::from(fetch));
            None
        }
        ChunkOutcome::Abandoned(why) => {
            out.events.push(Event::SnapshotTransferGivenUp {
                why: why.to_string(),
            });
            None
        }
        ChunkOutcome::Complete(s) => Some(s),
    }
}

/// A snapshot fetched from a peer arrived whole: the learner moves past it and the
/// application takes its state (`Outbox::installs`), before any later delivery. False if
/// it was not installed (the learner caught up from the log meanwhile, or it is bad).
pub(crate) fn install_in<M>(
    learn: &mut LearnerState,
    snap: &mut SnapshotState,
    s: Snapshot,
    now: crate::types::Micros,
    out: &mut crate::protocol::Outbox<M>,
) -> bool {
    if s.upto < learn.next {
        // The learner caught up from the log meanwhile (an acceptor still had it).
        out.events.push(Event::SnapshotStale {
            upto: s.upto,
            delivered: learn.delivered_upto(),
        });
        return false;
    }
    if let Err(e) = apply_snapshot_to(learn, snap, &s, now) {
        out.events.push(Event::SnapshotRefused {
            upto: s.upto,
            detail: e.to_string(),
        });
        return false;
    }
    out.events.push(Event::SnapshotInstalled {
        upto: s.upto,
        app_bytes: s.app.len(),
    });
    out.installs.push(Install {
        snapshot: s,
        position: out.deliveries.len(),
    });
    true
}

/// A transfer whose chunk did not come within `timeout_us`: ask again, and give up after
/// a few tries.
pub(crate) fn fetch_tick_in<M: From<SnapshotFetch>>(
    snap: &mut SnapshotState,
    now: crate::types::Micros,
    timeout_us: crate::types::Micros,
    out: &mut crate::protocol::Outbox<M>,
) {
    let Some(t) = snap.fetcher.transfer.as_ref() else {
        return;
    };
    if now < t.last_progress_us + timeout_us {
        return;
    }
    if snap.fetch_retries >= FETCH_RETRIES_MAX {
        snap.fetcher.abandon();
        out.events.push(Event::SnapshotTransferGivenUp {
            why: "the peer stopped answering".into(),
        });
        return;
    }
    snap.fetch_retries += 1;
    if let Some((peer, fetch)) = snap.fetcher.retry(now) {
        out.send(peer, M::from(fetch));
    }
}

/// An acceptor trims below `below` (the coordinator it believes in said so).
pub(crate) fn trim_acceptor<M>(
    acc: Option<&mut super::acceptor::AcceptorState>,
    below: Instance,
    out: &mut crate::protocol::Outbox<M>,
) {
    let Some(acc) = acc else {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trim_point_is_covered_by_a_quorum_of_every_class_of_learners() {
        // One class (a single ring's learners, class 0): the quorum rule.
        assert_eq!(quorum_trim_point_by_class(&[(10, 0), (20, 0), (30, 0)]), 21);
        assert_eq!(quorum_trim_point(vec![10, 20, 30]), 21);
        // Five learners: a quorum of all covers 30, but the two that follow one set of rings
        // (class 7) are at 10 and 40: both must cover, so the point stays at 11.
        let ups = [(40, 7), (10, 7), (30, 1), (35, 1), (50, 0)];
        assert_eq!(quorum_trim_point_by_class(&ups), 11);
        // A class of one: its own snapshot covers it.
        assert_eq!(
            quorum_trim_point_by_class(&[(5, 3), (50, 1), (60, 1), (70, 1)]),
            6
        );
        // A class whose learners took no snapshot yet: nothing is trimmed.
        assert_eq!(quorum_trim_point_by_class(&[(0, 9), (50, 1), (60, 1)]), 0);
    }
}
