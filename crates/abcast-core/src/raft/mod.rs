//! Raft with joint consensus (seed 001 §2.5 and §2.5.1), with the optimisations of
//! Ongaro's thesis, as a pure state machine.
//!
//! Where each rule lives:
//!
//! | rule | seed / thesis | code |
//! | --- | --- | --- |
//! | terms, follower / candidate / leader, randomised election timeouts | 001 §2.5, fig. 3 | `election.rs`: `tick_election`, `campaign` |
//! | vote once per term, only for an up-to-date log | 001 §2.5 | `election.rs`: `on_request_vote` |
//! | pre-vote | thesis §9.6 | `election.rs`: `campaign(pre = true)`, `on_request_vote` |
//! | leader stickiness (ignore votes while a leader is heard) | thesis §4.2.3 | `election.rs`: `in_lease` |
//! | check-quorum | thesis §6.2 | `election.rs`: `check_quorum` |
//! | leadership transfer | thesis §3.10 | `election.rs`: `transfer_leadership`, `on_timeout_now` |
//! | only a newer leader message renews the lease and timer (held ones do not) | ours | `mod.rs`: `follow`; `Heartbeat::seq` |
//! | a preferred leader is handed the leadership (optional) | ours | `replication.rs`: `transfer_to_preferred` |
//! | AppendEntries, log matching, truncating a conflicting suffix | 001 §2.5 | `replication.rs`: `on_append_entries` |
//! | conflict hint (skip a whole term per round trip) | 001 §2.5, thesis §5.3 | `replication.rs`: `conflict_hint`, `on_append_reply` |
//! | per-follower progress, probe vs pipelined replicate | etcd-io/raft `tracker` | `replication.rs`: `Progress`, `send_append` |
//! | commit = index a majority (of both voter sets when joint) holds | 001 §2.5, §2.5.1 | `membership.rs`: `quorum_index`; `replication.rs`: `maybe_commit` |
//! | commit only entries of the current term; a no-op starts each term | thesis §3.6.2 (Raft §5.4.2) | `replication.rs`: `maybe_commit`; `election.rs`: `become_leader` |
//! | commit index piggy-backed on appends and heartbeats | 001 §2.5 | `replication.rs`: `send_append`, `send_heartbeats` |
//! | a configuration is used as soon as it is in the log | 001 §2.5.1 | `membership.rs`: `ConfigLog` |
//! | C_old,new then C_new; one change at a time | 001 §2.5.1 | `membership.rs`: `reconfigure`, `advance_change` |
//! | new members catch up as learners first | 001 §2.5.1 ("not counting them in majorities") | `membership.rs`: `advance_change` |
//! | a leader not in C_new steps down once C_new is committed | 001 §2.5.1 | `membership.rs`: `step_down_if_removed` |
//! | read index, lease reads | thesis §6.4, §6.4.1 | `read.rs` |
//! | snapshots, compaction, InstallSnapshot in chunks | Raft §7, fig. 13 | `snapshot.rs` |
//! | an amnesic restart is repaired: every voter's term fences its votes, a leader's committed log its acks | ours | `repair.rs` |
//!
//! Contract of the leader-based families (shared with Sequence Paxos): `propose` works on
//! every node (batches go to the leader as `Forward`, wait in the batcher while no leader is
//! known, and are re-sent on a leader change); the leader appends a batch as one entry;
//! every node delivers committed `Values` entries in log order (instance = log index,
//! de-duplicated), acknowledges its own batches, and reports committed configurations as
//! positioned `ConfigChange`s. Every write to the `LogStore` sets `needs_sync` in the same
//! outbox, so a vote or an AppendEntries success leaves only after what it promises is
//! durable.
//!
//! **Hard state in the store.** `promised()` holds the term in `round` and the vote in
//! `node`, with `incarnation` = 1 when a vote is held: node ids start at 0, so `NodeId(0)`
//! cannot mean "none". An entry's term is its ballot's `round` (node and incarnation name
//! the leader that made it, for people; only the round is compared).
//!
//! **Amnesia.** A node restarted (`incarnation > 0`) over a store that kept nothing has
//! forgotten its votes and entries: until repaired
//! (`repair.rs`) it never votes, never campaigns and its replies say `amnesic`, so no
//! leader counts it in a commit quorum, a read round or check-quorum. It still takes
//! entries and delivers. It is repaired once every other voter told it its term (it never
//! votes at or below the highest) and a leader's log up to a commit of that leader's term
//! is its own.
//!
//! Departures from the seed and the thesis, each for a reason: heartbeats are a message of
//! their own (etcd's `MsgHeartbeat`: they carry a commit index capped by what the follower
//! is known to hold, and the read-index round) rather than empty AppendEntries, so a
//! heartbeat is never refused for a gap the pipeline opened; a leader that commits its
//! removal hands over with `TimeoutNow` to the most up-to-date voter before it steps down,
//! shortening the leaderless time §2.5.1 describes. Snapshots, compaction and
//! `InstallSnapshot` follow Raft §7 (the extended paper; the seed has none): `snapshot.rs`.

pub mod config;
pub mod election;
pub mod membership;
pub mod messages;
pub mod read;
pub mod repair;
pub mod replication;
pub mod snapshot;
#[cfg(test)]
mod tests;

pub use config::RaftConfig;
pub use election::TransferError;
pub use messages::Message;

use crate::ProposeError;
use crate::batcher::{BatchLimits, Batcher};
use crate::config::{ConfigError, Configuration, StartInfo};
use crate::dedup::Dedup;
use crate::event::Event;
use crate::protocol::{
    ConfigChange, ConfigKind, Delivery, Install, Outbox, Protocol, ReconfigureError, Snapshot,
    Status,
};
use crate::replog::{EntryBody, Membership};
use crate::storage::{LogStore, StorageError, SyncJob};
use crate::types::{Ballot, Batch, Micros, NodeId, ValueId};
use bytes::Bytes;
use election::Election;
use membership::ConfigLog;
use replication::Leader;

pub type Out = Outbox<Message>;

/// `promised().incarnation` when the node holds a vote in `promised().node`.
const VOTE_HELD: u32 = 1;

/// Payload bytes one input delivers at most; the rest at the next input.
const APPLY_MAX_BYTES: usize = 16 << 20;

/// A node's state in the term (seed 001 fig. 3, plus the pre-candidate of thesis §9.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Follower,
    PreCandidate,
    Candidate,
    Leader,
}

/// One Raft node.
pub struct Raft {
    pub(crate) cfg: RaftConfig,
    pub(crate) limits: BatchLimits,
    pub(crate) me: NodeId,
    /// This process life, as ballots and replies carry it.
    pub(crate) incarnation: u32,
    pub(crate) store: Box<dyn LogStore + Send>,
    /// The store failed (a write, or a read of an entry): the node does nothing more, and
    /// `sync_storage` reports it so the driver stops the node.
    pub(crate) failed: Option<StorageError>,
    pub(crate) now: Micros,
    pub(crate) started: bool,

    /// `currentTerm` and `votedFor`, as in the store.
    pub(crate) term: u32,
    pub(crate) voted_for: Option<NodeId>,
    /// `commitIndex`, as in the store (`decided_idx`).
    pub(crate) commit: u64,
    pub(crate) role: Role,
    /// The leader of `term` this node knows of.
    pub(crate) leader: Option<NodeId>,
    /// This log matches `leader`'s up to here (checked by an AppendEntries of this term):
    /// a heartbeat's commit index applies only up to it.
    pub(crate) leader_match: u64,
    pub(crate) amnesic: bool,
    /// An amnesic node's way to its repair (`repair.rs`); `Some` exactly while `amnesic`.
    pub(crate) repair: Option<repair::Repair>,
    /// No vote is granted, and no campaign starts, in a term at or below this (`repair.rs`:
    /// terms this node may have voted in before it forgot).
    pub(crate) vote_floor: u32,
    /// Messages refused as ones no correct peer sends (`refuse`).
    pub(crate) refused_messages: u64,

    pub(crate) election: Election,
    /// splitmix64 state: the election timer's random source.
    pub(crate) rng: u64,
    pub(crate) configs: ConfigLog,
    /// The leader's state; `Some` exactly when `role == Leader`.
    pub(crate) lead: Option<Leader>,

    /// Every entry up to here was applied (delivered when it held values).
    pub(crate) applied: u64,
    /// The membership in effect at `applied` and the index of its entry (0: C_0): what a
    /// snapshot up to `applied` records (Raft §7).
    pub(crate) applied_config: (u64, Membership),
    /// The log store's snapshot, for the application on the first outbox: a restart whose
    /// driver restored an older snapshot, or none.
    pub(crate) pending_install: Option<Snapshot>,
    /// A snapshot was written to the store outside an input (`take_snapshot`): the next
    /// outbox syncs it, so the compaction reaches the disk even on an idle node.
    pub(crate) snapshot_unsynced: bool,
    /// A snapshot arriving from the leader in chunks.
    pub(crate) install_buf: Option<snapshot::InstallBuffer>,
    pub(crate) dedup: Dedup,
    pub(crate) batcher: Batcher,
    /// The leader the batcher last sent to: a different one makes it re-send everything.
    pub(crate) batcher_leader: Option<NodeId>,
}

impl Raft {
    /// A node with its store: term, vote, log, configuration and commit index come from
    /// the store (a restart), and deliveries start again at the first entry held.
    pub fn new(
        cfg: RaftConfig,
        me: NodeId,
        start: StartInfo,
        mut store: Box<dyn LogStore + Send>,
    ) -> Result<Raft, ConfigError> {
        cfg.validate()?;
        let incarnation = start.ballot_incarnation()?;
        let promised = store.promised();
        let voted_for = (promised.incarnation == VOTE_HELD).then_some(promised.node);
        let commit = store.decided_idx();
        let amnesic = (start.incarnation > 0 || start.amnesic) && !store.is_durable();
        if !amnesic {
            // Its state is whole: a later restart on this store is not amnesic (issue 33,
            // suspect 2: a life that lost its state stays amnesic across crashes until its
            // repair, `repair.rs`).
            store.mark_whole();
        }
        let base = Membership {
            id: 0,
            voters: cfg.voters.clone(),
            outgoing: Vec::new(),
            learners: cfg.learners.clone(),
        };
        let store_error = |reason: String| ConfigError {
            field: "store",
            reason,
        };
        // A compacted log starts after its snapshot (Raft §7): the configuration and the
        // de-duplication memory there come from it, the application's state too (on the
        // first outbox, unless `restore_snapshot` hands it a snapshot as recent).
        let compacted = store.first_index().saturating_sub(1);
        let (base, dedup, pending_install) = match store.snapshot() {
            Some(ls) => {
                let (snap, st) = snapshot::read_store_snapshot(ls).map_err(store_error)?;
                if ls.index != compacted {
                    return Err(store_error(format!(
                        "the log store's snapshot ends at entry {}, its log starts at {}",
                        ls.index,
                        compacted + 1
                    )));
                }
                (st.config, st.dedup, Some(snap))
            }
            None if compacted > 0 => {
                return Err(store_error(format!(
                    "the log store was compacted up to entry {compacted} without a snapshot"
                )));
            }
            None => ((0, base), Dedup::default(), None),
        };
        let configs =
            ConfigLog::recover(base.clone(), store.as_ref(), cfg.max_append_bytes, commit)
                .map_err(|e| {
                    store_error(format!("the log's configurations could not be read: {e}"))
                })?;
        let applied = compacted;
        let rng = timer_seed(cfg.seed, me, incarnation);
        Ok(Raft {
            limits: cfg.batch_limits(),
            me,
            incarnation,
            failed: None,
            now: 0,
            started: false,
            term: promised.round,
            voted_for,
            commit,
            role: Role::Follower,
            leader: None,
            leader_match: 0,
            amnesic,
            repair: amnesic.then(repair::Repair::default),
            vote_floor: 0,
            refused_messages: 0,
            election: Election::default(),
            rng,
            configs,
            lead: None,
            applied,
            applied_config: base,
            pending_install,
            snapshot_unsynced: false,
            install_buf: None,
            dedup: dedup.with_mutation(cfg.mutation()),
            batcher: Batcher::new(me, start.start_seq),
            batcher_leader: None,
            store,
            cfg,
        })
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn term(&self) -> u32 {
        self.term
    }

    /// The configuration in effect (the last one in the log, committed or not).
    pub fn membership(&self) -> &Membership {
        self.configs.current()
    }

    /// Whether this node runs the broken variant `m` (tests only, `crate::mutation`).
    #[inline(always)]
    pub(crate) fn mutated(&self, m: crate::mutation::Mutation) -> bool {
        crate::mutation::on(self.cfg.mutation(), m)
    }

    pub(crate) fn last_index(&self) -> u64 {
        self.store.last_index()
    }

    /// The term of entry `index` (0 for the empty prefix; 0 outside the log too, where
    /// callers have checked the index first).
    pub(crate) fn term_at(&self, index: u64) -> Option<u32> {
        self.store.ballot_at(index).map(|b| b.round)
    }

    pub(crate) fn last_term(&self) -> u32 {
        self.term_at(self.last_index()).unwrap_or(0)
    }

    /// The ballot entries of this term carry.
    pub(crate) fn term_ballot(&self) -> Ballot {
        Ballot::new(self.term, self.me, self.incarnation)
    }

    /// Every input passes here first; `false`: the store failed and the node is stopped.
    pub(crate) fn begin(&mut self, now: Micros) -> bool {
        if self.failed.is_some() {
            return false;
        }
        self.now = self.now.max(now);
        if !self.started {
            self.started = true;
            if self.cfg.read_lease {
                // A lease holder may count on this node not voting for a while: a restart
                // must not shorten that (thesis §6.4.1).
                self.election.leader_heard_us = Some(self.now);
            }
            self.reset_election_timer();
        }
        true
    }

    /// The store failed: record it (the driver learns it from `sync_storage`).
    pub(crate) fn fail(&mut self, e: StorageError, out: &mut Out) {
        if self.failed.is_none() {
            self.failed = Some(e);
        }
        out.needs_sync = true;
    }

    /// Stores term and vote; `sync`: the outbox must wait for them to be durable.
    pub(crate) fn persist_term_and_vote(&mut self, sync: bool, out: &mut Out) -> bool {
        let promised = match self.voted_for {
            Some(v) => Ballot::new(self.term, v, VOTE_HELD),
            None => Ballot::new(self.term, NodeId(0), 0),
        };
        if let Err(e) = self.store.set_promised(promised) {
            self.fail(e, out);
            return false;
        }
        if sync {
            out.needs_sync = true;
        }
        true
    }

    /// Moves the commit index up to `index` (never down), in the store too.
    pub(crate) fn set_commit(&mut self, index: u64, sync: bool, out: &mut Out) -> bool {
        if index <= self.commit {
            return false;
        }
        assert!(
            index <= self.last_index(),
            "commit index {index} past the last entry {}",
            self.last_index()
        );
        if let Err(e) = self.store.set_decided_idx(index) {
            self.fail(e, out);
            return false;
        }
        let before = self.commit;
        self.commit = index;
        assert!(self.commit > before, "the commit index never goes down");
        self.configs.on_commit(self.commit);
        if sync {
            out.needs_sync = true;
        }
        true
    }

    /// Becomes a follower of `term` (a higher term clears the vote), believing in `leader`.
    pub(crate) fn become_follower(
        &mut self,
        term: u32,
        leader: Option<NodeId>,
        sync: bool,
        out: &mut Out,
    ) {
        assert!(term >= self.term, "a term never goes down");
        if term > self.term {
            self.term = term;
            self.voted_for = None;
            if !self.persist_term_and_vote(sync, out) {
                return;
            }
        }
        if self.role == Role::Leader {
            out.events.push(Event::SteppedDown { node: self.me });
        }
        self.role = Role::Follower;
        self.lead = None;
        self.leader = leader;
        self.leader_match = 0;
        self.election.votes.clear();
        self.reset_election_timer();
    }

    /// A message from `leader` of `term` (at least this node's), its `seq`-th of the term,
    /// sent by `from`: follow it. At most one leader per term. False (the message is
    /// refused, `refuse`): `leader` is not its sender, or another leader of this term is
    /// known. Those are what a peer sent, so they are checked, never asserted (issue 33:
    /// one forged or corrupted-but-valid frame used to stop the receiver).
    ///
    /// Only a message newer than every one heard from the leader (`Heartbeat::seq`) counts
    /// as a sign of its life (the lease and the election timer): a message the network
    /// held for seconds says nothing of whether its sender still lives, and a dead leader's
    /// late appends, one every few hundred milliseconds, would otherwise keep its
    /// followers from electing another for as long as they trickle in (simulator seeds
    /// partition 4 and 18, mixed 6 and 16). A pre-candidate stays one for a held message of
    /// its term's leader: its pre-vote may go on.
    #[must_use]
    pub(crate) fn follow(
        &mut self,
        from: NodeId,
        term: u32,
        leader: NodeId,
        seq: u64,
        sync: bool,
        out: &mut Out,
    ) -> bool {
        let named_ok = self.mutated(crate::mutation::Mutation::RaftFollowNamedLeader);
        if (leader != from && !named_ok) || leader == self.me {
            self.refuse(
                from,
                format!("names {leader} as the leader of term {term}"),
                out,
            );
            return false;
        }
        if term == self.term
            && let Some(known) = self.leader
            && known != leader
        {
            self.refuse(
                from,
                format!("leads term {term}, whose leader is {known}"),
                out,
            );
            return false;
        }
        let fresh = (term, seq) > self.election.heard_seq;
        if !fresh && self.role == Role::PreCandidate {
            return true;
        }
        if term > self.term || self.role != Role::Follower || self.leader != Some(leader) {
            let deadline_us = self.election.deadline_us;
            self.become_follower(term, Some(leader), sync, out);
            if !fresh {
                self.election.deadline_us = deadline_us;
            }
        }
        if fresh {
            self.election.heard_seq = (term, seq);
            self.election.leader_heard_us = Some(self.now);
            self.reset_election_timer();
        }
        true
    }

    /// Drops a message no correct peer sends, counting it and saying why.
    pub(crate) fn refuse(&mut self, from: NodeId, why: String, out: &mut Out) {
        self.refused_messages += 1;
        out.events.push(Event::MessageRefused { from, why });
    }

    /// A ready batch goes to the leader: appended here if this node leads, forwarded if
    /// another does, kept in the batcher (re-sent when a leader is known) otherwise.
    pub(crate) fn dispatch(&mut self, batch: Batch, out: &mut Out) {
        match self.leader {
            Some(l) if l == self.me => self.append_batch(batch, out),
            Some(l) => out.send(l, Message::Forward(messages::Forward { batch })),
            None => {}
        }
    }

    /// Work at the end of every input: the leader's appends and commit notices, then
    /// deliveries.
    pub(crate) fn flush(&mut self, out: &mut Out) {
        if self.failed.is_some() {
            return;
        }
        if self.snapshot_unsynced {
            self.snapshot_unsynced = false;
            out.needs_sync = true;
        }
        if self.role == Role::Leader {
            self.flush_leader(out);
        }
        self.apply(out);
    }

    /// Delivers committed entries in log order (values de-duplicated), acknowledges this
    /// node's batches, reports committed configurations.
    pub(crate) fn apply(&mut self, out: &mut Out) {
        if let Some(snapshot) = self.pending_install.take() {
            out.events.push(Event::SnapshotInstalled {
                upto: snapshot.upto,
                app_bytes: snapshot.app.len(),
            });
            out.installs.push(Install {
                snapshot,
                position: out.deliveries.len(),
            });
        }
        let mut bytes = 0usize;
        while self.applied < self.commit && bytes < APPLY_MAX_BYTES && self.failed.is_none() {
            let from = self.applied + 1;
            let entries = match self.store.entries(from, self.commit + 1, APPLY_MAX_BYTES) {
                Ok(v) => v,
                Err(e) => return self.fail(e, out),
            };
            if entries.is_empty() {
                let e = StorageError(format!(
                    "committed entry {from} is not in the log (first held: {})",
                    self.store.first_index()
                ));
                return self.fail(e, out);
            }
            for e in entries {
                assert_eq!(e.index, self.applied + 1, "deliveries strictly increasing");
                bytes += e.payload.len();
                let body = match EntryBody::decode(&e.payload) {
                    Ok(b) => b,
                    Err(err) => {
                        let e = StorageError(format!(
                            "committed entry {} does not decode: {err}",
                            e.index
                        ));
                        return self.fail(e, out);
                    }
                };
                match body {
                    EntryBody::Values(batch) => {
                        let key = batch.key();
                        if let Some(ack) = self.batcher.on_decided(key, self.now) {
                            out.acks.push(ack);
                        }
                        if self.dedup.first_time_batch(&batch, e.index) {
                            out.deliveries.push(Delivery::new(e.index, batch));
                        }
                    }
                    EntryBody::Membership(m) => {
                        out.config_changes.push(ConfigChange {
                            kind: ConfigKind::Regular,
                            config: membership::to_configuration(&m),
                            position: out.deliveries.len(),
                        });
                        self.applied_config = (e.index, m);
                    }
                    EntryBody::Noop | EntryBody::StopSign(_) => {}
                }
                self.applied = e.index;
            }
        }
    }

    /// Draws the next election deadline: now plus a time drawn uniformly from
    /// `[election_timeout_min_us, election_timeout_max_us)`.
    pub(crate) fn reset_election_timer(&mut self) {
        let span = self.cfg.election_timeout_max_us - self.cfg.election_timeout_min_us;
        let r = splitmix64(&mut self.rng) % span.max(1);
        self.election.deadline_us = self.now + self.cfg.election_timeout_min_us + r;
    }
}

/// splitmix64's increment (the golden ratio in 64 bits).
const SPLITMIX_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// One step of splitmix64 (Steele, Lea, Flood 2014): the injected random source.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(SPLITMIX_GAMMA);
    mix64(*state)
}

/// splitmix64's output function: a bijection that scatters nearby inputs.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The election timer's starting state for node `me` in its life `incarnation` of a
/// cluster seeded `seed`: hashed, so that every node's stream is somewhere unrelated in
/// splitmix64's cycle. (Seeding with `seed ^ me * SPLITMIX_GAMMA`, as before, put node
/// `k`'s stream exactly `k` draws after node 0's whenever the seed's bits did not overlap
/// the multiple's, seed 0 among them: two nodes that had drawn the same number of
/// timeouts apart then drew the same timeouts, campaigned in the same millisecond and
/// split every vote; simulator pause seed 976 stayed leaderless for ten seconds.)
fn timer_seed(seed: u64, me: NodeId, incarnation: u32) -> u64 {
    let who = (u64::from(me.0) << 32) | u64::from(incarnation);
    mix64(seed.wrapping_add(mix64(who.wrapping_add(SPLITMIX_GAMMA))))
}

impl Protocol for Raft {
    type Message = Message;

    fn node(&self) -> NodeId {
        self.me
    }

    fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        out: &mut Out,
    ) -> Result<ValueId, ProposeError> {
        // One value is a run of one.
        self.propose_many(
            now,
            crate::Values::Each(std::slice::from_ref(&payload)),
            out,
        )
        .map(|(id, _)| id)
    }

    fn propose_many(
        &mut self,
        now: Micros,
        values: crate::Values<'_>,
        out: &mut Out,
    ) -> Result<(ValueId, usize), ProposeError> {
        if !self.begin(now) {
            return Err(ProposeError::Busy);
        }
        let mut ready = Vec::new();
        let r = self
            .batcher
            .propose_many(self.now, values, &self.limits, &mut ready);
        for batch in ready {
            self.dispatch(batch, out);
        }
        self.flush(out);
        r
    }

    fn receive(&mut self, now: Micros, from: NodeId, msg: Message, out: &mut Out) {
        if !self.begin(now) {
            return;
        }
        match msg {
            Message::RequestVote(m) => self.on_request_vote(from, m, out),
            Message::RequestVoteReply(m) => self.on_vote_reply(from, m, out),
            Message::AppendEntries(m) => self.on_append_entries(from, m, out),
            Message::AppendEntriesReply(m) => self.on_append_reply(from, m, out),
            Message::Heartbeat(m) => self.on_heartbeat(from, m, out),
            Message::HeartbeatReply(m) => self.on_heartbeat_reply(from, m, out),
            Message::TimeoutNow(m) => self.on_timeout_now(from, m, out),
            Message::Forward(m) => self.on_forward(m.batch, out),
            Message::InstallSnapshot(m) => self.on_install_snapshot(from, m, out),
            Message::InstallSnapshotReply(m) => self.on_install_snapshot_reply(from, m, out),
            Message::TermQuery(m) => self.on_term_query(from, m, out),
            Message::TermReply(m) => self.on_term_reply(from, m, out),
        }
        self.flush(out);
    }

    fn tick(&mut self, now: Micros, out: &mut Out) {
        if !self.begin(now) {
            return;
        }
        if self.role == Role::Leader {
            self.tick_leader(out);
        } else {
            self.tick_election(out);
        }
        self.repair_tick(out);
        let changed = self.leader.is_some() && self.leader != self.batcher_leader;
        if changed {
            self.batcher_leader = self.leader;
        }
        let mut ready = Vec::new();
        self.batcher
            .tick(self.now, changed, &self.limits, &mut ready);
        for batch in ready {
            self.dispatch(batch, out);
        }
        self.flush(out);
    }

    fn tick_interval_us(&self) -> Micros {
        (self.cfg.batch_linger_us.max(100))
            .min(self.cfg.heartbeat_interval_us / 4)
            .max(1)
    }

    fn can_propose(&self) -> bool {
        self.failed.is_none() && self.batcher.has_room(&self.limits)
    }

    fn status(&self) -> Status {
        let (configuration, configuration_pending) = self.configuration_status();
        let m = self.configs.current();
        let mut view: Vec<NodeId> = m.voters.iter().chain(&m.outgoing).copied().collect();
        view.sort_unstable();
        view.dedup();
        Status {
            node: self.me,
            coordinator: self.leader,
            ballot: Ballot::new(self.term, self.leader.unwrap_or(self.me), 0),
            leading: self.role == Role::Leader,
            delivered_upto: self.applied,
            decided_max: self.commit,
            values_in_flight: self.batcher.values_in_flight(),
            amnesic: self.amnesic,
            view,
            log_bytes: self.store.log_bytes(),
            configuration: Some(configuration),
            configuration_pending,
            followers: self.follower_progress(),
            refused_messages: self.refused_messages,
            ..Status::default()
        }
    }

    fn sync_storage(&mut self) -> Result<(), StorageError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.store.sync().inspect_err(|e| {
            self.failed = Some(e.clone());
        })
    }

    fn begin_sync_storage(&mut self) -> Result<Option<SyncJob>, StorageError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.store.begin_sync().inspect_err(|e| {
            self.failed = Some(e.clone());
        })
    }

    fn end_sync_storage(&mut self, result: Result<(), StorageError>) -> Result<(), StorageError> {
        self.store.end_sync(&result);
        if let Err(e) = &result {
            self.failed.get_or_insert_with(|| e.clone());
        }
        result
    }

    fn log_bytes(&self) -> u64 {
        self.store.log_bytes()
    }

    fn reconfigure(
        &mut self,
        now: Micros,
        config: Configuration,
        out: &mut Out,
    ) -> Result<(), ReconfigureError> {
        config.validate().map_err(ReconfigureError::Invalid)?;
        if !self.begin(now) {
            return Err(ReconfigureError::Refused(ProposeError::Busy));
        }
        let r = self.start_change(&config, out);
        self.flush(out);
        r
    }

    fn peer_unreachable(&mut self, now: Micros, peer: NodeId, out: &mut Out) {
        if !self.begin(now) {
            return;
        }
        if let Some(pr) = self.lead.as_mut().and_then(|l| l.progress.get_mut(&peer)) {
            pr.forget();
        }
        self.flush(out);
    }

    fn peer_reconnected(&mut self, now: Micros, peer: NodeId, out: &mut Out) {
        if !self.begin(now) {
            return;
        }
        if let Some(pr) = self.lead.as_mut().and_then(|l| l.progress.get_mut(&peer)) {
            // The dropped connection may have lost appends, and the peer may be a new
            // process that lost its log: probe, and count nothing it said before.
            pr.forget();
            self.send_append(peer, true, out);
        }
        self.flush(out);
    }

    fn snapshots_supported(&self) -> bool {
        true
    }

    fn take_snapshot(&mut self, app: Bytes) -> Result<Snapshot, String> {
        self.take_snapshot_here(app)
    }

    fn restore_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), String> {
        self.restore_snapshot_here(snapshot)
    }

    fn read_index(&mut self, now: Micros, id: u64, out: &mut Out) -> Result<(), ProposeError> {
        if !self.begin(now) {
            return Err(ProposeError::NotLeader { hint: None });
        }
        let r = self.start_read(id, out);
        self.flush(out);
        r
    }
}
