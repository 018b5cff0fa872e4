//! The one protocol trait, and the effects a protocol asks its driver to carry out.
//!
//! A protocol is a deterministic state machine with three inputs (a proposal, a message from
//! a peer, a tick) and one output, the [`Outbox`]. The driver (simulator or runtime) calls an
//! input, then carries out the outbox in this order:
//!
//! 1. if `needs_sync` is set, make the protocol's storage durable (group commit: one sync for
//!    every record written since the last one);
//! 2. send `sends` and `multicasts` (messages that may depend on what was just made durable);
//! 3. hand `deliveries` (in instance order) and `acks` to the application.
//!
//! This is the raft-rs `Ready` discipline: no message that depends on a persisted state leaves
//! before that state is durable. [`crate::carry::carry_out`] is that order, written once:
//! the simulator and the runtime both carry an outbox out through it.
//!
//! Inputs beyond the three (each with a default for a protocol that has no use for it):
//! [`Protocol::reconfigure`], [`Protocol::peer_unreachable`] / [`Protocol::peer_reconnected`]
//! (the driver's view of its links), [`Protocol::read_index`] (a linearizable-read barrier).
//! Outputs beyond sends and deliveries are positioned among the deliveries of the same
//! outbox where their place matters (configuration changes, installs, skips, group changes)
//! so every learner sees them at the same point of the sequence.

use crate::ProposeError;
use crate::codec::WireMessage;
use crate::config::{ConfigError, Configuration};
use crate::types::{Ballot, Batch, BatchKey, GroupId, Instance, Micros, NodeId, ValueId};
use bytes::Bytes;

/// Values delivered in order: everything in `batch`, decided in `instance` of `group`
/// (group 0 for a protocol that runs one instance; the ring for Multi-Ring Paxos).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    pub group: GroupId,
    pub instance: Instance,
    pub batch: Batch,
    /// What the protocol guarantees of this delivery (see [`DeliveryLevel`]).
    pub level: DeliveryLevel,
}

impl Delivery {
    /// An `Agreed` delivery of group 0.
    pub fn new(instance: Instance, batch: Batch) -> Delivery {
        Delivery {
            group: GroupId(0),
            instance,
            batch,
            level: DeliveryLevel::Agreed,
        }
    }
}

/// What a delivery guarantees (Extended Virtual Synchrony's services, seed 002 §II).
/// Paxos-family protocols deliver only what a quorum of acceptors accepted, which is at
/// least `Agreed`: every learner that delivers it delivers it at the same place of one total
/// order. `Safe` adds that every member of the current configuration has the message (the
/// token ring's `aru` round), so it is delivered everywhere unless that member crashes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeliveryLevel {
    #[default]
    Agreed,
    Safe,
}

/// Whether a configuration change is the regular one a group runs in, or the transitional
/// one Extended Virtual Synchrony delivers between two regular configurations (seed 002,
/// Totem's EVS: the members that came from the same old configuration, delivering the old
/// configuration's last messages). Protocols without EVS emit only `Regular`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigKind {
    Regular,
    Transitional,
}

/// The protocol instance's configuration changed, at this point of the delivered sequence:
/// deliveries before `position` belong to the old configuration, from `position` on to
/// `config` (a stop-sign decided, a joint configuration committed, an EVS view installed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigChange {
    pub kind: ConfigKind,
    pub config: Configuration,
    /// How many of the same outbox's `deliveries` come before this change.
    pub position: usize,
}

/// The answer to [`Protocol::read_index`]: a read asked for with `id` is linearizable once
/// this learner has delivered every instance up to `upto` (etcd-io/raft's `ReadState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadState {
    pub id: u64,
    pub upto: Instance,
}

/// A learner starts or stops delivering a group's values, at a point every member agrees
/// on (see [`Protocol::join_group`]: Multi-Ring subscribe and unsubscribe; process groups
/// later). Single-group protocols never emit it. The simulator's checkers use it to know
/// which groups a learner must deliver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Subscription {
    pub group: GroupId,
    pub subscribed: bool,
    /// The learner follows the group from its first instance (a subscription at start-up).
    pub from_start: bool,
    /// How many of the same outbox's `deliveries` come before this change.
    pub position: usize,
}

/// Where a snapshot of a protocol of several groups (Multi-Ring Paxos) stands in one of
/// them (see [`Protocol::snapshot_groups`]): its application state holds every value of
/// the group the learner delivered up to instance `covered` and none after; `following`:
/// the learner that starts from it delivers the group from `covered + 1` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupPosition {
    pub group: GroupId,
    pub covered: Instance,
    pub following: bool,
}

/// The proposer learns that the values `key.first_seq .. key.first_seq + count` of its own
/// batch are decided: a quorum of acceptors accepted them, so they can no longer be lost
/// while at most f acceptors fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ack {
    pub key: BatchKey,
    pub count: u32,
}

/// What a protocol asks its driver to do. Reused across calls: the driver drains it and
/// the vectors keep their capacity, so the steady state allocates nothing here.
#[derive(Debug)]
pub struct Outbox<M> {
    /// Unicast messages, in the order they must be sent per destination.
    pub sends: Vec<(NodeId, M)>,
    /// Messages for every member of the protocol instance's multicast group.
    pub multicasts: Vec<M>,
    /// How many of `multicasts` (the first ones) leave before `sends`; the rest leave after
    /// them. 0 (the default): every send first. A token ring multicasts some messages
    /// before it passes the token and the rest after (seed 002 §III-B1, §III-B3).
    pub multicasts_first: usize,
    /// Deliveries, in instance order.
    pub deliveries: Vec<Delivery>,
    /// Acknowledgements of this node's own proposals.
    pub acks: Vec<Ack>,
    /// Storage was written; sync it before carrying out `sends` and `multicasts`.
    pub needs_sync: bool,
    /// The learner passed over instances that no acceptor holds any more (see [`Skip`]).
    pub skips: Vec<Skip>,
    /// Rare control-plane events (phase 1, leading, repair, snapshots, group changes):
    /// typed for a program, `Display` for a log line.
    pub events: Vec<crate::event::Event>,
    /// Groups this learner starts or stops delivering (Multi-Ring only).
    pub subscriptions: Vec<Subscription>,
    /// Snapshots this learner installed (fetched from a peer because it fell behind the
    /// acceptors' trim point): the application replaces its state with `snapshot.app`, at
    /// `position` among `deliveries`, and the driver persists the snapshot.
    pub installs: Vec<Install>,
    /// Configuration changes, positioned among `deliveries` (see [`ConfigChange`]).
    pub config_changes: Vec<ConfigChange>,
    /// Read barriers confirmed (see [`Protocol::read_index`]).
    pub reads: Vec<ReadState>,
}

/// A learner passed over instances `[from, to)` of `group` that no acceptor holds any more
/// (an in-memory acceptor's window slid past them, in a group whose learners take no
/// snapshots). Nothing in them will be delivered here; the next delivery of the group is
/// at `to` or later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Skip {
    pub group: GroupId,
    pub from: Instance,
    pub to: Instance,
    /// How many of the same outbox's `deliveries` come before the skip.
    pub position: usize,
}

/// A learner installed a snapshot fetched from a peer (see [`Outbox::installs`]): every
/// instance up to `snapshot.upto` is covered by it, and the next delivery is after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Install {
    pub snapshot: Snapshot,
    /// How many of the same outbox's `deliveries` come before the install.
    pub position: usize,
}

impl<M> Default for Outbox<M> {
    fn default() -> Self {
        Outbox {
            sends: Vec::new(),
            multicasts: Vec::new(),
            multicasts_first: 0,
            deliveries: Vec::new(),
            acks: Vec::new(),
            needs_sync: false,
            skips: Vec::new(),
            events: Vec::new(),
            subscriptions: Vec::new(),
            installs: Vec::new(),
            config_changes: Vec::new(),
            reads: Vec::new(),
        }
    }
}

impl<M> Outbox<M> {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn send(&mut self, to: NodeId, msg: M) {
        self.sends.push((to, msg));
    }
    pub fn is_empty(&self) -> bool {
        self.sends.is_empty()
            && self.multicasts.is_empty()
            && self.deliveries.is_empty()
            && self.acks.is_empty()
            && self.events.is_empty()
            && self.skips.is_empty()
            && self.subscriptions.is_empty()
            && self.installs.is_empty()
            && self.config_changes.is_empty()
            && self.reads.is_empty()
            && !self.needs_sync
    }
    pub fn clear(&mut self) {
        self.sends.clear();
        self.multicasts.clear();
        self.multicasts_first = 0;
        self.deliveries.clear();
        self.acks.clear();
        self.events.clear();
        self.skips.clear();
        self.subscriptions.clear();
        self.installs.clear();
        self.config_changes.clear();
        self.reads.clear();
        self.needs_sync = false;
    }
}

/// A snapshot of a protocol's state for people (the demo summary, `abcast status`) and for
/// the simulator's convergence checks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub node: NodeId,
    /// The coordinator (leader) this node believes in, if any.
    pub coordinator: Option<NodeId>,
    /// The highest ballot this node has seen.
    pub ballot: Ballot,
    /// Whether this node is coordinating and has completed phase 1.
    pub leading: bool,
    /// Every instance up to this one has been delivered here.
    pub delivered_upto: Instance,
    /// The highest instance this node knows to be decided.
    pub decided_max: Instance,
    /// Values proposed here and not yet decided.
    pub values_in_flight: usize,
    /// Whether the acceptor has forgotten its state (in-memory restart) and is not yet repaired.
    pub amnesic: bool,
    /// Nodes this node currently believes alive, in ring order.
    pub view: Vec<NodeId>,
    /// Per group, for a protocol that runs several (Multi-Ring Paxos: one per ring, in
    /// group order); empty for a single-instance protocol.
    pub groups: Vec<GroupStatus>,
    /// Bytes of acceptor log on disk (durable storage; 0 otherwise).
    pub log_bytes: u64,
    /// Bytes of acceptor log appended since the node started.
    pub log_appended_bytes: u64,
    /// The configuration in effect as this node knows it, for a protocol that reconfigures
    /// (Sequence Paxos: the configuration it is in, a member or not; Raft: the last
    /// committed one, both voter sets while joint). `None` where the protocol has no
    /// configuration of its own to report.
    pub configuration: Option<Configuration>,
    /// A change under way, as this node knows it: the configuration it leads to (Sequence
    /// Paxos: a stop-sign in the log, not yet delivered here; Raft: a change whose learner
    /// or joint stage is not done). `None` when none is.
    pub configuration_pending: Option<Configuration>,
    /// At a leader: every other node it replicates to, with its progress as the leader
    /// sees it; empty at any other node and for protocols without a leader's view.
    pub followers: Vec<FollowerProgress>,
    /// Messages refused as ones no correct peer sends (`Event::MessageRefused`), this life.
    pub refused_messages: u64,
}

/// One follower's replication, as its leader sees it ([`Status::followers`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FollowerProgress {
    pub node: NodeId,
    /// The follower holds the leader's log up to here (Raft `matchIndex`, Sequence Paxos
    /// `las`: its accepted length in the leader's round).
    pub accepted: Instance,
    /// The leader told it that entries up to here are decided (never above `accepted`).
    pub decided: Instance,
    /// The follower votes (counts in quorums); false for a Raft learner.
    pub voter: bool,
}

/// One group's (ring's) state inside a composite protocol.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupStatus {
    pub group: GroupId,
    pub coordinator: Option<NodeId>,
    /// Every instance of the group up to this one is decided and handed to the merge here.
    pub delivered_upto: Instance,
    /// The learner follows the group.
    pub following: bool,
    /// Decided instances waiting in the merge for the other groups (seed 000 figure 4.6's
    /// "values buffered at the learner").
    pub buffered_instances: usize,
    /// The most instances ever waiting there at once since the node started.
    pub buffered_instances_max: usize,
}

/// A learner's snapshot (issue 4; URingPaxos' `Safe`): the application's state after every
/// instance up to `upto`, and the protocol's own learner state at that point (what it needs
/// to go on delivering the same sequence as everyone else: the de-duplication memory),
/// opaque to the application. Learners report `upto`; the coordinator trims the acceptors'
/// logs below the point every learner's snapshot covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub upto: Instance,
    pub protocol: Bytes,
    pub app: Bytes,
}

/// `"ABS1"`, the start of an encoded snapshot.
pub const SNAPSHOT_MAGIC: u32 = u32::from_le_bytes(*b"ABS1");
const SNAPSHOT_HEADER_BYTES: usize = 4 + 8 + 4 + 8 + 4;

impl Snapshot {
    /// `magic | upto | protocol_len (u32) | app_len (u64) | crc32c of everything else |
    /// protocol | app`, all little-endian: what a node writes to its snapshot file.
    pub fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(SNAPSHOT_HEADER_BYTES + self.protocol.len() + self.app.len());
        out.extend_from_slice(&SNAPSHOT_MAGIC.to_le_bytes());
        out.extend_from_slice(&self.upto.to_le_bytes());
        out.extend_from_slice(&(self.protocol.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.app.len() as u64).to_le_bytes());
        let crc = crc32c::crc32c_append(
            crc32c::crc32c_append(crc32c::crc32c(&out), &self.protocol),
            &self.app,
        );
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&self.protocol);
        out.extend_from_slice(&self.app);
        out
    }

    /// Checks and decodes [`Snapshot::encode`]'s bytes; never panics.
    pub fn decode(buf: &[u8]) -> Result<Snapshot, String> {
        let head = buf
            .get(..SNAPSHOT_HEADER_BYTES)
            .ok_or_else(|| format!("{} bytes, shorter than a snapshot header", buf.len()))?;
        let u32_at =
            |i: usize| u32::from_le_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&head[i..i + 8]);
            u64::from_le_bytes(b)
        };
        if u32_at(0) != SNAPSHOT_MAGIC {
            return Err("not a snapshot (bad magic)".into());
        }
        let upto = u64_at(4);
        let plen = u32_at(12) as usize;
        let alen = usize::try_from(u64_at(16)).map_err(|_| "app length overflows".to_string())?;
        let body = &buf[SNAPSHOT_HEADER_BYTES..];
        if body.len() != plen.saturating_add(alen) {
            return Err(format!(
                "length mismatch: header says {} + {} bytes, {} follow",
                plen,
                alen,
                body.len()
            ));
        }
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head[..24]), body);
        if crc != u32_at(24) {
            return Err("checksum mismatch".into());
        }
        Ok(Snapshot {
            upto,
            protocol: Bytes::copy_from_slice(&body[..plen]),
            app: Bytes::copy_from_slice(&body[plen..]),
        })
    }
}

/// A total-order broadcast protocol, as a pure state machine.
pub trait Protocol {
    /// The protocol's message type, with its wire codec.
    type Message: WireMessage + Clone + std::fmt::Debug;

    /// This node's id.
    fn node(&self) -> NodeId;

    /// Offers one value for total-order broadcast. Returns its id, or `Busy` when the
    /// proposer's window of values in flight is full. The value may wait in the open batch
    /// until the next `tick`.
    fn propose(
        &mut self,
        now: Micros,
        payload: Bytes,
        out: &mut Outbox<Self::Message>,
    ) -> Result<ValueId, ProposeError>;

    /// Offers one value asking for a delivery service (Extended Virtual Synchrony's, seed
    /// 002 §II): `Agreed` is what [`Protocol::propose`] gives every protocol; `Safe` asks
    /// that the value be delivered only once every member of the configuration has it
    /// (the token ring's two-round `aru`). A protocol that has no such service refuses
    /// `Safe` with `Unsupported` rather than deliver it as `Agreed`.
    fn propose_at(
        &mut self,
        now: Micros,
        payload: Bytes,
        level: DeliveryLevel,
        out: &mut Outbox<Self::Message>,
    ) -> Result<ValueId, ProposeError> {
        match level {
            DeliveryLevel::Agreed => self.propose(now, payload, out),
            DeliveryLevel::Safe => Err(ProposeError::Unsupported {
                what: "Safe delivery (every member has the value before any delivers it)",
            }),
        }
    }

    /// Offers `values` in order, as [`Protocol::propose`] called on each would, and returns
    /// the first id and how many were taken: consecutive ids of this node. It stops at the
    /// first value refused, and returns that refusal only when it is the first. A protocol
    /// whose proposals go through a [`crate::batcher::Batcher`] takes the run in one call
    /// ([`crate::batcher::Batcher::propose_many`]), so a load generator or a client frame
    /// of many values pays this layer's per-call costs (bookkeeping, outbox checks,
    /// flushes) once per run, not once per value.
    fn propose_many(
        &mut self,
        now: Micros,
        values: crate::Values<'_>,
        out: &mut Outbox<Self::Message>,
    ) -> Result<(ValueId, usize), ProposeError> {
        let mut first = None;
        let mut taken = 0;
        for i in 0..values.len() {
            let Some(payload) = values.get(i) else {
                break;
            };
            match self.propose(now, payload, out) {
                Ok(id) => {
                    first.get_or_insert(id);
                    taken += 1;
                }
                Err(e) if taken == 0 => return Err(e),
                Err(_) => break,
            }
        }
        match first {
            Some(id) => Ok((id, taken)),
            // An empty run: nothing taken, nothing refused.
            None => Ok((
                ValueId {
                    node: self.node(),
                    seq: 0,
                },
                0,
            )),
        }
    }

    /// A message from a peer. Never panics on a message that is well-formed but wrong in
    /// content (stale ballot, unknown instance, a node outside the ring): such a message is
    /// ignored or answered.
    fn receive(
        &mut self,
        now: Micros,
        from: NodeId,
        msg: Self::Message,
        out: &mut Outbox<Self::Message>,
    );

    /// Time passes. Drivers call it after every batch of inputs and at least every
    /// `tick_interval_us`; it closes batches, sends heartbeats and retransmits.
    fn tick(&mut self, now: Micros, out: &mut Outbox<Self::Message>);

    /// How often the driver must call `tick` when nothing else happens.
    fn tick_interval_us(&self) -> Micros;

    /// Whether `propose` would accept a value right now.
    fn can_propose(&self) -> bool;

    fn status(&self) -> Status;

    /// Makes every acceptor-store write so far durable: the group commit. A driver calls it
    /// when an outbox has `needs_sync`, before any of that outbox's sends leave (and may
    /// gather several inputs' outboxes under one call). An error means the node can no
    /// longer keep its promises: the driver stops it.
    fn sync_storage(&mut self) -> Result<(), crate::storage::StorageError> {
        Ok(())
    }

    /// `sync_storage` in two halves, for a driver that overlaps the fdatasync with its
    /// other work (see `AcceptorStore::begin_sync`): the writes reach the OS now, the job
    /// makes them durable on any thread, and the driver holds the outbox until it is done,
    /// then calls `end_sync_storage` with the job's result. `None`: durable already.
    fn begin_sync_storage(
        &mut self,
    ) -> Result<Option<crate::storage::SyncJob>, crate::storage::StorageError> {
        self.sync_storage().map(|()| None)
    }

    /// The job of `begin_sync_storage` ran with this result; an error is the store's
    /// failure from now on, and the driver stops the node.
    fn end_sync_storage(
        &mut self,
        result: Result<(), crate::storage::StorageError>,
    ) -> Result<(), crate::storage::StorageError> {
        result
    }

    /// Bytes of acceptor log on disk, over every store this node holds.
    fn log_bytes(&self) -> u64 {
        0
    }

    /// Whether this protocol takes snapshots at all: a `take_snapshot` error is then
    /// passing (a transfer or a reconfiguration under way, a store failure), and the
    /// runtime asks again at the next interval; otherwise it stops asking.
    fn snapshots_supported(&self) -> bool {
        false
    }

    /// The application hands its state after every instance delivered so far (`app`,
    /// taken with no delivery in between); the protocol adds its learner state and returns
    /// the snapshot for the caller to persist. From now on this learner reports
    /// `snapshot.upto`, and acceptors may trim below the point every learner
    /// reported. `Err` for a protocol (or role) without snapshots.
    fn take_snapshot(&mut self, app: Bytes) -> Result<Snapshot, String> {
        let _ = app;
        Err("this protocol does not take snapshots yet".into())
    }

    /// A restarted learner starts after its snapshot instead of at instance 1 (call before
    /// any other input; the application restores `snapshot.app` itself).
    fn restore_snapshot(&mut self, snapshot: &Snapshot) -> Result<(), String> {
        let _ = snapshot;
        Err("this protocol does not restore snapshots yet".into())
    }

    /// For a protocol of several groups, where `snapshot` (one of its own) stands in each
    /// group this learner may deliver: what a checker or a subscriber needs to hold the
    /// learner to every later instance. Empty for a single-group protocol, whose
    /// `snapshot.upto` says it all.
    fn snapshot_groups(&self, snapshot: &Snapshot) -> Vec<GroupPosition> {
        let _ = snapshot;
        Vec::new()
    }

    /// This learner joins (`join`) or leaves `group`: it starts or stops delivering the
    /// group's messages at a point every member agrees on, reported as a positioned
    /// [`Subscription`]. Group membership is a contract of more than one family: Multi-Ring
    /// Paxos subscribes a learner to a ring (a control value decided in that ring, seed 000
    /// §2.4), and the token ring's process groups (seed 002, Spread / Corosync CPG) join
    /// and leave named groups. `Ok` means the change is asked for, not yet in effect. A
    /// protocol that runs a single group refuses.
    fn join_group(
        &mut self,
        now: Micros,
        group: GroupId,
        join: bool,
        out: &mut Outbox<Self::Message>,
    ) -> Result<(), String> {
        let _ = (now, join, out);
        Err(format!(
            "this node runs a single group; it cannot join or leave group {}",
            group.0
        ))
    }

    /// Moves the protocol instance to a new configuration (seed 001 §2.4.3 stop-sign
    /// reconfiguration, Raft's joint consensus). `Ok` means the change is under way, not in
    /// effect: it takes effect where a `ConfigChange` appears among the deliveries. A
    /// protocol without reconfiguration refuses with `Unsupported`; a non-leader of a
    /// leader-based protocol with `NotLeader`.
    fn reconfigure(
        &mut self,
        now: Micros,
        config: Configuration,
        out: &mut Outbox<Self::Message>,
    ) -> Result<(), ReconfigureError> {
        let _ = (now, out);
        config.validate().map_err(ReconfigureError::Invalid)?;
        Err(ReconfigureError::Refused(ProposeError::Unsupported {
            what: "reconfiguration",
        }))
    }

    /// The driver lost its link to `peer` (a connection closed or timed out). Protocols
    /// with their own failure detector may ignore it; a leader-based one re-synchronises the
    /// follower when it is back (OmniPaxos' `reconnected`, seed 001 §4.4: the thesis assumes
    /// FIFO perfect links, which a dropped connection breaks).
    fn peer_unreachable(&mut self, now: Micros, peer: NodeId, out: &mut Outbox<Self::Message>) {
        let _ = (now, peer, out);
    }

    /// The driver's link to `peer` is up (again; the runtime calls it at every connect, so
    /// also at the first one; see [`Protocol::peer_unreachable`]).
    fn peer_reconnected(&mut self, now: Micros, peer: NodeId, out: &mut Outbox<Self::Message>) {
        let _ = (now, peer, out);
    }

    /// A linearizable-read barrier (read index, etcd-io/raft `ReadIndex`): the protocol
    /// confirms it is still entitled to answer (a leader: a heartbeat round to a quorum)
    /// and answers with a [`ReadState`] `{ id, upto }` in a later outbox; the reader reads
    /// its state once this learner delivered up to `upto`. A protocol without a barrier of
    /// its own refuses with `Unsupported` (the driver then orders the read through the log:
    /// a value proposed and awaited).
    fn read_index(
        &mut self,
        now: Micros,
        id: u64,
        out: &mut Outbox<Self::Message>,
    ) -> Result<(), ProposeError> {
        let _ = (now, id, out);
        Err(ProposeError::Unsupported {
            what: "a read-index barrier",
        })
    }
}

/// Why [`Protocol::reconfigure`] did not start a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReconfigureError {
    /// The new configuration is not one (no member, a node twice, ...).
    Invalid(ConfigError),
    /// This node cannot start it now (not the leader, a change already under way, or the
    /// protocol has no reconfiguration).
    Refused(ProposeError),
}

impl std::fmt::Display for ReconfigureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReconfigureError::Invalid(e) => write!(f, "{e}"),
            ReconfigureError::Refused(e) => write!(f, "reconfiguration refused: {e}"),
        }
    }
}

impl std::error::Error for ReconfigureError {}
