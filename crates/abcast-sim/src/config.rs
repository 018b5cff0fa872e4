//! What one simulated run is: the cluster, the seed, the fault mix, the phases and the
//! workload, plus the replay line that reproduces a run from the shell.

use abcast_core::{Micros, NodeId};
use std::fmt;
use std::str::FromStr;

/// The preset families of faults a run draws from. The seed then draws the concrete
/// parameters (loss rate, which links, which node, when) inside the family; see
/// [`crate::FaultPlan::draw`] for the exact ranges, and [`crate::FaultKind`] for the faults
/// each family can produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultMix {
    /// No faults: only the base network's delay jitter (which already reorders).
    None,
    /// Message loss 0-30 % per seed, duplication 0-5 %, wide delay jitter (reordering), and
    /// a heavy tail: a few messages held 0.5-5 s, past several failure timeouts.
    Loss,
    /// Random partitions, one-way ones included, changing every 50-400 ms; then up to f
    /// acceptors stay cut off while the connected majority must converge; then healed.
    Partition,
    /// Crash and restart of any node (the coordinator half of the time), never more than
    /// f acceptors down or amnesic at once; messages addressed to a node's earlier life
    /// reach its next one; crashes half-way through one outbox; then up to f acceptors stay
    /// down or cut off while the connected majority must converge.
    Crash,
    /// The lowest-id node starts only after the others have decided values (and may crash
    /// half-way through its first takeover).
    LateJoin,
    /// Moderate loss and duplication, partitions, crashes, pauses, and a late join in half
    /// the seeds; then up to f acceptors stay faulty while the majority must converge.
    Mixed,
    /// Processes frozen for 0.5-5 s (SIGSTOP, a long GC pause, a VM stall): no ticks, no
    /// receives, then they resume with their timers overdue and their inbox full; with
    /// crashes and amnesic restarts meanwhile, so a coordinator frozen through a takeover
    /// resumes as a ghost of an older ballot.
    Pause,
    /// The crash mix, plus one correlated power loss: every acceptor's machine crashes at
    /// the same instant, one of them in the middle of a group commit (for durable, synced
    /// stores: a protocol's suite runs this mix on such stores).
    PowerLoss,
    /// Crashes and partitions long enough for learners to fall behind the acceptors'
    /// in-memory windows (a protocol's suite runs this mix with small windows and no
    /// snapshots), so learners skip instances trimmed everywhere.
    LearnerSkip,
    /// Membership changes under load and faults: the cluster has spare nodes outside the
    /// first configuration ([`SimConfig::initial_members`]), and the plan asks the leader
    /// for a sequence of reconfigurations (add a node, remove a follower, replace a
    /// follower, replace the leader) at random times, with loss, duplication, reordering,
    /// partitions that drop sessions (`Protocol::peer_unreachable` / `peer_reconnected`),
    /// and crashes of any node at any step, also right after `reconfigure` said `Ok`. Only
    /// for protocols that reconfigure (`suites::Proto::supports_reconfig`); not in
    /// [`FaultMix::ALL`].
    Reconfig,
    /// Partial connectivity (OmniPaxos EuroSys'23 §2; openraft issue 2080): after a warm-up
    /// under load, one to three *episodes*, one after another without a heal between
    /// them, each holding one shape still for a while under load: the **quorum-loss**
    /// scenario (every link down but those of one hub node; the leader is not the hub),
    /// the **constrained election** (the same with the old leader isolated, after the hub
    /// was cut off inbound long enough for its log to fall behind), the **chained** scenario (the link between the
    /// leader and one other node down both ways), the **openraft 2080** shape (the old
    /// leader reaches only a bridge node, which reaches two others that reach each other;
    /// the rest isolated), or **random one-way links** (each directed link down with a
    /// drawn chance, and in half the seeds the leader deaf or mute). Node roles are drawn
    /// per episode (the leader is the current one three times in four). No loss, crash or
    /// heavy tail: connectivity is the fault. Then the full heal.
    ///
    /// A protocol that claims to survive partial connectivity
    /// ([`SimConfig::partial_bound_us`]: Sequence Paxos with its Ballot Leader Election)
    /// is held to it during each episode in which some node is reachable both ways by a
    /// majority: within the bound of the episode's start, a node so reachable leads and a
    /// value proposed since the start is delivered at a majority, and again within every
    /// bound after that until the episode ends ([`crate::ViolationKind::PartialConnectivityStall`]).
    /// The others (Raft, the ring protocols) are held to safety, and to liveness after the
    /// heal only. Raft with pre-vote and check-quorum does not survive the constrained
    /// election: no leader until the heal (the hub is refused by the up-to-date check, the
    /// others reach only the hub); it recovers from quorum loss and from the openraft 2080
    /// shape (check-quorum deposes the old leader) in one to three election timeouts, and
    /// never loses its leader in the chained one (pre-vote), though the cut-off end waits
    /// until the heal (`testdata/scenarios/raft/*.txt`, docs/testing.md).
    PartialConnectivity,
}

impl FaultMix {
    /// Every preset, for sweeps.
    pub const ALL: [FaultMix; 10] = [
        FaultMix::None,
        FaultMix::Loss,
        FaultMix::Partition,
        FaultMix::Crash,
        FaultMix::LateJoin,
        FaultMix::Mixed,
        FaultMix::Pause,
        FaultMix::PowerLoss,
        FaultMix::LearnerSkip,
        FaultMix::PartialConnectivity,
    ];

    /// Every mix, [`FaultMix::Reconfig`] included (names, parsing).
    pub const EVERY: [FaultMix; 11] = [
        FaultMix::None,
        FaultMix::Loss,
        FaultMix::Partition,
        FaultMix::Crash,
        FaultMix::LateJoin,
        FaultMix::Mixed,
        FaultMix::Pause,
        FaultMix::PowerLoss,
        FaultMix::LearnerSkip,
        FaultMix::Reconfig,
        FaultMix::PartialConnectivity,
    ];

    /// The name used in `ABCAST_SIM_MIX` and in replay lines.
    pub fn name(self) -> &'static str {
        match self {
            FaultMix::None => "none",
            FaultMix::Loss => "loss",
            FaultMix::Partition => "partition",
            FaultMix::Crash => "crash",
            FaultMix::LateJoin => "late_join",
            FaultMix::Mixed => "mixed",
            FaultMix::Pause => "pause",
            FaultMix::PowerLoss => "power_loss",
            FaultMix::LearnerSkip => "learner_skip",
            FaultMix::Reconfig => "reconfig",
            FaultMix::PartialConnectivity => "partial",
        }
    }
}

impl fmt::Display for FaultMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultMix {
    type Err = String;
    fn from_str(s: &str) -> Result<FaultMix, String> {
        FaultMix::EVERY
            .iter()
            .copied()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| {
                let names: Vec<&str> = FaultMix::EVERY.iter().map(|m| m.name()).collect();
                format!(
                    "unknown fault mix {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// What a crash does to the crashed node's simulated disk (see `abcast_core::storage::MemDir`
/// and [`crate::run_with_disk`]). The in-memory state of the process is always lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CrashModel {
    /// The process dies, the machine does not: everything written to the disk stays, synced
    /// or not (it was in the OS's hands). Crashes come between events, as without disks.
    #[default]
    Process,
    /// The machine loses power: synced bytes stay, unsynced bytes are lost except a random
    /// prefix per file (a torn write), in which one byte may be flipped; files created since
    /// the last directory sync vanish and files removed since then come back. A share of
    /// these crashes hits a node in the middle of a group commit (the write reached the OS,
    /// the fdatasync never returned). The seed draws the rates ([`crate::plan::DiskPlan`]).
    Machine,
    /// Each crash is a process or a machine crash, half and half; here too a share hits in
    /// the middle of a group commit, so a process can die with its last write unsynced in
    /// the OS's cache, for a later machine crash to tear.
    Mixed,
}

impl CrashModel {
    pub const ALL: [CrashModel; 3] = [CrashModel::Process, CrashModel::Machine, CrashModel::Mixed];

    /// The name used in `ABCAST_SIM_CRASH` and in replay lines.
    pub fn name(self) -> &'static str {
        match self {
            CrashModel::Process => "process",
            CrashModel::Machine => "machine",
            CrashModel::Mixed => "mixed",
        }
    }
}

impl fmt::Display for CrashModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CrashModel {
    type Err = String;
    fn from_str(s: &str) -> Result<CrashModel, String> {
        CrashModel::ALL
            .iter()
            .copied()
            .find(|m| m.name() == s.trim())
            .ok_or_else(|| format!("unknown crash model {s:?}; expected process, machine or mixed"))
    }
}

/// Where the replay line points: the cargo package and integration-test target that hold a
/// test named `replay` calling [`crate::replay_from_env`], and an optional scenario name the
/// test can use to pick among several base configurations or factories.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayTarget {
    pub package: String,
    pub test: String,
    pub scenario: String,
}

impl Default for ReplayTarget {
    fn default() -> Self {
        ReplayTarget {
            package: "abcast-sim".into(),
            test: "sim".into(),
            scenario: String::new(),
        }
    }
}

/// One run's configuration. Build it with [`SimConfig::new`] and adjust fields; every field
/// is public so a protocol's test can tune the schedule to its timeouts.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The nodes, in ring order (the factory is called with these ids).
    pub nodes: Vec<NodeId>,
    /// The nodes whose failures count against f = (acceptors - 1) / 2 in the crash mixes.
    pub acceptors: Vec<NodeId>,
    /// The nodes whose deliveries must converge (every node delivers; only these are
    /// required to have delivered everything at the end).
    pub learners: Vec<NodeId>,
    /// The members of the first configuration, if not every node: the others are *spares*
    /// (the `reconfig` mix). **Construction contract:** the factory builds every node, a
    /// spare too, with this list as its first configuration (a protocol's voters / members);
    /// a spare is started like any node at t = 0 and must wait, delivering nothing, voting
    /// for nobody, campaigning for nothing, until a configuration that names it reaches it
    /// (Raft: `RaftConfig::new(members, &[])` for every node, see `suites::raft_factory`).
    /// The simulator holds only the current configuration's members to liveness; clients
    /// propose only to them. `None`: every node is a member of a configuration that never
    /// changes.
    pub initial_members: Option<Vec<NodeId>>,
    /// Linearizable reads issued per second of virtual time, over all nodes (0: none). Each
    /// read goes to a random live node through `Protocol::read_index`, moves on to the hinted
    /// leader on `NotLeader` and to another node on `Busy`, and is checked when answered
    /// ([`crate::ViolationKind::StaleRead`]). A protocol that answers `Unsupported` gets no
    /// more reads in the run.
    pub reads_per_s: u32,
    /// Nodes the crash mixes never crash (for a protocol that does not yet survive some
    /// crash; empty by default: everybody, the coordinator included, can crash).
    pub crash_exempt: Vec<NodeId>,
    pub seed: u64,
    pub mix: FaultMix,
    /// Length of the fault phase, from t = 0 to the heal.
    pub fault_phase_us: Micros,
    /// After the heal, clients keep proposing this long, so that values proposed on a healed
    /// system are checked for validity too.
    pub heal_load_us: Micros,
    /// Every live learner must have delivered everything required within this long after
    /// the heal, or the run fails with a liveness violation.
    pub converge_bound_us: Micros,
    /// The *faults remain* phase (mixes that plan it, see [`crate::FaultPlan::faults_remain`]):
    /// after the fault phase up to f acceptors stay down or cut off, everything else heals,
    /// clients keep proposing to the connected nodes for `heal_load_us`, and the connected
    /// learners must then converge within this bound (values of the faulty nodes' own
    /// proposers excepted, unless acknowledged). A protocol's suite sets it to a few of its
    /// failure timeouts; it is the tight liveness bound, where `converge_bound_us` is the
    /// loose one after the full heal.
    pub faults_remain_bound_us: Micros,
    /// The partial-connectivity mix's liveness bound, for a protocol that claims to elect a
    /// leader reachable by a majority in each of its shapes (see
    /// [`FaultMix::PartialConnectivity`]); `None` (the default): the mix checks safety,
    /// and liveness after the heal only.
    pub partial_bound_us: Option<Micros>,
    /// The run fails ([`crate::ViolationKind::NothingAcked`]) if no value was acknowledged:
    /// a sweep whose protocol never decides anything would otherwise pass every safety
    /// check. On for every protocol suite; off for probes that propose nothing.
    pub require_acks: bool,
    /// The run fails ([`crate::ViolationKind::TooBusy`]) if `propose` answered `Busy` more
    /// often than this (each refusal is retried after `busy_retry_us`). `None`: no bound.
    pub busy_rejections_max: Option<u64>,
    /// Chance per seed, in the crash and mixed mixes, of one correlated power loss (see
    /// [`FaultMix::PowerLoss`], which always has one). For durable, synced stores only: an
    /// in-memory acceptor forgets everything, so a power loss of every acceptor at once
    /// loses acknowledged values by design. 0 by default.
    pub power_loss_ppm: u32,
    /// After convergence the run continues this long with the checkers on, to catch a late
    /// duplicate or a conflicting delivery.
    pub settle_us: Micros,
    /// Client proposals per second of virtual time, over all nodes.
    pub rate_per_s: u32,
    /// Payload size range of ordinary values (at least 8 bytes: the unique client number).
    pub value_bytes_min: usize,
    pub value_bytes_max: usize,
    /// Share of values, in parts per million, that are large (`large_value_bytes`), so the
    /// codec's zero-copy chunks are exercised.
    pub large_value_ppm: u32,
    pub large_value_bytes: usize,
    /// A proposal refused with `Busy` is offered again (at a random live node) after this long.
    pub busy_retry_us: Micros,
    /// Deliver each directed link's messages in send order (TCP-like). Off by default: the
    /// delay jitter reorders, as the brief of the network model asks.
    pub fifo_links: bool,
    /// Whether a node receives its own `multicasts` (IP_MULTICAST_LOOP defaults to on).
    pub multicast_loopback: bool,
    /// An application per node beside the simulator's own (which keeps the digest the
    /// checkers compare): it sees every delivery, install, skip and configuration change
    /// through the same carry-out as the runtime's (a test compares the two).
    pub observer: Option<Observer>,
    /// A node that starts fresh (incarnation 0, not amnesic), including a late joiner, must
    /// deliver the common sequence from its first instance. Off: it may start anywhere, like
    /// an amnesic restart.
    pub fresh_learners_deliver_all: bool,
    /// How many trace events a violation report shows.
    pub trace_tail_events: usize,
    /// Print every event as it happens (the replay mode).
    pub verbose: bool,
    /// Crashes at fixed times, on top of the fault mix (a scenario test's "the coordinator
    /// of ring 2 crashes at 0.6 s and restarts 0.3 s later"): `(node, at_us, down_us)`. The
    /// node restarts amnesic, like any crash of the mixes; f is not checked.
    pub scheduled_crashes: Vec<(NodeId, Micros, Micros)>,
    /// What a crash does to the node's disk. Matters only for factories that keep their
    /// store on the disk the simulator gives them ([`crate::run_with_disk`]).
    pub crash_model: CrashModel,
    /// The factory keeps its stores on the simulator's disks, and the run draws the disk
    /// faults of issue 33 ([`crate::plan::DiskPlan`]): a disk that fails a write or an
    /// fdatasync under a running node (`disk_error`), a restart on an empty directory
    /// (`wiped_dir`), and machine crashes aimed at a group commit that leaves a new file's
    /// name not durable (`torn_unsynced`; every machine crash keeps never-synced files
    /// torn anyway, with or without this). Off by default: the runs of the other mixes are
    /// unchanged (the faults come from a random stream of their own).
    pub disk_faults: bool,
    /// Every learner takes a snapshot this often (0: never): its application state (a
    /// digest of its sequence, checked against the common sequence) plus the protocol's
    /// learner state. The snapshot survives the node's crashes (a node writes it whole,
    /// atomically), a restarted learner starts from it, and a learner behind the trim
    /// point installs a peer's. For protocols that take snapshots (U-Ring Paxos).
    pub snapshot_interval_us: Micros,
    /// The driver's pipelined group commit (the runtime's sync thread): a group commit's
    /// fdatasync completes this long after it began, drawn in the range (one in twenty
    /// stalls for up to 50 times its upper bound, as real disks do), while the node goes
    /// on; what it produces meanwhile waits behind it. `None`: syncs complete at once, in
    /// place (the runtime's `sync_thread = false`).
    pub sync_delay_us: Option<(Micros, Micros)>,
    /// With `sync_delay_us`: sync jobs in flight at once, at most (the runtime's
    /// `SYNC_JOBS_IN_FLIGHT_MAX`); a node's next group begins its sync while up to this
    /// many older ones run, in order. 0: one to three, by seed (`1 + seed % 3`).
    pub sync_jobs_max: usize,
    /// The transport's frame limit: a message whose body is larger is never delivered (the
    /// runtime refuses to send a frame over its limit and goes on with the next), so a
    /// protocol that sends one loses it for good rather than by chance. A protocol must
    /// stay safe when that happens (liveness is its own business: it must keep its
    /// messages below the limit). `None`: no limit.
    pub max_message_bytes: Option<usize>,
    /// Upper bound of events processed in one run; exceeding it is a liveness violation
    /// (a message storm or a zero-delay loop).
    pub event_budget: u64,
    pub replay: ReplayTarget,
}

impl SimConfig {
    /// `node_count` nodes with ids `0 .. node_count`, all acceptors and learners, and
    /// defaults sized so 200 seeds of a small protocol run in seconds: a 2 s fault phase,
    /// 0.5 s of load after the heal, a 20 s convergence bound, 1000 values/s.
    pub fn new(node_count: u32, seed: u64, mix: FaultMix) -> SimConfig {
        let nodes: Vec<NodeId> = (0..node_count).map(NodeId).collect();
        SimConfig {
            acceptors: nodes.clone(),
            learners: nodes.clone(),
            nodes,
            crash_exempt: Vec::new(),
            initial_members: None,
            reads_per_s: 0,
            seed,
            mix,
            fault_phase_us: 2_000_000,
            heal_load_us: 500_000,
            converge_bound_us: 20_000_000,
            faults_remain_bound_us: 1_500_000,
            partial_bound_us: None,
            require_acks: false,
            busy_rejections_max: None,
            power_loss_ppm: 0,
            settle_us: 100_000,
            rate_per_s: 1000,
            value_bytes_min: 8,
            value_bytes_max: 64,
            large_value_ppm: 10_000,
            large_value_bytes: 3000,
            busy_retry_us: 5_000,
            fifo_links: false,
            multicast_loopback: true,
            observer: None,
            fresh_learners_deliver_all: true,
            trace_tail_events: 60,
            verbose: false,
            scheduled_crashes: Vec::new(),
            crash_model: CrashModel::Process,
            disk_faults: false,
            snapshot_interval_us: 0,
            sync_delay_us: None,
            sync_jobs_max: 0,
            max_message_bytes: None,
            event_budget: 20_000_000,
            replay: ReplayTarget::default(),
        }
    }

    /// Sync jobs in flight at once, at most (see `sync_jobs_max`).
    pub fn sync_jobs_limit(&self) -> usize {
        match self.sync_jobs_max {
            0 => 1 + (self.seed % 3) as usize,
            n => n,
        }
    }

    /// The same configuration with another seed and mix.
    pub fn with_run(&self, seed: u64, mix: FaultMix) -> SimConfig {
        SimConfig {
            seed,
            mix,
            ..self.clone()
        }
    }

    /// Sets the replay target (package, integration test file, scenario).
    pub fn replay_target(mut self, package: &str, test: &str, scenario: &str) -> SimConfig {
        self.replay = ReplayTarget {
            package: package.into(),
            test: test.into(),
            scenario: scenario.into(),
        };
        self
    }

    /// f: how many acceptors may be down or amnesic at once.
    pub fn max_faulty_acceptors(&self) -> usize {
        self.acceptors.len().saturating_sub(1) / 2
    }

    /// Whether `node` is a member of the first configuration ([`SimConfig::initial_members`]).
    pub fn is_initial_member(&self, node: NodeId) -> bool {
        self.initial_members
            .as_ref()
            .is_none_or(|m| m.contains(&node))
    }

    /// The members of the first configuration.
    pub fn initial_member_ids(&self) -> Vec<NodeId> {
        match &self.initial_members {
            Some(m) => m.clone(),
            None => self.nodes.clone(),
        }
    }

    /// The shell command that replays this run with a verbose trace. It carries the fields a
    /// sweep varies (seed, mix, node count, fault phase, rate, crash model unless it is the
    /// default `process`, scenario); the rest comes from the base configuration in the
    /// target's `replay` test.
    pub fn replay_line(&self) -> String {
        let mut line = format!(
            "ABCAST_SIM_SEED={} ABCAST_SIM_MIX={} ABCAST_SIM_NODES={} ABCAST_SIM_FAULT_US={} ABCAST_SIM_RATE={}",
            self.seed,
            self.mix,
            self.nodes.len(),
            self.fault_phase_us,
            self.rate_per_s
        );
        if self.crash_model != CrashModel::Process {
            line.push_str(&format!(" ABCAST_SIM_CRASH={}", self.crash_model));
        }
        if !self.replay.scenario.is_empty() {
            line.push_str(&format!(" ABCAST_SIM_SCENARIO={}", self.replay.scenario));
        }
        line.push_str(&format!(
            " cargo test -p {} --test {} replay -- --exact --nocapture",
            self.replay.package, self.replay.test
        ));
        line
    }

    /// Applies the replay environment (`ABCAST_SIM_SEED`, required; `ABCAST_SIM_MIX`,
    /// `ABCAST_SIM_NODES`, `ABCAST_SIM_FAULT_US`, `ABCAST_SIM_RATE`, `ABCAST_SIM_CRASH`,
    /// `ABCAST_SIM_SCENARIO`, `ABCAST_SIM_VERBOSE=0|1`, default 1) to `base`. `Ok(None)` when no seed is set.
    pub fn from_env(base: &SimConfig) -> Result<Option<SimConfig>, String> {
        Self::from_vars(base, |k| std::env::var(k).ok())
    }

    /// [`SimConfig::from_env`] with the variables given by a function (testable).
    pub fn from_vars(
        base: &SimConfig,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<SimConfig>, String> {
        fn num(name: &str, v: &str) -> Result<u64, String> {
            v.trim()
                .parse::<u64>()
                .map_err(|e| format!("{name}={v:?}: {e}"))
        }
        let Some(seed) = var("ABCAST_SIM_SEED") else {
            return Ok(None);
        };
        let mut cfg = base.clone();
        cfg.seed = num("ABCAST_SIM_SEED", &seed)?;
        cfg.verbose = true;
        if let Some(m) = var("ABCAST_SIM_MIX") {
            cfg.mix = m.parse()?;
        }
        if let Some(n) = var("ABCAST_SIM_NODES") {
            let n = num("ABCAST_SIM_NODES", &n)?;
            if n == 0 || n > 64 {
                return Err(format!("ABCAST_SIM_NODES={n}: expected 1..=64"));
            }
            if n as usize != cfg.nodes.len() {
                let nodes: Vec<NodeId> = (0..n as u32).map(NodeId).collect();
                cfg.acceptors = nodes.clone();
                cfg.learners = nodes.clone();
                cfg.crash_exempt.retain(|x| nodes.contains(x));
                cfg.nodes = nodes;
            }
        }
        if let Some(v) = var("ABCAST_SIM_FAULT_US") {
            cfg.fault_phase_us = num("ABCAST_SIM_FAULT_US", &v)?;
        }
        if let Some(v) = var("ABCAST_SIM_RATE") {
            let rate = num("ABCAST_SIM_RATE", &v)?;
            cfg.rate_per_s =
                u32::try_from(rate).map_err(|_| format!("ABCAST_SIM_RATE={rate}: too large"))?;
        }
        if let Some(c) = var("ABCAST_SIM_CRASH") {
            cfg.crash_model = c.parse()?;
        }
        if let Some(s) = var("ABCAST_SIM_SCENARIO") {
            cfg.replay.scenario = s;
        }
        if let Some(v) = var("ABCAST_SIM_VERBOSE") {
            cfg.verbose = v.trim() != "0";
        }
        Ok(Some(cfg))
    }

    /// Checks the configuration's own consistency (not the protocol's).
    pub fn validate(&self) -> Result<(), String> {
        if self.nodes.is_empty() {
            return Err("nodes: empty".into());
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if self.nodes[..i].contains(n) {
                return Err(format!("nodes: {n} appears twice"));
            }
        }
        if let Some((x, _, _)) = self
            .scheduled_crashes
            .iter()
            .find(|(x, _, _)| !self.nodes.contains(x))
        {
            return Err(format!("scheduled_crashes: {x} is not in nodes"));
        }
        if let Some(m) = &self.initial_members {
            if m.is_empty() {
                return Err("initial_members: empty".into());
            }
            if let Some(x) = m.iter().find(|x| !self.nodes.contains(x)) {
                return Err(format!("initial_members: {x} is not in nodes"));
            }
        }
        for (field, list) in [
            ("acceptors", &self.acceptors),
            ("learners", &self.learners),
            ("crash_exempt", &self.crash_exempt),
        ] {
            if let Some(x) = list.iter().find(|x| !self.nodes.contains(x)) {
                return Err(format!("{field}: {x} is not in nodes"));
            }
        }
        if self.value_bytes_min < 8 || self.value_bytes_max < self.value_bytes_min {
            return Err("value_bytes_min must be >= 8 and <= value_bytes_max".into());
        }
        if self.large_value_bytes < 8 {
            return Err("large_value_bytes must be >= 8".into());
        }
        if self.converge_bound_us == 0 || self.faults_remain_bound_us == 0 {
            return Err("converge_bound_us and faults_remain_bound_us must be > 0".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_names_round_trip() {
        for m in FaultMix::EVERY {
            assert_eq!(m.name().parse::<FaultMix>(), Ok(m));
        }
        assert!("nope".parse::<FaultMix>().is_err());
        for c in CrashModel::ALL {
            assert_eq!(c.name().parse::<CrashModel>(), Ok(c));
        }
        assert!("power".parse::<CrashModel>().is_err());
    }

    #[test]
    fn replay_line_round_trips_through_the_environment() {
        let base = SimConfig::new(3, 0, FaultMix::None).replay_target("abcast-sim", "toy", "");
        let mut run = base.with_run(1234, FaultMix::Crash);
        run.nodes = (0..5).map(NodeId).collect();
        run.fault_phase_us = 777;
        run.crash_model = CrashModel::Machine;
        let line = run.replay_line();
        assert!(
            line.ends_with("cargo test -p abcast-sim --test toy replay -- --exact --nocapture"),
            "{line}"
        );
        let vars: Vec<(String, String)> = line
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let got = SimConfig::from_vars(&base, |k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
        .expect("parses")
        .expect("seed set");
        assert_eq!(got.seed, 1234);
        assert_eq!(got.mix, FaultMix::Crash);
        assert_eq!(got.nodes.len(), 5);
        assert_eq!(got.acceptors.len(), 5);
        assert_eq!(got.fault_phase_us, 777);
        assert_eq!(got.crash_model, CrashModel::Machine);
        assert!(got.verbose);
        assert!(
            !base.replay_line().contains("ABCAST_SIM_CRASH"),
            "the default crash model is left out"
        );
        assert_eq!(
            SimConfig::from_vars(&base, |_| None)
                .expect("ok")
                .map(|c| c.seed),
            None
        );
    }
}

/// Builds a node's observing application (see [`SimConfig::observer`]).
#[derive(Clone)]
pub struct Observer(
    pub std::sync::Arc<dyn Fn(NodeId) -> Box<dyn abcast_core::Application + Send> + Send + Sync>,
);

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer(..)")
    }
}
