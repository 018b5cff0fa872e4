//! Leader-based Sequence Paxos with Ballot Leader Election: seed 001 §2.4, appendix A
//! (`ble.rs`) and appendix B (`leader.rs`, `follower.rs`), with the §4.4.3 optimisations,
//! as a pure state machine over a [`LogStore`].
//!
//! One node is one replica of one configuration at a time (§2.4.3; see *Reconfiguration*
//! below for the configurations after the first). Its state, named as in Algorithm 4
//! ("State & General"):
//!
//! | pseudo code | here |
//! | --- | --- |
//! | `state = (role, phase)` | `role`, `phase` |
//! | `n_L`, `promises`, `las`, `lds`, `propCmds`, `l_c` | `leader.rs::LeaderState` |
//! | `n_prom`, `(n_a, v_a)` | the store: `promised()`, `accepted_round()`, the entries |
//! | `l_d` | the store's `decided_idx()` |
//! | `σ_{i-1}` | entries up to `base`, the index of `SS_{i-1}` (0 for the first configuration) |
//! | `STOPPED()` | `leader.rs::stopped`: the log's last entry, after `base`, is a stop-sign |
//!
//! The path of one value: `propose` puts it into the proposer's batch (`batcher.rs`, shared
//! by every protocol); a ready batch goes to the leader (`Forward`, §4.4.1) or, at the
//! leader, becomes one log entry (Leader (1) line 4). Each flush (every `tick`, which the
//! drivers call after every batch of inputs) the leader sends each follower *one* `Accept`
//! with every entry it has not sent it yet and the chosen length (§4.4.3 "batching elements
//! in Accept messages", "send only latest decide"); each follower appends, and answers with
//! *one* `Accepted` per flush (§7.1's "follower only sends the latest Accepted"). When a
//! majority accepted up to `l`, `l` is chosen (Leader (2) line 9); every node delivers the
//! decided entries in order, skipping a batch already delivered (a re-sent proposal,
//! `dedup.rs`), and the proposer acknowledges its own.
//!
//! Beyond the thesis, which assumes FIFO perfect links (§2.1) and crash-stop processes:
//! - **Lost or reordered messages.** Every `Accept` says where its entries start; a follower
//!   that sees a gap, a `Decide` past its log, or waits too long for an `AcceptSync` asks the
//!   leader to prepare it again (`PrepareReq`, as OmniPaxos does after a dropped session);
//!   the runtime's `peer_reconnected` does the same. The leader re-sends a `Prepare` to a
//!   member that has not promised, and entries not accepted, after `resend_us`.
//! - **A stale leader learns it.** A follower that refuses a message of a lower ballot answers
//!   `Nack` with its promise; the old leader steps down and forwards its proposals.
//! - **Crash and restart.** `n_prom`, `n_a`, the log and the decided index live in the
//!   [`LogStore`]; a `Promise` or `Accepted` leaves only after what it reports is durable
//!   (`Outbox::needs_sync`). A node whose store is not durable and that restarted forgot
//!   what it promised and accepted: it is *amnesic* until repaired (`follower.rs`,
//!   `recover_promise`): it first takes the highest promise of a majority of the *other*
//!   members as its own (so it never helps a ballot below one its lost vote may have
//!   counted in), and is repaired by the first `AcceptSync` it accepts, which gives it the
//!   whole sequence of a leader whose prepare did not count it. Until then its promises do
//!   not count and it is no candidate for leadership.
//! - **Deliveries restart at the log's start.** The application of a restarted node is new,
//!   so its learner delivers the decided entries again from the first one it holds (or,
//!   after a snapshot, from the entry after it).
//! - **Snapshots and compaction** (`snapshot.rs`; not in the thesis, OmniPaxos' rules): a
//!   node compacts its decided, delivered prefix into a snapshot; wherever it would send
//!   decided entries it compacted, it offers the snapshot instead and the receiver pulls
//!   it in chunks, installs it (keeping every accepted entry after it) and goes on.
//!
//! **Reconfiguration** (`reconfig.rs`; each rule with its seed section):
//! - *Stop-sign* (§2.4.3, appendix B `STOPPED()`): `reconfigure` at the leader of `c_i`
//!   appends `SS_i` naming `c_{i+1}` (id `i + 1`); `NotLeader` with the leader known
//!   elsewhere, `Busy` while preparing or with a stop-sign already in the log. Nothing is
//!   appended after it in `c_i`: the leader holds later proposals (Leader (1) line 3), a
//!   new leader that adopts a suffix ending in `SS_i` keeps it last and holds its
//!   `propCmds` (lines 15-16), a follower accepts nothing past a stop-sign.
//! - *One continuous log* (beyond the thesis and OmniPaxos issue 151, where each
//!   configuration has a log of its own): `c_{i+1}`'s entries follow `SS_i`'s index, the
//!   learner delivers one sequence and reports the `ConfigChange` right after the
//!   stop-sign's delivery; ballots, `n_prom` and `n_a` start again per configuration
//!   (appendix B lines 8, 14-15) and every message carries its configuration id.
//! - *Entering `c_{i+1}`* when `SS_i` is delivered (§2.4.3 "once a process decides SS_i and
//!   has the final sequence σ_i"), persisted (`ConfigRecord` in the log store's stop-sign
//!   slot) before any message of `c_{i+1}` leaves.
//! - *The final sequence* (§2.4.3 fetch, §4.4 pull and eager): a node that learns `SS_i` is
//!   decided without holding `σ_i` (a new member, or an old one that missed the decide)
//!   fetches the decided log up to it: segments from several nodes in parallel, or the
//!   old leader's pushes; any node, of any configuration, serves its decided prefix.
//! - *Proposals between configurations* (§5.5.2 "held back until the new configuration
//!   start"): held by the old leader and by members without a leader, forwarded to
//!   `c_{i+1}`'s leader; the proposers re-send what is in flight when the leader changes
//!   and the learners' de-duplication keeps delivery exactly-once.
//! - *Head start* (§4.4.3, §5.4.3): `c_i`'s leader, if a member of `c_{i+1}`, starts there
//!   with BLE round 1 and prepares at once.
//! - *A node outside its configuration* (a spare waiting to be added, a removed node): no
//!   part in Sequence Paxos; it forwards proposals to the members, follows the decided log
//!   (fetching from the members) while proposals of its own are in flight, serves
//!   fetches, and joins when a stop-sign names it.

pub mod ble;
pub mod config;
pub mod follower;
pub mod leader;
pub mod messages;
pub mod reconfig;
pub mod snapshot;
#[cfg(test)]
mod tests;

pub use config::{SeqPaxosConfig, Transfer};
pub use messages::Message;

use crate::ProposeError;
use crate::batcher::Batcher;
use crate::config::Configuration;
use crate::config::{ConfigError, StartInfo};
use crate::dedup::Dedup;
use crate::event::Event;
use crate::protocol::{ConfigChange, ConfigKind, Delivery, Outbox, Protocol, Status};
use crate::replog::EntryBody;
use crate::storage::{LogStore, StorageError};
use crate::types::{Ballot, Batch, Micros, NodeId, ValueId};
use ble::{Ble, ballot_n};
use bytes::Bytes;
use leader::LeaderState;

pub type Out = Outbox<Message>;

/// Bytes of decided entries read from the store per read while delivering.
const DELIVER_READ_BYTES: usize = 8 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
}

/// The phase of `state` (`⊥` is `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    None,
    Prepare,
    Accept,
}

/// One replica of one Sequence Paxos configuration.
pub struct SeqPaxos {
    pub(crate) cfg: SeqPaxosConfig,
    pub(crate) me: NodeId,
    pub(crate) now: Micros,
    pub(crate) store: Box<dyn LogStore + Send>,
    pub(crate) ble: Ble,
    pub(crate) role: Role,
    pub(crate) phase: Phase,
    /// The leader this node follows or is, with its ballot: the latest of what BLE elected
    /// and what this node promised. Where proposals go.
    pub(crate) leader_hint: Option<Ballot>,
    pub(crate) ld: LeaderState,
    /// Follower: an `Accepted` is owed to the leader at the next flush.
    pub(crate) accepted_owed: bool,
    /// Follower: the highest `Decide` of its promised round that arrived before that
    /// round's `AcceptSync` (reordered), applied once the sync is (`follower.rs`).
    pub(crate) early_decide: Option<(Ballot, u64)>,
    /// Follower: when the phase last changed, and when it last asked to be prepared.
    pub(crate) phase_since_us: Micros,
    pub(crate) prepare_req_us: Option<Micros>,
    /// Follower: read-index probes to answer at the next flush.
    pub(crate) read_acks: Vec<(NodeId, Ballot, u64)>,
    pub(crate) amnesic: bool,
    /// Amnesic: the promises of the others heard so far (`None` once recovered), and when
    /// they were last asked.
    pub(crate) recovering: Option<std::collections::BTreeMap<NodeId, Ballot>>,
    pub(crate) recover_asked_us: Option<Micros>,
    pub(crate) batcher: Batcher,
    pub(crate) last_leader_node: Option<NodeId>,
    /// Learner: entries up to this one were handed to the application (or skipped).
    pub(crate) delivered: u64,
    pub(crate) dedup: Dedup,
    /// BLE's messages of the current input, moved into the outbox afterwards.
    pub(crate) ble_out: Vec<(NodeId, Message)>,
    pub(crate) started: bool,
    // Reconfiguration (`reconfig.rs`).
    /// This node is a member of its configuration (else it waits for a stop-sign that
    /// names it, serves its decided log and forwards proposals).
    pub(crate) member: bool,
    /// The index of the stop-sign that ended the previous configuration: this
    /// configuration's log starts after it (0: the first configuration, or not known).
    pub(crate) base: u64,
    pub(crate) incarnation: u32,
    /// This life started without its state and was not repaired yet: amnesic in the
    /// configuration it enters next too.
    pub(crate) amnesic_life: bool,
    /// The learner delivered this configuration's stop-sign `(index, next, its ballot)`:
    /// entered at the end of the input (`after_input`).
    pub(crate) pending_ss: Option<(u64, Configuration, Ballot)>,
    pub(crate) fetch: Option<reconfig::Fetch>,
    pub(crate) pushes: std::collections::BTreeMap<NodeId, reconfig::Push>,
    /// New members to tell of the stop-sign that started this configuration, with when
    /// they were last told.
    pub(crate) notify: std::collections::BTreeMap<NodeId, Option<Micros>>,
    /// Proposals held between configurations (see `reconfig.rs`).
    pub(crate) held: Vec<Batch>,
    /// Rate limit of notices (0) and queries (1) per peer.
    pub(crate) told: std::collections::BTreeMap<(NodeId, u8), Micros>,
    /// Turns the member an outsider forwards proposals to.
    pub(crate) forward_turn: usize,
    /// An outsider last asked for the decided log (to follow it).
    pub(crate) follow_asked_us: Option<Micros>,
    // Snapshots (`snapshot.rs`).
    /// This node's latest snapshot, served to peers in chunks.
    pub(crate) snap_server: crate::snapshot_transfer::SnapshotServer,
    /// A peer's snapshot on its way here.
    pub(crate) snap_fetcher: crate::snapshot_transfer::SnapshotFetcher,
    pub(crate) snap_fetch_retries: u32,
    /// The log store's snapshot, for the application on the first outbox: a restart whose
    /// driver restored an older snapshot, or none.
    pub(crate) pending_install: Option<crate::protocol::Snapshot>,
    /// A snapshot was written outside an input: the next outbox syncs it.
    pub(crate) snapshot_unsynced: bool,
}

impl SeqPaxos {
    /// A replica of `cfg` on node `me`, recovering what `store` holds.
    ///
    /// **The construction contract** (reconfiguration, `reconfig.rs`): `cfg` names the
    /// configuration the operator knows to be current, `config_id` and `members`. A node
    /// that is not among `members` is built all the same: it is a *spare* (a node about to
    /// be added, or one removed) that waits, takes no part in Sequence Paxos, forwards the
    /// proposals made to it to the members, and serves its decided log. Once a stop-sign
    /// that names it is decided and it learns of it (a `StopSigned` from a node past it, or
    /// the answer to its query when a member of a later configuration contacts it), it
    /// fetches the log up to the stop-sign and becomes a member. A store that recorded a
    /// configuration (a durable restart after one) wins over `cfg`'s `config_id` and
    /// `members`; the rest of `cfg` (timers, limits, transfer mode) is always `cfg`'s.
    /// (A new node built instead with the *next* configuration, itself a member, is a
    /// plain member of it with an empty log: `c_{i+1}`'s leader synchronises it from entry
    /// 1 by `AcceptSync` once `c_{i+1}` runs. That works too; the spare is the way of
    /// §2.4.3 and §4.4, and the one that can be built before `c_{i+1}` is decided on.)
    pub fn new(
        mut cfg: SeqPaxosConfig,
        me: NodeId,
        start: StartInfo,
        mut store: Box<dyn LogStore + Send>,
    ) -> Result<SeqPaxos, ConfigError> {
        cfg.validate()?;
        let mut base = 0;
        let mut notify = std::collections::BTreeMap::new();
        let mut fetch_rec = None;
        if let Some(rec) = store.stop_sign() {
            let rec = reconfig::ConfigRecord::decode(rec).map_err(|e| ConfigError {
                field: "store",
                reason: format!("the stored configuration record does not decode: {e}"),
            })?;
            // The record wins: the store knows where its log stands, the operator's
            // configuration may be older or newer (a newer one is learned anew).
            cfg.config_id = rec.config.id;
            cfg.members = rec.config.members;
            base = rec.base;
            notify = rec.notify.into_iter().map(|n| (n, None)).collect();
            fetch_rec = rec.fetch;
            cfg.validate()?;
        }
        let member = cfg.contains(me);
        let incarnation = start.ballot_incarnation()?;
        let amnesic_life = start.incarnation > 0 && !store.is_durable();
        if !amnesic_life {
            // Its state is whole: a later restart on this store is not amnesic (issue 33,
            // suspect 2: a life that lost its state stays amnesic across crashes until its
            // repair, `follower.rs`).
            store.mark_whole();
        }
        let amnesic = amnesic_life && member;
        let promised = store.promised();
        // A restarted node starts its BLE ballot above what it promised (otherwise BLE could
        // elect it with a ballot Sequence Paxos refuses, General line 19, and nobody would
        // prepare).
        let start_n = if promised.is_zero() {
            0
        } else {
            ballot_n(promised).saturating_add(1)
        };
        let mut ble = Ble::new(&cfg, me, incarnation, start_n);
        ble.set_candidate(!amnesic);
        // A compacted log starts after its snapshot: the learner's state there comes from
        // it, the application's too (on the first outbox, unless `restore_snapshot` hands
        // it one as recent).
        let compacted = store.first_index().saturating_sub(1);
        let (delivered, dedup, pending_install) = match store.snapshot() {
            Some(ls) => {
                let (snap, st) =
                    snapshot::read_store_snapshot(ls).map_err(|reason| ConfigError {
                        field: "store",
                        reason,
                    })?;
                (ls.index, st.dedup, Some(snap))
            }
            None if compacted > 0 => {
                return Err(ConfigError {
                    field: "store",
                    reason: format!(
                        "the log store was compacted up to entry {compacted} without a snapshot"
                    ),
                });
            }
            None => (0, Dedup::default(), None),
        };
        let mut snap_server = crate::snapshot_transfer::SnapshotServer::default();
        if let Some(s) = &pending_install {
            snap_server.set_latest(s);
        }
        Ok(SeqPaxos {
            me,
            now: 0,
            ble,
            role: Role::Follower,
            phase: Phase::None,
            leader_hint: None,
            ld: LeaderState::default(),
            accepted_owed: false,
            early_decide: None,
            phase_since_us: 0,
            prepare_req_us: None,
            read_acks: Vec::new(),
            amnesic,
            recovering: amnesic.then(std::collections::BTreeMap::new),
            recover_asked_us: None,
            batcher: Batcher::new(me, start.start_seq),
            last_leader_node: None,
            delivered,
            dedup: dedup.with_mutation(cfg.mutation.get()),
            ble_out: Vec::new(),
            started: false,
            member,
            base,
            incarnation,
            amnesic_life,
            pending_ss: None,
            fetch: None,
            pushes: std::collections::BTreeMap::new(),
            notify,
            held: Vec::new(),
            told: std::collections::BTreeMap::new(),
            forward_turn: 0,
            follow_asked_us: None,
            snap_server,
            snap_fetcher: crate::snapshot_transfer::SnapshotFetcher::default(),
            snap_fetch_retries: 0,
            pending_install,
            snapshot_unsynced: false,
            store,
            cfg,
        })
        .map(|mut sp| {
            if let Some((target, next)) = fetch_rec
                && target > sp.store.decided_idx()
            {
                // A fetch under way when the node stopped: it resumes (its sources are
                // the members of both configurations).
                let mut sources: Vec<NodeId> = Vec::new();
                for m in sp.cfg.members.iter().chain(&next.members) {
                    if m.id != me && !sources.contains(&m.id) {
                        sources.push(m.id);
                    }
                }
                sp.fetch = Some(reconfig::Fetch {
                    config: next.id.saturating_sub(1),
                    next,
                    target,
                    sources,
                    buffer: std::collections::BTreeMap::new(),
                    asked: std::collections::BTreeMap::new(),
                    tries: 0,
                    progress_us: 0,
                    tell: std::collections::BTreeSet::new(),
                });
            }
            sp
        })
    }

    pub fn config(&self) -> &SeqPaxosConfig {
        &self.cfg
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The leader this node follows or is.
    pub fn leader(&self) -> Option<NodeId> {
        self.leader_hint.map(|b| b.node)
    }

    pub(crate) fn config_id(&self) -> u64 {
        self.cfg.config_id
    }

    pub(crate) fn others(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.cfg
            .members
            .iter()
            .map(|m| m.id)
            .filter(|&id| id != self.me)
    }

    pub(crate) fn is_member(&self, n: NodeId) -> bool {
        self.cfg.contains(n)
    }

    pub(crate) fn mutation(&self, m: crate::mutation::Mutation) -> bool {
        crate::mutation::on(self.cfg.mutation.get(), m)
    }

    /// A store operation failed: this node can no longer keep its promises. Panics with the
    /// store's reason (the simulator reports it as a violation with its replay line; the
    /// runtime stops the node), as the ring protocols do with their acceptor store.
    pub(crate) fn store_failed(&self, what: &str, e: StorageError) -> ! {
        panic!("{}: log store failed while {what}: {e}", self.me)
    }

    pub(crate) fn set_leader_hint(&mut self, b: Ballot) {
        if self.leader_hint.is_none_or(|h| h < b) {
            self.leader_hint = Some(b);
        }
    }

    /// `v_a`'s length.
    pub(crate) fn log_len(&self) -> u64 {
        self.store.last_index()
    }

    /// Moves the decided index to `l` (at most the log's length) and delivers (Learner
    /// lines 17-21).
    pub(crate) fn decide(&mut self, l: u64, out: &mut Out) {
        let l = l.min(self.log_len());
        if l > self.store.decided_idx()
            && let Err(e) = self.store.set_decided_idx(l)
        {
            self.store_failed("moving the decided index", e);
        }
        self.deliver(out);
    }

    /// Hands every decided entry not yet delivered to the application, in order.
    pub(crate) fn deliver(&mut self, out: &mut Out) {
        if let Some(snapshot) = self.pending_install.take() {
            out.events.push(Event::SnapshotInstalled {
                upto: snapshot.upto,
                app_bytes: snapshot.app.len(),
            });
            out.installs.push(crate::protocol::Install {
                snapshot,
                position: out.deliveries.len(),
            });
        }
        let decided = self.store.decided_idx();
        // A log that starts after `delivered` (trimmed, or a snapshot installed) continues
        // from its start.
        self.delivered = self
            .delivered
            .max(self.store.first_index().saturating_sub(1));
        while self.delivered < decided && self.pending_ss.is_none() {
            let entries =
                match self
                    .store
                    .entries(self.delivered + 1, decided + 1, DELIVER_READ_BYTES)
                {
                    Ok(e) => e,
                    Err(e) => self.store_failed("reading decided entries", e),
                };
            if entries.is_empty() {
                break;
            }
            for e in entries {
                assert_eq!(
                    e.index,
                    self.delivered + 1,
                    "{}: decided entries must be delivered in order",
                    self.me
                );
                self.delivered = e.index;
                match EntryBody::decode(&e.payload) {
                    Ok(EntryBody::Values(batch)) => self.deliver_batch(e.index, batch, out),
                    Ok(EntryBody::Noop | EntryBody::Membership(_)) => {}
                    Ok(EntryBody::StopSign(next)) => {
                        // §2.4.3: the configuration changes right after the stop-sign, at
                        // this point of the one sequence.
                        out.config_changes.push(ConfigChange {
                            kind: ConfigKind::Regular,
                            config: next.clone(),
                            position: out.deliveries.len(),
                        });
                        if next.id > self.cfg.config_id && e.index > self.base {
                            // This configuration's own stop-sign: enter the next one at the
                            // end of the input; nothing of this one follows it.
                            self.pending_ss = Some((e.index, next, e.ballot));
                            return;
                        }
                    }
                    Err(err) => out.events.push(Event::BadEntry {
                        index: e.index,
                        detail: err.to_string(),
                    }),
                }
            }
        }
    }

    fn deliver_batch(&mut self, index: u64, batch: Batch, out: &mut Out) {
        if let Some(ack) = self.batcher.on_decided(batch.key(), self.now) {
            out.acks.push(ack);
        }
        if self.dedup.first_time_batch(&batch, index) {
            out.deliveries.push(Delivery::new(index, batch));
        }
    }

    /// A ready batch goes to the leader, or into the log here.
    pub(crate) fn submit(&mut self, batch: Batch, out: &mut Out) {
        if self.participates() && self.role == Role::Leader {
            self.leader_propose(batch, out);
            return;
        }
        if let Some(l) = self.leader().filter(|&l| l != self.me) {
            out.send(l, Message::Forward(batch));
            return;
        }
        if !self.member && self.fetch.is_none() {
            // A spare or removed node: to the members in turn (one forwards it once to its
            // leader).
            self.forward_to_member(batch, out);
        }
        // No leader known: the batch waits in the batcher, which re-sends it once one is.
    }

    pub(crate) fn forward_to_member(&mut self, batch: Batch, out: &mut Out) {
        let n = self.cfg.members.len();
        if n == 0 {
            return;
        }
        self.forward_turn = self.forward_turn.wrapping_add(1);
        let to = self.cfg.members[self.forward_turn % n].id;
        if to != self.me {
            out.send(to, Message::Forward(batch));
        }
    }

    fn proposer_tick(&mut self, out: &mut Out) {
        let leader = self.leader();
        let changed = leader.is_some() && leader != self.last_leader_node;
        self.last_leader_node = leader;
        let limits = self.cfg.batch_limits();
        let mut to_send = Vec::new();
        self.batcher.tick(self.now, changed, &limits, &mut to_send);
        for b in to_send {
            self.submit(b, out);
        }
        self.flush_held(out);
    }

    /// What every input does first: time, the first start (BLE, the re-delivery of the
    /// decided log), and any stop-sign delivered meanwhile.
    fn begin(&mut self, now: Micros, out: &mut Out) {
        self.now = self.now.max(now);
        if !self.started {
            self.started = true;
            if self.participates() {
                self.ble.start(self.now, &mut self.ble_out);
            }
            // A restarted node delivers its decided entries again to its new application.
            self.deliver(out);
            self.drain_ble(out);
        }
        self.after_input(out);
    }

    /// A message of the configuration this node participates in.
    fn on_paxos_message(&mut self, from: NodeId, msg: Message, out: &mut Out) {
        if self.recovering.is_some() {
            // An amnesic node takes part in nothing until it recovered a promise.
            match msg {
                Message::HeartbeatRequest(m) => {
                    self.ble.on_request(from, &m, &mut self.ble_out);
                    self.drain_ble(out);
                }
                Message::HeartbeatReply(m) => self.ble.on_reply(from, &m),
                Message::PromiseReply {
                    promised,
                    incarnation,
                    ..
                } => self.on_promise_reply(from, promised, incarnation, out),
                Message::PromiseQuery { incarnation, .. } => {
                    self.on_promise_query(from, incarnation, out)
                }
                _ => {}
            }
            return;
        }
        match msg {
            Message::PromiseQuery { incarnation, .. } => {
                self.on_promise_query(from, incarnation, out)
            }
            Message::PromiseReply { .. } => {}
            Message::HeartbeatRequest(m) => {
                self.ble.on_request(from, &m, &mut self.ble_out);
                self.drain_ble(out);
            }
            Message::HeartbeatReply(m) => self.ble.on_reply(from, &m),
            Message::Prepare(m) => self.on_prepare(from, m, out),
            Message::Promise(m) => self.on_promise(from, m, out),
            Message::AcceptSync(m) => self.on_accept_sync(from, m, out),
            Message::Accept(m) => self.on_accept(from, m, out),
            Message::Accepted(m) => self.on_accepted(from, m, out),
            Message::Decide(m) => self.on_decide(from, m, out),
            Message::PrepareReq { .. } => self.on_prepare_req(from, out),
            Message::Nack(m) => self.on_nack(from, m, out),
            Message::ReadProbe { n, round, .. } => self.on_read_probe(from, n, round),
            Message::ReadAck { n, round, .. } => self.on_read_ack(from, n, round, out),
            Message::Forward(_)
            | Message::StopSigned(_)
            | Message::StopSignQuery { .. }
            | Message::FetchReq(_)
            | Message::FetchResp(_)
            | Message::FetchAck { .. }
            | Message::SnapshotOffer { .. }
            | Message::SnapshotFetch(_)
            | Message::SnapshotChunk(_) => {}
        }
    }

    /// `Status::configuration_pending`: the configuration a stop-sign of this one names,
    /// once it is in the log here (or being fetched) and until this node enters it.
    fn pending_configuration(&self) -> Option<Configuration> {
        if let Some(f) = &self.fetch {
            return Some(f.next.clone());
        }
        if let Some((_, next, _)) = &self.pending_ss {
            return Some(next.clone());
        }
        let last = self.log_len();
        if last <= self.base {
            return None;
        }
        let e = self
            .store
            .entries(last, last + 1, 0)
            .ok()?
            .into_iter()
            .next()?;
        match EntryBody::decode(&e.payload) {
            Ok(EntryBody::StopSign(c)) if c.id > self.cfg.config_id => Some(c),
            _ => None,
        }
    }

    /// `Status::followers`: at a leader in the accept phase, each other member's accepted
    /// length (`las`) and the decided length it was sent.
    fn follower_progress(&self) -> Vec<crate::protocol::FollowerProgress> {
        if !(self.participates() && self.role == Role::Leader && self.phase == Phase::Accept) {
            return Vec::new();
        }
        self.others()
            .map(|n| {
                let accepted = self.ld.las.get(&n).copied().unwrap_or(0);
                let sent = self.ld.progress.get(&n).map_or(0, |p| p.decided_sent);
                crate::protocol::FollowerProgress {
                    node: n,
                    accepted,
                    decided: sent.min(accepted),
                    voter: true,
                }
            })
            .collect()
    }

    pub(crate) fn drain_ble(&mut self, out: &mut Out) {
        for (to, m) in self.ble_out.drain(..) {
            out.sends.push((to, m));
        }
    }
}

impl Protocol for SeqPaxos {
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
        self.begin(now, out);
        let limits = self.cfg.batch_limits();
        let mut ready = Vec::new();
        let r = self
            .batcher
            .propose_many(self.now, values, &limits, &mut ready);
        for b in ready {
            self.submit(b, out);
        }
        self.after_input(out);
        r
    }

    fn receive(&mut self, now: Micros, from: NodeId, msg: Message, out: &mut Out) {
        self.begin(now, out);
        if from == self.me {
            return;
        }
        match msg {
            // Reconfiguration's messages, from any node, of any configuration.
            Message::StopSigned(m) => self.on_stop_signed(from, m, out),
            Message::StopSignQuery { config } => self.on_stop_sign_query(from, config, out),
            Message::FetchReq(m) => self.on_fetch_req(from, m, out),
            Message::FetchResp(m) => self.on_fetch_resp(from, m, out),
            Message::FetchAck { config, upto } => self.on_fetch_ack(from, config, upto, out),
            // Snapshots, from any node, of any configuration (`snapshot.rs`).
            Message::SnapshotOffer { upto, .. } => self.on_snapshot_offer(from, upto, out),
            Message::SnapshotFetch(f) => self.on_snapshot_fetch(from, f, out),
            Message::SnapshotChunk(c) => self.on_snapshot_chunk(from, c, out),
            // A forwarded proposal, which any configuration takes.
            Message::Forward(b) => self.on_forward(from, b, out),
            msg => {
                let Some(c) = msg.config() else {
                    return;
                };
                let mine = self.config_id();
                if c >= mine && self.notify.remove(&from).is_some() {
                    self.write_record(out);
                }
                if c < mine {
                    // The sender is behind: tell it what started this configuration.
                    self.tell_stop_signed(from, out);
                } else if c > mine {
                    // The sender is ahead: this configuration ended; ask how.
                    self.ask_stop_sign(from, out);
                } else if self.participates() && self.is_member(from) {
                    self.on_paxos_message(from, msg, out);
                }
            }
        }
        self.drain_ble(out);
        self.after_input(out);
    }

    fn tick(&mut self, now: Micros, out: &mut Out) {
        self.begin(now, out);
        if self.participates() {
            if let Some(top) = self.ble.tick(self.now, &mut self.ble_out) {
                self.on_leader(top, out);
            }
            self.drain_ble(out);
        }
        self.proposer_tick(out);
        self.reconfig_tick(out);
        self.snapshot_fetch_tick(out);
        if self.participates() {
            if self.recovering.is_some() {
                self.recover_promise(out);
            } else {
                match self.role {
                    Role::Leader => self.leader_flush(out),
                    Role::Follower => self.follower_flush(out),
                }
            }
        }
        self.after_input(out);
    }

    fn tick_interval_us(&self) -> Micros {
        self.cfg
            .batch_linger_us
            .max(1)
            .min(self.cfg.heartbeat_interval_us / 4)
            .max(1)
    }

    fn can_propose(&self) -> bool {
        self.batcher.has_room(&self.cfg.batch_limits())
    }

    fn status(&self) -> Status {
        Status {
            node: self.me,
            coordinator: self.leader(),
            ballot: self.store.promised().max(self.ble.ballot()),
            leading: self.participates()
                && self.role == Role::Leader
                && self.phase == Phase::Accept,
            delivered_upto: self.delivered,
            decided_max: self.store.decided_idx().max(self.ld.l_c),
            values_in_flight: self.batcher.values_in_flight(),
            // Not repaired for every configuration it may take part in: amnesic here, or
            // repaired here with a log that ends in this configuration's stop-sign (it is
            // amnesic again in the next one), or a spare or removed node that restarted
            // without its state (amnesic in the configuration that names it). An operator
            // (and the simulator's f rule) waits for this to clear before restarting
            // another member: two members unrepaired at once can leave a configuration
            // without a majority that may prepare (issue 33, suspect 6).
            amnesic: self.amnesic || self.amnesic_life,
            view: self.cfg.members.iter().map(|m| m.id).collect(),
            log_bytes: self.store.log_bytes(),
            configuration: Some(self.cfg.configuration()),
            configuration_pending: self.pending_configuration(),
            followers: self.follower_progress(),
            ..Status::default()
        }
    }

    fn sync_storage(&mut self) -> Result<(), StorageError> {
        self.store.sync()
    }

    fn begin_sync_storage(&mut self) -> Result<Option<crate::storage::SyncJob>, StorageError> {
        self.store.begin_sync()
    }

    fn end_sync_storage(&mut self, result: Result<(), StorageError>) -> Result<(), StorageError> {
        self.store.end_sync(&result);
        result
    }

    fn log_bytes(&self) -> u64 {
        self.store.log_bytes()
    }

    fn snapshots_supported(&self) -> bool {
        true
    }

    fn take_snapshot(&mut self, app: Bytes) -> Result<crate::protocol::Snapshot, String> {
        self.take_snapshot_here(app)
    }

    fn restore_snapshot(&mut self, snapshot: &crate::protocol::Snapshot) -> Result<(), String> {
        self.restore_snapshot_here(snapshot)
    }

    fn peer_reconnected(&mut self, now: Micros, peer: NodeId, out: &mut Out) {
        self.now = self.now.max(now);
        if !self.participates() || !self.is_member(peer) || peer == self.me {
            return;
        }
        match self.role {
            // The session to `peer` was new: what was in flight on the old one may be lost.
            Role::Leader => self.prepare_one(peer, out),
            Role::Follower if self.leader() == Some(peer) => self.ask_prepare(out, true),
            Role::Follower => {}
        }
    }

    fn read_index(&mut self, now: Micros, id: u64, out: &mut Out) -> Result<(), ProposeError> {
        self.begin(now, out);
        if !self.participates() {
            return Err(ProposeError::NotLeader { hint: None });
        }
        self.leader_read_index(id, out)
    }

    /// Seed 001 §2.4.3: the leader proposes the stop-sign `SS_i` naming `config` (its
    /// members; the id becomes `i + 1`). `Ok`: proposed, in effect where the
    /// `ConfigChange` appears among the deliveries. `NotLeader` (with the leader known)
    /// at any other node, `Busy` while the leader prepares or a stop-sign is already in
    /// its log.
    fn reconfigure(
        &mut self,
        now: Micros,
        config: Configuration,
        out: &mut Out,
    ) -> Result<(), crate::protocol::ReconfigureError> {
        self.begin(now, out);
        let r = self.propose_stop_sign(config, out);
        self.after_input(out);
        r
    }
}
