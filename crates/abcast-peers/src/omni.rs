//! OmniPaxos (`omnipaxos` =0.2.4, Sequence Paxos with Ballot Leader Election, seed 001
//! §2.4 and appendix A/B) as a protocol core behind our [`Protocol`] trait.
//!
//! How we drive it (the documentation's loop, <https://omnipaxos.com/docs/omnipaxos/>):
//! `append` a log entry, `handle_incoming` a message, `tick()` periodically for the leader
//! election and the re-sends, take the outgoing messages and send them, read the decided
//! suffix. Everything else is ours, shared with our own protocols (`common.rs`): a value
//! is batched by our `Batcher`, a batch is one entry (`EntryBody::Values(batch).encode()`),
//! decided entries are delivered in log order (instance = log index + 1) on every node,
//! de-duplicated by `Dedup`, and acknowledged at their proposer.
//!
//! Adapter choices the crate forced (each also at its place below):
//!
//! - **Connections over our links.** OmniPaxos assumes FIFO links and is told of a broken
//!   one by `reconnected(pid)` ("should only be called if the underlying network
//!   implementation indicates that a connection has been re-established"); over TCP our
//!   runtime does exactly that (`peer_reconnected` at every connect). It re-sends only
//!   Prepare, Promise, PrepareReq and stop-sign messages (`resend_message_timeout`), so a
//!   lost trailing `Decide` leaves a follower behind until the next proposal; and a stale
//!   `Prepare` or `AcceptSync` arriving after a reconnect makes it sync its log from an
//!   old index below its decided one (the crate's own `debug_assert!` in `sync_log`, "log
//!   sync from .. would overwrite decided entries", which the simulator hit at once). Our
//!   simulator's links lose, duplicate and reorder datagrams and never say so. So the
//!   adapter plays TCP ([`crate::session`]): each message carries `(incarnation, epoch,
//!   seq)`; the receiver hands messages on in order, each once; a gap that does not fill
//!   within `session_reorder_wait_us` breaks the connection, nothing more of it is taken,
//!   and a `Reset` asks the sender for the next epoch; both ends hear `reconnected` when
//!   the new connection starts. Over TCP no gap opens: the cost is 24 bytes of header per
//!   message. Ballot Leader Election's heartbeats cross every link every election round,
//!   so a lost trailing message is noticed within a round plus the wait.
//! - **Batching is ours.** `ServerConfig::batch_size` stays 1 (no batching inside the
//!   crate): our `Batcher` already makes each entry a batch of values, as for our own
//!   protocols, and a second batching layer would only add the crate's flush timeout.
//! - **No leader known: the batch waits in our batcher.** `append` on a follower forwards
//!   to the leader it promised (checked: `SequencePaxos::forward_proposals`), and with no
//!   leader buffers the entry inside the crate, forwarding it at the next `AcceptSync`.
//!   OmniPaxos never re-sends a forwarded entry that was lost, nor one forwarded to a leader
//!   that died. So we append only when a leader is known, and our batcher re-offers what is
//!   not decided when the leader changes or its re-send timeout runs out (a batch decided
//!   twice is delivered once, `Dedup`).
//! - **No read index.** OmniPaxos has no linearizable-read barrier: `read_index` answers
//!   `Unsupported` (the runtime then orders a read through the log).
//! - **No reconfiguration yet.** OmniPaxos has stop-sign reconfiguration (`reconfigure`),
//!   but a new configuration runs as a new `OmniPaxos` instance the adapter would have to
//!   start and hand the log to; not in this round: `reconfigure` refuses with
//!   `Unsupported`.
//! - **In-memory storage.** `omnipaxos_storage::memory_storage::MemoryStorage` (the brief
//!   and the seed's choice; the crate's `persistent_storage` is RocksDB). A restart with
//!   [`OmniPaxosCore::new`] starts from nothing: its promises are forgotten, which Paxos
//!   does not survive. [`OmniPaxosCore::with_storage`] takes any OmniPaxos `Storage`; with
//!   a [`SharedMemoryStorage`] kept across a node's restarts, a restart finds everything
//!   its earlier life wrote, as a durable store with a sync after every write would under
//!   process crashes (the simulator's default crash model).
//! - **Serialization.** The crate's own serde derives, in bincode 1.3.3's default options
//!   (varint integers, trailing bytes refused) with a size limit of the frame: one copy of
//!   each payload when encoding and one when decoding (our own codecs copy none).

use crate::common::{
    CrateClock, Front, crate_id, default_batch_limits, entry_bytes, node_of, validate_batch_limits,
    validate_nodes,
};
use crate::session::{ConnId, Reconnected, SessionCounters, Sessions};
use ::omnipaxos::ballot_leader_election::Ballot as OpBallot;
use ::omnipaxos::messages::Message as OpMessage;
use ::omnipaxos::storage::{Entry, NoSnapshot, StopSign, Storage, StorageOp, StorageResult};
use ::omnipaxos::util::LogEntry;
use ::omnipaxos::{ClusterConfig, OmniPaxos, OmniPaxosConfig, ServerConfig};
use abcast_core::batcher::BatchLimits;
use abcast_core::codec::{Decoder, Encoder, WireMessage};
use abcast_core::config::{ConfigError, StartInfo};
use abcast_core::types::{Ballot, Batch, Micros, NodeId, ValueId};
use abcast_core::{DecodeError, Outbox, ProposeError, Protocol, Status};
use bincode::Options;
use bytes::Bytes;
use omnipaxos_storage::memory_storage::MemoryStorage;
use serde::de::{Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// One OmniPaxos log entry: the bytes of one of our entries (`EntryBody`), shared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpEntry(pub Bytes);

impl Entry for OpEntry {
    type Snapshot = NoSnapshot;
}

impl Serialize for OpEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for OpEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OpEntry, D::Error> {
        struct BytesVisitor;
        impl Visitor<'_> for BytesVisitor {
            type Value = OpEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("the bytes of a log entry")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<OpEntry, E> {
                Ok(OpEntry(Bytes::copy_from_slice(v)))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<OpEntry, E> {
                Ok(OpEntry(Bytes::from(v)))
            }
        }
        d.deserialize_bytes(BytesVisitor)
    }
}

/// The crate's message type, with our entries.
pub type OmniMessage = OpMessage<OpEntry>;

/// The frame kind of [`OmniPaxosMessage::Data`].
pub const KIND_DATA: u8 = 1;
/// The frame kind of [`OmniPaxosMessage::Reset`].
pub const KIND_RESET: u8 = 2;

/// A message of the OmniPaxos core (see the module comment, "Connections over our links").
// `Reset` is rare and small; boxing `Data` would cost an allocation per message.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum OmniPaxosMessage {
    /// One OmniPaxos message on the sender's connection to the receiver. Body:
    /// `incarnation u64 | epoch u64 | seq u64 | bincode(message)`, little-endian.
    Data {
        /// The sender's process life (`StartInfo::incarnation`).
        incarnation: u64,
        /// The connection within that life, from 0; the receiver asks for the next.
        epoch: u64,
        /// The message's number on the connection, from 0.
        seq: u64,
        msg: OmniMessage,
    },
    /// The receiver lost messages of the connection: it asks the sender (in its life
    /// `incarnation`) to open connection `epoch`. Body: `incarnation u64 | epoch u64`.
    Reset { incarnation: u64, epoch: u64 },
}

fn bincode_options() -> impl Options {
    bincode::DefaultOptions::new()
}

impl WireMessage for OmniPaxosMessage {
    fn kind(&self) -> u8 {
        match self {
            OmniPaxosMessage::Data { .. } => KIND_DATA,
            OmniPaxosMessage::Reset { .. } => KIND_RESET,
        }
    }

    fn encode(&self, enc: &mut Encoder) {
        match self {
            OmniPaxosMessage::Data {
                incarnation,
                epoch,
                seq,
                msg,
            } => {
                enc.put_u64(*incarnation);
                enc.put_u64(*epoch);
                enc.put_u64(*seq);
                // Serializing these plain derives into a Vec cannot fail; an empty body
                // would be refused by the receiver's decoder, never misread.
                let body = bincode_options().serialize(msg).unwrap_or_default();
                enc.put_bytes(&Bytes::from(body));
            }
            OmniPaxosMessage::Reset { incarnation, epoch } => {
                enc.put_u64(*incarnation);
                enc.put_u64(*epoch);
            }
        }
    }

    fn decode(kind: u8, body: Bytes) -> Result<Self, DecodeError> {
        let mut d = Decoder::new(body);
        match kind {
            KIND_DATA => {
                let incarnation = d.u64("omnipaxos.incarnation")?;
                let epoch = d.u64("omnipaxos.epoch")?;
                let seq = d.u64("omnipaxos.seq")?;
                let rest = d.bytes(d.remaining(), "omnipaxos.message")?;
                let msg = bincode_options()
                    .with_limit(rest.len() as u64)
                    .deserialize::<OmniMessage>(&rest)
                    .map_err(|e| DecodeError::Invalid {
                        what: "omnipaxos.message",
                        detail: e.to_string(),
                    })?;
                Ok(OmniPaxosMessage::Data {
                    incarnation,
                    epoch,
                    seq,
                    msg,
                })
            }
            KIND_RESET => {
                let incarnation = d.u64("omnipaxos.reset.incarnation")?;
                let epoch = d.u64("omnipaxos.reset.epoch")?;
                d.finish()?;
                Ok(OmniPaxosMessage::Reset { incarnation, epoch })
            }
            k => Err(DecodeError::UnknownKind(k)),
        }
    }
}

/// Configuration of an [`OmniPaxosCore`].
#[derive(Clone, Debug)]
pub struct OmniPaxosCoreConfig {
    /// Every member (each proposer, acceptor and learner), ours ids.
    pub nodes: Vec<NodeId>,
    /// How often OmniPaxos' `tick()` is called: 10 ms, the docs' example ("if `tick()` is
    /// called every 10ms and the `election_tick_timeout` is 10, then the timeout will be
    /// 100ms", <https://omnipaxos.com/docs/omnipaxos/leader-election/>).
    pub tick_us: Micros,
    /// `ServerConfig::election_tick_timeout`: 10 ticks = 100 ms, the docs' example above. A
    /// failed leader is "detected in one election timeout and a new leader is typically
    /// elected in the next".
    pub election_tick_timeout: u64,
    /// `ServerConfig::resend_message_tick_timeout`: 50 ticks = 500 ms, what the crate's
    /// own test suite runs with (`tests/utils.rs`, `resend_message_timeout: 500 ms`); the
    /// crate's default of 100 ticks assumes ticks as long as an election timeout.
    pub resend_message_tick_timeout: u64,
    /// `ServerConfig::buffer_size` (outgoing messages): the crate's default, 100 000.
    pub buffer_size: usize,
    /// `ServerConfig::batch_size`: 1 ("no batching", the crate's default); our batcher
    /// batches (module comment).
    pub batch_size: usize,
    /// `ServerConfig::flush_batch_tick_timeout`: the crate's default, 200 ticks; matters
    /// only with `batch_size > 1`.
    pub flush_batch_tick_timeout: u64,
    /// The proposer's batching and window, the same as our protocols'.
    pub batch: BatchLimits,
    /// How long a gap in a connection waits for a reordered message before the connection
    /// counts as broken (`crate::session`); above the simulator's delay spread (at most
    /// 20 ms), far below a failure timeout. Also how often an unanswered `Reset` repeats.
    pub session_reorder_wait_us: Micros,
    /// Early messages held per connection at most; one more breaks it.
    pub session_held_max: usize,
}

impl OmniPaxosCoreConfig {
    /// The race's configuration for `nodes` (see each field).
    pub fn new(nodes: &[NodeId]) -> OmniPaxosCoreConfig {
        OmniPaxosCoreConfig {
            nodes: nodes.to_vec(),
            tick_us: 10_000,
            election_tick_timeout: 10,
            resend_message_tick_timeout: 50,
            buffer_size: 100_000,
            batch_size: 1,
            flush_batch_tick_timeout: 200,
            batch: default_batch_limits(),
            session_reorder_wait_us: 25_000,
            session_held_max: 4096,
        }
    }

    /// Checks every field for node `me`.
    pub fn validate(&self, me: NodeId) -> Result<(), ConfigError> {
        validate_nodes(&self.nodes, me)?;
        validate_batch_limits(&self.batch)?;
        let zero = |field: &'static str, v: u64| {
            if v == 0 {
                Err(ConfigError {
                    field,
                    reason: "must be > 0".into(),
                })
            } else {
                Ok(())
            }
        };
        zero("tick_us", self.tick_us)?;
        zero("election_tick_timeout", self.election_tick_timeout)?;
        zero(
            "resend_message_tick_timeout",
            self.resend_message_tick_timeout,
        )?;
        zero("buffer_size", self.buffer_size as u64)?;
        zero("batch_size", self.batch_size as u64)?;
        zero("flush_batch_tick_timeout", self.flush_batch_tick_timeout)?;
        zero("session_reorder_wait_us", self.session_reorder_wait_us)?;
        zero("session_held_max", self.session_held_max as u64)?;
        Ok(())
    }

    fn omnipaxos_config(&self, me: NodeId) -> OmniPaxosConfig {
        OmniPaxosConfig {
            cluster_config: ClusterConfig {
                configuration_id: 1,
                nodes: self.nodes.iter().map(|n| crate_id(*n)).collect(),
                flexible_quorum: None,
            },
            server_config: ServerConfig {
                pid: crate_id(me),
                election_tick_timeout: self.election_tick_timeout,
                resend_message_tick_timeout: self.resend_message_tick_timeout,
                buffer_size: self.buffer_size,
                batch_size: self.batch_size,
                flush_batch_tick_timeout: self.flush_batch_tick_timeout,
                ..ServerConfig::default()
            },
        }
    }
}

/// Counters of what the adapter refused or repaired, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmniPaxosCounters {
    /// Messages whose sender or receiver did not match the link, or from a non-member.
    pub refused_messages: u64,
    /// The connections' repairs (`crate::session`).
    pub sessions: SessionCounters,
    /// Decided entries that are not an entry of ours.
    pub undecodable_entries: u64,
}

/// A `MemoryStorage` shared by every life of one node: what one life wrote, the next
/// finds (module comment, "In-memory storage"). Clones share the store.
#[derive(Clone, Default)]
pub struct SharedMemoryStorage(Arc<Mutex<MemoryStorage<OpEntry>>>);

impl SharedMemoryStorage {
    fn store(&self) -> MutexGuard<'_, MemoryStorage<OpEntry>> {
        // A panic while holding it leaves a store as consistent as the panicking call
        // left it; the simulator reports that panic itself.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Storage<OpEntry> for SharedMemoryStorage {
    fn write_atomically(&mut self, ops: Vec<StorageOp<OpEntry>>) -> StorageResult<()> {
        self.store().write_atomically(ops)
    }
    fn append_entry(&mut self, entry: OpEntry) -> StorageResult<()> {
        self.store().append_entry(entry)
    }
    fn append_entries(&mut self, entries: Vec<OpEntry>) -> StorageResult<()> {
        self.store().append_entries(entries)
    }
    fn append_on_prefix(&mut self, from_idx: usize, entries: Vec<OpEntry>) -> StorageResult<()> {
        self.store().append_on_prefix(from_idx, entries)
    }
    fn set_promise(&mut self, n_prom: OpBallot) -> StorageResult<()> {
        self.store().set_promise(n_prom)
    }
    fn set_decided_idx(&mut self, ld: usize) -> StorageResult<()> {
        self.store().set_decided_idx(ld)
    }
    fn get_decided_idx(&self) -> StorageResult<usize> {
        self.store().get_decided_idx()
    }
    fn set_accepted_round(&mut self, na: OpBallot) -> StorageResult<()> {
        self.store().set_accepted_round(na)
    }
    fn get_accepted_round(&self) -> StorageResult<Option<OpBallot>> {
        self.store().get_accepted_round()
    }
    fn get_entries(&self, from: usize, to: usize) -> StorageResult<Vec<OpEntry>> {
        self.store().get_entries(from, to)
    }
    fn get_log_len(&self) -> StorageResult<usize> {
        self.store().get_log_len()
    }
    fn get_suffix(&self, from: usize) -> StorageResult<Vec<OpEntry>> {
        self.store().get_suffix(from)
    }
    fn get_promise(&self) -> StorageResult<Option<OpBallot>> {
        self.store().get_promise()
    }
    fn set_stopsign(&mut self, s: Option<StopSign>) -> StorageResult<()> {
        self.store().set_stopsign(s)
    }
    fn get_stopsign(&self) -> StorageResult<Option<StopSign>> {
        self.store().get_stopsign()
    }
    fn trim(&mut self, idx: usize) -> StorageResult<()> {
        self.store().trim(idx)
    }
    fn set_compacted_idx(&mut self, idx: usize) -> StorageResult<()> {
        self.store().set_compacted_idx(idx)
    }
    fn get_compacted_idx(&self) -> StorageResult<usize> {
        self.store().get_compacted_idx()
    }
    fn set_snapshot(&mut self, snapshot: Option<NoSnapshot>) -> StorageResult<()> {
        self.store().set_snapshot(snapshot)
    }
    fn get_snapshot(&self) -> StorageResult<Option<NoSnapshot>> {
        self.store().get_snapshot()
    }
}

/// OmniPaxos as an abcast protocol (module comment), over OmniPaxos storage `S`.
pub struct OmniPaxosCore<S: Storage<OpEntry> = MemoryStorage<OpEntry>> {
    cfg: OmniPaxosCoreConfig,
    me: NodeId,
    pid: u64,
    op: OmniPaxos<OpEntry, S>,
    /// The store held nothing of an earlier life.
    amnesic: bool,
    front: Front,
    clock: CrateClock,
    /// The leader this node promised (OmniPaxos' `get_current_leader`).
    coordinator: Option<NodeId>,
    coordinator_changed: bool,
    /// The next log index (0-based) to deliver.
    next_idx: usize,
    sessions: Sessions<OmniMessage>,
    outgoing: Vec<OmniMessage>,
    ready: Vec<OmniMessage>,
    resets: Vec<(NodeId, u64, u64)>,
    refused_messages: u64,
}

impl<S: Storage<OpEntry>> fmt::Debug for OmniPaxosCore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OmniPaxosCore")
            .field("me", &self.me)
            .field("coordinator", &self.coordinator)
            .field("decided_idx", &self.op.get_decided_idx())
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}

impl OmniPaxosCore {
    /// Node `me` of the cluster `cfg.nodes`, starting its life `start` with an empty
    /// in-memory log.
    pub fn new(
        cfg: OmniPaxosCoreConfig,
        me: NodeId,
        start: StartInfo,
    ) -> Result<OmniPaxosCore, ConfigError> {
        OmniPaxosCore::with_storage(cfg, me, start, MemoryStorage::default())
    }
}

impl<S: Storage<OpEntry>> OmniPaxosCore<S> {
    /// Node `me` of the cluster `cfg.nodes`, starting its life `start` over `storage`
    /// (OmniPaxos recovers from what it holds: a stored promise starts it in its recovery
    /// phase).
    pub fn with_storage(
        cfg: OmniPaxosCoreConfig,
        me: NodeId,
        start: StartInfo,
        storage: S,
    ) -> Result<OmniPaxosCore<S>, ConfigError> {
        cfg.validate(me)?;
        let kept = matches!(storage.get_promise(), Ok(Some(_)));
        let op = cfg
            .omnipaxos_config(me)
            .build(storage)
            .map_err(|e| ConfigError {
                field: "omnipaxos",
                reason: e.to_string(),
            })?;
        Ok(OmniPaxosCore {
            amnesic: start.amnesic && !kept,
            front: Front::new(me, start, cfg.batch),
            clock: CrateClock::new(cfg.tick_us),
            pid: crate_id(me),
            sessions: Sessions::new(
                start.incarnation,
                cfg.session_reorder_wait_us,
                cfg.session_held_max,
            ),
            me,
            op,
            coordinator: None,
            coordinator_changed: false,
            next_idx: 0,
            outgoing: Vec::new(),
            ready: Vec::new(),
            resets: Vec::new(),
            refused_messages: 0,
            cfg,
        })
    }

    /// What the adapter refused or repaired so far.
    pub fn counters(&self) -> OmniPaxosCounters {
        OmniPaxosCounters {
            refused_messages: self.refused_messages,
            sessions: self.sessions.counters,
            undecodable_entries: self.front.undecodable_entries,
        }
    }

    fn is_peer(&self, n: NodeId) -> bool {
        n != self.me && self.cfg.nodes.contains(&n)
    }

    /// Appends a batch's entry, or keeps it in the batcher while no leader is known.
    fn append(&mut self, batch: &Batch) {
        if self.coordinator.is_none() {
            return;
        }
        // `Err` only once a stop-sign is accepted, which this adapter never proposes.
        let _ = self.op.append(OpEntry(entry_bytes(batch)));
    }

    /// The crate's outgoing messages onto our links, each numbered on its connection.
    fn flush(&mut self, out: &mut Outbox<OmniPaxosMessage>) {
        self.op.take_outgoing_messages(&mut self.outgoing);
        for msg in self.outgoing.drain(..) {
            let Some(to) = node_of(msg.get_receiver()) else {
                continue;
            };
            if to == self.me || !self.cfg.nodes.contains(&to) {
                continue;
            }
            let (incarnation, epoch, seq) = self.sessions.stamp(to);
            out.send(
                to,
                OmniPaxosMessage::Data {
                    incarnation,
                    epoch,
                    seq,
                    msg,
                },
            );
        }
    }

    /// Delivers what was decided since the last call, in log order.
    fn deliver(&mut self, now: Micros, out: &mut Outbox<OmniPaxosMessage>) {
        let decided = self.op.get_decided_idx();
        if decided <= self.next_idx {
            return;
        }
        if let Some(entries) = self.op.read_decided_suffix(self.next_idx) {
            for (i, e) in entries.into_iter().enumerate() {
                if let LogEntry::Decided(OpEntry(data)) = e {
                    let instance = (self.next_idx + i) as u64 + 1;
                    self.front.decided(now, instance, &data, out);
                }
            }
        }
        self.next_idx = decided;
    }

    fn note_coordinator(&mut self) {
        let c = self
            .op
            .get_current_leader()
            .and_then(|(pid, _)| node_of(pid));
        if c != self.coordinator {
            self.coordinator = c;
            self.coordinator_changed = true;
        }
    }

    /// After every input: deliver, follow the leader, send.
    fn settle(&mut self, now: Micros, out: &mut Outbox<OmniPaxosMessage>) {
        self.deliver(now, out);
        self.note_coordinator();
        self.flush(out);
    }

    /// A data message from `from`: handed to OmniPaxos in connection order, after
    /// `reconnected` when it opened a new connection.
    fn on_data(&mut self, now: Micros, from: NodeId, conn: ConnId, seq: u64, msg: OmniMessage) {
        let mut ready = std::mem::take(&mut self.ready);
        if let Some(Reconnected(peer)) =
            self.sessions.on_data(now, from, conn, seq, msg, &mut ready)
        {
            self.op.reconnected(crate_id(peer));
        }
        for m in ready.drain(..) {
            self.op.handle_incoming(m);
        }
        self.ready = ready;
    }

    fn ballot(b: OpBallot) -> Ballot {
        Ballot::new(b.n, node_of(b.pid).unwrap_or(NodeId(0)), 0)
    }
}

impl<S: Storage<OpEntry>> Protocol for OmniPaxosCore<S> {
    type Message = OmniPaxosMessage;

    fn node(&self) -> NodeId {
        self.me
    }

    fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        out: &mut Outbox<OmniPaxosMessage>,
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
        out: &mut Outbox<OmniPaxosMessage>,
    ) -> Result<(ValueId, usize), ProposeError> {
        let mut ready = Vec::new();
        let r = self.front.propose_many(now, values, &mut ready);
        // Values that only joined the open batch give OmniPaxos nothing to send: its
        // outgoing messages are taken only when a batch was appended (the crate's
        // `take_outgoing_messages` allocates per call, which per value cost it a sixth of
        // the leader's time).
        if !ready.is_empty() {
            for b in &ready {
                self.append(b);
            }
            self.settle(now, out);
        }
        r
    }

    fn receive(
        &mut self,
        now: Micros,
        from: NodeId,
        msg: OmniPaxosMessage,
        out: &mut Outbox<OmniPaxosMessage>,
    ) {
        if !self.is_peer(from) {
            self.refused_messages += 1;
            return;
        }
        match msg {
            OmniPaxosMessage::Data {
                incarnation,
                epoch,
                seq,
                msg,
            } => {
                if node_of(msg.get_sender()) != Some(from) || msg.get_receiver() != self.pid {
                    // OmniPaxos indexes its per-peer state by pid: a foreign pid must not
                    // reach it.
                    self.refused_messages += 1;
                    return;
                }
                self.on_data(now, from, (incarnation, epoch), seq, msg);
            }
            OmniPaxosMessage::Reset { incarnation, epoch } => {
                if let Some(Reconnected(peer)) = self.sessions.on_reset(from, incarnation, epoch) {
                    // Our new connection to `peer`: its first message is the PrepareReq
                    // this produces.
                    self.op.reconnected(crate_id(peer));
                }
            }
        }
        self.settle(now, out);
    }

    /// Called by the driver after every batch of inputs and at least every
    /// `tick_interval_us`: this is the "flush period" of the crate's docs ("send outgoing
    /// messages ... periodically, e.g. every ms"), here as soon as possible. OmniPaxos'
    /// own `tick()` runs every `tick_us`.
    fn tick(&mut self, now: Micros, out: &mut Outbox<OmniPaxosMessage>) {
        let mut resets = std::mem::take(&mut self.resets);
        self.sessions.tick(now, &mut resets);
        for (to, incarnation, epoch) in resets.drain(..) {
            out.send(to, OmniPaxosMessage::Reset { incarnation, epoch });
        }
        self.resets = resets;
        if self.clock.due(now) {
            self.op.tick();
        }
        self.note_coordinator();
        let changed = std::mem::take(&mut self.coordinator_changed);
        let batches = self.front.tick(now, changed);
        for b in &batches {
            self.append(b);
        }
        self.front.recycle(batches);
        self.settle(now, out);
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
        let leader = self.op.get_current_leader();
        Status {
            node: self.me,
            coordinator: self.coordinator,
            ballot: Self::ballot(self.op.get_promise()),
            leading: leader == Some((self.pid, true)),
            delivered_upto: self.front.delivered_upto,
            decided_max: self.op.get_decided_idx() as u64,
            values_in_flight: self.front.values_in_flight(),
            amnesic: self.amnesic,
            view: self.cfg.nodes.clone(),
            ..Status::default()
        }
    }

    fn peer_reconnected(&mut self, now: Micros, peer: NodeId, out: &mut Outbox<OmniPaxosMessage>) {
        if !self.is_peer(peer) {
            return;
        }
        // What the crate's docs ask of a network that re-established a connection.
        self.op.reconnected(crate_id(peer));
        self.settle(now, out);
    }
}
