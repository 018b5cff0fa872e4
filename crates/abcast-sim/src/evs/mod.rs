//! The simulator for partitionable group communication: the token ring of seed 002 with
//! Totem's membership, held to Extended Virtual Synchrony ([`checker`]), not to one
//! sequence. One seed draws the fault plan of its mix and the ring's parameters; the
//! network loses, duplicates, delays (a heavy tail too) and partitions messages, cuts
//! links one way, crashes and restarts nodes (messages of an old life reach the next),
//! and freezes processes. Then the faults stop and the membership must settle: every node
//! in one ring within [`EvsConfig::settle_bound_us`].
//!
//! The **loss**, **partial** and **mixed** mixes also cut one member's *data lane* for a
//! while ([`FaultKind::DataLaneCut`]): the other members' data messages, joins and merge
//! announcements are lost on the way to it, its tokens and commit tokens arrive (seed 002
//! §III-E: two sockets), so it gets the token but none of the data.
//!
//! The **partial** and **mixed** mixes end their fault phase with a *remain* phase: one
//! link stays cut one way (a node can send to a neighbour but not hear it, corosync issue
//! 760), or one member's data lane stays cut, for [`EvsConfig::remain_us`] under
//! load, and in its last [`EvsConfig::remain_window_us`] no node may install more than
//! [`EvsConfig::remain_installs_max`] configurations (the membership must settle on the
//! fault, not flap), every node that lived through it must deliver something, and every
//! node with values proposed at it must have one acknowledged (a member that cannot
//! receive must not hold the others' discard point down: Totem's "failed to receive"
//! rule).
//!
//! Why a world of its own and not `sim/`'s: that one checks one sequence for every
//! learner, with durable stores, snapshots, reads and reconfiguration around it; a token
//! ring partitions by design and keeps nothing on disk. The network's faults are the same
//! kinds ([`FaultKind`]), drawn the same way, replayed the same way.

pub mod checker;
pub mod groups;
pub mod token;

pub use checker::EvsChecker;

use crate::FaultMix;
use crate::checker::{Failure, ViolationKind};
use crate::faults::{FaultCounts, FaultKind};
use crate::rng::SimRng;
use crate::sim::{Violation, decode, encode};
use abcast_core::config::StartInfo;
use abcast_core::groups::{GroupEvent, GroupLayer};
use abcast_core::mutation::Mutation;
use abcast_core::protocol::Ack;
use abcast_core::{
    Application, Carrier, ConfigChange, Delivery, DeliveryLevel, Event as CoreEvent, Install,
    Micros, NodeId, Outbox, ProposeError, Protocol, Skip,
};
use bytes::{Bytes, BytesMut};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::fmt;

/// One run of the EVS world.
#[derive(Clone, Debug)]
pub struct EvsConfig {
    pub seed: u64,
    pub mix: FaultMix,
    /// Nodes (ids 1..=n); 0: drawn from the seed, 3 to 5.
    pub nodes: usize,
    pub fault_phase_us: Micros,
    /// The one-way link's remain phase (partial and mixed mixes).
    pub remain_us: Micros,
    /// The most regular configurations a node may install in the last
    /// `remain_window_us` of the remain phase (settled: the changes died down); `None`:
    /// counted and reported, not enforced.
    pub remain_installs_max: Option<u64>,
    pub remain_window_us: Micros,
    /// Proposals per second, at random live nodes.
    pub rate_per_s: u32,
    /// Load goes on this long after the heal, then stops.
    pub heal_load_us: Micros,
    /// Every node in one ring, everything delivered, within this after the heal.
    pub settle_bound_us: Micros,
    /// Message kinds that also suffer `EvsPlan::token_loss_ppm` (the token's).
    pub token_kinds: Vec<u8>,
    pub event_budget: u64,
    pub verbose: bool,
    /// Also print every message a node takes (`ABCAST_SIM_VERBOSE=2`).
    pub verbose_messages: bool,
    /// The shell line's tail that replays a seed (`cargo test ...`), after the variables.
    pub replay_target: String,
    /// Extra variables for the replay line (a mutation).
    pub replay_env: String,
    /// Every node runs the process-group layer over its deliveries, and some proposals
    /// are group joins, leaves and messages (`groups.rs`).
    pub groups: bool,
    /// The group layer's broken variant (the mutation sweeps).
    pub group_mutation: Option<Mutation>,
}

impl EvsConfig {
    pub fn new(mix: FaultMix) -> EvsConfig {
        EvsConfig {
            seed: 0,
            mix,
            nodes: 0,
            fault_phase_us: 2_000_000,
            remain_us: 3_000_000,
            remain_installs_max: Some(2),
            remain_window_us: 1_000_000,
            rate_per_s: 800,
            heal_load_us: 300_000,
            settle_bound_us: 3_000_000,
            token_kinds: Vec::new(),
            event_budget: 20_000_000,
            verbose: false,
            verbose_messages: false,
            replay_target: "cargo test -p abcast-sim --test token replay -- --exact --nocapture"
                .into(),
            replay_env: String::new(),
            groups: true,
            group_mutation: None,
        }
    }

    pub fn replay_line(&self) -> String {
        format!(
            "ABCAST_SIM_SEED={} ABCAST_SIM_MIX={} ABCAST_SIM_NODES={}{} {}",
            self.seed, self.mix, self.nodes, self.replay_env, self.replay_target
        )
    }
}

/// Salt that keeps the ring-size draw apart from the fault plan's.
const NODES_SALT: u64 = 0x6E6F_6465_735F_7473;

/// The number of nodes of a seed (3 to 5) unless `cfg.nodes` fixes it.
pub fn nodes_for(cfg: &EvsConfig) -> usize {
    match cfg.nodes {
        0 => 3 + SimRng::new(cfg.seed ^ NODES_SALT).below(3) as usize,
        n => n,
    }
}

/// The mixes the EVS world runs.
pub const MIXES: [FaultMix; 7] = [
    FaultMix::None,
    FaultMix::Loss,
    FaultMix::Partition,
    FaultMix::Crash,
    FaultMix::Pause,
    FaultMix::PartialConnectivity,
    FaultMix::Mixed,
];

/// The faults one seed draws for its mix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvsPlan {
    pub nodes: usize,
    pub loss_ppm: u32,
    pub dup_ppm: u32,
    /// Extra loss of the token's messages.
    pub token_loss_ppm: u32,
    pub delay_us: (Micros, Micros),
    /// Messages held 0.3-3 s.
    pub long_delay_ppm: u32,
    /// A message to a node that restarted since (or is down) reaches its next life.
    pub cross_ppm: u32,
    pub partition_every_us: Option<(Micros, Micros)>,
    /// Partitions are one-way links only (the partial mix), or may include them.
    pub one_way_only: bool,
    pub crash_every_us: Option<(Micros, Micros)>,
    pub down_us: (Micros, Micros),
    pub pause_every_us: Option<(Micros, Micros)>,
    pub pause_us: (Micros, Micros),
    /// A one-way link stays cut for the remain phase.
    pub remain_one_way: bool,
    /// One member's data lane is cut this often during the fault phase, for this long.
    pub data_cut_every_us: Option<(Micros, Micros)>,
    pub data_cut_us: (Micros, Micros),
    /// One member's data lane stays cut for the remain phase.
    pub remain_data_cut: bool,
    /// A crash is armed instead of immediate: the node dies half-way through carrying
    /// out its next outbox with two messages or more, after a random prefix of them left
    /// (the guide's "crash half-way through one outbox"; `sim/faults.rs` for the others).
    pub partial_fanout_ppm: u32,
}

impl EvsPlan {
    pub fn draw(mix: FaultMix, nodes: usize, rng: &mut SimRng) -> EvsPlan {
        let mut p = EvsPlan {
            nodes,
            loss_ppm: 0,
            dup_ppm: 0,
            token_loss_ppm: 0,
            delay_us: (20, 300),
            long_delay_ppm: 0,
            cross_ppm: 0,
            partition_every_us: None,
            one_way_only: false,
            crash_every_us: None,
            down_us: (10_000, 600_000),
            pause_every_us: None,
            pause_us: (20_000, 800_000),
            remain_one_way: false,
            data_cut_every_us: None,
            data_cut_us: (50_000, 800_000),
            remain_data_cut: false,
            partial_fanout_ppm: 0,
        };
        let loss = |rng: &mut SimRng, max: u64| rng.between(0, max) as u32;
        match mix {
            FaultMix::Loss => {
                p.loss_ppm = loss(rng, 200_000);
                p.dup_ppm = loss(rng, 50_000);
                p.token_loss_ppm = loss(rng, 100_000);
                p.delay_us = (20, rng.between(300, 3_000));
                p.long_delay_ppm = loss(rng, 2_000);
                p.data_cut_every_us = Some((300_000, 1_500_000));
            }
            FaultMix::Partition => {
                p.loss_ppm = loss(rng, 20_000);
                p.partition_every_us = Some((100_000, 600_000));
            }
            FaultMix::Crash => {
                p.loss_ppm = loss(rng, 10_000);
                p.crash_every_us = Some((100_000, 800_000));
                p.cross_ppm = loss(rng, 300_000);
                p.long_delay_ppm = loss(rng, 1_000);
                p.partial_fanout_ppm = 300_000;
            }
            FaultMix::Pause => {
                p.loss_ppm = loss(rng, 10_000);
                p.pause_every_us = Some((100_000, 600_000));
            }
            FaultMix::PartialConnectivity => {
                p.loss_ppm = loss(rng, 10_000);
                p.partition_every_us = Some((200_000, 800_000));
                p.one_way_only = true;
                p.data_cut_every_us = Some((300_000, 1_500_000));
                // The remain phase keeps one fault: a one-way link, or a data lane cut.
                // (Both at once can make the membership flap past the remain bound: a
                // member whose data lane is cut is tried again at every merge period, and
                // each gather lets the one-way link split the ring again.)
                p.remain_data_cut = rng.chance_ppm(500_000);
                p.remain_one_way = !p.remain_data_cut;
            }
            FaultMix::Mixed => {
                p.loss_ppm = loss(rng, 50_000);
                p.dup_ppm = loss(rng, 20_000);
                p.token_loss_ppm = loss(rng, 30_000);
                p.delay_us = (20, rng.between(300, 2_000));
                p.long_delay_ppm = loss(rng, 1_000);
                p.cross_ppm = loss(rng, 200_000);
                p.partition_every_us = Some((200_000, 1_000_000));
                p.crash_every_us = Some((300_000, 1_500_000));
                p.pause_every_us = Some((300_000, 1_500_000));
                p.remain_one_way = rng.chance_ppm(500_000);
                p.partial_fanout_ppm = 300_000;
                p.data_cut_every_us = Some((300_000, 1_500_000));
                p.remain_data_cut = rng.chance_ppm(500_000) && !p.remain_one_way;
            }
            _ => {}
        }
        p
    }
}

/// What a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EvsReport {
    pub seed: u64,
    pub proposed: u64,
    pub busy: u64,
    pub acked: u64,
    pub deliveries: u64,
    pub safe_deliveries: u64,
    pub transitional_deliveries: u64,
    pub configs_installed: u64,
    pub messages_sent: u64,
    pub messages_dropped: u64,
    pub messages_duplicated: u64,
    pub messages_held_long: u64,
    pub crashes: u64,
    pub pauses: u64,
    pub partition_changes: u64,
    /// Installs by the busiest node during the one-way link's remain phase, and during
    /// its last `remain_window_us`.
    pub remain_installs_max: u64,
    pub remain_last_installs_max: u64,
    pub remain_runs: u64,
    /// Remain phases with a member's data lane cut throughout.
    pub remain_data_cut_runs: u64,
    /// Group views and group messages told, over every life.
    pub group_views: u64,
    pub group_messages: u64,
    /// From the heal until every node was in one ring with everything delivered.
    pub settle_us: Micros,
    pub events: u64,
    pub faults: FaultCounts,
    pub fingerprint: u64,
}

#[derive(Debug)]
enum Action {
    Msg(Box<Msg>),
    Tick {
        node: usize,
        epoch: u64,
    },
    Propose,
    Partition,
    Crash,
    Restart {
        node: usize,
    },
    Pause,
    Resume {
        node: usize,
    },
    /// One member's data lane is cut, until the `DataCutEnd` of the same number.
    DataCut,
    DataCutEnd {
        cut: u64,
    },
    FaultsEnd,
    /// The remain phase's last window begins: what each node delivered so far.
    RemainMark,
    Heal,
    Check,
}

#[derive(Debug)]
struct Msg {
    from: NodeId,
    from_incarnation: u64,
    to: usize,
    to_epoch: u64,
    kind: u8,
    body: Bytes,
}

struct Ev {
    at: Micros,
    seq: u64,
    action: Action,
}
impl PartialEq for Ev {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Ev {}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ev {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

struct Node<P> {
    id: NodeId,
    proto: Option<P>,
    incarnation: u64,
    epoch: u64,
    paused_until: Micros,
    /// Messages that came while the process was frozen.
    inbox: VecDeque<Msg>,
    /// Messages that came while it was down, for its next life.
    parked: Vec<Msg>,
    /// The process-group layer of this life, and the values it asked to broadcast that
    /// wait for room (`propose` said `Busy`).
    groups: GroupLayer,
    group_queue: VecDeque<Bytes>,
    /// Armed to crash half-way through its next outbox of two messages or more.
    armed: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Faults,
    Remain,
    Healed,
}

/// The share of proposals that are group operations, the groups and the member names per
/// node they draw from (few, so joins, leaves and messages meet).
const GROUP_OPS_PPM: u32 = 300_000;
const GROUPS: u64 = 3;
const MEMBERS: u64 = 3;

/// The last events, for a violation's report.
const TRACE_EVENTS: usize = 80;
const PARKED_MAX: usize = 2_000;
const INBOX_MAX: usize = 200_000;

struct World<'f, P: Protocol, F> {
    cfg: EvsConfig,
    plan: EvsPlan,
    factory: &'f F,
    rng: SimRng,
    now: Micros,
    queue: BinaryHeap<Reverse<Ev>>,
    next_seq: u64,
    nodes: Vec<Node<P>>,
    phase: Phase,
    side: Vec<u8>,
    one_way: HashSet<(NodeId, NodeId)>,
    /// The node whose data lane is cut now, and the number of that cut.
    data_cut: Option<usize>,
    data_cuts: u64,
    /// Per node: acknowledgements and values proposed (`propose` took), over its lives;
    /// and both when the remain phase's last window began.
    acks_by: Vec<u64>,
    proposed_by: Vec<u64>,
    remain_mark_acks: Vec<(u64, u64)>,
    checker: EvsChecker,
    group_checker: groups::GroupChecker,
    report: EvsReport,
    fault_end: Micros,
    heal_at: Option<Micros>,
    load_end: Micros,
    /// Regular configurations installed in the remain phase: node index, when.
    remain_log: Vec<(usize, Micros)>,
    /// Deliveries per node (its life then) when the remain phase's last window began.
    remain_mark: Vec<Option<(u64, usize)>>,
    next_value: u64,
    trace: VecDeque<String>,
    outbox: Outbox<P::Message>,
    fingerprint: u64,
    describe: Option<&'f dyn Fn(&P) -> String>,
}

/// The application the simulated nodes run: the checker sees everything through the
/// carrier, so it keeps nothing.
struct NullApp;

impl Application for NullApp {
    fn deliver(&mut self, _now: Micros, _d: &Delivery, _results: &mut Vec<Bytes>) {}
}

struct EvsCarrier<'a, 'f, P: Protocol, F> {
    w: &'a mut World<'f, P, F>,
    i: usize,
    app: NullApp,
}

impl<P, F> Carrier<P::Message> for EvsCarrier<'_, '_, P, F>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo) -> P,
{
    type App = NullApp;
    type Error = Failure;

    fn app(&mut self) -> &mut NullApp {
        &mut self.app
    }
    fn send(&mut self, to: NodeId, msg: P::Message) {
        let (kind, body) = encode(&msg);
        if let Some(t) = self.w.nodes.iter().position(|n| n.id == to) {
            self.w.transmit(self.i, t, kind, body);
        }
    }
    fn multicast(&mut self, msg: P::Message) {
        let (kind, body) = encode(&msg);
        for t in 0..self.w.nodes.len() {
            self.w.transmit(self.i, t, kind, body.clone());
        }
    }
    fn delivered(&mut self, _now: Micros, d: &Delivery, _results: &[Bytes]) -> Result<(), Failure> {
        let life = self.w.life(self.i);
        self.w.checker.delivered(life, d)?;
        if self.w.cfg.groups {
            let mut ev: Vec<GroupEvent> = Vec::new();
            self.w.nodes[self.i].groups.delivered(d, &mut ev);
            self.w.group_checker.events(life, &ev)?;
        }
        Ok(())
    }
    fn installed(&mut self, _now: Micros, _i: &Install) -> Result<(), Failure> {
        Err(Failure::new(
            ViolationKind::ConfigMismatch,
            "a snapshot install from a protocol that has none",
        ))
    }
    fn install_refused(&mut self, _now: Micros, _i: &Install, why: String) -> Failure {
        Failure::new(ViolationKind::ConfigMismatch, why)
    }
    fn skipped(&mut self, _now: Micros, _s: &Skip) -> Result<(), Failure> {
        Err(Failure::new(
            ViolationKind::ConfigMismatch,
            "a skip from a protocol that has none",
        ))
    }
    fn config_changed(&mut self, now: Micros, c: &ConfigChange) -> Result<(), Failure> {
        let life = self.w.life(self.i);
        if self.w.phase == Phase::Remain && c.kind == abcast_core::ConfigKind::Regular {
            self.w.remain_log.push((self.i, now));
        }
        self.w.note(format!(
            "{}#{} installs {:?} {} {:?}",
            life.0,
            life.1,
            c.kind,
            c.config.id,
            c.config.members.iter().map(|m| m.id).collect::<Vec<_>>()
        ));
        self.w.checker.config_changed(now, life, c)?;
        if self.w.cfg.groups {
            let mut ev: Vec<GroupEvent> = Vec::new();
            let node = &mut self.w.nodes[self.i];
            node.groups.config_changed(c, &mut ev);
            let values = node.groups.take_proposals();
            node.group_queue.extend(values);
            // What a transitional configuration tells belongs to it; what a regular one
            // tells (an exchange cut short, ended) to the configuration before it.
            if c.kind == abcast_core::ConfigKind::Transitional {
                self.w.group_checker.config_changed(life, c);
                self.w.group_checker.events(life, &ev)?;
            } else {
                self.w.group_checker.events(life, &ev)?;
                self.w.group_checker.config_changed(life, c);
            }
        }
        Ok(())
    }
    fn acked(&mut self, _now: Micros, a: &Ack) -> Result<(), Failure> {
        let life = self.w.life(self.i);
        self.w.acks_by[self.i] += u64::from(a.count);
        self.w.checker.acked(life, a)
    }
    fn event(&mut self, _now: Micros, _e: &CoreEvent) {}
}

type Res<T> = Result<T, Box<Violation>>;

impl<'f, P, F> World<'f, P, F>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo) -> P,
{
    fn life(&self, i: usize) -> (NodeId, u64) {
        (self.nodes[i].id, self.nodes[i].incarnation)
    }

    fn note(&mut self, line: String) {
        let line = format!("{:>10}us {line}", self.now);
        if self.cfg.verbose {
            eprintln!("{line}");
        }
        if self.trace.len() == TRACE_EVENTS {
            self.trace.pop_front();
        }
        self.trace.push_back(line);
    }

    fn violation(&self, f: Failure) -> Box<Violation> {
        let mut states = String::new();
        if let Some(d) = self.describe {
            for n in &self.nodes {
                if let Some(p) = &n.proto {
                    states.push_str(&format!("\n  state: {}", d(p)));
                }
            }
        }
        Box::new(Violation {
            kind: f.kind,
            seed: self.cfg.seed,
            mix: self.cfg.mix,
            at_us: self.now,
            node: f.node,
            incarnation: f.incarnation,
            instance: f.instance,
            value: f.value,
            detail: format!("{}\n  evs plan: {:?}{states}", f.detail, self.plan),
            replay: self.cfg.replay_line(),
            plan: None,
            trace_tail: self.trace.iter().cloned().collect(),
        })
    }

    fn schedule(&mut self, at: Micros, action: Action) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.queue.push(Reverse(Ev { at, seq, action }));
    }

    fn mix_in(&mut self, x: u64) {
        self.fingerprint = (self.fingerprint ^ x)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }

    fn cut(&self, from: NodeId, to: NodeId) -> bool {
        let side = |id: NodeId| {
            self.nodes
                .iter()
                .position(|n| n.id == id)
                .map_or(0, |i| self.side[i])
        };
        side(from) != side(to) || self.one_way.contains(&(from, to))
    }

    fn transmit(&mut self, from: usize, to: usize, kind: u8, body: Bytes) {
        self.report.messages_sent += 1;
        let (from_id, to_id) = (self.nodes[from].id, self.nodes[to].id);
        let msg = |body: Bytes, w: &Self| Msg {
            from: from_id,
            from_incarnation: w.nodes[from].incarnation,
            to,
            to_epoch: w.nodes[to].epoch,
            kind,
            body,
        };
        if from == to {
            let m = msg(body, self);
            self.schedule(self.now, Action::Msg(Box::new(m)));
            return;
        }
        let token = self.cfg.token_kinds.contains(&kind);
        if self.data_cut == Some(to) && !token {
            self.report.messages_dropped += 1;
            return;
        }
        if self.cut(from_id, to_id) {
            self.report.messages_dropped += 1;
            if token {
                self.report.faults.add(FaultKind::TokenLoss, 1);
            }
            return;
        }
        if self.phase == Phase::Faults
            && (self.rng.chance_ppm(self.plan.loss_ppm)
                || (token && self.rng.chance_ppm(self.plan.token_loss_ppm)))
        {
            self.report.messages_dropped += 1;
            if token {
                self.report.faults.add(FaultKind::TokenLoss, 1);
            }
            return;
        }
        let copies = if self.phase == Phase::Faults && self.rng.chance_ppm(self.plan.dup_ppm) {
            self.report.messages_duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut delay = self.rng.between(self.plan.delay_us.0, self.plan.delay_us.1);
            if self.phase == Phase::Faults && self.rng.chance_ppm(self.plan.long_delay_ppm) {
                delay = self.rng.between(300_000, 3_000_000);
                self.report.messages_held_long += 1;
            }
            let m = msg(body.clone(), self);
            self.schedule(self.now + delay, Action::Msg(Box::new(m)));
        }
    }

    /// One input to node `i`'s protocol, and its outbox carried out.
    fn call(
        &mut self,
        i: usize,
        input: impl FnOnce(&mut P, Micros, &mut Outbox<P::Message>),
    ) -> Res<()> {
        let mut out = std::mem::take(&mut self.outbox);
        out.clear();
        let now = self.now;
        let Some(p) = self.nodes[i].proto.as_mut() else {
            self.outbox = out;
            return Ok(());
        };
        if let Err(payload) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| input(p, now, &mut out)))
        {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            let mut f = Failure::new(ViolationKind::Panicked, format!("protocol panicked: {msg}"));
            f.node = Some(self.nodes[i].id);
            return Err(self.violation(f));
        }
        // An armed crash strikes in an outbox with two messages or more, unless the node
        // is the last one up (then it stays armed).
        let strike = self.nodes[i].armed
            && out.sends.len() + out.multicasts.len() >= 2
            && self.nodes.iter().filter(|n| n.proto.is_some()).count() > 1;
        if strike {
            self.cut_outbox(i, &mut out);
        }
        let r = abcast_core::carry_out(
            now,
            &mut out,
            &mut EvsCarrier {
                w: self,
                i,
                app: NullApp,
            },
        );
        out.clear();
        self.outbox = out;
        r.map_err(|f| self.violation(f))?;
        if strike {
            self.crash_node(i);
        }
        Ok(())
    }

    /// Node `i` dies half-way through carrying out `out`: a random prefix of its messages
    /// leaves (at least one, not all), in `carry_out`'s order (the first
    /// `multicasts_first` multicasts, the sends, the other multicasts); nothing after them
    /// is carried out (deliveries, configuration changes, acknowledgements).
    fn cut_outbox(&mut self, i: usize, out: &mut Outbox<P::Message>) {
        let first = out.multicasts_first.min(out.multicasts.len());
        let (sends, total) = (out.sends.len(), out.sends.len() + out.multicasts.len());
        debug_assert!(total >= 2);
        let k = self.rng.between(1, total as u64 - 1) as usize;
        if k <= first {
            out.multicasts.truncate(k);
            out.sends.clear();
            out.multicasts_first = k;
        } else if k <= first + sends {
            out.multicasts.truncate(first);
            out.sends.truncate(k - first);
        } else {
            out.multicasts.truncate(k - sends);
        }
        let left = out.sends.len() + out.multicasts.len();
        assert_eq!(left, k, "the cut keeps exactly the prefix drawn");
        // Nothing after the prefix is carried out: the rest of the outbox goes.
        let kept = (
            std::mem::take(&mut out.sends),
            std::mem::take(&mut out.multicasts),
            out.multicasts_first,
        );
        out.clear();
        (out.sends, out.multicasts, out.multicasts_first) = kept;
        self.report.faults.add(FaultKind::PartialFanout, 1);
        let id = self.nodes[i].id;
        self.note(format!(
            "{id} crashes half-way through an outbox: {k} of its {total} messages leave"
        ));
    }

    fn start_node(&mut self, i: usize, start: StartInfo) -> Res<()> {
        let id = self.nodes[i].id;
        let p = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (self.factory)(id, start)
        })) {
            Ok(p) => p,
            Err(_) => {
                return Err(self.violation(Failure::new(
                    ViolationKind::Panicked,
                    format!("the factory panicked for node {id}"),
                )));
            }
        };
        let mut layer = GroupLayer::new(id);
        if let Err(e) = layer.set_mutation(self.cfg.group_mutation) {
            return Err(self.violation(Failure::new(ViolationKind::BadConfig, e)));
        }
        let n = &mut self.nodes[i];
        n.proto = Some(p);
        n.incarnation = start.incarnation;
        n.epoch += 1;
        n.paused_until = 0;
        n.inbox.clear();
        // A new life knows no members: its clients join again.
        n.groups = layer;
        n.group_queue.clear();
        n.armed = false;
        self.checker.start((id, start.incarnation));
        self.note(format!("{id}#{} starts", start.incarnation));
        let epoch = self.nodes[i].epoch;
        let jitter = self.rng.between(0, 1_000);
        self.schedule(self.now + jitter, Action::Tick { node: i, epoch });
        let parked = std::mem::take(&mut self.nodes[i].parked);
        for mut m in parked {
            m.to_epoch = self.nodes[i].epoch;
            self.report.faults.add(FaultKind::CrossIncarnation, 1);
            self.schedule(self.now, Action::Msg(Box::new(m)));
        }
        Ok(())
    }

    fn live(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].proto.is_some() && self.now >= self.nodes[i].paused_until)
            .collect()
    }

    fn payload(&mut self) -> Bytes {
        self.next_value += 1;
        let n = self.next_value;
        let len = self.rng.between(8, 300) as usize;
        let mut b = BytesMut::with_capacity(len);
        b.extend_from_slice(&n.to_le_bytes());
        b.extend((8..len).map(|j| (n as u8).wrapping_mul(31).wrapping_add(j as u8)));
        b.freeze()
    }

    fn handle(&mut self, action: Action) -> Res<()> {
        match action {
            Action::Msg(m) => self.on_msg(*m),
            Action::Tick { node, epoch } => {
                if self.nodes[node].epoch != epoch || self.nodes[node].proto.is_none() {
                    return Ok(());
                }
                if self.now < self.nodes[node].paused_until {
                    let at = self.nodes[node].paused_until;
                    self.schedule(at, Action::Tick { node, epoch });
                    return Ok(());
                }
                let interval = self.nodes[node]
                    .proto
                    .as_ref()
                    .map_or(1_000, |p| p.tick_interval_us().max(50));
                let jitter = self.rng.between(0, interval / 10 + 1);
                self.schedule(self.now + interval + jitter, Action::Tick { node, epoch });
                self.call(node, |p, now, out| p.tick(now, out))
            }
            Action::Propose => {
                if self.now >= self.load_end {
                    return Ok(());
                }
                let mean = 1_000_000 / u64::from(self.cfg.rate_per_s.max(1));
                let gap = self.rng.between(1, 2 * mean);
                self.schedule(self.now + gap, Action::Propose);
                let live = self.live();
                let Some(&i) = self.rng.pick(&live) else {
                    return Ok(());
                };
                let mut payload = self.payload();
                let mut level = None;
                if self.cfg.groups && self.rng.chance_ppm(GROUP_OPS_PPM) {
                    match self.group_value(i, &payload) {
                        Some((v, l)) => {
                            payload = v;
                            level = l;
                        }
                        None => return Ok(()),
                    }
                }
                let life = self.life(i);
                let mut out = std::mem::take(&mut self.outbox);
                out.clear();
                let now = self.now;
                let r = match (self.nodes[i].proto.as_mut(), level) {
                    (Some(p), None) => p.propose(now, payload.clone(), &mut out),
                    (Some(p), Some(l)) => p.propose_at(now, payload.clone(), l, &mut out),
                    (None, _) => Err(ProposeError::Busy),
                };
                self.outbox = out;
                match r {
                    Ok(id) => {
                        self.mix_in(id.seq);
                        self.proposed_by[i] += 1;
                        self.checker
                            .propose(life, id, payload)
                            .map_err(|f| self.violation(f))?;
                    }
                    Err(_) => self.report.busy += 1,
                }
                // What `propose` put in the outbox (nothing, for a token ring) goes out.
                self.call(i, |_, _, _| {})
            }
            Action::Partition => {
                self.repartition();
                Ok(())
            }
            Action::Crash => {
                self.crash();
                Ok(())
            }
            Action::Restart { node } => {
                if self.nodes[node].proto.is_some() {
                    return Ok(());
                }
                let inc = self.nodes[node].incarnation + 1;
                let start = StartInfo::restart(inc, true).map_err(|e| {
                    self.violation(Failure::new(ViolationKind::BadConfig, e.to_string()))
                })?;
                self.start_node(node, start)
            }
            Action::Pause => {
                if let Some((lo, hi)) = self.plan.pause_every_us {
                    let at = self.now + self.rng.between(lo, hi);
                    if at < self.fault_end {
                        self.schedule(at, Action::Pause);
                    }
                }
                let live = self.live();
                let Some(&i) = self.rng.pick(&live) else {
                    return Ok(());
                };
                let len = self.rng.between(self.plan.pause_us.0, self.plan.pause_us.1);
                let until = (self.now + len).min(self.fault_end);
                self.nodes[i].paused_until = until;
                self.report.pauses += 1;
                self.report.faults.add(FaultKind::Pause, 1);
                let id = self.nodes[i].id;
                self.note(format!("{id} frozen for {} us", until - self.now));
                self.schedule(until, Action::Resume { node: i });
                Ok(())
            }
            Action::Resume { node } => {
                if self.now < self.nodes[node].paused_until {
                    return Ok(());
                }
                let inbox = std::mem::take(&mut self.nodes[node].inbox);
                for m in inbox {
                    self.on_msg(m)?;
                }
                Ok(())
            }
            Action::DataCut => {
                if self.phase != Phase::Faults || self.now >= self.fault_end {
                    return Ok(());
                }
                if let Some((lo, hi)) = self.plan.data_cut_every_us {
                    let at = self.now + self.rng.between(lo, hi);
                    if at < self.fault_end {
                        self.schedule(at, Action::DataCut);
                    }
                }
                let z = self.rng.below(self.nodes.len() as u64) as usize;
                let len = self
                    .rng
                    .between(self.plan.data_cut_us.0, self.plan.data_cut_us.1);
                self.cut_data_lane(z);
                let cut = self.data_cuts;
                self.schedule(
                    (self.now + len).min(self.fault_end),
                    Action::DataCutEnd { cut },
                );
                Ok(())
            }
            Action::DataCutEnd { cut } => {
                if cut == self.data_cuts && self.phase == Phase::Faults {
                    self.data_cut = None;
                    self.note("data lane restored".into());
                }
                Ok(())
            }
            Action::FaultsEnd => {
                self.side.iter_mut().for_each(|s| *s = 0);
                self.one_way.clear();
                self.data_cut = None;
                let remain = self.plan.remain_one_way || self.plan.remain_data_cut;
                if remain && self.nodes.len() >= 2 {
                    self.phase = Phase::Remain;
                    if self.plan.remain_one_way {
                        // x hears nobody from y, y hears x: x can send to y but not hear it.
                        let x = self.rng.below(self.nodes.len() as u64) as usize;
                        let mut y = self.rng.below(self.nodes.len() as u64 - 1) as usize;
                        if y >= x {
                            y += 1;
                        }
                        let (xi, yi) = (self.nodes[x].id, self.nodes[y].id);
                        self.one_way.insert((yi, xi));
                        self.note(format!("remain: {yi} -> {xi} cut one way"));
                    }
                    if self.plan.remain_data_cut {
                        let z = self.rng.below(self.nodes.len() as u64) as usize;
                        self.cut_data_lane(z);
                        self.report.remain_data_cut_runs = 1;
                    }
                    self.report.remain_runs = 1;
                    self.report.faults.add(FaultKind::FaultsRemain, 1);
                    for i in 0..self.nodes.len() {
                        if self.nodes[i].proto.is_none() {
                            self.schedule(self.now, Action::Restart { node: i });
                        }
                    }
                    let end = self.now + self.cfg.remain_us;
                    self.schedule(
                        end.saturating_sub(self.cfg.remain_window_us),
                        Action::RemainMark,
                    );
                    self.schedule(end, Action::Heal);
                } else {
                    self.schedule(self.now, Action::Heal);
                }
                Ok(())
            }
            Action::RemainMark => {
                self.remain_mark_acks = (0..self.nodes.len())
                    .map(|i| (self.acks_by[i], self.proposed_by[i]))
                    .collect();
                self.remain_mark = (0..self.nodes.len())
                    .map(|i| {
                        let n = &self.nodes[i];
                        n.proto
                            .as_ref()
                            .map(|_| (n.incarnation, self.checker.delivered_by(n.id)))
                    })
                    .collect();
                Ok(())
            }
            Action::Heal => {
                if self.phase == Phase::Remain {
                    self.acks_went_on()?;
                    // Ordering goes on meanwhile: every node that lived through the last
                    // window delivered something in it (load reaches every node).
                    for (i, mark) in self.remain_mark.clone().into_iter().enumerate() {
                        let n = &self.nodes[i];
                        if let Some((inc, before)) = mark
                            && n.proto.is_some()
                            && n.incarnation == inc
                            && self.checker.delivered_by(n.id) == before
                        {
                            let mut f = Failure::new(
                                ViolationKind::MembershipUnsettled,
                                format!(
                                    "with {}, node {} delivered nothing in the last {} ms of the \
                                     remain phase ({before} delivered before)",
                                    self.remain_faults(),
                                    n.id,
                                    self.cfg.remain_window_us / 1000
                                ),
                            );
                            f.node = Some(n.id);
                            return Err(self.violation(f));
                        }
                    }
                    let since = self.now.saturating_sub(self.cfg.remain_window_us);
                    let count = |k: usize, from: Micros| {
                        self.remain_log
                            .iter()
                            .filter(|(i, at)| *i == k && *at >= from)
                            .count() as u64
                    };
                    let n = self.nodes.len();
                    let worst = (0..n).map(|k| count(k, 0)).max().unwrap_or(0);
                    let last = (0..n).map(|k| count(k, since)).max().unwrap_or(0);
                    self.report.remain_installs_max = worst;
                    self.report.remain_last_installs_max = last;
                    if let Some(max) = self.cfg.remain_installs_max
                        && last > max
                    {
                        let f = Failure::new(
                            ViolationKind::MembershipUnsettled,
                            format!(
                                "with {} for {} ms, a node installed {last} configurations in \
                                 the last {} ms ({worst} in all; at most {max} allowed at the \
                                 end): the membership flaps",
                                self.remain_faults(),
                                self.cfg.remain_us / 1000,
                                self.cfg.remain_window_us / 1000,
                            ),
                        );
                        return Err(self.violation(f));
                    }
                }
                self.phase = Phase::Healed;
                self.one_way.clear();
                self.data_cut = None;
                self.heal_at = Some(self.now);
                self.load_end = self.now + self.cfg.heal_load_us;
                self.note("healed".into());
                for i in 0..self.nodes.len() {
                    self.nodes[i].paused_until = 0;
                    if self.nodes[i].proto.is_none() {
                        self.schedule(self.now, Action::Restart { node: i });
                    } else if !self.nodes[i].inbox.is_empty() {
                        self.schedule(self.now, Action::Resume { node: i });
                    }
                }
                self.schedule(self.load_end, Action::Check);
                Ok(())
            }
            Action::Check => {
                let heal = self.heal_at.unwrap_or(self.now);
                let groups = self.groups_settled();
                if self.checker.settled() && groups.is_ok() {
                    self.report.settle_us = self.now - heal;
                    self.queue.clear();
                    return Ok(());
                }
                if self.now > heal + self.cfg.settle_bound_us
                    && self.checker.settled()
                    && let Err(why) = groups
                {
                    let detail = format!(
                        "the groups did not settle {} ms after the heal: {why}",
                        self.cfg.settle_bound_us / 1000
                    );
                    return Err(
                        self.violation(Failure::new(ViolationKind::GroupsUnsettled, detail))
                    );
                }
                if self.now > heal + self.cfg.settle_bound_us {
                    let detail = format!(
                        "not settled {} ms after the heal; per node (installs, last install us, \
                         delivered): {:?}",
                        self.cfg.settle_bound_us / 1000,
                        self.checker
                            .installs()
                            .iter()
                            .map(|(n, k, t)| (*n, *k, *t, self.checker.delivered_by(*n)))
                            .collect::<Vec<_>>()
                    );
                    return Err(
                        self.violation(Failure::new(ViolationKind::MembershipUnsettled, detail))
                    );
                }
                self.schedule(self.now + 20_000, Action::Check);
                Ok(())
            }
        }
    }

    /// The data lane into node `z` is cut from now on (until the next cut, the end of the
    /// fault phase, or the heal).
    fn cut_data_lane(&mut self, z: usize) {
        self.data_cut = Some(z);
        self.data_cuts += 1;
        self.report.faults.add(FaultKind::DataLaneCut, 1);
        let id = self.nodes[z].id;
        self.note(format!("data lane into {id} cut"));
    }

    /// At the end of a remain phase: every node that lived through its last window with
    /// values proposed at it in that window had one acknowledged in it. A member that
    /// gets the token but not the data (its data lane cut) holds the token's aru, and
    /// every member's discard point with it, down until it is removed.
    fn acks_went_on(&self) -> Res<()> {
        for (i, mark) in self.remain_mark.iter().enumerate() {
            let n = &self.nodes[i];
            let (Some((inc, _)), Some(&(acks, proposed))) = (mark, self.remain_mark_acks.get(i))
            else {
                continue;
            };
            if n.proto.is_none() || n.incarnation != *inc {
                continue;
            }
            let proposed_now = self.proposed_by[i] - proposed;
            if proposed_now > 0 && self.acks_by[i] == acks {
                let mut f = Failure::new(
                    ViolationKind::AcksStalled,
                    format!(
                        "in the last {} ms of the remain phase ({}), node {} acknowledged none                          of the {proposed_now} values proposed at it",
                        self.cfg.remain_window_us / 1000,
                        self.remain_faults(),
                        n.id
                    ),
                );
                f.node = Some(n.id);
                return Err(self.violation(f));
            }
        }
        Ok(())
    }

    /// The faults that stay in the remain phase, in words.
    fn remain_faults(&self) -> String {
        let mut v: Vec<String> = self
            .one_way
            .iter()
            .map(|(a, b)| format!("{a} -> {b} cut one way"))
            .collect();
        if let Some(z) = self.data_cut {
            v.push(format!("the data lane into {} cut", self.nodes[z].id));
        }
        v.join(", ")
    }

    /// A client's group operation at node `i`: a join, a leave of one of its members, or a
    /// message (with `payload`, whose first bytes make it unique) to a group, from one of
    /// its members or from a non-member; with a service for a message.
    fn group_value(&mut self, i: usize, payload: &Bytes) -> Option<(Bytes, Option<DeliveryLevel>)> {
        let group = format!("g{}", self.rng.below(GROUPS));
        let member = format!("m{}", self.rng.below(MEMBERS));
        let layer = &self.nodes[i].groups;
        let roll = self.rng.below(10);
        if roll < 4 {
            return layer.join_value(&group, &member).ok().map(|v| (v, None));
        }
        if roll < 6 {
            let mine: Vec<(String, String)> = layer.mine().iter().cloned().collect();
            let (g, m) = self.rng.pick(&mine)?.clone();
            return self.nodes[i]
                .groups
                .leave_value(&g, &m)
                .ok()
                .map(|v| (v, None));
        }
        let members: Vec<String> = layer
            .mine()
            .iter()
            .filter(|(g, _)| *g == group)
            .map(|(_, m)| m.clone())
            .collect();
        let sender = if self.rng.chance_ppm(700_000) {
            self.rng.pick(&members).cloned().unwrap_or_default()
        } else {
            String::new()
        };
        let level = if self.rng.chance_ppm(300_000) {
            DeliveryLevel::Safe
        } else {
            DeliveryLevel::Agreed
        };
        // Sometimes several messages in one value (the client port packs a frame's).
        let v = if self.rng.chance_ppm(300_000) {
            let parts = [payload.clone(), payload.slice(..8), Bytes::new()];
            self.nodes[i]
                .groups
                .messages_value(&group, &sender, &parts)
                .ok()?
        } else {
            self.nodes[i]
                .groups
                .message_value(&group, &sender, payload)
                .ok()?
        };
        Some((v, Some(level)))
    }

    /// Proposes the values the group layers asked for (each node's state after a regular
    /// configuration), in order, as far as each protocol takes them.
    fn flush_group_queues(&mut self) -> Res<()> {
        for i in 0..self.nodes.len() {
            if self.nodes[i].group_queue.is_empty() || self.nodes[i].proto.is_none() {
                continue;
            }
            let life = self.life(i);
            let now = self.now;
            let mut out = std::mem::take(&mut self.outbox);
            out.clear();
            let mut taken = Vec::new();
            let n = &mut self.nodes[i];
            if let Some(p) = n.proto.as_mut() {
                while let Some(v) = n.group_queue.front() {
                    match p.propose(now, v.clone(), &mut out) {
                        Ok(id) => {
                            taken.push((id, v.clone()));
                            n.group_queue.pop_front();
                        }
                        Err(_) => break,
                    }
                }
            }
            self.outbox = out;
            for (id, v) in taken {
                self.mix_in(id.seq);
                self.proposed_by[i] += 1;
                self.checker
                    .propose(life, id, v)
                    .map_err(|f| self.violation(f))?;
            }
            self.call(i, |_, _, _| {})?;
        }
        Ok(())
    }

    /// The live nodes' groups settled (`groups::GroupChecker::settled`), or why not.
    fn groups_settled(&self) -> Result<(), String> {
        if !self.cfg.groups {
            return Ok(());
        }
        if let Some(n) = self
            .nodes
            .iter()
            .find(|n| n.proto.is_some() && !n.group_queue.is_empty())
        {
            return Err(format!("node {} has group values waiting for room", n.id));
        }
        let live: Vec<((NodeId, u64), &GroupLayer)> = self
            .nodes
            .iter()
            .filter(|n| n.proto.is_some())
            .map(|n| ((n.id, n.incarnation), &n.groups))
            .collect();
        self.group_checker.settled(&live)
    }

    fn on_msg(&mut self, m: Msg) -> Res<()> {
        let i = m.to;
        if self.nodes[i].proto.is_none() {
            if self.nodes[i].parked.len() < PARKED_MAX && self.rng.chance_ppm(self.plan.cross_ppm) {
                self.nodes[i].parked.push(m);
            }
            return Ok(());
        }
        if m.to_epoch != self.nodes[i].epoch {
            // Addressed to an earlier life of the node (or a life frozen since).
            if !self.rng.chance_ppm(self.plan.cross_ppm) {
                return Ok(());
            }
            self.report.faults.add(FaultKind::CrossIncarnation, 1);
        }
        if self.now < self.nodes[i].paused_until {
            if self.nodes[i].inbox.len() < INBOX_MAX {
                let mut m = m;
                m.to_epoch = self.nodes[i].epoch;
                self.nodes[i].inbox.push_back(m);
            }
            return Ok(());
        }
        if m.from_incarnation
            != self
                .nodes
                .iter()
                .find(|n| n.id == m.from)
                .map_or(0, |n| n.incarnation)
        {
            self.report.faults.add(FaultKind::CrossIncarnation, 1);
        }
        let msg: P::Message = decode(m.kind, &m.body).map_err(|e| {
            self.violation(Failure::new(
                ViolationKind::Decode,
                format!("kind {} from {}: {e}", m.kind, m.from),
            ))
        })?;
        let (kind, body) = encode(&msg);
        if kind != m.kind || body != m.body {
            return Err(self.violation(Failure::new(
                ViolationKind::CodecMismatch,
                format!("kind {} from {} re-encodes to other bytes", m.kind, m.from),
            )));
        }
        self.mix_in(u64::from(m.from.0) ^ (u64::from(m.kind) << 32) ^ self.now);
        let from = m.from;
        if self.cfg.verbose_messages {
            eprintln!("{:>10}us {from} -> {}: {msg:?}", self.now, self.nodes[i].id);
        }
        self.call(i, |p, now, out| p.receive(now, from, msg, out))
    }

    fn repartition(&mut self) {
        let Some((lo, hi)) = self.plan.partition_every_us else {
            return;
        };
        let at = self.now + self.rng.between(lo, hi);
        if at < self.fault_end {
            self.schedule(at, Action::Partition);
        }
        self.report.partition_changes += 1;
        let n = self.nodes.len();
        self.side.iter_mut().for_each(|s| *s = 0);
        self.one_way.clear();
        // A third of the changes heal everything for a while.
        if self.rng.below(3) == 0 {
            self.note("partition: healed".into());
            return;
        }
        if !self.plan.one_way_only {
            let sides = if n >= 4 { 2 + self.rng.below(2) } else { 2 };
            for s in self.side.iter_mut() {
                *s = self.rng.below(sides) as u8;
            }
            if self.side.iter().all(|s| *s == self.side[0]) {
                self.side[0] ^= 1;
            }
        }
        if self.plan.one_way_only || self.rng.chance_ppm(300_000) {
            self.report.faults.add(FaultKind::PartialConnectivity, 1);
            for _ in 0..1 + self.rng.below(2) {
                let a = self.rng.below(n as u64) as usize;
                let b = self.rng.below(n as u64) as usize;
                if a != b {
                    let (a, b) = (self.nodes[a].id, self.nodes[b].id);
                    self.one_way.insert((a, b));
                }
            }
        }
        let sides = self.side.clone();
        let ow: Vec<_> = self.one_way.iter().copied().collect();
        self.note(format!("partition: sides {sides:?}, one-way cuts {ow:?}"));
    }

    fn crash(&mut self) {
        if let Some((lo, hi)) = self.plan.crash_every_us {
            let at = self.now + self.rng.between(lo, hi);
            if at < self.fault_end {
                self.schedule(at, Action::Crash);
            }
        }
        let up: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].proto.is_some())
            .collect();
        if up.len() <= 1 {
            return;
        }
        let Some(&i) = self.rng.pick(&up) else {
            return;
        };
        if self.plan.partial_fanout_ppm > 0 && self.rng.chance_ppm(self.plan.partial_fanout_ppm) {
            if !self.nodes[i].armed {
                self.nodes[i].armed = true;
                let id = self.nodes[i].id;
                self.note(format!("{id} armed to crash half-way through an outbox"));
            }
            return;
        }
        self.crash_node(i);
    }

    /// Node `i` crashes now; its restart is scheduled while faults last. The last node up
    /// stays up (an armed crash that would take it is dropped).
    fn crash_node(&mut self, i: usize) {
        self.nodes[i].armed = false;
        if self.nodes[i].proto.is_none() {
            return;
        }
        let up = (0..self.nodes.len())
            .filter(|&j| self.nodes[j].proto.is_some())
            .count();
        if up <= 1 {
            return;
        }
        let life = self.life(i);
        self.checker.crash(life);
        let n = &mut self.nodes[i];
        n.proto = None;
        n.epoch += 1;
        n.inbox.clear();
        n.paused_until = 0;
        n.group_queue.clear();
        self.report.crashes += 1;
        self.note(format!("{}#{} crashes", life.0, life.1));
        let down = self.rng.between(self.plan.down_us.0, self.plan.down_us.1);
        if self.now + down < self.fault_end {
            self.schedule(self.now + down, Action::Restart { node: i });
        }
    }

    fn run(mut self) -> Res<EvsReport> {
        for i in 0..self.nodes.len() {
            self.start_node(i, StartInfo::FRESH)?;
        }
        let first = self.rng.between(0, 5_000);
        self.schedule(first, Action::Propose);
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
        if let Some((lo, hi)) = self.plan.data_cut_every_us {
            let at = self.rng.between(lo, hi);
            self.schedule(at, Action::DataCut);
        }
        self.schedule(self.fault_end, Action::FaultsEnd);
        while let Some(Reverse(ev)) = self.queue.pop() {
            self.now = ev.at;
            self.report.events += 1;
            if self.report.events > self.cfg.event_budget {
                let f = Failure::new(
                    ViolationKind::EventBudget,
                    format!("{} events: a message storm?", self.cfg.event_budget),
                );
                return Err(self.violation(f));
            }
            self.handle(ev.action)?;
            if self.cfg.groups {
                self.flush_group_queues()?;
            }
        }
        if self.heal_at.is_none() || !self.checker.settled() {
            return Err(self.violation(Failure::new(
                ViolationKind::MembershipUnsettled,
                "the run ended without settling",
            )));
        }
        self.checker.end().map_err(|f| self.violation(f))?;
        if self.checker.acked == 0 {
            return Err(self.violation(Failure::new(
                ViolationKind::NothingAcked,
                "no value was acknowledged in the whole run",
            )));
        }
        let c = &self.checker;
        let r = &mut self.report;
        r.seed = self.cfg.seed;
        r.proposed = c.proposed;
        r.acked = c.acked;
        r.deliveries = c.deliveries;
        r.safe_deliveries = c.safe_deliveries;
        r.transitional_deliveries = c.transitional_deliveries;
        r.configs_installed = c.configs_installed;
        r.group_views = self.group_checker.views;
        r.group_messages = self.group_checker.messages;
        r.fingerprint = self.fingerprint ^ r.events ^ (r.deliveries << 20);
        Ok(self.report)
    }
}

/// Runs one seed of `cfg`; the factory builds a node's protocol at each (re)start.
pub fn run<P, F>(cfg: &EvsConfig, factory: &F) -> Result<EvsReport, Box<Violation>>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo) -> P,
{
    run_described(cfg, factory, None)
}

/// [`run`], and a violation's report shows each live node's state as `describe` puts it.
pub fn run_described<'f, P, F>(
    cfg: &EvsConfig,
    factory: &'f F,
    describe: Option<&'f dyn Fn(&P) -> String>,
) -> Result<EvsReport, Box<Violation>>
where
    P: Protocol,
    F: Fn(NodeId, StartInfo) -> P,
{
    let mut rng = SimRng::new(cfg.seed);
    let n = nodes_for(cfg);
    let plan = EvsPlan::draw(cfg.mix, n, &mut rng);
    let mut cfg = cfg.clone();
    cfg.nodes = n;
    let nodes = (1..=n as u32)
        .map(|id| Node {
            id: NodeId(id),
            proto: None,
            incarnation: 0,
            epoch: 0,
            paused_until: 0,
            inbox: VecDeque::new(),
            parked: Vec::new(),
            groups: GroupLayer::new(NodeId(id)),
            group_queue: VecDeque::new(),
            armed: false,
        })
        .collect();
    let fault_end = cfg.fault_phase_us;
    let w = World {
        plan,
        factory,
        rng,
        now: 0,
        queue: BinaryHeap::new(),
        next_seq: 0,
        nodes,
        phase: Phase::Faults,
        side: vec![0; n],
        one_way: HashSet::new(),
        data_cut: None,
        data_cuts: 0,
        acks_by: vec![0; n],
        proposed_by: vec![0; n],
        remain_mark_acks: Vec::new(),
        checker: EvsChecker::new(),
        group_checker: groups::GroupChecker::default(),
        report: EvsReport::default(),
        fault_end,
        heal_at: None,
        load_end: Micros::MAX,
        remain_log: Vec::new(),
        remain_mark: Vec::new(),
        next_value: 0,
        trace: VecDeque::new(),
        outbox: Outbox::new(),
        fingerprint: cfg.seed,
        describe,
        cfg,
    };
    w.run()
}

/// Many seeds of one mix; every violation is printed with its replay line.
pub struct EvsSweep {
    pub runs: u64,
    pub violations: Vec<Violation>,
    pub totals: EvsReport,
    pub settle_us_max: Micros,
    pub settle_seed: u64,
}

impl fmt::Display for EvsSweep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.totals;
        write!(
            f,
            "{} seeds, {} violations; proposed {}, acked {}, delivered {} ({} Safe, {} in \
             transitional configurations), {} configurations installed, {} crashes, {} pauses, \
             {} partition changes, {} messages held long; settle max {} ms (seed {}); remain \
             runs {} ({} with a data lane cut) with at most {} installs, {} in the last window; \
             {} group views, {} group messages; faults {:?}",
            self.runs,
            self.violations.len(),
            t.proposed,
            t.acked,
            t.deliveries,
            t.safe_deliveries,
            t.transitional_deliveries,
            t.configs_installed,
            t.crashes,
            t.pauses,
            t.partition_changes,
            t.messages_held_long,
            self.settle_us_max / 1000,
            self.settle_seed,
            t.remain_runs,
            t.remain_data_cut_runs,
            t.remain_installs_max,
            t.remain_last_installs_max,
            t.group_views,
            t.group_messages,
            t.faults
        )
    }
}

impl EvsSweep {
    pub fn new() -> EvsSweep {
        EvsSweep {
            runs: 0,
            violations: Vec::new(),
            totals: EvsReport::default(),
            settle_us_max: 0,
            settle_seed: 0,
        }
    }

    pub fn add(&mut self, r: Result<EvsReport, Box<Violation>>) {
        self.runs += 1;
        match r {
            Ok(r) => {
                let t = &mut self.totals;
                t.proposed += r.proposed;
                t.busy += r.busy;
                t.acked += r.acked;
                t.deliveries += r.deliveries;
                t.safe_deliveries += r.safe_deliveries;
                t.transitional_deliveries += r.transitional_deliveries;
                t.configs_installed += r.configs_installed;
                t.messages_sent += r.messages_sent;
                t.messages_dropped += r.messages_dropped;
                t.messages_duplicated += r.messages_duplicated;
                t.messages_held_long += r.messages_held_long;
                t.crashes += r.crashes;
                t.pauses += r.pauses;
                t.partition_changes += r.partition_changes;
                t.remain_runs += r.remain_runs;
                t.remain_data_cut_runs += r.remain_data_cut_runs;
                t.group_views += r.group_views;
                t.group_messages += r.group_messages;
                t.remain_installs_max = t.remain_installs_max.max(r.remain_installs_max);
                t.remain_last_installs_max =
                    t.remain_last_installs_max.max(r.remain_last_installs_max);
                t.events += r.events;
                t.faults.merge(&r.faults);
                if r.settle_us > self.settle_us_max {
                    self.settle_us_max = r.settle_us;
                    self.settle_seed = r.seed;
                }
            }
            Err(v) => self.violations.push(*v),
        }
    }

    pub fn merge(&mut self, o: EvsSweep) {
        let runs = self.runs + o.runs;
        let (max, seed) = if o.settle_us_max > self.settle_us_max {
            (o.settle_us_max, o.settle_seed)
        } else {
            (self.settle_us_max, self.settle_seed)
        };
        let t = &mut self.totals;
        let r = o.totals;
        t.proposed += r.proposed;
        t.busy += r.busy;
        t.acked += r.acked;
        t.deliveries += r.deliveries;
        t.safe_deliveries += r.safe_deliveries;
        t.transitional_deliveries += r.transitional_deliveries;
        t.configs_installed += r.configs_installed;
        t.messages_sent += r.messages_sent;
        t.messages_dropped += r.messages_dropped;
        t.messages_duplicated += r.messages_duplicated;
        t.messages_held_long += r.messages_held_long;
        t.crashes += r.crashes;
        t.pauses += r.pauses;
        t.partition_changes += r.partition_changes;
        t.remain_runs += r.remain_runs;
        t.remain_data_cut_runs += r.remain_data_cut_runs;
        t.group_views += r.group_views;
        t.group_messages += r.group_messages;
        t.remain_installs_max = t.remain_installs_max.max(r.remain_installs_max);
        t.remain_last_installs_max = t.remain_last_installs_max.max(r.remain_last_installs_max);
        t.events += r.events;
        t.faults.merge(&r.faults);
        self.violations.extend(o.violations);
        self.runs = runs;
        self.settle_us_max = max;
        self.settle_seed = seed;
    }
}

impl Default for EvsSweep {
    fn default() -> Self {
        EvsSweep::new()
    }
}

/// Runs `seeds` of `base`'s mix (side by side, [`crate::sweep::for_seeds`]; the totals add
/// up in seed order); prints each violation.
pub fn run_seeds<P, F>(
    base: &EvsConfig,
    seeds: std::ops::Range<u64>,
    factory_for: impl Fn(&EvsConfig) -> F + Sync,
) -> EvsSweep
where
    P: Protocol,
    F: Fn(NodeId, StartInfo) -> P,
{
    let mut s = EvsSweep::new();
    for (_, r) in crate::sweep::for_seeds(seeds, false, |seed| {
        let mut cfg = base.clone();
        cfg.seed = seed;
        let factory = factory_for(&cfg);
        run(&cfg, &factory)
    }) {
        if let Err(v) = &r {
            eprintln!("{v}");
        }
        s.add(r);
    }
    s
}
