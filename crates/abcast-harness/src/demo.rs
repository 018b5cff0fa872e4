//! `abcast demo`: a local cluster of real node processes, driven and measured from outside.
//!
//! The same runner ([`run_cluster`] then [`analyse`]) serves `abcast bench`, so a benchmark
//! measures exactly what a person sees in the demo: separate OS processes talking TCP over
//! loopback, each with its own load generator, observed only through the stats lines of
//! docs/CONTRACTS.md. Nothing here reaches into a node's memory, so a bug in a node cannot be
//! hidden by the harness.
//!
//! Timeline of one run: write the config (from `nodeconfig::local_cluster`, ports checked
//! free), spawn the nodes, read their stdout while the load runs (with `--kill`, kill -9 and
//! restart a follower at 1/3 and the coordinator at 2/3), SIGTERM every node, wait a bounded
//! time for each node's `final` line, then check agreement, loss and duplicates.

use abcast_node::stats::{self, LatencySummary, LineKind, StatsError, StatsLine};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Largest cluster: the ring's vote sets are 64-bit masks (abcast-core `MAX_RING_MEMBERS`).
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
const LOG_TAIL_LINES: usize = 8;

/// An error, split by who has to act: the user (exit status 2) or the system (exit status 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DemoError {
    /// Bad input from the command line; the message names the flag.
    Usage(String),
    /// A runtime failure: a node that would not start, an unwritable directory, ...
    Runtime(String),
}

impl DemoError {
    pub fn exit_code(&self) -> u8 {
        match self {
            DemoError::Usage(_) => 2,
            DemoError::Runtime(_) => 1,
        }
    }
}

impl fmt::Display for DemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DemoError::Usage(m) | DemoError::Runtime(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for DemoError {}

fn runtime<T>(what: impl fmt::Display, e: impl fmt::Display) -> Result<T, DemoError> {
    Err(DemoError::Runtime(format!("{what}: {e}")))
}

/// Parses a duration in seconds: positive, finite, at most a day.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s} must be a positive number of seconds"));
    }
    if v > 86_400.0 {
        return Err(format!("{s} s is more than a day"));
    }
    Ok(v)
}

/// `abcast demo` flags.
#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Number of node processes in the ring (each is proposer, acceptor and learner).
    #[arg(long, default_value_t = 3, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u32).range(1..=NODES_MAX as i64))]
    pub nodes: u32,
    /// Size of each proposed value, in bytes.
    #[arg(long = "value-size", value_name = "BYTES", default_value_t = 1024, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(1..=(16 << 20)))]
    pub value_size_bytes: u64,
    /// How long the load runs, in seconds.
    #[arg(long = "duration", value_name = "SECONDS", default_value = "10", allow_hyphen_values = true,
          value_parser = parse_seconds)]
    pub duration_s: f64,
    /// Values per second offered in total, split evenly over the nodes; 0 = as fast as the
    /// ring accepts.
    #[arg(
        long = "rate",
        value_name = "VALUES_PER_S",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    pub rate_values_per_s: u64,
    /// Values each node's load generator keeps in flight (proposed, not yet acknowledged);
    /// default: the node's own default. Seed 000 used 10 to 20.
    #[arg(long = "window", value_name = "VALUES", allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(1..=(1 << 24)))]
    pub window_values: Option<u64>,
    /// Crash test: kill -9 a follower at 1/3 of the run and the coordinator at 2/3, restart
    /// each after about a second, then check that nothing acknowledged was lost.
    #[arg(long)]
    pub kill: bool,
    /// Print one JSON object as the last stdout line instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Keep the temporary directory (config, node logs, storage) and print its path.
    #[arg(long = "keep-dir")]
    pub keep_dir: bool,
    /// Where the plot of the run goes (`plot.png`: values/s per node and latency, second by
    /// second) [default: results/demo-TIMESTAMP/].
    #[arg(long = "out", value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Acceptor storage: memory (bounded, in memory), durable (a log on disk, fdatasync
    /// before votes leave: survives a machine crash), durable-inloop (the same, with the
    /// fdatasync in the event loop instead of on a sync thread: for comparison),
    /// durable-buffered (the same, written through the page cache instead of around it:
    /// for comparison), durable-nosync (written through the OS: survives a process crash) or none
    /// (benchmarks only).
    #[arg(long, value_name = "KIND", default_value = "memory",
          value_parser = ["memory", "durable", "durable-inloop", "durable-buffered",
                          "durable-nosync", "none"])]
    pub storage: String,
}

/// The config edits that select a storage back-end by its `--storage` name.
pub fn storage_edits(kind: &str) -> Vec<(String, toml::Value)> {
    let (k, sync) = match kind {
        "durable" | "durable-inloop" | "durable-buffered" => ("durable", Some(true)),
        "durable-nosync" => ("durable", Some(false)),
        "none" => ("none", None),
        _ => ("memory", None),
    };
    let mut edits = vec![("storage.kind".to_string(), toml::Value::from(k))];
    if let Some(sync) = sync {
        edits.push(("storage.sync".to_string(), toml::Value::from(sync)));
    }
    if kind == "durable-inloop" {
        edits.push(("storage.sync_thread".to_string(), toml::Value::from(false)));
    }
    if kind == "durable-buffered" {
        edits.push(("storage.direct_io".to_string(), toml::Value::from(false)));
    }
    edits
}

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
}

/// A node's own network namespace and its address there.
#[derive(Debug, Clone)]
pub struct NodePlace {
    pub netns_path: PathBuf,
    pub addr: std::net::Ipv4Addr,
}

impl ClusterSpec {
    pub fn from_args(args: &DemoArgs) -> ClusterSpec {
        ClusterSpec {
            nodes: args.nodes,
            value_size_bytes: args.value_size_bytes,
            duration_s: args.duration_s,
            rate_values_per_s: args.rate_values_per_s,
            window_values: args.window_values,
            kill: args.kill,
            config_edits: storage_edits(&args.storage),
            keep_dir: args.keep_dir,
            progress: !args.json,
            label: "demo".to_string(),
            program: None,
            load_rates: None,
            learners_differ: false,
            placement: Vec::new(),
        }
    }

    /// Checks the combination of flags; each error names the flag to change.
    pub fn validate(&self) -> Result<(), DemoError> {
        let usage = |m: String| Err(DemoError::Usage(m));
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

// ---------------------------------------------------------------------------------------
// Config and directory

/// A fresh temporary directory, removed on drop unless kept.
struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl TempDir {
    fn new(prefix: &str) -> Result<TempDir, DemoError> {
        let base = std::env::temp_dir();
        for _ in 0..16 {
            let path = base.join(format!(
                "{prefix}-{}-{:08x}",
                std::process::id(),
                random_u64() as u32
            ));
            match fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir { path, keep: false }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return runtime(format!("cannot create {}", path.display()), e),
            }
        }
        Err(DemoError::Runtime(format!(
            "cannot create a fresh directory in {}",
            base.display()
        )))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// A random number without a dependency: std seeds every `RandomState` from the OS.
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

/// Every TCP port the config mentions: strings that parse as socket addresses, and integers
/// under a key containing "port". Found by walking the TOML, so this does not depend on the
/// config's layout.
fn config_ports(value: &toml::Value, key: &str, out: &mut BTreeSet<u16>) {
    match value {
        toml::Value::String(s) => {
            if let Ok(addr) = s.parse::<std::net::SocketAddr>() {
                out.insert(addr.port());
            }
        }
        toml::Value::Integer(i) if key.contains("port") => {
            if let Ok(p) = u16::try_from(*i) {
                out.insert(p);
            }
        }
        toml::Value::Array(items) => items.iter().for_each(|v| config_ports(v, key, out)),
        toml::Value::Table(t) => t.iter().for_each(|(k, v)| config_ports(v, k, out)),
        _ => {}
    }
}

fn ports_free(ports: &BTreeSet<u16>) -> bool {
    // Hold every listener until all are bound, so two ports in the set cannot both pass
    // because one was released in between.
    let mut held = Vec::with_capacity(ports.len());
    for &p in ports {
        match TcpListener::bind(("127.0.0.1", p)) {
            Ok(l) => held.push(l),
            Err(_) => return false,
        }
    }
    true
}

/// Sets a dotted key ("transport.buffer_size") in a TOML table, creating tables on the way.
/// A part may index an existing array of tables: "members[3].roles".
pub fn set_toml_key(
    table: &mut toml::Table,
    dotted: &str,
    value: toml::Value,
) -> Result<(), DemoError> {
    let mut parts: Vec<&str> = dotted.split('.').collect();
    let Some(last) = parts.pop() else {
        return Err(DemoError::Runtime(format!("empty config key {dotted:?}")));
    };
    let bad = |what: String| Err(DemoError::Runtime(format!("config key {dotted:?}: {what}")));
    let mut t = table;
    for part in parts {
        let (name, index) = match part.strip_suffix(']').and_then(|p| p.split_once('[')) {
            Some((name, i)) => match i.parse::<usize>() {
                Ok(i) => (name, Some(i)),
                Err(_) => return bad(format!("{part:?} has no valid index")),
            },
            None => (part, None),
        };
        let entry = t
            .entry(name.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let entry = match (index, entry) {
            (None, e) => e,
            (Some(i), toml::Value::Array(items)) => match items.get_mut(i) {
                Some(e) => e,
                None => return bad(format!("{name:?} has no element {i}")),
            },
            (Some(_), _) => return bad(format!("{name:?} is not an array")),
        };
        t = match entry {
            toml::Value::Table(inner) => inner,
            _ => return bad(format!("{part:?} is not a table")),
        };
    }
    t.insert(last.to_string(), value);
    Ok(())
}

/// The port of `members[i].KEY` in a generated config.
fn member_port(table: &toml::Table, i: usize, key: &str) -> Option<u16> {
    let member = table.get("members")?.as_array()?.get(i)?;
    let addr = member.get(key)?.as_str()?;
    Some(addr.parse::<std::net::SocketAddr>().ok()?.port())
}

/// The config text for a cluster of `nodes` on free loopback ports, with the spec's edits
/// applied. The layout is `nodeconfig::local_cluster`'s; we only touch the keys we own.
fn cluster_config(spec: &ClusterSpec) -> Result<toml::Table, DemoError> {
    let n = spec.nodes as usize;
    for _attempt in 0..64 {
        // Ports from 20000 up, away from the usual ephemeral range (32768..60999) where the
        // kernel picks client ports; a clash is still detected below and retried.
        let span = (12_000u64).saturating_sub(4 * n as u64).max(1);
        let base_port = 20_000 + (random_u64() % span) as u16;
        let text = abcast_node::nodeconfig::local_cluster(n, base_port);
        let mut table: toml::Table = match text.parse() {
            Ok(t) => t,
            Err(e) => return runtime("nodeconfig::local_cluster produced invalid TOML", e),
        };
        let mut ports = BTreeSet::new();
        config_ports(&toml::Value::Table(table.clone()), "", &mut ports);
        if !ports_free(&ports) {
            continue;
        }
        for (key, value) in &spec.config_edits {
            set_toml_key(&mut table, key, value.clone())?;
        }
        for (i, place) in spec.placement.iter().enumerate() {
            for key in ["addr", "client_addr"] {
                let dotted = format!("members[{i}].{key}");
                let Some(port) = member_port(&table, i, key) else {
                    return runtime(&dotted, "the generated config has no port there");
                };
                let addr = std::net::SocketAddrV4::new(place.addr, port).to_string();
                set_toml_key(&mut table, &dotted, toml::Value::String(addr))?;
            }
        }
        return Ok(table);
    }
    Err(DemoError::Runtime(
        "found no free block of loopback ports after 64 tries".to_string(),
    ))
}

// ---------------------------------------------------------------------------------------
// Processes

enum Event {
    Line {
        slot: usize,
        life: usize,
        at: Instant,
        line: Box<Result<StatsLine, StatsError>>,
    },
    Eof {
        slot: usize,
        life: usize,
    },
}

/// Reads one child's stdout into the channel, one event per line, then `Eof`. Lines longer
/// than [`stats::LINE_BYTES_MAX`] are cut and reported bad rather than buffered. Every raw
/// line is also appended to `raw_path`, so a kept directory shows exactly what a node said.
fn spawn_reader(
    slot: usize,
    life: usize,
    out: impl Read + Send + 'static,
    raw_path: PathBuf,
    tx: mpsc::SyncSender<Event>,
) {
    let spawned = std::thread::Builder::new()
        .name(format!("stats-reader-{slot}"))
        .spawn(move || {
            let mut raw = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(raw_path)
                .ok();
            let mut reader = BufReader::new(out);
            let mut buf = Vec::new();
            let limit = (stats::LINE_BYTES_MAX + 1) as u64;
            loop {
                buf.clear();
                match (&mut reader).take(limit).read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let line = if buf.len() > stats::LINE_BYTES_MAX {
                    // Skip the rest of this over-long line, a bounded chunk at a time.
                    let mut sink = Vec::new();
                    while !sink.ends_with(b"\n") {
                        sink.clear();
                        match (&mut reader).take(limit).read_until(b'\n', &mut sink) {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                    }
                    Err(StatsError {
                        reason: format!("line longer than {} bytes", stats::LINE_BYTES_MAX),
                    })
                } else {
                    if let Some(f) = raw.as_mut()
                        && f.write_all(&buf).is_err()
                    {
                        raw = None;
                    }
                    stats::parse_line(&String::from_utf8_lossy(&buf))
                };
                if tx
                    .send(Event::Line {
                        slot,
                        life,
                        at: Instant::now(),
                        line: Box::new(line),
                    })
                    .is_err()
                {
                    return;
                }
            }
            let _ = tx.send(Event::Eof { slot, life });
        });
    // A reader that cannot start leaves the slot without lines; the start-up timeout and the
    // final-line wait report it, so there is nothing more to do here.
    drop(spawned);
}

struct Slot {
    id: u32,
    config_path: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
    /// Stdout reached end of file for the current child.
    eof: bool,
    record: NodeRecord,
}

/// The cluster's processes. Dropping it kills whatever is still running, so an early
/// return never leaves orphans behind.
struct Cluster {
    slots: Vec<Slot>,
    program: PathBuf,
    spec: ClusterSpec,
    start: Instant,
    tx: mpsc::SyncSender<Event>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for slot in &mut self.slots {
            if let Some(mut child) = slot.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "unknown exit".to_string(),
    }
}

fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(LOG_TAIL_LINES);
    lines[from..].join("\n")
}

impl Cluster {
    fn elapsed_s(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.start).as_secs_f64()
    }

    fn spawn(&mut self, slot_idx: usize) -> Result<(), DemoError> {
        // The offered rate split in whole values/s; the first `rate % nodes` nodes take one
        // more so the total is exact. 0 stays 0: unlimited.
        let nodes = u64::from(self.spec.nodes.max(1));
        let total = self.spec.rate_values_per_s;
        let id = self.slots[slot_idx].id;
        let per_node_rate = match &self.spec.load_rates {
            None => Some(total / nodes + u64::from(u64::from(id) < total % nodes)),
            Some(rates) => rates.iter().find(|(n, _)| *n == id).map(|&(_, r)| r),
        };
        let now_s = self.elapsed_s(Instant::now());
        let slot = &mut self.slots[slot_idx];
        let log = match fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&slot.log_path)
        {
            Ok(f) => f,
            Err(e) => return runtime(format!("cannot open {}", slot.log_path.display()), e),
        };
        let mut cmd = Command::new(&self.program);
        cmd.arg("node")
            .arg("--config")
            .arg(&slot.config_path)
            .arg("--id")
            .arg(slot.id.to_string())
            .arg("--json-stats")
            .arg("--delivery-log")
            .arg("--stats-ms")
            .arg(STATS_MS.to_string())
            .args(
                per_node_rate
                    .map(|r| ["--load-rate".to_string(), r.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .arg("--load-value-size")
            .arg(self.spec.value_size_bytes.to_string())
            .args(
                self.spec
                    .window_values
                    .map(|w| ["--load-window".to_string(), w.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        // The namespace to enter, held open until `spawn` has returned (the child has
        // exec'd by then).
        let mut _netns: Option<fs::File> = None;
        if let Some(place) = self.spec.placement.get(slot_idx) {
            // Opened here, in the parent (close-on-exec, so the node does not inherit it),
            // and entered in the child between fork and exec.
            let ns = match fs::File::open(&place.netns_path) {
                Ok(f) => f,
                Err(e) => {
                    return runtime(
                        format!(
                            "cannot open network namespace {}",
                            place.netns_path.display()
                        ),
                        e,
                    );
                }
            };
            let fd = std::os::fd::AsRawFd::as_raw_fd(&ns);
            // SAFETY: the closure runs in the child after fork and only makes the setns
            // system call, which is async-signal-safe; `ns` lives in `_netns` until after
            // `spawn` below, so the descriptor is open in the child.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    if libc::setns(fd, libc::CLONE_NEWNET) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
            _netns = Some(ns);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => return runtime(format!("cannot start {} node", self.program.display()), e),
        };
        let life = slot.record.incarnations.len();
        if let Some(out) = child.stdout.take() {
            let raw_path = slot.log_path.with_extension("stats.jsonl");
            spawn_reader(slot_idx, life, out, raw_path, self.tx.clone());
        }
        slot.record.incarnations.push(Incarnation {
            spawned_at_s: now_s,
            ended_at_s: None,
            ended: Ended::Running,
            samples: Vec::new(),
            bad_lines: 0,
            first_bad_line: None,
        });
        slot.child = Some(child);
        slot.eof = false;
        Ok(())
    }

    /// SIGKILL on purpose; the exit is recorded as `how`.
    fn kill(&mut self, slot_idx: usize, how: Ended) {
        let now_s = self.elapsed_s(Instant::now());
        let slot = &mut self.slots[slot_idx];
        if let Some(mut child) = slot.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            if let Some(inc) = slot.record.incarnations.last_mut() {
                inc.ended = how;
                inc.ended_at_s = Some(now_s);
            }
        }
    }

    fn terminate_all(&mut self) {
        self.signal_all(libc::SIGTERM);
    }

    fn signal_all(&mut self, sig: libc::c_int) {
        for slot in &self.slots {
            if let Some(child) = &slot.child {
                // The pid of a child we have not yet waited for cannot have been reused.
                if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                    // SAFETY: kill(2) with a valid signal number has no memory effects.
                    unsafe {
                        libc::kill(pid, sig);
                    }
                }
            }
        }
    }

    /// Reaps children that have exited, recording how.
    fn reap(&mut self, stopping: bool) {
        let now_s = self.elapsed_s(Instant::now());
        for slot in &mut self.slots {
            let Some(child) = slot.child.as_mut() else {
                continue;
            };
            let Ok(Some(status)) = child.try_wait() else {
                continue;
            };
            slot.child = None;
            let Some(inc) = slot.record.incarnations.last_mut() else {
                continue;
            };
            inc.ended_at_s = Some(now_s);
            // A clean exit's final line may still be in the pipe: `run_cluster` checks
            // for it once stdout is drained.
            inc.ended = if stopping && status.success() {
                Ended::Clean
            } else {
                Ended::Unexpected {
                    status: describe_status(status),
                    log_tail: log_tail(&slot.log_path),
                }
            };
        }
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Line {
                slot,
                life,
                at,
                line,
            } => {
                let at_s = self.elapsed_s(at);
                let Some(inc) = self.slots[slot].record.incarnations.get_mut(life) else {
                    return;
                };
                match *line {
                    Ok(line) => {
                        let prev_hist = inc
                            .samples
                            .last_mut()
                            .and_then(|prev| prev.line.lat_hist.take());
                        let interval_latency = line
                            .lat_hist
                            .as_deref()
                            .and_then(|h| stats::interval_latency(prev_hist.as_deref(), h));
                        inc.samples.push(Sample {
                            at_s,
                            line,
                            interval_latency,
                        });
                    }
                    Err(e) => {
                        inc.bad_lines += 1;
                        if inc.first_bad_line.is_none() {
                            inc.first_bad_line = Some(e.to_string());
                        }
                    }
                }
            }
            Event::Eof { slot, life } => {
                let s = &mut self.slots[slot];
                if life + 1 == s.record.incarnations.len() {
                    s.eof = true;
                }
            }
        }
    }

    /// The coordinator most live nodes name in their latest line.
    fn coordinator(&self) -> Option<u32> {
        let mut votes: BTreeMap<u32, usize> = BTreeMap::new();
        for slot in self.slots.iter().filter(|s| s.child.is_some()) {
            let latest = slot.record.incarnations.last().and_then(|i| i.last());
            if let Some(c) = latest.and_then(|l| l.coordinator) {
                *votes.entry(c).or_default() += 1;
            }
        }
        votes
            .into_iter()
            .max_by_key(|&(id, n)| (n, std::cmp::Reverse(id)))
            .map(|(id, _)| id)
    }

    fn slot_of(&self, id: u32) -> Option<usize> {
        self.slots.iter().position(|s| s.id == id)
    }

    /// `--kill`: SIGKILL a live follower (`what` 0, the highest id that is not the
    /// coordinator) or the coordinator most nodes name (`what` 1).
    fn kill_planned(&mut self, what: u8) -> Option<(usize, KillEvent)> {
        let coordinator = self.coordinator();
        let live: Vec<u32> = self
            .slots
            .iter()
            .filter(|s| s.child.is_some())
            .map(|s| s.id)
            .collect();
        let (victim, role, note) = if what == 0 {
            let v = live
                .iter()
                .rev()
                .copied()
                .find(|&id| Some(id) != coordinator);
            (v, "follower", String::new())
        } else {
            match coordinator.filter(|c| live.contains(c)) {
                Some(c) => (Some(c), "coordinator", String::new()),
                None => (
                    live.first().copied(),
                    "coordinator",
                    "no live coordinator reported; killed the first live node".to_string(),
                ),
            }
        };
        let slot = self.slot_of(victim?)?;
        self.kill(slot, Ended::KilledByDemo);
        let event = KillEvent {
            at_s: self.elapsed_s(Instant::now()),
            node: self.slots[slot].id,
            role: role.to_string(),
            restarted_at_s: None,
            note,
        };
        Some((slot, event))
    }

    /// Current throughput over all learners, for the progress bar: the median of each live
    /// node's rate between its last two lines.
    fn live_rate(&self) -> (f64, f64) {
        let mut values = Vec::new();
        let mut mbits = Vec::new();
        for slot in self.slots.iter().filter(|s| s.child.is_some()) {
            let Some(inc) = slot.record.incarnations.last() else {
                continue;
            };
            let n = inc.samples.len();
            if n < 2 {
                continue;
            }
            let (a, b) = (&inc.samples[n - 2].line, &inc.samples[n - 1].line);
            let dt_s = b.t_us.saturating_sub(a.t_us) as f64 / 1e6;
            if dt_s > 0.0 {
                values.push(b.delivered_values.saturating_sub(a.delivered_values) as f64 / dt_s);
                mbits.push(
                    b.delivered_bytes.saturating_sub(a.delivered_bytes) as f64 * 8.0 / 1e6 / dt_s,
                );
            }
        }
        (
            stats::median(&values).unwrap_or(0.0),
            stats::median(&mbits).unwrap_or(0.0),
        )
    }

    fn any_line_yet(&self) -> bool {
        self.slots
            .iter()
            .any(|s| s.record.incarnations.iter().any(|i| !i.samples.is_empty()))
    }

    fn startup_failure(&self) -> String {
        let mut msg = String::from("no node printed a stats line; node logs:");
        for s in &self.slots {
            let tail = log_tail(&s.log_path);
            let tail = if tail.is_empty() {
                "(empty)".to_string()
            } else {
                tail
            };
            msg.push_str(&format!("\n--- node {} ---\n{tail}", s.id));
        }
        msg
    }
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
pub fn run_cluster(spec: &ClusterSpec) -> Result<ClusterRun, DemoError> {
    spec.validate()?;
    let program = match &spec.program {
        Some(p) => p.clone(),
        None => match std::env::current_exe() {
            Ok(p) => p,
            Err(e) => return runtime("cannot find this executable to start nodes", e),
        },
    };
    let mut dir = TempDir::new("abcast-demo")?;
    dir.keep = spec.keep_dir;
    let table = cluster_config(spec)?;
    let (tx, rx) = mpsc::sync_channel::<Event>(4096);
    // One config file for every node, as an operator would run it: each node keeps its
    // state under `<storage.dir>/node-<id>`, so a restart finds its own directory again.
    let mut table = table;
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
    let bar = progress_bar(spec);
    let duration = Duration::from_secs_f64(spec.duration_s);
    let mut kills: Vec<KillEvent> = Vec::new();
    // (when, what): 0 = kill a follower, 1 = kill the coordinator; each restarts DOWN_TIME later.
    let mut plan: Vec<(Duration, u8)> = if spec.kill {
        vec![(duration / 3, 0), (duration * 2 / 3, 1)]
    } else {
        Vec::new()
    };
    let mut restarts: Vec<(Instant, usize, usize)> = Vec::new(); // (when, slot, kill index)
    let interrupted = interrupt_flag();
    let result = loop {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(cluster.start);
        if elapsed >= duration || interrupted.load(std::sync::atomic::Ordering::Relaxed) {
            break Ok(());
        }
        if !cluster.any_line_yet() {
            let all_dead = cluster.slots.iter().all(|s| s.eof);
            if all_dead || elapsed >= FIRST_LINE_TIMEOUT {
                cluster.reap(false);
                break Err(DemoError::Runtime(cluster.startup_failure()));
            }
        }
        if plan.first().is_some_and(|&(at, _)| elapsed >= at) {
            let what = plan.remove(0).1;
            if let Some((slot, event)) = cluster.kill_planned(what) {
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
            if let Err(e) = cluster.spawn(slot) {
                break Err(e);
            }
            kills[k].restarted_at_s = Some(cluster.elapsed_s(Instant::now()));
            bar.println(format!("restarted node {}", cluster.slots[slot].id));
        }
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(ev) => {
                cluster.handle(ev);
                while let Ok(ev) = rx.try_recv() {
                    cluster.handle(ev);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {}
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
    };
    if let Err(e) = result {
        bar.finish_and_clear();
        dir.keep = true;
        return Err(DemoError::Runtime(format!(
            "{e}\n(node logs kept in {})",
            dir.path.display()
        )));
    }
    // A restart still pending at the end would leave a node down in the final check: do it
    // now so every node gets to catch up before the stop.
    for (_, slot, k) in restarts.drain(..) {
        cluster.spawn(slot)?;
        kills[k].restarted_at_s = Some(cluster.elapsed_s(Instant::now()));
    }
    let stop = Instant::now();
    let stop_at_s = cluster.elapsed_s(stop);
    bar.set_message("load stopped; waiting for every learner to catch up".to_string());
    // Stop the load everywhere but keep every node serving, until every learner reports the
    // same delivered count twice in a row after the stop (or QUIESCE_MAX passes): a node that
    // exited first would stop voting and forwarding for the others.
    cluster.signal_all(libc::SIGUSR1);
    let mut agreed_since: Option<Instant> = None;
    while stop.elapsed() < QUIESCE_MAX {
        if let Ok(ev) = rx.recv_timeout(Duration::from_millis(20)) {
            cluster.handle(ev);
        }
        while let Ok(ev) = rx.try_recv() {
            cluster.handle(ev);
        }
        let counts: Vec<Option<u64>> = cluster
            .slots
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
        let same = if spec.learners_differ {
            // Every node's count unchanged since its previous line after the stop.
            cluster.slots.iter().all(|s| {
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
        } else {
            counts.iter().all(|c| c.is_some()) && counts.windows(2).all(|w| w[0] == w[1])
        };
        match (same, agreed_since) {
            (true, None) => agreed_since = Some(Instant::now()),
            (true, Some(t)) if t.elapsed() >= QUIESCE_STABLE => break,
            (false, _) => agreed_since = None,
            _ => {}
        }
    }
    bar.set_message("load stopped; waiting for final stats".to_string());
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
    let mut delivery_logs = Vec::new();
    let mut delivery_log_error = None;
    for slot in &cluster.slots {
        match abcast_node::deliverylog::read_node(
            slot.id,
            &data_dir.join(format!("node-{}", slot.id)),
        ) {
            Ok(logs) => delivery_logs.extend(logs),
            Err(e) => delivery_log_error = Some(e),
        }
    }
    if delivery_log_error.is_some() {
        delivery_logs.clear();
    }
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

// ---------------------------------------------------------------------------------------
// Analysis

/// One node's figures in the summary.
#[derive(Debug, Clone)]
pub struct NodeReport {
    pub id: u32,
    pub values_per_s: f64,
    pub mbit_per_s: f64,
    /// user + sys CPU time over wall time, all incarnations; 100 = one core busy.
    pub cpu_pct: f64,
    pub rss_kib_max: u64,
    pub delivered_values: u64,
    pub order_hash: String,
    pub incarnations: usize,
    pub final_seen: bool,
    /// How the last incarnation ended, in words.
    pub exit: String,
    pub bad_lines: u64,
}

/// One second of the timeline: values/s delivered at each node (`None`: no line from it).
#[derive(Debug, Clone)]
pub struct TimelineRow {
    pub second: u64,
    pub values_per_s: Vec<Option<f64>>,
    /// Latency of the proposals delivered in this second: the median of the nodes'
    /// interval medians, and the worst interval's p99 (intervals of [`STATS_MS`]).
    pub latency_us_p50: Option<f64>,
    pub latency_us_p99: Option<f64>,
    pub events: Vec<String>,
}

/// The longest time a learner delivered nothing during the load phase.
#[derive(Debug, Clone, Copy)]
pub struct Stall {
    pub node: u32,
    pub from_s: f64,
    pub to_s: f64,
}

/// The figures and verdicts of one run.
#[derive(Debug, Clone)]
pub struct Report {
    pub nodes: u32,
    pub value_size_bytes: u64,
    pub duration_s: f64,
    pub rate_values_per_s: u64,
    pub window_values: Option<u64>,
    pub kill: bool,
    /// Median over learners of each learner's delivery rate in the load phase.
    pub values_per_s: f64,
    pub mbit_per_s: f64,
    pub latency: LatencySummary,
    pub per_node: Vec<NodeReport>,
    pub learners_agree: bool,
    /// Instances compared one by one across learners (from the delivery logs), 0 if the
    /// comparison was by whole-sequence hash.
    pub instances_compared: u64,
    /// Instances restarted in-memory learners passed over (trimmed at every acceptor).
    pub trimmed_skipped: u64,
    /// Values delivered by the most advanced learner.
    pub delivered: u64,
    pub agreement: Vec<String>,
    pub duplicates_total: u64,
    pub duplicates: Vec<String>,
    /// Empty when every acknowledged value was delivered by every learner.
    pub lost: Vec<String>,
    pub acked_total: u64,
    /// Anything else that went wrong: crashes, bad lines, nodes that would not stop.
    pub problems: Vec<String>,
    pub timeline: Vec<TimelineRow>,
    pub kills: Vec<KillEvent>,
    pub longest_stall: Option<Stall>,
    pub kept_dir: Option<PathBuf>,
    /// Ctrl-C ended the load at this many seconds.
    pub interrupted_at_s: Option<f64>,
}

impl Report {
    /// The demo's verdict: learners agree, nothing lost, nothing duplicated, no node failed.
    pub fn ok(&self) -> bool {
        self.learners_agree
            && self.lost.is_empty()
            && self.duplicates_total == 0
            && self.problems.is_empty()
    }
}

/// Throughput of one node over the load phase: the sum over its incarnations of what it
/// delivered between its first line after the warm-up and its last line before the stop,
/// over the sum of those times (node clock). Returns (values/s, Mbit/s).
fn node_rate(record: &NodeRecord, warmup_s: f64, stop_at_s: f64) -> Option<(f64, f64)> {
    let mut values = 0u64;
    let mut bytes = 0u64;
    let mut time_us = 0u64;
    for inc in &record.incarnations {
        let window: Vec<&Sample> = inc
            .samples
            .iter()
            .filter(|s| s.at_s >= warmup_s && s.at_s <= stop_at_s && s.line.kind == LineKind::Stats)
            .collect();
        if let (Some(a), Some(b)) = (window.first(), window.last()) {
            values += b
                .line
                .delivered_values
                .saturating_sub(a.line.delivered_values);
            bytes += b
                .line
                .delivered_bytes
                .saturating_sub(a.line.delivered_bytes);
            time_us += b.line.t_us.saturating_sub(a.line.t_us);
        }
    }
    if time_us == 0 {
        return None;
    }
    let secs = time_us as f64 / 1e6;
    Some((values as f64 / secs, bytes as f64 * 8.0 / 1e6 / secs))
}

fn timeline(run: &ClusterRun) -> Vec<TimelineRow> {
    // Whole seconds only, so every row is a rate; a last partial second is left out.
    let seconds = run.stop_at_s.floor().max(1.0) as usize;
    let mut rows: Vec<TimelineRow> = (0..seconds)
        .map(|s| TimelineRow {
            second: s as u64,
            values_per_s: vec![None; run.nodes.len()],
            latency_us_p50: None,
            latency_us_p99: None,
            events: Vec::new(),
        })
        .collect();
    let mut p50s: Vec<Vec<f64>> = vec![Vec::new(); seconds];
    for (col, record) in run.nodes.iter().enumerate() {
        for inc in &record.incarnations {
            let mut prev: Option<&Sample> = None;
            for s in inc.samples.iter().filter(|s| s.at_s < seconds as f64) {
                let bin = (s.at_s as usize).min(seconds - 1);
                if let Some(l) = s.interval_latency {
                    p50s[bin].push(l.p50_us);
                    let worst = rows[bin].latency_us_p99.get_or_insert(0.0);
                    *worst = worst.max(l.p99_us);
                }
                let cell = rows[bin].values_per_s[col].get_or_insert(0.0);
                if let Some(p) = prev {
                    *cell +=
                        s.line
                            .delivered_values
                            .saturating_sub(p.line.delivered_values) as f64;
                }
                prev = Some(s);
            }
        }
    }
    for (row, p) in rows.iter_mut().zip(&p50s) {
        row.latency_us_p50 = stats::median(p);
    }
    for k in &run.kills {
        let bin = (k.at_s as usize).min(seconds - 1);
        rows[bin]
            .events
            .push(format!("kill -9 node {} ({})", k.node, k.role));
        if let Some(r) = k.restarted_at_s {
            let bin = (r as usize).min(seconds - 1);
            rows[bin].events.push(format!("restart node {}", k.node));
        }
    }
    rows
}

/// The longest stretch of the load phase in which one learner's delivered count did not
/// move, from the last line before the stall to the first line after it (or to its last
/// line in the load phase, for a stall that never ended).
fn longest_stall(run: &ClusterRun, warmup_s: f64) -> Option<Stall> {
    let mut best: Option<Stall> = None;
    let mut consider = |stall: Stall| {
        if best.is_none_or(|x| stall.to_s - stall.from_s > x.to_s - x.from_s) {
            best = Some(stall);
        }
    };
    for record in &run.nodes {
        for inc in &record.incarnations {
            let window: Vec<&Sample> = inc
                .samples
                .iter()
                .filter(|s| s.at_s >= warmup_s && s.at_s <= run.stop_at_s)
                .collect();
            let mut since: Option<&Sample> = None;
            for pair in window.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                if b.line.delivered_values == a.line.delivered_values {
                    since.get_or_insert(a);
                } else if let Some(from) = since.take() {
                    consider(Stall {
                        node: record.id,
                        from_s: from.at_s,
                        to_s: b.at_s,
                    });
                }
            }
            if let (Some(from), Some(last)) = (since, window.last()) {
                consider(Stall {
                    node: record.id,
                    from_s: from.at_s,
                    to_s: last.at_s,
                });
            }
        }
    }
    best
}

/// Turns the raw lines of a run into figures and verdicts.
/// Seconds at the start of a run left out of the throughput figures (the ring fills its
/// windows and connections first): a fifth of the run, at most one second.
pub fn warmup_s(duration_s: f64) -> f64 {
    (duration_s / 5.0).min(1.0)
}

pub fn analyse(run: &ClusterRun) -> Report {
    analyse_from(run, warmup_s(run.spec.duration_s))
}

/// [`analyse`] with the throughput figures taken from `warmup_s` on (a benchmark whose
/// back-end needs longer to reach its steady state than the ring does).
pub fn analyse_from(run: &ClusterRun, warmup_s: f64) -> Report {
    let spec = &run.spec;
    let mut per_node = Vec::new();
    let mut problems = Vec::new();
    for record in &run.nodes {
        let rate = node_rate(record, warmup_s, run.stop_at_s);
        let mut cpu_ms = 0u64;
        let mut wall_s = 0.0;
        let mut rss_kib_max = 0u64;
        let mut bad_lines = 0u64;
        for (n, inc) in record.incarnations.iter().enumerate() {
            if let Some(last) = inc.samples.last() {
                cpu_ms += last.line.cpu_user_ms + last.line.cpu_sys_ms;
                wall_s += (last.at_s - inc.spawned_at_s).max(0.0);
            }
            rss_kib_max = inc
                .samples
                .iter()
                .map(|s| s.line.rss_kib)
                .max()
                .unwrap_or(0)
                .max(rss_kib_max);
            bad_lines += inc.bad_lines;
            if let Some(first) = &inc.first_bad_line {
                problems.push(format!(
                    "node {} (life {}): {} unreadable stdout line(s), first: {first}",
                    record.id,
                    n + 1,
                    inc.bad_lines
                ));
            }
            match &inc.ended {
                Ended::Unexpected { status, log_tail } => {
                    let tail = if log_tail.is_empty() {
                        String::new()
                    } else {
                        format!("; log ends:\n{log_tail}")
                    };
                    problems.push(format!(
                        "node {} (life {}) stopped unexpectedly: {status}{tail}",
                        record.id,
                        n + 1
                    ));
                }
                Ended::KilledAfterTimeout => problems.push(format!(
                    "node {} did not exit within {} s of SIGTERM and was killed",
                    record.id,
                    STOP_GRACE.as_secs()
                )),
                _ => {}
            }
            if inc.samples.iter().any(|s| s.line.node != record.id) {
                problems.push(format!(
                    "node {} printed stats lines with another node id",
                    record.id
                ));
            }
        }
        let last_inc = record.incarnations.last();
        let last = last_inc.and_then(|i| i.last());
        let exit = match last_inc.map(|i| &i.ended) {
            Some(Ended::Clean) => "ok".to_string(),
            Some(Ended::KilledAfterTimeout) => "hung, killed".to_string(),
            Some(Ended::KilledByDemo) => "killed".to_string(),
            Some(Ended::Unexpected { status, .. }) => status.clone(),
            Some(Ended::Running) | None => "?".to_string(),
        };
        per_node.push(NodeReport {
            id: record.id,
            values_per_s: rate.map_or(0.0, |r| r.0),
            mbit_per_s: rate.map_or(0.0, |r| r.1),
            cpu_pct: if wall_s > 0.0 {
                cpu_ms as f64 / 10.0 / wall_s
            } else {
                0.0
            },
            rss_kib_max,
            delivered_values: last.map_or(0, |l| l.delivered_values),
            order_hash: last.map_or_else(String::new, |l| l.order_hash.clone()),
            incarnations: record.incarnations.len(),
            final_seen: last_inc.is_some_and(|i| i.final_seen()),
            exit,
            bad_lines,
        });
    }
    let values: Vec<f64> = per_node.iter().map(|n| n.values_per_s).collect();
    let mbits: Vec<f64> = per_node.iter().map(|n| n.mbit_per_s).collect();

    // Latency: the last line of every incarnation covers that incarnation's whole life.
    let last_lines: Vec<&StatsLine> = run
        .nodes
        .iter()
        .flat_map(|r| r.incarnations.iter().filter_map(|i| i.last()))
        .collect();
    let latency = stats::merge_latency(last_lines.iter().copied());

    // Agreement: every learner's final count and order hash are equal.
    let mut agreement = Vec::new();
    let delivered = per_node
        .iter()
        .map(|n| n.delivered_values)
        .max()
        .unwrap_or(0);
    let mut learners_agree = !per_node.is_empty();
    for n in &per_node {
        if !n.final_seen {
            learners_agree = false;
            agreement.push(format!("node {} printed no final stats line", n.id));
        }
        if n.delivered_values < delivered {
            learners_agree = false;
            agreement.push(format!(
                "node {} is behind: {} values delivered, {} at the most advanced learner",
                n.id,
                group(n.delivered_values),
                group(delivered)
            ));
        }
    }
    let leaders: Vec<&NodeReport> = per_node
        .iter()
        .filter(|n| n.delivered_values == delivered)
        .collect();
    let hashes: BTreeSet<&str> = leaders.iter().map(|n| n.order_hash.as_str()).collect();
    if hashes.len() > 1 {
        learners_agree = false;
        agreement.push(format!(
            "ORDER DIFFERS: learners with {} values report different order hashes: {}",
            group(delivered),
            leaders
                .iter()
                .map(|n| format!("node {} {}", n.id, n.order_hash))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    // Duplicates: any learner, any incarnation.
    let mut duplicates_total = 0;
    let mut duplicates = Vec::new();
    for record in &run.nodes {
        let d: u64 = record
            .incarnations
            .iter()
            .filter_map(|i| i.last())
            .map(|l| l.duplicate_deliveries)
            .sum();
        if d > 0 {
            duplicates.push(format!(
                "node {} delivered {} value(s) twice",
                record.id,
                group(d)
            ));
        }
        duplicates_total += d;
    }

    // Loss: for every origin, each learner's final delivered_by_origin must cover what that
    // origin's incarnations reported acknowledged (each incarnation counts from zero).
    let mut acked_by_origin: BTreeMap<u32, u64> = BTreeMap::new();
    for record in &run.nodes {
        for last in record.incarnations.iter().filter_map(|i| i.last()) {
            for (&origin, &acked) in &last.acked_by_origin {
                *acked_by_origin.entry(origin).or_default() += acked;
            }
        }
    }
    let mut lost = Vec::new();
    for record in &run.nodes {
        let Some(last) = record.incarnations.last().and_then(|i| i.last()) else {
            continue;
        };
        for (&origin, &acked) in &acked_by_origin {
            let got = last.delivered_by_origin.get(&origin).copied().unwrap_or(0);
            if got < acked {
                lost.push(format!(
                    "node {} delivered {} values from origin {origin}, but {} were acknowledged",
                    record.id,
                    group(got),
                    group(acked)
                ));
            }
        }
    }
    // With delivery logs, compare learners instance by instance: a learner restarted on
    // in-memory storage starts from the oldest instance still held, so whole-sequence counts
    // and hashes cannot match, but every instance it delivered must.
    let mut instances_compared = 0;
    let mut trimmed_skipped = 0;
    if !run.delivery_logs.is_empty() {
        let verdict = abcast_node::deliverylog::compare(&run.delivery_logs, &acked_by_origin);
        instances_compared = verdict.instances_compared;
        trimmed_skipped = verdict.trimmed_skipped;
        agreement.retain(|a| a.contains("printed no final stats line"));
        learners_agree = agreement.is_empty() && verdict.disagreements.is_empty();
        agreement.extend(verdict.disagreements);
        duplicates.extend(verdict.duplicates.iter().cloned());
        duplicates_total += verdict.duplicates.len() as u64;
        lost = verdict.lost;
    } else if let Some(e) = &run.delivery_log_error {
        agreement.push(format!(
            "delivery logs unreadable ({e}); compared whole sequences only"
        ));
    }
    Report {
        nodes: spec.nodes,
        value_size_bytes: spec.value_size_bytes,
        duration_s: spec.duration_s,
        rate_values_per_s: spec.rate_values_per_s,
        window_values: spec.window_values,
        kill: spec.kill,
        values_per_s: stats::median(&values).unwrap_or(0.0),
        mbit_per_s: stats::median(&mbits).unwrap_or(0.0),
        latency,
        per_node,
        learners_agree,
        instances_compared,
        trimmed_skipped,
        delivered,
        agreement,
        duplicates_total,
        duplicates,
        lost,
        acked_total: acked_by_origin.values().sum(),
        problems,
        timeline: timeline(run),
        kills: run.kills.clone(),
        longest_stall: longest_stall(run, warmup_s),
        kept_dir: run.kept_dir.clone(),
        interrupted_at_s: run.interrupted.then_some(run.stop_at_s),
    }
}

// ---------------------------------------------------------------------------------------
// Output

/// 1234567 -> "1 234 567": long counts are read at a glance.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// A latency in microseconds, shown in milliseconds with sensible precision.
pub fn ms(us: f64) -> String {
    let v = us / 1000.0;
    if v < 10.0 {
        format!("{v:.2} ms")
    } else if v < 100.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.0} ms")
    }
}

/// A byte count with a binary unit: 32768 -> "32 KiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The human summary, for a person who has never seen the project.
pub fn render_summary(r: &Report) -> String {
    let mut s = String::new();
    let rate = if r.rate_values_per_s == 0 {
        "as fast as the ring accepts".to_string()
    } else {
        format!("{} values/s offered", group(r.rate_values_per_s))
    };
    s += &format!(
        "abcast demo: {} nodes on 127.0.0.1, {} values,\n{} s of load, {rate}.\n",
        r.nodes,
        bytes(r.value_size_bytes),
        r.duration_s
    );
    s += "Every node proposes, orders (U-Ring Paxos) and delivers";
    match r.window_values {
        Some(w) => s += &format!(",\nwith at most {w} of its values in flight.\n\n"),
        None => s += ".\n\n",
    }
    s += "Throughput, delivered per learner (median of the nodes):\n";
    s += &format!(
        "  {} values/s   {:.1} Mbit/s\n\n",
        group(r.values_per_s.round() as u64),
        r.mbit_per_s
    );
    let exact = if r.latency.exact {
        ""
    } else {
        " (approximate: worst node)"
    };
    s += &format!(
        "Latency, propose -> delivery, {} values{exact}:\n",
        group(r.latency.count)
    );
    s += &format!(
        "  p50 {}   p99 {}   p99.9 {}\n\n",
        ms(r.latency.p50_us),
        ms(r.latency.p99_us),
        ms(r.latency.p999_us)
    );
    s += "Per node (CPU 100 % = one core busy):\n";
    s += "  node  values/s  Mbit/s  CPU %  RSS MiB   delivered  exit\n";
    for n in &r.per_node {
        let lives = if n.incarnations > 1 {
            format!(", {} lives", n.incarnations)
        } else {
            String::new()
        };
        s += &format!(
            "  {:>4}  {:>8}  {:>6.1}  {:>5.0}  {:>7.1}  {:>10}  {}{lives}\n",
            n.id,
            group(n.values_per_s.round() as u64),
            n.mbit_per_s,
            n.cpu_pct,
            n.rss_kib_max as f64 / 1024.0,
            group(n.delivered_values),
            n.exit
        );
    }
    s += "\nAgreement (same values, same order at every learner):\n";
    if r.learners_agree && r.instances_compared > 0 {
        s += &format!(
            "  yes: {} instances compared one by one across {} learners: the same batch at\n  every instance each learner delivered, no gap, all caught up to the end.\n",
            group(r.instances_compared),
            r.per_node.len()
        );
        if r.trimmed_skipped > 0 {
            s += &format!(
                "  note: restarted learners skipped {} instance(s) that every acceptor had\n  already trimmed (in-memory storage keeps a bounded log; snapshots come with\n  durable storage).\n",
                group(r.trimmed_skipped)
            );
        }
    } else if r.learners_agree {
        let hash = r.per_node.first().map_or("", |n| n.order_hash.as_str());
        s += &format!(
            "  yes: {} learners delivered {} values,\n  order hash {hash} at each.\n",
            r.per_node.len(),
            group(r.delivered)
        );
    } else {
        s += "  NO:\n";
        for a in &r.agreement {
            s += &format!("  - {a}\n");
        }
    }
    s += "\nNothing lost, nothing duplicated:\n";
    if r.duplicates.is_empty() {
        s += "  duplicates: none at any learner\n";
    } else {
        for d in &r.duplicates {
            s += &format!("  - DUPLICATE: {d}\n");
        }
    }
    if r.lost.is_empty() {
        s += &format!(
            "  every learner delivered all {} acknowledged values\n",
            group(r.acked_total)
        );
    } else {
        for l in &r.lost {
            s += &format!("  - LOST: {l}\n");
        }
    }
    if r.kill {
        s += "\nCrash test (kill -9, restart after about 1 s):\n";
        for k in &r.kills {
            let back = k.restarted_at_s.map_or("never restarted".to_string(), |t| {
                format!("back at {t:.1} s")
            });
            s += &format!(
                "  {:>5.1} s  node {} ({}) killed, {back}\n",
                k.at_s, k.node, k.role
            );
            if !k.note.is_empty() {
                s += &format!("         {}\n", k.note);
            }
        }
        if let Some(st) = r.longest_stall {
            s += &format!(
                "  longest stall: {:.2} s at node {} ({:.1} s to {:.1} s)\n",
                st.to_s - st.from_s,
                st.node,
                st.from_s,
                st.to_s
            );
        }
        s += "\nTimeline, thousands of values delivered per second\n";
        s += "('-' = no stats from that node in that second):\n";
        s += "  second";
        for n in &r.per_node {
            s += &format!("  node{:<2}", n.id);
        }
        s += "\n";
        for row in &r.timeline {
            s += &format!("  {:>6}", row.second);
            for v in &row.values_per_s {
                match v {
                    Some(v) => s += &format!("  {:>6.1}", v / 1000.0),
                    None => s += &format!("  {:>6}", "-"),
                }
            }
            if !row.events.is_empty() {
                s += &format!("  <- {}", row.events.join(", "));
            }
            s += "\n";
        }
    }
    if !r.problems.is_empty() {
        s += "\nProblems:\n";
        for p in &r.problems {
            s += &format!("  - {}\n", p.replace('\n', "\n    "));
        }
    }
    if let Some(at) = r.interrupted_at_s {
        s += &format!(
            "\nInterrupted by Ctrl-C at {at:.1} s: the figures cover the load until then.\n"
        );
    }
    if let Some(dir) = &r.kept_dir {
        s += &format!("\nConfig, logs and storage kept in {}\n", dir.display());
    }
    s += &format!("\nResult: {}\n", if r.ok() { "OK" } else { "FAILED" });
    s
}

/// The `--json` object; field names carry their units.
pub fn report_json(r: &Report) -> serde_json::Value {
    let kill = if r.kill {
        json!({
            "events": r.kills.iter().map(|k| json!({
                "at_s": k.at_s, "node": k.node, "role": k.role,
                "restarted_at_s": k.restarted_at_s, "note": k.note,
            })).collect::<Vec<_>>(),
            "longest_stall_s": r.longest_stall.map(|s| s.to_s - s.from_s),
            "nothing_lost": r.lost.is_empty(),
            "no_duplicates": r.duplicates_total == 0,
            "timeline_values_per_s": r.timeline.iter().map(|row| row.values_per_s.clone()).collect::<Vec<_>>(),
        })
    } else {
        serde_json::Value::Null
    };
    json!({
        "ok": r.ok(),
        "nodes": r.nodes,
        "value_size": r.value_size_bytes,
        "duration_s": r.duration_s,
        "rate_values_per_s": r.rate_values_per_s,
        "window_values": r.window_values,
        "values_per_s": r.values_per_s,
        "mbit_per_s": r.mbit_per_s,
        "latency_us_p50": r.latency.p50_us,
        "latency_us_p99": r.latency.p99_us,
        "latency_us_p999": r.latency.p999_us,
        "latency_count": r.latency.count,
        "latency_exact": r.latency.exact,
        "learners_agree": r.learners_agree,
        "delivered": r.delivered,
        "acked": r.acked_total,
        "duplicate_deliveries": r.duplicates_total,
        "lost": r.lost,
        "agreement_notes": r.agreement,
        "problems": r.problems,
        "cpu_pct_per_node": r.per_node.iter().map(|n| n.cpu_pct).collect::<Vec<_>>(),
        "rss_kib_per_node": r.per_node.iter().map(|n| n.rss_kib_max).collect::<Vec<_>>(),
        "values_per_s_per_node": r.per_node.iter().map(|n| n.values_per_s).collect::<Vec<_>>(),
        "kill": kill,
        "kept_dir": r.kept_dir.as_ref().map(|d| d.display().to_string()),
        "interrupted_at_s": r.interrupted_at_s,
    })
}

/// Draws the run second by second into `dir/plot.png`: values delivered per node (the
/// demo's timeline) and the latency of the proposals delivered in each second.
pub fn write_plot(dir: &Path, r: &Report) -> Result<PathBuf, String> {
    use crate::bench::plot::{Line, LinePanel, draw_lines};
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join("plot.png");
    // Each row is the second [s, s + 1): drawn at its middle.
    let at = |row: &TimelineRow| row.second as f64 + 0.5;
    let rates: Vec<Line> = r
        .per_node
        .iter()
        .enumerate()
        .map(|(col, n)| Line {
            label: format!("node {}", n.id),
            points: r
                .timeline
                .iter()
                .filter_map(|row| {
                    row.values_per_s
                        .get(col)
                        .copied()
                        .flatten()
                        .map(|v| (at(row), v))
                })
                .collect(),
            markers: false,
        })
        .collect();
    // Latency in µs while it is short, in ms once it is not: the axis labels are integers.
    let worst_us = r
        .timeline
        .iter()
        .filter_map(|row| row.latency_us_p99)
        .fold(0.0, f64::max);
    let (unit, per_us) = if worst_us >= 10_000.0 {
        ("ms", 1e-3)
    } else {
        ("µs", 1.0)
    };
    let latency = |label: &str, f: &dyn Fn(&TimelineRow) -> Option<f64>| Line {
        label: label.to_string(),
        points: r
            .timeline
            .iter()
            .filter_map(|row| f(row).map(|v| (at(row), v * per_us)))
            .collect(),
        markers: false,
    };
    let x_desc = if r.kills.is_empty() {
        "seconds since the nodes started".to_string()
    } else {
        let kills: Vec<String> = r
            .kills
            .iter()
            .map(|k| match k.restarted_at_s {
                Some(back) => format!("node {} at {:.1} s (back at {back:.1} s)", k.node, k.at_s),
                None => format!("node {} at {:.1} s", k.node, k.at_s),
            })
            .collect();
        format!(
            "seconds since the nodes started; kill -9 {}",
            kills.join(", ")
        )
    };
    let title = format!(
        "abcast demo: {} nodes, {} values, {} values/s ({:.0} Mbit/s) per learner, {}",
        r.nodes,
        bytes(r.value_size_bytes),
        group(r.values_per_s.round() as u64),
        r.mbit_per_s,
        if r.ok() { "checks OK" } else { "checks FAILED" }
    );
    let panels = [
        LinePanel {
            caption: "Values delivered per second, per node".into(),
            x_desc: x_desc.clone(),
            y_desc: "values/s".into(),
            lines: rates,
        },
        LinePanel {
            caption: format!(
                "Latency, propose to delivery at the proposer, per second ({STATS_MS} ms intervals)"
            ),
            x_desc,
            y_desc: format!("latency ({unit})"),
            lines: vec![
                latency("p50 (median over nodes)", &|row| row.latency_us_p50),
                latency("p99 (worst node)", &|row| row.latency_us_p99),
            ],
        },
    ];
    draw_lines(&path, &title, &panels)?;
    Ok(path)
}

/// `abcast demo`: returns the process exit status (0 only if the run checked out).
pub fn run_demo(args: &DemoArgs) -> Result<u8, DemoError> {
    let spec = ClusterSpec::from_args(args);
    spec.validate()?;
    if !args.json {
        eprintln!(
            "starting {} nodes for {} s of load ({} values){}...",
            spec.nodes,
            spec.duration_s,
            bytes(spec.value_size_bytes),
            if spec.kill {
                ", with kill -9 and restarts"
            } else {
                ""
            }
        );
    }
    let run = run_cluster(&spec)?;
    let report = analyse(&run);
    let (stamp, _) = crate::bench::utc_now();
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(format!("demo-{stamp}")));
    // A plot that cannot be drawn is said, and the run's verdict stands.
    let plot = write_plot(&dir, &report);
    let mut out = std::io::stdout().lock();
    let text = if args.json {
        let mut j = report_json(&report);
        j["plot"] = json!(plot.as_ref().ok().map(|p| p.display().to_string()));
        j.to_string() + "\n"
    } else {
        let summary = render_summary(&report);
        let plot_line = match &plot {
            Ok(p) => format!(
                "\nPlot (values/s per node and latency, second by second): {}\n",
                p.display()
            ),
            Err(e) => format!("\nNo plot: {e}\n"),
        };
        match summary.rfind("\nResult: ") {
            Some(at) => format!("{}{plot_line}{}", &summary[..at], &summary[at..]),
            None => summary + &plot_line,
        }
    };
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        return runtime("cannot write the summary", e);
    }
    Ok(if report.ok() { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(nodes: u32) -> ClusterSpec {
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
        }
    }

    #[test]
    fn generated_config_with_edits_is_accepted_by_the_node() {
        let table = cluster_config(&spec(4)).unwrap();
        let text = toml::to_string(&table).unwrap();
        let cfg = abcast_node::nodeconfig::parse(&text, Some(3), Path::new("/tmp")).unwrap();
        assert_eq!(cfg.members.len(), 4);
        assert_eq!(cfg.transport.buffer_size, 131_072);
        let mut ports = BTreeSet::new();
        config_ports(&toml::Value::Table(table), "", &mut ports);
        assert_eq!(
            ports.len(),
            8,
            "a peer and a client port per node: {ports:?}"
        );
    }

    #[test]
    fn a_node_that_cannot_start_is_a_runtime_error_quoting_its_log() {
        let mut s = spec(3);
        s.config_edits.clear();
        s.program = Some(PathBuf::from("/bin/false"));
        match run_cluster(&s) {
            Err(DemoError::Runtime(m)) => {
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
    fn set_toml_key_creates_tables_and_refuses_to_descend_into_values() {
        let mut t = toml::Table::new();
        set_toml_key(&mut t, "a.b.c", toml::Value::Integer(1)).unwrap();
        assert_eq!(t["a"]["b"]["c"].as_integer(), Some(1));
        assert!(set_toml_key(&mut t, "a.b.c.d", toml::Value::Integer(2)).is_err());
    }

    #[test]
    fn set_toml_key_indexes_arrays_of_tables() {
        let mut t: toml::Table = abcast_node::nodeconfig::local_cluster(3, 7400)
            .parse()
            .unwrap();
        let learner = toml::Value::Array(vec![toml::Value::String("learner".into())]);
        set_toml_key(&mut t, "members[2].roles", learner.clone()).unwrap();
        assert_eq!(t["members"][2]["roles"], learner);
        assert!(set_toml_key(&mut t, "members[3].roles", learner.clone()).is_err());
        assert!(set_toml_key(&mut t, "members[x].roles", learner.clone()).is_err());
        assert!(set_toml_key(&mut t, "cluster_id[0].a", learner).is_err());
    }

    #[test]
    fn flag_combinations_are_checked_naming_the_flag() {
        let mut s = spec(2);
        s.kill = true;
        assert!(matches!(s.validate(), Err(DemoError::Usage(m)) if m.contains("--nodes")));
        let mut s = spec(3);
        s.kill = true;
        s.duration_s = 3.0;
        assert!(matches!(s.validate(), Err(DemoError::Usage(m)) if m.contains("--duration")));
        let mut s = spec(3);
        s.duration_s = f64::NAN;
        assert!(s.validate().is_err());
        assert!(spec(0).validate().is_err());
        assert!(spec(65).validate().is_err());
    }

    #[test]
    fn numbers_are_shown_with_units_people_read() {
        assert_eq!(group(1_234_567), "1 234 567");
        assert_eq!(group(12), "12");
        assert_eq!(bytes(32 << 10), "32 KiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(ms(150.0), "0.15 ms");
        assert_eq!(ms(25_000.0), "25.0 ms");
    }

    fn sample(at_s: f64, delivered: u64, json: &str) -> Sample {
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

    const LINE: &str = r#"{"type":"final","node":0,"incarnation":0,"t_us":1,"delivered_values":0,"delivered_bytes":0,"delivered_instance":0,"order_hash":"ab","proposed_values":0,"acked_values":0,"busy_rejections":0,"coordinator":0,"cpu_user_ms":0,"cpu_sys_ms":0,"rss_kib":0,"lat_count":0,"lat_us_p50":0,"lat_us_p99":0,"lat_us_p999":0,"delivered_by_origin":{"0":5},"acked_by_origin":{"0":7},"duplicate_deliveries":0}"#;

    fn run_of(records: Vec<NodeRecord>) -> ClusterRun {
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

    fn record(id: u32, samples: Vec<Sample>) -> NodeRecord {
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

    #[test]
    fn a_learner_behind_and_an_acknowledged_value_missing_are_reported() {
        let a = record(0, vec![sample(3.5, 10, LINE)]);
        let b = record(
            1,
            vec![sample(3.5, 9, &LINE.replace("\"node\":0", "\"node\":1"))],
        );
        let report = analyse(&run_of(vec![a, b]));
        assert!(!report.learners_agree);
        assert!(
            report
                .agreement
                .iter()
                .any(|m| m.contains("node 1 is behind")),
            "{:?}",
            report.agreement
        );
        // Origin 0 acknowledged 7 (reported by both nodes: 14), learners delivered 5.
        assert_eq!(report.lost.len(), 2, "{:?}", report.lost);
        assert!(!report.ok());
    }

    #[test]
    fn different_order_at_equal_counts_is_a_disagreement() {
        let a = record(0, vec![sample(3.5, 10, LINE)]);
        let other = LINE
            .replace("\"node\":0", "\"node\":1")
            .replace("\"ab\"", "\"cd\"");
        let b = record(1, vec![sample(3.5, 10, &other)]);
        let report = analyse(&run_of(vec![a, b]));
        assert!(!report.learners_agree);
        assert!(report.agreement.iter().any(|m| m.contains("ORDER DIFFERS")));
    }

    #[test]
    fn the_timeline_carries_each_seconds_latency_and_the_plot_draws_it() {
        let lat = |p50: f64, p99: f64| {
            Some(stats::IntervalLatency {
                count: 10,
                p50_us: p50,
                p99_us: p99,
            })
        };
        let with = |at_s: f64, delivered: u64, l| Sample {
            interval_latency: l,
            ..sample(at_s, delivered, LINE)
        };
        let a = record(
            0,
            vec![
                with(0.2, 0, lat(100.0, 900.0)),
                with(0.7, 50, lat(300.0, 400.0)),
                with(1.5, 100, None),
            ],
        );
        let b = record(1, vec![with(0.5, 0, lat(200.0, 2_000.0))]);
        let rows = timeline(&run_of(vec![a, b]));
        assert_eq!(
            rows[0].latency_us_p50,
            Some(200.0),
            "the median of 100, 300, 200"
        );
        assert_eq!(rows[0].latency_us_p99, Some(2_000.0), "the worst interval");
        assert_eq!(rows[1].latency_us_p50, None, "no interval with samples");
        let dir = std::env::temp_dir().join(format!("abcast-demo-plot-{}", std::process::id()));
        let report = analyse(&run_of(vec![record(
            0,
            vec![with(0.5, 10, lat(80.0, 95.0))],
        )]));
        let path = write_plot(&dir, &report).unwrap();
        assert!(fs::metadata(&path).unwrap().len() > 10_000);
        fs::remove_dir_all(&dir).unwrap();
    }
}
