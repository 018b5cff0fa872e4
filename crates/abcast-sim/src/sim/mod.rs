//! The world: one seed, one virtual clock, many nodes, one network, and the driver loop that
//! carries out every protocol's [`Outbox`] as `docs/CONTRACTS.md` says.
//!
//! Everything that happens is an event in one priority queue ordered by (time, insertion
//! number), so ties break the same way on every machine, and every random choice comes from
//! one [`SimRng`] in event order. A run is a pure function of its configuration, its
//! factory and the protocol code.
//!
//! Schedule: the *fault phase* (`0 .. fault_phase_us`) with the faults of the mix and client
//! load; then, where the plan says so, the *faults-remain* phase (up to f acceptors stay
//! down or cut off, everything else heals, clients keep proposing to the connected nodes for
//! `heal_load_us`, and the connected learners must converge within
//! `faults_remain_bound_us` of the last proposal); then the *heal* (links up, no loss or
//! duplication, every crashed node restarted, every late node started); *heal load*
//! (clients keep proposing for `heal_load_us`); then the *convergence* wait, until the
//! checkers say every live learner has everything (`Checker::converged`) or the bound
//! `converge_bound_us` after the heal runs out. The faults themselves live in `faults.rs`
//! (crashes, partial fan-out, pauses, power loss, the faults-remain phase) and
//! `network.rs` (loss, duplication, delay with its heavy tail, partitions, messages across
//! process lives).
//!
//! Disks: the world owns one [`MemDir`] per node, which outlives the node's crashes and is
//! handed to the factory at every (re)start ([`run_with_disk`]). The driver makes the stores
//! durable (`Protocol::sync_storage`) before an outbox with `needs_sync` sends anything, and
//! a crash does to the disk what [`SimConfig::crash_model`] says: a process crash keeps every
//! write, a machine crash keeps the synced bytes and a seeded torn (maybe garbled) prefix of
//! the rest, sometimes in the middle of a group commit. The disk faults are drawn from a
//! random stream of their own, so runs with the default process crashes are unchanged.
//!
//! With [`SimConfig::sync_delay_us`] the driver is the runtime's pipelined one (its sync
//! thread, `abcast::runtime::syncer`): an outbox that needs a sync begins it
//! (`Protocol::begin_sync_storage`) and waits *in flight* until a `SyncDone` event a drawn
//! delay later runs the job; whatever the node produces meanwhile gathers into one outbox
//! behind it, in order, and begins its own sync at once if fewer than
//! [`SimConfig::sync_jobs_max`] are in flight (jobs complete in order), or waits. A crash
//! drops them all, jobs unrun.

mod faults;
mod network;

pub use faults::PartialShape;
mod reads;
mod reconfig;

use crate::checker::{Checker, Failure, LearnerId, SeqDigest, SnapshotEvent, ViolationKind};
use crate::config::{FaultMix, SimConfig};
use crate::faults::{FaultCounts, FaultKind};
use crate::plan::{DiskPlan, FaultPlan};
use crate::rng::SimRng;
use crate::trace::{Trace, TraceEvent};
use abcast_core::codec::{Encoder, WireMessage};
use abcast_core::config::StartInfo;
use abcast_core::protocol::{Ack, Install};
use abcast_core::storage::{MemDir, StorageError};
use abcast_core::{
    Application, Ballot, Carrier, ConfigChange, Delivery, GroupId, Instance, Micros, NodeId,
    Outbox, ProposeError, Protocol, ReadState, Skip, Snapshot, Subscription,
};
use bytes::{Bytes, BytesMut};
use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::fmt;

/// A property broken in one run, with everything needed to understand and replay it.
#[derive(Clone, Debug)]
pub struct Violation {
    pub kind: ViolationKind,
    pub seed: u64,
    pub mix: FaultMix,
    /// Virtual time of the event that broke the property.
    pub at_us: Micros,
    pub node: Option<NodeId>,
    pub incarnation: Option<u64>,
    pub instance: Option<abcast_core::Instance>,
    pub value: Option<abcast_core::ValueId>,
    pub detail: String,
    /// The shell command that replays the run with a verbose trace.
    pub replay: String,
    pub plan: Option<FaultPlan>,
    /// The last events before the violation, formatted.
    pub trace_tail: Vec<String>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "abcast-sim: {} violation {:?} at t={}us seed={} mix={}",
            self.kind.property(),
            self.kind,
            self.at_us,
            self.seed,
            self.mix
        )?;
        if let Some(n) = self.node {
            write!(f, " node={n}")?;
            if let Some(i) = self.incarnation {
                write!(f, "#{i}")?;
            }
        }
        if let Some(i) = self.instance {
            write!(f, " instance={i}")?;
        }
        if let Some(v) = self.value {
            write!(f, " value={v}")?;
        }
        writeln!(f)?;
        writeln!(f, "  {}", self.detail)?;
        if let Some(p) = &self.plan {
            writeln!(f, "  plan: {p:?}")?;
        }
        if !self.trace_tail.is_empty() {
            writeln!(f, "  last {} events:", self.trace_tail.len())?;
            for line in &self.trace_tail {
                writeln!(f, "    {line}")?;
            }
        }
        write!(f, "replay: {}", self.replay)
    }
}

impl Violation {
    /// The first line of the report and the replay line, for a test's panic message when
    /// the full report was printed already (as [`crate::run_seeds`] does).
    pub fn headline(&self) -> String {
        let full = self.to_string();
        let first = full.lines().next().unwrap_or_default();
        format!("{first}\nreplay: {}", self.replay)
    }
}

impl std::error::Error for Violation {}

/// What a run did, for the test log and for comparing protocol variants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimReport {
    pub seed: u64,
    pub mix: FaultMix,
    pub plan: FaultPlan,
    /// Values `propose` accepted.
    pub proposed_values: u64,
    /// `propose` calls answered `Busy` (each payload is offered again later).
    pub busy_rejections: u64,
    /// `propose` calls answered with another error.
    pub other_rejections: u64,
    pub acked_values: u64,
    /// Values delivered per node, over all its incarnations.
    pub delivered_values_by_node: BTreeMap<NodeId, u64>,
    /// Instances that delivered a batch (no-ops are not counted).
    pub decided_instances: u64,
    pub messages_sent: u64,
    pub messages_delivered: u64,
    pub messages_dropped: u64,
    pub messages_duplicated: u64,
    pub bytes_sent: u64,
    /// Outboxes that asked for a storage sync (each got one `Protocol::sync_storage`).
    pub syncs: u64,
    pub crashes: u64,
    /// Crashes that were machine crashes (the others kept every write).
    pub machine_crashes: u64,
    /// Machine crashes in the middle of a group commit.
    pub commit_crashes: u64,
    /// Unsynced bytes that machine crashes lost (files that vanished included).
    pub unsynced_bytes_lost: u64,
    /// Files whose unsynced bytes a machine crash cut in the middle.
    pub torn_files: u64,
    /// Bytes a machine crash flipped in a surviving unsynced prefix.
    pub flipped_bytes: u64,
    pub restarts: u64,
    /// Snapshots learners took, restarts that began from one, and snapshots installed
    /// from a peer by a learner behind the trim point.
    pub snapshots_taken: u64,
    pub snapshots_restored: u64,
    pub snapshots_installed: u64,
    pub partition_changes: u64,
    pub heal_at_us: Micros,
    pub converged_at_us: Micros,
    /// From the heal to convergence (so it includes `heal_load_us`: values proposed during
    /// the heal load must be delivered too).
    pub time_to_converge_us: Micros,
    pub events_processed: u64,
    /// When the late joiner of the plan started, if there was one.
    pub late_join_at_us: Option<Micros>,
    /// The faults of issue 15 that happened in this run ([`FaultKind`]).
    pub faults: FaultCounts,
    /// Messages held 0.5-5 s by the network's heavy tail.
    pub messages_held_long: u64,
    /// Messages parked for a node that was down and flushed to its next life.
    pub messages_parked: u64,
    /// Times the cluster's highest ballot grew (sampled every `BALLOT_SAMPLE_US`).
    pub ballot_changes: u64,
    /// The faults-remain phase: the nodes kept down or cut off, and how long after the
    /// last proposal the connected learners took to converge.
    pub faults_remain_nodes: Vec<NodeId>,
    pub faults_remain_converge_us: Option<Micros>,
    /// Reads (`SimConfig::reads_per_s`): `read_index` calls that returned `Ok`, reads
    /// answered with a `ReadState`, and answered reads checked (their learner delivered up
    /// to `upto` before it crashed or the run ended).
    pub reads_issued: u64,
    pub reads_answered: u64,
    pub reads_checked: u64,
    /// The `reconfig` mix: `reconfigure` calls that returned `Ok`, steps whose target
    /// configuration some node then applied, of which leader replacements, and distinct
    /// configurations applied in the run.
    pub reconfigs_accepted: u64,
    pub reconfigs_done: u64,
    pub leader_replacements: u64,
    pub configs_applied: u64,
    /// The `reconfig` mix: steps done that added a node (an add or a replacement).
    pub members_added: u64,
    /// Links that went down and told both ends (`Protocol::peer_unreachable`).
    pub session_drops: u64,
    /// The partial-connectivity mix: episodes per shape ([`PartialShape::ALL`] order),
    /// episodes held to the mix's liveness bound (`SimConfig::partial_bound_us`), the
    /// longest time from an episode's start until a node a majority reaches led and a
    /// new value was decided at a majority, and the longest any later window took.
    pub partial_shapes: [u64; 5],
    pub partial_checked: u64,
    pub partial_recover_us_max: Micros,
    pub partial_window_us_max: Micros,
    /// Equal for two runs that did exactly the same things (a determinism check).
    pub fingerprint: u64,
}

/// Runs one simulation. `factory` builds a node's protocol at its (re)start: it chooses the
/// store, and is called with the node's id and its [`StartInfo`] (`StartInfo::FRESH` on the
/// first start, `{incarnation: k, amnesic: true, start_seq: k << 40}` on the k-th restart).
/// For a store on the simulated disk, see [`run_with_disk`].
pub fn run<P, F>(cfg: &SimConfig, factory: &F) -> Result<SimReport, Box<Violation>>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo) -> P,
{
    run_with_disk(cfg, &without_disk(factory))
}

/// Runs one simulation whose nodes keep their stores on the simulated disk. The factory is
/// called at every (re)start with the node's id, its [`StartInfo`] and the node's own
/// [`MemDir`] (the same disk at every start of that node, in the state the last crash left
/// it; [`MemDir::subdir`] gives a store per ring). It returns the protocol, or the error of
/// a store that would not open, which fails the run ([`ViolationKind::StorageFailed`]).
///
/// `StartInfo::amnesic` is true on every restart: the process forgot everything. A store
/// that kept its state overrides it (`AcceptorStore::is_durable`), and the trace and the
/// crash schedule's count of faulty acceptors use what the protocol then reports
/// (`Status::amnesic`). `incarnation` grows at every restart, durable or not (the ring's
/// epoch must change: the node's in-memory roles did start over), and `start_seq` is
/// `incarnation << 40`, above any value id the node handed out before.
pub fn run_with_disk<P, F>(cfg: &SimConfig, factory: &F) -> Result<SimReport, Box<Violation>>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError>,
{
    World::new(cfg, factory)?.run()
}

/// A factory without a disk as one with a disk it ignores (its stores are in memory).
pub fn without_disk<P, F>(
    factory: &F,
) -> impl Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError> + '_
where
    F: Fn(NodeId, StartInfo) -> P,
{
    move |id, start, _disk| Ok(factory(id, start))
}

#[derive(Debug)]
enum Action {
    Message(Box<Msg>),
    Tick {
        node: usize,
        epoch: u64,
    },
    Propose {
        retry: Option<Bytes>,
    },
    Partition,
    Crash,
    /// A crash of `scheduled_crashes`.
    CrashNode {
        node: usize,
        down_us: Micros,
    },
    Restart {
        node: usize,
        incarnation: u64,
    },
    LateStart {
        node: usize,
    },
    /// Every live learner takes a snapshot (`SimConfig::snapshot_interval_us`).
    Snapshot,
    /// The node's sync job in flight completes (`SimConfig::sync_delay_us`).
    SyncDone {
        node: usize,
        epoch: u64,
    },
    /// A node is frozen (`FaultPlan::pause_every_us`).
    Pause,
    /// The cluster's highest ballot is sampled (for [`FaultKind::OutlivesTakeover`]).
    Sample,
    /// The ghost-coordinator story starts (`FaultPlan::ghost_at_us`).
    Ghost,
    /// ... its successor is looked for (and crashed once it leads).
    GhostWatch,
    /// ... and the ghost's links come back.
    GhostHeal,
    /// The ghost's successor crashes (the f rule checked again: see `ghost_crash`).
    GhostCrash {
        node: usize,
        down_us: Micros,
    },
    /// Every acceptor's machine will lose power at the next acceptor's group commit.
    PowerLoss,
    /// ... or now, if no group commit came.
    PowerLossNow,
    /// The fault phase ends: the faults-remain phase begins, or the full heal.
    FaultsEnd,
    /// A linearizable read is issued (`SimConfig::reads_per_s`, `reads.rs`).
    Read {
        retry: Option<reads::ReadRetry>,
    },
    /// The next reconfiguration step is drawn (`reconfig.rs`).
    Reconfig,
    /// ... and offered to a node.
    ReconfigAsk {
        step: u64,
        to: Option<NodeId>,
    },
    /// A crash right after a `reconfigure` returned `Ok`.
    CrashAfterReconfig {
        node: usize,
    },
    /// The joint phase's partition: an old majority (`old_side`) and a new one apart.
    JointPartition {
        old_side: Vec<NodeId>,
    },
    /// ... and its end, unless the partition changed since (`partition_changes`).
    JointHeal {
        generation: u64,
    },
    /// Episode `k` of the partial-connectivity mix starts (`faults.rs`).
    PartialEpisode {
        k: u32,
    },
    /// ... a constrained election's hub has fallen behind: its shape now.
    PartialCut {
        shape: PartialShape,
    },
    /// A link to `peer` went down or came back (`FaultPlan::session_notices`).
    Session {
        node: usize,
        peer: NodeId,
        up: bool,
    },
}

/// A message in the network.
#[derive(Debug)]
struct Msg {
    from: NodeId,
    /// The sender's incarnation when it sent the message.
    from_incarnation: u64,
    to: usize,
    /// The destination's epoch (process life) the message was addressed to.
    to_epoch: u64,
    kind: u8,
    body: Bytes,
    /// `World::ballot_changes` when the message was sent.
    sent_ballot_changes: u64,
    /// Re-addressed to the destination's next life (parked while it was down).
    crossed: bool,
}

/// How often the cluster's highest ballot is sampled.
const BALLOT_SAMPLE_US: Micros = 10_000;

/// A node's pipelined group commit (`SimConfig::sync_delay_us`): the outboxes whose sync
/// jobs are in flight (up to `SimConfig::sync_jobs_max`, oldest first; they complete in
/// order), and what the node produced since, gathered behind them.
struct Pipe<M> {
    in_flight: VecDeque<(abcast_core::storage::SyncJob, Outbox<M>)>,
    /// When the newest job in flight completes.
    last_done_us: Micros,
    gather: Outbox<M>,
}

impl<M> Default for Pipe<M> {
    fn default() -> Self {
        Pipe {
            in_flight: VecDeque::new(),
            last_done_us: 0,
            gather: Outbox::new(),
        }
    }
}

#[derive(Debug)]
struct Event {
    at_us: Micros,
    seq: u64,
    action: Action,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        (self.at_us, self.seq) == (other.at_us, other.seq)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at_us, self.seq).cmp(&(other.at_us, other.seq))
    }
}

struct Slot<P> {
    id: NodeId,
    proto: Option<P>,
    incarnation: u64,
    started: bool,
    /// Grows at every start and crash: a message or tick addressed to an older epoch is
    /// for a process that no longer exists.
    epoch: u64,
    acceptor: bool,
    learner: bool,
    crash_exempt: bool,
    /// A crash (a machine crash if the flag says so) waits for this node's next group
    /// commit; then the node stays down this long.
    crash_in_commit: Option<(Micros, bool)>,
    /// What the last crash did to the disk, for a store that then fails to open.
    last_crash: String,
    /// The learner's application: a digest of what it delivered (this incarnation's), and
    /// the test's observer if it has one.
    app: NodeApp,
    /// The node's last snapshot, as its snapshot file holds it: it survives crashes.
    saved: Option<Snapshot>,
    /// Frozen until then (a process pause): no ticks, no receives, no sync completions.
    paused_until_us: Micros,
    /// Messages that arrived while the node was down, kept for its next life.
    parked: Vec<Msg>,
    /// A partial fan-out crash waiting for its moment (see `faults.rs`).
    partial: Option<faults::PartialArm>,
    /// Kept down by the faults-remain phase: its restarts wait for the full heal.
    stay_down: bool,
    /// A disk failure is armed under this node (`disk_error`); once it fires the node
    /// stops and stays down this long.
    disk_error: Option<Micros>,
    /// A machine crash waits for a group commit that leaves a new file's name not durable
    /// (`torn_unsynced`): how long the node then stays down, and until when it waits.
    new_file_crash: Option<(Micros, Micros)>,
    /// The next restart finds the node's disk wiped (`wiped_dir`), f permitting.
    wipe_on_restart: bool,
}

/// A simulated learner's application state: the digest of its sequence. `complete` once
/// it is known to cover the sequence from its start (a delivery with nothing before it, a
/// restored or installed snapshot); only a complete state is worth a snapshot.
#[derive(Clone, Copy, Debug, Default)]
struct SimApp {
    digest: SeqDigest,
    complete: bool,
    delivered: bool,
    /// The first delivery of this life (its group and instance), until the carrier checked
    /// what came before it.
    first: Option<(GroupId, Instance)>,
}

impl Application for SimApp {
    fn deliver(&mut self, _now: Micros, d: &Delivery, _results: &mut Vec<Bytes>) {
        if !self.delivered {
            self.delivered = true;
            self.first = Some((d.group, d.instance));
        }
        // The digest is group 0's (a single-group protocol), checked against the common
        // sequence; a Multi-Ring learner's snapshots are checked by their positions in
        // each group (`Checker::group_snapshot`).
        if d.group.0 == 0 {
            self.digest.add(d.batch.key(), d.batch.len());
        }
    }
    fn snapshot(&mut self) -> Option<Bytes> {
        Some(self.encode())
    }
    fn install(&mut self, _now: Micros, snapshot: &Snapshot) -> Result<(), String> {
        *self = SimApp::decode(&snapshot.app)
            .map_err(|e| format!("installed a snapshot whose state does not decode: {e}"))?;
        Ok(())
    }
    fn skipped(&mut self, _now: Micros, _skip: &Skip) {
        self.complete = false;
    }
}

/// A node's applications: the simulator's own and the test's observer.
struct NodeApp {
    state: SimApp,
    observer: Option<Box<dyn Application + Send>>,
}

impl Application for NodeApp {
    fn deliver(&mut self, now: Micros, d: &Delivery, results: &mut Vec<Bytes>) {
        self.state.deliver(now, d, results);
        if let Some(o) = self.observer.as_mut() {
            o.deliver(now, d, results);
        }
    }
    fn install(&mut self, now: Micros, snapshot: &Snapshot) -> Result<(), String> {
        self.state.install(now, snapshot)?;
        match self.observer.as_mut() {
            Some(o) => o.install(now, snapshot),
            None => Ok(()),
        }
    }
    fn skipped(&mut self, now: Micros, skip: &Skip) {
        self.state.skipped(now, skip);
        if let Some(o) = self.observer.as_mut() {
            o.skipped(now, skip);
        }
    }
    fn config_changed(&mut self, now: Micros, change: &ConfigChange) {
        if let Some(o) = self.observer.as_mut() {
            o.config_changed(now, change);
        }
    }
}

/// The simulator's side of the one carry-out (`abcast_core::carry`): messages into the
/// simulated network, every delivery, install, skip and acknowledgement through the
/// checkers and into the trace.
struct NodeCarrier<'w, 'a, P: Protocol, F> {
    w: &'w mut World<'a, P, F>,
    i: usize,
    id: NodeId,
    incarnation: u64,
}

impl<P, F> Carrier<P::Message> for NodeCarrier<'_, '_, P, F>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError>,
{
    type App = NodeApp;
    type Error = Box<Violation>;

    fn app(&mut self) -> &mut NodeApp {
        &mut self.w.nodes[self.i].app
    }

    fn send(&mut self, to: NodeId, msg: P::Message) {
        let (kind, body) = encode(&msg);
        self.w.send(self.id, to, kind, body);
    }

    fn multicast(&mut self, msg: P::Message) {
        let (kind, body) = encode(&msg);
        for k in 0..self.w.nodes.len() {
            let to = self.w.nodes[k].id;
            if to != self.id || self.w.cfg.multicast_loopback {
                self.w.send(self.id, to, kind, body.clone());
            }
        }
    }

    fn delivered(&mut self, now: Micros, d: &Delivery, _results: &[Bytes]) -> SimResult<()> {
        let (id, incarnation) = (self.id, self.incarnation);
        self.w.first_delivery(self.i);
        self.w.partial_delivered(id, d);
        self.w.trace.record(
            now,
            TraceEvent::Deliver {
                node: id,
                incarnation,
                instance: d.instance,
                key: d.batch.key(),
                count: d.batch.len(),
            },
        );
        self.w
            .checker
            .deliver(now, id, incarnation, d)
            .map_err(|f| self.w.violation(f))
    }

    fn installed(&mut self, _now: Micros, install: &Install) -> SimResult<()> {
        self.w.installed(self.i, &install.snapshot)
    }

    fn install_refused(&mut self, _now: Micros, _install: &Install, why: String) -> Box<Violation> {
        self.w.violation(
            Failure::new(
                ViolationKind::SnapshotMismatch,
                format!("{}: {why}", self.id),
            )
            .at(self.id, self.incarnation),
        )
    }

    fn skipped(&mut self, _now: Micros, skip: &Skip) -> SimResult<()> {
        self.w.learner_skipped(self.i, skip)
    }

    fn subscription(&mut self, now: Micros, sub: &Subscription) -> SimResult<()> {
        self.w.trace.record(
            now,
            TraceEvent::Protocol {
                node: self.id,
                text: format!("subscription {sub:?}"),
            },
        );
        self.w.checker.subscription(self.id, self.incarnation, sub);
        Ok(())
    }

    fn config_changed(&mut self, now: Micros, c: &ConfigChange) -> SimResult<()> {
        self.w.trace.record(
            now,
            TraceEvent::Protocol {
                node: self.id,
                text: format!("configuration {} ({:?})", c.config.id, c.kind),
            },
        );
        self.w
            .checker
            .config_change(now, self.id, self.incarnation, &c.config)
            .map_err(|f| self.w.violation(f))?;
        self.w.config_applied(self.id, self.incarnation, &c.config);
        Ok(())
    }

    fn read(&mut self, _now: Micros, r: &ReadState) -> SimResult<()> {
        self.w.read_answered(self.i, r)
    }

    fn acked(&mut self, now: Micros, a: &Ack) -> SimResult<()> {
        self.w.trace.record(
            now,
            TraceEvent::Ack {
                node: self.id,
                key: a.key,
                count: a.count,
            },
        );
        self.w
            .checker
            .ack(now, self.id, self.incarnation, a)
            .map_err(|f| self.w.violation(f))
    }

    fn event(&mut self, now: Micros, event: &abcast_core::Event) {
        self.w.trace.record(
            now,
            TraceEvent::Protocol {
                node: self.id,
                text: event.to_string(),
            },
        );
    }
}

impl SimApp {
    fn encode(&self) -> Bytes {
        let mut e = Encoder::new();
        e.put_u64(self.digest.batches);
        e.put_u64(self.digest.values);
        e.put_u64(self.digest.hash);
        e.to_bytes()
    }
    fn decode(b: &Bytes) -> Result<SimApp, String> {
        let mut d = abcast_core::codec::Decoder::new(b.clone());
        let mut get = |what| d.u64(what).map_err(|e| e.to_string());
        let digest = SeqDigest {
            batches: get("app.batches")?,
            values: get("app.values")?,
            hash: get("app.hash")?,
        };
        d.finish().map_err(|e| e.to_string())?;
        Ok(SimApp {
            digest,
            complete: true,
            delivered: true,
            first: None,
        })
    }
}

/// Once a late node waits for a first decision, it looks again this often.
const LATE_JOIN_RETRY_US: Micros = 20_000;

/// A power loss waits this long for an acceptor's group commit to interrupt, then strikes.
const POWER_LOSS_WAIT_US: Micros = 200_000;

struct World<'a, P: Protocol, F> {
    cfg: &'a SimConfig,
    factory: &'a F,
    rng: SimRng,
    /// The disk faults' own random stream (see the module comment).
    disk_rng: SimRng,
    /// The stream of the disk faults of issue 33 (`SimConfig::disk_faults`), apart again
    /// so that the runs of the machine crash model without them are unchanged.
    disk_fault_rng: SimRng,
    /// One disk per node, in node order; it survives the node's crashes.
    disks: Vec<MemDir>,
    plan: FaultPlan,
    now_us: Micros,
    queue: BinaryHeap<Reverse<Event>>,
    next_seq: u64,
    nodes: Vec<Slot<P>>,
    /// Per node, its pipelined group commit.
    pipes: Vec<Pipe<P::Message>>,
    index: BTreeMap<NodeId, usize>,
    blocked: BTreeSet<(NodeId, NodeId)>,
    /// A ghost coordinator cut off both ways (on top of `blocked`), and until when.
    ghost: Option<(NodeId, Micros)>,
    /// The ghost's successor, scheduled to crash: it counts as faulty from the moment the
    /// crash is planned, so no other crash takes a second acceptor in the meantime.
    ghost_crash: Option<usize>,
    /// Acceptors that restarted amnesic so far ([`FaultKind::AmnesicBeyondF`]).
    amnesic_restarts: u64,
    loss_ppm: u32,
    dup_ppm: u32,
    link_clock_us: BTreeMap<(NodeId, usize), Micros>,
    checker: Checker,
    trace: Trace,
    outbox: Outbox<P::Message>,
    next_client_value: u64,
    /// The end of the fault phase (`SimConfig::fault_phase_us`).
    fault_end_us: Micros,
    /// Where the run is: faults, faults remaining, healed.
    phase: Phase,
    /// The full heal (`Micros::MAX` until it happened).
    heal_at_us: Micros,
    load_end_us: Micros,
    converged_at_us: Option<Micros>,
    /// The highest ballot sampled so far and how often it grew.
    ballot_max: Ballot,
    ballot_changes: u64,
    /// A power loss waits for the next acceptor's group commit.
    power_loss_pending: bool,
    /// Linearizable reads (`reads.rs`).
    reads: reads::Reads,
    /// The configuration in effect and the reconfiguration under way (`reconfig.rs`).
    membership: reconfig::Membership,
    /// The partial-connectivity mix: the liveness check of the episode under way, and a
    /// constrained election's shape waiting for its hub to fall behind.
    partial_check: Option<faults::PartialCheck>,
    partial_pending: Option<BTreeSet<(NodeId, NodeId)>>,
    report: SimReport,
}

/// The phases of a run after the fault phase.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    Faults,
    /// Up to f acceptors (`exempt`) stay down or cut off; the connected learners must
    /// converge by `deadline_us`.
    FaultsRemain {
        exempt: Vec<NodeId>,
        deadline_us: Micros,
    },
    Healed,
}

type SimResult<T> = Result<T, Box<Violation>>;

/// Seeds the disk faults' stream: another sequence than the main one of the same seed.
const DISK_STREAM: u64 = 0xD15C_FA17_5EED_0001;
/// Seeds the stream of the disk faults of issue 33.
const DISK_FAULT_STREAM: u64 = 0xD15C_FA17_5EED_0033;

impl<'a, P, F> World<'a, P, F>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo, MemDir) -> Result<P, StorageError>,
{
    fn new(cfg: &'a SimConfig, factory: &'a F) -> SimResult<World<'a, P, F>> {
        let mut rng = SimRng::new(cfg.seed);
        let mut plan = FaultPlan::draw(cfg, &mut rng);
        let mut disk_rng = SimRng::new(cfg.seed ^ DISK_STREAM);
        plan.disk = DiskPlan::draw(cfg.crash_model, &mut disk_rng);
        let mut disk_fault_rng = SimRng::new(cfg.seed ^ DISK_FAULT_STREAM);
        plan.disk
            .draw_faults(cfg.crash_model, cfg.disk_faults, &mut disk_fault_rng);
        let nodes = cfg
            .nodes
            .iter()
            .map(|&id| Slot {
                id,
                proto: None,
                incarnation: 0,
                started: false,
                epoch: 0,
                acceptor: cfg.acceptors.contains(&id) && cfg.is_initial_member(id),
                learner: cfg.learners.contains(&id) && cfg.is_initial_member(id),
                crash_exempt: cfg.crash_exempt.contains(&id),
                app: NodeApp {
                    state: SimApp::default(),
                    observer: cfg.observer.as_ref().map(|o| (o.0)(id)),
                },
                saved: None,
                crash_in_commit: None,
                last_crash: String::new(),
                paused_until_us: 0,
                parked: Vec::new(),
                partial: None,
                stay_down: false,
                disk_error: None,
                new_file_crash: None,
                wipe_on_restart: false,
            })
            .collect();
        let fault_end_us = cfg.fault_phase_us;
        let w = World {
            cfg,
            factory,
            rng,
            disk_rng,
            disk_fault_rng,
            disks: cfg
                .nodes
                .iter()
                .map(|id| MemDir::new(format!("node-{}", id.0)))
                .collect(),
            now_us: 0,
            queue: BinaryHeap::new(),
            next_seq: 0,
            nodes,
            index: cfg
                .nodes
                .iter()
                .enumerate()
                .map(|(i, &id)| (id, i))
                .collect(),
            blocked: BTreeSet::new(),
            ghost: None,
            ghost_crash: None,
            amnesic_restarts: 0,
            loss_ppm: plan.loss_ppm,
            dup_ppm: plan.dup_ppm,
            link_clock_us: BTreeMap::new(),
            checker: Checker::new(cfg.fresh_learners_deliver_all),
            trace: Trace::new(cfg.trace_tail_events, cfg.verbose),
            outbox: Outbox::new(),
            pipes: (0..cfg.nodes.len()).map(|_| Pipe::default()).collect(),
            next_client_value: 0,
            fault_end_us,
            phase: Phase::Faults,
            heal_at_us: Micros::MAX,
            load_end_us: fault_end_us.saturating_add(cfg.heal_load_us),
            converged_at_us: None,
            ballot_max: Ballot::ZERO,
            ballot_changes: 0,
            power_loss_pending: false,
            reads: reads::Reads::new(cfg.seed, cfg.reads_per_s),
            membership: reconfig::Membership::new(
                &cfg.initial_member_ids(),
                cfg.initial_members.is_some(),
            ),
            partial_check: None,
            partial_pending: None,
            report: SimReport {
                seed: cfg.seed,
                mix: cfg.mix,
                plan: plan.clone(),
                proposed_values: 0,
                busy_rejections: 0,
                other_rejections: 0,
                acked_values: 0,
                delivered_values_by_node: BTreeMap::new(),
                decided_instances: 0,
                messages_sent: 0,
                messages_delivered: 0,
                messages_dropped: 0,
                messages_duplicated: 0,
                bytes_sent: 0,
                syncs: 0,
                crashes: 0,
                machine_crashes: 0,
                commit_crashes: 0,
                unsynced_bytes_lost: 0,
                torn_files: 0,
                flipped_bytes: 0,
                restarts: 0,
                snapshots_taken: 0,
                snapshots_restored: 0,
                snapshots_installed: 0,
                partition_changes: 0,
                heal_at_us: fault_end_us,
                converged_at_us: 0,
                time_to_converge_us: 0,
                events_processed: 0,
                late_join_at_us: None,
                faults: FaultCounts::default(),
                messages_held_long: 0,
                messages_parked: 0,
                ballot_changes: 0,
                faults_remain_nodes: Vec::new(),
                faults_remain_converge_us: None,
                reads_issued: 0,
                reads_answered: 0,
                reads_checked: 0,
                reconfigs_accepted: 0,
                reconfigs_done: 0,
                leader_replacements: 0,
                members_added: 0,
                configs_applied: 0,
                session_drops: 0,
                partial_shapes: [0; 5],
                partial_checked: 0,
                partial_recover_us_max: 0,
                partial_window_us_max: 0,
                fingerprint: 0,
            },
            plan,
        };
        if let Err(e) = cfg.validate() {
            return Err(w.violation(Failure::new(ViolationKind::BadConfig, e)));
        }
        Ok(w)
    }

    fn run(mut self) -> SimResult<SimReport> {
        self.trace.record(
            0,
            TraceEvent::Note(format!(
                "seed {} mix {} plan {:?}",
                self.cfg.seed, self.cfg.mix, self.plan
            )),
        );
        let late = self
            .plan
            .late_join
            .and_then(|(id, at)| self.index.get(&id).map(|&i| (i, at)));
        for i in 0..self.nodes.len() {
            match late {
                Some((l, at)) if l == i => self.schedule(at, Action::LateStart { node: i }),
                _ => self.guarded(|w| w.start_node(i, StartInfo::FRESH))?,
            }
        }
        let first = self.proposal_gap_us();
        self.schedule(first, Action::Propose { retry: None });
        if let Some((lo, hi)) = self.plan.partition_every_us {
            let at = self.rng.between(lo, hi);
            self.schedule(at, Action::Partition);
        }
        if let Some((lo, hi)) = self.plan.crash_every_us {
            let at = self.rng.between(lo, hi);
            self.schedule(at, Action::Crash);
        }
        if let Some((lo, hi)) = self.plan.pause_every_us {
            let at = self.rng.between(lo, hi);
            self.schedule(at, Action::Pause);
        }
        if let Some(at) = self.plan.power_loss_at_us {
            self.schedule(at, Action::PowerLoss);
        }
        if let Some(at) = self.plan.ghost_at_us {
            self.schedule(at, Action::Ghost);
        }
        for &(id, at, down_us) in &self.cfg.scheduled_crashes {
            if let Some(&node) = self.index.get(&id) {
                self.schedule(at, Action::CrashNode { node, down_us });
            }
        }
        if let Some(p) = &self.plan.partial {
            self.schedule(p.warmup_us, Action::PartialEpisode { k: 0 });
        }
        self.schedule(self.fault_end_us, Action::FaultsEnd);
        if self.cfg.snapshot_interval_us > 0 {
            self.schedule(self.cfg.snapshot_interval_us, Action::Snapshot);
        }
        self.schedule(BALLOT_SAMPLE_US, Action::Sample);
        self.guarded(|w| w.probe_reads())?;
        self.schedule_next_read();
        self.schedule_first_reconfig();

        loop {
            let Some(Reverse(ev)) = self.queue.pop() else {
                if self.converged_at_us.is_some() {
                    break;
                }
                return Err(self.liveness_violation("the event queue ran dry (every node down?)"));
            };
            if let Phase::FaultsRemain { deadline_us, .. } = self.phase
                && ev.at_us > deadline_us
            {
                self.now_us = deadline_us;
                return Err(self.liveness_violation(
                    "with up to f acceptors still down or cut off, the connected learners did not converge \
                     within faults_remain_bound_us",
                ));
            }
            if let Some(c) = &self.partial_check
                && ev.at_us > c.deadline_us
            {
                self.now_us = c.deadline_us;
                return Err(self.partial_failure());
            }
            let deadline_us = self.deadline_us();
            if ev.at_us > deadline_us && self.converged_at_us.is_none() {
                self.now_us = deadline_us;
                return Err(self.liveness_violation("no convergence within the bound"));
            }
            self.now_us = ev.at_us;
            self.report.events_processed += 1;
            if self.report.events_processed > self.cfg.event_budget {
                return Err(self.violation(Failure::new(
                    ViolationKind::EventBudget,
                    format!(
                        "more than {} events; a message storm or a zero-delay loop?",
                        self.cfg.event_budget
                    ),
                )));
            }
            self.guarded(|w| w.handle(ev.action))?;
            if self.partial_check.is_some() {
                self.check_partial();
            }
            if self.now_us < self.load_end_us {
                continue;
            }
            match self.phase {
                Phase::Faults => {}
                Phase::FaultsRemain { .. } => self.guarded(|w| w.check_faults_remain())?,
                Phase::Healed => match self.converged_at_us {
                    None => {
                        if self.is_converged() {
                            self.converged_at_us = Some(self.now_us);
                            self.trace.record(self.now_us, TraceEvent::Converged);
                        }
                    }
                    Some(c) => {
                        if self.now_us >= c.saturating_add(self.cfg.settle_us) {
                            break;
                        }
                    }
                },
            }
        }
        self.finish()
    }

    /// The end of the run: the report, and the run-level bounds (progress, `Busy`).
    fn finish(mut self) -> SimResult<SimReport> {
        let converged_at_us = self.converged_at_us.unwrap_or(self.now_us);
        let mut report = self.report.clone();
        report.proposed_values = self.checker.proposed_values();
        report.acked_values = self.checker.acked_values();
        report.delivered_values_by_node = self.checker.delivered_values().clone();
        report.decided_instances = self.checker.decided_instances();
        report.heal_at_us = self.heal_at_us;
        report.converged_at_us = converged_at_us;
        report.time_to_converge_us = converged_at_us.saturating_sub(self.heal_at_us);
        report.ballot_changes = self.ballot_changes;
        report.configs_applied = self.checker.configs_seen() as u64;
        report.fingerprint = self.trace.fingerprint();
        if self.cfg.require_acks && report.acked_values == 0 {
            return Err(self.violation(Failure::new(
                ViolationKind::NothingAcked,
                format!(
                    "no value was acknowledged in the whole run ({} proposed, {} Busy)",
                    report.proposed_values, report.busy_rejections
                ),
            )));
        }
        if let Some(max) = self.cfg.busy_rejections_max
            && report.busy_rejections > max
        {
            self.now_us = converged_at_us;
            return Err(self.violation(Failure::new(
                ViolationKind::TooBusy,
                format!(
                    "propose answered Busy {} times, more than the bound of {max} ({} values proposed)",
                    report.busy_rejections, report.proposed_values
                ),
            )));
        }
        Ok(report)
    }

    /// When the run fails for want of convergence after the full heal.
    fn deadline_us(&self) -> Micros {
        self.heal_at_us
            .saturating_add(self.cfg.converge_bound_us)
            .max(self.load_end_us)
    }

    /// Runs one step; a panic in it (a protocol's or a factory's assertion) ends the run
    /// as a violation with the trace and the replay line, instead of unwinding through the
    /// sweep without saying which seed it was.
    fn guarded(&mut self, step: impl FnOnce(&mut Self) -> SimResult<()>) -> SimResult<()> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(self))) {
            Ok(r) => r,
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".into());
                Err(self.violation(Failure::new(
                    ViolationKind::Panicked,
                    format!("a protocol or factory call panicked: {msg}"),
                )))
            }
        }
    }

    fn schedule(&mut self, at_us: Micros, action: Action) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push(Reverse(Event { at_us, seq, action }));
    }

    fn handle(&mut self, action: Action) -> SimResult<()> {
        match action {
            Action::Message(m) => self.on_message(*m),
            Action::Tick { node, epoch } => {
                if self.nodes[node].proto.is_none() || self.nodes[node].epoch != epoch {
                    return Ok(());
                }
                let until = self.nodes[node].paused_until_us;
                if self.now_us < until {
                    // Frozen: the tick fires, overdue, when the process resumes.
                    self.schedule(until, Action::Tick { node, epoch });
                    return Ok(());
                }
                self.call(node, |p, now, out| p.tick(now, out))?;
                self.schedule_tick(node, false);
                Ok(())
            }
            Action::Propose { retry } => self.on_propose(retry),
            Action::Partition => {
                self.on_partition();
                Ok(())
            }
            Action::Crash => self.on_crash(),
            Action::CrashNode { node, down_us } => {
                if self.nodes[node].proto.is_some() {
                    self.crash_for(node, down_us);
                }
                Ok(())
            }
            Action::Restart { node, incarnation } => {
                let s = &self.nodes[node];
                if s.proto.is_none() && s.started && s.incarnation == incarnation && !s.stay_down {
                    self.restart(node)?;
                }
                Ok(())
            }
            Action::LateStart { node } => {
                if self.nodes[node].started || self.nodes[node].stay_down {
                    return Ok(());
                }
                let retry_at = self.now_us.saturating_add(LATE_JOIN_RETRY_US);
                if self.checker.max_decided() == 0 && retry_at < self.fault_end_us {
                    self.schedule(retry_at, Action::LateStart { node });
                    return Ok(());
                }
                self.report.late_join_at_us = Some(self.now_us);
                self.start_node(node, StartInfo::FRESH)?;
                self.maybe_arm_late_joiner(node);
                Ok(())
            }
            Action::Snapshot => {
                self.take_snapshots()?;
                self.schedule(
                    self.now_us.saturating_add(self.cfg.snapshot_interval_us),
                    Action::Snapshot,
                );
                Ok(())
            }
            Action::SyncDone { node, epoch } => {
                let until = self.nodes[node].paused_until_us;
                if self.now_us < until && self.nodes[node].epoch == epoch {
                    // The sync thread is frozen with its process.
                    self.schedule(until, Action::SyncDone { node, epoch });
                    return Ok(());
                }
                self.on_sync_done(node, epoch)
            }
            Action::Pause => {
                self.on_pause();
                Ok(())
            }
            Action::Ghost => {
                self.on_ghost();
                Ok(())
            }
            Action::GhostWatch => {
                self.on_ghost_watch();
                Ok(())
            }
            Action::GhostHeal => {
                self.on_ghost_heal();
                Ok(())
            }
            Action::GhostCrash { node, down_us } => {
                self.on_ghost_crash(node, down_us);
                Ok(())
            }
            Action::Sample => {
                self.sample_ballots();
                self.schedule(self.now_us.saturating_add(BALLOT_SAMPLE_US), Action::Sample);
                Ok(())
            }
            Action::PowerLoss => {
                self.power_loss_pending = true;
                self.trace.record(
                    self.now_us,
                    TraceEvent::Note(
                        "power loss: every acceptor's machine goes down at the next group commit"
                            .into(),
                    ),
                );
                self.schedule(
                    self.now_us.saturating_add(POWER_LOSS_WAIT_US),
                    Action::PowerLossNow,
                );
                Ok(())
            }
            Action::PowerLossNow => {
                if self.power_loss_pending {
                    self.power_loss(None);
                }
                Ok(())
            }
            Action::FaultsEnd => self.on_faults_end(),
            Action::Read { retry } => self.on_read(retry),
            Action::Reconfig => self.on_reconfig(),
            Action::ReconfigAsk { step, to } => self.on_reconfig_ask(step, to),
            Action::CrashAfterReconfig { node } => {
                self.on_crash_after_reconfig(node);
                Ok(())
            }
            Action::Session { node, peer, up } => self.on_session(node, peer, up),
            Action::PartialEpisode { k } => {
                self.on_partial_episode(k);
                Ok(())
            }
            Action::PartialCut { shape } => {
                self.on_partial_cut(shape);
                Ok(())
            }
            Action::JointPartition { old_side } => {
                self.on_joint_partition(&old_side);
                Ok(())
            }
            Action::JointHeal { generation } => {
                self.on_joint_heal(generation);
                Ok(())
            }
        }
    }

    /// The cluster's highest ballot, sampled: each growth is a ballot change (a takeover,
    /// or an attempt at one).
    fn sample_ballots(&mut self) {
        let max = self
            .nodes
            .iter()
            .filter_map(|s| s.proto.as_ref().map(|p| p.status().ballot))
            .max()
            .unwrap_or(Ballot::ZERO);
        if max > self.ballot_max {
            self.ballot_max = max;
            self.ballot_changes += 1;
        }
    }

    // ---- snapshots ---------------------------------------------------------------------

    /// Every live learner with a complete state snapshots it; the checker compares the
    /// state with the common sequence up to the snapshot's instance.
    fn take_snapshots(&mut self) -> SimResult<()> {
        for i in 0..self.nodes.len() {
            // Deliveries held behind a sync in flight have not reached the application.
            if !self.pipes[i].in_flight.is_empty() {
                continue;
            }
            let s = &mut self.nodes[i];
            if !s.learner || !s.app.state.complete || self.now_us < s.paused_until_us {
                continue;
            }
            let Some(p) = s.proto.as_mut() else { continue };
            let state = s.app.state;
            let snap = match p.take_snapshot(state.encode()) {
                Ok(snap) => snap,
                // A protocol without snapshots: nothing to do, ever.
                Err(_) => continue,
            };
            let (id, incarnation) = (s.id, s.incarnation);
            s.saved = Some(snap.clone());
            self.report.snapshots_taken += 1;
            self.trace.record(
                self.now_us,
                TraceEvent::Note(format!("{id}: snapshot up to instance {}", snap.upto)),
            );
            if let Err(f) = self.checker.snapshot(
                id,
                incarnation,
                snap.upto,
                state.digest,
                SnapshotEvent::Taken,
            ) {
                return Err(self.violation(f));
            }
            self.check_group_snapshot(i, &snap, SnapshotEvent::Taken)?;
        }
        Ok(())
    }

    /// A snapshot of a protocol of several groups: where it stands in each, checked and
    /// (restored or installed) the learner's cursors moved there.
    fn check_group_snapshot(
        &mut self,
        i: usize,
        snap: &Snapshot,
        event: SnapshotEvent,
    ) -> SimResult<()> {
        let (id, incarnation) = (self.nodes[i].id, self.nodes[i].incarnation);
        let groups = match self.nodes[i].proto.as_ref() {
            Some(p) => p.snapshot_groups(snap),
            None => return Ok(()),
        };
        if groups.is_empty() {
            return Ok(());
        }
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "{id}: {event:?} snapshot at merge position {} covers {}",
                snap.upto,
                groups
                    .iter()
                    .map(|g| format!(
                        "r{}:{}{}",
                        g.group.0,
                        g.covered,
                        if g.following { "" } else { "(not following)" }
                    ))
                    .collect::<Vec<_>>()
                    .join(" ")
            )),
        );
        self.checker
            .group_snapshot(id, incarnation, snap.upto, &groups, event)
            .map_err(|f| self.violation(f))
    }

    /// A restarted learner starts from its saved snapshot, if it has one.
    fn restore_snapshot(&mut self, i: usize) -> SimResult<()> {
        let s = &mut self.nodes[i];
        let (id, incarnation) = (s.id, s.incarnation);
        let (Some(snap), Some(p)) = (s.saved.clone(), s.proto.as_mut()) else {
            return Ok(());
        };
        let restored = p
            .restore_snapshot(&snap)
            .and_then(|()| SimApp::decode(&snap.app));
        let app = match restored {
            Ok(app) => app,
            Err(e) => {
                return Err(self.violation(
                    Failure::new(
                        ViolationKind::SnapshotMismatch,
                        format!(
                            "{id}: its snapshot up to {} was not restored: {e}",
                            snap.upto
                        ),
                    )
                    .at(id, incarnation),
                ));
            }
        };
        self.report.snapshots_restored += 1;
        self.adopt_snapshot(i, &snap, app, SnapshotEvent::Restored)
    }

    /// The learner's application now holds `app`, the state of `snap` (restored at a
    /// restart or installed from a peer): traced, and checked against the common sequence.
    fn adopt_snapshot(
        &mut self,
        i: usize,
        snap: &Snapshot,
        app: SimApp,
        event: SnapshotEvent,
    ) -> SimResult<()> {
        let (id, incarnation) = (self.nodes[i].id, self.nodes[i].incarnation);
        self.nodes[i].app.state = app;
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "{id}: {} snapshot up to instance {}",
                match event {
                    SnapshotEvent::Restored => "restarted from its",
                    _ => "installed a peer's",
                },
                snap.upto
            )),
        );
        if let Err(f) = self
            .checker
            .snapshot(id, incarnation, snap.upto, app.digest, event)
        {
            return Err(self.violation(f));
        }
        self.check_group_snapshot(i, snap, event)
    }

    // ---- nodes -------------------------------------------------------------------------

    fn start_node(&mut self, i: usize, start: StartInfo) -> SimResult<()> {
        let id = self.nodes[i].id;
        let proto = match (self.factory)(id, start, self.disks[i].clone()) {
            Ok(p) => p,
            Err(e) => {
                let after = match self.nodes[i].last_crash.as_str() {
                    "" => String::new(),
                    c => format!(" after {c}"),
                };
                return Err(self.violation(
                    Failure::new(
                        ViolationKind::StorageFailed,
                        format!("{id} cannot start{after}: {e}"),
                    )
                    .at(id, start.incarnation),
                ));
            }
        };
        // What the protocol made of `start.amnesic` (a durable store that recovered is not
        // amnesic).
        let amnesic = proto.status().amnesic;
        if amnesic && self.nodes[i].acceptor {
            self.amnesic_restarts += 1;
            if self.amnesic_restarts > self.max_faulty() as u64 {
                self.report.faults.add(FaultKind::AmnesicBeyondF, 1);
            }
        }
        let s = &mut self.nodes[i];
        s.proto = Some(proto);
        s.incarnation = start.incarnation;
        s.started = true;
        s.epoch += 1;
        s.app.state = SimApp::default();
        self.refresh_roles();
        self.checker.start(
            id,
            start.incarnation,
            !start.amnesic && start.incarnation == 0,
        );
        if self.nodes[i].learner {
            self.restore_snapshot(i)?;
        }
        self.trace.record(
            self.now_us,
            TraceEvent::Start {
                node: id,
                incarnation: start.incarnation,
                amnesic,
            },
        );
        self.call(i, |p, now, out| p.tick(now, out))?;
        self.schedule_tick(i, true);
        self.flush_parked(i);
        self.node_session(i, true);
        Ok(())
    }

    fn restart(&mut self, i: usize) -> SimResult<()> {
        self.maybe_wipe(i);
        let incarnation = self.nodes[i].incarnation + 1;
        self.report.restarts += 1;
        // The runtime's own rule for a restart's value ids (`StartInfo::restart`).
        let start = match StartInfo::restart(incarnation, true) {
            Ok(s) => s,
            Err(e) => {
                return Err(self.violation(Failure::new(ViolationKind::BadConfig, e.to_string())));
            }
        };
        self.start_node(i, start)
    }

    /// Schedules the node's next periodic tick; the first one at a random phase so that
    /// nodes do not tick in lockstep.
    fn schedule_tick(&mut self, i: usize, first: bool) {
        let Some(p) = self.nodes[i].proto.as_ref() else {
            return;
        };
        let interval_us = p.tick_interval_us().max(1);
        let delay_us = if first {
            self.rng.between(1, interval_us)
        } else {
            interval_us
        };
        let epoch = self.nodes[i].epoch;
        self.schedule(
            self.now_us.saturating_add(delay_us),
            Action::Tick { node: i, epoch },
        );
    }

    /// Calls one protocol input and carries out its outbox.
    fn call(
        &mut self,
        i: usize,
        input: impl FnOnce(&mut P, Micros, &mut Outbox<P::Message>),
    ) -> SimResult<()> {
        let now = self.now_us;
        if !self.pipes[i].in_flight.is_empty() {
            // Behind the syncs in flight: gather, and begin its own sync if there is room
            // (the runtime's end of an iteration), or carry out later.
            if let Some(p) = self.nodes[i].proto.as_mut() {
                input(p, now, &mut self.pipes[i].gather);
            }
            return self.commit_gathered(i);
        }
        let mut out = std::mem::take(&mut self.outbox);
        out.clear();
        let Some(p) = self.nodes[i].proto.as_mut() else {
            self.outbox = out;
            return Ok(());
        };
        input(p, now, &mut out);
        let r = self.carry_out(i, &mut out);
        out.clear();
        self.outbox = out;
        r
    }

    /// The violation of a group commit that failed on node `i`.
    fn commit_failed(&mut self, i: usize, e: &StorageError) -> Box<Violation> {
        let (id, incarnation) = (self.nodes[i].id, self.nodes[i].incarnation);
        self.violation(
            Failure::new(
                ViolationKind::StorageFailed,
                format!("{id}: the group commit failed: {e}"),
            )
            .at(id, incarnation),
        )
    }

    /// The pipelined group commit's first half: the writes reach the disk's "OS" now; the
    /// outbox waits for the job, which runs at a `SyncDone` a drawn delay later.
    fn begin_sync(
        &mut self,
        i: usize,
        out: &mut Outbox<P::Message>,
        lo: Micros,
        hi: Micros,
    ) -> SimResult<()> {
        let begun = match self.nodes[i].proto.as_mut() {
            Some(p) => p.begin_sync_storage(),
            None => return Ok(()),
        };
        match begun {
            Err(e) => self.storage_failed(i, &e),
            Ok(Some(_)) if self.nodes[i].new_file_crash.is_some() && self.new_file_crash_due(i) => {
                // The machine went down with the job unrun: the outbox dies with it.
                Ok(())
            }
            Ok(None) => {
                // Durable already: carry it out now, or after the jobs in flight.
                out.needs_sync = false;
                if self.pipes[i].in_flight.is_empty() {
                    return self.carry_out(i, out);
                }
                debug_assert!(self.pipes[i].gather.is_empty(), "two gathered outboxes");
                self.pipes[i].gather = std::mem::take(out);
                Ok(())
            }
            Ok(Some(job)) => {
                let mut held = std::mem::take(out);
                held.needs_sync = false;
                self.pipes[i].in_flight.push_back((job, held));
                // Real fdatasyncs have long tails (ext4 journal commits, other writers):
                // one in twenty stalls for up to 50 times the upper bound, long enough for
                // heartbeats, trims and retransmissions to happen behind it.
                let hi = hi.max(lo);
                let delay = if self.rng.chance_ppm(50_000) {
                    self.rng.between(hi, hi.saturating_mul(50))
                } else {
                    self.rng.between(lo, hi)
                };
                // Jobs run in order on the one sync thread.
                let at = self
                    .now_us
                    .saturating_add(delay)
                    .max(self.pipes[i].last_done_us);
                self.pipes[i].last_done_us = at;
                let epoch = self.nodes[i].epoch;
                self.schedule(at, Action::SyncDone { node: i, epoch });
                Ok(())
            }
        }
    }

    /// What gathered behind the syncs in flight: with none left, it is carried out (which
    /// may begin its sync); with room for another job and a sync needed, its sync begins
    /// now; otherwise it keeps gathering.
    fn commit_gathered(&mut self, i: usize) -> SimResult<()> {
        let pipe = &self.pipes[i];
        let begin = pipe.gather.needs_sync && pipe.in_flight.len() < self.cfg.sync_jobs_limit();
        if pipe.gather.is_empty() || !(pipe.in_flight.is_empty() || begin) {
            return Ok(());
        }
        let mut gathered = std::mem::take(&mut self.pipes[i].gather);
        self.carry_out(i, &mut gathered)
    }

    /// The oldest sync job in flight completes: its held outbox goes out, then what
    /// gathered behind the jobs (which may begin the next sync).
    fn on_sync_done(&mut self, i: usize, epoch: u64) -> SimResult<()> {
        if self.nodes[i].epoch != epoch {
            return Ok(()); // the process that began it is gone
        }
        let Some((job, mut held)) = self.pipes[i].in_flight.pop_front() else {
            return Ok(());
        };
        let result = job.run();
        let ended = match self.nodes[i].proto.as_mut() {
            Some(p) => p.end_sync_storage(result),
            None => Ok(()),
        };
        if let Err(e) = ended {
            return self.storage_failed(i, &e);
        }
        self.carry_out(i, &mut held)?;
        self.commit_gathered(i)
    }

    /// The contract's order: sync, then sends and multicasts, then deliveries and acks.
    fn carry_out(&mut self, i: usize, out: &mut Outbox<P::Message>) -> SimResult<()> {
        let (id, incarnation) = (self.nodes[i].id, self.nodes[i].incarnation);
        if out.needs_sync {
            self.report.syncs += 1;
            if self.power_loss_pending && self.nodes[i].acceptor {
                // The outbox dies with the machines.
                self.power_loss(Some(i));
                return Ok(());
            }
            if self.nodes[i].crash_in_commit.is_some() && self.crash_in_commit(i) {
                return Ok(());
            }
            if let Some((lo, hi)) = self.cfg.sync_delay_us {
                return self.begin_sync(i, out, lo, hi);
            }
            // The group commit, before anything that depends on it leaves.
            if let Some(p) = self.nodes[i].proto.as_mut()
                && let Err(e) = p.sync_storage()
            {
                return self.storage_failed(i, &e);
            }
        }
        if self.nodes[i].partial.is_some() && self.partial_due(i, out) && self.partial_crash(i, out)
        {
            return Ok(());
        }
        out.needs_sync = false;
        if let Some(why) = out.events.iter().find_map(|e| match e {
            abcast_core::Event::MessageRefused { from, why } => Some(format!("from {from}: {why}")),
            _ => None,
        }) {
            let f = Failure::new(ViolationKind::RefusedMessage, why).at(id, incarnation);
            return Err(self.violation(f));
        }
        let now = self.now_us;
        abcast_core::carry_out(
            now,
            out,
            &mut NodeCarrier {
                w: self,
                i,
                id,
                incarnation,
            },
        )?;
        if self.reads.waiting_at(i) {
            self.check_reads(i)?;
        }
        Ok(())
    }

    /// The learner passed over instances no acceptor holds any more: counted, checked (it
    /// must start where the learner is), and the application's state no longer covers the
    /// sequence.
    fn learner_skipped(&mut self, i: usize, skip: &abcast_core::Skip) -> SimResult<()> {
        let (id, incarnation) = (self.nodes[i].id, self.nodes[i].incarnation);
        self.report.faults.add(FaultKind::LearnerSkip, 1);
        self.trace.record(
            self.now_us,
            TraceEvent::Note(format!(
                "{id}#{incarnation} skips instances {}..{} of group {} (trimmed at every acceptor)",
                skip.from, skip.to, skip.group.0
            )),
        );
        self.checker
            .skip(id, incarnation, skip.group, skip.from, skip.to)
            .map_err(|f| self.violation(f))
    }

    /// The application's first delivery in this life: its state covers the sequence from
    /// the start if nothing of the common sequence comes before it.
    fn first_delivery(&mut self, i: usize) {
        if let Some((group, first)) = self.nodes[i].app.state.first.take() {
            // A Multi-Ring learner's merge starts at its first turn or at a snapshot, never
            // in between (a learner that skips says so: `skipped`).
            self.nodes[i].app.state.complete = group.0 != 0
                || self.checker.canonical_digest(first.saturating_sub(1)) == SeqDigest::default();
        }
    }

    /// The learner installed a peer's snapshot and the application took its state: the
    /// node saves it, and the checker holds the learner to every instance after it.
    fn installed(&mut self, i: usize, snap: &Snapshot) -> SimResult<()> {
        self.nodes[i].saved = Some(snap.clone());
        self.report.snapshots_installed += 1;
        let app = self.nodes[i].app.state;
        self.adopt_snapshot(i, snap, app, SnapshotEvent::Installed)
    }

    // ---- workload ----------------------------------------------------------------------

    fn proposal_gap_us(&mut self) -> Micros {
        let mean_us = 1_000_000 / u64::from(self.cfg.rate_per_s.max(1));
        self.rng.between(0, 2 * mean_us).max(1)
    }

    /// A unique payload: the client's value number, little-endian, then filler derived
    /// from it, so a swapped or corrupted payload never looks right by accident.
    fn make_payload(&mut self) -> Bytes {
        self.next_client_value += 1;
        let n = self.next_client_value;
        let len = if self.rng.chance_ppm(self.cfg.large_value_ppm) {
            self.cfg.large_value_bytes
        } else {
            self.rng.between(
                self.cfg.value_bytes_min as u64,
                self.cfg.value_bytes_max as u64,
            ) as usize
        };
        let mut b = BytesMut::with_capacity(len);
        b.extend_from_slice(&n.to_le_bytes());
        b.extend((8..len).map(|j| (n as u8).wrapping_mul(31).wrapping_add(j as u8)));
        b.freeze()
    }

    /// Nodes a client can reach now: up, not frozen, and not cut off by the faults-remain
    /// phase (clients sit with the connected majority).
    fn live_nodes(&self) -> Vec<usize> {
        let exempt: &[NodeId] = match &self.phase {
            Phase::FaultsRemain { exempt, .. } => exempt,
            _ => &[],
        };
        // With changing memberships, clients reach the members of the configuration in effect.
        let members_only = self.membership.on;
        (0..self.nodes.len())
            .filter(|&i| {
                let s = &self.nodes[i];
                s.proto.is_some()
                    && self.now_us >= s.paused_until_us
                    && !exempt.contains(&s.id)
                    && (!members_only || s.learner)
            })
            .collect()
    }

    fn on_propose(&mut self, retry: Option<Bytes>) -> SimResult<()> {
        if self.now_us >= self.load_end_us {
            return Ok(());
        }
        let is_retry = retry.is_some();
        if !is_retry {
            let gap = self.proposal_gap_us();
            self.schedule(self.now_us + gap, Action::Propose { retry: None });
        }
        let payload = match retry {
            Some(p) => p,
            None => self.make_payload(),
        };
        let live = self.live_nodes();
        let Some(&i) = self.rng.pick(&live) else {
            let at = self.now_us + self.cfg.busy_retry_us.max(1);
            self.schedule(
                at,
                Action::Propose {
                    retry: Some(payload),
                },
            );
            return Ok(());
        };
        let (id, incarnation) = (self.nodes[i].id, self.nodes[i].incarnation);
        // Behind a sync in flight the outputs gather (see `call`).
        let gathering = !self.pipes[i].in_flight.is_empty();
        let mut out = if gathering {
            std::mem::take(&mut self.pipes[i].gather)
        } else {
            let mut o = std::mem::take(&mut self.outbox);
            o.clear();
            o
        };
        let now = self.now_us;
        let result = match self.nodes[i].proto.as_mut() {
            Some(p) => p.propose(now, payload.clone(), &mut out),
            None => Err(ProposeError::Busy),
        };
        // Record the proposal before carrying out the outbox: it may deliver the value.
        let recorded = match result {
            Ok(vid) => {
                self.trace.record(
                    now,
                    TraceEvent::Propose {
                        node: id,
                        id: vid,
                        bytes: payload.len(),
                    },
                );
                self.checker
                    .propose(now, id, incarnation, vid, payload)
                    .map_err(|f| self.violation(f))
            }
            Err(ProposeError::Busy) => {
                self.report.busy_rejections += 1;
                self.trace.record(now, TraceEvent::Busy { node: id });
                let at = now + self.cfg.busy_retry_us.max(1);
                self.schedule(
                    at,
                    Action::Propose {
                        retry: Some(payload),
                    },
                );
                Ok(())
            }
            Err(e) => {
                self.report.other_rejections += 1;
                self.trace.record(
                    now,
                    TraceEvent::Note(format!("propose at {id} refused: {e}")),
                );
                Ok(())
            }
        };
        if gathering {
            self.pipes[i].gather = out;
            recorded?;
            return self.call(i, |p, now, out| p.tick(now, out));
        }
        let carried = recorded.and_then(|()| self.carry_out(i, &mut out));
        out.clear();
        self.outbox = out;
        carried?;
        self.call(i, |p, now, out| p.tick(now, out))
    }

    // ---- verdicts ----------------------------------------------------------------------

    fn live_learners(&self) -> Vec<LearnerId> {
        self.nodes
            .iter()
            .filter(|s| s.learner && s.proto.is_some())
            .map(|s| (s.id, s.incarnation))
            .collect()
    }

    fn is_converged(&self) -> bool {
        self.nodes.iter().all(|s| s.proto.is_some())
            && self
                .checker
                .converged_among(&self.live_learners(), &self.non_members())
    }

    fn liveness_violation(&mut self, why: &str) -> Box<Violation> {
        let live = self.live_learners();
        let mut f = match self.faults_remain_failure() {
            Some(f) => f,
            None => self
                .checker
                .liveness_failure_among(&live, &self.non_members())
                .unwrap_or_else(|| {
                    Failure::new(
                        ViolationKind::NotConverged,
                        format!("{why}, yet the checkers found nothing missing"),
                    )
                }),
        };
        let (phase, bound) = match &self.phase {
            Phase::FaultsRemain { exempt, .. } => (
                format!(
                    "faults remain at {exempt:?} since {}us, last proposal at {}us",
                    self.fault_end_us, self.load_end_us
                ),
                self.cfg.faults_remain_bound_us,
            ),
            _ => (
                format!("heal at {}us", self.heal_at_us),
                self.cfg.converge_bound_us,
            ),
        };
        f.detail
            .push_str(&format!(" [{why}; {phase}, bound {bound}us; node status:"));
        for s in &self.nodes {
            match s.proto.as_ref() {
                Some(p) => {
                    let st = p.status();
                    f.detail.push_str(&format!(
                        " {}#{}: coordinator {:?} leading {} delivered_upto {} decided_max {} in_flight {} amnesic {}{};",
                        s.id,
                        s.incarnation,
                        st.coordinator.map(|c| c.0),
                        st.leading,
                        st.delivered_upto,
                        st.decided_max,
                        st.values_in_flight,
                        st.amnesic,
                        if (self.blocked.iter().filter(|&&(a, _)| a == s.id).count() + 1
                            >= self.nodes.len()
                            && self.nodes.len() > 1)
                            || self.ghost.is_some_and(|(g, _)| g == s.id)
                        {
                            " (cut off)"
                        } else {
                            ""
                        }
                    ));
                }
                None => f.detail.push_str(&format!(" {}: down;", s.id)),
            }
        }
        f.detail.push(']');
        self.violation(f)
    }

    fn violation(&self, f: Failure) -> Box<Violation> {
        Box::new(Violation {
            kind: f.kind,
            seed: self.cfg.seed,
            mix: self.cfg.mix,
            at_us: self.now_us,
            node: f.node,
            incarnation: f.incarnation,
            instance: f.instance,
            value: f.value,
            detail: f.detail,
            replay: self.cfg.replay_line(),
            plan: Some(self.plan.clone()),
            trace_tail: self.trace.tail(),
        })
    }
}

/// Encodes a message the way the runtime does (body chunks for one vectored write) and
/// joins the chunks, as the receiving side sees them in one frame.
///
/// The simulator's network carries the frame header's group (the protocol instance, see
/// `WireMessage::group`) as the first two bytes of the body; [`decode`] takes them off.
pub fn encode<M: WireMessage>(msg: &M) -> (u8, Bytes) {
    let mut enc = Encoder::new();
    msg.encode(&mut enc);
    let chunks = enc.finish();
    let mut body = BytesMut::with_capacity(2 + chunks.iter().map(|c| c.len()).sum::<usize>());
    body.extend_from_slice(&msg.group().0.to_le_bytes());
    for c in &chunks {
        body.extend_from_slice(c);
    }
    let (kind, body) = (msg.kind(), body.freeze());
    CAPTURED.with(|c| {
        if let Some(v) = c.borrow_mut().as_mut()
            && v.len() < CAPTURE_MAX
        {
            v.push((kind, body.clone()));
        }
    });
    (kind, body)
}

/// Most messages one [`capture_messages`] keeps.
const CAPTURE_MAX: usize = 1 << 20;

std::thread_local! {
    static CAPTURED: std::cell::RefCell<Option<Vec<(u8, Bytes)>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` and returns, beside its result, every message the simulator encoded on this
/// thread meanwhile, as [`encode`] made them (kind; group then body): real protocol
/// traffic, for the fuzz targets' seed corpus (`abcast-fuzz`, `tests/corpus.rs`).
pub fn capture_messages<T>(f: impl FnOnce() -> T) -> (T, Vec<(u8, Bytes)>) {
    CAPTURED.with(|c| *c.borrow_mut() = Some(Vec::new()));
    let out = f();
    let msgs = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (out, msgs)
}

/// Decodes what [`encode`] made: the group, then the body.
pub fn decode<M: WireMessage>(kind: u8, body: &Bytes) -> Result<M, abcast_core::DecodeError> {
    if body.len() < 2 {
        return Err(abcast_core::DecodeError::Truncated { what: "sim group" });
    }
    let group = abcast_core::GroupId(u16::from_le_bytes([body[0], body[1]]));
    M::decode_in(group, kind, body.slice(2..))
}
