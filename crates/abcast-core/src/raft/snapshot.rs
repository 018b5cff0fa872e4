//! Snapshots, log compaction and `InstallSnapshot` (Raft §7 of the extended paper, Ongaro
//! and Ousterhout 2014, figure 13; thesis chapter 5). Seed 001 has no snapshots (its Raft
//! baselines ran with "snapshotting turned off", §5.1): the rules below are the paper's.
//!
//! | rule | source | code |
//! | --- | --- | --- |
//! | each server snapshots on its own the entries it applied, and discards the log up to there | §7 ("each server takes snapshots independently, covering just the committed entries in its log") | [`Raft::take_snapshot_here`]: `LogStore::set_snapshot` forgets the covered prefix |
//! | a snapshot holds the state machine, the last included index and term, and the configuration as of that index | §7, fig. 12 | [`SnapState`]: the ballot of the last entry, the membership applied there, the de-duplication memory (`deliver`'s learner state) |
//! | a restarted server starts from its snapshot | §7 | [`Raft::restore_snapshot_here`]; `Raft::new` (the store's own snapshot, handed to the application as an install when the driver's is older or missing) |
//! | the leader sends its snapshot to a follower whose next entry it discarded | §7 ("when the leader has already discarded the next log entry that it needs to send to a follower") | `replication.rs`: `send_append` → [`Raft::send_snapshot`] |
//! | chunks at an offset, one out at a time; the follower writes them and replies | fig. 13 steps 2–4 | [`Raft::send_snapshot`], [`Raft::on_install_snapshot`] (chunks of `max_append_bytes`, the bound that keeps an AppendEntries in a frame) |
//! | reply at once to a stale term | fig. 13 step 1 | [`Raft::on_install_snapshot`] |
//! | a snapshot of a prefix the follower holds: entries after it are kept | fig. 13 step 6; §7 | `LogStore::set_snapshot` (`KeepSuffix`) |
//! | otherwise the whole log goes; the state machine and configuration are reset from it | fig. 13 steps 7–8 | [`Raft::install`] |
//! | a snapshot at or below the commit index changes nothing (ours: a duplicated or late chunk; the committed entries after it are kept) | §7's retained suffix, applied to the commit index | [`Raft::on_install_snapshot`] (the broken variant `RaftInstallBelowCommit` skips it) |
//!
//! Invariants, asserted: a snapshot never covers an uncommitted entry (`applied <= commit`);
//! an install never moves the commit or applied index back; after an install the next
//! delivery is the entry after the snapshot (`apply`'s strictly increasing deliveries).

use super::membership::ConfigLog;
use super::messages::{InstallSnapshot, InstallSnapshotReply};
use super::{Message, Out, Raft, Role};
use crate::codec::{Decoder, Encoder};
use crate::dedup::Dedup;
use crate::event::Event;
use crate::mutation::Mutation;
use crate::protocol::{Install, Snapshot};
use crate::replog::{EntryBody, Membership};
use crate::storage::LogSnapshot;
use crate::types::{Ballot, NodeId};
use crate::wire::{get_ballot, put_ballot};
use bytes::Bytes;

/// The version byte of [`SnapState`]'s encoding.
const SNAP_STATE_VERSION: u8 = 1;

/// Raft's part of a snapshot (`Snapshot::protocol`): what a node needs to go on delivering
/// the same sequence after `upto` (§7, fig. 12: last included term and configuration).
#[derive(Debug)]
pub(crate) struct SnapState {
    /// The ballot of entry `upto` (its `round` is `lastIncludedTerm`).
    pub last_ballot: Ballot,
    /// The membership in effect at `upto`, and the index of the entry that carried it (0:
    /// the first configuration).
    pub config: (u64, Membership),
    /// The learner's de-duplication memory at `upto`.
    pub dedup: Dedup,
}

impl SnapState {
    pub fn encode(&self) -> Bytes {
        let mut e = Encoder::new();
        e.put_u8(SNAP_STATE_VERSION);
        put_ballot(&mut e, self.last_ballot);
        e.put_u64(self.config.0);
        let m = EntryBody::Membership(self.config.1.clone()).encode();
        e.put_u32(m.len() as u32);
        e.put_bytes(&m);
        self.dedup.encode(&mut e);
        e.to_bytes()
    }

    /// Decodes [`SnapState::encode`]; an error names what is wrong.
    pub fn decode(bytes: &Bytes, upto: u64) -> Result<SnapState, String> {
        let bad = |e: crate::error::DecodeError| format!("Raft snapshot state: {e}");
        let mut d = Decoder::new(bytes.clone());
        let version = d.u8("raft_snapshot.version").map_err(bad)?;
        if version != SNAP_STATE_VERSION {
            return Err(format!(
                "Raft snapshot state: version {version}, this build reads {SNAP_STATE_VERSION}"
            ));
        }
        let last_ballot = get_ballot(&mut d).map_err(bad)?;
        let config_index = d.u64("raft_snapshot.config_index").map_err(bad)?;
        if config_index > upto {
            return Err(format!(
                "Raft snapshot state: configuration of entry {config_index} in a snapshot up \
                 to {upto}"
            ));
        }
        let len = d.u32("raft_snapshot.config_len").map_err(bad)? as usize;
        let body = d.bytes(len, "raft_snapshot.config").map_err(bad)?;
        let membership = match EntryBody::decode(&body).map_err(bad)? {
            EntryBody::Membership(m) => m,
            other => {
                return Err(format!(
                    "Raft snapshot state: a configuration was expected, not {other:?}"
                ));
            }
        };
        let dedup = Dedup::decode(&mut d).map_err(bad)?;
        d.finish().map_err(bad)?;
        Ok(SnapState {
            last_ballot,
            config: (config_index, membership),
            dedup,
        })
    }
}

/// A snapshot being sent to one follower ([`super::replication::Progress::snapshot`]).
#[derive(Clone, Debug)]
pub struct SnapshotSend {
    pub index: u64,
    pub ballot: Ballot,
    /// The snapshot's encoding, shared with the store (no copy).
    pub data: Bytes,
    /// The follower holds the bytes before this one.
    pub offset: u64,
}

/// A snapshot arriving from the leader, chunk by chunk.
#[derive(Debug)]
pub(crate) struct InstallBuffer {
    term: u32,
    leader: NodeId,
    last_index: u64,
    last_ballot: Ballot,
    total_bytes: u64,
    buf: Vec<u8>,
}

/// The store's snapshot as the protocol reads it back: the `Snapshot`, its state.
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
    if st.last_ballot != ls.ballot {
        return Err(format!(
            "the log store's snapshot at entry {} says term {}, its state term {}",
            ls.index, ls.ballot.round, st.last_ballot.round
        ));
    }
    Ok((snap, st))
}

impl Raft {
    /// The index the store's snapshot covers (0: none).
    pub(crate) fn snapshot_index(&self) -> u64 {
        self.store.snapshot().map_or(0, |s| s.index)
    }

    /// `Protocol::take_snapshot`: the application's state after every applied entry, with
    /// Raft's state at that point; the store keeps it and forgets the entries it covers
    /// (§7: each server compacts on its own).
    pub(crate) fn take_snapshot_here(&mut self, app: Bytes) -> Result<Snapshot, String> {
        if let Some(e) = &self.failed {
            return Err(format!("the log store failed: {e}"));
        }
        if self.pending_install.is_some() {
            return Err("the log store's snapshot is not yet handed to the application".into());
        }
        let upto = self.applied;
        // A snapshot never covers an entry that is not committed (§7: "covering just the
        // committed entries").
        assert!(
            upto <= self.commit,
            "{}: a snapshot up to {upto} past the commit index {}",
            self.me,
            self.commit
        );
        let Some(last_ballot) = self.store.ballot_at(upto) else {
            return Err(format!(
                "entry {upto} is not in the log (first held: {})",
                self.store.first_index()
            ));
        };
        let state = SnapState {
            last_ballot,
            config: self.applied_config.clone(),
            dedup: self.dedup.clone(),
        };
        let snap = Snapshot {
            upto,
            protocol: state.encode(),
            app,
        };
        if upto > self.snapshot_index() {
            let ls = LogSnapshot {
                index: upto,
                ballot: last_ballot,
                data: Bytes::from(snap.encode()),
            };
            if let Err(e) = self.store.set_snapshot(ls) {
                // The next outbox's `sync_storage` reports it and the driver stops.
                self.failed.get_or_insert(e.clone());
                return Err(format!("the log store refused the snapshot: {e}"));
            }
            assert_eq!(
                self.store.first_index(),
                upto + 1,
                "the store keeps the entries after the snapshot"
            );
            self.snapshot_unsynced = true;
        }
        Ok(snap)
    }

    /// `Protocol::restore_snapshot`: a restarted node starts after `snap`. The log store may
    /// hold a snapshot too: an older one is replaced (the driver's snapshot is written
    /// before the store's record of it is durable); a newer one stays, and goes to the
    /// application as an install on the first outbox. A snapshot that disagrees with a
    /// committed entry of the log is refused.
    pub(crate) fn restore_snapshot_here(&mut self, snap: &Snapshot) -> Result<(), String> {
        if self.started {
            return Err("a snapshot is restored before any other input".into());
        }
        let st = SnapState::decode(&snap.protocol, snap.upto)?;
        let held = self.snapshot_index();
        if snap.upto < held {
            // The store's newer snapshot (`pending_install`) replaces the application's.
            return Ok(());
        }
        if let Some(b) = self.store.ballot_at(snap.upto)
            && b != st.last_ballot
            && self.store.decided_idx() >= snap.upto
        {
            return Err(format!(
                "the snapshot up to {} (entry of term {}) disagrees with the log store, whose \
                 committed entry {} has term {}",
                snap.upto, st.last_ballot.round, snap.upto, b.round
            ));
        }
        if snap.upto > held {
            let ls = LogSnapshot {
                index: snap.upto,
                ballot: st.last_ballot,
                data: Bytes::from(snap.encode()),
            };
            self.store
                .set_snapshot(ls)
                .map_err(|e| format!("the log store refused the snapshot: {e}"))?;
        }
        self.configs = ConfigLog::recover(
            st.config.clone(),
            self.store.as_ref(),
            self.cfg.max_append_bytes,
            self.store.decided_idx(),
        )
        .map_err(|e| format!("the log's configurations could not be read: {e}"))?;
        self.commit = self.store.decided_idx();
        assert!(self.commit >= snap.upto, "the store covers the snapshot");
        self.applied = snap.upto;
        self.applied_config = st.config;
        self.dedup.replace(st.dedup);
        self.pending_install = None;
        Ok(())
    }

    // ---- leader ------------------------------------------------------------------------

    /// The next chunk of the leader's snapshot to `to`, whose next entry the log no longer
    /// holds (§7). One chunk is out at a time (`probe_sent_us`, resent after a heartbeat
    /// interval or at the follower's next heartbeat reply). Returns whether one left.
    pub(crate) fn send_snapshot(&mut self, to: NodeId, force: bool, out: &mut Out) -> bool {
        let Some(ls) = self.store.snapshot() else {
            return false;
        };
        let (index, ballot, data) = (ls.index, ls.ballot, ls.data.clone());
        let chunk_bytes = self.cfg.max_append_bytes.max(1) as u64;
        let (term, me, now) = (self.term, self.me, self.now);
        let Some(lead) = self.lead.as_mut() else {
            return false;
        };
        let Some(pr) = lead.progress.get_mut(&to) else {
            return false;
        };
        let keep = pr
            .snapshot
            .as_ref()
            .is_some_and(|s| s.offset > 0 || s.index == index);
        if !keep {
            pr.snapshot = Some(SnapshotSend {
                index,
                ballot,
                data,
                offset: 0,
            });
        }
        if !force && pr.probe_sent_us.is_some() {
            return false;
        }
        let Some(s) = pr.snapshot.as_ref() else {
            return false;
        };
        let total_bytes = s.data.len() as u64;
        let offset = s.offset.min(total_bytes);
        let end = (offset + chunk_bytes).min(total_bytes);
        let msg = InstallSnapshot {
            term,
            leader: me,
            last_index: s.index,
            last_ballot: s.ballot,
            offset,
            total_bytes,
            data: s.data.slice(offset as usize..end as usize),
            seq: 0,
        };
        pr.state = super::replication::ProgressState::Probe;
        pr.inflight.clear();
        pr.probe_sent_us = Some(now);
        lead.sent_seq += 1;
        let seq = lead.sent_seq;
        out.send(to, Message::InstallSnapshot(InstallSnapshot { seq, ..msg }));
        true
    }

    pub(crate) fn on_install_snapshot_reply(
        &mut self,
        from: NodeId,
        m: InstallSnapshotReply,
        out: &mut Out,
    ) {
        if m.term > self.term {
            return self.become_follower(m.term, None, true, out);
        }
        if self.role != Role::Leader || m.term < self.term {
            return;
        }
        let now = self.now;
        let last = self.last_index();
        let Some(pr) = self.lead.as_mut().and_then(|l| l.progress.get_mut(&from)) else {
            return;
        };
        if !super::replication::observe_life(pr, m.incarnation, m.amnesic, now) {
            return;
        }
        if m.done {
            if m.last_index > last || m.last_index <= pr.match_index {
                return; // Stale, or not of this leader's log.
            }
            pr.match_index = m.last_index;
            pr.last_progress_us = now;
            if pr
                .snapshot
                .as_ref()
                .is_some_and(|s| s.index <= m.last_index)
            {
                pr.snapshot = None;
            }
            pr.next_index = pr.next_index.max(pr.match_index + 1);
            pr.become_probe();
            self.maybe_commit(out);
            return;
        }
        if let Some(s) = pr.snapshot.as_mut()
            && s.index == m.last_index
        {
            let total = s.data.len() as u64;
            s.offset = m.next_offset.min(total);
            pr.probe_sent_us = None;
            pr.last_progress_us = now;
        }
    }

    // ---- follower ----------------------------------------------------------------------

    fn install_reply(&self, last_index: u64, next_offset: u64, done: bool) -> Message {
        Message::InstallSnapshotReply(InstallSnapshotReply {
            term: self.term,
            last_index,
            next_offset,
            done,
            incarnation: self.incarnation,
            amnesic: self.amnesic,
        })
    }

    /// A chunk of the leader's snapshot (fig. 13).
    pub(crate) fn on_install_snapshot(&mut self, from: NodeId, m: InstallSnapshot, out: &mut Out) {
        if m.term < self.term {
            // Step 1: a deposed leader; the reply's term tells it.
            out.send(from, self.install_reply(m.last_index, 0, false));
            return;
        }
        if !self.follow(from, m.term, m.leader, m.seq, true, out) || self.failed.is_some() {
            return;
        }
        if m.last_index <= self.commit && !self.mutated(Mutation::RaftInstallBelowCommit) {
            // Committed here already: the log matches every leader's up to there, and the
            // entries after it stay (§7). A late or duplicated chunk.
            self.leader_match = self.leader_match.max(m.last_index);
            out.send(from, self.install_reply(m.last_index, m.total_bytes, true));
            return;
        }
        // Steps 2-4: a first chunk starts the snapshot; a chunk at the end of the one being
        // received extends it; any other asks for what is missing.
        let same = |b: &InstallBuffer| {
            b.term == m.term
                && b.leader == m.leader
                && b.last_index == m.last_index
                && b.last_ballot == m.last_ballot
                && b.total_bytes == m.total_bytes
        };
        if m.offset == 0 {
            self.install_buf = Some(InstallBuffer {
                term: m.term,
                leader: m.leader,
                last_index: m.last_index,
                last_ballot: m.last_ballot,
                total_bytes: m.total_bytes,
                buf: Vec::new(),
            });
        }
        let have = match self.install_buf.as_mut() {
            Some(b) if same(b) && b.buf.len() as u64 == m.offset => {
                b.buf.extend_from_slice(&m.data);
                b.buf.len() as u64
            }
            Some(b) if same(b) => b.buf.len() as u64,
            _ => 0,
        };
        if have < m.total_bytes {
            out.send(from, self.install_reply(m.last_index, have, false));
            return;
        }
        // Step 5: the whole snapshot arrived; check it before anything changes.
        let Some(b) = self.install_buf.take() else {
            return;
        };
        let checked = Snapshot::decode(&b.buf).and_then(|snap| {
            if snap.upto != b.last_index {
                return Err(format!(
                    "announced as up to {}, the snapshot says {}",
                    b.last_index, snap.upto
                ));
            }
            let st = SnapState::decode(&snap.protocol, snap.upto)?;
            if st.last_ballot != b.last_ballot {
                return Err(format!(
                    "announced with term {}, the snapshot says {}",
                    b.last_ballot.round, st.last_ballot.round
                ));
            }
            Ok((snap, st))
        });
        match checked {
            Ok((snap, st)) => {
                let data = Bytes::from(b.buf);
                if self.install(snap, st, data, out) {
                    out.send(from, self.install_reply(m.last_index, m.total_bytes, true));
                }
            }
            Err(why) => {
                out.events.push(Event::SnapshotRefused {
                    upto: m.last_index,
                    detail: format!("from {from}: {why}"),
                });
                out.send(from, self.install_reply(m.last_index, 0, false));
            }
        }
    }

    /// Steps 6–8: the log store takes the snapshot (keeping the entries after it if it
    /// holds the same last entry), and the node goes on after it: commit and applied index,
    /// configuration, de-duplication memory; the application gets the state (`installs`,
    /// positioned among the deliveries). Returns false if the store failed.
    pub(crate) fn install(
        &mut self,
        snap: Snapshot,
        st: SnapState,
        data: Bytes,
        out: &mut Out,
    ) -> bool {
        let (commit_before, applied_before) = (self.commit, self.applied);
        let broken = self.mutated(Mutation::RaftInstallBelowCommit);
        if !broken {
            assert!(
                snap.upto > commit_before,
                "{}: an install up to {} would move the commit index {commit_before} back",
                self.me,
                snap.upto
            );
        }
        if snap.upto > commit_before {
            let ls = LogSnapshot {
                index: snap.upto,
                ballot: st.last_ballot,
                data,
            };
            if let Err(e) = self.store.set_snapshot(ls) {
                self.fail(e, out);
                return false;
            }
            match ConfigLog::recover(
                st.config.clone(),
                self.store.as_ref(),
                self.cfg.max_append_bytes,
                self.store.decided_idx(),
            ) {
                Ok(c) => self.configs = c,
                Err(e) => {
                    self.fail(e, out);
                    return false;
                }
            }
            self.commit = self.store.decided_idx();
            self.leader_match = self.leader_match.max(snap.upto);
        }
        if !broken {
            assert!(
                self.commit >= commit_before,
                "an install never moves commit back"
            );
            assert!(
                snap.upto >= applied_before,
                "an install never moves applied back"
            );
        }
        self.applied = snap.upto;
        // A configuration committed inside the snapshot is not reported on its own (it took
        // effect at an index the snapshot covers, which no position among this outbox's
        // deliveries can name); the installed state is after it, and `status()` names it.
        self.applied_config = st.config;
        self.dedup.replace(st.dedup);
        // This node's batches the snapshot decided are acknowledged now.
        for key in self.batcher.in_flight_keys() {
            if self.dedup.decided_at(key).is_some_and(|i| i <= snap.upto)
                && let Some(ack) = self.batcher.on_decided(key, self.now)
            {
                out.acks.push(ack);
            }
        }
        let position = out.deliveries.len();
        out.events.push(Event::SnapshotInstalled {
            upto: snap.upto,
            app_bytes: snap.app.len(),
        });
        out.installs.push(Install {
            snapshot: snap,
            position,
        });
        out.needs_sync = true;
        true
    }
}
