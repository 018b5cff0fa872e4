//! The safety and liveness checkers. They see every proposal, acknowledgement and delivery
//! of a run, as it happens, and fail at the first event that breaks a property, naming the
//! node, its incarnation, the instance and the value.
//!
//! The properties (GUIDE layer 4):
//!
//! - **Agreement.** One instance delivers one batch, wherever it is delivered
//!   ([`ViolationKind::ConflictingDecision`]); every learner delivers instances in increasing
//!   order ([`ViolationKind::OutOfOrder`]) and never jumps over an instance that some learner
//!   delivered ([`ViolationKind::SkippedInstance`]). Together: every learner's sequence is a
//!   gap-free stretch of one common sequence. A learner incarnation that started from
//!   nothing (an in-memory restart) may begin its stretch at its first delivered instance;
//!   a fresh learner (first start, late joiners included) must begin at the beginning,
//!   unless [`Checker::new`] is told otherwise.
//! - **Integrity.** No learner incarnation delivers a value twice
//!   ([`ViolationKind::DuplicateDelivery`]); no value is decided in two instances
//!   ([`ViolationKind::ValueInTwoInstances`]); every delivered value was proposed
//!   ([`ViolationKind::NeverProposed`]) with this payload ([`ViolationKind::PayloadMismatch`]);
//!   a protocol hands out each value id once ([`ViolationKind::BadValueId`]) and acknowledges
//!   only values proposed at that node ([`ViolationKind::UnknownAck`]).
//! - **Durability.** An acknowledged value is decided eventually, even when its proposer
//!   crashed ([`ViolationKind::LostAckedValue`]).
//! - **Validity / liveness after heal.** Every acknowledged value, and every value proposed
//!   by a proposer incarnation that is still alive, is delivered by every live learner
//!   within the bound ([`ViolationKind::NotDelivered`]), and all live learners end at the
//!   same instance ([`ViolationKind::NotConverged`]).
//!
//! - **Merge order (atomic multicast).** Any two learners deliver the batches they both
//!   deliver in the same relative order ([`ViolationKind::MergeOrder`]), whatever groups
//!   each follows: the Multi-Ring guarantee (seed 000 §2.4). Checked incrementally on every
//!   delivery against every other learner incarnation.
//!
//! - **Linearizable reads.** A read issued after a value was acknowledged and answered with
//!   `ReadState { upto }` must find the value at or below `upto` once its learner delivered
//!   up to there ([`ViolationKind::StaleRead`]; [`Checker::check_read`]).
//! - **One sequence of configurations.** Every learner that reports a configuration change
//!   reports the same configuration under the same id, after the same instance of the common
//!   sequence, in increasing id order, without jumping over one that another learner
//!   reported ([`ViolationKind::ConfigMismatch`]; [`Checker::config_change`]).
//!
//! Per-sender FIFO is not checked: U-Ring Paxos does not promise it.
//!
//! Instance numbers of a group (a ring) are the common language: two learners agree exactly
//! when they map the same `(group, instance)` to the same batches. No-op instances deliver
//! nothing and are invisible. A learner follows group 0 from its start; a protocol with
//! several groups says which ones a learner follows with `Outbox::subscriptions`, and the
//! gap and convergence checks apply to a group only while the learner follows it.

use abcast_core::protocol::Ack;
use abcast_core::{BatchKey, Delivery, GroupId, Instance, Micros, NodeId, Subscription, ValueId};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};

/// What went wrong, precisely enough for a test to assert on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ViolationKind {
    /// Two learners delivered different batches in one instance.
    ConflictingDecision,
    /// Two learners delivered two batches in opposite orders (Multi-Ring merge).
    MergeOrder,
    /// A learner delivered from a group it had unsubscribed from.
    NotSubscribed,
    /// A learner jumped over an instance that another learner delivered.
    SkippedInstance,
    /// A learner delivered an instance not above the last one it delivered.
    OutOfOrder,
    /// A learner incarnation delivered one value twice.
    DuplicateDelivery,
    /// One value was decided in two instances.
    ValueInTwoInstances,
    /// A delivered value was never returned by `propose`.
    NeverProposed,
    /// A delivered value's payload differs from the proposed one.
    PayloadMismatch,
    /// `propose` returned an id that it had returned before, or of another node.
    BadValueId,
    /// An acknowledgement names a value this node never proposed.
    UnknownAck,
    /// An acknowledged value was not decided by the end of the convergence bound.
    LostAckedValue,
    /// A value that must be delivered (acknowledged, or from a proposer still alive) was not
    /// delivered by some live learner within the bound.
    NotDelivered,
    /// Everything required was delivered, but the live learners did not end at one instance.
    NotConverged,
    /// A message did not decode from its own encoding.
    Decode,
    /// A decoded message encodes to other bytes than it was decoded from.
    CodecMismatch,
    /// The run used up its event budget (a message storm or a zero-delay loop).
    EventBudget,
    /// The simulation configuration is invalid.
    BadConfig,
    /// A node's store failed: a group commit returned an error, or the store would not open
    /// at a restart (a log the crash left in a state its recovery refuses).
    StorageFailed,
    /// A protocol or factory call panicked (an assertion of its own caught something).
    Panicked,
    /// A protocol refused a message as one no correct peer sends (`Event::MessageRefused`:
    /// a second leader for one term, a leader message whose leader is not its sender).
    /// Nothing here forges messages, so one that comes means a protocol broke its rules.
    RefusedMessage,
    /// A snapshot (taken, restored at a restart, or installed from a peer) holds another
    /// state than the sequence up to its instance, or moved a learner backwards.
    SnapshotMismatch,
    /// No value was acknowledged in the whole run (`SimConfig::require_acks`): a protocol
    /// that decides nothing passes every safety check, so a run must show progress.
    NothingAcked,
    /// `propose` answered `Busy` more often than `SimConfig::busy_rejections_max`.
    TooBusy,
    /// A read answered with `ReadState { upto }` misses a value acknowledged before the read
    /// was issued: the value is not in the learner's sequence up to `upto` (or the read's id
    /// was never asked of that node).
    StaleRead,
    /// Learners disagree on the configurations: one id with two memberships, one
    /// configuration at two places of the sequence, changes out of order, or one jumped over.
    ConfigMismatch,
    /// A reconfiguration the plan asked for could not be asked (the protocol said its
    /// configuration was invalid, or that it has no reconfiguration).
    ReconfigRefused,
    /// In an episode of the partial-connectivity mix, with some node reachable both ways
    /// by a majority, no such node led, or no value proposed since the episode started (or
    /// since the last bound) was delivered at a majority, within
    /// `SimConfig::partial_bound_us` (for a protocol that claims it).
    PartialConnectivityStall,
    /// EVS (a token ring): two members delivered different messages at one place of a
    /// regular configuration's order, or the lives' orders together form a cycle.
    EvsOrder,
    /// EVS: members that moved together from one configuration to the next delivered
    /// different messages (or in another order) in the old one and its transitional one.
    EvsVirtualSynchrony,
    /// EVS: a message delivered in another configuration than the one it was sent in (or
    /// the transitional configuration after that).
    EvsWrongConfiguration,
    /// EVS: a message delivered Safe that some member of the configuration, alive or
    /// moved on, never delivered.
    EvsSafe,
    /// EVS: a live member never delivered a value it proposed.
    EvsSelfDelivery,
    /// The membership did not settle within the bound: after the heal, not every live node
    /// was in one configuration of them all; or, while a one-way link stayed, the
    /// configurations kept changing.
    MembershipUnsettled,
    /// Process groups: two members delivered a group's message in one configuration in
    /// different views of the group, a view listed a member whose node is outside the
    /// configuration, or a message came in another view than the last one told.
    GroupView,
    /// Process groups: after the heal, some live node had not ended its state exchange,
    /// or its groups were not the members the live nodes hold, within the bound.
    GroupsUnsettled,
    /// EVS (a token ring): in the last window of a remain phase whose fault stays (a data
    /// lane cut, a link cut one way), a live node acknowledged none of the values proposed
    /// at it: a member that cannot receive holds every member's discard point down and
    /// was never removed (Totem's "failed to receive" rule, Corosync's `fail_to_recv_const`).
    AcksStalled,
}

impl ViolationKind {
    /// The property this kind belongs to.
    pub fn property(self) -> &'static str {
        use ViolationKind::*;
        match self {
            ConflictingDecision | SkippedInstance | OutOfOrder | NotSubscribed
            | SnapshotMismatch | ConfigMismatch => "agreement",
            EvsOrder | EvsVirtualSynchrony | EvsWrongConfiguration | EvsSafe => "evs",
            EvsSelfDelivery => "self-delivery",
            GroupView => "groups",
            StaleRead => "linearizability",
            ReconfigRefused => "config",
            MergeOrder => "merge order",
            DuplicateDelivery | ValueInTwoInstances | NeverProposed | PayloadMismatch
            | BadValueId | UnknownAck => "integrity",
            LostAckedValue => "durability",
            NotDelivered
            | NotConverged
            | EventBudget
            | NothingAcked
            | TooBusy
            | PartialConnectivityStall
            | MembershipUnsettled
            | GroupsUnsettled
            | AcksStalled => "liveness",
            Decode | CodecMismatch => "codec",
            BadConfig => "config",
            StorageFailed => "storage",
            Panicked => "panic",
            RefusedMessage => "refused message",
        }
    }
}

/// A property broken at one event, without the run context (seed, replay line, trace) that
/// the simulator adds when it turns this into a [`crate::Violation`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub kind: ViolationKind,
    pub node: Option<NodeId>,
    pub incarnation: Option<u64>,
    pub instance: Option<Instance>,
    pub value: Option<ValueId>,
    pub detail: String,
}

impl Failure {
    pub fn new(kind: ViolationKind, detail: impl Into<String>) -> Failure {
        Failure {
            kind,
            node: None,
            incarnation: None,
            instance: None,
            value: None,
            detail: detail.into(),
        }
    }
    pub fn at(mut self, node: NodeId, incarnation: u64) -> Failure {
        self.node = Some(node);
        self.incarnation = Some(incarnation);
        self
    }
    pub fn instance(mut self, instance: Instance) -> Failure {
        self.instance = Some(instance);
        self
    }
    pub fn value(mut self, value: ValueId) -> Failure {
        self.value = Some(value);
        self
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} ({})", self.kind, self.kind.property())?;
        if let Some(n) = self.node {
            write!(f, " node {n}")?;
            if let Some(i) = self.incarnation {
                write!(f, "#{i}")?;
            }
        }
        if let Some(i) = self.instance {
            write!(f, " instance {i}")?;
        }
        if let Some(v) = self.value {
            write!(f, " value {v}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// A learner incarnation: one node between a start and a crash.
pub type LearnerId = (NodeId, u64);

/// A map the checker only looks things up in (never iterates), keyed by small integers:
/// hashed with [`FastHasher`] instead of SipHash, which showed in the sweeps' profiles
/// (every delivery looks its values and batch up in every learner's maps).
type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// The multiply-rotate hash of rustc's `FxHasher`: fast on integer keys, not DoS-resistant
/// (the keys are the simulator's own ids).
#[derive(Default)]
struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
}

/// An order-sensitive digest of a delivered sequence of batches: what the simulator's
/// learners keep as their application state, so that a snapshot's state can be compared
/// with the sequence it claims to cover.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqDigest {
    pub batches: u64,
    pub values: u64,
    pub hash: u64,
}

impl SeqDigest {
    pub fn add(&mut self, key: BatchKey, count: usize) {
        let mut h = self.hash ^ 0x9E37_79B9_7F4A_7C15;
        for w in [u64::from(key.origin.0), key.first_seq, count as u64] {
            h = (h ^ w).wrapping_mul(0x0100_0000_01B3).rotate_left(29);
        }
        self.hash = h;
        self.batches += 1;
        self.values += count as u64;
    }
}

/// Why the checker is told about a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotEvent {
    /// The learner took it: its state must be the sequence up to `upto`.
    Taken,
    /// A restarted learner starts from it: it must deliver every instance after `upto`.
    Restored,
    /// A learner behind the trim point installed it from a peer and goes on after `upto`.
    Installed,
}

#[derive(Debug)]
struct Proposal {
    payload: Bytes,
    incarnation: u64,
    proposed_at_us: Micros,
    acked_at_us: Option<Micros>,
    /// The instance that decided it, once some learner delivered it.
    instance: Option<Instance>,
}

#[derive(Debug)]
struct Decided {
    key: BatchKey,
    count: usize,
    by: LearnerId,
    at_us: Micros,
}

/// One learner's progress in one group.
#[derive(Debug)]
struct Cursor {
    /// The learner's sequence covers every decided instance above `floor` up to `last`.
    /// `None` until the first delivery of a learner that may start anywhere.
    floor: Option<Instance>,
    last: Instance,
    /// Whether the learner follows the group now.
    subscribed: bool,
    /// Subscribed mid-stream (Multi-Ring subscribe at run time) and nothing of the group
    /// delivered since. The subscription starts at a merge turn, which the checker cannot
    /// map to an instance, so it may start after the group's last value (seen in the
    /// multiring partition sweep: a subscribe decided after the load ended): such a cursor
    /// is not required to reach the group's last instance. Its first delivery sets `floor`,
    /// and from then on the gap check holds it to every later instance.
    idle_since_subscribe: bool,
    /// Placed by a restored or installed snapshot of several groups
    /// ([`Checker::group_snapshot`]): the subscription the learner then reports for the
    /// group, at the same place, keeps the snapshot's `floor` (the learner must deliver
    /// every instance after it). Cleared by the next delivery or subscription.
    pinned: bool,
}

#[derive(Debug)]
struct Learner {
    /// Started fresh: follows the groups it starts with from their first instance.
    fresh: bool,
    groups: BTreeMap<GroupId, Cursor>,
    delivered: FastMap<ValueId, Instance>,
    /// Position of each delivered batch in this learner's sequence.
    order: FastMap<BatchKey, u64>,
    next_pos: u64,
    /// Per other learner: the highest position, in that learner's sequence, of a batch both
    /// have delivered (see `Checker::check_merge_order`).
    pair_last: FastMap<LearnerId, u64>,
    alive: bool,
}

impl Learner {
    fn new(fresh: bool) -> Learner {
        Learner {
            fresh,
            groups: BTreeMap::new(),
            delivered: FastMap::default(),
            order: FastMap::default(),
            next_pos: 0,
            pair_last: FastMap::default(),
            alive: true,
        }
    }
}

/// The checkers' state for one run. Feed it every event through `start`, `crash`,
/// `propose`, `ack` and `deliver`; ask `converged` and `liveness_failure` after the heal.
#[derive(Debug)]
pub struct Checker {
    fresh_learners_deliver_all: bool,
    proposals: BTreeMap<ValueId, Proposal>,
    decided: BTreeMap<(GroupId, Instance), Decided>,
    learners: BTreeMap<LearnerId, Learner>,
    /// Values that must be delivered (acked, or from a live proposer incarnation) and that no
    /// learner has delivered yet. "Decided" below means "delivered by some learner": the
    /// checker sees deliveries, not the protocol's internal decisions.
    pending: BTreeSet<ValueId>,
    acked_values: u64,
    delivered_values: BTreeMap<NodeId, u64>,
    /// Every acknowledged value, in the order the acknowledgements were observed: a read
    /// remembers how many there were when it was issued.
    acked_log: Vec<ValueId>,
    /// For the prefix of `acked_log` that `check_read` has found decided, entry `k` is the
    /// highest instance of `acked_log[..=k]`: a value's instance, once set, never changes,
    /// so each read looks only at the values acknowledged since (instead of every one since
    /// the run began).
    acked_prefix_max: Vec<Instance>,
    /// [`Checker::canonical_digest`]'s answers, kept as group 0's instances are decided;
    /// `None` once one was decided below another decided before (then it walks `decided`).
    g0_digests: Option<G0Digests>,
    /// Every configuration some learner reported, by id.
    configs: BTreeMap<u64, SeenConfig>,
    /// Per learner incarnation, the last configuration id it reported.
    last_config: BTreeMap<LearnerId, u64>,
}

/// Group 0's decided instances, in increasing order, each with the digest of the common
/// sequence up to it; and the batch keys decided so far (a batch decided again later counts
/// at its first instance only). Snapshots are checked every 100 ms at every node: without
/// these, each check walked the whole sequence from the run's start.
#[derive(Debug, Default)]
struct G0Digests {
    upto: Vec<(Instance, SeqDigest)>,
    keys: FastMap<BatchKey, ()>,
}

/// A configuration as the first learner that reported it saw it.
#[derive(Debug)]
struct SeenConfig {
    /// Members and whether each is an acceptor, sorted by id.
    members: Vec<(NodeId, bool)>,
    /// The last instance of group 0 delivered before it (`None`: that learner's stretch
    /// did not start at the beginning, so the position is unknown).
    after: Option<Instance>,
    by: LearnerId,
    at_us: Micros,
}

impl Checker {
    /// `fresh_learners_deliver_all`: a learner that starts fresh (first start, not amnesic)
    /// must deliver the common sequence from its beginning.
    pub fn new(fresh_learners_deliver_all: bool) -> Checker {
        Checker {
            fresh_learners_deliver_all,
            proposals: BTreeMap::new(),
            decided: BTreeMap::new(),
            learners: BTreeMap::new(),
            pending: BTreeSet::new(),
            acked_values: 0,
            delivered_values: BTreeMap::new(),
            acked_log: Vec::new(),
            acked_prefix_max: Vec::new(),
            g0_digests: Some(G0Digests::default()),
            configs: BTreeMap::new(),
            last_config: BTreeMap::new(),
        }
    }

    /// How many values have been acknowledged so far (a read issued now must see them all).
    pub fn acked_len(&self) -> usize {
        self.acked_log.len()
    }

    /// A read issued when `acked_len` values were acknowledged was answered with
    /// `ReadState { upto }` by `node`, and the node has now delivered every instance up to
    /// `upto`: each of those values must be in the common sequence at or below `upto` (so in
    /// that learner's delivered prefix, which agreement keeps gap-free).
    pub fn check_read(
        &mut self,
        node: NodeId,
        incarnation: u64,
        read_id: u64,
        acked_len: usize,
        upto: Instance,
    ) -> Result<(), Failure> {
        // The decided prefix of `acked_log`, extended as far as the values are decided.
        let len = acked_len.min(self.acked_log.len());
        while self.acked_prefix_max.len() < len {
            let v = self.acked_log[self.acked_prefix_max.len()];
            let Some(i) = self.proposals.get(&v).and_then(|p| p.instance) else {
                break;
            };
            let max = self.acked_prefix_max.last().map_or(i, |&m| m.max(i));
            self.acked_prefix_max.push(max);
        }
        if self.acked_prefix_max.len() >= len
            && len
                .checked_sub(1)
                .is_none_or(|k| self.acked_prefix_max[k] <= upto)
        {
            // Every value of the read's prefix is decided at or below `upto`: the scan below
            // would find nothing.
            return Ok(());
        }
        // Something is missing or above `upto`: the scan names the first such value.
        for &v in self.acked_log.iter().take(acked_len) {
            let at = self.proposals.get(&v).and_then(|p| p.instance);
            if at.is_none_or(|i| i > upto) {
                let (acked, where_) = match self.proposals.get(&v) {
                    Some(p) => (
                        p.acked_at_us.unwrap_or(0),
                        match p.instance {
                            Some(i) => format!("it is in instance {i}"),
                            None => "no learner delivered it yet".to_string(),
                        },
                    ),
                    None => (0, String::new()),
                };
                return Err(Failure::new(
                    ViolationKind::StaleRead,
                    format!(
                        "read {read_id} answered with upto {upto} misses {v}, acknowledged at t={acked}us \
                         before the read was issued: {where_}"
                    ),
                )
                .at(node, incarnation)
                .instance(upto)
                .value(v));
            }
        }
        Ok(())
    }

    /// `node` reports a configuration change (see the module comment: one sequence of
    /// configurations, each at one place of the common sequence).
    pub fn config_change(
        &mut self,
        now_us: Micros,
        node: NodeId,
        incarnation: u64,
        config: &abcast_core::config::Configuration,
    ) -> Result<(), Failure> {
        let me = (node, incarnation);
        if !self.learners.contains_key(&me) {
            self.start(node, incarnation, incarnation == 0);
        }
        let id = config.id;
        let fail = |detail: String| {
            Failure::new(ViolationKind::ConfigMismatch, detail).at(node, incarnation)
        };
        let mut members: Vec<(NodeId, bool)> = config
            .members
            .iter()
            .map(|m| (m.id, m.roles.acceptor))
            .collect();
        members.sort_unstable();
        let after = self
            .learners
            .get(&me)
            .and_then(|l| l.groups.get(&GroupId(0)))
            .and_then(|c| c.floor.map(|_| c.last));
        if let Some(&prev) = self.last_config.get(&me) {
            if id <= prev {
                return Err(fail(format!(
                    "reports configuration {id} after configuration {prev}"
                )));
            }
            if let Some((&between, seen)) = self.configs.range(prev + 1..id).next() {
                return Err(fail(format!(
                    "reports configuration {id} right after {prev}, jumping over configuration {between}                      that {}#{} reported at t={}us",
                    seen.by.0, seen.by.1, seen.at_us
                )));
            }
        }
        match self.configs.get_mut(&id) {
            Some(seen) => {
                if seen.members != members {
                    return Err(fail(format!(
                        "configuration {id} has members {members:?}; {}#{} reported it with {:?} at t={}us",
                        seen.by.0, seen.by.1, seen.members, seen.at_us
                    )));
                }
                match (seen.after, after) {
                    (Some(a), Some(b)) if a != b => {
                        return Err(fail(format!(
                            "configuration {id} takes effect after instance {b} here; {}#{} applied it                              after instance {a} at t={}us",
                            seen.by.0, seen.by.1, seen.at_us
                        )));
                    }
                    (None, Some(b)) => seen.after = Some(b),
                    _ => {}
                }
            }
            None => {
                self.configs.insert(
                    id,
                    SeenConfig {
                        members,
                        after,
                        by: me,
                        at_us: now_us,
                    },
                );
            }
        }
        self.last_config.insert(me, id);
        Ok(())
    }

    /// Configurations reported so far (distinct ids).
    pub fn configs_seen(&self) -> usize {
        self.configs.len()
    }

    /// A node incarnation starts. `fresh`: first start with nothing forgotten.
    pub fn start(&mut self, node: NodeId, incarnation: u64, fresh: bool) {
        let mut l = Learner::new(fresh && self.fresh_learners_deliver_all);
        l.groups.insert(GroupId(0), self.cursor(l.fresh, true));
        self.learners.insert((node, incarnation), l);
    }

    fn cursor(&self, fresh: bool, from_start: bool) -> Cursor {
        Cursor {
            floor: (fresh && from_start).then_some(0),
            last: 0,
            subscribed: true,
            idle_since_subscribe: false,
            pinned: false,
        }
    }

    /// A learner starts or stops following a group (Multi-Ring subscribe / unsubscribe).
    pub fn subscription(&mut self, node: NodeId, incarnation: u64, sub: &Subscription) {
        let me = (node, incarnation);
        if !self.learners.contains_key(&me) {
            self.start(node, incarnation, incarnation == 0);
        }
        let fresh = self.learners.get(&me).is_some_and(|l| l.fresh);
        let fresh_cursor = self.cursor(fresh, sub.from_start);
        let Some(l) = self.learners.get_mut(&me) else {
            return;
        };
        let c = l.groups.entry(sub.group).or_insert(fresh_cursor);
        if std::mem::take(&mut c.pinned) && sub.subscribed && c.subscribed {
            // The subscription a snapshot install reports: the snapshot placed the cursor.
            return;
        }
        if sub.subscribed {
            if !c.subscribed || !sub.from_start {
                // Back after a pause: the stretch may start anywhere above what it had.
                c.floor = if sub.from_start { c.floor } else { None };
            }
            c.idle_since_subscribe = !sub.from_start;
            c.subscribed = true;
        } else {
            c.subscribed = false;
            c.floor = None;
        }
    }

    /// A node incarnation crashes: its unacknowledged proposals are no longer required.
    pub fn crash(&mut self, node: NodeId, incarnation: u64) {
        if let Some(l) = self.learners.get_mut(&(node, incarnation)) {
            l.alive = false;
        }
        let proposals = &self.proposals;
        self.pending.retain(|id| match proposals.get(id) {
            Some(p) => {
                !(id.node == node && p.incarnation == incarnation && p.acked_at_us.is_none())
            }
            None => false,
        });
    }

    /// `propose` at `node` returned `id` for `payload`.
    pub fn propose(
        &mut self,
        now_us: Micros,
        node: NodeId,
        incarnation: u64,
        id: ValueId,
        payload: Bytes,
    ) -> Result<(), Failure> {
        if id.node != node {
            return Err(Failure::new(
                ViolationKind::BadValueId,
                format!("propose at {node} returned an id of {}", id.node),
            )
            .at(node, incarnation)
            .value(id));
        }
        if let Some(p) = self.proposals.get(&id) {
            return Err(Failure::new(
                ViolationKind::BadValueId,
                format!(
                    "propose returned {id} again; it was first returned at t={}us to incarnation {}",
                    p.proposed_at_us, p.incarnation
                ),
            )
            .at(node, incarnation)
            .value(id));
        }
        self.proposals.insert(
            id,
            Proposal {
                payload,
                incarnation,
                proposed_at_us: now_us,
                acked_at_us: None,
                instance: None,
            },
        );
        self.pending.insert(id);
        Ok(())
    }

    /// `node` acknowledged values of its own.
    pub fn ack(
        &mut self,
        now_us: Micros,
        node: NodeId,
        incarnation: u64,
        ack: &Ack,
    ) -> Result<(), Failure> {
        if ack.key.origin != node {
            return Err(Failure::new(
                ViolationKind::UnknownAck,
                format!(
                    "{node} acknowledged batch {} x{} of another node",
                    ack.key, ack.count
                ),
            )
            .at(node, incarnation));
        }
        for i in 0..u64::from(ack.count) {
            let id = ValueId {
                node,
                seq: ack.key.first_seq.saturating_add(i),
            };
            let Some(p) = self.proposals.get_mut(&id) else {
                return Err(Failure::new(
                    ViolationKind::UnknownAck,
                    format!(
                        "acknowledgement of batch {} x{} names {id}, never proposed",
                        ack.key, ack.count
                    ),
                )
                .at(node, incarnation)
                .value(id));
            };
            if p.acked_at_us.is_none() {
                p.acked_at_us = Some(now_us);
                self.acked_values += 1;
                self.acked_log.push(id);
                if p.instance.is_none() {
                    self.pending.insert(id);
                }
            }
        }
        Ok(())
    }

    /// `node` delivered `delivery`. Checks agreement and integrity at once.
    pub fn deliver(
        &mut self,
        now_us: Micros,
        node: NodeId,
        incarnation: u64,
        delivery: &Delivery,
    ) -> Result<(), Failure> {
        let me = (node, incarnation);
        let instance = delivery.instance;
        let group = delivery.group;
        let at = (group, instance);
        let batch = &delivery.batch;
        let key = batch.key();
        let fail = |kind, detail: String| {
            Failure::new(kind, detail)
                .at(node, incarnation)
                .instance(instance)
        };
        if !self.learners.contains_key(&me) {
            self.start(node, incarnation, incarnation == 0);
        }
        let Some(learner) = self.learners.get(&me) else {
            return Err(fail(
                ViolationKind::BadConfig,
                "learner state missing".into(),
            ));
        };
        let (last, floor) = match learner.groups.get(&group) {
            Some(c) if !c.subscribed => {
                return Err(fail(
                    ViolationKind::NotSubscribed,
                    format!(
                        "delivers batch {key} of group {} after unsubscribing",
                        group.0
                    ),
                ));
            }
            Some(c) => (c.last, c.floor),
            None => (0, None),
        };

        // Integrity, value by value.
        for v in batch.values() {
            let Some(p) = self.proposals.get(&v.id) else {
                return Err(fail(
                    ViolationKind::NeverProposed,
                    format!("batch {key} holds {}, never proposed", v.id),
                )
                .value(v.id));
            };
            if p.payload != v.payload {
                return Err(fail(
                    ViolationKind::PayloadMismatch,
                    format!(
                        "{} delivered with {} bytes {:02x?}.., proposed with {} bytes {:02x?}..",
                        v.id,
                        v.payload.len(),
                        &v.payload[..v.payload.len().min(12)],
                        p.payload.len(),
                        &p.payload[..p.payload.len().min(12)]
                    ),
                )
                .value(v.id));
            }
            if let Some(first) = learner.delivered.get(&v.id) {
                return Err(fail(
                    ViolationKind::DuplicateDelivery,
                    format!("{} delivered again (batch {key}); this learner delivered it in instance {first}", v.id),
                )
                .value(v.id));
            }
        }

        // Order within this learner.
        if instance == 0 || instance <= last {
            return Err(fail(
                ViolationKind::OutOfOrder,
                format!(
                    "delivered instance {instance} of group {} after instance {last}",
                    group.0
                ),
            ));
        }

        // Agreement across learners.
        match self.decided.get(&at) {
            Some(d) => {
                if d.key != key || d.count != batch.len() {
                    return Err(fail(
                        ViolationKind::ConflictingDecision,
                        format!(
                            "delivers batch {key} x{} in group {}; {}#{} delivered batch {} x{} in this instance at t={}us",
                            batch.len(),
                            group.0,
                            d.by.0,
                            d.by.1,
                            d.key,
                            d.count,
                            d.at_us
                        ),
                    ));
                }
            }
            None => {
                for v in batch.ids() {
                    if let Some(j) = self.proposals.get(&v).and_then(|p| p.instance) {
                        return Err(fail(
                            ViolationKind::ValueInTwoInstances,
                            format!("{v} delivered in instance {instance}; it was decided in instance {j} before"),
                        )
                        .value(v));
                    }
                }
                // A new instance: a learner already past it has skipped it.
                for (&(other, other_inc), l) in &self.learners {
                    if (other, other_inc) == me {
                        continue;
                    }
                    let Some(c) = l.groups.get(&group) else {
                        continue;
                    };
                    if let Some(floor) = c.floor
                        && floor < instance
                        && instance < c.last
                    {
                        return Err(Failure::new(
                            ViolationKind::SkippedInstance,
                            format!(
                                "{node}#{incarnation} delivers batch {key} in instance {instance}, which \
                                 {other}#{other_inc} jumped over (it delivered up to {} without it)",
                                c.last
                            ),
                        )
                        .at(other, other_inc)
                        .instance(instance));
                    }
                }
            }
        }

        // A gap in this learner's own sequence.
        if let Some(floor) = floor {
            let from = last.max(floor) + 1;
            if let Some((&(_, j), d)) = self.decided.range((group, from)..at).next() {
                return Err(Failure::new(
                    ViolationKind::SkippedInstance,
                    format!(
                        "delivered instance {instance} after {last}, jumping over instance {j} where {}#{} delivered \
                         batch {} x{} at t={}us",
                        d.by.0, d.by.1, d.key, d.count, d.at_us
                    ),
                )
                .at(node, incarnation)
                .instance(j));
            }
        }

        self.check_merge_order(me, key)
            .map_err(|detail| fail(ViolationKind::MergeOrder, detail))?;

        // Record.
        if let std::collections::btree_map::Entry::Vacant(slot) = self.decided.entry(at) {
            slot.insert(Decided {
                key,
                count: batch.len(),
                by: me,
                at_us: now_us,
            });
            if group == GroupId(0) {
                self.note_g0_decided(instance, key, batch.len());
            }
            for v in batch.ids() {
                if let Some(p) = self.proposals.get_mut(&v) {
                    p.instance = Some(instance);
                }
                self.pending.remove(&v);
            }
        }
        let fresh_cursor = Cursor {
            floor: None,
            last: 0,
            subscribed: true,
            idle_since_subscribe: false,
            pinned: false,
        };
        if let Some(l) = self.learners.get_mut(&me) {
            let c = l.groups.entry(group).or_insert(fresh_cursor);
            if c.floor.is_none() {
                c.floor = Some(instance);
            }
            c.idle_since_subscribe = false;
            c.pinned = false;
            c.last = instance;
            for v in batch.ids() {
                l.delivered.insert(v, instance);
            }
            l.order.insert(key, l.next_pos);
            l.next_pos += 1;
        }
        *self.delivered_values.entry(node).or_insert(0) += batch.len() as u64;
        Ok(())
    }

    /// A learner reports that it skipped instances `[from, to)` of `group`: every acceptor
    /// had trimmed them from its window (`Outbox::skips`, only where learners take no
    /// snapshots). The skip must start where the learner is (it may not hide an instance it
    /// jumped over before), and from then on the learner is held to every instance from
    /// `to` on; values decided in the skipped range are no longer required of it.
    pub fn skip(
        &mut self,
        node: NodeId,
        incarnation: u64,
        group: GroupId,
        from: Instance,
        to: Instance,
    ) -> Result<(), Failure> {
        let me = (node, incarnation);
        if !self.learners.contains_key(&me) {
            self.start(node, incarnation, incarnation == 0);
        }
        let fail = |detail: String| {
            Failure::new(ViolationKind::SkippedInstance, detail)
                .at(node, incarnation)
                .instance(from)
        };
        if to <= from {
            return Err(fail(format!(
                "reports an empty or backward skip {from}..{to}"
            )));
        }
        let Some(c) = self
            .learners
            .get_mut(&me)
            .and_then(|l| l.groups.get_mut(&group))
        else {
            return Ok(());
        };
        if !c.subscribed {
            // A Multi-Ring learner stops following a ring it skipped (it no longer knows the
            // ring's slots): nothing more is required of it there.
            return Ok(());
        }
        if c.floor.is_some() && from > c.last + 1 {
            // Between its last delivery and the skip, an instance some learner delivered?
            if let Some((&(_, j), d)) = self
                .decided
                .range((group, c.last + 1)..(group, from))
                .next()
            {
                return Err(Failure::new(
                    ViolationKind::SkippedInstance,
                    format!(
                        "skips {from}..{to} after delivering up to {}, jumping over instance {j} where {}#{} \
                         delivered batch {} x{} unannounced",
                        c.last, d.by.0, d.by.1, d.key, d.count
                    ),
                )
                .at(node, incarnation)
                .instance(j));
            }
        }
        c.last = c.last.max(to - 1);
        if c.floor.is_none() {
            c.floor = Some(to - 1);
        }
        Ok(())
    }

    /// The digest of the common sequence of group 0 up to `upto`: every batch delivered
    /// there, each at its first instance (a batch decided twice is delivered once).
    pub fn canonical_digest(&self, upto: Instance) -> SeqDigest {
        if let Some(d) = &self.g0_digests {
            let n = d.upto.partition_point(|&(i, _)| i <= upto);
            return n
                .checked_sub(1)
                .and_then(|k| d.upto.get(k))
                .map_or_else(SeqDigest::default, |&(_, digest)| digest);
        }
        let g = GroupId(0);
        let mut seen = std::collections::HashSet::new();
        let mut d = SeqDigest::default();
        for (_, dec) in self.decided.range((g, 0)..=(g, upto)) {
            if seen.insert(dec.key) {
                d.add(dec.key, dec.count);
            }
        }
        d
    }

    /// Group 0's `instance` was decided (first delivered) with the batch `key` of `count`
    /// values: the digest up to it extends the one before, if it is above every instance
    /// decided before; otherwise the kept digests no longer hold, and are dropped.
    fn note_g0_decided(&mut self, instance: Instance, key: BatchKey, count: usize) {
        let Some(d) = self.g0_digests.as_mut() else {
            return;
        };
        let mut digest = match d.upto.last() {
            Some(&(last, _)) if last >= instance => {
                self.g0_digests = None;
                return;
            }
            Some(&(_, digest)) => digest,
            None => SeqDigest::default(),
        };
        if d.keys.insert(key, ()).is_none() {
            digest.add(key, count);
        }
        d.upto.push((instance, digest));
    }

    /// A learner's snapshot of group 0 up to `upto`, whose application state is `state`:
    /// the state must be the common sequence's up to there. A restored or installed snapshot
    /// also moves the learner's cursor: it covers everything up to `upto` and must deliver
    /// every instance after it.
    pub fn snapshot(
        &mut self,
        node: NodeId,
        incarnation: u64,
        upto: Instance,
        state: SeqDigest,
        event: SnapshotEvent,
    ) -> Result<(), Failure> {
        let me = (node, incarnation);
        let fail = |detail: String| {
            Failure::new(ViolationKind::SnapshotMismatch, detail)
                .at(node, incarnation)
                .instance(upto)
        };
        let canonical = self.canonical_digest(upto);
        if canonical != state {
            return Err(fail(format!(
                "snapshot {event:?} up to instance {upto} holds {} batches / {} values (hash {:016x}); \
                 the sequence up to there is {} batches / {} values (hash {:016x})",
                state.batches,
                state.values,
                state.hash,
                canonical.batches,
                canonical.values,
                canonical.hash
            )));
        }
        if event == SnapshotEvent::Taken {
            return Ok(());
        }
        if !self.learners.contains_key(&me) {
            self.start(node, incarnation, false);
        }
        // The snapshot carries the configurations its instances changed to (a leader-based
        // log's stop-sign or joint configuration inside it): the learner's next report may
        // be of a later one than its last (still at the same place as everyone's).
        self.last_config.remove(&me);
        // The learner's position is the last instance with values the snapshot covers (a
        // snapshot may end on instances that delivered nothing, a leader-based log's no-op
        // or configuration entry; learners that delivered up to it stand at that same
        // instance, and configuration changes are placed after it).
        let last_value = self
            .decided
            .range((GroupId(0), 0)..=(GroupId(0), upto))
            .next_back()
            .map_or(0, |(&(_, i), _)| i);
        let Some(c) = self
            .learners
            .get_mut(&me)
            .and_then(|l| l.groups.get_mut(&GroupId(0)))
        else {
            return Ok(());
        };
        if upto < c.last {
            return Err(fail(format!(
                "snapshot {event:?} up to instance {upto} moves the learner back from {}",
                c.last
            )));
        }
        c.last = c.last.max(last_value);
        if c.floor.is_none() {
            c.floor = Some(upto);
        }
        Ok(())
    }

    /// A learner's snapshot of a protocol of several groups (Multi-Ring Paxos), where it
    /// stands in each group (`Protocol::snapshot_groups`): the state holds every value of
    /// group `g` the learner delivered up to `covered` and none after. Taken: it must cover
    /// what the learner delivered (a restart from it would deliver again otherwise).
    /// Restored or installed: the learner's cursors move there, never back, and it must
    /// deliver every instance of a group it follows after `covered`, the same as everyone
    /// (the gap checks of `deliver`), and nothing at or below it (the order check).
    pub fn group_snapshot(
        &mut self,
        node: NodeId,
        incarnation: u64,
        upto: Instance,
        groups: &[abcast_core::GroupPosition],
        event: SnapshotEvent,
    ) -> Result<(), Failure> {
        let me = (node, incarnation);
        if !self.learners.contains_key(&me) {
            self.start(node, incarnation, false);
        }
        let Some(l) = self.learners.get_mut(&me) else {
            return Ok(());
        };
        for g in groups {
            let fail = |detail: String| {
                Failure::new(ViolationKind::SnapshotMismatch, detail)
                    .at(node, incarnation)
                    .instance(g.covered)
            };
            let c = l.groups.entry(g.group).or_insert(Cursor {
                floor: None,
                last: 0,
                subscribed: false,
                idle_since_subscribe: false,
                pinned: false,
            });
            if c.subscribed && c.last > g.covered {
                return Err(fail(format!(
                    "snapshot {event:?} at merge position {upto} covers group {} up to instance {}; \
                     the learner delivered up to {}",
                    g.group.0, g.covered, c.last
                )));
            }
            if event == SnapshotEvent::Taken {
                continue;
            }
            if g.following {
                c.subscribed = true;
                c.floor = Some(g.covered);
                c.last = c.last.max(g.covered);
                c.idle_since_subscribe = false;
                c.pinned = true;
            } else {
                c.subscribed = false;
                c.floor = None;
                c.pinned = false;
            }
        }
        Ok(())
    }

    /// Pairwise merge order, incrementally. `me` delivers batch `key` at its next position
    /// `p`. For every other learner `o` that delivered `key` at position `q`: the batches
    /// both delivered must come in increasing positions of `o` in `me`'s order, so `q`
    /// must exceed the highest `o`-position of a batch common so far; and `o`'s later common
    /// batches must come after `p` in `me`'s order. Whichever delivery completes an inverted
    /// pair fails here, so every inversion between any two learners is caught.
    fn check_merge_order(&mut self, me: LearnerId, key: BatchKey) -> Result<(), String> {
        let Some(p) = self.learners.get(&me).map(|l| l.next_pos) else {
            return Ok(());
        };
        let mut seen: Vec<(LearnerId, u64)> = Vec::new();
        for (&o, l) in &self.learners {
            if o == me {
                continue;
            }
            if let Some(&q) = l.order.get(&key) {
                seen.push((o, q));
            }
        }
        for (o, q) in seen {
            if let Some(l) = self.learners.get_mut(&me) {
                if let Some(&last) = l.pair_last.get(&o)
                    && last >= q
                {
                    return Err(format!(
                        "batch {key} is at position {q} of {}#{}, which delivered a batch that this learner \
                         delivered before it later (at position {last})",
                        o.0, o.1
                    ));
                }
                l.pair_last.insert(o, q);
            }
            if let Some(l) = self.learners.get_mut(&o) {
                let last = l.pair_last.entry(me).or_insert(p);
                *last = (*last).max(p);
            }
        }
        Ok(())
    }

    /// The highest instance any learner delivered, in any group.
    pub fn max_decided(&self) -> Instance {
        self.decided.keys().map(|k| k.1).max().unwrap_or(0)
    }

    fn max_decided_in(&self, group: GroupId) -> Instance {
        self.decided
            .range((group, 0)..=(group, Instance::MAX))
            .next_back()
            .map_or(0, |(k, _)| k.1)
    }

    /// The first group a learner follows and has not delivered to its end: (group, last,
    /// max).
    fn behind(&self, k: &LearnerId) -> Option<(GroupId, Instance, Instance)> {
        let Some(l) = self.learners.get(k) else {
            let max = self.max_decided_in(GroupId(0));
            return (max != 0).then_some((GroupId(0), 0, max));
        };
        l.groups.iter().find_map(|(&g, c)| {
            let max = self.max_decided_in(g);
            // Past the highest delivered instance is not behind: a snapshot taken or
            // installed may end on instances that delivered nothing (a leader's no-op, a
            // configuration entry of the leader-based logs).
            (c.subscribed && !c.idle_since_subscribe && c.last < max).then_some((g, c.last, max))
        })
    }

    /// Whether every required value is decided and every listed live learner has delivered
    /// up to the highest decided instance of every group it follows (so, by agreement,
    /// everything).
    pub fn converged(&self, live_learners: &[LearnerId]) -> bool {
        self.converged_among(live_learners, &[])
    }

    /// [`Checker::converged`] while the nodes `exempt` stay cut off or down: their own
    /// proposals are required only where acknowledged (the connected majority cannot get
    /// what never left them).
    pub fn converged_among(&self, live_learners: &[LearnerId], exempt: &[NodeId]) -> bool {
        if self.pending.iter().any(|id| self.required_now(id, exempt)) {
            return false;
        }
        live_learners.iter().all(|k| self.behind(k).is_none())
    }

    fn required_now(&self, id: &ValueId, exempt: &[NodeId]) -> bool {
        !exempt.contains(&id.node)
            || self
                .proposals
                .get(id)
                .is_some_and(|p| p.acked_at_us.is_some())
    }

    /// Why the run has not converged, the most serious reason first: a lost acknowledged
    /// value, then a required value some learner has not delivered, then a learner behind.
    pub fn liveness_failure(&self, live_learners: &[LearnerId]) -> Option<Failure> {
        self.liveness_failure_among(live_learners, &[])
    }

    /// [`Checker::liveness_failure`] with the exemptions of [`Checker::converged_among`].
    pub fn liveness_failure_among(
        &self,
        live_learners: &[LearnerId],
        exempt: &[NodeId],
    ) -> Option<Failure> {
        for id in &self.pending {
            let Some(p) = self.proposals.get(id) else {
                continue;
            };
            if let Some(acked) = p.acked_at_us {
                return Some(
                    Failure::new(
                        ViolationKind::LostAckedValue,
                        format!(
                            "{id} proposed at t={}us by incarnation {}, acknowledged at t={acked}us, delivered by \
                             no learner ({} required values delivered nowhere; learners delivered up to instance {})",
                            p.proposed_at_us,
                            p.incarnation,
                            self.pending.len(),
                            self.max_decided()
                        ),
                    )
                    .at(id.node, p.incarnation)
                    .value(*id),
                );
            }
        }
        if let Some(id) = self.pending.iter().find(|id| self.required_now(id, exempt)) {
            let (at, inc) = self
                .proposals
                .get(id)
                .map_or((0, 0), |p| (p.proposed_at_us, p.incarnation));
            return Some(
                Failure::new(
                    ViolationKind::NotDelivered,
                    format!(
                        "{id} proposed at t={at}us by {}#{inc}, which is still alive, delivered by no learner \
                         ({} required values delivered nowhere; learners delivered up to instance {})",
                        id.node,
                        self.pending.len(),
                        self.max_decided()
                    ),
                )
                .at(id.node, inc)
                .value(*id),
            );
        }
        for &(node, inc) in live_learners {
            let Some((group, last, max)) = self.behind(&(node, inc)) else {
                continue;
            };
            // The first required value decided above what this learner delivered.
            for (&(_, i), d) in self
                .decided
                .range((group, last + 1)..=(group, Instance::MAX))
            {
                let required = (0..d.count as u64).find_map(|k| {
                    let id = ValueId {
                        node: d.key.origin,
                        seq: d.key.first_seq + k,
                    };
                    let p = self.proposals.get(&id)?;
                    let alive = self
                        .learners
                        .get(&(id.node, p.incarnation))
                        .is_some_and(|l| l.alive);
                    (p.acked_at_us.is_some() || alive).then_some((id, p.acked_at_us.is_some()))
                });
                if let Some((id, acked)) = required {
                    return Some(
                        Failure::new(
                            ViolationKind::NotDelivered,
                            format!(
                                "{} {id}, decided in instance {i} of group {}, not delivered here: this learner is at \
                                 instance {last}, the others reached {max}",
                                if acked { "acknowledged value" } else { "value of a live proposer" },
                                group.0
                            ),
                        )
                        .at(node, inc)
                        .instance(i)
                        .value(id),
                    );
                }
            }
            return Some(
                Failure::new(
                    ViolationKind::NotConverged,
                    format!(
                        "this learner delivered up to instance {last} of group {}, others up to {max}",
                        group.0
                    ),
                )
                .at(node, inc)
                .instance(last + 1),
            );
        }
        None
    }

    /// Values returned by `propose`.
    pub fn proposed_values(&self) -> u64 {
        self.proposals.len() as u64
    }

    /// Values acknowledged at least once.
    pub fn acked_values(&self) -> u64 {
        self.acked_values
    }

    /// Values delivered per node, over all its incarnations.
    pub fn delivered_values(&self) -> &BTreeMap<NodeId, u64> {
        &self.delivered_values
    }

    /// Instances that delivered a batch somewhere.
    pub fn decided_instances(&self) -> u64 {
        self.decided.len() as u64
    }

    /// Values that must still be decided.
    pub fn pending_values(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abcast_core::Batch;

    const A: NodeId = NodeId(0);
    const B: NodeId = NodeId(1);
    const C: NodeId = NodeId(2);

    fn pay(id: ValueId) -> Bytes {
        Bytes::from(format!("payload-{id}"))
    }

    fn one(id: ValueId, instance: Instance) -> Delivery {
        Delivery::new(instance, Batch::single(id, pay(id)))
    }

    fn vid(node: NodeId, seq: u64) -> ValueId {
        ValueId { node, seq }
    }

    /// Three fresh learners; A proposes values 1..=n.
    fn world(n: u64) -> Checker {
        let mut c = Checker::new(true);
        for x in [A, B, C] {
            c.start(x, 0, true);
        }
        for s in 1..=n {
            c.propose(s, A, 0, vid(A, s), pay(vid(A, s)))
                .expect("propose");
        }
        c
    }

    fn digest_of(ids: &[(ValueId, Instance)]) -> SeqDigest {
        let mut d = SeqDigest::default();
        for (id, i) in ids {
            d.add(one(*id, *i).batch.key(), 1);
        }
        d
    }

    #[test]
    fn a_snapshot_must_hold_the_sequence_up_to_its_instance() {
        let mut c = world(4);
        for s in 1..=4 {
            c.deliver(10 + s, A, 0, &one(vid(A, s), s))
                .expect("deliver");
        }
        let right = digest_of(&[(vid(A, 1), 1), (vid(A, 2), 2), (vid(A, 3), 3)]);
        c.snapshot(A, 0, 3, right, SnapshotEvent::Taken)
            .expect("the right state passes");
        // One instance short, or in another order: caught.
        let short = digest_of(&[(vid(A, 1), 1), (vid(A, 2), 2)]);
        let f = c
            .snapshot(A, 0, 3, short, SnapshotEvent::Taken)
            .expect_err("a state that lacks an instance");
        assert_eq!(f.kind, ViolationKind::SnapshotMismatch);
        let swapped = digest_of(&[(vid(A, 2), 2), (vid(A, 1), 1), (vid(A, 3), 3)]);
        assert!(c.snapshot(A, 0, 3, swapped, SnapshotEvent::Taken).is_err());
    }

    #[test]
    fn a_learner_restored_from_a_snapshot_must_deliver_every_instance_after_it() {
        let mut c = world(5);
        for s in 1..=5 {
            c.deliver(10 + s, A, 0, &one(vid(A, s), s))
                .expect("deliver");
        }
        // B restarts (incarnation 1) from a snapshot up to 2, then skips 3.
        c.start(B, 1, false);
        let upto2 = digest_of(&[(vid(A, 1), 1), (vid(A, 2), 2)]);
        c.snapshot(B, 1, 2, upto2, SnapshotEvent::Restored)
            .expect("restored");
        let f = c
            .deliver(30, B, 1, &one(vid(A, 4), 4))
            .expect_err("instance 3 jumped over");
        assert_eq!(f.kind, ViolationKind::SkippedInstance);
        // C installs a snapshot up to 4 and goes on at 5; one that moves it back fails.
        let upto4 = digest_of(&[
            (vid(A, 1), 1),
            (vid(A, 2), 2),
            (vid(A, 3), 3),
            (vid(A, 4), 4),
        ]);
        c.snapshot(C, 0, 4, upto4, SnapshotEvent::Installed)
            .expect("installed");
        c.deliver(31, C, 0, &one(vid(A, 5), 5)).expect("deliver 5");
        assert!(
            c.snapshot(C, 0, 2, upto2, SnapshotEvent::Installed)
                .is_err(),
            "a snapshot that moves a learner back"
        );
    }

    /// A Multi-Ring learner's snapshot stands in each group at an instance of its own
    /// (`Checker::group_snapshot`): installed, it holds the learner to every later instance
    /// of a group it follows and to none at or below; one that moves it back, or a taken
    /// one that does not cover what the learner delivered, fails.
    #[test]
    fn a_group_snapshot_holds_the_learner_to_every_later_instance_of_each_group() {
        let g1 = GroupId(1);
        let mut c = world(6);
        let sub = |group| Subscription {
            group,
            subscribed: true,
            from_start: true,
            position: 0,
        };
        for x in [A, B] {
            c.subscription(x, 0, &sub(g1));
        }
        let d = |s: u64| {
            let mut d = one(vid(A, s), s);
            d.group = g1;
            d
        };
        for s in 1..=6 {
            c.deliver(10 + s, A, 0, &d(s)).expect("deliver");
        }
        c.deliver(20, B, 0, &d(1)).expect("deliver");
        let at = |covered| {
            [abcast_core::GroupPosition {
                group: g1,
                covered,
                following: true,
            }]
        };
        // A's snapshot covers what it delivered; one that stops short of it does not.
        c.group_snapshot(A, 0, 6, &at(6), SnapshotEvent::Taken)
            .expect("covers");
        let f = c
            .group_snapshot(A, 0, 5, &at(5), SnapshotEvent::Taken)
            .expect_err("a taken snapshot short of the deliveries");
        assert_eq!(f.kind, ViolationKind::SnapshotMismatch);
        // B installs up to 3: instance 4 must come next, and 3 may not come again.
        c.group_snapshot(B, 0, 3, &at(3), SnapshotEvent::Installed)
            .expect("installed");
        let f = c
            .deliver(30, B, 0, &d(5))
            .expect_err("instance 4 jumped over");
        assert_eq!(f.kind, ViolationKind::SkippedInstance);
        let f = c.deliver(31, B, 0, &d(3)).expect_err("delivered again");
        assert_eq!(f.kind, ViolationKind::OutOfOrder);
        c.deliver(32, B, 0, &d(4)).expect("instance 4");
        let f = c
            .group_snapshot(B, 0, 2, &at(2), SnapshotEvent::Installed)
            .expect_err("a snapshot that moves the learner back");
        assert_eq!(f.kind, ViolationKind::SnapshotMismatch);
    }

    #[test]
    fn identical_sequences_pass_and_converge() {
        let mut c = world(3);
        for x in [A, B, C] {
            for s in 1..=3 {
                c.deliver(10 + s, x, 0, &one(vid(A, s), s))
                    .expect("deliver");
            }
        }
        let live = [(A, 0), (B, 0), (C, 0)];
        assert!(c.converged(&live));
        assert_eq!(c.liveness_failure(&live), None);
        assert_eq!(c.delivered_values().get(&B), Some(&3));
    }

    #[test]
    fn noop_instances_leave_gaps_that_everyone_shares() {
        let mut c = world(2);
        for x in [A, B] {
            c.deliver(1, x, 0, &one(vid(A, 1), 1)).expect("deliver");
            c.deliver(2, x, 0, &one(vid(A, 2), 4))
                .expect("instances 2 and 3 were no-ops");
        }
    }

    #[test]
    fn conflicting_batches_in_one_instance_are_caught() {
        let mut c = world(2);
        c.deliver(1, A, 0, &one(vid(A, 1), 1)).expect("first");
        let f = c
            .deliver(2, B, 0, &one(vid(A, 2), 1))
            .expect_err("conflict");
        assert_eq!(f.kind, ViolationKind::ConflictingDecision);
        assert_eq!((f.node, f.instance), (Some(B), Some(1)));
    }

    #[test]
    fn a_learner_jumping_over_a_delivered_instance_is_caught() {
        let mut c = world(3);
        for s in 1..=3 {
            c.deliver(s, A, 0, &one(vid(A, s), s)).expect("A");
        }
        c.deliver(5, B, 0, &one(vid(A, 1), 1)).expect("B 1");
        let f = c
            .deliver(6, B, 0, &one(vid(A, 3), 3))
            .expect_err("B skips 2");
        assert_eq!(f.kind, ViolationKind::SkippedInstance);
        assert_eq!((f.node, f.instance), (Some(B), Some(2)));
    }

    #[test]
    fn an_instance_first_delivered_after_another_learner_passed_it_is_caught() {
        let mut c = world(3);
        c.deliver(1, A, 0, &one(vid(A, 1), 1)).expect("A 1");
        c.deliver(2, A, 0, &one(vid(A, 3), 3))
            .expect("A 3 (2 unknown yet)");
        let f = c
            .deliver(3, B, 0, &one(vid(A, 2), 2))
            .expect_err("B reveals A skipped 2");
        assert_eq!(f.kind, ViolationKind::SkippedInstance);
        assert_eq!((f.node, f.instance), (Some(A), Some(2)));
    }

    #[test]
    fn a_fresh_learner_must_start_at_the_beginning() {
        let mut c = world(2);
        c.deliver(1, A, 0, &one(vid(A, 1), 1)).expect("A 1");
        c.deliver(1, A, 0, &one(vid(A, 2), 2)).expect("A 2");
        let f = c
            .deliver(2, C, 0, &one(vid(A, 2), 2))
            .expect_err("C starts at 2");
        assert_eq!(f.kind, ViolationKind::SkippedInstance);
        assert_eq!(f.instance, Some(1));

        let mut lax = Checker::new(false);
        lax.start(A, 0, true);
        lax.start(C, 0, true);
        lax.propose(0, A, 0, vid(A, 1), pay(vid(A, 1))).expect("p");
        lax.propose(0, A, 0, vid(A, 2), pay(vid(A, 2))).expect("p");
        lax.deliver(1, A, 0, &one(vid(A, 1), 1)).expect("A 1");
        lax.deliver(1, A, 0, &one(vid(A, 2), 2)).expect("A 2");
        lax.deliver(2, C, 0, &one(vid(A, 2), 2))
            .expect("lax: C may start at 2");
    }

    #[test]
    fn an_amnesic_restart_may_resume_at_its_first_delivery_but_not_skip_after() {
        let mut c = world(4);
        for s in 1..=4 {
            c.deliver(s, A, 0, &one(vid(A, s), s)).expect("A");
        }
        c.deliver(1, B, 0, &one(vid(A, 1), 1)).expect("B#0");
        c.crash(B, 0);
        c.start(B, 1, false);
        c.deliver(9, B, 1, &one(vid(A, 3), 3))
            .expect("B#1 resumes at 3");
        c.deliver(9, B, 1, &one(vid(A, 4), 4)).expect("B#1 4");
        assert!(c.converged(&[(A, 0), (B, 1)]));
        let mut d = world(4);
        for s in 1..=4 {
            d.deliver(s, A, 0, &one(vid(A, s), s)).expect("A");
        }
        d.start(B, 1, false);
        d.deliver(9, B, 1, &one(vid(A, 2), 2))
            .expect("B#1 resumes at 2");
        let f = d
            .deliver(9, B, 1, &one(vid(A, 4), 4))
            .expect_err("then skips 3");
        assert_eq!(f.kind, ViolationKind::SkippedInstance);
        assert_eq!(f.instance, Some(3));
    }

    #[test]
    fn duplicate_delivery_by_one_learner_is_caught() {
        let mut c = world(1);
        c.deliver(1, A, 0, &one(vid(A, 1), 1)).expect("first");
        let f = c.deliver(2, A, 0, &one(vid(A, 1), 2)).expect_err("again");
        assert_eq!(f.kind, ViolationKind::DuplicateDelivery);
        assert_eq!((f.node, f.value), (Some(A), Some(vid(A, 1))));
    }

    #[test]
    fn one_value_in_two_instances_is_caught_across_learners() {
        let mut c = world(1);
        c.deliver(1, A, 0, &one(vid(A, 1), 1)).expect("A");
        c.crash(B, 0);
        c.start(B, 1, false);
        let f = c
            .deliver(2, B, 1, &one(vid(A, 1), 7))
            .expect_err("B sees it in 7");
        assert_eq!(f.kind, ViolationKind::ValueInTwoInstances);
    }

    #[test]
    fn an_instance_delivered_twice_or_backwards_is_out_of_order() {
        let mut c = world(3);
        c.deliver(1, A, 0, &one(vid(A, 1), 1)).expect("1");
        c.deliver(1, A, 0, &one(vid(A, 2), 3)).expect("3");
        let f = c
            .deliver(1, A, 0, &one(vid(A, 3), 2))
            .expect_err("2 after 3");
        assert_eq!(f.kind, ViolationKind::OutOfOrder);
    }

    #[test]
    fn never_proposed_and_payload_mismatch_are_caught() {
        let mut c = world(1);
        let f = c.deliver(1, A, 0, &one(vid(B, 9), 1)).expect_err("unknown");
        assert_eq!(f.kind, ViolationKind::NeverProposed);
        let bad = Delivery::new(1, Batch::single(vid(A, 1), Bytes::from_static(b"forged")));
        let f = c.deliver(1, A, 0, &bad).expect_err("forged");
        assert_eq!(f.kind, ViolationKind::PayloadMismatch);
    }

    #[test]
    fn reused_and_foreign_value_ids_are_caught() {
        let mut c = world(1);
        let f = c
            .propose(5, A, 0, vid(A, 1), pay(vid(A, 1)))
            .expect_err("reuse");
        assert_eq!(f.kind, ViolationKind::BadValueId);
        let f = c
            .propose(5, A, 0, vid(B, 1), pay(vid(B, 1)))
            .expect_err("foreign");
        assert_eq!(f.kind, ViolationKind::BadValueId);
    }

    #[test]
    fn acks_of_unknown_values_are_caught() {
        let mut c = world(2);
        let ok = Ack {
            key: BatchKey {
                origin: A,
                first_seq: 1,
            },
            count: 2,
        };
        c.ack(1, A, 0, &ok).expect("ack");
        assert_eq!(c.acked_values(), 1 + 1);
        let f = c
            .ack(
                1,
                A,
                0,
                &Ack {
                    key: BatchKey {
                        origin: A,
                        first_seq: 2,
                    },
                    count: 2,
                },
            )
            .expect_err("3 unknown");
        assert_eq!(
            (f.kind, f.value),
            (ViolationKind::UnknownAck, Some(vid(A, 3)))
        );
        let f = c.ack(1, B, 0, &ok).expect_err("not B's");
        assert_eq!(f.kind, ViolationKind::UnknownAck);
    }

    #[test]
    fn an_acked_value_lost_with_its_crashed_proposer_is_a_durability_violation() {
        let mut c = world(2);
        c.ack(
            3,
            A,
            0,
            &Ack {
                key: BatchKey {
                    origin: A,
                    first_seq: 1,
                },
                count: 1,
            },
        )
        .expect("ack 1");
        c.crash(A, 0);
        c.start(A, 1, false);
        // Value 2 was not acked: its proposer died, so it may be lost. Value 1 may not.
        let live = [(A, 1), (B, 0), (C, 0)];
        assert!(!c.converged(&live));
        let f = c.liveness_failure(&live).expect("lost");
        assert_eq!(
            (f.kind, f.value),
            (ViolationKind::LostAckedValue, Some(vid(A, 1)))
        );
        for x in [B, C] {
            c.deliver(9, x, 0, &one(vid(A, 1), 1)).expect("deliver 1");
        }
        c.deliver(9, A, 1, &one(vid(A, 1), 1)).expect("deliver 1");
        assert!(c.converged(&live), "{:?}", c.liveness_failure(&live));
    }

    #[test]
    fn a_live_proposers_value_must_be_delivered_everywhere() {
        let mut c = world(1);
        let live = [(A, 0), (B, 0), (C, 0)];
        let f = c.liveness_failure(&live).expect("undecided");
        assert_eq!(
            (f.kind, f.value),
            (ViolationKind::NotDelivered, Some(vid(A, 1)))
        );
        c.deliver(1, A, 0, &one(vid(A, 1), 1)).expect("A");
        c.deliver(1, B, 0, &one(vid(A, 1), 1)).expect("B");
        let f = c.liveness_failure(&live).expect("C behind");
        assert_eq!(
            (f.kind, f.node, f.instance),
            (ViolationKind::NotDelivered, Some(C), Some(1))
        );
        c.deliver(1, C, 0, &one(vid(A, 1), 1)).expect("C");
        assert_eq!(c.liveness_failure(&live), None);
    }

    #[test]
    fn a_learner_behind_on_values_nobody_requires_is_not_converged() {
        let mut c = world(0);
        c.start(B, 1, false);
        c.propose(0, B, 0, vid(B, 1), pay(vid(B, 1))).expect("p");
        c.crash(B, 0);
        c.deliver(1, A, 0, &one(vid(B, 1), 1)).expect("A");
        let live = [(A, 0), (B, 1)];
        let f = c.liveness_failure(&live).expect("B#1 behind");
        assert_eq!((f.kind, f.node), (ViolationKind::NotConverged, Some(B)));
    }
}
