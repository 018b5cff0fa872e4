//! Snapshots, compaction of the decided prefix, and snapshot transfer for Sequence Paxos.
//! Seed 001 has no compaction (its logs grow for the length of an experiment); the rules
//! follow OmniPaxos (`snapshot(idx, local_only = true)`, and `AcceptSync` carrying a
//! `SnapshotType` when the leader compacted what a follower needs):
//!
//! | rule | source | code |
//! | --- | --- | --- |
//! | a node compacts its own decided and delivered prefix, never an undecided entry | OmniPaxos `snapshot(idx, local_only)`: `idx <= decided_idx` | [`SeqPaxos::take_snapshot_here`] |
//! | the snapshot holds the application's state, the de-duplication memory, the configuration (id, members, `base`) in effect there, and the ballot of its last entry | `deliver` uses them (ours) | [`SnapState`] |
//! | a restart starts after its snapshot; the store's own, if newer, goes to the application as an install | ours (the driver's file and the store's record are written apart) | [`SeqPaxos::restore_snapshot_here`], `SeqPaxos::new` |
//! | wherever a node would send decided entries it compacted (the leader's `AcceptSync`, `Accept`, its catch-up push; any node's `FetchReq` answer, eager push), it offers its snapshot instead | OmniPaxos `AcceptSync` with a snapshot | [`SeqPaxos::offer_snapshot`], callers in `leader.rs`, `reconfig.rs` |
//! | the receiver pulls it in chunks of at most `max_message_bytes` | `snapshot_transfer.rs` (shared with the rings) | [`SeqPaxos::on_snapshot_offer`], `on_snapshot_chunk` |
//! | installing replaces the decided prefix and keeps every accepted entry after it, with `n_a` unchanged | appendix B: an acceptor never forgets a vote outside an `AcceptSync` of a round it promised | [`SeqPaxos::install`] (`LogStore::set_snapshot` keeps the suffix) |
//! | a snapshot of a later configuration moves the node into it, as delivering the stop-sign would have | §2.4.3 | [`SeqPaxos::install`] → `enter_next` |
//!
//! Why keeping the suffix is safe: a chosen prefix is a prefix of every sequence accepted in
//! the choosing round or later, so a log whose `n_a` is at or above that round already holds
//! it; a log whose `n_a` is below never wins an adoption against a majority that includes
//! one of the choosing round's acceptors. Either way the log (snapshot, then the kept
//! suffix) is one that the store could have held, and no vote is forgotten.
//!
//! Invariants asserted: a snapshot never covers an undecided entry; an install never moves
//! the decided or delivered index back; the next delivery after an install is the entry
//! after it (`deliver`'s strictly increasing order).

use super::{Out, Role, SeqPaxos};
use crate::codec::{Decoder, Encoder};
use crate::config::Configuration;
use crate::dedup::Dedup;
use crate::event::Event;
use crate::protocol::{Install, Snapshot};
use crate::replog::{get_configuration, put_configuration};
use crate::snapshot_transfer::{ChunkOutcome, SnapshotChunk, SnapshotFetch};
use crate::storage::LogSnapshot;
use crate::types::{Ballot, NodeId};
use crate::wire::{get_ballot, put_ballot};
use bytes::Bytes;

/// The version byte of [`SnapState`]'s encoding.
const SNAP_STATE_VERSION: u8 = 1;

/// Fetches of one chunk repeated without an answer before the transfer is given up (the
/// next offer starts another).
const FETCH_RETRIES_MAX: u32 = 3;

/// Bytes a `SnapshotChunk` adds to its data (its fields and the message's own framing).
const CHUNK_OVERHEAD_BYTES: usize = 64;

/// Sequence Paxos' part of a snapshot (`Snapshot::protocol`).
#[derive(Debug)]
pub(crate) struct SnapState {
    /// The ballot of the last entry covered, as the taker's log held it.
    pub last_ballot: Ballot,
    /// The configuration the taker was in, and the index of the stop-sign that started it
    /// (`base`, at or below the snapshot's `upto`).
    pub config: Configuration,
    pub base: u64,
    pub dedup: Dedup,
}

impl SnapState {
    pub fn encode(&self) -> Bytes {
        let mut e = Encoder::new();
        e.put_u8(SNAP_STATE_VERSION);
        put_ballot(&mut e, self.last_ballot);
        put_configuration(&mut e, &self.config);
        e.put_u64(self.base);
        self.dedup.encode(&mut e);
        e.to_bytes()
    }

    pub fn decode(bytes: &Bytes, upto: u64) -> Result<SnapState, String> {
        let bad = |e: crate::error::DecodeError| format!("Sequence Paxos snapshot state: {e}");
        let mut d = Decoder::new(bytes.clone());
        let version = d.u8("seqpaxos_snapshot.version").map_err(bad)?;
        if version != SNAP_STATE_VERSION {
            return Err(format!(
                "Sequence Paxos snapshot state: version {version}, this build reads \
                 {SNAP_STATE_VERSION}"
            ));
        }
        let last_ballot = get_ballot(&mut d).map_err(bad)?;
        let config = get_configuration(&mut d).map_err(bad)?;
        let base = d.u64("seqpaxos_snapshot.base").map_err(bad)?;
        let dedup = Dedup::decode(&mut d).map_err(bad)?;
        d.finish().map_err(bad)?;
        if base > upto {
            return Err(format!(
                "Sequence Paxos snapshot state: configuration {} starts after entry {base}, \
                 past the snapshot's {upto}",
                config.id
            ));
        }
        config
            .validate()
            .map_err(|e| format!("Sequence Paxos snapshot state: {e}"))?;
        Ok(SnapState {
            last_ballot,
            config,
            base,
            dedup,
        })
    }
}

/// The store's snapshot, read back: the `Snapshot` and its state.
pub(crate) fn read_store_snapshot(ls: &LogSnapshot) -> Result<(Snapshot, SnapState), String> {
    let snap = Snapshot::decode(&ls.data)
        .map_err(|e| format!("the log store's snapshot at entry {}: {e}", ls.index))?;
    if snap.upto != ls.index {
        return Err(format!(
            "the log store's snapshot at entry {} holds a snapshot up to {}",
            ls.index, snap.upto
        ));
    }
    let st = SnapState::decode(&snap.protocol, snap.upto)?;
    Ok((snap, st))
}

impl SeqPaxos {
    /// The index the store's snapshot covers (0: none).
    pub(crate) fn snapshot_index(&self) -> u64 {
        self.store.snapshot().map_or(0, |s| s.index)
    }

    /// Whether entry `from` was compacted into this node's snapshot: decided entries from
    /// there must travel as the snapshot.
    pub(crate) fn compacted(&self, from: u64) -> bool {
        from <= self.snapshot_index()
    }

    /// `Protocol::take_snapshot`: the application's state after every delivered entry, with
    /// the learner's state there; the store keeps it and forgets the entries it covers.
    pub(crate) fn take_snapshot_here(&mut self, app: Bytes) -> Result<Snapshot, String> {
        if self.pending_install.is_some() {
            return Err("the log store's snapshot is not yet handed to the application".into());
        }
        if self.pending_ss.is_some() {
            return Err("a stop-sign is delivered and its configuration not yet entered".into());
        }
        let upto = self.delivered;
        if upto < self.base {
            // A restart re-delivering the previous configuration's entries: a snapshot
            // there would carry a configuration that starts after it.
            return Err(format!(
                "delivered up to {upto}, before this configuration's start ({})",
                self.base
            ));
        }
        let decided = self.store.decided_idx();
        // OmniPaxos: a snapshot only of the decided prefix.
        assert!(
            upto <= decided || self.mutation(crate::mutation::Mutation::SeqPaxosTrimUndecided),
            "{}: a snapshot up to {upto} past the decided index {decided}",
            self.me
        );
        let Some(last_ballot) = self.store.ballot_at(upto) else {
            return Err(format!(
                "entry {upto} is not in the log (first held: {})",
                self.store.first_index()
            ));
        };
        let state = SnapState {
            last_ballot,
            config: self.cfg.configuration(),
            base: self.base,
            dedup: self.dedup.clone(),
        };
        let snap = Snapshot {
            upto,
            protocol: state.encode(),
            app,
        };
        // The broken variant compacts past the decided index: undecided entries go.
        let cut = if self.mutation(crate::mutation::Mutation::SeqPaxosTrimUndecided) {
            self.log_len().max(upto)
        } else {
            upto
        };
        if cut > self.snapshot_index() && cut > 0 {
            let data = if cut == upto {
                Bytes::from(snap.encode())
            } else {
                Bytes::from(
                    Snapshot {
                        upto: cut,
                        ..snap.clone()
                    }
                    .encode(),
                )
            };
            let ballot = self.store.ballot_at(cut).unwrap_or(last_ballot);
            let ls = LogSnapshot {
                index: cut,
                ballot,
                data,
            };
            if let Err(e) = self.store.set_snapshot(ls) {
                self.store_failed("storing a snapshot", e);
            }
            self.snapshot_unsynced = true;
        }
        self.snap_server.set_latest(&snap);
        Ok(snap)
    }

    /// `Protocol::restore_snapshot`: a restarted node starts after `snap`. The store's
    /// own snapshot, if newer, stays and goes to the application as an install on the
    /// first outbox; an older one is replaced. A snapshot whose last entry the store holds
    /// decided with another ballot is refused.
    pub(crate) fn restore_snapshot_here(&mut self, snap: &Snapshot) -> Result<(), String> {
        if self.started {
            return Err("a snapshot is restored before any other input".into());
        }
        let st = SnapState::decode(&snap.protocol, snap.upto)?;
        let held = self.snapshot_index();
        if snap.upto < held {
            return Ok(());
        }
        if let Some(b) = self.store.ballot_at(snap.upto)
            && b != st.last_ballot
            && self.store.decided_idx() >= snap.upto
            && snap.upto > held
        {
            return Err(format!(
                "the snapshot up to {} (last entry of ballot {:?}) disagrees with the log \
                 store, whose decided entry {} has ballot {:?}",
                snap.upto, st.last_ballot, snap.upto, b
            ));
        }
        if st.config.id > self.cfg.config_id {
            // The store forgot the configuration the snapshot was taken in (an in-memory
            // store): take it, as entering it would have (`enter_next`, without messages:
            // nothing has started).
            if let Err(e) = self.store.set_promised(Ballot::ZERO) {
                return Err(format!("the log store failed: {e}"));
            }
            if let Err(e) = self.store.set_accepted_round(Ballot::ZERO) {
                return Err(format!("the log store failed: {e}"));
            }
            // As `enter_next` does: what this log holds past the stop-sign and the snapshot
            // was appended in the older configuration after it ended, and is not chosen.
            let keep = st.base.max(snap.upto).max(self.store.decided_idx());
            if self.log_len() > keep
                && let Err(e) = self.store.truncate(keep + 1)
            {
                return Err(format!("the log store failed: {e}"));
            }
            self.cfg.config_id = st.config.id;
            self.cfg.members = st.config.members.clone();
            self.base = st.base;
            self.member = self.cfg.contains(self.me);
            self.amnesic = self.member && self.amnesic_life;
            self.recovering = self.amnesic.then(std::collections::BTreeMap::new);
            self.ble = super::ble::Ble::new(&self.cfg, self.me, self.incarnation, 0);
            self.ble.set_candidate(!self.amnesic);
            let rec = super::reconfig::ConfigRecord {
                config: self.cfg.configuration(),
                base: self.base,
                notify: Vec::new(),
                fetch: None,
            };
            if let Err(e) = self.store.set_stop_sign(Some(rec.encode())) {
                return Err(format!("the log store failed: {e}"));
            }
            self.snapshot_unsynced = true;
        }
        if snap.upto > held {
            let ls = LogSnapshot {
                index: snap.upto,
                ballot: self.store.ballot_at(snap.upto).unwrap_or(st.last_ballot),
                data: Bytes::from(snap.encode()),
            };
            self.store
                .set_snapshot(ls)
                .map_err(|e| format!("the log store refused the snapshot: {e}"))?;
            self.snapshot_unsynced = true;
        }
        self.delivered = snap.upto;
        self.dedup.replace(st.dedup);
        self.pending_install = None;
        self.snap_server.set_latest(snap);
        Ok(())
    }

    /// Tells `to`, which asked for decided entries from `from` on, that this node's
    /// snapshot replaces them (at most once per `resend_us` per peer). False if `from` is
    /// not compacted here (the caller sends the entries).
    pub(crate) fn offer_snapshot(&mut self, to: NodeId, from: u64, out: &mut Out) -> bool {
        let upto = self.snapshot_index();
        if from > upto || upto == 0 {
            return false;
        }
        let last = self.told.get(&(to, 2)).copied();
        if last.is_none_or(|t| self.now >= t + self.cfg.resend_us) {
            self.told.insert((to, 2), self.now);
            out.send(
                to,
                super::Message::SnapshotOffer {
                    config: self.config_id(),
                    upto,
                },
            );
        }
        true
    }

    /// A peer compacted what this node asked for: fetch its snapshot if it is ahead.
    pub(crate) fn on_snapshot_offer(&mut self, from: NodeId, upto: u64, out: &mut Out) {
        let decided = self.store.decided_idx();
        if upto <= decided {
            // It holds what was offered: say how far, so a pusher moves on.
            out.send(
                from,
                super::Message::FetchAck {
                    config: self.config_id(),
                    upto: decided,
                },
            );
            return;
        }
        if self.snap_fetcher.in_progress() {
            return;
        }
        self.snap_fetch_retries = 0;
        let f = self.snap_fetcher.start(self.now, from, decided + 1);
        out.events.push(Event::SnapshotFetching {
            next: decided + 1,
            floor: upto + 1,
            node: from,
            upto,
        });
        out.send(from, super::Message::SnapshotFetch(f));
    }

    /// Any node serves its latest snapshot, in chunks that fit a message.
    pub(crate) fn on_snapshot_fetch(&mut self, from: NodeId, f: SnapshotFetch, out: &mut Out) {
        let chunk_bytes = self
            .cfg
            .max_message_bytes
            .saturating_sub(CHUNK_OVERHEAD_BYTES)
            .max(1);
        let c = self
            .snap_server
            .serve_in_chunks_of(self.now, &f, chunk_bytes);
        out.send(from, super::Message::SnapshotChunk(c));
    }

    pub(crate) fn on_snapshot_chunk(&mut self, from: NodeId, c: SnapshotChunk, out: &mut Out) {
        match self.snap_fetcher.on_chunk(self.now, from, c) {
            ChunkOutcome::Next(f) => {
                self.snap_fetch_retries = 0;
                out.send(from, super::Message::SnapshotFetch(f));
            }
            ChunkOutcome::Complete(snap) => self.install(snap, out),
            ChunkOutcome::Abandoned(why) => out.events.push(Event::SnapshotTransferGivenUp { why }),
            ChunkOutcome::Ignored => {}
        }
    }

    /// A transfer whose chunk did not come: ask again, and give up after a few tries.
    pub(crate) fn snapshot_fetch_tick(&mut self, out: &mut Out) {
        let (now, resend_us) = (self.now, self.cfg.resend_us);
        let Some(t) = self.snap_fetcher.transfer.as_ref() else {
            return;
        };
        if now < t.last_progress_us + resend_us {
            return;
        }
        self.snap_fetch_retries += 1;
        if self.snap_fetch_retries > FETCH_RETRIES_MAX {
            self.snap_fetcher.abandon();
            out.events.push(Event::SnapshotTransferGivenUp {
                why: "no answer to the snapshot fetches".into(),
            });
            return;
        }
        if let Some((peer, f)) = self.snap_fetcher.retry(now) {
            out.send(peer, super::Message::SnapshotFetch(f));
        }
    }

    /// A peer's snapshot arrived whole: the store replaces the decided prefix with it and
    /// keeps every entry after it (see the module comment), the learner goes on after it,
    /// and a snapshot of a later configuration moves the node into it.
    pub(crate) fn install(&mut self, snap: Snapshot, out: &mut Out) {
        let st = match SnapState::decode(&snap.protocol, snap.upto) {
            Ok(st) => st,
            Err(detail) => {
                out.events.push(Event::SnapshotRefused {
                    upto: snap.upto,
                    detail,
                });
                return;
            }
        };
        let (decided_before, delivered_before) = (self.store.decided_idx(), self.delivered);
        if snap.upto <= decided_before || st.config.id < self.cfg.config_id {
            // Decided here meanwhile, or of a configuration this node left: stale.
            out.events.push(Event::SnapshotStale {
                upto: snap.upto,
                delivered: self.delivered,
            });
            return;
        }
        let ls = LogSnapshot {
            index: snap.upto,
            // The held entry's own ballot: the store keeps what follows it.
            ballot: self.store.ballot_at(snap.upto).unwrap_or(st.last_ballot),
            data: Bytes::from(snap.encode()),
        };
        if let Err(e) = self.store.set_snapshot(ls) {
            self.store_failed("installing a snapshot", e);
        }
        out.needs_sync = true;
        assert!(
            self.store.decided_idx() >= decided_before.max(snap.upto),
            "{}: an install never moves the decided index back",
            self.me
        );
        assert!(
            snap.upto >= delivered_before,
            "an install never moves delivery back"
        );
        self.delivered = snap.upto;
        self.dedup.replace(st.dedup);
        for key in self.batcher.in_flight_keys() {
            if self.dedup.decided_at(key).is_some_and(|i| i <= snap.upto)
                && let Some(ack) = self.batcher.on_decided(key, self.now)
            {
                out.acks.push(ack);
            }
        }
        if self
            .pending_ss
            .as_ref()
            .is_some_and(|(i, _, _)| *i <= snap.upto)
        {
            self.pending_ss = None;
        }
        out.events.push(Event::SnapshotInstalled {
            upto: snap.upto,
            app_bytes: snap.app.len(),
        });
        // A configuration change the snapshot covers is not reported on its own: it took
        // effect after the stop-sign, inside the snapshot, where no position among this
        // outbox's deliveries can say so; the installed state is after it, and `status()`
        // names the configuration.
        let position = out.deliveries.len();
        self.snap_server.set_latest(&snap);
        out.installs.push(Install {
            snapshot: snap,
            position,
        });
        if st.config.id > self.cfg.config_id {
            // §2.4.3: the snapshot covers the stop-sign that started its configuration.
            self.enter_next(st.base, st.config, Ballot::ZERO, out);
            return;
        }
        if self.fetch.is_some() {
            self.fetch_tick(out);
        }
        if !self.participates() {
            return;
        }
        match self.role {
            Role::Leader if self.ld.catch_up.is_some() => self.after_catch_up(out),
            Role::Follower if self.leader().is_some() => self.ask_prepare(out, true),
            _ => {}
        }
    }
}
