//! A local cluster of real `abcast node` processes, driven and measured from outside: the
//! runner under `abcast demo` and every `abcast bench`.
//!
//! A run measures exactly what a person sees in the demo: separate OS processes talking TCP
//! over loopback, each with its own load generator, observed only through the stats lines of
//! docs/CONTRACTS.md. Nothing here reaches into a node's memory, so a bug in a node cannot be
//! hidden by the harness.
//!
//! Timeline of one run ([`run_cluster`]): write the config (`config.rs`), spawn the nodes
//! (`process.rs`), read their stdout while the load runs (with `kill`, kill -9 and restart a
//! follower at 1/3 and the coordinator at 2/3), stop the load and wait until the learners
//! agree, SIGTERM every node, wait a bounded time for each node's `final` line, then read
//! the delivery logs. [`crate::analysis`] turns the records into figures and verdicts.

mod config;
pub mod nemesis;
mod process;

pub use config::{protocol_edits, set_toml_key, storage_edits};

use crate::error::{HarnessError, runtime};
use crate::format::group;
use abcast_node::stats::{self, LineKind, StatsLine};
use config::{TempDir, cluster_config};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use process::{Cluster, Event, Slot, log_tail};
use std::fs;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Largest cluster: the largest ring (abcast-core `MAX_RING_MEMBERS`).
pub const NODES_MAX: u32 = 64;
/// Stats period asked of every node: four samples a second give a readable timeline and a
/// throughput estimate without flooding the parent.
pub const STATS_MS: u64 = 250;
/// Longest wait, after the load stops, for every learner to report the same count.
const QUIESCE_MAX: Duration = Duration::from_secs(20);
/// The counts must stay equal this long (a few stats intervals) to count as caught up.
const QUIESCE_STABLE: Duration = Duration::from_millis(600);

/// How long a node may take, after SIGTERM, to drain and print its `final` line.
pub const STOP_GRACE: Duration = Duration::from_secs(15);
/// How long a killed node stays down before its restart.
pub const DOWN_TIME: Duration = Duration::from_secs(1);
/// With `--kill` two nodes are killed one after the other and each stays down for
/// [`DOWN_TIME`]: shorter runs would overlap the outages and lose the majority.
pub const KILL_DURATION_MIN_S: f64 = 6.0;
/// If no node has printed a single stats line by then, something is wrong at start-up.
const FIRST_LINE_TIMEOUT: Duration = Duration::from_secs(15);
/// Lines of a node's log quoted in an error.
pub(crate) const LOG_TAIL_LINES: usize = 8;

/// Everything one cluster run needs; `abcast bench` builds these directly.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub nodes: u32,
    pub value_size_bytes: u64,
    pub duration_s: f64,
    /// Offered load in values/s over all nodes; 0 = unlimited.
    pub rate_values_per_s: u64,
    /// Each load generator's window (`--load-window`); `None` = the node's default.
    pub window_values: Option<u64>,
    pub kill: bool,
    /// Edits to the generated TOML config, as (dotted key, value), e.g.
    /// ("transport.buffer_size", 2097152).
    pub config_edits: Vec<(String, toml::Value)>,
    pub keep_dir: bool,
    /// Show a progress bar on stderr (only drawn when stderr is a terminal).
    pub progress: bool,
    /// Short text in front of the progress bar.
    pub label: String,
    /// The program to run as `PROGRAM node ...`; `None` = this executable.
    pub program: Option<PathBuf>,
    /// Per-node offered load in values/s (0 = unlimited), replacing the even split of
    /// `rate_values_per_s`; nodes not listed run no load generator. `None` = every node.
    pub load_rates: Option<Vec<(u32, u64)>>,
    /// Learners deliver different sets (Multi-Ring learners of different rings, nodes that
    /// learn nothing): after the stop, wait until every node's count stops moving instead
    /// of until all counts are equal.
    pub learners_differ: bool,
    /// Where each node runs, by id: empty = every node on 127.0.0.1 in the caller's network
    /// namespace; else one entry per node (an emulated LAN, `bench::lan`), whose address
    /// replaces 127.0.0.1 in the node's `addr` and `client_addr`.
    pub placement: Vec<NodePlace>,
    /// Every node's load generator proposes only while its node leads (`--load-at-leader`,
    /// leader-based protocols): the load of one client talking to the leader.
    pub load_at_leader: bool,
    /// Every node stamps its values with their propose time and measures the latency of
    /// every value it delivers (`abcast node --load-stamp`): latency at every receiver, not
    /// only at the proposer (`lat_all_*` in the stats lines).
    pub stamp_values: bool,
}

/// A node's own network namespace and its address there.
#[derive(Debug, Clone)]
pub struct NodePlace {
    pub netns_path: PathBuf,
    pub addr: std::net::Ipv4Addr,
}

impl ClusterSpec {
    /// Checks the combination of flags; each error names the flag to change.
    pub fn validate(&self) -> Result<(), HarnessError> {
        let usage = |m: String| Err(HarnessError::Usage(m));
        if self.nodes == 0 || self.nodes > NODES_MAX {
            return usage(format!(
                "--nodes {} must be between 1 and {NODES_MAX}",
                self.nodes
            ));
        }
        if self.value_size_bytes == 0 {
            return usage("--value-size must be at least 1 byte".to_string());
        }
        if !self.duration_s.is_finite() || self.duration_s <= 0.0 || self.duration_s > 86_400.0 {
            return usage(format!(
                "--duration {} must be positive and at most a day",
                self.duration_s
            ));
        }
        if !self.placement.is_empty() && self.placement.len() != self.nodes as usize {
            return usage(format!(
                "{} node places for {} nodes: give one per node or none",
                self.placement.len(),
                self.nodes
            ));
        }
        if self.kill && self.nodes < 3 {
            return usage(format!(
                "--kill needs --nodes 3 or more (got {}), so a majority survives each kill",
                self.nodes
            ));
        }
        if self.kill && self.duration_s < KILL_DURATION_MIN_S {
            return usage(format!(
                "--kill needs --duration {KILL_DURATION_MIN_S} or more (got {}), so the two \
                 outages do not overlap",
                self.duration_s
            ));
        }
        Ok(())
    }
}

/// How an incarnation of a node ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Still running when the record was taken (never after [`run_cluster`] returns).
    Running,
    /// Exited with status 0 after printing its `final` line.
    Clean,
    /// Killed with SIGKILL by `--kill`, as planned.
    KilledByDemo,
    /// Did not exit within [`STOP_GRACE`] after SIGTERM, and was killed.
    KilledAfterTimeout,
    /// Exited on its own, not as planned: the status and the tail of its log.
    Unexpected { status: String, log_tail: String },
}

/// One stats line and when the parent received it (seconds since the cluster started).
#[derive(Debug, Clone)]
pub struct Sample {
    pub at_s: f64,
    pub line: StatsLine,
    /// Latency of the proposals delivered since the incarnation's previous line.
    pub interval_latency: Option<stats::IntervalLatency>,
}

/// One life of one node process, from spawn to exit.
#[derive(Debug, Clone)]
pub struct Incarnation {
    pub spawned_at_s: f64,
    pub ended_at_s: Option<f64>,
    pub ended: Ended,
    /// Every line received; `lat_hist` is kept only on the last one (it covers the whole
    /// incarnation, and older copies would only cost memory).
    pub samples: Vec<Sample>,
    pub bad_lines: u64,
    pub first_bad_line: Option<String>,
}

impl Incarnation {
    pub fn last(&self) -> Option<&StatsLine> {
        self.samples.last().map(|s| &s.line)
    }
    pub fn final_seen(&self) -> bool {
        self.samples.iter().any(|s| s.line.kind == LineKind::Final)
    }
}

#[derive(Debug, Clone)]
pub struct NodeRecord {
    pub id: u32,
    pub incarnations: Vec<Incarnation>,
}

/// A planned kill (and restart) in `--kill` mode.
#[derive(Debug, Clone)]
pub struct KillEvent {
    pub at_s: f64,
    pub node: u32,
    /// "follower" or "coordinator".
    pub role: String,
    pub restarted_at_s: Option<f64>,
    pub note: String,
    /// The restarted life said it was amnesic (memory storage), and when its stats first
    /// said it was repaired, seconds since the start ([`repairs`]).
    pub amnesic: bool,
    pub repaired_at_s: Option<f64>,
}

/// How long `--kill` waits for a restarted node's repair before its next kill: a
/// majority must count again before another node goes down (issue 33: a 3-node cluster on
/// memory storage survives one kill after another as long as no two nodes are down or
/// unrepaired at once, as a careful operator's rolling restart would).
pub const REPAIR_WAIT_MAX: Duration = Duration::from_secs(15);

/// Fills in each kill's `amnesic` and `repaired_at_s` from the restarted life's stats.
fn repairs(kills: &mut [KillEvent], slots: &[process::Slot]) {
    for k in kills.iter_mut() {
        let Some(back) = k.restarted_at_s else {
            continue;
        };
        let Some(slot) = slots.iter().find(|s| s.id == k.node) else {
            continue;
        };
        // The life spawned at the restart (at or just before `back`, which is taken after
        // the spawn).
        let life = slot
            .record
            .incarnations
            .iter()
            .find(|i| i.spawned_at_s + 0.5 >= back);
        let Some(life) = life else {
            continue;
        };
        k.amnesic = life.samples.iter().any(|s| s.line.amnesic);
        if k.amnesic {
            k.repaired_at_s = life
                .samples
                .iter()
                .skip_while(|s| !s.line.amnesic)
                .find(|s| !s.line.amnesic)
                .map(|s| s.at_s);
        }
    }
}

/// The raw outcome of one run: what each node printed, and when.
#[derive(Debug, Clone)]
pub struct ClusterRun {
    pub spec: ClusterSpec,
    pub nodes: Vec<NodeRecord>,
    pub kills: Vec<KillEvent>,
    /// When SIGTERM was sent, seconds since start: the end of the load phase.
    pub stop_at_s: f64,
    pub end_at_s: f64,
    /// The temporary directory, when it was kept (on request or because of a failure).
    pub kept_dir: Option<PathBuf>,
    /// The load phase was cut short by Ctrl-C.
    pub interrupted: bool,
    /// Every learner incarnation's delivery log (`node --delivery-log`), for the
    /// instance-by-instance comparison; empty if none could be read.
    pub delivery_logs: Vec<abcast_node::deliverylog::LearnerLog>,
    /// Why the delivery logs could not be read, if they could not.
    pub delivery_log_error: Option<String>,
}

/// Set by the first Ctrl-C: the run stops its load early and still reports, since the
/// nodes (same process group) got the SIGINT too and are draining. A second Ctrl-C exits.
fn interrupt_flag() -> &'static std::sync::Arc<std::sync::atomic::AtomicBool> {
    static FLAG: std::sync::OnceLock<std::sync::Arc<std::sync::atomic::AtomicBool>> =
        std::sync::OnceLock::new();
    FLAG.get_or_init(|| {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        // Order matters: the shutdown hook sees the flag before this Ctrl-C sets it.
        // Without handlers Ctrl-C simply ends the process, which is an acceptable fallback.
        let _ = signal_hook::flag::register_conditional_shutdown(
            signal_hook::consts::SIGINT,
            130,
            flag.clone(),
        );
        let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, flag.clone());
        flag
    })
}

fn progress_bar(spec: &ClusterSpec) -> ProgressBar {
    let total_ms = (spec.duration_s * 1000.0) as u64;
    if !spec.progress || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total_ms), ProgressDrawTarget::stderr());
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {msg}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(spec.label.clone());
    bar
}

/// Runs one cluster for `spec.duration_s` of load and returns what every node printed.
pub fn run_cluster(spec: &ClusterSpec) -> Result<ClusterRun, HarnessError> {
    spec.validate()?;
    let (mut dir, data_dir, mut cluster, rx) = start(spec)?;
    let bar = progress_bar(spec);
    let interrupted = interrupt_flag();
    let mut kills = match load_phase(&mut cluster, &rx, &bar, interrupted) {
        Ok(kills) => kills,
        Err(e) => {
            bar.finish_and_clear();
            dir.keep = true;
            return Err(HarnessError::Runtime(format!(
                "{e}\n(node logs kept in {})",
                dir.path.display()
            )));
        }
    };
    let stop = Instant::now();
    let stop_at_s = cluster.elapsed_s(stop);
    bar.set_message("load stopped; waiting for every learner to catch up".to_string());
    quiesce(&mut cluster, &rx, stop, stop_at_s);
    bar.set_message("load stopped; waiting for final stats".to_string());
    stop_all(&mut cluster, &rx);
    bar.finish_and_clear();
    let end_at_s = cluster.elapsed_s(Instant::now());
    let failed = cluster.slots.iter().any(|s| {
        s.record.incarnations.iter().any(|i| {
            matches!(
                i.ended,
                Ended::Unexpected { .. } | Ended::KilledAfterTimeout
            )
        })
    });
    if failed {
        dir.keep = true;
    }
    repairs(&mut kills, &cluster.slots);
    let (delivery_logs, delivery_log_error) = read_delivery_logs(&cluster.slots, &data_dir);
    let kept_dir = dir.keep.then(|| dir.path.clone());
    let nodes = cluster.slots.iter().map(|s| s.record.clone()).collect();
    Ok(ClusterRun {
        spec: spec.clone(),
        nodes,
        kills,
        stop_at_s,
        end_at_s,
        kept_dir,
        interrupted: interrupted.load(std::sync::atomic::Ordering::Relaxed),
        delivery_logs,
        delivery_log_error,
    })
}

/// Writes the config into a fresh directory and spawns every node. One config file for
/// every node, as an operator would run it: each node keeps its state under
/// `<storage.dir>/node-<id>`, so a restart finds its own directory again.
fn start(
    spec: &ClusterSpec,
) -> Result<(TempDir, PathBuf, Cluster, mpsc::Receiver<Event>), HarnessError> {
    let program = match &spec.program {
        Some(p) => p.clone(),
        None => match std::env::current_exe() {
            Ok(p) => p,
            Err(e) => return runtime("cannot find this executable to start nodes", e),
        },
    };
    let mut dir = TempDir::new("abcast-demo")?;
    dir.keep = spec.keep_dir;
    let mut table = cluster_config(spec)?;
    let data_dir = dir.path.join("data");
    set_toml_key(
        &mut table,
        "storage.dir",
        toml::Value::String(data_dir.display().to_string()),
    )?;
    let config_path = dir.path.join("cluster.toml");
    let text = match toml::to_string(&table) {
        Ok(t) => t,
        Err(e) => return runtime("cannot render the config", e),
    };
    if let Err(e) = fs::write(&config_path, text) {
        return runtime(format!("cannot write {}", config_path.display()), e);
    }
    let slots = (0..spec.nodes)
        .map(|id| Slot {
            id,
            config_path: config_path.clone(),
            log_path: dir.path.join(format!("node-{id}.log")),
            child: None,
            eof: false,
            record: NodeRecord {
                id,
                incarnations: Vec::new(),
            },
        })
        .collect();
    let (tx, rx) = mpsc::sync_channel::<Event>(4096);
    let mut cluster = Cluster {
        slots,
        program,
        spec: spec.clone(),
        start: Instant::now(),
        tx,
    };
    for i in 0..cluster.slots.len() {
        cluster.spawn(i)?;
    }
    Ok((dir, data_dir, cluster, rx))
}

/// The load phase: reads lines until the duration is over (or Ctrl-C), carrying out the
/// `kill` plan; ends with every killed node restarted. Fails if no node prints a line.
fn load_phase(
    cluster: &mut Cluster,
    rx: &mpsc::Receiver<Event>,
    bar: &ProgressBar,
    interrupted: &std::sync::atomic::AtomicBool,
) -> Result<Vec<KillEvent>, HarnessError> {
    let spec = cluster.spec.clone();
    let planned = Duration::from_secs_f64(spec.duration_s);
    // The load runs longer by the time a kill waited for a repair.
    let mut duration = planned;
    let mut waiting: Option<Instant> = None;
    let mut kills: Vec<KillEvent> = Vec::new();
    // (when, what): 0 = kill a follower, 1 = kill the coordinator; each restarts DOWN_TIME later.
    let mut plan: Vec<(Duration, u8)> = if spec.kill {
        vec![(duration / 3, 0), (duration * 2 / 3, 1)]
    } else {
        Vec::new()
    };
    let mut restarts: Vec<(Instant, usize, usize)> = Vec::new(); // (when, slot, kill index)
    loop {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(cluster.start);
        if elapsed >= duration || interrupted.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        if !cluster.any_line_yet() {
            let all_dead = cluster.slots.iter().all(|s| s.eof);
            if all_dead || elapsed >= FIRST_LINE_TIMEOUT {
                cluster.reap(false);
                return Err(HarnessError::Runtime(cluster.startup_failure()));
            }
        }
        // A kill waits until the nodes killed before are back and repaired (at most
        // REPAIR_WAIT_MAX), and the load runs that much longer.
        let due = plan
            .first()
            .is_some_and(|&(at, _)| elapsed + planned >= at + duration);
        let unrepaired = if due {
            cluster.unrepaired(restarts.iter().map(|r| r.1))
        } else {
            None
        };
        let mut note = String::new();
        if let Some(node) = unrepaired {
            let since = *waiting.get_or_insert(now);
            let waited = now.duration_since(since);
            duration = planned + waited;
            if waited >= REPAIR_WAIT_MAX {
                note = format!(
                    "node {node} was still unrepaired after {} s; this kill went ahead",
                    REPAIR_WAIT_MAX.as_secs()
                );
            }
        } else if let Some(since) = waiting.filter(|_| due) {
            note = format!(
                "waited {:.1} s for the node killed before to be back and repaired",
                now.duration_since(since).as_secs_f64()
            );
        }
        if due && (unrepaired.is_none() || !note.is_empty()) {
            let what = plan.remove(0).1;
            waiting = None;
            if let Some((slot, mut event)) = cluster.kill_planned(what) {
                if !note.is_empty() {
                    event.note = note;
                }
                bar.println(format!(
                    "killed node {} ({}) with SIGKILL",
                    event.node, event.role
                ));
                kills.push(event);
                restarts.push((Instant::now() + DOWN_TIME, slot, kills.len() - 1));
            }
        }
        if let Some(pos) = restarts.iter().position(|&(when, _, _)| now >= when) {
            let (_, slot, k) = restarts.remove(pos);
            cluster.spawn(slot)?;
            kills[k].restarted_at_s = Some(cluster.elapsed_s(Instant::now()));
            bar.println(format!("restarted node {}", cluster.slots[slot].id));
        }
        if let Ok(ev) = rx.recv_timeout(Duration::from_millis(50)) {
            cluster.handle(ev);
            while let Ok(ev) = rx.try_recv() {
                cluster.handle(ev);
            }
        }
        cluster.reap(false);
        let (values_per_s, mbit_per_s) = cluster.live_rate();
        bar.set_position(elapsed.as_millis() as u64);
        bar.set_message(format!(
            "{:.1}/{} s  {} values/s  {mbit_per_s:.1} Mbit/s",
            elapsed.as_secs_f64(),
            spec.duration_s,
            group(values_per_s.round() as u64)
        ));
    }
    // A restart still pending at the end would leave a node down in the final check: do it
    // now so every node gets to catch up before the stop.
    for (_, slot, k) in restarts.drain(..) {
        cluster.spawn(slot)?;
        kills[k].restarted_at_s = Some(cluster.elapsed_s(Instant::now()));
    }
    Ok(kills)
}

/// Stops the load everywhere but keeps every node serving, until every learner reports the
/// same delivered count twice in a row after the stop (or QUIESCE_MAX passes): a node that
/// exited first would stop voting and forwarding for the others.
fn quiesce(cluster: &mut Cluster, rx: &mpsc::Receiver<Event>, stop: Instant, stop_at_s: f64) {
    cluster.signal_all(libc::SIGUSR1);
    let mut agreed_since: Option<Instant> = None;
    while stop.elapsed() < QUIESCE_MAX {
        if let Ok(ev) = rx.recv_timeout(Duration::from_millis(20)) {
            cluster.handle(ev);
        }
        while let Ok(ev) = rx.try_recv() {
            cluster.handle(ev);
        }
        let same = if cluster.spec.learners_differ {
            counts_settled(&cluster.slots, stop_at_s)
        } else {
            counts_equal(&cluster.slots, stop_at_s)
        };
        match (same, agreed_since) {
            (true, None) => agreed_since = Some(Instant::now()),
            (true, Some(t)) if t.elapsed() >= QUIESCE_STABLE => break,
            (false, _) => agreed_since = None,
            _ => {}
        }
    }
}

/// Every node reported after the stop, and all report the same delivered count.
fn counts_equal(slots: &[Slot], stop_at_s: f64) -> bool {
    let counts: Vec<Option<u64>> = slots
        .iter()
        .map(|s| {
            s.record
                .incarnations
                .last()
                .and_then(|inc| inc.samples.last())
                .filter(|smp| smp.at_s > stop_at_s)
                .map(|smp| smp.line.delivered_values)
        })
        .collect();
    counts.iter().all(|c| c.is_some()) && counts.windows(2).all(|w| w[0] == w[1])
}

/// Learners that deliver different sets: every node's count unchanged since its previous
/// line after the stop.
fn counts_settled(slots: &[Slot], stop_at_s: f64) -> bool {
    slots.iter().all(|s| {
        let Some(samples) = s.record.incarnations.last().map(|i| &i.samples) else {
            return false;
        };
        let after: Vec<u64> = samples
            .iter()
            .rev()
            .take_while(|smp| smp.at_s > stop_at_s)
            .take(2)
            .map(|smp| smp.line.delivered_values)
            .collect();
        after.len() == 2 && after[0] == after[1]
    })
}

/// SIGTERM to every node, a bounded wait for each to exit (then SIGKILL), every line still
/// in the pipes read, and a clean exit without its final line recorded as a failure.
fn stop_all(cluster: &mut Cluster, rx: &mpsc::Receiver<Event>) {
    cluster.terminate_all();
    let terminated = Instant::now();
    loop {
        while let Ok(ev) = rx.try_recv() {
            cluster.handle(ev);
        }
        cluster.reap(true);
        if cluster.slots.iter().all(|s| s.child.is_none()) {
            break;
        }
        if terminated.elapsed() >= STOP_GRACE {
            for i in 0..cluster.slots.len() {
                cluster.kill(i, Ended::KilledAfterTimeout);
            }
            break;
        }
        if let Ok(ev) = rx.recv_timeout(Duration::from_millis(20)) {
            cluster.handle(ev);
        }
    }
    // Lines already in the pipe when the process exited.
    let drain_until = Instant::now() + Duration::from_millis(500);
    while cluster.slots.iter().any(|s| !s.eof) && Instant::now() < drain_until {
        if let Ok(ev) = rx.recv_timeout(Duration::from_millis(20)) {
            cluster.handle(ev);
        }
    }
    while let Ok(ev) = rx.try_recv() {
        cluster.handle(ev);
    }
    // Every line is in now: a clean exit must have printed its final line.
    for slot in &mut cluster.slots {
        if let Some(inc) = slot.record.incarnations.last_mut()
            && inc.ended == Ended::Clean
            && !inc.final_seen()
        {
            inc.ended = Ended::Unexpected {
                status: "exit status 0 without a final stats line".to_string(),
                log_tail: log_tail(&slot.log_path),
            };
        }
    }
}

/// Every learner incarnation's delivery log; none at all if one node's cannot be read. The
/// log of a life that was killed may end in a torn line, which is dropped
/// (`deliverylog::read_node_lives`, [`killed_life`]).
fn read_delivery_logs(
    slots: &[Slot],
    data_dir: &Path,
) -> (Vec<abcast_node::deliverylog::LearnerLog>, Option<String>) {
    let mut logs = Vec::new();
    let mut error = None;
    for slot in slots {
        match abcast_node::deliverylog::read_node_lives(
            slot.id,
            &data_dir.join(format!("node-{}", slot.id)),
            killed_life(&slot.record),
        ) {
            Ok((l, _torn)) => logs.extend(l),
            Err(e) => error = Some(e),
        }
    }
    if error.is_some() {
        logs.clear();
    }
    (logs, error)
}

/// [`read_delivery_logs`] for a run whose nodes may have restarted on a wiped directory
/// (`nemesis`): each node's lives before a wipe are read from the archive their logs were
/// moved to, and their incarnation numbers are raised by a million per wipe, so that a life
/// after a wipe (which counts from 0 again) comes after those of before.
fn read_delivery_logs_from(
    slots: &[Slot],
    data_dir: &Path,
    wipes: &[nemesis::Wipe],
) -> (Vec<abcast_node::deliverylog::LearnerLog>, Option<String>) {
    const EPOCH: u64 = 1_000_000;
    let mut logs = Vec::new();
    let mut error = None;
    for slot in slots {
        let mine: Vec<&nemesis::Wipe> = wipes.iter().filter(|w| w.node == slot.id).collect();
        // (directory, first life of the record in it, one past its last)
        let mut epochs: Vec<(PathBuf, usize, usize)> = Vec::new();
        let mut base = 0;
        for w in &mine {
            epochs.push((w.archive.clone(), base, w.lives_before));
            base = w.lives_before;
        }
        epochs.push((
            data_dir.join(format!("node-{}", slot.id)),
            base,
            slot.record.incarnations.len(),
        ));
        for (e, (dir, from, to)) in epochs.into_iter().enumerate() {
            let part = NodeRecord {
                id: slot.record.id,
                incarnations: slot.record.incarnations[from.min(to)..to].to_vec(),
            };
            match abcast_node::deliverylog::read_node_lives(slot.id, &dir, killed_life(&part)) {
                Ok((l, _torn)) => logs.extend(l.into_iter().map(|mut log| {
                    log.incarnation += e as u64 * EPOCH;
                    log
                })),
                Err(e) => error = Some(e),
            }
        }
    }
    if error.is_some() {
        logs.clear();
    }
    (logs, error)
}

/// Whether the delivery log of `incarnation` (the `ordinal`-th of the node's logs) was
/// written by a life this run killed with SIGKILL (`--kill`, or a node that outstayed
/// [`STOP_GRACE`]). A life is known by the incarnation its stats lines name; one killed
/// before its first line, by its place among the node's lives.
fn killed_life(record: &NodeRecord) -> impl Fn(u64, usize) -> bool + '_ {
    move |incarnation, ordinal| {
        let named = record.incarnations.iter().find(|i| {
            i.samples
                .first()
                .is_some_and(|s| s.line.incarnation == incarnation)
        });
        let life = named.or_else(|| {
            record
                .incarnations
                .get(ordinal)
                .filter(|i| i.samples.is_empty())
        });
        life.is_some_and(|i| matches!(i.ended, Ended::KilledByDemo | Ended::KilledAfterTimeout))
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::spec;
    use super::*;

    #[test]
    fn a_node_that_cannot_start_is_a_runtime_error_quoting_its_log() {
        let mut s = spec(3);
        s.config_edits.clear();
        s.program = Some(PathBuf::from("/bin/false"));
        match run_cluster(&s) {
            Err(HarnessError::Runtime(m)) => {
                assert!(m.contains("no node printed a stats line"), "{m}");
                assert!(m.contains("node logs kept in"), "{m}");
                if let Some(dir) = m.rsplit("kept in ").next() {
                    let _ = fs::remove_dir_all(dir.trim_end_matches(')'));
                }
            }
            other => panic!("expected a runtime error, got {other:?}"),
        }
    }

    #[test]
    fn a_delivery_log_is_a_killed_lifes_by_its_stats_incarnation_or_its_place() {
        use super::test_support::{LINE, sample};
        let life = |inc: Option<u64>, ended: Ended| Incarnation {
            spawned_at_s: 0.0,
            ended_at_s: Some(1.0),
            ended,
            samples: inc
                .map(|n| {
                    let json = LINE.replace("\"incarnation\":0", &format!("\"incarnation\":{n}"));
                    vec![sample(0.5, 0, &json)]
                })
                .unwrap_or_default(),
            bad_lines: 0,
            first_bad_line: None,
        };
        let record = NodeRecord {
            id: 0,
            incarnations: vec![
                life(Some(4), Ended::KilledByDemo),
                life(None, Ended::KilledByDemo),
                life(Some(9), Ended::Clean),
                life(Some(11), Ended::KilledAfterTimeout),
            ],
        };
        let killed = killed_life(&record);
        assert!(killed(4, 0), "named by its stats lines");
        assert!(killed(6, 1), "killed before its first line: by its place");
        assert!(!killed(9, 2), "stopped cleanly");
        assert!(
            !killed(9, 1),
            "a life named by its lines is never taken by place"
        );
        assert!(
            !killed(12, 0),
            "the life in place 0 is incarnation 4, not 12"
        );
        assert!(killed(11, 3), "killed after the stop grace");
    }

    #[test]
    fn flag_combinations_are_checked_naming_the_flag() {
        let mut s = spec(2);
        s.kill = true;
        assert!(matches!(s.validate(), Err(HarnessError::Usage(m)) if m.contains("--nodes")));
        let mut s = spec(3);
        s.kill = true;
        s.duration_s = 3.0;
        assert!(matches!(s.validate(), Err(HarnessError::Usage(m)) if m.contains("--duration")));
        let mut s = spec(3);
        s.duration_s = f64::NAN;
        assert!(s.validate().is_err());
        assert!(spec(0).validate().is_err());
        assert!(spec(65).validate().is_err());
    }
}

/// Builders of specs, samples and runs for the harness's unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub(crate) fn spec(nodes: u32) -> ClusterSpec {
        ClusterSpec {
            nodes,
            value_size_bytes: 1024,
            duration_s: 10.0,
            rate_values_per_s: 0,
            window_values: None,
            kill: false,
            config_edits: vec![(
                "transport.buffer_size".to_string(),
                toml::Value::Integer(131_072),
            )],
            keep_dir: false,
            progress: false,
            label: String::new(),
            program: None,
            load_rates: None,
            learners_differ: false,
            placement: Vec::new(),
            load_at_leader: false,
            stamp_values: false,
        }
    }

    pub(crate) fn sample(at_s: f64, delivered: u64, json: &str) -> Sample {
        let line = abcast_node::stats::parse_line(json).unwrap();
        Sample {
            at_s,
            line: StatsLine {
                delivered_values: delivered,
                ..line
            },
            interval_latency: None,
        }
    }

    pub(crate) const LINE: &str = r#"{"type":"final","node":0,"incarnation":0,"t_us":1,"delivered_values":0,"delivered_bytes":0,"delivered_instance":0,"order_hash":"ab","proposed_values":0,"acked_values":0,"busy_rejections":0,"coordinator":0,"cpu_user_ms":0,"cpu_sys_ms":0,"rss_kib":0,"lat_count":0,"lat_us_p50":0,"lat_us_p99":0,"lat_us_p999":0,"delivered_by_origin":{"0":5},"acked_by_origin":{"0":7},"duplicate_deliveries":0}"#;

    pub(crate) fn run_of(records: Vec<NodeRecord>) -> ClusterRun {
        ClusterRun {
            spec: spec(records.len() as u32),
            nodes: records,
            kills: Vec::new(),
            stop_at_s: 3.0,
            end_at_s: 4.0,
            kept_dir: None,
            interrupted: false,
            delivery_logs: Vec::new(),
            delivery_log_error: None,
        }
    }

    pub(crate) fn record(id: u32, samples: Vec<Sample>) -> NodeRecord {
        NodeRecord {
            id,
            incarnations: vec![Incarnation {
                spawned_at_s: 0.0,
                ended_at_s: Some(4.0),
                ended: Ended::Clean,
                samples,
                bad_lines: 0,
                first_bad_line: None,
            }],
        }
    }
}
