//! raft-rs (`raft` =0.7.0, TiKV's Raft, seed 001 §2.5 and §3.5) as a protocol core behind
//! our [`Protocol`] trait.
//!
//! How we drive it: seed 001's Algorithm 1 (`RaftReplica using TiKV raft-rs`) and the
//! crate's `RawNode` docs: `tick()` every tick period, `step` every message, `propose` a
//! batch, and handle every `Ready` in the order raft-rs asks (send the leader's messages,
//! apply committed entries, append the entries and the hard state to the store, send the
//! messages that wait for persistence, `advance`, then the `LightReady`'s commit index,
//! messages and committed entries, `advance_apply`). The seed fetched the `Ready` on a 1 ms
//! timer (`d_ready`); we handle it after every input (the driver calls `tick` after every
//! batch of inputs too), so no message or delivery waits for a timer.
//!
//! What is ours, shared with our own protocols (`common.rs`): a value is batched by our
//! `Batcher`, a batch is one entry (`EntryBody::Values(batch).encode()`), committed entries
//! are delivered in log order (instance = raft index; the new leader's empty entry and any
//! other entry without a batch of ours deliver nothing) on every node, de-duplicated by
//! `Dedup`, and acknowledged at their proposer.
//!
//! Adapter choices the crate forced (each also at its place below):
//!
//! - **Followers forward through raft-rs itself.** A follower's `RawNode::propose` is not
//!   dropped in 0.7.0: `step_follower` re-addresses the `MsgPropose` to the leader it knows
//!   and sends it (a candidate, or a follower that knows no leader, drops it with
//!   `ProposalDropped`). So a batch is proposed where it was made; with no leader known it
//!   waits in our batcher, which re-offers it when the leader changes or its re-send
//!   timeout runs out (a forwarded proposal lost on the way is never re-sent by raft-rs).
//! - **Reads are re-asked.** raft-rs drops a `read_index` request without a word when no
//!   leader is known, when the leader has not yet committed an entry of its term, or when
//!   the request or its answer is lost. The adapter keeps each read it accepted and asks
//!   again every `read_retry_us` and when the leader changes, until a `ReadState` for it
//!   comes back; each read is answered once.
//! - **Seeded election timeouts.** raft-rs draws each randomized election timeout from
//!   `rand::thread_rng()`, which nobody can seed, so no run would replay; our protocols
//!   take randomness from an injected seeded source (the guide's sans-io rule). After
//!   every call into raft-rs that may have reset the election timer (its term or role
//!   changed, or the timeout is not the one we set: every `reset` raft-rs makes does one of
//!   these), the adapter replaces raft-rs' draw with one from the same range,
//!   [`election_tick`, 2 × `election_tick`), by a splitmix64 seeded with `election_seed`,
//!   the node and its incarnation, through `Raft::set_randomized_election_timeout` (public
//!   but `#[doc(hidden)]`, "for testing": acceptable with the version pinned exactly).
//! - **No reconfiguration yet.** raft-rs has joint-consensus conf changes
//!   (`propose_conf_change`); not in this round: `reconfigure` refuses with `Unsupported`.
//! - **In-memory storage.** `raft::storage::MemStorage` (what the seed used, §4.3.1).
//!   Every node starts from the same `ConfState` (all members voters) and an empty log, so
//!   no bootstrap snapshot is needed. A restart with [`RaftRsCore::new`] starts from
//!   nothing, forgetting its term, vote and log, which Raft does not survive (raft-rs
//!   panics: "to_commit .. is out of range [last_index 0]"). `MemStorage` is shared by
//!   its clones: [`RaftRsCore::with_storage`] given the same one at every restart of a node
//!   finds everything its earlier life wrote, as a durable store with a sync after every
//!   write would under process crashes (the simulator's default crash model).
//! - **Serialization.** raft-rs' own protobuf encoding (`protobuf-codec`: protobuf 2.28,
//!   `write_to_bytes`; decoding with `parse_from_carllerche_bytes`, which slices entry data
//!   out of the frame without a copy). `prost-codec` would need a `protoc` at build time;
//!   `protobuf-codec`'s build uses the `protoc` shipped inside `protobuf-build`.

use crate::common::{
    CrateClock, Front, crate_id, default_batch_limits, entry_bytes, node_of, validate_batch_limits,
    validate_nodes,
};
use abcast_core::batcher::BatchLimits;
use abcast_core::codec::{Encoder, WireMessage};
use abcast_core::config::{ConfigError, StartInfo};
use abcast_core::types::{Ballot, Batch, Micros, NodeId, ValueId};
use abcast_core::{DecodeError, Outbox, ProposeError, Protocol, ReadState, Status};
use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, EntryType, Message as RaftMessage};
use raft::storage::MemStorage;
use raft::{Config, RawNode, ReadOnlyOption, StateRole, Storage};
use std::collections::BTreeMap;
use std::fmt;

/// The frame kind of [`RaftRsMessage`].
pub const KIND_RAFT: u8 = 1;

/// A message of the raft-rs core: one raft-rs message, in raft-rs' protobuf encoding.
#[derive(Clone, Debug, PartialEq)]
pub struct RaftRsMessage(pub RaftMessage);

impl WireMessage for RaftRsMessage {
    fn kind(&self) -> u8 {
        KIND_RAFT
    }

    fn encode(&self, enc: &mut Encoder) {
        // Proto3 messages have no required fields, so writing to a vector cannot fail; an
        // empty body would decode as a local message, which `step` refuses.
        let body = self.0.write_to_bytes().unwrap_or_default();
        enc.put_bytes(&Bytes::from(body));
    }

    fn decode(kind: u8, body: Bytes) -> Result<Self, DecodeError> {
        if kind != KIND_RAFT {
            return Err(DecodeError::UnknownKind(kind));
        }
        RaftMessage::parse_from_carllerche_bytes(&body)
            .map(RaftRsMessage)
            .map_err(|e| DecodeError::Invalid {
                what: "raft message",
                detail: e.to_string(),
            })
    }
}

/// Configuration of a [`RaftRsCore`].
#[derive(Clone, Debug)]
pub struct RaftRsCoreConfig {
    /// Every member (all voters), our ids.
    pub nodes: Vec<NodeId>,
    /// How often raft-rs' `tick()` is called: 10 ms, as for OmniPaxos (the seed ticked
    /// raft-rs every 100 ms with a 5 s election timeout, too slow for the simulator's
    /// faults-remain bound of 1.5 s).
    pub tick_us: Micros,
    /// `Config::heartbeat_tick`: 2, the crate's default (`Config::default`): a heartbeat
    /// every 20 ms.
    pub heartbeat_tick: usize,
    /// `Config::election_tick`: 20, the crate's default and its doc's advice ("We suggest
    /// election_tick = 10 * HeartbeatTick"): an election timeout drawn in [200, 400) ms.
    pub election_tick: usize,
    /// `Config::max_size_per_msg`: 1 MiB, TiKV's `raft-max-size-per-msg`; the crate's
    /// default 0 means one entry per append message.
    pub max_size_per_msg: u64,
    /// `Config::max_inflight_msgs`: 256, the crate's default and TiKV's.
    pub max_inflight_msgs: usize,
    /// `Config::check_quorum`: on, as TiKV runs it (a leader that lost its quorum steps
    /// down).
    pub check_quorum: bool,
    /// `Config::pre_vote`: on, TiKV's default (`prevote = true`): a node cut off and back
    /// does not disrupt the leader (Raft thesis §9.6).
    pub pre_vote: bool,
    /// `Config::batch_append`: off, the crate's default (we drain every `Ready` at once,
    /// so appends to one peer rarely meet in one).
    pub batch_append: bool,
    /// `Config::skip_bcast_commit`: off, the crate's default. On (TiKV's choice) a follower
    /// would learn a commit only with the next append or heartbeat, and every node here
    /// delivers.
    pub skip_bcast_commit: bool,
    /// The proposer's batching and window, the same as our protocols'.
    pub batch: BatchLimits,
    /// An unanswered read is asked again after this long (module comment).
    pub read_retry_us: Micros,
    /// Seeds the election timeouts' draws, with the node id and its incarnation (module
    /// comment, "Seeded election timeouts").
    pub election_seed: u64,
    /// Reads waiting for their `ReadState`, at most (then `Busy`).
    pub reads_pending_max: usize,
}

impl RaftRsCoreConfig {
    /// The race's configuration for `nodes` (see each field).
    pub fn new(nodes: &[NodeId]) -> RaftRsCoreConfig {
        RaftRsCoreConfig {
            nodes: nodes.to_vec(),
            tick_us: 10_000,
            heartbeat_tick: 2,
            election_tick: 20,
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            batch_append: false,
            skip_bcast_commit: false,
            batch: default_batch_limits(),
            read_retry_us: 100_000,
            election_seed: 0,
            reads_pending_max: 4096,
        }
    }

    /// Checks every field for node `me` (raft-rs' own `Config::validate` included).
    pub fn validate(&self, me: NodeId) -> Result<(), ConfigError> {
        validate_nodes(&self.nodes, me)?;
        validate_batch_limits(&self.batch)?;
        for (field, v) in [
            ("tick_us", self.tick_us),
            ("read_retry_us", self.read_retry_us),
            ("reads_pending_max", self.reads_pending_max as u64),
        ] {
            if v == 0 {
                return Err(ConfigError {
                    field,
                    reason: "must be > 0".into(),
                });
            }
        }
        self.raft_config(me).validate().map_err(|e| ConfigError {
            field: "raft",
            reason: e.to_string(),
        })
    }

    fn raft_config(&self, me: NodeId) -> Config {
        Config {
            id: crate_id(me),
            election_tick: self.election_tick,
            heartbeat_tick: self.heartbeat_tick,
            applied: 0,
            max_size_per_msg: self.max_size_per_msg,
            max_inflight_msgs: self.max_inflight_msgs,
            check_quorum: self.check_quorum,
            pre_vote: self.pre_vote,
            read_only_option: ReadOnlyOption::Safe,
            skip_bcast_commit: self.skip_bcast_commit,
            batch_append: self.batch_append,
            ..Config::default()
        }
    }
}

/// Counters of what the adapter refused, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RaftRsCounters {
    /// Messages whose sender or receiver did not match the link, or from a non-member.
    pub refused_messages: u64,
    /// Messages raft-rs' `step` refused (a local message type, an unknown peer).
    pub step_errors: u64,
    /// Proposals raft-rs dropped (no leader, a leader transfer): re-offered by our batcher.
    pub proposals_dropped: u64,
    /// Reads asked again.
    pub reads_reasked: u64,
    /// Committed entries that are not an entry of ours.
    pub undecodable_entries: u64,
    /// Store writes that failed (in-memory: only on a raft-rs inconsistency).
    pub store_errors: u64,
}

/// A read accepted and not yet answered.
#[derive(Clone, Copy, Debug)]
struct PendingRead {
    asked_us: Micros,
}

/// raft-rs as an abcast protocol (module comment).
pub struct RaftRsCore {
    cfg: RaftRsCoreConfig,
    /// The store held nothing of an earlier life.
    amnesic: bool,
    me: NodeId,
    raw: RawNode<MemStorage>,
    front: Front,
    clock: CrateClock,
    coordinator: Option<NodeId>,
    coordinator_changed: bool,
    reads: BTreeMap<u64, PendingRead>,
    /// The seeded source of election timeouts, the last one set, and the term and role
    /// it was set in.
    rng: u64,
    election_timeout_set: usize,
    election_timer_of: (u64, StateRole),
    counters: RaftRsCounters,
}

impl fmt::Debug for RaftRsCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaftRsCore")
            .field("me", &self.me)
            .field("term", &self.raw.raft.term)
            .field("coordinator", &self.coordinator)
            .field("committed", &self.raw.raft.raft_log.committed)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl RaftRsCore {
    /// Node `me` of the cluster `cfg.nodes`, starting its life `start` with an empty
    /// in-memory log whose configuration has every member as a voter.
    pub fn new(
        cfg: RaftRsCoreConfig,
        me: NodeId,
        start: StartInfo,
    ) -> Result<RaftRsCore, ConfigError> {
        RaftRsCore::with_storage(cfg, me, start, MemStorage::new())
    }

    /// Node `me` over `store`: one an earlier life of this node left (its hard state and
    /// log are recovered; raft-rs hands the committed entries out again from the first,
    /// and this new learner delivers them), or a new one, which gets the cluster's
    /// `ConfState`.
    pub fn with_storage(
        cfg: RaftRsCoreConfig,
        me: NodeId,
        start: StartInfo,
        store: MemStorage,
    ) -> Result<RaftRsCore, ConfigError> {
        cfg.validate(me)?;
        let kept = store.initial_state().is_ok_and(|s| s.initialized());
        if !kept {
            let voters: Vec<u64> = cfg.nodes.iter().map(|n| crate_id(*n)).collect();
            store.initialize_with_conf_state(ConfState::from((voters, Vec::new())));
        }
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let raw = RawNode::new(&cfg.raft_config(me), store, &logger).map_err(|e| ConfigError {
            field: "raft",
            reason: e.to_string(),
        })?;
        let mut core = RaftRsCore {
            amnesic: start.amnesic && !kept,
            front: Front::new(me, start, cfg.batch),
            clock: CrateClock::new(cfg.tick_us),
            me,
            raw,
            coordinator: None,
            coordinator_changed: false,
            reads: BTreeMap::new(),
            rng: cfg.election_seed
                ^ (u64::from(me.0) << 32)
                ^ start.incarnation.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            election_timeout_set: 0,
            election_timer_of: (0, StateRole::Follower),
            counters: RaftRsCounters::default(),
            cfg,
        };
        core.draw_election_timeout();
        Ok(core)
    }

    /// After raft-rs may have reset its election timer (its term or role changed, or the
    /// timeout is not ours), sets a timeout drawn from [`election_tick`, 2 ×
    /// `election_tick`) by our seeded generator (module comment).
    fn draw_election_timeout(&mut self) {
        let of = (self.raw.raft.term, self.raw.raft.state);
        if of == self.election_timer_of
            && self.raw.raft.randomized_election_timeout() == self.election_timeout_set
        {
            return;
        }
        self.election_timer_of = of;
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let e = self.cfg.election_tick;
        let t = e + (z % e as u64) as usize;
        self.raw.raft.set_randomized_election_timeout(t);
        self.election_timeout_set = t;
    }

    /// What the adapter refused so far.
    pub fn counters(&self) -> RaftRsCounters {
        RaftRsCounters {
            undecodable_entries: self.front.undecodable_entries,
            ..self.counters
        }
    }

    fn is_peer(&self, n: NodeId) -> bool {
        n != self.me && self.cfg.nodes.contains(&n)
    }

    /// Proposes a batch's entry here (raft-rs forwards it from a follower), or keeps it in
    /// the batcher while no leader is known.
    fn propose_batch(&mut self, batch: &Batch) {
        if self.coordinator.is_none() {
            return;
        }
        let data = Vec::from(entry_bytes(batch));
        if self.raw.propose(Vec::new(), data).is_err() {
            self.counters.proposals_dropped += 1;
        }
    }

    fn send_all(&mut self, msgs: Vec<RaftMessage>, out: &mut Outbox<RaftRsMessage>) {
        for m in msgs {
            match node_of(m.to) {
                Some(to) if self.is_peer(to) => out.send(to, RaftRsMessage(m)),
                _ => {}
            }
        }
    }

    fn committed(
        &mut self,
        now: Micros,
        entries: Vec<raft::eraftpb::Entry>,
        out: &mut Outbox<RaftRsMessage>,
    ) {
        for e in entries {
            if e.get_entry_type() == EntryType::EntryNormal {
                self.front.decided(now, e.index, &e.data, out);
            }
        }
    }

    /// Handles every `Ready` (module comment), in raft-rs' order.
    fn drain(&mut self, now: Micros, out: &mut Outbox<RaftRsMessage>) {
        // Each round leaves nothing pending but what it produced itself (the leader's
        // messages after its own append): a few rounds at most; the bound is a guard.
        for _ in 0..64 {
            if !self.raw.has_ready() {
                break;
            }
            let mut rd = self.raw.ready();
            let msgs = rd.take_messages();
            self.send_all(msgs, out);
            if !rd.snapshot().is_empty() {
                // Only after a compaction, which this adapter never does.
                let snap = rd.snapshot().clone();
                if self.raw.mut_store().wl().apply_snapshot(snap).is_err() {
                    self.counters.store_errors += 1;
                }
            }
            let committed = rd.take_committed_entries();
            self.committed(now, committed, out);
            if !rd.entries().is_empty() && self.raw.mut_store().wl().append(rd.entries()).is_err() {
                self.counters.store_errors += 1;
            }
            if let Some(hs) = rd.hs() {
                self.raw.mut_store().wl().set_hardstate(hs.clone());
            }
            for rs in rd.take_read_states() {
                self.read_answered(rs.index, &rs.request_ctx, out);
            }
            let persisted = rd.take_persisted_messages();
            self.send_all(persisted, out);
            let mut light = self.raw.advance(rd);
            if let Some(commit) = light.commit_index() {
                self.raw
                    .mut_store()
                    .wl()
                    .mut_hard_state()
                    .set_commit(commit);
            }
            let msgs = light.take_messages();
            self.send_all(msgs, out);
            let committed = light.take_committed_entries();
            self.committed(now, committed, out);
            self.raw.advance_apply();
        }
        self.note_coordinator();
        self.draw_election_timeout();
    }

    fn read_answered(&mut self, upto: u64, ctx: &[u8], out: &mut Outbox<RaftRsMessage>) {
        let Ok(id_bytes) = <[u8; 8]>::try_from(ctx) else {
            return;
        };
        let id = u64::from_le_bytes(id_bytes);
        if self.reads.remove(&id).is_some() {
            out.reads.push(ReadState { id, upto });
        }
    }

    fn ask_read(&mut self, id: u64) {
        self.raw.read_index(id.to_le_bytes().to_vec());
    }

    fn note_coordinator(&mut self) {
        let c = node_of(self.raw.raft.leader_id);
        if c != self.coordinator {
            self.coordinator = c;
            self.coordinator_changed = true;
        }
    }
}

impl Protocol for RaftRsCore {
    type Message = RaftRsMessage;

    fn node(&self) -> NodeId {
        self.me
    }

    fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        out: &mut Outbox<RaftRsMessage>,
    ) -> Result<ValueId, ProposeError> {
        // One value is a run of one.
        self.propose_many(
            now,
            abcast_core::Values::Each(std::slice::from_ref(&payload)),
            out,
        )
        .map(|(id, _)| id)
    }

    fn propose_many(
        &mut self,
        now: Micros,
        values: abcast_core::Values<'_>,
        out: &mut Outbox<RaftRsMessage>,
    ) -> Result<(ValueId, usize), ProposeError> {
        let mut ready = Vec::new();
        let r = self.front.propose_many(now, values, &mut ready);
        // Values that only joined the open batch change nothing raft-rs knows of: it is
        // asked for a `Ready` only when a batch was proposed to it.
        if !ready.is_empty() {
            for b in &ready {
                self.propose_batch(b);
            }
            self.drain(now, out);
        }
        r
    }

    fn receive(
        &mut self,
        now: Micros,
        from: NodeId,
        msg: RaftRsMessage,
        out: &mut Outbox<RaftRsMessage>,
    ) {
        let m = msg.0;
        let me = crate_id(self.me);
        if node_of(m.from) != Some(from) || m.to != me || !self.is_peer(from) {
            self.counters.refused_messages += 1;
            return;
        }
        if self.raw.step(m).is_err() {
            self.counters.step_errors += 1;
        }
        self.drain(now, out);
    }

    /// Called by the driver after every batch of inputs and at least every
    /// `tick_interval_us`: the `Ready` is handled at once (the seed's `d_ready` of 1 ms,
    /// here as soon as possible); raft-rs' own `tick()` runs every `tick_us`.
    fn tick(&mut self, now: Micros, out: &mut Outbox<RaftRsMessage>) {
        if self.clock.due(now) {
            self.raw.tick();
            self.drain(now, out);
        }
        let changed = std::mem::take(&mut self.coordinator_changed);
        let batches = self.front.tick(now, changed);
        for b in &batches {
            self.propose_batch(b);
        }
        self.front.recycle(batches);
        if self.coordinator.is_some() {
            let retry = self.cfg.read_retry_us;
            let due: Vec<u64> = self
                .reads
                .iter_mut()
                .filter(|(_, r)| changed || now >= r.asked_us.saturating_add(retry))
                .map(|(id, r)| {
                    r.asked_us = now;
                    *id
                })
                .collect();
            for id in due {
                self.counters.reads_reasked += 1;
                self.ask_read(id);
            }
        }
        self.drain(now, out);
    }

    fn tick_interval_us(&self) -> Micros {
        // Our batcher's linger, as for our own protocols, and never rarer than the crate's
        // tick.
        self.front
            .limits
            .batch_linger_us
            .max(100)
            .min(self.cfg.tick_us)
            .max(1)
    }

    fn can_propose(&self) -> bool {
        self.front.has_room()
    }

    fn status(&self) -> Status {
        let term = u32::try_from(self.raw.raft.term).unwrap_or(u32::MAX);
        Status {
            node: self.me,
            coordinator: self.coordinator,
            ballot: Ballot::new(term, self.coordinator.unwrap_or(self.me), 0),
            leading: self.raw.raft.state == StateRole::Leader,
            delivered_upto: self.front.delivered_upto,
            decided_max: self.raw.raft.raft_log.committed,
            values_in_flight: self.front.values_in_flight(),
            amnesic: self.amnesic,
            view: self.cfg.nodes.clone(),
            ..Status::default()
        }
    }

    fn peer_unreachable(&mut self, now: Micros, peer: NodeId, out: &mut Outbox<RaftRsMessage>) {
        if self.is_peer(peer) {
            // raft-rs' hint: the leader probes the follower again instead of pipelining.
            self.raw.report_unreachable(crate_id(peer));
            self.drain(now, out);
        }
    }

    /// raft-rs' `read_index` (`ReadOnlyOption::Safe`: a heartbeat round confirms the
    /// leader), answered by a `ReadState { id, upto }` once raft-rs returns it; asked again
    /// until then (module comment). `NotLeader { hint: None }` while no leader is known,
    /// `Busy` when `reads_pending_max` reads wait.
    fn read_index(
        &mut self,
        now: Micros,
        id: u64,
        out: &mut Outbox<RaftRsMessage>,
    ) -> Result<(), ProposeError> {
        if self.coordinator.is_none() {
            return Err(ProposeError::NotLeader { hint: None });
        }
        if self.reads.len() >= self.cfg.reads_pending_max && !self.reads.contains_key(&id) {
            return Err(ProposeError::Busy);
        }
        self.reads.insert(id, PendingRead { asked_us: now });
        self.ask_read(id);
        self.drain(now, out);
        Ok(())
    }
}
